import Testing
import PCastProtocol

@Suite("Downlink estimate from packet-train dispersion")
struct DispersionEstimatorTests {
    static let ms: UInt64 = 1_000_000

    /// A frame of `sizes` bytes sent back to back through a link of `bitsPerSecond`, starting at `start`.
    static func frame(_ estimator: inout DispersionEstimator, ssrc: UInt32 = 1, first: UInt16, timestamp: UInt32, sizes: [Int],
                      bitsPerSecond: Double, start: UInt64) -> UInt16 {
        var arrival = start, sequence = first
        for (index, size) in sizes.enumerated() {
            if index > 0 { arrival += UInt64(Double(size) * 8 / bitsPerSecond * 1e9) }
            estimator.packet(ssrc: ssrc, sequence: sequence, timestamp: timestamp, marker: index == sizes.count - 1, size: size, arrival: arrival)
            sequence &+= 1
        }
        return sequence
    }

    @Test("frames through a 500 kbit/s link read 500 kbit/s; a single-packet frame says nothing; three trains are needed")
    func bottleneckRate() {
        var estimator = DispersionEstimator()
        var sequence: UInt16 = 65_530   // across the wrap
        for frame in 0..<2 {
            sequence = Self.frame(&estimator, first: sequence, timestamp: UInt32(frame) * 3000, sizes: [1200, 1200, 400], bitsPerSecond: 500_000,
                                  start: UInt64(frame) * 33 * Self.ms)
        }
        sequence = Self.frame(&estimator, first: sequence, timestamp: 6000, sizes: [300], bitsPerSecond: 500_000, start: 66 * Self.ms)
        #expect(estimator.estimate(now: 70 * Self.ms) == nil, "two trains")
        sequence = Self.frame(&estimator, first: sequence, timestamp: 9000, sizes: [1200, 900], bitsPerSecond: 500_000, start: 99 * Self.ms)
        let estimate = estimator.estimate(now: 120 * Self.ms)
        #expect(estimate.map { abs($0 - 500_000) < 5_000 } == true, "\(String(describing: estimate))")
    }

    @Test("the median ignores a train a stall spread out and one that arrived all at once; trains older than the window are forgotten; interleaved SSRCs keep their own trains")
    func robust() {
        var estimator = DispersionEstimator()
        var video: UInt16 = 100, audio: UInt16 = 7
        for frame in 0..<5 {
            let start = UInt64(frame) * 33 * Self.ms
            video = Self.frame(&estimator, first: video, timestamp: UInt32(frame) * 3000, sizes: [1200, 1200, 1200], bitsPerSecond: 2_000_000, start: start)
            // An audio packet in between does not break the video's next train.
            estimator.packet(ssrc: 2, sequence: audio, timestamp: UInt32(frame) * 960, marker: true, size: 100, arrival: start + 20 * Self.ms)
            audio &+= 1
        }
        video = Self.frame(&estimator, first: video, timestamp: 50_000, sizes: [1200, 1200], bitsPerSecond: 100_000, start: 170 * Self.ms)
        video = Self.frame(&estimator, first: video, timestamp: 53_000, sizes: [1200, 1200], bitsPerSecond: 1e15, start: 200 * Self.ms)
        let estimate = estimator.estimate(now: 210 * Self.ms)
        #expect(estimate.map { abs($0 - 2_000_000) < 20_000 } == true, "\(String(describing: estimate))")
        #expect(estimator.estimate(now: 2_000 * Self.ms) == nil, "a second later")
        var ceiling = DispersionEstimator(minimumSamples: 1)
        _ = Self.frame(&ceiling, first: 1, timestamp: 1, sizes: [1200, 1200], bitsPerSecond: 1e18, start: 0)
        #expect(ceiling.estimate(now: 0) == ceiling.ceiling)
    }
}
