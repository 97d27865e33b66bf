// Bounds-checked readers of box payloads, used by the scanner.

struct BoxSlice {
    let bytes: [UInt8]
    let base: UInt64
    let start: Int
    let end: Int
    var type: UInt32 = 0

    static let maxDepth = 16
    var depth = 0

    func reader() -> FieldReader { FieldReader(bytes: bytes, base: base, position: start, end: end) }

    /// The child boxes of this box's content, starting `from` a position (default: start).
    func children(from position: Int? = nil) throws(FMP4Error) -> [BoxSlice] {
        guard depth < BoxSlice.maxDepth else { throw .nestingTooDeep(offset: base) }
        var result: [BoxSlice] = []
        var offset = position ?? start
        while offset < end {
            let child = try childBox(at: offset)
            result.append(child)
            offset = child.end
        }
        return result
    }

    private func childBox(at offset: Int) throws(FMP4Error) -> BoxSlice {
        let absolute = base + UInt64(offset)
        guard end - offset >= 8 else { throw .truncated(offset: absolute) }
        var size = UInt64(FourCC.value(bytes, offset))
        var header = 8
        if size == 1 {
            guard end - offset >= 16 else { throw .truncated(offset: absolute) }
            size = UInt64(FourCC.value(bytes, offset + 8)) << 32 | UInt64(FourCC.value(bytes, offset + 12))
            header = 16
        } else if size == 0 {
            size = UInt64(end - offset)
        }
        guard size >= UInt64(header), size <= UInt64(end - offset) else {
            throw .invalidBoxSize(offset: absolute, size: size)
        }
        var child = BoxSlice(bytes: bytes, base: base, start: offset + header, end: offset + Int(size))
        child.type = FourCC.value(bytes, offset + 4)
        child.depth = depth + 1
        return child
    }

    /// The first child of `type`, or a `malformed` error naming what is missing.
    func child(_ type: UInt32) throws(FMP4Error) -> BoxSlice {
        guard let found = try children().first(where: { $0.type == type }) else {
            throw .malformed(offset: base + UInt64(start), reason: "missing \(FourCC.string(type))")
        }
        return found
    }
}

/// Bounds-checked big-endian field reader over part of a byte array.
struct FieldReader {
    let bytes: [UInt8]
    let base: UInt64
    var position: Int
    let end: Int

    var remaining: Int { end - position }
    var absolutePosition: UInt64 { base + UInt64(position) }

    mutating func skip(_ n: Int) throws(FMP4Error) {
        guard n >= 0, n <= remaining else { throw .truncated(offset: absolutePosition) }
        position += n
    }

    mutating func u16() throws(FMP4Error) -> UInt16 {
        guard remaining >= 2 else { throw .truncated(offset: absolutePosition) }
        defer { position += 2 }
        return UInt16(bytes[position]) << 8 | UInt16(bytes[position + 1])
    }

    mutating func u32() throws(FMP4Error) -> UInt32 {
        guard remaining >= 4 else { throw .truncated(offset: absolutePosition) }
        defer { position += 4 }
        return FourCC.value(bytes, position)
    }

    mutating func u64() throws(FMP4Error) -> UInt64 {
        let high = try u32()
        return UInt64(high) << 32 | UInt64(try u32())
    }

    /// Reads a full box's version and flags; returns the version.
    mutating func version() throws(FMP4Error) -> UInt8 { UInt8(try u32() >> 24) }
}

/// Four-character codes as big-endian integers.
enum FourCC {
    static let ftyp = code("ftyp"), moov = code("moov"), moof = code("moof"), mdat = code("mdat")
    static let mvhd = code("mvhd"), trak = code("trak"), mvex = code("mvex"), mehd = code("mehd")
    static let trex = code("trex"), tkhd = code("tkhd"), mdia = code("mdia"), mdhd = code("mdhd")
    static let hdlr = code("hdlr"), minf = code("minf"), stbl = code("stbl"), stsd = code("stsd")
    static let mfhd = code("mfhd"), traf = code("traf"), tfhd = code("tfhd"), tfdt = code("tfdt")
    static let trun = code("trun")

    static func code(_ s: String) -> UInt32 { s.utf8.reduce(0) { $0 << 8 | UInt32($1) } }

    /// The big-endian UInt32 at `offset` (caller checks bounds).
    static func value(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16
            | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }

    static func string(_ code: UInt32) -> String {
        let scalars = [24, 16, 8, 0].map { UInt8((code >> UInt32($0)) & 0xFF) }
        guard isPrintable(code) else { return scalars.map { String($0, radix: 16) }.joined(separator: " ") }
        return String(decoding: scalars, as: UTF8.self)
    }

    static func isPrintable(_ code: UInt32) -> Bool {
        [24, 16, 8, 0].allSatisfy { (0x20...0x7E).contains((code >> UInt32($0)) & 0xFF) }
    }
}
