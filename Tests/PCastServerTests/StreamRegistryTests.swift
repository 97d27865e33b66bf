import Foundation
import PCastProtocol
import PCastRelay
import PCastServer
import Testing

@Suite struct StreamRegistryTests {
    let now = Date(timeIntervalSince1970: 1_700_000_000)
    let transport = MediaTransport(srtpProfile: "AEAD_AES_128_GCM", port: 40_000, clientKey: "c", serverKey: "s")

    func registry(sessions: [String] = ["pub", "sub", "sub2"]) -> StreamRegistry {
        var registry = StreamRegistry(tokens: TokenAuthority(applicationId: Fixture.applicationId, secret: Fixture.secret))
        for session in sessions { _ = registry.handle(.sessionOpened(sessionId: session, remoteAddress: "127.0.0.1")) }
        return registry
    }

    func sends(_ actions: [StreamRegistry.Action]) -> [(String, Envelope<ServerMessage>)] {
        actions.compactMap { if case .send(let session, let envelope) = $0 { return (session, envelope) } else { return nil } }
    }

    func failure(_ actions: [StreamRegistry.Action]) -> ServerMessage.Failure? {
        for (_, envelope) in sends(actions) { if case .failure(let failure) = envelope.message { return failure } }
        return nil
    }

    func relayCalls(_ actions: [StreamRegistry.Action]) -> [StreamRegistry.Action] {
        actions.filter {
            switch $0 {
            case .addPublisher, .addSubscriber, .removeStream, .removeSubscriber, .limitSubscriber, .sizeSubscriber, .pinLayer: return true
            case .send, .log, .record, .deliverHLS, .persist, .forwardViewerLimit, .notify, .notifyViewer: return false
            }
        }
    }

    /// Publishes `streamId` from `pub` with a token carrying `applyTags`.
    func publish(_ registry: inout StreamRegistry, _ streamId: String, tags: [String] = ["room:1"], applyTags: [String] = []) {
        let token = Fixture.token(.publish, now: now) { $0.applyTags(applyTags) }
        let actions = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(token, tags: tags)), now: now, newId: streamId))
        #expect(relayCalls(actions) == [.addPublisher(streamId: streamId, tracks: [Fixture.video, Fixture.audio])])
        let done = registry.handle(.publisherAdded(streamId: streamId, .success(transport)))
        #expect(sends(done).first?.1 == Envelope(id: 1, .published(.init(streamId: streamId, transport: transport))))
    }

    func subscribe(_ registry: inout StreamRegistry, _ session: String, token: String, subscriberId: String) -> [StreamRegistry.Action] {
        registry.handle(.request(sessionId: session, requestId: 2, .subscribe(.init(streamToken: token)), now: now, newId: subscriberId))
    }

    @Test func publishKeepsTagsAndAddsApplyTags() {
        var registry = registry()
        publish(&registry, "stream-1", tags: ["room:1", "x"], applyTags: ["channelId:demo", "x"])
        #expect(registry.stream("stream-1")?.tags == ["room:1", "x", "channelId:demo"])
        #expect(registry.stream("stream-1")?.publisherSessionId == "pub")
        #expect(registry.streamCount == 1)
    }

    @Test("a publish token with the 'streaming' capability has the stream delivered as HLS once the relay took it; one without does not")
    func streamingPublishDeliversHLS() {
        var registry = registry()
        let streaming = Fixture.token(.publish, now: now) { $0.capability("streaming") }
        _ = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(streaming, tags: [])), now: now, newId: "stream-hls"))
        let added = registry.handle(.publisherAdded(streamId: "stream-hls", .success(transport)))
        #expect(added.contains(.deliverHLS(streamId: "stream-hls")))
        let plain = Fixture.token(.publish, now: now)
        _ = registry.handle(.request(sessionId: "pub", requestId: 2, .publish(Fixture.publish(plain, tags: [])), now: now, newId: "stream-rtc"))
        let other = registry.handle(.publisherAdded(streamId: "stream-rtc", .success(transport)))
        #expect(!other.contains { if case .deliverHLS = $0 { return true } else { return false } })
        #expect(sends(other).count == 1)
    }

    @Test("a stream published here notifies the backend that it started and, with the reason, that it ended; a refused publish and another node's stream notify nothing")
    func streamNotifications() throws {
        func notifications(_ actions: [StreamRegistry.Action]) -> [(StreamNotification.Kind, String, StreamEndedReason?, String?)] {
            actions.compactMap { if case .notify(let kind, let record, let reason, let description) = $0 { (kind, record.streamId, reason, description) } else { nil } }
        }
        var registry = registry()
        let token = Fixture.token(.publish, now: now)
        _ = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(token, tags: ["show:1"])), now: now, newId: "stream-n"))
        let added = registry.handle(.publisherAdded(streamId: "stream-n", .success(transport)))
        let started = notifications(added)
        #expect(started.count == 1 && started.first?.0 == .started && started.first?.1 == "stream-n" && started.first?.2 == nil)
        let record = try #require(added.compactMap { if case .notify(_, let record, _, _) = $0 { record } else { nil } }.first)
        #expect(record.tags == ["show:1"] && record.publisherSessionId == "pub")
        let ended = notifications(registry.handle(.request(sessionId: "pub", requestId: 2,
                                                           .unpublish(.init(streamId: "stream-n", reason: .custom, description: "bye")), now: now, newId: "x")))
        #expect(ended.count == 1 && ended.first?.0 == .ended && ended.first?.2 == .custom && ended.first?.3 == "bye")

        let refused = registry.handle(.request(sessionId: "pub", requestId: 3, .publish(Fixture.publish(Fixture.token(.stream, now: now), tags: [])),
                                               now: now, newId: "stream-r"))
        #expect(notifications(refused).isEmpty)
        let remote = SharedStream(streamId: "stream-far", nodeId: "node-9", publisherSessionId: "far", tags: [], tracks: [], publishType: .live,
                                  streamName: nil, publishedAt: 0)
        #expect(notifications(registry.handle(.remoteStreamPublished(remote))).isEmpty)
        #expect(notifications(registry.handle(.remoteStreamEnded(streamId: "stream-far", reason: .ended, description: nil))).isEmpty,
                "its own node notifies")
    }

    @Test("a stream token's quality capability (sd) caps a simulcast viewer's layer: its box goes to the relay at subscribe and bounds every view size it asks for; on a single encoding nothing is sent; a token naming two qualities is refused")
    func qualityCeiling() {
        var registry = registry()
        let granted = Fixture.token(.publish, now: now) { $0.capability("multi-bitrate") }
        _ = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(granted, tracks: Self.layers)), now: now, newId: "s1"))
        _ = registry.handle(.publisherAdded(streamId: "s1", .success(transport)))
        _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1").capability("sd") }, subscriberId: "a")
        let added = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "a", .success(transport)))
        #expect(relayCalls(added) == [.sizeSubscriber(streamId: "s1", subscriberId: "a", size: ViewSize(width: 854, height: 480))])
        func sized(_ size: ViewSize?) -> [StreamRegistry.Action] {
            relayCalls(registry.handle(.request(sessionId: "sub", requestId: 2, .setViewSize(.init(streamId: "s1", size: size)), now: now, newId: "")))
        }
        #expect(sized(ViewSize(width: 1920, height: 1080)) == [.sizeSubscriber(streamId: "s1", subscriberId: "a", size: ViewSize(width: 854, height: 480))])
        #expect(sized(ViewSize(width: 320, height: 180)) == [.sizeSubscriber(streamId: "s1", subscriberId: "a", size: ViewSize(width: 320, height: 180))])
        #expect(sized(nil) == [.sizeSubscriber(streamId: "s1", subscriberId: "a", size: ViewSize(width: 854, height: 480))], "no size: the ceiling")

        _ = registry.handle(.request(sessionId: "pub", requestId: 3, .publish(Fixture.publish(Fixture.token(.publish, now: now), tags: [])), now: now, newId: "s2"))
        _ = registry.handle(.publisherAdded(streamId: "s2", .success(transport)))
        _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s2").capability("ld") }, subscriberId: "b")
        #expect(relayCalls(registry.handle(.subscriberAdded(streamId: "s2", subscriberId: "b", .success(transport)))).isEmpty,
                "a single encoding is what it is")

        let two = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1").capability("sd").capability("hd") },
                            subscriberId: "c")
        #expect(failure(two)?.status == .badRequest && failure(two)?.message.contains("more than one quality") == true)
        #expect(QualityCeiling.allCases.map { "\($0.box.width)x\($0.box.height)" } == ["320x180", "426x240", "640x360", "854x480", "1280x720", "1920x1080", "3840x2160"])
        #expect(QualityCeiling.sd.fit(width: 1280, height: 720) == (854, 480) && QualityCeiling.sd.fit(width: 640, height: 480) == (640, 480))
        #expect(QualityCeiling.ld.fit(width: 1080, height: 1920) == (202, 360), "portrait fits by its height")
        #expect(QualityCeiling(capabilities: ["real-time", "hd"]) == .hd && QualityCeiling(capabilities: ["real-time"]) == nil)
    }

    @Test("a subscription's tags are kept and go with its subscriber-started and subscriber-ended notifications (unsubscribed, session closed, stream ended); more tags than allowed are refused by the codec")
    func viewerNotifications() throws {
        func viewers(_ actions: [StreamRegistry.Action]) -> [(StreamNotification.Kind, String, [String], StreamEndedReason?)] {
            actions.compactMap {
                if case .notifyViewer(let kind, _, let subscriberId, _, let tags, let reason, _) = $0 { (kind, subscriberId, tags, reason) } else { nil }
            }
        }
        var registry = registry()
        _ = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(Fixture.token(.publish, now: now), tags: [])), now: now, newId: "s1"))
        _ = registry.handle(.publisherAdded(streamId: "s1", .success(transport)))
        let token = Fixture.token(.stream, now: now) { $0.originStreamId("s1") }
        for (id, tags) in [("a", ["viewer:1"]), ("b", [])] {
            _ = registry.handle(.request(sessionId: "sub", requestId: 2, .subscribe(.init(streamToken: token, tags: tags)), now: now, newId: id))
            let added = viewers(registry.handle(.subscriberAdded(streamId: "s1", subscriberId: id, .success(transport))))
            #expect(added.count == 1 && added.first?.0 == .subscriberStarted && added.first?.1 == id && added.first?.2 == tags)
        }
        #expect(registry.stream("s1")?.subscriberTags == ["a": ["viewer:1"]])
        let left = viewers(registry.handle(.request(sessionId: "sub", requestId: 3, .unsubscribe(.init(streamId: "s1", subscriberId: "a")), now: now, newId: "")))
        #expect(left.count == 1 && left.first?.0 == .subscriberEnded && left.first?.2 == ["viewer:1"] && left.first?.3 == .ended)
        _ = registry.handle(.request(sessionId: "sub2", requestId: 5, .subscribe(.init(streamToken: token, tags: ["viewer:2"])), now: now, newId: "c"))
        _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "c", .success(transport)))
        let closed = viewers(registry.handle(.sessionClosed(sessionId: "sub2", .connectionLost)))
        #expect(closed.count == 1 && closed.first?.1 == "c" && closed.first?.2 == ["viewer:2"] && closed.first?.3 == .failed)
        let ended = viewers(registry.handle(.request(sessionId: "pub", requestId: 4, .unpublish(.init(streamId: "s1", reason: .custom, description: "bye")),
                                                     now: now, newId: "")))
        #expect(ended.count == 1 && ended.first?.1 == "b" && ended.first?.3 == .custom)

        let many = (0...SignalingCodec.maximumTags).map { "t\($0)" }
        let data = try SignalingCodec.encode(Envelope<ClientMessage>(id: 1, .subscribe(.init(streamToken: token, tags: many))))
        #expect(throws: SignalingError.self) { try SignalingCodec.decodeClientMessage(data) }
    }

    @Test func publishRefusalsOpenNothingOnTheRelay() {
        var registry = registry()
        let cases: [(String, RequestStatus)] = [
            (Fixture.token(.stream, now: now), .unauthorized),
            (Fixture.token(.publish, expiresIn: -1, now: now), .unauthorized),
            (Fixture.token(.publish, now: now) { $0.sessionId("sub") }, .unauthorized),
            (Fixture.token(.publish, now: now) { $0.channel("required") }, .unauthorized),   // refused for its foreign tag (below)
            (Fixture.token(.publish, now: now) { $0.capability("audio-only") }, .unauthorized),
            (Fixture.token(.publish, now: now) { $0.capability("hls") }, .notSupported),
        ]
        for (token, status) in cases {
            let actions = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(token, tags: ["channelId:other"])), now: now, newId: "s"))
            #expect(failure(actions)?.status == status)
            #expect(relayCalls(actions).isEmpty)
        }
        #expect(registry.streamCount == 0)
    }

    @Test func relayRefusalBecomesATypedFailure() {
        var registry = registry()
        let token = Fixture.token(.publish, now: now)
        _ = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(token)), now: now, newId: "s"))
        let actions = registry.handle(.publisherAdded(streamId: "s", .failure(.ssrcInUse(1111))))
        #expect(failure(actions)?.status == .conflict)
        #expect(registry.streamCount == 0)
    }

    @Test func streamTokenResolvesByOriginStreamIdThenByNewestTaggedStream() {
        var registry = registry()
        publish(&registry, "old", applyTags: ["channelId:demo"])
        publish(&registry, "new", applyTags: ["channelId:demo"])

        let byOrigin = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("old") }, subscriberId: "a")
        #expect(relayCalls(byOrigin) == [.addSubscriber(streamId: "old", subscriberId: "a")])
        _ = registry.handle(.subscriberAdded(streamId: "old", subscriberId: "a", .success(transport)))

        let byTag = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.channel("demo") }, subscriberId: "b")
        #expect(relayCalls(byTag) == [.addSubscriber(streamId: "new", subscriberId: "b")])
        let done = registry.handle(.subscriberAdded(streamId: "new", subscriberId: "b", .success(transport)))
        #expect(sends(done).first?.1 == Envelope(id: 2, .subscribed(.init(streamId: "new", tracks: [Fixture.video, Fixture.audio], transport: transport, subscriberId: "b"))))
        #expect(registry.subscriberCount == 2)
    }

    @Test func subscribeRefusals() {
        var registry = registry()
        publish(&registry, "s1", applyTags: ["channelId:demo"])
        let cases: [(String, RequestStatus)] = [
            (Fixture.token(.publish, now: now) { $0.originStreamId("s1") }, .unauthorized),
            (Fixture.token(.stream, now: now) { $0.originStreamId("s1").channel("other") }, .unauthorized),
            (Fixture.token(.stream, now: now) { $0.channel("other") }, .noStreamPlaying),
            (Fixture.token(.stream, now: now) { $0.originStreamId("nope") }, .notFound),
            (Fixture.token(.stream, now: now), .badRequest),
            (Fixture.token(.stream, now: now) { $0.originStreamId("s1").sessionId("pub") }, .unauthorized),
            (Fixture.token(.stream, now: now) { $0.originStreamId("s1").remoteAddress("192.0.2.1") }, .unauthorized),
            (Fixture.token(.stream, now: now) { $0.originStreamId("s1").capability("teleport") }, .notSupported),
            (Fixture.token(.stream, now: now) { $0.originStreamId("s1").capabilities(["audio-only", "video-only"]) }, .badRequest),
        ]
        for (token, status) in cases {
            let actions = subscribe(&registry, "sub", token: token, subscriberId: "x")
            #expect(failure(actions)?.status == status, "\(failure(actions)?.message ?? "no failure")")
            #expect(relayCalls(actions).isEmpty)
        }
    }

    @Test("a node at its viewer limit refuses one more with capacity and opens nothing on the relay (a subscription being set up counts); a viewer leaving makes room")
    func viewerLimitRefusesWithCapacity() {
        var registry = registry()
        registry.maximumViewers = 2
        publish(&registry, "s1")
        let token = Fixture.token(.stream, now: now) { $0.originStreamId("s1") }
        #expect(relayCalls(subscribe(&registry, "sub", token: token, subscriberId: "a")) == [.addSubscriber(streamId: "s1", subscriberId: "a")])
        _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "a", .success(transport)))
        #expect(relayCalls(subscribe(&registry, "sub2", token: token, subscriberId: "b")) == [.addSubscriber(streamId: "s1", subscriberId: "b")])
        let refused = subscribe(&registry, "sub2", token: token, subscriberId: "c")
        #expect(failure(refused)?.status == .capacity, "\(failure(refused)?.message ?? "no failure")")
        #expect(failure(refused)?.message == "this node serves its limit of 2 viewers")
        #expect(relayCalls(refused).isEmpty)
        _ = registry.handle(.request(sessionId: "sub", requestId: 3, .unsubscribe(.init(streamId: "s1", subscriberId: "a")), now: now, newId: ""))
        #expect(relayCalls(subscribe(&registry, "sub2", token: token, subscriberId: "d")) == [.addSubscriber(streamId: "s1", subscriberId: "d")])
    }

    @Test func audioOnlyCapabilityListsOnlyAudioTracks() {
        var registry = registry()
        publish(&registry, "s1")
        _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1").capability("audio-only") }, subscriberId: "a")
        let done = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "a", .success(transport)))
        guard case .subscribed(let subscribed)? = sends(done).first?.1.message else {
            Issue.record("no subscribed reply")
            return
        }
        #expect(subscribed.tracks == [Fixture.audio])
    }

    @Test func unpublishTellsSubscribersInOrderThenThePublisher() {
        var registry = registry()
        publish(&registry, "s1")
        for (session, id) in [("sub2", "first"), ("sub", "second")] {
            _ = subscribe(&registry, session, token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: id)
            _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: id, .success(transport)))
        }
        let actions = registry.handle(.request(
            sessionId: "pub", requestId: 7, .unpublish(.init(streamId: "s1", reason: .custom, description: "lunch break")), now: now, newId: ""))
        let ended = Envelope<ServerMessage>.event(.streamEnded(.init(streamId: "s1", reason: .custom, description: "lunch break")))
        #expect(sends(actions).map(\.0) == ["pub", "sub2", "sub", "pub"])
        #expect(sends(actions).map(\.1) == [Envelope(id: 7, .ok), ended, ended, ended])
        #expect(relayCalls(actions) == [.removeStream(streamId: "s1")])
        #expect(registry.streamCount == 0)
        #expect(registry.subscriberCount == 0)
    }

    @Test func onlyThePublisherUnpublishesAndCensoredIsTheOperators() {
        var registry = registry()
        publish(&registry, "s1")
        let other = registry.handle(.request(sessionId: "sub", requestId: 1, .unpublish(.init(streamId: "s1", reason: .ended)), now: now, newId: ""))
        #expect(failure(other)?.status == .unauthorized)
        let censored = registry.handle(.request(sessionId: "pub", requestId: 1, .unpublish(.init(streamId: "s1", reason: .censored)), now: now, newId: ""))
        #expect(failure(censored)?.status == .badRequest)
        let unknown = registry.handle(.request(sessionId: "pub", requestId: 1, .unpublish(.init(streamId: "zz", reason: .ended)), now: now, newId: ""))
        #expect(failure(unknown)?.status == .notFound)
        #expect(registry.streamCount == 1)

        let admin = registry.handle(.endStream(streamId: "s1", reason: .censored, description: "terms"))
        #expect(sends(admin).map(\.1) == [.event(.streamEnded(.init(streamId: "s1", reason: .censored, description: "terms")))])
    }

    @Test func everyReasonReachesSubscribersUnchanged() {
        for reason in StreamEndedReason.allCases where reason != .censored {
            var registry = registry()
            publish(&registry, "s1")
            _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: "a")
            _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "a", .success(transport)))
            let actions = registry.handle(.request(
                sessionId: "pub", requestId: 1, .unpublish(.init(streamId: "s1", reason: reason, description: "why")), now: now, newId: ""))
            #expect(sends(actions).contains { $0.0 == "sub" && $0.1 == .event(.streamEnded(.init(streamId: "s1", reason: reason, description: "why"))) })
        }
    }

    @Test func publisherSessionEndingEndsItsStreams() {
        for (how, reason) in [(SessionEnd.bye, StreamEndedReason.ended), (.connectionLost, .failed), (.keepAliveTimeout, .failed), (.serverShutdown, .maintenance)] {
            var registry = registry()
            publish(&registry, "s1")
            _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: "a")
            _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "a", .success(transport)))
            let actions = registry.handle(.sessionClosed(sessionId: "pub", how))
            #expect(sends(actions).map(\.0) == ["sub"], "the closed publisher is not sent anything")
            #expect(sends(actions).first?.1 == .event(.streamEnded(.init(streamId: "s1", reason: reason, description: how.streamEndedDescription))))
            #expect(relayCalls(actions) == [.removeStream(streamId: "s1")])
            #expect(registry.sessionCount == 2)
        }
    }

    @Test func aDetachedSessionKeepsItsStreamsUntilItResumesOrCloses() {
        var registry = registry()
        publish(&registry, "s1")
        _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: "a")
        _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "a", .success(transport)))

        let detached = registry.handle(.sessionDetached(sessionId: "pub"))
        #expect(relayCalls(detached).isEmpty)
        #expect(sends(detached).isEmpty)
        #expect(registry.detachedStreamIds == ["s1"])
        #expect(registry.isDetached("pub"))
        #expect(registry.attachedSessionCount == 2)
        #expect(registry.sessionCount == 3)

        let resumed = registry.handle(.sessionOpened(sessionId: "pub", remoteAddress: "127.0.0.2"))
        #expect(relayCalls(resumed).isEmpty)
        #expect(registry.detachedStreamIds.isEmpty)
        #expect(registry.stream("s1")?.subscribers.map(\.subscriberId) == ["a"])
        // Still the owner: it may unpublish.
        let unpublish = registry.handle(.request(sessionId: "pub", requestId: 5, .unpublish(.init(streamId: "s1", reason: .ended)), now: now, newId: ""))
        #expect(sends(unpublish).contains { $0.0 == "pub" && $0.1 == Envelope(id: 5, .ok) })

        // A detached subscriber keeps its subscription; closing it for good removes it.
        publish(&registry, "s2")
        _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s2") }, subscriberId: "b")
        _ = registry.handle(.subscriberAdded(streamId: "s2", subscriberId: "b", .success(transport)))
        _ = registry.handle(.sessionDetached(sessionId: "sub"))
        #expect(registry.stream("s2")?.subscribers.count == 1)
        #expect(registry.detachedStreamIds.isEmpty, "only publishers' streams are listed")
        let closed = registry.handle(.sessionClosed(sessionId: "sub", .connectionLost))
        #expect(relayCalls(closed) == [.removeSubscriber(streamId: "s2", subscriberId: "b")])
    }

    @Test func subscriberSessionEndingRemovesItsSubscriptions() {
        var registry = registry()
        publish(&registry, "s1")
        _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: "a")
        _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "a", .success(transport)))
        let actions = registry.handle(.sessionClosed(sessionId: "sub", .connectionLost))
        #expect(relayCalls(actions) == [.removeSubscriber(streamId: "s1", subscriberId: "a")])
        #expect(sends(actions).isEmpty)
        #expect(registry.stream("s1")?.subscribers.isEmpty == true)
        // A relay answer that arrives after its session ended is undone, not leaked.
        _ = subscribe(&registry, "sub2", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: "late")
        _ = registry.handle(.sessionClosed(sessionId: "sub2", .connectionLost))
        let late = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "late", .success(transport)))
        #expect(relayCalls(late) == [.removeSubscriber(streamId: "s1", subscriberId: "late")])
    }

    @Test func unsubscribeNamingASubscriptionRemovesThatOne() {
        var registry = registry()
        publish(&registry, "s1")
        for id in ["a", "b"] {
            _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: id)
            _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: id, .success(transport)))
        }
        let actions = registry.handle(.request(sessionId: "sub", requestId: 3, .unsubscribe(.init(streamId: "s1", subscriberId: "b")), now: now, newId: ""))
        #expect(relayCalls(actions) == [.removeSubscriber(streamId: "s1", subscriberId: "b")])
        #expect(registry.stream("s1")?.subscribers.map(\.subscriberId) == ["a"])
        let unknown = registry.handle(.request(sessionId: "sub", requestId: 4, .unsubscribe(.init(streamId: "s1", subscriberId: "b")), now: now, newId: ""))
        #expect(failure(unknown)?.status == .notFound)
    }

    @Test func viewersBandwidthRequestsReachThePublisherAsTheirLowest() {
        var registry = registry()
        publish(&registry, "s1")
        for (session, id) in [("sub", "a"), ("sub2", "b")] {
            _ = subscribe(&registry, session, token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: id)
            _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: id, .success(transport)))
        }
        func limit(_ session: String, _ bits: Int?) -> [StreamRegistry.Action] {
            registry.handle(.request(sessionId: session, requestId: 9, .limitBandwidth(.init(streamId: "s1", bitsPerSecond: bits)), now: now, newId: ""))
        }
        func toPublisher(_ actions: [StreamRegistry.Action]) -> [Envelope<ServerMessage>] { sends(actions).filter { $0.0 == "pub" }.map(\.1) }
        let first = limit("sub", 500_000)
        #expect(sends(first).contains { $0.0 == "sub" && $0.1 == Envelope(id: 9, .ok) })
        #expect(toPublisher(first) == [.event(.bandwidthLimit(.init(streamId: "s1", bitsPerSecond: 500_000)))])
        #expect(toPublisher(limit("sub2", 300_000)) == [.event(.bandwidthLimit(.init(streamId: "s1", bitsPerSecond: 300_000)))])
        #expect(toPublisher(limit("sub", 400_000)).isEmpty, "the lowest is still 300 kbit/s")
        // The lowest viewer leaves: the publisher may send up to the next one's request.
        let left = registry.handle(.request(sessionId: "sub2", requestId: 10, .unsubscribe(.init(streamId: "s1")), now: now, newId: ""))
        #expect(toPublisher(left) == [.event(.bandwidthLimit(.init(streamId: "s1", bitsPerSecond: 400_000)))])
        #expect(toPublisher(limit("sub", nil)) == [.event(.bandwidthLimit(.init(streamId: "s1", bitsPerSecond: nil)))])
        // Only a subscriber of the stream may ask.
        let stranger = registry.handle(.request(sessionId: "sub2", requestId: 11, .limitBandwidth(.init(streamId: "s1", bitsPerSecond: 100_000)), now: now, newId: ""))
        #expect(failure(stranger)?.status == .notFound)
    }

    static let layers = [
        MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: 31,
                              layer: SimulcastLayer(rid: "h", width: 1280, height: 720, bitrate: 2_500_000)),
        MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: 32,
                              layer: SimulcastLayer(rid: "m", width: 640, height: 360, bitrate: 400_000)),
        Fixture.audio,
    ]

    @Test("simulcast layers need the multi-bitrate capability and a sound description; viewers are told one video track (the best layer's SSRC); a viewer's limit goes to the relay for its own layer, not to the publisher")
    func simulcastPublishAndViewerLimits() {
        var registry = registry()
        let plain = Fixture.token(.publish, now: now)
        let refused = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(plain, tracks: Self.layers)), now: now, newId: "s0"))
        #expect(failure(refused)?.status == .unauthorized)
        #expect(failure(refused)?.message.contains("multi-bitrate") == true)
        let granted = Fixture.token(.publish, now: now) { $0.capability("multi-bitrate") }
        var twins = Self.layers
        twins[1].layer!.rid = "h"
        let malformed = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(granted, tracks: twins)), now: now, newId: "s0"))
        #expect(failure(malformed)?.status == .badRequest)
        let single = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(granted, tracks: [Self.layers[0], Fixture.audio])), now: now, newId: "s0"))
        #expect(failure(single)?.message.contains("2 to 4 layers") == true)
        var tiny = Self.layers
        (tiny[1].layer!.width, tiny[1].layer!.height) = (1, 1)
        let tooSmall = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(granted, tracks: tiny)), now: now, newId: "s0"))
        #expect(failure(tooSmall)?.message.contains("2×2") == true)
        // A browser's layers are not sized by its offer: 0×0 is "not known", and accepted.
        var unsized = Self.layers
        for index in unsized.indices where unsized[index].layer != nil { (unsized[index].layer!.width, unsized[index].layer!.height) = (0, 0) }
        let browser = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(granted, tracks: unsized)), now: now, newId: "s9"))
        #expect(relayCalls(browser) == [.addPublisher(streamId: "s9", tracks: unsized)])

        let published = registry.handle(.request(sessionId: "pub", requestId: 1, .publish(Fixture.publish(granted, tracks: Self.layers)), now: now, newId: "s1"))
        #expect(relayCalls(published) == [.addPublisher(streamId: "s1", tracks: Self.layers)], "the relay is told every layer")
        _ = registry.handle(.publisherAdded(streamId: "s1", .success(transport)))
        _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: "a")
        let added = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "a", .success(transport)))
        guard case .subscribed(let subscribed)? = sends(added).first(where: { $0.0 == "sub" })?.1.message else {
            Issue.record("no subscribed reply: \(added)")
            return
        }
        var video = Self.layers[0]
        video.layer = nil
        #expect(subscribed.tracks == [video, Fixture.audio])

        let limited = registry.handle(.request(sessionId: "sub", requestId: 9, .limitBandwidth(.init(streamId: "s1", bitsPerSecond: 500_000)), now: now, newId: ""))
        #expect(relayCalls(limited) == [.limitSubscriber(streamId: "s1", subscriberId: "a", bitsPerSecond: 500_000)])
        #expect(sends(limited).allSatisfy { $0.0 != "pub" }, "the publisher keeps its encodings")
        #expect(registry.stream("s1")?.viewerLimit == nil)
        // The size it shows the video at goes to the relay too; a session that does not subscribe is refused.
        let sized = registry.handle(.request(sessionId: "sub", requestId: 10, .setViewSize(.init(streamId: "s1", size: ViewSize(width: 320, height: 180))),
                                             now: now, newId: ""))
        #expect(relayCalls(sized) == [.sizeSubscriber(streamId: "s1", subscriberId: "a", size: ViewSize(width: 320, height: 180))])
        #expect(sends(sized).contains { $0.0 == "sub" && $0.1.message == .ok })
        let stranger = registry.handle(.request(sessionId: "pub", requestId: 11, .setViewSize(.init(streamId: "s1", size: nil)), now: now, newId: ""))
        #expect(failure(stranger)?.status == .notFound && relayCalls(stranger).isEmpty)

        // A viewer may ask to stay on one layer: by RID, best or lowest; not one the stream lacks.
        let token = Fixture.token(.stream, now: now) { $0.originStreamId("s1") }
        let unknown = registry.handle(.request(sessionId: "sub", requestId: 5, .subscribe(.init(streamToken: token, layer: "x")), now: now, newId: "b"))
        #expect(failure(unknown)?.status == .badRequest)
        #expect(relayCalls(unknown).isEmpty)
        _ = registry.handle(.request(sessionId: "sub", requestId: 6, .subscribe(.init(streamToken: token, layer: "m")), now: now, newId: "c"))
        let pinned = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "c", .success(transport)))
        #expect(pinned.first == .pinLayer(streamId: "s1", subscriberId: "c", layer: "m"), "before the reply: \(pinned)")
    }

    @Test func thePublishersQualityReachesItsViewersAndLaterOnes() {
        var registry = registry()
        publish(&registry, "s1")
        _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: "a")
        _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "a", .success(transport)))
        let event = Envelope<ServerMessage>.event(.publisherQuality(.init(streamId: "s1", reason: .uploadLimited)))
        let told = registry.handle(.request(sessionId: "pub", requestId: 3, .publisherQuality(.init(streamId: "s1", reason: .uploadLimited)), now: now, newId: ""))
        #expect(sends(told).map(\.0) == ["pub", "sub"])
        #expect(sends(told).last?.1 == event)
        let again = registry.handle(.request(sessionId: "pub", requestId: 4, .publisherQuality(.init(streamId: "s1", reason: .uploadLimited)), now: now, newId: ""))
        #expect(sends(again).map(\.0) == ["pub"], "unchanged: nothing new for viewers")
        // A later viewer hears it right after its subscribed reply.
        _ = subscribe(&registry, "sub2", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: "b")
        let joined = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "b", .success(transport)))
        #expect(sends(joined).map(\.0) == ["sub2", "sub2"])
        #expect(sends(joined).last?.1 == event)
        // Only the publisher may say it.
        let forged = registry.handle(.request(sessionId: "sub", requestId: 5, .publisherQuality(.init(streamId: "s1", reason: .none)), now: now, newId: ""))
        #expect(failure(forged)?.status == .unauthorized)
    }

    @Test func theRelaysAudioOnlyFallbackReachesTheSubscribingSessionOnly() {
        var registry = registry()
        publish(&registry, "s1")
        for (session, id) in [("sub", "a"), ("sub2", "b")] {
            _ = subscribe(&registry, session, token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: id)
            _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: id, .success(transport)))
        }
        let suspended = SubscriberVideoEvent(streamId: "s1", subscriberId: "b", suspended: true)
        #expect(sends(registry.handle(.subscriberVideo(suspended))).map { $0.0 } == ["sub2"])
        #expect(sends(registry.handle(.subscriberVideo(suspended))).map { $0.1 } == [.event(.subscriberVideo(suspended))])
        // A subscription that is gone, or a stream that is, hears nothing.
        _ = registry.handle(.request(sessionId: "sub2", requestId: 3, .unsubscribe(.init(streamId: "s1", subscriberId: "b")), now: now, newId: ""))
        #expect(sends(registry.handle(.subscriberVideo(.init(streamId: "s1", subscriberId: "b", suspended: false)))).isEmpty)
        #expect(sends(registry.handle(.subscriberVideo(.init(streamId: "nope", subscriberId: "a", suspended: true)))).isEmpty)
    }

    @Test func unsubscribeRemovesOneSubscription() {
        var registry = registry()
        publish(&registry, "s1")
        _ = subscribe(&registry, "sub", token: Fixture.token(.stream, now: now) { $0.originStreamId("s1") }, subscriberId: "a")
        _ = registry.handle(.subscriberAdded(streamId: "s1", subscriberId: "a", .success(transport)))
        let actions = registry.handle(.request(sessionId: "sub", requestId: 3, .unsubscribe(.init(streamId: "s1")), now: now, newId: ""))
        #expect(relayCalls(actions) == [.removeSubscriber(streamId: "s1", subscriberId: "a")])
        #expect(sends(actions).map(\.1) == [Envelope(id: 3, .ok)])
        let again = registry.handle(.request(sessionId: "sub", requestId: 4, .unsubscribe(.init(streamId: "s1")), now: now, newId: ""))
        #expect(failure(again)?.status == .notFound)
    }
}

@Suite("Stream registry: publish types")
struct StreamRegistryPublishTypeTests {
    @Test("record and append publish, then ask for a recording under the stream name; live records nothing")
    func recordingRequested() {
        var registry = StreamRegistry(tokens: TokenAuthority(applicationId: Fixture.applicationId, secret: Fixture.secret))
        _ = registry.handle(.sessionOpened(sessionId: "a", remoteAddress: "127.0.0.1"))
        let track = MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: 1)
        let transport = MediaTransport(srtpProfile: "AEAD_AES_128_GCM", port: 40_000, clientKey: "c", serverKey: "s")
        for (index, type) in [PublishType.record, .append, .live].enumerated() {
            let id = "stream-\(index)"
            let publish = ClientMessage.Publish(streamToken: Fixture.token(.publish, now: Date()) { $0.streamName("show") }, publishType: type, streamName: "show", tracks: [track])
            let asked = registry.handle(.request(sessionId: "a", requestId: 1, .publish(publish), now: Date(), newId: id))
            #expect(asked.contains { if case .addPublisher = $0 { return true } else { return false } })
            let added = registry.handle(.publisherAdded(streamId: id, .success(transport)))
            let recordings = added.compactMap { action -> StreamRegistry.Action? in
                if case .record = action { return action } else { return nil }
            }
            #expect(recordings == (type == .live ? [] : [.record(streamId: id, name: "show", type: type)]))
        }
    }
}
