import Foundation
import Glibc
import PCast
import PCastMedia
import PCastNode
import PCastTestSupport
import Synchronization

/// `pcast-bench plugin`: our GStreamer elements against the SDK they wrap, on one embedded
/// platform in this process.
///
/// - CPU: `gst-launch-1.0 videotestsrc ! … ! pcastsink` against `pcast publish` of the same source
///   (720p30 test pattern at 2.5 Mbit/s and a tone), each alone for the same window after a
///   warm-up, read from `/proc/<pid>/stat`; runs alternate, the median of each is compared.
/// - Glass-to-glass: a GStreamer application (`scripts/peers/gst-plugin-latency.py`) pushes stamped
///   720p frames into `pcastsink` and reads them back from `pcastsrc` in one process; the SDK's own
///   figure (stamp before its encoder → after its decoder, ``EndToEndBenchmark``) runs in the same
///   invocation as the reference, at the same playout delay.
public struct PluginBenchmark {
    public struct CPU: Codable, Sendable {
        /// CPU seconds per window, each run.
        public var pluginSeconds: [Double]
        public var sdkSeconds: [Double]
        public var windowSeconds: Double
        /// Median plugin / median SDK.
        public var ratio: Double
        public var goal = 1.05
    }
    public struct Latency: Codable, Sendable {
        public var frames: Int
        public var read: Int
        public var missing: Int
        /// To the frame as it is handed on (an unsynchronised sink, or the renderer's hook), ms.
        public var p50: Double
        public var p90: Double
        public var p99: Double
        /// To the frame shown by a synchronised sink (after its clock wait: at the screen), ms.
        public var screenRead: Int?
        public var screenP50: Double?
        public var screenP90: Double?
        public var screenP99: Double?
    }
    public struct Result: Codable, Sendable {
        public var cpu: CPU
        /// Stamped frames pushed by a GStreamer application into pcastsink, read from pcastsrc.
        public var plugin: Latency
        /// The same frames pushed into the SDK's MediaFeed, read at an SDK viewer's renderer hook.
        public var sdk: Latency
        /// The SDK's published figure: stamp at the pre-encoder hook, read at the post-decoder hook.
        public var sdkHookToHook: EndToEndBenchmark.LatencyResult
        public var playoutDelayMilliseconds: Int
    }

    public var seconds = 10.0
    public var runs = 3

    public init(seconds: Double = 10.0, runs: Int = 3) {
        self.seconds = seconds
        self.runs = runs
    }

    public func run() async throws -> Result {
        let executable = try PCastExecutable.beside()
        let directory = executable.deletingLastPathComponent()
        guard FileManager.default.fileExists(atPath: directory.appendingPathComponent("libgstpcast.so").path) else {
            throw BenchFailure("libgstpcast.so is not beside \(executable.path): build it with swift build -c release --product gstpcast (make bench does)")
        }
        let script = try Self.script("scripts/peers/gst-plugin-latency.py", from: executable)
        var environment = ProcessInfo.processInfo.environment
        environment["GST_PLUGIN_PATH"] = directory.path
        environment["GST_REGISTRY"] = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-bench-registry-\(getpid()).bin").path
        let platform = try await LocalPlatform.start()
        defer { Task { await platform.shutdown() } }
        let auth = try platform.token(.auth)
        let publish = try platform.token(.publish)
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-bench-plugin-\(getpid()).out").path

        // CPU: the same source through each, alone.
        let video = "videotestsrc is-live=true ! video/x-raw,width=1280,height=720,framerate=30/1"
        let audio = "audiotestsrc is-live=true"
        let launch = try PCastTestSupport.executable("gst-launch-1.0")
        var pluginSeconds: [Double] = [], sdkSeconds: [Double] = []
        for _ in 0..<runs {
            let gst = try ChildProcess.spawn(launch, (video + " ! pcastsink name=p server=\(platform.signalingURL) auth-token=\(auth) token=\(publish) video-bitrate=2500 "
                + audio + " ! p.audio").split(separator: " ").map(String.init), environment: environment, output: output, errorsToOutput: true)
            pluginSeconds.append(try await Self.cpuSeconds(of: gst, window: seconds))
            gst.interrupt()
            let sdk = try ChildProcess.spawn(executable, ["publish", "--server", platform.signalingURL, "--auth-token", auth, "--token", publish,
                                                         "--source", "videotestsrc is-live=true", "--audio", audio, "--bitrate", "2500", "--width", "1280", "--height", "720"],
                                             environment: environment, output: output, errorsToOutput: true)
            sdkSeconds.append(try await Self.cpuSeconds(of: sdk, window: seconds))
            sdk.interrupt()
        }
        let cpu = CPU(pluginSeconds: pluginSeconds, sdkSeconds: sdkSeconds, windowSeconds: seconds,
                      ratio: median(pluginSeconds) / max(median(sdkSeconds), 0.001))

        // Glass-to-glass through the elements, then the SDK's reference at the same playout delay.
        let delay = Int(PCastOptions.defaultPlayoutDelay / .milliseconds(1))
        let stream = try platform.token(.stream, tag: .channelAlias("plugin-g2g"))
        let latencyOutput = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-bench-plugin-latency-\(getpid()).out").path
        let python = try ChildProcess.spawn(URL(fileURLWithPath: "/usr/bin/python3"),
                                            [script.path, platform.signalingURL, auth, publish, stream, "plugin-g2g", String(seconds)],
                                            environment: environment, output: latencyOutput)
        let status = await Task.detached { python.wait() }.value
        let text = (try? String(contentsOfFile: latencyOutput, encoding: .utf8)) ?? ""
        guard status == 0, let line = text.split(whereSeparator: \.isNewline).last(where: { $0.hasPrefix("{") }),
              let plugin = try? JSONDecoder().decode(Latency.self, from: Data(line.utf8)) else {
            throw BenchFailure("the plugin's latency run failed (status \(status)): \(text.suffix(1_000))")
        }
        let sdk = try await Self.sdkLatency(platform: platform, auth: auth, publish: publish, seconds: seconds)
        var hooks = EndToEndBenchmark(signalingURL: platform.signalingURL, seconds: seconds, playoutDelays: [delay], joins: 1) { type, origin in
            try platform.token(type, originStreamId: origin)
        }
        hooks.lossPercents = [0]
        guard let hookToHook = try await hooks.run().latency.first(where: { $0.lossPercent == 0 }) else {
            throw BenchFailure("the SDK's hook-to-hook run measured nothing")
        }
        return Result(cpu: cpu, plugin: plugin, sdk: sdk, sdkHookToHook: hookToHook, playoutDelayMilliseconds: delay)
    }

    /// The same measurement through the Swift API: the same stamped 720p I420 frames pushed into a
    /// ``MediaFeed`` at 30 fps, published, subscribed by a second session whose renderer (not
    /// synchronised, as pcastsrc's) reads each stamp as it is decoded.
    public static func sdkLatency(platform: LocalPlatform, auth: String, publish: String, seconds: Double) async throws -> Latency {
        let alias = "sdk-g2g"
        let feed = MediaFeed()
        var options = UserMediaOptions()
        options.video.source = .feed(feed)
        options.video.width = .exact(1280)
        options.video.height = .exact(720)
        options.video.frameRate = .exact(30)
        options.audio.enabled = false
        let pushed = Mutex<[UInt32: ContinuousClock.Instant]>([:]), arrived = Mutex<[UInt32: ContinuousClock.Instant]>([:])
        let shown = Mutex<[UInt32: ContinuousClock.Instant]>([:])
        let counter = Atomic<UInt32>(0), running = Atomic<Bool>(true)
        let producer = Task.detached {
            var next = ContinuousClock.now
            while running.load(ordering: .relaxed) {
                var frame = try VideoFrame(format: .i420, width: 1280, height: 720)
                let value = counter.add(1, ordering: .relaxed).newValue
                FrameStamp.paint(value, into: &frame)
                pushed.withLock { $0[value] = .now }
                feed.push(frame)
                next += .microseconds(33_333)
                try await Task.sleep(until: next, clock: .continuous)
            }
        }
        defer { running.store(false, ordering: .relaxed) }
        let publisherSDK = PCast(PCastOptions(uri: platform.signalingURL))
        try await publisherSDK.start(authToken: auth)
        let media = try await publisherSDK.getUserMedia(options)
        let publisher = try await publisherSDK.publish(streamToken: publish, mediaStream: media, tags: ["channelAlias:\(alias)"])
        let viewerSDK = PCast(PCastOptions(uri: platform.signalingURL))
        try await viewerSDK.start(authToken: auth)
        let stream = try await viewerSDK.subscribe(streamToken: try platform.token(.stream, tag: .channelAlias(alias)))
        let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true, synchronized: false))
        guard await renderer.start() == .ok else { throw BenchFailure("the SDK viewer's renderer did not start") }
        try renderer.setFrameReadyCallback(stream.getVideoTracks()[0]) { notification in
            guard case .video(let frame)? = try? notification.read(), let value = FrameStamp.read(frame) else { return }
            let now = ContinuousClock.now
            arrived.withLock { if $0[value] == nil { $0[value] = now } }
        }
        // Beside it, a synchronised renderer: when its sink shows the frame (as the application's
        // synchronised sink does for pcastsrc).
        let screen = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
        guard await screen.start() == .ok else { throw BenchFailure("the SDK viewer's synchronised renderer did not start") }
        try screen.onVideoPresented { frame in
            guard let value = FrameStamp.read(frame) else { return }
            let now = ContinuousClock.now
            shown.withLock { if $0[value] == nil { $0[value] = now } }
        }
        try await Task.sleep(for: .seconds(seconds + 2))
        running.store(false, ordering: .relaxed)
        _ = await producer.result
        await screen.stop()
        await renderer.stop()
        await stream.stop()
        await viewerSDK.stop()
        await publisher.stop()
        await media.stop()
        await publisherSDK.stop()
        // As the plugin's script does: from one second after the first frame read, to 2 s before the last push.
        let (sent, received) = (pushed.withLock { $0 }, arrived.withLock { $0 })
        guard let first = received.keys.min(), let lastPush = sent.values.max() else { throw BenchFailure("the SDK viewer read no stamp") }
        let window = sent.filter { $0.key >= first + 30 && $0.value <= lastPush - .seconds(2) }
        func milliseconds(_ seen: [UInt32: ContinuousClock.Instant]) -> [Double] {
            window.compactMap { key, at in seen[key].map { Double(($0 - at) / .microseconds(1)) / 1000 } }.sorted()
        }
        let latencies = milliseconds(received), screenLatencies = milliseconds(shown.withLock { $0 })
        func percentile(_ fraction: Double, of values: [Double]) -> Double {
            values.isEmpty ? 0 : values[min(values.count - 1, Int(fraction * Double(values.count)))]
        }
        return Latency(frames: window.count, read: latencies.count, missing: window.count - latencies.count,
                       p50: percentile(0.5, of: latencies), p90: percentile(0.9, of: latencies), p99: percentile(0.99, of: latencies),
                       screenRead: screenLatencies.count, screenP50: percentile(0.5, of: screenLatencies),
                       screenP90: percentile(0.9, of: screenLatencies), screenP99: percentile(0.99, of: screenLatencies))
    }

    /// CPU seconds (user + system, all threads) the process spends in `window`, after 3 s of warm-up.
    public static func cpuSeconds(of process: ChildProcess, window: Double) async throws -> Double {
        try await Task.sleep(for: .seconds(3))
        guard process.isRunning else { throw BenchFailure("process \(process.pid) ended during the warm-up") }
        let before = try cpuTicks(process.pid)
        try await Task.sleep(for: .seconds(window))
        let after = try cpuTicks(process.pid)
        return Double(after - before) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// utime + stime of a process, in clock ticks (`/proc/<pid>/stat` fields 14 and 15).
    public static func cpuTicks(_ pid: pid_t) throws -> Int {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { throw BenchFailure("no /proc/\(pid)/stat") }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command's ")": state is field 3, so utime (14) and stime (15) are at 11 and 12.
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { throw BenchFailure("unreadable /proc/\(pid)/stat") }
        return user + system
    }

    /// A repository script, looked for from the working directory and above the executable.
    public static func script(_ path: String, from executable: URL) throws -> URL {
        var candidates = [URL(fileURLWithPath: FileManager.default.currentDirectoryPath)]
        var directory = executable.deletingLastPathComponent()
        for _ in 0..<5 {
            candidates.append(directory)
            directory = directory.deletingLastPathComponent()
        }
        guard let found = candidates.map({ $0.appendingPathComponent(path) }).first(where: { FileManager.default.fileExists(atPath: $0.path) }) else {
            throw BenchFailure("\(path) not found (run the benchmark from the repository)")
        }
        return found
    }

    public static func markdown(_ result: Result) -> String {
        func figures(_ values: [Double]) -> String { values.map { String(format: "%.2f", $0) }.joined(separator: ", ") }
        func screenRow(_ latency: Latency) -> String {
            guard let read = latency.screenRead, let p50 = latency.screenP50, let p90 = latency.screenP90, let p99 = latency.screenP99 else {
                return "not measured | | |"
            }
            return "\(read) | \(String(format: "%.1f", p50)) | \(String(format: "%.1f", p90)) | \(String(format: "%.1f", p99))"
        }
        let cpu = result.cpu, plugin = result.plugin, sdk = result.sdk, hooks = result.sdkHookToHook
        return """
        # GStreamer elements (pcastsink, pcastsrc) against the SDK

        ## CPU: `gst-launch-1.0 … ! pcastsink` vs `pcast publish`, same source (720p30 test pattern, 2.5 Mbit/s, a tone), \(Int(cpu.windowSeconds)) s windows

        | | CPU s per window (each run) | median |
        |---|---|---|
        | gst-launch-1.0 … ! pcastsink | \(figures(cpu.pluginSeconds)) | \(String(format: "%.2f", median(cpu.pluginSeconds))) |
        | pcast publish | \(figures(cpu.sdkSeconds)) | \(String(format: "%.2f", median(cpu.sdkSeconds))) |

        Ratio \(String(format: "%.3f", cpu.ratio)) (goal ≤ \(cpu.goal)).

        ## Glass-to-glass, 720p30 H.264 through the relay, playout delay \(result.playoutDelayMilliseconds) ms (ms)

        | path | frames | missing | p50 | p90 | p99 |
        |---|---|---|---|---|---|
        | appsrc → pcastsink → relay → pcastsrc → appsink (one GStreamer application) | \(plugin.frames) | \(plugin.missing) | \(String(format: "%.1f", plugin.p50)) | \(String(format: "%.1f", plugin.p90)) | \(String(format: "%.1f", plugin.p99)) |
        | the same frames through the Swift API: MediaFeed → publish → relay → subscribe → renderer hook (reference) | \(sdk.frames) | \(sdk.missing) | \(String(format: "%.1f", sdk.p50)) | \(String(format: "%.1f", sdk.p90)) | \(String(format: "%.1f", sdk.p99)) |
        | SDK, its published figure: pre-encoder hook → post-decoder hook (camera-like source) | \(hooks.frames) | \(hooks.missing) | \(String(format: "%.1f", hooks.p50)) | \(String(format: "%.1f", hooks.p90)) | \(String(format: "%.1f", hooks.p99)) |

        Both pushed paths are measured from the push (before the SDK's capture chain: converter,
        scaler, frame-rate filter) to the frame handed on after decoding, in one process each; none
        waits for a sink's clock.

        At the screen (the same frames shown by a synchronised sink, after its clock wait):

        | path | frames shown | p50 | p90 | p99 |
        |---|---|---|---|---|
        | … → pcastsrc → a synchronised fakesink in the application | \(screenRow(plugin)) |
        | … → subscribe → a synchronised renderer (reference; its sink waits the playout delay) | \(screenRow(sdk)) |

        """
    }
}
