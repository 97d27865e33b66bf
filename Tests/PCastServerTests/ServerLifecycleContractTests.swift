import Foundation
import Logging
import PCastProtocol
@testable import PCastServer
import PCastTestSupport
import Testing

/// Runs `body` against a fresh server (a data directory of its own, a recording relay) and shuts
/// it down afterwards, whatever happens.
private func withLifecycleServer(
    configuration: PlatformConfiguration, clock: ManualClock? = nil,
    _ body: (PlatformServer) async throws -> Void
) async throws {
    var configuration = configuration
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-lifecycle-test-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    configuration.dataDirectory = directory.path
    var logger = Logger(label: "pcast.test")
    logger.logLevel = .warning
    let now: @Sendable () -> Date
    if let clock { now = clock.function } else { now = { Date() } }
    let server = try await PlatformServer.start(configuration: configuration, relay: RecordingRelay(), logger: logger, clock: now,
                                                tickInterval: .milliseconds(50))
    do {
        try await body(server)
    } catch {
        await server.shutdown()
        throw error
    }
    await server.shutdown()
}

/// A connected socket whose session authenticated.
private func authenticatedSocket(_ server: PlatformServer) async throws -> TestSocket {
    let socket = try await TestSocket.connect(port: server.httpPort)
    let reply = try await socket.request(1, .authenticate(.init(token: Fixture.token(.auth))))
    guard case .authenticated = reply.message else { throw TestSocket.Unexpected(received: .message(reply)) }
    return socket
}

/// The value of a `Link` header parameter (`username="…"`).
private func linkParameter(_ name: String, in link: String) -> String? {
    guard let range = link.range(of: "\(name)=\"") else { return nil }
    return link[range.upperBound...].split(separator: "\"", maxSplits: 1).first.map(String.init)
}

/// The `streams` and `sessions` a node's latest heartbeat carried, as `GET /admin/nodes` lists it.
private func advertisedLoad(of nodeId: String, at url: String, admin: (String, String)) async throws -> [Int]? {
    let answer = try await http("GET", url, basic: admin)
    guard answer.status == 200,
          let object = try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any],
          let nodes = object["nodes"] as? [[String: Any]],
          let node = nodes.first(where: { $0["nodeId"] as? String == nodeId }),
          let streams = node["streams"] as? Int, let sessions = node["sessions"] as? Int
    else { return nil }
    return [streams, sessions]
}

/// `unreachableNodes` of a `GET /recordings` answer (nil when the field is absent).
private func unreachableNodes(at url: String, admin: (String, String)) async throws -> [String]? {
    let answer = try await http("GET", url, basic: admin)
    #expect(answer.status == 200, "GET /recordings: \(answer.status) \(answer.body)")
    let object = try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any]
    return object?["unreachableNodes"] as? [String]
}

/// What an operator meets of a running node's defaults, through its HTTP routes.
@Suite("A running node's defaults, through its routes")
struct ServerLifecycleContractTests {
    @Test("a WHIP OPTIONS with a publish token, on a platform whose TURN settings name no lifetime, carries a credential whose username expires 86,400 s after the platform's clock")
    func mintedTURNCredentialsLastADay() async throws {
        let clock = ManualClock()
        var configuration = PlatformServerTests.configuration
        configuration.turn = TURNSettings(secret: "turn-shared-secret", servers: ["turn:turn.example:3478?transport=udp"])
        try await withLifecycleServer(configuration: configuration, clock: clock) { server in
            let answer = try await http("OPTIONS", server.httpURL + "/whip/turn-room",
                                        headers: ["Authorization": "Bearer " + Fixture.token(.publish)])
            #expect(answer.status == 204, "\(answer.status) \(answer.headers)")
            let link = try #require(answer.headers["link"], "no Link header: \(answer.headers)")
            #expect(link.contains("<turn:turn.example:3478?transport=udp>"), "\(link)")
            let username = try #require(linkParameter("username", in: link), "\(link)")
            let expiry = Int((clock.now.timeIntervalSince1970 + 86_400).rounded(.down))
            #expect(username.hasPrefix("\(expiry):"), "username \(username), platform clock \(clock.now.timeIntervalSince1970)")
        }
    }
}

extension Cluster {
    /// One node on a real PostgreSQL, and what other nodes of the cluster would write to it.
    @Suite("A cluster node's membership, change log and node-to-node calls, through its routes and the shared store", .serialized)
    struct ClusterLifecycleContractTests {
        func nodeConfiguration(_ url: PostgresURL, nodeId: String) -> PlatformConfiguration {
            var configuration = PlatformServerTests.configuration
            configuration.database = .postgres(url)
            configuration.nodeId = nodeId
            return configuration
        }

        @Test("a node's heartbeat carries its load: with two authenticated sessions, one of them publishing, GET /admin/nodes lists it with streams 1 and sessions 2, and with 0 and 0 once both said bye")
        func heartbeatsCarryLoad() async throws {
            let url = try PostgresURL(parsing: try TestPostgres.server().newDatabase())
            let configuration = nodeConfiguration(url, nodeId: "node-load")
            try await withLifecycleServer(configuration: configuration) { server in
                let nodesURL = server.httpURL + "/admin/nodes"
                let admin = (configuration.applicationId, configuration.secret)
                let publisher = try await authenticatedSocket(server)
                let published = try await publisher.request(2, .publish(Fixture.publish(Fixture.token(.publish))))
                guard case .published = published.message else { throw TestSocket.Unexpected(received: .message(published)) }
                let viewer = try await authenticatedSocket(server)
                try await eventually("a heartbeat carrying 1 stream and 2 sessions") {
                    try await advertisedLoad(of: "node-load", at: nodesURL, admin: admin) == [1, 2]
                }
                _ = try await publisher.request(3, .bye)
                _ = try await viewer.request(2, .bye)
                await publisher.close()
                await viewer.close()
                try await eventually("a heartbeat carrying no stream and no session") {
                    try await advertisedLoad(of: "node-load", at: nodesURL, admin: admin) == [0, 0]
                }
            }
        }

        @Test("the node prunes change-log entries older than 10 minutes and keeps younger ones: after its prune a reader that had not read an entry written 11 minutes ago is told it missed changes, and a reader past that entry still gets one written 9 minutes ago")
        func changeLogKeepsTenMinutes() async throws {
            let postgres = try TestPostgres.server()
            let url = try PostgresURL(parsing: try postgres.newDatabase())
            try await withLifecycleServer(configuration: nodeConfiguration(url, nodeId: "node-1")) { server in
                let older = try await PostgresPlatformStore.open(url, logger: Logger(label: "test"))
                let younger = try await PostgresPlatformStore.open(url, logger: Logger(label: "test"))
                older.publishChanges(as: "node-older")
                younger.publishChanges(as: "node-younger")
                try await older.apply([.saveRoom(room("r-older"), createdAt: 1)])
                let olderId = try await older.latestChangeId()
                try await younger.apply([.saveRoom(room("r-younger"), createdAt: 2)])
                try postgres.sql("UPDATE change_log SET created_at = now() - interval '11 minutes' WHERE node_id = 'node-older'", database: url.database)
                try postgres.sql("UPDATE change_log SET created_at = now() - interval '9 minutes' WHERE node_id = 'node-younger'", database: url.database)

                await server.platform.pruneChanges()

                var missed: RoomStoreError?
                do throws(RoomStoreError) {
                    _ = try await younger.changes(after: 0, excluding: "reader")
                } catch {
                    missed = error
                }
                if case .missedChanges? = missed {} else { Issue.record("a reader behind the 11-minute-old entry: \(String(describing: missed))") }
                let (_, kept) = try await younger.changes(after: olderId, excluding: "reader")
                #expect(kept.contains(.saveRoom(room("r-younger"), createdAt: 2)), "after the prune: \(kept)")
                await older.close()
                await younger.close()
            }
        }

        @Test("GET /recordings names in unreachableNodes a node the membership holds live whose HTTP port no longer answers, and leaves the field out while every live node answers")
        func unreachableNodesListed() async throws {
            let url = try PostgresURL(parsing: try TestPostgres.server().newDatabase())
            let configuration = nodeConfiguration(url, nodeId: "node-1")
            try await withLifecycleServer(configuration: configuration) { server in
                let recordingsURL = server.httpURL + "/recordings"
                let admin = (configuration.applicationId, configuration.secret)
                #expect(try await unreachableNodes(at: recordingsURL, admin: admin) == nil, "node 1 alone")

                // A node that stopped answering: its last heartbeat still counts it live (within
                // the 3 s expiry), but nothing listens on its HTTP port.
                let other = try await PostgresPlatformStore.open(url, logger: Logger(label: "test"))
                let silentPort = try freeTCPPort()
                let silent = NodeRecord(nodeId: "node-silent", signalingURL: "ws://127.0.0.1:\(silentPort)/ws",
                                        relayAddress: "127.0.0.1:9", startedAt: Int64(Date().timeIntervalSince1970 * 1000))
                var listed: [String]?
                for _ in 0..<5 where listed != ["node-silent"] {
                    try await other.heartbeat(silent)
                    listed = try await unreachableNodes(at: recordingsURL, admin: admin)
                }
                #expect(listed == ["node-silent"])

                try await other.removeNode("node-silent")
                #expect(try await unreachableNodes(at: recordingsURL, admin: admin) == nil, "the node left the membership")
                await other.close()
            }
        }
    }
}
