import Foundation
import PCastBenchmarks
import GStreamer
import PCastMedia
import PCastTestSupport
import Testing

extension Devices {
    /// Echo cancellation on a real acoustic loop: a renderer plays pink noise into a private
    /// PulseAudio server's null sink, and getUserMedia captures the sink's monitor (the echo). The name
    /// ends in `RealDeviceStandInTests` so it runs in that suite's process (`make test`), which points
    /// PulseAudio clients at the private server.
    @Suite("Echo cancellation on a PulseAudio loop", .serialized)
    struct EchoCancellationRealDeviceStandInTests {
        @Test("with the renderer's audio as far end, webrtcdsp takes at least 12 dB of echo out of the capture")
        func echoReduction() async throws {
            _ = try PulseAudioServer.shared()
            let loop = EchoLoopMeasurement(captureSource: "pulsesrc device=pcast_null.monitor")
            var result = try await loop.run()
            // The stand-in sometimes delivers pure digital silence for a whole capture (the monitor
            // hears nothing: no cancellation gets audio down to exactly zero); such a run is repeated.
            // The canceller on the stand-in sometimes does not converge within a run (seen in 3 of 8
            // runs on 2026-11-26: 2.5–4.6 dB, the next run 22 dB): such a run is repeated too; a
            // canceller that does not work fails all three.
            for _ in 0..<2 where min(result.echoOffDecibels, result.echoOnDecibels) < Self.digitalSilence || result.reductionDecibels < 12 {
                print(String(format: "echo: silence or no convergence (off %.1f dB, on %.1f dB), measuring again",
                             result.echoOffDecibels, result.echoOnDecibels))
                result = try await loop.run()
            }
            print(String(format: "echo: off %.1f dB, on %.1f dB, reduction %.1f dB",
                         result.echoOffDecibels, result.echoOnDecibels, result.reductionDecibels))
            // The far end reaches the monitor: without cancellation the capture is loud; with it, the
            // capture still carries sound (it is cancelled, not cut off).
            #expect(result.echoOffDecibels > 50)
            #expect(result.echoOnDecibels > Self.digitalSilence)
            #expect(result.reductionDecibels >= 12)
        }

        /// Below this (dB relative to one S16 step) a capture is digital silence.
        static let digitalSilence = 0.0

        @Test("echo cancellation starts before any renderer, and a renderer started later feeds it")
        func rendererAfterCapture() async throws {
            _ = try PulseAudioServer.shared()
            var (off, on) = try await Self.captureFirst()
            // Repeated as above: silence from the stand-in, or a canceller that did not converge.
            for _ in 0..<2 where min(off, on) < Self.digitalSilence || off - on < 12 {
                print(String(format: "echo: silence or no convergence (off %.1f dB, on %.1f dB), measuring again", off, on))
                (off, on) = try await Self.captureFirst()
            }
            print(String(format: "echo, renderer started after the capture: off %.1f dB, on %.1f dB", off, on))
            #expect(off > 50)
            #expect(on > Self.digitalSilence)
            #expect(off - on >= 12)
        }

        /// The capture with echo cancellation first, then the far end; then the same capture without.
        static func captureFirst() async throws -> (off: Double, on: Double) {
            var nearOptions = UserMediaOptions()
            nearOptions.video.enabled = false
            nearOptions.audio.source = .pipeline("pulsesrc device=pcast_null.monitor")
            nearOptions.audio.echoCancelationMode = .exact(.on)
            let near = try await UserMedia.getUserMedia(nearOptions)
            #expect(near.audioSelection?.echoCancelation == true)

            var farOptions = UserMediaOptions()
            farOptions.video.enabled = false
            farOptions.audio.source = .pipeline("audiotestsrc is-live=true wave=pink-noise volume=0.25")
            let far = try await UserMedia.getUserMedia(farOptions)
            let renderer = far.mediaStream.createRenderer()
            #expect(await renderer.start() == .ok)

            let track = try #require(near.mediaStream.getAudioTracks().first)
            let cancelled = Recorder<(Duration, Double, Int)>()
            try near.setFrameReadyCallback(track) { notification in Self.record(notification, into: cancelled) }
            try await Task.sleep(for: .seconds(9))
            await near.stop()

            // The same loop without cancellation, the far end still playing.
            nearOptions.audio.echoCancelationMode = .exact(.off)
            let plain = try await UserMedia.getUserMedia(nearOptions)
            let raw = Recorder<(Duration, Double, Int)>()
            try plain.setFrameReadyCallback(try #require(plain.mediaStream.getAudioTracks().first)) { notification in
                Self.record(notification, into: raw)
            }
            try await Task.sleep(for: .seconds(3))
            await plain.stop()
            await renderer.stop()
            await far.stop()

            // The last three seconds with cancellation (the canceller has had five to converge since
            // the far end began) against the last two without.
            return (off: Self.power(raw.all, from: .seconds(1)), on: Self.power(cancelled.all, from: .seconds(6)))
        }

        static func record(_ notification: FrameNotification, into recorder: Recorder<(Duration, Double, Int)>) {
            guard let frame = try? notification.read().audio, let timestamp = frame.presentationTimestamp,
                  let sum = try? frame.withUnsafeSamples({ $0.reduce(0.0) { $0 + Double($1) * Double($1) } }) else { return }
            recorder.append((timestamp, sum, frame.sampleCount * frame.channels))
        }

        /// Mean power in dB of what was recorded from `skip` after the first frame on.
        static func power(_ frames: [(Duration, Double, Int)], from skip: Duration) -> Double {
            guard let start = frames.first?.0 else { return -.infinity }
            let chosen = frames.filter { $0.0 - start >= skip }
            let count = chosen.reduce(0) { $0 + $1.2 }
            guard count > 0 else { return -.infinity }
            return 10 * log10(max(chosen.reduce(0.0) { $0 + $1.1 } / Double(count), 1e-9))
        }
    }
}
