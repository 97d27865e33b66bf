import ArgumentParser
import Foundation
import PCastBenchmarks
import PCastMedia

/// `pcast-bench`: the performance figures, one subcommand per benchmark. Each writes `<name>.json`
/// and `<name>.md` (the markdown section it also prints) in the output directory; `pcast-bench all`
/// runs every one of them in turn (what `make bench` runs), `pcast-bench soak` the long soak.
/// The measuring code is in `PCastBenchmarks`; this executable parses arguments and writes results.
@main
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pcast-bench",
        abstract: "Run a PCastKit benchmark; each subcommand writes <name>.json and <name>.md.",
        discussion: """
        `pcast-bench` alone prints this help; `pcast-bench all` runs every benchmark in turn with its \
        default options (make bench runs it); `pcast-bench soak` is make soak's.
        """,
        subcommands: benchmarks.map { $0 as any ParsableCommand.Type } + [All.self, SoakCommand.self]
    )

    /// What `all` runs, in this order.
    static let benchmarks: [any BenchmarkCommand.Type] = [
        Probe.self, SRTPProtect.self, Hooks.self, CaptureEncode.self, Codecs.self, Latency.self, Rooms.self, Loss.self,
        Reconnect.self, Ingest.self, Fanout.self, Echo.self, Cycles.self, Connections.self, WebRTC.self,
        Plugin.self, Cluster.self, Simulcast.self, SVC.self, HLS.self, Transports.self, IceTCP.self, TLS.self,
    ]
}

/// The options every `pcast-bench` subcommand shares.
struct BenchOptions: ParsableArguments {
    @Option(help: "Directory for <name>.json and <name>.md.")
    var output = "bench-results"

    var directory: URL { URL(fileURLWithPath: output) }

    /// Writes `value` as `name`.json and `markdown` as `name`.md in the output directory, and
    /// prints the markdown.
    func write<Value: Encodable>(_ value: Value, markdown: String, as name: String) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        // A percentile of a run that saw nothing is NaN: written as a string, not a lost run.
        encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        try encoder.encode(value).write(to: directory.appendingPathComponent("\(name).json"))
        try Data(markdown.utf8).write(to: directory.appendingPathComponent("\(name).md"))
        print(markdown)
    }
}

/// One `pcast-bench` subcommand: a benchmark that writes `<name>.json` and `<name>.md`, `name`
/// being its command name.
protocol BenchmarkCommand: AsyncParsableCommand {
    var common: BenchOptions { get }
    /// Environment the benchmark needs from the start of the process (read once by the C library):
    /// `all` runs it in a child process with it when this process lacks it.
    static var environment: [String: String] { get }
    /// Runs the benchmark and writes its results (logging is set up already).
    func measure() async throws
}

extension BenchmarkCommand {
    static var environment: [String: String] { [:] }
    static var name: String { configuration.commandName ?? "\(Self.self)" }

    func run() async throws {
        SDKLog.bootstrapCommandLine()
        try await measure()
    }
}

extension BenchCommand {
    /// `pcast-bench all`: every benchmark in turn, in this process except those that need another
    /// environment (cycles: MALLOC_ARENA_MAX=2), which run as `pcast-bench <name>` in a child.
    struct All: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "all",
            abstract: "Run every benchmark in turn with its default options (cycles in a child process with MALLOC_ARENA_MAX=2).",
            discussion: "A benchmark that fails is reported and the rest still run; the exit status is then 1."
        )

        @OptionGroup var common: BenchOptions

        @Option(help: "Run only this benchmark (repeat for several); all of them without it.")
        var only: [String] = []

        func validate() throws {
            let names = Set(BenchCommand.benchmarks.map { $0.name })
            for name in only where !names.contains(name) {
                throw ValidationError("no benchmark \(name); there are \(names.sorted().joined(separator: ", "))")
            }
        }

        func run() async throws {
            SDKLog.bootstrapCommandLine()
            var failed: [String] = []
            for benchmark in BenchCommand.benchmarks where only.isEmpty || only.contains(benchmark.name) {
                let name = benchmark.name
                FileHandle.standardError.write(Data("pcast-bench \(name)\n".utf8))
                do {
                    let current = ProcessInfo.processInfo.environment
                    if benchmark.environment.allSatisfy({ current[$0.key] == $0.value }) {
                        try await benchmark.parse(["--output", common.output]).measure()
                    } else {
                        try await Self.runInChild(name, environment: benchmark.environment, output: common.output)
                    }
                } catch {
                    failed.append(name)
                    FileHandle.standardError.write(Data("pcast-bench \(name) failed: \(error)\n".utf8))
                }
            }
            if !failed.isEmpty {
                FileHandle.standardError.write(Data("failed: \(failed.joined(separator: ", "))\n".utf8))
                throw ExitCode.failure
            }
        }

        /// Runs `pcast-bench <name> --output <output>` with `environment` added to this process's.
        static func runInChild(_ name: String, environment: [String: String], output: String) async throws {
            let child = Process()
            child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            child.arguments = [name, "--output", output]
            child.environment = ProcessInfo.processInfo.environment.merging(environment) { _, added in added }
            let status = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Int32, any Error>) in
                child.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
                do { try child.run() } catch {
                    child.terminationHandler = nil
                    continuation.resume(throwing: error)
                }
            }
            guard status == 0 else { throw BenchFailure("pcast-bench \(name) exited with status \(status)") }
        }
    }
}

/// The machine the figures come from.
struct BenchMachine: Codable {
    let cores: Int
    let cpu: String

    static func current() -> BenchMachine {
        let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model = cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
            .map { String($0.split(separator: ":", maxSplits: 1).last ?? "").trimmingCharacters(in: .whitespaces) } ?? "unknown"
        return BenchMachine(cores: ProcessInfo.processInfo.activeProcessorCount, cpu: model)
    }
}
