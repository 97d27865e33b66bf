import Foundation
import Logging
import PCastProtocol
import PCastContracts

/// The platform's streams and who subscribes to them. Pure: the caller passes time and fresh ids
/// in, carries out the returned actions, and reports relay results back as events.
///
/// Rules:
/// - Publish needs a `publish` token (``TokenAuthority/authorizePublish(_:tags:tracks:publishType:streamName:sessionId:remoteAddress:now:)``):
///   the stream's tags are the token's `requiredTag` (its scope, applied whether the request names
///   it or not), the request's tags (only the required tag or the token's `applyTags` when the
///   token is scoped) and the token's `applyTags`. Recording needs the token to name the
///   recording. Its `originStreamId` is ignored (the platform assigns stream ids).
/// - Subscribe needs a `stream` token. Which stream: the token's `originStreamId` when present
///   (`not-found` if no such stream; with a `requiredTag` too, the stream must carry it, else
///   `unauthorized`). Without `originStreamId`, the newest live stream carrying the token's
///   `requiredTag` (`no-stream-playing` when none does). A token with neither is `bad-request`.
/// - Only the publishing session may unpublish; `censored` is reserved for the operator (admin).
/// - Ending a stream, however it happens, tells every subscriber (in order of subscription) and
///   then the publisher with a `stream-ended` event carrying the reason and description, and
///   closes it on the relay. A session that ends is not sent its own events.
/// - A publisher's session ending ends its streams with ``SessionEnd/streamEndedReason``
///   (`ended` after `bye`, `maintenance` on shutdown, `failed` otherwise); a subscriber's
///   session ending removes its subscriptions.
/// - A session whose connection dropped is *detached*, not ended: its streams and subscriptions
///   stay (media does not go through signaling) until it resumes (`sessionOpened` again: nothing
///   changes) or the platform gives up on it (`sessionClosed`). ``detachedStreamIds`` lists the
///   streams whose publisher is detached, so the platform can end those whose media stopped too.
/// - Nothing is opened on the relay for a refused request; a relay refusal becomes a typed failure.
/// - In a cluster, each stream published here is announced to the other nodes (``Action/persist(_:)``
///   of a ``RoomStoreChange/saveStream(_:)``, withdrawn with its end's reason), and their streams
///   come in as ``Event/remoteStreamPublished(_:)``: a subscribe may name one, and the platform
///   serves it by pulling it from its node. A remote stream ends when its node says so or is gone
///   (``Event/remoteStreamEnded(streamId:reason:description:)``, ``Event/remoteNodeGone(nodeId:description:)``):
///   its subscribers here are told, as for any stream.
///
/// ```swift
/// var registry = StreamRegistry(tokens: TokenAuthority(applicationId: "app", secret: "s"))
/// _ = registry.handle(.sessionOpened(sessionId: "a", remoteAddress: "127.0.0.1"))
/// let actions = registry.handle(.request(sessionId: "a", requestId: 1, .publish(publish), now: Date(), newId: "stream-1"))
/// // [.addPublisher(streamId: "stream-1", tracks: …)] — then report the relay's answer:
/// _ = registry.handle(.publisherAdded(streamId: "stream-1", .success(transport)))
/// ```
public struct StreamRegistry: Sendable {
    public enum Event: Sendable {
        /// A session authenticated, or a detached one resumed (its streams and subscriptions stay).
        case sessionOpened(sessionId: String, remoteAddress: String?)
        /// The session's connection dropped; it may resume (see the type's rules).
        case sessionDetached(sessionId: String)
        /// An authenticated request; `newId` is the stream id (publish) or subscriber id
        /// (subscribe) to use if the request goes ahead.
        case request(sessionId: String, requestId: UInt64?, SessionStateMachine.Request, now: Date, newId: String)
        /// The relay's answer to ``Action/addPublisher(streamId:tracks:)``.
        case publisherAdded(streamId: String, Result<MediaTransport, RelayError>)
        /// The relay's answer to ``Action/addSubscriber(streamId:subscriberId:)``.
        case subscriberAdded(streamId: String, subscriberId: String, Result<MediaTransport, RelayError>)
        /// The operator ends a stream (admin).
        case endStream(streamId: String, reason: StreamEndedReason, description: String?)
        case sessionClosed(sessionId: String, SessionEnd)
        /// The relay stopped or resumed sending a subscriber the stream's video.
        case subscriberVideo(SubscriberVideoEvent)
        /// Another node of the cluster published a stream (or changed its entry).
        case remoteStreamPublished(SharedStream)
        /// Another node's stream ended.
        case remoteStreamEnded(streamId: String, reason: StreamEndedReason, description: String?)
        /// A node's streams all ended: it left the cluster (stopped, died, or cut off: `failed`) or
        /// restarted.
        case remoteNodeGone(nodeId: String, reason: StreamEndedReason, description: String?)
        /// The lowest video bitrate the viewers on another node (an edge) ask of a stream published
        /// here; nil: none (any more).
        case edgeViewerLimit(streamId: String, nodeId: String, bitsPerSecond: Int?)
    }

    public enum Action: Sendable, Hashable {
        case send(sessionId: String, Envelope<ServerMessage>)
        case addPublisher(streamId: String, tracks: [MediaTrackDescription])
        case addSubscriber(streamId: String, subscriberId: String)
        case removeSubscriber(streamId: String, subscriberId: String)
        case removeStream(streamId: String)
        /// Record the stream (publish type `record` or `append`) under its stream name.
        case record(streamId: String, name: String, type: PublishType)
        /// Deliver the stream as live HLS too (published with the `streaming` capability).
        case deliverHLS(streamId: String)
        /// Write to the store: the directory entry of a stream published or ended here.
        case persist(RoomStoreChange)
        /// Tell the node that has the stream the lowest bitrate its viewers here ask for (nil: none).
        case forwardViewerLimit(streamId: String, originNodeId: String, bitsPerSecond: Int?)
        /// A simulcast viewer's own limit: the relay picks its layer (the publisher is not asked).
        case limitSubscriber(streamId: String, subscriberId: String, bitsPerSecond: Int?)
        /// The size a simulcast viewer shows the video at: the relay sends no larger layer than fills it.
        case sizeSubscriber(streamId: String, subscriberId: String, size: ViewSize?)
        /// A simulcast viewer asked to stay on one layer (best, lowest or a RID).
        case pinLayer(streamId: String, subscriberId: String, layer: String)
        /// Tell the application's backend that a stream published here started or ended (see
        /// ``StreamNotifier``); `reason` and `description` for an end.
        case notify(StreamNotification.Kind, StreamRecord, reason: StreamEndedReason?, description: String?)
        /// Tell the backend (when it asks for viewers) that a subscription to a stream here started
        /// or ended, with the tags it subscribed with.
        case notifyViewer(StreamNotification.Kind, streamId: String, subscriberId: String, sessionId: String, tags: [String],
                          reason: StreamEndedReason?, description: String?)
        case log(Logger.Level, String, sessionId: String?, streamId: String?)
    }

    private struct Session {
        var remoteAddress: String?
        var attached = true
        var published: [String] = []
        /// Subscriber id → stream id.
        var subscriptions: [String: String] = [:]
    }

    /// The capability that has a stream delivered as live HLS as well (the PCast iOS SDK's `streaming`).
    public static let streamingCapability = "streaming"

    private struct PendingPublish {
        var sessionId: String
        var requestId: UInt64?
        var request: ClientMessage.Publish
        var tags: [String]
        /// The publish token asked for HLS delivery (the `streaming` capability).
        var streaming: Bool
        var at: Date
    }

    private struct PendingSubscribe {
        var sessionId: String
        var requestId: UInt64?
        var streamId: String
        var tracks: [MediaTrackDescription]
        var layer: String? = nil
        /// The token's quality ceiling (see ``QualityCeiling``).
        var ceiling: ViewSize? = nil
        var tags: [String] = []
    }

    public let tokens: TokenAuthority
    /// This node's id in a cluster's stream directory.
    public var nodeId = "local"
    private var sessions: [String: Session] = [:]
    private var streams: [String: StreamRecord] = [:]
    private var pendingPublishes: [String: PendingPublish] = [:]
    private var pendingSubscribes: [String: PendingSubscribe] = [:]
    private var nextSequence: UInt64 = 0

    /// The most viewers this node serves at once (subscriptions to any stream, those being set up
    /// included); one more is refused with `capacity`. Nil: no limit.
    public var maximumViewers: Int?
    /// Whether this node delivers HLS: a subscribe with a `streaming` token (and no `real-time`)
    /// is then answered with the stream's HLS source instead of a relay flow.
    public var deliversHLS = false

    public init(tokens: TokenAuthority) {
        self.tokens = tokens
    }

    public func stream(_ streamId: String) -> StreamRecord? { streams[streamId] }
    /// Every stream known here, other nodes' included.
    public var streamCount: Int { streams.count }
    /// The streams published on this node.
    public var localStreamCount: Int { streams.values.reduce(0) { $0 + ($1.originNodeId == nil ? 1 : 0) } }
    public var sessionCount: Int { sessions.count }
    /// Sessions with a connection (not waiting to resume).
    public var attachedSessionCount: Int { sessions.values.reduce(0) { $0 + ($1.attached ? 1 : 0) } }
    public var subscriberCount: Int { streams.values.reduce(0) { $0 + $1.subscribers.count } }
    public var streamIds: [String] { streams.values.sorted { $0.sequence < $1.sequence }.map(\.streamId) }
    /// Streams whose publishing session is detached, oldest first.
    /// The simulcast streams published on this node.
    public var localSimulcastStreams: [StreamRecord] {
        simulcastStreams.filter { $0.originNodeId == nil }
    }
    /// The simulcast streams this node serves (published here or pulled from another node).
    public var simulcastStreams: [StreamRecord] {
        streams.values.filter { $0.tracks.contains { $0.layer != nil } }
    }
    public var detachedStreamIds: [String] {
        streams.values.filter { sessions[$0.publisherSessionId]?.attached == false }.sorted { $0.sequence < $1.sequence }.map(\.streamId)
    }
    /// The streams a session publishes or subscribes to, sorted.
    public func streamIds(ofSession sessionId: String) -> [String] {
        guard let session = sessions[sessionId] else { return [] }
        return Array(Set(session.published + session.subscriptions.values)).sorted()
    }

    /// The newest stream carrying `tag`.
    public func newestStream(tagged tag: String) -> StreamRecord? {
        streams.values.filter { $0.tags.contains(tag) }.max { $1.isNewer(than: $0) }
    }

    /// The nodes whose streams this node knows of (other than its own).
    public var originNodeIds: Set<String> { Set(streams.values.compactMap(\.originNodeId)) }

    /// The streams of node `nodeId` this node knows of (nil: those published here), oldest first.
    public func streamIds(ofNode nodeId: String?) -> [String] {
        streams.values.filter { $0.originNodeId == nodeId }.sorted { $0.sequence < $1.sequence }.map(\.streamId)
    }

    /// Whether a stream has subscribers here, or subscriptions the relay is being asked for.
    public func hasViewers(_ streamId: String) -> Bool {
        streams[streamId]?.subscribers.isEmpty == false || pendingSubscribes.values.contains { $0.streamId == streamId }
    }

    /// Whether the session is known and detached.
    public func isDetached(_ sessionId: String) -> Bool { sessions[sessionId]?.attached == false }

    public mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .sessionOpened(let sessionId, let remoteAddress):
            if var session = sessions[sessionId] {
                session.attached = true
                session.remoteAddress = remoteAddress
                sessions[sessionId] = session
                return [.log(.info, "session resumed with \(session.published.count) streams and \(session.subscriptions.count) subscriptions",
                             sessionId: sessionId, streamId: nil)]
            }
            sessions[sessionId] = Session(remoteAddress: remoteAddress)
            return [.log(.info, "session opened", sessionId: sessionId, streamId: nil)]
        case .sessionDetached(let sessionId):
            guard sessions[sessionId]?.attached == true else { return [] }
            sessions[sessionId]?.attached = false
            return [.log(.info, "session detached; its streams and subscriptions are kept while it may resume", sessionId: sessionId, streamId: nil)]
        case .request(let sessionId, let requestId, let request, let now, let newId):
            guard let session = sessions[sessionId] else {
                return [send(sessionId, requestId, .failure(.init(status: .unauthorized, message: "no such session")))]
            }
            switch request {
            case .publish(let publish):
                return self.publish(publish, sessionId: sessionId, session: session, requestId: requestId, now: now, streamId: newId)
            case .subscribe(let subscribe):
                return self.subscribe(subscribe, sessionId: sessionId, session: session, requestId: requestId, now: now, subscriberId: newId)
            case .unpublish(let unpublish):
                return self.unpublish(unpublish, sessionId: sessionId, requestId: requestId)
            case .unsubscribe(let reference):
                return self.unsubscribe(reference.streamId, subscriberId: reference.subscriberId, sessionId: sessionId, requestId: requestId)
            case .limitBandwidth(let request):
                return limitBandwidth(request, sessionId: sessionId, requestId: requestId)
            case .setViewSize(let request):
                return setViewSize(request, sessionId: sessionId, requestId: requestId)
            case .publisherQuality(let quality):
                return publisherQuality(quality, sessionId: sessionId, requestId: requestId)
            case .room, .publishRemote, .stopIngest:
                // Rooms are the RoomRegistry's; the platform never hands them here.
                return [send(sessionId, requestId, .failure(.init(status: .badRequest, message: "not a stream request")))]
            }
        case .publisherAdded(let streamId, let result):
            return publisherAdded(streamId, result)
        case .subscriberAdded(let streamId, let subscriberId, let result):
            return subscriberAdded(streamId, subscriberId, result)
        case .endStream(let streamId, let reason, let description):
            guard streams[streamId] != nil else { return [] }
            return end(streamId, reason: reason, description: description, skipping: nil)
        case .sessionClosed(let sessionId, let how):
            return sessionClosed(sessionId, how)
        case .remoteStreamPublished(let shared):
            return remotePublished(shared)
        case .remoteStreamEnded(let streamId, let reason, let description):
            guard let record = streams[streamId] else { return [] }
            guard record.originNodeId == nil else { return end(streamId, reason: reason, description: description, skipping: nil) }
            // A stream published here, withdrawn by another node that took this one for gone (it
            // could not reach the store for longer than the node expiry): it lives, so it is
            // announced again.
            return [.persist(.saveStream(record.shared(nodeId: nodeId))),
                    .log(.notice, "another node withdrew a stream published here (it took this node for gone): announced again",
                         sessionId: record.publisherSessionId, streamId: streamId)]
        case .remoteNodeGone(let nodeId, let reason, let description):
            return streamIds(ofNode: nodeId).flatMap { end($0, reason: reason, description: description, skipping: nil) }
        case .edgeViewerLimit(let streamId, let nodeId, let bitsPerSecond):
            guard let record = streams[streamId], record.originNodeId == nil else { return [] }
            return setViewerLimit(bitsPerSecond, streamId: streamId, subscriberId: Self.edgeLimitKey(nodeId))
        case .subscriberVideo(let event):
            // Only to the session that still holds that subscription.
            guard let sessionId = streams[event.streamId]?.subscribers.first(where: { $0.subscriberId == event.subscriberId })?.sessionId
            else { return [] }
            let what = event.suspended ? "video suspended: the subscriber's leg cannot carry it (audio only)" : "video resumed"
            return [.send(sessionId: sessionId, .event(.subscriberVideo(event))),
                    .log(.info, "\(what) for subscriber \(event.subscriberId)", sessionId: sessionId, streamId: event.streamId)]
        }
    }

    // MARK: Publish

    private mutating func publish(
        _ request: ClientMessage.Publish, sessionId: String, session: Session, requestId: UInt64?, now: Date, streamId: String
    ) -> [Action] {
        func fail(_ status: RequestStatus, _ message: String) -> [Action] {
            [send(sessionId, requestId, .failure(.init(status: status, message: message))),
             .log(.notice, "publish refused: \(message)", sessionId: sessionId, streamId: nil)]
        }
        let tags: [String], streaming: Bool
        switch tokens.authorizePublish(request.streamToken, tags: request.tags, tracks: request.tracks, publishType: request.publishType,
                                       streamName: request.streamName, sessionId: sessionId, remoteAddress: session.remoteAddress, now: now) {
        case .failure(let failure): return fail(failure.status, failure.message)
        case .success(let authorized): (tags, streaming) = (authorized.tags, authorized.claims.capabilities.contains(Self.streamingCapability))
        }
        guard streams[streamId] == nil, pendingPublishes[streamId] == nil else {
            return fail(.conflict, "stream id '\(streamId)' is taken")
        }
        pendingPublishes[streamId] = PendingPublish(sessionId: sessionId, requestId: requestId, request: request, tags: tags, streaming: streaming, at: now)
        return [.addPublisher(streamId: streamId, tracks: request.tracks)]
    }

    private mutating func publisherAdded(_ streamId: String, _ result: Result<MediaTransport, RelayError>) -> [Action] {
        guard let pending = pendingPublishes.removeValue(forKey: streamId) else {
            // Nobody waits for it (cannot happen when results follow their actions); do not leak the flow.
            if case .success = result { return [.removeStream(streamId: streamId)] }
            return []
        }
        switch result {
        case .failure(let error):
            return [
                send(pending.sessionId, pending.requestId, .failure(Self.failure(for: error))),
                .log(.warning, "relay refused publisher: \(error)", sessionId: pending.sessionId, streamId: streamId),
            ]
        case .success(let transport):
            guard sessions[pending.sessionId] != nil else {
                // The session ended while the relay was being asked.
                return [.removeStream(streamId: streamId)]
            }
            nextSequence += 1
            let record = StreamRecord(
                streamId: streamId, publisherSessionId: pending.sessionId, tags: pending.tags,
                tracks: pending.request.tracks, publishType: pending.request.publishType,
                streamName: pending.request.streamName, sequence: nextSequence,
                publishedAt: Int64((pending.at.timeIntervalSince1970 * 1000).rounded()), originNodeId: nil)
            streams[streamId] = record
            sessions[pending.sessionId]?.published.append(streamId)
            var actions: [Action] = [
                send(pending.sessionId, pending.requestId, .published(.init(streamId: streamId, transport: transport))),
                .persist(.saveStream(record.shared(nodeId: nodeId))),
                .log(.info, "stream published (tags: \(pending.tags.joined(separator: ", ")))", sessionId: pending.sessionId, streamId: streamId),
                .notify(.started, record, reason: nil, description: nil),
            ]
            if pending.request.publishType != .live, let name = pending.request.streamName {
                actions.append(.record(streamId: streamId, name: name, type: pending.request.publishType))
            }
            if pending.streaming { actions.append(.deliverHLS(streamId: streamId)) }
            return actions
        }
    }

    // MARK: Subscribe

    private mutating func subscribe(
        _ request: ClientMessage.Subscribe, sessionId: String, session: Session, requestId: UInt64?, now: Date, subscriberId: String
    ) -> [Action] {
        func fail(_ status: RequestStatus, _ message: String) -> [Action] {
            [send(sessionId, requestId, .failure(.init(status: status, message: message))),
             .log(.notice, "subscribe refused: \(message)", sessionId: sessionId, streamId: nil)]
        }
        let claims: TokenClaims
        switch tokens.check(request.streamToken, as: .stream, sessionId: sessionId, remoteAddress: session.remoteAddress, now: now) {
        case .failure(let failure): return fail(failure.status, failure.message)
        case .success(let checked): claims = checked
        }
        let record: StreamRecord
        switch resolve(claims) {
        case .failure(let failure): return fail(failure.status, failure.message)
        case .success(let found): record = found
        }
        // A simulcast's layers reach a viewer as one video track; the relay picks the layer.
        var tracks = record.tracks.asReceived
        if let kind = TokenAuthority.onlyKind(claims) {
            tracks = tracks.filter { $0.kind == kind }
            if tracks.isEmpty { return fail(.notFound, "stream '\(record.streamId)' has no \(kind.rawValue) track") }
        }
        if deliversHLS, claims.capabilities.contains(Self.streamingCapability), !claims.capabilities.contains("real-time"),
           TokenAuthority.onlyKind(claims) == nil {
            let source = ServerMessage.StreamingSource(streamId: record.streamId, playlistPath: HLSAddress.playlistPath(record.streamId), tracks: tracks)
            return [send(sessionId, requestId, .streamingSource(source)), .deliverHLS(streamId: record.streamId),
                    .log(.info, "subscribed as HLS", sessionId: sessionId, streamId: record.streamId)]
        }
        guard pendingSubscribes[subscriberId] == nil, !record.subscribers.contains(where: { $0.subscriberId == subscriberId }) else {
            return fail(.conflict, "subscriber id '\(subscriberId)' is taken")
        }
        if let layer = request.layer {
            let rids = Set(record.tracks.compactMap(\.layer?.rid))
            guard layer == SimulcastLayer.best || layer == SimulcastLayer.lowest || rids.contains(layer) else {
                return fail(.badRequest, "stream '\(record.streamId)' has no layer '\(layer)' (its layers: \(rids.sorted()); or best, lowest)")
            }
        }
        if let limit = maximumViewers, subscriberCount + pendingSubscribes.count >= limit {
            return fail(.capacity, "this node serves its limit of \(limit) viewers")
        }
        pendingSubscribes[subscriberId] = PendingSubscribe(sessionId: sessionId, requestId: requestId, streamId: record.streamId, tracks: tracks,
                                                           layer: request.layer, ceiling: QualityCeiling(capabilities: claims.capabilities)?.box,
                                                           tags: request.tags ?? [])
        return [.addSubscriber(streamId: record.streamId, subscriberId: subscriberId)]
    }

    /// Which stream a stream token names (see the type's documentation).
    private func resolve(_ claims: TokenClaims) -> Result<StreamRecord, ServerMessage.Failure> {
        let required = claims.requiredTag?.rawValue
        if let origin = claims.originStreamId {
            guard let record = streams[origin] else {
                return .failure(.init(status: .notFound, message: "no stream '\(origin)'"))
            }
            if let required, !record.tags.contains(required) {
                return .failure(.init(status: .unauthorized, message: "stream '\(origin)' does not carry the token's required tag '\(required)'"))
            }
            return .success(record)
        }
        if let required {
            let newest = newestStream(tagged: required)
            guard let newest else {
                return .failure(.init(status: .noStreamPlaying, message: "no stream carries tag '\(required)'"))
            }
            return .success(newest)
        }
        return .failure(.init(status: .badRequest, message: "the stream token names no stream (no originStreamId or requiredTag)"))
    }

    private mutating func subscriberAdded(_ streamId: String, _ subscriberId: String, _ result: Result<MediaTransport, RelayError>) -> [Action] {
        guard let pending = pendingSubscribes.removeValue(forKey: subscriberId) else {
            // Its session ended while the relay was being asked: do not leak the flow.
            if case .success = result { return [.removeSubscriber(streamId: streamId, subscriberId: subscriberId)] }
            return []
        }
        switch result {
        case .failure(let error):
            return [
                send(pending.sessionId, pending.requestId, .failure(Self.failure(for: error))),
                .log(.warning, "relay refused subscriber: \(error)", sessionId: pending.sessionId, streamId: pending.streamId),
            ]
        case .success(let transport):
            guard streams[pending.streamId] != nil, sessions[pending.sessionId] != nil else {
                var actions: [Action] = [.removeSubscriber(streamId: pending.streamId, subscriberId: subscriberId)]
                if sessions[pending.sessionId] != nil {
                    actions.append(send(pending.sessionId, pending.requestId, .failure(.init(status: .notFound, message: "stream '\(pending.streamId)' ended"))))
                }
                return actions
            }
            streams[pending.streamId]?.subscribers.append((subscriberId, pending.sessionId))
            sessions[pending.sessionId]?.subscriptions[subscriberId] = pending.streamId
            var actions: [Action] = []
            // Before the reply: the relay has it before the viewer's first packet can arrive.
            if let layer = pending.layer { actions.append(.pinLayer(streamId: pending.streamId, subscriberId: subscriberId, layer: layer)) }
            // A token's quality ceiling: no larger layer of a simulcast than fits its box.
            if let ceiling = pending.ceiling {
                streams[pending.streamId]?.viewCeilings[subscriberId] = ceiling
                if streams[pending.streamId]?.tracks.contains(where: { $0.layer != nil }) == true {
                    actions.append(.sizeSubscriber(streamId: pending.streamId, subscriberId: subscriberId, size: ceiling))
                }
            }
            if !pending.tags.isEmpty { streams[pending.streamId]?.subscriberTags[subscriberId] = pending.tags }
            actions += [
                send(pending.sessionId, pending.requestId, .subscribed(.init(streamId: pending.streamId, tracks: pending.tracks, transport: transport, subscriberId: subscriberId))),
                .log(.info, "subscribed (\(subscriberId))" + (pending.tags.isEmpty ? "" : " (tags: \(pending.tags.joined(separator: ", ")))"),
                     sessionId: pending.sessionId, streamId: pending.streamId),
                .notifyViewer(.subscriberStarted, streamId: pending.streamId, subscriberId: subscriberId, sessionId: pending.sessionId,
                              tags: pending.tags, reason: nil, description: nil),
            ]
            if let quality = streams[pending.streamId]?.publisherQuality, quality != .none {
                actions.append(.send(sessionId: pending.sessionId, .event(.publisherQuality(.init(streamId: pending.streamId, reason: quality)))))
            }
            return actions
        }
    }

    // MARK: Unpublish, unsubscribe, end

    private mutating func unpublish(_ request: ClientMessage.Unpublish, sessionId: String, requestId: UInt64?) -> [Action] {
        guard let record = streams[request.streamId] else {
            return [send(sessionId, requestId, .failure(.init(status: .notFound, message: "no stream '\(request.streamId)'")))]
        }
        guard record.publisherSessionId == sessionId else {
            return [send(sessionId, requestId, .failure(.init(status: .unauthorized, message: "stream '\(request.streamId)' is not published by this session")))]
        }
        guard request.reason != .censored else {
            return [send(sessionId, requestId, .failure(.init(status: .badRequest, message: "'censored' is reserved for the platform operator")))]
        }
        return [send(sessionId, requestId, .ok)] + end(request.streamId, reason: request.reason, description: request.description, skipping: nil)
    }

    private mutating func unsubscribe(_ streamId: String, subscriberId named: String?, sessionId: String, requestId: UInt64?) -> [Action] {
        // The named subscription of this session, or (one subscribe, one unsubscribe) its oldest.
        guard let subscriberId = streams[streamId]?.subscribers.first(where: {
            $0.sessionId == sessionId && (named == nil || $0.subscriberId == named)
        })?.subscriberId else {
            return [send(sessionId, requestId, .failure(.init(status: .notFound, message: "this session does not subscribe to '\(streamId)'")))]
        }
        sessions[sessionId]?.subscriptions[subscriberId] = nil
        streams[streamId]?.subscribers.removeAll { $0.subscriberId == subscriberId }
        streams[streamId]?.viewCeilings[subscriberId] = nil
        let tags = streams[streamId]?.subscriberTags.removeValue(forKey: subscriberId) ?? []
        return [
            .removeSubscriber(streamId: streamId, subscriberId: subscriberId),
            send(sessionId, requestId, .ok),
            .log(.info, "unsubscribed (\(subscriberId))", sessionId: sessionId, streamId: streamId),
            .notifyViewer(.subscriberEnded, streamId: streamId, subscriberId: subscriberId, sessionId: sessionId, tags: tags,
                          reason: .ended, description: "unsubscribed"),
        ] + setViewerLimit(nil, streamId: streamId, subscriberId: subscriberId)
    }

    /// The publisher's quality reason, passed on to the stream's viewers when it changes.
    private mutating func publisherQuality(_ quality: ClientMessage.PublisherQuality, sessionId: String, requestId: UInt64?) -> [Action] {
        guard var record = streams[quality.streamId] else {
            return [send(sessionId, requestId, .failure(.init(status: .notFound, message: "no stream '\(quality.streamId)'")))]
        }
        guard record.publisherSessionId == sessionId else {
            return [send(sessionId, requestId, .failure(.init(status: .unauthorized, message: "stream '\(quality.streamId)' is not published by this session")))]
        }
        var actions = [send(sessionId, requestId, .ok)]
        guard record.publisherQuality != quality.reason else { return actions }
        record.publisherQuality = quality.reason
        streams[quality.streamId] = record
        let event = Envelope<ServerMessage>.event(.publisherQuality(quality))
        for subscriber in record.subscribers { actions.append(.send(sessionId: subscriber.sessionId, event)) }
        // Other nodes' viewers hear it through the directory.
        actions.append(.persist(.saveStream(record.shared(nodeId: nodeId))))
        return actions
    }

    /// A viewer's request for at most `bitsPerSecond` of video from the stream's publisher.
    private mutating func limitBandwidth(_ request: ClientMessage.LimitBandwidth, sessionId: String, requestId: UInt64?) -> [Action] {
        guard let subscriberId = streams[request.streamId]?.subscribers.first(where: {
            $0.sessionId == sessionId && (request.subscriberId == nil || $0.subscriberId == request.subscriberId)
        })?.subscriberId else {
            return [send(sessionId, requestId, .failure(.init(status: .notFound, message: "this session does not subscribe to '\(request.streamId)'")))]
        }
        if streams[request.streamId]?.tracks.contains(where: { $0.layer != nil }) == true {
            // Each viewer of a simulcast is sent the layer under its own limit; the others keep theirs.
            return [send(sessionId, requestId, .ok),
                    .limitSubscriber(streamId: request.streamId, subscriberId: subscriberId, bitsPerSecond: request.bitsPerSecond)]
        }
        var actions = [send(sessionId, requestId, .ok)]
        if streams[request.streamId]?.mayBeLayered == true {
            // Scalable layers (the relay learns from the packets whether there are any): the
            // relay sends this viewer the layers under its limit; a single layer's publisher is asked.
            actions.append(.limitSubscriber(streamId: request.streamId, subscriberId: subscriberId, bitsPerSecond: request.bitsPerSecond))
        }
        return actions + setViewerLimit(request.bitsPerSecond, streamId: request.streamId, subscriberId: subscriberId)
    }

    /// A viewer's view size: of a simulcast, the relay chooses its layer by it; a single encoding
    /// is what it is (the publisher is not asked to change it for one viewer).
    private mutating func setViewSize(_ request: ClientMessage.SetViewSize, sessionId: String, requestId: UInt64?) -> [Action] {
        guard let subscriberId = streams[request.streamId]?.subscribers.first(where: {
            $0.sessionId == sessionId && (request.subscriberId == nil || $0.subscriberId == request.subscriberId)
        })?.subscriberId else {
            return [send(sessionId, requestId, .failure(.init(status: .notFound, message: "this session does not subscribe to '\(request.streamId)'")))]
        }
        guard let record = streams[request.streamId], record.tracks.contains(where: { $0.layer != nil }) || record.mayBeLayered else {
            return [send(sessionId, requestId, .ok)]
        }
        // Never above the token's quality ceiling.
        var size = request.size
        if let ceiling = streams[request.streamId]?.viewCeilings[subscriberId] {
            size = size.map { ViewSize(width: min($0.width, ceiling.width), height: min($0.height, ceiling.height)) } ?? ceiling
        }
        return [send(sessionId, requestId, .ok), .sizeSubscriber(streamId: request.streamId, subscriberId: subscriberId, size: size)]
    }

    /// Records one viewer's limit; tells the publisher when the lowest limit changes.
    private mutating func setViewerLimit(_ bitsPerSecond: Int?, streamId: String, subscriberId: String) -> [Action] {
        guard var record = streams[streamId] else { return [] }
        let before = record.viewerLimit
        record.viewerLimits[subscriberId] = bitsPerSecond
        streams[streamId] = record
        guard record.viewerLimit != before else { return [] }
        if let origin = record.originNodeId {
            // The publisher is another node's: that node takes this node's lowest as one viewer's.
            return [.forwardViewerLimit(streamId: streamId, originNodeId: origin, bitsPerSecond: record.viewerLimit)]
        }
        return [
            .send(sessionId: record.publisherSessionId, .event(.bandwidthLimit(.init(streamId: streamId, bitsPerSecond: record.viewerLimit)))),
            .log(.info, "viewers ask for at most \(record.viewerLimit.map { "\($0) bit/s" } ?? "any bitrate")", sessionId: record.publisherSessionId, streamId: streamId),
        ]
    }

    /// Ends a stream: events to subscribers then publisher (except `skipping`), relay removal.
    private mutating func end(_ streamId: String, reason: StreamEndedReason, description: String?, skipping: String?) -> [Action] {
        guard let record = streams.removeValue(forKey: streamId) else { return [] }
        let event = Envelope<ServerMessage>.event(.streamEnded(.init(streamId: streamId, reason: reason, description: description)))
        var actions: [Action] = [.removeStream(streamId: streamId)]
        for subscriber in record.subscribers {
            sessions[subscriber.sessionId]?.subscriptions[subscriber.subscriberId] = nil
            if subscriber.sessionId != skipping { actions.append(.send(sessionId: subscriber.sessionId, event)) }
            actions.append(.notifyViewer(.subscriberEnded, streamId: streamId, subscriberId: subscriber.subscriberId, sessionId: subscriber.sessionId,
                                         tags: record.subscriberTags[subscriber.subscriberId] ?? [], reason: reason, description: description))
        }
        let why = description.map { "\(reason.rawValue): \($0)" } ?? reason.rawValue
        guard record.originNodeId == nil else {
            // Its publisher is another node's; that node withdraws it from the directory.
            actions.append(.log(.info, "stream of node \(record.originNodeId!) ended (\(why))", sessionId: nil, streamId: streamId))
            return actions
        }
        sessions[record.publisherSessionId]?.published.removeAll { $0 == streamId }
        if record.publisherSessionId != skipping { actions.append(.send(sessionId: record.publisherSessionId, event)) }
        actions.append(.persist(.deleteStream(streamId: streamId, reason: reason, description: description)))
        actions.append(.log(.info, "stream ended (\(why))", sessionId: record.publisherSessionId, streamId: streamId))
        actions.append(.notify(.ended, record, reason: reason, description: description))
        return actions
    }

    /// The key under which an edge node's lowest viewer limit is kept among a stream's viewers'.
    static func edgeLimitKey(_ nodeId: String) -> String { "edge@\(nodeId)" }

    /// Another node's stream, as its directory entry says.
    private mutating func remotePublished(_ shared: SharedStream) -> [Action] {
        let existing = streams[shared.streamId]
        // Never let another node's entry take over a stream published here.
        if let existing, existing.originNodeId == nil { return [] }
        if existing == nil { nextSequence += 1 }
        var record = StreamRecord(
            streamId: shared.streamId, publisherSessionId: shared.publisherSessionId, tags: shared.tags, tracks: shared.tracks,
            publishType: shared.publishType, streamName: shared.streamName, sequence: existing?.sequence ?? nextSequence,
            publishedAt: shared.publishedAt, originNodeId: shared.nodeId)
        // A changed entry (tags, quality) keeps what this node knows of the stream.
        record.subscribers = existing?.subscribers ?? []
        record.viewerLimits = existing?.viewerLimits ?? [:]
        record.viewCeilings = existing?.viewCeilings ?? [:]
        record.publisherQuality = shared.publisherQuality ?? .none
        streams[shared.streamId] = record
        guard let existing else {
            return [.log(.info, "stream published on node \(shared.nodeId) (tags: \(shared.tags.joined(separator: ", ")))",
                         sessionId: nil, streamId: shared.streamId)]
        }
        guard record.publisherQuality != existing.publisherQuality else { return [] }
        // The publisher's quality reason, told to this node's viewers as the origin tells its own.
        let event = Envelope<ServerMessage>.event(.publisherQuality(.init(streamId: shared.streamId, reason: record.publisherQuality)))
        return record.subscribers.map { .send(sessionId: $0.sessionId, event) }
    }

    private mutating func sessionClosed(_ sessionId: String, _ how: SessionEnd) -> [Action] {
        guard let session = sessions[sessionId] else { return [] }
        var actions: [Action] = []
        for streamId in session.published {
            actions += end(streamId, reason: how.streamEndedReason, description: how.streamEndedDescription, skipping: sessionId)
        }
        // Subscriptions left (those on streams that just ended are gone already).
        for (subscriberId, streamId) in (sessions[sessionId]?.subscriptions ?? [:]).sorted(by: { $0.key < $1.key }) {
            streams[streamId]?.subscribers.removeAll { $0.subscriberId == subscriberId }
            streams[streamId]?.viewCeilings[subscriberId] = nil
            let tags = streams[streamId]?.subscriberTags.removeValue(forKey: subscriberId) ?? []
            actions.append(.removeSubscriber(streamId: streamId, subscriberId: subscriberId))
            actions.append(.notifyViewer(.subscriberEnded, streamId: streamId, subscriberId: subscriberId, sessionId: sessionId, tags: tags,
                                         reason: how.streamEndedReason, description: how.streamEndedDescription))
            actions += setViewerLimit(nil, streamId: streamId, subscriberId: subscriberId)
        }
        sessions[sessionId] = nil
        for (id, pending) in pendingPublishes where pending.sessionId == sessionId { pendingPublishes[id] = nil }
        for (id, pending) in pendingSubscribes where pending.sessionId == sessionId { pendingSubscribes[id] = nil }
        actions.append(.log(.info, "session closed (\(how))", sessionId: sessionId, streamId: nil))
        return actions
    }

    // MARK: Helpers

    private func send(_ sessionId: String, _ requestId: UInt64?, _ message: ServerMessage) -> Action {
        .send(sessionId: sessionId, Envelope(id: requestId, message))
    }

    /// The typed failure for a relay refusal.
    static func failure(for error: RelayError) -> ServerMessage.Failure {
        switch error {
        case .streamNotFound: return .init(status: .notFound, message: error.description)
        case .streamExists, .ssrcInUse, .iceUfragInUse: return .init(status: .conflict, message: error.description)
        case .webRTCUnavailable: return .init(status: .badRequest, message: error.description)
        case .cascadeUnavailable, .invalidUpstream: return .init(status: .failed, message: error.description)
        case .invalidTracks: return .init(status: .badRequest, message: error.description)
        case .stopped: return .init(status: .capacity, message: error.description)
        case .socket: return .init(status: .failed, message: error.description)
        }
    }
}
