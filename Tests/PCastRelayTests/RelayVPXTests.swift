import PCastProtocol
@testable import PCastRelay
import Testing

/// The relay reads VP8 and VP9 keyframes where it reads H.264's: a simulcast viewer's layer
/// switch, the audio-only fallback's resumption, and the keyframe requests a keyframe answers.
@Suite("Relay router: VP8 and VP9 keyframes")
struct RelayVPXTests {
    static let high: UInt32 = 0x1000, low: UInt32 = 0x3000
    static let publisher = RelayAddress(ipv4: 0x7F00_0001, port: 5000)

    /// A VP8 packet: the first of a key frame (S, partition 0, frame tag P = 0) or of an inter frame.
    static func vp8(_ ssrc: UInt32, _ sequence: UInt16, keyframe: Bool) throws -> [UInt8] {
        let payload: [UInt8] = [0x90, 0x80, 0x05, keyframe ? 0x10 : 0x11, 0x02, 0x00, 0x9D, 0x01, 0x2A]
        return try RTPPacket(marker: true, payloadType: 96, sequenceNumber: sequence, timestamp: UInt32(sequence) &* 3000, ssrc: ssrc,
                             payload: payload[...]).serialized()
    }

    /// A VP9 packet: the start of a frame, not inter-picture predicted (a key frame) or predicted.
    static func vp9(_ ssrc: UInt32, _ sequence: UInt16, keyframe: Bool) throws -> [UInt8] {
        let payload: [UInt8] = [keyframe ? 0x8C : 0xCC, 0x05, 0x82, 0x49, 0x83]
        return try RTPPacket(marker: true, payloadType: 98, sequenceNumber: sequence, timestamp: UInt32(sequence) &* 3000, ssrc: ssrc,
                             payload: payload[...]).serialized()
    }

    @Test("a simulcast viewer of VP8 or VP9 layers starts on the layer chosen for it at that layer's first key frame, under the best layer's SSRC; inter frames before it, and the other layer, are not sent",
          arguments: ["VP8", "VP9"])
    func simulcastStartsAtAKeyframe(codec: String) throws {
        var router = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 9), now: 0)
        let packet = codec == "VP8" ? Self.vp8 : Self.vp9
        let payloadType: UInt8 = codec == "VP8" ? 96 : 98
        router.addStream(id: "s", tracks: [
            MediaTrackDescription(kind: .video, codec: codec, payloadType: payloadType, clockRate: 90_000, ssrc: Self.high,
                                  layer: SimulcastLayer(rid: "h", width: 1280, height: 720, bitrate: 2_500_000)),
            MediaTrackDescription(kind: .video, codec: codec, payloadType: payloadType, clockRate: 90_000, ssrc: Self.low,
                                  layer: SimulcastLayer(rid: "l", width: 320, height: 180, bitrate: 150_000)),
        ], publisher: 1)
        let stream = try #require(router.handle(streamId: "s"))
        router.authenticated(.track(stream: stream, track: 0), from: Self.publisher)
        _ = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: 100, now: 0)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 2, port: 2), now: 0)
        _ = router.pinSubscriberLayer(streamId: "s", subscriberId: "v", layer: "l", now: 0)
        func send(_ track: Int, _ ssrc: UInt32, _ sequence: UInt16, keyframe: Bool) throws -> VideoForwarding {
            router.forwardVideo(stream: stream, track: track, slot: 0, packet: try packet(ssrc, sequence, keyframe), now: UInt64(sequence) * 1_000_000)
        }
        #expect(try send(1, Self.low, 10, keyframe: false) == .dropped, "an inter frame: no start")
        #expect(try send(0, Self.high, 20, keyframe: true) == .dropped, "a key frame of the layer it is not to get")
        #expect(try send(1, Self.low, 11, keyframe: true) == .rewritten(ssrc: Self.high, sequence: 11), "the pinned layer's key frame: it starts")
        #expect(try send(1, Self.low, 12, keyframe: false) == .rewritten(ssrc: Self.high, sequence: 12))
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.current == "l")
    }

    @Test("a VP8 key frame from the publisher answers the keyframe requests sent before it: a viewer's next request 110 ms after it goes at once, where after an inter frame it waits for the 300 ms window", arguments: [true, false])
    func keyframeAnswersRequests(keyframe: Bool) throws {
        var router = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 9, keyframeInterval: 300_000_000), now: 0)
        router.addStream(id: "s", tracks: [MediaTrackDescription(kind: .video, codec: "VP8", payloadType: 96, clockRate: 90_000, ssrc: Self.high)],
                         publisher: 1)
        let stream = try #require(router.handle(streamId: "s"))
        router.authenticated(.track(stream: stream, track: 0), from: Self.publisher)
        _ = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: 100, now: 0)
        let ms: UInt64 = 1_000_000
        let pli = [RTCPPacket.pictureLossIndication(.init(senderSSRC: 500, mediaSSRC: Self.high))]
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: pli, now: 1_000 * ms).count == 1, "the first request goes at once")
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: pli, now: 1_010 * ms).isEmpty, "a second one within the window waits")
        _ = router.publisherRTP(stream: stream, track: 0, packet: try Self.vp8(Self.high, 1, keyframe: keyframe), sequenceNumber: 1,
                                timestamp: 3000, now: 1_050 * ms)
        let next = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: pli, now: 1_160 * ms)
        #expect(next.count == (keyframe ? 1 : 0), "a request 110 ms after a \(keyframe ? "key" : "inter") frame: \(next.count) sent")
    }
}
