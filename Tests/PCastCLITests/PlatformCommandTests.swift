import Foundation
import PCastTestSupport
import Testing

/// `pcast serve` as a real server process, with `pcast publish` and `pcast subscribe` against it.
@Suite("pcast serve, publish and subscribe")
struct PlatformCommandTests {
    @Test("a stream published with the CLI is subscribed to with the CLI, screenshot of the published size")
    func serveComposeAndWatch() async throws {
        let serve = try await ServeProcess.start()
        defer { serve.stop() }
        let directory = serve.directory, signaling = serve.signaling
        func token(_ extra: [String]) throws -> String { try serve.token(extra) }
        let auth = try token(["--type", "auth"])
        let publish = try token(["--type", "publish", "--channel-alias", "cli"])
        let stream = try token(["--type", "stream", "--channel-alias", "cli"])

        let (publisher, published, streamId) = try await serve.publish(token: publish, auth: auth, [
            "--width", "320", "--height", "180", "--tag", "channelAlias:cli", "--seconds", "30", "--stats"])
        defer { publisher.stop() }
        #expect(!streamId.isEmpty, "pcast publish printed no stream id")

        let shot = directory.appendingPathComponent("shot.png").path
        let watched = try runCommand(try pcastBinary(), [
            "subscribe", "--server", signaling, "--token", stream, "--auth-token", auth,
            "--sink", "null", "--seconds", "3", "--screenshot", shot, "--stats", "--rtc-stats"], timeout: 60)
        #expect(watched.status == 0, "\(watched.stderr)")
        // --stats: a JSON line a second with each track's counters.
        let statistics = watched.lines.compactMap { line -> [String: [String: Double]]? in
            guard line.hasPrefix("{") else { return nil }
            return try? JSONDecoder().decode([String: [String: Double]].self, from: Data(line.utf8))
        }
        #expect(statistics.count >= 2, "\(watched.stdout)")
        #expect((statistics.last?["video"]?["packetsReceived"] ?? 0) > 0 && (statistics.last?["audio"]?["packetsReceived"] ?? 0) > 0, "\(watched.stdout)")
        // --rtc-stats: inbound-rtp entries with frames decoded.
        let inbound: [StatsReport] = watched.lines.compactMap { try? JSONDecoder().decode(StatsReport.self, from: Data($0.utf8)) }
        let decodedVideo = inbound.last?.stats.first { $0.type == "inbound-rtp" && $0.kind == "video" }?.framesDecoded ?? 0
        #expect(decodedVideo > 0, "\(watched.stdout)")
        // pcast publish --stats: outbound-rtp, and the relay's view with a round-trip time.
        let publishedLines = ((try? String(contentsOfFile: published, encoding: .utf8)) ?? "").split(separator: "\n")
        let outbound: [StatsReport] = publishedLines.compactMap { try? JSONDecoder().decode(StatsReport.self, from: Data($0.utf8)) }
        let sentVideo = outbound.last?.stats.first { $0.type == "outbound-rtp" && $0.kind == "video" }?.packetsSent ?? 0
        #expect(sentVideo > 0, "\(outbound)")
        let roundTrip = outbound.last?.stats.first { $0.type == "remote-inbound-rtp" }?.roundTripTime
        #expect(roundTrip != nil, "\(outbound)")
        let png = try Data(contentsOf: URL(fileURLWithPath: shot))
        let width = png[16..<20].reduce(0) { $0 << 8 | Int($1) }
        let height = png[20..<24].reduce(0) { $0 << 8 | Int($1) }
        #expect(width == 320 && height == 180)

        // A forged token is refused with the platform's status.
        let refused = try runCommand(try pcastBinary(), ["subscribe", "--server", signaling, "--token", "DIGEST:forged", "--auth-token", auth, "--seconds", "1"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("unauthorized") || refused.stderr.contains("bad-request"), "\(refused.stderr)")
    }

    @Test("pcast publish with a multi-bitrate token sends a simulcast; pcast subscribe --layer lowest decodes 160×90, --display-size 160x90 is sent that layer too, the default decodes a larger one; a malformed --display-size is a usage error (exit 64)")
    func simulcastFromTheCommandLine() async throws {
        let serve = try await ServeProcess.start()
        defer { serve.stop() }
        let auth = try serve.token(["--type", "auth"])
        let publish = try serve.token(["--type", "publish", "--capability", "multi-bitrate"])
        let stream = try serve.token(["--type", "stream", "--channel-alias", "layers"])
        // 640×360 (layers 640, 320 and 160 wide): three 720p encoders would starve the CLI suite's others.
        let publisher = try await serve.publish(token: publish, auth: auth, ["--width", "640", "--height", "360", "--tag", "channelAlias:layers", "--seconds", "40"])
        defer { publisher.process.stop() }
        /// The decoded sizes `pcast subscribe` printed (`video: WxH` at each change).
        func watch(_ extra: [String]) throws -> (status: Int32, sizes: [String], stderr: String) {
            let result = try runCommand(try pcastBinary(), ["subscribe", "--server", serve.signaling, "--token", stream, "--auth-token", auth,
                                                            "--sink", "null", "--seconds", "4"] + extra, timeout: 60)
            return (result.status, result.lines.filter { $0.hasPrefix("video: ") }.map { String($0.dropFirst("video: ".count)) }, result.stderr)
        }
        let lowest = try watch(["--layer", "lowest"])
        #expect(lowest.status == 0 && lowest.sizes == ["160x90"], "\(lowest)")
        let small = try watch(["--display-size", "160x90"])
        #expect(small.status == 0 && small.sizes.last == "160x90", "\(small)")
        let adaptive = try watch([])
        #expect(adaptive.status == 0 && ["320x180", "640x360"].contains(adaptive.sizes.last ?? ""), "\(adaptive)")
        let malformed = try runCommand(try pcastBinary(), ["subscribe", "--server", serve.signaling, "--token", stream, "--display-size", "wide"])
        #expect(malformed.status == 64 && malformed.stderr.contains("--display-size takes WIDTHxHEIGHT"), "\(malformed.stderr)")
    }

    @Test("pcast serve --log-format json: every line it writes (its banner, its logs, the SDK's) is one JSON object with time, level, logger and message; a CLI publisher's session and stream ids are fields of their own; a format it does not know exits 2")
    func jsonLogLines() async throws {
        let serve = try await ServeProcess.start(["--log-format", "json"])
        defer { serve.stop() }
        let (publisher, _, streamId) = try await serve.publish(token: try serve.token(["--type", "publish"]), auth: try serve.token(["--type", "auth"]),
                                                                ["--width", "320", "--height", "180", "--seconds", "2"])
        defer { publisher.stop() }
        #expect(!streamId.isEmpty, "pcast publish printed no stream id")
        #expect(publisher.wait(within: .seconds(30)) == 0)
        // The platform logs the stream's end once the publisher is gone.
        var records: [[String: Any]] = []
        var unparsed: [String] = []
        for _ in 0..<100 {
            records = []
            unparsed = []
            for line in serve.output.split(separator: "\n") {
                if let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] { records.append(object) } else { unparsed.append(String(line)) }
            }
            if records.contains(where: { $0["stream"] as? String == streamId && ($0["message"] as? String ?? "").contains("stream ended") }) { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(unparsed.isEmpty, "lines that are not JSON: \(unparsed.prefix(5))")
        #expect(records.count >= 5)
        for record in records {
            #expect(["time", "level", "logger", "message"].allSatisfy { record[$0] is String }, "\(record)")
        }
        #expect(records.contains { ($0["signaling"] as? String)?.hasPrefix("ws://") == true }, "the banner's addresses are fields")
        let published = records.first { $0["stream"] as? String == streamId && ($0["message"] as? String ?? "").contains("stream published") }
        #expect((published?["session"] as? String)?.hasPrefix("session-") == true, "\(String(describing: published))")
        #expect(records.contains { $0["stream"] as? String == streamId && ($0["message"] as? String ?? "").contains("stream ended") })

        let refused = try runCommand(try pcastBinary(), ["serve", "--secret", "s", "--no-rtmp", "--log-format", "xml"])
        #expect(refused.status == 2 && refused.stderr.contains("--log-format must be text or json"), "\(refused.status) \(refused.stderr)")
    }

    @Test("pcast serve --public-address and --ice-server: WHIP answers announce that address as the relay's candidate and the STUN/TURN servers as Link headers, the page, WHIP and WHEP URLs are printed; a malformed address or server exits 2")
    func publicAddress() async throws {
        let bad = try runCommand(try pcastBinary(), ["serve", "--secret", "s", "--public-address", "relay.example", "--no-rtmp"])
        #expect(bad.status == 2 && bad.stderr.contains("not an IPv4 or IPv6 address"), "\(bad.status) \(bad.stderr)")
        let badICE = try runCommand(try pcastBinary(), ["serve", "--secret", "s", "--ice-server", "http://stun.example", "--no-rtmp"])
        #expect(badICE.status == 2 && badICE.stderr.contains("is not a stun:, stuns:, turn: or turns: URI"), "\(badICE.status) \(badICE.stderr)")

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-serve-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let log = directory.appendingPathComponent("serve.out").path
        var environment = ProcessInfo.processInfo.environment
        environment["PCAST_SECRET"] = "cli-test-secret"
        let server = try ChildProcess.spawn(try pcastBinary(), [
            "serve", "--application-id", "cli-app", "--http-port", "0", "--media-port", "0", "--no-rtmp",
            "--public-address", "127.0.0.9", "--ice-server", "stun:stun.example.net:3478",
            "--ice-server", "turn:turn.example.net:3478?transport=udp,alice,s3cret",
            "--data-dir", directory.appendingPathComponent("data").path], environment: environment, output: log)
        defer { server.stop() }
        var printed = ""
        for _ in 0..<200 where !printed.contains("WHEP") {
            printed = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if !printed.contains("WHEP") { try await Task.sleep(for: .milliseconds(50)) }
        }
        // "pcast serve: page http://127.0.0.9:PORT/, WHIP http://127.0.0.9:PORT/whip/<channel alias>, WHEP …"
        let page = try #require(printed.split(whereSeparator: { $0 == " " || $0 == "\n" }).first { $0.hasPrefix("http://127.0.0.9:") },
                                "no page URL printed: \(printed)")
        #expect(printed.contains("/whip/<channel alias>") && printed.contains("/whep/<channel alias or stream id>"))
        let port = try #require(page.dropFirst("http://127.0.0.9:".count).split(separator: "/").first)
        let mediaPort = try #require(printed.split(whereSeparator: { $0 == " " || $0 == "\n" }).first { $0.hasPrefix("127.0.0.1:") && !$0.contains(port) }?
            .dropFirst("127.0.0.1:".count).trimmingCharacters(in: CharacterSet(charactersIn: ",\n")))
        let token = try runCommand(try pcastBinary(), ["token", "create", "--application-id", "cli-app", "--secret", "cli-test-secret",
                                                       "--expires-in", "600", "--type", "publish"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let offer = directory.appendingPathComponent("offer.sdp")
        try Self.offer.write(to: offer, atomically: true, encoding: .utf8)
        let answer = try runCommand(try executable("curl"), ["-s", "-i", "-X", "POST", "-H", "Content-Type: application/sdp", "-H", "Authorization: Bearer \(token)",
                                                             "--data-binary", "@\(offer.path)", "http://127.0.0.1:\(port)/whip/cli-room"])
        #expect(answer.stdout.contains("a=candidate:1 1 udp 2130706431 127.0.0.9 \(mediaPort) typ host"), "\(answer.stdout)")
        // --ice-server: one Link header each on the new session (RFC 9725 §4.6), TURN with its credential.
        // Header lines end in CRLF, one Character in Swift: split on any line break.
        let links = answer.stdout.split(whereSeparator: \.isNewline).filter { $0.lowercased().hasPrefix("link:") }
        #expect(links.contains { $0.contains("<stun:stun.example.net:3478>; rel=\"ice-server\"") }, "\(answer.stdout.prefix(1_000))")
        #expect(links.contains { $0.contains("<turn:turn.example.net:3478?transport=udp>; rel=\"ice-server\"; username=\"alice\"; credential=\"s3cret\"; credential-type=\"password\"") }, "\(links)")
        #expect(!answer.stdout.contains(" 127.0.0.1 \(mediaPort) typ host"))
    }

    /// A browser-style WHIP offer: Opus and H.264 42e01f, with SSRCs.
    static let offer = [
        "v=0", "o=- 1 2 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0 1",
        "m=audio 9 UDP/TLS/RTP/SAVPF 111", "c=IN IP4 0.0.0.0", "a=ice-ufrag:Fq3x", "a=ice-pwd:nd2pQ4mPTYgXzPZ2g2lCcx1N",
        "a=fingerprint:sha-256 " + (0..<32).map { String(format: "%02X", $0) }.joined(separator: ":"), "a=setup:actpass", "a=mid:0",
        "a=sendonly", "a=rtcp-mux", "a=rtpmap:111 opus/48000/2", "a=ssrc:1001 cname:cli",
        "m=video 9 UDP/TLS/RTP/SAVPF 102", "c=IN IP4 0.0.0.0", "a=ice-ufrag:Fq3x", "a=ice-pwd:nd2pQ4mPTYgXzPZ2g2lCcx1N",
        "a=fingerprint:sha-256 " + (0..<32).map { String(format: "%02X", $0) }.joined(separator: ":"), "a=setup:actpass", "a=mid:1",
        "a=sendonly", "a=rtcp-mux", "a=rtpmap:102 H264/90000",
        "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f", "a=ssrc:2002 cname:cli",
    ].joined(separator: "\r\n") + "\r\n"
}

/// The fields of `pcast publish --stats` / `pcast subscribe --rtc-stats` lines these tests read.
private struct StatsReport: Decodable {
    struct Entry: Decodable {
        let type: String
        let kind: String
        let framesDecoded: Int?
        let packetsSent: Int?
        let roundTripTime: Double?
    }
    let timestamp: Double
    let stats: [Entry]
}
