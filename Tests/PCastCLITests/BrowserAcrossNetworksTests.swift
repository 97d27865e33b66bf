import Foundation
import PCastTestSupport
import Testing

extension OneAtATime {
    /// A user's laptop on another network: headless Chromium in the client namespace of a
    /// ``NATTopology`` (behind the router's NAT, reaching the server only at 198.18.40.1), the
    /// server a `pcast serve --host ::` over TLS with a certificate of a test CA that the browser's
    /// certificate store trusts. Chromium and coturn as processes: one test at a time.
    @Suite("A browser on another network, behind NAT: the page over HTTPS, WHIP and WHEP over UDP, over ICE-TCP when UDP is dropped, over TURN/TLS on 443 when only that gets through", .serialized)
    struct BrowserAcrossNetworksTests {
        static let turnSecret = "browser-turn-secret"

        struct Setup {
            let certificates: TestCertificates
            let topology: NATTopology
            let server: ServeProcess
            let coturn: CoturnServer?
            let collector: ReportCollector

            /// `turn`: coturn over TLS on 198.18.40.1:443, told to WHIP/WHEP clients with minted credentials.
            static func start(turn: Bool) async throws -> Setup {
                let certificates = try TestCertificates.make()
                let topology: NATTopology
                do { topology = try NATTopology.create() } catch {
                    certificates.remove()
                    throw error
                }
                var coturn: CoturnServer?
                var extra = ["--host", "::", "--no-rtmp", "--tls-certificate", certificates.leaf.certificate, "--tls-key", certificates.leaf.key]
                do {
                    if turn {
                        #expect(TCPProbe.bindable(port: 443, address: "0.0.0.0"), "port 443 is taken on this machine: the TURN/TLS test runs coturn there")
                        coturn = try CoturnServer.startTLS(secret: BrowserAcrossNetworksTests.turnSecret, address: topology.serverIPv4,
                                                           certificate: certificates.leaf.certificate, key: certificates.leaf.key)
                        extra += ["--turn-secret", BrowserAcrossNetworksTests.turnSecret,
                                  "--turn-server", "turns:\(topology.serverIPv4):443?transport=tcp"]
                    }
                    let server = try await ServeProcess.start(extra)
                    let collector = try ReportCollector(namespace: topology.client)
                    return Setup(certificates: certificates, topology: topology, server: server, coturn: coturn, collector: collector)
                } catch {
                    coturn?.stop()
                    topology.remove()
                    certificates.remove()
                    throw error
                }
            }

            /// The relay's ICE-TCP port, from the serve line (`ice-tcp [::]:PORT`).
            var iceTCPPort: UInt16? {
                guard let range = server.output.range(of: "ice-tcp ") else { return nil }
                let address = server.output[range.upperBound...].prefix { $0 != "," && $0 != "\n" }
                return address.split(separator: ":").last.flatMap { UInt16($0) }
            }

            /// Opens the platform's page by the name pcast.test (the server's address for the
            /// browser), publishing `room` with WHIP and watching it with WHEP; `relayOnly`: TURN only.
            func openBrowser(room: String, relayOnly: Bool = false) throws -> HeadlessChromium {
                var query = URLComponents(string: "https://pcast.test:\(server.httpPort)/")!
                query.queryItems = [
                    URLQueryItem(name: "publish", value: room),
                    URLQueryItem(name: "publishToken", value: try server.token(["--type", "publish"])),
                    URLQueryItem(name: "watch", value: room),
                    URLQueryItem(name: "token", value: try server.token(["--type", "stream", "--channel-alias", room])),
                    URLQueryItem(name: "report", value: collector.url),
                ] + (relayOnly ? [URLQueryItem(name: "relay", value: "1")] : [])
                return try HeadlessChromium.open(query.url!.absoluteString, trusting: certificates.authority, namespace: topology.client,
                                                 hosts: ["pcast.test": topology.serverIPv4])
            }

            /// What curl in the client namespace gets from `path` of the server by name over HTTPS,
            /// trusting the test CA: the HTTP status, 0 when it could not connect.
            func curlFromClient(_ path: String) throws -> Int {
                let command = try topology.command(in: topology.client, try executable("curl"), [
                    "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--cacert", certificates.authority,
                    "--resolve", "pcast.test:\(server.httpPort):\(topology.serverIPv4)", "https://pcast.test:\(server.httpPort)\(path)",
                ])
                return Int(try runCommand(command.0, command.1).stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
            }

            /// Waits for the browser to decode `frames` frames of its own stream; both panels' latest reports.
            func decoded(_ frames: Double, by browser: HeadlessChromium, what: String) async throws -> (watched: [String: any Sendable], published: [String: any Sendable]) {
                let seen = await eventually(.seconds(45)) {
                    collector.latest("watch").map { $0.number("framesDecoded") >= frames } ?? false
                }
                let errors = collector.allReports.compactMap { $0["error"] as? String }
                #expect(seen, "\(what): Chromium decoded \(collector.latest("watch")?.number("framesDecoded") ?? 0) frames; errors \(errors); serve: \(server.output.suffix(1500)); Chromium: \(browser.log.suffix(3000))")
                guard seen else { throw CLITestFailure("\(what): the browser decoded too few frames") }
                return (try #require(collector.latest("watch")), try #require(collector.latest("publish")))
            }

            func stop() {
                collector.close()
                server.stop()
                coturn?.stop()
                topology.remove()
                certificates.remove()
            }
        }

        @Test("over UDP through the NAT: the page loads over HTTPS by name, WHIP and WHEP connect (AES-GCM), the browser decodes its own 640×480 H.264 over UDP")
        func overUDP() async throws {
            let setup = try await Setup.start(turn: false)
            defer { setup.stop() }
            #expect(try setup.curlFromClient("/") == 200, "the page is not served over HTTPS to the client host")
            let probe = try setup.topology.command(in: setup.topology.client, try executable("curl"),
                                                   ["-s", "--max-time", "5", "-H", "Content-Type: text/plain", "--data", "{\"panel\":\"probe\"}", setup.collector.url])
            _ = try runCommand(probe.0, probe.1)
            #expect(setup.collector.latest("probe") != nil, "the client host cannot report to the collector on its loopback")
            let browser = try setup.openBrowser(room: "nat-udp")
            defer { browser.close() }
            let (watched, published) = try await setup.decoded(30, by: browser, what: "over UDP")
            #expect(watched.string("transport") == "udp" && published.string("transport") == "udp", "watch \(watched), publish \(published)")
            #expect(watched.string("connectionState") == "connected" && watched.string("srtpCipher") == "SRTP_AEAD_AES_128_GCM", "\(watched)")
            #expect(watched.number("width") == 640 && watched.number("height") == 480, "\(watched)")
            // The publish panel reports every second or so: its latest report may be older than
            // the watch panel's 30th frame (29 encoded was seen), so wait for a later one.
            #expect(await eventually(.seconds(10)) { (setup.collector.latest("publish")?.number("framesEncoded") ?? 0) >= 30 },
                    "\(published); latest \(String(describing: setup.collector.latest("publish")))")
        }

        @Test("with UDP dropped at the router: both sessions fall back to the relay's passive TCP candidate (ICE-TCP through the NAT) and the browser decodes its own video")
        func overICETCP() async throws {
            let setup = try await Setup.start(turn: false)
            defer { setup.stop() }
            try setup.topology.dropUDP()
            let browser = try setup.openBrowser(room: "nat-tcp")
            defer { browser.close() }
            let (watched, published) = try await setup.decoded(30, by: browser, what: "over ICE-TCP")
            #expect(watched.string("transport") == "tcp" && published.string("transport") == "tcp", "watch \(watched), publish \(published)")
            #expect(watched.string("connectionState") == "connected" && watched.string("srtpCipher") == "SRTP_AEAD_AES_128_GCM", "\(watched)")
        }

        @Test("with UDP and the relay's TCP port dropped and iceTransportPolicy \"relay\": the page's OPTIONS gets minted TURN credentials, both sessions go through coturn over TLS on 443, the browser decodes its own video")
        func overTURNTLS() async throws {
            let setup = try await Setup.start(turn: true)
            defer { setup.stop() }
            let tcpPort = try #require(setup.iceTCPPort, "no ice-tcp port in: \(setup.server.output)")
            try setup.topology.dropUDP()
            try setup.topology.dropTCP(port: tcpPort)
            let browser = try setup.openBrowser(room: "nat-turn", relayOnly: true)
            defer { browser.close() }
            let (watched, published) = try await setup.decoded(30, by: browser, what: "over TURN/TLS")
            #expect(watched.string("transport") == "turn/tls" && published.string("transport") == "turn/tls", "watch \(watched), publish \(published)")
            #expect(watched.string("turnServer").contains(":443"), "\(watched)")
            #expect(watched.string("connectionState") == "connected" && watched.string("srtpCipher") == "SRTP_AEAD_AES_128_GCM", "\(watched)")
        }
    }
}
