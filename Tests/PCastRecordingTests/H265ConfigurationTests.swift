// H.265 in recordings: the SPS read into an hvcC record (PCastProtocol's H265Configuration), the
// RFC 6381 codecs string an hvc1 track states, and the samples it stores.

import PCastProtocol
import Testing
@testable import PCastRecording

@Suite("H.265 configuration: the SPS read, hvcC, codecs string, samples without the declared parameter sets")
struct H265ConfigurationTests {
    /// The parameter sets ffmpeg's libx265 (ultrafast, 1280×720 at 25 fps) wrote into a clip's
    /// `hvcC`, emulation prevention bytes (`00 00 03`) in.
    static let vps = bytes("40010c01ffff01600000030090000003000003005d959409")
    static let sps = bytes("42010101600000030090000003000003005da00280802d16595952930bc05a020000030002000003003210")
    static let pps = bytes("4401c073c189")

    static func bytes(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return out
    }

    @Test("x265's SPS: Main profile (compatible with Main and Main 10), Main tier, level 3.1, 4:2:0 8-bit, 1280×720 (coded 1280×720, no cropping), one temporal layer, nested; the codecs string worked out by hand from its bits is hvc1.1.6.L93.90 (compatibility flags 1 and 2 reversed: 6; constraint byte 0x90: progressive source and frame only)")
    func x265Parameters() throws {
        let configuration = try H265Configuration(vps: Self.vps, sps: Self.sps, pps: Self.pps)
        #expect(configuration.profileSpace == 0 && configuration.profile == 1 && !configuration.highTier)
        #expect(configuration.compatibilityFlags == 0x6000_0000)
        #expect(configuration.constraintFlags == [0x90, 0, 0, 0, 0, 0])
        #expect(configuration.level == 93)
        #expect(configuration.chromaFormat == 1 && configuration.bitDepthLuma == 8 && configuration.bitDepthChroma == 8)
        #expect(configuration.width == 1280 && configuration.height == 720)
        #expect(configuration.temporalLayers == 1 && configuration.temporalIdNested)
        let track = FMP4Track(id: 1, timescale: 90_000, codec: .h265(width: configuration.width, height: configuration.height, configuration: configuration.record))
        #expect(track.codecsString == "hvc1.1.6.L93.90")
    }

    @Test("the hvcC record: version 1, the profile bytes as in the SPS, 4:2:0 8-bit, 4-byte lengths, one temporal layer, three complete arrays (VPS, SPS, PPS) carrying the sets byte for byte")
    func record() throws {
        let record = try H265Configuration(vps: Self.vps, sps: Self.sps, pps: Self.pps).record
        #expect(Array(record[0..<13]) == [1, 0x01, 0x60, 0, 0, 0, 0x90, 0, 0, 0, 0, 0, 93])
        #expect(Array(record[13..<22]) == [0xF0, 0x00, 0xFC, 0xFD, 0xF8, 0xF8, 0, 0, 0x0F])
        #expect(record[22] == 3)
        var offset = 23
        for (type, set) in [(32, Self.vps), (33, Self.sps), (34, Self.pps)] {
            #expect(record[offset] == 0x80 | UInt8(type))
            #expect(Array(record[offset + 1..<offset + 5]) == [0, 1, UInt8(set.count >> 8), UInt8(set.count & 0xFF)])
            #expect(Array(record[offset + 5..<offset + 5 + set.count]) == set)
            offset += 5 + set.count
        }
        #expect(offset == record.count)
    }

    @Test("a sample leaves out the parameter sets the track declares and keeps different ones and every other unit, each with its 4-byte length")
    func sample() throws {
        let declared = try H265Configuration(vps: Self.vps, sps: Self.sps, pps: Self.pps)
        let otherPPS: [UInt8] = [0x44, 0x01, 0xC1, 0x72]
        let slice: [UInt8] = [0x28, 0x01, 0xAF, 0x05, 0x38]  // a CRA slice's first bytes
        let start: [UInt8] = [0, 0, 0, 1]
        let unit = start + Self.vps + start + Self.sps + start + otherPPS + start + slice
        #expect(H264.lengthPrefixed(annexB: unit, leavingOut: [declared.vps, declared.sps, declared.pps]) == [0, 0, 0, 4] + otherPPS + [0, 0, 0, 5] + slice)
    }

    @Test("refusals are typed: not an SPS, a VPS or PPS of another type, an SPS cut short")
    func refusals() {
        #expect(throws: H265Configuration.Malformed.self) { try H265Configuration(vps: Self.vps, sps: Self.pps, pps: Self.pps) }
        #expect(throws: H265Configuration.Malformed.self) { try H265Configuration(vps: Self.sps, sps: Self.sps, pps: Self.pps) }
        #expect(throws: H265Configuration.Malformed.self) { try H265Configuration(vps: [], sps: Self.sps, pps: Self.pps) }
        for length in [2, 5, 14, 20] {
            #expect(throws: H265Configuration.Malformed.self) { try H265Configuration(vps: Self.vps, sps: Array(Self.sps.prefix(length)), pps: Self.pps) }
        }
    }
}
