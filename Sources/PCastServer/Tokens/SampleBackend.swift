import Foundation
import PCastProtocol

/// A token request as a backend policy sees it.
public struct BackendTokenRequest: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        /// `POST …/auth`: an auth token for a client's session.
        case authentication
        /// `POST …/stream` with `type: publish`.
        case publish
        /// `POST …/stream` with `type: stream` (subscribe).
        case stream
    }
    public var kind: Kind
    /// The fields the Express APIs set.
    public var fields: BackendAPI.TokenRequest
    /// The whole JSON body (the application's authentication data is in it).
    public var body: Data

    public init(kind: Kind, fields: BackendAPI.TokenRequest, body: Data) {
        self.kind = kind
        self.fields = fields
        self.body = body
    }

    /// A top-level string field of the body (an application's own authentication data).
    public func string(_ key: String) -> String? {
        (try? JSONSerialization.jsonObject(with: body) as? [String: Any])?[key] as? String
    }
}

/// What a policy grants: the token's capabilities (room roles as `role:<role>`), lifetime and tags.
public struct TokenGrant: Sendable, Hashable {
    public var capabilities: [String]
    public var lifetime: TimeInterval
    public var applyTags: [String]

    public init(capabilities: [String], lifetime: TimeInterval, applyTags: [String] = []) {
        self.capabilities = capabilities
        self.lifetime = lifetime
        self.applyTags = applyTags
    }
}

/// Decides which tokens the sample backend gives out. Applications plug in their own (checking
/// their users in `request.body`); ``SampleBackendPolicy`` is the default.
public protocol BackendPolicy: Sendable {
    func decide(_ request: BackendTokenRequest) -> Result<TokenGrant, ServerMessage.Failure>
}

/// The default policy: the capabilities in ``allowedCapabilities``, the roles in
/// ``allowedRoles``; `moderator` only for a request whose body carries the right
/// `moderatorPassword` (when one is configured). Anything else asked for is refused, never
/// silently dropped.
///
/// ```swift
/// let policy = SampleBackendPolicy(moderatorPassword: "let-me-moderate")
/// ```
public struct SampleBackendPolicy: BackendPolicy {
    public var allowedCapabilities: Set<String>
    public var allowedRoles: Set<MemberRole>
    public var moderatorPassword: String?
    public var tokenLifetime: TimeInterval

    public init(allowedCapabilities: Set<String> = TokenAuthority.recognisedCapabilities,
                allowedRoles: Set<MemberRole> = RoomRegistry.defaultRoles,
                moderatorPassword: String? = nil, tokenLifetime: TimeInterval = 3600) {
        self.allowedCapabilities = allowedCapabilities
        self.allowedRoles = allowedRoles
        self.moderatorPassword = moderatorPassword
        self.tokenLifetime = tokenLifetime
    }

    public func decide(_ request: BackendTokenRequest) -> Result<TokenGrant, ServerMessage.Failure> {
        let capabilities = request.fields.capabilities ?? []
        if let refused = capabilities.first(where: { !allowedCapabilities.contains($0) }) {
            return .failure(.init(status: .unauthorized, message: "capability '\(refused)' is not allowed"))
        }
        switch request.kind {
        case .authentication:
            var roles: [MemberRole] = []
            for name in request.fields.roles ?? [] {
                guard let role = MemberRole(rawValue: name) else {
                    return .failure(.init(status: .badRequest, message: "no role '\(name)'"))
                }
                let byPassword = role == .moderator && moderatorPassword.map { password in
                    AdminCredentials.constantTimeEquals(Array(password.utf8), Array((request.string("moderatorPassword") ?? "").utf8))
                } == true
                guard allowedRoles.contains(role) || byPassword else {
                    return .failure(.init(status: .unauthorized, message: "the role '\(name)' is not allowed"))
                }
                roles.append(role)
            }
            // A token that names roles allows only those; asking for none allows the default set.
            let granted = roles.isEmpty ? [] : (roles + [.audience]).map { "role:\($0.rawValue)" }
            return .success(TokenGrant(capabilities: capabilities + Array(Set(granted)).sorted(), lifetime: tokenLifetime))
        case .publish:
            return .success(TokenGrant(capabilities: capabilities, lifetime: tokenLifetime, applyTags: request.fields.applyTags ?? []))
        case .stream:
            guard request.fields.originStreamId != nil || request.fields.requiredTag != nil else {
                return .failure(.init(status: .badRequest, message: "a stream token needs originStreamId or requiredTag"))
            }
            return .success(TokenGrant(capabilities: capabilities, lifetime: tokenLifetime))
        }
    }
}

/// The platform's sample application backend: mints tokens for Express clients at
/// `POST /backend/auth` and `POST /backend/stream` (see ``BackendAPI``), as the policy allows.
/// Pure apart from the clock: ``handle(route:body:signalingURI:now:)`` returns the HTTP status and reply.
///
/// ```swift
/// let backend = SampleBackend(applicationId: "app", secret: "s", policy: SampleBackendPolicy())
/// let (status, reply) = backend.handle(route: "auth", body: Data("{}".utf8), signalingURI: "ws://h/ws", now: Date())
/// ```
public struct SampleBackend: Sendable {
    public let applicationId: String
    public let secret: String
    public let policy: any BackendPolicy
    /// Largest request body read.
    public static let bodyLimit = 16 * 1024

    public init(applicationId: String, secret: String, policy: any BackendPolicy) {
        self.applicationId = applicationId
        self.secret = secret
        self.policy = policy
    }

    public func handle(route: String, body: Data, signalingURI: String, now: Date) -> (status: Int, reply: BackendAPI.TokenReply) {
        func refuse(_ status: RequestStatus, _ message: String) -> (Int, BackendAPI.TokenReply) {
            let code: Int
            switch status {
            case .unauthorized: code = 403
            case .badRequest: code = 400
            case .notFound: code = 404
            default: code = 500
            }
            return (code, .init(status: status, message: message))
        }
        guard (try? JSONSerialization.jsonObject(with: body)) is [String: Any] else {
            return refuse(.badRequest, "the body must be a JSON object")
        }
        guard let fields = try? JSONDecoder().decode(BackendAPI.TokenRequest.self, from: body) else {
            return refuse(.badRequest, "the body's token fields have the wrong types")
        }
        let kind: BackendTokenRequest.Kind
        switch route {
        case BackendAPI.authenticationRoute: kind = .authentication
        case BackendAPI.streamRoute:
            switch fields.type ?? (fields.originStreamId != nil ? "stream" : "publish") {
            case "publish": kind = .publish
            case "stream": kind = .stream
            case let other: return refuse(.badRequest, "no token type '\(other)' (publish or stream)")
            }
        default: return refuse(.notFound, "no route '\(route)'")
        }
        let grant: TokenGrant
        switch policy.decide(BackendTokenRequest(kind: kind, fields: fields, body: body)) {
        case .failure(let failure): return refuse(failure.status, failure.message)
        case .success(let granted): grant = granted
        }
        var builder = DigestTokenBuilder().expiresAt(now.addingTimeInterval(grant.lifetime))
        switch kind {
        case .authentication: builder = builder.type(.auth)
        case .publish: builder = builder.type(.publish)
        case .stream: builder = builder.type(.stream)
        }
        for capability in grant.capabilities { builder = builder.capability(capability) }
        for tag in grant.applyTags { builder = builder.applyTag(tag) }
        if kind == .stream {
            if let origin = fields.originStreamId { builder = builder.originStreamId(origin) }
            if let tag = fields.requiredTag { builder = builder.requiredTag(RequiredTag(rawValue: tag)) }
        } else if kind == .publish {
            if let tag = fields.requiredTag { builder = builder.requiredTag(RequiredTag(rawValue: tag)) }
            if let name = fields.streamName { builder = builder.streamName(name) }
        }
        let token: String
        do {
            token = try builder.encode(applicationId: applicationId, secret: secret)
        } catch {
            return refuse(.failed, "cannot build the token: \(error)")
        }
        switch kind {
        case .authentication: return (200, .init(status: .ok, authenticationToken: token, pcastUri: signalingURI))
        case .publish, .stream: return (200, .init(status: .ok, streamToken: token))
        }
    }
}
