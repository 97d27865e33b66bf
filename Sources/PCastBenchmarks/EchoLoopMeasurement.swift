import Foundation
import GStreamer
import PCastMedia
import Synchronization

/// Measures echo cancellation on a real acoustic loop: a renderer plays a far-end signal (pink
/// noise) to the default audio output, and getUserMedia captures the microphone `captureSource`,
/// which hears it; the captured audio's power is measured with echo cancellation off and on.
///
/// On a machine without speakers and microphone, a PulseAudio null sink is the output and its
/// monitor is the microphone (`pulsesrc device=<sink>.monitor`): the echo is the far end itself,
/// delayed by the sound server's buffering.
///
/// ```swift
/// let loop = EchoLoopMeasurement(captureSource: "pulsesrc device=pcast_null.monitor")
/// let result = try await loop.run()
/// print(result.reductionDecibels)   // about 20 dB here
/// ```
public struct EchoLoopMeasurement: Sendable {
    /// What one run gives.
    public struct Result: Sendable, Hashable, Codable {
        /// Mean power of the captured audio without echo cancellation, dB relative to one S16 step.
        public var echoOffDecibels: Double
        /// The same with echo cancellation.
        public var echoOnDecibels: Double
        public var reductionDecibels: Double { echoOffDecibels - echoOnDecibels }
    }

    /// The gst-launch description of the microphone that hears the output.
    public var captureSource: String
    /// Time the canceller gets to converge before measuring.
    public var warmUp: Duration
    /// Time measured.
    public var duration: Duration

    public init(captureSource: String, warmUp: Duration = .seconds(3), duration: Duration = .seconds(4)) {
        self.captureSource = captureSource
        self.warmUp = warmUp
        self.duration = duration
    }

    /// Measures without and then with echo cancellation.
    ///
    /// - Throws: ``UserMediaError`` when the far end or the capture cannot be had (a hard echo
    ///   cancellation constraint names the missing plugin), or ``MediaError`` when the renderer does
    ///   not start or no audio is captured.
    public func run() async throws -> Result {
        let off = try await capturedPower(echoCancelation: false)
        let on = try await capturedPower(echoCancelation: true)
        return Result(echoOffDecibels: off, echoOnDecibels: on)
    }

    /// Mean power of what the microphone captures while the far end plays, in dB.
    public func capturedPower(echoCancelation: Bool) async throws -> Double {
        var farOptions = UserMediaOptions()
        farOptions.video.enabled = false
        farOptions.audio.source = .pipeline("audiotestsrc is-live=true wave=pink-noise volume=0.25")
        let far = try await UserMedia.getUserMedia(farOptions)
        let renderer = far.mediaStream.createRenderer(RendererOptions(useNullVideoDevice: true))
        let status = await renderer.start()
        guard status == .ok else {
            await far.stop()
            throw MediaError.unsupportedFormat("the far-end renderer did not start: \(status)")
        }

        var nearOptions = UserMediaOptions()
        nearOptions.video.enabled = false
        nearOptions.audio.source = .pipeline(captureSource)
        nearOptions.audio.echoCancelationMode = .exact(echoCancelation ? .on : .off)
        let near: UserMediaStream
        do {
            near = try await UserMedia.getUserMedia(nearOptions)
        } catch {
            await renderer.stop()
            await far.stop()
            throw error
        }
        let energy = EnergyMeter(skip: warmUp)
        do {
            guard let track = near.mediaStream.getAudioTracks().first else { throw MediaError.unsupportedFormat("the capture has no audio track") }
            try near.setFrameReadyCallback(track) { notification in
                guard let frame = try? notification.read().audio else { return }
                energy.add(frame)
            }
            try await Task.sleep(for: warmUp + duration)
        } catch {
            await near.stop()
            await renderer.stop()
            await far.stop()
            throw error
        }
        await near.stop()
        await renderer.stop()
        await far.stop()
        guard let power = energy.meanPower else {
            throw MediaError.invalidFrame("no audio captured after \(warmUp)")
        }
        return 10 * log10(max(power, 1e-9))
    }
}

/// Mean square of S16 samples, counted from `skip` after the first frame's timestamp.
final class EnergyMeter: Sendable {
    private let skip: Duration
    private let state = Mutex<(start: Duration?, sum: Double, count: Int)>((nil, 0, 0))

    init(skip: Duration) { self.skip = skip }

    func add(_ frame: AudioFrame) {
        guard let timestamp = frame.presentationTimestamp else { return }
        let counted = state.withLock { state -> Bool in
            if state.start == nil { state.start = timestamp }
            return timestamp - state.start! >= skip
        }
        guard counted, let sum = try? frame.withUnsafeSamples({ samples in
            samples.reduce(0.0) { $0 + Double($1) * Double($1) }
        }) else { return }
        let count = frame.sampleCount * frame.channels
        state.withLock { state in
            state.sum += sum
            state.count += count
        }
    }

    var meanPower: Double? {
        state.withLock { $0.count > 0 ? $0.sum / Double($0.count) : nil }
    }
}
