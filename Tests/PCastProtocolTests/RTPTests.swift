import Foundation
@testable import PCastProtocol
import Testing

@Suite("RTP")
struct RTPTests {
    @Test func minimalPacketRoundTrip() throws {
        let bytes = hex("80 64 00 58 65 43 12 78 12 34 56 78")  // WebRTC corpus rtp-0
        let p = try RTPPacket(parsing: bytes)
        #expect(p.payloadType == 100)
        #expect(!p.marker)
        #expect(p.sequenceNumber == 0x58)
        #expect(p.timestamp == 0x6543_1278)
        #expect(p.ssrc == 0x1234_5678)
        #expect(p.csrcs.isEmpty)
        #expect(p.headerExtension == nil)
        #expect(p.payload.isEmpty)
        #expect(try p.serialized() == bytes)
    }

    @Test func builtPacketRoundTrips() throws {
        let p = RTPPacket(
            marker: true, payloadType: 111, sequenceNumber: 65535, timestamp: .max, ssrc: 0xDEAD_BEEF,
            csrcs: [1, 2, 3],
            headerExtension: .oneByte([.init(id: 1, data: [0x85]), .init(id: 14, data: Array(repeating: 7, count: 16))]),
            payload: [1, 2, 3, 4, 5], paddingLength: 3)
        let bytes = try p.serialized()
        #expect(bytes[0] == 0x80 | 0x20 | 0x10 | 3)
        #expect(bytes[1] == 0x80 | 111)
        #expect(bytes.suffix(3) == [0, 0, 3])
        let q = try RTPPacket(parsing: bytes)
        #expect(q == p)
        // Appending into a reused buffer produces the same bytes after existing content.
        var buffer: [UInt8] = [0xAA]
        try p.serialize(into: &buffer)
        #expect(buffer == [0xAA] + bytes)
    }

    @Test func oneByteExtensionFromWebRTCCorpus() throws {
        // rtp-3: CSRCs, one-byte extension, payload and padding.
        let bytes = hex("b264005865431278123456783456789032435465bede0001120056ce7061796c6f616470616464696e6708")
        let p = try RTPPacket(parsing: bytes)
        #expect(p.csrcs == [0x3456_7890, 0x3243_5465])
        #expect(p.headerExtension == .oneByte([.init(id: 1, data: [0x00, 0x56, 0xCE])]))
        #expect(p.headerExtension?.element(id: 1)?.data == [0x00, 0x56, 0xCE])
        // The trailing 0x08 pads "payload" + "padding"'s last bytes: 8 bytes of padding.
        #expect(String(decoding: p.payload, as: UTF8.self) == "payload")
        #expect(p.paddingLength == 8)
        let layout = try RTPPacketLayout(parsing: bytes)
        #expect(layout.csrcCount == 2)
        #expect(layout.extensionProfile == 0xBEDE)
        #expect(layout.extensionDataRange == 24..<28)
        #expect(layout.payloadRange == 28..<35)
        #expect(layout.headerLength == 28)
        #expect(try RTPPacket(parsing: try p.serialized()) == p)
    }

    @Test func payloadSharesInputStorage() throws {
        let bytes = try RTPPacket(payloadType: 96, sequenceNumber: 1, timestamp: 2, ssrc: 3, payload: [9, 8, 7]).serialized()
        let p = try RTPPacket(parsing: bytes)
        let inputBase = bytes.withUnsafeBufferPointer { $0.baseAddress! }
        let payloadBase = p.payload.withUnsafeBufferPointer { $0.baseAddress! }
        #expect(payloadBase == inputBase + 12)
        // Slices keep their parent's indices.
        #expect(p.payload.startIndex == 12)

        // Parsing from a slice reports offsets relative to the slice.
        let framed = [0xFF, 0xFF] + bytes
        let layout = try RTPPacketLayout(parsing: framed[2...])
        #expect(layout.payloadRange == 12..<15)
        #expect(try RTPPacket(parsing: framed[2...]).payload == [9, 8, 7])
    }

    @Test func twoByteAndRawExtensions() throws {
        let two = RTPPacket(payloadType: 96, sequenceNumber: 1, timestamp: 1, ssrc: 1,
                            headerExtension: .twoByte(appBits: 5, [.init(id: 1, data: []), .init(id: 200, data: Array(repeating: 1, count: 255))]))
        let bytes = try two.serialized()
        #expect(bytes[12] == 0x10 && bytes[13] == 0x05)
        #expect(try RTPPacket(parsing: bytes) == two)
        #expect(two.headerExtension?.profile == 0x1005)

        let raw = RTPPacket(payloadType: 96, sequenceNumber: 1, timestamp: 1, ssrc: 1,
                            headerExtension: .raw(profile: 0xABCD, data: [1, 2, 3, 4, 5, 6, 7, 8]))
        #expect(try RTPPacket(parsing: try raw.serialized()) == raw)
        #expect(raw.headerExtension?.elements == [])

        // Empty one-byte extension (zero words) is valid.
        let empty = RTPPacket(payloadType: 0, sequenceNumber: 0, timestamp: 0, ssrc: 0, headerExtension: .oneByte([]))
        #expect(try RTPPacket(parsing: try empty.serialized()) == empty)
    }

    @Test func extensionPaddingAndTermination() throws {
        // Padding bytes between elements, then ID 15 which stops processing (RFC 8285 §4.2).
        let bytes = hex("90 60 0001 00000001 00000002 bede 0002 00 10 aa 00 f0 ff ff ff")
        let p = try RTPPacket(parsing: bytes)
        #expect(p.headerExtension == .oneByte([.init(id: 1, data: [0xAA])]))
        // Two-byte form with padding between elements.
        let two = try RTPPacket(parsing: hex("90 60 0001 00000001 00000002 1000 0002 00 03 02 ab cd 00 00 00"))
        #expect(two.headerExtension == .twoByte(appBits: 0, [.init(id: 3, data: [0xAB, 0xCD])]))
    }

    @Test func malformedPacketsAreTypedErrors() {
        #expect(throws: RTPError.truncatedHeader(needed: 12, available: 0)) { try RTPPacket(parsing: []) }
        #expect(throws: RTPError.truncatedHeader(needed: 12, available: 11)) { try RTPPacket(parsing: hex("80 60 0001 00000001 000000")) }
        #expect(throws: RTPError.unsupportedVersion(1)) { try RTPPacket(parsing: hex("40 60 0001 00000001 00000002")) }
        #expect(throws: RTPError.unsupportedVersion(0)) { try RTPPacket(parsing: Array(repeating: 0, count: 12)) }
        // CC says 15 CSRCs but none are there.
        #expect(throws: RTPError.truncatedHeader(needed: 72, available: 12)) { try RTPPacket(parsing: hex("8f 60 0001 00000001 00000002")) }
        // Extension header missing / extension longer than packet.
        #expect(throws: RTPError.truncatedExtension(needed: 16, available: 12)) { try RTPPacket(parsing: hex("90 60 0001 00000001 00000002")) }
        #expect(throws: RTPError.truncatedExtension(needed: 24, available: 20)) { try RTPPacket(parsing: hex("90 60 0001 00000001 00000002 bede 0002 10aa0000")) }
        // One-byte element overruns the block; ID 0 with non-zero length.
        #expect(throws: RTPError.malformedExtensionElement(offset: 16)) { try RTPPacket(parsing: hex("90 60 0001 00000001 00000002 bede 0001 13 aa bb cc")) }
        #expect(throws: RTPError.malformedExtensionElement(offset: 16)) { try RTPPacket(parsing: hex("90 60 0001 00000001 00000002 bede 0001 01 aa bb cc")) }
        // Two-byte element whose length byte is missing or too long.
        #expect(throws: RTPError.malformedExtensionElement(offset: 19)) { try RTPPacket(parsing: hex("90 60 0001 00000001 00000002 1000 0001 00 00 00 05")) }
        #expect(throws: RTPError.malformedExtensionElement(offset: 16)) { try RTPPacket(parsing: hex("90 60 0001 00000001 00000002 1000 0001 05 03 aa bb")) }
        // Padding count zero, or larger than what follows the header.
        #expect(throws: RTPError.invalidPadding(count: 0, available: 2)) { try RTPPacket(parsing: hex("a0 60 0001 00000001 00000002 aa 00")) }
        #expect(throws: RTPError.invalidPadding(count: 3, available: 2)) { try RTPPacket(parsing: hex("a0 60 0001 00000001 00000002 aa 03")) }
        // A P bit with no bytes after the header at all.
        #expect(throws: RTPError.invalidPadding(count: 2, available: 0)) { try RTPPacket(parsing: hex("a0 60 0001 00000001 00000002")) }
    }

    @Test func paddingEdgeCases() throws {
        // Padding may consume the entire payload.
        let p = try RTPPacket(parsing: hex("a0 60 0001 00000001 00000002 00 00 00 04"))
        #expect(p.payload.isEmpty)
        #expect(p.paddingLength == 4)
        #expect(try RTPPacket(parsing: try p.serialized()) == p)
        let max = RTPPacket(payloadType: 1, sequenceNumber: 1, timestamp: 1, ssrc: 1, payload: [1], paddingLength: 255)
        let bytes = try max.serialized()
        #expect(bytes.count == 12 + 1 + 255)
        #expect(try RTPPacket(parsing: bytes) == max)
    }

    @Test func csrcLimits() throws {
        let fifteen = RTPPacket(payloadType: 96, sequenceNumber: 1, timestamp: 1, ssrc: 1, csrcs: Array(1...15))
        let bytes = try fifteen.serialized()
        #expect(bytes[0] & 0x0F == 15)
        #expect(bytes.count == 12 + 60)
        #expect(try RTPPacket(parsing: bytes) == fifteen)
        var sixteen = fifteen
        sixteen.csrcs.append(16)
        #expect(throws: RTPError.tooManyCSRCs(16)) { try sixteen.serialized() }
    }

    @Test func builderValidation() {
        func packet(_ ext: RTPHeaderExtension?, pt: UInt8 = 96) -> RTPPacket {
            RTPPacket(payloadType: pt, sequenceNumber: 0, timestamp: 0, ssrc: 0, headerExtension: ext)
        }
        #expect(throws: RTPError.payloadTypeOutOfRange(128)) { try packet(nil, pt: 128).serialized() }
        #expect(throws: RTPError.invalidExtensionElement(id: 15, length: 1)) { try packet(.oneByte([.init(id: 15, data: [1])])).serialized() }
        #expect(throws: RTPError.invalidExtensionElement(id: 0, length: 1)) { try packet(.oneByte([.init(id: 0, data: [1])])).serialized() }
        #expect(throws: RTPError.invalidExtensionElement(id: 1, length: 0)) { try packet(.oneByte([.init(id: 1, data: [])])).serialized() }
        #expect(throws: RTPError.invalidExtensionElement(id: 1, length: 17)) { try packet(.oneByte([.init(id: 1, data: Array(repeating: 0, count: 17))])).serialized() }
        #expect(throws: RTPError.invalidExtensionElement(id: 0, length: 0)) { try packet(.twoByte(appBits: 0, [.init(id: 0, data: [])])).serialized() }
        #expect(throws: RTPError.invalidExtensionElement(id: 1, length: 256)) { try packet(.twoByte(appBits: 0, [.init(id: 1, data: Array(repeating: 0, count: 256))])).serialized() }
        #expect(throws: RTPError.appBitsOutOfRange(16)) { try packet(.twoByte(appBits: 16, [])).serialized() }
        #expect(throws: RTPError.extensionNotWordAligned(length: 3)) { try packet(.raw(profile: 1, data: [1, 2, 3])).serialized() }
        let huge = Array(repeating: UInt8(0), count: 4 * 65536)
        #expect(throws: RTPError.extensionTooLarge(length: 4 * 65536)) { try packet(.raw(profile: 1, data: huge[...])).serialized() }
    }

    @Test func rtcpMuxDemultiplexing() {
        #expect(RTPPacket.isRTCP(hex("80 c8")))  // SR
        #expect(RTPPacket.isRTCP(hex("81 cd 00 03")))  // RTPFB
        #expect(RTPPacket.isRTCP(hex("80 df")))  // 223, last RTCP type in range
        #expect(!RTPPacket.isRTCP(hex("80 60")))  // PT 96
        #expect(!RTPPacket.isRTCP(hex("80 e0")))  // PT 96 with marker
        #expect(!RTPPacket.isRTCP(hex("80 bf")))  // 191 → PT 63 with marker
        #expect(RTPPacket.isRTCP(hex("80 40")))  // PT 64: reserved for RTCP collisions
        #expect(!RTPPacket.isRTCP(hex("80")))
        #expect(!RTPPacket.isRTCP(hex("00 c8")))  // not version 2 (e.g. STUN)
        #expect(!RTPPacket.isRTCP([UInt8]()))
        #expect(RTPPacket.isRTCP(secondByte: 0xC9))
        #expect(!RTPPacket.isRTCP(secondByte: 0x6F))
    }

    @Test("a packet layout finds a header extension element (a WebRTC publisher's RID) in one-byte and two-byte forms past padding; absent, reserved or overrunning ones are nil")
    func headerExtensions() throws {
        func packet(profile: UInt16, _ elements: [UInt8]) -> [UInt8] {
            var bytes: [UInt8] = [0x90, 96, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2]
            var body = elements
            while body.count % 4 != 0 { body.append(0) }
            bytes += [UInt8(profile >> 8), UInt8(profile & 0xFF), 0, UInt8(body.count / 4)] + body + [0xAA, 0xBB]
            return bytes
        }
        func element(_ id: UInt8, _ bytes: [UInt8]) -> [UInt8]? {
            bytes.withUnsafeBytes { raw in
                (try? RTPPacketLayout(parsing: raw)).flatMap { $0.extensionElement(id, in: raw) }.map { Array(raw[$0]) }
            }
        }
        // One-byte: mid "1" (id 4), padding, rid "h" (id 10).
        let oneByte = packet(profile: 0xBEDE, [0x40, 0x31, 0x00, 0xA0, 0x68])
        #expect(element(10, oneByte) == Array("h".utf8) && element(4, oneByte) == Array("1".utf8) && element(3, oneByte) == nil)
        // Two-byte (extmap-allow-mixed): id, length, value; rid "mid" (id 12).
        let twoByte = packet(profile: 0x1000, [0x00, 12, 3, 0x6D, 0x69, 0x64])
        #expect(element(12, twoByte) == Array("mid".utf8))
        #expect(element(10, packet(profile: 0xBEDE, [0xF0, 0xA0, 0x68])) == nil, "id 15 ends the elements")
        #expect(element(10, packet(profile: 0xBEDE, [0xA7, 0x68])) == nil, "an element longer than the extension")
        #expect(element(10, packet(profile: 0xABCD, [0xA0, 0x68])) == nil, "an unknown profile")
        var plain = oneByte
        plain[0] = 0x80
        #expect(element(10, plain) == nil, "no extension bit")
        #expect(element(10, Array(oneByte.prefix(14))) == nil, "truncated")
    }
}
