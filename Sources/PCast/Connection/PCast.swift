import Foundation
import GStreamer
public import Logging
public import PCastMedia
public import PCastProtocol
import Synchronization

/// The low-level PCast API: connect and authenticate, publish local media, subscribe to streams.
///
/// ```swift
/// let pcast = PCast(PCastOptions(uri: "ws://127.0.0.1:8080/ws"))
/// let sessionId = try await pcast.start(authToken: authToken)
/// let media = try await pcast.getUserMedia(options)
/// let publisher = try await pcast.publish(streamToken: publishToken, mediaStream: media, tags: ["demo"])
/// let remote = try await pcast.subscribe(streamToken: streamToken)
/// _ = await remote.createRenderer().start()
/// ```
public final class PCast: Sendable {
    public let options: PCastOptions
    /// Whether UDP reaches each relay (``PCastOptions/mediaTransport``).
    let pathProbe = MediaPathProbe()
    let logger: Logger
    let logs = LogRing(capacity: 2000)

    struct State {
        var signaling: SignalingClient?
        /// The connection's lifecycle (idle, connecting, online, reconnecting, stopped).
        var machine: ConnectionStateMachine
        var authToken: String?
        /// Which of ``PCastOptions/uri`` and its fallbacks is in use.
        var uriIndex = 0
        var keepAlive: Task<Void, Never>?
        /// The scheduled retry while reconnecting.
        var reconnect: Task<Void, Never>?
        var publishers: [String: Publisher] = [:]
        /// By ``Subscription/key`` (a session may subscribe to one stream more than once).
        var subscriptions: [String: Subscription] = [:]
        /// Streams played as HLS (they have no subscription on the platform), stopped with the session.
        var streamingStreams: [ObjectIdentifier: MediaStream] = [:]
        var authenticationCallback: (@Sendable (RequestStatus, String?) -> Void)?
        /// Asked for a new auth token when re-authentication is refused.
        var tokenProvider: (@Sendable () async throws -> String)?
        var onlineCallback: (@Sendable () -> Void)?
        var offlineCallback: (@Sendable () -> Void)?
        /// Unpublish / unsubscribe requests made while offline, sent once the session resumes.
        var afterResume: [ClientMessage] = []
        var nextListener = 0
        var eventListeners: [Int: @Sendable (ServerMessage) -> Void] = [:]
        var authenticationListeners: [Int: @Sendable (_ sessionId: String, _ resumed: Bool) -> Void] = [:]
    }
    let state: Mutex<State>

    /// The PCast iOS SDK's initialize. `logHandler` makes a swift-log handler for each of the SDK's logger
    /// labels (`pcast.sdk`, `pcast.capture`, `pcast.renderer`, `gstreamer`, …): the application's
    /// own destination for the SDK's messages, besides the console (see
    /// ``PCastOptions/consoleLogLevel``).
    public init(_ options: PCastOptions, logHandler: (@Sendable (_ label: String) -> any LogHandler)? = nil) {
        self.options = options
        state = Mutex(State(machine: ConnectionStateMachine(reconnects: options.reconnects)))
        try? GStreamerRuntime.initialize()
        SDKLog.configure(enabled: options.configureLogging, consoleLevel: options.consoleLogLevel, makeHandler: logHandler)
        let ring = logs
        logger = Logger(label: "pcast.sdk") { label in
            MultiplexLogHandler([ring.handler(label: label), SDKLogHandler(label: label)])
        }
        if options.enableProcessTerminationSignalHandling { TerminationSignals.shared.register(self) }
    }

    deinit {
        if options.enableProcessTerminationSignalHandling { TerminationSignals.shared.unregister(ObjectIdentifier(self)) }
    }

    /// The session id, while online (nil while it reconnects).
    public var sessionId: String? { state.withLock { $0.machine.sessionId } }

    /// Whether the session is online: authenticated on a connection that has not closed (the
    /// connection state machine's word, the one source of it).
    public var isOnline: Bool { state.withLock { $0.machine.isOnline } }

    /// The SDK's recent log messages, oldest first.
    public func collectLogMessages() -> [String] { logs.messages }

    // MARK: Start and stop

    /// Connects and authenticates; returns the session id.
    ///
    /// - Throws: ``PCastError/refused(_:_:)`` with `unauthorized` for a bad token.
    @discardableResult
    public func start(authToken: String) async throws(PCastError) -> String {
        let (actions, sessionId) = state.withLock { state in
            state.authToken = authToken
            return (state.machine.handle(.start), state.machine.sessionId)
        }
        guard actions == [.connect(resume: nil)] else {
            if let sessionId { return sessionId }
            throw .invalidRequest("the session is already starting")
        }
        do {
            return try await connect(resume: nil)
        } catch {
            perform(state.withLock { $0.machine.handle(Self.failure(error)) })
            throw error
        }
    }

    /// The machine's event for a failed connection attempt.
    private static func failure(_ error: PCastError) -> ConnectionStateMachine.Event {
        let reason: String
        reason = error.code == .refused ? error.detail : error.description
        return .connectFailed(status: error.status, reason: reason, now: .now, jitter: Double.random(in: 0...1))
    }

    /// The PCast iOS SDK's callback form. `authenticationCallback(status, sessionId)` is called after each
    /// (re)authentication; `online` and `offline` follow the connection.
    public func start(authToken: String,
                      authenticationCallback: @escaping @Sendable (RequestStatus, String?) -> Void,
                      onlineCallback: @escaping @Sendable () -> Void = {},
                      offlineCallback: @escaping @Sendable () -> Void = {}) {
        state.withLock {
            $0.authenticationCallback = authenticationCallback
            $0.onlineCallback = onlineCallback
            $0.offlineCallback = offlineCallback
        }
        Task { _ = try? await self.start(authToken: authToken) }
    }

    /// ``PCastOptions/uri`` and the fallbacks, in the order they are tried.
    private var platformURIs: [String] { [options.uri] + options.fallbackURIs }

    /// The node this client talks to now.
    var currentURI: String {
        let uris = platformURIs
        return uris[state.withLock { $0.uriIndex } % uris.count]
    }

    /// Connects to the current node; when it cannot be reached, to the next ones in turn (each
    /// once). A node that answers and refuses is not skipped.
    private func connect(resume: ConnectionStateMachine.Resume?) async throws(PCastError) -> String {
        let count = platformURIs.count
        var attempt = 0
        while true {
            do throws(PCastError) {
                return try await connectToCurrent(resume: attempt == 0 ? resume : nil)
            } catch where error.code == .connectionFailed && attempt + 1 < count {
                attempt += 1
                let next = state.withLock { state in
                    state.uriIndex = (state.uriIndex + 1) % count
                    return state.uriIndex
                }
                logger.warning("platform node unreachable; trying another", metadata: ["reason": "\(error.detail)", "next": "\(platformURIs[next])"])
            }
        }
    }

    /// Opens a connection to the current node and authenticates (resuming `resume`), then tells the machine.
    private func connectToCurrent(resume: ConnectionStateMachine.Resume?) async throws(PCastError) -> String {
        let uri = currentURI
        guard let url = URL(string: uri) else { throw .invalidURI(uri) }
        // Only the session's current connection closing means offline: a connection whose
        // authentication failed (a bad token at start) or one already replaced must not start a
        // reconnection, which could later resume the session behind the current connection's back.
        let closing = ClosingConnection()
        let trust = SignalingTrust(options)
        let client = try await SignalingClient.connect(to: url, trust: trust, logger: logger,
            onEvent: { [weak self] event in self?.handle(event) },
            onClose: { [weak self] code in self?.connectionClosed(code, client: closing.client) })
        closing.client = client
        guard let token = state.withLock({ $0.authToken }) else { throw .notStarted }
        let reply: ServerMessage
        do {
            reply = try await client.request(.authenticate(.init(token: token, sessionId: resume?.sessionId, resumeKey: resume?.key)))
        } catch {
            await client.close()
            throw error
        }
        guard case .authenticated(let authenticated) = reply else {
            await client.close()
            throw .invalidRequest("unexpected reply to authenticate: \(reply.type)")
        }
        let interval = max(1, authenticated.keepAliveInterval)
        let logger = self.logger
        let keepAlive = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(interval))
                guard self != nil, !Task.isCancelled else { return }
                // An unanswered keep-alive means a dead path (TCP may take minutes to notice).
                do throws(PCastError) {
                    // Generous: a busy machine can stall a few seconds, and a live path must not
                    // be dropped for it (the platform itself waits three intervals).
                    _ = try await client.request(.keepAlive, timeout: .seconds(max(5, 2 * interval)))
                } catch {
                    if error.code == .timeout {
                        logger.warning("keep-alive unanswered; dropping the connection")
                        client.abort()
                    }
                    return
                }
            }
        }
        let resumed = authenticated.resumed ?? false
        let installed: (actions: [ConnectionStateMachine.Action], orphans: ([Publisher], [Subscription]))? = state.withLock { state in
            // Stopped meanwhile: this connection is not the session's.
            guard !state.machine.isStopped else { return nil }
            state.signaling = client
            state.keepAlive?.cancel()
            state.keepAlive = keepAlive
            // A new session (the old one could not be resumed) no longer has the old streams; a
            // resumed one keeps those the platform still has (after a crash it has none).
            // Its publishers end; its subscriptions follow to this session (subscribed again:
            // a stream that lives on another node than the lost one goes on playing).
            let kept: Set<String>? = resumed ? authenticated.streams.map(Set.init) : []
            func orphaned(_ streamId: String) -> Bool { kept.map { !$0.contains(streamId) } ?? false }
            let publishers = state.publishers.filter { orphaned($0.key) }
            for key in publishers.keys { state.publishers[key] = nil }
            let orphans = (Array(publishers.values), state.subscriptions.values.filter { orphaned($0.streamId) })
            return (state.machine.handle(.authenticated(sessionId: authenticated.sessionId, resumeKey: authenticated.resumeKey)), orphans)
        }
        guard let (actions, orphans) = installed else {
            keepAlive.cancel()
            await client.close()
            throw .notStarted
        }
        let deferred = state.withLock { state in defer { state.afterResume = [] }; return state.afterResume }
        if resumed, !deferred.isEmpty {
            Task {
                for message in deferred { _ = try? await client.request(message, timeout: .seconds(3)) }
            }
        }
        logger.info(resumed ? "session resumed" : "authenticated", metadata: ["session": "\(authenticated.sessionId)"])
        for publisher in orphans.0 { publisher.finish(.failed, "the session could not be resumed") }
        perform(actions, resumed: resumed)
        if !orphans.1.isEmpty {
            Task {
                await withTaskGroup(of: Void.self) { group in
                    for subscription in orphans.1 { group.addTask { await self.follow(subscription, on: client) } }
                }
            }
        }
        return authenticated.sessionId
    }

    private func connectionClosed(_ code: UInt16?, client: SignalingClient?) {
        let actions = state.withLock { state -> [ConnectionStateMachine.Action]? in
            guard let client, state.signaling === client else { return nil }
            state.keepAlive?.cancel()
            state.keepAlive = nil
            state.signaling = nil
            // Reconnecting resumes the session with its streams; otherwise they end.
            return state.machine.handle(.connectionClosed(now: .now, jitter: Double.random(in: 0...1)))
        }
        guard let actions else {
            logger.debug("a connection that was not the session's closed", metadata: ["code": "\(code.map(String.init) ?? "none")"])
            return
        }
        logger.warning("signaling connection closed", metadata: ["code": "\(code.map(String.init) ?? "none")"])
        perform(actions)
    }

    /// Does what the connection machine decided. `resumed`: the authentication just handled
    /// resumed the session (for the authentication listeners).
    private func perform(_ actions: [ConnectionStateMachine.Action], resumed: Bool = false) {
        for action in actions {
            switch action {
            case .connect(let resume):
                Task { await self.retry(resume) }
            case .scheduleRetry(let delay):
                let task = Task { [weak self] in
                    try? await Task.sleep(for: delay)
                    guard let self, !Task.isCancelled else { return }
                    self.perform(self.state.withLock { $0.machine.handle(.retryDue) })
                }
                state.withLock { $0.reconnect?.cancel(); $0.reconnect = task }
            case .cancelRetry:
                state.withLock { $0.reconnect?.cancel(); $0.reconnect = nil }
            case .notifyOnline(let sessionId):
                let (online, listeners) = state.withLock { ($0.onlineCallback, $0.authenticationListeners.sorted { $0.key < $1.key }.map(\.value)) }
                online?()
                for listener in listeners { listener(sessionId, resumed) }
            case .notifyOffline:
                state.withLock { $0.offlineCallback }?()
            case .notifyAuthentication(let status, let sessionId):
                state.withLock { $0.authenticationCallback }?(status, sessionId)
            case .endStreams(let reason):
                let (publishers, subscriptions) = state.withLock { state in
                    defer { state.publishers = [:]; state.subscriptions = [:] }
                    return (Array(state.publishers.values), Array(state.subscriptions.values))
                }
                for publisher in publishers { publisher.finish(.failed, reason) }
                for subscription in subscriptions { subscription.finish(.failed, reason) }
            case .refreshToken(let reason):
                guard let provider = state.withLock({ $0.tokenProvider }) else {
                    perform(state.withLock { $0.machine.handle(.tokenRefreshFailed(reason: reason)) })
                    continue
                }
                logger.notice("re-authentication refused; asking for a new auth token", metadata: ["reason": "\(reason)"])
                Task {
                    let event: ConnectionStateMachine.Event
                    do {
                        let token = try await provider()
                        event = self.state.withLock { state in
                            state.authToken = token
                            return .tokenRefreshed
                        }
                    } catch {
                        self.logger.warning("no new auth token", metadata: ["error": "\(error)"])
                        event = .tokenRefreshFailed(reason: "\(reason); no new auth token: \(error)")
                    }
                    self.perform(self.state.withLock { $0.machine.handle(event) })
                }
            }
        }
    }

    /// Where a new auth token comes from when the platform refuses the session's token on
    /// reconnecting (it expired during an outage, or was revoked): called once per outage; with
    /// the new token the session resumes, streams and all. Without a provider, or when it throws
    /// or its token is refused too, the session ends as before (streams end as `failed`, the
    /// authentication callback hears `unauthorized`). ``PCastExpress`` sets one that asks its
    /// backend.
    ///
    /// ```swift
    /// pcast.setAuthenticationTokenProvider { try await myBackend.fetchAuthToken() }
    /// ```
    public func setAuthenticationTokenProvider(_ provider: (@Sendable () async throws -> String)?) {
        state.withLock { $0.tokenProvider = provider }
    }

    /// One reconnection attempt.
    private func retry(_ resume: ConnectionStateMachine.Resume?) async {
        do throws(PCastError) {
            _ = try await connect(resume: resume)
        } catch {
            if error.code == .refused, error.status == .unauthorized {
                logger.warning("re-authentication refused", metadata: ["reason": "\(error.detail)"])
            }
            perform(state.withLock { $0.machine.handle(Self.failure(error)) })
        }
    }

    /// Ends the session: published and subscribed streams end, the connection closes.
    public func stop() async {
        await stop(description: nil)
    }

    /// On a termination signal (see ``PCastOptions/enableProcessTerminationSignalHandling``): ends
    /// the session, its published streams with `description`.
    func terminate(description: String) async {
        logger.notice("ending the session's streams: \(description)")
        await stop(description: description)
    }

    private func stop(description: String?) async {
        let (actions, client, publishers, subscriptions) = state.withLock { state in
            state.afterResume = []
            state.keepAlive?.cancel()
            defer { state.publishers = [:]; state.subscriptions = [:]; state.signaling = nil }
            return (state.machine.handle(.stop), state.signaling, Array(state.publishers.values), Array(state.subscriptions.values))
        }
        perform(actions)
        // Through the connection being closed (taken from the state above, so a publisher's own
        // stop would find none): viewers hear why the streams ended before the session goes.
        for publisher in publishers where !publisher.hasEnded {
            if let client {
                _ = try? await client.request(.unpublish(.init(streamId: publisher.streamId, reason: .ended, description: description)),
                                              timeout: .seconds(2))
            }
            publisher.finish(.ended, description)
        }
        for subscription in subscriptions { await subscription.stream.stop() }
        let streaming = state.withLock { state in defer { state.streamingStreams = [:] }; return Array(state.streamingStreams.values) }
        for stream in streaming { await stream.stop() }
        if let client {
            _ = try? await client.request(.bye, timeout: .seconds(2))
            await client.close()
        }
    }

    /// Stops and releases everything (the PCast iOS SDK's shutdown, when the app exits).
    public func shutdown() async {
        await stop()
    }

    // MARK: Events

    private func handle(_ event: ServerMessage) {
        let listeners = state.withLock { $0.eventListeners.sorted { $0.key < $1.key }.map(\.value) }
        for listener in listeners { listener(event) }
        if case .bandwidthLimit(let limit) = event {
            let publisher = state.withLock { $0.publishers[limit.streamId] }
            (publisher?.rtp as? RTPPublisher)?.limitVideoBitrateForViewers(limit.bitsPerSecond)
            logger.info("viewers' bandwidth limit", metadata: ["stream": "\(limit.streamId)", "bps": "\(limit.bitsPerSecond.map(String.init) ?? "none")"])
            return
        }
        if case .layerActivity(let activity) = event {
            let publisher = state.withLock { $0.publishers[activity.streamId] }
            (publisher?.rtp as? RTPPublisher)?.setActiveLayers(Set(activity.active))
            logger.info("simulcast layers encoded", metadata: ["stream": "\(activity.streamId)", "layers": "\(activity.active)"])
            return
        }
        if case .publisherQuality(let quality) = event {
            let streams = state.withLock { $0.subscriptions.values.filter { $0.streamId == quality.streamId }.map(\.stream) }
            let reason: DataQualityReason = switch quality.reason {
            case .none: .none
            case .uploadLimited: .uploadLimited
            case .networkLimited: .networkLimited
            }
            for stream in streams { stream.setPublisherQuality(reason) }
            return
        }
        if case .subscriberLayer(let layer) = event {
            stream(ofSubscriber: layer.subscriberId)?.setLayerReduced(layer.reduced)
            logger.info(layer.reduced ? "the relay sends this viewer a smaller layer: its link cannot carry more" : "the relay sends this viewer the layer it asked for",
                        metadata: ["stream": "\(layer.streamId)", "layer": "\(layer.layer)"])
            return
        }
        if case .subscriberVideo(let video) = event {
            stream(ofSubscriber: video.subscriberId)?.setVideoSuspended(video.suspended)
            logger.info(video.suspended ? "the relay holds this viewer's video back: its leg cannot carry it (audio only)" : "the relay sends this viewer's video again",
                        metadata: ["stream": "\(video.streamId)", "subscriber": "\(video.subscriberId)"])
            return
        }
        guard case .streamEnded(let ended) = event else { return }
        let (publisher, subscriptions) = state.withLock { state in
            let keys = state.subscriptions.filter { $0.value.streamId == ended.streamId }.map(\.key)
            return (state.publishers.removeValue(forKey: ended.streamId), keys.compactMap { state.subscriptions.removeValue(forKey: $0) })
        }
        logger.info("stream ended", metadata: ["stream": "\(ended.streamId)", "reason": "\(ended.reason.rawValue)"])
        publisher?.finish(ended.reason, ended.description)
        for subscription in subscriptions { subscription.finish(ended.reason, ended.description) }
    }

    /// The stream of the subscription the platform knows by `subscriberId`.
    private func stream(ofSubscriber subscriberId: String) -> MediaStream? {
        state.withLock { $0.subscriptions.values.first { $0.subscriberId == subscriberId }?.stream }
    }

    /// Sees every event from the platform, in order, on the connection's reader (keep it short).
    package func addEventListener(_ listener: @escaping @Sendable (ServerMessage) -> Void) -> Disposable {
        let id = state.withLock { state in
            state.nextListener += 1
            state.eventListeners[state.nextListener] = listener
            return state.nextListener
        }
        return Disposable { [weak self] in self?.state.withLock { _ = $0.eventListeners.removeValue(forKey: id) } }
    }

    /// Called after every successful (re)authentication with the session id and whether it resumed.
    package func addAuthenticationListener(_ listener: @escaping @Sendable (_ sessionId: String, _ resumed: Bool) -> Void) -> Disposable {
        let id = state.withLock { state in
            state.nextListener += 1
            state.authenticationListeners[state.nextListener] = listener
            return state.nextListener
        }
        return Disposable { [weak self] in self?.state.withLock { _ = $0.authenticationListeners.removeValue(forKey: id) } }
    }

    /// Sends a request on the current connection. `inOrder` sees the reply in order with events.
    package func request(_ message: ClientMessage, inOrder: (@Sendable (ServerMessage) -> Void)? = nil) async throws(PCastError) -> ServerMessage {
        try await signaling().request(message, inOrder: inOrder)
    }

    /// Closes the signaling connection without `bye`, as a lost connection would (tests of
    /// failure handling); the SDK then reconnects if ``PCastOptions/reconnects`` is set.
    package func dropConnectionForTesting() async {
        state.withLock { $0.signaling }?.abort()
    }

    /// Behaves as a crashed process would: media stops and the connection drops, with no `bye`,
    /// no unpublish and no reconnection (tests of how the platform and other clients cope).
    package func crashForTesting() {
        let (actions, client, publishers, subscriptions) = state.withLock { state in
            state.keepAlive?.cancel()
            defer { state.publishers = [:]; state.subscriptions = [:] }
            return (state.machine.handle(.stop), state.signaling, Array(state.publishers.values), Array(state.subscriptions.values))
        }
        perform(actions)
        for publisher in publishers { publisher.finish(.failed, "crashed (test)") }
        for subscription in subscriptions { subscription.finish(.failed, "crashed (test)") }
        client?.abort()
    }

    func signaling() throws(PCastError) -> SignalingClient {
        let (client, stopped) = state.withLock { ($0.signaling, $0.machine.isStopped) }
        guard let client else { throw stopped ? .notStarted : .offline }
        return client
    }

    /// Sends an unpublish or unsubscribe now, or after the session resumes if the SDK is
    /// reconnecting (so the platform ends the stream with the right reason, not as a timeout).
    func requestWhenOnline(_ message: ClientMessage) async {
        let client: SignalingClient? = state.withLock { state in
            if state.signaling == nil, state.machine.isReconnecting {
                if state.afterResume.count < 1024 { state.afterResume.append(message) }
                return nil
            }
            return state.signaling
        }
        _ = try? await client?.request(message, timeout: .seconds(3))
    }

    /// Whether the SDK is reconnecting after its connection dropped.
    public var isReconnecting: Bool { state.withLock { $0.machine.isReconnecting } }

    /// Waits until the SDK is online (at once if it is) or `deadline` passes, or the SDK stops;
    /// true when online. For what must go through a connection that is being re-established:
    /// an Express publisher publishing again after its node went.
    package func waitUntilOnline(until deadline: ContinuousClock.Instant) async -> Bool {
        while !isOnline {
            guard ContinuousClock.now < deadline, !state.withLock({ $0.machine.isStopped }) else { return false }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return true
    }

    var host: String {
        URL(string: currentURI)?.host ?? "127.0.0.1"
    }

    /// Where media for `transport` goes: the signaling host and the relay's port, unless
    /// ``PCastOptions/mediaRelay`` says otherwise.
    func mediaEndpoint(_ transport: MediaTransport) -> (host: String, transport: MediaTransport) {
        guard let relay = options.mediaRelay else { return (host, transport) }
        var routed = transport
        routed.port = relay.port
        // A forwarded UDP port says nothing of TCP: the override is UDP only.
        routed.tcpPort = nil
        return (relay.host, routed)
    }

    /// How a subscribed stream's media reaches this client (UDP, or TCP and why); nil when `stream`
    /// is not one of this instance's subscriptions.
    public func mediaPath(of stream: MediaStream) -> MediaPath? {
        let subscription = state.withLock { $0.subscriptions.values.first { $0.stream === stream } }
        return subscription?.slot.value.withLock { $0?.path }
    }

    /// Where a flow's media goes and over which transport (``PCastOptions/mediaTransport``).
    func mediaRoute(_ transport: MediaTransport) async -> (host: String, transport: MediaTransport, path: MediaPath) {
        let endpoint = mediaEndpoint(transport)
        let path = await pathProbe.path(host: endpoint.host, transport: endpoint.transport, policy: options.mediaTransport)
        if path.overTCP { logger.notice("media over TCP", metadata: ["reason": "\(path.reason ?? "")"]) }
        return (endpoint.host, endpoint.transport, path)
    }

    // MARK: Media

    /// Local user media (see ``UserMedia/getUserMedia(_:)``).
    public func getUserMedia(_ options: UserMediaOptions = UserMediaOptions()) async throws(UserMediaError) -> UserMediaStream {
        try await UserMedia.getUserMedia(options)
    }

    /// The sources of `mediaType` (see ``SourceDevices``).
    public func enumerateSourceDevices(_ mediaType: MediaType) async -> [SourceDeviceInfo] {
        await UserMedia.enumerateSourceDevices(mediaType)
    }
}

/// Keeps the SDK's recent log lines for ``PCast/collectLogMessages()``.
final class LogRing: Sendable {
    private let lines = Mutex<[String]>([])
    let capacity: Int
    init(capacity: Int) { self.capacity = capacity }

    var messages: [String] { lines.withLock { $0 } }

    func append(_ line: String) {
        lines.withLock { lines in
            lines.append(line)
            if lines.count > capacity { lines.removeFirst(lines.count - capacity) }
        }
    }

    func handler(label: String) -> some LogHandler { RingHandler(ring: self, label: label) }

    struct RingHandler: LogHandler {
        let ring: LogRing
        let label: String
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .debug
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            let all = self.metadata.merging(event.metadata ?? [:]) { $1 }
            let fields = all.isEmpty ? "" : " " + all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            ring.append("\(ISO8601DateFormatter().string(from: Date())) \(event.level) \(label): \(event.message)\(fields)")
        }
    }
}

/// Which client a close callback belongs to: set right after the client exists (its callbacks are
/// given before), read when it closes.
/// Unchecked: `stored` is read and written under `lock` only.
private final class ClosingConnection: @unchecked Sendable {
    private let lock = NSLock()
    private weak var stored: SignalingClient?
    var client: SignalingClient? {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
