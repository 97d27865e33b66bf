import Foundation
@testable import SRTP
import Testing

/// Outbound AES-GCM RTP sealed through OpenSSL (`GCMSealer`) against libsrtp's own sealing and
/// pylibsrtp's, byte for byte.
@Suite("SRTP AES-GCM sealing through OpenSSL")
struct GCMSealerTests {
    /// A run that exercises the index: two SSRCs interleaved, a first sequence number high enough
    /// to roll over, the roll itself, NACK answers (indices sealed again) and a packet from before
    /// the roll; CSRCs, a header extension and an empty payload on some packets.
    static func packets() -> [[UInt8]] {
        var packets: [[UInt8]] = []
        var sequence: UInt16 = 65_400
        for index in 0..<400 {
            var packet = SRTPTests.rtp(sequence: sequence, ssrc: index % 3 == 0 ? 0x0A0D_1001 : 0xCAFE_BABE, payload: 40 + index % 1_200)
            if index % 7 == 0 {
                // Two CSRCs.
                packet[0] |= 2
                packet.insert(contentsOf: [1, 2, 3, 4, 5, 6, 7, 8], at: 12)
            }
            if index % 11 == 0 {
                // A one-byte-header extension of one word.
                packet[0] |= 0x10
                let at = 12 + 4 * Int(packet[0] & 0x0F)
                packet.insert(contentsOf: [0xBE, 0xDE, 0, 1, 0x10, 0xAA, 0, 0], at: at)
            }
            if index % 53 == 0 {
                // No payload: the header (and its extension) alone.
                packet.removeLast(packet.count - (12 + 4 * Int(packet[0] & 0x0F) + (packet[0] & 0x10 != 0 ? 8 : 0)))
            }
            packets.append(packet)
            // Every 25th packet is followed by a retransmission of one sent 3 before.
            if index % 25 == 24 { packets.append(packets[packets.count - 4]) }
            sequence &+= 1
        }
        return packets
    }

    @Test("the OpenSSL path seals what libsrtp seals, byte for byte: across a sequence roll, two SSRCs, repeats, CSRCs, extensions, empty payloads")
    func matchesLibsrtp() throws {
        let key = SRTPKey.random(for: .aeadAES128GCM)
        let ours = try SRTPSession(key: key, direction: .outbound)
        let reference = try SRTPSession(key: key, direction: .outbound, sealsWithOpenSSL: false)
        #expect(ours.sealsWithOpenSSL && !reference.sealsWithOpenSSL)
        let receiver = try SRTPSession(key: key, direction: .inbound)
        for (index, plain) in Self.packets().enumerated() {
            var sealed = plain, expected = plain
            try ours.protect(&sealed)
            try reference.protect(&expected)
            #expect(sealed == expected, "packet \(index)")
            if sealed != expected { break }
            // The caller-managed buffer path gives the same bytes.
            if index % 50 == 0 {
                var buffer = plain + [UInt8](repeating: 0, count: SRTPSession.maximumOverhead)
                let length = try buffer.withUnsafeMutableBytes { try ours.protect($0, length: plain.count) }
                #expect(Array(buffer[0..<length]) == expected)
            }
            // A receiver takes each once (the repeats are replays to it).
            var received = sealed
            if (try? receiver.unprotect(&received)) != nil { #expect(received == plain) }
        }
    }

    @Test("pylibsrtp (its own libsrtp build) seals what the OpenSSL path seals, and unprotects all of it")
    func matchesPylibsrtp() throws {
        let key = SRTPKey.random(for: .aeadAES128GCM)
        let ours = try SRTPSession(key: key, direction: .outbound)
        // pylibsrtp refuses to seal an index twice: the run without its repeats.
        var seen = Set<[UInt8]>()
        let plain = Self.packets().filter { seen.insert($0).inserted }
        let sealed = try plain.map { packet in
            var copy = packet
            try ours.protect(&copy)
            return copy
        }
        #expect(try SRTPTests().python("protect", key: key, packets: plain) == sealed)
        #expect(try SRTPTests().python("unprotect", key: key, packets: sealed) == plain)
    }

    @Test("an index further back than the replay window is refused as libsrtp refuses it; malformed headers are typed errors; the packet is left as it was")
    func refusals() throws {
        let key = SRTPKey.random(for: .aeadAES128GCM)
        let ours = try SRTPSession(key: key, direction: .outbound)
        let reference = try SRTPSession(key: key, direction: .outbound, sealsWithOpenSSL: false)
        for sequence in UInt16(0)..<1_200 {
            var a = SRTPTests.rtp(sequence: sequence, payload: 20), b = a
            try ours.protect(&a)
            try reference.protect(&b)
        }
        for old in [UInt16(176), 177, 100] {
            var a = SRTPTests.rtp(sequence: old, payload: 20)
            var b = a
            let original = a
            let ourOutcome = Result { () throws(SRTPError) in try ours.protect(&a) }
            let theirOutcome = Result { () throws(SRTPError) in try reference.protect(&b) }
            switch (ourOutcome, theirOutcome) {
            case (.success, .success): #expect(a == b, "sequence \(old) sealed alike")
            case (.failure(let ours), .failure(let theirs)):
                #expect(ours == theirs && ours == .replayed)
                #expect(a == original)
            default: Issue.record("sequence \(old): ours \(ourOutcome), libsrtp \(theirOutcome)")
            }
        }
        // An extension longer than the packet, a CSRC count past the end.
        var extended = SRTPTests.rtp(sequence: 5_000, payload: 0)
        extended[0] |= 0x10
        extended += [0xBE, 0xDE, 0x00, 0x09]
        let before = extended
        #expect(throws: SRTPError.malformed) { try ours.protect(&extended) }
        #expect(extended == before)
        var csrcs = SRTPTests.rtp(sequence: 5_001, payload: 8)
        csrcs[0] |= 0x0F
        #expect(throws: SRTPError.malformed) { try ours.protect(&csrcs) }
    }

    @Test("the session key and salt are RFC 3711's KDF of the master key (the AES-CM PRF, labels 0 and 2) as `openssl enc -aes-128-ctr` computes it")
    func keyDerivation() throws {
        // RFC 3711 §B.3's master key and salt (its 14-byte salt cut to the 12 bytes RFC 7714 uses).
        let masterKey = unhex("e1f97a0d3e018be0d64fa32c06de4139")
        let masterSalt = unhex("0ec675ad498afeebb6960b3a")
        let sealer = try #require(GCMSealer(masterKey: masterKey[...], masterSalt: masterSalt[...]))
        defer { sealer.free() }
        let keys = sealer.sessionKeys
        // x = salt (zero-padded to 14 bytes) XOR label at byte 7, then AES-128-CTR keystream from x || 0000.
        func prf(_ label: UInt8, _ count: Int) throws -> [UInt8] {
            var block = masterSalt + [0, 0, 0, 0]
            block[7] ^= label
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            process.arguments = ["enc", "-aes-128-ctr", "-K", hex(masterKey), "-iv", hex(block), "-nosalt"]
            let input = Pipe(), output = Pipe()
            process.standardInput = input
            process.standardOutput = output
            try process.run()
            input.fileHandleForWriting.write(Data(count: count))
            try input.fileHandleForWriting.close()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return [UInt8](data)
        }
        #expect(keys.key == (try prf(0x00, 16)))
        #expect(keys.salt == (try prf(0x02, 12)))
    }
}
