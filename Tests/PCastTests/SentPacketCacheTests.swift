@testable import PCast
import Testing

@Suite struct SentPacketCacheTests {
    /// A protected-looking RTP packet: version 2, `sequence` and `ssrc` in the clear header.
    static func packet(ssrc: UInt32, sequence: UInt16) -> [UInt8] {
        [0x80, 96, UInt8(sequence >> 8), UInt8(sequence & 0xFF), 0, 0, 0, 0,
         UInt8(ssrc >> 24), UInt8((ssrc >> 16) & 0xFF), UInt8((ssrc >> 8) & 0xFF), UInt8(ssrc & 0xFF), 0xAB, 0xCD]
    }

    @Test("a publisher's sent packets answer the relay's NACKs: by SSRC and sequence number, not once overwritten or older than a second, not twice within 20 ms")
    func resends() {
        let cache = SentPacketCache()
        let ms: UInt64 = 1_000_000
        for sequence in UInt16(0)..<10 { cache.store(Self.packet(ssrc: 7, sequence: sequence), now: 0) }
        cache.store(Self.packet(ssrc: 8, sequence: 3), now: 0)
        #expect(cache.resend(ssrc: 7, sequences: [3, 4, 50], now: 10 * ms) == [Self.packet(ssrc: 7, sequence: 3), Self.packet(ssrc: 7, sequence: 4)])
        #expect(cache.resend(ssrc: 7, sequences: [3], now: 20 * ms) == [], "resent 10 ms ago")
        #expect(cache.resend(ssrc: 7, sequences: [3], now: 31 * ms) == [Self.packet(ssrc: 7, sequence: 3)])
        #expect(cache.resend(ssrc: 9, sequences: [3], now: 31 * ms) == [], "an SSRC never sent")
        #expect(cache.resend(ssrc: 8, sequences: [3], now: 1_001 * ms) == [], "older than a second")
        cache.store(Self.packet(ssrc: 7, sequence: UInt16(5 + SentPacketCache.capacity)), now: 40 * ms)
        #expect(cache.resend(ssrc: 7, sequences: [5], now: 50 * ms) == [], "overwritten")
    }
}
