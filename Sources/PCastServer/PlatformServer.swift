import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import PCastContracts
import PCastTLS
import PCastProtocol
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Why the platform server could not start.
///
/// ```swift
/// do { _ = try await PlatformServer.start(configuration: c, relay: r) } catch { print(error) }
/// ```
public enum PlatformServerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The HTTP listener could not be bound (address in use, bad host…).
    case cannotListen(host: String, port: Int, reason: String)
    case invalidConfiguration(ConfigurationError)
    /// The data directory could not be created.
    case dataDirectory(path: String, reason: String)
    /// The room database could not be opened or read.
    case storage(RoomStoreError)
    /// A media service (the RTMP push endpoint…) could not start.
    case mediaService(MediaServiceError)
    /// The TLS certificate or key could not be used.
    case tls(TLSSetupError)

    public var description: String {
        switch self {
        case .cannotListen(let host, let port, let reason): return "cannot listen on \(host):\(port): \(reason)"
        case .invalidConfiguration(let error): return error.description
        case .dataDirectory(let path, let reason): return "cannot create data directory \(path): \(reason)"
        case .storage(let error): return "room database: \(error)"
        case .mediaService(let error): return error.description
        case .tls(let error): return error.description
        }
    }
}

/// The platform's signaling server: Hummingbird HTTP with a WebSocket upgrade at `/ws`.
///
/// Routes:
/// - `GET /ws`: WebSocket carrying ``SignalingCodec`` text frames (binary frames are read the
///   same way). permessage-deflate is accepted. A message over
///   ``PlatformConfiguration/messageSizeLimit`` (as sent, or once inflated) closes the
///   connection with 1009; a malformed one gets a typed error reply and the connection stays.
/// - `GET /healthz`: 200 while the server runs.
/// - `GET /readyz`: 200 when the server accepts sessions and the relay has its media port, else 503.
/// - `GET /metrics`: Prometheus text (see ``PlatformMetrics``).
/// - `POST /backend/auth`, `POST /backend/stream`: the sample application backend (see
///   ``SampleBackend``), when a backend policy is given.
/// - `POST /admin/streams/{streamId}/end`: HTTP Basic `applicationId:secret` (or a token with the
///   `admin` capability, as on every admin route); ends the stream as `censored` with the optional
///   JSON body's `description`. 200, 401, 404 or 400. In a cluster, a stream of another node is
///   ended by that node. Written to the audit log, done or failed.
/// - `GET /admin/nodes`: this node's id and the cluster's live nodes.
/// - `GET /admin/api/streams`: the streams this node has (``StreamSummary``: publisher and its
///   kind, tracks with codecs and simulcast layers, tags, quality, viewers by kind), oldest first.
/// - `GET /admin/api/audit?limit=N`: the audit log (``AuditEntry``), newest first (100 by
///   default, 1,000 at most): admin actions, and admin requests refused for want of credentials
///   (20 per 10 s at most; the rest counted on the next one), with who, from where and what; kept
///   in the platform's store, so every node of a cluster lists every node's.
/// - `POST /cluster/…`: in a cluster, the node-to-node channel (see `ClusterRoutes`): only
///   requests signed with the cluster's key are answered.
///
/// The server is the control plane: it drives the relay through ``RelayControl`` and the media
/// services (ingest, RTMP push, recording) through ``MediaServices``, and links neither. Without
/// media services it refuses `publish-remote` and recording publishes (`not-supported`).
///
/// In process (tests, the embedded default):
/// ```swift
/// let server = try await PlatformServer.start(configuration: configuration, relay: relay, services: services)
/// print(server.httpPort)          // the bound port, also when configured as 0
/// await server.shutdown()
/// ```
/// As a server (`pcast serve`), until SIGINT/SIGTERM:
/// ```swift
/// try await PlatformServer.run(configuration: configuration, relay: relay, logger: logger)
/// ```
public final class PlatformServer: Sendable {
    /// The port HTTP and WebSocket listen on.
    public let httpPort: Int
    /// The host they listen on.
    public let host: String
    /// The relay's UDP media port.
    public let mediaPort: UInt16
    /// Whether HTTP and WebSocket speak TLS (``PlatformConfiguration/tls``).
    public var usesTLS: Bool { reloader != nil }
    /// The plain-HTTP port that redirects to HTTPS, when configured (the bound one when asked for 0).
    public let httpRedirectPort: Int?
    /// `ws://host:port/ws`, or `wss://` with TLS.
    public var signalingURL: String { "\(usesTLS ? "wss" : "ws")://\(Self.urlHost(host)):\(httpPort)/ws" }
    /// `http://host:port`, or `https://` with TLS.
    public var httpURL: String { "\(usesTLS ? "https" : "http")://\(Self.urlHost(host)):\(httpPort)" }

    public let metrics: PlatformMetrics
    let platform: Platform
    private let serviceGroup: ServiceGroup
    private let runTask: Task<Void, any Error>
    private let reloader: CertificateReloader?

    private init(httpPort: Int, host: String, mediaPort: UInt16, metrics: PlatformMetrics, platform: Platform,
                 serviceGroup: ServiceGroup, runTask: Task<Void, any Error>, reloader: CertificateReloader?, httpRedirectPort: Int?) {
        self.httpPort = httpPort
        self.host = host
        self.mediaPort = mediaPort
        self.reloader = reloader
        self.httpRedirectPort = httpRedirectPort
        self.metrics = metrics
        self.platform = platform
        self.serviceGroup = serviceGroup
        self.runTask = runTask
    }

    /// Starts the server in this process and returns once it listens and its media services
    /// started. Creates the data directory if it is missing.
    ///
    /// - Parameters:
    ///   - services: ingest, RTMP push and recording; nil: none (see above).
    ///   - clock: the time sessions and tokens are judged by (tests pass their own).
    ///   - tickInterval: how often keep-alive deadlines are checked.
    public static func start(
        configuration: PlatformConfiguration,
        relay: any RelayControl,
        services: (any MediaServices)? = nil,
        logger: Logger = Logger(label: "pcast.server"),
        clock: @escaping @Sendable () -> Date = { Date() },
        tickInterval: Duration = .seconds(1),
        backendPolicy: (any BackendPolicy)? = nil
    ) async throws(PlatformServerError) -> PlatformServer {
        let parts = try await build(configuration: configuration, relay: relay, services: services, logger: logger, clock: clock,
                              tickInterval: tickInterval, signals: [], backendPolicy: backendPolicy)
        let serviceGroup = parts.serviceGroup
        let bound = parts.bound
        let runTask = Task {
            do {
                try await serviceGroup.run()
                bound.finish()
            } catch {
                bound.finish()
                throw error
            }
        }
        var port: Int?
        for await value in parts.ports {
            port = value
            break
        }
        guard let port else {
            let reason: String
            do {
                try await runTask.value
                reason = "the server stopped before listening"
            } catch {
                reason = "\(error)"
            }
            throw .cannotListen(host: configuration.host, port: configuration.httpPort, reason: reason)
        }
        var redirectPort: Int?
        if configuration.httpRedirectPort != nil {
            for await value in parts.redirectPorts {
                redirectPort = value
                break
            }
        }
        logger.info("platform listening", metadata: ["pcast.http": "\(configuration.host):\(port)", "pcast.media": "\(relay.mediaPort)",
                                                     "pcast.tls": "\(configuration.tls != nil)"])
        await parts.platform.joinCluster(httpPort: port)
        do throws(MediaServiceError) {
            try await parts.platform.listening(at: localEndpoint(configuration, port: port))
        } catch {
            await serviceGroup.triggerGracefulShutdown()
            _ = try? await runTask.value
            throw .mediaService(error)
        }
        return PlatformServer(
            httpPort: port, host: configuration.host, mediaPort: relay.mediaPort, metrics: parts.metrics,
            platform: parts.platform, serviceGroup: serviceGroup, runTask: runTask, reloader: parts.reloader, httpRedirectPort: redirectPort)
    }

    /// Runs the server until SIGINT or SIGTERM, then shuts down gracefully: streams end as
    /// `maintenance`, sessions close with 1001, the listener closes. With TLS, SIGHUP reads the
    /// certificate and key again (see ``reloadCertificates()``).
    public static func run(
        configuration: PlatformConfiguration,
        relay: any RelayControl,
        services: (any MediaServices)? = nil,
        logger: Logger = Logger(label: "pcast.server"),
        backendPolicy: (any BackendPolicy)? = nil,
        onListening: @escaping @Sendable (_ httpPort: Int) -> Void = { _ in }
    ) async throws {
        let parts = try await build(
            configuration: configuration, relay: relay, services: services, logger: logger, clock: { Date() }, tickInterval: .seconds(1),
            signals: [.sigterm, .sigint], backendPolicy: backendPolicy, reloadsOnHangUp: true)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await port in parts.ports {
                    logger.info("platform listening", metadata: ["pcast.http": "\(configuration.host):\(port)", "pcast.media": "\(relay.mediaPort)",
                                                                 "pcast.tls": "\(configuration.tls != nil)"])
                    await parts.platform.joinCluster(httpPort: port)
                    do throws(MediaServiceError) {
                        try await parts.platform.listening(at: localEndpoint(configuration, port: port))
                    } catch {
                        logger.error("\(error)")
                        await parts.serviceGroup.triggerGracefulShutdown()
                        throw PlatformServerError.mediaService(error)
                    }
                    onListening(port)
                    break
                }
            }
            group.addTask {
                defer { parts.bound.finish() }
                try await parts.serviceGroup.run()
            }
            try await group.waitForAll()
        }
    }

    /// Where a client in this process reaches signaling: the listening host, or loopback when the
    /// server listens on every address; over TLS, with the certificate's files to trust.
    static func localEndpoint(_ configuration: PlatformConfiguration, port: Int) -> PlatformEndpoint {
        let host = configuration.host
        let local = host == "0.0.0.0" || host.isEmpty ? "127.0.0.1" : host == "::" ? "::1" : host
        let scheme = configuration.tls == nil ? "ws" : "wss"
        return PlatformEndpoint(signalingURL: "\(scheme)://\(urlHost(local)):\(port)/ws", tls: configuration.tls)
    }

    /// Reads the TLS certificate and key again (HTTPS/WSS, and RTMPS in the media services):
    /// connections accepted from now on are served the new certificate, open ones keep theirs. A
    /// failure keeps the certificate in use. Does nothing without TLS.
    public func reloadCertificates() throws(TLSSetupError) {
        try reloader?.reload()
    }

    /// Ends every stream as `maintenance`, closes every session (1001) and stops listening.
    /// Returns once the server has stopped.
    public func shutdown() async {
        await serviceGroup.triggerGracefulShutdown()
        _ = try? await runTask.value
    }

    /// Streams published now (including those of sessions waiting to resume).
    public var streamCount: Int {
        get async { await platform.streamCount }
    }

    /// Runs the platform's periodic work now, as its ticks do (for tests that move their own clock
    /// and keep the ticks apart).
    package func tick() async {
        await platform.tick()
    }

    /// Ends a stream as the operator would (what the admin route does).
    /// False when there is no such stream.
    public func endStream(_ streamId: String, reason: StreamEndedReason = .censored, description: String? = nil) async -> Bool {
        await platform.endStream(streamId, reason: reason, description: description)
    }

    // MARK: Assembly

    private struct Parts: Sendable {
        let serviceGroup: ServiceGroup
        let platform: Platform
        let metrics: PlatformMetrics
        let ports: AsyncStream<Int>
        let bound: AsyncStream<Int>.Continuation
        let redirectPorts: AsyncStream<Int>
        let reloader: CertificateReloader?
    }

    private static func build(
        configuration: PlatformConfiguration, relay: any RelayControl, services: (any MediaServices)?, logger: Logger,
        clock: @escaping @Sendable () -> Date, tickInterval: Duration, signals: [UnixSignal], backendPolicy: (any BackendPolicy)?,
        reloadsOnHangUp: Bool = false
    ) async throws(PlatformServerError) -> Parts {
        do {
            try configuration.validate()
        } catch {
            throw .invalidConfiguration(error)
        }
        // The certificate is read before anything else starts: a wrong path fails the start.
        let tls: TLSCertificateStore?
        do throws(TLSSetupError) {
            tls = try configuration.tls.map { files throws(TLSSetupError) in try TLSCertificateStore(files: files) }
        } catch {
            throw .tls(error)
        }
        do {
            try FileManager.default.createDirectory(atPath: configuration.dataDirectory, withIntermediateDirectories: true)
        } catch {
            throw .dataDirectory(path: configuration.dataDirectory, reason: error.localizedDescription)
        }
        let store: any PlatformStore
        let snapshot: RoomStoreSnapshot
        var cluster: Platform.ClusterMembership?
        do throws(RoomStoreError) {
            store = try await PlatformStores.open(configuration.storeLocation, logger: logger)
            do throws(RoomStoreError) {
                if let shared = store as? PostgresPlatformStore {
                    // A store other nodes share: a chat slot of this node's own, and the change log
                    // followed from before the snapshot (a change in between is applied twice, harmlessly).
                    let record = NodeRecord(nodeId: configuration.nodeId, signalingURL: "", relayAddress: "",
                                            startedAt: Int64((clock().timeIntervalSince1970 * 1000).rounded()))
                    let slot = try await shared.claimSlot(for: record, within: configuration.nodeExpiry)
                    let start = try await shared.latestChangeId()
                    shared.publishChanges(as: configuration.nodeId)
                    cluster = .init(store: shared, nodeId: configuration.nodeId, slot: slot, startChangeId: start)
                    logger.info("joined the cluster", metadata: ["pcast.node": .string(configuration.nodeId), "pcast.slot": "\(slot)",
                                                                 "pcast.database": .string(shared.location)])
                }
                snapshot = try await store.load()
            } catch {
                await store.close()
                throw error
            }
        } catch {
            throw .storage(error)
        }
        let metrics = PlatformMetrics()
        if let tls { metrics.tlsCertificate(notValidAfter: tls.notValidAfter) }
        let platform = Platform(configuration: configuration, relay: relay, services: services, metrics: metrics, clock: clock,
                                logger: logger, store: store, snapshot: snapshot, cluster: cluster)
        relay.onWatchedLayersGrew { [weak platform] in
            guard let platform else { return }
            Task { await platform.wakeWatchedLayers() }
        }
        let (ports, bound) = AsyncStream<Int>.makeStream(bufferingPolicy: .bufferingNewest(1))

        let router = Router(context: PlatformRequestContext.self)
        let backend = backendPolicy.map { SampleBackend(applicationId: configuration.applicationId, secret: configuration.secret, policy: $0) }
        HTTPRoutes(platform: platform, configuration: configuration, relay: relay, metrics: metrics, backend: backend).register(on: router)
        WebRTCRoutes(platform: platform, iceServers: configuration.iceServers, turn: configuration.turn, clock: clock).register(on: router)
        HLSRoutes(platform: platform, tokens: configuration.tokenAuthority,
                  admin: AdminCredentials(applicationId: configuration.applicationId, secret: configuration.secret)).register(on: router)
        if let channel = platform.channel {
            ClusterRoutes(platform: platform, channel: channel).register(on: router)
        }

        let limit = configuration.messageSizeLimit
        let webSocket = WebSocketServerConfiguration(
            maxFrameSize: limit,
            extensions: [SizeLimitedDeflate.factory(limit: limit)],
            // Liveness is the signaling keep-alive (SessionStateMachine), not WebSocket pings.
            autoPing: .disabled,
            closeTimeout: .seconds(5),
            validateUTF8: true)
        let signaling = SignalingConnection(platform: platform, sizeLimit: limit)
        let limits = configuration.connectionLimits
        let connections = ActiveConnections()
        let refused = RefusedChannels()
        let boundPort = BoundPort(configuration.httpPort)
        let head = limits.maximumHeadBytes
        let http1 = HTTP1Channel.Configuration(
            idleTimeout: .seconds(60),
            httpDecoderConfiguration: .init(maxHeaderFieldSize: head, maxHeaderListSize: head, maxHeaderFieldCount: 200))
        let shouldUpgrade: @Sendable (HTTPRequest, any Channel, Logger) async throws -> ShouldUpgradeResult<WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>> = { request, channel, _ in
            guard request.path?.split(separator: "?", maxSplits: 1).first == "/ws" else { return .dontUpgrade }
            let remoteAddress = channel.remoteAddress?.ipAddress
            return .upgrade([:]) { inbound, outbound, _ in
                try await signaling.run(inbound: inbound, outbound: outbound, remoteAddress: remoteAddress)
            }
        }
        // Every connection passes the guard first (caps per address and in all, the request-head
        // deadline and size, masked WebSocket frames): see ConnectionGuardHandler.
        let server = HTTPServerBuilder { responder in
            GuardedChildChannel(
                inner: HTTP1WebSocketUpgradeChannel(responder: responder, configuration: .init(http1: http1, ws: webSocket), shouldUpgrade: shouldUpgrade),
                connections: connections, limits: limits, logger: logger, refused: refused, tls: tls)
        }
        let application = Application(
            router: router,
            server: server,
            configuration: .init(address: .hostname(configuration.host, port: configuration.httpPort), serverName: "pcast"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? configuration.httpPort
                boundPort.set(port)
                bound.yield(port)
            },
            logger: logger)
        var running: [any Service] = [application]
        let (redirectPorts, redirectBound) = AsyncStream<Int>.makeStream(bufferingPolicy: .bufferingNewest(1))
        if let redirectPort = configuration.httpRedirectPort {
            running.append(HTTPSRedirect.application(host: configuration.host, port: redirectPort, httpsPort: { boundPort.port },
                                                      limits: limits, connections: connections, logger: logger) { port in
                redirectBound.yield(port)
            })
        } else {
            redirectBound.finish()
        }
        let reloader = tls.map { CertificateReloader(store: $0, services: services, metrics: metrics) }
        if let reloader, reloadsOnHangUp {
            running.append(CertificateReloadService(reloader: reloader, logger: logger))
        }
        running.append(PlatformService(platform: platform, tickInterval: tickInterval))
        // Services shut down in reverse order: the platform first (streams end as maintenance,
        // sessions close), then the HTTP server.
        var groupConfiguration = ServiceGroupConfiguration(
            services: running, gracefulShutdownSignals: signals, logger: logger)
        groupConfiguration.maximumGracefulShutdownDuration = .seconds(15)
        return Parts(serviceGroup: ServiceGroup(configuration: groupConfiguration), platform: platform, metrics: metrics, ports: ports, bound: bound,
                     redirectPorts: redirectPorts, reloader: reloader)
    }

    private static func urlHost(_ host: String) -> String {
        host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
    }
}

/// Ticks keep-alive deadlines until graceful shutdown, then shuts the platform down and waits
/// (a few seconds at most) for every connection to have sent its close frame, so that the HTTP
/// server's own shutdown (which closes WebSockets with 1000) does not overtake the 1001s.
struct PlatformService: Service {
    let platform: Platform
    let tickInterval: Duration
    static let drainDeadline: Duration = .seconds(5)
    static let heartbeatInterval: Duration = .seconds(1)

    func run() async throws {
        let platform = self.platform
        let interval = tickInterval
        try? await cancelWhenGracefulShutdown {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    while !Task.isCancelled {
                        try await Task.sleep(for: interval)
                        await platform.tick()
                    }
                }
                // Membership: a heartbeat a second, apart from the ticks (a slow database must not delay
                // them), with a read of the change log as a safety net, and pruning now and then.
                group.addTask {
                    var beats = 0
                    while !Task.isCancelled {
                        try await Task.sleep(for: Self.heartbeatInterval)
                        await platform.heartbeat()
                        await platform.catchUpChanges()
                        beats += 1
                        if beats % 60 == 0 { await platform.pruneChanges() }
                    }
                }
                // Other nodes' changes, as they are notified.
                if let signals = platform.listenForChanges() {
                    group.addTask {
                        for await _ in signals { await platform.catchUpChanges() }
                    }
                }
                try await group.waitForAll()
            }
        }
        // Streams end as `maintenance` and that reaches the store before the node leaves the
        // membership: other nodes tell their viewers why, rather than `failed` for a node gone.
        await platform.shutdownServices()
        await platform.shutdown()
        await platform.flushStore()
        await platform.drainNotifications(within: .seconds(5))
        await platform.leaveCluster()
        await platform.closeStore()
        let clock = ContinuousClock()
        let end = clock.now.advanced(by: Self.drainDeadline)
        while await platform.connectionCount > 0, clock.now < end {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}
