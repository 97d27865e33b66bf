import Foundation
import Glibc
import PCastProtocol
import PCastRelay
import PCastTestSupport
import Synchronization

/// A `pcast serve` child for the TLS listener benchmark: HTTPS/WSS on a free port of 127.0.0.1,
/// no RTMP, its data and log in a folder of its own (removed by `stop()`).
struct TLSBenchServer {
    let process: ChildProcess
    let port: Int
    let directory: String

    /// The options every run passes (`PORT` stands for the port when none is given).
    static func options(port: Int?) -> [String] {
        ["serve", "--application-id", TLSListenerBenchmark.applicationId, "--secret", TLSListenerBenchmark.secret,
         "--host", "127.0.0.1", "--http-port", port.map(String.init) ?? "PORT", "--media-port", "0", "--no-rtmp"]
    }

    /// Starts it and waits (20 s at most) until `/healthz` answers over TLS, checked with `check`.
    static func start(executable: String, certificate: TestCertificates.Pair, options extra: [String],
                      check: TLSBenchClientContext) throws(TLSListenerBenchmark.Failure) -> TLSBenchServer {
        let port = try freePort()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-tls-bench-\(UUID().uuidString)").path
        do { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) } catch {
            throw .init("cannot make \(directory): \(error)")
        }
        let arguments = options(port: port) + ["--data-dir", directory + "/data", "--tls-certificate", certificate.certificate,
                                               "--tls-key", certificate.key] + extra
        let process: ChildProcess
        do {
            process = try ChildProcess.spawn(URL(fileURLWithPath: executable), arguments, environment: ProcessInfo.processInfo.environment,
                                             output: directory + "/serve.log", errorsToOutput: true)
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw .init("pcast serve did not start: \(error)")
        }
        let server = TLSBenchServer(process: process, port: port, directory: directory)
        let deadline = monotonicNanoseconds() + 20_000_000_000
        while server.health(context: check) == nil {
            guard process.isRunning else {
                let log = server.logTail()
                server.stop()
                throw .init("pcast serve exited before answering /healthz: \(log)")
            }
            guard monotonicNanoseconds() < deadline else {
                let log = server.logTail()
                server.stop()
                throw .init("pcast serve did not answer /healthz over TLS within 20 s: \(log)")
            }
            usleep(100_000)
        }
        return server
    }

    /// SIGINT (SIGKILL after 5 s), then removes its folder.
    func stop() {
        process.interrupt(grace: .seconds(5))
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The end of its log, for an error message.
    func logTail() -> String {
        let text = (try? String(contentsOfFile: directory + "/serve.log", encoding: .utf8)) ?? ""
        let tail = text.split(separator: "\n").suffix(5).joined(separator: " | ")
        return tail.isEmpty ? "(no output)" : tail
    }

    /// Its user + system CPU so far, nanoseconds (clock-tick resolution).
    func cpuNanoseconds() -> UInt64 {
        procStatCPU(path: "/proc/\(process.pid)/stat").map { $0.user + $0.system } ?? 0
    }

    /// Its soft limit on open descriptors (`Max open files` of `/proc/<pid>/limits`; inherited from this process).
    func descriptorLimit() -> Int? {
        guard let limits = try? String(contentsOfFile: "/proc/\(process.pid)/limits", encoding: .utf8),
              let line = limits.split(separator: "\n").first(where: { $0.hasPrefix("Max open files") })
        else { return nil }
        return line.dropFirst("Max open files".count).split(separator: " ").first.flatMap { Int($0) }
    }

    /// RSS and threads from `/proc/<pid>/status`, descriptors from `/proc/<pid>/fd`.
    func footprint() throws(TLSListenerBenchmark.Failure) -> TLSListenerBenchmark.Footprint {
        guard let status = try? String(contentsOfFile: "/proc/\(process.pid)/status", encoding: .utf8) else {
            throw .init("pcast serve is gone (no /proc/\(process.pid)/status): \(logTail())")
        }
        func field(_ name: String) -> Int {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }
                .flatMap { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first }.flatMap { Int($0) } ?? 0
        }
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process.pid)/fd").count) ?? 0
        return .init(rssKiB: field("VmRSS"), descriptors: descriptors, threads: field("Threads"))
    }

    /// One GET /healthz over a new TLS connection from 127.0.0.2: milliseconds to the status
    /// line, or nil unless it was 200 within 5 s.
    func health(context: TLSBenchClientContext) -> Double? {
        let started = monotonicNanoseconds()
        do {
            let connection = try TLSBenchConnection(context, port: port, source: "127.0.0.2", timeoutMilliseconds: 5_000)
            defer { connection.shutdown() }
            try connection.write(Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n".utf8))
            let status = try connection.read { input -> String? in
                guard let end = input.firstIndex(of: 10) else { return nil }
                return String(decoding: input[0..<end], as: UTF8.self)
            }
            guard status.hasPrefix("HTTP/1.1 200") else { return nil }
            return Double(monotonicNanoseconds() - started) / 1e6
        } catch {
            return nil
        }
    }

    /// A TCP port of 127.0.0.1 free a moment ago.
    static func freePort() throws(TLSListenerBenchmark.Failure) -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .init("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        _ = inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard named else { throw .init("no free TCP port: \(String(cString: strerror(errno)))") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// The idle WSS connections and the client threads that open and hold them. Each thread owns the
/// connections it opened (nothing else touches them); the counts are atomics.
final class IdleFleet: Sendable {
    let behaviour: TLSListenerBenchmark.IdleBehaviour
    let port: Int
    let context: TLSBenchClientContext
    /// The `authenticate` and `keep-alive` messages (SignalingCodec JSON).
    private let authenticate: [UInt8]
    private let keepAlive: [UInt8]
    /// Threads stop opening; then close what they hold and return.
    let stopOpening = Atomic<Bool>(false)
    let closing = Atomic<Bool>(false)
    let doneOpening = Atomic<Int>(0)
    /// Connections open now.
    let open = Atomic<Int>(0)
    private let connected = Atomic<Int>(0)
    private let refused = Atomic<Int>(0)
    private let failed = Atomic<Int>(0)
    private let closedByServer = Atomic<Int>(0)
    private let keepAlivesSent = Atomic<Int>(0)
    private let notes = Mutex<(firstFailure: String?, firstOpened: UInt64?, lastOpened: UInt64?, interval: UInt64?)>((nil, nil, nil, nil))

    struct Summary {
        var connected: Int
        var refused: Int
        var failed: Int
        var firstFailure: String?
        var closedByServer: Int
        var keepAlivesSent: Int
        var openSeconds: Double
        var firstOpened: UInt64?
        /// The keep-alive interval the server's `authenticate` answer named, seconds.
        var keepAliveInterval: Int?
    }

    /// One held connection: when its next keep-alive is due, and whether it is closed.
    private struct Held {
        let connection: TLSBenchConnection
        let interval: UInt64
        var nextKeepAlive: UInt64
        var closed = false
    }

    init(behaviour: TLSListenerBenchmark.IdleBehaviour, token: String, port: Int, context: TLSBenchClientContext) {
        self.behaviour = behaviour
        self.port = port
        self.context = context
        authenticate = (try? SignalingCodec.encode(Envelope(id: 1, ClientMessage.authenticate(.init(token: token))))).map { Array($0) } ?? []
        keepAlive = (try? SignalingCodec.encode(Envelope(id: 2, ClientMessage.keepAlive))).map { Array($0) } ?? []
    }

    func summary() -> Summary {
        let notes = self.notes.withLock { $0 }
        let openSeconds = notes.firstOpened.flatMap { first in notes.lastOpened.map { Double($0 &- first) / 1e9 } } ?? 0
        return Summary(connected: connected.load(ordering: .relaxed), refused: refused.load(ordering: .relaxed),
                       failed: failed.load(ordering: .relaxed), firstFailure: notes.firstFailure,
                       closedByServer: closedByServer.load(ordering: .relaxed), keepAlivesSent: keepAlivesSent.load(ordering: .relaxed),
                       openSeconds: openSeconds, firstOpened: notes.firstOpened,
                       keepAliveInterval: notes.interval.map { Int($0 / 1_000_000_000) })
    }

    /// A client thread's life: opens `count` connections one after another (tending those it
    /// holds every 250 ms meanwhile), holds them until `closing`, then closes them.
    func run(opening count: Int) {
        var held: [Held] = []
        held.reserveCapacity(count)
        var nextService = monotonicNanoseconds() + 250_000_000
        for _ in 0..<count {
            if stopOpening.load(ordering: .relaxed) || closing.load(ordering: .relaxed) { break }
            do throws(TLSBenchClientError) {
                held.append(try openOne())
                connected.add(1, ordering: .relaxed)
                open.add(1, ordering: .relaxed)
                let now = monotonicNanoseconds()
                let interval = held.last?.interval
                notes.withLock {
                    if $0.firstOpened == nil { $0.firstOpened = now }
                    if $0.interval == nil, let interval, interval > 0 { $0.interval = interval }
                    $0.lastOpened = max($0.lastOpened ?? 0, now)
                }
            } catch {
                if error.isRefusal {
                    refused.add(1, ordering: .relaxed)
                } else {
                    failed.add(1, ordering: .relaxed)
                }
                notes.withLock { if $0.firstFailure == nil { $0.firstFailure = "\(error)" } }
            }
            if monotonicNanoseconds() >= nextService {
                tend(&held)
                nextService = monotonicNanoseconds() + 250_000_000
            }
        }
        doneOpening.add(1, ordering: .relaxed)
        while !closing.load(ordering: .relaxed) {
            usleep(100_000)
            tend(&held)
        }
        for index in held.indices where !held[index].closed {
            held[index].connection.shutdown()
            open.subtract(1, ordering: .relaxed)
        }
    }

    /// TLS, the upgrade of /ws and, for an SDK session, authentication (its keep-alive interval
    /// from the answer).
    private func openOne() throws(TLSBenchClientError) -> Held {
        let connection = try TLSBenchConnection(context, port: port, source: "127.0.0.1")
        try connection.upgradeToWebSocket(path: "/ws", port: port)
        var interval: UInt64 = 0
        if behaviour == .sdkSession {
            try connection.sendFrame(opcode: 1, authenticate)
            interval = try awaitAuthenticated(connection)
        }
        connection.makeNonBlocking()
        return Held(connection: connection, interval: interval, nextKeepAlive: monotonicNanoseconds() + interval)
    }

    /// Reads the server's frames until its answer to `authenticate`: the keep-alive interval it asks for, nanoseconds.
    private func awaitAuthenticated(_ connection: TLSBenchConnection) throws(TLSBenchClientError) -> UInt64 {
        for _ in 0..<8 {
            let frame = try connection.readFrame()
            if frame.opcode == 8 { throw .failed("the server closed the WebSocket instead of answering authenticate") }
            guard frame.opcode == 1, let envelope = try? SignalingCodec.decodeServerMessage(Data(frame.payload)) else { continue }
            switch envelope.message {
            case .authenticated(let answer): return UInt64(max(1, answer.keepAliveInterval)) * 1_000_000_000
            case .failure(let failure): throw .failed("authenticate refused: \(failure.message)")
            default: continue
            }
        }
        throw .failed("no answer to authenticate")
    }

    /// Reads what each open connection received (a close frame, or the end of the connection,
    /// counts it closed by the server; a ping is answered), and sends the keep-alives due. One
    /// poll finds the connections with something to read (a read of each would cost a system
    /// call per connection and turn).
    private func tend(_ held: inout [Held]) {
        let now = monotonicNanoseconds()
        let indices = held.indices.filter { !held[$0].closed }
        var pollers = indices.map { pollfd(fd: held[$0].connection.descriptor, events: Int16(POLLIN), revents: 0) }
        let ready = pollers.withUnsafeMutableBufferPointer { poll($0.baseAddress, nfds_t($0.count), 0) }
        for (position, index) in indices.enumerated() {
            let connection = held[index].connection
            var alive = true
            var pings: [[UInt8]] = []
            if ready > 0 && pollers[position].revents != 0 {
                alive = connection.readAvailable()
                connection.takeInput { input in
                    while let frame = TLSBenchConnection.takeFrame(&input) {
                        if frame.opcode == 8 { alive = false }
                        if frame.opcode == 9 { pings.append(frame.payload) }
                    }
                }
            }
            do throws(TLSBenchClientError) {
                for payload in pings where alive { try connection.sendFrame(opcode: 10, payload) }
                if alive && behaviour == .sdkSession && now >= held[index].nextKeepAlive {
                    try connection.sendFrame(opcode: 1, keepAlive)
                    keepAlivesSent.add(1, ordering: .relaxed)
                    held[index].nextKeepAlive = now + held[index].interval
                }
            } catch {
                alive = false
            }
            if !alive {
                held[index].closed = true
                connection.shutdown()
                closedByServer.add(1, ordering: .relaxed)
                open.subtract(1, ordering: .relaxed)
            }
        }
    }
}
