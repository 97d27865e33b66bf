import PCastProtocol
import PCastTestSupport
@testable import PCastRelay
import Testing

/// The relay's delay-based uplink estimate (REMB), against a simulated bottleneck: a sender at
/// 30 fps whose encoder follows the estimate, a FIFO link of fixed capacity, no loss.
@Suite("Relay uplink estimate (REMB)")
struct ArrivalEstimatorTests {
    struct Outcome {
        var sentBitsLastTenSeconds = 0.0
        var worstQueueLastTenSeconds = 0.0
        var estimate: Int?
        var drops = 0
    }

    /// `seconds` of 30 fps video at up to `maximum` bit/s through a link of `capacity` bit/s with
    /// a queue bounded at 2 s (never overflowed here); arrival jitter of up to `jitter` ms.
    static func simulate(capacity: Double, maximum: Double = 1_500_000, seconds: Int = 30, jitter: Double = 0) -> Outcome {
        var estimator = ArrivalEstimator()
        var generator = SeededRNG(seed: 7)
        var linkFree = 0.0          // seconds: when the link has sent everything queued
        var outcome = Outcome()
        var rate = maximum
        for frame in 0..<(seconds * 30) {
            let capture = Double(frame) / 30
            let bytes = Int(rate / 8 / 30)
            var remaining = bytes
            while remaining > 0 {
                let size = min(1_200, remaining)
                remaining -= size
                linkFree = max(linkFree, capture) + Double(size * 8) / capacity
                let queue = linkFree - capture
                let noise = jitter > 0 ? Double.random(in: 0...jitter, using: &generator) / 1_000 : 0
                let arrival = linkFree + 0.020 + noise
                if capture >= Double(seconds - 10) {
                    outcome.sentBitsLastTenSeconds += Double(size * 8)
                    outcome.worstQueueLastTenSeconds = max(outcome.worstQueueLastTenSeconds, queue)
                }
                if estimator.packet(timestamp: UInt32(frame * 3_000), size: size, arrival: UInt64(arrival * 1e9)) { outcome.drops += 1 }
            }
            // The REMB reaches the sender within the frame (a 20 ms path).
            rate = min(maximum, Double(estimator.estimate ?? Int(maximum)))
        }
        outcome.estimate = estimator.estimate
        return outcome
    }

    @Test("a 500 kbit/s bottleneck with a deep queue: the estimate finds it before any loss; the sender settles near the capacity and the queue stays short")
    func bottleneck() {
        let outcome = Self.simulate(capacity: 500_000)
        let sent = outcome.sentBitsLastTenSeconds / 10
        print("uplink estimate, 500 kbit/s bottleneck: estimate \(outcome.estimate ?? 0), sent \(Int(sent)) bit/s over the last 10 s, worst queue \(Int(outcome.worstQueueLastTenSeconds * 1000)) ms, \(outcome.drops) drops")
        #expect(outcome.estimate != nil && outcome.drops > 0)
        #expect(sent <= 550_000 && sent >= 300_000, "\(sent) bit/s")
        #expect(outcome.worstQueueLastTenSeconds < 0.4, "the queue held \(outcome.worstQueueLastTenSeconds) s")
    }

    @Test("a clear path with a few ms of jitter: no estimate holds the sender down")
    func clearPath() {
        let outcome = Self.simulate(capacity: 50_000_000, jitter: 4)
        let sent = outcome.sentBitsLastTenSeconds / 10
        print("uplink estimate, clear path: estimate \(String(describing: outcome.estimate)), sent \(Int(sent)) bit/s")
        #expect(sent >= 1_400_000, "\(sent) bit/s")
    }

    @Test("reordered and repeated packets of one frame are ignored; the incoming rate is the last second's")
    func reordering() {
        var estimator = ArrivalEstimator()
        let ms: UInt64 = 1_000_000
        for frame in UInt64(0)..<60 {
            _ = estimator.packet(timestamp: UInt32(frame * 3_000), size: 1_000, arrival: frame * 33 * ms)
            _ = estimator.packet(timestamp: UInt32(frame * 3_000), size: 1_000, arrival: frame * 33 * ms + ms)
            if frame > 2 { _ = estimator.packet(timestamp: UInt32((frame - 2) * 3_000), size: 1_000, arrival: frame * 33 * ms + 2 * ms) }
        }
        #expect(estimator.usage == .normal && estimator.estimate == nil)
        // About 30 frames of 3 packets × 8 000 bits in the last second.
        #expect((680_000...760_000).contains(estimator.incomingRate), "\(estimator.incomingRate)")
    }
}
