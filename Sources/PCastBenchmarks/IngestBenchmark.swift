import Foundation
import GStreamer
import PCastMedia
import Synchronization

/// CPU of one ingest: the clip looped from a file for `seconds`, H.264 passed through (and, for
/// comparison, re-encoded to an exact frame rate), with the packets counted and dropped.
///
/// ```swift
/// let result = try await IngestBenchmark(file: "/path/clip.mp4", seconds: 10).run()
/// print(result.passthroughCPUPercent)
/// ```
public struct IngestBenchmark: Sendable {
    public struct Result: Codable, Sendable {
        public let seconds: Double
        public let passthroughCPUPercent: Double
        public let passthroughPackets: Int
        public let transcodeCPUPercent: Double
        public let transcodePackets: Int
    }

    public var file: String
    public var seconds: Double

    public init(file: String, seconds: Double = 10) {
        self.file = file
        self.seconds = seconds
    }

    public func run() async throws -> Result {
        let (passCPU, passPackets) = try await measure(IngestOptions(prerollSkip: .zero, loop: true))
        let (codeCPU, codePackets) = try await measure(IngestOptions(exactFrameRate: 25, prerollSkip: .zero, loop: true))
        return Result(seconds: seconds, passthroughCPUPercent: passCPU, passthroughPackets: passPackets,
                      transcodeCPUPercent: codeCPU, transcodePackets: codePackets)
    }

    private func measure(_ base: IngestOptions) async throws -> (Double, Int) {
        var options = base
        options.firstViewerWait = .zero
        let packets = Atomic<Int>(0)
        let ingest = try await IngestPublisher.start(.uri(URL(fileURLWithPath: file).absoluteString), options: options) { _ in
            packets.add(1, ordering: .relaxed)
        }
        try await ingest.begin()
        // Let it settle, then measure.
        try await Task.sleep(for: .seconds(1))
        let before = Self.processCPUSeconds(), start = ContinuousClock.now, startPackets = packets.load(ordering: .relaxed)
        try await Task.sleep(for: .seconds(seconds))
        let after = Self.processCPUSeconds(), elapsed = ContinuousClock.now - start
        let count = packets.load(ordering: .relaxed) - startPackets
        await ingest.stop()
        let wall = Double(elapsed / .milliseconds(1)) / 1000
        return ((after - before) / wall * 100, count)
    }

    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }
}
