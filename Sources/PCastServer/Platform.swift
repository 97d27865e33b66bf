import Crypto
import Foundation
import Logging
import PCastContracts
import PCastProtocol

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
///
/// Carrying out the actions is in `Platform+Actions.swift`; the connection tables it uses are
/// internal rather than private for that (the actor is internal to the module, and only
/// `PlatformServer` holds one).
actor Platform {
    struct Connection {
        /// The connection's own id (its first session id; a resumed session keeps its old one).
        let id: String
        var machine: SessionStateMachine
        let outbox: AsyncStream<Outbound>.Continuation
        let logger: Logger
    }

    let configuration: PlatformConfiguration
    let relay: any RelayControl
    let metrics: PlatformMetrics
    let clock: @Sendable () -> Date
    let logger: Logger
    let tokens: TokenAuthority
    /// Keyed by the id the connection was opened with (its first session id).
    var connections: [String: Connection] = [:]
    /// Session id → connection id, and back, for sessions whose id changed by resumption.
    var connectionOfSession: [String: String] = [:]
    var sessionOfConnection: [String: String] = [:]
    var registry: StreamRegistry
    /// WHIP and WHEP sessions (standard WebRTC peers), each a session of its own in the registry.
    var webRTCSessions = WebRTCSessions()
    /// Streams recently played as HLS, so that their players are still authorised, and see the
    /// playlist end, after the stream has gone from the registry.
    var recentHLS = RecentStreams(capacity: 256)
    /// The layers each local simulcast's publisher is told to encode.
    private var layerActivity = LayerActivity()
    /// Simulcast viewers last told their link holds them down, and those held down at the last
    /// tick (told at the second in a row: a viewer starting on the middle layer is held down for
    /// the second it takes to move up), by subscriber id.
    private var reducedViewers: Set<String> = []
    private var heldDownLastTick: Set<String> = []
    var rooms: RoomRegistry
    let persistence: RoomPersistence
    /// Sessions that can be resumed: SHA-256 of their resume key, and whether a connection holds them.
    var resumable: [String: (keyHash: String, attached: Bool, deadline: Date?)] = [:]
    /// Stream events for detached sessions, delivered when they resume (at most ``heldLimit`` each).
    var held: [String: [Envelope<ServerMessage>]] = [:]
    /// When each connection's unanswered requests arrived, by request id (for
    /// ``PlatformMetrics/signalingRequest(answeredAfter:)``); at most ``pendingRequestLimit`` each.
    var pendingRequests: [String: [UInt64: ContinuousClock.Instant]] = [:]
    static let pendingRequestLimit = 64
    static let heldLimit = 256
    private(set) var isAccepting = true
    /// The media services this node runs (ingest, recording), reached through their contracts;
    /// nil: signaling and relay only (`publish-remote` and recording publishes are refused).
    let services: (any MediaServices)?
    nonisolated var ingest: (any IngestControl)? { services?.ingest }
    nonisolated var recordings: (any RecordingControl)? { services?.recordings }
    nonisolated var hls: (any HLSControl)? { services?.hls }
    /// Tells the application's backend about streams started and ended here (when configured).
    let notifier: StreamNotifier?

    /// Messages queued for one connection before it counts as not reading: a client that sends
    /// requests without reading the replies cannot make the platform hold unbounded memory.
    static let outboxLimit = 1024

    init(configuration: PlatformConfiguration, relay: any RelayControl, services: (any MediaServices)?, metrics: PlatformMetrics,
         clock: @escaping @Sendable () -> Date, logger: Logger, store: any PlatformStore, snapshot: RoomStoreSnapshot,
         cluster: ClusterMembership? = nil) {
        self.configuration = configuration
        self.relay = relay
        self.notifier = configuration.streamNotifications.map { StreamNotifier(settings: $0, logger: logger) }
        self.metrics = metrics
        self.clock = clock
        self.logger = logger
        self.tokens = configuration.tokenAuthority
        self.registry = StreamRegistry(tokens: tokens)
        registry.nodeId = configuration.nodeId
        registry.maximumViewers = configuration.maximumViewers
        registry.deliversHLS = services?.hls != nil
        let now = clock()
        let suffix = cluster.map { "@" + $0.nodeId }
        self.rooms = RoomRegistry(restoring: snapshot, resumeWindow: configuration.resumeWindow, now: now,
                                  isLocal: { id in suffix.map { id.hasSuffix($0) } ?? true })
        if let cluster {
            rooms.sequenceSlot = cluster.slot
            rooms.sequenceSlotBits = PostgresPlatformStore.slotBits
            self.cluster = cluster
            self.lastChangeId = cluster.startChangeId
            channel = ClusterChannel(nodeId: cluster.nodeId, secret: configuration.secret,
                                     certificateAuthorityFile: configuration.clusterCertificateAuthority)
        } else {
            channel = nil
        }
        // Streams of a previous run of this node are gone (their publishers must publish again);
        // other nodes' are served by pulling them (those of nodes gone are swept at the first heartbeat).
        var stale: Set<String> = []
        for stream in snapshot.streams {
            if let cluster, stream.nodeId != cluster.nodeId {
                _ = registry.handle(.remoteStreamPublished(stream))
            } else {
                stale.insert(stream.nodeId)
            }
        }
        let staleChanges = stale.sorted().map { RoomStoreChange.deleteNodeStreams(nodeId: $0, reason: .failed, description: "the node restarted") }
        // Sessions a restart interrupted may resume within the window.
        for session in snapshot.sessions {
            resumable[session.sessionId] = (session.resumeKeyHash, false, now.addingTimeInterval(configuration.resumeWindow))
        }
        let storeLogger = logger
        self.persistence = RoomPersistence(store: store) { error in
            if case .unavailable = error {
                storeLogger.error("room store unavailable: changes wait, in order, until it answers", metadata: ["pcast.error": "\(error)"])
            } else {
                storeLogger.error("room store write failed", metadata: ["pcast.error": "\(error)"])
            }
        }
        self.services = services
        if !staleChanges.isEmpty { persistence.submit(staleChanges) }
        if !snapshot.rooms.isEmpty {
            logger.info("rooms restored", metadata: ["pcast.rooms": "\(snapshot.rooms.count)", "pcast.members": "\(snapshot.members.count)",
                                                     "pcast.sessions": "\(snapshot.sessions.count)"])
        }
    }

    /// What a node sharing its store with others starts with.
    struct ClusterMembership: Sendable {
        let store: PostgresPlatformStore
        let nodeId: String
        /// Its chat sequence slot (see ``RoomRegistry/sequenceSlot``).
        let slot: UInt64
        /// The change-log id read before the snapshot was loaded: following starts there.
        let startChangeId: Int64
    }

    /// A new socket: returns its session id (given out once it authenticates) and what to write to it.
    func connect(remoteAddress: String?) -> (sessionId: String, outbox: AsyncStream<Outbound>)? {
        guard isAccepting else { return nil }
        let sessionId = newSessionId("session")
        let (stream, continuation) = AsyncStream<Outbound>.makeStream(bufferingPolicy: .bufferingOldest(Self.outboxLimit))
        var connectionLogger = logger
        connectionLogger[metadataKey: "pcast.session"] = .string(sessionId)
        connectionLogger[metadataKey: "pcast.remote"] = .string(remoteAddress ?? "?")
        let machine = SessionStateMachine(
            sessionId: sessionId, remoteAddress: remoteAddress, tokens: tokens,
            keepAliveInterval: configuration.keepAliveInterval, now: clock(), resumeKey: Self.makeId("resume"))
        connections[sessionId] = Connection(id: sessionId, machine: machine, outbox: continuation, logger: connectionLogger)
        connectionLogger.debug("signaling connection opened")
        return (sessionId, stream)
    }

    /// A message (or the codec's refusal of one) from a connection.
    func receive(_ sessionId: String, _ decoded: Result<Envelope<ClientMessage>, SignalingError>) {
        metrics.messages.increment()
        switch decoded {
        case .success(let envelope):
            if let id = envelope.id, pendingRequests[sessionId, default: [:]].count < Self.pendingRequestLimit {
                pendingRequests[sessionId, default: [:]][id] = .now
            }
            // The right resume key makes an offer; nothing happens to the session it names unless
            // the token then verifies too (see `.opened` in `handleSession`).
            if case .authenticate(let request) = envelope.message, let old = request.sessionId, let key = request.resumeKey,
               let entry = resumable[old], AdminCredentials.constantTimeEquals(Array(entry.keyHash.utf8), Array(Self.hash(key).utf8)) {
                connections[sessionId]?.machine.offerResume(sessionId: old, resumeKey: key)
            }
            handleSession(sessionId, .message(envelope, now: clock()))
        case .failure(let error): handleSession(sessionId, .invalid(error, now: clock()))
        }
    }

    /// The socket closed (whoever closed it).
    func disconnected(_ sessionId: String) {
        handleSession(sessionId, .disconnected)
        pendingRequests[sessionId] = nil
        if let connection = connections.removeValue(forKey: sessionId) {
            forget(connection: sessionId)
            connection.outbox.finish()
            connection.logger.debug("signaling connection closed")
        }
    }

    /// Checks every session's keep-alive deadline.
    func tick() {
        let now = clock()
        for sessionId in connections.keys.sorted() { handleSession(sessionId, .tick(now: now)) }
        perform(rooms: .tick(now: now))
        var expired: [String] = []
        for (id, entry) in resumable where !entry.attached {
            if let deadline = entry.deadline, now >= deadline { expired.append(id) }
        }
        for id in expired.sorted() {
            resumable[id] = nil
            held[id] = nil
            persistence.submit([.deleteSession(sessionId: id)])
            // Not resumed in time: its streams end and its subscriptions go.
            perform(registry: .sessionClosed(sessionId: id, .connectionLost))
            if let ingest { Task { await ingest.ownerEnded(id) } }
        }
        // The relay's audio-only fallback, told to the viewers concerned.
        for event in relay.takeSubscriberVideoEvents() { perform(registry: .subscriberVideo(event)) }
        // WebRTC peers whose transport ended on its own (DTLS closed or failed, consent expired).
        webRTCTransportEvents(relay.takeWebRTCEvents())
        restUnwatchedLayers(now: now)
        // A detached publisher whose media stopped as well is gone, not merely cut off.
        let timeout = Duration.milliseconds(Int64(configuration.detachedMediaTimeout * 1000))
        for streamId in registry.detachedStreamIds {
            if let idle = relay.publisherIdleTime(streamId: streamId), idle >= timeout {
                perform(registry: .endStream(streamId: streamId, reason: .failed,
                                             description: "the publisher's connection was lost and its media stopped"))
            }
        }
        Task { await self.sendIngestProgress() }
    }

    /// Tells each local simulcast's publisher which layers to encode (``LayerActivity``): those
    /// nobody watches rest.
    private func restUnwatchedLayers(now: Date) {
        updateLayerActivity(now: now)
        layerActivity.keep(only: Set(registry.localSimulcastStreams.map(\.streamId)))
        // Each simulcast viewer here hears when its link holds it below the best layer.
        var heldDown: Set<String> = [], told: Set<String> = []
        for record in registry.simulcastStreams {
            for (subscriberId, sessionId) in record.subscribers {
                guard let layer = relay.subscriberLayer(streamId: record.streamId, subscriberId: subscriberId), let current = layer.current else { continue }
                if layer.reduced { heldDown.insert(subscriberId) }
                let reduced = layer.reduced && heldDownLastTick.contains(subscriberId)
                if reduced || (layer.reduced && reducedViewers.contains(subscriberId)) { told.insert(subscriberId) }
                guard reduced != reducedViewers.contains(subscriberId), reduced || !layer.reduced,
                      let connection = connection(of: sessionId), !connection.machine.isClosed else { continue }
                deliver(.event(.subscriberLayer(.init(streamId: record.streamId, subscriberId: subscriberId, layer: current, reduced: reduced))), to: connection)
            }
        }
        heldDownLastTick = heldDown
        reducedViewers = told
    }

    /// The relay saw a viewer move to a layer nobody watched (``RelayControl/onWatchedLayersGrew(_:)``):
    /// a rested layer's publisher is told now, not at the next tick (up to a second later), so the
    /// viewer's switch waits only for the encoder's first keyframe.
    func wakeWatchedLayers() {
        updateLayerActivity(now: clock())
    }

    /// Each local simulcast's layers to encode now, told to its publisher when they changed.
    private func updateLayerActivity(now: Date) {
        guard let rest = configuration.unwatchedLayerRest else { return }
        layerActivity.rest = rest
        for record in registry.localSimulcastStreams {
            guard let watched = relay.watchedLayers(streamId: record.streamId) else { continue }
            let layers = record.tracks.compactMap(\.layer).sorted { $0.bitrate > $1.bitrate }
            guard let active = layerActivity.update(streamId: record.streamId, layers: layers, watched: watched, now: now),
                  let connection = connection(of: record.publisherSessionId), !connection.machine.isClosed
            else { continue }
            deliver(.event(.layerActivity(.init(streamId: record.streamId, active: active.sorted()))), to: connection)
        }
    }

    /// A new session id; in a cluster it ends with `@<node id>`, so that the shared store tells
    /// each node's members apart.
    func newSessionId(_ prefix: String) -> String {
        Self.makeId(prefix) + (cluster.map { "@" + $0.nodeId } ?? "")
    }

    // MARK: Cluster

    /// Set when the store is shared with other nodes.
    private var cluster: ClusterMembership?
    /// The node-to-node channel, in a cluster.
    let channel: ClusterChannel?
    /// Edge: the streams of other nodes this node pulls for its viewers (opening or open).
    var legs: [String: EdgeLeg] = [:]
    /// Edge: the latest viewer-limit call to each stream's origin (each waits for the one before).
    var limitCalls: [String: Task<Void, Never>] = [:]
    /// Edge: legs held open for a viewer about to subscribe (a WHEP offer being answered), by stream.
    var legHolds: [String: Int] = [:]
    /// Edge: when each silent leg was last asked of its origin again.
    var repulls: [String: ContinuousClock.Instant] = [:]
    /// Origin: the nodes each stream published here is pulled by, and what each was granted
    /// (asked again while its flow still reports, a node gets the same flow back: replacing it
    /// would lose what is on its way).
    var edges: [String: [String: EdgeGrant]] = [:]
    /// The live nodes as of the latest heartbeat, by id.
    var liveNodes: [String: NodeRecord] = [:]
    /// The last change-log id applied.
    private var lastChangeId: Int64 = 0
    private var catchingUp = false
    /// Why this node's view of the cluster is behind for good (changes it had not read were
    /// pruned from the log); `/readyz` says so.
    private(set) var missedChanges: String?
    private var needsCatchUp = false

    /// Applies other nodes' logged changes past the last one applied (one reader at a time; a
    /// signal during a read makes it read again).
    func catchUpChanges() async {
        guard let cluster else { return }
        guard !catchingUp else {
            needsCatchUp = true
            return
        }
        catchingUp = true
        defer { catchingUp = false }
        repeat {
            needsCatchUp = false
            let from = lastChangeId
            do throws(RoomStoreError) {
                let (last, changes) = try await cluster.store.changes(after: from, excluding: cluster.nodeId)
                // Another reader cannot have moved it: `catchingUp` keeps this the only one.
                lastChangeId = last
                if !changes.isEmpty {
                    perform(rooms: .remote(changes))
                    applyRemoteStreams(changes)
                }
                if last != from { needsCatchUp = true }
            } catch {
                if case .missedChanges = error {
                    // Reading on cannot bring back what was pruned: the node says so (not ready)
                    // until it is restarted, and keeps serving its own sessions meanwhile.
                    if missedChanges == nil { logger.error("this node missed changes of the cluster", metadata: ["pcast.error": .string(error.description)]) }
                    missedChanges = error.description
                } else if !Task.isCancelled {
                    logger.notice("cannot read the cluster's change log (will retry)", metadata: ["pcast.error": .string(error.description)])
                }
                return
            }
        } while needsCatchUp
    }

    /// Starts listening for other nodes' changes: the signals of the shared store, if there is one.
    nonisolated func listenForChanges() -> AsyncStream<Void>? {
        (persistence.store as? PostgresPlatformStore)?.changeSignals()
    }

    /// Prunes change-log entries every node has read long ago.
    func pruneChanges() async {
        try? await cluster?.store.pruneChanges(olderThan: .seconds(600))
    }

    /// This node as the store's membership shows it (set once it listens).
    private var node: NodeRecord?
    /// This node's relay address as other nodes reach it (once it joined the cluster).
    var clusterRelayAddress: String? { cluster == nil ? nil : node?.relayAddress }
    /// Whether the last heartbeat reached the store (to log changes, not every failure).
    private var heartbeatHealthy = true
    /// Since when this node's heartbeats reach the store without a failure (nil: they fail now).
    private var healthySince: ContinuousClock.Instant?

    /// The membership record this node heartbeats (its signaling URL at `port`, its relay's
    /// address), and its first heartbeat.
    func joinCluster(httpPort: Int) async {
        var host = configuration.advertisedHost ?? configuration.host
        if host == "0.0.0.0" || host == "::" || host.isEmpty { host = "127.0.0.1" }
        let bracketed = host.contains(":") ? "[\(host)]" : host
        let scheme = configuration.tls == nil ? "ws" : "wss"
        node = NodeRecord(nodeId: configuration.nodeId, signalingURL: "\(scheme)://\(bracketed):\(httpPort)/ws",
                          relayAddress: "\(bracketed):\(relay.mediaPort)", startedAt: Int64((clock().timeIntervalSince1970 * 1000).rounded()))
        await heartbeat()
    }

    /// Tells the store this node is alive, with its load. A store that does not answer is logged
    /// once, and again when it answers.
    func heartbeat() async {
        guard isAccepting, var node else { return }
        node.streams = registry.localStreamCount
        node.sessions = registry.attachedSessionCount
        let healthy: Bool
        do throws(RoomStoreError) {
            try await persistence.store.heartbeat(node)
            healthy = true
        } catch {
            healthy = false
            if heartbeatHealthy { logger.error("node heartbeat failed", metadata: ["pcast.error": .string(error.description)]) }
        }
        if healthy, !heartbeatHealthy { logger.notice("node heartbeat reaches the store again") }
        heartbeatHealthy = healthy
        let now = ContinuousClock.now
        if !healthy { healthySince = nil } else if healthySince == nil { healthySince = now }
        // Only once the other nodes have had the expiry to beat again too: after the store was
        // out of reach for everyone, every heartbeat is old, and no node is gone.
        if let since = healthySince, now - since >= configuration.nodeExpiry + PlatformService.heartbeatInterval { await sweepDeadNodes() }
        superviseLegs()
    }

    /// Nodes gone from the membership (no heartbeat within the expiry: killed, or cut off): every
    /// node ends the streams of theirs it knows (their viewers here are told `failed`) and stops
    /// serving them as edges; one node, the live node with the lowest id, deletes their room
    /// members and streams from the store, and the others follow its changes through the log.
    private func sweepDeadNodes() async {
        guard let cluster else { return }
        let live: [NodeRecord]
        do throws(RoomStoreError) {
            live = try await persistence.store.liveNodes(within: configuration.nodeExpiry)
        } catch {
            return
        }
        liveNodes = Dictionary(live.map { ($0.nodeId, $0) }, uniquingKeysWith: { a, _ in a })
        let liveIds = Set(live.map(\.nodeId)).union([cluster.nodeId])
        let deadOrigins = registry.originNodeIds.subtracting(liveIds)
        for nodeId in deadOrigins.sorted() {
            logger.warning("node \(nodeId) is gone from the cluster: its streams end", metadata: ["pcast.node": .string(nodeId)])
            perform(registry: .remoteNodeGone(nodeId: nodeId, reason: .failed, description: "node \(nodeId) stopped answering"))
        }
        dropEdges(notIn: liveIds)
        guard liveIds.min() == cluster.nodeId else { return }
        let orphans = rooms.memberships { sessionId in
            guard let at = sessionId.lastIndex(of: "@") else { return false }
            return !liveIds.contains(String(sessionId[sessionId.index(after: at)...]))
        }
        var changes = orphans.map { RoomStoreChange.deleteMember(roomId: $0.roomId, sessionId: $0.sessionId) }
        if !changes.isEmpty {
            perform(rooms: .remote(changes))
            logger.notice("members of nodes gone from the cluster left their rooms",
                          metadata: ["pcast.members": "\(orphans.count)", "pcast.liveNodes": .string(liveIds.sorted().joined(separator: ","))])
        }
        changes += deadOrigins.sorted().map { RoomStoreChange.deleteNodeStreams(nodeId: $0, reason: .failed, description: "node \($0) stopped answering") }
        if !changes.isEmpty { persistence.submit(changes) }
    }

    /// Leaves the membership (a clean stop: other nodes need not wait for the expiry).
    func leaveCluster() async {
        guard let node else { return }
        try? await persistence.store.removeNode(node.nodeId)
    }

    /// The live nodes, this one included.
    nonisolated func clusterNodes() async throws(RoomStoreError) -> [NodeRecord] {
        try await persistence.store.liveNodes(within: configuration.nodeExpiry)
    }

    /// Writes an admin action or a refused admin request to the audit log (every node's store);
    /// a store that cannot take it is logged, and the request is answered all the same.
    nonisolated func audit(actor: String, remoteAddress: String?, action: String, outcome: String, detail: String) async {
        let entry = AuditEntry(time: Int64((Date().timeIntervalSince1970 * 1000).rounded()), nodeId: configuration.nodeId, actor: actor,
                               remoteAddress: remoteAddress ?? "?", action: action, outcome: outcome, detail: detail)
        do throws(RoomStoreError) {
            try await persistence.store.appendAudit(entry)
        } catch {
            logger.error("the audit log could not be written: \(error)", metadata: ["pcast.action": .string(action), "pcast.outcome": .string(outcome)])
        }
        logger.notice("admin \(outcome): \(action)", metadata: ["pcast.actor": .string(actor), "pcast.remote": .string(remoteAddress ?? "?"),
                                                                  "pcast.detail": .string(detail)])
    }

    /// The audit log's latest `limit` entries, newest first.
    nonisolated func auditLog(limit: Int) async throws(RoomStoreError) -> [AuditEntry] {
        try await persistence.store.auditEntries(limit: limit)
    }

    /// The server listens at `endpoint`: the media services start (their own session
    /// connects there, the RTMP endpoint binds).
    func listening(at endpoint: PlatformEndpoint) async throws(MediaServiceError) {
        await ingest?.setEndedHandler { [weak self] ended in
            await self?.ingestEnded(ended)
        }
        try await services?.platformListening(at: endpoint)
    }

    /// Stops every ingest, finishes every recording and closes the media services' session
    /// (before the platform shuts down).
    func shutdownServices() async {
        await services?.shutdown()
    }

    private func ingestEnded(_ ended: IngestEnded) {
        guard let owner = ended.owner else { return }
        reply(to: owner, requestId: nil, .streamEnded(.init(streamId: ended.streamId, reason: ended.reason, description: ended.description)))
    }

    private func sendIngestProgress() async {
        guard let ingest else { return }
        for report in await ingest.progress() {
            reply(to: report.owner, requestId: nil, .ingestProgress(report.progress))
        }
    }

    /// Waits (at most `limit`) until the stream notifications queued so far were delivered or
    /// given up, then stops the notifier: a shutdown's `maintenance` ends reach the backend.
    func drainNotifications(within limit: Duration) async {
        guard let notifier else { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await notifier.idle() }
            group.addTask { try? await Task.sleep(for: limit) }
            await group.next()
            group.cancelAll()
        }
        notifier.stop()
    }

    /// Waits until every store write submitted so far is on disk.
    func flushStore() async {
        if !(await persistence.flush(within: Self.flushLimit)) {
            logger.error("the store did not take every change within \(Self.flushLimit): changes still waiting are lost")
        }
    }

    /// How long a shutdown waits for the store to take what is still waiting.
    static let flushLimit: Duration = .seconds(10)

    /// Releases the store's connections (after the last flush).
    func closeStore() async {
        persistence.stopRetrying()
        await persistence.store.close()
    }

    /// Whether the store answers (a PostgreSQL server may be down; a SQLite file always is).
    nonisolated func storeIsReachable() async -> Bool {
        await persistence.store.isReachable()
    }

    /// The operator ends a stream, on whichever node of the cluster it was published (another
    /// node is asked to). False when there is no such stream, or its node could not be reached.
    func endStream(_ streamId: String, reason: StreamEndedReason, description: String?) async -> Bool {
        guard let record = registry.stream(streamId) else { return false }
        guard let origin = record.originNodeId else {
            perform(registry: .endStream(streamId: streamId, reason: reason, description: description))
            return true
        }
        return await askOriginToEnd(streamId, origin: origin, reason: reason, description: description)
    }

    /// Ends every stream as `maintenance` (so subscribers hear why), then closes every session with 1001.
    func shutdown() {
        guard isAccepting else { return }
        isAccepting = false
        // Streams published here end; viewers here of other nodes' streams are not told theirs
        // ended (it did not): their SDKs subscribe to it again on the node they move to.
        for streamId in registry.streamIds(ofNode: nil) {
            perform(registry: .endStream(streamId: streamId, reason: .maintenance, description: SessionEnd.serverShutdown.streamEndedDescription))
        }
        for sessionId in connections.keys.sorted() { handleSession(sessionId, .shutdown) }
    }

    /// Streams published on this node.
    var streamCount: Int { registry.localStreamCount }
    /// Open sockets (authenticated or not).
    var connectionCount: Int { connections.count }

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
