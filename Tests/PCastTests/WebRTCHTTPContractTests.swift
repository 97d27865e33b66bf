import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import PCastNode
import PCastProtocol
import PCastRelay
import PCastServer
import PCastTestSupport
import Testing

/// A header's value in curl's dump of a response head (`curlRequest`'s `headers`), its name
/// matched without regard to case.
private func dumpedHeader(_ name: String, in head: String) -> String? {
    for line in head.split(whereSeparator: \.isNewline) {
        let parts = line.split(separator: ":", maxSplits: 1)
        if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces).lowercased() == name.lowercased() {
            return parts[1].trimmingCharacters(in: .whitespaces)
        }
    }
    return nil
}

extension OneAtATime {
    @Suite("WHIP and WHEP HTTP contract: trickle ICE, preflight, recording refusal and the built-in page", .serialized)
    struct WebRTCHTTPContractTests {
        @Test("trickle ICE and preflight on WHIP and WHEP sessions: PATCH with application/trickle-ice-sdpfrag on a session's Location answers 204 with CORS, with another Content-Type 415 (problem+json), on a deleted session 404; OPTIONS on a session answers 204 with Accept-Patch: application/trickle-ice-sdpfrag and CORS; OPTIONS on /whip/<name> and /whep/<name> answers 204 with Accept-Post: application/sdp and CORS (any origin; POST, DELETE, PATCH and OPTIONS; Authorization and Content-Type allowed; Location exposed)")
        func patchAndOptions() async throws {
            let platform = try await LocalPlatform.start()
            let publishToken = try platform.token(.publish)
            let whip = try curlRequest("POST", platform.httpURL + "/whip/trickle-room", token: publishToken, body: browserOffer())
            #expect(whip.status == 201, "WHIP: \(whip.status) \(whip.body)")
            let whipLocation = try #require(dumpedHeader("Location", in: whip.headers), "no Location: \(whip.headers)")
            let viewToken = try platform.token(.stream, tag: .channelAlias("trickle-room"))
            let whep = try curlRequest("POST", platform.httpURL + "/whep/trickle-room", token: viewToken,
                                       body: browserOffer(direction: "recvonly", iceUfrag: "Vw7y"))
            #expect(whep.status == 201, "WHEP: \(whep.status) \(whep.body)")
            let whepLocation = try #require(dumpedHeader("Location", in: whep.headers), "no Location: \(whep.headers)")
            #expect(whipLocation.hasPrefix("/whip/trickle-room/") && whepLocation.hasPrefix("/whep/trickle-room/"), "\(whipLocation) \(whepLocation)")

            // A trickled candidate, as a browser sends it (RFC 8840 fragment).
            let fragment = "a=ice-ufrag:Fq3x\r\na=ice-pwd:nd2pQ4mPTYgXzPZ2g2lCcx1N\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"
                + "a=candidate:1 1 UDP 2122252543 192.0.2.10 50000 typ host\r\n"
            // The viewer's session first: deleting the publisher's ends the stream and with it the viewer's.
            let sessions = [(whepLocation, viewToken), (whipLocation, publishToken)]
            for (location, token) in sessions {
                let patched = try curlRequest("PATCH", platform.httpURL + location, contentType: "application/trickle-ice-sdpfrag", token: token, body: fragment)
                #expect(patched.status == 204, "PATCH \(location): \(patched.status) \(patched.body)")
                #expect(dumpedHeader("Access-Control-Allow-Origin", in: patched.headers) == "*", "PATCH \(location): \(patched.headers)")
                let wrongType = try curlRequest("PATCH", platform.httpURL + location, contentType: "application/sdp", token: token, body: fragment)
                #expect(wrongType.status == 415 && wrongType.contentType.hasPrefix("application/problem+json"), "PATCH \(location) as SDP: \(wrongType)")
                let preflight = try curlRequest("OPTIONS", platform.httpURL + location, contentType: nil, token: nil, body: nil)
                #expect(preflight.status == 204, "OPTIONS \(location): \(preflight.status)")
                #expect(dumpedHeader("Accept-Patch", in: preflight.headers) == "application/trickle-ice-sdpfrag", "OPTIONS \(location): \(preflight.headers)")
                #expect(dumpedHeader("Access-Control-Allow-Origin", in: preflight.headers) == "*", "OPTIONS \(location): \(preflight.headers)")
            }

            for kind in ["whip", "whep"] {
                let preflight = try curlRequest("OPTIONS", "\(platform.httpURL)/\(kind)/trickle-room", contentType: nil, token: nil, body: nil)
                #expect(preflight.status == 204, "OPTIONS /\(kind): \(preflight.status)")
                #expect(dumpedHeader("Accept-Post", in: preflight.headers) == "application/sdp", "OPTIONS /\(kind): \(preflight.headers)")
                #expect(dumpedHeader("Access-Control-Allow-Origin", in: preflight.headers) == "*", "OPTIONS /\(kind): \(preflight.headers)")
                let methods = dumpedHeader("Access-Control-Allow-Methods", in: preflight.headers) ?? ""
                #expect(["POST", "DELETE", "PATCH", "OPTIONS"].allSatisfy { methods.contains($0) }, "OPTIONS /\(kind): methods \(methods)")
                let allowed = (dumpedHeader("Access-Control-Allow-Headers", in: preflight.headers) ?? "").lowercased()
                #expect(allowed.contains("authorization") && allowed.contains("content-type"), "OPTIONS /\(kind): headers \(allowed)")
                let exposed = dumpedHeader("Access-Control-Expose-Headers", in: preflight.headers) ?? ""
                #expect(exposed.contains("Location"), "OPTIONS /\(kind): exposed \(exposed)")
            }

            for (location, token) in sessions {
                let deleted = try curlRequest("DELETE", platform.httpURL + location, contentType: nil, token: token, body: nil)
                #expect(deleted.status == 200, "DELETE \(location): \(deleted.status) \(deleted.body)")
                let gone = try curlRequest("PATCH", platform.httpURL + location, contentType: "application/trickle-ice-sdpfrag", token: token, body: fragment)
                #expect(gone.status == 404 && gone.contentType.hasPrefix("application/problem+json"), "PATCH after DELETE \(location): \(gone)")
            }
            await platform.shutdown()
        }

        @Test("on a platform node without a recording service, WHIP ?type=record and ?type=append (with a publish token naming the stream) are refused 501 as problem+json and publish nothing, while the same offer published live is accepted (201)")
        func recordingWithoutRecorder() async throws {
            // The control plane alone: no media services, so no recorder.
            let relay = try Relay(configuration: RelayConfiguration())
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-no-recorder-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let configuration = PlatformConfiguration(applicationId: "pcast-no-recorder", secret: SRTPFreeRandom.secret(), host: "127.0.0.1",
                                                      httpPort: 0, mediaPort: Int(relay.mediaPort), dataDirectory: directory.path)
            let server: PlatformServer
            do {
                server = try await PlatformServer.start(configuration: configuration, relay: relay)
            } catch {
                relay.shutdown()
                throw error
            }
            func publishToken(streamName: String?) throws -> String {
                var builder = DigestTokenBuilder().expiresAt(Date().addingTimeInterval(60)).type(.publish)
                if let streamName { builder = builder.streamName(streamName) }
                return try builder.encode(applicationId: configuration.applicationId, secret: configuration.secret)
            }
            let named = try publishToken(streamName: "no-recorder-show")
            for type in ["record", "append"] {
                let reply = try curlRequest("POST", "\(server.httpURL)/whip/no-recorder-show?type=\(type)", token: named, body: browserOffer())
                #expect(reply.status == 501, "?type=\(type): \(reply.status) \(reply.body)")
                #expect(reply.contentType.hasPrefix("application/problem+json"), "?type=\(type): \(reply.contentType)")
                let problem = try JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as? [String: Any]
                #expect((problem?["status"] as? Int) == 501 && ((problem?["detail"] as? String) ?? "").contains("recording"), "?type=\(type): \(reply.body)")
            }
            #expect(relay.statistics().streams == 0, "a refused recording published a stream")
            let live = try curlRequest("POST", "\(server.httpURL)/whip/no-recorder-show", token: try publishToken(streamName: nil), body: browserOffer())
            #expect(live.status == 201, "live: \(live.status) \(live.body)")
            #expect(relay.statistics().streams == 1)
            await server.shutdown()
            relay.shutdown()
        }

        /// What would make a page load something from another origin: absolute or
        /// protocol-relative addresses, attributes and elements that fetch, CSS imports, module
        /// imports and scripts with attributes (a `src`).
        static let foreignPatterns = [
            #"(?i)\b(https?|wss?|ftp):"#,
            #"["'(`=]\s*//[A-Za-z0-9\[]"#,
            #"(?i)\s(src|href|srcset|poster)\s*="#,
            #"(?i)<(link|img|iframe|frame|object|embed|base|source|track|audio)\b"#,
            #"(?i)(?<!new )\burl\("#,
            #"(?i)@import"#,
            #"\bimport\s*\("#,
            #"(?i)<script\b(?!>)"#,
        ]

        static func foreignReferences(in text: String) -> [String] {
            foreignPatterns.flatMap { pattern -> [String] in
                guard let expression = try? NSRegularExpression(pattern: pattern) else { return ["(invalid pattern \(pattern))"] }
                return expression.matches(in: text, range: NSRange(text.startIndex..., in: text))
                    .compactMap { Range($0.range, in: text).map { String(text[$0]) } }
            }
        }

        @Test("the page at / is Sources/PCastServer/Page/index.html byte for byte, served as text/html, and neither it nor any other file of Sources/PCastServer/Page loads anything from elsewhere: no http:, https:, ws:, wss: or ftp: address, no protocol-relative //host, no src, href, srcset or poster attribute, no link, img, iframe, frame, object, embed, base, source, track or audio element, no CSS url( or @import, no import(), only inline script elements (the same scan finds each of these in a page that loads a CDN script, font and image)")
        func pageLoadsNothingFromElsewhere() async throws {
            let platform = try await LocalPlatform.start()
            let (served, response) = try await httpGet(platform.httpURL + "/")
            await platform.shutdown()
            #expect(response.statusCode == 200)
            #expect(response.value(forHTTPHeaderField: "Content-Type")?.hasPrefix("text/html") == true,
                    "\(String(describing: response.value(forHTTPHeaderField: "Content-Type")))")

            let directory = repositoryRoot.appendingPathComponent("Sources/PCastServer/Page")
            let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
            #expect(files.contains("index.html"), "\(files)")
            let source = try Data(contentsOf: directory.appendingPathComponent("index.html"))
            #expect(served == source, "the page served at / is not Sources/PCastServer/Page/index.html")
            let servedText = String(decoding: served, as: UTF8.self)
            #expect(servedText.contains("<script>"), "the page's script is inline")
            var texts: [(name: String, text: String)] = [("GET /", servedText)]
            for file in files {
                texts.append((file, String(decoding: try Data(contentsOf: directory.appendingPathComponent(file)), as: UTF8.self)))
            }
            for (name, text) in texts {
                let found = Self.foreignReferences(in: text)
                #expect(found.isEmpty, "\(name) loads from elsewhere: \(found)")
            }

            // The scan finds what it looks for.
            let foreign = """
                <script src="https://cdn.example.com/player.js"></script><link rel="stylesheet" href="//fonts.example.net/a.css">
                <style>@import url(theme.css);</style><img src=logo.png>
                """
            let caught = Self.foreignReferences(in: foreign)
            #expect(caught.count >= 6, "\(caught)")
        }
    }
}
