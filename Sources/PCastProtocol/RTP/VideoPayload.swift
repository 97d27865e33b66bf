/// The video RTP payload formats the platform carries, and where each one's keyframes start: the
/// one place a codec's name leads to its payload reader (the relay and the SDK's receiver both ask here).
///
/// ```swift
/// if VideoPayload(encodingName: "VP9")?.packetStartsKeyframe(bytes) == true { resumeHere() }
/// ```
public enum VideoPayload: String, Sendable, Hashable, CaseIterable {
    /// RFC 6184.
    case h264 = "H264"
    /// RFC 7741.
    case vp8 = "VP8"
    /// RFC 9628.
    case vp9 = "VP9"
    /// AOMedia's RTP payload format for AV1 (``AV1Payload``).
    case av1 = "AV1"
    /// RFC 7798 (``H265Payload``).
    case h265 = "H265"

    /// The format an RTP encoding name means (in any case); nil for one the platform does not carry.
    public init?(encodingName: String) {
        self.init(rawValue: encodingName.uppercased())
    }

    /// Whether the RTP packet begins a keyframe: H.264's IDR slice, VP8's and VP9's key frame
    /// (its first packet), AV1's first packet of a coded video sequence, H.265's IRAP picture.
    public func packetStartsKeyframe(_ packet: UnsafeRawBufferPointer) -> Bool {
        switch self {
        case .h264: H264Payload.packetStartsKeyframe(packet)
        case .vp8: VP8Payload.packetStartsKeyframe(packet)
        case .vp9: VP9Payload.packetStartsKeyframe(packet)
        case .av1: AV1Payload.packetStartsKeyframe(packet)
        case .h265: H265Payload.packetStartsKeyframe(packet)
        }
    }

    /// Whether the format sends its parameter sets in band before keyframes (H.264, H.265): a
    /// receiver that joins needs them, not just the keyframe.
    public var sendsParameterSets: Bool { self == .h264 || self == .h265 }

    /// Whether an RTP payload (the packet's, header removed) begins a keyframe, and whether it
    /// begins with parameter sets (false for formats without them): one parse of the packet's
    /// header for both questions, for code that reads every packet.
    public func payloadStarts(_ payload: UnsafeRawBufferPointer) -> (keyframe: Bool, parameterSets: Bool) {
        switch self {
        case .h264: (H264Payload.startsKeyframe(payload), H264Payload.startsWithParameterSets(payload))
        case .h265: (H265Payload.startsKeyframe(payload), H265Payload.startsWithParameterSets(payload))
        case .vp8: (VP8Payload.startsKeyframe(payload), false)
        case .vp9: (VP9Payload.startsKeyframe(payload), false)
        case .av1: (AV1Payload.startsKeyframe(payload), false)
        }
    }

    /// Whether a decoder that has seen nothing of this encoding can start at the packet: for H.264
    /// the keyframe's parameter sets (an IDR slice alone would be decoded with another encoding's),
    /// for the others the keyframe itself (it carries its size and, for AV1, its sequence header).
    public func packetStartsDecoding(_ packet: UnsafeRawBufferPointer) -> Bool {
        switch self {
        case .h264: H264Payload.packetStartsWithParameterSets(packet)
        case .h265: H265Payload.packetStartsWithParameterSets(packet)
        case .vp8, .vp9, .av1: packetStartsKeyframe(packet)
        }
    }
}
