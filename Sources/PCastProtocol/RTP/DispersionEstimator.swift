/// A receiver's estimate of how fast its downlink carries packets, from how a frame's packets
/// spread out on the way (packet-train dispersion): a relay sends a frame's packets back to back,
/// so they arrive as fast as the narrowest link lets them through. `bytes after the first packet ×
/// 8 / (last arrival − first arrival)` is that link's rate; the median over the last `window`
/// smooths out trains that met other traffic.
///
/// It measures the bottleneck's capacity, not what is left of it for this flow: losses (the
/// relay's loss windows) cover what it cannot see. It needs arrival times taken where the packets
/// queue, the kernel's receive timestamps, not when a busy thread got round to reading them.
///
/// ```swift
/// var estimator = DispersionEstimator()
/// estimator.packet(ssrc: 0x1234, sequence: 7, timestamp: 3000, marker: false, size: 1200, arrival: now)
/// if let bitsPerSecond = estimator.estimate(now: now) { sendREMB(bitsPerSecond) }
/// ```
public struct DispersionEstimator: Sendable {
    public var window: UInt64
    public var minimumSamples: Int
    /// What a train that arrived all at once stands for (bits per second).
    public var ceiling: Int

    private struct Train {
        var timestamp: UInt32
        var next: UInt16
        var first: UInt64
        var last: UInt64
        var bytes = 0
        var packets = 1
    }

    private var trains: [UInt32: Train] = [:]
    private var samples: [(at: UInt64, bitsPerSecond: Int)] = []

    public init(window: UInt64 = 500_000_000, minimumSamples: Int = 3, ceiling: Int = 1_000_000_000) {
        self.window = window
        self.minimumSamples = minimumSamples
        self.ceiling = ceiling
    }

    /// A received RTP packet (`size` bytes as received; `arrival` in nanoseconds). Returns whether
    /// it closed a train into a new sample (only then can the estimate have changed).
    @discardableResult
    public mutating func packet(ssrc: UInt32, sequence: UInt16, timestamp: UInt32, marker: Bool, size: Int, arrival: UInt64) -> Bool {
        let before = samples.count
        if var train = trains[ssrc], train.timestamp == timestamp, train.next == sequence {
            train.bytes += size
            train.packets += 1
            train.last = arrival
            train.next = sequence &+ 1
            trains[ssrc] = train
        } else {
            if let ended = trains[ssrc] { close(ended) }
            trains[ssrc] = Train(timestamp: timestamp, next: sequence &+ 1, first: arrival, last: arrival)
        }
        if marker, let ended = trains.removeValue(forKey: ssrc) { close(ended) }
        return samples.count != before
    }

    private mutating func close(_ train: Train) {
        guard train.packets >= 2 else { return }
        let spread = train.last &- train.first
        let rate = spread == 0 ? ceiling : Int(min(Double(ceiling), Double(train.bytes) * 8 * 1e9 / Double(spread)))
        samples.append((train.last, rate))
        if samples.count > 512 { samples.removeFirst(samples.count - 512) }
    }

    /// The median of the last `window`'s trains, once there are `minimumSamples` of them.
    public mutating func estimate(now: UInt64) -> Int? {
        samples.removeAll { now &- $0.at > window }
        guard samples.count >= minimumSamples else { return nil }
        let sorted = samples.map(\.bitsPerSecond).sorted()
        return sorted[sorted.count / 2]
    }
}
