import Crypto
import Foundation
import Logging
import PCastContracts
import PCastProtocol

// The platform carrying out what its pure parts decide: session, room and registry actions, and
// the messages and relay calls they become.

extension Platform {
    // MARK: Carrying out actions

    func handleSession(_ sessionId: String, _ event: SessionStateMachine.Event) {
        guard var connection = connections[sessionId] else { return }
        let actions = connection.machine.handle(event)
        connections[sessionId] = connection
        // Events held for a resumed session go out after the reply that says it resumed.
        var resumedHeld: [Envelope<ServerMessage>] = []
        defer {
            for envelope in resumedHeld { deliver(envelope, to: connection) }
        }
        for action in actions {
            switch action {
            case .send(var envelope):
                // A resumed session learns which of its streams the platform still has.
                if case .authenticated(var authenticated) = envelope.message, authenticated.resumed == true {
                    authenticated.streams = registry.streamIds(ofSession: authenticated.sessionId)
                    envelope.message = .authenticated(authenticated)
                }
                deliver(envelope, to: connection)
            case .opened(let id):
                // A resume authenticated on a new connection while the old one still holds the
                // session (a silent path keeps it open until the keep-alive timeout): that
                // connection is dead to the client, so it is dropped now and the session moves here.
                if connection.machine.resumed, let previous = connectionOfSession[id], previous != sessionId,
                   let old = connections[previous], !old.machine.isClosed {
                    old.logger.info("the client resumed on a new connection; dropping this one")
                    handleSession(previous, .disconnected)
                    old.outbox.yield(.close(.policyViolation, reason: "the session resumed on another connection"))
                    old.outbox.finish()
                }
                connection.logger.info(connection.machine.resumed ? "session resumed" : "session authenticated",
                                       metadata: ["pcast.session": .string(id)])
                sessionOfConnection[sessionId] = id
                connectionOfSession[id] = sessionId
                let keyHash = Self.hash(connection.machine.resumeKey)
                resumable[id] = (keyHash, true, nil)
                persistence.submit([.saveSession(sessionId: id, resumeKeyHash: keyHash, roles: connection.machine.roles.map { $0.sorted { $0.rawValue < $1.rawValue } })])
                perform(registry: .sessionOpened(sessionId: id, remoteAddress: connection.machine.remoteAddress))
                perform(rooms: .sessionOpened(sessionId: id, roles: connection.machine.roles, now: clock()))
                resumedHeld = held.removeValue(forKey: id) ?? []
            case .request(let id, let requestId, let request):
                let newId: String
                switch request {
                case .publish(let publish):
                    if publish.publishType != .live, recordings == nil {
                        deliver(Envelope(id: requestId, .failure(.init(status: .notSupported, message:
                            "publish type '\(publish.publishType.rawValue)' records, and this platform node runs no recording service"))), to: connection)
                        continue
                    }
                    newId = Self.makeId("stream")
                case .subscribe: newId = Self.makeId("subscriber")
                case .unpublish, .unsubscribe, .limitBandwidth, .setViewSize, .publisherQuality: newId = ""
                case .room(let roomRequest):
                    if case .createRoom = roomRequest { newId = Self.makeId("room") } else { newId = "" }
                    perform(rooms: .request(sessionId: id, requestId: requestId, roomRequest, now: clock(), newId: newId))
                    continue
                case .publishRemote(let remote):
                    // The token and what it may publish are checked before the platform connects
                    // anywhere: a session with only an auth token must not make it open sources.
                    if case .failure(let failure) = tokens.authorizePublish(
                        remote.streamToken, tags: remote.tags, tracks: nil, publishType: remote.publishType, streamName: remote.streamName,
                        sessionId: id, remoteAddress: connection.machine.remoteAddress, now: clock()) {
                        connection.logger.notice("ingest refused", metadata: ["pcast.reason": .string(failure.message)])
                        deliver(Envelope(id: requestId, .failure(failure)), to: connection)
                        continue
                    }
                    guard let ingest = self.ingest else {
                        deliver(Envelope(id: requestId, .failure(.init(status: .notSupported, message: "this platform node runs no ingest service"))), to: connection)
                        continue
                    }
                    Task {
                        switch await ingest.start(owner: id, remote) {
                        case .success(let started): self.reply(to: id, requestId: requestId, .ingestStarted(started))
                        case .failure(let failure): self.reply(to: id, requestId: requestId, .failure(failure))
                        }
                    }
                    continue
                case .stopIngest(let reference):
                    guard let ingest = self.ingest else {
                        deliver(Envelope(id: requestId, .failure(.init(status: .notFound, message: "no ingest '\(SignalingError.clipped(reference.streamId))'"))), to: connection)
                        continue
                    }
                    Task {
                        if let failure = await ingest.stop(reference.streamId, by: id) {
                            self.reply(to: id, requestId: requestId, .failure(failure))
                        } else {
                            self.reply(to: id, requestId: requestId, .ok)
                        }
                    }
                    continue
                }
                perform(registry: .request(sessionId: id, requestId: requestId, request, now: clock(), newId: newId))
            case .close(let code, let reason):
                connection.logger.info("closing signaling connection", metadata: ["pcast.close": "\(code.rawValue) \(reason)"])
                connection.outbox.yield(.close(code, reason: reason))
                connection.outbox.finish()
            case .ended(let id, let how):
                switch how {
                case .bye:
                    // An orderly end: streams end, every room is left, and the session cannot be resumed.
                    perform(registry: .sessionClosed(sessionId: id, how))
                    if let ingest { Task { await ingest.ownerEnded(id) } }
                    perform(rooms: .sessionEnded(sessionId: id))
                    resumable[id] = nil
                    persistence.submit([.deleteSession(sessionId: id)])
                case .serverShutdown:
                    // Kept as it is in the store: the restarted platform offers it for resumption.
                    perform(registry: .sessionClosed(sessionId: id, how))
                case .connectionLost, .keepAliveTimeout, .messageTooLarge:
                    // Media does not go through signaling: the session's streams, subscriptions,
                    // ingests and memberships wait for it to resume (see `tick`).
                    let now = clock()
                    perform(registry: .sessionDetached(sessionId: id))
                    perform(rooms: .sessionDetached(sessionId: id, now: now))
                    if let entry = resumable[id] { resumable[id] = (entry.keyHash, false, now.addingTimeInterval(configuration.resumeWindow)) }
                }
            }
        }
        updateGauges()
    }

    func perform(rooms event: RoomRegistry.Event) {
        let actions = rooms.handle(event)
        for action in actions {
            switch action {
            case .send(let sessionId, let envelope):
                if let connection = connection(of: sessionId), !connection.machine.isClosed {
                    deliver(envelope, to: connection)
                }
            case .persist(let changes):
                persistence.submit(changes)
            case .queryChat(let sessionId, let requestId, let roomId, let batchSize, let after, let before):
                let persistence = self.persistence
                Task {
                    let reply: ServerMessage
                    do throws(RoomStoreError) {
                        let messages = try await persistence.chatMessages(roomId: roomId, batchSize: batchSize, after: after, before: before)
                        reply = .chatMessages(.init(messages: messages))
                    } catch {
                        reply = .failure(.init(status: .failed, message: "chat history unavailable: \(error)"))
                    }
                    self.reply(to: sessionId, requestId: requestId, reply)
                }
            case .log(let level, let message, let sessionId, let roomId):
                var metadata: Logger.Metadata = [:]
                if let sessionId { metadata["pcast.session"] = .string(sessionId) }
                if let roomId { metadata["pcast.room"] = .string(roomId) }
                logger.log(level: level, "\(message)", metadata: metadata)
            }
        }
    }

    func reply(to sessionId: String, requestId: UInt64?, _ message: ServerMessage) {
        if let connection = connection(of: sessionId), !connection.machine.isClosed {
            deliver(Envelope(id: requestId, message), to: connection)
        }
    }

    /// The connection that holds a session (its id differs from the connection's after a resume).
    func connection(of sessionId: String) -> Connection? {
        connections[connectionOfSession[sessionId] ?? sessionId]
    }

    func forget(connection id: String) {
        if let session = sessionOfConnection.removeValue(forKey: id), connectionOfSession[session] == id {
            connectionOfSession[session] = nil
        }
    }

    func perform(registry event: StreamRegistry.Event) {
        var queue = [event]
        while !queue.isEmpty {
            let actions = registry.handle(queue.removeFirst())
            for action in actions {
                switch action {
                case .send(let sessionId, let envelope) where webRTCSessions.isWebRTC(sessionId):
                    webRTCSessions.reply(envelope.message, to: sessionId)
                case .send(let sessionId, let envelope):
                    // A session that closed gets nothing more (its writer has finished); a
                    // detached one gets it when it resumes.
                    if let connection = connection(of: sessionId), !connection.machine.isClosed {
                        deliver(envelope, to: connection)
                    } else if registry.isDetached(sessionId), envelope.id == nil {
                        var queue = held[sessionId] ?? []
                        if queue.count < Self.heldLimit { queue.append(envelope) }
                        held[sessionId] = queue
                    }
                case .addPublisher(let streamId, let tracks):
                    let result: Result<MediaTransport, RelayError>
                    if let peer = webRTCSessions.takePendingPeer(streamId) {
                        do throws(RelayError) {
                            try relay.addWebRTCPublisher(streamId: streamId, tracks: tracks, peer: peer)
                            result = .success(WebRTCSessions.dtlsTransport(port: relay.mediaPort))
                        } catch { result = .failure(error) }
                    } else {
                        do throws(RelayError) { result = .success(try relay.addPublisher(streamId: streamId, tracks: tracks)) } catch { result = .failure(error) }
                    }
                    queue.append(.publisherAdded(streamId: streamId, result))
                case .addSubscriber(let streamId, let subscriberId):
                    if let origin = registry.stream(streamId)?.originNodeId, !isPulling(streamId) {
                        // Another node's stream: pulled here first (once for all its viewers).
                        Task { await self.subscribeRemote(streamId, subscriberId, origin: origin) }
                        continue
                    }
                    queue.append(.subscriberAdded(streamId: streamId, subscriberId: subscriberId, addToRelay(streamId, subscriberId)))
                case .removeSubscriber(let streamId, let subscriberId):
                    relay.removeSubscriber(streamId: streamId, subscriberId: subscriberId)
                case .removeStream(let streamId):
                    relay.removeStream(streamId: streamId)
                    // Its edges' flows went with it; a leg pulled from another node is gone.
                    edges[streamId] = nil
                    limitCalls[streamId] = nil
                    if case .open? = legs[streamId] { legs[streamId] = nil }
                case .persist(let change):
                    persistence.submit([change])
                case .forwardViewerLimit(let streamId, let origin, let bitsPerSecond):
                    forwardViewerLimit(streamId, to: origin, bitsPerSecond: bitsPerSecond)
                case .limitSubscriber(let streamId, let subscriberId, let bitsPerSecond):
                    relay.limitSubscriber(streamId: streamId, subscriberId: subscriberId, bitsPerSecond: bitsPerSecond)
                case .sizeSubscriber(let streamId, let subscriberId, let size):
                    relay.setSubscriberViewSize(streamId: streamId, subscriberId: subscriberId, size: size)
                case .pinLayer(let streamId, let subscriberId, let layer):
                    relay.pinSubscriberLayer(streamId: streamId, subscriberId: subscriberId, layer: layer)
                case .record(let streamId, let name, let type):
                    // A node without a recorder refused the recording publish before it got here.
                    if let recordings { Task { await recordings.start(streamId: streamId, name: name, type: type) } }
                case .deliverHLS(let streamId):
                    if let hls { Task { await hls.start(streamId: streamId) } }
                case .notify(let kind, let record, let reason, let description):
                    notifier?.enqueue(StreamNotification(
                        type: kind, id: Self.makeId("notification"), applicationId: configuration.applicationId, streamId: record.streamId,
                        sessionId: record.publisherSessionId, tags: record.tags, publishType: record.publishType, streamName: record.streamName,
                        reason: reason, description: description, timestamp: Int64((clock().timeIntervalSince1970 * 1000).rounded())))
                case .notifyViewer(let kind, let streamId, let subscriberId, let sessionId, let tags, let reason, let description):
                    guard configuration.streamNotifications?.includeViewers == true else { continue }
                    notifier?.enqueue(StreamNotification(
                        type: kind, id: Self.makeId("notification"), applicationId: configuration.applicationId, streamId: streamId,
                        sessionId: sessionId, subscriberId: subscriberId, tags: tags, publishType: nil, reason: reason, description: description,
                        timestamp: Int64((clock().timeIntervalSince1970 * 1000).rounded())))
                case .log(let level, let message, let sessionId, let streamId):
                    var metadata: Logger.Metadata = [:]
                    if let sessionId { metadata["pcast.session"] = .string(sessionId) }
                    if let streamId { metadata["pcast.stream"] = .string(streamId) }
                    if let sessionId, let remote = connection(of: sessionId)?.machine.remoteAddress { metadata["pcast.remote"] = .string(remote) }
                    logger.log(level: level, "\(message)", metadata: metadata)
                }
            }
        }
        releaseIdleLegs()
        updateGauges()
    }

    /// Opens a subscriber flow on the relay (a WebRTC viewer's when one waits for it).
    func addToRelay(_ streamId: String, _ subscriberId: String) -> Result<MediaTransport, RelayError> {
        if let peer = webRTCSessions.takePendingPeer(subscriberId) {
            do throws(RelayError) {
                try relay.addWebRTCViewer(streamId: streamId, subscriberId: subscriberId, peer: peer)
                return .success(WebRTCSessions.dtlsTransport(port: relay.mediaPort))
            } catch { return .failure(error) }
        }
        do throws(RelayError) { return .success(try relay.addSubscriber(streamId: streamId, subscriberId: subscriberId)) } catch { return .failure(error) }
    }

    func deliver(_ envelope: Envelope<ServerMessage>, to connection: Connection) {
        if let id = envelope.id, let arrived = pendingRequests[connection.id]?.removeValue(forKey: id) {
            metrics.signalingRequest(answeredAfter: (ContinuousClock.now - arrived) / .seconds(1))
        }
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
        metrics.update(sessions: registry.attachedSessionCount, streams: registry.localStreamCount, subscribers: registry.subscriberCount)
    }

    /// Resume keys are kept only as their SHA-256 (hex).
    static func hash(_ key: String) -> String {
        SHA256.hash(data: Data(key.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
