import Foundation
import Hummingbird
import NIOCore
import PCastContracts
import PCastProtocol

/// Live HLS for players that are not WebRTC clients (large audiences, CDNs):
/// `GET /hls/<stream id or channel alias>/index.m3u8` and the files it lists, low-latency HLS over
/// fMP4 (see the media services' HLS), and `main.m3u8`, the multivariant playlist naming it with
/// its codecs, resolution and bandwidth. The player's token is a stream token with the `streaming`
/// capability, scoped as a subscribe is (its `originStreamId` or `requiredTag` must lead to the
/// stream), given as `Authorization: Bearer <token>` or `?token=<token>`; a token given in the
/// query is added to every URI of the playlist, so players that resolve relative URLs (and drop
/// the query) keep it. HTTP Basic `applicationId:secret` (the operator) opens every stream.
///
/// ```
/// GET /hls/news/index.m3u8?token=DIGEST:…                  → the playlist of channel news
/// GET /hls/news/index.m3u8?token=…&_HLS_msn=12&_HLS_part=2 → held until part 12.2 is cut
/// GET /hls/news/part12.2.m4s?token=…                       → the part (held if it is the next)
/// ```
struct HLSRoutes: Sendable {
    let platform: Platform
    let tokens: TokenAuthority
    let admin: AdminCredentials

    func register(on router: Router<PlatformRequestContext>) {
        router.get("/hls/:name/:file") { request, context in
            await serve(request, context: context)
        }
        router.on("/hls/:name/:file", method: .options) { _, _ in
            var response = Response(status: .noContent)
            Self.addCORS(&response)
            return response
        }
    }

    private func serve(_ request: Request, context: PlatformRequestContext) async -> Response {
        guard let hls = platform.hls else { return Self.refusal(.notFound, "this node does not deliver HLS") }
        let name = context.parameters.get("name") ?? "", file = context.parameters.get("file") ?? ""
        var reload: HLSReload?
        let query = request.uri.queryParameters
        if let msn = query.get("_HLS_msn") {
            guard let sequence = Int(msn), sequence >= 0 else { return Self.refusal(.badRequest, "_HLS_msn must be a segment number") }
            var part: Int?
            if let text = query.get("_HLS_part") {
                guard let index = Int(text), index >= 0 else { return Self.refusal(.badRequest, "_HLS_part must be a part index") }
                part = index
            }
            reload = HLSReload(mediaSequence: sequence, part: part)
        } else if query.get("_HLS_part") != nil {
            return Self.refusal(.badRequest, "_HLS_part needs _HLS_msn")
        }
        let header = request.headers[.authorization]
        let token = WebRTCRoutes.bearer(header) ?? query.get("token")
        let streamId: String, live: Bool
        switch await authorize(name: name, token: token, byOperator: admin.authorises(header), remoteAddress: context.remoteAddress?.ipAddress) {
        case .failure(let refusal):
            context.logger.notice("HLS refused", metadata: ["pcast.status": "\(refusal.status.code)", "pcast.reason": .string(refusal.reason)])
            var response = Self.refusal(refusal.status, refusal.reason)
            if refusal.status == .unauthorized { response.headers[.wwwAuthenticate] = "Bearer realm=\"pcast\"" }
            return response
        case .success(let stream):
            (streamId, live) = stream
        }
        // A token given in the query is carried into the playlist's URIs (relative URLs lose the
        // query); one given as a header is not written anywhere.
        var uriQuery: String?
        if WebRTCRoutes.bearer(header) == nil, let token = query.get("token") { uriQuery = HLSAddress.tokenQuery(token) }
        switch await hls.serve(streamId: streamId, file: file, reload: reload, uriQuery: uriQuery, startIfNeeded: live) {
        case .ok(let contentType, let body, let maxAge):
            var response = Response(status: .ok, headers: [.contentType: contentType, .contentLength: String(body.count)],
                                    body: .init(byteBuffer: ByteBuffer(bytes: body)))
            response.headers[.cacheControl] = maxAge > 0 ? "public, max-age=\(maxAge)" : "no-cache"
            Self.addCORS(&response)
            return response
        case .notFound(let reason): return Self.refusal(.notFound, reason)
        case .badRequest(let reason): return Self.refusal(.badRequest, reason)
        case .unavailable(let reason):
            var response = Self.refusal(.serviceUnavailable, reason)
            response.headers[.retryAfter] = "1"
            return response
        }
    }

    static func addCORS(_ response: inout Response) {
        response.headers[.accessControlAllowOrigin] = "*"
        response.headers[.accessControlAllowMethods] = "GET, OPTIONS"
        response.headers[.accessControlAllowHeaders] = "Authorization"
    }

    static func refusal(_ status: HTTPResponse.Status, _ reason: String) -> Response {
        var response = Response(status: status, headers: [.contentType: "text/plain; charset=utf-8"],
                                body: .init(byteBuffer: ByteBuffer(string: reason + "\n")))
        addCORS(&response)
        return response
    }
}

/// Why a player may not have a stream's HLS.
struct HLSRefusal: Error, Sendable, Hashable {
    var status: HTTPResponse.Status
    var reason: String
}

extension HLSRoutes {
    /// The stream `name` stands for (a live stream's id, or a channel alias whose newest stream is
    /// played; or one of these that ended lately, while its playlist is kept) and whether it is
    /// live, if the player may have it as HLS: the operator, or a stream token with the
    /// `streaming` capability that leads to that stream as a subscribe would. The token is checked
    /// here, on the request's task: only the stream's lookup is the platform actor's work, which
    /// thousands of players' requests a second must not queue signaling behind.
    func authorize(name: String, token: String?, byOperator: Bool, remoteAddress: String?) async -> Result<(streamId: String, live: Bool), HLSRefusal> {
        guard byOperator || token?.isEmpty == false else {
            return .failure(.init(status: .unauthorized, reason: "no token: a stream token with the 'streaming' capability (Authorization: Bearer, or ?token=)"))
        }
        var claims: TokenClaims?
        if !byOperator, let token {
            switch tokens.check(token, as: .stream, sessionId: "", remoteAddress: remoteAddress, now: platform.clock()) {
            case .failure(let failure): return .failure(.init(status: .unauthorized, reason: failure.message))
            case .success(let checked): claims = checked
            }
        }
        if let claims, !claims.capabilities.contains(StreamRegistry.streamingCapability) {
            return .failure(.init(status: .forbidden, reason: "the token lacks the '\(StreamRegistry.streamingCapability)' capability"))
        }
        guard let (record, live) = await platform.hlsStream(named: name) else {
            return .failure(.init(status: .notFound, reason: "no stream or channel '\(name)' is live"))
        }
        if let claims {
            if let origin = claims.originStreamId, origin != record.streamId {
                return .failure(.init(status: .forbidden, reason: "the token is for another stream"))
            }
            if let required = claims.requiredTag?.rawValue, !record.tags.contains(required) {
                return .failure(.init(status: .forbidden, reason: "stream '\(record.streamId)' does not carry the token's required tag '\(required)'"))
            }
        }
        return .success((record.streamId, live))
    }
}

extension Platform {
    /// The live stream `name` stands for (its id, or the newest stream of that channel alias),
    /// noted as played; else one played lately that has ended (its playlist may still be kept).
    func hlsStream(named name: String) -> (record: StreamRecord, live: Bool)? {
        if let live = registry.stream(name) ?? registry.newestStream(tagged: "channelAlias:\(name)") {
            recentHLS.note(live)
            return (live, true)
        }
        return recentHLS.stream(name).map { ($0, false) }
    }
}

/// The last few streams played as HLS, by id and by channel alias (the newest noted wins), oldest
/// forgotten first.
struct RecentStreams: Sendable {
    let capacity: Int
    private var records: [String: StreamRecord] = [:]
    private var order: [String] = []

    init(capacity: Int) {
        self.capacity = capacity
    }

    mutating func note(_ record: StreamRecord) {
        if records.updateValue(record, forKey: record.streamId) == nil { order.append(record.streamId) }
        while order.count > capacity { records[order.removeFirst()] = nil }
    }

    /// The stream with this id, or the newest noted that carries channel alias `name`.
    func stream(_ name: String) -> StreamRecord? {
        records[name] ?? order.reversed().lazy.compactMap { self.records[$0] }.first { $0.tags.contains("channelAlias:\(name)") }
    }
}
