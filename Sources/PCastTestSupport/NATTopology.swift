import Foundation

/// Hosts on other networks than the server's, made of network namespaces linked by veth pairs,
/// with addresses from 198.18.0.0/15 and fd00::/8 only:
///
///     this namespace (the server)                 router                         client (behind NAT)
///     198.18.40.1 / fd00:5043:40::1 ── 198.18.40.2 / fd00:5043:40::2 [NAT] 198.18.41.1 ── 198.18.41.2
///
///     this namespace ── fd00:5043:42::1 ─────────── fd00:5043:42::2  v6only (no IPv4 address at all)
///
/// The router masquerades the client's IPv4 traffic behind 198.18.40.2 (nftables, random outside
/// ports): the server never sees, and has no route to, 198.18.41.0/24. ``rebind()`` forgets the
/// router's mappings (conntrack), so the client's next packets leave from new ports: a NAT
/// rebinding. ``outsidePorts()`` says which ports the router uses now.
/// ``remove()`` (or release) deletes the namespaces and with them every link and rule.
/// Unchecked: the names are immutable after creation; `removed` is guarded by `lock`.
public final class NATTopology: @unchecked Sendable {
    public let router: String
    public let client: String
    public let v6only: String
    /// Where the server listens, as the client and the IPv6-only host reach it.
    public let serverIPv4 = "198.18.40.1"
    public let serverIPv6 = "fd00:5043:40::1"
    public let serverIPv6ForV6Only = "fd00:5043:42::1"
    /// The address the client's packets carry once masqueraded.
    public let routerOutside = "198.18.40.2"
    public let clientAddress = "198.18.41.2"
    private let lock = NSLock()
    private var removed = false

    private static let prefix = "pcast-nat-"
    private static let needs = "the NAT tests need iproute2, nftables and conntrack (scripts/setup.sh) and root"

    private init(id: String) {
        router = Self.prefix + id + "-router"
        client = Self.prefix + id + "-client"
        v6only = Self.prefix + id + "-v6"
    }

    /// Creates the namespaces, links, addresses, routes and the NAT rule.
    public static func create() throws -> NATTopology {
        for stale in try NetworkNamespaces.listed() where stale.hasPrefix(prefix) { try? ip(["netns", "delete", stale]) }
        let id = String(UUID().uuidString.prefix(4).lowercased())
        let made = NATTopology(id: id)
        do {
            for name in [made.router, made.client, made.v6only] {
                try ip(["netns", "add", name])
                try ip(["-n", name, "link", "set", "lo", "up"])
            }
            // Server ↔ router.
            let serverEnd = "pn\(id)s", routerOut = "pn\(id)o"
            try ip(["link", "add", serverEnd, "type", "veth", "peer", "name", routerOut, "netns", made.router])
            try ip(["addr", "add", "198.18.40.1/24", "dev", serverEnd])
            try ip(["-6", "addr", "add", "fd00:5043:40::1/64", "dev", serverEnd, "nodad"])
            try ip(["link", "set", serverEnd, "up"])
            try ip(["-n", made.router, "addr", "add", "198.18.40.2/24", "dev", routerOut])
            try ip(["-n", made.router, "-6", "addr", "add", "fd00:5043:40::2/64", "dev", routerOut, "nodad"])
            try ip(["-n", made.router, "link", "set", routerOut, "up"])
            // Router ↔ client.
            let routerIn = "pn\(id)i", clientEnd = "pn\(id)c"
            try ip(["-n", made.router, "link", "add", routerIn, "type", "veth", "peer", "name", clientEnd, "netns", made.client])
            try ip(["-n", made.router, "addr", "add", "198.18.41.1/24", "dev", routerIn])
            try ip(["-n", made.router, "link", "set", routerIn, "up"])
            try ip(["-n", made.client, "addr", "add", "198.18.41.2/24", "dev", clientEnd])
            try ip(["-n", made.client, "link", "set", clientEnd, "up"])
            try ip(["-n", made.client, "route", "add", "default", "via", "198.18.41.1"])
            try sysctl(in: made.router, "net.ipv4.ip_forward=1")
            try nft(in: made.router, """
                table ip nat {
                    chain postrouting {
                        type nat hook postrouting priority srcnat; policy accept;
                        ip saddr 198.18.41.0/24 oifname "\(routerOut)" masquerade random
                    }
                }
                """)
            // Server ↔ IPv6-only host.
            let serverV6 = "pn\(id)a", v6End = "pn\(id)b"
            try ip(["link", "add", serverV6, "type", "veth", "peer", "name", v6End, "netns", made.v6only])
            try ip(["-6", "addr", "add", "fd00:5043:42::1/64", "dev", serverV6, "nodad"])
            try ip(["link", "set", serverV6, "up"])
            try ip(["-n", made.v6only, "-6", "addr", "add", "fd00:5043:42::2/64", "dev", v6End, "nodad"])
            try ip(["-n", made.v6only, "link", "set", v6End, "up"])
        } catch {
            made.remove()
            throw error
        }
        return made
    }

    /// The command line that runs `executable` with `arguments` inside namespace `namespace`.
    public func command(in namespace: String, _ executable: URL, _ arguments: [String]) throws -> (URL, [String]) {
        (try PCastTestSupport.executable("ip"), ["netns", "exec", namespace, executable.path] + arguments)
    }

    /// The router forgets every mapping: the client's next packets get new outside ports.
    public func rebind() throws {
        try runTool("ip", ["netns", "exec", router, try PCastTestSupport.executable("conntrack").path, "-F"], needs: Self.needs)
    }

    /// The router drops every UDP packet to and from the client (a network that lets only TCP out).
    public func dropUDP() throws {
        try Self.nft(in: router, """
            table inet firewall {
                chain forward {
                    type filter hook forward priority filter; policy accept;
                    ip saddr 198.18.41.0/24 meta l4proto udp drop
                    ip daddr 198.18.41.0/24 meta l4proto udp drop
                }
            }
            """)
    }

    /// The router also drops the client's TCP to and from the server's `port` (the relay's ICE-TCP
    /// port: with ``dropUDP()``, a network where only a TURN server over TLS gets through).
    public func dropTCP(port: UInt16) throws {
        try Self.nft(in: router, """
            table inet tcpfirewall {
                chain forward {
                    type filter hook forward priority filter; policy accept;
                    ip saddr 198.18.41.0/24 tcp dport \(port) drop
                    ip daddr 198.18.41.0/24 tcp sport \(port) drop
                }
            }
            """)
    }

    /// The outside UDP ports the router maps the client's flows to now (conntrack's reply tuples).
    public func outsidePorts() throws -> Set<Int> {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-conntrack-\(UUID().uuidString).out").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let process = try ChildProcess.spawn(try PCastTestSupport.executable("ip"),
                                             ["netns", "exec", router, try PCastTestSupport.executable("conntrack").path, "-L", "-p", "udp"],
                                             environment: ProcessInfo.processInfo.environment, output: output)
        guard process.wait() == 0 else { throw StandInFailure(description: "conntrack -L failed — \(Self.needs)") }
        var ports: Set<Int> = []
        for line in ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n") where line.contains("src=\(clientAddress)") {
            // The reply tuple (second src=…) ends with the port the server sends back to.
            let fields = line.split(separator: " ")
            if let last = fields.last(where: { $0.hasPrefix("dport=") }), let port = Int(last.dropFirst("dport=".count)) { ports.insert(port) }
        }
        return ports
    }

    /// Deletes the namespaces (their links, addresses, routes and rules go with them).
    public func remove() {
        let done = lock.withLock { () -> Bool in
            defer { removed = true }
            return removed
        }
        guard !done else { return }
        for name in [router, client, v6only] { try? Self.ip(["netns", "delete", name]) }
    }

    deinit { remove() }

    private static func ip(_ arguments: [String]) throws { try runTool("ip", arguments, needs: needs) }

    private static func sysctl(in namespace: String, _ setting: String) throws {
        try runTool("ip", ["netns", "exec", namespace, try PCastTestSupport.executable("sysctl").path, "-qw", setting], needs: needs)
    }

    private static func nft(in namespace: String, _ ruleset: String) throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-nft-\(UUID().uuidString).nft").path
        try ruleset.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        try runTool("ip", ["netns", "exec", namespace, try PCastTestSupport.executable("nft").path, "-f", file], needs: needs)
    }
}
