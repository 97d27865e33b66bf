import Foundation
import Hummingbird
import NIOCore
import PCastContracts
import PCastProtocol
import Synchronization

/// The plain HTTP routes: the browser page (`/`: watch with WHEP, publish with WHIP), health,
/// readiness, metrics and the operator's admin calls.
struct HTTPRoutes: Sendable {
    let platform: Platform
    let configuration: PlatformConfiguration
    let relay: any RelayControl
    let metrics: PlatformMetrics
    /// The sample application backend (`/backend/auth`, `/backend/stream`), when enabled.
    let backend: SampleBackend?
    /// Refused admin requests written to the audit log (see ``AuditThrottle``).
    let auditThrottle = AuditThrottle()

    /// Largest admin request body read.
    static let adminBodyLimit = 16 * 1024

    func register(on router: Router<PlatformRequestContext>) {
        router.get("/") { _, _ in
            var response = Response(status: .ok, body: ResponseBody(byteBuffer: ByteBuffer(bytes: PackageResources.index_html)))
            response.headers[.contentType] = "text/html; charset=utf-8"
            response.headers[.cacheControl] = "no-cache"
            return response
        }
        router.get("/healthz") { _, _ in
            Self.text("ok\n")
        }
        router.get("/readyz") { _, _ in
            let accepting = await platform.isAccepting
            let relayReady = relay.mediaPort != 0
            let storeReady = await platform.storeIsReachable()
            let missed = await platform.missedChanges
            guard accepting, relayReady, storeReady, missed == nil else {
                var reasons: [String] = []
                if !accepting { reasons.append("the platform is shutting down") }
                if !relayReady { reasons.append("the relay has no media port") }
                if !storeReady { reasons.append("the database does not answer") }
                if let missed { reasons.append(missed) }
                return Self.text(reasons.joined(separator: "; ") + "\n", status: .serviceUnavailable)
            }
            return Self.text("ready\n")
        }
        router.get("/metrics") { request, _ in
            if configuration.protectMetrics, !access(MetricsAccess.capability).authorises(request) {
                var response = Self.json(["error": "unauthorized: HTTP Basic applicationId:secret, or a token with the 'metrics' capability (Authorization: Bearer, or ?token=)"],
                                         status: .unauthorized)
                response.headers[.wwwAuthenticate] = "Basic realm=\"pcast\""
                return response
            }
            var response = Self.text(metrics.render(relay: relay.statistics()))
            response.headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            return response
        }
        router.post("/admin/streams/:streamId/end") { request, context in
            try await endStream(request, context: context)
        }
        router.get("/admin/nodes") { request, context in
            guard await admin(request, context) != nil else { return Self.adminUnauthorized() }
            do throws(RoomStoreError) {
                return Self.encode(NodeList(nodeId: configuration.nodeId, nodes: try await platform.clusterNodes()), status: .ok)
            } catch {
                return Self.json(["error": error.description], status: .serviceUnavailable)
            }
        }
        router.get("/admin/api/streams") { request, context in
            guard await admin(request, context) != nil else { return Self.adminUnauthorized() }
            return Self.encode(await platform.streamSummaries(), status: .ok)
        }
        router.get("/admin/api/audit") { request, context in
            guard await admin(request, context) != nil else { return Self.adminUnauthorized() }
            let limit = min(AuditLog.maximumPage, max(1, request.uri.queryParameters.get("limit").flatMap { Int($0) } ?? AuditLog.defaultPage))
            do throws(RoomStoreError) {
                return Self.encode(AuditLog(entries: try await platform.auditLog(limit: limit)), status: .ok)
            } catch {
                return Self.json(["error": error.description], status: .serviceUnavailable)
            }
        }
        router.get("/recordings") { request, context in
            guard recordingAccess.authorises(request) else { return Self.recordingsUnauthorized() }
            // In a cluster: every live node's recordings, each with its node.
            let (recordings, unreachable) = await platform.clusterRecordings()
            return Self.encode(RecordingList(recordings: recordings, unreachableNodes: unreachable.isEmpty ? nil : unreachable), status: .ok)
        }
        router.get("/recordings/:name") { request, context in
            try await downloadRecording(request, context: context)
        }
        if let backend {
            for route in [BackendAPI.authenticationRoute, BackendAPI.streamRoute] {
                router.post("/backend/\(route)") { request, context in
                    try await token(backend, route: route, request, context: context)
                }
            }
        }
    }

    /// Who an admin request comes from: `admin` (HTTP Basic with the application's credentials) or
    /// `token` (a token with the `admin` capability); nil, after writing the refusal to the audit
    /// log (at most ``AuditThrottle/burst`` refusals per ``AuditThrottle/window``: a flood of them is
    /// counted, not stored), for anyone else.
    private func admin(_ request: Request, _ context: PlatformRequestContext) async -> String? {
        if AdminCredentials(applicationId: configuration.applicationId, secret: configuration.secret).authorises(request.headers[.authorization]) {
            return "admin"
        }
        if access(AdminAccess.capability).authorises(request) { return "token" }
        if let unlogged = auditThrottle.admit(now: .now) {
            let note = unlogged > 0 ? " (\(unlogged) refusals before this one not logged)" : ""
            await platform.audit(actor: "anonymous", remoteAddress: context.remoteAddress?.ipAddress, action: Self.action(request),
                                 outcome: "refused", detail: "no admin credentials" + note)
        }
        return nil
    }

    static func action(_ request: Request) -> String {
        "\(request.method.rawValue) \(request.uri.path)"
    }

    static func adminUnauthorized() -> Response {
        var response = Self.json(["error": "unauthorized: HTTP Basic applicationId:secret, or a token with the 'admin' capability (Authorization: Bearer, or ?token=)"],
                                 status: .unauthorized)
        response.headers[.wwwAuthenticate] = "Basic realm=\"pcast\""
        return response
    }

    private func endStream(_ request: Request, context: PlatformRequestContext) async throws -> Response {
        guard let actor = await admin(request, context) else { return Self.adminUnauthorized() }
        guard let streamId = context.parameters.get("streamId"), !streamId.isEmpty else {
            return Self.json(["error": "no stream id"], status: .badRequest)
        }
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: Self.adminBodyLimit)
        } catch {
            return Self.json(["error": "body larger than \(Self.adminBodyLimit) bytes"], status: .contentTooLarge)
        }
        var description: String?
        if body.readableBytes > 0 {
            struct Body: Decodable { var description: String? }
            guard let decoded = try? JSONDecoder().decode(Body.self, from: Data(body.readableBytesView)) else {
                return Self.json(["error": "the body must be a JSON object like {\"description\": \"…\"}"], status: .badRequest)
            }
            description = decoded.description
        }
        guard await platform.endStream(streamId, reason: .censored, description: description) else {
            await platform.audit(actor: actor, remoteAddress: context.remoteAddress?.ipAddress, action: Self.action(request),
                                 outcome: "failed", detail: "no stream '\(SignalingError.clipped(streamId))'")
            return Self.json(["error": "no stream '\(streamId)'"], status: .notFound)
        }
        await platform.audit(actor: actor, remoteAddress: context.remoteAddress?.ipAddress, action: Self.action(request),
                             outcome: "done", detail: "stream \(streamId) ended as censored" + (description.map { ": \($0)" } ?? ""))
        context.logger.notice("stream censored by the operator", metadata: ["pcast.stream": .string(streamId)])
        return Self.json(["streamId": streamId, "reason": StreamEndedReason.censored.rawValue])
    }

    private var recordingAccess: RecordingAccess { access(RecordingAccess.capability) }

    private func access(_ capability: String) -> RecordingAccess {
        RecordingAccess(tokens: configuration.tokenAuthority,
                        admin: AdminCredentials(applicationId: configuration.applicationId, secret: configuration.secret),
                        capability: capability)
    }

    private static func recordingsUnauthorized() -> Response {
        var response = Self.json(["error": "unauthorized: HTTP Basic applicationId:secret, or a token with the 'recordings' capability (Authorization: Bearer, or ?token=)"],
                                 status: .unauthorized)
        response.headers[.wwwAuthenticate] = "Bearer realm=\"pcast\""
        return response
    }

    /// `GET /recordings/{name}`: the recording's file (`<name>` or `<name>.mp4`), with single byte
    /// ranges. A recording in progress is served up to its current end.
    private func downloadRecording(_ request: Request, context: PlatformRequestContext) async throws -> Response {
        guard recordingAccess.authorises(request) else { return Self.recordingsUnauthorized() }
        let raw = context.parameters.get("name") ?? ""
        let name: RecordingName
        do throws(RecordingNameError) {
            name = try RecordingName(raw.hasSuffix(".mp4") ? String(raw.dropLast(4)) : raw)
        } catch {
            return Self.json(["error": "bad recording name: \(error)"], status: .badRequest)
        }
        guard let path = platform.recordings?.path(of: name),
              let attributes = try? FileManager.default.attributesOfItem(atPath: path), let size = (attributes[.size] as? NSNumber)?.intValue else {
            // In a cluster, the node that keeps it serves it: the client is sent there (the same
            // credentials hold on every node).
            if let base = await platform.nodeKeeping(recording: name.description) {
                var response = Response(status: .temporaryRedirect)
                let query = request.uri.query.map { "?" + $0 } ?? ""
                response.headers[.location] = base + "/recordings/" + name.fileName + query
                return response
            }
            return Self.json(["error": "no recording '\(name)'"], status: .notFound)
        }
        var headers: HTTPFields = [.contentType: "video/mp4", .acceptRanges: "bytes"]
        headers[.contentDisposition] = "attachment; filename=\"\(name.fileName)\""
        switch ByteRange(header: request.headers[.range], size: size) {
        case .unsatisfiable:
            headers[.contentRange] = "bytes */\(size)"
            return Response(status: .rangeNotSatisfiable, headers: headers)
        case .whole:
            headers[.contentLength] = String(size)
            guard size > 0 else { return Response(status: .ok, headers: headers) }
            let body = try await FileIO().loadFile(path: path, range: 0...(size - 1), context: context)
            return Response(status: .ok, headers: headers, body: body)
        case .partial(let range):
            headers[.contentRange] = "bytes \(range.lowerBound)-\(range.upperBound)/\(size)"
            headers[.contentLength] = String(range.count)
            let body = try await FileIO().loadFile(path: path, range: range, context: context)
            return Response(status: .partialContent, headers: headers, body: body)
        }
    }

    private func token(_ backend: SampleBackend, route: String, _ request: Request, context: PlatformRequestContext) async throws -> Response {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: SampleBackend.bodyLimit)
        } catch {
            return Self.encode(BackendAPI.TokenReply(status: .badRequest, message: "body larger than \(SampleBackend.bodyLimit) bytes"),
                               status: .contentTooLarge)
        }
        let host = request.head.authority ?? "\(configuration.host):\(configuration.httpPort)"
        // wss:// where the caller came over TLS: this listener's own, or a proxy's in front of it.
        let secure = configuration.tls != nil || request.headers[.init("X-Forwarded-Proto")!]?.lowercased() == "https"
        let (status, reply) = backend.handle(route: route, body: Data(body.readableBytesView),
                                             signalingURI: "\(secure ? "wss" : "ws")://\(host)/ws", now: Date())
        if reply.status != .ok {
            context.logger.notice("backend refused a token", metadata: ["pcast.route": .string(route), "pcast.reason": .string(reply.message ?? "")])
        }
        return Self.encode(reply, status: HTTPResponse.Status(code: status))
    }

    private static func encode<T: Encodable>(_ value: T, status: HTTPResponse.Status) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    private static func text(_ text: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    private static func json(_ object: [String: String], status: HTTPResponse.Status = .ok) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = (try? encoder.encode(object)) ?? Data("{}".utf8)
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// Who may list and download recordings: the operator (HTTP Basic `applicationId:secret`), or the
/// holder of an unexpired auth or stream token of this application carrying the `recordings`
/// capability, given as `Authorization: Bearer <token>` or as `?token=<token>` (for players that
/// cannot set headers).
struct RecordingAccess: Sendable {
    static let capability = "recordings"
    let tokens: TokenAuthority
    let admin: AdminCredentials
    /// The capability a token needs (`recordings`, or `metrics` for a protected `/metrics`).
    var capability: String = Self.capability

    func authorises(_ request: Request) -> Bool {
        let header = request.headers[.authorization]
        if admin.authorises(header) { return true }
        var token: String?
        if let header, header.lowercased().hasPrefix("bearer ") {
            token = String(header.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
        } else {
            token = request.uri.queryParameters.get("token")
        }
        guard let token else { return false }
        return authorises(token: token, now: Date())
    }

    func authorises(token: String, now: Date) -> Bool {
        for type in [TokenType.auth, .stream] {
            if case .success(let claims) = tokens.check(token, as: type, sessionId: "", remoteAddress: nil, now: now),
               claims.sessionId == nil, claims.capabilities.contains(capability) {
                return true
            }
        }
        return false
    }
}

/// The capability that opens a protected `GET /metrics`.
enum MetricsAccess {
    static let capability = "metrics"
}

/// The capability that opens the admin routes (besides HTTP Basic with the application's credentials).
enum AdminAccess {
    static let capability = "admin"
}

/// The body of `GET /admin/api/audit`: the latest entries, newest first.
struct AuditLog: Codable, Sendable {
    static let defaultPage = 100, maximumPage = 1_000
    var entries: [AuditEntry]
}

/// How many refused admin requests reach the audit log: ``burst`` per ``window``, the rest counted
/// and noted on the next one logged (a flood of forged requests must not fill the store).
final class AuditThrottle: Sendable {
    static let burst = 20
    static let window: Duration = .seconds(10)
    private let state = Mutex<(start: ContinuousClock.Instant?, logged: Int, unlogged: Int)>((nil, 0, 0))

    /// Nil: not to be logged (counted); otherwise how many were not logged before this one.
    func admit(now: ContinuousClock.Instant) -> Int? {
        state.withLock { state in
            if let start = state.start, now - start < Self.window {
                guard state.logged < Self.burst else {
                    state.unlogged += 1
                    return nil
                }
            } else {
                state.start = now
                state.logged = 0
            }
            state.logged += 1
            defer { state.unlogged = 0 }
            return state.unlogged
        }
    }
}

/// The body of `GET /admin/nodes`: this node's id and every live node (this one included).
struct NodeList: Codable, Sendable {
    var nodeId: String
    var nodes: [NodeRecord]
}

/// The body of `GET /recordings`.
struct RecordingList: Codable, Sendable {
    var recordings: [RecordingInfo]
    /// In a cluster, live nodes that did not answer (their recordings are missing from the list).
    var unreachableNodes: [String]?
}

/// HTTP Basic credentials for the admin routes: user = application id, password = secret,
/// compared in constant time.
///
/// ```swift
/// AdminCredentials(applicationId: "app", secret: "s").authorises("Basic YXBwOnM=") // true
/// ```
public struct AdminCredentials: Sendable {
    let expected: [UInt8]

    public init(applicationId: String, secret: String) {
        expected = Array("\(applicationId):\(secret)".utf8)
    }

    /// True when `header` is `Basic base64(applicationId:secret)`.
    public func authorises(_ header: String?) -> Bool {
        guard let header else { return false }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "basic",
              let decoded = Data(base64Encoded: String(parts[1]).trimmingCharacters(in: .whitespaces))
        else { return false }
        return Self.constantTimeEquals(expected, Array(decoded))
    }

    /// Compares without an early exit; only the length can show.
    static func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt8(truncatingIfNeeded: a.count ^ b.count) | (a.count == b.count ? 0 : 1)
        for i in 0..<a.count {
            difference |= a[i] ^ (i < b.count ? b[i] : ~a[i])
        }
        return difference == 0
    }
}
