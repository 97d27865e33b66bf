import Foundation
import GStreamer
import Logging
import PCastMedia
import PCastProtocol
import SRTP
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One flow's media path to the relay: a UDP socket (sending and receiving on the same port, so
/// the relay learns the address from our packets), SRTP with the flow's keys, RTP and RTCP
/// multiplexed (RFC 5761). Received packets are handed on from a thread of its own.
/// Unchecked: `relay` and `thread` are set in `init` only; sends take `sendLock`; the estimator is the receive thread's.
final class MediaSocket: @unchecked Sendable {
    private let fd: Int32
    /// The relay's address, IPv4 (`sockaddr_in`) or IPv6 (`sockaddr_in6`), and its length.
    private var relay = sockaddr_storage()
    private var relayLength = socklen_t(0)
    private let protector: SRTPSession
    private let verifier: SRTPSession
    private let sendLock = Mutex<Void>(())
    private let running = Atomic<Bool>(true)
    private var thread: Thread?
    private let onRTP: @Sendable (Buffer, UInt8) -> Void
    private let onRTCP: @Sendable (Buffer) -> Void
    /// Rewrites the sender SSRC of outgoing RTCP (a subscriber's is assigned by the relay).
    private let rtcpSenderSSRC: UInt32?
    /// A publisher's sent packets, for the relay's retransmission requests (nil for a subscriber).
    private let sent: SentPacketCache?
    let statistics = Statistics()
    /// A subscriber's estimate of its downlink, sent to the relay in REMB (a simulcast's layer
    /// follows it); receive thread only.
    private var downlink = DispersionEstimator()
    private var nextEstimate: UInt64 = 0
    private var lastEstimate = 0
    /// REMB goes out every `estimateInterval`, and at once when the estimate moved by a quarter.
    static let estimateInterval: UInt64 = 250_000_000

    final class Statistics: Sendable {
        let packetsSent = Atomic<Int>(0)
        let packetsReceived = Atomic<Int>(0)
        let bytesReceived = Atomic<Int>(0)
        let authenticationFailures = Atomic<Int>(0)
        /// Over TCP: the connection ended (the relay closed it, or a send failed).
        let transportClosed = Atomic<Bool>(false)
        /// Packets sent again from the cache for the relay's NACKs (the NACKs themselves are
        /// counted with the publisher's RTCP statistics).
        let retransmissionsSent = Atomic<Int>(0)
    }

    /// How this flow reaches the relay: UDP, or SRTP over TCP (RFC 4571 frames) to the relay's
    /// TCP port when UDP did not answer.
    let path: MediaPath

    /// `answersRetransmissions`: a publisher's flow, which keeps what it sent for the relay's NACKs.
    init(host: String, transport: MediaTransport, rtcpSenderSSRC: UInt32?, path: MediaPath = .udp, answersRetransmissions: Bool = false,
         onRTP: @escaping @Sendable (Buffer, UInt8) -> Void, onRTCP: @escaping @Sendable (Buffer) -> Void) throws(PCastError) {
        sent = answersRetransmissions ? SentPacketCache() : nil
        guard let profile = SRTPProfile(rawValue: transport.srtpProfile) else {
            throw .invalidTransport("unknown SRTP profile \(transport.srtpProfile)")
        }
        do {
            protector = try SRTPSession(key: SRTPKey(profile: profile, base64: transport.clientKey), direction: .outbound)
            verifier = try SRTPSession(key: SRTPKey(profile: profile, base64: transport.serverKey), direction: .inbound)
        } catch {
            throw .invalidTransport("SRTP keys: \(error)")
        }
        self.path = path
        if path.overTCP {
            guard let tcpPort = transport.tcpPort else { throw .invalidTransport("the relay has no TCP port for media") }
            let (address, length) = try Self.relayAddress(host: host, port: tcpPort)
            relay = address
            relayLength = length
            fd = try Self.connectTCP(address, length: length, within: 5)
            self.rtcpSenderSSRC = rtcpSenderSSRC
            self.onRTP = onRTP
            self.onRTCP = onRTCP
            let thread = Thread { [weak self] in self?.receiveTCPLoop() }
            thread.name = "pcast.media-tcp"
            thread.stackSize = 1 << 20
            self.thread = thread
            thread.start()
            return
        }
        let (address, length) = try Self.relayAddress(host: host, port: transport.port)
        relay = address
        relayLength = length
        let family = Int32(address.ss_family)
        let descriptor = socket(family, Int32(SOCK_DGRAM.rawValue), 0)
        guard descriptor >= 0 else { throw .invalidTransport("socket: errno \(errno)") }
        var size: Int32 = 4 << 20
        setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        // The wildcard address of the relay's family, any port.
        var local = sockaddr_storage()
        local.ss_family = sa_family_t(family)
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }
        guard bound == 0 else {
            close(descriptor)
            throw .invalidTransport("bind: errno \(errno)")
        }
        if rtcpSenderSSRC != nil {
            // Arrival times taken as packets reach the socket, for the downlink estimate.
            var on: Int32 = 1
            setsockopt(descriptor, SOL_SOCKET, Self.timestampOption, &on, socklen_t(MemoryLayout<Int32>.size))
        }
        fd = descriptor
        self.rtcpSenderSSRC = rtcpSenderSSRC
        self.onRTP = onRTP
        self.onRTCP = onRTCP
        let thread = Thread { [weak self] in self?.receiveLoop() }
        thread.name = "pcast.media-socket"
        thread.stackSize = 1 << 20
        self.thread = thread
        thread.start()
    }

    deinit {
        running.store(false, ordering: .relaxed)
        close(fd)
    }

    /// Stops receiving and closes the socket.
    func shutdown() {
        guard running.exchange(false, ordering: .relaxed) else { return }
        shutdownSocket(fd)
    }

    /// Protects and sends a packet from a media pipeline.
    func send(_ packet: OutgoingPacket) {
        guard running.load(ordering: .relaxed), var bytes = try? packet.buffer.withUnsafeBytes({ Array($0.bindMemory(to: UInt8.self)) }) else { return }
        do {
            switch packet.kind {
            case .rtp:
                try sendLock.withLock { _ throws(SRTPError) in try protector.protect(&bytes) }
                sent?.store(bytes, now: DispatchTime.now().uptimeNanoseconds)
            case .rtcp:
                if let ssrc = rtcpSenderSSRC { Self.rewriteSenderSSRC(&bytes, ssrc) }
                try sendLock.withLock { _ throws(SRTPError) in try protector.protectRTCP(&bytes) }
            }
        } catch {
            return
        }
        send(raw: bytes)
    }

    /// The relay's socket address: an IPv4 or IPv6 literal as given, `localhost` as 127.0.0.1, a
    /// name resolved (the first address).
    static func relayAddress(host: String, port: UInt16) throws(PCastError) -> (sockaddr_storage, socklen_t) {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        var storage = sockaddr_storage()
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, bare == "localhost" ? "127.0.0.1" : bare, &v4) == 1 {
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                    $0.pointee.sin_family = sa_family_t(AF_INET)
                    $0.pointee.sin_port = port.bigEndian
                    $0.pointee.sin_addr = v4
                }
            }
            return (storage, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
        if inet_pton(AF_INET6, bare, &v6) == 1 {
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    $0.pointee.sin6_family = sa_family_t(AF_INET6)
                    $0.pointee.sin6_port = port.bigEndian
                    $0.pointee.sin6_addr = v6
                }
            }
            return (storage, socklen_t(MemoryLayout<sockaddr_in6>.size))
        }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(bare, nil, &hints, &found) == 0, let first = found, let address = first.pointee.ai_addr else {
            throw .invalidTransport("relay host \(host) cannot be resolved")
        }
        defer { freeaddrinfo(found) }
        let length = first.pointee.ai_addrlen
        withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: address, count: Int(length))) }
        if Int32(storage.ss_family) == AF_INET6 {
            withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_port = port.bigEndian } }
        } else {
            withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_port = port.bigEndian } }
        }
        return (storage, length)
    }

    /// Sends an already protected datagram (or any bytes, for keep-alives).
    func send(raw bytes: [UInt8]) {
        if path.overTCP {
            sendFramed(bytes)
            return
        }
        var target = relay
        let length = relayLength
        let sent = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &target) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(fd, raw.baseAddress, raw.count, 0, $0, length)
            } }
        }
        if sent > 0 { statistics.packetsSent.add(1, ordering: .relaxed) }
    }

    /// Sends an RTCP receiver report with no report blocks, from `ssrc`: how a subscriber tells the
    /// relay where it is before any media flows, and keeps its NAT binding open.
    func sendEmptyReceiverReport(ssrc: UInt32) {
        var bytes: [UInt8] = [0x80, 201, 0, 1, UInt8(ssrc >> 24), UInt8(ssrc >> 16 & 0xFF), UInt8(ssrc >> 8 & 0xFF), UInt8(ssrc & 0xFF)]
        do {
            try sendLock.withLock { _ throws(SRTPError) in try protector.protectRTCP(&bytes) }
        } catch {
            return
        }
        send(raw: bytes)
    }

    /// Sets the sender SSRC of every packet in an RTCP compound.
    static func rewriteSenderSSRC(_ bytes: inout [UInt8], _ ssrc: UInt32) {
        var offset = 0
        while offset + 8 <= bytes.count {
            let words = Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
            bytes[offset + 4] = UInt8(ssrc >> 24)
            bytes[offset + 5] = UInt8(ssrc >> 16 & 0xFF)
            bytes[offset + 6] = UInt8(ssrc >> 8 & 0xFF)
            bytes[offset + 7] = UInt8(ssrc & 0xFF)
            offset += (words + 1) * 4
        }
    }

    /// `SO_TIMESTAMPNS` (and `SCM_TIMESTAMPNS`, the control message it brings): Linux's value,
    /// which Glibc's module does not export.
    static let timestampOption: Int32 = 35

    /// Receives one datagram into `storage`; with the kernel's arrival time (CLOCK_REALTIME
    /// nanoseconds) when the socket stamps them.
    private func receive(into storage: inout [UInt8], control: inout [UInt8]) -> (Int, UInt64?) {
        storage.withUnsafeMutableBytes { data in
            control.withUnsafeMutableBytes { control in
                var vector = iovec(iov_base: data.baseAddress, iov_len: data.count)
                return withUnsafeMutablePointer(to: &vector) { vector in
                    var message = msghdr()
                    message.msg_iov = vector
                    message.msg_iovlen = 1
                    message.msg_control = control.baseAddress
                    message.msg_controllen = control.count
                    let count = recvmsg(fd, &message, 0)
                    guard count > 0 else { return (count, nil) }
                    // One cmsghdr (length, level, type) then the timespec, as the kernel lays it out on LP64.
                    var offset = 0
                    let header = MemoryLayout<Int>.size + 8
                    while offset + header <= message.msg_controllen {
                        let length = control.load(fromByteOffset: offset, as: Int.self)
                        let level = control.load(fromByteOffset: offset + MemoryLayout<Int>.size, as: Int32.self)
                        let type = control.load(fromByteOffset: offset + MemoryLayout<Int>.size + 4, as: Int32.self)
                        guard length >= header else { break }
                        if level == SOL_SOCKET, type == Self.timestampOption, offset + header + 16 <= message.msg_controllen {
                            let seconds = control.load(fromByteOffset: offset + header, as: Int.self)
                            let nanoseconds = control.load(fromByteOffset: offset + header + 8, as: Int.self)
                            return (count, UInt64(seconds) &* 1_000_000_000 &+ UInt64(nanoseconds))
                        }
                        offset += (length + 7) & ~7
                    }
                    return (count, nil)
                }
            }
        }
    }

    /// Feeds the downlink estimate and sends it when due (a subscriber's flow only).
    private func estimate(_ packet: [UInt8], size: Int, arrival: UInt64) {
        guard let rtcpSSRC = rtcpSenderSSRC, packet.count >= 12 else { return }
        let ssrc = UInt32(packet[8]) << 24 | UInt32(packet[9]) << 16 | UInt32(packet[10]) << 8 | UInt32(packet[11])
        // The median is taken only when a frame's train adds a sample, not for every packet.
        guard downlink.packet(ssrc: ssrc, sequence: UInt16(packet[2]) << 8 | UInt16(packet[3]),
                              timestamp: UInt32(packet[4]) << 24 | UInt32(packet[5]) << 16 | UInt32(packet[6]) << 8 | UInt32(packet[7]),
                              marker: packet[1] & 0x80 != 0, size: size, arrival: arrival),
              let bitsPerSecond = downlink.estimate(now: arrival)
        else { return }
        let moved = Double(bitsPerSecond) < Double(lastEstimate) * 0.75 || Double(bitsPerSecond) > Double(lastEstimate) * 1.25
        guard arrival >= nextEstimate || moved else { return }
        nextEstimate = arrival &+ Self.estimateInterval
        lastEstimate = bitsPerSecond
        let remb = RTCPReceiverEstimatedMaxBitrate(senderSSRC: rtcpSSRC, bitrate: UInt64(bitsPerSecond), ssrcs: [ssrc])
        guard var bytes = try? RTCPCompoundPacket(packets: [.receiverReport(RTCPReceiverReport(ssrc: rtcpSSRC)), .receiverEstimatedMaxBitrate(remb)]).serialized()
        else { return }
        do {
            try sendLock.withLock { _ throws(SRTPError) in try protector.protectRTCP(&bytes) }
        } catch {
            return
        }
        send(raw: bytes)
    }

    private func receiveLoop() {
        var storage = [UInt8](repeating: 0, count: 2048)
        var control = [UInt8](repeating: 0, count: 64)
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while running.load(ordering: .relaxed) {
            guard poll(&poller, 1, 200) > 0 else { continue }
            let (count, arrival) = receive(into: &storage, control: &control)
            guard count > 0 else { continue }
            handle(Array(storage[0..<count]), arrival: arrival)
        }
    }

    /// Over TCP: RFC 4571 frames read from the stream, each handled as a datagram (no kernel
    /// arrival stamps on a stream: the downlink estimate has none to go by).
    private func receiveTCPLoop() {
        var chunk = [UInt8](repeating: 0, count: 16_384)
        var pending: [UInt8] = []
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while running.load(ordering: .relaxed) {
            guard poll(&poller, 1, 200) > 0 else { continue }
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
                statistics.transportClosed.store(true, ordering: .relaxed)
                return
            }
            guard count > 0 else { continue }
            pending.append(contentsOf: chunk[0..<count])
            var offset = 0
            while pending.count - offset >= 2 {
                let length = Int(pending[offset]) << 8 | Int(pending[offset + 1])
                guard pending.count - offset - 2 >= length else { break }
                if length > 0 { handle(Array(pending[(offset + 2)..<(offset + 2 + length)]), arrival: nil) }
                offset += 2 + length
            }
            if offset > 0 { pending.removeFirst(offset) }
        }
    }

    /// One protected packet from the relay: checked, unprotected and handed on.
    private func handle(_ received: [UInt8], arrival: UInt64?) {
        var packet = received
        let count = received.count
        guard packet.count >= 8 else { return }
        let isRTCP = (192...223).contains(packet[1])
        do {
            if isRTCP { try verifier.unprotectRTCP(&packet) } else { try verifier.unprotect(&packet) }
        } catch {
            statistics.authenticationFailures.add(1, ordering: .relaxed)
            return
        }
        statistics.packetsReceived.add(1, ordering: .relaxed)
        statistics.bytesReceived.add(count, ordering: .relaxed)
        if !isRTCP, let arrival { estimate(packet, size: count, arrival: arrival) }
        if isRTCP, let sent { answerRetransmissionRequests(packet, from: sent) }
        let buffer = Buffer(bytes: packet)
        if isRTCP { onRTCP(buffer) } else { onRTP(buffer, packet[1] & 0x7F) }
    }

    /// Sends again, from `sent`, each packet a generic NACK in `rtcp` (unprotected) asks for.
    private func answerRetransmissionRequests(_ rtcp: [UInt8], from sent: SentPacketCache) {
        guard let compound = try? RTCPCompoundPacket(parsing: rtcp) else { return }
        let now = DispatchTime.now().uptimeNanoseconds
        for case .genericNACK(let nack) in compound.packets {
            for bytes in sent.resend(ssrc: nack.mediaSSRC, sequences: nack.lostSequenceNumbers, now: now) {
                send(raw: bytes)
                statistics.retransmissionsSent.add(1, ordering: .relaxed)
            }
        }
    }

    /// Writes one RFC 4571 frame, whole or not at all from the caller's view: a frame cut short
    /// (the send timed out midway) breaks the framing, so the connection is then shut.
    private func sendFramed(_ bytes: [UInt8]) {
        guard bytes.count <= 65_535 else { return }
        let frame = [UInt8(bytes.count >> 8), UInt8(bytes.count & 0xFF)] + bytes
        let complete = sendLock.withLock { _ -> Bool in
            var offset = 0
            while offset < frame.count {
                let sent = frame.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, frame.count - offset, Int32(MSG_NOSIGNAL)) }
                if sent < 0 && errno == EINTR { continue }
                guard sent > 0 else { return false }
                offset += sent
            }
            return true
        }
        if complete {
            statistics.packetsSent.add(1, ordering: .relaxed)
        } else {
            statistics.transportClosed.store(true, ordering: .relaxed)
            shutdownSocket(fd)
        }
    }

    /// A connected TCP socket to `address`, or a typed error after `seconds`.
    private static func connectTCP(_ address: sockaddr_storage, length: socklen_t, within seconds: Int32) throws(PCastError) -> Int32 {
        let descriptor = socket(Int32(address.ss_family), Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw .invalidTransport("socket(tcp): errno \(errno)") }
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        var target = address
        let started = withUnsafePointer(to: &target) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, length) } }
        if started != 0 && errno != EINPROGRESS {
            let code = errno
            close(descriptor)
            throw .connectionFailed("media over TCP: connect failed (errno \(code))")
        }
        var poller = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
        var failure: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        guard poll(&poller, 1, seconds * 1000) == 1, getsockopt(descriptor, SOL_SOCKET, SO_ERROR, &failure, &size) == 0, failure == 0 else {
            close(descriptor)
            throw .connectionFailed("media over TCP: the relay's TCP port did not answer within \(seconds) s")
        }
        // Blocking again, with a bound on each send: a stalled connection fails a send rather than
        // holding the pipeline's thread.
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var on: Int32 = 1
        setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
        return descriptor
    }
}

private func shutdownSocket(_ fd: Int32) {
    _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
}

/// How one flow reaches the relay (``PCastOptions/mediaTransport``), and why.
///
/// ```swift
/// print(publisher.mediaPath)   // "tcp (UDP to 198.18.40.1:4443 did not answer within 1 s)"
/// ```
public struct MediaPath: Sendable, Hashable, CustomStringConvertible {
    /// `udp`, or `tcp`: SRTP in RFC 4571 frames over a TCP connection to the relay's TCP port.
    public let transport: String
    /// Why TCP was taken (nil over UDP).
    public let reason: String?

    public var overTCP: Bool { transport == "tcp" }

    public static let udp = MediaPath(transport: "udp", reason: nil)

    public static func tcp(_ reason: String) -> MediaPath { MediaPath(transport: "tcp", reason: reason) }

    public var description: String { reason.map { "\(transport) (\($0))" } ?? transport }
}
