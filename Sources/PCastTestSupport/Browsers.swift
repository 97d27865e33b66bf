import Foundation
import Glibc
import Synchronization

// Headless Chromium driven by the tests and the benchmarks: it opens a page (the platform's own, or
// one a benchmark serves), the page POSTs its figures to a ReportCollector, and DevTools take a
// screenshot when asked.

/// Headless Chromium (Debian's `chromium`) with a fake camera and microphone, on one page.
public struct HeadlessChromium: Sendable {
    public let process: ChildProcess
    public let profile: URL

    /// Opens `url` in a `width` × `height` window. Its DevTools listen on a loopback port of
    /// Chromium's choosing (for ``screenshot(to:)``). `trusting`: a PEM CA put in the profile's
    /// NSS store (`certutil`), as a user installs a private CA, so HTTPS pages of that CA load
    /// without any certificate-error override.
    ///
    /// `namespace`: Chromium runs inside that network namespace (`ip netns exec`), a browser on
    /// another host; `hosts` maps names to addresses there (`--host-resolver-rules`), as a DNS would.
    public static func open(_ url: String, width: Int = 1280, height: Int = 1000, trusting authority: String? = nil,
                            namespace: String? = nil, hosts: [String: String] = [:]) throws -> HeadlessChromium {
        let profile = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-chromium-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: profile, withIntermediateDirectories: true)
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = profile.path
        if let authority {
            let store = profile.appendingPathComponent(".pki/nssdb")
            try FileManager.default.createDirectory(at: store, withIntermediateDirectories: true)
            try runTool("certutil", ["-N", "-d", "sql:\(store.path)", "--empty-password"], needs: "the HTTPS browser tests need certutil (libnss3-tools)")
            try runTool("certutil", ["-A", "-d", "sql:\(store.path)", "-n", "pcast-test-ca", "-t", "C,,", "-i", authority],
                        needs: "the HTTPS browser tests need certutil (libnss3-tools)")
        }
        var arguments = [
            "--headless=new", "--no-sandbox", "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
            "--autoplay-policy=no-user-gesture-required", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--window-size=\(width),\(height)", "--remote-debugging-port=0",
            "--user-data-dir=\(profile.path)",
        ]
        if !hosts.isEmpty {
            arguments.append("--host-resolver-rules=" + hosts.sorted { $0.key < $1.key }.map { "MAP \($0.key) \($0.value)" }.joined(separator: ","))
        }
        arguments.append(url)
        var command = (try executable("chromium"), arguments)
        if let namespace {
            // The page (another network's server, a public address to Chromium) reports to the
            // collector on this namespace's loopback: Local Network Access would hold those
            // requests for a permission no one can grant headless. Only the harness's reports
            // cross that line; the platform's own requests stay on the page's origin.
            arguments.insert("--disable-features=LocalNetworkAccessChecks", at: 0)
            command = (try executable("ip"), ["netns", "exec", namespace, command.0.path] + arguments)
        }
        let process = try ChildProcess.spawn(command.0, command.1, environment: environment,
                                             output: profile.appendingPathComponent("chromium.log").path, errorsToOutput: true)
        return HeadlessChromium(process: process, profile: profile)
    }

    /// A PNG of the page as it is now, through the DevTools protocol
    /// (`scripts/peers/chromium-screenshot.py`, run from `repository`).
    public func screenshot(to path: String, repository: URL) throws {
        let script = repository.appendingPathComponent("scripts/peers/chromium-screenshot.py").path
        let log = profile.appendingPathComponent("screenshot.log").path
        let process = try ChildProcess.spawn(URL(fileURLWithPath: "/usr/bin/env"), ["python3", script, profile.path, path],
                                             environment: ProcessInfo.processInfo.environment, output: log)
        let status = process.wait()
        guard status == 0, FileManager.default.fileExists(atPath: path) else {
            throw StandInFailure(description: "no screenshot (status \(status)): \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        }
    }

    /// What Chromium printed so far (its console messages among them).
    public var log: String { (try? String(contentsOf: profile.appendingPathComponent("chromium.log"), encoding: .utf8)) ?? "" }

    public func close() {
        process.interrupt(grace: .seconds(3))
        try? FileManager.default.removeItem(at: profile)
    }
}

/// A small HTTP server on 127.0.0.1 that keeps the JSON bodies POSTed to it (the page's figures,
/// sent as simple `text/plain` requests so no CORS preflight is needed), and answers a GET with
/// `page` when it has one (a page of the benchmarks' own).
public final class ReportCollector: Sendable {
    public let port: UInt16
    private let page: String?
    private let descriptor: Int32
    private let reports = Mutex<[[String: any Sendable]]>([])
    private let stopped = Atomic<Bool>(false)

    /// `namespace`: listens on the loopback of that network namespace (a browser there reports to
    /// its own 127.0.0.1, a secure origin, so an HTTPS page may POST to it); this process's other
    /// threads stay where they are.
    public init(page: String? = nil, namespace: String? = nil) throws {
        self.page = page
        let fd = try namespace.map { try Self.socketInNamespace($0) } ?? socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            Glibc.close(fd)
            throw StandInFailure(description: "the report collector cannot listen: errno \(errno)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        descriptor = fd
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [self] in self.serve() }
        thread.start()
    }

    public var url: String { "http://127.0.0.1:\(port)/" }

    /// A TCP socket made inside network namespace `name`: a thread of its own enters it
    /// (`setns` changes only the calling thread), makes the socket, which stays in that namespace
    /// for its life, and ends.
    private static func socketInNamespace(_ name: String) throws -> Int32 {
        let made = Mutex<Result<Int32, StandInFailure>>(.failure(StandInFailure(description: "no socket made")))
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            defer { done.signal() }
            let namespace = open("/run/netns/\(name)", O_RDONLY | O_CLOEXEC)
            guard namespace >= 0 else {
                made.withLock { $0 = .failure(StandInFailure(description: "no network namespace \(name): errno \(errno)")) }
                return
            }
            defer { Glibc.close(namespace) }
            // setns(2) is declared only under _GNU_SOURCE, which Swift's Glibc module is not built
            // with: found by name instead. 0x40000000 is CLONE_NEWNET.
            typealias SetNamespace = @convention(c) (Int32, Int32) -> Int32
            guard let symbol = dlsym(nil, "setns") else {
                made.withLock { $0 = .failure(StandInFailure(description: "this C library has no setns()")) }
                return
            }
            guard unsafeBitCast(symbol, to: SetNamespace.self)(namespace, 0x4000_0000) == 0 else {
                made.withLock { $0 = .failure(StandInFailure(description: "setns(\(name)) failed: errno \(errno) (root is needed)")) }
                return
            }
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            made.withLock { $0 = fd >= 0 ? .success(fd) : .failure(StandInFailure(description: "socket() failed in \(name): errno \(errno)")) }
        }
        thread.start()
        done.wait()
        return try made.withLock { $0 }.get()
    }

    /// Every report so far from `panel` (`watch` or `publish`), oldest first.
    public func reports(_ panel: String) -> [[String: any Sendable]] {
        reports.withLock { $0.filter { ($0["panel"] as? String) == panel } }
    }

    public func latest(_ panel: String) -> [String: any Sendable]? { reports(panel).last }

    /// Every JSON object POSTed so far, oldest first.
    public var allReports: [[String: any Sendable]] { reports.withLock { $0 } }

    public func close() {
        stopped.store(true, ordering: .relaxed)
        shutdown(descriptor, Int32(SHUT_RDWR))
        Glibc.close(descriptor)
    }

    private func serve() {
        while !stopped.load(ordering: .relaxed) {
            let client = accept(descriptor, nil, nil)
            guard client >= 0 else {
                if stopped.load(ordering: .relaxed) { return }
                continue
            }
            var timeout = timeval(tv_sec: 2, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var request = [UInt8]()
            var buffer = [UInt8](repeating: 0, count: 16_384)
            while true {
                let count = read(client, &buffer, buffer.count)
                if count <= 0 { break }
                request += buffer[0..<count]
                if let body = Self.body(of: request) {
                    if let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] {
                        let report = object.mapValues { Self.sendable($0) }
                        reports.withLock { $0.append(report) }
                    }
                    break
                }
            }
            var reply = "HTTP/1.1 204 No Content\r\nAccess-Control-Allow-Origin: *\r\nConnection: close\r\n\r\n"
            if let page, request.starts(with: Array("GET ".utf8)) {
                reply = "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(page.utf8.count)\r\n"
                    + "Cache-Control: no-store\r\nConnection: close\r\n\r\n" + page
            }
            let bytes = Array(reply.utf8)
            var written = 0
            while written < bytes.count {
                let count = bytes[written...].withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
                if count <= 0 { break }
                written += count
            }
            Glibc.close(client)
        }
    }

    /// The body once the whole request (headers and Content-Length bytes) is in.
    private static func body(of request: [UInt8]) -> [UInt8]? {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard let end = (0...max(0, request.count - 4)).first(where: { request.count >= 4 && Array(request[$0..<$0 + 4]) == separator }) else { return nil }
        let head = String(decoding: request[0..<end], as: UTF8.self).lowercased()
        let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
            .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
        let body = request[(end + 4)...]
        return body.count >= length ? Array(body.prefix(length)) : nil
    }

    private static func sendable(_ value: Any) -> any Sendable {
        switch value {
        case let number as NSNumber: return number.doubleValue
        case let string as String: return string
        case let array as [Any]: return array.map { sendable($0) }
        case let object as [String: Any]: return object.mapValues { sendable($0) }
        default: return "\(value)"
        }
    }
}

extension Dictionary where Key == String, Value == any Sendable {
    public func number(_ key: String) -> Double { (self[key] as? Double) ?? 0 }
    public func numbers(_ key: String) -> [Double] { (self[key] as? [any Sendable])?.compactMap { $0 as? Double } ?? [] }
    public func string(_ key: String) -> String { (self[key] as? String) ?? "" }
}
