import Foundation
import Glibc
import PCastProtocol
@testable import PCastRelay
import PCastTestSupport
import SRTP
import Testing

extension UDPSocket {
    /// A client socket on 127.0.0.1 with an ephemeral port.
    static func client() throws -> UDPSocket {
        try UDPSocket(host: "127.0.0.1", port: 0, bufferSize: 1 << 20)
    }

    /// The next datagram, waiting up to `timeout` seconds; nil if none came.
    func receive(timeout: Double) -> [UInt8]? {
        var descriptor = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let deadline = Date().addingTimeInterval(timeout)
        repeat {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            let n = recv(self.descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if n >= 0 { return Array(buffer[0..<n]) }
            let remaining = deadline.timeIntervalSinceNow
            if remaining <= 0 { return nil }
            _ = poll(&descriptor, 1, Int32(min(remaining * 1000 + 1, 100)))
        } while true
    }

    /// Every datagram already queued, without waiting.
    func drain() -> [[UInt8]] {
        var result: [[UInt8]] = []
        while let datagram = receive(timeout: 0) { result.append(datagram) }
        return result
    }
}

func relayAddress(_ relay: Relay) -> RelayAddress {
    RelayAddress(ipv4: 0x7F00_0001, port: relay.mediaPort)
}

func keys(_ transport: MediaTransport) throws -> (client: SRTPKey, server: SRTPKey) {
    let profile = try #require(SRTPProfile(rawValue: transport.srtpProfile))
    return (try SRTPKey(profile: profile, base64: transport.clientKey), try SRTPKey(profile: profile, base64: transport.serverKey))
}

func videoTrack(ssrc: UInt32) -> MediaTrackDescription {
    MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: ssrc)
}

func audioTrack(ssrc: UInt32) -> MediaTrackDescription {
    MediaTrackDescription(kind: .audio, codec: "OPUS", payloadType: 111, clockRate: 48_000, ssrc: ssrc)
}

/// A plain RTP packet whose payload is derived from its sequence number. It starts as an H.264
/// slice that is no keyframe's (NAL header 0x41): a viewer joining a stream of these is sent
/// every packet, and one of SPS-led keyframes (see `RelayForwardingTests`) waits for one.
func rtpPacket(ssrc: UInt32, sequence: UInt16, payloadType: UInt8 = 96, size: Int = 400) throws -> [UInt8] {
    let payload = (0..<size).map { $0 == 0 ? 0x41 : UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(sequence)) }
    return try RTPPacket(
        payloadType: payloadType, sequenceNumber: sequence, timestamp: UInt32(sequence) &* 3000, ssrc: ssrc,
        payload: payload[...]
    ).serialized()
}

/// A publishing client: sends SRTP with its clientKey, reads what the relay sends it with its serverKey.
final class TestPublisher {
    let socket: UDPSocket
    let sender: SRTPSession
    let receiver: SRTPSession
    let relay: RelayAddress
    let transport: MediaTransport

    init(relay: Relay, streamId: String, tracks: [MediaTrackDescription]) throws {
        transport = try relay.addPublisher(streamId: streamId, tracks: tracks)
        let (client, server) = try keys(transport)
        socket = try .client()
        sender = try SRTPSession(key: client, direction: .outbound)
        receiver = try SRTPSession(key: server, direction: .inbound)
        self.relay = relayAddress(relay)
    }

    /// Protects and sends a plain RTP packet; returns what went on the wire.
    @discardableResult
    func send(rtp plain: [UInt8]) throws -> [UInt8] {
        var packet = plain
        try sender.protect(&packet)
        socket.send(packet, to: relay)
        return packet
    }

    func sendRTCP(_ packets: [RTCPPacket]) throws {
        var packet = try RTCPCompoundPacket(packets: packets).serialized()
        try sender.protectRTCP(&packet)
        socket.send(packet, to: relay)
    }

    /// The next RTCP packets from the relay that satisfy `match`, unprotected and parsed.
    func receiveRTCP(timeout: Double = 5, where match: ([RTCPPacket]) -> Bool) -> [RTCPPacket]? {
        let deadline = Date().addingTimeInterval(timeout)
        while deadline.timeIntervalSinceNow > 0 {
            guard var datagram = socket.receive(timeout: deadline.timeIntervalSinceNow) else { return nil }
            guard (try? receiver.unprotectRTCP(&datagram)) != nil,
                  let compound = try? RTCPCompoundPacket(parsing: datagram)
            else { continue }
            if match(compound.packets) { return compound.packets }
        }
        return nil
    }
}

/// A subscribing client: sends RTCP with its clientKey and `rtcpSSRC`, unprotects media with its serverKey.
final class TestSubscriber {
    var socket: UDPSocket
    let sender: SRTPSession
    let receiver: SRTPSession
    let relay: RelayAddress
    let transport: MediaTransport
    let rtcpSSRC: UInt32

    init(relay: Relay, streamId: String, subscriberId: String) throws {
        transport = try relay.addSubscriber(streamId: streamId, subscriberId: subscriberId)
        let (client, server) = try keys(transport)
        socket = try .client()
        sender = try SRTPSession(key: client, direction: .outbound)
        receiver = try SRTPSession(key: server, direction: .inbound)
        rtcpSSRC = try #require(transport.rtcpSSRC)
        self.relay = relayAddress(relay)
    }

    func sendRTCP(_ packets: [RTCPPacket], from socket: UDPSocket? = nil) throws {
        var packet = try RTCPCompoundPacket(packets: packets).serialized()
        try sender.protectRTCP(&packet)
        (socket ?? self.socket).send(packet, to: relay)
    }

    /// An empty receiver report: what tells the relay where this subscriber is.
    func sendReceiverReport(blocks: [RTCPReportBlock] = [], from socket: UDPSocket? = nil) throws {
        try sendRTCP([.receiverReport(RTCPReceiverReport(ssrc: rtcpSSRC, reportBlocks: blocks))], from: socket)
    }

    /// The next SRTP packet, unprotected (nil on timeout; throws if it does not authenticate).
    func receiveRTP(timeout: Double = 5) throws -> RTPPacket? {
        while true {
            guard var datagram = socket.receive(timeout: timeout) else { return nil }
            if (192...223).contains(datagram[1]) { continue }  // RTCP (forwarded SRs)
            try receiver.unprotect(&datagram)
            return try RTPPacket(parsing: datagram)
        }
    }
}

/// The hostile and real RTP/RTCP packets the relay is fed: the project's own corpus, and the
/// shared one when it is beside the repository.
func corpusFiles() throws -> [URL] {
    Corpora.packetFiles()
}
