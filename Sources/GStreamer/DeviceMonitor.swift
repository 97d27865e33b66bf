import CGStreamer
import Dispatch

/// A capture device GStreamer's device monitor found (camera, microphone, monitor of an output).
/// Unchecked: immutable: the GstDevice pointer and what was read from it at creation.
public final class Device: @unchecked Sendable, CustomStringConvertible {
    /// What kind of source it is.
    public enum Kind: String, Sendable, Hashable {
        case video, audio
    }

    private let pointer: UnsafeMutablePointer<GstDevice>
    public let displayName: String
    /// GStreamer's class, for example `Video/Source` or `Audio/Source`.
    public let deviceClass: String
    public let kind: Kind
    /// Formats the device can produce.
    public let caps: Caps?
    /// Provider properties (`device.path`, `api.v4l2.cap.card`, `device.api` …).
    public let properties: Structure?

    init(owning pointer: UnsafeMutablePointer<GstDevice>) {
        self.pointer = pointer
        displayName = Self.string(gst_device_get_display_name(pointer)) ?? "unknown"
        deviceClass = Self.string(gst_device_get_device_class(pointer)) ?? ""
        kind = deviceClass.hasPrefix("Video") ? .video : .audio
        caps = gst_device_get_caps(pointer).map { Caps(owning: $0) }
        properties = gst_device_get_properties(pointer).map { structure in
            defer { gst_structure_free(structure) }
            return Structure(copying: structure)
        }
    }

    deinit { gst_object_unref(UnsafeMutableRawPointer(pointer)) }

    private static func string(_ text: UnsafeMutablePointer<gchar>?) -> String? {
        guard let text else { return nil }
        defer { g_free(text) }
        return String(cString: text)
    }

    public var description: String { "\(deviceClass): \(displayName)" }

    /// A source element configured for this device (`v4l2src device=/dev/video0`, `pulsesrc device=…`).
    public func makeElement(name: String? = nil) throws(GStreamerError) -> Element {
        guard let element = gst_device_create_element(pointer, name) else {
            throw .elementFactoryMissing(MissingElement(name: deviceClass))
        }
        return Element(owning: gst_object_ref_sink(UnsafeMutableRawPointer(element)).assumingMemoryBound(to: GstElement.self))
    }
}

/// Lists capture devices through GStreamer's device providers (V4L2, PulseAudio/PipeWire, ALSA).
///
/// Probing can block (a provider may connect to a sound server), so it runs on a thread of its own,
/// never on Swift's cooperative pool. A machine without devices gives an empty list.
///
/// ```swift
/// for device in await DeviceMonitor.sources() { print(device) }
/// ```
public enum DeviceMonitor {
    private static let queue = DispatchQueue(label: "pcast.device-monitor")

    /// The video and/or audio sources present now.
    public static func sources(_ kinds: Set<Device.Kind> = [.video, .audio]) async -> [Device] {
        guard (try? GStreamerRuntime.initialize()) != nil else { return [] }
        let box: DeviceList = await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: DeviceList(probe(kinds))) }
        }
        return box.devices
    }

    private static func probe(_ kinds: Set<Device.Kind>) -> [Device] {
        guard let monitor = gst_device_monitor_new() else { return [] }
        defer { gst_object_unref(UnsafeMutableRawPointer(monitor)) }
        if kinds.contains(.video) { _ = gst_device_monitor_add_filter(monitor, "Video/Source", nil) }
        if kinds.contains(.audio) { _ = gst_device_monitor_add_filter(monitor, "Audio/Source", nil) }
        // Start fails only when no provider could start at all (then there are no devices to list).
        guard gst_device_monitor_start(monitor) != 0 else { return [] }
        defer { gst_device_monitor_stop(monitor) }
        var devices: [Device] = []
        var node = gst_device_monitor_get_devices(monitor)
        let list = node
        while let current = node {
            if let device = current.pointee.data {
                devices.append(Device(owning: device.assumingMemoryBound(to: GstDevice.self)))
            }
            node = current.pointee.next
        }
        g_list_free(list)
        return devices
    }
}

private struct DeviceList: Sendable {
    let devices: [Device]
    init(_ devices: [Device]) { self.devices = devices }
}
