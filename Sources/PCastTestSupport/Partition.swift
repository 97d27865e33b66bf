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
/// Unchecked: `a`, `b` and `table` are immutable; `healed` is guarded by `lock`.
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
        try runTool("nft", arguments, needs: "the partition tests need nftables (scripts/setup.sh) and root")
    }
}

/// Runs a network tool; its output is in the error when it fails.
func runTool(_ tool: String, _ arguments: [String], needs: String) throws {
    let output = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-\(tool)-\(UUID().uuidString).out").path
    defer { try? FileManager.default.removeItem(atPath: output) }
    let process = try ChildProcess.spawn(try executable(tool), arguments, environment: ProcessInfo.processInfo.environment,
                                         output: output, errorsToOutput: true)
    let status = process.wait()
    guard status == 0 else {
        let said = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        throw StandInFailure(description: "\(tool) \(arguments.joined(separator: " ")) failed (\(status)): \(said) — \(needs)")
    }
}

/// Two network namespaces standing for two machines, one node of a cluster in each, linked to
/// each other and each to this namespace (where the database and the clients are):
///
///     this namespace  198.19.1.1 ── 198.19.1.2  [A]  198.19.3.1 ── 198.19.3.2  [B]  198.19.2.2 ── 198.19.2.1  this namespace
///
/// A node listens on its address on the A–B link (``nodeAddresses``), which is how the other
/// node reaches it; this namespace reaches each node through that node's own link (a host
/// route), so the test and its clients keep reaching both while the A–B link is cut
/// (``cut()``: A's end goes down; ``heal()``: up again). Each node reaches the database at its
/// host-side address (``databaseAddresses``). ``remove()`` (or release) deletes both namespaces,
/// and with them every link. One set at a time per machine: namespaces a crashed run left are
/// deleted first.
/// Unchecked: the names and addresses are immutable; `removed` is guarded by `lock`.
public final class NetworkNamespaces: @unchecked Sendable {
    public let names: [String]
    /// A's and B's addresses on the link between them.
    public let nodeAddresses = ["198.19.3.1", "198.19.3.2"]
    /// Where A and B reach this namespace (PostgreSQL listens there: ``TestPostgres/startPrivate(alsoListeningOn:)``).
    public let databaseAddresses = ["198.19.1.1", "198.19.2.1"]
    private let linkEnd: String
    private let lock = NSLock()
    private var removed = false

    private static let prefix = "pcast-ns-"
    private static let needs = "the namespace tests need iproute2 (scripts/setup.sh) and root"

    private init(names: [String], linkEnd: String) {
        self.names = names
        self.linkEnd = linkEnd
    }

    /// Creates the two namespaces and their links.
    public static func create() throws -> NetworkNamespaces {
        for stale in try listed() where stale.hasPrefix(prefix) { try? ip(["netns", "delete", stale]) }
        let id = String(UUID().uuidString.prefix(4).lowercased())
        let names = [prefix + id + "-a", prefix + id + "-b"]
        let made = NetworkNamespaces(names: names, linkEnd: "pc\(id)l0")
        do {
            for name in names {
                try ip(["netns", "add", name])
                try ip(["-n", name, "link", "set", "lo", "up"])
            }
            for (index, name) in names.enumerated() {
                let net = "198.19.\(index + 1)", host = "pc\(id)h\(index)", inside = "pc\(id)n\(index)"
                try ip(["link", "add", host, "type", "veth", "peer", "name", inside, "netns", name])
                try ip(["addr", "add", "\(net).1/24", "dev", host])
                try ip(["link", "set", host, "up"])
                try ip(["-n", name, "addr", "add", "\(net).2/24", "dev", inside])
                try ip(["-n", name, "link", "set", inside, "up"])
            }
            try ip(["-n", names[0], "link", "add", made.linkEnd, "type", "veth", "peer", "name", "pc\(id)l1", "netns", names[1]])
            try ip(["-n", names[0], "addr", "add", "198.19.3.1/24", "dev", made.linkEnd])
            try ip(["-n", names[1], "addr", "add", "198.19.3.2/24", "dev", "pc\(id)l1"])
            try ip(["-n", names[0], "link", "set", made.linkEnd, "up"])
            try ip(["-n", names[1], "link", "set", "pc\(id)l1", "up"])
            try ip(["route", "add", "198.19.3.1/32", "via", "198.19.1.2"])
            try ip(["route", "add", "198.19.3.2/32", "via", "198.19.2.2"])
        } catch {
            made.remove()
            throw error
        }
        return made
    }

    /// The command line that runs `executable` with `arguments` inside namespace `index` (0: A, 1: B).
    public func command(in index: Int, _ executable: URL, _ arguments: [String]) throws -> (URL, [String]) {
        (try NetworkNamespaces.executable, ["netns", "exec", names[index], executable.path] + arguments)
    }

    /// Cuts the link between A and B (A's end goes down: each node's packets to the other find no route).
    public func cut() throws { try Self.ip(["-n", names[0], "link", "set", linkEnd, "down"]) }

    /// Brings the link between A and B up again.
    public func heal() throws { try Self.ip(["-n", names[0], "link", "set", linkEnd, "up"]) }

    /// Deletes both namespaces (their links go with them, and this namespace's routes with those).
    public func remove() {
        let done = lock.withLock { () -> Bool in
            defer { removed = true }
            return removed
        }
        guard !done else { return }
        for name in names { try? Self.ip(["netns", "delete", name]) }
    }

    deinit { remove() }

    private static var executable: URL { get throws { try PCastTestSupport.executable("ip") } }

    private static func ip(_ arguments: [String]) throws { try runTool("ip", arguments, needs: needs) }

    /// The namespaces `ip netns list` names.
    static func listed() throws -> [String] {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-ip-\(UUID().uuidString).out").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let process = try ChildProcess.spawn(try executable, ["netns", "list"], environment: ProcessInfo.processInfo.environment, output: output)
        guard process.wait() == 0 else { throw StandInFailure(description: "ip netns list failed — \(needs)") }
        return ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { $0.split(separator: " ").first.map(String.init) }
    }
}

/// A table of this machine's nftables (IPv4 and IPv6) with rules in one output chain, deleted by
/// ``remove()`` or on release: what ``UDPFirewall`` and ``PathLoss`` are made of.
/// Unchecked: `table` is immutable; `removed` is guarded by `lock`.
public class OutputRules: @unchecked Sendable {
    private let table: String
    private let lock = NSLock()
    private var removed = false

    fileprivate init(prefix: String, rules: [[String]]) throws {
        table = "\(prefix)_\(UUID().uuidString.prefix(8).lowercased())"
        let needs = "the firewall and loss tests need nftables (scripts/setup.sh) and root"
        try runTool("nft", ["add", "table", "inet", table], needs: needs)
        do {
            try runTool("nft", ["add", "chain", "inet", table, "output", "{", "type", "filter", "hook", "output", "priority", "0", ";", "}"], needs: needs)
            for rule in rules { try runTool("nft", ["add", "rule", "inet", table, "output"] + rule, needs: needs) }
        } catch {
            remove()
            throw error
        }
    }

    public func remove() {
        let done = lock.withLock { () -> Bool in
            defer { removed = true }
            return removed
        }
        guard !done else { return }
        try? runTool("nft", ["delete", "table", "inet", table], needs: "")
    }

    deinit { remove() }
}

/// A firewall that drops UDP: every UDP packet to or from `port` on this machine is dropped
/// (nftables, a table of its own, IPv4 and IPv6), as on a network that lets only TCP through.
/// ``remove()`` (or release) deletes the table.
/// Unchecked: nothing of its own beyond ``OutputRules``.
public final class UDPFirewall: OutputRules, @unchecked Sendable {
    public static func dropping(port: UInt16) throws -> UDPFirewall {
        try UDPFirewall(prefix: "pcast_udpdrop", rules: [["udp", "dport", "\(port)", "drop"], ["udp", "sport", "\(port)", "drop"]])
    }
}

/// Random loss on a path: each packet of `transport` ("udp" or "tcp") to or from `port` on this
/// machine is dropped with probability `percent` / 100 (nftables `numgen random`), both ways.
/// There is no netem in this kernel, and unlike the impairment proxy (UDP only) this loses TCP
/// segments too, so what TCP's own retransmission costs can be measured against UDP with NACKs.
/// Unchecked: nothing of its own beyond ``OutputRules``.
public final class PathLoss: OutputRules, @unchecked Sendable {
    public static func losing(_ percent: Int, of transport: String, port: UInt16) throws -> PathLoss {
        guard transport == "udp" || transport == "tcp", (1...100).contains(percent) else {
            throw StandInFailure(description: "PathLoss takes udp or tcp and 1–100 %")
        }
        return try PathLoss(prefix: "pcast_loss", rules: ["dport", "sport"].map {
            [transport, $0, "\(port)", "numgen", "random", "mod", "100", "<", "\(percent)", "drop"]
        })
    }
}
