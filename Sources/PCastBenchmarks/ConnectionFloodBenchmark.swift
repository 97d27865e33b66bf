import Foundation
import Histogram

/// `pcast-bench connections`: a `pcast serve` child (default connection limits) flooded by
/// one address with idle connections (nothing sent), while another address asks `/healthz`. It
/// reports the other client's latency before and during the flood, and the server's descriptors,
/// threads and RSS before, during and after (read from `/proc/<pid>`).
public struct ConnectionFloodBenchmark {
    public var flood = 5_000
    public var requests = 300

    public struct Footprint: Codable, Sendable {
        public var descriptors: Int
        public var threads: Int
        public var rssKiB: Int
    }

    public struct Latency: Codable, Sendable {
        public var p50Milliseconds: Double
        public var p99Milliseconds: Double
        public var failures: Int
    }

    public struct Result: Codable, Sendable {
        public var floodConnections: Int
        public var refused: Int
        public var before: Footprint
        public var during: Footprint
        public var after: Footprint
        public var healthBefore: Latency
        public var healthDuring: Latency
        public static let goalP99Milliseconds = 100.0
        public static let goalRSSGrowthKiB = 10 * 1024
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public func run() async throws -> Result {
        raiseDescriptorLimit()
        let port = try Self.freePort()
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-flood-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: data) }
        let server = Process()
        server.executableURL = try PCastExecutable.beside()
        server.arguments = ["serve", "--secret", "bench", "--http-port", String(port), "--media-port", "0", "--no-rtmp", "--data-dir", data.path]
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let pid = server.processIdentifier
        let deadline = Date().addingTimeInterval(20)
        while Self.health(port: port, from: "127.0.0.2") == nil {
            guard Date() < deadline, server.isRunning else { throw Failure(description: "pcast serve did not answer /healthz") }
            usleep(100_000)
        }
        let healthBefore = latency(port: port)
        let before = try Self.footprint(pid)
        var held: [Int32] = []
        for _ in 0..<flood {
            if let fd = Self.connect(port: port, from: "127.0.0.1") { held.append(fd) }
        }
        usleep(500_000)
        let healthDuring = latency(port: port)
        let during = try Self.footprint(pid)
        // Connections the server refused are closed by it: a read returns 0 at once.
        var refused = 0
        for fd in held {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 0) > 0 { refused += 1 }
        }
        held.forEach { close($0) }
        // The request-head deadline (10 s) has closed the held ones on the server's side.
        sleep(12)
        let after = try Self.footprint(pid)
        return Result(floodConnections: held.count, refused: refused, before: before, during: during, after: after,
                      healthBefore: healthBefore, healthDuring: healthDuring)
    }

    private func latency(port: Int) -> Latency {
        var histogram = Histogram<UInt64>(highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three)
        var failures = 0
        for _ in 0..<requests {
            if let seconds = Self.health(port: port, from: "127.0.0.2") {
                histogram.record(UInt64(seconds * 1_000_000))
            } else {
                failures += 1
            }
        }
        return Latency(p50Milliseconds: Double(histogram.valueAtPercentile(50)) / 1000,
                       p99Milliseconds: Double(histogram.valueAtPercentile(99)) / 1000, failures: failures)
    }

    private func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    /// One `GET /healthz` from `source`; seconds until the status line, or nil on failure.
    public static func health(port: Int, from source: String) -> Double? {
        let begun = DispatchTime.now().uptimeNanoseconds
        guard let fd = connect(port: port, from: source) else { return nil }
        defer { close(fd) }
        let request = Array("GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else { return nil }
        var buffer = [UInt8](repeating: 0, count: 512)
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 5_000) > 0 else { return nil }
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard count > 12, buffer[0..<12].elementsEqual(Array("HTTP/1.1 200".utf8)) else { return nil }
        return Double(DispatchTime.now().uptimeNanoseconds - begun) / 1e9
    }

    public static func connect(port: Int, from source: String) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(source)
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_addr.s_addr = inet_addr("127.0.0.1")
        remote.sin_port = UInt16(port).bigEndian
        let ok = withUnsafePointer(to: &local) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        } && withUnsafePointer(to: &remote) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Foundation.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard ok else { close(fd); return nil }
        return fd
    }

    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard ok else { throw Failure(description: "no free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    public static func footprint(_ pid: Int32) throws -> Footprint {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        func field(_ name: String) -> Int {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }
                .flatMap { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first }.flatMap { Int($0) } ?? 0
        }
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0
        return Footprint(descriptors: descriptors, threads: field("Threads"), rssKiB: field("VmRSS"))
    }

    public static func markdown(_ result: Result) -> String {
        func row(_ name: String, _ footprint: Footprint) -> String {
            "| \(name) | \(footprint.descriptors) | \(footprint.threads) | \(String(format: "%.1f", Double(footprint.rssKiB) / 1024)) |"
        }
        return [
            "## Connection flood: \(result.floodConnections) idle connections from one address against `pcast serve` (default limits)",
            "",
            "Connections refused at once (over the 256-per-address cap, answered 503): \(result.refused).",
            "",
            "| `/healthz` from another address | p50 ms | p99 ms | failures | goal |",
            "|---|---:|---:|---:|---:|",
            String(format: "| before the flood | %.2f | %.2f | %d | |", result.healthBefore.p50Milliseconds, result.healthBefore.p99Milliseconds, result.healthBefore.failures),
            String(format: "| during the flood | %.2f | %.2f | %d | p99 ≤ %.0f ms |", result.healthDuring.p50Milliseconds, result.healthDuring.p99Milliseconds,
                   result.healthDuring.failures, Result.goalP99Milliseconds),
            "",
            "| server | descriptors | threads | RSS MB |",
            "|---|---:|---:|---:|",
            row("before", result.before), row("during", result.during), row("12 s after the flood ended", result.after),
            "",
            String(format: "RSS after − before: %.1f MB (goal ≤ 10 MB).", Double(result.after.rssKiB - result.before.rssKiB) / 1024),
            "",
        ].joined(separator: "\n")
    }

    public init() {

    }
}
