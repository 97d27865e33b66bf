import Foundation
import Logging
import PCastProtocol
@testable import PCastServer
import PCastTestSupport
import Testing

extension Cluster {
    /// The node-to-node channel, as a cluster's nodes and an attacker on the path see it.
    @Suite("Node-to-node channel")
    struct ClusterChannelTests {
        let channel = ClusterChannel(nodeId: "node-2", secret: "the-shared-secret")
        let now = Date(timeIntervalSince1970: 1_800_000_000)

        func verify(_ channel: ClusterChannel, path: String = "/cluster/edges", body: Data, headers: [String: String], at time: Date? = nil,
                    replays: ReplayWindow = ReplayWindow()) -> Result<(nodeId: String, signature: Data), ClusterChannelError> {
            channel.verify(method: "POST", path: path, body: body, node: headers[ClusterChannel.nodeHeader], time: headers[ClusterChannel.timeHeader],
                           signature: headers[ClusterChannel.signatureHeader], now: time ?? now, replays: replays)
        }

        @Test("a signed request verifies once; changed body, path, node or time, another secret, a stale time and a replay are refused")
        func signatures() throws {
            let body = Data(#"{"streamId":"stream-1"}"#.utf8)
            let (headers, signature) = channel.headers(method: "POST", path: "/cluster/edges", body: body, now: now)
            let receiver = ClusterChannel(nodeId: "node-1", secret: "the-shared-secret")
            let replays = ReplayWindow()
            let verified = try verify(receiver, body: body, headers: headers, replays: replays).get()
            #expect(verified.nodeId == "node-2" && verified.signature == signature)
            #expect(throws: ClusterChannelError.self) { try verify(receiver, body: body, headers: headers, replays: replays).get() }

            var otherNode = headers
            otherNode[ClusterChannel.nodeHeader] = "node-3"
            var otherTime = headers
            otherTime[ClusterChannel.timeHeader] = String(Int64(now.timeIntervalSince1970 * 1000) + 1)
            var unsigned = headers
            unsigned[ClusterChannel.signatureHeader] = nil
            let refused: [Result<(nodeId: String, signature: Data), ClusterChannelError>] = [
                verify(receiver, body: Data(#"{"streamId":"stream-2"}"#.utf8), headers: headers),
                verify(receiver, path: "/cluster/streams/end", body: body, headers: headers),
                verify(receiver, body: body, headers: otherNode),
                verify(receiver, body: body, headers: otherTime),
                verify(receiver, body: body, headers: unsigned),
                verify(ClusterChannel(nodeId: "node-1", secret: "another-secret"), body: body, headers: headers),
                verify(receiver, body: body, headers: headers, at: now.addingTimeInterval(31)),
                verify(receiver, body: body, headers: headers, at: now.addingTimeInterval(-31)),
            ]
            for result in refused {
                guard case .failure(.unauthenticated) = result else {
                    Issue.record("accepted: \(result)")
                    continue
                }
            }
            #expect((try? verify(receiver, body: body, headers: headers, at: now.addingTimeInterval(29)).get()) != nil, "within the window")
        }

        @Test("a sealed answer opens only for the request it answers and only with the cluster's key")
        func sealing() throws {
            let plain = Data(#"{"clientKey":"secret material"}"#.utf8)
            let request = Data(repeating: 7, count: 32)
            let sealed = try channel.seal(plain, for: request)
            #expect(!String(decoding: sealed, as: UTF8.self).contains("secret material"), "the keys are not readable on the path")
            #expect(try ClusterChannel(nodeId: "node-1", secret: "the-shared-secret").open(sealed, for: request) == plain)
            #expect(throws: ClusterChannelError.self) { try channel.open(sealed, for: Data(repeating: 8, count: 32)) }
            #expect(throws: ClusterChannelError.self) { try ClusterChannel(nodeId: "x", secret: "another-secret").open(sealed, for: request) }
            var tampered = sealed
            tampered[tampered.count / 2] ^= 1
            #expect(throws: ClusterChannelError.self) { try channel.open(tampered, for: request) }
        }

        @Test("a node's /cluster routes: unsigned, forged, stale, replayed and misrouted requests are 401; a malformed body 400; a signed one for a stream it does not have is 404")
        func routes() async throws {
            let url = try PostgresURL(parsing: try TestPostgres.server().newDatabase())
            var configuration = PlatformServerTests.configuration
            configuration.database = .postgres(url)
            configuration.nodeId = "node-1"
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-channel-test-\(UUID().uuidString)")
            configuration.dataDirectory = directory.path
            defer { try? FileManager.default.removeItem(at: directory) }
            var logger = Logger(label: "pcast.test")
            logger.logLevel = .warning
            let server = try await PlatformServer.start(configuration: configuration, relay: RecordingRelay(), logger: logger)
            let base = "http://127.0.0.1:\(server.httpPort)"
            let body = #"{"streamId":"stream-nobody"}"#
            let edge = ClusterChannel(nodeId: "node-2", secret: configuration.secret)

            #expect(try await http("POST", base + "/cluster/edges", body: body).status == 401)
            let forged = ClusterChannel(nodeId: "node-2", secret: "guessed").headers(method: "POST", path: "/cluster/edges", body: Data(body.utf8), now: Date()).headers
            #expect(try await http("POST", base + "/cluster/edges", body: body, headers: forged).status == 401)
            let stale = edge.headers(method: "POST", path: "/cluster/edges", body: Data(body.utf8), now: Date().addingTimeInterval(-120)).headers
            #expect(try await http("POST", base + "/cluster/edges", body: body, headers: stale).status == 401)
            let signed = edge.headers(method: "POST", path: "/cluster/edges", body: Data(body.utf8), now: Date()).headers
            let first = try await http("POST", base + "/cluster/edges", body: body, headers: signed)
            #expect(first.status == 404 && first.body.contains("no stream"), "\(first.status) \(first.body)")
            #expect(try await http("POST", base + "/cluster/edges", body: body, headers: signed).status == 401, "the same request again is a replay")
            // Signed for another route: refused on this one.
            let end = #"{"streamId":"stream-nobody","reason":"censored"}"#
            let endHeaders = edge.headers(method: "POST", path: "/cluster/edges", body: Data(end.utf8), now: Date()).headers
            #expect(try await http("POST", base + "/cluster/streams/end", body: end, headers: endHeaders).status == 401)
            let malformed = edge.headers(method: "POST", path: "/cluster/streams/end", body: Data("{".utf8), now: Date()).headers
            #expect(try await http("POST", base + "/cluster/streams/end", body: "{", headers: malformed).status == 400)
            await server.shutdown()
        }
    }
}
