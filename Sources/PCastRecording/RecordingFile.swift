// The file layer of a crash-safe fragmented-MP4 recording: creates or reopens the file,
// truncates a torn tail, appends whole fragments with one write + fdatasync each, and keeps
// the movie duration fields up to date in place. Uses only Foundation and Glibc.

import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Errors of `RecordingFile`.
///
/// ```swift
/// do { _ = try RecordingFile.append(path: p, tracks: t) }
/// catch .notARecording(_, let reason) { print("refusing to touch \(p): \(reason)") }
/// catch { print(error) }
/// ```
public enum RecordingFileError: Error, Sendable, Equatable {
    /// `open` failed.
    case cannotOpen(path: String, errno: Int32, message: String)
    /// Another writer holds the file's lock.
    case busy(path: String)
    /// The file exists but is not a fragmented MP4 this layer can append to; it is left as is.
    case notARecording(path: String, reason: FMP4Error)
    /// The tracks to append do not match the recording's (kind or timescale differ).
    case incompatibleTracks(String)
    /// A fragment names a track this writer does not write.
    case unknownTrack(UInt32)
    /// Tracks or samples that cannot be written (see the wrapped error).
    case invalidInput(FMP4Error)
    /// A system call failed.
    case io(operation: String, errno: Int32, message: String)
    /// The writer was closed.
    case closed
}

/// Things `RecordingFile.append` did or noticed that do not stop the append.
///
/// ```swift
/// for warning in appended.warnings { logger.warning("\(warning)") }
/// ```
public enum RecordingFileWarning: Sendable, Equatable {
    /// The recording has no track with this ID; the track is left out of the append.
    case trackNotInRecording(id: UInt32)
    /// The new part's video size differs from the sample entry (in-band SPS will carry it).
    case videoSizeChanged(id: UInt32, width: Int, height: Int)
    /// The new part's channel count differs from the sample entry.
    case channelCountChanged(id: UInt32, channels: Int)
    /// An incomplete last fragment (or trailing bytes) of this size was cut off.
    case truncatedTail(bytes: UInt64)
    /// There was no usable recording (missing file, or no complete `moov`): a new one was started.
    case startedNewRecording(reason: String)
}

/// A recording being written: `ftyp` + `moov`, then one `moof` + `mdat` per `write`.
/// Each fragment reaches the disk (fdatasync) before `write` returns, so a crash leaves a
/// file that plays up to the last complete fragment. Use from one thread or actor at a time.
///
/// ```swift
/// let file = try RecordingFile.create(path: "/rec/a.mp4", tracks: [video, audio])
/// var fragmenter = FMP4Fragmenter(tracks: file.tracks)
/// for unit in units { if let f = fragmenter.push(unit) { try file.write(f) } }
/// if let f = fragmenter.flush() { try file.write(f) }
/// try file.close()
/// ```
public final class RecordingFile {
    /// The result of `append`: the writer, where the new part starts, and what was noticed.
    ///
    /// ```swift
    /// let appended = try RecordingFile.append(path: p, tracks: tracks)
    /// var fragmenter = FMP4Fragmenter(tracks: appended.file.tracks,
    ///                                 startOffset: appended.startOffset)
    /// ```
    public struct Appended {
        public let file: RecordingFile
        /// The recording's end in nanoseconds: the fragmenter's `startOffset` for the new part.
        public let startOffset: UInt64
        public let warnings: [RecordingFileWarning]
    }

    public let path: String
    /// The tracks this writer accepts fragments for (on append: those the file has).
    public let tracks: [FMP4Track]
    /// Bytes written by this writer (init segment included when it wrote one).
    public private(set) var bytesWritten: UInt64 = 0
    /// Current length of the file.
    public private(set) var fileSize: UInt64
    /// Fragments written by this writer.
    public private(set) var fragmentsWritten = 0

    private var descriptor: Int32
    private var nextSequence: UInt32
    private var trackEnds: [UInt32: UInt64]
    private let timescales: [UInt32: UInt32]
    private let movieTimescale: UInt32
    private let durationFields: [FMP4DurationField]

    private init(path: String, descriptor: Int32, tracks: [FMP4Track], layout: Layout) {
        self.path = path
        self.descriptor = descriptor
        self.tracks = tracks
        self.fileSize = layout.fileSize
        self.nextSequence = layout.nextSequence
        self.trackEnds = layout.trackEnds
        self.timescales = layout.timescales
        self.movieTimescale = layout.movieTimescale
        self.durationFields = layout.durationFields
    }

    deinit {
        if descriptor >= 0 { Glibc.close(descriptor) }
    }

    /// What the writer needs to know about the file it continues.
    private struct Layout {
        var fileSize: UInt64
        var nextSequence: UInt32
        var trackEnds: [UInt32: UInt64]
        var timescales: [UInt32: UInt32]
        var movieTimescale: UInt32
        var durationFields: [FMP4DurationField]
    }

    /// The recording's duration in nanoseconds (latest end over all tracks of the file).
    public var durationNanoseconds: UInt64 {
        trackEnds.map { FMP4Time.nanoseconds($0.value, timescale: timescales[$0.key] ?? 1) }.max() ?? 0
    }

    /// The recording's duration.
    public var duration: Duration { .nanoseconds(Int64(clamping: durationNanoseconds)) }

    // MARK: Opening

    /// Creates the recording at `path`, replacing any file of that name ("record").
    public static func create(path: String, tracks: [FMP4Track]) throws(RecordingFileError) -> RecordingFile {
        let descriptor = try openLocked(path, flags: O_RDWR | O_CREAT)
        do {
            return try startNew(path: path, descriptor: descriptor, tracks: tracks)
        } catch {
            Glibc.close(descriptor)
            throw error
        }
    }

    /// Reopens the recording at `path` to continue it ("append"): cuts off an incomplete
    /// last fragment, checks that `tracks` match the file's (by ID: same codec family and
    /// timescale; a track the file lacks is dropped with a warning), and returns the writer
    /// with the recording's end as the start offset for the new part.
    ///
    /// A missing file, an empty one, or one without a complete `moov` (a crash while the
    /// init segment was written: it held no media) is started anew, like `create`.
    /// Anything else that is not a fragmented MP4 throws `notARecording` and is left untouched.
    public static func append(path: String, tracks: [FMP4Track]) throws(RecordingFileError) -> Appended {
        let descriptor: Int32
        do {
            descriptor = try openLocked(path, flags: O_RDWR)
        } catch .cannotOpen(_, ENOENT, _) {
            let file = try create(path: path, tracks: tracks)
            return Appended(file: file, startOffset: 0, warnings: [.startedNewRecording(reason: "no such file")])
        }
        do {
            return try reopen(path: path, descriptor: descriptor, tracks: tracks)
        } catch {
            Glibc.close(descriptor)
            throw error
        }
    }

    private static func reopen(path: String, descriptor: Int32,
                               tracks: [FMP4Track]) throws(RecordingFileError) -> Appended {
        let size = try fileLength(descriptor)
        let scan: FMP4Scan
        do {
            scan = try FMP4.scan(length: size) { offset, count in readAt(descriptor, offset, count) }
        } catch {
            throw .notARecording(path: path, reason: error)
        }
        guard scan.hasMovie else {
            let file = try startNew(path: path, descriptor: descriptor, tracks: tracks)
            return Appended(file: file, startOffset: 0,
                            warnings: [.startedNewRecording(reason: "no complete moov")])
        }
        var (accepted, warnings) = try match(tracks, against: scan.tracks)
        if scan.completeEnd < size {
            try check(ftruncate(descriptor, off_t(scan.completeEnd)), "ftruncate")
            warnings.append(.truncatedTail(bytes: size - scan.completeEnd))
        }
        let layout = Layout(fileSize: scan.completeEnd, nextSequence: (scan.lastSequence ?? 0) &+ 1,
                            trackEnds: scan.trackEnds,
                            timescales: Dictionary(scan.tracks.map { ($0.id, $0.timescale) }) { a, _ in a },
                            movieTimescale: scan.movieTimescale,
                            durationFields: [scan.mvhdDuration, scan.mehdDuration].compactMap { $0 })
        let file = RecordingFile(path: path, descriptor: descriptor, tracks: accepted, layout: layout)
        do {
            try file.updateDuration()  // the tail that was cut may have been counted already
            try check(fdatasync(descriptor), "fdatasync")
        } catch {
            file.descriptor = -1  // still owned by the caller, which closes it
            throw error
        }
        return Appended(file: file, startOffset: scan.endNanoseconds, warnings: warnings)
    }

    /// Empties the open file and writes a fresh init segment.
    private static func startNew(path: String, descriptor: Int32,
                                 tracks: [FMP4Track]) throws(RecordingFileError) -> RecordingFile {
        let segment: FMP4.InitSegment
        do {
            segment = try FMP4.initSegment(tracks: tracks)
        } catch {
            throw .invalidInput(error)
        }
        try check(ftruncate(descriptor, 0), "ftruncate")
        try writeAll(descriptor, segment.bytes, at: 0)
        try check(fdatasync(descriptor), "fdatasync")
        syncDirectory(of: path)
        let layout = Layout(
            fileSize: UInt64(segment.bytes.count), nextSequence: 1,
            trackEnds: Dictionary(tracks.map { ($0.id, 0) }) { a, _ in a },
            timescales: Dictionary(tracks.map { ($0.id, $0.timescale) }) { a, _ in a },
            movieTimescale: FMP4.movieTimescale,
            durationFields: [FMP4DurationField(offset: UInt64(segment.mvhdDurationOffset), byteCount: 8),
                             FMP4DurationField(offset: UInt64(segment.mehdDurationOffset), byteCount: 8)])
        let file = RecordingFile(path: path, descriptor: descriptor, tracks: tracks, layout: layout)
        file.bytesWritten = UInt64(segment.bytes.count)
        return file
    }

    /// Pairs the requested tracks with the file's by ID.
    static func match(_ tracks: [FMP4Track],
                      against scanned: [FMP4ScannedTrack]) throws(RecordingFileError) -> ([FMP4Track], [RecordingFileWarning]) {
        var accepted: [FMP4Track] = []
        var warnings: [RecordingFileWarning] = []
        for track in tracks {
            guard let existing = scanned.first(where: { $0.id == track.id }) else {
                warnings.append(.trackNotInRecording(id: track.id))
                continue
            }
            guard existing.codecKind == track.codecKind, existing.timescale == track.timescale else {
                throw .incompatibleTracks("track \(track.id): recording has \(existing.sampleEntry) at "
                    + "\(existing.timescale) Hz, new part has \(track.codecKind) at \(track.timescale) Hz")
            }
            if let (width, height) = track.pictureSize, width != existing.width || height != existing.height {
                warnings.append(.videoSizeChanged(id: track.id, width: width, height: height))
            }
            switch track.codec {
            case let .opus(channels, _, _) where channels != existing.channels:
                warnings.append(.channelCountChanged(id: track.id, channels: channels))
            default:
                break
            }
            accepted.append(track)
        }
        guard !accepted.isEmpty else {
            throw .incompatibleTracks("none of the tracks \(tracks.map(\.id)) is in the recording")
        }
        return (accepted, warnings)
    }

    // MARK: Writing

    /// Appends one fragment (`moof` + `mdat`) and makes it durable before returning:
    ///
    /// 1. stage: one write of the whole fragment with its `moof` typed `free`, then fdatasync.
    ///    A write torn here (crash, power loss) leaves a `free` box that every player skips:
    ///    FFmpeg refuses a whole file whose last `moof` is cut inside its body.
    /// 2. commit: overwrite those 4 type bytes with `moof` (one sector), then fdatasync.
    /// 3. update the `mvhd` and `mehd` durations in place (synced with the next fragment or
    ///    on close; until then players may see the previous duration).
    ///
    /// Empty fragments are ignored. On a failed write the file is cut back to its previous length.
    public func write(_ fragment: FMP4Fragment) throws(RecordingFileError) {
        guard descriptor >= 0 else { throw .closed }
        let runs = fragment.runs.filter { !$0.samples.isEmpty }
        guard !runs.isEmpty else { return }
        try checkContinuity(runs)
        var bytes: [UInt8]
        do {
            bytes = try FMP4.fragment(sequence: nextSequence, runs: runs)
        } catch {
            throw .invalidInput(error)
        }
        bytes.replaceSubrange(4..<8, with: Self.stagedType)
        do {
            try Self.writeAll(descriptor, bytes, at: fileSize)
            try Self.check(fdatasync(descriptor), "fdatasync")
            try Self.writeAll(descriptor, Self.committedType, at: fileSize + 4)
            try Self.check(fdatasync(descriptor), "fdatasync")
        } catch {
            _ = ftruncate(descriptor, off_t(fileSize))
            throw error
        }
        fileSize += UInt64(bytes.count)
        bytesWritten += UInt64(bytes.count)
        fragmentsWritten += 1
        nextSequence &+= 1
        for run in runs { trackEnds[run.trackID] = run.endDecodeTime }
        try updateDuration()
    }

    /// The type a fragment's `moof` has while it is being written, and once it is complete.
    static let stagedType = Array("free".utf8)
    static let committedType = Array("moof".utf8)

    /// Appends the samples of `runs` as one fragment. See `write(_:)`.
    public func write(runs: [FMP4TrackRun]) throws(RecordingFileError) {
        try write(FMP4Fragment(runs: runs))
    }

    /// Rejects runs for tracks this writer does not write, or that start before the track's end.
    private func checkContinuity(_ runs: [FMP4TrackRun]) throws(RecordingFileError) {
        for run in runs {
            guard tracks.contains(where: { $0.id == run.trackID }) else { throw .unknownTrack(run.trackID) }
            let end = trackEnds[run.trackID] ?? 0
            if let first = run.samples.first, first.decodeTime < end {
                throw .invalidInput(.invalidSample(trackID: run.trackID,
                                                   reason: "decode time \(first.decodeTime) is before the track's end \(end)"))
            }
        }
    }

    /// Writes the current duration into `mvhd` and `mehd`, in the movie timescale.
    private func updateDuration() throws(RecordingFileError) {
        let value = trackEnds.map { id, end in
            FMP4Time.rescale(end, multiplier: UInt64(movieTimescale), divisor: UInt64(timescales[id] ?? 1))
        }.max() ?? 0
        for field in durationFields {
            let stored = field.byteCount == 8 ? value : UInt64(UInt32(clamping: value))
            let bytes = Self.bigEndian(stored, byteCount: field.byteCount)
            try Self.writeAll(descriptor, bytes, at: field.offset)
        }
    }

    private static func bigEndian(_ value: UInt64, byteCount: Int) -> [UInt8] {
        (0..<byteCount).map { index -> UInt8 in
            let shift = UInt64(8 * (byteCount - 1 - index))
            return UInt8(truncatingIfNeeded: value >> shift)
        }
    }

    /// Syncs the last duration update and closes the file.
    public func close() throws(RecordingFileError) {
        guard descriptor >= 0 else { return }
        let synced = fdatasync(descriptor)
        let syncError = errno
        let closed = Glibc.close(descriptor)
        descriptor = -1
        if synced != 0 { throw .io(operation: "fdatasync", errno: syncError, message: Self.describe(syncError)) }
        try Self.check(closed, "close")
    }

    // MARK: System calls

    private static func openLocked(_ path: String, flags: Int32) throws(RecordingFileError) -> Int32 {
        let descriptor = Glibc.open(path, flags | O_CLOEXEC, mode_t(0o644))
        guard descriptor >= 0 else {
            let code = errno
            throw .cannotOpen(path: path, errno: code, message: describe(code))
        }
        do {
            try lock(descriptor, path: path)
        } catch {
            Glibc.close(descriptor)
            throw error
        }
        return descriptor
    }

    /// Takes the exclusive lock that keeps two writers off one file. A lock can outlive its
    /// writer for a moment: a process forked by another thread holds a copy of the descriptor
    /// until it execs (O_CLOEXEC). So "busy" is only reported after trying for ~0.25 s.
    private static func lock(_ descriptor: Int32, path: String) throws(RecordingFileError) {
        for attempt in 0..<25 {
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return }
            let code = errno
            guard code == EWOULDBLOCK || code == EINTR else {
                throw .io(operation: "flock", errno: code, message: describe(code))
            }
            if attempt < 24 { usleep(10_000) }
        }
        throw .busy(path: path)
    }

    private static func fileLength(_ descriptor: Int32) throws(RecordingFileError) -> UInt64 {
        var info = stat()
        try check(fstat(descriptor, &info), "fstat")
        return UInt64(max(0, info.st_size))
    }

    /// pread of up to `count` bytes; fewer only at end of file or on error.
    private static func readAt(_ descriptor: Int32, _ offset: UInt64, _ count: Int) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = buffer.withUnsafeMutableBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return pread(descriptor, base + done, count - done, off_t(offset) + off_t(done))
            }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            done += n
        }
        return Array(buffer.prefix(done))
    }

    private static func writeAll(_ descriptor: Int32, _ bytes: [UInt8], at offset: UInt64) throws(RecordingFileError) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return pwrite(descriptor, base + done, bytes.count - done, off_t(offset) + off_t(done))
            }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else {
                let code = n == 0 ? EIO : errno
                throw .io(operation: "pwrite", errno: code, message: describe(code))
            }
            done += n
        }
    }

    private static func check(_ result: Int32, _ operation: String) throws(RecordingFileError) {
        guard result == 0 else {
            let code = errno
            throw .io(operation: operation, errno: code, message: describe(code))
        }
    }

    /// Makes a newly created file's directory entry durable; best effort.
    private static func syncDirectory(of path: String) {
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        let descriptor = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = fsync(descriptor)
        Glibc.close(descriptor)
    }

    private static func describe(_ code: Int32) -> String { String(cString: strerror(code)) }
}
