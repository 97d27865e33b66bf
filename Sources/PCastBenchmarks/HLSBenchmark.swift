import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Glibc
import PCast
import PCastMedia
import PCastNode
import PCastProtocol
import PCastTestSupport
import GStreamer
import Synchronization

/// The HLS figures (`pcast-bench hls`), through an embedded platform:
/// - **capture → frame playable with low-latency HLS**: the publisher paints a frame counter into
///   each captured frame (``StreamMeter``); a low-latency client of the benchmark's own asks for
///   each next part with a blocking playlist reload (`_HLS_msn` / `_HLS_part`), fetches it as
///   soon as it is listed, and decodes it (qtdemux, avdec_h264): capture → decoded, per frame.
/// - **capture → frame at a standard HLS player**: an SDK viewer with a `streaming` token plays
///   the stream as HLS (GStreamer 1.22's hlsdemux2, which does not use parts and starts three
///   segments behind the live edge) and reads the counters after its decoder and at its null
///   sink. The reference in the same run: a real-time viewer of the same stream, same meter.
/// - **segment serving**: `wrk` with 1,000 connections fetching the newest part (the request a
///   low-latency player makes most), the playlist, and `/healthz` (the HTTP stack alone, the
///   reference), each for ``throughputSeconds``; requests per second and the server's CPU in the
///   same window (this process's CPU minus its rate while only publishing and packaging), so
///   requests per second per core.
public struct HLSBenchmark: Sendable {
    public struct Latency: Codable, Sendable {
        /// The low-latency client: frames decoded, capture → decoded p50 / p99 (ms), parts fetched.
        public var partFrames: Int
        public var partDecodedP50: Double
        public var partDecodedP99: Double
        public var parts: Int
        /// The SDK's HLS viewer (low-latency playback: it follows the parts).
        public var frames: Int
        public var missing: Int
        /// Capture → decoded at the HLS viewer, milliseconds.
        public var decodedP50: Double
        public var decodedP99: Double
        /// Capture → presented by the HLS viewer's sink.
        public var screenP50: Double
        public var screenP99: Double
        /// The real-time viewer of the same stream (default playout delay), capture → presented.
        public var realTimeScreenP50: Double
        /// subscribe → first frame decoded at the HLS viewer, seconds.
        public var firstFrameSeconds: Double
        /// The SDK's HLS viewer with `streamingPlayback = .segments` (GStreamer's hlsdemux2).
        public var segmentFrames: Int
        public var segmentScreenP50: Double
        public var segmentScreenP99: Double
        public var segmentFirstFrameSeconds: Double
        public static let goalP50 = 2000.0
    }

    public struct Throughput: Codable, Sendable {
        public var target: String
        public var connections: Int
        public var seconds: Double
        public var requestsPerSecond: Double
        public var bytesPerSecond: Double
        /// Cores of this process busy serving (its CPU over the window minus the idle rate).
        public var serverCores: Double
        public var requestsPerSecondPerCore: Double
        public var latencyP50Milliseconds: Double?
        public var latencyP99Milliseconds: Double?
        /// Answers other than 2xx/3xx, and socket errors (connect, read, write, timeout).
        public var failedResponses: Int
        public var socketErrors: Int
    }

    public struct Result: Codable, Sendable {
        public var latency: Latency
        public var throughput: [Throughput]
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public var seconds: Double = 15
    public var throughputSeconds: Double = 10
    public var connections = 1000

    public func run() async throws -> Result {
        let platform = try await LocalPlatform.start { configuration in
            // wrk's thousand connections all come from 127.0.0.1, as a CDN's do from its address.
            configuration.connectionLimits.perAddress = connections + 200
            configuration.connectionLimits.total = connections + 400
        }
        let publisherSDK = PCast(PCastOptions(uri: platform.signalingURL))
        try await publisherSDK.start(authToken: try platform.token(.auth))
        let media = try await publisherSDK.getUserMedia(.synthetic(width: 1280, height: 720))
        let meter = StreamMeter()
        try meter.stamp(media)
        // Keyframes every 2 s: the segment length.
        let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish, capabilities: ["streaming"]), mediaStream: media,
                                                       settings: EncodingSettings(videoBitrate: 2500, keyframeInterval: 60))
        defer { _ = publisher }

        let realTime = try await watch(platform, publisher.streamId, meter: meter, capabilities: [])
        let hls = try await watch(platform, publisher.streamId, meter: meter, capabilities: ["streaming"])
        let segments = try await watch(platform, publisher.streamId, meter: meter, capabilities: ["streaming"], playback: .segments)
        let lowLatency = try await followParts(platform, publisher.streamId, meter: meter)
        let latency = Latency(partFrames: lowLatency.latencies.count, partDecodedP50: Self.percentile(50, lowLatency.latencies),
                              partDecodedP99: Self.percentile(99, lowLatency.latencies), parts: lowLatency.parts,
                              frames: hls.snapshot.frames, missing: hls.snapshot.missing,
                              decodedP50: hls.snapshot.percentile(50) ?? .nan, decodedP99: hls.snapshot.percentile(99) ?? .nan,
                              screenP50: hls.snapshot.screenPercentile(50) ?? .nan, screenP99: hls.snapshot.screenPercentile(99) ?? .nan,
                              realTimeScreenP50: realTime.snapshot.screenPercentile(50) ?? .nan, firstFrameSeconds: hls.firstFrame,
                              segmentFrames: segments.snapshot.frames, segmentScreenP50: segments.snapshot.screenPercentile(50) ?? .nan,
                              segmentScreenP99: segments.snapshot.screenPercentile(99) ?? .nan, segmentFirstFrameSeconds: segments.firstFrame)

        let token = try platform.token(.stream, originStreamId: publisher.streamId, capabilities: ["streaming"])
        let query = HLSAddress.tokenQuery(token)
        let base = platform.httpURL + HLSAddress.directory(publisher.streamId)
        let playlist = try await fetch("\(base)/index.m3u8?\(query)")
        // The newest listed part: what every low-latency player asks for next.
        guard let part = playlist.split(separator: "\n").last(where: { $0.hasPrefix("#EXT-X-PART:") })?
            .split(separator: "\"").dropFirst().first.map(String.init) else {
            throw Failure(description: "the playlist lists no part:\n\(playlist)")
        }
        var throughput: [Throughput] = []
        for (target, url) in [("part (\(part.split(separator: "?")[0]))", "\(base)/\(part)"), ("playlist", "\(base)/index.m3u8?\(query)"),
                              ("/healthz (reference)", "\(platform.httpURL)/healthz")] {
            throughput.append(try await serve(target: target, url: url))
        }
        await publisher.stop()
        await media.stop()
        await publisherSDK.stop()
        await platform.shutdown()
        return Result(latency: latency, throughput: throughput)
    }

    /// A viewer (real-time, or HLS with `streaming`) watched by `meter` for ``seconds`` after a warm-up.
    private func watch(_ platform: LocalPlatform, _ streamId: String, meter: StreamMeter, capabilities: [String],
                       playback: StreamingPlayback = .lowLatency) async throws -> (snapshot: StreamMeter.Snapshot, firstFrame: Double) {
        var options = PCastOptions(uri: platform.signalingURL)
        options.streamingPlayback = playback
        let viewer = PCast(options)
        try await viewer.start(authToken: try platform.token(.auth))
        let asked = ContinuousClock.now
        let stream = try await viewer.subscribe(streamToken: try platform.token(.stream, originStreamId: streamId, capabilities: capabilities))
        let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        _ = await renderer.start()
        try meter.watch(renderer, of: stream)
        let deadline = ContinuousClock.now + .seconds(20)
        while stream.firstVideoDecodedAt == nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        guard let first = stream.firstVideoDecodedAt else { throw Failure(description: "no frame within 20 s (\(capabilities))") }
        try await Task.sleep(for: .seconds(3))   // warm up
        _ = meter.take()
        try await Task.sleep(for: .seconds(seconds))
        let snapshot = meter.take()
        await renderer.stop()
        await stream.stop()
        await viewer.stop()
        return (snapshot, Self.seconds(first - asked))
    }

    /// A low-latency HLS client: each next part asked for with a blocking reload, fetched once
    /// listed and decoded; capture → decoded for every stamped frame, after a warm-up part.
    private func followParts(_ platform: LocalPlatform, _ streamId: String, meter: StreamMeter) async throws -> (latencies: [Double], parts: Int) {
        let token = try platform.token(.stream, originStreamId: streamId, capabilities: ["streaming"])
        let query = HLSAddress.tokenQuery(token)
        let base = platform.httpURL + HLSAddress.directory(streamId)
        let pipeline = try Pipeline(description: "appsrc name=parts is-live=true format=bytes ! qtdemux name=demux "
            + "demux.video_0 ! queue ! h264parse ! avdec_h264 ! videoconvert ! video/x-raw,format=I420 ! appsink name=frames sync=false async=false "
            + "demux.audio_0 ! queue ! fakesink sync=false async=false")
        let latencies = Mutex<[Double]?>(nil)
        try pipeline.appSink(named: "frames").onSample { sample in
            guard let info = sample.videoInfo, let value = FrameStamp.read(sample.buffer, info: info), let captured = meter.captureTime(of: value) else { return }
            let latency = Self.seconds(ContinuousClock.now - captured) * 1000
            latencies.withLock { $0?.append(latency) }
        }
        let input = try pipeline.appSource(named: "parts")
        try await pipeline.play(timeout: .seconds(10))
        defer { Task { await pipeline.stop() } }
        // The playlist read as the SDK's player reads it; every part from the live edge on, at once.
        guard let playlistURL = URL(string: "\(base)/index.m3u8?\(query)") else { throw Failure(description: "a bad playlist URL") }
        var playlist = try await HLSReceiver.playlist(playlistURL, blockingAt: nil)
        guard let map = playlist.map else { throw Failure(description: "the playlist has no EXT-X-MAP") }
        _ = input.pushNow(Buffer(bytes: try await HLSReceiver.fetch(map, relativeTo: playlistURL)))
        var next = playlist.nextPosition
        var parts = 0
        let end = ContinuousClock.now + .seconds(seconds + 2)
        while ContinuousClock.now < end {
            next = playlist.normalised(next)
            guard let part = playlist.parts[next] else {
                playlist = try await HLSReceiver.playlist(playlistURL, blockingAt: next)
                continue
            }
            _ = input.pushNow(Buffer(bytes: try await HLSReceiver.fetch(part.uri, relativeTo: playlistURL)))
            parts += 1
            if parts == 2 { latencies.withLock { $0 = [] } }   // the first part was a warm-up
            next = playlist.successor(of: next)
        }
        return ((latencies.withLock { $0 } ?? []).sorted(), parts)
    }

    public static func percentile(_ p: Double, _ sorted: [Double]) -> Double {
        guard !sorted.isEmpty else { return .nan }
        return sorted[min(sorted.count - 1, Int((p / 100 * Double(sorted.count)).rounded(.down)))]
    }

    private func fetch(_ url: String) async throws -> String {
        let (data, _) = try await URLSession.shared.data(from: URL(string: url)!)
        return String(decoding: data, as: UTF8.self)
    }

    /// `wrk` against `url` with ``connections`` connections, and this process's CPU meanwhile.
    private func serve(target: String, url: String) async throws -> Throughput {
        let idle = try await cpuRate(over: .seconds(2))
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("wrk-\(UUID().uuidString).log").path
        defer { try? FileManager.default.removeItem(atPath: log) }
        let before = processCPUSeconds(), started = ContinuousClock.now
        let wrk = try ChildProcess.spawn(try executable("wrk"), ["-t2", "-c\(connections)", "-d\(Int(throughputSeconds))s", "--latency", "--timeout", "10s", url],
                                         environment: ProcessInfo.processInfo.environment, output: log, errorsToOutput: true)
        guard let status = await Task.detached(operation: { wrk.wait(within: .seconds(Int64(throughputSeconds) + 30)) }).value, status == 0 else {
            wrk.interrupt()
            throw Failure(description: "wrk did not finish: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        }
        let wall = Self.seconds(ContinuousClock.now - started)
        let cores = max(0, (processCPUSeconds() - before) / wall - idle)
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        let rate = Self.number(after: "Requests/sec:", in: output) ?? 0
        return Throughput(target: target, connections: connections, seconds: throughputSeconds, requestsPerSecond: rate,
                          bytesPerSecond: Self.bytes(after: "Transfer/sec:", in: output) ?? 0,
                          serverCores: cores, requestsPerSecondPerCore: cores > 0 ? rate / cores : 0,
                          latencyP50Milliseconds: Self.milliseconds(percentile: "50%", in: output),
                          latencyP99Milliseconds: Self.milliseconds(percentile: "99%", in: output),
                          failedResponses: Int(Self.number(after: "Non-2xx or 3xx responses:", in: output) ?? 0),
                          socketErrors: Self.socketErrors(in: output))
    }

    /// This process's CPU, cores busy on average over `window`.
    private func cpuRate(over window: Duration) async throws -> Double {
        let before = processCPUSeconds(), started = ContinuousClock.now
        try await Task.sleep(for: window)
        return (processCPUSeconds() - before) / Self.seconds(ContinuousClock.now - started)
    }

    public static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    // MARK: wrk's report

    public static func number(after label: String, in output: String) -> Double? {
        guard let line = output.split(separator: "\n").first(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix(label) }) else { return nil }
        return Double(line.trimmingCharacters(in: .whitespaces).dropFirst(label.count).trimmingCharacters(in: .whitespaces))
    }

    /// `Transfer/sec: 1.23GB` in bytes.
    public static func bytes(after label: String, in output: String) -> Double? {
        guard let line = output.split(separator: "\n").first(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix(label) }) else { return nil }
        return quantity(String(line.trimmingCharacters(in: .whitespaces).dropFirst(label.count).trimmingCharacters(in: .whitespaces)),
                        units: ["B": 1, "KB": 1024, "MB": 1024 * 1024, "GB": 1024 * 1024 * 1024])
    }

    /// A latency percentile line (`     50%    1.23ms`) in milliseconds.
    public static func milliseconds(percentile: String, in output: String) -> Double? {
        guard let line = output.split(separator: "\n").first(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix(percentile + " ") }),
              let value = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first else { return nil }
        return quantity(String(value), units: ["us": 0.001, "ms": 1, "s": 1000, "m": 60_000])
    }

    /// A number with one of `units` as its suffix (the longest suffix that matches).
    public static func quantity(_ text: String, units: [String: Double]) -> Double? {
        for (unit, scale) in units.sorted(by: { $0.key.count > $1.key.count }) where text.hasSuffix(unit) {
            guard let value = Double(text.dropLast(unit.count)) else { continue }
            return value * scale
        }
        return nil
    }

    /// `Socket errors: connect 0, read 0, write 0, timeout 0`, summed.
    public static func socketErrors(in output: String) -> Int {
        guard let line = output.split(separator: "\n").first(where: { $0.contains("Socket errors:") }) else { return 0 }
        return line.split(whereSeparator: { $0 == " " || $0 == "," }).compactMap { Int($0) }.reduce(0, +)
    }

    public static func markdown(_ result: Result) -> String {
        let latency = result.latency
        var lines = [
            "## HLS: capture → frame playable (720p30, 2 s segments, 0.5 s parts)",
            "",
            "| player | frames | capture → decoded p50 ms | p99 ms | capture → screen p50 ms | p99 ms | goal (decoded p50) |",
            "|---|---:|---:|---:|---:|---:|---:|",
            String(format: "| low-latency client: blocking reload for each part, fetched and decoded at once (%d parts) | %d | %.0f | %.0f | – | – | ≤ %.0f ms |",
                   latency.parts, latency.partFrames, latency.partDecodedP50, latency.partDecodedP99, Latency.goalP50),
            String(format: "| SDK viewer, 'streaming' token: follows the parts (the default; %d missing) | %d | %.0f | %.0f | %.0f | %.0f | ≤ %.0f ms |",
                   latency.missing, latency.frames, latency.decodedP50, latency.decodedP99, latency.screenP50, latency.screenP99, Latency.goalP50),
            String(format: "| SDK viewer, streamingPlayback = .segments: hlsdemux2 (1.22: whole segments, starts 3 segments back) | %d | – | – | %.0f | %.0f | |",
                   latency.segmentFrames, latency.segmentScreenP50, latency.segmentScreenP99),
            String(format: "| reference: real-time SDK viewer of the same stream | | | | %.0f | | |", latency.realTimeScreenP50),
            "",
            String(format: "The SDK's HLS viewer: subscribe → first frame %.2f s following parts (it waits for the next keyframe at the live edge), %.2f s with hlsdemux2.",
                   latency.firstFrameSeconds, latency.segmentFirstFrameSeconds),
            "",
            "## HLS serving: wrk, \(result.throughput.first?.connections ?? 0) connections, \(Int(result.throughput.first?.seconds ?? 0)) s each",
            "",
            "| target | requests/s | MB/s | server cores | requests/s per core | p50 ms | p99 ms | failed | socket errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in result.throughput {
            lines.append(String(format: "| %@ | %.0f | %.1f | %.2f | %.0f | %@ | %@ | %d | %d |", row.target, row.requestsPerSecond, row.bytesPerSecond / 1_048_576,
                                row.serverCores, row.requestsPerSecondPerCore,
                                row.latencyP50Milliseconds.map { String(format: "%.1f", $0) } ?? "–",
                                row.latencyP99Milliseconds.map { String(format: "%.1f", $0) } ?? "–", row.failedResponses, row.socketErrors))
        }
        lines.append("")
        return lines.joined(separator: "\n")
    }

    public init(seconds: Double = 15, throughputSeconds: Double = 10, connections: Int = 1000) {
        self.connections = connections
        self.seconds = seconds
        self.throughputSeconds = throughputSeconds
    }
}
