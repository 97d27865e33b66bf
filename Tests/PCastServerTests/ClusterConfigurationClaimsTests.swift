import Foundation
import PCastContracts
@testable import PCastServer
import Testing

/// Claims of PCastNode's *Cluster* and *Security* articles about what the configuration reads:
/// the shared store's URL, the ingest hosts an operator allows, the cluster's silence limits.
@Suite("Article claims: the database URL, allowed ingest hosts and the cluster's silence limits")
struct ClusterConfigurationClaimsTests {
    static let base = ["PCAST_SECRET": "s3cret"]

    /// A JSON configuration file with `body`, removed by the caller.
    static func file(_ body: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-claims-\(UUID().uuidString).json")
        try Data(body.utf8).write(to: url)
        return url
    }

    @Test("a postgres:// URL takes sslmode disable, prefer (the default), require or verify-full, and any other value is refused; PCAST_DATABASE and the JSON file's database set it, a flag wins over both; a path is SQLite; a malformed URL is a configuration error")
    func databaseSetting() throws {
        #expect(try PostgresURL(parsing: "postgres://pcast@db.lan/pcast").tls == .prefer)
        let modes: [(String, PostgresURL.TLSMode)] = [("disable", .disable), ("prefer", .prefer), ("require", .require), ("verify-full", .verifyFull)]
        for (text, mode) in modes {
            let url = try PostgresURL(parsing: "postgres://pcast:pw@db.lan:5433/pcast?sslmode=\(text)")
            #expect(url.tls == mode && url.host == "db.lan" && url.port == 5433 && url.user == "pcast" && url.password == "pw" && url.database == "pcast")
        }
        for bad in ["postgres://pcast@db.lan/pcast?sslmode=verify-ca", "postgres://pcast@db.lan/pcast?sslmode=", "postgres://db.lan/pcast",
                    "postgres://pcast@db.lan/", "postgres://pcast@db.lan/pcast?timeout=3"] {
            #expect(throws: PostgresURLError.self, "\(bad) was accepted") { try PostgresURL(parsing: bad) }
        }

        let fromEnvironment = try PlatformConfiguration.load(environment: Self.base.merging(["PCAST_DATABASE": "postgres://pcast@env.lan/pcast?sslmode=require"]) { $1 })
        guard case .postgres(let environmentURL)? = fromEnvironment.database else { Issue.record("\(String(describing: fromEnvironment.database))"); return }
        #expect(environmentURL.host == "env.lan" && environmentURL.tls == .require)

        let json = try Self.file(#"{"database": "postgres://pcast@file.lan/pcast?sslmode=verify-full"}"#)
        defer { try? FileManager.default.removeItem(at: json) }
        let fromFile = try PlatformConfiguration.load(file: json, environment: Self.base)
        guard case .postgres(let fileURL)? = fromFile.database else { Issue.record("\(String(describing: fromFile.database))"); return }
        #expect(fileURL.host == "file.lan" && fileURL.tls == .verifyFull)

        let flag = try PlatformConfiguration.load(file: json, environment: Self.base.merging(["PCAST_DATABASE": "postgres://pcast@env.lan/pcast"]) { $1 },
                                                  overrides: .init(database: "/var/lib/pcast/rooms.sqlite"))
        #expect(flag.database == .sqlite(path: "/var/lib/pcast/rooms.sqlite"))

        #expect(throws: ConfigurationError.self) {
            try PlatformConfiguration.load(environment: Self.base.merging(["PCAST_DATABASE": "postgres://pcast@db.lan/pcast?sslmode=always"]) { $1 })
        }
    }

    @Test("hosts allowed for ingest come from the flag's list, PCAST_INGEST_ALLOW_HOSTS (comma-separated) or the JSON file's ingestAllowHosts, lower-cased; an allowed name that resolves to a private address passes the policy, another such name is refused; PCAST_INGEST_FILE_DIR sets the file:// folder")
    func ingestAllowHosts() throws {
        let fromFlags = try PlatformConfiguration.load(environment: Self.base, overrides: .init(ingestAllowHosts: ["media.lan", "Camera.LAN"]))
        #expect(fromFlags.ingestPolicy.allowedHosts == ["media.lan", "camera.lan"])
        let fromEnvironment = try PlatformConfiguration.load(environment: Self.base.merging([
            "PCAST_INGEST_ALLOW_HOSTS": "media.lan, camera.lan", "PCAST_INGEST_FILE_DIR": "/srv/clips",
        ]) { $1 })
        #expect(fromEnvironment.ingestPolicy.allowedHosts == ["media.lan", "camera.lan"])
        #expect(fromEnvironment.ingestPolicy.fileDirectory == "/srv/clips")
        let json = try Self.file(#"{"ingestAllowHosts": ["media.lan"]}"#)
        defer { try? FileManager.default.removeItem(at: json) }
        let fromFile = try PlatformConfiguration.load(file: json, environment: Self.base)
        #expect(fromFile.ingestPolicy.allowedHosts == ["media.lan"])
        #expect(try PlatformConfiguration.load(environment: Self.base).ingestPolicy.allowedHosts.isEmpty)

        let privateAddress: (String) -> [String]? = { _ in ["10.1.2.3"] }
        let sameFile: (String) -> String? = { $0 }
        let target = try fromFile.ingestPolicy.check("http://media.lan/clip.mp4", resolve: privateAddress, realPath: sameFile)
        #expect(target.pinnedAddress == "10.1.2.3")
        #expect(throws: IngestURIError.self) {
            try fromFile.ingestPolicy.check("http://other.lan/clip.mp4", resolve: privateAddress, realPath: sameFile)
        }
    }

    @Test("without settings an edge asks its origin again for a leg silent 3 s, an origin drops an edge flow that sent no report for 10 s, and a shutdown waits at most 10 s for the store")
    func clusterSilenceDefaults() throws {
        let configuration = try PlatformConfiguration.load(environment: Self.base)
        #expect(configuration.legSilenceLimit == .seconds(3))
        #expect(configuration.edgeSilenceLimit == .seconds(10))
        #expect(Platform.flushLimit == .seconds(10))
    }
}
