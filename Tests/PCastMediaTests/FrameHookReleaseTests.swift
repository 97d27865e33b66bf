import Foundation
import GStreamer
import PCastMedia
import PCastTestSupport
import Testing

/// A frame hook that ran for a long time releases like a fresh one.
@Suite("Frame hook release after a long run")
struct FrameHookReleaseTests {
    @Test("a callback read for 20,000 frames is still one closure: releasing the hook afterwards on a 256 KiB stack does not overflow it (each read used to nest two more reabstraction thunks, and a long soak crashed at exit)")
    func longRunRelease() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=20000 ! video/x-raw,format=I420,width=16,height=16,framerate=1000/1 ! identity name=hook ! fakesink sync=false")
        final class Holder: @unchecked Sendable { var hook: FrameHook? }
        let holder = Holder()
        // Every frame reaches the callback, however loaded the machine (1,000 fps is 1 ms a frame).
        holder.hook = try FrameHook(pipeline: pipeline, element: "hook", options: .init(dropsLateFrames: false))
        let count = Counter()
        holder.hook?.setFrameReadyCallback { _ in count.increment() }
        try await pipeline.runToEnd(timeout: .seconds(60))
        #expect(count.value == 20_000)
        // The last reference goes on a thread with a small stack, where releasing a chain of
        // 40,000 nested thunks (three frames each) cannot fit.
        let released = DispatchSemaphore(value: 0)
        let thread = Thread {
            holder.hook = nil
            released.signal()
        }
        thread.stackSize = 256 * 1024
        thread.start()
        #expect(released.wait(timeout: .now() + 30) == .success)
        #expect(holder.hook == nil)
    }
}
