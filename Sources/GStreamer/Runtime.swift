import CGStreamer
import Foundation
import Logging
import Synchronization

/// Process-wide GStreamer set-up: initialization, version, and the debug-log bridge into swift-log.
///
/// Every type in this module initializes GStreamer on first use, so calling ``initialize()`` yourself
/// is only needed to surface an initialization failure early:
///
/// ```swift
/// try GStreamerRuntime.initialize()
/// print(GStreamerRuntime.version)   // "GStreamer 1.22.0"
/// ```
///
/// GStreamer's own debug log goes to swift-log (label `gstreamer`, metadata `category` and `object`).
/// Its threshold comes from the environment variable `PCAST_GST_LOG`: a level word (`none`, `error`,
/// `warning`, `fixme`, `info`, `debug`, `log`, `trace`) or a full `GST_DEBUG` specification such as
/// `2,rtpjitterbuffer:6`. The default is `error`: GStreamer's warnings are about its own internals
/// (a resampler's filter taps, a late buffer) and say nothing an application can act on; what
/// fails reaches callers as typed errors. `PCAST_GST_LOG=warning` shows them when debugging.
public enum GStreamerRuntime {
    private static let initialized = Mutex<Result<Void, GStreamerError>?>(nil)

    /// Initializes GStreamer once for the process. Safe to call from any thread, any number of times.
    public static func initialize() throws(GStreamerError) {
        let result = initialized.withLock { state -> Result<Void, GStreamerError> in
            if let state { return state }
            var error: UnsafeMutablePointer<GError>?
            let result: Result<Void, GStreamerError>
            // Already initialised: this code runs inside someone else's GStreamer process (our
            // plugin in gst-launch-1.0 or a Python application), whose logging stays its own.
            let hosted = gst_is_initialized() != 0
            if gst_init_check(nil, nil, &error) != 0 {
                if !hosted { installLogBridge() }
                result = .success(())
            } else {
                let message = error.map { String(cString: $0.pointee.message) } ?? "unknown reason"
                if let error { g_error_free(error) }
                result = .failure(.initializationFailed(message))
            }
            state = result
            return result
        }
        try result.get()
    }

    /// The GStreamer library version, for example `GStreamer 1.22.0`.
    public static var version: String {
        try? initialize()
        guard let text = gst_version_string() else { return "GStreamer (unknown)" }
        defer { g_free(text) }
        return String(cString: text)
    }

    /// Whether an element factory of this name is installed.
    public static func hasElement(_ factoryName: String) -> Bool {
        guard (try? initialize()) != nil else { return false }
        guard let factory = gst_element_factory_find(factoryName) else { return false }
        gst_object_unref(UnsafeMutableRawPointer(factory))
        return true
    }

    /// Reads `PCAST_GST_LOG` and routes GStreamer's debug output to swift-log.
    private static func installLogBridge() {
        let levels = ["none": "0", "error": "1", "warning": "2", "fixme": "3", "info": "4",
                      "debug": "5", "log": "6", "trace": "7"]
        let threshold: String
        if let spec = ProcessInfo.processInfo.environment["PCAST_GST_LOG"] {
            threshold = levels[spec.lowercased()] ?? spec
        } else {
            // Errors only: warnings are GStreamer's internals (`pcast subscribe` printed "audio-resampler
            // can't find exact taps" to every user). The parser logs every description problem at
            // ERROR; they reach callers as typed errors.
            threshold = "1,GST_PIPELINE:0"
        }
        gst_debug_set_active(1)
        // Keep any GST_DEBUG the user set, and apply ours on top (reset=false).
        gst_debug_set_threshold_from_string(threshold, 0)
        gst_debug_remove_log_function(gst_debug_log_default)
        gst_debug_add_log_function(gstreamerLogFunction, nil, nil)
    }
}

extension GStreamerRuntime {
    /// Sends GStreamer's debug messages to handlers `makeHandler` makes (by default they go to
    /// swift-log's global logging system, as any `Logger`'s): a library that keeps its own
    /// logging settings routes GStreamer's through them too.
    public static func setLogHandlerFactory(_ makeHandler: @escaping @Sendable (String) -> any LogHandler) {
        gstreamerLogger.withLock { $0 = bridgeLogger(Logger(label: "gstreamer", factory: makeHandler)) }
    }
}

private func bridgeLogger(_ logger: Logger) -> Logger {
    var logger = logger
    // GStreamer's own per-category thresholds already filtered the message.
    logger.logLevel = .trace
    return logger
}

/// swift-log target for GStreamer's debug messages.
private let gstreamerLogger = Mutex(bridgeLogger(Logger(label: "gstreamer")))

// Called by GStreamer on whichever thread logs: it must stay nonisolated and must not block.
private let gstreamerLogFunction: GstLogFunction = { category, level, file, _, line, object, message, _ in
    guard let category, let message, let text = gst_debug_message_get(message) else { return }
    let swiftLevel: Logger.Level
    switch level {
    case GST_LEVEL_ERROR: swiftLevel = .error
    case GST_LEVEL_WARNING: swiftLevel = .warning
    case GST_LEVEL_FIXME: swiftLevel = .notice
    case GST_LEVEL_INFO: swiftLevel = .info
    case GST_LEVEL_DEBUG: swiftLevel = .debug
    default: swiftLevel = .trace
    }
    // The category's name is NULL once GStreamer is deinitialised (a host's gst_deinit while a
    // thread of ours still logs): seen as a crash at gst-launch-1.0's exit.
    var metadata: Logger.Metadata = ["category": .string(gst_debug_category_get_name(category).map { String(cString: $0) } ?? "unknown")]
    // Read the name field directly, as GStreamer's own logger does: GStreamer often logs while holding
    // the object's lock, so gst_object_get_name (which takes it) would deadlock.
    if let object, g_type_check_instance_is_a(UnsafeMutableRawPointer(object).assumingMemoryBound(to: GTypeInstance.self), gst_object_get_type()) != 0,
       let name = UnsafeMutableRawPointer(object).assumingMemoryBound(to: GstObject.self).pointee.name {
        metadata["object"] = .string(String(cString: name))
    }
    gstreamerLogger.withLock { $0 }.log(
        level: swiftLevel, "\(String(cString: text))", metadata: metadata,
        file: file.map { String(cString: $0) } ?? "gstreamer", function: "", line: UInt(max(line, 0)))
}
