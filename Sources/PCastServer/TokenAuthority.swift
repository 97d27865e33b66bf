import Foundation
import PCastProtocol

/// Checks digest tokens the way the platform needs them: digest (via ``DigestToken/verify(_:applicationId:secret:)``),
/// expiry, type, capabilities and the session / remote-address bindings. Pure: the caller passes
/// the time.
///
/// Capabilities this platform recognises (any other one is refused as `not-supported`, because a
/// token that asks for something the platform cannot do must not silently get less):
/// - `real-time`, `streaming`: delivery through the relay, which is what every stream gets.
/// - `role:participant`, `role:audience`, `role:presenter`, `role:moderator` (auth tokens): the
///   room roles the session may take (see ``RoomRegistry``); a token with none may take every role
///   but moderator.
/// - `audio-only`, `video-only`: on a stream token, the subscription lists only the tracks of that
///   kind (refused as `not-found` when the stream has none); on a publish token, every published
///   track must be of that kind (`unauthorized` otherwise). Both at once are `bad-request`.
///
/// ```swift
/// let authority = TokenAuthority(applicationId: "app", secret: "s")
/// switch authority.check(token, as: .auth, sessionId: "s-1", remoteAddress: "127.0.0.1", now: Date()) {
/// case .success(let claims): print(claims.expires)
/// case .failure(let failure): print(failure.status, failure.message)
/// }
/// ```
public struct TokenAuthority: Sendable, Hashable {
    public let applicationId: String
    public let secret: String

    /// Capabilities a token may carry.
    public static let recognisedCapabilities: Set<String> = ["real-time", "streaming", "audio-only", "video-only", RecordingAccess.capability]

    public init(applicationId: String, secret: String) {
        self.applicationId = applicationId
        self.secret = secret
    }

    /// Verifies `token` and checks it for a request of `type` from `sessionId` at `remoteAddress`.
    /// Every refusal is a typed failure; nothing else happens.
    public func check(
        _ token: String, as type: TokenType, sessionId: String, remoteAddress: String?, now: Date
    ) -> Result<TokenClaims, ServerMessage.Failure> {
        let claims: TokenClaims
        switch DigestToken.verify(token, applicationId: applicationId, secret: secret) {
        case .verified(let verified): claims = verified
        case .notADigestToken: return .failure(.init(status: .unauthorized, message: "the token is not a digest token"))
        case .badToken: return .failure(.init(status: .unauthorized, message: "the token is malformed"))
        case .badDigest:
            return .failure(.init(status: .unauthorized, message: "the token's digest does not verify for this application"))
        }
        if claims.isExpired(now: now) {
            return .failure(.init(status: .unauthorized, message: "the token has expired"))
        }
        guard let actual = claims.type else {
            return .failure(.init(status: .unauthorized, message: "the token has no type; \(Self.article(type)) \(type.rawValue) token is needed"))
        }
        guard actual == type else {
            return .failure(.init(
                status: .unauthorized,
                message: "\(Self.article(type)) \(type.rawValue) token is needed, not \(Self.article(actual)) \(actual.rawValue) token"))
        }
        if let bound = claims.sessionId, !bound.utf8.elementsEqual(sessionId.utf8) {
            return .failure(.init(status: .unauthorized, message: "the token is bound to another session"))
        }
        if let bound = claims.remoteAddress {
            guard let remoteAddress, Self.normalise(bound) == Self.normalise(remoteAddress) else {
                return .failure(.init(status: .unauthorized, message: "the token is bound to another client address"))
            }
        }
        let unknown = claims.capabilities.filter { !Self.recognisedCapabilities.contains($0) && Self.role(in: $0) == nil }
        if let first = unknown.first {
            return .failure(.init(status: .notSupported, message: "capability '\(first)' is not supported by this platform"))
        }
        if claims.capabilities.contains("audio-only") && claims.capabilities.contains("video-only") {
            return .failure(.init(status: .badRequest, message: "the token asks for both audio-only and video-only"))
        }
        return .success(claims)
    }

    /// The room roles a token allows (its `role:<role>` capabilities), or nil when it names none.
    ///
    /// ```swift
    /// TokenAuthority.roles(claims)   // [.moderator, .participant] for "role:moderator", "role:participant"
    /// ```
    public static func roles(_ claims: TokenClaims) -> Set<MemberRole>? {
        let roles = Set(claims.capabilities.compactMap(role(in:)))
        return roles.isEmpty ? nil : roles
    }

    /// `role:moderator` → `.moderator`.
    public static func role(in capability: String) -> MemberRole? {
        guard capability.hasPrefix("role:") else { return nil }
        return MemberRole(rawValue: String(capability.dropFirst(5)))
    }

    /// The media kind a token restricts to (`audio-only` / `video-only`), if any.
    public static func onlyKind(_ claims: TokenClaims) -> MediaTrackDescription.Kind? {
        if claims.capabilities.contains("audio-only") { return .audio }
        if claims.capabilities.contains("video-only") { return .video }
        return nil
    }

    /// IPv4-mapped IPv6 (`::ffff:1.2.3.4`) compares equal to the IPv4 address; case is ignored.
    static func normalise(_ address: String) -> String {
        let lower = address.lowercased()
        if lower.hasPrefix("::ffff:"), lower.dropFirst(7).contains(".") { return String(lower.dropFirst(7)) }
        return lower
    }

    private static func article(_ type: TokenType) -> String {
        switch type {
        case .auth: return "an"
        case .other(let s): return s.first.map { "aeiou".contains($0) } == true ? "an" : "a"
        case .stream, .publish: return "a"
        }
    }
}
