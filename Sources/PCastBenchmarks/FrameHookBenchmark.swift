import GStreamer
import PCastMedia
import Synchronization

/// Measures what the frame-ready API costs per frame on 720p I420 video (by default), for
/// `pcast-bench`.
///
/// Each variant runs its own pipeline (`videotestsrc ! I420 ! identity ! fakesink sync=false`) with a
/// ``FrameHook`` whose callback does the variant's work; the time is taken around the work inside
/// the callback, on the streaming thread, for every frame.
///
/// ```swift
/// let results = try await FrameHookBenchmark(frames: 300).run()
/// for result in results { print(result.variant, result.p50Milliseconds) }
/// let flat = try await FrameHookBenchmark.run(frames: 300)   // ["read(format: .bgra) + write … p50 ms": 0.9, …]
/// ```
public struct FrameHookBenchmark: Sendable {
    /// The work each frame's callback does.
    ///
    /// ```swift
    /// let results = try await FrameHookBenchmark().run([.readBGRA, .readBGRAWriteConverted])
    /// ```
    public enum Variant: String, Sendable, Hashable, CaseIterable, Codable {
        /// `read()` and `write()` of the same frame after changing one luma byte (one copy).
        case readEditWrite = "read() + edit + write"
        /// `read(format: .bgra)` only.
        case readBGRA = "read(format: .bgra)"
        /// `read(format: .bgra)` then `write` of that frame, sent on as BGRA (``FrameHook/WrittenFormat/asWritten``).
        case readBGRAWriteAsWritten = "read(format: .bgra) + write, sent as BGRA"
        /// `read(format: .bgra)` then `write` of that frame, converted back to I420 (the default).
        case readBGRAWriteConverted = "read(format: .bgra) + write, converted back to I420"
    }

    /// One variant's figures.
    ///
    /// ```swift
    /// for result in try await FrameHookBenchmark().run() { print(result.variant, result.p99Milliseconds) }
    /// ```
    public struct Result: Sendable, Hashable, Codable {
        public var variant: String
        /// Frames the callback handled.
        public var frames: Int
        /// Frames the hook dropped because the callback was behind (0 unless the machine is overloaded).
        public var droppedFrames: Int
        public var meanMilliseconds: Double
        public var p50Milliseconds: Double
        public var p99Milliseconds: Double
    }

    public var frames: Int
    public var width: Int
    public var height: Int
    public var conversionThreads: Int

    /// The per-frame goal for `read(format: .bgra)` + `write`.
    public static let goalMilliseconds = 0.3

    public init(frames: Int = 300, width: Int = 1280, height: Int = 720, conversionThreads: Int = 1) {
        self.frames = frames
        self.width = width
        self.height = height
        self.conversionThreads = conversionThreads
    }

    /// Runs the variants one after another.
    ///
    /// - Throws: ``MediaError`` or `GStreamerError` when a pipeline cannot be built or run.
    public func run(_ variants: [Variant] = Variant.allCases) async throws -> [Result] {
        var results: [Result] = []
        for variant in variants { results.append(try await measure(variant)) }
        return results
    }

    /// The figures as a flat dictionary, `"<variant> p50 ms"`, `"<variant> p99 ms"`, `"<variant> mean ms"`.
    public static func run(frames: Int) async throws -> [String: Double] {
        var flat: [String: Double] = [:]
        for result in try await FrameHookBenchmark(frames: frames).run() {
            flat["\(result.variant) mean ms"] = result.meanMilliseconds
            flat["\(result.variant) p50 ms"] = result.p50Milliseconds
            flat["\(result.variant) p99 ms"] = result.p99Milliseconds
        }
        return flat
    }

    private func measure(_ variant: Variant) async throws -> Result {
        let pipeline = try Pipeline(description: """
            videotestsrc num-buffers=\(frames) ! video/x-raw,format=I420,width=\(width),height=\(height),framerate=30/1 \
            ! identity name=frame-hook ! fakesink sync=false
            """)
        let writtenFormat: FrameHook.WrittenFormat = variant == .readBGRAWriteAsWritten ? .asWritten : .streamFormat
        let hook = try FrameHook(pipeline: pipeline, element: "frame-hook",
                                 options: .init(writtenFormat: writtenFormat, conversionThreads: conversionThreads))
        let timings = Mutex<[Duration]>([])
        let failures = Atomic<Int>(0)
        timings.withLock { $0.reserveCapacity(frames) }
        hook.setFrameReadyCallback { notification in
            let clock = ContinuousClock()
            let start = clock.now
            do {
                switch variant {
                case .readEditWrite:
                    guard var frame = try notification.read().video else { throw MediaError.unsupportedFormat("not video") }
                    try frame.withUnsafeMutableBytes { $0[0] = 0 }
                    try notification.write(frame)
                case .readBGRA:
                    _ = try notification.read(format: .bgra)
                case .readBGRAWriteAsWritten, .readBGRAWriteConverted:
                    try notification.write(try notification.read(format: .bgra))
                }
            } catch {
                failures.add(1, ordering: .relaxed)
            }
            let elapsed = start.duration(to: clock.now)
            timings.withLock { $0.append(elapsed) }
        }
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(600))
        await pipeline.stop()
        hook.remove()
        if failures.load(ordering: .relaxed) > 0 {
            throw MediaError.invalidFrame("\(failures.load(ordering: .relaxed)) frames failed in benchmark \(variant.rawValue)")
        }
        let milliseconds = timings.withLock { $0 }.map { Double($0.components.seconds) * 1e3 + Double($0.components.attoseconds) / 1e15 }.sorted()
        func percentile(_ p: Double) -> Double {
            guard !milliseconds.isEmpty else { return 0 }
            return milliseconds[min(milliseconds.count - 1, Int((p / 100 * Double(milliseconds.count)).rounded(.down)))]
        }
        return Result(
            variant: variant.rawValue, frames: milliseconds.count, droppedFrames: hook.droppedFrameCount,
            meanMilliseconds: milliseconds.isEmpty ? 0 : milliseconds.reduce(0, +) / Double(milliseconds.count),
            p50Milliseconds: percentile(50), p99Milliseconds: percentile(99))
    }
}
