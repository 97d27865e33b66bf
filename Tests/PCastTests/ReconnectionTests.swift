import Foundation
@testable import PCast
import PCastImpairment
import PCastNode
import PCastServer
import PCastTestSupport
import Synchronization
import Testing

/// When things happen to an SDK's connection (online / offline / authentication), with the time.
final class ConnectionLog: Sendable {
    enum Entry: Sendable, Equatable {
        case online
        case offline
        case authenticated(RequestStatus)
    }

    private let entries = Mutex<[(Entry, ContinuousClock.Instant)]>([])

    func record(_ entry: Entry) { entries.withLock { $0.append((entry, .now)) } }
    var all: [Entry] { entries.withLock { $0.map(\.0) } }
    /// When `entry` last happened.
    func last(_ entry: Entry) -> ContinuousClock.Instant? { entries.withLock { $0.last { $0.0 == entry }?.1 } }

    /// Starts `sdk` with callbacks that fill this log; returns once authenticated (or refused).
    func start(_ sdk: PCast, authToken: String) async {
        let authenticated = Values<RequestStatus>()
        sdk.start(authToken: authToken,
                  authenticationCallback: { [self] status, _ in record(.authenticated(status)); authenticated.append(status) },
                  onlineCallback: { [self] in record(.online) },
                  offlineCallback: { [self] in record(.offline) })
        _ = await eventually { !authenticated.all.isEmpty }
    }
}

/// A publisher and a viewer whose signaling goes through a TCP proxy with an outage switch; their
/// media goes straight to the relay.
struct SignalingOutage {
    let platform: LocalPlatform
    let proxy: TCPOutageProxy
    let publisherSDK: PCast
    let publisherLog: ConnectionLog
    let viewer: PCast
    let viewerLog: ConnectionLog
    let media: UserMediaStream
    let publisher: Publisher
    let stream: MediaStream

    /// `authLifetime`: how long the SDKs' auth tokens are valid.
    static func start(authLifetime: TimeInterval = 3600, keepAliveInterval: Int = 10) async throws -> SignalingOutage {
        let platform = try await LocalPlatform.start(keepAliveInterval: keepAliveInterval)
        let proxy = try TCPOutageProxy(server: "127.0.0.1", serverPort: platform.server.httpPort)
        let uri = "ws://127.0.0.1:\(proxy.port)/ws"
        let publisherSDK = PCast(PCastOptions(uri: uri))
        let publisherLog = ConnectionLog()
        await publisherLog.start(publisherSDK, authToken: try platform.token(.auth, lifetime: authLifetime))
        let viewer = PCast(PCastOptions(uri: uri))
        let viewerLog = ConnectionLog()
        await viewerLog.start(viewer, authToken: try platform.token(.auth, lifetime: authLifetime))
        let media = try await stampedMedia(audio: false)
        let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media)
        let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
        return SignalingOutage(platform: platform, proxy: proxy, publisherSDK: publisherSDK, publisherLog: publisherLog,
                               viewer: viewer, viewerLog: viewerLog, media: media, publisher: publisher, stream: stream)
    }

    func stop() async {
        await stream.stop()
        await viewer.stop()
        await publisher.stop()
        await publisherSDK.stop()
        await media.stop()
        proxy.stop()
        await platform.shutdown()
    }
}

extension OneAtATime {
    @Suite("Reconnection through a signaling outage", .serialized)
    struct ReconnectionTests {
        @Test("a 5 s signaling outage: both SDKs go offline, frames keep flowing, and both are back online (same session, same stream) within 1 s of the network returning")
        func fiveSecondOutage() async throws {
            let session = try await SignalingOutage.start()
            let (renderer, frames) = try await watch(session.stream)
            #expect(await eventually(.seconds(20)) { frames.all.count >= 30 })
            let sessions = (session.publisherSDK.sessionId, session.viewer.sessionId)
            let ended = Values<StreamEndedReason>()
            session.publisher.setPublisherEndedCallback { reason, _ in ended.append(reason) }

            session.proxy.setOutage(true)
            #expect(await eventually(.seconds(5)) { session.publisherLog.all.contains(.offline) && session.viewerLog.all.contains(.offline) })
            #expect(!session.publisherSDK.isOnline && session.publisherSDK.isReconnecting)
            // No new streams while offline: a typed error, at once.
            await #expect(throws: PCastError.offline) {
                _ = try await session.viewer.subscribe(streamToken: try session.platform.token(.stream, originStreamId: session.publisher.streamId))
            }
            let before = frames.all.count
            try await Task.sleep(for: .seconds(5))
            let during = frames.all.count - before
            print("signaling outage: \(during) frames decoded during 5 s offline")
            #expect(during >= 100, "media must keep flowing while signaling is down (30 fps)")

            session.proxy.setOutage(false)
            let restored = ContinuousClock.now
            // Back online as the application sees it: its online callbacks (delivered after the SDK's
            // state changes; reading the logs at `isOnline` once found the publisher's not yet run).
            #expect(await eventually(.seconds(10)) {
                session.publisherSDK.isOnline && session.viewer.isOnline
                    && [session.publisherLog, session.viewerLog].allSatisfy { ($0.last(.online) ?? restored) > restored }
            })
            for (name, log) in [("publisher", session.publisherLog), ("viewer", session.viewerLog)] {
                guard let online = log.last(.online) else { Issue.record("\(name) never came back"); continue }
                let took = online - restored
                print("signaling outage: \(name) back online \(took) after the network returned")
                #expect(took <= .seconds(1), "\(name) took \(took)")
            }
            #expect(session.publisherSDK.sessionId == sessions.0, "the publisher's session resumed")
            #expect(session.viewer.sessionId == sessions.1, "the viewer's session resumed")
            #expect(await eventually(.seconds(2)) { session.publisherLog.all.filter { $0 == .authenticated(.ok) }.count == 2 })
            #expect(ended.all.isEmpty, "the stream survived")
            // Still the same stream, still flowing, and still controllable over signaling.
            let after = frames.all.count
            #expect(await eventually(.seconds(10)) { frames.all.count >= after + 30 })
            #expect(session.platform.relay.statistics().streams == 1)
            _ = renderer
            await session.stream.stop()
            #expect(await eventually(.seconds(5)) { session.platform.relay.statistics().subscribers == 0 })
            await session.stop()
        }

        @Test("a silent outage of about 9 s (nothing moves, nothing is reset): keep-alives find it, frames keep flowing, and both SDKs resume their sessions once the path returns")
        func silentOutage() async throws {
            let session = try await SignalingOutage.start(keepAliveInterval: 1)
            let (renderer, frames) = try await watch(session.stream)
            #expect(await eventually(.seconds(20)) { frames.all.count >= 30 })
            let sessions = (session.publisherSDK.sessionId, session.viewer.sessionId)
            let ended = Values<StreamEndedReason>()
            session.publisher.setPublisherEndedCallback { reason, _ in ended.append(reason) }

            session.proxy.setOutage(true, mode: .silent)
            // A keep-alive every second, unanswered after five: offline within about six seconds.
            #expect(await eventually(.seconds(10)) { session.publisherLog.all.contains(.offline) && session.viewerLog.all.contains(.offline) })
            let before = frames.all.count
            try await Task.sleep(for: .seconds(3))
            #expect(frames.all.count - before >= 60, "media keeps flowing while signaling is silent")
            session.proxy.setOutage(false)
            let restored = ContinuousClock.now
            #expect(await eventually(.seconds(10)) { session.publisherSDK.isOnline && session.viewer.isOnline })
            if let online = session.publisherLog.last(.online) { print("silent outage: publisher back \(online - restored) after the path returned") }
            #expect(session.publisherSDK.sessionId == sessions.0 && session.viewer.sessionId == sessions.1, "both sessions resumed")
            #expect(ended.all.isEmpty, "the stream survived")
            let after = frames.all.count
            #expect(await eventually(.seconds(10)) { frames.all.count >= after + 30 })
            _ = renderer
            await session.stop()
        }

        @Test("a token that expired during the outage: reconnection is refused as unauthorized, and the SDK's streams end")
        func tokenExpiredDuringOutage() async throws {
            let session = try await SignalingOutage.start(authLifetime: 4)
            let ended = Values<StreamEndedReason>()
            session.publisher.setPublisherEndedCallback { reason, _ in ended.append(reason) }
            session.proxy.setOutage(true)
            #expect(await eventually(.seconds(5)) { session.publisherLog.all.contains(.offline) })
            try await Task.sleep(for: .seconds(5))
            session.proxy.setOutage(false)
            #expect(await eventually(.seconds(10)) { session.publisherLog.all.contains(.authenticated(.unauthorized)) })
            #expect(await eventually(.seconds(5)) { session.viewerLog.all.contains(.authenticated(.unauthorized)) })
            #expect(!session.publisherSDK.isOnline && !session.publisherSDK.isReconnecting)
            #expect(await eventually(.seconds(5)) { ended.all == [.failed] })
            // The platform drops the stream once its media stops.
            #expect(await eventually(.seconds(15)) { session.platform.relay.statistics().streams == 0 })
            await #expect(throws: PCastError.notStarted) {
                _ = try await session.publisherSDK.publish(streamToken: try session.platform.token(.publish), mediaStream: session.media)
            }
            await session.stop()
        }
    
        @Test("a token that expired during the outage, with a token provider: the SDK asks it once for a new token and resumes the same session, its stream alive; the viewer without one ends as before")
        func tokenRefreshedAfterOutage() async throws {
            let session = try await SignalingOutage.start(authLifetime: 4)
            let platform = session.platform
            let asked = Values<Int>()
            session.publisherSDK.setAuthenticationTokenProvider {
                asked.append(1)
                return try platform.token(.auth)
            }
            let sessionId = try #require(session.publisherSDK.sessionId)
            let ended = Values<StreamEndedReason>()
            session.publisher.setPublisherEndedCallback { reason, _ in ended.append(reason) }
            session.proxy.setOutage(true)
            #expect(await eventually(.seconds(5)) { session.publisherLog.all.contains(.offline) })
            try await Task.sleep(for: .seconds(5))
            session.proxy.setOutage(false)
            #expect(await eventually(.seconds(10)) { session.publisherLog.all.filter { $0 == .authenticated(.ok) }.count == 2 })
            #expect(session.publisherSDK.isOnline && session.publisherSDK.sessionId == sessionId, "the same session resumed")
            #expect(asked.all.count == 1)
            #expect(!session.publisherLog.all.contains(.authenticated(.unauthorized)))
            #expect(await eventually(.seconds(5)) { session.viewerLog.all.contains(.authenticated(.unauthorized)) }, "no provider: as before")
            #expect(ended.all.isEmpty, "the stream survived")
            #expect(session.platform.relay.statistics().streams == 1)
            // The session works: it subscribes to its own stream.
            let own = try await session.publisherSDK.subscribe(streamToken: try platform.token(.stream, originStreamId: session.publisher.streamId))
            await own.stop()
            await session.stop()
        }

        @Test("PCast Express: a token that expired during the outage is replaced from the backend and the session resumes (no unrecoverable error); when the backend refuses, unrecoverableErrorCallback hears it, the stream ends, and a later call starts a new session instead of failing as not started")
        func expressRefreshesItsToken() async throws {
            let platform = try await LocalPlatform.start()
            let proxy = try TCPOutageProxy(server: "127.0.0.1", serverPort: platform.server.httpPort)
            let media = try await stampedMedia(audio: false)
            let backend = try #require(URL(string: platform.backendURL))
            func express(roles: [MemberRole], unrecoverable: Values<String>) throws -> PCastExpress {
                var options = PCastExpressOptions(backendURI: backend, authenticationToken: try platform.token(.auth, lifetime: 4),
                                                  pcastURI: "ws://127.0.0.1:\(proxy.port)/ws", roles: roles)
                options.unrecoverableErrorCallback = { status, message in unrecoverable.append("\(status.rawValue): \(message)") }
                return PCastExpress(options)
            }
            let fine = Values<String>(), refused = Values<String>()
            let good = try express(roles: [], unrecoverable: fine)
            // The backend refuses the moderator role without its password: no new token.
            let bad = try express(roles: [.moderator], unrecoverable: refused)
            let publishers = [try await good.publish(PublishOptions(userMedia: media, capabilities: ["real-time"])),
                              try await bad.publish(PublishOptions(userMedia: media, capabilities: ["real-time"]))]
            let pcasts = [try await good.pcast(), try await bad.pcast()]
            let sessions = pcasts.map(\.sessionId)
            let ended = [Values<StreamEndedReason>(), Values<StreamEndedReason>()]
            for (publisher, log) in zip(publishers, ended) { publisher.publisher?.setPublisherEndedCallback { reason, _ in log.append(reason) } }

            proxy.setOutage(true)
            #expect(await eventually(.seconds(5)) { !pcasts[0].isOnline && !pcasts[1].isOnline })
            try await Task.sleep(for: .seconds(5))
            proxy.setOutage(false)
            #expect(await eventually(.seconds(10)) { pcasts[0].isOnline })
            let resumed = try await good.pcast().sessionId
            #expect(resumed == sessions[0], "the same session resumed with the backend's new token")
            #expect(fine.all.isEmpty)
            let survived = publishers[0].publisher?.hasEnded == false
            #expect(ended[0].all.isEmpty && survived, "its stream survived")

            #expect(await eventually(.seconds(10)) { !refused.all.isEmpty })
            #expect(refused.all.first?.hasPrefix("unauthorized: the role 'moderator' is not allowed") == true, "\(refused.all)")
            #expect(await eventually(.seconds(5)) { ended[1].all == [.failed] })
            // A later call does not fail as not started: it starts a new session, which asks the
            // backend (and is refused the same way).
            await #expect { _ = try await bad.publish(PublishOptions(userMedia: media, capabilities: ["real-time"])) }
                throws: { ($0 as? PCastError)?.code == .refused && ($0 as? PCastError)?.status == .unauthorized }
            #expect(refused.all.count == 2 && refused.all.last?.contains("the role 'moderator' is not allowed") == true, "\(refused.all)")

            for publisher in publishers { await publisher.stop() }
            await good.shutdown()
            await bad.shutdown()
            await media.stop()
            proxy.stop()
            await platform.shutdown()
        }
    }
}
