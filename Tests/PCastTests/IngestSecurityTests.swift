import Foundation
@testable import PCast
import PCastContracts
import PCastMedia
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
    }
}
