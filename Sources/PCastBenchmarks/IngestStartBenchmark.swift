import Foundation
import PCast
import PCastContracts
import PCastMedia
import PCastNode
import PCastServer
import Synchronization

/// Ingest start → first frame at a subscriber: the platform is asked to ingest an mp4 and a viewer
/// subscribes as soon as the stream id comes back; the time runs from the `publishRemote` call to
/// the viewer's first decoded frame. The file is read through `file://` (allowed for its folder
/// only), so the figure is the platform's, not an HTTP server's.
public struct IngestStartBenchmark {
    public struct Result: Codable, Sendable {
        public let runs: Int
        public let milliseconds: [Double]
        public let p50: Double
        public let maximum: Double
        public static let goalMilliseconds = 1000.0
    }

    public var file: String
    public var runs = 5

    public func run() async throws -> Result {
        let path = URL(fileURLWithPath: file).standardizedFileURL.path
        guard FileManager.default.fileExists(atPath: path) else { throw BenchFailure("no file at \(path)") }
        var policy = IngestURIPolicy()
        policy.fileDirectory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        let platform = try await LocalPlatform.start(ingestPolicy: policy)
        defer { Task { await platform.shutdown() } }
        let owner = PCast(PCastOptions(uri: platform.signalingURL))
        try await owner.start(authToken: try platform.token(.auth))
        let viewer = PCast(PCastOptions(uri: platform.signalingURL))
        try await viewer.start(authToken: try platform.token(.auth))
        var samples: [Double] = []
        for _ in 0..<runs {
            let start = ContinuousClock.now
            let remote = try await owner.publishRemote(.init(streamToken: try platform.token(.publish), streamURI: "file://\(path)"))
            let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: remote.streamId))
            let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            guard await renderer.start() == .ok else { throw BenchFailure("the viewer's renderer did not start") }
            // Hooked right after the start (frames can only be hooked on a started renderer): a frame
            // decoded in between would be missed, which errs on the slow side by one frame at most.
            let firstFrame = Mutex<ContinuousClock.Instant?>(nil)
            try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
                if case .video? = try? notification.read() {
                    firstFrame.withLock { $0 = $0 ?? .now }
                }
            }
            let deadline = ContinuousClock.now + .seconds(10)
            while firstFrame.withLock({ $0 }) == nil, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(2))
            }
            guard let arrived = firstFrame.withLock({ $0 }) else { throw BenchFailure("no frame within 10 s of the ingest request") }
            samples.append(Double((arrived - start) / .microseconds(1)) / 1000)
            await renderer.stop()
            await stream.stop()
            try? await remote.stop()
        }
        await viewer.stop()
        await owner.stop()
        let sorted = samples.sorted()
        return Result(runs: runs, milliseconds: samples, p50: sorted[sorted.count / 2], maximum: sorted.last ?? 0)
    }

    public init(file: String) {
        self.file = file
    }
}

public struct BenchFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
