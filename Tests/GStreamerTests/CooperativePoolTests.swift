import GStreamer
import Testing

@Suite("Cooperative thread pool")
struct CooperativePoolTests {
    @Test("a task on the pool still runs promptly while many pipelines block in state changes")
    func poolStaysResponsive() async throws {
        // Each pipeline's preroll blocks for 1 s (identity sleeps on the first buffer), so each
        // state change holds a thread for 1 s. On the 2-thread cooperative pool of a 2-core machine,
        // 16 of them would stall every other task for seconds; on the pipelines' own threads, none.
        let pipelines = try (0..<16).map { _ in
            try Pipeline(description: "videotestsrc num-buffers=1 ! identity sleep-time=1000000 ! fakesink")
        }
        let ticker = Task {
            var worst: Duration = .zero
            let clock = ContinuousClock()
            for _ in 0..<60 {
                let start = clock.now
                try await Task.sleep(for: .milliseconds(10))
                worst = max(worst, clock.now - start - .milliseconds(10))
            }
            return worst
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for pipeline in pipelines {
                group.addTask { try await pipeline.pause(timeout: .seconds(20)) }
            }
            try await group.waitForAll()
        }
        let worstLateness = try await ticker.value
        // Blocking would show as ~8 s (16 × 1 s over 2 threads); 3 s leaves room for a busy machine.
        #expect(worstLateness < .seconds(3), "a 10 ms sleep on the pool was late by \(worstLateness)")
        await withTaskGroup(of: Void.self) { group in
            for pipeline in pipelines { group.addTask { await pipeline.stop() } }
        }
    }
}
