import Foundation
@testable import PCast
import PCastNode
@testable import PCastServer
import PCastTestSupport
import Testing

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

        #expect(try curlRequest("GET", base + "/admin/nodes", contentType: nil, token: nil, body: nil).status == 401)
        #expect(try curlRequest("GET", base + "/admin/api/audit", contentType: nil, token: plainToken, body: nil).status == 401)
        #expect(try curlRequest("GET", base + "/admin/nodes", contentType: nil, token: adminToken, body: nil).status == 200)

        let sdk = try await client(platform)
        let media = try await stampedMedia()
        let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media)
        let viewer = try await sdk.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
        let ended = try curlRequest("POST", basic + "/admin/streams/\(publisher.streamId)/end", contentType: "application/json",
                                    token: nil, body: #"{"description": "terms of service"}"#)
        #expect(ended.status == 200, "\(ended.body)")
        #expect(await eventually(.seconds(10)) { viewer.endReason != nil })
        if case .remote(let reason, let description)? = viewer.endReason {
            #expect(reason == .censored && description == "terms of service")
        } else {
            Issue.record("the viewer's stream ended as \(String(describing: viewer.endReason))")
        }
        let unknown = try curlRequest("POST", basic + "/admin/streams/stream-nowhere/end", contentType: nil, token: nil, body: nil)
        #expect(unknown.status == 404)

        let listed = try curlRequest("GET", base + "/admin/api/audit?limit=10", contentType: nil, token: adminToken, body: nil)
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
