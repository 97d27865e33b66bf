import Foundation
import GStreamer
@testable import PCast
import PCastImpairment
@testable import PCastMedia
import PCastNode
import PCastServer
import PCastTestSupport
import Synchronization
import Testing

/// The audio a renderer plays, as (presentation time, duration) pairs.
func watchAudio(_ renderer: Renderer, _ stream: MediaStream) throws -> Values<(Duration, Duration)> {
    let audio = Values<(Duration, Duration)>()
    try renderer.setFrameReadyCallback(stream.getAudioTracks()[0]) { notification in
        guard case .audio(let frame)? = try? notification.read(), let pts = frame.presentationTimestamp else { return }
        audio.append((pts, frame.duration ?? frame.sampleDuration))
    }
    return audio
}

/// The longest stretch without audio between consecutive buffers.
func longestAudioGap(_ buffers: [(Duration, Duration)]) -> Duration {
    zip(buffers, buffers.dropFirst()).map { previous, next in next.0 - (previous.0 + previous.1) }.max() ?? .zero
}

/// Publishes video noise (the encoder needs every bit it is given, so the bitrate shows any limit)
/// at 640×360 30 fps and 1.5 Mbit/s, without audio.
func publishNoise(_ sdk: PCast, _ platform: LocalPlatform) async throws -> (Publisher, UserMediaStream) {
    var options = UserMediaOptions()
    options.video.source = .pipeline("videotestsrc is-live=true pattern=snow")
    options.video.width = .exact(640)
    options.video.height = .exact(360)
    options.video.frameRate = .exact(30)
    options.audio.enabled = false
    let media = try await UserMedia.getUserMedia(options)
    let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media,
                                          settings: EncodingSettings(videoBitrate: 1500, keyframeInterval: 30))
    return (publisher, media)
}

/// A stamped test pattern with audio published through the embedded platform, and one viewer whose
/// media goes through an impairment proxy.
struct ImpairedViewing {
    let platform: LocalPlatform
    let proxy: UDPImpairmentProxy
    let publisherSDK: PCast
    let media: UserMediaStream
    let publisher: Publisher
    let viewer: PCast
    let stream: MediaStream

    static func start(seed: UInt64, profile: ImpairmentProfile = .clear, playoutDelay: Duration? = nil,
                      settings: EncodingSettings = EncodingSettings()) async throws -> ImpairedViewing {
        let platform = try await LocalPlatform.start()
        let proxy = try UDPImpairmentProxy(server: "127.0.0.1", serverPort: Int(platform.relay.mediaPort), seed: seed)
        proxy.setProfile(profile)
        let publisherSDK = PCast(PCastOptions(uri: platform.signalingURL))
        try await publisherSDK.start(authToken: try platform.token(.auth))
        let media = try await stampedMedia(audio: true)
        let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media, settings: settings)
        var options = PCastOptions(uri: platform.signalingURL)
        options.mediaRelay = MediaRelayAddress(host: "127.0.0.1", port: UInt16(proxy.port))
        if let playoutDelay { options.playoutDelay = playoutDelay }
        let viewer = PCast(options)
        try await viewer.start(authToken: try platform.token(.auth))
        let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
        return ImpairedViewing(platform: platform, proxy: proxy, publisherSDK: publisherSDK, media: media, publisher: publisher, viewer: viewer, stream: stream)
    }

    func stop() async {
        await stream.stop()
        await viewer.stop()
        await publisher.stop()
        await publisherSDK.stop()
        await media.stop()
        proxy.stop()
        await platform.shutdown()
    }
}

/// A publisher whose media goes through an impairment proxy: noise (see ``publishNoise``), or a
/// stream of the test's.
struct ImpairedPublishing {
    let platform: LocalPlatform
    let proxy: UDPImpairmentProxy
    let sdk: PCast
    let publisher: Publisher
    let media: UserMediaStream

    /// `media` nil: noise.
    static func start(seed: UInt64, publishing media: UserMediaStream? = nil) async throws -> ImpairedPublishing {
        let platform = try await LocalPlatform.start()
        let proxy = try UDPImpairmentProxy(server: "127.0.0.1", serverPort: Int(platform.relay.mediaPort), seed: seed)
        var options = PCastOptions(uri: platform.signalingURL)
        options.mediaRelay = MediaRelayAddress(host: "127.0.0.1", port: UInt16(proxy.port))
        let sdk = PCast(options)
        try await sdk.start(authToken: try platform.token(.auth))
        if let media {
            let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media)
            return ImpairedPublishing(platform: platform, proxy: proxy, sdk: sdk, publisher: publisher, media: media)
        }
        let (publisher, noise) = try await publishNoise(sdk, platform)
        return ImpairedPublishing(platform: platform, proxy: proxy, sdk: sdk, publisher: publisher, media: noise)
    }

    /// The video bitrate once it is back over 1.2 Mbit/s, or the last one measured after 45 s.
    /// GCC's increase (8 % a report, none while the round trip shows queueing) takes ~21 s from
    /// the ~240 kbit/s a 500 kbit/s cap leaves to 1.2 Mbit/s; on CI's loaded 2-core machine the
    /// round trips of a busy moment hold it back (1.13 Mbit/s after 30 s in one run), so 45 s.
    func recoveredBitrate() async throws -> Double {
        var recovered = 0.0
        let deadline = ContinuousClock.now + .seconds(45)
        while recovered < 1_200_000 && ContinuousClock.now < deadline {
            recovered = try await videoBitrate(publisher, over: 2)
        }
        return recovered
    }

    func stop() async {
        await publisher.stop()
        await sdk.stop()
        await media.stop()
        proxy.stop()
        await platform.shutdown()
    }
}

extension OneAtATime {
    @Suite("Quality under impaired networks", .serialized)
    struct NetworkQualityTests {
        @Test("10 % uniform loss on the subscriber's leg (both ways), 80 ms playout delay: NACKed retransmissions from the relay repair the loss (< 0.5 % left) and get ≥ 93 % of video frames decoded; no audio gap over 60 ms")
        func tenPercentLoss() async throws {
            // 80 ms, the documented setting for heavy loss: at the 40 ms default a full `make test`
            // left 7–10 packets in 2,700 unrepaired in 2 of 6 runs (92.7–95 % of frames; the
            // retransmission came after the deadline on a machine busy with the whole suite).
            let session = try await ImpairedViewing.start(seed: 10, profile: .init(loss: .uniform(0.10)), playoutDelay: .milliseconds(80))
            let (platform, proxy, stream) = (session.platform, session.proxy, session.stream)
            let sent = try StampTap(encoderOf: session.media)
            let decoded = try StampTap(decoderOf: stream)
            let (renderer, _) = try await watch(stream)
            let audio = try watchAudio(renderer, stream)
            #expect(await eventually(.seconds(30)) { decoded.all.count >= 240 })

            // From the tenth decoded frame (the first keyframe may take a few requests to get through).
            let received = Array(Set(decoded.all.dropFirst(10))).sorted()
            if let first = received.first, let last = received.last {
                let expected = Set(sent.all.filter { $0 >= first && $0 <= last })
                let share = Double(expected.intersection(received).count) / Double(max(expected.count, 1))
                print("10 % loss: \(expected.intersection(received).count) of \(expected.count) frames decoded (\(String(format: "%.1f", share * 100)) %); "
                      + "relay \(platform.relay.statistics()); to the viewer \(proxy.counters(for: .toClient)), from it \(proxy.counters(for: .toServer))")
                // The 98 % goal is a figure of `pcast-bench latency`'s delay × loss table (measured
                // alone). Here, on a machine busy with other suites, 4 packets in 2,700 came too late
                // once (95.0 %); without repair 10 % loss of ~3 packets a frame loses over a
                // quarter of the frames.
                #expect(share >= 0.93, "decoded \(String(format: "%.1f", share * 100)) % of the frames sent")
            } else {
                Issue.record("nothing decoded")
            }
            let statistics = stream.networkStatistics()
            print("10 % loss: \(statistics)")
            let video = try #require(statistics.first { $0.kind == .video })
            // The loss reported is the loss applied (± 3 points); retransmissions repaired nearly all
            // of it (each NACK leaves at once, retried every 10 ms for the 80 ms playout delay;
            // 0–1 packet in 3,300 stayed lost here, 2 % when NACKs waited for RTCP's early slot).
            #expect(abs(video.lossBeforeRepair - 0.10) <= 0.03, "reported \(video.lossBeforeRepair * 100) % before repair")
            #expect(video.nacksSent > 0 && video.packetsReceived > 1000)
            #expect(video.lossAfterRepair < 0.005, "after repair \(video.lossAfterRepair * 100) %")
            #expect(statistics.contains { $0.kind == .audio && $0.packetsReceived > 0 })
            let gap = longestAudioGap(Array(audio.all.dropFirst(25)))
            print("10 % loss: longest audio gap \(gap) over \(audio.all.count) buffers")
            #expect(gap <= .milliseconds(60))
            #expect(proxy.counters(for: .toClient).lost > 0 && proxy.counters(for: .toServer).lost > 0)

            // The RTC stats report says the same: the viewer NACKed, the publisher heard the relay's
            // retransmission requests only for its own leg (clear here), and measured a round trip.
            let inbound = stream.rtcStatsReport().stats.first { $0.type == "inbound-rtp" && $0.kind == "video" }
            print("10 % loss: \(stream.rtcStatsReport().json)")
            #expect((inbound?.nackCount ?? 0) > 0 && (inbound?.framesDecoded ?? 0) > 200 && (inbound?.keyFramesDecoded ?? 0) > 0)
            // Frames are counted as they reach the depayloader; those never decoded are dropped (here
            // mostly before the first keyframe got through whole).
            #expect((inbound?.framesReceived ?? 0) >= (inbound?.framesDecoded ?? .max) && inbound?.framesDropped != nil, "\(String(describing: inbound))")
            let outbound = session.publisher.rtcStatsReport()
            print("10 % loss: \(outbound.json)")
            #expect(outbound.stats.contains { $0.type == "outbound-rtp" && $0.kind == "video" && ($0.packetsSent ?? 0) > 1000 && ($0.keyFramesEncoded ?? 0) > 0 })
            #expect(outbound.stats.contains { $0.type == "remote-inbound-rtp" && $0.kind == "video" && $0.roundTripTime != nil })

            _ = renderer
            await session.stop()
        }
    }
}

extension OneAtATime {
    @Suite("A viewer limits the publisher's bandwidth through the platform", .serialized)
    struct ViewerBandwidthLimitTests {
        @Test("limitBandwidth(300_000) on a subscribed video track holds the publisher under 300 kbit/s ± 15 % (networkLimited for it and the other viewers); releasing it restores the bitrate")
        func viewerLimit() async throws {
            let platform = try await LocalPlatform.start()
            let publisherSDK = PCast(PCastOptions(uri: platform.signalingURL))
            try await publisherSDK.start(authToken: try platform.token(.auth))
            let (publisher, media) = try await publishNoise(publisherSDK, platform)
            let viewer = PCast(PCastOptions(uri: platform.signalingURL))
            try await viewer.start(authToken: try platform.token(.auth))
            let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
            // A second viewer watches the data quality its renderer and the publisher report.
            let watcher = PCast(PCastOptions(uri: platform.signalingURL))
            try await watcher.start(authToken: try platform.token(.auth))
            let watched = try await watcher.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
            let renderer = watched.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            #expect(await renderer.start() == .ok)
            let viewerQuality = Values<DataQualityReason>(), publisherQuality = Values<DataQualityReason>()
            renderer.setDataQualityChangedCallback { _, reason in viewerQuality.append(reason) }
            publisher.setDataQualityChangedCallback { _, reason in publisherQuality.append(reason) }
            let before = try await videoBitrate(publisher, over: 3)
            var limit: Disposable? = stream.getVideoTracks()[0].limitBandwidth(300_000)
            try await Task.sleep(for: .seconds(3))
            let limited = try await videoBitrate(publisher, over: 5)
            print("viewer limit: \(Int(before)) → \(Int(limited)) bit/s")
            #expect(before > 1_000_000)
            #expect(limited <= 300_000 * 1.15, "\(limited) bit/s under a 300 kbit/s viewer limit")
            #expect(publisher.rtcStatsReport().stats.first { $0.type == "outbound-rtp" && $0.kind == "video" }?.targetBitrate == 300_000)
            // The viewers' request holds the publisher down: networkLimited for it and for the other viewer.
            #expect(await eventually(.seconds(10)) { publisherQuality.all.last == .networkLimited && viewerQuality.all.last == .networkLimited },
                    "publisher \(publisherQuality.all), other viewer \(viewerQuality.all)")
            limit?.dispose()
            limit = nil
            try await Task.sleep(for: .seconds(3))
            let released = try await videoBitrate(publisher, over: 3)
            print("viewer limit released: \(Int(released)) bit/s")
            #expect(released > 1_000_000)
            #expect(await eventually(.seconds(10)) { publisherQuality.all.last == DataQualityReason.none && viewerQuality.all.last == DataQualityReason.none },
                    "publisher \(publisherQuality.all), other viewer \(viewerQuality.all)")
            await renderer.stop()
            await watched.stop()
            await watcher.stop()
            await stream.stop()
            await viewer.stop()
            await publisher.stop()
            await publisherSDK.stop()
            await media.stop()
            await platform.shutdown()
        }
    }
}

/// A started renderer (null sinks) of `stream` and the data quality it reports, as "status/reason".
func watchDataQuality(_ stream: MediaStream) async -> (Renderer, Values<String>) {
    let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
    let reports = Values<String>()
    renderer.setDataQualityChangedCallback { status, reason in reports.append("\(status.rawValue)/\(reason.rawValue)") }
    #expect(await renderer.start() == .ok)
    return (renderer, reports)
}

/// The publisher's video bitrate over `seconds`, bits per second.
func videoBitrate(_ publisher: Publisher, over seconds: Double) async throws -> Double {
    let before = publisher.bytesSent(.video) ?? 0
    let start = ContinuousClock.now
    try await Task.sleep(for: .seconds(seconds))
    let elapsed = Double((ContinuousClock.now - start) / .milliseconds(1)) / 1000
    return Double((publisher.bytesSent(.video) ?? 0) - before) * 8 / elapsed
}

extension OneAtATime.NetworkQualityTests {
    @Test("limitBandwidth(200 kbps) holds the published video under it (+15 %); the latest limit wins; releasing restores the configured bitrate")
    func limitBandwidth() async throws {
        let platform = try await LocalPlatform.start()
        let sdk = PCast(PCastOptions(uri: platform.signalingURL))
        try await sdk.start(authToken: try platform.token(.auth))
        let (publisher, media) = try await publishNoise(sdk, platform)
        try await Task.sleep(for: .seconds(2))
        let configured = try await videoBitrate(publisher, over: 3)
        let first = publisher.limitBandwidth(200_000)
        try await Task.sleep(for: .seconds(2))
        let limited = try await videoBitrate(publisher, over: 4)
        let second = publisher.limitBandwidth(400_000)
        first.dispose()  // superseded: no effect
        try await Task.sleep(for: .seconds(2))
        let superseding = try await videoBitrate(publisher, over: 3)
        second.dispose()
        try await Task.sleep(for: .seconds(2))
        let restored = try await videoBitrate(publisher, over: 3)
        print("limitBandwidth: configured \(Int(configured / 1000)) kbps, 200 k limit \(Int(limited / 1000)) kbps, 400 k limit \(Int(superseding / 1000)) kbps, released \(Int(restored / 1000)) kbps")
        #expect(configured > 1_000_000)
        // A cap: at most 15 % over, and the budget used (x264 undershoots a little at this rate: ~167 kbit/s).
        #expect(limited <= 230_000 && limited >= 100_000, "\(limited) bit/s under a 200 kbit/s limit")
        #expect(abs(superseding - 400_000) <= 60_000, "\(superseding) bit/s under a 400 kbit/s limit after releasing the older 200 kbit/s one")
        #expect(restored > 1_000_000, "\(restored) bit/s after the limit was released")
        await publisher.stop()
        await sdk.stop()
        await media.stop()
        await platform.shutdown()
    }
}

extension OneAtATime.NetworkQualityTests {
    @Test("a viewer's data quality: all/none on a clear leg, downloadLimited at 20 % loss while the session survives, noData in an outage, all again after")
    func dataQuality() async throws {
        let session = try await ImpairedViewing.start(seed: 20)
        let (proxy, viewer, stream) = (session.proxy, session.viewer, session.stream)
        let (renderer, reports) = await watchDataQuality(stream)
        #expect(await eventually(.seconds(10)) { reports.all.last == "all/none" }, "\(reports.all)")

        proxy.setProfile(.init(loss: .uniform(0.20)))
        #expect(await eventually(.seconds(10)) { reports.all.last?.hasSuffix("/downloadLimited") == true }, "\(reports.all)")
        #expect(viewer.isOnline && stream.endReason == nil, "the session survives 20 % loss")

        proxy.setOutage(true)
        #expect(await eventually(.seconds(10)) { reports.all.last?.hasPrefix("noData/") == true }, "\(reports.all)")
        proxy.setOutage(false)
        proxy.setProfile(.clear)
        #expect(await eventually(.seconds(15)) { reports.all.last == "all/none" }, "\(reports.all)")
        print("data quality reports: \(reports.all)")
        await renderer.stop()
        await session.stop()
    }
}

extension OneAtATime.NetworkQualityTests {
    @Test("a 500 kbit/s cap on the publisher's leg: the bitrate settles under it within 10 s (data quality all/uploadLimited) and recovers within 45 s after it is lifted")
    func adaptsToACap() async throws {
        let session = try await ImpairedPublishing.start(seed: 30)
        let (proxy, publisher) = (session.proxy, session.publisher)
        let reports = Values<String>()
        publisher.setDataQualityChangedCallback { status, reason in reports.append("\(status.rawValue)/\(reason.rawValue)") }
        // The same reports as a sequence, which ends when the stream does.
        let changes = publisher.dataQualityChanges
        let streamed = Task { await changes.reduce(into: [String]()) { $0.append("\($1.status.rawValue)/\($1.reason.rawValue)") } }
        try await Task.sleep(for: .seconds(2))
        let before = try await videoBitrate(publisher, over: 2)
        #expect(!publisher.isUploadLimited)
        #expect(reports.all == ["all/none"], "\(reports.all)")

        var capped = ImpairmentProfile(bandwidth: 500_000)
        capped.queueLimit = .milliseconds(100)
        proxy.setProfile(capped, for: .toServer)
        try await Task.sleep(for: .seconds(8))
        let settled = try await videoBitrate(publisher, over: 2)
        #expect(settled <= 550_000, "\(settled) bit/s 10 s into a 500 kbit/s cap")
        #expect(publisher.isUploadLimited)
        #expect(reports.all.last == "all/uploadLimited", "\(reports.all)")

        proxy.setProfile(.clear, for: .toServer)
        let recovered = try await session.recoveredBitrate()
        print("adaptation: before \(Int(before / 1000)) kbps, capped \(Int(settled / 1000)) kbps, recovered \(Int(recovered / 1000)) kbps; estimate \(publisher.estimatedVideoBitrate ?? 0)")
        #expect(recovered >= 1_200_000, "\(recovered) bit/s 45 s after the cap was lifted")
        await session.stop()
        #expect(await streamed.value == reports.all)
    }
}

extension OneAtATime.NetworkQualityTests {
    @Test("audio-only fallback: a viewer whose leg cannot carry the video (a 200 kbit/s cap) gets the audio alone (audioOnly/downloadLimited) while another viewer keeps the video; once the cap is lifted a probe brings the video back (all/none)")
    func audioOnlyFallback() async throws {
        let session = try await ImpairedViewing.start(seed: 40)
        let (platform, proxy, stream) = (session.platform, session.proxy, session.stream)
        let (renderer, reports) = await watchDataQuality(stream)
        let frames = Atomic<Int>(0)
        try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { _ in frames.add(1, ordering: .relaxed) }
        // A second viewer on a clear leg, straight to the relay.
        let clear = try await session.publisherSDK.subscribe(streamToken: try platform.token(.stream, originStreamId: session.publisher.streamId))
        let (clearRenderer, clearFrames) = try await watch(clear)
        #expect(await eventually(.seconds(10)) { reports.all.last == "all/none" }, "\(reports.all)")

        var capped = ImpairmentProfile(bandwidth: 200_000)
        capped.queueLimit = .milliseconds(100)
        proxy.setProfile(capped, for: .toClient)
        let cappedAt = ContinuousClock.now
        #expect(await eventually(.seconds(15)) { stream.isVideoSuspended }, "the relay never held the video back: \(platform.relay.statistics())")
        let suspendedAfter = ContinuousClock.now - cappedAt
        #expect(await eventually(.seconds(10)) { reports.all.last == "audioOnly/downloadLimited" }, "\(reports.all)")
        // While held back, the audio alone fits the leg: it keeps arriving, with little loss.
        let audioBefore = try #require(stream.networkStatistics().first { $0.kind == .audio })
        let framesBefore = frames.load(ordering: .relaxed)
        let clearBefore = clearFrames.all.count
        try await Task.sleep(for: .seconds(2))
        let audioAfter = try #require(stream.networkStatistics().first { $0.kind == .audio })
        let audioPackets = audioAfter.packetsReceived - audioBefore.packetsReceived
        print("fallback: video suspended \(suspendedAfter) after the cap; in 2 s audio-only: \(audioPackets) audio packets, "
              + "\(frames.load(ordering: .relaxed) - framesBefore) video frames; the clear viewer \(clearFrames.all.count - clearBefore) frames; relay \(platform.relay.statistics())")
        #expect(audioPackets >= 100, "\(audioPackets) audio packets in 2 s while the video was held back")
        #expect(clearFrames.all.count - clearBefore >= 40, "the clear viewer kept its video")
        #expect(session.viewer.isOnline && stream.endReason == nil)
        // A probe under the cap floods the leg again: it fails, and the video stays held back.
        #expect(await eventually(.seconds(15)) { platform.relay.statistics().videoProbes >= 1 }, "no probe: \(platform.relay.statistics())")
        try await Task.sleep(for: .seconds(4))
        #expect(stream.isVideoSuspended && platform.relay.statistics().videoResumptions == 0, "a probe under the cap resumed the video")

        proxy.setProfile(.clear, for: .toClient)
        let liftedAt = ContinuousClock.now
        #expect(await eventually(.seconds(40)) { !stream.isVideoSuspended }, "the video never came back: \(platform.relay.statistics())")
        let resumedAfter = ContinuousClock.now - liftedAt
        #expect(await eventually(.seconds(10)) { reports.all.last == "all/none" }, "\(reports.all)")
        let resumedFrames = frames.load(ordering: .relaxed)
        try await Task.sleep(for: .seconds(1))
        #expect(frames.load(ordering: .relaxed) - resumedFrames >= 15, "video frames are decoded again")
        let statistics = platform.relay.statistics()
        print("fallback: video back \(resumedAfter) after the cap was lifted; reports \(reports.all); relay \(statistics)")
        #expect(statistics.videoSuspensions >= 1 && statistics.videoResumptions >= 1 && statistics.videoProbes >= 1)

        await clearRenderer.stop()
        await clear.stop()
        await renderer.stop()
        await session.stop()
    }
}

extension OneAtATime.NetworkQualityTests {
    @Test("a 500 kbit/s cap with a deep (1 s) queue on the publisher's leg: the relay's delay-based estimate (REMB) finds it before the queue overflows; the bitrate settles under it with a short queue, and recovers within 45 s once it is lifted")
    func rembFindsABloatedCap() async throws {
        let session = try await ImpairedPublishing.start(seed: 50)
        let (platform, proxy, publisher) = (session.platform, session.proxy, session.publisher)
        try await Task.sleep(for: .seconds(2))
        #expect(publisher.remoteEstimate == nil, "no limit shown yet: \(String(describing: publisher.remoteEstimate))")

        var capped = ImpairmentProfile(bandwidth: 500_000)
        capped.queueLimit = .seconds(1)
        proxy.setProfile(capped, for: .toServer)
        #expect(await eventually(.seconds(10)) { (publisher.remoteEstimate ?? .max) <= 550_000 }, "REMB: \(String(describing: publisher.remoteEstimate))")
        try await Task.sleep(for: .seconds(4))
        let settled = try await videoBitrate(publisher, over: 3)
        let lostWhileCapped = proxy.counters(for: .toServer).lost
        @Sendable func roundTrip() -> Double? {
            publisher.rtcStatsReport().stats.first { $0.type == "remote-inbound-rtp" && $0.kind == "video" }?.roundTripTime
        }
        // What queued while the estimate found the cap drains (the bitrate is under the link's).
        let drained = await eventually(.seconds(20)) { (roundTrip() ?? 1) < 0.3 }
        let roundTripAfter = roundTrip()
        print("REMB: settled at \(Int(settled / 1000)) kbps under a 500 kbit/s cap with a 1 s queue; REMB \(publisher.remoteEstimate ?? 0); "
              + "round trip \(roundTripAfter.map { String(format: "%.0f ms", $0 * 1000) } ?? "?"); \(lostWhileCapped) packets dropped by the queue; relay \(platform.relay.statistics())")
        #expect(settled <= 550_000, "\(settled) bit/s")
        #expect(publisher.isUploadLimited)
        #expect(drained, "the queue held \(String(describing: roundTripAfter)) s of round trip")
        #expect(platform.relay.statistics().rembsSent > 0)

        proxy.setProfile(.clear, for: .toServer)
        let recovered = try await session.recoveredBitrate()
        print("REMB: recovered to \(Int(recovered / 1000)) kbps; REMB \(String(describing: publisher.remoteEstimate))")
        #expect(recovered >= 1_200_000, "\(recovered) bit/s 45 s after the cap was lifted")
        await session.stop()
    }
}

extension OneAtATime.NetworkQualityTests {
    @Test("5 % uniform loss on the publisher's leg (both ways): the relay asks the publisher for each gap once its reordering allowance passed, the SDK publisher resends from what it sent, and a viewer on a clear leg is shown ≥ 99 % of the frames with no freeze over 300 ms")
    func publisherLegLossIsRepaired() async throws {
        let media = try await stampedMedia(audio: false)
        let meter = StreamMeter()
        try meter.stamp(media)
        let session = try await ImpairedPublishing.start(seed: 41, publishing: media)
        let (platform, proxy, publisher) = (session.platform, session.proxy, session.publisher)
        let viewer = PCast(PCastOptions(uri: platform.signalingURL, playoutDelay: .milliseconds(80)))
        try await viewer.start(authToken: try platform.token(.auth))
        let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
        let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        _ = await renderer.start()
        try meter.watch(renderer, of: stream)
        try await Task.sleep(for: .seconds(1))
        proxy.setProfile(ImpairmentProfile(loss: .uniform(0.05)))
        let before = platform.relay.statistics()
        _ = meter.take()
        try await Task.sleep(for: .seconds(8))
        let shown = meter.take()
        let after = platform.relay.statistics()
        let lost = proxy.counters(for: .toServer).lost
        let delivered = shown.deliveredPercent / 100
        #expect(lost > 20, "the proxy lost only \(lost) of the publisher's packets")
        #expect(after.gapRequests - before.gapRequests > 0, "the relay asked the publisher for no gap")
        let asked = publisher.rtcStatsReport().stats.first { $0.type == "outbound-rtp" && $0.kind == "video" }?.nackCount ?? 0
        #expect(asked > 0, "the publisher heard no retransmission request")
        #expect(publisher.retransmittedPacketsSent > 0, "the publisher sent nothing again")
        #expect(delivered >= 0.99, "\(shown.frames) of \(shown.captured) frames shown, \(lost) packets lost on the publisher's leg; the relay asked \(after.gapRequests - before.gapRequests), passed on \(after.nacksForwarded - before.nacksForwarded) of the viewer's; freezes \(shown.freezeMilliseconds) ms, longest \(shown.longestFreezeMilliseconds) ms, \(shown.missing) missing")
        #expect(shown.longestFreezeMilliseconds < 300, "longest freeze \(shown.longestFreezeMilliseconds) ms")
        await renderer.stop()
        await stream.stop()
        await viewer.stop()
        await session.stop()
    }
}
