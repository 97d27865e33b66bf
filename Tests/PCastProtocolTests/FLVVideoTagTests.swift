import PCastProtocol
import Testing

@Suite("FLV video tags: legacy and enhanced RTMP video messages")
struct FLVVideoTagTests {
    @Test("FFmpeg 8's enhanced HEVC messages: the hvcC sequence start, a colorInfo metadata command frame, CodedFramesX keyframe and inter frames")
    func ffmpegEnhancedHEVC() throws {
        // The first bytes of each video message an FFmpeg 8 flv muxer (PyAV 18.1) wrote for libx265.
        let start = try FLVVideoTag(parsing: hex("90 68766331 01 01 60 00 00 00 90 00"))
        #expect(start.codec == .h265 && start.isEnhanced && start.isKeyframe)
        #expect(start.content == .sequenceStart(hex("01 01 60 00 00 00 90 00")))
        let metadata = try FLVVideoTag(parsing: hex("d4 68766331 02 00 09 636f6c6f72496e66"))
        #expect(metadata.codec == .h265 && metadata.content == .other && !metadata.isKeyframe)
        let key = try FLVVideoTag(parsing: hex("93 68766331 00000047 2801adc4"))
        #expect(key.isKeyframe && key.content == .codedFrame(compositionTime: 0, data: hex("00000047 2801adc4")))
        let inter = try FLVVideoTag(parsing: hex("a3 68766331 0000004f 0201d009"))
        #expect(!inter.isKeyframe && inter.content == .codedFrame(compositionTime: 0, data: hex("0000004f 0201d009")))
    }

    @Test("enhanced CodedFrames carry a signed 24-bit composition time for AVC and HEVC only; SequenceEnd; AV1 and VP9 are named")
    func compositionTimes() throws {
        let hevc = try FLVVideoTag(parsing: hex("a1 68766331 00 00 42 00000001 ff"))
        #expect(hevc.content == .codedFrame(compositionTime: 66, data: hex("00000001 ff")) && !hevc.isKeyframe)
        let negative = try FLVVideoTag(parsing: hex("a1 68766331 ff ff ce 00"))
        #expect(negative.content == .codedFrame(compositionTime: -50, data: [0]))
        let av1 = try FLVVideoTag(parsing: hex("91 61763031 12 00 0a"))
        #expect(av1.codec == .av1 && av1.content == .codedFrame(compositionTime: 0, data: hex("12 00 0a")))
        #expect(try FLVVideoTag(parsing: hex("92 76703039")).codec == .vp9)
        #expect(try FLVVideoTag(parsing: hex("92 76703039")).content == .sequenceEnd)
        let unknown = try FLVVideoTag(parsing: hex("93 61626364 01"))
        #expect(unknown.codec == .fourCC(0x6162_6364) && unknown.codec.description == "FourCC 'abcd'")
    }

    @Test("legacy AVC and the HEVC codec id 12 extension: sequence header, NAL units with composition time, end of sequence; other codec ids pass as frames")
    func legacy() throws {
        let header = try FLVVideoTag(parsing: hex("17 00 000000 01640028"))
        #expect(header.codec == .h264 && !header.isEnhanced && header.isKeyframe && header.content == .sequenceStart(hex("01640028")))
        let frame = try FLVVideoTag(parsing: hex("27 01 000021 00000002 0910"))
        #expect(frame.content == .codedFrame(compositionTime: 33, data: hex("00000002 0910")) && !frame.isKeyframe)
        #expect(try FLVVideoTag(parsing: hex("27 02 000000")).content == .sequenceEnd)
        let hevc = try FLVVideoTag(parsing: hex("1c 01 fffff6 00"))
        #expect(hevc.codec == .h265 && hevc.content == .codedFrame(compositionTime: -10, data: [0]))
        let vp6 = try FLVVideoTag(parsing: hex("24 aabb"))
        #expect(vp6.codec == .legacy(4) && vp6.content == .codedFrame(compositionTime: 0, data: hex("aabb")))
        #expect(try FLVVideoTag(parsing: hex("57 01")).content == .other, "a command frame")
    }

    @Test("an enhanced AVC message's legacy form reads the same (what GStreamer 1.22's flvdemux reads); other codecs have none")
    func legacyAVCForm() throws {
        for body in [hex("90 61766331 01640028"), hex("a1 61766331 ffffce 00000001 09"), hex("93 61766331 00000001 65"), hex("92 61766331")] {
            let tag = try FLVVideoTag(parsing: body)
            let legacy = try #require(tag.legacyAVCBody)
            let again = try FLVVideoTag(parsing: legacy)
            #expect(!again.isEnhanced && again.codec == .h264 && again.content == tag.content && again.isKeyframe == tag.isKeyframe, "\(body)")
        }
        #expect(try FLVVideoTag(parsing: hex("93 68766331 00")).legacyAVCBody == nil)
    }

    @Test("the codec is read from the header alone, as the whole reading names it; nil when the header is cut short")
    func codecFromHeader() throws {
        for body in [hex("17 00 000000 01"), hex("1c 01 000000 00"), hex("24 aabb"), hex("93 68766331 00"), hex("a1 61766331 000000 00"),
                     hex("91 61763031 12"), hex("92 76703039"), hex("93 61626364 01")] {
            let tag = try FLVVideoTag(parsing: body)
            let named = try #require(FLVVideoTag.codec(of: body))
            #expect(named.codec == tag.codec && named.isEnhanced == tag.isEnhanced, "\(body)")
        }
        #expect(FLVVideoTag.codec(of: []) == nil && FLVVideoTag.codec(of: hex("93 6876")) == nil)
    }

    @Test("truncated headers, and multitrack / ModEx packets, are typed errors")
    func malformed() {
        #expect(throws: FLVVideoTagError.truncated) { try FLVVideoTag(parsing: []) }
        #expect(throws: FLVVideoTagError.truncated) { try FLVVideoTag(parsing: hex("93 6876")) }
        #expect(throws: FLVVideoTagError.truncated) { try FLVVideoTag(parsing: hex("91 68766331 00")) }
        #expect(throws: FLVVideoTagError.truncated) { try FLVVideoTag(parsing: hex("17 00 00")) }
        #expect(throws: FLVVideoTagError.unsupportedPacketType(6)) { try FLVVideoTag(parsing: hex("96 68766331 00")) }
        #expect(throws: FLVVideoTagError.unsupportedPacketType(7)) { try FLVVideoTag(parsing: hex("97 68766331 00")) }
    }
}
