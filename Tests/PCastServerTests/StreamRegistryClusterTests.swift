import Foundation
import PCastProtocol
import PCastServer
import Testing

/// The stream registry in a cluster: its own streams announced to the store, other nodes' streams
/// resolved and ended as its own are.
extension StreamRegistryTests {
    func shared(_ streamId: String, node: String = "node-2", tags: [String] = ["channelId:demo"], at: Int64) -> SharedStream {
        SharedStream(streamId: streamId, nodeId: node, publisherSessionId: "session-x@\(node)", tags: tags,
                     tracks: [Fixture.video, Fixture.audio], publishType: .live, streamName: nil, publishedAt: at)
    }

    func persisted(_ actions: [StreamRegistry.Action]) -> [RoomStoreChange] {
        actions.compactMap { if case .persist(let change) = $0 { change } else { nil } }
    }

    @Test("a stream published here is announced to the store with this node's id and withdrawn with its end's reason")
    func localStreamsAreAnnounced() throws {
        var registry = registry()
        registry.nodeId = "node-1"
        let token = Fixture.token(.publish, now: now) { $0.applyTags(["channelId:demo"]) }
        _ = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(token, tags: [])), now: now, newId: "s1"))
        let published = registry.handle(.publisherAdded(streamId: "s1", .success(transport)))
        let saved = try #require(persisted(published).first)
        guard case .saveStream(let entry) = saved else { Issue.record("not a save: \(saved)"); return }
        #expect(entry.streamId == "s1" && entry.nodeId == "node-1" && entry.publisherSessionId == "pub")
        #expect(entry.tags == ["channelId:demo"] && entry.tracks == [Fixture.video, Fixture.audio])
        #expect(entry.publishedAt == 1_700_000_000_000)
        let ended = registry.handle(.sessionClosed(sessionId: "pub", .connectionLost))
        #expect(persisted(ended) == [.deleteStream(streamId: "s1", reason: .failed, description: SessionEnd.connectionLost.streamEndedDescription)])
    }

    @Test("another node's stream is found by id and by tag (the newest of every node's), subscribed like a local one, and not announced again")
    func remoteStreamsResolve() throws {
        var registry = registry()
        registry.nodeId = "node-1"
        publish(&registry, "here", applyTags: ["channelId:demo"])  // published at `now`
        let older = registry.handle(.remoteStreamPublished(shared("there-old", at: 1_699_999_999_000)))
        #expect(persisted(older).isEmpty)
        _ = registry.handle(.remoteStreamPublished(shared("there-new", at: 1_700_000_001_000)))
        #expect(registry.stream("there-new")?.originNodeId == "node-2")
        #expect(registry.streamCount == 3 && registry.localStreamCount == 1)

        let byTag = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.channel("demo") }, subscriberId: "a")
        #expect(relayCalls(byTag) == [.addSubscriber(streamId: "there-new", subscriberId: "a")], "the newest by publication time, whichever node")
        #expect(registry.hasViewers("there-new"), "a subscription being opened holds the stream's leg")
        _ = registry.handle(.subscriberAdded(streamId: "there-new", subscriberId: "a", .success(transport)))
        let byId = subscribe(&registry, "sub2", token: Fixture.token(.stream, now: now) { $0.originStreamId("there-old") }, subscriberId: "b")
        #expect(relayCalls(byId) == [.addSubscriber(streamId: "there-old", subscriberId: "b")])

        // A remote entry never takes over a stream published here.
        _ = registry.handle(.remoteStreamPublished(shared("here", node: "node-3", at: 1)))
        #expect(registry.stream("here")?.originNodeId == nil)
        // Its entry changing (tags) keeps its subscribers.
        _ = registry.handle(.remoteStreamPublished(shared("there-new", tags: ["channelId:demo", "x"], at: 1_700_000_001_000)))
        #expect(registry.stream("there-new")?.tags == ["channelId:demo", "x"])
        #expect(registry.stream("there-new")?.subscribers.map(\.subscriberId) == ["a"])
    }

    @Test("another node's stream ending, or its node going, tells its subscribers here why, closes it on this relay and writes nothing")
    func remoteStreamsEnd() {
        var registry = registry()
        _ = registry.handle(.remoteStreamPublished(shared("s1", at: 1)))
        _ = registry.handle(.remoteStreamPublished(shared("s2", at: 2)))
        _ = registry.handle(.remoteStreamPublished(shared("s3", node: "node-3", at: 3)))
        for (stream, subscriber) in [("s1", "a"), ("s2", "b"), ("s3", "c")] {
            _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId(stream) }, subscriberId: subscriber)
            _ = registry.handle(.subscriberAdded(streamId: stream, subscriberId: subscriber, .success(transport)))
        }
        let ended = registry.handle(.remoteStreamEnded(streamId: "s1", reason: .ended, description: "bye"))
        #expect(relayCalls(ended) == [.removeStream(streamId: "s1")])
        #expect(sends(ended).map(\.0) == ["sub"], "the remote publisher's session is not this node's")
        #expect(sends(ended).first?.1 == .event(.streamEnded(.init(streamId: "s1", reason: .ended, description: "bye"))))
        #expect(persisted(ended).isEmpty)

        let gone = registry.handle(.remoteNodeGone(nodeId: "node-2", reason: .failed, description: "node node-2 stopped answering"))
        #expect(relayCalls(gone) == [.removeStream(streamId: "s2")])
        #expect(sends(gone).first?.1 == .event(.streamEnded(.init(streamId: "s2", reason: .failed, description: "node node-2 stopped answering"))))
        #expect(registry.stream("s3") != nil, "another node's streams stay")
        #expect(registry.handle(.remoteStreamEnded(streamId: "unknown", reason: .ended, description: nil)).isEmpty)
        #expect(!registry.hasViewers("s2") && registry.hasViewers("s3"))
    }

    @Test("another node withdrawing a stream published here (it took this node for gone) ends nothing: the stream is announced again")
    func withdrawnLocalStreamsAreAnnouncedAgain() throws {
        var registry = registry()
        registry.nodeId = "node-1"
        publish(&registry, "here", applyTags: ["channelId:demo"])
        let withdrawn = registry.handle(.remoteStreamEnded(streamId: "here", reason: .failed, description: "node node-1 stopped answering"))
        #expect(relayCalls(withdrawn).isEmpty && sends(withdrawn).isEmpty, "nothing ends: no relay call, nobody told")
        let saved = try #require(persisted(withdrawn).first)
        guard case .saveStream(let entry) = saved else { Issue.record("not a save: \(saved)"); return }
        #expect(entry.streamId == "here" && entry.nodeId == "node-1" && entry.tags.contains("channelId:demo"))
        #expect(registry.stream("here") != nil && registry.localStreamCount == 1)
    }

    @Test("viewer limits across nodes: an edge forwards its viewers' lowest to the origin, which counts it as one viewer's; a publisher's quality reason travels in the directory to other nodes' viewers")
    func limitsAndQualityAcrossNodes() throws {
        // Edge: two viewers of node 2's stream.
        var edge = registry()
        _ = edge.handle(.remoteStreamPublished(shared("s1", at: 1)))
        for (session, subscriber) in [("sub", "a"), ("sub2", "b")] {
            _ = subscribe(&edge, session, token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: subscriber)
            _ = edge.handle(.subscriberAdded(streamId: "s1", subscriberId: subscriber, .success(transport)))
        }
        func limit(_ session: String, _ bits: Int) -> [StreamRegistry.Action] {
            edge.handle(.request(sessionId: session, requestId: 5, .limitBandwidth(.init(streamId: "s1", bitsPerSecond: bits)), now: now, newId: ""))
        }
        func forwarded(_ actions: [StreamRegistry.Action]) -> [Int?] {
            actions.compactMap { if case .forwardViewerLimit("s1", "node-2", let bits) = $0 { bits } else { nil } }
        }
        #expect(forwarded(limit("sub", 500_000)) == [500_000])
        #expect(forwarded(limit("sub2", 300_000)) == [300_000])
        #expect(forwarded(limit("sub", 400_000)).isEmpty, "the lowest did not change")
        let left = edge.handle(.request(sessionId: "sub2", requestId: 6, .unsubscribe(.init(streamId: "s1")), now: now, newId: ""))
        #expect(forwarded(left) == [400_000])
        #expect(sends(left).allSatisfy { $0.0 == "sub2" }, "nothing is sent to the remote publisher's session")

        // Origin: a viewer here at 500 kbit/s, node 2's viewers at 300 kbit/s.
        var origin = registry()
        origin.nodeId = "node-1"
        publish(&origin, "s2")
        _ = subscribe(&origin, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s2") }, subscriberId: "c")
        _ = origin.handle(.subscriberAdded(streamId: "s2", subscriberId: "c", .success(transport)))
        _ = origin.handle(.request(sessionId: "sub", requestId: 7, .limitBandwidth(.init(streamId: "s2", bitsPerSecond: 500_000)), now: now, newId: ""))
        func told(_ actions: [StreamRegistry.Action]) -> [Int?] {
            sends(actions).compactMap { (session: String, envelope: Envelope<ServerMessage>) -> Int?? in
                if session == "pub", case .bandwidthLimit(let limit) = envelope.message { return .some(limit.bitsPerSecond) } else { return nil }
            }
        }
        #expect(told(origin.handle(.edgeViewerLimit(streamId: "s2", nodeId: "node-2", bitsPerSecond: 300_000))) == [300_000])
        #expect(told(origin.handle(.edgeViewerLimit(streamId: "s2", nodeId: "node-2", bitsPerSecond: nil))) == [500_000])
        #expect(origin.handle(.edgeViewerLimit(streamId: "unknown", nodeId: "node-2", bitsPerSecond: 1)).isEmpty)

        // The publisher's quality: to its viewers here, and into the directory entry.
        let quality = origin.handle(.request(sessionId: "pub", requestId: 8, .publisherQuality(.init(streamId: "s2", reason: .networkLimited)), now: now, newId: ""))
        let entry = persisted(quality).compactMap { if case .saveStream(let entry) = $0 { entry } else { nil } }.first
        #expect(entry?.publisherQuality == .networkLimited && entry?.nodeId == "node-1")
        // An edge hears it from the entry and tells its viewers, once.
        var entryAtEdge = shared("s1", at: 1)
        entryAtEdge.publisherQuality = .networkLimited
        let heard = edge.handle(.remoteStreamPublished(entryAtEdge))
        #expect(sends(heard).map(\.0) == ["sub"])
        #expect(sends(heard).first?.1 == .event(.publisherQuality(.init(streamId: "s1", reason: .networkLimited))))
        #expect(edge.handle(.remoteStreamPublished(entryAtEdge)).isEmpty)
    }
}
