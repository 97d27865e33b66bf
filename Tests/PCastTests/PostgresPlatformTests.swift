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
    }
}
