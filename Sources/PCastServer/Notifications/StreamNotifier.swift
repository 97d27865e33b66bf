import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Logging
import Synchronization

/// Where stream notifications go and how they are signed (`pcast serve --stream-notification-url`).
public struct StreamNotificationSettings: Sendable, Hashable {
    /// The backend's endpoint (http or https).
    public var url: URL
    /// The HMAC key of ``StreamNotificationSignature``.
    public var secret: String
    /// Whether every subscription is told too (`subscriber-started` / `subscriber-ended`, with
    /// the tags it subscribed with): for analytics or billing. Off by default: a large audience
    /// makes many notifications.
    public var includeViewers = false
    /// Delays between attempts: one attempt, then one after each (six in all by default, over
    /// about 15 s).
    public var retryDelays: [Duration] = [.milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(8)]
    /// One attempt's limit.
    public var timeout: Duration = .seconds(5)
    /// Notifications waiting at most; more are dropped (and counted) rather than held without bound
    /// while the backend is down.
    public var queueLimit = 1_000

    public init(url: URL, secret: String) {
        self.url = url
        self.secret = secret
    }
}

/// Delivers ``StreamNotification``s to the application's backend: signed POSTs, one at a time in
/// the order they were queued (a stream's start before its end), each retried with backoff while
/// the backend fails (no answer, 408, 429 or 5xx); another 4xx is the backend's refusal and is not
/// retried. Queuing is synchronous, so the platform's order is kept.
public final class StreamNotifier: Sendable {
    public struct Statistics: Sendable, Hashable {
        public var delivered = 0
        /// Given up after the last retry, or refused by the backend.
        public var failed = 0
        /// Dropped because the queue was full, or still queued at ``stop()``.
        public var dropped = 0
        public var attempts = 0
    }

    /// Sends one request; returns the HTTP status (throws when no answer came).
    public typealias Transport = @Sendable (URLRequest) async throws -> Int

    private struct State {
        var queue: [StreamNotification] = []
        var working = false
        var stopped = false
        var statistics = Statistics()
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let settings: StreamNotificationSettings
    private let transport: Transport
    private let logger: Logger
    private let state = Mutex(State())

    public init(settings: StreamNotificationSettings, logger: Logger, transport: Transport? = nil) {
        self.settings = settings
        self.logger = logger
        self.transport = transport ?? { request in
            let (_, response) = try await URLSession.shared.data(for: request)
            return (response as? HTTPURLResponse)?.statusCode ?? 0
        }
    }

    public func statistics() -> Statistics { state.withLock { $0.statistics } }

    /// Queues `notification` (dropped, and counted, when the queue is full or the notifier stopped).
    public func enqueue(_ notification: StreamNotification) {
        let start: Bool? = state.withLock { state in
            guard !state.stopped, state.queue.count < settings.queueLimit else {
                state.statistics.dropped += 1
                return nil
            }
            state.queue.append(notification)
            defer { state.working = true }
            return !state.working
        }
        guard let start else {
            logger.warning("stream notification dropped: the queue is full", metadata: ["pcast.stream": .string(notification.streamId)])
            return
        }
        if start { Task { await self.drain() } }
    }

    /// Returns once every queued notification was delivered or given up.
    public func idle() async {
        await withCheckedContinuation { continuation in
            let idle = state.withLock { state in
                if !state.working { return true }
                state.idleWaiters.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// Stops delivering: what is queued is dropped (the one being delivered gets no more retries).
    public func stop() {
        state.withLock { state in
            state.stopped = true
            state.statistics.dropped += state.queue.count
            state.queue = []
        }
    }

    private func drain() async {
        while true {
            let next: StreamNotification? = state.withLock { state in
                guard !state.queue.isEmpty else {
                    state.working = false
                    return nil
                }
                return state.queue.removeFirst()
            }
            guard let next else { break }
            await deliver(next)
        }
        let waiters = state.withLock { state in defer { state.idleWaiters = [] }; return state.idleWaiters }
        waiters.forEach { $0.resume() }
    }

    /// Whether an answer (nil: none came) is worth another attempt.
    static func retries(status: Int?) -> Bool {
        guard let status else { return true }
        return status == 408 || status == 429 || (500...599).contains(status)
    }

    private func deliver(_ notification: StreamNotification) async {
        let body = notification.body()
        var delays = settings.retryDelays[...]
        while true {
            state.withLock { $0.statistics.attempts += 1 }
            let timestamp = Int64(Date().timeIntervalSince1970)
            var request = URLRequest(url: settings.url, timeoutInterval: settings.timeout / .seconds(1))
            request.httpMethod = "POST"
            request.httpBody = body
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.setValue(notification.type.rawValue, forHTTPHeaderField: StreamNotificationSignature.eventHeader)
            request.setValue(notification.id, forHTTPHeaderField: StreamNotificationSignature.deliveryHeader)
            request.setValue(String(timestamp), forHTTPHeaderField: StreamNotificationSignature.timestampHeader)
            request.setValue(StreamNotificationSignature.sign(body: body, timestamp: timestamp, secret: settings.secret),
                             forHTTPHeaderField: StreamNotificationSignature.signatureHeader)
            let status: Int?
            let failure: String
            do {
                let answered = try await transport(request)
                status = answered
                failure = "HTTP \(answered)"
            } catch {
                status = nil
                failure = "\(error)"
            }
            if let status, (200..<300).contains(status) {
                state.withLock { $0.statistics.delivered += 1 }
                return
            }
            let metadata: Logger.Metadata = ["pcast.stream": .string(notification.streamId), "pcast.event": .string(notification.type.rawValue),
                                             "pcast.reason": .string(failure)]
            let stopped = state.withLock { $0.stopped }
            guard Self.retries(status: status), let delay = delays.popFirst(), !stopped else {
                state.withLock { $0.statistics.failed += 1 }
                logger.warning("stream notification not delivered", metadata: metadata)
                return
            }
            logger.info("stream notification failed; retrying in \(delay)", metadata: metadata)
            try? await Task.sleep(for: delay)
        }
    }
}
