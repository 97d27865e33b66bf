// The server side of an RTMP push (publish) connection, as a pure state machine: the owner feeds
// the bytes it reads from the TCP connection and performs the actions that come back (send
// bytes, verify a stream key, forward media, close).
//
// Command flow with ffmpeg / OBS:
//
//   C: handshake                    S: handshake
//   C: connect {app: "live", …}     S: Set Chunk Size, Window Ack Size, Set Peer Bandwidth,
//                                      StreamBegin 0, _result NetConnection.Connect.Success
//   C: releaseStream, FCPublish     S: _result
//   C: createStream                 S: _result 1
//   C: publish "<key>" "live"       → .publishRequested(app:key:type:) — the owner verifies the
//                                     key and calls accept() (StreamBegin 1, onStatus
//                                     NetStream.Publish.Start) or reject(_:)
//
// Messages that arrive while the owner decides are held (bounded by `maxHeldBytes`) and handled
// by accept(), so a client that does not wait for NetStream.Publish.Start loses nothing and the
// actions do not depend on how the input was split.
//   C: @setDataFrame onMetaData     → .metadata
//   C: audio / video                → .audio / .video (timestamp, payload)
//   C: FCUnpublish, deleteStream    → .ended

/// What the application (`connect`) said about itself.
public struct RTMPConnectInfo: Sendable, Equatable {
    /// Application name, without any `?query` suffix or trailing slash.
    public var app: String
    /// `tcUrl` from the connect command object, verbatim.
    public var tcURL: String?
    /// `flashVer` from the connect command object, verbatim (e.g. "FMLE/3.0 (compatible; FMSc/1.0)").
    public var flashVersion: String?
}

/// The publish type the client asked for (`publish` command, fourth value).
public enum RTMPPublishType: String, Sendable, Equatable {
    case live, record, append
}

/// Why a stream key was refused before the owner saw it.
public enum RTMPStreamKeyProblem: Error, Sendable, Equatable {
    /// The publish command had no string stream name.
    case missing
    case empty
    case tooLong(bytes: Int, limit: Int)
    /// A control character (C0, DEL or C1) at this UTF-8 byte offset.
    case controlCharacter(offset: Int)
}

/// A refusal the session decided on its own (the owner's `reject(_:)` is not reported back).
public enum RTMPRefusal: Sendable, Equatable {
    /// `connect` named an application not in `Configuration.applications`; answered with
    /// `_error` NetConnection.Connect.Rejected.
    case unknownApplication(String)
    /// Answered with onStatus NetStream.Publish.BadName.
    case invalidStreamKey(RTMPStreamKeyProblem)
    /// A publish type other than live, record or append; answered with NetStream.Publish.BadName.
    case unsupportedPublishType(String)
}

/// Why a publish ended.
public enum RTMPEndReason: Sendable, Equatable {
    /// The client sent FCUnpublish.
    case unpublished
    /// The client sent deleteStream or closeStream.
    case streamDeleted
    /// The owner reported the connection closed (`connectionClosed()`).
    case connectionClosed
}

/// Server side of one RTMP publish connection; see the file header for the flow.
///
/// ```swift
/// var session = RTMPServerSession(configuration: .init(applications: ["live"]))
/// func perform(_ actions: [RTMPServerSession.Action]) async throws {
///     for action in actions {
///         switch action {
///         case .send(let bytes): try await connection.write(bytes)
///         case .publishRequested(_, let key, _):
///             try await perform(await tokens.verify(key) ? session.accept() : session.reject("Invalid token"))
///         case .metadata(let meta, _): flv.append(try writer.metadata(meta))
///         case .audio(let t, let payload): flv.append(try writer.audio(timestamp: t, payload: payload))
///         case .video(let t, let payload): flv.append(try writer.video(timestamp: t, payload: payload))
///         case .ended: flv.finish()
///         case .close: try await connection.close()
///         case .connected, .refused: break
///         }
///     }
/// }
/// while let bytes = try await connection.read() { try await perform(try session.receive(bytes)) }
/// try await perform(session.connectionClosed())
/// ```
public struct RTMPServerSession: Sendable {
    public struct Configuration: Sendable, Equatable {
        /// Application names accepted in `connect`.
        public var applications: Set<String>
        /// Longest stream key accepted, in UTF-8 bytes (keys are long tokens).
        public var maxStreamKeyLength: Int
        /// Chunk size we switch to right after `connect` (nil: stay at 128).
        public var outgoingChunkSize: Int?
        /// Window Acknowledgement Size we announce.
        public var windowAcknowledgementSize: UInt32
        /// Set Peer Bandwidth we announce (dynamic limit).
        public var peerBandwidth: UInt32
        public var chunkLimits: RTMPChunkDemuxer.Limits
        public var amfLimits: AMF0.Limits
        /// Most payload bytes held while a publish request awaits `accept()` / `reject(_:)`.
        public var maxHeldBytes: Int
        /// `fmsVer` in the connect result.
        public var serverVersion: String

        public init(
            applications: Set<String> = ["live"], maxStreamKeyLength: Int = 4096, outgoingChunkSize: Int? = 4096,
            windowAcknowledgementSize: UInt32 = 2_500_000, peerBandwidth: UInt32 = 2_500_000,
            chunkLimits: RTMPChunkDemuxer.Limits = .init(), amfLimits: AMF0.Limits = .init(),
            maxHeldBytes: Int = 4 << 20, serverVersion: String = "FMS/3,0,1,123"
        ) {
            self.applications = applications
            self.maxStreamKeyLength = maxStreamKeyLength
            self.outgoingChunkSize = outgoingChunkSize
            self.windowAcknowledgementSize = windowAcknowledgementSize
            self.peerBandwidth = peerBandwidth
            self.chunkLimits = chunkLimits
            self.amfLimits = amfLimits
            self.maxHeldBytes = maxHeldBytes
            self.serverVersion = serverVersion
        }
    }

    public enum Action: Sendable, Equatable {
        /// Write these bytes to the connection (consecutive sends are coalesced).
        case send([UInt8])
        /// `connect` was accepted.
        case connected(RTMPConnectInfo)
        /// The client wants to publish: verify `key`, then call `accept()` or `reject(_:)`.
        case publishRequested(app: String, key: String, type: RTMPPublishType)
        /// The session refused the client on its own; a `.close` follows.
        case refused(RTMPRefusal)
        /// onMetaData (from `@setDataFrame` or sent directly) of the accepted publish.
        case metadata(AMF0Object, timestamp: UInt32)
        /// An audio message of the accepted publish: FLV AUDIODATA, absolute timestamp in ms.
        case audio(timestamp: UInt32, payload: [UInt8])
        /// A video message of the accepted publish: FLV VIDEODATA, absolute timestamp in ms.
        case video(timestamp: UInt32, payload: [UInt8])
        /// The publish (pending or accepted) is over.
        case ended(RTMPEndReason)
        /// Close the connection once the preceding sends are written.
        case close
    }

    public enum State: Sendable, Equatable {
        case handshaking, awaitingConnect, connected, publishRequested, publishing
        /// The publish ended; the connection may linger until the client closes it.
        case ended
        /// Refused, rejected or closed: further input is ignored.
        case closed
    }

    /// Counters for metrics and tests.
    public struct Statistics: Sendable, Equatable {
        /// All bytes received, handshake included.
        public var bytesReceived: UInt64 = 0
        /// Reassembled messages of any type.
        public var messagesReceived = 0
        public var audioMessages = 0
        public var videoMessages = 0
        /// Audio/video outside an accepted publish, or empty.
        public var droppedMediaMessages = 0
        /// Messages of a type we do not know; skipped.
        public var unknownMessages = 0
        /// Known messages or commands we do not act on (shared objects, aggregates, other data).
        public var ignoredMessages = 0
        /// Data messages whose AMF0 did not decode (skipped, not fatal).
        public var malformedDataMessages = 0
        public var acknowledgementsSent = 0
        /// The last sequence number the client acknowledged.
        public var peerAcknowledged: UInt32?
    }

    /// Chunk stream ids for what we send.
    static let controlChunkStream: UInt32 = 2
    static let commandChunkStream: UInt32 = 3
    static let streamChunkStream: UInt32 = 5
    /// The message stream id `createStream` returns.
    public static let publishStreamID: UInt32 = 1

    public let configuration: Configuration
    public private(set) var state = State.handshaking
    public private(set) var statistics = Statistics()
    public private(set) var connectInfo: RTMPConnectInfo?
    /// The stream key of the current (pending or accepted) publish.
    public private(set) var streamKey: String?
    public private(set) var publishType: RTMPPublishType?
    /// The latest onMetaData.
    public private(set) var metadata: AMF0Object?

    private var handshake: RTMPServerHandshake
    private var demuxer: RTMPChunkDemuxer
    private var muxer = RTMPChunkMuxer()
    private var publishStream: UInt32 = 0
    /// Messages received while a publish request is pending.
    private var held: [RTMPMessage] = []
    private var heldBytes = 0
    private var failure: RTMPError?

    /// A session whose handshake randomness comes from `generator`.
    public init<G: RandomNumberGenerator>(configuration: Configuration = .init(), time: UInt32 = 0, using generator: inout G) {
        self.configuration = configuration
        handshake = RTMPServerHandshake(time: time, using: &generator)
        demuxer = RTMPChunkDemuxer(limits: configuration.chunkLimits)
    }

    /// A session whose handshake randomness comes from the system generator.
    public init(configuration: Configuration = .init(), time: UInt32 = 0) {
        var rng = SystemRandomNumberGenerator()
        self.init(configuration: configuration, time: time, using: &rng)
    }

    // MARK: Input

    /// Feeds bytes read from the connection.
    ///
    /// A thrown error is a protocol violation: close the connection (the session stays failed).
    public mutating func receive(_ bytes: [UInt8]) throws(RTMPError) -> [Action] {
        try receive(bytes[...])
    }

    /// Feeds bytes read from the connection; see ``receive(_:)-([UInt8])``.
    public mutating func receive(_ bytes: ArraySlice<UInt8>) throws(RTMPError) -> [Action] {
        if let failure { throw failure }
        guard state != .closed else { return [] }
        statistics.bytesReceived += UInt64(bytes.count)
        var out = Output()
        do throws(RTMPError) {
            var rest = bytes
            if state == .handshaking {
                let step = try handshake.feed(bytes)
                out.send(step.bytesToSend)
                rest = bytes.dropFirst(step.bytesConsumed)
                if handshake.isComplete { state = .awaitingConnect }
            }
            if !rest.isEmpty {
                for event in try demuxer.feed(rest) {
                    guard state != .closed else { break }
                    switch event {
                    case .message(let message):
                        statistics.messagesReceived += 1
                        try dispatch(message, &out)
                    case .acknowledgementDue(let sequence):
                        try send(.acknowledgement(sequenceNumber: sequence), on: Self.controlChunkStream, &out)
                        statistics.acknowledgementsSent += 1
                    }
                }
            }
        } catch {
            failure = error
            throw error
        }
        return out.actions
    }

    /// The owner saw the connection close (or is closing it). Ends a pending or accepted publish.
    public mutating func connectionClosed() -> [Action] {
        defer {
            state = .closed
            held = []
            heldBytes = 0
        }
        switch state {
        case .publishing, .publishRequested: return [.ended(.connectionClosed)]
        default: return []
        }
    }

    // MARK: Owner decisions

    /// Accepts the pending publish: StreamBegin and onStatus NetStream.Publish.Start, then the
    /// actions for whatever arrived while the owner was deciding (metadata, media, …).
    ///
    /// Throws `.noPendingPublish` when no publish awaits a decision (the owner already answered,
    /// or reported the connection closed meanwhile).
    public mutating func accept() throws(RTMPError) -> [Action] {
        if let failure { throw failure }
        guard state == .publishRequested else { throw .noPendingPublish }
        var out = Output()
        do throws(RTMPError) {
            try send(.userControl(.streamBegin(streamID: publishStream)), on: Self.controlChunkStream, &out)
            try sendStatus(level: "status", code: "NetStream.Publish.Start", description: "Publishing.", &out)
            state = .publishing
            let queue = held
            held = []
            heldBytes = 0
            for message in queue where state != .closed { try dispatch(message, &out) }
        } catch {
            failure = error
            throw error
        }
        return out.actions
    }

    /// Rejects the pending publish with an onStatus error carrying `reason` as its description
    /// (ffmpeg prints it as "Server error: <reason>"), then `.close`.
    ///
    /// An accepted publish can be refused this way too, once its first media shows the owner
    /// cannot take it (a codec it does not carry).
    public mutating func reject(_ reason: String, code: String = "NetStream.Publish.BadName") throws(RTMPError) -> [Action] {
        if let failure { throw failure }
        guard state == .publishRequested || state == .publishing else { throw .noPendingPublish }
        var out = Output()
        try sendStatus(level: "error", code: code, description: reason, &out)
        out.actions.append(.close)
        state = .closed
        held = []
        heldBytes = 0
        return out.actions
    }

    // MARK: Messages

    private mutating func dispatch(_ message: RTMPMessage, _ out: inout Output) throws(RTMPError) {
        switch state {
        case .closed:
            return
        case .publishRequested:
            heldBytes += message.payload.count
            guard heldBytes <= configuration.maxHeldBytes else { throw .bufferLimitExceeded(limit: configuration.maxHeldBytes) }
            held.append(message)
        default:
            try handle(message, &out)
        }
    }

    private mutating func handle(_ message: RTMPMessage, _ out: inout Output) throws(RTMPError) {
        switch message.type {
        case .setChunkSize, .abort, .windowAcknowledgementSize:
            break  // applied by the demuxer
        case .acknowledgement:
            statistics.peerAcknowledged = try message.leadingU32()
        case .setPeerBandwidth:
            break  // we do not throttle what we send (a few hundred bytes)
        case .userControl:
            if case .pingRequest(let t) = try RTMPUserControlEvent(parsing: message.payload) {
                try send(.userControl(.pingResponse(timestamp: t)), on: Self.controlChunkStream, &out)
            }
        case .commandAMF0:
            try command(RTMPCommand(parsing: message.payload[...], limits: configuration.amfLimits), message, &out)
        case .commandAMF3:
            // An AMF3 command message starts with a format byte of 0, then AMF0 values.
            guard message.payload.first == 0 else { statistics.ignoredMessages += 1; return }
            try command(RTMPCommand(parsing: message.payload.dropFirst(), limits: configuration.amfLimits), message, &out)
        case .dataAMF0:
            data(message.payload[...], message, &out)
        case .dataAMF3:
            guard message.payload.first == 0 else { statistics.ignoredMessages += 1; return }
            data(message.payload.dropFirst(), message, &out)
        case .audio, .video:
            media(message, &out)
        case .sharedObjectAMF0, .sharedObjectAMF3, .aggregate:
            statistics.ignoredMessages += 1
        default:
            statistics.unknownMessages += 1
        }
    }

    private mutating func media(_ message: RTMPMessage, _ out: inout Output) {
        guard state == .publishing, message.streamID == publishStream, !message.payload.isEmpty else {
            statistics.droppedMediaMessages += 1
            return
        }
        if message.type == .audio {
            statistics.audioMessages += 1
            out.actions.append(.audio(timestamp: message.timestamp, payload: message.payload))
        } else {
            statistics.videoMessages += 1
            out.actions.append(.video(timestamp: message.timestamp, payload: message.payload))
        }
    }

    private mutating func data(_ payload: ArraySlice<UInt8>, _ message: RTMPMessage, _ out: inout Output) {
        let values: [AMF0Value]
        do throws(AMF0Error) {
            values = try AMF0.decode(payload, limits: configuration.amfLimits)
        } catch {
            statistics.malformedDataMessages += 1
            return
        }
        var rest = values[...]
        if rest.first?.stringValue == "@setDataFrame" { rest = rest.dropFirst() }
        guard rest.first?.stringValue == "onMetaData", let object = rest.dropFirst().first?.objectValue,
            message.streamID == publishStream
        else {
            statistics.ignoredMessages += 1
            return
        }
        guard state == .publishing else {
            statistics.ignoredMessages += 1
            return
        }
        metadata = object
        out.actions.append(.metadata(object, timestamp: message.timestamp))
    }

    private mutating func command(_ command: RTMPCommand, _ message: RTMPMessage, _ out: inout Output) throws(RTMPError) {
        let txn = command.transactionID
        if state == .awaitingConnect && command.name != "connect" { throw .unexpectedCommand(command.name) }
        switch command.name {
        case "connect":
            guard state == .awaitingConnect else { throw .unexpectedCommand(command.name) }
            try connect(command, &out)
        case "releaseStream", "FCPublish":
            if txn != 0 { try result(txn, [.undefined], &out) }
        case "createStream":
            publishStream = Self.publishStreamID
            try result(txn, [.number(Double(Self.publishStreamID))], &out)
        case "publish":
            guard state == .connected, message.streamID != 0 else { throw .unexpectedCommand(command.name) }
            publishStream = message.streamID
            try publish(command, &out)
        case "FCUnpublish":
            if txn != 0 { try result(txn, [.undefined], &out) }
            end(.unpublished, &out)
        case "deleteStream", "closeStream":
            end(.streamDeleted, &out)
        default:
            // _result/_error answers, _checkbw, getStreamLength, play, …: not for a push endpoint.
            statistics.ignoredMessages += 1
        }
    }

    private mutating func connect(_ command: RTMPCommand, _ out: inout Output) throws(RTMPError) {
        let object = command.commandObject
        var app = object["app"]?.stringValue ?? ""
        if let q = app.firstIndex(of: "?") { app = String(app[..<q]) }
        while app.hasSuffix("/") { app.removeLast() }
        let info = RTMPConnectInfo(app: app, tcURL: object["tcUrl"]?.stringValue, flashVersion: object["flashVer"]?.stringValue)
        connectInfo = info

        guard configuration.applications.contains(app) else {
            let status: AMF0Object = [
                "level": "error", "code": "NetConnection.Connect.Rejected", "description": "Unknown application.",
            ]
            try send(
                amf(RTMPCommand(name: "_error", transactionID: command.transactionID, commandObject: .null, arguments: [.object(status)])),
                on: Self.commandChunkStream, &out)
            out.actions.append(.refused(.unknownApplication(app)))
            out.actions.append(.close)
            state = .closed
            return
        }

        // Set Chunk Size first (at 128), so that everything after it already uses the larger size.
        if let size = configuration.outgoingChunkSize {
            out.send(try muxer.setChunkSize(size, chunkStreamID: Self.controlChunkStream))
        }
        try send(.windowAcknowledgementSize(configuration.windowAcknowledgementSize), on: Self.controlChunkStream, &out)
        try send(.setPeerBandwidth(configuration.peerBandwidth, limit: .dynamic), on: Self.controlChunkStream, &out)
        try send(.userControl(.streamBegin(streamID: 0)), on: Self.controlChunkStream, &out)
        let properties: AMF0Object = ["fmsVer": .string(configuration.serverVersion), "capabilities": 31]
        let status: AMF0Object = [
            "level": "status", "code": "NetConnection.Connect.Success", "description": "Connection succeeded.",
            "objectEncoding": 0,
        ]
        try send(
            amf(RTMPCommand(name: "_result", transactionID: command.transactionID, commandObject: .object(properties), arguments: [.object(status)])),
            on: Self.commandChunkStream, &out)
        state = .connected
        out.actions.append(.connected(info))
    }

    private mutating func publish(_ command: RTMPCommand, _ out: inout Output) throws(RTMPError) {
        let app = connectInfo?.app ?? ""
        let key: String
        switch Self.validateStreamKey(command.arguments.first, limit: configuration.maxStreamKeyLength) {
        case .success(let k): key = k
        case .failure(let problem): return try refuse(.invalidStreamKey(problem), &out)
        }
        var type = RTMPPublishType.live
        if command.arguments.count > 1, case .string(let raw) = command.arguments[1] {
            guard let t = RTMPPublishType(rawValue: raw) else { return try refuse(.unsupportedPublishType(raw), &out) }
            type = t
        }
        streamKey = key
        publishType = type
        state = .publishRequested
        out.actions.append(.publishRequested(app: app, key: key, type: type))
    }

    /// Checks a stream key: a non-empty string of at most `limit` UTF-8 bytes without C0, DEL or
    /// C1 control characters.
    public static func validateStreamKey(_ value: AMF0Value?, limit: Int) -> Result<String, RTMPStreamKeyProblem> {
        guard let key = value?.stringValue else { return .failure(.missing) }
        if key.isEmpty { return .failure(.empty) }
        let utf8 = key.utf8
        if utf8.count > limit { return .failure(.tooLong(bytes: utf8.count, limit: limit)) }
        var offset = 0
        for scalar in key.unicodeScalars {
            let v = scalar.value
            if v < 0x20 || (0x7F...0x9F).contains(v) { return .failure(.controlCharacter(offset: offset)) }
            offset += UTF8.width(scalar)
        }
        return .success(key)
    }

    private mutating func refuse(_ refusal: RTMPRefusal, _ out: inout Output) throws(RTMPError) {
        try sendStatus(level: "error", code: "NetStream.Publish.BadName", description: "Invalid stream name.", &out)
        out.actions.append(.refused(refusal))
        out.actions.append(.close)
        state = .closed
    }

    private mutating func end(_ reason: RTMPEndReason, _ out: inout Output) {
        guard state == .publishing || state == .publishRequested else { return }
        state = .ended
        out.actions.append(.ended(reason))
    }

    // MARK: Output

    private struct Output {
        var actions: [Action] = []

        mutating func send(_ bytes: [UInt8]) {
            guard !bytes.isEmpty else { return }
            if case .send(let previous)? = actions.last {
                actions[actions.count - 1] = .send(previous + bytes)
            } else {
                actions.append(.send(bytes))
            }
        }
    }

    private func amf(_ command: RTMPCommand, streamID: UInt32 = 0) throws(RTMPError) -> RTMPMessage {
        do throws(AMF0Error) { return try .command(command, streamID: streamID) } catch { throw .malformedAMF(error) }
    }

    private mutating func send(_ message: RTMPMessage, on csid: UInt32, _ out: inout Output) throws(RTMPError) {
        out.send(try muxer.encode(message, chunkStreamID: csid))
    }

    private mutating func result(_ txn: Double, _ values: [AMF0Value], _ out: inout Output) throws(RTMPError) {
        try send(amf(RTMPCommand(name: "_result", transactionID: txn, commandObject: .null, arguments: values)), on: Self.commandChunkStream, &out)
    }

    private mutating func sendStatus(level: String, code: String, description: String, _ out: inout Output) throws(RTMPError) {
        let info: AMF0Object = ["level": .string(level), "code": .string(code), "description": .string(description)]
        let status = RTMPCommand(name: "onStatus", transactionID: 0, commandObject: .null, arguments: [.object(info)])
        try send(amf(status, streamID: publishStream), on: Self.streamChunkStream, &out)
    }
}
