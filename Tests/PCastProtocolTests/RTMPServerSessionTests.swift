@testable import PCastProtocol
import PCastTestSupport
import Testing

/// Builds what an ffmpeg-like publishing client sends.
struct RTMPTestClient {
    var muxer: RTMPChunkMuxer
    var rng: SeededRNG

    init(seed: UInt64 = 9, compressesHeaders: Bool = false) {
        muxer = RTMPChunkMuxer(compressesHeaders: compressesHeaders)
        rng = SeededRNG(seed: seed)
    }

    /// C0, C1 and a C2 (which the server does not need to match).
    mutating func handshake() -> [UInt8] {
        rtmpC0C1(using: &rng) + [UInt8](repeating: 0, count: 1536)
    }

    mutating func message(_ message: RTMPMessage, csid: UInt32) -> [UInt8] {
        try! muxer.encode(message, chunkStreamID: csid)
    }

    mutating func command(_ name: String, _ txn: Double, _ object: AMF0Value = .null, _ args: [AMF0Value] = [], stream: UInt32 = 0) -> [UInt8] {
        let c = RTMPCommand(name: name, transactionID: txn, commandObject: object, arguments: args)
        return message(try! .command(c, streamID: stream), csid: stream == 0 ? 3 : 8)
    }

    mutating func connect(app: String = "live") -> [UInt8] {
        command("connect", 1, .object(["app": .string(app), "type": "nonprivate", "flashVer": "FMLE/3.0 (compatible; FMSc/1.0)", "tcUrl": .string("rtmp://127.0.0.1:1935/\(app)")]))
    }

    /// releaseStream, FCPublish, createStream.
    mutating func prepare(key: String) -> [UInt8] {
        command("releaseStream", 2, .null, [.string(key)]) + command("FCPublish", 3, .null, [.string(key)]) + command("createStream", 4)
    }

    mutating func publish(_ key: AMF0Value, type: AMF0Value? = "live") -> [UInt8] {
        command("publish", 5, .null, [key] + (type.map { [$0] } ?? []), stream: 1)
    }

    mutating func metadata(_ object: AMF0Object) -> [UInt8] {
        message(RTMPMessage(type: .dataAMF0, streamID: 1, payload: try! AMF0.encode(["@setDataFrame", "onMetaData", .ecmaArray(object)])), csid: 4)
    }

    mutating func audio(_ ts: UInt32, _ payload: [UInt8]) -> [UInt8] {
        message(RTMPMessage(type: .audio, streamID: 1, timestamp: ts, payload: payload), csid: 4)
    }

    mutating func video(_ ts: UInt32, _ payload: [UInt8]) -> [UInt8] {
        message(RTMPMessage(type: .video, streamID: 1, timestamp: ts, payload: payload), csid: 6)
    }

    mutating func unpublish(key: String) -> [UInt8] {
        command("FCUnpublish", 6, .null, [.string(key)]) + command("deleteStream", 7, .null, [1])
    }
}

/// A client-side view of what the server sent: skips S0 S1 S2, then demuxes messages.
struct RTMPServerOutput {
    var demuxer = RTMPChunkDemuxer()
    var handshakeLeft = 1 + 2 * 1536
    var messages: [RTMPMessage] = []

    mutating func take(_ actions: [RTMPServerSession.Action]) throws -> [RTMPMessage] {
        var new: [RTMPMessage] = []
        for case .send(var bytes) in actions {
            let skip = min(handshakeLeft, bytes.count)
            handshakeLeft -= skip
            bytes.removeFirst(skip)
            new += rtmpMessages(try demuxer.feed(bytes))
        }
        messages += new
        return new
    }

    /// The commands among `messages`.
    static func commands(_ messages: [RTMPMessage]) throws -> [RTMPCommand] {
        try messages.filter { $0.type == .commandAMF0 }.map { try RTMPCommand(parsing: $0.payload) }
    }
}

/// Non-send actions.
func rtmpEvents(_ actions: [RTMPServerSession.Action]) -> [RTMPServerSession.Action] {
    actions.filter { if case .send = $0 { false } else { true } }
}

/// Feeds `bytes` in pieces (sizes from `pieces`), accepting every publish request as it appears.
/// Returns every action, the ones from accept() included.
func rtmpDrive(_ session: inout RTMPServerSession, _ bytes: [UInt8], pieces: (inout SeededRNG) -> Int, rng: inout SeededRNG, accept: Bool = true) throws -> [RTMPServerSession.Action] {
    var actions: [RTMPServerSession.Action] = []
    var i = 0
    while i < bytes.count {
        let n = min(pieces(&rng), bytes.count - i)
        let got = try session.receive(bytes[i..<(i + n)])
        actions += got
        if got.contains(where: { if case .publishRequested = $0 { true } else { false } }) {
            actions += accept ? try session.accept() : try session.reject("no")
        }
        i += n
    }
    return actions
}

private let meta: AMF0Object = ["width": 1280, "height": 720, "videocodecid": 7, "audiocodecid": 10, "encoder": "Lavf59"]

@Suite("RTMP server session")
struct RTMPServerSessionTests {
    @Test("the full publish flow: responses on the wire and actions for the owner")
    func fullFlow() throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        var output = RTMPServerOutput()

        var actions = try session.receive(client.handshake())
        #expect(actions.count == 1)  // S0 S1 S2 in one send
        #expect(session.state == .awaitingConnect)
        _ = try output.take(actions)

        actions = try session.receive(client.connect())
        #expect(rtmpEvents(actions) == [.connected(RTMPConnectInfo(app: "live", tcURL: "rtmp://127.0.0.1:1935/live", flashVersion: "FMLE/3.0 (compatible; FMSc/1.0)"))])
        var sent = try output.take(actions)
        #expect(sent.map(\.type) == [.setChunkSize, .windowAcknowledgementSize, .setPeerBandwidth, .userControl, .commandAMF0])
        #expect(try sent[0].leadingU32() == 4096)
        #expect(try sent[1].leadingU32() == 2_500_000)
        #expect(sent[2].payload == [0x00, 0x26, 0x25, 0xA0, 2])
        #expect(try RTMPUserControlEvent(parsing: sent[3].payload) == .streamBegin(streamID: 0))
        let connectResult = try RTMPCommand(parsing: sent[4].payload)
        #expect(connectResult.name == "_result" && connectResult.transactionID == 1)
        #expect(connectResult.arguments.first?["code"] == "NetConnection.Connect.Success")
        #expect(connectResult.arguments.first?["level"] == "status")
        #expect(connectResult.commandObject["fmsVer"] != nil)

        actions = try session.receive(client.prepare(key: "abc"))
        #expect(rtmpEvents(actions).isEmpty)
        let results = try RTMPServerOutput.commands(try output.take(actions))
        #expect(results.map(\.name) == ["_result", "_result", "_result"])
        #expect(results.map(\.transactionID) == [2, 3, 4])
        #expect(results[2].arguments == [.number(1)])

        actions = try session.receive(client.publish("abc"))
        #expect(rtmpEvents(actions) == [.publishRequested(app: "live", key: "abc", type: .live)])
        #expect(try output.take(actions).isEmpty)  // nothing is said until the owner decides
        #expect(session.state == .publishRequested)
        #expect(session.streamKey == "abc" && session.publishType == .live)

        actions = try session.accept()
        sent = try output.take(actions)
        #expect(sent.count == 2)
        #expect(try RTMPUserControlEvent(parsing: sent[0].payload) == .streamBegin(streamID: 1))
        let start = try RTMPCommand(parsing: sent[1].payload)
        #expect(sent[1].streamID == 1)
        #expect(start.name == "onStatus" && start.arguments.first?["code"] == "NetStream.Publish.Start")
        #expect(session.state == .publishing)

        actions = try session.receive(client.metadata(meta) + client.video(0, [0x17, 0, 0, 0, 0, 1]) + client.audio(0, [0xAF, 0, 0x12, 0x10]) + client.video(40, [0x27, 1]) + client.audio(21, [0xAF, 1, 5]))
        #expect(actions == [
            .metadata(meta, timestamp: 0),
            .video(timestamp: 0, payload: [0x17, 0, 0, 0, 0, 1]),
            .audio(timestamp: 0, payload: [0xAF, 0, 0x12, 0x10]),
            .video(timestamp: 40, payload: [0x27, 1]),
            .audio(timestamp: 21, payload: [0xAF, 1, 5]),
        ])
        #expect(session.metadata == meta)

        actions = try session.receive(client.unpublish(key: "abc"))
        #expect(rtmpEvents(actions) == [.ended(.unpublished)])
        #expect(session.state == .ended)
        #expect(session.connectionClosed().isEmpty)  // already ended
        #expect(session.statistics.videoMessages == 2 && session.statistics.audioMessages == 2)
        #expect(session.statistics.unknownMessages == 0 && session.statistics.droppedMediaMessages == 0)
    }

    @Test("without an outgoing chunk size the server stays at 128 (the connect result spans chunks)")
    func defaultChunkSize() throws {
        var session = RTMPServerSession(configuration: .init(outgoingChunkSize: nil, windowAcknowledgementSize: 1_000_000, peerBandwidth: 3_000_000))
        var client = RTMPTestClient()
        var output = RTMPServerOutput()
        let sent = try output.take(try session.receive(client.handshake() + client.connect()))
        #expect(sent.map(\.type) == [.windowAcknowledgementSize, .setPeerBandwidth, .userControl, .commandAMF0])
        #expect(try sent[0].leadingU32() == 1_000_000 && sent[1].leadingU32() == 3_000_000)
        #expect(sent[3].payload.count > 128)
        #expect(output.demuxer.chunkSize == 128)
        #expect(try RTMPCommand(parsing: sent[3].payload).arguments.first?["code"] == "NetConnection.Connect.Success")
    }

    @Test("reject() answers with an onStatus error carrying the reason, then close; later bytes are ignored")
    func reject() throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        var output = RTMPServerOutput()
        _ = try output.take(try session.receive(client.handshake() + client.connect() + client.prepare(key: "k") + client.publish("k")))
        let actions = try session.reject("Invalid token.")
        #expect(rtmpEvents(actions) == [.close])
        let status = try RTMPServerOutput.commands(try output.take(actions))
        #expect(status.count == 1)
        #expect(status[0].name == "onStatus")
        #expect(status[0].arguments.first?["level"] == "error")
        #expect(status[0].arguments.first?["code"] == "NetStream.Publish.BadName")
        #expect(status[0].arguments.first?["description"] == "Invalid token.")
        #expect(session.state == .closed)
        #expect(try session.receive(client.video(0, [1, 2, 3])).isEmpty)
        #expect(throws: RTMPError.noPendingPublish) { try session.accept() }
        // A custom code.
        var other = RTMPServerSession()
        var client2 = RTMPTestClient()
        var output2 = RTMPServerOutput()
        _ = try output2.take(try other.receive(client2.handshake() + client2.connect() + client2.prepare(key: "k") + client2.publish("k")))
        let denied = try RTMPServerOutput.commands(try output2.take(try other.reject("nope", code: "NetStream.Publish.Denied")))
        #expect(denied.first?.arguments.first?["code"] == "NetStream.Publish.Denied")
    }

    @Test("an accepted publish can still be rejected (its first media in a codec the owner does not take): an onStatus error with the reason, then close; later media is ignored; twice is an error")
    func rejectAfterAccept() throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        var output = RTMPServerOutput()
        _ = try output.take(try session.receive(client.handshake() + client.connect() + client.prepare(key: "k") + client.publish("k")))
        _ = try output.take(try session.accept())
        #expect(session.state == .publishing)
        let media = try session.receive(client.video(0, [0x90, 0x61, 0x76, 0x30, 0x31]))
        #expect(media.contains(.video(timestamp: 0, payload: [0x90, 0x61, 0x76, 0x30, 0x31])))
        let actions = try session.reject("RTMP video in AV1 is not carried", code: "NetStream.Publish.Failed")
        #expect(rtmpEvents(actions) == [.close])
        let status = try RTMPServerOutput.commands(try output.take(actions))
        #expect(status.count == 1 && status[0].name == "onStatus")
        #expect(status[0].arguments.first?["level"] == "error")
        #expect(status[0].arguments.first?["code"] == "NetStream.Publish.Failed")
        #expect(status[0].arguments.first?["description"] == "RTMP video in AV1 is not carried")
        #expect(session.state == .closed)
        #expect(try session.receive(client.video(33, [0xa3, 0x61, 0x76, 0x30, 0x31])).isEmpty)
        #expect(throws: RTMPError.noPendingPublish) { try session.reject("again") }
    }

    @Test("stream keys are validated before the owner sees them", arguments: [
        (AMF0Value.string(""), RTMPStreamKeyProblem.empty),
        (.string(String(repeating: "k", count: 4097)), .tooLong(bytes: 4097, limit: 4096)),
        (.string(String(repeating: "é", count: 2049)), .tooLong(bytes: 4098, limit: 4096)),
        (.string("key\u{0}x"), .controlCharacter(offset: 3)),
        (.string("a\nb"), .controlCharacter(offset: 1)),
        (.string("ab\u{7F}"), .controlCharacter(offset: 2)),
        (.string("é\u{85}"), .controlCharacter(offset: 2)),
        (.null, .missing),
        (.number(5), .missing),
    ])
    func badKeys(key: AMF0Value, problem: RTMPStreamKeyProblem) throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        var output = RTMPServerOutput()
        _ = try output.take(try session.receive(client.handshake() + client.connect() + client.prepare(key: "x")))
        let actions = try session.receive(client.publish(key))
        #expect(rtmpEvents(actions) == [.refused(.invalidStreamKey(problem)), .close])
        let status = try RTMPServerOutput.commands(try output.take(actions))
        #expect(status.first?.arguments.first?["code"] == "NetStream.Publish.BadName")
        #expect(status.first?.arguments.first?["level"] == "error")
        #expect(session.state == .closed)
    }

    @Test("long tokens up to the limit, and URL-ish keys, are passed through verbatim")
    func goodKeys() throws {
        for key in [String(repeating: "A", count: 4096), "tok_abc?sig=1&x=/y", "ключ", "a b"] {
            var session = RTMPServerSession()
            var client = RTMPTestClient()
            let actions = try session.receive(client.handshake() + client.connect() + client.prepare(key: key) + client.publish(.string(key)))
            #expect(rtmpEvents(actions).last == .publishRequested(app: "live", key: key, type: .live))
        }
    }

    @Test("publish types are exposed; a missing one means live; others are refused")
    func publishTypes() throws {
        for (type, expected) in [("record", RTMPPublishType.record), ("append", .append), ("live", .live)] as [(String, RTMPPublishType)] {
            var session = RTMPServerSession()
            var client = RTMPTestClient()
            let actions = try session.receive(client.handshake() + client.connect() + client.publish("k", type: .string(type)))
            #expect(rtmpEvents(actions).last == .publishRequested(app: "live", key: "k", type: expected))
        }
        var missing = RTMPServerSession()
        var client = RTMPTestClient()
        #expect(rtmpEvents(try missing.receive(client.handshake() + client.connect() + client.publish("k", type: nil))).last
            == .publishRequested(app: "live", key: "k", type: .live))
        var bogus = RTMPServerSession()
        var client2 = RTMPTestClient()
        #expect(rtmpEvents(try bogus.receive(client2.handshake() + client2.connect() + client2.publish("k", type: "appendWithGap"))).suffix(2)
            == [.refused(.unsupportedPublishType("appendWithGap")), .close])
    }

    @Test("applications: only configured names; query strings and trailing slashes are ignored")
    func applications() throws {
        for (app, accepted) in [("live", true), ("live/", true), ("live?secret=1", true), ("Live", false), ("", false), ("other", false)] {
            var session = RTMPServerSession()
            var client = RTMPTestClient()
            var output = RTMPServerOutput()
            let actions = try session.receive(client.handshake() + client.connect(app: app))
            let commands = try RTMPServerOutput.commands(try output.take(actions))
            if accepted {
                #expect(session.state == .connected, "\(app)")
                #expect(commands.last?.name == "_result")
            } else {
                let normalized = app.components(separatedBy: "?")[0]
                #expect(rtmpEvents(actions) == [.refused(.unknownApplication(normalized)), .close], "\(app)")
                #expect(commands.last?.name == "_error")
                #expect(commands.last?.arguments.first?["code"] == "NetConnection.Connect.Rejected")
                #expect(session.state == .closed)
            }
        }
        var custom = RTMPServerSession(configuration: .init(applications: ["ingest", "live2"]))
        var client = RTMPTestClient()
        _ = try custom.receive(client.handshake() + client.connect(app: "ingest"))
        #expect(custom.state == .connected)
        #expect(custom.connectInfo?.app == "ingest")
    }

    @Test("commands out of order are protocol errors and the session stays failed")
    func outOfOrder() throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        #expect(throws: RTMPError.unexpectedCommand("publish")) { try session.receive(client.handshake() + client.publish("k")) }
        #expect(throws: RTMPError.unexpectedCommand("publish")) { try session.receive([]) }

        var twice = RTMPServerSession()
        var client2 = RTMPTestClient()
        #expect(throws: RTMPError.unexpectedCommand("connect")) { try twice.receive(client2.handshake() + client2.connect() + client2.connect()) }

        var republish = RTMPServerSession()
        var client3 = RTMPTestClient()
        _ = try republish.receive(client3.handshake() + client3.connect() + client3.publish("k"))
        _ = try republish.accept()
        #expect(throws: RTMPError.unexpectedCommand("publish")) { try republish.receive(client3.publish("k")) }

        var fresh = RTMPServerSession()
        #expect(throws: RTMPError.noPendingPublish) { try fresh.accept() }
        #expect(throws: RTMPError.noPendingPublish) { try fresh.reject("x") }
    }

    @Test("malformed AMF in a command is a typed error; in a data message it is skipped and counted")
    func malformedAMF() throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        let bad = client.message(RTMPMessage(type: .commandAMF0, payload: [0x02, 0x00, 0x09, 0x61]), csid: 3)
        #expect(throws: RTMPError.malformedAMF(.truncated(offset: 3, needed: 9, available: 1))) { try session.receive(client.handshake() + bad) }

        var noName = RTMPServerSession()
        var client2 = RTMPTestClient()
        #expect(throws: RTMPError.commandWithoutName) {
            try noName.receive(client2.handshake() + client2.message(RTMPMessage(type: .commandAMF0, payload: [0x05]), csid: 3))
        }

        var data = RTMPServerSession()
        var client3 = RTMPTestClient()
        _ = try data.receive(client3.handshake() + client3.connect() + client3.publish("k"))
        _ = try data.accept()
        let depthBomb = client3.message(RTMPMessage(type: .dataAMF0, streamID: 1, payload: [UInt8]().withObjectNesting(10_000)), csid: 4)
        #expect(try data.receive(depthBomb + client3.video(0, [1])) == [.video(timestamp: 0, payload: [1])])
        #expect(data.statistics.malformedDataMessages == 1)
    }

    @Test("unknown message types are ignored but counted")
    func unknownTypes() throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        var bytes = client.handshake() + client.connect() + client.publish("k")
        _ = try session.receive(bytes)
        _ = try session.accept()
        bytes = []
        for type: UInt8 in [7, 10, 11, 99, 255] {
            bytes += client.message(RTMPMessage(type: RTMPMessageType(rawValue: type), streamID: 1, payload: [1, 2, 3]), csid: 9)
        }
        bytes += client.message(RTMPMessage(type: .sharedObjectAMF0, payload: [0]), csid: 3)
        bytes += client.message(RTMPMessage(type: .aggregate, streamID: 1, payload: [0]), csid: 9)
        bytes += client.command("_checkbw", 9)
        bytes += client.video(5, [9])
        #expect(try session.receive(bytes) == [.video(timestamp: 5, payload: [9])])
        #expect(session.statistics.unknownMessages == 5)
        #expect(session.statistics.ignoredMessages == 3)
    }

    @Test("media before publish is dropped; media while the owner decides is held and delivered by accept()")
    func heldMedia() throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        let early = try session.receive(client.handshake() + client.connect() + client.video(0, [1]))
        #expect(rtmpEvents(early).count == 1)  // .connected only
        #expect(session.statistics.droppedMediaMessages == 1)

        let requested = try session.receive(client.publish("k") + client.metadata(meta) + client.video(0, [2]) + client.audio(3, [4]))
        #expect(rtmpEvents(requested) == [.publishRequested(app: "live", key: "k", type: .live)])
        #expect(try session.receive(client.video(40, [5])).isEmpty)
        let accepted = try session.accept()
        #expect(rtmpEvents(accepted) == [
            .metadata(meta, timestamp: 0), .video(timestamp: 0, payload: [2]), .audio(timestamp: 3, payload: [4]),
            .video(timestamp: 40, payload: [5]),
        ])

        // Holding is bounded.
        var bounded = RTMPServerSession(configuration: .init(maxHeldBytes: 1000))
        var client2 = RTMPTestClient()
        _ = try bounded.receive(client2.handshake() + client2.connect() + client2.publish("k"))
        #expect(throws: RTMPError.bufferLimitExceeded(limit: 1000)) { try bounded.receive(client2.video(0, [UInt8](repeating: 0, count: 1001))) }

        // Rejecting discards what was held.
        var rejected = RTMPServerSession()
        var client3 = RTMPTestClient()
        _ = try rejected.receive(client3.handshake() + client3.connect() + client3.publish("k") + client3.video(0, [1]))
        #expect(rtmpEvents(try rejected.reject("no")) == [.close])
    }

    @Test("the connection closing ends a pending or accepted publish")
    func connectionClosed() throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        _ = try session.receive(client.handshake() + client.connect() + client.publish("k"))
        _ = try session.accept()
        #expect(session.connectionClosed() == [.ended(.connectionClosed)])
        #expect(session.state == .closed)
        #expect(try session.receive([1, 2, 3]).isEmpty)

        var pending = RTMPServerSession()
        var client2 = RTMPTestClient()
        _ = try pending.receive(client2.handshake() + client2.connect() + client2.publish("k"))
        #expect(pending.connectionClosed() == [.ended(.connectionClosed)])

        var idle = RTMPServerSession()
        #expect(idle.connectionClosed().isEmpty)

        var deleted = RTMPServerSession()
        var client3 = RTMPTestClient()
        _ = try deleted.receive(client3.handshake() + client3.connect() + client3.publish("k"))
        _ = try deleted.accept()
        #expect(rtmpEvents(try deleted.receive(client3.command("deleteStream", 0, .null, [1]))) == [.ended(.streamDeleted)])
    }

    @Test("ping requests are answered; acknowledgements are sent after the client's window")
    func pingAndAcknowledgement() throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        var output = RTMPServerOutput()
        _ = try output.take(try session.receive(client.handshake() + client.connect()))
        let ping = client.message(.userControl(.pingRequest(timestamp: 0xBEEF)), csid: 2)
        let pong = try output.take(try session.receive(ping))
        #expect(pong.count == 1)
        #expect(try RTMPUserControlEvent(parsing: pong[0].payload) == .pingResponse(timestamp: 0xBEEF))

        _ = try output.take(try session.receive(client.message(.windowAcknowledgementSize(5000), csid: 2) + client.publish("k")))
        _ = try output.take(try session.accept())
        var acks: [UInt32] = []
        for i in 0..<100 {
            let sent = try output.take(try session.receive(client.video(UInt32(i) * 40, [UInt8](repeating: 0, count: 500))))
            acks += try sent.filter { $0.type == .acknowledgement }.map { try $0.leadingU32() }
        }
        #expect(acks.count >= 10)
        #expect(zip(acks, acks.dropFirst()).allSatisfy { $1 - $0 >= 5000 })
        #expect(session.statistics.acknowledgementsSent == acks.count)
        // The client acknowledging us is recorded.
        _ = try session.receive(client.message(.acknowledgement(sequenceNumber: 3500), csid: 2))
        #expect(session.statistics.peerAcknowledged == 3500)
    }

    @Test("AMF3 command and data messages (format byte 0, then AMF0) are understood")
    func amf3Wrapped() throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        var bytes = client.handshake() + client.connect()
        let publish = try RTMPCommand(name: "publish", transactionID: 0, arguments: ["k3", "live"]).encoded()
        bytes += client.message(RTMPMessage(type: .commandAMF3, streamID: 1, payload: [0] + publish), csid: 8)
        #expect(rtmpEvents(try session.receive(bytes)).last == .publishRequested(app: "live", key: "k3", type: .live))
        _ = try session.accept()
        let data = try AMF0.encode(["onMetaData", .object(["width": 640])])
        #expect(try session.receive(client.message(RTMPMessage(type: .dataAMF3, streamID: 1, payload: [0] + data), csid: 4))
            == [.metadata(["width": 640], timestamp: 0)])
    }

    @Test("property: the same session under random splits and 1-byte feeding (seeded)", arguments: [11, 12, 13] as [UInt64])
    func splits(seed: UInt64) throws {
        var client = RTMPTestClient(seed: seed, compressesHeaders: seed != 11)
        var rng = SeededRNG(seed: seed)
        var script = client.handshake() + client.connect() + client.prepare(key: "key-\(seed)") + client.publish(.string("key-\(seed)"))
        script += try client.muxer.setChunkSize([1, 60, 4096][Int(seed % 3)])
        script += client.metadata(meta)
        var expectedMedia: [RTMPServerSession.Action] = []
        var audioClock: UInt32 = 0, videoClock: UInt32 = 0
        for i in 0..<150 {
            if i % 3 == 0 {
                videoClock += 40
                let payload = rng.bytes(Int.random(in: 1...6000, using: &rng))
                script += client.video(videoClock, payload)
                expectedMedia.append(.video(timestamp: videoClock, payload: payload))
            } else {
                audioClock += UInt32.random(in: 20...23, using: &rng)
                let payload = rng.bytes(Int.random(in: 1...400, using: &rng))
                script += client.audio(audioClock, payload)
                expectedMedia.append(.audio(timestamp: audioClock, payload: payload))
            }
        }
        script += client.unpublish(key: "key-\(seed)")
        let expected: [RTMPServerSession.Action] =
            [.connected(RTMPConnectInfo(app: "live", tcURL: "rtmp://127.0.0.1:1935/live", flashVersion: "FMLE/3.0 (compatible; FMSc/1.0)")),
             .publishRequested(app: "live", key: "key-\(seed)", type: .live), .metadata(meta, timestamp: 0)]
            + expectedMedia + [.ended(.unpublished)]

        func run(_ pieces: (inout SeededRNG) -> Int) throws -> ([RTMPServerSession.Action], [UInt8]) {
            var serverRNG = SeededRNG(seed: 99)
            var session = RTMPServerSession(using: &serverRNG)
            var pieceRNG = SeededRNG(seed: seed &* 31)
            let actions = try rtmpDrive(&session, script, pieces: pieces, rng: &pieceRNG)
            let sent: [UInt8] = actions.flatMap { action -> [UInt8] in if case .send(let b) = action { b } else { [] } }
            return (rtmpEvents(actions), sent)
        }
        let (wholeEvents, wholeSent) = try run { _ in Int.max }
        #expect(wholeEvents == expected)
        let (randomEvents, randomSent) = try run { Int.random(in: 1...2000, using: &$0) }
        #expect(randomEvents == expected)
        #expect(randomSent == wholeSent)
        let (smallEvents, smallSent) = try run { Int.random(in: 1...7, using: &$0) }
        #expect(smallEvents == expected)
        #expect(smallSent == wholeSent)
        if seed == 11 {
            let (byteEvents, byteSent) = try run { _ in 1 }
            #expect(byteEvents == expected)
            #expect(byteSent == wholeSent)
        }
    }

    @Test("hostile chunk-level input surfaces as the chunk stream's typed errors")
    func hostileChunks() throws {
        var session = RTMPServerSession()
        var client = RTMPTestClient()
        let prefix = client.handshake() + client.connect()
        // Set Chunk Size 0 from the client.
        #expect(throws: RTMPError.badChunkSize(0)) { try session.receive(prefix + hex("02 000000 000004 01 00000000 00000000")) }
        var big = RTMPServerSession()
        #expect(throws: RTMPError.messageTooLarge(length: 0x90_0000, limit: 8 << 20)) { try big.receive(prefix + hex("06 000000 900000 09 01000000")) }
        var version = RTMPServerSession()
        #expect(throws: RTMPError.unsupportedVersion(6)) { try version.receive([6] + [UInt8](repeating: 0, count: 1536)) }
    }
}
