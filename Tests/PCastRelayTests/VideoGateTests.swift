import PCastProtocol
@testable import PCastRelay
import Testing

/// The audio-only fallback: a subscriber whose leg cannot carry the video gets the audio alone,
/// until a probe shows the video gets through again. Pure, on an injected clock.
@Suite("Audio-only fallback")
struct VideoGateTests {
    static let ms: UInt64 = 1_000_000
    static let s: UInt64 = 1_000_000_000
    static let video: UInt32 = 0xAAAA_0001
    static let audio: UInt32 = 0xAAAA_0002

    static func block(_ ssrc: UInt32 = video, highest: UInt32, lost: Int32) -> RTCPReportBlock {
        RTCPReportBlock(ssrc: ssrc, cumulativeLost: lost, extendedHighestSequenceNumber: highest)
    }

    /// Suspends a fresh gate at 2 s: two one-second windows losing 40 %.
    static func suspendedGate() -> VideoGate {
        var gate = VideoGate(settings: .init())
        _ = gate.videoReport(block(highest: 0, lost: 0), publisherLegLoss: 0, now: 0)
        _ = gate.videoReport(block(highest: 100, lost: 40), publisherLegLoss: 0, now: 1 * s)
        _ = gate.videoReport(block(highest: 200, lost: 80), publisherLegLoss: 0, now: 2 * s)
        return gate
    }

    @Test("two lossy windows suspend; the audio getting through starts a probe once due; video resumes at a keyframe, renumbered without a gap; two clean windows resume for good")
    func suspendProbeResume() {
        var gate = VideoGate(settings: .init())
        #expect(gate.forward(sequenceNumber: 198) { false } == 198 && gate.forward(sequenceNumber: 199) { false } == 199)
        #expect(gate.isTransparent)
        #expect(gate.videoReport(Self.block(highest: 0, lost: 0), publisherLegLoss: 0, now: 0) == nil, "a window opens")
        #expect(gate.videoReport(Self.block(highest: 50, lost: 30), publisherLegLoss: 0, now: 500 * Self.ms) == nil, "shorter than a window")
        #expect(gate.videoReport(Self.block(highest: 100, lost: 40), publisherLegLoss: 0, now: 1 * Self.s) == nil, "one bad window is not enough")
        #expect(gate.videoReport(Self.block(highest: 200, lost: 80), publisherLegLoss: 0, now: 2 * Self.s) == .suspended)
        #expect(gate.state == .suspended(probeAt: 6 * Self.s) && !gate.isTransparent)
        #expect(gate.forward(sequenceNumber: 200) { true } == nil, "held back")
        #expect(gate.original(ofNacked: 199) == nil, "nothing to repair while held back")

        #expect(gate.audioReport(Self.block(Self.audio, highest: 1_000, lost: 0), now: 2_500 * Self.ms) == nil)
        #expect(gate.audioReport(Self.block(Self.audio, highest: 1_100, lost: 0), now: 3_500 * Self.ms) == nil, "not due yet")
        #expect(gate.audioReport(Self.block(Self.audio, highest: 1_400, lost: 0), now: 6_500 * Self.ms) == .probing)
        #expect(gate.awaitingKeyframe)
        #expect(gate.forward(sequenceNumber: 300) { false } == nil, "not a keyframe's start")
        #expect(gate.forward(sequenceNumber: 301) { true } == 200, "continues the subscriber's numbering")
        #expect(gate.forward(sequenceNumber: 302) { false } == 201)
        #expect(gate.forward(sequenceNumber: 300) { false } == nil, "older than the resume point")
        #expect(gate.original(ofNacked: 201) == 302)
        #expect(gate.original(ofNacked: 199) == nil, "another numbering")

        #expect(gate.videoReport(Self.block(highest: 205, lost: 80), publisherLegLoss: 0, now: 7 * Self.s) == nil)
        #expect(gate.videoReport(Self.block(highest: 305, lost: 82), publisherLegLoss: 0, now: 8 * Self.s) == nil, "one clean window")
        #expect(gate.videoReport(Self.block(highest: 405, lost: 84), publisherLegLoss: 0, now: 9 * Self.s) == .resumed)
        #expect(gate.state == .forwarding && gate.probeDelay == 4 * Self.s)
        #expect(gate.forward(sequenceNumber: 303) { false } == 202, "still renumbered")
        #expect(!gate.isTransparent, "renumbering never stops once started")
    }

    @Test("the publisher's own leg loss is every viewer's: it does not suspend anyone")
    func publisherLegLoss() {
        var gate = VideoGate(settings: .init())
        for second in UInt64(0)...5 {
            #expect(gate.videoReport(Self.block(highest: UInt32(second) * 100, lost: Int32(second) * 40), publisherLegLoss: 0.35, now: second * Self.s) == nil)
        }
        #expect(gate.state == .forwarding)
    }

    @Test("a probe that floods the leg again fails and the next one waits twice as long; none starts while the audio suffers; a probe with no verdict times out")
    func failedProbes() {
        var gate = Self.suspendedGate()
        _ = gate.audioReport(Self.block(Self.audio, highest: 0, lost: 0), now: 5 * Self.s)
        #expect(gate.audioReport(Self.block(Self.audio, highest: 100, lost: 20), now: 6 * Self.s) == nil, "audio losing 20 %: no probe")
        #expect(gate.audioReport(Self.block(Self.audio, highest: 200, lost: 20), now: 7 * Self.s) == .probing)
        _ = gate.forward(sequenceNumber: 500) { true }
        _ = gate.videoReport(Self.block(highest: 1_000, lost: 0), publisherLegLoss: 0, now: 7_100 * Self.ms)
        #expect(gate.videoReport(Self.block(highest: 1_100, lost: 50), publisherLegLoss: 0, now: 8_100 * Self.ms) == .probeFailed)
        #expect(gate.state == .suspended(probeAt: 16_100 * Self.ms) && gate.probeDelay == 8 * Self.s)
        #expect(gate.forward(sequenceNumber: 530) { true } == nil)

        // Due again; the keyframe never comes, so no video report says anything.
        #expect(gate.audioReport(Self.block(Self.audio, highest: 2_000, lost: 20), now: 17 * Self.s) == .probing)
        #expect(gate.audioReport(Self.block(Self.audio, highest: 2_100, lost: 20), now: 26 * Self.s) == nil)
        #expect(gate.audioReport(Self.block(Self.audio, highest: 2_200, lost: 20), now: 27 * Self.s) == .probeFailed, "10 s without a verdict")
        #expect(gate.probeDelay == 16 * Self.s)
        for _ in 0..<5 { gate = Self.failOnce(gate) }
        #expect(gate.probeDelay == 32 * Self.s, "capped")
    }

    static func failOnce(_ gate: VideoGate) -> VideoGate {
        var gate = gate
        guard case .suspended(let probeAt) = gate.state else { return gate }
        let highest = UInt32(probeAt / s) * 100
        _ = gate.audioReport(block(audio, highest: highest, lost: 0), now: probeAt)
        _ = gate.audioReport(block(audio, highest: highest + 1_000, lost: 0), now: probeAt &+ 10 * s)
        return gate
    }

    @Test("loss windows: nil until a window has passed or when nothing was expected; clamped to 0…1")
    func lossWindow() {
        var window = LossWindow()
        #expect(window.add(Self.block(highest: 10, lost: 0), now: 0, minimum: Self.s) == nil)
        #expect(window.add(Self.block(highest: 110, lost: 10), now: Self.s, minimum: Self.s) == 0.1)
        #expect(window.add(Self.block(highest: 110, lost: 10), now: 2 * Self.s, minimum: Self.s) == nil, "nothing sent")
        #expect(window.add(Self.block(highest: 120, lost: 5), now: 3 * Self.s, minimum: Self.s) == 0, "duplicates")
        #expect(window.add(Self.block(highest: 130, lost: 500), now: 4 * Self.s, minimum: Self.s) == 1)
    }

    @Test("H.264 payloads: SPS, IDR, a STAP-A led by an SPS and an IDR's first fragment start a keyframe; other slices, later fragments and scraps do not")
    func keyframeStarts() {
        func starts(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { H264Payload.startsKeyframe($0) } }
        #expect(starts([0x67, 0x42]) && starts([0x65, 0x88]))
        #expect(starts([0x78, 0x00, 0x0A, 0x67]) && !starts([0x78, 0x00, 0x0A, 0x41]))
        #expect(starts([0x7C, 0x85]) && !starts([0x7C, 0x05]) && !starts([0x7C, 0x81]))
        #expect(!starts([0x41, 0x9A]) && !starts([]) && !starts([0x78, 0x00]) && !starts([0x7C]))
    }

    @Test("parameter sets: an SPS alone, or a STAP-A whose first unit after an access unit delimiter and SEI is the SPS (x264's keyframe through rtph264pay); not an IDR slice or its fragment, nor a STAP-A that reaches a slice first or runs out")
    func parameterSetStarts() {
        func starts(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { H264Payload.startsWithParameterSets($0) } }
        // As captured from x264enc ! rtph264pay config-interval=-1 aggregate-mode=zero-latency.
        #expect(starts([0x78, 0x00, 0x02, 0x09, 0x10, 0x00, 0x1D, 0x67, 0xF4, 0x00, 0x1E]))
        #expect(starts([0x67, 0x42]) && starts([0x78, 0x00, 0x03, 0x06, 0x05, 0x01, 0x00, 0x02, 0x67, 0x42]))
        #expect(!starts([0x65, 0x88]) && !starts([0x7C, 0x85]) && !starts([0x78, 0x00, 0x02, 0x09, 0x10, 0x00, 0x05, 0x65]))
        #expect(!starts([0x78, 0x00, 0x02, 0x09, 0x10]) && !starts([0x78, 0x00]) && !starts([]))
    }
}

/// The router's side of the fallback: what reaches the subscriber, what the publisher hears.
@Suite("Relay router: audio-only fallback")
struct RouterFallbackTests {
    static let ms = VideoGateTests.ms
    static let s = VideoGateTests.s

    static func packet(_ sequence: UInt16, keyframe: Bool) throws -> [UInt8] {
        let payload: [UInt8] = keyframe ? [0x67, 0x42, 0x00, 0x1F] : [0x41, 0x9A, 0x00, 0x00]
        return try RTPPacket(payloadType: 96, sequenceNumber: sequence, timestamp: UInt32(sequence) * 3000, ssrc: VideoGateTests.video,
                             payload: payload[...]).serialized()
    }

    static func report(_ router: inout RelayRouter<Int>, stream: StreamHandle, rtcpSSRC: UInt32, _ blocks: [RTCPReportBlock], at now: UInt64) -> [RelayAction<Int>] {
        router.subscriberRTCP(stream: stream, rtcpSSRC: rtcpSSRC, packets: [.receiverReport(.init(ssrc: rtcpSSRC, reportBlocks: blocks))], now: now)
    }

    @Test("a suspended subscriber is told, gets no video, asks no keyframes and does not drag the publisher down; a probe asks for a keyframe and renumbers; its NACKs are mapped back")
    func fallback() throws {
        var router = RelayRouterTests.router(cache: 64)
        let stream = try #require(router.handle(streamId: "s"))
        router.authenticated(.track(stream: stream, track: 0), from: RelayRouterTests.publisherAddress)
        _ = router.addSubscriber(streamId: "s", subscriberId: "bad", rtcpSSRC: 500, context: 100, now: 0)
        _ = router.addSubscriber(streamId: "s", subscriberId: "good", rtcpSSRC: 501, context: 101, now: 0)
        let badAddress = RelayAddress(ipv4: 1, port: 1)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: badAddress, now: 0)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 501), from: RelayAddress(ipv4: 2, port: 2), now: 0)
        for sequence in UInt16(1)...10 {
            router.publisherRTP(stream: stream, track: 0, packet: try Self.packet(sequence, keyframe: false), sequenceNumber: sequence,
                                timestamp: 0, now: 100 * Self.ms)
        }
        // The fan-out sent 1…10 to everyone as they were (the gate is not asked while transparent).
        router.noteForwarded(stream: stream, track: 0, sequence: 10)
        for (second, lost) in [(UInt64(0), Int32(0)), (1, 50), (2, 100)] {
            _ = Self.report(&router, stream: stream, rtcpSSRC: 500, [VideoGateTests.block(highest: UInt32(second) * 100, lost: lost)], at: 3 * Self.s + second * Self.s)
            _ = Self.report(&router, stream: stream, rtcpSSRC: 501, [RTCPReportBlock(ssrc: VideoGateTests.video, fractionLost: 10, extendedHighestSequenceNumber: UInt32(second) * 100)],
                            at: 3 * Self.s + second * Self.s)
        }
        #expect(router.takeVideoEvents() == [SubscriberVideoEvent(streamId: "s", subscriberId: "bad", suspended: true)])
        #expect(router.takeVideoEvents() == [], "taken")
        #expect(router.counters.videoSuspensions == 1)
        var transparency: [Int: Bool] = [:]
        router.forEachReachableSlot(of: stream) { slot, _, _, transparent in transparency[slot] = transparent }
        #expect(transparency == [0: false, 1: true])
        #expect(router.forwardVideo(stream: stream, track: 0, slot: 0, packet: try Self.packet(11, keyframe: true), now: 5_400 * Self.ms) == .dropped)
        let pli = RTCPPacket.pictureLossIndication(.init(senderSSRC: 500, mediaSSRC: VideoGateTests.video))
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [pli], now: 5_500 * Self.ms) == [])

        // The publisher hears the good subscriber's loss, not the held-back one's.
        let upstream = try #require(RelayRouterTests.receiverReports(router.tick(now: 5_600 * Self.ms)).first { !$0.reportBlocks.isEmpty }?.reportBlocks.first)
        #expect(upstream.fractionLost == 10)

        // Due at 9 s: the audio gets through, so a probe asks the publisher for a keyframe.
        _ = Self.report(&router, stream: stream, rtcpSSRC: 500, [VideoGateTests.block(VideoGateTests.audio, highest: 0, lost: 0)], at: 8 * Self.s)
        let probe = Self.report(&router, stream: stream, rtcpSSRC: 500, [VideoGateTests.block(VideoGateTests.audio, highest: 100, lost: 0)], at: 9 * Self.s)
        #expect(probe == [.toPublisher(1, RelayRouterTests.publisherAddress, rtcp: RelayRouterTests.pli())])
        #expect(router.counters.videoProbes == 1)
        #expect(router.forwardVideo(stream: stream, track: 0, slot: 0, packet: try Self.packet(40, keyframe: false), now: 9_050 * Self.ms) == .dropped)
        let keyframe = try Self.packet(41, keyframe: true)
        router.publisherRTP(stream: stream, track: 0, packet: keyframe, sequenceNumber: 41, timestamp: 0, now: 9_100 * Self.ms)
        #expect(router.forwardVideo(stream: stream, track: 0, slot: 0, packet: keyframe, now: 9_100 * Self.ms) == .renumbered(11), "after the 10 it was sent")
        #expect(router.forwardVideo(stream: stream, track: 0, slot: 1, packet: keyframe, now: 9_100 * Self.ms) == .unchanged, "the other subscriber is untouched")

        // Its NACK for 11 is answered with packet 41, renumbered 11.
        let nack = RTCPPacket.genericNACK(RTCPGenericNACK(senderSSRC: 500, mediaSSRC: VideoGateTests.video, lostSequenceNumbers: [11]))
        var expected = keyframe
        expected[2] = 0
        expected[3] = 11
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [nack], now: 9_200 * Self.ms) == [.retransmit(100, badAddress, rtp: expected)])
    }

    @Test("no fallback for streams without both audio and video, nor when it is turned off")
    func notGated() throws {
        var router = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 9), now: 0)
        router.addStream(id: "v", tracks: [videoTrack(ssrc: VideoGateTests.video)], publisher: 1)
        var off = RouterSettings(relaySSRC: 9)
        off.videoGate = nil
        var disabled = RelayRouter<Int>(settings: off, now: 0)
        disabled.addStream(id: "s", tracks: [videoTrack(ssrc: VideoGateTests.video), audioTrack(ssrc: VideoGateTests.audio)], publisher: 1)
        for (id, var candidate) in [("v", router), ("s", disabled)] {
            let stream = try #require(candidate.handle(streamId: id))
            _ = candidate.addSubscriber(streamId: id, subscriberId: "a", rtcpSSRC: 500, context: 100, now: 0)
            candidate.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 1, port: 1), now: 0)
            for second in UInt64(0)...4 {
                _ = Self.report(&candidate, stream: stream, rtcpSSRC: 500, [VideoGateTests.block(highest: UInt32(second) * 100, lost: Int32(second) * 90)], at: second * Self.s)
            }
            #expect(candidate.takeVideoEvents() == [] && candidate.counters.videoSuspensions == 0)
            #expect(candidate.forwardVideo(stream: stream, track: 0, slot: 0, packet: try Self.packet(1, keyframe: false), now: 5 * Self.s) == .unchanged)
        }
    }
}

/// The router's REMB: sent at once when the uplink estimate drops, then with each receiver report.
@Suite("Relay router: REMB")
struct RouterREMBTests {
    @Test("frames arriving later and later (a queue building on the uplink) bring a REMB at once; the periodic report carries it too")
    func remb() throws {
        var router = RelayRouterTests.router()
        let stream = try #require(router.handle(streamId: "s"))
        router.authenticated(.track(stream: stream, track: 0), from: RelayRouterTests.publisherAddress)
        let ms: UInt64 = 1_000_000
        var immediate: [RTCPReceiverEstimatedMaxBitrate] = []
        // 30 fps of 4 × 1 200 bytes (1.15 Mbit/s) through a 600 kbit/s link: each frame leaves later.
        var linkFree = 0.0
        for frame in 0..<150 {
            let capture = Double(frame) / 30
            for part in 0..<4 {
                linkFree = max(linkFree, capture) + 1_200 * 8 / 600_000
                let sequence = UInt16(frame * 4 + part)
                let packet = try rtpPacket(ssrc: VideoGateTests.video, sequence: sequence, size: 1_188)
                if case .toPublisher(1, RelayRouterTests.publisherAddress, let bytes)? = router.publisherRTP(
                    stream: stream, track: 0, packet: packet, sequenceNumber: sequence, timestamp: UInt32(frame * 3_000), now: UInt64(linkFree * 1e9)) {
                    let compound = try RTCPCompoundPacket(parsing: bytes)
                    for case .receiverEstimatedMaxBitrate(let remb) in compound.packets { immediate.append(remb) }
                }
            }
        }
        let first = try #require(immediate.first, "no REMB while the queue grew")
        #expect(first.ssrcs == [VideoGateTests.video] && first.senderSSRC == 9)
        #expect(first.bitrate < 700_000 && first.bitrate > 300_000, "\(first.bitrate) bit/s: 85 % of what arrives")
        #expect(router.uplinkEstimate(streamId: "s") != nil)
        let periodic = router.tick(now: UInt64(linkFree * 1e9) + 1_000 * ms).compactMap { action -> RTCPReceiverEstimatedMaxBitrate? in
            guard case .toPublisher(_, _, let bytes) = action, let compound = try? RTCPCompoundPacket(parsing: bytes) else { return nil }
            for case .receiverEstimatedMaxBitrate(let remb) in compound.packets { return remb }
            return nil
        }
        #expect(periodic.count == 1 && router.counters.rembsSent >= 2)
    }
}
