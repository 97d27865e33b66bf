/// Follows the bandwidth a publisher has from the loss it is told about (RTCP receiver reports: the
/// relay's own leg and its worst viewer), with the loss-based rules of Google Congestion Control:
/// above 10 % loss the bitrate drops by half the loss, below 2 % it grows by 8 % a report, in
/// between it holds. Bounded by `minimum` and `maximum` (bits per second).
///
/// ```swift
/// var controller = BitrateController(maximum: 2_500_000)
/// let target = controller.report(fractionLost: 0.25)   // 2_187_500
/// ```
public struct BitrateController: Sendable, Hashable {
    public let minimum: Int
    public let maximum: Int
    public private(set) var target: Int

    public init(maximum: Int, minimum: Int = 100_000) {
        self.maximum = max(maximum, minimum)
        self.minimum = minimum
        target = self.maximum
    }

    /// Takes one report's fraction lost (0…1) and returns the new target.
    @discardableResult
    public mutating func report(fractionLost loss: Double) -> Int {
        if loss > 0.10 {
            target = Int(Double(target) * (1 - 0.5 * loss))
        } else if loss < 0.02 {
            target = Int(Double(target) * 1.08) + 1_000
        }
        target = min(max(target, minimum), maximum)
        return target
    }

    /// Whether the target is held below the maximum (the upload is the limit).
    public var isLimited: Bool { target < maximum * 9 / 10 }
}
