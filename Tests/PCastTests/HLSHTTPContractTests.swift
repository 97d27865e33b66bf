import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@testable import PCast
import PCastMedia
import PCastNode
import PCastProtocol
import PCastRelay
import PCastServer
import PCastTestSupport
import Testing

/// A response header, its name matched without regard to case.
private func responseHeader(_ response: HTTPURLResponse, _ name: String) -> String? {
    response.allHeaderFields.first { String(describing: $0.key).lowercased() == name.lowercased() }.map { String(describing: $0.value) }
}

/// A request's answer and how long it was held.
private struct HeldReply: Sendable {
    var status: Int
    var text: String
    var retryAfter: String?
    var allowOrigin: String?
    var waited: Duration
}

private func heldGet(_ url: String, bearer: String) async throws -> HeldReply {
    let asked = ContinuousClock.now
    let (data, response) = try await httpGet(url, bearer: bearer)
    return HeldReply(status: response.statusCode, text: String(decoding: data, as: UTF8.self), retryAfter: responseHeader(response, "Retry-After"),
                     allowOrigin: responseHeader(response, "Access-Control-Allow-Origin"), waited: ContinuousClock.now - asked)
}

/// The file name a playlist line or tag names, without the token query.
private func fileName(_ uri: Substring) -> String {
    String(uri.split(separator: "?").first ?? uri)
}

/// A browser's sending offer with SSRCs of its own (the relay refuses one another flow uses).
private func offerWithSSRCs(from base: Int) -> String {
    browserOffer()
        .replacingOccurrences(of: "a=ssrc:1001 ", with: "a=ssrc:\(base + 1) ")
        .replacingOccurrences(of: "a=ssrc:2002 ", with: "a=ssrc:\(base + 2) ")
}

extension OneAtATime {
    @Suite("Live HLS HTTP contract: held requests, caching and CORS, an ended stream's playlist", .serialized)
    struct HLSHTTPContractTests {
        @Test("a blocking playlist reload (_HLS_msn/_HLS_part) and a request for a part that cannot come (two segments on, after the WHIP publisher vanished without DELETE, its stream still live) are each held three target durations (3 × EXT-X-TARGETDURATION) and then answered 503 with Retry-After and Access-Control-Allow-Origin: *; the stream's playlist is still served afterwards, without EXT-X-ENDLIST")
        func heldRequestsGiveUp() async throws {
            var relay = RelayConfiguration()
            // The vanished peer's stream stays live (no consent expiry) while the requests wait.
            relay.webRTCConsentTimeout = .seconds(120)
            let platform = try await LocalPlatform.start(relayConfiguration: relay)
            let publisher = try ScriptedPeer.start(.whip, platform, name: "stalling", token: try platform.token(.publish, capabilities: ["streaming"]), seconds: 120)
            let token = try platform.token(.stream, tag: .channelAlias("stalling"), capabilities: ["streaming"])
            let base = "\(platform.httpURL)/hls/stalling"
            let url = "\(base)/index.m3u8?token=\(percentEncoded(token))"
            let first: String
            do {
                first = try await playlist(url, timeout: .seconds(30)) { tagLines($0, "#EXTINF").count >= 2 && !tagLines($0, "#EXT-X-PRELOAD-HINT").isEmpty }
            } catch {
                publisher.kill()
                do { _ = try await publisher.outcome() } catch { Issue.record("the WHIP publisher: \(error)") }
                await platform.shutdown()
                throw error
            }
            // Killed: no DELETE, its media simply stops; the stream stays live.
            publisher.kill()
            let target = try #require(tagLines(first, "#EXT-X-TARGETDURATION:").first.flatMap { Int($0.dropFirst("#EXT-X-TARGETDURATION:".count)) })
            let stopped = try await playlist(url) { !tagLines($0, "#EXT-X-PRELOAD-HINT").isEmpty }
            let hint = try #require(tagLines(stopped, "#EXT-X-PRELOAD-HINT").first)
            let hinted = try #require(hint.split(separator: "\"").dropFirst().first.map(fileName))
            // partM.P.m4s: M is the segment being gathered; two segments on can never be cut now.
            let sequence = try #require(hinted.dropFirst(4).dropLast(4).split(separator: ".").first.flatMap { Int($0) })
            let never = sequence + 2

            async let reloadReply = heldGet("\(base)/index.m3u8?_HLS_msn=\(never)&_HLS_part=0", bearer: token)
            async let partReply = heldGet("\(base)/part\(never).0.m4s", bearer: token)
            let reload = try await reloadReply
            let part = try await partReply
            for (what, reply) in [("blocking reload", reload), ("part request", part)] {
                #expect(reply.status == 503, "\(what): \(reply.status) \(reply.text)")
                #expect(reply.text.contains("not cut within"), "\(what): \(reply.text)")
                #expect(reply.retryAfter.flatMap { Int($0) }.map { $0 > 0 } == true, "\(what): Retry-After \(String(describing: reply.retryAfter))")
                #expect(reply.allowOrigin == "*", "\(what): \(String(describing: reply.allowOrigin))")
                #expect(reply.waited >= .seconds(3 * target), "\(what) answered after \(reply.waited), not three target durations (\(target) s)")
            }
            // The 503s were the waits giving up, not the stream ending.
            let still = try await hlsGet(url)
            #expect(still.status == 200 && tagLines(still.text, "#EXT-X-ENDLIST").isEmpty, "\(still.status) \(still.text)")
            await platform.shutdown()
        }

        @Test("caching and CORS on a live stream's HLS: the playlist (plain and a blocking reload already satisfied) is Cache-Control: no-cache, init.mp4, a segment and a part are Cache-Control: public, max-age=60, each 200 with Access-Control-Allow-Origin: *; OPTIONS on the playlist answers 204 with Access-Control-Allow-Origin: *, GET in Access-Control-Allow-Methods and Authorization in Access-Control-Allow-Headers; a refusal (401, no token) carries Access-Control-Allow-Origin too")
        func cachingAndCORS() async throws {
            let platform = try await LocalPlatform.start()
            let pcast = try await client(platform)
            let (publisher, media) = try await publishForHLS(pcast, token: try platform.token(.publish, capabilities: ["streaming"]))
            let base = "\(platform.httpURL)/hls/\(publisher.streamId)"
            let token = try platform.token(.stream, originStreamId: publisher.streamId, capabilities: ["streaming"])
            let text = try await playlist("\(base)/index.m3u8?token=\(percentEncoded(token))") {
                tagLines($0, "#EXTINF").count >= 2 && !tagLines($0, "#EXT-X-PART:").isEmpty
            }
            let segment = try #require(text.split(separator: "\n").last { $0.hasPrefix("seg") }.map(fileName))
            let segmentNumber = try #require(Int(segment.dropFirst(3).dropLast(4)))
            let partLine = try #require(tagLines(text, "#EXT-X-PART:").last)
            let part = try #require(partLine.split(separator: "\"").dropFirst().first.map(fileName))

            let cases: [(file: String, cacheControl: String)] = [
                ("index.m3u8", "no-cache"), ("index.m3u8?_HLS_msn=\(segmentNumber)", "no-cache"),
                ("init.mp4", "public, max-age=60"), (segment, "public, max-age=60"), (part, "public, max-age=60"),
            ]
            for (file, cacheControl) in cases {
                let (data, response) = try await httpGet("\(base)/\(file)", bearer: token)
                #expect(response.statusCode == 200 && !data.isEmpty, "\(file): \(response.statusCode)")
                #expect(responseHeader(response, "Cache-Control") == cacheControl, "\(file): \(String(describing: responseHeader(response, "Cache-Control")))")
                #expect(responseHeader(response, "Access-Control-Allow-Origin") == "*", "\(file): \(String(describing: responseHeader(response, "Access-Control-Allow-Origin")))")
            }

            let preflight = try curlRequest("OPTIONS", "\(base)/index.m3u8", contentType: nil, token: nil, body: nil)
            let head = preflight.headers.lowercased()
            #expect(preflight.status == 204, "OPTIONS: \(preflight.status)")
            #expect(head.contains("access-control-allow-origin: *"), "\(preflight.headers)")
            #expect(head.contains("access-control-allow-methods: get"), "\(preflight.headers)")
            #expect(head.contains("access-control-allow-headers: authorization"), "\(preflight.headers)")
            let refused = try curlRequest("GET", "\(base)/index.m3u8", contentType: nil, token: nil, body: nil)
            #expect(refused.status == 401 && refused.headers.lowercased().contains("access-control-allow-origin: *"), "\(refused.status) \(refused.headers)")

            await publisher.stop()
            await media.stop()
            await pcast.stop()
            await platform.shutdown()
        }

        @Test("an ended stream's playlist stays served after the end: once the stream is no longer live (WHEP: 404) and its playlist ends with EXT-X-ENDLIST, new requests for it by stream id and by channel alias are 200 with EXT-X-ENDLIST and no preload hint, and its init.mp4 and every listed segment are still 200 (the 30 s retention itself is not waited for)")
        func endedPlaylistKept() async throws {
            let platform = try await LocalPlatform.start()
            let pcast = try await client(platform)
            let (publisher, media) = try await publishForHLS(pcast, token: try platform.token(.publish, capabilities: ["streaming"]), tags: ["channelAlias:kept-room"])
            let streamId = publisher.streamId
            let byId = "\(platform.httpURL)/hls/\(streamId)"
            let token = try platform.token(.stream, originStreamId: streamId, capabilities: ["streaming"])
            _ = try await playlist("\(byId)/index.m3u8?token=\(percentEncoded(token))") { tagLines($0, "#EXTINF").count >= 2 }

            await publisher.stop()
            await media.stop()
            let ended = try await playlist("\(byId)/index.m3u8?token=\(percentEncoded(token))", timeout: .seconds(10)) { $0.hasSuffix("#EXT-X-ENDLIST\n") }
            // The stream itself is over: a WebRTC viewer finds nothing live.
            let whep = "\(platform.httpURL)/whep/\(streamId)"
            let viewer = try platform.token(.stream, originStreamId: streamId)
            let offer = browserOffer(direction: "recvonly")
            #expect(await eventually { (try? curlRequest("POST", whep, token: viewer, body: offer))?.status == 404 }, "the stream is still live")

            let channelToken = try platform.token(.stream, tag: .channelAlias("kept-room"), capabilities: ["streaming"])
            for (url, bearer) in [("\(byId)/index.m3u8", token), ("\(platform.httpURL)/hls/kept-room/index.m3u8", channelToken)] {
                let reply = try await hlsGet(url, bearer: bearer)
                #expect(reply.status == 200 && reply.text.hasSuffix("#EXT-X-ENDLIST\n"), "\(url) after the end: \(reply.status) \(reply.text)")
                #expect(tagLines(reply.text, "#EXT-X-PRELOAD-HINT").isEmpty, "\(url): \(reply.text)")
            }
            let segments = ended.split(separator: "\n").filter { $0.hasPrefix("seg") }.map(fileName)
            #expect(!segments.isEmpty, "\(ended)")
            for file in ["init.mp4"] + segments {
                let (data, response) = try await httpGet("\(byId)/\(file)", bearer: token)
                #expect(response.statusCode == 200 && !data.isEmpty, "\(file) after the end: \(response.statusCode)")
            }
            await pcast.stop()
            await platform.shutdown()
        }
    }
}

extension ManyClients {
    @Suite("Live HLS: streams packaged at once on a node", .serialized)
    struct HLSPresentationLimitTests {
        @Test("a node packages at most 64 streams at once: with 64 WHIP streams published with 'streaming' (each packaged from its publish: the platform's session subscribes to all 64), a player asking for a 65th live stream gets 503 naming the limit of 64, with Retry-After and Access-Control-Allow-Origin: *")
        func presentationLimit() async throws {
            var relay = RelayConfiguration()
            // The WHIP peers never connect: their streams stay live for the test.
            relay.webRTCConnectTimeout = .seconds(600)
            let platform = try await LocalPlatform.start(relayConfiguration: relay)
            let streaming = try platform.token(.publish, capabilities: ["streaming"])
            for index in 0..<64 {
                let created = try curlRequest("POST", "\(platform.httpURL)/whip/packaged-\(index)", token: streaming,
                                            body: offerWithSSRCs(from: 10_000 + 10 * index))
                #expect(created.status == 201, "stream \(index): \(created.status) \(created.body)")
            }
            // Each packaged stream is subscribed to by the platform's own session: nobody else subscribes here.
            #expect(await eventually(.seconds(90)) { platform.relay.statistics().subscribers >= 64 },
                    "\(platform.relay.statistics().subscribers) of 64 streams packaged")

            let extra = try curlRequest("POST", "\(platform.httpURL)/whip/one-more", token: try platform.token(.publish),
                                      body: offerWithSSRCs(from: 20_000))
            #expect(extra.status == 201, "\(extra.status) \(extra.body)")
            let player = try platform.token(.stream, tag: .channelAlias("one-more"), capabilities: ["streaming"])
            let (data, response) = try await httpGet("\(platform.httpURL)/hls/one-more/index.m3u8", bearer: player)
            let text = String(decoding: data, as: UTF8.self)
            #expect(response.statusCode == 503, "\(response.statusCode) \(text)")
            #expect(text.contains("limit of 64"), "\(text)")
            #expect(responseHeader(response, "Retry-After") != nil)
            #expect(responseHeader(response, "Access-Control-Allow-Origin") == "*")
            await platform.shutdown()
        }
    }
}
