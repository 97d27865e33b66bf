import GStreamer
import PCastMedia
import PCastTestSupport
import Testing

/// What a callback saw of one frame, for checking on the test's task.
struct SeenFrame: Sendable {
    let format: PixelFormat
    let width: Int
    let height: Int
    let strides: [Int]
    let offsets: [Int]
    let bytes: [UInt8]
    let presentationTimestamp: Duration?

    init(_ frame: VideoFrame) {
        format = frame.format
        width = frame.width
        height = frame.height
        strides = frame.strides
        offsets = frame.planeOffsets
        bytes = frame.bytes
        presentationTimestamp = frame.presentationTimestamp
    }

    /// The bytes of one plane's visible rows (`rowBytes` each), stride padding left out.
    func plane(_ index: Int, rows: Int, rowBytes: Int) -> [UInt8] {
        (0..<rows).flatMap { row in
            let start = offsets[index] + row * strides[index]
            return bytes[start..<(start + rowBytes)]
        }
    }
}

@Suite("Frame hook: video")
struct VideoFrameHookTests {
    static let i420 = "video/x-raw,format=I420,width=64,height=48,framerate=30/1"

    /// A solid test pattern and its values: BT.601 limited-range YUV, and BGRA.
    struct Solid: Sendable, CustomTestStringConvertible {
        let pattern: String
        let y: Int, u: Int, v: Int
        let b: Int, g: Int, r: Int
        var testDescription: String { pattern }
    }

    static let solids = [
        Solid(pattern: "red", y: 81, u: 90, v: 240, b: 0, g: 0, r: 255),
        Solid(pattern: "white", y: 235, u: 128, v: 128, b: 255, g: 255, r: 255),
        Solid(pattern: "black", y: 16, u: 128, v: 128, b: 0, g: 0, r: 0),
    ]

    @Test("read() and read(format:) give I420, NV12 and BGRA with the right layout and pixels", arguments: solids)
    func readFormats(_ solid: Solid) async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=3 pattern=\(solid.pattern) ! \(Self.i420) ! identity name=hook ! fakesink sync=false")
        // Every frame, however long its four reads take (the source runs flat out: a frame whose
        // callback outlasted a frame interval on a loaded machine was dropped as late).
        let hook = try FrameHook(pipeline: pipeline, element: "hook", options: .init(dropsLateFrames: false))
        let seen = Recorder<[SeenFrame]>()
        let errors = Recorder<String>()
        hook.setFrameReadyCallback { notification in
            do {
                guard let native = try notification.read().video else { return errors.append("not video") }
                seen.append([
                    SeenFrame(native),
                    SeenFrame(try notification.read(format: .i420)),
                    SeenFrame(try notification.read(format: .nv12)),
                    SeenFrame(try notification.read(format: .bgra)),
                ])
            } catch {
                errors.append("\(error)")
            }
        }
        try await pipeline.runToEnd(timeout: .seconds(10))

        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(seen.all.count == 3)
        let w = 64, h = 48
        for frames in seen.all {
            let (native, i420, nv12, bgra) = (frames[0], frames[1], frames[2], frames[3])
            for frame in [native, i420] {
                #expect(frame.format == .i420)
                #expect(frame.width == w && frame.height == h)
                #expect(frame.strides == [64, 32, 32])
                #expect(frame.offsets == [0, 3072, 3840])
                #expect(frame.bytes.count == w * h * 3 / 2)
                #expect(near(frame.plane(0, rows: h, rowBytes: w), solid.y), "Y of \(solid.pattern)")
                #expect(near(frame.plane(1, rows: h / 2, rowBytes: w / 2), solid.u), "U of \(solid.pattern)")
                #expect(near(frame.plane(2, rows: h / 2, rowBytes: w / 2), solid.v), "V of \(solid.pattern)")
            }

            #expect(nv12.format == .nv12)
            #expect(nv12.strides == [64, 64])
            #expect(nv12.offsets == [0, 3072])
            #expect(nv12.bytes.count == w * h * 3 / 2)
            #expect(near(nv12.plane(0, rows: h, rowBytes: w), solid.y))
            let uv = nv12.plane(1, rows: h / 2, rowBytes: w)
            #expect(near(stride(from: 0, to: uv.count, by: 2).map { uv[$0] }, solid.u), "NV12 U of \(solid.pattern)")
            #expect(near(stride(from: 1, to: uv.count, by: 2).map { uv[$0] }, solid.v), "NV12 V of \(solid.pattern)")

            #expect(bgra.format == .bgra)
            #expect(bgra.strides == [w * 4])
            #expect(bgra.offsets == [0])
            #expect(bgra.bytes.count == w * h * 4)
            let pixels = bgra.plane(0, rows: h, rowBytes: w * 4)
            #expect(near(stride(from: 0, to: pixels.count, by: 4).map { pixels[$0] }, solid.b), "B of \(solid.pattern)")
            #expect(near(stride(from: 1, to: pixels.count, by: 4).map { pixels[$0] }, solid.g), "G of \(solid.pattern)")
            #expect(near(stride(from: 2, to: pixels.count, by: 4).map { pixels[$0] }, solid.r), "R of \(solid.pattern)")
            #expect(near(stride(from: 3, to: pixels.count, by: 4).map { pixels[$0] }, 255, tolerance: 0), "alpha")

            #expect(native.presentationTimestamp == bgra.presentationTimestamp)
        }
        #expect(seen.all.map { $0[0].presentationTimestamp } == [.zero, .nanoseconds(33_333_333), .nanoseconds(66_666_666)])
    }

    @Test("write replaces the content and timestamps; downstream sees the written pixels")
    func writeReplacesContent() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=5 pattern=black ! \(Self.i420) ! identity name=hook ! appsink name=out sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let errors = Recorder<String>()
        hook.setFrameReadyCallback { notification in
            do {
                guard var frame = try notification.read().video else { return }
                // Luma to 200 in place (the frame takes a copy of its own), timestamps moved by 10 s.
                let (start, count) = (frame.planeOffsets[0], frame.strides[0] * frame.height)
                try frame.withUnsafeMutableBytes { bytes in
                    for index in start..<(start + count) { bytes[index] = 200 }
                }
                frame.presentationTimestamp = frame.presentationTimestamp.map { $0 + .seconds(10) }
                try notification.write(frame)
            } catch {
                errors.append("\(error)")
            }
        }
        let samples = try await runCollecting(pipeline)
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(samples.count == 5)
        for (index, sample) in samples.enumerated() {
            let bytes = sample.buffer.bytes
            #expect(bytes.count == 64 * 48 * 3 / 2)
            #expect(bytes[0..<(64 * 48)].allSatisfy { $0 == 200 })
            #expect(near(bytes[(64 * 48)...], 128), "chroma left as it was")
            #expect(sample.buffer.presentationTimestamp == .seconds(10) + .nanoseconds(Int64(index) * 1_000_000_000 / 30))
        }
        #expect(hook.statistics.framesWritten == 5)
    }

    @Test("a frame made from scratch replaces the incoming one")
    func writeNewFrame() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=4 pattern=white ! \(Self.i420) ! identity name=hook ! appsink name=out sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let errors = Recorder<String>()
        hook.setFrameReadyCallback { notification in
            do {
                let bytes = [UInt8](repeating: 16, count: 64 * 48) + [UInt8](repeating: 128, count: 64 * 48 / 2)
                try notification.write(VideoFrame(format: .i420, width: 64, height: 48, bytes: bytes,
                                                  presentationTimestamp: .milliseconds(500), duration: .milliseconds(40)))
            } catch {
                errors.append("\(error)")
            }
        }
        let samples = try await runCollecting(pipeline)
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(samples.count == 4)
        for sample in samples {
            #expect(sample.buffer.bytes[0..<(64 * 48)].allSatisfy { $0 == 16 })
            #expect(sample.buffer.presentationTimestamp == .milliseconds(500))
            #expect(sample.buffer.duration == .milliseconds(40))
        }
    }

    @Test("writing another size renegotiates: downstream receives the new size, and the old one again after")
    func writeNewSize() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=6 pattern=white ! \(Self.i420) ! identity name=hook ! appsink name=out sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let errors = Recorder<String>()
        let count = Counter()
        hook.setFrameReadyCallback { notification in
            // Frames 1, 2 and 5 become 32×24; 3, 4 and 6 pass unchanged.
            guard [1, 2, 5].contains(count.increment()) else { return }
            do {
                // No timestamps given: the written frame takes the incoming frame's.
                var small = try VideoFrame(format: .i420, width: 32, height: 24)
                try small.withUnsafeMutableBytes { bytes in
                    for index in 0..<(32 * 24) { bytes[index] = 50 }
                    for index in (32 * 24)..<bytes.count { bytes[index] = 128 }
                }
                try notification.write(small)
            } catch {
                errors.append("\(error)")
            }
        }
        let samples = try await runCollecting(pipeline)
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(samples.count == 6)
        let sizes = samples.map { sample -> [Int] in
            let info = sample.videoInfo
            return [info?.width ?? 0, info?.height ?? 0, sample.buffer.size]
        }
        let small = [32, 24, 32 * 24 * 3 / 2], large = [64, 48, 64 * 48 * 3 / 2]
        #expect(sizes == [small, small, large, large, small, large])
        for sample in samples where sample.videoInfo?.width == 32 {
            #expect(sample.buffer.bytes[0..<(32 * 24)].allSatisfy { $0 == 50 })
        }
        #expect(samples.map(\.buffer.presentationTimestamp) == (0..<6).map { .nanoseconds(Int64($0) * 1_000_000_000 / 30) })
        #expect(samples.allSatisfy { $0.buffer.duration == .nanoseconds(33_333_333) || $0.buffer.duration == .nanoseconds(33_333_334) })
    }

    @Test("a new size through videoscale keeps the output size fixed, with the written picture scaled")
    func writeNewSizeThroughScaler() async throws {
        let pipeline = try Pipeline(description: """
            videotestsrc num-buffers=4 pattern=black ! \(Self.i420) ! identity name=hook \
            ! videoconvert ! videoscale ! video/x-raw,format=I420,width=64,height=48 ! appsink name=out sync=false
            """)
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let errors = Recorder<String>()
        hook.setFrameReadyCallback { notification in
            do {
                var frame = try VideoFrame(format: .bgra, width: 160, height: 120)
                try frame.withUnsafeMutableBytes { bytes in
                    for pixel in stride(from: 0, to: bytes.count, by: 4) {
                        bytes[pixel] = 255; bytes[pixel + 1] = 255; bytes[pixel + 2] = 255; bytes[pixel + 3] = 255
                    }
                }
                try notification.write(frame)
            } catch {
                errors.append("\(error)")
            }
        }
        let samples = try await runCollecting(pipeline)
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(samples.count == 4)
        for sample in samples {
            #expect(sample.videoInfo?.width == 64 && sample.videoInfo?.height == 48)
            #expect(near(sample.buffer.bytes[0..<(64 * 48)], 235), "white, scaled down")
        }
    }

    @Test("written frames of another format are converted to the stream's, or sent as written when asked")
    func writtenFormatPolicy() async throws {
        for policy in [FrameHook.WrittenFormat.streamFormat, .asWritten] {
            let pipeline = try Pipeline(description: "videotestsrc num-buffers=3 pattern=red ! \(Self.i420) ! identity name=hook ! appsink name=out sync=false")
            let hook = try FrameHook(pipeline: pipeline, element: "hook", options: .init(writtenFormat: policy))
            let errors = Recorder<String>()
            hook.setFrameReadyCallback { notification in
                do {
                    try notification.write(try notification.read(format: .bgra))
                } catch {
                    errors.append("\(error)")
                }
            }
            let samples = try await runCollecting(pipeline)
            #expect(errors.all.isEmpty, "\(errors.all)")
            #expect(samples.count == 3)
            for sample in samples {
                let info = try #require(sample.videoInfo)
                #expect(info.width == 64 && info.height == 48)
                let bytes = sample.buffer.bytes
                if policy == .streamFormat {
                    #expect(info.format == .i420)
                    // Red survives the round trip I420 → BGRA → I420.
                    #expect(near(bytes[0..<(64 * 48)], 81))
                    #expect(near(bytes[(64 * 48)..<(64 * 48 * 5 / 4)], 90))
                    #expect(near(bytes[(64 * 48 * 5 / 4)...], 240))
                } else {
                    #expect(info.format == .bgra)
                    #expect(bytes.count == 64 * 48 * 4)
                    #expect(near(stride(from: 2, to: bytes.count, by: 4).map { bytes[$0] }, 255))
                    #expect(near(stride(from: 0, to: bytes.count, by: 4).map { bytes[$0] }, 0))
                }
            }
        }
    }

    @Test("a size downstream refuses is a typed error from write, and the frame passes unchanged")
    func refusedSize() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=3 ! \(Self.i420) ! identity name=hook ! video/x-raw,width=64,height=48 ! appsink name=out sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let errors = Recorder<MediaError>()
        hook.setFrameReadyCallback { notification in
            do {
                try notification.write(try VideoFrame(format: .i420, width: 32, height: 24))
            } catch let error as MediaError {
                errors.append(error)
            } catch {
                errors.append(.invalidFrame("unexpected \(error)"))
            }
        }
        let samples = try await runCollecting(pipeline)
        #expect(errors.all.count == 3)
        #expect(errors.all.allSatisfy { $0.code == .formatNotAccepted })
        #expect(samples.count == 3)
        #expect(samples.allSatisfy { $0.videoInfo?.width == 64 })
        #expect(hook.statistics.framesWritten == 0)
    }

    @Test("drop removes frames: downstream receives only the others")
    func dropFrames() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=20 ! \(Self.i420) ! identity name=hook ! appsink name=out sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let count = Counter()
        hook.setFrameReadyCallback { notification in
            if count.increment() % 2 == 0 { notification.drop() }
        }
        let samples = try await runCollecting(pipeline)
        #expect(samples.count == 10)
        // Frames 1, 3, 5 … got through: offsets 0, 2, 4 ….
        #expect(samples.map { $0.buffer.offset ?? 99 } == Array(stride(from: 0, to: 20, by: 2)).map(UInt64.init))
        let statistics = hook.statistics
        #expect(statistics.framesSeen == 20)
        #expect(statistics.framesDelivered == 20)
        #expect(statistics.framesDroppedByCallback == 10)
        #expect(hook.droppedFrameCount == 0)
    }

    @Test("a removed hook, or one without a callback, lets every frame through untouched")
    func removal() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=10 ! \(Self.i420) ! identity name=hook ! appsink name=out sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let calls = Counter()
        hook.setFrameReadyCallback { notification in
            calls.increment()
            notification.drop()
        }
        hook.remove()
        let samples = try await runCollecting(pipeline)
        #expect(samples.count == 10)
        #expect(calls.value == 0)
    }

    @Test("a notification kept past its callback refuses to be used")
    func expiredNotification() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=1 ! \(Self.i420) ! identity name=hook ! fakesink sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let kept = Recorder<FrameNotification>()
        hook.setFrameReadyCallback { kept.append($0) }
        try await pipeline.runToEnd(timeout: .seconds(10))
        let notification = try #require(kept.all.first)
        #expect(notification.kind == .video)
        #expect(throws: MediaError.notificationExpired) { try notification.read() }
        #expect(throws: MediaError.notificationExpired) { try notification.read(format: .bgra) }
        #expect(throws: MediaError.notificationExpired) { try notification.write(try VideoFrame(format: .i420, width: 64, height: 48)) }
    }

    @Test("writing audio to a video stream, and bad frames, are typed errors")
    func typedErrors() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=1 ! \(Self.i420) ! identity name=hook ! fakesink sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "hook")
        let errors = Recorder<String>()
        hook.setFrameReadyCallback { notification in
            do {
                try notification.write(try AudioFrame(silenceOf: 10, channels: 1, sampleRate: 8000))
                errors.append("audio written to video")
            } catch let error as MediaError where error == .wrongMediaKind(expected: .video, given: .audio) {
            } catch {
                errors.append("\(error)")
            }
        }
        try await pipeline.runToEnd(timeout: .seconds(10))
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(hook.statistics.framesDelivered == 1)

        #expect(throws: MediaError.self) { try VideoFrame(format: PixelFormat(rawValue: "NOPE"), width: 4, height: 4) }
        #expect(throws: MediaError.self) { try VideoFrame(format: .i420, width: 0, height: 4) }
        #expect(throws: MediaError.self) { try VideoFrame(format: .i420, width: 4, height: 4, bytes: [1, 2, 3]) }
        #expect(throws: MediaError.gstreamer(.elementNotFound("nope"))) { try FrameHook(pipeline: pipeline, element: "nope") }
        #expect(throws: MediaError.self) { try FrameHook(pipeline: pipeline, element: "hook", pad: "sink") }
    }

    @Test("frame copies are independent: writing to one leaves the other alone")
    func valueSemantics() throws {
        var first = try VideoFrame(format: .gray8, width: 4, height: 4)
        let second = first
        try first.withUnsafeMutableBytes { $0[0] = 9 }
        #expect(first.bytes[0] == 9)
        #expect(second.bytes[0] == 0)
        #expect(second.bytes.count == 16)
    }

    @Test("encoded media is passed through, and reading it is a typed error")
    func encodedMedia() async throws {
        let pipeline = try Pipeline(description: "videotestsrc num-buffers=5 ! \(Self.i420) ! x264enc tune=zerolatency speed-preset=ultrafast name=enc ! fakesink name=sink sync=false")
        let hook = try FrameHook(pipeline: pipeline, element: "enc")
        let errors = Recorder<MediaError>()
        let kinds = Recorder<Bool>()
        hook.setFrameReadyCallback { notification in
            kinds.append(notification.kind == nil)
            do { _ = try notification.read() } catch let error as MediaError { errors.append(error) } catch {}
        }
        let counter = try pipeline.element(named: "sink").staticPad("sink").countBuffers()
        try await pipeline.runToEnd(timeout: .seconds(20))
        #expect(counter.value == 5)
        #expect(kinds.all == [Bool](repeating: true, count: 5))
        #expect(errors.all.count == 5)
        #expect(errors.all.allSatisfy { $0.code == .unsupportedFormat })
    }
}
