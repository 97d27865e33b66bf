import Foundation
import PCast
import PCastImpairment
import PCastMedia
import PCastNode
import Synchronization

/// Simulcast through the embedded platform, from a 1280×720 30 fps test pattern:
/// - what the three layers cost the publisher: the process's CPU while publishing with one
///   encoding, with `multi-bitrate` and every layer encoded, and with `multi-bitrate` once the
///   layers nobody watches rested (no viewers: the starting layer alone), the same source, in the
///   same run;
/// - how long a viewer takes to change layer when its leg is capped at 500 kbit/s (down to
///   640×360) and when the cap is lifted (back to 1280×720), measured at the renderer: from the
///   moment the proxy changes to the first frame of the new size presented; and what share of the
///   captured frames the capped viewer and a viewer on a clear leg were shown meanwhile.
public struct SimulcastBenchmark {
    public struct Result: Codable, Sendable {
        public let seconds: Double
        public let oneLayerCPU: Double
        public let threeLayerCPU: Double
        public let cpuRatio: Double
        /// Three layers announced, nobody watching: the platform rested all but the middle one.
        public let restedCPU: Double
        public let switches: Int
        public let downMilliseconds: [Double]
        public let upMilliseconds: [Double]
        public let downP50Milliseconds: Double
        public let upP50Milliseconds: Double
        public let cappedDeliveredPercent: Double
        public let clearDeliveredPercent: Double
        public let playoutDelayMilliseconds: Int
    }

    public var seconds: Double = 8
    public var switches = 3
    /// The capped viewer's playout delay: a leg that just carries its layer queues each keyframe
    /// for up to the layer's 200 ms VBV window.
    public var playoutDelay: Duration = .milliseconds(200)

    public func run() async throws -> Result {
        let one = try await publisherCPU(simulcast: false, rest: nil)
        let three = try await publisherCPU(simulcast: true, rest: nil)
        let rested = try await publisherCPU(simulcast: true, rest: 1)
        let (down, up, capped, clear) = try await switchTimes()
        func p50(_ values: [Double]) -> Double { values.isEmpty ? 0 : values.sorted()[values.count / 2] }
        return Result(seconds: seconds, oneLayerCPU: one, threeLayerCPU: three, cpuRatio: one > 0 ? three / one : 0, restedCPU: rested, switches: switches,
                      downMilliseconds: down, upMilliseconds: up, downP50Milliseconds: p50(down), upP50Milliseconds: p50(up),
                      cappedDeliveredPercent: capped, clearDeliveredPercent: clear,
                      playoutDelayMilliseconds: Int(playoutDelay / .milliseconds(1)))
    }

    /// The process's CPU (fraction of one core) while one publisher sends, after 3 s of settling;
    /// `rest`: the platform's unwatched-layer rest (nil: every layer encoded).
    private func publisherCPU(simulcast: Bool, rest: TimeInterval?) async throws -> Double {
        let platform = try await LocalPlatform.start { $0.unwatchedLayerRest = rest }
        let sdk = PCast(PCastOptions(uri: platform.signalingURL))
        try await sdk.start(authToken: try platform.token(.auth))
        let media = try await sdk.getUserMedia(.synthetic(width: 1280, height: 720, audio: false))
        let publisher = try await sdk.publish(streamToken: try platform.token(.publish, capabilities: simulcast ? ["multi-bitrate"] : []), mediaStream: media)
        try await Task.sleep(for: .seconds(3))
        if simulcast, rest != nil, publisher.encodedLayers != ["m"] { throw BenchFailure("unwatched layers did not rest: \(publisher.encodedLayers)") }
        let before = CaptureEncodeBenchmark.processCPUSeconds(), start = ContinuousClock.now
        try await Task.sleep(for: .seconds(seconds))
        let cpu = CaptureEncodeBenchmark.processCPUSeconds() - before
        let elapsed = Double((ContinuousClock.now - start) / .microseconds(1)) / 1e6
        await publisher.stop()
        await sdk.stop()
        await media.stop()
        await platform.shutdown()
        return cpu / elapsed
    }

    /// Frame widths presented by a renderer, with when, and frames counted while measuring.
    public final class Presented: Sendable {
        public let widths = Mutex<[(Int, ContinuousClock.Instant)]>([])
        public let frames = Atomic<Int>(0)
        public let counting = Atomic<Bool>(false)

        public var latestWidth: Int? { widths.withLock { $0.last?.0 } }

        /// When the first frame of `width` was presented after `instant`.
        public func first(_ width: Int, after instant: ContinuousClock.Instant) -> ContinuousClock.Instant? {
            widths.withLock { $0.first { $0.0 == width && $0.1 >= instant }?.1 }
        }
    }

    private func watch(_ stream: MediaStream) async throws -> (Renderer, Presented) {
        let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        guard await renderer.start() == .ok else { throw BenchFailure("the renderer did not start") }
        let presented = Presented()
        try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
            guard case .video(let frame)? = try? notification.read() else { return }
            if presented.counting.load(ordering: .relaxed) { presented.frames.add(1, ordering: .relaxed) }
            presented.widths.withLock { widths in
                if widths.last?.0 != frame.width { widths.append((frame.width, .now)) }
            }
        }
        return (renderer, presented)
    }

    private func switchTimes() async throws -> (down: [Double], up: [Double], capped: Double, clear: Double) {
        let platform = try await LocalPlatform.start()
        let proxy = try UDPImpairmentProxy(server: "127.0.0.1", serverPort: Int(platform.relay.mediaPort), seed: 7)
        let sdk = PCast(PCastOptions(uri: platform.signalingURL))
        try await sdk.start(authToken: try platform.token(.auth))
        let media = try await sdk.getUserMedia(.synthetic(width: 1280, height: 720, audio: false))
        let captured = Atomic<Int>(0), counting = Atomic<Bool>(false)
        try media.setFrameReadyCallback(media.mediaStream.getVideoTracks()[0]) { _ in
            if counting.load(ordering: .relaxed) { captured.add(1, ordering: .relaxed) }
        }
        let publisher = try await sdk.publish(streamToken: try platform.token(.publish, capabilities: ["multi-bitrate"]), mediaStream: media)
        let token = try platform.token(.stream, originStreamId: publisher.streamId)
        var options = PCastOptions(uri: platform.signalingURL, playoutDelay: playoutDelay)
        options.mediaRelay = MediaRelayAddress(host: "127.0.0.1", port: UInt16(proxy.port))
        let viewer = PCast(options)
        try await viewer.start(authToken: try platform.token(.auth))
        let cappedStream = try await viewer.subscribe(streamToken: token)
        let (cappedRenderer, capped) = try await watch(cappedStream)
        let clearStream = try await sdk.subscribe(streamToken: token)
        let (clearRenderer, clear) = try await watch(clearStream)
        try await Task.sleep(for: .seconds(3))

        var down: [Double] = [], up: [Double] = []
        let milliseconds = { (duration: Duration) in Double(duration / .microseconds(1)) / 1000 }
        counting.store(true, ordering: .relaxed)
        capped.counting.store(true, ordering: .relaxed)
        clear.counting.store(true, ordering: .relaxed)
        for _ in 0..<switches {
            let cappedAt = ContinuousClock.now
            proxy.setProfile(ImpairmentProfile(bandwidth: 500_000), for: .toClient)
            try await Task.sleep(for: .seconds(seconds))
            if let at = capped.first(640, after: cappedAt) { down.append(milliseconds(at - cappedAt)) }
            let liftedAt = ContinuousClock.now
            proxy.setProfile(.clear, for: .toClient)
            try await Task.sleep(for: .seconds(seconds))
            if let at = capped.first(1280, after: liftedAt) { up.append(milliseconds(at - liftedAt)) }
        }
        counting.store(false, ordering: .relaxed)
        capped.counting.store(false, ordering: .relaxed)
        clear.counting.store(false, ordering: .relaxed)
        let sent = Double(max(1, captured.load(ordering: .relaxed)))
        let cappedShare = min(100, Double(capped.frames.load(ordering: .relaxed)) * 100 / sent)
        let clearShare = min(100, Double(clear.frames.load(ordering: .relaxed)) * 100 / sent)

        await cappedRenderer.stop()
        await clearRenderer.stop()
        await cappedStream.stop()
        await clearStream.stop()
        await viewer.stop()
        await publisher.stop()
        await sdk.stop()
        await media.stop()
        proxy.stop()
        await platform.shutdown()
        return (down, up, cappedShare, clearShare)
    }

    public static func markdown(_ result: Result) -> String {
        let list = { (values: [Double]) in values.map { String(format: "%.0f", $0) }.joined(separator: ", ") }
        return [
            "## Simulcast (multi-bitrate): 1280×720 30 fps test pattern, layers 1280×720 2.5 Mbit/s, 640×360 300 kbit/s, 320×180 150 kbit/s",
            "",
            "| measure | figure |",
            "|---|---:|",
            String(format: "| publisher process CPU, one encoding | %.1f %% of a core |", result.oneLayerCPU * 100),
            String(format: "| publisher process CPU, three layers | %.1f %% of a core (%.2f×) |", result.threeLayerCPU * 100, result.cpuRatio),
            String(format: "| publisher process CPU, three layers announced, nobody watching (the middle one encoded) | %.1f %% of a core |", result.restedCPU * 100),
            String(format: "| leg capped at 500 kbit/s → first 640×360 frame presented: p50 (each: %@) | %.0f ms |", list(result.downMilliseconds), result.downP50Milliseconds),
            String(format: "| cap lifted → first 1280×720 frame presented: p50 (each: %@) | %.0f ms |", list(result.upMilliseconds), result.upP50Milliseconds),
            String(format: "| frames presented over %d caps and lifts of %.0f s: capped viewer (%d ms playout delay) / clear viewer | %.1f %% / %.1f %% |",
                   result.switches, result.seconds, result.playoutDelayMilliseconds, result.cappedDeliveredPercent, result.clearDeliveredPercent),
        ].joined(separator: "\n") + "\n"
    }

    public init(seconds: Double = 8, playoutDelay: Duration = .milliseconds(200)) {
        self.seconds = seconds
        self.playoutDelay = playoutDelay
    }
}
