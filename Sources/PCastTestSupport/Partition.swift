import Foundation

/// A network partition between two loopback addresses (two nodes bound to 127.0.0.x each):
/// nftables rules, in a table of their own, drop every packet between them both ways, until
/// ``heal()``. Nothing else on the machine is touched; the table is deleted when healed or when the
/// partition is released.
///
/// ```swift
/// let cut = try NetworkPartition.cut("127.0.0.2", "127.0.0.3")
/// // … the two nodes cannot reach each other …
/// try cut.heal()
/// ```
public final class NetworkPartition: @unchecked Sendable {
    public let a: String
    public let b: String
    private let table: String
    private let lock = NSLock()
    private var healed = false

    private init(a: String, b: String, table: String) {
        self.a = a
        self.b = b
        self.table = table
    }

    /// Cuts the link between `a` and `b` (IPv4 addresses). Needs `nft` (scripts/setup.sh installs
    /// nftables) and the right to change the packet filter (root).
    public static func cut(_ a: String, _ b: String) throws -> NetworkPartition {
        let table = "pcast_partition_\(UUID().uuidString.prefix(8).lowercased())"
        let partition = NetworkPartition(a: a, b: b, table: table)
        try nft(["add", "table", "ip", table])
        do {
            try nft(["add", "chain", "ip", table, "output", "{", "type", "filter", "hook", "output", "priority", "0", ";", "}"])
            try nft(["add", "rule", "ip", table, "output", "ip", "saddr", a, "ip", "daddr", b, "drop"])
            try nft(["add", "rule", "ip", table, "output", "ip", "saddr", b, "ip", "daddr", a, "drop"])
        } catch {
            try? nft(["delete", "table", "ip", table])
            throw error
        }
        return partition
    }

    /// Restores the link.
    public func heal() throws {
        let done = lock.withLock { () -> Bool in
            defer { healed = true }
            return healed
        }
        guard !done else { return }
        try Self.nft(["delete", "table", "ip", table])
    }

    deinit {
        if !healed { try? Self.nft(["delete", "table", "ip", table]) }
    }

    private static func nft(_ arguments: [String]) throws {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-nft-\(UUID().uuidString).out").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let process = try ChildProcess.spawn(try executable("nft"), arguments, environment: ProcessInfo.processInfo.environment,
                                             output: output, errorsToOutput: true)
        let status = process.wait()
        guard status == 0 else {
            let said = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            throw StandInFailure(description: "nft \(arguments.joined(separator: " ")) failed (\(status)): \(said) — the partition tests need nftables (scripts/setup.sh) and root")
        }
    }
}
