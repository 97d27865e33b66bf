import Foundation
import GStreamer
import Logging
import PCastProtocol
import Synchronization

/// What an ingest reads: a URI GStreamer can pull (http(s) mp4, rtmp, rtsp, file), or bytes
/// pushed in.
public enum IngestSource: Sendable, Hashable {
    case uri(String)
    /// FLV (what an RTMP push endpoint receives): H.264 passes through, AAC becomes Opus. With
    /// `video: .h265` the FLV carries the audio only and the H.265 comes as frames of its own
    /// (``IngestPublisher/pushH265(configuration:)``, ``IngestPublisher/pushH265(frame:decodingTime:compositionTime:isKeyframe:)``):
    /// GStreamer 1.22's FLV demuxer predates enhanced RTMP.
    case pushedFLV(video: VideoCodec)
    /// Streamable Matroska with H.264 and Opus (what `pcastsink` muxes encoded pads into): both
    /// pass through, nothing is decoded.
    case pushedMatroska

    /// Whether the bytes are pushed in (``IngestPublisher/push(_:)``) rather than pulled.
    public var isPushed: Bool {
        switch self {
        case .uri: return false
        case .pushedFLV, .pushedMatroska: return true
        }
    }

    /// The video codec a pushed source announces before any of it arrives.
    var pushedVideo: VideoCodec? {
        switch self {
        case .uri: return nil
        case .pushedFLV(let video): return video
        case .pushedMatroska: return .h264
        }
    }
}

/// How an ingest runs (the PCast iOS SDK's publish-remote options, plus the platform's limits).
public struct IngestOptions: Sendable, Hashable {
    /// Re-encode video to at most this rate (passthrough when nil and ``exactFrameRate`` is nil).
    public var maximumFrameRate: Double?
    /// Re-encode video to exactly this rate.
    public var exactFrameRate: Double?
    /// Media skipped at the start (files: a seek to the keyframe at or after it).
    public var prerollSkip: Duration = .milliseconds(500)
    /// Start again at the end of a file instead of ending.
    public var loop = false
    /// No first packet within this time: the ingest fails (`timeout`).
    public var connectTimeout: Duration = .seconds(10)
    /// No packet for this long once started: the ingest fails (`noData`).
    public var noDataTimeout: Duration = .seconds(10)
    /// Stop (as ended) after this much media; nil: no limit.
    public var maximumDuration: Duration?
    /// Refuse sources larger than this many bytes read (`tooLarge`); nil: no limit.
    public var maximumBytes: Int?
    /// A passed-through file waits this long for its first viewer's keyframe request before it
    /// plays, so that viewer starts at the file's first keyframe (H.264 passed through cannot make
    /// new ones; a source with sparse keyframes is undecodable until its next one).
    public var firstViewerWait: Duration = .seconds(10)
    /// Encoder settings when video must be re-encoded.
    public var settings = EncodingSettings()
    /// The `Host` header for an `http` URI whose host was replaced by its checked address (the
    /// platform pins the address it checked; the server still sees the name it serves).
    public var hostHeader: String?
    /// Follow HTTP redirects. Off by default: a redirect is a new target that no policy checked,
    /// so the ingest ends with an error naming it instead.
    public var followRedirects = false

    public init(maximumFrameRate: Double? = nil, exactFrameRate: Double? = nil, prerollSkip: Duration = .milliseconds(500), loop: Bool = false) {
        self.maximumFrameRate = maximumFrameRate
        self.exactFrameRate = exactFrameRate
        self.prerollSkip = prerollSkip
        self.loop = loop
    }

    /// Whether video passes through untouched.
    public var passthrough: Bool { maximumFrameRate == nil && exactFrameRate == nil }
}

/// How an ingest ended.
public enum IngestEnd: Sendable, Hashable, CustomStringConvertible {
    /// The source played to its end (or ``IngestOptions/maximumDuration`` was reached).
    case endOfStream
    /// ``IngestPublisher/stop()`` was called.
    case stopped
    /// Nothing arrived within the connect timeout.
    case timeout
    /// The source went quiet for the no-data timeout.
    case noData
    /// More than ``IngestOptions/maximumBytes`` were read.
    case tooLarge
    /// The source or pipeline failed.
    case failed(String)

    public var description: String {
        switch self {
        case .endOfStream: return "the source ended"
        case .stopped: return "stopped"
        case .timeout: return "no media arrived from the source in time"
        case .noData: return "the source stopped sending media"
        case .tooLarge: return "the source is larger than allowed"
        case .failed(let why): return "the source failed: \(why)"
        }
    }
}

/// An ingest: demuxes and parses a source and produces RTP like ``RTPPublisher`` does (H.264
/// payload type 96, Opus 111), passing H.264 through unless frame-rate constraints require
/// re-encoding. Packets go to `send`; RTCP from the relay comes in with ``receiveRTCP(_:)``.
///
/// ```swift
/// let ingest = try await IngestPublisher.start(.uri("http://127.0.0.1:8000/clip.mp4")) { packet in socket.send(packet) }
/// ingest.tracks                       // announce them in the publish request
/// let why = await ingest.ended()      // .endOfStream at the end of the file
/// ```
/// Unchecked: lets of GStreamer objects (thread-safe as GStreamer's are), mutable state in `Mutex`es and atomics.
package final class IngestPublisher: RTPSource, @unchecked Sendable {
    /// The tracks to announce: the video in the codec its branch carries (``videoCodec``).
    package var tracks: [MediaTrackDescription] {
        [MediaTrackDescription(kind: .video, codec: videoCodec.encodingName, payloadType: 96, clockRate: 90_000, ssrc: ssrcs.video),
         MediaTrackDescription(kind: .audio, codec: "OPUS", payloadType: 111, clockRate: 48_000, ssrc: ssrcs.audio)]
    }
    /// The video's codec as it leaves: H.265 passed through, or H.264 (passed through, or what
    /// the frame-rate constraints re-encode to). H.264 until the source's caps say otherwise.
    package var videoCodec: VideoCodec { codec.withLock { $0.announced ?? $0.chosen ?? .h264 } }
    private let ssrcs: (video: UInt32, audio: UInt32)
    /// Which video branch carries the source (set by the first caps on either), and the codec the
    /// tracks were fixed in when ``start(_:options:send:)`` returned.
    private let codec = Mutex<(chosen: VideoCodec?, announced: VideoCodec?)>((nil, nil))
    package let options: IngestOptions
    package let source: IngestSource
    let pipeline: Pipeline
    private let rtcpInputs: [AppSource]
    private let pushedInput: AppSource?
    /// Pushed H.265 frames (``IngestSource/pushedFLV(video:)`` with H.265).
    private let h265Input: AppSource?
    private let state = Mutex<(end: IngestEnd?, waiters: [CheckedContinuation<IngestEnd, Never>])>((nil, []))
    private let lastPacket = Atomic<UInt64>(0)
    private let bytesRead = Atomic<Int>(0)
    private let watch = Mutex<Task<Void, Never>?>(nil)
    private let isPaused = Mutex(false)
    private let audioPackets = Atomic<Int>(0)
    private let endedBranches = Mutex<Set<String>>([])
    /// When the audio branch saw its first caps (an audio-only source stops the wait for video).
    private let firstAudioCaps = Mutex<ContinuousClock.Instant?>(nil)

    private func branchEnded(_ kind: String) {
        let ended = endedBranches.withLock { branches -> Set<String> in
            branches.insert(kind)
            return branches
        }
        // A source without audio never feeds (or ends) the audio branch.
        if ended.contains("video") && (ended.contains("audio") || audioPackets.load(ordering: .relaxed) == 0) {
            finish(.endOfStream)
        }
    }
    /// Resumed by the first keyframe request (PLI / FIR) while a file waits for its first viewer.
    private let keyframeRequested = Mutex<(seen: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))
    static let logger = SDKLog.logger("pcast.ingest")

    private init(ssrcs: (video: UInt32, audio: UInt32), options: IngestOptions, source: IngestSource, pipeline: Pipeline,
                 rtcpInputs: [AppSource], pushedInput: AppSource?, h265Input: AppSource?) {
        self.ssrcs = ssrcs
        self.options = options
        self.source = source
        self.pipeline = pipeline
        self.rtcpInputs = rtcpInputs
        self.pushedInput = pushedInput
        self.h265Input = h265Input
    }

    static func isRTSP(_ uri: String) -> Bool {
        let scheme = uri.prefix { $0 != ":" }.lowercased()
        return scheme == "rtsp" || scheme == "rtsps" || scheme == "rtspt"
    }

    static func isRTSP(_ source: IngestSource) -> Bool {
        if case .uri(let uri) = source { return isRTSP(uri) }
        return false
    }

    /// Builds and starts the ingest pipeline. Returns once it plays (for URIs, once the source
    /// answered enough to preroll or, for live sources, once it started).
    ///
    /// - Throws: ``MediaError`` when a plugin is missing or the source cannot be opened.
    package static func start(_ source: IngestSource, options: IngestOptions = IngestOptions(),
                             send: @escaping @Sendable (OutgoingPacket) -> Void) async throws(MediaError) -> IngestPublisher {
        let prefix = "ingest-\(UUID().uuidString.prefix(6).lowercased())"
        let sourceDescription: String
        switch source {
        case .uri(let uri):
            guard !uri.contains("\""), !uri.contains("\\"), !uri.unicodeScalars.contains(where: { $0.value < 0x20 }) else {
                throw .gstreamer(.invalidDescription("the URI contains characters a pipeline description cannot carry"))
            }
            if Self.isRTSP(uri) {
                // One pad per stream (RTP): urisourcebin depayloads and parses each itself.
                sourceDescription = "urisourcebin uri=\"\(uri)\" parse-streams=true"
            } else {
                sourceDescription = "urisourcebin name=\(prefix)-uri uri=\"\(uri)\"\(SourceDevices.downloadForLoop(uri, options.loop)) ! parsebin"
            }
        case .pushedFLV(let video):
            guard video == .h264 || video == .h265 else {
                throw .unsupportedFormat("pushed FLV carries H.264 or H.265 video, not \(video.rawValue)")
            }
            sourceDescription = "appsrc name=\(prefix)-pushed-in is-live=true format=bytes block=false max-bytes=8388608 caps=video/x-flv ! parsebin"
        case .pushedMatroska:
            sourceDescription = "appsrc name=\(prefix)-pushed-in is-live=true format=bytes block=false max-bytes=8388608 caps=video/x-matroska ! parsebin"
        }
        // Audio: Opus passes through; anything else (AAC from files and RTMP) is decoded and
        // encoded to Opus, which is what the transport carries.
        let (audioCaps, audioChain) = source == .pushedMatroska
            ? ("audio/x-opus", "opusparse")
            : ("audio/mpeg", "decodebin ! audioconvert ! audioresample ! audio/x-raw,rate=48000,channels=2 ! opusenc name=\(prefix)-opus frame-size=10")
        var videoChain = "identity"
        // The chain ends in the branch's payloader (named, with the SSRC, by the description).
        var h265Chain = "video/x-h265,stream-format=byte-stream,alignment=au ! rtph265pay pt=96 config-interval=-1 mtu=1200 aggregate-mode=zero-latency"
        if !options.passthrough {
            // Constrained: decoded, rate-converted and re-encoded to H.264, whatever came.
            let rate = options.exactFrameRate ?? options.maximumFrameRate ?? 30
            let (numerator, denominator) = Self.fraction(rate)
            let rateControl = options.exactFrameRate != nil ? "videorate" : "videorate max-rate=\(Int(rate.rounded(.down)))"
            let caps = options.exactFrameRate != nil ? " ! video/x-raw,framerate=\(numerator)/\(denominator)" : ""
            let reencode = "videoconvert ! \(rateControl)\(caps) ! x264enc tune=zerolatency speed-preset=ultrafast "
                + "bitrate=\(options.settings.videoBitrate) key-int-max=\(options.settings.keyframeInterval) ! h264parse config-interval=-1"
            videoChain = "avdec_h264 ! \(reencode)"
            h265Chain = "avdec_h265 ! \(reencode) ! video/x-h264,stream-format=byte-stream,alignment=au "
                + "! rtph264pay pt=96 config-interval=-1 mtu=1200 aggregate-mode=zero-latency"
        }
        // The H.265 branch's input: parsed from the source, or (pushed FLV with H.265) frames in
        // hvc1 form with their decoder configuration in the caps (set when it arrives).
        let h265Input = source == .pushedFLV(video: .h265)
            ? "appsrc name=\(prefix)-h265-in is-live=true format=time block=false max-bytes=8388608 caps=video/x-h265,stream-format=hvc1,alignment=au"
            : "\(prefix)-parse. ! video/x-h265"
        let videoSSRC = RTPPublisher.randomSSRC(), audioSSRC = RTPPublisher.randomSSRC()
        let pipeline: Pipeline
        do {
            let description = try StockPipelines.template("ingest").render([
                "prefix": prefix, "source": sourceDescription, "videochain": videoChain, "h265input": h265Input, "h265chain": h265Chain,
                "audiocaps": audioCaps, "audiochain": audioChain,
                "videossrc": String(videoSSRC), "audiossrc": String(audioSSRC)])
            pipeline = try Pipeline(description: description)
        } catch {
            throw .gstreamer(error)
        }
        let ingest: IngestPublisher
        do {
            let rtcpInputs = [try pipeline.appSource(named: "\(prefix)-video-rtcp-in"), try pipeline.appSource(named: "\(prefix)-audio-rtcp-in")]
            let pushedInput = source.isPushed ? try pipeline.appSource(named: "\(prefix)-pushed-in") : nil
            let h265Input = source == .pushedFLV(video: .h265) ? try pipeline.appSource(named: "\(prefix)-h265-in") : nil
            if case .uri(let uri) = source {
                try Self.configureSource(try pipeline.element(named: Self.isRTSP(uri) ? "\(prefix)-parse" : "\(prefix)-uri"), options: options)
            }
            ingest = IngestPublisher(ssrcs: (videoSSRC, audioSSRC), options: options, source: source, pipeline: pipeline,
                                     rtcpInputs: rtcpInputs, pushedInput: pushedInput, h265Input: h265Input)
            try ingest.chooseVideoBranch(prefix: prefix)
            // Set here rather than in the description: an integer property in this description was
            // intermittently misparsed under load (GStreamer reported a garbage value for it).
            if source != .pushedMatroska {
                try pipeline.element(named: "\(prefix)-opus").set("bitrate", Int32(clamping: options.settings.audioBitrate))
            }
            for kind in ["video", "audio"] {
                let sink = try pipeline.appSink(named: "\(prefix)-\(kind)-rtp-out")
                sink.onSample { [weak ingest] sample in
                    ingest?.lastPacket.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
                    if kind == "audio" { ingest?.audioPackets.add(1, ordering: .relaxed) }
                    send(OutgoingPacket(kind: .rtp, buffer: sample.buffer))
                }
                // The media branches playing out is the end, even if the RTCP branches never
                // pass end-of-stream on (rtpbin's sessions do not always).
                sink.onEndOfStream { [weak ingest] in ingest?.branchEnded(kind) }
                try pipeline.appSink(named: "\(prefix)-\(kind)-rtcp-out").onSample { sample in
                    send(OutgoingPacket(kind: .rtcp, buffer: sample.buffer))
                }
            }
            // The byte limit counts what enters the parser (`chooseVideoBranch` counts it); RTSP
            // has no byte stream (its duration limit still applies).
        } catch {
            await pipeline.stop()
            throw .gstreamer(error)
        }
        do {
            try await ingest.run()
        } catch {
            await pipeline.stop()
            throw error
        }
        if case .uri = source { await ingest.waitForVideoCodec() }
        return ingest
    }

    /// The H.264 and H.265 branches meet at a funnel; the first caps on either say which one the
    /// source's video takes, and the other is ended (an end-of-stream into its payloader, once
    /// the pipeline runs: an inactive pad refuses it) so the funnel's end waits for the used one
    /// only. Pushed sources (FLV, Matroska from pcastsink) carry H.264 and are announced so.
    private func chooseVideoBranch(prefix: String) throws(GStreamerError) {
        if !Self.isRTSP(source) {
            // Bytes read: a source that sends none is not waited for (see ``waitForVideoCodec()``).
            try pipeline.element(named: "\(prefix)-parse").staticPad("sink").addBufferProbe { [weak self] buffer in
                self?.bytesRead.add(buffer.size, ordering: .relaxed)
                return .pass
            }
        }
        let h264 = try pipeline.element(named: "\(prefix)-video-queue").staticPad("sink")
        let h265 = try pipeline.element(named: "\(prefix)-h265-queue").staticPad("sink")
        let h264Payloader = try pipeline.element(named: "\(prefix)-h264-pay").staticPad("sink")
        let h265Payloader = try pipeline.element(named: "\(prefix)-h265-pay").staticPad("sink")
        if let video = source.pushedVideo {
            // Announced before the pusher's media reaches the pipeline.
            codec.withLock { $0.announced = video }
        }
        try pipeline.element(named: "\(prefix)-audio-queue").staticPad("sink").addCapsProbe { [weak self] _ in
            self?.firstAudioCaps.withLock { $0 = $0 ?? .now }
        }
        let passthrough = options.passthrough
        h264.addCapsProbe { [weak self] _ in
            if self?.chose(.h264) == true { h265Payloader.sendEndOfStream() }
        }
        h265.addCapsProbe { [weak self] _ in
            if self?.chose(passthrough ? .h265 : .h264) == true { h264Payloader.sendEndOfStream() }
        }
    }

    /// Records the branch the video took; false when one was already chosen. Video that comes
    /// in another codec than the tracks were announced in (a source that stayed silent past the
    /// wait) fails the ingest instead of reaching viewers under the wrong name.
    private func chose(_ codec: VideoCodec) -> Bool {
        let (first, announced) = self.codec.withLock { state -> (Bool, VideoCodec?) in
            guard state.chosen == nil else { return (false, nil) }
            state.chosen = codec
            return (true, state.announced)
        }
        guard first else { return false }
        if let announced, announced != codec {
            finish(.failed("the source's video is \(codec.rawValue), but the stream was announced as \(announced.rawValue) before the source sent any"))
        }
        return true
    }

    /// Waits until the video's codec is known, then fixes the tracks in it. Not longer than the
    /// connect timeout, a second once audio flows without video (an audio-only source), the
    /// ingest's end, or — for a byte stream — 2 s without a byte (a silent server: the publish is
    /// answered at once, as for any source, and the watchdog's timeouts end it). Not known then:
    /// H.264 (video in another codec later fails the ingest, see ``chose(_:)``).
    private func waitForVideoCodec() async {
        let started = ContinuousClock.now, counted = !Self.isRTSP(source)
        while codec.withLock({ $0.chosen }) == nil, !hasEnded, ContinuousClock.now - started < options.connectTimeout {
            if let audio = firstAudioCaps.withLock({ $0 }), ContinuousClock.now - audio > .seconds(1) { break }
            if counted, bytesRead.load(ordering: .relaxed) == 0, ContinuousClock.now - started > .seconds(2) { break }
            try? await Task.sleep(for: .milliseconds(20))
        }
        codec.withLock { $0.announced = $0.chosen ?? .h264 }
    }

    /// Redirects and the pinned host's name, set on the source urisourcebin makes (souphttpsrc
    /// for http and https) before it sends its first request.
    static func configureSource(_ bin: Element, options: IngestOptions) throws(GStreamerError) {
        let follow = options.followRedirects, hostHeader = options.hostHeader
        try bin.onSourceSetup { source in
            if source.hasProperty("automatic-redirect") { try? source.set("automatic-redirect", follow) }
            if let hostHeader, source.hasProperty("extra-headers") {
                try? source.setParsed("extra-headers", "headers, Host=(string)\"\(hostHeader)\"")
            }
        }
    }

    private func run() async throws(MediaError) {
        let isFile: Bool
        if case .uri(let uri) = source {
            let scheme = URL(string: uri)?.scheme?.lowercased() ?? ""
            isFile = ["http", "https", "file"].contains(scheme)
        } else {
            isFile = false
        }
        let bus = pipeline.bus
        let watcher = Task { [weak self] in
            for await message in bus {
                guard let self else { return }
                switch message.kind {
                case .endOfStream:
                    self.finish(.endOfStream)
                case .error(let error):
                    self.finish(.failed(error.message))
                case .other(let name) where name == "segment-done":
                    // Looping: continue from the start without a flush, so time runs on.
                    _ = self.pipeline.seek(to: .zero, flags: [.segment, .keyUnit])
                default:
                    break
                }
                if self.hasEnded { return }
            }
        }
        watch.withLock { $0 = watcher }
        do {
            if isFile {
                try await pipeline.pause(timeout: options.connectTimeout)
                // Files play from ``begin()``, once the stream is announced.
                isPaused.withLock { $0 = true }
                return
            }
            // Pushed FLV arrives only once the pusher is told the publish started, which waits
            // for this: do not wait for the pipeline to reach PLAYING (the watchdog's connect
            // timeout covers a pusher that never sends).
            try await pipeline.play(timeout: source.isPushed ? nil : options.connectTimeout)
        } catch {
            throw .gstreamer(error)
        }
        startWatchdog()
    }

    /// Plays a file source prepared by ``start(_:options:send:)`` (live sources play at once).
    /// Call once the stream is announced: a passed-through file waits up to
    /// ``IngestOptions/firstViewerWait`` for its first viewer's keyframe request, so that viewer
    /// starts at the file's first keyframe.
    package func begin() async throws(MediaError) {
        guard isPaused.withLock({ state in defer { state = false }; return state }) else { return }
        if options.passthrough { await waitForFirstViewer() }
        do {
            try await pipeline.play(timeout: options.connectTimeout)
        } catch {
            finish(.failed(error.description))
            throw .gstreamer(error)
        }
        // Skip at keyframe granularity (the keyframe at or before the position: passed-through
        // H.264 must start at one). Seeking once playing: a flushing seek made in PAUSED, before
        // preroll, lost the end-of-stream at the end of the file.
        if options.prerollSkip > .zero || options.loop {
            var flags: SeekFlags = [.flush, .keyUnit, .snapBefore]
            if options.loop { flags.insert(.segment) }
            _ = pipeline.seek(to: options.prerollSkip, flags: flags)
        }
        startWatchdog()
    }

    /// Connect, no-data and duration limits.
    private func startWatchdog() {
        let started = DispatchTime.now().uptimeNanoseconds
        let options = self.options
        Task { [weak self] in
            while true {
                try? await Task.sleep(for: .milliseconds(100))
                guard let self, !self.hasEnded else { return }
                // The packet time is stamped on a streaming thread and may be later than `now`.
                let last = self.lastPacket.load(ordering: .relaxed)
                let now = max(DispatchTime.now().uptimeNanoseconds, last)
                if last == 0 {
                    if now - started > UInt64(options.connectTimeout / .nanoseconds(1)) { await self.end(.timeout); return }
                } else if now - last > UInt64(options.noDataTimeout / .nanoseconds(1)) {
                    await self.end(.noData)
                    return
                }
                if let limit = options.maximumBytes, self.bytesRead.load(ordering: .relaxed) > limit { await self.end(.tooLarge); return }
                if let limit = options.maximumDuration, let position = self.pipeline.runningTime, position >= limit {
                    await self.end(.endOfStream)
                    return
                }
            }
        }
    }

    /// Position and duration of the source (duration for files only).
    package var progress: (position: Duration?, duration: Duration?) {
        (pipeline.position, pipeline.mediaDuration)
    }

    /// Pushed bytes (``IngestSource/pushedFLV(video:)``, ``IngestSource/pushedMatroska``). False when the
    /// ingest is not taking them.
    @discardableResult
    package func push(_ bytes: [UInt8]) -> Bool {
        guard let input = pushedInput, !hasEnded else { return false }
        return input.pushNow(Buffer(bytes: bytes))
    }

    /// The decoder configuration (`hvcC`) of pushed H.265 frames: set before the first frame, and
    /// again when it changes. False when the ingest takes no H.265 frames or the record is refused.
    @discardableResult
    package func pushH265(configuration: [UInt8]) -> Bool {
        guard let input = h265Input, !hasEnded, !configuration.isEmpty else { return false }
        let hex = configuration.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
        do throws(GStreamerError) {
            try input.setCaps(try Caps("video/x-h265,stream-format=hvc1,alignment=au,codec_data=(buffer)\(hex)"))
            return true
        } catch {
            return false
        }
    }

    /// One pushed H.265 frame: NAL units with the configuration's length prefixes, its decoding
    /// time and presentation minus decoding time (RTMP's milliseconds). False when not taken.
    @discardableResult
    package func pushH265(frame: [UInt8], decodingTime: UInt32, compositionTime: Int32, isKeyframe: Bool) -> Bool {
        guard let input = h265Input, !hasEnded else { return false }
        bytesRead.add(frame.count, ordering: .relaxed)
        let buffer = Buffer(bytes: frame)
        let decoding = Int64(decodingTime)
        buffer.decodingTimestamp = .milliseconds(decoding)
        buffer.presentationTimestamp = .milliseconds(max(0, decoding + Int64(compositionTime)))
        if !isKeyframe { buffer.flags.insert(.deltaUnit) }
        return input.pushNow(buffer)
    }

    /// The pushed source ended (the publisher stopped): the ingest ends as `endOfStream` once the
    /// queued media played out.
    package func endPushedStream() {
        try? pushedInput?.endOfStream()
        try? h265Input?.endOfStream()
    }

    package func receiveRTCP(_ packet: Buffer) {
        if !keyframeRequested.withLock({ $0.seen }), Self.asksForKeyframe(packet) {
            keyframeRequested.withLock { state in
                state.seen = true
                return state.waiter.take()
            }?.resume()
        }
        for input in rtcpInputs { input.pushNow(RTPReceiver.arrived(packet)) }
    }

    private func waitForFirstViewer() async {
        let wait = options.firstViewerWait
        let timer = Task { [weak self] in
            try? await Task.sleep(for: wait)
            self?.keyframeRequested.withLock { state in
                state.seen = true
                return state.waiter.take()
            }?.resume()
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let already = keyframeRequested.withLock { state -> Bool in
                if state.seen { return true }
                state.waiter = continuation
                return false
            }
            if already { continuation.resume() }
        }
        timer.cancel()
    }

    /// Whether a (compound) RTCP packet carries a PLI or FIR.
    static func asksForKeyframe(_ packet: Buffer) -> Bool {
        let bytes = packet.bytes
        var offset = 0
        while offset + 4 <= bytes.count {
            let format = bytes[offset] & 0x1F, type = bytes[offset + 1]
            if type == 206 && (format == 1 || format == 4) { return true }
            let length = (Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3]) + 1) * 4
            offset += max(length, 4)
        }
        return false
    }

    package var hasEnded: Bool { state.withLock { $0.end != nil } }

    /// Waits until the ingest ends; returns why.
    package func ended() async -> IngestEnd {
        await withCheckedContinuation { continuation in
            let end: IngestEnd? = state.withLock { state in
                if let end = state.end { return end }
                state.waiters.append(continuation)
                return nil
            }
            if let end { continuation.resume(returning: end) }
        }
    }

    package func stop() async {
        await end(.stopped)
    }

    private func end(_ why: IngestEnd) async {
        finish(why)
        await pipeline.stop()
    }

    private func finish(_ why: IngestEnd) {
        let waiters = state.withLock { state -> [CheckedContinuation<IngestEnd, Never>] in
            guard state.end == nil else { return [] }
            state.end = why
            defer { state.waiters = [] }
            return state.waiters
        }
        guard !waiters.isEmpty || why != .stopped else { return }
        if why != .stopped && why != .endOfStream { Self.logger.warning("ingest ended: \(why)") }
        waiters.forEach { $0.resume(returning: why) }
        if why != .stopped {
            let pipeline = self.pipeline
            Task { await pipeline.stop() }
        }
    }

    private static func fraction(_ rate: Double) -> (Int, Int) {
        if rate == rate.rounded() { return (Int(rate), 1) }
        return (Int((rate * 1001).rounded()), 1001)
    }
}
