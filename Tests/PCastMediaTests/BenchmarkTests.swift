import Foundation
import PCastMedia
import Testing

@Suite("Frame hook benchmark", .serialized)
struct BenchmarkTests {
    /// Frames per variant; `PCAST_BENCH_FRAMES` raises it for a real measurement (in release mode).
    static let frames = ProcessInfo.processInfo.environment["PCAST_BENCH_FRAMES"].flatMap(Int.init) ?? 20

    @Test("the benchmark runs every variant over 720p I420 and reports per-frame figures")
    func runs() async throws {
        let results = try await FrameHookBenchmark(frames: Self.frames).run()
        #expect(results.map(\.variant) == FrameHookBenchmark.Variant.allCases.map(\.rawValue))
        for result in results {
            #expect(result.frames == Self.frames)
            #expect(result.p50Milliseconds > 0 && result.p99Milliseconds >= result.p50Milliseconds)
            print(String(format: "bench: %@: mean %.3f ms, p50 %.3f ms, p99 %.3f ms, dropped %d",
                         result.variant, result.meanMilliseconds, result.p50Milliseconds, result.p99Milliseconds, result.droppedFrames))
        }
        let flat = try await FrameHookBenchmark.run(frames: 5)
        #expect(flat.count == 3 * FrameHookBenchmark.Variant.allCases.count)
    }
}
