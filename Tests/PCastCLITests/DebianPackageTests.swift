import Foundation
import PCastTestSupport
import Testing

extension OneAtATime {
    /// scripts/make-deb.sh and deploy/: the package built from the debug binaries beside the tests,
    /// installed on this machine with dpkg (root), `pcast serve` run from it as user pcast, then
    /// purged. The package's user and /var/lib/pcast are removed again when the test made them.
    @Suite("Debian package: scripts/make-deb.sh and deploy/", .serialized)
    struct DebianPackageTests {
        /// The version the test builds: a leftover installation of it (a test killed midway) is
        /// purged; any other installed pcast package is an operator's, and the test refuses to touch it.
        static let testVersion = "0.0.0~test"
        static let unit = repositoryRoot.appendingPathComponent("deploy/systemd/pcast.service")

        @Test("scripts/make-deb.sh packages the debug binaries; after dpkg -i, /usr/bin/pcast and the plugin have RUNPATH /usr/lib/pcast and ldd resolves nothing from /opt/swift, user pcast exists, the placeholder secret is replaced by 64 hex digits in a 0640 root:pcast config, the installed unit passes systemd-analyze verify where it is installed; pcast serve from the package, with the toolchain's runtime directory hidden, runs as pcast, answers /healthz over HTTPS to curl trusting the test CA (and fails without it), exits 0 within 20 s of SIGTERM; dpkg --purge removes /usr/bin/pcast and the config")
        func buildInstallServePurge() async throws {
            guard geteuid() == 0 else { throw CLITestFailure("dpkg -i needs root; the test suite runs as root (scripts/setup.sh, nft, netns)") }
            try Self.purgeLeftover()
            let userExisted = Self.pcastUID() != nil
            let stateExisted = FileManager.default.fileExists(atPath: "/var/lib/pcast")
            let work = try temporaryDirectory("pcast-deb-test")
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: work.path)
            let certificates = try TestCertificates.make()
            var server: ChildProcess?
            defer {
                if let server, server.isRunning { server.stop() }
                if Self.installedVersion() != nil { _ = try? runCommand(try executable("dpkg"), ["--purge", "pcast"], timeout: 120) }
                if !userExisted, Self.pcastUID() != nil {
                    _ = try? runCommand(try executable("userdel"), ["pcast"], timeout: 30)
                    _ = try? runCommand(try executable("groupdel"), ["pcast"], timeout: 30)
                }
                if !stateExisted { try? FileManager.default.removeItem(atPath: "/var/lib/pcast") }
                certificates.remove()
                try? FileManager.default.removeItem(at: work)
            }

            // Build: the debug pcast and libgstpcast.so beside the tests.
            let binaries = try pcastBinary().deletingLastPathComponent()
            guard FileManager.default.fileExists(atPath: binaries.appendingPathComponent("libgstpcast.so").path) else {
                throw CLITestFailure("libgstpcast.so is not in \(binaries.path): swift build builds it")
            }
            let built = try runCommand(try executable("bash"), [
                repositoryRoot.appendingPathComponent("scripts/make-deb.sh").path, "--fast", "--binaries", binaries.path,
                "--output", work.appendingPathComponent("deb").path, "--version", Self.testVersion,
            ], timeout: 600)
            try #require(built.status == 0, "make-deb.sh: \(built.stderr)")
            let deb = built.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(deb.hasSuffix("/pcast_\(Self.testVersion)_amd64.deb"), "\(deb)")
            try #require(FileManager.default.fileExists(atPath: deb), "no package at \(deb)")

            // Install.
            let installed = try runCommand(try executable("dpkg"), ["-i", deb], timeout: 300)
            try #require(installed.status == 0, "dpkg -i: \(installed.stdout) \(installed.stderr)")
            #expect(Self.installedVersion() == Self.testVersion)

            // The binaries find the Swift runtime in the package, not in the toolchain.
            let plugin = try Self.pluginPath()
            for binary in ["/usr/bin/pcast", plugin] {
                let dynamic = try runCommand(try executable("readelf"), ["-d", binary])
                let runpath = dynamic.lines.first { $0.contains("(RUNPATH)") || $0.contains("(RPATH)") } ?? ""
                #expect(runpath.hasSuffix("[/usr/lib/pcast]"), "\(binary): \(runpath)")
                let ldd = try runCommand(try executable("ldd"), [binary])
                #expect(ldd.status == 0 && !ldd.stdout.contains("not found"), "\(binary): \(ldd.stdout) \(ldd.stderr)")
                #expect(!ldd.stdout.contains("/opt/swift"), "\(binary): \(ldd.stdout)")
                #expect(ldd.stdout.contains("libswiftCore.so => /usr/lib/pcast/libswiftCore.so"), "\(binary): \(ldd.stdout)")
            }

            // What postinst did.
            let uid = try #require(Self.pcastUID(), "postinst made no user pcast")
            let config = "/etc/pcast/pcast.json"
            let shipped = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: config))) as? [String: Any] ?? [:]
            let secret = shipped["secret"] as? String ?? ""
            #expect(secret.count == 64 && secret.allSatisfy(\.isHexDigit), "secret after postinst: \(secret)")
            let attributes = try FileManager.default.attributesOfItem(atPath: config)
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o640, "\(attributes)")
            #expect(attributes[.ownerAccountName] as? String == "root" && attributes[.groupOwnerAccountName] as? String == "pcast", "\(attributes)")
            #expect((try? FileManager.default.attributesOfItem(atPath: "/var/lib/pcast")[.ownerAccountName] as? String) == "pcast")

            // The unit as installed. systemd-analyze comes with the systemd package, which this
            // project does not install (it is big); where it is missing, the unit is checked by
            // reading it (unitKeys()), and here only a setup.sh that lists systemd makes it a failure.
            if let analyze = try? executable("systemd-analyze") {
                let verified = try runCommand(analyze, ["verify", "/lib/systemd/system/pcast.service"], timeout: 60)
                #expect(verified.status == 0 && !verified.stderr.contains("pcast.service"), "systemd-analyze verify: \(verified.stdout) \(verified.stderr)")
            } else if try Self.setupInstalls("systemd") {
                Issue.record("scripts/setup.sh installs systemd, but systemd-analyze is missing")
            }

            // pcast serve from the package as pcast, with a copy of the installed configuration:
            // the test's certificate, free ports, a data directory of its own, loopback only (the
            // shipped 0.0.0.0:443 and the redirect on 80 are a server's), no RTMP (1935 may be taken).
            let serveDirectory = work.appendingPathComponent("serve")
            let data = serveDirectory.appendingPathComponent("data")
            try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
            let chain = serveDirectory.appendingPathComponent("fullchain.pem"), key = serveDirectory.appendingPathComponent("privkey.pem")
            try Data(contentsOf: URL(fileURLWithPath: certificates.leaf.certificate)).write(to: chain)
            try Data(contentsOf: URL(fileURLWithPath: certificates.leaf.key)).write(to: key)
            let port = try freeTCPPort()
            var configuration = shipped
            configuration["tlsCertificate"] = chain.path
            configuration["tlsKey"] = key.path
            configuration["httpPort"] = port
            configuration["mediaPort"] = 0
            configuration["host"] = "127.0.0.1"
            configuration["dataDirectory"] = data.path
            configuration["httpRedirectPort"] = nil
            let configFile = serveDirectory.appendingPathComponent("pcast.json")
            try JSONSerialization.data(withJSONObject: configuration, options: [.prettyPrinted, .sortedKeys]).write(to: configFile)
            for path in [serveDirectory, data, chain, key, configFile].map(\.path) {
                try FileManager.default.setAttributes([.ownerAccountName: "pcast", .groupOwnerAccountName: "pcast"], ofItemAtPath: path)
            }
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: key.path)

            // The toolchain's runtime directory (where the build binary's libswiftCore.so comes
            // from) is covered by an empty tmpfs in a mount namespace of the server's own; sh and
            // setpriv exec in turn, so the child's pid is pcast's and SIGTERM reaches it directly.
            let buildLdd = try runCommand(try executable("ldd"), [try pcastBinary().path])
            let core = try #require(buildLdd.lines.first { $0.contains("libswiftCore.so => ") }, "the build's pcast links no libswiftCore.so: \(buildLdd.stdout)")
            let toolchainRuntime = URL(fileURLWithPath: String(core.split(separator: " ")[2])).deletingLastPathComponent().path
            let log = work.appendingPathComponent("serve.out").path
            let environment = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": data.path, "XDG_CACHE_HOME": data.path + "/cache", "LANG": "C.UTF-8"]
            server = try ChildProcess.spawn(try executable("unshare"), [
                "--mount", "sh", "-c", "mount -t tmpfs none \"$1\" && exec setpriv --reuid=pcast --regid=pcast --init-groups /usr/bin/pcast serve --config \"$2\" --no-rtmp",
                "sh", toolchainRuntime, configFile.path,
            ], environment: environment, output: log, errorsToOutput: true)
            let process = try #require(server)
            var listening = false
            for _ in 0..<400 where !listening && process.isRunning {
                listening = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("signaling wss://127.0.0.1:\(port)/ws")
                if !listening { try await Task.sleep(for: .milliseconds(50)) }
            }
            let served = { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
            try #require(listening, "pcast serve did not start listening with TLS within 20 s: \(served())")

            let status = try String(contentsOfFile: "/proc/\(process.pid)/status", encoding: .utf8)
            let uids = status.split(separator: "\n").first { $0.hasPrefix("Uid:") }?.split(whereSeparator: \.isWhitespace).dropFirst().compactMap { UInt32($0) } ?? []
            #expect(uids.count == 4 && uids.allSatisfy { $0 == uid }, "server's /proc status Uid line: \(uids), pcast is \(uid)")
            let executablePath = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(process.pid)/exe")
            #expect(executablePath == "/usr/bin/pcast", "\(executablePath ?? "?")")
            let hidden = try runCommand(try executable("nsenter"), ["--target", String(process.pid), "--mount", "ls", "-A", toolchainRuntime])
            #expect(hidden.status == 0 && hidden.stdout.isEmpty, "\(toolchainRuntime) in the server's namespace: \(hidden.stdout) \(hidden.stderr)")

            let health = try runCommand(try executable("curl"), ["-sS", "-i", "--max-time", "10", "--cacert", certificates.authority, "https://localhost:\(port)/healthz"])
            #expect(health.status == 0 && health.stdout.hasPrefix("HTTP/1.1 200"), "\(health.stdout) \(health.stderr)")
            #expect(health.stdout.trimmingCharacters(in: .whitespacesAndNewlines).hasSuffix("ok"), "\(health.stdout)")
            let untrusted = try runCommand(try executable("curl"), ["-sS", "--max-time", "10", "https://localhost:\(port)/healthz"])
            #expect(untrusted.status == 60, "curl without the CA: \(untrusted.status) \(untrusted.stderr)")

            kill(process.pid, SIGTERM)
            let exitStatus = await RawTCP.offload { process.wait(within: .seconds(20)) }
            #expect(exitStatus == 0, "pcast serve after SIGTERM: \(exitStatus.map { String($0) } ?? "still running after 20 s"); \(served().suffix(2_000))")
            if exitStatus == nil { process.stop() }
            server = nil

            // Purge.
            let purged = try runCommand(try executable("dpkg"), ["--purge", "pcast"], timeout: 120)
            #expect(purged.status == 0, "dpkg --purge: \(purged.stdout) \(purged.stderr)")
            #expect(Self.installedVersion() == nil)
            #expect(!FileManager.default.fileExists(atPath: "/usr/bin/pcast"))
            #expect(!FileManager.default.fileExists(atPath: config))
            #expect(!FileManager.default.fileExists(atPath: "/usr/lib/pcast"))
        }

        @Test("deploy/systemd/pcast.service sets User=pcast, the ExecStart, EnvironmentFile, ExecReload (SIGHUP), Restart=on-failure, LimitNOFILE ≥ 65536, TimeoutStopSec=30, StateDirectory=pcast, CAP_NET_BIND_SERVICE, NoNewPrivileges, ProtectSystem=strict; deploy/pcast.json uses only keys pcast serve accepts, with the placeholder secret, 0.0.0.0:443, UDP 4443, the redirect on 80 and /etc/pcast/tls")
        func unitAndExampleConfiguration() throws {
            let keys = try Self.unitKeys()
            #expect(keys["User"] == ["pcast"] && keys["Group"] == ["pcast"], "\(keys["User"] ?? [])")
            #expect(keys["ExecStart"]?.count == 1 && keys["ExecStart"]?.first?.hasPrefix("/usr/bin/pcast serve --config /etc/pcast/pcast.json") == true, "\(keys["ExecStart"] ?? [])")
            #expect(keys["EnvironmentFile"] == ["-/etc/default/pcast"])
            #expect(keys["ExecReload"] == ["/bin/kill -HUP $MAINPID"])
            #expect(keys["Restart"] == ["on-failure"])
            #expect(keys["RestartSec"]?.isEmpty == false)
            #expect((keys["LimitNOFILE"]?.last.flatMap { Int($0) } ?? 0) >= 65_536, "\(keys["LimitNOFILE"] ?? [])")
            #expect(keys["TimeoutStopSec"] == ["30"])
            #expect(keys["StateDirectory"] == ["pcast"])
            #expect(keys["AmbientCapabilities"]?.contains { $0.split(separator: " ").contains("CAP_NET_BIND_SERVICE") } == true)
            #expect(keys["NoNewPrivileges"] == ["yes"])
            #expect(keys["ProtectSystem"] == ["strict"])
            #expect(keys["ReadWritePaths"]?.contains("/var/lib/pcast") == true)
            #expect(keys["WantedBy"] == ["multi-user.target"])

            // The keys `pcast serve --config` decodes (PlatformConfiguration.Overrides); it rejects others.
            let accepted: Set<String> = [
                "applicationId", "secret", "host", "httpPort", "mediaPort", "dataDirectory", "messageSizeLimit", "keepAliveInterval",
                "protectMetrics", "maximumTokenLifetime", "maximumConnectionsPerAddress", "maximumConnections", "ingestAllowHosts",
                "ingestFileDirectory", "database", "maximumViewers", "streamNotificationURL", "streamNotificationSecret",
                "streamNotificationViewers", "tlsCertificate", "tlsKey", "httpRedirectPort",
            ]
            let example = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: repositoryRoot.appendingPathComponent("deploy/pcast.json"))) as? [String: Any])
            #expect(Set(example.keys).subtracting(accepted).isEmpty, "unknown keys: \(Set(example.keys).subtracting(accepted))")
            #expect(example["secret"] as? String == "CHANGE-ME")
            #expect(example["host"] as? String == "0.0.0.0" && example["httpPort"] as? Int == 443 && example["mediaPort"] as? Int == 4443)
            #expect(example["httpRedirectPort"] as? Int == 80 && example["dataDirectory"] as? String == "/var/lib/pcast")
            #expect(example["tlsCertificate"] as? String == "/etc/pcast/tls/fullchain.pem" && example["tlsKey"] as? String == "/etc/pcast/tls/privkey.pem")
        }

        /// `Key=value` lines of the unit, values per key in order (comments and sections skipped).
        static func unitKeys() throws -> [String: [String]] {
            var keys: [String: [String]] = [:]
            for line in try String(contentsOf: unit, encoding: .utf8).split(separator: "\n") {
                let text = line.trimmingCharacters(in: .whitespaces)
                guard !text.isEmpty, !text.hasPrefix("#"), !text.hasPrefix(";"), !text.hasPrefix("["), let equals = text.firstIndex(of: "=") else { continue }
                keys[String(text[..<equals]), default: []].append(String(text[text.index(after: equals)...]))
            }
            return keys
        }

        /// Whether scripts/setup.sh lists `package` among those it installs.
        static func setupInstalls(_ package: String) throws -> Bool {
            try String(contentsOf: repositoryRoot.appendingPathComponent("scripts/setup.sh"), encoding: .utf8)
                .split(separator: "\n").contains { $0.trimmingCharacters(in: .whitespaces) == package }
        }

        static func pcastUID() -> UInt32? {
            getpwnam("pcast").map { $0.pointee.pw_uid }
        }

        /// The version of the pcast package dpkg knows (installed, half-installed or only its
        /// configuration files left), nil when there is none.
        static func installedVersion() -> String? {
            guard let result = try? runCommand(try executable("dpkg-query"), ["-W", "-f=${Status}|${Version}", "pcast"]), result.status == 0 else { return nil }
            let parts = result.stdout.split(separator: "|", omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].hasSuffix(" not-installed"), !parts[1].isEmpty else { return nil }
            return String(parts[1])
        }

        /// Purges this test's own leftover package; refuses to touch any other installed pcast.
        static func purgeLeftover() throws {
            guard let version = installedVersion() else { return }
            guard version == testVersion else {
                throw CLITestFailure("pcast \(version) is installed on this machine; the test would replace and purge it (dpkg --purge pcast first)")
            }
            let purged = try runCommand(try executable("dpkg"), ["--purge", "pcast"], timeout: 120)
            guard purged.status == 0 else { throw CLITestFailure("could not purge the leftover test package: \(purged.stderr)") }
        }

        /// Where the package put libgstpcast.so (GStreamer's plugin directory, as make-deb.sh asked pkg-config).
        static func pluginPath() throws -> String {
            let listed = try runCommand(try executable("dpkg"), ["-L", "pcast"])
            guard let path = listed.lines.first(where: { $0.hasSuffix("/gstreamer-1.0/libgstpcast.so") }) else {
                throw CLITestFailure("the package has no gstreamer-1.0/libgstpcast.so: \(listed.stdout)")
            }
            return path
        }
    }
}
