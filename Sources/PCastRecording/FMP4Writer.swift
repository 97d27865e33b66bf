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
        if let (width, height) = codec.pictureSize, !(1...0xFFFF).contains(width) || !(1...0xFFFF).contains(height) {
            throw .invalidTrack(id: id, reason: "width/height must be 1...65535")
        }
        switch codec {
        case let .h264(_, _, sps, pps):
            guard sps.count >= 4, sps.count <= 0xFFFF else {
                throw .invalidTrack(id: id, reason: "SPS must be 4...65535 bytes")
            }
            guard !pps.isEmpty, pps.count <= 0xFFFF else {
                throw .invalidTrack(id: id, reason: "PPS must be 1...65535 bytes")
            }
        case .vp9:
            break
        case let .av1(_, _, configuration, sequenceHeader):
            guard configuration.count == 4, configuration[0] == 0x81 else {
                throw .invalidTrack(id: id, reason: "an AV1 configuration record starts with 4 bytes, marker and version 1")
            }
            guard sequenceHeader.count >= 3, (sequenceHeader[0] >> 3) & 0x0F == 1 else {
                throw .invalidTrack(id: id, reason: "the AV1 configuration OBU must be a sequence header")
            }
        case let .h265(_, _, configuration):
            // The fixed part (23 bytes, version 1) and at least one array (the codecs string reads the fixed part).
            guard configuration.count > 23, configuration[0] == 1 else {
                throw .invalidTrack(id: id, reason: "an H.265 configuration record starts with 23 bytes, version 1, and holds its parameter sets")
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
            if let (width, height) = track.pictureSize {
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

    /// The fields every visual sample entry starts with (ISO/IEC 14496-12 §12.1.3).
    static func writeVisualSampleEntryFields(_ w: inout ByteWriter, width: Int, height: Int) {
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
    }

    static func writeSampleEntry(_ w: inout ByteWriter, _ codec: FMP4Track.Codec) {
        switch codec {
        case let .vp9(width, height, level):
            w.box("vp09") { w in
                writeVisualSampleEntryFields(&w, width: width, height: height)
                w.fullBox("vpcC", version: 1, flags: 0) { w in
                    w.u8(0)  // profile 0
                    w.u8(level)
                    w.u8(8 << 4 | 0 << 1 | 0)  // bitDepth 8, chromaSubsampling 4:2:0 (vertical), limited range
                    w.u8(2)  // colour primaries: unspecified
                    w.u8(2)  // transfer characteristics: unspecified
                    w.u8(2)  // matrix coefficients: unspecified
                    w.u16(0)  // no codec initialization data (VP9 has none)
                }
            }
        case let .av1(width, height, configuration, sequenceHeader):
            w.box("av01") { w in
                writeVisualSampleEntryFields(&w, width: width, height: height)
                w.box("av1C") { w in
                    w.append(configuration)
                    w.append(sequenceHeader)
                }
            }
        case let .h265(width, height, configuration):
            w.box("hvc1") { w in
                writeVisualSampleEntryFields(&w, width: width, height: height)
                w.box("hvcC") { w in w.append(configuration) }
            }
        case let .h264(width, height, sps, pps):
            w.box("avc3") { w in
                writeVisualSampleEntryFields(&w, width: width, height: height)
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
