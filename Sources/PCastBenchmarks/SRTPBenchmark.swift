import Dispatch
import SRTP

/// SRTP protect cost for 1200-byte RTP packets on one thread: per profile and sealing path
/// (AES-GCM through OpenSSL's EVP, as the relay seals; through libsrtp2 as Debian builds it, the
/// reference), with one session, and round-robin over 1,000 sessions as a relay's fan-out uses
/// them (each session's state out of cache).
public struct SRTPBenchmark {
    public let packets: Int
    /// Sessions the round-robin rows cycle through.
    public var manySessions = 1_000

    public struct ProfileResult: Codable {
        public let profile: String
        /// "OpenSSL EVP" or "libsrtp2".
        public let sealer: String
        public let sessions: Int
        public let packetsPerSecond: Double
        public let microsecondsPerPacket: Double
    }

    public func run() throws -> [ProfileResult] {
        let variants: [(SRTPProfile, Bool)] = [(.aeadAES128GCM, true), (.aeadAES128GCM, false), (.aes128CMHMACSHA1_80, false)]
        var results: [ProfileResult] = []
        for (profile, openSSL) in variants {
            for sessionCount in [1, manySessions] {
                let sessions = try (0..<sessionCount).map { _ in
                    try SRTPSession(key: SRTPKey.random(for: profile), direction: .outbound, sealsWithOpenSSL: openSSL)
                }
                let best = try measure(sessions)
                results.append(ProfileResult(profile: profile.rawValue, sealer: sessions[0].sealsWithOpenSSL ? "OpenSSL EVP" : "libsrtp2",
                                             sessions: sessionCount, packetsPerSecond: 1 / best, microsecondsPerPacket: best * 1e6))
            }
        }
        return results
    }

    /// Seconds per protect, best of 3 timed rounds after a warm-up; each packet goes to the next
    /// session, with the sequence number moving on once per round of sessions (as in a fan-out).
    private func measure(_ sessions: [SRTPSession]) throws -> Double {
        var buffer = [UInt8](repeating: 0x5A, count: 1200 + SRTPSession.maximumOverhead)
        buffer[0] = 0x80
        buffer[1] = 96
        var best = Double.infinity
        var sequence = 0
        var next = 0
        for round in 0..<4 {
            let count = round == 0 ? packets / 10 : packets
            let start = DispatchTime.now().uptimeNanoseconds
            for _ in 0..<count {
                if next == 0 {
                    // Sequence numbers only move forward (and wrap), as on the wire.
                    sequence += 1
                    buffer[2] = UInt8(truncatingIfNeeded: sequence >> 8)
                    buffer[3] = UInt8(truncatingIfNeeded: sequence)
                }
                let session = sessions[next]
                _ = try buffer.withUnsafeMutableBytes { try session.protect($0, length: 1200) }
                next = next + 1 == sessions.count ? 0 : next + 1
            }
            let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
            if round > 0 { best = min(best, elapsed / Double(count)) }
        }
        return best
    }

    public init(packets: Int) {
        self.packets = packets
    }
}
