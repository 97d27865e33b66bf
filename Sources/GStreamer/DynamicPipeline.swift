import CGStreamer
import CGStreamerShim
import Dispatch
import Synchronization

extension Element {
    /// Parses a gst-launch fragment into a bin whose unlinked pads (of the directions in `ghosting`)
    /// are ghosted, ready to be attached to a running pipeline with ``Pipeline/attach(_:after:before:)``.
    ///
    /// A source bin whose first element has pads that appear later (`uridecodebin ! queue`) must
    /// ghost only source pads: the pending link to the queue's sink pad would otherwise find that pad
    /// taken by a ghost pad, and the stream would fail as not linked.
    ///
    /// ```swift
    /// let source = try Element.bin(description: "videotestsrc is-live=true pattern=ball")
    /// ```
    ///
    /// - Throws: ``GStreamerError/missingElements(_:message:)`` or ``GStreamerError/invalidDescription(_:)``.
    public static func bin(description: String, name: String? = nil, ghosting: PadDirections = .all) throws(GStreamerError) -> Element {
        try GStreamerRuntime.initialize()
        let context = gst_parse_context_new()
        defer { gst_parse_context_free(context) }
        var error: UnsafeMutablePointer<GError>?
        let parsed = gst_parse_bin_from_description_full(description, 0, context, GST_PARSE_FLAG_FATAL_ERRORS, &error)
        if let error {
            let message = String(cString: error.pointee.message)
            var missing: [MissingElement] = []
            if let names = gst_parse_context_get_missing_elements(context) {
                var index = 0
                while let name = names[index] { missing.append(MissingElement(name: String(cString: name))); index += 1 }
                g_strfreev(names)
            }
            let isMissing = error.pointee.domain == gst_parse_error_quark()
                && error.pointee.code == Int32(GST_PARSE_ERROR_NO_SUCH_ELEMENT.rawValue)
            g_error_free(error)
            if let parsed { gst_object_unref(UnsafeMutableRawPointer(parsed)) }
            if isMissing || !missing.isEmpty { throw .missingElements(missing, message: message) }
            throw .invalidDescription(message)
        }
        guard let parsed else { throw .invalidDescription("GStreamer returned no bin") }
        let element = Element(owning: gst_object_ref_sink(UnsafeMutableRawPointer(parsed)).assumingMemoryBound(to: GstElement.self))
        if let name {
            _ = gst_object_set_name(UnsafeMutableRawPointer(element.pointer).assumingMemoryBound(to: GstObject.self), name)
        }
        element.ghostUnlinkedPads(ghosting)
        return element
    }

    /// Which pad directions to ghost.
    public struct PadDirections: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        public static let sources = PadDirections(rawValue: 1)
        public static let sinks = PadDirections(rawValue: 2)
        public static let all: PadDirections = [.sources, .sinks]
    }

    private func ghostUnlinkedPads(_ directions: PadDirections) {
        let bin = UnsafeMutableRawPointer(pointer)
        var sourceCount = 0, sinkCount = 0
        for child in descendants where child.parentPointer == bin {
            for pad in child.pads where !pad.isLinked {
                let isSource = pad.isSource
                guard directions.contains(isSource ? .sources : .sinks) else { continue }
                let name = isSource ? (sourceCount == 0 ? "src" : "src_\(sourceCount)") : (sinkCount == 0 ? "sink" : "sink_\(sinkCount)")
                if isSource { sourceCount += 1 } else { sinkCount += 1 }
                if let ghost = gst_ghost_pad_new(name, pad.pointer) {
                    _ = gst_element_add_pad(pointer, ghost)
                }
            }
        }
    }

    var parentPointer: UnsafeMutableRawPointer? {
        guard let parent = gst_object_get_parent(UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstObject.self)) else { return nil }
        defer { gst_object_unref(UnsafeMutableRawPointer(parent)) }
        return UnsafeMutableRawPointer(parent)
    }

    /// The elements inside this one when it is a bin (nested bins included); empty otherwise.
    public var descendants: [Element] {
        guard pcast_gst_is_bin(UnsafeMutableRawPointer(pointer)) != 0,
              let iterator = gst_bin_iterate_recurse(UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstBin.self)) else { return [] }
        defer { gst_iterator_free(iterator) }
        var result: [Element] = []
        var value = GValue()
        loop: while true {
            switch gst_iterator_next(iterator, &value) {
            case GST_ITERATOR_OK:
                if let object = g_value_get_object(&value) {
                    result.append(Element(retaining: object.assumingMemoryBound(to: GstElement.self)))
                }
                g_value_reset(&value)
            case GST_ITERATOR_RESYNC:
                result.removeAll()
                gst_iterator_resync(iterator)
            default:
                break loop
            }
        }
        g_value_unset(&value)
        return result
    }
}

extension Pad {
    /// A time offset added to the running time of everything that passes (a source attached to a
    /// pipeline that has been playing for a while starts its timestamps at zero; offset it by the
    /// pipeline's running time).
    public var offset: Duration {
        get { .nanoseconds(Int64(gst_pad_get_offset(pointer))) }
        set {
            let (seconds, attoseconds) = newValue.components
            gst_pad_set_offset(pointer, Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
        }
    }
}

extension Pipeline {
    /// Runs the pipeline on the system clock, so removing a sink that provided the clock (an audio
    /// sink) does not make the pipeline lose its clock. Call before playing.
    public func useSystemClock() {
        let clock = gst_system_clock_obtain()
        gst_pipeline_use_clock(UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstPipeline.self), clock)
        if let clock { gst_object_unref(UnsafeMutableRawPointer(clock)) }
    }

    /// Adds `element` (typically a bin from ``Element/bin(description:name:)``) to the pipeline,
    /// links `upstream → element → downstream` (either may be `nil`), and brings it to the pipeline's
    /// state: a branch on a `tee`, a source in front of a converter, while the pipeline plays.
    ///
    /// Runs on the pipeline's own thread. On failure the element is taken out again.
    ///
    /// - Throws: ``GStreamerError/linkFailed(from:to:)`` or ``GStreamerError/stateChangeFailed(to:error:)``.
    public func attach(_ element: Element, after upstream: Element? = nil, before downstream: Element? = nil) async throws(GStreamerError) {
        let result: Result<Void, GStreamerError> = await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: self.attachNow(element, after: upstream, before: downstream)) }
        }
        try result.get()
    }

    private func attachNow(_ element: Element, after upstream: Element?, before downstream: Element?) -> Result<Void, GStreamerError> {
        // Every Element wrapper owns a full (sunk) reference, so gst_bin_add adds the bin's own:
        // no extra reference here (one was taken before, and every consumer bin leaked with it).
        guard gst_bin_add(bin, element.pointer) != 0 else {
            return .failure(.linkFailed(from: element.name, to: name))
        }
        func undo() {
            gst_element_set_state(element.pointer, GST_STATE_NULL)
            _ = gst_bin_remove(bin, element.pointer)
        }
        // Order matters while the pipeline plays. Downstream first, so a source inside `element`
        // never pushes into an unlinked pad; then the state, so its sink pads are active; only
        // then upstream. Linked to a running `tee` while still stopped, the element's inactive
        // sink pad answers `flushing`, and a tee passes that upstream: the live source pauses for
        // good and the whole track stops (about one attach in a hundred did).
        if let downstream, gst_element_link(element.pointer, downstream.pointer) == 0 {
            undo()
            return .failure(.linkFailed(from: element.name, to: downstream.name))
        }
        let errorsBefore = router.errorCount
        if gst_element_sync_state_with_parent(element.pointer) == 0 {
            if let downstream { gst_element_unlink(element.pointer, downstream.pointer) }
            undo()
            return .failure(.stateChangeFailed(to: currentState, error: router.firstError(after: errorsBefore)))
        }
        if let upstream, gst_element_link(upstream.pointer, element.pointer) == 0 {
            if let downstream { gst_element_unlink(element.pointer, downstream.pointer) }
            undo()
            return .failure(.linkFailed(from: upstream.name, to: element.name))
        }
        // Elements added to a live pipeline get its latency only when it is distributed again.
        if currentState == .playing { _ = gst_bin_recalculate_latency(bin) }
        return .success(())
    }

    /// Takes `element` out of the running pipeline: data it would still push is dropped, it is
    /// unlinked from its neighbours (releasing `tee` request pads), stopped, and removed.
    /// An element that is not in this pipeline is left alone.
    public func detach(_ element: Element) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async {
                self.detachNow(element)
                continuation.resume()
            }
        }
    }

    private func detachNow(_ element: Element) {
        guard let parent = gst_object_get_parent(UnsafeMutableRawPointer(element.pointer).assumingMemoryBound(to: GstObject.self)) else { return }
        defer { gst_object_unref(UnsafeMutableRawPointer(parent)) }
        let parentAddress = Int(bitPattern: parent), selfAddress = Int(bitPattern: self.pointer)
        guard parentAddress == selfAddress else { return }
        // Drop what the element's source pads still push, so the source does not fail with not-linked.
        var probes: [PadProbe] = []
        for pad in element.pads where pad.isSource {
            probes.append(pad.addBufferProbe { _ in .drop })
        }
        for pad in element.pads {
            guard let peer = gst_pad_get_peer(pad.pointer) else { continue }
            if pad.isSource { _ = gst_pad_unlink(pad.pointer, peer) } else { _ = gst_pad_unlink(peer, pad.pointer) }
            // Release the neighbour's request pad (tee src_N, mixer sink_N).
            if let template = gst_pad_get_pad_template(peer) {
                if template.pointee.presence == GST_PAD_REQUEST,
                   let owner = gst_pad_get_parent_element(peer) {
                    gst_element_release_request_pad(owner, peer)
                    gst_object_unref(UnsafeMutableRawPointer(owner))
                }
                gst_object_unref(UnsafeMutableRawPointer(template))
            }
            gst_object_unref(UnsafeMutableRawPointer(peer))
        }
        // A push that began before the unlink may still be inside the element: stopping it now
        // would answer `flushing` to a tee with one branch left, which passes that upstream and
        // pauses the source. Unlinked, the pads get nothing new; wait for what is in flight.
        for pad in element.pads where !pad.isSource {
            _ = pad.waitUntilIdle(timeout: .milliseconds(500))
        }
        gst_element_set_state(element.pointer, GST_STATE_NULL)
        _ = gst_bin_remove(bin, element.pointer)
        probes.forEach { $0.remove() }
    }
}

/// What a latency query reports.
public struct Latency: Sendable, Hashable {
    public var live: Bool
    public var minimum: Duration
    public var maximum: Duration?
}

extension Element {
    /// Asks the element how much latency it (and what is upstream of it) adds; nil when it cannot tell.
    public func queryLatency() -> Latency? {
        guard let query = gst_query_new_latency() else { return nil }
        defer { gst_mini_object_unref(UnsafeMutableRawPointer(query).assumingMemoryBound(to: GstMiniObject.self)) }
        guard gst_element_query(pointer, query) != 0 else { return nil }
        var live: gboolean = 0
        var minimum: GstClockTime = 0, maximum: GstClockTime = 0
        gst_query_parse_latency(query, &live, &minimum, &maximum)
        return Latency(live: live != 0, minimum: Duration(clockTime: minimum) ?? .zero, maximum: Duration(clockTime: maximum))
    }
}

extension Pipeline {
    /// The clock time at which running time zero was (set when the pipeline starts playing).
    public var baseTime: Duration? {
        Duration(clockTime: gst_element_get_base_time(pointer))
    }

    /// The latency of the running pipeline (what its live sources and sinks add: the time from a
    /// buffer's running time to its rendering), as a latency query reports it; nil before playing.
    public var latency: Duration? {
        queryLatency()?.minimum
    }

    /// Makes every sink render each buffer `latency` after its running time, instead of the
    /// latency GStreamer's query finds, from now on (also for sinks that join later). For
    /// pipelines whose query answer misleads: elements that over-report (`opusdec` with in-band
    /// FEC claims the largest Opus frame, 120 ms, where it holds one packet), or sinks joining a
    /// playing pipeline (each join queries again, and the answer depends on which sinks are ready
    /// to answer yet). Change it with ``FixedLatency/set(_:)``; one per pipeline.
    ///
    /// ```swift
    /// let latency = pipeline.fixLatency(.milliseconds(40))
    /// latency.set(.milliseconds(80))     // sinks told at once
    /// ```
    public func fixLatency(_ latency: Duration) -> FixedLatency {
        let fixed = FixedLatency(latency, pipeline: self)
        let box = Unmanaged.passRetained(fixed).toOpaque()
        let callback: @convention(c) (UnsafeMutablePointer<GstElement>?, UnsafeMutableRawPointer?) -> gboolean = doLatencyTrampoline
        // The bin's `do-latency` signal stops at the first handler that returns TRUE, so the
        // pipeline's own handler (query, then distribute) no longer runs. g_signal_connect is a
        // macro over g_signal_connect_data; the box is released with the connection.
        g_signal_connect_data(UnsafeMutableRawPointer(pointer), "do-latency", unsafeBitCast(callback, to: GCallback.self), box,
                              fixedLatencyRelease, GConnectFlags(rawValue: 0))
        _ = gst_bin_recalculate_latency(bin)
        return fixed
    }
}

/// The latency a pipeline's sinks are told (``Pipeline/fixLatency(_:)``).
/// Unchecked: the latency is in a `Mutex`; the pipeline is a weak reference read-only after `init`.
public final class FixedLatency: @unchecked Sendable {
    private let value: Mutex<Duration>
    /// Weak: the pipeline holds this through its signal connection.
    private weak var pipeline: Pipeline?

    fileprivate init(_ latency: Duration, pipeline: Pipeline) {
        value = Mutex(latency)
        self.pipeline = pipeline
    }

    /// What the sinks are told now.
    public var latency: Duration { value.withLock { $0 } }

    /// Tells the sinks a new latency now.
    public func set(_ latency: Duration) {
        value.withLock { $0 = latency }
        if let pipeline { _ = gst_bin_recalculate_latency(pipeline.bin) }
    }
}

private func doLatencyTrampoline(_ bin: UnsafeMutablePointer<GstElement>?, _ data: UnsafeMutableRawPointer?) -> gboolean {
    guard let bin, let data else { return 0 }
    let latency = Unmanaged<FixedLatency>.fromOpaque(data).takeUnretainedValue().latency
    // What the default handler does with the answer of its query: a latency event to every sink.
    _ = gst_element_send_event(bin, gst_event_new_latency(latency.clockTime))
    return 1
}

private func fixedLatencyRelease(_ data: UnsafeMutableRawPointer?, _ closure: UnsafeMutablePointer<GClosure>?) {
    guard let data else { return }
    Unmanaged<FixedLatency>.fromOpaque(data).release()
}
