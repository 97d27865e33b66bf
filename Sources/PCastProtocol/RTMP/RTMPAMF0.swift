// AMF0 (Action Message Format, version 0): the encoding of RTMP commands and stream metadata.
//
// Supported markers: number (0x00), boolean (0x01), string (0x02), object (0x03), null (0x05),
// undefined (0x06), ECMA array (0x08), object end (0x09, only as a terminator), strict array
// (0x0A), date (0x0B) and long string (0x0C). References, typed objects, XML documents, movie
// clips, record sets and the AMF3 switch are refused with `AMF0Error.unsupportedType`.
//
// Decoding is bounded: nesting depth and the total number of values are limited (a hostile peer
// cannot make us recurse or allocate without limit), declared counts are never trusted for
// allocation, and every read is bounds-checked before it happens.

/// Errors raised while decoding or encoding AMF0.
///
/// ```swift
/// do { _ = try AMF0.decode([0x02, 0x00, 0x05, 0x61]) }
/// catch { print(error) } // truncated(offset: 3, needed: 5, available: 1)
/// ```
public enum AMF0Error: Error, Sendable, Equatable {
    /// A value needs `needed` bytes at `offset` but only `available` remain.
    case truncated(offset: Int, needed: Int, available: Int)
    /// A marker we do not decode (reference, typed object, AMF3 switch, …) or an unknown one.
    case unsupportedType(marker: UInt8, offset: Int)
    /// An object-end marker (0x09) where a value was expected.
    case unexpectedObjectEnd(offset: Int)
    /// Objects and arrays nest deeper than `limit`.
    case depthLimitExceeded(limit: Int)
    /// More than `limit` values in one decode (counting nested values).
    case tooManyValues(limit: Int)
    /// A string is not valid UTF-8.
    case invalidUTF8(offset: Int)
    /// Encoding: an object key longer than the 65,535 bytes its 16-bit length can express.
    case keyTooLong(length: Int)
    /// Encoding: a string longer than the 4 GiB a long string can express.
    case stringTooLong(length: Int)
    /// Encoding: a strict array with more elements than a 32-bit count can express.
    case arrayTooLong(count: Int)
}

/// An ordered AMF0 object (or ECMA array): keys keep their wire order and may repeat.
///
/// ```swift
/// var info: AMF0Object = ["level": "status", "code": "NetStream.Publish.Start"]
/// info["description"] = "Started"
/// info["code"]?.stringValue // "NetStream.Publish.Start"
/// ```
public struct AMF0Object: Sendable, Equatable, ExpressibleByDictionaryLiteral {
    /// One key/value pair.
    public struct Property: Sendable, Equatable {
        public var key: String
        public var value: AMF0Value

        public init(key: String, value: AMF0Value) {
            self.key = key
            self.value = value
        }
    }

    /// The properties in wire order.
    public var properties: [Property]

    public init(_ properties: [Property] = []) {
        self.properties = properties
    }

    public init(dictionaryLiteral elements: (String, AMF0Value)...) {
        properties = elements.map { Property(key: $0.0, value: $0.1) }
    }

    /// The value of the first property named `key`. Setting replaces that property in place, or
    /// appends a new one; setting `nil` removes every property with that key.
    public subscript(key: String) -> AMF0Value? {
        get { properties.first { $0.key == key }?.value }
        set {
            if let newValue {
                if let index = properties.firstIndex(where: { $0.key == key }) {
                    properties[index].value = newValue
                } else {
                    properties.append(Property(key: key, value: newValue))
                }
            } else {
                properties.removeAll { $0.key == key }
            }
        }
    }

    public var count: Int { properties.count }
    public var isEmpty: Bool { properties.isEmpty }
}

/// One AMF0 value.
///
/// Strings decode from both the short (0x02) and long (0x0C) forms; the encoder picks the short
/// form when the UTF-8 length fits 16 bits.
///
/// ```swift
/// let bytes = try AMF0.encode([.string("connect"), .number(1), .object(["app": "live"])])
/// let values = try AMF0.decode(bytes)
/// values[2]["app"]?.stringValue // "live"
/// ```
public enum AMF0Value: Sendable, Equatable {
    case number(Double)
    case boolean(Bool)
    case string(String)
    case object(AMF0Object)
    case null
    case undefined
    /// An associative array (marker 0x08). The wire count is only a hint and is not kept.
    case ecmaArray(AMF0Object)
    case strictArray([AMF0Value])
    /// Milliseconds since the Unix epoch and a (conventionally ignored) time-zone offset.
    case date(millisecondsSince1970: Double, timeZone: Int16)

    /// The string, if this is a string.
    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The number, if this is a number.
    public var numberValue: Double? {
        if case .number(let n) = self { return n }
        return nil
    }

    /// The boolean, if this is a boolean.
    public var boolValue: Bool? {
        if case .boolean(let b) = self { return b }
        return nil
    }

    /// The properties, if this is an object or an ECMA array.
    public var objectValue: AMF0Object? {
        switch self {
        case .object(let o), .ecmaArray(let o): return o
        default: return nil
        }
    }

    /// `objectValue?[key]`.
    public subscript(key: String) -> AMF0Value? { objectValue?[key] }
}

extension AMF0Value: ExpressibleByStringLiteral, ExpressibleByFloatLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByBooleanLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    public init(booleanLiteral value: Bool) { self = .boolean(value) }
}

/// AMF0 encoding and decoding entry points.
///
/// ```swift
/// let bytes = try AMF0.encode([.string("onMetaData"), .ecmaArray(["width": 1280])])
/// let decoded = try AMF0.decode(bytes, limits: .init(maxDepth: 8, maxValues: 1000))
/// ```
public enum AMF0 {
    /// Bounds applied while decoding.
    public struct Limits: Sendable, Equatable {
        /// Maximum nesting of objects, ECMA arrays and strict arrays (top-level values are depth 0).
        public var maxDepth: Int
        /// Maximum number of values (including nested ones and object properties) per decode.
        public var maxValues: Int

        public init(maxDepth: Int = 32, maxValues: Int = 65_536) {
            self.maxDepth = maxDepth
            self.maxValues = maxValues
        }
    }

    public enum Marker: UInt8, Sendable {
        case number = 0x00, boolean = 0x01, string = 0x02, object = 0x03, movieClip = 0x04
        case null = 0x05, undefined = 0x06, reference = 0x07, ecmaArray = 0x08, objectEnd = 0x09
        case strictArray = 0x0A, date = 0x0B, longString = 0x0C, unsupported = 0x0D, recordSet = 0x0E
        case xmlDocument = 0x0F, typedObject = 0x10, avmPlusObject = 0x11
    }

    /// Decodes every value in `bytes` (a command is a sequence of top-level values).
    public static func decode(_ bytes: [UInt8], limits: Limits = Limits()) throws(AMF0Error) -> [AMF0Value] {
        try decode(bytes[...], limits: limits)
    }

    /// Decodes every value in `bytes`; error offsets are relative to `bytes.startIndex`.
    public static func decode(_ bytes: ArraySlice<UInt8>, limits: Limits = Limits()) throws(AMF0Error) -> [AMF0Value] {
        let result: Result<[AMF0Value], AMF0Error> = bytes.withUnsafeBytes { raw in
            var decoder = AMF0Decoder(reader: ByteReader(raw), limits: limits)
            do throws(AMF0Error) { return .success(try decoder.decodeAll()) } catch { return .failure(error) }
        }
        return try result.get()
    }

    /// Encodes `values` back to back.
    public static func encode(_ values: [AMF0Value]) throws(AMF0Error) -> [UInt8] {
        var writer = ByteWriter(reserving: 64)
        for value in values { try encode(value, into: &writer) }
        return writer.bytes
    }

    /// Encodes one value.
    public static func encode(_ value: AMF0Value) throws(AMF0Error) -> [UInt8] {
        try encode([value])
    }

    static func encode(_ value: AMF0Value, into w: inout ByteWriter) throws(AMF0Error) {
        switch value {
        case .number(let n):
            w.u8(Marker.number.rawValue)
            w.u64(n.bitPattern)
        case .boolean(let b):
            w.u8(Marker.boolean.rawValue)
            w.u8(b ? 1 : 0)
        case .string(let s):
            let utf8 = Array(s.utf8)
            if utf8.count <= Int(UInt16.max) {
                w.u8(Marker.string.rawValue)
                w.u16(UInt16(utf8.count))
            } else {
                guard utf8.count <= Int(UInt32.max) else { throw .stringTooLong(length: utf8.count) }
                w.u8(Marker.longString.rawValue)
                w.u32(UInt32(utf8.count))
            }
            w.append(contentsOf: utf8)
        case .object(let o):
            w.u8(Marker.object.rawValue)
            try encodeProperties(o, into: &w)
        case .null:
            w.u8(Marker.null.rawValue)
        case .undefined:
            w.u8(Marker.undefined.rawValue)
        case .ecmaArray(let o):
            w.u8(Marker.ecmaArray.rawValue)
            w.u32(UInt32(truncatingIfNeeded: o.count))
            try encodeProperties(o, into: &w)
        case .strictArray(let items):
            guard items.count <= Int(UInt32.max) else { throw .arrayTooLong(count: items.count) }
            w.u8(Marker.strictArray.rawValue)
            w.u32(UInt32(items.count))
            for item in items { try encode(item, into: &w) }
        case .date(let ms, let tz):
            w.u8(Marker.date.rawValue)
            w.u64(ms.bitPattern)
            w.u16(UInt16(bitPattern: tz))
        }
    }

    private static func encodeProperties(_ o: AMF0Object, into w: inout ByteWriter) throws(AMF0Error) {
        for p in o.properties {
            let key = Array(p.key.utf8)
            guard key.count <= Int(UInt16.max) else { throw .keyTooLong(length: key.count) }
            w.u16(UInt16(key.count))
            w.append(contentsOf: key)
            try encode(p.value, into: &w)
        }
        w.u16(0)
        w.u8(Marker.objectEnd.rawValue)
    }
}

/// The bounded recursive-descent decoder behind `AMF0.decode`.
struct AMF0Decoder {
    let reader: ByteReader
    let limits: AMF0.Limits
    var offset = 0
    var values = 0

    init(reader: ByteReader, limits: AMF0.Limits) {
        self.reader = reader
        self.limits = limits
    }

    var remaining: Int { reader.count - offset }

    mutating func decodeAll() throws(AMF0Error) -> [AMF0Value] {
        var out: [AMF0Value] = []
        while offset < reader.count { out.append(try value(depth: 0)) }
        return out
    }

    private func need(_ n: Int) throws(AMF0Error) {
        guard n <= remaining else { throw .truncated(offset: offset, needed: n, available: remaining) }
    }

    private mutating func countValue() throws(AMF0Error) {
        values += 1
        guard values <= limits.maxValues else { throw .tooManyValues(limit: limits.maxValues) }
    }

    private mutating func utf8(length: Int) throws(AMF0Error) -> String {
        try need(length)
        let start = offset
        let raw = UnsafeRawBufferPointer(rebasing: reader.bytes[start..<(start + length)])
        guard let s = String(validating: raw, as: UTF8.self) else { throw .invalidUTF8(offset: start) }
        offset += length
        return s
    }

    private mutating func double() throws(AMF0Error) -> Double {
        try need(8)
        defer { offset += 8 }
        return Double(bitPattern: reader.u64(offset))
    }

    mutating func value(depth: Int) throws(AMF0Error) -> AMF0Value {
        try need(1)
        let markerOffset = offset
        let marker = reader.u8(offset)
        offset += 1
        try countValue()
        switch AMF0.Marker(rawValue: marker) {
        case .number:
            return .number(try double())
        case .boolean:
            try need(1)
            defer { offset += 1 }
            return .boolean(reader.u8(offset) != 0)
        case .string:
            try need(2)
            let n = Int(reader.u16(offset))
            offset += 2
            return .string(try utf8(length: n))
        case .longString:
            try need(4)
            let n = Int(reader.u32(offset))
            offset += 4
            return .string(try utf8(length: n))
        case .object:
            return .object(try properties(depth: depth + 1))
        case .ecmaArray:
            try need(4)
            offset += 4  // the associative count is a hint; the end marker terminates
            return .ecmaArray(try properties(depth: depth + 1))
        case .strictArray:
            guard depth + 1 <= limits.maxDepth else { throw .depthLimitExceeded(limit: limits.maxDepth) }
            try need(4)
            let n = Int(reader.u32(offset))
            offset += 4
            // Every element takes at least one byte: a count larger than what is left is a lie.
            try need(n)
            var items: [AMF0Value] = []
            items.reserveCapacity(Swift.min(n, 1024))
            for _ in 0..<n { items.append(try value(depth: depth + 1)) }
            return .strictArray(items)
        case .date:
            let ms = try double()
            try need(2)
            defer { offset += 2 }
            return .date(millisecondsSince1970: ms, timeZone: Int16(bitPattern: reader.u16(offset)))
        case .null:
            return .null
        case .undefined:
            return .undefined
        case .objectEnd:
            throw .unexpectedObjectEnd(offset: markerOffset)
        default:
            throw .unsupportedType(marker: marker, offset: markerOffset)
        }
    }

    /// Properties up to the empty-key + object-end terminator.
    private mutating func properties(depth: Int) throws(AMF0Error) -> AMF0Object {
        guard depth <= limits.maxDepth else { throw .depthLimitExceeded(limit: limits.maxDepth) }
        var object = AMF0Object()
        while true {
            try need(2)
            let keyLength = Int(reader.u16(offset))
            offset += 2
            if keyLength == 0 {
                try need(1)
                if reader.u8(offset) == AMF0.Marker.objectEnd.rawValue {
                    offset += 1
                    return object
                }
            }
            let key = try utf8(length: keyLength)
            object.properties.append(.init(key: key, value: try value(depth: depth)))
        }
    }
}
