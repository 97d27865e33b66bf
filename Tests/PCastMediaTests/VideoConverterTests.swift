import GStreamer
import PCastMedia
import PCastTestSupport
import Testing

/// The GStreamer-layer pieces the frame hook is built on: VideoConverter, caps layout changes and
/// caps events on pads.
@Suite("VideoConverter and caps")
struct VideoConverterTests {
    @Test("a converter turns a grey I420 frame into BGRA and a smaller NV12 frame, keeping timestamps")
    func convert() throws {
        let input = try VideoInfo(format: .i420, width: 32, height: 16, frameRate: 30)
        // Y 126, U = V = 128: mid grey in limited range (≈ 128 in full-range RGB).
        let frame = Buffer(bytes: [UInt8](repeating: 126, count: 32 * 16) + [UInt8](repeating: 128, count: 32 * 16 / 2))
        frame.presentationTimestamp = .milliseconds(123)
        frame.duration = .milliseconds(33)

        let toBGRA = try VideoConverter(from: input, to: VideoInfo(format: .bgra, width: 32, height: 16, frameRate: 30))
        let bgra = try toBGRA.convert(frame)
        #expect(bgra.size == 32 * 16 * 4)
        #expect(bgra.presentationTimestamp == .milliseconds(123))
        #expect(bgra.duration == .milliseconds(33))
        let pixels = bgra.bytes
        for channel in 0..<3 {
            #expect(near(stride(from: channel, to: pixels.count, by: 4).map { pixels[$0] }, 128, tolerance: 3))
        }
        #expect(stride(from: 3, to: pixels.count, by: 4).allSatisfy { pixels[$0] == 255 })

        let toSmallNV12 = try VideoConverter(from: input, to: VideoInfo(format: .nv12, width: 16, height: 8, frameRate: 30))
        let nv12 = try toSmallNV12.convert(frame)
        #expect(nv12.size == 16 * 8 * 3 / 2)
        #expect(near(nv12.bytes[0..<(16 * 8)], 126, tolerance: 1))
        #expect(near(nv12.bytes[(16 * 8)...], 128, tolerance: 1))

        // Steady conversion reuses pooled buffers and keeps working.
        for _ in 0..<20 { _ = try toBGRA.convert(frame) }
    }

    @Test("conversion refuses what is not raw video, and too-small input")
    func refusals() throws {
        let audio = try Caps("audio/x-raw,format=S16LE,rate=48000,channels=2,layout=interleaved")
        let video = try Caps("video/x-raw,format=I420,width=32,height=16,framerate=30/1")
        #expect(throws: GStreamerError.invalidCaps(audio.description)) { try VideoConverter(from: audio, to: video) }
        let converter = try VideoConverter(from: video, to: Caps("video/x-raw,format=BGRA,width=32,height=16,framerate=30/1"))
        #expect(throws: GStreamerError.mapFailed) { try converter.convert(Buffer(bytes: [1, 2, 3])) }
    }

    @Test("replacingVideoLayout keeps rate and colorimetry within a family, and defaults them across")
    func replacingLayout() throws {
        let caps = try Caps("video/x-raw,format=I420,width=1280,height=720,framerate=25/1,colorimetry=bt601,pixel-aspect-ratio=1/1")
        #expect(try caps.replacingVideoLayout(format: .i420, width: 1280, height: 720) === caps)
        let nv12 = try caps.replacingVideoLayout(format: .nv12, width: 640, height: 360)
        let nv12Info = try #require(nv12.videoInfo)
        #expect(nv12Info.format == .nv12 && nv12Info.width == 640 && nv12Info.height == 360)
        #expect(nv12Info.frameRateNumerator == 25)
        #expect(nv12.description.contains("colorimetry=(string)bt601"))
        let bgra = try caps.replacingVideoLayout(format: .bgra, width: 640, height: 360)
        #expect(bgra.videoInfo?.strides == [2560])
        #expect(!bgra.description.contains("bt601"))
        #expect(throws: GStreamerError.self) { try caps.replacingVideoLayout(format: .i420, width: 0, height: 360) }
        #expect(throws: GStreamerError.self) { try Caps("audio/x-raw").replacingVideoLayout(format: .i420, width: 2, height: 2) }
    }

    @Test("caps probes see negotiation; pushed caps reach the sink; the peer is asked before")
    func capsEvents() async throws {
        let pipeline = try Pipeline(description: """
            videotestsrc num-buffers=4 ! video/x-raw,format=GRAY8,width=16,height=16,framerate=30/1 \
            ! identity name=hook ! appsink name=out sync=false
            """)
        let pad = try pipeline.element(named: "hook").staticPad("src")
        let seen = Recorder<String>()
        pad.addCapsProbe { caps in seen.append(caps.description) }
        let small = try Caps("video/x-raw,format=GRAY8,width=8,height=8,framerate=30/1")
        #expect(pad.peerAcceptsCaps(small))
        let pushed = Counter()
        pad.addBufferProbe { buffer in
            // From the third frame on, send 8×8 frames.
            guard pushed.increment() >= 3 else { return .pass }
            if pushed.value == 3 && !pad.pushCaps(small) { return .drop }
            buffer = Buffer(bytes: [UInt8](repeating: 1, count: 64))
            return .pass
        }
        let samples = try await runCollecting(pipeline)
        #expect(samples.map { $0.videoInfo?.width ?? 0 } == [16, 16, 8, 8])
        #expect(seen.all.count == 2)
        #expect(seen.all.last == small.description)
        #expect(Buffer(bytes: [1]).videoMeta == nil)
    }
}
