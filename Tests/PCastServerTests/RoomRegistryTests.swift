import Foundation
import PCastProtocol
@testable import PCastServer
import Testing

// The room registry is pure: every test drives it with events and checks the exact actions it
// returns (who gets what, in which order, what is persisted). No sockets, no clocks, no sleeps.

private let start = Date(timeIntervalSince1970: 1_700_000_000)

/// A registry plus the hand-moved time every request uses.
private struct Harness {
    var registry: RoomRegistry
    var now: Date
    private var nextRequestId: UInt64 = 1_000

    init(resumeWindow: TimeInterval = 30, now: Date = start) {
        registry = RoomRegistry(resumeWindow: resumeWindow)
        self.now = now
    }

    init(restoring snapshot: RoomStoreSnapshot, resumeWindow: TimeInterval = 30, now: Date = start) {
        registry = RoomRegistry(restoring: snapshot, resumeWindow: resumeWindow, now: now)
        self.now = now
    }

    var millis: Int64 { Int64((now.timeIntervalSince1970 * 1000).rounded()) }

    mutating func advance(_ seconds: TimeInterval) { now = now.addingTimeInterval(seconds) }

    mutating func open(_ sessions: String..., roles: Set<MemberRole>? = nil) {
        for session in sessions {
            #expect(registry.handle(.sessionOpened(sessionId: session, roles: roles, now: now)).isEmpty)
        }
    }

    @discardableResult
    mutating func request(_ session: String, _ request: RoomRegistry.Request, id: UInt64? = nil,
                          newId: String = "unused-room-id") -> [RoomRegistry.Action] {
        let requestId: UInt64
        if let id { requestId = id } else { nextRequestId += 1; requestId = nextRequestId }
        return registry.handle(.request(sessionId: session, requestId: requestId, request, now: now, newId: newId))
    }

    /// Creates a room and checks it was created.
    @discardableResult
    mutating func create(_ session: String, _ roomId: String, name: String = "Room", type: RoomType = .multiPartyChat,
                         alias: String? = nil) -> RoomDescription? {
        let actions = request(session, .createRoom(.init(name: name, type: type, alias: alias)), newId: roomId)
        #expect(actions.roomInfo?.created == true, "creating \(roomId)")
        return actions.roomInfo?.room
    }

    @discardableResult
    mutating func join(_ session: String, _ roomId: String, role: MemberRole = .participant, state: MemberState = .active,
                       streams: [RoomStreamDescription] = [], screenName: String? = nil, id: UInt64? = nil) -> [RoomRegistry.Action] {
        request(session, .joinRoom(.init(room: .init(roomId: roomId),
                                         member: .init(screenName: screenName ?? "name-\(session)", role: role, state: state, streams: streams))),
                id: id)
    }

    mutating func tick() -> [RoomRegistry.Action] { registry.handle(.tick(now: now)) }

    func member(_ sessionId: String, in roomId: String) -> MemberDescription? {
        registry.members(of: roomId).first { $0.sessionId == sessionId }
    }
}

private typealias Send = (session: String, envelope: Envelope<ServerMessage>)

private extension Array where Element == RoomRegistry.Action {
    var sends: [Send] {
        compactMap { if case .send(let session, let envelope) = $0 { return (session, envelope) } else { return nil } }
    }

    func sends(to session: String) -> [Envelope<ServerMessage>] { sends.filter { $0.session == session }.map(\.envelope) }

    var persisted: [RoomStoreChange] {
        flatMap { action -> [RoomStoreChange] in if case .persist(let changes) = action { return changes } else { return [] } }
    }

    var failure: ServerMessage.Failure? {
        for send in sends { if case .failure(let failure) = send.envelope.message { return failure } }
        return nil
    }

    /// Room events (never replies: events carry no request id), with their recipients, in order.
    var roomEvents: [(session: String, event: ServerMessage.RoomEvent)] {
        sends.compactMap { send in
            guard case .roomEvent(let event) = send.envelope.message else { return nil }
            #expect(send.envelope.id == nil, "an event carries no request id")
            return (send.session, event)
        }
    }

    var roomInfo: ServerMessage.RoomInfo? {
        for send in sends { if case .roomInfo(let info) = send.envelope.message { return info } }
        return nil
    }

    var joined: ServerMessage.JoinedRoom? {
        for send in sends { if case .joinedRoom(let joined) = send.envelope.message { return joined } }
        return nil
    }

    var chats: [(session: String, id: UInt64?, message: ChatMessageDescription)] {
        sends.compactMap { send in
            guard case .chatMessage(let event) = send.envelope.message else { return nil }
            return (send.session, send.envelope.id, event.message)
        }
    }

    var roomSizes: [(session: String, size: ServerMessage.RoomSize)] {
        sends.compactMap { send in
            guard case .roomSize(let size) = send.envelope.message else { return nil }
            return (send.session, size)
        }
    }
}

private func stream(_ id: String, _ type: RoomStreamType = .user) -> RoomStreamDescription {
    RoomStreamDescription(uri: "pcast://\(id)", type: type)
}

extension ManyClients {
    @Suite struct RoomRegistryTests {
        // MARK: Create and look up

        @Test func createGeneratesAnAliasPersistsAndReplies() throws {
            var h = Harness()
            h.open("a")
            let actions = h.request("a", .createRoom(.init(name: "Lobby Room!", type: .multiPartyChat)), id: 1, newId: "room-1a2b")
            let room = RoomDescription(roomId: "room-1a2b", alias: "lobby-room-1a2b", name: "Lobby Room!", description: "", type: .multiPartyChat)
            try #require(actions.count >= 2)
            #expect(actions[0] == .persist([.saveRoom(room, createdAt: h.millis)]))
            #expect(actions[1] == .send(sessionId: "a", Envelope(id: 1, .roomInfo(.init(room: room, members: [], estimatedSize: 0, created: true)))))
            #expect(actions.sends.count == 1)
            #expect(h.registry.room("room-1a2b") == room)
            #expect(h.registry.roomCount == 1)

            // Same name, another id: another alias, another room.
            let second = h.request("a", .createRoom(.init(name: "Lobby Room!", type: .channel, description: "d")), newId: "room-9f")
            #expect(second.roomInfo?.created == true)
            #expect(second.roomInfo?.room.alias == "lobby-room-9f")
            #expect(second.roomInfo?.room.description == "d")
            #expect(h.registry.roomCount == 2)
        }

        @Test func generatedAliasesAreReadableSlugsWithTheIdsHexSuffix() {
            #expect(RoomRegistry.generatedAlias(name: "Lobby", roomId: "room-3f9a1c") == "lobby-3f9a1c")
            #expect(RoomRegistry.generatedAlias(name: "Café Olé", roomId: "r-abcdef0123456789") == "caf-ol-23456789")
            #expect(RoomRegistry.generatedAlias(name: "¡¡¡", roomId: "zz") == "room-zz")
            let long = RoomRegistry.generatedAlias(name: String(repeating: "a", count: 100), roomId: "room-1")
            #expect(long == String(repeating: "a", count: 48) + "-1")
        }

        @Test func creatingAnExistingAliasReturnsTheExistingRoom() throws {
            var h = Harness()
            h.open("a", "b")
            let created = h.create("a", "r-1", name: "Town", type: .townHall, alias: "town")
            let original = try #require(created)
            #expect(original.alias == "town")
            h.join("b", "r-1")
            let bMember = try #require(h.member("b", in: "r-1"))

            let again = h.request("b", .createRoom(.init(name: "Other", type: .channel, alias: "town")), id: 5, newId: "r-2")
            #expect(again == [.send(sessionId: "b", Envelope(id: 5, .roomInfo(.init(room: original, members: [bMember], estimatedSize: 1, created: false))))])
            #expect(again.persisted.isEmpty)
            #expect(h.registry.roomCount == 1)
            #expect(h.registry.room("r-2") == nil)
        }

        @Test func roomInfoByIdOrAliasAndNotFound() throws {
            var h = Harness()
            h.open("a")
            let createdOne = h.create("a", "r-1", name: "One", alias: "one")
            let one = try #require(createdOne)
            let createdTwo = h.create("a", "r-2", name: "Two", alias: "two")
            let two = try #require(createdTwo)

            let byId = h.request("a", .getRoomInfo(.init(roomId: "r-1")), id: 3)
            #expect(byId == [.send(sessionId: "a", Envelope(id: 3, .roomInfo(.init(room: one, members: [], estimatedSize: 0))))])
            #expect(h.request("a", .getRoomInfo(.init(alias: "two"))).roomInfo?.room == two)
            #expect(h.request("a", .getRoomInfo(.init(roomId: "r-1", alias: "two"))).roomInfo?.room == one, "the id wins")
            #expect(h.request("a", .getRoomInfo(.init(roomId: "", alias: "two"))).roomInfo?.room == two, "an empty id is no id")

            for lookup in [ClientMessage.RoomLookup(roomId: "nope"), .init(alias: "nope"), .init(roomId: "nope", alias: "two")] {
                let actions = h.request("a", .getRoomInfo(lookup), id: 9)
                #expect(actions.count == 1)
                #expect(actions.failure?.status == .notFound, "\(lookup)")
                #expect(actions.sends.first?.envelope.id == 9)
            }
        }

        // MARK: Join

        @Test func joinRepliesFirstThenTellsOthersInJoinOrderWithIncreasingSequence() throws {
            var h = Harness()
            h.open("a", "b", "c", "d")
            h.create("a", "r-1")

            let a = h.join("a", "r-1", id: 10)
            let aReply = try #require(a.joined)
            #expect(a.sends.count == 1)
            #expect(a.sends.first?.session == "a")
            #expect(a.sends.first?.envelope.id == 10)
            #expect(aReply.members.map(\.sessionId) == ["a"])
            #expect(aReply.member == MemberDescription(sessionId: "a", screenName: "name-a", role: .participant, lastUpdate: h.millis))
            #expect(aReply.estimatedSize == 1)
            #expect(a.persisted == [.saveMember(roomId: "r-1", aReply.member, joinOrder: 1)])

            let b = h.join("b", "r-1", id: 11)
            try #require(b.count >= 2)
            guard case .send("b", let first) = b[0], first.id == 11, case .joinedRoom(let bReply) = first.message else {
                Issue.record("the joiner's reply must come first: \(b[0])")
                return
            }
            #expect(bReply.members.map(\.sessionId) == ["a", "b"])
            #expect(bReply.estimatedSize == 2)
            #expect(b.roomEvents.map(\.session) == ["a"])
            let bJoined = try #require(b.roomEvents.first?.event)
            #expect(bJoined == .init(roomId: "r-1", sequence: bReply.sequence, kind: .memberJoined, member: bReply.member))
            #expect(bJoined.sequence == aReply.sequence + 1)
            #expect(b.persisted == [.saveMember(roomId: "r-1", bReply.member, joinOrder: 2)])

            let c = h.join("c", "r-1", id: 12)
            guard case .send("c", let cFirst) = c[0], case .joinedRoom(let cReply) = cFirst.message else {
                Issue.record("the joiner's reply must come first: \(c[0])")
                return
            }
            #expect(c.roomEvents.map(\.session) == ["a", "b"])
            #expect(c.roomEvents.allSatisfy { $0.event.kind == .memberJoined && $0.event.member == cReply.member })
            #expect(c.roomEvents.allSatisfy { $0.event.sequence == bJoined.sequence + 1 })
            #expect(cReply.sequence == bJoined.sequence + 1)
            #expect(cReply.members.map(\.sessionId) == ["a", "b", "c"])
            #expect(c.persisted == [.saveMember(roomId: "r-1", cReply.member, joinOrder: 3)])

            // Only attached members hear about it.
            _ = h.registry.handle(.sessionDetached(sessionId: "b", now: h.now))
            let d = h.join("d", "r-1")
            #expect(d.roomEvents.map(\.session) == ["a", "c"])
            #expect(d.roomEvents.allSatisfy { $0.event.sequence == bJoined.sequence + 2 })
            #expect(h.registry.members(of: "r-1").map(\.sessionId) == ["a", "b", "c", "d"])

            // Sequences are per room.
            h.create("a", "r-2")
            let firstInTwo = try #require(h.join("a", "r-2").joined)
            #expect(firstInTwo.sequence <= 1)
            let cInTwo = h.join("c", "r-2")
            #expect(cInTwo.roomEvents.map(\.session) == ["a"])
            #expect(cInTwo.roomEvents.first?.event.sequence == firstInTwo.sequence + 1)
            #expect(cInTwo.roomEvents.first?.event.roomId == "r-2")
        }

        @Test func joiningAgainUpdatesTheMember() throws {
            var h = Harness()
            h.open("a", "b", "c")
            h.create("a", "r-1")
            h.join("a", "r-1")
            h.join("b", "r-1")
            let lastSequence = try #require(h.join("c", "r-1").joined?.sequence)

            h.advance(2)
            let again = h.join("b", "r-1", state: .handRaised, id: 20)
            guard case .send("b", let first) = again.first, first.id == 20, case .joinedRoom(let reply) = first.message else {
                Issue.record("the reply must come first: \(String(describing: again.first))")
                return
            }
            #expect(reply.member.state == .handRaised)
            #expect(reply.member.lastUpdate == h.millis)
            #expect(reply.members.map(\.sessionId) == ["a", "b", "c"])
            #expect(reply.estimatedSize == 3)
            #expect(again.roomEvents.map(\.session) == ["a", "c"])
            #expect(again.roomEvents.allSatisfy {
                $0.event == .init(roomId: "r-1", sequence: lastSequence + 1, kind: .memberUpdated, member: reply.member)
            })
            #expect(again.persisted == [.saveMember(roomId: "r-1", reply.member, joinOrder: 2)])
            #expect(h.registry.members(of: "r-1").map(\.sessionId) == ["a", "b", "c"])
            #expect(h.registry.memberCount == 3)

            // The same model again changes nothing anyone could see.
            h.advance(2)
            let same = h.join("b", "r-1", state: .handRaised)
            #expect(same.roomEvents.isEmpty)
            #expect(same.joined?.member == reply.member, "lastUpdate is kept when nothing changed")
        }

        // MARK: Audience

        @Test func audienceMembersAreInvisibleButCountedInTheSize() throws {
            var h = Harness()
            h.open("a", "aud", "b")
            h.create("a", "r-1")
            let aMember = try #require(h.join("a", "r-1").joined?.member)
            #expect(h.tick().sends.map { $0.session } == ["a"])

            let audJoin = h.join("aud", "r-1", role: .audience, id: 30)
            #expect(audJoin.sends.map(\.session) == ["aud"], "nobody else hears of an audience member")
            let reply = try #require(audJoin.joined)
            #expect(reply.members == [aMember])
            #expect(reply.member.role == .audience)
            #expect(reply.estimatedSize == 2)
            let info = try #require(h.request("a", .getRoomInfo(.init(roomId: "r-1"))).roomInfo)
            #expect(info.members == [aMember])
            #expect(info.estimatedSize == 2)

            // The size goes to every attached member, audience included, on the next tick only.
            let tick = h.tick()
            let size = Envelope<ServerMessage>.event(.roomSize(.init(roomId: "r-1", estimatedSize: 2)))
            #expect(tick == [.send(sessionId: "a", size), .send(sessionId: "aud", size)])
            #expect(h.tick().isEmpty, "unchanged size: nothing sent")

            // Audience members still hear the visible members' changes.
            let bJoin = h.join("b", "r-1")
            #expect(bJoin.roomEvents.map(\.session) == ["a", "aud"])

            // Its own changes go to nobody else.
            let update = h.request("aud", .updateMember(.init(roomId: "r-1", screenName: "lurker", state: .passive)), id: 31)
            #expect(update.sends.map(\.session) == ["aud"])
            #expect(update.roomEvents.isEmpty)
            let rejoin = h.join("aud", "r-1", role: .audience, state: .inactive)
            #expect(rejoin.sends.map(\.session) == ["aud"])

            let leave = h.request("aud", .leaveRoom(.init(roomId: "r-1")), id: 32)
            #expect(leave.sends.count == 1)
            #expect(leave.sends.first?.session == "aud")
            #expect(leave.sends.first?.envelope == Envelope(id: 32, .ok))
            #expect(leave.persisted == [.deleteMember(roomId: "r-1", sessionId: "aud")])

            #expect(h.tick().isEmpty, "b came and aud went: still 2, as last reported")
            h.request("b", .leaveRoom(.init(roomId: "r-1")))
            let one = Envelope<ServerMessage>.event(.roomSize(.init(roomId: "r-1", estimatedSize: 1)))
            #expect(h.tick() == [.send(sessionId: "a", one)])
        }

        @Test func theSizeIsReportedOnlyWhenItChanged() {
            var h = Harness()
            h.open("a", "b")
            h.create("a", "r-1")
            h.join("a", "r-1")
            #expect(h.tick().roomSizes.map(\.size.estimatedSize) == [1])
            #expect(h.tick().isEmpty)
            h.join("b", "r-1", role: .audience)
            let sizes = h.tick().roomSizes
            #expect(sizes.map(\.session) == ["a", "b"])
            #expect(sizes.allSatisfy { $0.size == .init(roomId: "r-1", estimatedSize: 2) })
            // A join and a leave between two ticks: no change to report.
            h.request("b", .leaveRoom(.init(roomId: "r-1")))
            h.join("b", "r-1", role: .audience)
            #expect(h.tick().isEmpty)
        }

        // MARK: Roles

        @Test func theRolesASessionMayTake() throws {
            #expect(!RoomRegistry.defaultRoles.contains(.moderator))
            var h = Harness()
            h.open("owner", "plain")
            h.open("viewer", roles: [.audience])
            h.open("mod", roles: [.moderator])
            h.create("owner", "r-1")

            let refused = h.join("plain", "r-1", role: .moderator, id: 40)
            #expect(refused.count == 1)
            #expect(refused.failure?.status == .unauthorized)
            #expect(refused.sends.first?.envelope.id == 40)
            #expect(!h.registry.isMember("plain"))
            #expect(h.join("plain", "r-1", role: .presenter).joined != nil)

            #expect(h.join("viewer", "r-1", role: .participant).failure?.status == .unauthorized)
            #expect(h.join("viewer", "r-1", role: .presenter).failure?.status == .unauthorized)
            #expect(h.join("viewer", "r-1", role: .audience).joined != nil)

            #expect(h.join("mod", "r-1", role: .participant).failure?.status == .unauthorized, "roles restrict: only moderator")
            #expect(h.join("mod", "r-1", role: .moderator).joined?.member.role == .moderator)
            #expect(h.registry.members(of: "r-1").map(\.sessionId) == ["plain", "viewer", "mod"])

            // Changing one's own role is checked the same way.
            let promote = h.request("plain", .updateMember(.init(roomId: "r-1", role: .moderator)))
            #expect(promote.failure?.status == .unauthorized)
            #expect(h.member("plain", in: "r-1")?.role == .presenter)
            let upgrade = h.request("viewer", .updateMember(.init(roomId: "r-1", role: .participant)))
            #expect(upgrade.failure?.status == .unauthorized)
            #expect(h.member("viewer", in: "r-1")?.role == .audience)
        }

        @Test func streamsNeedTheRightRole() {
            var h = Harness()
            h.open("owner", "aud", "part", "pres")
            h.open("mod", roles: [.moderator, .participant])
            h.create("owner", "r-1")

            let audWithStreams = h.join("aud", "r-1", role: .audience, streams: [stream("s-1")])
            #expect(audWithStreams.failure?.status == .badRequest)
            #expect(audWithStreams.persisted.isEmpty)
            #expect(h.join("part", "r-1", streams: [stream("s-2", .presentation)]).failure?.status == .unauthorized)
            #expect(h.registry.memberCount == 0)

            #expect(h.join("part", "r-1", streams: [stream("s-2"), stream("s-3", .audio)]).joined != nil)
            #expect(h.join("pres", "r-1", role: .presenter, streams: [stream("s-4", .presentation)]).joined != nil)
            #expect(h.join("mod", "r-1", role: .moderator, streams: [stream("s-5", .presentation)]).joined != nil)
            #expect(h.join("aud", "r-1", role: .audience).joined != nil)

            // The same rules on update.
            let present = h.request("part", .updateMember(.init(roomId: "r-1", streams: [stream("s-6", .presentation)])))
            #expect(present.failure?.status == .unauthorized)
            #expect(h.member("part", in: "r-1")?.streams == [stream("s-2"), stream("s-3", .audio)])
            #expect(h.request("aud", .updateMember(.init(roomId: "r-1", streams: [stream("s-7")]))).failure?.status == .badRequest)
            #expect(h.member("aud", in: "r-1")?.streams == [])
            // Becoming a presenter (allowed by the default roles) allows presentation streams.
            let becomePresenter = h.request("part", .updateMember(.init(roomId: "r-1", role: .presenter, streams: [stream("s-6", .presentation)])))
            #expect(becomePresenter.failure == nil)
            #expect(h.member("part", in: "r-1")?.role == .presenter)
        }

        @Test func onlyModeratorsOfTheRoomChangeOthersAndTheRoom() throws {
            var h = Harness()
            h.open("mod", roles: [.moderator, .participant])
            h.open("p1", "p2", "outsider")
            let created = h.millis
            let createdRoom = h.create("mod", "r-1", name: "Before", alias: "mod-room")
            let room = try #require(createdRoom)
            h.join("mod", "r-1", role: .moderator)
            h.join("p1", "r-1")
            let lastSequence = try #require(h.join("p2", "r-1").joined?.sequence)
            let p2 = try #require(h.member("p2", in: "r-1"))

            let refusals: [(String, RoomRegistry.Request)] = [
                ("p1", .destroyRoom(.init(roomId: "r-1"))),
                ("p1", .updateRoom(.init(roomId: "r-1", name: "Hijacked"))),
                ("p1", .updateMember(.init(roomId: "r-1", sessionId: "p2", state: .inactive))),
                ("p1", .updateMember(.init(roomId: "r-1", sessionId: "mod", role: .audience))),
                ("outsider", .updateRoom(.init(roomId: "r-1", name: "Hijacked"))),
                ("outsider", .destroyRoom(.init(roomId: "r-1"))),
                ("outsider", .updateMember(.init(roomId: "r-1", state: .active))),
            ]
            for (session, request) in refusals {
                let actions = h.request(session, request, id: 77)
                #expect(actions.count == 1, "\(session) \(request)")
                #expect(actions.failure?.status == .unauthorized, "\(session) \(request)")
                #expect(actions.sends.first?.session == session)
                #expect(actions.sends.first?.envelope.id == 77)
            }
            #expect(h.registry.room("r-1") == room)
            #expect(h.member("p2", in: "r-1") == p2)
            #expect(h.member("mod", in: "r-1")?.role == .moderator)

            // The moderator changes the room.
            h.advance(5)
            let update = h.request("mod", .updateRoom(.init(roomId: "r-1", name: "After", pin: "4242")), id: 30)
            var renamed = room
            renamed.name = "After"
            renamed.pin = "4242"
            #expect(update.first == .send(sessionId: "mod", Envelope(id: 30, .roomInfo(.init(
                room: renamed, members: h.registry.members(of: "r-1"), estimatedSize: 3)))))
            #expect(update.roomEvents.map(\.session) == ["p1", "p2"])
            #expect(update.roomEvents.allSatisfy { $0.event == .init(roomId: "r-1", sequence: lastSequence + 1, kind: .roomUpdated, room: renamed) })
            #expect(update.persisted == [.saveRoom(renamed, createdAt: created)], "createdAt is kept")

            // …and another member.
            let moderate = h.request("mod", .updateMember(.init(roomId: "r-1", sessionId: "p2", state: .inactive)), id: 31)
            var changed = p2
            changed.state = .inactive
            changed.lastUpdate = h.millis
            #expect(moderate.first == .send(sessionId: "mod", Envelope(id: 31, .memberInfo(.init(member: changed)))))
            #expect(moderate.roomEvents.map(\.session) == ["p1", "p2"], "the target hears of it too")
            #expect(moderate.roomEvents.allSatisfy { $0.event == .init(roomId: "r-1", sequence: lastSequence + 2, kind: .memberUpdated, member: changed) })
            #expect(moderate.persisted == [.saveMember(roomId: "r-1", changed, joinOrder: 3)])

            // Moderator of another room is not moderator of this one.
            h.create("p1", "r-2")
            h.join("p1", "r-2")
            h.join("mod", "r-2", role: .participant)
            #expect(h.request("mod", .destroyRoom(.init(roomId: "r-2"))).failure?.status == .unauthorized)
            #expect(h.request("mod", .updateMember(.init(roomId: "r-2", sessionId: "p1", state: .inactive))).failure?.status == .unauthorized)
            #expect(h.registry.roomCount == 2)

            // The moderator destroys the room.
            let destroy = h.request("mod", .destroyRoom(.init(roomId: "r-1")), id: 40)
            #expect(destroy.first == .send(sessionId: "mod", Envelope(id: 40, .ok)))
            #expect(destroy.roomEvents.map(\.session) == ["p1", "p2"])
            #expect(destroy.roomEvents.allSatisfy { $0.event.kind == .roomDestroyed && $0.event.room == renamed && $0.event.roomId == "r-1" })
            #expect(destroy.persisted == [.deleteRoom(roomId: "r-1")])
            #expect(h.registry.roomCount == 1)
            #expect(h.registry.room("r-1") == nil)
            #expect(h.request("p2", .getRoomInfo(.init(roomId: "r-1"))).failure?.status == .notFound)
            #expect(h.request("p2", .getRoomInfo(.init(alias: "mod-room"))).failure?.status == .notFound)
            #expect(h.request("p2", .leaveRoom(.init(roomId: "r-1"))).failure?.status == .notFound)
            #expect(!h.registry.isMember("p2"))
            #expect(h.registry.isMember("p1"), "still in r-2")
            // The alias is free again.
            #expect(h.request("p2", .createRoom(.init(name: "New", type: .channel, alias: "mod-room")), newId: "r-3").roomInfo?.created == true)
        }

        @Test func aModeratorTurningAParticipantIntoAudience() throws {
            var h = Harness()
            h.open("mod", roles: [.moderator])
            h.open("p1", "p2", "aud")
            h.create("mod", "r-1")
            h.join("mod", "r-1", role: .moderator)
            h.join("p1", "r-1", streams: [stream("s-1")])
            h.join("p2", "r-1")
            let lastSequence = try #require(h.join("aud", "r-1", role: .audience).joined?.sequence)
            let p1 = try #require(h.member("p1", in: "r-1"))

            // An audience member carries no streams, whoever changes it.
            let keepStreams = h.request("mod", .updateMember(.init(roomId: "r-1", sessionId: "p1", role: .audience)))
            #expect(keepStreams.failure?.status == .badRequest)
            #expect(h.member("p1", in: "r-1") == p1)

            h.advance(1)
            let demote = h.request("mod", .updateMember(.init(roomId: "r-1", sessionId: "p1", role: .audience, streams: [])), id: 50)
            var demoted = p1
            demoted.role = .audience
            demoted.streams = []
            demoted.lastUpdate = h.millis
            #expect(demote.first == .send(sessionId: "mod", Envelope(id: 50, .memberInfo(.init(member: demoted)))))
            var gone = demoted
            gone.state = .offline
            let others = demote.roomEvents.filter { $0.session != "p1" }
            #expect(others.map(\.session) == ["p2", "aud"])
            #expect(others.allSatisfy { $0.event == .init(roomId: "r-1", sequence: lastSequence + 1, kind: .memberLeft, member: gone) })
            let own = demote.roomEvents.filter { $0.session == "p1" }
            #expect(own.map(\.event) == [.init(roomId: "r-1", sequence: lastSequence + 1, kind: .memberUpdated, member: demoted)])
            #expect(demote.persisted == [.saveMember(roomId: "r-1", demoted, joinOrder: 2)])

            let info = try #require(h.request("p2", .getRoomInfo(.init(roomId: "r-1"))).roomInfo)
            #expect(info.members.map(\.sessionId) == ["mod", "p2"])
            #expect(info.estimatedSize == 4)

            // And back: the others see it join.
            let promote = h.request("mod", .updateMember(.init(roomId: "r-1", sessionId: "p1", role: .participant)))
            let joins = promote.roomEvents.filter { $0.session != "p1" }
            #expect(joins.map(\.session) == ["p2", "aud"])
            #expect(joins.allSatisfy { $0.event.kind == .memberJoined && $0.event.member?.sessionId == "p1" && $0.event.sequence == lastSequence + 2 })
        }

        @Test func aDirectChatTakesTwoVisibleMembers() {
            var h = Harness()
            h.open("a", "b", "c", "d")
            h.create("a", "dm", type: .directChat)
            #expect(h.join("a", "dm").joined != nil)
            #expect(h.join("b", "dm").joined != nil)
            let third = h.join("c", "dm", id: 60)
            #expect(third.count == 1)
            #expect(third.failure?.status == .capacity)
            #expect(third.sends.first?.envelope.id == 60)
            #expect(h.join("c", "dm", role: .presenter).failure?.status == .capacity)
            #expect(h.join("a", "dm", state: .passive).joined != nil, "a member joining again is no third member")
            #expect(h.join("c", "dm", role: .audience).joined != nil, "audience members are not counted")
            #expect(h.request("c", .updateMember(.init(roomId: "dm", role: .participant))).failure?.status == .capacity)
            #expect(h.member("c", in: "dm")?.role == .audience)

            h.request("b", .leaveRoom(.init(roomId: "dm")))
            let becomeVisible = h.request("c", .updateMember(.init(roomId: "dm", role: .participant)))
            #expect(becomeVisible.failure == nil)
            #expect(becomeVisible.roomEvents.map(\.session) == ["a"])
            #expect(becomeVisible.roomEvents.first?.event.kind == .memberJoined)
            #expect(h.join("d", "dm").failure?.status == .capacity)
        }

        // MARK: Leave

        @Test func leavingTellsTheOthersTheMemberIsOffline() throws {
            var h = Harness()
            h.open("a", "b", "c")
            h.create("a", "r-1")
            h.join("a", "r-1")
            h.join("b", "r-1", state: .handRaised)
            let lastSequence = try #require(h.join("c", "r-1").joined?.sequence)
            var gone = try #require(h.member("b", in: "r-1"))
            gone.state = .offline

            let leave = h.request("b", .leaveRoom(.init(roomId: "r-1")), id: 70)
            #expect(leave.first == .send(sessionId: "b", Envelope(id: 70, .ok)))
            #expect(leave.roomEvents.map(\.session) == ["a", "c"])
            #expect(leave.roomEvents.allSatisfy { $0.event == .init(roomId: "r-1", sequence: lastSequence + 1, kind: .memberLeft, member: gone) })
            #expect(leave.persisted == [.deleteMember(roomId: "r-1", sessionId: "b")])
            #expect(h.registry.members(of: "r-1").map(\.sessionId) == ["a", "c"])
            #expect(!h.registry.isMember("b"))

            let again = h.request("b", .leaveRoom(.init(roomId: "r-1")), id: 71)
            #expect(again.count == 1)
            #expect(again.failure?.status == .notFound)
            #expect(again.sends.first?.envelope.id == 71)
            #expect(h.request("b", .leaveRoom(.init(roomId: "nope"))).failure?.status == .notFound)
        }

        // MARK: Chat

        @Test func chatGoesToEveryAttachedMemberInOneOrder() throws {
            var h = Harness()
            h.open("a", "b", "aud", "d", "e")
            h.create("a", "r-1")
            h.create("a", "r-2")
            h.join("a", "r-1")
            h.join("b", "r-1")
            h.join("aud", "r-1", role: .audience)
            h.join("a", "r-2")
            h.join("d", "r-2")
            let a = try #require(h.member("a", in: "r-1"))

            h.advance(3)
            let first = h.request("a", .sendChatMessage(.init(roomId: "r-1", message: "hello")), id: 80)
            let message = ChatMessageDescription(
                messageId: "chat-1", roomId: "r-1", timestamp: h.millis,
                from: ChatUser(sessionId: "a", screenName: a.screenName, role: .participant, lastUpdate: a.lastUpdate), message: "hello")
            #expect(first.persisted == [.appendChat(message)])
            #expect(first.sends.map(\.session) == ["a", "b", "aud"])
            #expect(first.sends.map(\.envelope) == [
                Envelope(id: 80, .chatMessage(.init(message: message))),
                .event(.chatMessage(.init(message: message))),
                .event(.chatMessage(.init(message: message))),
            ])
            #expect(first.chats.first?.message.sequence == 1)

            // Ids are platform-wide and increasing, across rooms.
            let other = h.request("d", .sendChatMessage(.init(roomId: "r-2", message: "elsewhere")), id: 81)
            #expect(other.chats.map(\.message.messageId) == ["chat-2", "chat-2"])
            #expect(other.chats.map(\.session) == ["a", "d"])
            #expect(other.chats.map(\.id) == [nil, 81])

            let third = h.request("b", .sendChatMessage(.init(roomId: "r-1", message: "again")))
            #expect(third.chats.map(\.message.messageId) == ["chat-3", "chat-3", "chat-3"])
            #expect(third.chats.first?.message.from.sessionId == "b")

            // Only members send; refusals use no id.
            let outsider = h.request("e", .sendChatMessage(.init(roomId: "r-1", message: "let me in")), id: 82)
            #expect(outsider.count == 1)
            #expect(outsider.failure?.status == .unauthorized)
            #expect(outsider.sends.first?.envelope.id == 82)
            #expect(h.request("a", .sendChatMessage(.init(roomId: "nope", message: "?"))).failure?.status == .notFound)
            let fourth = h.request("aud", .sendChatMessage(.init(roomId: "r-1", message: "from the audience")))
            #expect(fourth.chats.map(\.message.messageId) == ["chat-4", "chat-4", "chat-4"])

            // A detached member gets nothing.
            _ = h.registry.handle(.sessionDetached(sessionId: "b", now: h.now))
            let fifth = h.request("a", .sendChatMessage(.init(roomId: "r-1", message: "b is away")))
            #expect(fifth.chats.map(\.session) == ["a", "aud"])
            #expect(fifth.chats.first?.message.messageId == "chat-5")
        }

        @Test func chatHistoryIsAStoreQueryForMembersOnly() {
            var h = Harness()
            h.open("a", "e")
            h.create("a", "r-1")
            h.join("a", "r-1")
            let query = h.request("a", .getChatMessages(.init(roomId: "r-1", batchSize: 25, afterMessageId: "chat-5", beforeMessageId: "chat-9")), id: 90)
            #expect(query == [.queryChat(sessionId: "a", requestId: 90, roomId: "r-1", batchSize: 25, after: 5, before: 9)])
            let latest = h.request("a", .getChatMessages(.init(roomId: "r-1", batchSize: 100)), id: 91)
            #expect(latest == [.queryChat(sessionId: "a", requestId: 91, roomId: "r-1", batchSize: 100, after: nil, before: nil)])

            let outsider = h.request("e", .getChatMessages(.init(roomId: "r-1", batchSize: 10)), id: 92)
            #expect(outsider.count == 1)
            #expect(outsider.failure?.status == .unauthorized)
            #expect(h.request("a", .getChatMessages(.init(roomId: "nope", batchSize: 10))).failure?.status == .notFound)
        }

        // MARK: Detach, resume, expiry

        @Test func aDetachedSessionStaysAMemberUntilItsWindowEnds() throws {
            var h = Harness(resumeWindow: 30)
            h.open("a", "b")
            h.create("a", "r-1")
            h.create("a", "r-2")
            h.join("a", "r-1")
            h.join("b", "r-1")
            h.join("a", "r-2")
            h.join("b", "r-2")
            _ = h.tick()
            let b1 = try #require(h.member("b", in: "r-1"))

            let detached = h.registry.handle(.sessionDetached(sessionId: "b", now: h.now))
            #expect(detached.sends.isEmpty)
            #expect(detached.persisted.isEmpty)
            #expect(h.registry.isMember("b"))

            // Nothing goes to b meanwhile, and b cannot act.
            let update = h.request("a", .updateMember(.init(roomId: "r-1", state: .passive)))
            #expect(update.sends.map(\.session) == ["a"])
            #expect(h.request("b", .getRoomInfo(.init(roomId: "r-1"))).failure?.status == .unauthorized)

            h.advance(29)
            let early = h.tick()
            #expect(early.roomEvents.isEmpty)
            #expect(early.persisted.isEmpty)
            #expect(h.registry.members(of: "r-1").map(\.sessionId) == ["a", "b"])

            h.advance(2)
            let late = h.tick()
            var gone = b1
            gone.state = .offline
            #expect(late.roomEvents.map(\.session) == ["a", "a"])
            #expect(late.roomEvents.allSatisfy { $0.event.kind == .memberLeft && $0.event.member == gone })
            #expect(Set(late.roomEvents.map(\.event.roomId)) == ["r-1", "r-2"])
            #expect(late.persisted.sorted { "\($0)" < "\($1)" } == [.deleteMember(roomId: "r-1", sessionId: "b"), .deleteMember(roomId: "r-2", sessionId: "b")])
            #expect(late.roomSizes.map(\.session) == ["a", "a"])
            #expect(late.roomSizes.allSatisfy { $0.size.estimatedSize == 1 })
            #expect(h.registry.members(of: "r-1").map(\.sessionId) == ["a"])
            #expect(!h.registry.isMember("b"))
            #expect(h.tick().isEmpty)
        }

        @Test func resumingInTimeKeepsTheMemberships() throws {
            var h = Harness(resumeWindow: 30)
            h.open("a", "b")
            h.create("a", "r-1")
            h.join("a", "r-1")
            h.join("b", "r-1")
            _ = h.registry.handle(.sessionDetached(sessionId: "b", now: h.now))
            h.advance(10)
            h.open("b")
            h.advance(100)
            let tick = h.tick()
            #expect(tick.roomEvents.isEmpty)
            #expect(tick.persisted.isEmpty)
            #expect(h.registry.members(of: "r-1").map(\.sessionId) == ["a", "b"])
            let chat = h.request("a", .sendChatMessage(.init(roomId: "r-1", message: "welcome back")))
            #expect(chat.chats.map(\.session) == ["a", "b"])
            #expect(h.request("b", .getRoomInfo(.init(roomId: "r-1"))).roomInfo != nil)
        }

        @Test func endingASessionLeavesAtOnce() throws {
            var h = Harness()
            h.open("a", "b")
            h.create("a", "r-1")
            h.join("a", "r-1")
            let lastSequence = try #require(h.join("b", "r-1").joined?.sequence)
            let ended = h.registry.handle(.sessionEnded(sessionId: "b"))
            #expect(ended.roomEvents.map(\.session) == ["a"])
            #expect(ended.roomEvents.first?.event.kind == .memberLeft)
            #expect(ended.roomEvents.first?.event.member?.state == .offline)
            #expect(ended.roomEvents.first?.event.sequence == lastSequence + 1)
            #expect(ended.persisted == [.deleteMember(roomId: "r-1", sessionId: "b")])
            #expect(!h.registry.isMember("b"))
            #expect(h.request("b", .getRoomInfo(.init(roomId: "r-1"))).failure?.status == .unauthorized)

            // A detached session with no rooms is simply forgotten.
            h.open("c")
            #expect(h.registry.handle(.sessionDetached(sessionId: "c", now: h.now)).isEmpty)
            #expect(h.request("c", .getRoomInfo(.init(roomId: "r-1"))).failure?.status == .unauthorized)
        }

        // MARK: Restore

        @Test func restoringFromASnapshot() throws {
            let room = RoomDescription(roomId: "r-1", alias: "kept", name: "Kept", type: .townHall)
            let a = MemberDescription(sessionId: "a", screenName: "Ada", role: .participant, lastUpdate: 1_600_000_000_500)
            let b = MemberDescription(sessionId: "b", screenName: "Bob", role: .presenter, lastUpdate: 1_600_000_000_100)
            let ghost = MemberDescription(sessionId: "ghost", screenName: "Ghost", role: .participant)
            let snapshot = RoomStoreSnapshot(
                rooms: [.init(room: room, createdAt: 1_600_000_000_000)],
                members: [.init(roomId: "r-1", member: a, joinOrder: 5), .init(roomId: "r-1", member: b, joinOrder: 2),
                          .init(roomId: "no-such-room", member: ghost, joinOrder: 1)],
                sessions: [], lastChatSequence: 41)
            var h = Harness(restoring: snapshot, resumeWindow: 30)

            #expect(h.registry.roomCount == 1)
            #expect(h.registry.room("r-1") == room)
            #expect(h.registry.members(of: "r-1") == [b, a], "join order")
            #expect(h.registry.isMember("a"))
            #expect(h.registry.isMember("b"))
            #expect(!h.registry.isMember("ghost"))
            // Every session is detached until it resumes.
            #expect(h.request("a", .getRoomInfo(.init(roomId: "r-1"))).failure?.status == .unauthorized)

            h.advance(5)
            h.open("a")
            #expect(h.tick().isEmpty, "the size did not change")
            let info = try #require(h.request("a", .getRoomInfo(.init(alias: "kept"))).roomInfo)
            #expect(info.members == [b, a])
            #expect(info.estimatedSize == 2)

            // Chat ids continue after the stored ones.
            let chat = h.request("a", .sendChatMessage(.init(roomId: "r-1", message: "still here")), id: 7)
            #expect(chat.chats.map(\.session) == ["a"], "b is detached")
            #expect(chat.chats.first?.message.messageId == "chat-42")
            #expect(chat.persisted.count == 1)

            // Join orders continue too.
            h.open("c")
            let join = h.join("c", "r-1")
            let c = try #require(join.joined?.member)
            #expect(join.persisted == [.saveMember(roomId: "r-1", c, joinOrder: 6)])
            #expect(join.roomEvents.map(\.session) == ["a"])
            #expect(h.registry.members(of: "r-1").map(\.sessionId) == ["b", "a", "c"])

            // b's window runs from the restore.
            h.advance(24)   // 29 s after the restore
            #expect(h.tick().roomEvents.isEmpty)
            h.advance(2)
            let expired = h.tick()
            var gone = b
            gone.state = .offline
            #expect(expired.roomEvents.map(\.session) == ["a", "c"])
            #expect(expired.roomEvents.allSatisfy { $0.event.kind == .memberLeft && $0.event.member == gone })
            #expect(expired.persisted == [.deleteMember(roomId: "r-1", sessionId: "b")])
            #expect(h.registry.members(of: "r-1").map(\.sessionId) == ["a", "c"])
            #expect(!h.registry.isMember("b"))
        }

        // MARK: Scale

        @Test func aLargeRoomSendsOneEventPerOtherMember() throws {
            let count = 2_000
            var h = Harness()
            h.open("owner")
            h.create("owner", "big")
            var lastJoin: [RoomRegistry.Action] = []
            for index in 0..<count {
                let session = "m-\(index)"
                h.open(session)
                lastJoin = h.join(session, "big")
            }
            #expect(lastJoin.roomEvents.count == count - 1)
            #expect(lastJoin.joined?.members.count == count)
            #expect(h.registry.members(of: "big").count == count)

            let update = h.request("m-1000", .updateMember(.init(roomId: "big", state: .handRaised)), id: 5)
            let events = update.roomEvents
            #expect(events.count == count - 1)
            #expect(Set(events.map(\.session)).count == count - 1)
            #expect(!events.contains { $0.session == "m-1000" })
            #expect(Set(events.map(\.event)).count == 1, "one event, the same for all")
            #expect(update.sends.count == count, "1,999 events and the reply")
            #expect(update.sends.first?.session == "m-1000")
            #expect(update.sends.first?.envelope.id == 5)

            let chat = h.request("m-0", .sendChatMessage(.init(roomId: "big", message: "hi all")))
            #expect(chat.chats.count == count)
        }
    }
}

@Suite("RoomRegistry: changes other nodes made")
struct RoomRegistryRemoteTests {
    private func remote(_ harness: inout Harness, _ changes: RoomStoreChange...) -> [RoomRegistry.Action] {
        harness.registry.handle(.remote(changes))
    }

    @Test("a remote room, member, change, chat and leave reach the local attached members as events, and nothing is persisted again; repeats change nothing")
    func remoteChangesBecomeEvents() {
        var harness = Harness()
        harness.open("s-local", "s-detached")
        let room = RoomDescription(roomId: "r-1", alias: "shared", name: "Shared", description: "", type: .multiPartyChat, bridgeId: "", pin: "")
        #expect(remote(&harness, .saveRoom(room, createdAt: 1)).isEmpty, "a new room tells nobody")
        harness.join("s-local", "r-1")
        harness.join("s-detached", "r-1")
        _ = harness.registry.handle(.sessionDetached(sessionId: "s-detached", now: harness.now))

        let other = MemberDescription(sessionId: "s-9@node-2", screenName: "far", role: .participant, state: .active, streams: [], lastUpdate: 5)
        let joined = remote(&harness, .saveMember(roomId: "r-1", other, joinOrder: 7))
        #expect(joined.roomEvents.map(\.session) == ["s-local"], "attached members only")
        #expect(joined.roomEvents.first?.event.kind == .memberJoined && joined.roomEvents.first?.event.member == other)
        #expect(joined.persisted.isEmpty)
        #expect(remote(&harness, .saveMember(roomId: "r-1", other, joinOrder: 7)).isEmpty, "the same member again: nothing")

        var changed = other
        changed.screenName = "farther"
        let updated = remote(&harness, .saveMember(roomId: "r-1", changed, joinOrder: 7))
        #expect(updated.roomEvents.map { $0.event.kind } == [.memberUpdated])

        let message = ChatMessageDescription(messageId: ChatMessageDescription.messageId(sequence: 42), roomId: "r-1", timestamp: 1,
                                             from: ChatUser(sessionId: other.sessionId, screenName: "farther", role: .participant, lastUpdate: 5),
                                             message: "hello from node 2")
        let chat = remote(&harness, .appendChat(message))
        #expect(chat.chats.map(\.session) == ["s-local"] && chat.chats.first?.message == message && chat.chats.first?.id == nil)
        #expect(chat.persisted.isEmpty)

        let left = remote(&harness, .deleteMember(roomId: "r-1", sessionId: other.sessionId))
        #expect(left.roomEvents.map { $0.event.kind } == [.memberLeft] && left.roomEvents.first?.event.member?.state == .offline)
        #expect(remote(&harness, .deleteMember(roomId: "r-1", sessionId: other.sessionId)).isEmpty)
        #expect(harness.registry.members(of: "r-1").map(\.sessionId) == ["s-local", "s-detached"])
        // A node's resumable sessions are its own.
        #expect(remote(&harness, .saveSession(sessionId: "s-9@node-2", resumeKeyHash: "h", roles: nil)).isEmpty)

        let destroyed = remote(&harness, .deleteRoom(roomId: "r-1"))
        #expect(destroyed.roomEvents.map { $0.event.kind } == [.roomDestroyed])
        #expect(harness.registry.room("r-1") == nil)
    }

    @Test("another node removing a member of a session here (it took this node for gone) removes nothing: the member stays and is written again for the other nodes")
    func sweptMembersAreWrittenAgain() throws {
        var harness = Harness()
        harness.open("s-local")
        harness.create("s-local", "r-1")
        harness.join("s-local", "r-1")
        let before = try #require(harness.registry.members(of: "r-1").first)
        let swept = remote(&harness, .deleteMember(roomId: "r-1", sessionId: "s-local"))
        #expect(swept.roomEvents.isEmpty, "nobody is told it left")
        guard case .saveMember(let roomId, let member, _)? = swept.persisted.first, swept.persisted.count == 1 else {
            Issue.record("not one saveMember: \(swept.persisted)")
            return
        }
        #expect(roomId == "r-1" && member == before)
        #expect(harness.registry.members(of: "r-1") == [before])
    }

    @Test("chat sequences carry the node's slot in their low bits and count past every sequence seen, local or remote")
    func sequenceSlots() {
        var harness = Harness()
        harness.registry.sequenceSlot = 3
        harness.registry.sequenceSlotBits = 8
        harness.open("s-1")
        harness.create("s-1", "r-1")
        harness.join("s-1", "r-1")
        let first = harness.request("s-1", .sendChatMessage(.init(roomId: "r-1", message: "a"))).chats.first?.message.sequence
        #expect(first == (1 << 8) | 3)
        let far = ChatMessageDescription(messageId: ChatMessageDescription.messageId(sequence: (5 << 8) | 1), roomId: "r-1", timestamp: 1,
                                         from: ChatUser(sessionId: "s-2@node-2", screenName: "b", role: .participant, lastUpdate: 1), message: "b")
        _ = harness.registry.handle(.remote([.appendChat(far)]))
        let next = harness.request("s-1", .sendChatMessage(.init(roomId: "r-1", message: "c"))).chats.first?.message.sequence
        #expect(next == (6 << 8) | 3)
    }

    @Test("restoring a shared store: this node's sessions wait to resume, other nodes' members are only listed")
    func restorePartitionsByNode() {
        let room = RoomDescription(roomId: "r-1", alias: "a", name: "A", description: "", type: .multiPartyChat, bridgeId: "", pin: "")
        func stored(_ id: String, order: UInt64) -> RoomStoreSnapshot.Member {
            .init(roomId: "r-1", member: MemberDescription(sessionId: id, screenName: id, role: .participant, state: .active, streams: [], lastUpdate: 1),
                  joinOrder: order)
        }
        let snapshot = RoomStoreSnapshot(rooms: [.init(room: room, createdAt: 1)], members: [stored("s-1@node-1", order: 1), stored("s-2@node-2", order: 2)])
        var registry = RoomRegistry(restoring: snapshot, resumeWindow: 5, now: start, isLocal: { $0.hasSuffix("@node-1") })
        let expired = registry.handle(.tick(now: start.addingTimeInterval(6)))
        #expect(expired.persisted == [.deleteMember(roomId: "r-1", sessionId: "s-1@node-1")], "only this node's unresumed session leaves")
        #expect(registry.members(of: "r-1").map(\.sessionId) == ["s-2@node-2"])
    }
}
