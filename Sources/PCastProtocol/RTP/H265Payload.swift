/// What an RFC 7798 H.265 RTP payload starts, read from its first bytes only: the H.265 form of
/// ``H264Payload``, for a relay that resumes a receiver at a keyframe and a receiver that waits
/// for one.
///
/// H.265 NAL unit headers are two bytes, the type in bits 1…6 of the first. Keyframes are IRAP
/// pictures (types 16…23: BLA, IDR, CRA); the parameter sets (VPS 32, SPS 33, PPS 34) come before
/// them. RTP packs several units into an aggregation packet (type 48) and splits one into
/// fragmentation units (type 49, with a third header byte: start bit, end bit, the unit's type).
///
/// ```swift
/// if H265Payload.startsKeyframe(payload) { resumeHere() }
/// ```
public enum H265Payload {
    static let firstIRAP: UInt8 = 16
    static let lastIRAP: UInt8 = 23
    static let videoParameterSet: UInt8 = 32
    static let sequenceParameterSet: UInt8 = 33
    static let pictureParameterSet: UInt8 = 34
    static let accessUnitDelimiter: UInt8 = 35
    static let prefixSEI: UInt8 = 39
    static let aggregationPacket: UInt8 = 48
    static let fragmentationUnit: UInt8 = 49

    /// The NAL unit type of a two-byte header's first byte.
    static func type(_ first: UInt8) -> UInt8 { (first >> 1) & 0x3F }

    static func isIRAP(_ type: UInt8) -> Bool { (firstIRAP...lastIRAP).contains(type) }

    /// True when the payload begins a keyframe: a single VPS, SPS or IRAP unit, an aggregation
    /// packet whose first unit is one, or the first fragment of an IRAP unit. Empty or truncated
    /// payloads are not.
    public static func startsKeyframe(_ payload: UnsafeRawBufferPointer) -> Bool {
        guard payload.count >= 2 else { return false }
        let kind = type(payload[0])
        switch kind {
        case aggregationPacket:
            // Header (2), then a 16-bit size and the first aggregated unit's own header.
            guard payload.count >= 5 else { return false }
            let first = type(payload[4])
            return isIRAP(first) || first == videoParameterSet || first == sequenceParameterSet
        case fragmentationUnit:
            guard payload.count >= 3 else { return false }
            return payload[2] & 0x80 != 0 && isIRAP(payload[2] & 0x3F)
        default:
            return isIRAP(kind) || kind == videoParameterSet || kind == sequenceParameterSet
        }
    }

    /// True when the payload begins with parameter sets (a VPS or SPS alone, or first in an
    /// aggregation packet after nothing but an access unit delimiter or SEI): where a receiver can
    /// start a keyframe of another encoding.
    public static func startsWithParameterSets(_ payload: UnsafeRawBufferPointer) -> Bool {
        guard payload.count >= 2 else { return false }
        switch type(payload[0]) {
        case videoParameterSet, sequenceParameterSet:
            return true
        case aggregationPacket:
            var offset = 2
            while offset + 3 <= payload.count {
                let size = Int(payload[offset]) << 8 | Int(payload[offset + 1])
                switch type(payload[offset + 2]) {
                case videoParameterSet, sequenceParameterSet: return true
                case accessUnitDelimiter, prefixSEI: offset += 2 + size
                default: return false
                }
            }
            return false
        default:
            return false
        }
    }

    /// `startsKeyframe` of the payload of a whole RTP packet; false if the packet does not parse.
    public static func packetStartsKeyframe(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard let layout = try? RTPPacketLayout(parsing: packet) else { return false }
        return startsKeyframe(UnsafeRawBufferPointer(rebasing: packet[layout.payloadRange]))
    }

    /// `startsWithParameterSets` of a whole RTP packet's payload; false if the packet does not parse.
    public static func packetStartsWithParameterSets(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard let layout = try? RTPPacketLayout(parsing: packet) else { return false }
        return startsWithParameterSets(UnsafeRawBufferPointer(rebasing: packet[layout.payloadRange]))
    }
}
