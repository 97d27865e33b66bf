import ArgumentParser
import Foundation
import GStreamer
import Histogram
import PCast
import PCastMedia
import PCastBenchmarks
import PCastNode
import PCastRelay
import PCastServer
import PCastTestSupport
import SRTP
import Synchronization

/// `pcast bench`: the performance figures, written as JSON and as a markdown table.
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Run the benchmarks; write bench.json and bench.md."
    )

    @Option(help: "Frames per run.")
    var frames = 900

    @Option(help: "Runs per variant (the median is reported).")
    var runs = 5

    @Option(help: "Directory for bench.json and bench.md.")
    var output = "bench-results"

    @Option(help: "Subscriber counts for the relay fan-out benchmark.")
    var fanout: [Int] = [10, 100, 500, 1000]

    @Option(help: "Seconds per end-to-end latency run.")
    var latencySeconds: Double = 10

    @Option(help: "Concurrent sessions in one room for the room fan-out benchmark.")
    var roomSessions = 2000

    @Flag(help: "Run only the room and chat benchmarks (writes rooms.json and rooms.md).")
    var roomsOnly = false

    @Flag(help: "Run only the loss-recovery benchmark (writes loss.json and loss.md).")
    var lossOnly = false

    @Flag(help: "Run only the ingest benchmark (writes ingest.json and ingest.md).")
    var ingestOnly = false

    @Flag(help: "Run only the connection-flood benchmark: 5,000 idle connections from one address against a pcast serve (writes connections.json and connections.md).")
    var connectionsOnly = false

    @Flag(help: "Run only the standard-WebRTC benchmarks: WHEP → first frame and glass-to-glass in headless Chromium, relay cost per WebRTC viewer (writes webrtc.json and webrtc.md).")
    var webrtcOnly = false

    @Flag(help: "Run only the GStreamer plugin benchmarks: CPU of gst-launch-1.0 … ! pcastsink against pcast publish, glass-to-glass through pcastsink → relay → pcastsrc against the SDK's (writes plugin.json and plugin.md; needs libgstpcast.so beside pcast).")
    var pluginOnly = false

    @Flag(help: "Run only the reconnection benchmark (writes reconnect.json and reconnect.md).")
    var reconnectOnly = false

    @Flag(help: "Run only the cluster benchmark: two nodes on a PostgreSQL it starts (as the tests do); the latency one cascade hop adds, cross-node chat (writes cluster.json and cluster.md).")
    var clusterOnly = false

    @Flag(help: "Run only the publish / unpublish and subscribe / unsubscribe cycle benchmarks (writes cycles.json and cycles.md); run it with MALLOC_ARENA_MAX=2 (make bench does) so RSS shows what is kept.")
    var cyclesOnly = false

    @Option(help: "Publish / unpublish and subscribe / unsubscribe cycles for the cycle benchmark.")
    var cycles = 1_000

    @Option(help: "The mp4 the ingest benchmark loops (H.264 + AAC); default: a 720p25 clip made with ffmpeg (as the tests make it).")
    var ingestFile: String?

    /// The ingest benchmark's clip.
    func ingestClip() async throws -> String {
        if let ingestFile { return ingestFile }
        return try await TestMedia.clip720p()
    }

    /// Writes `value` as `name`.json and `markdown` as `name`.md in the output directory, and prints the table.
    private func write<Value: Encodable>(_ value: Value, markdown: String, as name: String) throws {
        let directory = URL(fileURLWithPath: output)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(value).write(to: directory.appendingPathComponent("\(name).json"))
        try Data(markdown.utf8).write(to: directory.appendingPathComponent("\(name).md"))
        print(markdown)
    }

    func run() async throws {
        PCastCommand.bootstrapLogging()
        if connectionsOnly {
            let result = try await ConnectionFloodBenchmark().run()
            try write(result, markdown: ConnectionFloodBenchmark.markdown(result), as: "connections")
            return
        }
        if webrtcOnly {
            // make bench runs it with the default viewer counts; --fanout and --latency-seconds choose others.
            let counts = fanout == [10, 100, 500, 1000] ? WebRTCBenchmark().fanoutCounts : fanout
            let result = try await WebRTCBenchmark(seconds: latencySeconds, fanoutCounts: counts).run()
            try write(result, markdown: WebRTCBenchmark.markdown(result), as: "webrtc")
            return
        }
        if pluginOnly {
            let result = try await PluginBenchmark(seconds: latencySeconds).run()
            try write(result, markdown: PluginBenchmark.markdown(result), as: "plugin")
            return
        }
        if clusterOnly {
            let result = try await ClusterBenchmark().run()
            try write(result, markdown: ClusterBenchmark.markdown(result), as: "cluster")
            return
        }
        if reconnectOnly {
            let result = try await ReconnectBenchmark().run()
            try write(result, markdown: ReconnectBenchmark.markdown(result), as: "reconnect")
            return
        }
        if cyclesOnly {
            let result = CycleResults(publish: try await Self.publishCycles(cycles), subscribe: try await Self.subscribeCycles(cycles))
            try write(result, markdown: Self.cyclesMarkdown(result), as: "cycles")
            return
        }
        if ingestOnly {
            let clip = try await ingestClip()
            let result = IngestResults(pipeline: try await IngestBenchmark(file: clip, seconds: 10).run(),
                                       startToFirstFrame: try await IngestStartBenchmark(file: clip).run())
            let directory = URL(fileURLWithPath: output)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(result).write(to: directory.appendingPathComponent("ingest.json"))
            let markdown = Self.ingestMarkdown(result)
            try Data(markdown.utf8).write(to: directory.appendingPathComponent("ingest.md"))
            print(markdown)
            return
        }
        if lossOnly {
            let rows = try await LossRecoveryBenchmark().run()
            let directory = URL(fileURLWithPath: output)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(rows).write(to: directory.appendingPathComponent("loss.json"))
            let markdown = LossRecoveryBenchmark.markdown(rows, seconds: LossRecoveryBenchmark().seconds)
            try Data(markdown.utf8).write(to: directory.appendingPathComponent("loss.md"))
            print(markdown)
            return
        }
        if roomsOnly {
            let rooms = try await roomBenchmark()
            let directory = URL(fileURLWithPath: output)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try encoder.encode(rooms).write(to: directory.appendingPathComponent("rooms.json"))
            let markdown = BenchReport.roomsMarkdown(rooms).joined(separator: "\n") + "\n"
            try Data(markdown.utf8).write(to: directory.appendingPathComponent("rooms.md"))
            print(markdown)
            return
        }
        let probe = try await ProbeBenchmark(frames: frames, runs: runs).run()
        let srtp = try SRTPBenchmark(packets: 200_000).run()
        let hooks = try await FrameHookBenchmark(frames: frames, conversionThreads: 1).run()
        let captureEncode = try await CaptureEncodeBenchmark(seconds: 5, runs: 3).run()
        let platform = try await LocalPlatform.start()
        var latencyRuns = EndToEndBenchmark(signalingURL: platform.signalingURL, seconds: latencySeconds,
                                            playoutDelays: EndToEndBenchmark.tablePlayoutDelays) { type, origin in
            try platform.token(type, originStreamId: origin)
        }
        latencyRuns.lossPercents = EndToEndBenchmark.tableLossPercents
        latencyRuns.relayPort = platform.relay.mediaPort
        let endToEnd = try await latencyRuns.run()
        await platform.shutdown()
        let rooms = try await roomBenchmark()
        let loss = try await LossRecoveryBenchmark().run()
        let reconnect = try await ReconnectBenchmark().run()
        let clip = try await ingestClip()
        let ingest = IngestResults(pipeline: try await IngestBenchmark(file: clip, seconds: 10).run(),
                                   startToFirstFrame: try await IngestStartBenchmark(file: clip).run())
        var fanouts: [RelayFanoutBenchmark.Result] = []
        for subscribers in fanout {
            fanouts.append(try RelayFanoutBenchmark(configuration: .init(subscribers: subscribers, duration: 5)).run())
        }
        let report = BenchReport(
            date: ISO8601DateFormatter().string(from: Date()),
            machine: BenchReport.Machine.current(),
            gstreamer: GStreamerRuntime.version,
            probe: probe,
            srtp: srtp,
            frameHooks: hooks,
            captureEncode: captureEncode,
            endToEnd: endToEnd,
            fanout: fanouts,
            rooms: rooms,
            ingest: ingest,
            lossRecovery: loss,
            reconnect: reconnect)
        let directory = URL(fileURLWithPath: output)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(report).write(to: directory.appendingPathComponent("bench.json"))
        let markdown = report.markdown()
        try Data(markdown.utf8).write(to: directory.appendingPathComponent("bench.md"))
        print(markdown)
        print("written: \(directory.path)/bench.json, \(directory.path)/bench.md")
        try await EchoBenchmark.run(output: directory)
    }
}

extension BenchCommand {
    static func ingestMarkdown(_ results: IngestResults) -> String {
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

    struct CycleResults: Codable {
        var publish: PublishCycleBenchmark.Result
        var subscribe: PublishCycleBenchmark.Result
    }

    static func cyclesMarkdown(_ results: CycleResults) -> String {
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

    func roomBenchmark() async throws -> RoomBenchmark.Result {
        let platform = try await LocalPlatform.start()
        var benchmark = RoomBenchmark(signalingURL: platform.signalingURL) { try platform.token(.auth) }
        benchmark.sessions = roomSessions
        do {
            let result = try await benchmark.run()
            await platform.shutdown()
            return result
        } catch {
            await platform.shutdown()
            throw error
        }
    }
}

struct BenchReport: Codable {
    struct Machine: Codable {
        let cores: Int
        let cpu: String
        static func current() -> Machine {
            let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
            let model = cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
                .map { String($0.split(separator: ":", maxSplits: 1).last ?? "").trimmingCharacters(in: .whitespaces) } ?? "unknown"
            return Machine(cores: ProcessInfo.processInfo.activeProcessorCount, cpu: model)
        }
    }
    let date: String
    let machine: Machine
    let gstreamer: String
    let probe: ProbeBenchmark.Result
    let srtp: [SRTPBenchmark.ProfileResult]
    let frameHooks: [FrameHookBenchmark.Result]
    let captureEncode: CaptureEncodeBenchmark.Result
    let endToEnd: EndToEndBenchmark.Result
    let fanout: [RelayFanoutBenchmark.Result]
    let rooms: RoomBenchmark.Result
    let ingest: IngestResults
    let lossRecovery: [LossRecoveryBenchmark.Row]
    let reconnect: ReconnectBenchmark.Result

    func markdown() -> String {
        var lines = [
            "## Pad probe cost, 720p I420 (\(probe.frames) frames per run, median of \(probe.runs) runs)",
            "",
            "Machine: \(machine.cores) cores, \(machine.cpu); \(gstreamer). Goal: read + write ≤ \(probe.goalMilliseconds) ms per frame.",
            "Time in probe is measured around the probe's work on the streaming thread; the CPU columns are whole-process",
            "figures whose difference includes run-to-run noise of the same order as the probe itself.",
            "",
            "| variant | process CPU per frame (ms) | overhead vs no probe (ms) | time in probe p50 / p99 (ms) |",
            "|---|---:|---:|---:|",
        ]
        for variant in probe.variants {
            let overhead = variant.overheadMilliseconds.map { String(format: "%.3f", $0) } ?? "—"
            let inProbe = variant.probeP50Milliseconds.map { p50 in
                String(format: "%.3f / %.3f", p50, variant.probeP99Milliseconds ?? 0)
            } ?? "—"
            lines.append("| \(variant.name) | \(String(format: "%.3f", variant.cpuMillisecondsPerFrame)) | \(overhead) | \(inProbe) |")
        }
        lines += [
            "",
            "## SRTP protect, 1200-byte RTP packets, one thread (best of 3 runs of 200,000)",
            "",
            "| profile | packets per second | µs per packet |",
            "|---|---:|---:|",
        ]
        for result in srtp {
            lines.append("| \(result.profile) | \(Int(result.packetsPerSecond)) | \(String(format: "%.2f", result.microsecondsPerPacket)) |")
        }
        lines += [
            "",
            "## Frame-ready hook, 720p I420, time inside the callback (goal for read(format: .bgra) + write: ≤ \(FrameHookBenchmark.goalMilliseconds) ms)",
            "",
            "| variant | frames | mean (ms) | p50 (ms) | p99 (ms) |",
            "|---|---:|---:|---:|---:|",
        ]
        for result in frameHooks {
            lines.append("| \(result.variant) | \(result.frames) | \(String(format: "%.3f", result.meanMilliseconds)) | \(String(format: "%.3f", result.p50Milliseconds)) | \(String(format: "%.3f", result.p99Milliseconds)) |")
        }
        lines.append("")
        lines.append("### Capture → frame hook → x264 720p30 through the SDK vs gst-launch-1.0 (median of \(captureEncode.runs) × \(Int(captureEncode.seconds)) s; goal ratio ≤ \(CaptureEncodeBenchmark.goalRatio))")
        lines.append("")
        lines.append("| SDK CPU (% of a core) | gst-launch-1.0 CPU | ratio | frames hooked | hook drops |")
        lines.append("|---|---|---|---|---|")
        lines.append("| \(String(format: "%.1f", captureEncode.sdkCPU)) | \(String(format: "%.1f", captureEncode.gstLaunchCPU)) | \(String(format: "%.3f", captureEncode.ratio)) | \(captureEncode.sdkFrames) | \(captureEncode.hookDropped) |")
        lines.append("")
        lines.append("## Glass-to-glass latency, 720p30 H.264 through the relay (capture → presented by the viewer's sink, after its clock wait; goal p50 ≤ \(EndToEndBenchmark.goalP50) ms, p99 ≤ \(EndToEndBenchmark.goalP99) ms at the screen)")
        lines.append("")
        lines.append("Beside it, capture → decoded frame (the renderer's frame-ready hook, before the sink waits out the playout delay).")
        lines.append("")
        lines.append("Loss is on the viewer's leg, each way, through the impairment proxy (before SRTP, as a network loses packets).")
        lines.append("")
        lines.append("| playout delay (ms) | loss | frames | delivered | freeze total (ms) | longest freeze (ms) | screen p50 (ms) | screen p90 (ms) | screen p99 (ms) | decoded p50 (ms) | decoded p99 (ms) |")
        lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for run in endToEnd.latency {
            lines.append(String(format: "| %d | %.0f %% | %d | %.1f %% | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f |", run.playoutDelayMilliseconds, run.lossPercent,
                                run.frames, run.deliveredPercent, run.freezeMilliseconds, run.longestFreezeMilliseconds,
                                run.screenP50, run.screenP90, run.screenP99, run.p50, run.p99))
        }
        lines.append("")
        lines.append(String(format: "Time to first frame, %d joins of a running stream (subscribe call → first decoded frame; goal p50 ≤ %.0f ms): p50 %.1f ms, p99 %.1f ms, max %.1f ms",
                            endToEnd.firstFrame.joins, EndToEndBenchmark.goalFirstFrameP50, endToEnd.firstFrame.p50, endToEnd.firstFrame.p99, endToEnd.firstFrame.maximum))
        lines.append("")
        lines.append("## Relay fan-out: one 2.5 Mbps stream (1200-byte packets) to N subscribers, against `gst-launch-1.0 udpsrc ! multiudpsink` (no crypto)")
        lines.append("")
        lines.append("| N | relay CPU % | relay loss % | subscribers/core | reference CPU % | reference loss % | CPU ratio |")
        lines.append("|---:|---:|---:|---:|---:|---:|---:|")
        for run in fanout {
            let reference = run.reference
            lines.append(String(format: "| %d | %.1f | %.2f | %.0f | %@ | %@ | %@ |", run.configuration.subscribers, run.relay.cpuPercent, run.relay.lossPercent, run.relay.subscribersPerCore,
                                reference.map { String(format: "%.1f", $0.cpuPercent) } ?? "–", reference.map { String(format: "%.2f", $0.lossPercent) } ?? "–",
                                run.cpuRatio.map { String(format: "%.2f", $0) } ?? "–"))
        }
        lines += Self.roomsMarkdown(rooms)
        lines += ["", BenchCommand.ingestMarkdown(ingest)]
        lines += ["", LossRecoveryBenchmark.markdown(lossRecovery, seconds: LossRecoveryBenchmark().seconds)]
        lines += ["", ReconnectBenchmark.markdown(reconnect)]
        return lines.joined(separator: "\n") + "\n"
    }

    static func roomsMarkdown(_ rooms: RoomBenchmark.Result) -> [String] {
        [
            "",
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
        ]
    }
}

/// Cost of a Swift pad probe on 720p I420 frames: none, read-only, read + write, same run.
struct ProbeBenchmark {
    let frames: Int
    let runs: Int

    enum Variant: String, CaseIterable, Codable {
        case none = "no probe"
        case read = "read (sum every byte)"
        case readWrite = "read + write (sum, then invert luma)"
    }

    struct VariantResult: Codable {
        let name: String
        let cpuMillisecondsPerFrame: Double
        let overheadMilliseconds: Double?
        let probeP50Milliseconds: Double?
        let probeP99Milliseconds: Double?
    }

    struct Result: Codable {
        let frames: Int
        let runs: Int
        let goalMilliseconds: Double
        let variants: [VariantResult]
    }

    private struct Sample {
        let cpuPerFrame: Double
        let probeNanoseconds: [UInt64]
    }

    func run() async throws -> Result {
        var samples: [Variant: [Sample]] = [:]
        // Interleave the variants so drift on a shared machine hits them alike.
        for _ in 0..<runs {
            for variant in Variant.allCases {
                samples[variant, default: []].append(try await measure(variant))
            }
        }
        let baseline = median(samples[.none]!.map(\.cpuPerFrame))
        let results = Variant.allCases.map { variant -> VariantResult in
            let runs = samples[variant]!
            let cpu = median(runs.map(\.cpuPerFrame))
            var histogram = Histogram<UInt64>(highestTrackableValue: 10_000_000_000)
            for run in runs { for value in run.probeNanoseconds { _ = histogram.record(max(value, 1)) } }
            let hasProbe = variant != .none
            return VariantResult(
                name: variant.rawValue,
                cpuMillisecondsPerFrame: cpu * 1000,
                overheadMilliseconds: hasProbe ? (cpu - baseline) * 1000 : nil,
                probeP50Milliseconds: hasProbe ? Double(histogram.valueAtPercentile(50)) / 1e6 : nil,
                probeP99Milliseconds: hasProbe ? Double(histogram.valueAtPercentile(99)) / 1e6 : nil)
        }
        return Result(frames: frames, runs: runs, goalMilliseconds: 0.3, variants: results)
    }

    private func measure(_ variant: Variant) async throws -> Sample {
        let pipeline = try Pipeline(description: """
            videotestsrc num-buffers=\(frames) pattern=black ! video/x-raw,format=I420,width=1280,height=720,framerate=30/1 \
            ! identity name=hook ! fakesink sync=false
            """)
        let timings = Mutex<[UInt64]>([])
        timings.withLock { $0.reserveCapacity(frames) }
        let lumaBytes = 1280 * 720
        if variant != .none {
            let writes = variant == .readWrite
            try pipeline.element(named: "hook").staticPad("src").addBufferProbe { buffer in
                let start = DispatchTime.now().uptimeNanoseconds
                let sum = (try? buffer.withUnsafeBytes { raw -> UInt64 in
                    var total: UInt64 = 0
                    for word in raw.bindMemory(to: UInt64.self) { total &+= word }
                    return total
                }) ?? 0
                if writes {
                    try? buffer.withUnsafeMutableBytes { raw in
                        let words = UnsafeMutableRawBufferPointer(rebasing: raw[0..<lumaBytes]).bindMemory(to: UInt64.self)
                        for index in words.indices { words[index] ^= ~0 }
                    }
                }
                let elapsed = DispatchTime.now().uptimeNanoseconds - start
                timings.withLock { $0.append(elapsed) }
                // Keep the sum observable so the read is not optimised away.
                if sum == 1 { buffer.offset = 1 }
                return .pass
            }
        }
        let before = processCPUSeconds()
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(120))
        let after = processCPUSeconds()
        await pipeline.stop()
        return Sample(cpuPerFrame: (after - before) / Double(frames), probeNanoseconds: timings.withLock { $0 })
    }
}

func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
        + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

/// The ingest benchmarks: the pipeline's CPU, and the platform's start → first frame.
struct IngestResults: Codable, Sendable {
    let pipeline: IngestBenchmark.Result
    let startToFirstFrame: IngestStartBenchmark.Result
}
