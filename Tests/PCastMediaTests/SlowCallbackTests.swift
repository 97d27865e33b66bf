import Foundation
import GStreamer
import PCastMedia
import PCastTestSupport
import Testing

@Suite("Frame hook: keeping up with the frame rate", .serialized)
struct SlowCallbackTests {
    /// A live 30 fps 720p source (a frame every 33 ms, on the clock) feeding the hook through an
    /// unbounded queue: whatever the hook cannot take piles up there, so the queue's level shows
    /// whether frames wait anywhere.
    static func livePipeline(frames: Int) throws -> Pipeline {
        try Pipeline(description: """
            videotestsrc is-live=true num-buffers=\(frames) ! video/x-raw,format=I420,width=1280,height=720,framerate=30/1 \
            ! queue name=waiting max-size-buffers=0 max-size-bytes=0 max-size-time=0 \
            ! identity name=hook ! fakesink name=sink sync=true
            """)
    }

    struct Run {
        let arrived: Int
        let delivered: Int
        /// The most frames ever waiting in the queue before the hook.
        let maxWaiting: Int
        let residentGrowthKiB: Int
    }

    /// Plays the pipeline to its end, sampling the queue's level every 10 ms.
    static func run(_ pipeline: Pipeline) async throws -> Run {
        let arrived = try pipeline.element(named: "hook").staticPad("sink").countBuffers()
        let delivered = try pipeline.element(named: "sink").staticPad("sink").countBuffers()
        let queue = try pipeline.element(named: "waiting")
        let residentBefore = ProcessFootprint.current().residentKiB
        try await pipeline.play()
        let sampler = Task {
            var most = 0
            while !Task.isCancelled {
                most = max(most, (try? queue.property("current-level-buffers", as: Int.self)) ?? 0)
                try? await Task.sleep(for: .milliseconds(10))
            }
            return most
        }
        try await pipeline.waitUntilEnd(timeout: .seconds(60))
        sampler.cancel()
        let maxWaiting = await sampler.value
        let growth = ProcessFootprint.current().residentKiB - residentBefore
        await pipeline.stop()
        return Run(arrived: arrived.value, delivered: delivered.value, maxWaiting: maxWaiting, residentGrowthKiB: growth)
    }

    @Test("a callback slower than the frame interval loses frames, counted, and nothing piles up")
    func slowCallbackDrops() async throws {
        let produced = 60
        let pipeline = try Self.livePipeline(frames: produced)
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let calls = Counter()
        hook.setFrameReadyCallback { notification in
            calls.increment()
            // Read the frame, then take 50 ms: half as long again as the 33 ms frame interval.
            _ = try? notification.read()
            Thread.sleep(forTimeInterval: 0.050)
        }
        let run = try await Self.run(pipeline)
        let statistics = hook.statistics
        print("slow callback: \(produced) produced, \(statistics.framesDelivered) delivered, \(hook.droppedFrameCount) dropped, "
              + "at most \(run.maxWaiting) frames waiting; RSS growth \(run.residentGrowthKiB) KiB")

        #expect(run.arrived == produced)
        #expect(statistics.framesSeen == produced)
        #expect(statistics.framesDelivered == calls.value)
        #expect(statistics.framesDelivered + hook.droppedFrameCount == produced)
        #expect(statistics.framesDelivered < produced)
        #expect(run.delivered == statistics.framesDelivered)
        // The callback manages 20 of the 30 frames a second: about a third is dropped. A wide band.
        #expect(hook.droppedFrameCount >= produced / 6 && hook.droppedFrameCount <= produced * 2 / 3,
                "dropped \(hook.droppedFrameCount) of \(produced)")
        // Bounded memory: frames do not wait for the callback (without dropping, about 20 would).
        #expect(run.maxWaiting <= 4, "\(run.maxWaiting) frames waited before the hook")
    }

    @Test("with dropping turned off, a slow callback sees every frame and frames pile up before it")
    func droppingOff() async throws {
        let produced = 30
        let pipeline = try Self.livePipeline(frames: produced)
        let hook = try FrameHook(pipeline: pipeline, element: "hook", options: .init(dropsLateFrames: false))
        let calls = Counter()
        hook.setFrameReadyCallback { _ in
            calls.increment()
            Thread.sleep(forTimeInterval: 0.050)
        }
        let run = try await Self.run(pipeline)
        #expect(calls.value == produced)
        #expect(hook.droppedFrameCount == 0)
        #expect(run.delivered == produced)
        // 30 frames a second in, 20 out: about 10 wait after the first second.
        #expect(run.maxWaiting >= 5, "only \(run.maxWaiting) frames waited")
    }

    @Test("a callback that keeps up sees (nearly) every frame of the live source")
    func fastCallbackKeepsUp() async throws {
        let produced = 30
        let pipeline = try Self.livePipeline(frames: produced)
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let calls = Counter()
        hook.setFrameReadyCallback { notification in
            calls.increment()
            _ = try? notification.read()
            Thread.sleep(forTimeInterval: 0.002)
        }
        let run = try await Self.run(pipeline)
        #expect(calls.value + hook.droppedFrameCount == produced)
        // A 2 ms callback never falls behind; only a stall of the whole machine (over 66 ms) could cost a frame.
        #expect(hook.droppedFrameCount <= 2, "dropped \(hook.droppedFrameCount)")
        #expect(run.maxWaiting <= 4)
    }
}
