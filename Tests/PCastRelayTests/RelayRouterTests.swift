import Foundation
import PCastContracts
import PCastProtocol
@testable import PCastRelay
import Testing

/// The relay's decisions without sockets or crypto, on an injected clock (nanoseconds).
@Suite("Relay router")
struct RelayRouterTests {
    static let ms: UInt64 = 1_000_000
    static let video: UInt32 = 0xAAAA_0001
    static let audio: UInt32 = 0xAAAA_0002
    static let publisherAddress = RelayAddress(ipv4: 0x7F00_0001, port: 4000)

    /// Contexts are plain numbers here: 1 is the publisher, subscribers are 100+.
    static func router(keyframeInterval: UInt64 = 300 * ms, cache: Int = 8) -> RelayRouter<Int> {
        var router = RelayRouter<Int>(
            settings: RouterSettings(relaySSRC: 9, keyframeInterval: keyframeInterval, packetCacheCapacity: cache, packetCacheDuration: 1_000 * ms),
            now: 0)
        router.addStream(id: "s", tracks: [videoTrack(ssrc: video), audioTrack(ssrc: audio)], publisher: 1)
        return router
    }

    /// What the relay sends a publisher for a keyframe: an empty RR, then the PLI (a compound).
    static func pli(_ ssrc: UInt32 = video) -> [UInt8] {
        try! RTCPCompoundPacket(packets: [.receiverReport(.init(ssrc: 9)), .pictureLossIndication(.init(senderSSRC: 9, mediaSSRC: ssrc))]).serialized()
    }

    /// The relay's NACK to a publisher: an empty RR, then the generic NACK (a compound).
    static func publisherNACK(_ sequences: [UInt16]) -> [UInt8] {
        try! RTCPCompoundPacket(packets: [.receiverReport(.init(ssrc: 9)),
                                          .genericNACK(.init(senderSSRC: 9, mediaSSRC: video, lostSequenceNumbers: sequences))]).serialized()
    }

    @Test("a gap in what a publisher sends is asked of it once the reordering allowance (31.25 ms at first) passed, in one NACK, and again every 1.25 measured round trips until 500 ms; a packet overtaken on the way, the first packet and a jump past 64 ask nothing; a subscriber's NACK of a packet that never came is asked of the publisher again once per 20 ms, one of a packet the cache let go is not")
    func publisherGaps() throws {
        var settings = RouterSettings(relaySSRC: 9, keyframeInterval: 300 * Self.ms, packetCacheCapacity: 64, packetCacheDuration: 1_000 * Self.ms)
        settings.arrivalEstimator = nil
        var router = RelayRouter<Int>(settings: settings, now: 0)
        router.addStream(id: "s", tracks: [videoTrack(ssrc: Self.video), audioTrack(ssrc: Self.audio)], publisher: 1)
        let stream = try #require(router.handle(streamId: "s"))
        router.authenticated(.track(stream: stream, track: 0), from: Self.publisherAddress)
        func arrive(_ sequence: UInt16, at ms: UInt64) throws -> RelayAction<Int>? {
            router.publisherRTP(stream: stream, track: 0, packet: try rtpPacket(ssrc: Self.video, sequence: sequence), sequenceNumber: sequence,
                                timestamp: UInt32(sequence) &* 3000, now: ms * Self.ms)
        }
        let asked = { (sequences: [UInt16]) in [RelayAction<Int>.toPublisher(1, Self.publisherAddress, rtcp: Self.publisherNACK(sequences))] }
        #expect(try arrive(65_533, at: 1) == nil, "the first packet")
        #expect(try arrive(65_534, at: 2) == nil)
        #expect(try arrive(1, at: 3) == nil, "a gap across the wrap (65,535 and 0), not asked at once: they may come late")
        #expect(try arrive(0, at: 4) == nil, "overtaken by 1 ms, not lost: never asked for")
        #expect(router.nextDeadline <= 35 * Self.ms, "the timer wakes for the allowance's end")
        #expect(router.tick(now: 34 * Self.ms) == [])
        #expect(router.tick(now: 35 * Self.ms) == asked([65_535]), "the allowance passed: the one still missing")
        #expect(try arrive(65_535, at: 45) == nil, "the answer, 10 ms later (the round trip measured)")
        #expect(try arrive(2, at: 46) == nil)
        #expect(try arrive(100, at: 47) == nil, "a jump of 98: a restart, not a loss")
        #expect(try arrive(103, at: 48) == nil)
        #expect(router.tick(now: 79 * Self.ms) == [])
        #expect(router.tick(now: 80 * Self.ms) == asked([101, 102]))
        #expect(router.tick(now: 92 * Self.ms) == [], "1.25 round trips not yet passed")
        #expect(router.tick(now: 93 * Self.ms) == asked([101, 102]), "asked again")
        #expect(router.counters.gapRequests == 5)
        #expect(router.tick(now: 548 * Self.ms) == [], "500 ms after they went missing: given up")
        #expect(router.nextDeadline == 1_000 * Self.ms, "nothing left to ask: the timer waits for the receiver report")

        _ = router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 500, context: 100, now: 550 * Self.ms)
        let subscriber = RelayAddress(ipv4: 0x7F00_0001, port: 5000)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: subscriber, now: 550 * Self.ms)
        func nack(_ sequences: [UInt16], at ms: UInt64) -> [RelayAction<Int>] {
            router.subscriberRTCP(stream: stream, rtcpSSRC: 500,
                                  packets: [.genericNACK(.init(senderSSRC: 500, mediaSSRC: Self.video, lostSequenceNumbers: sequences))], now: ms * Self.ms)
        }
        #expect(nack([101], at: 560) == [.toPublisher(1, Self.publisherAddress, rtcp: Self.publisherNACK([101]))], "never came: the publisher may have it")
        #expect(nack([101], at: 570) == [], "asked 10 ms ago")
        #expect(nack([101], at: 581) == [.toPublisher(1, Self.publisherAddress, rtcp: Self.publisherNACK([101]))], "asked again after 20 ms")
        #expect(nack([30], at: 590) == [], "further back than the cache holds: let go, not asked")
        #expect(router.counters.nacksForwarded == 2 && router.counters.nacksMissed == 1)
    }

    @Test("keyframe throttle: at once when idle, coalesced inside the window, FIR wins")
    func throttle() {
        var throttle = KeyframeThrottle(interval: 300 * Self.ms)
        #expect(throttle.request(.pli, now: 1_000 * Self.ms) == .pli)
        #expect(throttle.request(.pli, now: 1_100 * Self.ms) == nil)
        #expect(throttle.request(.fir, now: 1_200 * Self.ms) == nil)
        #expect(throttle.deadline == 1_300 * Self.ms)
        #expect(throttle.due(now: 1_299 * Self.ms) == nil)
        #expect(throttle.due(now: 1_300 * Self.ms) == .fir)
        #expect(throttle.due(now: 1_400 * Self.ms) == nil, "one request answers all coalesced ones")
        #expect(throttle.request(.pli, now: 2_000 * Self.ms) == .pli, "idle again: no wait")
    }

    @Test("keyframe throttle: the keyframe asked for answers the requests before it, and a request 100 ms after it goes at once (a viewer that lost part of it does not wait out the window); a publisher that sends none keeps the whole window")
    func throttleAnsweredByKeyframe() {
        var throttle = KeyframeThrottle(interval: 300 * Self.ms)
        #expect(throttle.request(.pli, now: 1_000 * Self.ms) == .pli)
        #expect(throttle.request(.pli, now: 1_010 * Self.ms) == nil, "asked while the keyframe is on its way")
        throttle.keyframeArrived(now: 1_040 * Self.ms)
        #expect(throttle.deadline == nil, "the keyframe answered the pending request")
        throttle.keyframeArrived(now: 1_045 * Self.ms)
        #expect(throttle.request(.pli, now: 1_100 * Self.ms) == nil, "within 100 ms of the keyframe")
        #expect(throttle.deadline == 1_140 * Self.ms, "due 100 ms after the keyframe, not at 1,300 ms")
        #expect(throttle.due(now: 1_140 * Self.ms) == .pli)
        #expect(throttle.request(.pli, now: 1_200 * Self.ms) == nil)
        #expect(throttle.deadline == 1_440 * Self.ms, "no keyframe since: the whole window")

        var idle = KeyframeThrottle(interval: 300 * Self.ms)
        idle.keyframeArrived(now: 10 * Self.ms)
        #expect(idle.request(.pli, now: 20 * Self.ms) == .pli, "a keyframe nobody asked for changes nothing")
    }

    @Test("subscribers joining together cause one PLI at once (while they set up their receivers) and one at the window's end; being first heard from asks nothing more while that keyframe is on its way")
    func subscribersJoining() throws {
        var router = Self.router()
        let stream = try #require(router.handle(streamId: "s"))
        #expect(router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 500, context: 100, now: 0) == [],
                "nowhere to send before the publisher's address is known (its first frame is a keyframe anyway)")
        #expect(router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 1, port: 1), now: 5 * Self.ms) == [])
        router.authenticated(.track(stream: stream, track: 0), from: Self.publisherAddress)
        #expect(router.addSubscriber(streamId: "s", subscriberId: "b", rtcpSSRC: 501, context: 101, now: 10 * Self.ms)
                == [.toPublisher(1, Self.publisherAddress, rtcp: Self.pli())], "asked as the subscriber is added")
        #expect(router.addSubscriber(streamId: "s", subscriberId: "c", rtcpSSRC: 502, context: 102, now: 10 * Self.ms) == [], "coalesced")
        #expect(router.authenticated(.subscriber(stream: stream, rtcpSSRC: 501), from: RelayAddress(ipv4: 2, port: 2), now: 10 * Self.ms) == [],
                "its keyframe is on its way")
        #expect(router.authenticated(.subscriber(stream: stream, rtcpSSRC: 501), from: RelayAddress(ipv4: 2, port: 2), now: 15 * Self.ms) == [])
        #expect(router.authenticated(.subscriber(stream: stream, rtcpSSRC: 502), from: RelayAddress(ipv4: 3, port: 3), now: 20 * Self.ms) == [])
        let pli = RTCPPacket.pictureLossIndication(.init(senderSSRC: 502, mediaSSRC: Self.video))
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 502, packets: [pli], now: 30 * Self.ms) == [])
        #expect(router.nextDeadline == 310 * Self.ms)
        #expect(router.tick(now: 200 * Self.ms) == [])
        #expect(router.tick(now: 310 * Self.ms) == [.toPublisher(1, Self.publisherAddress, rtcp: Self.pli())])
        #expect(router.tick(now: 320 * Self.ms) == [])
        #expect(router.counters.keyframeRequests == 2)
        // A PLI for the audio SSRC is not a keyframe request.
        let audioPLI = RTCPPacket.pictureLossIndication(.init(senderSSRC: 502, mediaSSRC: Self.audio))
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 502, packets: [audioPLI], now: 900 * Self.ms) == [])
    }

    @Test("a subscriber added before the publisher was heard from was asked no keyframe: it is asked when the subscriber is first heard from (an edge joining a stream whose first packet the relay has not read yet)")
    func subscriberAddedBeforeThePublisherIsHeard() throws {
        var router = Self.router()
        let stream = try #require(router.handle(streamId: "s"))
        #expect(router.addSubscriber(streamId: "s", subscriberId: "edge", rtcpSSRC: 500, context: 100, now: 0, isEdge: true) == [])
        router.authenticated(.track(stream: stream, track: 0), from: Self.publisherAddress)
        #expect(router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 1, port: 1), now: 5 * Self.ms)
                == [.toPublisher(1, Self.publisherAddress, rtcp: Self.pli())], "not left to wait for a keyframe nobody asked for")
        #expect(router.counters.keyframeRequests == 1)
    }

    /// A video packet with `payload` (an H.264 RTP payload).
    static func video(_ sequence: UInt16, _ payload: [UInt8]) throws -> [UInt8] {
        try RTPPacket(payloadType: 96, sequenceNumber: sequence, timestamp: UInt32(sequence) &* 3000, ssrc: video,
                      payload: (payload + [UInt8](repeating: 0xAB, count: 100))[...]).serialized()
    }
    /// x264's keyframe through rtph264pay: a STAP-A of an access unit delimiter, the SPS and the
    /// PPS, then the IDR slice in fragments; and a slice of another frame.
    static let parameterSets: [UInt8] = [0x18, 0x00, 0x02, 0x09, 0xF0, 0x00, 0x04, 0x67, 0x42, 0xC0, 0x1F, 0x00, 0x02, 0x68, 0xCE]
    static let idrStart: [UInt8] = [0x7C, 0x85]
    static let slice: [UInt8] = [0x41, 0x9A]

    /// The keyframe requests among a tick's actions (it sends receiver reports too).
    static func keyframeRequests(_ actions: [RelayAction<Int>]) -> [RelayAction<Int>] {
        actions.filter { $0 == .toPublisher(1, publisherAddress, rtcp: pli()) }
    }

    static func transparent(_ router: RelayRouter<Int>, stream: StreamHandle) -> [Bool] {
        var flags: [Bool] = []
        router.forEachReachableSlot(of: stream) { _, _, _, flag in flags.append(flag) }
        return flags
    }

    @Test("a viewer of a stream whose keyframes carry parameter sets is sent its video from the next one's parameter sets (not from a slice, nor from an IDR slice without them), then everything; its keyframe requests until 100 ms after that keyframe went out are answered by it, later ones (a loss, still within its first 500 ms) are served")
    func viewerStartsAtParameterSets() throws {
        var router = Self.router()
        let stream = try #require(router.handle(streamId: "s"))
        router.authenticated(.track(stream: stream, track: 0), from: Self.publisherAddress)
        for (sequence, payload) in [(UInt16(1), Self.parameterSets), (2, Self.idrStart), (3, Self.slice)] {
            _ = router.publisherRTP(stream: stream, track: 0, packet: try Self.video(sequence, payload), sequenceNumber: sequence,
                                    timestamp: 0, now: UInt64(sequence) * Self.ms)
        }
        #expect(router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 500, context: 100, now: 1_000 * Self.ms)
                == [.toPublisher(1, Self.publisherAddress, rtcp: Self.pli())])
        #expect(router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 2, port: 2), now: 1_001 * Self.ms) == [])
        #expect(Self.transparent(router, stream: stream) == [false], "each of its video packets is asked about")
        // Each packet arrives from the publisher (1,050 ms on) and is then asked about.
        func arrival(_ sequence: UInt16) -> UInt64 { (1_046 + UInt64(sequence)) * Self.ms }
        func arrive(_ sequence: UInt16, _ payload: [UInt8]) throws -> [UInt8] {
            let packet = try Self.video(sequence, payload)
            _ = router.publisherRTP(stream: stream, track: 0, packet: packet, sequenceNumber: sequence, timestamp: 0,
                                    now: arrival(sequence))
            return packet
        }
        #expect(router.forwardVideo(stream: stream, track: 0, slot: 0, packet: try arrive(4, Self.slice), now: arrival(4)) == .dropped)
        #expect(router.forwardVideo(stream: stream, track: 0, slot: 0, packet: try arrive(5, Self.idrStart), now: arrival(5)) == .dropped,
                "an IDR slice without the parameter sets before it")
        #expect(router.forwardVideo(stream: stream, track: 0, slot: 0, packet: try arrive(6, Self.parameterSets), now: arrival(6)) == .unchanged)
        #expect(router.forwardVideo(stream: stream, track: 0, slot: 0, packet: try arrive(7, Self.idrStart), now: arrival(7)) == .unchanged)
        #expect(router.forwardVideo(stream: stream, track: 0, slot: 0, packet: try arrive(8, Self.slice), now: arrival(8)) == .unchanged)
        #expect(Self.transparent(router, stream: stream) == [true], "then sent everything as it comes")

        let pli = RTCPPacket.pictureLossIndication(.init(senderSSRC: 500, mediaSSRC: Self.video))
        let fir = RTCPPacket.fullIntraRequest(.init(senderSSRC: 500, entries: [.init(ssrc: Self.video, sequenceNumber: 1)]))
        // Its keyframe went out at 1,052 ms: requests up to 100 ms later are its receiver starting.
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [pli, fir], now: 1_140 * Self.ms) == [])
        #expect(router.counters.keyframeRequestsAbsorbed == 2)
        #expect(Self.keyframeRequests(router.tick(now: 1_340 * Self.ms)) == [], "nothing was deferred")
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [pli], now: 1_350 * Self.ms)
                == [.toPublisher(1, Self.publisherAddress, rtcp: Self.pli())], "past its start: a loss, served within the join wait")
        #expect(router.counters.keyframeRequestsAbsorbed == 2)
        #expect(router.counters.keyframeRequests == 2)
    }

    @Test("a viewer whose keyframe does not come within 500 ms is asked one again by the tick, and then starts at an IDR slice too (an encoder that sent its parameter sets once); a stream never seen to send parameter sets is forwarded as it comes")
    func viewerKeyframeAskedAgain() throws {
        var router = Self.router()
        let stream = try #require(router.handle(streamId: "s"))
        router.authenticated(.track(stream: stream, track: 0), from: Self.publisherAddress)
        _ = router.addSubscriber(streamId: "s", subscriberId: "early", rtcpSSRC: 499, context: 99, now: 0)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 499), from: RelayAddress(ipv4: 1, port: 1), now: 0)
        #expect(Self.transparent(router, stream: stream) == [true], "no parameter sets seen: nothing to wait for")

        _ = router.publisherRTP(stream: stream, track: 0, packet: try Self.video(1, Self.parameterSets), sequenceNumber: 1, timestamp: 0, now: 1 * Self.ms)
        #expect(router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 500, context: 100, now: 2_000 * Self.ms)?.count == 1)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 2, port: 2), now: 2_001 * Self.ms)
        #expect(router.nextDeadline <= 2_500 * Self.ms)
        #expect(Self.keyframeRequests(router.tick(now: 2_499 * Self.ms)) == [])
        #expect(Self.keyframeRequests(router.tick(now: 2_500 * Self.ms)).count == 1)
        #expect(Self.transparent(router, stream: stream) == [true, false])
        #expect(router.forwardVideo(stream: stream, track: 0, slot: 1, packet: try Self.video(2, Self.slice), now: 2_600 * Self.ms) == .dropped)
        #expect(router.forwardVideo(stream: stream, track: 0, slot: 1, packet: try Self.video(3, Self.idrStart), now: 2_610 * Self.ms) == .unchanged)
        #expect(Self.transparent(router, stream: stream) == [true, true])
        #expect(Self.keyframeRequests(router.tick(now: 3_100 * Self.ms)) == [], "not asked again once it has its keyframe")
    }

    @Test("routes follow flows: added, found by SSRC, gone after removal")
    func routes() throws {
        var router = Self.router()
        let stream = try #require(router.handle(streamId: "s"))
        #expect(router.route(ssrc: Self.video) == .track(stream: stream, track: 0))
        #expect(router.route(ssrc: Self.audio) == .track(stream: stream, track: 1))
        let added = router.addStream(id: "t", tracks: [audioTrack(ssrc: Self.audio)], publisher: 2)
        #expect(!added, "SSRC taken")
        _ = router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 500, context: 100, now: 0)
        _ = router.addSubscriber(streamId: "s", subscriberId: "b", rtcpSSRC: 501, context: 101, now: 0)
        #expect(router.route(ssrc: 500) == .subscriber(stream: stream, rtcpSSRC: 500))
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 501), from: RelayAddress(ipv4: 1, port: 1))

        var reached: [Int] = []
        router.forEachReachableSubscriber(of: stream) { context, _ in reached.append(context) }
        #expect(reached == [101], "only subscribers whose address is known")

        router.removeSubscriber(streamId: "s", subscriberId: "a")
        #expect(router.route(ssrc: 500) == nil)
        #expect(router.subscriberContext(stream: stream, rtcpSSRC: 501) == 101, "the moved subscriber is still found")
        router.removeStream(id: "s")
        #expect(router.route(ssrc: Self.video) == nil && router.route(ssrc: 501) == nil)
        #expect(router.streamCount == 0)
    }

    @Test("NACKs are served from the cache; evicted, stale and unknown sequences are missed")
    func nacks() throws {
        var router = Self.router(cache: 8)
        let stream = try #require(router.handle(streamId: "s"))
        _ = router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 500, context: 100, now: 0)
        let subscriber = RelayAddress(ipv4: 0x7F00_0001, port: 5000)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: subscriber)
        var packets: [UInt16: [UInt8]] = [:]
        for sequence in UInt16(65_530)...UInt16.max {
            packets[sequence] = try rtpPacket(ssrc: Self.video, sequence: sequence)
        }
        for sequence in UInt16(0)..<4 { packets[sequence] = try rtpPacket(ssrc: Self.video, sequence: sequence) }
        for sequence in [UInt16](65_530...UInt16.max) + [0, 1, 2, 3] {
            router.publisherRTP(stream: stream, track: 0, packet: packets[sequence]!, sequenceNumber: sequence, timestamp: 0, now: 100 * Self.ms)
        }
        let nack = RTCPPacket.genericNACK(RTCPGenericNACK(senderSSRC: 500, mediaSSRC: Self.video, lostSequenceNumbers: [65_535, 0, 2, 2]))
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [nack], now: 200 * Self.ms) == [
            .retransmit(100, subscriber, rtp: packets[65_535]!),
            .retransmit(100, subscriber, rtp: packets[0]!),
            .retransmit(100, subscriber, rtp: packets[2]!),
        ])
        // 65_530 and 65_531 were overwritten by 2 and 3 in an 8-slot cache; 100 was never sent.
        let old = RTCPPacket.genericNACK(RTCPGenericNACK(senderSSRC: 500, mediaSSRC: Self.video, lostSequenceNumbers: [65_530, 100]))
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [old], now: 200 * Self.ms) == [])
        // Still in the cache but older than its duration.
        let stale = RTCPPacket.genericNACK(RTCPGenericNACK(senderSSRC: 500, mediaSSRC: Self.video, lostSequenceNumbers: [3]))
        #expect(router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [stale], now: 1_200 * Self.ms) == [])
        #expect(router.counters == RouterCounters(nacksServed: 3, nacksMissed: 3, keyframeRequests: 0))
    }

    @Test("the node's histograms: a viewer's wait from joining to its first keyframe is counted once, when that keyframe goes out; each block of a viewer's receiver report on a track of the stream counts its fraction lost (blocks on other SSRCs do not)")
    func viewerHistograms() throws {
        var router = Self.router()
        let stream = try #require(router.handle(streamId: "s"))
        router.authenticated(.track(stream: stream, track: 0), from: Self.publisherAddress)
        _ = router.publisherRTP(stream: stream, track: 0, packet: try Self.video(1, Self.parameterSets), sequenceNumber: 1, timestamp: 0, now: Self.ms)
        _ = router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 500, context: 100, now: 1_000 * Self.ms)
        _ = router.authenticated(.subscriber(stream: stream, rtcpSSRC: 500), from: RelayAddress(ipv4: 2, port: 2), now: 1_001 * Self.ms)
        #expect(router.counters.viewerJoin.count == 0)
        for (sequence, payload, now) in [(UInt16(2), Self.slice, UInt64(1_020)), (3, Self.parameterSets, 1_180), (4, Self.idrStart, 1_181), (5, Self.slice, 1_200)] {
            let packet = try Self.video(sequence, payload)
            _ = router.publisherRTP(stream: stream, track: 0, packet: packet, sequenceNumber: sequence, timestamp: 0, now: now * Self.ms)
            _ = router.forwardVideo(stream: stream, track: 0, slot: 0, packet: packet, now: now * Self.ms)
        }
        let join = router.counters.viewerJoin
        #expect(join.count == 1 && abs(join.sum - 0.18) < 1e-9, "\(join)")
        #expect(join.cumulative[HistogramCounts.joinBounds.firstIndex(of: 0.1)!] == 0 && join.cumulative[HistogramCounts.joinBounds.firstIndex(of: 0.25)!] == 1)

        let block = RTCPReportBlock(ssrc: Self.video, fractionLost: 64, cumulativeLost: 5, extendedHighestSequenceNumber: 5, jitter: 4)
        let elsewhere = RTCPReportBlock(ssrc: 0x5555, fractionLost: 255, cumulativeLost: 9, jitter: 9)
        _ = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [.receiverReport(.init(ssrc: 500, reportBlocks: [block, elsewhere]))], now: 1_300 * Self.ms)
        let loss = router.counters.viewerLoss
        #expect(loss.count == 1 && loss.sum == 0.25, "\(loss)")
        #expect(loss.cumulative[HistogramCounts.lossBounds.firstIndex(of: 0.2)!] == 0 && loss.cumulative[HistogramCounts.lossBounds.firstIndex(of: 0.5)!] == 1)
    }

    @Test("the relay's receiver report: its own leg, with loss and jitter raised to the worst fresh subscriber report")
    func reportAggregation() throws {
        var router = Self.router()
        let stream = try #require(router.handle(streamId: "s"))
        router.authenticated(.track(stream: stream, track: 0), from: Self.publisherAddress)
        _ = router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 500, context: 100, now: 0)
        _ = router.addSubscriber(streamId: "s", subscriberId: "b", rtcpSSRC: 501, context: 101, now: 0)
        // 10 packets with 2 missing on the publisher→relay leg.
        for sequence in UInt16(1)...12 where sequence != 4 && sequence != 9 {
            let packet = try rtpPacket(ssrc: Self.video, sequence: sequence)
            router.publisherRTP(stream: stream, track: 0, packet: packet, sequenceNumber: sequence, timestamp: UInt32(sequence) * 3000, now: UInt64(sequence) * 33 * Self.ms)
        }
        let sr = RTCPSenderReport(ssrc: Self.video, ntpTimestamp: 0x1234_5678_9ABC_DEF0, rtpTimestamp: 0, packetCount: 0, octetCount: 0)
        let forward = router.publisherRTCP(stream: stream, packets: [.senderReport(sr)], now: 500 * Self.ms)
        #expect(forward, "SRs go on to subscribers")
        // (Under the 30 % at which a subscriber falls back to audio only: such a loss would not count.)
        let fromA = RTCPReportBlock(ssrc: Self.video, fractionLost: 70, cumulativeLost: 5, extendedHighestSequenceNumber: 12, jitter: 40)
        let fromB = RTCPReportBlock(ssrc: Self.video, fractionLost: 10, cumulativeLost: 50, extendedHighestSequenceNumber: 12, jitter: 7)
        let ignored = RTCPReportBlock(ssrc: 0x5555, fractionLost: 255, cumulativeLost: 9_999, jitter: 99_999)
        _ = router.subscriberRTCP(stream: stream, rtcpSSRC: 500, packets: [.receiverReport(.init(ssrc: 500, reportBlocks: [fromA, ignored]))], now: 600 * Self.ms)
        _ = router.subscriberRTCP(stream: stream, rtcpSSRC: 501, packets: [.receiverReport(.init(ssrc: 501, reportBlocks: [fromB]))], now: 600 * Self.ms)

        // The tick also carries the PLI coalesced from the second subscriber's arrival (led by an
        // empty report).
        let reports = Self.receiverReports(router.tick(now: 1_000 * Self.ms)).filter { !$0.reportBlocks.isEmpty }
        #expect(reports.count == 1)
        let report = try #require(reports.first)
        #expect(report.ssrc == 9)
        #expect(report.reportBlocks.count == 1, "audio received nothing: no block")
        let block = try #require(report.reportBlocks.first)
        #expect(block.ssrc == Self.video)
        #expect(block.fractionLost == 70 && block.cumulativeLost == 50)
        #expect(block.jitter >= 40)
        #expect(block.extendedHighestSequenceNumber == 12)
        #expect(block.lastSenderReport == 0x5678_9ABC)
        #expect(block.delaySinceLastSenderReport == 500 * 65_536 / 1_000, "500 ms in 1/65536 s")

        // Subscriber reports go stale; then only the relay's own leg counts (2 of 12 lost).
        let laterReport = try #require(Self.receiverReports(router.tick(now: 10_000 * Self.ms)).first)
        #expect(laterReport.reportBlocks.first?.cumulativeLost == 2)
        #expect(laterReport.reportBlocks.first?.fractionLost == 0, "nothing new was lost since the last report")
    }

    static func receiverReports(_ actions: [RelayAction<Int>]) -> [RTCPReceiverReport] {
        actions.compactMap { action in
            guard case .toPublisher(1, publisherAddress, let bytes) = action,
                  case .receiverReport(let report)? = try? RTCPCompoundPacket(parsing: bytes).packets.first
            else { return nil }
            return report
        }
    }

    @Test("reception statistics follow RFC 3550 across a sequence wrap")
    func reception() {
        var statistics = ReceptionStatistics(clockRate: 90_000)
        for sequence in [UInt16(65_534), 65_535, 1, 2, 0] {
            statistics.update(sequenceNumber: sequence, rtpTimestamp: 0, arrival: 0)
        }
        let block = statistics.reportBlock(ssrc: 1, now: 0)
        #expect(block.extendedHighestSequenceNumber == 0x1_0002)
        #expect(block.cumulativeLost == 0, "the late 0 fills the gap")
        #expect(block.jitter == 0)
    }
}

@Suite("RelayAddress: one key per flow whichever family wrote it")
struct RelayAddressTests {
    @Test("IPv4 is held IPv4-mapped: dotted, ::ffff: and socket forms give one address; IPv6 round-trips; junk is nil")
    func families() throws {
        let dotted = try #require(RelayAddress(host: "198.18.40.2", port: 5000))
        let mapped = try #require(RelayAddress(host: "::ffff:198.18.40.2", port: 5000))
        #expect(dotted == mapped && dotted == RelayAddress(ipv4: 0xC612_2802, port: 5000))
        #expect(dotted.ipv4 == 0xC612_2802 && dotted.description == "198.18.40.2:5000")
        #expect(RelayAddress(dotted.socketAddress6) == dotted && RelayAddress(dotted.socketAddress) == dotted)
        let v6 = try #require(RelayAddress(host: "[fd00:5043:42::2]", port: 6000))
        #expect(v6.ipv4 == nil && v6.host == "fd00:5043:42::2" && v6.description == "[fd00:5043:42::2]:6000")
        #expect(RelayAddress(v6.socketAddress6) == v6)
        #expect(RelayAddress(ipv6: v6.ipv6Bytes, port: 6000) == v6)
        #expect(RelayAddress(host: "::", port: 0)?.isUnspecified == true && RelayAddress(host: "0.0.0.0", port: 0)?.isUnspecified == true)
        for junk in ["relay.example", "1.2.3", "fd00::g", ""] { #expect(RelayAddress(host: junk, port: 1) == nil, "\(junk)") }
    }

    @Test("a relay bound to :: takes IPv4 and IPv6 datagrams on its one port and answers each from it")
    func dualStackSocket() throws {
        let relay = try UDPSocket(host: "::", port: 0, bufferSize: 1 << 16)
        let v4 = try UDPSocket(host: "127.0.0.1", port: 0, bufferSize: 0)
        let v6 = try UDPSocket(host: "::1", port: 0, bufferSize: 0)
        #expect(v4.send([4], to: RelayAddress(ipv4: 0x7F00_0001, port: relay.localAddress.port)))
        #expect(v6.send([6], to: try #require(RelayAddress(host: "::1", port: relay.localAddress.port))))
        let batch = ReceiveBatch(capacity: 8, slotSize: 64)
        var sources: [UInt8: RelayAddress] = [:]
        for _ in 0..<200 where sources.count < 2 {
            let count = batch.receive(from: relay.descriptor)
            for i in 0..<max(0, count) {
                if let data = batch.datagram(i), let first = data.first, let source = batch.source(i) { sources[first] = source }
            }
            if sources.count < 2 { usleep(5_000) }
        }
        #expect(sources[4] == RelayAddress(ipv4: 0x7F00_0001, port: v4.localAddress.port))
        #expect(sources[6] == RelayAddress(host: "::1", port: v6.localAddress.port))
        // Answers go back to each, from the same socket.
        for (tag, address) in sources { #expect(relay.send([tag], to: address)) }
        for socket in [v4, v6] {
            var received = false
            for _ in 0..<200 where !received {
                received = batch.receive(from: socket.descriptor) > 0
                if !received { usleep(5_000) }
            }
            #expect(received, "no answer at \(socket.localAddress)")
        }
    }
}
