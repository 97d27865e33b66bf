import Dispatch
import Foundation
import GRDB
import PCastProtocol
import Synchronization

// What the room store reads and reports: its errors, its changes, a shared stream and a snapshot.

/// Why the room database failed.
///
/// ```swift
/// do throws(RoomStoreError) {
///     let store = try RoomStore(path: "/var/lib/pcast/rooms.sqlite")
/// } catch .cannotOpen(let path, let reason) {
///     logger.error("cannot open \(path): \(reason)")
/// } catch {
///     logger.error("\(error)")
/// }
/// ```
public enum RoomStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The file cannot be opened as a room database: an unwritable or uncreatable directory, a corrupt
    /// file, a file that is not SQLite, a directory where the file should be.
    case cannotOpen(path: String, reason: String)
    /// The schema could not be brought up to date (or the file was written by a newer version).
    case migration(String)
    /// Any other database failure, with the database's message.
    case io(String)
    /// A database server cannot be reached (refused, lost, or no answer in time); the store keeps
    /// trying to reconnect.
    case unavailable(String)
    /// Changes this node had not read were pruned from a cluster's change log (it could not read
    /// the log for longer than the log keeps them): its view of rooms and streams is behind.
    case missedChanges(String)

    public var description: String {
        switch self {
        case .cannotOpen(let path, let reason): return "cannot open room database \(path): \(reason)"
        case .migration(let message): return "room database migration failed: \(message)"
        case .io(let message): return "room database error: \(message)"
        case .unavailable(let message): return "room database unavailable: \(message)"
        case .missedChanges(let message): return "missed changes of the cluster: \(message)"
        }
    }
}

/// One change to the stored rooms, members, sessions or chat. ``RoomStore/apply(_:)`` applies a list of
/// them in one transaction, in order.
///
/// ```swift
/// try store.apply([
///     .saveRoom(room, createdAt: 1_700_000_000_000),
///     .saveMember(roomId: room.roomId, member, joinOrder: 1),
///     .appendChat(message),
/// ])
/// ```
public enum RoomStoreChange: Sendable, Hashable {
    /// Inserts the room, or replaces the one with the same `roomId` (its members and chat stay).
    /// Aliases are unique: an alias held by another room fails the change.
    case saveRoom(RoomDescription, createdAt: Int64)
    /// Deletes the room with its members and chat messages. No-op for an unknown room.
    case deleteRoom(roomId: String)
    /// Inserts the member, or replaces the one with the same `(roomId, sessionId)`. The room must exist.
    case saveMember(roomId: String, MemberDescription, joinOrder: UInt64)
    /// No-op for an unknown member.
    case deleteMember(roomId: String, sessionId: String)
    /// Stores the message under `ChatMessageDescription.sequence(of: messageId)`, which must be valid
    /// and new. Its room must exist.
    case appendChat(ChatMessageDescription)
    /// Inserts or replaces a resumable session. `roles` nil: no restriction.
    case saveSession(sessionId: String, resumeKeyHash: String, roles: [MemberRole]?)
    /// No-op for an unknown session.
    case deleteSession(sessionId: String)
    /// Inserts or replaces a published stream in the directory (which node has it).
    case saveStream(SharedStream)
    /// The stream ended: why, for the nodes that tell its viewers. No-op for an unknown stream.
    case deleteStream(streamId: String, reason: StreamEndedReason, description: String?)
    /// Every stream of a node ended (it restarted, or died): why.
    case deleteNodeStreams(nodeId: String, reason: StreamEndedReason, description: String?)
}

/// A published stream as the nodes of a cluster share it: the directory that tells a node where
/// a stream it does not have lives, so its viewers are served by pulling it from there.
public struct SharedStream: Codable, Sendable, Hashable {
    public var streamId: String
    /// The node whose relay has the publisher (the origin).
    public var nodeId: String
    public var publisherSessionId: String
    public var tags: [String]
    public var tracks: [MediaTrackDescription]
    public var publishType: PublishType
    public var streamName: String?
    /// Milliseconds since 1970 (UTC): orders streams of different nodes (the newest carrying a tag).
    public var publishedAt: Int64
    /// Why its publisher says it is reduced (told to its viewers on every node); nil: not reduced.
    public var publisherQuality: PublisherQualityReason?

    public init(streamId: String, nodeId: String, publisherSessionId: String, tags: [String], tracks: [MediaTrackDescription],
                publishType: PublishType, streamName: String?, publishedAt: Int64, publisherQuality: PublisherQualityReason? = nil) {
        self.streamId = streamId
        self.nodeId = nodeId
        self.publisherSessionId = publisherSessionId
        self.tags = tags
        self.tracks = tracks
        self.publishType = publishType
        self.streamName = streamName
        self.publishedAt = publishedAt
        self.publisherQuality = publisherQuality
    }
}

extension RoomStoreChange: Codable {
    /// Whether other nodes of a cluster follow it: rooms, members and chat; resumable sessions are
    /// the node's own.
    public var isShared: Bool {
        switch self {
        case .saveSession, .deleteSession: false
        default: true
        }
    }
}

/// Everything ``RoomStore/load()`` restores at start-up (chat history stays in the store).
///
/// ```swift
/// let snapshot = try store.load()
/// var registry = RoomRegistry(restoring: snapshot, resumeWindow: 30, now: Date())
/// snapshot.lastChatSequence   // the next message is chat-<lastChatSequence + 1>
/// ```
public struct RoomStoreSnapshot: Sendable, Hashable {
    /// A stored room and when it was created.
    public struct Room: Sendable, Hashable {
        public var room: RoomDescription
        /// Milliseconds since 1970 (UTC).
        public var createdAt: Int64
        public init(room: RoomDescription, createdAt: Int64) {
            self.room = room
            self.createdAt = createdAt
        }
    }

    /// A stored member of a room; `joinOrder` orders a room's members.
    public struct Member: Sendable, Hashable {
        public var roomId: String
        public var member: MemberDescription
        public var joinOrder: UInt64
        public init(roomId: String, member: MemberDescription, joinOrder: UInt64) {
            self.roomId = roomId
            self.member = member
            self.joinOrder = joinOrder
        }
    }

    /// A session that may resume after a restart: the hash of its resume key and the roles its token allows.
    public struct Session: Sendable, Hashable {
        public var sessionId: String
        public var resumeKeyHash: String
        /// nil: no restriction.
        public var roles: [MemberRole]?
        public init(sessionId: String, resumeKeyHash: String, roles: [MemberRole]?) {
            self.sessionId = sessionId
            self.resumeKeyHash = resumeKeyHash
            self.roles = roles
        }
    }

    /// Ordered by `createdAt`, then `roomId`.
    public var rooms: [Room]
    /// Ordered by `roomId`, then `joinOrder`.
    public var members: [Member]
    /// Ordered by `sessionId`.
    public var sessions: [Session]
    /// The highest chat sequence ever stored (deleted rooms' included); 0 when there was no chat.
    public var lastChatSequence: UInt64
    /// The stream directory, ordered by `publishedAt`, then `streamId`.
    public var streams: [SharedStream]

    public init(rooms: [Room] = [], members: [Member] = [], sessions: [Session] = [], lastChatSequence: UInt64 = 0,
                streams: [SharedStream] = []) {
        self.rooms = rooms
        self.members = members
        self.sessions = sessions
        self.lastChatSequence = lastChatSequence
        self.streams = streams
    }
}
