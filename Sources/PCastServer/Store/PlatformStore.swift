import Dispatch
import Foundation
import Logging
import PCastProtocol

/// Where the platform keeps what outlives a process (rooms, members, resumable sessions, chat): one
/// protocol, two back ends. ``RoomStore`` (SQLite, one file) serves the single embedded node, the
/// default; ``PostgresPlatformStore`` (PostgreSQL) is shared by the nodes of a cluster. The same
/// contract tests run against both.
///
/// Every call may wait on a disk or a network, so the platform's actor goes through
/// ``RoomPersistence`` (write-behind, ordered) rather than calling a store itself.
///
/// ```swift
/// let store: any PlatformStore = try await PlatformStores.open(.postgres(url), logger: logger)
/// try await store.apply(groups: [[.saveRoom(room, createdAt: now)], [.appendChat(message)]])
/// let snapshot = try await store.load()
/// ```
public protocol PlatformStore: Sendable {
    /// Where it is, for logs and errors (never a password).
    var location: String { get }
    /// The rooms, members and sessions, and the last chat sequence, as of the last committed change.
    func load() async throws(RoomStoreError) -> RoomStoreSnapshot
    /// Chat history of a room, oldest first (paging as ``RoomStore/chatMessages(roomId:batchSize:after:before:)``).
    func chatMessages(roomId: String, batchSize: Int, after: UInt64?, before: UInt64?) async throws(RoomStoreError)
        -> [ChatMessageDescription]
    /// Applies the lists of changes, in order, in one transaction: all of them are stored, or none.
    func apply(groups: [[RoomStoreChange]]) async throws(RoomStoreError)
    /// Records that `node` is alive now (by the store's clock, so nodes' clocks need not agree):
    /// inserts it, or updates its addresses and load.
    func heartbeat(_ node: NodeRecord) async throws(RoomStoreError)
    /// The nodes whose last heartbeat is at most `within` old, by node id.
    func liveNodes(within: Duration) async throws(RoomStoreError) -> [NodeRecord]
    /// Forgets a node (it stopped cleanly). No-op for an unknown node.
    func removeNode(_ nodeId: String) async throws(RoomStoreError)
    /// Appends an entry to the audit log (its `sequence` is the store's).
    func appendAudit(_ entry: AuditEntry) async throws(RoomStoreError)
    /// The audit log's latest `limit` entries, newest first.
    func auditEntries(limit: Int) async throws(RoomStoreError) -> [AuditEntry]
    /// Whether the store answers now (`/readyz`).
    func isReachable() async -> Bool
    /// Releases its connections; later calls fail.
    func close() async
}

extension PlatformStore {
    /// Applies one list of changes in one transaction.
    public func apply(_ changes: [RoomStoreChange]) async throws(RoomStoreError) {
        guard !changes.isEmpty else { return }
        try await apply(groups: [changes])
    }
}

/// One platform node as the cluster sees it: where it is reached, its load, when it last said it
/// was alive.
public struct NodeRecord: Codable, Sendable, Hashable {
    public var nodeId: String
    /// Where clients (and other nodes) reach its signaling: `ws://host:port/ws`.
    public var signalingURL: String
    /// Its relay's UDP address, `host:port`.
    public var relayAddress: String
    /// Streams published on it and signaling sessions it holds now.
    public var streams: Int
    public var sessions: Int
    /// Milliseconds since 1970 (UTC), by the node's clock.
    public var startedAt: Int64
    /// Milliseconds since 1970 (UTC), by the store's clock; set by the store (ignored by ``PlatformStore/heartbeat(_:)``).
    public var heartbeatAt: Int64

    public init(nodeId: String, signalingURL: String, relayAddress: String, streams: Int = 0, sessions: Int = 0,
                startedAt: Int64, heartbeatAt: Int64 = 0) {
        self.nodeId = nodeId
        self.signalingURL = signalingURL
        self.relayAddress = relayAddress
        self.streams = streams
        self.sessions = sessions
        self.startedAt = startedAt
        self.heartbeatAt = heartbeatAt
    }
}

/// The back end a platform node keeps its state in.
public enum DatabaseLocation: Sendable, Hashable, CustomStringConvertible {
    /// One SQLite file (the embedded single node).
    case sqlite(path: String)
    /// A PostgreSQL database several nodes share.
    case postgres(PostgresURL)

    /// `postgres://…` or `postgresql://…` is PostgreSQL; anything else is a SQLite file path.
    public init(parsing text: String) throws(PostgresURLError) {
        if text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") {
            self = .postgres(try PostgresURL(parsing: text))
        } else {
            self = .sqlite(path: text)
        }
    }

    public var description: String {
        switch self {
        case .sqlite(let path): path
        case .postgres(let url): url.description
        }
    }
}

/// Opens the store a location names.
public enum PlatformStores {
    /// SQLite: opens (creating) and migrates the file. PostgreSQL: connects and migrates; an
    /// unreachable server is ``RoomStoreError/unavailable(_:)`` after `timeout`.
    public static func open(_ location: DatabaseLocation, logger: Logger, timeout: Duration = .seconds(5)) async throws(RoomStoreError)
        -> any PlatformStore {
        switch location {
        case .sqlite(let path):
            return SQLitePlatformStore(try RoomStore(path: path))
        case .postgres(let url):
            return try await PostgresPlatformStore.open(url, logger: logger, timeout: timeout)
        }
    }
}

/// ``RoomStore`` (SQLite) as a ``PlatformStore``: each call runs on the store's own serial queue,
/// so GRDB's blocking reads and writes never hold a thread of Swift's cooperative pool.
public final class SQLitePlatformStore: PlatformStore {
    public let store: RoomStore
    private let queue = DispatchQueue(label: "PCastKit.SQLitePlatformStore")

    public init(_ store: RoomStore) {
        self.store = store
    }

    public var location: String { store.path ?? ":memory:" }

    public func load() async throws(RoomStoreError) -> RoomStoreSnapshot {
        try await run { store throws(RoomStoreError) in try store.load() }
    }

    public func chatMessages(roomId: String, batchSize: Int, after: UInt64?, before: UInt64?) async throws(RoomStoreError)
        -> [ChatMessageDescription] {
        try await run { store throws(RoomStoreError) in
            try store.chatMessages(roomId: roomId, batchSize: batchSize, after: after, before: before)
        }
    }

    public func apply(groups: [[RoomStoreChange]]) async throws(RoomStoreError) {
        try await run { store throws(RoomStoreError) in try store.apply(groups: groups) }
    }

    public func heartbeat(_ node: NodeRecord) async throws(RoomStoreError) {
        try await run { store throws(RoomStoreError) in try store.heartbeat(node) }
    }

    public func liveNodes(within: Duration) async throws(RoomStoreError) -> [NodeRecord] {
        try await run { store throws(RoomStoreError) in try store.liveNodes(within: within) }
    }

    public func removeNode(_ nodeId: String) async throws(RoomStoreError) {
        try await run { store throws(RoomStoreError) in try store.removeNode(nodeId) }
    }

    public func appendAudit(_ entry: AuditEntry) async throws(RoomStoreError) {
        try await run { store throws(RoomStoreError) in try store.appendAudit(entry) }
    }

    public func auditEntries(limit: Int) async throws(RoomStoreError) -> [AuditEntry] {
        try await run { store throws(RoomStoreError) in try store.auditEntries(limit: limit) }
    }

    /// A file the process opened stays reachable.
    public func isReachable() async -> Bool { true }

    public func close() async {}

    private func run<T: Sendable>(_ body: @escaping @Sendable (RoomStore) throws(RoomStoreError) -> T) async throws(RoomStoreError) -> T {
        let store = self.store
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, RoomStoreError>, Never>) in
            queue.async {
                continuation.resume(returning: Result { () throws(RoomStoreError) in try body(store) })
            }
        }
        return try result.get()
    }
}
