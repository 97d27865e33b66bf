import PCastProtocol

/// The PCast iOS SDK's name for what a source device or track carries.
public typealias MediaType = MediaKind

/// What kind of source a device is.
public enum SourceDeviceType: String, Sendable, Hashable, Codable, CustomStringConvertible {
    /// Black video or silence.
    case null
    /// A camera or microphone.
    case physical
    /// Capture of the system's output: the screen (X11), a sound output's monitor.
    case systemOutput = "system-output"
    /// A test pattern or tone.
    case synthetic
    /// Media read from a URI (file, http), or a user-supplied pipeline description.
    case uri
    public var description: String { rawValue }
}

/// Which way a camera faces.
public enum FacingMode: String, Sendable, Hashable, Codable {
    case automatic, environment, user
}

/// Flash (torch) mode; video only.
public enum FlashMode: String, Sendable, Hashable, Codable {
    case automatic, alwaysOn, alwaysOff
}

/// Where a device is mounted.
public enum DeviceLocation: String, Sendable, Hashable, Codable {
    case automatic, upper, lower
}

/// Microphone polar pattern; audio only.
public enum PolarPattern: String, Sendable, Hashable, Codable {
    case automatic, omnidirectional, cardioid, subcardioid
}

/// Acoustic echo cancellation; audio only.
public enum EchoCancelationMode: String, Sendable, Hashable, Codable {
    case automatic, on, off
}

/// How captured video is oriented; video only. Linux devices have neither a rotation sensor nor a
/// UI orientation, so frames are as the device captures them (`followDeviceRotation`).
public enum VideoSourceRotationMode: String, Sendable, Hashable, Codable {
    case automatic, followDeviceRotation, followUiRotation
}

/// The capabilities a constraint can be put on, as the PCast iOS SDK names them; used to say which
/// constraint could not be met.
public enum DeviceCapability: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    case width, height, frameRate, facingMode, flashMode, deviceId, location, polarPattern
    case audioEchoCancelationMode, videoSourceRotationMode, autoFocus
    public var description: String { rawValue }
}

/// A constraint on one capability with the PCast iOS SDK's semantics: `exact`, `min` and `max` are hard
/// (a source that cannot meet them is not chosen, and if none can, the request fails naming the
/// capability); `ideal` is soft (the nearest value wins). A literal means `ideal`, as the PCast iOS SDK's
/// default constraint type is ideal.
///
/// ```swift
/// var options = UserMediaOptions()
/// options.video.height = .exact(720)
/// options.video.width = .between(800, 1500)
/// options.video.frameRate = 30                  // ideal
/// options.video.facingMode = .ideal(.user)
/// ```
public struct Constraint<Value: Sendable & Hashable>: Sendable, Hashable {
    public var exact: Value?
    public var ideal: Value?
    public var min: Value?
    public var max: Value?

    public init(exact: Value? = nil, ideal: Value? = nil, min: Value? = nil, max: Value? = nil) {
        self.exact = exact
        self.ideal = ideal
        self.min = min
        self.max = max
    }

    public static func exact(_ value: Value) -> Self { Self(exact: value) }
    public static func ideal(_ value: Value) -> Self { Self(ideal: value) }
    public static func min(_ value: Value) -> Self { Self(min: value) }
    public static func max(_ value: Value) -> Self { Self(max: value) }
    public static func between(_ lower: Value, _ upper: Value) -> Self { Self(min: lower, max: upper) }

    /// Whether any part of it is hard.
    public var isHard: Bool { exact != nil || min != nil || max != nil }
}

extension Constraint: ExpressibleByIntegerLiteral where Value: ExpressibleByIntegerLiteral {
    public init(integerLiteral value: Value.IntegerLiteralType) { self.init(ideal: Value(integerLiteral: value)) }
}

extension Constraint: ExpressibleByFloatLiteral where Value == Double {
    public init(floatLiteral value: Double) { self.init(ideal: value) }
}

extension Constraint where Value: Comparable {
    /// Whether `value` meets the hard parts.
    func admits(_ value: Value) -> Bool {
        if let exact, value != exact { return false }
        if let min, value < min { return false }
        if let max, value > max { return false }
        return true
    }
}

/// A source given directly instead of chosen among devices.
public enum MediaSourceOverride: Sendable, Hashable {
    /// Media from a URI: `file:///…/clip.mp4`, `http://…`, anything `uridecodebin` plays.
    case uri(String)
    /// A gst-launch description producing raw media of the track's kind
    /// (`videotestsrc pattern=ball`, `v4l2src device=/dev/video2 ! jpegdec`).
    case pipeline(String)
    /// Frames the application pushes (``MediaFeed/push(_:)-(VideoFrame)``), live.
    case feed(MediaFeed)
    /// The X screen (the PCast iOS SDK's system-output capture, a screencast), video only: `display` such
    /// as `:0` or `host:1.0`; nil: the `DISPLAY` environment variable's.
    case screen(display: String?)
}

/// Video options of ``UserMediaOptions``.
public struct VideoOptions: Sendable, Hashable {
    public var enabled: Bool = true
    /// A source to use instead of a device.
    public var source: MediaSourceOverride?
    /// With a ``MediaSourceOverride/uri(_:)`` source: play it again from the start at its end
    /// (seamlessly: time runs on), instead of ending the track.
    public var loop = false
    public var deviceId: Constraint<String>?
    public var width: Constraint<Int>?
    public var height: Constraint<Int>?
    public var frameRate: Constraint<Double>?
    public var facingMode: Constraint<FacingMode>?
    public var flashMode: Constraint<FlashMode>?
    public var location: Constraint<DeviceLocation>?
    public var videoSourceRotationMode: Constraint<VideoSourceRotationMode>?
    public var autoFocus: Constraint<Bool>?

    public init(enabled: Bool = true) { self.enabled = enabled }

    /// Size and rate when no constraint says otherwise.
    public static let defaultWidth = 1280
    public static let defaultHeight = 720
    public static let defaultFrameRate = 30.0
}

/// Audio options of ``UserMediaOptions``.
public struct AudioOptions: Sendable, Hashable {
    public var enabled: Bool = true
    /// A source to use instead of a device.
    public var source: MediaSourceOverride?
    /// With a ``MediaSourceOverride/uri(_:)`` source: play it again from the start at its end.
    public var loop = false
    public var deviceId: Constraint<String>?
    public var location: Constraint<DeviceLocation>?
    public var polarPattern: Constraint<PolarPattern>?
    public var echoCancelationMode: Constraint<EchoCancelationMode>?
    /// The stream's sample rate and channel count (frames are S16 interleaved at this rate).
    public var sampleRate: Int = 48_000
    public var channelCount: Int = 1

    public init(enabled: Bool = true) { self.enabled = enabled }
}

/// What ``UserMedia/getUserMedia(_:)`` should capture.
public struct UserMediaOptions: Sendable, Hashable {
    public var video = VideoOptions()
    public var audio = AudioOptions()
    public init(video: VideoOptions = VideoOptions(), audio: AudioOptions = AudioOptions()) {
        self.video = video
        self.audio = audio
    }
}

/// Why user media could not be had: a ``code`` to compare, the PCast iOS SDK's request ``status``, a human
/// ``description``, and what it concerns (a ``capability``, a ``kind``) where that matters.
///
/// A struct, not an enum, so that a new code breaks no `switch` in an application:
///
/// ```swift
/// do {
///     let media = try await UserMedia.getUserMedia(options)
/// } catch where error.code == .deviceBusy {
///     print("close the other application using the camera")
/// }
/// ```
public struct UserMediaError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure. New codes may be added in any release.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// No source can meet a hard constraint on ``UserMediaError/capability``.
        public static let constraintNotSatisfied = Code("constraintNotSatisfied")
        /// The requested device does not exist (for example a missing `/dev/video0`).
        public static let deviceNotFound = Code("deviceNotFound")
        /// The device is in use by another application.
        public static let deviceBusy = Code("deviceBusy")
        /// No source of this ``UserMediaError/kind`` exists at all.
        public static let noSource = Code("noSource")
        /// Options that contradict themselves (`min` above `max`, neither audio nor video…).
        public static let invalidOptions = Code("invalidOptions")
        /// A GStreamer element the source needs is not installed (with the Debian package).
        public static let missingElements = Code("missingElements")
        /// The source failed to start or failed while running.
        public static let sourceFailed = Code("sourceFailed")
        /// The stream was stopped.
        public static let stopped = Code("stopped")

        public var description: String { name }
    }

    public let code: Code
    /// The specifics: the device, the reason, the missing elements.
    public let detail: String
    /// The constrained capability, for ``Code/constraintNotSatisfied``.
    public let capability: DeviceCapability?
    /// The kind of source, for ``Code/noSource``.
    public let kind: MediaType?

    public init(code: Code, detail: String = "", capability: DeviceCapability? = nil, kind: MediaType? = nil) {
        self.code = code
        self.detail = detail
        self.capability = capability
        self.kind = kind
    }

    public static func constraintNotSatisfied(_ capability: DeviceCapability, _ why: String) -> UserMediaError {
        UserMediaError(code: .constraintNotSatisfied, detail: why, capability: capability)
    }
    public static func deviceNotFound(_ id: String) -> UserMediaError { UserMediaError(code: .deviceNotFound, detail: id) }
    public static func deviceBusy(_ id: String) -> UserMediaError { UserMediaError(code: .deviceBusy, detail: id) }
    public static func noSource(_ kind: MediaType) -> UserMediaError { UserMediaError(code: .noSource, kind: kind) }
    public static func invalidOptions(_ why: String) -> UserMediaError { UserMediaError(code: .invalidOptions, detail: why) }
    public static func missingElements(_ what: String) -> UserMediaError { UserMediaError(code: .missingElements, detail: what) }
    public static func sourceFailed(_ why: String) -> UserMediaError { UserMediaError(code: .sourceFailed, detail: why) }
    public static let stopped = UserMediaError(code: .stopped)

    /// The PCast iOS SDK's request status: `conflict` for a device in use, `failed` otherwise.
    public var status: RequestStatus {
        switch code {
        case .deviceBusy: return .conflict
        case .deviceNotFound: return .notFound
        case .invalidOptions: return .badRequest
        default: return .failed
        }
    }

    public var description: String {
        switch code {
        case .constraintNotSatisfied: return "constraint on \(capability.map { "\($0)" } ?? "a capability") cannot be met: \(detail)"
        case .deviceNotFound: return "no device '\(detail)'"
        case .deviceBusy: return "device '\(detail)' is in use by another application"
        case .noSource: return "no \(kind.map { "\($0)" } ?? "media") source"
        case .invalidOptions: return "invalid options: \(detail)"
        case .missingElements: return "missing GStreamer elements: \(detail)"
        case .sourceFailed: return "source failed: \(detail)"
        case .stopped: return "the stream was stopped"
        default: return detail.isEmpty ? code.description : detail
        }
    }
}
