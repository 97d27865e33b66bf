import CGStreamer

extension Pad {
    /// Calls `handler` with the caps of every caps event that passes the pad going downstream, on
    /// the streaming thread, before the event reaches the peer.
    ///
    /// The handler sees caps the element sets and caps pushed with ``pushCaps(_:)`` alike. A probe
    /// added after negotiation does not see the caps already set: read ``currentCaps`` for those.
    ///
    /// ```swift
    /// let pad = try pipeline.element(named: "hook").staticPad("src")
    /// let probe = pad.addCapsProbe { caps in print("now:", caps) }
    /// ```
    @discardableResult
    public func addCapsProbe(_ handler: @escaping @Sendable (Caps) -> Void) -> PadProbe {
        let context = Unmanaged.passRetained(CapsProbeContext(handler)).toOpaque()
        let id = gst_pad_add_probe(pointer, GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, capsProbeTrampoline, context, releaseCapsProbeContext)
        return PadProbe(pad: self, id: id)
    }

    /// Sends new caps downstream from this source pad: the caps that the buffers pushed after it
    /// carry. Call it on the streaming thread (from a buffer probe on this pad), before the first
    /// buffer of the new format.
    ///
    /// ```swift
    /// pad.addBufferProbe { buffer in
    ///     // … buffer replaced by a 640×360 frame …
    ///     _ = pad.pushCaps(smallerCaps)
    ///     return .pass
    /// }
    /// ```
    ///
    /// - Returns: whether downstream accepted them.
    @discardableResult
    public func pushCaps(_ caps: Caps) -> Bool {
        guard isSource, let event = gst_event_new_caps(caps.pointer) else { return false }
        return gst_pad_push_event(pointer, event) != 0
    }

    /// Whether the pad's peer would accept these caps now (an accept-caps query), without sending them.
    ///
    /// ```swift
    /// if pad.peerAcceptsCaps(try Caps("video/x-raw,format=BGRA,width=640,height=360")) { … }
    /// ```
    public func peerAcceptsCaps(_ caps: Caps) -> Bool {
        gst_pad_peer_query_accept_caps(pointer, caps.pointer) != 0
    }
}

private final class CapsProbeContext {
    let handler: @Sendable (Caps) -> Void
    init(_ handler: @escaping @Sendable (Caps) -> Void) { self.handler = handler }
}

// C callbacks: file-scope and nonisolated, since GStreamer calls them from streaming threads.

private let releaseCapsProbeContext: GDestroyNotify = { context in
    guard let context else { return }
    Unmanaged<CapsProbeContext>.fromOpaque(context).release()
}

private let capsProbeTrampoline: GstPadProbeCallback = { _, info, userData in
    guard let info, let userData, let event = gst_pad_probe_info_get_event(info),
          event.pointee.type == GST_EVENT_CAPS else { return GST_PAD_PROBE_OK }
    var caps: UnsafeMutablePointer<GstCaps>?
    gst_event_parse_caps(event, &caps)
    guard let caps else { return GST_PAD_PROBE_OK }
    Unmanaged<CapsProbeContext>.fromOpaque(userData).takeUnretainedValue().handler(Caps(retaining: caps))
    return GST_PAD_PROBE_OK
}
