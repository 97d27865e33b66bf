import GStreamer
import PCastMedia
import PCastTestSupport
import Testing

@Suite("Frame hook: audio")
struct AudioFrameHookTests {
    /// 10 ms blocks of a stereo 1 kHz sine at half scale.
    static let source = "audiotestsrc num-buffers=5 samplesperbuffer=480 wave=sine freq=1000 volume=0.5 "
        + "! audio/x-raw,format=S16LE,rate=48000,channels=2,layout=interleaved"

    struct SeenAudio: Sendable {
        let format: AudioSampleFormat
        let channels: Int
        let sampleRate: Int
        let sampleCount: Int
        let samples: [Int16]
        let presentationTimestamp: Duration?
        let duration: Duration?
    }

    @Test("read gives S16 interleaved samples with channels, rate and sample count")
    func read() async throws {
        let pipeline = try Pipeline(description: "\(Self.source) ! identity name=hook ! fakesink sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let seen = Recorder<SeenAudio>()
        let errors = Recorder<String>()
        hook.setFrameReadyCallback { notification in
            do {
                guard notification.kind == .audio, let frame = try notification.read().audio else { return errors.append("not audio") }
                seen.append(SeenAudio(format: frame.format, channels: frame.channels, sampleRate: frame.sampleRate,
                                      sampleCount: frame.sampleCount, samples: frame.samples,
                                      presentationTimestamp: frame.presentationTimestamp, duration: frame.duration))
                _ = try notification.read(format: .bgra)
                errors.append("read(format:) on audio did not throw")
            } catch let error as MediaError where error.code == .wrongMediaKind {
            } catch {
                errors.append("\(error)")
            }
        }
        try await pipeline.runToEnd(timeout: .seconds(10))
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(seen.all.count == 5)
        for (index, frame) in seen.all.enumerated() {
            #expect(frame.format == .s16)
            #expect(frame.channels == 2)
            #expect(frame.sampleRate == 48_000)
            #expect(frame.sampleCount == 480)
            #expect(frame.samples.count == 960)
            #expect(frame.presentationTimestamp == .milliseconds(10 * index))
            #expect(frame.duration == .milliseconds(10))
            // Interleaved: left and right carry the same sine.
            let left = stride(from: 0, to: 960, by: 2).map { frame.samples[$0] }
            let right = stride(from: 1, to: 960, by: 2).map { frame.samples[$0] }
            #expect(left == right)
            let peak = left.map { abs(Int($0)) }.max() ?? 0
            #expect(abs(peak - 16_383) < 200, "peak \(peak)")
        }
    }

    @Test("writing silence makes downstream receive all zeros, timestamps kept")
    func writeSilence() async throws {
        let pipeline = try Pipeline(description: "\(Self.source) ! identity name=hook ! appsink name=out sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let errors = Recorder<String>()
        hook.setFrameReadyCallback { notification in
            do {
                guard let input = try notification.read().audio else { return }
                // No timestamps given: the incoming frame's presentation time, the sample count's duration.
                try notification.write(AudioFrame(silenceOf: input.sampleCount, channels: input.channels, sampleRate: input.sampleRate))
            } catch {
                errors.append("\(error)")
            }
        }
        let samples = try await runCollecting(pipeline)
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(samples.count == 5)
        for (index, sample) in samples.enumerated() {
            #expect(sample.buffer.size == 480 * 2 * 2)
            #expect(sample.buffer.bytes.allSatisfy { $0 == 0 })
            #expect(sample.buffer.presentationTimestamp == .milliseconds(10 * index))
            #expect(sample.buffer.duration == .milliseconds(10))
        }
    }

    @Test("samples changed in place reach downstream")
    func writeHalved() async throws {
        let pipeline = try Pipeline(description: "\(Self.source) ! identity name=hook ! appsink name=out sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let errors = Recorder<String>()
        hook.setFrameReadyCallback { notification in
            do {
                guard var frame = try notification.read().audio else { return }
                try frame.withUnsafeMutableSamples { samples in
                    for index in samples.indices { samples[index] /= 2 }
                }
                try notification.write(frame)
            } catch {
                errors.append("\(error)")
            }
        }
        let samples = try await runCollecting(pipeline)
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(samples.count == 5)
        for sample in samples {
            let values = sample.buffer.bytes.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
            let peak = values.map { abs(Int($0)) }.max() ?? 0
            #expect(abs(peak - 8_191) < 100, "peak \(peak)")
        }
    }

    @Test("drop removes audio frames")
    func drop() async throws {
        let pipeline = try Pipeline(description: "\(Self.source) ! identity name=hook ! appsink name=out sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let count = Counter()
        hook.setFrameReadyCallback { notification in
            if count.increment() % 2 == 0 { notification.drop() }
        }
        let samples = try await runCollecting(pipeline)
        #expect(samples.map { $0.buffer.presentationTimestamp } == [.zero, .milliseconds(20), .milliseconds(40)])
        #expect(hook.statistics.framesDroppedByCallback == 2)
    }

    @Test("a frame of another channel count or rate is refused; non-S16 audio is unsupported")
    func mismatches() async throws {
        let pipeline = try Pipeline(description: "\(Self.source) ! identity name=hook ! appsink name=out sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let errors = Recorder<String>()
        hook.setFrameReadyCallback { notification in
            do {
                try notification.write(AudioFrame(silenceOf: 480, channels: 1, sampleRate: 48_000))
                errors.append("mono accepted")
            } catch let error as MediaError where error.code == .formatMismatch {
            } catch {
                errors.append("\(error)")
            }
            do {
                try notification.write(AudioFrame(silenceOf: 480, channels: 2, sampleRate: 44_100))
                errors.append("44.1 kHz accepted")
            } catch let error as MediaError where error.code == .formatMismatch {
            } catch {
                errors.append("\(error)")
            }
        }
        let samples = try await runCollecting(pipeline)
        #expect(errors.all.isEmpty, "\(errors.all)")
        // Nothing was written, so the original sine went through.
        #expect(samples.count == 5)
        #expect(samples.allSatisfy { $0.buffer.bytes.contains { $0 != 0 } })

        let float = try Pipeline(description: "audiotestsrc num-buffers=2 ! audio/x-raw,format=F32LE ! identity name=hook ! fakesink sync=false")
        let floatHook = try FrameHook(pipeline: float, element: "hook")
        let floatErrors = Recorder<MediaError>()
        let kinds = Recorder<MediaKind?>()
        floatHook.setFrameReadyCallback { notification in
            kinds.append(notification.kind)
            do { _ = try notification.read() } catch let error as MediaError { floatErrors.append(error) } catch {}
        }
        try await float.runToEnd(timeout: .seconds(10))
        #expect(kinds.all == [.audio, .audio])
        #expect(floatErrors.all.count == 2)
        #expect(floatErrors.all.allSatisfy { $0.code == .unsupportedFormat })
    }

    @Test("audio frames made from samples keep them, and reject bad shapes")
    func frameValues() throws {
        let frame = try AudioFrame(channels: 2, sampleRate: 16_000, samples: [1, -1, 2, -2, 3, -3])
        #expect(frame.sampleCount == 3)
        #expect(frame.samples == [1, -1, 2, -2, 3, -3])
        #expect(frame.sampleDuration == .nanoseconds(187_500))
        var copy = frame
        try copy.withUnsafeMutableSamples { $0[0] = 100 }
        #expect(copy.samples[0] == 100)
        #expect(frame.samples[0] == 1)
        #expect(throws: MediaError.self) { try AudioFrame(channels: 2, sampleRate: 16_000, samples: [1, 2, 3]) }
        #expect(throws: MediaError.self) { try AudioFrame(silenceOf: 10, channels: 0, sampleRate: 16_000) }
    }
}
