import Glibc
import PCastRelay

/// How a benchmark's WebRTC viewers reach the relay: UDP (one datagram per packet, to the relay's
/// media port) or ICE over TCP (RFC 6544: one connection to the relay's TCP port, each packet an
/// RFC 4571 frame).
public enum ViewerTransport: String, Sendable, Hashable, Codable, CaseIterable {
    case udp
    case tcp
}

/// One viewer's packet exchange with the relay during its handshake: send one packet, receive the
/// next within a timeout. The handshake neither knows nor cares whether it is a datagram or a frame.
protocol ViewerPacketTransport {
    /// Sends one packet; false when it could not be sent.
    func send(_ packet: [UInt8]) -> Bool
    /// The next packet, or nil when none came within `timeoutMilliseconds`.
    func receive(timeoutMilliseconds: Int) -> [UInt8]?
}

/// A viewer on UDP: its own socket, every packet a datagram to and from the relay's media port.
struct UDPViewerTransport: ViewerPacketTransport {
    let socket: UDPSocket
    let relay: RelayAddress

    func send(_ packet: [UInt8]) -> Bool { socket.send(packet, to: relay) }

    func receive(timeoutMilliseconds: Int) -> [UInt8]? {
        var poller = pollfd(fd: socket.descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(max(0, timeoutMilliseconds))) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 2_048)
        let count = recv(socket.descriptor, &buffer, buffer.count, 0)
        guard count > 0 else { return nil }
        return Array(buffer[0..<count])
    }
}

/// A viewer's ICE-TCP connection to the relay (the viewer is the active side, RFC 6544): each
/// packet either way is one RFC 4571 frame, a 16-bit big-endian length then the packet. Bytes of
/// a frame that has not fully arrived stay in the connection's buffer until the next read.
///
/// Not thread-safe: one thread at a time uses it (the viewer's handshake, then one receiver thread).
final class TCPViewerConnection: ViewerPacketTransport {
    enum Failure: Error, CustomStringConvertible {
        case socket(operation: String, errno: Int32)
        case connect(source: String, port: UInt16, errno: Int32)
        case timedOut(source: String, port: UInt16)

        var description: String {
            switch self {
            case .socket(let operation, let code): "\(operation): \(String(cString: strerror(code)))"
            case .connect(let source, let port, let code):
                "connecting from \(source) to the relay's TCP port 127.0.0.1:\(port): \(String(cString: strerror(code)))"
            case .timedOut(let source, let port): "connecting from \(source) to the relay's TCP port 127.0.0.1:\(port) timed out"
            }
        }
    }

    /// Room for the largest frame (65,535 bytes and its length) with as much again to read into:
    /// a partial frame never lacks space to complete.
    static let capacity = 1 << 17

    let descriptor: Int32
    /// The connection ended: end of stream, a read error, or a frame of length 0 (RFC 4571 has none).
    private(set) var ended = false
    private let buffer: UnsafeMutableRawPointer
    /// Unread bytes are `head..<tail`.
    private var head = 0
    private var tail = 0

    /// Connects from `source` (an address of the loopback network, any port) to 127.0.0.1:`port`;
    /// the socket is non-blocking afterwards.
    init(port: UInt16, source: String, timeoutMilliseconds: Int = 2_000) throws(Failure) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .socket(operation: "socket(tcp)", errno: errno) }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = port.bigEndian
        guard inet_pton(AF_INET, source, &local.sin_addr) == 1, inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr) == 1 else {
            Glibc.close(fd)
            throw .socket(operation: "inet_pton(\(source))", errno: EINVAL)
        }
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0 else {
            let code = errno
            Glibc.close(fd)
            throw .socket(operation: "bind(\(source))", errno: code)
        }
        let started = withUnsafePointer(to: &remote) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, length) } }
        if started != 0 {
            guard errno == EINPROGRESS else {
                let code = errno
                Glibc.close(fd)
                throw .connect(source: source, port: port, errno: code)
            }
            var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            guard poll(&poller, 1, Int32(timeoutMilliseconds)) == 1 else {
                Glibc.close(fd)
                throw .timedOut(source: source, port: port)
            }
            var code: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &size)
            guard code == 0 else {
                Glibc.close(fd)
                throw .connect(source: source, port: port, errno: code)
            }
        }
        // Frames go out as they are written, as the relay sends its own (it sets TCP_NODELAY too).
        var on: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
        descriptor = fd
        buffer = .allocate(byteCount: Self.capacity, alignment: 8)
    }

    deinit {
        Glibc.close(descriptor)
        buffer.deallocate()
    }

    func send(_ packet: [UInt8]) -> Bool {
        guard !packet.isEmpty, packet.count <= 65_535 else { return false }
        var frame = [UInt8(packet.count >> 8), UInt8(packet.count & 0xFF)]
        frame.append(contentsOf: packet)
        var offset = 0
        let deadline = monotonicNanoseconds() + 1_000_000_000
        while offset < frame.count {
            let written = frame.withUnsafeBytes { raw in
                Glibc.send(descriptor, raw.baseAddress.map { $0 + offset }, raw.count - offset, Int32(MSG_NOSIGNAL))
            }
            if written > 0 {
                offset += written
                continue
            }
            let code = errno
            if written < 0 && code == EINTR { continue }
            guard written < 0, code == EAGAIN || code == EWOULDBLOCK, monotonicNanoseconds() < deadline else { return false }
            var poller = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
            _ = poll(&poller, 1, 50)
        }
        return true
    }

    func receive(timeoutMilliseconds: Int) -> [UInt8]? {
        let deadline = monotonicNanoseconds() + UInt64(max(0, timeoutMilliseconds)) * 1_000_000
        while true {
            if let frame = nextFrame() { return Array(frame) }
            guard !ended else { return nil }
            let now = monotonicNanoseconds()
            guard now < deadline else { return nil }
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, Int32(max(1, (deadline - now) / 1_000_000))) == 1 else { return nil }
            _ = fill()
        }
    }

    /// Reads what the socket holds without waiting (at most `limit` bytes) and hands each whole
    /// frame, with the time it was read, to `body`; frames already buffered come first. A partial
    /// frame stays for the next call. Returns the frames handed over.
    @discardableResult
    func drain(limit: Int = 1 << 18, _ body: (UnsafeRawBufferPointer, UInt64) -> Void) -> Int {
        var frames = 0
        var now = monotonicNanoseconds()
        var read = 0
        while true {
            while let frame = nextFrame() {
                body(frame, now)
                frames += 1
            }
            guard read < limit, !ended else { return frames }
            let count = fill()
            guard count > 0 else { return frames }
            read += count
            now = monotonicNanoseconds()
        }
    }

    /// The next whole frame in the buffer (valid until the next `fill`), or nil.
    private func nextFrame() -> UnsafeRawBufferPointer? {
        guard !ended, tail - head >= 2 else { return nil }
        let length = Int(buffer.load(fromByteOffset: head, as: UInt8.self)) << 8 | Int(buffer.load(fromByteOffset: head + 1, as: UInt8.self))
        guard length > 0 else {
            ended = true
            return nil
        }
        guard tail - head - 2 >= length else { return nil }
        let frame = UnsafeRawBufferPointer(start: buffer + head + 2, count: length)
        head += 2 + length
        return frame
    }

    /// One read into the free space (the unread bytes moved to the front first); the bytes read,
    /// 0 when none were waiting. Sets `ended` at end of stream or on an error.
    private func fill() -> Int {
        if head > 0 {
            if tail > head { memmove(buffer, buffer + head, tail - head) }
            tail -= head
            head = 0
        }
        while true {
            let count = recv(descriptor, buffer + tail, Self.capacity - tail, Int32(MSG_DONTWAIT))
            if count > 0 {
                tail += count
                return count
            }
            if count == 0 {
                ended = true
                return 0
            }
            let code = errno
            if code == EINTR { continue }
            if code != EAGAIN && code != EWOULDBLOCK { ended = true }
            return 0
        }
    }
}
