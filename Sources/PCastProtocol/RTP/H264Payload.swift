/// What an RFC 6184 H.264 RTP payload starts, read from its first bytes only.
///
/// A relay that stops and later resumes forwarding video to one receiver must resume where that
/// receiver can decode: at the first packet of a keyframe (the parameter sets sent with it, or
/// the IDR slice itself).
///
/// ```swift
/// if H264Payload.startsKeyframe(payload) { resumeHere() }
/// ```
public enum H264Payload {
    /// NAL unit types (ITU-T H.264 Table 7-1) and RTP packetization types (RFC 6184 §5.2).
    static let idrSlice: UInt8 = 5
    static let sequenceParameterSet: UInt8 = 7
    static let stapA: UInt8 = 24
    static let fuA: UInt8 = 28

    /// True when the payload begins a keyframe: a single SPS or IDR NAL unit, an aggregation
    /// (STAP-A) whose first unit is one, or the first fragment (FU-A, start bit set) of an IDR
    /// slice. Empty or truncated payloads are not.
    public static func startsKeyframe(_ payload: UnsafeRawBufferPointer) -> Bool {
        guard let header = payload.first else { return false }
        switch header & 0x1F {
        case idrSlice, sequenceParameterSet:
            return true
        case stapA:
            // Header, then a 16-bit size and the first aggregated unit's own header.
            guard payload.count >= 4 else { return false }
            let first = payload[3] & 0x1F
            return first == idrSlice || first == sequenceParameterSet
        case fuA:
            guard payload.count >= 2 else { return false }
            let fragment = payload[1]
            return fragment & 0x80 != 0 && fragment & 0x1F == idrSlice
        default:
            return false
        }
    }

    static let supplementalInformation: UInt8 = 6
    static let accessUnitDelimiter: UInt8 = 9

    /// True when the payload begins with a sequence parameter set (alone, or in a STAP-A after
    /// nothing but an access unit delimiter or SEI, as x264 lays out a keyframe): where a receiver
    /// can start a keyframe of another resolution (the IDR slice alone would be decoded with the
    /// previous encoding's parameter sets).
    public static func startsWithParameterSets(_ payload: UnsafeRawBufferPointer) -> Bool {
        guard let header = payload.first else { return false }
        switch header & 0x1F {
        case sequenceParameterSet:
            return true
        case stapA:
            var offset = 1
            while offset + 3 <= payload.count {
                let size = Int(payload[offset]) << 8 | Int(payload[offset + 1])
                switch payload[offset + 2] & 0x1F {
                case sequenceParameterSet: return true
                case accessUnitDelimiter, supplementalInformation: offset += 2 + size
                default: return false
                }
            }
            return false
        default:
            return false
        }
    }

    /// `startsWithParameterSets` of a whole RTP packet's payload; false if the packet does not parse.
    public static func packetStartsWithParameterSets(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard let layout = try? RTPPacketLayout(parsing: packet) else { return false }
        return startsWithParameterSets(UnsafeRawBufferPointer(rebasing: packet[layout.payloadRange]))
    }

    /// `startsKeyframe` of the payload of a whole RTP packet; false if the packet does not parse.
    public static func packetStartsKeyframe(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard let layout = try? RTPPacketLayout(parsing: packet) else { return false }
        return startsKeyframe(UnsafeRawBufferPointer(rebasing: packet[layout.payloadRange]))
    }
}
