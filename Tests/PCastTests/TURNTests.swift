import Foundation
import PCastNode
@testable import PCastServer
import PCastTestSupport
import Testing

/// The `Link: <turn:…>; rel="ice-server"; username="…"; credential="…"` values of an answer's headers.
func turnLinks(_ headers: String) -> [(url: String, username: String, credential: String)] {
    headers.split(separator: "\r\n").compactMap { line -> (String, String, String)? in
        guard line.lowercased().hasPrefix("link:"), line.contains("rel=\"ice-server\""),
              let open = line.firstIndex(of: "<"), let close = line.firstIndex(of: ">") else { return nil }
        func parameter(_ name: String) -> String? {
            guard let range = line.range(of: "\(name)=\"") else { return nil }
            return line[range.upperBound...].split(separator: "\"", maxSplits: 1).first.map(String.init)
        }
        guard let username = parameter("username"), let credential = parameter("credential") else { return nil }
        return (String(line[line.index(after: open)..<close]), username, credential)
    }
}

extension OneAtATime {
    /// coturn and its client as processes: apart from the main group.
    @Suite("TURN with time-limited credentials: minted per WHIP/WHEP session, checked by coturn", .serialized)
    struct TURNTests {
        @Test("a credential is <expiry>:<label> and base64(HMAC-SHA1(secret, username)), as coturn's use-auth-secret computes it (vector from Python's hmac)")
        func mintedCredential() {
            let credential = TURNCredential.mint(secret: "shared-secret", lifetime: 86_400, now: Date(timeIntervalSince1970: 1_700_000_000), label: "pcast-abc")
            #expect(credential.username == "1700086400:pcast-abc")
            #expect(credential.password == "5NMxPzSNVfLY3Yqwui9R/ifo/wg=")
        }

        @Test("a WHIP OPTIONS with a publish token gets fresh credentials for every TURN server in each answer, one without a token or with a forged one gets none; coturn allocates with minted credentials and refuses a forged or expired one")
        func coturnAcceptsMintedCredentials() async throws {
            let coturn = try CoturnServer.start(secret: "turn-shared-secret")
            defer { coturn.stop() }
            let servers = ["turn:127.0.0.1:\(coturn.port)?transport=udp", "turns:turn.example:443?transport=tcp"]
            let platform = try await LocalPlatform.start { configuration in
                var turn = TURNSettings(secret: coturn.secret, servers: servers)
                turn.lifetime = 600
                configuration.turn = turn
            }
            // Credentials are a relay through the operator's TURN server: only for a caller the
            // session itself would admit.
            let anonymous = try curlRequest("OPTIONS", platform.httpURL + "/whip/turn-room", contentType: nil, token: nil, body: nil)
            #expect(anonymous.status == 204 && turnLinks(anonymous.headers).isEmpty, "\(anonymous.headers)")
            let forged = try curlRequest("OPTIONS", platform.httpURL + "/whip/turn-room", contentType: nil, token: "DIGEST:eyJ9", body: nil)
            #expect(turnLinks(forged.headers).isEmpty, "\(forged.headers)")
            let viewerToken = try curlRequest("OPTIONS", platform.httpURL + "/whip/turn-room", contentType: nil,
                                              token: try platform.token(.stream, tag: .channelAlias("turn-room")), body: nil)
            #expect(turnLinks(viewerToken.headers).isEmpty, "a stream token got TURN credentials for WHIP: \(viewerToken.headers)")
            let publishToken = try platform.token(.publish)
            let first = try curlRequest("OPTIONS", platform.httpURL + "/whip/turn-room", contentType: nil, token: publishToken, body: nil)
            let links = turnLinks(first.headers)
            #expect(links.map(\.url) == servers, "\(first.headers)")
            let credential = try #require(links.first)
            let expiry = try #require(credential.username.split(separator: ":").first.flatMap { Int($0) })
            let now = Int(Date().timeIntervalSince1970)
            #expect((now + 590)...(now + 610) ~= expiry, "expiry \(expiry), now \(now)")
            // Both servers share one credential per answer; the next answer gets another.
            #expect(Set(links.map(\.username)).count == 1)
            let second = turnLinks(try curlRequest("OPTIONS", platform.httpURL + "/whip/turn-room", contentType: nil, token: publishToken, body: nil).headers)
            #expect(second.first?.username != credential.username)

            #expect(try coturn.allocates(username: credential.username, password: credential.credential), "coturn refused the minted credential")
            #expect(try !coturn.allocates(username: credential.username, password: "Zm9yZ2VkIGNyZWRlbnRpYWw="), "coturn took a forged password")
            let expired = TURNCredential.mint(secret: coturn.secret, lifetime: -60, now: Date(), label: "late")
            #expect(try !coturn.allocates(username: expired.username, password: expired.password), "coturn took an expired credential")
            await platform.shutdown()
        }
    }
}
