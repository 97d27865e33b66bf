import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import PCastTestSupport
import Testing

/// A `pcast serve` child process on free ports, with its data directory.
struct ServedPlatform {
    let process: ChildProcess
    let signaling: String
    let http: String
    let dataDirectory: URL
    static let applicationId = "cli-app"
    static let secret = "cli-test-secret"

    static var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["PCAST_SECRET"] = secret
        return environment
    }

    /// Starts `pcast serve` (with the sample backend) and waits until it prints its signaling URL.
    static func start(dataDirectory: URL, log: URL, extraArguments: [String] = []) async throws -> ServedPlatform {
        let process = try ChildProcess.spawn(try pcastBinary(), [
            "serve", "--application-id", applicationId, "--http-port", "0", "--media-port", "0", "--no-rtmp", "--sample-backend",
            "--data-dir", dataDirectory.path] + extraArguments, environment: environment, output: log.path)
        var url: String?
        for _ in 0..<300 where url == nil {
            let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            url = text.split(separator: " ").first { $0.hasPrefix("ws://") }.map { String($0.trimmingCharacters(in: CharacterSet(charactersIn: ",\n"))) }
            if url == nil {
                guard process.isRunning else { throw CLITestFailure("pcast serve exited: \(text)") }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        guard let url else {
            process.stop()
            throw CLITestFailure("pcast serve printed no signaling URL")
        }
        let http = "http://" + url.dropFirst("ws://".count).replacingOccurrences(of: "/ws", with: "")
        return ServedPlatform(process: process, signaling: url, http: http, dataDirectory: dataDirectory)
    }

    func token(_ arguments: [String]) throws -> String {
        let result = try runCommand(try pcastBinary(), ["token", "create", "--application-id", Self.applicationId, "--secret", Self.secret,
                                                        "--expires-in", "600"] + arguments)
        guard result.status == 0 else { throw CLITestFailure("token create failed: \(result.stderr)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func pcast(_ arguments: [String], timeout: TimeInterval = 60) throws -> CommandResult {
        try runCommand(try pcastBinary(), arguments, timeout: timeout)
    }
}

/// A temporary directory removed at the end of the test.
func temporaryDirectory(_ prefix: String) throws -> URL {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory
}

/// `gst-discoverer-1.0`'s duration for a file, in seconds.
func discovererSeconds(_ path: String) throws -> Double {
    let result = try runCommand(try executable("gst-discoverer-1.0"), [path], timeout: 60)
    guard let line = result.stdout.split(separator: "\n").first(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix("Duration:") }),
          let value = line.split(separator: " ").last
    else { throw CLITestFailure("gst-discoverer-1.0 gave no duration for \(path): \(result.stdout) \(result.stderr)") }
    let parts = value.split(separator: ":").compactMap { Double($0) }
    guard parts.count == 3 else { throw CLITestFailure("unreadable duration '\(line)'") }
    return parts[0] * 3600 + parts[1] * 60 + parts[2]
}

/// Decodes every track a recording declares to the end with gst-launch-1.0 (playbin, fake sinks);
/// returns its exit status and errors.
func decodeWithGstLaunch(_ path: String) throws -> CommandResult {
    try runCommand(try executable("gst-launch-1.0"), [
        "-q", "playbin", "uri=file://\(path)", "video-sink=fakesink", "audio-sink=fakesink"], timeout: 120)
}

@Suite("pcast: recording across a crash, rooms and chat from the command line", .serialized)
struct RecordingAndRoomCommandTests {
    @Test("kill -9 of the platform while it records leaves a playable recording; after a restart, append continues it")
    func crashThenAppend() async throws {
        let directory = try temporaryDirectory("pcast-crash")
        defer { try? FileManager.default.removeItem(at: directory) }
        let data = directory.appendingPathComponent("data")
        let recording = data.appendingPathComponent("recordings/crash.mp4").path
        var platform = try await ServedPlatform.start(dataDirectory: data, log: directory.appendingPathComponent("serve1.out"))
        let auth = try platform.token(["--type", "auth"])
        let publish = try platform.token(["--type", "publish", "--stream-name", "crash"])
        let publisher = try ChildProcess.spawn(try pcastBinary(), [
            "publish", "--server", platform.signaling, "--token", publish, "--auth-token", auth, "--width", "320", "--height", "240", "--fps", "25",
            "--publish-type", "record", "--stream-name", "crash", "--seconds", "60"], environment: ServedPlatform.environment)
        defer { publisher.stop() }
        // A few fragments (one a second) on disk, then the platform dies without warning.
        var size = 0
        for _ in 0..<300 where size < 40_000 {
            size = ((try? FileManager.default.attributesOfItem(atPath: recording))?[.size] as? NSNumber)?.intValue ?? 0
            try await Task.sleep(for: .milliseconds(50))
        }
        try await Task.sleep(for: .seconds(2))
        platform.process.stop()  // SIGKILL
        publisher.stop()
        let crashed = try discovererSeconds(recording)
        let streams = try runCommand(try executable("gst-discoverer-1.0"), [recording], timeout: 60).stdout
        #expect(streams.contains("video #"), "\(streams)")
        print("recording after the crash: \(crashed) s; \(streams.contains("audio #") ? "video and audio" : "video only")")
        #expect(crashed >= 1.5, "the recording holds \(crashed) s after the crash")
        let decoded = try decodeWithGstLaunch(recording)
        #expect(decoded.status == 0, "\(decoded.stderr)")

        // Restarted on the same data directory, the publisher comes back and appends.
        platform = try await ServedPlatform.start(dataDirectory: data, log: directory.appendingPathComponent("serve2.out"))
        defer { platform.process.stop() }
        let again = try platform.pcast([
            "publish", "--server", platform.signaling, "--token", try platform.token(["--type", "publish", "--stream-name", "crash"]), "--auth-token", try platform.token(["--type", "auth"]),
            "--width", "320", "--height", "240", "--fps", "25", "--publish-type", "append", "--stream-name", "crash", "--seconds", "3"], timeout: 60)
        #expect(again.status == 0, "\(again.stderr)")
        var total = 0.0
        for _ in 0..<100 where total < crashed + 2 {
            total = (try? discovererSeconds(recording)) ?? 0
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(total >= crashed + 2 && total <= crashed + 4.5, "after append: \(total) s (before: \(crashed) s)")
        let whole = try decodeWithGstLaunch(recording)
        #expect(whole.status == 0, "\(whole.stderr)")
        // The recording is listed over HTTP to the operator.
        var request = URLRequest(url: URL(string: platform.http + "/recordings")!)
        let credentials = Data("\(ServedPlatform.applicationId):\(ServedPlatform.secret)".utf8).base64EncodedString()
        request.setValue("Basic \(credentials)", forHTTPHeaderField: "Authorization")
        let (body, _) = try await URLSession.shared.data(for: request)
        let list = String(decoding: body, as: UTF8.self)
        #expect(list.contains("\"name\":\"crash\""), "\(list)")
    }

    @Test("pcast room create / join / members and pcast chat send / history against pcast serve")
    func roomAndChat() async throws {
        let directory = try temporaryDirectory("pcast-rooms")
        defer { try? FileManager.default.removeItem(at: directory) }
        let platform = try await ServedPlatform.start(dataDirectory: directory.appendingPathComponent("data"), log: directory.appendingPathComponent("serve.out"))
        defer { platform.process.stop() }
        let auth = try platform.token(["--type", "auth"])
        let session = ["--server", platform.signaling, "--auth-token", auth]

        let created = try platform.pcast(["room", "create"] + session + ["--name", "Standup", "--alias", "standup"])
        #expect(created.status == 0, "\(created.stderr)")
        let roomId = try #require(created.stdout.split(separator: " ").first.map(String.init))
        #expect(created.stdout.contains("standup"))
        // The same alias again is the same room.
        let again = try platform.pcast(["room", "create"] + session + ["--name", "Standup", "--alias", "standup"])
        #expect(again.stdout.split(separator: " ").first.map(String.init) == roomId)

        // A member stays in the room while others look.
        let joinedLog = directory.appendingPathComponent("join.out")
        let member = try ChildProcess.spawn(try pcastBinary(), ["room", "join"] + session + ["--alias", "standup", "--screen-name", "Ada", "--seconds", "30"],
                                            environment: ServedPlatform.environment, output: joinedLog.path)
        defer { member.stop() }
        var joined = ""
        for _ in 0..<200 where !joined.contains("joined") {
            joined = (try? String(contentsOf: joinedLog, encoding: .utf8)) ?? ""
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(joined.contains("joined \(roomId)"), "\(joined)")
        let members = try platform.pcast(["room", "members"] + session + ["--alias", "standup"])
        #expect(members.status == 0, "\(members.stderr)")
        #expect(members.stdout.contains("Ada"), "\(members.stdout)")
        #expect(members.stdout.contains("size 1"), "\(members.stdout)")

        // Chat: what is sent comes back verbatim, in order, and the member hears it.
        for text in ["first", "<b>second</b> \"quoted\""] {
            let sent = try platform.pcast(["chat", "send"] + session + ["--alias", "standup", "--message", text, "--screen-name", "Bob"])
            #expect(sent.status == 0, "\(sent.stderr)")
            #expect(sent.stdout.hasPrefix("chat-"))
        }
        let history = try platform.pcast(["chat", "history"] + session + ["--alias", "standup"])
        #expect(history.status == 0, "\(history.stderr)")
        let messages = history.stdout.split(separator: "\n").compactMap { line -> String? in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
            return object["message"] as? String
        }
        #expect(messages == ["first", "<b>second</b> \"quoted\""], "\(history.stdout)")
        var heard = ""
        for _ in 0..<100 where !heard.contains("second") {
            heard = (try? String(contentsOf: joinedLog, encoding: .utf8)) ?? ""
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(heard.contains("chat ") && heard.contains("Bob: first"), "\(heard)")

        // An unknown room is a clear failure.
        let unknown = try platform.pcast(["room", "members"] + session + ["--alias", "nowhere"])
        #expect(unknown.status == 1)
        #expect(unknown.stderr.contains("not-found"), "\(unknown.stderr)")
    }
}

@Suite("pcast publish: a file as the camera", .serialized)
struct FileSourceCommandTests {
    @Test("pcast publish --source file://… (made here by gst-launch) is seen by pcast subscribe at the asked size; it ends with the file, or loops with --loop")
    func fileAsCamera() async throws {
        let directory = try temporaryDirectory("pcast-file-source")
        defer { try? FileManager.default.removeItem(at: directory) }
        let clip = directory.appendingPathComponent("clip.mp4").path
        let made = try runCommand(try executable("gst-launch-1.0"), [
            "-q", "videotestsrc", "num-buffers=75", "pattern=ball", "!", "video/x-raw,width=640,height=272,framerate=25/1", "!", "x264enc", "!",
            "video/x-h264,profile=high", "!", "h264parse", "!", "mp4mux", "!", "filesink", "location=\(clip)"], timeout: 120)
        #expect(made.status == 0, "\(made.stderr)")
        let platform = try await ServedPlatform.start(dataDirectory: directory.appendingPathComponent("data"), log: directory.appendingPathComponent("serve.out"))
        defer { platform.process.stop() }
        let auth = try platform.token(["--type", "auth"])
        // A 3 s file looped, watched for 4 s from 1 s in: only a looping (and real-time paced) source is still there.
        let publisher = try ChildProcess.spawn(try pcastBinary(), [
            "publish", "--server", platform.signaling, "--auth-token", auth, "--token", try platform.token(["--type", "publish", "--apply-tag", "channelAlias:file"]),
            "--source", "file://\(clip)", "--audio", "none", "--loop", "--width", "320", "--height", "136", "--fps", "25", "--seconds", "30"],
            environment: ServedPlatform.environment)
        defer { publisher.stop() }
        try await Task.sleep(for: .seconds(1))
        let shot = directory.appendingPathComponent("shot.png").path
        let watched = try platform.pcast(["subscribe", "--server", platform.signaling, "--auth-token", auth,
                                          "--token", try platform.token(["--type", "stream", "--channel-alias", "file"]),
                                          "--sink", "null", "--seconds", "4", "--screenshot", shot, "--stats"], timeout: 60)
        #expect(watched.status == 0, "\(watched.stderr)")
        #expect(watched.stdout.contains("screenshot: \(shot) (320x136)"), "\(watched.stdout)")
        let lastStats = watched.stdout.split(separator: "\n").last { $0.contains("packetsReceived") } ?? ""
        #expect(!lastStats.contains("\"packetsReceived\":0"), "\(lastStats)")

        // Without --loop the file's end ends the stream and the command.
        let once = try platform.pcast([
            "publish", "--server", platform.signaling, "--auth-token", auth, "--token", try platform.token(["--type", "publish"]),
            "--source", "file://\(clip)", "--audio", "none", "--width", "320", "--height", "136", "--fps", "25", "--seconds", "30"], timeout: 60)
        #expect(once.status == 0, "\(once.stderr)")
        #expect(once.stderr.contains("stream ended: ended"), "\(once.stderr)")
    }
}
