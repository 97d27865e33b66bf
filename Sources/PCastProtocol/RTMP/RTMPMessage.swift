// RTMP messages (Adobe RTMP specification 1.0, sections 5.4 and 6-7): the unit the chunk stream
// carries, the protocol control and user control messages, and AMF0 commands.

/// Errors raised by the RTMP handshake, chunk stream and server session.
///
/// Any of these leaves the connection unusable (the byte stream can no longer be trusted): the
/// owner should close it. The state machines stay failed and rethrow the same error.
///
/// ```swift
/// var demuxer = RTMPChunkDemuxer()
/// do { _ = try demuxer.feed([0x42, 0, 0, 0]) }  // fmt 1 on csid 2 before any fmt 0
/// catch { print(error) } // chunkBeforeInitialHeader(chunkStreamID: 2, format: 1)
/// ```
public enum RTMPError: Error, Sendable, Equatable {
    // Handshake
    /// C0 asked for a version other than 3 (6 is RTMPE, which we do not speak).
    case unsupportedVersion(UInt8)

    // Chunk stream
    /// A chunk of format 1, 2 or 3 on a chunk stream that never had a format 0 header.
    case chunkBeforeInitialHeader(chunkStreamID: UInt32, format: UInt8)
    /// A format 0, 1 or 2 header on a chunk stream whose previous message is incomplete.
    case headerInMiddleOfMessage(chunkStreamID: UInt32)
    /// A message header declares more than `limit` bytes.
    case messageTooLarge(length: Int, limit: Int)
    /// Set Chunk Size with 0 or the reserved top bit set.
    case badChunkSize(UInt32)
    /// Set Chunk Size larger than we accept (valid per spec, refused by policy).
    case chunkSizeTooLarge(UInt32, limit: Int)
    /// More distinct chunk stream ids than `limit`.
    case tooManyChunkStreams(limit: Int)
    /// The partial messages in flight would exceed `limit` bytes in total.
    case bufferLimitExceeded(limit: Int)
    /// A protocol or user control message with a payload too short for its type.
    case malformedControlMessage(type: UInt8, length: Int)
    /// Sending: chunk stream ids are 2...65599.
    case invalidChunkStreamID(UInt32)
    /// Sending: a message longer than the 24-bit length field (16 MiB - 1).
    case messageTooLargeToSend(length: Int)
    /// Sending: chunk sizes are 1...0x7FFFFFFF.
    case invalidOutgoingChunkSize(Int)

    // Session
    /// A command or data message whose AMF0 body does not decode.
    case malformedAMF(AMF0Error)
    /// A command message whose first value is not a string (the command name).
    case commandWithoutName
    /// A command the session cannot honour in its current state (`publish` before `connect`, …).
    case unexpectedCommand(String)
    /// `accept()` / `reject(_:)` without a pending publish request.
    case noPendingPublish
}

/// The message type id of an RTMP message. Unknown values are representable so that they can be
/// counted and skipped.
///
/// ```swift
/// RTMPMessageType(rawValue: 9) == .video // true
/// ```
public struct RTMPMessageType: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: UInt8

    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let setChunkSize = Self(rawValue: 1)
    public static let abort = Self(rawValue: 2)
    public static let acknowledgement = Self(rawValue: 3)
    public static let userControl = Self(rawValue: 4)
    public static let windowAcknowledgementSize = Self(rawValue: 5)
    public static let setPeerBandwidth = Self(rawValue: 6)
    public static let audio = Self(rawValue: 8)
    public static let video = Self(rawValue: 9)
    public static let dataAMF3 = Self(rawValue: 15)
    public static let sharedObjectAMF3 = Self(rawValue: 16)
    public static let commandAMF3 = Self(rawValue: 17)
    public static let dataAMF0 = Self(rawValue: 18)
    public static let sharedObjectAMF0 = Self(rawValue: 19)
    public static let commandAMF0 = Self(rawValue: 20)
    public static let aggregate = Self(rawValue: 22)

    public var description: String {
        switch self {
        case .setChunkSize: "setChunkSize"
        case .abort: "abort"
        case .acknowledgement: "acknowledgement"
        case .userControl: "userControl"
        case .windowAcknowledgementSize: "windowAcknowledgementSize"
        case .setPeerBandwidth: "setPeerBandwidth"
        case .audio: "audio"
        case .video: "video"
        case .dataAMF3: "dataAMF3"
        case .sharedObjectAMF3: "sharedObjectAMF3"
        case .commandAMF3: "commandAMF3"
        case .dataAMF0: "dataAMF0"
        case .sharedObjectAMF0: "sharedObjectAMF0"
        case .commandAMF0: "commandAMF0"
        case .aggregate: "aggregate"
        default: "type\(rawValue)"
        }
    }

    /// Types 1, 2, 3, 5 and 6: the chunk-stream level protocol control messages.
    public var isProtocolControl: Bool { [1, 2, 3, 5, 6].contains(rawValue) }
}

/// One reassembled RTMP message.
///
/// `timestamp` is absolute: the chunk demuxer has already accumulated timestamp deltas.
///
/// ```swift
/// let ack = RTMPMessage.acknowledgement(sequenceNumber: 2_500_000)
/// var muxer = RTMPChunkMuxer()
/// let bytes = try muxer.encode(ack, chunkStreamID: 2)
/// ```
public struct RTMPMessage: Sendable, Equatable {
    public var type: RTMPMessageType
    /// Message stream id (0 is the NetConnection; `createStream` hands out the others).
    public var streamID: UInt32
    public var timestamp: UInt32
    public var payload: [UInt8]

    public init(type: RTMPMessageType, streamID: UInt32 = 0, timestamp: UInt32 = 0, payload: [UInt8]) {
        self.type = type
        self.streamID = streamID
        self.timestamp = timestamp
        self.payload = payload
    }

    private static func u32(_ type: RTMPMessageType, _ value: UInt32, extra: [UInt8] = []) -> RTMPMessage {
        var w = ByteWriter(reserving: 4 + extra.count)
        w.u32(value)
        w.append(contentsOf: extra)
        return RTMPMessage(type: type, payload: w.bytes)
    }

    /// Protocol control: Set Chunk Size (the top bit is reserved and cleared here).
    public static func setChunkSize(_ size: UInt32) -> RTMPMessage { u32(.setChunkSize, size & 0x7FFF_FFFF) }
    /// Protocol control: Abort the partial message on `chunkStreamID`.
    public static func abort(chunkStreamID: UInt32) -> RTMPMessage { u32(.abort, chunkStreamID) }
    /// Protocol control: Acknowledgement of `sequenceNumber` bytes received so far.
    public static func acknowledgement(sequenceNumber: UInt32) -> RTMPMessage { u32(.acknowledgement, sequenceNumber) }
    /// Protocol control: Window Acknowledgement Size.
    public static func windowAcknowledgementSize(_ size: UInt32) -> RTMPMessage { u32(.windowAcknowledgementSize, size) }
    /// Protocol control: Set Peer Bandwidth.
    public static func setPeerBandwidth(_ size: UInt32, limit: RTMPPeerBandwidthLimit) -> RTMPMessage {
        u32(.setPeerBandwidth, size, extra: [limit.rawValue])
    }
    /// User control message (type 4).
    public static func userControl(_ event: RTMPUserControlEvent) -> RTMPMessage {
        RTMPMessage(type: .userControl, payload: event.payload)
    }
    /// An AMF0 command message (type 20).
    public static func command(_ command: RTMPCommand, streamID: UInt32 = 0) throws(AMF0Error) -> RTMPMessage {
        RTMPMessage(type: .commandAMF0, streamID: streamID, payload: try command.encoded())
    }

    /// The big-endian `UInt32` at the start of the payload (protocol control messages).
    func leadingU32() throws(RTMPError) -> UInt32 {
        guard payload.count >= 4 else { throw .malformedControlMessage(type: type.rawValue, length: payload.count) }
        return UInt32(payload[0]) << 24 | UInt32(payload[1]) << 16 | UInt32(payload[2]) << 8 | UInt32(payload[3])
    }
}

/// Set Peer Bandwidth limit types.
public enum RTMPPeerBandwidthLimit: UInt8, Sendable {
    case hard = 0, soft = 1, dynamic = 2
}

/// User control events (message type 4).
///
/// ```swift
/// let ping = try RTMPUserControlEvent(parsing: [0, 6, 0, 0, 0x12, 0x34])
/// // ping == .pingRequest(timestamp: 0x1234); answer with .pingResponse(timestamp: 0x1234)
/// ```
public enum RTMPUserControlEvent: Sendable, Equatable {
    case streamBegin(streamID: UInt32)
    case streamEOF(streamID: UInt32)
    case streamDry(streamID: UInt32)
    case setBufferLength(streamID: UInt32, milliseconds: UInt32)
    case streamIsRecorded(streamID: UInt32)
    case pingRequest(timestamp: UInt32)
    case pingResponse(timestamp: UInt32)
    /// Any other event type; `data` is what follows the 2-byte event type.
    case other(eventType: UInt16, data: [UInt8])

    public init(parsing payload: [UInt8]) throws(RTMPError) {
        guard payload.count >= 2 else { throw .malformedControlMessage(type: 4, length: payload.count) }
        let eventType = UInt16(payload[0]) << 8 | UInt16(payload[1])
        func field(_ index: Int) throws(RTMPError) -> UInt32 {
            let at = 2 + 4 * index
            guard payload.count >= at + 4 else { throw .malformedControlMessage(type: 4, length: payload.count) }
            return UInt32(payload[at]) << 24 | UInt32(payload[at + 1]) << 16 | UInt32(payload[at + 2]) << 8
                | UInt32(payload[at + 3])
        }
        switch eventType {
        case 0: self = .streamBegin(streamID: try field(0))
        case 1: self = .streamEOF(streamID: try field(0))
        case 2: self = .streamDry(streamID: try field(0))
        case 3: self = .setBufferLength(streamID: try field(0), milliseconds: try field(1))
        case 4: self = .streamIsRecorded(streamID: try field(0))
        case 6: self = .pingRequest(timestamp: try field(0))
        case 7: self = .pingResponse(timestamp: try field(0))
        default: self = .other(eventType: eventType, data: Array(payload[2...]))
        }
    }

    /// The message payload: event type followed by its data.
    public var payload: [UInt8] {
        var w = ByteWriter(reserving: 10)
        switch self {
        case .streamBegin(let id): w.u16(0); w.u32(id)
        case .streamEOF(let id): w.u16(1); w.u32(id)
        case .streamDry(let id): w.u16(2); w.u32(id)
        case .setBufferLength(let id, let ms): w.u16(3); w.u32(id); w.u32(ms)
        case .streamIsRecorded(let id): w.u16(4); w.u32(id)
        case .pingRequest(let t): w.u16(6); w.u32(t)
        case .pingResponse(let t): w.u16(7); w.u32(t)
        case .other(let type, let data): w.u16(type); w.append(contentsOf: data)
        }
        return w.bytes
    }
}

/// An AMF0 command: name, transaction id, command object and optional arguments.
///
/// ```swift
/// let result = RTMPCommand(name: "_result", transactionID: 4, commandObject: .null, arguments: [.number(1)])
/// let payload = try result.encoded()
/// let parsed = try RTMPCommand(parsing: payload)  // == result
/// ```
public struct RTMPCommand: Sendable, Equatable {
    public var name: String
    public var transactionID: Double
    public var commandObject: AMF0Value
    public var arguments: [AMF0Value]

    public init(name: String, transactionID: Double, commandObject: AMF0Value = .null, arguments: [AMF0Value] = []) {
        self.name = name
        self.transactionID = transactionID
        self.commandObject = commandObject
        self.arguments = arguments
    }

    /// Parses an AMF0 command payload. A missing transaction id reads as 0 and a missing command
    /// object as `.null` (some clients omit trailing values).
    public init(parsing payload: ArraySlice<UInt8>, limits: AMF0.Limits = AMF0.Limits()) throws(RTMPError) {
        let values: [AMF0Value]
        do throws(AMF0Error) { values = try AMF0.decode(payload, limits: limits) } catch { throw .malformedAMF(error) }
        guard let name = values.first?.stringValue else { throw .commandWithoutName }
        self.name = name
        transactionID = values.count > 1 ? values[1].numberValue ?? 0 : 0
        commandObject = values.count > 2 ? values[2] : .null
        arguments = values.count > 3 ? Array(values[3...]) : []
    }

    public init(parsing payload: [UInt8], limits: AMF0.Limits = AMF0.Limits()) throws(RTMPError) {
        try self.init(parsing: payload[...], limits: limits)
    }

    public func encoded() throws(AMF0Error) -> [UInt8] {
        try AMF0.encode([.string(name), .number(transactionID), commandObject] + arguments)
    }
}
