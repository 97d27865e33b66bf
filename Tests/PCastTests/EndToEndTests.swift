import Foundation
import GStreamer
@testable import PCast
import PCastBenchmarks
@testable import PCastMedia
import PCastImpairment
import PCastNode
import PCastProtocol
import PCastRelay
import PCastServer
import PCastTestSupport
import Synchronization
import Testing

final class Values<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])
    func append(_ value: Value) { values.withLock { $0.append(value) } }
    var all: [Value] { values.withLock { $0 } }
}

/// A user-media stream whose frames carry a counter (``FrameStamp``): a 30 fps test pattern, 640×360 unless told.
func stampedMedia(audio: Bool = false, width: Int = 640, height: Int = 360) async throws -> UserMediaStream {
    var options = UserMediaOptions()
    options.video.deviceId = .exact(SourceDevices.syntheticVideoId)
    options.video.width = .exact(width)
    options.video.height = .exact(height)
    options.video.frameRate = .exact(30)
    options.audio.enabled = audio
    if audio { options.audio.deviceId = .exact(SourceDevices.syntheticAudioId) }
    let media = try await UserMedia.getUserMedia(options)
    let counter = Atomic<UInt32>(0)
    try media.setFrameReadyCallback(media.mediaStream.getVideoTracks()[0]) { notification in
        guard case .video(var frame)? = try? notification.read() else { return }
        FrameStamp.paint(counter.add(1, ordering: .relaxed).newValue, into: &frame)
        try? notification.write(.video(frame))
    }
    return media
}

/// Records the counters a subscriber's renderer shows.
func watch(_ stream: MediaStream) async throws -> (Renderer, Values<UInt32>) {
    let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
    let seen = Values<UInt32>()
    #expect(await renderer.start() == .ok)
    try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
        guard case .video(let frame)? = try? notification.read(), let value = FrameStamp.read(frame) else { return }
        seen.append(value)
    }
    return (renderer, seen)
}


extension OneAtATime {
    @Suite("Publish → relay → subscribe on loopback", .serialized)
    struct EndToEndTests {
        @Test("frames reach several subscribers through the relay in order, none missing, over SRTP")
        func publishSubscribe() async throws {
            let platform = try await LocalPlatform.start()
            let publisherSDK = PCast(PCastOptions(uri: platform.signalingURL))
            let sessionId = try await publisherSDK.start(authToken: try platform.token(.auth))
            #expect(!sessionId.isEmpty && publisherSDK.isOnline)
            let media = try await stampedMedia(audio: true)
            let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media, tags: ["demo"])
            #expect(publisher.tracks.map(\.kind) == [.video, .audio])
            // What was encoded and sent (a starved machine may drop frames before the encoder).
            let sent = try StampTap(encoderOf: media)

            var watchers: [(PCast, MediaStream, Renderer, Values<UInt32>, StampTap)] = []
            for _ in 0..<3 {
                let sdk = PCast(PCastOptions(uri: platform.signalingURL))
                try await sdk.start(authToken: try platform.token(.auth))
                let stream = try await sdk.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
                #expect(stream.getVideoTracks().count == 1 && stream.getAudioTracks().count == 1)
                let decoded = try StampTap(decoderOf: stream)
                let (renderer, seen) = try await watch(stream)
                watchers.append((sdk, stream, renderer, seen, decoded))
            }
            for (_, _, _, seen, decoded) in watchers {
                #expect(await eventually { decoded.all.count >= 60 && seen.all.count >= 30 })
                #expect(complete(decoded.all, sent: sent.all), "decoded \(decoded.all.prefix(90)) of sent \(sent.all.prefix(90))")
                #expect(zip(seen.all, seen.all.dropFirst()).allSatisfy { $0 < $1 }, "the renderer showed frames out of order")
            }
            let statistics = platform.relay.statistics()
            #expect(statistics.srtpFailures == 0)
            #expect(statistics.packetsOut > statistics.packetsIn)
            for (sdk, stream, _, _, _) in watchers {
                await stream.stop()
                await sdk.stop()
            }
            await publisher.stop()
            await publisherSDK.stop()
            await media.stop()
            await platform.shutdown()
        }

        @Test("stop(reason: .custom) reaches subscribers with its description; an admin end reaches both sides as censored")
        func endReasons() async throws {
            let platform = try await LocalPlatform.start()
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await stampedMedia()

            let first = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media)
            let viewer = PCast(PCastOptions(uri: platform.signalingURL))
            try await viewer.start(authToken: try platform.token(.auth))
            let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: first.streamId))
            await first.stop(reason: .custom, description: "lunch break")
            let reason = await stream.ended()
            #expect(reason == .remote(.custom, "lunch break"))
            #expect(first.hasEnded)

            let second = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media)
            let stream2 = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: second.streamId))
            #expect(await platform.server.endStream(second.streamId, reason: .censored, description: "terms of service"))
            #expect(await stream2.ended() == .remote(.censored, "terms of service"))
            let (publisherReason, description) = await second.ended()
            #expect(publisherReason == .censored && description == "terms of service")

            await viewer.stop()
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
        }

        @Test("forged, expired, wrong-type and wrong-capability tokens are refused with typed errors and nothing is forwarded")
        func refusedTokens() async throws {
            let platform = try await LocalPlatform.start()
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            // Forged (another secret), expired, wrong type for authentication.
            let forged = try DigestTokenBuilder().expiresAt(Date().addingTimeInterval(60)).type(.auth)
                .encode(applicationId: platform.configuration.applicationId, secret: "not-the-secret")
            for bad in [forged, try platform.token(.auth, lifetime: -60), try platform.token(.stream)] {
                do {
                    try await sdk.start(authToken: bad)
                    Issue.record("authenticated with a bad token")
                } catch {
                    #expect(error.status == .unauthorized, "\(error)")
                }
            }
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await stampedMedia()
            // A stream token cannot publish; an unknown capability is not supported.
            for (bad, status) in [(try platform.token(.stream), RequestStatus.unauthorized),
                                  (try platform.token(.publish, capabilities: ["teleport"]), .notSupported)] {
                do {
                    _ = try await sdk.publish(streamToken: bad, mediaStream: media)
                    Issue.record("published with a bad token")
                } catch {
                    #expect(error.status == status, "\(error)")
                }
            }
            let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media)
            let publishToken = try platform.token(.publish)
            do {
                _ = try await sdk.subscribe(streamToken: publishToken)
                Issue.record("subscribed with a publish token")
            } catch {
                #expect(error.status == .unauthorized)
            }
            let missing = try platform.token(.stream, originStreamId: "no-such-stream")
            do {
                _ = try await sdk.subscribe(streamToken: missing)
                Issue.record("subscribed to a stream that does not exist")
            } catch {
                #expect(error.status == .notFound)
            }
            #expect(await eventually { publisher.packetsSent > 50 })
            #expect(platform.relay.statistics().subscribers == 0)
            #expect(platform.relay.statistics().packetsOut == 0, "nothing may be forwarded without a subscriber")
            await publisher.stop()
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
        }

        @Test("a subscriber joining mid-stream gets a keyframe and pictures quickly")
        func midStreamJoin() async throws {
            let platform = try await LocalPlatform.start()
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await stampedMedia()
            // A long keyframe interval: without the relay's keyframe request a late joiner would wait 10 s.
            let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media,
                                                  settings: EncodingSettings(keyframeInterval: 300))
            let encoder = try #require(media.engine.pipeline.elements.first { $0.name.hasSuffix("-encoder") && $0.factoryName == "x264enc" })
            let keyframes = Values<ContinuousClock.Instant>()
            // (the renderer must be kept: dropping it stops it)
            _ = try encoder.staticPad("src").addBufferProbe { buffer in
                if buffer.isKeyframe { keyframes.append(.now) }
                return .pass
            }
            try await Task.sleep(for: .seconds(2))
            let viewer = PCast(PCastOptions(uri: platform.signalingURL))
            try await viewer.start(authToken: try platform.token(.auth))
            let joined = ContinuousClock.now
            let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
            let (renderer, seen) = try await watch(stream)
            #expect(await eventually(.seconds(5)) { !seen.all.isEmpty }, "no picture within 5 s of joining (keyframe interval 10 s)")
            print("time to first frame after a mid-stream join: \(ContinuousClock.now - joined)")
            #expect(keyframes.all.contains { $0 > joined }, "the encoder sent no keyframe after the join")
            _ = renderer
            #expect(platform.relay.statistics().keyframeRequests >= 1)
            await viewer.stop()
            await publisher.stop()
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
        }
    }
}

// A realtime figure (capture → screen at a 40 ms playout delay) that the main group's load blurred
// once (287 ms against 44 alone): one suite at a time.
extension OneAtATime {
    @Suite("End-to-end benchmark harness")
    struct EndToEndBenchmarkTests {
        @Test("the latency and first-frame benchmark measures frames through the embedded platform, at the screen one playout delay after they arrive (not at once, not 180 ms late), at the renderer's hook before the sink's wait, with loss on the viewer's leg through the impairment proxy (NACKs sent and packets resent counted), and on a real path (20 ms of jitter) at the default, adaptive delay, which it holds above the jitter")
        func runs() async throws {
            let platform = try await LocalPlatform.start()
            var benchmark = EndToEndBenchmark(signalingURL: platform.signalingURL, seconds: 2, playoutDelays: [40], joins: 2) { type, origin in
                try platform.token(type, originStreamId: origin)
            }
            benchmark.lossPercents = [0, 5]
            benchmark.relayPort = platform.relay.mediaPort
            var jitter = ImpairmentProfile()
            jitter.jitter = .milliseconds(20)
            benchmark.paths = [.init("jitter 20 ms", jitter)]
            let relay = platform.relay
            benchmark.relayRetransmissions = { relay.statistics().nacksServed }
            let result = try await benchmark.run()
            await platform.shutdown()
            let run = try #require(result.latency.first)
            #expect(run.frames > 10)
            #expect(run.p50 > 0 && run.p99 >= run.p50)
            // At the screen: after the synchronised sink waited for the frame's time, later than the
            // decoder's output (which the playout delay is ahead of).
            #expect(run.screenP50.isFinite && run.screenP50 > run.p50 && run.screenP99 >= run.screenP50,
                    "screen p50 \(run.screenP50) ms, decoded p50 \(run.p50) ms")
            // The sinks wait the playout delay (40 ms) after a frame's arrival, whatever the renderer's
            // audio branch reports (opusdec claims 120 ms): capture → screen is 40 ms and the few ms
            // of encoding and transport, never the 0 or 180 ms a queried latency gave by chance.
            #expect(run.screenP50 >= 40 && run.screenP50 < 80, "screen p50 \(run.screenP50) ms at a 40 ms playout delay")
            // 5 % lost each way through the impairment proxy: NACKs bring nearly every frame back.
            let lossy = try #require(result.latency.first { $0.lossPercent == 5 })
            #expect(lossy.frames > 10 && lossy.deliveredPercent >= 80, "\(lossy)")
            #expect(lossy.path == "loss 5 %" && lossy.nacksSent > 0 && lossy.retransmissions > 0, "\(lossy)")
            #expect(run.path == "clean" && run.deliveredPercent >= 90, "\(run)")
            let jittery = try #require(result.latency.first { $0.path == "jitter 20 ms" })
            // Real paths run at the SDK's default, adaptive delay: 20 ms of jitter holds it above 20 ms.
            #expect(jittery.playoutDelayMilliseconds == EndToEndBenchmark.adaptive && jittery.playoutDelayAtEndMilliseconds > 20
                    && jittery.frames > 10 && jittery.lostAfterRepair >= 0, "\(jittery)")
            #expect(result.firstFrame.joins == 2 && result.firstFrame.p50 < 10_000)
            #expect(result.firstFrame.screenP50 < 10_000 && result.firstFrame.screenP50 >= result.firstFrame.p50,
                    "the first frame is presented after it is decoded: \(result.firstFrame)")
            print(String(format: "bench: glass-to-glass at the screen p50 %.1f ms p99 %.1f ms (decoded p50 %.1f ms); first frame p50 %.1f ms",
                         run.screenP50, run.screenP99, run.p50, result.firstFrame.p50))
        }
    }
}

@Suite("PCast session lifecycle")
struct SessionLifecycleTests {
    @Test("authentication, online and offline callbacks follow the connection; a lost connection ends the publisher; logs are collected")
    func onlineOffline() async throws {
        let platform = try await LocalPlatform.start()
        let sdk = PCast(PCastOptions(uri: platform.signalingURL))
        let events = Values<String>()
        let authenticated = Values<RequestStatus>()
        sdk.start(authToken: try platform.token(.auth),
                  authenticationCallback: { status, _ in authenticated.append(status) },
                  onlineCallback: { events.append("online") },
                  offlineCallback: { events.append("offline") })
        #expect(await eventually { events.all == ["online"] && authenticated.all == [.ok] })
        #expect(sdk.sessionId != nil && sdk.isOnline)
        let media = try await stampedMedia()
        let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media)
        await platform.shutdown()
        #expect(await eventually { events.all == ["online", "offline"] })
        #expect(!sdk.isOnline)
        let (reason, _) = await publisher.ended()
        #expect(reason == .maintenance || reason == .failed)
        #expect(sdk.collectLogMessages().contains { $0.contains("authenticated") })
        #expect(sdk.collectLogMessages().contains { $0.contains("publishing") })
        await sdk.stop()
        await media.stop()
    }

    @Test("an unreachable platform is a typed connection error, not a hang")
    func unreachable() async throws {
        let sdk = PCast(PCastOptions(uri: "ws://127.0.0.1:9/ws", reconnects: false))
        do {
            try await sdk.start(authToken: "DIGEST:whatever")
            Issue.record("connected to nothing")
        } catch {
            guard error.code == .connectionFailed else { Issue.record("\(error)"); return }
        }
        let bad = PCast(PCastOptions(uri: "http://[not a uri"))
        do {
            try await bad.start(authToken: "x")
            Issue.record("accepted a bad URI")
        } catch {
            #expect(error.status == .badRequest, "\(error)")
        }
    }
}
