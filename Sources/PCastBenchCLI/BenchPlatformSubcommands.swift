import ArgumentParser
import Foundation
import PCast
import PCastBenchmarks
import PCastNode
import PCastTestSupport

// The platform benchmarks of `pcast-bench`: rooms, loss recovery, reconnection, ingest, cycles,
// connection flood, standard WebRTC, the GStreamer elements, the cluster.

extension BenchCommand {
    /// `pcast-bench rooms`: chat latency, history pages and member-change fan-out in one room.
    struct Rooms: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "rooms",
            abstract: "Measure chat send → deliver, history pages and member-change fan-out through the embedded platform."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Concurrent sessions in one room for the member-change fan-out.")
        var roomSessions = 2000

        func measure() async throws {
            let platform = try await LocalPlatform.start()
            var benchmark = RoomBenchmark(signalingURL: platform.signalingURL) { try platform.token(.auth) }
            benchmark.sessions = roomSessions
            let result: RoomBenchmark.Result
            do {
                result = try await benchmark.run()
            } catch {
                await platform.shutdown()
                throw error
            }
            await platform.shutdown()
            try common.write(result, markdown: Self.markdown(result), as: Self.name)
        }

        static func markdown(_ rooms: RoomBenchmark.Result) -> String {
            [
                "## Rooms and chat through the embedded platform (signaling over loopback WebSockets, SQLite store)",
                "",
                "| measure | figure | goal |",
                "|---|---:|---:|",
                String(format: "| chat send → deliver, %d members, %d messages (%d deliveries): p50 | %.2f ms | ≤ 10 ms |",
                       rooms.chatMembers, rooms.chatMessages, rooms.chatDeliveries, rooms.chatLatencyP50Milliseconds),
                String(format: "| chat send → deliver: p99 | %.2f ms | |", rooms.chatLatencyP99Milliseconds),
                String(format: "| history page of 100 (of %d stored): p50 / p99 | %.2f / %.2f ms | ≤ 20 ms |",
                       rooms.historyMessagesStored, rooms.historyPageP50Milliseconds, rooms.historyPageP99Milliseconds),
                String(format: "| %d sessions join one room | %.1f s | |", rooms.sessions, rooms.joinSeconds),
                String(format: "| member change → all %d sessions (median of %d; all: %@) | %.0f ms | ≤ 1000 ms |",
                       rooms.sessions, rooms.memberChangeFanoutMilliseconds.count,
                       rooms.memberChangeFanoutMilliseconds.map { String(format: "%.0f", $0) }.joined(separator: ", "),
                       rooms.memberChangeFanoutMedianMilliseconds),
            ].joined(separator: "\n") + "\n"
        }
    }

    /// `pcast-bench loss`: frames delivered and freezes with loss on the subscriber's leg.
    struct Loss: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "loss",
            abstract: "Measure loss recovery: frames delivered and freezes with uniform and bursty loss on the subscriber's leg."
        )

        @OptionGroup var common: BenchOptions

        func measure() async throws {
            let benchmark = LossRecoveryBenchmark()
            let rows = try await benchmark.run()
            try common.write(rows, markdown: LossRecoveryBenchmark.markdown(rows, seconds: benchmark.seconds), as: Self.name)
        }
    }

    /// `pcast-bench simulcast`: what three layers cost the publisher, and how fast a viewer changes layer.
    struct Simulcast: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "simulcast",
            abstract: "Measure simulcast: publisher CPU with three layers against one, and layer switch times when a viewer's leg is capped at 500 kbit/s and lifted."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Caps and lifts to time.")
        var switches = 3

        func measure() async throws {
            var benchmark = SimulcastBenchmark()
            benchmark.switches = switches
            let result = try await benchmark.run()
            try common.write(result, markdown: SimulcastBenchmark.markdown(result), as: Self.name)
        }
    }

    /// `pcast-bench reconnect`: how long publisher and viewer take to come back after a signaling outage.
    struct Reconnect: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "reconnect",
            abstract: "Measure reconnection after signaling outages of 5 and 30 s: time back online, sessions resumed, frames kept."
        )

        @OptionGroup var common: BenchOptions

        func measure() async throws {
            let result = try await ReconnectBenchmark().run()
            try common.write(result, markdown: ReconnectBenchmark.markdown(result), as: Self.name)
        }
    }

    /// `pcast-bench ingest`: the CPU of ingesting an mp4, and ingest start → first frame.
    struct Ingest: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "ingest",
            abstract: "Measure ingest of a looped mp4 (CPU passed through and re-encoded) and ingest start → first frame at a subscriber."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "The mp4 to loop (H.264 + AAC); default: a 720p25 clip made with ffmpeg (as the tests make it).")
        var ingestFile: String?

        func measure() async throws {
            let clip: String
            if let ingestFile { clip = ingestFile } else { clip = try await TestMedia.clip720p() }
            let result = IngestResults(pipeline: try await IngestBenchmark(file: clip, seconds: 10).run(),
                                       startToFirstFrame: try await IngestStartBenchmark(file: clip).run())
            try common.write(result, markdown: Self.markdown(result), as: Self.name)
        }

        static func markdown(_ results: IngestResults) -> String {
            let result = results.pipeline, start = results.startToFirstFrame
            return [
                "## Ingest of a 720p25 H.264 + AAC mp4, looped from a file, \(Int(result.seconds)) s (process CPU, % of one core)",
                "",
                "| mode | CPU % | RTP packets | goal |",
                "|---|---:|---:|---:|",
                String(format: "| H.264 passed through, AAC → Opus | %.1f | %d | ≤ 5 %% |", result.passthroughCPUPercent, result.passthroughPackets),
                String(format: "| re-encoded (x264 ultrafast, exact 25 fps), AAC → Opus | %.1f | %d | |", result.transcodeCPUPercent, result.transcodePackets),
                "",
                "## Ingest start → first frame at a subscriber (publishRemote of the mp4 → the viewer's first decoded frame, \(start.runs) runs)",
                "",
                "| p50 ms | max ms | runs (ms) | goal |",
                "|---:|---:|---|---:|",
                String(format: "| %.0f | %.0f | %@ | ≤ %.0f ms |", start.p50, start.maximum,
                       start.milliseconds.map { String(format: "%.0f", $0) }.joined(separator: ", "), IngestStartBenchmark.Result.goalMilliseconds),
                "",
            ].joined(separator: "\n")
        }
    }

    /// `pcast-bench cycles`: what publish / unpublish and subscribe / unsubscribe cycles leave behind.
    struct Cycles: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "cycles",
            abstract: "Measure publish / unpublish and subscribe / unsubscribe cycles: time per cycle, RSS, threads and descriptors kept.",
            discussion: "Run it with MALLOC_ARENA_MAX=2 (pcast-bench all and make bench do) so that RSS shows what is kept."
        )

        static var environment: [String: String] { ["MALLOC_ARENA_MAX": "2"] }

        @OptionGroup var common: BenchOptions

        @Option(help: "Cycles of each kind.")
        var cycles = 1_000

        struct Results: Codable {
            var publish: PublishCycleBenchmark.Result
            var subscribe: PublishCycleBenchmark.Result
        }

        func measure() async throws {
            let result = Results(publish: try await Self.publishCycles(cycles), subscribe: try await Self.subscribeCycles(cycles))
            try common.write(result, markdown: Self.markdown(result), as: Self.name)
        }

        /// Publish / unpublish cycles with the embedded platform in this process.
        static func publishCycles(_ cycles: Int) async throws -> PublishCycleBenchmark.Result {
            let platform = try await LocalPlatform.start()
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await sdk.getUserMedia(.synthetic())
            let result = try await PublishCycleBenchmark(cycles: cycles, warmUpCycles: 200).run(sdk: sdk, media: media) {
                try platform.token(.publish)
            }
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
            return result
        }

        /// Subscribe / unsubscribe cycles (each rendered to its first frame) on one stream that keeps
        /// flowing, with the embedded platform in this process.
        static func subscribeCycles(_ cycles: Int) async throws -> PublishCycleBenchmark.Result {
            let platform = try await LocalPlatform.start()
            let sdk = PCast(PCastOptions(uri: platform.signalingURL))
            try await sdk.start(authToken: try platform.token(.auth))
            let media = try await sdk.getUserMedia(.synthetic())
            let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media)
            let streamId = publisher.streamId
            let result = try await PublishCycleBenchmark(cycles: cycles, warmUpCycles: 100).runSubscriptions(viewer: sdk) {
                try platform.token(.stream, originStreamId: streamId)
            }
            await publisher.stop()
            await sdk.stop()
            await media.stop()
            await platform.shutdown()
            return result
        }

        static func markdown(_ results: Results) -> String {
            let arenas = ProcessInfo.processInfo.environment["MALLOC_ARENA_MAX"].map { "MALLOC_ARENA_MAX=\($0)" } ?? "default malloc arenas"
            func row(_ name: String, _ result: PublishCycleBenchmark.Result) -> String {
                String(format: "| %@ | %d | %d | %.1f ms | %.2f MB | %d → %d | %d → %d | ≤ 5 MB |", name, result.cycles, result.warmUpCycles,
                       result.cycleMedianMilliseconds, Double(result.residentGrowthKiB) / 1024, result.before.threads, result.after.threads,
                       result.before.openDescriptors, result.after.openDescriptors)
            }
            return [
                "## Cycles (SDK + embedded platform in one process, 640×360 video + audio, \(arenas))",
                "",
                "| cycle | cycles | warm-up | p50 | RSS growth | threads | descriptors | goal |",
                "|---|---:|---:|---:|---:|---|---|---:|",
                row("publish / unpublish", results.publish),
                row("subscribe / render first frame / unsubscribe", results.subscribe),
                "",
            ].joined(separator: "\n")
        }
    }

    /// `pcast-bench connections`: a flood of idle connections from one address against `pcast serve`.
    struct Connections: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "connections",
            abstract: "Measure 5,000 idle connections from one address against a pcast serve: another client's /healthz latency, the server's descriptors, threads and RSS."
        )

        @OptionGroup var common: BenchOptions

        func measure() async throws {
            let result = try await ConnectionFloodBenchmark().run()
            try common.write(result, markdown: ConnectionFloodBenchmark.markdown(result), as: Self.name)
        }
    }

    /// `pcast-bench webrtc`: standard WebRTC viewers (headless Chromium) of an SDK publisher.
    struct WebRTC: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "webrtc",
            abstract: "Measure standard WebRTC: WHEP → first frame and glass-to-glass in headless Chromium, relay cost per WebRTC viewer."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Seconds of the glass-to-glass run.")
        var latencySeconds: Double = 10

        @Option(help: "A WebRTC viewer count for the relay-cost runs (repeat for several).")
        var viewers: [Int] = WebRTCBenchmark().fanoutCounts

        func measure() async throws {
            let result = try await WebRTCBenchmark(seconds: latencySeconds, fanoutCounts: viewers).run()
            try common.write(result, markdown: WebRTCBenchmark.markdown(result), as: Self.name)
        }
    }

    /// `pcast-bench hls`: live HLS latency at an HLS viewer, and segment serving under load.
    struct HLS: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "hls",
            abstract: "Measure live HLS: capture → frame at an SDK viewer playing HLS (against a real-time viewer), and serving parts / the playlist to 1,000 wrk connections.",
            discussion: "Needs wrk (make bench installs it)."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Seconds each viewer is measured.")
        var latencySeconds: Double = 15

        @Option(help: "Seconds of each wrk run.")
        var throughputSeconds: Double = 10

        @Option(help: "wrk's connections.")
        var connections = 1000

        func measure() async throws {
            let result = try await HLSBenchmark(seconds: latencySeconds, throughputSeconds: throughputSeconds, connections: connections).run()
            try common.write(result, markdown: HLSBenchmark.markdown(result), as: Self.name)
        }
    }

    /// `pcast-bench plugin`: the GStreamer elements (pcastsink, pcastsrc) against the SDK.
    struct Plugin: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "plugin",
            abstract: "Measure the GStreamer elements: CPU of gst-launch-1.0 … ! pcastsink against pcast publish, glass-to-glass through pcastsink → relay → pcastsrc against the SDK's.",
            discussion: "Needs libgstpcast.so beside pcast (make bench builds it)."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Seconds per latency run.")
        var latencySeconds: Double = 10

        func measure() async throws {
            let result = try await PluginBenchmark(seconds: latencySeconds).run()
            try common.write(result, markdown: PluginBenchmark.markdown(result), as: Self.name)
        }
    }

    /// `pcast-bench cluster`: two nodes on one PostgreSQL.
    struct Cluster: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "cluster",
            abstract: "Measure a two-node cluster on a PostgreSQL it starts: the latency one cascade hop adds, cross-node chat."
        )

        @OptionGroup var common: BenchOptions

        func measure() async throws {
            let result = try await ClusterBenchmark().run()
            try common.write(result, markdown: ClusterBenchmark.markdown(result), as: Self.name)
        }
    }
}

/// The ingest benchmarks: the pipeline's CPU, and the platform's start → first frame.
struct IngestResults: Codable, Sendable {
    let pipeline: IngestBenchmark.Result
    let startToFirstFrame: IngestStartBenchmark.Result
}
