import PCastImpairment
import Testing

@Suite("Impairment model")
struct ImpairmentModelTests {
    func run(_ profile: ImpairmentProfile, packets: Int = 100_000, size: Int = 1200, every interval: Duration = .milliseconds(1), seed: UInt64 = 3)
        -> (decisions: [ImpairmentModel<SeededGenerator>.Decision], counters: ImpairmentModel<SeededGenerator>.Counters) {
        var model = ImpairmentModel(profile: profile, generator: SeededGenerator(seed: seed))
        let decisions = (0..<packets).map { model.process(size: size, at: interval * $0) }
        return (decisions, model.counters)
    }

    @Test("no impairment delivers everything at once, in order")
    func clear() {
        let (decisions, counters) = run(.clear, packets: 1000)
        #expect(decisions == (0..<1000).map { .deliver(at: .milliseconds($0)) })
        #expect(counters.delivered == 1000 && counters.dropped == 0 && counters.bytesDelivered == 1_200_000)
    }

    @Test("uniform loss loses its share of packets, independently", arguments: [0.02, 0.10, 0.20])
    func uniform(_ rate: Double) {
        let (decisions, counters) = run(.init(loss: .uniform(rate)))
        let measured = Double(counters.lost) / Double(counters.packets)
        #expect(abs(measured - rate) < 0.005, "measured \(measured)")
        // Independent: a loss right after a loss is as likely as any loss.
        let lost = decisions.map { $0 == .drop(.loss) }
        let afterLoss = zip(lost, lost.dropFirst()).filter(\.0)
        let conditional = Double(afterLoss.filter(\.1).count) / Double(afterLoss.count)
        #expect(abs(conditional - rate) < 0.02, "P(loss | loss) \(conditional)")
    }

    @Test("Gilbert-Elliott loss has the asked rate in bursts of the asked mean length")
    func bursty() {
        let loss = ImpairmentProfile.Loss.bursty(loss: 0.05, meanBurst: 4)
        #expect(abs(loss.rate - 0.05) < 1e-9)
        let (decisions, counters) = run(.init(loss: loss), packets: 400_000)
        let measured = Double(counters.lost) / Double(counters.packets)
        #expect(abs(measured - 0.05) < 0.005, "measured \(measured)")
        var bursts: [Int] = [], current = 0
        for decision in decisions {
            if decision == .drop(.loss) { current += 1 } else if current > 0 { bursts.append(current); current = 0 }
        }
        let meanBurst = Double(bursts.reduce(0, +)) / Double(bursts.count)
        #expect(abs(meanBurst - 4) < 0.3, "mean burst \(meanBurst)")
    }

    @Test("delay and jitter stay within bounds and never reorder; reordering reorders its share")
    func delayJitterReorder() {
        var profile = ImpairmentProfile(delay: .milliseconds(30), jitter: .milliseconds(20))
        let (decisions, _) = run(profile, packets: 10_000, every: .microseconds(500))
        let departures = decisions.compactMap { if case .deliver(let at) = $0 { return at } else { return nil } }
        #expect(departures.count == 10_000)
        #expect(zip(departures, departures.dropFirst()).allSatisfy { $0 <= $1 }, "jitter reordered packets")
        for (index, at) in departures.enumerated() {
            let sent = Duration.microseconds(500) * index
            // Kept in order, a packet may wait for the one before it, which left at most 50 ms after it was sent.
            #expect(at - sent >= .milliseconds(30) && at - sent <= .milliseconds(50), "packet \(index) delayed \(at - sent)")
        }
        profile.reorder = 0.05
        let (reordered, _) = run(profile, packets: 10_000, every: .microseconds(500))
        let times = reordered.compactMap { if case .deliver(let at) = $0 { return at } else { return nil } }
        let overtaken = zip(times, times.dropFirst()).filter { $0 > $1 }.count
        #expect(overtaken > 300 && overtaken < 700, "\(overtaken) of 10,000 overtaken")
    }

    @Test("a bandwidth cap paces packets at the link rate and drops what would queue too long")
    func bandwidthCap() {
        // 1,200-byte packets every 4 ms is 2.4 Mbit/s offered into a 1 Mbit/s link.
        var profile = ImpairmentProfile(bandwidth: 1_000_000)
        profile.queueLimit = .milliseconds(100)
        let (decisions, counters) = run(profile, packets: 5_000, every: .milliseconds(4))
        let departures = decisions.compactMap { if case .deliver(let at) = $0 { return at } else { return nil } }
        let seconds = Double((departures.last! - departures.first!) / .milliseconds(1)) / 1000
        let throughput = Double(counters.bytesDelivered * 8) / seconds
        #expect(abs(throughput - 1_000_000) < 20_000, "throughput \(throughput) bit/s")
        #expect(counters.queueFull > 2_500, "queue drops \(counters.queueFull)")
        // Spaced at the serialisation time of one packet (9.6 ms at 1 Mbit/s) once the queue is full.
        let gaps = zip(departures, departures.dropFirst()).map { $1 - $0 }.suffix(100)
        #expect(gaps.allSatisfy { $0 >= .microseconds(9_590) }, "\(gaps.min()!)")
        // Under the cap, nothing queues.
        let (light, lightCounters) = run(profile, packets: 1_000, every: .milliseconds(20))
        #expect(lightCounters.queueFull == 0)
        #expect(light.enumerated().allSatisfy { index, decision in decision == .deliver(at: .milliseconds(20) * index + .microseconds(9_600)) })
    }

    @Test("an outage drops everything until it ends; the profile's loss comes back with it")
    func outage() {
        var model = ImpairmentModel(profile: .clear, generator: SeededGenerator(seed: 1))
        #expect(model.process(size: 100, at: .zero) == .deliver(at: .zero))
        model.profile.outage = true
        #expect((1...50).allSatisfy { model.process(size: 100, at: .milliseconds($0)) == .drop(.outage) })
        model.profile.outage = false
        #expect(model.process(size: 100, at: .milliseconds(60)) == .deliver(at: .milliseconds(60)))
        #expect(model.counters.outage == 50 && model.counters.delivered == 2)
    }
}
