import Dispatch
import Foundation
import PCastProtocol
@testable import PCastServer
import PCastTestSupport
import Synchronization
import Testing

// MARK: Fixtures

/// A fresh directory under the temporary directory, removed by `remove()`.
private struct ScratchDirectory {
    let url: URL
    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("roomstore-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    func path(_ name: String) -> String { url.appendingPathComponent(name).path }
    func remove() { try? FileManager.default.removeItem(at: url) }
}

private func sequences(_ messages: [ChatMessageDescription]) -> [UInt64] {
    messages.map { $0.sequence ?? 0 }
}

private func openError(_ path: String) -> RoomStoreError? {
    do {
        _ = try RoomStore(path: path)
        return nil
    } catch {
        return error
    }
}

private func isCannotOpen(_ error: RoomStoreError?, path: String) -> Bool {
    if case .cannotOpen(let failedPath, let reason)? = error { return failedPath == path && !reason.isEmpty }
    return false
}

/// Holds the store's connection from another thread, so the persistence's writer blocks on it.
private final class ConnectionHold: Sendable {
    private let acquired = DispatchSemaphore(value: 0)
    private let gate = DispatchSemaphore(value: 0)
    private let releasedByTimeout = Mutex(false)

    init(_ store: RoomStore, timeout: DispatchTimeInterval = .seconds(10)) {
        Thread.detachNewThread { [self] in
            store.database.writeWithoutTransaction { _ in
                acquired.signal()
                if gate.wait(timeout: .now() + timeout) == .timedOut { releasedByTimeout.withLock { $0 = true } }
            }
        }
        acquired.wait()
    }

    func release() { gate.signal() }
    var timedOut: Bool { releasedByTimeout.withLock { $0 } }
}

// MARK: Tests

extension ManyClients {
    @Suite struct RoomStoreTests {
        @Test func roundTripThroughAFileAcrossReopening() throws {
            let directory = try ScratchDirectory()
            defer { directory.remove() }
            // The parent directories do not exist yet.
            let path = directory.path("nested/deeper/rooms.sqlite")

            let fixture = RoundTripFixture()
            do {
                let store = try RoomStore(path: path)
                try store.apply(fixture.groups.flatMap { $0 })
            }
            #expect(FileManager.default.fileExists(atPath: path))

            let reopened = try RoomStore(path: path)
            let snapshot = try reopened.load()
            #expect(snapshot == fixture.expected)
            #expect(try reopened.chatMessages(roomId: "r-b", batchSize: 10, after: nil, before: nil) == fixture.chatOfB)
            #expect(try reopened.chatMessages(roomId: "r-a", batchSize: 10, after: nil, before: nil) == fixture.chatOfA)

            // The connection is set up as documented.
            let pragmas = try reopened.database.read { db in
                (try String.fetchOne(db, sql: "PRAGMA journal_mode"), try Int.fetchOne(db, sql: "PRAGMA synchronous"),
                 try Int.fetchOne(db, sql: "PRAGMA foreign_keys"))
            }
            #expect(pragmas.0 == "wal")
            #expect(pragmas.1 == 1, "synchronous = NORMAL")
            #expect(pragmas.2 == 1, "foreign keys on")
        }

        @Test func emptyStoreLoadsEmpty() throws {
            let store = try RoomStore.inMemory()
            #expect(try store.load() == RoomStoreSnapshot(rooms: [], members: [], sessions: [], lastChatSequence: 0))
            #expect(try store.chatMessages(roomId: "nowhere", batchSize: 100, after: nil, before: nil).isEmpty)
            try store.apply([])
        }

        @Test func savingReplacesInPlace() throws {
            let store = try RoomStore.inMemory()
            try store.apply([
                .saveRoom(room("r-1"), createdAt: 10),
                .saveMember(roomId: "r-1", member("s-1"), joinOrder: 1),
                .appendChat(chat(1, room: "r-1")),
                .saveSession(sessionId: "s-1", resumeKeyHash: "old", roles: [.audience]),
            ])
            var renamed = room("r-1", alias: "new-alias")
            renamed.name = "Renamed"
            var updated = member("s-1", role: .moderator, lastUpdate: 99)
            updated.state = .passive
            try store.apply([
                .saveRoom(renamed, createdAt: 10),
                .saveMember(roomId: "r-1", updated, joinOrder: 4),
                .saveSession(sessionId: "s-1", resumeKeyHash: "new", roles: nil),
            ])
            let snapshot = try store.load()
            #expect(snapshot.rooms == [.init(room: renamed, createdAt: 10)])
            #expect(snapshot.members == [.init(roomId: "r-1", member: updated, joinOrder: 4)], "replacing the room kept its members")
            #expect(snapshot.sessions == [.init(sessionId: "s-1", resumeKeyHash: "new", roles: nil)])
            #expect(try store.chatMessages(roomId: "r-1", batchSize: 10, after: nil, before: nil) == [chat(1, room: "r-1")],
                    "replacing the room kept its chat")

            // Deleting what is not there is a no-op.
            try store.apply([.deleteMember(roomId: "r-1", sessionId: "nobody"), .deleteSession(sessionId: "nobody"),
                             .deleteRoom(roomId: "nowhere")])
            #expect(try store.load() == snapshot)
            try store.apply([.deleteMember(roomId: "r-1", sessionId: "s-1"), .deleteSession(sessionId: "s-1")])
            #expect(try store.load().members.isEmpty)
            #expect(try store.load().sessions.isEmpty)
        }

        @Test func aFailingChangeRollsBackItsWholeList() throws {
            let store = try RoomStore.inMemory()
            try store.apply([.saveRoom(room("r-1", alias: "taken"), createdAt: 1), .appendChat(chat(3, room: "r-1"))])
            let before = try store.load()

            func failure(_ changes: [RoomStoreChange]) -> RoomStoreError? {
                do {
                    try store.apply(changes)
                    return nil
                } catch {
                    return error
                }
            }
            // Alias held by another room.
            let alias = failure([.saveSession(sessionId: "s-1", resumeKeyHash: "h", roles: nil),
                                 .saveRoom(room("r-2", alias: "taken"), createdAt: 2)])
            // Member or chat of a room that does not exist.
            let orphan = failure([.appendChat(chat(1, room: "r-1")), .saveMember(roomId: "r-9", member("s-1"), joinOrder: 1)])
            let orphanChat = failure([.appendChat(chat(2, room: "r-9"))])
            // A message id that is not chat-<n>, and a sequence used already.
            let badId = failure([.appendChat(ChatMessageDescription(messageId: "msg-1", roomId: "r-1", timestamp: 0,
                                                                    from: chat(1, room: "r-1").from, message: "x"))])
            let duplicate = failure([.appendChat(chat(3, room: "r-1", "again"))])
            let outOfRange = failure([.saveMember(roomId: "r-1", member("s-1"), joinOrder: .max)])

            for error in [alias, orphan, orphanChat, badId, duplicate, outOfRange] {
                guard case .io(let message)? = error else {
                    Issue.record("expected an io error, got \(String(describing: error))")
                    continue
                }
                #expect(!message.isEmpty)
            }
            #expect(alias.map { "\($0)" }?.contains("UNIQUE") == true)
            #expect(orphan.map { "\($0)" }?.contains("FOREIGN KEY") == true)
            #expect(try store.load() == before, "nothing of the failed lists was kept")
            #expect(try store.chatMessages(roomId: "r-1", batchSize: 10, after: nil, before: nil) == [chat(3, room: "r-1")])
        }

        @Test func deletingARoomDeletesItsMembersAndChatOnly() throws {
            let store = try RoomStore.inMemory()
            var changes: [RoomStoreChange] = [.saveRoom(room("r-1"), createdAt: 1), .saveRoom(room("r-2"), createdAt: 2)]
            for index in 1...3 {
                changes.append(.saveMember(roomId: "r-1", member("s-\(index)"), joinOrder: UInt64(index)))
                changes.append(.saveMember(roomId: "r-2", member("s-\(index)"), joinOrder: UInt64(index)))
            }
            for sequence in 1...20 as ClosedRange<UInt64> {
                changes.append(.appendChat(chat(sequence, room: sequence.isMultiple(of: 2) ? "r-1" : "r-2")))
            }
            changes.append(.appendChat(chat(21, room: "r-1")))   // the newest message is in the room deleted
            changes.append(.saveSession(sessionId: "s-1", resumeKeyHash: "h", roles: nil))
            try store.apply(changes)
            let r2Chat = try store.chatMessages(roomId: "r-2", batchSize: 100, after: nil, before: nil)
            #expect(r2Chat.count == 10)

            try store.apply([.deleteRoom(roomId: "r-1")])
            let snapshot = try store.load()
            #expect(snapshot.rooms.map(\.room.roomId) == ["r-2"])
            #expect(snapshot.members.map(\.roomId) == ["r-2", "r-2", "r-2"])
            #expect(snapshot.sessions.count == 1, "sessions are not a room's")
            #expect(snapshot.lastChatSequence == 21, "sequences never go back")
            #expect(try store.chatMessages(roomId: "r-1", batchSize: 100, after: nil, before: nil).isEmpty)
            #expect(try store.chatMessages(roomId: "r-2", batchSize: 100, after: nil, before: nil) == r2Chat)
            let rows = try store.database.read { db in
                (try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM chatMessage WHERE roomId = 'r-1'"),
                 try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM member WHERE roomId = 'r-1'"))
            }
            #expect(rows.0 == 0)
            #expect(rows.1 == 0)

            // The room id may be used again, empty.
            try store.apply([.saveRoom(room("r-1"), createdAt: 3), .appendChat(chat(22, room: "r-1"))])
            #expect(try store.chatMessages(roomId: "r-1", batchSize: 100, after: nil, before: nil) == [chat(22, room: "r-1")])
            #expect(try store.load().members.count == 3)
        }

        @Test func historyPaging() throws {
            let store = try RoomStore.inMemory()
            var changes: [RoomStoreChange] = [.saveRoom(room("A"), createdAt: 1), .saveRoom(room("B"), createdAt: 2)]
            var inA: [UInt64] = []
            var inB: [UInt64] = []
            var sequence: UInt64 = 0
            while inA.count < 250 {
                sequence += 1
                // Irregular interleaving: runs of A and of B of different lengths.
                if sequence % 7 == 2 || sequence % 7 == 5 || sequence % 11 == 0 {
                    inB.append(sequence)
                    changes.append(.appendChat(chat(sequence, room: "B")))
                } else {
                    inA.append(sequence)
                    changes.append(.appendChat(chat(sequence, room: "A")))
                }
            }
            try store.apply(changes)
            #expect(inB.count > 50)
            let last = inA.last!

            func page(_ batchSize: Int, after: UInt64? = nil, before: UInt64? = nil, room: String = "A") throws -> [UInt64] {
                sequences(try store.chatMessages(roomId: room, batchSize: batchSize, after: after, before: before))
            }

            // The most recent.
            let recent = try store.chatMessages(roomId: "A", batchSize: 100, after: nil, before: nil)
            #expect(recent == inA.suffix(100).map { chat($0, room: "A") }, "whole messages, oldest first")
            #expect(try page(100, room: "B") == Array(inB.suffix(100)))
            // Before an id.
            let pivot = inA[120]
            #expect(try page(100, before: pivot) == Array(inA.filter { $0 < pivot }.suffix(100)))
            #expect(try page(100, before: inA[30]) == Array(inA.prefix(30)))
            // After an id.
            #expect(try page(100, after: pivot) == Array(inA.filter { $0 > pivot }.prefix(100)))
            #expect(try page(100, after: inA[200]) == Array(inA.suffix(49)))
            // Between, with a limit, and without one.
            let low = inA[40], high = inA[90]
            #expect(try page(10, after: low, before: high) == Array(inA[41..<51]))
            #expect(try page(100, after: low, before: high) == Array(inA[41..<90]))
            #expect(try page(100, after: high, before: low).isEmpty)
            #expect(try page(100, after: low, before: low + 1).isEmpty)
            // An id of the other room works as a position.
            let bPivot = inB[30]
            #expect(try page(5, after: bPivot) == Array(inA.filter { $0 > bPivot }.prefix(5)))

            // Paging backwards until empty collects every message once, in order.
            for batchSize in [100, 7, 1] {
                var collected: [UInt64] = []
                var cursor: UInt64? = nil
                var pages = 0
                while true {
                    let batch = try page(batchSize, before: cursor)
                    if batch.isEmpty { break }
                    #expect(batch == batch.sorted())
                    collected.insert(contentsOf: batch, at: 0)
                    cursor = batch.first
                    pages += 1
                    if pages > 300 { break }
                }
                #expect(collected == inA, "batch size \(batchSize)")
                #expect(pages == (250 + batchSize - 1) / batchSize)
            }
            // And forwards.
            var forwards: [UInt64] = []
            var cursor: UInt64 = 0
            while case let batch = try page(33, after: cursor), !batch.isEmpty {
                forwards += batch
                cursor = batch.last!
            }
            #expect(forwards == inA)

            // Batch size 1.
            #expect(try page(1) == [last])
            #expect(try page(1, after: 0) == [inA[0]])
            #expect(try page(1, before: inA[0]).isEmpty)
            #expect(try page(1, before: last) == [inA[248]])

            // Ids beyond the last, unknown rooms, odd sizes.
            #expect(try page(100, before: last + 10_000) == Array(inA.suffix(100)))
            #expect(try page(100, before: UInt64.max) == Array(inA.suffix(100)))
            #expect(try page(100, after: last).isEmpty)
            #expect(try page(100, after: last + 10_000).isEmpty)
            #expect(try page(100, after: UInt64.max).isEmpty)
            #expect(try page(100, after: UInt64(Int64.max)).isEmpty)
            #expect(try page(100, after: last + 1, before: UInt64.max).isEmpty)
            #expect(try page(100, before: 0).isEmpty)
            #expect(try page(100, after: 0, before: UInt64.max) == Array(inA.prefix(100)))
            #expect(try page(1000) == inA)
            #expect(try page(0).isEmpty)
            #expect(try page(-5).isEmpty)
            #expect(try page(100, room: "C").isEmpty)
            #expect(try page(100, after: 0, room: "").isEmpty)
        }

        @Test func textRoundTripsByteForByte() throws {
            let directory = try ScratchDirectory()
            defer { directory.remove() }
            let path = directory.path("rooms.sqlite")

            var texts = [
                "<script>alert('x')</script><img src=x onerror=\"alert(1)\"><b>bold</b> &amp; &lt;&gt; <!-- -->",
                "👩‍👩‍👧‍👦 🇫🇷 🏳️‍🌈 👍🏽 ❤️ 🫠",
                "e\u{301}",   // decomposed: must not come back as the precomposed é (Swift's == would not tell)
                "é",
                "\u{FEFF}BOM \u{200B}zero width \u{202E}right to left\u{202C} \u{FFFF}\u{FFFE}\u{10FFFF} \u{E000}",
                #"'single' "double" \ \\ \n \" \u0000 `back` ; DROP TABLE chatMessage; -- ?1 :name @p $x %s %@ {0}"#,
                "\t\r\n\u{1}\u{1B}[31m\u{7F}\u{85}\u{2028}\u{2029}",
                "",
                "   ",
                "Ünïcödé ΑΒΓ русский 中文 日本語 한국어 العربية עברית हिन्दी ไทย",
                String(repeating: "a", count: 4096),
                String(repeating: "€", count: 1365) + "a",   // 4096 bytes of 3-byte characters
                String(repeating: "😀", count: 1024),         // 4096 bytes of 4-byte characters
                "a\u{0}b\u{0}",                               // NUL too, although the codec never sends it
            ]
            // Seeded random scalars from all planes (surrogates and NUL excluded).
            var generator = SeededRNG(seed: 0x5EED)
            for _ in 0..<50 {
                var text = ""
                for _ in 0..<Int.random(in: 1...200, using: &generator) {
                    let scalar: Unicode.Scalar? = switch Int.random(in: 0..<4, using: &generator) {
                    case 0: Unicode.Scalar(UInt32.random(in: 1...0x7F, using: &generator))
                    case 1: Unicode.Scalar(UInt32.random(in: 0x80...0xD7FF, using: &generator))
                    case 2: Unicode.Scalar(UInt32.random(in: 0xE000...0xFFFF, using: &generator))
                    default: Unicode.Scalar(UInt32.random(in: 0x10000...0x10FFFF, using: &generator))
                    }
                    if let scalar { text.unicodeScalars.append(scalar) }
                }
                texts.append(text)
            }
            #expect(texts.filter { $0.utf8.count == 4096 }.count == 3)

            let screenName = "<b>\"Zoë\" 🎙️ \\o/</b>"
            let messages = texts.enumerated().map { index, text in
                ChatMessageDescription(messageId: ChatMessageDescription.messageId(sequence: UInt64(index + 1)), roomId: "r-1",
                                       timestamp: Int64(index), from: ChatUser(sessionId: "s-1", screenName: screenName,
                                                                               role: .moderator, lastUpdate: -1),
                                       message: text)
            }
            do {
                let store = try RoomStore(path: path)
                try store.apply([.saveRoom(room("r-1"), createdAt: 0)] + messages.map { .appendChat($0) })
            }
            let store = try RoomStore(path: path)
            let back = try store.chatMessages(roomId: "r-1", batchSize: 1000, after: nil, before: nil)
            try #require(back.count == messages.count)
            for (sent, got) in zip(messages, back) {
                #expect(Array(got.message.utf8) == Array(sent.message.utf8), "message \(sent.messageId)")
                #expect(Array(got.from.screenName.utf8) == Array(screenName.utf8))
                #expect(got == sent)
            }
            // Stored as TEXT of exactly those bytes.
            let stored = try store.database.read { db in
                (try String.fetchAll(db, sql: "SELECT typeof(message) FROM chatMessage ORDER BY sequence"),
                 try Int.fetchAll(db, sql: "SELECT length(CAST(message AS BLOB)) FROM chatMessage ORDER BY sequence"))
            }
            #expect(stored.0 == Array(repeating: "text", count: messages.count))
            #expect(stored.1 == messages.map { $0.message.utf8.count })
        }

        @Test func restartKeepsEverythingAndSequencesContinue() throws {
            let directory = try ScratchDirectory()
            defer { directory.remove() }
            let path = directory.path("data/rooms.sqlite")

            do {
                let store = try RoomStore(path: path)
                try store.apply([.saveRoom(room("r-1"), createdAt: 1), .saveMember(roomId: "r-1", member("s-1"), joinOrder: 1),
                                 .saveSession(sessionId: "s-1", resumeKeyHash: "h1", roles: nil)])
                try store.apply((1...40 as ClosedRange<UInt64>).map { .appendChat(chat($0, room: "r-1")) })
            }
            // First restart: continue where the store left off.
            do {
                let store = try RoomStore(path: path)
                let snapshot = try store.load()
                #expect(snapshot.lastChatSequence == 40)
                #expect(snapshot.members.last?.joinOrder == 1)
                let next = snapshot.lastChatSequence + 1
                try store.apply([.saveMember(roomId: "r-1", member("s-2"), joinOrder: 2), .deleteSession(sessionId: "s-1"),
                                 .saveSession(sessionId: "s-2", resumeKeyHash: "h2", roles: [.audience])])
                try store.apply((next..<next + 10).map { .appendChat(chat($0, room: "r-1")) })
            }
            // Second restart: both generations are there.
            let store = try RoomStore(path: path)
            let snapshot = try store.load()
            #expect(snapshot.lastChatSequence == 50)
            #expect(snapshot.members.map(\.member.sessionId) == ["s-1", "s-2"])
            #expect(snapshot.sessions == [.init(sessionId: "s-2", resumeKeyHash: "h2", roles: [.audience])])
            let all = try store.chatMessages(roomId: "r-1", batchSize: 100, after: nil, before: nil)
            #expect(sequences(all) == Array(1...50))
            // The migration ran once.
            let migrations = try store.database.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") }
            #expect(migrations == ["v1", "v2-node", "v3-stream", "v4-audit"])
        }

        // MARK: Opening failures

        @Test func aDirectoryThatCannotBeCreatedIsCannotOpen() throws {
            let directory = try ScratchDirectory()
            defer { directory.remove() }
            let file = directory.path("plain-file")
            try Data("not a directory".utf8).write(to: URL(fileURLWithPath: file))
            let path = file + "/sub/rooms.sqlite"
            let error = openError(path)
            #expect(isCannotOpen(error, path: path), "\(String(describing: error))")
            #expect("\(error.map { "\($0)" } ?? "")".contains(path))
        }

        @Test func aFileThatIsNotADatabaseIsCannotOpen() throws {
            let directory = try ScratchDirectory()
            defer { directory.remove() }
            let path = directory.path("rooms.sqlite")
            try Data(String(repeating: "This is a text file, not an SQLite database.\n", count: 100).utf8)
                .write(to: URL(fileURLWithPath: path))
            let error = openError(path)
            #expect(isCannotOpen(error, path: path), "\(String(describing: error))")
            // The file is left as it was.
            #expect(try String(contentsOfFile: path, encoding: .utf8).hasPrefix("This is a text file"))
        }

        @Test func aCorruptHeaderIsCannotOpen() throws {
            let directory = try ScratchDirectory()
            defer { directory.remove() }
            let path = directory.path("rooms.sqlite")
            do {
                let store = try RoomStore(path: path)
                try store.apply([.saveRoom(room("r-1"), createdAt: 1)])
            }
            let handle = try #require(FileHandle(forUpdatingAtPath: path))
            try handle.write(contentsOf: Data(repeating: 0xA5, count: 100))
            try handle.close()
            try? FileManager.default.removeItem(atPath: path + "-wal")
            try? FileManager.default.removeItem(atPath: path + "-shm")
            let error = openError(path)
            #expect(isCannotOpen(error, path: path), "\(String(describing: error))")
        }

        @Test func aDirectoryInPlaceOfTheFileIsCannotOpen() throws {
            let directory = try ScratchDirectory()
            defer { directory.remove() }
            let path = directory.path("rooms.sqlite")
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            let error = openError(path)
            #expect(isCannotOpen(error, path: path), "\(String(describing: error))")
        }

        @Test func aDatabaseFromANewerVersionIsRefused() throws {
            let directory = try ScratchDirectory()
            defer { directory.remove() }
            let path = directory.path("rooms.sqlite")
            do {
                let store = try RoomStore(path: path)
                try store.database.write { db in try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v99')") }
            }
            let error = openError(path)
            guard case .migration(let message)? = error else {
                Issue.record("expected a migration error, got \(String(describing: error))")
                return
            }
            #expect(message.contains("newer"))
        }

        // MARK: RoomPersistence

        @Test func persistenceKeepsEachSubmittersOrder() async throws {
            let directory = try ScratchDirectory()
            defer { directory.remove() }
            let path = directory.path("rooms.sqlite")
            let submitters = 5, perSubmitter = 1_000
            let errors = Mutex<[RoomStoreError]>([])

            /// Submitter k's changes: its room, then chat, member and session updates, with the room deleted
            /// and created again half way. Any reordering shows: a change moved before the room's creation or
            /// between the deletion and the re-creation fails, and the chat kept is exactly what followed it.
            func plan(_ k: Int) -> [RoomStoreChange] {
                let roomId = "room-\(k)"
                var changes: [RoomStoreChange] = [.saveRoom(room(roomId), createdAt: Int64(k))]
                for i in 1..<perSubmitter {
                    switch i {
                    case 500: changes.append(.deleteRoom(roomId: roomId))
                    case 501: changes.append(.saveRoom(room(roomId), createdAt: Int64(k)))
                    default:
                        switch i % 3 {
                        case 0: changes.append(.appendChat(chat(UInt64(k * perSubmitter + i), room: roomId)))
                        case 1: changes.append(.saveMember(roomId: roomId, member("m-\(k)", lastUpdate: Int64(i)), joinOrder: UInt64(i)))
                        default: changes.append(.saveSession(sessionId: "s-\(k)", resumeKeyHash: "h-\(i)", roles: nil))
                        }
                    }
                }
                return changes
            }

            let submissions: Int
            do {
                let store = try RoomStore(path: path)
                let persistence = RoomPersistence(store: SQLitePlatformStore(store)) { error in errors.withLock { $0.append(error) } }
                submissions = await withTaskGroup(of: Int.self) { group in
                    for k in 0..<submitters {
                        group.addTask {
                            let changes = plan(k)
                            var index = 0, count = 0
                            var generator = SeededRNG(seed: UInt64(k))
                            while index < changes.count {
                                // Submissions of 1 to 4 changes, yielding now and then so the submitters interleave.
                                let size = min(Int.random(in: 1...4, using: &generator), changes.count - index)
                                persistence.submit(Array(changes[index..<index + size]))
                                index += size
                                count += 1
                                if count % 3 == 0 { await Task.yield() }
                            }
                            return count
                        }
                    }
                    return await group.reduce(0, +)
                }
                // Reads see what was submitted before them, flushed or not.
                let seen = try await persistence.chatMessages(roomId: "room-0", batchSize: 100, after: nil, before: nil)
                #expect(seen.last?.sequence == UInt64(999))
                await persistence.flush()
                #expect(persistence.failureCount == 0)
                print("RoomPersistence: \(submitters * perSubmitter) changes in \(submissions) submissions, \(persistence.transactionCount) transactions")
            }
            #expect(errors.withLock { $0 }.isEmpty, "\(errors.withLock { $0 })")

            // Everything is in the file.
            let store = try RoomStore(path: path)
            let snapshot = try store.load()
            #expect(snapshot.rooms.map(\.room.roomId) == (0..<submitters).map { "room-\($0)" })
            for k in 0..<submitters {
                let roomId = "room-\(k)"
                let expectedChat = (502..<perSubmitter).filter { $0 % 3 == 0 }.map { UInt64(k * perSubmitter + $0) }
                let kept = sequences(try store.chatMessages(roomId: roomId, batchSize: 1_000, after: nil, before: nil))
                #expect(kept == expectedChat, "room \(k)")
                #expect(snapshot.members.filter { $0.roomId == roomId }.map(\.member.lastUpdate) == [997])
                #expect(snapshot.sessions.first { $0.sessionId == "s-\(k)" }?.resumeKeyHash == "h-998")
            }
            #expect(snapshot.lastChatSequence == UInt64((submitters - 1) * perSubmitter + 999))
        }

        @Test func persistenceReadsSeeEverySubmissionBeforeThem() async throws {
            let store = try RoomStore.inMemory()
            let persistence = RoomPersistence(store: SQLitePlatformStore(store)) { _ in }
            persistence.submit([.saveRoom(room("r-1"), createdAt: 1)])
            for round in 0..<5 {
                let base = UInt64(round * 100)
                for sequence in base + 1...base + 100 { persistence.submit([.appendChat(chat(sequence, room: "r-1"))]) }
                let page = try await persistence.chatMessages(roomId: "r-1", batchSize: 100, after: nil, before: nil)
                #expect(sequences(page) == Array(base + 1...base + 100), "round \(round)")
                let after = try await persistence.chatMessages(roomId: "r-1", batchSize: 3, after: base + 97, before: nil)
                #expect(sequences(after) == [base + 98, base + 99, base + 100])
            }
            let nothing = try await persistence.chatMessages(roomId: "r-1", batchSize: 0, after: nil, before: nil)
            #expect(nothing.isEmpty)
        }

        @Test func submitDoesNotWaitForTheDiskAndPendingChangesAreBatched() async throws {
            let store = try RoomStore.inMemory()
            let persistence = RoomPersistence(store: SQLitePlatformStore(store)) { _ in }
            persistence.submit([.saveRoom(room("r-1"), createdAt: 1)])
            await persistence.flush()
            let transactionsBefore = persistence.transactionCount

            let hold = ConnectionHold(store)
            let start = ContinuousClock.now
            for sequence in 1...1_000 as ClosedRange<UInt64> { persistence.submit([.appendChat(chat(sequence, room: "r-1"))]) }
            let elapsed = start.duration(to: .now)
            hold.release()
            await persistence.flush()

            #expect(!hold.timedOut, "submit waited for the blocked writer")
            #expect(elapsed < .seconds(2))
            // The writer took the first submission, blocked on the connection, then took the 999 others at once.
            #expect(persistence.transactionCount - transactionsBefore <= 2)
            #expect(persistence.failureCount == 0)
            #expect(sequences(try store.chatMessages(roomId: "r-1", batchSize: 1_000, after: nil, before: nil)) == Array(1...1_000))
        }

        @Test func persistenceReportsFailuresAndKeepsGoing() async throws {
            let store = try RoomStore.inMemory()
            let reports = Mutex<[RoomStoreError]>([])
            let persistence = RoomPersistence(store: SQLitePlatformStore(store)) { error in
                reports.withLock { $0.append(error) }
            }
            // Pending together, so they meet in one batch.
            let hold = ConnectionHold(store)
            persistence.submit([.saveRoom(room("r-1"), createdAt: 1)])
            persistence.submit([.appendChat(chat(1, room: "r-1"))])
            persistence.submit([.appendChat(chat(2, room: "r-1")), .saveMember(roomId: "nowhere", member("s-1"), joinOrder: 1)])
            persistence.submit([.appendChat(chat(3, room: "r-1"))])
            persistence.submit([.appendChat(chat(3, room: "r-1", "duplicate"))])
            persistence.submit([.saveMember(roomId: "r-1", member("s-1"), joinOrder: 1)])
            hold.release()
            await persistence.flush()

            #expect(persistence.failureCount == 2)
            let received = reports.withLock { $0 }
            #expect(received.count == 2)
            for report in received {
                if case .io = report {} else { Issue.record("expected io, got \(report)") }
            }
            // The failed submissions left nothing (chat 2 went with its bad member); the others are all there.
            #expect(sequences(try store.chatMessages(roomId: "r-1", batchSize: 10, after: nil, before: nil)) == [1, 3])
            #expect(try store.chatMessages(roomId: "r-1", batchSize: 10, after: 2, before: nil).first?.message == "message 3 in r-1")
            #expect(try store.load().members.map(\.member.sessionId) == ["s-1"])

            // And later submissions still go through.
            persistence.submit([.appendChat(chat(4, room: "r-1"))])
            let page = try await persistence.chatMessages(roomId: "r-1", batchSize: 10, after: 3, before: nil)
            #expect(sequences(page) == [4])
            #expect(persistence.failureCount == 2)
        }

        @Test func readErrorsReachTheCaller() async throws {
            let store = try RoomStore.inMemory()
            try await store.database.write { db in try db.execute(sql: "DROP TABLE chatMessage") }
            let persistence = RoomPersistence(store: SQLitePlatformStore(store)) { _ in }
            await #expect(throws: RoomStoreError.self) {
                _ = try await persistence.chatMessages(roomId: "r-1", batchSize: 10, after: nil, before: nil)
            }
        }

        @Test func submittedChangesAreWrittenWhenThePersistenceIsDropped() async throws {
            let store = try RoomStore.inMemory()
            do {
                let persistence = RoomPersistence(store: SQLitePlatformStore(store)) { _ in }
                persistence.submit([.saveRoom(room("r-1"), createdAt: 1)])
                for sequence in 1...100 as ClosedRange<UInt64> { persistence.submit([.appendChat(chat(sequence, room: "r-1"))]) }
            }
            let deadline = ContinuousClock.now + .seconds(5)
            while try store.chatMessages(roomId: "r-1", batchSize: 100, after: nil, before: nil).count < 100, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(try store.chatMessages(roomId: "r-1", batchSize: 100, after: nil, before: nil).count == 100)
        }

        // MARK: Figures (printed, not asserted)

        @Test func measurements() async throws {
            let directory = try ScratchDirectory()
            defer { directory.remove() }
            let store = try RoomStore(path: directory.path("rooms.sqlite"))
            let rooms = 10, total = 100_000
            try store.apply((0..<rooms).map { .saveRoom(room("m-\($0)"), createdAt: Int64($0)) })
            let fill = ContinuousClock.now
            try await store.database.write { db in
                try db.execute(sql: """
                    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
                    INSERT INTO chatMessage (sequence, roomId, timestamp, from_sessionId, from_screenName, from_role,
                                             from_lastUpdate, message)
                    SELECT i, 'm-' || (i % ?), i, 's-1', 'Name', 'participant', 0, printf('message %d with some text', i) FROM n
                    """, arguments: [total, rooms])
            }
            let fillTime = fill.duration(to: .now)

            func median(_ runs: Int, _ body: () throws -> Void) rethrows -> Duration {
                var times: [Duration] = []
                for _ in 0..<runs {
                    let start = ContinuousClock.now
                    try body()
                    times.append(start.duration(to: .now))
                }
                return times.sorted()[runs / 2]
            }
            var sizes: Set<Int> = []
            let recent = try median(21) {
                sizes.insert(try store.chatMessages(roomId: "m-3", batchSize: 100, after: nil, before: nil).count)
            }
            let middle = try median(21) {
                sizes.insert(try store.chatMessages(roomId: "m-3", batchSize: 100, after: nil, before: 50_003).count)
            }
            let forwards = try median(21) {
                sizes.insert(try store.chatMessages(roomId: "m-3", batchSize: 100, after: 20_000, before: nil).count)
            }
            #expect(sizes == [100])

            let count = 1_000
            var next = UInt64(total)
            func messages() -> [ChatMessageDescription] {
                defer { next += UInt64(count) }
                return (1...count).map { chat(next + UInt64($0), room: "m-0", "a chat message of ordinary length, 🙂") }
            }
            let single = ContinuousClock.now
            for message in messages() { try store.apply([.appendChat(message)]) }
            let singleTime = single.duration(to: .now)
            let batched = ContinuousClock.now
            try store.apply(messages().map { .appendChat($0) })
            let batchedTime = batched.duration(to: .now)
            let persistence = RoomPersistence(store: SQLitePlatformStore(store)) { _ in }
            let behind = ContinuousClock.now
            for message in messages() { persistence.submit([.appendChat(message)]) }
            let submitTime = behind.duration(to: .now)
            await persistence.flush()
            let behindTime = behind.duration(to: .now)

            func ms(_ duration: Duration) -> String {
                let ms = Double(duration.components.seconds) * 1e3 + Double(duration.components.attoseconds) / 1e15
                return String(format: "%.3f ms", ms)
            }
            print("""
                RoomStore figures (\(total) messages in \(rooms) rooms, filled in \(ms(fillTime))):
                  100-message page, most recent:   \(ms(recent)) (median of 21)
                  100-message page, before middle: \(ms(middle))
                  100-message page, after:         \(ms(forwards))
                  \(count) chats, one transaction each: \(ms(singleTime))
                  \(count) chats, one transaction:      \(ms(batchedTime))
                  \(count) chats through RoomPersistence: submit \(ms(submitTime)), on disk after \(ms(behindTime)) \
                (\(persistence.transactionCount) transactions)
                """)
        }
    }
}

