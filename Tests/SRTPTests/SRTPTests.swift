import Foundation
import SRTP
import Testing

/// libsrtp2 through our wrapper, checked against `pylibsrtp` (its own bundled libsrtp build) as an
/// independent implementation, in both directions.
@Suite("SRTP")
struct SRTPTests {
    static let script = """
        import json, sys
        from pylibsrtp import Policy, Session
        spec = json.loads(sys.stdin.read())
        profile = {"AEAD_AES_128_GCM": Policy.SRTP_PROFILE_AEAD_AES_128_GCM,
                   "AES_CM_128_HMAC_SHA1_80": Policy.SRTP_PROFILE_AES128_CM_SHA1_80}[spec["profile"]]
        inbound = spec["op"].startswith("unprotect")
        policy = Policy(key=bytes.fromhex(spec["key"]), srtp_profile=profile,
                        ssrc_type=Policy.SSRC_ANY_INBOUND if inbound else Policy.SSRC_ANY_OUTBOUND)
        session = Session(policy=policy)
        op = getattr(session, spec["op"])
        print(json.dumps([op(bytes.fromhex(p)).hex() for p in spec["packets"]]))
        """

    func python(_ op: String, key: SRTPKey, packets: [[UInt8]]) throws -> [[UInt8]] {
        let spec: [String: Any] = ["profile": key.profile.rawValue, "key": hex(key.bytes), "op": op, "packets": packets.map(hex)]
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", Self.script]
        let input = Pipe(), output = Pipe(), errors = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        input.fileHandleForWriting.write(try JSONSerialization.data(withJSONObject: spec))
        try input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        try #require(process.terminationStatus == 0, "pylibsrtp oracle failed (scripts/setup.sh installs it): \(message)")
        let decoded = try JSONSerialization.jsonObject(with: data) as! [String]
        return decoded.map(unhex)
    }

    static func rtp(sequence: UInt16, ssrc: UInt32 = 0xCAFE_BABE, payload: Int = 1_100) -> [UInt8] {
        var packet: [UInt8] = [0x80, 96, UInt8(sequence >> 8), UInt8(sequence & 0xFF)]
        let timestamp = UInt32(sequence) &* 3000
        packet += [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: timestamp >> $0) }
        packet += [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: ssrc >> $0) }
        packet += (0..<payload).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ Int(sequence)) }
        return packet
    }

    /// A receiver report with one report block.
    static func rtcp(ssrc: UInt32 = 0x0102_0304) -> [UInt8] {
        var packet: [UInt8] = [0x81, 201, 0, 7]
        packet += [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: ssrc >> $0) }
        packet += [0xCA, 0xFE, 0xBA, 0xBE] + [UInt8](repeating: 0, count: 20)
        return packet
    }

    @Test("what we protect, pylibsrtp unprotects (RTP and RTCP)", arguments: SRTPProfile.allCases)
    func weProtect(profile: SRTPProfile) throws {
        let key = SRTPKey.random(for: profile)
        let sender = try SRTPSession(key: key, direction: .outbound)
        let plain = (0..<20).map { Self.rtp(sequence: UInt16(1000 + $0)) }
        let protected = try plain.map { packet in
            var copy = packet
            try sender.protect(&copy)
            #expect(copy.count == packet.count + (profile == .aeadAES128GCM ? 16 : 10))
            #expect(copy[12...] != packet[12...])
            return copy
        }
        #expect(try python("unprotect", key: key, packets: protected) == plain)

        var report = Self.rtcp()
        let plainReport = report
        try sender.protectRTCP(&report)
        #expect(try python("unprotect_rtcp", key: key, packets: [report]) == [plainReport])
    }

    @Test("what pylibsrtp protects, we unprotect (RTP and RTCP)", arguments: SRTPProfile.allCases)
    func theyProtect(profile: SRTPProfile) throws {
        let key = SRTPKey.random(for: profile)
        let plain = (0..<20).map { Self.rtp(sequence: UInt16(truncatingIfNeeded: 65_530 + $0)) }   // crosses the rollover
        let protected = try python("protect", key: key, packets: plain)
        let receiver = try SRTPSession(key: key, direction: .inbound)
        for (index, packet) in protected.enumerated() {
            var copy = packet
            try receiver.unprotect(&copy)
            #expect(copy == plain[index])
        }
        let report = try python("protect_rtcp", key: key, packets: [Self.rtcp()])[0]
        var copy = report
        try receiver.unprotectRTCP(&copy)
        #expect(copy == Self.rtcp())
    }

    @Test("a forged tag, a wrong key and a replay are refused with typed errors; the packet is left as it was")
    func refusals() throws {
        let key = SRTPKey.random(for: .aeadAES128GCM)
        let sender = try SRTPSession(key: key, direction: .outbound)
        let receiver = try SRTPSession(key: key, direction: .inbound)
        var packet = Self.rtp(sequence: 7)
        try sender.protect(&packet)

        var forged = packet
        forged[forged.count - 1] ^= 0x01
        let before = forged
        #expect(throws: SRTPError.authenticationFailed) { try receiver.unprotect(&forged) }
        #expect(forged == before)

        let stranger = try SRTPSession(key: SRTPKey.random(for: .aeadAES128GCM), direction: .inbound)
        var other = packet
        #expect(throws: SRTPError.authenticationFailed) { try stranger.unprotect(&other) }

        var first = packet
        try receiver.unprotect(&first)
        var again = packet
        #expect(throws: SRTPError.replayed) { try receiver.unprotect(&again) }
    }

    @Test("short packets, junk and bad keys are typed errors, never crashes")
    func junk() throws {
        #expect(throws: SRTPError.badKeyLength(expected: 28, given: 30)) {
            try SRTPKey(profile: .aeadAES128GCM, bytes: [UInt8](repeating: 1, count: 30))
        }
        #expect(throws: SRTPError.self) { try SRTPKey(profile: .aeadAES128GCM, base64: "not base64!") }
        let receiver = try SRTPSession(key: SRTPKey.random(for: .aes128CMHMACSHA1_80), direction: .inbound)
        var tiny: [UInt8] = [0x80, 0]
        #expect(throws: SRTPError.malformed) { try receiver.unprotect(&tiny) }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            var bytes = (0..<Int.random(in: 0..<300, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            _ = try? receiver.unprotect(&bytes)
            _ = try? receiver.unprotectRTCP(&bytes)
        }
    }

    @Test("keys survive a base64 round trip")
    func base64() throws {
        for profile in SRTPProfile.allCases {
            let key = SRTPKey.random(for: profile)
            #expect(try SRTPKey(profile: profile, base64: key.base64) == key)
        }
        #expect(try SRTPKey(profile: .aeadAES128GCM, base64: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGw==").bytes == Array(0..<28))
    }
}

func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
func unhex(_ text: String) -> [UInt8] {
    var out: [UInt8] = []
    var index = text.startIndex
    while index < text.endIndex {
        let next = text.index(index, offsetBy: 2)
        out.append(UInt8(text[index..<next], radix: 16)!)
        index = next
    }
    return out
}
