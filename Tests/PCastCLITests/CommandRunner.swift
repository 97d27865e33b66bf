import Foundation
import Testing

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
