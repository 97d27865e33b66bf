import CGStreamer
import Synchronization

/// An `appsrc` in a pipeline: where the application pushes buffers in.
///
/// ``push(_:)`` applies back-pressure: when the source's queue is full (`max-bytes`,
/// `max-buffers`) it suspends the caller until GStreamer asks for more, without blocking a thread.
///
/// ```swift
/// let source = try pipeline.appSource(named: "in")
/// try source.setCaps(Caps("video/x-raw,format=GRAY8,width=4,height=4,framerate=30/1"))
/// try await pipeline.play()
/// let frame = Buffer(bytes: [UInt8](repeating: 0, count: 16))
/// frame.presentationTimestamp = .zero
/// try await source.push(frame)
/// try source.endOfStream()
/// ```
/// Unchecked: as ``Element``; its context keeps its state in a `Mutex`, the router and observer are immutable.
public final class AppSource: Element, @unchecked Sendable {
    private let context = AppSourceContext()
    private let router: BusRouter
    private let observer: Int

    init(owning pointer: UnsafeMutablePointer<GstElement>, router: BusRouter) {
        self.router = router
        let context = self.context
        let elementName = String(cString: pointer.pointee.object.name)
        // When the source stops (pipeline stopped or torn down), release whoever waits to push.
        observer = router.observe { message in
            guard message.source == elementName, case .stateChanged(_, let new, _) = message.kind, new <= .ready else { return }
            context.release(with: .flow("flushing"))
        }
        super.init(owning: pointer)
        var callbacks = GstAppSrcCallbacks()
        callbacks.need_data = appSourceNeedData
        callbacks.enough_data = appSourceEnoughData
        gst_app_src_set_callbacks(appSource, &callbacks, Unmanaged.passRetained(context).toOpaque(), releaseAppSourceContext)
        // Never let appsrc block a pushing thread: back-pressure is ours, in push().
        try? set("block", false)
        try? set("format", "time")
    }

    deinit {
        router.removeObserver(observer)
        context.release(with: .flow("appsrc released"))
    }

    private var appSource: UnsafeMutablePointer<GstAppSrc> { UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstAppSrc.self) }

    /// Sets the caps of what will be pushed.
    public func setCaps(_ caps: Caps) throws(GStreamerError) {
        try set("caps", caps)
    }

    /// Whether the source behaves as a live source (timestamps follow the clock).
    public func setLive(_ live: Bool) throws(GStreamerError) {
        try set("is-live", live)
    }

    /// Bounds the queue that back-pressure keeps below.
    public func setQueueLimit(bytes: UInt64? = nil, buffers: UInt64? = nil) throws(GStreamerError) {
        if let bytes { try set("max-bytes", bytes) }
        if let buffers { try set("max-buffers", buffers) }
    }

    /// Pushes a buffer, waiting while the queue is full.
    ///
    /// - Throws: ``GStreamerError/flow(_:)`` when the source is flushing (stopped) or has ended,
    ///   ``GStreamerError/cancelled`` when the task is cancelled while waiting.
    public func push(_ buffer: Buffer) async throws(GStreamerError) {
        try await context.waitForRoom().get()
        let result = gst_app_src_push_buffer(appSource, buffer.retainedPointer())
        guard result == GST_FLOW_OK else { throw .flow(String(cString: gst_flow_get_name(result))) }
    }

    /// Pushes a buffer without waiting, from any thread (a pad probe, a socket thread): a real-time
    /// producer that must not wait drops instead. Returns `false` when the buffer was not taken
    /// (the queue is full, the source is flushing or has ended).
    @discardableResult
    public func pushNow(_ buffer: Buffer) -> Bool {
        guard !context.isFull else { return false }
        return gst_app_src_push_buffer(appSource, buffer.retainedPointer()) == GST_FLOW_OK
    }

    /// Signals the end of the data: downstream finishes, and the bus reports end of stream.
    public func endOfStream() throws(GStreamerError) {
        let result = gst_app_src_end_of_stream(appSource)
        guard result == GST_FLOW_OK else { throw .flow(String(cString: gst_flow_get_name(result))) }
    }
}

// Unchecked: all of its state is in the `Mutex` `state`.
final class AppSourceContext: @unchecked Sendable {
    private struct State {
        var full = false
        var waiters: [Int: CheckedContinuation<Result<Void, GStreamerError>, Never>] = [:]
        var nextID = 0
    }
    private let state = Mutex(State())

    func waitForRoom() async -> Result<Void, GStreamerError> {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> Bool in
                    if !state.full { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if ready { continuation.resume(returning: .success(())) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume(returning: .failure(.cancelled))
        }
    }

    var isFull: Bool { state.withLock { $0.full } }

    func setFull(_ full: Bool) {
        let waiters = state.withLock { state -> [CheckedContinuation<Result<Void, GStreamerError>, Never>] in
            state.full = full
            guard !full else { return [] }
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: .success(())) }
    }

    func release(with error: GStreamerError) {
        let waiters = state.withLock { state -> [CheckedContinuation<Result<Void, GStreamerError>, Never>] in
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: .failure(error)) }
    }
}

private let appSourceNeedData: @convention(c) (UnsafeMutablePointer<GstAppSrc>?, guint, gpointer?) -> Void = { _, _, userData in
    guard let userData else { return }
    Unmanaged<AppSourceContext>.fromOpaque(userData).takeUnretainedValue().setFull(false)
}

private let appSourceEnoughData: @convention(c) (UnsafeMutablePointer<GstAppSrc>?, gpointer?) -> Void = { _, userData in
    guard let userData else { return }
    Unmanaged<AppSourceContext>.fromOpaque(userData).takeUnretainedValue().setFull(true)
}

private let releaseAppSourceContext: GDestroyNotify = { userData in
    guard let userData else { return }
    Unmanaged<AppSourceContext>.fromOpaque(userData).release()
}
