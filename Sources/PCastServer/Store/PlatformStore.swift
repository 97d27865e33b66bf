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
