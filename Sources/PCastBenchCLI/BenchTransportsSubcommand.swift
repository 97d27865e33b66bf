import ArgumentParser
import Foundation
import PCastBenchmarks

extension BenchCommand {
    /// `pcast-bench transports`: first frame in Chromium over UDP, ICE-TCP and TURN/TLS from behind
    /// NAT; glass to glass SDK → SDK over UDP and TCP with loss (``TransportsBenchmark``).
    struct Transports: BenchmarkCommand {
        static let configuration = CommandConfiguration(
            commandName: "transports",
            abstract: "Measure the ways through firewalls: Chromium's first frame over UDP, ICE-TCP and TURN/TLS; SDK glass to glass over UDP and TCP with loss.",
            discussion: "Needs root (network namespaces, nftables), Chromium and coturn, and port 443 free."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Fresh browsers per transport.")
        var runs = 5

        @Option(help: "Seconds of each glass-to-glass run.")
        var seconds: Double = 10

        @Option(help: "Loss each way on the path in the lossy glass-to-glass runs, percent.")
        var loss = 1

        func measure() async throws {
            let result = try await TransportsBenchmark(firstFrameRuns: runs, seconds: seconds, lossPercent: loss).run()
            let machine = BenchMachine.current()
            try common.write(result, markdown: TransportsBenchmark.markdown(result, machine: "\(machine.cores) cores, \(machine.cpu)"), as: Self.name)
        }
    }
}
