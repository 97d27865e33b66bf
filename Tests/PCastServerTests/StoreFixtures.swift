import PCastProtocol

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
