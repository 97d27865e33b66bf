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

/// Plays `pipeline` to its end and returns what the appsink `out` received.
func runCollecting(_ pipeline: Pipeline, sink: String = "out", timeout: Duration = .seconds(20)) async throws -> [Sample] {
    let samples = try pipeline.appSink(named: sink).samples(limit: 10_000, dropping: .dropNewest)
    try await pipeline.runToEnd(timeout: timeout)
    var received: [Sample] = []
    for await sample in samples { received.append(sample) }
    return received
}

/// Whether every value lies within `tolerance` of `expected`.
func near(_ values: some Sequence<UInt8>, _ expected: Int, tolerance: Int = 3) -> Bool {
    values.allSatisfy { abs(Int($0) - expected) <= tolerance }
}
