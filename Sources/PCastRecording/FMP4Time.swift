// MARK: - Time arithmetic

/// Overflow-safe conversions between nanoseconds and track ticks.
///
/// ```swift
/// FMP4Time.ticks(40_000_000, timescale: 90_000)   // 3600
/// FMP4Time.nanoseconds(3600, timescale: 90_000)   // 40_000_000
/// ```
public enum FMP4Time {
    /// `value * multiplier / divisor`, rounded to nearest, saturating at `UInt64.max`.
    public static func rescale(_ value: UInt64, multiplier: UInt64, divisor: UInt64) -> UInt64 {
        guard divisor > 0 else { return UInt64.max }
        let product = value.multipliedFullWidth(by: multiplier)
        let (sum, carry) = product.low.addingReportingOverflow(divisor / 2)
        let high = product.high &+ (carry ? 1 : 0)
        guard high < divisor else { return UInt64.max }
        return divisor.dividingFullWidth((high: high, low: sum)).quotient
    }

    /// Nanoseconds to ticks of `timescale`.
    public static func ticks(_ nanoseconds: UInt64, timescale: UInt32) -> UInt64 {
        rescale(nanoseconds, multiplier: UInt64(timescale), divisor: 1_000_000_000)
    }

    /// Ticks of `timescale` to nanoseconds.
    public static func nanoseconds(_ ticks: UInt64, timescale: UInt32) -> UInt64 {
        rescale(ticks, multiplier: 1_000_000_000, divisor: UInt64(timescale))
    }
}
