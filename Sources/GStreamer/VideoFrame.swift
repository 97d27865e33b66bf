import CGStreamer

/// The plane layout a producer attached to a video buffer (`GstVideoMeta`), when it differs from
/// the default layout its caps imply (decoders and capture devices often pad rows).
///
/// Plane offsets count from the start of the buffer's bytes, as ``Buffer/withUnsafeBytes(_:)``
/// shows them.
///
/// ```swift
/// if let meta = sample.buffer.videoMeta {
///     print(meta.strides)   // for example [1344, 672, 672] for a 1280-wide I420 frame
/// }
/// ```
public struct VideoMeta: Sendable, Hashable {
    public var format: VideoFormat
    public var width: Int
    public var height: Int
    /// Bytes per row, one per plane.
    public var strides: [Int]
    /// Byte offset of each plane from the start of the buffer.
    public var offsets: [Int]

    public init(format: VideoFormat, width: Int, height: Int, strides: [Int], offsets: [Int]) {
        self.format = format
        self.width = width
        self.height = height
        self.strides = strides
        self.offsets = offsets
    }
}

extension Buffer {
    /// The video plane layout attached to this buffer, if any.
    public var videoMeta: VideoMeta? {
        let pointer = retainedPointer()
        defer { gst_mini_object_unref(UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: GstMiniObject.self)) }
        // gst_buffer_get_video_meta is a macro over gst_buffer_get_meta and the meta API type.
        guard let meta = gst_buffer_get_meta(pointer, gst_video_meta_api_get_type()) else { return nil }
        var video = UnsafeMutableRawPointer(meta).assumingMemoryBound(to: GstVideoMeta.self).pointee
        let planes = Int(min(video.n_planes, UInt32(GST_VIDEO_MAX_PLANES)))
        let strides = Swift.withUnsafeBytes(of: &video.stride) { Array($0.bindMemory(to: Int32.self).prefix(planes)).map(Int.init) }
        let offsets = Swift.withUnsafeBytes(of: &video.offset) { Array($0.bindMemory(to: Int.self).prefix(planes)) }
        return VideoMeta(
            format: VideoFormat(rawValue: String(cString: gst_video_format_to_string(video.format))),
            width: Int(video.width), height: Int(video.height), strides: strides, offsets: offsets)
    }
}

extension Buffer {
    /// Attaches a plane layout (`GstVideoMeta`) to this buffer, for frames whose rows or planes do
    /// not lie where their caps' default layout puts them (padded rows, planes apart).
    ///
    /// ```swift
    /// // A 1280-wide I420 frame with rows padded to 1344 bytes (672 for chroma).
    /// buffer.attachVideoMeta(VideoMeta(format: .i420, width: 1280, height: 720,
    ///                                  strides: [1344, 672, 672], offsets: [0, 967_680, 1_209_600]))
    /// ```
    ///
    /// - Throws: ``GStreamerError/invalidCaps(_:)`` for an unknown format, a plane count that is not
    ///   the format's, or planes that do not fit in the buffer.
    public func attachVideoMeta(_ meta: VideoMeta) throws(GStreamerError) {
        let format = meta.format.gstFormat
        var info = GstVideoInfo()
        guard format != GST_VIDEO_FORMAT_UNKNOWN, format != GST_VIDEO_FORMAT_ENCODED,
              let width = UInt32(exactly: meta.width), let height = UInt32(exactly: meta.height),
              gst_video_info_set_format(&info, format, width, height) != 0,
              meta.strides.count == Int(info.finfo.pointee.n_planes), meta.offsets.count == meta.strides.count,
              meta.strides.allSatisfy({ $0 > 0 && $0 <= Int(Int32.max) }) else {
            throw .invalidCaps("no \(meta.format) layout \(meta.strides) \(meta.offsets) for \(meta.width)×\(meta.height)")
        }
        // Every plane's last row must end inside the buffer.
        let finfo = info.finfo.pointee
        let wSub = Swift.withUnsafeBytes(of: finfo.w_sub) { Array($0.bindMemory(to: guint.self)) }
        let hSub = Swift.withUnsafeBytes(of: finfo.h_sub) { Array($0.bindMemory(to: guint.self)) }
        let pixelStrides = Swift.withUnsafeBytes(of: finfo.pixel_stride) { Array($0.bindMemory(to: gint.self)) }
        for plane in 0..<meta.strides.count {
            // The plane's first component gives its subsampling; rows round up (odd sizes).
            var components = [gint](repeating: -1, count: Int(GST_VIDEO_MAX_COMPONENTS))
            gst_video_format_info_component(info.finfo, guint(plane), &components)
            let component = Int(components[0])
            guard component >= 0 else { throw .invalidCaps("\(meta.format) has no plane \(plane)") }
            let rows = (meta.height + (1 << Int(hSub[component])) - 1) >> Int(hSub[component])
            let rowBytes = ((meta.width + (1 << Int(wSub[component])) - 1) >> Int(wSub[component])) * Int(pixelStrides[component])
            guard meta.strides[plane] >= rowBytes, meta.offsets[plane] >= 0,
                  meta.offsets[plane] + meta.strides[plane] * (rows - 1) + rowBytes <= size else {
                throw .invalidCaps("plane \(plane) of \(meta.format) \(meta.width)×\(meta.height) does not fit in \(size) bytes")
            }
        }
        var offsets = meta.offsets.map { gsize($0) }
        var strides = meta.strides.map { gint($0) }
        withWritablePointer { pointer in
            _ = gst_buffer_add_video_meta_full(pointer, GST_VIDEO_FRAME_FLAG_NONE, format, width, height,
                                               guint(strides.count), &offsets, &strides)
        }
    }
}

/// A buffer mapped as a video frame (`GstVideoFrame`) for the length of one call.
///
/// The mapping honours a buffer's `GstVideoMeta`, so padded layouts map correctly.
enum MappedVideoFrame {
    /// Maps `buffer` for reading as described by `info` and runs `body` with the mapped frame.
    static func withReading<R>(
        _ buffer: UnsafeMutablePointer<GstBuffer>, info: inout GstVideoInfo,
        _ body: (UnsafeMutablePointer<GstVideoFrame>) throws(GStreamerError) -> R
    ) throws(GStreamerError) -> R {
        var frame = GstVideoFrame()
        guard gst_video_frame_map(&frame, &info, buffer, GST_MAP_READ) != 0 else { throw .mapFailed }
        defer { gst_video_frame_unmap(&frame) }
        return try body(&frame)
    }

    /// Maps a writable `buffer` for writing as described by `info` and runs `body` with the mapped frame.
    static func withWriting<R>(
        _ buffer: UnsafeMutablePointer<GstBuffer>, info: inout GstVideoInfo,
        _ body: (UnsafeMutablePointer<GstVideoFrame>) throws(GStreamerError) -> R
    ) throws(GStreamerError) -> R {
        var frame = GstVideoFrame()
        guard gst_video_frame_map(&frame, &info, buffer, GST_MAP_WRITE) != 0 else { throw .mapFailed }
        defer { gst_video_frame_unmap(&frame) }
        return try body(&frame)
    }
}

extension Caps {
    /// The same raw video caps with another pixel format and size.
    ///
    /// Frame rate, pixel aspect ratio and interlacing are kept; colorimetry and chroma siting are
    /// kept when the new format is of the same family (YUV or RGB) and take the new format's
    /// defaults otherwise. Returns `self` when nothing changes.
    ///
    /// ```swift
    /// let caps = try Caps("video/x-raw,format=I420,width=1280,height=720,framerate=30/1")
    /// let bgra = try caps.replacingVideoLayout(format: .bgra, width: 640, height: 360)
    /// bgra.videoInfo?.strides   // [2560]
    /// ```
    ///
    /// - Throws: ``GStreamerError/invalidCaps(_:)`` when these are not fixed raw video caps, or the
    ///   format or size is not valid.
    public func replacingVideoLayout(format: VideoFormat, width: Int, height: Int) throws(GStreamerError) -> Caps {
        // Checking the media type first spares GStreamer's error log for caps of another kind.
        var info = GstVideoInfo()
        guard structures.first?.name.hasPrefix("video/") == true,
              gst_video_info_from_caps(&info, pointer) != 0 else { throw .invalidCaps(description) }
        let gstFormat = format.gstFormat
        guard gstFormat != GST_VIDEO_FORMAT_UNKNOWN, gstFormat != GST_VIDEO_FORMAT_ENCODED,
              let w = UInt32(exactly: width), let h = UInt32(exactly: height), w > 0, h > 0 else {
            throw .invalidCaps("video/x-raw,format=\(format),width=\(width),height=\(height)")
        }
        if gstFormat == info.finfo.pointee.format, Int(info.width) == width, Int(info.height) == height { return self }
        var result = GstVideoInfo()
        guard gst_video_info_set_interlaced_format(&result, gstFormat, info.interlace_mode, w, h) != 0 else {
            throw .invalidCaps("video/x-raw,format=\(format),width=\(width),height=\(height)")
        }
        result.fps_n = info.fps_n
        result.fps_d = info.fps_d
        result.par_n = info.par_n
        result.par_d = info.par_d
        let family = GST_VIDEO_FORMAT_FLAG_YUV.rawValue | GST_VIDEO_FORMAT_FLAG_RGB.rawValue | GST_VIDEO_FORMAT_FLAG_GRAY.rawValue
        if info.finfo.pointee.flags.rawValue & family == result.finfo.pointee.flags.rawValue & family {
            result.colorimetry = info.colorimetry
            result.chroma_site = info.chroma_site
        }
        guard let caps = gst_video_info_to_caps(&result) else {
            throw .invalidCaps("video/x-raw,format=\(format),width=\(width),height=\(height)")
        }
        return Caps(owning: caps)
    }

    /// The full GStreamer description of fixed raw video caps (colorimetry included).
    var gstVideoInfo: GstVideoInfo? {
        var info = GstVideoInfo()
        guard gst_video_info_from_caps(&info, pointer) != 0 else { return nil }
        return info
    }
}
