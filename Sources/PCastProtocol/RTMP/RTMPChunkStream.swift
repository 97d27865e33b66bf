// The RTMP chunk stream (Adobe RTMP specification 1.0, section 5.3): messages are cut into
// chunks of at most `chunkSize` payload bytes, each behind a basic header (format + chunk stream
// id) and a message header whose size depends on the format:
//
//   fmt 0: 11 bytes, absolute timestamp, length, type id, message stream id (little endian)
//   fmt 1:  7 bytes, timestamp delta, length, type id (same stream id)
//   fmt 2:  3 bytes, timestamp delta (same stream id, length and type)
//   fmt 3:  0 bytes, continuation of a message, or a new message repeating the last header
//
// A 24-bit timestamp field of 0xFFFFFF means a 4-byte extended timestamp follows the message
// header. A fmt 3 chunk carries one too when the last fmt 0/1/2 header on its chunk stream did
// (as ffmpeg, librtmp and nginx-rtmp do). A fmt 3 chunk that starts a new message applies the
// last timestamp field of its chunk stream again as a delta — after a fmt 0 header that is the
// fmt 0's absolute value, the ffmpeg / nginx-rtmp reading of the specification.
//
// Timestamps are 32-bit and wrap (`&+`), as on the wire.

/// Incremental, allocation-bounded chunk stream parser: bytes in, reassembled messages out.
///
/// Bytes may be fed in any split (a byte at a time works). Set Chunk Size, Abort and Window
/// Acknowledgement Size take effect inside the demuxer; every message, these included, is also
/// returned. When the peer has set an acknowledgement window, `.acknowledgementDue` reports that
/// an Acknowledgement should be sent.
///
/// ```swift
/// var demuxer = RTMPChunkDemuxer()
/// for event in try demuxer.feed(bytesFromSocket) {
///     switch event {
///     case .message(let message): handle(message)
///     case .acknowledgementDue(let sequence):
///         send(try muxer.encode(.acknowledgement(sequenceNumber: sequence), chunkStreamID: 2))
///     }
/// }
/// ```
public struct RTMPChunkDemuxer: Sendable {
    /// Resource bounds. Exceeding one is a typed error, never unbounded buffering.
    public struct Limits: Sendable, Equatable {
        /// Largest message accepted (the wire allows 16 MiB - 1).
        public var maxMessageLength: Int
        /// Largest incoming chunk size a peer may set (the wire allows 0x7FFFFFFF).
        public var maxChunkSize: Int
        /// Most distinct chunk stream ids per connection (clients use a handful).
        public var maxChunkStreams: Int
        /// Most bytes of partial messages in flight, summed over chunk streams (declared lengths).
        public var maxBufferedBytes: Int

        public init(
            maxMessageLength: Int = 8 << 20, maxChunkSize: Int = 16 << 20, maxChunkStreams: Int = 64,
            maxBufferedBytes: Int = 16 << 20
        ) {
            self.maxMessageLength = maxMessageLength
            self.maxChunkSize = maxChunkSize
            self.maxChunkStreams = maxChunkStreams
            self.maxBufferedBytes = maxBufferedBytes
        }
    }

    public enum Event: Sendable, Equatable {
        /// A complete message.
        case message(RTMPMessage)
        /// The acknowledgement window has been reached: send an Acknowledgement with this
        /// sequence number (total bytes received, modulo 2^32).
        case acknowledgementDue(sequenceNumber: UInt32)
    }

    /// Initial chunk size for both directions.
    public static let defaultChunkSize = 128

    public let limits: Limits
    /// The peer's current chunk size.
    public private(set) var chunkSize = RTMPChunkDemuxer.defaultChunkSize
    /// The window the peer asked us to acknowledge after (`nil` until it sends one).
    public private(set) var acknowledgementWindow: UInt32?
    /// Every byte fed so far.
    public private(set) var bytesReceived: UInt64 = 0
    /// Messages returned so far.
    public private(set) var messagesReceived = 0

    private struct ChunkStream {
        var timestamp: UInt32 = 0
        /// The last timestamp field (absolute for fmt 0, delta otherwise), extended value resolved.
        var timestampField: UInt32 = 0
        /// Whether the last fmt 0/1/2 header used the extended timestamp.
        var extended = false
        var length = 0
        var type: UInt8 = 0
        var streamID: UInt32 = 0
        var buffer: [UInt8] = []
        var inProgress = false
    }

    private var streams: [UInt32: ChunkStream] = [:]
    /// Header bytes of the chunk being parsed (at most 3 + 11 + 4).
    private var header: [UInt8] = []
    /// Chunk stream whose chunk payload is being read, and how much of it is left.
    private var current: UInt32 = 0
    private var chunkRemaining = 0
    private var readingPayload = false
    private var lastAcknowledged: UInt64 = 0
    private var reservedBytes = 0
    private var failure: RTMPError?

    public init(limits: Limits = Limits()) {
        self.limits = limits
        header.reserveCapacity(18)
    }

    /// Parses `bytes`; see the type documentation.
    public mutating func feed(_ bytes: [UInt8]) throws(RTMPError) -> [Event] {
        try feed(bytes[...])
    }

    /// Parses `bytes`; see the type documentation. After an error the demuxer stays failed.
    public mutating func feed(_ bytes: ArraySlice<UInt8>) throws(RTMPError) -> [Event] {
        if let failure { throw failure }
        var events: [Event] = []
        do throws(RTMPError) {
            try parse(bytes, into: &events)
        } catch {
            failure = error
            throw error
        }
        return events
    }

    private mutating func parse(_ bytes: ArraySlice<UInt8>, into events: inout [Event]) throws(RTMPError) {
        var i = bytes.startIndex
        while i < bytes.endIndex {
            if readingPayload {
                let n = min(chunkRemaining, bytes.endIndex - i)
                streams[current]!.buffer.append(contentsOf: bytes[i..<(i + n)])
                i += n
                chunkRemaining -= n
                bytesReceived += UInt64(n)
                if chunkRemaining == 0 { try endChunk(into: &events) }
            } else {
                header.append(bytes[i])
                i += 1
                bytesReceived += 1
                if let needed = try headerLength(), header.count == needed { try beginChunk(into: &events) }
            }
            if let window = acknowledgementWindow, bytesReceived - lastAcknowledged >= UInt64(window) {
                lastAcknowledged = bytesReceived
                events.append(.acknowledgementDue(sequenceNumber: UInt32(truncatingIfNeeded: bytesReceived)))
            }
        }
    }

    /// Basic header: format and chunk stream id, or nil while incomplete.
    private func basicHeader() -> (format: UInt8, csid: UInt32, length: Int)? {
        let b0 = header[0]
        switch b0 & 0x3F {
        case 0:
            guard header.count >= 2 else { return nil }
            return (b0 >> 6, 64 + UInt32(header[1]), 2)
        case 1:
            guard header.count >= 3 else { return nil }
            return (b0 >> 6, 64 + UInt32(header[1]) + UInt32(header[2]) << 8, 3)
        default:
            return (b0 >> 6, UInt32(b0 & 0x3F), 1)
        }
    }

    private static let messageHeaderLength = [11, 7, 3, 0]

    /// Total header length once it can be known from the bytes so far.
    private func headerLength() throws(RTMPError) -> Int? {
        guard let (format, csid, basic) = basicHeader() else { return nil }
        let known = streams[csid]
        if format != 0 && known == nil { throw .chunkBeforeInitialHeader(chunkStreamID: csid, format: format) }
        if format == 3 { return basic + (known!.extended ? 4 : 0) }
        guard header.count >= basic + 3 else { return nil }
        let field = u24(basic)
        return basic + Self.messageHeaderLength[Int(format)] + (field == 0xFF_FFFF ? 4 : 0)
    }

    private func u24(_ at: Int) -> UInt32 {
        UInt32(header[at]) << 16 | UInt32(header[at + 1]) << 8 | UInt32(header[at + 2])
    }

    private func u32(_ at: Int) -> UInt32 {
        UInt32(header[at]) << 24 | UInt32(header[at + 1]) << 16 | UInt32(header[at + 2]) << 8 | UInt32(header[at + 3])
    }

    /// The header is complete: update the chunk stream and start reading the chunk payload.
    private mutating func beginChunk(into events: inout [Event]) throws(RTMPError) {
        let (format, csid, basic) = basicHeader()!
        var stream: ChunkStream
        if let known = streams[csid] {
            stream = known
        } else {
            // headerLength() already refused formats 1-3 on a new chunk stream.
            guard streams.count < limits.maxChunkStreams else { throw .tooManyChunkStreams(limit: limits.maxChunkStreams) }
            stream = ChunkStream()
        }
        if format != 3 && stream.inProgress { throw .headerInMiddleOfMessage(chunkStreamID: csid) }

        let startsMessage = !stream.inProgress
        if format < 3 {
            var field = u24(basic)
            stream.extended = field == 0xFF_FFFF
            if stream.extended { field = u32(basic + Self.messageHeaderLength[Int(format)]) }
            stream.timestampField = field
            if format <= 1 {
                stream.length = Int(u24(basic + 3))
                stream.type = header[basic + 6]
            }
            if format == 0 {
                stream.streamID = UInt32(header[basic + 7]) | UInt32(header[basic + 8]) << 8
                    | UInt32(header[basic + 9]) << 16 | UInt32(header[basic + 10]) << 24
                stream.timestamp = field
            } else {
                stream.timestamp &+= field
            }
        } else if startsMessage {
            // A new message with the previous header: the extended field, when present, repeats
            // the delta (ffmpeg reads it as such).
            if stream.extended { stream.timestampField = u32(basic) }
            stream.timestamp &+= stream.timestampField
        }
        header.removeAll(keepingCapacity: true)

        if startsMessage {
            guard stream.length <= limits.maxMessageLength else {
                throw .messageTooLarge(length: stream.length, limit: limits.maxMessageLength)
            }
            guard reservedBytes + stream.length <= limits.maxBufferedBytes else {
                throw .bufferLimitExceeded(limit: limits.maxBufferedBytes)
            }
            reservedBytes += stream.length
            stream.inProgress = true
            stream.buffer = []
            stream.buffer.reserveCapacity(min(stream.length, 64 << 10))
        }
        chunkRemaining = min(chunkSize, stream.length - stream.buffer.count)
        streams[csid] = stream
        current = csid
        readingPayload = chunkRemaining > 0
        if !readingPayload { try endChunk(into: &events) }
    }

    /// The chunk payload is complete; deliver the message if it is too.
    private mutating func endChunk(into events: inout [Event]) throws(RTMPError) {
        readingPayload = false
        guard var stream = streams[current], stream.buffer.count == stream.length else { return }
        let message = RTMPMessage(
            type: RTMPMessageType(rawValue: stream.type), streamID: stream.streamID, timestamp: stream.timestamp,
            payload: stream.buffer)
        stream.buffer = []
        stream.inProgress = false
        reservedBytes -= stream.length
        streams[current] = stream
        try apply(message)
        messagesReceived += 1
        events.append(.message(message))
    }

    /// Protocol control messages that change how the rest of the stream is parsed.
    private mutating func apply(_ message: RTMPMessage) throws(RTMPError) {
        switch message.type {
        case .setChunkSize:
            let size = try message.leadingU32()
            guard size != 0, size & 0x8000_0000 == 0 else { throw .badChunkSize(size) }
            guard Int(size) <= limits.maxChunkSize else { throw .chunkSizeTooLarge(size, limit: limits.maxChunkSize) }
            chunkSize = Int(size)
        case .abort:
            let csid = try message.leadingU32()
            if var stream = streams[csid], stream.inProgress {
                reservedBytes -= stream.length
                stream.inProgress = false
                stream.buffer = []
                streams[csid] = stream
            }
        case .windowAcknowledgementSize:
            let size = try message.leadingU32()
            acknowledgementWindow = size == 0 ? nil : size
        default:
            break
        }
    }
}

/// Chunk stream writer for what a server sends.
///
/// Every message starts with a fmt 0 header unless `compressesHeaders` is set, in which case fmt
/// 1, 2 and 3 headers are used when the previous message on the same chunk stream allows it.
/// Continuation chunks are fmt 3 (with the extended timestamp repeated when in use).
///
/// ```swift
/// var muxer = RTMPChunkMuxer()
/// var out = try muxer.setChunkSize(4096)   // sent at 128, applies to what follows
/// out += try muxer.encode(.windowAcknowledgementSize(2_500_000), chunkStreamID: 2)
/// ```
public struct RTMPChunkMuxer: Sendable {
    /// Our outgoing chunk size.
    public private(set) var chunkSize = RTMPChunkDemuxer.defaultChunkSize
    /// Use fmt 1/2/3 headers for messages that repeat the previous header fields.
    public var compressesHeaders: Bool

    private struct Previous {
        var timestamp: UInt32
        var field: UInt32
        var length: Int
        var type: RTMPMessageType
        var streamID: UInt32
    }

    private var previous: [UInt32: Previous] = [:]

    public init(compressesHeaders: Bool = false) {
        self.compressesHeaders = compressesHeaders
    }

    /// Chunk stream ids this muxer (and the wire format) can express.
    public static let chunkStreamIDs: ClosedRange<UInt32> = 2...65599

    /// Encodes a Set Chunk Size message at the current chunk size, then switches to `size` for
    /// everything encoded afterwards.
    public mutating func setChunkSize(_ size: Int, chunkStreamID: UInt32 = 2) throws(RTMPError) -> [UInt8] {
        guard size >= 1, size <= 0x7FFF_FFFF else { throw .invalidOutgoingChunkSize(size) }
        let bytes = try encode(.setChunkSize(UInt32(size)), chunkStreamID: chunkStreamID)
        chunkSize = size
        return bytes
    }

    /// Encodes `message` as chunks on `chunkStreamID`.
    public mutating func encode(_ message: RTMPMessage, chunkStreamID: UInt32) throws(RTMPError) -> [UInt8] {
        var w = ByteWriter(reserving: message.payload.count + 18 + message.payload.count / chunkSize * 8)
        try encode(message, chunkStreamID: chunkStreamID, into: &w)
        return w.bytes
    }

    /// Encodes `message` as chunks on `chunkStreamID`, appending to `w`.
    mutating func encode(_ message: RTMPMessage, chunkStreamID csid: UInt32, into w: inout ByteWriter) throws(RTMPError) {
        guard Self.chunkStreamIDs.contains(csid) else { throw .invalidChunkStreamID(csid) }
        let length = message.payload.count
        guard length <= 0xFF_FFFF else { throw .messageTooLargeToSend(length: length) }

        var format: UInt8 = 0
        var field = message.timestamp
        if compressesHeaders, let p = previous[csid], p.streamID == message.streamID, message.timestamp >= p.timestamp {
            let delta = message.timestamp - p.timestamp
            field = delta
            if p.length == length && p.type == message.type {
                format = delta == p.field ? 3 : 2
            } else {
                format = 1
            }
        }
        previous[csid] = Previous(
            timestamp: message.timestamp, field: field, length: length, type: message.type, streamID: message.streamID)

        let extended = field >= 0xFF_FFFF
        Self.basicHeader(format: format, csid: csid, into: &w)
        if format < 3 {
            w.u24(extended ? 0xFF_FFFF : field)
            if format <= 1 {
                w.u24(UInt32(length))
                w.u8(message.type.rawValue)
            }
            if format == 0 {
                // The message stream id is little endian.
                w.u8(UInt8(truncatingIfNeeded: message.streamID))
                w.u8(UInt8(truncatingIfNeeded: message.streamID >> 8))
                w.u8(UInt8(truncatingIfNeeded: message.streamID >> 16))
                w.u8(UInt8(truncatingIfNeeded: message.streamID >> 24))
            }
        }
        if extended { w.u32(field) }

        var offset = 0
        repeat {
            let n = min(chunkSize, length - offset)
            w.append(contentsOf: message.payload[offset..<(offset + n)])
            offset += n
            if offset < length {
                Self.basicHeader(format: 3, csid: csid, into: &w)
                if extended { w.u32(field) }
            }
        } while offset < length
    }

    static func basicHeader(format: UInt8, csid: UInt32, into w: inout ByteWriter) {
        switch csid {
        case 2...63:
            w.u8(format << 6 | UInt8(csid))
        case 64...319:
            w.u8(format << 6)
            w.u8(UInt8(csid - 64))
        default:
            w.u8(format << 6 | 1)
            w.u8(UInt8(truncatingIfNeeded: csid - 64))
            w.u8(UInt8(truncatingIfNeeded: (csid - 64) >> 8))
        }
    }
}
