import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// One HTTP/1.1 request on a connection of its own (SwiftNIO), over TLS with a handler the caller
/// makes: what the SDK (Express's backend, the HLS player) and the platform (calls between nodes)
/// use when they must trust a private certificate authority, which Foundation's URLSession on
/// Linux cannot be told. Bounded: `timeout` covers connect, TLS, request and answer, and the body
/// read is at most `bodyLimit`.
package enum OneShotHTTP {
    package struct Response: Sendable {
        package var status: Int
        package var body: Data
    }

    package enum Failure: Error, Sendable, CustomStringConvertible {
        /// Not an http(s) URL with a host.
        case invalidURL(String)
        /// The answer's body passed the limit.
        case tooLarge(Int)
        /// The connection ended before the whole answer (a timeout closes it too).
        case incomplete
        /// Connecting or TLS failed: NIO's or NIOSSL's error, for the caller to read.
        case transport(any Error)

        package var description: String {
            switch self {
            case .invalidURL(let url): return "not an http(s) URL with a host: \(url)"
            case .tooLarge(let limit): return "the answer is larger than \(limit) bytes"
            case .incomplete: return "the connection closed before the whole answer came (or the request timed out)"
            case .transport(let error): return "\(error)"
            }
        }
    }

    /// Makes the TLS handler of one connection to a host (its name or address, unbracketed).
    package typealias TLSHandlerMaker = @Sendable (String) throws -> NIOSSLClientHandler

    /// Sends `method` `url` with `headers` and `body`. `tls` makes the handler for `https` URLs.
    package static func send(_ method: String, _ url: URL, headers: [(String, String)] = [], body: Data? = nil,
                             timeout: Duration = .seconds(10), bodyLimit: Int = 16 * 1024 * 1024,
                             tls: @escaping TLSHandlerMaker) async throws(Failure) -> Response {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", let named = url.host, !named.isEmpty else {
            throw .invalidURL(url.absoluteString)
        }
        let host = named.hasPrefix("[") && named.hasSuffix("]") ? String(named.dropFirst().dropLast()) : named
        let secure = scheme == "https"
        let port = url.port ?? (secure ? 443 : 80)
        var target = url.path.isEmpty ? "/" : url.path
        if let query = url.query { target += "?" + query }
        let limit = TimeAmount.nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(limit)
                .connect(host: host, port: port) { channel in
                    // A server that accepts and then goes silent must not hold the request: closed
                    // at the deadline, the answer ends incomplete.
                    let deadline = channel.eventLoop.scheduleTask(in: limit) { channel.close(promise: nil) }
                    channel.closeFuture.whenComplete { _ in deadline.cancel() }
                    return channel.eventLoop.makeCompletedFuture {
                        if secure { try channel.pipeline.syncOperations.addHandler(try tls(host)) }
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                    }
                }
            return try await channel.executeThenClose { inbound, outbound in
                var head = HTTPRequestHead(version: .http1_1, method: HTTPMethod(rawValue: method), uri: target)
                head.headers.add(name: "Host", value: host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
                head.headers.add(name: "Connection", value: "close")
                for (name, value) in headers { head.headers.add(name: name, value: value) }
                if let body { head.headers.add(name: "Content-Length", value: String(body.count)) }
                try await outbound.write(.head(head))
                if let body, !body.isEmpty { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: body)))) }
                try await outbound.write(.end(nil))
                var status = 0
                var received = Data()
                for try await part in inbound {
                    switch part {
                    case .head(let answer): status = Int(answer.status.code)
                    case .body(let buffer):
                        guard received.count + buffer.readableBytes <= bodyLimit else { throw Failure.tooLarge(bodyLimit) }
                        received.append(contentsOf: buffer.readableBytesView)
                    case .end: return Response(status: status, body: received)
                    }
                }
                throw Failure.incomplete
            }
        } catch let failure as Failure {
            throw failure
        } catch {
            throw .transport(error)
        }
    }
}
