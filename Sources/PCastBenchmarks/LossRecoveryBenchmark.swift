import Foundation
import PCast
import PCastImpairment
import PCastMedia
import PCastNode
import PCastServer
import Synchronization

/// Frames delivered and freeze time with loss on the subscriber's leg (both directions), through
/// the UDP impairment proxy: a 640×360 30 fps test pattern published through the embedded
/// platform, one subscriber whose media goes through the proxy.
///
/// Delivered: frames decoded at the subscriber over frames captured at the publisher, in the same
/// window. Freeze: the time between consecutive decoded frames beyond 100 ms (three frame
/// intervals), summed.
public struct LossRecoveryBenchmark {
    public struct Row: Codable, Sendable {
        public let name: String
        public let lossPercent: Double
        /// 0: the SDK's default, adaptive (``playoutDelayAtEndMilliseconds`` says where it ended).
        public let playoutDelayMilliseconds: Int
        public let playoutDelayAtEndMilliseconds: Int
        public let framesCaptured: Int
        public let framesDecoded: Int
        public let deliveredPercent: Double
        public let freezeMilliseconds: Double
        public let longestFreezeMilliseconds: Double
        public let nacksServed: UInt64
    }

    public var seconds: Double = 10

    /// Each row's loss, and its playout delay (nil: the SDK's default, adaptive). Heavy loss gets
    /// rows at fixed delays too: a frame's last packet lost is only seen missing when the next
    /// frame's first arrives (33 ms later at 30 fps).
    public static let profiles: [(String, ImpairmentProfile.Loss, Duration?)] = [
        ("none", .none, nil),
        ("5 % uniform", .uniform(0.05), nil),
        ("10 % uniform", .uniform(0.10), nil),
        ("20 % uniform", .uniform(0.20), nil),
        ("20 % uniform", .uniform(0.20), .milliseconds(80)),
        ("20 % uniform", .uniform(0.20), .milliseconds(150)),
        ("5 % bursty (mean burst 4)", .bursty(loss: 0.05, meanBurst: 4), nil),
    ]

    public func run() async throws -> [Row] {
        var rows: [Row] = []
        for (name, loss, delay) in Self.profiles {
            rows.append(try await measure(name: name, loss: loss, playoutDelay: delay))
        }
        return rows
    }

    private func measure(name: String, loss: ImpairmentProfile.Loss, playoutDelay: Duration?) async throws -> Row {
        let platform = try await LocalPlatform.start()
        let proxy = try UDPImpairmentProxy(server: "127.0.0.1", serverPort: Int(platform.relay.mediaPort), seed: 42)
        proxy.setProfile(.init(loss: loss))
        let publisherSDK = PCast(PCastOptions(uri: platform.signalingURL))
        try await publisherSDK.start(authToken: try platform.token(.auth))
        let media = try await publisherSDK.getUserMedia(.synthetic())
        let measuring = Atomic<Bool>(false)
        let captured = Atomic<Int>(0)
        try media.setFrameReadyCallback(media.mediaStream.getVideoTracks()[0]) { _ in
            if measuring.load(ordering: .relaxed) { captured.add(1, ordering: .relaxed) }
        }
        let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media)

        var viewerOptions = PCastOptions(uri: platform.signalingURL)
        viewerOptions.mediaRelay = MediaRelayAddress(host: "127.0.0.1", port: UInt16(proxy.port))
        let viewer = PCast(viewerOptions)
        try await viewer.start(authToken: try platform.token(.auth))
        let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId), playoutDelay: playoutDelay)
        let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        guard await renderer.start() == .ok else { throw BenchFailure("the renderer did not start") }
        let arrivals = Mutex<[ContinuousClock.Instant]>([])
        try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
            guard case .video? = try? notification.read() else { return }
            if measuring.load(ordering: .relaxed) { arrivals.withLock { $0.append(.now) } }
        }
        // Settle (first keyframe, jitter buffers set up), then measure.
        try await Task.sleep(for: .seconds(2))
        let start = ContinuousClock.now
        measuring.store(true, ordering: .relaxed)
        try await Task.sleep(for: .seconds(seconds))
        measuring.store(false, ordering: .relaxed)
        let end = ContinuousClock.now
        let times = [start] + arrivals.withLock { $0 } + [end]
        let gaps = zip(times, times.dropFirst()).map { $1 - $0 }.filter { $0 > .milliseconds(100) }
        let milliseconds = { (duration: Duration) in Double(duration / .microseconds(1)) / 1000 }
        let decoded = times.count - 2, sent = captured.load(ordering: .relaxed)
        let atEnd = renderer.playoutDelay.map { Int($0 / .milliseconds(1)) } ?? 0
        let row = Row(name: name, lossPercent: loss.rate * 100, playoutDelayMilliseconds: playoutDelay.map { Int($0 / .milliseconds(1)) } ?? 0,
                      playoutDelayAtEndMilliseconds: atEnd, framesCaptured: sent, framesDecoded: decoded,
                      deliveredPercent: sent > 0 ? min(100, Double(decoded) * 100 / Double(sent)) : 0,
                      freezeMilliseconds: gaps.map(milliseconds).reduce(0, +),
                      longestFreezeMilliseconds: gaps.map(milliseconds).max() ?? 0,
                      nacksServed: platform.relay.statistics().nacksServed)
        await renderer.stop()
        await stream.stop()
        await viewer.stop()
        await publisher.stop()
        await publisherSDK.stop()
        await media.stop()
        proxy.stop()
        await platform.shutdown()
        return row
    }

    public static func markdown(_ rows: [Row], seconds: Double) -> String {
        var lines = [
            "## Loss on the subscriber's leg (both ways, impairment proxy): 640×360 30 fps, \(Int(seconds)) s per row after 2 s of settling",
            "",
            "| loss | playout delay | frames captured | decoded | delivered | freeze total | longest freeze | NACKs served |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in rows {
            let delay = row.playoutDelayMilliseconds == 0 ? "adaptive (→ \(row.playoutDelayAtEndMilliseconds) ms)" : "\(row.playoutDelayMilliseconds) ms"
            lines.append(String(format: "| %@ | %@ | %d | %d | %.1f %% | %.0f ms | %.0f ms | %llu |", row.name, delay, row.framesCaptured, row.framesDecoded,
                                row.deliveredPercent, row.freezeMilliseconds, row.longestFreezeMilliseconds, row.nacksServed))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    public init(seconds: Double = 10) {
        self.seconds = seconds
    }
}
