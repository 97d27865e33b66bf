import Foundation
@testable import PCast
import PCastNode
import PCastTestSupport
import Testing

/// Issue 44, item 3: the files operators run Prometheus and Grafana with (`deploy/`), checked by
/// the tools themselves and against running nodes.
@Suite("Monitoring files: promtool checks the shipped Prometheus configuration and rules and unit-tests the alerts; Prometheus scrapes two nodes with them; every Grafana query names a metric the platform exports")
struct MonitoringFilesTests {
    static let deploy = repositoryRoot.appendingPathComponent("deploy")

    @Test("promtool: the scrape configuration and the alerting rules check, and the alerts' unit tests pass (a node down, publisher loss, viewer loss, certificate expiry)")
    func promtoolChecks() async throws {
        let prometheus = Self.deploy.appendingPathComponent("prometheus")
        for arguments in [["check", "config", prometheus.appendingPathComponent("prometheus.yml").path],
                          ["check", "rules", prometheus.appendingPathComponent("alerts.yml").path],
                          ["test", "rules", prometheus.appendingPathComponent("alerts_test.yml").path]] {
            let run = try await offPool { try runTool("promtool", arguments) }
            #expect(run.status == 0 && run.output.contains("SUCCESS"), "promtool \(arguments.joined(separator: " ")): \(run.output.suffix(2_000))")
        }
    }

    @Test("the Grafana dashboard parses, draws its panels from Prometheus, and every metric its queries name is in a node's /metrics (a node serving HTTPS, with a publisher and a viewer)")
    func grafanaQueriesNameExportedMetrics() async throws {
        let data = try Data(contentsOf: Self.deploy.appendingPathComponent("grafana/pcast.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        #expect(panels.count >= 10)
        let expressions = panels.flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
        #expect(expressions.count >= panels.count, "a panel without a query")
        let named = Set(expressions.flatMap { expression in
            expression.matches(of: /pcast_[a-z_]+/).map { String($0.output) }
        }).map { name in
            // A histogram's series are its name's.
            for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) { return String(name.dropLast(suffix.count)) }
            return name
        }
        #expect(named.count >= 15, "\(named)")

        let certificates = try TestCertificates.make()
        defer { certificates.remove() }
        let platform = try await tlsPlatform(certificates.leaf)
        let publisherSDK = tlsClient(platform, trusting: certificates.authority)
        try await publisherSDK.start(authToken: try platform.token(.auth))
        let media = try await stampedMedia()
        let publisher = try await publisherSDK.publish(streamToken: try platform.token(.publish), mediaStream: media)
        let viewer = try await publisherSDK.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId))
        let url = platform.httpURL + "/metrics", authority = certificates.authority
        let scrape = try await offPool { try runTool("curl", ["-s", "--cacert", authority, url]) }
        let exported = Set(scrape.output.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.map { String($0.split(separator: " ")[2]) })
        #expect(exported.count >= 20, "\(scrape.output.prefix(1_000))")
        let missing = named.filter { !exported.contains($0) }
        #expect(missing.isEmpty, "queried but not exported: \(missing.sorted()); exported: \(exported.sorted())")
        await viewer.stop()
        await publisher.stop()
        await publisherSDK.stop()
        await media.stop()
        await platform.shutdown()
    }

    @Test("Prometheus with the shipped configuration (its targets file pointing at two nodes) scrapes both: up is 1 for each, and sum(pcast_subscribers) answers the three viewers (one on the first node, two on the second)")
    func prometheusScrapesTwoNodes() async throws {
        let first = try await LocalPlatform.start(), second = try await LocalPlatform.start()
        var running: [(PCast, UserMediaStream, Publisher, [MediaStream])] = []
        for (platform, viewers) in [(first, 1), (second, 2)] {
            let sdk = try await client(platform)
            let media = try await stampedMedia()
            let publisher = try await sdk.publish(streamToken: try platform.token(.publish), mediaStream: media)
            var streams: [MediaStream] = []
            for _ in 0..<viewers {
                streams.append(try await sdk.subscribe(streamToken: try platform.token(.stream, originStreamId: publisher.streamId)))
            }
            running.append((sdk, media, publisher, streams))
        }

        // The shipped files, with a targets file of the test's two nodes.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-prometheus-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("targets"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for file in ["prometheus.yml", "alerts.yml"] {
            try FileManager.default.copyItem(at: Self.deploy.appendingPathComponent("prometheus/\(file)"), to: directory.appendingPathComponent(file))
        }
        let hosts = [first, second].map { $0.httpURL.replacingOccurrences(of: "http://", with: "") }
        let targets = try JSONSerialization.data(withJSONObject: [["targets": hosts, "labels": ["cluster": "test"]]])
        try targets.write(to: directory.appendingPathComponent("targets/pcast.json"))
        let port = try freeTCPPort()
        let prometheus = try ChildProcess.spawn(try executable("prometheus"), [
            "--config.file=\(directory.appendingPathComponent("prometheus.yml").path)",
            "--storage.tsdb.path=\(directory.appendingPathComponent("data").path)",
            "--web.listen-address=127.0.0.1:\(port)",
        ], environment: ProcessInfo.processInfo.environment, output: directory.appendingPathComponent("prometheus.log").path, errorsToOutput: true)
        defer { prometheus.stop() }
        /// Each sample's value (the text of the query's JSON answer, parsed on this side).
        func query(_ promQL: String) async throws -> [Double] {
            let encoded = promQL.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? promQL
            let run = try await offPool { try runTool("curl", ["-s", "http://127.0.0.1:\(port)/api/v1/query?query=\(encoded)"]) }
            guard let object = try? JSONSerialization.jsonObject(with: Data(run.output.utf8)) as? [String: Any],
                  let data = object["data"] as? [String: Any], let result = data["result"] as? [[String: Any]] else { return [] }
            return result.compactMap { ((($0["value"] as? [Any])?.last) as? String).flatMap(Double.init) }
        }
        // The first scrape of each target comes within the 15 s interval (spread over it).
        var up: [Double] = []
        for _ in 0..<120 where up != [1, 1] {
            up = try await query("up{job=\"pcast\"}")
            if up != [1, 1] { try await Task.sleep(for: .milliseconds(500)) }
        }
        let log = (try? String(contentsOf: directory.appendingPathComponent("prometheus.log"), encoding: .utf8)) ?? ""
        #expect(up == [1, 1], "up: \(up); prometheus: \(log.suffix(1_500))")
        let viewers = try await query("sum(pcast_subscribers)"), perNode = try await query("pcast_subscribers")
        #expect(viewers == [3], "\(perNode)")
        #expect(Set(try await query("pcast_streams")) == [1])

        for (sdk, media, publisher, streams) in running {
            for stream in streams { await stream.stop() }
            await publisher.stop()
            await sdk.stop()
            await media.stop()
        }
        await first.shutdown()
        await second.shutdown()
    }
}
