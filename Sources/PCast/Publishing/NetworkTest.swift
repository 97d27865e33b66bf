import Foundation
import PCastMedia
import PCastProtocol

// The pre-publish network test (the second vendor's "testing a publisher's stream"): a short test
// stream is published to the relay, and what comes back (the relay's receiver reports and the
// publisher's bandwidth estimate) says which quality this connection carries.

/// The quality a ``PCast/startNetworkTest(streamToken:options:progress:)`` judges the connection
/// against: the test stream is encoded at this size, rate and bitrate.
public struct NetworkTestTarget: Sendable, Hashable, Codable, CustomStringConvertible {
    public var width: Int
    public var height: Int
    public var frameRate: Double
    /// Video bitrate, bits per second.
    public var videoBitrate: Int

    public init(width: Int, height: Int, frameRate: Double, videoBitrate: Int) {
        self.width = width
        self.height = height
        self.frameRate = frameRate
        self.videoBitrate = videoBitrate
    }

    /// 1280×720 at 30 frames a second, 2.5 Mbit/s (the SDK's default publish).
    public static let hd720 = NetworkTestTarget(width: 1280, height: 720, frameRate: 30, videoBitrate: 2_500_000)
    /// 640×360 at 30, 800 kbit/s.
    public static let sd360 = NetworkTestTarget(width: 640, height: 360, frameRate: 30, videoBitrate: 800_000)
    /// 320×180 at 15, 200 kbit/s.
    public static let low180 = NetworkTestTarget(width: 320, height: 180, frameRate: 15, videoBitrate: 200_000)

    public var description: String {
        "\(width)×\(height) at \(frameRate.formatted()) fps, \(videoBitrate / 1000) kbit/s"
    }
}

/// What a network test does.
public struct NetworkTestOptions: Sendable, Hashable {
    /// How long the test stream is published. The bandwidth estimate needs a few seconds to
    /// settle on a link that cannot carry the target; under 3 s is refused.
    public var duration: Duration = .seconds(10)
    /// The quality judged against.
    public var target: NetworkTestTarget = .hd720
    /// Whether the test stream carries audio (Opus, 64 kbit/s) beside the video.
    public var includeAudio = true

    public init(duration: Duration = .seconds(10), target: NetworkTestTarget = .hd720, includeAudio: Bool = true) {
        self.duration = duration
        self.target = target
        self.includeAudio = includeAudio
    }
}

/// How well a connection carries the target quality.
public enum NetworkTestVerdict: String, Sendable, Hashable, Codable, Comparable {
    /// The target quality, without visible impairment.
    case good
    /// Video at a reduced quality (the bitrate adapts), or with occasional impairment.
    case fair
    /// Audio at best: video would stall or be unwatchable.
    case poor

    public static func < (lhs: Self, rhs: Self) -> Bool {
        let order: [Self] = [.poor, .fair, .good]
        return order.firstIndex(of: lhs)! < order.firstIndex(of: rhs)!
    }
}

/// A measure that kept a network test from the verdict `good`.
public enum NetworkTestLimit: String, Sendable, Hashable, Codable {
    /// The bandwidth estimate stayed below the target bitrate.
    case bandwidth
    /// The relay reported packets lost.
    case loss
    /// The round trip to the relay.
    case roundTrip
    /// The variation of the packets' arrival times at the relay.
    case jitter
}

/// One second of a network test.
public struct NetworkTestSample: Sendable, Hashable, Codable {
    /// Since the test stream was published.
    public var elapsed: Duration
    /// What left the publisher in that second (video and audio RTP), bits per second.
    public var sentBitrate: Int
    /// The publisher's estimate of what the network carries for its video (bits per second): the
    /// loss and round trips the relay reports, capped by the relay's own estimate.
    public var estimatedBandwidth: Int?
    /// The relay's latest report on the video: fraction lost since its previous report.
    public var fractionLost: Double?
    public var roundTripTime: Duration?
    public var jitter: Duration?

    public init(elapsed: Duration, sentBitrate: Int, estimatedBandwidth: Int?, fractionLost: Double?, roundTripTime: Duration?, jitter: Duration?) {
        self.elapsed = elapsed
        self.sentBitrate = sentBitrate
        self.estimatedBandwidth = estimatedBandwidth
        self.fractionLost = fractionLost
        self.roundTripTime = roundTripTime
        self.jitter = jitter
    }
}

/// What a network test found.
public struct NetworkTestReport: Sendable, Hashable, Codable {
    public var target: NetworkTestTarget
    public var verdict: NetworkTestVerdict
    /// What kept the verdict from `good` (empty when it is good).
    public var limitedBy: [NetworkTestLimit]
    /// The bandwidth estimate over the second half of the test (median), bits per second. It
    /// cannot exceed the target bitrate: a test measures what it sends.
    public var estimatedBandwidth: Int
    /// What left the publisher over the second half of the test (mean), bits per second.
    public var sentBitrate: Int
    /// Packets the relay reported lost over the whole test, as a fraction of those sent.
    public var loss: Double
    /// Median round trip to the relay (nil when no report carried one).
    public var roundTripTime: Duration?
    /// Median interarrival jitter the relay reported for the video.
    public var jitter: Duration?
    /// The video bitrate to publish with on this connection (bits per second): the target, or
    /// what the estimate leaves room for.
    public var recommendedVideoBitrate: Int
    /// One per second.
    public var samples: [NetworkTestSample]
}

/// The verdict's rules, apart from any network: pure, so they are tested on their own.
///
/// | | good | fair |
/// |---|---|---|
/// | bandwidth estimate | ≥ 85 % of the target bitrate | ≥ 40 % |
/// | loss | ≤ 2 % | ≤ 8 % |
/// | round trip | ≤ 300 ms | ≤ 800 ms |
/// | jitter | ≤ 30 ms | ≤ 100 ms |
///
/// Anything worse than `fair` on any line is `poor`.
struct NetworkTestAssessment {
    struct Bounds {
        var bandwidthShare: Double
        var loss: Double
        var roundTrip: Duration
        var jitter: Duration
    }
    static let good = Bounds(bandwidthShare: 0.85, loss: 0.02, roundTrip: .milliseconds(300), jitter: .milliseconds(30))
    static let fair = Bounds(bandwidthShare: 0.40, loss: 0.08, roundTrip: .milliseconds(800), jitter: .milliseconds(100))

    /// The report from the samples and the test's packet counts. `packetsLost` / `packetsSent`
    /// are the relay's cumulative count and ours.
    static func report(target: NetworkTestTarget, samples: [NetworkTestSample], packetsSent: Int, packetsLost: Int) -> NetworkTestReport {
        let later = Array(samples.dropFirst(samples.count / 2))
        let estimates = later.compactMap(\.estimatedBandwidth).map { min($0, target.videoBitrate) }
        // Without an estimate (no report came back), what was sent is all that is known.
        let sent = later.isEmpty ? 0 : later.map(\.sentBitrate).reduce(0, +) / later.count
        let bandwidth = median(estimates) ?? min(sent, target.videoBitrate)
        let loss = packetsSent > 0 ? min(1, Double(max(packetsLost, 0)) / Double(packetsSent)) : 1
        let roundTrip = median(samples.compactMap(\.roundTripTime))
        let jitter = median(samples.compactMap(\.jitter))

        func failures(_ bounds: Bounds) -> [NetworkTestLimit] {
            var limits: [NetworkTestLimit] = []
            if Double(bandwidth) < bounds.bandwidthShare * Double(target.videoBitrate) { limits.append(.bandwidth) }
            if loss > bounds.loss { limits.append(.loss) }
            // A test that got no report back has no round trip: that is a failure, not a pass.
            if roundTrip.map({ $0 > bounds.roundTrip }) ?? true { limits.append(.roundTrip) }
            if let jitter, jitter > bounds.jitter { limits.append(.jitter) }
            return limits
        }
        let limitedBy = failures(good)
        let verdict: NetworkTestVerdict = limitedBy.isEmpty ? .good : failures(fair).isEmpty ? .fair : .poor
        // Headroom under the estimate, so the published stream does not sit at the link's edge.
        let recommended = limitedBy.contains(.bandwidth) ? Int(Double(bandwidth) * 0.85) : target.videoBitrate
        return NetworkTestReport(target: target, verdict: verdict, limitedBy: limitedBy, estimatedBandwidth: bandwidth, sentBitrate: sent,
                                 loss: loss, roundTripTime: roundTrip, jitter: jitter, recommendedVideoBitrate: recommended, samples: samples)
    }

    static func median<T: Comparable>(_ values: [T]) -> T? {
        values.isEmpty ? nil : values.sorted()[values.count / 2]
    }
}

extension PCast {
    /// Tests the connection before publishing: publishes a test stream (a moving noise pattern,
    /// which the encoder cannot compress below its bitrate, and a tone) at `options.target` for
    /// `options.duration`, reads the relay's reports and the bandwidth estimate every second, then
    /// unpublishes it and judges the connection (see ``NetworkTestReport``).
    ///
    /// `streamToken` is a publish token, as for ``publish(streamToken:mediaStream:tags:settings:publishType:streamName:)``;
    /// the test stream carries the tag `network-test`. `progress` is called with each second's sample.
    ///
    /// ```swift
    /// let report = try await pcast.startNetworkTest(streamToken: publishToken)
    /// if report.verdict < .good { settings.videoBitrate = report.recommendedVideoBitrate / 1000 }
    /// ```
    ///
    /// Throws `invalidRequest` for a duration under 3 s or a target that cannot be encoded,
    /// `media` when the test stream cannot be made, what ``publish(streamToken:mediaStream:tags:settings:publishType:streamName:)``
    /// throws, `streamEnded` when the platform ends the test stream, `cancelled` when the task is.
    public func startNetworkTest(streamToken: String, options: NetworkTestOptions = NetworkTestOptions(),
                                 progress: (@Sendable (NetworkTestSample) -> Void)? = nil) async throws(PCastError) -> NetworkTestReport {
        let target = options.target
        guard options.duration >= .seconds(3) else { throw .invalidRequest("a network test lasts 3 s or more") }
        guard target.width > 0, target.height > 0, target.width % 2 == 0, target.height % 2 == 0, target.frameRate > 0,
              target.videoBitrate >= 50_000
        else { throw .invalidRequest("the test's target \(target) cannot be encoded (even sizes, a frame rate, 50 kbit/s or more)") }
        _ = try signaling()

        var constraints = UserMediaOptions()
        constraints.video.source = .pipeline("videotestsrc is-live=true pattern=snow")
        constraints.video.width = .exact(target.width)
        constraints.video.height = .exact(target.height)
        constraints.video.frameRate = .exact(target.frameRate)
        if options.includeAudio {
            constraints.audio.deviceId = .exact(SourceDevices.syntheticAudioId)
        } else {
            constraints.audio.enabled = false
        }
        let media: UserMediaStream
        do {
            media = try await UserMedia.getUserMedia(constraints)
        } catch {
            throw PCastError(code: .media, detail: "the network test's stream: \(error)", underlying: error)
        }
        let publisher: Publisher
        do {
            publisher = try await publish(streamToken: streamToken, mediaStream: media, tags: ["network-test"],
                                          settings: EncodingSettings(videoBitrate: max(target.videoBitrate / 1000, 1),
                                                                     keyframeInterval: max(Int(target.frameRate * 2), 1)))
        } catch {
            await media.stop()
            throw error
        }

        let clock = ContinuousClock()
        let start = clock.now
        var samples: [NetworkTestSample] = []
        var previous = (at: start, bytes: 0)
        var failure: PCastError?
        while clock.now - start < options.duration {
            do {
                try await Task.sleep(for: .seconds(1))
            } catch {
                failure = PCastError(code: .cancelled, detail: "the network test was cancelled")
                break
            }
            if publisher.hasEnded {
                let (reason, description) = await publisher.ended()
                failure = PCastError(code: .streamEnded, detail: "the test stream ended: \(reason.rawValue)\(description.map { " (\($0))" } ?? "")")
                break
            }
            let now = clock.now
            let stats = publisher.rtcStatsReport().stats
            let bytes = stats.filter { $0.type == "outbound-rtp" }.compactMap(\.bytesSent).reduce(0, +)
            let seconds = (now - previous.at) / .seconds(1)
            let video = stats.first { $0.type == "remote-inbound-rtp" && $0.kind == "video" }
            let sample = NetworkTestSample(
                elapsed: now - start, sentBitrate: seconds > 0 ? Int(Double(bytes - previous.bytes) * 8 / seconds) : 0,
                estimatedBandwidth: publisher.estimatedVideoBitrate, fractionLost: video?.fractionLost,
                roundTripTime: video?.roundTripTime.map { .milliseconds($0 * 1000) }, jitter: video?.jitter.map { .milliseconds($0 * 1000) })
            previous = (now, bytes)
            samples.append(sample)
            progress?(sample)
        }

        let stats = publisher.rtcStatsReport().stats
        let sent = stats.filter { $0.type == "outbound-rtp" }.compactMap(\.packetsSent).reduce(0, +)
        let lost = stats.filter { $0.type == "remote-inbound-rtp" }.compactMap(\.packetsLost).reduce(0, +)
        await publisher.stop(reason: .ended, description: "network test finished")
        await media.stop()
        if let failure { throw failure }
        return NetworkTestAssessment.report(target: target, samples: samples, packetsSent: sent, packetsLost: lost)
    }
}
