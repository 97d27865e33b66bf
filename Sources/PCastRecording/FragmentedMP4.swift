// Fragmented MP4 (ISO/IEC 14496-12, ISO/IEC 14496-15 for H.264, "Encapsulation of Opus in
// ISO Base Media File Format" for Opus): init segment and fragment writers, a crash-recovery
// scanner, a timeline helper that cuts access units into fragments, and H.264 Annex-B helpers.
// Pure: no I/O, no clocks. The file layer lives in RecordingFile.swift.

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

    /// `.video` for H.264, `.audio` for Opus.
    public var kind: Kind {
        switch codec {
        case .h264: return .video
        case .opus: return .audio
        }
    }

    /// The codec family without its parameters, as the scanner can report it.
    public var codecKind: FMP4CodecKind {
        switch codec {
        case .h264: return .h264
        case .opus: return .opus
        }
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

// MARK: - Writer

/// Builders for the init segment and fragments, and the recovery scanner.
///
/// ```swift
/// let initSegment = try FMP4.initSegment(tracks: [video, audio])
/// let moofMdat = try FMP4.fragment(sequence: 1, runs: fragment.runs)
/// let scan = try FMP4.scan(initSegment.bytes + moofMdat)
/// ```
public enum FMP4 {
    /// Timescale of `mvhd` and `mehd` in files this writer produces.
    public static let movieTimescale: UInt32 = 1000

    /// The init segment and where its in-place-updatable duration fields are.
    ///
    /// ```swift
    /// let seg = try FMP4.initSegment(tracks: tracks)
    /// // later: pwrite 8 big-endian bytes at seg.mvhdDurationOffset and seg.mehdDurationOffset
    /// ```
    public struct InitSegment: Sendable, Equatable {
        /// `ftyp` + `moov`.
        public var bytes: [UInt8]
        /// Offset of the 64-bit `mvhd` duration (movie timescale).
        public var mvhdDurationOffset: Int
        /// Offset of the 64-bit `mehd` fragment_duration (movie timescale).
        public var mehdDurationOffset: Int
    }

    /// Builds `ftyp` + `moov` for `tracks` (in that order in the file).
    public static func initSegment(tracks: [FMP4Track]) throws(FMP4Error) -> InitSegment {
        try validate(tracks)
        var w = ByteWriter()
        writeFileType(&w)
        var mvhdOffset = 0
        var mehdOffset = 0
        w.box("moov") { w in
            mvhdOffset = writeMovieHeader(&w, nextTrackID: (tracks.map(\.id).max() ?? 0) &+ 1)
            for track in tracks { writeTrack(&w, track) }
            w.box("mvex") { w in
                w.fullBox("mehd", version: 1, flags: 0) { w in
                    mehdOffset = w.count
                    w.u64(0)
                }
                for track in tracks { writeTrackExtends(&w, track) }
            }
        }
        return InitSegment(bytes: w.bytes, mvhdDurationOffset: mvhdOffset,
                           mehdDurationOffset: mehdOffset)
    }

    /// Builds one `moof` followed by one `mdat` holding the samples of all `runs`.
    /// Runs without samples are left out. Within a run, each sample must start where the
    /// previous one ends (`decodeTime + duration`), as a `trun` cannot express gaps.
    public static func fragment(sequence: UInt32, runs: [FMP4TrackRun]) throws(FMP4Error) -> [UInt8] {
        let runs = runs.filter { !$0.samples.isEmpty }
        try validate(runs)
        let payloadSize = runs.reduce(0) { $0 + $1.samples.reduce(0) { $0 + $1.data.count } }
        var w = ByteWriter()
        var patches: [(position: Int, offsetInMdat: Int)] = []
        var offsetInMdat = 0
        w.box("moof") { w in
            w.fullBox("mfhd", version: 0, flags: 0) { w in w.u32(sequence) }
            for run in runs {
                let position = writeTrackFragment(&w, run)
                patches.append((position, offsetInMdat))
                offsetInMdat += run.samples.reduce(0) { $0 + $1.data.count }
            }
        }
        let mdatHeaderSize = 8
        for patch in patches {
            w.patch32(at: patch.position, UInt32(w.count + mdatHeaderSize + patch.offsetInMdat))
        }
        w.u32(UInt32(mdatHeaderSize + payloadSize))
        w.fourCC("mdat")
        w.reserve(payloadSize)
        for run in runs { for sample in run.samples { w.append(sample.data) } }
        return w.bytes
    }

    /// Same as `fragment(sequence:runs:)`, taking track descriptions with their samples.
    public static func fragment(sequence: UInt32,
                                tracks: [(track: FMP4Track, samples: [FMP4Sample])]) throws(FMP4Error) -> [UInt8] {
        try fragment(sequence: sequence,
                     runs: tracks.map { FMP4TrackRun(trackID: $0.track.id, samples: $0.samples) })
    }

    /// `trun` sample flags of a sync sample: sample_depends_on = 2 (depends on no other).
    static let syncSampleFlags: UInt32 = 0x0200_0000
    /// `trun` sample flags of a non-sync sample: sample_depends_on = 1, is_non_sync_sample = 1.
    static let nonSyncSampleFlags: UInt32 = 0x0101_0000
    /// Upper bound on samples per fragment: keeps the `moof` under 20 MiB.
    static let maxSamplesPerFragment = 1 << 20
    /// Largest mdat payload: `trun` data offsets (moof size + payload position) are signed 32-bit.
    static let maxPayloadSize = Int(Int32.max) - (1 << 26)
}

// MARK: Writer internals

extension FMP4 {
    static func validate(_ tracks: [FMP4Track]) throws(FMP4Error) {
        guard !tracks.isEmpty else { throw .invalidTrack(id: 0, reason: "no tracks") }
        var seen = Set<UInt32>()
        for track in tracks {
            guard track.id != 0 else { throw .invalidTrack(id: 0, reason: "track ID 0 is reserved") }
            guard seen.insert(track.id).inserted else {
                throw .invalidTrack(id: track.id, reason: "duplicate track ID")
            }
            guard track.timescale > 0 else { throw .invalidTrack(id: track.id, reason: "timescale is 0") }
            try validate(track.codec, id: track.id)
        }
    }

    static func validate(_ codec: FMP4Track.Codec, id: UInt32) throws(FMP4Error) {
        switch codec {
        case let .h264(width, height, sps, pps):
            guard (1...0xFFFF).contains(width), (1...0xFFFF).contains(height) else {
                throw .invalidTrack(id: id, reason: "width/height must be 1...65535")
            }
            guard sps.count >= 4, sps.count <= 0xFFFF else {
                throw .invalidTrack(id: id, reason: "SPS must be 4...65535 bytes")
            }
            guard !pps.isEmpty, pps.count <= 0xFFFF else {
                throw .invalidTrack(id: id, reason: "PPS must be 1...65535 bytes")
            }
        case let .opus(channels, sampleRate, _):
            guard (1...2).contains(channels) else {
                throw .invalidTrack(id: id, reason: "only 1 or 2 Opus channels (mapping family 0)")
            }
            guard sampleRate > 0, sampleRate <= Int(UInt32.max) else {
                throw .invalidTrack(id: id, reason: "invalid input sample rate")
            }
        }
    }

    static func validate(_ runs: [FMP4TrackRun]) throws(FMP4Error) {
        var seen = Set<UInt32>()
        var samples = 0
        var payload = 0
        for run in runs {
            guard seen.insert(run.trackID).inserted else {
                throw .invalidSample(trackID: run.trackID, reason: "track appears twice in a fragment")
            }
            samples += run.samples.count
            for (index, sample) in run.samples.enumerated() {
                payload += sample.data.count
                guard payload <= maxPayloadSize else {
                    throw .invalidSample(trackID: run.trackID, reason: "fragment payload exceeds 2 GiB")
                }
                guard index + 1 < run.samples.count else { continue }
                let (end, overflow) = sample.decodeTime.addingReportingOverflow(UInt64(sample.duration))
                guard !overflow, end == run.samples[index + 1].decodeTime else {
                    throw .invalidSample(trackID: run.trackID,
                                         reason: "sample \(index + 1) does not start where sample \(index) ends")
                }
            }
        }
        guard samples <= maxSamplesPerFragment else {
            throw .invalidSample(trackID: 0, reason: "too many samples in one fragment")
        }
    }

    static func writeFileType(_ w: inout ByteWriter) {
        w.box("ftyp") { w in
            w.fourCC("iso6")
            w.u32(0)
            for brand in ["iso6", "iso5", "isom", "dash", "mp41"] { w.fourCC(brand) }
        }
    }

    static let unityMatrix: [UInt32] = [0x0001_0000, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000]

    /// Writes `mvhd` version 1; returns the offset of its duration field.
    static func writeMovieHeader(_ w: inout ByteWriter, nextTrackID: UInt32) -> Int {
        var durationOffset = 0
        w.fullBox("mvhd", version: 1, flags: 0) { w in
            w.u64(0)  // creation_time
            w.u64(0)  // modification_time
            w.u32(movieTimescale)
            durationOffset = w.count
            w.u64(0)
            w.u32(0x0001_0000)  // rate 1.0
            w.u16(0x0100)  // volume 1.0
            w.zeros(10)
            for value in unityMatrix { w.u32(value) }
            w.zeros(24)  // pre_defined
            w.u32(nextTrackID)
        }
        return durationOffset
    }

    static func writeTrack(_ w: inout ByteWriter, _ track: FMP4Track) {
        w.box("trak") { w in
            writeTrackHeader(&w, track)
            w.box("mdia") { w in
                w.fullBox("mdhd", version: 1, flags: 0) { w in
                    w.u64(0)
                    w.u64(0)
                    w.u32(track.timescale)
                    w.u64(0)  // duration: all samples are in fragments
                    w.u16(0x55C4)  // language "und"
                    w.u16(0)
                }
                w.fullBox("hdlr", version: 0, flags: 0) { w in
                    w.u32(0)
                    w.fourCC(track.kind == .video ? "vide" : "soun")
                    w.zeros(12)
                    w.append(Array((track.kind == .video ? "VideoHandler" : "SoundHandler").utf8) + [0])
                }
                writeMediaInformation(&w, track)
            }
        }
    }

    static func writeTrackHeader(_ w: inout ByteWriter, _ track: FMP4Track) {
        // flags: track_enabled | track_in_movie | track_in_preview
        w.fullBox("tkhd", version: 1, flags: 7) { w in
            w.u64(0)
            w.u64(0)
            w.u32(track.id)
            w.u32(0)
            w.u64(0)  // duration
            w.zeros(8)
            w.u16(0)  // layer
            w.u16(track.kind == .video ? 0 : 1)  // alternate_group
            w.u16(track.kind == .video ? 0 : 0x0100)  // volume
            w.u16(0)
            for value in unityMatrix { w.u32(value) }
            if case let .h264(width, height, _, _) = track.codec {
                w.u32(UInt32(width) << 16)
                w.u32(UInt32(height) << 16)
            } else {
                w.u32(0)
                w.u32(0)
            }
        }
    }

    static func writeMediaInformation(_ w: inout ByteWriter, _ track: FMP4Track) {
        w.box("minf") { w in
            if track.kind == .video {
                w.fullBox("vmhd", version: 0, flags: 1) { w in w.zeros(8) }
            } else {
                w.fullBox("smhd", version: 0, flags: 0) { w in w.zeros(4) }
            }
            w.box("dinf") { w in
                w.fullBox("dref", version: 0, flags: 0) { w in
                    w.u32(1)
                    w.fullBox("url ", version: 0, flags: 1) { _ in }  // media is in this file
                }
            }
            w.box("stbl") { w in
                w.fullBox("stsd", version: 0, flags: 0) { w in
                    w.u32(1)
                    writeSampleEntry(&w, track.codec)
                }
                w.fullBox("stts", version: 0, flags: 0) { w in w.u32(0) }
                w.fullBox("stsc", version: 0, flags: 0) { w in w.u32(0) }
                w.fullBox("stsz", version: 0, flags: 0) { w in w.u32(0); w.u32(0) }
                w.fullBox("stco", version: 0, flags: 0) { w in w.u32(0) }
            }
        }
    }

    static func writeSampleEntry(_ w: inout ByteWriter, _ codec: FMP4Track.Codec) {
        switch codec {
        case let .h264(width, height, sps, pps):
            w.box("avc3") { w in
                w.zeros(6)
                w.u16(1)  // data_reference_index
                w.zeros(16)  // pre_defined, reserved
                w.u16(UInt16(width))
                w.u16(UInt16(height))
                w.u32(0x0048_0000)  // 72 dpi
                w.u32(0x0048_0000)
                w.u32(0)
                w.u16(1)  // frame_count
                w.zeros(32)  // compressorname
                w.u16(0x0018)  // depth
                w.u16(0xFFFF)  // pre_defined = -1
                w.box("avcC") { w in
                    w.u8(1)
                    w.u8(sps[1])  // profile_idc
                    w.u8(sps[2])  // constraint flags
                    w.u8(sps[3])  // level_idc
                    w.u8(0xFC | 3)  // lengthSizeMinusOne = 3
                    w.u8(0xE0 | 1)
                    w.u16(UInt16(sps.count))
                    w.append(sps)
                    w.u8(1)
                    w.u16(UInt16(pps.count))
                    w.append(pps)
                }
            }
        case let .opus(channels, sampleRate, preSkip):
            w.box("Opus") { w in
                w.zeros(6)
                w.u16(1)  // data_reference_index
                w.zeros(8)
                w.u16(UInt16(channels))
                w.u16(16)  // samplesize
                w.u16(0)
                w.u16(0)
                w.u32(48_000 << 16)
                w.box("dOps") { w in
                    w.u8(0)  // Version
                    w.u8(UInt8(channels))
                    w.u16(preSkip)
                    w.u32(UInt32(sampleRate))
                    w.u16(0)  // OutputGain
                    w.u8(0)  // ChannelMappingFamily
                }
            }
        }
    }

    static func writeTrackExtends(_ w: inout ByteWriter, _ track: FMP4Track) {
        w.fullBox("trex", version: 0, flags: 0) { w in
            w.u32(track.id)
            w.u32(1)  // default_sample_description_index
            w.u32(0)
            w.u32(0)
            w.u32(0)
        }
    }

    /// Writes one `traf`; returns the position of its `trun` data_offset, to patch later.
    static func writeTrackFragment(_ w: inout ByteWriter, _ run: FMP4TrackRun) -> Int {
        var dataOffsetPosition = 0
        w.box("traf") { w in
            w.fullBox("tfhd", version: 0, flags: 0x02_0000) { w in w.u32(run.trackID) }  // default-base-is-moof
            w.fullBox("tfdt", version: 1, flags: 0) { w in w.u64(run.samples.first?.decodeTime ?? 0) }
            // data-offset, sample duration, size, flags and composition offset present
            w.fullBox("trun", version: 1, flags: 0x00_0F01) { w in
                w.u32(UInt32(run.samples.count))
                dataOffsetPosition = w.count
                w.u32(0)
                for sample in run.samples {
                    w.u32(sample.duration)
                    w.u32(UInt32(sample.data.count))
                    w.u32(sample.isSync ? syncSampleFlags : nonSyncSampleFlags)
                    w.u32(UInt32(bitPattern: sample.compositionOffset))
                }
            }
        }
        return dataOffsetPosition
    }
}

/// Big-endian byte writer with nested boxes whose sizes are patched when they close.
struct ByteWriter {
    private(set) var bytes: [UInt8] = []
    var count: Int { bytes.count }

    mutating func u8(_ v: UInt8) { bytes.append(v) }
    mutating func u16(_ v: UInt16) { bytes.append(UInt8(v >> 8)); bytes.append(UInt8(v & 0xFF)) }
    mutating func u32(_ v: UInt32) { for shift in stride(from: 24, through: 0, by: -8) { bytes.append(UInt8((v >> UInt32(shift)) & 0xFF)) } }
    mutating func u64(_ v: UInt64) { for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8((v >> UInt64(shift)) & 0xFF)) } }
    mutating func zeros(_ n: Int) { bytes.append(contentsOf: repeatElement(0, count: n)) }
    mutating func append(_ b: [UInt8]) { bytes.append(contentsOf: b) }
    mutating func reserve(_ extra: Int) { bytes.reserveCapacity(bytes.count + extra) }
    mutating func fourCC(_ code: String) { bytes.append(contentsOf: code.utf8.prefix(4)) }

    mutating func patch32(at position: Int, _ v: UInt32) {
        for i in 0..<4 { bytes[position + i] = UInt8((v >> UInt32(24 - 8 * i)) & 0xFF) }
    }

    /// Writes a box whose size is filled in after `body` has written its content.
    mutating func box(_ type: String, _ body: (inout ByteWriter) -> Void) {
        let start = count
        u32(0)
        fourCC(type)
        body(&self)
        patch32(at: start, UInt32(count - start))
    }

    mutating func fullBox(_ type: String, version: UInt8, flags: UInt32, _ body: (inout ByteWriter) -> Void) {
        box(type) { w in
            w.u32(UInt32(version) << 24 | (flags & 0x00FF_FFFF))
            body(&w)
        }
    }
}

// MARK: - Scanner

/// Where a duration field sits in a file, for in-place updates.
///
/// ```swift
/// if let field = scan.mvhdDuration { /* pwrite field.byteCount bytes at field.offset */ }
/// ```
public struct FMP4DurationField: Sendable, Equatable {
    /// Absolute offset in the file.
    public var offset: UInt64
    /// 8 for a version-1 box, 4 for version 0.
    public var byteCount: Int
}

/// A track found in a file's `moov`.
///
/// ```swift
/// let compatible = scanned.codecKind == track.codecKind && scanned.timescale == track.timescale
/// ```
public struct FMP4ScannedTrack: Sendable, Equatable {
    public var id: UInt32
    public var timescale: UInt32
    /// The `hdlr` handler type, e.g. "vide" or "soun".
    public var handler: String
    /// The first sample entry's four-character code, e.g. "avc3" or "Opus".
    public var sampleEntry: String
    /// Width and height from a visual sample entry, 0 otherwise.
    public var width: Int
    public var height: Int
    /// Channel count from an audio sample entry, 0 otherwise.
    public var channels: Int

    /// The codec family of `sampleEntry` (`avc1`/`avc3` → H.264).
    public var codecKind: FMP4CodecKind {
        switch sampleEntry {
        case "avc1", "avc3": return .h264
        case "Opus": return .opus
        default: return .other(sampleEntry)
        }
    }
}

/// What the scanner found: enough to append safely.
///
/// ```swift
/// let scan = try FMP4.scan(length: size) { offset, count in pread(offset, count) }
/// if scan.hasMovie { truncate(to: scan.completeEnd) }
/// ```
public struct FMP4Scan: Sendable, Equatable {
    /// Why scanning stopped before the end of the file.
    public enum Tail: Sendable, Equatable {
        /// The file ends exactly after a complete box.
        case none
        /// The last box (or its header) runs past the end of the file: a torn write.
        case incompleteBox(offset: UInt64)
        /// A complete `moof` has no complete `mdat` after it.
        case fragmentWithoutData(offset: UInt64)
        /// Zero-filled bytes (what a file system may leave after a power loss).
        case zeroFill(offset: UInt64)
        /// Complete boxes that belong to no fragment, e.g. a fragment staged as `free` whose
        /// `moof` type was never committed, or an `mdat` without `moof`.
        case unreferencedData(offset: UInt64)
    }

    public var fileLength: UInt64
    /// Tracks of the `moov`, in file order; empty when there is no complete `moov`.
    public var tracks: [FMP4ScannedTrack] = []
    public var movieTimescale: UInt32 = 0
    public var mvhdDuration: FMP4DurationField?
    public var mehdDuration: FMP4DurationField?
    /// End of the `moov`, 0 when no complete `moov` was found.
    public var movieEnd: UInt64 = 0
    /// End of the last complete `moof`+`mdat` pair, or of the `moov` when there is none,
    /// or 0 without a complete `moov`. Everything after it can be truncated.
    public var completeEnd: UInt64 = 0
    /// Number of complete fragments.
    public var fragmentCount = 0
    /// `mfhd` sequence number of the last complete fragment.
    public var lastSequence: UInt32?
    /// Decode time at the end of each track's last sample (track timescale); 0 for a track
    /// without samples.
    public var trackEnds: [UInt32: UInt64] = [:]
    public var tail: Tail = .none

    /// Whether a complete `moov` was found.
    public var hasMovie: Bool { movieEnd > 0 }

    /// The recording's end in nanoseconds: the latest track end.
    public var endNanoseconds: UInt64 {
        tracks.map { FMP4Time.nanoseconds(trackEnds[$0.id] ?? 0, timescale: $0.timescale) }.max() ?? 0
    }
}

extension FMP4 {
    /// Largest `moov` or `moof` the scanner reads into memory.
    public static let maxScannedBoxSize: UInt64 = 32 << 20

    /// Scans a whole file held in memory. See `scan(length:read:)`.
    public static func scan(_ bytes: [UInt8]) throws(FMP4Error) -> FMP4Scan {
        try scan(length: UInt64(bytes.count)) { offset, count in
            guard offset < UInt64(bytes.count) else { return [] }
            let start = Int(offset)
            return Array(bytes[start..<min(bytes.count, start + count)])
        }
    }

    /// Walks the top-level boxes of a file of `length` bytes, reading only box headers,
    /// the `moov` and the `moof`s through `read(offset, count)` (which may return fewer
    /// bytes only on an I/O error). Never reads `mdat` payloads.
    ///
    /// A box running past the end of the file, a `moof` without its `mdat`, or zero-filled
    /// bytes end the scan and are reported in `tail`; everything from `completeEnd` on can be
    /// truncated. Broken structure before that (invalid sizes, a malformed `moof`) throws.
    public static func scan(length: UInt64,
                            read: @escaping (_ offset: UInt64, _ count: Int) -> [UInt8]) throws(FMP4Error) -> FMP4Scan {
        var scanner = Scanner(length: length, read: read)
        return try scanner.run()
    }
}

/// A parsed box header.
struct BoxHeader {
    var type: UInt32
    var offset: UInt64
    var headerSize: UInt64
    var size: UInt64
    var end: UInt64 { offset + size }
}

/// A `moof` whose `mdat` has not been seen yet.
struct PendingFragment {
    var offset: UInt64
    var sequence: UInt32
    var trackEnds: [UInt32: UInt64]
    /// End of the sample data the `trun`s point to, when it can be computed.
    var dataEnd: UInt64?
}

/// Per-track values from `trex`, used when `tfhd` and `trun` leave them out.
struct TrackDefaults {
    var duration: UInt32 = 0
    var size: UInt32 = 0
}

struct Scanner {
    let length: UInt64
    let read: (UInt64, Int) -> [UInt8]
    var result: FMP4Scan
    var defaults: [UInt32: TrackDefaults] = [:]

    init(length: UInt64, read: @escaping (UInt64, Int) -> [UInt8]) {
        self.length = length
        self.read = read
        self.result = FMP4Scan(fileLength: length)
    }

    mutating func run() throws(FMP4Error) -> FMP4Scan {
        var offset: UInt64 = 0
        var pending: PendingFragment?
        while offset < length {
            guard let header = try topLevelHeader(at: offset) else { return result }
            if offset == 0, header.type != FourCC.ftyp {
                throw .notISOBMFF(found: FourCC.string(header.type))
            }
            switch header.type {
            case FourCC.moov:
                try readMovie(header)
            case FourCC.moof:
                guard result.hasMovie else { throw .malformed(offset: offset, reason: "moof before moov") }
                guard pending == nil else { throw .malformed(offset: offset, reason: "moof without mdat") }
                pending = try readFragment(header)
            case FourCC.mdat:
                if let fragment = pending {
                    try commit(fragment, mdat: header)
                    pending = nil
                }
            default:
                break
            }
            offset = header.end
        }
        if let fragment = pending {
            result.tail = .fragmentWithoutData(offset: fragment.offset)
        } else if result.hasMovie, result.completeEnd < length {
            result.tail = .unreferencedData(offset: result.completeEnd)
        }
        return result
    }

    /// Reads the header at `offset`; nil (with `tail` set) when the box is torn or zero-filled.
    mutating func topLevelHeader(at offset: UInt64) throws(FMP4Error) -> BoxHeader? {
        let available = length - offset
        let bytes = try readExactly(offset, Int(min(16, available)))
        if bytes.count >= 8, bytes[0..<8].allSatisfy({ $0 == 0 }) {
            result.tail = .zeroFill(offset: offset)
            return nil
        }
        if offset == 0 {
            if bytes.count >= 8, FourCC.value(bytes, 4) != FourCC.ftyp {
                throw .notISOBMFF(found: FourCC.string(FourCC.value(bytes, 4)))
            } else if bytes.count < 8, !ftypPrefix(bytes) {
                throw .notISOBMFF(found: "")
            }
        }
        guard bytes.count >= 8 else {
            result.tail = .incompleteBox(offset: offset)
            return nil
        }
        var header = BoxHeader(type: FourCC.value(bytes, 4), offset: offset, headerSize: 8,
                               size: UInt64(FourCC.value(bytes, 0)))
        if header.size == 1 {
            guard bytes.count >= 16 else {
                result.tail = .incompleteBox(offset: offset)
                return nil
            }
            header.headerSize = 16
            header.size = UInt64(FourCC.value(bytes, 8)) << 32 | UInt64(FourCC.value(bytes, 12))
        } else if header.size == 0 {
            header.size = available  // "extends to the end of the file"
        }
        guard header.size >= header.headerSize else { throw .invalidBoxSize(offset: offset, size: header.size) }
        guard FourCC.isPrintable(header.type) else {
            throw .malformed(offset: offset, reason: "box type is not a four-character code")
        }
        guard header.size <= available else {
            result.tail = .incompleteBox(offset: offset)
            return nil
        }
        return header
    }

    /// Whether the first bytes of a file shorter than a box header could be the start of
    /// an `ftyp` header (then the file is a torn recording, not foreign data).
    func ftypPrefix(_ bytes: [UInt8]) -> Bool {
        zip(bytes.dropFirst(4), Array("ftyp".utf8)).allSatisfy { $0 == $1 }
    }

    func readExactly(_ offset: UInt64, _ count: Int) throws(FMP4Error) -> [UInt8] {
        let bytes = read(offset, count)
        guard bytes.count == count else { throw .readFailed(offset: offset, count: count) }
        return bytes
    }

    func readBody(_ header: BoxHeader) throws(FMP4Error) -> BoxSlice {
        guard header.size <= FMP4.maxScannedBoxSize else {
            throw .boxTooLarge(type: FourCC.string(header.type), offset: header.offset, size: header.size)
        }
        let bytes = try readExactly(header.offset, Int(header.size))
        return BoxSlice(bytes: bytes, base: header.offset, start: Int(header.headerSize), end: bytes.count)
    }

    // MARK: moov

    mutating func readMovie(_ header: BoxHeader) throws(FMP4Error) {
        guard !result.hasMovie else { throw .malformed(offset: header.offset, reason: "second moov") }
        let moov = try readBody(header)
        var hasExtends = false
        for child in try moov.children() {
            switch child.type {
            case FourCC.mvhd: try readMovieHeader(child)
            case FourCC.trak: try readTrack(child)
            case FourCC.mvex:
                hasExtends = true
                try readMovieExtends(child)
            default: break
            }
        }
        guard result.movieTimescale > 0 else { throw .malformed(offset: header.offset, reason: "no mvhd") }
        guard hasExtends else { throw .notFragmented }
        result.movieEnd = header.end
        result.completeEnd = header.end
        for track in result.tracks { result.trackEnds[track.id] = 0 }
    }

    mutating func readMovieHeader(_ box: BoxSlice) throws(FMP4Error) {
        var r = box.reader()
        let version = try r.version()
        try r.skip(version == 1 ? 16 : 8)
        result.movieTimescale = try r.u32()
        result.mvhdDuration = FMP4DurationField(offset: r.absolutePosition, byteCount: version == 1 ? 8 : 4)
        guard result.movieTimescale > 0 else { throw .malformed(offset: box.base, reason: "mvhd timescale 0") }
    }

    mutating func readTrack(_ trak: BoxSlice) throws(FMP4Error) {
        var track = FMP4ScannedTrack(id: 0, timescale: 0, handler: "", sampleEntry: "",
                                     width: 0, height: 0, channels: 0)
        let tkhd = try trak.child(FourCC.tkhd)
        var r = tkhd.reader()
        try r.skip(try r.version() == 1 ? 16 : 8)
        track.id = try r.u32()
        let mdia = try trak.child(FourCC.mdia)
        try readMediaHeader(mdia.child(FourCC.mdhd), into: &track)
        var handler = try mdia.child(FourCC.hdlr).reader()
        try handler.skip(8)
        track.handler = FourCC.string(try handler.u32())
        let stsd = try mdia.child(FourCC.minf).child(FourCC.stbl).child(FourCC.stsd)
        try readSampleDescription(stsd, into: &track)
        guard track.id != 0, track.timescale > 0 else {
            throw .malformed(offset: trak.base, reason: "track without ID or timescale")
        }
        guard !result.tracks.contains(where: { $0.id == track.id }) else {
            throw .malformed(offset: trak.base, reason: "duplicate track ID \(track.id)")
        }
        result.tracks.append(track)
    }

    func readMediaHeader(_ mdhd: BoxSlice, into track: inout FMP4ScannedTrack) throws(FMP4Error) {
        var r = mdhd.reader()
        try r.skip(try r.version() == 1 ? 16 : 8)
        track.timescale = try r.u32()
    }

    func readSampleDescription(_ stsd: BoxSlice, into track: inout FMP4ScannedTrack) throws(FMP4Error) {
        var r = stsd.reader()
        try r.skip(8)  // version/flags, entry_count
        let entries = try stsd.children(from: r.position)
        guard let entry = entries.first else { throw .malformed(offset: stsd.base, reason: "empty stsd") }
        track.sampleEntry = FourCC.string(entry.type)
        var e = entry.reader()
        if track.handler == "vide" {
            try e.skip(24)
            track.width = Int(try e.u16())
            track.height = Int(try e.u16())
        } else if track.handler == "soun" {
            try e.skip(16)
            track.channels = Int(try e.u16())
        }
    }

    mutating func readMovieExtends(_ mvex: BoxSlice) throws(FMP4Error) {
        for child in try mvex.children() {
            var r = child.reader()
            if child.type == FourCC.mehd {
                let version = try r.version()
                result.mehdDuration = FMP4DurationField(offset: r.absolutePosition,
                                                        byteCount: version == 1 ? 8 : 4)
                try r.skip(version == 1 ? 8 : 4)
            } else if child.type == FourCC.trex {
                try r.skip(4)
                let id = try r.u32()
                try r.skip(4)
                defaults[id] = TrackDefaults(duration: try r.u32(), size: try r.u32())
            }
        }
    }

    // MARK: moof

    func readFragment(_ header: BoxHeader) throws(FMP4Error) -> PendingFragment {
        let moof = try readBody(header)
        var fragment = PendingFragment(offset: header.offset, sequence: 0,
                                       trackEnds: result.trackEnds, dataEnd: nil)
        var r = try moof.child(FourCC.mfhd).reader()
        try r.skip(4)
        fragment.sequence = try r.u32()
        for traf in try moof.children() where traf.type == FourCC.traf {
            try readTrackFragment(traf, moofOffset: header.offset, into: &fragment)
        }
        return fragment
    }

    func readTrackFragment(_ traf: BoxSlice, moofOffset: UInt64,
                           into fragment: inout PendingFragment) throws(FMP4Error) {
        let header = try TrackFragmentHeader(traf.child(FourCC.tfhd))
        guard let previousEnd = fragment.trackEnds[header.trackID] else {
            throw .malformed(offset: traf.base, reason: "traf for unknown track \(header.trackID)")
        }
        let trackDefaults = defaults[header.trackID] ?? TrackDefaults()
        let defaultDuration = header.defaultDuration ?? trackDefaults.duration
        let defaultSize = header.defaultSize ?? trackDefaults.size
        var end = previousEnd
        let children = try traf.children()
        if let tfdt = children.first(where: { $0.type == FourCC.tfdt }) {
            var r = tfdt.reader()
            end = try r.version() == 1 ? try r.u64() : UInt64(try r.u32())
        }
        let base = header.baseDataOffset ?? moofOffset
        for trun in children where trun.type == FourCC.trun {
            let run = try TrackRunSummary(trun, defaultDuration: defaultDuration, defaultSize: defaultSize)
            let (newEnd, overflow) = end.addingReportingOverflow(run.duration)
            guard !overflow else { throw .malformed(offset: trun.base, reason: "decode time overflows") }
            end = newEnd
            if let dataOffset = run.dataOffset {
                let start = Int64(bitPattern: base) &+ Int64(dataOffset)
                let dataEnd = UInt64(clamping: start) &+ run.size
                fragment.dataEnd = max(fragment.dataEnd ?? 0, dataEnd)
            }
        }
        fragment.trackEnds[header.trackID] = end
    }

    mutating func commit(_ fragment: PendingFragment, mdat: BoxHeader) throws(FMP4Error) {
        if let dataEnd = fragment.dataEnd, dataEnd > mdat.end {
            throw .malformed(offset: fragment.offset, reason: "sample data runs past its mdat")
        }
        result.trackEnds = fragment.trackEnds
        result.lastSequence = fragment.sequence
        result.fragmentCount += 1
        result.completeEnd = mdat.end
    }
}

/// The fields of a `tfhd` that matter for recovery.
struct TrackFragmentHeader {
    var trackID: UInt32
    var baseDataOffset: UInt64?
    var defaultDuration: UInt32?
    var defaultSize: UInt32?

    init(_ box: BoxSlice) throws(FMP4Error) {
        var r = box.reader()
        let flags = try r.u32() & 0x00FF_FFFF
        trackID = try r.u32()
        if flags & 0x01 != 0 { baseDataOffset = try r.u64() }
        if flags & 0x02 != 0 { try r.skip(4) }  // sample_description_index
        if flags & 0x08 != 0 { defaultDuration = try r.u32() }
        if flags & 0x10 != 0 { defaultSize = try r.u32() }
    }
}

/// Total duration and data size of one `trun`.
struct TrackRunSummary {
    var duration: UInt64 = 0
    var size: UInt64 = 0
    var dataOffset: Int32?

    init(_ box: BoxSlice, defaultDuration: UInt32, defaultSize: UInt32) throws(FMP4Error) {
        var r = box.reader()
        let flags = try r.u32() & 0x00FF_FFFF
        let count = UInt64(try r.u32())
        if flags & 0x001 != 0 { dataOffset = Int32(bitPattern: try r.u32()) }
        if flags & 0x004 != 0 { try r.skip(4) }  // first_sample_flags
        let hasDuration = flags & 0x100 != 0
        let hasSize = flags & 0x200 != 0
        let fieldCount = [0x100, 0x200, 0x400, 0x800].filter { flags & UInt32($0) != 0 }.count
        guard count * UInt64(4 * fieldCount) <= UInt64(r.remaining) else { throw .truncated(offset: box.base) }
        if fieldCount == 0 {
            let (d, o1) = count.multipliedReportingOverflow(by: UInt64(defaultDuration))
            let (s, o2) = count.multipliedReportingOverflow(by: UInt64(defaultSize))
            guard !o1, !o2 else { throw .malformed(offset: box.base, reason: "trun totals overflow") }
            duration = d
            size = s
            return
        }
        for _ in 0..<count {
            duration += UInt64(hasDuration ? try r.u32() : defaultDuration)
            size += UInt64(hasSize ? try r.u32() : defaultSize)
            try r.skip(4 * (fieldCount - (hasDuration ? 1 : 0) - (hasSize ? 1 : 0)))
        }
    }
}

/// A box held in memory: `bytes[start..<end]` is its content, `base` its file offset.
struct BoxSlice {
    let bytes: [UInt8]
    let base: UInt64
    let start: Int
    let end: Int
    var type: UInt32 = 0

    static let maxDepth = 16
    var depth = 0

    func reader() -> FieldReader { FieldReader(bytes: bytes, base: base, position: start, end: end) }

    /// The child boxes of this box's content, starting `from` a position (default: start).
    func children(from position: Int? = nil) throws(FMP4Error) -> [BoxSlice] {
        guard depth < BoxSlice.maxDepth else { throw .nestingTooDeep(offset: base) }
        var result: [BoxSlice] = []
        var offset = position ?? start
        while offset < end {
            let child = try childBox(at: offset)
            result.append(child)
            offset = child.end
        }
        return result
    }

    private func childBox(at offset: Int) throws(FMP4Error) -> BoxSlice {
        let absolute = base + UInt64(offset)
        guard end - offset >= 8 else { throw .truncated(offset: absolute) }
        var size = UInt64(FourCC.value(bytes, offset))
        var header = 8
        if size == 1 {
            guard end - offset >= 16 else { throw .truncated(offset: absolute) }
            size = UInt64(FourCC.value(bytes, offset + 8)) << 32 | UInt64(FourCC.value(bytes, offset + 12))
            header = 16
        } else if size == 0 {
            size = UInt64(end - offset)
        }
        guard size >= UInt64(header), size <= UInt64(end - offset) else {
            throw .invalidBoxSize(offset: absolute, size: size)
        }
        var child = BoxSlice(bytes: bytes, base: base, start: offset + header, end: offset + Int(size))
        child.type = FourCC.value(bytes, offset + 4)
        child.depth = depth + 1
        return child
    }

    /// The first child of `type`, or a `malformed` error naming what is missing.
    func child(_ type: UInt32) throws(FMP4Error) -> BoxSlice {
        guard let found = try children().first(where: { $0.type == type }) else {
            throw .malformed(offset: base + UInt64(start), reason: "missing \(FourCC.string(type))")
        }
        return found
    }
}

/// Bounds-checked big-endian field reader over part of a byte array.
struct FieldReader {
    let bytes: [UInt8]
    let base: UInt64
    var position: Int
    let end: Int

    var remaining: Int { end - position }
    var absolutePosition: UInt64 { base + UInt64(position) }

    mutating func skip(_ n: Int) throws(FMP4Error) {
        guard n >= 0, n <= remaining else { throw .truncated(offset: absolutePosition) }
        position += n
    }

    mutating func u16() throws(FMP4Error) -> UInt16 {
        guard remaining >= 2 else { throw .truncated(offset: absolutePosition) }
        defer { position += 2 }
        return UInt16(bytes[position]) << 8 | UInt16(bytes[position + 1])
    }

    mutating func u32() throws(FMP4Error) -> UInt32 {
        guard remaining >= 4 else { throw .truncated(offset: absolutePosition) }
        defer { position += 4 }
        return FourCC.value(bytes, position)
    }

    mutating func u64() throws(FMP4Error) -> UInt64 {
        let high = try u32()
        return UInt64(high) << 32 | UInt64(try u32())
    }

    /// Reads a full box's version and flags; returns the version.
    mutating func version() throws(FMP4Error) -> UInt8 { UInt8(try u32() >> 24) }
}

/// Four-character codes as big-endian integers.
enum FourCC {
    static let ftyp = code("ftyp"), moov = code("moov"), moof = code("moof"), mdat = code("mdat")
    static let mvhd = code("mvhd"), trak = code("trak"), mvex = code("mvex"), mehd = code("mehd")
    static let trex = code("trex"), tkhd = code("tkhd"), mdia = code("mdia"), mdhd = code("mdhd")
    static let hdlr = code("hdlr"), minf = code("minf"), stbl = code("stbl"), stsd = code("stsd")
    static let mfhd = code("mfhd"), traf = code("traf"), tfhd = code("tfhd"), tfdt = code("tfdt")
    static let trun = code("trun")

    static func code(_ s: String) -> UInt32 { s.utf8.reduce(0) { $0 << 8 | UInt32($1) } }

    /// The big-endian UInt32 at `offset` (caller checks bounds).
    static func value(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16
            | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }

    static func string(_ code: UInt32) -> String {
        let scalars = [24, 16, 8, 0].map { UInt8((code >> UInt32($0)) & 0xFF) }
        guard isPrintable(code) else { return scalars.map { String($0, radix: 16) }.joined(separator: " ") }
        return String(decoding: scalars, as: UTF8.self)
    }

    static func isPrintable(_ code: UInt32) -> Bool {
        [24, 16, 8, 0].allSatisfy { (0x20...0x7E).contains((code >> UInt32($0)) & 0xFF) }
    }
}

// MARK: - Time arithmetic

/// Overflow-safe conversions between nanoseconds and track ticks.
///
/// ```swift
/// FMP4Time.ticks(40_000_000, timescale: 90_000)   // 3600
/// FMP4Time.nanoseconds(3600, timescale: 90_000)   // 40_000_000
/// ```
public enum FMP4Time {
    /// `value * multiplier / divisor`, rounded to nearest, saturating at `UInt64.max`.
    public static func rescale(_ value: UInt64, multiplier: UInt64, divisor: UInt64) -> UInt64 {
        guard divisor > 0 else { return UInt64.max }
        let product = value.multipliedFullWidth(by: multiplier)
        let (sum, carry) = product.low.addingReportingOverflow(divisor / 2)
        let high = product.high &+ (carry ? 1 : 0)
        guard high < divisor else { return UInt64.max }
        return divisor.dividingFullWidth((high: high, low: sum)).quotient
    }

    /// Nanoseconds to ticks of `timescale`.
    public static func ticks(_ nanoseconds: UInt64, timescale: UInt32) -> UInt64 {
        rescale(nanoseconds, multiplier: UInt64(timescale), divisor: 1_000_000_000)
    }

    /// Ticks of `timescale` to nanoseconds.
    public static func nanoseconds(_ ticks: UInt64, timescale: UInt32) -> UInt64 {
        rescale(ticks, multiplier: 1_000_000_000, divisor: UInt64(timescale))
    }
}

// MARK: - Fragmenter

/// Turns access units, as they leave GStreamer, into fragments with contiguous decode times.
///
/// Times are rebased on a common origin: the first video keyframe's DTS (PTS when there is
/// no DTS) when the recording has video — everything before it is dropped — or the first
/// packet in an audio-only recording. `startOffset` (nanoseconds) is added to every track,
/// so an appended part continues where the recording ended. Each track holds back one
/// sample, whose duration is only known when the next one arrives.
///
/// ```swift
/// var fragmenter = FMP4Fragmenter(tracks: [video, audio], startOffset: appended.startOffset)
/// if let fragment = fragmenter.push(.init(trackID: 1, pts: pts, dts: dts, isKeyframe: key,
///                                          data: H264.lengthPrefixed(annexB: au))) {
///     try file.write(fragment)
/// }
/// if let last = fragmenter.flush() { try file.write(last) }
/// ```
public struct FMP4Fragmenter: Sendable {
    /// One access unit. Times are in nanoseconds on any common clock (e.g. GStreamer's
    /// buffer PTS/DTS). For H.264, `data` must already be length-prefixed.
    ///
    /// ```swift
    /// let unit = FMP4Fragmenter.AccessUnit(trackID: 2, pts: buffer.pts, isKeyframe: true,
    ///                                      data: opusPacket)
    /// ```
    public struct AccessUnit: Sendable, Equatable {
        public var trackID: UInt32
        public var pts: UInt64
        public var dts: UInt64?
        public var isKeyframe: Bool
        public var data: [UInt8]

        public init(trackID: UInt32, pts: UInt64, dts: UInt64? = nil, isKeyframe: Bool, data: [UInt8]) {
            self.trackID = trackID
            self.pts = pts
            self.dts = dts
            self.isKeyframe = isKeyframe
            self.data = data
        }
    }

    /// A sample whose duration is not known yet.
    struct Pending: Sendable {
        var decodeTime: UInt64
        var compositionOffset: Int32
        var isSync: Bool
        var data: [UInt8]
    }

    struct TrackState: Sendable {
        var track: FMP4Track
        var started = false
        var pending: Pending?
        var lastDecodeTime: UInt64?
        var lastDuration: UInt32?
        var completed: [FMP4Sample] = []
        var endDecodeTime: UInt64?
    }

    public let fragmentDuration: UInt64
    public let maxFragmentDuration: UInt64
    public let startOffset: UInt64
    /// Access units dropped: before the origin, before a track's first keyframe, or of an
    /// unknown track.
    public private(set) var droppedCount = 0

    var states: [TrackState]
    let primary: Int
    let hasVideo: Bool
    var origin: UInt64?
    var fragmentStart: UInt64 = 0
    var preroll: [AccessUnit] = []
    static let maxPreroll = 256

    /// - Parameters:
    ///   - startOffset: nanoseconds added to every decode time (the recording's end on append).
    ///   - fragmentDuration: cut at the first video keyframe (any packet when audio-only)
    ///     once the fragment is at least this long (nanoseconds).
    ///   - maxFragmentDuration: cut even without a keyframe once a fragment is this long,
    ///     so a stream with rare keyframes still reaches the disk regularly.
    public init(tracks: [FMP4Track], startOffset: UInt64 = 0,
                fragmentDuration: UInt64 = 1_000_000_000, maxFragmentDuration: UInt64 = 10_000_000_000) {
        states = tracks.map { TrackState(track: $0) }
        hasVideo = tracks.contains { $0.kind == .video }
        primary = tracks.firstIndex { $0.kind == .video } ?? 0
        self.startOffset = startOffset
        self.fragmentDuration = fragmentDuration
        self.maxFragmentDuration = max(maxFragmentDuration, fragmentDuration)
    }

    /// End of everything handed out or held as completed, in nanoseconds (0 before any).
    public var endNanoseconds: UInt64 {
        states.compactMap { state in
            state.endDecodeTime.map { FMP4Time.nanoseconds($0, timescale: state.track.timescale) }
        }.max() ?? 0
    }

    /// Adds one access unit; returns a fragment when this unit starts a new one.
    public mutating func push(_ unit: AccessUnit) -> FMP4Fragment? {
        guard let index = states.firstIndex(where: { $0.track.id == unit.trackID }) else {
            droppedCount += 1
            return nil
        }
        if origin == nil, hasVideo, states[index].track.kind == .audio {
            holdBeforeOrigin(unit)
            return nil
        }
        let fragment = add(unit, index: index)
        if origin != nil, !preroll.isEmpty { replayPreroll() }
        return fragment
    }

    /// Audio that arrives before the first video keyframe may still belong after it (same
    /// timestamp, network jitter): keep the latest few until the origin is known.
    mutating func holdBeforeOrigin(_ unit: AccessUnit) {
        preroll.append(unit)
        if preroll.count > Self.maxPreroll {
            preroll.removeFirst()
            droppedCount += 1
        }
    }

    /// Adds the held audio once the origin is known; units before it are dropped.
    /// Audio never cuts a fragment when there is video, so nothing is returned.
    mutating func replayPreroll() {
        let held = preroll
        preroll = []
        for unit in held {
            if let index = states.firstIndex(where: { $0.track.id == unit.trackID }) {
                _ = add(unit, index: index)
            }
        }
    }

    mutating func add(_ unit: AccessUnit, index: Int) -> FMP4Fragment? {
        guard let times = admit(unit, index: index) else {
            droppedCount += 1
            return nil
        }
        let timescale = states[index].track.timescale
        var decodeTime = FMP4Time.ticks(times.decode, timescale: timescale)
        if let last = states[index].lastDecodeTime, decodeTime <= last { decodeTime = saturatingAdd(last, 1) }
        let presentationTime = FMP4Time.ticks(times.presentation, timescale: timescale)
        let offset = Int64(clamping: presentationTime) - Int64(clamping: decodeTime)
        let startsPrimary = index == primary && states[index].pending == nil && states[index].completed.isEmpty
        completePending(index, nextDecodeTime: decodeTime)
        var fragment: FMP4Fragment?
        if index == primary, shouldCut(at: decodeTime, isKeyframe: unit.isKeyframe) {
            fragment = takeFragment()
        }
        if fragment != nil || startsPrimary { fragmentStart = decodeTime }
        states[index].pending = Pending(decodeTime: decodeTime, compositionOffset: Int32(clamping: offset),
                                        isSync: states[index].track.kind == .audio || unit.isKeyframe,
                                        data: unit.data)
        states[index].lastDecodeTime = decodeTime
        return fragment
    }

    /// Completes every held-back sample (with its track's previous duration, or 1/30 s for
    /// video and 20 ms for audio) and returns what is left as a last fragment.
    public mutating func flush() -> FMP4Fragment? {
        for index in states.indices {
            guard let pending = states[index].pending else { continue }
            let fallback = states[index].track.kind == .video ? 33_333_333 : 20_000_000
            let duration = states[index].lastDuration
                ?? UInt32(clamping: max(1, FMP4Time.ticks(UInt64(fallback), timescale: states[index].track.timescale)))
            completePending(index, nextDecodeTime: saturatingAdd(pending.decodeTime, UInt64(duration)))
        }
        return takeFragment()
    }

    /// Decides whether a unit is kept; returns its decode and presentation times relative to
    /// the origin plus `startOffset`, in nanoseconds.
    mutating func admit(_ unit: AccessUnit, index: Int) -> (decode: UInt64, presentation: UInt64)? {
        let kind = states[index].track.kind
        let decode = unit.dts ?? unit.pts
        if origin == nil {
            guard !hasVideo || (index == primary && unit.isKeyframe) else { return nil }
            origin = decode
        }
        guard let origin else { return nil }
        if kind == .video && !states[index].started {
            guard unit.isKeyframe else { return nil }
        }
        if kind == .audio && decode < origin { return nil }
        states[index].started = true
        return (rebase(decode, origin: origin), rebase(unit.pts, origin: origin))
    }

    /// `time - origin + startOffset`, clamped to 0 below and saturating above.
    func rebase(_ time: UInt64, origin: UInt64) -> UInt64 {
        let (value, overflow) = (time > origin ? time - origin : 0).addingReportingOverflow(startOffset)
        return overflow ? UInt64.max / 2 : value
    }

    var isFragmentEmpty: Bool { states.allSatisfy { $0.completed.isEmpty } }

    func shouldCut(at decodeTime: UInt64, isKeyframe: Bool) -> Bool {
        guard !isFragmentEmpty else { return false }
        let timescale = states[primary].track.timescale
        let elapsed = FMP4Time.nanoseconds(decodeTime &- min(decodeTime, fragmentStart), timescale: timescale)
        if elapsed >= maxFragmentDuration { return true }
        return (isKeyframe || !hasVideo) && elapsed >= fragmentDuration
    }

    mutating func completePending(_ index: Int, nextDecodeTime: UInt64) {
        guard let pending = states[index].pending else { return }
        let duration = UInt32(clamping: max(1, nextDecodeTime &- min(nextDecodeTime, pending.decodeTime)))
        states[index].completed.append(FMP4Sample(decodeTime: pending.decodeTime,
                                                  compositionOffset: pending.compositionOffset,
                                                  duration: duration, isSync: pending.isSync,
                                                  data: pending.data))
        let end = saturatingAdd(pending.decodeTime, UInt64(duration))
        states[index].lastDuration = duration
        states[index].pending = nil
        states[index].endDecodeTime = end
        // After a flush the next sample must not start before this one ends.
        states[index].lastDecodeTime = max(states[index].lastDecodeTime ?? 0, end - 1)
    }

    /// `a + b`, stopping at `UInt64.max` (only reachable with absurd timestamps or timescales).
    func saturatingAdd(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : sum
    }

    mutating func takeFragment() -> FMP4Fragment? {
        let runs = states.indices.compactMap { index -> FMP4TrackRun? in
            guard !states[index].completed.isEmpty else { return nil }
            defer { states[index].completed = [] }
            return FMP4TrackRun(trackID: states[index].track.id, samples: states[index].completed)
        }
        return runs.isEmpty ? nil : FMP4Fragment(runs: runs)
    }
}

// MARK: - H.264 Annex-B

/// H.264 byte-stream helpers.
///
/// ```swift
/// let sample = H264.lengthPrefixed(annexB: au)       // 00 00 00 01 67 ... → 00 00 00 0c 67 ...
/// let sets = H264.parameterSets(annexB: au)          // sets.sps, sets.pps
/// ```
public enum H264 {
    /// The first SPS and PPS of an access unit, without start codes.
    ///
    /// ```swift
    /// if let sps = sets.sps, let pps = sets.pps { codec = .h264(width: w, height: h, sps: sps, pps: pps) }
    /// ```
    public struct ParameterSets: Sendable, Equatable {
        public var sps: [UInt8]?
        public var pps: [UInt8]?
    }

    /// The NAL units of an Annex-B access unit (start codes `00 00 01` or `00 00 00 01`),
    /// without start codes or trailing zero bytes. Bytes before the first start code are ignored.
    public static func nalUnits(annexB data: [UInt8]) -> [ArraySlice<UInt8>] {
        var units: [ArraySlice<UInt8>] = []
        var start: Int?
        var i = 0
        while i + 2 < data.count {
            if data[i] == 0, data[i + 1] == 0, data[i + 2] == 1 {
                if let s = start { appendTrimmed(data[s..<i], to: &units) }
                i += 3
                start = i
            } else {
                i += 1
            }
        }
        if let s = start, s < data.count { appendTrimmed(data[s..<data.count], to: &units) }
        return units
    }

    private static func appendTrimmed(_ unit: ArraySlice<UInt8>, to units: inout [ArraySlice<UInt8>]) {
        var end = unit.endIndex
        while end > unit.startIndex, unit[end - 1] == 0 { end -= 1 }
        if end > unit.startIndex { units.append(unit[unit.startIndex..<end]) }
    }

    /// An Annex-B access unit as NAL units each prefixed with its 4-byte big-endian length.
    public static func lengthPrefixed(annexB data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(data.count + 16)
        for unit in nalUnits(annexB: data) {
            let n = UInt32(unit.count)
            out.append(contentsOf: [UInt8(n >> 24), UInt8((n >> 16) & 0xFF), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)])
            out.append(contentsOf: unit)
        }
        return out
    }

    /// The NAL unit type (low 5 bits of the first byte), or nil for an empty unit.
    public static func nalType(_ unit: ArraySlice<UInt8>) -> UInt8? {
        unit.first.map { $0 & 0x1F }
    }

    /// The first SPS (type 7) and PPS (type 8) of an Annex-B access unit.
    public static func parameterSets(annexB data: [UInt8]) -> ParameterSets {
        var sets = ParameterSets()
        for unit in nalUnits(annexB: data) {
            switch nalType(unit) {
            case 7 where sets.sps == nil: sets.sps = Array(unit)
            case 8 where sets.pps == nil: sets.pps = Array(unit)
            default: break
            }
        }
        return sets
    }

    /// Whether an Annex-B access unit contains an IDR slice (type 5).
    public static func containsIDR(annexB data: [UInt8]) -> Bool {
        nalUnits(annexB: data).contains { nalType($0) == 5 }
    }
}
