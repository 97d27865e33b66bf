import Foundation
import Testing
import PCastTestSupport

/// The output and exit status of one command.
struct CommandResult {
    let status: Int32
    let stdout: String
    let stderr: String
    var lines: [String] { stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) }
}

/// Runs a program to completion (with a time limit, so a hang fails the test instead of the run).
func runCommand(_ executable: URL, _ arguments: [String], stdin: String? = nil, timeout: TimeInterval = 60) throws -> CommandResult {
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    let out = Pipe(), err = Pipe(), input = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = input
    try process.run()
    if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
    try input.fileHandleForWriting.close()
    let deadline = Date().addingTimeInterval(timeout)
    // Read while waiting so a chatty process never blocks on a full pipe.
    let outData = LockedData(), errData = LockedData()
    let group = DispatchGroup()
    for (handle, sink) in [(out.fileHandleForReading, outData), (err.fileHandleForReading, errData)] {
        group.enter()
        DispatchQueue.global().async {
            sink.set(handle.readDataToEndOfFile())
            group.leave()
        }
    }
    while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
    if process.isRunning {
        // SIGKILL: a Foundation child inherits the spawning thread's signal mask, which may block SIGTERM.
        kill(process.processIdentifier, SIGKILL)
        Issue.record("\(executable.lastPathComponent) \(arguments.joined(separator: " ")) did not finish within \(timeout) s")
    }
    process.waitUntilExit()
    group.wait()
    return CommandResult(status: process.terminationStatus,
                         stdout: String(decoding: outData.value, as: UTF8.self),
                         stderr: String(decoding: errData.value, as: UTF8.self))
}

final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    func set(_ new: Data) { lock.lock(); data = new; lock.unlock() }
    var value: Data { lock.lock(); defer { lock.unlock() }; return data }
}

/// The `pcast` binary built beside the test bundle.
func pcastBinary() throws -> URL {
    let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    let candidates = [directory, directory.deletingLastPathComponent()].map { $0.appendingPathComponent("pcast") }
    guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0.path) }) else {
        throw CLITestFailure("pcast binary not found beside the tests (looked in \(candidates.map(\.path))); run `swift build --build-tests`")
    }
    return found
}

/// python3 from PATH; its absence fails the test (CI installs it with the oracle package).
func python3() throws -> URL {
    for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":") {
        let candidate = URL(fileURLWithPath: String(directory)).appendingPathComponent("python3")
        if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
    }
    throw CLITestFailure("python3 not found; scripts/setup.sh installs it and phenix-edge-auth")
}

struct CLITestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// `pcast serve` as a child process with a data directory of its own: the signaling URL it printed,
/// and tokens for its application.
struct ServeProcess {
    static let applicationId = "cli-app", secret = "cli-test-secret"
    let process: ChildProcess
    let directory: URL
    let signaling: String
    let log: String
    let environment: [String: String]

    /// Starts it with `extra` arguments after the defaults (inside namespace `index` of `namespaces` when given).
    static func start(_ extra: [String] = [], in namespaces: (NetworkNamespaces, index: Int)? = nil) async throws -> ServeProcess {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-serve-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let log = directory.appendingPathComponent("serve.out").path
        var environment = ProcessInfo.processInfo.environment
        environment["PCAST_SECRET"] = secret
        var command = (try pcastBinary(), [
            "serve", "--application-id", applicationId, "--http-port", "0", "--media-port", "0", "--rtmp-port", "0",
            "--data-dir", directory.appendingPathComponent("data").path] + extra)
        if let (namespaces, index) = namespaces { command = try namespaces.command(in: index, command.0, command.1) }
        let server = try ChildProcess.spawn(command.0, command.1, environment: environment, output: log, errorsToOutput: true)
        // "pcast serve: signaling ws://127.0.0.1:PORT/ws, media udp 127.0.0.1:PORT"
        var url: String?
        for _ in 0..<200 where url == nil {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            // Text lines, or (--log-format json) the same as a JSON string field.
            url = text.split(whereSeparator: { " \n\",".contains($0) }).first { $0.hasPrefix("ws://") || $0.hasPrefix("wss://") }.map(String.init)
            if url == nil { try await Task.sleep(for: .milliseconds(50)) }
            guard server.isRunning || url != nil else { break }
        }
        guard let url else {
            server.stop()
            throw CLITestFailure("pcast serve printed no signaling URL: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        }
        return ServeProcess(process: server, directory: directory, signaling: url, log: log, environment: environment)
    }

    /// `pcast publish` against this server with `token` and `auth`, then `extra` (size, tags,
    /// seconds…), its output in the file `publish.out` of the server's directory; waits (up to
    /// 10 s) for the stream id it prints first, empty when none came. The caller stops it.
    func publish(token: String, auth: String, _ extra: [String]) async throws -> (process: ChildProcess, output: String, streamId: String) {
        let output = directory.appendingPathComponent("publish.out").path
        let process = try ChildProcess.spawn(try pcastBinary(), ["publish", "--server", signaling, "--token", token, "--auth-token", auth] + extra,
                                             environment: environment, output: output)
        var streamId = ""
        for _ in 0..<200 where streamId.isEmpty {
            streamId = ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n").first.map(String.init) ?? ""
            if streamId.isEmpty { try await Task.sleep(for: .milliseconds(50)) }
        }
        return (process, output, streamId)
    }

    /// A token from `pcast token create` (`--type …` and the rest in `extra`).
    func token(_ extra: [String]) throws -> String {
        let result = try runCommand(try pcastBinary(), ["token", "create", "--application-id", Self.applicationId, "--secret", Self.secret,
                                                        "--expires-in", "600"] + extra)
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    var output: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

    /// `http://host:port` of its HTTP routes (`https://` when it serves TLS).
    var httpURL: String {
        let secure = signaling.hasPrefix("wss://")
        return (secure ? "https://" : "http://") + signaling.dropFirst(secure ? "wss://".count : "ws://".count).split(separator: "/").first.map(String.init)!
    }

    /// Its HTTP port.
    var httpPort: Int { Int(httpURL.split(separator: ":").last ?? "") ?? 0 }

    func stop() {
        process.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}
