import ArgumentParser
import Foundation
import Logging
import PCast
import PCastMedia
import PCastNode
import PCastProtocol
import PCastRelay
import PCastServer

/// `pcast demo`: the embedded default end to end. A test pattern and a tone are published through
/// the in-process platform's relay to a subscriber that renders them, with a live status line.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Publish a test pattern and tone through the embedded platform to a subscriber; show fps, bitrate, glass-to-glass latency and loss."
    )

    @Option(help: "Seconds to run (0: until Ctrl-C).") var seconds: Double = 15
    @Option(help: "Sink: auto (a window when there is a display) or null.") var sink = "auto"
    @Option(help: "Width.") var width = 1280
    @Option(help: "Height.") var height = 720
    @Option(help: "Frame rate.") var fps: Double = 30
    @Option(help: "Video bitrate, kbit/s.") var bitrate = 2500
    @Flag(help: "No status line, only the summary.") var quiet = false

    func run() async throws {
        SDKLog.bootstrapCommandLine()
        let platform: LocalPlatform
        do {
            platform = try await LocalPlatform.start()
        } catch {
            throw fail("the embedded platform did not start: \(error)")
        }
        // The demo ends on Ctrl-C or SIGTERM by itself (`runUntilStopped`), with its summary.
        var sdkOptions = PCastOptions(uri: platform.signalingURL)
        sdkOptions.enableProcessTerminationSignalHandling = false
        let publisherSDK = PCast(sdkOptions)
        let viewerSDK = PCast(sdkOptions)
        let meter = StreamMeter()
        var options = UserMediaOptions()
        options.video.deviceId = .exact(SourceDevices.syntheticVideoId)
        options.video.width = .exact(width)
        options.video.height = .exact(height)
        options.video.frameRate = .exact(fps)
        options.audio.deviceId = .exact(SourceDevices.syntheticAudioId)

        let headless = ProcessInfo.processInfo.environment["DISPLAY"].map(\.isEmpty) ?? true
        let useNull = sink == "null" || headless
        let media: UserMediaStream, publisher: Publisher, stream: MediaStream, renderer: Renderer
        do {
            try await publisherSDK.start(authToken: try platform.token(.auth))
            try await viewerSDK.start(authToken: try platform.token(.auth))
            media = try await publisherSDK.getUserMedia(options)
            try meter.stamp(media)
            publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media, tags: ["demo"],
                                                       settings: EncodingSettings(videoBitrate: bitrate, keyframeInterval: Int(fps * 2)))
            stream = try await viewerSDK.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
            renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: useNull, useNullAudioDevice: useNull))
            let status = await renderer.start()
            guard status == .ok else { throw ValidationError("renderer: \(status)") }
            try meter.watch(renderer, of: stream)
        } catch {
            await platform.shutdown()
            throw fail("\(error)")
        }
        print("demo: \(width)x\(height)@\(Int(fps)) H.264 + Opus, stream \(publisher.streamId), relay udp 127.0.0.1:\(platform.relay.mediaPort), sink \(useNull ? "null" : "window"), playout delay \(RTPReceiver.defaultPlayoutDelay)")

        let terminal = isatty(STDERR_FILENO) != 0
        let started = ContinuousClock.now
        var all = StreamMeter.Snapshot(frames: 0, missing: 0, reordered: 0, latencies: [])
        var lastBytes = platform.relay.statistics().bytesIn
        let ticker = Task {
            var snapshots: [StreamMeter.Snapshot] = []
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                let snapshot = meter.take()
                snapshots.append(snapshot)
                let bytes = platform.relay.statistics().bytesIn
                let megabits = Double(bytes &- lastBytes) * 8 / 1e6
                lastBytes = bytes
                if !quiet {
                    let line = String(format: "%5.1f fps  %5.2f Mb/s  latency p50 %5.1f ms  p99 %5.1f ms  lost %d frames",
                                      Double(snapshot.frames), megabits, snapshot.percentile(50) ?? .nan, snapshot.percentile(99) ?? .nan, snapshot.missing)
                    FileHandle.standardError.write(Data((terminal ? "\r\u{1B}[2K" + line : line + "\n").utf8))
                }
            }
            return snapshots
        }
        await runUntilStopped(seconds: seconds) { _ = await stream.ended() }
        ticker.cancel()
        for snapshot in await ticker.value + [meter.take()] {
            all.frames += snapshot.frames
            all.missing += snapshot.missing
            all.reordered += snapshot.reordered
            all.latencies += snapshot.latencies
        }
        all.latencies.sort()
        if terminal && !quiet { FileHandle.standardError.write(Data("\n".utf8)) }
        let elapsed = ContinuousClock.now - started
        let relay = platform.relay.statistics()
        print(String(format: "summary: %d frames in %.1f s (%.1f fps), %d missing, %d out of order; glass-to-glass p50 %.1f ms, p90 %.1f ms, p99 %.1f ms; relay %llu packets in, %llu out, %llu SRTP failures, %llu NACKs served, %llu keyframe requests",
                     all.frames, elapsed.seconds, Double(all.frames) / elapsed.seconds, all.missing, all.reordered,
                     all.percentile(50) ?? .nan, all.percentile(90) ?? .nan, all.percentile(99) ?? .nan,
                     relay.packetsIn, relay.packetsOut, relay.srtpFailures, relay.nacksServed, relay.keyframeRequests))
        await renderer.stop()
        await stream.stop()
        await publisher.stop()
        await media.stop()
        await viewerSDK.stop()
        await publisherSDK.stop()
        await platform.shutdown()
        if all.frames == 0 { throw fail("no frame reached the subscriber") }
    }
}

