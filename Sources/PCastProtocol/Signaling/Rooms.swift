import Foundation

// Rooms, members and chat on the wire: the PCast iOS SDK's Room Service and Chat Service models as plain
// values. The platform owns the truth; clients hold observables built from these.

/// The PCast iOS SDK's room types.
public enum RoomType: String, Codable, Sendable, Hashable, CaseIterable {
    /// One to one chat (at most two visible members).
    case directChat = "direct-chat"
    /// Many to many or few to many chat.
    case multiPartyChat = "multi-party-chat"
    /// Moderated chat: members change each other's state only as moderators.
    case moderatedChat = "moderated-chat"
    /// A few presenters, many audience members.
    case townHall = "town-hall"
    /// View-only room: presenters broadcast to an audience.
    case channel
}

/// The PCast iOS SDK's member roles and what each may do (see ``MemberRole/isVisible``,
/// ``MemberRole/mayPublish``, ``MemberRole/isModerator``).
public enum MemberRole: String, Codable, Sendable, Hashable, CaseIterable {
    /// Has streams, visible to all members.
    case participant
    /// No streams, not visible to other members.
    case audience
    /// A participant whose streams may be `presentation` streams.
    case presenter
    /// A privileged participant: changes other members and the room, destroys the room.
    case moderator

    /// Whether other members see this member.
    public var isVisible: Bool { self != .audience }
    /// Whether this member may carry streams.
    public var mayPublish: Bool { self != .audience }
    /// Whether this member may carry `presentation` streams.
    public var mayPresent: Bool { self == .presenter || self == .moderator }
    public var isModerator: Bool { self == .moderator }
}

/// The PCast iOS SDK's member states.
public enum MemberState: String, Codable, Sendable, Hashable, CaseIterable {
    case active
    case passive
    case handRaised = "hand-raised"
    case inactive
    /// The member has left the room (what others see last).
    case offline
}

/// The PCast iOS SDK's stream types.
public enum RoomStreamType: String, Codable, Sendable, Hashable, CaseIterable {
    /// General purpose stream.
    case user
    /// Privileged stream (presenters and moderators).
    case presentation
    /// Audio-only stream.
    case audio
}

/// The PCast iOS SDK's stream track states.
public enum RoomTrackState: String, Codable, Sendable, Hashable, CaseIterable {
    case enabled
    case disabled
    case ended
}

/// A member's stream as shared with the room: a URI (usually `pcast://<streamId>`, optionally
/// with a wildcard stream token as its query) and the state of its tracks.
///
/// ```swift
/// RoomStreamDescription(uri: "pcast://stream-1", type: .user)
/// ```
public struct RoomStreamDescription: Codable, Sendable, Hashable {
    public var uri: String
    public var type: RoomStreamType
    public var audioState: RoomTrackState
    public var videoState: RoomTrackState

    public init(uri: String, type: RoomStreamType, audioState: RoomTrackState = .enabled, videoState: RoomTrackState = .enabled) {
        self.uri = uri
        self.type = type
        self.audioState = audioState
        self.videoState = videoState
    }

    /// The stream id in a `pcast://<streamId>[?…]` URI.
    public var pcastStreamId: String? {
        guard uri.hasPrefix("pcast://") else { return nil }
        let rest = uri.dropFirst("pcast://".count)
        let id = rest.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        return id.isEmpty ? nil : id
    }

    /// The wildcard stream token in the URI's `streamToken=` query item, if any.
    public var streamToken: String? {
        guard let query = uri.split(separator: "?", maxSplits: 1).dropFirst().first else { return nil }
        for item in query.split(separator: "&") where item.hasPrefix("streamToken=") {
            return String(item.dropFirst("streamToken=".count)).removingPercentEncoding
        }
        return nil
    }
}

/// A room member as the platform knows it.
public struct MemberDescription: Codable, Sendable, Hashable {
    public var sessionId: String
    public var screenName: String
    public var role: MemberRole
    public var state: MemberState
    public var streams: [RoomStreamDescription]
    /// Milliseconds since 1970 (UTC) of the last change, set by the platform.
    public var lastUpdate: Int64

    public init(sessionId: String, screenName: String, role: MemberRole, state: MemberState = .active,
                streams: [RoomStreamDescription] = [], lastUpdate: Int64 = 0) {
        self.sessionId = sessionId
        self.screenName = screenName
        self.role = role
        self.state = state
        self.streams = streams
        self.lastUpdate = lastUpdate
    }
}

/// A room as the platform knows it.
public struct RoomDescription: Codable, Sendable, Hashable {
    public var roomId: String
    public var alias: String
    public var name: String
    public var description: String
    public var type: RoomType
    public var bridgeId: String
    public var pin: String

    public init(roomId: String, alias: String, name: String, description: String = "", type: RoomType,
                bridgeId: String = "", pin: String = "") {
        self.roomId = roomId
        self.alias = alias
        self.name = name
        self.description = description
        self.type = type
        self.bridgeId = bridgeId
        self.pin = pin
    }
}

/// Who sent a chat message, as it was when sent.
public struct ChatUser: Codable, Sendable, Hashable {
    public var sessionId: String
    public var screenName: String
    public var role: MemberRole
    /// The member's `lastUpdate` when the message was sent.
    public var lastUpdate: Int64

    public init(sessionId: String, screenName: String, role: MemberRole, lastUpdate: Int64) {
        self.sessionId = sessionId
        self.screenName = screenName
        self.role = role
        self.lastUpdate = lastUpdate
    }
}

/// A chat message. Its text is data: stored and delivered byte for byte, never interpreted.
public struct ChatMessageDescription: Codable, Sendable, Hashable {
    /// Unique and ordered within its room (`chat-<sequence>`).
    public var messageId: String
    public var roomId: String
    /// Milliseconds since 1970 (UTC), the platform's clock.
    public var timestamp: Int64
    public var from: ChatUser
    public var message: String

    public init(messageId: String, roomId: String, timestamp: Int64, from: ChatUser, message: String) {
        self.messageId = messageId
        self.roomId = roomId
        self.timestamp = timestamp
        self.from = from
        self.message = message
    }

    /// The message's sequence number within the platform (`chat-<n>` → n).
    public var sequence: UInt64? { Self.sequence(of: messageId) }

    public static func messageId(sequence: UInt64) -> String { "chat-\(sequence)" }

    public static func sequence(of messageId: String) -> UInt64? {
        guard messageId.hasPrefix("chat-") else { return nil }
        let digits = messageId.utf8.dropFirst(5)
        // Canonical decimal only: no sign, no leading zeros ("chat-007" names no message).
        guard let first = digits.first, digits.allSatisfy({ (0x30...0x39).contains($0) }), first != 0x30 || digits.count == 1 else { return nil }
        return UInt64(String(decoding: digits, as: UTF8.self))
    }
}

extension ClientMessage {
    /// Room creation options (the PCast iOS SDK's `RoomOptions` / `ChannelOptions`).
    public struct CreateRoom: Codable, Sendable, Hashable {
        public var name: String
        public var type: RoomType
        /// Generated from the name when absent.
        public var alias: String?
        public var description: String?
        public init(name: String, type: RoomType, alias: String? = nil, description: String? = nil) {
            self.name = name
            self.type = type
            self.alias = alias
            self.description = description
        }
    }

    /// A room by id or alias (id wins when both are given).
    public struct RoomLookup: Codable, Sendable, Hashable {
        public var roomId: String?
        public var alias: String?
        public init(roomId: String? = nil, alias: String? = nil) {
            self.roomId = roomId
            self.alias = alias
        }
    }

    /// What a member says about itself (the self model).
    public struct MemberModel: Codable, Sendable, Hashable {
        public var screenName: String
        public var role: MemberRole
        public var state: MemberState
        public var streams: [RoomStreamDescription]
        public init(screenName: String, role: MemberRole, state: MemberState = .active, streams: [RoomStreamDescription] = []) {
            self.screenName = screenName
            self.role = role
            self.state = state
            self.streams = streams
        }
    }

    public struct JoinRoom: Codable, Sendable, Hashable {
        public var room: RoomLookup
        public var member: MemberModel
        public init(room: RoomLookup, member: MemberModel) {
            self.room = room
            self.member = member
        }
    }

    public struct RoomReference: Codable, Sendable, Hashable {
        public var roomId: String
        public init(roomId: String) { self.roomId = roomId }
    }

    /// Changes to the room model (absent fields are unchanged). Moderators only.
    public struct UpdateRoom: Codable, Sendable, Hashable {
        public var roomId: String
        public var name: String?
        public var description: String?
        public var bridgeId: String?
        public var pin: String?
        public init(roomId: String, name: String? = nil, description: String? = nil, bridgeId: String? = nil, pin: String? = nil) {
            self.roomId = roomId
            self.name = name
            self.description = description
            self.bridgeId = bridgeId
            self.pin = pin
        }
    }

    /// Changes to a member (absent fields are unchanged): one's own, or another's as a moderator.
    public struct UpdateMember: Codable, Sendable, Hashable {
        public var roomId: String
        /// The member to change; this session when absent.
        public var sessionId: String?
        public var screenName: String?
        public var role: MemberRole?
        public var state: MemberState?
        public var streams: [RoomStreamDescription]?
        public init(roomId: String, sessionId: String? = nil, screenName: String? = nil, role: MemberRole? = nil,
                    state: MemberState? = nil, streams: [RoomStreamDescription]? = nil) {
            self.roomId = roomId
            self.sessionId = sessionId
            self.screenName = screenName
            self.role = role
            self.state = state
            self.streams = streams
        }
    }

    public struct SendChatMessage: Codable, Sendable, Hashable {
        public var roomId: String
        public var message: String
        public init(roomId: String, message: String) {
            self.roomId = roomId
            self.message = message
        }
    }

    /// Chat history: up to `batchSize` messages after `afterMessageId` (the oldest first after it)
    /// and/or before `beforeMessageId` (the newest before it); neither: the most recent.
    public struct GetChatMessages: Codable, Sendable, Hashable {
        public var roomId: String
        public var batchSize: Int
        public var afterMessageId: String?
        public var beforeMessageId: String?
        public init(roomId: String, batchSize: Int, afterMessageId: String? = nil, beforeMessageId: String? = nil) {
            self.roomId = roomId
            self.batchSize = batchSize
            self.afterMessageId = afterMessageId
            self.beforeMessageId = beforeMessageId
        }
    }
}

extension ServerMessage {
    /// Reply to create / get-info / update-room.
    public struct RoomInfo: Codable, Sendable, Hashable {
        public var room: RoomDescription
        /// Visible members (audience members are not listed).
        public var members: [MemberDescription]
        /// All members, audience included.
        public var estimatedSize: Int
        /// For create: false when the room existed already.
        public var created: Bool?
        public init(room: RoomDescription, members: [MemberDescription], estimatedSize: Int, created: Bool? = nil) {
            self.room = room
            self.members = members
            self.estimatedSize = estimatedSize
            self.created = created
        }
    }

    /// Reply to join-room.
    public struct JoinedRoom: Codable, Sendable, Hashable {
        public var room: RoomDescription
        /// Visible members, this one included when visible.
        public var members: [MemberDescription]
        /// This session's member as the platform has it.
        public var member: MemberDescription
        public var estimatedSize: Int
        /// The room's event sequence number this snapshot is at; events carry the following ones.
        public var sequence: UInt64
        public init(room: RoomDescription, members: [MemberDescription], member: MemberDescription, estimatedSize: Int, sequence: UInt64) {
            self.room = room
            self.members = members
            self.member = member
            self.estimatedSize = estimatedSize
            self.sequence = sequence
        }
    }

    /// A change in a room, sent to its members in order (`sequence` counts up by one per room).
    public struct RoomEvent: Codable, Sendable, Hashable {
        public enum Kind: String, Codable, Sendable, Hashable {
            case memberJoined = "member-joined"
            case memberUpdated = "member-updated"
            case memberLeft = "member-left"
            case roomUpdated = "room-updated"
            case roomDestroyed = "room-destroyed"
        }
        public var roomId: String
        public var sequence: UInt64
        public var kind: Kind
        public var member: MemberDescription?
        public var room: RoomDescription?
        public init(roomId: String, sequence: UInt64, kind: Kind, member: MemberDescription? = nil, room: RoomDescription? = nil) {
            self.roomId = roomId
            self.sequence = sequence
            self.kind = kind
            self.member = member
            self.room = room
        }
    }

    /// Periodic room size (all members, audience included), sent when it changed.
    public struct RoomSize: Codable, Sendable, Hashable {
        public var roomId: String
        public var estimatedSize: Int
        public init(roomId: String, estimatedSize: Int) {
            self.roomId = roomId
            self.estimatedSize = estimatedSize
        }
    }

    public struct MemberInfo: Codable, Sendable, Hashable {
        public var member: MemberDescription
        public init(member: MemberDescription) { self.member = member }
    }

    public struct ChatMessages: Codable, Sendable, Hashable {
        /// Oldest first.
        public var messages: [ChatMessageDescription]
        public init(messages: [ChatMessageDescription]) { self.messages = messages }
    }

    public struct ChatEvent: Codable, Sendable, Hashable {
        public var message: ChatMessageDescription
        public init(message: ChatMessageDescription) { self.message = message }
    }
}

/// Limits on room and chat fields, checked by the codec.
public enum RoomLimits {
    /// Largest chat message (bytes of UTF-8).
    public static let maximumChatMessageLength = 4096
    /// Largest history page.
    public static let maximumBatchSize = 100
    public static let maximumNameLength = 256
    public static let maximumStreamsPerMember = 8
}

extension ClientMessage {
    /// The PCast iOS SDK's publish-remote options: the platform pulls `streamURI` and publishes it.
    public struct PublishRemote: Codable, Sendable, Hashable {
        public var streamToken: String
        public var streamURI: String
        public var capabilities: [String]
        public var tags: [String]
        /// `loop` plays a file again at its end; others are refused as unknown.
        public var connectOptions: [String]
        public var maximumFrameRate: Double?
        public var exactFrameRate: Double?
        /// Media skipped at the start (default 500).
        public var prerollSkipMilliseconds: Int?
        public var publishType: PublishType
        public var streamName: String?

        enum CodingKeys: String, CodingKey {
            case streamToken, streamURI = "streamUri", capabilities, tags, connectOptions, maximumFrameRate, exactFrameRate,
                 prerollSkipMilliseconds, publishType, streamName
        }

        public init(streamToken: String, streamURI: String, capabilities: [String] = [], tags: [String] = [], connectOptions: [String] = [],
                    maximumFrameRate: Double? = nil, exactFrameRate: Double? = nil, prerollSkipMilliseconds: Int? = nil,
                    publishType: PublishType = .live, streamName: String? = nil) {
            self.streamToken = streamToken
            self.streamURI = streamURI
            self.capabilities = capabilities
            self.tags = tags
            self.connectOptions = connectOptions
            self.maximumFrameRate = maximumFrameRate
            self.exactFrameRate = exactFrameRate
            self.prerollSkipMilliseconds = prerollSkipMilliseconds
            self.publishType = publishType
            self.streamName = streamName
        }
    }
}

extension ServerMessage {
    public struct IngestStarted: Codable, Sendable, Hashable {
        public var streamId: String
        /// Whether video passes through without re-encoding.
        public var passthrough: Bool
        public init(streamId: String, passthrough: Bool) {
            self.streamId = streamId
            self.passthrough = passthrough
        }
    }

    public struct IngestProgress: Codable, Sendable, Hashable {
        public var streamId: String
        public var positionMilliseconds: Int64?
        /// Known for files only.
        public var durationMilliseconds: Int64?
        public init(streamId: String, positionMilliseconds: Int64?, durationMilliseconds: Int64?) {
            self.streamId = streamId
            self.positionMilliseconds = positionMilliseconds
            self.durationMilliseconds = durationMilliseconds
        }
    }
}
