import Foundation
@testable import PCast
import PCastNode
@testable import PCastServer
import PCastTestSupport
import Testing

/// `body` (which blocks: it waits for a child process) on a thread of its own, so that the
/// cooperative threads stay free for the platform it talks to (on two cores, two tests blocking
/// both left the platform unable to answer).
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}

/// ``curlRequest(_:_:contentType:token:body:)`` off the cooperative pool (see ``offPool(_:)``).
func adminRequest(_ method: String, _ url: String, contentType: String? = nil, token: String?, body: String?) async throws
    -> (status: Int, contentType: String, body: String, headers: String) {
    try await offPool { try curlRequest(method, url, contentType: contentType, token: token, body: body) }
}

/// Issue 44, item 2: who did what through the admin routes, and who was refused.
@Suite("Admin audit log: actions and refused admin requests, with who and from where, kept in the platform's store")
struct AdminAuditTests {
    @Test("a request without admin credentials (none, a token without the admin capability) is refused 401 and logged as anonymous from its address; ending a stream with HTTP Basic ends it at its viewer as censored and is logged as admin's, done; ending an unknown stream is logged as failed; GET /admin/api/audit (an admin token) lists them newest first")
    func actionsAndRefusals() async throws {
        let platform = try await LocalPlatform.start()
        let base = platform.httpURL
        let credentials = [platform.configuration.applicationId, platform.configuration.secret]
            .map { $0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0 }.joined(separator: ":")
        let basic = base.replacingOccurrences(of: "http://", with: "http://\(credentials)@")
        let adminToken = try platform.token(.auth, capabilities: ["admin"])
        let plainToken = try platform.token(.auth)

        #expect(try await adminRequest("GET", base + "/admin/nodes", contentType: nil, token: nil, body: nil).status == 401)
        #expect(try await adminRequest("GET", base + "/admin/api/audit", contentType: nil, token: plainToken, body: nil).status == 401)
        #expect(try await adminRequest("GET", base + "/admin/nodes", contentType: nil, token: adminToken, body: nil).status == 200)

        let sdk = try await client(platform)
        let media = try await stampedMedia()
        let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media)
        let viewer = try await sdk.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
        let ended = try await adminRequest("POST", basic + "/admin/streams/\(publisher.streamId)/end", contentType: "application/json",
                                    token: nil, body: #"{"description": "terms of service"}"#)
        #expect(ended.status == 200, "\(ended.body)")
        #expect(await eventually(.seconds(10)) { viewer.endReason != nil })
        if case .remote(let reason, let description)? = viewer.endReason {
            #expect(reason == .censored && description == "terms of service")
        } else {
            Issue.record("the viewer's stream ended as \(String(describing: viewer.endReason))")
        }
        let unknown = try await adminRequest("POST", basic + "/admin/streams/stream-nowhere/end", contentType: nil, token: nil, body: nil)
        #expect(unknown.status == 404)

        let listed = try await adminRequest("GET", base + "/admin/api/audit?limit=10", contentType: nil, token: adminToken, body: nil)
        #expect(listed.status == 200 && listed.contentType.hasPrefix("application/json"), "\(listed.status) \(listed.body)")
        struct Listed: Decodable { var entries: [AuditEntry] }
        let entries = try JSONDecoder().decode(Listed.self, from: Data(listed.body.utf8)).entries
        let expected: [(actor: String, action: String, outcome: String)] = [
            ("admin", "POST /admin/streams/stream-nowhere/end", "failed"),
            ("admin", "POST /admin/streams/\(publisher.streamId)/end", "done"),
            ("anonymous", "GET /admin/api/audit", "refused"),
            ("anonymous", "GET /admin/nodes", "refused"),
        ]
        #expect(entries.map { ($0.actor, $0.action, $0.outcome) }.elementsEqual(expected) { $0 == $1 }, "\(entries)")
        #expect(entries.allSatisfy { $0.remoteAddress == "127.0.0.1" && $0.nodeId == platform.configuration.nodeId })
        #expect(entries.first { $0.outcome == "done" }?.detail.contains("terms of service") == true)
        let sequences = entries.compactMap(\.sequence)
        #expect(sequences.count == 4 && sequences == sequences.sorted(by: >), "newest first: \(sequences)")

        await viewer.stop()
        await publisher.stop()
        await sdk.stop()
        await media.stop()
        await platform.shutdown()
    }

    @Test("refused requests reach the log 20 per 10 s at most: the rest are counted, and the next one logged says how many were not")
    func refusalsAreThrottled() {
        let throttle = AuditThrottle()
        let start = ContinuousClock.now
        let admitted = (0..<30).map { throttle.admit(now: start + .milliseconds($0)) }
        #expect(admitted.prefix(20).allSatisfy { $0 == 0 })
        #expect(admitted.suffix(10).allSatisfy { $0 == nil })
        #expect(throttle.admit(now: start + .seconds(11)) == 10, "the next window's first says how many were left out")
        #expect(throttle.admit(now: start + .seconds(11) + .milliseconds(1)) == 0)
    }
}

@Suite("Admin API: the streams a node has, for the console and for scripts")
struct AdminStreamsAPITests {
    @Test("GET /admin/api/streams (an admin token; 401 without) lists an SDK simulcast publisher (kind sdk, its tags, H.264 with layers h, m and l at their sizes, two SDK viewers) and an RTMP push from ffmpeg (kind rtmp, H.264 and Opus), oldest first, each on this node")
    func streams() async throws {
        let platform = try await LocalPlatform.start(rtmpPort: 0)
        let port = try #require(platform.rtmpPort)
        let base = platform.httpURL
        #expect(try await adminRequest("GET", base + "/admin/api/streams", contentType: nil, token: nil, body: nil).status == 401)

        let sdk = try await client(platform)
        let media = try await stampedHDMedia()
        let publisher = try await sdk.publish(streamToken: try platform.token(.publish, capabilities: ["multi-bitrate"], applyTags: ["channelAlias:console"]),
                                              mediaStream: media)
        let viewers = [try await sdk.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId)),
                       try await sdk.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))]
        let ffmpeg = try ChildProcess.spawn(try executable("ffmpeg"), [
            "-hide_banner", "-loglevel", "error", "-re", "-t", "20", "-i", try await TestMedia.clip720p(),
            "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-g", "25", "-c:a", "copy",
            "-f", "flv", "rtmp://127.0.0.1:\(port)/live/\(try platform.token(.publish, applyTags: ["channelAlias:pushed"]))",
        ], environment: ProcessInfo.processInfo.environment)
        defer { ffmpeg.stop() }

        struct Listed: Decodable, Sendable { var nodeId: String; var streams: [StreamSummary] }
        let token = try platform.token(.auth, capabilities: ["admin"])
        var listed: Listed?
        for _ in 0..<80 where listed?.streams.count != 2 {
            let reply = try await adminRequest("GET", base + "/admin/api/streams", token: token, body: nil)
            listed = reply.status == 200 ? try? JSONDecoder().decode(Listed.self, from: Data(reply.body.utf8)) : nil
            if listed?.streams.count != 2 { try await Task.sleep(for: .milliseconds(250)) }
        }
        #expect(listed?.streams.count == 2, "\(String(describing: listed))")
        let streams = listed?.streams ?? []
        #expect(streams.map(\.streamId).first == publisher.streamId, "oldest first")
        let published = try #require(streams.first { $0.streamId == publisher.streamId })
        #expect(published.publisher.kind == "sdk" && published.nodeId == platform.configuration.nodeId && !published.pulled)
        #expect(published.tags.contains("channelAlias:console") && published.publishType == "live")
        let layers = published.tracks.filter { $0.kind == "video" }
        #expect(layers.map(\.rid) == ["h", "m", "l"] && layers.allSatisfy { $0.codec == "H264" }, "\(published.tracks)")
        #expect(layers.map(\.width) == [1280, 640, 320] && layers.map(\.height) == [720, 360, 180])
        #expect(published.viewers == .init(total: 2, sdk: 2, webrtc: 0), "\(published.viewers)")
        let pushed = try #require(streams.first { $0.streamId != publisher.streamId })
        #expect(pushed.publisher.kind == "rtmp" && pushed.tags.contains("channelAlias:pushed"), "\(pushed)")
        #expect(Set(pushed.tracks.map(\.codec)) == ["H264", "OPUS"], "\(pushed.tracks)")

        ffmpeg.stop()
        for viewer in viewers { await viewer.stop() }
        await publisher.stop()
        await sdk.stop()
        await media.stop()
        await platform.shutdown()
    }
}
