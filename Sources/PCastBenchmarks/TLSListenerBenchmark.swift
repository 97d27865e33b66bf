import Foundation
import Glibc
import PCastProtocol
import PCastRelay
import PCastTestSupport
import Synchronization

/// The platform's HTTP listener over TLS, in a `pcast serve` child given a certificate from a
/// throwaway authority (``TestCertificates``, EC P-256) and connection caps raised past the run:
///
/// 1. **Handshakes per core**: a few client threads make full TLS handshakes (a new session each,
///    no resumption) as fast as they can for a while; the server's CPU over that window (utime +
///    stime of its `/proc/<pid>/stat`) gives handshakes per second and per second of server CPU.
/// 2. **Idle WSS connections**: N TLS connections that complete the WebSocket upgrade of the
///    signaling path `/ws` and are then held (see ``IdleBehaviour``); the server's RSS,
///    descriptors and threads before, with them open and after they close, whether `/healthz`
///    answers meanwhile, and the server's CPU while they are held.
///
/// Each part runs against a fresh server, so the idle figures start from a server that has not
/// been through a burst of handshakes. The client is OpenSSL 3 with blocking sockets and
/// timeouts (``TLSBenchConnection``), in this process, on the same machine: the handshake rate is
/// what client and server reach together; handshakes per server core-second is the server's own cost.
///
/// ```swift
/// let result = try TLSListenerBenchmark(configuration: .init(executable: "/usr/local/bin/pcast")).run()
/// print(result.handshakes.perServerCoreSecond, result.idle.kibPerConnection)
/// ```
public struct TLSListenerBenchmark: Sendable {
    /// What an idle connection does after its WebSocket upgrade.
    public enum IdleBehaviour: String, Sendable, Hashable, Codable {
        /// Nothing at all. The signaling server closes a connection that has not authenticated
        /// within 3 keep-alive intervals of its upgrade (30 s by default; `SessionStateMachine`,
        /// `PlatformConfiguration.keepAliveTimeoutMultiplier`), so the figures must be taken within that.
        case silent
        /// What an idle SDK session does: authenticates (an auth token) right after the upgrade,
        /// then sends a keep-alive every interval the server's `authenticated` answer names (10 s
        /// by default; the server closes a session silent for 3 of them). Held this way the
        /// connections stay open however long opening them takes.
        case sdkSession
    }

    public struct Configuration: Sendable, Hashable, Codable {
        /// The `pcast` executable whose `serve` is measured.
        public var executable: String
        /// Seconds of back-to-back handshakes.
        public var handshakeSeconds: Double = 10
        /// Client threads making them.
        public var handshakeThreads: Int = 4
        /// Idle WSS connections to open and hold.
        public var idleConnections: Int = 10_000
        /// Client threads opening them (then keeping them).
        public var openThreads: Int = 8
        public var idleBehaviour: IdleBehaviour = .sdkSession
        /// Seconds the server's CPU is measured while every idle connection is held.
        public var holdSeconds: Double = 5

        public init(executable: String) {
            self.executable = executable
        }
    }

    /// A process's footprint, from `/proc/<pid>`.
    public struct Footprint: Sendable, Hashable, Codable {
        public var rssKiB: Int
        public var descriptors: Int
        public var threads: Int
    }

    public struct Handshakes: Sendable, Hashable, Codable {
        /// What the client and server settled on (checked against the authority on a first
        /// connection): e.g. TLSv1.3, TLS_AES_128_GCM_SHA256, X25519.
        public var tlsVersion: String
        public var cipher: String
        public var keyExchangeGroup: String
        public var clientThreads: Int
        public var seconds: Double
        public var completed: Int
        public var refused: Int
        public var failed: Int
        public var perSecond: Double
        /// Server CPU (user + system, clock-tick resolution) over the window.
        public var serverCPUSeconds: Double
        public var serverCPUPercent: Double
        /// `completed / serverCPUSeconds`: what one core of the server would do.
        public var perServerCoreSecond: Double
        /// This process's CPU over the window (the clients, no certificate check), for comparison.
        public var clientCPUSeconds: Double
    }

    public struct Health: Sendable, Hashable, Codable {
        public var requests: Int
        public var failures: Int
        public var p50Milliseconds: Double
        public var maximumMilliseconds: Double
    }

    public struct Idle: Sendable, Hashable, Codable {
        public var behaviour: IdleBehaviour
        public var requested: Int
        /// Connections that completed TLS, the upgrade (and with ``IdleBehaviour/sdkSession`` authentication).
        public var connected: Int
        /// Connections the server did not take (closed before the TLS handshake completed).
        public var refused: Int
        public var failed: Int
        /// The first failure's text, if any.
        public var firstFailure: String?
        /// From the first connection to the last one open.
        public var openSeconds: Double
        /// Connections open when the "with" figures were taken, and how long after the first was opened.
        public var openAtMeasurement: Int
        public var secondsFromFirstOpenToMeasurement: Double
        /// Connections the server closed while they were held (until they were closed by the client).
        public var closedByServer: Int
        /// The keep-alive interval the server asked SDK sessions for, seconds (nil when silent).
        public var keepAliveIntervalSeconds: Int?
        public var keepAlivesSent: Int
        public var before: Footprint
        public var with: Footprint
        public var after: Footprint
        /// Seconds from closing the connections to the "after" figures (once the server's
        /// descriptors were back, or 20 s).
        public var afterSeconds: Double
        /// `(with.rssKiB − before.rssKiB) / openAtMeasurement`.
        public var kibPerConnection: Double
        /// `/healthz` over TLS from another address while the connections were held.
        public var healthDuringHold: Health
        /// Server CPU while the connections were held (keep-alives answered, the platform's ticks), % of one core.
        public var serverCPUPercentDuringHold: Double
        public var holdSeconds: Double
    }

    public struct Result: Sendable, Hashable, Codable {
        public var configuration: Configuration
        /// The `pcast serve` options (paths left out).
        public var serverOptions: [String]
        /// The server's limit on open descriptors.
        public var serverDescriptorLimit: Int
        public var handshakes: Handshakes
        public var idle: Idle
    }

    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    public let configuration: Configuration

    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// The signaling secret and application id the child serves with (auth tokens are signed with them).
    static let applicationId = "bench"
    static let secret = "bench-secret"

    public func run() throws(Failure) -> Result {
        let c = configuration
        guard c.handshakeSeconds > 0, c.handshakeThreads >= 1, c.handshakeThreads <= 64, c.idleConnections >= 1, c.openThreads >= 1,
              c.openThreads <= 64, c.holdSeconds > 0
        else { throw Failure("seconds, threads (at most 64) and connections must be positive") }
        guard FileManager.default.isExecutableFile(atPath: c.executable) else { throw Failure("\(c.executable) is not an executable") }
        // Each held connection is a descriptor here and one in the server (a child inherits this limit).
        let limit = Self.raiseDescriptorLimit()
        guard limit >= c.idleConnections + 512 else {
            throw Failure("the descriptor limit is \(limit) (hard): \(c.idleConnections) connections need \(c.idleConnections + 512)")
        }
        let certificates: TestCertificates
        do { certificates = try TestCertificates.make() } catch { throw Failure("cannot make the certificates: \(error)") }
        defer { certificates.remove() }
        let verifying: TLSBenchClientContext
        let plain: TLSBenchClientContext
        do {
            verifying = try TLSBenchClientContext(authority: certificates.authority)
            plain = try TLSBenchClientContext(authority: nil)
        } catch {
            throw Failure("\(error)")
        }
        let caps = c.idleConnections + 1_000
        let options = ["--max-connections", String(caps), "--max-connections-per-address", String(caps)]

        let idle: Idle
        let serverLimit: Int
        do {
            let server = try TLSBenchServer.start(executable: c.executable, certificate: certificates.leaf, options: options, check: verifying)
            defer { server.stop() }
            serverLimit = server.descriptorLimit() ?? 0
            guard serverLimit >= c.idleConnections + 256 else {
                throw Failure("pcast serve may open \(serverLimit) descriptors: \(c.idleConnections) connections need \(c.idleConnections + 256)")
            }
            idle = try measureIdle(server, context: verifying)
        }
        let handshakes: Handshakes
        do {
            let server = try TLSBenchServer.start(executable: c.executable, certificate: certificates.leaf, options: options, check: verifying)
            defer { server.stop() }
            handshakes = try measureHandshakes(server, checked: verifying, plain: plain)
        }
        return Result(configuration: c, serverOptions: TLSBenchServer.options(port: nil) + options, serverDescriptorLimit: serverLimit,
                      handshakes: handshakes, idle: idle)
    }

    // MARK: Handshakes

    private func measureHandshakes(_ server: TLSBenchServer, checked: TLSBenchClientContext, plain: TLSBenchClientContext) throws(Failure) -> Handshakes {
        let c = configuration
        let negotiated: (version: String, cipher: String, group: String)
        do {
            let probe = try TLSBenchConnection(checked, port: server.port, source: "127.0.0.2")
            negotiated = probe.negotiated
            probe.shutdown()
        } catch {
            throw Failure("a verified TLS connection to the server failed: \(error)")
        }
        let tally = HandshakeTally()
        let port = server.port
        let cpuBefore = server.cpuNanoseconds()
        let clientBefore = cpuNanoseconds(CLOCK_PROCESS_CPUTIME_ID)
        let started = monotonicNanoseconds()
        var threads: [pthread_t] = []
        for index in 0..<c.handshakeThreads {
            // Each thread from an address of its own: a TCP port of each stays in TIME_WAIT a while.
            let source = "127.0.0.\(10 + index)"
            guard let thread = startThread({
                while !tally.stop.load(ordering: .relaxed) {
                    do throws(TLSBenchClientError) {
                        let connection = try TLSBenchConnection(plain, port: port, source: source, timeoutMilliseconds: 5_000)
                        connection.shutdown()
                        tally.completed.add(1, ordering: .relaxed)
                    } catch {
                        if error.isRefusal {
                            tally.refused.add(1, ordering: .relaxed)
                        } else {
                            tally.failed.add(1, ordering: .relaxed)
                        }
                        tally.note(error)
                    }
                }
            }) else {
                tally.stop.store(true, ordering: .relaxed)
                threads.forEach { pthread_join($0, nil) }
                throw Failure("cannot start a client thread")
            }
            threads.append(thread)
        }
        usleep(UInt32(c.handshakeSeconds * 1e6))
        let completed = tally.completed.load(ordering: .relaxed)
        let ended = monotonicNanoseconds()
        let cpuAfter = server.cpuNanoseconds()
        let clientAfter = cpuNanoseconds(CLOCK_PROCESS_CPUTIME_ID)
        tally.stop.store(true, ordering: .relaxed)
        for thread in threads { pthread_join(thread, nil) }
        let seconds = Double(ended - started) / 1e9
        let serverSeconds = Double(cpuAfter &- cpuBefore) / 1e9
        guard completed > 0 else { throw Failure("no handshake completed: \(tally.firstFailure ?? "no error noted")") }
        return Handshakes(tlsVersion: negotiated.version, cipher: negotiated.cipher, keyExchangeGroup: negotiated.group,
                          clientThreads: c.handshakeThreads, seconds: seconds, completed: completed,
                          refused: tally.refused.load(ordering: .relaxed), failed: tally.failed.load(ordering: .relaxed),
                          perSecond: Double(completed) / seconds, serverCPUSeconds: serverSeconds, serverCPUPercent: serverSeconds / seconds * 100,
                          perServerCoreSecond: serverSeconds > 0 ? Double(completed) / serverSeconds : 0,
                          clientCPUSeconds: Double(clientAfter &- clientBefore) / 1e9)
    }

    // MARK: Idle connections

    private func measureIdle(_ server: TLSBenchServer, context: TLSBenchClientContext) throws(Failure) -> Idle {
        let c = configuration
        let token: String
        do {
            token = try DigestTokenBuilder().expiresIn(seconds: 24 * 3600).forAuthenticateOnly()
                .encode(applicationId: Self.applicationId, secret: Self.secret)
        } catch {
            throw Failure("cannot make an auth token: \(error)")
        }
        // The server as it stands after answering a few requests (its TLS and HTTP paths warm).
        _ = health(server, context: context, requests: 5)
        usleep(500_000)
        let before = try server.footprint()
        let fleet = IdleFleet(behaviour: c.idleBehaviour, token: token, port: server.port, context: context)
        var threads: [pthread_t] = []
        // Whatever ends this early (the server gone, a thread that would not start), the client
        // threads close their connections and are joined.
        defer {
            fleet.closing.store(true, ordering: .relaxed)
            for thread in threads { pthread_join(thread, nil) }
        }
        for index in 0..<c.openThreads {
            let share = c.idleConnections / c.openThreads + (index < c.idleConnections % c.openThreads ? 1 : 0)
            guard let thread = startThread({ fleet.run(opening: share) }) else { throw Failure("cannot start a client thread") }
            threads.append(thread)
        }
        // Opening is bounded (each step times out after 10 s); past this the run goes on with
        // what is open.
        let openDeadline = monotonicNanoseconds() + UInt64(max(120, Double(c.idleConnections) / 20)) * 1_000_000_000
        let openers = threads.count
        while fleet.doneOpening.load(ordering: .relaxed) < openers && monotonicNanoseconds() < openDeadline {
            usleep(100_000)
        }
        fleet.stopOpening.store(true, ordering: .relaxed)
        // A silent connection's time to authenticate runs from its upgrade: measured at once.
        // An SDK session's is refreshed by its keep-alives: the server first settles.
        if c.idleBehaviour == .sdkSession { usleep(2_000_000) }
        let measuredAt = monotonicNanoseconds()
        let openAtMeasurement = fleet.open.load(ordering: .relaxed)
        let with = try server.footprint()
        let cpuBefore = server.cpuNanoseconds()
        let holdStarted = monotonicNanoseconds()
        let healthDuring = health(server, context: context, requests: 20)
        let remaining = Double(holdStarted + UInt64(c.holdSeconds * 1e9)) - Double(monotonicNanoseconds())
        if remaining > 0 { usleep(UInt32(remaining / 1_000)) }
        let holdSeconds = Double(monotonicNanoseconds() - holdStarted) / 1e9
        let cpuDuring = Double(server.cpuNanoseconds() &- cpuBefore) / 1e9
        fleet.closing.store(true, ordering: .relaxed)
        for thread in threads { pthread_join(thread, nil) }
        threads = []
        let closedAt = monotonicNanoseconds()
        var after = try server.footprint()
        while after.descriptors > before.descriptors + 16 && monotonicNanoseconds() < closedAt + 20_000_000_000 {
            usleep(250_000)
            after = try server.footprint()
        }
        // Memory the connections freed comes back to the allocator a moment after their descriptors close.
        usleep(1_000_000)
        after = try server.footprint()
        let summary = fleet.summary()
        return Idle(behaviour: c.idleBehaviour, requested: c.idleConnections, connected: summary.connected, refused: summary.refused,
                    failed: summary.failed, firstFailure: summary.firstFailure, openSeconds: summary.openSeconds,
                    openAtMeasurement: openAtMeasurement,
                    secondsFromFirstOpenToMeasurement: summary.firstOpened.map { Double(measuredAt &- $0) / 1e9 } ?? 0,
                    closedByServer: summary.closedByServer, keepAliveIntervalSeconds: summary.keepAliveInterval,
                    keepAlivesSent: summary.keepAlivesSent,
                    before: before, with: with, after: after, afterSeconds: Double(monotonicNanoseconds() - closedAt) / 1e9,
                    kibPerConnection: openAtMeasurement > 0 ? Double(with.rssKiB - before.rssKiB) / Double(openAtMeasurement) : 0,
                    healthDuringHold: healthDuring, serverCPUPercentDuringHold: holdSeconds > 0 ? cpuDuring / holdSeconds * 100 : 0,
                    holdSeconds: holdSeconds)
    }

    /// `requests` GET /healthz over TLS (a connection each) from 127.0.0.2.
    private func health(_ server: TLSBenchServer, context: TLSBenchClientContext, requests: Int) -> Health {
        var times: [Double] = []
        for _ in 0..<requests {
            if let milliseconds = server.health(context: context) { times.append(milliseconds) }
        }
        times.sort()
        return Health(requests: requests, failures: requests - times.count, p50Milliseconds: times.isEmpty ? 0 : times[times.count / 2],
                      maximumMilliseconds: times.last ?? 0)
    }

    /// Raises this process's descriptor limit to its hard limit; returns the limit now in force.
    static func raiseDescriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
            _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        return Int(clamping: limit.rlim_cur)
    }
}

/// The handshake threads' counts.
private final class HandshakeTally: Sendable {
    let stop = Atomic<Bool>(false)
    let completed = Atomic<Int>(0)
    let refused = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    private let first = Mutex<String?>(nil)

    func note(_ error: TLSBenchClientError) {
        first.withLock { if $0 == nil { $0 = "\(error)" } }
    }

    var firstFailure: String? { first.withLock { $0 } }
}
