import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A small seeded generator (SplitMix64): the same impairment for the same seed.
///
/// ```swift
/// var generator = SeededGenerator(seed: 7)
/// let coin = Double.random(in: 0..<1, using: &generator)
/// ```
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// `host` (an IPv4 address or `localhost`) and `port` as a socket address.
func ipv4Address(_ host: String, port: Int) throws -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = UInt16(port).bigEndian
    guard inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host, &address.sin_addr) == 1 else {
        throw ImpairmentProxyError(description: "server \(host) is not an IPv4 address")
    }
    return address
}

/// Why a proxy could not start.
public struct ImpairmentProxyError: Error, Sendable, CustomStringConvertible {
    public let description: String
}

/// A UDP proxy on 127.0.0.1 that impairs what crosses it: clients send to ``port`` as if it were the
/// server; each client gets its own upstream socket (as behind a NAT), so the server sees one address
/// per client. Each direction runs its own ``ImpairmentModel``, changeable while packets flow.
///
/// The proxy runs on a thread of its own (poll and a queue of due packets), never on Swift's
/// cooperative pool, until ``stop()``.
///
/// ```swift
/// let proxy = try UDPImpairmentProxy(server: "127.0.0.1", serverPort: relayPort, seed: 1)
/// proxy.setProfile(.init(loss: .uniform(0.1)), for: .toClient)    // 10 % loss towards the client
/// proxy.setOutage(true)                                           // nothing gets through
/// print(proxy.counters(for: .toClient).lost)
/// proxy.stop()
/// ```
public final class UDPImpairmentProxy: Sendable {
    public enum Direction: Sendable, Hashable, CaseIterable {
        /// From the clients to the server.
        case toServer
        /// From the server to the clients.
        case toClient
    }

    /// The port clients send to.
    public let port: Int
    private let state: Mutex<State>
    private let listener: Int32
    private let server: sockaddr_in
    private let stopped = Atomic<Bool>(false)
    private let finished = Mutex<Bool>(false)

    private struct Due {
        var at: Duration
        var socket: Int32
        var destination: sockaddr_in
        var bytes: [UInt8]
    }

    private struct State: Sendable {
        var toServer: ImpairmentModel<SeededGenerator>
        var toClient: ImpairmentModel<SeededGenerator>
        /// Client address (host order ip << 16 | port) → its upstream socket, and back.
        var upstream: [UInt64: Int32] = [:]
        var clients: [Int32: sockaddr_in] = [:]
        var queue: [Due] = []
        /// Datagrams dropped on purpose, whatever the profile says (``dropDatagrams(_:where:)``).
        var toServerFilter: (@Sendable ([UInt8]) -> Bool)?
        var toClientFilter: (@Sendable ([UInt8]) -> Bool)?
        var filtered: [Direction: Int] = [:]
    }

    /// Listens on `listenHost` (a loopback address: 127.0.0.1 unless another is given; an
    /// ephemeral port unless `listenPort` is) and forwards to `server`:`serverPort` (an IPv4
    /// address). Listening on another loopback address at the server's own port stands in for
    /// the server to a client that only knows the server's port (a WebRTC peer given a candidate).
    public init(server host: String, serverPort: Int, listenHost: String = "127.0.0.1", listenPort: Int = 0, seed: UInt64 = 1) throws {
        server = try ipv4Address(host, port: serverPort)
        let listenAddress = try ipv4Address(listenHost, port: listenPort)
        guard UInt32(bigEndian: listenAddress.sin_addr.s_addr) >> 24 == 127 else {
            throw ImpairmentProxyError(description: "the proxy listens on loopback addresses only, not \(listenHost)")
        }
        let (socket, bound) = try Self.bindLoopback(listenAddress)
        listener = socket
        port = bound
        state = Mutex(State(toServer: ImpairmentModel(profile: .clear, generator: SeededGenerator(seed: seed)),
                            toClient: ImpairmentModel(profile: .clear, generator: SeededGenerator(seed: seed &+ 0x5EED))))
        let thread = Thread { [self] in run() }
        thread.name = "pcast.impairment-proxy"
        thread.start()
    }

    public func setProfile(_ profile: ImpairmentProfile, for direction: Direction) {
        state.withLock { state in
            switch direction {
            case .toServer: state.toServer.profile = profile
            case .toClient: state.toClient.profile = profile
            }
        }
    }

    /// Sets both directions.
    public func setProfile(_ profile: ImpairmentProfile) {
        for direction in Direction.allCases { setProfile(profile, for: direction) }
    }

    /// Drops every datagram going `direction` for which `drop` holds (nil: none), before the
    /// profile sees it: a network that loses one packet, its retransmissions included (they carry
    /// its RTP sequence number, in the clear under SRTP).
    public func dropDatagrams(_ direction: Direction, where drop: (@Sendable ([UInt8]) -> Bool)?) {
        state.withLock { state in
            switch direction {
            case .toServer: state.toServerFilter = drop
            case .toClient: state.toClientFilter = drop
            }
        }
    }

    /// Datagrams dropped by ``dropDatagrams(_:where:)`` so far.
    public func filtered(_ direction: Direction) -> Int { state.withLock { $0.filtered[direction] ?? 0 } }

    public func profile(for direction: Direction) -> ImpairmentProfile {
        state.withLock { direction == .toServer ? $0.toServer.profile : $0.toClient.profile }
    }

    /// Cuts (or restores) both directions, leaving the rest of the profiles as they are.
    public func setOutage(_ outage: Bool) {
        state.withLock { state in
            state.toServer.profile.outage = outage
            state.toClient.profile.outage = outage
        }
    }

    public func counters(for direction: Direction) -> ImpairmentModel<SeededGenerator>.Counters {
        state.withLock { direction == .toServer ? $0.toServer.counters : $0.toClient.counters }
    }

    /// Stops forwarding and closes the sockets (packets still queued are dropped).
    public func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // The thread closes the sockets on its way out; wait for it (it polls at most 20 ms).
        let deadline = ContinuousClock.now + .seconds(2)
        while !finished.withLock({ $0 }), ContinuousClock.now < deadline { usleep(2_000) }
    }

    // MARK: The proxy thread

    private func run() {
        let origin = ContinuousClock.now
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while !stopped.load(ordering: .acquiring) {
            let now = ContinuousClock.now - origin
            sendDue(now: now)
            let wait = state.withLock { state in state.queue.map(\.at).min().map { $0 - now } } ?? .milliseconds(20)
            let timeout = Int32(max(0, min(20, (wait / .milliseconds(1)).rounded(.up))))
            var descriptors = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0)]
            descriptors += state.withLock { Array($0.clients.keys) }.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&descriptors, nfds_t(descriptors.count), timeout)
            guard ready > 0 else { continue }
            for descriptor in descriptors where descriptor.revents & Int16(POLLIN) != 0 {
                drain(descriptor.fd, buffer: &buffer, origin: origin)
            }
        }
        state.withLock { state in
            for socket in state.clients.keys { close(socket) }
            state.clients = [:]
            state.upstream = [:]
            state.queue = []
        }
        close(listener)
        finished.withLock { $0 = true }
    }

    /// Reads every datagram waiting on `socket` and queues or drops each.
    private func drain(_ socket: Int32, buffer: inout [UInt8], origin: ContinuousClock.Instant) {
        while true {
            var from = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let count = buffer.withUnsafeMutableBytes { bytes in
                withUnsafeMutablePointer(to: &from) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        recvfrom(socket, bytes.baseAddress, bytes.count, Int32(MSG_DONTWAIT), $0, &length)
                    }
                }
            }
            guard count >= 0 else { return }
            let packet = Array(buffer[0..<count])
            let now = ContinuousClock.now - origin
            if socket == listener {
                guard let upstream = upstreamSocket(for: from) else { continue }
                state.withLock { state in
                    if let drop = state.toServerFilter, drop(packet) {
                        state.filtered[.toServer, default: 0] += 1
                        return
                    }
                    if case .deliver(let at) = state.toServer.process(size: count, at: now) {
                        state.queue.append(Due(at: at, socket: upstream, destination: server, bytes: packet))
                    }
                }
            } else {
                state.withLock { state in
                    guard let client = state.clients[socket] else { return }
                    if let drop = state.toClientFilter, drop(packet) {
                        state.filtered[.toClient, default: 0] += 1
                        return
                    }
                    if case .deliver(let at) = state.toClient.process(size: count, at: now) {
                        state.queue.append(Due(at: at, socket: listener, destination: client, bytes: packet))
                    }
                }
            }
        }
    }

    private func upstreamSocket(for client: sockaddr_in) -> Int32? {
        let key = UInt64(UInt32(bigEndian: client.sin_addr.s_addr)) << 16 | UInt64(UInt16(bigEndian: client.sin_port))
        if let known = state.withLock({ $0.upstream[key] }) { return known }
        guard let (socket, _) = try? Self.bindLoopback(try ipv4Address("127.0.0.1", port: 0)) else { return nil }
        state.withLock { state in
            state.upstream[key] = socket
            state.clients[socket] = client
        }
        return socket
    }

    private func sendDue(now: Duration) {
        let due: [Due] = state.withLock { state in
            guard state.queue.contains(where: { $0.at <= now }) else { return [] }
            let ready = state.queue.filter { $0.at <= now }.sorted { $0.at < $1.at }
            state.queue.removeAll { $0.at <= now }
            return ready
        }
        for var packet in due {
            _ = packet.bytes.withUnsafeBytes { bytes in
                withUnsafePointer(to: &packet.destination) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(packet.socket, bytes.baseAddress, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
            }
        }
    }

    private static func bindLoopback(_ address: sockaddr_in) throws -> (Int32, Int) {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard socket >= 0 else { throw ImpairmentProxyError(description: "socket: errno \(errno)") }
        var size: Int32 = 4 << 20
        setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        setsockopt(socket, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var address = address
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            close(socket)
            throw ImpairmentProxyError(description: "bind to port \(UInt16(bigEndian: address.sin_port)): errno \(errno)")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) }
        }
        return (socket, Int(UInt16(bigEndian: actual.sin_port)))
    }
}
