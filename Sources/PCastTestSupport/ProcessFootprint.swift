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
