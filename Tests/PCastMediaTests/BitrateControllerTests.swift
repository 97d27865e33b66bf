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
}
