import Foundation
import GStreamer
import Histogram
import Synchronization

/// Cost of a Swift pad probe on 720p I420 frames: none, read-only, read + write, same run.
public struct ProbeBenchmark {
    public let frames: Int
    public let runs: Int

    public enum Variant: String, CaseIterable, Codable {
        case none = "no probe"
        case read = "read (sum every byte)"
        case readWrite = "read + write (sum, then invert luma)"
    }

    public struct VariantResult: Codable {
        public let name: String
        public let cpuMillisecondsPerFrame: Double
        public let overheadMilliseconds: Double?
        public let probeP50Milliseconds: Double?
        public let probeP99Milliseconds: Double?
    }

    public struct Result: Codable {
        public let frames: Int
        public let runs: Int
        public let goalMilliseconds: Double
        public let variants: [VariantResult]
    }

    private struct Sample {
        let cpuPerFrame: Double
        let probeNanoseconds: [UInt64]
    }

    public func run() async throws -> Result {
        var samples: [Variant: [Sample]] = [:]
        // Interleave the variants so drift on a shared machine hits them alike.
        for _ in 0..<runs {
            for variant in Variant.allCases {
                samples[variant, default: []].append(try await measure(variant))
            }
        }
        let baseline = median(samples[.none]!.map(\.cpuPerFrame))
        let results = Variant.allCases.map { variant -> VariantResult in
            let runs = samples[variant]!
            let cpu = median(runs.map(\.cpuPerFrame))
            var histogram = Histogram<UInt64>(highestTrackableValue: 10_000_000_000)
            for run in runs { for value in run.probeNanoseconds { _ = histogram.record(max(value, 1)) } }
            let hasProbe = variant != .none
            return VariantResult(
                name: variant.rawValue,
                cpuMillisecondsPerFrame: cpu * 1000,
                overheadMilliseconds: hasProbe ? (cpu - baseline) * 1000 : nil,
                probeP50Milliseconds: hasProbe ? Double(histogram.valueAtPercentile(50)) / 1e6 : nil,
                probeP99Milliseconds: hasProbe ? Double(histogram.valueAtPercentile(99)) / 1e6 : nil)
        }
        return Result(frames: frames, runs: runs, goalMilliseconds: 0.3, variants: results)
    }

    private func measure(_ variant: Variant) async throws -> Sample {
        let pipeline = try Pipeline(description: """
            videotestsrc num-buffers=\(frames) pattern=black ! video/x-raw,format=I420,width=1280,height=720,framerate=30/1 \
            ! identity name=hook ! fakesink sync=false
            """)
        let timings = Mutex<[UInt64]>([])
        timings.withLock { $0.reserveCapacity(frames) }
        let lumaBytes = 1280 * 720
        if variant != .none {
            let writes = variant == .readWrite
            try pipeline.element(named: "hook").staticPad("src").addBufferProbe { buffer in
                let start = DispatchTime.now().uptimeNanoseconds
                let sum = (try? buffer.withUnsafeBytes { raw -> UInt64 in
                    var total: UInt64 = 0
                    for word in raw.bindMemory(to: UInt64.self) { total &+= word }
                    return total
                }) ?? 0
                if writes {
                    try? buffer.withUnsafeMutableBytes { raw in
                        let words = UnsafeMutableRawBufferPointer(rebasing: raw[0..<lumaBytes]).bindMemory(to: UInt64.self)
                        for index in words.indices { words[index] ^= ~0 }
                    }
                }
                let elapsed = DispatchTime.now().uptimeNanoseconds - start
                timings.withLock { $0.append(elapsed) }
                // Keep the sum observable so the read is not optimised away.
                if sum == 1 { buffer.offset = 1 }
                return .pass
            }
        }
        let before = processCPUSeconds()
        try await pipeline.play()
        try await pipeline.waitUntilEnd(timeout: .seconds(120))
        let after = processCPUSeconds()
        await pipeline.stop()
        return Sample(cpuPerFrame: (after - before) / Double(frames), probeNanoseconds: timings.withLock { $0 })
    }

    public init(frames: Int, runs: Int) {
        self.frames = frames
        self.runs = runs
    }
}

public func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
        + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
}

public func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}
