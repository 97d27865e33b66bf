// Internal big-endian byte access shared by the RTP and RTCP codecs.
//
// Parsers read from an `UnsafeRawBufferPointer` so that `[UInt8]`, `ArraySlice<UInt8>` and
// foreign buffers all go through one code path without copying. Every read is bounds-checked
// by the caller *before* it happens (the helpers only assert), which keeps the hot path free of
// optional unwrapping while making the checks explicit where the format rules live.

/// Read-only big-endian view over raw bytes. Never escapes the `withUnsafeBytes` scope it was
/// created in, which is why it is not `Sendable`.
struct ByteReader {
    let bytes: UnsafeRawBufferPointer

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    var count: Int { bytes.count }

    @inline(__always)
    func u8(_ offset: Int) -> UInt8 {
        assert(offset >= 0 && offset < bytes.count)
        return bytes[offset]
    }

    @inline(__always)
    func u16(_ offset: Int) -> UInt16 {
        assert(offset >= 0 && offset + 2 <= bytes.count)
        return UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    @inline(__always)
    func u24(_ offset: Int) -> UInt32 {
        assert(offset >= 0 && offset + 3 <= bytes.count)
        return UInt32(bytes[offset]) << 16 | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2])
    }

    @inline(__always)
    func u32(_ offset: Int) -> UInt32 {
        assert(offset >= 0 && offset + 4 <= bytes.count)
        return UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16
            | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }

    @inline(__always)
    func u64(_ offset: Int) -> UInt64 {
        UInt64(u32(offset)) << 32 | UInt64(u32(offset + 4))
    }

    /// Copies `range` out; used only for data the model owns (RTCP bodies, SDES text).
    func array(_ range: Range<Int>) -> [UInt8] {
        assert(range.lowerBound >= 0 && range.upperBound <= bytes.count)
        return Array(UnsafeRawBufferPointer(rebasing: bytes[range]))
    }
}

/// Append-only big-endian writer. Wraps an array the caller may have reserved, so a relay can
/// reuse one buffer per packet.
struct ByteWriter {
    var bytes: [UInt8]

    init(reserving capacity: Int = 0) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    init(appendingTo bytes: [UInt8]) {
        self.bytes = bytes
    }

    var count: Int { bytes.count }

    @inline(__always)
    mutating func u8(_ value: UInt8) {
        bytes.append(value)
    }

    @inline(__always)
    mutating func u16(_ value: UInt16) {
        bytes.append(UInt8(truncatingIfNeeded: value >> 8))
        bytes.append(UInt8(truncatingIfNeeded: value))
    }

    @inline(__always)
    mutating func u24(_ value: UInt32) {
        bytes.append(UInt8(truncatingIfNeeded: value >> 16))
        bytes.append(UInt8(truncatingIfNeeded: value >> 8))
        bytes.append(UInt8(truncatingIfNeeded: value))
    }

    @inline(__always)
    mutating func u32(_ value: UInt32) {
        u16(UInt16(truncatingIfNeeded: value >> 16))
        u16(UInt16(truncatingIfNeeded: value))
    }

    @inline(__always)
    mutating func u64(_ value: UInt64) {
        u32(UInt32(truncatingIfNeeded: value >> 32))
        u32(UInt32(truncatingIfNeeded: value))
    }

    mutating func append<C: Collection>(contentsOf data: C) where C.Element == UInt8 {
        bytes.append(contentsOf: data)
    }

    mutating func zeros(_ n: Int) {
        if n > 0 { bytes.append(contentsOf: repeatElement(0, count: n)) }
    }

    /// Overwrites a previously written big-endian `UInt16` (length fields are patched once the
    /// body size is known).
    mutating func setU16(_ value: UInt16, at offset: Int) {
        bytes[offset] = UInt8(truncatingIfNeeded: value >> 8)
        bytes[offset + 1] = UInt8(truncatingIfNeeded: value)
    }
}
