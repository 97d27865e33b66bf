import CompressNIO
import HummingbirdWSCompression
import HummingbirdWebSocket
import NIOWebSocket

/// permessage-deflate whose inflation past the size limit closes the connection with 1009.
///
/// The stock extension stops inflating at `maxDecompressedFrameSize` (so memory stays bounded),
/// but the error it throws closes the WebSocket with 1011. This wrapper turns that one error into
/// `NIOWebSocketError.invalidFrameLength`, which the WebSocket handler answers with 1009
/// ("message too big"). The inner limit is one byte over the message limit so that a frame that
/// inflates to exactly the limit still passes; the codec refuses anything larger (also 1009).
///
/// ```swift
/// WebSocketServerConfiguration(extensions: [SizeLimitedDeflate.factory(limit: 64 * 1024)])
/// ```
enum SizeLimitedDeflate {
    static func factory(limit: Int) -> WebSocketExtensionFactory {
        let inner = WebSocketExtensionFactory.perMessageDeflate(maxDecompressedFrameSize: limit + 1)
        return WebSocketExtensionFactory { Builder(inner: inner.build()) }
    }

    struct Builder: WebSocketExtensionBuilder {
        static let name = "permessage-deflate"
        let inner: any WebSocketExtensionBuilder

        func clientRequestHeader() -> String { inner.clientRequestHeader() }

        func serverReponseHeader(to request: WebSocketExtensionHTTPParameters) -> String? {
            inner.serverReponseHeader(to: request)
        }

        func serverExtension(from request: WebSocketExtensionHTTPParameters) throws -> (any WebSocketExtension)? {
            try inner.serverExtension(from: request).map { Limited(inner: $0) }
        }

        func clientExtension(from response: WebSocketExtensionHTTPParameters) throws -> (any WebSocketExtension)? {
            try inner.clientExtension(from: response).map { Limited(inner: $0) }
        }
    }

    struct Limited: WebSocketExtension {
        let inner: any WebSocketExtension
        var name: String { inner.name }
        var reservedBits: WebSocketFrame.ReservedBits { inner.reservedBits }

        func processReceivedFrame(_ frame: WebSocketFrame, context: WebSocketExtensionContext) async throws -> WebSocketFrame {
            do {
                return try await inner.processReceivedFrame(frame, context: context)
            } catch let error as CompressNIOError where error == .bufferOverflow {
                context.logger.notice("compressed WebSocket frame inflates past the size limit")
                throw NIOWebSocketError.invalidFrameLength
            }
        }

        func processFrameToSend(_ frame: WebSocketFrame, context: WebSocketExtensionContext) async throws -> WebSocketFrame {
            try await inner.processFrameToSend(frame, context: context)
        }

        func shutdown() async { await inner.shutdown() }
    }
}
