import Dispatch
import Foundation
import GStreamer
import Logging
import PCastProtocol
import PCastRecording

/// How a recording starts: a new file, or the continuation of an existing one.
public enum RecordingMode: String, Sendable, Hashable {
    /// A new recording, replacing a file of that name.
    case record
    /// Continue the recording after its end, as if there had been no interruption (a missing file
    /// starts a new one).
    case append
}

/// What a recording wrote.
public struct RecordingSummary: Sendable, Hashable {
    public var path: String
    /// The whole recording, earlier parts included.
    public var duration: Duration
    /// What this recorder added.
    public var partDuration: Duration
    /// Where this part starts in the recording (zero for `.record`).
    public var startOffset: Duration
    /// The file's size.
    public var bytes: Int
    /// Fragments this recorder wrote.
    public var fragments: Int
    /// Why the recording stopped early or wrote nothing (a file that could not be opened, a disk
    /// error, an existing file that is not a recording); nil when all went well.
    public var failure: String?
}

/// Takes what a recorder cuts, in memory, instead of a file (live HLS packaging). Called on the
/// recorder's queue, in order; `end()` once, after the last fragment.
package protocol FragmentConsumer: AnyObject, Sendable {
    /// The tracks are known (fragments for them follow); false refuses them, and nothing follows.
    func begin(tracks: [FMP4Track]) -> Bool
    func consume(_ fragment: FMP4Fragment)
    /// The recorder finished: the stream ended or the recording was stopped.
    func end()
}

/// Writes depayloaded H.264 access units, VP9 frames or AV1 temporal units and Opus packets into a fragmented MP4 file as they
/// arrive (see ``FMP4``): one fragment (about a second, cut at keyframes) at a time, each written
/// whole and synced before the file's duration is updated, so a crash loses at most the fragment
/// being gathered and the file stays playable. `.append` continues an existing recording after
/// its end (a torn last fragment is cut off first).
///
/// The file declares only tracks that carry media, because a player waits forever for a track that
/// is declared but empty. Media is held (bounded) until each attached kind has delivered
/// usable media: video from its first keyframe with what declares its track (H.264's SPS/PPS,
/// AV1's sequence header; the parser's caps give the size), and audio at or after that keyframe. A kind that stays silent for ``trackGrace`` after the
/// other started is left out of the file; video that never starts is given up after
/// ``videoGrace``. Video before its first keyframe is dropped. All file work happens on the
/// recorder's own queue, never on the caller's thread.
///
/// ```swift
/// let recorder = MediaRecorder(path: "/data/recordings/show.mp4", mode: .append)
/// let (receiver, stream) = try await RTPReceiver.startRecording(tracks: tracks, into: recorder) { rtcp in socket.send(rtcp) }
/// …
/// let summary = await recorder.finish()
/// ```
/// Unchecked: its mutable state is touched on `queue` only; the rest are lets.
public final class MediaRecorder: @unchecked Sendable {
    public let path: String
    public let mode: RecordingMode
    /// Target fragment length (fragments are cut at the first video keyframe after it).
    public let fragmentDuration: Duration
    private let queue = DispatchQueue(label: "pcast.recorder")
    static let logger = SDKLog.logger("pcast.recorder")

    // State below is touched on `queue` only.
    private var kinds: Set<MediaType> = []
    private var file: RecordingFile?
    private var fragmenter: FMP4Fragmenter?
    private var startOffset: Duration = .zero
    private var fragments = 0
    private var failure: String?
    private var finished: RecordingSummary?
    private var videoFormat: (width: Int, height: Int)?
    /// Units held until the file's tracks are known.
    private var held: [Unit] = []
    /// The first video keyframe a track can be declared from (its time, its codec's configuration).
    private var keyframe: (time: Duration, arrival: ContinuousClock.Instant, configuration: RecordedVideo)?
    /// Arrival of the first audio unit that will be kept (at or after the keyframe, when there is video).
    private var firstAudio: ContinuousClock.Instant?
    private var firstArrival: ContinuousClock.Instant?

    /// How long a kind may stay silent (by arrival, not media time) after the other has started
    /// before the file is opened without it.
    public static let trackGrace: Duration = .milliseconds(1500)
    /// How long audio may flow without a video keyframe before the file is opened audio-only.
    public static let videoGrace: Duration = .seconds(10)
    /// At most this many units are held before the file is opened (about 10 s of 25 fps video and
    /// 20 ms audio).
    static let maximumHeld = 800

    private struct Unit {
        var kind: MediaType
        /// The caps' media type (`video/x-h264`, `video/x-vp9`, `video/x-av1`, `audio/x-opus`).
        var format: String
        var bytes: [UInt8]
        var time: Duration
        var dts: Duration?
        var keyframe: Bool
        var arrival: ContinuousClock.Instant
    }

    public init(path: String, mode: RecordingMode, fragmentDuration: Duration = .seconds(1)) {
        self.path = path
        self.mode = mode
        self.fragmentDuration = fragmentDuration
        consumer = nil
    }

    /// Hands the fragments to `consumer` in memory instead of writing a file (live packaging):
    /// fragments are cut at every video keyframe and at most `fragmentDuration` long (audio alone:
    /// every `fragmentDuration`), and never written anywhere.
    package init(consumer: any FragmentConsumer, fragmentDuration: Duration) {
        path = "(memory)"
        mode = .record
        self.fragmentDuration = fragmentDuration
        self.consumer = consumer
    }

    /// Where the fragments go when not to a file.
    private let consumer: (any FragmentConsumer)?

    static let videoTrack: UInt32 = 1
    static let audioTrack: UInt32 = 2

    /// Feeds the recorder from an appsink carrying H.264 access units (byte-stream), VP9 frames,
    /// AV1 temporal units (low-overhead format) or Opus packets.
    func attach(_ sink: AppSink, kind: MediaType) throws(GStreamerError) {
        queue.sync { _ = kinds.insert(kind) }
        sink.onSample { [weak self] sample in
            guard let self else { return }
            let buffer = sample.buffer
            let bytes = buffer.bytes
            // Running time: the branches' elements may stamp buffers on different bases.
            let pts = sample.presentationRunningTime, dts = sample.decodingRunningTime
            let keyframe = buffer.isKeyframe
            var size: (Int, Int)?
            if kind == .video, keyframe, let structure = sample.caps?.structures.first,
               case .int(let width)? = structure["width"], case .int(let height)? = structure["height"] {
                size = (Int(width), Int(height))
            }
            let videoSize = size
            let format = sample.caps?.structures.first?.name ?? ""
            self.queue.async { self.consume(kind, format: format, bytes: bytes, pts: pts, dts: dts, keyframe: keyframe, size: videoSize) }
        }
    }

    /// Writes what is gathered, closes the file and reports. Later calls return the same summary.
    public func finish() async -> RecordingSummary {
        await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: self.finishNow()) }
        }
    }

    // MARK: On the queue

    private func consume(_ kind: MediaType, format: String, bytes: [UInt8], pts: Duration?, dts: Duration?, keyframe: Bool, size: (Int, Int)?) {
        guard finished == nil, failure == nil, let time = pts ?? dts else { return }
        if kind == .video, let size { videoFormat = (size.0, size.1) }
        let unit = Unit(kind: kind, format: format, bytes: bytes, time: time, dts: dts, keyframe: keyframe, arrival: .now)
        guard fragmenter == nil else {
            push(unit)
            return
        }
        hold(unit)
        if let tracks = tracksIfKnown(now: unit.arrival) { open(tracks) }
    }

    /// Keeps a unit until the tracks are known, noting the first keyframe and the first usable audio.
    private func hold(_ unit: Unit) {
        firstArrival = firstArrival ?? unit.arrival
        if unit.kind == .video, keyframe == nil, unit.keyframe {
            if let configuration = RecordedVideo(keyframe: unit.bytes, format: unit.format) {
                keyframe = (unit.dts ?? unit.time, unit.arrival, configuration)
                // Audio held from before the keyframe is of no use (the recording starts there).
                firstAudio = held.first { $0.kind == .audio && $0.time >= unit.dts ?? unit.time }?.arrival
            }
        }
        if unit.kind == .audio, firstAudio == nil, !kinds.contains(.video) || keyframe.map({ unit.time >= $0.time }) == true {
            firstAudio = unit.arrival
        }
        held.append(unit)
        if held.count > Self.maximumHeld { held.removeFirst() }
    }

    /// The tracks to declare, once every attached kind has started or the graces have run out.
    private func tracksIfKnown(now: ContinuousClock.Instant) -> [FMP4Track]? {
        let wantsVideo = kinds.contains(.video), wantsAudio = kinds.contains(.audio)
        let videoReady = keyframe != nil, audioReady = firstAudio != nil
        if (!wantsVideo || videoReady) && (!wantsAudio || audioReady) {
            return tracks(video: wantsVideo, audio: wantsAudio)
        }
        if wantsVideo, let keyframe, now - keyframe.arrival >= Self.trackGrace {
            Self.logger.notice("no audio reached the recording: recording video only", metadata: ["pcast.path": .string(path)])
            return tracks(video: true, audio: false)
        }
        if wantsAudio, let firstAudio, !videoReady, now - firstAudio >= Self.videoGrace {
            Self.logger.notice("no video keyframe reached the recording: recording audio only", metadata: ["pcast.path": .string(path)])
            return tracks(video: false, audio: true)
        }
        if held.count >= Self.maximumHeld, let firstArrival, now - firstArrival >= Self.trackGrace {
            return tracks(video: videoReady, audio: audioReady)
        }
        return nil
    }

    private func tracks(video: Bool, audio: Bool) -> [FMP4Track] {
        var tracks: [FMP4Track] = []
        if video, let keyframe {
            tracks.append(FMP4Track(id: Self.videoTrack, timescale: 90_000, codec: keyframe.configuration.codec(size: videoFormat)))
        }
        if audio, firstAudio != nil {
            // Opus over RTP is always described as stereo at 48 kHz; the recording starts mid-stream,
            // long after the encoder's own pre-skip.
            tracks.append(FMP4Track(id: Self.audioTrack, timescale: 48_000, codec: .opus(channels: 2, sampleRate: 48_000, preSkip: 0)))
        }
        return tracks
    }

    /// Opens the file with `tracks` and writes what was held.
    private func open(_ tracks: [FMP4Track]) {
        let units = held
        held = []
        guard !tracks.isEmpty else { return }
        if let consumer {
            guard consumer.begin(tracks: tracks) else {
                failure = "the consumer refused the tracks"
                return
            }
            let cut = Self.nanoseconds(fragmentDuration)
            fragmenter = FMP4Fragmenter(tracks: tracks, fragmentDuration: tracks.contains { $0.kind == .video } ? 0 : cut, maxFragmentDuration: cut)
            for unit in units { push(unit) }
            return
        }
        do throws(RecordingFileError) {
            switch mode {
            case .record:
                file = try RecordingFile.create(path: path, tracks: tracks)
                startOffset = .zero
            case .append:
                let appended = try RecordingFile.append(path: path, tracks: tracks)
                file = appended.file
                startOffset = .nanoseconds(Int64(clamping: appended.startOffset))
                for warning in appended.warnings {
                    Self.logger.notice("appending: \(warning)", metadata: ["pcast.path": .string(path)])
                }
            }
        } catch {
            failure = "\(error)"
            Self.logger.error("recording not opened: \(error)", metadata: ["pcast.path": .string(path)])
            return
        }
        fragmenter = FMP4Fragmenter(tracks: file?.tracks ?? tracks, startOffset: Self.nanoseconds(startOffset),
                                    fragmentDuration: Self.nanoseconds(fragmentDuration))
        for unit in units { push(unit) }
    }

    private func push(_ unit: Unit) {
        guard failure == nil, fragmenter != nil else { return }
        let track = unit.kind == .video ? Self.videoTrack : Self.audioTrack
        let fragmenterUnit = FMP4Fragmenter.AccessUnit(
            trackID: track, pts: Self.nanoseconds(unit.time), dts: unit.dts.map(Self.nanoseconds),
            isKeyframe: unit.kind == .audio || unit.keyframe,
            data: unit.kind == .video ? RecordedVideo.sample(unit.bytes, format: unit.format, declared: mode == .append ? nil : keyframe?.configuration) : unit.bytes)
        if let fragment = fragmenter?.push(fragmenterUnit) { write(fragment) }
    }

    private static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        return UInt64(seconds) &* 1_000_000_000 &+ UInt64(attoseconds / 1_000_000_000)
    }

    private func write(_ fragment: FMP4Fragment) {
        if let consumer {
            consumer.consume(fragment)
            fragments += 1
            return
        }
        guard let file else { return }
        do throws(RecordingFileError) {
            try file.write(fragment)
            fragments += 1
        } catch {
            failure = "\(error)"
            Self.logger.error("recording stopped: \(error)", metadata: ["pcast.path": .string(path)])
        }
    }

    private func finishNow() -> RecordingSummary {
        if let finished { return finished }
        // A stream shorter than the graces: record what it had.
        if fragmenter == nil, failure == nil, !held.isEmpty {
            open(tracks(video: keyframe != nil, audio: firstAudio != nil))
        }
        if failure == nil, let fragment = fragmenter?.flush() { write(fragment) }
        if let dropped = fragmenter?.droppedCount, dropped > 0 {
            Self.logger.info("units left out of the recording", metadata: ["pcast.path": .string(path), "pcast.dropped": .stringConvertible(dropped)])
        }
        consumer?.end()
        let duration = file?.duration ?? .nanoseconds(Int64(clamping: fragmenter?.endNanoseconds ?? 0))
        let bytes = Int(clamping: file?.fileSize ?? 0)
        do throws(RecordingFileError) {
            try file?.close()
        } catch {
            if failure == nil { failure = "\(error)" }
        }
        file = nil
        let summary = RecordingSummary(
            path: path, duration: duration, partDuration: max(.zero, duration - startOffset), startOffset: startOffset, bytes: bytes,
            fragments: fragments, failure: failure ?? (fragments == 0 ? "no media was recorded" : nil))
        finished = summary
        return summary
    }

    /// The duration a recording's header states (nil when the file is missing or not a recording).
    public static func duration(ofRecordingAt path: String) -> Duration? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let length = try? handle.seekToEnd() else { return nil }
        let scan = try? FMP4.scan(length: length) { offset, count in
            try? handle.seek(toOffset: offset)
            return [UInt8]((try? handle.read(upToCount: count)) ?? Data())
        }
        guard let scan, scan.hasMovie else { return nil }
        return .nanoseconds(Int64(clamping: scan.endNanoseconds))
    }
}

/// What a recording needs of a video codec to declare its track, found in the first keyframe:
/// H.264's parameter sets, nothing more for VP9 (profile 0: what the relay forwards), AV1's
/// sequence header, H.265's parameter sets read into its configuration.
enum RecordedVideo: Sendable {
    case h264(sps: [UInt8], pps: [UInt8])
    /// With the largest size its keyframe's frames state: a scalable picture's superframe holds
    /// every spatial layer, and the parser's caps state the first (the smallest).
    case vp9(largest: (width: Int, height: Int)?)
    case av1(AV1SequenceHeader, obu: [UInt8])
    case h265(H265Configuration)

    /// From a keyframe of the caps' media type `format`; nil when it lacks what is needed.
    init?(keyframe bytes: [UInt8], format: String) {
        switch format {
        case "video/x-vp9":
            let sizes = VP9Superframe.frames(in: bytes).compactMap(VP9Superframe.frameSize)
            self = .vp9(largest: sizes.max { $0.width * $0.height < $1.width * $1.height })
        case "video/x-h265":
            guard let sets = H265Configuration.parameterSets(in: H264.nalUnits(annexB: bytes)),
                  let configuration = try? H265Configuration(vps: sets.vps, sps: sets.sps, pps: sets.pps) else { return nil }
            self = .h265(configuration)
        case "video/x-av1":
            guard let header = (try? AV1Payload.obus(lowOverhead: bytes))?.first(where: { $0.type == AV1OBU.sequenceHeader }),
                  let parsed = try? AV1SequenceHeader(parsing: header.payload) else { return nil }
            self = .av1(parsed, obu: header.withSize)
        default:
            let sets = H264.parameterSets(annexB: bytes)
            guard let sps = sets.sps, let pps = sets.pps else { return nil }
            self = .h264(sps: sps, pps: pps)
        }
    }

    /// The track's codec, at the size the parser's caps stated (AV1: the sequence header's when they did not).
    func codec(size: (width: Int, height: Int)?) -> FMP4Track.Codec {
        let (width, height) = size ?? (0, 0)
        switch self {
        case .h264(let sps, let pps):
            return .h264(width: width, height: height, sps: sps, pps: pps)
        case .vp9(let largest):
            let (width, height) = largest ?? (width, height)
            return .vp9(width: width, height: height, level: FMP4Track.Codec.vp9Level(width: width, height: height, framesPerSecond: 30))
        case .av1(let header, let obu):
            return .av1(width: size?.width ?? header.maximumWidth, height: size?.height ?? header.maximumHeight,
                        configuration: header.configurationRecordHeader, sequenceHeader: obu)
        case .h265(let configuration):
            return .h265(width: configuration.width, height: configuration.height, configuration: configuration.record)
        }
    }

    /// A sample's bytes in the file: H.264 length-prefixed, VP9 as it came, AV1 without its
    /// temporal delimiter (the AV1 ISOBMFF binding keeps delimiters out of samples), H.265
    /// length-prefixed without the parameter sets `declared` holds (nil: all kept in band, for a
    /// part appended to a file whose sample entry may hold another encoder's).
    static func sample(_ bytes: [UInt8], format: String, declared: RecordedVideo?) -> [UInt8] {
        switch format {
        case "video/x-vp9":
            return bytes
        case "video/x-h265":
            guard case .h265(let configuration)? = declared else { return H264.lengthPrefixed(annexB: bytes) }
            return H264.lengthPrefixed(annexB: bytes, leavingOut: [configuration.vps, configuration.sps, configuration.pps])
        case "video/x-av1":
            guard let obus = try? AV1Payload.obus(lowOverhead: bytes) else { return bytes }
            return obus.filter { $0.type != AV1OBU.temporalDelimiter && $0.type != AV1OBU.padding }.flatMap(\.withSize)
        default:
            return H264.lengthPrefixed(annexB: bytes)
        }
    }
}
