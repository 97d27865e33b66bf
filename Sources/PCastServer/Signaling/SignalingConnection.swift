import Foundation
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOWebSocket
import PCastProtocol

/// One WebSocket's two halves: the reader decodes messages and hands them to the ``Platform``;
/// the writer sends what the platform queued for this session, in order, and closes the socket
/// when told to. Whichever half ends first ends the other.
struct SignalingConnection: Sendable {
    let platform: Platform
    let sizeLimit: Int

    /// Throws what the message iterator throws, so the WebSocket handler closes with the code
    /// it carries (1009 for fragments past the limit).
    func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, remoteAddress: String?) async throws {
        guard let (sessionId, outbox) = await platform.connect(remoteAddress: remoteAddress) else {
            try? await outbound.close(.goingAway, reason: "the platform is shutting down")
            return
        }
        let platform = self.platform
        let sizeLimit = self.sizeLimit
        let readerError: (any Error)? = await withTaskGroup(of: (any Error)?.self) { group in
            group.addTask {
                // Writer.
                for await item in outbox {
                    do {
                        switch item {
                        case .message(let envelope):
                            let data = try SignalingCodec.encode(envelope)
                            try await outbound.write(.text(String(decoding: data, as: UTF8.self)))
                        case .close(let code, let reason):
                            try await outbound.close(WebSocketErrorCode(codeNumber: Int(code.rawValue)), reason: reason)
                            return nil
                        }
                    } catch {
                        return nil
                    }
                }
                // The outbox ended without a close: the platform gave up on a client that does
                // not read (when the reader ended first this task is cancelled instead).
                if !Task.isCancelled {
                    try? await outbound.close(.policyViolation, reason: "too many unread messages")
                }
                return nil
            }
            group.addTask {
                // Reader. When fragments add up past the limit the message iterator throws a
                // close error carrying 1009, handed back to the WebSocket handler. Single frames
                // over it never get here (the frame decoder answers 1009), nor do compressed
                // frames that inflate past it (SizeLimitedDeflate).
                var messages = inbound.messages(maxSize: sizeLimit).makeAsyncIterator()
                while true {
                    let message: WebSocketMessage?
                    do {
                        message = try await messages.next()
                    } catch {
                        return error
                    }
                    guard let message else { return nil }
                    let decoded: Result<Envelope<ClientMessage>, SignalingError>
                    do throws(SignalingError) {
                        decoded = .success(try SignalingCodec.decodeClientMessage(Self.bytes(of: message), sizeLimit: sizeLimit))
                    } catch {
                        decoded = .failure(error)
                    }
                    await platform.receive(sessionId, decoded)
                }
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        await platform.disconnected(sessionId)
        if let readerError { throw readerError }
    }

    private static func bytes(of message: WebSocketMessage) -> Data {
        switch message {
        case .text(let text): return Data(text.utf8)
        case .binary(let buffer): return Data(buffer.readableBytesView)
        }
    }
}
