import GStreamer
import Synchronization

/// The frame passing a ``FrameHook`` right now: read it, replace it, or drop it.
///
/// Given to the frame-ready callback on the streaming thread, and valid until the callback
/// returns; after that every call throws ``MediaError/notificationExpired``. Doing nothing lets the
/// frame through unchanged. When several calls are made, the last ``write(_:)-(VideoFrame)`` or
/// ``drop()`` decides.
///
/// ```swift
/// hook.setFrameReadyCallback { notification in
///     guard var frame = try? notification.read(format: .bgra) else { return }
///     try? frame.withUnsafeMutableBytes { bytes in /* draw an overlay */ }
///     try? notification.write(frame)   // converted back to the stream's format by default
/// }
/// ```
/// Unchecked: the buffer and the outcome live in the `Mutex` `state`; the rest are lets.
public final class FrameNotification: @unchecked Sendable {
    /// What the stream carries, or `nil` for media that is not raw audio or video (encoded media).
    public let kind: MediaKind?

    enum Outcome {
        case pass
        case drop
        case write(Buffer, Caps)
    }

    private struct State {
        var original: Buffer?
        var outcome: Outcome = .pass
    }

    private let state: Mutex<State>
    private let stream: StreamFormat
    private let core: FrameHookCore

    init(buffer: Buffer, stream: StreamFormat, core: FrameHookCore) {
        state = Mutex(State(original: buffer))
        self.stream = stream
        self.core = core
        kind = stream.kind
    }

    /// Ends the notification: later calls throw, and the frame is let go of.
    func finish() -> Outcome {
        state.withLock { state in
            state.original = nil
            return state.outcome
        }
    }

    private func original() throws(MediaError) -> Buffer {
        guard let buffer = state.withLock({ $0.original }) else { throw .notificationExpired }
        return buffer
    }

    private func decide(_ outcome: Outcome) throws(MediaError) {
        try state.withLock { (state) throws(MediaError) in
            guard state.original != nil else { throw .notificationExpired }
            state.outcome = outcome
        }
    }

    // MARK: Read

    /// The frame as it is: video in the stream's own pixel format and layout, audio as S16
    /// interleaved samples. No bytes are copied.
    ///
    /// - Throws: ``MediaError/unsupportedFormat(_:)`` for media that is not raw audio or video,
    ///   ``MediaError/invalidFrame(_:)`` for a buffer smaller than its format says, or
    ///   ``MediaError/notificationExpired``.
    public func read() throws(MediaError) -> MediaFrame {
        let buffer = try original()
        switch stream {
        case .video(let video):
            return .video(try video.frame(of: buffer))
        case .audio(let audio):
            return .audio(AudioFrame(storage: buffer, channels: audio.info.channels, sampleRate: audio.info.rate,
                                     presentationTimestamp: buffer.presentationTimestamp, duration: buffer.duration))
        case .unsupported(_, let reason):
            throw .unsupportedFormat(reason)
        }
    }

    /// The video frame converted to `format` (same size), with the stream's colorimetry. Reading in
    /// the stream's own format converts nothing. Converters are kept per format, so only the first
    /// frame after a change pays for setting one up.
    ///
    /// ```swift
    /// let bgra = try notification.read(format: .bgra)
    /// bgra.strides   // [width × 4]
    /// ```
    ///
    /// - Throws: ``MediaError/wrongMediaKind(expected:given:)`` on an audio stream,
    ///   ``MediaError/unsupportedFormat(_:)``, ``MediaError/invalidFrame(_:)`` for an unknown
    ///   format, ``MediaError/gstreamer(_:)`` when the conversion fails, or
    ///   ``MediaError/notificationExpired``.
    public func read(format: PixelFormat) throws(MediaError) -> VideoFrame {
        let buffer = try original()
        let video = try videoStream()
        if format == video.format { return try video.frame(of: buffer) }
        let target = try core.derivedVideo(format: format, width: video.info.width, height: video.info.height)
        let converted = try core.convert(buffer, from: video.caps, to: target.caps)
        return VideoFrame(storage: converted, format: format, width: video.info.width, height: video.info.height,
                          strides: target.info.strides, planeOffsets: target.info.offsets,
                          presentationTimestamp: buffer.presentationTimestamp, duration: buffer.duration)
    }

    private func videoStream() throws(MediaError) -> VideoStream {
        switch stream {
        case .video(let video): return video
        case .audio: throw .wrongMediaKind(expected: .audio, given: .video)
        case .unsupported(_, let reason): throw .unsupportedFormat(reason)
        }
    }

    // MARK: Write

    /// Replaces the frame with `frame`, which may have another size and other timestamps. A frame
    /// without a presentation timestamp or duration takes the incoming frame's.
    ///
    /// A frame of another size makes the hook send new caps downstream before it, so the elements
    /// after the hook must accept the new size (a `videoscale`, an encoder or a sink that takes any
    /// size). A frame in another pixel format is converted to the stream's, unless the hook's
    /// ``FrameHook/Options/writtenFormat`` is ``FrameHook/WrittenFormat/asWritten``.
    ///
    /// - Throws: ``MediaError/formatNotAccepted(_:)`` when downstream refuses the frame's size or
    ///   format, ``MediaError/wrongMediaKind(expected:given:)`` on an audio stream,
    ///   ``MediaError/gstreamer(_:)`` when a conversion fails, or ``MediaError/notificationExpired``.
    public func write(_ frame: VideoFrame) throws(MediaError) {
        let input = try original()
        let video: VideoStream
        switch stream {
        case .video(let stream): video = stream
        case .audio: throw .wrongMediaKind(expected: .audio, given: .video)
        case .unsupported(_, let reason): throw .unsupportedFormat(reason)
        }
        var buffer = frame.storage
        let caps: Caps
        if frame.format == video.format, frame.width == video.info.width, frame.height == video.info.height {
            caps = video.caps
        } else if frame.format != video.format, core.options.writtenFormat == .streamFormat {
            let written = try core.derivedVideo(format: frame.format, width: frame.width, height: frame.height)
            let target = try core.derivedVideo(format: video.format, width: frame.width, height: frame.height)
            buffer = try core.convert(buffer, from: written.caps, to: target.caps)
            caps = target.caps
        } else {
            caps = try core.derivedVideo(format: frame.format, width: frame.width, height: frame.height).caps
        }
        try core.requireAccepted(caps)
        Self.stamp(buffer, presentationTimestamp: frame.presentationTimestamp ?? input.presentationTimestamp,
                   duration: frame.duration ?? input.duration)
        try decide(.write(buffer, caps))
    }

    /// Replaces the audio frame with `frame`, which must have the stream's channel count and rate;
    /// its length and timestamps may differ. A frame without a presentation timestamp takes the
    /// incoming frame's; one without a duration gets the one its sample count gives.
    ///
    /// - Throws: ``MediaError/formatMismatch(_:)``, ``MediaError/wrongMediaKind(expected:given:)``
    ///   on a video stream, ``MediaError/unsupportedFormat(_:)``, or
    ///   ``MediaError/notificationExpired``.
    public func write(_ frame: AudioFrame) throws(MediaError) {
        let input = try original()
        let audio: AudioStream
        switch stream {
        case .audio(let stream): audio = stream
        case .video: throw .wrongMediaKind(expected: .video, given: .audio)
        case .unsupported(_, let reason): throw .unsupportedFormat(reason)
        }
        guard frame.channels == audio.info.channels, frame.sampleRate == audio.info.rate else {
            throw .formatMismatch("\(frame.channels) channels at \(frame.sampleRate) Hz written to a stream of "
                                  + "\(audio.info.channels) channels at \(audio.info.rate) Hz")
        }
        Self.stamp(frame.storage, presentationTimestamp: frame.presentationTimestamp ?? input.presentationTimestamp,
                   duration: frame.duration ?? frame.sampleDuration)
        try decide(.write(frame.storage, audio.caps))
    }

    /// Replaces the frame with `frame`, audio or video.
    public func write(_ frame: MediaFrame) throws(MediaError) {
        switch frame {
        case .video(let video): try write(video)
        case .audio(let audio): try write(audio)
        }
    }

    /// Sets timestamps only where they differ, so an unchanged shared buffer is not copied.
    private static func stamp(_ buffer: Buffer, presentationTimestamp: Duration?, duration: Duration?) {
        if buffer.presentationTimestamp != presentationTimestamp { buffer.presentationTimestamp = presentationTimestamp }
        if buffer.duration != duration { buffer.duration = duration }
    }

    // MARK: Drop

    /// Stops the frame here: nothing after the hook sees it.
    ///
    /// Dropping after the notification expired does nothing.
    public func drop() {
        try? decide(.drop)
    }
}
