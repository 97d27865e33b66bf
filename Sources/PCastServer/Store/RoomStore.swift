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
        migrator.registerMigration("v4-audit") { db in
            // The audit log of admin actions and refused admin requests.
            try db.execute(sql: """
                CREATE TABLE audit (
                    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
                    time INTEGER NOT NULL,
                    nodeId TEXT NOT NULL,
                    actor TEXT NOT NULL,
                    remoteAddress TEXT NOT NULL,
                    action TEXT NOT NULL,
                    outcome TEXT NOT NULL,
                    detail TEXT NOT NULL
                );
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

    public func appendAudit(_ entry: AuditEntry) throws(RoomStoreError) {
        let entry = entry.bounded
        try write { db in
            try db.execute(sql: """
                INSERT INTO audit (time, nodeId, actor, remoteAddress, action, outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?)
                """, arguments: [entry.time, entry.nodeId, entry.actor, entry.remoteAddress, entry.action, entry.outcome, entry.detail])
        }
    }

    public func auditEntries(limit: Int) throws(RoomStoreError) -> [AuditEntry] {
        try read { db in
            try Row.fetchAll(db, sql: """
                SELECT sequence, time, nodeId, actor, remoteAddress, action, outcome, detail FROM audit ORDER BY sequence DESC LIMIT ?
                """, arguments: [max(0, limit)]).map { row in
                AuditEntry(sequence: row[0], time: row[1], nodeId: row[2], actor: row[3], remoteAddress: row[4], action: row[5],
                           outcome: row[6], detail: row[7])
            }
        }
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

/// A continuation resumed once, by whichever comes first.
final class OneShot: Sendable {
    private let continuation = Mutex<CheckedContinuation<Bool, Never>?>(nil)
    func set(_ value: CheckedContinuation<Bool, Never>) { continuation.withLock { $0 = value } }
    func resume(_ value: Bool) { continuation.withLock { $0.take() }?.resume(returning: value) }
}
