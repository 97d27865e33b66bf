import Foundation
import PCastBenchmarks
@testable import PCastRelay
import Testing

/// The fan-out benchmark's harness. Figures are never asserted (machines are noisy); only that
/// it runs, counts and checks packets, and finishes.
@Suite("Relay fan-out benchmark")
struct FanoutBenchmarkTests {
    @Test("a tiny run (10 subscribers, 1 s) counts packets through the relay and the reference")
    func tinyRun() throws {
        var configuration = RelayFanoutBenchmark.Configuration(subscribers: 10, duration: 1)
        configuration.warmUp = 0.2
        configuration.authenticationSampleInterval = 5
        let result = try RelayFanoutBenchmark(configuration: configuration).run()
        #expect(result.relay.packetsSent > 0)
        #expect(result.relay.packetsExpected == result.relay.packetsSent * 10)
        #expect(result.relay.packetsReceived > 0)
        #expect(result.relay.packetsAuthenticated > 0, "sampled packets decrypt with each subscriber's serverKey")
        #expect(result.relay.authenticationFailures == 0)
        #expect(result.relay.cpuPercent > 0)
        #expect(result.relay.latencyP99Milliseconds > 0 && result.relay.sendFailures != nil)
        if FileManager.default.isExecutableFile(atPath: configuration.gstLaunchPath) {
            let reference = try #require(result.reference, "reference failed: \(result.referenceError ?? "?")")
            #expect(reference.packetsReceived > 0)
            #expect(result.cpuRatio != nil)
        }
        let json = try JSONEncoder().encode(result)
        #expect(try JSONDecoder().decode(RelayFanoutBenchmark.Result.self, from: json) == result)
    }

    @Test("a tiny cascaded run (12 subscribers behind 3 edge relays, 1 s) delivers packets that decrypt with each subscriber's key from its edge; more edges than subscribers is refused")
    func tinyCascadedRun() throws {
        var configuration = RelayFanoutBenchmark.Configuration(subscribers: 12, duration: 1)
        configuration.warmUp = 0.2
        configuration.authenticationSampleInterval = 5
        configuration.includeReference = false
        configuration.edges = 3
        let result = try RelayFanoutBenchmark(configuration: configuration).run()
        #expect(result.relay.packetsSent > 0)
        #expect(result.relay.packetsReceived > 0 && result.relay.packetsReceived <= result.relay.packetsExpected)
        #expect(result.relay.packetsAuthenticated > 0 && result.relay.authenticationFailures == 0,
                "sampled packets decrypt with each subscriber's key from its edge")
        #expect(result.relay.cpuPercent > 0)
        var bad = configuration
        bad.edges = 13
        #expect(throws: RelayFanoutBenchmark.Failure.self) { try RelayFanoutBenchmark(configuration: bad).run() }
    }

    /// Larger runs on demand, in release: `PCAST_RELAY_BENCH=10,100,500,1000 swift test -c release
    /// --filter FanoutBenchmarkTests/figures`; prints one JSON line per subscriber count.
    @Test("figures for the subscriber counts in PCAST_RELAY_BENCH", .enabled(if: ProcessInfo.processInfo.environment["PCAST_RELAY_BENCH"] != nil))
    func figures() throws {
        let counts = (ProcessInfo.processInfo.environment["PCAST_RELAY_BENCH"] ?? "")
            .split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        let duration = Double(ProcessInfo.processInfo.environment["PCAST_RELAY_BENCH_SECONDS"] ?? "") ?? 5
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        for count in counts {
            let result = try RelayFanoutBenchmark(configuration: .init(subscribers: count, duration: duration)).run()
            print("RELAY-BENCH " + String(decoding: try encoder.encode(result), as: UTF8.self))
            #expect(result.relay.packetsReceived > 0)
        }
    }
}
