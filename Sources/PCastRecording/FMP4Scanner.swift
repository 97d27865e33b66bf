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
