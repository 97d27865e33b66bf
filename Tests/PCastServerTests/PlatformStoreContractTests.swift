import Foundation
import Logging
import PCastProtocol
@testable import PCastServer
import PCastTestSupport
import Testing

// The store protocol's contract, run against both back ends: SQLite (a file of its own per test)
// and PostgreSQL (a real server started by scripts/postgres.sh, a database of its own per test).

enum StoreBackend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite, postgres
    var testDescription: String { rawValue }
}

/// One test's store location, and opening it (again: a reopened store sees what the first wrote).
struct StoreUnderTest: Sendable {
    let backend: StoreBackend
    let location: DatabaseLocation

    init(_ backend: StoreBackend) throws {
        self.backend = backend
        switch backend {
        case .sqlite:
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("store-contract-\(UUID().uuidString)")
            location = .sqlite(path: directory.appendingPathComponent("rooms.sqlite").path)
        case .postgres:
            location = .postgres(try PostgresURL(parsing: try TestPostgres.server().newDatabase()))
        }
    }

    func open() async throws -> any PlatformStore {
        try await PlatformStores.open(location, logger: Logger(label: "test.store"))
    }

    /// Marks the schema as written by a later version of PCastKit.
    func markNewer() async throws {
        switch location {
        case .sqlite(let path):
            let store = try RoomStore(path: path)
            try await store.database.write { db in
                try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v999-from-the-future')")
            }
        case .postgres(let url):
            try TestPostgres.server().sql("UPDATE pcast_schema SET version = 999", database: url.database)
        }
    }
}

private func failure(_ store: any PlatformStore, _ changes: [RoomStoreChange]) async -> RoomStoreError? {
    do throws(RoomStoreError) {
        try await store.apply(changes)
        return nil
    } catch {
        return error
    }
}

extension Cluster {
    @Suite("The store protocol, on SQLite and on a real PostgreSQL")
    struct PlatformStoreContractTests {
        @Test("what is stored comes back, ordered as documented, after reopening", arguments: StoreBackend.allCases)
        func roundTrip(_ backend: StoreBackend) async throws {
            let under = try StoreUnderTest(backend)
            let fixture = RoundTripFixture()
            do {
                let store = try await under.open()
                #expect(try await store.load() == RoomStoreSnapshot(), "a new store is empty")
                try await store.apply(groups: fixture.groups)
                await store.close()
            }
            let reopened = try await under.open()
            #expect(try await reopened.load() == fixture.expected)
            #expect(try await reopened.chatMessages(roomId: "r-b", batchSize: 10, after: nil, before: nil) == fixture.chatOfB)
            #expect(try await reopened.chatMessages(roomId: "r-a", batchSize: 10, after: nil, before: nil) == fixture.chatOfA)
            #expect(await reopened.isReachable())
            await reopened.close()
        }

        @Test("the audit log: entries come back newest first with ascending sequences, as many as asked, texts cut at 512 characters, after reopening", arguments: StoreBackend.allCases)
        func auditLog(_ backend: StoreBackend) async throws {
            let under = try StoreUnderTest(backend)
            let written = [
                AuditEntry(time: 1_000, nodeId: "node-a", actor: "anonymous", remoteAddress: "198.18.0.7", action: "GET /admin/nodes",
                           outcome: "refused", detail: "no admin credentials"),
                AuditEntry(time: 2_000, nodeId: "node-b", actor: "admin", remoteAddress: "127.0.0.1", action: "POST /admin/streams/s-1/end",
                           outcome: "done", detail: "stream s-1 ended as censored"),
                AuditEntry(time: 3_000, nodeId: "node-a", actor: "token", remoteAddress: "::1", action: "POST /admin/streams/" + String(repeating: "x", count: 900),
                           outcome: "failed", detail: String(repeating: "é", count: 600)),
            ]
            do {
                let store = try await under.open()
                #expect(try await store.auditEntries(limit: 10).isEmpty)
                for entry in written { try await store.appendAudit(entry) }
                let latest = try await store.auditEntries(limit: 2)
                #expect(latest.map(\.time) == [3_000, 2_000])
                await store.close()
            }
            let reopened = try await under.open()
            let all = try await reopened.auditEntries(limit: 10)
            #expect(all.map(\.time) == [3_000, 2_000, 1_000])
            let sequences = all.compactMap(\.sequence)
            #expect(sequences.count == 3 && sequences == sequences.sorted(by: >))
            var expected = written.reversed().map { $0 }
            for index in expected.indices { expected[index].sequence = all[index].sequence }
            expected[0].action = String(expected[0].action.prefix(AuditEntry.textLimit))
            expected[0].detail = String(repeating: "é", count: AuditEntry.textLimit)
            #expect(all == expected)
            await reopened.close()
        }

        @Test("saving replaces in place (a room keeps its members and chat); deleting what is not there is a no-op", arguments: StoreBackend.allCases)
        func replaceAndDelete(_ backend: StoreBackend) async throws {
            let store = try await StoreUnderTest(backend).open()
            try await store.apply([
                .saveRoom(room("r-1"), createdAt: 10), .saveMember(roomId: "r-1", member("s-1"), joinOrder: 1),
                .appendChat(chat(1, room: "r-1")), .saveSession(sessionId: "s-1", resumeKeyHash: "old", roles: [.audience]),
            ])
            var renamed = room("r-1", alias: "new-alias")
            renamed.name = "Renamed"
            var updated = member("s-1", role: .moderator, lastUpdate: 99)
            updated.state = .passive
            try await store.apply([
                .saveRoom(renamed, createdAt: 10), .saveMember(roomId: "r-1", updated, joinOrder: 4),
                .saveSession(sessionId: "s-1", resumeKeyHash: "new", roles: nil),
            ])
            let snapshot = try await store.load()
            #expect(snapshot.rooms == [.init(room: renamed, createdAt: 10)])
            #expect(snapshot.members == [.init(roomId: "r-1", member: updated, joinOrder: 4)])
            #expect(snapshot.sessions == [.init(sessionId: "s-1", resumeKeyHash: "new", roles: nil)])
            #expect(try await store.chatMessages(roomId: "r-1", batchSize: 10, after: nil, before: nil) == [chat(1, room: "r-1")])
            try await store.apply([.deleteMember(roomId: "r-1", sessionId: "nobody"), .deleteSession(sessionId: "nobody"),
                                   .deleteRoom(roomId: "nowhere")])
            #expect(try await store.load() == snapshot)
            try await store.apply([.deleteMember(roomId: "r-1", sessionId: "s-1"), .deleteSession(sessionId: "s-1")])
            let emptied = try await store.load()
            #expect(emptied.members.isEmpty && emptied.sessions.isEmpty)
            await store.close()
        }

        @Test("a failing change (taken alias, unknown room, bad or reused chat id, out-of-range order) is an io error and rolls back its whole list",
              arguments: StoreBackend.allCases)
        func failingChangeRollsBack(_ backend: StoreBackend) async throws {
            let store = try await StoreUnderTest(backend).open()
            try await store.apply([.saveRoom(room("r-1", alias: "taken"), createdAt: 1), .appendChat(chat(3, room: "r-1"))])
            let before = try await store.load()
            let errors = [
                await failure(store, [.saveSession(sessionId: "s-1", resumeKeyHash: "h", roles: nil), .saveRoom(room("r-2", alias: "taken"), createdAt: 2)]),
                await failure(store, [.appendChat(chat(1, room: "r-1")), .saveMember(roomId: "r-9", member("s-1"), joinOrder: 1)]),
                await failure(store, [.appendChat(chat(2, room: "r-9"))]),
                await failure(store, [.appendChat(ChatMessageDescription(messageId: "msg-1", roomId: "r-1", timestamp: 0,
                                                                         from: chat(1, room: "r-1").from, message: "x"))]),
                await failure(store, [.appendChat(chat(3, room: "r-1", "again"))]),
                await failure(store, [.saveMember(roomId: "r-1", member("s-1"), joinOrder: .max)]),
            ]
            for error in errors {
                guard case .io(let message)? = error else {
                    Issue.record("expected an io error, got \(String(describing: error))")
                    continue
                }
                #expect(!message.isEmpty)
            }
            #expect(try await store.load() == before, "nothing of the failed lists was kept")
            #expect(try await store.chatMessages(roomId: "r-1", batchSize: 10, after: nil, before: nil) == [chat(3, room: "r-1")])
            await store.close()
        }

        @Test("deleting a room deletes its members and chat only, and chat sequences never go back", arguments: StoreBackend.allCases)
        func deleteRoomCascades(_ backend: StoreBackend) async throws {
            let store = try await StoreUnderTest(backend).open()
            var changes: [RoomStoreChange] = [.saveRoom(room("r-1"), createdAt: 1), .saveRoom(room("r-2"), createdAt: 2)]
            for index in 1...3 {
                changes.append(.saveMember(roomId: "r-1", member("s-\(index)"), joinOrder: UInt64(index)))
                changes.append(.saveMember(roomId: "r-2", member("s-\(index)"), joinOrder: UInt64(index)))
            }
            for sequence in 1...20 as ClosedRange<UInt64> {
                changes.append(.appendChat(chat(sequence, room: sequence.isMultiple(of: 2) ? "r-1" : "r-2")))
            }
            changes.append(.appendChat(chat(21, room: "r-1")))
            changes.append(.saveSession(sessionId: "s-1", resumeKeyHash: "h", roles: nil))
            try await store.apply(changes)
            let r2Chat = try await store.chatMessages(roomId: "r-2", batchSize: 100, after: nil, before: nil)
            #expect(r2Chat.count == 10)
            try await store.apply([.deleteRoom(roomId: "r-1")])
            let snapshot = try await store.load()
            #expect(snapshot.rooms.map(\.room.roomId) == ["r-2"])
            #expect(snapshot.members.map(\.roomId) == ["r-2", "r-2", "r-2"])
            #expect(snapshot.sessions.count == 1)
            #expect(snapshot.lastChatSequence == 21, "sequences never go back")
            #expect(try await store.chatMessages(roomId: "r-1", batchSize: 100, after: nil, before: nil).isEmpty)
            #expect(try await store.chatMessages(roomId: "r-2", batchSize: 100, after: nil, before: nil) == r2Chat)
            try await store.apply([.saveRoom(room("r-1"), createdAt: 3), .appendChat(chat(22, room: "r-1"))])
            #expect(try await store.chatMessages(roomId: "r-1", batchSize: 100, after: nil, before: nil) == [chat(22, room: "r-1")])
            await store.close()
        }

        @Test("chat history pages: newest batch, after, before, between, empty batches and out-of-range bounds", arguments: StoreBackend.allCases)
        func historyPaging(_ backend: StoreBackend) async throws {
            let store = try await StoreUnderTest(backend).open()
            var changes: [RoomStoreChange] = [.saveRoom(room("A"), createdAt: 1), .saveRoom(room("B"), createdAt: 2)]
            var inA: [UInt64] = []
            for sequence in 1...250 as ClosedRange<UInt64> {
                let target = sequence % 3 == 0 ? "B" : "A"
                if target == "A" { inA.append(sequence) }
                changes.append(.appendChat(chat(sequence, room: target)))
            }
            try await store.apply(changes)
            func page(_ size: Int, after: UInt64? = nil, before: UInt64? = nil) async throws -> [UInt64] {
                try await store.chatMessages(roomId: "A", batchSize: size, after: after, before: before).map { $0.sequence ?? 0 }
            }
            #expect(try await page(10) == Array(inA.suffix(10)), "newest batch, oldest first")
            #expect(try await page(10, after: 100) == Array(inA.filter { $0 > 100 }.prefix(10)))
            #expect(try await page(10, before: 100) == Array(inA.filter { $0 < 100 }.suffix(10)))
            #expect(try await page(100, after: 50, before: 60) == inA.filter { $0 > 50 && $0 < 60 })
            #expect(try await page(1_000) == inA)
            #expect(try await page(0).isEmpty)
            #expect(try await page(-5).isEmpty)
            #expect(try await page(10, after: .max).isEmpty)
            #expect(try await page(10, before: .max) == Array(inA.suffix(10)))
            #expect(try await store.chatMessages(roomId: "nowhere", batchSize: 10, after: nil, before: nil).isEmpty)
            await store.close()
        }

        @Test("chat text comes back byte for byte: NUL, combining and precomposed forms, emoji, 64 KiB", arguments: StoreBackend.allCases)
        func textByteForByte(_ backend: StoreBackend) async throws {
            let store = try await StoreUnderTest(backend).open()
            let texts = ["a\u{0}b", "e\u{301}", "\u{e9}", "👩🏽‍💻 ok", "", "'; DROP TABLE room; --", String(repeating: "x", count: 65_536)]
            var changes: [RoomStoreChange] = [.saveRoom(room("r-1", alias: "ünïcødé 🎉"), createdAt: 1)]
            for (index, text) in texts.enumerated() { changes.append(.appendChat(chat(UInt64(index + 1), room: "r-1", text))) }
            try await store.apply(changes)
            let back = try await store.chatMessages(roomId: "r-1", batchSize: 100, after: nil, before: nil)
            #expect(back.map { Array($0.message.utf8) } == texts.map { Array($0.utf8) })
            #expect(try await store.load().rooms.first?.room.alias == "ünïcødé 🎉")
            await store.close()
        }

        @Test("writes through RoomPersistence keep each submitter's order and reads see every submission before them", arguments: StoreBackend.allCases)
        func persistenceOrder(_ backend: StoreBackend) async throws {
            let store = try await StoreUnderTest(backend).open()
            let persistence = RoomPersistence(store: store) { error in Issue.record("store failure: \(error)") }
            persistence.submit([.saveRoom(room("r-1"), createdAt: 1)])
            for sequence in 1...300 as ClosedRange<UInt64> { persistence.submit([.appendChat(chat(sequence, room: "r-1"))]) }
            let page = try await persistence.chatMessages(roomId: "r-1", batchSize: 1_000, after: nil, before: nil)
            #expect(page.map { $0.sequence ?? 0 } == Array(1...300))
            persistence.submit([.deleteRoom(roomId: "r-1")])
            await persistence.flush()
            #expect(try await store.load().rooms.isEmpty)
            #expect(persistence.failureCount == 0)
            await store.close()
        }

        @Test("node membership: heartbeats insert and update a node, a node silent longer than the window is not live, a removed node is gone",
              arguments: StoreBackend.allCases)
        func nodeMembership(_ backend: StoreBackend) async throws {
            let store = try await StoreUnderTest(backend).open()
            let a = NodeRecord(nodeId: "node-a", signalingURL: "ws://127.0.0.2:8080/ws", relayAddress: "127.0.0.2:10000", startedAt: 1)
            var b = NodeRecord(nodeId: "node-b", signalingURL: "ws://127.0.0.3:8080/ws", relayAddress: "127.0.0.3:10000", startedAt: 2)
            try await store.heartbeat(b)
            try await store.heartbeat(a)
            let both = try await store.liveNodes(within: .seconds(5))
            let all = try await store.liveNodes(within: .seconds(86_400))
            #expect(both.map(\.nodeId) == ["node-a", "node-b"], "live: \(both); all: \(all); now \(Date().timeIntervalSince1970)")
            #expect(both.first?.relayAddress == "127.0.0.2:10000" && both.allSatisfy { $0.heartbeatAt > 1_700_000_000_000 })
            b.streams = 5
            b.sessions = 7
            try await store.heartbeat(b)
            #expect(try await store.liveNodes(within: .seconds(5)).last.map { ($0.streams, $0.sessions) } ?? (0, 0) == (5, 7))
            // node-a falls silent; node-b keeps beating.
            for _ in 0..<6 {
                try await Task.sleep(for: .milliseconds(250))
                try await store.heartbeat(b)
            }
            #expect(try await store.liveNodes(within: .seconds(1)).map(\.nodeId) == ["node-b"])
            try await store.removeNode("node-b")
            try await store.removeNode("nobody")
            #expect(try await store.liveNodes(within: .seconds(5)).map(\.nodeId) == ["node-a"])
            #expect(try await store.liveNodes(within: .seconds(1)).isEmpty)
            await store.close()
        }

        @Test("the stream directory: saved streams come back in publication order after reopening, a save replaces, a stream or all of a node's streams are deleted",
              arguments: StoreBackend.allCases)
        func streamDirectory(_ backend: StoreBackend) async throws {
            let location = try StoreUnderTest(backend)
            let store = try await location.open()
            func stream(_ id: String, _ node: String, _ at: Int64, tags: [String] = []) -> SharedStream {
                SharedStream(streamId: id, nodeId: node, publisherSessionId: "session-\(id)@\(node)", tags: tags,
                             tracks: [MediaTrackDescription(kind: .video, codec: "H264", payloadType: 96, clockRate: 90_000, ssrc: UInt32(at))],
                             publishType: .live, streamName: id == "c" ? "show" : nil, publishedAt: at)
            }
            let a = stream("a", "node-1", 30, tags: ["channelId:x"])
            let b = stream("b", "node-2", 10)
            let c = stream("c", "node-1", 20)
            try await store.apply([.saveStream(a), .saveStream(b), .saveStream(c)])
            #expect(try await store.load().streams == [b, c, a])
            var moved = a
            moved.tags = ["channelId:y", "role:presenter"]
            try await store.apply([.saveStream(moved), .deleteStream(streamId: "nobody", reason: .ended, description: nil)])
            await store.close()
            let reopened = try await location.open()
            #expect(try await reopened.load().streams == [b, c, moved])
            try await reopened.apply([.deleteNodeStreams(nodeId: "node-1", reason: .failed, description: "the node stopped")])
            #expect(try await reopened.load().streams == [b])
            try await reopened.apply([.deleteStream(streamId: "b", reason: .ended, description: nil)])
            #expect(try await reopened.load().streams.isEmpty)
            await reopened.close()
        }

        @Test("a store written by a newer PCastKit is refused with a migration error", arguments: StoreBackend.allCases)
        func newerSchemaRefused(_ backend: StoreBackend) async throws {
            let under = try StoreUnderTest(backend)
            await (try under.open()).close()
            try await under.markNewer()
            do {
                let store = try await under.open()
                Issue.record("opened a store of a newer schema")
                await store.close()
            } catch let error as RoomStoreError {
                guard case .migration(let message) = error else {
                    Issue.record("expected a migration error, got \(error)")
                    return
                }
                #expect(message.contains("newer"))
            }
        }
    }

    @Suite("PostgreSQL store: several nodes, an unreachable or restarted server")
    struct PostgresStoreTests {
        @Test("three nodes opening one new database at once migrate it once and all work")
        func concurrentMigration() async throws {
            let url = try PostgresURL(parsing: try TestPostgres.server().newDatabase())
            let stores = try await withThrowingTaskGroup(of: PostgresPlatformStore.self) { group in
                for _ in 0..<3 { group.addTask { try await PostgresPlatformStore.open(url, logger: Logger(label: "test")) } }
                var opened: [PostgresPlatformStore] = []
                for try await store in group { opened.append(store) }
                return opened
            }
            for (index, store) in stores.enumerated() {
                try await store.apply([.saveRoom(room("r-\(index)"), createdAt: Int64(index))])
            }
            #expect(try await stores[0].load().rooms.map(\.room.roomId) == ["r-0", "r-1", "r-2"])
            for store in stores { await store.close() }
        }

        @Test("the change log: a reader gets other nodes' changes in order, not its own; pruning records how far, so a reader behind it gets a missed-changes error and one past it reads on")
        func changeLogHorizon() async throws {
            let url = try PostgresURL(parsing: try TestPostgres.server().newDatabase())
            let writer = try await PostgresPlatformStore.open(url, logger: Logger(label: "test"))
            let reader = try await PostgresPlatformStore.open(url, logger: Logger(label: "test"))
            writer.publishChanges(as: "node-a")
            reader.publishChanges(as: "node-b")
            try await writer.apply([.saveRoom(room("r-1"), createdAt: 1)])
            try await reader.apply([.saveRoom(room("r-2"), createdAt: 2)])
            try await writer.apply([.saveRoom(room("r-3"), createdAt: 3)])
            let (last, seen) = try await reader.changes(after: 0, excluding: "node-b")
            #expect(seen == [.saveRoom(room("r-1"), createdAt: 1), .saveRoom(room("r-3"), createdAt: 3)])

            try await writer.pruneChanges(olderThan: .zero)
            var missed: RoomStoreError?
            do throws(RoomStoreError) { _ = try await reader.changes(after: 0, excluding: "node-b") } catch { missed = error }
            guard case .missedChanges(let why)? = missed else { Issue.record("a reader behind the pruned log: \(String(describing: missed))"); return }
            #expect(why.contains("restart"), "\(why)")
            try await writer.apply([.saveRoom(room("r-4"), createdAt: 4)])
            let (_, after) = try await reader.changes(after: last, excluding: "node-b")
            #expect(after == [.saveRoom(room("r-4"), createdAt: 4)], "a reader that had read all that was pruned reads on")
            await writer.close()
            await reader.close()
        }

        @Test("an address where no server listens is a typed unavailable error within seconds (2 s timeout), not a hang")
        func unreachable() async throws {
            let port = try freeTCPPort()
            let started = ContinuousClock.now
            do {
                let store = try await PostgresPlatformStore.open(try PostgresURL(parsing: "postgres://pcast@127.0.0.1:\(port)/pcast"),
                                                                 logger: Logger(label: "test"), timeout: .seconds(2))
                Issue.record("opened a store with no server")
                await store.close()
            } catch let error as RoomStoreError {
                guard case .unavailable(let message) = error else {
                    Issue.record("expected unavailable, got \(error)")
                    return
                }
                #expect(message.contains("127.0.0.1:\(port)"))
            }
            #expect(ContinuousClock.now - started < .seconds(10), "\(ContinuousClock.now - started)")
        }

        @Test("a server restart loses nothing committed before it; the store reconnects and writes again within seconds; calls while it is down fail as unavailable")
        func serverRestart() async throws {
            // A server of its own: the other tests of this process keep theirs running.
            let server = try TestPostgres.startPrivate()
            let url = try PostgresURL(parsing: try server.newDatabase())
            let store = try await PostgresPlatformStore.open(url, logger: Logger(label: "test"), timeout: .seconds(3))
            var changes: [RoomStoreChange] = [.saveRoom(room("r-1"), createdAt: 1)]
            for sequence in 1...100 as ClosedRange<UInt64> { changes.append(.appendChat(chat(sequence, room: "r-1"))) }
            try await store.apply(changes)
            try server.stop()
            var down: RoomStoreError?
            do throws(RoomStoreError) {
                try await store.apply([.appendChat(chat(101, room: "r-1"))])
            } catch {
                down = error
            }
            if case .unavailable? = down {} else { Issue.record("a write while the server is down: \(String(describing: down))") }
            #expect(await !store.isReachable())
            try server.resume()
            let back = ContinuousClock.now
            var written = false
            while !written, ContinuousClock.now - back < .seconds(15) {
                do throws(RoomStoreError) {
                    try await store.apply([.appendChat(chat(101, room: "r-1"))])
                    written = true
                } catch {
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            #expect(written, "no write succeeded within 15 s of the server's return")
            print("postgres restart: first write \(ContinuousClock.now - back) after the server was back")
            let messages = try await store.chatMessages(roomId: "r-1", batchSize: 1_000, after: nil, before: nil)
            #expect(messages.map { $0.sequence ?? 0 } == Array(1...101))
            #expect(await store.isReachable())
            await store.close()
        }
    }
}
