@testable import PCastProtocol
import PCastTestSupport
import Testing

/// C0 + C1 as a simple-handshake client sends them.
func rtmpC0C1(time: UInt32 = 0x0102_0304, version: UInt32 = 0, using rng: inout SeededRNG) -> [UInt8] {
    var w = ByteWriter()
    w.u8(3)
    w.u32(time)
    w.u32(version)
    w.append(contentsOf: rng.bytes(1528))
    return w.bytes
}

@Suite("RTMP handshake")
struct RTMPHandshakeTests {
    @Test("C0+C1 → S0 S1 S2 (S2 echoes C1); C2 completes; extra bytes are left for the chunk stream")
    func simpleHandshake() throws {
        var rng = SeededRNG(seed: 1)
        var handshake = RTMPServerHandshake(time: 0xAABB_CCDD, using: &rng)
        #expect(handshake.state == .awaitingC0)
        let c0c1 = rtmpC0C1(using: &rng)
        let step = try handshake.feed(c0c1)
        #expect(step.bytesConsumed == 1537)
        #expect(step.bytesToSend.count == 1 + 1536 * 2)
        #expect(step.bytesToSend[0] == 3)
        let s1 = Array(step.bytesToSend[1..<1537])
        let s2 = Array(step.bytesToSend[1537...])
        #expect(s1 == handshake.s1)
        #expect(s1.prefix(8) == [0xAA, 0xBB, 0xCC, 0xDD, 0, 0, 0, 0][...])
        #expect(Set(s1[8...]).count > 200, "S1 random bytes look constant")
        #expect(s2 == Array(c0c1[1...]))
        #expect(handshake.clientTime == 0x0102_0304 && handshake.clientVersion == 0)
        #expect(handshake.state == .awaitingC2)

        // C2 echoing S1, followed by the first chunk stream bytes in the same read.
        let c2 = s1
        let step2 = try handshake.feed(c2 + [0x03, 0x00])
        #expect(step2.bytesToSend.isEmpty)
        #expect(step2.bytesConsumed == 1536)
        #expect(handshake.isComplete)
        #expect(handshake.clientEchoMatched == true)
        // Once complete, nothing more is consumed.
        #expect(try handshake.feed([1, 2, 3]) == .init(bytesToSend: [], bytesConsumed: 0))
    }

    @Test("byte-by-byte feeding produces the same bytes")
    func bytewise() throws {
        var rng = SeededRNG(seed: 2)
        var whole = RTMPServerHandshake(using: &rng)
        var rng2 = SeededRNG(seed: 2)
        var split = RTMPServerHandshake(using: &rng2)
        var clientRNG = SeededRNG(seed: 3)
        let input = rtmpC0C1(version: 0x0900_7C02, using: &clientRNG) + clientRNG.bytes(1536)
        let expected = try whole.feed(input).bytesToSend
        var got: [UInt8] = []
        var consumed = 0
        for b in input {
            let step = try split.feed([b])
            got += step.bytesToSend
            consumed += step.bytesConsumed
        }
        #expect(got == expected)
        #expect(consumed == input.count)
        #expect(split.isComplete && whole.isComplete)
        // A complex-handshake client (Flash version in C1) still completes; its C2 does not echo S1.
        #expect(split.clientVersion == 0x0900_7C02)
        #expect(split.clientEchoMatched == false)
    }

    @Test("versions other than 3 are refused", arguments: [0, 6, 8, 0x47, 0xFF] as [UInt8])
    func badVersion(version: UInt8) {
        var handshake = RTMPServerHandshake()
        #expect(throws: RTMPError.unsupportedVersion(version)) { try handshake.feed([version] + [UInt8](repeating: 0, count: 1536)) }
    }

    @Test("S1 differs between sessions with the system generator")
    func randomS1() {
        #expect(RTMPServerHandshake().s1 != RTMPServerHandshake().s1)
    }
}
