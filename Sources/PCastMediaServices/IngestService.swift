import Foundation
import Logging
import PCast
import PCastContracts
import PCastMedia
import PCastProtocol

/// The platform's ingest: pulls remote sources (checked by ``IngestURIPolicy``) and publishes them
/// through the platform itself, with the SDK's ``IngestPublisher`` (H.264 passed through) on a
/// session of its own. Each ingest belongs to the session that asked for it: that session gets the
/// `ingest-started` reply, progress events and the `stream-ended` event, may stop it, and its end
/// stops it.
actor IngestService: IngestControl {
    struct Running {
        /// The session that asked for it; nil for a push (its connection owns it).
        let owner: String?
        let publisher: Publisher
    }

    let policy: IngestURIPolicy
    private let internalSession: InternalSession
    private let logger: Logger
    private var running: [String: Running] = [:]
    /// Called when an ingest ends (the platform tells its owner).
    private var onEnded: (@Sendable (IngestEnded) async -> Void)?

    /// Ingests one session may run at once, and the platform in all (starting ones count: an
    /// unreachable source holds its place until the connect timeout).
    let maximumPerOwner: Int
    let maximum: Int
    private var starting: [String: Int] = [:]

    init(policy: IngestURIPolicy, session: InternalSession, logger: Logger, maximumPerOwner: Int = 4, maximum: Int = 32) {
        self.policy = policy
        self.internalSession = session
        self.logger = logger
        self.maximumPerOwner = maximumPerOwner
        self.maximum = maximum
    }

    func setEndedHandler(_ handler: @escaping @Sendable (IngestEnded) async -> Void) {
        onEnded = handler
    }

    /// Starts an ingest for `owner`, whose request the platform has authorised (token, scope,
    /// recording name) before anything is opened.
    func start(owner: String, _ request: ClientMessage.PublishRemote) async -> Result<ServerMessage.IngestStarted, ServerMessage.Failure> {
        let ownerCount = running.values.filter { $0.owner == owner }.count + (starting[owner] ?? 0)
        guard ownerCount < maximumPerOwner else {
            return .failure(.init(status: .capacity, message: "this session runs \(ownerCount) ingests already (at most \(maximumPerOwner))"))
        }
        guard running.count + starting.values.reduce(0, +) < maximum else {
            return .failure(.init(status: .capacity, message: "the platform runs its maximum of \(maximum) ingests"))
        }
        let target: IngestTarget
        do throws(IngestURIError) {
            target = try policy.check(request.streamURI, resolve: IngestLookups.addresses(of:), realPath: IngestLookups.realPath(of:))
        } catch {
            logger.notice("ingest refused", metadata: ["pcast.session": .string(owner), "pcast.reason": .string(error.description)])
            return .failure(.init(status: .unauthorized, message: error.description))
        }
        starting[owner, default: 0] += 1
        defer {
            starting[owner, default: 1] -= 1
            if starting[owner] == 0 { starting[owner] = nil }
        }
        var options = IngestOptions(maximumFrameRate: request.maximumFrameRate, exactFrameRate: request.exactFrameRate)
        if let skip = request.prerollSkipMilliseconds { options.prerollSkip = .milliseconds(skip) }
        for option in request.connectOptions {
            switch option {
            case "loop": options.loop = true
            default:
                return .failure(.init(status: .notSupported, message: "connect option '\(SignalingError.clipped(option))' is not supported (supported: loop)"))
            }
        }
        let pcast: PCast
        do throws(PCastError) { pcast = try await session() } catch {
            return .failure(.init(status: .failed, message: "the ingest session could not start: \(error)"))
        }
        let publisher: Publisher
        do throws(PCastError) {
            options.hostHeader = target.hostHeader
            publisher = try await pcast.publish(streamToken: request.streamToken, ingest: .uri(target.uri), options: options,
                                                tags: request.tags, publishType: request.publishType, streamName: request.streamName)
        } catch {
            logger.notice("ingest failed to start", metadata: ["pcast.session": .string(owner), "pcast.error": .string(error.description)])
            if error.code == .refused { return .failure(.init(status: error.status, message: error.detail)) }
            if let media = error.mediaError {
                return .failure(.init(status: .failed, message: "cannot open \(SignalingError.clipped(request.streamURI, limit: 256)): \(media)"))
            }
            return .failure(.init(status: error.status, message: error.description))
        }
        let streamId = publisher.streamId
        register(publisher, owner: owner)
        logger.info("ingest started", metadata: ["pcast.session": .string(owner), "pcast.stream": .string(streamId),
                                                  "pcast.uri": .string(target.uri), "pcast.passthrough": "\(options.passthrough)"])
        return .success(.init(streamId: streamId, passthrough: options.passthrough))
    }

    /// Starts an ingest fed with pushed FLV (the RTMP endpoint): the publish token is checked by
    /// the platform as for any publish. Feed it with ``IngestPublisher/push(_:)`` and end it
    /// with ``IngestPublisher/endPushedStream()``.
    func startPushed(streamToken: String, publishType: PublishType, streamName: String?, video: VideoCodec, remote: String?) async -> Result<Publisher, ServerMessage.Failure> {
        let pcast: PCast
        do throws(PCastError) { pcast = try await session() } catch {
            return .failure(.init(status: .failed, message: "the ingest session could not start: \(error)"))
        }
        do throws(PCastError) {
            let publisher = try await pcast.publish(streamToken: streamToken, ingest: .pushedFLV(video: video), publishType: publishType, streamName: streamName)
            register(publisher, owner: nil)
            logger.info("rtmp push started", metadata: ["pcast.stream": .string(publisher.streamId), "pcast.remote": .string(remote ?? "?"),
                                                        "pcast.publishType": .string(publishType.rawValue), "pcast.codec": .string(video.rawValue)])
            return .success(publisher)
        } catch {
            if error.code == .refused { return .failure(.init(status: error.status, message: error.detail)) }
            return .failure(.init(status: error.status, message: error.description))
        }
    }

    private func register(_ publisher: Publisher, owner: String?) {
        let streamId = publisher.streamId
        running[streamId] = Running(owner: owner, publisher: publisher)
        publisher.setPublisherEndedCallback { [weak self] reason, description in
            guard let self else { return }
            Task { await self.ended(streamId, reason, description) }
        }
    }

    private func ended(_ streamId: String, _ reason: StreamEndedReason, _ description: String?) async {
        guard let entry = running.removeValue(forKey: streamId) else { return }
        logger.info("ingest ended", metadata: ["pcast.stream": .string(streamId), "pcast.reason": .string(reason.rawValue)])
        await onEnded?(IngestEnded(owner: entry.owner, streamId: streamId, reason: reason, description: description))
    }

    func kinds() -> [String: IngestKind] {
        running.mapValues { $0.owner == nil ? .push : .pull }
    }

    func stop(_ streamId: String, by owner: String) async -> ServerMessage.Failure? {
        guard let entry = running[streamId] else { return .init(status: .notFound, message: "no ingest '\(streamId)'") }
        guard entry.owner == owner else { return .init(status: .unauthorized, message: "ingest '\(streamId)' was started by another session") }
        await entry.publisher.stop(reason: .ended, description: "stopped by its owner")
        return nil
    }

    /// The owner's session ended: its ingests stop.
    func ownerEnded(_ owner: String) async {
        for (_, entry) in running where entry.owner == owner {
            await entry.publisher.stop(reason: .ended, description: "the session that started the ingest ended")
        }
    }

    /// Position and duration of every running ingest, for progress events.
    func progress() -> [IngestProgressReport] {
        running.sorted { $0.key < $1.key }.compactMap { streamId, entry in
            guard let owner = entry.owner, let ingest = entry.publisher.ingest else { return nil }
            let (position, duration) = ingest.progress
            return IngestProgressReport(owner: owner, progress: .init(
                streamId: streamId, positionMilliseconds: position.map { Int64($0 / .milliseconds(1)) },
                durationMilliseconds: duration.map { Int64($0 / .milliseconds(1)) }))
        }
    }

    func shutdown() async {
        for (_, entry) in running { await entry.publisher.stop(reason: .maintenance, description: "the platform is shutting down") }
        running = [:]
    }
    private func session() async throws(PCastError) -> PCast {
        try await internalSession.client()
    }
}

/// The platform's own client session (ingest publishers and recorders run on it): connects to the
/// platform's signaling with an auth token it mints itself, once, and again if the connection was
/// lost.
actor InternalSession {
    private let applicationId: String
    private let secret: String
    private var endpoint: PlatformEndpoint?
    private var pcast: PCast?

    init(applicationId: String, secret: String) {
        self.applicationId = applicationId
        self.secret = secret
    }

    /// Where the platform listens (set once it does).
    func listening(at endpoint: PlatformEndpoint) {
        self.endpoint = endpoint
    }

    func client() async throws(PCastError) -> PCast {
        if let pcast, pcast.isOnline { return pcast }
        guard let endpoint else { throw .notStarted }
        let token: String
        do {
            token = try DigestTokenBuilder().expiresAt(Date().addingTimeInterval(30 * 86_400)).type(.auth)
                .encode(applicationId: applicationId, secret: secret)
        } catch {
            throw .invalidRequest("cannot mint the platform's own session token: \(error)")
        }
        var options = PCastOptions(uri: endpoint.signalingURL)
        // Over TLS to its own listener on loopback: exactly the listener's certificate is
        // trusted, whatever names it was issued for.
        options.pinnedServerCertificateFile = endpoint.tls?.certificateChain
        // The platform's own client: the server that runs it handles its signals (it ends every
        // stream as it shuts down).
        options.enableProcessTerminationSignalHandling = false
        let client = PCast(options)
        try await client.start(authToken: token)
        pcast = client
        return client
    }

    /// A stream token for `streamId` (the platform's recorders subscribe with it).
    func streamToken(for streamId: String) throws(PCastError) -> String {
        do {
            return try DigestTokenBuilder().expiresAt(Date().addingTimeInterval(3600)).type(.stream).originStreamId(streamId)
                .encode(applicationId: applicationId, secret: secret)
        } catch {
            throw .invalidRequest("cannot mint a stream token: \(error)")
        }
    }

    func stop() async {
        await pcast?.stop()
        pcast = nil
    }
}
