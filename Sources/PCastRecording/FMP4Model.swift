// Fragmented MP4 (ISO/IEC 14496-12, ISO/IEC 14496-15 for H.264, the VP Codec ISO Media File
// Format Binding for VP9, the AV1 Codec ISO Media File Format Binding for AV1, "Encapsulation of
// Opus in ISO Base Media File Format" for Opus), pure: no I/O, no clocks. The model: tracks, samples,
// runs, fragments, errors. Writers in FMP4Writer.swift, the crash-recovery scanner in
// FMP4Scanner.swift (box readers in FMP4Readers.swift), the fragmenter in FMP4Fragmenter.swift,
// time in FMP4Time.swift, H.264 Annex-B helpers in H264AnnexB.swift; the file layer in
// RecordingFile.swift.

// MARK: - Public model

/// One track of a recording.
///
/// ```swift
/// let video = FMP4Track(id: 1, timescale: 90_000,
///                       codec: .h264(width: 320, height: 240, sps: sps, pps: pps))
/// let audio = FMP4Track(id: 2, timescale: 48_000,
///                       codec: .opus(channels: 2, sampleRate: 48_000, preSkip: 312))
/// ```
public struct FMP4Track: Sendable, Equatable {
    /// The codec and its configuration.
    public enum Codec: Sendable, Equatable {
        /// H.264, written as an `avc3` sample entry (parameter sets may also be in-band).
        /// `sps` and `pps` are single NAL units without start code or length prefix.
        case h264(width: Int, height: Int, sps: [UInt8], pps: [UInt8])
        /// VP9 profile 0 (8-bit 4:2:0), written as a `vp09` sample entry with `vpcC`; `level` is
        /// the VP9 level × 10 (31 for level 3.1). Samples are whole frames (superframes).
        case vp9(width: Int, height: Int, level: UInt8)
        /// AV1, written as an `av01` sample entry with `av1C`: `configuration` is the four bytes
        /// of its AV1CodecConfigurationRecord before the configOBUs, `sequenceHeader` the
        /// sequence header OBU (with its size field). Samples are temporal units without
        /// temporal delimiters, every OBU with its size field.
        case av1(width: Int, height: Int, configuration: [UInt8], sequenceHeader: [UInt8])
        /// H.265, written as an `hvc1` sample entry with `hvcC`: `configuration` is the
        /// HEVCDecoderConfigurationRecord, its parameter sets complete. Samples are length-prefixed
        /// NAL units without those parameter sets (``H264/lengthPrefixed(annexB:leavingOut:)``).
        case h265(width: Int, height: Int, configuration: [UInt8])
        /// Opus, written as an `Opus` sample entry with `dOps`. `sampleRate` is the
        /// informational input rate; Opus in MP4 always runs at 48 kHz. 1 or 2 channels.
        case opus(channels: Int, sampleRate: Int, preSkip: UInt16)
    }

    /// Whether a track is video or audio.
    public enum Kind: Sendable, Equatable { case video, audio }

    /// The track ID (non-zero, unique in a recording).
    public var id: UInt32
    /// Ticks per second of the track's media time (90 000 for video, 48 000 for Opus).
    public var timescale: UInt32
    /// The codec configuration.
    public var codec: Codec

    public init(id: UInt32, timescale: UInt32, codec: Codec) {
        self.id = id
        self.timescale = timescale
        self.codec = codec
    }

    /// `.video` for H.264, VP9, AV1 and H.265, `.audio` for Opus.
    public var kind: Kind {
        switch codec {
        case .h264, .vp9, .av1, .h265: return .video
        case .opus: return .audio
        }
    }

    /// The picture size of a video track.
    public var pictureSize: (width: Int, height: Int)? { codec.pictureSize }

    /// The codec family without its parameters, as the scanner can report it.
    public var codecKind: FMP4CodecKind {
        switch codec {
        case .h264: return .h264
        case .vp9: return .other("vp09")
        case .av1: return .other("av01")
        case .h265: return .other("hvc1")
        case .opus: return .opus
        }
    }

    /// The track's RFC 6381 `codecs` parameter, as an HLS multivariant playlist's `CODECS` names
    /// it: `avc3.PPCCLL` (the SPS's profile, constraint flags and level), `vp09.00.LL.08`,
    /// `av01.P.LLT.DD` (from the `av1C` header), `hvc1.…` (from the `hvcC` record: ISO/IEC 14496-15
    /// Annex E, the compatibility flags in reverse bit order, the constraint bytes without trailing
    /// zero ones), `Opus`.
    public var codecsString: String {
        func hex(_ byte: UInt8) -> String { String(byte, radix: 16).count == 1 ? "0" + String(byte, radix: 16) : String(byte, radix: 16) }
        func twoDigits(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        switch codec {
        case .h264(_, _, let sps, _):
            return "avc3." + sps.dropFirst().prefix(3).map(hex).joined()
        case .vp9(_, _, let level):
            return "vp09.00.\(twoDigits(Int(level))).08"
        case .av1(_, _, let configuration, _):
            let profile = Int(configuration[1] >> 5), level = Int(configuration[1] & 0x1F)
            let tier = configuration[2] & 0x80 != 0 ? "H" : "M"
            let depth = configuration[2] & 0x40 == 0 ? 8 : configuration[2] & 0x20 != 0 ? 12 : 10
            return "av01.\(profile).\(twoDigits(level))\(tier).\(twoDigits(depth))"
        case .h265(_, _, let record):
            let space = ["", "A", "B", "C"][Int(record[1] >> 6)], profile = record[1] & 0x1F
            let flags = record[2..<6].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            var reversed: UInt32 = 0
            for bit in 0..<32 where flags & (1 << UInt32(31 - bit)) != 0 { reversed |= 1 << UInt32(bit) }
            var constraints = Array(record[6..<12])
            while constraints.last == 0 { constraints.removeLast() }
            let tail = constraints.map { "." + String($0, radix: 16, uppercase: true) }.joined()
            return "hvc1.\(space)\(profile).\(String(reversed, radix: 16, uppercase: true)).\(record[1] & 0x20 != 0 ? "H" : "L")\(record[12])\(tail)"
        case .opus:
            return "Opus"
        }
    }
}

extension FMP4Track.Codec {
    /// The picture size of a video codec; nil for audio.
    public var pictureSize: (width: Int, height: Int)? {
        switch self {
        case .h264(let width, let height, _, _), .vp9(let width, let height, _), .av1(let width, let height, _, _),
             .h265(let width, let height, _):
            return (width, height)
        case .opus:
            return nil
        }
    }

    /// The lowest VP9 level (× 10, as `vpcC` writes it) whose picture size and luma sample rate
    /// take `width` × `height` at `framesPerSecond` (VP9 bitstream, Annex A).
    public static func vp9Level(width: Int, height: Int, framesPerSecond: Int) -> UInt8 {
        let size = width * height, rate = size * framesPerSecond
        let levels: [(UInt8, Int, Int)] = [
            (10, 36_864, 829_440), (11, 73_728, 2_764_800), (20, 122_880, 4_608_000), (21, 245_760, 9_216_000),
            (30, 552_960, 20_736_000), (31, 983_040, 36_864_000), (40, 2_228_224, 83_558_400), (41, 2_228_224, 160_432_128),
            (50, 8_912_896, 311_951_360), (51, 8_912_896, 588_251_136), (52, 8_912_896, 1_176_502_272),
            (60, 35_651_584, 1_176_502_272), (61, 35_651_584, 2_353_004_544), (62, 35_651_584, 4_706_009_088),
        ]
        return levels.first { size <= $0.1 && rate <= $0.2 }?.0 ?? 62
    }
}

/// A codec family, as found in a sample entry.
///
/// ```swift
/// if scannedTrack.codecKind == track.codecKind { /* same codec family */ }
/// ```
public enum FMP4CodecKind: Sendable, Equatable {
    case h264
    case opus
    /// Any other sample entry, with its four-character code.
    case other(String)
}

/// One sample (access unit) of one track.
///
/// ```swift
/// let s = FMP4Sample(decodeTime: 3600, compositionOffset: 0, duration: 3600,
///                    isSync: true, data: H264.lengthPrefixed(annexB: au))
/// ```
public struct FMP4Sample: Sendable, Equatable {
    /// Absolute decode time, in the track's timescale.
    public var decodeTime: UInt64
    /// Presentation time minus decode time, in the track's timescale.
    public var compositionOffset: Int32
    /// Duration in the track's timescale; the next sample must start at `decodeTime + duration`.
    public var duration: UInt32
    /// Whether the sample is a random access point (an IDR frame; every Opus packet).
    public var isSync: Bool
    /// The payload. For H.264: NAL units, each with a 4-byte big-endian length prefix.
    public var data: [UInt8]

    public init(decodeTime: UInt64, compositionOffset: Int32 = 0, duration: UInt32,
                isSync: Bool, data: [UInt8]) {
        self.decodeTime = decodeTime
        self.compositionOffset = compositionOffset
        self.duration = duration
        self.isSync = isSync
        self.data = data
    }
}

/// The samples of one track inside one fragment.
///
/// ```swift
/// let run = FMP4TrackRun(trackID: 1, samples: [sample])
/// ```
public struct FMP4TrackRun: Sendable, Equatable {
    public var trackID: UInt32
    public var samples: [FMP4Sample]

    public init(trackID: UInt32, samples: [FMP4Sample]) {
        self.trackID = trackID
        self.samples = samples
    }

    /// Decode time just after the last sample, or nil when the run is empty.
    public var endDecodeTime: UInt64? {
        guard let last = samples.last else { return nil }
        return last.decodeTime &+ UInt64(last.duration)
    }
}

/// A fragment's content: one run per track that has samples, as `FMP4Fragmenter` emits it.
///
/// ```swift
/// if let fragment = fragmenter.push(au) {
///     let bytes = try FMP4.fragment(sequence: 1, runs: fragment.runs)
/// }
/// ```
public struct FMP4Fragment: Sendable, Equatable {
    public var runs: [FMP4TrackRun]

    public init(runs: [FMP4TrackRun]) { self.runs = runs }

    /// Total number of samples over all tracks.
    public var sampleCount: Int { runs.reduce(0) { $0 + $1.samples.count } }
}

/// Errors of the pure layer: invalid writer input, or a file the scanner cannot accept.
///
/// ```swift
/// do { _ = try FMP4.scan(bytes) } catch .notISOBMFF { /* not an MP4 at all */ } catch { }
/// ```
public enum FMP4Error: Error, Sendable, Equatable {
    /// A track description cannot be written (e.g. SPS shorter than 4 bytes).
    case invalidTrack(id: UInt32, reason: String)
    /// Samples cannot be written as given (e.g. decode times not contiguous).
    case invalidSample(trackID: UInt32, reason: String)
    /// The file does not start with an `ftyp` box.
    case notISOBMFF(found: String)
    /// The movie has no `mvex`: an ordinary (non-fragmented) MP4.
    case notFragmented
    /// A box header declares a size smaller than its header or beyond its container.
    case invalidBoxSize(offset: UInt64, size: UInt64)
    /// A `moov` or `moof` is larger than the scanner is willing to read into memory.
    case boxTooLarge(type: String, offset: UInt64, size: UInt64)
    /// A field runs past the end of its box.
    case truncated(offset: UInt64)
    /// Boxes nested deeper than the scanner accepts.
    case nestingTooDeep(offset: UInt64)
    /// The structure is inconsistent (e.g. a `moof` before the `moov`, an unknown track).
    case malformed(offset: UInt64, reason: String)
    /// The read closure returned fewer bytes than the file length promised.
    case readFailed(offset: UInt64, count: Int)
}
