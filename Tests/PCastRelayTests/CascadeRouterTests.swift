import PCastProtocol
@testable import PCastRelay
import Testing

/// The router's two ends of a cascade, on an injected clock: an edge pulling a stream from an
/// origin relay (its "publisher" is that relay), and an origin serving an edge (one subscriber
/// standing for many viewers).
@Suite("Relay router: origin → edge cascade")
struct CascadeRouterTests {
    static let ms: UInt64 = 1_000_000
    static let video: UInt32 = 0xBBBB_0001
    static let audio: UInt32 = 0xBBBB_0002
    static let origin = RelayAddress(ipv4: 0x7F00_0002, port: 7000)
    /// The SSRC the origin assigned this edge's subscriber flow there.
    static let legSSRC: UInt32 = 0x0E0E_0001

    /// An edge: context 1 is the leg to the origin, subscribers are 100+.
    static func edge(cache: Int = 64) -> RelayRouter<Int> {
        var router = RelayRouter<Int>(
            settings: RouterSettings(relaySSRC: 9, keyframeInterval: 300 * ms, packetCacheCapacity: cache, packetCacheDuration: 1_000 * ms),
            now: 0)
        router.addStream(id: "s", tracks: [videoTrack(ssrc: video), audioTrack(ssrc: audio)], publisher: 1,
                         upstream: UpstreamLeg(address: origin, ssrc: legSSRC))
        return router
    }

    static func parsed(_ action: RelayAction<Int>) -> (context: Int, address: RelayAddress, packets: [RTCPPacket])? {
        guard case .toPublisher(let context, let address, let bytes) = action,
              let compound = try? RTCPCompoundPacket(parsing: bytes) else { return nil }
        return (context, address, compound.packets)
    }

    @Test("an edge speaks to the origin first, with the SSRC the origin gave it: a report before any media opens the leg")
    func edgeOpensTheLeg() throws {
        var router = Self.edge()
        let stream = try #require(router.handle(streamId: "s"))
        #expect(router.isUpstream(stream: stream))
        let opening = router.receiverReport(stream: stream, now: 0)
        let report = try #require(opening.flatMap(Self.parsed))
        #expect(report.context == 1 && report.address == Self.origin)
        guard case .receiverReport(let rr)? = report.packets.first else { Issue.record("not a receiver report"); return }
        #expect(rr.ssrc == Self.legSSRC, "the origin finds the edge's flow by this SSRC")
        #expect(rr.reportBlocks.isEmpty)
        // A relay's own stream sends nothing before media comes: it would not know where.
        var plain = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 9), now: 0)
        plain.addStream(id: "p", tracks: [videoTrack(ssrc: 5)], publisher: 1)
        let plainStream = try #require(plain.handle(streamId: "p"))
        let none = plain.receiverReport(stream: plainStream, now: 0)
        #expect(none == nil)
    }

    @Test("a leg moved to a new flow of the origin: the edge's reports go with the new flow's context and SSRC to the origin's address; its viewers stay; a stream that is not pulled cannot be moved")
    func legMovesToANewFlow() throws {
        var router = Self.edge()
        let stream = try #require(router.handle(streamId: "s"))
        _ = router.addSubscriber(streamId: "s", subscriberId: "v", rtcpSSRC: 500, context: 100, now: 0)
        let moved = RelayAddress(ipv4: 0x7F00_0002, port: 7001)
        let replaced = router.replaceUpstream(id: "s", publisher: 2, upstream: UpstreamLeg(address: moved, ssrc: 0x0E0E_0002))
        #expect(replaced)
        let report = try #require(router.receiverReport(stream: stream, now: 0).flatMap(Self.parsed))
        #expect(report.context == 2 && report.address == moved)
        guard case .receiverReport(let rr)? = report.packets.first else { Issue.record("not a receiver report"); return }
        #expect(rr.ssrc == 0x0E0E_0002)
        #expect(router.streams[stream]?.subscribers.count == 1, "the viewer stays on the stream")
        var plain = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 9), now: 0)
        plain.addStream(id: "p", tracks: [videoTrack(ssrc: 5)], publisher: 1)
        let notPulled = plain.replaceUpstream(id: "p", publisher: 2, upstream: UpstreamLeg(address: moved, ssrc: 1))
        let unknown = plain.replaceUpstream(id: "nope", publisher: 2, upstream: UpstreamLeg(address: moved, ssrc: 1))
        #expect(!notPulled && !unknown)
    }

    @Test("keyframe requests of many viewers at an edge reach the origin as one PLI per window, sent with the edge's SSRC")
    func keyframesCoalesce() throws {
        var router = Self.edge()
        let stream = try #require(router.handle(streamId: "s"))
        var requests: [RelayAction<Int>] = []
        for index in 0..<50 {
            let ssrc = UInt32(500 + index)
            requests += router.addSubscriber(streamId: "s", subscriberId: "v\(index)", rtcpSSRC: ssrc, context: 100 + index, now: 0) ?? []
            requests += router.authenticated(.subscriber(stream: stream, rtcpSSRC: ssrc), from: RelayAddress(ipv4: 1, port: UInt16(1000 + index)),
                                             now: UInt64(index) * Self.ms)
            requests += router.subscriberRTCP(stream: stream, rtcpSSRC: ssrc,
                                              packets: [.pictureLossIndication(.init(senderSSRC: ssrc, mediaSSRC: Self.video))], now: UInt64(index) * Self.ms)
        }
        requests += router.tick(now: 300 * Self.ms)
        let plis = requests.compactMap(Self.parsed).filter { $0.packets.contains { if case .pictureLossIndication = $0 { true } else { false } } }
        #expect(plis.count == 2, "one at once, one at the window's end for those that came during it")
        for pli in plis {
            #expect(pli.address == Self.origin)
            guard case .pictureLossIndication(let request)? = pli.packets.last else { continue }
            #expect(request.senderSSRC == Self.legSSRC && request.mediaSSRC == Self.video)
        }
    }

    @Test("NACKs at an edge: what its cache holds is answered there; what it lacks is asked of the origin once, and the answer goes to each viewer that asked")
    func nacksAtTheEdge() throws {
        var router = Self.edge()
        let stream = try #require(router.handle(streamId: "s"))
        let addresses = [RelayAddress(ipv4: 0x7F00_0003, port: 5000), RelayAddress(ipv4: 0x7F00_0003, port: 5001), RelayAddress(ipv4: 0x7F00_0003, port: 5002)]
        for index in 0..<3 {
            _ = router.addSubscriber(streamId: "s", subscriberId: "v\(index)", rtcpSSRC: UInt32(500 + index), context: 100 + index, now: 0)
            router.authenticated(.subscriber(stream: stream, rtcpSSRC: UInt32(500 + index)), from: addresses[index], now: 0)
        }
        // 10…20 came from the origin except 15 (lost on the leg).
        var packets: [UInt16: [UInt8]] = [:]
        for sequence in UInt16(10)...20 {
            packets[sequence] = try rtpPacket(ssrc: Self.video, sequence: sequence)
            if sequence == 15 { continue }
            router.publisherRTP(stream: stream, track: 0, packet: packets[sequence]!, sequenceNumber: sequence, timestamp: 0, now: 10 * Self.ms)
            let answer = router.answerRequested(stream: stream, track: 0, sequenceNumber: sequence, packet: packets[sequence]!)
            #expect(answer == nil, "nobody asked: fanned out as any packet")
        }
        func nack(_ index: Int, _ lost: [UInt16], at now: UInt64) -> [RelayAction<Int>] {
            router.subscriberRTCP(stream: stream, rtcpSSRC: UInt32(500 + index),
                                  packets: [.genericNACK(RTCPGenericNACK(senderSSRC: UInt32(500 + index), mediaSSRC: Self.video, lostSequenceNumbers: lost))],
                                  now: now)
        }
        // Viewer 0 lost 12 (its own leg) and 15.
        let first = nack(0, [12, 15], at: 20 * Self.ms)
        #expect(first.contains(.retransmit(100, addresses[0], rtp: packets[12]!)), "12 from the edge's own cache")
        let upstream = first.compactMap(Self.parsed)
        #expect(upstream.count == 1)
        let asked = try #require(upstream.first)
        #expect(asked.address == Self.origin)
        guard case .genericNACK(let forwarded)? = asked.packets.last else { Issue.record("no NACK to the origin"); return }
        #expect(forwarded.senderSSRC == Self.legSSRC && forwarded.mediaSSRC == Self.video && forwarded.lostSequenceNumbers == [15])
        // Viewers 1 and 2 ask too, before the answer: nothing more goes upstream.
        #expect(nack(1, [15], at: 25 * Self.ms).isEmpty)
        #expect(nack(2, [15], at: 30 * Self.ms).isEmpty)
        #expect(router.counters.nacksForwarded == 1 && router.counters.nacksServed == 1)

        // The origin's answer: to the three who asked, and not fanned out.
        router.publisherRTP(stream: stream, track: 0, packet: packets[15]!, sequenceNumber: 15, timestamp: 0, now: 40 * Self.ms)
        let answered = router.answerRequested(stream: stream, track: 0, sequenceNumber: 15, packet: packets[15]!)
        let answers = try #require(answered)
        #expect(Set(answers.map { "\($0)" }) == Set((0..<3).map { "\(RelayAction<Int>.retransmit(100 + $0, addresses[$0], rtp: packets[15]!))" }))
        #expect(router.counters.upstreamRetransmissions == 3)
        // Cached now: a late asker is answered at the edge.
        #expect(nack(1, [15], at: 50 * Self.ms) == [.retransmit(101, addresses[1], rtp: packets[15]!)])

        // An unanswered request is asked again once its timeout passed, not before.
        #expect(nack(0, [30], at: 100 * Self.ms).count == 1)
        #expect(nack(1, [30], at: 300 * Self.ms).isEmpty)
        #expect(nack(1, [30], at: 351 * Self.ms).count == 1, "250 ms later the origin is asked again")
    }

    @Test("an origin serving an edge: the edge has no audio-only fallback, its loss counts in the publisher's report and its REMB lowers the publisher's estimate")
    func originSeesTheWorstEdge() throws {
        var router = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 9), now: 0)
        router.addStream(id: "s", tracks: [videoTrack(ssrc: Self.video), audioTrack(ssrc: Self.audio)], publisher: 1)
        let stream = try #require(router.handle(streamId: "s"))
        let publisher = RelayAddress(ipv4: 0x7F00_0001, port: 4000)
        router.authenticated(.track(stream: stream, track: 0), from: publisher)
        _ = router.addSubscriber(streamId: "s", subscriberId: "edge@node-2", rtcpSSRC: 600, context: 200, now: 0, isEdge: true)
        _ = router.addSubscriber(streamId: "s", subscriberId: "viewer", rtcpSSRC: 601, context: 201, now: 0)
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 600), from: RelayAddress(ipv4: 2, port: 2))
        router.authenticated(.subscriber(stream: stream, rtcpSSRC: 601), from: RelayAddress(ipv4: 3, port: 3))
        for sequence in UInt16(1)...10 {
            router.publisherRTP(stream: stream, track: 0, packet: try rtpPacket(ssrc: Self.video, sequence: sequence),
                                sequenceNumber: sequence, timestamp: UInt32(sequence) * 3000, now: UInt64(sequence) * 33 * Self.ms)
        }
        // 40 % loss reported by each, window after window: a viewer falls back to audio only (its
        // loss stops counting); an edge never does.
        for (index, now) in stride(from: UInt64(400), through: 3_600, by: 400).enumerated() {
            let sent = UInt32(index + 1) * 100
            let lossy = RTCPReportBlock(ssrc: Self.video, fractionLost: 102, cumulativeLost: Int32(sent * 2 / 5), extendedHighestSequenceNumber: sent, jitter: 5)
            let audioBlock = RTCPReportBlock(ssrc: Self.audio, fractionLost: 0, cumulativeLost: 0, extendedHighestSequenceNumber: sent, jitter: 1)
            _ = router.subscriberRTCP(stream: stream, rtcpSSRC: 601, packets: [.receiverReport(.init(ssrc: 601, reportBlocks: [lossy, audioBlock]))], now: now * Self.ms)
            _ = router.subscriberRTCP(stream: stream, rtcpSSRC: 600, packets: [
                .receiverReport(.init(ssrc: 600, reportBlocks: [lossy, audioBlock])),
                .receiverEstimatedMaxBitrate(.init(senderSSRC: 600, bitrate: 350_000, ssrcs: [Self.video])),
            ], now: now * Self.ms)
        }
        #expect(router.counters.videoSuspensions == 1, "the viewer, not the edge")
        let reported = router.receiverReport(stream: stream, now: 3_700 * Self.ms)
        let action = try #require(reported)
        let packets = try #require(Self.parsed(action)?.packets)
        guard case .receiverReport(let rr)? = packets.first else { Issue.record("no report"); return }
        #expect(rr.reportBlocks.first { $0.ssrc == Self.video }?.fractionLost == 102, "the edge's loss reaches the publisher")
        let remb = packets.compactMap { if case .receiverEstimatedMaxBitrate(let remb) = $0 { remb } else { nil } }.first
        #expect(remb?.bitrate == 350_000 && remb?.ssrcs == [Self.video], "the edge's estimate, the lowest")
        // An edge's estimate goes stale like its reports.
        let laterReport = router.receiverReport(stream: stream, now: 9_000 * Self.ms)
        let later = try #require(laterReport.flatMap(Self.parsed))
        #expect(!later.packets.contains { if case .receiverEstimatedMaxBitrate = $0 { true } else { false } })
    }
}
