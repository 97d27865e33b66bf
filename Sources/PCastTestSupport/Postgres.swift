import Foundation
import Synchronization

/// A real PostgreSQL server for this test process, started once by the project's own script
/// (`scripts/postgres.sh`: initdb into a temporary folder, a loopback port, run as the `postgres`
/// user when root) and stopped by that script's watcher when this process exits. Each test takes
/// a database of its own with ``newDatabase()``.
public final class TestPostgres: Sendable {
    public let port: Int
    public let directory: String

    private static let shared = Mutex<Result<TestPostgres, StandInFailure>?>(nil)

    /// The server of this process (started on first use); a missing PostgreSQL fails loudly.
    public static func server() throws -> TestPostgres {
        try shared.withLock { state in
            if let state { return try state.get() }
            let result = Result { () throws(StandInFailure) in try startPrivate() }
            state = result
            return try result.get()
        }
    }

    private init(port: Int, directory: String) {
        self.port = port
        self.directory = directory
    }

    /// A server of the caller's own (for a test that stops or restarts it), stopped when this
    /// process exits. `addresses`: where else it listens (besides 127.0.0.1), trusting clients of
    /// each one's /24 — the host ends of ``NetworkNamespaces`` links, for nodes in namespaces.
    public static func startPrivate(alsoListeningOn addresses: [String] = []) throws(StandInFailure) -> TestPostgres {
        // /tmp, not $TMPDIR: the server runs as the postgres user when root, and must reach it.
        let directory = "/tmp/pcast-postgres-\(UUID().uuidString)"
        var status = stat()
        guard stat("/dev/null", &status) == 0, (status.st_mode & S_IFMT) == S_IFCHR else {
            throw StandInFailure(description: "/dev/null is not a device any more (a program replaced it with a file): PostgreSQL's tools cannot run; recreate it with mknod -m 666 /dev/null c 1 3")
        }
        do {
            let port = try freeTCPPort()
            try runScript(["start", directory, String(port), String(getpid())] + addresses)
            return TestPostgres(port: port, directory: directory)
        } catch let failure as StandInFailure {
            throw failure
        } catch {
            throw StandInFailure(description: "PostgreSQL did not start: \(error)")
        }
    }

    /// `postgres://pcast@127.0.0.1:<port>/<database>`.
    public func url(database: String = "pcast") -> String { "postgres://pcast@127.0.0.1:\(port)/\(database)" }

    /// Creates an empty database and returns its URL (at `host`: one of the server's addresses).
    public func newDatabase(host: String = "127.0.0.1") throws -> String {
        let name = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        try sql("CREATE DATABASE \(name)")
        return "postgres://pcast@\(host):\(port)/\(name)"
    }

    /// Runs SQL with psql as the `pcast` superuser.
    public func sql(_ statement: String, database: String = "postgres") throws {
        let log = directory + "-psql-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let process = try ChildProcess.spawn(try executable("psql"),
                                             ["-h", "127.0.0.1", "-p", String(port), "-U", "pcast", "-d", database, "-v", "ON_ERROR_STOP=1",
                                              "-qAt", "-c", statement],
                                             environment: ProcessInfo.processInfo.environment, output: log, errorsToOutput: true)
        let status = process.wait()
        guard status == 0 else {
            throw StandInFailure(description: "psql \(statement): status \(status): \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        }
    }

    /// Stops the server (fast shutdown: sessions are cut) and starts it again on the same port, data kept.
    public func restart() throws {
        try Self.runScript(["restart", directory])
    }

    /// Stops the server without starting it again (``resume()`` brings it back, data kept).
    public func stop() throws {
        try Self.runScript(["pause", directory])
    }

    /// Starts a server ``stop()`` stopped.
    public func resume() throws {
        try Self.runScript(["resume", directory])
    }

    private static func runScript(_ arguments: [String]) throws {
        let script = repositoryRoot.appendingPathComponent("scripts/postgres.sh").path
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-postgres-\(UUID().uuidString).log").path
        defer { try? FileManager.default.removeItem(atPath: log) }
        let process = try ChildProcess.spawn(URL(fileURLWithPath: "/bin/bash"), [script] + arguments,
                                             environment: ProcessInfo.processInfo.environment, output: log, errorsToOutput: true)
        let status = process.wait()
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        if status == 3 { throw StandInFailure(description: "PostgreSQL is not installed (scripts/setup.sh installs it): \(output)") }
        guard status == 0 else { throw StandInFailure(description: "scripts/postgres.sh \(arguments.joined(separator: " ")): status \(status): \(output)") }
    }

    /// The repository this file is in (Sources/PCastTestSupport/…).
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
}
