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

        @Test("each WHIP OPTIONS answer carries fresh credentials for every TURN server; coturn allocates with them and refuses a forged or expired one")
        func coturnAcceptsMintedCredentials() async throws {
            let coturn = try CoturnServer.start(secret: "turn-shared-secret")
            defer { coturn.stop() }
            let servers = ["turn:127.0.0.1:\(coturn.port)?transport=udp", "turns:turn.example:443?transport=tcp"]
            let platform = try await LocalPlatform.start { configuration in
                var turn = TURNSettings(secret: coturn.secret, servers: servers)
                turn.lifetime = 600
                configuration.turn = turn
            }
            let first = try curlRequest("OPTIONS", platform.httpURL + "/whip/turn-room", contentType: nil, token: nil, body: nil)
            let links = turnLinks(first.headers)
            #expect(links.map(\.url) == servers, "\(first.headers)")
            let credential = try #require(links.first)
            let expiry = try #require(credential.username.split(separator: ":").first.flatMap { Int($0) })
            let now = Int(Date().timeIntervalSince1970)
            #expect((now + 590)...(now + 610) ~= expiry, "expiry \(expiry), now \(now)")
            // Both servers share one credential per answer; the next answer gets another.
            #expect(Set(links.map(\.username)).count == 1)
            let second = turnLinks(try curlRequest("OPTIONS", platform.httpURL + "/whip/turn-room", contentType: nil, token: nil, body: nil).headers)
            #expect(second.first?.username != credential.username)

            #expect(try coturn.allocates(username: credential.username, password: credential.credential), "coturn refused the minted credential")
            #expect(try !coturn.allocates(username: credential.username, password: "Zm9yZ2VkIGNyZWRlbnRpYWw="), "coturn took a forged password")
            let expired = TURNCredential.mint(secret: coturn.secret, lifetime: -60, now: Date(), label: "late")
            #expect(try !coturn.allocates(username: expired.username, password: expired.password), "coturn took an expired credential")
            await platform.shutdown()
        }
    }
}
