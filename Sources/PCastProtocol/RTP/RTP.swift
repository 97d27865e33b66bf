// RTP (RFC 3550) packets with RFC 8285 header extensions.
//
// Two levels of API:
// - `RTPPacketLayout` parses and validates a packet without allocating: it reports the fixed
//   header fields and byte ranges (CSRCs, extension, payload, padding) so a relay can forward or
//   rewrite a packet in place.
// - `RTPPacket` is the value model used for building and inspecting. Parsing one from an
//   `[UInt8]`/`ArraySlice<UInt8>` shares the input's storage for the payload and extension data
//   (copy-on-write slices) and only allocates for CSRC and extension-element lists when present.

/// Errors raised while parsing or building RTP packets.
///
/// ```swift
/// do { _ = try RTPPacket(parsing: [0x80]) }
/// catch { print(error) } // truncatedHeader(needed: 12, available: 1)
/// ```
public enum RTPError: Error, Sendable, Equatable {
    /// Fewer bytes than the fixed header plus the CSRC list require.
    case truncatedHeader(needed: Int, available: Int)
    /// The version field is not 2.
    case unsupportedVersion(UInt8)
    /// The header extension's declared length runs past the end of the packet.
    case truncatedExtension(needed: Int, available: Int)
    /// An RFC 8285 element inside the extension is invalid (overruns the extension block, or uses
    /// a reserved ID with a non-zero length). `offset` is relative to the packet start.
    case malformedExtensionElement(offset: Int)
    /// The P bit is set but the padding count is zero or larger than the bytes after the header.
    case invalidPadding(count: UInt8, available: Int)
    /// Building: payload type must fit 7 bits.
    case payloadTypeOutOfRange(UInt8)
    /// Building: at most 15 CSRCs fit the 4-bit CC field.
    case tooManyCSRCs(Int)
    /// Building: an extension element's ID or length is not encodable in its header form
    /// (one-byte: ID 1–14, 1–16 data bytes; two-byte: ID 1–255, 0–255 data bytes).
    case invalidExtensionElement(id: UInt8, length: Int)
    /// Building: `raw` extension data must be a whole number of 32-bit words.
    case extensionNotWordAligned(length: Int)
    /// Building: the extension exceeds the 16-bit word count of the extension header.
    case extensionTooLarge(length: Int)
    /// Building: two-byte header `appBits` must fit 4 bits.
    case appBitsOutOfRange(UInt8)
}

/// The validated shape of an RTP packet, computed without allocating or copying.
///
/// Offsets are relative to the first byte of the buffer that was parsed.
///
/// ```swift
/// let bytes: [UInt8] = [0x80, 0x60, 0x00, 0x01, 0, 0, 0, 0x10, 0xCA, 0xFE, 0xBA, 0xBE, 0xAA]
/// let layout = try RTPPacketLayout(parsing: bytes)
/// // layout.sequenceNumber == 1, layout.payloadRange == 12..<13
/// ```
public struct RTPPacketLayout: Sendable, Equatable {
    /// Size of the fixed RTP header, before CSRCs.
    public static let fixedHeaderLength = 12

    public var marker: Bool
    public var payloadType: UInt8
    public var sequenceNumber: UInt16
    public var timestamp: UInt32
    public var ssrc: UInt32
    /// Number of CSRC entries; they occupy `12 ..< 12 + 4 * csrcCount`.
    public var csrcCount: Int
    /// The 16-bit "defined by profile" value of the header extension, if the X bit is set.
    public var extensionProfile: UInt16?
    /// Extension data after its 4-byte header (empty when there is no extension).
    public var extensionDataRange: Range<Int>
    /// The payload, excluding header and padding.
    public var payloadRange: Range<Int>
    /// Number of padding bytes at the end, including the count byte (0 when the P bit is clear).
    public var paddingLength: Int

    /// Total header length (fixed header, CSRCs and extension).
    public var headerLength: Int { payloadRange.lowerBound }

    /// Parses and validates the packet in `bytes`, including RFC 8285 extension elements.
    public init(parsing bytes: UnsafeRawBufferPointer) throws(RTPError) {
        let r = ByteReader(bytes)
        let n = r.count
        guard n >= Self.fixedHeaderLength else {
            throw .truncatedHeader(needed: Self.fixedHeaderLength, available: n)
        }
        let b0 = r.u8(0)
        let version = b0 >> 6
        guard version == 2 else { throw .unsupportedVersion(version) }
        let hasPadding = b0 & 0x20 != 0
        let hasExtension = b0 & 0x10 != 0
        let cc = Int(b0 & 0x0F)
        let b1 = r.u8(1)

        var offset = Self.fixedHeaderLength + 4 * cc
        guard n >= offset else { throw .truncatedHeader(needed: offset, available: n) }

        var profile: UInt16? = nil
        var extRange = offset..<offset
        if hasExtension {
            guard n >= offset + 4 else { throw .truncatedExtension(needed: offset + 4, available: n) }
            let p = r.u16(offset)
            let words = Int(r.u16(offset + 2))
            let start = offset + 4
            let end = start + 4 * words
            guard end <= n else { throw .truncatedExtension(needed: end, available: n) }
            try RTPHeaderExtension.validateElements(profile: p, reader: r, range: start..<end)
            profile = p
            extRange = start..<end
            offset = end
        }

        var padding = 0
        if hasPadding {
            // Padding is counted from the end of the datagram and may not reach into the header.
            let count = n > 0 ? r.u8(n - 1) : 0
            guard count > 0, Int(count) <= n - offset else {
                throw .invalidPadding(count: count, available: n - offset)
            }
            padding = Int(count)
        }

        marker = b1 & 0x80 != 0
        payloadType = b1 & 0x7F
        sequenceNumber = r.u16(2)
        timestamp = r.u32(4)
        ssrc = r.u32(8)
        csrcCount = cc
        extensionProfile = profile
        extensionDataRange = extRange
        payloadRange = offset..<(n - padding)
        paddingLength = padding
    }

    /// Where the data of the RFC 8285 extension element `id` lies in `bytes` (the packet this
    /// layout was parsed from), if the packet has one. The header is readable before SRTP removes
    /// its protection: a WebRTC publisher's RID is found before the packet is authenticated.
    public func extensionElement(_ id: UInt8, in bytes: UnsafeRawBufferPointer) -> Range<Int>? {
        guard let profile = extensionProfile else { return nil }
        var found: Range<Int>?
        try? RTPHeaderExtension.walkElements(profile: profile, reader: ByteReader(bytes), range: extensionDataRange) { element, range in
            if element == id, found == nil { found = range }
        }
        return found
    }

    /// Parses `bytes`; see ``init(parsing:)-(UnsafeRawBufferPointer)``.
    @inlinable
    public init(parsing bytes: [UInt8]) throws(RTPError) {
        try self.init(parsingSlice: bytes[...])
    }

    /// Parses `bytes`; offsets are relative to `bytes.startIndex`.
    @inlinable
    public init(parsing bytes: ArraySlice<UInt8>) throws(RTPError) {
        try self.init(parsingSlice: bytes)
    }

    @usableFromInline
    init(parsingSlice bytes: ArraySlice<UInt8>) throws(RTPError) {
        // withUnsafeBytes is rethrows (untyped), so carry the typed error out through a Result.
        let result: Result<RTPPacketLayout, RTPError> = bytes.withUnsafeBytes { raw in
            do throws(RTPError) { return .success(try RTPPacketLayout(parsing: raw)) } catch { return .failure(error) }
        }
        self = try result.get()
    }
}

/// One RFC 8285 header extension element.
///
/// ```swift
/// let audioLevel = RTPHeaderExtensionElement(id: 1, data: [0x85])
/// ```
public struct RTPHeaderExtensionElement: Sendable, Equatable {
    /// Local identifier negotiated in SDP (`a=extmap`).
    public var id: UInt8
    /// Element data; when parsed, this shares the packet's storage.
    public var data: ArraySlice<UInt8>

    public init(id: UInt8, data: ArraySlice<UInt8>) {
        self.id = id
        self.data = data
    }

    public init(id: UInt8, data: [UInt8]) {
        self.init(id: id, data: data[...])
    }
}

/// An RTP header extension block.
///
/// ```swift
/// let ext = RTPHeaderExtension.oneByte([.init(id: 3, data: [0x01, 0x02, 0x03])])
/// ext.profile // 0xBEDE
/// ```
public enum RTPHeaderExtension: Sendable, Equatable {
    /// RFC 8285 one-byte header form (profile 0xBEDE).
    case oneByte([RTPHeaderExtensionElement])
    /// RFC 8285 two-byte header form (profile 0x100 << 4 | appBits).
    case twoByte(appBits: UInt8, [RTPHeaderExtensionElement])
    /// Any other profile: data kept verbatim (a whole number of 32-bit words).
    case raw(profile: UInt16, data: ArraySlice<UInt8>)

    public static let oneByteProfile: UInt16 = 0xBEDE
    public static let twoByteProfileBase: UInt16 = 0x1000

    /// The 16-bit profile value written in the extension header.
    public var profile: UInt16 {
        switch self {
        case .oneByte: return Self.oneByteProfile
        case .twoByte(let appBits, _): return Self.twoByteProfileBase | UInt16(appBits & 0x0F)
        case .raw(let profile, _): return profile
        }
    }

    /// Elements of the RFC 8285 forms (empty for `raw`).
    public var elements: [RTPHeaderExtensionElement] {
        switch self {
        case .oneByte(let e), .twoByte(_, let e): return e
        case .raw: return []
        }
    }

    /// The first element with `id`, if any.
    public func element(id: UInt8) -> RTPHeaderExtensionElement? {
        elements.first { $0.id == id }
    }

    static func isTwoByte(_ profile: UInt16) -> Bool { profile & 0xFFF0 == twoByteProfileBase }

    /// Walks RFC 8285 elements in `range`, calling `visit` with (id, data range). Shared by
    /// validation (no allocation) and model parsing so both agree on what is accepted.
    static func walkElements(
        profile: UInt16, reader r: ByteReader, range: Range<Int>,
        _ visit: (UInt8, Range<Int>) -> Void
    ) throws(RTPError) {
        if profile == oneByteProfile {
            var i = range.lowerBound
            while i < range.upperBound {
                let b = r.u8(i)
                if b == 0 { i += 1; continue }  // padding byte
                let id = b >> 4
                // RFC 8285 §4.2: ID 15 terminates processing of the whole extension.
                if id == 15 { return }
                // ID 0 is reserved for padding, which must be a zero byte.
                guard id != 0 else { throw .malformedExtensionElement(offset: i) }
                let len = Int(b & 0x0F) + 1
                let start = i + 1
                guard start + len <= range.upperBound else { throw .malformedExtensionElement(offset: i) }
                visit(id, start..<(start + len))
                i = start + len
            }
        } else if isTwoByte(profile) {
            var i = range.lowerBound
            while i < range.upperBound {
                let id = r.u8(i)
                if id == 0 { i += 1; continue }  // padding byte
                guard i + 1 < range.upperBound else { throw .malformedExtensionElement(offset: i) }
                let len = Int(r.u8(i + 1))
                let start = i + 2
                guard start + len <= range.upperBound else { throw .malformedExtensionElement(offset: i) }
                visit(id, start..<(start + len))
                i = start + len
            }
        }
    }

    static func validateElements(profile: UInt16, reader: ByteReader, range: Range<Int>) throws(RTPError) {
        try walkElements(profile: profile, reader: reader, range: range) { _, _ in }
    }

    /// Number of data bytes (after the 4-byte extension header) including zero padding to a word.
    func encodedDataLength() throws(RTPError) -> Int {
        var n = 0
        switch self {
        case .oneByte(let elements):
            for e in elements {
                guard (1...14).contains(e.id), (1...16).contains(e.data.count) else {
                    throw .invalidExtensionElement(id: e.id, length: e.data.count)
                }
                n += 1 + e.data.count
            }
        case .twoByte(let appBits, let elements):
            guard appBits <= 0x0F else { throw .appBitsOutOfRange(appBits) }
            for e in elements {
                guard e.id != 0, e.data.count <= 255 else {
                    throw .invalidExtensionElement(id: e.id, length: e.data.count)
                }
                n += 2 + e.data.count
            }
        case .raw(_, let data):
            guard data.count % 4 == 0 else { throw .extensionNotWordAligned(length: data.count) }
            n = data.count
        }
        let padded = (n + 3) & ~3
        guard padded / 4 <= Int(UInt16.max) else { throw .extensionTooLarge(length: padded) }
        return padded
    }

    func write(to w: inout ByteWriter, dataLength: Int) {
        w.u16(profile)
        w.u16(UInt16(dataLength / 4))
        let start = w.count
        switch self {
        case .oneByte(let elements):
            for e in elements {
                w.u8(e.id << 4 | UInt8(e.data.count - 1))
                w.append(contentsOf: e.data)
            }
        case .twoByte(_, let elements):
            for e in elements {
                w.u8(e.id)
                w.u8(UInt8(e.data.count))
                w.append(contentsOf: e.data)
            }
        case .raw(_, let data):
            w.append(contentsOf: data)
        }
        w.zeros(dataLength - (w.count - start))
    }
}

/// An RTP packet (RFC 3550 §5.1).
///
/// ```swift
/// let packet = RTPPacket(payloadType: 96, sequenceNumber: 7, timestamp: 90_000,
///                        ssrc: 0x1234_5678, payload: [0xDE, 0xAD])
/// let bytes = try packet.serialized()
/// let parsed = try RTPPacket(parsing: bytes)   // parsed == packet
/// ```
public struct RTPPacket: Sendable, Equatable {
    /// The only RTP version this codec accepts or writes.
    public static let version: UInt8 = 2

    public var marker: Bool
    /// 7-bit payload type.
    public var payloadType: UInt8
    public var sequenceNumber: UInt16
    public var timestamp: UInt32
    public var ssrc: UInt32
    /// Contributing sources (at most 15).
    public var csrcs: [UInt32]
    public var headerExtension: RTPHeaderExtension?
    /// Payload bytes; when parsed from an array this shares its storage.
    public var payload: ArraySlice<UInt8>
    /// Padding bytes to append including the count byte; 0 means the P bit is clear.
    /// Padding content is not modelled: it is written as zeros followed by the count.
    public var paddingLength: UInt8

    public var hasPadding: Bool { paddingLength > 0 }

    public init(
        marker: Bool = false,
        payloadType: UInt8,
        sequenceNumber: UInt16,
        timestamp: UInt32,
        ssrc: UInt32,
        csrcs: [UInt32] = [],
        headerExtension: RTPHeaderExtension? = nil,
        payload: ArraySlice<UInt8> = [],
        paddingLength: UInt8 = 0
    ) {
        self.marker = marker
        self.payloadType = payloadType
        self.sequenceNumber = sequenceNumber
        self.timestamp = timestamp
        self.ssrc = ssrc
        self.csrcs = csrcs
        self.headerExtension = headerExtension
        self.payload = payload
        self.paddingLength = paddingLength
    }

    /// Parses a packet; payload and extension data share `bytes`' storage.
    public init(parsing bytes: [UInt8]) throws(RTPError) {
        try self.init(parsing: bytes[...])
    }

    /// Parses a packet; payload and extension data share `bytes`' storage.
    public init(parsing bytes: ArraySlice<UInt8>) throws(RTPError) {
        let layout = try RTPPacketLayout(parsing: bytes)
        let base = bytes.startIndex
        marker = layout.marker
        payloadType = layout.payloadType
        sequenceNumber = layout.sequenceNumber
        timestamp = layout.timestamp
        ssrc = layout.ssrc
        paddingLength = UInt8(layout.paddingLength)
        payload = bytes[(base + layout.payloadRange.lowerBound)..<(base + layout.payloadRange.upperBound)]

        var csrcs: [UInt32] = []
        var ext: RTPHeaderExtension? = nil
        if layout.csrcCount > 0 || layout.extensionProfile != nil {
            bytes.withUnsafeBytes { raw in
                let r = ByteReader(raw)
                if layout.csrcCount > 0 {
                    csrcs.reserveCapacity(layout.csrcCount)
                    for i in 0..<layout.csrcCount { csrcs.append(r.u32(RTPPacketLayout.fixedHeaderLength + 4 * i)) }
                }
                if let profile = layout.extensionProfile {
                    let range = layout.extensionDataRange
                    if profile == RTPHeaderExtension.oneByteProfile || RTPHeaderExtension.isTwoByte(profile) {
                        var elements: [RTPHeaderExtensionElement] = []
                        // Already validated by the layout, so this walk cannot fail.
                        try? RTPHeaderExtension.walkElements(profile: profile, reader: r, range: range) { id, dr in
                            elements.append(.init(id: id, data: bytes[(base + dr.lowerBound)..<(base + dr.upperBound)]))
                        }
                        ext = profile == RTPHeaderExtension.oneByteProfile
                            ? .oneByte(elements) : .twoByte(appBits: UInt8(profile & 0x0F), elements)
                    } else {
                        ext = .raw(profile: profile, data: bytes[(base + range.lowerBound)..<(base + range.upperBound)])
                    }
                }
            }
        }
        self.csrcs = csrcs
        self.headerExtension = ext
    }

    /// Serializes into a new array.
    public func serialized() throws(RTPError) -> [UInt8] {
        var out: [UInt8] = []
        try serialize(into: &out)
        return out
    }

    /// Appends the packet to `buffer` (lets a relay reuse one buffer). On error `buffer` is
    /// left unchanged.
    public func serialize(into buffer: inout [UInt8]) throws(RTPError) {
        guard payloadType <= 0x7F else { throw .payloadTypeOutOfRange(payloadType) }
        guard csrcs.count <= 15 else { throw .tooManyCSRCs(csrcs.count) }
        let extLength = try headerExtension?.encodedDataLength()

        var total = RTPPacketLayout.fixedHeaderLength + 4 * csrcs.count + payload.count + Int(paddingLength)
        if let extLength { total += 4 + extLength }

        var w = ByteWriter(appendingTo: [])
        swap(&w.bytes, &buffer)
        w.bytes.reserveCapacity(w.count + total)
        var b0: UInt8 = 0x80 | UInt8(csrcs.count)
        if paddingLength > 0 { b0 |= 0x20 }
        if headerExtension != nil { b0 |= 0x10 }
        w.u8(b0)
        w.u8((marker ? 0x80 : 0) | payloadType)
        w.u16(sequenceNumber)
        w.u32(timestamp)
        w.u32(ssrc)
        for c in csrcs { w.u32(c) }
        if let headerExtension, let extLength { headerExtension.write(to: &w, dataLength: extLength) }
        w.append(contentsOf: payload)
        if paddingLength > 0 {
            w.zeros(Int(paddingLength) - 1)
            w.u8(paddingLength)
        }
        swap(&w.bytes, &buffer)
    }

    /// RFC 5761 §4 demultiplexing for rtcp-mux: true when the second byte's low 7 bits (the RTP
    /// payload type position) are 64–95, i.e. an RTCP packet type 192–223.
    @inlinable
    public static func isRTCP(secondByte: UInt8) -> Bool {
        (64...95).contains(secondByte & 0x7F)
    }

    /// Demultiplexes an RTP/RTCP datagram on a muxed port: needs at least two bytes with version
    /// bits 2 (RFC 7983 range 128–191) and an RTCP packet type (RFC 5761).
    @inlinable
    public static func isRTCP<Bytes: Collection>(_ packet: Bytes) -> Bool where Bytes.Element == UInt8 {
        var it = packet.makeIterator()
        guard let first = it.next(), let second = it.next() else { return false }
        return first >> 6 == 2 && isRTCP(secondByte: second)
    }
}
