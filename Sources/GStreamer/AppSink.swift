import CGStreamer
import Synchronization

/// A buffer with the caps it was negotiated with, as an `appsink` hands it over.
public final class Sample: Sendable {
    public let buffer: Buffer
    public let caps: Caps?
    /// The buffer's presentation time as running time (its segment applied): comparable across
    /// branches whose elements stamp buffers on different bases (x264enc starts at 1000 h). Nil
    /// when unset or outside the segment.
    public let presentationRunningTime: Duration?
    /// The decoding timestamp as running time, like ``presentationRunningTime``.
    public let decodingRunningTime: Duration?

    public init(buffer: Buffer, caps: Caps?, presentationRunningTime: Duration? = nil, decodingRunningTime: Duration? = nil) {
        self.buffer = buffer
        self.caps = caps
        self.presentationRunningTime = presentationRunningTime ?? buffer.presentationTimestamp
        self.decodingRunningTime = decodingRunningTime ?? buffer.decodingTimestamp
    }

    /// Raw video layout, for raw video samples.
    public var videoInfo: VideoInfo? { caps?.videoInfo }
}

/// What an ``AppSink`` drops when its consumer falls behind.
public enum SampleDropPolicy: Sendable {
    /// Keep the newest samples (right for live media).
    case dropOldest
    /// Keep the oldest samples, refuse new ones while full.
    case dropNewest
}

/// An `appsink` in a pipeline: where the application takes samples out.
///
/// Samples are pulled on GStreamer's streaming thread as they arrive (never on Swift's
/// cooperative pool) and handed over either to a callback or to an `AsyncSequence` whose buffer
/// is bounded: when the consumer falls behind, samples are dropped by the policy and counted.
///
/// ```swift
/// let sink = try pipeline.appSink(named: "out")
/// let samples = sink.samples(limit: 8, dropping: .dropOldest)
/// try await pipeline.play()
/// for await sample in samples { print(sample.buffer.presentationTimestamp!) }
/// ```
/// Unchecked: as ``Element``; its context keeps its state in `Mutex`es and atomics, the router is immutable.
public final class AppSink: Element, @unchecked Sendable {
    private let context = AppSinkContext()
    private let router: BusRouter

    init(owning pointer: UnsafeMutablePointer<GstElement>, router: BusRouter) {
        self.router = router
        super.init(owning: pointer)
    }

    private var appSink: UnsafeMutablePointer<GstAppSink> { UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstAppSink.self) }

    /// Samples dropped because the consumer was behind.
    public var droppedSamples: Int { context.dropped.load(ordering: .relaxed) }

    /// Calls `handler` with each sample on the streaming thread. Replaces an earlier consumer.
    public func onSample(_ handler: @escaping @Sendable (Sample) -> Void) {
        context.setConsumer(.callback(handler))
        install()
    }

    /// Called (on the streaming thread) when end-of-stream reaches this sink: the branch feeding
    /// it has played out, whatever the other sinks of the pipeline do.
    public func onEndOfStream(_ handler: @escaping @Sendable () -> Void) {
        context.endOfStream.withLock { $0.handler = handler }
        install()
    }

    /// The samples as an `AsyncSequence`, buffered up to `limit`. Replaces an earlier consumer;
    /// the sequence ends at end of stream.
    public func samples(limit: Int = 8, dropping policy: SampleDropPolicy = .dropOldest) -> AsyncStream<Sample> {
        let buffering: AsyncStream<Sample>.Continuation.BufferingPolicy =
            policy == .dropOldest ? .bufferingNewest(max(limit, 1)) : .bufferingOldest(max(limit, 1))
        let (stream, continuation) = AsyncStream.makeStream(of: Sample.self, bufferingPolicy: buffering)
        context.setConsumer(.stream(continuation))
        install()
        return stream
    }

    private func install() {
        guard context.installOnce() else { return }
        // Samples are taken as they arrive, so appsink's own queue never grows.
        var callbacks = GstAppSinkCallbacks()
        callbacks.eos = appSinkEOS
        callbacks.new_sample = appSinkNewSample
        gst_app_sink_set_callbacks(appSink, &callbacks, Unmanaged.passRetained(context).toOpaque(), releaseAppSinkContext)
    }
}

// Unchecked: its consumer and end-of-stream handler are in `Mutex`es, its counters atomic.
final class AppSinkContext: @unchecked Sendable {
    enum Consumer {
        case none
        case callback(@Sendable (Sample) -> Void)
        case stream(AsyncStream<Sample>.Continuation)
    }

    let consumer = Mutex<Consumer>(.none)
    /// In a struct: a closure that is itself a `Mutex`'s value gains a reabstraction thunk on every
    /// `withLock`, so one read at each end-of-stream would nest them.
    struct EndOfStream: Sendable { var handler: (@Sendable () -> Void)? }
    let endOfStream = Mutex(EndOfStream())
    let installed = Atomic<Bool>(false)
    let dropped = Atomic<Int>(0)

    func installOnce() -> Bool { !installed.exchange(true, ordering: .relaxed) }

    func setConsumer(_ new: Consumer) {
        let old = consumer.withLock { current in
            defer { current = new }
            return current
        }
        if case .stream(let continuation) = old { continuation.finish() }
    }

    func deliver(_ sample: Sample) {
        let current = consumer.withLock { $0 }
        switch current {
        case .none: break
        case .callback(let handler): handler(sample)
        case .stream(let continuation):
            if case .dropped = continuation.yield(sample) { dropped.add(1, ordering: .relaxed) }
        }
    }

    func finish() {
        if case .stream(let continuation) = consumer.withLock({ $0 }) { continuation.finish() }
    }

    deinit { finish() }
}

private let appSinkNewSample: @convention(c) (UnsafeMutablePointer<GstAppSink>?, gpointer?) -> GstFlowReturn = { sink, userData in
    guard let sink, let userData else { return GST_FLOW_OK }
    let context = Unmanaged<AppSinkContext>.fromOpaque(userData).takeUnretainedValue()
    // A sample is ready, so this pull returns at once.
    guard let sample = gst_app_sink_pull_sample(sink) else { return GST_FLOW_OK }
    defer { gst_mini_object_unref(UnsafeMutableRawPointer(sample).assumingMemoryBound(to: GstMiniObject.self)) }
    if let sample = Sample(borrowing: sample) { context.deliver(sample) }
    return GST_FLOW_OK
}

extension Sample {
    /// A sample's buffer and caps, with its timestamps as running times; the GstSample stays the
    /// caller's. Package only: what an element of ours hands over from its own appsink.
    package convenience init?(borrowing sample: OpaquePointer) {
        guard let buffer = gst_sample_get_buffer(sample) else { return nil }
        let caps = gst_sample_get_caps(sample).map { Caps(retaining: $0) }
        var pts: Duration?, dts: Duration?
        if let segment = gst_sample_get_segment(sample), segment.pointee.format == GST_FORMAT_TIME {
            let toRunning = { (time: GstClockTime) -> Duration? in
                time == GstClockTime.max ? nil : Duration(clockTime: gst_segment_to_running_time(segment, GST_FORMAT_TIME, time))
            }
            pts = toRunning(buffer.pointee.pts)
            dts = toRunning(buffer.pointee.dts)
        }
        self.init(buffer: Buffer(retaining: buffer), caps: caps, presentationRunningTime: pts, decodingRunningTime: dts)
    }
}

private let appSinkEOS: @convention(c) (UnsafeMutablePointer<GstAppSink>?, gpointer?) -> Void = { _, userData in
    guard let userData else { return }
    let context = Unmanaged<AppSinkContext>.fromOpaque(userData).takeUnretainedValue()
    context.finish()
    context.endOfStream.withLock { $0.handler }?()
}

private let releaseAppSinkContext: GDestroyNotify = { userData in
    guard let userData else { return }
    Unmanaged<AppSinkContext>.fromOpaque(userData).release()
}
