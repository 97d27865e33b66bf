import Foundation
import PCastContracts
import PCastProtocol
@testable import PCastRelay
import PCastTestSupport
import SRTP
import Testing

/// The relay over real sockets on 127.0.0.1: forwarding, symmetric RTP, SRTP checks, garbage.
@Suite("Relay forwarding")
struct RelayForwardingTests {
    static let video: UInt32 = 0x1111_0001
    static let audio: UInt32 = 0x1111_0002

    @Test("a publisher's packets reach 3 subscribers, each decrypting with its own serverKey, in order")
    func forwardsToEverySubscriber() throws {
        let relay = try Relay()
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video), audioTrack(ssrc: Self.audio)])
        let subscribers = try (0..<3).map { try TestSubscriber(relay: relay, streamId: "s", subscriberId: "sub\($0)") }
        #expect(Set(subscribers.map(\.transport.serverKey)).count == 3, "every flow has its own keys")
        #expect(subscribers.allSatisfy { $0.transport.port == relay.mediaPort && $0.transport.srtpProfile == "AEAD_AES_128_GCM" })
        // The relay reads its one socket in order, so these reports are handled before the media.
        for subscriber in subscribers { try subscriber.sendReceiverReport() }

        var sent: [[UInt8]] = []
        for sequence in UInt16(100)..<150 {
            let ssrc = sequence % 5 == 0 ? Self.audio : Self.video
            let plain = try rtpPacket(ssrc: ssrc, sequence: sequence, payloadType: ssrc == Self.audio ? 111 : 96)
            sent.append(plain)
            let wire = try publisher.send(rtp: plain)
            #expect(wire != plain)
        }
        for subscriber in subscribers {
            for expected in sent {
                let packet = try #require(try subscriber.receiveRTP(), "subscriber \(subscriber.rtcpSSRC) missed a packet")
                #expect(try packet.serialized() == expected, "SSRC, sequence, timestamp and payload pass through unchanged")
            }
        }
        #expect(waitUntil { relay.statistics().packetsOut >= 150 })
        let stats = relay.statistics()
        #expect(stats.streams == 1 && stats.subscribers == 3)
        #expect(stats.srtpFailures == 0 && stats.unknownPackets == 0)
    }

    @Test("a publisher's sender report reaches subscribers as SRTCP under their serverKey")
    func forwardsSenderReports() throws {
        let relay = try Relay()
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video)])
        let subscriber = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "a")
        try subscriber.sendReceiverReport()
        let report = RTCPSenderReport(ssrc: Self.video, ntpTimestamp: 0xE000_0000_8000_0000, rtpTimestamp: 90_000, packetCount: 10, octetCount: 4_000)
        try publisher.sendRTCP([.senderReport(report)])
        var datagram = try #require(subscriber.socket.receive(timeout: 5))
        try subscriber.receiver.unprotectRTCP(&datagram)
        #expect(try RTCPCompoundPacket(parsing: datagram).packets == [.senderReport(report)])
    }

    @Test("a subscriber receives only after its first authenticated RTCP, and follows a rebinding")
    func symmetricRTP() throws {
        let relay = try Relay()
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video)])
        let subscriber = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "a")

        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 1))
        #expect(waitUntil { relay.statistics().packetsIn == 1 })
        #expect(subscriber.socket.drain().isEmpty, "no address learned yet, nothing may be sent")

        try subscriber.sendReceiverReport()
        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 2))
        #expect(try subscriber.receiveRTP()?.sequenceNumber == 2)

        // An unauthenticated packet claiming the subscriber's SSRC from elsewhere changes nothing.
        let intruder = try UDPSocket.client()
        var forged = try RTCPCompoundPacket(packets: [.receiverReport(.init(ssrc: subscriber.rtcpSSRC))]).serialized()
        forged += [UInt8](repeating: 0xAB, count: 20)
        intruder.send(forged, to: relayAddress(relay))
        #expect(waitUntil { relay.statistics().srtpFailures == 1 })
        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 3))
        #expect(try subscriber.receiveRTP()?.sequenceNumber == 3)
        #expect(intruder.drain().isEmpty)

        // NAT rebinding: the same subscriber's RTCP now comes from another port.
        let rebound = try UDPSocket.client()
        try subscriber.sendReceiverReport(from: rebound)
        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 4))
        var datagram = try #require(rebound.receive(timeout: 5))
        try subscriber.receiver.unprotect(&datagram)
        #expect(try RTPPacket(parsing: datagram).sequenceNumber == 4)
        #expect(waitUntil { relay.statistics().packetsIn == 7 })
        #expect(subscriber.socket.drain().isEmpty, "the old address gets nothing after the rebinding")
    }

    @Test("SRTP packets with a bad tag or replayed are dropped and counted (forgeries as SRTP failures, the replay as a duplicate), nothing forwarded")
    func badTagAndReplay() throws {
        let relay = try Relay()
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video)])
        let subscriber = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "a")
        try subscriber.sendReceiverReport()

        let wire = try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 10))
        #expect(try subscriber.receiveRTP()?.sequenceNumber == 10)
        // The counters are published after each batch the relay handles: possibly after the packet arrived.
        #expect(waitUntil { relay.statistics().packetsOut == 1 })
        let forwarded = relay.statistics().packetsOut

        publisher.socket.send(wire, to: publisher.relay)  // replay
        var tampered = try rtpPacket(ssrc: Self.video, sequence: 11)
        try publisher.sender.protect(&tampered)
        tampered[tampered.count - 1] ^= 0x01  // bad tag
        publisher.socket.send(tampered, to: publisher.relay)
        var tamperedRTCP = try RTCPCompoundPacket(packets: [.senderReport(.init(ssrc: Self.video, ntpTimestamp: 1, rtpTimestamp: 1, packetCount: 1, octetCount: 1))]).serialized()
        try publisher.sender.protectRTCP(&tamperedRTCP)
        tamperedRTCP[9] ^= 0x40  // flips an encrypted byte: the tag no longer verifies
        publisher.socket.send(tamperedRTCP, to: publisher.relay)

        #expect(waitUntil { relay.statistics().srtpFailures == 2 && relay.statistics().duplicates == 1 })
        let stats = relay.statistics()
        #expect(stats.packetsOut == forwarded)
        #expect(subscriber.socket.drain().isEmpty)

        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 12))
        #expect(try subscriber.receiveRTP()?.sequenceNumber == 12, "the flow still works")
    }

    @Test("unknown SSRCs and every corpus file are dropped and counted (as unknown, or as refused STUN); the relay still works after")
    func unknownAndGarbage() throws {
        let relay = try Relay()
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video)])
        let subscriber = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "a")
        try subscriber.sendReceiverReport()
        #expect(waitUntil { relay.statistics().packetsIn == 1 })

        let attacker = try UDPSocket.client()
        var unknown = try rtpPacket(ssrc: 0xDEAD_BEEF, sequence: 1)
        try publisher.sender.protect(&unknown)
        attacker.send(unknown, to: relayAddress(relay))
        attacker.send([], to: relayAddress(relay))
        attacker.send([0x80], to: relayAddress(relay))
        attacker.send([UInt8](repeating: 0xFF, count: 3_000), to: relayAddress(relay))
        var expected: UInt64 = 4
        let files = try corpusFiles()
        #expect(files.count > 100, "the corpus is where it should be")
        for file in files {
            let bytes = [UInt8](try Data(contentsOf: file))
            guard bytes.count <= 65_000 else { continue }
            // Sent as-is: none carries an SSRC of ours, so each is unknown whatever its shape.
            #expect(attacker.send(bytes, to: relayAddress(relay)))
            expected += 1
            usleep(200)  // keeps the burst within the socket buffer
        }
        // Files that begin like STUN (first byte 0–3) are refused as STUN for no known ufrag;
        // everything else, DTLS-like ones included (no check passed from this address), is unknown.
        #expect(waitUntil { relay.statistics().unknownPackets + relay.statistics().stunRefusals == expected })
        #expect(relay.statistics().srtpFailures == 0)
        #expect(subscriber.socket.drain().isEmpty, "nothing was forwarded")

        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 5))
        #expect(try subscriber.receiveRTP()?.sequenceNumber == 5)
    }

    @Test("removeStream and removeSubscriber stop forwarding; later packets count as unknown")
    func removal() throws {
        let relay = try Relay()
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video)])
        let stays = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "stays")
        let leaves = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "leaves")
        try stays.sendReceiverReport()
        try leaves.sendReceiverReport()
        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 1))
        #expect(try stays.receiveRTP()?.sequenceNumber == 1)
        #expect(try leaves.receiveRTP()?.sequenceNumber == 1)

        relay.removeSubscriber(streamId: "s", subscriberId: "leaves")
        relay.removeSubscriber(streamId: "s", subscriberId: "never-was")
        #expect(relay.statistics().subscribers == 1)
        try leaves.sendReceiverReport()  // its flow is gone: unknown
        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 2))
        #expect(try stays.receiveRTP()?.sequenceNumber == 2)
        #expect(waitUntil { relay.statistics().unknownPackets == 1 })
        // Sequence 1 to both, 2 to the one that stays (counters are published after each batch).
        #expect(waitUntil { relay.statistics().packetsOut == 3 })
        #expect(leaves.socket.drain().isEmpty)

        relay.removeStream(streamId: "s")
        relay.removeStream(streamId: "never-was")
        #expect(relay.statistics().streams == 0 && relay.statistics().subscribers == 0)
        let before = relay.statistics()
        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 3))
        try stays.sendReceiverReport()
        #expect(waitUntil { relay.statistics().unknownPackets == before.unknownPackets + 2 })
        #expect(relay.statistics().packetsOut == before.packetsOut)
        #expect(stays.socket.drain().isEmpty)
        #expect(throws: RelayError.streamNotFound("s")) { try relay.addSubscriber(streamId: "s", subscriberId: "late") }
    }
}
