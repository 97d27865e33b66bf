import Foundation
import PCastMedia

/// Echo cancellation for `pcast-bench`: a private PulseAudio server with a null sink stands in for
/// speaker and microphone (its monitor hears what the sink plays), and ``EchoLoopMeasurement``
/// captures it with echo cancellation off and on. Writes `echo.json` and `echo.md` next to the
/// other results.
public enum EchoBenchmark {
    public static func run(output directory: URL) async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-bench-pulse-\(getpid())")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let socket = scratch.appendingPathComponent("pulse.sock").path
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/pulseaudio")
        server.arguments = ["-n", "--daemonize=no", "--exit-idle-time=-1", "--disable-shm=true",
                            "--load=module-native-protocol-unix auth-anonymous=1 socket=\(socket)",
                            "--load=module-null-sink sink_name=pcast_bench_null"]
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_RUNTIME_DIR"] = scratch.path
        environment["HOME"] = scratch.path
        server.environment = environment
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer {
            // SIGKILL: a child started from a thread of this process may have SIGTERM blocked.
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
        }
        for _ in 0..<100 where !FileManager.default.fileExists(atPath: socket) {
            try await Task.sleep(for: .milliseconds(50))
        }
        let previous = ProcessInfo.processInfo.environment["PULSE_SERVER"]
        setenv("PULSE_SERVER", "unix:\(socket)", 1)
        defer {
            if let previous { setenv("PULSE_SERVER", previous, 1) } else { unsetenv("PULSE_SERVER") }
        }
        let result = try await EchoLoopMeasurement(captureSource: "pulsesrc device=pcast_bench_null.monitor").run()
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(result).write(to: directory.appendingPathComponent("echo.json"))
        let markdown = """
            ## Echo cancellation (webrtcdsp, far end from a renderer in another pipeline; PulseAudio null-sink loop)

            | captured power, echo cancellation off | on | reduction |
            |---:|---:|---:|
            | \(String(format: "%.1f", result.echoOffDecibels)) dB | \(String(format: "%.1f", result.echoOnDecibels)) dB | \(String(format: "%.1f", result.reductionDecibels)) dB |

            """
        try Data(markdown.utf8).write(to: directory.appendingPathComponent("echo.md"))
        print(markdown)
    }
}
