import Foundation
import GStreamer
import Synchronization

/// Values the streaming thread records for the test body to check afterwards (expectations are
/// checked on the test's own task, never on GStreamer's threads).
final class Recorder<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])
    func append(_ value: Value) { values.withLock { $0.append(value) } }
    var all: [Value] { values.withLock { $0 } }
}

/// A counter closures on streaming threads can share.
final class Counter: Sendable {
    private let count = Atomic<Int>(0)
    @discardableResult
    func increment() -> Int { count.add(1, ordering: .relaxed).newValue }
    var value: Int { count.load(ordering: .relaxed) }
}

/// Plays `pipeline` to its end and returns what the appsink `out` received.
func runCollecting(_ pipeline: Pipeline, sink: String = "out", timeout: Duration = .seconds(20)) async throws -> [Sample] {
    let samples = try pipeline.appSink(named: sink).samples(limit: 10_000, dropping: .dropNewest)
    try await pipeline.runToEnd(timeout: timeout)
    var received: [Sample] = []
    for await sample in samples { received.append(sample) }
    return received
}

/// Resident set size of this process in KiB.
var residentKiB: Int {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.dropFirst(6).filter(\.isNumber)) ?? 0
    }
    return 0
}

/// Whether every value lies within `tolerance` of `expected`.
func near(_ values: some Sequence<UInt8>, _ expected: Int, tolerance: Int = 3) -> Bool {
    values.allSatisfy { abs(Int($0) - expected) <= tolerance }
}
