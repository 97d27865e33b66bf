import Testing
@testable import PCastProtocol

@Suite("H.265 RTP payloads (RFC 7798): where keyframes and parameter sets start")
struct H265PayloadTests {
    /// An RTP packet (12-byte header, no extension) around `payload`.
    static func packet(_ payload: [UInt8]) -> [UInt8] {
        [0x80, 0x60, 0, 1, 0, 0, 0, 1, 0, 0, 0, 9] + payload
    }

    static func starts(_ payload: [UInt8]) -> (keyframe: Bool, parameterSets: Bool) {
        let bytes = packet(payload)
        return bytes.withUnsafeBytes { (H265Payload.packetStartsKeyframe($0), H265Payload.packetStartsWithParameterSets($0)) }
    }

    @Test("an aggregation packet led by the VPS (as rtph265pay sends a keyframe's parameter sets) starts both; one led by an access unit delimiter then the VPS starts the parameter sets; a VPS or SPS alone starts both; a PPS alone neither")
    func parameterSets() {
        let ap: [UInt8] = [0x60, 0x01, 0x00, 0x03, 0x40, 0x01, 0x0C, 0x00, 0x03, 0x42, 0x01, 0x01]
        #expect(Self.starts(ap) == (true, true))
        let afterDelimiter: [UInt8] = [0x60, 0x01, 0x00, 0x03, 0x46, 0x01, 0x50, 0x00, 0x03, 0x40, 0x01, 0x0C]
        #expect(Self.starts(afterDelimiter).parameterSets)
        #expect(Self.starts([0x40, 0x01, 0x0C]) == (true, true))
        #expect(Self.starts([0x42, 0x01, 0x01]) == (true, true))
        #expect(Self.starts([0x44, 0x01, 0xC0]) == (false, false))
    }

    @Test("IRAP pictures (IDR, CRA, BLA) start a keyframe whole or as a fragment's first part; later fragments, trailing pictures and fragments of them do not; nothing of those starts parameter sets")
    func keyframes() {
        for type: UInt8 in [16, 19, 20, 21] {
            #expect(Self.starts([type << 1, 0x01, 0xAF]) == (true, false), "IRAP type \(type) alone")
            #expect(Self.starts([49 << 1, 0x01, 0x80 | type, 0xAF]) == (true, false), "first fragment of type \(type)")
            #expect(Self.starts([49 << 1, 0x01, type, 0xAF]) == (false, false), "middle fragment of type \(type)")
        }
        #expect(Self.starts([1 << 1, 0x01, 0xD0]) == (false, false))
        #expect(Self.starts([49 << 1, 0x01, 0x80 | 1, 0xD0]) == (false, false))
    }

    @Test("empty and truncated payloads and packets start nothing", arguments: [[], [0x60], [0x60, 0x01, 0x00], [0x62, 0x01], [0x28]] as [[UInt8]])
    func truncated(payload: [UInt8]) {
        #expect(Self.starts(payload) == (false, false))
        let short: [UInt8] = [0x80, 0x60, 0]
        short.withUnsafeBytes { #expect(!H265Payload.packetStartsKeyframe($0) && !H265Payload.packetStartsWithParameterSets($0)) }
    }

    @Test("VideoPayload reads H265 (any case) with this reader and says its parameter sets come in band")
    func videoPayload() {
        #expect(VideoPayload(encodingName: "h265") == .h265 && VideoPayload.h265.sendsParameterSets && !VideoPayload.vp9.sendsParameterSets)
        Self.packet([0x40, 0x01, 0x0C]).withUnsafeBytes { #expect(VideoPayload.h265.packetStartsDecoding($0)) }
        Self.packet([0x2A, 0x01, 0xAF]).withUnsafeBytes {
            #expect(VideoPayload.h265.packetStartsKeyframe($0) && !VideoPayload.h265.packetStartsDecoding($0))
        }
    }
}
