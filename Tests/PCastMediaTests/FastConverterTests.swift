import GStreamer
import PCastMedia
import Testing

extension ManyClients {
    /// Our own I420/NV12 ↔ BGRA converter against GStreamer's `GstVideoConverter` on real frames:
    /// test patterns (sharp edges, noise, zone plates), odd sizes, padded rows, several colorimetries.
    @Suite("Own I420/NV12 ↔ BGRA converter")
    struct FastConverterTests {
        static let patterns = ["smpte", "snow", "zone-plate", "ball", "colors"]
        static let sizes = [(1280, 720), (641, 363), (33, 17), (3, 5), (2, 2), (1, 1)]
        /// Colorimetry and chroma siting of the YUV side ("" leaves GStreamer's defaults for the size).
        /// GStreamer reads a chroma site from caps only when they also name a colorimetry.
        static let yuvVariants = ["", ",colorimetry=bt601,chroma-site=mpeg2", ",colorimetry=bt709,chroma-site=jpeg",
                                  ",colorimetry=1:4:0:0", ",colorimetry=bt2020"]

        @Test("I420 and NV12 to BGRA agree with GstVideoConverter within ±2 per channel",
              arguments: ["I420", "NV12"])
        func toBGRA(format: String) async throws {
            for (width, height) in Self.sizes {
                for variant in Self.yuvVariants {
                    // videotestsrc's zone plate divides by zero on a 1×1 frame.
                    for pattern in Self.patterns where !(width == 1 && pattern == "zone-plate") {
                        let sample = try await Self.frame("video/x-raw,format=\(format),width=\(width),height=\(height)\(variant)", pattern: pattern)
                        let caps = try #require(sample.caps)
                        let bgra = try caps.replacingVideoLayout(format: .bgra, width: width, height: height)
                        let difference = try Self.compare(sample.buffer, from: caps, to: bgra)
                        #expect(difference <= 2, "\(format) \(width)×\(height)\(variant) \(pattern): off by \(difference)")
                    }
                }
            }
        }

        @Test("BGRA to I420 and NV12 agrees with GstVideoConverter within ±2 per sample",
              arguments: ["I420", "NV12"])
        func fromBGRA(format: String) async throws {
            for (width, height) in Self.sizes {
                for pattern in Self.patterns where !(width == 1 && pattern == "zone-plate") {
                    let sample = try await Self.frame("video/x-raw,format=BGRA,width=\(width),height=\(height)", pattern: pattern)
                    let caps = try #require(sample.caps)
                    for variant in Self.yuvVariants {
                        let yuv = try Caps("video/x-raw,format=\(format),width=\(width),height=\(height),framerate=30/1\(variant)")
                        let difference = try Self.compare(sample.buffer, from: caps, to: yuv)
                        #expect(difference <= 2, "\(format) \(width)×\(height)\(variant) \(pattern): off by \(difference)")
                    }
                }
            }
        }

        @Test("frames with padded rows and planes apart (a GstVideoMeta) convert like packed ones")
        func paddedLayouts() async throws {
            let (width, height) = (641, 363)
            let i420 = try await Self.frame("video/x-raw,format=I420,width=\(width),height=\(height)", pattern: "smpte")
            let caps = try #require(i420.caps)
            let info = try #require(caps.videoInfo)
            // Rows padded to 704 / 384 bytes, 100 bytes between planes.
            let strides = [704, 384, 384]
            let chromaRows = (height + 1) / 2
            let offsets = [0, 704 * height + 100, 704 * height + 100 + 384 * chromaRows + 100]
            let packed = i420.buffer.bytes
            var padded = [UInt8](repeating: 7, count: offsets[2] + 384 * chromaRows)
            for plane in 0..<3 {
                let rows = plane == 0 ? height : chromaRows
                let rowBytes = plane == 0 ? width : (width + 1) / 2
                for row in 0..<rows {
                    let from = info.offsets[plane] + row * info.strides[plane]
                    padded.replaceSubrange(offsets[plane] + row * strides[plane] ..< offsets[plane] + row * strides[plane] + rowBytes,
                                           with: packed[from ..< from + rowBytes])
                }
            }
            let buffer = Buffer(bytes: padded)
            try buffer.attachVideoMeta(VideoMeta(format: .i420, width: width, height: height, strides: strides, offsets: offsets))
            let bgraCaps = try caps.replacingVideoLayout(format: .bgra, width: width, height: height)
            let fast = try VideoConverter(from: caps, to: bgraCaps)
            #expect(fast.usesFastPath)
            let fromPadded = try fast.convert(buffer).bytes
            let fromPacked = try fast.convert(i420.buffer).bytes
            #expect(fromPadded == fromPacked)
            #expect(try Self.compare(buffer, from: caps, to: bgraCaps) <= 2)

            // BGRA rows padded by 64 bytes, converted to I420.
            let bgra = try await Self.frame("video/x-raw,format=BGRA,width=\(width),height=\(height)", pattern: "snow")
            let bgraInfo = try #require(bgra.caps?.videoInfo)
            let stride = width * 4 + 64
            var paddedBGRA = [UInt8](repeating: 200, count: stride * height)
            let source = bgra.buffer.bytes
            for row in 0..<height {
                paddedBGRA.replaceSubrange(row * stride ..< row * stride + width * 4,
                                           with: source[row * bgraInfo.strides[0] ..< row * bgraInfo.strides[0] + width * 4])
            }
            let paddedBuffer = Buffer(bytes: paddedBGRA)
            try paddedBuffer.attachVideoMeta(VideoMeta(format: .bgra, width: width, height: height, strides: [stride], offsets: [0]))
            let toI420 = try VideoConverter(from: try #require(bgra.caps), to: caps)
            #expect(toI420.usesFastPath)
            #expect(try toI420.convert(paddedBuffer).bytes == toI420.convert(bgra.buffer).bytes)
            #expect(try Self.compare(paddedBuffer, from: try #require(bgra.caps), to: caps) <= 2)
        }

        @Test("a plane layout that does not fit the buffer is refused")
        func badVideoMeta() throws {
            let buffer = Buffer(size: 100)
            #expect(throws: GStreamerError.self) {
                try buffer.attachVideoMeta(VideoMeta(format: .i420, width: 16, height: 16, strides: [16, 8, 8], offsets: [0, 256, 320]))
            }
            #expect(throws: GStreamerError.self) {
                try buffer.attachVideoMeta(VideoMeta(format: .i420, width: 4, height: 4, strides: [4, 2], offsets: [0, 16]))
            }
            #expect(throws: GStreamerError.self) {
                try buffer.attachVideoMeta(VideoMeta(format: .bgra, width: 4, height: 4, strides: [8], offsets: [0]))
            }
        }

        @Test("other formats, sizes and colorimetries stay with GStreamer's converter")
        func fallbacks() throws {
            let i420 = try Caps("video/x-raw,format=I420,width=64,height=32,framerate=30/1")
            #expect(try VideoConverter(from: i420, to: Caps("video/x-raw,format=BGRA,width=64,height=32,framerate=30/1")).usesFastPath)
            #expect(try !VideoConverter(from: i420, to: Caps("video/x-raw,format=RGBA,width=64,height=32,framerate=30/1")).usesFastPath)
            #expect(try !VideoConverter(from: i420, to: Caps("video/x-raw,format=BGRA,width=32,height=16,framerate=30/1")).usesFastPath)
            #expect(try !VideoConverter(from: i420, to: Caps("video/x-raw,format=NV12,width=64,height=32,framerate=30/1")).usesFastPath)
            // Vertically cosited chroma is resampled otherwise by GStreamer's generic path.
            let cosited = try Caps("video/x-raw,format=NV12,width=64,height=32,framerate=30/1,colorimetry=bt709,chroma-site=dv")
            #expect(try !VideoConverter(from: cosited, to: Caps("video/x-raw,format=BGRA,width=64,height=32,framerate=30/1")).usesFastPath)
            // Limited-range RGB.
            #expect(try !VideoConverter(from: i420, to: Caps("video/x-raw,format=BGRA,width=64,height=32,framerate=30/1,colorimetry=2:1:0:0")).usesFastPath)
            #expect(try !VideoConverter(from: i420, to: Caps("video/x-raw,format=BGRA,width=64,height=32,framerate=30/1"),
                                        options: .init(allowsFastPath: false)).usesFastPath)
        }

        // MARK: Helpers

        static func frame(_ caps: String, pattern: String) async throws -> Sample {
            let pipeline = try Pipeline(description: "videotestsrc num-buffers=1 pattern=\(pattern) ! \(caps),framerate=30/1 ! appsink name=out sync=false")
            let samples = try await runCollecting(pipeline)
            return try #require(samples.first)
        }

        /// Converts with our converter and with GStreamer's, and returns the largest difference of any
        /// sample inside the picture (row padding is not compared).
        static func compare(_ buffer: Buffer, from input: Caps, to output: Caps) throws -> Int {
            let fast = try VideoConverter(from: input, to: output)
            let reference = try VideoConverter(from: input, to: output, options: .init(allowsFastPath: false))
            #expect(fast.usesFastPath, "\(input) → \(output)")
            #expect(!reference.usesFastPath)
            let ours = try fast.convert(buffer).bytes
            let theirs = try reference.convert(buffer).bytes
            let info = fast.output
            guard ours.count == theirs.count, ours.count >= info.size else { return Int.max }
            var largest = 0
            for plane in 0..<info.planeCount {
                let (rows, rowBytes): (Int, Int)
                switch (info.format, plane) {
                case (.bgra, _): (rows, rowBytes) = (info.height, info.width * 4)
                case (_, 0): (rows, rowBytes) = (info.height, info.width)
                case (.nv12, _): (rows, rowBytes) = ((info.height + 1) / 2, (info.width + 1) / 2 * 2)
                default: (rows, rowBytes) = ((info.height + 1) / 2, (info.width + 1) / 2)
                }
                for row in 0..<rows {
                    let start = info.offsets[plane] + row * info.strides[plane]
                    for index in start ..< start + rowBytes {
                        let difference = abs(Int(ours[index]) - Int(theirs[index]))
                        if difference > largest, difference > 2 {
                            print("plane \(plane) row \(row) byte \(index - start): ours \(ours[index]) GStreamer's \(theirs[index])")
                        }
                        largest = max(largest, difference)
                    }
                }
            }
            return largest
        }
    }
}
