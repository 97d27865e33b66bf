import ArgumentParser
import Foundation
import PCastBenchmarks

// The field benchmarks of `pcast-bench` (issue 40, "Into the field"): what viewers on networks
// that drop UDP cost the relay (ICE over TCP against UDP), and the HTTP listener over TLS
// (handshakes per core, memory of idle WSS connections).

extension BenchCommand {
    /// `pcast-bench ice-tcp`: relay CPU per WebRTC viewer over ICE-TCP against over UDP.
    struct IceTCP: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "ice-tcp",
            abstract: "Measure the relay's CPU per WebRTC viewer over ICE-TCP (RFC 4571 frames on its TCP port) against over UDP, at 1, 100 and 500 viewers.",
            discussion: "Each viewer passes a STUN check and a DTLS client handshake over its transport, then receives the 2.5 Mbps stream as SRTP; loss, latency and a sample of SRTP authentications are checked as in `pcast-bench fanout`."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "A viewer count (repeat for several).")
        var viewers: [Int] = [1, 100, 500]

        @Option(help: "Seconds measured per run (after the warm-up).")
        var duration: Double = 5

        func validate() throws {
            guard !viewers.isEmpty, viewers.allSatisfy({ (1...RelayFanoutBenchmark.maximumTCPViewers).contains($0) }) else {
                throw ValidationError("--viewers must be 1 to \(RelayFanoutBenchmark.maximumTCPViewers)")
            }
            guard duration > 0, duration <= 100 else { throw ValidationError("--duration must be above 0 and at most 100 s") }
        }

        /// One viewer count over one transport.
        struct Run: Codable {
            let viewers: Int
            let transport: ViewerTransport
            /// CPU of the relay per viewer, % of one core.
            let cpuPercentPerViewer: Double
            let result: RelayFanoutBenchmark.Result
        }

        /// ice-tcp.json.
        struct Report: Codable {
            let date: String
            let machine: BenchMachine
            let runs: [Run]
        }

        func measure() async throws {
            var runs: [Run] = []
            for count in viewers {
                for transport in ViewerTransport.allCases {
                    var configuration = RelayFanoutBenchmark.Configuration(subscribers: count, duration: duration)
                    configuration.webRTCViewers = true
                    configuration.viewerTransport = transport
                    configuration.includeReference = false
                    let result = try RelayFanoutBenchmark(configuration: configuration).run()
                    runs.append(Run(viewers: count, transport: transport, cpuPercentPerViewer: result.relay.cpuPercent / Double(count), result: result))
                }
            }
            let report = Report(date: benchDate(), machine: BenchMachine.current(), runs: runs)
            try common.write(report, markdown: Self.markdown(report), as: Self.name)
        }

        static func markdown(_ report: Report) -> String {
            let first = report.runs.first?.result
            var lines = [
                "## ICE over TCP against UDP: relay CPU per WebRTC viewer",
                "",
                "\(report.date), \(report.machine.cpu), \(report.machine.cores) cores. One 2.5 Mbps stream (1200-byte RTP packets, 30 frames/s) "
                    + "to N WebRTC viewers, \(first.map { String(format: "%.0f", $0.configuration.duration) } ?? "?") s measured per run; "
                    + "each viewer passes an ICE check and a DTLS-SRTP handshake over its transport first. "
                    + "TCP: each viewer one connection to the relay's TCP port, every packet an RFC 4571 frame (viewers come from "
                    + "127.0.0.1, 127.0.0.2, … 50 per address: the relay holds at most 64 TCP connections from one address). "
                    + "Relay CPU is all its threads' (\(first?.configuration.fanOutThreads ?? 1) sharing the fan-out), in % of one core; "
                    + "latency is from the publisher's send to the viewer's read (the receivers read every 2 ms); "
                    + "handshake CPU is the relay I/O thread's over the viewers' ICE + DTLS handshakes (over TCP with accepting the connections).",
                "",
                "| viewers | transport | relay CPU % | CPU per viewer (% of a core) | viewers per core | loss % | p50 / p99 latency ms | handshake CPU ms per viewer | SRTP checked / failed |",
                "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for run in report.runs {
                let relay = run.result.relay
                lines.append(String(format: "| %d | %@ | %.1f | %.3f | %.0f | %.2f | %.1f / %.1f | %@ | %d / %d |", run.viewers,
                                    run.transport.rawValue.uppercased(), relay.cpuPercent, run.cpuPercentPerViewer, relay.subscribersPerCore,
                                    relay.lossPercent, relay.latencyP50Milliseconds, relay.latencyP99Milliseconds,
                                    run.result.handshakes.map { String(format: "%.2f", $0.relayCPUMillisecondsPerViewer) } ?? "–",
                                    relay.packetsAuthenticated, relay.authenticationFailures))
            }
            var ratios: [String] = []
            for count in Set(report.runs.map(\.viewers)).sorted() {
                let udp = report.runs.first { $0.viewers == count && $0.transport == .udp }
                let tcp = report.runs.first { $0.viewers == count && $0.transport == .tcp }
                if let udp, let tcp, udp.cpuPercentPerViewer > 0 {
                    ratios.append(String(format: "%d: %.2f×", count, tcp.cpuPercentPerViewer / udp.cpuPercentPerViewer))
                }
            }
            if !ratios.isEmpty {
                lines += ["", "Relay CPU per viewer, TCP / UDP, by viewer count: " + ratios.joined(separator: ", ") + "."]
            }
            return lines.joined(separator: "\n") + "\n"
        }
    }

    /// `pcast-bench tls`: the HTTP listener over TLS: handshakes per core, memory of idle WSS connections.
    struct TLS: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "tls",
            abstract: "Measure pcast serve's HTTP listener over TLS: full handshakes per second and per server core-second, and the memory of 10,000 idle WSS connections.",
            discussion: """
            The server is a pcast serve child with a certificate from a throwaway CA (EC P-256) and its connection caps raised; \
            the clients are OpenSSL in this process. By default each idle connection authenticates after the upgrade and sends \
            a keep-alive every interval the server asks for, as an idle SDK session does; with --silent it sends nothing, and \
            the server closes it 30 s after its upgrade (unauthenticated), so the figures are taken before that.
            """
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Seconds of back-to-back full TLS handshakes.")
        var handshakeSeconds: Double = 10

        @Option(help: "Client threads making handshakes.")
        var handshakeThreads = 4

        @Option(help: "Idle WSS connections to open and hold.")
        var connections = 10_000

        @Option(help: "Client threads opening and holding them.")
        var openThreads = 8

        @Flag(help: "Idle connections send nothing after the upgrade (figures taken before the server's 30 s deadline to authenticate).")
        var silent = false

        func validate() throws {
            guard handshakeSeconds > 0, handshakeSeconds <= 300 else { throw ValidationError("--handshake-seconds must be above 0 and at most 300") }
            guard (1...64).contains(handshakeThreads), (1...64).contains(openThreads) else { throw ValidationError("threads must be 1 to 64") }
            guard (1...100_000).contains(connections) else { throw ValidationError("--connections must be 1 to 100,000") }
        }

        /// tls.json.
        struct Report: Codable {
            let date: String
            let machine: BenchMachine
            let result: TLSListenerBenchmark.Result
        }

        func measure() async throws {
            var configuration = TLSListenerBenchmark.Configuration(executable: try PCastExecutable.beside().path)
            configuration.handshakeSeconds = handshakeSeconds
            configuration.handshakeThreads = handshakeThreads
            configuration.idleConnections = connections
            configuration.openThreads = openThreads
            configuration.idleBehaviour = silent ? .silent : .sdkSession
            let result = try TLSListenerBenchmark(configuration: configuration).run()
            let report = Report(date: benchDate(), machine: BenchMachine.current(), result: result)
            try common.write(report, markdown: Self.markdown(report), as: Self.name)
        }

        static func markdown(_ report: Report) -> String {
            let handshakes = report.result.handshakes, idle = report.result.idle
            func megabytes(_ kib: Int) -> String { String(format: "%.1f", Double(kib) / 1024) }
            func row(_ name: String, _ footprint: TLSListenerBenchmark.Footprint) -> String {
                "| \(name) | \(megabytes(footprint.rssKiB)) | \(footprint.descriptors) | \(footprint.threads) |"
            }
            let behaviour = switch idle.behaviour {
            case .sdkSession:
                "Each connection authenticated right after its upgrade (an auth token), then sent a keep-alive every "
                    + "\(idle.keepAliveIntervalSeconds.map { "\($0) s" } ?? "interval") (what the server's answer asked for) as an idle SDK session does "
                    + "(\(idle.keepAlivesSent) keep-alives in all); the server closes a WebSocket not authenticated 30 s after its upgrade, "
                    + "and a session silent for 3 keep-alive intervals"
            case .silent:
                "Each connection sent nothing after its upgrade; the server closes such a WebSocket 30 s after its upgrade (not authenticated in time), "
                    + String(format: "so the figures were taken %.1f s after the first connection opened", idle.secondsFromFirstOpenToMeasurement)
            }
            let health = idle.healthDuringHold
            return [
                "## The HTTP listener over TLS (`pcast serve`, certificate EC P-256 from a throwaway CA)",
                "",
                "\(report.date), \(report.machine.cpu), \(report.machine.cores) cores. Clients: OpenSSL 3 in the benchmark's process on the same machine.",
                "Server options: `\(report.result.serverOptions.joined(separator: " "))` with `--tls-certificate`, `--tls-key`; "
                    + "its descriptor limit \(report.result.serverDescriptorLimit) (this process raised its own to the hard limit, the child inherits it).",
                "",
                "### Full TLS handshakes (a new session each, no resumption)",
                "",
                "| measure | figure |",
                "|---|---:|",
                "| negotiated | \(handshakes.tlsVersion), \(handshakes.cipher), \(handshakes.keyExchangeGroup) |",
                String(format: "| handshakes in %.1f s (%d client threads) | %d (refused %d, failed %d) |", handshakes.seconds, handshakes.clientThreads,
                       handshakes.completed, handshakes.refused, handshakes.failed),
                String(format: "| handshakes per second | %.0f |", handshakes.perSecond),
                String(format: "| server CPU | %.2f s (%.0f %% of one core) |", handshakes.serverCPUSeconds, handshakes.serverCPUPercent),
                String(format: "| **handshakes per server core-second** | **%.0f** |", handshakes.perServerCoreSecond),
                String(format: "| client CPU (this process, no certificate check) | %.2f s |", handshakes.clientCPUSeconds),
                "",
                "### \(idle.requested) idle WSS connections (TLS, WebSocket upgrade of `/ws`)",
                "",
                "\(behaviour).",
                "",
                String(format: "Connected %d, refused %d, failed %d%@; opened in %.1f s; open when measured: %d; closed by the server while held: %d.",
                       idle.connected, idle.refused, idle.failed, idle.firstFailure.map { " (first: \($0))" } ?? "", idle.openSeconds,
                       idle.openAtMeasurement, idle.closedByServer),
                "",
                "| server | RSS MB | descriptors | threads |",
                "|---|---:|---:|---:|",
                row("before", idle.before),
                row("with the connections open", idle.with),
                row(String(format: "%.0f s after they closed", idle.afterSeconds), idle.after),
                "",
                "(\"after\" is taken once the server's descriptors are back; RSS its allocator keeps for reuse is not given back to the system.)",
                "",
                String(format: "**%.1f KiB of server RSS per idle connection** ((with − before) / %d).", idle.kibPerConnection, idle.openAtMeasurement),
                idle.behaviour == .silent && idle.secondsFromFirstOpenToMeasurement >= 30
                    ? "Opening took longer than the server's 30 s deadline to authenticate: the first connections were closed before the figures were taken (see the counts above)."
                    : "",
                String(format: "`/healthz` over TLS from another address while they were held: %d of %d answered, p50 %.1f ms, max %.1f ms.",
                       health.requests - health.failures, health.requests, health.p50Milliseconds, health.maximumMilliseconds),
                String(format: "Server CPU while they were held (%.1f s): %.1f %% of one core.", idle.holdSeconds, idle.serverCPUPercentDuringHold),
                "",
            ].joined(separator: "\n")
        }
    }
}

/// The date (UTC) a report is written, ISO 8601.
func benchDate() -> String {
    let formatter = ISO8601DateFormatter()
    formatter.timeZone = TimeZone(identifier: "UTC")
    return formatter.string(from: Date())
}
