/// The GStreamer elements PCastKit uses, what each is for, and the Debian package that provides it.
///
/// Read off `gst-inspect-1.0` + `dpkg -S` on Debian 12 (GStreamer 1.22). Used to name the package to
/// install when a description references a missing element, and by `pcast inspect`.
///
/// ```swift
/// PluginCatalog.debianPackage(forElement: "x264enc")   // "gstreamer1.0-plugins-ugly"
/// ```
public enum PluginCatalog {
    /// One element PCastKit needs.
    public struct Entry: Sendable, Hashable {
        public let element: String
        public let debianPackage: String
        public let purpose: String
        /// Optional elements make a feature available when present (echo cancellation, screen capture…).
        public let required: Bool
    }

    public static let entries: [Entry] = [
        // Sources
        .init(element: "videotestsrc", debianPackage: "gstreamer1.0-plugins-base", purpose: "synthetic video source", required: true),
        .init(element: "audiotestsrc", debianPackage: "gstreamer1.0-plugins-base", purpose: "synthetic audio source", required: true),
        .init(element: "appsrc", debianPackage: "gstreamer1.0-plugins-base", purpose: "application source", required: true),
        .init(element: "v4l2src", debianPackage: "gstreamer1.0-plugins-good", purpose: "camera capture", required: false),
        .init(element: "pulsesrc", debianPackage: "gstreamer1.0-plugins-good", purpose: "PulseAudio capture", required: false),
        .init(element: "alsasrc", debianPackage: "gstreamer1.0-alsa", purpose: "ALSA capture", required: false),
        .init(element: "ximagesrc", debianPackage: "gstreamer1.0-plugins-good", purpose: "screen capture", required: false),
        .init(element: "uridecodebin3", debianPackage: "gstreamer1.0-plugins-base", purpose: "URI sources", required: true),
        .init(element: "souphttpsrc", debianPackage: "gstreamer1.0-plugins-good", purpose: "http(s) sources", required: true),
        .init(element: "rtmp2src", debianPackage: "gstreamer1.0-plugins-bad", purpose: "RTMP ingest", required: true),
        .init(element: "rtspsrc", debianPackage: "gstreamer1.0-plugins-good", purpose: "RTSP ingest", required: false),
        // Processing
        .init(element: "videoconvert", debianPackage: "gstreamer1.0-plugins-base", purpose: "pixel format conversion", required: true),
        .init(element: "videoscale", debianPackage: "gstreamer1.0-plugins-base", purpose: "scaling", required: true),
        .init(element: "videorate", debianPackage: "gstreamer1.0-plugins-base", purpose: "frame-rate conversion", required: true),
        .init(element: "audioconvert", debianPackage: "gstreamer1.0-plugins-base", purpose: "sample format conversion", required: true),
        .init(element: "audioresample", debianPackage: "gstreamer1.0-plugins-base", purpose: "resampling", required: true),
        .init(element: "webrtcdsp", debianPackage: "gstreamer1.0-plugins-bad", purpose: "echo cancellation", required: false),
        .init(element: "netsim", debianPackage: "gstreamer1.0-plugins-bad", purpose: "network impairment in tests", required: false),
        // Codecs
        .init(element: "x264enc", debianPackage: "gstreamer1.0-plugins-ugly", purpose: "H.264 encoder (default)", required: true),
        .init(element: "openh264enc", debianPackage: "gstreamer1.0-plugins-bad", purpose: "H.264 encoder (alternative)", required: false),
        .init(element: "avdec_h264", debianPackage: "gstreamer1.0-libav", purpose: "H.264 decoder", required: true),
        .init(element: "h264parse", debianPackage: "gstreamer1.0-plugins-bad", purpose: "H.264 parser", required: true),
        .init(element: "vp8enc", debianPackage: "gstreamer1.0-plugins-good", purpose: "VP8 encoder", required: false),
        .init(element: "vp8dec", debianPackage: "gstreamer1.0-plugins-good", purpose: "VP8 decoder", required: false),
        .init(element: "vp9enc", debianPackage: "gstreamer1.0-plugins-good", purpose: "VP9 encoder", required: false),
        .init(element: "vp9dec", debianPackage: "gstreamer1.0-plugins-good", purpose: "VP9 decoder", required: false),
        .init(element: "opusenc", debianPackage: "gstreamer1.0-plugins-base", purpose: "Opus encoder", required: true),
        .init(element: "opusdec", debianPackage: "gstreamer1.0-plugins-base", purpose: "Opus decoder", required: true),
        .init(element: "avdec_aac", debianPackage: "gstreamer1.0-libav", purpose: "AAC decoder (ingest)", required: true),
        .init(element: "aacparse", debianPackage: "gstreamer1.0-plugins-good", purpose: "AAC parser (ingest)", required: true),
        .init(element: "pngenc", debianPackage: "gstreamer1.0-plugins-good", purpose: "screenshots", required: true),
        // RTP
        .init(element: "rtph264pay", debianPackage: "gstreamer1.0-plugins-good", purpose: "H.264 RTP payloader", required: true),
        .init(element: "rtph264depay", debianPackage: "gstreamer1.0-plugins-good", purpose: "H.264 RTP depayloader", required: true),
        .init(element: "rtpvp8pay", debianPackage: "gstreamer1.0-plugins-good", purpose: "VP8 RTP payloader", required: false),
        .init(element: "rtpvp8depay", debianPackage: "gstreamer1.0-plugins-good", purpose: "VP8 RTP depayloader", required: false),
        .init(element: "rtpvp9pay", debianPackage: "gstreamer1.0-plugins-good", purpose: "VP9 RTP payloader", required: false),
        .init(element: "rtpvp9depay", debianPackage: "gstreamer1.0-plugins-good", purpose: "VP9 RTP depayloader", required: false),
        .init(element: "rtpopuspay", debianPackage: "gstreamer1.0-plugins-good", purpose: "Opus RTP payloader", required: true),
        .init(element: "rtpopusdepay", debianPackage: "gstreamer1.0-plugins-good", purpose: "Opus RTP depayloader", required: true),
        .init(element: "rtpjitterbuffer", debianPackage: "gstreamer1.0-plugins-good", purpose: "jitter buffer / playout delay", required: true),
        .init(element: "udpsrc", debianPackage: "gstreamer1.0-plugins-good", purpose: "UDP receive", required: true),
        .init(element: "udpsink", debianPackage: "gstreamer1.0-plugins-good", purpose: "UDP send", required: true),
        .init(element: "multiudpsink", debianPackage: "gstreamer1.0-plugins-good", purpose: "reference relay in benchmarks", required: true),
        // Containers
        .init(element: "qtdemux", debianPackage: "gstreamer1.0-plugins-good", purpose: "mp4 demuxer", required: true),
        .init(element: "flvdemux", debianPackage: "gstreamer1.0-plugins-good", purpose: "FLV demuxer (RTMP)", required: true),
        .init(element: "flvmux", debianPackage: "gstreamer1.0-plugins-good", purpose: "FLV muxer (RTMP)", required: true),
        .init(element: "mp4mux", debianPackage: "gstreamer1.0-plugins-good", purpose: "recording", required: true),
        .init(element: "splitmuxsink", debianPackage: "gstreamer1.0-plugins-good", purpose: "recording in fragments", required: true),
        // Sinks
        .init(element: "appsink", debianPackage: "gstreamer1.0-plugins-base", purpose: "application sink", required: true),
        .init(element: "fakesink", debianPackage: "libgstreamer1.0-0", purpose: "null sink", required: true),
        .init(element: "autovideosink", debianPackage: "gstreamer1.0-plugins-good", purpose: "video display", required: false),
        .init(element: "autoaudiosink", debianPackage: "gstreamer1.0-plugins-good", purpose: "audio output", required: false),
        .init(element: "ximagesink", debianPackage: "gstreamer1.0-x", purpose: "X11 video display", required: false),
    ]

    /// Elements outside `entries` whose package is known.
    private static let otherPackages: [String: String] = [
        "fakesrc": "libgstreamer1.0-0", "capsfilter": "libgstreamer1.0-0", "queue": "libgstreamer1.0-0",
        "tee": "libgstreamer1.0-0", "identity": "libgstreamer1.0-0", "filesrc": "libgstreamer1.0-0",
        "filesink": "libgstreamer1.0-0",
        "uridecodebin": "gstreamer1.0-plugins-base", "decodebin": "gstreamer1.0-plugins-base",
        "rtpbin": "gstreamer1.0-plugins-good", "rtpvp8pay": "gstreamer1.0-plugins-good",
        "rtpvp8depay": "gstreamer1.0-plugins-good", "qtmux": "gstreamer1.0-plugins-good",
        "jpegenc": "gstreamer1.0-plugins-good", "pulsesink": "gstreamer1.0-plugins-good",
        "alsasink": "gstreamer1.0-alsa", "xvimagesink": "gstreamer1.0-x",
        "textoverlay": "gstreamer1.0-x", "timeoverlay": "gstreamer1.0-x", "clockoverlay": "gstreamer1.0-x",
        "rtmp2sink": "gstreamer1.0-plugins-bad", "srtpenc": "gstreamer1.0-plugins-bad",
        "srtpdec": "gstreamer1.0-plugins-bad", "mpegtsmux": "gstreamer1.0-plugins-bad",
        "tsdemux": "gstreamer1.0-plugins-bad", "voaacenc": "gstreamer1.0-plugins-bad",
        "avenc_aac": "gstreamer1.0-libav",
    ]

    /// The Debian package that provides an element, when known.
    public static func debianPackage(forElement name: String) -> String? {
        if let entry = entries.first(where: { $0.element == name }) { return entry.debianPackage }
        if let package = otherPackages[name] { return package }
        // Every libav element comes from one package.
        if name.hasPrefix("avdec_") || name.hasPrefix("avenc_") || name.hasPrefix("avdemux_") || name.hasPrefix("avmux_") {
            return "gstreamer1.0-libav"
        }
        return nil
    }
}
