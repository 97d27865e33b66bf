import Foundation
@testable import PCastProtocol
import Testing

private func roundTrip(_ packets: [RTCPPacket], sourceLocation: SourceLocation = #_sourceLocation) throws -> [UInt8] {
    let compound = RTCPCompoundPacket(packets: packets)
    let bytes = try compound.serialized()
    #expect(bytes.count % 4 == 0, sourceLocation: sourceLocation)
    #expect(try RTCPCompoundPacket(parsing: bytes) == compound, sourceLocation: sourceLocation)
    return bytes
}

private func single(_ hexString: String) throws -> RTCPPacket {
    let c = try RTCPCompoundPacket(parsing: hex(hexString))
    guard c.packets.count == 1 else { throw TestFailure("expected one packet, got \(c.packets.count)") }
    return c.packets[0]
}

@Suite("RTCP")
struct RTCPTests {
    @Test func senderReport() throws {
        let block = RTCPReportBlock(ssrc: 0x1111_1111, fractionLost: 25, cumulativeLost: -5,
                                    extendedHighestSequenceNumber: 0x0001_0010, jitter: 77,
                                    lastSenderReport: 0xAABB_CCDD, delaySinceLastSenderReport: 65536)
        let sr = RTCPSenderReport(ssrc: 0xABCD, ntpTimestamp: 0xE4A1_B2C3_D4E5_F607, rtpTimestamp: 90_000,
                                  packetCount: 10, octetCount: 1200, reportBlocks: [block, block])
        let bytes = try roundTrip([.senderReport(sr)])
        #expect(bytes.count == 4 + 24 + 48)
        #expect(bytes[0] == 0x82 && bytes[1] == 200)
        #expect(bytes[2] == 0 && bytes[3] == 18)
        // Cumulative lost -5 as signed 24-bit.
        #expect(Array(bytes[33...35]) == [0xFF, 0xFF, 0xFB])

        // Zero report blocks; profile extension kept.
        let bare = RTCPSenderReport(ssrc: 1, ntpTimestamp: 2, rtpTimestamp: 3, packetCount: 4, octetCount: 5,
                                    profileExtension: [1, 2, 3, 4])
        let bareBytes = try roundTrip([.senderReport(bare)])
        #expect(bareBytes.count == 32)
        #expect(bareBytes[0] == 0x80)
    }

    @Test func senderReportFromCorpus() throws {
        // 1meetecho/sr-sdes.rtcp
        let c = try RTCPCompoundPacket(parsing: hex("80c80006ae657257dfc3a53f2e830a0ba217b283000046c3012cae52 81ca0006ae6572570110484949334d4f6d6d6e694f792b7066700000"))
        guard case .senderReport(let sr) = c.packets[0], case .sourceDescription(let sdes) = c.packets[1] else {
            Issue.record("unexpected packets \(c.packets)")
            return
        }
        #expect(sr.ssrc == 0xAE65_7257)
        #expect(sr.ntpTimestamp == 0xDFC3_A53F_2E83_0A0B)
        #expect(sr.rtpTimestamp == 0xA217_B283)
        #expect(sr.packetCount == 0x46C3)
        #expect(sr.octetCount == 0x012C_AE52)
        #expect(sr.reportBlocks.isEmpty)
        #expect(sdes.chunks == [.init(ssrc: 0xAE65_7257, items: [.init(type: 1, text: "HII3MOmmniOy+pfp")])])
        #expect(sdes.chunks[0].items[0].text == "HII3MOmmniOy+pfp")
    }

    @Test func receiverReports() throws {
        _ = try roundTrip([.receiverReport(.init(ssrc: 5))])
        let blocks = (0..<31).map { RTCPReportBlock(ssrc: UInt32($0), cumulativeLost: 0x7F_FFFF) }
        let bytes = try roundTrip([.receiverReport(.init(ssrc: 5, reportBlocks: blocks))])
        #expect(bytes[0] & 0x1F == 31)
        let tooMany = RTCPPacket.receiverReport(.init(ssrc: 5, reportBlocks: blocks + [blocks[0]]))
        #expect(throws: RTCPError.countOutOfRange(field: "reportBlocks", count: 32, maximum: 31)) { try tooMany.serialized() }
        let badLost = RTCPPacket.receiverReport(.init(ssrc: 5, reportBlocks: [.init(ssrc: 1, cumulativeLost: 0x80_0000)]))
        #expect(throws: RTCPError.valueOutOfRange(field: "cumulativeLost", value: 0x80_0000)) { try badLost.serialized() }
        _ = try roundTrip([.receiverReport(.init(ssrc: 5, reportBlocks: [.init(ssrc: 1, cumulativeLost: -0x80_0000)]))])

        // 1meetecho/rr.rtcp
        guard case .receiverReport(let rr) = try single("81c90007416d77e9ae6572570000000000003ac4000001d2a50998ab0000045b") else {
            Issue.record("not an RR")
            return
        }
        #expect(rr.ssrc == 0x416D_77E9)
        #expect(rr.reportBlocks == [RTCPReportBlock(ssrc: 0xAE65_7257, fractionLost: 0, cumulativeLost: 0,
                                                    extendedHighestSequenceNumber: 0x3AC4, jitter: 0x1D2,
                                                    lastSenderReport: 0xA509_98AB, delaySinceLastSenderReport: 0x45B)])
    }

    @Test func sourceDescription() throws {
        let sdes = RTCPSourceDescription(chunks: [
            .init(ssrc: 1, items: [.init(type: RTCPSourceDescription.ItemType.cname, text: "a")]),
            .init(ssrc: 2, items: []),
            .init(ssrc: 3, items: [.init(type: 2, value: []), .init(type: 6, text: "tool/1.0"),
                                   .init(type: 8, value: Array(repeating: 0x41, count: 255))]),
            // Exactly word-aligned items still need a full null word.
            .init(ssrc: 4, items: [.init(type: 1, value: [1, 2])]),
        ])
        let bytes = try roundTrip([.sourceDescription(sdes)])
        #expect(bytes[0] & 0x1F == 4)

        // Corpus sdes-six-chunks: six chunks with CNAMEs of growing length.
        let corpus10 = try Data(contentsOf: corporaDirectory().appendingPathComponent("rtcp/sdes-six-chunks"))
        guard case .sourceDescription(let parsed) = try RTCPCompoundPacket(parsing: Array(corpus10)).packets[0] else {
            Issue.record("not SDES")
            return
        }
        #expect(parsed.chunks.map { $0.items.first?.text } == ["a", "ab", "abc", "abcd", "abcde", "abcdef"])

        #expect(throws: RTCPError.unterminatedSDESChunk(offset: 0)) { _ = try single("81ca0002 00000001 01026162") }
        // Item length past the end of the packet.
        #expect(throws: RTCPError.truncatedBody(packetType: 202, offset: 0)) { _ = try single("81ca0002 00000001 01096100") }
        // Chunk count larger than the packet holds.
        #expect(throws: RTCPError.truncatedBody(packetType: 202, offset: 0)) { _ = try single("82ca0002 00000001 00000000") }
        // Bytes after the last chunk.
        #expect(throws: RTCPError.trailingBytes(packetType: 202, offset: 0)) { _ = try single("81ca0003 00000001 00000000 00000000") }
        // Zero chunks, empty body.
        #expect(try single("80ca0000") == .sourceDescription(.init(chunks: [])))
        #expect(throws: RTCPError.valueOutOfRange(field: "SDES item type", value: 0)) {
            try RTCPPacket.sourceDescription(.init(chunks: [.init(ssrc: 1, items: [.init(type: 0, value: [])])])).serialized()
        }
        #expect(throws: RTCPError.countOutOfRange(field: "SDES item value", count: 256, maximum: 255)) {
            try RTCPPacket.sourceDescription(.init(chunks: [.init(ssrc: 1, items: [.init(type: 1, value: Array(repeating: 0, count: 256))])])).serialized()
        }
    }

    @Test func goodbye() throws {
        _ = try roundTrip([.goodbye(.init(ssrcs: [1, 2, 3]))])
        _ = try roundTrip([.goodbye(.init(ssrcs: [1], reason: Array("shutting down".utf8)))])
        _ = try roundTrip([.goodbye(.init(ssrcs: [], reason: []))])
        _ = try roundTrip([.goodbye(.init(ssrcs: [9], reason: Array(repeating: 0x7A, count: 255)))])
        let withReason = try single("81cb0002 00000001 03626f62")
        #expect(withReason == .goodbye(.init(ssrcs: [1], reason: Array("bob".utf8))))
        if case .goodbye(let b) = withReason { #expect(b.reasonText == "bob") }
        // Reason length past the end.
        #expect(throws: RTCPError.truncatedBody(packetType: 203, offset: 0)) { _ = try single("81cb0002 00000001 09626f62") }
        // SSRC count larger than the packet.
        #expect(throws: RTCPError.truncatedBody(packetType: 203, offset: 0)) { _ = try single("82cb0001 00000001") }
        // More than word padding after the reason.
        #expect(throws: RTCPError.trailingBytes(packetType: 203, offset: 0)) { _ = try single("81cb0003 00000001 01620000 00000000") }
    }

    @Test func applicationDefined() throws {
        let app = RTCPApplicationDefined(subtype: 31, ssrc: 7, name: RTCPApplicationDefined.name("PCST"), data: [1, 2, 3, 4])
        let bytes = try roundTrip([.applicationDefined(app)])
        #expect(Array(bytes[8..<12]) == Array("PCST".utf8))
        #expect(app.nameBytes == Array("PCST".utf8))
        #expect(RTCPApplicationDefined.name("ab") == 0x6162_2020)
        // Unaligned data is carried with RFC 3550 padding and comes back unchanged.
        let odd = RTCPApplicationDefined(subtype: 0, ssrc: 7, name: 0, data: [9, 9, 9])
        let oddBytes = try roundTrip([.applicationDefined(odd)])
        #expect(oddBytes[0] & 0x20 != 0)
        #expect(oddBytes.last == 1)
        #expect(throws: RTCPError.valueOutOfRange(field: "subtype", value: 32)) {
            try RTCPPacket.applicationDefined(.init(subtype: 32, ssrc: 0, name: 0)).serialized()
        }
        #expect(throws: RTCPError.truncatedBody(packetType: 204, offset: 0)) { _ = try single("80cc0001 00000001") }
    }

    @Test func genericNACK() throws {
        // 1meetecho/nacks.rtcp: PID 0xa84f, BLP 0x0008 → a84f and a84f+4.
        guard case .genericNACK(let nack) = try single("81cd00035bf5b77db075af13a84f0008") else {
            Issue.record("not a NACK")
            return
        }
        #expect(nack.senderSSRC == 0x5BF5_B77D)
        #expect(nack.mediaSSRC == 0xB075_AF13)
        #expect(nack.items == [.init(packetID: 0xA84F, lostBitmask: 0x0008)])
        #expect(nack.lostSequenceNumbers == [0xA84F, 0xA853])

        // Full bitmask expansion and wrap-around.
        let full = RTCPGenericNACK(senderSSRC: 1, mediaSSRC: 2, items: [.init(packetID: 65530, lostBitmask: 0xFFFF)])
        #expect(full.lostSequenceNumbers == [65530, 65531, 65532, 65533, 65534, 65535] + Array(0...10))
        #expect(RTCPGenericNACK(senderSSRC: 1, mediaSSRC: 2, lostSequenceNumbers: full.lostSequenceNumbers) == full)

        let built = RTCPGenericNACK(senderSSRC: 1, mediaSSRC: 2, lostSequenceNumbers: [100, 101, 101, 116, 117, 500])
        #expect(built.items == [.init(packetID: 100, lostBitmask: 0x8001), .init(packetID: 117, lostBitmask: 0),
                                .init(packetID: 500, lostBitmask: 0)])
        #expect(built.lostSequenceNumbers == [100, 101, 116, 117, 500])
        _ = try roundTrip([.genericNACK(built)])
        // Unsorted input is still encoded losslessly.
        let unsorted: [UInt16] = [9, 3, 4, 60000, 5]
        #expect(Set(RTCPGenericNACK(senderSSRC: 0, mediaSSRC: 0, lostSequenceNumbers: unsorted).lostSequenceNumbers) == Set(unsorted))

        #expect(throws: RTCPError.missingFeedbackEntries(packetType: 205, format: 1, offset: 0)) { _ = try single("81cd0002 00000001 00000002") }
        #expect(throws: RTCPError.countOutOfRange(field: "items", count: 0, maximum: 0)) {
            try RTCPPacket.genericNACK(.init(senderSSRC: 0, mediaSSRC: 0, items: [])).serialized()
        }
        // Largest NACK that fits the 16-bit length, and one entry more.
        let maxItems = (RTCPPacket.maximumPacketLength - 12) / 4
        let big = RTCPGenericNACK(senderSSRC: 0, mediaSSRC: 0, items: Array(repeating: .init(packetID: 1, lostBitmask: 0), count: maxItems))
        #expect(try RTCPPacket.genericNACK(big).serialized().count == RTCPPacket.maximumPacketLength)
        var tooBig = big
        tooBig.items.append(.init(packetID: 2, lostBitmask: 0))
        #expect(throws: RTCPError.packetTooLarge(length: RTCPPacket.maximumPacketLength + 4)) { try RTCPPacket.genericNACK(tooBig).serialized() }
    }

    @Test func pictureLossAndFullIntraRequest() throws {
        #expect(try single("81ce00028c08a05df310a866") == .pictureLossIndication(.init(senderSSRC: 0x8C08_A05D, mediaSSRC: 0xF310_A866)))
        _ = try roundTrip([.pictureLossIndication(.init(senderSSRC: 1, mediaSSRC: 2))])
        #expect(throws: RTCPError.trailingBytes(packetType: 206, offset: 0)) { _ = try single("81ce0003 00000001 00000002 00000000") }
        #expect(throws: RTCPError.truncatedBody(packetType: 206, offset: 0)) { _ = try single("81ce0001 00000001") }

        // 1meetecho/fir.rtcp
        #expect(try single("84ce00048c08a05df310a866f310a8660a000000") == .fullIntraRequest(.init(
            senderSSRC: 0x8C08_A05D, mediaSSRC: 0xF310_A866, entries: [.init(ssrc: 0xF310_A866, sequenceNumber: 10)])))
        _ = try roundTrip([.fullIntraRequest(.init(senderSSRC: 1, entries: [.init(ssrc: 2, sequenceNumber: 255), .init(ssrc: 3, sequenceNumber: 0)]))])
        #expect(throws: RTCPError.missingFeedbackEntries(packetType: 206, format: 4, offset: 0)) { _ = try single("84ce0002 00000001 00000000") }
        #expect(throws: RTCPError.trailingBytes(packetType: 206, offset: 0)) { _ = try single("84ce0003 00000001 00000000 00000002") }
    }

    @Test func receiverEstimatedMaxBitrate() throws {
        // 1meetecho/remb.rtcp: exponent 0, mantissa 0x1F400 = 128 kbit/s.
        guard case .receiverEstimatedMaxBitrate(let remb) = try single("8fce00058c08a05d0000000052454d420101f400f310a866") else {
            Issue.record("not REMB")
            return
        }
        #expect(remb.bitrate == 128_000)
        #expect(remb.ssrcs == [0xF310_A866])

        let r = RTCPReceiverEstimatedMaxBitrate(senderSSRC: 1, bitrate: 1_500_000, ssrcs: [2, 3])
        #expect(r.bitrate == 1_500_000)
        _ = try roundTrip([.receiverEstimatedMaxBitrate(r)])

        // Exponent limits.
        #expect(RTCPReceiverEstimatedMaxBitrate(senderSSRC: 0, bitrate: 0x3FFFF, ssrcs: []).exponent == 0)
        let justOver = RTCPReceiverEstimatedMaxBitrate(senderSSRC: 0, bitrate: 0x40000, ssrcs: [])
        #expect(justOver.exponent == 1 && justOver.mantissa == 0x20000)
        let maxBuilt = RTCPReceiverEstimatedMaxBitrate(senderSSRC: 0, bitrate: .max, ssrcs: [])
        #expect(maxBuilt.exponent == 46 && maxBuilt.mantissa == 0x3FFFF)
        #expect(maxBuilt.bitrate == 0x3FFFF << 46)  // rounded down, never up
        let top = RTCPReceiverEstimatedMaxBitrate(senderSSRC: 0, exponent: 63, mantissa: 0x3FFFF, ssrcs: [])
        #expect(top.bitrate == .max)  // saturates instead of overflowing
        #expect(RTCPReceiverEstimatedMaxBitrate(senderSSRC: 0, exponent: 63, mantissa: 1, ssrcs: []).bitrate == 1 << 63)
        #expect(RTCPReceiverEstimatedMaxBitrate(senderSSRC: 0, exponent: 63, mantissa: 0, ssrcs: []).bitrate == 0)
        _ = try roundTrip([.receiverEstimatedMaxBitrate(top)])
        #expect(throws: RTCPError.valueOutOfRange(field: "exponent", value: 64)) {
            try RTCPPacket.receiverEstimatedMaxBitrate(.init(senderSSRC: 0, exponent: 64, mantissa: 1, ssrcs: [])).serialized()
        }
        #expect(throws: RTCPError.valueOutOfRange(field: "mantissa", value: 0x40000)) {
            try RTCPPacket.receiverEstimatedMaxBitrate(.init(senderSSRC: 0, exponent: 0, mantissa: 0x40000, ssrcs: [])).serialized()
        }
        _ = try roundTrip([.receiverEstimatedMaxBitrate(.init(senderSSRC: 0, bitrate: 1, ssrcs: (0..<255).map(UInt32.init)))])
        #expect(throws: RTCPError.countOutOfRange(field: "ssrcs", count: 256, maximum: 255)) {
            try RTCPPacket.receiverEstimatedMaxBitrate(.init(senderSSRC: 0, bitrate: 1, ssrcs: (0..<256).map(UInt32.init))).serialized()
        }
        // "REMB" with no bitrate (WebRTC corpus 16.rtcp), or fewer SSRCs than announced.
        #expect(throws: RTCPError.truncatedBody(packetType: 206, offset: 0)) { _ = try single("8fce0003123456780000000052454d42") }
        #expect(throws: RTCPError.truncatedBody(packetType: 206, offset: 0)) { _ = try single("8fce0005 00000001 00000000 52454d42 02000001 00000002") }
        #expect(throws: RTCPError.trailingBytes(packetType: 206, offset: 0)) { _ = try single("8fce0006 00000001 00000000 52454d42 01000001 00000002 00000003") }
        // Application-layer feedback that is not REMB stays raw.
        #expect(try single("8fce0003 00000001 00000002 41424344") == .feedback(.init(
            payloadType: 206, format: 15, senderSSRC: 1, mediaSSRC: 2, feedbackControlInformation: Array("ABCD".utf8))))
    }

    @Test func rawFeedbackAndUnknownTypes() throws {
        // Corpus twcc-feedback: transport-wide CC (RTPFB FMT 15) is kept raw.
        let twccBytes = try Data(contentsOf: corporaDirectory().appendingPathComponent("rtcp/twcc-feedback"))
        guard case .feedback(let fb) = try RTCPCompoundPacket(parsing: Array(twccBytes)).packets[0] else {
            Issue.record("TWCC not kept as raw feedback")
            return
        }
        #expect(fb.payloadType == 205 && fb.format == 15)
        #expect(fb.senderSSRC == 0x16CA_50CE && fb.mediaSSRC == 0xAE65_7257)
        #expect(fb.feedbackControlInformation.count == 20)
        _ = try roundTrip([.feedback(fb)])

        let xr = RTCPUnknownPacket(payloadType: 207, count: 3, body: [0, 0, 0, 1, 2])
        let bytes = try roundTrip([.unknown(xr)])
        #expect(bytes[1] == 207)
        #expect(throws: RTCPError.valueOutOfRange(field: "payloadType", value: 200)) {
            try RTCPPacket.feedback(.init(payloadType: 200, format: 1, senderSSRC: 0, mediaSSRC: 0, feedbackControlInformation: [])).serialized()
        }
        #expect(throws: RTCPError.valueOutOfRange(field: "count", value: 32)) {
            try RTCPPacket.unknown(.init(payloadType: 207, count: 32, body: [])).serialized()
        }
    }

    @Test func padding() throws {
        // RR with 4 bytes of padding (count in the last byte).
        let padded = try single("a0c90002 00000005 00000004")
        #expect(padded == .receiverReport(.init(ssrc: 5)))
        // WebRTC corpus 11.rtcp: packet type 0 with padding covering the whole body.
        #expect(try single("a00000020000000000000008") == .unknown(.init(payloadType: 0, count: 0, body: [])))
        #expect(throws: RTCPError.invalidPadding(offset: 0, count: 0)) { _ = try single("a0c90002 00000005 00000000") }
        #expect(throws: RTCPError.invalidPadding(offset: 0, count: 9)) { _ = try single("a0c90002 00000005 00000009") }
        // Padding that eats into the SSRC leaves too short a body.
        #expect(throws: RTCPError.truncatedBody(packetType: 201, offset: 0)) { _ = try single("a0c90001 00000002") }
        // Padding on the first packet of a compound is tolerated; offsets are reported per packet.
        let c = try RTCPCompoundPacket(parsing: hex("a0c90002 00000005 00000004 81ce0002 00000001 00000002"))
        #expect(c.packets.count == 2)
        #expect(throws: RTCPError.invalidPadding(offset: 8, count: 0)) { _ = try RTCPCompoundPacket(parsing: hex("80c90001 00000005 a0c90002 00000005 00000000")) }
    }

    @Test func compoundPackets() throws {
        // 1meetecho/rr-sdes-bye.rtcp
        let c = try RTCPCompoundPacket(parsing: hex("80c900011ca5737981ca00061ca5737901106a316f6b526c653467534549 4d774d4f000081cb00011ca57379"))
        #expect(c.packets == [
            .receiverReport(.init(ssrc: 0x1CA5_7379)),
            .sourceDescription(.init(chunks: [.init(ssrc: 0x1CA5_7379, items: [.init(type: 1, text: "j1okRle4gSEIMwMO")])])),
            .goodbye(.init(ssrcs: [0x1CA5_7379])),
        ])
        #expect(try c.serialized() == hex("80c900011ca5737981ca00061ca5737901106a316f6b526c653467534549 4d774d4f000081cb00011ca57379"))
        var buffer: [UInt8] = [1]
        try c.serialize(into: &buffer)
        #expect(buffer.count == 1 + 44)

        let everything: [RTCPPacket] = [
            .senderReport(.init(ssrc: 1, ntpTimestamp: 2, rtpTimestamp: 3, packetCount: 4, octetCount: 5, reportBlocks: [.init(ssrc: 9)])),
            .receiverReport(.init(ssrc: 1)),
            .sourceDescription(.init(chunks: [.init(ssrc: 1, items: [.init(type: 1, text: "c")])])),
            .applicationDefined(.init(subtype: 1, ssrc: 1, name: 0x4142_4344, data: [1])),
            .genericNACK(.init(senderSSRC: 1, mediaSSRC: 2, lostSequenceNumbers: [1, 2, 3])),
            .pictureLossIndication(.init(senderSSRC: 1, mediaSSRC: 2)),
            .fullIntraRequest(.init(senderSSRC: 1, entries: [.init(ssrc: 2, sequenceNumber: 1)])),
            .receiverEstimatedMaxBitrate(.init(senderSSRC: 1, bitrate: 300_000, ssrcs: [2])),
            .feedback(.init(payloadType: 206, format: 2, senderSSRC: 1, mediaSSRC: 2, feedbackControlInformation: [1, 2, 3, 4])),
            .unknown(.init(payloadType: 195, count: 1, body: [0, 0, 0, 7])),
            .goodbye(.init(ssrcs: [1], reason: Array("bye".utf8))),
        ]
        _ = try roundTrip(everything)
        #expect(everything.map(\.payloadType) == [200, 201, 202, 204, 205, 206, 206, 206, 206, 195, 203])
    }

    @Test func malformedCompoundsAreTypedErrors() {
        #expect(throws: RTCPError.empty) { _ = try RTCPCompoundPacket(parsing: []) }
        #expect(throws: RTCPError.truncatedHeader(offset: 0)) { _ = try RTCPCompoundPacket(parsing: hex("80c9")) }
        #expect(throws: RTCPError.unsupportedVersion(1, offset: 0)) { _ = try RTCPCompoundPacket(parsing: hex("40c90001 00000001")) }
        #expect(throws: RTCPError.lengthExceedsBuffer(offset: 0, declared: 12, available: 8)) { _ = try RTCPCompoundPacket(parsing: hex("80c90002 00000001")) }
        #expect(throws: RTCPError.truncatedHeader(offset: 8)) { _ = try RTCPCompoundPacket(parsing: hex("80c90001 00000001 80")) }
        #expect(throws: RTCPError.unsupportedVersion(0, offset: 8)) { _ = try RTCPCompoundPacket(parsing: hex("80c90001 00000001 00000000")) }
        // RR whose count claims a report block that is not there.
        #expect(throws: RTCPError.truncatedBody(packetType: 201, offset: 0)) { _ = try RTCPCompoundPacket(parsing: hex("81c90001 00000001")) }
        #expect(throws: RTCPError.truncatedBody(packetType: 200, offset: 0)) { _ = try RTCPCompoundPacket(parsing: hex("80c80001 00000001")) }
        // Feedback too short for its two SSRCs.
        #expect(throws: RTCPError.truncatedBody(packetType: 205, offset: 0)) { _ = try RTCPCompoundPacket(parsing: hex("81cd0001 00000001")) }
    }
}
