import Foundation
import Testing
import GStreamer
@testable import PCast
import PCastImpairment
import PCastMedia
import PCastNode
import PCastProtocol
import PCastTestSupport
import Synchronization

/// A stamped 1280×720 test pattern (the simulcast's best layer is its full size).
func stampedHDMedia() async throws -> UserMediaStream {
    try await stampedMedia(width: 1280, height: 720)
}

/// The share of the frames sent between the first and last of `received` that were received.
func deliveredShare(_ received: [UInt32], sent: [UInt32]) -> Double {
    guard let first = received.first, let last = received.last else { return 0 }
    let expected = sent.filter { $0 >= first && $0 <= last }.count
    return expected == 0 ? 0 : Double(Set(received).count) / Double(expected)
}

extension OneAtATime.NetworkQualityTests {
    @Test("simulcast (multi-bitrate): a viewer on a 500 kbit/s-capped leg gets the 640×360 layer with at least 98 % of its frames while a viewer on a clear leg keeps 1280×720; lifting the cap brings the first back to 1280×720 within 10 s; across the switches every frame reads whole and in order")
    func simulcastFollowsEachViewersLink() async throws {
        let platform = try await LocalPlatform.start()
        let proxy = try UDPImpairmentProxy(server: "127.0.0.1", serverPort: Int(platform.relay.mediaPort), seed: 60)
        let capped = ImpairmentProfile(bandwidth: 500_000)   // a 250 ms queue
        proxy.setProfile(capped, for: .toClient)

        let publisherSDK = PCast(PCastOptions(uri: platform.signalingURL))
        try await publisherSDK.start(authToken: try platform.token(.auth))
        let media = try await stampedHDMedia()
        let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish, capabilities: ["multi-bitrate"]), mediaStream: media)
        #expect(publisher.tracks.compactMap(\.layer) == [
            SimulcastLayer(rid: "h", width: 1280, height: 720, bitrate: 2_500_000),
            SimulcastLayer(rid: "m", width: 640, height: 360, bitrate: 300_000),
            SimulcastLayer(rid: "l", width: 320, height: 180, bitrate: 150_000),
        ])
        let sent = try StampTap(captureOf: media)

        let token = try platform.token(.stream, originStreamId: publisher.streamId)
        // A leg that just carries its layer queues each keyframe for up to the layer's VBV window
        // (200 ms): its viewer plays out that much later, or those frames come too late (measured
        // at the default 40 ms: 77–84 % of frames).
        var cappedOptions = PCastOptions(uri: platform.signalingURL, playoutDelay: .milliseconds(200))
        cappedOptions.mediaRelay = MediaRelayAddress(host: "127.0.0.1", port: UInt16(proxy.port))
        let cappedSDK = PCast(cappedOptions)
        try await cappedSDK.start(authToken: try platform.token(.auth))
        let cappedStream = try await cappedSDK.subscribe(streamToken: token)
        #expect(cappedStream.getVideoTracks().count == 1, "the layers reach a viewer as one video track")
        let cappedFrames = try StampTap(decoderOf: cappedStream, paintedWidth: 1280)
        let (qualityRenderer, quality) = await watchDataQuality(cappedStream)
        let clearSDK = PCast(PCastOptions(uri: platform.signalingURL))
        try await clearSDK.start(authToken: try platform.token(.auth))
        let clearStream = try await clearSDK.subscribe(streamToken: token)
        let clearFrames = try StampTap(decoderOf: clearStream, paintedWidth: 1280)
        // A thumbnail: kept on the lowest layer whatever its link.
        let thumbnail = try await clearSDK.subscribe(streamToken: token, layer: .lowest)
        let thumbnailFrames = try StampTap(decoderOf: thumbnail, paintedWidth: 1280)

        // Settled: the clear viewer on the best layer, the capped one on the middle layer.
        #expect(await eventually(.seconds(10)) { clearFrames.widths.all.last == 1280 }, "clear viewer: \(clearFrames.widths.all)")
        try await Task.sleep(for: .seconds(4))
        #expect(cappedFrames.widths.all.last == 640, "capped viewer: \(cappedFrames.widths.all)")
        #expect(await eventually(.seconds(5)) { quality.all.last == "all/downloadLimited" }, "the capped viewer's data quality: \(quality.all)")
        let cappedStart = cappedFrames.all.count, clearStart = clearFrames.all.count
        try await Task.sleep(for: .seconds(10))
        let cappedWindow = Array(cappedFrames.all.dropFirst(cappedStart)), clearWindow = Array(clearFrames.all.dropFirst(clearStart))
        let cappedShare = deliveredShare(cappedWindow, sent: sent.all), clearShare = deliveredShare(clearWindow, sent: sent.all)
        print("simulcast: over 10 s capped at 500 kbit/s the viewer decoded \(cappedWindow.count) frames (\(cappedShare * 100) %) at \(cappedFrames.widths.all); "
              + "the clear viewer \(clearWindow.count) (\(clearShare * 100) %) at \(clearFrames.widths.all); capped leg \(proxy.counters(for: .toClient)); relay \(platform.relay.statistics())")
        #expect(cappedShare >= 0.98, "capped viewer: \(cappedShare)")
        #expect(cappedFrames.widths.all.last == 640, "capped viewer: \(cappedFrames.widths.all)")
        #expect(clearShare >= 0.98, "clear viewer: \(clearShare)")
        #expect(clearFrames.widths.all.last == 1280, "clear viewer: \(clearFrames.widths.all)")
        #expect(thumbnailFrames.widths.all == [320] && thumbnailFrames.all.count >= 200, "thumbnail: \(thumbnailFrames.widths.all), \(thumbnailFrames.all.count) frames")

        proxy.setProfile(.clear, for: .toClient)
        let lifted = ContinuousClock.now
        #expect(await eventually(.seconds(10)) { cappedFrames.widths.all.last == 1280 }, "after the cap: \(cappedFrames.widths.all)")
        print("simulcast: back on 1280×720 \(ContinuousClock.now - lifted) after the cap was lifted; relay \(platform.relay.statistics())")
        #expect(await eventually(.seconds(5)) { quality.all.last == "all/none" }, "the capped viewer's data quality: \(quality.all)")
        try await Task.sleep(for: .seconds(1))

        // Every frame of both viewers read whole and in order through every switch. Moving up, the
        // better layer's keyframe may be of the instant the smaller layer just showed (it is
        // encoded later): that instant is shown again, sharper, and never anything older.
        for (name, tap) in [("capped", cappedFrames), ("clear", clearFrames)] {
            let values = tap.all, widths = tap.frameWidths.all
            #expect(tap.unreadable.count == 0, "\(name): \(tap.unreadable.count) frames with a damaged stamp, the first after \(tap.unreadableAt.all) of \(values.count) read")
            let steps = zip(values.indices, values.indices.dropFirst()).filter { values[$0] >= values[$1] }
            let allowed = steps.filter { values[$0] == values[$1] && widths[$0] < widths[$1] }
            #expect(steps.count == allowed.count, "\(name): out of order at \(steps.map { (values[$0], values[$1], widths[$0], widths[$1]) })")
        }
        #expect(platform.relay.statistics().layerSwitches >= 2)
        #expect(publisher.tracks.count == 3)

        await qualityRenderer.stop()
        await thumbnail.stop()
        await cappedStream.stop()
        await clearStream.stop()
        await cappedSDK.stop()
        await clearSDK.stop()
        await publisher.stop()
        await publisherSDK.stop()
        await media.stop()
        proxy.stop()
        await platform.shutdown()
    }
}

extension OneAtATime.NetworkQualityTests {
    @Test("simulcast layers nobody watches stop being encoded: with one viewer on the best layer the smallest rests; a viewer of the smallest wakes it and decodes it; once that viewer leaves it rests again")
    func unwatchedLayersRest() async throws {
        let platform = try await LocalPlatform.start { $0.unwatchedLayerRest = 2 }
        let sdk = PCast(PCastOptions(uri: platform.signalingURL))
        try await sdk.start(authToken: try platform.token(.auth))
        let media = try await stampedHDMedia()
        let publisher = try await sdk.publish(streamToken: try platform.token(.publish, capabilities: ["multi-bitrate"]), mediaStream: media)
        #expect(publisher.encodedLayers == ["h", "m", "l"])
        let token = try platform.token(.stream, originStreamId: publisher.streamId)
        let best = try await sdk.subscribe(streamToken: token, layer: .best)
        let bestFrames = try StampTap(decoderOf: best, paintedWidth: 1280)
        #expect(await eventually(.seconds(8)) { publisher.encodedLayers == ["h", "m"] }, "\(publisher.encodedLayers)")
        let keyframesBefore = platform.relay.statistics().keyframeRequests

        let thumbnail = try await sdk.subscribe(streamToken: token, layer: .lowest)
        let thumbnailFrames = try StampTap(decoderOf: thumbnail, paintedWidth: 1280)
        let asked = ContinuousClock.now
        #expect(await eventually(.seconds(5)) { thumbnailFrames.all.count >= 30 }, "the rested layer woke: \(thumbnailFrames.all.count) frames")
        print("simulcast: a rested layer's first viewer decoded 30 frames \(ContinuousClock.now - asked) after subscribing; relay asked \(platform.relay.statistics().keyframeRequests - keyframesBefore) keyframes")
        #expect(publisher.encodedLayers == ["h", "m", "l"])
        #expect(thumbnailFrames.widths.all == [320])
        await thumbnail.stop()
        #expect(await eventually(.seconds(8)) { publisher.encodedLayers == ["h", "m"] }, "\(publisher.encodedLayers)")
        #expect(bestFrames.widths.all.last == 1280 && bestFrames.unreadable.count == 0, "\(bestFrames.widths.all), unreadable after \(bestFrames.unreadableAt.all)")

        await best.stop()
        await publisher.stop()
        await sdk.stop()
        await media.stop()
        await platform.shutdown()
    }
}

extension OneAtATime.NetworkQualityTests {
    @Test("a simulcast viewer whose renderer shows the video at 320×180 is sent the 320×180 layer on a roomy link; a renderer at the video's own size brings it to 1280×720; the stream's viewSize follows its renderers")
    func renderersSizeChooseTheLayer() async throws {
        let platform = try await LocalPlatform.start()
        let sdk = PCast(PCastOptions(uri: platform.signalingURL))
        try await sdk.start(authToken: try platform.token(.auth))
        let media = try await stampedHDMedia()
        let publisher = try await sdk.publish(streamToken: try platform.token(.publish, capabilities: ["multi-bitrate"]), mediaStream: media)
        let stream = try await sdk.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
        let frames = try StampTap(decoderOf: stream, paintedWidth: 1280)
        #expect(stream.viewSize == nil)

        let thumbnail = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true,
                                                              displaySize: Dimensions(width: 320, height: 180)))
        #expect(await thumbnail.start() == .ok)
        #expect(stream.viewSize == Dimensions(width: 320, height: 180))
        #expect(await eventually(.seconds(10)) { frames.frameWidths.all.suffix(30).count == 30 && frames.frameWidths.all.suffix(30).allSatisfy { $0 == 320 } },
                "the 320×180 view is sent the smallest layer: \(frames.widths.all)")
        // Its link is roomy: it stays there only because of its view, which is no reduction.
        #expect(!stream.isLayerReduced)

        let full = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        #expect(await full.start() == .ok)
        #expect(stream.viewSize == nil, "a renderer at the video's own size lifts the cap")
        let lifted = ContinuousClock.now
        #expect(await eventually(.seconds(10)) { frames.widths.all.last == 1280 }, "\(frames.widths.all)")
        print("simulcast: a renderer at full size brought 1280×720 after \(ContinuousClock.now - lifted)")
        await full.stop()
        #expect(stream.viewSize == Dimensions(width: 320, height: 180))
        #expect(await eventually(.seconds(10)) { frames.widths.all.last == 320 }, "back to the view's layer: \(frames.widths.all)")
        #expect(frames.unreadable.count == 0, "every frame across the switches read whole: \(frames.unreadable.count) unreadable, the first after \(frames.unreadableAt.all)")

        await thumbnail.stop()
        await stream.stop()
        await publisher.stop()
        await sdk.stop()
        await media.stop()
        await platform.shutdown()
    }
}
