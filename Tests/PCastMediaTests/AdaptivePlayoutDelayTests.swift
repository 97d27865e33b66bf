import PCastImpairment
@testable import PCastMedia
import Testing

/// The receiver's own playout delay, fed arrivals and times.
@Suite("Adaptive playout delay: from the measured jitter, room for repairs once packets go missing, smooth and bounded")
struct AdaptivePlayoutDelayTests {
    static func ms(_ value: Int) -> Duration { .milliseconds(value) }

    /// Video at 30 frames a second, 3 packets a frame, each frame's packets arriving `lateness(frame)` ms
    /// after their capture; updates the delay each millisecond step from `from` to `to` (ms).
    static func feed(_ delay: inout AdaptivePlayoutDelay, from: Int, to: Int, repeatedLoss: Duration? = nil, repairRoom: Int = 30,
                     lateness: (Int) -> Int = { _ in 0 }) -> [Duration] {
        var changes: [Duration] = []
        for now in from...to {
            if now % 33 == 0 {
                let frame = now / 33
                for _ in 0..<3 {
                    delay.arrived(stream: 96, timestamp: UInt32(truncatingIfNeeded: frame * 3_000), clockRate: 90_000,
                                  now: ms(frame * 33 + lateness(frame) + 5))
                }
            }
            if let change = delay.update(repairRoom: ms(repairRoom), repeatedLoss: repeatedLoss, now: ms(now)) { changes.append(change) }
        }
        return changes
    }

    @Test("on a clean path it falls from 40 ms below 25 ms within 5 s, in steps of at most 2 ms, down to the jitter and margin")
    func fallsOnClean() {
        var delay = AdaptivePlayoutDelay(settings: .init(bounds: Self.ms(5)...Self.ms(1_000), initial: Self.ms(40)))
        let changes = Self.feed(&delay, from: 0, to: 5_000)
        #expect(delay.current < Self.ms(25), "\(delay.current)")
        #expect(zip([Self.ms(40)] + changes, changes).allSatisfy { $0 - $1 <= Self.ms(2) && $0 > $1 }, "\(changes)")
        _ = Self.feed(&delay, from: 5_001, to: 20_000)
        #expect(delay.current == Self.ms(5), "the jitter (none) and the 4 ms margin, at the 5 ms bound: \(delay.current)")
    }

    @Test("when 30 ms of jitter starts it rises above the jitter measured within 2 s; repeated losses add the repair room; the bounds hold")
    func risesWithJitterAndLoss() {
        var delay = AdaptivePlayoutDelay(settings: .init(bounds: Self.ms(10)...Self.ms(60), initial: Self.ms(40)))
        _ = Self.feed(&delay, from: 0, to: 10_000)
        #expect(delay.current == Self.ms(10))
        var generator = SeededGenerator(seed: 7)
        let lateness = (0..<1_000).map { _ in Int.random(in: 0...30, using: &generator) }
        _ = Self.feed(&delay, from: 10_001, to: 12_000) { lateness[$0 % 1_000] }
        #expect(delay.current > delay.jitter && delay.jitter >= Self.ms(25), "\(delay.current), jitter \(delay.jitter)")
        _ = Self.feed(&delay, from: 12_001, to: 13_000, repeatedLoss: Self.ms(12_500), repairRoom: 20) { lateness[$0 % 1_000] }
        #expect(abs((delay.current - delay.jitter * 1.25 - Self.ms(24)) / .microseconds(1)) < 1_000, "1.25 × jitter + margin + 20 ms of repairs: \(delay.current), jitter \(delay.jitter)")
        _ = Self.feed(&delay, from: 13_001, to: 14_000, repeatedLoss: Self.ms(12_500), repairRoom: 40) { lateness[$0 % 1_000] }
        #expect(delay.current == Self.ms(60), "at the 60 ms bound: \(delay.current)")
    }

    @Test("timestamps that jump to another timeline (a simulcast layer with its own, a restarted sender) start a new baseline, and timestamps that wrap many times stay exact: no overflow, no false lateness")
    func timestampJumpsAndWraps() {
        var delay = AdaptivePlayoutDelay(settings: .init(bounds: Self.ms(10)...Self.ms(500), initial: Self.ms(40)))
        // 90 kHz video whose timestamps start just before a wrap; every 3 s the sender jumps to a
        // timeline 2^31 ticks away, and back; between jumps 30 frames a second arrive on time.
        var base: UInt32 = 4_294_000_000
        for frame in 0..<900 {
            if frame % 90 == 0 && frame > 0 { base &+= 1 << 31 }
            let timestamp = base &+ UInt32(frame % 90) * 3_000
            delay.arrived(stream: 96, timestamp: timestamp, clockRate: 90_000, now: Self.ms(frame * 33 + 5))
            _ = delay.update(repairRoom: .zero, repeatedLoss: nil, now: Self.ms(frame * 33 + 5))
        }
        #expect(delay.jitter < Self.ms(2), "\(delay.jitter)")
        #expect(delay.current == Self.ms(10), "\(delay.current)")
        // Wrapping every 13 hours at 90 kHz is rare; at 48 kHz a 2^32 wrap is 25 hours: a clock
        // far from zero (cycles counted up) still gives exact transits.
        var wrapping = AdaptivePlayoutDelay(settings: .init(bounds: Self.ms(10)...Self.ms(500), initial: Self.ms(40)))
        for packet in 0..<2_000 {
            // 100 ms apart in media and in arrival: 9,000 ticks at 90 kHz, wrapping each 477,218 packets;
            // start 10 packets before a wrap and cross it.
            let timestamp = UInt32(truncatingIfNeeded: Int64(4_294_877_296) + Int64(packet) * 9_000)
            wrapping.arrived(stream: 96, timestamp: timestamp, clockRate: 90_000, now: Self.ms(packet * 100))
        }
        #expect(wrapping.jitter < Self.ms(1), "\(wrapping.jitter)")
    }
}
