import Foundation
import Logging
import PCastContracts
import PCastProtocol

/// A stream of another node that this node pulls for its viewers.
enum EdgeLeg {
    /// Asking the origin for the leg; every subscriber arriving meanwhile waits for the same answer.
    case opening(Task<Result<Void, RelayError>, Never>)
    case open(originNodeId: String)
}

/// The cascade between nodes: a viewer here of a stream published on another node (its origin)
/// is served by this node's relay, which pulls the stream from the origin's relay over one leg per
/// stream, whatever the number of viewers here, and drops it when the last one leaves.
extension Platform {
    // MARK: Edge

    /// Whether this node already pulls `streamId` (its viewers are added to the relay at once).
    func isPulling(_ streamId: String) -> Bool {
        if case .open? = legs[streamId] { return true }
        return false
    }

    /// Subscribes to another node's stream: the leg first, then the subscriber flow on this relay.
    func subscribeRemote(_ streamId: String, _ subscriberId: String, origin: String) async {
        let result: Result<MediaTransport, RelayError>
        switch await openLeg(streamId, origin: origin) {
        case .failure(let error):
            _ = webRTCSessions.takePendingPeer(subscriberId)
            result = .failure(error)
        case .success:
            result = addToRelay(streamId, subscriberId)
        }
        perform(registry: .subscriberAdded(streamId: streamId, subscriberId: subscriberId, result))
    }

    func openLeg(_ streamId: String, origin: String) async -> Result<Void, RelayError> {
        switch legs[streamId] {
        case .open?:
            return .success(())
        case .opening(let task)?:
            return await task.value
        case nil:
            let task = Task { await self.pull(streamId, from: origin) }
            legs[streamId] = .opening(task)
            return await task.value
        }
    }

    /// Asks the origin for a leg and opens this relay's end of it.
    private func pull(_ streamId: String, from origin: String) async -> Result<Void, RelayError> {
        let started = ContinuousClock.now
        guard let channel, let node = await liveNode(origin) else {
            legs[streamId] = nil
            return .failure(.invalidUpstream("node \(origin), which has the stream, is not live"))
        }
        let grant: EdgeGrant
        do throws(ClusterChannelError) {
            grant = try await channel.call("/cluster/edges", on: node, EdgeRequest(streamId: streamId))
        } catch {
            legs[streamId] = nil
            logger.warning("cannot pull a stream from its node", metadata: ["pcast.stream": .string(streamId), "pcast.node": .string(origin),
                                                                            "pcast.error": .string(error.description)])
            return .failure(.invalidUpstream("node \(origin): \(error)"))
        }
        guard registry.stream(streamId) != nil else {
            // It ended while the origin was being asked.
            legs[streamId] = nil
            releaseAtOrigin(streamId, origin: node)
            return .failure(.streamNotFound(streamId))
        }
        guard let (host, port) = Self.hostAndPort(grant.relayAddress) else {
            legs[streamId] = nil
            releaseAtOrigin(streamId, origin: node)
            return .failure(.invalidUpstream("node \(origin) gave relay address '\(grant.relayAddress)'"))
        }
        do throws(RelayError) {
            try relay.addUpstream(streamId: streamId, tracks: grant.tracks, origin: UpstreamOrigin(host: host, port: port, transport: grant.transport))
        } catch {
            legs[streamId] = nil
            releaseAtOrigin(streamId, origin: node)
            return .failure(error)
        }
        legs[streamId] = .open(originNodeId: origin)
        logger.info("pulling a stream from its node", metadata: [
            "pcast.stream": .string(streamId), "pcast.node": .string(origin), "pcast.relay": .string(grant.relayAddress),
            "pcast.took": .string("\(ContinuousClock.now - started)")])
        return .success(())
    }

    /// Once a heartbeat: an edge asks the origin again for the legs that went silent, and an
    /// origin drops the flows of edges that stopped reporting.
    func superviseLegs() {
        guard channel != nil else { return }
        let now = ContinuousClock.now, silence = configuration.legSilenceLimit
        for (streamId, leg) in legs {
            guard case .open(let origin) = leg, registry.hasViewers(streamId) || legHolds[streamId] != nil,
                  let idle = relay.publisherIdleTime(streamId: streamId), idle >= silence,
                  repulls[streamId].map({ now - $0 >= silence }) ?? true else { continue }
            repulls[streamId] = now
            Task { await self.pullAgain(streamId, from: origin, silentFor: idle) }
        }
        for streamId in repulls.keys where legs[streamId] == nil { repulls[streamId] = nil }
        for (streamId, nodes) in edges {
            for nodeId in nodes.keys {
                guard let idle = relay.edgeIdleTime(streamId: streamId, subscriberId: Self.edgeSubscriberId(nodeId)),
                      idle >= configuration.edgeSilenceLimit else { continue }
                logger.notice("a node pulling a stream stopped reporting: its leg is dropped",
                              metadata: ["pcast.stream": .string(streamId), "pcast.edge": .string(nodeId), "pcast.silent": .string("\(idle)")])
                _ = releaseEdge(streamId, of: nodeId)
                metrics.edgesDropped.increment()
            }
        }
    }

    /// Asks the origin for a new flow of a leg that went silent and moves the leg onto it (the
    /// origin replaces the edge's flow it had, if it still had one); the viewers stay.
    private func pullAgain(_ streamId: String, from origin: String, silentFor idle: Duration) async {
        guard let channel, let node = await liveNode(origin) else { return }
        let grant: EdgeGrant
        do throws(ClusterChannelError) {
            grant = try await channel.call("/cluster/edges", on: node, EdgeRequest(streamId: streamId))
        } catch {
            logger.info("a silent leg could not be pulled again yet", metadata: [
                "pcast.stream": .string(streamId), "pcast.node": .string(origin), "pcast.error": .string(error.description)])
            return
        }
        guard case .open(origin)? = legs[streamId] else {
            // Dropped meanwhile (its last viewer left, or the stream ended).
            if legs[streamId] == nil { releaseAtOrigin(streamId, origin: node) }
            return
        }
        do throws(RelayError) {
            guard let (host, port) = Self.hostAndPort(grant.relayAddress) else {
                throw .invalidUpstream("node \(origin) gave relay address '\(grant.relayAddress)'")
            }
            try relay.replaceUpstream(streamId: streamId, origin: UpstreamOrigin(host: host, port: port, transport: grant.transport))
        } catch {
            logger.warning("a silent leg could not be moved to its new flow", metadata: ["pcast.stream": .string(streamId), "pcast.error": .string(error.description)])
            return
        }
        metrics.legsPulledAgain.increment()
        logger.notice("a pulled stream's leg was silent: pulled again", metadata: [
            "pcast.stream": .string(streamId), "pcast.node": .string(origin), "pcast.silent": .string("\(idle)")])
        // An origin that dropped the edge forgot its viewers' limit with it.
        if let limit = registry.stream(streamId)?.viewerLimit { forwardViewerLimit(streamId, to: origin, bitsPerSecond: limit) }
    }

    /// Ends a hold on a leg (see `legHolds`); a leg nobody watches then goes.
    func releaseHold(_ streamId: String) {
        legHolds[streamId, default: 1] -= 1
        if legHolds[streamId] == 0 { legHolds[streamId] = nil }
        releaseIdleLegs()
    }

    /// Drops the legs no viewer here needs any more (the origin closes its end when told).
    func releaseIdleLegs() {
        for (streamId, leg) in legs {
            guard case .open(let origin) = leg, !registry.hasViewers(streamId), legHolds[streamId, default: 0] == 0 else { continue }
            legs[streamId] = nil
            relay.removeStream(streamId: streamId)
            logger.info("the last viewer of a pulled stream left: its leg is dropped", metadata: ["pcast.stream": .string(streamId)])
            if let node = liveNodes[origin] { releaseAtOrigin(streamId, origin: node) }
        }
    }

    private func releaseAtOrigin(_ streamId: String, origin: NodeRecord) {
        guard let channel else { return }
        Task {
            do throws(ClusterChannelError) {
                let _: ClusterDone = try await channel.call("/cluster/edges/release", on: origin, EdgeRequest(streamId: streamId))
            } catch {
                // The origin also drops edges of nodes gone from the membership.
                self.logger.debug("could not tell the origin its leg is dropped", metadata: ["pcast.error": .string(error.description)])
            }
        }
    }

    /// A live node's record: from the latest heartbeat's view, else read now (a node that joined since).
    func liveNode(_ nodeId: String) async -> NodeRecord? {
        if let node = liveNodes[nodeId] { return node }
        guard let live = try? await clusterNodes() else { return nil }
        for node in live { liveNodes[node.nodeId] = node }
        return liveNodes[nodeId]
    }

    static func hostAndPort(_ address: String) -> (String, UInt16)? {
        guard let colon = address.lastIndex(of: ":"), let port = UInt16(address[address.index(after: colon)...]) else { return nil }
        var host = String(address[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }

    // MARK: Origin

    /// Another node pulls a stream published here: a subscriber flow for its relay.
    func serveEdge(_ streamId: String, to nodeId: String) -> Result<EdgeGrant, ClusterRefusal> {
        guard let record = registry.stream(streamId), record.originNodeId == nil else {
            return .failure(ClusterRefusal(status: 404, message: "no stream '\(streamId)' is published on this node"))
        }
        guard let relayAddress = clusterRelayAddress else {
            return .failure(ClusterRefusal(status: 503, message: "this node has not joined the cluster"))
        }
        // A node asking again for a flow that still reports (its reports come every second) gets
        // the same one: its leg went quiet for another reason (a cut that healed while it asked),
        // and a new flow would lose what is already on its way over the old one.
        if let granted = edges[streamId]?[nodeId],
           let idle = relay.edgeIdleTime(streamId: streamId, subscriberId: Self.edgeSubscriberId(nodeId)), idle < Self.edgeReportGrace {
            return .success(granted)
        }
        do throws(RelayError) {
            let transport = try relay.addEdgeSubscriber(streamId: streamId, subscriberId: Self.edgeSubscriberId(nodeId))
            let grant = EdgeGrant(streamId: streamId, transport: transport, relayAddress: relayAddress, tracks: record.tracks)
            edges[streamId, default: [:]][nodeId] = grant
            logger.info("a node pulls a stream published here", metadata: ["pcast.stream": .string(streamId), "pcast.edge": .string(nodeId)])
            return .success(grant)
        } catch {
            return .failure(ClusterRefusal(status: 409, message: error.description))
        }
    }

    /// A node no longer pulls a stream (its viewers' limit goes with it).
    func releaseEdge(_ streamId: String, of nodeId: String) -> Result<ClusterDone, ClusterRefusal> {
        perform(registry: .edgeViewerLimit(streamId: streamId, nodeId: nodeId, bitsPerSecond: nil))
        if edges[streamId]?.removeValue(forKey: nodeId) != nil {
            if edges[streamId]?.isEmpty == true { edges[streamId] = nil }
            relay.removeSubscriber(streamId: streamId, subscriberId: Self.edgeSubscriberId(nodeId))
            logger.info("a node stopped pulling a stream", metadata: ["pcast.stream": .string(streamId), "pcast.edge": .string(nodeId)])
        }
        return .success(ClusterDone(streamId: streamId))
    }

    /// Edges of nodes gone from the membership are no longer sent to.
    func dropEdges(notIn liveIds: Set<String>) {
        for (streamId, nodes) in edges {
            for nodeId in nodes.keys where !liveIds.contains(nodeId) {
                _ = releaseEdge(streamId, of: nodeId)
                metrics.edgesDropped.increment()
            }
        }
    }

    static func edgeSubscriberId(_ nodeId: String) -> String { "edge@\(nodeId)" }

    /// An edge flow whose last report is younger than this still reports (one a second).
    static let edgeReportGrace: Duration = .milliseconds(2_500)

    /// Another node's viewers ask the publisher of a stream published here for at most this bitrate.
    func edgeViewerLimit(_ streamId: String, from nodeId: String, bitsPerSecond: Int?) -> Result<ClusterDone, ClusterRefusal> {
        guard let record = registry.stream(streamId), record.originNodeId == nil else {
            return .failure(ClusterRefusal(status: 404, message: "no stream '\(streamId)' is published on this node"))
        }
        perform(registry: .edgeViewerLimit(streamId: streamId, nodeId: nodeId, bitsPerSecond: bitsPerSecond))
        return .success(ClusterDone(streamId: streamId))
    }

    /// Tells a stream's origin the lowest bitrate this node's viewers ask for, in order of change.
    func forwardViewerLimit(_ streamId: String, to origin: String, bitsPerSecond: Int?) {
        guard let channel else { return }
        let previous = limitCalls[streamId]
        limitCalls[streamId] = Task {
            await previous?.value
            guard let node = await self.liveNode(origin) else { return }
            do throws(ClusterChannelError) {
                let _: ClusterDone = try await channel.call("/cluster/streams/limit", on: node,
                                                           ViewerLimitRequest(streamId: streamId, bitsPerSecond: bitsPerSecond))
            } catch {
                self.logger.notice("the stream's node was not told its viewers' limit here",
                                   metadata: ["pcast.stream": .string(streamId), "pcast.error": .string(error.description)])
            }
        }
    }

    // MARK: Ending streams across nodes

    /// Another node asks to end a stream published here (its operator's end).
    func endLocalStream(_ streamId: String, reason: StreamEndedReason, description: String?, askedBy nodeId: String) -> Result<ClusterDone, ClusterRefusal> {
        guard let record = registry.stream(streamId), record.originNodeId == nil else {
            return .failure(ClusterRefusal(status: 404, message: "no stream '\(streamId)' is published on this node"))
        }
        logger.notice("stream ended at another node's request", metadata: ["pcast.stream": .string(streamId), "pcast.node": .string(nodeId)])
        perform(registry: .endStream(streamId: streamId, reason: reason, description: description))
        return .success(ClusterDone(streamId: streamId))
    }

    func askOriginToEnd(_ streamId: String, origin: String, reason: StreamEndedReason, description: String?) async -> Bool {
        guard let channel, let node = await liveNode(origin) else { return false }
        do throws(ClusterChannelError) {
            let _: ClusterDone = try await channel.call("/cluster/streams/end", on: node,
                                                       EndRequest(streamId: streamId, reason: reason, description: description))
            return true
        } catch {
            logger.warning("the stream's node did not end it", metadata: ["pcast.stream": .string(streamId), "pcast.node": .string(origin),
                                                                          "pcast.error": .string(error.description)])
            return false
        }
    }

    // MARK: Recordings

    /// This node's recordings and, in a cluster, every other live node's (each with its node),
    /// by name then node; with the live nodes that did not answer.
    func clusterRecordings() async -> (recordings: [RecordingInfo], unreachable: [String]) {
        var recordings = await self.recordings?.list() ?? []
        guard let channel else { return (recordings, []) }
        for index in recordings.indices { recordings[index].node = configuration.nodeId }
        var unreachable: [String] = []
        let others = ((try? await clusterNodes()) ?? []).filter { $0.nodeId != configuration.nodeId }
        for node in others {
            do throws(ClusterChannelError) {
                let list: RecordingList = try await channel.call("/cluster/recordings", on: node, RecordingsRequest())
                recordings += list.recordings.map { var info = $0; info.node = node.nodeId; return info }
            } catch {
                unreachable.append(node.nodeId)
            }
        }
        return (recordings.sorted { ($0.name, $0.node ?? "") < ($1.name, $1.node ?? "") }, unreachable)
    }

    /// The HTTP address of another live node keeping the recording `name`, if one does.
    func nodeKeeping(recording name: String) async -> String? {
        guard channel != nil else { return nil }
        let (recordings, _) = await clusterRecordings()
        guard let node = recordings.first(where: { $0.name == name && $0.node != configuration.nodeId })?.node,
              let record = await liveNode(node) else { return nil }
        return ClusterChannel.httpBase(signalingURL: record.signalingURL)
    }

    // MARK: The directory

    /// Other nodes' stream changes, from the change log.
    func applyRemoteStreams(_ changes: [RoomStoreChange]) {
        for change in changes {
            switch change {
            case .saveStream(let stream) where stream.nodeId != configuration.nodeId:
                perform(registry: .remoteStreamPublished(stream))
            case .deleteStream(let streamId, let reason, let description):
                perform(registry: .remoteStreamEnded(streamId: streamId, reason: reason, description: description))
            case .deleteNodeStreams(let nodeId, let reason, let description) where nodeId != configuration.nodeId:
                perform(registry: .remoteNodeGone(nodeId: nodeId, reason: reason, description: description))
            case .deleteNodeStreams(_, let reason, let description):
                // Another node took this one for gone: the streams published here are announced again.
                for streamId in registry.streamIds(ofNode: nil) {
                    perform(registry: .remoteStreamEnded(streamId: streamId, reason: reason, description: description))
                }
            default:
                break
            }
        }
    }
}
