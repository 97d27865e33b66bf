import Foundation

// The signaling channel's wire format: versioned JSON messages over a WebSocket, each request
// carrying an id its reply echoes. Pure value types and a codec; the platform and the client
// carry them over sockets.

/// The outcome of a request, as the PCast iOS SDK's `PhenixRequestStatus` names it.
public enum RequestStatus: String, Codable, Sendable, Hashable {
    case ok
    case unauthorized
    case conflict
    case failed
    case noStreamPlaying = "no-stream-playing"
    case notFound = "not-found"
    case badRequest = "bad-request"
    case capacity
    case notSupported = "not-supported"
    case timeout
}

/// Why a stream ended, as the PCast iOS SDK's `PhenixStreamEndedReason` names it.
public enum StreamEndedReason: String, Codable, Sendable, Hashable, CaseIterable {
    /// The stream ended normally.
    case ended
    /// The stream failed.
    case failed
    /// The stream was censored (an operator ended it).
    case censored
    /// A maintenance event ended it.
    case maintenance
    /// Capacity limits ended it.
    case capacity
    /// The publishing app went to the background.
    case appBackground = "app-background"
    /// The publisher stopped it with a reason of its own (the description carries it).
    case custom
}

/// How a publish relates to recordings, after the third vendor's publish types.
public enum PublishType: String, Codable, Sendable, Hashable {
    /// No recording.
    case live
    /// A new recording, replacing one of the same stream name.
    case record
    /// Continue the recording of this stream name after an interruption.
    case append
}

/// One media track as negotiated over signaling (RTP parameters).
public struct MediaTrackDescription: Codable, Sendable, Hashable {
    public enum Kind: String, Codable, Sendable, Hashable { case audio, video }
    public var kind: Kind
    /// Encoding name as in SDP/RTP caps: `H264`, `OPUS`, `VP8`.
    public var codec: String
    public var payloadType: UInt8
    public var clockRate: UInt32
    public var ssrc: UInt32
    /// Set on each encoding of a simulcast video (the `multi-bitrate` capability): the tracks
    /// with a layer are one picture at several sizes, and a viewer is sent one of them at a time.
    public var layer: SimulcastLayer?

    public init(kind: Kind, codec: String, payloadType: UInt8, clockRate: UInt32, ssrc: UInt32, layer: SimulcastLayer? = nil) {
        self.kind = kind
        self.codec = codec
        self.payloadType = payloadType
        self.clockRate = clockRate
        self.ssrc = ssrc
        self.layer = layer
    }
}

/// The size, in pixels, a viewer shows a stream's video at.
public struct ViewSize: Codable, Sendable, Hashable {
    /// What each side may be.
    public static let pixels = 1...16_384

    public var width: Int
    public var height: Int

    /// Whether both sides are within ``pixels``.
    public var isValid: Bool { Self.pixels.contains(width) && Self.pixels.contains(height) }

    public init(width: Int, height: Int) {
        self.width = width
        self.height = height
    }
}

/// One encoding of a simulcast video track: its RID (RFC 8851), picture size and target bitrate.
/// The encodings of one picture share their RTP timestamps (one capture, one timestamp offset),
/// so a relay can switch a viewer between them at a keyframe without rewriting timestamps.
public struct SimulcastLayer: Codable, Sendable, Hashable {
    /// The token capability that makes a publisher send simulcast layers (the PCast iOS SDK's name).
    public static let capability = "multi-bitrate"
    /// What a viewer may ask to stay on instead of a RID: whichever layer is best, or lowest.
    public static let best = "best", lowest = "lowest"

    public var rid: String
    /// The encoding's size; 0×0 when not known (a browser's layer: its offer does not size it).
    public var width: Int
    public var height: Int
    /// Bits per second the encoder aims at.
    public var bitrate: Int

    public init(rid: String, width: Int, height: Int, bitrate: Int) {
        self.rid = rid
        self.width = width
        self.height = height
        self.bitrate = bitrate
    }
}

extension [MediaTrackDescription] {
    /// The tracks as a viewer receives them: the layers of a simulcast video become one video
    /// track, under the SSRC of its best layer (the relay sends whichever layer it chose with it).
    public var asReceived: [MediaTrackDescription] {
        let layered = filter { $0.layer != nil }
        guard let best = layered.max(by: { $0.layer!.bitrate < $1.layer!.bitrate }) else { return self }
        var received: [MediaTrackDescription] = []
        for track in self {
            if track.layer == nil {
                received.append(track)
            } else if track.ssrc == best.ssrc {
                var merged = track
                merged.layer = nil
                received.append(merged)
            }
        }
        return received
    }
}

/// Where media flows and how it is protected: the relay's UDP port and this flow's SRTP keys.
public struct MediaTransport: Codable, Sendable, Hashable {
    /// SRTP protection profile (`AEAD_AES_128_GCM` by default, `AES_CM_128_HMAC_SHA1_80` for peers that need it).
    public var srtpProfile: String
    /// The relay's UDP media port (one for all flows).
    public var port: UInt16
    /// Base64 master key + salt protecting what the client sends.
    public var clientKey: String
    /// Base64 master key + salt protecting what the relay sends.
    public var serverKey: String
    /// The SSRC this client puts in the sender field of the RTCP it sends (receiver reports,
    /// NACK, PLI). Assigned by the relay, which finds the flow by it; for a publisher it is
    /// absent and the relay finds the flow by the SSRCs of its tracks.
    public var rtcpSSRC: UInt32?
    /// The relay's TCP port, where a client whose UDP does not get through sends the same SRTP in
    /// RFC 4571 frames; absent when the relay has none.
    public var tcpPort: UInt16?

    public init(srtpProfile: String, port: UInt16, clientKey: String, serverKey: String, rtcpSSRC: UInt32? = nil, tcpPort: UInt16? = nil) {
        self.srtpProfile = srtpProfile
        self.port = port
        self.clientKey = clientKey
        self.serverKey = serverKey
        self.rtcpSSRC = rtcpSSRC
        self.tcpPort = tcpPort
    }
}

/// What a client sends.
///
/// ```swift
/// let bytes = try SignalingCodec.encode(.request(id: 1, .authenticate(.init(token: authToken))))
/// ```
public enum ClientMessage: Sendable, Hashable {
    public struct Authenticate: Codable, Sendable, Hashable {
        public var token: String
        /// A session to resume after a reconnection (or a platform restart).
        public var sessionId: String?
        /// The secret the platform gave with that session (``ServerMessage/Authenticated/resumeKey``).
        public var resumeKey: String?
        public init(token: String, sessionId: String? = nil, resumeKey: String? = nil) {
            self.token = token
            self.sessionId = sessionId
            self.resumeKey = resumeKey
        }
    }
    public struct Publish: Codable, Sendable, Hashable {
        public var streamToken: String
        public var tags: [String]
        public var publishType: PublishType
        /// The name recordings are kept under (required for `record` and `append`).
        public var streamName: String?
        public var tracks: [MediaTrackDescription]
        public init(streamToken: String, tags: [String] = [], publishType: PublishType = .live,
                    streamName: String? = nil, tracks: [MediaTrackDescription]) {
            self.streamToken = streamToken
            self.tags = tags
            self.publishType = publishType
            self.streamName = streamName
            self.tracks = tracks
        }
    }
    public struct Unpublish: Codable, Sendable, Hashable {
        public var streamId: String
        public var reason: StreamEndedReason
        public var description: String?
        public init(streamId: String, reason: StreamEndedReason, description: String? = nil) {
            self.streamId = streamId
            self.reason = reason
            self.description = description
        }
    }
    public struct Subscribe: Codable, Sendable, Hashable {
        public var streamToken: String
        /// For a simulcast: the layer to stay on (``SimulcastLayer/best``, ``SimulcastLayer/lowest``
        /// or a RID); absent, the relay picks the layer the viewer's link carries.
        public var layer: String?
        /// The application's tags for this subscription (who watches, from where): kept with it at
        /// the platform and told to the backend with the viewer's notifications.
        public var tags: [String]?
        public init(streamToken: String, layer: String? = nil, tags: [String]? = nil) {
            self.streamToken = streamToken
            self.layer = layer
            self.tags = tags
        }
    }
    public struct StreamReference: Codable, Sendable, Hashable {
        public var streamId: String
        /// For `unsubscribe`: which of the session's subscriptions to the stream (the
        /// `subscriberId` of its `subscribed` reply); without it, the oldest.
        public var subscriberId: String?
        public init(streamId: String, subscriberId: String? = nil) {
            self.streamId = streamId
            self.subscriberId = subscriberId
        }
    }

    /// A viewer asks the publisher of a stream it subscribes to for at most `bitsPerSecond` of
    /// video (nil lifts its request). The publisher is asked for the lowest of its viewers' requests.
    public struct LimitBandwidth: Codable, Sendable, Hashable {
        public var streamId: String
        /// Which of the session's subscriptions to the stream; without it, the oldest.
        public var subscriberId: String?
        public var bitsPerSecond: Int?
        public init(streamId: String, subscriberId: String? = nil, bitsPerSecond: Int?) {
            self.streamId = streamId
            self.subscriberId = subscriberId
            self.bitsPerSecond = bitsPerSecond
        }
    }

    /// A viewer tells the platform the size it shows a stream's video at (nil lifts it): of a
    /// simulcast, it is sent no better layer than the smallest that fills that size.
    public struct SetViewSize: Codable, Sendable, Hashable {
        public var streamId: String
        /// Which of the session's subscriptions to the stream; without it, the oldest.
        public var subscriberId: String?
        public var size: ViewSize?
        public init(streamId: String, subscriberId: String? = nil, size: ViewSize?) {
            self.streamId = streamId
            self.subscriberId = subscriberId
            self.size = size
        }
    }

    /// A publisher tells the platform why its stream's quality is reduced (passed on to viewers).
    public struct PublisherQuality: Codable, Sendable, Hashable {
        public var streamId: String
        public var reason: PublisherQualityReason
        public init(streamId: String, reason: PublisherQualityReason) {
            self.streamId = streamId
            self.reason = reason
        }
    }

    case authenticate(Authenticate)
    case keepAlive
    case publish(Publish)
    case unpublish(Unpublish)
    case subscribe(Subscribe)
    case unsubscribe(StreamReference)
    case bye
    case createRoom(CreateRoom)
    case getRoomInfo(RoomLookup)
    case joinRoom(JoinRoom)
    case leaveRoom(RoomReference)
    case destroyRoom(RoomReference)
    case updateRoom(UpdateRoom)
    case updateMember(UpdateMember)
    case sendChatMessage(SendChatMessage)
    case getChatMessages(GetChatMessages)
    /// The platform pulls a remote source and publishes it (ingest).
    case publishRemote(PublishRemote)
    /// Stops an ingest this session started.
    case stopIngest(StreamReference)
    case limitBandwidth(LimitBandwidth)
    case setViewSize(SetViewSize)
    case publisherQuality(PublisherQuality)

    public var type: String {
        switch self {
        case .authenticate: return "authenticate"
        case .keepAlive: return "keep-alive"
        case .publish: return "publish"
        case .unpublish: return "unpublish"
        case .subscribe: return "subscribe"
        case .unsubscribe: return "unsubscribe"
        case .bye: return "bye"
        case .createRoom: return "create-room"
        case .getRoomInfo: return "get-room-info"
        case .joinRoom: return "join-room"
        case .leaveRoom: return "leave-room"
        case .destroyRoom: return "destroy-room"
        case .updateRoom: return "update-room"
        case .updateMember: return "update-member"
        case .sendChatMessage: return "send-chat-message"
        case .getChatMessages: return "get-chat-messages"
        case .publishRemote: return "publish-remote"
        case .stopIngest: return "stop-ingest"
        case .limitBandwidth: return "limit-bandwidth"
        case .setViewSize: return "set-view-size"
        case .publisherQuality: return "publisher-quality"
        }
    }
}

/// What the platform sends: replies (echoing a request id) and events.
public enum ServerMessage: Sendable, Hashable {
    public struct Authenticated: Codable, Sendable, Hashable {
        public var sessionId: String
        /// Seconds between keep-alives the platform expects.
        public var keepAliveInterval: Int
        /// The secret that resumes this session after a reconnection (keep it private: the
        /// session id is visible to room members, this is not).
        public var resumeKey: String?
        /// True when an earlier session was resumed (its room memberships are intact).
        public var resumed: Bool?
        /// On a resume: the streams the platform still has for the session (published or
        /// subscribed). A platform that restarted after a crash has none; the client ends the rest.
        public var streams: [String]?
        public init(sessionId: String, keepAliveInterval: Int, resumeKey: String? = nil, resumed: Bool? = nil, streams: [String]? = nil) {
            self.sessionId = sessionId
            self.keepAliveInterval = keepAliveInterval
            self.resumeKey = resumeKey
            self.resumed = resumed
            self.streams = streams
        }
    }
    public struct Published: Codable, Sendable, Hashable {
        public var streamId: String
        public var transport: MediaTransport
        public init(streamId: String, transport: MediaTransport) {
            self.streamId = streamId
            self.transport = transport
        }
    }
    public struct Subscribed: Codable, Sendable, Hashable {
        public var streamId: String
        public var tracks: [MediaTrackDescription]
        public var transport: MediaTransport
        /// This subscription, among the session's subscriptions to the same stream.
        public var subscriberId: String?
        public init(streamId: String, tracks: [MediaTrackDescription], transport: MediaTransport, subscriberId: String? = nil) {
            self.streamId = streamId
            self.tracks = tracks
            self.transport = transport
            self.subscriberId = subscriberId
        }
    }
    /// Where a `streaming` subscriber plays the stream: the HLS playlist's path on the platform's
    /// HTTP (`/hls/<stream id>/index.m3u8`), to be fetched with the subscriber's stream token.
    public struct StreamingSource: Codable, Sendable, Hashable {
        public var streamId: String
        public var playlistPath: String
        /// The stream's tracks (what the playlist carries).
        public var tracks: [MediaTrackDescription]
        public init(streamId: String, playlistPath: String, tracks: [MediaTrackDescription]) {
            self.streamId = streamId
            self.playlistPath = playlistPath
            self.tracks = tracks
        }
    }
    public struct StreamEnded: Codable, Sendable, Hashable {
        public var streamId: String
        public var reason: StreamEndedReason
        public var description: String?
        public init(streamId: String, reason: StreamEndedReason, description: String? = nil) {
            self.streamId = streamId
            self.reason = reason
            self.description = description
        }
    }
    /// A typed error reply.
    public struct Failure: Codable, Sendable, Hashable, Error {
        public var status: RequestStatus
        public var message: String
        public init(status: RequestStatus, message: String) {
            self.status = status
            self.message = message
        }
    }

    case authenticated(Authenticated)
    case published(Published)
    case subscribed(Subscribed)
    /// Reply to subscribe with a `streaming` stream token (and no `real-time`): the stream is
    /// played as HLS from this source, not through the relay.
    case streamingSource(StreamingSource)
    /// A request that needs no data in its reply succeeded.
    case ok
    case streamEnded(StreamEnded)
    case failure(Failure)
    case roomInfo(RoomInfo)
    case joinedRoom(JoinedRoom)
    case roomEvent(RoomEvent)
    case roomSize(RoomSize)
    case memberInfo(MemberInfo)
    case chatMessages(ChatMessages)
    /// A chat message: the event every member gets, and the reply to its sender.
    case chatMessage(ChatEvent)
    /// Reply to publish-remote: the ingest runs and publishes this stream.
    case ingestStarted(IngestStarted)
    /// Periodic position of an ingest, to the session that started it.
    case ingestProgress(IngestProgress)
    /// To a publisher: the lowest video bitrate its stream's viewers ask for (nil: none asks).
    case bandwidthLimit(BandwidthLimit)
    /// To a stream's viewers: why its publisher's quality is reduced (also right after subscribing,
    /// when it is).
    case publisherQuality(ClientMessage.PublisherQuality)
    /// To a viewer: the relay stopped sending it the stream's video (its leg cannot carry it; the
    /// audio still flows), or sends it again.
    case subscriberVideo(SubscriberVideoEvent)
    /// To a simulcast publisher: the layers to encode (the others nobody watches: they rest).
    case layerActivity(LayerActivity)
    /// To a simulcast viewer: its link holds it below the best layer, or no longer does.
    case subscriberLayer(SubscriberLayerEvent)

    public struct SubscriberLayerEvent: Codable, Sendable, Hashable {
        public var streamId: String
        public var subscriberId: String
        /// The RID of the layer it is sent.
        public var layer: String
        public var reduced: Bool
        public init(streamId: String, subscriberId: String, layer: String, reduced: Bool) {
            self.streamId = streamId
            self.subscriberId = subscriberId
            self.layer = layer
            self.reduced = reduced
        }
    }

    public struct LayerActivity: Codable, Sendable, Hashable {
        public var streamId: String
        /// The RIDs of the layers to encode.
        public var active: [String]
        public init(streamId: String, active: [String]) {
            self.streamId = streamId
            self.active = active
        }
    }

    public struct BandwidthLimit: Codable, Sendable, Hashable {
        public var streamId: String
        public var bitsPerSecond: Int?
        public init(streamId: String, bitsPerSecond: Int?) {
            self.streamId = streamId
            self.bitsPerSecond = bitsPerSecond
        }
    }

    public var type: String {
        switch self {
        case .authenticated: return "authenticated"
        case .published: return "published"
        case .subscribed: return "subscribed"
        case .streamingSource: return "streaming-source"
        case .ok: return "ok"
        case .streamEnded: return "stream-ended"
        case .failure: return "error"
        case .roomInfo: return "room-info"
        case .joinedRoom: return "joined-room"
        case .roomEvent: return "room-event"
        case .roomSize: return "room-size"
        case .memberInfo: return "member-info"
        case .chatMessages: return "chat-messages"
        case .chatMessage: return "chat-message"
        case .ingestStarted: return "ingest-started"
        case .ingestProgress: return "ingest-progress"
        case .bandwidthLimit: return "bandwidth-limit"
        case .publisherQuality: return "publisher-quality"
        case .subscriberVideo: return "subscriber-video"
        case .layerActivity: return "layer-activity"
        case .subscriberLayer: return "subscriber-layer"
        }
    }
}

/// The relay stopped sending a subscriber a stream's video because it could not get through
/// (`suspended`; the audio still flows), or sends it again: the relay's event, and the
/// platform's `subscriber-video` message to the subscribing session.
public struct SubscriberVideoEvent: Codable, Sendable, Hashable {
    public var streamId: String
    public var subscriberId: String
    public var suspended: Bool

    public init(streamId: String, subscriberId: String, suspended: Bool) {
        self.streamId = streamId
        self.subscriberId = subscriberId
        self.suspended = suspended
    }
}

/// Why a publisher's stream is reduced: its own upload (`uploadLimited`), its viewers' bandwidth
/// requests (`networkLimited`), or not at all.
public enum PublisherQualityReason: String, Codable, Sendable, Hashable {
    case none
    case uploadLimited
    case networkLimited
}

/// A message with its request id: requests and their replies carry one, events do not.
public struct Envelope<Message: Sendable & Hashable>: Sendable, Hashable {
    public var id: UInt64?
    public var message: Message

    public init(id: UInt64?, _ message: Message) {
        self.id = id
        self.message = message
    }

    public static func request(id: UInt64, _ message: Message) -> Self { Self(id: id, message) }
    public static func event(_ message: Message) -> Self { Self(id: nil, message) }
}

/// Why a signaling message was refused. Carries the request id when it could be read, so the
/// platform can answer the request that caused it with a typed error reply.
public struct SignalingError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// Over the size limit (the WebSocket closes with 1009).
        case tooLarge(size: Int, limit: Int)
        /// Not JSON, or not a JSON object.
        case malformed
        case unsupportedVersion(Int)
        case unknownType(String)
        /// The payload does not fit its type (missing or mistyped fields, values out of limits).
        case invalidPayload(type: String, detail: String)
    }
    /// A peer's text quoted back to it, cut short: a reply must not echo a megabyte of junk.
    public static func clipped(_ text: String, limit: Int = 64) -> String {
        text.count <= limit ? text : String(text.prefix(limit)) + "…"
    }

    public let kind: Kind
    public let requestId: UInt64?

    public init(kind: Kind, requestId: UInt64?) {
        self.kind = kind
        self.requestId = requestId
    }

    public var description: String {
        switch kind {
        case .tooLarge(let size, let limit): return "message of \(size) bytes exceeds the \(limit)-byte limit"
        case .malformed: return "message is not a JSON object"
        case .unsupportedVersion(let v): return "unsupported protocol version \(v) (this side speaks \(SignalingCodec.version))"
        case .unknownType(let t): return "unknown message type '\(Self.clipped(t))'"
        case .invalidPayload(let t, let d): return "invalid '\(Self.clipped(t))' message: \(Self.clipped(d, limit: 256))"
        }
    }

    /// The error reply the platform sends for it.
    public var reply: Envelope<ServerMessage> {
        Envelope(id: requestId, .failure(.init(status: .badRequest, message: description)))
    }
}

extension ClientMessage: CustomTyped {}
extension ServerMessage: CustomTyped {}
