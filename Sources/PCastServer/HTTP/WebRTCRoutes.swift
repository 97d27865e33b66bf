import Foundation
import Hummingbird
import NIOCore
import PCastProtocol

/// WHIP (RFC 9725) and WHEP over the platform's HTTP: `POST /whip/<name>` publishes,
/// `POST /whep/<name>` plays; each creates a resource (`Location`) that `DELETE` ends and `PATCH`
/// (trickle ICE) accepts. CORS on every answer so a page served elsewhere can use them; errors
/// are `application/problem+json` (RFC 9457).
struct WebRTCRoutes: Sendable {
    let platform: Platform
    /// Announced with `Link` headers on each new session and on `OPTIONS` (RFC 9725 §4.6).
    var iceServers: [ICEServer] = []
    /// TURN servers announced with credentials minted for each answer (``TURNSettings``): on each
    /// new session, and on an `OPTIONS` that carries a token the session itself would admit (a
    /// client gathers its relay candidates before it offers). Anyone else gets none: a credential
    /// is a relay through the operator's TURN server.
    var turn: TURNSettings? = nil
    /// The time minted credentials count from.
    var clock: @Sendable () -> Date = { Date() }

    /// Largest SDP offer read (browsers' offers are a few kilobytes).
    static let offerLimit = 64 * 1024

    func register(on router: Router<PlatformRequestContext>) {
        for kind in Kind.allCases {
            router.on("/\(kind.rawValue)/:name", method: .options) { request, context in
                var response = Self.preflight(accepting: "Accept-Post", "application/sdp")
                let admitted = await platform.admitsWebRTC(token: Self.bearer(request.headers[.authorization]),
                                                           as: kind == .whip ? .publish : .stream,
                                                           remoteAddress: context.remoteAddress?.ipAddress)
                addICEServers(&response, withTURN: admitted)
                return response
            }
            router.post("/\(kind.rawValue)/:name") { request, context in
                try await create(kind, request, context: context)
            }
            router.on("/\(kind.rawValue)/:name/:resource", method: .options) { _, _ in
                Self.preflight(accepting: "Accept-Patch", "application/trickle-ice-sdpfrag")
            }
            router.delete("/\(kind.rawValue)/:name/:resource") { _, context in
                guard let resource = context.parameters.get("resource"), await platform.closeWebRTC(resourceId: resource) else {
                    return Self.problem(WebRTCRefusal(404, "Not Found", "no such \(kind.rawValue.uppercased()) session"))
                }
                var response = Response(status: .ok)
                Self.addCORS(&response)
                return response
            }
            router.patch("/\(kind.rawValue)/:name/:resource") { request, context in
                try await patch(kind, request, context: context)
            }
        }
    }

    /// An `OPTIONS` answer: CORS, and what the resource accepts (`Accept-Post` / `Accept-Patch`).
    private static func preflight(accepting header: String, _ type: String) -> Response {
        var response = Response(status: .noContent)
        addCORS(&response)
        response.headers[.init(header)!] = type
        return response
    }

    enum Kind: String, CaseIterable, Sendable {
        case whip, whep
    }

    private func create(_ kind: Kind, _ request: Request, context: PlatformRequestContext) async throws -> Response {
        guard let name = context.parameters.get("name"), !name.isEmpty else {
            return Self.problem(WebRTCRefusal(400, "Bad Request", "no stream name in the URL"))
        }
        let type = request.headers[.contentType]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        guard type == "application/sdp" else {
            return Self.problem(WebRTCRefusal(415, "Unsupported Media Type", "the offer must be sent as Content-Type: application/sdp"))
        }
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: Self.offerLimit)
        } catch {
            return Self.problem(WebRTCRefusal(413, "Content Too Large", "the offer is larger than \(Self.offerLimit) bytes"))
        }
        let offer = String(decoding: body.readableBytesView, as: UTF8.self)
        let token = Self.bearer(request.headers[.authorization])
        // `?type=record|append` records a WHIP stream under its name, as the SDK's publish type does.
        var publishType = PublishType.live
        if kind == .whip, let requested = request.uri.queryParameters.get("type") {
            guard let type = PublishType(rawValue: requested) else {
                return Self.problem(WebRTCRefusal(400, "Bad Request", "unknown publish type '\(requested)' (live, record or append)"))
            }
            publishType = type
        }
        let result = kind == .whip
            ? await platform.openWHIP(name: name, token: token, offer: offer, publishType: publishType, remoteAddress: context.remoteAddress?.ipAddress)
            : await platform.openWHEP(name: name, token: token, offer: offer, remoteAddress: context.remoteAddress?.ipAddress)
        switch result {
        case .failure(let refusal):
            context.logger.notice("\(kind.rawValue.uppercased()) refused", metadata: ["pcast.status": "\(refusal.status)", "pcast.reason": .string(refusal.detail)])
            return Self.problem(refusal)
        case .success(let created):
            var response = Response(status: .created, headers: [.contentType: "application/sdp"],
                                    body: .init(byteBuffer: ByteBuffer(string: created.answer)))
            Self.addCORS(&response)
            let escaped = name.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? name
            response.headers[.location] = "/\(kind.rawValue)/\(escaped)/\(created.resourceId)"
            response.headers[.init("X-PCast-Stream-Id")!] = created.streamId
            addICEServers(&response, withTURN: true)
            return response
        }
    }

    /// Trickle ICE: the relay is ICE-lite with host candidates, and learns the peer's addresses
    /// from its checks, so the peer's candidates need nothing done: 204. An ICE restart (a new
    /// ufrag) is not supported: 422.
    private func patch(_ kind: Kind, _ request: Request, context: PlatformRequestContext) async throws -> Response {
        guard let resource = context.parameters.get("resource"), await platform.hasWebRTCResource(resource) else {
            return Self.problem(WebRTCRefusal(404, "Not Found", "no such \(kind.rawValue.uppercased()) session"))
        }
        let type = request.headers[.contentType]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        guard type == "application/trickle-ice-sdpfrag" else {
            return Self.problem(WebRTCRefusal(415, "Unsupported Media Type", "PATCH takes Content-Type: application/trickle-ice-sdpfrag"))
        }
        var request = request
        let body = (try? await request.collectBody(upTo: Self.offerLimit)) ?? ByteBuffer()
        let fragment = String(decoding: body.readableBytesView, as: UTF8.self)
        if fragment.split(whereSeparator: \.isNewline).contains(where: { $0.hasPrefix("a=ice-ufrag:") }) && request.headers[.ifMatch] == "*" {
            return Self.problem(WebRTCRefusal(422, "Unprocessable Content", "ICE restarts are not supported: start a new session"))
        }
        var response = Response(status: .noContent)
        Self.addCORS(&response)
        return response
    }

    /// One `Link` header per configured STUN server, and (`withTURN`) per configured TURN server
    /// with its credential and per TURN server sharing a secret with fresh credentials.
    private func addICEServers(_ response: inout Response, withTURN: Bool) {
        let minted = withTURN ? (turn.map { TURNCredential.iceServers($0, now: clock()) } ?? []) : []
        let servers = iceServers.filter { withTURN || $0.credential == nil } + minted
        guard !servers.isEmpty else { return }
        response.headers[values: .init("Link")!] = servers.map(\.linkHeader)
    }

    static func bearer(_ header: String?) -> String? {
        guard let header, header.lowercased().hasPrefix("bearer ") else { return nil }
        return String(header.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
    }

    static func addCORS(_ response: inout Response) {
        response.headers[.accessControlAllowOrigin] = "*"
        response.headers[.accessControlAllowMethods] = "POST, DELETE, PATCH, OPTIONS"
        response.headers[.accessControlAllowHeaders] = "Authorization, Content-Type, If-Match"
        response.headers[.accessControlExposeHeaders] = "Location, Link, ETag, Accept-Patch, X-PCast-Stream-Id"
    }

    static func problem(_ refusal: WebRTCRefusal) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let body: [String: String] = ["type": "about:blank", "title": refusal.title, "detail": refusal.detail, "status": String(refusal.status)]
        let data = (try? encoder.encode(body)) ?? Data("{}".utf8)
        // "status" is a number in RFC 9457.
        let text = String(decoding: data, as: UTF8.self).replacingOccurrences(of: "\"status\":\"\(refusal.status)\"", with: "\"status\":\(refusal.status)")
        var response = Response(status: HTTPResponse.Status(code: refusal.status), headers: [.contentType: "application/problem+json"],
                                body: .init(byteBuffer: ByteBuffer(string: text)))
        addCORS(&response)
        if refusal.status == 401 { response.headers[.wwwAuthenticate] = "Bearer realm=\"pcast\"" }
        return response
    }
}
