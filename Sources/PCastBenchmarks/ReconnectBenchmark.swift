import Foundation
import PCast
import PCastImpairment
import PCastMedia
import PCastNode
import PCastServer
import Synchronization

/// Reconnection after a signaling outage: a publisher and a viewer whose signaling goes through a
/// ``TCPOutageProxy`` (their media straight to the relay). The proxy resets their connections and
/// refuses new ones for the outage; the figure is the time from the network's return to each SDK's
/// online callback, with the frames the viewer decoded while offline and whether the stream
/// survived.
public struct ReconnectBenchmark {
    public struct Run: Codable, Sendable {
        public let outageSeconds: Double
        /// Network back → online callback.
        public let publisherReconnectMilliseconds: Double
        public let viewerReconnectMilliseconds: Double
        /// Frames decoded at the viewer while both SDKs were offline, and the frames expected then.
        public let framesDecodedOffline: Int
        public let framesExpectedOffline: Int
        public let sessionsResumed: Bool
        public let streamSurvived: Bool
    }

    public struct Result: Codable, Sendable {
        public let runs: [Run]
        /// Every run's worst, at most.
        public static let goalMilliseconds = 1000.0
        /// The median over the 5 s outages' publisher and viewer figures, at most.
        public static let shortOutageGoalP50Milliseconds = 250.0

        /// The median of the publisher's and the viewer's times back over the outages of 10 s or less.
        public var shortOutageP50Milliseconds: Double? {
            let times = runs.filter { $0.outageSeconds <= 10 }.flatMap { [$0.publisherReconnectMilliseconds, $0.viewerReconnectMilliseconds] }.sorted()
            guard !times.isEmpty else { return nil }
            return times.count % 2 == 1 ? times[times.count / 2] : (times[times.count / 2 - 1] + times[times.count / 2]) / 2
        }
    }

    public var outages: [Double] = [5, 5, 5, 30]

    public func run() async throws -> Result {
        let platform = try await LocalPlatform.start()
        let proxy = try TCPOutageProxy(server: "127.0.0.1", serverPort: platform.server.httpPort)
        let uri = "ws://127.0.0.1:\(proxy.port)/ws"
        let publisherSDK = PCast(PCastOptions(uri: uri))
        let publisherOnline = try await Self.start(publisherSDK, token: try platform.token(.auth))
        let viewer = PCast(PCastOptions(uri: uri))
        let viewerOnline = try await Self.start(viewer, token: try platform.token(.auth))
        let media = try await publisherSDK.getUserMedia(.synthetic(audio: false))
        let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media)
        let ended = Atomic<Bool>(false)
        publisher.setPublisherEndedCallback { _, _ in ended.store(true, ordering: .relaxed) }
        let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
        let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        guard await renderer.start() == .ok else { throw BenchFailure("the renderer did not start") }
        let decoded = Atomic<Int>(0)
        try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
            if case .video? = try? notification.read() { decoded.add(1, ordering: .relaxed) }
        }
        try await Task.sleep(for: .seconds(2))
        let sessions = (publisherSDK.sessionId, viewer.sessionId)

        var runs: [Run] = []
        for outage in outages {
            proxy.setOutage(true)
            guard await Self.wait(.seconds(10), until: { !publisherSDK.isOnline && !viewer.isOnline }) else {
                throw BenchFailure("the SDKs did not notice the outage")
            }
            let before = decoded.load(ordering: .relaxed)
            let offlineStart = ContinuousClock.now
            try await Task.sleep(for: .seconds(outage))
            let offlineFrames = decoded.load(ordering: .relaxed) - before
            let offlineDuration = ContinuousClock.now - offlineStart
            proxy.setOutage(false)
            let restored = ContinuousClock.now
            guard await Self.wait(.seconds(15), until: { publisherOnline.last != nil && viewerOnline.last != nil
                                                          && publisherOnline.last! > restored && viewerOnline.last! > restored }) else {
                throw BenchFailure("the SDKs did not come back online")
            }
            let milliseconds = { (instant: ContinuousClock.Instant) in Double((instant - restored) / .microseconds(1)) / 1000 }
            runs.append(Run(outageSeconds: outage,
                            publisherReconnectMilliseconds: milliseconds(publisherOnline.last!),
                            viewerReconnectMilliseconds: milliseconds(viewerOnline.last!),
                            framesDecodedOffline: offlineFrames,
                            framesExpectedOffline: Int(Double(offlineDuration / .milliseconds(1)) * 30 / 1000),
                            sessionsResumed: publisherSDK.sessionId == sessions.0 && viewer.sessionId == sessions.1,
                            streamSurvived: !ended.load(ordering: .relaxed)))
            try await Task.sleep(for: .seconds(1))
        }
        await renderer.stop()
        await stream.stop()
        await viewer.stop()
        await publisher.stop()
        await publisherSDK.stop()
        await media.stop()
        proxy.stop()
        await platform.shutdown()
        return Result(runs: runs)
    }

    /// When the SDK last came online.
    public final class OnlineTimes: Sendable {
        private let value = Mutex<ContinuousClock.Instant?>(nil)
        public var last: ContinuousClock.Instant? { value.withLock { $0 } }
        public func record() { value.withLock { $0 = .now } }
    }

    private static func start(_ sdk: PCast, token: String) async throws -> OnlineTimes {
        let online = OnlineTimes()
        let status = Mutex<RequestStatus?>(nil)
        sdk.start(authToken: token, authenticationCallback: { result, _ in status.withLock { $0 = $0 ?? result } },
                  onlineCallback: { online.record() })
        guard await wait(.seconds(10), until: { status.withLock { $0 } != nil }), status.withLock({ $0 }) == .ok else {
            throw BenchFailure("the SDK could not authenticate")
        }
        return online
    }

    private static func wait(_ timeout: Duration, until condition: () -> Bool) async -> Bool {
        let end = ContinuousClock.now + timeout
        while ContinuousClock.now < end {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return condition()
    }

    public static func markdown(_ result: Result) -> String {
        var lines = [
            "## Reconnection after a signaling outage (TCP reset and refused for the outage; media untouched): network back → online",
            "",
            "| outage | publisher back in | viewer back in | frames decoded while offline | sessions resumed | stream survived | goal |",
            "|---:|---:|---:|---:|---|---|---:|",
        ]
        for run in result.runs {
            lines.append(String(format: "| %.0f s | %.0f ms | %.0f ms | %d of %d | %@ | %@ | ≤ %.0f ms |", run.outageSeconds,
                                run.publisherReconnectMilliseconds, run.viewerReconnectMilliseconds, run.framesDecodedOffline,
                                run.framesExpectedOffline, run.sessionsResumed ? "yes" : "no", run.streamSurvived ? "yes" : "no",
                                Result.goalMilliseconds))
        }
        if let p50 = result.shortOutageP50Milliseconds {
            lines += ["", String(format: "Back online after outages of 10 s or less, publisher and viewer together: p50 %.0f ms (goal ≤ %.0f ms).",
                                 p50, Result.shortOutageGoalP50Milliseconds)]
        }
        return lines.joined(separator: "\n") + "\n"
    }

    public init(outages: [Double] = [5, 5, 5, 30]) {
        self.outages = outages
    }
}
