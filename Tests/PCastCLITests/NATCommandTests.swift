import Foundation
import PCastTestSupport
import Testing

/// The video packets a `pcast subscribe --stats` output file shows, one figure per printed second.
func videoPacketsPerSecond(_ file: String) -> [Int] {
    ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { line -> Int? in
        guard line.hasPrefix("{"), let data = line.data(using: .utf8),
              let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let video = object["video"] as? [String: Any] else { return nil }
        return video["packetsReceived"] as? Int
    }
}

@Suite("Other networks: a publisher behind NAT, an IPv6-only host, a NAT rebinding mid-stream", .serialized)
struct NATCommandTests {
    /// `pcast serve --host ::` (IPv4 and IPv6) in this namespace, the hosts around it, and tokens.
    struct Setup {
        let topology: NATTopology
        let server: ServeProcess
        let port: Int
        let auth: String

        static func start() async throws -> Setup {
            let topology = try NATTopology.create()
            let server = try await ServeProcess.start(["--host", "::", "--no-rtmp"])
            guard let port = server.signaling.split(separator: ":").last?.split(separator: "/").first.flatMap({ Int($0) }) else {
                server.stop()
                throw CLITestFailure("no port in \(server.signaling)")
            }
            let auth = try server.token(["--type", "auth"])
            return Setup(topology: topology, server: server, port: port, auth: auth)
        }

        /// Runs `pcast` with `arguments` inside `namespace`, its output to `file` in the server's folder.
        func pcast(in namespace: String, _ arguments: [String], output file: String) throws -> (ChildProcess, String) {
            let path = server.directory.appendingPathComponent(file).path
            let command = try topology.command(in: namespace, try pcastBinary(), arguments)
            return (try ChildProcess.spawn(command.0, command.1, environment: server.environment, output: path, errorsToOutput: true), path)
        }

        /// The stream id a `pcast publish` output file starts with, waiting up to 15 s.
        func streamId(in file: String) async throws -> String {
            for _ in 0..<300 {
                let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
                if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("stream-") }) { return String(line) }
                try await Task.sleep(for: .milliseconds(50))
            }
            throw CLITestFailure("no stream id in \(file): \((try? String(contentsOfFile: file, encoding: .utf8)) ?? "")")
        }

        func stop() {
            server.stop()
            topology.remove()
        }
    }

    @Test("a publisher behind NAT is watched from an IPv6-only host; when the router forgets its mappings mid-stream, packets flow again within 3 s")
    func natPublisherIPv6Viewer() async throws {
        let setup = try await Setup.start()
        defer { setup.stop() }
        let publish = try setup.server.token(["--type", "publish"])
        let (publisher, publisherOutput) = try setup.pcast(in: setup.topology.client, [
            "publish", "--server", "ws://\(setup.topology.serverIPv4):\(setup.port)/ws", "--auth-token", setup.auth, "--token", publish,
            "--width", "320", "--height", "180", "--fps", "15", "--bitrate", "300", "--audio", "none", "--seconds", "60",
        ], output: "nat-publish.out")
        defer { publisher.stop() }
        let streamId = try await setup.streamId(in: publisherOutput)
        let view = try setup.server.token(["--type", "stream", "--origin-stream-id", streamId])
        let (viewer, viewerOutput) = try setup.pcast(in: setup.topology.v6only, [
            "subscribe", "--server", "ws://[\(setup.topology.serverIPv6ForV6Only)]:\(setup.port)/ws", "--auth-token", setup.auth, "--token", view,
            "--sink", "null", "--stats", "--seconds", "50",
        ], output: "v6-subscribe.out")
        defer { viewer.stop() }
        // Flowing first.
        #expect(await eventually(.seconds(10)) { (videoPacketsPerSecond(viewerOutput).last ?? 0) > 50 },
                "the IPv6-only viewer got \(videoPacketsPerSecond(viewerOutput)) video packets: \((try? String(contentsOfFile: viewerOutput, encoding: .utf8)) ?? "")")
        // The router forgets the publisher's mapping: its packets now come from another port. The
        // conntrack calls block, so they run on threads of their own (a busy test process's
        // cooperative threads must stay free for the waits around them).
        let before = try await RawTCP.offload { Result { try setup.topology.outsidePorts() } }.get()
        #expect(!before.isEmpty, "the router maps none of the client's flows")
        try await RawTCP.offload { Result { try setup.topology.rebind() } }.get()
        let atRebind = videoPacketsPerSecond(viewerOutput).count
        // The viewer prints a line a second; five more lines are the rebinding's first seconds.
        #expect(await eventually(.seconds(20)) { videoPacketsPerSecond(viewerOutput).count >= atRebind + 5 },
                "\(videoPacketsPerSecond(viewerOutput))")
        let after = try await RawTCP.offload { Result { try setup.topology.outsidePorts() } }.get()
        #expect(!after.isEmpty && after.isDisjoint(with: before), "outside ports before \(before), after \(after): not a rebinding")
        let samples = videoPacketsPerSecond(viewerOutput)
        // From the third second after the rebinding, the count grows again (it is cumulative).
        if samples.count >= atRebind + 5 {
            let late = samples[(atRebind + 3)...]
            #expect(late.last! > late.first!, "no video after the rebinding: \(samples)")
        }
        viewer.stop()
        #expect(setup.server.process.isRunning)
    }

    @Test("an IPv6-only host publishes and a client behind NAT (IPv4) subscribes and receives the video")
    func ipv6PublisherNATViewer() async throws {
        let setup = try await Setup.start()
        defer { setup.stop() }
        let publish = try setup.server.token(["--type", "publish"])
        let (publisher, publisherOutput) = try setup.pcast(in: setup.topology.v6only, [
            "publish", "--server", "ws://[\(setup.topology.serverIPv6ForV6Only)]:\(setup.port)/ws", "--auth-token", setup.auth, "--token", publish,
            "--width", "320", "--height", "180", "--fps", "15", "--bitrate", "300", "--audio", "none", "--seconds", "15",
        ], output: "v6-publish.out")
        defer { publisher.stop() }
        let streamId = try await setup.streamId(in: publisherOutput)
        let view = try setup.server.token(["--type", "stream", "--origin-stream-id", streamId])
        let (viewer, viewerOutput) = try setup.pcast(in: setup.topology.client, [
            "subscribe", "--server", "ws://\(setup.topology.serverIPv4):\(setup.port)/ws", "--auth-token", setup.auth, "--token", view,
            "--sink", "null", "--stats", "--seconds", "6",
        ], output: "nat-subscribe.out")
        defer { viewer.stop() }
        #expect(await eventually(.seconds(12)) { (videoPacketsPerSecond(viewerOutput).last ?? 0) > 50 },
                "the viewer behind NAT got \(videoPacketsPerSecond(viewerOutput)): \((try? String(contentsOfFile: viewerOutput, encoding: .utf8)) ?? "")")
        let status = await RawTCP.offload { viewer.wait(within: .seconds(15)) }
        #expect(status == 0, "\((try? String(contentsOfFile: viewerOutput, encoding: .utf8)) ?? "")")
    }

    @Test("behind a router that drops UDP, the SDK publishes and subscribes over TCP (the reason printed: UDP did not answer), and an IPv6-only viewer still gets the stream over UDP")
    func udpBlockedFallsBackToTCP() async throws {
        let setup = try await Setup.start()
        defer { setup.stop() }
        try setup.topology.dropUDP()
        let publish = try setup.server.token(["--type", "publish"])
        let server = "ws://\(setup.topology.serverIPv4):\(setup.port)/ws"
        let (publisher, publisherOutput) = try setup.pcast(in: setup.topology.client, [
            "publish", "--server", server, "--auth-token", setup.auth, "--token", publish,
            "--width", "320", "--height", "180", "--fps", "15", "--bitrate", "300", "--audio", "none", "--seconds", "20",
        ], output: "blocked-publish.out")
        defer { publisher.stop() }
        let streamId = try await setup.streamId(in: publisherOutput)
        let said = (try? String(contentsOfFile: publisherOutput, encoding: .utf8)) ?? ""
        #expect(said.contains("media: tcp (UDP to \(setup.topology.serverIPv4):"), "\(said)")
        let view = try setup.server.token(["--type", "stream", "--origin-stream-id", streamId])
        let (viewer, viewerOutput) = try setup.pcast(in: setup.topology.client, [
            "subscribe", "--server", server, "--auth-token", setup.auth, "--token", view, "--sink", "null", "--stats", "--seconds", "8",
        ], output: "blocked-subscribe.out")
        defer { viewer.stop() }
        let (v6viewer, v6Output) = try setup.pcast(in: setup.topology.v6only, [
            "subscribe", "--server", "ws://[\(setup.topology.serverIPv6ForV6Only)]:\(setup.port)/ws", "--auth-token", setup.auth,
            "--token", view, "--sink", "null", "--stats", "--seconds", "8",
        ], output: "v6-subscribe.out")
        defer { v6viewer.stop() }
        #expect(await eventually(.seconds(15)) { (videoPacketsPerSecond(viewerOutput).last ?? 0) > 50 },
                "the viewer behind the UDP-dropping router: \((try? String(contentsOfFile: viewerOutput, encoding: .utf8)) ?? "")")
        #expect(((try? String(contentsOfFile: viewerOutput, encoding: .utf8)) ?? "").contains("media: tcp"))
        #expect(await eventually(.seconds(15)) { (videoPacketsPerSecond(v6Output).last ?? 0) > 50 },
                "the IPv6-only viewer: \((try? String(contentsOfFile: v6Output, encoding: .utf8)) ?? "")")
        #expect(((try? String(contentsOfFile: v6Output, encoding: .utf8)) ?? "").contains("media: udp"))
    }
}
