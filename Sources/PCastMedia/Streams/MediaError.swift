import GStreamer

/// Every error the media engine reports.
///
/// ```swift
/// hook.setFrameReadyCallback { notification in
///     do {
///         let frame = try notification.read(format: .bgra)
///         try notification.write(frame)
///     } catch .formatNotAccepted(let caps) {
///         print("downstream refuses \(caps)")
///     } catch {
///         print(error)
///     }
/// }
/// ```
public enum MediaError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A ``FrameNotification`` was used after its callback returned.
    case notificationExpired
    /// The pad carries media the hook cannot read or write as raw frames (encoded media, audio that
    /// is not S16 interleaved, memory other than system memory), or no format was negotiated yet.
    case unsupportedFormat(String)
    /// An audio frame was written to a video stream, or the other way round.
    case wrongMediaKind(expected: MediaKind, given: MediaKind)
    /// A written audio frame whose channel count or sample rate differs from the stream's.
    case formatMismatch(String)
    /// A frame whose description cannot be (unknown pixel format, zero size, too few bytes).
    case invalidFrame(String)
    /// Downstream refused the caps a written frame needs (its size or format); put a
    /// `videoconvert ! videoscale` after the hook to let the stream change size.
    case formatNotAccepted(String)
    /// The hook can only be installed on an element's source pad.
    case unsupportedPad(String)
    /// An error from the GStreamer layer (element or pad not found, conversion or mapping failure).
    case gstreamer(GStreamerError)

    public var description: String {
        switch self {
        case .notificationExpired: return "the frame notification was used after its callback returned"
        case .unsupportedFormat(let reason): return "unsupported media format: \(reason)"
        case .wrongMediaKind(let expected, let given): return "a \(given) frame was written to a \(expected) stream"
        case .formatMismatch(let reason): return "written frame does not match the stream: \(reason)"
        case .invalidFrame(let reason): return "invalid frame: \(reason)"
        case .formatNotAccepted(let caps): return "downstream does not accept \(caps)"
        case .unsupportedPad(let reason): return "cannot hook this pad: \(reason)"
        case .gstreamer(let error): return error.description
        }
    }
}
