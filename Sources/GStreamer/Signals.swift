import CGStreamer
import CGStreamerShim

extension Element {
    /// Calls `configure` with the source element that `urisourcebin`, `uridecodebin` or `playbin`
    /// creates for its URI (their `source-setup` signal), before that source opens anything: the
    /// place to set properties the URI cannot carry (`automatic-redirect`, `extra-headers`, …).
    /// `configure` runs on the thread that changes the bin's state; it must not block.
    ///
    /// ```swift
    /// try pipeline.element(named: "src").onSourceSetup { source in
    ///     if source.hasProperty("automatic-redirect") { try? source.set("automatic-redirect", false) }
    /// }
    /// ```
    ///
    /// - Throws: ``GStreamerError/unknownSignal(element:signal:)`` when the element has no such signal.
    public func onSourceSetup(_ configure: @escaping @Sendable (Element) -> Void) throws(GStreamerError) {
        try requireSignal("source-setup")
        let box = Unmanaged.passRetained(ElementHandler(configure)).toOpaque()
        let callback: @convention(c) (UnsafeMutablePointer<GstElement>?, UnsafeMutablePointer<GstElement>?, UnsafeMutableRawPointer?) -> Void = sourceSetupTrampoline
        // g_signal_connect is a macro over g_signal_connect_data; the handler box is released by
        // the destroy notify when the element (and so the connection) goes.
        g_signal_connect_data(UnsafeMutableRawPointer(pointer), "source-setup", unsafeBitCast(callback, to: GCallback.self), box,
                              elementHandlerRelease, GConnectFlags(rawValue: 0))
    }

    /// Calls `presented` with each buffer a `fakesink` (or `identity`) hands off: for a
    /// synchronised sink that is after its clock wait, the moment the frame is presented. Sets the
    /// element's `signal-handoffs`. `presented` runs on the streaming thread; it must not block.
    ///
    /// - Throws: ``GStreamerError/unknownSignal(element:signal:)`` when the element has no `handoff` signal.
    public func onHandoff(_ presented: @escaping @Sendable (Buffer) -> Void) throws(GStreamerError) {
        try requireSignal("handoff")
        try set("signal-handoffs", true)
        let box = Unmanaged.passRetained(HandoffHandler(presented)).toOpaque()
        let callback: @convention(c) (UnsafeMutablePointer<GstElement>?, UnsafeMutablePointer<GstBuffer>?, UnsafeMutablePointer<GstPad>?,
                                      UnsafeMutableRawPointer?) -> Void = handoffTrampoline
        // As above: g_signal_connect_data, the box released with the connection.
        g_signal_connect_data(UnsafeMutableRawPointer(pointer), "handoff", unsafeBitCast(callback, to: GCallback.self), box,
                              handoffRelease, GConnectFlags(rawValue: 0))
    }

    /// Calls `configure` with each jitter buffer `rtpbin` makes (its `new-jitterbuffer` signal)
    /// and the number of its RTP session (`recv_rtp_sink_N`), before the buffer's first packet
    /// reaches it: the place for per-stream settings that must hold from the first packet
    /// (`faststart-min-packets`, retransmission timing, a latency of its own). `configure` runs on
    /// a streaming thread; it must not block.
    ///
    /// - Throws: ``GStreamerError/unknownSignal(element:signal:)`` when the element has no such signal.
    public func onNewJitterBuffer(_ configure: @escaping @Sendable (Element, _ session: UInt32) -> Void) throws(GStreamerError) {
        try requireSignal("new-jitterbuffer")
        let box = Unmanaged.passRetained(JitterBufferHandler(configure)).toOpaque()
        let callback: @convention(c) (UnsafeMutablePointer<GstElement>?, UnsafeMutablePointer<GstElement>?, guint, guint,
                                      UnsafeMutableRawPointer?) -> Void = newJitterBufferTrampoline
        // As above: g_signal_connect_data, the box released with the connection.
        g_signal_connect_data(UnsafeMutableRawPointer(pointer), "new-jitterbuffer", unsafeBitCast(callback, to: GCallback.self), box,
                              jitterBufferHandlerRelease, GConnectFlags(rawValue: 0))
    }

    /// Throws ``GStreamerError/unknownSignal(element:signal:)`` unless the element has `signal`.
    private func requireSignal(_ signal: String) throws(GStreamerError) {
        // G_OBJECT_TYPE is a macro: the type is read from the instance's class.
        guard let type = object.pointee.g_type_instance.g_class?.pointee.g_type, g_signal_lookup(signal, type) != 0 else {
            throw .unknownSignal(element: name, signal: signal)
        }
    }

    /// Sets a property from its textual form, as `gst-launch-1.0` would (any type GStreamer can
    /// deserialise, structures and caps included: `extra-headers` = `headers, Host=(string)a.example`).
    ///
    /// - Throws: ``GStreamerError/unknownProperty(element:property:)`` when there is no such property.
    public func setParsed(_ property: String, _ text: String) throws(GStreamerError) {
        guard hasProperty(property) else { throw .unknownProperty(element: name, property: property) }
        gst_util_set_object_arg(object, property, text)
    }
}

// Unchecked: its one stored property is an immutable `@Sendable` closure.
private final class ElementHandler: @unchecked Sendable {
    let configure: @Sendable (Element) -> Void
    init(_ configure: @escaping @Sendable (Element) -> Void) { self.configure = configure }
}

private func sourceSetupTrampoline(_ bin: UnsafeMutablePointer<GstElement>?, _ source: UnsafeMutablePointer<GstElement>?,
                                   _ data: UnsafeMutableRawPointer?) {
    guard let source, let data else { return }
    Unmanaged<ElementHandler>.fromOpaque(data).takeUnretainedValue().configure(Element(retaining: source))
}

// Unchecked: its one stored property is an immutable @Sendable closure; the class exists to be boxed
// through GLib's `gpointer`.
private final class JitterBufferHandler: @unchecked Sendable {
    let configure: @Sendable (Element, UInt32) -> Void
    init(_ configure: @escaping @Sendable (Element, UInt32) -> Void) { self.configure = configure }
}

private func newJitterBufferTrampoline(_ bin: UnsafeMutablePointer<GstElement>?, _ jitterBuffer: UnsafeMutablePointer<GstElement>?,
                                       _ session: guint, _ ssrc: guint, _ data: UnsafeMutableRawPointer?) {
    guard let jitterBuffer, let data else { return }
    Unmanaged<JitterBufferHandler>.fromOpaque(data).takeUnretainedValue().configure(Element(retaining: jitterBuffer), UInt32(session))
}

private func jitterBufferHandlerRelease(_ data: UnsafeMutableRawPointer?, _ closure: UnsafeMutablePointer<GClosure>?) {
    guard let data else { return }
    Unmanaged<JitterBufferHandler>.fromOpaque(data).release()
}

private func elementHandlerRelease(_ data: UnsafeMutableRawPointer?, _ closure: UnsafeMutablePointer<GClosure>?) {
    guard let data else { return }
    Unmanaged<ElementHandler>.fromOpaque(data).release()
}

// Unchecked: its one stored property is an immutable `@Sendable` closure.
private final class HandoffHandler: @unchecked Sendable {
    let presented: @Sendable (Buffer) -> Void
    init(_ presented: @escaping @Sendable (Buffer) -> Void) { self.presented = presented }
}

private func handoffTrampoline(_ sink: UnsafeMutablePointer<GstElement>?, _ buffer: UnsafeMutablePointer<GstBuffer>?,
                               _ pad: UnsafeMutablePointer<GstPad>?, _ data: UnsafeMutableRawPointer?) {
    guard let buffer, let data else { return }
    // The signal lends the buffer: a reference of our own for as long as the handler keeps it.
    Unmanaged<HandoffHandler>.fromOpaque(data).takeUnretainedValue().presented(Buffer(retaining: buffer))
}

private func handoffRelease(_ data: UnsafeMutableRawPointer?, _ closure: UnsafeMutablePointer<GClosure>?) {
    guard let data else { return }
    Unmanaged<HandoffHandler>.fromOpaque(data).release()
}
