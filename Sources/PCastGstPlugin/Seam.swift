// The Swift side of the GStreamer plugin: the @_cdecl functions the C elements call (declared for
// C in Sources/CPCastGstPlugin/swift_seam.h), each handing over to one element's Swift object.
// The C side owns the objects: made in instance_init (passRetained), released in finalize.
import CGStreamer
import CPCastGstPlugin
import Foundation

@_cdecl("pcast_swift_plugin_init")
func pluginInit() -> gboolean {
    // Runs in gst-plugin-scanner too: nothing to do but say the Swift runtime is here.
    1
}

// MARK: pcastsink

@_cdecl("pcast_swift_sink_new")
func sinkNew(_ element: UnsafeMutablePointer<GstElement>) -> UnsafeMutableRawPointer {
    Unmanaged.passRetained(SinkElement(element: element)).toOpaque()
}

@_cdecl("pcast_swift_sink_free")
func sinkFree(_ context: UnsafeMutableRawPointer?) {
    guard let context else { return }
    Unmanaged<SinkElement>.fromOpaque(context).release()
}

@_cdecl("pcast_swift_sink_start")
func sinkStart(_ context: UnsafeMutableRawPointer, _ settings: UnsafePointer<PCastSinkSettings>) -> gboolean {
    sink(context).start(SinkElement.Settings(settings.pointee)) ? 1 : 0
}

@_cdecl("pcast_swift_sink_sample")
func sinkSample(_ context: UnsafeMutableRawPointer, _ kind: PCastPadKind, _ sample: OpaquePointer) {
    sink(context).sample(kind, sample)
}

@_cdecl("pcast_swift_sink_muxed")
func sinkMuxed(_ context: UnsafeMutableRawPointer, _ sample: OpaquePointer) {
    sink(context).muxed(sample)
}

@_cdecl("pcast_swift_sink_eos")
func sinkEndOfStream(_ context: UnsafeMutableRawPointer, _ kind: PCastPadKind) {
    sink(context).endOfStream(kind)
}

@_cdecl("pcast_swift_sink_stop")
func sinkStop(_ context: UnsafeMutableRawPointer) {
    sink(context).stop()
}

private func sink(_ context: UnsafeMutableRawPointer) -> SinkElement {
    Unmanaged<SinkElement>.fromOpaque(context).takeUnretainedValue()
}

// MARK: pcastsrc

@_cdecl("pcast_swift_src_new")
func sourceNew(_ element: UnsafeMutablePointer<GstElement>) -> UnsafeMutableRawPointer {
    Unmanaged.passRetained(SourceElement(element: element)).toOpaque()
}

@_cdecl("pcast_swift_src_free")
func sourceFree(_ context: UnsafeMutableRawPointer?) {
    guard let context else { return }
    Unmanaged<SourceElement>.fromOpaque(context).release()
}

@_cdecl("pcast_swift_src_start")
func sourceStart(_ context: UnsafeMutableRawPointer, _ settings: UnsafePointer<PCastSourceSettings>) -> gboolean {
    source(context).start(SourceElement.Settings(settings.pointee)) ? 1 : 0
}

@_cdecl("pcast_swift_src_stop")
func sourceStop(_ context: UnsafeMutableRawPointer) {
    source(context).stop()
}

private func source(_ context: UnsafeMutableRawPointer) -> SourceElement {
    Unmanaged<SourceElement>.fromOpaque(context).takeUnretainedValue()
}

// MARK: Shared

/// A strong reference to an element for work in flight (a task that outlives a state change
/// must not touch a freed element).
/// Unchecked: one strong reference to a GstElement, immutable; GStreamer's objects are thread-safe.
final class ElementReference: @unchecked Sendable {
    let element: UnsafeMutablePointer<GstElement>

    init(_ element: UnsafeMutablePointer<GstElement>) {
        self.element = element
        _ = gst_object_ref(UnsafeMutableRawPointer(element))
    }

    deinit { gst_object_unref(UnsafeMutableRawPointer(element)) }

    func post(_ name: String, _ fields: [(String, String)] = []) {
        let first = fields.first, second = fields.dropFirst().first
        pcast_element_post(element, name, first?.0, first?.1, second?.0, second?.1)
    }

    /// Whether every property has a value; else an element error naming the missing ones.
    func requireProperties(_ element: String, _ values: KeyValuePairs<String, String?>) -> Bool {
        let missing = values.filter { $0.value == nil }.map(\.key)
        guard missing.isEmpty else {
            fail("\(element): set \(missing.joined(separator: ", "))", debug: "properties missing at READY → PAUSED")
            return false
        }
        return true
    }

    /// An element error: gst-launch prints `message` and exits non-zero.
    func fail(_ message: String, debug: String = "") {
        pcast_element_post_error(element, message, debug)
    }
}

extension String {
    /// A C string from the settings, nil when NULL or empty.
    init?(settingsValue pointer: UnsafePointer<CChar>?) {
        guard let pointer, pointer.pointee != 0 else { return nil }
        self.init(cString: pointer)
    }
}

/// Runs `body` in a task and waits for it on this (GStreamer's, never the cooperative pool's)
/// thread, at most `timeout`.
func waitBriefly(_ timeout: Duration = .seconds(5), _ body: @escaping @Sendable () async -> Void) {
    let done = DispatchSemaphore(value: 0)
    Task {
        await body()
        done.signal()
    }
    let (seconds, attoseconds) = timeout.components
    _ = done.wait(timeout: .now() + .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)))
}
