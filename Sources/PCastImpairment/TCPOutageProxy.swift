import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy on 127.0.0.1 with an outage switch, for signaling: clients connect to ``port`` as if
/// it were the server, and each connection is forwarded byte for byte to the server.
///
/// ``setOutage(_:mode:)`` takes the path down in one of two ways:
/// - ``Mode/reset``, as a lost network looks when the hosts notice it: every open connection is
///   reset (RST, so both ends see it at once) and new ones are reset as soon as they arrive;
/// - ``Mode/silent``, as it looks when they do not: nothing moves on open connections, and new ones
///   are accepted but held, reaching the server only when the outage ends (as a retransmitted SYN
///   would). Only keep-alives can tell the ends that the path is gone.
///
/// Media (UDP) is not touched: pair it with ``UDPImpairmentProxy/setOutage(_:)`` to cut both.
///
/// Runs on a thread of its own (poll), never on Swift's cooperative pool, until ``stop()``.
///
/// ```swift
/// let proxy = try TCPOutageProxy(server: "127.0.0.1", serverPort: 8080)
/// // clients use ws://127.0.0.1:\(proxy.port)/ws
/// proxy.setOutage(true)    // connections drop, reconnections fail
/// proxy.setOutage(false)   // reconnections succeed
/// proxy.stop()
/// ```
public final class TCPOutageProxy: Sendable {
    /// The port clients connect to.
    public let port: Int
    private let listener: Int32
    private let server: sockaddr_in
    /// 0: none, else a ``Mode`` raw value.
    private let outage = Atomic<UInt8>(0)

    public enum Mode: UInt8, Sendable {
        case reset = 1
        case silent = 2
    }
    private let stopped = Atomic<Bool>(false)
    private let finished = Mutex<Bool>(false)
    private let counts = Mutex<Counters>(Counters())

    /// What the proxy has seen since it started.
    public struct Counters: Sendable, Hashable {
        /// Connections forwarded to the server.
        public var forwarded = 0
        /// Connections reset by an outage (open ones cut, new ones refused).
        public var reset = 0
        /// Connections open now.
        public var open = 0
    }

    /// One forwarded connection: the client's socket and the server's.
    private struct Pair {
        var client: Int32
        var upstream: Int32
    }

    /// Listens on 127.0.0.1 (an ephemeral port unless `listenPort` is given) and forwards to
    /// `server`:`serverPort` (an IPv4 address or `localhost`).
    public init(server host: String, serverPort: Int, listenPort: Int = 0) throws {
        server = try ipv4Address(host, port: serverPort)
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw ImpairmentProxyError(description: "socket: errno \(errno)") }
        var yes: Int32 = 1
        setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_port = UInt16(listenPort).bigEndian
        local.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(socket, 64) == 0 else {
            let error = errno
            close(socket)
            throw ImpairmentProxyError(description: "listen on 127.0.0.1:\(listenPort): errno \(error)")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) }
        }
        listener = socket
        port = Int(UInt16(bigEndian: actual.sin_port))
        let thread = Thread { [self] in run() }
        thread.name = "pcast.tcp-outage-proxy"
        thread.start()
    }

    /// Takes the path down (see ``Mode``) or back up (`false`).
    public func setOutage(_ down: Bool, mode: Mode = .reset) {
        outage.store(down ? mode.rawValue : 0, ordering: .releasing)
    }

    public var isOutage: Bool { outage.load(ordering: .acquiring) != 0 }
    private var mode: Mode? { Mode(rawValue: outage.load(ordering: .acquiring)) }

    public var counters: Counters { counts.withLock { $0 } }

    /// Stops forwarding and closes every socket.
    public func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let deadline = ContinuousClock.now + .seconds(2)
        while !finished.withLock({ $0 }), ContinuousClock.now < deadline { usleep(2_000) }
    }

    // MARK: The proxy thread

    private func run() {
        var pairs: [Pair] = []
        /// Clients accepted during a silent outage, to connect when it ends.
        var held: [Int32] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while !stopped.load(ordering: .acquiring) {
            let mode = self.mode
            if mode == .reset, !pairs.isEmpty || !held.isEmpty {
                for pair in pairs { Self.reset(pair.client); Self.reset(pair.upstream) }
                for client in held { Self.reset(client) }
                counts.withLock { $0.reset += pairs.count + held.count; $0.open = 0 }
                pairs = []
                held = []
            }
            if mode == nil, !held.isEmpty {
                for client in held { connect(client, into: &pairs) }
                held = []
            }
            var descriptors = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0)]
            // Silent: nothing on open connections moves.
            for pair in mode == .silent ? [] : pairs {
                descriptors.append(pollfd(fd: pair.client, events: Int16(POLLIN), revents: 0))
                descriptors.append(pollfd(fd: pair.upstream, events: Int16(POLLIN), revents: 0))
            }
            guard poll(&descriptors, nfds_t(descriptors.count), 20) > 0 else { continue }
            if descriptors[0].revents & Int16(POLLIN) != 0 { accept(into: &pairs, holding: &held) }
            var closed: Set<Int> = []
            for (index, pair) in pairs.enumerated() {
                let slot = 1 + index * 2
                guard slot + 1 < descriptors.count else { break }
                let ready = [(descriptors[slot], pair.upstream), (descriptors[slot + 1], pair.client)]
                for (descriptor, destination) in ready where descriptor.revents != 0 {
                    if !forward(from: descriptor.fd, to: destination, buffer: &buffer) { closed.insert(index) }
                }
            }
            for index in closed.sorted(by: >) {
                close(pairs[index].client)
                close(pairs[index].upstream)
                pairs.remove(at: index)
            }
            if !closed.isEmpty { counts.withLock { $0.open = pairs.count } }
        }
        for pair in pairs { close(pair.client); close(pair.upstream) }
        for client in held { close(client) }
        close(listener)
        counts.withLock { $0.open = 0 }
        finished.withLock { $0 = true }
    }

    private func accept(into pairs: inout [Pair], holding held: inout [Int32]) {
        let client = Glibc.accept(listener, nil, nil)
        guard client >= 0 else { return }
        switch mode {
        case .reset?:
            Self.reset(client)
            counts.withLock { $0.reset += 1 }
        case .silent?:
            held.append(client)
        case nil:
            connect(client, into: &pairs)
        }
    }

    /// Connects an accepted client to the server and starts forwarding.
    private func connect(_ client: Int32, into pairs: inout [Pair]) {
        let upstream = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = server
        let connected = upstream >= 0 && withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
        guard connected else {
            if upstream >= 0 { close(upstream) }
            Self.reset(client)
            return
        }
        var yes: Int32 = 1
        for socket in [client, upstream] {
            setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
        }
        pairs.append(Pair(client: client, upstream: upstream))
        counts.withLock { $0.forwarded += 1; $0.open = pairs.count }
    }

    /// Moves what is readable on `source` to `destination`; false when either side is done.
    private func forward(from source: Int32, to destination: Int32, buffer: inout [UInt8]) -> Bool {
        let count = buffer.withUnsafeMutableBytes { recv(source, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        if count == 0 { return false }
        if count < 0 { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR }
        var sent = 0
        while sent < count {
            let written = buffer.withUnsafeBytes { send(destination, $0.baseAddress! + sent, count - sent, Int32(MSG_NOSIGNAL)) }
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            sent += written
        }
        return true
    }

    /// Closes with RST (linger 0), as a path that went away looks to a host that tries to use it.
    private static func reset(_ socket: Int32) {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(socket, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close(socket)
    }
}
