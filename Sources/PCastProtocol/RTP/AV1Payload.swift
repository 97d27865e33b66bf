/// Why an AV1 temporal unit could not be read or packetized.
public enum AV1PayloadError: Error, Sendable, Hashable, CustomStringConvertible {
    /// An OBU header with its forbidden bit set, a size running past the data, a LEB128 value
    /// longer than 8 bytes or over 2³² − 1.
    case malformedOBU(String)
    /// Packets too small to carry the aggregation header, a length and a byte of an OBU.
    case payloadSizeTooSmall(Int)

    public var description: String {
        switch self {
        case .malformedOBU(let why): "malformed AV1 OBU: \(why)"
        case .payloadSizeTooSmall(let size): "an AV1 RTP payload of \(size) bytes cannot carry an OBU fragment (at least 8 are needed)"
        }
    }
}

/// One AV1 Open Bitstream Unit (AV1 bitstream §5.3): its header (and extension) and its payload,
/// without the `obu_size` field.
public struct AV1OBU: Sendable, Hashable {
    /// `obu_type`: 1 sequence header, 2 temporal delimiter, 3 frame header, 4 tile group,
    /// 5 metadata, 6 frame, 7 redundant frame header, 8 tile list, 15 padding.
    public var type: UInt8
    /// The extension byte (temporal_id in its top 3 bits, spatial_id in the next 2), when present.
    public var extensionByte: UInt8?
    public var payload: [UInt8]

    public static let sequenceHeader: UInt8 = 1
    public static let temporalDelimiter: UInt8 = 2
    public static let frameHeader: UInt8 = 3
    public static let frame: UInt8 = 6
    public static let tileList: UInt8 = 8
    public static let padding: UInt8 = 15

    public init(type: UInt8, extensionByte: UInt8? = nil, payload: [UInt8]) {
        self.type = type
        self.extensionByte = extensionByte
        self.payload = payload
    }

    public var temporalID: UInt8 { (extensionByte ?? 0) >> 5 }
    public var spatialID: UInt8 { ((extensionByte ?? 0) >> 3) & 0x03 }

    /// The OBU as RTP carries it: header (and extension) without `obu_size`, then the payload.
    public var withoutSize: [UInt8] {
        var bytes: [UInt8] = [(type << 3) | (extensionByte == nil ? 0 : 0x04)]
        if let extensionByte { bytes.append(extensionByte) }
        return bytes + payload
    }

    /// The OBU in the low-overhead bitstream format decoders take: `obu_has_size_field` set.
    public var withSize: [UInt8] {
        var bytes: [UInt8] = [(type << 3) | (extensionByte == nil ? 0 : 0x04) | 0x02]
        if let extensionByte { bytes.append(extensionByte) }
        AV1Payload.appendLEB128(UInt32(payload.count), to: &bytes)
        return bytes + payload
    }

    /// Reads one OBU at the start of `bytes`; `sized` false means `bytes` is the whole OBU and
    /// its header need not carry `obu_size` (an RTP OBU element). Returns the OBU and the bytes it took.
    static func read(_ bytes: ArraySlice<UInt8>, wholeElement: Bool) throws(AV1PayloadError) -> (AV1OBU, Int) {
        guard let header = bytes.first else { throw .malformedOBU("an empty OBU") }
        guard header & 0x80 == 0 else { throw .malformedOBU("the forbidden bit is set") }
        var index = bytes.startIndex + 1
        var extensionByte: UInt8?
        if header & 0x04 != 0 {
            guard index < bytes.endIndex else { throw .malformedOBU("an extension flag without an extension byte") }
            extensionByte = bytes[index]
            index += 1
        }
        let end: Int
        if header & 0x02 != 0 {
            let (size, length) = try AV1Payload.readLEB128(bytes[index...])
            index += length
            guard Int(size) <= bytes.endIndex - index else {
                throw .malformedOBU("obu_size \(size) runs past the \(bytes.endIndex - index) bytes left")
            }
            end = index + Int(size)
        } else {
            guard wholeElement else { throw .malformedOBU("an OBU without obu_size in a low-overhead bitstream") }
            end = bytes.endIndex
        }
        return (AV1OBU(type: (header >> 3) & 0x0F, extensionByte: extensionByte, payload: Array(bytes[index..<end])), end - bytes.startIndex)
    }
}

/// The RTP payload format for AV1 (AOMedia, "RTP Payload Format For AV1", v1.0): a one-byte
/// aggregation header — Z (the first OBU element continues the previous packet's last), Y (the
/// last one continues in the next packet), W (the element count, 0: each has a LEB128 length),
/// N (the first packet of a coded video sequence) — then OBU elements, OBUs without `obu_size`.
/// Temporal delimiters, tile lists and padding are not sent; the marker bit ends a temporal unit.
///
/// ```swift
/// for packet in try AV1Payload.packetize(temporalUnit: encoded, maximumPayloadSize: 1_188) { send(packet) }
/// ```
public enum AV1Payload {
    /// One RTP payload of a temporal unit, and whether it ends the unit (the RTP marker bit).
    public struct Packet: Sendable, Hashable {
        public var payload: [UInt8]
        public var marker: Bool
    }

    static let zBit: UInt8 = 0x80
    static let yBit: UInt8 = 0x40
    static let nBit: UInt8 = 0x08

    /// The OBUs of a temporal unit in the low-overhead bitstream format (each with `obu_size`, as
    /// `av1enc` and `av1parse` write it).
    public static func obus(lowOverhead bytes: [UInt8]) throws(AV1PayloadError) -> [AV1OBU] {
        var obus: [AV1OBU] = []
        var index = 0
        while index < bytes.count {
            let (obu, length) = try AV1OBU.read(bytes[index...], wholeElement: false)
            obus.append(obu)
            index += length
        }
        return obus
    }

    /// Whether the OBUs start a coded video sequence: a sequence header and a key frame shown or
    /// to be shown (`frame_type` KEY_FRAME, not `show_existing_frame`; every frame of a stream
    /// with a reduced still-picture header).
    public static func startsCodedVideoSequence(_ obus: [AV1OBU]) -> Bool {
        guard let sequence = obus.first(where: { $0.type == AV1OBU.sequenceHeader }), let profile = sequence.payload.first else { return false }
        if profile & 0x08 != 0 { return true }  // seq_profile(3) still_picture(1) reduced_still_picture_header(1)
        return obus.contains { obu in
            guard obu.type == AV1OBU.frame || obu.type == AV1OBU.frameHeader, let first = obu.payload.first else { return false }
            return first & 0x80 == 0 && (first >> 5) & 0x03 == 0  // show_existing_frame(1) frame_type(2) = KEY_FRAME
        }
    }

    /// Splits a temporal unit (low-overhead bitstream format) into RTP payloads of at most
    /// `maximumPayloadSize` bytes: OBUs aggregated while they fit, fragmented across packets when
    /// they do not, the element count in W where it is 3 or fewer (the last element then without
    /// its length), N on the first packet of a coded video sequence, the marker on the last.
    /// A unit of nothing but temporal delimiters and padding makes no packet.
    public static func packetize(temporalUnit: [UInt8], maximumPayloadSize: Int) throws(AV1PayloadError) -> [Packet] {
        guard maximumPayloadSize >= 8 else { throw .payloadSizeTooSmall(maximumPayloadSize) }
        let obus = try obus(lowOverhead: temporalUnit)
        let elements = obus.filter { ![AV1OBU.temporalDelimiter, AV1OBU.tileList, AV1OBU.padding].contains($0.type) }.map(\.withoutSize)
        guard !elements.isEmpty else { return [] }

        // Each packet: its elements (as pieces of OBUs), whether it begins with a continuation
        // and ends with an OBU to be continued.
        var packets: [(pieces: [ArraySlice<UInt8>], continues: Bool, continued: Bool)] = []
        var pieces: [ArraySlice<UInt8>] = []
        var used = 1  // the aggregation header
        var startsWithContinuation = false
        func close(continued: Bool) {
            packets.append((pieces, startsWithContinuation, continued))
            pieces = []
            used = 1
            startsWithContinuation = continued
        }
        for element in elements {
            var rest = element[...]
            while !rest.isEmpty {
                let available = maximumPayloadSize - used
                if leb128Size(UInt32(rest.count)) + rest.count <= available {
                    pieces.append(rest)
                    used += leb128Size(UInt32(rest.count)) + rest.count
                    rest = []
                } else if available >= 4 {
                    // As much of the OBU as fits with its length: the rest goes in the next packet.
                    var length = available - 1
                    while leb128Size(UInt32(length)) + length > available { length -= 1 }
                    pieces.append(rest.prefix(length))
                    rest = rest.dropFirst(length)
                    close(continued: true)
                } else {
                    close(continued: false)
                }
            }
        }
        if !pieces.isEmpty { close(continued: false) }

        let sequenceStart = startsCodedVideoSequence(obus)
        return packets.enumerated().map { index, packet in
            var header: UInt8 = (packet.continues ? zBit : 0) | (packet.continued ? yBit : 0)
            if index == 0, sequenceStart { header |= nBit }
            let counted = packet.pieces.count <= 3
            if counted { header |= UInt8(packet.pieces.count) << 4 }
            var payload = [header]
            for (position, piece) in packet.pieces.enumerated() {
                if !(counted && position == packet.pieces.count - 1) { appendLEB128(UInt32(piece.count), to: &payload) }
                payload.append(contentsOf: piece)
            }
            return Packet(payload: payload, marker: index == packets.count - 1)
        }
    }

    /// True when the payload is the first packet of a coded video sequence (N set, Z clear): a
    /// decoder that has seen nothing of the stream can start there.
    public static func startsKeyframe(_ payload: UnsafeRawBufferPointer) -> Bool {
        guard let header = payload.first else { return false }
        return header & nBit != 0 && header & zBit == 0 && payload.count > 1
    }

    /// `startsKeyframe` of the payload of a whole RTP packet; false if the packet does not parse.
    public static func packetStartsKeyframe(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard let layout = try? RTPPacketLayout(parsing: packet) else { return false }
        return startsKeyframe(UnsafeRawBufferPointer(rebasing: packet[layout.payloadRange]))
    }

    // MARK: LEB128 (AV1 bitstream §4.10.5)

    static func leb128Size(_ value: UInt32) -> Int {
        var size = 1
        var rest = value >> 7
        while rest != 0 { size += 1; rest >>= 7 }
        return size
    }

    static func appendLEB128(_ value: UInt32, to bytes: inout [UInt8]) {
        var rest = value
        repeat {
            let low = UInt8(rest & 0x7F)
            rest >>= 7
            bytes.append(rest == 0 ? low : low | 0x80)
        } while rest != 0
    }

    /// A LEB128 value at the start of `bytes` and its length.
    static func readLEB128(_ bytes: ArraySlice<UInt8>) throws(AV1PayloadError) -> (UInt32, Int) {
        var value: UInt64 = 0
        for (position, byte) in bytes.prefix(8).enumerated() {
            value |= UInt64(byte & 0x7F) << (7 * UInt64(position))
            if byte & 0x80 == 0 {
                guard value <= UInt64(UInt32.max) else { throw .malformedOBU("a LEB128 value over 2^32 - 1") }
                return (UInt32(value), position + 1)
            }
        }
        throw .malformedOBU(bytes.count < 8 ? "a LEB128 value cut short" : "a LEB128 value longer than 8 bytes")
    }
}

/// Reassembles AV1 temporal units from RTP payloads (the receiving half of ``AV1Payload``), pure:
/// packets in, in sequence order (after the jitter buffer), units out in the low-overhead
/// bitstream format a decoder takes (a temporal delimiter, then each OBU with `obu_size`).
///
/// A unit with a packet missing (a sequence gap, a continuation without its start, a marker
/// never seen before the next timestamp) or a malformed element is dropped whole, never handed on
/// cut. When `waitsForKeyframe`, units are skipped at the start and after a drop until the first
/// of a coded video sequence (N, or a sequence header with a key frame).
public struct AV1Depacketizer: Sendable {
    /// What one packet completed.
    public enum Output: Sendable, Hashable {
        /// A whole temporal unit, and whether a decoder can start at it.
        case temporalUnit([UInt8], keyframe: Bool)
        /// A unit lost or unreadable, dropped: the decoder needs a keyframe (ask the sender).
        case dropped(String)
    }

    public let waitsForKeyframe: Bool
    private var waiting: Bool
    private var expectedSequence: UInt16?
    private var timestamp: UInt32?
    private var obus: [AV1OBU] = []
    private var partial: [UInt8]?
    private var broken: String?
    private var keyframe = false
    private var complete = true
    /// Whether a keyframe was asked for since the last one.
    private var requested = false
    /// Units skipped since the keyframe was last asked for (a request can be lost or throttled
    /// on the way: it is repeated every ``repeatRequestAfter`` units).
    private var skippedSinceRequest = 0
    public static let repeatRequestAfter = 10

    public init(waitsForKeyframe: Bool = true) {
        self.waitsForKeyframe = waitsForKeyframe
        waiting = waitsForKeyframe
    }

    /// Forgets the unit being gathered (a flush or a seek): the next unit starts afresh.
    public mutating func reset() {
        expectedSequence = nil
        timestamp = nil
        startUnit(nil)
    }

    /// Takes one RTP packet's payload; returns what it completed or dropped, if anything. A drop
    /// is reported once, and again every ``repeatRequestAfter`` units skipped while waiting for
    /// the keyframe.
    public mutating func take(payload: [UInt8], sequenceNumber: UInt16, timestamp packetTimestamp: UInt32, marker: Bool) -> [Output] {
        var outputs: [Output] = []
        let gap = expectedSequence.map { $0 != sequenceNumber } ?? false
        expectedSequence = sequenceNumber &+ 1
        if timestamp != packetTimestamp || complete {
            if !complete { drop(broken ?? "a temporal unit whose last packet never came", into: &outputs) }
            timestamp = packetTimestamp
            startUnit(packetTimestamp)
            // Packets lost before a unit's first packet: the unit's own head, unless this packet
            // says it starts a coded video sequence (N, only ever on a unit's first packet).
            if gap, !(payload.first.map { $0 & AV1Payload.nBit != 0 && $0 & AV1Payload.zBit == 0 } ?? false) {
                broken = "packets lost before sequence number \(sequenceNumber)"
            }
        } else if gap {
            broken = broken ?? "a packet of the temporal unit was lost (sequence gap before \(sequenceNumber))"
        }
        read(payload, firstOfUnit: obus.isEmpty && partial == nil && broken == nil)
        guard marker else { return outputs }
        if let why = broken ?? (partial != nil ? "the last packet of a temporal unit continues its OBU (Y set with the marker)" : nil) {
            drop(why, into: &outputs)
        } else if obus.isEmpty {
            drop("a temporal unit with no OBU", into: &outputs)
        } else {
            let startsSequence = keyframe || AV1Payload.startsCodedVideoSequence(obus)
            if waiting && !startsSequence {
                // Nothing decodable before a keyframe: asked for, and asked again now and then.
                skippedSinceRequest += 1
                if !requested || skippedSinceRequest >= Self.repeatRequestAfter {
                    outputs.append(.dropped(requested ? "still no keyframe" : "no keyframe yet"))
                    skippedSinceRequest = 0
                }
                requested = true
            } else {
                waiting = false
                requested = false
                var unit: [UInt8] = [AV1OBU.temporalDelimiter << 3 | 0x02, 0]
                for obu in obus { unit += obu.withSize }
                outputs.append(.temporalUnit(unit, keyframe: startsSequence))
            }
        }
        startUnit(nil)
        return outputs
    }

    private mutating func startUnit(_ timestamp: UInt32?) {
        obus = []
        partial = nil
        broken = nil
        keyframe = false
        complete = timestamp == nil
    }

    private mutating func drop(_ why: String, into outputs: inout [Output]) {
        if !(waiting && requested) {
            outputs.append(.dropped(why))
            skippedSinceRequest = 0
        }
        // Like GStreamer's depayloaders: after a loss, wait for a keyframe only when asked to.
        waiting = waitsForKeyframe
        requested = true
        startUnit(nil)
    }

    private mutating func read(_ payload: [UInt8], firstOfUnit: Bool) {
        guard broken == nil else { return }
        guard let header = payload.first else { broken = "an empty AV1 payload"; return }
        let continues = header & AV1Payload.zBit != 0
        let continued = header & AV1Payload.yBit != 0
        let count = Int((header >> 4) & 0x03)
        if firstOfUnit, header & AV1Payload.nBit != 0 { keyframe = true }
        if continues != (partial != nil) {
            broken = continues ? "a continuation (Z) without the OBU's start" : "a new OBU where the previous packet's (Y) should continue"
            return
        }
        var index = 1
        var elements: [ArraySlice<UInt8>] = []
        while index < payload.count {
            let last = count != 0 && elements.count == count - 1
            var length = payload.count - index
            if !last {
                guard let (value, size) = try? AV1Payload.readLEB128(payload[index...]) else { broken = "an element length that does not parse"; return }
                index += size
                guard Int(value) <= payload.count - index else { broken = "an element of \(value) bytes with \(payload.count - index) left"; return }
                length = Int(value)
            }
            elements.append(payload[index..<(index + length)])
            index += length
            if last { break }
        }
        guard count == 0 || elements.count == count else { broken = "W says \(count) elements, the payload holds \(elements.count)"; return }
        for (position, element) in elements.enumerated() {
            var bytes = Array(element)
            if position == 0, let start = partial {
                bytes = start + bytes
                partial = nil
            }
            if position == elements.count - 1 && continued {
                partial = bytes
                continue
            }
            guard !bytes.isEmpty else { continue }
            guard let (obu, _) = try? AV1OBU.read(bytes[...], wholeElement: true) else { broken = "an OBU element that does not parse"; return }
            if ![AV1OBU.temporalDelimiter, AV1OBU.tileList, AV1OBU.padding].contains(obu.type) { obus.append(obu) }
        }
        if elements.isEmpty && continued { broken = "Y set on a packet with no element" }
    }
}
