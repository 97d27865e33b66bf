import Foundation
import Synchronization

/// A TCP listener on a loopback address that records whether anything connected (an SSRF test
/// asks "did the platform reach this port?"), and may answer each connection with fixed bytes once
/// it has read a request head (an HTTP redirect, say). Runs on a thread of its own until stopped.
///
/// ```swift
/// let probe = try TCPProbe.start(answer: Array("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.2:9/\r\n\r\n".utf8))
/// // … point the platform at probe.port …
/// #expect(probe.connections == 0)
/// ```
public final class TCPProbe: Sendable {
    public let port: Int
    public let address: String
    private let listener: Int32
    private let state = Mutex<(connections: Int, stopped: Bool)>((0, false))
    private let answer: [UInt8]?

    private init(port: Int, address: String, listener: Int32, answer: [UInt8]?) {
        self.port = port
        self.address = address
        self.listener = listener
        self.answer = answer
    }

    /// Whether a TCP socket could bind `port` on `address` now (it is closed again at once).
    public static func bindable(port: Int, address: String = "127.0.0.1") -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var socketAddress = loopbackAddress(address, port: port)
        return withUnsafeMutablePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    /// Listens on `address` (any port) and starts accepting.
    public static func start(address: String = "127.0.0.1", answer: [UInt8]? = nil) throws -> TCPProbe {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw StandInFailure(description: "socket() failed") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var socketAddress = loopbackAddress(address, port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &socketAddress) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound, listen(fd, 128) == 0 else {
            close(fd)
            throw StandInFailure(description: "cannot listen on \(address)")
        }
        let probe = TCPProbe(port: Int(UInt16(bigEndian: socketAddress.sin_port)), address: address, listener: fd, answer: answer)
        let thread = Thread { probe.acceptLoop() }
        thread.start()
        return probe
    }

    /// How many connections were accepted so far.
    public var connections: Int { state.withLock { $0.connections } }

    private func acceptLoop() {
        while !state.withLock({ $0.stopped }) {
            var poller = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { continue }
            state.withLock { $0.connections += 1 }
            if let answer {
                _ = RawTCP.readHead(client, timeout: 2)
                _ = answer.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            }
            close(client)
        }
        close(listener)
    }

    public func stop() {
        state.withLock { $0.stopped = true }
    }
}

/// Blocking TCP client sockets on loopback for attack tests: a source address of the test's
/// choosing (127.0.0.2 is "another client" to a server on 127.0.0.1), raw bytes in and out.
public enum RawTCP {
    /// Runs blocking socket work on a thread of its own: blocking calls on Swift's cooperative
    /// pool (two threads on a 2-core machine) would stall the server under test as well.
    public static func offload<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: work()) }
        }
    }

    /// Connects from `source` to `host:port`; returns the descriptor or nil.
    public static func connect(to port: Int, host: String = "127.0.0.1", from source: String? = nil) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        if let source {
            var local = loopbackAddress(source, port: 0)
            let bound = withUnsafePointer(to: &local) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
            guard bound else { close(fd); return nil }
        }
        var remote = loopbackAddress(host, port: port)
        let connected = withUnsafePointer(to: &remote) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Foundation.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else { close(fd); return nil }
        return fd
    }

    @discardableResult
    public static func write(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
    }

    @discardableResult
    public static func write(_ fd: Int32, _ text: String) -> Bool { write(fd, Array(text.utf8)) }

    /// Everything the peer sends until it closes or `timeout` seconds pass; `closed` tells which.
    public static func read(_ fd: Int32, timeout: Double) -> (bytes: [UInt8], closed: Bool) {
        var bytes: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeout)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while Date() < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let waited = poll(&poller, 1, Int32(max(1, deadline.timeIntervalSinceNow * 1000)))
            guard waited > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count <= 0 { return (bytes, true) }
            bytes += buffer[0..<count]
        }
        return (bytes, false)
    }

    /// Reads until an HTTP head is complete (`\r\n\r\n`) or `timeout` passes.
    public static func readHead(_ fd: Int32, timeout: Double) -> [UInt8] {
        var bytes: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeout)
        var byte: UInt8 = 0
        while Date() < deadline, !bytes.suffix(4).elementsEqual([13, 10, 13, 10]) {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            guard recv(fd, &byte, 1, 0) == 1 else { break }
            bytes.append(byte)
        }
        return bytes
    }

    public static func close(_ fd: Int32) { _ = Foundation.close(fd) }
}

func loopbackAddress(_ address: String, port: Int) -> sockaddr_in {
    var socketAddress = sockaddr_in()
    socketAddress.sin_family = sa_family_t(AF_INET)
    socketAddress.sin_addr.s_addr = inet_addr(address)
    socketAddress.sin_port = UInt16(port).bigEndian
    return socketAddress
}
