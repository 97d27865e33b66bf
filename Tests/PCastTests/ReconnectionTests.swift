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
            #expect(await eventually(.seconds(10)) { session.publisherSDK.isOnline && session.viewer.isOnline })
            for (name, log) in [("publisher", session.publisherLog), ("viewer", session.viewerLog)] {
                guard let online = log.last(.online) else { Issue.record("\(name) never came back"); continue }
                let took = online - restored
                print("signaling outage: \(name) back online \(took) after the network returned")
                #expect(took <= .seconds(1), "\(name) took \(took)")
            }
            #expect(session.publisherSDK.sessionId == sessions.0, "the publisher's session resumed")
            #expect(session.viewer.sessionId == sessions.1, "the viewer's session resumed")
            #expect(session.publisherLog.all.filter { $0 == .authenticated(.ok) }.count == 2)
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
    }
}
