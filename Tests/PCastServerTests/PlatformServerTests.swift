import Foundation
import Logging
import PCastContracts
import PCastProtocol
import PCastRelay
import PCastServer
import PCastTestSupport
import Testing

/// The server over real sockets on 127.0.0.1, with a recording relay.
@Suite struct PlatformServerTests {
    static let configuration = PlatformConfiguration(
        applicationId: Fixture.applicationId, secret: Fixture.secret, host: "127.0.0.1", httpPort: 0,
        mediaPort: 40_000, dataDirectory: NSTemporaryDirectory(), keepAliveInterval: 10)

    /// Runs `body` against a fresh server and shuts it down afterwards, whatever happens.
    func withServer(
        clock: ManualClock? = nil,
        configuration: PlatformConfiguration = Self.configuration,
        tickInterval: Duration = .milliseconds(50),
        _ body: (PlatformServer, RecordingRelay) async throws -> Void
    ) async throws {
        let relay = RecordingRelay()
        var logger = Logger(label: "pcast.test")
        logger.logLevel = .warning
        let now: @Sendable () -> Date
        if let clock { now = clock.function } else { now = { Date() } }
        // A data directory of its own: suites run in parallel, and two servers migrating one room
        // database at once collide ("table room already exists").
        var configuration = configuration
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-server-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        configuration.dataDirectory = directory.path
        let server = try await PlatformServer.start(
            configuration: configuration, relay: relay, logger: logger, clock: now, tickInterval: tickInterval)
        do {
            try await body(server, relay)
        } catch {
            await server.shutdown()
            throw error
        }
        await server.shutdown()
    }

    /// A connected, authenticated socket and its session id.
    func authenticated(_ server: PlatformServer, deflate: Bool = false) async throws -> (TestSocket, String) {
        let (socket, authenticated) = try await authenticate(server, deflate: deflate)
        return (socket, authenticated.sessionId)
    }

    /// A connected socket and the platform's answer to `authenticate` (resuming a session if given).
    func authenticate(_ server: PlatformServer, deflate: Bool = false, resuming: ServerMessage.Authenticated? = nil) async throws
        -> (TestSocket, ServerMessage.Authenticated) {
        let socket = try await TestSocket.connect(port: server.httpPort, deflate: deflate)
        let reply = try await socket.request(1, .authenticate(.init(
            token: Fixture.token(.auth), sessionId: resuming?.sessionId, resumeKey: resuming?.resumeKey)))
        guard case .authenticated(let authenticated) = reply.message else {
            throw TestSocket.Unexpected(received: .message(reply))
        }
        return (socket, authenticated)
    }

    func failureStatus(_ envelope: Envelope<ServerMessage>) -> RequestStatus? {
        if case .failure(let failure) = envelope.message { return failure.status }
        return nil
    }

    func publish(_ socket: TestSocket, id: UInt64 = 10, tags: [String] = [], applyTags: [String] = []) async throws -> ServerMessage.Published {
        let token = Fixture.token(.publish) { $0.applyTags(applyTags) }
        let reply = try await socket.request(id, .publish(Fixture.publish(token, tags: tags)))
        guard case .published(let published) = reply.message else { throw TestSocket.Unexpected(received: .message(reply)) }
        #expect(reply.id == id)
        return published
    }

    func subscribe(_ socket: TestSocket, id: UInt64 = 20, _ configure: (DigestTokenBuilder) -> DigestTokenBuilder) async throws -> Envelope<ServerMessage> {
        try await socket.request(id, .subscribe(.init(streamToken: Fixture.token(.stream, configure))))
    }

    // MARK: Session lifecycle

    @Test func authenticateReturnsASessionIdAndKeepAliveIsAnswered() async throws {
        try await withServer { server, _ in
            let (socket, sessionId) = try await authenticated(server)
            #expect(sessionId.hasPrefix("session-"))
            let keepAlive = try await socket.request(2, .keepAlive)
            #expect(keepAlive == Envelope(id: 2, .ok))
            let bye = try await socket.request(3, .bye)
            #expect(bye == Envelope(id: 3, .ok))
            #expect(try await socket.closeCode() == 1000)
            await socket.waitUntilClosed()
        }
    }

    @Test func requestsBeforeAuthenticationAreRefused() async throws {
        try await withServer { server, relay in
            let socket = try await TestSocket.connect(port: server.httpPort)
            let publish = try await socket.request(1, .publish(Fixture.publish(Fixture.token(.publish))))
            #expect(failureStatus(publish) == .unauthorized)
            let keepAlive = try await socket.request(2, .keepAlive)
            #expect(failureStatus(keepAlive) == .unauthorized)
            #expect(relay.calls.isEmpty)
            await socket.close()
        }
    }

    @Test func badAuthTokensAreRefused() async throws {
        try await withServer { server, relay in
            let socket = try await TestSocket.connect(port: server.httpPort)
            let tokens: [(String, RequestStatus)] = [
                (Fixture.token(.auth, secret: "forged"), .unauthorized),
                (Fixture.token(.auth, expiresIn: -60), .unauthorized),
                (Fixture.token(.publish), .unauthorized),
                (Fixture.token(.auth) { $0.remoteAddress("192.0.2.7") }, .unauthorized),
                (Fixture.token(.auth) { $0.capability("rtmp") }, .notSupported),
            ]
            for (index, (token, status)) in tokens.enumerated() {
                let reply = try await socket.request(UInt64(index), .authenticate(.init(token: token)))
                #expect(failureStatus(reply) == status)
            }
            // Still usable: a good token works afterwards; a token bound to this address too.
            let good = try await socket.request(99, .authenticate(.init(token: Fixture.token(.auth) { $0.remoteAddress("127.0.0.1") })))
            guard case .authenticated = good.message else {
                Issue.record("expected authenticated, got \(good)")
                return
            }
            #expect(relay.calls.isEmpty)
            await socket.close()
        }
    }

    @Test func keepAliveTimeoutClosesTheSession() async throws {
        let clock = ManualClock()
        try await withServer(clock: clock) { server, _ in
            let (socket, _) = try await authenticated(server)
            clock.advance(by: 31)
            #expect(try await socket.closeCode() == 1008)
            await socket.waitUntilClosed()
        }
    }

    // MARK: Publish and subscribe

    @Test func publishAssignsAStreamIdAndKeepsTagsWithApplyTags() async throws {
        try await withServer { server, relay in
            let (publisher, _) = try await authenticated(server)
            let published = try await publish(publisher, tags: ["roomId:r1"], applyTags: ["channelId:demo"])
            #expect(published.streamId.hasPrefix("stream-"))
            #expect(published.transport.port == relay.mediaPort)
            #expect(relay.calls == [.addPublisher(streamId: published.streamId, tracks: [Fixture.video, Fixture.audio])])

            // The tags are what a stream token's required tag finds.
            let (subscriber, _) = try await authenticated(server)
            for tag in ["roomId:r1", "channelId:demo"] {
                let reply = try await subscriber.request(20, .subscribe(.init(streamToken: Fixture.token(.stream) { $0.requiredTag(RequiredTag(rawValue: tag)) })))
                guard case .subscribed(let subscribed) = reply.message else {
                    Issue.record("tag \(tag): \(reply)")
                    continue
                }
                #expect(subscribed.streamId == published.streamId)
            }
            await publisher.close()
            await subscriber.close()
        }
    }

    @Test func subscribeReturnsTheRelaysTransport() async throws {
        try await withServer { server, relay in
            let (publisher, _) = try await authenticated(server)
            let published = try await publish(publisher)
            let (subscriber, _) = try await authenticated(server)
            let reply = try await subscribe(subscriber) { $0.originStreamId(published.streamId) }
            guard case .subscribed(let subscribed) = reply.message else {
                Issue.record("expected subscribed, got \(reply)")
                return
            }
            #expect(subscribed.tracks == [Fixture.video, Fixture.audio])
            #expect(subscribed.transport.rtcpSSRC == 0x1234)
            guard case .addSubscriber(let streamId, let subscriberId)? = relay.calls.last else {
                Issue.record("no addSubscriber call")
                return
            }
            #expect(streamId == published.streamId)
            #expect(subscribed.transport.clientKey == "sub-client-\(subscriberId)")
            await publisher.close()
            await subscriber.close()
        }
    }

    @Test func badStreamTokensAreRefusedWithoutTouchingTheRelay() async throws {
        try await withServer { server, relay in
            let (publisher, publisherSession) = try await authenticated(server)
            let published = try await publish(publisher, applyTags: ["channelId:demo"])
            let (subscriber, _) = try await authenticated(server)
            let callsBefore = relay.calls
            let stream = published.streamId
            let tokens: [(String, RequestStatus)] = [
                (Fixture.token(.stream, secret: "forged") { $0.originStreamId(stream) }, .unauthorized),
                (Fixture.token(.stream, expiresIn: -1) { $0.originStreamId(stream) }, .unauthorized),
                (Fixture.token(.auth) { $0.originStreamId(stream) }, .unauthorized),
                (Fixture.token(.publish) { $0.originStreamId(stream) }, .unauthorized),
                (Fixture.token(.stream) { $0.originStreamId(stream).capability("on-demand") }, .notSupported),
                (Fixture.token(.stream) { $0.originStreamId(stream).sessionId(publisherSession) }, .unauthorized),
                (Fixture.token(.stream) { $0.originStreamId(stream).channel("elsewhere") }, .unauthorized),
                (Fixture.token(.stream) { $0.channel("elsewhere") }, .noStreamPlaying),
                (Fixture.token(.stream) { $0.originStreamId("stream-unknown") }, .notFound),
                (Fixture.token(.stream), .badRequest),
            ]
            for (index, (token, status)) in tokens.enumerated() {
                let reply = try await subscriber.request(UInt64(100 + index), .subscribe(.init(streamToken: token)))
                #expect(reply.id == UInt64(100 + index))
                #expect(failureStatus(reply) == status, "case \(index): \(reply)")
            }
            #expect(relay.calls == callsBefore)

            // A bad publish token does not reach the relay either.
            let badPublish = try await publisher.request(50, .publish(Fixture.publish(Fixture.token(.stream))))
            #expect(failureStatus(badPublish) == .unauthorized)
            #expect(relay.calls == callsBefore)
            await publisher.close()
            await subscriber.close()
        }
    }

    @Test func unpublishWithCustomReasonReachesSubscribersExactly() async throws {
        try await withServer { server, relay in
            let (publisher, _) = try await authenticated(server)
            let published = try await publish(publisher)
            var subscribers: [TestSocket] = []
            for _ in 0..<2 {
                let (subscriber, _) = try await authenticated(server)
                let reply = try await subscribe(subscriber) { $0.originStreamId(published.streamId) }
                guard case .subscribed = reply.message else { throw TestSocket.Unexpected(received: .message(reply)) }
                subscribers.append(subscriber)
            }
            let reply = try await publisher.request(30, .unpublish(.init(streamId: published.streamId, reason: .custom, description: "see you tomorrow")))
            #expect(reply == Envelope(id: 30, .ok))
            let expected = Envelope<ServerMessage>.event(.streamEnded(.init(streamId: published.streamId, reason: .custom, description: "see you tomorrow")))
            #expect(try await publisher.nextMessage() == expected)
            for subscriber in subscribers {
                #expect(try await subscriber.nextMessage() == expected)
            }
            #expect(relay.calls.last == .removeStream(streamId: published.streamId))
            await publisher.close()
            for subscriber in subscribers { await subscriber.close() }
        }
    }

    @Test func aDroppedPublisherKeepsItsStreamWhileMediaFlowsAndLosesItWhenMediaStops() async throws {
        try await withServer { server, relay in
            let (publisher, _) = try await authenticated(server)
            let published = try await publish(publisher)
            let (subscriber, _) = try await authenticated(server)
            _ = try await subscribe(subscriber) { $0.originStreamId(published.streamId) }
            await publisher.close()
            // Signaling is gone but media still reaches the relay: the stream waits for a resume.
            try await Task.sleep(for: .milliseconds(400))
            #expect(subscriber.all.isEmpty)
            #expect(await server.streamCount == 1)
            // Its media stops too (a crash): the stream ends as failed.
            relay.setIdleTime(.seconds(PlatformConfiguration.defaultDetachedMediaTimeout + 1), streamId: published.streamId)
            let ended = try await subscriber.nextMessage()
            #expect(ended == .event(.streamEnded(.init(streamId: published.streamId, reason: .failed,
                                                       description: "the publisher's connection was lost and its media stopped"))))
            #expect(relay.calls.last == .removeStream(streamId: published.streamId))
            await subscriber.close()
        }
    }

    @Test func theRelaysAudioOnlyFallbackIsToldToTheViewer() async throws {
        try await withServer { server, relay in
            let (publisher, _) = try await authenticated(server)
            let published = try await publish(publisher)
            let (viewer, _) = try await authenticated(server)
            guard case .subscribed(let subscribed) = try await subscribe(viewer, { $0.originStreamId(published.streamId) }).message,
                  let subscriberId = subscribed.subscriberId
            else {
                Issue.record("not subscribed")
                return
            }
            let event = SubscriberVideoEvent(streamId: published.streamId, subscriberId: subscriberId, suspended: true)
            relay.pushVideoEvent(event)
            #expect(try await viewer.nextMessage() == .event(.subscriberVideo(event)))
            relay.pushVideoEvent(SubscriberVideoEvent(streamId: published.streamId, subscriberId: subscriberId, suspended: false))
            #expect(try await viewer.nextMessage() == .event(.subscriberVideo(.init(streamId: published.streamId, subscriberId: subscriberId, suspended: false))))
            #expect(publisher.all.isEmpty, "only the viewer concerned")
            await publisher.close()
            await viewer.close()
        }
    }

    @Test func aResumedSessionKeepsItsStreamsAndGetsTheEventsItMissed() async throws {
        try await withServer { server, relay in
            let (publisher, first) = try await authenticate(server)
            let published = try await publish(publisher)
            let (other, _) = try await authenticated(server)
            let otherStream = try await publish(other)
            let (viewer, viewing) = try await authenticate(server)
            _ = try await subscribe(viewer, id: 20) { $0.originStreamId(published.streamId) }
            _ = try await subscribe(viewer, id: 21) { $0.originStreamId(otherStream.streamId) }

            // Both the publisher's and the viewer's connections drop; meanwhile the other stream ends.
            await publisher.close()
            await viewer.close()
            _ = try await other.request(30, .unpublish(.init(streamId: otherStream.streamId, reason: .ended)))
            _ = try await other.nextMessage()

            // They resume: same session ids, the stream is still there, the viewer hears what it missed.
            let (publisherAgain, resumedPublisher) = try await authenticate(server, resuming: first)
            #expect(resumedPublisher.sessionId == first.sessionId)
            #expect(resumedPublisher.resumed == true)
            #expect(resumedPublisher.streams == [published.streamId], "the platform says which streams it still has")
            let (viewerAgain, resumedViewer) = try await authenticate(server, resuming: viewing)
            #expect(resumedViewer.resumed == true)
            #expect(resumedViewer.streams == [published.streamId], "the ended stream is not among them")
            #expect(try await viewerAgain.nextMessage() == .event(.streamEnded(.init(streamId: otherStream.streamId, reason: .ended, description: nil))))
            #expect(await server.streamCount == 1)
            #expect(!relay.calls.contains(.removeStream(streamId: published.streamId)))
            // The resumed sessions still own their stream and subscription.
            #expect(try await viewerAgain.request(40, .unsubscribe(.init(streamId: published.streamId))) == Envelope(id: 40, .ok))
            #expect(try await publisherAgain.request(41, .unpublish(.init(streamId: published.streamId, reason: .ended))) == Envelope(id: 41, .ok))
            for socket in [publisherAgain, viewerAgain, other] { await socket.close() }
        }
    }

    @Test func resumingOnANewConnectionTakesTheSessionOverFromTheOldOne() async throws {
        try await withServer { server, relay in
            let (old, first) = try await authenticate(server)
            let published = try await publish(old)
            // The client's path went silent; it reconnects before the platform noticed.
            let (new, resumed) = try await authenticate(server, resuming: first)
            #expect(resumed.resumed == true && resumed.sessionId == first.sessionId)
            #expect(try await old.closeCode() == 1008)
            #expect(await server.streamCount == 1)
            #expect(!relay.calls.contains(.removeStream(streamId: published.streamId)))
            #expect(try await new.request(20, .unpublish(.init(streamId: published.streamId, reason: .ended))) == Envelope(id: 20, .ok))
            // A wrong key takes nothing over.
            var forged = first
            forged.resumeKey = "resume-0000"
            let (_, stranger) = try await authenticate(server, resuming: forged)
            #expect(stranger.resumed != true && stranger.sessionId != first.sessionId)
            await new.close()
        }
    }

    @Test func aSessionNotResumedInTimeLosesItsStreams() async throws {
        let clock = ManualClock()
        var configuration = Self.configuration
        configuration.resumeWindow = 5
        try await withServer(clock: clock, configuration: configuration) { server, relay in
            let (publisher, first) = try await authenticate(server)
            let published = try await publish(publisher)
            let (subscriber, _) = try await authenticated(server)
            _ = try await subscribe(subscriber) { $0.originStreamId(published.streamId) }
            await publisher.close()
            clock.advance(by: 4)
            _ = try await subscriber.request(50, .keepAlive)
            #expect(await server.streamCount == 1)
            clock.advance(by: 2)
            let ended = try await subscriber.nextMessage()
            #expect(ended == .event(.streamEnded(.init(streamId: published.streamId, reason: .failed, description: SessionEnd.connectionLost.streamEndedDescription))))
            #expect(relay.calls.last == .removeStream(streamId: published.streamId))
            // Too late to resume: a new session, without the stream.
            let (_, late) = try await authenticate(server, resuming: first)
            #expect(late.resumed != true)
            #expect(late.sessionId != first.sessionId)
            await subscriber.close()
        }
    }

    // MARK: Simulcast

    @Test("a rested simulcast layer is woken the moment the relay sees a viewer move to it, without waiting for the platform's tick; resting waits for the ticks")
    func restedLayerWakesAtOnce() async throws {
        let clock = ManualClock()
        var configuration = Self.configuration
        configuration.unwatchedLayerRest = 2
        // No tick of its own in the test's time: the test runs them (server.tick()), so an event
        // that comes without one is the wake.
        try await withServer(clock: clock, configuration: configuration, tickInterval: .seconds(3600)) { server, relay in
            let (publisher, _) = try await authenticated(server)
            let token = Fixture.token(.publish) { $0.capability("multi-bitrate") }
            let layered = [("h", 1280, 2_500_000), ("m", 640, 400_000), ("l", 320, 150_000)].enumerated().map { index, layer in
                MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: UInt32(31 + index),
                                      layer: SimulcastLayer(rid: layer.0, width: layer.1, height: layer.1 * 9 / 16, bitrate: layer.2))
            }
            let reply = try await publisher.request(10, .publish(Fixture.publish(token, tracks: layered)))
            guard case .published(let published) = reply.message else { throw TestSocket.Unexpected(received: .message(reply)) }
            let streamId = published.streamId

            // One viewer on the best layer; a tick after the rest time rests the smallest.
            relay.setWatched(["h"], streamId: streamId)
            await server.tick()
            clock.advance(by: 3)
            await server.tick()
            #expect(try await publisher.nextMessage() == .event(.layerActivity(.init(streamId: streamId, active: ["h", "m"]))))

            // A viewer moves to it: the publisher hears with no tick.
            relay.setWatched(["h", "l"], streamId: streamId)
            #expect(try await publisher.nextMessage() == .event(.layerActivity(.init(streamId: streamId, active: ["h", "l", "m"]))))

            // Nobody watches it again: nothing until a tick after the rest time.
            relay.setWatched(["h"], streamId: streamId)
            clock.advance(by: 1)
            await server.tick()
            clock.advance(by: 2)
            await server.tick()
            #expect(try await publisher.nextMessage() == .event(.layerActivity(.init(streamId: streamId, active: ["h", "m"]))))
            await publisher.close()
        }
    }

    // MARK: Admin

    @Test func adminEndsAStreamAsCensored() async throws {
        try await withServer { server, _ in
            let (publisher, _) = try await authenticated(server)
            let published = try await publish(publisher)
            let (subscriber, _) = try await authenticated(server)
            _ = try await subscribe(subscriber) { $0.originStreamId(published.streamId) }
            let url = "\(server.httpURL)/admin/streams/\(published.streamId)/end"

            let anonymous = try await http("POST", url)
            #expect(anonymous.status == 401)
            #expect(anonymous.headers["www-authenticate"]?.hasPrefix("Basic") == true)
            let wrong = try await http("POST", url, basic: (Fixture.applicationId, "not-the-secret"))
            #expect(wrong.status == 401)
            let unknown = try await http("POST", "\(server.httpURL)/admin/streams/stream-nope/end", basic: (Fixture.applicationId, Fixture.secret))
            #expect(unknown.status == 404)
            let badBody = try await http("POST", url, body: "[1,2", basic: (Fixture.applicationId, Fixture.secret))
            #expect(badBody.status == 400)

            let ok = try await http("POST", url, body: #"{"description":"terms of service"}"#, basic: (Fixture.applicationId, Fixture.secret))
            #expect(ok.status == 200)
            let expected = Envelope<ServerMessage>.event(.streamEnded(.init(streamId: published.streamId, reason: .censored, description: "terms of service")))
            #expect(try await subscriber.nextMessage() == expected)
            #expect(try await publisher.nextMessage() == expected)
            let again = try await http("POST", url, basic: (Fixture.applicationId, Fixture.secret))
            #expect(again.status == 404)
            await publisher.close()
            await subscriber.close()
        }
    }

    // MARK: Limits and bad input

    @Test func oversizedFrameClosesWith1009AndOthersCarryOn() async throws {
        try await withServer { server, _ in
            let (big, _) = try await authenticated(server)
            let (other, _) = try await authenticated(server)
            big.sendText(String(repeating: "x", count: Self.configuration.messageSizeLimit + 1))
            #expect(try await big.closeCode() == 1009)
            await big.waitUntilClosed()
            #expect(try await other.request(5, .keepAlive) == Envelope(id: 5, .ok))
            let (third, _) = try await authenticated(server)
            #expect(try await third.request(6, .keepAlive) == Envelope(id: 6, .ok))
            await other.close()
            await third.close()
        }
    }

    @Test func fragmentsAddingUpPastTheLimitClose1009() async throws {
        try await withServer { server, _ in
            let (socket, _) = try await authenticated(server)
            socket.sendFragmentedText(String(repeating: "y", count: Self.configuration.messageSizeLimit * 2), parts: 4)
            #expect(try await socket.closeCode() == 1009)
            await socket.waitUntilClosed()
        }
    }

    @Test func compressedFrameInflatingPastTheLimitCloses1009() async throws {
        try await withServer { server, _ in
            let (socket, _) = try await authenticated(server, deflate: true)
            #expect(socket.deflateNegotiated)
            // A compressed message within the limit is read as usual.
            let keepAlive = String(decoding: try SignalingCodec.encode(Envelope<ClientMessage>.request(id: 7, .keepAlive)), as: UTF8.self)
            try socket.sendCompressedText(keepAlive)
            #expect(try await socket.nextMessage() == Envelope(id: 7, .ok))
            // A few hundred bytes on the wire, a megabyte once inflated.
            try socket.sendCompressedText(String(repeating: " ", count: 1 << 20))
            #expect(try await socket.closeCode() == 1009)
            await socket.waitUntilClosed()
        }
    }

    @Test func malformedMessagesGetTypedErrorsAndTheConnectionStays() async throws {
        try await withServer { server, _ in
            let (socket, _) = try await authenticated(server)
            socket.sendText("{not json")
            let malformed = try await socket.nextMessage()
            #expect(failureStatus(malformed) == .badRequest)
            socket.sendText(#"{"v":1,"id":41,"type":"teleport"}"#)
            let unknown = try await socket.nextMessage()
            #expect(unknown.id == 41)
            #expect(failureStatus(unknown) == .badRequest)
            socket.sendText(#"{"v":1,"id":42,"type":"publish","payload":{"tags":[]}}"#)
            let invalid = try await socket.nextMessage()
            #expect(invalid.id == 42)
            #expect(failureStatus(invalid) == .badRequest)
            #expect(try await socket.request(43, .keepAlive) == Envelope(id: 43, .ok))
            await socket.close()
        }
    }

    // MARK: HTTP

    @Test func healthReadinessAndMetrics() async throws {
        try await withServer { server, relay in
            let health = try await http("GET", "\(server.httpURL)/healthz")
            #expect(health.status == 200)
            let ready = try await http("GET", "\(server.httpURL)/readyz")
            #expect(ready.status == 200)

            let before = try await http("GET", "\(server.httpURL)/metrics")
            #expect(before.status == 200)
            for name in [
                "pcast_sessions", "pcast_streams", "pcast_subscribers", "pcast_relay_packets_in_total", "pcast_relay_bytes_in_total",
                "pcast_relay_packets_out_total", "pcast_relay_bytes_out_total", "pcast_relay_srtp_failures_total",
                "pcast_relay_nacks_served_total", "pcast_relay_keyframe_requests_total",
            ] {
                #expect(metric(name, in: before.body) != nil, "\(name) missing")
            }
            #expect(metric("pcast_sessions", in: before.body) == 0)
            #expect(metric("pcast_relay_packets_in_total", in: before.body) == 0)

            let (publisher, _) = try await authenticated(server)
            let published = try await publish(publisher)
            let (subscriber, _) = try await authenticated(server)
            _ = try await subscribe(subscriber) { $0.originStreamId(published.streamId) }
            var statistics = RelayStatistics()
            statistics.streams = 1
            statistics.subscribers = 1
            statistics.packetsIn = 120
            statistics.bytesIn = 144_000
            statistics.packetsOut = 118
            statistics.bytesOut = 141_600
            statistics.srtpFailures = 3
            statistics.nacksServed = 4
            statistics.keyframeRequests = 2
            relay.setStatistics(statistics)

            let after = try await http("GET", "\(server.httpURL)/metrics")
            #expect(metric("pcast_sessions", in: after.body) == 2)
            #expect(metric("pcast_streams", in: after.body) == 1)
            #expect(metric("pcast_subscribers", in: after.body) == 1)
            #expect(metric("pcast_relay_packets_in_total", in: after.body) == 120)
            #expect(metric("pcast_relay_bytes_out_total", in: after.body) == 141_600)
            #expect(metric("pcast_relay_srtp_failures_total", in: after.body) == 3)
            #expect(metric("pcast_relay_nacks_served_total", in: after.body) == 4)
            #expect(metric("pcast_relay_keyframe_requests_total", in: after.body) == 2)

            // bye ends the sessions and the stream (a dropped connection would wait to resume).
            _ = try await publisher.request(60, .bye)
            _ = try await subscriber.request(61, .bye)
            await publisher.close()
            await subscriber.close()
            try await eventually("sessions gauge back to 0") {
                let text = try await http("GET", "\(server.httpURL)/metrics").body
                return metric("pcast_sessions", in: text) == 0 && metric("pcast_streams", in: text) == 0
            }
        }
    }

    @Test func shutdownEndsStreamsAsMaintenanceAndClosesWith1001() async throws {
        let relay = RecordingRelay()
        var logger = Logger(label: "pcast.test")
        logger.logLevel = .warning
        let server = try await PlatformServer.start(configuration: Self.configuration, relay: relay, logger: logger)
        let (publisher, _) = try await authenticated(server)
        let published = try await publish(publisher)
        let (subscriber, _) = try await authenticated(server)
        _ = try await subscribe(subscriber) { $0.originStreamId(published.streamId) }
        await server.shutdown()
        let expected = Envelope<ServerMessage>.event(.streamEnded(.init(
            streamId: published.streamId, reason: .maintenance, description: SessionEnd.serverShutdown.streamEndedDescription)))
        #expect(try await subscriber.nextMessage() == expected)
        let subscriberClose = try await subscriber.closeCode()
        #expect(subscriberClose == 1001)
        #expect(try await publisher.nextMessage() == expected)
        let publisherClose = try await publisher.closeCode()
        #expect(publisherClose == 1001)
        #expect(relay.calls.last == .removeStream(streamId: published.streamId))
        await publisher.waitUntilClosed()
        await subscriber.waitUntilClosed()
    }

    @Test func notReadyWhileTheRelayHasNoMediaPort() async throws {
        var logger = Logger(label: "pcast.test")
        logger.logLevel = .warning
        let server = try await PlatformServer.start(configuration: Self.configuration, relay: RecordingRelay(mediaPort: 0), logger: logger)
        let ready = try await http("GET", "\(server.httpURL)/readyz")
        let health = try await http("GET", "\(server.httpURL)/healthz")
        await server.shutdown()
        #expect(ready.status == 503)
        #expect(ready.body.contains("media port"))
        #expect(health.status == 200)
    }

    @Test func startRefusesAnInvalidConfiguration() async throws {
        var bad = Self.configuration
        bad.secret = ""
        await #expect(throws: PlatformServerError.invalidConfiguration(.missingSecret)) {
            _ = try await PlatformServer.start(configuration: bad, relay: RecordingRelay())
        }
    }

    @Test func startFailsCleanlyWhenThePortIsTaken() async throws {
        try await withServer { server, relay in
            var taken = Self.configuration
            taken.httpPort = server.httpPort
            await #expect(throws: PlatformServerError.self) {
                _ = try await PlatformServer.start(configuration: taken, relay: relay)
            }
        }
    }
}
