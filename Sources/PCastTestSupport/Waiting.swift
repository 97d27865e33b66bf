import Foundation
import Synchronization

// The one set of waiting and counting helpers of the test targets. Conditions are polled, never
// durations asserted: a deadline is only a generous bound for a noisy 2-core machine.

/// Polls `condition` every 20 ms until it holds or `deadline` passes; whether it held.
public func eventually(_ deadline: Duration = .seconds(15), _ condition: @Sendable () async throws -> Bool) async rethrows -> Bool {
    let end = ContinuousClock.now + deadline
    while ContinuousClock.now < end {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}

/// Gave up waiting for something (``eventually(_:within:_:)``).
public struct TimedOut: Error, CustomStringConvertible {
    public let what: String
    public init(what: String) { self.what = what }
    public var description: String { "gave up waiting for \(what)" }
}

/// Polls `condition` until it holds; throws ``TimedOut`` naming `what` after `deadline`.
public func eventually(_ what: String, within deadline: Duration = .seconds(20), _ condition: @Sendable () async throws -> Bool) async throws {
    let end = ContinuousClock.now + deadline
    while ContinuousClock.now < end {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    throw TimedOut(what: what)
}

/// Blocks the calling thread, polling `condition` every 2 ms until it holds or `timeout` seconds
/// pass (for tests of code that runs on threads of its own, such as the relay's I/O thread).
public func waitUntil(timeout: Double = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        usleep(2_000)
    }
    return condition()
}

/// A count that closures on streaming or I/O threads can share.
public final class Counter: Sendable {
    private let count = Atomic<Int>(0)
    public init() {}
    @discardableResult
    public func increment() -> Int { count.add(1, ordering: .relaxed).newValue }
    public var value: Int { count.load(ordering: .relaxed) }
}
