import CGStreamer
import Dispatch
import Synchronization

/// What a buffer probe does with the buffer it was shown.
public enum PadProbeAction: Sendable {
    /// Let the (possibly replaced or modified) buffer through.
    case pass
    /// Drop the buffer: downstream never sees it.
    case drop
    /// Let it through and remove the probe.
    case remove
}

/// A pad: where elements link and where buffers can be observed, changed or dropped.
///
/// ```swift
/// let pad = try pipeline.element(named: "conv").staticPad("src")
/// let probe = pad.addBufferProbe { buffer in
///     try? buffer.withUnsafeMutableBytes { $0[0] = 255 }   // rewrite
///     return .pass
/// }
/// probe.remove()
/// ```
/// Unchecked: the GstPad pointer never changes, and GStreamer's objects are thread-safe (they lock themselves).
public final class Pad: @unchecked Sendable, CustomStringConvertible {
    let pointer: UnsafeMutablePointer<GstPad>

    init(owning pointer: UnsafeMutablePointer<GstPad>) {
        self.pointer = pointer
    }

    init(retaining pointer: UnsafeMutablePointer<GstPad>) {
        gst_object_ref(UnsafeMutableRawPointer(pointer))
        self.pointer = pointer
    }

    deinit {
        gst_object_unref(UnsafeMutableRawPointer(pointer))
    }

    public var name: String {
        guard let text = gst_object_get_name(UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstObject.self)) else { return "" }
        defer { g_free(text) }
        return String(cString: text)
    }

    public var description: String { "pad '\(name)'" }

    /// Whether data leaves the element through this pad.
    public var isSource: Bool { gst_pad_get_direction(pointer) == GST_PAD_SRC }

    /// The caps negotiated on the pad, once data flows.
    public var currentCaps: Caps? {
        gst_pad_get_current_caps(pointer).map { Caps(owning: $0) }
    }

    /// Whether the pad is linked to a peer.
    public var isLinked: Bool { gst_pad_is_linked(pointer) != 0 }

    /// Calls `handler` with every buffer that passes the pad, on the streaming thread.
    ///
    /// The handler may read the buffer, write into it (copy-on-write), replace it with another buffer
    /// by assigning to the `inout` parameter, or drop it by returning ``PadProbeAction/drop``. The
    /// buffer is valid for the call; keep a ``Buffer/copy()`` to use it later. Buffer lists (as RTP
    /// payloaders push) are not shown to this probe; count them with ``countBuffers()``.
    ///
    /// The handler runs on GStreamer's streaming thread: keep it short and never block in it.
    @discardableResult
    public func addBufferProbe(_ handler: @escaping @Sendable (inout Buffer) -> PadProbeAction) -> PadProbe {
        let probeContext = BufferProbeContext(handler)
        let context = Unmanaged.passRetained(probeContext).toOpaque()
        let id = gst_pad_add_probe(pointer, GST_PAD_PROBE_TYPE_BUFFER, bufferProbeTrampoline, context, releaseRetainedContext)
        return PadProbe(pad: self, id: id, removed: probeContext.removed)
    }

    /// Waits (blocking the calling thread, never a cooperative-pool one) until nothing is being
    /// pushed through the pad: at once if it is idle, else when the push in progress returns.
    /// False after `timeout`.
    func waitUntilIdle(timeout: DispatchTimeInterval) -> Bool {
        let waiter = IdleWaiter()
        let context = Unmanaged.passRetained(waiter).toOpaque()
        let id = gst_pad_add_probe(pointer, GST_PAD_PROBE_TYPE_IDLE, idleProbeTrampoline, context, releaseRetainedContext)
        let idle = waiter.semaphore.wait(timeout: .now() + timeout) == .success
        if !idle, id != 0 { gst_pad_remove_probe(pointer, id) }
        return idle
    }

    /// Sends end-of-stream into this sink pad, as if its upstream had ended: for a branch that
    /// will never carry data (its element and everything after it see the end, and an element
    /// that waits for all its inputs, a funnel, stops waiting for it). Any thread.
    ///
    /// ```swift
    /// try pipeline.element(named: "unused-pay").staticPad("sink").sendEndOfStream()
    /// ```
    ///
    /// - Returns: whether the pad's element took the event.
    @discardableResult
    public func sendEndOfStream() -> Bool {
        guard !isSource else { return false }
        return gst_pad_send_event(pointer, gst_event_new_eos()) != 0
    }

    /// Calls `handler` once, on the streaming thread, when end-of-stream passes the pad (the
    /// event goes on). For a branch whose end the pipeline's bus may never report (a tee branch
    /// among others, an RTP session that keeps its own end).
    @discardableResult
    public func onEndOfStream(_ handler: @escaping @Sendable () -> Void) -> PadProbe {
        let watcher = EndOfStreamWatcher(handler)
        let context = Unmanaged.passRetained(watcher).toOpaque()
        let id = gst_pad_add_probe(pointer, GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, endOfStreamTrampoline, context, releaseRetainedContext)
        return PadProbe(pad: self, id: id)
    }

    /// Calls `handler`, on the thread that sends it, with the structure of every custom upstream
    /// event named `name` that passes the pad (an element asking the one before it for something:
    /// `GstRTPRetransmissionRequest` from a jitter buffer, `GstForceKeyUnit` from a muxer, …).
    /// ``PadProbeAction/drop`` consumes the event: the upstream element never sees it.
    ///
    /// ```swift
    /// let pad = try jitterBuffer.staticPad("sink")
    /// pad.addUpstreamEventProbe(named: "GstRTPRetransmissionRequest") { request in
    ///     print(request["seqnum"] ?? "?")
    ///     return .pass
    /// }
    /// ```
    @discardableResult
    public func addUpstreamEventProbe(named name: String, _ handler: @escaping @Sendable (Structure) -> PadProbeAction) -> PadProbe {
        let probeContext = EventProbeContext(name: name, handler)
        let context = Unmanaged.passRetained(probeContext).toOpaque()
        let id = gst_pad_add_probe(pointer, GST_PAD_PROBE_TYPE_EVENT_UPSTREAM, upstreamEventTrampoline, context, releaseRetainedContext)
        return PadProbe(pad: self, id: id, removed: probeContext.removed)
    }

    /// Counts the buffers (including those inside buffer lists) that pass the pad.
    public func countBuffers() -> BufferCounter {
        let counter = BufferCounter()
        let context = Unmanaged.passRetained(counter).toOpaque()
        let types = GstPadProbeType(rawValue: GST_PAD_PROBE_TYPE_BUFFER.rawValue | GST_PAD_PROBE_TYPE_BUFFER_LIST.rawValue)
        counter.probe = PadProbe(pad: self, id: gst_pad_add_probe(pointer, types, countingProbeTrampoline, context, releaseRetainedContext))
        return counter
    }
}

/// A probe installed on a pad. It stays until ``remove()`` is called or the pad goes away.
///
/// Holds the pad weakly, so a probe handle never keeps a pipeline alive.
/// Unchecked: a GLib weak reference (thread-safe) and an id, immutable; `removed` is atomic.
public final class PadProbe: @unchecked Sendable {
    private let weakPad: UnsafeMutablePointer<GWeakRef>
    private let id: UInt
    private let removed: ProbeRemoved

    /// `removed`: shared with a handler that can remove its own probe (``PadProbeAction/remove``),
    /// so that removing it again later does not ask GStreamer for a probe it no longer has.
    init(pad: Pad, id: UInt, removed: ProbeRemoved = ProbeRemoved()) {
        self.removed = removed
        weakPad = .allocate(capacity: 1)
        weakPad.initialize(to: GWeakRef())
        g_weak_ref_init(weakPad, UnsafeMutableRawPointer(pad.pointer))
        self.id = id
    }

    deinit {
        g_weak_ref_clear(weakPad)
        weakPad.deallocate()
    }

    /// Removes the probe; later calls, or calls after the pad is gone, do nothing.
    public func remove() {
        guard !removed.flag.exchange(true, ordering: .acquiringAndReleasing), id != 0,
              let pad = g_weak_ref_get(weakPad) else { return }
        gst_pad_remove_probe(pad.assumingMemoryBound(to: GstPad.self), id)
        gst_object_unref(pad)
    }
}

/// Counts buffers passing a pad; read from any thread.
/// Unchecked: the count is atomic; `probe` is set once, when the counter is made.
public final class BufferCounter: @unchecked Sendable {
    private let count = Atomic<Int>(0)
    fileprivate var probe: PadProbe?

    public var value: Int { count.load(ordering: .relaxed) }
    fileprivate func add(_ n: Int) { count.add(n, ordering: .relaxed) }

    /// Stops counting.
    public func stop() { probe?.remove() }
}

private final class IdleWaiter: Sendable {
    let semaphore = DispatchSemaphore(value: 0)
}

/// Whether a probe is gone, set by whichever removes it first: its handle or its own handler.
final class ProbeRemoved: Sendable {
    let flag = Atomic<Bool>(false)
}

private final class BufferProbeContext {
    let handler: @Sendable (inout Buffer) -> PadProbeAction
    let removed = ProbeRemoved()
    init(_ handler: @escaping @Sendable (inout Buffer) -> PadProbeAction) { self.handler = handler }
}

private final class EventProbeContext {
    let name: String
    let handler: @Sendable (Structure) -> PadProbeAction
    let removed = ProbeRemoved()
    init(name: String, _ handler: @escaping @Sendable (Structure) -> PadProbeAction) {
        self.name = name
        self.handler = handler
    }
}

// C callbacks: file-scope and nonisolated, since GStreamer calls them from streaming threads.

private let releaseRetainedContext: GDestroyNotify = { context in
    guard let context else { return }
    Unmanaged<AnyObject>.fromOpaque(context).release()
}

// Unchecked: an immutable `@Sendable` handler and an atomic flag.
private final class EndOfStreamWatcher: @unchecked Sendable {
    let handler: @Sendable () -> Void
    let fired = Atomic<Bool>(false)
    init(_ handler: @escaping @Sendable () -> Void) { self.handler = handler }
}

// GST_PAD_PROBE_INFO_EVENT and GST_EVENT_TYPE are macros: the event is the info's data, its type
// a field of the GstEvent struct.
private let endOfStreamTrampoline: GstPadProbeCallback = { _, info, userData in
    guard let info, let userData, let data = info.pointee.data else { return GST_PAD_PROBE_OK }
    let event = data.assumingMemoryBound(to: GstEvent.self)
    guard event.pointee.type == GST_EVENT_EOS else { return GST_PAD_PROBE_OK }
    let watcher = Unmanaged<EndOfStreamWatcher>.fromOpaque(userData).takeUnretainedValue()
    if !watcher.fired.exchange(true, ordering: .acquiringAndReleasing) { watcher.handler() }
    return GST_PAD_PROBE_OK
}

private let bufferProbeTrampoline: GstPadProbeCallback = { _, info, userData in
    guard let info, let userData, let data = info.pointee.data else { return GST_PAD_PROBE_OK }
    let context = Unmanaged<BufferProbeContext>.fromOpaque(userData).takeUnretainedValue()
    // Take over the probe's reference so the buffer stays writable (refcount 1) for the handler.
    var buffer = Buffer(owning: data.assumingMemoryBound(to: GstBuffer.self))
    info.pointee.data = nil
    let action = context.handler(&buffer)
    // Hand whatever buffer the handler left (the same, a private copy, or a replacement) back.
    info.pointee.data = UnsafeMutableRawPointer(buffer.retainedPointer())
    switch action {
    case .pass: return GST_PAD_PROBE_OK
    case .drop: return GST_PAD_PROBE_DROP
    case .remove:
        // Once marked, the handle's remove() leaves it alone; if the handle got there first it
        // has already removed the probe, and GStreamer ignores this REMOVE.
        context.removed.flag.store(true, ordering: .releasing)
        return GST_PAD_PROBE_REMOVE
    }
}

private let upstreamEventTrampoline: GstPadProbeCallback = { _, info, userData in
    guard let info, let userData, let data = info.pointee.data else { return GST_PAD_PROBE_OK }
    let event = data.assumingMemoryBound(to: GstEvent.self)
    guard event.pointee.type == GST_EVENT_CUSTOM_UPSTREAM, let structure = gst_event_get_structure(event) else { return GST_PAD_PROBE_OK }
    let context = Unmanaged<EventProbeContext>.fromOpaque(userData).takeUnretainedValue()
    guard gst_structure_has_name(structure, context.name) != 0 else { return GST_PAD_PROBE_OK }
    switch context.handler(Structure(copying: structure)) {
    case .pass: return GST_PAD_PROBE_OK
    case .drop: return GST_PAD_PROBE_DROP
    case .remove:
        context.removed.flag.store(true, ordering: .releasing)
        return GST_PAD_PROBE_REMOVE
    }
}

private let idleProbeTrampoline: GstPadProbeCallback = { _, _, userData in
    guard let userData else { return GST_PAD_PROBE_REMOVE }
    Unmanaged<IdleWaiter>.fromOpaque(userData).takeUnretainedValue().semaphore.signal()
    return GST_PAD_PROBE_REMOVE
}

private let countingProbeTrampoline: GstPadProbeCallback = { _, info, userData in
    guard let info, let userData else { return GST_PAD_PROBE_OK }
    let counter = Unmanaged<BufferCounter>.fromOpaque(userData).takeUnretainedValue()
    if info.pointee.type.rawValue & GST_PAD_PROBE_TYPE_BUFFER_LIST.rawValue != 0, let list = info.pointee.data {
        counter.add(Int(gst_buffer_list_length(OpaquePointer(list))))
    } else {
        counter.add(1)
    }
    return GST_PAD_PROBE_OK
}
