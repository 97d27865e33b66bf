import ArgumentParser
import Foundation
import PCastBenchmarks
import PCast
import PCastMedia
import PCastNode
import PCastServer
import PCastTestSupport
import Synchronization

/// `pcast-bench soak`: a long run of the SDK and the embedded platform with churn, watching memory,
/// threads and descriptors. One stream flows the whole time to one viewer; every couple of seconds
/// a second stream is published and unpublished and a second viewer subscribes and unsubscribes.
/// After a warm-up (the first third of the run), nothing may grow: RSS (read after trimming the
/// allocator) by more than `--rss-growth-limit` MB, threads by more than 4, descriptors by more
/// than 8; and frames must keep arriving. Writes soak.json and soak.md;
/// exits 1 when a limit is broken.
struct SoakCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak",
        abstract: "Run publish/subscribe with churn for a long time; fail if memory, threads or descriptors grow."
    )

    @Option(help: "Minutes to run.")
    var minutes: Double = 30

    @Option(help: "Seconds between samples.")
    var sampleSeconds: Double = 30

    @Option(help: "Directory for soak.json and soak.md.")
    var output = "bench-results"

    @Option(help: "RSS growth allowed after the warm-up, MB.")
    var rssGrowthLimit: Double = 10

    struct Sample: Codable {
        let seconds: Double
        let footprint: ProcessFootprint
        let framesDecoded: Int
        let churnCycles: Int
    }

    struct Report: Codable {
        let minutes: Double
        let warmUpSeconds: Double
        let samples: [Sample]
        let rssGrowthMB: Double
        let threadGrowth: Int
        let descriptorGrowth: Int
        let failures: [String]
    }

    func run() async throws {
        SDKLog.bootstrapCommandLine()
        let platform = try await LocalPlatform.start()
        let publisherSDK = PCast(PCastOptions(uri: platform.signalingURL))
        try await publisherSDK.start(authToken: try platform.token(.auth))
        let media = try await publisherSDK.getUserMedia(.synthetic())
        let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media)
        let viewer = PCast(PCastOptions(uri: platform.signalingURL))
        try await viewer.start(authToken: try platform.token(.auth))
        let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
        let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        guard await renderer.start() == .ok else { throw BenchFailure("the renderer did not start") }
        let decoded = Atomic<Int>(0)
        try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
            if case .video? = try? notification.read() { decoded.add(1, ordering: .relaxed) }
        }

        // Churn, and sample at the same point of every cycle (both extra pipelines stopped a second
        // ago), so thread and descriptor counts compare like with like.
        let start = ContinuousClock.now
        let total = Duration.seconds(minutes * 60)
        // Bounded structures fill during the first minutes (each SDK's log ring keeps its last
        // 2,000 messages; allocator arenas and GStreamer's caches reach their working size), so
        // growth is measured from the end of the first third of the run.
        let warmUp = max(60, minutes * 60 / 3)
        var samples: [Sample] = []
        var churned = 0
        var lastSample = start
        while ContinuousClock.now - start < total {
            do {
                let extra = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media)
                let watching = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
                try await Task.sleep(for: .seconds(1))
                await watching.stop()
                await extra.stop()
                churned += 1
            } catch {
                print("soak: churn failed: \(error)")
            }
            try await Task.sleep(for: .seconds(1))
            guard ContinuousClock.now - lastSample >= .seconds(sampleSeconds) else { continue }
            lastSample = ContinuousClock.now
            ProcessFootprint.releaseFreeMemory()
            let elapsed = Double((ContinuousClock.now - start) / .milliseconds(1)) / 1000
            let sample = Sample(seconds: elapsed, footprint: .current(), framesDecoded: decoded.load(ordering: .relaxed), churnCycles: churned)
            samples.append(sample)
            print(String(format: "soak: %5.0f s  RSS %6.1f MB  heap in use %6.1f MB  threads %3d  fds %3d  frames %7d  churn %5d", elapsed,
                         Double(sample.footprint.residentKiB) / 1024, Double(sample.footprint.heapInUseKiB ?? 0) / 1024,
                         sample.footprint.threads, sample.footprint.openDescriptors, sample.framesDecoded, sample.churnCycles))
        }

        var failures: [String] = []
        let baseline = samples.first { $0.seconds >= warmUp } ?? samples.first
        let last = samples.last
        var growth = (rss: 0.0, threads: 0, descriptors: 0)
        if let baseline, let last {
            growth = (Double(last.footprint.residentKiB - baseline.footprint.residentKiB) / 1024,
                      last.footprint.threads - baseline.footprint.threads,
                      last.footprint.openDescriptors - baseline.footprint.openDescriptors)
            if growth.rss > rssGrowthLimit { failures.append(String(format: "RSS grew by %.1f MB after the warm-up", growth.rss)) }
            if growth.threads > 4 { failures.append("threads grew by \(growth.threads)") }
            if growth.descriptors > 8 { failures.append("descriptors grew by \(growth.descriptors)") }
            if samples.count >= 2, last.framesDecoded <= samples[samples.count - 2].framesDecoded {
                failures.append("no frames decoded in the last interval")
            }
        } else {
            failures.append("no samples (the run was shorter than one sample interval)")
        }
        let report = Report(minutes: minutes, warmUpSeconds: warmUp, samples: samples, rssGrowthMB: growth.rss,
                            threadGrowth: growth.threads, descriptorGrowth: growth.descriptors, failures: failures)

        await renderer.stop()
        await stream.stop()
        await viewer.stop()
        await publisher.stop()
        await publisherSDK.stop()
        await media.stop()
        await platform.shutdown()

        let directory = URL(fileURLWithPath: output)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(report).write(to: directory.appendingPathComponent("soak.json"))
        let markdown = Self.markdown(report)
        try Data(markdown.utf8).write(to: directory.appendingPathComponent("soak.md"))
        print(markdown)
        if !failures.isEmpty {
            print("soak failed: \(failures.joined(separator: "; "))")
            throw ExitCode.failure
        }
    }

    /// Heap in use (malloc_info) at the start, the end, and grown since the warm-up: not a limit, it
    /// tells a leak (it grows with RSS) from allocator fragmentation (RSS grows alone).
    static func heapRow(_ report: Report) -> String {
        let first = report.samples.first?.footprint.heapInUseKiB, last = report.samples.last?.footprint.heapInUseKiB
        let baseline = report.samples.first { $0.seconds >= report.warmUpSeconds }?.footprint.heapInUseKiB
        guard let first, let last else { return "| heap in use (malloc) | n/a | n/a | n/a | |" }
        return String(format: "| heap in use (malloc) | %.1f MB | %.1f MB | %.1f MB | |", Double(first) / 1024, Double(last) / 1024,
                      Double(last - (baseline ?? first)) / 1024)
    }

    static func markdown(_ report: Report) -> String {
        let first = report.samples.first, last = report.samples.last
        return [
            "## Soak: \(Int(report.minutes)) min, one stream to one viewer, a second stream and viewer churned every 2 s (SDK + platform in one process)",
            "",
            "| measure | start | end | growth after \(Int(report.warmUpSeconds)) s warm-up | limit |",
            "|---|---:|---:|---:|---:|",
            String(format: "| RSS | %.1f MB | %.1f MB | %.1f MB | 10 MB |", Double(first?.footprint.residentKiB ?? 0) / 1024,
                   Double(last?.footprint.residentKiB ?? 0) / 1024, report.rssGrowthMB),
            heapRow(report),
            "| threads | \(first?.footprint.threads ?? 0) | \(last?.footprint.threads ?? 0) | \(report.threadGrowth) | 4 |",
            "| descriptors | \(first?.footprint.openDescriptors ?? 0) | \(last?.footprint.openDescriptors ?? 0) | \(report.descriptorGrowth) | 8 |",
            "| frames decoded | \(first?.framesDecoded ?? 0) | \(last?.framesDecoded ?? 0) | | |",
            "| churn cycles | \(first?.churnCycles ?? 0) | \(last?.churnCycles ?? 0) | | |",
            "",
            report.failures.isEmpty ? "Result: pass." : "Result: FAIL — \(report.failures.joined(separator: "; ")).",
            "",
        ].joined(separator: "\n")
    }
}
