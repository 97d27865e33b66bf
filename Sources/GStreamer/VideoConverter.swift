import CGStreamer
import CGStreamerShim
import CPixelConverter
import Synchronization

/// Converts raw video frames between pixel formats and sizes (`GstVideoConverter`).
///
/// Make one per input and output layout and reuse it: setting up costs far more than a frame.
/// Output buffers come from a pool of the converter's own, so steady conversion does not allocate.
/// Colorimetry is taken from the caps, so conversions between YUV and RGB use the right matrix.
///
/// ```swift
/// let converter = try VideoConverter(
///     from: Caps("video/x-raw,format=I420,width=1280,height=720,framerate=30/1"),
///     to: Caps("video/x-raw,format=BGRA,width=1280,height=720,framerate=30/1"))
/// let bgra = try converter.convert(sample.buffer)   // timestamps and flags are kept
/// ```
///
/// Between I420 or NV12 and BGRA at the same size (what the frame-ready API's `read(format:)` and
/// `write` need), a converter of our own does the work instead (``usesFastPath``): about 0.2 ms per
/// 720p frame instead of 0.8–2 ms, with results within ±2 per channel of GStreamer's (the same
/// matrix, range and chroma resampling). Other formats, sizes and colorimetries use GStreamer's.
///
/// Conversions on one converter run one at a time; different converters run in parallel.
/// Unchecked: lets of immutable caps and infos; the GStreamer converter is in the `Mutex` `state` (one conversion at a time).
public final class VideoConverter: @unchecked Sendable {
    /// How the conversion runs.
    ///
    /// ```swift
    /// let converter = try VideoConverter(from: input, to: output, options: .init(threads: 2))
    /// ```
    public struct Options: Sendable, Hashable {
        /// Threads one conversion is split over (1: on the calling thread only).
        public var threads: Int
        /// Whether our own I420/NV12 ↔ BGRA converter may do the work where it applies (it runs on
        /// the calling thread); `false` always uses GStreamer's.
        public var allowsFastPath: Bool
        public init(threads: Int = 1, allowsFastPath: Bool = true) {
            self.threads = threads
            self.allowsFastPath = allowsFastPath
        }
    }

    /// What is converted from and to.
    public let inputCaps: Caps
    public let outputCaps: Caps
    public let input: VideoInfo
    public let output: VideoInfo

    // Unchecked: the GstVideoConverter, its infos and buffer pool, reached only inside the converter's `Mutex`.
    private struct State: @unchecked Sendable {
        var converter: OpaquePointer
        var inputInfo: GstVideoInfo
        var outputInfo: GstVideoInfo
        var pool: UnsafeMutablePointer<GstBufferPool>
    }
    private let state: Mutex<State>
    private let fastPath: FastPath?

    /// Whether conversions run on our own I420/NV12 ↔ BGRA converter rather than GStreamer's.
    public var usesFastPath: Bool { fastPath != nil }

    /// A converter between two fixed raw video caps.
    ///
    /// - Throws: ``GStreamerError/invalidCaps(_:)`` when either caps is not fixed raw video, or
    ///   GStreamer cannot convert between them.
    public init(from inputCaps: Caps, to outputCaps: Caps, options: Options = Options()) throws(GStreamerError) {
        try GStreamerRuntime.initialize()
        // Checking the media type first spares GStreamer's error log for caps of another kind.
        for caps in [inputCaps, outputCaps] where caps.structures.first?.name.hasPrefix("video/") != true {
            throw .invalidCaps(caps.description)
        }
        guard var inputInfo = inputCaps.gstVideoInfo, let input = inputCaps.videoInfo else {
            throw .invalidCaps(inputCaps.description)
        }
        guard var outputInfo = outputCaps.gstVideoInfo, let output = outputCaps.videoInfo else {
            throw .invalidCaps(outputCaps.description)
        }
        let config = gst_structure_new_empty("GstVideoConverter")!
        var threads = GValue()
        g_value_init(&threads, pcast_g_type_uint())
        g_value_set_uint(&threads, guint(clamping: max(options.threads, 1)))
        gst_structure_take_value(config, GST_VIDEO_CONVERTER_OPT_THREADS, &threads)
        // 8-bit to 8-bit needs no dithering; turning it off keeps values exact and the work short.
        var dither = GValue()
        g_value_init(&dither, gst_video_dither_method_get_type())
        g_value_set_enum(&dither, gint(GST_VIDEO_DITHER_NONE.rawValue))
        gst_structure_take_value(config, GST_VIDEO_CONVERTER_OPT_DITHER_METHOD, &dither)
        // The converter takes the config.
        guard let converter = gst_video_converter_new(&inputInfo, &outputInfo, config) else {
            throw .invalidCaps("cannot convert \(inputCaps) to \(outputCaps)")
        }

        let pool = gst_buffer_pool_new()!
        let poolConfig = gst_buffer_pool_get_config(pool)
        gst_buffer_pool_config_set_params(poolConfig, outputCaps.pointer, guint(clamping: outputInfo.size), 0, 0)
        var params = GstAllocationParams()
        gst_allocation_params_init(&params)
        params.align = 63   // 64-byte rows starts suit the SIMD code converting into them
        gst_buffer_pool_config_set_allocator(poolConfig, nil, &params)
        guard gst_buffer_pool_set_config(pool, poolConfig) != 0, gst_buffer_pool_set_active(pool, 1) != 0 else {
            gst_video_converter_free(converter)
            gst_object_unref(UnsafeMutableRawPointer(pool))
            throw .invalidCaps("no buffer pool for \(outputCaps)")
        }
        self.inputCaps = inputCaps
        self.outputCaps = outputCaps
        fastPath = options.allowsFastPath ? FastPath(from: inputInfo, to: outputInfo) : nil
        self.input = input
        self.output = output
        state = Mutex(State(converter: converter, inputInfo: inputInfo, outputInfo: outputInfo, pool: pool))
    }

    /// A converter between two default layouts (colorimetry defaults for each format and size).
    public convenience init(from input: VideoInfo, to output: VideoInfo, options: Options = Options()) throws(GStreamerError) {
        try self.init(from: input.caps, to: output.caps, options: options)
    }

    deinit {
        state.withLock { state in
            gst_video_converter_free(state.converter)
            // Buffers still out return to an inactive pool, which frees them.
            _ = gst_buffer_pool_set_active(state.pool, 0)
            gst_object_unref(UnsafeMutableRawPointer(state.pool))
        }
    }

    /// Converts one frame into a new buffer of the output layout, keeping timestamps, offsets and flags.
    ///
    /// - Throws: ``GStreamerError/mapFailed`` when the input is smaller than its layout says or
    ///   cannot be mapped, or ``GStreamerError/flow(_:)`` when no output buffer can be had.
    public func convert(_ buffer: Buffer) throws(GStreamerError) -> Buffer {
        let source = buffer.retainedPointer()
        defer { gst_mini_object_unref(UnsafeMutableRawPointer(source).assumingMemoryBound(to: GstMiniObject.self)) }
        return try state.withLock { state throws(GStreamerError) -> Buffer in
            var acquired: UnsafeMutablePointer<GstBuffer>?
            let flow = gst_buffer_pool_acquire_buffer(state.pool, &acquired, nil)
            guard flow == GST_FLOW_OK, let destination = acquired else {
                throw .flow(String(cString: gst_flow_get_name(flow)))
            }
            // Owned from here on, so it is released on every path.
            let result = Buffer(owning: destination)
            let converter = state.converter
            let fastPath = self.fastPath
            try MappedVideoFrame.withReading(source, info: &state.inputInfo) { (input) throws(GStreamerError) in
                try MappedVideoFrame.withWriting(destination, info: &state.outputInfo) { output in
                    if let fastPath, fastPath.convert(input, output) { return }
                    gst_video_converter_frame(converter, input, output)
                }
            }
            // Timestamps, offsets and buffer flags (GStreamer leaves the pool's memory tag alone).
            let copied = GstBufferCopyFlags(rawValue: GST_BUFFER_COPY_FLAGS.rawValue | GST_BUFFER_COPY_TIMESTAMPS.rawValue)
            _ = gst_buffer_copy_into(destination, source, copied, 0, gsize.max)
            return result
        }
    }
}

/// Our own converter between 8-bit 4:2:0 YUV (I420, NV12) and BGRA of the same size, for the cases
/// it reproduces GStreamer's results in: progressive video, a YUV matrix with known Kr/Kb, 0–255
/// or 16–235 YUV, full-range RGB, chroma not vertically cosited.
struct FastPath: Sendable {
    enum Direction: Sendable {
        case toBGRA(PCastChromaResampling)
        case fromBGRA(horizontallyCosited: Bool)
    }
    let direction: Direction
    /// Distance in bytes between chroma samples of one plane: 1 for I420, 2 for NV12.
    let chromaStep: Int32
    let kr: Double
    let kb: Double
    let fullRange: Bool

    init?(from input: GstVideoInfo, to output: GstVideoInfo) {
        guard input.width == output.width, input.height == output.height, input.width > 0, input.height > 0,
              input.interlace_mode == GST_VIDEO_INTERLACE_MODE_PROGRESSIVE,
              output.interlace_mode == GST_VIDEO_INTERLACE_MODE_PROGRESSIVE else { return nil }
        let from = input.finfo.pointee.format, to = output.finfo.pointee.format
        let yuv: GstVideoInfo, rgb: GstVideoInfo
        if (from == GST_VIDEO_FORMAT_I420 || from == GST_VIDEO_FORMAT_NV12), to == GST_VIDEO_FORMAT_BGRA {
            (yuv, rgb) = (input, output)
        } else if from == GST_VIDEO_FORMAT_BGRA, (to == GST_VIDEO_FORMAT_I420 || to == GST_VIDEO_FORMAT_NV12) {
            (yuv, rgb) = (output, input)
        } else {
            return nil
        }
        var kr: gdouble = 0, kb: gdouble = 0
        guard gst_video_color_matrix_get_Kr_Kb(yuv.colorimetry.matrix, &kr, &kb) != 0,
              yuv.colorimetry.range == GST_VIDEO_COLOR_RANGE_0_255 || yuv.colorimetry.range == GST_VIDEO_COLOR_RANGE_16_235,
              rgb.colorimetry.range == GST_VIDEO_COLOR_RANGE_0_255 else { return nil }
        let site = yuv.chroma_site.rawValue
        let planar = yuv.finfo.pointee.format == GST_VIDEO_FORMAT_I420
        // GStreamer resamples vertically cosited or alternate-line chroma otherwise; not ours to copy.
        let unsupportedSite = GST_VIDEO_CHROMA_SITE_V_COSITED.rawValue | GST_VIDEO_CHROMA_SITE_ALT_LINE.rawValue
        let hCosited = site & GST_VIDEO_CHROMA_SITE_H_COSITED.rawValue != 0
        if from == GST_VIDEO_FORMAT_BGRA {
            guard site & unsupportedSite == 0 else { return nil }
            direction = .fromBGRA(horizontallyCosited: hCosited)
        } else if planar {
            // GStreamer's I420 → BGRA fast path repeats each chroma sample, whatever the siting.
            direction = .toBGRA(PCAST_CHROMA_NEAREST)
        } else {
            guard site & unsupportedSite == 0 else { return nil }
            direction = .toBGRA(hCosited ? PCAST_CHROMA_INTERPOLATE_H_COSITED : PCAST_CHROMA_INTERPOLATE)
        }
        chromaStep = planar ? 1 : 2
        self.kr = kr
        self.kb = kb
        fullRange = yuv.colorimetry.range == GST_VIDEO_COLOR_RANGE_0_255
    }

    /// Converts mapped frames; `false` when the C code refused them (GStreamer's converter then runs).
    func convert(_ input: UnsafeMutablePointer<GstVideoFrame>, _ output: UnsafeMutablePointer<GstVideoFrame>) -> Bool {
        let width = input.pointee.info.width, height = input.pointee.info.height
        switch direction {
        case .toBGRA(let resampling):
            let yuv = input.pointee
            guard let y = yuv.data.0, let u = yuv.data.1, let rgb = output.pointee.data.0 else { return false }
            let v = chromaStep == 1 ? yuv.data.2 : u + 1
            guard let v else { return false }
            return pcast_convert_yuv420_to_bgra(
                y.assumingMemoryBound(to: UInt8.self), yuv.info.stride.0,
                u.assumingMemoryBound(to: UInt8.self), v.assumingMemoryBound(to: UInt8.self),
                yuv.info.stride.1, chromaStep, width, height, resampling, kr, kb, fullRange ? 1 : 0,
                rgb.assumingMemoryBound(to: UInt8.self), output.pointee.info.stride.0) != 0
        case .fromBGRA(let hCosited):
            let yuv = output.pointee
            guard let rgb = input.pointee.data.0, let y = yuv.data.0, let u = yuv.data.1 else { return false }
            let v = chromaStep == 1 ? yuv.data.2 : u + 1
            guard let v else { return false }
            return pcast_convert_bgra_to_yuv420(
                rgb.assumingMemoryBound(to: UInt8.self), input.pointee.info.stride.0,
                y.assumingMemoryBound(to: UInt8.self), yuv.info.stride.0,
                u.assumingMemoryBound(to: UInt8.self), v.assumingMemoryBound(to: UInt8.self),
                yuv.info.stride.1, chromaStep, width, height, hCosited ? 1 : 0, kr, kb, fullRange ? 1 : 0) != 0
        }
    }
}
