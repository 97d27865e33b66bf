import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import PCastContracts
import PCastTLS
import ServiceLifecycle
import Synchronization
import UnixSignals

/// The optional plain-HTTP port of a TLS deployment: every request is answered `308 Permanent
/// Redirect` to the same path and query on HTTPS, and nothing else is served there (no page, no
/// API, no token ever travels in clear past the first request). The same connection guard as the
/// HTTPS listener bounds it (caps per address and in all, the request-head deadline).
enum HTTPSRedirect {
    /// The redirect's `Location` for a request, or nil when its Host header is not a host name or
    /// address (then the server's own host is used).
    ///
    /// `Host: example.com:80`, path `/whep/a?x=1`, HTTPS on 443 → `https://example.com/whep/a?x=1`.
    static func location(hostHeader: String?, fallbackHost: String, httpsPort: Int, target: String) -> String {
        let host = hostHeader.flatMap(Self.hostPart) ?? fallbackHost
        let bracketed = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        let port = httpsPort == 443 ? "" : ":\(httpsPort)"
        let path = target.hasPrefix("/") ? target : "/"
        return "https://\(bracketed)\(port)\(path)"
    }

    /// The host of a Host header without its port; nil unless it is made of host-name characters
    /// (or a bracketed IPv6 address): a header cannot steer the redirect into another URL part.
    static func hostPart(_ header: String) -> String? {
        var text = Substring(header.trimmingCharacters(in: .whitespaces))
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            let inner = text[text.index(after: text.startIndex)..<close]
            guard !inner.isEmpty, inner.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else { return nil }
            return String(inner)
        }
        if let colon = text.firstIndex(of: ":") { text = text[..<colon] }
        guard !text.isEmpty, text.count <= 253,
              text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == ".") })
        else { return nil }
        return String(text)
    }

    /// The redirecting listener as a service; `listening` gets its bound port.
    static func application(host: String, port: Int, httpsPort: @escaping @Sendable () -> Int, limits: ConnectionLimits,
                            connections: ActiveConnections, logger: Logger,
                            listening: @escaping @Sendable (Int) -> Void) -> some Service {
        let fallback = host == "0.0.0.0" || host == "::" || host.isEmpty ? "localhost" : host
        let responder = CallbackResponder<BasicRequestContext> { request, _ in
            let location = location(hostHeader: request.head.authority, fallbackHost: fallback,
                                    httpsPort: httpsPort(), target: request.uri.description)
            var headers = HTTPFields()
            headers[.location] = location
            headers[.contentType] = "text/plain; charset=utf-8"
            return Response(status: .permanentRedirect, headers: headers, body: .init(byteBuffer: ByteBuffer(string: "HTTPS: \(location)\n")))
        }
        let refused = RefusedChannels()
        let server = HTTPServerBuilder { responder in
            GuardedChildChannel(inner: HTTP1Channel(responder: responder), connections: connections, limits: limits, logger: logger, refused: refused)
        }
        return Application(
            responder: responder, server: server,
            configuration: .init(address: .hostname(host, port: port), serverName: "pcast"),
            onServerRunning: { channel in listening(channel.localAddress?.port ?? port) },
            logger: logger)
    }
}

/// The bound HTTPS port, for the redirect (known once the listener runs).
final class BoundPort: Sendable {
    private let value: Mutex<Int>
    init(_ port: Int) { value = Mutex(port) }
    var port: Int { value.withLock { $0 } }
    func set(_ port: Int) { value.withLock { $0 = port } }
}

/// Reads the certificate and key of every TLS listener again: HTTPS/WSS here, RTMPS in the media
/// services. Connections accepted from then on get the new certificate; open ones keep theirs.
struct CertificateReloader: Sendable {
    let store: TLSCertificateStore
    let services: (any MediaServices)?
    let metrics: PlatformMetrics

    func reload() throws(TLSSetupError) {
        try store.reload()
        metrics.tlsCertificate(notValidAfter: store.notValidAfter)
        try services?.reloadCertificates()
    }
}

/// Reloads the certificates on each SIGHUP (`systemctl reload pcast`, certbot's deploy hook) until
/// graceful shutdown; a failed reload is logged and the old certificate stays.
struct CertificateReloadService: Service {
    let reloader: CertificateReloader
    let logger: Logger

    func run() async throws {
        let hangUps = await UnixSignalsSequence(trapping: .sighup)
        await cancelWhenGracefulShutdown {
            for await _ in hangUps {
                do throws(TLSSetupError) {
                    try reloader.reload()
                    logger.notice("tls certificate reloaded", metadata: ["pcast.certificate": .string(reloader.store.files.certificateChain)])
                } catch {
                    logger.error("tls certificate not reloaded, the previous one stays: \(error)")
                }
            }
        }
    }
}
