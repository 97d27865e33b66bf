import Foundation
import Logging
import PCastProtocol
import PostgresNIO
import Synchronization

// The shared store of a cluster of nodes: PostgreSQL through postgres-nio. Its schema and
// migrations are in `PostgresSchema.swift`; a call raced against its deadline in `StoreDeadline.swift`.

/// The platform's state in PostgreSQL, shared by the nodes of a cluster. Opening it connects and
/// migrates the schema; every call is bounded by `timeout`, so an unreachable server is an
/// ``RoomStoreError/unavailable(_:)`` error, never a hang. The connection pool reconnects by itself
/// when the server comes back.
///
/// ```swift
/// let store = try await PostgresPlatformStore.open(try PostgresURL(parsing: "postgres://pcast@127.0.0.1:5432/pcast"),
///                                                  logger: logger)
/// try await store.apply([.saveRoom(room, createdAt: now)])
/// await store.close()
/// ```
public final class PostgresPlatformStore: PlatformStore {
    public let url: PostgresURL
    let client: PostgresClient
    private let runner: Task<Void, Never>
    private let logger: Logger
    private let timeout: Duration

    /// The schema version this build writes.
    public static var schemaVersion: Int { migrations.count }

    /// Any number, the same on every node: the advisory lock migrations hold.
    private static let migrationLock: Int64 = 0x7063_6173_7401
    /// The advisory lock change-log writers hold, so that log ids commit in order.
    private static let changeLogLock: Int64 = 0x7063_6173_7402
    /// The advisory lock slot claims hold.
    private static let slotLock: Int64 = 0x7063_6173_7403
    /// The LISTEN/NOTIFY channel of the change log.
    static let changeChannel = "pcast_changes"
    /// How many chat sequence slots there are (their bits in a sequence).
    public static let slotBits = 8

    /// Set by ``publishChanges(as:)``: the node whose changes go to the change log.
    private let publisher = Mutex<String?>(nil)

    private init(url: PostgresURL, logger: Logger, timeout: Duration) {
        self.url = url
        self.logger = logger
        self.timeout = timeout
        let tls: PostgresClient.Configuration.TLS
        switch url.tls {
        case .disable:
            tls = .disable
        case .prefer, .require:
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.certificateVerification = .none
            tls = url.tls == .prefer ? .prefer(configuration) : .require(configuration)
        case .verifyFull:
            tls = .require(.makeClientConfiguration())
        }
        var configuration = PostgresClient.Configuration(host: url.host, port: url.port, username: url.user, password: url.password,
                                                         database: url.database, tls: tls)
        configuration.options.connectTimeout = timeout
        configuration.options.maximumConnections = 8
        configuration.options.keepAliveBehavior = .init(frequency: .seconds(10))
        // The pool logs every failed connection attempt at info: during an outage that is one
        // line per attempt. The store reports an outage itself (once, as unavailable).
        var background = logger
        background.logLevel = max(logger.logLevel, .notice)
        let client = PostgresClient(configuration: configuration, backgroundLogger: background)
        self.client = client
        self.runner = Task { await client.run() }
    }

    /// Connects and brings the schema up to date (or refuses a newer one).
    public static func open(_ url: PostgresURL, logger: Logger, timeout: Duration = .seconds(5)) async throws(RoomStoreError)
        -> PostgresPlatformStore {
        let store = PostgresPlatformStore(url: url, logger: logger, timeout: timeout)
        do throws(RoomStoreError) {
            try await store.migrate()
        } catch {
            await store.close()
            throw error
        }
        return store
    }

    public var location: String { url.description }

    private func migrate() async throws(RoomStoreError) {
        let logger = self.logger
        let location = self.location
        try await bounded("migrating \(location)") { client in
            try await client.withTransaction(logger: logger) { connection in
                try await connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLock))", logger: logger)
                try await connection.query("CREATE TABLE IF NOT EXISTS pcast_schema (version INTEGER NOT NULL)", logger: logger)
                var version = 0
                for try await (value) in try await connection.query("SELECT version FROM pcast_schema", logger: logger).decode(Int.self) {
                    version = max(version, value)
                }
                if version > Self.migrations.count {
                    throw RoomStoreError.migration(
                        "the database was written by a newer version of PCastKit (schema \(version); this build knows \(Self.migrations.count))")
                }
                guard version < Self.migrations.count else { return }
                for index in version..<Self.migrations.count {
                    // One statement at a time: the extended protocol takes one per query.
                    for statement in Self.migrations[index].split(separator: ";\n") {
                        let sql = statement.trimmingCharacters(in: .whitespacesAndNewlines)
                        guard !sql.isEmpty else { continue }
                        try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger)
                    }
                }
                try await connection.query("DELETE FROM pcast_schema", logger: logger)
                try await connection.query("INSERT INTO pcast_schema (version) VALUES (\(Self.migrations.count))", logger: logger)
                logger.info("database schema migrated", metadata: ["pcast.database": .string(location), "pcast.from": "\(version)",
                                                                    "pcast.to": "\(Self.migrations.count)"])
            }
        }
    }

    // MARK: Reading

    public func load() async throws(RoomStoreError) -> RoomStoreSnapshot {
        let logger = self.logger
        return try await bounded("loading") { client in
            var snapshot = RoomStoreSnapshot()
            let rooms = try await client.query("""
                SELECT room_id, alias, name, description, type, bridge_id, pin, created_at
                FROM room ORDER BY created_at, room_id
                """, logger: logger)
            for try await (roomId, alias, name, description, type, bridgeId, pin, createdAt)
                in rooms.decode((String, String, String, String, String, String, String, Int64).self) {
                guard let type = RoomType(rawValue: type) else { throw Self.corrupt("room", roomId, "type") }
                snapshot.rooms.append(.init(room: RoomDescription(roomId: roomId, alias: alias, name: name, description: description,
                                                                  type: type, bridgeId: bridgeId, pin: pin),
                                            createdAt: createdAt))
            }
            let decoder = JSONDecoder()
            let members = try await client.query("""
                SELECT room_id, session_id, screen_name, role, state, streams, last_update, join_order
                FROM member ORDER BY room_id, join_order, session_id
                """, logger: logger)
            for try await (roomId, sessionId, screenName, role, state, streamsJSON, lastUpdate, joinOrder)
                in members.decode((String, String, String, String, String, String, Int64, Int64).self) {
                let what = "\(roomId)/\(sessionId)"
                guard let role = MemberRole(rawValue: role) else { throw Self.corrupt("member", what, "role") }
                guard let state = MemberState(rawValue: state) else { throw Self.corrupt("member", what, "state") }
                guard let streams = try? decoder.decode([RoomStreamDescription].self, from: Data(streamsJSON.utf8)) else {
                    throw Self.corrupt("member", what, "streams")
                }
                snapshot.members.append(.init(roomId: roomId,
                                              member: MemberDescription(sessionId: sessionId, screenName: screenName, role: role,
                                                                        state: state, streams: streams, lastUpdate: lastUpdate),
                                              joinOrder: UInt64(clamping: joinOrder)))
            }
            let sessions = try await client.query("SELECT session_id, resume_key_hash, roles FROM session ORDER BY session_id",
                                                  logger: logger)
            for try await (sessionId, resumeKeyHash, rolesJSON) in sessions.decode((String, String, String?).self) {
                var roles: [MemberRole]?
                if let rolesJSON {
                    guard let decoded = try? decoder.decode([MemberRole].self, from: Data(rolesJSON.utf8)) else {
                        throw Self.corrupt("session", sessionId, "roles")
                    }
                    roles = decoded
                }
                snapshot.sessions.append(.init(sessionId: sessionId, resumeKeyHash: resumeKeyHash, roles: roles))
            }
            let last = try await client.query("""
                SELECT GREATEST(
                    COALESCE((SELECT value FROM store_counter WHERE name = 'lastChatSequence'), 0),
                    COALESCE((SELECT MAX(sequence) FROM chat_message), 0))::BIGINT
                """, logger: logger)
            for try await value in last.decode(Int64.self) { snapshot.lastChatSequence = UInt64(clamping: value) }
            let streams = try await client.query("SELECT stream_id, entry FROM stream ORDER BY published_at, stream_id", logger: logger)
            for try await (streamId, entry) in streams.decode((String, String).self) {
                guard let stream = try? decoder.decode(SharedStream.self, from: Data(entry.utf8)) else {
                    throw Self.corrupt("stream", streamId, "entry")
                }
                snapshot.streams.append(stream)
            }
            return snapshot
        }
    }

    public func chatMessages(roomId: String, batchSize: Int, after: UInt64?, before: UInt64?) async throws(RoomStoreError)
        -> [ChatMessageDescription] {
        guard batchSize > 0 else { return [] }
        if let after, after >= UInt64(Int64.max) { return [] }
        let lower = after.map { Int64($0) }
        let upper = before.flatMap { $0 > UInt64(Int64.max) ? nil : Int64($0) }
        let columns = "sequence, room_id, timestamp, from_session_id, from_screen_name, from_role, from_last_update, message"
        var query: PostgresQuery
        switch (lower, upper) {
        case (let lower?, let upper?):
            query = "SELECT \(unescaped: columns) FROM chat_message WHERE room_id = \(roomId) AND sequence > \(lower) AND sequence < \(upper) ORDER BY sequence LIMIT \(batchSize)"
        case (let lower?, nil):
            query = "SELECT \(unescaped: columns) FROM chat_message WHERE room_id = \(roomId) AND sequence > \(lower) ORDER BY sequence LIMIT \(batchSize)"
        case (nil, let upper?):
            query = "SELECT \(unescaped: columns) FROM chat_message WHERE room_id = \(roomId) AND sequence < \(upper) ORDER BY sequence DESC LIMIT \(batchSize)"
        case (nil, nil):
            query = "SELECT \(unescaped: columns) FROM chat_message WHERE room_id = \(roomId) ORDER BY sequence DESC LIMIT \(batchSize)"
        }
        let newestFirst = lower == nil
        let logger = self.logger
        let statement = query
        return try await bounded("reading chat") { client in
            var messages: [ChatMessageDescription] = []
            let rows = try await client.query(statement, logger: logger)
            for try await (sequence, room, timestamp, sessionId, screenName, role, lastUpdate, message)
                in rows.decode((Int64, String, Int64, String, String, String, Int64, ByteBuffer).self) {
                guard let role = MemberRole(rawValue: role) else { throw Self.corrupt("chat_message", "\(sequence)", "from_role") }
                messages.append(ChatMessageDescription(
                    messageId: ChatMessageDescription.messageId(sequence: UInt64(sequence)), roomId: room, timestamp: timestamp,
                    from: ChatUser(sessionId: sessionId, screenName: screenName, role: role, lastUpdate: lastUpdate),
                    message: String(buffer: message)))
            }
            if newestFirst { messages.reverse() }
            return messages
        }
    }

    public func heartbeat(_ node: NodeRecord) async throws(RoomStoreError) {
        let logger = self.logger
        _ = try await bounded("heartbeat") { client in
            try await client.query("""
                INSERT INTO node (node_id, signaling_url, relay_address, streams, sessions, started_at, heartbeat_at)
                VALUES (\(node.nodeId), \(node.signalingURL), \(node.relayAddress), \(node.streams), \(node.sessions), \(node.startedAt), now())
                ON CONFLICT (node_id) DO UPDATE SET
                    signaling_url = excluded.signaling_url, relay_address = excluded.relay_address, streams = excluded.streams,
                    sessions = excluded.sessions, started_at = excluded.started_at, heartbeat_at = now()
                """, logger: logger)
        }
    }

    public func liveNodes(within: Duration) async throws(RoomStoreError) -> [NodeRecord] {
        let logger = self.logger
        let milliseconds = Int64(within / .milliseconds(1))
        return try await bounded("reading nodes") { client in
            var nodes: [NodeRecord] = []
            let rows = try await client.query("""
                SELECT node_id, signaling_url, relay_address, streams, sessions, started_at,
                       (EXTRACT(EPOCH FROM heartbeat_at) * 1000)::BIGINT
                FROM node WHERE heartbeat_at >= now() - make_interval(secs => \(Double(milliseconds) / 1000))
                ORDER BY node_id
                """, logger: logger)
            for try await (nodeId, signaling, relay, streams, sessions, startedAt, heartbeatAt)
                in rows.decode((String, String, String, Int, Int, Int64, Int64).self) {
                nodes.append(NodeRecord(nodeId: nodeId, signalingURL: signaling, relayAddress: relay, streams: streams, sessions: sessions,
                                        startedAt: startedAt, heartbeatAt: heartbeatAt))
            }
            return nodes
        }
    }

    public func removeNode(_ nodeId: String) async throws(RoomStoreError) {
        let logger = self.logger
        _ = try await bounded("removing a node") { client in
            try await client.query("DELETE FROM node WHERE node_id = \(nodeId)", logger: logger)
        }
    }

    public func appendAudit(_ entry: AuditEntry) async throws(RoomStoreError) {
        let logger = self.logger
        let entry = entry.bounded
        _ = try await bounded("writing the audit log") { client in
            try await client.query("""
                INSERT INTO audit (time, node_id, actor, remote_address, action, outcome, detail)
                VALUES (\(entry.time), \(entry.nodeId), \(entry.actor), \(entry.remoteAddress), \(entry.action), \(entry.outcome), \(entry.detail))
                """, logger: logger)
        }
    }

    public func auditEntries(limit: Int) async throws(RoomStoreError) -> [AuditEntry] {
        let logger = self.logger
        let limit = max(0, limit)
        return try await bounded("reading the audit log") { client in
            var entries: [AuditEntry] = []
            let rows = try await client.query("""
                SELECT sequence, time, node_id, actor, remote_address, action, outcome, detail FROM audit ORDER BY sequence DESC LIMIT \(limit)
                """, logger: logger)
            for try await (sequence, time, nodeId, actor, remote, action, outcome, detail)
                in rows.decode((Int64, Int64, String, String, String, String, String, String).self) {
                entries.append(AuditEntry(sequence: sequence, time: time, nodeId: nodeId, actor: actor, remoteAddress: remote,
                                          action: action, outcome: outcome, detail: detail))
            }
            return entries
        }
    }

    public func isReachable() async -> Bool {
        let logger = self.logger
        do throws(RoomStoreError) {
            _ = try await bounded("checking", within: .seconds(2)) { client in
                try await client.query("SELECT 1", logger: logger)
            }
            return true
        } catch {
            return false
        }
    }

    // MARK: Writing

    public func apply(groups: [[RoomStoreChange]]) async throws(RoomStoreError) {
        guard groups.contains(where: { !$0.isEmpty }) else { return }
        let logger = self.logger
        let origin = publisher.withLock { $0 }
        let logged = origin == nil ? [] : groups.joined().filter(\.isShared)
        let payload = logged.isEmpty ? nil : String(decoding: try Self.encodeChanges(logged), as: UTF8.self)
        try await bounded("writing") { client in
            try await client.withTransaction(logger: logger) { connection in
                if let origin, let payload {
                    try await connection.query("SELECT pg_advisory_xact_lock(\(Self.changeLogLock))", logger: logger)
                    try await connection.query("INSERT INTO change_log (node_id, changes) VALUES (\(origin), \(payload))", logger: logger)
                    try await connection.query("SELECT pg_notify(\(Self.changeChannel), '')", logger: logger)
                }
                for change in groups.joined() {
                    try await Self.apply(change, on: connection, logger: logger)
                }
            }
        }
    }

    private static func encodeChanges(_ changes: [RoomStoreChange]) throws(RoomStoreError) -> Data {
        do {
            return try encoder.encode(changes)
        } catch {
            throw .io("cannot encode changes: \(error)")
        }
    }

    private static func apply(_ change: RoomStoreChange, on connection: PostgresConnection, logger: Logger) async throws {
        switch change {
        case .saveRoom(let room, let createdAt):
            try await connection.query("""
                INSERT INTO room (room_id, alias, name, description, type, bridge_id, pin, created_at)
                VALUES (\(room.roomId), \(room.alias), \(room.name), \(room.description), \(room.type.rawValue), \(room.bridgeId),
                        \(room.pin), \(createdAt))
                ON CONFLICT (room_id) DO UPDATE SET
                    alias = excluded.alias, name = excluded.name, description = excluded.description,
                    type = excluded.type, bridge_id = excluded.bridge_id, pin = excluded.pin, created_at = excluded.created_at
                """, logger: logger)
        case .deleteRoom(let roomId):
            // Keep the sequence high-water mark: new messages must not reuse the deleted room's ids.
            try await connection.query("""
                UPDATE store_counter
                SET value = GREATEST(value, COALESCE((SELECT MAX(sequence) FROM chat_message WHERE room_id = \(roomId)), 0))
                WHERE name = 'lastChatSequence'
                """, logger: logger)
            try await connection.query("DELETE FROM room WHERE room_id = \(roomId)", logger: logger)
        case .saveMember(let roomId, let member, let joinOrder):
            let streams = String(decoding: try encoder.encode(member.streams), as: UTF8.self)
            let order = try int64(joinOrder, "joinOrder")
            try await connection.query("""
                INSERT INTO member (room_id, session_id, screen_name, role, state, streams, last_update, join_order)
                VALUES (\(roomId), \(member.sessionId), \(member.screenName), \(member.role.rawValue), \(member.state.rawValue),
                        \(streams), \(member.lastUpdate), \(order))
                ON CONFLICT (room_id, session_id) DO UPDATE SET
                    screen_name = excluded.screen_name, role = excluded.role, state = excluded.state,
                    streams = excluded.streams, last_update = excluded.last_update, join_order = excluded.join_order
                """, logger: logger)
        case .deleteMember(let roomId, let sessionId):
            try await connection.query("DELETE FROM member WHERE room_id = \(roomId) AND session_id = \(sessionId)", logger: logger)
        case .appendChat(let message):
            guard let sequence = message.sequence else {
                throw RoomStoreError.io("chat message id \(message.messageId) is not chat-<sequence>")
            }
            let value = try int64(sequence, "chat sequence")
            try await connection.query("""
                INSERT INTO chat_message
                    (sequence, room_id, timestamp, from_session_id, from_screen_name, from_role, from_last_update, message)
                VALUES (\(value), \(message.roomId), \(message.timestamp), \(message.from.sessionId), \(message.from.screenName),
                        \(message.from.role.rawValue), \(message.from.lastUpdate), \(ByteBuffer(string: message.message)))
                """, logger: logger)
        case .saveSession(let sessionId, let resumeKeyHash, let roles):
            let rolesJSON = try roles.map { String(decoding: try encoder.encode($0), as: UTF8.self) }
            try await connection.query("""
                INSERT INTO session (session_id, resume_key_hash, roles) VALUES (\(sessionId), \(resumeKeyHash), \(rolesJSON))
                ON CONFLICT (session_id) DO UPDATE SET resume_key_hash = excluded.resume_key_hash, roles = excluded.roles
                """, logger: logger)
        case .deleteSession(let sessionId):
            try await connection.query("DELETE FROM session WHERE session_id = \(sessionId)", logger: logger)
        case .saveStream(let stream):
            let entry = String(decoding: try encoder.encode(stream), as: UTF8.self)
            try await connection.query("""
                INSERT INTO stream (stream_id, node_id, published_at, entry) VALUES (\(stream.streamId), \(stream.nodeId), \(stream.publishedAt), \(entry))
                ON CONFLICT (stream_id) DO UPDATE SET node_id = excluded.node_id, published_at = excluded.published_at, entry = excluded.entry
                """, logger: logger)
        case .deleteStream(let streamId, _, _):
            try await connection.query("DELETE FROM stream WHERE stream_id = \(streamId)", logger: logger)
        case .deleteNodeStreams(let nodeId, _, _):
            try await connection.query("DELETE FROM stream WHERE node_id = \(nodeId)", logger: logger)
        }
    }

    // MARK: Cluster

    /// From now on, changes applied through this store are also written to the change log as
    /// `nodeId`'s, for the other nodes to follow.
    public func publishChanges(as nodeId: String) {
        publisher.withLock { $0 = nodeId }
    }

    /// Claims the lowest chat sequence slot no other live node holds (`within`: how recent a
    /// heartbeat makes a node live) and records this node with it.
    public func claimSlot(for node: NodeRecord, within: Duration) async throws(RoomStoreError) -> UInt64 {
        let logger = self.logger
        let seconds = Double(within / .milliseconds(1)) / 1000
        return try await bounded("claiming a slot") { client in
            try await client.withTransaction(logger: logger) { connection in
                try await connection.query("SELECT pg_advisory_xact_lock(\(Self.slotLock))", logger: logger)
                var taken = Set<Int>()
                let rows = try await connection.query("""
                    SELECT slot FROM node WHERE node_id <> \(node.nodeId) AND heartbeat_at >= now() - make_interval(secs => \(seconds))
                    """, logger: logger)
                for try await slot in rows.decode(Int.self) { taken.insert(slot) }
                guard let slot = (0..<(1 << Self.slotBits)).first(where: { !taken.contains($0) }) else {
                    throw RoomStoreError.io("every one of the \(1 << Self.slotBits) node slots is held by a live node")
                }
                try await connection.query("""
                    INSERT INTO node (node_id, signaling_url, relay_address, streams, sessions, started_at, heartbeat_at, slot)
                    VALUES (\(node.nodeId), \(node.signalingURL), \(node.relayAddress), \(node.streams), \(node.sessions), \(node.startedAt), now(), \(slot))
                    ON CONFLICT (node_id) DO UPDATE SET slot = excluded.slot, heartbeat_at = now()
                    """, logger: logger)
                return UInt64(slot)
            }
        }
    }

    /// The newest change-log id (0 for none): where a node starts following.
    public func latestChangeId() async throws(RoomStoreError) -> Int64 {
        let logger = self.logger
        return try await bounded("reading the change log") { client in
            var latest: Int64 = 0
            for try await value in try await client.query("SELECT COALESCE(MAX(id), 0)::BIGINT FROM change_log", logger: logger).decode(Int64.self) {
                latest = value
            }
            return latest
        }
    }

    /// Other nodes' changes after log id `after`, in commit order, at most `limit` entries;
    /// with the last id read (`after` when there was nothing).
    public func changes(after: Int64, excluding nodeId: String, limit: Int = 500) async throws(RoomStoreError)
        -> (last: Int64, changes: [RoomStoreChange]) {
        let logger = self.logger
        let decoder = JSONDecoder()
        return try await bounded("reading the change log") { client in
            var last = after
            var changes: [RoomStoreChange] = []
            for try await prunedThrough in try await client.query("SELECT pruned_through FROM change_log_horizon", logger: logger).decode(Int64.self)
            where prunedThrough > after {
                throw RoomStoreError.missedChanges(
                    "the change log was pruned through id \(prunedThrough) and this node has applied only up to \(after): restart it to load the cluster's state again")
            }
            let rows = try await client.query("""
                SELECT id, node_id, changes FROM change_log WHERE id > \(after) ORDER BY id LIMIT \(limit)
                """, logger: logger)
            for try await (id, origin, json) in rows.decode((Int64, String, String).self) {
                last = id
                guard origin != nodeId else { continue }
                guard let decoded = try? decoder.decode([RoomStoreChange].self, from: Data(json.utf8)) else {
                    throw RoomStoreError.io("corrupt change_log row \(id)")
                }
                changes += decoded
            }
            return (last, changes)
        }
    }

    /// A signal each time another node may have logged changes: on each notification, and once
    /// after every (re)connection of the listening connection (a notification missed while it was
    /// down is caught up by reading the log). Ends when the store closes.
    public func changeSignals() -> AsyncStream<Void> {
        let client = self.client
        let logger = self.logger
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let task = Task {
            while !Task.isCancelled {
                do {
                    try await client.withConnection { connection in
                        try await connection.listen(on: Self.changeChannel) { notifications in
                            continuation.yield()
                            for try await _ in notifications { continuation.yield() }
                        }
                    }
                } catch {
                    if Task.isCancelled { break }
                    logger.debug("change log listener lost its connection: \(error)")
                }
                try? await Task.sleep(for: .milliseconds(500))
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        listeners.withLock { $0.append(task) }
        return stream
    }

    private let listeners = Mutex<[Task<Void, Never>]>([])

    /// Deletes change-log entries older than `age` (every live node has long read them) and
    /// records how far it pruned, so that a node that had not read that far (cut off from the
    /// database all that time) learns it missed changes instead of going on without them.
    public func pruneChanges(olderThan age: Duration) async throws(RoomStoreError) {
        let logger = self.logger
        let seconds = Double(age / .milliseconds(1)) / 1000
        _ = try await bounded("pruning the change log") { client in
            try await client.query("""
                WITH pruned AS (DELETE FROM change_log WHERE created_at < now() - make_interval(secs => \(seconds)) RETURNING id)
                UPDATE change_log_horizon SET pruned_through = GREATEST(pruned_through, COALESCE((SELECT max(id) FROM pruned), 0))
                """, logger: logger)
        }
    }

    public func close() async {
        for task in listeners.withLock({ $0 }) { task.cancel() }
        runner.cancel()
        await runner.value
    }

    // MARK: Plumbing

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    private static func int64(_ value: UInt64, _ what: String) throws -> Int64 {
        guard let value = Int64(exactly: value) else { throw RoomStoreError.io("\(what) \(value) is out of range") }
        return value
    }

    private static func corrupt(_ table: String, _ key: String, _ column: String) -> RoomStoreError {
        .io("corrupt \(table) row \(key): unreadable \(column)")
    }

    private struct TimedOut: Error {}

    /// Runs `body` with the client, failing with `.unavailable` when it takes longer than the timeout
    /// (the pool waits for a connection while the server is down, and a query on a connection the
    /// server dropped mid-transaction may never finish). The caller gets its answer at the deadline
    /// even when the body ignores cancellation: the body runs in a task of its own, cancelled then.
    private func bounded<T: Sendable>(_ what: String, within limit: Duration? = nil,
                                      _ body: @escaping @Sendable (PostgresClient) async throws -> T) async throws(RoomStoreError) -> T {
        let client = self.client
        let limit = limit ?? timeout
        let race = Race<T>()
        let result: Result<T, any Error> = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, any Error>, Never>) in
                race.start(continuation,
                           work: Task {
                               do {
                                   race.finish(.success(try await body(client)))
                               } catch {
                                   race.finish(.failure(error))
                               }
                           },
                           deadline: Task {
                               try? await Task.sleep(for: limit)
                               race.finish(.failure(TimedOut()))
                           })
            }
        } onCancel: {
            race.finish(.failure(CancellationError()))
        }
        switch result {
        case .success(let value):
            return value
        case .failure(let error) where error is TimedOut:
            throw .unavailable("\(location): no answer within \(limit) while \(what)")
        case .failure(let error):
            throw Self.failure(error, location: location)
        }
    }

    /// A server's refusal (a constraint, a bad statement) is `.io` with its message and SQLSTATE;
    /// anything else (refused connection, lost server, cancelled query) means the server is unavailable.
    static func failure(_ error: any Error, location: String) -> RoomStoreError {
        if let error = error as? RoomStoreError { return error }
        if let error = error as? PostgresTransactionError {
            // The first thing that failed: BEGIN, the work, or COMMIT.
            if let cause = error.beginError ?? error.closureError ?? error.commitError { return failure(cause, location: location) }
            return .unavailable("\(location): the transaction failed")
        }
        if let error = error as? PSQLError {
            if let info = error.serverInfo, let message = info[.message] {
                let state = info[.sqlState] ?? "?"
                // Connection exceptions (08), a server starting up or shutting down (57), no
                // resources (53): the server, not the statement, is the trouble.
                if ["08", "57", "53"].contains(String(state.prefix(2))) {
                    return .unavailable("\(location): \(message) (SQLSTATE \(state))")
                }
                return .io("\(message) (SQLSTATE \(state))")
            }
            return .unavailable("\(location): \(error.code)\(error.underlying.map { ": \($0)" } ?? "")")
        }
        return .unavailable("\(location): \(error)")
    }
}
