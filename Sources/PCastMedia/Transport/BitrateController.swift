/// Follows the bandwidth a publisher has from what RTCP receiver reports tell it (the relay's own
/// leg and its worst viewer): loss with the loss-based rules of Google Congestion Control (above
/// 10 % loss the bitrate drops by half the loss, below 2 % it grows by 8 % a report, in between it
/// holds), and delay: when the round trip stays ``queueingThreshold`` above the lowest of the recent
/// ones for two reports in a row, a queue is building on the path (a bottleneck fills before it
/// drops), so the bitrate drops by 15 % before any loss; while the round trip is rising it does not
/// grow. A receiver's own estimate of the path (REMB: the relay's delay-based estimate of this
/// uplink, from when each frame arrives) caps the target while it keeps coming; one not repeated
/// for ``remoteEstimateLifetime`` reports lapses. Bounded by `minimum` and `maximum` (bits per
/// second).
///
/// ```swift
/// var controller = BitrateController(maximum: 2_500_000)
/// let target = controller.report(fractionLost: 0.25)   // 2_187_500
/// ```
package struct BitrateController: Sendable, Hashable {
    package let minimum: Int
    package let maximum: Int
    /// The loss- and round-trip-based target, before the remote estimate caps it.
    private var ownTarget: Int
    /// The latest REMB (bits per second), and the receiver reports seen since it came.
    package private(set) var remoteEstimate: Int?
    private var reportsSinceEstimate = 0
    package static let remoteEstimateLifetime = 5
    /// Queueing this far above the path's base round trip means a queue is building.
    package static let queueingThreshold: Duration = .milliseconds(100)
    /// Round trips of the recent reports; their minimum is the path's base delay.
    private var roundTrips: [Duration] = []
    private var overuseReports = 0

    package init(maximum: Int, minimum: Int = 100_000) {
        self.maximum = max(maximum, minimum)
        self.minimum = minimum
        ownTarget = self.maximum
    }

    /// What the video should be encoded at now (bits per second).
    package var target: Int { min(max(min(ownTarget, remoteEstimate ?? .max), minimum), maximum) }

    /// A receiver's estimate of the path (REMB); returns the new target.
    @discardableResult
    package mutating func applyRemoteEstimate(_ bitsPerSecond: Int) -> Int {
        remoteEstimate = max(0, bitsPerSecond)
        reportsSinceEstimate = 0
        return target
    }

    /// Takes one report's fraction lost (0…1) and, when known, the round trip it gives; returns
    /// the new target.
    @discardableResult
    package mutating func report(fractionLost loss: Double, roundTripTime: Duration? = nil) -> Int {
        reportsSinceEstimate += 1
        if reportsSinceEstimate > Self.remoteEstimateLifetime { remoteEstimate = nil }
        var target = ownTarget
        var queueing = Duration.zero
        if let roundTripTime {
            roundTrips.append(roundTripTime)
            if roundTrips.count > 30 { roundTrips.removeFirst(roundTrips.count - 30) }
            queueing = roundTripTime - (roundTrips.min() ?? roundTripTime)
            overuseReports = queueing > Self.queueingThreshold ? overuseReports + 1 : 0
        }
        if loss > 0.10 {
            target = Int(Double(target) * (1 - 0.5 * loss))
        } else if overuseReports >= 2 {
            target = Int(Double(target) * 0.85)
            overuseReports = 0
        } else if loss < 0.02 && queueing <= Self.queueingThreshold / 2 {
            target = Int(Double(target) * 1.08) + 1_000
        }
        ownTarget = min(max(target, minimum), maximum)
        return self.target
    }

    /// Whether the target is held below the maximum (the upload is the limit).
    package var isLimited: Bool { target < maximum * 9 / 10 }
}
