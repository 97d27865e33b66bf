import Dispatch
import Foundation
import GRDB
import PCastProtocol
import Synchronization

// Persistence of rooms, members, sessions and chat: one SQLite file through GRDB.
//
// Schema (migration "v1"):
//
//     room        (roomId TEXT PRIMARY KEY, alias TEXT UNIQUE, name, description, type, bridgeId, pin,
//                  createdAt INTEGER)
//     member      (roomId → room ON DELETE CASCADE, sessionId, screenName, role, state,
//                  streams TEXT /* JSON [RoomStreamDescription] */, lastUpdate INTEGER, joinOrder INTEGER,
//                  PRIMARY KEY (roomId, sessionId)) WITHOUT ROWID
//     session     (sessionId TEXT PRIMARY KEY, resumeKeyHash TEXT, roles TEXT /* JSON [MemberRole], NULL = any */)
//     chatMessage (sequence INTEGER PRIMARY KEY /* chat-<sequence> */, roomId → room ON DELETE CASCADE,
//                  timestamp INTEGER, from_sessionId, from_screenName, from_role, from_lastUpdate INTEGER,
//                  message TEXT /* byte for byte */), INDEX (roomId, sequence)
//     storeCounter(name TEXT PRIMARY KEY, value INTEGER): 'lastChatSequence', the highest chat sequence of
//                  deleted rooms, so sequences never go back when the room holding the newest chat is deleted.

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

/// Synchronous store over one SQLite file (WAL mode, synchronous=NORMAL, foreign keys on). Every call
/// blocks on disk: the platform's actor goes through ``RoomPersistence`` instead.
///
/// ```swift
/// let store = try RoomStore(path: "data/rooms.sqlite")
/// try store.apply([.saveRoom(room, createdAt: now), .appendChat(message)])
/// let snapshot = try store.load()
/// let page = try store.chatMessages(roomId: room.roomId, batchSize: 100, after: nil, before: nil)
/// ```
public final class RoomStore: Sendable {
    /// The file, or nil for ``inMemory()``.
    public let path: String?
    let database: DatabaseQueue

    /// Opens (creating the file and its parent directories when missing) and migrates the database.
    public convenience init(path: String) throws(RoomStoreError) {
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent()
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw .cannotOpen(path: path, reason: "cannot create directory \(directory.path): \(Self.describe(error))")
        }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw .cannotOpen(path: path, reason: "it is a directory")
        }
        var configuration = Self.configuration()
        configuration.journalMode = .wal
        let database: DatabaseQueue
        do {
            database = try DatabaseQueue(path: path, configuration: configuration)
        } catch {
            throw .cannotOpen(path: path, reason: Self.describe(error))
        }
        try self.init(database: database, path: path)
    }

    /// A private database in memory, gone with the store (for tests).
    public static func inMemory() throws(RoomStoreError) -> RoomStore {
        let database: DatabaseQueue
        do {
            database = try DatabaseQueue(configuration: configuration())
        } catch {
            throw .cannotOpen(path: ":memory:", reason: describe(error))
        }
        return try RoomStore(database: database, path: nil)
    }

    private init(database: DatabaseQueue, path: String?) throws(RoomStoreError) {
        self.database = database
        self.path = path
        let migrator = Self.migrator()
        do {
            if try database.read({ try migrator.hasBeenSuperseded($0) }) {
                throw RoomStoreError.migration("the database was written by a newer version of PCastKit")
            }
            try migrator.migrate(database)
        } catch let error as RoomStoreError {
            throw error
        } catch let error as DatabaseError {
            switch error.resultCode {
            case .SQLITE_NOTADB, .SQLITE_CORRUPT, .SQLITE_CANTOPEN, .SQLITE_PERM, .SQLITE_READONLY, .SQLITE_IOERR:
                throw .cannotOpen(path: path ?? ":memory:", reason: Self.describe(error))
            default:
                throw .migration(Self.describe(error))
            }
        } catch {
            throw .migration(Self.describe(error))
        }
    }

    private static func configuration() -> Configuration {
        var configuration = Configuration()
        configuration.label = "PCastKit.RoomStore"
        configuration.foreignKeysEnabled = true
        // Another process (an operator's sqlite3) may hold the lock for a moment.
        configuration.busyMode = .timeout(5)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        return configuration
    }

    private static func migrator() -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE room (
                    roomId TEXT NOT NULL PRIMARY KEY,
                    alias TEXT NOT NULL UNIQUE,
                    name TEXT NOT NULL,
                    description TEXT NOT NULL,
                    type TEXT NOT NULL,
                    bridgeId TEXT NOT NULL,
                    pin TEXT NOT NULL,
                    createdAt INTEGER NOT NULL
                );
                CREATE TABLE member (
                    roomId TEXT NOT NULL REFERENCES room(roomId) ON DELETE CASCADE,
                    sessionId TEXT NOT NULL,
                    screenName TEXT NOT NULL,
                    role TEXT NOT NULL,
                    state TEXT NOT NULL,
                    streams TEXT NOT NULL,
                    lastUpdate INTEGER NOT NULL,
                    joinOrder INTEGER NOT NULL,
                    PRIMARY KEY (roomId, sessionId)
                ) WITHOUT ROWID;
                CREATE TABLE session (
                    sessionId TEXT NOT NULL PRIMARY KEY,
                    resumeKeyHash TEXT NOT NULL,
                    roles TEXT
                );
                CREATE TABLE chatMessage (
                    sequence INTEGER PRIMARY KEY,
                    roomId TEXT NOT NULL REFERENCES room(roomId) ON DELETE CASCADE,
                    timestamp INTEGER NOT NULL,
                    from_sessionId TEXT NOT NULL,
                    from_screenName TEXT NOT NULL,
                    from_role TEXT NOT NULL,
                    from_lastUpdate INTEGER NOT NULL,
                    message TEXT NOT NULL
                );
                CREATE INDEX chatMessage_roomId_sequence ON chatMessage(roomId, sequence);
                CREATE TABLE storeCounter (
                    name TEXT NOT NULL PRIMARY KEY,
                    value INTEGER NOT NULL
                ) WITHOUT ROWID;
                INSERT INTO storeCounter (name, value) VALUES ('lastChatSequence', 0);
                """)
        }
        migrator.registerMigration("v2-node") { db in
            // Node membership: one row on a single node, as in a cluster's shared store.
            try db.execute(sql: """
                CREATE TABLE node (
                    nodeId TEXT NOT NULL PRIMARY KEY,
                    signalingURL TEXT NOT NULL,
                    relayAddress TEXT NOT NULL,
                    streams INTEGER NOT NULL,
                    sessions INTEGER NOT NULL,
                    startedAt INTEGER NOT NULL,
                    heartbeatAt INTEGER NOT NULL
                ) WITHOUT ROWID;
                """)
        }
        migrator.registerMigration("v3-stream") { db in
            // The stream directory: on a single node it lists its own streams.
            try db.execute(sql: """
                CREATE TABLE stream (
                    streamId TEXT NOT NULL PRIMARY KEY,
                    nodeId TEXT NOT NULL,
                    publishedAt INTEGER NOT NULL,
                    entry TEXT NOT NULL
                ) WITHOUT ROWID;
                CREATE INDEX stream_nodeId ON stream(nodeId);
                """)
        }
        return migrator
    }

    // MARK: Reading

    /// The rooms, members and sessions, and the last chat sequence, as of the last committed change.
    public func load() throws(RoomStoreError) -> RoomStoreSnapshot {
        try read { db in
            var snapshot = RoomStoreSnapshot()
            let rooms = try Row.fetchCursor(db, sql: """
                SELECT roomId, alias, name, description, type, bridgeId, pin, createdAt
                FROM room ORDER BY createdAt, roomId
                """)
            while let row = try rooms.next() {
                let roomId: String = row[0]
                guard let type = RoomType(rawValue: row[4]) else { throw Self.corrupt("room", roomId, "type") }
                snapshot.rooms.append(.init(
                    room: RoomDescription(roomId: roomId, alias: row[1], name: row[2], description: row[3], type: type,
                                          bridgeId: row[5], pin: row[6]),
                    createdAt: row[7]))
            }

            let decoder = JSONDecoder()
            let members = try Row.fetchCursor(db, sql: """
                SELECT roomId, sessionId, screenName, role, state, streams, lastUpdate, joinOrder
                FROM member ORDER BY roomId, joinOrder, sessionId
                """)
            while let row = try members.next() {
                let roomId: String = row[0]
                let sessionId: String = row[1]
                let what = "\(roomId)/\(sessionId)"
                guard let role = MemberRole(rawValue: row[3]) else { throw Self.corrupt("member", what, "role") }
                guard let state = MemberState(rawValue: row[4]) else { throw Self.corrupt("member", what, "state") }
                let streamsJSON: String = row[5]
                guard let streams = try? decoder.decode([RoomStreamDescription].self, from: Data(streamsJSON.utf8)) else {
                    throw Self.corrupt("member", what, "streams")
                }
                let joinOrder: Int64 = row[7]
                snapshot.members.append(.init(
                    roomId: roomId,
                    member: MemberDescription(sessionId: sessionId, screenName: row[2], role: role, state: state,
                                              streams: streams, lastUpdate: row[6]),
                    joinOrder: UInt64(clamping: joinOrder)))
            }

            let sessions = try Row.fetchCursor(db, sql: "SELECT sessionId, resumeKeyHash, roles FROM session ORDER BY sessionId")
            while let row = try sessions.next() {
                let sessionId: String = row[0]
                var roles: [MemberRole]?
                if let rolesJSON: String = row[2] {
                    guard let decoded = try? decoder.decode([MemberRole].self, from: Data(rolesJSON.utf8)) else {
                        throw Self.corrupt("session", sessionId, "roles")
                    }
                    roles = decoded
                }
                snapshot.sessions.append(.init(sessionId: sessionId, resumeKeyHash: row[1], roles: roles))
            }

            let last = try Int64.fetchOne(db, sql: """
                SELECT MAX(
                    COALESCE((SELECT value FROM storeCounter WHERE name = 'lastChatSequence'), 0),
                    COALESCE((SELECT MAX(sequence) FROM chatMessage), 0))
                """) ?? 0
            snapshot.lastChatSequence = UInt64(clamping: last)

            let streams = try Row.fetchCursor(db, sql: "SELECT streamId, entry FROM stream ORDER BY publishedAt, streamId")
            while let row = try streams.next() {
                let streamId: String = row[0]
                let entry: String = row[1]
                guard let stream = try? decoder.decode(SharedStream.self, from: Data(entry.utf8)) else {
                    throw Self.corrupt("stream", streamId, "entry")
                }
                snapshot.streams.append(stream)
            }
            return snapshot
        }
    }

    /// Chat history of a room, oldest first.
    /// - `after` given: the first `batchSize` messages with sequence > `after` (and < `before` if given);
    /// - `before` only: the `batchSize` most recent with sequence < `before`;
    /// - neither: the `batchSize` most recent.
    ///
    /// A `batchSize` of 0 or less gives nothing.
    public func chatMessages(roomId: String, batchSize: Int, after: UInt64?, before: UInt64?) throws(RoomStoreError)
        -> [ChatMessageDescription] {
        guard batchSize > 0 else { return [] }
        // Stored sequences are at most Int64.max: nothing lies after it, and everything lies before more.
        if let after, after >= UInt64(Int64.max) { return [] }
        let lower = after.map { Int64($0) }
        let upper = before.flatMap { $0 > UInt64(Int64.max) ? nil : Int64($0) }
        let columns = """
            sequence, roomId, timestamp, from_sessionId, from_screenName, from_role, from_lastUpdate,
            CAST(message AS BLOB)
            """
        let sql: String
        var arguments: StatementArguments = [roomId]
        switch (lower, upper) {
        case (let lower?, let upper?):
            sql = "SELECT \(columns) FROM chatMessage WHERE roomId = ? AND sequence > ? AND sequence < ? ORDER BY sequence LIMIT ?"
            arguments += [lower, upper, batchSize]
        case (let lower?, nil):
            sql = "SELECT \(columns) FROM chatMessage WHERE roomId = ? AND sequence > ? ORDER BY sequence LIMIT ?"
            arguments += [lower, batchSize]
        case (nil, let upper?):
            sql = "SELECT \(columns) FROM chatMessage WHERE roomId = ? AND sequence < ? ORDER BY sequence DESC LIMIT ?"
            arguments += [upper, batchSize]
        case (nil, nil):
            sql = "SELECT \(columns) FROM chatMessage WHERE roomId = ? ORDER BY sequence DESC LIMIT ?"
            arguments += [batchSize]
        }
        let newestFirst = lower == nil
        return try read { db in
            var messages: [ChatMessageDescription] = []
            messages.reserveCapacity(min(batchSize, 256))
            let rows = try Row.fetchCursor(db.cachedStatement(sql: sql), arguments: arguments)
            while let row = try rows.next() {
                let sequence: Int64 = row[0]
                guard let role = MemberRole(rawValue: row[5]) else { throw Self.corrupt("chatMessage", "\(sequence)", "from_role") }
                let text = try row.withUnsafeData(atIndex: 7) { data in String(decoding: data ?? Data(), as: UTF8.self) }
                messages.append(ChatMessageDescription(
                    messageId: ChatMessageDescription.messageId(sequence: UInt64(sequence)),
                    roomId: row[1],
                    timestamp: row[2],
                    from: ChatUser(sessionId: row[3], screenName: row[4], role: role, lastUpdate: row[6]),
                    message: text))
            }
            if newestFirst { messages.reverse() }
            return messages
        }
    }

    // MARK: Writing

    /// Applies the changes in order, all in one transaction: all of them are stored, or none.
    public func apply(_ changes: [RoomStoreChange]) throws(RoomStoreError) {
        guard !changes.isEmpty else { return }
        try apply(groups: CollectionOfOne(changes))
    }

    /// Applies several lists of changes, in order, in one transaction.
    func apply(groups: some Collection<[RoomStoreChange]>) throws(RoomStoreError) {
        try write { db in
            var writer = ChangeWriter(db: db)
            for changes in groups {
                for change in changes { try writer.apply(change) }
            }
        }
    }

    // MARK: Nodes

    /// ``PlatformStore/heartbeat(_:)``, with this process's clock.
    public func heartbeat(_ node: NodeRecord) throws(RoomStoreError) {
        let now = Int64((Date().timeIntervalSince1970 * 1000).rounded())
        try write { db in
            try db.execute(sql: """
                INSERT INTO node (nodeId, signalingURL, relayAddress, streams, sessions, startedAt, heartbeatAt)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (nodeId) DO UPDATE SET
                    signalingURL = excluded.signalingURL, relayAddress = excluded.relayAddress, streams = excluded.streams,
                    sessions = excluded.sessions, startedAt = excluded.startedAt, heartbeatAt = excluded.heartbeatAt
                """, arguments: [node.nodeId, node.signalingURL, node.relayAddress, node.streams, node.sessions, node.startedAt, now])
        }
    }

    public func liveNodes(within: Duration) throws(RoomStoreError) -> [NodeRecord] {
        let oldest = Int64((Date().timeIntervalSince1970 * 1000).rounded()) - Int64(within / .milliseconds(1))
        return try read { db in
            try Row.fetchAll(db, sql: """
                SELECT nodeId, signalingURL, relayAddress, streams, sessions, startedAt, heartbeatAt
                FROM node WHERE heartbeatAt >= ? ORDER BY nodeId
                """, arguments: [oldest]).map { row in
                NodeRecord(nodeId: row[0], signalingURL: row[1], relayAddress: row[2], streams: row[3], sessions: row[4],
                           startedAt: row[5], heartbeatAt: row[6])
            }
        }
    }

    public func removeNode(_ nodeId: String) throws(RoomStoreError) {
        try write { db in try db.execute(sql: "DELETE FROM node WHERE nodeId = ?", arguments: [nodeId]) }
    }

    // MARK: Plumbing

    private func read<T>(_ body: (Database) throws -> T) throws(RoomStoreError) -> T {
        do {
            return try database.read(body)
        } catch {
            throw Self.failure(error)
        }
    }

    private func write<T>(_ body: (Database) throws -> T) throws(RoomStoreError) -> T {
        do {
            return try database.write(body)
        } catch {
            throw Self.failure(error)
        }
    }

    private static func failure(_ error: any Error) -> RoomStoreError {
        if let error = error as? RoomStoreError { return error }
        return .io(describe(error))
    }

    private static func corrupt(_ table: String, _ key: String, _ column: String) -> RoomStoreError {
        .io("corrupt \(table) row \(key): unreadable \(column)")
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? DatabaseError { return error.description }
        // Foundation's file errors: the POSIX reason ("Not a directory") says more than the Cocoa code.
        var underlying: (any Error)? = error
        if let cocoa = error as? CocoaError { underlying = cocoa.underlying ?? cocoa }
        if let posix = underlying as? POSIXError { return String(cString: strerror(posix.code.rawValue)) }
        if let nsError = underlying.map({ $0 as NSError }), nsError.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(nsError.code)))
        }
        return "\(error)"
    }
}

/// Applies changes inside one write transaction, with cached statements.
private struct ChangeWriter {
    let db: Database
    let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    mutating func apply(_ change: RoomStoreChange) throws {
        switch change {
        case .saveRoom(let room, let createdAt):
            try db.cachedStatement(sql: """
                INSERT INTO room (roomId, alias, name, description, type, bridgeId, pin, createdAt)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (roomId) DO UPDATE SET
                    alias = excluded.alias, name = excluded.name, description = excluded.description,
                    type = excluded.type, bridgeId = excluded.bridgeId, pin = excluded.pin, createdAt = excluded.createdAt
                """).execute(arguments: [room.roomId, room.alias, room.name, room.description, room.type.rawValue,
                                         room.bridgeId, room.pin, createdAt])

        case .deleteRoom(let roomId):
            // Keep the sequence high-water mark: new messages must not reuse the deleted room's ids.
            try db.cachedStatement(sql: """
                UPDATE storeCounter
                SET value = MAX(value, COALESCE((SELECT MAX(sequence) FROM chatMessage WHERE roomId = ?), 0))
                WHERE name = 'lastChatSequence'
                """).execute(arguments: [roomId])
            // Members and chat messages go with it (ON DELETE CASCADE).
            try db.cachedStatement(sql: "DELETE FROM room WHERE roomId = ?").execute(arguments: [roomId])

        case .saveMember(let roomId, let member, let joinOrder):
            let streams = String(decoding: try encoder.encode(member.streams), as: UTF8.self)
            try db.cachedStatement(sql: """
                INSERT INTO member (roomId, sessionId, screenName, role, state, streams, lastUpdate, joinOrder)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (roomId, sessionId) DO UPDATE SET
                    screenName = excluded.screenName, role = excluded.role, state = excluded.state,
                    streams = excluded.streams, lastUpdate = excluded.lastUpdate, joinOrder = excluded.joinOrder
                """).execute(arguments: [roomId, member.sessionId, member.screenName, member.role.rawValue,
                                         member.state.rawValue, streams, member.lastUpdate,
                                         try Self.int64(joinOrder, "joinOrder")])

        case .deleteMember(let roomId, let sessionId):
            try db.cachedStatement(sql: "DELETE FROM member WHERE roomId = ? AND sessionId = ?")
                .execute(arguments: [roomId, sessionId])

        case .appendChat(let message):
            guard let sequence = message.sequence else {
                throw RoomStoreError.io("chat message id \(message.messageId) is not chat-<sequence>")
            }
            try db.cachedStatement(sql: """
                INSERT INTO chatMessage
                    (sequence, roomId, timestamp, from_sessionId, from_screenName, from_role, from_lastUpdate, message)
                VALUES (?, ?, ?, ?, ?, ?, ?, CAST(? AS TEXT))
                """).execute(arguments: [try Self.int64(sequence, "chat sequence"), message.roomId, message.timestamp,
                                         message.from.sessionId, message.from.screenName, message.from.role.rawValue,
                                         message.from.lastUpdate, Self.exactText(message.message)])

        case .saveSession(let sessionId, let resumeKeyHash, let roles):
            let rolesJSON = try roles.map { String(decoding: try encoder.encode($0), as: UTF8.self) }
            try db.cachedStatement(sql: """
                INSERT INTO session (sessionId, resumeKeyHash, roles) VALUES (?, ?, ?)
                ON CONFLICT (sessionId) DO UPDATE SET resumeKeyHash = excluded.resumeKeyHash, roles = excluded.roles
                """).execute(arguments: [sessionId, resumeKeyHash, rolesJSON])

        case .deleteSession(let sessionId):
            try db.cachedStatement(sql: "DELETE FROM session WHERE sessionId = ?").execute(arguments: [sessionId])

        case .saveStream(let stream):
            let entry = String(decoding: try encoder.encode(stream), as: UTF8.self)
            try db.cachedStatement(sql: """
                INSERT INTO stream (streamId, nodeId, publishedAt, entry) VALUES (?, ?, ?, ?)
                ON CONFLICT (streamId) DO UPDATE SET nodeId = excluded.nodeId, publishedAt = excluded.publishedAt, entry = excluded.entry
                """).execute(arguments: [stream.streamId, stream.nodeId, stream.publishedAt, entry])

        case .deleteStream(let streamId, _, _):
            try db.cachedStatement(sql: "DELETE FROM stream WHERE streamId = ?").execute(arguments: [streamId])

        case .deleteNodeStreams(let nodeId, _, _):
            try db.cachedStatement(sql: "DELETE FROM stream WHERE nodeId = ?").execute(arguments: [nodeId])
        }
    }

    private static func int64(_ value: UInt64, _ what: String) throws -> Int64 {
        guard let value = Int64(exactly: value) else { throw RoomStoreError.io("\(what) \(value) is out of range") }
        return value
    }

    /// Text bound so that every byte is kept: GRDB binds a String as C text (cut at a NUL), so a message
    /// holding a NUL goes in as its UTF-8 bytes, which `CAST(? AS TEXT)` stores as TEXT unchanged.
    private static func exactText(_ text: String) -> DatabaseValue {
        text.utf8.contains(0) ? Data(text.utf8).databaseValue : text.databaseValue
    }
}

/// Write-behind front of a ``PlatformStore`` for the platform's actor: ``submit(_:)`` never waits on
/// the disk or the database. Changes are applied in submission order by one writer task at a time;
/// the submissions pending when the writer comes round are applied in one transaction. Each
/// submission is atomic: when a batch fails, its submissions are retried one by one, so one bad
/// submission costs only itself. Failures go to `onError` and are counted; the writer keeps going.
/// A store that is unavailable (a database server down) loses nothing: the writer keeps the
/// changes, in order, and tries again (backing off to 2 s) until the store answers or
/// ``stopRetrying()``; `onError` hears the first failure of each outage.
/// Reads (``chatMessages(roomId:batchSize:after:before:)``) are ordered with the writes, so they see
/// every change submitted before them. Submitted changes are written even if the persistence is
/// dropped. Nothing bounds the pending changes but the writer's pace (a few microseconds a change
/// in a batch on SQLite).
///
/// ```swift
/// let persistence = RoomPersistence(store: SQLitePlatformStore(store)) { error in logger.error("room store: \(error)") }
/// persistence.submit([.appendChat(message)])          // returns at once
/// let page = try await persistence.chatMessages(roomId: "r-1", batchSize: 100, after: nil, before: nil)
/// await persistence.flush()                           // on shutdown
/// ```
/// A continuation resumed once, by whichever comes first.
private final class OneShot: Sendable {
    private let continuation = Mutex<CheckedContinuation<Bool, Never>?>(nil)
    func set(_ value: CheckedContinuation<Bool, Never>) { continuation.withLock { $0 = value } }
    func resume(_ value: Bool) { continuation.withLock { $0.take() }?.resume(returning: value) }
}

public final class RoomPersistence: Sendable {
    private enum Work: Sendable {
        case changes([RoomStoreChange])
        /// Runs once every change submitted before it is applied.
        case barrier(@Sendable () async -> Void)
    }

    private struct State {
        var pending: [Work] = []
        var draining = false
        var failures = 0
        var transactions = 0
        /// The store did not answer the last write: retrying.
        var waitingForStore = false
        var stopped = false
    }

    public let store: any PlatformStore
    private let onError: @Sendable (RoomStoreError) -> Void
    private let state = Mutex(State())

    public init(store: any PlatformStore, onError: @escaping @Sendable (RoomStoreError) -> Void) {
        self.store = store
        self.onError = onError
    }

    /// Queues the changes (one transaction's worth: applied together or not at all) and returns at once.
    public func submit(_ changes: [RoomStoreChange]) {
        guard !changes.isEmpty else { return }
        enqueue(.changes(changes))
    }

    /// Chat history as ``PlatformStore/chatMessages(roomId:batchSize:after:before:)``, read after every
    /// change submitted before this call is applied.
    public func chatMessages(roomId: String, batchSize: Int, after: UInt64?, before: UInt64?) async throws(RoomStoreError)
        -> [ChatMessageDescription] {
        let store = self.store
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<[ChatMessageDescription], RoomStoreError>, Never>) in
            enqueue(.barrier {
                do throws(RoomStoreError) {
                    continuation.resume(returning: .success(
                        try await store.chatMessages(roomId: roomId, batchSize: batchSize, after: after, before: before)))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            })
        }
        return try result.get()
    }

    /// Returns when everything submitted so far is committed (or has failed and been reported).
    public func flush() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            enqueue(.barrier { continuation.resume() })
        }
    }

    /// Returns true when everything submitted so far is committed, false when `limit` passed first
    /// (a database that does not come back must not hold a shutdown forever).
    public func flush(within limit: Duration) async -> Bool {
        let result = OneShot()
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            result.set(continuation)
            enqueue(.barrier { result.resume(true) })
            Task {
                try? await Task.sleep(for: limit)
                result.resume(false)
            }
        }
    }

    /// Unavailable-store writes are no longer retried (the store is closing): the changes still
    /// waiting fail, are counted and reported.
    public func stopRetrying() {
        state.withLock { $0.stopped = true }
    }

    /// Whether the writer is waiting for an unavailable store.
    public var isWaitingForStore: Bool { state.withLock { $0.waitingForStore } }

    /// Submissions that could not be applied.
    public var failureCount: Int { state.withLock { $0.failures } }

    /// Write transactions committed or attempted (for tests of batching).
    var transactionCount: Int { state.withLock { $0.transactions } }

    private func enqueue(_ work: Work) {
        let start = state.withLock { state in
            state.pending.append(work)
            guard !state.draining else { return false }
            state.draining = true
            return true
        }
        if start { Task { await self.drain() } }
    }

    /// Applies what is pending until nothing is (one writer at a time: `draining`).
    private func drain() async {
        while true {
            let work = state.withLock { state -> [Work] in
                if state.pending.isEmpty {
                    state.draining = false
                    return []
                }
                defer { state.pending = [] }
                return state.pending
            }
            if work.isEmpty { return }
            var groups: [[RoomStoreChange]] = []
            for item in work {
                switch item {
                case .changes(let changes):
                    groups.append(changes)
                case .barrier(let body):
                    await write(groups)
                    groups.removeAll(keepingCapacity: true)
                    await body()
                }
            }
            await write(groups)
        }
    }

    private func write(_ groups: [[RoomStoreChange]]) async {
        guard !groups.isEmpty else { return }
        guard let error = await applyWaitingForStore(groups) else { return }
        if groups.count == 1 {
            fail(error)
            return
        }
        // Find the culprits: each submission on its own.
        for group in groups {
            if let error = await applyWaitingForStore([group]) { fail(error) }
        }
    }

    /// Applies the groups in one transaction; while the store is unavailable, waits and tries
    /// again. Returns the error of a store that answered with a refusal (or stopped retrying).
    private func applyWaitingForStore(_ groups: [[RoomStoreChange]]) async -> RoomStoreError? {
        var backoff = Duration.milliseconds(100)
        while true {
            do throws(RoomStoreError) {
                state.withLock { $0.transactions += 1 }
                try await store.apply(groups: groups)
                state.withLock { $0.waitingForStore = false }
                return nil
            } catch .unavailable(let reason) {
                let (first, stopped) = state.withLock { state in
                    defer { state.waitingForStore = true }
                    return (!state.waitingForStore, state.stopped)
                }
                if stopped { return .unavailable(reason) }
                if first { onError(.unavailable(reason)) }
                try? await Task.sleep(for: backoff)
                backoff = min(backoff * 2, .seconds(2))
            } catch {
                return error
            }
        }
    }

    private func fail(_ error: RoomStoreError) {
        state.withLock { $0.failures += 1 }
        onError(error)
    }
}
