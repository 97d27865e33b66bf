import Foundation

// The signaling codec: versioned JSON envelopes to and from the messages in Signaling.swift.

/// Encodes and decodes signaling messages: `{"v":1,"id":7,"type":"publish","payload":{…}}`.
///
/// ```swift
/// let data = try SignalingCodec.encode(Envelope.request(id: 7, ClientMessage.keepAlive))
/// let decoded = try SignalingCodec.decodeClientMessage(data)   // id 7, .keepAlive
/// ```
public enum SignalingCodec {
    public static let version = 1
    /// Largest message either side accepts (bytes).
    public static let defaultSizeLimit = 64 * 1024
    /// Largest message a client accepts from the platform (a history page of long chat messages
    /// exceeds the client-to-platform limit).
    public static let serverMessageSizeLimit = 4 * 1024 * 1024
    /// Limits on lists and strings inside messages, so a message within the size limit still
    /// cannot make the other side do unbounded work.
    public static let maximumTags = 64
    public static let maximumTracks = 8
    public static let maximumStringLength = 8 * 1024

    private struct Header: Decodable {
        var v: Int?
        var id: UInt64?
        var type: String?
    }

    private struct Wire<Payload: Encodable>: Encodable {
        var v: Int
        var id: UInt64?
        var type: String
        var payload: Payload?
    }

    private struct Empty: Codable {}

    private struct PayloadBox<Payload: Decodable>: Decodable {
        var payload: Payload
    }

    // MARK: Encoding

    public static func encode(_ envelope: Envelope<ClientMessage>) throws -> Data {
        switch envelope.message {
        case .authenticate(let p): return try wire(envelope, p)
        case .publish(let p): return try wire(envelope, p)
        case .unpublish(let p): return try wire(envelope, p)
        case .subscribe(let p): return try wire(envelope, p)
        case .unsubscribe(let p): return try wire(envelope, p)
        case .keepAlive, .bye: return try wire(envelope, Empty?.none)
        case .createRoom(let p): return try wire(envelope, p)
        case .getRoomInfo(let p): return try wire(envelope, p)
        case .joinRoom(let p): return try wire(envelope, p)
        case .leaveRoom(let p): return try wire(envelope, p)
        case .destroyRoom(let p): return try wire(envelope, p)
        case .updateRoom(let p): return try wire(envelope, p)
        case .updateMember(let p): return try wire(envelope, p)
        case .sendChatMessage(let p): return try wire(envelope, p)
        case .getChatMessages(let p): return try wire(envelope, p)
        case .publishRemote(let p): return try wire(envelope, p)
        case .stopIngest(let p): return try wire(envelope, p)
        case .limitBandwidth(let p): return try wire(envelope, p)
        case .setViewSize(let p): return try wire(envelope, p)
        case .publisherQuality(let p): return try wire(envelope, p)
        }
    }

    public static func encode(_ envelope: Envelope<ServerMessage>) throws -> Data {
        switch envelope.message {
        case .authenticated(let p): return try wire(envelope, p)
        case .published(let p): return try wire(envelope, p)
        case .subscribed(let p): return try wire(envelope, p)
        case .streamingSource(let p): return try wire(envelope, p)
        case .streamEnded(let p): return try wire(envelope, p)
        case .failure(let p): return try wire(envelope, p)
        case .ok: return try wire(envelope, Empty?.none)
        case .roomInfo(let p): return try wire(envelope, p)
        case .joinedRoom(let p): return try wire(envelope, p)
        case .roomEvent(let p): return try wire(envelope, p)
        case .roomSize(let p): return try wire(envelope, p)
        case .memberInfo(let p): return try wire(envelope, p)
        case .chatMessages(let p): return try wire(envelope, p)
        case .chatMessage(let p): return try wire(envelope, p)
        case .ingestStarted(let p): return try wire(envelope, p)
        case .ingestProgress(let p): return try wire(envelope, p)
        case .bandwidthLimit(let p): return try wire(envelope, p)
        case .publisherQuality(let p): return try wire(envelope, p)
        case .subscriberVideo(let p): return try wire(envelope, p)
        case .layerActivity(let p): return try wire(envelope, p)
        case .subscriberLayer(let p): return try wire(envelope, p)
        }
    }

    private static func wire<M, P: Encodable>(_ envelope: Envelope<M>, _ payload: P?) throws -> Data where M: CustomTyped {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(Wire(v: version, id: envelope.id, type: envelope.message.type, payload: payload))
    }

    // MARK: Decoding

    public static func decodeClientMessage(_ data: Data, sizeLimit: Int = defaultSizeLimit) throws(SignalingError) -> Envelope<ClientMessage> {
        let header = try readHeader(data, sizeLimit: sizeLimit)
        let id = header.id
        let type = header.type!
        let message: ClientMessage
        switch type {
        case "authenticate": message = .authenticate(try payload(data, type, id))
        case "keep-alive": message = .keepAlive
        case "publish": message = .publish(try payload(data, type, id))
        case "unpublish": message = .unpublish(try payload(data, type, id))
        case "subscribe": message = .subscribe(try payload(data, type, id))
        case "unsubscribe": message = .unsubscribe(try payload(data, type, id))
        case "bye": message = .bye
        case "create-room": message = .createRoom(try payload(data, type, id))
        case "get-room-info": message = .getRoomInfo(try payload(data, type, id))
        case "join-room": message = .joinRoom(try payload(data, type, id))
        case "leave-room": message = .leaveRoom(try payload(data, type, id))
        case "destroy-room": message = .destroyRoom(try payload(data, type, id))
        case "update-room": message = .updateRoom(try payload(data, type, id))
        case "update-member": message = .updateMember(try payload(data, type, id))
        case "send-chat-message": message = .sendChatMessage(try payload(data, type, id))
        case "get-chat-messages": message = .getChatMessages(try payload(data, type, id))
        case "publish-remote": message = .publishRemote(try payload(data, type, id))
        case "stop-ingest": message = .stopIngest(try payload(data, type, id))
        case "limit-bandwidth": message = .limitBandwidth(try payload(data, type, id))
        case "set-view-size": message = .setViewSize(try payload(data, type, id))
        case "publisher-quality": message = .publisherQuality(try payload(data, type, id))
        default: throw SignalingError(kind: .unknownType(type), requestId: id)
        }
        try validate(message, id: id)
        return Envelope(id: id, message)
    }

    public static func decodeServerMessage(_ data: Data, sizeLimit: Int = defaultSizeLimit) throws(SignalingError) -> Envelope<ServerMessage> {
        let header = try readHeader(data, sizeLimit: sizeLimit)
        let id = header.id
        let type = header.type!
        let message: ServerMessage
        switch type {
        case "authenticated": message = .authenticated(try payload(data, type, id))
        case "published": message = .published(try payload(data, type, id))
        case "subscribed": message = .subscribed(try payload(data, type, id))
        case "streaming-source": message = .streamingSource(try payload(data, type, id))
        case "ok": message = .ok
        case "stream-ended": message = .streamEnded(try payload(data, type, id))
        case "error": message = .failure(try payload(data, type, id))
        case "room-info": message = .roomInfo(try payload(data, type, id))
        case "joined-room": message = .joinedRoom(try payload(data, type, id))
        case "room-event": message = .roomEvent(try payload(data, type, id))
        case "room-size": message = .roomSize(try payload(data, type, id))
        case "member-info": message = .memberInfo(try payload(data, type, id))
        case "chat-messages": message = .chatMessages(try payload(data, type, id))
        case "chat-message": message = .chatMessage(try payload(data, type, id))
        case "ingest-started": message = .ingestStarted(try payload(data, type, id))
        case "ingest-progress": message = .ingestProgress(try payload(data, type, id))
        case "bandwidth-limit": message = .bandwidthLimit(try payload(data, type, id))
        case "publisher-quality": message = .publisherQuality(try payload(data, type, id))
        case "subscriber-video": message = .subscriberVideo(try payload(data, type, id))
        case "layer-activity": message = .layerActivity(try payload(data, type, id))
        case "subscriber-layer": message = .subscriberLayer(try payload(data, type, id))
        default: throw SignalingError(kind: .unknownType(type), requestId: id)
        }
        return Envelope(id: id, message)
    }

    private static func readHeader(_ data: Data, sizeLimit: Int) throws(SignalingError) -> Header {
        guard data.count <= sizeLimit else { throw SignalingError(kind: .tooLarge(size: data.count, limit: sizeLimit), requestId: nil) }
        let header: Header
        do {
            header = try JSONDecoder().decode(Header.self, from: data)
        } catch {
            throw SignalingError(kind: .malformed, requestId: nil)
        }
        guard let v = header.v else { throw SignalingError(kind: .invalidPayload(type: header.type ?? "?", detail: "no version field 'v'"), requestId: header.id) }
        guard v == version else { throw SignalingError(kind: .unsupportedVersion(v), requestId: header.id) }
        guard let type = header.type, !type.isEmpty else {
            throw SignalingError(kind: .invalidPayload(type: "?", detail: "no message type"), requestId: header.id)
        }
        return header
    }

    private static func payload<P: Decodable>(_ data: Data, _ type: String, _ id: UInt64?) throws(SignalingError) -> P {
        do {
            return try JSONDecoder().decode(PayloadBox<P>.self, from: data).payload
        } catch let DecodingError.keyNotFound(key, context) {
            let path = (context.codingPath + [key]).map(\.stringValue).filter { $0 != "payload" }.joined(separator: ".")
            throw SignalingError(kind: .invalidPayload(type: type, detail: "missing field '\(path)'"), requestId: id)
        } catch let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context) {
            let path = context.codingPath.map(\.stringValue).filter { $0 != "payload" }.joined(separator: ".")
            throw SignalingError(kind: .invalidPayload(type: type, detail: "field '\(path)' has the wrong type"), requestId: id)
        } catch let DecodingError.dataCorrupted(context) {
            let path = context.codingPath.map(\.stringValue).filter { $0 != "payload" }.joined(separator: ".")
            throw SignalingError(kind: .invalidPayload(type: type, detail: "field '\(path)' has an invalid value"), requestId: id)
        } catch {
            throw SignalingError(kind: .invalidPayload(type: type, detail: "unreadable payload"), requestId: id)
        }
    }

    private static func validate(_ message: ClientMessage, id: UInt64?) throws(SignalingError) {
        func fail(_ detail: String) -> SignalingError {
            SignalingError(kind: .invalidPayload(type: message.type, detail: detail), requestId: id)
        }
        func check(_ string: String?, _ name: String) throws(SignalingError) {
            if let string, string.utf8.count > maximumStringLength { throw fail("'\(name)' is longer than \(maximumStringLength) bytes") }
        }
        switch message {
        case .authenticate(let p):
            try check(p.token, "token")
            try check(p.sessionId, "sessionId")
            try check(p.resumeKey, "resumeKey")
        case .publish(let p):
            try check(p.streamToken, "streamToken")
            try check(p.streamName, "streamName")
            guard p.tags.count <= maximumTags else { throw fail("more than \(maximumTags) tags") }
            for tag in p.tags { try check(tag, "tags") }
            guard !p.tracks.isEmpty else { throw fail("no tracks") }
            guard p.tracks.count <= maximumTracks else { throw fail("more than \(maximumTracks) tracks") }
            guard Set(p.tracks.map(\.ssrc)).count == p.tracks.count else { throw fail("two tracks share an SSRC") }
            for track in p.tracks {
                guard (96...127).contains(track.payloadType) || track.payloadType < 35 else { throw fail("payload type \(track.payloadType) collides with RTCP") }
                guard track.clockRate > 0 else { throw fail("clock rate 0") }
                try check(track.codec, "codec")
            }
            try recording(p.publishType, p.streamName)
        case .unpublish(let p):
            try check(p.streamId, "streamId")
            try check(p.description, "description")
        case .subscribe(let p):
            try check(p.streamToken, "streamToken")
            let tags = p.tags ?? []
            guard tags.count <= maximumTags else { throw fail("more than \(maximumTags) tags") }
            for tag in tags { try check(tag, "tags") }
        case .unsubscribe(let p):
            try check(p.streamId, "streamId")
            try check(p.subscriberId, "subscriberId")
        case .keepAlive, .bye:
            break
        case .createRoom(let p):
            try name(p.name, "name", required: true)
            try name(p.alias, "alias", required: false)
            try check(p.description, "description")
        case .getRoomInfo(let p):
            try lookup(p)
        case .joinRoom(let p):
            try lookup(p.room)
            try name(p.member.screenName, "member.screenName", required: false)
            try streams(p.member.streams)
        case .leaveRoom(let p), .destroyRoom(let p):
            try name(p.roomId, "roomId", required: true)
        case .updateRoom(let p):
            try name(p.roomId, "roomId", required: true)
            if p.name?.isEmpty == true { throw fail("'name' is empty") }
            try name(p.name, "name", required: false)
            try check(p.description, "description")
            try check(p.bridgeId, "bridgeId")
            try check(p.pin, "pin")
        case .updateMember(let p):
            try name(p.roomId, "roomId", required: true)
            try check(p.sessionId, "sessionId")
            try name(p.screenName, "screenName", required: false)
            if let s = p.streams { try streams(s) }
        case .sendChatMessage(let p):
            try name(p.roomId, "roomId", required: true)
            guard !p.message.isEmpty else { throw fail("empty message") }
            guard p.message.utf8.count <= RoomLimits.maximumChatMessageLength else {
                throw fail("message is longer than \(RoomLimits.maximumChatMessageLength) bytes")
            }
        case .getChatMessages(let p):
            try name(p.roomId, "roomId", required: true)
            guard (1...RoomLimits.maximumBatchSize).contains(p.batchSize) else {
                throw fail("batchSize must be 1...\(RoomLimits.maximumBatchSize)")
            }
            for (id, field) in [(p.afterMessageId, "afterMessageId"), (p.beforeMessageId, "beforeMessageId")] {
                if let id, ChatMessageDescription.sequence(of: id) == nil { throw fail("'\(field)' is not a message id") }
            }
        case .publishRemote(let p):
            try check(p.streamToken, "streamToken")
            try check(p.streamName, "streamName")
            guard !p.streamURI.isEmpty else { throw fail("missing 'streamUri'") }
            try check(p.streamURI, "streamUri")
            guard p.tags.count <= maximumTags else { throw fail("more than \(maximumTags) tags") }
            for tag in p.tags { try check(tag, "tags") }
            guard p.connectOptions.count <= maximumTags else { throw fail("more than \(maximumTags) connect options") }
            for rate in [p.maximumFrameRate, p.exactFrameRate] {
                if let rate, !(rate > 0 && rate <= 240) { throw fail("frame rate \(rate) is outside 0…240") }
            }
            if let skip = p.prerollSkipMilliseconds, !(0...60_000).contains(skip) { throw fail("prerollSkipMilliseconds must be 0…60000") }
            try recording(p.publishType, p.streamName)
        case .stopIngest(let p):
            try check(p.streamId, "streamId")
        case .limitBandwidth(let p):
            try check(p.streamId, "streamId")
            try check(p.subscriberId, "subscriberId")
            if let bits = p.bitsPerSecond, !(1_000...1_000_000_000).contains(bits) { throw fail("bitsPerSecond must be 1000…1000000000") }
        case .setViewSize(let p):
            try check(p.streamId, "streamId")
            try check(p.subscriberId, "subscriberId")
            if let size = p.size, !size.isValid { throw fail("a view size is 1…16384 pixels each way") }
        case .publisherQuality(let p):
            try check(p.streamId, "streamId")
        }

        /// Publish types that record need a stream name that is safe as a file name.
        func recording(_ type: PublishType, _ streamName: String?) throws(SignalingError) {
            guard type != .live else { return }
            guard let streamName, !streamName.isEmpty else { throw fail("publish type '\(type.rawValue)' needs a streamName") }
            do throws(RecordingNameError) { _ = try RecordingName(streamName) } catch { throw fail("'streamName': \(error)") }
        }

        func name(_ value: String?, _ field: String, required: Bool) throws(SignalingError) {
            guard let value else {
                if required { throw fail("missing '\(field)'") }
                return
            }
            if required && value.isEmpty { throw fail("'\(field)' is empty") }
            guard value.utf8.count <= RoomLimits.maximumNameLength else { throw fail("'\(field)' is longer than \(RoomLimits.maximumNameLength) bytes") }
            guard !value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                throw fail("'\(field)' contains control characters")
            }
        }
        func lookup(_ p: ClientMessage.RoomLookup) throws(SignalingError) {
            guard !(p.roomId ?? "").isEmpty || !(p.alias ?? "").isEmpty else { throw fail("give a roomId or an alias") }
            try name(p.roomId, "roomId", required: false)
            try name(p.alias, "alias", required: false)
        }
        func streams(_ list: [RoomStreamDescription]) throws(SignalingError) {
            guard list.count <= RoomLimits.maximumStreamsPerMember else { throw fail("more than \(RoomLimits.maximumStreamsPerMember) streams") }
            for stream in list { try check(stream.uri, "streams.uri") }
        }
    }
}

/// Messages that name their own wire type.
protocol CustomTyped { var type: String { get } }
