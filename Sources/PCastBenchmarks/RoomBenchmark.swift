import Foundation
import Histogram
import PCast
import PCastMedia
import PCastProtocol
import Synchronization

/// Rooms and chat under load, against a running platform (`make bench` starts the embedded one):
/// - chat send → deliver latency with `members` members in the room (every delivery counted);
/// - a history page of 100 from a room with `historyMessages` stored messages;
/// - `sessions` concurrent sessions in one room (audience), then the time from one member's change
///   to its arrival at the last of them.
///
/// ```swift
/// let result = try await RoomBenchmark(signalingURL: platform.signalingURL) { try platform.token(.auth) }.run()
/// ```
public struct RoomBenchmark: Sendable {
    public struct Result: Codable, Sendable {
        public let chatMembers: Int
        public let chatMessages: Int
        public let chatDeliveries: Int
        public let chatLatencyP50Milliseconds: Double
        public let chatLatencyP99Milliseconds: Double
        public let historyMessagesStored: Int
        public let historyPageP50Milliseconds: Double
        public let historyPageP99Milliseconds: Double
        public let sessions: Int
        public let joinSeconds: Double
        public let memberChangeFanoutMilliseconds: [Double]
        public var memberChangeFanoutMedianMilliseconds: Double {
            let sorted = memberChangeFanoutMilliseconds.sorted()
            return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
        }
    }

    public var signalingURL: String
    public var members = 100
    public var messages = 300
    public var historyMessages = 5_000
    public var historyPages = 200
    public var sessions = 2_000
    public var fanoutRounds = 5
    public var authToken: @Sendable () throws -> String

    public init(signalingURL: String, authToken: @escaping @Sendable () throws -> String) {
        self.signalingURL = signalingURL
        self.authToken = authToken
    }

    public func run() async throws -> Result {
        // Chat latency.
        let (clients, roomId) = try await crowd(members, alias: "bench-chat-\(UUID().uuidString.prefix(8))", role: .participant)
        let sendTimes = Mutex<[String: ContinuousClock.Instant]>([:])
        let latencies = Mutex(Histogram<UInt64>(highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three))
        let deliveries = Atomic<Int>(0)
        var listeners: [Disposable] = []
        for client in clients {
            listeners.append(client.addEventListener { message in
                guard case .chatMessage(let chat) = message else { return }
                let now = ContinuousClock.now
                // The message text carries its send order; the sender wrote the send time under it.
                guard let sent = sendTimes.withLock({ $0[chat.message.message] }) else { return }
                let micros = UInt64(max(0, (now - sent) / .microseconds(1)))
                latencies.withLock { _ = $0.record(micros) }
                deliveries.add(1, ordering: .relaxed)
            })
        }
        let sender = clients[0]
        for n in 0..<messages {
            let text = "bench-\(n)"
            sendTimes.withLock { $0[text] = ContinuousClock.now }
            _ = try await sender.request(.sendChatMessage(.init(roomId: roomId, message: text)))
            try await Task.sleep(for: .milliseconds(5))
        }
        let expected = messages * (members - 1)
        let deadline = ContinuousClock.now + .seconds(30)
        while deliveries.load(ordering: .relaxed) < expected, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let chat = latencies.withLock { $0 }
        listeners.removeAll()

        // History pages.
        var stored = messages
        while stored < historyMessages {
            _ = try await sender.request(.sendChatMessage(.init(roomId: roomId, message: "filler-\(stored)")))
            stored += 1
        }
        var pages = Histogram<UInt64>(highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three)
        var before: String? = nil
        for _ in 0..<historyPages {
            let start = ContinuousClock.now
            let reply = try await sender.request(.getChatMessages(.init(roomId: roomId, batchSize: 100, beforeMessageId: before)))
            pages.record(UInt64((ContinuousClock.now - start) / .microseconds(1)))
            guard case .chatMessages(let page) = reply else { throw PCastError.invalidRequest("unexpected \(reply.type)") }
            before = page.messages.first?.messageId
            if page.messages.count < 100 { before = nil }
        }
        for client in clients { await client.stop() }

        // Many sessions in one room.
        let joinStart = ContinuousClock.now
        let (audience, bigRoom) = try await crowd(sessions, alias: "bench-crowd-\(UUID().uuidString.prefix(8))", role: .audience)
        let joinSeconds = Double((ContinuousClock.now - joinStart) / .milliseconds(1)) / 1000
        let speaker = audience[0]
        let arrivals = Atomic<Int>(0)
        let last = Mutex<ContinuousClock.Instant?>(nil)
        for client in audience.dropFirst() {
            listeners.append(client.addEventListener { message in
                guard case .roomEvent(let event) = message, event.kind == .memberJoined || event.kind == .memberUpdated else { return }
                arrivals.add(1, ordering: .relaxed)
                let now = ContinuousClock.now
                last.withLock { $0 = now }
            })
        }
        var fanout: [Double] = []
        for round in 0..<fanoutRounds {
            arrivals.store(0, ordering: .relaxed)
            let start = ContinuousClock.now
            // Audience → participant (a join for everyone), then a state change: two member changes a round.
            let update: ClientMessage.UpdateMember = round == 0
                ? .init(roomId: bigRoom, role: .participant)
                : .init(roomId: bigRoom, state: round % 2 == 0 ? .active : .handRaised)
            _ = try await speaker.request(.updateMember(update))
            let end = ContinuousClock.now + .seconds(30)
            while arrivals.load(ordering: .relaxed) < sessions - 1, ContinuousClock.now < end { try await Task.sleep(for: .milliseconds(2)) }
            guard arrivals.load(ordering: .relaxed) >= sessions - 1, let arrived = last.withLock({ $0 }) else {
                throw PCastError.timeout
            }
            fanout.append(Double((arrived - start) / .microseconds(1)) / 1000)
        }
        listeners.removeAll()
        await withTaskGroup(of: Void.self) { group in
            for client in audience { group.addTask { await client.stop() } }
        }
        return Result(
            chatMembers: members, chatMessages: messages, chatDeliveries: deliveries.load(ordering: .relaxed),
            chatLatencyP50Milliseconds: Double(chat.valueAtPercentile(50)) / 1000,
            chatLatencyP99Milliseconds: Double(chat.valueAtPercentile(99)) / 1000,
            historyMessagesStored: stored,
            historyPageP50Milliseconds: Double(pages.valueAtPercentile(50)) / 1000,
            historyPageP99Milliseconds: Double(pages.valueAtPercentile(99)) / 1000,
            sessions: sessions, joinSeconds: joinSeconds, memberChangeFanoutMilliseconds: fanout)
    }

    /// `count` started clients that all joined one new room as `role`.
    private func crowd(_ count: Int, alias: String, role: MemberRole) async throws -> ([PCast], String) {
        let first = PCast(PCastOptions(uri: signalingURL, reconnects: false))
        try await first.start(authToken: try authToken())
        let reply = try await first.request(.createRoom(.init(name: alias, type: .townHall, alias: alias)))
        guard case .roomInfo(let info) = reply else { throw PCastError.invalidRequest("unexpected \(reply.type)") }
        let roomId = info.room.roomId
        var clients = [first]
        for _ in 1..<count { clients.append(PCast(PCastOptions(uri: signalingURL, reconnects: false))) }
        let token = authToken
        // Connect and join in batches, so the platform is not asked for 2,000 handshakes at once.
        for batch in stride(from: 0, to: count, by: 100) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, client) in clients[batch..<min(batch + 100, count)].enumerated() {
                    group.addTask {
                        if index + batch > 0 { try await client.start(authToken: try token()) }
                        let model = ClientMessage.MemberModel(screenName: "bench-\(index + batch)", role: role)
                        _ = try await client.request(.joinRoom(.init(room: .init(roomId: roomId), member: model)))
                    }
                }
                try await group.waitForAll()
            }
        }
        return (clients, roomId)
    }
}
