// Runs external tools (gst-launch-1.0, gst-discoverer-1.0, ffprobe, python3) for the tests.
// A missing required tool is an error, so the test that needs it fails instead of skipping.

import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct ToolMissing: Error, CustomStringConvertible {
    let name: String
    var description: String { "required tool '\(name)' is not installed (not found on PATH)" }
}

struct ToolFailed: Error, CustomStringConvertible {
    let description: String
}

struct ToolResult {
    let status: Int32
    let stdout: String
    let stderr: String
    var output: String { stdout + stderr }
}

enum Tools {
    /// The full path of `name` on PATH (or `/usr/bin`), or nil.
    static func find(_ name: String) -> String? {
        if name.hasPrefix("/") { return FileManager.default.isExecutableFile(atPath: name) ? name : nil }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/bin", "/usr/local/bin", "/bin"]
        return directories.map { $0 + "/" + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    static func isInstalled(_ name: String) -> Bool { find(name) != nil }

    /// Runs a tool to completion with output captured in temporary files (no pipe deadlocks).
    static func run(_ name: String, _ arguments: [String], timeout: TimeInterval = 180) throws -> ToolResult {
        guard let executable = find(name) else { throw ToolMissing(name: name) }
        let directory = try Scratch.directory("tool")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let outPath = directory + "/stdout", errPath = directory + "/stderr"
        _ = FileManager.default.createFile(atPath: outPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle(forWritingAtPath: outPath)
        process.standardError = FileHandle(forWritingAtPath: errPath)
        try process.run()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning {
            if Date() > deadline {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                throw ToolFailed(description: "\(name) \(arguments.joined(separator: " ")) timed out after \(timeout) s")
            }
            usleep(10_000)
        }
        process.waitUntilExit()
        let out = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
        let err = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
        return ToolResult(status: process.terminationStatus, stdout: out, stderr: err)
    }

    /// Like `run`, but a non-zero exit status is an error carrying the output.
    static func check(_ name: String, _ arguments: [String], timeout: TimeInterval = 180) throws -> ToolResult {
        let result = try run(name, arguments, timeout: timeout)
        guard result.status == 0 else {
            throw ToolFailed(description: "\(name) \(arguments.joined(separator: " ")) exited \(result.status):\n"
                + String(result.output.suffix(3000)))
        }
        return result
    }

    /// A python3 that can import GStreamer's introspection bindings (python3-gi).
    static func pythonWithGStreamer() throws -> String {
        for candidate in ["/usr/bin/python3", "python3"] {
            guard let path = find(candidate) else { continue }
            let probe = try run(path, ["-c", "import gi; gi.require_version('Gst', '1.0'); from gi.repository import Gst"])
            if probe.status == 0 { return path }
        }
        throw ToolMissing(name: "python3 with python3-gi and gir1.2-gstreamer-1.0")
    }
}

/// Per-run scratch directories under the system temporary directory. Each run keeps its
/// files (for a look after a failure) and removes those of earlier runs that have ended.
enum Scratch {
    static let root: String = {
        let temporary = NSTemporaryDirectory()
        let prefix = "fmp4-tests-"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: temporary)) ?? []
        where name.hasPrefix(prefix) {
            guard let pid = Int32(name.dropFirst(prefix.count)), pid != getpid() else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH {
                try? FileManager.default.removeItem(atPath: temporary + name)
            }
        }
        return temporary + prefix + "\(getpid())"
    }()

    static func directory(_ label: String) throws -> String {
        let path = root + "/\(label)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }
}

/// The FMP4CrashWriter executable built next to the test binary.
enum CrashWriter {
    static func path() throws -> String {
        let own = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        var directory = URL(fileURLWithPath: own).deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("pcast-recording-crash-writer").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        throw ToolMissing(name: "pcast-recording-crash-writer (build the package first)")
    }
}
