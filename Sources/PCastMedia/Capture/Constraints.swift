import PCastProtocol

/// The seed's name for what a source device or track carries.
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

/// The capabilities a constraint can be put on, as the seed names them; used to say which
/// constraint could not be met.
public enum DeviceCapability: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    case width, height, frameRate, facingMode, flashMode, deviceId, location, polarPattern
    case audioEchoCancelationMode, videoSourceRotationMode, autoFocus
    public var description: String { rawValue }
}

/// A constraint on one capability with the seed's semantics: `exact`, `min` and `max` are hard
/// (a source that cannot meet them is not chosen, and if none can, the request fails naming the
/// capability); `ideal` is soft (the nearest value wins). A literal means `ideal`, as the seed's
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

/// Why user media could not be had. ``status`` is the seed's request status for it.
public enum UserMediaError: Error, Sendable, Hashable, CustomStringConvertible {
    /// No source can meet a hard constraint on `capability`.
    case constraintNotSatisfied(DeviceCapability, String)
    /// The requested device does not exist (for example a missing `/dev/video0`).
    case deviceNotFound(String)
    /// The device is in use by another application.
    case deviceBusy(String)
    /// No source of this kind exists at all.
    case noSource(MediaType)
    /// Options that contradict themselves (`min` above `max`, neither audio nor video enabled…).
    case invalidOptions(String)
    /// A GStreamer element the source needs is not installed (with the Debian package).
    case missingElements(String)
    /// The source failed to start or failed while running.
    case sourceFailed(String)
    /// The stream was stopped.
    case stopped

    /// The seed's request status: `conflict` for a device in use, `failed` otherwise.
    public var status: RequestStatus {
        switch self {
        case .deviceBusy: return .conflict
        case .deviceNotFound: return .notFound
        case .invalidOptions: return .badRequest
        default: return .failed
        }
    }

    public var description: String {
        switch self {
        case .constraintNotSatisfied(let capability, let why): return "constraint on \(capability) cannot be met: \(why)"
        case .deviceNotFound(let id): return "no device '\(id)'"
        case .deviceBusy(let id): return "device '\(id)' is in use by another application"
        case .noSource(let kind): return "no \(kind) source"
        case .invalidOptions(let why): return "invalid options: \(why)"
        case .missingElements(let what): return "missing GStreamer elements: \(what)"
        case .sourceFailed(let why): return "source failed: \(why)"
        case .stopped: return "the stream was stopped"
        }
    }
}
