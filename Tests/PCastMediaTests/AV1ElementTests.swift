import Foundation
import GStreamer
@testable import PCastMedia
import PCastProtocol
import PCastRecording
import Testing

extension Bursts {
    /// Our AV1 RTP elements against GStreamer's own AV1 encoder (libaom) and decoder, peers we did not
    /// write. In the Bursts group: it runs libaom flat out, which must not starve the main group's timers.
    @Suite("AV1 RTP elements (pcastav1pay, pcastav1depay) against av1enc and av1dec")
    struct AV1ElementTests {
        /// 12 frames of 640×360 snow with a keyframe every 4, encoded as the SDK encodes AV1 and
        /// payloaded at an MTU of 1,200 (the VP8/VP9 tests' helper): every RTP packet, and whether it
        /// is the first packet of a keyframe.
        static func packets() async throws -> [(bytes: [UInt8], keyframeStart: Bool)] {
            try await VideoPayloadTests.packets(.av1)
        }

        /// Decodes `packets` through pcastav1depay and av1dec; the frames decoded and any error.
        static func decode(_ packets: [[UInt8]], waitForKeyframe: Bool = true) async throws -> (frames: [(Int, Int)], error: String?) {
            let depayloader = VideoCodec.av1.depayloader
            let pipeline = try Pipeline(description: """
                appsrc name=in format=time caps="application/x-rtp,media=video,clock-rate=90000,encoding-name=AV1,payload=96" \
                ! \(depayloader) wait-for-keyframe=\(waitForKeyframe) request-keyframe=true ! \(VideoCodec.av1.decoder) \
                ! video/x-raw ! appsink name=out sync=false
                """)
            let source = try pipeline.appSource(named: "in")
            let samples = try pipeline.appSink(named: "out").samples(limit: 1_000, dropping: .dropNewest)
            try await pipeline.play(timeout: nil)  // fed by the appsrc: nothing reaches the sink before the pushes
            for (index, packet) in packets.enumerated() {
                let buffer = Buffer(bytes: packet)
                buffer.presentationTimestamp = .nanoseconds(Int64(index) * 1_000_000)
                try await source.push(buffer)
            }
            try source.endOfStream()
            var error: String?
            do { try await pipeline.waitUntilEnd(timeout: .seconds(20)) } catch let failure { error = "\(failure)" }
            await pipeline.stop()
            var frames: [(Int, Int)] = []
            for await sample in samples {
                if let info = sample.videoInfo { frames.append((info.width, info.height)) }
            }
            return (frames, error)
        }

        @Test("av1enc → pcastav1pay: no packet over the MTU, one marker per frame, and N (where a decoder can start) on exactly the first packet of each of the 3 keyframes in 12 frames")
        func payloaderMarksKeyframes() async throws {
            let packets = try await Self.packets()
            #expect(packets.count > 24, "\(packets.count) packets: frames of more than one packet")
            #expect(packets.allSatisfy { $0.bytes.count <= 1_200 })
            #expect(packets.filter { $0.bytes[1] & 0x80 != 0 }.count == 12, "markers")
            for (index, packet) in packets.enumerated() {
                let found = packet.bytes.withUnsafeBytes { VideoCodec.packetStartsKeyframe(.av1, $0) }
                #expect(found == packet.keyframeStart, "packet \(index): keyframe start \(packet.keyframeStart), found \(found)")
            }
        }

        @Test("av1enc → pcastav1pay → pcastav1depay → av1dec decodes all 12 frames at 640×360; with one fragment of the second frame lost, that frame and the two inter frames after it are dropped whole and the other 9 decode without a decoder error")
        func depayloaderFeedsDecoder() async throws {
            let packets = try await Self.packets().map(\.bytes)
            let whole = try await Self.decode(packets)
            #expect(whole.error == nil, "\(whole.error ?? "")")
            #expect(whole.frames.count == 12 && whole.frames.allSatisfy { $0 == (640, 360) }, "\(whole.frames)")

            // The second frame's first packet is the one after the first marker.
            let secondFrame = try #require(packets.firstIndex { $0[1] & 0x80 != 0 }) + 1
            var lossy = packets
            lossy.remove(at: secondFrame + (packets[secondFrame + 1][1] & 0x80 == 0 ? 1 : 0))
            let decoded = try await Self.decode(lossy)
            #expect(decoded.error == nil, "\(decoded.error ?? "")")
            #expect(decoded.frames.count == 9, "\(decoded.frames.count) frames decoded")
        }

        @Test("the sequence header of av1enc's keyframes reads as main profile, 8-bit 4:2:0, 640×360 at most, the codecs string av01.0.LLM.08 and the av1C header to match; cut short anywhere it is a typed error, never a trap")
        func sequenceHeader() async throws {
            let encoder = VideoCodec.av1.encoder(name: "e", kilobitsPerSecond: 1000, keyframeInterval: 30, burstMilliseconds: 600)
            let pipeline = try Pipeline(description: """
                videotestsrc num-buffers=1 ! video/x-raw,format=I420,width=640,height=360,framerate=30/1 ! \(encoder) ! appsink name=out sync=false
                """)
            let unit = try #require(try await runCollecting(pipeline).first).buffer.bytes
            let obu = try #require(try AV1Payload.obus(lowOverhead: unit).first { $0.type == AV1OBU.sequenceHeader })
            let header = try AV1SequenceHeader(parsing: obu.payload)
            #expect(header.profile == 0 && header.bitDepth == 8 && !header.monochrome && header.subsamplingX && header.subsamplingY, "\(header)")
            #expect(header.maximumWidth == 640 && header.maximumHeight == 360, "\(header)")
            // The codecs string a recording's track states, from the av1C header made of this header.
            let codecs = FMP4Track(id: 1, timescale: 90_000, codec: .av1(width: header.maximumWidth, height: header.maximumHeight,
                                                                        configuration: header.configurationRecordHeader, sequenceHeader: obu.withSize)).codecsString
            #expect(codecs.hasPrefix("av01.0.") && codecs.hasSuffix("M.08"), "\(codecs)")
            #expect(header.level <= 8, "level index \(header.level) for 640×360")
            #expect(header.configurationRecordHeader == [0x81, header.level, 0x0C | header.chromaSamplePosition, 0])
            for length in 0..<obu.payload.count - 1 {
                _ = try? AV1SequenceHeader(parsing: Array(obu.payload.prefix(length)))
            }
            #expect(throws: AV1PayloadError.self) { try AV1SequenceHeader(parsing: Array(obu.payload.prefix(3))) }
            #expect(throws: AV1PayloadError.self) { try AV1SequenceHeader(parsing: [0xE0] + obu.payload.dropFirst()) }
        }
    }
}
