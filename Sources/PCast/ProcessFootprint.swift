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
    /// Bytes the C allocator has handed out and not had back, KiB (glibc's `malloc_info`: what
    /// its arenas got from the system, less their free chunks, plus direct mappings); nil where it
    /// cannot be read. Growth here is memory kept; RSS growing without it is pages the allocator
    /// holds but does not use (fragmentation), or memory from outside malloc.
    public var heapInUseKiB: Int?

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
        return ProcessFootprint(residentKiB: field("VmRSS"), threads: field("Threads"), openDescriptors: descriptors,
                                heapInUseKiB: heapInUse().map { $0 / 1024 })
    }

    /// glibc's `malloc_info` report, read through a memory stream: the totals after the last arena.
    static func heapInUse() -> Int? {
        typealias Info = @convention(c) (Int32, UnsafeMutablePointer<FILE>?) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_info") else { return nil }
        var buffer: UnsafeMutablePointer<CChar>?
        var size = 0
        guard let stream = open_memstream(&buffer, &size) else { return nil }
        let status = unsafeBitCast(symbol, to: Info.self)(0, stream)
        fclose(stream)
        defer { free(buffer) }
        guard status == 0, let buffer else { return nil }
        let report = String(cString: buffer)
        guard let totals = report.range(of: "</heap>", options: .backwards).map({ report[$0.upperBound...] }) else { return nil }
        func value(_ element: String, _ type: String) -> Int? {
            guard let start = totals.range(of: "<\(element) type=\"\(type)\""),
                  let sizeStart = totals[start.upperBound...].range(of: "size=\""),
                  let end = totals[sizeStart.upperBound...].firstIndex(of: "\"")
            else { return nil }
            return Int(totals[sizeStart.upperBound..<end])
        }
        guard let system = value("system", "current"), let fast = value("total", "fast"), let rest = value("total", "rest") else { return nil }
        return system - fast - rest + (value("total", "mmap") ?? 0)
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

    /// Runs publish / unpublish cycles; `publishToken` gives each publish its token.
    public func run(sdk: PCast, media: UserMediaStream, publishToken: @Sendable () throws -> String) async throws -> Result {
        try await measure {
            let publisher = try await sdk.publish(streamToken: try publishToken(), mediaStream: media)
            await publisher.stop()
        }
    }

    /// Runs subscribe / unsubscribe cycles of `viewer` on a stream that keeps flowing;
    /// `streamToken` gives each subscription its token. Each subscription is rendered (a null
    /// sink) until its first video frame, so the whole receive path runs every cycle.
    public func runSubscriptions(viewer: PCast, streamToken: @Sendable () throws -> String) async throws -> Result {
        try await measure {
            let stream = try await viewer.subscribe(streamToken: try streamToken())
            let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true, useNullAudioDevice: true))
            let firstFrame = AsyncStream<Void>.makeStream()
            if await renderer.start() == .ok, let track = stream.getVideoTracks().first {
                try? renderer.setFrameReadyCallback(track) { _ in firstFrame.continuation.finish() }
                let timeout = Task {
                    try? await Task.sleep(for: .seconds(5))
                    firstFrame.continuation.finish()
                }
                for await _ in firstFrame.stream {}
                timeout.cancel()
            }
            await renderer.stop()
            await stream.stop()
        }
    }

    /// Runs `cycle` `warmUpCycles` times, then `cycles` times between two footprints.
    public func measure(_ cycle: @Sendable () async throws -> Void) async throws -> Result {
        for _ in 0..<warmUpCycles { try await cycle() }
        try await Self.settle()
        let before = ProcessFootprint.current()
        var durations: [Double] = []
        durations.reserveCapacity(cycles)
        for _ in 0..<cycles {
            let start = ContinuousClock.now
            try await cycle()
            durations.append(Double((ContinuousClock.now - start) / .microseconds(1)) / 1000)
        }
        try await Self.settle()
        let after = ProcessFootprint.current()
        durations.sort()
        return Result(warmUpCycles: warmUpCycles, cycles: cycles, before: before, after: after,
                      cycleMedianMilliseconds: durations.isEmpty ? 0 : durations[durations.count / 2])
    }

    /// Pipelines finish tearing down on their own queues; give them a moment.
    static func settle() async throws {
        try await Task.sleep(for: .milliseconds(500))
        ProcessFootprint.releaseFreeMemory()
    }
}
