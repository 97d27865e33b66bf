import Foundation
import PCast
import PCastMedia
import PCastNode
import PCastProtocol
import PCastServer
import PCastTestSupport
import Synchronization

/// Two platform nodes sharing a real PostgreSQL (started as the tests start it):
/// - the latency one cascade hop adds: glass-to-glass of a 720p30 stream published on node 1,
///   watched on node 1 (direct) and on node 2 (pulled from node 1), in interleaved runs of the same
///   publisher, so both see the same machine load;
/// - cross-node chat: send on node 1 → delivered to a member on node 2.
public struct ClusterBenchmark {
    public struct Latency: Codable {
        public var path: String
        public var runs: Int
        public var frames: Int
        public var missing: Int
        /// Medians over the runs of each run's percentile, milliseconds.
        public var p50: Double
        public var p99: Double
    }

    public struct Result: Codable {
        public var playoutDelayMilliseconds: Int
        public var direct: Latency
        public var cascaded: Latency
        /// cascaded.p50 − direct.p50.
        public var addedByHopP50: Double
        public var chatMessages: Int
        public var chatP50: Double
        public var chatP99: Double
        /// The origin relay's I/O thread serving viewers itself, and through edge relays.
        public var fanout: [FanoutFigures]
        public static let goalHopP50 = 2.0, goalChatP50 = 15.0
    }

    public struct FanoutFigures: Codable {
        public var viewers: Int
        /// 0: the origin serves every viewer itself.
        public var edges: Int
        /// % of one core.
        public var originCPUPercent: Double
        /// Packets the viewers did not receive, %.
        public var viewerLossPercent: Double
    }

    public var seconds: Double = 5
    public var runs = 3
    public var playoutDelay = 40
    public var chatMessages = 300
    /// Viewers of the origin-CPU comparison, each served by the origin alone and behind `edges` edges.
    public var viewerCounts = [300, 900]
    public var edges = 3

    public func run() async throws -> Result {
        let postgres = try TestPostgres.server()
        let url = try PostgresURL(parsing: try postgres.newDatabase())
        let secret = SRTPFreeRandom.secret()
        var nodes: [LocalPlatform] = []
        for index in 1...2 {
            nodes.append(try await LocalPlatform.start(secret: secret) { configuration in
                configuration.database = .postgres(url)
                configuration.nodeId = "bench-node-\(index)"
            })
        }
        defer { for node in nodes { Task { await node.shutdown() } } }

        let publisherSDK = PCast(PCastOptions(uri: nodes[0].signalingURL))
        try await publisherSDK.start(authToken: try nodes[0].token(.auth))
        let media = try await publisherSDK.getUserMedia(.synthetic(width: 1280, height: 720))
        let meter = StreamMeter()
        try meter.stamp(media)
        let publisher = try await publisherSDK.publish(streamToken: try nodes[0].token(.publish), mediaStream: media)

        var direct: [StreamMeter.Snapshot] = []
        var cascaded: [StreamMeter.Snapshot] = []
        for _ in 0..<runs {
            for (index, node) in nodes.enumerated() {
                let snapshot = try await watch(publisher.streamId, on: node, meter: meter)
                if index == 0 { direct.append(snapshot) } else { cascaded.append(snapshot) }
            }
        }
        await publisher.stop()
        await media.stop()
        await publisherSDK.stop()

        let chat = try await chatLatencies(nodes)
        for node in nodes { await node.shutdown() }
        let fanout = try originFanout()
        let directLatency = Self.summary("node 1 → viewer on node 1", direct)
        let cascadedLatency = Self.summary("node 1 → node 2 → viewer on node 2", cascaded)
        return Result(playoutDelayMilliseconds: playoutDelay, direct: directLatency, cascaded: cascadedLatency,
                      addedByHopP50: cascadedLatency.p50 - directLatency.p50, chatMessages: chat.count,
                      chatP50: Self.percentile(chat, 50), chatP99: Self.percentile(chat, 99),
                      fanout: fanout)
    }

    /// The origin relay's CPU for each count of viewers of its own, then for the same viewers
    /// behind `edges` edge relays (relays only, one stream of 2.5 Mbit/s: what a cascade saves the
    /// origin). Every relay and every viewer's socket share this machine's cores.
    private func originFanout() throws -> [FanoutFigures] {
        var figures: [FanoutFigures] = []
        for viewers in viewerCounts {
            for edges in [0, edges] {
                var configuration = RelayFanoutBenchmark.Configuration(subscribers: viewers, duration: 5)
                configuration.includeReference = false
                configuration.edges = edges
                let result = try RelayFanoutBenchmark(configuration: configuration).run()
                figures.append(FanoutFigures(viewers: viewers, edges: edges, originCPUPercent: result.relay.cpuPercent,
                                             viewerLossPercent: result.relay.lossPercent))
            }
        }
        return figures
    }

    /// One measured run of a viewer on `node` (its first second, keyframe and jitter buffer, left out).
    private func watch(_ streamId: String, on node: LocalPlatform, meter: StreamMeter) async throws -> StreamMeter.Snapshot {
        let viewer = PCast(PCastOptions(uri: node.signalingURL, playoutDelay: .milliseconds(playoutDelay)))
        try await viewer.start(authToken: try node.token(.auth))
        let token = try node.token(.stream, originStreamId: streamId)
        var stream: MediaStream?
        let deadline = ContinuousClock.now + .seconds(10)
        while stream == nil {
            do {
                stream = try await viewer.subscribe(streamToken: token)
            } catch {
                // The other node hears of the stream through the change log, within moments.
                guard ContinuousClock.now < deadline else { throw error }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let renderer = stream!.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        _ = await renderer.start()
        try meter.watch(renderer, of: stream!)
        try await Task.sleep(for: .seconds(1))
        _ = meter.take()
        try await Task.sleep(for: .seconds(seconds))
        let snapshot = meter.take()
        await renderer.stop()
        await stream!.stop()
        await viewer.stop()
        return snapshot
    }

    /// Milliseconds from each send on node 1 to its delivery to a member on node 2.
    private func chatLatencies(_ nodes: [LocalPlatform]) async throws -> [Double] {
        let sender = PCast(PCastOptions(uri: nodes[0].signalingURL))
        try await sender.start(authToken: try nodes[0].token(.auth))
        let receiver = PCast(PCastOptions(uri: nodes[1].signalingURL))
        try await receiver.start(authToken: try nodes[1].token(.auth))
        _ = try await RoomService(pcast: sender).createRoom(RoomOptions(name: "Bench", type: .multiPartyChat, alias: "cluster-bench"))
        let senderRooms = RoomService(pcast: sender)
        _ = try await senderRooms.joinRoom(alias: "cluster-bench")
        let receiverRooms = RoomService(pcast: receiver)
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            do {
                _ = try await receiverRooms.joinRoom(alias: "cluster-bench")
                break
            } catch {
                guard ContinuousClock.now < deadline else { throw error }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let sent = Mutex<[String: ContinuousClock.Instant]>([:])
        let latencies = Mutex<[Double]>([])
        let listener = receiver.addEventListener { message in
            guard case .chatMessage(let chat) = message else { return }
            let now = ContinuousClock.now
            guard let at = sent.withLock({ $0[chat.message.message] }) else { return }
            let (s, a) = (now - at).components
            latencies.withLock { $0.append(Double(s) * 1000 + Double(a) / 1e15) }
        }
        let chat = ChatService(roomService: senderRooms)
        for index in 0..<chatMessages {
            let text = "message \(index)"
            sent.withLock { $0[text] = .now }
            _ = try await chat.sendMessageToRoom(text)
            try await Task.sleep(for: .milliseconds(10))
        }
        let end = ContinuousClock.now + .seconds(5)
        while latencies.withLock({ $0.count }) < chatMessages && ContinuousClock.now < end {
            try await Task.sleep(for: .milliseconds(20))
        }
        withExtendedLifetime(listener) {}
        await sender.stop()
        await receiver.stop()
        return latencies.withLock { $0 }.sorted()
    }

    private static func summary(_ path: String, _ snapshots: [StreamMeter.Snapshot]) -> Latency {
        func median(_ values: [Double]) -> Double {
            let sorted = values.sorted()
            return sorted.isEmpty ? .nan : sorted[sorted.count / 2]
        }
        return Latency(path: path, runs: snapshots.count, frames: snapshots.reduce(0) { $0 + $1.frames },
                       missing: snapshots.reduce(0) { $0 + $1.missing },
                       p50: median(snapshots.compactMap { $0.percentile(50) }), p99: median(snapshots.compactMap { $0.percentile(99) }))
    }

    private static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return .nan }
        return sorted[min(sorted.count - 1, max(0, Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1))]
    }

    public static func markdown(_ result: Result) -> String {
        func ms(_ value: Double) -> String { String(format: "%.1f", value) }
        var lines = [
            "## Cluster: two nodes on PostgreSQL",
            "",
            "Capture → the viewer's frame-ready hook (decoded, before its \(result.playoutDelayMilliseconds) ms playout delay: what a hop adds, not the screen), 720p30, interleaved runs of one publisher (medians of \(result.direct.runs) runs):",
            "",
            "| path | frames | missing | p50 ms | p99 ms |",
            "|---|---:|---:|---:|---:|",
        ]
        for latency in [result.direct, result.cascaded] {
            lines.append("| \(latency.path) | \(latency.frames) | \(latency.missing) | \(ms(latency.p50)) | \(ms(latency.p99)) |")
        }
        lines += [
            "",
            "| figure | measured | goal |",
            "|---|---:|---:|",
            "| added by one cascade hop, p50 | \(ms(result.addedByHopP50)) ms | ≤ \(ms(Result.goalHopP50)) ms |",
            "| chat node 1 → member on node 2, p50 (\(result.chatMessages) messages) | \(ms(result.chatP50)) ms | ≤ \(ms(Result.goalChatP50)) ms |",
            "| chat node 1 → member on node 2, p99 | \(ms(result.chatP99)) ms | |",
            "",
            "Origin relay, one 2.5 Mbit/s stream (relays only, loopback; every relay and viewer socket on this machine's cores):",
            "",
            "| viewers | served by | origin CPU (% of a core) | viewers' loss |",
            "|---:|---|---:|---:|",
        ]
        for row in result.fanout {
            let by = row.edges == 0 ? "the origin itself" : "\(row.edges) edge relays, one leg each"
            lines.append("| \(row.viewers) | \(by) | \(ms(row.originCPUPercent)) | \(String(format: "%.2f", row.viewerLossPercent)) % |")
        }
        lines.append("")
        return lines.joined(separator: "\n")
    }

    public init(seconds: Double = 5) {
        self.seconds = seconds
    }
}
