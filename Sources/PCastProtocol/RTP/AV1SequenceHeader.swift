/// What a recording and a playlist need of an AV1 sequence header OBU's payload (AV1 bitstream
/// §5.5): the profile, the first operating point's level and tier, the picture's largest size and
/// the colour configuration. Read bit by bit, bounds-checked: a header cut short or with a
/// reserved profile is an ``AV1PayloadError``.
///
/// ```swift
/// let header = try AV1SequenceHeader(parsing: sequenceHeaderOBU.payload)
/// header.configurationRecordHeader   // the first four bytes of `av1C`
/// ```
public struct AV1SequenceHeader: Sendable, Hashable {
    public var profile: UInt8
    /// `seq_level_idx[0]` (0 is level 2.0; 31 means no level constraint).
    public var level: UInt8
    /// `seq_tier[0]`: false main, true high.
    public var highTier: Bool
    public var bitDepth: Int
    public var monochrome: Bool
    public var subsamplingX: Bool
    public var subsamplingY: Bool
    /// `chroma_sample_position` (0 unknown, 1 vertical, 2 colocated).
    public var chromaSamplePosition: UInt8
    public var maximumWidth: Int
    public var maximumHeight: Int

    public init(parsing payload: [UInt8]) throws(AV1PayloadError) {
        var bits = BitReader(payload, cutShort: AV1PayloadError.malformedOBU("a sequence header cut short"))
        profile = UInt8(try bits.read(3))
        guard profile <= 2 else { throw .malformedOBU("sequence header with the reserved profile \(profile)") }
        _ = try bits.read(1)  // still_picture
        let reduced = try bits.read(1) == 1
        var decoderModelInfo = false
        var bufferDelayLength = 0
        if reduced {
            level = UInt8(try bits.read(5))
            highTier = false
        } else {
            if try bits.read(1) == 1 {  // timing_info_present_flag
                _ = try bits.read(32)  // num_units_in_display_tick
                _ = try bits.read(32)  // time_scale
                if try bits.read(1) == 1 { _ = try bits.readUVLC() }  // equal_picture_interval
                decoderModelInfo = try bits.read(1) == 1
                if decoderModelInfo {
                    bufferDelayLength = Int(try bits.read(5)) + 1
                    _ = try bits.read(32)  // num_units_in_decoding_tick
                    _ = try bits.read(5)  // buffer_removal_time_length_minus_1
                    _ = try bits.read(5)  // frame_presentation_time_length_minus_1
                }
            }
            let initialDisplayDelay = try bits.read(1) == 1
            let operatingPoints = Int(try bits.read(5)) + 1
            var firstLevel: UInt8 = 0, firstTier = false
            for index in 0..<operatingPoints {
                _ = try bits.read(12)  // operating_point_idc
                let level = UInt8(try bits.read(5))
                let tier = level > 7 ? try bits.read(1) == 1 : false
                if index == 0 { (firstLevel, firstTier) = (level, tier) }
                if decoderModelInfo, try bits.read(1) == 1 {
                    _ = try bits.read(bufferDelayLength)  // decoder_buffer_delay
                    _ = try bits.read(bufferDelayLength)  // encoder_buffer_delay
                    _ = try bits.read(1)  // low_delay_mode_flag
                }
                if initialDisplayDelay, try bits.read(1) == 1 { _ = try bits.read(4) }
            }
            level = firstLevel
            highTier = firstTier
        }
        let widthBits = Int(try bits.read(4)) + 1
        let heightBits = Int(try bits.read(4)) + 1
        maximumWidth = Int(try bits.read(widthBits)) + 1
        maximumHeight = Int(try bits.read(heightBits)) + 1
        if !reduced, try bits.read(1) == 1 {  // frame_id_numbers_present_flag
            _ = try bits.read(4)
            _ = try bits.read(3)
        }
        _ = try bits.read(3)  // use_128x128_superblock, enable_filter_intra, enable_intra_edge_filter
        if !reduced {
            _ = try bits.read(4)  // interintra, masked compound, warped motion, dual filter
            let orderHint = try bits.read(1) == 1
            if orderHint { _ = try bits.read(2) }  // jnt_comp, ref_frame_mvs
            let forceScreenContent: UInt64 = try bits.read(1) == 1 ? 2 : try bits.read(1)
            if forceScreenContent > 0, try bits.read(1) == 0 { _ = try bits.read(1) }  // seq_choose_integer_mv, seq_force_integer_mv
            if orderHint { _ = try bits.read(3) }
        }
        _ = try bits.read(3)  // enable_superres, enable_cdef, enable_restoration
        // color_config()
        let highBitDepth = try bits.read(1) == 1
        bitDepth = profile == 2 && highBitDepth ? (try bits.read(1) == 1 ? 12 : 10) : (highBitDepth ? 10 : 8)
        monochrome = profile == 1 ? false : try bits.read(1) == 1
        var primaries: UInt64 = 2, transfer: UInt64 = 2, matrix: UInt64 = 2
        if try bits.read(1) == 1 {
            primaries = try bits.read(8)
            transfer = try bits.read(8)
            matrix = try bits.read(8)
        }
        chromaSamplePosition = 0
        if monochrome {
            _ = try bits.read(1)  // color_range
            (subsamplingX, subsamplingY) = (true, true)
        } else if primaries == 1, transfer == 13, matrix == 0 {  // sRGB
            (subsamplingX, subsamplingY) = (false, false)
        } else {
            _ = try bits.read(1)  // color_range
            switch profile {
            case 0: (subsamplingX, subsamplingY) = (true, true)
            case 1: (subsamplingX, subsamplingY) = (false, false)
            default:
                if bitDepth == 12 {
                    subsamplingX = try bits.read(1) == 1
                    subsamplingY = subsamplingX ? try bits.read(1) == 1 : false
                } else {
                    (subsamplingX, subsamplingY) = (true, false)
                }
            }
            if subsamplingX && subsamplingY { chromaSamplePosition = UInt8(try bits.read(2)) }
        }
    }

    /// The first four bytes of an `av1C` box's AV1CodecConfigurationRecord (before its configOBUs).
    public var configurationRecordHeader: [UInt8] {
        [0x81,  // marker 1, version 1
         profile << 5 | level,
         (highTier ? 0x80 : 0) | (bitDepth > 8 ? 0x40 : 0) | (bitDepth == 12 ? 0x20 : 0) | (monochrome ? 0x10 : 0)
            | (subsamplingX ? 0x08 : 0) | (subsamplingY ? 0x04 : 0) | chromaSamplePosition,
         0]  // no initial_presentation_delay
    }
}

/// Reads an MSB-first bit string (AV1's and H.265's headers), throwing `cutShort` when it ends
/// before a read does.
struct BitReader<Failure: Error> {
    let bytes: [UInt8]
    let cutShort: Failure
    var position = 0

    init(_ bytes: [UInt8], cutShort: Failure) {
        self.bytes = bytes
        self.cutShort = cutShort
    }

    mutating func read(_ count: Int) throws(Failure) -> UInt64 {
        guard count <= 64, position + count <= bytes.count * 8 else { throw cutShort }
        var value: UInt64 = 0
        for _ in 0..<count {
            let bit = (bytes[position >> 3] >> (7 - UInt8(position & 7))) & 1
            value = value << 1 | UInt64(bit)
            position += 1
        }
        return value
    }

    mutating func skip(_ count: Int) throws(Failure) {
        guard position + count <= bytes.count * 8 else { throw cutShort }
        position += count
    }

    /// The count of zero bits before the next one bit (that bit read too), at most `limit`;
    /// nil beyond it.
    private mutating func leadingZeros(limit: Int) throws(Failure) -> Int? {
        var zeros = 0
        while try read(1) == 0 {
            zeros += 1
            guard zeros < limit else { return nil }
        }
        return zeros
    }

    /// `uvlc()` (AV1 §4.10.3).
    mutating func readUVLC() throws(Failure) -> UInt64 {
        guard let zeros = try leadingZeros(limit: 32) else { return UInt64(UInt32.max) }
        return try read(zeros) + (UInt64(1) << zeros) - 1
    }

    /// `ue(v)` (H.265 §9.2): as `uvlc()`, but a code longer than 32 bits is malformed.
    mutating func readExpGolomb() throws(Failure) -> Int {
        guard let zeros = try leadingZeros(limit: 32) else { throw cutShort }
        return Int(try read(zeros) + (UInt64(1) << zeros) - 1)
    }
}
