import Foundation

/// A receive-side, delay-based estimate of what a publisher's uplink carries, from one video
/// SSRC: the relay tells the publisher in REMB (draft-alvestrand-rmcat-remb).
///
/// The method is Google Congestion Control's delay-based part (draft-ietf-rmcat-gcc §5), with the
/// RTP timestamp standing in for the send time (no abs-send-time extension; as WebRTC's
/// single-stream estimator does): packets of one frame form a group; each group's arrival delta
/// minus its capture delta is the change in queueing delay; a least-squares trend over the last
/// `trendWindow` groups of the smoothed accumulated delay, scaled, is compared with an adaptive
/// threshold. A trend above it for `overuseTime` means a queue is building on the path: the
/// estimate drops to `beta` times the rate that actually arrives. Otherwise it grows by
/// `increasePerSecond`, but never past `1.5 ×` what arrives (it is not raised on faith), and
/// never falls only because the publisher sent little.
///
/// There is no estimate before the first overuse: until then nothing has shown a limit.
///
/// ```swift
/// var estimator = ArrivalEstimator()
/// if estimator.packet(timestamp: ts, size: 1200, arrival: now) { sendREMB(estimator.estimate!) }
/// ```
struct ArrivalEstimator: Sendable {
    struct Settings: Sendable, Equatable {
        var clockRate: Double = 90_000
        var trendWindow = 20
        var gain = 4.0
        var initialThreshold = 12.5
        var thresholdRange: ClosedRange<Double> = 6...600
        var thresholdUp = 0.0087
        var thresholdDown = 0.039
        /// Milliseconds over the threshold before it counts as overuse.
        var overuseTime = 10.0
        var beta = 0.85
        var increasePerSecond = 0.08
        /// Nanoseconds the incoming rate is measured over.
        var rateWindow: UInt64 = 1_000_000_000
        /// Nanoseconds between two decreases (about a round trip and a reaction).
        var decreaseInterval: UInt64 = 300_000_000
        var minimum = 50_000
    }

    enum Usage: Sendable, Equatable { case normal, overusing, underusing }

    let settings: Settings
    /// Bits per second; nil until an overuse has shown a limit.
    private(set) var estimate: Int?
    private(set) var usage: Usage = .normal
    /// The bit rate that arrived over the last `rateWindow`.
    private(set) var incomingRate = 0

    // The frame being received.
    private var group: (timestamp: UInt32, arrival: UInt64)?
    // The last complete frame.
    private var previous: (timestamp: UInt32, arrival: UInt64)?
    private var firstArrival: UInt64?
    private var accumulated = 0.0
    private var smoothed = 0.0
    private var trendPoints: [(x: Double, y: Double)] = []
    private var deltas = 0
    private var threshold: Double
    private var lastThresholdUpdate: UInt64?
    private var overuseMilliseconds = 0.0
    private var overuseCount = 0
    private var previousTrend = 0.0
    private var lastDecrease: UInt64?
    private var lastIncrease: UInt64?
    private var arrivals: [(time: UInt64, bytes: Int)] = []
    private var arrivalsHead = 0
    private var windowBytes = 0

    init(settings: Settings = Settings()) {
        self.settings = settings
        threshold = settings.initialThreshold
    }

    /// One authenticated packet of the video SSRC. Returns true when the estimate dropped (tell the
    /// publisher at once).
    mutating func packet(timestamp: UInt32, size: Int, arrival: UInt64) -> Bool {
        measure(size: size, arrival: arrival)
        guard let current = group else {
            group = (timestamp, arrival)
            return false
        }
        let ahead = Int32(bitPattern: timestamp &- current.timestamp)
        if ahead == 0 {
            group = (timestamp, arrival)
            return false
        }
        // A late packet of an older frame (reordered) says nothing about the queue now.
        guard ahead > 0 else { return false }
        let complete = current
        group = (timestamp, arrival)
        defer { previous = complete }
        guard let previous else { return false }
        let sendDelta = Double(Int32(bitPattern: complete.timestamp &- previous.timestamp)) / settings.clockRate * 1_000
        let arrivalDelta = Double(Int64(bitPattern: complete.arrival &- previous.arrival)) / 1_000_000
        return frameCompleted(delayChange: arrivalDelta - sendDelta, sendDelta: sendDelta, at: complete.arrival)
    }

    // MARK: Incoming rate

    private mutating func measure(size: Int, arrival: UInt64) {
        arrivals.append((arrival, size))
        windowBytes += size
        while arrivalsHead < arrivals.count, arrival &- arrivals[arrivalsHead].time > settings.rateWindow {
            windowBytes -= arrivals[arrivalsHead].bytes
            arrivalsHead += 1
        }
        if arrivalsHead > 512 && arrivalsHead * 2 > arrivals.count {
            arrivals.removeFirst(arrivalsHead)
            arrivalsHead = 0
        }
        incomingRate = Int(Double(windowBytes * 8) * 1e9 / Double(settings.rateWindow))
    }

    // MARK: Trend and detector

    private mutating func frameCompleted(delayChange: Double, sendDelta: Double, at arrival: UInt64) -> Bool {
        firstArrival = firstArrival ?? arrival
        deltas = min(deltas + 1, 1_000)
        accumulated += delayChange
        smoothed = 0.9 * smoothed + 0.1 * accumulated
        let x = Double(arrival &- firstArrival!) / 1_000_000
        trendPoints.append((x, smoothed))
        if trendPoints.count > settings.trendWindow { trendPoints.removeFirst(trendPoints.count - settings.trendWindow) }
        guard trendPoints.count == settings.trendWindow else { return false }
        let trend = Self.slope(trendPoints)
        let modified = trend * Double(min(deltas, 60)) * settings.gain
        detect(modified, trend: trend, sendDelta: sendDelta, at: arrival)
        return control(at: arrival)
    }

    static func slope(_ points: [(x: Double, y: Double)]) -> Double {
        let n = Double(points.count)
        let meanX = points.reduce(0) { $0 + $1.x } / n
        let meanY = points.reduce(0) { $0 + $1.y } / n
        var numerator = 0.0, denominator = 0.0
        for point in points {
            numerator += (point.x - meanX) * (point.y - meanY)
            denominator += (point.x - meanX) * (point.x - meanX)
        }
        return denominator == 0 ? 0 : numerator / denominator
    }

    private mutating func detect(_ modified: Double, trend: Double, sendDelta: Double, at now: UInt64) {
        if modified > threshold {
            overuseMilliseconds += overuseCount == 0 ? sendDelta / 2 : sendDelta
            overuseCount += 1
            if overuseMilliseconds > settings.overuseTime && overuseCount > 1 && trend >= previousTrend {
                overuseMilliseconds = 0
                overuseCount = 0
                usage = .overusing
            }
        } else if modified < -threshold {
            overuseMilliseconds = 0
            overuseCount = 0
            usage = .underusing
        } else {
            overuseMilliseconds = 0
            overuseCount = 0
            usage = .normal
        }
        previousTrend = trend
        // The threshold follows the trend slowly upwards and faster downwards, so it adapts to a
        // jittery path without letting a competing flow starve us; spikes far above it are ignored.
        let elapsed = lastThresholdUpdate.map { min(Double(now &- $0) / 1_000_000, 100) } ?? 0
        lastThresholdUpdate = now
        guard abs(modified) - threshold <= 15 else { return }
        let k = abs(modified) < threshold ? settings.thresholdDown : settings.thresholdUp
        threshold += k * (abs(modified) - threshold) * elapsed
        threshold = min(max(threshold, settings.thresholdRange.lowerBound), settings.thresholdRange.upperBound)
    }

    // MARK: Rate control

    private mutating func control(at now: UInt64) -> Bool {
        switch usage {
        case .overusing:
            if let lastDecrease, now &- lastDecrease < settings.decreaseInterval { return false }
            guard incomingRate > 0 else { return false }
            let decreased = max(settings.minimum, Int(settings.beta * Double(incomingRate)))
            let dropped = estimate.map { decreased < $0 } ?? true
            estimate = min(estimate ?? .max, decreased)
            lastDecrease = now
            lastIncrease = now
            return dropped
        case .underusing:
            // The queue is draining: hold until it is empty.
            lastIncrease = now
            return false
        case .normal:
            guard let current = estimate else { return false }
            let elapsed = lastIncrease.map { min(Double(now &- $0) / 1e9, 1) } ?? 0
            lastIncrease = now
            let grown = Int(Double(current) * pow(1 + settings.increasePerSecond, elapsed)) + 1
            estimate = max(current, min(grown, Int(1.5 * Double(incomingRate)) + 10_000))
            return false
        }
    }
}
