/// What a track of H.265 declares, read from its sequence parameter set (ITU-T H.265 §7.3.2.2):
/// the profile, tier and level (`profile_tier_level`), chroma format, bit depths and the picture
/// size (cropped by the conformance window), with the three parameter sets; and the decoder
/// configuration record (`hvcC`, ISO/IEC 14496-15 §8.3.3) a recording declares its track with.
/// Read bit by bit, bounds-checked: an SPS cut short is a typed error.
///
/// ```swift
/// let configuration = try H265Configuration(vps: vps, sps: sps, pps: pps)
/// configuration.record   // the hvcC box's body
/// ```
public struct H265Configuration: Sendable, Hashable {
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

    /// Why parameter sets could not be read.
    public struct Malformed: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
    }

    static let videoParameterSet: UInt8 = 32
    static let sequenceParameterSet: UInt8 = 33
    static let pictureParameterSet: UInt8 = 34

    /// The NAL unit type of a unit (its two-byte header first), or nil for one shorter than its header.
    public static func nalType(_ unit: ArraySlice<UInt8>) -> UInt8? {
        unit.count >= 2 ? (unit[unit.startIndex] >> 1) & 0x3F : nil
    }

    /// The VPS, SPS and PPS among `units` (the first of each), nil when one is missing.
    public static func parameterSets(in units: [ArraySlice<UInt8>]) -> (vps: [UInt8], sps: [UInt8], pps: [UInt8])? {
        func first(_ type: UInt8) -> [UInt8]? { units.first { nalType($0) == type }.map(Array.init) }
        guard let vps = first(videoParameterSet), let sps = first(sequenceParameterSet), let pps = first(pictureParameterSet) else { return nil }
        return (vps, sps, pps)
    }

    /// Reads the SPS (a NAL unit with its two-byte header, emulation prevention bytes in).
    ///
    /// - Throws: ``Malformed`` when the units are not a VPS, SPS and PPS, or the SPS ends early.
    public init(vps: [UInt8], sps: [UInt8], pps: [UInt8]) throws(Malformed) {
        guard Self.nalType(vps[...]) == Self.videoParameterSet, Self.nalType(pps[...]) == Self.pictureParameterSet else {
            throw Malformed(description: "the parameter sets are not a VPS and a PPS")
        }
        guard Self.nalType(sps[...]) == Self.sequenceParameterSet else {
            throw Malformed(description: "not a sequence parameter set (NAL unit type \(Self.nalType(sps[...]).map(String.init) ?? "none"))")
        }
        self.vps = vps
        self.sps = sps
        self.pps = pps
        var bits = BitReader(Self.removingEmulationPrevention(sps.dropFirst(2)), cutShort: Malformed(description: "the parameter set ends early"))
        _ = try bits.read(4)  // sps_video_parameter_set_id
        let subLayers = Int(try bits.read(3))
        temporalLayers = UInt8(subLayers + 1)
        temporalIdNested = try bits.read(1) == 1
        profileSpace = UInt8(try bits.read(2))
        highTier = try bits.read(1) == 1
        profile = UInt8(try bits.read(5))
        compatibilityFlags = UInt32(try bits.read(32))
        var constraints: [UInt8] = []
        for _ in 0..<6 { constraints.append(UInt8(try bits.read(8))) }
        constraintFlags = constraints
        level = UInt8(try bits.read(8))
        var present: [(profile: Bool, level: Bool)] = []
        for _ in 0..<subLayers { present.append((try bits.read(1) == 1, try bits.read(1) == 1)) }
        if subLayers > 0 { try bits.skip(2 * (8 - subLayers)) }  // reserved_zero_2bits
        for layer in present {
            if layer.profile { try bits.skip(88) }
            if layer.level { try bits.skip(8) }
        }
        _ = try bits.readExpGolomb()  // sps_seq_parameter_set_id
        let chroma = try bits.readExpGolomb()
        guard chroma <= 3 else { throw Malformed(description: "chroma_format_idc \(chroma)") }
        chromaFormat = UInt8(chroma)
        if chroma == 3 { _ = try bits.read(1) }  // separate_colour_plane_flag
        let codedWidth = try bits.readExpGolomb(), codedHeight = try bits.readExpGolomb()
        var crop = (left: 0, right: 0, top: 0, bottom: 0)
        if try bits.read(1) == 1 {
            crop = (try bits.readExpGolomb(), try bits.readExpGolomb(), try bits.readExpGolomb(), try bits.readExpGolomb())
        }
        let luma = try bits.readExpGolomb(), chromaDepth = try bits.readExpGolomb()
        guard luma <= 8, chromaDepth <= 8 else { throw Malformed(description: "bit depth beyond 16") }
        bitDepthLuma = UInt8(8 + luma)
        bitDepthChroma = UInt8(8 + chromaDepth)
        let unitWidth = chroma == 1 || chroma == 2 ? 2 : 1, unitHeight = chroma == 1 ? 2 : 1
        width = codedWidth - unitWidth * (crop.left + crop.right)
        height = codedHeight - unitHeight * (crop.top + crop.bottom)
        guard width > 0, height > 0 else { throw Malformed(description: "picture size \(width)×\(height)") }
    }

    /// The `hvcC` box's body (HEVCDecoderConfigurationRecord): no spatial segmentation or
    /// parallelism stated, frame rate unstated, 4-byte lengths, one array each of VPS, SPS and
    /// PPS, each complete (the samples of an `hvc1` track carry none of their own).
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
