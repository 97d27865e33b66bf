import Testing
@testable import PCastRelay
import PCastProtocol
import PCastContracts

/// The relay's simulcast forwarding as a pure state machine: which layer each viewer gets, how
/// its packets are rewritten, and how its feedback is mapped back.
@Suite("Simulcast: a layer per viewer")
struct SimulcastRouterTests {
    static let high: UInt32 = 0x1000, middle: UInt32 = 0x2000, low: UInt32 = 0x3000, audio: UInt32 = 0x4000
    static let ms: UInt64 = 1_000_000, s: UInt64 = 1_000_000_000
    static let publisher = RelayAddress(ipv4: 0x7F00_0001, port: 5000)

    static func layered(_ ssrc: UInt32, _ rid: String, _ width: Int, _ bitrate: Int) -> MediaTrackDescription {
        MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: ssrc,
                              layer: SimulcastLayer(rid: rid, width: width, height: width * 9 / 16, bitrate: bitrate))
    }

    /// A packet of one layer: `keyframe` starts with an SPS (a STAP-A led by one), `marker` ends a frame.
    static func packet(_ ssrc: UInt32, _ sequence: UInt16, timestamp: UInt32, keyframe: Bool = false, marker: Bool = true) throws -> [UInt8] {
        let payload: [UInt8] = keyframe ? [0x78, 0x00, 0x04, 0x67, 0x42, 0x00, 0x1F] : [0x41, 0x9A, 0x00, 0x00]
        return try RTPPacket(marker: marker, payloadType: 96, sequenceNumber: sequence, timestamp: timestamp, ssrc: ssrc, payload: payload[...]).serialized()
    }

    static func router() throws -> (RelayRouter<Int>, StreamHandle) {
        var router = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 9), now: 0)
        // Listed out of order: the router ranks layers by bitrate.
        let added = router.addStream(id: "s", tracks: [layered(middle, "m", 640, 400_000), audioTrack(ssrc: audio),
                                                       layered(high, "h", 1280, 2_500_000), layered(low, "l", 320, 150_000)], publisher: 1)
        #expect(added)
        let stream = try #require(router.handle(streamId: "s"))
        router.authenticated(.track(stream: stream, track: 0), from: publisher)
        return (router, stream)
    }

    /// Sends one frame (one packet) on every layer at `timestamp` to the subscriber in `slot`, with
    /// each layer's own sequence number `base + frame`; returns what the subscriber was sent.
    static func frame(_ router: inout RelayRouter<Int>, _ stream: StreamHandle, slot: Int, frame: UInt16, keyframe: Bool = false) throws -> [VideoForwarding] {
        let timestamp = UInt32(frame) * 3000
        return [
            router.forwardVideo(stream: stream, track: 2, slot: slot, packet: try packet(high, 1000 &+ frame, timestamp: timestamp, keyframe: keyframe), now: UInt64(frame) * 33_000_000),
            router.forwardVideo(stream: stream, track: 0, slot: slot, packet: try packet(middle, 5000 &+ frame, timestamp: timestamp, keyframe: keyframe), now: UInt64(frame) * 33_000_000),
            router.forwardVideo(stream: stream, track: 3, slot: slot, packet: try packet(low, 65_530 &+ frame, timestamp: timestamp, keyframe: keyframe), now: UInt64(frame) * 33_000_000),
        ]
    }

    @Test("a viewer starts on the middle layer at its first keyframe, under the best layer's SSRC; other layers and delta frames before it are not sent; audio passes unchanged")
    func startsOnTheMiddleLayer() throws {
        var (router, stream) = try Self.router()
        let added = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: 100, now: 0)
        let actions = try #require(added)
        #expect(actions.isEmpty)
        let first = router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 2, port: 2), now: 0)
        // The keyframe asked for is the middle layer's only.
        let plis = try first.map { action -> UInt32 in
            guard case .toPublisher(_, _, let rtcp) = action else { throw SimulcastFailure.unexpected("\(action)") }
            let packets = try RTCPCompoundPacket(parsing: rtcp).packets
            guard case .pictureLossIndication(let pli)? = packets.last else { throw SimulcastFailure.unexpected("\(packets)") }
            return pli.mediaSSRC
        }
        #expect(plis == [Self.middle])
        var transparent: Bool?
        router.forEachReachableSlot(of: stream) { _, _, _, flag in transparent = flag }
        #expect(transparent == false, "every video packet of a simulcast viewer is asked about")

        #expect(try Self.frame(&router, stream, slot: 0, frame: 1) == [.dropped, .dropped, .dropped], "no keyframe yet")
        #expect(try Self.frame(&router, stream, slot: 0, frame: 2, keyframe: true) == [.dropped, .rewritten(ssrc: Self.high, sequence: 5002), .dropped])
        #expect(try Self.frame(&router, stream, slot: 0, frame: 3) == [.dropped, .rewritten(ssrc: Self.high, sequence: 5003), .dropped])
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v") == SubscriberLayer(current: "m", target: "m", reduced: true), "held below the best layer, which nothing of its own asks")
        #expect(router.rtcpForwarding(stream: stream, slot: 0, senderSSRC: Self.middle) == .rewritten(Self.high), "the layer's sender report, under the viewer's SSRC")
        #expect(router.rtcpForwarding(stream: stream, slot: 0, senderSSRC: Self.high) == .dropped)
        #expect(router.rtcpForwarding(stream: stream, slot: 0, senderSSRC: Self.audio) == .unchanged)
    }

    @Test("an estimate that fits the best layer moves the viewer up after the hold, at that layer's keyframe, with sequence numbers continuing; a NACK of either side of the switch is answered from the right layer's cache under the viewer's numbering")
    func movesUpAndMapsNACKs() throws {
        var (router, stream) = try Self.router()
        _ = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: 100, now: 0)
        let viewer = RelayAddress(ipv4: 2, port: 2)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: viewer, now: 0)
        _ = try Self.frame(&router, stream, slot: 0, frame: 2, keyframe: true)
        _ = try Self.frame(&router, stream, slot: 0, frame: 3)
        // Cache what the publisher sent, as the engine does.
        for (track, ssrc, base) in [(0, Self.middle, UInt16(5000)), (2, Self.high, 1000)] {
            for frame in UInt16(2)...6 {
                router.publisherRTP(stream: stream, track: track, packet: try Self.packet(ssrc, base + frame, timestamp: UInt32(frame) * 3000, keyframe: frame == 2 || frame == 5),
                                    sequenceNumber: base + frame, timestamp: UInt32(frame) * 3000, now: 1_000 * Self.ms)
            }
        }
        let remb = RTCPPacket.receiverEstimatedMaxBitrate(RTCPReceiverEstimatedMaxBitrate(senderSSRC: 500, bitrate: 10_000_000, ssrcs: [Self.high]))
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [remb], now: 100 * Self.ms).isEmpty, "the hold starts")
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "m")
        let moved = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [remb], now: 1_200 * Self.ms)
        #expect(moved.count == 1, "a keyframe of the best layer is asked for")
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v") == SubscriberLayer(current: "m", target: "h", reduced: true))
        // Still the middle layer until the best one's keyframe.
        #expect(try Self.frame(&router, stream, slot: 0, frame: 4) == [.dropped, .rewritten(ssrc: Self.high, sequence: 5004), .dropped])
        #expect(try Self.frame(&router, stream, slot: 0, frame: 5, keyframe: true) == [.rewritten(ssrc: Self.high, sequence: 5005), .dropped, .dropped])
        #expect(try Self.frame(&router, stream, slot: 0, frame: 6) == [.rewritten(ssrc: Self.high, sequence: 5006), .dropped, .dropped])
        #expect(router.counters.layerSwitches == 1)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v") == SubscriberLayer(current: "h", target: "h", reduced: false))

        let nack = RTCPPacket.genericNACK(RTCPGenericNACK(senderSSRC: 500, mediaSSRC: Self.high, lostSequenceNumbers: [5004, 5005]))
        let answers = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [nack], now: 1_300 * Self.ms)
        let resent = try answers.map { action -> RTPPacketLayout in
            guard case .retransmit(100, viewer, let rtp) = action else { throw SimulcastFailure.unexpected("\(action)") }
            return try RTPPacketLayout(parsing: rtp)
        }
        #expect(resent.map(\.ssrc) == [Self.high, Self.high])
        #expect(resent.map(\.sequenceNumber) == [5004, 5005])
        #expect(resent.map(\.timestamp) == [4 * 3000, 5 * 3000], "5004 was the middle layer's frame 4, 5005 the best layer's frame 5")
        #expect(router.counters.nacksServed == 2)
    }

    @Test("a switch waits for the old layer's frame to end: a keyframe that starts while the viewer is mid-frame is let pass")
    func switchesAtFrameEnds() {
        var switcher = LayerSwitcher(target: 1)
        var sent: [UInt16?] = []
        func send(_ layer: Int, _ sequence: UInt16, marker: Bool, keyframe: Bool) {
            sent.append(switcher.forward(layer: layer, sequence: sequence, marker: marker) { keyframe })
        }
        send(1, 10, marker: false, keyframe: true)
        switcher.target = 0
        send(0, 700, marker: true, keyframe: true)     // the viewer's frame on layer 1 is not finished
        send(1, 11, marker: true, keyframe: false)
        send(0, 701, marker: false, keyframe: false)   // not a keyframe
        send(0, 702, marker: false, keyframe: true)
        send(1, 12, marker: true, keyframe: false)     // the old layer is not sent any more
        send(0, 703, marker: true, keyframe: false)
        send(0, 701, marker: true, keyframe: false)    // reordered from before the switch
        #expect(sent == [10, nil, 11, nil, 12, nil, 13, nil])
        #expect(switcher.switches == 1)
        let before = switcher.original(ofSent: 11), after = switcher.original(ofSent: 12)
        #expect(before?.layer == 1 && before?.sequence == 11)
        #expect(after?.layer == 0 && after?.sequence == 702)
        #expect(switcher.original(ofSent: 14) == nil, "not sent yet")
    }

    @Test("the viewer's own limit chooses its layer at once; the publisher is not asked to lower anything")
    func limitChoosesTheLayer() throws {
        var (router, stream) = try Self.router()
        _ = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: 100, now: 0)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 2, port: 2), now: 0)
        let down = router.setSubscriberLimit(streamId: "s", subscriberId: "v", bitsPerSecond: 200_000, now: 10 * Self.ms)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "l")
        #expect(down != nil, "a keyframe of the lowest layer")
        _ = router.setSubscriberLimit(streamId: "s", subscriberId: "v", bitsPerSecond: 3_200_000, now: 20 * Self.ms)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "h", "raised by the viewer itself: followed at once")
        _ = router.setSubscriberLimit(streamId: "s", subscriberId: "v", bitsPerSecond: nil, now: 30 * Self.ms)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "h")
        #expect(router.setSubscriberLimit(streamId: "s", subscriberId: "nobody", bitsPerSecond: 1, now: 0) == nil)
    }

    @Test("the size a viewer shows the video at caps its layer at the smallest that fills it (at once, and not counted as held down); a larger view or none lets it climb as its estimate allows; a view larger than every layer takes the best; a pin wins")
    func viewSizeCapsTheLayer() throws {
        var (router, stream) = try Self.router()
        _ = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: 100, now: 0)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 2, port: 2), now: 0)
        func target() -> String? { router.subscriberLayer(streamId: "s", subscriberId: "v")?.target }
        func estimate(_ bits: UInt64, at now: UInt64) {
            let remb = RTCPPacket.receiverEstimatedMaxBitrate(RTCPReceiverEstimatedMaxBitrate(senderSSRC: 500, bitrate: bits, ssrcs: [Self.high]))
            _ = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [remb], now: now)
        }
        let down = router.setSubscriberViewSize(streamId: "s", subscriberId: "v", ViewSize(width: 320, height: 180), now: 10 * Self.ms)
        #expect(target() == "l" && down != nil, "320×180 is filled by the lowest layer, whose keyframe is asked for")
        estimate(50_000_000, at: 100 * Self.ms)
        estimate(50_000_000, at: 2 * Self.s)
        #expect(target() == "l", "a roomy link does not take it above what its view shows")
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.reduced == false, "its own view holds it there, not its link")
        _ = router.setSubscriberViewSize(streamId: "s", subscriberId: "v", ViewSize(width: 400, height: 300), now: 3 * Self.s)
        estimate(50_000_000, at: 3 * Self.s)
        estimate(50_000_000, at: 4_100 * Self.ms)
        #expect(target() == "m", "400×300 needs 640×360, after the usual hold on the way up")
        _ = router.setSubscriberViewSize(streamId: "s", subscriberId: "v", ViewSize(width: 1920, height: 1080), now: 5 * Self.s)
        estimate(50_000_000, at: 5 * Self.s)
        estimate(50_000_000, at: 6_100 * Self.ms)
        #expect(target() == "h", "no layer fills 1920×1080: the best")
        _ = router.setSubscriberViewSize(streamId: "s", subscriberId: "v", ViewSize(width: 320, height: 180), now: 7 * Self.s)
        #expect(target() == "l", "a smaller view moves it down at once")
        _ = router.setSubscriberViewSize(streamId: "s", subscriberId: "v", nil, now: 8 * Self.s)
        estimate(50_000_000, at: 8 * Self.s)
        estimate(50_000_000, at: 9_100 * Self.ms)
        #expect(target() == "h", "no view size: as its link allows")
        _ = router.setSubscriberViewSize(streamId: "s", subscriberId: "v", ViewSize(width: 320, height: 180), now: 10 * Self.s)
        _ = router.pinSubscriberLayer(streamId: "s", subscriberId: "v", layer: "best", now: 10 * Self.s)
        #expect(target() == "h", "a pin wins over the view")
        #expect(router.setSubscriberViewSize(streamId: "s", subscriberId: "nobody", nil, now: 0) == nil)
    }

    @Test("layers of unknown size (a browser's) are not capped by a view size")
    func unsizedLayersIgnoreTheView() throws {
        var router = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 9), now: 0)
        let unsized = [(Self.high, "h", 2_500_000), (Self.middle, "m", 625_000), (Self.low, "l", 156_250)].map { ssrc, rid, bitrate in
            MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: ssrc,
                                  layer: SimulcastLayer(rid: rid, width: 0, height: 0, bitrate: bitrate))
        }
        let added = router.addStream(id: "s", tracks: unsized, publisher: 1)
        #expect(added)
        _ = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: 100, now: 0)
        _ = router.setSubscriberViewSize(streamId: "s", subscriberId: "v", ViewSize(width: 160, height: 90), now: 0)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "m", "still the starting layer")
    }

    @Test("a viewer pinned to a layer (best, lowest or a RID) stays there whatever its estimate and losses; unpinned it is adaptive again; unknown RIDs and subscribers change nothing")
    func pinnedLayers() throws {
        var (router, stream) = try Self.router()
        _ = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: 100, now: 0)
        // Pinned before it is first heard from: its first keyframe request is for that layer.
        #expect(router.pinSubscriberLayer(streamId: "s", subscriberId: "v", layer: "best", now: 0) == nil, "nothing to ask before it is heard from")
        let first = router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 2, port: 2), now: 0)
        guard case .toPublisher(_, _, let rtcp)? = first.first, case .pictureLossIndication(let pli)? = try RTCPCompoundPacket(parsing: rtcp).packets.last
        else { throw SimulcastFailure.unexpected("\(first)") }
        #expect(first.count == 1 && pli.mediaSSRC == Self.high)
        let remb = RTCPPacket.receiverEstimatedMaxBitrate(RTCPReceiverEstimatedMaxBitrate(senderSSRC: 500, bitrate: 100_000, ssrcs: [Self.high]))
        _ = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [remb], now: Self.s)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "h", "a 100 kbit/s estimate does not move a pinned viewer")
        _ = router.pinSubscriberLayer(streamId: "s", subscriberId: "v", layer: "m", now: Self.s)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "m")
        _ = router.pinSubscriberLayer(streamId: "s", subscriberId: "v", layer: "lowest", now: Self.s)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "l")
        #expect(router.pinSubscriberLayer(streamId: "s", subscriberId: "v", layer: "x", now: Self.s) == nil)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "l", "an unknown RID changes nothing")
        #expect(router.pinSubscriberLayer(streamId: "s", subscriberId: "nobody", layer: "best", now: Self.s) == nil)
        _ = router.pinSubscriberLayer(streamId: "s", subscriberId: "v", layer: nil, now: Self.s)
        _ = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [remb], now: 2 * Self.s)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "l", "adaptive again: 100 kbit/s fits none better")
    }

    @Test("a window of its reports with 10 % loss moves the viewer down one layer and holds it there; losses before the relay (the publisher's leg) do not count; its reports do not reach the publisher")
    func lossMovesDown() throws {
        var (router, stream) = try Self.router()
        _ = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: 100, now: 0)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 2, port: 2), now: 0)
        _ = router.setSubscriberLimit(streamId: "s", subscriberId: "v", bitsPerSecond: 5_000_000, now: 0)
        _ = router.setSubscriberLimit(streamId: "s", subscriberId: "v", bitsPerSecond: nil, now: 0)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "h")
        func report(_ highest: UInt32, lost: Int32, at now: UInt64) -> [RelayAction<Int>] {
            router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [.receiverReport(.init(ssrc: 500, reportBlocks: [
                RTCPReportBlock(ssrc: Self.high, fractionLost: 40, cumulativeLost: lost, extendedHighestSequenceNumber: highest)]))], now: now)
        }
        _ = report(100, lost: 0, at: 1 * Self.s)
        _ = report(200, lost: 2, at: 2 * Self.s)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "h", "2 % lost")
        _ = report(300, lost: 20, at: 3 * Self.s)
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "m", "18 % lost")
        // A big estimate does not move it back up during the hold.
        let remb = RTCPPacket.receiverEstimatedMaxBitrate(RTCPReceiverEstimatedMaxBitrate(senderSSRC: 500, bitrate: 50_000_000, ssrcs: [Self.high]))
        for at in stride(from: 3 * Self.s, through: 10 * Self.s, by: Int(Self.s)) {
            _ = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [remb], now: at)
        }
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "m")
        for at in stride(from: 11 * Self.s, through: 13 * Self.s, by: Int(Self.s)) {
            _ = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [remb], now: at)
        }
        #expect(router.subscriberLayer(streamId: "s", subscriberId: "v")?.target == "h", "after the hold")
        // The relay's report to the publisher carries its own reception only.
        router.publisherRTP(stream: stream, track: 2, packet: try Self.packet(Self.high, 1, timestamp: 0), sequenceNumber: 1, timestamp: 0, now: 13 * Self.s)
        guard case .toPublisher(_, _, let rtcp)? = router.receiverReport(stream: stream, now: 14 * Self.s),
              case .receiverReport(let own)? = try RTCPCompoundPacket(parsing: rtcp).packets.first
        else { throw SimulcastFailure.unexpected("no report") }
        #expect(own.reportBlocks.first { $0.ssrc == Self.high }?.fractionLost == 0)
    }

    @Test("losses just after a move down are the larger layer's: they do not move the viewer down again; later ones do, holding it down")
    func lossAfterAMoveDown() {
        var selector = LayerSelector(bitrates: [2_500_000, 300_000, 150_000])
        func block(_ highest: UInt32, lost: Int32) -> RTCPReportBlock {
            RTCPReportBlock(ssrc: 1, cumulativeLost: lost, extendedHighestSequenceNumber: highest)
        }
        #expect(selector.report(block(0, lost: 0), publisherLegLoss: 0, current: 0, now: 0) == nil)
        selector.estimate(400_000, now: Self.s / 2)
        #expect(selector.choose(current: 0, now: Self.s / 2) == 1, "down at once")
        #expect(selector.report(block(100, lost: 40), publisherLegLoss: 0, current: 1, now: Self.s) == nil, "the best layer's losses")
        #expect(selector.report(block(200, lost: 40), publisherLegLoss: 0, current: 1, now: 2 * Self.s) == nil, "a clean window")
        #expect(selector.report(block(300, lost: 80), publisherLegLoss: 0, current: 1, now: 3 * Self.s) == 2, "the middle layer's own losses")
        #expect(selector.report(block(400, lost: 120), publisherLegLoss: 0, current: 2, now: 4 * Self.s) == nil, "just moved down")
        #expect(selector.report(block(500, lost: 160), publisherLegLoss: 0, current: 2, now: 6 * Self.s) == 2, "already the lowest")
    }

    /// A browser viewer's REMB, as Chrome's receive-side estimator makes it: once a second,
    /// growing about 8 % a second and never past 1.5× what it receives.
    struct BrowserEstimate {
        var value: Double
        mutating func next(receiving rate: Double) -> Int {
            value = min(value * 1.08, rate * 1.5 + 10_000)
            return Int(value)
        }
    }

    @Test("a browser viewer (its REMB bounded by what it receives) is probed up a layer once its estimate shows room over its measured rate, stays there while the estimate catches up, and reaches the best layer; without probing the same browser falls to the lowest layer and stays there")
    func probesUpForABrowser() {
        // Declared as a browser's layers are (nominal), measured at what the fake camera really sends.
        var selector = LayerSelector(bitrates: [2_500_000, 625_000, 156_250], probesUp: true)
        selector.measured = [450_000, 250_000, 100_000]
        var sdk = LayerSelector(bitrates: [2_500_000, 625_000, 156_250])
        let rates = [450_000.0, 250_000, 100_000]
        var remb = BrowserEstimate(value: 200_000), unprobedRemb = BrowserEstimate(value: 200_000)
        var layer = selector.initial, sdkLayer = sdk.initial
        var visited: [Int] = [layer]
        for second in UInt64(1)...30 {
            let estimate = remb.next(receiving: rates[layer] + 40_000)   // its layer and the audio
            selector.estimate(estimate, now: second * Self.s)
            sdk.estimate(unprobedRemb.next(receiving: rates[sdkLayer] + 40_000), now: second * Self.s)
            layer = selector.choose(current: layer, now: second * Self.s)
            sdkLayer = sdk.choose(current: sdkLayer, now: second * Self.s)
            if visited.last != layer { visited.append(layer) }
        }
        #expect(visited == [1, 0], "from the middle layer up to the best, never down: \(visited)")
        #expect(selector.probe == nil, "the estimate caught up with the probed layer")
        #expect(sdkLayer == 2, "its estimate never shows room for a layer it is not sent")
    }

    @Test("a probe the link cannot carry: the estimate stays flat below the probed layer, the viewer goes back down, and the next probe waits, longer after each failure; a drop of the estimate moves it down at once")
    func failedProbesBackOff() {
        var selector = LayerSelector(bitrates: [2_500_000, 625_000, 156_250], probesUp: true)
        selector.measured = [2_400_000, 600_000, 150_000]
        var layer = 1
        var moves: [(second: UInt64, layer: Int)] = []
        // The link carries 1 Mbit/s: the estimate never rises past it.
        for second in UInt64(1)...60 {
            selector.estimate(1_000_000, now: second * Self.s)
            let chosen = selector.choose(current: layer, now: second * Self.s)
            if chosen != layer { moves.append((second, chosen)) }
            layer = chosen
        }
        // Probe after 2 s of room; back after 3 s flat below the best layer; then 8 s and 16 s apart.
        #expect(moves.map(\.layer) == [0, 1, 0, 1, 0, 1], "\(moves)")
        let probes = moves.filter { $0.layer == 0 }.map(\.second)
        #expect(probes.count == 3 && probes[1] - probes[0] > 8 && probes[2] - probes[1] > 16, "\(moves)")

        var dropping = LayerSelector(bitrates: [2_500_000, 625_000, 156_250], probesUp: true)
        dropping.measured = [2_400_000, 600_000, 150_000]
        dropping.estimate(3_000_000, now: Self.s)
        #expect(dropping.choose(current: 0, now: Self.s) == 0)
        dropping.estimate(700_000, now: 2 * Self.s)
        #expect(dropping.choose(current: 0, now: 2 * Self.s) == 1, "a drop is congestion: down at once")
    }

    @Test("held down: a layer below the best that the viewer neither pinned nor limited itself to")
    func heldDown() {
        var selector = LayerSelector(bitrates: [2_500_000, 300_000, 150_000])
        #expect(!selector.isHeldDown(0) && selector.isHeldDown(1) && selector.isHeldDown(2))
        selector.setLimit(400_000)
        #expect(!selector.isHeldDown(1) && selector.isHeldDown(2), "its own limit allows the middle layer")
        selector.setLimit(nil)
        selector.pin(2)
        #expect(!selector.isHeldDown(2), "its own choice")
    }

    @Test("an estimate below the current layer moves the viewer down at once; one that fits the middle layer but not the best one keeps it there")
    func estimateMovesDownAtOnce() {
        var selector = LayerSelector(bitrates: [2_500_000, 400_000, 150_000])
        #expect(selector.initial == 1)
        selector.estimate(10_000_000, now: 0)
        #expect(selector.choose(current: 1, now: 0) == 1, "the hold starts")
        #expect(selector.choose(current: 1, now: Self.s) == 0)
        selector.estimate(480_000, now: 2 * Self.s)
        #expect(selector.choose(current: 0, now: 2 * Self.s) == 1, "at once")
        for second in UInt64(3)...20 {
            selector.estimate(510_000, now: second * Self.s)
            #expect(selector.choose(current: 1, now: second * Self.s) == 1)
        }
        selector.estimate(300_000, now: 21 * Self.s)
        #expect(selector.choose(current: 1, now: 21 * Self.s) == 2)
        #expect(selector.choose(current: 2, now: 23 * Self.s) == 2, "the estimate holds for its lifetime")
        #expect(selector.choose(current: 2, now: 30 * Self.s) == 2, "expired: the hold starts…")
        #expect(selector.choose(current: 2, now: 31 * Self.s) == 0, "…then, without one, the viewer climbs after the hold")
    }

    @Test("an edge pulling a simulcast stream is sent every layer unchanged, and counts for what the publisher hears")
    func edgesTakeEveryLayer() throws {
        var (router, stream) = try Self.router()
        _ = router.addSubscriber(streamId: "s", subscriberId: "edge", rtcpSSRC: 600, context: 200, now: 0, isEdge: true)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 600), from: RelayAddress(ipv4: 3, port: 3), now: 0)
        var transparent: Bool?
        router.forEachReachableSlot(of: stream) { _, _, _, flag in transparent = flag }
        #expect(transparent == true)
        #expect(router.rtcpForwarding(stream: stream, slot: 0, senderSSRC: Self.middle) == .unchanged)
        #expect(router.watchedLayers(streamId: "s") == ["h", "m", "l"])
    }

    @Test("a browser's layer bound to its own SSRC: its packets and reports route to the declared track, feedback to the publisher (PLI, receiver report, REMB) names the browser's SSRC, a new binding replaces the old, and removing the stream frees both")
    func wireSSRCs() throws {
        var (router, stream) = try Self.router()
        let browser: UInt32 = 0xB0B0
        #expect(router.route(ssrc: browser) == nil)
        #expect(router.layerTrack(stream: stream, rid: "l") == 3 && router.layerTrack(stream: stream, rid: "x") == nil)
        let bound = router.bindWireSSRC(stream: stream, track: 3, ssrc: browser)
        #expect(bound)
        #expect(router.route(ssrc: browser) == .track(stream: stream, track: 3))
        #expect(router.route(ssrc: Self.low) == .track(stream: stream, track: 3), "the declared SSRC still routes")
        #expect(router.declaredSSRC(stream: stream, track: 3) == Self.low)
        #expect(router.wireSSRCs(stream: stream).map { [$0.wire, $0.declared] } == [[browser, Self.low]])
        let taken = router.bindWireSSRC(stream: stream, track: 3, ssrc: Self.high)
        #expect(!taken, "another track's SSRC is not taken")

        // A viewer pinned to the lowest layer asks for its keyframe: under the browser's SSRC.
        _ = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: 100, now: 0)
        _ = router.pinSubscriberLayer(streamId: "s", subscriberId: "v", layer: SimulcastLayer.lowest, now: 0)
        let first = router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 2, port: 2), now: 0)
        let asked = try first.compactMap { action -> UInt32? in
            guard case .toPublisher(_, _, let rtcp) = action else { return nil }
            guard case .pictureLossIndication(let pli)? = try RTCPCompoundPacket(parsing: rtcp).packets.last else { return nil }
            return pli.mediaSSRC
        }
        #expect(asked == [browser])

        // The relay's report to the publisher: the layer's block under the browser's SSRC.
        for sequence in UInt16(0)..<10 {
            router.publisherRTP(stream: stream, track: 3, packet: try Self.packet(Self.low, sequence, timestamp: UInt32(sequence) * 3000),
                                sequenceNumber: sequence, timestamp: UInt32(sequence) * 3000, now: UInt64(sequence) * 33 * Self.ms)
        }
        guard case .toPublisher(_, _, let rtcp)? = router.receiverReport(stream: stream, now: Self.s) else {
            Issue.record("no receiver report")
            return
        }
        guard case .receiverReport(let report)? = try RTCPCompoundPacket(parsing: rtcp).packets.first else {
            Issue.record("no receiver report in \(rtcp)")
            return
        }
        #expect(report.reportBlocks.map(\.ssrc) == [browser])

        // A new SSRC for the same layer replaces the old one.
        let rebound = router.bindWireSSRC(stream: stream, track: 3, ssrc: browser + 1)
        #expect(rebound)
        #expect(router.route(ssrc: browser) == nil && router.route(ssrc: browser + 1) == .track(stream: stream, track: 3))
        router.removeStream(id: "s")
        #expect(router.route(ssrc: browser + 1) == nil && router.route(ssrc: Self.low) == nil)
    }
}

enum SimulcastFailure: Error {
    case unexpected(String)
}
