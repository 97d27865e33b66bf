import Foundation
import PCastContracts
import PCastServer
import Testing

@Suite struct PlatformConfigurationTests {
    @Test func missingSecretIsATypedError() {
        #expect(throws: ConfigurationError.missingSecret) {
            _ = try PlatformConfiguration.load(environment: [:])
        }
    }

    @Test func defaultsApplyWhenOnlyTheSecretIsGiven() throws {
        let configuration = try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s"])
        #expect(configuration.secret == "s")
        #expect(configuration.applicationId == PlatformConfiguration.defaultApplicationId)
        #expect(configuration.httpPort == PlatformConfiguration.defaultHTTPPort)
        #expect(configuration.messageSizeLimit == 64 * 1024)
    }

    @Test func flagsBeatEnvironmentWhichBeatsTheFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("pcast.json")
        try Data(#"{"applicationId":"from-file","secret":"file-secret","httpPort":1111,"mediaPort":2222,"dataDirectory":"/file"}"#.utf8).write(to: file)

        let fileOnly = try PlatformConfiguration.load(file: file)
        #expect(fileOnly.applicationId == "from-file")
        #expect(fileOnly.httpPort == 1111)
        #expect(fileOnly.mediaPort == 2222)

        let environment = ["PCAST_HTTP_PORT": "3333", "PCAST_SECRET": "env-secret", "PCAST_DATA_DIR": "/env"]
        let withEnvironment = try PlatformConfiguration.load(file: file, environment: environment)
        #expect(withEnvironment.httpPort == 3333)
        #expect(withEnvironment.secret == "env-secret")
        #expect(withEnvironment.mediaPort == 2222)
        #expect(withEnvironment.dataDirectory == "/env")

        var flags = PlatformConfiguration.Overrides()
        flags.httpPort = 0
        flags.applicationId = "from-flags"
        let all = try PlatformConfiguration.load(file: file, environment: environment, overrides: flags)
        #expect(all.httpPort == 0)
        #expect(all.applicationId == "from-flags")
        #expect(all.secret == "env-secret")

        // PCAST_CONFIG names the file when the caller does not.
        let viaEnvironment = try PlatformConfiguration.load(environment: ["PCAST_CONFIG": file.path])
        #expect(viaEnvironment.applicationId == "from-file")
    }

    @Test("the viewer limit: none by default; from the file (maximumViewers), PCAST_MAX_VIEWERS and the flag, each over the one before; zero or a negative count is a typed error")
    func viewerLimitLayers() throws {
        #expect(try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s"]).maximumViewers == nil)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("pcast.json")
        try Data(#"{"secret":"s","maximumViewers":100}"#.utf8).write(to: file)
        #expect(try PlatformConfiguration.load(file: file, environment: [:]).maximumViewers == 100)
        #expect(try PlatformConfiguration.load(file: file, environment: ["PCAST_MAX_VIEWERS": "50"]).maximumViewers == 50)
        var flags = PlatformConfiguration.Overrides()
        flags.maximumViewers = 7
        #expect(try PlatformConfiguration.load(file: file, environment: ["PCAST_MAX_VIEWERS": "50"], overrides: flags).maximumViewers == 7)
        #expect(throws: ConfigurationError.invalidValue(name: "maximumViewers", value: "0", reason: "not positive")) {
            _ = try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s", "PCAST_MAX_VIEWERS": "0"])
        }
    }

    @Test func badValuesAreTypedErrors() throws {
        #expect(throws: ConfigurationError.invalidValue(name: "PCAST_HTTP_PORT", value: "eighty", reason: "not an integer")) {
            _ = try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s", "PCAST_HTTP_PORT": "eighty"])
        }
        #expect(throws: ConfigurationError.self) {
            _ = try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s", "PCAST_MEDIA_PORT": "70000"])
        }
        #expect(throws: ConfigurationError.self) {
            _ = try PlatformConfiguration.load(file: URL(fileURLWithPath: "/nonexistent/pcast.json"), environment: ["PCAST_SECRET": "s"])
        }
    }

    @Test("TLS: the certificate and key from the file (tlsCertificate, tlsKey), PCAST_TLS_* and the flags; one without the other, a redirect or RTMPS without TLS are typed errors; the cluster CA must be a readable file")
    func tlsLayers() throws {
        #expect(try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s"]).tls == nil)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("pcast.json")
        try Data(#"{"secret":"s","tlsCertificate":"/etc/pcast/chain.pem","tlsKey":"/etc/pcast/key.pem","httpRedirectPort":8080}"#.utf8).write(to: file)
        let fromFile = try PlatformConfiguration.load(file: file, environment: [:])
        #expect(fromFile.tls == TLSFiles(certificateChain: "/etc/pcast/chain.pem", privateKey: "/etc/pcast/key.pem"))
        #expect(fromFile.httpRedirectPort == 8080)
        let fromEnvironment = try PlatformConfiguration.load(file: file, environment: ["PCAST_TLS_CERTIFICATE": "/env/chain.pem", "PCAST_HTTP_REDIRECT_PORT": "80"])
        #expect(fromEnvironment.tls?.certificateChain == "/env/chain.pem" && fromEnvironment.tls?.privateKey == "/etc/pcast/key.pem")
        #expect(fromEnvironment.httpRedirectPort == 80)
        var flags = PlatformConfiguration.Overrides()
        flags.tlsKey = "/flag/key.pem"
        #expect(try PlatformConfiguration.load(file: file, environment: [:], overrides: flags).tls?.privateKey == "/flag/key.pem")

        #expect(throws: ConfigurationError.self) {
            _ = try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s", "PCAST_TLS_CERTIFICATE": "/c.pem"])
        }
        #expect(throws: ConfigurationError.self) {
            _ = try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s", "PCAST_TLS_KEY": "/k.pem"])
        }
        #expect(throws: ConfigurationError.self) {
            _ = try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s", "PCAST_HTTP_REDIRECT_PORT": "80"])
        }
        // The cluster's CA: a readable file, from the file's clusterCertificateAuthority or PCAST_CLUSTER_CA_FILE.
        #expect(try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s", "PCAST_CLUSTER_CA_FILE": file.path]).clusterCertificateAuthority == file.path)
        #expect(throws: ConfigurationError.self) {
            _ = try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s", "PCAST_CLUSTER_CA_FILE": directory.appendingPathComponent("none.pem").path])
        }
        var rtmps = try PlatformConfiguration.load(environment: ["PCAST_SECRET": "s"])
        rtmps.rtmpsPort = 1936
        #expect(throws: ConfigurationError.self) { try rtmps.validate() }
        rtmps.tls = TLSFiles(certificateChain: "/c.pem", privateKey: "/k.pem")
        try rtmps.validate()
    }
}
