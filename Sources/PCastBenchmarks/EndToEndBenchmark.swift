import Foundation
import GStreamer
import PCast
import PCastImpairment
import PCastMedia
import PCastProtocol
import Synchronization

/// End-to-end figures through a platform (normally the embedded one): glass-to-glass latency of
/// a 720p30 H.264 stream through the relay at several playout delays, at the screen (the viewer's
/// sink presenting the frame) and to the decoded frame, and the time to first frame of subscribers
/// joining a running stream.
public struct EndToEndBenchmark: Sendable {
    public struct LatencyResult: Sendable, Hashable, Codable {
        /// The playout delay asked for, ms; ``adaptive`` (0): the SDK's default, which adapts.
        public var playoutDelayMilliseconds: Int
        /// The playout delay in effect at the end of the run, ms (where an adaptive one went).
        public var playoutDelayAtEndMilliseconds: Int = 0
        /// The viewer's leg: `clean`, `loss N %`, or a real path's name (``PathCondition``).
        public var path: String = ""
        /// Packets lost on the viewer's leg, each way (the impairment proxy), percent.
        public var lossPercent: Double = 0
        /// In the measured window: NACKs the viewer sent (sequence numbers asked for), packets the
        /// relay sent again, and video packets still lost after repair (the jitter buffer gave up).
        public var nacksSent: Int = 0
        /// Video packets that were missing when a later one arrived (lost on the path, or overtaken).
        public var missingOnArrival: Int = 0
        /// NACKs sent per video packet that went missing (nil without any).
        public var nacksPerMissing: Double? { missingOnArrival > 0 ? Double(nacksSent) / Double(missingOnArrival) : nil }
        public var retransmissions: Int = 0
        public var lostAfterRepair: Int = 0
        public var frames: Int
        public var missing: Int
        /// Frames decoded of those captured meanwhile, percent.
        public var deliveredPercent: Double
        /// Freezes at the screen (gaps between presented frames beyond 100 ms): total and longest, ms.
        public var freezeMilliseconds: Double
        public var longestFreezeMilliseconds: Double
        /// Capture → the renderer's frame-ready hook, ms: after the renderer's queue, where a frame
        /// waits while the sink holds the one before it, so at playout delays above a frame
        /// interval this includes part of the delay.
        public var p50: Double
        public var p90: Double
        public var p99: Double
        /// Capture → presented by the viewer's sink (after its clock wait, one playout delay after
        /// the frame arrived: glass to glass at the screen), ms.
        public var screenP50: Double
        public var screenP90: Double
        public var screenP99: Double
    }
    public struct FirstFrameResult: Sendable, Hashable, Codable {
        public var joins: Int
        /// Milliseconds from the subscribe call to the first decoded frame.
        public var p50: Double
        public var p99: Double
        public var maximum: Double
        /// Milliseconds from the subscribe call to the first frame the sink presents (the first
        /// frame a viewer sees: the renderer shows it as it arrives).
        public var screenP50: Double
        public var screenP99: Double
    }
    /// A real path on the viewer's leg (each way): jitter, reordering, a round trip, a capped link.
    public struct PathCondition: Sendable {
        public var name: String
        public var profile: ImpairmentProfile
        public init(_ name: String, _ profile: ImpairmentProfile) {
            self.name = name
            self.profile = profile
        }

        /// The table's real paths (issue 41): jitter 5/20/50 ms, reordering 1/5 %, round trips of
        /// 50 and 150 ms, a 3 Mbit/s cap with a 100 ms queue, and jitter with loss.
        public static let table: [PathCondition] = {
            func profile(_ change: (inout ImpairmentProfile) -> Void) -> ImpairmentProfile {
                var profile = ImpairmentProfile()
                change(&profile)
                return profile
            }
            return [
                PathCondition("jitter 5 ms", profile { $0.jitter = .milliseconds(5) }),
                PathCondition("jitter 20 ms", profile { $0.jitter = .milliseconds(20) }),
                PathCondition("jitter 50 ms", profile { $0.jitter = .milliseconds(50) }),
                PathCondition("reorder 1 %", profile { $0.reorder = 0.01 }),
                PathCondition("reorder 5 %", profile { $0.reorder = 0.05 }),
                PathCondition("RTT 50 ms", profile { $0.delay = .milliseconds(25) }),
                PathCondition("RTT 150 ms", profile { $0.delay = .milliseconds(75) }),
                PathCondition("cap 3 Mbit/s", profile { $0.bandwidth = 3_000_000; $0.queueLimit = .milliseconds(100) }),
                PathCondition("jitter 20 ms + loss 5 %", profile { $0.jitter = .milliseconds(20); $0.loss = .uniform(0.05) }),
            ]
        }()
    }

    public struct Result: Sendable, Hashable, Codable {
        public var width: Int
        public var height: Int
        public var latency: [LatencyResult]
        public var firstFrame: FirstFrameResult
    }

    public var signalingURL: String
    public var tokens: @Sendable (TokenType, String?) throws -> String
    public var seconds: Double
    public var playoutDelays: [Int]
    public var joins: Int
    /// Loss on the viewer's leg for each set of runs, percent (0: none). Runs with loss need
    /// ``relayPort``: the viewer's media then goes through a ``UDPImpairmentProxy`` in front of the
    /// relay, losing packets each way before SRTP sees them, as a network does.
    public var lossPercents: [Double] = [0]
    /// The relay's media port (for the impairment proxy of runs with loss).
    public var relayPort: UInt16?
    /// Real paths run at the SDK's default playout delay after the loss table (need ``relayPort``).
    public var paths: [PathCondition] = []
    /// The publisher's video codec (the SDK's encoder settings for it) and bitrate (kbit/s).
    public var videoCodec: VideoCodec = .h264
    public var videoBitrate = EncodingSettings().videoBitrate
    /// The relay's count of packets it sent again (its NACKs served), for each row's figure.
    public var relayRetransmissions: (@Sendable () -> UInt64)?
    public static let goalP50 = 30.0, goalP99 = 60.0, goalFirstFrameP50 = 50.0
    /// A playout delay of 0 in the table: the SDK's default, adaptive delay.
    public static let adaptive = 0
    /// The playout delays × losses of `make bench`'s table: the adaptive default first, then fixed
    /// delays (230 ms: the PCast iOS SDK's default delay).
    public static let tablePlayoutDelays = [adaptive, 20, 40, 80, 150, 230], tableLossPercents: [Double] = [0, 2, 5, 10]

    /// `tokens(type, originStreamId)` mints tokens for the platform.
    public init(signalingURL: String, seconds: Double = 10, playoutDelays: [Int] = [20, 40, 80], joins: Int = 10,
                tokens: @escaping @Sendable (TokenType, String?) throws -> String) {
        self.signalingURL = signalingURL
        self.seconds = seconds
        self.playoutDelays = playoutDelays
        self.joins = joins
        self.tokens = tokens
    }

    public func run() async throws -> Result {
        let publisherSDK = PCast(PCastOptions(uri: signalingURL))
        try await publisherSDK.start(authToken: try tokens(.auth, nil))
        let media = try await publisherSDK.getUserMedia(.synthetic(width: 1280, height: 720))
        let meter = StreamMeter()
        try meter.stamp(media)
        let publisher = try await publisherSDK.publish(streamToken: try tokens(.publish, nil), mediaStream: media,
                                                       settings: EncodingSettings(videoBitrate: videoBitrate, videoCodec: videoCodec))
        defer { _ = publisher }

        var latency: [LatencyResult] = []
        guard paths.isEmpty || relayPort != nil else { throw BenchmarkSetupError("real paths need the relay's media port (for the impairment proxy)") }
        var runs: [(delay: Int, loss: Double, path: String, profile: ImpairmentProfile?)] = []
        for loss in lossPercents {
            guard loss == 0 || relayPort != nil else { throw BenchmarkSetupError("runs with loss need the relay's media port (for the impairment proxy)") }
            for delay in playoutDelays {
                runs.append((delay, loss, loss > 0 ? String(format: "loss %.0f %%", loss) : "clean",
                             loss > 0 ? ImpairmentProfile(loss: .uniform(loss / 100)) : nil))
            }
        }
        for path in paths { runs.append((Self.adaptive, path.profile.loss.rate * 100, path.name, path.profile)) }
        for (index, run) in runs.enumerated() {
            do {
                let (delay, loss) = (run.delay, run.loss)
                var options = PCastOptions(uri: signalingURL, playoutDelay: delay == Self.adaptive ? nil : .milliseconds(delay))
                var proxy: UDPImpairmentProxy?
                if let profile = run.profile, let relayPort {
                    let made = try UDPImpairmentProxy(server: "127.0.0.1", serverPort: Int(relayPort), seed: UInt64(delay) &* 7919 &+ UInt64(index))
                    made.setProfile(profile)
                    options.mediaRelay = MediaRelayAddress(host: "127.0.0.1", port: UInt16(made.port))
                    proxy = made
                }
                defer { proxy?.stop() }
                let viewer = PCast(options)
                try await viewer.start(authToken: try tokens(.auth, nil))
                let stream = try await viewer.subscribe(streamToken: try tokens(.stream, publisher.streamId))
                let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
                _ = await renderer.start()
                try meter.watch(renderer, of: stream)
                // Warm up: the first keyframe, and the adaptive delay's first move (1 s after the first
                // packet; a rise then is a one-time wait of the picture, not the path's steady state).
                try await Task.sleep(for: .seconds(2))
                _ = meter.take()
                let (nacksBefore, lostBefore, missingBefore) = Self.videoRepair(stream)
                let retransmittedBefore = relayRetransmissions?() ?? 0
                try await Task.sleep(for: .seconds(seconds))
                let snapshot = meter.take()
                let (nacksAfter, lostAfter, missingAfter) = Self.videoRepair(stream)
                let retransmitted = (relayRetransmissions?() ?? 0) &- retransmittedBefore
                var result = LatencyResult(playoutDelayMilliseconds: delay, lossPercent: loss, frames: snapshot.frames, missing: snapshot.missing,
                                             deliveredPercent: snapshot.deliveredPercent,
                                             freezeMilliseconds: snapshot.freezeMilliseconds,
                                             longestFreezeMilliseconds: snapshot.longestFreezeMilliseconds,
                                             p50: snapshot.percentile(50) ?? .nan, p90: snapshot.percentile(90) ?? .nan,
                                             p99: snapshot.percentile(99) ?? .nan,
                                             screenP50: snapshot.screenPercentile(50) ?? .nan, screenP90: snapshot.screenPercentile(90) ?? .nan,
                                             screenP99: snapshot.screenPercentile(99) ?? .nan)
                result.path = run.path
                result.playoutDelayAtEndMilliseconds = renderer.playoutDelay.map { Int($0 / .milliseconds(1)) } ?? 0
                result.nacksSent = nacksAfter - nacksBefore
                result.missingOnArrival = missingAfter - missingBefore
                result.lostAfterRepair = lostAfter - lostBefore
                result.retransmissions = Int(clamping: retransmitted)
                latency.append(result)
                await renderer.stop()
                await stream.stop()
                await viewer.stop()
            }
        }

        var firstFrames: [Double] = [], firstPresented: [Double] = []
        let viewer = PCast(PCastOptions(uri: signalingURL))
        try await viewer.start(authToken: try tokens(.auth, nil))
        for _ in 0..<joins {
            try await Task.sleep(for: .milliseconds(500))
            let started = ContinuousClock.now
            let stream = try await viewer.subscribe(streamToken: try tokens(.stream, publisher.streamId))
            let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            _ = await renderer.start()
            // Both instants are kept by the stream and the renderer themselves, from before the
            // first frame could come (a callback set after start() could miss it).
            let deadline = ContinuousClock.now + .seconds(10)
            while (stream.firstVideoDecodedAt == nil || renderer.firstFrameShownAt == nil) && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(2))
            }
            // Milliseconds since the subscribe call; 10 s (the wait's limit) when it never came.
            func elapsed(_ instant: ContinuousClock.Instant?) -> Double {
                guard let instant else { return 10_000 }
                let (seconds, attoseconds) = (instant - started).components
                return Double(seconds) * 1000 + Double(attoseconds) / 1e15
            }
            firstFrames.append(elapsed(stream.firstVideoDecodedAt))
            firstPresented.append(elapsed(renderer.firstFrameShownAt))
            await renderer.stop()
            await stream.stop()
        }
        await viewer.stop()
        await publisher.stop()
        await media.stop()
        await publisherSDK.stop()
        firstFrames.sort()
        firstPresented.sort()
        func percentile(_ p: Double, of values: [Double]) -> Double {
            guard !values.isEmpty else { return .nan }
            return values[min(values.count - 1, max(0, Int((p / 100 * Double(values.count)).rounded(.up)) - 1))]
        }
        return Result(width: 1280, height: 720, latency: latency,
                      firstFrame: FirstFrameResult(joins: joins, p50: percentile(50, of: firstFrames), p99: percentile(99, of: firstFrames),
                                                   maximum: firstFrames.last ?? .nan,
                                                   screenP50: percentile(50, of: firstPresented), screenP99: percentile(99, of: firstPresented)))
    }
}

extension EndToEndBenchmark {
    /// The viewer's video so far: NACKs sent (sequence numbers asked for) and packets the jitter
    /// buffer gave up on.
    static func videoRepair(_ stream: MediaStream) -> (nacks: Int, lost: Int, missing: Int) {
        let missing = stream.networkStatistics().first { $0.kind == .video }?.packetsMissingOnArrival ?? 0
        guard let video = stream.rtcStatsReport().stats.first(where: { $0.type == "inbound-rtp" && $0.kind == "video" }) else { return (0, 0, missing) }
        return (video.nackCount ?? 0, video.packetsLost ?? 0, missing)
    }
}

/// A benchmark asked for what it cannot set up.
public struct BenchmarkSetupError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
