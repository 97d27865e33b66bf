import Foundation
import PCastProtocol
import Testing

@Suite("Room and chat signaling messages")
struct RoomSignalingTests {
    static let room = RoomDescription(roomId: "room-1", alias: "lobby-1", name: "Lobby", description: "The lobby", type: .multiPartyChat,
                                      bridgeId: "bridge-9", pin: "1234")
    static let streams = [
        RoomStreamDescription(uri: "pcast://stream-1?streamToken=DIGEST%3AeyJh", type: .user),
        RoomStreamDescription(uri: "pcast://stream-2", type: .presentation, audioState: .disabled, videoState: .ended),
        RoomStreamDescription(uri: "pcast://stream-3", type: .audio, audioState: .enabled, videoState: .disabled),
    ]
    static let ada = MemberDescription(sessionId: "s-1", screenName: "Ada", role: .moderator, state: .handRaised,
                                       streams: streams, lastUpdate: 1_700_000_000_123)
    static let bob = MemberDescription(sessionId: "s-2", screenName: "Bob", role: .audience, state: .passive)
    static let chat = ChatMessageDescription(
        messageId: "chat-17", roomId: "room-1", timestamp: 1_700_000_000_456,
        from: ChatUser(sessionId: "s-1", screenName: "Ada", role: .moderator, lastUpdate: 1_700_000_000_123), message: "hello, room")

    static let clientMessages: [(Envelope<ClientMessage>, String)] = [
        (.request(id: 1, .createRoom(.init(name: "Lobby", type: .townHall))), "create-room"),
        (.request(id: 2, .createRoom(.init(name: "Lobby", type: .directChat, alias: "lobby-1", description: "d"))), "create-room"),
        (.request(id: 3, .getRoomInfo(.init(roomId: "room-1"))), "get-room-info"),
        (.request(id: 4, .getRoomInfo(.init(alias: "lobby-1"))), "get-room-info"),
        (.request(id: 5, .joinRoom(.init(room: .init(roomId: "room-1", alias: "lobby-1"),
                                         member: .init(screenName: "Ada", role: .presenter, state: .handRaised, streams: streams)))), "join-room"),
        (.request(id: 6, .joinRoom(.init(room: .init(alias: "lobby-1"), member: .init(screenName: "", role: .audience)))), "join-room"),
        (.request(id: 7, .leaveRoom(.init(roomId: "room-1"))), "leave-room"),
        (.request(id: 8, .destroyRoom(.init(roomId: "room-1"))), "destroy-room"),
        (.request(id: 9, .updateRoom(.init(roomId: "room-1"))), "update-room"),
        (.request(id: 10, .updateRoom(.init(roomId: "room-1", name: "New", description: "", bridgeId: "b", pin: "0000"))), "update-room"),
        (.request(id: 11, .updateMember(.init(roomId: "room-1"))), "update-member"),
        (.request(id: 12, .updateMember(.init(roomId: "room-1", sessionId: "s-2", screenName: "Bobby", role: .participant,
                                              state: .inactive, streams: []))), "update-member"),
        (.request(id: 13, .updateMember(.init(roomId: "room-1", streams: streams))), "update-member"),
        (.request(id: 14, .sendChatMessage(.init(roomId: "room-1", message: "hi"))), "send-chat-message"),
        (.request(id: 15, .getChatMessages(.init(roomId: "room-1", batchSize: 1))), "get-chat-messages"),
        (.request(id: 16, .getChatMessages(.init(roomId: "room-1", batchSize: 100, afterMessageId: "chat-3", beforeMessageId: "chat-99"))),
         "get-chat-messages"),
        (.request(id: 17, .authenticate(.init(token: "DIGEST:abc", sessionId: "s-1", resumeKey: "k-1"))), "authenticate"),
        (.event(.sendChatMessage(.init(roomId: "room-1", message: "no id"))), "send-chat-message"),
    ]

    static let serverMessages: [(Envelope<ServerMessage>, String)] = [
        (.request(id: 1, .roomInfo(.init(room: room, members: [ada], estimatedSize: 2, created: true))), "room-info"),
        (.request(id: 2, .roomInfo(.init(room: room, members: [], estimatedSize: 0, created: false))), "room-info"),
        (.request(id: 3, .roomInfo(.init(room: room, members: [ada], estimatedSize: 1))), "room-info"),
        (.request(id: 4, .joinedRoom(.init(room: room, members: [ada], member: ada, estimatedSize: 5, sequence: 42))), "joined-room"),
        (.request(id: 5, .joinedRoom(.init(room: room, members: [ada], member: bob, estimatedSize: 2, sequence: 0))), "joined-room"),
        (.event(.roomEvent(.init(roomId: "room-1", sequence: 1, kind: .memberJoined, member: ada))), "room-event"),
        (.event(.roomEvent(.init(roomId: "room-1", sequence: 2, kind: .memberUpdated, member: ada))), "room-event"),
        (.event(.roomEvent(.init(roomId: "room-1", sequence: 3, kind: .memberLeft, member: bob))), "room-event"),
        (.event(.roomEvent(.init(roomId: "room-1", sequence: 4, kind: .roomUpdated, room: room))), "room-event"),
        (.event(.roomEvent(.init(roomId: "room-1", sequence: UInt64.max, kind: .roomDestroyed, room: room))), "room-event"),
        (.event(.roomSize(.init(roomId: "room-1", estimatedSize: 2_000))), "room-size"),
        (.request(id: 6, .memberInfo(.init(member: ada))), "member-info"),
        (.request(id: 7, .chatMessages(.init(messages: []))), "chat-messages"),
        (.request(id: 8, .chatMessages(.init(messages: [chat, chat]))), "chat-messages"),
        (.request(id: 9, .chatMessage(.init(message: chat))), "chat-message"),
        (.event(.chatMessage(.init(message: chat))), "chat-message"),
        (.request(id: 10, .authenticated(.init(sessionId: "s-1", keepAliveInterval: 10, resumeKey: "k-1", resumed: true))), "authenticated"),
        (.request(id: 11, .failure(.init(status: .capacity, message: "a direct chat takes two members"))), "error"),
    ]

    static func wireType(_ data: Data) -> String? {
        (try? JSONSerialization.jsonObject(with: data) as? [String: Any])?["type"] as? String
    }

    @Test("every room and chat client message round-trips with its request id and wire type")
    func clientRoundTrip() throws {
        for (envelope, type) in Self.clientMessages {
            let data = try SignalingCodec.encode(envelope)
            #expect(Self.wireType(data) == type)
            #expect(envelope.message.type == type)
            #expect(try SignalingCodec.decodeClientMessage(data) == envelope, "\(type)")
        }
    }

    @Test("every room and chat server message round-trips with its request id and wire type")
    func serverRoundTrip() throws {
        for (envelope, type) in Self.serverMessages {
            let data = try SignalingCodec.encode(envelope)
            #expect(Self.wireType(data) == type)
            #expect(envelope.message.type == type)
            #expect(try SignalingCodec.decodeServerMessage(data) == envelope, "\(type)")
        }
    }

    @Test("the wire form uses the seed's names")
    func wireForm() throws {
        let chat = try SignalingCodec.encode(.request(id: 3, ClientMessage.sendChatMessage(.init(roomId: "r", message: "hi"))))
        #expect(String(decoding: chat, as: UTF8.self) == #"{"id":3,"payload":{"message":"hi","roomId":"r"},"type":"send-chat-message","v":1}"#)
        let event = try SignalingCodec.encode(Envelope<ServerMessage>.event(.roomEvent(.init(
            roomId: "r", sequence: 7, kind: .memberLeft,
            member: .init(sessionId: "s", screenName: "n", role: .participant, state: .handRaised, lastUpdate: 5)))))
        #expect(String(decoding: event, as: UTF8.self) == #"{"payload":{"kind":"member-left","member":{"lastUpdate":5,"role":"participant","screenName":"n","sessionId":"s","state":"hand-raised","streams":[]},"roomId":"r","sequence":7},"type":"room-event","v":1}"#)
        let create = try SignalingCodec.encode(.request(id: 1, ClientMessage.createRoom(.init(name: "n", type: .directChat))))
        #expect(String(decoding: create, as: UTF8.self).contains(#""type":"direct-chat""#))
    }

    // MARK: Validation

    func refusal(_ envelope: Envelope<ClientMessage>) throws -> SignalingError? {
        let data = try SignalingCodec.encode(envelope)
        do {
            _ = try SignalingCodec.decodeClientMessage(data)
            return nil
        } catch {
            return error
        }
    }

    /// Decoding must fail with `invalidPayload` of `envelope`'s type, keeping its request id.
    func expectInvalid(_ envelope: Envelope<ClientMessage>, _ comment: Comment, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let error = try refusal(envelope)
        guard let error else {
            Issue.record("accepted: \(comment)", sourceLocation: sourceLocation)
            return
        }
        guard case .invalidPayload(let type, let detail) = error.kind else {
            Issue.record("\(comment): expected invalidPayload, got \(error.kind)", sourceLocation: sourceLocation)
            return
        }
        #expect(type == envelope.message.type, comment, sourceLocation: sourceLocation)
        #expect(!detail.isEmpty, comment, sourceLocation: sourceLocation)
        #expect(error.requestId == envelope.id, comment, sourceLocation: sourceLocation)
        #expect(error.reply.id == envelope.id, comment, sourceLocation: sourceLocation)
        if case .failure(let failure) = error.reply.message {
            #expect(failure.status == .badRequest, comment, sourceLocation: sourceLocation)
        } else {
            Issue.record("the reply must be a failure", sourceLocation: sourceLocation)
        }
    }

    func expectValid(_ envelope: Envelope<ClientMessage>, _ comment: Comment, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let error = try refusal(envelope)
        #expect(error == nil, "\(comment): \(String(describing: error))", sourceLocation: sourceLocation)
    }

    @Test("chat messages must be non-empty and within the byte limit")
    func chatLimits() throws {
        let limit = RoomLimits.maximumChatMessageLength
        #expect(limit == 4096)
        try expectInvalid(.request(id: 21, .sendChatMessage(.init(roomId: "r", message: ""))), "empty")
        try expectInvalid(.request(id: 22, .sendChatMessage(.init(roomId: "r", message: String(repeating: "x", count: limit + 1)))), "limit + 1")
        try expectValid(.request(id: 23, .sendChatMessage(.init(roomId: "r", message: String(repeating: "x", count: limit)))), "at the limit")
        // Bytes, not characters: 2,049 two-byte characters are 4,098 bytes.
        try expectInvalid(.request(id: 24, .sendChatMessage(.init(roomId: "r", message: String(repeating: "é", count: limit / 2 + 1)))), "é × 2049")
        try expectValid(.request(id: 25, .sendChatMessage(.init(roomId: "r", message: String(repeating: "é", count: limit / 2)))), "é × 2048")
        try expectInvalid(.request(id: 26, .sendChatMessage(.init(roomId: "r", message: String(repeating: "👩‍👩‍👧", count: 250)))), "250 family emoji: 4,500 bytes in 250 characters")
        try expectValid(.request(id: 27, .sendChatMessage(.init(roomId: "r", message: "line one\nline two\ttabbed"))), "control characters are fine in chat text")
        try expectInvalid(.request(id: 28, .sendChatMessage(.init(roomId: "", message: "hi"))), "no room id")
    }

    @Test("history queries: batch size 1...100 and real message ids")
    func historyLimits() throws {
        #expect(RoomLimits.maximumBatchSize == 100)
        try expectInvalid(.request(id: 31, .getChatMessages(.init(roomId: "r", batchSize: 0))), "batchSize 0")
        try expectInvalid(.request(id: 32, .getChatMessages(.init(roomId: "r", batchSize: 101))), "batchSize 101")
        try expectInvalid(.request(id: 33, .getChatMessages(.init(roomId: "r", batchSize: -1))), "batchSize -1")
        try expectValid(.request(id: 34, .getChatMessages(.init(roomId: "r", batchSize: 1))), "batchSize 1")
        try expectValid(.request(id: 35, .getChatMessages(.init(roomId: "r", batchSize: 100))), "batchSize 100")
        for id in ["msg-5", "chat-", "chat-x", "chat--1", "5", "", "CHAT-5", "chat-18446744073709551616"] {
            try expectInvalid(.request(id: 36, .getChatMessages(.init(roomId: "r", batchSize: 10, afterMessageId: id))), "afterMessageId '\(id)'")
            try expectInvalid(.request(id: 37, .getChatMessages(.init(roomId: "r", batchSize: 10, beforeMessageId: id))), "beforeMessageId '\(id)'")
        }
        try expectValid(.request(id: 38, .getChatMessages(.init(roomId: "r", batchSize: 10, afterMessageId: "chat-0", beforeMessageId: "chat-18446744073709551615"))), "ids at the ends")
    }

    @Test("room lookups need an id or an alias")
    func lookups() throws {
        try expectInvalid(.request(id: 41, .getRoomInfo(.init())), "neither")
        try expectInvalid(.request(id: 42, .getRoomInfo(.init(roomId: "", alias: ""))), "both empty")
        try expectInvalid(.request(id: 43, .joinRoom(.init(room: .init(), member: .init(screenName: "a", role: .participant)))), "join with neither")
        try expectValid(.request(id: 44, .getRoomInfo(.init(roomId: "", alias: "lobby"))), "alias only")
        try expectValid(.request(id: 45, .getRoomInfo(.init(roomId: "room-1"))), "id only")
    }

    @Test("names refuse control characters and overlong values")
    func names() throws {
        for bad in ["a\nb", "tab\there", "esc\u{1B}[31m", "del\u{7F}", "nul\u{0}", "\r"] {
            try expectInvalid(.request(id: 51, .createRoom(.init(name: bad, type: .channel))), "room name \(bad.debugDescription)")
            try expectInvalid(.request(id: 52, .createRoom(.init(name: "ok", type: .channel, alias: bad))), "alias \(bad.debugDescription)")
            try expectInvalid(.request(id: 53, .joinRoom(.init(room: .init(roomId: "r"), member: .init(screenName: bad, role: .participant)))),
                              "screen name \(bad.debugDescription)")
            try expectInvalid(.request(id: 54, .updateMember(.init(roomId: "r", screenName: bad))), "new screen name \(bad.debugDescription)")
            try expectInvalid(.request(id: 55, .getRoomInfo(.init(roomId: bad))), "room id \(bad.debugDescription)")
            try expectInvalid(.request(id: 56, .leaveRoom(.init(roomId: bad))), "leave room id \(bad.debugDescription)")
            try expectInvalid(.request(id: 57, .updateRoom(.init(roomId: "r", name: bad))), "new room name \(bad.debugDescription)")
        }
        let max = RoomLimits.maximumNameLength
        try expectValid(.request(id: 58, .createRoom(.init(name: String(repeating: "n", count: max), type: .channel))), "name at the limit")
        try expectInvalid(.request(id: 59, .createRoom(.init(name: String(repeating: "n", count: max + 1), type: .channel))), "name over the limit")
        try expectInvalid(.request(id: 60, .createRoom(.init(name: "", type: .channel))), "empty name")
        try expectValid(.request(id: 61, .createRoom(.init(name: "Ünïcödé 名前 🎉", type: .channel))), "non-ASCII is fine")
        try expectInvalid(.request(id: 62, .destroyRoom(.init(roomId: ""))), "empty room id")
    }

    @Test("a member carries at most maximumStreamsPerMember streams")
    func streamLimits() throws {
        let limit = RoomLimits.maximumStreamsPerMember
        let many = (0...limit).map { RoomStreamDescription(uri: "pcast://s-\($0)", type: .user) }
        let enough = Array(many.prefix(limit))
        try expectInvalid(.request(id: 71, .joinRoom(.init(room: .init(roomId: "r"), member: .init(screenName: "a", role: .participant, streams: many)))),
                          "join with \(limit + 1) streams")
        try expectValid(.request(id: 72, .joinRoom(.init(room: .init(roomId: "r"), member: .init(screenName: "a", role: .participant, streams: enough)))),
                        "join with \(limit) streams")
        try expectInvalid(.request(id: 73, .updateMember(.init(roomId: "r", streams: many))), "update with \(limit + 1) streams")
        try expectValid(.request(id: 74, .updateMember(.init(roomId: "r", streams: enough))), "update with \(limit) streams")
        let longURI = [RoomStreamDescription(uri: "pcast://" + String(repeating: "s", count: SignalingCodec.maximumStringLength), type: .user)]
        try expectInvalid(.request(id: 75, .updateMember(.init(roomId: "r", streams: longURI))), "overlong stream URI")
    }

    @Test("a refusal of a message without an id carries no id")
    func refusalWithoutId() throws {
        let error = try #require(try refusal(.event(.sendChatMessage(.init(roomId: "r", message: "")))))
        #expect(error.requestId == nil)
        #expect(error.kind == .invalidPayload(type: "send-chat-message", detail: "empty message"))
    }

    @Test("raw JSON with wrong room fields is refused with the request id")
    func rawPayloads() throws {
        func decode(_ text: String) -> SignalingError? {
            do {
                _ = try SignalingCodec.decodeClientMessage(Data(text.utf8))
                return nil
            } catch {
                return error
            }
        }
        let cases = [
            #"{"v":1,"id":81,"type":"join-room","payload":{"room":{"roomId":"r"},"member":{"screenName":"a","role":"king","state":"active","streams":[]}}}"#,
            #"{"v":1,"id":81,"type":"create-room","payload":{"name":"n","type":"mansion"}}"#,
            #"{"v":1,"id":81,"type":"get-chat-messages","payload":{"roomId":"r","batchSize":"10"}}"#,
            #"{"v":1,"id":81,"type":"send-chat-message","payload":{"roomId":"r"}}"#,
            #"{"v":1,"id":81,"type":"update-member","payload":{"roomId":"r","state":"asleep"}}"#,
        ]
        for text in cases {
            let error = decode(text)
            #expect(error?.requestId == 81, "\(text)")
            guard case .invalidPayload = error?.kind else {
                Issue.record("expected invalidPayload for \(text), got \(String(describing: error))")
                continue
            }
        }
    }

    // MARK: Chat text is data

    static let hostileTexts = [
        #"<script>alert("pwned & gone")</script><img src=x onerror='alert(1)'>"#,
        #"&lt;b&gt; &amp;amp; &#60;script&#62; \u003cscript\u003e %3Cscript%3E"#,
        #"back\slash "quotes" /slashes/ </script> {"v":1} ]]> <!-- -->"#,
        "line\nbreak\r\n\ttab \u{0} nul \u{2028}\u{2029} separators \u{FEFF} bom \u{202E} rtl",
        "e\u{301} vs \u{E9}, 👩‍👩‍👧 family, \u{1F1FA}\u{1F1F8} flag",
    ]

    @Test("HTML, script and odd Unicode in a chat message come back byte for byte")
    func chatTextIsData() throws {
        for text in Self.hostileTexts {
            let request = Envelope<ClientMessage>.request(id: 90, .sendChatMessage(.init(roomId: "room-1", message: text)))
            guard case .sendChatMessage(let decoded) = try SignalingCodec.decodeClientMessage(try SignalingCodec.encode(request)).message else {
                Issue.record("not a chat message")
                continue
            }
            #expect(Array(decoded.message.utf8) == Array(text.utf8), "\(text.debugDescription)")

            var message = Self.chat
            message.message = text
            for envelope in [Envelope<ServerMessage>.event(.chatMessage(.init(message: message))),
                             .request(id: 91, .chatMessages(.init(messages: [message, Self.chat])))] {
                let back = try SignalingCodec.decodeServerMessage(try SignalingCodec.encode(envelope))
                #expect(back == envelope)
                let texts: [String]
                switch back.message {
                case .chatMessage(let event): texts = [event.message.message]
                case .chatMessages(let page): texts = page.messages.map(\.message)
                default: texts = []
                }
                #expect(texts.first.map { Array($0.utf8) } == Array(text.utf8), "\(text.debugDescription)")
            }
        }
    }

    @Test("canonically equivalent chat texts stay distinct on the wire")
    func noNormalisation() throws {
        let composed = "caf\u{E9}"
        let decomposed = "cafe\u{301}"
        #expect(composed == decomposed, "Swift's == merges them, so the test compares bytes")
        let data = try SignalingCodec.encode(Envelope<ClientMessage>.request(id: 1, .sendChatMessage(.init(roomId: "r", message: decomposed))))
        guard case .sendChatMessage(let decoded) = try SignalingCodec.decodeClientMessage(data).message else {
            Issue.record("not a chat message")
            return
        }
        #expect(Array(decoded.message.utf8) == Array(decomposed.utf8))
        #expect(Array(decoded.message.utf8) != Array(composed.utf8))
    }

    // MARK: Stream URIs

    @Test("pcast stream URIs give their stream id and percent-decoded stream token")
    func streamURIs() throws {
        func parts(_ uri: String) -> (String?, String?) {
            let stream = RoomStreamDescription(uri: uri, type: .user)
            return (stream.pcastStreamId, stream.streamToken)
        }
        #expect(parts("pcast://stream-1") == ("stream-1", nil))
        #expect(parts("pcast://stream-1?streamToken=DIGEST%3AeyJh%2Bb%2Fc%3D%3D") == ("stream-1", "DIGEST:eyJh+b/c=="))
        #expect(parts("pcast://stream-2?quality=hd&streamToken=abc&x=1") == ("stream-2", "abc"))
        #expect(parts("pcast://stream-3?streamTokenX=abc") == ("stream-3", nil))
        #expect(parts("pcast://stream-4?") == ("stream-4", nil))
        #expect(parts("pcast://") == (nil, nil))
        #expect(parts("pcast://?streamToken=t") == (nil, "t"))
        #expect(parts("https://example.com/stream-1") == (nil, nil))
        #expect(parts("stream-1") == (nil, nil))

        // A real token, percent-encoded into the URI, comes back intact.
        let token = try DigestTokenBuilder()
            .expiresAt(milliseconds: 1_700_000_000_000)
            .type(.stream)
            .originStreamId("stream-9")
            .capability("real-time")
            .encode(applicationId: "app", secret: "secret")
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let encoded = try #require(token.addingPercentEncoding(withAllowedCharacters: allowed))
        #expect(encoded != token, "the token has characters that need encoding")
        let stream = RoomStreamDescription(uri: "pcast://stream-9?streamToken=\(encoded)", type: .user)
        #expect(stream.pcastStreamId == "stream-9")
        #expect(stream.streamToken == token)
        guard case .verified(let claims) = DigestToken.verify(try #require(stream.streamToken), applicationId: "app", secret: "secret") else {
            Issue.record("the token from the URI does not verify")
            return
        }
        #expect(claims.originStreamId == "stream-9")
    }
}
