import CGStreamer

/// Media capabilities (GStreamer caps): what a pad can carry or is carrying.
///
/// ```swift
/// let caps = try Caps("video/x-raw,format=I420,width=1280,height=720,framerate=30/1")
/// caps.videoInfo?.width        // 1280
/// ```
///
/// Immutable once made, so it is safe to share between threads.
/// Unchecked: immutable once made: the GstCaps are never changed after creation.
public final class Caps: @unchecked Sendable, CustomStringConvertible, Hashable {
    package let pointer: UnsafeMutablePointer<GstCaps>

    /// Parses GStreamer's caps syntax.
    public init(_ string: String) throws(GStreamerError) {
        try GStreamerRuntime.initialize()
        guard let caps = gst_caps_from_string(string) else { throw .invalidCaps(string) }
        pointer = caps
    }

    init(owning pointer: UnsafeMutablePointer<GstCaps>) {
        self.pointer = pointer
    }

    init(retaining pointer: UnsafeMutablePointer<GstCaps>) {
        _ = gst_mini_object_ref(UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstMiniObject.self))
        self.pointer = pointer
    }

    deinit {
        gst_mini_object_unref(UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstMiniObject.self))
    }

    public var description: String {
        guard let text = gst_caps_to_string(pointer) else { return "" }
        defer { g_free(text) }
        return String(cString: text)
    }

    public var isAny: Bool { gst_caps_is_any(pointer) != 0 }
    public var isEmpty: Bool { gst_caps_is_empty(pointer) != 0 }
    /// Fixed caps describe exactly one format (what flows on a negotiated pad).
    public var isFixed: Bool { gst_caps_is_fixed(pointer) != 0 }

    /// The structures, in order.
    public var structures: [Structure] {
        (0..<gst_caps_get_size(pointer)).compactMap { index in
            gst_caps_get_structure(pointer, index).map { Structure(copying: $0) }
        }
    }

    /// Whether the two have any format in common.
    public func canIntersect(_ other: Caps) -> Bool { gst_caps_can_intersect(pointer, other.pointer) != 0 }

    /// Raw video info, when these are fixed raw video caps.
    public var videoInfo: VideoInfo? { VideoInfo(caps: self) }

    /// Raw audio info, when these are fixed raw audio caps.
    public var audioInfo: AudioInfo? { AudioInfo(caps: self) }

    public static func == (lhs: Caps, rhs: Caps) -> Bool {
        lhs.pointer == rhs.pointer || gst_caps_is_equal(lhs.pointer, rhs.pointer) != 0
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(description)
    }
}

/// A raw video pixel format (GStreamer's name: `I420`, `NV12`, `BGRA` …).
public struct VideoFormat: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    public static let i420 = VideoFormat(rawValue: "I420")
    public static let nv12 = VideoFormat(rawValue: "NV12")
    public static let bgra = VideoFormat(rawValue: "BGRA")
    public static let rgba = VideoFormat(rawValue: "RGBA")
    public static let bgrx = VideoFormat(rawValue: "BGRx")
    public static let rgb = VideoFormat(rawValue: "RGB")
    public static let yuy2 = VideoFormat(rawValue: "YUY2")
    public static let gray8 = VideoFormat(rawValue: "GRAY8")

    var gstFormat: GstVideoFormat { gst_video_format_from_string(rawValue) }
}

/// The layout of raw video frames: size, format, and where each plane lives in a buffer.
///
/// ```swift
/// let info = try VideoInfo(format: .i420, width: 1280, height: 720, frameRate: 30)
/// info.strides   // [1280, 640, 640]
/// info.offsets   // [0, 921600, 1152000]
/// ```
public struct VideoInfo: Sendable, Hashable {
    public var format: VideoFormat
    public var width: Int
    public var height: Int
    /// Frames per second as a fraction; `0/1` for variable rate.
    public var frameRateNumerator: Int
    public var frameRateDenominator: Int
    /// Bytes per row, one per plane.
    public var strides: [Int]
    /// Byte offset of each plane from the start of the frame.
    public var offsets: [Int]
    /// Bytes in one frame.
    public var size: Int

    public var planeCount: Int { strides.count }
    public var frameRate: Double {
        frameRateDenominator == 0 ? 0 : Double(frameRateNumerator) / Double(frameRateDenominator)
    }

    /// Reads fixed raw video caps.
    public init?(caps: Caps) {
        var info = GstVideoInfo()
        guard gst_video_info_from_caps(&info, caps.pointer) != 0 else { return nil }
        self.init(info)
    }

    /// The default layout GStreamer uses for a format and size.
    public init(format: VideoFormat, width: Int, height: Int, frameRate: Int = 0) throws(GStreamerError) {
        try GStreamerRuntime.initialize()
        let gstFormat = format.gstFormat
        guard gstFormat != GST_VIDEO_FORMAT_UNKNOWN, width > 0, height > 0,
              let w = UInt32(exactly: width), let h = UInt32(exactly: height) else {
            throw .invalidCaps("video/x-raw,format=\(format),width=\(width),height=\(height)")
        }
        var info = GstVideoInfo()
        guard gst_video_info_set_format(&info, gstFormat, w, h) != 0 else {
            throw .invalidCaps("video/x-raw,format=\(format),width=\(width),height=\(height)")
        }
        info.fps_n = Int32(clamping: frameRate)
        info.fps_d = 1
        self.init(info)
    }

    init(_ info: GstVideoInfo) {
        var info = info
        let planes = Int(info.finfo.pointee.n_planes)
        format = VideoFormat(rawValue: String(cString: gst_video_format_to_string(info.finfo.pointee.format)))
        width = Int(info.width)
        height = Int(info.height)
        frameRateNumerator = Int(info.fps_n)
        frameRateDenominator = Int(info.fps_d)
        strides = withUnsafeBytes(of: &info.stride) { Array($0.bindMemory(to: Int32.self).prefix(planes)).map(Int.init) }
        offsets = withUnsafeBytes(of: &info.offset) { Array($0.bindMemory(to: Int.self).prefix(planes)) }
        size = Int(info.size)
    }

    /// Fixed caps for this layout.
    public var caps: Caps {
        var caps = "video/x-raw,format=\(format.rawValue),width=\(width),height=\(height)"
        caps += ",framerate=\(frameRateNumerator)/\(max(frameRateDenominator, 1))"
        // Force-unwrapped: the fields were validated when this value was made.
        return try! Caps(caps)
    }
}

/// The layout of raw audio: sample format, rate and channels.
public struct AudioInfo: Sendable, Hashable {
    /// GStreamer's sample format name (`S16LE`, `F32LE` …).
    public var format: String
    public var rate: Int
    public var channels: Int
    /// Bytes per frame (one sample of every channel).
    public var bytesPerFrame: Int
    public var interleaved: Bool

    public init?(caps: Caps) {
        var info = GstAudioInfo()
        guard gst_audio_info_from_caps(&info, caps.pointer) != 0, let finfo = info.finfo else { return nil }
        format = String(cString: gst_audio_format_to_string(finfo.pointee.format))
        rate = Int(info.rate)
        channels = Int(info.channels)
        bytesPerFrame = Int(info.bpf)
        interleaved = info.layout == GST_AUDIO_LAYOUT_INTERLEAVED
    }
}
