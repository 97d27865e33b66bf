import Synchronization

/// The PCast iOS SDK's rule for `limitBandwidth` and `overridePlayoutDelay`, as a value: the most recent
/// value set is the one in effect; releasing it ends it (nil: none, the caller's default applies);
/// releasing one that a later call superseded does nothing.
///
/// ```swift
/// var limits = BandwidthLimit()      // LatestOverride<Int>
/// let a = limits.limit(200_000)      // current == 200_000
/// let b = limits.limit(400_000)      // current == 400_000
/// limits.release(a)                  // false: superseded, current stays 400_000
/// limits.release(b)                  // true: current == nil (no limit)
/// ```
public struct LatestOverride<Value: Sendable & Hashable>: Sendable, Hashable {
    /// The value in effect; nil when there is none.
    public private(set) var current: Value?
    private var latest: UInt64 = 0

    public init() {}

    /// Makes `value` the one in effect and returns its token for ``release(_:)``.
    public mutating func set(_ value: Value) -> UInt64 {
        latest += 1
        current = value
        return latest
    }

    /// Ends the value of `token`; true when that changed the value in effect.
    @discardableResult
    public mutating func release(_ token: UInt64) -> Bool {
        guard token == latest, current != nil else { return false }
        current = nil
        return true
    }
}

/// Bandwidth limits in bits per second, by the PCast iOS SDK's `limitBandwidth` rule.
public typealias BandwidthLimit = LatestOverride<Int>

extension LatestOverride where Value == Int {
    /// Starts a limit (at least 1 bit/s) and returns its token for ``release(_:)``.
    public mutating func limit(_ bitsPerSecond: Int) -> UInt64 {
        set(max(bitsPerSecond, 1))
    }
}

/// A ``BandwidthLimit`` that applies each change as it happens, and hands out ``Disposable``s.
///
/// ```swift
/// let limiter = BandwidthLimiter { bitsPerSecond in encoder.limit(bitsPerSecond) }
/// let disposable = limiter.limit(200_000)
/// disposable.dispose()   // (or let it go) lifts the limit, unless a later one superseded it
/// ```
public final class BandwidthLimiter: Sendable {
    private let state = Mutex(BandwidthLimit())
    private let apply: @Sendable (Int?) -> Void

    public init(apply: @escaping @Sendable (Int?) -> Void) {
        self.apply = apply
    }

    public var current: Int? { state.withLock { $0.current } }

    public func limit(_ bitsPerSecond: Int) -> Disposable {
        // Applied under the lock: two calls never reach the encoder out of order.
        let token = state.withLock { state in
            let token = state.limit(bitsPerSecond)
            apply(state.current)
            return token
        }
        return Disposable { [weak self] in
            guard let self else { return }
            self.state.withLock { state in
                if state.release(token) { self.apply(nil) }
            }
        }
    }

    /// Applies the limit in effect again (to a new encoder).
    public func reapply() {
        state.withLock { apply($0.current) }
    }
}
