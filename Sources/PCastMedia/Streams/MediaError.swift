import GStreamer

/// Every error the media engine reports: a ``code`` to compare, a human ``description``, and the
/// error underneath (a `GStreamerError`), kept as a value.
///
/// A struct, not an enum, so that a new code breaks no `switch` in an application:
///
/// ```swift
/// hook.setFrameReadyCallback { notification in
///     do {
///         let frame = try notification.read(format: .bgra)
///         try notification.write(frame)
///     } catch where error.code == .formatNotAccepted {
///         print("downstream refuses \(error.detail)")
///     } catch {
///         print(error)
///     }
/// }
/// ```
public struct MediaError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure. New codes may be added in any release.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// A ``FrameNotification`` was used after its callback returned.
        public static let notificationExpired = Code("notificationExpired")
        /// The pad carries media the hook cannot read or write as raw frames (encoded media, audio
        /// that is not S16 interleaved, memory other than system memory), or no format was
        /// negotiated yet.
        public static let unsupportedFormat = Code("unsupportedFormat")
        /// An audio frame was written to a video stream, or the other way round.
        public static let wrongMediaKind = Code("wrongMediaKind")
        /// A written audio frame whose channel count or sample rate differs from the stream's.
        public static let formatMismatch = Code("formatMismatch")
        /// A frame whose description cannot be (unknown pixel format, zero size, too few bytes).
        public static let invalidFrame = Code("invalidFrame")
        /// Downstream refused the caps a written frame needs (its size or format); put a
        /// `videoconvert ! videoscale` after the hook to let the stream change size.
        public static let formatNotAccepted = Code("formatNotAccepted")
        /// The hook can only be installed on an element's source pad.
        public static let unsupportedPad = Code("unsupportedPad")
        /// The GStreamer layer failed (element or pad not found, conversion or mapping failure).
        public static let gstreamer = Code("gstreamer")

        public var description: String { name }
    }

    public let code: Code
    /// The specifics: the reason, the caps refused.
    public let detail: String
    /// The error underneath, kept as a value (the GStreamer layer's for ``Code/gstreamer``).
    public let underlying: (any Error & Sendable)?

    public init(code: Code, detail: String = "", underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.detail = detail
        self.underlying = underlying
    }

    public static let notificationExpired = MediaError(code: .notificationExpired)
    public static func unsupportedFormat(_ reason: String) -> MediaError { MediaError(code: .unsupportedFormat, detail: reason) }
    public static func wrongMediaKind(expected: MediaKind, given: MediaKind) -> MediaError {
        MediaError(code: .wrongMediaKind, detail: "\(given == .audio ? "an" : "a") \(given) frame was written to \(expected == .audio ? "an" : "a") \(expected) stream")
    }
    public static func formatMismatch(_ reason: String) -> MediaError { MediaError(code: .formatMismatch, detail: reason) }
    public static func invalidFrame(_ reason: String) -> MediaError { MediaError(code: .invalidFrame, detail: reason) }
    public static func formatNotAccepted(_ caps: String) -> MediaError { MediaError(code: .formatNotAccepted, detail: caps) }
    public static func unsupportedPad(_ reason: String) -> MediaError { MediaError(code: .unsupportedPad, detail: reason) }
    public static func gstreamer(_ error: GStreamerError) -> MediaError {
        MediaError(code: .gstreamer, detail: error.description, underlying: error)
    }

    public var description: String {
        switch code {
        case .notificationExpired: return "the frame notification was used after its callback returned"
        case .unsupportedFormat: return "unsupported media format: \(detail)"
        case .wrongMediaKind: return detail
        case .formatMismatch: return "written frame does not match the stream: \(detail)"
        case .invalidFrame: return "invalid frame: \(detail)"
        case .formatNotAccepted: return "downstream does not accept \(detail)"
        case .unsupportedPad: return "cannot hook this pad: \(detail)"
        default: return detail.isEmpty ? code.description : detail
        }
    }

    /// Equal when code and detail are (the underlying error is described by the detail).
    public static func == (lhs: MediaError, rhs: MediaError) -> Bool { lhs.code == rhs.code && lhs.detail == rhs.detail }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(detail)
    }
}
