import Foundation
@testable import PCast
import PCastMedia
import PCastNode
import PCastProtocol
import PCastServer
import PCastTestSupport
import Synchronization
import Testing

/// A started client for a platform, with a token allowing `capabilities`.
func client(_ platform: LocalPlatform, capabilities: [String] = [], reconnects: Bool = true) async throws -> PCast {
    let pcast = PCast(PCastOptions(uri: platform.signalingURL, reconnects: reconnects))
    try await pcast.start(authToken: try platform.token(.auth, capabilities: capabilities))
    return pcast
}

/// Joins `alias` as `role` with a screen name; returns the service and its room.
func member(_ pcast: PCast, _ alias: String, _ name: String, role: MemberRole = .participant) async throws -> (RoomService, Room) {
    let rooms = RoomService(pcast: pcast)
    rooms.selfMember.screenName.setValue(name)
    rooms.selfMember.role.setValue(role)
    let room = try await rooms.joinRoom(alias: alias)
    return (rooms, room)
}

/// Room events one client receives, in order.
final class EventLog: Sendable {
    let events = Values<ServerMessage.RoomEvent>()
    let listener: Disposable
    init(_ pcast: PCast) {
        let events = self.events
        listener = pcast.addEventListener { message in
            if case .roomEvent(let event) = message { events.append(event) }
        }
    }
    func kinds(of sessionId: String) -> [ServerMessage.RoomEvent.Kind] {
        events.all.filter { $0.member?.sessionId == sessionId }.map(\.kind)
    }
}

extension ManyClients {
    @Suite("Rooms, members and roles through the platform", .serialized)
    struct RoomTests {
        @Test("two clients see each other join, publish, change state and leave, in order")
        func joinPublishStateLeave() async throws {
            let platform = try await LocalPlatform.start()
            let a = try await client(platform)
            let b = try await client(platform)
            let log = EventLog(a)
            _ = try await RoomService(pcast: a).createRoom(RoomOptions(name: "Stand-up", type: .multiPartyChat, alias: "standup"))
            let (roomsA, roomA) = try await member(a, "standup", "Ada")
            #expect(roomA.members.value.map(\.screenName.value) == ["Ada"])

            let (roomsB, roomB) = try await member(b, "standup", "Bob")
            #expect(roomB.members.value.map(\.screenName.value) == ["Ada", "Bob"])
            #expect(await eventually { roomA.members.value.count == 2 })
            let bobAtA = try #require(roomA.members.value.first { $0.sessionId == b.sessionId })
            #expect(bobAtA.screenName.value == "Bob" && bobAtA.role.value == .participant)

            // Bob publishes and shares the stream with the room.
            let media = try await stampedMedia()
            let publisher = try await b.publish(streamToken: try platform.token(.publish), mediaStream: media)
            roomsB.selfMember.streams.setValue([roomsB.createStream(uri: "pcast://\(publisher.streamId)", type: .user)])
            try await roomsB.selfMember.commitChanges()
            #expect(await eventually { bobAtA.streams.value.first?.pcastStreamId == publisher.streamId })

            // Bob raises his hand, then leaves.
            roomsB.selfMember.state.setValue(.handRaised)
            try await roomsB.selfMember.commitChanges()
            #expect(await eventually { bobAtA.state.value == .handRaised })
            try await roomsB.leaveRoom()
            #expect(await eventually { roomA.members.value.count == 1 })
            #expect(roomsB.activeRoom.value == nil)

            let bobId = try #require(b.sessionId)
            #expect(log.kinds(of: bobId) == [.memberJoined, .memberUpdated, .memberUpdated, .memberLeft])
            let sequences = log.events.all.map(\.sequence)
            #expect(sequences == sequences.sorted() && Set(sequences).count == sequences.count)
            #expect(log.events.all.last?.member?.state == .offline)

            await publisher.stop()
            await media.stop()
            _ = roomsA
            await a.stop()
            await b.stop()
            await platform.shutdown()
        }

        @Test("audience members are invisible but counted in the estimated size")
        func audienceInvisible() async throws {
            let platform = try await LocalPlatform.start()
            let a = try await client(platform)
            let viewer = try await client(platform)
            _ = try await RoomService(pcast: a).createRoom(RoomOptions(name: "Town hall", type: .townHall, alias: "hall"))
            let (roomsA, roomA) = try await member(a, "hall", "Host", role: .presenter)
            let sizes = Values<Int>()
            let watching = roomA.estimatedSize.subscribe { sizes.append($0) }
            #expect(throws: ObservableError.coldObservable) { try roomA.estimatedSize.getValue() }

            let (roomsV, roomV) = try await member(viewer, "hall", "Quiet", role: .audience)
            #expect(roomV.members.value.map(\.screenName.value) == ["Host"])
            #expect(await eventually { sizes.all.last == 2 })
            #expect(roomA.members.value.map(\.screenName.value) == ["Host"])
            // The audience member's changes reach nobody.
            roomsV.selfMember.screenName.setValue("Still quiet")
            try await roomsV.selfMember.commitChanges()
            let info = try await RoomService(pcast: a).getRoomInfo(alias: "hall")
            #expect(info.members.value.map(\.screenName.value) == ["Host"])
            // Audience members carry no streams.
            roomsV.selfMember.streams.setValue([roomsV.createStream(uri: "pcast://x", type: .user)])
            await #expect(throws: PCastError.self) { try await roomsV.selfMember.commitChanges() }
            _ = (roomsA, watching)
            await a.stop()
            await viewer.stop()
            await platform.shutdown()
        }

        @Test("only moderators destroy rooms or change others; roles need the token's permission")
        func roles() async throws {
            let platform = try await LocalPlatform.start()
            let owner = try await client(platform, capabilities: ["role:moderator", "role:participant"])
            let guest = try await client(platform)
            _ = try await RoomService(pcast: owner).createRoom(RoomOptions(name: "Moderated", type: .moderatedChat, alias: "mod"))
            let (guestRooms, guestRoom) = try await member(guest, "mod", "Guest")

            // A guest cannot destroy the room, nor claim moderator.
            do {
                try await guestRooms.destroyRoom()
                Issue.record("a participant destroyed the room")
            } catch {
                #expect(error.status == .unauthorized)
            }
            let pretender = RoomService(pcast: guest)
            pretender.selfMember.role.setValue(.moderator)
            do {
                try await pretender.joinRoom(alias: "mod")
                Issue.record("a session without role:moderator joined as moderator")
            } catch {
                #expect(error.status == .unauthorized)
            }

            let (ownerRooms, ownerRoom) = try await member(owner, "mod", "Mod", role: .moderator)
            // The moderator changes the guest's state; the guest sees it.
            let guestAtOwner = try #require(ownerRoom.members.value.first { $0.sessionId == guest.sessionId })
            guestAtOwner.state.setValue(.passive)
            try await guestAtOwner.commitChanges()
            #expect(await eventually { guestRooms.selfMember.state.value == .passive })
            // A guest cannot change the moderator.
            let modAtGuest = try #require(guestRoom.members.value.first { $0.sessionId == owner.sessionId })
            modAtGuest.state.setValue(.inactive)
            await #expect(throws: PCastError.self) { try await modAtGuest.commitChanges() }
            modAtGuest.reload()
            #expect(modAtGuest.state.value == .active)

            try await ownerRooms.destroyRoom()
            #expect(await eventually { guestRooms.activeRoom.value == nil })
            do {
                _ = try await RoomService(pcast: guest).getRoomInfo(alias: "mod")
                Issue.record("a destroyed room was found")
            } catch {
                #expect(error.status == .notFound)
            }
            await owner.stop()
            await guest.stop()
            await platform.shutdown()
        }

        @Test("unknown rooms, bad chat and markup: typed errors, text kept verbatim")
        func badInput() async throws {
            let platform = try await LocalPlatform.start()
            let a = try await client(platform)
            let rooms = RoomService(pcast: a)
            for attempt in [{ try await rooms.joinRoom(roomId: "room-does-not-exist") }, { try await rooms.joinRoom(alias: "nowhere") }] {
                do {
                    _ = try await attempt()
                    Issue.record("joined a room that does not exist")
                } catch let error as PCastError {
                    #expect(error.status == .notFound)
                }
            }
            _ = try await rooms.createRoom(RoomOptions(name: "<b>Bold</b>", type: .multiPartyChat, alias: "markup"))
            let (joined, room) = try await member(a, "markup", "<script>alert(1)</script>")
            #expect(room.name.value == "<b>Bold</b>")
            let chat = ChatService(roomService: joined)
            let markup = "<script>alert('x')</script> &amp; \"quotes\" \\ ü 🎉"
            let sent = try await chat.sendMessageToRoom(markup)
            #expect(sent.message == markup && sent.from.screenName == "<script>alert(1)</script>")
            let page = try await chat.getMessages(batchSize: 10)
            #expect(page.map(\.message) == [markup])
            for bad in ["", String(repeating: "x", count: RoomLimits.maximumChatMessageLength + 1)] {
                do {
                    _ = try await chat.sendMessageToRoom(bad)
                    Issue.record("a bad chat message was accepted")
                } catch {
                    #expect(error.status == .badRequest)
                }
            }
            // The connection survived all of it.
            #expect(a.isOnline)
            _ = try await chat.sendMessageToRoom("still here")
            await a.stop()
            await platform.shutdown()
        }
    }
}

extension ManyClients {
    @Suite("Chat through the platform", .serialized)
    struct ChatTests {
        @Test("1,000 messages from 5 senders arrive in the same order at every member, none lost")
        func ordering() async throws {
            let platform = try await LocalPlatform.start()
            let first = try await client(platform)
            let roomId = try await RoomService(pcast: first).createRoom(RoomOptions(name: "Busy", type: .multiPartyChat, alias: "busy")).roomId
            var clients = [first]
            for _ in 0..<5 { clients.append(try await client(platform)) }
            var services: [RoomService] = []
            var received: [Values<String>] = []
            var listeners: [Disposable] = []
            for (index, pcast) in clients.enumerated() {
                let (rooms, _) = try await member(pcast, "busy", "member-\(index)")
                services.append(rooms)
                let seen = Values<String>()
                listeners.append(pcast.addEventListener { message in
                    if case .chatMessage(let chat) = message { seen.append(chat.message.messageId) }
                })
                received.append(seen)
            }
            // Members 1...5 send 200 each, concurrently; a sender's own message comes back as its reply,
            // taken in order with the events by the request's in-order hook.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for sender in 1...5 {
                    let pcast = clients[sender], seen = received[sender]
                    group.addTask {
                        for n in 0..<200 {
                            _ = try await pcast.request(.sendChatMessage(.init(roomId: roomId, message: "s\(sender)-\(n)")), inOrder: { reply in
                                if case .chatMessage(let chat) = reply { seen.append(chat.message.messageId) }
                            })
                        }
                    }
                }
                try await group.waitForAll()
            }
            let everyone = received
            #expect(await eventually { everyone.allSatisfy { $0.all.count == 1000 } })
            let reference = received[0].all
            #expect(Set(reference).count == 1000)
            for seen in received { #expect(seen.all == reference) }
            // Per sender, its messages keep their order.
            let history = try await ChatService(roomService: services[0]).getMessages(batchSize: 100)
            #expect(history.map(\.messageId) == Array(reference.suffix(100)))
            _ = listeners
            for pcast in clients { await pcast.stop() }
            await platform.shutdown()
        }

        @Test("history pages by before and after ids; the observable keeps the most recent batch")
        func history() async throws {
            let platform = try await LocalPlatform.start()
            let a = try await client(platform)
            _ = try await RoomService(pcast: a).createRoom(RoomOptions(name: "Log", type: .multiPartyChat, alias: "log"))
            let (rooms, _) = try await member(a, "log", "Writer")
            let chat = ChatService(roomService: rooms, batchSize: 10)
            var ids: [String] = []
            for n in 0..<250 { ids.append(try await chat.sendMessageToRoom("m\(n)").messageId) }
            let sentIds = ids
            #expect(await eventually { chat.messages.value.map(\.messageId) == Array(sentIds.suffix(10)) })

            // Backwards by `before` until nothing is left: every message once, in order.
            var collected: [String] = []
            var before: String? = nil
            while true {
                let page = try await chat.getMessages(batchSize: 100, beforeMessageId: before)
                if page.isEmpty { break }
                collected = page.map(\.messageId) + collected
                before = page.first?.messageId
            }
            #expect(collected == ids)
            let after = try await chat.getMessages(batchSize: 5, afterMessageId: ids[100])
            #expect(after.map(\.messageId) == Array(ids[101...105]))
            let between = try await chat.getMessages(batchSize: 100, afterMessageId: ids[10], beforeMessageId: ids[20])
            #expect(between.map(\.messageId) == Array(ids[11..<20]))
            // A new chat service starts from the stored history.
            let second = ChatService(roomService: rooms, batchSize: 3)
            _ = second
            await a.stop()
            await platform.shutdown()
        }
    }
}

extension ManyClients {
    @Suite("Platform restart keeps rooms, members and chat", .serialized)
    struct RestartTests {
        @Test("rooms, members' last state and chat survive a restart; clients resume their sessions")
        func survivesRestart() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pcast-restart-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let secret = SRTPFreeRandom.secret()
            // A port outside the ephemeral range, so nothing else takes it while the platform is down.
            var port = Int.random(in: 20_000..<30_000)
            var started: LocalPlatform?
            for _ in 0..<20 where started == nil {
                started = try? await LocalPlatform.start(secret: secret, dataDirectory: directory, httpPort: port)
                if started == nil { port = Int.random(in: 20_000..<30_000) }
            }
            let first = try #require(started)
            let a = try await client(first)
            let b = try await client(first)
            _ = try await RoomService(pcast: a).createRoom(RoomOptions(name: "Durable", type: .multiPartyChat, alias: "durable"))
            let (roomsA, roomA) = try await member(a, "durable", "Ada")
            let (roomsB, _) = try await member(b, "durable", "Bob")
            roomsB.selfMember.state.setValue(.handRaised)
            try await roomsB.selfMember.commitChanges()
            let chat = ChatService(roomService: roomsA)
            for n in 0..<20 { _ = try await chat.sendMessageToRoom("before restart \(n)") }
            let sessionA = try #require(a.sessionId)

            await first.shutdown()
            #expect(await eventually { !a.isOnline && !b.isOnline })
            // The first platform's listening socket may still be closing when its shutdown returns
            // (EADDRINUSE in 2 of the last few full runs): the restart waits for the port, as an
            // operator's would, up to 10 s.
            let portDeadline = ContinuousClock.now + .seconds(10)
            var restarted: LocalPlatform?
            while restarted == nil {
                do {
                    restarted = try await LocalPlatform.start(secret: secret, dataDirectory: directory, httpPort: port)
                } catch where "\(error)".contains("Address already in use") && ContinuousClock.now < portDeadline {
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
            let second = try #require(restarted)
            #expect(await eventually(.seconds(20)) { a.isOnline && b.isOnline })
            // Sessions resumed: same ids, memberships intact, Bob's state as he left it.
            #expect(a.sessionId == sessionA)
            #expect(await eventually { roomsA.activeRoom.value === roomA && roomA.members.value.count == 2 })
            let bob = try #require(roomA.members.value.first { $0.sessionId == b.sessionId })
            #expect(bob.state.value == .handRaised && bob.screenName.value == "Bob")
            let history = try await chat.getMessages(batchSize: 100)
            #expect(history.map(\.message) == (0..<20).map { "before restart \($0)" })
            _ = try await chat.sendMessageToRoom("after restart")
            let info = try await RoomService(pcast: a).getRoomInfo(alias: "durable")
            #expect(info.name.value == "Durable")
            await a.stop()
            await b.stop()
            await second.shutdown()
        }
    }
}
