import Dispatch
import Foundation
import GRDB
import PCastProtocol
import Synchronization

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
