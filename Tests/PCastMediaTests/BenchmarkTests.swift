import Foundation
import PCastBenchmarks
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
            // Under load the hook may drop a late frame; every frame is either measured or counted as dropped.
            #expect(result.frames + result.droppedFrames == Self.frames && result.frames > 0)
            #expect(result.p50Milliseconds > 0 && result.p99Milliseconds >= result.p50Milliseconds)
            print(String(format: "bench: %@: mean %.3f ms, p50 %.3f ms, p99 %.3f ms, dropped %d",
                         result.variant, result.meanMilliseconds, result.p50Milliseconds, result.p99Milliseconds, result.droppedFrames))
        }
        let flat = try await FrameHookBenchmark.run(frames: 5)
        #expect(flat.count == 3 * FrameHookBenchmark.Variant.allCases.count)
    }
}

@Suite("Capture → encode CPU benchmark")
struct CaptureEncodeBenchmarkTests {
    @Test("the SDK and gst-launch-1.0 runs both encode and both report CPU")
    func runs() async throws {
        let result = try await CaptureEncodeBenchmark(seconds: 1, runs: 1).run()
        #expect(result.sdkFrames > 0)
        #expect(result.sdkCPU > 0 && result.gstLaunchCPU > 0)
        print(String(format: "bench: capture+hook+x264 SDK %.1f%%, gst-launch %.1f%%, ratio %.3f", result.sdkCPU, result.gstLaunchCPU, result.ratio))
    }
}
