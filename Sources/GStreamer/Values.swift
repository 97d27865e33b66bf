import CGStreamer
import CGStreamerShim
import Foundation

/// A GStreamer value (property, structure field), copied out of GLib into Swift.
///
/// ```swift
/// let value = try encoder.property("bitrate")        // .uint(2048)
/// try encoder.set("speed-preset", "ultrafast")     // an enum, by nick
/// ```
public enum PropertyValue: Sendable, Hashable, CustomStringConvertible {
    case bool(Bool)
    case int(Int64)
    case uint(UInt64)
    case double(Double)
    case string(String?)
    /// An enum value, with its nick (`ultrafast`) and number.
    case enumeration(nick: String, value: Int)
    /// A flags value, with the nicks of the set flags and the bit mask.
    case flags(nicks: [String], value: UInt)
    case fraction(numerator: Int, denominator: Int)
    case caps(Caps?)
    /// A structure (statistics such as `rtpjitterbuffer`'s `stats`).
    case structure(Structure)
    /// Any other type, as GStreamer serializes it.
    case other(type: String, serialized: String)

    public var description: String {
        switch self {
        case .bool(let b): return String(b)
        case .int(let i): return String(i)
        case .uint(let u): return String(u)
        case .double(let d): return String(d)
        case .string(let s): return s ?? "(null)"
        case .enumeration(let nick, _): return nick
        case .flags(let nicks, _): return nicks.joined(separator: "+")
        case .fraction(let n, let d): return "\(n)/\(d)"
        case .caps(let c): return c?.description ?? "(null)"
        case .structure(let s): return s.serialized
        case .other(_, let s): return s
        }
    }
}

/// A Swift type that can be read from and written to a GStreamer property.
///
/// Conforming types: `Bool`, `Int`, `Int32`, `Int64`, `UInt`, `UInt32`, `UInt64`, `Double`, `Float`,
/// `String`, ``Caps`` and ``PropertyValue`` itself. An integer sets any integer property after a range
/// check; a `String` sets string properties, enums and flags by nick, and any other type GStreamer can
/// parse from text (caps, fractions).
public protocol PropertyValueConvertible: Sendable {
    var propertyValue: PropertyValue { get }
    init?(propertyValue: PropertyValue)
}

extension PropertyValue: PropertyValueConvertible {
    public var propertyValue: PropertyValue { self }
    public init?(propertyValue: PropertyValue) { self = propertyValue }
}

extension Bool: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .bool(self) }
    public init?(propertyValue: PropertyValue) {
        guard case .bool(let b) = propertyValue else { return nil }
        self = b
    }
}

extension String: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .string(self) }
    public init?(propertyValue: PropertyValue) {
        switch propertyValue {
        case .string(let s?): self = s
        case .string(nil), .caps(nil): return nil
        default: self = propertyValue.description
        }
    }
}

extension Double: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .double(self) }
    public init?(propertyValue: PropertyValue) {
        switch propertyValue {
        case .double(let d): self = d
        case .int(let i): self = Double(i)
        case .uint(let u): self = Double(u)
        default: return nil
        }
    }
}

extension Float: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .double(Double(self)) }
    public init?(propertyValue: PropertyValue) {
        guard let d = Double(propertyValue: propertyValue) else { return nil }
        self = Float(d)
    }
}

extension Caps: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .caps(self) }
    public convenience init?(propertyValue: PropertyValue) {
        guard case .caps(let caps?) = propertyValue else { return nil }
        self.init(retaining: caps.pointer)
    }
}

/// Integers convert to and from every integer property (and enum numbers) with range checks.
public protocol IntegerPropertyValue: FixedWidthInteger, PropertyValueConvertible {}
extension IntegerPropertyValue {
    public var propertyValue: PropertyValue {
        Self.isSigned ? .int(Int64(self)) : .uint(UInt64(self))
    }
    public init?(propertyValue: PropertyValue) {
        switch propertyValue {
        case .int(let i): guard let v = Self(exactly: i) else { return nil }; self = v
        case .uint(let u): guard let v = Self(exactly: u) else { return nil }; self = v
        case .enumeration(_, let value): guard let v = Self(exactly: value) else { return nil }; self = v
        case .flags(_, let value): guard let v = Self(exactly: value) else { return nil }; self = v
        default: return nil
        }
    }
}
extension Int: IntegerPropertyValue {}
extension Int32: IntegerPropertyValue {}
extension Int64: IntegerPropertyValue {}
extension UInt: IntegerPropertyValue {}
extension UInt32: IntegerPropertyValue {}
extension UInt64: IntegerPropertyValue {}

/// A GStreamer structure (caps structure, message payload), copied into Swift.
///
/// ```swift
/// let s = caps.structures[0]
/// s.name                 // "video/x-raw"
/// s["width"]             // .int(1280)
/// ```
public struct Structure: Sendable, Hashable, CustomStringConvertible {
    public struct Field: Sendable, Hashable {
        public let name: String
        public let value: PropertyValue
    }

    public let name: String
    public let fields: [Field]
    /// GStreamer's own serialization, for example `video/x-raw, width=(int)1280`.
    public let serialized: String

    public subscript(field: String) -> PropertyValue? {
        fields.first { $0.name == field }?.value
    }

    public var description: String { serialized }

    init(copying structure: UnsafePointer<GstStructure>) {
        name = String(cString: gst_structure_get_name(structure))
        var collected: [Field] = []
        let count = gst_structure_n_fields(structure)
        for index in 0..<count {
            guard let fieldName = gst_structure_nth_field_name(structure, UInt32(index)),
                  let value = gst_structure_get_value(structure, fieldName) else { continue }
            collected.append(Field(name: String(cString: fieldName), value: PropertyValue(copying: value)))
        }
        fields = collected
        if let text = gst_structure_to_string(structure) {
            serialized = String(cString: text)
            g_free(text)
        } else {
            serialized = name
        }
    }
}

// MARK: - GValue bridging (internal)

extension PropertyValue {
    /// Copies a GValue of any type.
    init(copying value: UnsafePointer<GValue>) {
        let type = value.pointee.g_type
        let fundamental = g_type_fundamental(type)
        switch fundamental {
        case pcast_g_type_boolean(): self = .bool(g_value_get_boolean(value) != 0)
        case pcast_g_type_int(): self = .int(Int64(g_value_get_int(value)))
        case pcast_g_type_long(): self = .int(Int64(g_value_get_long(value)))
        case pcast_g_type_int64(): self = .int(Int64(g_value_get_int64(value)))
        case pcast_g_type_uint(): self = .uint(UInt64(g_value_get_uint(value)))
        case pcast_g_type_ulong(): self = .uint(UInt64(g_value_get_ulong(value)))
        case pcast_g_type_uint64(): self = .uint(UInt64(g_value_get_uint64(value)))
        case pcast_g_type_float(): self = .double(Double(g_value_get_float(value)))
        case pcast_g_type_double(): self = .double(g_value_get_double(value))
        case pcast_g_type_string(): self = .string(g_value_get_string(value).map { String(cString: $0) })
        case pcast_g_type_enum():
            let number = g_value_get_enum(value)
            let klass = g_type_class_ref(type)
            defer { g_type_class_unref(klass) }
            let entry = g_enum_get_value(klass?.assumingMemoryBound(to: GEnumClass.self), number)
            self = .enumeration(nick: entry.map { String(cString: $0.pointee.value_nick) } ?? String(number), value: Int(number))
        case pcast_g_type_flags():
            let mask = g_value_get_flags(value)
            let klass = g_type_class_ref(type)?.assumingMemoryBound(to: GFlagsClass.self)
            defer { g_type_class_unref(klass) }
            var nicks: [String] = []
            if let klass {
                for i in 0..<Int(klass.pointee.n_values) {
                    let flag = klass.pointee.values[i]
                    if flag.value != 0 && (mask & flag.value) == flag.value {
                        nicks.append(String(cString: flag.value_nick))
                    }
                }
            }
            self = .flags(nicks: nicks, value: UInt(mask))
        default:
            if type == pcast_gst_type_caps() {
                let caps = gst_value_get_caps(value)
                self = .caps(caps.map { Caps(retaining: UnsafeMutablePointer(mutating: $0)) })
            } else if type == gst_structure_get_type(), let structure = gst_value_get_structure(value) {
                self = .structure(Structure(copying: structure))
            } else if type == pcast_gst_type_fraction() {
                self = .fraction(numerator: Int(gst_value_get_fraction_numerator(value)),
                                 denominator: Int(gst_value_get_fraction_denominator(value)))
            } else {
                let typeName = String(cString: g_type_name(type))
                if let text = gst_value_serialize(value) {
                    self = .other(type: typeName, serialized: String(cString: text))
                    g_free(text)
                } else {
                    self = .other(type: typeName, serialized: "")
                }
            }
        }
    }

    /// Writes this value into `gvalue`, already initialized to the target type.
    /// Returns a description of the expected type when the value does not fit.
    func store(into gvalue: UnsafeMutablePointer<GValue>) -> String? {
        let type = gvalue.pointee.g_type
        let fundamental = g_type_fundamental(type)

        func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
            switch self {
            case .int(let i): return T(exactly: i)
            case .uint(let u): return T(exactly: u)
            case .string(let s?): return T(s.trimmingCharacters(in: .whitespaces))
            default: return nil
            }
        }
        func real() -> Double? {
            switch self {
            case .double(let d): return d
            case .int(let i): return Double(i)
            case .uint(let u): return Double(u)
            case .string(let s?): return Double(s.trimmingCharacters(in: .whitespaces))
            default: return nil
            }
        }

        switch fundamental {
        case pcast_g_type_boolean():
            switch self {
            case .bool(let b): g_value_set_boolean(gvalue, b ? 1 : 0)
            case .string(let s?) where ["true", "false", "yes", "no", "1", "0"].contains(s.lowercased()):
                g_value_set_boolean(gvalue, ["true", "yes", "1"].contains(s.lowercased()) ? 1 : 0)
            default: return "a boolean"
            }
        case pcast_g_type_int():
            guard let v = integer(Int32.self) else { return "a 32-bit integer" }
            g_value_set_int(gvalue, v)
        case pcast_g_type_long():
            guard let v = integer(Int.self) else { return "an integer" }
            g_value_set_long(gvalue, v)
        case pcast_g_type_int64():
            guard let v = integer(Int64.self) else { return "a 64-bit integer" }
            g_value_set_int64(gvalue, gint64(v))
        case pcast_g_type_uint():
            guard let v = integer(UInt32.self) else { return "an unsigned 32-bit integer" }
            g_value_set_uint(gvalue, v)
        case pcast_g_type_ulong():
            guard let v = integer(UInt.self) else { return "an unsigned integer" }
            g_value_set_ulong(gvalue, v)
        case pcast_g_type_uint64():
            guard let v = integer(UInt64.self) else { return "an unsigned 64-bit integer" }
            g_value_set_uint64(gvalue, guint64(v))
        case pcast_g_type_float():
            guard let v = real() else { return "a number" }
            g_value_set_float(gvalue, Float(v))
        case pcast_g_type_double():
            guard let v = real() else { return "a number" }
            g_value_set_double(gvalue, v)
        case pcast_g_type_string():
            switch self {
            case .string(let s): g_value_set_string(gvalue, s)
            default: return "a string"
            }
        case pcast_g_type_enum():
            let klass = g_type_class_ref(type)?.assumingMemoryBound(to: GEnumClass.self)
            defer { g_type_class_unref(klass) }
            let names = enumNicks(klass)
            let expected = "one of " + names.joined(separator: ", ")
            switch self {
            case .string(let s?), .enumeration(let s, _):
                guard let entry = g_enum_get_value_by_nick(klass, s) ?? g_enum_get_value_by_name(klass, s)
                        ?? Int32(s).flatMap({ g_enum_get_value(klass, $0) }) else { return expected }
                g_value_set_enum(gvalue, entry.pointee.value)
            case .int, .uint:
                guard let number = integer(Int32.self), g_enum_get_value(klass, number) != nil else { return expected }
                g_value_set_enum(gvalue, number)
            default: return expected
            }
        case pcast_g_type_flags():
            switch self {
            case .int, .uint:
                guard let v = integer(UInt32.self) else { return "flags" }
                g_value_set_flags(gvalue, v)
            case .flags(_, let mask):
                guard let v = UInt32(exactly: mask) else { return "flags" }
                g_value_set_flags(gvalue, v)
            case .string(let s?):
                if gst_value_deserialize(gvalue, s) == 0 { return "flags by nick (a+b)" }
            default: return "flags"
            }
        default:
            if type == pcast_gst_type_caps() {
                switch self {
                case .caps(let caps): gst_value_set_caps(gvalue, caps?.pointer)
                case .string(let s?):
                    guard let caps = try? Caps(s) else { return "caps" }
                    gst_value_set_caps(gvalue, caps.pointer)
                default: return "caps"
                }
            } else if type == pcast_gst_type_fraction(), case .fraction(let n, let d) = self {
                guard let n32 = Int32(exactly: n), let d32 = Int32(exactly: d), d32 != 0 else { return "a fraction" }
                gst_value_set_fraction(gvalue, n32, d32)
            } else {
                let typeName = String(cString: g_type_name(type))
                guard case .string(let s?) = self, gst_value_deserialize(gvalue, s) != 0 else {
                    return "a \(typeName) in GStreamer's text form"
                }
            }
        }
        return nil
    }
}

private func enumNicks(_ klass: UnsafeMutablePointer<GEnumClass>?) -> [String] {
    guard let klass else { return [] }
    return (0..<Int(klass.pointee.n_values)).map { String(cString: klass.pointee.values[$0].value_nick) }
}
