import Foundation
import PCastTestSupport
import Testing

/// GET with curl: status and body (`admin`: HTTP Basic with the serve processes' application credentials).
private func get(_ url: String, admin: Bool = true) throws -> (status: Int, body: String) {
    var arguments = ["-s", "-w", "\n%{http_code}", "--max-time", "8"]
    if admin { arguments += ["-u", "\(ServeProcess.applicationId):\(ServeProcess.secret)"] }
    let result = try runCommand(try executable("curl"), arguments + [url])
    let lines = result.stdout.split(whereSeparator: \.isNewline)
    return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
}

/// The node ids `GET /admin/nodes` lists on `serve`.
private func nodeIds(_ serve: ServeProcess) throws -> [String] {
    let (status, body) = try get(serve.httpURL + "/admin/nodes")
    guard status == 200, let object = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any],
          let nodes = object["nodes"] as? [[String: Any]] else { throw CLITestFailure("GET /admin/nodes: \(status) \(body)") }
    return nodes.compactMap { $0["nodeId"] as? String }
}

private func waitFor(_ what: String, within limit: Duration, _ condition: () throws -> Bool) async throws -> Duration {
    let start = ContinuousClock.now
    while ContinuousClock.now - start < limit {
        if try condition() { return ContinuousClock.now - start }
        try await Task.sleep(for: .milliseconds(100))
    }
    throw CLITestFailure("\(what): not within \(limit)")
}


/// `pcast publish` of a 320x240 15 fps test pattern (no audio) on `node`; returns it with its stream id.
private func publishTestPattern(on node: ServeProcess) async throws -> (ChildProcess, String) {
    let log = node.directory.appendingPathComponent("publish.out").path
    let publisher = try ChildProcess.spawn(try pcastBinary(), [
        "publish", "--server", node.signaling, "--auth-token", try node.token(["--type", "auth"]), "--token", try node.token(["--type", "publish"]),
        "--source", "test", "--audio", "none", "--width", "320", "--height", "240", "--fps", "15", "--bitrate", "300",
    ], environment: node.environment, output: log, errorsToOutput: true)
    var streamId = ""
    do {
        _ = try await waitFor("the publisher printed its stream id", within: .seconds(20)) {
            streamId = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").first { $0.hasPrefix("stream-") }.map(String.init) ?? ""
            return !streamId.isEmpty
        }
    } catch {
        publisher.stop()
        throw error
    }
    return (publisher, streamId)
}

/// A `pcast subscribe` to `streamId` through `nodes` (the first, then the others in turn) that
/// prints `--rtc-stats`; started again until it decodes (the stream reaches the first node's
/// directory within moments). `log` holds what it printed.
private func watchDecoding(_ streamId: String, through nodes: [ServeProcess], log: String) async throws -> ChildProcess {
    let node = nodes[0]
    var viewer: ChildProcess?, seen = ""
    do {
        _ = try await waitFor("the viewer on \(node.signaling) decodes (\(log))", within: .seconds(30)) {
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if !output.isEmpty { seen = output }
            if framesDecoded(output) > 0 { return true }
            if viewer?.isRunning != true {
                if viewer != nil { try? FileManager.default.moveItem(atPath: log, toPath: log + ".\(UUID())") }
                viewer = try ChildProcess.spawn(try pcastBinary(), ["subscribe"] + nodes.flatMap { ["--server", $0.signaling] } + [
                    "--auth-token", try node.token(["--type", "auth"]),
                    "--token", try node.token(["--type", "stream", "--origin-stream-id", streamId]), "--sink", "null", "--rtc-stats",
                ], environment: node.environment, output: log, errorsToOutput: true)
            }
            return false
        }
    } catch {
        viewer?.stop()
        throw CLITestFailure("\(error); the viewer said: \(seen.suffix(1_500)); its node said: \(node.output.suffix(3_000))")
    }
    return viewer!
}

/// The last `framesDecoded` a `--rtc-stats` output reports (0 before any).
private func framesDecoded(_ output: String) -> Int {
    guard let match = output.matches(of: /"framesDecoded":(\d+)/).last else { return 0 }
    return Int(match.output.1) ?? 0
}

extension Cluster {
@Suite("pcast serve --database postgres://: nodes sharing a real PostgreSQL", .serialized)
struct ClusterCommandTests {
    @Test("a malformed database URL exits 2; an unreachable server exits 1 with the reason, within seconds")
    func badDatabase() throws {
        let malformed = try runCommand(try pcastBinary(), ["serve", "--secret", "s", "--no-rtmp", "--database", "postgres://nohost"])
        #expect(malformed.status == 2 && malformed.stderr.contains("database"), "\(malformed.status) \(malformed.stderr)")
        let port = try freeTCPPort()
        let started = Date()
        let unreachable = try runCommand(try pcastBinary(), ["serve", "--secret", "s", "--no-rtmp", "--http-port", "0", "--media-port", "0",
                                                             "--data-dir", FileManager.default.temporaryDirectory.appendingPathComponent("pcast-\(UUID())").path,
                                                             "--database", "postgres://pcast@127.0.0.1:\(port)/pcast"], timeout: 30)
        #expect(unreachable.status == 1 && unreachable.stderr.contains("unavailable") && unreachable.stderr.contains("127.0.0.1:\(port)"),
                "\(unreachable.status) \(unreachable.stderr)")
        #expect(Date().timeIntervalSince(started) < 20)
    }

    @Test("nodes on one database list each other (admin only); kill -9 of one drops it within the 3 s expiry, a clean stop at once; /readyz is 503 while PostgreSQL is down and ready again when it is back")
    func membership() async throws {
        let postgres = try TestPostgres.startPrivate()
        let url = try postgres.newDatabase()
        let one = try await ServeProcess.start(["--database", url, "--node-id", "node-1", "--no-rtmp"])
        defer { one.stop() }
        let two = try await ServeProcess.start(["--database", url, "--node-id", "node-2", "--no-rtmp"])
        defer { two.stop() }
        _ = try await waitFor("both nodes listed", within: .seconds(10)) { try nodeIds(one) == ["node-1", "node-2"] }
        #expect(try nodeIds(two) == ["node-1", "node-2"])
        #expect(try get(one.httpURL + "/admin/nodes", admin: false).status == 401)

        two.process.stop()   // SIGKILL: no goodbye
        let gone = try await waitFor("the killed node expired", within: .seconds(6)) { try nodeIds(one) == ["node-1"] }
        print("cluster: a node killed with SIGKILL left the membership after \(gone)")
        #expect(gone < .seconds(5))

        let three = try await ServeProcess.start(["--database", url, "--node-id", "node-3", "--no-rtmp"])
        _ = try await waitFor("node-3 listed", within: .seconds(10)) { try nodeIds(one) == ["node-1", "node-3"] }
        three.process.interrupt()
        let left = try await waitFor("the stopped node left", within: .seconds(5)) { try nodeIds(one) == ["node-1"] }
        #expect(left < .seconds(2), "a clean stop removes the node at once, not at the expiry: \(left)")
        three.stop()

        #expect(try get(one.httpURL + "/readyz", admin: false).status == 200)
        try postgres.stop()
        let down = try await waitFor("readyz reports the database", within: .seconds(8)) {
            let ready = try get(one.httpURL + "/readyz", admin: false)
            return ready.status == 503 && ready.body.contains("database")
        }
        #expect(try get(one.httpURL + "/healthz", admin: false).status == 200, "the process itself stays healthy")
        #expect(try get(one.httpURL + "/admin/nodes").status == 503)
        try postgres.resume()
        let back = try await waitFor("ready again", within: .seconds(15)) { try get(one.httpURL + "/readyz", admin: false).status == 200 }
        _ = try await waitFor("heartbeats again", within: .seconds(10)) { try nodeIds(one) == ["node-1"] }
        print("cluster: /readyz 503 \(down) after PostgreSQL stopped, 200 \(back) after it was back")
        #expect(one.process.isRunning, "\(one.output.suffix(2_000))")
    }

    @Test("kill -9 of the node a stream is published on: a viewer watching it from another node is told it ended as failed within 5 s (the heartbeat expiry)")
    func originKilled() async throws {
        let postgres = try TestPostgres.server()
        let url = try postgres.newDatabase()
        let one = try await ServeProcess.start(["--database", url, "--node-id", "node-1", "--no-rtmp"])
        defer { one.stop() }
        let two = try await ServeProcess.start(["--database", url, "--node-id", "node-2", "--no-rtmp"])
        defer { two.stop() }
        _ = try await waitFor("both nodes listed", within: .seconds(10)) { try nodeIds(two) == ["node-1", "node-2"] }

        let (publisher, streamId) = try await publishTestPattern(on: one)
        defer { publisher.stop() }
        let viewLog = two.directory.appendingPathComponent("subscribe.out").path
        let viewer = try await watchDecoding(streamId, through: [two], log: viewLog)
        defer { viewer.stop() }

        one.process.stop()   // SIGKILL: no goodbye, no stream end from node 1
        let killed = ContinuousClock.now
        let told = try await waitFor("the viewer was told", within: .seconds(10)) {
            ((try? String(contentsOfFile: viewLog, encoding: .utf8)) ?? "").contains("stream ended:")
        }
        let output = (try? String(contentsOfFile: viewLog, encoding: .utf8)) ?? ""
        print("cluster: a viewer on node 2 heard its stream end \(ContinuousClock.now - killed) after the origin node was killed")
        let ending = output.split(separator: "\n").first { $0.hasPrefix("stream ended:") } ?? ""
        #expect(ending.contains("failed") && ending.contains("node node-1 stopped answering"), "\(output.suffix(1_000))")
        #expect(told < .seconds(5))
        #expect(try get(two.httpURL + "/readyz", admin: false).status == 200)
    }

    @Test("a partition in network namespaces: two nodes, each in a namespace of its own, lose the link between them but not PostgreSQL; the viewer on node 2 of node 1's stream stops decoding while both nodes stay in the membership, and decodes again once the link is back")
    func partitionInNamespaces() async throws {
        let namespaces = try NetworkNamespaces.create()
        defer { namespaces.remove() }
        let postgres = try TestPostgres.startPrivate(alsoListeningOn: namespaces.databaseAddresses)
        defer { try? postgres.stop() }
        let (first, second) = (namespaces.databaseAddresses[0], namespaces.databaseAddresses[1])
        let url = try postgres.newDatabase(host: first)
        let urls = [url, url.replacingOccurrences(of: "@\(first):", with: "@\(second):")]
        var nodes: [ServeProcess] = []
        defer { nodes.forEach { $0.stop() } }
        for index in 0..<2 {
            nodes.append(try await ServeProcess.start(["--database", urls[index], "--node-id", "node-\(index + 1)", "--no-rtmp",
                                                       "--host", namespaces.nodeAddresses[index]], in: (namespaces, index)))
        }
        #expect(nodes[0].signaling.contains(namespaces.nodeAddresses[0]) && nodes[1].signaling.contains(namespaces.nodeAddresses[1]))
        _ = try await waitFor("both nodes listed", within: .seconds(10)) { try nodeIds(nodes[1]) == ["node-1", "node-2"] }
        let (publisher, streamId) = try await publishTestPattern(on: nodes[0])
        defer { publisher.stop() }
        let viewLog = nodes[1].directory.appendingPathComponent("subscribe.out").path
        let viewer = try await watchDecoding(streamId, through: [nodes[1]], log: viewLog)
        defer { viewer.stop() }
        func decoded() -> Int { framesDecoded((try? String(contentsOfFile: viewLog, encoding: .utf8)) ?? "") }

        try namespaces.cut()
        try await Task.sleep(for: .milliseconds(1_500))   // what was on its way, and the stats line after it
        let atCut = decoded()
        try await Task.sleep(for: .seconds(3))
        #expect(decoded() - atCut <= 2, "\(decoded() - atCut) frames decoded in 3 s through a cut link")
        #expect(try nodeIds(nodes[0]) == ["node-1", "node-2"] && nodeIds(nodes[1]) == ["node-1", "node-2"],
                "both nodes still reach PostgreSQL: the membership keeps them")

        try namespaces.heal()
        let healed = ContinuousClock.now, stalled = decoded()
        do {
            _ = try await waitFor("the viewer decodes again", within: .seconds(15)) { decoded() >= stalled + 30 }
        } catch {
            throw CLITestFailure("\(error); node 2 said: \(nodes[1].output.suffix(3_000))")
        }
        print("cluster: after a namespace link cut of 4.5 s, the viewer on node 2 decoded 30 frames again within \(ContinuousClock.now - healed) of the link coming back (2 s of frames at 15 fps)")
        let output = (try? String(contentsOfFile: viewLog, encoding: .utf8)) ?? ""
        #expect(!output.contains("stream ended:") && viewer.isRunning, "\(output.suffix(1_000))")
    }

    @Test("kill -9 of the node a viewer watches through: `pcast subscribe --server <node 2> --server <node 3>` moves to node 3 and goes on decoding the stream published on node 1, never told it ended")
    func edgeKilled() async throws {
        let postgres = try TestPostgres.server()
        let url = try postgres.newDatabase()
        var nodes: [ServeProcess] = []
        defer { nodes.forEach { $0.stop() } }
        for id in ["node-1", "node-2", "node-3"] {
            nodes.append(try await ServeProcess.start(["--database", url, "--node-id", id, "--no-rtmp"]))
        }
        _ = try await waitFor("three nodes listed", within: .seconds(10)) { try nodeIds(nodes[2]) == ["node-1", "node-2", "node-3"] }
        let (publisher, streamId) = try await publishTestPattern(on: nodes[0])
        defer { publisher.stop() }
        let viewLog = nodes[1].directory.appendingPathComponent("subscribe.out").path
        let viewer = try await watchDecoding(streamId, through: [nodes[1], nodes[2]], log: viewLog)
        defer { viewer.stop() }
        func output() -> String { (try? String(contentsOfFile: viewLog, encoding: .utf8)) ?? "" }

        nodes[1].process.stop()   // SIGKILL
        let killed = ContinuousClock.now, atKill = framesDecoded(output())
        do {
            // 60 frames: 4 s of the 15 fps pattern, past what the jitter buffer held at the kill.
            _ = try await waitFor("the viewer decodes again", within: .seconds(20)) { framesDecoded(output()) >= atKill + 60 }
        } catch {
            throw CLITestFailure("\(error): \(framesDecoded(output())) decoded, \(atKill) at the kill; the viewer said: \(output().suffix(2_000)); node 3 said: \(nodes[2].output.suffix(3_000))")
        }
        let took = ContinuousClock.now - killed
        print("cluster: a viewer whose node was killed decoded 60 frames more through node 3 within \(took) (4 s of frames at 15 fps; read from the once-a-second stats line)")
        #expect(!output().contains("stream ended:"), "\(output().suffix(1_000))")
        #expect(viewer.isRunning)
        let metrics = try get(nodes[2].httpURL + "/metrics").body
        #expect(metrics.contains("pcast_relay_subscribers 1"), "node 3's relay serves the viewer: \(metrics.split(separator: "\n").filter { $0.contains("relay_") })")
    }
}
}
