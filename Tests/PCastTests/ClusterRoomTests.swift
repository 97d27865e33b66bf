import Foundation
import Logging
@testable import PCast
import PCastNode
import PCastProtocol
import PCastServer
import PCastTestSupport
import Testing

/// `count` platform nodes sharing one new database of a real PostgreSQL.
func clusterNodes(_ count: Int, on postgres: TestPostgres) async throws -> [LocalPlatform] {
    let url = try PostgresURL(parsing: try postgres.newDatabase())
    let secret = SRTPFreeRandom.secret()
    var nodes: [LocalPlatform] = []
    for index in 1...count {
        nodes.append(try await LocalPlatform.start(secret: secret) { configuration in
            configuration.database = .postgres(url)
            configuration.nodeId = "node-\(index)"
        })
    }
    return nodes
}

/// Joins `alias` on a node that may not have heard of the room yet (it learns it from the change log).
func memberEventually(_ pcast: PCast, _ alias: String, _ name: String) async throws -> (RoomService, Room) {
    let deadline = ContinuousClock.now + .seconds(10)
    while true {
        do {
            return try await member(pcast, alias, name)
        } catch {
            if ContinuousClock.now > deadline { throw error }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

/// The whole chat history of the room `rooms` is in, oldest first, paged backwards.
func wholeHistory(_ rooms: RoomService) async throws -> [ChatMessage] {
    let chat = ChatService(roomService: rooms)
    var history: [ChatMessage] = []
    var before: String?
    while true {
        let page = try await chat.getMessages(batchSize: 100, beforeMessageId: before)
        if page.isEmpty { return history }
        history = page + history
        before = page.first?.messageId
    }
}

extension Cluster {
    @Suite("Rooms and chat across nodes sharing a real PostgreSQL", .serialized)
    struct ClusterRoomTests {
        @Test("a room created on node 1 is joined on nodes 2 and 3; every member sees the others join, change and leave, whichever node they are on")
        func membersAcrossNodes() async throws {
            let postgres = try TestPostgres.server()
            let nodes = try await clusterNodes(3, on: postgres)
            let clients = [try await client(nodes[0]), try await client(nodes[1]), try await client(nodes[2])]
            _ = try await RoomService(pcast: clients[0]).createRoom(RoomOptions(name: "Across", type: .multiPartyChat, alias: "across"))
            var rooms: [(RoomService, Room)] = []
            for (index, pcast) in clients.enumerated() { rooms.append(try await memberEventually(pcast, "across", "member-\(index + 1)")) }
            for (_, room) in rooms {
                #expect(await eventually { Set(room.members.value.map { $0.screenName.value }) == ["member-1", "member-2", "member-3"] },
                        "\(room.members.value.map { $0.screenName.value })")
            }
            // A change on node 3 reaches nodes 1 and 2.
            rooms[2].0.selfMember.screenName.setValue("renamed-3")
            try await rooms[2].0.selfMember.commitChanges()
            for (_, room) in rooms.prefix(2) {
                #expect(await eventually { room.members.value.contains { $0.screenName.value == "renamed-3" } })
            }
            // Leaving on node 2 is seen on nodes 1 and 3.
            try await rooms[1].0.leaveRoom()
            for index in [0, 2] {
                let room = rooms[index].1
                #expect(await eventually { Set(room.members.value.map { $0.screenName.value }) == ["member-1", "renamed-3"] })
            }
            for pcast in clients { await pcast.stop() }
            for node in nodes { await node.shutdown() }
        }

        @Test("1,000 chat messages from members on three nodes: every member gets each exactly once, each sender's in order; the history is whole and the same from every node")
        func thousandMessagesAcrossNodes() async throws {
            let postgres = try TestPostgres.server()
            let nodes = try await clusterNodes(3, on: postgres)
            var clients: [PCast] = []
            for index in 0..<6 { clients.append(try await client(nodes[index % 3])) }
            let roomId = try await RoomService(pcast: clients[0]).createRoom(RoomOptions(name: "Busy", type: .multiPartyChat, alias: "busy-across")).roomId
            var services: [RoomService] = []
            var received: [Values<String>] = []
            var listeners: [Disposable] = []
            for (index, pcast) in clients.enumerated() {
                let (rooms, _) = try await memberEventually(pcast, "busy-across", "member-\(index)")
                services.append(rooms)
                let seen = Values<String>()
                listeners.append(pcast.addEventListener { message in
                    if case .chatMessage(let chat) = message { seen.append(chat.message.message) }
                })
                received.append(seen)
            }
            // Everyone is in before the first message: wait until each node knows all six members.
            for rooms in services {
                #expect(await eventually { rooms.activeRoom.value?.members.value.count == 6 })
            }
            // Members 1, 2 and 3 (one per node) send 333, 333 and 334, concurrently.
            let counts = [1: 333, 2: 333, 3: 334]
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (sender, count) in counts {
                    let pcast = clients[sender], seen = received[sender]
                    group.addTask {
                        for n in 0..<count {
                            _ = try await pcast.request(.sendChatMessage(.init(roomId: roomId, message: "s\(sender)-\(n)")), inOrder: { reply in
                                if case .chatMessage(let chat) = reply { seen.append(chat.message.message) }
                            })
                        }
                    }
                }
                try await group.waitForAll()
            }
            let everyone = received
            #expect(await eventually(.seconds(30)) { everyone.allSatisfy { $0.all.count >= 1000 } },
                    "\(received.map { $0.all.count })")
            try await Task.sleep(for: .milliseconds(500))
            for (index, seen) in received.enumerated() {
                let all = seen.all
                #expect(all.count == 1000 && Set(all).count == 1000, "member \(index): \(all.count) messages, \(Set(all).count) distinct")
                for (sender, count) in counts {
                    #expect(all.filter { $0.hasPrefix("s\(sender)-") } == (0..<count).map { "s\(sender)-\($0)" }, "member \(index), sender \(sender)")
                }
            }
            var histories: [[String]] = []
            for index in 0..<3 { histories.append(try await wholeHistory(services[index]).map(\.message)) }
            #expect(histories[0].count == 1000 && Set(histories[0]).count == 1000)
            #expect(histories[1] == histories[0] && histories[2] == histories[0], "the same history from every node")
            for (sender, count) in counts {
                #expect(histories[0].filter { $0.hasPrefix("s\(sender)-") } == (0..<count).map { "s\(sender)-\($0)" })
            }
            _ = listeners
            for pcast in clients { await pcast.stop() }
            for node in nodes { await node.shutdown() }
        }
    }
}

extension Cluster {
    @Suite("Members of a node that vanished", .serialized)
    struct ClusterNodeLossTests {
        @Test("a node that stops heartbeating (killed, cut off) loses its room members within the 3 s expiry: members on the live node see them leave, and the store forgets them")
        func vanishedNodesMembersLeave() async throws {
            let postgres = try TestPostgres.server()
            let nodes = try await clusterNodes(1, on: postgres)
            let url = try #require({ if case .postgres(let url)? = nodes[0].configuration.database { return url } else { return nil } }())
            let pcast = try await client(nodes[0])
            let roomId = try await RoomService(pcast: pcast).createRoom(RoomOptions(name: "Watched", type: .multiPartyChat, alias: "watched")).roomId
            let (service, room) = try await member(pcast, "watched", "survivor")

            // Node 2, as the store sees it: a heartbeat, and a member of the room, published to the change log.
            let other = try await PostgresPlatformStore.open(url, logger: Logger(label: "node-2"))
            // Node 1 writes behind: its room is in the database a moment after the reply.
            #expect(await eventually { (try? await other.load().rooms.contains { $0.room.roomId == roomId }) == true })
            other.publishChanges(as: "node-2")
            let record = NodeRecord(nodeId: "node-2", signalingURL: "ws://127.0.0.2:1/ws", relayAddress: "127.0.0.2:1", startedAt: 0)
            // Live before it has members, as a starting node is (it claims its slot first).
            try await other.heartbeat(record)
            let beating = Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(300))
                    try? await other.heartbeat(record)
                }
            }
            let ghost = MemberDescription(sessionId: "session-0123@node-2", screenName: "on node 2", role: .participant, state: .active,
                                          streams: [], lastUpdate: 1)
            try await other.apply([.saveMember(roomId: roomId, ghost, joinOrder: 99)])
            #expect(await eventually { room.members.value.contains { $0.screenName.value == "on node 2" } })
            try await Task.sleep(for: .seconds(4))
            #expect(room.members.value.contains { $0.screenName.value == "on node 2" }, "a live node's member stays")

            beating.cancel()
            let silent = ContinuousClock.now
            #expect(await eventually(.seconds(10)) { !room.members.value.contains { $0.screenName.value == "on node 2" } })
            let took = ContinuousClock.now - silent
            print("cluster: a silent node's member left its room \(took) after its last heartbeat")
            #expect(took < .seconds(5))
            #expect(await eventually { (try? await other.load().members.contains { $0.member.sessionId == ghost.sessionId }) == false })
            withExtendedLifetime(service) {}
            await other.close()
            await pcast.stop()
            await nodes[0].shutdown()
        }
    }
}

extension Cluster {
    @Suite("An SDK client moving to another node", .serialized)
    struct ClusterFailoverTests {
        @Test("a client whose node stops reconnects to the next node of its list: a new session there, the room joined again, its chat reaching a member on that node; its member on the stopped node is swept")
        func clientMovesToAnotherNode() async throws {
            let postgres = try TestPostgres.server()
            let nodes = try await clusterNodes(2, on: postgres)
            var options = PCastOptions(uri: nodes[1].signalingURL)
            options.fallbackURIs = [nodes[0].signalingURL]
            let mover = PCast(options)
            try await mover.start(authToken: try nodes[1].token(.auth))
            #expect(mover.sessionId?.hasSuffix("@node-2") == true)
            let observer = try await client(nodes[0])
            _ = try await RoomService(pcast: observer).createRoom(RoomOptions(name: "Failover", type: .multiPartyChat, alias: "failover"))
            let (observerRooms, room) = try await member(observer, "failover", "observer")
            let (moverRooms, _) = try await memberEventually(mover, "failover", "mover")
            #expect(await eventually { room.members.value.contains { $0.screenName.value == "mover" } })
            let heard = Values<String>()
            let listener = observer.addEventListener { message in
                if case .chatMessage(let chat) = message { heard.append(chat.message.message) }
            }

            await nodes[1].shutdown()
            let stopped = ContinuousClock.now
            #expect(await eventually(.seconds(20)) { mover.isOnline && mover.sessionId?.hasSuffix("@node-1") == true },
                    "\(String(describing: mover.sessionId))")
            print("cluster: the client was online on node 1 \(ContinuousClock.now - stopped) after node 2 stopped")
            // Joined again on node 1, and the old membership swept: one "mover", on node 1.
            #expect(await eventually(.seconds(10)) {
                let movers = room.members.value.filter { $0.screenName.value == "mover" }
                return movers.count == 1 && movers[0].sessionId.hasSuffix("@node-1")
            }, "\(room.members.value.map { "\($0.screenName.value) \($0.sessionId)" })")
            _ = try await ChatService(roomService: moverRooms).sendMessageToRoom("from the new node")
            #expect(await eventually { heard.all.contains("from the new node") })
            withExtendedLifetime((observerRooms, listener)) {}
            await mover.stop()
            await observer.stop()
            await nodes[0].shutdown()
        }

        @Test("a channel follows its publisher to another node: the publisher's node stops, its SDK moves to node 3 and its monitor publishes again there; the member offers the new stream and the channel's viewer on node 2 decodes it")
        func channelFollowsItsPublisher() async throws {
            let postgres = try TestPostgres.server()
            let nodes = try await clusterNodes(3, on: postgres)
            // The publisher's backend is node 3's (an application's backend outlives any one node).
            var pcastOptions = PCastOptions(uri: nodes[0].signalingURL)
            pcastOptions.fallbackURIs = [nodes[2].signalingURL]
            var expressOptions = PCastExpressOptions(backendURI: URL(string: nodes[2].backendURL)!, pcastURI: nodes[0].signalingURL)
            expressOptions.pcastOptions = pcastOptions
            let publishing = ChannelExpress(roomExpress: RoomExpress(pcastExpress: PCastExpress(expressOptions)))
            let retries = Values<StreamEndedReason>()
            var publishOptions = PublishOptions(mediaConstraints: smallMedia(), capabilities: ["real-time"])
            publishOptions.monitor = MonitorOptions(streamEnded: { reason, _, retry in
                retries.append(reason)
                if retry.isPresent { try? retry.perform() } else { retry.dismiss() }
            })
            let (publisherRooms, publisher) = try await publishing.publishToChannel(PublishToChannelOptions(
                channelOptions: ChannelOptions(name: "Moves", alias: "moves"), publishOptions: publishOptions, screenName: "presenter"))
            let first = publisher.streamId

            let watching = ChannelExpress(roomExpress: RoomExpress(pcastExpress: express(nodes[1])))
            let viewed = Values<(RequestStatus, String?)>()
            let subscribers = Values<ExpressSubscriber>()
            var viewerRooms: RoomService?
            let deadline = ContinuousClock.now + .seconds(10)
            while viewerRooms == nil {   // node 2 learns of the channel from the change log
                do {
                    viewerRooms = try await watching.joinChannel(JoinChannelOptions(joinRoomOptions: JoinRoomOptions(roomAlias: "moves"))) { status, subscriber, _ in
                        viewed.append((status, subscriber?.streamId))
                        if let subscriber { subscribers.append(subscriber) }
                    }
                } catch {
                    if ContinuousClock.now > deadline { throw error }
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            @Sendable func decodedFrames() -> Int {
                subscribers.all.last?.mediaStream?.rtcStatsReport().stats.first { $0.type == "inbound-rtp" && $0.kind == "video" }?.framesDecoded ?? 0
            }
            #expect(await eventually { viewed.all.last?.1 == first && decodedFrames() > 15 }, "\(viewed.all)")

            await nodes[0].shutdown()
            let stopped = ContinuousClock.now
            #expect(await eventually(.seconds(20)) { publisher.streamId != first && !publisher.streamId.isEmpty && !publisher.hasEnded },
                    "republished: \(publisher.streamId), retries \(retries.all)")
            let second = publisher.streamId
            #expect(publisher.publisher?.streamId == second)
            #expect(await eventually(.seconds(15)) { viewed.all.last?.1 == second && decodedFrames() > 15 },
                    "\(viewed.all), decoded \(decodedFrames())")
            print("cluster: a channel's viewer on node 2 decoded its publisher's new stream on node 3 \(ContinuousClock.now - stopped) after the publisher's node stopped")
            #expect(retries.all.first == .maintenance, "\(retries.all)")
            let offered = publisherRooms.selfMember.streams.value.map { (stream: RoomStream) in stream.pcastStreamId }
            #expect(offered == [second], "the member offers the new stream only: \(offered)")
            #expect(publisherRooms.selfMember.screenName.value == "presenter")

            withExtendedLifetime((viewerRooms, publisherRooms)) {}
            await publisher.stop()
            for express in [publishing, watching] { await express.pcastExpress.shutdown() }
            for node in [nodes[1], nodes[2]] { await node.shutdown() }
        }

        @Test("a viewer whose node stops keeps watching a stream published on another node: its subscription follows it to the next node of its list (the same stream goes on decoding, in order, the last 60 frames none missing; its bandwidth limit holds there), while a stream that lived on the stopped node ends")
        func subscriptionFollows() async throws {
            let postgres = try TestPostgres.server()
            let nodes = try await clusterNodes(3, on: postgres)
            let (publisherSDK, media, publisher) = try await stampedPublisher(on: nodes[0])
            let sent = try StampTap(encoderOf: media)
            @Sendable func target() -> Int? {
                publisher.rtcStatsReport().stats.first { $0.type == "outbound-rtp" && $0.kind == "video" }?.targetBitrate
            }
            let (localSDK, localMedia, localPublisher) = try await stampedPublisher(on: nodes[1])

            var options = PCastOptions(uri: nodes[1].signalingURL)
            options.fallbackURIs = [nodes[2].signalingURL]
            let viewer = PCast(options)
            try await viewer.start(authToken: try nodes[1].token(.auth))
            let watched = try await subscribeEventually(viewer, nodes[1], publisher.streamId)
            let decoded = try StampTap(decoderOf: watched)
            let local = try await viewer.subscribe(streamToken: try nodes[1].token(.stream, originStreamId: localPublisher.streamId))
            var limit: Disposable? = watched.getVideoTracks()[0].limitBandwidth(300_000)
            #expect(await eventually { decoded.all.count >= 30 && target() == 300_000 }, "decoded \(decoded.all.count), target \(String(describing: target()))")
            let firstFlow = viewer.state.withLock { $0.subscriptions.values.first { $0.streamId == publisher.streamId }?.subscriberId }

            await nodes[1].shutdown()
            let stopped = ContinuousClock.now, before = decoded.all.count
            #expect(await eventually(.seconds(20)) { viewer.isOnline && viewer.sessionId?.hasSuffix("@node-3") == true })
            #expect(await eventually(.seconds(10)) { decoded.all.count >= before + 60 }, "decoded \(decoded.all.count - before) frames after node 2 stopped")
            // The window checked whole starts once the flow has moved: the move may come after
            // shutdown() returned (the SDK hears of it as its connection closes).
            #expect(await eventually(.seconds(10)) {
                viewer.state.withLock { $0.subscriptions.values.first { $0.streamId == publisher.streamId }?.subscriberId } != firstFlow
            })
            let afterMove = decoded.all.count
            #expect(await eventually(.seconds(10)) { decoded.all.count >= afterMove + 60 }, "decoded \(decoded.all.count - afterMove) frames after the flow moved")
            // The interruption: the longest run of frames sent but not decoded, at 30 frames a second.
            let missed = zip(decoded.all, decoded.all.dropFirst()).map { Int($1) - Int($0) - 1 }.max() ?? 0
            print("cluster: a viewer's subscription followed it to node 3 (60 frames decoded there \(ContinuousClock.now - stopped) after node 2 stopped); \(missed) frames missed, \(missed * 1000 / 30) ms at 30 fps")
            #expect(watched.endReason == nil && !publisher.hasEnded)
            #expect(zip(decoded.all, decoded.all.dropFirst()).allSatisfy { $0 < $1 }, "in order, none twice: \(decoded.all.suffix(120))")
            #expect(complete(Array(decoded.all.suffix(60)), sent: sent.all), "\(decoded.all.suffix(60))")
            let moved = viewer.state.withLock { $0.subscriptions.values.first { $0.streamId == publisher.streamId }?.subscriberId }
            #expect(moved != nil && moved != firstFlow, "a new flow on node 3: \(String(describing: moved)), was \(String(describing: firstFlow))")
            // Node 2's leg went with it (and its limit with the leg): the limit node 1 follows now is
            // the one the subscription asked for again on node 3.
            #expect(await eventually(.seconds(10)) {
                nodes[0].relay.statistics().subscribers == 1 && nodes[2].relay.statistics().subscribers == 1 && target() == 300_000
            }, "origin subscribers \(nodes[0].relay.statistics().subscribers), target \(String(describing: target()))")
            // The stream published on node 2 could not follow: it ended with its node.
            let ending = await local.ended()
            guard case .remote(let reason, _) = ending else { Issue.record("\(ending)"); return }
            #expect(reason == .maintenance || reason == .failed, "\(ending)")
            #expect(localPublisher.hasEnded)

            limit?.dispose()
            limit = nil
            #expect(await eventually(.seconds(10)) { target() != 300_000 }, "released on node 3")
            await viewer.stop()
            await publisherSDK.stop()
            await localSDK.stop()
            await media.stop()
            await localMedia.stop()
            for node in [nodes[0], nodes[2]] { await node.shutdown() }
        }
    }
}
