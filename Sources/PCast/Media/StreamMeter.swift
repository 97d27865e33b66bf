import Foundation
import GStreamer
import PCastMedia
import PCastProtocol
import Synchronization

/// Measures a stream end to end with frame stamps: the publisher side paints a counter into every
/// captured frame (``FrameStamp``) and notes when; the subscriber side reads it after decoding, and
/// again when the renderer's sink presents the frame. Gives glass-to-glass latency at the screen
/// (capture → presented, after the sink's clock wait: what a viewer sees), the same to the decoded
/// frame (capture → the renderer's frame-ready hook, before the playout delay's wait), and
/// completeness (frames missing or out of order), for the demo's status line and the benchmarks.
///
/// ```swift
/// let meter = StreamMeter()
/// try meter.stamp(media)                      // before publishing
/// try meter.watch(renderer, of: remoteStream) // on the subscriber
/// let now = meter.take()                      // frames, latency percentiles, gaps since the last take
/// ```
public final class StreamMeter: Sendable {
    /// Figures since the previous ``take()``.
    public struct Snapshot: Sendable, Hashable, Codable {
        /// Frames decoded whose counter reads as one captured (the others are ``unreadable``).
        public var frames: Int
        /// Frames whose counter never arrived (a gap between two that did; a freeze at the end of
        /// the window leaves its frames out: ``captured`` tells what should have come).
        public var missing: Int
        /// Frames stamped by the publisher in the same window: what a viewer should have been shown.
        public var captured: Int = 0
        /// Frames decoded whose counter is not one captured: a decoder concealing a loss paints
        /// over it (counting a garbled counter as a jump once made 269 frames of 300 read as 11.6 %).
        public var unreadable: Int = 0
        /// Frames that arrived after a later one.
        public var reordered: Int
        /// Capture → decoded frame (the renderer's frame-ready hook), milliseconds, sorted.
        public var latencies: [Double]
        /// Capture → presented by the renderer's sink (glass to glass at the screen), milliseconds,
        /// sorted; empty for a renderer whose presentation is not observed (a window sink).
        public var screenLatencies: [Double]
        /// Freezes at the screen: the time between consecutive presented frames beyond
        /// ``freezeThreshold``, summed, and the longest, milliseconds.
        public var freezeMilliseconds: Double
        public var longestFreezeMilliseconds: Double

        public init(frames: Int = 0, missing: Int = 0, reordered: Int = 0, latencies: [Double] = [], screenLatencies: [Double] = [],
                    freezeMilliseconds: Double = 0, longestFreezeMilliseconds: Double = 0) {
            self.frames = frames
            self.missing = missing
            self.reordered = reordered
            self.latencies = latencies
            self.screenLatencies = screenLatencies
            self.freezeMilliseconds = freezeMilliseconds
            self.longestFreezeMilliseconds = longestFreezeMilliseconds
        }

        /// Frames shown of those captured in the window, percent (at most 100: frames captured just
        /// before the window may be shown in it).
        public var deliveredPercent: Double {
            captured > 0 ? min(100, Double(frames) * 100 / Double(captured)) : 0
        }

        /// A percentile of ``latencies`` (to the decoded frame).
        public func percentile(_ p: Double) -> Double? { Self.percentile(p, of: latencies) }

        /// A percentile of ``screenLatencies`` (at the screen).
        public func screenPercentile(_ p: Double) -> Double? { Self.percentile(p, of: screenLatencies) }

        private static func percentile(_ p: Double, of sorted: [Double]) -> Double? {
            guard !sorted.isEmpty else { return nil }
            return sorted[min(sorted.count - 1, max(0, Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1))]
        }
    }

    /// A gap between presented frames longer than this is a freeze (three frame times at 30 fps).
    public static let freezeThreshold: Duration = .milliseconds(100)

    private static let slots = 4096
    private let captured = Mutex<[(counter: UInt32, at: ContinuousClock.Instant)?]>(Array(repeating: nil, count: 4096))
    private let counter = Atomic<UInt32>(0)
    private struct Window {
        var frames = 0
        var missing = 0
        var reordered = 0
        var latencies: [Double] = []
        var screenLatencies: [Double] = []
        var lastPresented: ContinuousClock.Instant?
        var freezeMilliseconds = 0.0
        var longestFreezeMilliseconds = 0.0
        var last: UInt32?
        var firstFrame: ContinuousClock.Instant?
        var unreadable = 0
        /// The stamp counter at the previous take.
        var counterAtTake: UInt32 = 0
    }
    private let window = Mutex(Window())

    public init() {}

    /// Paints a counter into every frame of `media`'s video track and notes its capture time.
    public func stamp(_ media: UserMediaStream) throws(MediaError) {
        guard let track = media.mediaStream.getVideoTracks().first else { throw .unsupportedPad("the stream has no video track") }
        try media.setFrameReadyCallback(track) { [weak self] notification in
            guard let self, case .video(var frame)? = try? notification.read() else { return }
            let value = self.counter.add(1, ordering: .relaxed).newValue & 0xFF_FFFF
            FrameStamp.paint(value, into: &frame)
            let now = ContinuousClock.now
            self.captured.withLock { $0[Int(value) % Self.slots] = (value, now) }
            try? notification.write(.video(frame))
        }
    }

    /// Reads the counters of the frames `renderer` shows: after the decoder, and (on the null
    /// video device) when its sink presents them.
    /// A new viewer starts a new sequence: its first counter is not compared with the last one
    /// another viewer read (an HLS viewer's frames are seconds older than a real-time viewer's).
    public func watch(_ renderer: Renderer, of stream: MediaStream) throws(MediaError) {
        guard let track = stream.getVideoTracks().first else { throw .unsupportedPad("the stream has no video track") }
        // Its first frame is not compared with the previous viewer's either (a freeze between them).
        window.withLock { window in
            window.last = nil
            window.lastPresented = nil
        }
        if renderer.options.useNullVideoDevice {
            try renderer.onVideoPresented { [weak self] frame in
                guard let self, let value = FrameStamp.read(frame) else { return }
                let now = ContinuousClock.now
                let at = self.captureTime(of: value)
                self.window.withLock { window in
                    if let at { window.screenLatencies.append(Self.milliseconds(now - at)) }
                    if let previous = window.lastPresented, now - previous > Self.freezeThreshold {
                        let gap = Self.milliseconds(now - previous)
                        window.freezeMilliseconds += gap
                        window.longestFreezeMilliseconds = max(window.longestFreezeMilliseconds, gap)
                    }
                    window.lastPresented = now
                }
            }
        }
        try renderer.setFrameReadyCallback(track) { [weak self] notification in
            guard let self, case .video(let frame)? = try? notification.read(), let value = FrameStamp.read(frame) else { return }
            let now = ContinuousClock.now
            let at = self.captureTime(of: value)
            self.window.withLock { window in
                guard at != nil else {
                    window.unreadable += 1
                    return
                }
                window.frames += 1
                if window.firstFrame == nil { window.firstFrame = now }
                if let last = window.last {
                    if value > last { window.missing += Int(value - last - 1); window.last = value } else { window.reordered += 1 }
                } else {
                    window.last = value
                }
                if let at { window.latencies.append(Self.milliseconds(now - at)) }
            }
        }
    }

    /// When the frame stamped `value` was captured, while it is remembered (the last few seconds
    /// of frames): for readers of the stamps other than a renderer.
    public func captureTime(of value: UInt32) -> ContinuousClock.Instant? {
        captured.withLock { slots in
            guard let entry = slots[Int(value) % Self.slots], entry.counter == value else { return nil }
            return entry.at
        }
    }

    private static func milliseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) * 1000 + Double(attoseconds) / 1e15
    }

    /// When the first stamped frame was decoded, if one has been.
    public var firstFrame: ContinuousClock.Instant? { window.withLock { $0.firstFrame } }

    /// Figures since the last call.
    public func take() -> Snapshot {
        let counter = self.counter.load(ordering: .relaxed)
        return window.withLock { window in
            defer {
                window.frames = 0
                window.missing = 0
                window.reordered = 0
                window.latencies = []
                window.screenLatencies = []
                window.freezeMilliseconds = 0
                window.longestFreezeMilliseconds = 0
                window.unreadable = 0
                window.counterAtTake = counter
            }
            var snapshot = Snapshot(frames: window.frames, missing: window.missing, reordered: window.reordered, latencies: window.latencies.sorted(),
                                    screenLatencies: window.screenLatencies.sorted(), freezeMilliseconds: window.freezeMilliseconds,
                                    longestFreezeMilliseconds: window.longestFreezeMilliseconds)
            snapshot.captured = Int(counter &- window.counterAtTake)
            snapshot.unreadable = window.unreadable
            return snapshot
        }
    }
}
