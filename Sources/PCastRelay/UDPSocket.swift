import Glibc
import PCastContracts

// UDP plumbing for the relay and its benchmark: one datagram socket (dual-stack IPv6 where the
// kernel has it, see RelaySocketFamily), and preallocated batches
// for `recvmmsg`/`sendmmsg`.
//
// Swift's Glibc module is built without `_GNU_SOURCE`, so `struct mmsghdr`, `recvmmsg` and
// `sendmmsg` are not imported. Rather than an unsafe compiler flag (which would make the package
// unusable as a dependency) the two functions are looked up once with `dlsym` and called through
// C function pointers, and `mmsghdr` is declared here with its C layout (checked at start-up).

/// An IP address and UDP port. IPv6 and IPv4 alike: an IPv4 address is held as the IPv4-mapped
/// IPv6 address `::ffff:a.b.c.d` (RFC 4291 §2.5.5.2), the form a dual-stack socket reports it in,
/// so one flow has one key whichever way it is written.
///
/// ```swift
/// let address = RelayAddress(ipv4: 0x7F00_0001, port: 5004)   // 127.0.0.1:5004
/// let v6 = RelayAddress(host: "fd00:5043::2", port: 5004)     // [fd00:5043::2]:5004
/// ```
public struct RelayAddress: Sendable, Hashable, CustomStringConvertible {
    /// The address's 16 bytes as two integers, first byte most significant.
    public var high: UInt64
    public var low: UInt64
    public var port: UInt16

    public init(ipv4: UInt32, port: UInt16) {
        high = 0
        low = 0x0000_FFFF_0000_0000 | UInt64(ipv4)
        self.port = port
    }

    /// An IPv6 address from its 16 bytes (network order).
    public init?(ipv6 bytes: some Collection<UInt8>, port: UInt16) {
        guard bytes.count == 16 else { return nil }
        var high: UInt64 = 0, low: UInt64 = 0
        for (index, byte) in bytes.enumerated() {
            if index < 8 { high = high << 8 | UInt64(byte) } else { low = low << 8 | UInt64(byte) }
        }
        self.high = high
        self.low = low
        self.port = port
    }

    /// Parses an IPv4 (`192.0.2.7`) or IPv6 (`fd00::7`, `[fd00::7]`) host; nil if it is neither.
    public init?(host: String, port: UInt16) {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            self.init(ipv4: UInt32(bigEndian: v4.s_addr), port: port)
            return
        }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, bare, &v6) == 1 else { return nil }
        self.init(ipv6: withUnsafeBytes(of: &v6) { Array($0) }, port: port)
    }

    /// The IPv4 address when this is one (IPv4-mapped), else nil.
    public var ipv4: UInt32? {
        high == 0 && low >> 32 == 0xFFFF ? UInt32(truncatingIfNeeded: low) : nil
    }

    /// The 16 bytes of the IPv6 form, network order.
    public var ipv6Bytes: [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: high >> (56 - 8 * $0)) } + (0..<8).map { UInt8(truncatingIfNeeded: low >> (56 - 8 * $0)) }
    }

    /// The unspecified address (`0.0.0.0` or `::`).
    public var isUnspecified: Bool { (high == 0 && low == 0) || (high == 0 && low == 0x0000_FFFF_0000_0000) }

    package init(_ socketAddress: sockaddr_in) {
        self.init(ipv4: UInt32(bigEndian: socketAddress.sin_addr.s_addr), port: UInt16(bigEndian: socketAddress.sin_port))
    }

    package init(_ socketAddress: sockaddr_in6) {
        var bytes = socketAddress.sin6_addr
        self.init(ipv6: withUnsafeBytes(of: &bytes) { Array($0) }, port: UInt16(bigEndian: socketAddress.sin6_port))!
    }

    /// The address as the relay's sockets take it (``RelaySocketFamily``), for `sendto` and `bind`.
    package func withSocketAddress<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
        if RelaySocketFamily.current == AF_INET6 {
            var address = socketAddress6
            return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        }
        var address = socketAddress
        return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    }

    /// IPv4 socket form; an IPv6 address becomes 0.0.0.0 (an IPv4-only relay cannot reach it).
    package var socketAddress: sockaddr_in {
        var result = sockaddr_in()
        result.sin_family = sa_family_t(AF_INET)
        result.sin_port = port.bigEndian
        result.sin_addr.s_addr = (ipv4 ?? 0).bigEndian
        return result
    }

    package var socketAddress6: sockaddr_in6 {
        var result = sockaddr_in6()
        result.sin6_family = sa_family_t(AF_INET6)
        result.sin6_port = port.bigEndian
        withUnsafeMutableBytes(of: &result.sin6_addr) { raw in
            for i in 0..<8 {
                raw[i] = UInt8(truncatingIfNeeded: high >> (56 - 8 * i))
                raw[8 + i] = UInt8(truncatingIfNeeded: low >> (56 - 8 * i))
            }
        }
        return result
    }

    /// The host alone: `192.0.2.7` or `fd00::7` (no brackets).
    public var host: String {
        if let v4 = ipv4 { return "\(v4 >> 24).\(v4 >> 16 & 0xFF).\(v4 >> 8 & 0xFF).\(v4 & 0xFF)" }
        var address = socketAddress6.sin6_addr
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        _ = inet_ntop(AF_INET6, &address, &text, socklen_t(text.count))
        return String(cString: text)
    }

    public var description: String {
        ipv4 != nil ? "\(host):\(port)" : "[\(host)]:\(port)"
    }
}

/// The address family of every relay socket in this process: IPv6 where the kernel has it (one
/// dual-stack socket; an IPv4 host is bound as `::ffff:a.b.c.d`, `::` takes both families), IPv4
/// otherwise. One family for all, so that the preallocated batches lay addresses out one way.
package enum RelaySocketFamily {
    package static let current: Int32 = {
        let probe = Glibc.socket(AF_INET6, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard probe >= 0 else { return AF_INET }
        Glibc.close(probe)
        return AF_INET6
    }()

    /// The size of the socket address the batches hold.
    static var nameLength: socklen_t {
        socklen_t(current == AF_INET6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
    }

    /// The sender a batch slot's name holds, whichever family.
    static func address(of name: UnsafePointer<sockaddr_in6>, length: socklen_t) -> RelayAddress? {
        switch Int32(name.pointee.sin6_family) {
        case AF_INET6 where length >= socklen_t(MemoryLayout<sockaddr_in6>.size):
            return RelayAddress(name.pointee)
        case AF_INET where length >= socklen_t(MemoryLayout<sockaddr_in>.size):
            return name.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { RelayAddress($0.pointee) }
        default:
            return nil
        }
    }

    /// Writes `address` into a batch slot's name in the process's family.
    @inline(__always)
    static func write(_ address: RelayAddress, into name: UnsafeMutablePointer<sockaddr_in6>) {
        if current == AF_INET6 {
            name.pointee = address.socketAddress6
        } else {
            name.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee = address.socketAddress }
        }
    }
}

/// C's `struct mmsghdr` (`<sys/socket.h>`, GNU): a `msghdr` and the byte count the kernel fills in.
struct MultiMessageHeader {
    var header = msghdr()
    var length: UInt32 = 0
}

/// `recvmmsg`/`sendmmsg`, resolved at run time (see the file comment).
enum MultiMessage {
    typealias Receive = @convention(c) (Int32, UnsafeMutableRawPointer?, UInt32, Int32, UnsafeMutableRawPointer?) -> Int32
    typealias Send = @convention(c) (Int32, UnsafeMutableRawPointer?, UInt32, Int32) -> Int32

    // Unchecked: C function pointers into the C library, immutable once looked up.
    struct Functions: @unchecked Sendable {
        let receive: Receive
        let send: Send
    }

    /// Nil when the C library lacks them or `mmsghdr` does not have the layout declared above.
    static let functions: Functions? = {
        // On 64-bit Linux `struct mmsghdr` is a 56-byte msghdr plus an unsigned int, padded to 64.
        guard MemoryLayout<MultiMessageHeader>.stride == MemoryLayout<msghdr>.stride + 8,
              MemoryLayout<MultiMessageHeader>.offset(of: \.length) == MemoryLayout<msghdr>.size,
              let library = dlopen(nil, RTLD_NOW),
              let receive = dlsym(library, "recvmmsg"),
              let send = dlsym(library, "sendmmsg")
        else { return nil }
        return Functions(receive: unsafeBitCast(receive, to: Receive.self), send: unsafeBitCast(send, to: Send.self))
    }()
}

/// Two more GNU functions the Glibc module hides, for naming and measuring the I/O thread.
enum ThreadIdentity {
    private typealias GetThreadID = @convention(c) () -> Int32
    private typealias SetName = @convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32

    // Unchecked: C function pointers into the C library, immutable once looked up.
    private struct Functions: @unchecked Sendable {
        let threadID: GetThreadID?
        let setName: SetName?
    }

    private static let functions: Functions = {
        let library = dlopen(nil, RTLD_NOW)
        return Functions(
            threadID: dlsym(library, "gettid").map { unsafeBitCast($0, to: GetThreadID.self) },
            setName: dlsym(library, "pthread_setname_np").map { unsafeBitCast($0, to: SetName.self) })
    }()

    /// The kernel's id of the calling thread (its `/proc/self/task/<id>`), or nil.
    static func current() -> Int32? { functions.threadID?() }

    /// Names the calling thread (at most 15 characters) for `top -H`, profilers and `/proc`.
    static func name(_ name: String) {
        _ = functions.setName?(pthread_self(), name)
    }

    /// User and system CPU time of a thread of this process, from `/proc/self/task/<id>/stat`, in nanoseconds.
    static func cpuSplit(thread id: Int32) -> (user: UInt64, system: UInt64)? {
        procStatCPU(path: "/proc/self/task/\(id)/stat")
    }
}

/// utime and stime from a `/proc/.../stat` file, in nanoseconds (clock-tick resolution).
package func procStatCPU(path: String) -> (user: UInt64, system: UInt64)? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var buffer = [UInt8](repeating: 0, count: 1024)
    let n = read(fd, &buffer, buffer.count)
    guard n > 0 else { return nil }
    let text = buffer[0..<n]
    // Fields after "(comm)", which may itself hold spaces: state is field 3, utime 14, stime 15.
    guard let end = text.lastIndex(of: UInt8(ascii: ")")) else { return nil }
    let fields = text[(end + 1)...].split(separator: UInt8(ascii: " "))
    guard fields.count > 12,
          let user = UInt64(String(decoding: fields[11], as: UTF8.self)),
          let system = UInt64(String(decoding: fields[12], as: UTF8.self))
    else { return nil }
    let tick = UInt64(max(1, sysconf(Int32(_SC_CLK_TCK))))
    return (user * 1_000_000_000 / tick, system * 1_000_000_000 / tick)
}

/// A non-blocking UDP socket in ``RelaySocketFamily/current``. Owns its descriptor until `close()`.
package final class UDPSocket {
    package private(set) var descriptor: Int32
    package let localAddress: RelayAddress

    /// Binds `host:port` (port 0: ephemeral) with `bufferSize` bytes of kernel send and receive
    /// buffer asked for (the kernel caps it at `net.core.{r,w}mem_max`). An IPv4 host takes IPv4
    /// only; `::` takes IPv6 and IPv4; another IPv6 address, IPv6 to it only.
    package init(host: String, port: UInt16, bufferSize: Int) throws(RelayError) {
        guard MultiMessage.functions != nil else { throw .socket(operation: "recvmmsg/sendmmsg lookup", errno: ENOSYS) }
        guard let bindAddress = RelayAddress(host: host, port: port) else {
            throw .socket(operation: "inet_pton(\(host))", errno: EINVAL)
        }
        let family = RelaySocketFamily.current
        guard family == AF_INET6 || bindAddress.ipv4 != nil else {
            throw .socket(operation: "bind(\(bindAddress)): this kernel has no IPv6", errno: EAFNOSUPPORT)
        }
        let fd = Glibc.socket(family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .socket(operation: "socket", errno: errno) }
        if family == AF_INET6 {
            // Dual-stack: IPv4 peers arrive as ::ffff:a.b.c.d on the same socket.
            var off: Int32 = 0
            _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &off, socklen_t(MemoryLayout<Int32>.size))
        }
        if bufferSize > 0 {
            var size = Int32(clamping: bufferSize)
            // Best effort: a smaller buffer than asked for is not an error.
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            _ = setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        let bound = bindAddress.withSocketAddress { bind(fd, $0, $1) }
        guard bound == 0 else {
            let code = errno
            Glibc.close(fd)
            throw .socket(operation: "bind(\(bindAddress))", errno: code)
        }
        var local = sockaddr_in6()
        var length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0, let address = withUnsafePointer(to: &local, { RelaySocketFamily.address(of: $0, length: length) }) else {
            let code = errno
            Glibc.close(fd)
            throw .socket(operation: "getsockname", errno: code)
        }
        descriptor = fd
        localAddress = address
    }

    /// Sends one datagram (for low-rate control traffic and tests); returns false if the kernel refused it.
    @discardableResult
    package func send(_ bytes: [UInt8], to address: RelayAddress) -> Bool {
        if TCPMediaFlows.isTCP(address) { return bytes.withUnsafeBytes { TCPMediaFlows.send($0, to: address) } }
        let sent = bytes.withUnsafeBytes { raw in
            address.withSocketAddress { sendto(descriptor, raw.baseAddress, raw.count, Int32(MSG_DONTWAIT), $0, $1) }
        }
        return sent == bytes.count
    }

    package func close() {
        if descriptor >= 0 {
            Glibc.close(descriptor)
            descriptor = -1
        }
    }

    deinit { close() }
}

/// Preallocated buffers for reading up to `capacity` datagrams with one `recvmmsg`.
package final class ReceiveBatch {
    package let capacity: Int
    package let slotSize: Int
    private let slots: DatagramSlots
    private var storage: UnsafeMutableRawBufferPointer { slots.storage }
    private var vectors: UnsafeMutablePointer<iovec> { slots.vectors }
    private var names: UnsafeMutablePointer<sockaddr_in6> { slots.names }
    private var headers: UnsafeMutablePointer<MultiMessageHeader> { slots.headers }
    /// Datagrams read by the last `receive`.
    private(set) var count = 0

    package init(capacity: Int, slotSize: Int) {
        self.capacity = capacity
        self.slotSize = slotSize
        slots = DatagramSlots(capacity: capacity, slotSize: slotSize, vectorLength: slotSize)
    }

    /// Reads what is queued without waiting. Returns the count, 0 if nothing was queued, or -errno.
    package func receive(from descriptor: Int32) -> Int {
        for i in 0..<capacity {
            headers[i].header.msg_namelen = socklen_t(MemoryLayout<sockaddr_in6>.size)
            headers[i].header.msg_flags = 0
            headers[i].length = 0
        }
        let n = MultiMessage.functions!.receive(descriptor, headers, UInt32(capacity), Int32(MSG_DONTWAIT), nil)
        if n < 0 {
            count = 0
            let code = errno
            return code == EAGAIN || code == EWOULDBLOCK || code == EINTR ? 0 : -Int(code)
        }
        count = Int(n)
        return count
    }

    /// The bytes of datagram `i`; nil if it was cut short (larger than a slot).
    package func datagram(_ i: Int) -> UnsafeRawBufferPointer? {
        guard headers[i].header.msg_flags & Int32(MSG_TRUNC) == 0 else { return nil }
        return UnsafeRawBufferPointer(start: storage.baseAddress! + i * slotSize, count: Int(headers[i].length))
    }

    /// Length of datagram `i` as received (its slot-sized part if it was cut short).
    package func length(_ i: Int) -> Int { Int(headers[i].length) }

    /// The sender of datagram `i`; nil if it has no IP address.
    package func source(_ i: Int) -> RelayAddress? {
        RelaySocketFamily.address(of: names + i, length: headers[i].header.msg_namelen)
    }
}

/// Preallocated outgoing datagrams, sent with as few `sendmmsg` calls as the kernel allows.
///
/// With segmentation offload (UDP GSO, `UDP_SEGMENT`, Linux 4.18) consecutive datagrams to one
/// address travel as one message: its iovecs are their slots, and the kernel cuts it into the
/// datagrams again after one pass through the socket, routing and IP layers (on the device, or
/// in software when the device cannot). A subscriber's share of a frame's burst, usually several
/// packets of the payloader's MTU size, then costs one message instead of one per packet. The
/// kernel's rule decides what may join a message: every datagram but the last as long as the
/// first (the segment size), the last no longer, at most ``maximumSegments`` and 64 KB in all.
final class SendBatch {
    struct Outcome {
        var packets = 0
        var bytes = 0
        var failures = 0
        /// Datagrams that left as part of a segmented (GSO) message.
        var segmented = 0
    }

    /// The kernel's `UDP_MAX_SEGMENTS`.
    static let maximumSegments = 64
    /// A message's payload stays under the 65,507 bytes of one IPv4 UDP datagram.
    static let maximumMessageBytes = 65_000

    let capacity: Int
    let slotSize: Int
    /// Whether consecutive datagrams to one address are joined into GSO messages.
    let segmentation: Bool
    private let slots: DatagramSlots
    private var storage: UnsafeMutableRawBufferPointer { slots.storage }
    private var vectors: UnsafeMutablePointer<iovec> { slots.vectors }
    private var names: UnsafeMutablePointer<sockaddr_in6> { slots.names }
    private var headers: UnsafeMutablePointer<MultiMessageHeader> { slots.headers }
    /// One `UDP_SEGMENT` control message per message, written when it gets a second datagram.
    private let controls: UnsafeMutableRawPointer
    /// Datagrams in each message.
    private let segments: UnsafeMutablePointer<Int>
    /// Slots filled (datagrams queued).
    private(set) var count = 0
    /// Messages queued: `count` without segmentation, fewer with it.
    private var messages = 0
    /// The message datagrams may still join: its address, segment size, bytes, and whether a
    /// shorter datagram (which must be its last) already ended it.
    private var openAddress: RelayAddress?
    private var segmentSize = 0
    private var messageBytes = 0
    private var closedByShortDatagram = false
    /// Totals since the last `takeOutcome()`.
    private var outcome = Outcome()

    init(capacity: Int, slotSize: Int, segmentation: Bool = false) {
        self.capacity = capacity
        self.slotSize = slotSize
        self.segmentation = segmentation
        slots = DatagramSlots(capacity: capacity, slotSize: slotSize, vectorLength: 0)
        controls = .allocate(byteCount: capacity * SegmentationControl.space, alignment: 8)
        controls.initializeMemory(as: UInt8.self, repeating: 0, count: capacity * SegmentationControl.space)
        segments = .allocate(capacity: capacity)
        segments.initialize(repeating: 0, count: capacity)
    }

    deinit {
        controls.deallocate()
        segments.deallocate()
    }

    /// The buffer of the next datagram; fill it, then `commit`. Flushes first when the batch is full.
    @inline(__always)
    func nextSlot(descriptor: Int32) -> UnsafeMutableRawBufferPointer {
        if count == capacity { flush(descriptor: descriptor) }
        return UnsafeMutableRawBufferPointer(start: storage.baseAddress! + count * slotSize, count: slotSize)
    }

    /// Queues the `length` bytes written into the slot from `nextSlot` for `address`.
    @inline(__always)
    func commit(length: Int, to address: RelayAddress) {
        if TCPMediaFlows.isTCP(address) {
            // A peer on ICE-TCP: framed onto its connection now; the slot is used again.
            let sent = TCPMediaFlows.send(UnsafeRawBufferPointer(start: storage.baseAddress! + count * slotSize, count: length), to: address)
            if sent { outcome.packets += 1; outcome.bytes += length } else { outcome.failures += 1 }
            return
        }
        vectors[count].iov_len = length
        if segmentation, let open = openAddress, open == address, !closedByShortDatagram, length <= segmentSize,
           segments[messages - 1] < Self.maximumSegments, messageBytes + length <= Self.maximumMessageBytes {
            let message = messages - 1
            if segments[message] == 1 {
                let control = controls + message * SegmentationControl.space
                SegmentationControl.write(segmentSize: UInt16(segmentSize), into: control)
                headers[message].header.msg_control = control
                headers[message].header.msg_controllen = SegmentationControl.space
            }
            headers[message].header.msg_iovlen += 1
            segments[message] += 1
            messageBytes += length
            closedByShortDatagram = length < segmentSize
        } else {
            let message = messages
            headers[message].header.msg_iov = vectors + count
            headers[message].header.msg_iovlen = 1
            headers[message].header.msg_control = nil
            headers[message].header.msg_controllen = 0
            RelaySocketFamily.write(address, into: names + message)
            headers[message].header.msg_namelen = RelaySocketFamily.nameLength
            segments[message] = 1
            messages += 1
            openAddress = address
            segmentSize = length
            messageBytes = length
            closedByShortDatagram = false
        }
        count += 1
    }

    /// Copies `bytes` into the next slot and queues it (for control traffic built as arrays).
    func append(_ bytes: [UInt8], to address: RelayAddress, descriptor: Int32) {
        guard bytes.count <= slotSize else { outcome.failures += 1; return }
        let slot = nextSlot(descriptor: descriptor)
        bytes.withUnsafeBytes { slot.copyMemory(from: $0) }
        commit(length: bytes.count, to: address)
    }

    /// Sends everything queued. A message the kernel refuses is skipped and counted (a segmented
    /// one it refuses, as a path whose MTU is smaller than its segments, is sent datagram by
    /// datagram instead); when the socket buffer is full (EAGAIN) the rest of the batch is dropped
    /// rather than waited for, because the I/O thread must never block.
    func flush(descriptor: Int32) {
        var index = 0
        let send = MultiMessage.functions!.send
        while index < messages {
            let n = send(descriptor, headers + index, UInt32(messages - index), Int32(MSG_DONTWAIT))
            if n > 0 {
                for i in index..<(index + Int(n)) {
                    outcome.bytes += Int(headers[i].length)
                    outcome.packets += segments[i]
                    if segments[i] > 1 { outcome.segmented += segments[i] }
                }
                index += Int(n)
                continue
            }
            let code = errno
            if n < 0 && code == EINTR { continue }
            if n < 0 && (code == EAGAIN || code == EWOULDBLOCK) {
                for i in index..<messages { outcome.failures += segments[i] }
                break
            }
            if segments[index] > 1 {
                sendApart(index, descriptor: descriptor)
            } else {
                // This datagram was refused (unreachable, bad address...): skip it, keep the rest.
                outcome.failures += 1
            }
            index += 1
        }
        count = 0
        messages = 0
        openAddress = nil
    }

    /// Sends a segmented message's datagrams one by one.
    private func sendApart(_ message: Int, descriptor: Int32) {
        let header = headers[message].header
        for i in 0..<Int(header.msg_iovlen) {
            let vector = header.msg_iov[i]
            let sent = sendto(descriptor, vector.iov_base, vector.iov_len, Int32(MSG_DONTWAIT),
                              header.msg_name.assumingMemoryBound(to: sockaddr.self), header.msg_namelen)
            if sent == vector.iov_len {
                outcome.packets += 1
                outcome.bytes += sent
            } else {
                outcome.failures += 1
            }
        }
    }

    /// A datagram that could not be made (its packet could not be protected).
    func countFailure() {
        outcome.failures += 1
    }

    func takeOutcome() -> Outcome {
        defer { outcome = Outcome() }
        return outcome
    }
}

/// The `UDP_SEGMENT` control message (`<linux/udp.h>`; `CMSG_*` are macros Swift cannot import,
/// so the layout is written out): a `cmsghdr` (length, level `SOL_UDP`, type `UDP_SEGMENT`) and the
/// segment size as a `uint16_t`, padded to the header's alignment.
enum SegmentationControl {
    static let level: Int32 = 17        // SOL_UDP (IPPROTO_UDP)
    static let type: Int32 = 103        // UDP_SEGMENT
    /// `CMSG_SPACE(sizeof(uint16_t))`.
    static let space = MemoryLayout<cmsghdr>.stride + 8
    /// `CMSG_LEN(sizeof(uint16_t))`.
    static let length = MemoryLayout<cmsghdr>.stride + 2

    static func write(segmentSize: UInt16, into control: UnsafeMutableRawPointer) {
        control.initializeMemory(as: UInt8.self, repeating: 0, count: space)
        let header = control.assumingMemoryBound(to: cmsghdr.self)
        header.pointee.cmsg_len = length
        header.pointee.cmsg_level = level
        header.pointee.cmsg_type = type
        (control + MemoryLayout<cmsghdr>.stride).storeBytes(of: segmentSize, as: UInt16.self)
    }

    /// Whether the kernel knows `UDP_SEGMENT` for `descriptor` (reading the option fails with
    /// ENOPROTOOPT on kernels before 4.18, which would send a message whole, unsegmented).
    static func supported(on descriptor: Int32) -> Bool {
        var value: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        return getsockopt(descriptor, level, type, &value, &size) == 0
    }
}

/// Monotonic time in nanoseconds.
@inline(__always)
package func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
}

/// CPU time consumed so far on the clock `clock` (a thread's or the process's), in nanoseconds.
package func cpuNanoseconds(_ clock: clockid_t) -> UInt64 {
    var now = timespec()
    guard clock_gettime(clock, &now) == 0 else { return 0 }
    return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
}

extension Duration {
    /// Whole nanoseconds, saturating at 0 and at `UInt64.max`.
    package var nanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        let (scaled, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return .max }
        return scaled &+ UInt64(max(0, attoseconds / 1_000_000_000))
    }
}

/// The buffers a batch of `recvmmsg`/`sendmmsg` datagrams lives in: one slot of `slotSize` bytes,
/// one iovec, one address and one message header per datagram, wired together once.
final class DatagramSlots {
    let storage: UnsafeMutableRawBufferPointer
    let vectors: UnsafeMutablePointer<iovec>
    /// Room for either family's address (``RelaySocketFamily``).
    let names: UnsafeMutablePointer<sockaddr_in6>
    let headers: UnsafeMutablePointer<MultiMessageHeader>

    /// `vectorLength`: the iovec length to start with (the slot size to receive into, 0 to send).
    init(capacity: Int, slotSize: Int, vectorLength: Int) {
        storage = .allocate(byteCount: capacity * slotSize, alignment: 16)
        storage.initializeMemory(as: UInt8.self, repeating: 0)
        vectors = .allocate(capacity: capacity)
        names = .allocate(capacity: capacity)
        names.initialize(repeating: sockaddr_in6(), count: capacity)
        headers = .allocate(capacity: capacity)
        headers.initialize(repeating: MultiMessageHeader(), count: capacity)
        for i in 0..<capacity {
            vectors[i] = iovec(iov_base: storage.baseAddress! + i * slotSize, iov_len: vectorLength)
            headers[i].header.msg_iov = vectors + i
            headers[i].header.msg_iovlen = 1
            headers[i].header.msg_name = UnsafeMutableRawPointer(names + i)
            headers[i].header.msg_namelen = socklen_t(MemoryLayout<sockaddr_in6>.size)
        }
    }

    deinit {
        storage.deallocate()
        vectors.deallocate()
        names.deallocate()
        headers.deallocate()
    }
}
