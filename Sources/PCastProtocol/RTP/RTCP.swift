// RTCP (RFC 3550 §6) compound packets and the feedback messages a WebRTC relay needs:
// RFC 4585 generic NACK and PLI, RFC 5104 FIR, and draft-alvestrand-rmcat-remb REMB.
//
// Parsing is strict: every length, count and padding field is checked against the bytes that are
// actually there, and anything inconsistent is an `RTCPError`. Each loop advances by at least one
// byte per iteration and is bounded by the buffer, so hostile input cannot make it spin.
// Packet types this module does not model (XR, transport-wide CC, TMMBR, ...) are kept raw so a
// relay can still forward them.

/// Errors raised while parsing or building RTCP.
///
/// ```swift
/// do { _ = try RTCPCompoundPacket(parsing: [0x80, 0xC9]) }
/// catch { print(error) } // truncatedHeader(offset: 0)
/// ```
public enum RTCPError: Error, Sendable, Equatable {
    /// No bytes at all.
    case empty
    /// Fewer than 4 bytes remain where a packet header should start.
    case truncatedHeader(offset: Int)
    /// The version field of the packet at `offset` is not 2.
    case unsupportedVersion(UInt8, offset: Int)
    /// The length field declares more bytes than the buffer holds.
    case lengthExceedsBuffer(offset: Int, declared: Int, available: Int)
    /// The P bit is set but the padding count is zero or reaches into the header.
    case invalidPadding(offset: Int, count: UInt8)
    /// The packet body is shorter than its counts and fixed fields require.
    case truncatedBody(packetType: UInt8, offset: Int)
    /// The packet body has bytes its structure does not account for.
    case trailingBytes(packetType: UInt8, offset: Int)
    /// An SDES chunk has no terminating null item before the end of the packet.
    case unterminatedSDESChunk(offset: Int)
    /// A NACK or FIR carries no entries (RFC 4585/5104 require at least one).
    case missingFeedbackEntries(packetType: UInt8, format: UInt8, offset: Int)
    /// Building: a list is longer than its count field (or the packet) allows.
    case countOutOfRange(field: String, count: Int, maximum: Int)
    /// Building: a scalar does not fit its wire field.
    case valueOutOfRange(field: String, value: Int64)
    /// Building: the packet would exceed the 16-bit length field (262,144 bytes).
    case packetTooLarge(length: Int)
}

/// RTCP packet type numbers (the second header byte).
///
/// ```swift
/// RTCPPacketType.senderReport.rawValue // 200
/// ```
public enum RTCPPacketType: UInt8, Sendable {
    case senderReport = 200
    case receiverReport = 201
    case sourceDescription = 202
    case goodbye = 203
    case applicationDefined = 204
    case transportFeedback = 205  // RTPFB
    case payloadFeedback = 206  // PSFB
}

/// A reception report block (RFC 3550 §6.4.1), used by SR and RR.
///
/// ```swift
/// let block = RTCPReportBlock(ssrc: 0x1111, fractionLost: 12, cumulativeLost: 40,
///                             extendedHighestSequenceNumber: 70_000, jitter: 30,
///                             lastSenderReport: 0, delaySinceLastSenderReport: 0)
/// ```
public struct RTCPReportBlock: Sendable, Equatable {
    public var ssrc: UInt32
    public var fractionLost: UInt8
    /// Signed 24-bit on the wire (duplicates can make it negative): -8,388,608 ... 8,388,607.
    public var cumulativeLost: Int32
    public var extendedHighestSequenceNumber: UInt32
    public var jitter: UInt32
    public var lastSenderReport: UInt32
    public var delaySinceLastSenderReport: UInt32

    public init(
        ssrc: UInt32, fractionLost: UInt8 = 0, cumulativeLost: Int32 = 0,
        extendedHighestSequenceNumber: UInt32 = 0, jitter: UInt32 = 0,
        lastSenderReport: UInt32 = 0, delaySinceLastSenderReport: UInt32 = 0
    ) {
        self.ssrc = ssrc
        self.fractionLost = fractionLost
        self.cumulativeLost = cumulativeLost
        self.extendedHighestSequenceNumber = extendedHighestSequenceNumber
        self.jitter = jitter
        self.lastSenderReport = lastSenderReport
        self.delaySinceLastSenderReport = delaySinceLastSenderReport
    }

    static let length = 24

    init(reader r: ByteReader, at o: Int) {
        ssrc = r.u32(o)
        fractionLost = r.u8(o + 4)
        // Sign-extend the 24-bit field.
        cumulativeLost = Int32(bitPattern: r.u24(o + 5) << 8) >> 8
        extendedHighestSequenceNumber = r.u32(o + 8)
        jitter = r.u32(o + 12)
        lastSenderReport = r.u32(o + 16)
        delaySinceLastSenderReport = r.u32(o + 20)
    }

    func write(to w: inout ByteWriter) throws(RTCPError) {
        guard (-0x80_0000...0x7F_FFFF).contains(cumulativeLost) else {
            throw .valueOutOfRange(field: "cumulativeLost", value: Int64(cumulativeLost))
        }
        w.u32(ssrc)
        w.u8(fractionLost)
        w.u24(UInt32(bitPattern: cumulativeLost) & 0xFF_FFFF)
        w.u32(extendedHighestSequenceNumber)
        w.u32(jitter)
        w.u32(lastSenderReport)
        w.u32(delaySinceLastSenderReport)
    }
}

/// Sender report (PT 200).
///
/// ```swift
/// let sr = RTCPSenderReport(ssrc: 1, ntpTimestamp: 0xE000_0000_0000_0000, rtpTimestamp: 90_000,
///                           packetCount: 10, octetCount: 1_000)
/// ```
public struct RTCPSenderReport: Sendable, Equatable {
    public var ssrc: UInt32
    /// 64-bit NTP timestamp (seconds since 1900 in the high 32 bits, fraction in the low 32).
    public var ntpTimestamp: UInt64
    public var rtpTimestamp: UInt32
    public var packetCount: UInt32
    public var octetCount: UInt32
    /// At most 31.
    public var reportBlocks: [RTCPReportBlock]
    /// Profile-specific extension bytes after the report blocks, kept verbatim.
    public var profileExtension: [UInt8]

    public init(
        ssrc: UInt32, ntpTimestamp: UInt64, rtpTimestamp: UInt32, packetCount: UInt32,
        octetCount: UInt32, reportBlocks: [RTCPReportBlock] = [], profileExtension: [UInt8] = []
    ) {
        self.ssrc = ssrc
        self.ntpTimestamp = ntpTimestamp
        self.rtpTimestamp = rtpTimestamp
        self.packetCount = packetCount
        self.octetCount = octetCount
        self.reportBlocks = reportBlocks
        self.profileExtension = profileExtension
    }
}

/// Receiver report (PT 201).
///
/// ```swift
/// let rr = RTCPReceiverReport(ssrc: 1, reportBlocks: [RTCPReportBlock(ssrc: 2)])
/// ```
public struct RTCPReceiverReport: Sendable, Equatable {
    public var ssrc: UInt32
    /// At most 31.
    public var reportBlocks: [RTCPReportBlock]
    /// Profile-specific extension bytes after the report blocks, kept verbatim.
    public var profileExtension: [UInt8]

    public init(ssrc: UInt32, reportBlocks: [RTCPReportBlock] = [], profileExtension: [UInt8] = []) {
        self.ssrc = ssrc
        self.reportBlocks = reportBlocks
        self.profileExtension = profileExtension
    }
}

/// Source description (PT 202).
///
/// ```swift
/// let sdes = RTCPSourceDescription(chunks: [
///     .init(ssrc: 0x1234, items: [.init(type: RTCPSourceDescription.ItemType.cname, text: "user@host")])
/// ])
/// ```
public struct RTCPSourceDescription: Sendable, Equatable {
    /// SDES item type numbers (RFC 3550 §6.5).
    ///
    /// ```swift
    /// RTCPSourceDescription.ItemType.cname // 1
    /// ```
    public enum ItemType: Sendable {
        public static let cname: UInt8 = 1
        public static let name: UInt8 = 2
        public static let email: UInt8 = 3
        public static let phone: UInt8 = 4
        public static let location: UInt8 = 5
        public static let tool: UInt8 = 6
        public static let note: UInt8 = 7
        public static let priv: UInt8 = 8
    }

    /// One SDES item. Values are bytes because the wire does not guarantee UTF-8.
    ///
    /// ```swift
    /// let tool = RTCPSourceDescription.Item(type: RTCPSourceDescription.ItemType.tool, text: "PCastKit")
    /// tool.text // "PCastKit"
    /// ```
    public struct Item: Sendable, Equatable {
        /// 1–255 (0 is the chunk terminator and cannot be an item).
        public var type: UInt8
        /// At most 255 bytes.
        public var value: [UInt8]

        public init(type: UInt8, value: [UInt8]) {
            self.type = type
            self.value = value
        }

        public init(type: UInt8, text: String) {
            self.init(type: type, value: Array(text.utf8))
        }

        /// The value decoded as UTF-8, or nil if it is not valid UTF-8.
        public var text: String? { String(validating: value, as: UTF8.self) }
    }

    /// Items for one SSRC/CSRC.
    ///
    /// ```swift
    /// let chunk = RTCPSourceDescription.Chunk(ssrc: 7, items: [.init(type: 1, text: "cname")])
    /// ```
    public struct Chunk: Sendable, Equatable {
        public var ssrc: UInt32
        public var items: [Item]

        public init(ssrc: UInt32, items: [Item]) {
            self.ssrc = ssrc
            self.items = items
        }
    }

    /// At most 31.
    public var chunks: [Chunk]

    public init(chunks: [Chunk]) {
        self.chunks = chunks
    }
}

/// Goodbye (PT 203).
///
/// ```swift
/// let bye = RTCPGoodbye(ssrcs: [0x1234], reason: Array("shutdown".utf8))
/// ```
public struct RTCPGoodbye: Sendable, Equatable {
    /// At most 31.
    public var ssrcs: [UInt32]
    /// Optional reason (at most 255 bytes). Empty and absent are distinct on the wire.
    public var reason: [UInt8]?

    public init(ssrcs: [UInt32], reason: [UInt8]? = nil) {
        self.ssrcs = ssrcs
        self.reason = reason
    }

    /// The reason decoded as UTF-8, or nil if absent or not valid UTF-8.
    public var reasonText: String? { reason.flatMap { String(validating: $0, as: UTF8.self) } }
}

/// Application-defined packet (PT 204).
///
/// ```swift
/// let app = RTCPApplicationDefined(subtype: 1, ssrc: 7, name: RTCPApplicationDefined.name("PCST"),
///                                  data: [0, 0, 0, 1])
/// ```
public struct RTCPApplicationDefined: Sendable, Equatable {
    /// 5-bit subtype carried in the count field.
    public var subtype: UInt8
    public var ssrc: UInt32
    /// Four ASCII characters, big-endian packed.
    public var name: UInt32
    public var data: [UInt8]

    public init(subtype: UInt8, ssrc: UInt32, name: UInt32, data: [UInt8] = []) {
        self.subtype = subtype
        self.ssrc = ssrc
        self.name = name
        self.data = data
    }

    /// Packs a four-character name; characters beyond four are ignored, missing ones are spaces.
    public static func name(_ text: String) -> UInt32 {
        var bytes = Array(text.utf8.prefix(4))
        while bytes.count < 4 { bytes.append(0x20) }
        return bytes.reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// The name as four bytes.
    public var nameBytes: [UInt8] { [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: name >> $0) } }
}

/// A packet of a type this module does not interpret (e.g. XR, PT 207), kept verbatim.
///
/// ```swift
/// let xr = RTCPUnknownPacket(payloadType: 207, count: 0, body: [0, 0, 0, 1])
/// ```
public struct RTCPUnknownPacket: Sendable, Equatable {
    public var payloadType: UInt8
    /// The 5-bit count/format field.
    public var count: UInt8
    /// Everything after the 4-byte header, without padding.
    public var body: [UInt8]

    public init(payloadType: UInt8, count: UInt8, body: [UInt8]) {
        self.payloadType = payloadType
        self.count = count
        self.body = body
    }
}

/// One packet of an RTCP compound packet.
///
/// ```swift
/// let packet = RTCPPacket.pictureLossIndication(.init(senderSSRC: 1, mediaSSRC: 2))
/// let bytes = try packet.serialized()   // 12 bytes
/// ```
public enum RTCPPacket: Sendable, Equatable {
    case senderReport(RTCPSenderReport)
    case receiverReport(RTCPReceiverReport)
    case sourceDescription(RTCPSourceDescription)
    case goodbye(RTCPGoodbye)
    case applicationDefined(RTCPApplicationDefined)
    case genericNACK(RTCPGenericNACK)
    case pictureLossIndication(RTCPPictureLossIndication)
    case fullIntraRequest(RTCPFullIntraRequest)
    case receiverEstimatedMaxBitrate(RTCPReceiverEstimatedMaxBitrate)
    /// Other RTPFB/PSFB messages (transport-wide CC included), kept raw.
    case feedback(RTCPFeedbackPacket)
    /// Other packet types, kept raw.
    case unknown(RTCPUnknownPacket)

    /// The packet type byte this packet is written with.
    public var payloadType: UInt8 {
        switch self {
        case .senderReport: return 200
        case .receiverReport: return 201
        case .sourceDescription: return 202
        case .goodbye: return 203
        case .applicationDefined: return 204
        case .genericNACK: return 205
        case .pictureLossIndication, .fullIntraRequest, .receiverEstimatedMaxBitrate: return 206
        case .feedback(let f): return f.payloadType
        case .unknown(let u): return u.payloadType
        }
    }

    /// Serializes this packet alone (also a valid reduced-size RTCP packet, RFC 5506).
    public func serialized() throws(RTCPError) -> [UInt8] {
        var w = ByteWriter()
        try write(to: &w)
        return w.bytes
    }

    // MARK: Writing

    static let maximumPacketLength = 4 * (Int(UInt16.max) + 1)

    func write(to w: inout ByteWriter) throws(RTCPError) {
        let start = w.count
        // Header written as zeros first; count and length are patched once the body is written.
        w.u32(0)
        let count: UInt8
        switch self {
        case .senderReport(let sr):
            count = try Self.checkCount("reportBlocks", sr.reportBlocks.count, 31)
            w.u32(sr.ssrc)
            w.u64(sr.ntpTimestamp)
            w.u32(sr.rtpTimestamp)
            w.u32(sr.packetCount)
            w.u32(sr.octetCount)
            for b in sr.reportBlocks { try b.write(to: &w) }
            w.append(contentsOf: sr.profileExtension)
        case .receiverReport(let rr):
            count = try Self.checkCount("reportBlocks", rr.reportBlocks.count, 31)
            w.u32(rr.ssrc)
            for b in rr.reportBlocks { try b.write(to: &w) }
            w.append(contentsOf: rr.profileExtension)
        case .sourceDescription(let sdes):
            count = try Self.checkCount("chunks", sdes.chunks.count, 31)
            for chunk in sdes.chunks {
                w.u32(chunk.ssrc)
                for item in chunk.items {
                    guard item.type != 0 else { throw .valueOutOfRange(field: "SDES item type", value: 0) }
                    _ = try Self.checkCount("SDES item value", item.value.count, 255)
                    w.u8(item.type)
                    w.u8(UInt8(item.value.count))
                    w.append(contentsOf: item.value)
                }
                // Null terminator, then null-pad to the next 32-bit boundary.
                w.u8(0)
                w.zeros((4 - (w.count - start) % 4) % 4)
            }
        case .goodbye(let bye):
            count = try Self.checkCount("ssrcs", bye.ssrcs.count, 31)
            for s in bye.ssrcs { w.u32(s) }
            if let reason = bye.reason {
                _ = try Self.checkCount("reason", reason.count, 255)
                w.u8(UInt8(reason.count))
                w.append(contentsOf: reason)
                w.zeros((4 - (w.count - start) % 4) % 4)
            }
        case .applicationDefined(let app):
            guard app.subtype <= 31 else { throw .valueOutOfRange(field: "subtype", value: Int64(app.subtype)) }
            count = app.subtype
            w.u32(app.ssrc)
            w.u32(app.name)
            w.append(contentsOf: app.data)
        case .genericNACK(let nack):
            guard !nack.items.isEmpty else { throw .countOutOfRange(field: "items", count: 0, maximum: 0) }
            count = 1
            w.u32(nack.senderSSRC)
            w.u32(nack.mediaSSRC)
            for item in nack.items {
                w.u16(item.packetID)
                w.u16(item.lostBitmask)
            }
        case .pictureLossIndication(let pli):
            count = 1
            w.u32(pli.senderSSRC)
            w.u32(pli.mediaSSRC)
        case .fullIntraRequest(let fir):
            guard !fir.entries.isEmpty else { throw .countOutOfRange(field: "entries", count: 0, maximum: 0) }
            count = 4
            w.u32(fir.senderSSRC)
            w.u32(fir.mediaSSRC)
            for e in fir.entries {
                w.u32(e.ssrc)
                w.u8(e.sequenceNumber)
                w.zeros(3)
            }
        case .receiverEstimatedMaxBitrate(let remb):
            count = 15
            _ = try Self.checkCount("ssrcs", remb.ssrcs.count, 255)
            guard remb.exponent <= RTCPReceiverEstimatedMaxBitrate.maximumExponent else {
                throw .valueOutOfRange(field: "exponent", value: Int64(remb.exponent))
            }
            guard remb.mantissa <= RTCPReceiverEstimatedMaxBitrate.maximumMantissa else {
                throw .valueOutOfRange(field: "mantissa", value: Int64(remb.mantissa))
            }
            w.u32(remb.senderSSRC)
            w.u32(remb.mediaSSRC)
            w.append(contentsOf: RTCPReceiverEstimatedMaxBitrate.identifier)
            w.u8(UInt8(remb.ssrcs.count))
            w.u24(UInt32(remb.exponent) << 18 | remb.mantissa)
            for s in remb.ssrcs { w.u32(s) }
        case .feedback(let fb):
            guard fb.payloadType == 205 || fb.payloadType == 206 else {
                throw .valueOutOfRange(field: "payloadType", value: Int64(fb.payloadType))
            }
            guard fb.format <= 31 else { throw .valueOutOfRange(field: "format", value: Int64(fb.format)) }
            count = fb.format
            w.u32(fb.senderSSRC)
            w.u32(fb.mediaSSRC)
            w.append(contentsOf: fb.feedbackControlInformation)
        case .unknown(let u):
            guard u.count <= 31 else { throw .valueOutOfRange(field: "count", value: Int64(u.count)) }
            count = u.count
            w.append(contentsOf: u.body)
        }

        // Bodies that are not a whole number of words (raw data, extensions) get RFC 3550
        // padding so the packet stays valid and parses back to the same body.
        let bodyLength = w.count - start - 4
        let pad = (4 - bodyLength % 4) % 4
        if pad > 0 {
            w.zeros(pad - 1)
            w.u8(UInt8(pad))
        }
        let total = w.count - start
        guard total <= Self.maximumPacketLength else {
            w.bytes.removeSubrange(start...)
            throw .packetTooLarge(length: total)
        }
        w.bytes[start] = 0x80 | (pad > 0 ? 0x20 : 0) | count
        w.bytes[start + 1] = payloadType
        w.setU16(UInt16(total / 4 - 1), at: start + 2)
    }

    private static func checkCount(_ field: String, _ n: Int, _ max: Int) throws(RTCPError) -> UInt8 {
        guard n <= max else { throw .countOutOfRange(field: field, count: n, maximum: max) }
        return UInt8(truncatingIfNeeded: n)
    }

    // MARK: Parsing

    /// Parses one packet whose header starts at `offset` and whose (padding-free) body is
    /// `body`. `count` is the 5-bit count/format field.
    static func parse(
        reader r: ByteReader, payloadType pt: UInt8, count: UInt8, body: Range<Int>, offset: Int
    ) throws(RTCPError) -> RTCPPacket {
        let o = body.lowerBound
        let n = body.count
        func need(_ bytes: Int) throws(RTCPError) {
            guard n >= bytes else { throw .truncatedBody(packetType: pt, offset: offset) }
        }
        func blocks(at start: Int) -> [RTCPReportBlock] {
            (0..<Int(count)).map { RTCPReportBlock(reader: r, at: start + $0 * RTCPReportBlock.length) }
        }

        switch pt {
        case 200:
            try need(24 + Int(count) * RTCPReportBlock.length)
            let extStart = o + 24 + Int(count) * RTCPReportBlock.length
            return .senderReport(RTCPSenderReport(
                ssrc: r.u32(o), ntpTimestamp: r.u64(o + 4), rtpTimestamp: r.u32(o + 12),
                packetCount: r.u32(o + 16), octetCount: r.u32(o + 20),
                reportBlocks: blocks(at: o + 24), profileExtension: r.array(extStart..<body.upperBound)))

        case 201:
            try need(4 + Int(count) * RTCPReportBlock.length)
            let extStart = o + 4 + Int(count) * RTCPReportBlock.length
            return .receiverReport(RTCPReceiverReport(
                ssrc: r.u32(o), reportBlocks: blocks(at: o + 4),
                profileExtension: r.array(extStart..<body.upperBound)))

        case 202:
            return .sourceDescription(try parseSDES(reader: r, count: count, body: body, offset: offset))

        case 203:
            try need(4 * Int(count))
            let ssrcs = (0..<Int(count)).map { r.u32(o + 4 * $0) }
            var reason: [UInt8]? = nil
            var p = o + 4 * Int(count)
            if p < body.upperBound {
                let len = Int(r.u8(p))
                guard p + 1 + len <= body.upperBound else { throw .truncatedBody(packetType: pt, offset: offset) }
                reason = r.array((p + 1)..<(p + 1 + len))
                p += 1 + len
                // Only the null padding to the next word may follow the reason.
                guard body.upperBound - p <= 3 else { throw .trailingBytes(packetType: pt, offset: offset) }
            }
            return .goodbye(RTCPGoodbye(ssrcs: ssrcs, reason: reason))

        case 204:
            try need(8)
            return .applicationDefined(RTCPApplicationDefined(
                subtype: count, ssrc: r.u32(o), name: r.u32(o + 4), data: r.array((o + 8)..<body.upperBound)))

        case 205, 206:
            try need(8)
            let sender = r.u32(o)
            let media = r.u32(o + 4)
            let fci = (o + 8)..<body.upperBound
            switch (pt, count) {
            case (205, 1):
                guard fci.count % 4 == 0 else { throw .trailingBytes(packetType: pt, offset: offset) }
                guard !fci.isEmpty else { throw .missingFeedbackEntries(packetType: pt, format: count, offset: offset) }
                let items = stride(from: fci.lowerBound, to: fci.upperBound, by: 4).map {
                    RTCPGenericNACK.Item(packetID: r.u16($0), lostBitmask: r.u16($0 + 2))
                }
                return .genericNACK(RTCPGenericNACK(senderSSRC: sender, mediaSSRC: media, items: items))
            case (206, 1):
                guard fci.isEmpty else { throw .trailingBytes(packetType: pt, offset: offset) }
                return .pictureLossIndication(RTCPPictureLossIndication(senderSSRC: sender, mediaSSRC: media))
            case (206, 4):
                guard fci.count % 8 == 0 else { throw .trailingBytes(packetType: pt, offset: offset) }
                guard !fci.isEmpty else { throw .missingFeedbackEntries(packetType: pt, format: count, offset: offset) }
                let entries = stride(from: fci.lowerBound, to: fci.upperBound, by: 8).map {
                    RTCPFullIntraRequest.Entry(ssrc: r.u32($0), sequenceNumber: r.u8($0 + 4))
                }
                return .fullIntraRequest(RTCPFullIntraRequest(senderSSRC: sender, mediaSSRC: media, entries: entries))
            case (206, 15) where fci.count >= 4 && r.u32(fci.lowerBound) == RTCPReceiverEstimatedMaxBitrate.identifierWord:
                guard fci.count >= 8 else { throw .truncatedBody(packetType: pt, offset: offset) }
                let numSSRCs = Int(r.u8(fci.lowerBound + 4))
                let brField = r.u24(fci.lowerBound + 5)
                let expected = 8 + 4 * numSSRCs
                guard fci.count >= expected else { throw .truncatedBody(packetType: pt, offset: offset) }
                guard fci.count == expected else { throw .trailingBytes(packetType: pt, offset: offset) }
                let ssrcs = (0..<numSSRCs).map { r.u32(fci.lowerBound + 8 + 4 * $0) }
                return .receiverEstimatedMaxBitrate(RTCPReceiverEstimatedMaxBitrate(
                    senderSSRC: sender, mediaSSRC: media, exponent: UInt8(brField >> 18),
                    mantissa: brField & RTCPReceiverEstimatedMaxBitrate.maximumMantissa, ssrcs: ssrcs))
            default:
                return .feedback(RTCPFeedbackPacket(
                    payloadType: pt, format: count, senderSSRC: sender, mediaSSRC: media,
                    feedbackControlInformation: r.array(fci)))
            }

        default:
            return .unknown(RTCPUnknownPacket(payloadType: pt, count: count, body: r.array(body)))
        }
    }

    private static func parseSDES(
        reader r: ByteReader, count: UInt8, body: Range<Int>, offset: Int
    ) throws(RTCPError) -> RTCPSourceDescription {
        let pt: UInt8 = 202
        var chunks: [RTCPSourceDescription.Chunk] = []
        chunks.reserveCapacity(Int(count))
        var p = body.lowerBound
        for _ in 0..<count {
            guard p + 4 <= body.upperBound else { throw .truncatedBody(packetType: pt, offset: offset) }
            let ssrc = r.u32(p)
            p += 4
            var items: [RTCPSourceDescription.Item] = []
            while true {
                guard p < body.upperBound else { throw .unterminatedSDESChunk(offset: offset) }
                let type = r.u8(p)
                if type == 0 {
                    // Terminator plus null padding up to the next word; `body` starts 4 bytes
                    // after a word-aligned header, so alignment is relative to it.
                    let end = body.lowerBound + ((p + 1 - body.lowerBound + 3) & ~3)
                    guard end <= body.upperBound else { throw .unterminatedSDESChunk(offset: offset) }
                    p = end
                    break
                }
                guard p + 2 <= body.upperBound else { throw .truncatedBody(packetType: pt, offset: offset) }
                let len = Int(r.u8(p + 1))
                guard p + 2 + len <= body.upperBound else { throw .truncatedBody(packetType: pt, offset: offset) }
                items.append(.init(type: type, value: r.array((p + 2)..<(p + 2 + len))))
                p += 2 + len
            }
            chunks.append(.init(ssrc: ssrc, items: items))
        }
        guard p == body.upperBound else { throw .trailingBytes(packetType: pt, offset: offset) }
        return RTCPSourceDescription(chunks: chunks)
    }
}

/// An RTCP compound packet: one or more RTCP packets back to back in one datagram.
///
/// RFC 3550's "must start with SR/RR" rule is not enforced, so reduced-size RTCP (RFC 5506,
/// e.g. a lone PLI) parses too.
///
/// ```swift
/// let compound = RTCPCompoundPacket(packets: [
///     .receiverReport(.init(ssrc: 1)),
///     .genericNACK(.init(senderSSRC: 1, mediaSSRC: 2, lostSequenceNumbers: [10, 12])),
/// ])
/// let bytes = try compound.serialized()
/// try RTCPCompoundPacket(parsing: bytes) == compound // true
/// ```
public struct RTCPCompoundPacket: Sendable, Equatable {
    public var packets: [RTCPPacket]

    public init(packets: [RTCPPacket]) {
        self.packets = packets
    }

    public init(parsing bytes: [UInt8]) throws(RTCPError) {
        try self.init(parsing: bytes[...])
    }

    public init(parsing bytes: ArraySlice<UInt8>) throws(RTCPError) {
        let result: Result<RTCPCompoundPacket, RTCPError> = bytes.withUnsafeBytes { raw in
            do throws(RTCPError) { return .success(try RTCPCompoundPacket(parsing: raw)) } catch { return .failure(error) }
        }
        self = try result.get()
    }

    /// Parses every packet in `bytes`; the packets must cover the buffer exactly.
    public init(parsing bytes: UnsafeRawBufferPointer) throws(RTCPError) {
        let r = ByteReader(bytes)
        let n = r.count
        guard n > 0 else { throw .empty }
        var packets: [RTCPPacket] = []
        var offset = 0
        while offset < n {
            guard n - offset >= 4 else { throw .truncatedHeader(offset: offset) }
            let b0 = r.u8(offset)
            let version = b0 >> 6
            guard version == 2 else { throw .unsupportedVersion(version, offset: offset) }
            let pt = r.u8(offset + 1)
            let length = 4 * (Int(r.u16(offset + 2)) + 1)
            guard length <= n - offset else {
                throw .lengthExceedsBuffer(offset: offset, declared: length, available: n - offset)
            }
            let end = offset + length
            var bodyEnd = end
            if b0 & 0x20 != 0 {
                let pad = r.u8(end - 1)
                guard pad > 0, Int(pad) <= length - 4 else { throw .invalidPadding(offset: offset, count: pad) }
                bodyEnd -= Int(pad)
            }
            packets.append(try RTCPPacket.parse(
                reader: r, payloadType: pt, count: b0 & 0x1F, body: (offset + 4)..<bodyEnd, offset: offset))
            // `length` is at least 4, so the loop always advances.
            offset = end
        }
        self.packets = packets
    }

    /// Serializes all packets back to back.
    public func serialized() throws(RTCPError) -> [UInt8] {
        var w = ByteWriter()
        for p in packets { try p.write(to: &w) }
        return w.bytes
    }

    /// Appends the serialized packets to `buffer`; on error `buffer` is left unchanged.
    public func serialize(into buffer: inout [UInt8]) throws(RTCPError) {
        buffer.append(contentsOf: try serialized())
    }
}
