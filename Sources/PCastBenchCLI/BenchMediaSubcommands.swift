import ArgumentParser
import Foundation
import GStreamer
import PCast
import PCastBenchmarks
import PCastMedia
import PCastNode
import PCastRelay
import PCastTestSupport

// The media-path benchmarks of `pcast-bench`: probes, SRTP, frame hooks, capture → encode,
// glass-to-glass latency, relay fan-out, echo cancellation.

extension BenchCommand {
    /// `pcast-bench probe`: the cost of a Swift pad probe on 720p I420 frames.
    struct Probe: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "probe",
            abstract: "Measure the CPU cost of a Swift pad probe (none, read, read + write) on 720p I420 frames."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Frames per run.")
        var frames = 900

        @Option(help: "Runs per variant (the median is reported).")
        var runs = 5

        struct Report: Codable {
            let machine: BenchMachine
            let gstreamer: String
            let result: ProbeBenchmark.Result
        }

        func measure() async throws {
            let report = Report(machine: .current(), gstreamer: GStreamerRuntime.version,
                                result: try await ProbeBenchmark(frames: frames, runs: runs).run())
            try common.write(report, markdown: Self.markdown(report), as: Self.name)
        }

        static func markdown(_ report: Report) -> String {
            let probe = report.result, machine = report.machine
            var lines = [
                "## Pad probe cost, 720p I420 (\(probe.frames) frames per run, median of \(probe.runs) runs)",
                "",
                "Machine: \(machine.cores) cores, \(machine.cpu); \(report.gstreamer). Goal: read + write ≤ \(probe.goalMilliseconds) ms per frame.",
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
            return lines.joined(separator: "\n") + "\n"
        }
    }

    /// `pcast-bench srtp`: SRTP protect throughput per profile.
    struct SRTPProtect: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "srtp",
            abstract: "Measure SRTP protect throughput of 1200-byte RTP packets on one thread: per profile, OpenSSL against libsrtp2 for AES-GCM, one session and 1,000."
        )

        @OptionGroup var common: BenchOptions

        func measure() async throws {
            let results = try SRTPBenchmark(packets: 200_000).run()
            try common.write(results, markdown: Self.markdown(results), as: Self.name)
        }

        static func markdown(_ results: [SRTPBenchmark.ProfileResult]) -> String {
            var lines = [
                "## SRTP protect, 1200-byte RTP packets, one thread (best of 3 runs of 200,000)",
                "",
                "With 1,000 sessions each packet goes to the next session, as a relay's fan-out protects: each session's state is out of cache.",
                "The relay seals outbound AES-GCM RTP through OpenSSL's EVP; libsrtp2 (Debian's, AES-GCM through NSS) is the reference.",
                "",
                "| profile | sealed by | sessions | packets per second | µs per packet |",
                "|---|---|---:|---:|---:|",
            ]
            for result in results {
                lines.append("| \(result.profile) | \(result.sealer) | \(result.sessions) | \(Int(result.packetsPerSecond)) | \(String(format: "%.2f", result.microsecondsPerPacket)) |")
            }
            return lines.joined(separator: "\n") + "\n"
        }
    }

    /// `pcast-bench svc`: the relay's CPU per viewer for a scalable stream's layer dropping.
    struct SVC: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "svc",
            abstract: "Measure the relay's CPU per viewer (router decisions and SRTP) for a VP9 L3T3_KEY stream whose viewers get different layers, against plain forwarding."
        )

        @OptionGroup var common: BenchOptions

        func measure() async throws {
            let results = try SVCRelayBenchmark().run()
            try common.write(results, markdown: Self.markdown(results), as: Self.name)
        }

        static func markdown(_ results: [SVCRelayBenchmark.Result]) -> String {
            var lines = [
                "## Relay CPU per viewer: SVC layer dropping against plain forwarding (best of 3 runs of 10 s of video)",
                "",
                "A VP9 L3T3_KEY stream as Chromium sends it (30 fps; 7 packets a picture: 1, 2 and 4 for the three spatial layers), 100 viewers:",
                "half limit themselves to 300 kbit/s (the relay sends them S1), half take everything (the top layer alone between keyframes).",
                "Plain forwarding sends the same packets to every viewer as one encoding. Each sent packet is sealed (AES-GCM, a session per viewer);",
                "the router's share is its decisions alone (reading the layers, choosing, renumbering). One thread, no sockets.",
                "",
                "| forwarding | viewers | CPU µs per viewer per second | of which the router | packets per viewer per second | kbit/s per viewer |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            for result in results {
                lines.append("| \(result.mode) | \(result.viewers) | \(String(format: "%.0f", result.microsecondsPerViewerSecond)) | \(String(format: "%.0f", result.routerMicrosecondsPerViewerSecond)) | \(String(format: "%.0f", result.packetsPerViewerSecond)) | \(String(format: "%.0f", result.kilobitsPerViewer)) |")
            }
            return lines.joined(separator: "\n") + "\n"
        }
    }

    /// `pcast-bench hooks`: the time spent inside the frame-ready hook.
    struct Hooks: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "hooks",
            abstract: "Measure the time inside the frame-ready hook on 720p I420 frames (read, convert, write)."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Frames per variant.")
        var frames = 900

        func measure() async throws {
            let results = try await FrameHookBenchmark(frames: frames, conversionThreads: 1).run()
            try common.write(results, markdown: Self.markdown(results), as: Self.name)
        }

        static func markdown(_ results: [FrameHookBenchmark.Result]) -> String {
            var lines = [
                "## Frame-ready hook, 720p I420, time inside the callback (goal for read(format: .bgra) + write: ≤ \(FrameHookBenchmark.goalMilliseconds) ms)",
                "",
                "| variant | frames | mean (ms) | p50 (ms) | p99 (ms) |",
                "|---|---:|---:|---:|---:|",
            ]
            for result in results {
                lines.append("| \(result.variant) | \(result.frames) | \(String(format: "%.3f", result.meanMilliseconds)) | \(String(format: "%.3f", result.p50Milliseconds)) | \(String(format: "%.3f", result.p99Milliseconds)) |")
            }
            return lines.joined(separator: "\n") + "\n"
        }
    }

    /// `pcast-bench capture-encode`: capture → frame hook → x264 through the SDK against gst-launch-1.0.
    struct CaptureEncode: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "capture-encode",
            abstract: "Measure the CPU of capture → frame hook → x264 720p30 through the SDK against the same pipeline in gst-launch-1.0."
        )

        @OptionGroup var common: BenchOptions

        func measure() async throws {
            let result = try await CaptureEncodeBenchmark(seconds: 5, runs: 3).run()
            try common.write(result, markdown: Self.markdown(result), as: Self.name)
        }

        static func markdown(_ result: CaptureEncodeBenchmark.Result) -> String {
            [
                "## Capture → frame hook → x264 720p30 through the SDK vs gst-launch-1.0 (median of \(result.runs) × \(Int(result.seconds)) s; goal ratio ≤ \(CaptureEncodeBenchmark.goalRatio))",
                "",
                "| SDK CPU (% of a core) | gst-launch-1.0 CPU | ratio | frames hooked | hook drops |",
                "|---|---|---|---|---|",
                "| \(String(format: "%.1f", result.sdkCPU)) | \(String(format: "%.1f", result.gstLaunchCPU)) | \(String(format: "%.3f", result.ratio)) | \(result.sdkFrames) | \(result.hookDropped) |",
            ].joined(separator: "\n") + "\n"
        }
    }

    /// `pcast-bench codecs`: bitrate and encode CPU of each video codec for the same SSIM.
    struct Codecs: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "codecs",
            abstract: "Measure the bitrate and encode CPU each video codec (H.264, VP8, VP9, AV1, H.265; the SDK's settings) needs for the same SSIM on one 720p30 clip."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Encodes of each ladder point (CPU: median and spread; an odd count has a true median).")
        var runs = 3

        @Option(help: "Seconds of each codec's glass-to-glass run (SDK publisher → relay → SDK viewer, 720p30 at 2.5 Mbit/s).")
        var latencySeconds: Double = 10

        /// codecs.json: the quality ladder and each codec's glass-to-glass latency.
        struct Report: Codable {
            let quality: CodecBenchmark.Result
            let latency: [CodecLatency]
        }

        struct CodecLatency: Codable {
            let codec: String
            let screenP50Ms: Double
            let screenP99Ms: Double
            let deliveredPercent: Double
            let firstFrameScreenP50Ms: Double
        }

        func measure() async throws {
            let quality = try await CodecBenchmark(runs: runs).run()
            var latency: [CodecLatency] = []
            for codec in VideoCodec.allCases {
                let platform = try await LocalPlatform.start()
                do {
                    var benchmark = EndToEndBenchmark(signalingURL: platform.signalingURL, seconds: latencySeconds,
                                                      playoutDelays: [EndToEndBenchmark.adaptive], joins: 3) { type, origin in
                        try platform.token(type, originStreamId: origin)
                    }
                    benchmark.videoCodec = codec
                    let result = try await benchmark.run()
                    if let run = result.latency.first {
                        latency.append(CodecLatency(codec: codec.encodingName, screenP50Ms: run.screenP50, screenP99Ms: run.screenP99,
                                                    deliveredPercent: run.deliveredPercent, firstFrameScreenP50Ms: result.firstFrame.screenP50))
                    }
                } catch {
                    await platform.shutdown()
                    throw error
                }
                await platform.shutdown()
            }
            let report = Report(quality: quality, latency: latency)
            try common.write(report, markdown: Self.markdown(quality) + Self.markdown(latency), as: Self.name)
        }

        static func markdown(_ latency: [CodecLatency]) -> String {
            var lines = [
                "",
                "### Glass-to-glass per codec: SDK publisher (720p30 test pattern, 2.5 Mbit/s) → relay → SDK viewer on loopback, the adaptive playout delay, at the screen (sink)",
                "",
                "| codec | screen p50 (ms) | screen p99 (ms) | frames delivered | first frame on screen p50 (ms) |",
                "|---|---|---|---|---|",
            ]
            for row in latency {
                lines.append("| \(row.codec) | \(String(format: "%.1f", row.screenP50Ms)) | \(String(format: "%.1f", row.screenP99Ms)) | \(String(format: "%.1f %%", row.deliveredPercent)) | \(String(format: "%.0f", row.firstFrameScreenP50Ms)) |")
            }
            return lines.joined(separator: "\n") + "\n"
        }

        static func markdown(_ result: CodecBenchmark.Result) -> String {
            func number(_ value: Double?, _ format: String) -> String { value.map { String(format: format, $0) } ?? "—" }
            var lines = [
                "## Video codecs at the same quality: \(result.clip), the SDK's encoder settings (SSIM target \(result.targetSSIM); CPU median of \(result.runs) encodes, % of one core at 30 fps)",
                "",
                "| codec | kbit/s for SSIM \(result.targetSSIM) | vs H.264 | encode CPU there | vs H.264 |",
                "|---|---|---|---|---|",
            ]
            for codec in result.codecs {
                lines.append("| \(codec.codec) | \(number(codec.kbpsAtTarget, "%.0f")) | \(number(codec.bitrateRatioToH264, "%.2f")) | \(number(codec.encodeCPUAtTarget, "%.1f")) | \(number(codec.cpuRatioToH264, "%.2f")) |")
            }
            lines += ["", "| codec | asked kbit/s | produced kbit/s | SSIM | encode CPU | lowest | highest |", "|---|---|---|---|---|---|---|"]
            for codec in result.codecs {
                for point in codec.points {
                    lines.append("| \(codec.codec) | \(point.requestedKbps) | \(String(format: "%.0f", point.producedKbps)) | \(String(format: "%.4f", point.ssim)) | "
                        + String(format: "%.1f | %.1f | %.1f |", point.encodeCPU, point.encodeCPUMin, point.encodeCPUMax))
                }
            }
            return lines.joined(separator: "\n") + "\n"
        }
    }

    /// `pcast-bench latency`: glass-to-glass latency through the relay (the playout delay × loss
    /// table) and the time to first frame.
    struct Latency: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "latency",
            abstract: "Measure glass-to-glass latency of 720p30 through the relay (playout delay × loss table) and the time to first frame."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Seconds per latency run (one run per playout delay and loss).")
        var latencySeconds: Double = 10

        @Option(help: "A playout delay of the table, ms, 0 for the SDK's adaptive default (repeat for several; default 0, 20, 40, 80, 150, 230).")
        var playoutDelay: [Int] = EndToEndBenchmark.tablePlayoutDelays

        @Option(help: "A loss of the table, percent each way on the viewer's leg (repeat for several; default 0, 2, 5, 10).")
        var loss: [Double] = EndToEndBenchmark.tableLossPercents

        @Flag(help: "Leave out the real paths (jitter, reordering, round trips, a capped link) run at the adaptive default playout delay.")
        var noPaths = false

        @Option(help: "Run only this real path of the table, by its name (repeat for several; e.g. \"jitter 20 ms\").")
        var path: [String] = []

        func validate() throws {
            guard playoutDelay.allSatisfy({ (0...10_000).contains($0) }) else { throw ValidationError("--playout-delay must be 0 (adaptive) to 10,000 ms") }
            guard loss.allSatisfy({ (0..<100).contains($0) }) else { throw ValidationError("--loss must be 0 to under 100 %") }
            let names = EndToEndBenchmark.PathCondition.table.map(\.name)
            if let unknown = path.first(where: { !names.contains($0) }) {
                throw ValidationError("no path named '\(unknown)'; the table's: \(names.joined(separator: ", "))")
            }
            guard loss.contains(0), playoutDelay.contains(EndToEndBenchmark.adaptive) else {
                throw ValidationError("the table must hold the default (adaptive, 0) playout delay without loss (latency.json's figures)")
            }
        }

        /// latency.json: the run at the SDK's default playout delay without loss, and every run under `detail`.
        struct Report: Codable {
            let screenP50Ms: Double
            let screenP99Ms: Double
            let decodedP50Ms: Double
            let decodedP99Ms: Double
            /// The adaptive delay where the clean run ended.
            let playoutDelayMs: Int
            /// Subscribe call → first decoded frame, and → first frame presented by the sink.
            let firstFrameP50Ms: Double
            let firstFrameScreenP50Ms: Double
            let detail: EndToEndBenchmark.Result
        }

        func measure() async throws {
            let platform = try await LocalPlatform.start()
            let result: EndToEndBenchmark.Result
            do {
                var benchmark = EndToEndBenchmark(signalingURL: platform.signalingURL, seconds: latencySeconds,
                                                  playoutDelays: playoutDelay) { type, origin in
                    try platform.token(type, originStreamId: origin)
                }
                benchmark.lossPercents = loss
                benchmark.relayPort = platform.relay.mediaPort
                if !noPaths { benchmark.paths = EndToEndBenchmark.PathCondition.table.filter { path.isEmpty || path.contains($0.name) } }
                let relay = platform.relay
                benchmark.relayRetransmissions = { relay.statistics().nacksServed }
                result = try await benchmark.run()
            } catch {
                await platform.shutdown()
                throw error
            }
            await platform.shutdown()
            guard let run = result.latency.first(where: { $0.playoutDelayMilliseconds == EndToEndBenchmark.adaptive && $0.path == "clean" }) else {
                throw BenchFailure("no latency run at the default (adaptive) playout delay without loss")
            }
            let report = Report(screenP50Ms: run.screenP50, screenP99Ms: run.screenP99, decodedP50Ms: run.p50, decodedP99Ms: run.p99,
                                playoutDelayMs: run.playoutDelayAtEndMilliseconds, firstFrameP50Ms: result.firstFrame.p50,
                                firstFrameScreenP50Ms: result.firstFrame.screenP50, detail: result)
            try common.write(report, markdown: Self.markdown(result), as: Self.name)
        }

        static func markdown(_ endToEnd: EndToEndBenchmark.Result) -> String {
            var lines = [
                "## Glass-to-glass latency, 720p30 H.264 through the relay (capture → presented by the viewer's sink, after its clock wait; goal p50 ≤ \(EndToEndBenchmark.goalP50) ms, p99 ≤ \(EndToEndBenchmark.goalP99) ms at the screen)",
                "",
                "The sinks show each frame one playout delay after it arrived. \"adaptive\" is the SDK's default: the delay follows the path's jitter, with room for retransmissions once packets go missing (→ where it ended). Beside it, capture → the renderer's frame-ready hook (after the renderer's queue: the decoded frame reaches it when the sink takes the frame before it, so at delays above a frame interval it includes that wait).",
                "",
                "The viewer's leg, each way, goes through the impairment proxy (before SRTP, as a network loses, delays and reorders packets): uniform loss at each playout delay, then real paths at the adaptive default. Delivered: frames shown of those captured in the window. Missing: video packets missing when a later one arrived (lost, or overtaken on the path); NACKs: sequence numbers the viewer asked for, and per missing packet (goal ≤ 1.2 under uniform loss); resent: packets the relay sent again; lost: video packets the viewer's jitter buffer gave up on.",
                "",
                "| playout delay (ms) | path | frames | delivered | freeze total (ms) | longest freeze (ms) | screen p50 (ms) | screen p90 (ms) | screen p99 (ms) | hook p50 (ms) | hook p99 (ms) | missing | NACKs | per missing | resent | lost |",
                "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for run in endToEnd.latency {
                let delay = run.playoutDelayMilliseconds == EndToEndBenchmark.adaptive
                    ? "adaptive (→ \(run.playoutDelayAtEndMilliseconds))" : "\(run.playoutDelayMilliseconds)"
                lines.append("| \(delay) | \(run.path) | " + String(format: "%d | %.1f %% | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %d | %d | %@ | %d | %d |",
                                    run.frames, run.deliveredPercent, run.freezeMilliseconds, run.longestFreezeMilliseconds,
                                    run.screenP50, run.screenP90, run.screenP99, run.p50, run.p99, run.missingOnArrival, run.nacksSent,
                                    run.nacksPerMissing.map { String(format: "%.2f", $0) } ?? "–", run.retransmissions, run.lostAfterRepair))
            }
            lines.append("")
            lines.append(String(format: "Time to first frame, %d joins of a running stream at the default (adaptive) playout delay (subscribe call → first frame shown; goal p50 ≤ %.0f ms): p50 %.1f ms, p99 %.1f ms; to the first decoded frame: p50 %.1f ms, p99 %.1f ms, max %.1f ms",
                                endToEnd.firstFrame.joins, EndToEndBenchmark.goalFirstFrameP50, endToEnd.firstFrame.screenP50, endToEnd.firstFrame.screenP99,
                                endToEnd.firstFrame.p50, endToEnd.firstFrame.p99, endToEnd.firstFrame.maximum))
            return lines.joined(separator: "\n") + "\n"
        }
    }

    /// `pcast-bench fanout`: the relay forwarding one stream to N subscribers, against
    /// `gst-launch-1.0 udpsrc ! multiudpsink`.
    struct Fanout: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "fanout",
            abstract: "Measure the relay's CPU and loss forwarding one 2.5 Mbps stream to N subscribers, against gst-launch-1.0 udpsrc ! multiudpsink."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "A subscriber count to run (repeat for several).")
        var subscribers: [Int] = [100, 500, 1000, 1500, 2000]

        @Option(help: "Threads sharing the relay's fan-out (default: one per core; 1: the I/O thread alone).")
        var fanOutThreads = RelayConfiguration.onlineCores

        @Flag(help: "Send every datagram as its own message (no UDP segmentation offload), to compare.")
        var noSegmentation = false

        func validate() throws {
            guard subscribers.allSatisfy({ $0 > 0 }) else { throw ValidationError("--subscribers must be positive") }
            guard (1...64).contains(fanOutThreads) else { throw ValidationError("--fan-out-threads must be 1 to 64") }
        }

        /// One subscriber count of fanout.json. CPU is in fractions of one core, loss a fraction.
        struct Run: Encodable {
            let subscribers: Int
            let relayCPU: Double
            let referenceCPU: Double?
            let loss: Double
            let referenceLoss: Double?
            let subscribersPerCore: Double
            /// Protected packets the relay sent per second per core of its CPU (LiveKit publishes
            /// 38–75 k per vCPU): the stream's packet rate × subscribers ÷ the relay's cores.
            let packetsPerSecondPerCore: Double
            let cpuRatio: Double?
            let detail: RelayFanoutBenchmark.Result

            init(_ result: RelayFanoutBenchmark.Result) {
                subscribers = result.configuration.subscribers
                relayCPU = result.relay.cpuPercent / 100
                referenceCPU = result.reference.map { $0.cpuPercent / 100 }
                loss = result.relay.lossPercent / 100
                referenceLoss = result.reference.map { $0.lossPercent / 100 }
                subscribersPerCore = result.relay.subscribersPerCore
                packetsPerSecondPerCore = result.relay.cpuPercent > 0
                    ? result.packetsPerSecond * Double(result.configuration.subscribers) * (1 - result.relay.lossPercent / 100) / (result.relay.cpuPercent / 100)
                    : 0
                cpuRatio = result.cpuRatio
                detail = result
            }

            private enum CodingKeys: String, CodingKey {
                case subscribers, relayCPU, referenceCPU, loss, referenceLoss, subscribersPerCore, packetsPerSecondPerCore, cpuRatio, detail
            }

            // Written out so that a missing reference reads `null` rather than a missing key.
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(subscribers, forKey: .subscribers)
                try container.encode(relayCPU, forKey: .relayCPU)
                try container.encode(referenceCPU, forKey: .referenceCPU)
                try container.encode(loss, forKey: .loss)
                try container.encode(referenceLoss, forKey: .referenceLoss)
                try container.encode(subscribersPerCore, forKey: .subscribersPerCore)
                try container.encode(packetsPerSecondPerCore, forKey: .packetsPerSecondPerCore)
                try container.encode(cpuRatio, forKey: .cpuRatio)
                try container.encode(detail, forKey: .detail)
            }
        }

        /// fanout.json.
        struct Report: Encodable {
            let runs: [Run]

            /// The largest subscriber count whose loss stayed under 0.1 %, if any.
            var largestSubscribersUnderTenthPercentLoss: Int? {
                runs.filter { $0.loss < 0.001 }.map(\.subscribers).max()
            }

            private enum CodingKeys: String, CodingKey { case runs, largestSubscribersUnderTenthPercentLoss }

            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(runs, forKey: .runs)
                try container.encode(largestSubscribersUnderTenthPercentLoss, forKey: .largestSubscribersUnderTenthPercentLoss)
            }
        }

        func measure() async throws {
            var runs: [Run] = []
            for count in subscribers {
                var configuration = RelayFanoutBenchmark.Configuration(subscribers: count, duration: 5)
                configuration.fanOutThreads = fanOutThreads
                configuration.segmentationOffload = !noSegmentation
                runs.append(Run(try RelayFanoutBenchmark(configuration: configuration).run()))
            }
            let report = Report(runs: runs)
            try common.write(report, markdown: Self.markdown(report), as: Self.name)
        }

        static func markdown(_ report: Report) -> String {
            var lines = [
                "## Relay fan-out: one 2.5 Mbps stream (1200-byte packets) to N subscribers, against `gst-launch-1.0 udpsrc ! multiudpsink` (no crypto)",
                "",
                "Goals: 1,000 subscribers at < 0.1 % loss, ≥ 600 subscribers per core, ≤ 1.5× the reference's CPU (issue 41: 1,500 at < 0.1 % and ≥ 400,000 packets/s per core in a quiet run).",
                "The relay's CPU is all its threads' (\(report.runs.first?.detail.configuration.fanOutThreads ?? 1) sharing the fan-out; AES-GCM sealed through OpenSSL's EVP;",
                "UDP segmentation offload \(report.runs.first?.detail.configuration.segmentationOffload == false ? "off" : "on"): the GSO column is the share of its datagrams that left in segmented messages);",
                "the reference is one thread, so past one core of it (its CPU at 100 %) the ratio says nothing.",
                "",
                "| N | relay CPU % | relay loss % | subscribers/core | packets/s per core | GSO % | reference CPU % | reference loss % | CPU ratio |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for run in report.runs {
                let relay = run.detail.relay, reference = run.detail.reference
                lines.append(String(format: "| %d | %.1f | %.2f | %.0f | %.0f | %.0f | %@ | %@ | %@ |", run.subscribers, relay.cpuPercent, relay.lossPercent, relay.subscribersPerCore,
                                    run.packetsPerSecondPerCore, (relay.segmentedShare ?? 0) * 100,
                                    reference.map { String(format: "%.1f", $0.cpuPercent) } ?? "–", reference.map { String(format: "%.2f", $0.lossPercent) } ?? "–",
                                    run.cpuRatio.map { String(format: "%.2f", $0) } ?? "–"))
            }
            return lines.joined(separator: "\n") + "\n"
        }
    }

    /// `pcast-bench echo`: echo cancellation through a PulseAudio null-sink loop.
    struct Echo: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "echo",
            abstract: "Measure echo cancellation (webrtcdsp) on a private PulseAudio null-sink loop."
        )

        @OptionGroup var common: BenchOptions

        func measure() async throws {
            try FileManager.default.createDirectory(at: common.directory, withIntermediateDirectories: true)
            try await EchoBenchmark.run(output: common.directory)
        }
    }
}
