import Foundation
import PCastImpairment
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A UDP socket on 127.0.0.1 for the tests: send to a port, receive with a timeout.
final class LoopbackSocket: @unchecked Sendable {  // used from one thread at a time
    let fd: Int32
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        self.fd = fd
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var size: Int32 = 4 << 20
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8], to port: Int) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        _ = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
    }

    /// The next datagram and its sender's port, or nil after `timeout` milliseconds.
    func receive(timeout: Int32) -> (bytes: [UInt8], port: Int)? {
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, timeout) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 2048)
        var from = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let count = buffer.withUnsafeMutableBytes { raw in
            withUnsafeMutablePointer(to: &from) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, raw.baseAddress, raw.count, 0, $0, &length) } }
        }
        guard count >= 0 else { return nil }
        return (Array(buffer[0..<count]), Int(UInt16(bigEndian: from.sin_port)))
    }
}

/// Echoes every datagram back to its sender, on a thread of its own; records senders' ports.
final class EchoServer: Sendable {
    let port: Int
    let senders = Mutex<Set<Int>>([])
    let received = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)

    init() throws {
        let socket = try LoopbackSocket()
        port = socket.port
        let thread = Thread { [self] in
            while !stopped.load(ordering: .relaxed) {
                guard let (bytes, from) = socket.receive(timeout: 20) else { continue }
                received.add(1, ordering: .relaxed)
                senders.withLock { _ = $0.insert(from) }
                socket.send(bytes, to: from)
            }
        }
        thread.start()
    }

    func stop() { stopped.store(true, ordering: .relaxed) }
}

@Suite("UDP impairment proxy", .serialized)
struct UDPImpairmentProxyTests {
    /// Sends `count` numbered packets through the proxy and returns the numbers echoed back.
    func exchange(_ client: LoopbackSocket, via proxy: UDPImpairmentProxy, count: Int, first: Int = 0) -> Set<Int> {
        for number in first..<(first + count) {
            client.send([UInt8(number >> 8 & 0xFF), UInt8(number & 0xFF)] + [UInt8](repeating: 7, count: 198), to: proxy.port)
            if number % 50 == 0 { usleep(1_000) }
        }
        var echoed = Set<Int>()
        while let (bytes, _) = client.receive(timeout: 300) { echoed.insert(Int(bytes[0]) << 8 | Int(bytes[1])) }
        return echoed
    }

    @Test("forwards both ways, one upstream address per client, and loses only where asked")
    func forwardsAndLoses() throws {
        let server = try EchoServer()
        defer { server.stop() }
        let proxy = try UDPImpairmentProxy(server: "127.0.0.1", serverPort: server.port, seed: 11)
        defer { proxy.stop() }
        let a = try LoopbackSocket(), b = try LoopbackSocket()
        #expect(exchange(a, via: proxy, count: 200).count == 200)
        #expect(exchange(b, via: proxy, count: 10).count == 10)
        #expect(server.senders.withLock { $0.count } == 2)

        proxy.setProfile(.init(loss: .uniform(0.10)), for: .toClient)
        let before = server.received.load(ordering: .relaxed)
        let echoed = exchange(a, via: proxy, count: 2000, first: 1000)
        #expect(server.received.load(ordering: .relaxed) - before == 2000, "the loss was towards the client only")
        let lost = 2000 - echoed.count
        #expect(lost > 140 && lost < 260, "lost \(lost) of 2000 at 10 %")
        #expect(proxy.counters(for: .toClient).lost == lost)
    }

    @Test("an outage lets nothing through; when it ends, traffic flows again; delay is applied")
    func outageAndDelay() throws {
        let server = try EchoServer()
        defer { server.stop() }
        let proxy = try UDPImpairmentProxy(server: "127.0.0.1", serverPort: server.port)
        defer { proxy.stop() }
        let client = try LoopbackSocket()
        proxy.setOutage(true)
        #expect(exchange(client, via: proxy, count: 50).isEmpty)
        #expect(server.received.load(ordering: .relaxed) == 0)
        proxy.setOutage(false)
        #expect(exchange(client, via: proxy, count: 50).count == 50)

        proxy.setProfile(.init(delay: .milliseconds(40)), for: .toServer)
        let sent = ContinuousClock.now
        client.send([0, 1], to: proxy.port)
        let echo = client.receive(timeout: 2000)
        let elapsed = ContinuousClock.now - sent
        #expect(echo != nil)
        #expect(elapsed >= .milliseconds(40), "echo after \(elapsed)")
    }
}
