import Foundation

/// A private certificate authority made with the openssl command at test time, and certificates it
/// signs, in a folder of their own (removed by ``remove()``): what a deployment with its own CA
/// has, and the bad certificates an attacker or a careless operator brings.
///
/// - ``authority``: the CA (`ca.pem`), what a client is given with `--ca-file`.
/// - ``leaf``: valid for `localhost`, `127.0.0.1` and `::1`, for a day.
/// - ``expired``: the same names, valid for January 2020 only.
/// - ``otherName``: valid, for `elsewhere.example` only.
/// - ``untrusted``: valid for the same names, signed by another CA nobody is given.
/// - ``renewed``: another valid leaf (a new key), as after a renewal.
public struct TestCertificates: Sendable {
    /// A certificate chain file and its key file.
    public struct Pair: Sendable, Hashable {
        public let certificate: String
        public let key: String

        public init(certificate: String, key: String) {
            self.certificate = certificate
            self.key = key
        }
    }

    public let directory: String
    public var authority: String { directory + "/ca.pem" }
    public var leaf: Pair { pair("leaf") }
    public var expired: Pair { pair("expired") }
    public var otherName: Pair { pair("other-name") }
    public var untrusted: Pair { pair("untrusted") }
    public var renewed: Pair { pair("renewed") }

    private func pair(_ name: String) -> Pair { Pair(certificate: "\(directory)/\(name).pem", key: "\(directory)/\(name).key") }

    /// Makes the authority and every certificate (EC P-256, a fraction of a second each).
    public static func make() throws -> TestCertificates {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-tls-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory + "/issued", withIntermediateDirectories: true)
        let made = TestCertificates(directory: directory)
        try made.write("index.txt", "")
        try made.write("serial", "1000\n")
        // Loopback, and the server's addresses in ``NATTopology`` (by address and as pcast.test).
        let names = "DNS:localhost,IP:127.0.0.1,IP:0:0:0:0:0:0:0:1,DNS:pcast.test,IP:198.18.40.1,IP:fd00:5043:40:0:0:0:0:1"
        try made.write("ca.cnf", """
            [ca]
            default_ca = test
            [test]
            database = \(directory)/index.txt
            new_certs_dir = \(directory)/issued
            serial = \(directory)/serial
            default_md = sha256
            policy = any
            unique_subject = no
            [any]
            commonName = supplied
            [local]
            subjectAltName = \(names)
            basicConstraints = CA:FALSE
            [elsewhere]
            subjectAltName = DNS:elsewhere.example
            basicConstraints = CA:FALSE

            """)
        try made.authority(named: "ca")
        try made.authority(named: "other-ca")
        try made.issue("leaf", by: "ca", extensions: "local", days: "-days 1")
        try made.issue("renewed", by: "ca", extensions: "local", days: "-days 1")
        try made.issue("expired", by: "ca", extensions: "local", days: "-startdate 20200101000000Z -enddate 20200201000000Z")
        try made.issue("other-name", by: "ca", extensions: "elsewhere", days: "-days 1")
        try made.issue("untrusted", by: "other-ca", extensions: "local", days: "-days 1")
        return made
    }

    /// Deletes the folder.
    public func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Copies `pair` over `target` (the files a server was started with), as a renewal does.
    public func install(_ pair: Pair, over target: Pair) throws {
        for (from, to) in [(pair.certificate, target.certificate), (pair.key, target.key)] {
            let data = try Data(contentsOf: URL(fileURLWithPath: from))
            try data.write(to: URL(fileURLWithPath: to), options: .atomic)
        }
    }

    /// A copy of `pair` under new names in the folder (a server's own files, to be replaced later).
    public func copy(_ pair: Pair, as name: String) throws -> Pair {
        let target = self.pair(name)
        try install(pair, over: target)
        return target
    }

    private func write(_ name: String, _ text: String) throws {
        try text.write(toFile: "\(directory)/\(name)", atomically: true, encoding: .utf8)
    }

    private func authority(named name: String) throws {
        try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                     "-keyout", "\(directory)/\(name).key", "-out", "\(directory)/\(name).pem", "-days", "2", "-subj", "/CN=PCastKit test \(name)"])
    }

    private func issue(_ name: String, by authority: String, extensions: String, days: String) throws {
        try openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                     "-keyout", "\(directory)/\(name).key", "-out", "\(directory)/\(name).csr", "-subj", "/CN=\(name)"])
        try openssl(["ca", "-batch", "-notext", "-config", "\(directory)/ca.cnf", "-cert", "\(directory)/\(authority).pem",
                     "-keyfile", "\(directory)/\(authority).key", "-in", "\(directory)/\(name).csr", "-out", "\(directory)/\(name).pem",
                     "-extensions", extensions] + days.split(separator: " ").map(String.init))
    }

    private func openssl(_ arguments: [String]) throws {
        try runTool("openssl", arguments, needs: "the TLS tests make their certificates with openssl")
    }
}
