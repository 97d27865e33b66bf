// FLV (Adobe Flash Video File Format Specification 10.1, annex E) writer for the media of an
// accepted RTMP publish. RTMP audio/video message payloads are FLV AUDIODATA/VIDEODATA bodies
// already, so a tag is the 11-byte tag header, the payload and the PreviousTagSize that follows:
//
//   header: "FLV" 0x01 flags(0x04 audio | 0x01 video) u32 9, then PreviousTagSize0 = 0
//   tag:    type u8, data size u24, timestamp u24, timestamp extended u8 (bits 31-24),
//           stream id u24 (0), data, PreviousTagSize u32 (11 + data size)

/// Errors raised while writing FLV.
public enum FLVWriterError: Error, Sendable, Equatable {
    /// Tag data larger than the 24-bit size field (16 MiB - 1).
    case tagTooLarge(size: Int)
    /// The metadata object could not be encoded.
    case malformedMetadata(AMF0Error)
}

/// Turns RTMP media messages into an FLV byte stream (for GStreamer's `flvdemux`, say).
///
/// The file header is emitted with the first tag. Timestamps are written as given: pass the
/// RTMP message timestamps (absolute milliseconds).
///
/// ```swift
/// var writer = FLVWriter(hasAudio: true, hasVideo: true)
/// var flv: [UInt8] = []
/// for action in try session.receive(bytes) {
///     flv += try writer.write(action)  // audio, video and metadata; [] for other actions
/// }
/// ```
public struct FLVWriter: Sendable {
    public enum TagType: UInt8, Sendable {
        case audio = 8, video = 9, scriptData = 18
    }

    /// Size of the FLV file header, without PreviousTagSize0.
    public static let headerLength = 9
    /// Size of a tag header.
    public static let tagHeaderLength = 11

    public let hasAudio: Bool
    public let hasVideo: Bool
    /// Whether the file header has been emitted.
    public private(set) var headerWritten = false
    /// Tags written so far.
    public private(set) var tagsWritten = 0

    public init(hasAudio: Bool = true, hasVideo: Bool = true) {
        self.hasAudio = hasAudio
        self.hasVideo = hasVideo
    }

    /// The 9-byte FLV header followed by PreviousTagSize0.
    public static func header(hasAudio: Bool, hasVideo: Bool) -> [UInt8] {
        var w = ByteWriter(reserving: headerLength + 4)
        w.append(contentsOf: [0x46, 0x4C, 0x56, 0x01])  // "FLV", version 1
        w.u8((hasAudio ? 0x04 : 0) | (hasVideo ? 0x01 : 0))
        w.u32(UInt32(headerLength))
        w.u32(0)
        return w.bytes
    }

    /// One tag (preceded by the file header if it has not been written yet).
    public mutating func tag(_ type: TagType, timestamp: UInt32, payload: [UInt8]) throws(FLVWriterError) -> [UInt8] {
        guard payload.count <= 0xFF_FFFF else { throw .tagTooLarge(size: payload.count) }
        var w = ByteWriter(reserving: Self.headerLength + 4 + Self.tagHeaderLength + payload.count + 4)
        if !headerWritten {
            w.append(contentsOf: Self.header(hasAudio: hasAudio, hasVideo: hasVideo))
            headerWritten = true
        }
        w.u8(type.rawValue)
        w.u24(UInt32(payload.count))
        w.u24(timestamp & 0xFF_FFFF)
        w.u8(UInt8(truncatingIfNeeded: timestamp >> 24))
        w.u24(0)  // stream id
        w.append(contentsOf: payload)
        w.u32(UInt32(Self.tagHeaderLength + payload.count))
        tagsWritten += 1
        return w.bytes
    }

    /// An audio tag (the payload is an RTMP audio message body).
    public mutating func audio(timestamp: UInt32, payload: [UInt8]) throws(FLVWriterError) -> [UInt8] {
        try tag(.audio, timestamp: timestamp, payload: payload)
    }

    /// A video tag (the payload is an RTMP video message body).
    public mutating func video(timestamp: UInt32, payload: [UInt8]) throws(FLVWriterError) -> [UInt8] {
        try tag(.video, timestamp: timestamp, payload: payload)
    }

    /// A script data tag: "onMetaData" and `metadata` as an ECMA array.
    public mutating func metadata(_ metadata: AMF0Object, timestamp: UInt32 = 0) throws(FLVWriterError) -> [UInt8] {
        let body: [UInt8]
        do throws(AMF0Error) {
            body = try AMF0.encode([.string("onMetaData"), .ecmaArray(metadata)])
        } catch {
            throw .malformedMetadata(error)
        }
        return try tag(.scriptData, timestamp: timestamp, payload: body)
    }

    /// The FLV bytes for a session action: a tag for `.audio`, `.video` and `.metadata`, nothing
    /// for the others.
    public mutating func write(_ action: RTMPServerSession.Action) throws(FLVWriterError) -> [UInt8] {
        switch action {
        case .audio(let t, let payload): return try audio(timestamp: t, payload: payload)
        case .video(let t, let payload): return try video(timestamp: t, payload: payload)
        case .metadata(let object, let t): return try metadata(object, timestamp: t)
        default: return []
        }
    }

    /// Which streams an onMetaData object announces (`audiocodecid` / `videocodecid`, or the
    /// `stereo`/`audiosamplerate` and `width`/`height` fields some encoders use instead).
    public static func streams(announcedIn metadata: AMF0Object) -> (audio: Bool, video: Bool) {
        let audio = metadata["audiocodecid"] != nil || metadata["audiosamplerate"] != nil
        let video = metadata["videocodecid"] != nil || metadata["width"] != nil
        return (audio, video)
    }
}
