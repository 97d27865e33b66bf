import Foundation
import PCastProtocol
@testable import PCastRelay
import PCastTestSupport
import SRTP
import Testing

/// RTCP through the relay over real sockets: NACKs, keyframe requests, receiver reports.
@Suite("Relay feedback")
struct RelayFeedbackTests {
    static let video: UInt32 = 0x2222_0001

    @Test("a NACK is answered from the cache to that subscriber only; an evicted sequence counts as missed")
    func nackFromCache() throws {
        var configuration = RelayConfiguration()
        configuration.packetCacheCapacity = 16
        configuration.packetCacheDuration = .seconds(600)
        let relay = try Relay(configuration: configuration)
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video)])
        let asking = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "asking")
        let other = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "other")
        try asking.sendReceiverReport()
        try other.sendReceiverReport()

        var plain: [UInt16: [UInt8]] = [:]
        for sequence in UInt16(1)...40 {
            plain[sequence] = try rtpPacket(ssrc: Self.video, sequence: sequence)
            try publisher.send(rtp: plain[sequence]!)
        }
        // "Lose" 35: take the datagrams off the socket but never unprotect 35, as if it never came.
        for _ in 1...40 {
            var datagram = try #require(asking.socket.receive(timeout: 5))
            if try RTPPacketLayout(parsing: datagram).sequenceNumber == 35 { continue }
            try asking.receiver.unprotect(&datagram)
        }
        for _ in 1...40 { _ = try #require(other.socket.receive(timeout: 5)) }

        try asking.sendRTCP([.genericNACK(RTCPGenericNACK(senderSSRC: asking.rtcpSSRC, mediaSSRC: Self.video, lostSequenceNumbers: [35]))])
        let resent = try #require(try asking.receiveRTP())
        #expect(try resent.serialized() == plain[35]!)
        #expect(waitUntil { relay.statistics().nacksServed == 1 })

        // 2 was overwritten long ago in a 16-packet cache.
        try asking.sendRTCP([.genericNACK(RTCPGenericNACK(senderSSRC: asking.rtcpSSRC, mediaSSRC: Self.video, lostSequenceNumbers: [2]))])
        #expect(waitUntil { relay.statistics().nacksMissed == 1 })
        #expect(relay.statistics().nacksServed == 1)
        #expect(other.socket.drain().isEmpty, "retransmissions go only to the subscriber that asked")
    }

    @Test("a subscriber's arrival makes the relay ask the publisher for a keyframe at once, a PLI it decrypts with its serverKey; the subscriber's first RTCP asks nothing more while it is on its way")
    func pliOnSubscribe() throws {
        let relay = try Relay()
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video), audioTrack(ssrc: 0x2222_0002)])
        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 1))  // the relay learns where the publisher is
        #expect(waitUntil { relay.statistics().packetsIn == 1 })

        let subscriber = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "a")
        let packets = try #require(publisher.receiveRTCP { $0.contains { if case .pictureLossIndication = $0 { true } else { false } } })
        #expect(packets.contains(.pictureLossIndication(RTCPPictureLossIndication(senderSSRC: relay.relaySSRC, mediaSSRC: Self.video))))
        // The I/O thread publishes its figures just after it sends: the PLI can arrive first.
        #expect(waitUntil { relay.statistics().keyframeRequests == 1 })
        try subscriber.sendRTCP([.receiverReport(RTCPReceiverReport(ssrc: subscriber.rtcpSSRC))])
        #expect(waitUntil { relay.statistics().packetsIn >= 2 })
        #expect(relay.statistics().keyframeRequests == 1)
    }

    @Test("the keyframe asked for a new subscriber reaches it from the cache the moment it is first heard from: from the keyframe's first packet to the latest, in order (an older keyframe is not sent); and a new keyframe is asked for at once, within the throttle")
    func keyframeFromCacheOnJoin() throws {
        var configuration = RelayConfiguration()
        configuration.keyframeRequestInterval = .milliseconds(100)
        let relay = try Relay(configuration: configuration)
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video)])
        /// A packet whose payload starts with an SPS (a keyframe's first), or a slice.
        func packet(_ sequence: UInt16, keyframe: Bool) throws -> [UInt8] {
            let payload: [UInt8] = (keyframe ? [0x67, 0x42, 0x00, 0x1F] : [0x41, 0x9A]) + [UInt8](repeating: 0xAB, count: 200)
            return try RTPPacket(marker: !keyframe, payloadType: 96, sequenceNumber: sequence, timestamp: UInt32(sequence / 2) * 3000,
                                 ssrc: Self.video, payload: payload[...]).serialized()
        }
        func isPLI(_ packets: [RTCPPacket]) -> Bool { packets.contains { if case .pictureLossIndication = $0 { true } else { false } } }
        // An older keyframe, before the subscriber came.
        for sequence in UInt16(1)...3 { try publisher.send(rtp: try packet(sequence, keyframe: sequence == 1)) }
        #expect(waitUntil { relay.statistics().packetsIn == 3 })
        let subscriber = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "a")
        _ = try #require(publisher.receiveRTCP(where: isPLI))
        // The keyframe it asked for, and a frame after it, before the subscriber is first heard from.
        for sequence in UInt16(4)...7 { try publisher.send(rtp: try packet(sequence, keyframe: sequence == 4)) }
        #expect(waitUntil { relay.statistics().packetsIn == 4 + 3 })
        try subscriber.sendRTCP([.receiverReport(RTCPReceiverReport(ssrc: subscriber.rtcpSSRC))])
        var received: [UInt16] = []
        while received.count < 4, let rtp = try subscriber.receiveRTP(timeout: 2) { received.append(rtp.sequenceNumber) }
        #expect(received == [4, 5, 6, 7])
        try publisher.send(rtp: try packet(8, keyframe: false))
        #expect(try subscriber.receiveRTP(timeout: 2)?.sequenceNumber == 8, "then live")
        _ = try #require(publisher.receiveRTCP(where: isPLI), "a new keyframe asked for, once the throttle's 100 ms passed")
        // Two at least: a loaded machine may let the join's 500 ms wait pass first, and ask again.
        // The I/O thread publishes its figures just after it sends: the PLI can arrive first.
        #expect(waitUntil { relay.statistics().keyframeRequests >= 2 })
        #expect(relay.statistics().nacksServed == 0)
    }

    @Test("a subscriber's FIR reaches the publisher as a FIR with a sequence number")
    func firForwarded() throws {
        var configuration = RelayConfiguration()
        configuration.keyframeRequestInterval = .zero
        let relay = try Relay(configuration: configuration)
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video)])
        try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: 1))
        let subscriber = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "a")
        try subscriber.sendRTCP([.fullIntraRequest(RTCPFullIntraRequest(senderSSRC: subscriber.rtcpSSRC, entries: [.init(ssrc: Self.video, sequenceNumber: 200)]))])
        let packets = try #require(publisher.receiveRTCP { $0.contains { if case .fullIntraRequest = $0 { true } else { false } } })
        #expect(packets.contains(.fullIntraRequest(RTCPFullIntraRequest(senderSSRC: relay.relaySSRC, mediaSSRC: 0, entries: [.init(ssrc: Self.video, sequenceNumber: 0)]))))
    }

    @Test("subscribers' receiver reports are aggregated into the relay's report to the publisher")
    func receiverReportAggregation() throws {
        var configuration = RelayConfiguration()
        configuration.receiverReportInterval = .milliseconds(50)
        let relay = try Relay(configuration: configuration)
        defer { relay.shutdown() }
        let publisher = try TestPublisher(relay: relay, streamId: "s", tracks: [videoTrack(ssrc: Self.video)])
        let good = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "good")
        let poor = try TestSubscriber(relay: relay, streamId: "s", subscriberId: "poor")
        for sequence in UInt16(1)...20 { try publisher.send(rtp: try rtpPacket(ssrc: Self.video, sequence: sequence)) }
        try good.sendReceiverReport(blocks: [RTCPReportBlock(ssrc: Self.video, fractionLost: 3, cumulativeLost: 1, extendedHighestSequenceNumber: 20, jitter: 10)])
        try poor.sendReceiverReport(blocks: [RTCPReportBlock(ssrc: Self.video, fractionLost: 77, cumulativeLost: 12, extendedHighestSequenceNumber: 20, jitter: 900)])

        let packets = try #require(publisher.receiveRTCP { packets in
            packets.contains { if case .receiverReport(let rr) = $0 { rr.reportBlocks.first?.fractionLost == 77 } else { false } }
        })
        guard case .receiverReport(let report)? = packets.first(where: { if case .receiverReport = $0 { true } else { false } }) else {
            Issue.record("no receiver report")
            return
        }
        #expect(report.ssrc == relay.relaySSRC)
        let block = try #require(report.reportBlocks.first)
        #expect(block.ssrc == Self.video)
        #expect(block.cumulativeLost == 12 && block.jitter >= 900)
        #expect(block.extendedHighestSequenceNumber == 20, "the highest sequence is the relay's own, from the publisher leg")
    }
}
