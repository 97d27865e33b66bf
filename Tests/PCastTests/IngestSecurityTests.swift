import Foundation
@testable import PCast
import PCastContracts
import PCastMedia
@testable import PCastMediaServices
import PCastNode
import PCastProtocol
import PCastServer
import PCastTestSupport
import Testing

extension OneAtATime {
    /// The ingest attacks, through a real platform: listeners on loopback record whether the platform
    /// connected to them at all.
    @Suite("Ingest security: the platform connects only where the policy looked, and only for an authorised publish", .serialized)
    struct IngestSecurityTests {
        func refusal(_ owner: PCast, token: String, uri: String) async -> PCastError? {
            do throws(PCastError) {
                let remote = try await owner.publishRemote(.init(streamToken: token, streamURI: uri))
                try? await remote.stop()
                return nil
            } catch {
                return error
            }
        }

        @Test("a URI that one parser reads as public and another as loopback connects nowhere")
        func parserMismatch() async throws {
            let probe = try TCPProbe.start()
            defer { probe.stop() }
            let platform = try await LocalPlatform.start()
            let owner = try await client(platform)
            for uri in ["rtsp://203.0.113.7#:x@127.0.0.1:\(probe.port)/x", "http://203.0.113.7#@127.0.0.1:\(probe.port)/x",
                        "rtsp://user@127.0.0.1:\(probe.port)/x", "http://127.1:\(probe.port)/x", "http://[::ffff:127.0.0.1]:\(probe.port)/x"] {
                let error = await refusal(owner, token: try platform.token(.publish), uri: uri)
                #expect(error?.status == .unauthorized, "\(uri): \(String(describing: error))")
            }
            try await Task.sleep(for: .milliseconds(500))
            #expect(probe.connections == 0)
            await owner.stop()
            await platform.shutdown()
        }

        @Test("an allowed server's redirect to another host is not followed")
        func redirectsAreNotFollowed() async throws {
            let inner = try TCPProbe.start(address: "127.0.0.2")
            defer { inner.stop() }
            let redirect = "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.2:\(inner.port)/clip.mp4\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            let outer = try TCPProbe.start(answer: Array(redirect.utf8))
            defer { outer.stop() }
            var policy = IngestURIPolicy()
            policy.allowedHosts = ["127.0.0.1"]
            let platform = try await LocalPlatform.start(ingestPolicy: policy)
            let owner = try await client(platform)
            // Refused at once, or failed as soon as the redirect arrives: either way it never plays.
            let token = try platform.token(.publish)
            do throws(PCastError) {
                let remote = try await owner.publishRemote(.init(streamToken: token, streamURI: "http://127.0.0.1:\(outer.port)/clip.mp4"))
                let ended = await remote.ended()
                #expect(ended.0 == .failed, "\(ended)")
            } catch {
                #expect(error.status == .failed, "\(error)")
            }
            #expect(outer.connections >= 1, "the allowed server was asked")
            #expect(inner.connections == 0, "the redirect was followed")
            await owner.stop()
            await platform.shutdown()
        }

        @Test("a forged or wrong-type publish token opens no source")
        func tokenBeforeSource() async throws {
            let probe = try TCPProbe.start()
            defer { probe.stop() }
            var policy = IngestURIPolicy()
            policy.allowedHosts = ["127.0.0.1"]
            let platform = try await LocalPlatform.start(ingestPolicy: policy)
            let owner = try await client(platform)
            let uri = "http://127.0.0.1:\(probe.port)/clip.mp4"
            for token in ["DIGEST:forged", try platform.token(.stream), try platform.token(.publish, lifetime: -5),
                          try platform.token(.publish, tag: .channelAlias("mine"))] {
                var request = ClientMessage.PublishRemote(streamToken: token, streamURI: uri)
                request.tags = ["channelAlias:theirs"]
                let error: PCastError?
                do throws(PCastError) {
                    _ = try await owner.publishRemote(request)
                    error = nil
                } catch let caught {
                    error = caught
                }
                #expect(error?.status == .unauthorized, "\(String(describing: error))")
            }
            try await Task.sleep(for: .milliseconds(500))
            #expect(probe.connections == 0)
            await owner.stop()
            await platform.shutdown()
        }

        @Test("ingests are capped per session: a third ingest is refused with capacity while two wait on a silent source")
        func ingestCap() async throws {
            let silent = try SilentTCPServer()
            defer { silent.stop() }
            var policy = IngestURIPolicy()
            policy.allowedHosts = ["127.0.0.1"]
            let platform = try await LocalPlatform.start(ingestPolicy: policy) { $0.maximumIngestsPerSession = 2 }
            let owner = try await client(platform)
            let token = try platform.token(.publish)
            let uri = "http://127.0.0.1:\(silent.port)/clip.mp4"
            var held: [RemotePublisher] = []
            for _ in 0..<2 { held.append(try await owner.publishRemote(.init(streamToken: token, streamURI: uri))) }
            let third = await refusal(owner, token: token, uri: uri)
            #expect(third?.status == .capacity, "\(String(describing: third))")
            // Another session still has its own allowance.
            let other = try await client(platform)
            let fourth = try await other.publishRemote(.init(streamToken: token, streamURI: uri))
            try await fourth.stop()
            for remote in held { try await remote.stop() }
            await other.stop()
            await owner.stop()
            await platform.shutdown()
        }

        @Test("64 half-open RTMP handshakes from one address do not lock out an encoder on another")
        func rtmpHalfOpenFlood() async throws {
            let platform = try await LocalPlatform.start(rtmpPort: 0)
            let port = try #require(platform.rtmpPort)
            let flood = await RawTCP.offload {
                (0..<64).compactMap { _ -> Int32? in
                    guard let fd = RawTCP.connect(to: port, from: "127.0.0.2") else { return nil }
                    RawTCP.write(fd, [0x03] + [UInt8](repeating: 0, count: 100))   // C0 and a sliver of C1
                    return fd
                }
            }
            defer { flood.forEach(RawTCP.close) }
            let ffmpeg = try ChildProcess.spawn(try executable("ffmpeg"), [
                "-hide_banner", "-loglevel", "error", "-re", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-f", "lavfi", "-i", "sine",
                "-t", "6", "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-g", "25", "-c:a", "aac",
                "-f", "flv", "rtmp://127.0.0.1:\(port)/live/\(try platform.token(.publish, applyTags: ["channelAlias:flooded"]))",
            ], environment: ProcessInfo.processInfo.environment)
            defer { ffmpeg.stop() }
            let viewer = try await client(platform)
            var subscribed: MediaStream?
            for _ in 0..<40 where subscribed == nil {
                subscribed = try? await viewer.subscribe(streamToken: try platform.token(.stream, tag: .channelAlias("flooded")))
                if subscribed == nil { try await Task.sleep(for: .milliseconds(250)) }
            }
            #expect(subscribed != nil, "the encoder could not publish while one address held half-open handshakes")
            await viewer.stop()
            await platform.shutdown()
        }

        /// ffmpeg pushes `key` to `url` for `seconds`; a viewer subscribed to the `alias` it applies decodes frames.
        func pushed(to url: String, alias: String, platform: LocalPlatform, extra: [String] = [],
                    viewer makeViewer: (LocalPlatform) async throws -> PCast = { try await client($0) }) async throws -> Int {
            let ffmpeg = try ChildProcess.spawn(try executable("ffmpeg"), [
                "-hide_banner", "-loglevel", "error", "-re", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-f", "lavfi", "-i", "sine",
                "-t", "8", "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-g", "25", "-c:a", "aac",
            ] + extra + ["-f", "flv", url], environment: ProcessInfo.processInfo.environment)
            defer { ffmpeg.stop() }
            let viewer = try await makeViewer(platform)
            var subscribed: MediaStream?
            for _ in 0..<40 where subscribed == nil {
                subscribed = try? await viewer.subscribe(streamToken: try platform.token(.stream, tag: .channelAlias(alias)))
                if subscribed == nil { try await Task.sleep(for: .milliseconds(250)) }
            }
            guard let stream = subscribed else {
                await viewer.stop()
                return 0
            }
            let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            #expect(await renderer.start() == .ok)
            let frames = Values<Int>()
            try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { _ in frames.append(1) }
            _ = await eventually(.seconds(10)) { frames.all.count >= 25 }
            await renderer.stop()
            await viewer.stop()
            return frames.all.count
        }

        @Test("64 half-open RTMP handshakes from 8 addresses (each at its cap) do not lock out an encoder on another")
        func rtmpHalfOpenFloodFromManyAddresses() async throws {
            let platform = try await LocalPlatform.start(rtmpPort: 0)
            let port = try #require(platform.rtmpPort)
            // Eight addresses, each at its cap of eight: the endpoint's 64 places as the old single
            // budget counted them.
            let flood = await RawTCP.offload {
                (2..<10).flatMap { host in
                    (0..<8).compactMap { _ -> Int32? in
                        guard let fd = RawTCP.connect(to: port, from: "127.0.0.\(host)") else { return nil }
                        _ = RawTCP.write(fd, [0x03] + [UInt8](repeating: 0, count: 100))
                        return fd
                    }
                }
            }
            defer { flood.forEach(RawTCP.close) }
            #expect(flood.count == 64)
            let frames = try await pushed(to: "rtmp://127.0.0.1:\(port)/live/\(try platform.token(.publish, applyTags: ["channelAlias:many-flooded"]))",
                                          alias: "many-flooded", platform: platform)
            #expect(frames >= 25, "the encoder's stream showed \(frames) frames while 8 addresses held 64 half-open handshakes")
            await platform.shutdown()
        }

        @Test("ffmpeg pushes over RTMPS, checking the platform's certificate against the private CA; a viewer decodes the stream")
        func rtmpsPush() async throws {
            let certificates = try TestCertificates.make()
            defer { certificates.remove() }
            let platform = try await tlsPlatform(certificates.leaf, rtmps: true)
            let port = try #require(platform.rtmpsPort)
            let url = "rtmps://127.0.0.1:\(port)/live/\(try platform.token(.publish, applyTags: ["channelAlias:secure-push"]))"
            let frames = try await pushed(to: url, alias: "secure-push", platform: platform,
                                          extra: ["-tls_verify", "1", "-ca_file", certificates.authority]) { platform in
                let viewer = tlsClient(platform, trusting: certificates.authority)
                try await viewer.start(authToken: try platform.token(.auth))
                return viewer
            }
            #expect(frames >= 25, "\(frames) frames of the RTMPS push shown")
            await platform.shutdown()
        }
    }
}

@Suite("RTMP admission: publishers and handshakes have budgets of their own")
struct RTMPAdmissionTests {
    @Test("handshakes from one address stop at its cap; a full handshake budget closes the oldest; publishers have their own places")
    func budgets() {
        var state = RTMPAdmissionState(limits: .init(perAddress: 2, publishers: 2, pending: 4))
        let a1 = state.arrive(address: "a"), a2 = state.arrive(address: "a")
        #expect(a1.ticket != nil && a2.ticket != nil)
        #expect(state.arrive(address: "a").ticket == nil, "a third handshake from one address")
        let b1 = state.arrive(address: "b"), b2 = state.arrive(address: "b")
        #expect(state.pendingCount == 4)
        // The budget is full: c gets in, and a's oldest handshake is closed for it.
        let c1 = state.arrive(address: "c")
        #expect(c1.ticket != nil && c1.evicted == a1.ticket)
        let evictedPublishes = state.promote(a1.ticket!)
        #expect(!evictedPublishes, "an evicted handshake cannot publish")
        let b1Publishes = state.promote(b1.ticket!), c1Publishes = state.promote(c1.ticket!)
        #expect(b1Publishes && c1Publishes)
        #expect(state.publisherCount == 2 && state.pendingCount == 2)
        // Publishers' places are spent: another publish is refused, its handshake stays counted.
        let thirdPublishes = state.promote(b2.ticket!)
        #expect(!thirdPublishes)
        state.leave(c1.ticket!)
        let thirdPublishesLater = state.promote(b2.ticket!)
        #expect(thirdPublishesLater, "a place freed by a publisher leaving")
        state.leave(b1.ticket!)
        state.leave(b2.ticket!)
        state.leave(a2.ticket!)
        #expect(state.publisherCount == 0 && state.pendingCount == 0)
    }

    @Test("with the defaults, 8 addresses at their caps hold 64 handshakes and an encoder from a ninth still publishes")
    func defaultsKeepRoom() {
        var state = RTMPAdmissionState(limits: .init(perAddress: 8, publishers: 64))
        for host in 0..<8 {
            for _ in 0..<8 {
                let arrival = state.arrive(address: "h\(host)")
                #expect(arrival.ticket != nil && arrival.evicted == nil)
            }
        }
        let encoder = state.arrive(address: "encoder")
        #expect(encoder.ticket != nil && encoder.evicted == nil)
        let publishes = state.promote(encoder.ticket!)
        #expect(publishes)
    }
}

@Suite("RTMP push codec: the stream is announced in the codec its first video message names")
struct RTMPPushCodecTests {
    @Test("a first video message names the codec (legacy AVC, enhanced hvc1, AV1); metadata without video, or audio alone past the wait or the byte budget, means H.264; audio within the wait holds on; AV1 and VP6 are not carried")
    func announcedCodec() {
        let hold = RTMPPushConnection.codecWait / 2
        #expect(RTMPPushConnection.announcedCodec(of: .video(timestamp: 0, payload: [0x17, 0, 0, 0, 0, 1]), waited: .zero, heldBytes: 6) == .h264)
        #expect(RTMPPushConnection.announcedCodec(of: .video(timestamp: 0, payload: [0x90, 0x68, 0x76, 0x63, 0x31, 1]), waited: .zero, heldBytes: 6) == .h265)
        #expect(RTMPPushConnection.announcedCodec(of: .video(timestamp: 0, payload: [0x90, 0x61, 0x76, 0x30, 0x31]), waited: .zero, heldBytes: 5) == .av1)
        #expect(RTMPPushConnection.announcedCodec(of: .metadata(["audiocodecid": .number(10)], timestamp: 0), waited: .zero, heldBytes: 64) == .h264)
        #expect(RTMPPushConnection.announcedCodec(of: .metadata(["videocodecid": .number(12)], timestamp: 0), waited: .zero, heldBytes: 64) == nil)
        #expect(RTMPPushConnection.announcedCodec(of: .audio(timestamp: 0, payload: [0xaf, 1]), waited: hold, heldBytes: 2) == nil)
        #expect(RTMPPushConnection.announcedCodec(of: .audio(timestamp: 0, payload: [0xaf, 1]), waited: RTMPPushConnection.codecWait, heldBytes: 2) == .h264)
        #expect(RTMPPushConnection.announcedCodec(of: .audio(timestamp: 0, payload: [0xaf, 1]), waited: hold, heldBytes: RTMPPushConnection.codecWaitBytes) == .h264)
        // An unreadable video message names nothing: the wait goes on.
        #expect(RTMPPushConnection.announcedCodec(of: .video(timestamp: 0, payload: [0x93, 0x68]), waited: hold, heldBytes: 2) == nil)
        #expect(RTMPPushConnection.carried(.h264) == .h264 && RTMPPushConnection.carried(.h265) == .h265)
        #expect(RTMPPushConnection.carried(.av1) == nil && RTMPPushConnection.carried(.legacy(4)) == nil)
    }
}
