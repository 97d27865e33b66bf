import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// One HTTP/1.1 request on a connection of its own (SwiftNIO), trusting what the SDK's `wss://`
/// connections trust (``SignalingTrust``: ``PCastOptions/certificateAuthorityFile``). The Express
/// backend's calls and the HLS player's requests go this way when the application names a private
/// CA: Foundation's URLSession on Linux cannot be given one (it trusts the system's store only).
/// A rejected certificate is ``PCastError/Code/certificateRejected`` with its reason, as on signaling.
struct HTTPSExchange: Sendable {
    struct Response: Sendable {
        var status: Int
        var body: Data
    }

    var trust: SignalingTrust
    /// Connect, TLS, request and answer together.
    var timeout: Duration = .seconds(10)
    /// Largest body read.
    static let bodyLimit = 16 * 1024 * 1024

    /// Sends `method` `url` with `headers` and `body`; the status and body of the answer.
    func send(_ method: String, _ url: URL, headers: [(String, String)] = [], body: Data? = nil) async throws(PCastError) -> Response {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", let named = url.host, !named.isEmpty else {
            throw .invalidURI(url.absoluteString)
        }
        let host = named.hasPrefix("[") && named.hasSuffix("]") ? String(named.dropFirst().dropLast()) : named
        let secure = scheme == "https"
        let port = url.port ?? (secure ? 443 : 80)
        var target = url.path.isEmpty ? "/" : url.path
        if let query = url.query { target += "?" + query }
        let diagnosis = secure ? CertificateDiagnosis() : nil
        if secure { try trust.check() }
        let trust = self.trust, timeout = self.timeout
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000))
                .connect(host: host, port: port) { channel in
                    // A server that accepts and then goes silent must not hold the request forever.
                    channel.eventLoop.scheduleTask(in: .seconds(timeout.components.seconds + 1)) { channel.close(promise: nil) }
                    return channel.eventLoop.makeCompletedFuture {
                        if let diagnosis { try channel.pipeline.syncOperations.addHandler(try trust.makeHandler(host: host, diagnosis: diagnosis)) }
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
                        guard received.count + buffer.readableBytes <= Self.bodyLimit else {
                            throw PCastError.connectionFailed("\(url.absoluteString): the answer is larger than \(Self.bodyLimit) bytes")
                        }
                        received.append(contentsOf: buffer.readableBytesView)
                    case .end: return Response(status: status, body: received)
                    }
                }
                throw PCastError.connectionFailed("\(url.absoluteString): the connection closed before the whole answer came")
            }
        } catch let error as PCastError {
            throw error
        } catch {
            if secure, let rejected = SignalingTrust.error(error, url: url, diagnosis: diagnosis) { throw rejected }
            throw .connectionFailed("\(url.absoluteString): \(error)")
        }
    }
}
