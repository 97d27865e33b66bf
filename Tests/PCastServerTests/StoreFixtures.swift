import PCastProtocol
@testable import PCastServer

// Rooms, members and chat messages the store tests save (RoomStoreTests, PlatformStoreContractTests).

func room(_ id: String, alias: String? = nil, type: RoomType = .multiPartyChat) -> RoomDescription {
    RoomDescription(roomId: id, alias: alias ?? "alias-\(id)", name: "Room \(id)", description: "about \(id)", type: type,
                    bridgeId: "bridge-\(id)", pin: "12\(id.count)")
}

func member(_ sessionId: String, role: MemberRole = .participant, lastUpdate: Int64 = 1_700_000_000_000,
            streams: [RoomStreamDescription] = []) -> MemberDescription {
    MemberDescription(sessionId: sessionId, screenName: "Name \(sessionId)", role: role, state: .active, streams: streams,
                      lastUpdate: lastUpdate)
}

func chat(_ sequence: UInt64, room: String, _ text: String? = nil, from: String = "s-1") -> ChatMessageDescription {
    ChatMessageDescription(messageId: ChatMessageDescription.messageId(sequence: sequence), roomId: room,
                           timestamp: 1_700_000_000_000 + Int64(sequence),
                           from: ChatUser(sessionId: from, screenName: "Name \(from)", role: .participant, lastUpdate: 42),
                           message: text ?? "message \(sequence) in \(room)")
}

/// Rooms of three types, members with streams and states, sessions with and without roles, chat in
/// two rooms: saved in four lists (rooms, members, sessions, chat), loaded back as `expected`.
struct RoundTripFixture {
    let groups: [[RoomStoreChange]]
    let expected: RoomStoreSnapshot
    /// The chat of rooms r-b and r-a, oldest first.
    let chatOfB = [chat(5, room: "r-b"), chat(12, room: "r-b")]
    let chatOfA = [chat(9, room: "r-a")]

    init() {
        let video = RoomStreamDescription(uri: "pcast://stream-1?streamToken=DIGEST%3Aabc", type: .presentation,
                                          audioState: .disabled, videoState: .enabled)
        let audio = RoomStreamDescription(uri: "pcast://stream-2", type: .audio, audioState: .enabled, videoState: .ended)
        let rooms = [room("r-b", type: .townHall), room("r-a", type: .channel), room("r-c", type: .directChat)]
        var passive = member("s-2", role: .audience, lastUpdate: 5)
        passive.state = .handRaised
        groups = [
            // Two rooms with one createdAt: ordered by roomId.
            [.saveRoom(rooms[0], createdAt: 2_000), .saveRoom(rooms[1], createdAt: 2_000), .saveRoom(rooms[2], createdAt: 1_000)],
            [.saveMember(roomId: "r-b", member("s-1", role: .presenter, streams: [video, audio]), joinOrder: 7),
             .saveMember(roomId: "r-b", passive, joinOrder: 3),
             .saveMember(roomId: "r-a", member("s-1", role: .moderator), joinOrder: 1)],
            [.saveSession(sessionId: "s-2", resumeKeyHash: "hash-2", roles: nil),
             .saveSession(sessionId: "s-1", resumeKeyHash: "hash-1", roles: [.participant, .moderator]),
             .saveSession(sessionId: "s-3", resumeKeyHash: "hash-3", roles: [])],
            [.appendChat(chat(5, room: "r-b")), .appendChat(chat(9, room: "r-a")), .appendChat(chat(12, room: "r-b"))],
        ]
        expected = RoomStoreSnapshot(
            rooms: [.init(room: rooms[2], createdAt: 1_000), .init(room: rooms[1], createdAt: 2_000),
                    .init(room: rooms[0], createdAt: 2_000)],
            members: [.init(roomId: "r-a", member: member("s-1", role: .moderator), joinOrder: 1),
                      .init(roomId: "r-b", member: passive, joinOrder: 3),
                      .init(roomId: "r-b", member: member("s-1", role: .presenter, streams: [video, audio]), joinOrder: 7)],
            sessions: [.init(sessionId: "s-1", resumeKeyHash: "hash-1", roles: [.participant, .moderator]),
                       .init(sessionId: "s-2", resumeKeyHash: "hash-2", roles: nil),
                       .init(sessionId: "s-3", resumeKeyHash: "hash-3", roles: [])],
            lastChatSequence: 12)
    }
}
