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
        // G_OBJECT_TYPE is a macro: the type is read from the instance's class.
        guard let type = object.pointee.g_type_instance.g_class?.pointee.g_type, g_signal_lookup("source-setup", type) != 0 else {
            throw .unknownSignal(element: name, signal: "source-setup")
        }
        let box = Unmanaged.passRetained(SourceSetupHandler(configure)).toOpaque()
        let callback: @convention(c) (UnsafeMutablePointer<GstElement>?, UnsafeMutablePointer<GstElement>?, UnsafeMutableRawPointer?) -> Void = sourceSetupTrampoline
        // g_signal_connect is a macro over g_signal_connect_data; the handler box is released by
        // the destroy notify when the element (and so the connection) goes.
        g_signal_connect_data(UnsafeMutableRawPointer(pointer), "source-setup", unsafeBitCast(callback, to: GCallback.self), box,
                              sourceSetupRelease, GConnectFlags(rawValue: 0))
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

private final class SourceSetupHandler: @unchecked Sendable {
    let configure: @Sendable (Element) -> Void
    init(_ configure: @escaping @Sendable (Element) -> Void) { self.configure = configure }
}

private func sourceSetupTrampoline(_ bin: UnsafeMutablePointer<GstElement>?, _ source: UnsafeMutablePointer<GstElement>?,
                                   _ data: UnsafeMutableRawPointer?) {
    guard let source, let data else { return }
    Unmanaged<SourceSetupHandler>.fromOpaque(data).takeUnretainedValue().configure(Element(retaining: source))
}

private func sourceSetupRelease(_ data: UnsafeMutableRawPointer?, _ closure: UnsafeMutablePointer<GClosure>?) {
    guard let data else { return }
    Unmanaged<SourceSetupHandler>.fromOpaque(data).release()
}
