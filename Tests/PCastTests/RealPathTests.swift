import Foundation
import GStreamer
@testable import PCast
import PCastImpairment
@testable import PCastMedia
import PCastNode
import PCastTestSupport
import Synchronization
import Testing

/// A viewer's receiver (for its loss-recovery figures) and the numbers of its video.
private struct ViewerVideo {
    let receiver: RTPReceiver
    let payloadType: UInt8

    init(_ stream: MediaStream) throws {
        receiver = try #require(stream.engine as? RTPReceiver)
        payloadType = try #require(receiver.payloadType(of: .video))
    }

    var nacked: Int { receiver.recovery.nacked(payloadType: payloadType) }
    var reordered: Int { receiver.recovery.reordered(payloadType: payloadType) }
    var expired: Int { receiver.recovery.expired(payloadType: payloadType) }
    var missingOnArrival: Int { receiver.networkStatistics().first { $0.kind == .video }?.packetsMissingOnArrival ?? 0 }
    var keyframesRequested: Int { receiver.recovery.keyframesRequested() }
}

extension OneAtATime {
    /// Issue 41: the viewer's leg through the impairment proxy with real paths' faults; the viewer
    /// at the SDK's defaults (the adaptive playout delay).
    @Suite("Real paths: NACKs only for real gaps, an adaptive playout delay, a keyframe asked for when a packet is past repair", .serialized)
    struct RealPathTests {
        /// Starts a stamped publisher and an impaired viewer rendering to the null devices, with a
        /// meter on the frames it shows.
        static func view(seed: UInt64, profile: ImpairmentProfile = .clear) async throws -> (ImpairedViewing, Renderer, StreamMeter) {
            let session = try await ImpairedViewing.start(seed: seed, profile: profile)
            let meter = StreamMeter()
            try meter.stamp(session.media)
            let renderer = session.stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            _ = await renderer.start()
            try meter.watch(renderer, of: session.stream)
            return (session, renderer, meter)
        }

        @Test("a lossless path with 20 ms of jitter and 1 % of packets overtaken by 20 ms: no NACK, every frame shown in order, none missing")
        func jitterAndReorderingWithoutNACKs() async throws {
            var profile = ImpairmentProfile()
            profile.jitter = .milliseconds(20)
            profile.reorder = 0.01
            let (session, renderer, meter) = try await Self.view(seed: 4101, profile: profile)
            let video = try ViewerVideo(session.stream)
            try await Task.sleep(for: .seconds(1))
            _ = meter.take()
            try await Task.sleep(for: .seconds(8))
            let shown = meter.take()
            #expect(video.reordered >= 5, "the path overtook only \(video.reordered) video packets (missing on arrival \(video.missingOnArrival), expired \(video.expired), nacked \(video.nacked))")
            #expect(video.nacked == 0, "\(video.nacked) packets asked for again on a lossless path")
            #expect(shown.missing == 0 && shown.reordered == 0 && shown.unreadable == 0, "\(shown)")
            #expect(shown.deliveredPercent >= 99, "\(shown.frames) of \(shown.captured) frames shown")
            #expect(shown.longestFreezeMilliseconds < 200, "longest freeze \(shown.longestFreezeMilliseconds) ms")
            await renderer.stop()
            await session.stop()
        }

        @Test("uniform 5 % loss each way: NACKs ≤ 1.2 × the video packets that went missing, and a keyframe asked for wherever a packet was given up")
        func nacksPerLoss() async throws {
            let (session, renderer, meter) = try await Self.view(seed: 4102, profile: ImpairmentProfile(loss: .uniform(0.05)))
            let video = try ViewerVideo(session.stream)
            try await Task.sleep(for: .seconds(1))
            _ = meter.take()
            let (nackedBefore, missingBefore) = (video.nacked, video.missingOnArrival)
            try await Task.sleep(for: .seconds(8))
            let shown = meter.take()
            let nacked = video.nacked - nackedBefore, missing = video.missingOnArrival - missingBefore
            print("5 % loss: \(nacked) NACKed, \(missing) missing, \(video.expired) given up, \(video.keyframesRequested) keyframes asked; \(shown.frames) of \(shown.captured) frames shown, longest freeze \(shown.longestFreezeMilliseconds) ms")
            #expect(missing > 50, "only \(missing) video packets went missing")
            #expect(Double(nacked) <= 1.2 * Double(missing), "\(nacked) NACKed for \(missing) missing")
            #expect(video.expired == 0 || video.keyframesRequested > 0, "\(video.expired) given up without a keyframe request")
            await renderer.stop()
            await session.stop()
        }

        @Test("the adaptive playout delay falls below 25 ms within 5 s on a clean path and rises above the measured jitter within 2 s when 30 ms of jitter starts; overridePlayoutDelay pins it, and its release gives it back to the adaptive delay")
        func adaptiveDelay() async throws {
            let (session, renderer, _) = try await Self.view(seed: 4103)
            let video = try ViewerVideo(session.stream)
            let delay = try #require(session.stream.engine.playoutDelay)
            #expect(delay.isAdaptive && delay.current == RTPReceiver.defaultPlayoutDelay)
            #expect(await eventually(.seconds(5)) { delay.current < .milliseconds(25) }, "\(delay.current) after 5 s")
            var jitter = ImpairmentProfile()
            jitter.jitter = .milliseconds(30)
            session.proxy.setProfile(jitter, for: .toClient)
            let started = ContinuousClock.now
            #expect(await eventually(.seconds(2)) {
                let measured = video.receiver.recovery.jitter
                return measured >= .milliseconds(15) && delay.current > measured
            }, "after \(ContinuousClock.now - started): delay \(delay.current), jitter \(String(describing: video.receiver.recovery.jitter))")
            let pinned = renderer.overridePlayoutDelay(0.2)
            #expect(delay.current == .milliseconds(200) && video.receiver.sinkLatency.latency == .milliseconds(200))
            try await Task.sleep(for: .seconds(1))
            #expect(delay.current == .milliseconds(200), "the adaptive delay moved an override")
            pinned.dispose()
            #expect(delay.current != .milliseconds(200) && delay.current > .milliseconds(30) && delay.current <= .seconds(1), "\(delay.current)")
            await renderer.stop()
            await session.stop()
        }

        @Test("a video packet dropped past repair (the path drops it and every retransmission of it): a keyframe asked for within 100 ms of its deadline, and no freeze over 300 ms")
        func keyframeWhenPastRepair() async throws {
            let (session, renderer, meter) = try await Self.view(seed: 4104)
            let video = try ViewerVideo(session.stream)
            try await Task.sleep(for: .seconds(3))  // past the join, the delay settled
            _ = meter.take()
            let before = (requests: video.keyframesRequested, expired: video.expired)
            // The next video packet toward the viewer, and every copy of it after.
            let target = Mutex<(sequence: UInt16, at: ContinuousClock.Instant)?>(nil)
            let payloadType = video.payloadType
            session.proxy.dropDatagrams(.toClient) { datagram in
                guard datagram.count > 12, datagram[0] >> 6 == 2, datagram[1] & 0x7F == payloadType else { return false }
                let sequence = UInt16(datagram[2]) << 8 | UInt16(datagram[3])
                return target.withLock { target in
                    if target == nil { target = (sequence, .now) }
                    return target!.sequence == sequence
                }
            }
            let delayInEffect = try #require(session.stream.engine.playoutDelay).current
            #expect(await eventually(.seconds(3)) { video.keyframesRequested > before.requests }, "no keyframe asked for")
            let asked = ContinuousClock.now
            let dropped = try #require(target.withLock { $0 })
            try await Task.sleep(for: .seconds(2))
            let shown = meter.take()
            #expect(session.proxy.filtered(.toClient) >= 2, "the packet was not asked for again: \(session.proxy.filtered(.toClient)) copies dropped")
            #expect(video.expired > before.expired)
            // The deadline: the playout delay after the gap was seen (the next packet, within a frame).
            let late = asked - (dropped.at + delayInEffect)
            #expect(late < .milliseconds(100), "asked \(late) after the deadline (delay \(delayInEffect))")
            #expect(shown.longestFreezeMilliseconds < 300, "longest freeze \(shown.longestFreezeMilliseconds) ms")
            await renderer.stop()
            await session.stop()
        }

        @Test("the publisher's leg with 5 ms of jitter and 2 % of packets overtaken by 20 ms: the relay asks the publisher for at most 3 packets (a packet overtaken by more than its allowance is asked for once, and the copy that answers teaches the allowance), the viewer for at most 3 (while its allowance learns the path; a loaded host delays some more), and the viewer is shown every frame in order, its adaptive delay under 120 ms (it was 180 ms: reordering counted as loss) with no freeze")
        func publisherLegReorderingIsNotLoss() async throws {
            let media = try await stampedMedia(audio: false)
            let meter = StreamMeter()
            try meter.stamp(media)
            let session = try await ImpairedPublishing.start(seed: 4105, publishing: media)
            let (platform, proxy, publisher) = (session.platform, session.proxy, session.publisher)
            let viewer = PCast(PCastOptions(uri: platform.signalingURL))
            try await viewer.start(authToken: try platform.token(.auth))
            let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
            let video = try ViewerVideo(stream)
            let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            _ = await renderer.start()
            try meter.watch(renderer, of: stream)
            try await Task.sleep(for: .seconds(1))
            var profile = ImpairmentProfile(jitter: .milliseconds(5))
            profile.reorder = 0.02
            proxy.setProfile(profile, for: .toServer)
            let before = platform.relay.statistics()
            _ = meter.take()
            try await Task.sleep(for: .seconds(8))
            let shown = meter.take()
            let after = platform.relay.statistics()
            let asked = publisher.rtcStatsReport().stats.first { $0.type == "outbound-rtp" && $0.kind == "video" }?.nackCount ?? 0
            let delay = try #require(stream.engine.playoutDelay).current
            #expect(video.reordered >= 5, "the viewer saw only \(video.reordered) video packets overtaken")
            #expect(after.gapRequests - before.gapRequests <= 3, "the relay asked the publisher for \(after.gapRequests - before.gapRequests) packets")
            #expect(video.nacked <= 3, "the viewer asked for \(video.nacked) packets (\(video.reordered) overtaken)")
            #expect(asked <= 6, "the publisher heard \(asked) NACKs")
            #expect(shown.missing == 0 && shown.reordered == 0 && shown.unreadable == 0, "\(shown)")
            #expect(shown.deliveredPercent >= 99, "\(shown.frames) of \(shown.captured) frames shown")
            // Packets overtaken within the allowance are no loss: at most the few asked for make room
            // for repairs (every gap did, and the delay rose to 180 ms with a freeze of 150 ms).
            #expect(delay < .milliseconds(120), "the adaptive delay rose to \(delay) (the path's jitter \(video.receiver.recovery.jitter))")
            #expect(shown.longestFreezeMilliseconds < 100, "longest freeze \(shown.longestFreezeMilliseconds) ms")
            await renderer.stop()
            await stream.stop()
            await viewer.stop()
            await session.stop()
        }
    }
}
