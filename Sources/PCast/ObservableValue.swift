import PCastMedia
import PCastProtocol
import Synchronization

// The PCast iOS SDK's observables: "Observe value changes. Similar to the ReactiveX Behavior Subject."
//
// Delivery design (shared by both kinds, in `ObservableHub`):
// - A change is committed under one lock, which gives it a version (the commit order) and queues
//   it for the current subscribers. Whoever commits while nobody is delivering becomes the
//   deliverer: it drains the queue outside the lock, change by change (a "round": every subscriber
//   told of that change) and leaves only when the queue is empty. Anyone else committing meanwhile
//   (another thread, or a callback re-entering) only queues. So changes reach everyone in commit
//   order, each once, callbacks never run under a lock, and re-entrant changes come after the
//   current round.
// - A subscriber remembers the version it started from and gets only later changes: a subscribe
//   racing with changes neither misses one nor sees an older value after a newer one.
// - The immediate call of a hot subscribe is made by the subscribing thread. Changes reaching that
//   subscriber meanwhile are kept in its backlog, which the subscribing thread delivers before
//   handing the subscriber over to the deliverer, so one subscriber is never called twice at once.
// - Each delivery checks the subscriber's `active` flag under its lock: once `dispose()` has
//   cleared it, no call to it starts.

/// Why an observable refused an operation.
///
/// ```swift
/// do { _ = try room.estimatedSize.getValue() } catch .coldObservable { /* subscribe instead */ }
/// ```
public enum ObservableError: Error, Sendable, Hashable, CustomStringConvertible {
    /// `getValue`/`setValue` on a cold observable (``ColdObservable``), which has no current value.
    case coldObservable

    public var description: String {
        switch self {
        case .coldObservable: return "a cold observable has no current value to get or set"
        }
    }
}

/// A value to observe (the PCast iOS SDK's `Observable`, a behaviour subject): there is always a current
/// value, subscribing calls you at once with it and then with every change, and setting an equal
/// value notifies nobody. Named apart from the SDK's `Observable` so that it does not shadow the
/// standard library's `Observation.Observable` in an app that imports both.
///
/// ```swift
/// let volume = ObservableValue(0.5)
/// let watching = volume.subscribe { print("volume", $0) }   // prints "volume 0.5" before returning
/// volume.setValue(0.8)                                      // prints "volume 0.8"
/// volume.setValue(0.8)                                      // equal: nothing
/// watching.dispose()                                        // or drop the last reference to it
///
/// for await level in volume.values { meter.show(level) }    // the same as an AsyncSequence
/// ```
///
/// Delivery:
/// - Callbacks run synchronously on a thread that changed the value or subscribed (no queue of
///   ours), never under a lock, so they may call ``setValue(_:)``, ``subscribe(_:)`` and
///   `dispose()` (theirs or another's) on this observable.
/// - One thread at a time delivers changes, one round per change (every subscriber told of it)
///   in the order the changes were made. A change made while a delivery is running (by a callback,
///   or on another thread) is queued and the delivering thread delivers it after the current
///   round: `setValue` then returns before its notifications ran (and the delivering thread goes
///   on while others keep changing the value). Otherwise (the usual case) they have all run when
///   `setValue` returns.
/// - Each subscriber is called one call at a time: with the value current when it subscribed,
///   then with every later change exactly once, in order. The immediate call is made by the
///   subscribing thread, which also gives that subscriber the changes made during the call, before
///   ``subscribe(_:)`` returns; later calls come from the delivering thread. (So while a thread
///   subscribes, other subscribers may be called on another thread at the same time.)
/// - Once `dispose()` returns (or the last reference to the ``Disposable`` is dropped), no call to
///   that subscriber starts; a call already running on another thread may still finish.
/// - Subscriptions do not keep the observable alive.
public final class ObservableValue<Value: Sendable & Equatable>: Sendable {
    private let hub: ObservableHub<Value>

    public init(_ initial: Value) {
        hub = ObservableHub(initial: initial)
    }

    /// The current value (the latest set; with a delivery running on another thread, subscribers
    /// may not have been told of it yet).
    public var value: Value { hub.current }

    /// The current value (the PCast iOS SDK's name for ``value``).
    public func getValue() -> Value { hub.current }

    /// Makes `newValue` current and notifies the subscribers, unless it equals the current value.
    public func setValue(_ newValue: Value) {
        hub.commit(always: false) { _ in newValue }
    }

    /// Changes the value from the current one atomically (read, `transform`, write under the lock),
    /// then notifies the subscribers if it changed.
    ///
    /// ```swift
    /// members.update { $0.append(member) }
    /// ```
    ///
    /// `transform` runs under the observable's lock: it must not use this observable (nor dispose of
    /// a subscription to it).
    public func update(_ transform: (inout Value) -> Void) {
        hub.commit(always: false) { current in
            var value = current!   // a hot observable always has a value
            transform(&value)
            return value
        }
    }

    /// Calls `onChanged` at once (before returning) with the current value, then on every change,
    /// in order, until the returned ``Disposable`` is disposed or released: keep it as long as you
    /// want the calls (`_ = observable.subscribe { … }` ends the subscription at once).
    public func subscribe(_ onChanged: @escaping @Sendable (Value) -> Void) -> Disposable {
        hub.subscribe(immediately: true, onChanged)
    }

    /// The values as an `AsyncSequence`: the current value first, then the changes.
    ///
    /// ```swift
    /// for await members in room.members.values { render(members) }
    /// ```
    ///
    /// A consumer slower than the changes gets the latest value when it asks for the next one:
    /// intermediate values are skipped, never queued. Each iterator is a subscription, made when the
    /// iterator is (when a `for await` loop starts) and released when it ends or is dropped. An
    /// observable never ends, so the iteration ends (`next()` returns nil) only when the consuming
    /// task is cancelled. Iterating does not keep the observable alive: if its owner releases it,
    /// no more values come, until the task is cancelled.
    public var values: ObservableValues<Value> {
        let hub = self.hub
        return ObservableValues { hub.subscribe(immediately: true, $0) }
    }

    /// How many subscriptions are live (for tests).
    package var subscriberCount: Int { hub.subscriberCount }
}

/// An observable without a current value (the PCast iOS SDK's "cold observable", e.g. a room's estimated
/// size): subscribers are not called on subscribing, only on the values the SDK emits afterwards,
/// and ``getValue()``/``setValue(_:)`` fail with ``ObservableError/coldObservable``.
///
/// ```swift
/// let watching = room.estimatedSize.subscribe { print("about \($0) in the room") }   // later
/// for await size in room.estimatedSize.values { label.text = "\(size)" }
/// ```
///
/// A subscriber is called with the first value emitted after it subscribed, then only with values
/// that differ from the last one it was given (the SDK may emit the same value periodically; a new
/// subscriber still gets it). Delivery is otherwise as for ``ObservableValue``: in emission order, one
/// call at a time per subscriber, re-entrancy allowed, no call started after `dispose()` returned.
public final class ColdObservable<Value: Sendable & Equatable>: Sendable {
    private let hub = ObservableHub<Value>(initial: nil)

    public init() {}

    /// Always fails: a cold observable has no current value.
    public func getValue() throws(ObservableError) -> Value {
        throw .coldObservable
    }

    /// Always fails: only the SDK produces a cold observable's values.
    public func setValue(_ newValue: Value) throws(ObservableError) {
        throw .coldObservable
    }

    /// Calls `onChanged` with the values emitted from now on (not at once), until the returned
    /// ``Disposable`` is disposed or released (keep it as long as you want the calls).
    public func subscribe(_ onChanged: @escaping @Sendable (Value) -> Void) -> Disposable {
        hub.subscribe(immediately: false, onChanged)
    }

    /// The values emitted after the iteration started, as an `AsyncSequence` (see
    /// ``ObservableValue/values``: latest wins under a slow consumer, ends when the task is cancelled).
    public var values: ObservableValues<Value> {
        let hub = self.hub
        return ObservableValues { hub.subscribe(immediately: false, $0) }
    }

    /// The producer's side: delivers `value` to the subscribers (each one unless it equals the last
    /// value it was given).
    package func emit(_ value: Value) {
        hub.commit(always: true) { _ in value }
    }

    /// How many subscriptions are live (for tests).
    package var subscriberCount: Int { hub.subscriberCount }
}

/// An observable's values as an `AsyncSequence` (``ObservableValue/values``,
/// ``ColdObservable/values``): a consumer slower than the changes gets the latest one; iteration
/// ends only when the consuming task is cancelled.
///
/// ```swift
/// let watching = Task { for await state in member.state.values { show(state) } }
/// watching.cancel()   // ends the loop and the subscription
/// ```
public struct ObservableValues<Value: Sendable>: AsyncSequence, Sendable {
    public typealias Element = Value
    public typealias Failure = Never

    private let subscribe: @Sendable (@escaping @Sendable (Value) -> Void) -> Disposable

    init(subscribe: @escaping @Sendable (@escaping @Sendable (Value) -> Void) -> Disposable) {
        self.subscribe = subscribe
    }

    /// Subscribes (the first value of a hot observable is its current value at this point).
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(subscribe)
    }

    /// One subscription; for one consumer at a time.
    public struct AsyncIterator: AsyncIteratorProtocol {
        public typealias Element = Value
        public typealias Failure = Never

        private let slot: LatestValueSlot<Value>

        init(_ subscribe: @Sendable (@escaping @Sendable (Value) -> Void) -> Disposable) {
            let slot = LatestValueSlot<Value>()
            // Weak: the subscription must not keep the slot (which owns the subscription) alive.
            slot.hold(subscribe { [weak slot] value in slot?.put(value) })
            self.slot = slot
        }

        /// The next value (the latest, if several came since the last call), or nil once the task
        /// is cancelled.
        public mutating func next() async -> Value? {
            await slot.take(isolation: nil)
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> Value? {
            await slot.take(isolation: actor)
        }
    }
}

@available(*, unavailable)
extension ObservableValues.AsyncIterator: Sendable {}

/// The latest value not yet taken by an ``ObservableValues`` iterator, and its subscription.
private final class LatestValueSlot<Value: Sendable>: Sendable {
    private struct State {
        var latest: Value?
        var waiter: UnsafeContinuation<Value?, Never>?
        var finished = false
        var subscription: Disposable?
    }

    private let state = Mutex(State())

    func hold(_ subscription: Disposable) {
        let finished = state.withLock { state in
            if !state.finished { state.subscription = subscription }
            return state.finished
        }
        if finished { subscription.dispose() }
    }

    /// From the subscription (one call at a time, in order): the latest value wins.
    func put(_ value: Value) {
        let waiter = state.withLock { state -> UnsafeContinuation<Value?, Never>? in
            if state.finished { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.latest = value
            return nil
        }
        waiter?.resume(returning: value)
    }

    func take(isolation actor: isolated (any Actor)?) async -> Value? {
        await withTaskCancellationHandler {
            await withUnsafeContinuation(isolation: actor) { (continuation: UnsafeContinuation<Value?, Never>) in
                let ready = state.withLock { state -> Value?? in
                    if let latest = state.latest {
                        state.latest = nil
                        return .some(latest)
                    }
                    if state.finished { return .some(nil) }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            finish()
        }
    }

    /// Ends the iteration (the task was cancelled): wakes the waiting consumer with nil and releases
    /// the subscription.
    private func finish() {
        let (waiter, subscription) = state.withLock { state in
            defer {
                state.waiter = nil
                state.subscription = nil
            }
            state.finished = true
            state.latest = nil
            return (state.waiter, state.subscription)
        }
        waiter?.resume(returning: nil)
        subscription?.dispose()
    }
}

/// Subscribers, the commit order and the delivery of changes, for ``ObservableValue`` (with a current
/// value) and ``ColdObservable`` (without). See the design notes at the top of the file.
final class ObservableHub<Value: Sendable & Equatable>: Sendable {
    private struct Change {
        let version: UInt64
        let value: Value
    }

    private struct State {
        /// The last value committed; nil only for a cold observable that never emitted.
        var current: Value?
        /// How many changes were committed.
        var version: UInt64 = 0
        var subscribers: [Subscriber] = []
        /// Committed, not yet delivered, in commit order.
        var pending: [Change] = []
        /// Whether a thread is delivering `pending`.
        var delivering = false
    }

    private let state: Mutex<State>

    init(initial: Value?) {
        state = Mutex(State(current: initial))
    }

    /// The current value of a hot observable.
    var current: Value {
        state.withLock { $0.current! }
    }

    var subscriberCount: Int {
        state.withLock { $0.subscribers.count }
    }

    /// Commits `transform(current)` (unless equal to the current value and not `always`) and
    /// delivers it, or leaves it to the thread delivering already.
    func commit(always: Bool, _ transform: (Value?) -> Value) {
        let mustDeliver = state.withLock { state -> Bool in
            let value = transform(state.current)
            if !always, let current = state.current, current == value { return false }
            state.current = value
            state.version += 1
            // Nobody to tell (a later subscriber starts after this version anyway).
            if state.subscribers.isEmpty { return false }
            state.pending.append(Change(version: state.version, value: value))
            if state.delivering { return false }
            state.delivering = true
            return true
        }
        if mustDeliver { deliverPending() }
    }

    /// Delivers the queued changes, round after round, until there are none left.
    private func deliverPending() {
        while let (changes, subscribers) = nextBatch() {
            for change in changes {
                for subscriber in subscribers where subscriber.startVersion < change.version {
                    subscriber.deliver(change.value)
                }
            }
        }
    }

    /// The queued changes and who to tell (subscribers added later started after them), or nil
    /// (and delivery over) when none are left.
    private func nextBatch() -> ([Change], [Subscriber])? {
        state.withLock { state in
            if state.pending.isEmpty {
                state.delivering = false
                return nil
            }
            let changes = state.pending
            state.pending = []
            return (changes, state.subscribers)
        }
    }

    func subscribe(immediately: Bool, _ onChanged: @escaping @Sendable (Value) -> Void) -> Disposable {
        let (subscriber, initial) = state.withLock { state -> (Subscriber, Value?) in
            let initial = immediately ? state.current : nil
            let subscriber = Subscriber(startVersion: state.version, initial: initial, onChanged)
            state.subscribers.append(subscriber)
            return (subscriber, initial)
        }
        let disposable = Disposable { [weak self, weak subscriber] in
            guard let subscriber else { return }   // its observable is gone
            subscriber.cancel()
            self?.remove(subscriber)
        }
        if let initial { subscriber.start(with: initial) }
        return disposable
    }

    private func remove(_ subscriber: Subscriber) {
        state.withLock { $0.subscribers.removeAll { $0 === subscriber } }
    }

    /// One subscription: its callback, the version it started from, and whether it is still wanted.
    private final class Subscriber: Sendable {
        struct State {
            var active = true
            /// The subscribing thread is making the immediate call (changes go to `backlog`).
            var starting: Bool
            var backlog: [Value] = []
            /// The last value given (or being given) to the callback.
            var last: Value?

            /// Whether to call the callback with `value` now (and remember it as given).
            mutating func accepts(_ value: Value) -> Bool {
                guard active else { return false }
                if let last, last == value { return false }
                last = value
                return true
            }
        }

        /// Changes up to this version are not for this subscriber.
        let startVersion: UInt64
        private let onChanged: @Sendable (Value) -> Void
        private let state: Mutex<State>

        init(startVersion: UInt64, initial: Value?, _ onChanged: @escaping @Sendable (Value) -> Void) {
            self.startVersion = startVersion
            self.onChanged = onChanged
            state = Mutex(State(starting: initial != nil, last: initial))
        }

        /// From the delivering thread.
        func deliver(_ value: Value) {
            let call = state.withLock { state -> Bool in
                if state.starting && state.active {
                    state.backlog.append(value)
                    return false
                }
                return state.accepts(value)
            }
            if call { onChanged(value) }
        }

        /// From the subscribing thread: the immediate call, then the changes that came during it.
        func start(with initial: Value) {
            onChanged(initial)
            while let backlog = takeBacklog() {
                for value in backlog where state.withLock({ $0.accepts(value) }) {
                    onChanged(value)
                }
            }
        }

        /// The changes that came during the start, or nil, after which the delivering thread calls.
        private func takeBacklog() -> [Value]? {
            state.withLock { state in
                if state.backlog.isEmpty || !state.active {
                    state.starting = false
                    state.backlog = []
                    return nil
                }
                let backlog = state.backlog
                state.backlog = []
                return backlog
            }
        }

        /// No call starts after this returns.
        func cancel() {
            state.withLock { state in
                state.active = false
                state.backlog = []
            }
        }
    }
}
