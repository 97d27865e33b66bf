import GStreamer
import Logging
import Synchronization

/// What a frame-ready callback receives: one ``FrameNotification`` per frame, on the streaming thread.
///
/// ```swift
/// let blackout: FrameReadyCallback = { notification in notification.drop() }
/// hook.setFrameReadyCallback(blackout)
/// ```
public typealias FrameReadyCallback = @Sendable (FrameNotification) -> Void

/// Raw-frame read, write and drop hooks on one pad of a pipeline: the frame-ready API that
/// `UserMediaStream` (before the encoder) and `Renderer` (after the decoder) expose.
///
/// Put a named pass-through element where frames should be seen, raw and in system memory, and
/// hook its source pad. To let written frames change size, have the stream converted and scaled
/// after the hook:
///
/// ```swift
/// let pipeline = try Pipeline(description: """
///     v4l2src ! videoconvert ! video/x-raw,format=I420 ! identity name=video-hook \
///     ! videoconvert ! videoscale ! video/x-raw,width=1280,height=720 ! x264enc tune=zerolatency ! fakesink
///     """)
/// let hook = try FrameHook(pipeline: pipeline, element: "video-hook")
/// hook.setFrameReadyCallback { notification in
///     guard var frame = try? notification.read(format: .bgra) else { return }
///     try? frame.withUnsafeMutableBytes { bytes in /* draw */ }
///     try? notification.write(frame)
/// }
/// try await pipeline.play()
/// ```
///
/// The callback runs on GStreamer's streaming thread, one frame at a time. It must keep up with the
/// frame rate: when it falls behind (it took longer than the frames' interval), the frames that
/// arrive while it is behind are dropped without being shown to it, and counted in
/// ``droppedFrameCount``. Nothing is ever queued, so a slow callback costs frames, never memory.
///
/// The hook stays installed while this object lives; ``remove()`` (or dropping the last reference)
/// takes it out and lets frames through untouched.
public final class FrameHook: Sendable {
    /// What a hook does with frames written in another pixel format than the stream's.
    ///
    /// ```swift
    /// // Downstream has a videoconvert, so BGRA frames may go on as they are.
    /// let options = FrameHook.Options(writtenFormat: .asWritten)
    /// ```
    public enum WrittenFormat: Sendable, Hashable {
        /// Convert them to the stream's pixel format, so nothing after the hook sees a new format.
        case streamFormat
        /// Send them on as they are, with new caps (elements after the hook must accept them).
        case asWritten
    }

    /// How a hook behaves.
    ///
    /// ```swift
    /// let hook = try FrameHook(pipeline: pipeline, element: "video-hook",
    ///                          options: .init(writtenFormat: .asWritten, conversionThreads: 2))
    /// ```
    public struct Options: Sendable, Hashable {
        /// Drop frames that arrive while the callback is behind the frame rate (the default).
        /// Without it, a slow callback sees every frame and the stream falls behind real time.
        public var dropsLateFrames: Bool
        /// What happens to written frames of another pixel format.
        public var writtenFormat: WrittenFormat
        /// Threads each pixel-format conversion is split over.
        public var conversionThreads: Int

        public init(dropsLateFrames: Bool = true, writtenFormat: WrittenFormat = .streamFormat, conversionThreads: Int = 1) {
            self.dropsLateFrames = dropsLateFrames
            self.writtenFormat = writtenFormat
            self.conversionThreads = conversionThreads
        }
    }

    /// Counts since the hook was installed.
    ///
    /// ```swift
    /// let counts = hook.statistics
    /// print("\(counts.framesDelivered) shown, \(counts.framesDroppedLate) dropped late")
    /// ```
    public struct Statistics: Sendable, Hashable {
        /// Frames that reached the hook.
        public var framesSeen: Int
        /// Frames shown to the callback.
        public var framesDelivered: Int
        /// Frames dropped because the callback was behind (``FrameHook/droppedFrameCount``).
        public var framesDroppedLate: Int
        /// Frames the callback dropped with ``FrameNotification/drop()``.
        public var framesDroppedByCallback: Int
        /// Frames the callback replaced with ``FrameNotification/write(_:)-(VideoFrame)``.
        public var framesWritten: Int
        /// Written frames dropped because downstream refused their new caps when they were sent.
        public var renegotiationFailures: Int
    }

    private let core: FrameHookCore
    private let bufferProbe: PadProbe
    private let capsProbe: PadProbe

    /// Hooks the source pad of the element named `element` in `pipeline`.
    ///
    /// - Throws: ``MediaError/gstreamer(_:)`` when there is no such element or pad, or
    ///   ``MediaError/unsupportedPad(_:)`` when the pad is not a source pad.
    public convenience init(pipeline: Pipeline, element: String, pad: String = "src", options: Options = Options()) throws(MediaError) {
        let found: Pad
        do {
            found = try pipeline.element(named: element).staticPad(pad)
        } catch {
            throw .gstreamer(error)
        }
        try self.init(pad: found, options: options)
    }

    /// Hooks a source pad.
    ///
    /// - Throws: ``MediaError/unsupportedPad(_:)`` when the pad is not a source pad.
    public init(pad: Pad, options: Options = Options()) throws(MediaError) {
        guard pad.isSource else {
            throw .unsupportedPad("\(pad) is a sink pad; hook the source pad of the element before it")
        }
        let core = FrameHookCore(pad: pad, options: options)
        self.core = core
        // The caps probe goes first so it has seen the format before any buffer of it.
        capsProbe = pad.addCapsProbe { caps in core.capsPassed(caps) }
        bufferProbe = pad.addBufferProbe { buffer in core.process(&buffer) }
    }

    deinit {
        remove()
    }

    /// Sets (or, with `nil`, clears) the callback called with every frame. Without a callback the
    /// hook lets frames through untouched.
    public func setFrameReadyCallback(_ callback: FrameReadyCallback?) {
        core.callback.withLock { $0.callback = callback }
    }

    /// Frames dropped because the callback could not keep up with the frame rate.
    public var droppedFrameCount: Int { core.droppedLate.load(ordering: .relaxed) }

    /// All the counts at once.
    public var statistics: Statistics {
        Statistics(
            framesSeen: core.seen.load(ordering: .relaxed),
            framesDelivered: core.delivered.load(ordering: .relaxed),
            framesDroppedLate: core.droppedLate.load(ordering: .relaxed),
            framesDroppedByCallback: core.droppedByCallback.load(ordering: .relaxed),
            framesWritten: core.written.load(ordering: .relaxed),
            renegotiationFailures: core.renegotiationFailures.load(ordering: .relaxed))
    }

    /// Takes the hook out of the pipeline. Later calls do nothing.
    public func remove() {
        bufferProbe.remove()
        capsProbe.remove()
        core.callback.withLock { $0.callback = nil }
    }
}

// MARK: - Stream formats

/// Raw video as the hook's pad carries it.
struct VideoStream: Sendable {
    let caps: Caps
    let info: VideoInfo
    var format: PixelFormat { info.format }

    /// Frame interval from the caps' frame rate; `nil` for a variable rate.
    var interval: Duration? {
        guard info.frameRateNumerator > 0, info.frameRateDenominator > 0 else { return nil }
        return .nanoseconds(Int64(1_000_000_000) * Int64(info.frameRateDenominator) / Int64(info.frameRateNumerator))
    }

    /// The frame in `buffer`, described by the producer's plane layout when it attached one.
    func frame(of buffer: Buffer) throws(MediaError) -> VideoFrame {
        var strides = info.strides
        var offsets = info.offsets
        if let meta = buffer.videoMeta, meta.strides.count == strides.count {
            strides = meta.strides
            offsets = meta.offsets
        } else if buffer.size < info.size {
            throw .invalidFrame("\(buffer.size) bytes for a \(info.format) \(info.width)×\(info.height) frame of \(info.size)")
        }
        return VideoFrame(storage: buffer, format: format, width: info.width, height: info.height,
                          strides: strides, planeOffsets: offsets,
                          presentationTimestamp: buffer.presentationTimestamp, duration: buffer.duration)
    }
}

/// S16 interleaved audio as the hook's pad carries it.
struct AudioStream: Sendable {
    let caps: Caps
    let info: AudioInfo
}

enum StreamFormat: Sendable {
    case video(VideoStream)
    case audio(AudioStream)
    /// Frames the hook cannot read or write; `kind` when the media is raw audio or video all the same.
    case unsupported(kind: MediaKind?, reason: String)

    var kind: MediaKind? {
        switch self {
        case .video: return .video
        case .audio: return .audio
        case .unsupported(let kind, _): return kind
        }
    }

    init(caps: Caps?) {
        guard let caps else {
            self = .unsupported(kind: nil, reason: "no caps negotiated yet")
            return
        }
        let text = caps.description
        let kind: MediaKind? = text.hasPrefix("video/x-raw") ? .video : text.hasPrefix("audio/x-raw") ? .audio : nil
        if text.contains("(memory:"), !text.contains("(memory:SystemMemory)") {
            self = .unsupported(kind: kind, reason: "\(text): frames are not in system memory")
        } else if text.hasPrefix("video/x-raw"), let info = caps.videoInfo {
            self = .video(VideoStream(caps: caps, info: info))
        } else if text.hasPrefix("audio/x-raw"), let info = caps.audioInfo {
            guard info.format == AudioSampleFormat.s16.gstreamerName, info.interleaved || info.channels == 1 else {
                self = .unsupported(kind: .audio, reason: "\(text): audio must be \(AudioSampleFormat.s16.gstreamerName) interleaved "
                                    + "(put audioconvert ! audio/x-raw,format=\(AudioSampleFormat.s16.gstreamerName),layout=interleaved before the hook)")
                return
            }
            self = .audio(AudioStream(caps: caps, info: info))
        } else {
            self = .unsupported(kind: kind, reason: "\(text) is not raw audio or video")
        }
    }

    var caps: Caps? {
        switch self {
        case .video(let video): return video.caps
        case .audio(let audio): return audio.caps
        case .unsupported: return nil
        }
    }
}

// MARK: - The hook's work, on the streaming thread

private let logger = SDKLog.logger("pcast.media.frame-hook")

// Unchecked: the pad is a GStreamer object (thread-safe); callback, format state and counters are in `Mutex`es and atomics.
final class FrameHookCore: @unchecked Sendable {
    let pad: Pad
    let options: FrameHook.Options
    /// The callback lives in a struct, never as the `Mutex`'s value itself: a closure that is a
    /// generic container's value is converted in and out of its generic representation on every
    /// `withLock` (an inout access), each time wrapped in one more reabstraction thunk. Read once a
    /// frame, that nested two thunks a frame: calls went through all of them, memory grew, and
    /// releasing the chain after a long run overflowed the stack (`pcast-bench soak` crashed at exit).
    let callback = Mutex(CallbackSlot())
    struct CallbackSlot: Sendable { var callback: FrameReadyCallback? }

    let seen = Atomic<Int>(0)
    let delivered = Atomic<Int>(0)
    let droppedLate = Atomic<Int>(0)
    let droppedByCallback = Atomic<Int>(0)
    let written = Atomic<Int>(0)
    let renegotiationFailures = Atomic<Int>(0)

    /// Set while a callback runs; a frame arriving meanwhile (from another thread) is dropped.
    private let running = Atomic<Bool>(false)
    /// Set while the hook sends caps of its own, so the caps probe can tell them from the element's.
    private let pushingOwnCaps = Atomic<Bool>(false)

    struct DerivedVideo {
        let caps: Caps
        let info: VideoInfo
    }

    private struct LayoutKey: Hashable {
        let format: PixelFormat
        let width: Int
        let height: Int
    }

    private struct ConversionKey: Hashable {
        let from: LayoutKey
        let to: LayoutKey
    }

    private struct State {
        /// What the element sends: the format frames arrive in.
        var input: StreamFormat?
        /// The caps last sent downstream, by the element or by the hook.
        var downstreamCaps: Caps?
        /// Caps downstream was asked about and accepted, while the input stays the same.
        var acceptedCaps: Caps?
        /// Nanoseconds the callback is behind the frame rate (negative: ahead, at most one frame).
        var lateness: Int64 = 0
        var lastTimestamp: Duration?
        var derived: [LayoutKey: DerivedVideo] = [:]
        var converters: [ConversionKey: VideoConverter] = [:]
    }

    private let state = Mutex(State())
    /// Bounds on the caches; a stream uses one or two entries of each.
    private static let cacheLimit = 8

    init(pad: Pad, options: FrameHook.Options) {
        self.pad = pad
        self.options = options
    }

    // MARK: Caps

    func capsPassed(_ caps: Caps) {
        let own = pushingOwnCaps.load(ordering: .relaxed)
        state.withLock { state in
            state.downstreamCaps = caps
            guard !own else { return }
            if let current = state.input?.caps, current == caps { return }
            state.input = StreamFormat(caps: caps)
            state.acceptedCaps = nil
            state.derived.removeAll()
            state.converters.removeAll()
            state.lastTimestamp = nil
        }
    }

    /// The format frames arrive in. A hook installed after negotiation reads it from the pad once.
    private func inputFormat() -> StreamFormat {
        if let input = state.withLock({ $0.input }) { return input }
        let caps = pad.currentCaps
        return state.withLock { state in
            if let input = state.input { return input }
            let input = StreamFormat(caps: caps)
            state.input = input
            state.downstreamCaps = caps
            return input
        }
    }

    /// Makes downstream's caps `caps` before a buffer of them goes out.
    private func sendCaps(_ caps: Caps?) -> Bool {
        guard let caps else { return true }
        let previous = state.withLock { state -> Caps?? in
            if let current = state.downstreamCaps, current === caps || current == caps { return .none }
            return .some(state.downstreamCaps)
        }
        guard let previous else { return true }
        pushingOwnCaps.store(true, ordering: .relaxed)
        defer { pushingOwnCaps.store(false, ordering: .relaxed) }
        if pad.pushCaps(caps) {
            state.withLock { $0.downstreamCaps = caps }
            return true
        }
        logger.warning("downstream refused \(caps); the frame is dropped")
        // Put back what downstream had, so the pending caps do not stall the next frame.
        if let previous { _ = pad.pushCaps(previous) }
        return false
    }

    /// Throws unless downstream has these caps or accepts them.
    func requireAccepted(_ caps: Caps) throws(MediaError) {
        let known = state.withLock { state -> Bool in
            [state.downstreamCaps, state.acceptedCaps].contains { $0.map { $0 === caps || $0 == caps } ?? false }
        }
        if known { return }
        guard pad.peerAcceptsCaps(caps) else { throw .formatNotAccepted(caps.description) }
        state.withLock { $0.acceptedCaps = caps }
    }

    // MARK: Conversion

    /// Caps for frames of another format or size, derived from the input caps (frame rate,
    /// colorimetry…), cached while the input stays the same.
    func derivedVideo(format: PixelFormat, width: Int, height: Int) throws(MediaError) -> DerivedVideo {
        let key = LayoutKey(format: format, width: width, height: height)
        let (input, cached) = state.withLock { ($0.input, $0.derived[key]) }
        if let cached { return cached }
        guard case .video(let video) = input else { throw .unsupportedFormat("the stream is not raw video") }
        let caps: Caps
        do {
            caps = try video.caps.replacingVideoLayout(format: format, width: width, height: height)
        } catch {
            throw .invalidFrame("no \(format) layout for \(width)×\(height)")
        }
        guard let info = caps.videoInfo else { throw .invalidFrame("no \(format) layout for \(width)×\(height)") }
        let derived = DerivedVideo(caps: caps, info: info)
        state.withLock { state in
            if state.derived.count >= Self.cacheLimit { state.derived.removeAll() }
            state.derived[key] = derived
        }
        return derived
    }

    /// Converts with a converter kept per input and output layout.
    func convert(_ buffer: Buffer, from input: Caps, to output: Caps) throws(MediaError) -> Buffer {
        guard let from = input.videoInfo, let to = output.videoInfo else {
            throw .unsupportedFormat("cannot convert \(input) to \(output)")
        }
        let key = ConversionKey(
            from: LayoutKey(format: from.format, width: from.width, height: from.height),
            to: LayoutKey(format: to.format, width: to.width, height: to.height))
        do {
            let converter: VideoConverter
            if let cached = state.withLock({ $0.converters[key] }) {
                converter = cached
            } else {
                converter = try VideoConverter(from: input, to: output, options: .init(threads: options.conversionThreads))
                state.withLock { state in
                    if state.converters.count >= Self.cacheLimit { state.converters.removeAll() }
                    state.converters[key] = converter
                }
            }
            return try converter.convert(buffer)
        } catch {
            throw .gstreamer(error)
        }
    }

    // MARK: Frames

    func process(_ buffer: inout Buffer) -> PadProbeAction {
        seen.add(1, ordering: .relaxed)
        let input = inputFormat()
        guard let callback = callback.withLock({ $0.callback }) else {
            return sendCaps(input.caps) ? .pass : .drop
        }
        guard !running.exchange(true, ordering: .acquiring) else {
            droppedLate.add(1, ordering: .relaxed)
            return .drop
        }
        defer { running.store(false, ordering: .releasing) }

        let interval = frameInterval(of: buffer, input: input)
        if options.dropsLateFrames, let interval {
            let late = state.withLock { state -> Bool in
                guard state.lateness > 0 else { return false }
                // Skipping a frame wins back one interval.
                state.lateness = max(state.lateness - interval, -interval)
                return true
            }
            if late {
                droppedLate.add(1, ordering: .relaxed)
                return .drop
            }
        }

        let notification = FrameNotification(buffer: buffer, stream: input, core: self)
        let clock = ContinuousClock()
        let start = clock.now
        callback(notification)
        let outcome = notification.finish()
        let elapsed = start.duration(to: clock.now)
        delivered.add(1, ordering: .relaxed)
        if let interval {
            let spent = elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000
            state.withLock { state in
                state.lateness = max(state.lateness + spent - interval, -interval)
            }
        }

        switch outcome {
        case .pass:
            return sendCaps(input.caps) ? .pass : .drop
        case .drop:
            droppedByCallback.add(1, ordering: .relaxed)
            return .drop
        case .write(let replacement, let caps):
            guard sendCaps(caps) else {
                renegotiationFailures.add(1, ordering: .relaxed)
                return .drop
            }
            written.add(1, ordering: .relaxed)
            buffer = replacement
            return .pass
        }
    }

    /// The time one frame stands for, in nanoseconds: the buffer's duration, else the frame rate or
    /// sample count, else the gap since the previous timestamp; `nil` when nothing tells.
    private func frameInterval(of buffer: Buffer, input: StreamFormat) -> Int64? {
        let timestamp = buffer.presentationTimestamp
        let previous = state.withLock { state -> Duration? in
            defer { state.lastTimestamp = timestamp }
            return state.lastTimestamp
        }
        var interval: Duration?
        if let duration = buffer.duration, duration > .zero {
            interval = duration
        } else {
            switch input {
            case .video(let video): interval = video.interval
            case .audio(let audio) where audio.info.bytesPerFrame > 0 && audio.info.rate > 0:
                interval = .nanoseconds(Int64(buffer.size / audio.info.bytesPerFrame) * 1_000_000_000 / Int64(audio.info.rate))
            default: break
            }
        }
        if interval == nil, let timestamp, let previous, timestamp > previous {
            interval = timestamp - previous
        }
        guard let interval, interval > .zero else { return nil }
        return interval.components.seconds * 1_000_000_000 + interval.components.attoseconds / 1_000_000_000
    }
}
