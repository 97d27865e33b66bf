import Foundation
import Logging
import PCastProtocol

/// The platform's rooms, their members and chat. Pure: the caller passes time and fresh ids in and
/// carries out the returned actions (sends, persistence, history queries, logs), in order.
///
/// Rules:
/// - Any authenticated session may create a room; the alias is generated when absent, and creating
///   a room whose alias exists returns the existing room (`created: false`).
/// - Joining needs the role to be allowed for the session: a session whose auth token carries
///   `role:<role>` capabilities may take only those roles; without any, every role but `moderator`.
///   Audience members carry no streams; `presentation` streams need a presenter or moderator.
///   A direct chat takes at most two visible members (`capacity`). Joining again updates the member.
/// - Audience members are invisible: their joins, changes and leaves are sent to nobody else, but
///   they count in the estimated size, which is sent to every member on ``Event/tick(now:)`` when it
///   changed (the PCast iOS SDK's periodic, cold room-size observable).
/// - Members change themselves; moderators (of that room) change other members and the room, and
///   destroy it. Everyone else gets `unauthorized`. A moderator may give another member any role,
///   moderator included (promotion is the moderator's call, not the member's token's).
/// - Every visible change goes to the room's other attached members as a ``ServerMessage/RoomEvent``
///   whose `sequence` counts up per room, in the order decided here; the requester gets the reply.
/// - Chat: members only; messages get platform-wide increasing ids (`chat-<n>`) and go to every
///   attached member, the sender included (as the reply to its request), in one order for all.
///   History is read from the store (``Action/queryChat(sessionId:requestId:roomId:batchSize:after:before:)``).
/// - A session whose connection is lost (or that a platform restart interrupted) stays a member for
///   `resumeWindow`: resuming the session keeps its memberships; afterwards it leaves every room.
///   `bye` leaves at once.
///
/// ```swift
/// var rooms = RoomRegistry(resumeWindow: 30)
/// _ = rooms.handle(.sessionOpened(sessionId: "s-1", roles: nil, now: Date()))
/// let actions = rooms.handle(.request(sessionId: "s-1", requestId: 1,
///     .createRoom(.init(name: "Lobby", type: .multiPartyChat)), now: Date(), newId: "room-1"))
/// // [.persist([.saveRoom(…)]), .send(sessionId: "s-1", …room-info…), .log(…)]
/// ```
public struct RoomRegistry: Sendable {
    public enum Request: Sendable, Hashable {
        case createRoom(ClientMessage.CreateRoom)
        case getRoomInfo(ClientMessage.RoomLookup)
        case joinRoom(ClientMessage.JoinRoom)
        case leaveRoom(ClientMessage.RoomReference)
        case destroyRoom(ClientMessage.RoomReference)
        case updateRoom(ClientMessage.UpdateRoom)
        case updateMember(ClientMessage.UpdateMember)
        case sendChatMessage(ClientMessage.SendChatMessage)
        case getChatMessages(ClientMessage.GetChatMessages)
    }

    public enum Event: Sendable {
        /// A session authenticated (or resumed): `roles` are the roles its token allows (nil: no restriction).
        case sessionOpened(sessionId: String, roles: Set<MemberRole>?, now: Date)
        /// Its connection is gone without `bye`: memberships last until `now + resumeWindow`.
        case sessionDetached(sessionId: String, now: Date)
        /// The session is over (`bye`, or not resumed in time): it leaves every room.
        case sessionEnded(sessionId: String)
        /// `newId` is the room id to use if the request creates a room.
        case request(sessionId: String, requestId: UInt64?, Request, now: Date, newId: String)
        /// Expires detached sessions and reports changed room sizes.
        case tick(now: Date)
        /// Changes another node of the cluster made (read from the shared store's change log, in
        /// its commit order): applied to the rooms and told to this node's attached members as the
        /// same changes made here would be; nothing is persisted again. A room or member saved as
        /// it is, or deleted when gone, changes nothing; chat is delivered once per change given.
        case remote([RoomStoreChange])
    }

    public enum Action: Sendable, Hashable {
        case send(sessionId: String, Envelope<ServerMessage>)
        /// Write these to the store, in order.
        case persist([RoomStoreChange])
        /// Answer a history request from the store with ``ServerMessage/chatMessages(_:)``.
        case queryChat(sessionId: String, requestId: UInt64?, roomId: String, batchSize: Int, after: UInt64?, before: UInt64?)
        case log(Logger.Level, String, sessionId: String?, roomId: String?)
    }

    struct Member: Sendable {
        var description: MemberDescription
        var joinOrder: UInt64
    }

    struct Room: Sendable {
        var info: RoomDescription
        var createdAt: Int64
        var members: [String: Member] = [:]
        /// Session ids in join order.
        var order: [String] = []
        var nextJoinOrder: UInt64 = 1
        var sequence: UInt64 = 0
        var reportedSize = 0

        var visibleMembers: [MemberDescription] {
            order.compactMap { members[$0]?.description }.filter { $0.role.isVisible }
        }
    }

    struct Session: Sendable {
        var roles: Set<MemberRole>?
        var rooms: Set<String> = []
        var attached = true
        var deadline: Date?
    }

    /// Roles a session may take when its token names none.
    public static let defaultRoles: Set<MemberRole> = [.participant, .audience, .presenter]

    public let resumeWindow: TimeInterval
    private var rooms: [String: Room] = [:]
    private var aliases: [String: String] = [:]
    private var sessions: [String: Session] = [:]
    private var lastChatSequence: UInt64 = 0
    /// In a cluster, chat sequences carry the node's slot in their low `sequenceSlotBits` bits, so
    /// nodes never hand out the same one; the high bits count past every sequence seen, local or
    /// remote. A single node: no bits, sequences count by one.
    public var sequenceSlot: UInt64 = 0
    public var sequenceSlotBits = 0

    public init(resumeWindow: TimeInterval) {
        self.resumeWindow = resumeWindow
    }

    /// The state a store kept: every member's session is detached until it resumes or its window ends.
    ///
    /// In a cluster the store holds every node's members: `isLocal` tells this node's sessions
    /// (restored detached, as above) from other nodes' (members of the rooms, never expired here).
    public init(restoring snapshot: RoomStoreSnapshot, resumeWindow: TimeInterval, now: Date,
                isLocal: (String) -> Bool = { _ in true }) {
        self.resumeWindow = resumeWindow
        for stored in snapshot.rooms {
            rooms[stored.room.roomId] = Room(info: stored.room, createdAt: stored.createdAt)
            aliases[stored.room.alias] = stored.room.roomId
        }
        for stored in snapshot.members {
            guard var room = rooms[stored.roomId] else { continue }
            room.members[stored.member.sessionId] = Member(description: stored.member, joinOrder: stored.joinOrder)
            room.order.append(stored.member.sessionId)
            room.nextJoinOrder = max(room.nextJoinOrder, stored.joinOrder + 1)
            rooms[stored.roomId] = room
            guard isLocal(stored.member.sessionId) else { continue }
            sessions[stored.member.sessionId, default: Session(attached: false, deadline: now.addingTimeInterval(resumeWindow))]
                .rooms.insert(stored.roomId)
        }
        for id in Array(rooms.keys) {
            guard var room = rooms[id] else { continue }
            let members = room.members
            room.order.sort { (members[$0]?.joinOrder ?? 0) < (members[$1]?.joinOrder ?? 0) }
            room.reportedSize = members.count
            rooms[id] = room
        }
        lastChatSequence = snapshot.lastChatSequence
    }

    public var roomCount: Int { rooms.count }

    /// Every membership whose session id satisfies `predicate`, by room id then join order.
    public func memberships(where predicate: (String) -> Bool) -> [(roomId: String, sessionId: String)] {
        rooms.keys.sorted().flatMap { roomId in
            (rooms[roomId]?.order ?? []).filter(predicate).map { (roomId, $0) }
        }
    }
    public var memberCount: Int { rooms.values.reduce(0) { $0 + $1.members.count } }
    public func room(_ roomId: String) -> RoomDescription? { rooms[roomId]?.info }
    public func members(of roomId: String) -> [MemberDescription] {
        guard let room = rooms[roomId] else { return [] }
        return room.order.compactMap { room.members[$0]?.description }
    }
    /// Whether a session has memberships the platform keeps for it (so resuming it means something).
    public func isMember(_ sessionId: String) -> Bool { !(sessions[sessionId]?.rooms.isEmpty ?? true) }

    public mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .sessionOpened(let sessionId, let roles, _):
            var session = sessions[sessionId] ?? Session()
            session.roles = roles
            session.attached = true
            session.deadline = nil
            sessions[sessionId] = session
            return []
        case .sessionDetached(let sessionId, let now):
            guard var session = sessions[sessionId] else { return [] }
            if session.rooms.isEmpty {
                sessions[sessionId] = nil
                return []
            }
            session.attached = false
            session.deadline = now.addingTimeInterval(resumeWindow)
            sessions[sessionId] = session
            return [.log(.info, "session detached; memberships kept for \(Int(resumeWindow)) s", sessionId: sessionId, roomId: nil)]
        case .sessionEnded(let sessionId):
            return endSession(sessionId)
        case .request(let sessionId, let requestId, let request, let now, let newId):
            guard sessions[sessionId]?.attached == true else {
                return [send(sessionId, requestId, .failure(.init(status: .unauthorized, message: "no such session")))]
            }
            return handle(request, sessionId: sessionId, requestId: requestId, now: now, newId: newId)
        case .remote(let changes):
            return changes.flatMap { applyRemote($0) }
        case .tick(let now):
            var actions: [Action] = []
            for (sessionId, session) in sessions.sorted(by: { $0.key < $1.key }) where !session.attached {
                if let deadline = session.deadline, now >= deadline {
                    actions.append(.log(.info, "detached session not resumed in time", sessionId: sessionId, roomId: nil))
                    actions += endSession(sessionId)
                }
            }
            for roomId in rooms.keys.sorted() {
                guard let room = rooms[roomId], room.members.count != room.reportedSize else { continue }
                rooms[roomId]?.reportedSize = room.members.count
                let event = Envelope<ServerMessage>.event(.roomSize(.init(roomId: roomId, estimatedSize: room.members.count)))
                for sessionId in room.order where sessions[sessionId]?.attached == true {
                    actions.append(.send(sessionId: sessionId, event))
                }
            }
            return actions
        }
    }

    // MARK: Requests

    private mutating func handle(_ request: Request, sessionId: String, requestId: UInt64?, now: Date, newId: String) -> [Action] {
        let millis = Int64((now.timeIntervalSince1970 * 1000).rounded())
        func fail(_ status: RequestStatus, _ message: String) -> [Action] {
            [send(sessionId, requestId, .failure(.init(status: status, message: message)))]
        }
        switch request {
        case .createRoom(let options):
            if let alias = options.alias, let existing = aliases[alias], let room = rooms[existing] {
                return [send(sessionId, requestId, .roomInfo(info(room, created: false)))]
            }
            let alias = options.alias ?? Self.generatedAlias(name: options.name, roomId: newId)
            guard rooms[newId] == nil, aliases[alias] == nil else { return fail(.conflict, "room id '\(newId)' is taken") }
            let description = RoomDescription(roomId: newId, alias: alias, name: options.name,
                                              description: options.description ?? "", type: options.type)
            rooms[newId] = Room(info: description, createdAt: millis)
            aliases[alias] = newId
            return [
                .persist([.saveRoom(description, createdAt: millis)]),
                send(sessionId, requestId, .roomInfo(info(rooms[newId]!, created: true))),
                .log(.info, "room created (\(options.type.rawValue), alias \(alias))", sessionId: sessionId, roomId: newId),
            ]

        case .getRoomInfo(let lookup):
            guard let room = find(lookup) else { return fail(.notFound, "no room \(Self.describe(lookup))") }
            return [send(sessionId, requestId, .roomInfo(info(room)))]

        case .joinRoom(let join):
            guard let room = find(join.room) else { return fail(.notFound, "no room \(Self.describe(join.room))") }
            let model = join.member
            if let refusal = check(role: model.role, streams: model.streams, sessionId: sessionId) { return fail(refusal.status, refusal.message) }
            let roomId = room.info.roomId
            let existing = room.members[sessionId]
            if room.info.type == .directChat, model.role.isVisible, !(existing?.description.role.isVisible ?? false),
               room.visibleMembers.count >= 2 {
                return fail(.capacity, "a direct chat takes two members")
            }
            var member = MemberDescription(sessionId: sessionId, screenName: model.screenName, role: model.role,
                                           state: model.state, streams: model.streams, lastUpdate: millis)
            var actions: [Action] = []
            if let existing {
                if Self.sameModel(existing.description, member) { member.lastUpdate = existing.description.lastUpdate }
                rooms[roomId]?.members[sessionId]?.description = member
                actions += changed(roomId, from: existing.description, to: member, excluding: sessionId)
                actions.append(.persist([.saveMember(roomId: roomId, member, joinOrder: existing.joinOrder)]))
            } else {
                let order = room.nextJoinOrder
                rooms[roomId]?.nextJoinOrder += 1
                rooms[roomId]?.members[sessionId] = Member(description: member, joinOrder: order)
                rooms[roomId]?.order.append(sessionId)
                sessions[sessionId]?.rooms.insert(roomId)
                if member.role.isVisible { actions += broadcast(roomId, .memberJoined, member: member, excluding: sessionId) }
                actions.append(.persist([.saveMember(roomId: roomId, member, joinOrder: order)]))
                actions.append(.log(.info, "joined as \(member.role.rawValue)", sessionId: sessionId, roomId: roomId))
            }
            let now = rooms[roomId]!
            let reply = ServerMessage.JoinedRoom(room: now.info, members: now.visibleMembers, member: member,
                                                 estimatedSize: now.members.count, sequence: now.sequence)
            // The reply goes first: the events that follow it carry later sequence numbers.
            return [send(sessionId, requestId, .joinedRoom(reply))] + actions

        case .leaveRoom(let reference):
            guard rooms[reference.roomId]?.members[sessionId] != nil else {
                return fail(.notFound, "this session is not a member of room '\(reference.roomId)'")
            }
            return [send(sessionId, requestId, .ok)] + leave(reference.roomId, sessionId: sessionId)

        case .destroyRoom(let reference):
            guard let room = rooms[reference.roomId] else { return fail(.notFound, "no room '\(reference.roomId)'") }
            guard room.members[sessionId]?.description.role.isModerator == true else {
                return fail(.unauthorized, "only a moderator of the room may destroy it")
            }
            var actions = [send(sessionId, requestId, .ok)]
            actions += broadcast(reference.roomId, .roomDestroyed, room: room.info, excluding: sessionId)
            for member in room.order { sessions[member]?.rooms.remove(reference.roomId) }
            rooms[reference.roomId] = nil
            aliases[room.info.alias] = nil
            actions.append(.persist([.deleteRoom(roomId: reference.roomId)]))
            actions.append(.log(.info, "room destroyed", sessionId: sessionId, roomId: reference.roomId))
            return actions

        case .updateRoom(let update):
            guard let room = rooms[update.roomId] else { return fail(.notFound, "no room '\(update.roomId)'") }
            guard room.members[sessionId]?.description.role.isModerator == true else {
                return fail(.unauthorized, "only a moderator of the room may change it")
            }
            var info = room.info
            if let name = update.name { info.name = name }
            if let description = update.description { info.description = description }
            if let bridgeId = update.bridgeId { info.bridgeId = bridgeId }
            if let pin = update.pin { info.pin = pin }
            guard info != room.info else { return [send(sessionId, requestId, .roomInfo(self.info(room)))] }
            rooms[update.roomId]?.info = info
            var actions = [send(sessionId, requestId, .roomInfo(self.info(rooms[update.roomId]!)))]
            actions += broadcast(update.roomId, .roomUpdated, room: info, excluding: sessionId)
            actions.append(.persist([.saveRoom(info, createdAt: room.createdAt)]))
            return actions

        case .updateMember(let update):
            guard let room = rooms[update.roomId] else { return fail(.notFound, "no room '\(update.roomId)'") }
            guard let requester = room.members[sessionId] else {
                return fail(.unauthorized, "this session is not a member of room '\(update.roomId)'")
            }
            let targetId = update.sessionId ?? sessionId
            guard let target = room.members[targetId] else { return fail(.notFound, "no member '\(targetId)' in room '\(update.roomId)'") }
            let moderating = targetId != sessionId
            if moderating, !requester.description.role.isModerator {
                return fail(.unauthorized, "only a moderator may change another member")
            }
            var member = target.description
            if let screenName = update.screenName { member.screenName = screenName }
            if let role = update.role { member.role = role }
            if let state = update.state { member.state = state }
            if let streams = update.streams { member.streams = streams }
            if !moderating, member.role != target.description.role,
               let refusal = check(role: member.role, streams: member.streams, sessionId: sessionId) {
                return fail(refusal.status, refusal.message)
            }
            if !member.role.mayPublish && !member.streams.isEmpty {
                return fail(.badRequest, "audience members carry no streams")
            }
            if !member.role.mayPresent && member.streams.contains(where: { $0.type == .presentation }) {
                return fail(.unauthorized, "presentation streams need a presenter or moderator")
            }
            if room.info.type == .directChat, member.role.isVisible, !target.description.role.isVisible, room.visibleMembers.count >= 2 {
                return fail(.capacity, "a direct chat takes two members")
            }
            guard !Self.sameModel(member, target.description) else {
                return [send(sessionId, requestId, .memberInfo(.init(member: target.description)))]
            }
            member.lastUpdate = max(millis, target.description.lastUpdate + 1)
            rooms[update.roomId]?.members[targetId]?.description = member
            var actions = [send(sessionId, requestId, .memberInfo(.init(member: member)))]
            actions += changed(update.roomId, from: target.description, to: member, excluding: sessionId)
            actions.append(.persist([.saveMember(roomId: update.roomId, member, joinOrder: target.joinOrder)]))
            return actions

        case .sendChatMessage(let send):
            guard let room = rooms[send.roomId] else { return fail(.notFound, "no room '\(send.roomId)'") }
            guard let sender = room.members[sessionId]?.description else {
                return fail(.unauthorized, "enter room '\(send.roomId)' before sending to it")
            }
            lastChatSequence = ((lastChatSequence >> sequenceSlotBits) + 1) << sequenceSlotBits | sequenceSlot
            let message = ChatMessageDescription(
                messageId: ChatMessageDescription.messageId(sequence: lastChatSequence), roomId: send.roomId, timestamp: millis,
                from: ChatUser(sessionId: sessionId, screenName: sender.screenName, role: sender.role, lastUpdate: sender.lastUpdate),
                message: send.message)
            var actions: [Action] = [.persist([.appendChat(message)])]
            let body = ServerMessage.chatMessage(.init(message: message))
            for member in room.order where sessions[member]?.attached == true {
                actions.append(.send(sessionId: member, Envelope(id: member == sessionId ? requestId : nil, body)))
            }
            return actions

        case .getChatMessages(let query):
            guard let room = rooms[query.roomId] else { return fail(.notFound, "no room '\(query.roomId)'") }
            guard room.members[sessionId] != nil else {
                return fail(.unauthorized, "enter room '\(query.roomId)' before reading its messages")
            }
            return [.queryChat(
                sessionId: sessionId, requestId: requestId, roomId: query.roomId, batchSize: query.batchSize,
                after: query.afterMessageId.flatMap(ChatMessageDescription.sequence(of:)),
                before: query.beforeMessageId.flatMap(ChatMessageDescription.sequence(of:)))]
        }
    }

    // MARK: Changes from other nodes

    private mutating func applyRemote(_ change: RoomStoreChange) -> [Action] {
        switch change {
        case .saveRoom(let info, let createdAt):
            guard let room = rooms[info.roomId] else {
                if let held = aliases[info.alias], held != info.roomId { return [] }
                rooms[info.roomId] = Room(info: info, createdAt: createdAt)
                aliases[info.alias] = info.roomId
                return []
            }
            guard room.info != info else { return [] }
            aliases[room.info.alias] = nil
            aliases[info.alias] = info.roomId
            rooms[info.roomId]?.info = info
            return broadcast(info.roomId, .roomUpdated, room: info, excluding: nil)
        case .deleteRoom(let roomId):
            guard let room = rooms[roomId] else { return [] }
            let actions = broadcast(roomId, .roomDestroyed, room: room.info, excluding: nil)
            for member in room.order { sessions[member]?.rooms.remove(roomId) }
            rooms[roomId] = nil
            aliases[room.info.alias] = nil
            return actions
        case .saveMember(let roomId, let member, let joinOrder):
            guard let room = rooms[roomId] else { return [] }
            if let existing = room.members[member.sessionId] {
                guard existing.description != member else { return [] }
                rooms[roomId]?.members[member.sessionId]?.description = member
                return changed(roomId, from: existing.description, to: member, excluding: "")
            }
            rooms[roomId]?.members[member.sessionId] = Member(description: member, joinOrder: joinOrder)
            rooms[roomId]?.order.append(member.sessionId)
            rooms[roomId]?.nextJoinOrder = max(room.nextJoinOrder, joinOrder + 1)
            return member.role.isVisible ? broadcast(roomId, .memberJoined, member: member, excluding: nil) : []
        case .deleteMember(let roomId, let sessionId):
            // A member of a session of this node, removed by another node that took this one for
            // gone (it could not reach the store for longer than the node expiry): the session is
            // here, so the member stays, and is written again for the other nodes.
            if sessions[sessionId]?.rooms.contains(roomId) == true, let member = rooms[roomId]?.members[sessionId] {
                return [.persist([.saveMember(roomId: roomId, member.description, joinOrder: member.joinOrder)]),
                        .log(.notice, "another node removed a member of a session here (it took this node for gone): written again",
                             sessionId: sessionId, roomId: roomId)]
            }
            guard let member = rooms[roomId]?.members.removeValue(forKey: sessionId) else { return [] }
            rooms[roomId]?.order.removeAll { $0 == sessionId }
            guard member.description.role.isVisible else { return [] }
            var gone = member.description
            gone.state = .offline
            return broadcast(roomId, .memberLeft, member: gone, excluding: nil)
        case .appendChat(let message):
            // Each change of the log is applied once (the caller reads past what it applied), so a
            // remote sequence below this node's own is new: other slots count on their own.
            guard let sequence = message.sequence, let room = rooms[message.roomId] else { return [] }
            lastChatSequence = max(lastChatSequence, sequence)
            let body = Envelope<ServerMessage>.event(.chatMessage(.init(message: message)))
            return room.order.filter { sessions[$0]?.attached == true }.map { .send(sessionId: $0, body) }
        case .saveSession, .deleteSession:
            // Resumable sessions are the node's own.
            return []
        case .saveStream, .deleteStream, .deleteNodeStreams:
            // The stream directory is the StreamRegistry's.
            return []
        }
    }

    // MARK: Helpers

    private func check(role: MemberRole, streams: [RoomStreamDescription], sessionId: String) -> ServerMessage.Failure? {
        let allowed = sessions[sessionId]?.roles ?? Self.defaultRoles
        guard allowed.contains(role) else {
            return .init(status: .unauthorized, message: "this session's token does not allow the role '\(role.rawValue)'")
        }
        if !role.mayPublish && !streams.isEmpty { return .init(status: .badRequest, message: "audience members carry no streams") }
        if !role.mayPresent && streams.contains(where: { $0.type == .presentation }) {
            return .init(status: .unauthorized, message: "presentation streams need a presenter or moderator")
        }
        return nil
    }

    private func find(_ lookup: ClientMessage.RoomLookup) -> Room? {
        if let id = lookup.roomId, !id.isEmpty { return rooms[id] }
        if let alias = lookup.alias, let id = aliases[alias] { return rooms[id] }
        return nil
    }

    private func info(_ room: Room, created: Bool? = nil) -> ServerMessage.RoomInfo {
        .init(room: room.info, members: room.visibleMembers, estimatedSize: room.members.count, created: created)
    }

    /// Events for a member's change, by what others could see before and after.
    private mutating func changed(_ roomId: String, from old: MemberDescription, to new: MemberDescription, excluding: String) -> [Action] {
        switch (old.role.isVisible, new.role.isVisible) {
        case (true, true):
            guard old != new else { return [] }
            return broadcast(roomId, .memberUpdated, member: new, excluding: excluding)
        case (false, true):
            return broadcast(roomId, .memberJoined, member: new, excluding: excluding)
        case (true, false):
            var gone = new
            gone.state = .offline
            var actions = broadcast(roomId, .memberLeft, member: gone, excluding: excluding, except: new.sessionId)
            // The member itself (changed by a moderator) still hears about its own change.
            if new.sessionId != excluding, sessions[new.sessionId]?.attached == true {
                let event = ServerMessage.RoomEvent(roomId: roomId, sequence: rooms[roomId]?.sequence ?? 0, kind: .memberUpdated, member: new)
                actions.append(.send(sessionId: new.sessionId, .event(.roomEvent(event))))
            }
            return actions
        case (false, false):
            guard new.sessionId != excluding, sessions[new.sessionId]?.attached == true, old != new else { return [] }
            let event = ServerMessage.RoomEvent(roomId: roomId, sequence: rooms[roomId]?.sequence ?? 0, kind: .memberUpdated, member: new)
            return [.send(sessionId: new.sessionId, .event(.roomEvent(event)))]
        }
    }

    /// One room event to every attached member but `excluding` (and `except`), in join order.
    private mutating func broadcast(_ roomId: String, _ kind: ServerMessage.RoomEvent.Kind, member: MemberDescription? = nil,
                                    room info: RoomDescription? = nil, excluding: String?, except: String? = nil) -> [Action] {
        guard let room = rooms[roomId] else { return [] }
        let sequence = room.sequence + 1
        rooms[roomId]?.sequence = sequence
        let event = Envelope<ServerMessage>.event(.roomEvent(.init(roomId: roomId, sequence: sequence, kind: kind, member: member, room: info)))
        var actions: [Action] = []
        actions.reserveCapacity(room.order.count)
        for sessionId in room.order where sessionId != excluding && sessionId != except && sessions[sessionId]?.attached == true {
            actions.append(.send(sessionId: sessionId, event))
        }
        return actions
    }

    private mutating func leave(_ roomId: String, sessionId: String) -> [Action] {
        guard let member = rooms[roomId]?.members.removeValue(forKey: sessionId) else { return [] }
        rooms[roomId]?.order.removeAll { $0 == sessionId }
        sessions[sessionId]?.rooms.remove(roomId)
        var actions: [Action] = []
        if member.description.role.isVisible {
            var gone = member.description
            gone.state = .offline
            actions += broadcast(roomId, .memberLeft, member: gone, excluding: sessionId)
        }
        actions.append(.persist([.deleteMember(roomId: roomId, sessionId: sessionId)]))
        actions.append(.log(.info, "left the room", sessionId: sessionId, roomId: roomId))
        return actions
    }

    private mutating func endSession(_ sessionId: String) -> [Action] {
        guard let session = sessions.removeValue(forKey: sessionId) else { return [] }
        var actions: [Action] = []
        for roomId in session.rooms.sorted() { actions += leave(roomId, sessionId: sessionId) }
        return actions
    }

    private func send(_ sessionId: String, _ requestId: UInt64?, _ message: ServerMessage) -> Action {
        .send(sessionId: sessionId, Envelope(id: requestId, message))
    }

    private static func sameModel(_ a: MemberDescription, _ b: MemberDescription) -> Bool {
        a.screenName == b.screenName && a.role == b.role && a.state == b.state && a.streams == b.streams
    }

    /// `lobby-3f9a1c` from "Lobby" and the room id: readable and unique.
    static func generatedAlias(name: String, roomId: String) -> String {
        let slug = name.lowercased().unicodeScalars
            .map { CharacterSet.alphanumerics.contains($0) && $0.isASCII ? Character($0) : "-" }
            .reduce(into: "") { result, c in if !(c == "-" && result.last == "-") { result.append(c) } }
            .trimmingCharacters(in: CharacterSet(charactersIn: "-"))
        let suffix = String(roomId.filter(\.isHexDigit).suffix(8))
        return (slug.isEmpty ? "room" : String(slug.prefix(48))) + "-" + (suffix.isEmpty ? roomId : suffix)
    }

    private static func describe(_ lookup: ClientMessage.RoomLookup) -> String {
        if let id = lookup.roomId, !id.isEmpty { return "'\(id)'" }
        return "with alias '\(lookup.alias ?? "")'"
    }
}
