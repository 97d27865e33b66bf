// An RTMP video message's body (FLV VIDEODATA), legacy or enhanced RTMP (Veovera's "Enhanced
// RTMP", v1 and v2's single-track form):
//
//   legacy:   frameType u4 | codecId u4, then for AVC (7) and the widespread HEVC extension (12):
//             packetType u8 (0 sequence header, 1 frames, 2 end of sequence), compositionTime si24
//   enhanced: isExHeader u1 (1) | frameType u3 | packetType u4, FourCC ('avc1', 'hvc1', 'av01',
//             'vp09'), then by packetType: 0 SequenceStart (the decoder configuration record),
//             1 CodedFrames (compositionTime si24 for avc1 and hvc1, then the frame), 2 SequenceEnd,
//             3 CodedFramesX (the frame, composition time 0), 4 Metadata (AMF), 5
//             MPEG2TSSequenceStart; 6 Multitrack and 7 ModEx (v2) are not read.
//   frameType: 1 keyframe, 2 inter frame, 3 disposable inter frame, 4 generated keyframe,
//              5 video info / command frame (no picture).
//
// AVC and HEVC frames are NAL units with length prefixes (the record's lengthSizeMinusOne + 1
// bytes: 4 from every encoder seen), as in MP4.

/// Errors raised while reading an FLV video tag body.
public enum FLVVideoTagError: Error, Sendable, Equatable {
    /// The body ends before its header does.
    case truncated
    /// An enhanced packet type this reader does not take (multitrack, ModEx, reserved).
    case unsupportedPacketType(UInt8)
}

/// One RTMP video message, read.
public struct FLVVideoTag: Sendable, Equatable {
    /// The video codec a tag names.
    public enum Codec: Sendable, Hashable, CustomStringConvertible {
        case h264, h265, av1, vp9
        /// A legacy codec id other than AVC and HEVC (Sorenson H.263, VP6, screen video).
        case legacy(UInt8)
        /// An enhanced FourCC other than those above.
        case fourCC(UInt32)

        public var description: String {
            switch self {
            case .h264: return "H.264"
            case .h265: return "H.265"
            case .av1: return "AV1"
            case .vp9: return "VP9"
            case .legacy(let id): return "FLV video codec \(id)"
            case .fourCC(let code): return "FourCC '\(FLVVideoTag.text(ofFourCC: code))'"
            }
        }
    }

    /// What a tag carries.
    public enum Content: Sendable, Equatable {
        /// The decoder configuration record (`avcC`, `hvcC`, `av1C`, `vpcC`).
        case sequenceStart([UInt8])
        /// One frame: presentation time minus decoding time (ms) and its data.
        case codedFrame(compositionTime: Int32, data: [UInt8])
        case sequenceEnd
        /// Metadata, an info or command frame, an MPEG-2 TS sequence start: nothing to decode.
        case other
    }

    public let codec: Codec
    /// Whether the frame is a keyframe (frame types 1 and 4).
    public let isKeyframe: Bool
    public let content: Content
    /// Whether the tag uses the enhanced header.
    public let isEnhanced: Bool

    public static let avc1: UInt32 = 0x6176_6331
    public static let hvc1: UInt32 = 0x6876_6331
    public static let av01: UInt32 = 0x6176_3031
    public static let vp09: UInt32 = 0x7670_3039

    public init(codec: Codec, isKeyframe: Bool, content: Content, isEnhanced: Bool) {
        self.codec = codec
        self.isKeyframe = isKeyframe
        self.content = content
        self.isEnhanced = isEnhanced
    }

    public init(parsing body: [UInt8]) throws(FLVVideoTagError) {
        guard let first = body.first else { throw .truncated }
        self = first & 0x80 == 0 ? try Self.legacy(body) : try Self.enhanced(body)
    }

    /// The codec a body names and whether its header is enhanced, read from its first bytes only
    /// (no copy of the frame: for routing each message); nil when too short to say.
    public static func codec(of body: [UInt8]) -> (codec: Codec, isEnhanced: Bool)? {
        guard let first = body.first else { return nil }
        guard first & 0x80 != 0 else {
            let id = first & 0x0F
            return (id == 7 ? .h264 : id == 12 ? .h265 : .legacy(id), false)
        }
        guard body.count >= 5 else { return nil }
        switch UInt32(body[1]) << 24 | UInt32(body[2]) << 16 | UInt32(body[3]) << 8 | UInt32(body[4]) {
        case avc1: return (.h264, true)
        case hvc1: return (.h265, true)
        case av01: return (.av1, true)
        case vp09: return (.vp9, true)
        case let code: return (.fourCC(code), true)
        }
    }

    private static func enhanced(_ body: [UInt8]) throws(FLVVideoTagError) -> FLVVideoTag {
        let frameType = (body[0] >> 4) & 0x07
        let packetType = body[0] & 0x0F
        guard body.count >= 5 else { throw .truncated }
        guard let (codec, _) = codec(of: body) else { throw .truncated }
        let rest = body[5...]
        var content: Content
        switch packetType {
        case 0:
            content = .sequenceStart(Array(rest))
        case 1:
            // Only AVC and HEVC carry a composition time here; AV1 and VP9 frames follow at once.
            if codec == .h264 || codec == .h265 {
                guard rest.count >= 3 else { throw .truncated }
                content = .codedFrame(compositionTime: si24(rest), data: Array(rest.dropFirst(3)))
            } else {
                content = .codedFrame(compositionTime: 0, data: Array(rest))
            }
        case 2: content = .sequenceEnd
        case 3: content = .codedFrame(compositionTime: 0, data: Array(rest))
        case 4, 5: content = .other
        default: throw .unsupportedPacketType(packetType)
        }
        // A command frame carries no picture whatever its packet type says.
        if frameType == 5, case .codedFrame = content { content = .other }
        return FLVVideoTag(codec: codec, isKeyframe: frameType == 1 || frameType == 4, content: content, isEnhanced: true)
    }

    private static func legacy(_ body: [UInt8]) throws(FLVVideoTagError) -> FLVVideoTag {
        let frameType = body[0] >> 4
        let id = body[0] & 0x0F
        let isKeyframe = frameType == 1 || frameType == 4
        guard id == 7 || id == 12 else {
            let content: Content = frameType == 5 ? .other : .codedFrame(compositionTime: 0, data: Array(body.dropFirst()))
            return FLVVideoTag(codec: .legacy(id), isKeyframe: isKeyframe, content: content, isEnhanced: false)
        }
        let codec: Codec = id == 7 ? .h264 : .h265
        guard frameType != 5 else { return FLVVideoTag(codec: codec, isKeyframe: false, content: .other, isEnhanced: false) }
        guard body.count >= 5 else { throw .truncated }
        let rest = body[5...]
        let content: Content
        switch body[1] {
        case 0: content = .sequenceStart(Array(rest))
        case 1: content = .codedFrame(compositionTime: si24(body[2..<5]), data: Array(rest))
        case 2: content = .sequenceEnd
        default: content = .other
        }
        return FLVVideoTag(codec: codec, isKeyframe: isKeyframe, content: content, isEnhanced: false)
    }

    /// The body of the same AVC content as a legacy tag (codec id 7): what FLV demuxers that
    /// predate enhanced RTMP read. Nil for other codecs.
    public var legacyAVCBody: [UInt8]? {
        guard codec == .h264 else { return nil }
        let head = UInt8(isKeyframe ? 1 : 2) << 4 | 7
        switch content {
        case .sequenceStart(let record): return [head, 0, 0, 0, 0] + record
        case .codedFrame(let cts, let data):
            let value = UInt32(bitPattern: cts)
            return [head, 1, UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8), UInt8(truncatingIfNeeded: value)] + data
        case .sequenceEnd: return [head, 2, 0, 0, 0]
        case .other: return nil
        }
    }

    /// A 24-bit two's complement number (big-endian) at the start of `bytes`.
    static func si24(_ bytes: ArraySlice<UInt8>) -> Int32 {
        let start = bytes.startIndex
        let value = Int32(bytes[start]) << 16 | Int32(bytes[start + 1]) << 8 | Int32(bytes[start + 2])
        return value & 0x80_0000 != 0 ? value - 0x100_0000 : value
    }

    /// The four characters of a FourCC, printable ones as they are, others as `?`.
    public static func text(ofFourCC code: UInt32) -> String {
        String((0..<4).map { shift -> Character in
            let byte = UInt8(truncatingIfNeeded: code >> (24 - 8 * shift))
            return (0x20...0x7E).contains(byte) ? Character(UnicodeScalar(byte)) : "?"
        })
    }
}
