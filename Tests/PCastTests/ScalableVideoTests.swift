import Foundation
import PCast
import PCastMedia
import PCastNode
import PCastTestSupport
import Synchronization
import Testing

/// The frames one viewer's frame-ready hook saw: when, and at what size.
private final class FrameLog: Sendable {
    private let frames = Mutex<[(at: ContinuousClock.Instant, width: Int, height: Int)]>([])
    func add(_ frame: VideoFrame) { frames.withLock { $0.append((.now, frame.width, frame.height)) } }
    /// The frames since `start`: how many a second, and the sizes seen.
    func since(_ start: ContinuousClock.Instant) -> (perSecond: Double, sizes: Set<String>) {
        let recent = frames.withLock { $0.filter { $0.at >= start } }
        let seconds = Double((ContinuousClock.now - start).components.seconds) + Double((ContinuousClock.now - start).components.attoseconds) / 1e18
        return (Double(recent.count) / max(seconds, 0.001), Set(recent.map { "\($0.width)×\($0.height)" }))
    }
}

extension OneAtATime {
    @Suite("Scalable video (SVC) through the relay: each viewer gets the layers it has room for", .serialized)
    struct ScalableVideoTests {
        struct Case: Sendable, CustomTestStringConvertible {
            let codec: String
            let layers: String
            /// The top layer's picture and what a capped viewer's shows instead (VP9's spatial
            /// layers), or the frame rate it drops to (AV1's temporal layers).
            let top: String
            let spatial: Bool
            var testDescription: String { "\(codec) \(layers)" }
        }

        /// The width × height of the MP4's video sample entry (`vp09` or `av01`: a visual sample
        /// entry's size sits 24 bytes into its body).
        static func sampleEntrySize(_ path: String, codec: String) throws -> String {
            let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
            let tag = Array((codec == "vp9" ? "vp09" : "av01").utf8)
            guard let at = bytes.indices.dropLast(40).first(where: { Array(bytes[$0..<($0 + 4)]) == tag }) else { return "no \(codec) sample entry" }
            let body = at + 4
            return "\(Int(bytes[body + 24]) << 8 | Int(bytes[body + 25]))×\(Int(bytes[body + 26]) << 8 | Int(bytes[body + 27]))"
        }

        @Test("headless Chromium publishes VP9 L3T3_KEY or AV1 L1T3 by WHIP; of two SDK viewers, the one capped at 300 kbit/s is sent lower layers (VP9: a smaller picture at the full frame rate; AV1: a quarter or half of the frames) and decodes every frame it is sent (no frame dropped undecoded, no keyframe asked for a decoding error), and is back on the top layer within 10 s of its cap lifted, while the uncapped viewer keeps the top layer throughout; Chromium watching the same stream by WHEP decodes it, and a recording of it is an MP4 whose sample entry states the top layer's size and whose frames ffmpeg decodes without an error, at that size but for a keyframe picture's smaller layers",
              .timeLimit(.minutes(3)),
              arguments: [Case(codec: "vp9", layers: "L3T3_KEY", top: "960×540", spatial: true),
                          Case(codec: "av1", layers: "L1T3", top: "640×480", spatial: false)])
        func cappedViewerGetsLowerLayers(_ scenario: Case) async throws {
            let platform = try await LocalPlatform.start()
            let alias = "svc-\(scenario.codec)"
            let collector = try ReportCollector()
            defer { collector.close() }
            let browser = try HeadlessChromium.open(try publishAndWatchPage(platform, alias: alias, codec: scenario.codec, layers: scenario.layers,
                                                                             report: collector.url))
            defer { browser.close() }
            try await eventually("Chromium encoding \(scenario.codec) in \(scenario.layers)", within: .seconds(30)) {
                collector.latest("publish").map { $0.string("scalabilityMode") == scenario.layers && $0.number("framesEncoded") >= 30 } ?? false
            }
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            var viewers: [(stream: MediaStream, renderer: Renderer, log: FrameLog)] = []
            for _ in 0..<2 {
                let stream = try await subscribeToChannel(sdk, platform, alias: alias)
                let log = FrameLog()
                let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
                #expect(await renderer.start() == .ok)
                try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
                    if case .video(let frame)? = try? notification.read() { log.add(frame) }
                }
                viewers.append((stream, renderer, log))
            }
            let logs = viewers.map(\.log)
            let (uncapped, capped) = (viewers[0], viewers[1])
            // Chromium's estimate climbs until every layer flows.
            let warmed = ContinuousClock.now
            // The publisher's frame rate (Chromium's fake camera: 20 frames/s) is the top layer's.
            let fullRate: @Sendable () -> Double = { 0.8 * (collector.latest("publish")?.number("framesPerSecond") ?? 30) }
            let settled = await eventually(.seconds(45)) {
                let start = ContinuousClock.now - .seconds(2)
                guard start > warmed else { return false }
                return logs.allSatisfy { log in
                    let seen = log.since(start)
                    return seen.sizes == [scenario.top] && seen.perSecond >= fullRate()
                }
            }
            try #require(settled, "both viewers on the top layer (\(scenario.top), at 80 % of the publisher's frame rate or more): \(logs.map { $0.since(.now - .seconds(2)) }), publisher \(String(describing: collector.latest("publish"))), relay \(platform.relay.statistics())")
            // A recording takes the layers as the top viewer does: an MP4 ffmpeg decodes whole.
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-svc-\(scenario.codec)-\(UUID().uuidString).mp4").path
            defer { try? FileManager.default.removeItem(atPath: path) }
            let recording = try await sdk.record(streamToken: try platform.token(.stream, tag: .channelAlias(alias)), to: path)
            try await Task.sleep(for: .seconds(4))
            let summary = await recording.stop()
            #expect(summary.failure == nil && summary.fragments >= 1, "\(summary)")
            // Its sample entry states the top layer's size; ffmpeg decodes every frame without an error
            // (each layer of a picture, a superframe, as a frame of its own: all of libvpx's layer
            // frames are shown frames; k-SVC's smaller layers come with keyframes only).
            let probe = try runTool("ffprobe", ["-v", "error", "-select_streams", "v", "-show_frames", "-show_entries", "frame=width,height",
                                                "-of", "csv=p=0", path])
            let sizes = probe.output.split(separator: "\n").map { $0.replacingOccurrences(of: ",", with: "×") }
            let top = sizes.filter { $0 == scenario.top }.count
            #expect(probe.status == 0 && Double(top) >= 3 * fullRate() && sizes.count - top <= top / 10,
                    "\(top) frames of \(sizes.count) at \(scenario.top): \(Set(sizes))")
            #expect(try Self.sampleEntrySize(path, codec: scenario.codec) == scenario.top)
            let decode = try runTool("ffmpeg", ["-hide_banner", "-v", "error", "-i", path, "-map", "0:v:0", "-f", "framecrc", "-"])
            #expect(decode.status == 0 && !decode.output.contains("rror"), "ffmpeg: \(decode.output.suffix(1_000))")

            func videoStats(_ stream: MediaStream) throws -> RTCStats {
                try #require(stream.rtcStatsReport().stats.first { $0.type == "inbound-rtp" && $0.kind == "video" })
            }
            let before = try videoStats(capped.stream)
            var limit: Disposable? = capped.stream.getVideoTracks()[0].limitBandwidth(300_000)
            try await Task.sleep(for: .seconds(4))
            let cappedWindow = ContinuousClock.now
            try await Task.sleep(for: .seconds(4))
            let lowered = capped.log.since(cappedWindow)
            let kept = uncapped.log.since(cappedWindow)
            if scenario.spatial {
                #expect(!lowered.sizes.isEmpty && !lowered.sizes.contains(scenario.top), "capped viewer: \(lowered)")
                #expect(lowered.perSecond >= fullRate(), "capped viewer: \(lowered)")
            } else {
                // Its base layer alone (a quarter of the frames) or with the middle one (half).
                #expect(lowered.sizes == [scenario.top] && lowered.perSecond <= 0.6 * fullRate() / 0.8 && lowered.perSecond >= 0.2 * fullRate() / 0.8,
                        "capped viewer: \(lowered)")
            }
            #expect(kept.sizes == [scenario.top] && kept.perSecond >= fullRate(), "uncapped viewer: \(kept)")
            let after = try videoStats(capped.stream)
            let decoded = (after.framesDecoded ?? 0) - (before.framesDecoded ?? 0)
            let received = (after.framesReceived ?? 0) - (before.framesReceived ?? 0)
            #expect(decoded > 0 && received - decoded <= 2, "capped viewer: \(received) frames received, \(decoded) decoded")
            #expect((after.framesDropped ?? 0) - (before.framesDropped ?? 0) <= 2 && after.pliCount == before.pliCount,
                    "capped viewer dropped \((after.framesDropped ?? 0) - (before.framesDropped ?? 0)) frames, asked \((after.pliCount ?? 0) - (before.pliCount ?? 0)) keyframes")
            _ = limit
            limit = nil
            let lifted = ContinuousClock.now
            try await eventually("the capped viewer back on the top layer within 10 s of its cap lifted", within: .seconds(10)) {
                let start = ContinuousClock.now - .seconds(1)
                guard start > lifted else { return false }
                let seen = capped.log.since(start)
                return seen.sizes == [scenario.top] && seen.perSecond >= fullRate()
            }
            let statistics = platform.relay.statistics()
            #expect(statistics.layerSwitches >= 2 && statistics.srtpFailures == 0, "\(statistics)")
            #expect(collector.reports("publish").allSatisfy { $0["error"] == nil } && collector.reports("watch").allSatisfy { $0["error"] == nil })
            // Chromium watching by WHEP is sent the layers its estimate allows, and decodes them.
            let watched = try #require(collector.latest("watch"))
            #expect(watched.number("framesDecoded") >= 100 && watched.string("codec").lowercased() == "video/\(scenario.codec)", "\(watched)")
            for viewer in viewers {
                await viewer.renderer.stop()
                await viewer.stream.stop()
            }
            await sdk.stop()
            await platform.shutdown()
        }
    }
}
