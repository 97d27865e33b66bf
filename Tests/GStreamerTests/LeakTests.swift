import GStreamer
import PCastTestSupport
import Testing

extension Leaks {
    /// Run alone (`make test` runs this suite in a process of its own) so other tests' threads and
    /// memory do not blur the figures.
    @Suite("Leaks", .serialized)
    struct LeakTests {
        @Test("1,000 pipelines created, played and torn down leak no threads and little memory")
        func thousandPipelines() async throws {
            func cycle() async throws {
                let pipeline = try Pipeline(description: "videotestsrc num-buffers=2 ! video/x-raw,width=320,height=240 ! identity name=hook ! fakesink sync=false")
                try pipeline.element(named: "hook").staticPad("src").addBufferProbe { _ in .pass }
                let samples = pipeline.bus
                try await pipeline.runToEnd(timeout: .seconds(10))
                _ = samples
            }
            func settle() async throws {
                // Teardown finishes on each pipeline's own queue; wait for it.
                for _ in 0..<200 where Pipeline.aliveCount > 0 { try await Task.sleep(for: .milliseconds(10)) }
                try await Task.sleep(for: .milliseconds(300))
            }
            for _ in 0..<100 { try await cycle() }
            try await settle()
            let threadsBefore = ProcessFootprint.current().threads
            let residentBefore = ProcessFootprint.current().residentKiB

            for _ in 0..<1_000 { try await cycle() }
            try await settle()

            let threadsAfter = ProcessFootprint.current().threads
            let growthKiB = ProcessFootprint.current().residentKiB - residentBefore
            #expect(Pipeline.aliveCount == 0)
            #expect(threadsAfter <= threadsBefore + 4, "threads: \(threadsBefore) before, \(threadsAfter) after")
            // Stated bound: 8 MiB over 1,000 cycles (≈ 8 KiB per pipeline at most; allocator slack included).
            #expect(growthKiB < 8 * 1024, "RSS grew by \(growthKiB) KiB over 1,000 pipelines")
            print("leaks: threads \(threadsBefore) → \(threadsAfter); RSS growth \(growthKiB) KiB over 1,000 pipelines")
        }
    }
}
