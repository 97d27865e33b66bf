import Dispatch
import SRTP

/// SRTP protect throughput for 1200-byte RTP packets, per profile, on one thread.
struct SRTPBenchmark {
    let packets: Int

    struct ProfileResult: Codable {
        let profile: String
        let packetsPerSecond: Double
        let microsecondsPerPacket: Double
    }

    func run() throws -> [ProfileResult] {
        try SRTPProfile.allCases.map { profile in
            let session = try SRTPSession(key: SRTPKey.random(for: profile), direction: .outbound)
            var buffer = [UInt8](repeating: 0x5A, count: 1200 + SRTPSession.maximumOverhead)
            buffer[0] = 0x80
            buffer[1] = 96
            // Warm up, then time; each packet gets its own sequence number as on the wire.
            var best = Double.infinity
            var sequence = 0
            for round in 0..<4 {
                let count = round == 0 ? packets / 10 : packets
                let start = DispatchTime.now().uptimeNanoseconds
                for _ in 0..<count {
                    // Sequence numbers only move forward (and wrap), as on the wire.
                    sequence += 1
                    buffer[2] = UInt8(truncatingIfNeeded: sequence >> 8)
                    buffer[3] = UInt8(truncatingIfNeeded: sequence)
                    _ = try buffer.withUnsafeMutableBytes { try session.protect($0, length: 1200) }
                }
                let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
                if round > 0 { best = min(best, elapsed / Double(count)) }
            }
            return ProfileResult(profile: profile.rawValue, packetsPerSecond: 1 / best, microsecondsPerPacket: best * 1e6)
        }
    }
}
