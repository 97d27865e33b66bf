import Synchronization

/// A data-quality report: the PCast iOS SDK's `(status, reason)` pair as one value, what the
/// `dataQualityChanges` sequences of ``Renderer`` and `Publisher` deliver.
public struct DataQuality: Sendable, Hashable, CustomStringConvertible {
    public var status: DataQualityStatus
    public var reason: DataQualityReason

    public init(status: DataQualityStatus, reason: DataQualityReason) {
        self.status = status
        self.reason = reason
    }

    public var description: String { "\(status)/\(reason)" }
}

/// Events to any number of `AsyncStream` consumers, beside a seed-style single-slot callback: each
/// ``stream(bufferingNewest:)`` is one consumer, told of every event yielded after it was made
/// (the newest `limit` kept when it falls behind), until ``finish()`` ends them all or the
/// consumer's task stops iterating.
package final class EventBroadcast<Event: Sendable>: Sendable {
    private struct State {
        var next = 0
        var consumers: [Int: AsyncStream<Event>.Continuation] = [:]
        var finished = false
        /// Told when the first consumer arrives (a producer that runs only while someone listens).
        var onFirstConsumer: (@Sendable () -> Void)?
    }
    private let state = Mutex(State())

    package init() {}

    /// Called (outside the lock) whenever a consumer arrives while none was listening.
    package func onFirstConsumer(_ action: @escaping @Sendable () -> Void) {
        state.withLock { $0.onFirstConsumer = action }
    }

    package var hasConsumers: Bool { state.withLock { !$0.consumers.isEmpty } }

    /// A new consumer. A broadcast already finished gives a stream that ends at once.
    package func stream(bufferingNewest limit: Int = 32) -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(limit))
        let (key, first): (Int?, (@Sendable () -> Void)?) = state.withLock { state in
            guard !state.finished else { return (nil, nil) }
            let key = state.next
            state.next += 1
            let first = state.consumers.isEmpty ? state.onFirstConsumer : nil
            state.consumers[key] = continuation
            return (key, first)
        }
        guard let key else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.consumers.removeValue(forKey: key) }
        }
        first?()
        return stream
    }

    package func yield(_ event: Event) {
        for consumer in state.withLock({ Array($0.consumers.values) }) { consumer.yield(event) }
    }

    /// Ends every consumer's sequence. `closing`: later ``stream(bufferingNewest:)``s end at once
    /// too; otherwise a later consumer hears later events (a renderer stopped, then started again).
    package func finish(closing: Bool = true) {
        let consumers = state.withLock { state in
            if closing { state.finished = true }
            defer { state.consumers = [:] }
            return Array(state.consumers.values)
        }
        for consumer in consumers { consumer.finish() }
    }
}
