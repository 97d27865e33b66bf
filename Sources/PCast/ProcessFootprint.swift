import Foundation

/// What this process holds now, from `/proc/self`: resident memory, threads, open descriptors.
/// Leak checks compare two of these.
///
/// ```swift
/// let before = ProcessFootprint.current()
/// // … 1,000 publish / unpublish cycles …
/// let grown = ProcessFootprint.current().residentKiB - before.residentKiB
/// ```
public struct ProcessFootprint: Sendable, Hashable, Codable {
    /// Resident set size (VmRSS), KiB.
    public var residentKiB: Int
    public var threads: Int
    public var openDescriptors: Int

    /// Hands the allocator's free pages back to the system (glibc's `malloc_trim`), so RSS shows
    /// memory in use rather than memory freed but kept in an arena. Leak checks call it before
    /// each reading; without it, a thread that lands in a fresh arena moves RSS by megabytes.
    public static func releaseFreeMemory() {
        typealias Trim = @convention(c) (Int) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return }
        _ = unsafeBitCast(symbol, to: Trim.self)(0)
    }

    public static func current() -> ProcessFootprint {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        func field(_ name: String) -> Int {
            for line in status.split(separator: "\n") where line.hasPrefix(name + ":") {
                return Int(line.dropFirst(name.count + 1).filter(\.isNumber)) ?? 0
            }
            return 0
        }
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
        return ProcessFootprint(residentKiB: field("VmRSS"), threads: field("Threads"), openDescriptors: descriptors)
    }
}

/// Publish / unpublish cycles through a platform with one ``PCast`` and one local media stream:
/// what each cycle costs in time, and what the process keeps afterwards (memory, threads,
/// descriptors). A well-known Swift SDK kept about 50 MB per cycle; the goal here is ≤ 5 MB over
/// 1,000 cycles.
///
/// ```swift
/// let result = try await PublishCycleBenchmark(cycles: 1_000).run(sdk: pcast, media: media) {
///     try platform.token(.publish)
/// }
/// ```
public struct PublishCycleBenchmark: Sendable {
    public struct Result: Sendable, Hashable, Codable {
        public var warmUpCycles: Int
        public var cycles: Int
        public var before: ProcessFootprint
        public var after: ProcessFootprint
        /// Wall time per publish + unpublish, median.
        public var cycleMedianMilliseconds: Double
        public var residentGrowthKiB: Int { after.residentKiB - before.residentKiB }
        public static let goalGrowthKiB = 5 * 1024
    }

    public var cycles: Int
    public var warmUpCycles: Int

    public init(cycles: Int = 1_000, warmUpCycles: Int = 50) {
        self.cycles = cycles
        self.warmUpCycles = warmUpCycles
    }

    /// Runs the cycles; `publishToken` gives each publish its token.
    public func run(sdk: PCast, media: UserMediaStream, publishToken: @Sendable () throws -> String) async throws -> Result {
        for _ in 0..<warmUpCycles { _ = try await cycle(sdk: sdk, media: media, token: try publishToken()) }
        try await Self.settle()
        let before = ProcessFootprint.current()
        var durations: [Double] = []
        durations.reserveCapacity(cycles)
        for _ in 0..<cycles {
            durations.append(try await cycle(sdk: sdk, media: media, token: try publishToken()))
        }
        try await Self.settle()
        let after = ProcessFootprint.current()
        durations.sort()
        return Result(warmUpCycles: warmUpCycles, cycles: cycles, before: before, after: after,
                      cycleMedianMilliseconds: durations.isEmpty ? 0 : durations[durations.count / 2])
    }

    private func cycle(sdk: PCast, media: UserMediaStream, token: String) async throws -> Double {
        let start = ContinuousClock.now
        let publisher = try await sdk.publish(streamToken: token, mediaStream: media)
        await publisher.stop()
        return Double((ContinuousClock.now - start) / .microseconds(1)) / 1000
    }

    /// Pipelines finish tearing down on their own queues; give them a moment.
    static func settle() async throws {
        try await Task.sleep(for: .milliseconds(500))
        ProcessFootprint.releaseFreeMemory()
    }
}
