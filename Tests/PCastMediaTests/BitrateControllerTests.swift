import PCastMedia
import Testing

@Suite("Loss-based bitrate control")
struct BitrateControllerTests {
    @Test("heavy loss cuts by half the loss, light loss grows 8 %, moderate loss holds; bounded both ways")
    func rules() {
        var controller = BitrateController(maximum: 2_000_000)
        #expect(controller.report(fractionLost: 0) == 2_000_000)       // already at the maximum
        #expect(controller.report(fractionLost: 0.5) == 1_500_000)
        #expect(controller.report(fractionLost: 0.05) == 1_500_000)
        #expect(controller.report(fractionLost: 0.01) == 1_621_000)
        #expect(controller.isLimited)
        for _ in 0..<50 { controller.report(fractionLost: 0.9) }
        #expect(controller.target == 100_000)
        for _ in 0..<60 { controller.report(fractionLost: 0) }
        #expect(controller.target == 2_000_000 && !controller.isLimited)
    }

    @Test("against a 500 kbit/s link it settles under the link within 10 reports and climbs back within 30 once it is gone")
    func settlesAndRecovers() {
        // A link that loses what exceeds its capacity.
        func loss(_ rate: Int, capacity: Int) -> Double { rate > capacity ? Double(rate - capacity) / Double(rate) : 0 }
        var controller = BitrateController(maximum: 2_500_000)
        var rates: [Int] = []
        for _ in 0..<10 { rates.append(controller.report(fractionLost: loss(controller.target, capacity: 500_000))) }
        #expect(rates.last! <= 550_000, "\(rates)")
        var seconds = 0
        while controller.target < 2_000_000 && seconds < 60 {
            controller.report(fractionLost: 0)
            seconds += 1
        }
        #expect(seconds <= 30, "back to 2 Mbit/s after \(seconds) reports")
    }

    @Test("delay: a round trip 100 ms above the path's base for two reports cuts 15 % before any loss; a rising one holds; a steady one grows")
    func delayBased() {
        var controller = BitrateController(maximum: 2_000_000)
        controller.report(fractionLost: 0.5)                                      // 1_500_000
        #expect(controller.report(fractionLost: 0, roundTripTime: .milliseconds(20)) == 1_621_000)   // base 20 ms: grows
        #expect(controller.report(fractionLost: 0, roundTripTime: .milliseconds(90)) == 1_621_000)   // 70 ms of queue: holds
        #expect(controller.report(fractionLost: 0, roundTripTime: .milliseconds(140)) == 1_621_000)  // 120 ms: one report is not yet a trend
        #expect(controller.report(fractionLost: 0, roundTripTime: .milliseconds(160)) == 1_377_850)  // two in a row: −15 %
        #expect(controller.report(fractionLost: 0, roundTripTime: .milliseconds(25)) == 1_489_078)   // the queue drained: grows again
        // Loss still rules when there is loss.
        #expect(controller.report(fractionLost: 0.2, roundTripTime: .milliseconds(300)) == 1_340_170)
    }

    @Test("a bottleneck that queues before it drops is found by delay: the queue stays short and nothing is lost")
    func queueingLink() {
        // A 1.6 Mbit/s link with a 2 s buffer, one report a second: what is sent above the link
        // queues (and adds its delay to the round trip); only a full buffer drops.
        var controller = BitrateController(maximum: 2_000_000)
        var queue = 0.0, longest = 0.0, lost = 0
        for _ in 0..<40 {
            queue = max(0, queue + (Double(controller.target) - 1_600_000) / 1_600_000)
            longest = max(longest, queue)
            let loss = queue > 2 ? (queue - 2) / queue : 0
            if loss > 0 { lost += 1; queue = 2 }
            controller.report(fractionLost: loss, roundTripTime: .milliseconds(20) + .milliseconds(Int64(queue * 1000)))
        }
        #expect(lost == 0, "delay found the bottleneck before its buffer overflowed")
        #expect(longest < 1, "the queue reached \(longest) s")
        #expect(controller.target < 2_000_000)
    }

    @Test("a remote estimate (REMB) caps the target while it keeps coming, lifts with it, and lapses after five reports without one")
    func remoteEstimate() {
        var controller = BitrateController(maximum: 2_000_000)
        #expect(controller.applyRemoteEstimate(450_000) == 450_000)
        #expect(controller.report(fractionLost: 0) == 450_000, "loss says grow; the estimate still caps")
        #expect(controller.applyRemoteEstimate(600_000) == 600_000)
        #expect(controller.applyRemoteEstimate(50_000) == 100_000, "never under the minimum")
        #expect(controller.isLimited)
        for _ in 0..<BitrateController.remoteEstimateLifetime { controller.report(fractionLost: 0) }
        #expect(controller.remoteEstimate == 50_000)
        controller.report(fractionLost: 0)
        #expect(controller.remoteEstimate == nil && controller.target == 2_000_000, "lapsed: the loss-based target rules again")
    }
}
