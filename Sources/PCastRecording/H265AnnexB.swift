// MARK: - H.265 Annex-B

/// H.265 byte-stream helpers and the decoder configuration record (`hvcC`, ISO/IEC 14496-15
/// §8.3.3) a recording declares its track with. Annex-B framing is H.264's (``H264/nalUnits(annexB:)``);
/// the NAL unit header is two bytes, the type in bits 1…6 of the first.
///
/// ```swift
/// let sets = H265.parameterSets(annexB: keyframe)
/// let configuration = try H265.Configuration(vps: sets.vps!, sps: sets.sps!, pps: sets.pps!)
/// configuration.codecsString   // "hvc1.1.6.L90.B0"
/// ```
public enum H265 {
    static let videoParameterSet: UInt8 = 32
    static let sequenceParameterSet: UInt8 = 33
    static let pictureParameterSet: UInt8 = 34

    /// The NAL unit type, or nil for a unit shorter than its header.
    public static func nalType(_ unit: ArraySlice<UInt8>) -> UInt8? {
        unit.count >= 2 ? (unit[unit.startIndex] >> 1) & 0x3F : nil
    }

    /// The first VPS, SPS and PPS of an access unit, without start codes.
    public struct ParameterSets: Sendable, Equatable {
        public var vps: [UInt8]?
        public var sps: [UInt8]?
        public var pps: [UInt8]?
    }

    public static func parameterSets(annexB data: [UInt8]) -> ParameterSets {
        var sets = ParameterSets()
        for unit in H264.nalUnits(annexB: data) {
            switch nalType(unit) {
            case videoParameterSet where sets.vps == nil: sets.vps = Array(unit)
            case sequenceParameterSet where sets.sps == nil: sets.sps = Array(unit)
            case pictureParameterSet where sets.pps == nil: sets.pps = Array(unit)
            default: break
            }
        }
        return sets
    }

    /// An access unit as a sample of an `hvc1` track: each NAL unit prefixed with its 4-byte
    /// length, the parameter sets equal to those the track declares left out (`hvc1` keeps them
    /// in the sample entry); different ones (an encoder that changed its encoding) stay in band,
    /// so a decoder follows the change.
    public static func sample(annexB data: [UInt8], declared: Configuration) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(data.count + 16)
        for unit in H264.nalUnits(annexB: data) {
            switch nalType(unit) {
            case videoParameterSet where unit.elementsEqual(declared.vps),
                 sequenceParameterSet where unit.elementsEqual(declared.sps),
                 pictureParameterSet where unit.elementsEqual(declared.pps):
                continue
            default:
                let n = UInt32(unit.count)
                out.append(contentsOf: [UInt8(n >> 24), UInt8((n >> 16) & 0xFF), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)])
                out.append(contentsOf: unit)
            }
        }
        return out
    }

    /// Why an SPS could not be read.
    public struct MalformedParameterSet: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
    }

    /// What a track of H.265 declares, read from its sequence parameter set: the profile, tier
    /// and level (`profile_tier_level`), chroma format, bit depths and the picture size (cropped by
    /// the conformance window), with the three parameter sets the record carries.
    public struct Configuration: Sendable, Equatable {
        public var vps: [UInt8]
        public var sps: [UInt8]
        public var pps: [UInt8]
        public var profileSpace: UInt8
        public var highTier: Bool
        public var profile: UInt8
        /// `general_profile_compatibility_flag[0…31]`, flag 0 in the most significant bit.
        public var compatibilityFlags: UInt32
        /// The 48 bits of `general_progressive_source_flag` … `general_inbld_flag` and the reserved bit.
        public var constraintFlags: [UInt8]
        /// `general_level_idc`: 30 × the level (93 for level 3.1).
        public var level: UInt8
        public var chromaFormat: UInt8
        public var bitDepthLuma: UInt8
        public var bitDepthChroma: UInt8
        public var width: Int
        public var height: Int
        public var temporalLayers: UInt8
        public var temporalIdNested: Bool

        /// Reads the SPS (a NAL unit with its two-byte header, emulation prevention bytes in).
        ///
        /// - Throws: ``MalformedParameterSet`` when it is not an SPS or ends early.
        public init(vps: [UInt8], sps: [UInt8], pps: [UInt8]) throws(MalformedParameterSet) {
            guard H265.nalType(vps[...]) == H265.videoParameterSet, H265.nalType(pps[...]) == H265.pictureParameterSet else {
                throw MalformedParameterSet(description: "the parameter sets are not a VPS and a PPS")
            }
            guard H265.nalType(sps[...]) == H265.sequenceParameterSet else {
                throw MalformedParameterSet(description: "not a sequence parameter set (NAL unit type \(H265.nalType(sps[...]).map(String.init) ?? "none"))")
            }
            self.vps = vps
            self.sps = sps
            self.pps = pps
            var bits = ExpGolombReader(H265.removingEmulationPrevention(sps.dropFirst(2)))
            _ = try bits.bits(4)  // sps_video_parameter_set_id
            let subLayers = Int(try bits.bits(3))
            temporalLayers = UInt8(subLayers + 1)
            temporalIdNested = try bits.bits(1) == 1
            profileSpace = UInt8(try bits.bits(2))
            highTier = try bits.bits(1) == 1
            profile = UInt8(try bits.bits(5))
            compatibilityFlags = UInt32(try bits.bits(32))
            constraintFlags = try (0..<6).map { _ throws(MalformedParameterSet) in UInt8(try bits.bits(8)) }
            level = UInt8(try bits.bits(8))
            var present: [(profile: Bool, level: Bool)] = []
            for _ in 0..<subLayers { present.append((try bits.bits(1) == 1, try bits.bits(1) == 1)) }
            if subLayers > 0 { for _ in subLayers..<8 { _ = try bits.bits(2) } }
            for layer in present {
                if layer.profile { try bits.skip(88) }
                if layer.level { try bits.skip(8) }
            }
            _ = try bits.unsignedExpGolomb()  // sps_seq_parameter_set_id
            let chroma = try bits.unsignedExpGolomb()
            guard chroma <= 3 else { throw MalformedParameterSet(description: "chroma_format_idc \(chroma)") }
            chromaFormat = UInt8(chroma)
            if chroma == 3 { _ = try bits.bits(1) }  // separate_colour_plane_flag
            let codedWidth = try bits.unsignedExpGolomb(), codedHeight = try bits.unsignedExpGolomb()
            var crop = (left: 0, right: 0, top: 0, bottom: 0)
            if try bits.bits(1) == 1 {
                crop = (try bits.unsignedExpGolomb(), try bits.unsignedExpGolomb(), try bits.unsignedExpGolomb(), try bits.unsignedExpGolomb())
            }
            let luma = try bits.unsignedExpGolomb(), chromaDepth = try bits.unsignedExpGolomb()
            guard luma <= 8, chromaDepth <= 8 else { throw MalformedParameterSet(description: "bit depth beyond 16") }
            bitDepthLuma = UInt8(8 + luma)
            bitDepthChroma = UInt8(8 + chromaDepth)
            let unitWidth = chroma == 1 || chroma == 2 ? 2 : 1, unitHeight = chroma == 1 ? 2 : 1
            width = codedWidth - unitWidth * (crop.left + crop.right)
            height = codedHeight - unitHeight * (crop.top + crop.bottom)
            guard width > 0, height > 0 else { throw MalformedParameterSet(description: "picture size \(width)×\(height)") }
        }

        /// The `hvcC` box's body (HEVCDecoderConfigurationRecord): no spatial segmentation or
        /// parallelism stated, frame rate unstated, 4-byte lengths, one array each of VPS, SPS
        /// and PPS, each complete (the samples of an `hvc1` track carry none of their own).
        public var record: [UInt8] {
            var out: [UInt8] = [1, profileSpace << 6 | (highTier ? 0x20 : 0) | profile]
            out += [UInt8(compatibilityFlags >> 24), UInt8((compatibilityFlags >> 16) & 0xFF),
                    UInt8((compatibilityFlags >> 8) & 0xFF), UInt8(compatibilityFlags & 0xFF)]
            out += constraintFlags
            out += [level, 0xF0, 0x00, 0xFC, 0xFC | chromaFormat, 0xF8 | (bitDepthLuma - 8), 0xF8 | (bitDepthChroma - 8), 0, 0]
            out.append((temporalLayers & 0x07) << 3 | (temporalIdNested ? 0x04 : 0) | 0x03)
            out.append(3)
            for unit in [vps, sps, pps] {
                out.append(0x80 | (unit[0] >> 1) & 0x3F)
                out += [0, 1, UInt8(unit.count >> 8), UInt8(unit.count & 0xFF)]
                out += unit
            }
            return out
        }

        /// The RFC 6381 `codecs` parameter of an `hvc1` track (ISO/IEC 14496-15 Annex E):
        /// `hvc1.` profile space and profile, the compatibility flags in reverse bit order (hex),
        /// tier and level, then the constraint bytes without the trailing zero ones.
        public var codecsString: String {
            let space = ["", "A", "B", "C"][Int(profileSpace)]
            var reversed: UInt32 = 0
            for bit in 0..<32 where compatibilityFlags & (1 << UInt32(31 - bit)) != 0 { reversed |= 1 << UInt32(bit) }
            var constraints = constraintFlags
            while constraints.last == 0 { constraints.removeLast() }
            let tail = constraints.map { String($0, radix: 16, uppercase: true) }.joined(separator: ".")
            return "hvc1.\(space)\(profile).\(String(reversed, radix: 16, uppercase: true)).\(highTier ? "H" : "L")\(level)" + (tail.isEmpty ? "" : ".\(tail)")
        }
    }

    /// The RBSP of a NAL unit's payload: every `00 00 03` becomes `00 00`.
    static func removingEmulationPrevention(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var zeros = 0
        for byte in bytes {
            if zeros >= 2 && byte == 3 {
                zeros = 0
                continue
            }
            out.append(byte)
            zeros = byte == 0 ? zeros + 1 : 0
        }
        return out
    }
}

/// Reads bits most significant first, and Exp-Golomb codes (ITU-T H.265 §9.2).
struct ExpGolombReader {
    private let bytes: [UInt8]
    private var position = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func bits(_ count: Int) throws(H265.MalformedParameterSet) -> UInt64 {
        guard position + count <= bytes.count * 8 else { throw H265.MalformedParameterSet(description: "the parameter set ends early") }
        var value: UInt64 = 0
        for _ in 0..<count {
            value = value << 1 | UInt64(bytes[position >> 3] >> (7 - UInt8(position & 7)) & 1)
            position += 1
        }
        return value
    }

    mutating func skip(_ count: Int) throws(H265.MalformedParameterSet) {
        guard position + count <= bytes.count * 8 else { throw H265.MalformedParameterSet(description: "the parameter set ends early") }
        position += count
    }

    mutating func unsignedExpGolomb() throws(H265.MalformedParameterSet) -> Int {
        var zeros = 0
        while try bits(1) == 0 {
            zeros += 1
            guard zeros <= 31 else { throw H265.MalformedParameterSet(description: "an Exp-Golomb code longer than 32 bits") }
        }
        return Int((1 << UInt64(zeros)) - 1 + (try bits(zeros)))
    }
}
