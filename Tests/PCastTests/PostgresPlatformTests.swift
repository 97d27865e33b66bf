import Foundation
import PCast
import PCastNode
import PCastServer
import PCastTestSupport
import Testing

extension Cluster {
    @Suite("A platform whose store is a real PostgreSQL", .serialized)
    struct PostgresPlatformTests {
        @Test("chat written while PostgreSQL is down reaches members at once and is stored when it is back; a platform restarted on the database restores the room and all 120 messages in order")
        func chatSurvivesAnOutageAndARestart() async throws {
            let postgres = try TestPostgres.startPrivate()
            let url = try PostgresURL(parsing: try postgres.newDatabase())
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-pg-\(UUID().uuidString)").path
            let secret = SRTPFreeRandom.secret()
            func start() async throws -> LocalPlatform {
                try await LocalPlatform.start(secret: secret, dataDirectory: directory) { $0.database = .postgres(url) }
            }
            var platform = try await start()
            let writer = try await client(platform)
            let reader = try await client(platform)
            _ = try await RoomService(pcast: writer).createRoom(RoomOptions(name: "Durable", type: .multiPartyChat, alias: "durable"))
            let (writerRooms, _) = try await member(writer, "durable", "Writer")
            let (readerRooms, _) = try await member(reader, "durable", "Reader")
            let chat = ChatService(roomService: writerRooms)
            let heard = ChatService(roomService: readerRooms, batchSize: 100)
            var sent: [String] = []
            for n in 0..<40 { sent.append(try await chat.sendMessageToRoom("before \(n)").messageId) }

            try postgres.stop()
            for n in 0..<40 { sent.append(try await chat.sendMessageToRoom("during \(n)").messageId) }
            let live = sent
            #expect(await eventually { heard.messages.value.map(\.messageId).suffix(40) == live.suffix(40) },
                    "members hear chat while the database is down")
            // Longer than a store call's 5 s bound: the writer's first attempt fails as unavailable and it retries.
            try await Task.sleep(for: .seconds(6))
            let (_, ready) = try await httpGet(platform.httpURL + "/readyz")
            #expect(ready.statusCode == 503, "not ready while the database is down")
            try postgres.resume()
            let back = ContinuousClock.now
            let readyURL = platform.httpURL + "/readyz"
            #expect(await eventually(.seconds(60)) { (try? await httpGet(readyURL).1.statusCode) == 200 })
            print("postgres platform: ready again \(ContinuousClock.now - back) after the server was back")
            for n in 0..<40 { sent.append(try await chat.sendMessageToRoom("after \(n)").messageId) }

            await writer.stop()
            await reader.stop()
            await platform.shutdown()   // flushes what is still waiting
            platform = try await start()
            let again = try await client(platform)
            let (rooms, _) = try await member(again, "durable", "Returning")
            let history = try await wholeHistory(rooms)
            #expect(history.map(\.messageId) == sent, "\(history.count) of \(sent.count) messages restored")
            #expect(history.map(\.message).prefix(2) == ["before 0", "before 1"] && history.last?.message == "after 39")
            await again.stop()
            await platform.shutdown()
        }

        @Test("a node whose place in the cluster's change log was pruned (it could not read the log for longer than the log keeps changes) is not ready, and says why")
        func missedChangesAreNotReady() async throws {
            let postgres = try TestPostgres.server()
            let url = try postgres.newDatabase()
            let secret = SRTPFreeRandom.secret()
            let node = try await LocalPlatform.start(secret: secret) { configuration in
                configuration.database = .postgres(try! PostgresURL(parsing: url))
                configuration.nodeId = "node-1"
            }
            let readyURL = node.httpURL + "/readyz"
            #expect(await eventually { (try? await httpGet(readyURL).1.statusCode) == 200 })
            // As if the log had been pruned past everything this node read: its next read finds out.
            try postgres.sql("UPDATE change_log_horizon SET pruned_through = 9223372036854775000", database: String(url.split(separator: "/").last!))
            #expect(await eventually(.seconds(10)) { (try? await httpGet(readyURL).1.statusCode) == 503 })
            let (body, _) = try await httpGet(readyURL)
            let reason = String(decoding: body, as: UTF8.self)
            #expect(reason.contains("missed changes of the cluster") && reason.contains("restart"), "\(reason)")
            await node.shutdown()
        }

        @Test("PostgreSQL down for longer than the node expiry under two nodes: neither node takes the other for dead when it is back; members on both nodes stay in the room, a stream published on node 1 keeps its viewer on node 2, and chat flows across nodes again within seconds")
        func clusterOutliveAnOutage() async throws {
            let postgres = try TestPostgres.startPrivate()
            let nodes = try await clusterNodes(2, on: postgres)
            let one = try await client(nodes[0]), two = try await client(nodes[1])
            _ = try await RoomService(pcast: one).createRoom(RoomOptions(name: "Outage", type: .multiPartyChat, alias: "outage"))
            let (oneRooms, oneRoom) = try await member(one, "outage", "one")
            let (twoRooms, twoRoom) = try await memberEventually(two, "outage", "two")
            #expect(await eventually { oneRoom.members.value.count == 2 && twoRoom.members.value.count == 2 })
            let (publisherSDK, media, publisher) = try await stampedPublisher(on: nodes[0])
            let stream = try await subscribeEventually(two, nodes[1], publisher.streamId)
            let decoded = try StampTap(decoderOf: stream)
            #expect(await eventually { decoded.all.count >= 30 })

            try postgres.stop()
            try await Task.sleep(for: .seconds(6))   // twice the node expiry
            try postgres.resume()
            let back = ContinuousClock.now
            let urls = nodes.map { $0.httpURL + "/readyz" }
            #expect(await eventually(.seconds(60)) {
                for url in urls where (try? await httpGet(url).1.statusCode) != 200 { return false }
                return true
            })
            // Heartbeats on both sides again; then some more, for any sweep to have happened.
            try await Task.sleep(for: .seconds(4))
            print("postgres cluster: both nodes ready \(ContinuousClock.now - back) after the server was back")
            #expect(oneRoom.members.value.count == 2 && twoRoom.members.value.count == 2,
                    "\(oneRoom.members.value.map(\.screenName.value)) / \(twoRoom.members.value.map(\.screenName.value))")
            let count = decoded.all.count
            #expect(await eventually { decoded.all.count >= count + 30 }, "node 2's viewer still watches node 1's stream")
            #expect(stream.endReason == nil && !publisher.hasEnded)
            let heard = ChatService(roomService: twoRooms, batchSize: 100)
            _ = try await ChatService(roomService: oneRooms).sendMessageToRoom("after the outage")
            #expect(await eventually(.seconds(10)) { heard.messages.value.contains { $0.message == "after the outage" } })

            await publisherSDK.stop()
            await media.stop()
            for sdk in [one, two] { await sdk.stop() }
            for node in nodes { await node.shutdown() }
        }
    }
}
