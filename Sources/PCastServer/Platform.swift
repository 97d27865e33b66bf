import Foundation
import Logging
import PCastProtocol
import PCastRelay

/// What a connection's writer sends, in order.
enum Outbound: Sendable, Hashable {
    case message(Envelope<ServerMessage>)
    case close(SignalingCloseCode, reason: String)
}

/// Carries out what the state machines decide: holds every connection's ``SessionStateMachine``
/// and the ``StreamRegistry``, and turns their actions into sends, closes, relay calls, logs and
/// metrics. All state changes happen on this actor, so a stream's events reach its sessions in
/// the order they were decided. Relay calls are synchronous and short (the contract's methods
/// only change tables), so they run here without blocking the pool.
actor Platform {
    private struct Connection {
        var machine: SessionStateMachine
        let outbox: AsyncStream<Outbound>.Continuation
        let logger: Logger
    }

    let configuration: PlatformConfiguration
    let relay: any RelayControl
    let metrics: PlatformMetrics
    private let clock: @Sendable () -> Date
    private let logger: Logger
    private let tokens: TokenAuthority
    private var connections: [String: Connection] = [:]
    private var registry: StreamRegistry
    private(set) var isAccepting = true

    /// Messages queued for one connection before it counts as not reading: a client that sends
    /// requests without reading the replies cannot make the platform hold unbounded memory.
    static let outboxLimit = 1024

    init(configuration: PlatformConfiguration, relay: any RelayControl, metrics: PlatformMetrics, clock: @escaping @Sendable () -> Date, logger: Logger) {
        self.configuration = configuration
        self.relay = relay
        self.metrics = metrics
        self.clock = clock
        self.logger = logger
        self.tokens = TokenAuthority(applicationId: configuration.applicationId, secret: configuration.secret)
        self.registry = StreamRegistry(tokens: tokens)
    }

    /// A new socket: returns its session id (given out once it authenticates) and what to write to it.
    func connect(remoteAddress: String?) -> (sessionId: String, outbox: AsyncStream<Outbound>)? {
        guard isAccepting else { return nil }
        let sessionId = Self.makeId("session")
        let (stream, continuation) = AsyncStream<Outbound>.makeStream(bufferingPolicy: .bufferingOldest(Self.outboxLimit))
        var connectionLogger = logger
        connectionLogger[metadataKey: "pcast.session"] = .string(sessionId)
        connectionLogger[metadataKey: "pcast.remote"] = .string(remoteAddress ?? "?")
        let machine = SessionStateMachine(
            sessionId: sessionId, remoteAddress: remoteAddress, tokens: tokens,
            keepAliveInterval: configuration.keepAliveInterval, now: clock())
        connections[sessionId] = Connection(machine: machine, outbox: continuation, logger: connectionLogger)
        connectionLogger.debug("signaling connection opened")
        return (sessionId, stream)
    }

    /// A message (or the codec's refusal of one) from a connection.
    func receive(_ sessionId: String, _ decoded: Result<Envelope<ClientMessage>, SignalingError>) {
        metrics.messages.increment()
        switch decoded {
        case .success(let envelope): handleSession(sessionId, .message(envelope, now: clock()))
        case .failure(let error): handleSession(sessionId, .invalid(error, now: clock()))
        }
    }

    /// The socket closed (whoever closed it).
    func disconnected(_ sessionId: String) {
        handleSession(sessionId, .disconnected)
        if let connection = connections.removeValue(forKey: sessionId) {
            connection.outbox.finish()
            connection.logger.debug("signaling connection closed")
        }
    }

    /// Checks every session's keep-alive deadline.
    func tick() {
        let now = clock()
        for sessionId in connections.keys.sorted() { handleSession(sessionId, .tick(now: now)) }
    }

    /// The operator ends a stream. False when there is no such stream.
    func endStream(_ streamId: String, reason: StreamEndedReason, description: String?) -> Bool {
        guard registry.stream(streamId) != nil else { return false }
        perform(registry: .endStream(streamId: streamId, reason: reason, description: description))
        return true
    }

    /// Ends every stream as `maintenance` (so subscribers hear why), then closes every session with 1001.
    func shutdown() {
        guard isAccepting else { return }
        isAccepting = false
        for streamId in registry.streamIds {
            perform(registry: .endStream(streamId: streamId, reason: .maintenance, description: SessionEnd.serverShutdown.streamEndedDescription))
        }
        for sessionId in connections.keys.sorted() { handleSession(sessionId, .shutdown) }
    }

    var streamCount: Int { registry.streamCount }
    /// Open sockets (authenticated or not).
    var connectionCount: Int { connections.count }

    // MARK: Carrying out actions

    private func handleSession(_ sessionId: String, _ event: SessionStateMachine.Event) {
        guard var connection = connections[sessionId] else { return }
        let actions = connection.machine.handle(event)
        connections[sessionId] = connection
        for action in actions {
            switch action {
            case .send(let envelope):
                deliver(envelope, to: connection)
            case .opened(let id):
                connection.logger.info("session authenticated")
                perform(registry: .sessionOpened(sessionId: id, remoteAddress: connection.machine.remoteAddress))
            case .request(let id, let requestId, let request):
                let newId: String
                switch request {
                case .publish: newId = Self.makeId("stream")
                case .subscribe: newId = Self.makeId("subscriber")
                case .unpublish, .unsubscribe: newId = ""
                }
                perform(registry: .request(sessionId: id, requestId: requestId, request, now: clock(), newId: newId))
            case .close(let code, let reason):
                connection.logger.info("closing signaling connection", metadata: ["pcast.close": "\(code.rawValue) \(reason)"])
                connection.outbox.yield(.close(code, reason: reason))
                connection.outbox.finish()
            case .ended(let id, let how):
                perform(registry: .sessionClosed(sessionId: id, how))
            }
        }
        updateGauges()
    }

    private func perform(registry event: StreamRegistry.Event) {
        var queue = [event]
        while !queue.isEmpty {
            let actions = registry.handle(queue.removeFirst())
            for action in actions {
                switch action {
                case .send(let sessionId, let envelope):
                    // A session that closed gets nothing more (its writer has finished).
                    if let connection = connections[sessionId], !connection.machine.isClosed {
                        deliver(envelope, to: connection)
                    }
                case .addPublisher(let streamId, let tracks):
                    let result: Result<MediaTransport, RelayError>
                    do throws(RelayError) { result = .success(try relay.addPublisher(streamId: streamId, tracks: tracks)) } catch { result = .failure(error) }
                    queue.append(.publisherAdded(streamId: streamId, result))
                case .addSubscriber(let streamId, let subscriberId):
                    let result: Result<MediaTransport, RelayError>
                    do throws(RelayError) { result = .success(try relay.addSubscriber(streamId: streamId, subscriberId: subscriberId)) } catch { result = .failure(error) }
                    queue.append(.subscriberAdded(streamId: streamId, subscriberId: subscriberId, result))
                case .removeSubscriber(let streamId, let subscriberId):
                    relay.removeSubscriber(streamId: streamId, subscriberId: subscriberId)
                case .removeStream(let streamId):
                    relay.removeStream(streamId: streamId)
                case .log(let level, let message, let sessionId, let streamId):
                    var metadata: Logger.Metadata = [:]
                    if let sessionId { metadata["pcast.session"] = .string(sessionId) }
                    if let streamId { metadata["pcast.stream"] = .string(streamId) }
                    if let sessionId, let remote = connections[sessionId]?.machine.remoteAddress { metadata["pcast.remote"] = .string(remote) }
                    logger.log(level: level, "\(message)", metadata: metadata)
                }
            }
        }
        updateGauges()
    }

    private func deliver(_ envelope: Envelope<ServerMessage>, to connection: Connection) {
        if case .failure(let failure) = envelope.message {
            metrics.refusals.increment()
            connection.logger.debug("request refused", metadata: ["pcast.status": .string(failure.status.rawValue), "pcast.reason": .string(failure.message)])
        }
        if case .dropped = connection.outbox.yield(.message(envelope)) {
            // The writer sees the stream end without a close and closes with 1008.
            connection.logger.warning("client does not read its messages; closing")
            connection.outbox.finish()
        }
    }

    private func updateGauges() {
        metrics.update(sessions: registry.sessionCount, streams: registry.streamCount, subscribers: registry.subscriberCount)
    }

    /// A random, unguessable id such as `stream-4f0c…` (128 bits).
    static func makeId(_ prefix: String) -> String {
        var generator = SystemRandomNumberGenerator()
        let high = generator.next() as UInt64
        let low = generator.next() as UInt64
        let hex = String(high, radix: 16).leftPadded(to: 16) + String(low, radix: 16).leftPadded(to: 16)
        return "\(prefix)-\(hex)"
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
