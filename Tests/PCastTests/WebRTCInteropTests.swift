import Foundation
@testable import PCast
import PCastNode
import PCastProtocol
import PCastImpairment
import PCastRelay
import PCastTestSupport
import Synchronization
import Testing

/// Counts the frames a subscriber's renderer shows, and their size.
final class FrameCount: Sendable {
    private let state = Mutex<(count: Int, width: Int, height: Int, widths: [Int: Int])>((0, 0, 0, [:]))
    var count: Int { state.withLock { $0.count } }
    var size: (width: Int, height: Int) { state.withLock { ($0.width, $0.height) } }
    /// How many frames of each width were shown.
    var widths: [Int: Int] { state.withLock { $0.widths } }
    func add(_ frame: VideoFrame) {
        state.withLock {
            $0.count += 1
            ($0.width, $0.height) = (frame.width, frame.height)
            $0.widths[frame.width, default: 0] += 1
        }
    }
}

func countFrames(_ stream: MediaStream) async throws -> (Renderer, FrameCount) {
    let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
    let frames = FrameCount()
    #expect(await renderer.start() == .ok)
    try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
        if case .video(let frame)? = try? notification.read() { frames.add(frame) }
    }
    return (renderer, frames)
}

/// Subscribes to the newest stream of a channel alias, retrying while the WHIP peer is still
/// getting its answer.
func subscribeToChannel(_ sdk: PCast, _ platform: LocalPlatform, alias: String, layer: LayerSelection = .adaptive) async throws -> MediaStream {
    let deadline = ContinuousClock.now + .seconds(20)
    while true {
        do {
            return try await sdk.subscribe(streamToken: try platform.token(.stream, tag: .channelAlias(alias)), layer: layer)
        } catch {
            if ContinuousClock.now > deadline { throw error }
            try await Task.sleep(for: .milliseconds(200))
        }
    }
}

extension OneAtATime {
    @Suite("Standard WebRTC peers (webrtcbin, aiortc, Chromium) with WHIP and WHEP through the relay", .serialized)
    struct WebRTCInteropTests {
        @Test("webrtcbin publishes with WHIP (AES-CM-80): an SDK subscriber and a webrtcbin WHEP viewer decode its 320×240 frames; its DELETE ends the stream as ended and frees its peers")
        func webrtcbinPublishes() async throws {
            let platform = try await LocalPlatform.start()
            let publisher = try ScriptedPeer.start(.whip, platform, name: "gst-room", token: try platform.token(.publish), seconds: 12)
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let stream = try await subscribeToChannel(sdk, platform, alias: "gst-room")
            #expect(stream.getVideoTracks().count == 1 && stream.getAudioTracks().count == 1)
            let (renderer, frames) = try await countFrames(stream)
            let viewer = try ScriptedPeer.start(.whep, platform, name: "gst-room",
                                                 token: try platform.token(.stream, tag: .channelAlias("gst-room")), seconds: 5)
            let seen = try await viewer.outcome()
            #expect(seen.status == 201 && seen.error == nil, "\(seen)")
            #expect(seen.connection_state == "connected", "\(seen)")
            #expect(seen.video_frames >= 60 && seen.audio_buffers >= 50, "\(seen)")
            #expect(seen.width == 320 && seen.height == 240)
            #expect(seen.delete_status == 200)
            #expect(await eventually { frames.count >= 60 },
                    "the SDK subscriber decoded \(frames.count) frames; its tracks: \(stream.networkStatistics()); the relay: \(platform.relay.statistics())")
            #expect(frames.size == (320, 240))

            let sent = try await publisher.outcome()
            #expect(sent.status == 201 && sent.error == nil, "\(sent)")
            #expect(sent.location?.hasPrefix("/whip/gst-room/") == true)
            #expect(sent.connection_state == "connected")
            #expect(sent.delete_status == 200)
            // The DELETE ended the stream, as a publisher's stop does.
            let reason = await stream.ended()
            guard case .remote(.ended, _) = reason else {
                Issue.record("the stream ended as \(reason), not as the publisher's end")
                return
            }
            #expect(await eventually { platform.relay.statistics().webRTCPeers == 0 && platform.relay.statistics().streams == 0 })
            let statistics = platform.relay.statistics()
            #expect(statistics.dtlsFailures == 0 && statistics.srtpFailures == 0)
            _ = renderer
            await sdk.stop()
            await platform.shutdown()
        }

        @Test("a WHIP stream is a stream like any other: published with ?type=record it is recorded (H.264 and Opus, decodable), and its channel, created by the WHIP publish, shows it to a ChannelExpress viewer until its DELETE")
        func whipStreamInChannelAndRecording() async throws {
            let platform = try await LocalPlatform.start()
            let publisher = try ScriptedPeer.start(.whip, platform, name: "whip-show?type=record",
                                                    token: try platform.token(.publish, streamName: "whip-show"), seconds: 8)
            // The WHIP publish created the channel: it is live once the stream is.
            let deadline = ContinuousClock.now + .seconds(20)
            while platform.relay.statistics().streams == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
            guard platform.relay.statistics().streams == 1 else {
                Issue.record("the WHIP stream never started: \(try await publisher.outcome())")
                await platform.shutdown()
                return
            }
            let viewer = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(platform)))
            let viewed = Values<(RequestStatus, String?)>()
            let watching = Mutex<ExpressSubscriber?>(nil)
            let rooms = try await viewer.joinChannel(JoinChannelOptions(joinRoomOptions: JoinRoomOptions(roomAlias: "whip-show"),
                                                                        renderer: RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))) { status, subscriber, _ in
                viewed.append((status, subscriber?.streamId))
                if let subscriber { watching.withLock { $0 = subscriber } }
            }
            #expect(await eventually(.seconds(10)) { viewed.all.contains { $0.0 == .ok && $0.1 != nil } }, "\(viewed.all)")
            let subscriber = try #require(watching.withLock { $0 })
            #expect(await eventually { subscriber.renderer?.videoDimensions == Dimensions(width: 320, height: 240) })
            let member = try #require(rooms.activeRoom.value?.members.value.first)
            #expect(member.role.value == .presenter)
            #expect(member.streams.value.first?.pcastStreamId == subscriber.streamId)

            let sent = try await publisher.outcome()
            #expect(sent.status == 201 && sent.error == nil, "\(sent)")
            #expect(sent.delete_status == 200)
            // DELETE ended the stream and the member left: nothing is left to view.
            #expect(await eventually(.seconds(10)) { viewed.all.last?.0 == .noStreamPlaying }, "\(viewed.all)")
            #expect(await eventually { rooms.activeRoom.value?.members.value.isEmpty == true })

            let entry = try #require(try await finishedRecording(platform, "whip-show"))
            #expect(entry["name"] as? String == "whip-show")
            let decoded = try await decodeRecording(platform.configuration.recordingsDirectory + "/whip-show.mp4", audio: true)
            #expect(decoded.width == 320 && decoded.height == 240)
            #expect(decoded.videoTimestamps.count >= 150, "\(decoded.videoTimestamps.count) frames recorded of ~8 s at 30 fps")
            #expect(decoded.audioBuffers >= 100, "\(decoded.audioBuffers) Opus buffers recorded")
            await viewer.roomExpress.pcastExpress.shutdown()
            await platform.shutdown()
        }

        @Test("WHIP ?type= other than live, record or append is refused with 400 before anything is published")
        func whipUnknownPublishType() async throws {
            let platform = try await LocalPlatform.start()
            let answer = try curlRequest("POST", "\(platform.httpURL)/whip/x?type=archive", token: try platform.token(.publish), body: "v=0\r\n")
            #expect(answer.status == 400 && answer.contentType == "application/problem+json", "\(answer)")
            #expect(answer.body.contains("archive"))
            #expect(platform.relay.statistics().streams == 0)
            await platform.shutdown()
        }

        @Test("an SDK publisher's stream plays in webrtcbin over WHEP, found by its channel alias: video and Opus decoded, the publisher untouched by the viewer's DELETE")
        func webrtcbinViews() async throws {
            let platform = try await LocalPlatform.start()
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await stampedMedia(audio: true)
            let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media, tags: ["channelAlias:whep-room"])
            let viewer = try ScriptedPeer.start(.whep, platform, name: "whep-room",
                                                 token: try platform.token(.stream, originStreamId: publisher.streamId), seconds: 5)
            let seen = try await viewer.outcome()
            #expect(seen.status == 201 && seen.error == nil, "\(seen)")
            #expect(seen.video_frames >= 60 && seen.audio_buffers >= 50, "\(seen)")
            #expect(seen.width == 640 && seen.height == 360)
            #expect(seen.delete_status == 200)
            #expect(await eventually { platform.relay.statistics().webRTCPeers == 0 })
            #expect(!publisher.hasEnded)
            #expect(platform.relay.statistics().dtlsFailures == 0)
            await publisher.stop()
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
        }

        @Test("aiortc publishes with WHIP in its offer's first codec (VP8) and another aiortc views it with WHEP in VP8 (AES-128-GCM): aiortc → relay → aiortc and an SDK subscriber decode its 320×240 frames; an SDK publisher's H.264 plays in aiortc too")
        func aiortcPublishesAndViews() async throws {
            let platform = try await LocalPlatform.start()
            let publisher = try ScriptedPeer.start(.whip, platform, name: "aiortc-room", token: try platform.token(.publish), seconds: 14, stack: .aiortc)
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let stream = try await subscribeToChannel(sdk, platform, alias: "aiortc-room")
            let (renderer, frames) = try await countFrames(stream)
            let viewer = try ScriptedPeer.start(.whep, platform, name: "aiortc-room",
                                                token: try platform.token(.stream, tag: .channelAlias("aiortc-room")), seconds: 5, stack: .aiortc)
            let seen = try await viewer.outcome()
            #expect(seen.status == 201 && seen.error == nil, "\(seen)")
            #expect(seen.connection_state == "connected" && seen.srtp_profile == "SRTP_AEAD_AES_128_GCM", "\(seen)")
            #expect(seen.video_codec == "video/VP8", "\(seen)")
            #expect(seen.video_frames >= 60 && seen.audio_buffers >= 50, "\(seen)")
            #expect(seen.width == 320 && seen.height == 240)
            #expect(seen.delete_status == 200)
            #expect(await eventually { frames.count >= 60 }, "the SDK subscriber decoded \(frames.count) of aiortc's frames")
            #expect(frames.size == (320, 240))

            // The other way: an SDK publisher (640×360 with Opus) watched by aiortc.
            let media = try await stampedMedia(audio: true)
            let sdkPublisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media, tags: ["channelAlias:sdk-to-aiortc"])
            let sdkViewer = try ScriptedPeer.start(.whep, platform, name: "sdk-to-aiortc",
                                                   token: try platform.token(.stream, originStreamId: sdkPublisher.streamId), seconds: 5, stack: .aiortc)
            let watched = try await sdkViewer.outcome()
            #expect(watched.status == 201 && watched.error == nil, "\(watched)")
            #expect(watched.video_frames >= 60 && watched.audio_buffers >= 50, "\(watched)")
            #expect(watched.width == 640 && watched.height == 360)
            #expect(watched.video_codec == "video/H264", "\(watched)")

            let sent = try await publisher.outcome()
            #expect(sent.status == 201 && sent.error == nil && sent.connection_state == "connected", "\(sent)")
            #expect(sent.delete_status == 200)
            let reason = await stream.ended()
            guard case .remote(.ended, _) = reason else {
                Issue.record("the stream ended as \(reason), not as the publisher's end")
                return
            }
            await sdkPublisher.stop()
            #expect(await eventually { platform.relay.statistics().webRTCPeers == 0 })
            #expect(platform.relay.statistics().dtlsFailures == 0 && platform.relay.statistics().srtpFailures == 0)
            _ = renderer
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
        }

        @Test("with UDP to and from the relay's port dropped, headless Chromium publishes with WHIP and watches itself back with WHEP over the relay's passive TCP candidate (ICE over TCP, RFC 4571 framing)")
        func chromiumOverICETCP() async throws {
            let platform = try await LocalPlatform.start()
            let tcpPort = try #require(platform.relay.tcpPort)
            let firewall = try UDPFirewall.dropping(port: platform.relay.mediaPort)
            defer { firewall.remove() }
            let collector = try ReportCollector()
            defer { collector.close() }
            var query = URLComponents(string: platform.httpURL + "/")!
            query.queryItems = [
                URLQueryItem(name: "publish", value: "tcp-room"),
                URLQueryItem(name: "publishToken", value: try platform.token(.publish)),
                URLQueryItem(name: "watch", value: "tcp-room"),
                URLQueryItem(name: "token", value: try platform.token(.stream, tag: .channelAlias("tcp-room"))),
                URLQueryItem(name: "report", value: collector.url),
            ]
            let browser = try HeadlessChromium.open(query.url!.absoluteString)
            defer { browser.close() }
            try await eventually("Chromium decoding 30 frames it published over ICE-TCP", within: .seconds(40)) {
                collector.latest("watch").map { $0.number("framesDecoded") >= 30 } ?? false
            }
            let watched = try #require(collector.latest("watch"))
            let published = try #require(collector.latest("publish"))
            #expect(watched.string("transport") == "tcp" && published.string("transport") == "tcp", "watch \(watched), publish \(published)")
            #expect(watched.string("connectionState") == "connected" && watched.string("srtpCipher") == "SRTP_AEAD_AES_128_GCM", "\(watched)")
            #expect(tcpPort != 0 && platform.relay.statistics().srtpFailures == 0)
            await platform.shutdown()
        }

        @Test("over HTTPS with a private CA in its certificate store, headless Chromium loads the page, publishes with WHIP and watches itself back with WHEP; an SDK client over wss:// decodes the browser's video")
        func chromiumOverHTTPS() async throws {
            let certificates = try TestCertificates.make()
            defer { certificates.remove() }
            let platform = try await tlsPlatform(certificates.leaf)
            let collector = try ReportCollector()
            defer { collector.close() }
            // By name: the certificate is for localhost and 127.0.0.1, the origin a secure one.
            var query = URLComponents(string: platform.httpURL.replacingOccurrences(of: "127.0.0.1", with: "localhost") + "/")!
            #expect(query.scheme == "https")
            query.queryItems = [
                URLQueryItem(name: "publish", value: "secure-room"),
                URLQueryItem(name: "publishToken", value: try platform.token(.publish)),
                URLQueryItem(name: "watch", value: "secure-room"),
                URLQueryItem(name: "token", value: try platform.token(.stream, tag: .channelAlias("secure-room"))),
                URLQueryItem(name: "report", value: collector.url),
            ]
            let browser = try HeadlessChromium.open(query.url!.absoluteString, trusting: certificates.authority)
            defer { browser.close() }
            let sdk = tlsClient(platform, trusting: certificates.authority)
            try await sdk.start(authToken: try platform.token(.auth))
            let stream = try await subscribeToChannel(sdk, platform, alias: "secure-room")
            let (renderer, frames) = try await countFrames(stream)
            try await eventually("Chromium over HTTPS decoding 30 frames it published", within: .seconds(40)) {
                collector.latest("watch").map { $0.number("framesDecoded") >= 30 } ?? false
            }
            let watched = try #require(collector.latest("watch"))
            #expect(watched.string("connectionState") == "connected" && watched.string("srtpCipher") == "SRTP_AEAD_AES_128_GCM", "\(watched)")
            #expect(await eventually { frames.count >= 30 }, "the SDK client decoded \(frames.count) of the browser's frames")
            await renderer.stop()
            await stream.stop()
            await sdk.stop()
            await platform.shutdown()
        }

        @Test("headless Chromium publishes with WHIP (AES-GCM) from the served page and watches itself back with WHEP; an SDK subscriber decodes the browser's 640×480 H.264")
        func chromiumPublishesAndWatches() async throws {
            let platform = try await LocalPlatform.start()
            let page = try curlRequest("GET", platform.httpURL + "/", contentType: nil, token: nil, body: nil)
            #expect(page.status == 200 && page.contentType.hasPrefix("text/html") && page.body.contains("RTCPeerConnection") && page.body.contains("application/sdp"))
            let collector = try ReportCollector()
            defer { collector.close() }
            var query = URLComponents(string: platform.httpURL + "/")!
            query.queryItems = [
                URLQueryItem(name: "publish", value: "browser-room"),
                URLQueryItem(name: "publishToken", value: try platform.token(.publish)),
                URLQueryItem(name: "watch", value: "browser-room"),
                URLQueryItem(name: "token", value: try platform.token(.stream, tag: .channelAlias("browser-room"))),
                URLQueryItem(name: "report", value: collector.url),
            ]
            let browser = try HeadlessChromium.open(query.url!.absoluteString)
            defer { browser.close() }
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let stream = try await subscribeToChannel(sdk, platform, alias: "browser-room")
            let (renderer, frames) = try await countFrames(stream)
            try await eventually("Chromium decoding 60 frames it published", within: .seconds(40)) {
                collector.latest("watch").map { $0.number("framesDecoded") >= 60 } ?? false
            }
            let watched = try #require(collector.latest("watch"))
            #expect(watched.string("dtlsState") == "connected" && watched.string("connectionState") == "connected", "\(watched)")
            #expect(watched.string("srtpCipher") == "SRTP_AEAD_AES_128_GCM", "\(watched)")
            #expect(watched.string("codec").lowercased() == "video/h264")
            #expect(watched.number("width") == 640 && watched.number("height") == 480)
            let published = try #require(collector.latest("publish"))
            #expect(published.number("framesEncoded") >= 60 && published.string("dtlsState") == "connected", "\(published)")
            #expect(collector.reports("watch").allSatisfy { $0["error"] == nil } && collector.reports("publish").allSatisfy { $0["error"] == nil })
            #expect(await eventually { frames.count >= 30 }, "the SDK subscriber decoded \(frames.count) of the browser's frames")
            #expect(frames.size == (640, 480))
            let statistics = platform.relay.statistics()
            #expect(statistics.webRTCPeers == 2 && statistics.dtlsFailures == 0 && statistics.srtpFailures == 0)
            _ = renderer
            await sdk.stop()
            await platform.shutdown()
        }

        @Test("headless Chromium publishes a simulcast with WHIP (three RIDs, H.264, no SSRCs in its offer): the relay binds each layer to the browser's SSRC from its RID; SDK viewers kept on the lowest and the best layer decode 320×180 and 1280×720, one limiting itself to 800 kbit/s gets 640×360; Chromium watching it back over WHEP, whose REMB only follows what it receives, is probed up to 1280×720")
        func chromiumPublishesSimulcast() async throws {
            let platform = try await LocalPlatform.start()
            let collector = try ReportCollector()
            defer { collector.close() }
            var query = URLComponents(string: platform.httpURL + "/")!
            query.queryItems = [
                URLQueryItem(name: "publish", value: "layers"),
                URLQueryItem(name: "publishToken", value: try platform.token(.publish, capabilities: [SimulcastLayer.capability])),
                URLQueryItem(name: "simulcast", value: "1"),
                URLQueryItem(name: "watch", value: "layers"),
                URLQueryItem(name: "token", value: try platform.token(.stream, tag: .channelAlias("layers"))),
                URLQueryItem(name: "report", value: collector.url),
            ]
            let browser = try HeadlessChromium.open(query.url!.absoluteString)
            defer { browser.close() }
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let lowest = try await subscribeToChannel(sdk, platform, alias: "layers", layer: .lowest)
            #expect(lowest.getVideoTracks().count == 1, "the layers reach a viewer as one video track")
            let best = try await subscribeToChannel(sdk, platform, alias: "layers", layer: .best)
            let limited = try await subscribeToChannel(sdk, platform, alias: "layers")
            let limit = limited.getVideoTracks()[0].limitBandwidth(800_000)
            let (lowestRenderer, lowestFrames) = try await countFrames(lowest)
            let (bestRenderer, bestFrames) = try await countFrames(best)
            let (limitedRenderer, limitedFrames) = try await countFrames(limited)

            try await eventually("the lowest layer decoded at 320×180", within: .seconds(30)) { lowestFrames.widths[320, default: 0] >= 30 }
            try await eventually("the limited viewer on the 640×360 layer", within: .seconds(30)) { limitedFrames.widths[640, default: 0] >= 30 }
            // The best layer comes once the browser's own estimate of its uplink allows it.
            try await eventually("the best layer decoded at 1280×720", within: .seconds(40)) { bestFrames.widths[1280, default: 0] >= 30 }
            #expect(lowestFrames.widths.keys.sorted() == [320], "\(lowestFrames.widths)")
            #expect(bestFrames.size == (1280, 720) && lowestFrames.size == (320, 180) && limitedFrames.size == (640, 360))
            #expect(limitedFrames.widths[1280] == nil, "never above its own limit: \(limitedFrames.widths)")

            let published = try #require(collector.latest("publish"))
            #expect(published.string("layerSizes") == "h 1280×720, l 320×180, m 640×360", "\(published)")
            try await eventually("Chromium decoding 60 frames of its own simulcast", within: .seconds(30)) {
                collector.latest("watch").map { $0.number("framesDecoded") >= 60 } ?? false
            }
            // Its REMB never grows past 1.5× what it receives: the relay probes it up to the best layer.
            try await eventually("Chromium watching its own simulcast at 1280×720", within: .seconds(40)) {
                collector.latest("watch").map { $0.number("width") == 1280 } ?? false
            }
            let watchedWidths = collector.reports("watch").map { Int($0.number("width")) }
            print("chromium simulcast: the WHEP viewer's widths, a second apart: \(watchedWidths)")
            #expect(collector.reports("watch").allSatisfy { $0["error"] == nil } && collector.reports("publish").allSatisfy { $0["error"] == nil })
            let statistics = platform.relay.statistics()
            #expect(statistics.webRTCPeers == 2 && statistics.srtpFailures == 0 && statistics.dtlsFailures == 0, "\(statistics)")
            limit.dispose()
            _ = (lowestRenderer, bestRenderer, limitedRenderer)
            await sdk.stop()
            await platform.shutdown()
        }

        @Test("an SDK publisher plays in headless Chromium via WHEP with a token from the sample backend: frames decoded, DTLS connected, an SRTP cipher, a latency estimate; a screenshot of the page shows the colour bars playing")
        func chromiumWatchesSDKPublisher() async throws {
            let platform = try await LocalPlatform.start()
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await stampedMedia(audio: true)
            let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media, tags: ["channelAlias:sdk-room"])
            let collector = try ReportCollector()
            defer { collector.close() }
            var query = URLComponents(string: platform.httpURL + "/")!
            // No token: the page asks the platform's sample backend for one, as a viewer's app would.
            query.queryItems = [URLQueryItem(name: "watch", value: "sdk-room"), URLQueryItem(name: "report", value: collector.url)]
            let browser = try HeadlessChromium.open(query.url!.absoluteString)
            defer { browser.close() }
            try await eventually("Chromium decoding 60 frames", within: .seconds(40)) {
                collector.latest("watch").map { $0.number("framesDecoded") >= 60 } ?? false
            }
            let watched = try #require(collector.latest("watch"))
            #expect(watched.string("dtlsState") == "connected", "\(watched)")
            #expect(watched.string("srtpCipher").hasPrefix("SRTP_"), "\(watched)")
            #expect(watched.number("width") == 640 && watched.number("height") == 360)
            #expect(watched.number("audioPacketsReceived") > 0)
            #expect(watched.number("latencyEstimateMs") > 0 && watched.number("latencyEstimateMs") < 1_000, "\(watched)")
            // What a person would see: a screenshot of the page, its player showing the colour bars.
            let shot = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-page-\(UUID().uuidString).png").path
            defer { try? FileManager.default.removeItem(atPath: shot) }
            try browser.screenshot(to: shot, repository: repositoryRoot)
            let picture = try await decodePNG(shot)
            #expect(picture.width == 1280 && picture.height > 600, "\(picture.width)×\(picture.height)")
            // The page itself is black, white and grey; the bars' saturated colours are the video.
            #expect(picture.saturatedShare > 0.05, "\(Int(picture.saturatedShare * 100)) % of the page is colourful: the player shows no picture")
            #expect(!publisher.hasEnded)
            await publisher.stop()
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
        }

        @Test("Chromium watching through 5 % loss on the relay → browser leg (our impairment proxy answering for the relay's candidate): the browser NACKs, the relay retransmits from its cache, the picture keeps moving")
        func chromiumRecoversLoss() async throws {
            // The answer announces 127.0.0.2 at the relay's port: the proxy listens there and
            // forwards to the relay on 127.0.0.1, dropping 5 % of what comes back.
            var relayConfiguration = RelayConfiguration()
            relayConfiguration.announcedAddresses = ["127.0.0.2"]
            let platform = try await LocalPlatform.start(relayConfiguration: relayConfiguration)
            let proxy = try UDPImpairmentProxy(server: "127.0.0.1", serverPort: Int(platform.relay.mediaPort),
                                               listenHost: "127.0.0.2", listenPort: Int(platform.relay.mediaPort), seed: 19)
            defer { proxy.stop() }
            proxy.setProfile(ImpairmentProfile(loss: .uniform(0.05)), for: .toClient)
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await stampedMedia(audio: true)
            let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media, tags: ["channelAlias:lossy-room"])
            let collector = try ReportCollector()
            defer { collector.close() }
            var query = URLComponents(string: platform.httpURL + "/")!
            query.queryItems = [
                URLQueryItem(name: "watch", value: "lossy-room"),
                URLQueryItem(name: "token", value: try platform.token(.stream, tag: .channelAlias("lossy-room"))),
                URLQueryItem(name: "report", value: collector.url),
            ]
            let browser = try HeadlessChromium.open(query.url!.absoluteString)
            defer { browser.close() }
            try await eventually("Chromium decoding 300 frames through the loss", within: .seconds(45)) {
                collector.latest("watch").map { $0.number("framesDecoded") >= 300 } ?? false
            }
            let watched = try #require(collector.latest("watch"))
            #expect(proxy.counters(for: .toClient).lost > 20, "the proxy dropped \(proxy.counters(for: .toClient).lost) packets")
            #expect(watched.number("nackCount") > 0, "\(watched)")
            #expect(platform.relay.statistics().nacksServed > 0, "the relay answered no NACK")
            // Recovered, not frozen: the frame rate over the last second stays near the source's 30.
            #expect(watched.number("framesPerSecond") >= 20, "\(watched)")
            #expect(watched.string("connectionState") == "connected")
            #expect(!publisher.hasEnded)
            await publisher.stop()
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
        }

        @Test("WHIP/WHEP refusals: no, forged, expired, wrong-type or other-address token → 401 (a token bound to the caller's address is accepted); garbage → 400; H.265 only, or VP8 to a recorded stream → 422 (naming what recordings take); no such stream → 404; not SDP → 415; all problem+json, nothing published by a refused request")
        func refusals() async throws {
            let platform = try await LocalPlatform.start()
            let whip = platform.httpURL + "/whip/refused"
            let forged = try DigestTokenBuilder().expiresAt(Date().addingTimeInterval(60)).type(.publish)
                .encode(applicationId: platform.configuration.applicationId, secret: "not-the-secret")
            let cases: [(String?, String, Int, String)] = [
                (nil, browserOffer(), 401, "no token"),
                (forged, browserOffer(), 401, "forged"),
                (try platform.token(.publish, lifetime: -60), browserOffer(), 401, "expired"),
                (try platform.token(.stream, tag: .channelAlias("refused")), browserOffer(), 401, "a stream token to publish"),
                (try DigestTokenBuilder().expiresAt(Date().addingTimeInterval(60)).type(.publish).remoteAddress("192.0.2.77")
                    .encode(applicationId: platform.configuration.applicationId, secret: platform.configuration.secret), browserOffer(), 401,
                 "bound to another remote address"),
                (try platform.token(.publish), "this is not SDP", 400, "garbage"),
                (try platform.token(.publish), String(browserOffer().prefix(120)), 400, "truncated"),
                (try platform.token(.publish), browserOffer(video: ["a=rtpmap:45 H265/90000"], videoPayloadTypes: "45"), 422, "H.265 only"),
                (try platform.token(.publish), browserOffer(video: ["a=rtpmap:96 VP8/90000"], videoPayloadTypes: "96"), 422, "VP8 to be recorded"),
            ]
            for (token, offer, status, what) in cases {
                let url = what == "VP8 to be recorded" ? whip + "?type=record" : whip
                let reply = try curlRequest("POST", url, token: token, body: offer)
                #expect(reply.status == status, "\(what): \(reply.status) \(reply.body)")
                #expect(reply.contentType.hasPrefix("application/problem+json"), "\(what): \(reply.contentType)")
                let problem = try JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as? [String: Any]
                #expect((problem?["status"] as? Int) == status && !((problem?["detail"] as? String) ?? "").isEmpty, "\(what): \(reply.body)")
                if status == 401 { #expect(reply.headers.lowercased().contains("www-authenticate: bearer"), "\(what)") }
                if what == "VP8 to be recorded" { #expect(reply.body.contains("recordings take H.264, VP9 or AV1"), "\(reply.body)") }
            }
            let missing = try curlRequest("POST", platform.httpURL + "/whep/nobody-here", token: try platform.token(.stream, tag: .channelAlias("nobody-here")),
                                          body: browserOffer(direction: "recvonly"))
            #expect(missing.status == 404 && missing.contentType.hasPrefix("application/problem+json"), "\(missing)")
            let notSDP = try curlRequest("POST", whip, contentType: "application/json", token: try platform.token(.publish), body: "{}")
            #expect(notSDP.status == 415)
            let options = try curlRequest("OPTIONS", whip, contentType: nil, token: nil, body: nil)
            #expect(options.status == 204 && options.headers.lowercased().contains("accept-post: application/sdp"))
            #expect(options.headers.lowercased().contains("access-control-allow-origin"))
            #expect(try curlRequest("DELETE", whip + "/whip-unknown", contentType: nil, token: nil, body: nil).status == 404)
            var statistics = platform.relay.statistics()
            #expect(statistics.streams == 0 && statistics.webRTCPeers == 0)
            // The same binding to the address the request comes from is accepted.
            let bound = try DigestTokenBuilder().expiresAt(Date().addingTimeInterval(60)).type(.publish).remoteAddress("127.0.0.1")
                .encode(applicationId: platform.configuration.applicationId, secret: platform.configuration.secret)
            let accepted = try curlRequest("POST", whip, token: bound, body: browserOffer())
            #expect(accepted.status == 201 && accepted.contentType.hasPrefix("application/sdp"), "\(accepted.status) \(accepted.body)")
            statistics = platform.relay.statistics()
            #expect(statistics.streams == 1 && statistics.webRTCPeers == 1)
            await platform.shutdown()
        }

        @Test("a check with the wrong ice-pwd is answered 401 and opens nothing; an offer whose fingerprint is not the peer's certificate fails the handshake itself: no keys, torn down, no media forwarded")
        func iceAndFingerprintRefusals() async throws {
            let platform = try await LocalPlatform.start()
            // A WHIP session whose peer never connects: the relay's ufrag from the answer.
            let created = try curlRequest("POST", platform.httpURL + "/whip/ice-room", token: try platform.token(.publish), body: browserOffer())
            #expect(created.status == 201, "\(created)")
            let ufrag = try #require(created.body.split(separator: "\r\n").first { $0.hasPrefix("a=ice-ufrag:") }?.dropFirst("a=ice-ufrag:".count))
            var check = STUNMessage(kind: .request, transactionID: STUNMessage.newTransactionID())
            check.username = "\(ufrag):Fq3x"
            check.priority = 1_853_824_767
            check.iceControlling = 42
            check.useCandidate = true
            let udp = try LoopbackUDPClient()
            defer { udp.close() }
            let answer = try udp.exchange(check.encoded(integrityKey: Array("not-the-ice-password-at-all".utf8), fingerprint: true),
                                          with: platform.relay.mediaPort)
            let response = try STUNMessage(decoding: try #require(answer, "no answer to the check"))
            #expect(response.kind == .errorResponse && response.errorCode?.code == 401, "\(response)")
            // The relay publishes its counters after each batch: wait for the refusal and its answer to show.
            #expect(await eventually { platform.relay.statistics().stunRefusals >= 1 && platform.relay.statistics().packetsOut >= 1 })
            // The same socket's DTLS is not accepted: it never passed a check.
            let sentBefore = platform.relay.statistics().packetsOut
            let unknownBefore = platform.relay.statistics().unknownPackets
            let dtlsAnswer = try udp.exchange([22, 254, 253] + [UInt8](repeating: 0, count: 40), with: platform.relay.mediaPort, wait: .milliseconds(300))
            #expect(dtlsAnswer == nil, "the relay answered DTLS from an address that passed no check")
            #expect(await eventually { platform.relay.statistics().unknownPackets > unknownBefore })
            #expect(platform.relay.statistics().packetsOut == sentBefore && platform.relay.statistics().dtlsFailures == 0)

            // webrtcbin with a forged fingerprint in its offer.
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let baseline = platform.relay.statistics()
            let forger = try ScriptedPeer.start(.whip, platform, name: "forged-room", token: try platform.token(.publish), seconds: 4, forgeFingerprint: true)
            let outcome = try await forger.outcome()
            #expect(outcome.status == 201)
            #expect(outcome.video_frames == 0)
            // Refused inside the handshake (bad_certificate): webrtcbin's DTLS fails, it never connects.
            #expect(outcome.connection_state != "connected" && outcome.error != nil, "\(outcome)")
            #expect(platform.relay.statistics().dtlsFailures >= 1)
            // Only the first (never connected) session is left.
            #expect(await eventually {
                platform.relay.statistics().webRTCPeers == baseline.webRTCPeers && platform.relay.statistics().streams == baseline.streams
            })
            // The stream was torn down with the handshake: no subscriber can find it.
            await #expect(throws: (any Error).self) {
                _ = try await sdk.subscribe(streamToken: try platform.token(.stream, tag: .channelAlias("forged-room")))
            }
            // Its DELETE races the teardown: the session is gone (404) or goes now (200).
            #expect(outcome.delete_status == 404 || outcome.delete_status == 200, "\(outcome.delete_status)")
            await sdk.stop()
            await platform.shutdown()
        }

        @Test("2,000 fuzzed STUN and DTLS datagrams (bad lengths, truncated records, forged checks) are dropped and counted while a webrtcbin viewer keeps decoding")
        func fuzzedDatagrams() async throws {
            let platform = try await LocalPlatform.start()
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await stampedMedia(audio: true)
            let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media, tags: ["channelAlias:fuzz-room"])
            let viewer = try ScriptedPeer.start(.whep, platform, name: "fuzz-room",
                                                 token: try platform.token(.stream, originStreamId: publisher.streamId), seconds: 6)
            let before = platform.relay.statistics()
            let udp = try LoopbackUDPClient()
            defer { udp.close() }
            var random = SeededRNG(seed: 19)
            var check = STUNMessage(kind: .request, transactionID: STUNMessage.newTransactionID())
            check.username = "nobody:Fq3x"
            check.priority = 1
            check.iceControlling = 1
            let valid = check.encoded(integrityKey: Array("some-password-of-24-chars".utf8), fingerprint: true)
            for index in 0..<2_000 {
                var datagram: [UInt8]
                switch index % 4 {
                case 0: // STUN header with a random length and random attributes
                    datagram = [0, 1] + (0..<Int.random(in: 0...200, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                case 1: // a signed check truncated or with a byte flipped
                    datagram = Array(valid.prefix(Int.random(in: 1...valid.count, using: &random)))
                    let flip = Int.random(in: 0..<datagram.count, using: &random)
                    datagram[flip] ^= UInt8.random(in: 1...255, using: &random)
                    datagram[0] &= 0x03
                case 2: // a DTLS record header with a random length field and body
                    datagram = [22, 254, 253] + (0..<Int.random(in: 0...300, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                default: // any first byte in the DTLS range, truncated
                    datagram = [UInt8.random(in: 20...63, using: &random)] + (0..<Int.random(in: 0...12, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                }
                _ = try udp.exchange(datagram, with: platform.relay.mediaPort, wait: .zero)
                if index % 100 == 99 { try await Task.sleep(for: .milliseconds(20)) }
            }
            let seen = try await viewer.outcome()
            #expect(seen.status == 201 && seen.video_frames >= 60 && seen.audio_buffers >= 50, "\(seen)")
            let after = platform.relay.statistics()
            let dropped = (after.stunRefusals - before.stunRefusals) + (after.unknownPackets - before.unknownPackets)
            #expect(dropped >= 1_900, "only \(dropped) of 2,000 fuzzed datagrams counted as dropped")
            #expect(after.dtlsFailures == before.dtlsFailures, "a fuzzed record reached a DTLS association")
            #expect(!publisher.hasEnded)
            await publisher.stop()
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
        }

        @Test("consent freshness: a WHIP peer killed without DELETE is torn down after the consent timeout; its SDK viewer sees the stream end as failed")
        func consentExpiry() async throws {
            var relay = RelayConfiguration()
            relay.webRTCConsentTimeout = .seconds(2)
            let platform = try await LocalPlatform.start(relayConfiguration: relay)
            let publisher = try ScriptedPeer.start(.whip, platform, name: "vanishing", token: try platform.token(.publish), seconds: 60)
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let stream = try await subscribeToChannel(sdk, platform, alias: "vanishing")
            let (renderer, frames) = try await countFrames(stream)
            #expect(await eventually { frames.count >= 30 })
            let killed = ContinuousClock.now
            publisher.kill()
            let reason = await stream.ended()
            let after = ContinuousClock.now - killed
            guard case .remote(let why, let description) = reason else {
                Issue.record("the stream ended locally: \(reason)")
                return
            }
            #expect(why == .failed)
            #expect(description?.contains("consent") == true, "\(description ?? "")")
            #expect(after < .seconds(10), "torn down \(after) after the peer vanished")
            #expect(await eventually { platform.relay.statistics().webRTCPeers == 0 })
            _ = renderer
            await sdk.stop()
            await platform.shutdown()
        }
    }
}

extension Leaks {
    @Suite("WebRTC sessions free what they hold", .serialized)
    struct WebRTCSessionLeakTests {
        @Test("200 WHEP sessions deleted and 200 left to the connect timeout: no peer, subscriber, descriptor or thread left, memory flat")
        func sessionsFreeEverything() async throws {
            var relay = RelayConfiguration()
            relay.webRTCConnectTimeout = .seconds(1)
            let platform = try await LocalPlatform.start(relayConfiguration: relay)
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await stampedMedia()
            let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media, tags: ["channelAlias:churn"])
            let token = try platform.token(.stream, originStreamId: publisher.streamId)
            let offer = browserOffer(direction: "recvonly")

            func round(delete: Bool) async throws {
                for index in 0..<200 {
                    let created = try curlRequest("POST", platform.httpURL + "/whep/churn", token: token, body: offer)
                    #expect(created.status == 201, "session \(index): \(created.status) \(created.body)")
                    guard delete else { continue }
                    let location = try #require(created.headers.split(separator: "\r\n").first { $0.lowercased().hasPrefix("location:") })
                    let path = location.dropFirst("location:".count).trimmingCharacters(in: .whitespaces)
                    #expect(try curlRequest("DELETE", platform.httpURL + path, contentType: nil, token: nil, body: nil).status == 200)
                }
                try await eventually("every WebRTC peer gone", within: .seconds(20)) {
                    let statistics = platform.relay.statistics()
                    return statistics.webRTCPeers == 0 && statistics.subscribers == 0
                }
            }
            try await round(delete: true)
            ProcessFootprint.releaseFreeMemory()
            let before = ProcessFootprint.current()
            try await round(delete: true)
            try await round(delete: false)
            ProcessFootprint.releaseFreeMemory()
            let after = ProcessFootprint.current()
            #expect(after.openDescriptors <= before.openDescriptors + 2, "descriptors \(before.openDescriptors) → \(after.openDescriptors)")
            #expect(after.threads <= before.threads + 2, "threads \(before.threads) → \(after.threads)")
            #expect(after.residentKiB - before.residentKiB < 8_192, "resident \(before.residentKiB) → \(after.residentKiB) KiB")
            #expect(!publisher.hasEnded)
            await publisher.stop()
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
        }
    }
}

/// A UDP socket on 127.0.0.1 that sends one datagram and waits for one answer.
final class LoopbackUDPClient: Sendable {
    let descriptor: Int32

    init() throws {
        descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard descriptor >= 0 else { throw StandInFailure(description: "no UDP socket: errno \(errno)") }
    }

    func exchange(_ bytes: [UInt8], with port: UInt16, wait: Duration = .seconds(2)) throws -> [UInt8]? {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(descriptor, bytes, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let milliseconds = Int32(wait.components.seconds * 1_000 + wait.components.attoseconds / 1_000_000_000_000_000)
        guard poll(&poller, 1, milliseconds) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 2_048)
        let count = recv(descriptor, &buffer, buffer.count, 0)
        return count > 0 ? Array(buffer[0..<count]) : nil
    }

    func close() { Glibc.close(descriptor) }
}
