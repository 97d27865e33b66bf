import Foundation
import PCastContracts
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
public struct TokenAuthority: PublishAuthorizing, Hashable {
    public let applicationId: String
    public let secret: String
    /// Tokens that expire further than this from now are refused (a token valid "forever",
    /// `expires: Int64.max`, is a credential that can never be retired). Nil: no limit.
    public let maximumLifetime: TimeInterval?

    /// A year and a day: long-lived service tokens fit, "never expires" does not.
    public static let defaultMaximumLifetime: TimeInterval = 366 * 86_400

    /// Capabilities a token may carry.
    public static let recognisedCapabilities: Set<String> = Set(["real-time", "streaming", "audio-only", "video-only", SimulcastLayer.capability,
                                                                 RecordingAccess.capability, MetricsAccess.capability, AdminAccess.capability]
                                                                + QualityCeiling.allCases.map(\.rawValue))

    public init(applicationId: String, secret: String, maximumLifetime: TimeInterval? = Self.defaultMaximumLifetime) {
        self.applicationId = applicationId
        self.secret = secret
        self.maximumLifetime = maximumLifetime
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
        if let maximumLifetime, Double(claims.expires) > (now.timeIntervalSince1970 + maximumLifetime) * 1000 {
            return .failure(.init(status: .unauthorized, message:
                "the token expires further ahead than this platform allows (at most \(Int(maximumLifetime / 86_400)) days)"))
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
        let qualities = QualityCeiling.names(in: claims.capabilities)
        if Set(qualities).count > 1 {
            return .failure(.init(status: .badRequest, message: "the token names more than one quality (\(qualities.joined(separator: ", ")))"))
        }
        return .success(claims)
    }

    /// Checks a publish: the token (as ``check(_:as:sessionId:remoteAddress:now:)`` does, as a
    /// publish token), then what it may publish into, and returns the stream's tags.
    ///
    /// - **Scope.** A token with a `requiredTag` (a channel, a room or a tag) publishes into that
    ///   scope only: the stream carries the required tag whether the request names it or not, and
    ///   a requested tag that is neither the required tag nor one of the token's `applyTags` is
    ///   refused (`unauthorized`). Otherwise a token scoped to `channelAlias:mine` could add
    ///   `channelAlias:yours` and take over that channel's viewers. A token without a required
    ///   tag is unscoped: the application that signed it allows any tags.
    /// - **Recordings.** `record` and `append` write the recording named by the request's stream
    ///   name; the token must name that recording in its `streamName` claim (`unauthorized`
    ///   otherwise), so a publisher cannot overwrite or extend another's recording.
    /// - **Kinds.** `audio-only` / `video-only` tokens allow tracks of that kind only.
    ///
    /// ```swift
    /// authority.authorizePublish(token, tags: ["channelAlias:news"], tracks: tracks, publishType: .live, streamName: nil,
    ///                            sessionId: "s-1", remoteAddress: nil, now: Date())   // .success(["channelAlias:news"])
    /// ```
    public func authorizePublish(
        _ token: String, tags requested: [String], tracks: [MediaTrackDescription]?, publishType: PublishType, streamName: String?,
        sessionId: String, remoteAddress: String?, now: Date
    ) -> Result<(claims: TokenClaims, tags: [String]), ServerMessage.Failure> {
        let claims: TokenClaims
        switch check(token, as: .publish, sessionId: sessionId, remoteAddress: remoteAddress, now: now) {
        case .failure(let failure): return .failure(failure)
        case .success(let checked): claims = checked
        }
        if let kind = Self.onlyKind(claims), let tracks, tracks.contains(where: { $0.kind != kind }) {
            return .failure(.init(status: .unauthorized, message: "the token allows \(kind.rawValue) tracks only"))
        }
        if let tracks, tracks.contains(where: { $0.layer != nil }), !claims.capabilities.contains(SimulcastLayer.capability) {
            return .failure(.init(status: .unauthorized, message: "simulcast layers need the '\(SimulcastLayer.capability)' capability"))
        }
        if let tracks, let refusal = Self.layerProblem(tracks) {
            return .failure(.init(status: .badRequest, message: refusal))
        }
        var tags: [String] = []
        if let required = claims.requiredTag?.rawValue {
            let allowed = Set([required] + claims.applyTags)
            if let foreign = requested.first(where: { !allowed.contains($0) }) {
                return .failure(.init(status: .unauthorized, message:
                    "tag '\(Self.clipped(foreign))' is outside the token's scope '\(Self.clipped(required))'"))
            }
            tags.append(required)
        }
        for tag in requested + claims.applyTags where !tags.contains(tag) { tags.append(tag) }
        if publishType != .live {
            guard let streamName else {
                return .failure(.init(status: .badRequest, message: "publish type '\(publishType.rawValue)' needs a stream name"))
            }
            guard let allowed = claims.streamName, allowed.utf8.elementsEqual(streamName.utf8) else {
                return .failure(.init(status: .unauthorized, message:
                    "the token does not allow recording '\(Self.clipped(streamName))' (its streamName claim must name it)"))
            }
        }
        return .success((claims, tags))
    }

    /// A publish without a signaling session (the RTMP push endpoint): as
    /// ``authorizePublish(_:tags:tracks:publishType:streamName:sessionId:remoteAddress:now:)``
    /// with no tags and no tracks yet; a token bound to a session cannot be used.
    public func authorizeSessionlessPublish(_ token: String, publishType: PublishType, streamName: String?, remoteAddress: String?,
                                            now: Date) -> ServerMessage.Failure? {
        if case .failure(let failure) = authorizePublish(token, tags: [], tracks: nil, publishType: publishType, streamName: streamName,
                                                         sessionId: "sessionless-publish", remoteAddress: remoteAddress, now: now) {
            return failure
        }
        return nil
    }

    /// Attacker-supplied text quoted in a reply, cut to `limit` characters.
    public static func clipped(_ text: String, limit: Int = 64) -> String {
        SignalingError.clipped(text, limit: limit)
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

    /// What is wrong with a publish's simulcast layers, if anything: layers are video, at least
    /// two, with distinct RIDs and bitrates, and sizes a codec can take (or 0×0: not known, as
    /// for a browser's layers, which its offer does not size).
    static func layerProblem(_ tracks: [MediaTrackDescription]) -> String? {
        let layered = tracks.filter { $0.layer != nil }
        guard !layered.isEmpty else { return nil }
        if layered.contains(where: { $0.kind != .video }) { return "only video tracks may be simulcast layers" }
        if layered.count < 2 || layered.count > 4 { return "a simulcast has 2 to 4 layers, not \(layered.count)" }
        let layers = layered.map { $0.layer! }
        if Set(layers.map(\.rid)).count != layers.count { return "simulcast layers need distinct RIDs" }
        if Set(layers.map(\.bitrate)).count != layers.count { return "simulcast layers need distinct bitrates" }
        let unsized = { (layer: SimulcastLayer) in layer.width == 0 && layer.height == 0 }
        if layers.contains(where: { $0.rid.isEmpty || $0.rid.count > 16 || (!unsized($0) && ($0.width < 2 || $0.height < 2)) || $0.bitrate <= 0 }) {
            return "a simulcast layer has an empty or long RID, a size under 2×2 (other than 0×0, not known) or no bitrate"
        }
        if tracks.filter({ $0.kind == .video && $0.layer == nil }).count > 0 { return "a stream's video is either simulcast or one encoding" }
        return nil
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
