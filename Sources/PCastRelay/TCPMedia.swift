import Glibc
import PCastContracts
import Synchronization

// ICE over TCP for peers whose networks drop UDP: the relay's passive TCP candidates (RFC 6544)
// on a TCP port beside its UDP one, each connection carrying RFC 4571 frames (a 16-bit length,
// then one STUN, DTLS, RTP or RTCP packet). Each connection is given an address of its own from
// the discard prefix 100::/64 (RFC 6666), so the engine handles its packets exactly as datagrams
// from a peer: ICE checks, DTLS, SRTP and routing do not know the transport. Packets sent to such
// an address are framed onto the connection (`TCPMediaFlows.send`), from the I/O thread or a
// fan-out worker.

/// The TCP connections of every relay in this process, by the id their address carries.
enum TCPMediaFlows {
    /// `high` of a connection's address: 0100:0000:0000:0000, the discard-only prefix.
    static let prefix: UInt64 = 0x0100_0000_0000_0000
    /// Bytes a connection may have waiting to be written before whole frames are dropped (a
    /// viewer whose TCP window closed loses packets, as it would over UDP, rather than the relay
    /// buffering without bound).
    static let outputLimit = 2 << 20

    private static let connections = Mutex<[UInt64: TCPMediaConnection]>([:])
    private static let nextId = Atomic<UInt64>(1)

    static func address(of id: UInt64) -> RelayAddress {
        var address = RelayAddress(ipv4: 0, port: 0)
        address.high = prefix
        address.low = id
        return address
    }

    @inline(__always)
    static func isTCP(_ address: RelayAddress) -> Bool { address.high == prefix }

    static func register(_ connection: TCPMediaConnection) {
        connections.withLock { $0[connection.id] = connection }
    }

    static func unregister(_ id: UInt64) {
        _ = connections.withLock { $0.removeValue(forKey: id) }
    }

    static func makeId() -> UInt64 { nextId.add(1, ordering: .relaxed).newValue }

    /// Frames `bytes` onto the connection `address` names; false when there is no such
    /// connection or its output is full.
    @discardableResult
    static func send(_ bytes: UnsafeRawBufferPointer, to address: RelayAddress) -> Bool {
        guard let connection = connections.withLock({ $0[address.low] }) else { return false }
        return connection.write(frame: bytes)
    }
}

/// One accepted TCP connection: its descriptor, the bytes read that do not make a whole frame
/// yet, and the bytes waiting to be written.
/// Unchecked: input and timing belong to the I/O thread; `output` and the descriptor's writes are guarded by `outputLock`.
final class TCPMediaConnection: @unchecked Sendable {
    let id: UInt64
    let descriptor: Int32
    let remote: String
    var input: [UInt8] = []
    var lastRead: UInt64
    private let outputLock = Mutex<[UInt8]>([])
    private let closed = Atomic<Bool>(false)

    init(id: UInt64, descriptor: Int32, remote: String, now: UInt64) {
        self.id = id
        self.descriptor = descriptor
        self.remote = remote
        lastRead = now
    }

    /// Whether bytes wait to be written (the I/O thread then polls for POLLOUT).
    var hasOutput: Bool { outputLock.withLock { !$0.isEmpty } }

    /// Writes one frame, or queues it behind what waits; a frame that does not fit is dropped whole.
    func write(frame bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count <= 65_535 else { return false }
        return outputLock.withLock { pending -> Bool in
            // Checked under the lock `close()` closes the descriptor under: never a reused number.
            guard !closed.load(ordering: .relaxed) else { return false }
            if !pending.isEmpty {
                guard pending.count + bytes.count + 2 <= TCPMediaFlows.outputLimit else { return false }
                pending.append(UInt8(bytes.count >> 8))
                pending.append(UInt8(bytes.count & 0xFF))
                pending.append(contentsOf: bytes)
                flushLocked(&pending)
                return true
            }
            // The common case: nothing waits, write header and packet in one call.
            var header = (UInt8(bytes.count >> 8), UInt8(bytes.count & 0xFF))
            let written = withUnsafeMutableBytes(of: &header) { head -> Int in
                var vectors = [iovec(iov_base: head.baseAddress, iov_len: 2),
                               iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)]
                return writev(descriptor, &vectors, 2)
            }
            let total = bytes.count + 2
            if written == total { return true }
            let done = max(0, written)
            var frame = [UInt8(bytes.count >> 8), UInt8(bytes.count & 0xFF)]
            frame.append(contentsOf: bytes)
            pending.append(contentsOf: frame[done...])
            return true
        }
    }

    /// Writes what waits, as far as the socket takes it (on POLLOUT).
    func flush() {
        outputLock.withLock { flushLocked(&$0) }
    }

    private func flushLocked(_ pending: inout [UInt8]) {
        guard !pending.isEmpty, !closed.load(ordering: .relaxed) else { return }
        let written = pending.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
        if written > 0 { pending.removeFirst(written) }
    }

    func close() {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        TCPMediaFlows.unregister(id)
        outputLock.withLock { _ in _ = Glibc.close(descriptor) }
    }
}

/// The relay's TCP listener and its connections, served by the I/O thread.
final class TCPMediaListener {
    /// -1 once closed: ``close()`` may be called again (the engine closes its descriptors at
    /// shutdown and at deinit) and must not close a number the process has since reused.
    private(set) var descriptor: Int32
    let localAddress: RelayAddress
    private var connections: [UInt64: TCPMediaConnection] = [:]
    private var perAddress: [String: Int] = [:]
    /// Where reads land (I/O thread only), kept between turns.
    private var chunk = [UInt8](repeating: 0, count: 16_384)
    /// Connections held at once, and from one address.
    static let maximumConnections = 2_048
    static let maximumPerAddress = 64
    /// A connection silent this long is closed (ICE consent checks come every few seconds).
    static let idleTimeout: UInt64 = 30_000_000_000

    /// Listens on `host` and `port` (the UDP port's number when free, else any).
    init(host: String, port: UInt16) throws(RelayError) {
        guard let bindAddress = RelayAddress(host: host, port: port) else { throw .socket(operation: "inet_pton(\(host))", errno: EINVAL) }
        let family = RelaySocketFamily.current
        var bound: (Int32, RelayAddress)?
        for candidate in [port, 0] {
            let fd = Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw .socket(operation: "socket(tcp)", errno: errno) }
            var on: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
            if family == AF_INET6 {
                var off: Int32 = 0
                _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &off, socklen_t(MemoryLayout<Int32>.size))
            }
            var address = bindAddress
            address.port = candidate
            if address.withSocketAddress({ bind(fd, $0, $1) }) == 0, listen(fd, 128) == 0 {
                var local = sockaddr_in6()
                var length = socklen_t(MemoryLayout<sockaddr_in6>.size)
                _ = withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
                if let named = withUnsafePointer(to: &local, { RelaySocketFamily.address(of: $0, length: length) }) {
                    bound = (fd, named)
                    break
                }
            }
            Glibc.close(fd)
            if candidate == 0 { break }
        }
        guard let (fd, address) = bound else { throw .socket(operation: "bind(tcp \(bindAddress))", errno: errno) }
        descriptor = fd
        localAddress = address
    }

    var connectionCount: Int { connections.count }

    /// The descriptors to poll: the listener, then each connection (POLLOUT too when it has output).
    func pollDescriptors() -> [pollfd] {
        [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
            + connections.values.map { pollfd(fd: $0.descriptor, events: Int16(POLLIN) | ($0.hasOutput ? Int16(POLLOUT) : 0), revents: 0) }
    }

    /// Accepts what waits, reads every connection (frames go to `handle`), writes what waits,
    /// closes connections that ended, broke the framing or fell silent. Returns the frames handled.
    func service(now: UInt64, handle: (UnsafeRawBufferPointer, RelayAddress) -> Void) -> Int {
        acceptPending(now: now)
        var frames = 0
        guard !connections.isEmpty else { return 0 }
        var finished: [UInt64] = []
        for connection in connections.values {
            connection.flush()
            // At most 64 KiB a turn from one connection: the others and the UDP socket get served too.
            var turn = 0
            while turn < 65_536 {
                let count = chunk.withUnsafeMutableBytes { recv(connection.descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                if count == 0 { finished.append(connection.id); break }
                if count < 0 {
                    if errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR { finished.append(connection.id) }
                    break
                }
                turn += count
                connection.lastRead = now
                connection.input.append(contentsOf: chunk[0..<count])
            }
            // RFC 4571: a 16-bit length, then that many bytes. Read in place; what was handled is
            // removed once, after (no copy of the buffer while it is read).
            let address = TCPMediaFlows.address(of: connection.id)
            let offset = connection.input.withUnsafeBytes { raw -> Int in
                var offset = 0
                while raw.count - offset >= 2 {
                    let length = Int(raw[offset]) << 8 | Int(raw[offset + 1])
                    guard length > 0 else { finished.append(connection.id); break }
                    guard raw.count - offset - 2 >= length else { break }
                    handle(UnsafeRawBufferPointer(rebasing: raw[(offset + 2)..<(offset + 2 + length)]), address)
                    frames += 1
                    offset += 2 + length
                }
                return offset
            }
            if offset > 0 { connection.input.removeFirst(offset) }
            if now &- connection.lastRead > Self.idleTimeout { finished.append(connection.id) }
        }
        for id in Set(finished) { drop(id) }
        return frames
    }

    private func acceptPending(now: UInt64) {
        while true {
            var peer = sockaddr_in6()
            var length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            // accept4 is a GNU name the Glibc module hides: accept, then the flags.
            let fd = withUnsafeMutablePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { accept(descriptor, $0, &length) }
            }
            guard fd >= 0 else { return }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            let remote = withUnsafePointer(to: &peer) { RelaySocketFamily.address(of: $0, length: length) }?.host ?? "?"
            guard connections.count < Self.maximumConnections, perAddress[remote, default: 0] < Self.maximumPerAddress else {
                Glibc.close(fd)
                continue
            }
            var on: Int32 = 1
            _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
            let connection = TCPMediaConnection(id: TCPMediaFlows.makeId(), descriptor: fd, remote: remote, now: now)
            connections[connection.id] = connection
            perAddress[remote, default: 0] += 1
            TCPMediaFlows.register(connection)
        }
    }

    private func drop(_ id: UInt64) {
        guard let connection = connections.removeValue(forKey: id) else { return }
        let left = perAddress[connection.remote, default: 1] - 1
        perAddress[connection.remote] = left > 0 ? left : nil
        connection.close()
    }

    func close() {
        for id in Array(connections.keys) { drop(id) }
        if descriptor >= 0 { Glibc.close(descriptor) }
        descriptor = -1
    }
}
