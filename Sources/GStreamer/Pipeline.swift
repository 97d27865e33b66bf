import CGStreamer
import CGStreamerShim
import Dispatch
import Synchronization

/// A GStreamer pipeline built from a gst-launch-style description.
///
/// State changes run on the pipeline's own serial queue (backed by a thread outside Swift's
/// cooperative pool), so `await pipeline.play()` never blocks other tasks, however long GStreamer
/// takes. Dropping the last reference tears the pipeline down to `NULL` and frees it.
///
/// ```swift
/// let pipeline = try Pipeline(description: "videotestsrc num-buffers=60 ! fakesink")
/// try await pipeline.play()
/// try await pipeline.waitUntilEnd(timeout: .seconds(10))   // EOS, or throws the first error
/// await pipeline.stop()
/// ```
/// Unchecked: as ``Element``; the queue, the bus router and the bus pointer are immutable.
public final class Pipeline: Element, @unchecked Sendable {
    let queue: DispatchQueue
    let router: BusRouter
    private let busPointer: UnsafeMutablePointer<GstBus>

    /// The bus: an ordered `AsyncSequence` of ``BusMessage``.
    public var bus: Bus { Bus(router: router) }

    private static let alive = Atomic<Int>(0)

    /// Pipelines made and not yet fully torn down, process-wide.
    public static var aliveCount: Int { alive.load(ordering: .relaxed) }

    /// Parses a gst-launch description (`videotestsrc ! x264enc ! fakesink`).
    ///
    /// - Throws: ``GStreamerError/missingElements(_:message:)`` when a named element is not installed
    ///   (with the Debian package that provides it when known), or
    ///   ``GStreamerError/invalidDescription(_:)`` with GStreamer's message for any other problem.
    public init(description: String, name: String? = nil) throws(GStreamerError) {
        try GStreamerRuntime.initialize()
        let context = gst_parse_context_new()
        defer { gst_parse_context_free(context) }
        var error: UnsafeMutablePointer<GError>?
        let parsed = gst_parse_launch_full(description, context, GST_PARSE_FLAG_FATAL_ERRORS, &error)
        if let error {
            let message = String(cString: error.pointee.message)
            let missing = Self.missingElements(context)
            let isMissing = error.pointee.domain == gst_parse_error_quark()
                && error.pointee.code == Int32(GST_PARSE_ERROR_NO_SUCH_ELEMENT.rawValue)
            g_error_free(error)
            if let parsed { gst_object_unref(UnsafeMutableRawPointer(parsed)) }
            if isMissing || !missing.isEmpty {
                throw .missingElements(missing, message: message)
            }
            throw .invalidDescription(message)
        }
        guard let parsed else { throw .invalidDescription("GStreamer returned no pipeline") }
        // The result is floating; a single element is wrapped in a pipeline as gst-launch does.
        let element = gst_object_ref_sink(UnsafeMutableRawPointer(parsed)).assumingMemoryBound(to: GstElement.self)
        let pipeline: UnsafeMutablePointer<GstElement>
        if g_type_check_instance_is_a(UnsafeMutableRawPointer(element).assumingMemoryBound(to: GTypeInstance.self), gst_pipeline_get_type()) != 0 {
            pipeline = element
        } else {
            let made = gst_pipeline_new(nil)!
            pipeline = gst_object_ref_sink(UnsafeMutableRawPointer(made)).assumingMemoryBound(to: GstElement.self)
            _ = gst_bin_add(UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self), element)
            gst_object_unref(UnsafeMutableRawPointer(element))
        }
        if let name {
            _ = gst_object_set_name(UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstObject.self), name)
        }

        router = BusRouter()
        busPointer = gst_element_get_bus(pipeline)
        // The sync handler sees each message on the posting thread: nothing queues in the GstBus,
        // nothing is polled, nothing is reordered.
        gst_bus_set_sync_handler(busPointer, busSyncHandler, Unmanaged.passRetained(router).toOpaque(), releaseRouter)
        queue = DispatchQueue(label: "pcast.pipeline")
        Self.alive.add(1, ordering: .relaxed)
        super.init(owning: pipeline)
    }

    deinit {
        // Tear down off the caller's thread: NULL can wait for streaming threads to stop.
        let pointer = UnsafeMutableRawPointer(self.pointer)
        let bus = UnsafeMutableRawPointer(busPointer)
        let router = self.router
        gst_object_ref(pointer)
        nonisolated(unsafe) let handles = (pointer, bus)   // Unchecked: references of our own (pipeline, bus), used by the queue alone once deinit returns.
        queue.async {
            let (pointer, bus) = handles
            gst_element_set_state(pointer.assumingMemoryBound(to: GstElement.self), GST_STATE_NULL)
            gst_bus_set_sync_handler(bus.assumingMemoryBound(to: GstBus.self), nil, nil, nil)
            router.close()
            gst_object_unref(bus)
            gst_object_unref(pointer)
            Pipeline.alive.subtract(1, ordering: .relaxed)
        }
    }

    private static func missingElements(_ context: OpaquePointer?) -> [MissingElement] {
        guard let context, let names = gst_parse_context_get_missing_elements(context) else { return [] }
        defer { g_strfreev(names) }
        var result: [MissingElement] = []
        var index = 0
        while let name = names[index] {
            result.append(MissingElement(name: String(cString: name)))
            index += 1
        }
        return result
    }

    var bin: UnsafeMutablePointer<GstBin> { UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstBin.self) }

    // MARK: State

    /// Changes state on the pipeline's own thread.
    ///
    /// A change GStreamer completes at once returns at once. An asynchronous one (going to PAUSED or
    /// PLAYING waits for every sink to receive a first buffer) is waited for at most `timeout`; pass
    /// `nil` to return as soon as the change is under way, as a pipeline fed by an `appsrc` needs
    /// (its sinks receive nothing until the application pushes).
    ///
    /// - Throws: ``GStreamerError/stateChangeFailed(to:error:)`` with the first error the pipeline
    ///   posted during the change, or ``GStreamerError/stateChangeTimeout(to:after:)``.
    public func setState(_ target: PipelineState, timeout: Duration? = .seconds(10)) async throws(GStreamerError) {
        let result: Result<Void, GStreamerError> = await withCheckedContinuation { continuation in
            queue.async {
                continuation.resume(returning: self.changeStateNow(target, timeout: timeout))
            }
        }
        try result.get()
    }

    /// Runs on `queue` only.
    private func changeStateNow(_ target: PipelineState, timeout: Duration?) -> Result<Void, GStreamerError> {
        if target <= .ready { router.resetEnd() }
        let errorsBefore = router.errorCount
        switch gst_element_set_state(pointer, target.gst) {
        case GST_STATE_CHANGE_FAILURE:
            return .failure(.stateChangeFailed(to: target, error: router.firstError(after: errorsBefore)))
        case GST_STATE_CHANGE_ASYNC:
            guard let timeout else { return .success(()) }
            var current = GST_STATE_VOID_PENDING, pending = GST_STATE_VOID_PENDING
            switch gst_element_get_state(pointer, &current, &pending, timeout.clockTime) {
            case GST_STATE_CHANGE_FAILURE:
                return .failure(.stateChangeFailed(to: target, error: router.firstError(after: errorsBefore)))
            case GST_STATE_CHANGE_ASYNC:
                return .failure(.stateChangeTimeout(to: target, after: timeout))
            default:
                return .success(())
            }
        default:
            return .success(())
        }
    }

    /// Starts (or resumes) the flow of data. See ``setState(_:timeout:)`` for `timeout`.
    public func play(timeout: Duration? = .seconds(10)) async throws(GStreamerError) {
        try await setState(.playing, timeout: timeout)
    }

    /// Pauses (prerolls: sinks hold one buffer). See ``setState(_:timeout:)`` for `timeout`.
    public func pause(timeout: Duration? = .seconds(10)) async throws(GStreamerError) {
        try await setState(.paused, timeout: timeout)
    }

    /// Stops and releases resources (devices, sockets, threads). The pipeline can be played again.
    /// Going to NULL cannot fail.
    public func stop() async {
        _ = await withCheckedContinuation { continuation in
            queue.async {
                continuation.resume(returning: self.changeStateNow(.null, timeout: nil))
            }
        }
    }

    /// The current state (no waiting).
    public var currentState: PipelineState {
        var current = GST_STATE_VOID_PENDING, pending = GST_STATE_VOID_PENDING
        gst_element_get_state(pointer, &current, &pending, 0)
        return PipelineState(current)
    }

    /// Waits for end of stream; throws the first error the pipeline posts instead.
    ///
    /// - Throws: ``GStreamerError/stream(_:)``, ``GStreamerError/timeout(_:)`` or
    ///   ``GStreamerError/cancelled``.
    public func waitUntilEnd(timeout: Duration? = nil) async throws(GStreamerError) {
        try await router.waitForEnd(timeout: timeout).get()
    }

    /// Plays until end of stream, then stops; stops as well when playing or the stream fails.
    ///
    /// ```swift
    /// try await Pipeline(description: "videotestsrc num-buffers=30 ! fakesink").runToEnd(timeout: .seconds(10))
    /// ```
    public func runToEnd(timeout: Duration? = nil) async throws(GStreamerError) {
        do {
            try await play()
            try await waitUntilEnd(timeout: timeout)
        } catch {
            await stop()
            throw error
        }
        await stop()
    }

    /// Asks the sources to finish: an end-of-stream flows down and the bus reports it.
    public func sendEndOfStream() {
        _ = gst_element_send_event(pointer, gst_event_new_eos())
    }

    /// Time the pipeline has spent playing (`nil` before it has a clock).
    public var runningTime: Duration? {
        Duration(clockTime: gst_element_get_current_running_time(pointer))
    }

    /// Current media position, when the pipeline can tell.
    public var position: Duration? {
        var value: gint64 = 0
        guard gst_element_query_position(pointer, GST_FORMAT_TIME, &value) != 0, value >= 0 else { return nil }
        return .nanoseconds(Int64(value))
    }

    /// Media duration, when known (files; not live sources).
    public var mediaDuration: Duration? {
        var value: gint64 = 0
        guard gst_element_query_duration(pointer, GST_FORMAT_TIME, &value) != 0, value >= 0 else { return nil }
        return .nanoseconds(Int64(value))
    }

    // MARK: Elements

    /// The element with this name, searched recursively.
    public func element(named name: String) throws(GStreamerError) -> Element {
        guard let element = gst_bin_get_by_name(bin, name) else { throw .elementNotFound(name) }
        return Element(owning: element)
    }

    /// The `appsink` with this name.
    public func appSink(named name: String) throws(GStreamerError) -> AppSink {
        guard let element = gst_bin_get_by_name(bin, name) else { throw .elementNotFound(name) }
        guard pcast_gst_is_app_sink(UnsafeMutableRawPointer(element)) != 0 else {
            gst_object_unref(UnsafeMutableRawPointer(element))
            throw .wrongElementType(element: name, expected: "an appsink")
        }
        return AppSink(owning: element, router: router)
    }

    /// The `appsrc` with this name.
    public func appSource(named name: String) throws(GStreamerError) -> AppSource {
        guard let element = gst_bin_get_by_name(bin, name) else { throw .elementNotFound(name) }
        guard pcast_gst_is_app_src(UnsafeMutableRawPointer(element)) != 0 else {
            gst_object_unref(UnsafeMutableRawPointer(element))
            throw .wrongElementType(element: name, expected: "an appsrc")
        }
        return AppSource(owning: element, router: router)
    }

    /// Every element inside, nested bins included.
    public var elements: [Element] { descendants }

    /// The sink elements (where data leaves the pipeline).
    public var sinks: [Element] { elements.filter(\.isSink) }
}

// C callbacks for the bus: file-scope, nonisolated; GStreamer calls them from any thread.

private let busSyncHandler: GstBusSyncHandler = { _, message, userData in
    guard let message, let userData else { return GST_BUS_DROP }
    let router = Unmanaged<BusRouter>.fromOpaque(userData).takeUnretainedValue()
    router.deliver(BusMessage(copying: message))
    // A sync handler that returns DROP owns the message: GStreamer does not unref it.
    gst_mini_object_unref(UnsafeMutableRawPointer(message).assumingMemoryBound(to: GstMiniObject.self))
    return GST_BUS_DROP
}

private let releaseRouter: GDestroyNotify = { userData in
    guard let userData else { return }
    Unmanaged<BusRouter>.fromOpaque(userData).release()
}
