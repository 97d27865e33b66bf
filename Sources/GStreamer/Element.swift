import CGStreamer
import CGStreamerShim

/// A GStreamer element: found by name in a ``Pipeline``, or made from a factory.
///
/// ```swift
/// let encoder = try pipeline.element(named: "enc")
/// try encoder.set("bitrate", 1500)                    // kbit/s, range-checked
/// try encoder.set("speed-preset", "ultrafast")        // enum by nick
/// let bitrate: Int = try encoder.property("bitrate")
/// ```
///
/// Owns one reference to the element; thread-safe as GStreamer's objects are.
/// Unchecked: the GstElement pointer never changes, and GStreamer's objects are thread-safe (they lock themselves).
public class Element: @unchecked Sendable, CustomStringConvertible {
    let pointer: UnsafeMutablePointer<GstElement>

    /// Takes over a reference the caller owns (transfer full).
    init(owning pointer: UnsafeMutablePointer<GstElement>) {
        self.pointer = pointer
    }

    /// Adds a reference of its own (transfer none).
    init(retaining pointer: UnsafeMutablePointer<GstElement>) {
        gst_object_ref(UnsafeMutableRawPointer(pointer))
        self.pointer = pointer
    }

    /// Makes a new element from a factory (`x264enc`, `appsink` …).
    ///
    /// - Throws: ``GStreamerError/elementFactoryMissing(_:)`` naming the Debian package when known.
    public convenience init(factory: String, name: String? = nil) throws(GStreamerError) {
        try GStreamerRuntime.initialize()
        guard let made = gst_element_factory_make(factory, name) else {
            throw .elementFactoryMissing(MissingElement(name: factory))
        }
        // Factory-made elements are floating: sink it so this wrapper owns it.
        self.init(owning: gst_object_ref_sink(UnsafeMutableRawPointer(made)).assumingMemoryBound(to: GstElement.self))
    }

    deinit {
        gst_object_unref(UnsafeMutableRawPointer(pointer))
    }

    var object: UnsafeMutablePointer<GObject> { pointer.withMemoryRebound(to: GObject.self, capacity: 1) { $0 } }

    /// The element's name, unique within its bin.
    public var name: String {
        guard let text = gst_object_get_name(UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstObject.self)) else { return "" }
        defer { g_free(text) }
        return String(cString: text)
    }

    /// The name of the factory that made it (`x264enc`), when known.
    public var factoryName: String? {
        // gst_plugin_feature_get_name is a macro over the object name.
        guard let factory = gst_element_get_factory(pointer),
              let text = gst_object_get_name(UnsafeMutableRawPointer(factory).assumingMemoryBound(to: GstObject.self)) else { return nil }
        defer { g_free(text) }
        return String(cString: text)
    }

    public var description: String { "\(factoryName ?? "element") '\(name)'" }

    /// Whether the element is a sink (it consumes and has no source pads).
    public var isSink: Bool {
        (pointer.pointee.object.flags & UInt32(GST_ELEMENT_FLAG_SINK.rawValue)) != 0
    }

    /// Whether the element is a source.
    public var isSource: Bool {
        (pointer.pointee.object.flags & UInt32(GST_ELEMENT_FLAG_SOURCE.rawValue)) != 0
    }

    /// A pad that always exists on this element (`sink`, `src`).
    public func staticPad(_ name: String) throws(GStreamerError) -> Pad {
        guard let pad = gst_element_get_static_pad(pointer, name) else {
            throw .padNotFound(element: self.name, pad: name)
        }
        return Pad(owning: pad)
    }

    /// All pads the element has now.
    public var pads: [Pad] {
        // gst_element_foreach_pad takes the element's lock (GST_OBJECT_LOCK is a macro).
        let collector = Unmanaged.passRetained(PadCollector())
        _ = gst_element_foreach_pad(pointer, { _, pad, userData in
            let collector = Unmanaged<PadCollector>.fromOpaque(userData!).takeUnretainedValue()
            if let pad { collector.pads.append(Pad(retaining: pad)) }
            return 1
        }, collector.toOpaque())
        return collector.takeRetainedValue().pads
    }

    // MARK: Properties

    /// Sets a property, converting and range-checking the value for the property's type.
    ///
    /// - Throws: ``GStreamerError/unknownProperty(element:property:)``,
    ///   ``GStreamerError/badPropertyValue(element:property:expected:given:)`` or
    ///   ``GStreamerError/propertyNotAccessible(element:property:reason:)``.
    public func set(_ property: String, _ value: some PropertyValueConvertible) throws(GStreamerError) {
        let spec = try paramSpec(property)
        guard spec.pointee.flags.rawValue & G_PARAM_WRITABLE.rawValue != 0 else {
            throw .propertyNotAccessible(element: name, property: property, reason: "read-only")
        }
        if spec.pointee.flags.rawValue & G_PARAM_CONSTRUCT_ONLY.rawValue != 0 {
            throw .propertyNotAccessible(element: name, property: property, reason: "construct-only")
        }
        var gvalue = GValue()
        g_value_init(&gvalue, spec.pointee.value_type)
        defer { g_value_unset(&gvalue) }
        let given = value.propertyValue
        if let expected = given.store(into: &gvalue) {
            throw .badPropertyValue(element: name, property: property, expected: expected, given: given.description)
        }
        // g_param_value_validate clamps out-of-range values and says so: refuse instead of clamping.
        if g_param_value_validate(spec, &gvalue) != 0 {
            throw .badPropertyValue(element: name, property: property,
                                    expected: rangeDescription(spec), given: given.description)
        }
        g_object_set_property(object, property, &gvalue)
    }

    /// Reads a property as a ``PropertyValue``.
    public func property(_ property: String) throws(GStreamerError) -> PropertyValue {
        let spec = try paramSpec(property)
        guard spec.pointee.flags.rawValue & G_PARAM_READABLE.rawValue != 0 else {
            throw .propertyNotAccessible(element: name, property: property, reason: "write-only")
        }
        var gvalue = GValue()
        g_value_init(&gvalue, spec.pointee.value_type)
        defer { g_value_unset(&gvalue) }
        g_object_get_property(object, property, &gvalue)
        return PropertyValue(copying: &gvalue)
    }

    /// Reads a property as a Swift type.
    ///
    /// ```swift
    /// let live: Bool = try source.property("is-live")
    /// ```
    public func property<T: PropertyValueConvertible>(_ property: String, as type: T.Type = T.self) throws(GStreamerError) -> T {
        let value: PropertyValue = try self.property(property)
        guard let converted = T(propertyValue: value) else {
            throw .badPropertyValue(element: name, property: property, expected: String(describing: T.self), given: value.description)
        }
        return converted
    }

    /// Whether the element has a property of this name.
    public func hasProperty(_ property: String) -> Bool {
        pcast_g_object_find_property(UnsafeMutableRawPointer(pointer), property) != nil
    }

    private func paramSpec(_ property: String) throws(GStreamerError) -> UnsafeMutablePointer<GParamSpec> {
        guard let spec = pcast_g_object_find_property(UnsafeMutableRawPointer(pointer), property) else {
            throw .unknownProperty(element: name, property: property)
        }
        return spec
    }

    private func rangeDescription(_ spec: UnsafeMutablePointer<GParamSpec>) -> String {
        let type = String(cString: g_type_name(spec.pointee.value_type))
        guard let blurb = g_param_spec_get_blurb(spec) else { return "a valid \(type)" }
        var low = GValue()
        g_value_init(&low, spec.pointee.value_type)
        defer { g_value_unset(&low) }
        g_param_value_set_default(spec, &low)
        return "a valid \(type) (\(String(cString: blurb)); default \(PropertyValue(copying: &low)))"
    }

    // MARK: Messages

    /// Posts a warning from this element on the pipeline's bus.
    public func postWarning(_ text: String, debug: String? = nil) {
        pcast_gst_element_post_warning(pointer, text, debug)
    }

    /// Posts an error from this element on the pipeline's bus.
    public func postError(_ text: String, debug: String? = nil) {
        pcast_gst_element_post_error(pointer, text, debug)
    }

    /// Posts an application message (`application/x-…` structure) on the pipeline's bus.
    public func postApplicationMessage(name: String, fields: [String: String] = [:]) {
        guard let structure = gst_structure_new_empty(name) else { return }
        for (key, value) in fields {
            var gvalue = GValue()
            g_value_init(&gvalue, pcast_g_type_string())
            g_value_set_string(&gvalue, value)
            gst_structure_take_value(structure, key, &gvalue)
        }
        let message = gst_message_new_application(UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstObject.self), structure)
        _ = gst_element_post_message(pointer, message)
    }
}

private final class PadCollector {
    var pads: [Pad] = []
}
