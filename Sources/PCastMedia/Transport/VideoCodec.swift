import GStreamer
import Synchronization
import PCastProtocol

/// A video codec the SDK publishes and plays, with the GStreamer elements of each: the encoder
/// tuned for real time, the RTP payloader and depayloader, the decoder.
///
/// Chosen per publish in ``EncodingSettings/videoCodec`` (not in the capture's options: one
/// captured stream can be published twice, in two codecs). A viewer's pipeline follows the codec
/// the stream announces.
///
/// ```swift
/// var settings = EncodingSettings()
/// settings.videoCodec = .vp9
/// ```
public enum VideoCodec: String, Sendable, Hashable, CaseIterable, Codable {
    /// H.264 constrained baseline (x264, RFC 6184).
    case h264 = "H264"
    /// VP8 (libvpx, RFC 7741).
    case vp8 = "VP8"
    /// VP9 profile 0 (libvpx, RFC 9628).
    case vp9 = "VP9"
    /// AV1 main profile (libaom at its real-time usage; AOMedia's RTP payload format, ours:
    /// ``AV1Payload``).
    case av1 = "AV1"
    /// H.265 main profile (x265, RFC 7798). What cameras and contribution encoders send: ingested
    /// streams pass it through to recordings and HLS; SDK viewers decode it, browsers are not
    /// offered it (WHEP answers a stream's own codec, and no browser here offers H.265).
    case h265 = "H265"

    /// The codec an RTP encoding name means (`H264`, `VP8`, `VP9`, `AV1`, `H265`, in any case); nil for others.
    public init?(encodingName: String) {
        self.init(rawValue: encodingName.uppercased())
    }

    /// The RTP encoding name the signaling announces.
    public var encodingName: String { rawValue }

    /// The encoder element, named `name`, at `kilobitsPerSecond`, with a keyframe at least every
    /// `keyframeInterval` frames and one frame allowed at most `burstMilliseconds` of the bitrate.
    /// x264: zero latency, the fastest preset. libvpx: the real-time deadline, no look-ahead,
    /// error resilient (a lost packet spoils less than the rest of the frame), constant bitrate.
    /// libaom: the real-time usage at its fastest speed, no look-ahead, constant bitrate, the
    /// quantizer free over 4…63 (`av1enc`'s default bounds, both 0, abort libaom's
    /// constant-bitrate control; a lower ceiling keeps the encoder above the bitrate it is asked
    /// for: at 42, a 720p clip would not go under 1.7 Mbit/s, `pcast-bench codecs`).
    package func encoder(name: String, kilobitsPerSecond: Int, keyframeInterval: Int, burstMilliseconds: Int) -> String {
        switch self {
        case .h264:
            return "x264enc name=\(name) tune=zerolatency speed-preset=ultrafast bitrate=\(kilobitsPerSecond) "
                + "key-int-max=\(keyframeInterval) vbv-buf-capacity=\(burstMilliseconds)"
        case .h265:
            // x265's rate control takes its buffer in kilobits: the burst's share of the bitrate.
            // Its periodic keyframes are CRA pictures, before which the payloader puts no
            // parameter sets: `repeat-headers` has the encoder send them with every keyframe
            // (a viewer that joins, or a recording that starts, needs them there).
            let buffer = max(1, kilobitsPerSecond * max(burstMilliseconds, 100) / 1000)
            return "x265enc name=\(name) tune=zerolatency speed-preset=ultrafast bitrate=\(kilobitsPerSecond) key-int-max=\(keyframeInterval) "
                + "option-string=\"vbv-maxrate=\(kilobitsPerSecond):vbv-bufsize=\(buffer):frame-threads=1:pools=2:repeat-headers=1\""
        case .vp8, .vp9:
            let element = self == .vp8 ? "vp8enc" : "vp9enc"
            return "\(element) name=\(name) deadline=1 cpu-used=\(self == .vp8 ? 16 : 9) lag-in-frames=0 error-resilient=default "
                + "end-usage=cbr target-bitrate=\(kilobitsPerSecond * 1000) keyframe-max-dist=\(keyframeInterval) "
                + "buffer-size=\(max(burstMilliseconds, 100)) buffer-initial-size=\(max(burstMilliseconds, 100) / 2) threads=2"
        case .av1:
            return "av1enc name=\(name) usage-profile=realtime cpu-used=10 lag-in-frames=0 end-usage=cbr target-bitrate=\(kilobitsPerSecond) "
                + "keyframe-max-dist=\(keyframeInterval) min-quantizer=4 max-quantizer=63 buf-sz=\(max(burstMilliseconds, 100)) "
                + "buf-initial-sz=\(max(burstMilliseconds, 100) / 2) buf-optimal-sz=\(max(burstMilliseconds, 100) / 2) threads=2 row-mt=true"
        }
    }

    /// Sets a running encoder's bitrate (bits per second).
    func setBitrate(_ bitsPerSecond: Int, on encoder: Element) throws(GStreamerError) {
        switch self {
        case .h264, .h265: try encoder.set("bitrate", UInt32(max(16, bitsPerSecond / 1000)))
        case .vp8, .vp9: try encoder.set("target-bitrate", Int32(clamping: max(16_000, bitsPerSecond)))
        case .av1: try encoder.set("target-bitrate", UInt32(max(16, bitsPerSecond / 1000)))
        }
    }

    /// Makes a running encoder answer keyframe requests (`GstForceKeyUnit` from the RTP session
    /// when a PLI or FIR comes). x264 and libvpx do so themselves. GStreamer 1.22's `av1enc`
    /// ignores the event, so for AV1 a request sets `keyframe-max-dist` to 0 (every frame a
    /// keyframe) until the first keyframe leaves the encoder, then restores `keyframeInterval`;
    /// libaom applies a change one frame late, so a request costs two keyframes in a row
    /// (measured: requested at frame 20, keyframes at 19 and 20 of the output).
    func answerKeyframeRequests(of encoder: Element, keyframeInterval: Int) {
        guard self == .av1, let source = encoder.pads.first(where: \.isSource) else { return }
        let forcing = KeyframeForcing()
        source.addUpstreamEventProbe(named: "GstForceKeyUnit") { _ in
            if !forcing.active.exchange(true, ordering: .relaxed) { try? encoder.set("keyframe-max-dist", Int32(0)) }
            return .pass
        }
        source.addBufferProbe { buffer in
            if buffer.isKeyframe, forcing.active.exchange(false, ordering: .relaxed) {
                try? encoder.set("keyframe-max-dist", Int32(clamping: keyframeInterval))
            }
            return .pass
        }
    }

    /// The RTP payloader element, named `name`, with the payload type, SSRC and timestamp offset
    /// given, packets of at most 1,200 bytes.
    func payloader(name: String, payloadType: String, ssrc: String, timestampOffset: String) -> String {
        let common = "name=\(name) pt=\(payloadType) ssrc=\(ssrc) timestamp-offset=\(timestampOffset) mtu=1200"
        switch self {
        case .h264: return "rtph264pay \(common) config-interval=-1 aggregate-mode=zero-latency"
        case .h265: return "rtph265pay \(common) config-interval=-1 aggregate-mode=zero-latency"
        case .vp8: return "rtpvp8pay \(common) picture-id-mode=15-bit"
        case .vp9: return "rtpvp9pay \(common) picture-id-mode=15-bit"
        case .av1:
            AV1Elements.register()
            return "pcastav1pay \(common)"
        }
    }

    /// The depayloader: it starts at a keyframe and asks for one after a loss it cannot repair
    /// (GStreamer 1.22's H.265 depayloader has neither setting: its decoder asks instead, see
    /// ``decoder``).
    var depayloader: String {
        let keyframes = "request-keyframe=true wait-for-keyframe=true"
        switch self {
        case .h264: return "rtph264depay \(keyframes)"
        case .h265: return "rtph265depay"
        case .vp8: return "rtpvp8depay \(keyframes)"
        case .vp9: return "rtpvp9depay \(keyframes)"
        case .av1:
            AV1Elements.register()
            return "pcastav1depay \(keyframes)"
        }
    }

    /// What parses the depayloaded video into whole access units for a recording (with the
    /// picture size in its caps); nil for VP8, which recordings do not take (its MP4 binding,
    /// `vp08`, is read by next to no player and by no HLS client).
    var recordingParser: String? {
        switch self {
        case .h264: return "h264parse config-interval=-1 ! video/x-h264,stream-format=byte-stream,alignment=au"
        case .h265: return "h265parse config-interval=-1 ! video/x-h265,stream-format=byte-stream,alignment=au"
        case .vp8: return nil
        case .vp9: return "vp9parse ! video/x-vp9"
        case .av1: return "av1parse ! video/x-av1,stream-format=obu-stream,alignment=tu"
        }
    }

    /// The decoder, decoding every frame however late (`qos=false`: skipping a frame that later
    /// frames refer to would spoil the picture until the next keyframe). H.264 with slice threads
    /// only (frame threads add two frames of latency).
    var decoder: String {
        switch self {
        case .h264: return "avdec_h264 thread-type=slice qos=false"
        // Asks for a keyframe (upstream, to the RTP session: a PLI) when a frame arrives damaged,
        // and drops what it cannot decode whole: what the other depayloaders' settings do.
        case .h265: return "avdec_h265 thread-type=slice qos=false automatic-request-sync-points=true discard-corrupted-frames=true"
        case .vp8: return "vp8dec qos=false"
        case .vp9: return "vp9dec qos=false"
        case .av1: return "av1dec qos=false"
        }
    }

    /// Whether an RTP packet of this codec begins a keyframe a decoder can start at (read from
    /// its payload's first bytes by ``VideoPayload``; for H.264 its parameter sets count too).
    static func packetStartsKeyframe(_ codec: VideoCodec, _ packet: UnsafeRawBufferPointer) -> Bool {
        // Every received video packet passes here: one parse of its header for both questions.
        guard let layout = try? RTPPacketLayout(parsing: packet) else { return false }
        let starts = codec.payload.payloadStarts(UnsafeRawBufferPointer(rebasing: packet[layout.payloadRange]))
        return starts.keyframe || starts.parameterSets
    }

    /// The RTP payload format (read per packet: no name lookup).
    var payload: VideoPayload {
        switch self {
        case .h264: .h264
        case .h265: .h265
        case .vp8: .vp8
        case .vp9: .vp9
        case .av1: .av1
        }
    }
}

/// Whether an AV1 encoder is making keyframes on request (``VideoCodec/answerKeyframeRequests(of:keyframeInterval:)``).
private final class KeyframeForcing: Sendable {
    let active = Atomic<Bool>(false)
}
