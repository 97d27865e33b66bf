import PCastProtocol
@testable import PCastRelay
import SRTP
import Testing

/// Claims of the API guide and of PCastNode's *WebRTC* article about the relay, checked on its
/// pure pieces: a viewer without REMB, an edge's gaps on its leg, a WebRTC viewer's payload types.
@Suite("Article claims: a viewer without REMB, an edge's leg gaps, per-viewer payload types")
struct RelayArticleClaimsTests {
    static let ms: UInt64 = 1_000_000, s: UInt64 = 1_000_000_000

    @Test("a simulcast viewer that never sends a REMB stays on the middle layer for a second, then climbs to the best; a window of its reports with 20 % loss moves it down one layer and holds it there for 8 s, after which it climbs again after a second")
    func noREMBClimbsThenFallsBackOnLosses() {
        var selector = LayerSelector(bitrates: [2_500_000, 300_000, 150_000])
        #expect(selector.initial == 1)
        #expect(selector.choose(current: 1, now: 0) == 1, "the hold starts")
        #expect(selector.choose(current: 1, now: Self.s - Self.ms) == 1, "not yet a second")
        #expect(selector.choose(current: 1, now: Self.s) == 0, "a second without an estimate: the best layer")

        func block(_ highest: UInt32, lost: Int32) -> RTCPReportBlock {
            RTCPReportBlock(ssrc: 1, cumulativeLost: lost, extendedHighestSequenceNumber: highest)
        }
        #expect(selector.report(block(0, lost: 0), publisherLegLoss: 0, current: 0, now: Self.s) == nil, "the window opens")
        #expect(selector.report(block(100, lost: 20), publisherLegLoss: 0, current: 0, now: 2 * Self.s) == 1, "20 % of its own leg: down one layer")
        #expect(selector.choose(current: 1, now: 5 * Self.s) == 1, "held")
        #expect(selector.choose(current: 1, now: 9 * Self.s) == 1, "still held")
        #expect(selector.choose(current: 1, now: 10 * Self.s) == 1, "the hold is over: the second starts")
        #expect(selector.choose(current: 1, now: 11 * Self.s) == 0, "and it climbs")
    }

    @Test("an edge asks its origin for a gap in the leg the way a relay asks a publisher: once the reordering allowance (31.25 ms) passed, in a NACK to the origin's address sent with the SSRC the origin gave the edge, counted as a gap request")
    func edgeAsksItsOriginForGaps() throws {
        let video: UInt32 = 0xBBBB_0001, legSSRC: UInt32 = 0x0E0E_0001
        let origin = RelayAddress(ipv4: 0x7F00_0002, port: 7000)
        var settings = RouterSettings(relaySSRC: 9, keyframeInterval: 300 * Self.ms, packetCacheCapacity: 64, packetCacheDuration: 1_000 * Self.ms)
        settings.arrivalEstimator = nil
        var router = RelayRouter<Int>(settings: settings, now: 0)
        router.addStream(id: "s", tracks: [videoTrack(ssrc: video), audioTrack(ssrc: 0xBBBB_0002)], publisher: 1,
                         upstream: UpstreamLeg(address: origin, ssrc: legSSRC))
        let stream = try #require(router.handle(streamId: "s"))
        for (sequence, at) in [(UInt16(10), UInt64(1)), (11, 2), (13, 3)] {
            let action = router.publisherRTP(stream: stream, track: 0, packet: try rtpPacket(ssrc: video, sequence: sequence), sequenceNumber: sequence,
                                             timestamp: UInt32(sequence) &* 3000, now: at * Self.ms)
            #expect(action == nil, "\(sequence): nothing asked at once")
        }
        func nacks(_ actions: [RelayAction<Int>]) -> [(context: Int, address: RelayAddress, nack: RTCPGenericNACK)] {
            actions.compactMap { action -> (context: Int, address: RelayAddress, nack: RTCPGenericNACK)? in
                guard case .toPublisher(let context, let address, let bytes) = action,
                      let compound = try? RTCPCompoundPacket(parsing: bytes) else { return nil }
                for case .genericNACK(let nack) in compound.packets { return (context, address, nack) }
                return nil
            }
        }
        #expect(nacks(router.tick(now: 34 * Self.ms)).isEmpty, "within the allowance")
        let asked = nacks(router.tick(now: 35 * Self.ms))
        try #require(asked.count == 1)
        #expect(asked[0].context == 1 && asked[0].address == origin)
        #expect(asked[0].nack.senderSSRC == legSSRC && asked[0].nack.mediaSSRC == video && asked[0].nack.lostSequenceNumbers == [12])
        #expect(router.counters.gapRequests == 1)
    }

    @Test("a WebRTC viewer's payload types: the table maps the stream's types to the viewer's (others to themselves, none when nothing changes), and its flow rewrites each packet's payload type, keeping the marker bit, while a flow without a table leaves it as it is")
    func payloadTypesPerViewer() throws {
        #expect(RTPRewrite.table([96: 96, 111: 111]) == nil, "the viewer chose the stream's own types")
        let table = try #require(RTPRewrite.table([96: 102, 111: 109]))
        #expect(table.count == 128 && table[96] == 102 && table[111] == 109 && table[0] == 0 && table[127] == 127)

        func flow(_ payloadTypes: [UInt8]?) throws -> FlowCrypto {
            FlowCrypto(inbound: try SRTPSession(key: .random(for: .aeadAES128GCM), direction: .inbound),
                       outbound: try SRTPSession(key: .random(for: .aeadAES128GCM), direction: .outbound),
                       payloadTypes: payloadTypes)
        }
        let browser = try flow(table), sdk = try flow(nil)
        func sent(_ flow: FlowCrypto, payloadType: UInt8, marker: Bool) throws -> UInt8 {
            var packet = try RTPPacket(marker: marker, payloadType: payloadType, sequenceNumber: 1, timestamp: 0, ssrc: 5, payload: [UInt8]([0x41, 0x9A])[...]).serialized()
            packet.withUnsafeMutableBytes { flow.mapPayloadType($0) }
            return packet[1]
        }
        #expect(try sent(browser, payloadType: 96, marker: true) == 0x80 | 102)
        #expect(try sent(browser, payloadType: 111, marker: false) == 109)
        #expect(try sent(sdk, payloadType: 96, marker: true) == 0x80 | 96)
    }
}
