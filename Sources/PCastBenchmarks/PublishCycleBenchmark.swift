import Foundation
import PCast
import PCastTestSupport

/// Publish / unpublish cycles through a platform with one ``PCast`` and one local media stream:
/// what each cycle costs in time, and what the process keeps afterwards (memory, threads,
/// descriptors). A well-known Swift SDK kept about 50 MB per cycle; the goal here is ≤ 5 MB over
/// 1,000 cycles.
///
/// ```swift
/// let result = try await PublishCycleBenchmark(cycles: 1_000).run(sdk: pcast, media: media) {
///     try platform.token(.publish)
/// }
/// ```
public struct PublishCycleBenchmark: Sendable {
    public struct Result: Sendable, Hashable, Codable {
        public var warmUpCycles: Int
        public var cycles: Int
        public var before: ProcessFootprint
        public var after: ProcessFootprint
        /// Wall time per publish + unpublish, median.
        public var cycleMedianMilliseconds: Double
        public var residentGrowthKiB: Int { after.residentKiB - before.residentKiB }
        public static let goalGrowthKiB = 5 * 1024
    }

    public var cycles: Int
    public var warmUpCycles: Int

    public init(cycles: Int = 1_000, warmUpCycles: Int = 50) {
        self.cycles = cycles
        self.warmUpCycles = warmUpCycles
    }

    /// Runs publish / unpublish cycles; `publishToken` gives each publish its token.
    public func run(sdk: PCast, media: UserMediaStream, publishToken: @Sendable () throws -> String) async throws -> Result {
        try await measure {
            let publisher = try await sdk.publish(streamToken: try publishToken(), mediaStream: media)
            await publisher.stop()
        }
    }

    /// Runs subscribe / unsubscribe cycles of `viewer` on a stream that keeps flowing;
    /// `streamToken` gives each subscription its token. Each subscription is rendered (a null
    /// sink) until its first video frame, so the whole receive path runs every cycle.
    public func runSubscriptions(viewer: PCast, streamToken: @Sendable () throws -> String) async throws -> Result {
        try await measure {
            let stream = try await viewer.subscribe(streamToken: try streamToken())
            let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            let firstFrame = AsyncStream<Void>.makeStream()
            if await renderer.start() == .ok, let track = stream.getVideoTracks().first {
                try? renderer.setFrameReadyCallback(track) { _ in firstFrame.continuation.finish() }
                let timeout = Task {
                    try? await Task.sleep(for: .seconds(5))
                    firstFrame.continuation.finish()
                }
                for await _ in firstFrame.stream {}
                timeout.cancel()
            }
            await renderer.stop()
            await stream.stop()
        }
    }

    /// Runs `cycle` `warmUpCycles` times, then `cycles` times between two footprints.
    public func measure(_ cycle: @Sendable () async throws -> Void) async throws -> Result {
        for _ in 0..<warmUpCycles { try await cycle() }
        try await Self.settle()
        let before = ProcessFootprint.current()
        var durations: [Double] = []
        durations.reserveCapacity(cycles)
        for _ in 0..<cycles {
            let start = ContinuousClock.now
            try await cycle()
            durations.append(Double((ContinuousClock.now - start) / .microseconds(1)) / 1000)
        }
        try await Self.settle()
        let after = ProcessFootprint.current()
        durations.sort()
        return Result(warmUpCycles: warmUpCycles, cycles: cycles, before: before, after: after,
                      cycleMedianMilliseconds: durations.isEmpty ? 0 : durations[durations.count / 2])
    }

    /// Pipelines finish tearing down on their own queues; give them a moment.
    static func settle() async throws {
        try await Task.sleep(for: .milliseconds(500))
        ProcessFootprint.releaseFreeMemory()
    }
}
