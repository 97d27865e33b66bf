import Foundation
import PCastTestSupport
import Testing

/// Waits until the child's output file has a line that `matches`, and returns it.
func awaitLine(in file: URL, process: ChildProcess, within limit: Duration = .seconds(30), _ matches: (String) -> Bool) async throws -> String {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        let text = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
        if let line = text.split(separator: "\n").map(String.init).first(where: matches) { return line }
        guard process.isRunning else { throw CLITestFailure("the process exited first: \(text)") }
        try await Task.sleep(for: .milliseconds(50))
    }
    throw CLITestFailure("no such line within \(limit): \((try? String(contentsOf: file, encoding: .utf8)) ?? "")")
}

@Suite("pcast demo, ingest and channel", .serialized)
struct DemoIngestChannelCommandTests {
    @Test("pcast demo --seconds 5 --sink null: the embedded platform, a publisher and a viewer; exit 0 with a summary of more than 40 frames delivered and no SRTP failure")
    func demo() throws {
        let result = try runCommand(try pcastBinary(), ["demo", "--seconds", "5", "--sink", "null", "--width", "320", "--height", "240",
                                                        "--fps", "15", "--quiet"], timeout: 90)
        #expect(result.status == 0, "\(result.stderr)")
        let summary = try #require(result.lines.first { $0.hasPrefix("summary: ") }, "\(result.stdout)")
        let frames = Int(summary.dropFirst("summary: ".count).split(separator: " ").first ?? "") ?? 0
        #expect(frames > 40, "\(summary)")
        #expect(summary.contains(", 0 SRTP failures"), "\(summary)")
    }

    @Test("pcast ingest of a 3 s mp4 from the operator's --ingest-file-dir prints the stream id, its position while it plays, and `ended: ended (…)` once the file played out (exit 0); a URI the platform does not pull (gopher://) fails with the platform's refusal")
    func ingest() async throws {
        let directory = try temporaryDirectory("pcast-ingest-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        let media = directory.appendingPathComponent("media")
        try FileManager.default.createDirectory(at: media, withIntermediateDirectories: true)
        let clip = media.appendingPathComponent("clip.mp4").path
        let made = try runCommand(try executable("ffmpeg"), [
            "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-f", "lavfi", "-i", "sine=frequency=440",
            "-t", "3", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "25", "-c:a", "aac", "-y", clip], timeout: 60)
        #expect(made.status == 0, "\(made.stderr)")
        let platform = try await ServedPlatform.start(dataDirectory: directory.appendingPathComponent("data"), log: directory.appendingPathComponent("serve.out"),
                                                      extraArguments: ["--ingest-file-dir", media.path])
        defer { platform.process.stop() }
        let session = ["--server", platform.signaling, "--auth-token", try platform.token(["--type", "auth"])]
        let publish = try platform.token(["--type", "publish"])
        let result = try platform.pcast(["ingest"] + session + ["--token", publish, "--uri", "file://\(clip)"], timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.lines.first?.hasPrefix("stream-") == true, "\(result.stdout)")
        #expect(result.lines.contains { $0.hasPrefix("position ") }, "\(result.stdout)")
        #expect(result.lines.contains { $0.hasPrefix("ended: ended") }, "\(result.stdout)")

        let refused = try platform.pcast(["ingest"] + session + ["--token", publish, "--uri", "gopher://127.0.0.1/clip"], timeout: 30)
        #expect(refused.status != 0 && refused.stderr.contains("ingest failed ("), "\(refused.status) \(refused.stderr)")
        #expect(refused.stderr.contains("gopher"), "\(refused.stderr)")
    }

    @Test("pcast channel publish creates the channel and prints its stream id; pcast channel view of that alias, through the sample backend, prints `viewing <that stream id>`; both exit 0 after --seconds")
    func channelPublishAndView() async throws {
        let directory = try temporaryDirectory("pcast-channel-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        let platform = try await ServedPlatform.start(dataDirectory: directory.appendingPathComponent("data"), log: directory.appendingPathComponent("serve.out"))
        defer { platform.process.stop() }
        let backend = platform.http + "/backend/"
        let publisherLog = directory.appendingPathComponent("publisher.out")
        let publisher = try ChildProcess.spawn(try pcastBinary(), [
            "channel", "publish", "--backend", backend, "--alias", "news", "--width", "320", "--height", "240", "--fps", "15", "--seconds", "12",
        ], environment: ServedPlatform.environment, output: publisherLog.path)
        defer { publisher.stop() }
        let streamId = try await awaitLine(in: publisherLog, process: publisher) { $0.hasPrefix("stream-") }

        let viewer = try platform.pcast(["channel", "view", "--backend", backend, "--alias", "news", "--sink", "null", "--seconds", "4"], timeout: 60)
        #expect(viewer.status == 0, "\(viewer.stderr)")
        #expect(viewer.lines.contains("viewing \(streamId)"), "\(viewer.stdout) \(viewer.stderr)")
        let published = await Task.detached { publisher.wait(within: .seconds(30)) }.value
        #expect(published == 0, "pcast channel publish: \((try? String(contentsOf: publisherLog, encoding: .utf8)) ?? "")")
    }

    @Test("pcast nettest --json against a served platform: a report with a verdict, the 360p target, a measured round trip and one sample a second (exit 0); the text form prints the verdict line; a short test, an unknown target and a forged token are refused with exit codes and messages")
    func nettest() async throws {
        let directory = try temporaryDirectory("pcast-nettest-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        let platform = try await ServedPlatform.start(dataDirectory: directory.appendingPathComponent("data"), log: directory.appendingPathComponent("serve.out"))
        defer { platform.process.stop() }
        let session = ["--server", platform.signaling, "--auth-token", try platform.token(["--type", "auth"])]
        let publish = try platform.token(["--type", "publish"])
        let result = try platform.pcast(["nettest"] + session + ["--token", publish, "--target", "360p", "--seconds", "4", "--json"], timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data((result.lines.last { !$0.isEmpty } ?? "").utf8)) as? [String: Any], "\(result.stdout)")
        #expect(["good", "fair", "poor"].contains(report["verdict"] as? String ?? ""), "\(report)")
        #expect((report["target"] as? [String: Any])?["videoBitrate"] as? Int == 800_000)
        #expect((report["roundTripTime"] as? Double).map { $0 >= 0 && $0 < 1 } == true, "\(report)")
        #expect((report["samples"] as? [Any])?.count ?? 0 >= 3, "\(report)")
        #expect((report["estimatedBandwidth"] as? Int ?? 0) > 0 && report["recommendedVideoBitrate"] is Int)

        let text = try platform.pcast(["nettest"] + session + ["--token", publish, "--target", "180p", "--seconds", "3", "--no-audio"], timeout: 60)
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.lines.contains { $0.hasPrefix("verdict: ") }, "\(text.stdout)")
        #expect(text.lines.contains { $0.hasPrefix("1 s: sent ") }, "a line a second: \(text.stdout)")

        let short = try platform.pcast(["nettest"] + session + ["--token", publish, "--seconds", "1"], timeout: 30)
        #expect(short.status == 1 && short.stderr.contains("3 s or more"), "\(short.status) \(short.stderr)")
        let unknown = try platform.pcast(["nettest"] + session + ["--token", publish, "--target", "4k"], timeout: 30)
        #expect(unknown.status == 2 && unknown.stderr.contains("--target"), "\(unknown.status) \(unknown.stderr)")
        let forged = try platform.pcast(["nettest"] + session + ["--token", "DIGEST:forged", "--seconds", "3"], timeout: 30)
        #expect(forged.status == 1 && forged.stderr.contains("network test failed"), "\(forged.status) \(forged.stderr)")
    }

    /// An application backend of its own, in Python: it answers the first `failFirst` POSTs with
    /// 503, then checks each notification's signature with Python's `hmac` and writes it as a
    /// JSON line (`valid`, `event`, `body`) to `out`.
    static let notificationReceiver = """
        import hashlib, hmac, http.server, json, sys
        secret, out, fail_first = sys.argv[1].encode(), sys.argv[2], int(sys.argv[3])
        seen = {"posts": 0}
        class Hook(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                seen["posts"] += 1
                if seen["posts"] <= fail_first:
                    self.send_response(503); self.end_headers(); return
                stamp = self.headers.get("X-PCast-Timestamp", "")
                expected = "v1=" + hmac.new(secret, stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
                valid = hmac.compare_digest(self.headers.get("X-PCast-Signature", ""), expected)
                with open(out, "a") as f:
                    f.write(json.dumps({"valid": valid, "event": self.headers.get("X-PCast-Event"), "posts": seen["posts"],
                                        "body": json.loads(body)}) + "\\n")
                self.send_response(204); self.end_headers()
            def log_message(self, *args): pass
        server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
        print(server.server_address[1], flush=True)
        server.serve_forever()
        """

    @Test("pcast serve --stream-notification-url: a stream published with pcast publish --tag is notified to a backend of Python's (started, then ended with the reason), each signed so Python's hmac verifies it, and delivered after the backend's first two answers were 503")
    func streamNotifications() async throws {
        let directory = try temporaryDirectory("pcast-notify-cli")
        defer { try? FileManager.default.removeItem(at: directory) }
        let script = directory.appendingPathComponent("hook.py")
        try Self.notificationReceiver.write(to: script, atomically: true, encoding: .utf8)
        let received = directory.appendingPathComponent("received.jsonl")
        let receiverLog = directory.appendingPathComponent("hook.out")
        let receiver = try ChildProcess.spawn(URL(fileURLWithPath: "/usr/bin/python3"), [script.path, "hook-secret", received.path, "2"],
                                              environment: ServedPlatform.environment, output: receiverLog.path, errorsToOutput: true)
        defer { receiver.stop() }
        let port = try await awaitLine(in: receiverLog, process: receiver) { Int($0) != nil }
        let platform = try await ServedPlatform.start(dataDirectory: directory.appendingPathComponent("data"), log: directory.appendingPathComponent("serve.out"),
                                                      extraArguments: ["--stream-notification-url", "http://127.0.0.1:\(port)/hook",
                                                                       "--stream-notification-secret", "hook-secret"])
        defer { platform.process.stop() }
        let session = ["--server", platform.signaling, "--auth-token", try platform.token(["--type", "auth"])]
        let published = try platform.pcast(["publish"] + session + ["--token", try platform.token(["--type", "publish"]), "--tag", "show:42",
                                                                     "--width", "320", "--height", "240", "--fps", "15", "--seconds", "2"], timeout: 60)
        #expect(published.status == 0, "\(published.stderr)")
        let streamId = try #require(published.lines.first { $0.hasPrefix("stream-") })

        var lines: [[String: Any]] = []
        let deadline = ContinuousClock.now + .seconds(20)
        while lines.count < 2, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            lines = ((try? String(contentsOf: received, encoding: .utf8)) ?? "").split(separator: "\n")
                .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }
        #expect(lines.count == 2, "\(lines)")
        #expect(lines.map { $0["event"] as? String } == ["stream-started", "stream-ended"])
        #expect(lines.allSatisfy { $0["valid"] as? Bool == true }, "Python's hmac verifies each signature")
        #expect(lines.first?["posts"] as? Int == 3, "the started notification came on the third attempt, after two 503s")
        let bodies = lines.compactMap { $0["body"] as? [String: Any] }
        #expect(bodies.allSatisfy { $0["streamId"] as? String == streamId && ($0["tags"] as? [String])?.contains("show:42") == true }, "\(bodies)")
        #expect(bodies.last?["reason"] as? String == "ended" && bodies.first?["reason"] == nil)
        #expect(bodies.first?["applicationId"] as? String == ServedPlatform.applicationId)
    }
}
