public import Foundation
import PCastMedia
import PCastProtocol
import Synchronization

/// A chat message (the PCast iOS SDK's `PhenixChatMessage`): id, platform timestamp, sender, text. The text
/// is data, delivered exactly as sent.
public typealias ChatMessage = ChatMessageDescription

extension ChatMessageDescription {
    /// The platform's timestamp as a date.
    public var date: Date { Date(timeIntervalSince1970: Double(timestamp) / 1000) }
}

/// The PCast iOS SDK's Chat Service for the active room of a ``RoomService``: the most recent messages as
/// an observable (at most `batchSize`, up to 100), sending, and history.
///
/// ```swift
/// let chat = ChatService(roomService: rooms, batchSize: 10)
/// let watching = chat.messages.subscribe { recent in print(recent.last?.message ?? "") }
/// try await chat.sendMessageToRoom("hello")
/// let older = try await chat.getMessages(batchSize: 50, beforeMessageId: chat.messages.value.first?.messageId)
/// ```
public final class ChatService: Sendable {
    public let roomService: RoomService
    public let batchSize: Int
    /// The most recent messages of the active room, oldest first (the PCast iOS SDK's `getObservableChatMessages`).
    public let messages: ObservableValue<[ChatMessage]>
    /// While false, incoming messages are ignored and sending is refused (the PCast iOS SDK's `getObservableChatEnabled`).
    public let chatEnabled: ObservableValue<Bool>
    private let listeners = Mutex<[Disposable]>([])

    /// - Parameter batchSize: how many recent messages ``messages`` keeps, 1...100.
    public init(roomService: RoomService, batchSize: Int = RoomLimits.maximumBatchSize) {
        self.roomService = roomService
        self.batchSize = min(max(batchSize, 1), RoomLimits.maximumBatchSize)
        messages = ObservableValue([])
        chatEnabled = ObservableValue(true)
        let events = roomService.pcast.addEventListener { [weak self] event in
            guard let self, case .chatMessage(let chat) = event else { return }
            self.receive([chat.message])
        }
        let rooms = roomService.activeRoom.subscribe { [weak self] room in
            guard let self else { return }
            self.messages.setValue([])
            if let room { Task { [weak self] in await self?.loadRecent(room.roomId) } }
        }
        listeners.withLock { $0 = [events, rooms] }
    }

    /// Sends a message to the active room; every member (this one included) receives it.
    ///
    /// - Throws: `bad-request` for an empty or oversized message, ``PCastError/invalidRequest(_:)``
    ///   when not in a room or chat is disabled.
    @discardableResult
    public func sendMessageToRoom(_ message: String) async throws(PCastError) -> ChatMessage {
        guard chatEnabled.value else { throw .invalidRequest("chat is disabled") }
        guard let room = roomService.activeRoom.value else { throw .invalidRequest("not in a room") }
        let reply = try await roomService.pcast.request(.sendChatMessage(.init(roomId: room.roomId, message: message)),
                                                        inOrder: { [weak self] reply in
            if case .chatMessage(let chat) = reply { self?.receive([chat.message]) }
        })
        guard case .chatMessage(let chat) = reply else { throw .invalidRequest("unexpected reply to send-chat-message: \(reply.type)") }
        return chat.message
    }

    /// History of the active room, oldest first: up to `batchSize` messages after `afterMessageId`,
    /// before `beforeMessageId`, or between both; with neither, the most recent.
    public func getMessages(batchSize: Int, afterMessageId: String? = nil, beforeMessageId: String? = nil) async throws(PCastError) -> [ChatMessage] {
        guard let room = roomService.activeRoom.value else { throw .invalidRequest("not in a room") }
        return try await history(room.roomId, batchSize: batchSize, after: afterMessageId, before: beforeMessageId)
    }

    private func history(_ roomId: String, batchSize: Int, after: String?, before: String?, inOrder: (@Sendable (ServerMessage) -> Void)? = nil) async throws(PCastError) -> [ChatMessage] {
        let reply = try await roomService.pcast.request(
            .getChatMessages(.init(roomId: roomId, batchSize: batchSize, afterMessageId: after, beforeMessageId: before)), inOrder: inOrder)
        guard case .chatMessages(let page) = reply else { throw .invalidRequest("unexpected reply to get-chat-messages: \(reply.type)") }
        return page.messages
    }

    private func loadRecent(_ roomId: String) async {
        do throws(PCastError) {
            _ = try await history(roomId, batchSize: batchSize, after: nil, before: nil, inOrder: { [weak self] reply in
                if case .chatMessages(let page) = reply { self?.receive(page.messages) }
            })
        } catch {
            roomService.pcast.logger.warning("could not load recent chat", metadata: ["room": "\(roomId)", "error": "\(error)"])
        }
    }

    /// Merges messages of the active room into the recent window (ordered by id, no repeats).
    private func receive(_ incoming: [ChatMessage]) {
        guard chatEnabled.value, let roomId = roomService.activeRoom.value?.roomId else { return }
        let relevant = incoming.filter { $0.roomId == roomId }
        guard !relevant.isEmpty else { return }
        let limit = batchSize
        messages.update { window in
            var seen = Set(window.map(\.messageId))
            for message in relevant where seen.insert(message.messageId).inserted { window.append(message) }
            window.sort { ($0.sequence ?? 0) < ($1.sequence ?? 0) }
            if window.count > limit { window.removeFirst(window.count - limit) }
        }
    }
}
