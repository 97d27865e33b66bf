// EdgeAuth digest tokens, byte-for-byte compatible with the `phenix-edge-auth` Python package
// (edgeauth/token_builder.py and edgeauth/digest_tokens.py).
//
// Wire format: "DIGEST:" + base64(JSON {"applicationId":…, "digest":…, "token":…}) where `token`
// is a JSON *string* holding the claims JSON, and `digest` is
// base64(HMAC-SHA512(key: applicationId + secret, message: UTF-8 of that token string)).
// Both JSON texts are written like Python's `json.dumps(obj, separators=(',', ':'))`:
// insertion-ordered keys, no spaces, non-ASCII escaped as lowercase `\uXXXX` (surrogate pairs
// above the BMP), `/` not escaped, DEL escaped as `\u007f`.

import Crypto
import Foundation

/// Errors from building or decoding digest tokens.
///
/// ```swift
/// do { _ = try DigestTokenBuilder().uri("https://x").encode(applicationId: "app", secret: "s") }
/// catch { print(error) } // missingExpiry — the Python builder refuses tokens without expiry too
/// ```
public enum DigestTokenError: Error, Sendable, Equatable {
    /// The string does not start with `DIGEST:`.
    case notADigestToken
    /// The token is not a well-formed digest token (base64, JSON, field types, size).
    case badToken
    /// Building: the application ID is empty.
    case missingApplicationId
    /// Building: the secret is empty.
    case missingSecret
    /// Building: no expiry was set.
    case missingExpiry
}

/// A JSON value inside token claims.
///
/// Numbers keep their literal text so nothing is lost to floating point; strings that contained
/// lone UTF-16 surrogates (possible in Python, impossible in Swift) hold U+FFFD instead.
///
/// ```swift
/// let v = TokenValue.number("1700000000000")
/// v.int64Value // 1700000000000
/// ```
public indirect enum TokenValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// The numeric literal as written, e.g. `"1700000000000"`, `"1.5e3"`, `"NaN"`.
    case number(String)
    case string(String)
    case array([TokenValue])
    case object([TokenField])

    /// The string, if this is a string.
    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The number as an integer: integral literals exactly, others truncated toward zero; nil
    /// when not a number or not representable as `Int64`.
    public var int64Value: Int64? {
        guard case .number(let literal) = self else { return nil }
        if let exact = Int64(literal) { return exact }
        guard let d = Double(literal), d.isFinite else { return nil }
        let t = d.rounded(.towardZero)
        // 2^63 itself is not representable, hence the strict upper bound.
        guard t >= -9_223_372_036_854_775_808.0, t < 9_223_372_036_854_775_808.0 else { return nil }
        return Int64(t)
    }

    /// The elements, if this is an array whose elements are all strings.
    public var stringArrayValue: [String]? {
        guard case .array(let items) = self else { return nil }
        var out: [String] = []
        out.reserveCapacity(items.count)
        for item in items {
            guard case .string(let s) = item else { return nil }
            out.append(s)
        }
        return out
    }

    init(_ py: PyJSON) {
        switch py {
        case .null: self = .null
        case .bool(let b): self = .bool(b)
        case .number(let cps): self = .number(PythonCompat.string(cps))
        case .string(let cps): self = .string(PythonCompat.string(cps))
        case .array(let items): self = .array(items.map(TokenValue.init))
        case .object(let members):
            self = .object(members.map { TokenField(name: PythonCompat.string($0.key), value: TokenValue($0.value)) })
        }
    }

    /// Python-style compact JSON of this value (what `json.dumps` would print for it).
    func appendJSON(to out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let literal): out += literal
        case .string(let s): PythonCompat.appendJSONString(s, to: &out)
        case .array(let items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                item.appendJSON(to: &out)
            }
            out += "]"
        case .object(let fields):
            out += "{"
            for (i, f) in fields.enumerated() {
                if i > 0 { out += "," }
                PythonCompat.appendJSONString(f.name, to: &out)
                out += ":"
                f.value.appendJSON(to: &out)
            }
            out += "}"
        }
    }
}

/// One named member of a JSON object, in document order.
///
/// ```swift
/// let f = TokenField(name: "uri", value: .string("https://pcast.example"))
/// ```
public struct TokenField: Sendable, Equatable {
    public var name: String
    public var value: TokenValue

    public init(name: String, value: TokenValue) {
        self.name = name
        self.value = value
    }
}

/// The `type` claim. The Python builder writes `auth`, `stream` or `publish`.
///
/// ```swift
/// TokenType(rawValue: "stream") == .stream // true
/// ```
public enum TokenType: Sendable, Equatable, Hashable {
    /// `forAuthenticateOnly()` in the Python builder.
    case auth
    /// `forStreamingOnly()`.
    case stream
    /// `forPublishingOnly()`.
    case publish
    /// Any other value found in a token.
    case other(String)

    public init(rawValue: String) {
        switch rawValue {
        case "auth": self = .auth
        case "stream": self = .stream
        case "publish": self = .publish
        default: self = .other(rawValue)
        }
    }

    public var rawValue: String {
        switch self {
        case .auth: return "auth"
        case .stream: return "stream"
        case .publish: return "publish"
        case .other(let s): return s
        }
    }
}

/// The `requiredTag` claim: the tag an origin stream must carry.
///
/// Decoding recognises the prefixes the Python builder writes, so `.raw("channelId:x")` is
/// read back as `.channelId("x")` (same wire value).
///
/// ```swift
/// RequiredTag(rawValue: "roomAlias:lobby") == .roomAlias("lobby") // true
/// RequiredTag.channelId("abc").rawValue                           // "channelId:abc"
/// ```
public enum RequiredTag: Sendable, Equatable, Hashable {
    case channelId(String)
    case channelAlias(String)
    case roomId(String)
    case roomAlias(String)
    /// Any other tag, written as is (Python `for_tag`).
    case raw(String)

    private static let prefixes: [(String, @Sendable (String) -> RequiredTag)] = [
        ("channelId:", RequiredTag.channelId), ("channelAlias:", RequiredTag.channelAlias),
        ("roomId:", RequiredTag.roomId), ("roomAlias:", RequiredTag.roomAlias),
    ]

    public init(rawValue: String) {
        // Compare UTF-8 bytes: String.hasPrefix uses canonical equivalence, Python does not.
        let bytes = Array(rawValue.utf8)
        for (prefix, make) in Self.prefixes where bytes.starts(with: prefix.utf8) {
            self = make(String(decoding: bytes[prefix.utf8.count...], as: UTF8.self))
            return
        }
        self = .raw(rawValue)
    }

    public var rawValue: String {
        switch self {
        case .channelId(let v): return "channelId:" + v
        case .channelAlias(let v): return "channelAlias:" + v
        case .roomId(let v): return "roomId:" + v
        case .roomAlias(let v): return "roomAlias:" + v
        case .raw(let v): return v
        }
    }
}

/// Claims of a decoded token, with typed accessors for the fields the EdgeAuth builder writes.
///
/// Construction validates the known fields (see ``DigestToken``), so `expires` is always present.
///
/// ```swift
/// if case .verified(let claims) = DigestToken.verify(token, applicationId: "app", secret: "s"),
///    !claims.isExpired(now: Date()) {
///     print(claims.type, claims.requiredTag, claims.capabilities)
/// }
/// ```
public struct TokenClaims: Sendable, Equatable {
    /// The application ID from the token envelope.
    public let applicationId: String
    /// The claims JSON exactly as it was signed.
    public let json: String
    /// Top-level members in order; a repeated key keeps its first position and last value,
    /// as Python's `json.loads` does.
    public let fields: [TokenField]
    /// Expiry in milliseconds since the UNIX epoch.
    public let expires: Int64

    init?(applicationId: String, json: String, value: PyJSON) {
        guard case .object(let fields) = TokenValue(value) else { return nil }
        self.applicationId = applicationId
        self.json = json
        self.fields = fields
        // Fields the builder writes must have the builder's types; anything else is malformed.
        func check(_ name: String, _ ok: (TokenValue) -> Bool) -> Bool {
            guard let v = fields.first(where: { $0.name == name })?.value else { return true }
            return ok(v)
        }
        let isString: (TokenValue) -> Bool = { $0.stringValue != nil }
        let isStringArray: (TokenValue) -> Bool = { $0.stringArrayValue != nil }
        guard let expires = fields.first(where: { $0.name == "expires" })?.value.int64Value,
              check("type", isString), check("uri", isString), check("requiredTag", isString),
              check("sessionId", isString), check("remoteAddress", isString),
              check("originStreamId", isString), check("streamName", isString), check("capabilities", isStringArray),
              check("applyTags", isStringArray)
        else { return nil }
        self.expires = expires
    }

    /// The value of a top-level member.
    public subscript(_ name: String) -> TokenValue? {
        fields.first { $0.name == name }?.value
    }

    /// True once `now` has reached the expiry instant.
    public func isExpired(now: Date) -> Bool {
        let nowMs = (now.timeIntervalSince1970 * 1000).rounded(.down)
        return nowMs >= Double(expires)
    }

    public var type: TokenType? { self["type"]?.stringValue.map(TokenType.init(rawValue:)) }
    public var uri: String? { self["uri"]?.stringValue }
    /// Capabilities in token order (the Python builder sorts them).
    public var capabilities: [String] { self["capabilities"]?.stringArrayValue ?? [] }
    public var requiredTag: RequiredTag? { self["requiredTag"]?.stringValue.map(RequiredTag.init(rawValue:)) }
    public var applyTags: [String] { self["applyTags"]?.stringArrayValue ?? [] }
    public var sessionId: String? { self["sessionId"]?.stringValue }
    public var remoteAddress: String? { self["remoteAddress"]?.stringValue }
    public var originStreamId: String? { self["originStreamId"]?.stringValue }
    /// The recording a publish token may write (`record` / `append`): a PCastKit claim, not an
    /// EdgeAuth one (EdgeAuth libraries carry it like any other member).
    public var streamName: String? { self["streamName"]?.stringValue }
}

/// A decoded but **unverified** token, e.g. to look up the secret for its application.
///
/// ```swift
/// let unverified = try DigestToken.decode(token)
/// let secret = secrets[unverified.applicationId]
/// ```
public struct UnverifiedDigestToken: Sendable, Equatable {
    public let applicationId: String
    /// The base64 digest as carried in the token.
    public let digest: String
    public let claims: TokenClaims
}

/// Builds EdgeAuth claims in insertion order, mirroring Python's `TokenBuilder`.
///
/// Setting a field again replaces its value but keeps its original position (Python dict
/// semantics). Capabilities are de-duplicated and sorted by code point like the Python builder.
/// Apply-tags are de-duplicated; Python emits them in `set` order, which depends on its per-process
/// hash seed, so with more than one apply-tag only the set (not the order) can match.
///
/// ```swift
/// let token = try DigestTokenBuilder()
///     .expiresIn(seconds: 3600, now: Date())
///     .forStreamingOnly()
///     .channel("us-east#demo#channel")
///     .encode(applicationId: "my-app", secret: "my-secret")
/// ```
public struct DigestTokenBuilder: Sendable, Equatable {
    /// The claims so far, in insertion order.
    public private(set) var fields: [TokenField] = []

    public init() {}

    private func setting(_ name: String, _ value: TokenValue) -> Self {
        var copy = self
        if let i = copy.fields.firstIndex(where: { $0.name == name }) {
            copy.fields[i].value = value
        } else {
            copy.fields.append(TokenField(name: name, value: value))
        }
        return copy
    }

    private func strings(_ name: String) -> [String] {
        fields.first { $0.name == name }?.value.stringArrayValue ?? []
    }

    /// Exact (code point) equality; Swift's `==` would merge canonically equivalent strings that
    /// Python's set keeps apart.
    private static func containsExactly(_ list: [String], _ s: String) -> Bool {
        list.contains { $0.utf8.elementsEqual(s.utf8) }
    }

    /// Backend URI (`with_uri`).
    public func uri(_ uri: String) -> Self { setting("uri", .string(uri)) }

    /// Adds a capability (`with_capability`): result is the sorted set of all capabilities.
    public func capability(_ capability: String) -> Self {
        var list = strings("capabilities")
        if !Self.containsExactly(list, capability) { list.append(capability) }
        // UTF-8 byte order equals code point order, which is how Python sorts str.
        list.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        return setting("capabilities", .array(list.map(TokenValue.string)))
    }

    /// Adds each capability in turn.
    public func capabilities(_ capabilities: [String]) -> Self {
        capabilities.reduce(self) { $0.capability($1) }
    }

    /// Expiry in milliseconds since the UNIX epoch.
    public func expiresAt(milliseconds: Int64) -> Self { setting("expires", .number(String(milliseconds))) }

    /// Expiry at `date` (`expires_at`: `int(timestamp * 1000.0)`).
    public func expiresAt(_ date: Date) -> Self {
        expiresAt(milliseconds: Self.milliseconds(date.timeIntervalSince1970))
    }

    /// Expiry `seconds` after `now` (`expires_in_seconds`: `int((now + seconds) * 1000.0)`).
    /// Pass `now` explicitly for deterministic tokens.
    public func expiresIn(seconds: Int, now: Date = Date()) -> Self {
        expiresAt(milliseconds: Self.milliseconds(now.timeIntervalSince1970 + Double(seconds)))
    }

    /// Same float arithmetic as the Python builder, clamped to `Int64` instead of trapping.
    private static func milliseconds(_ seconds: Double) -> Int64 {
        let ms = (seconds * 1000.0).rounded(.towardZero)
        if ms >= 9_223_372_036_854_775_808.0 { return .max }
        if ms <= -9_223_372_036_854_775_808.0 { return .min }
        return Int64(ms)
    }

    /// Sets the `type` claim.
    public func type(_ type: TokenType) -> Self { setting("type", .string(type.rawValue)) }
    /// `for_authenticate_only`: type `auth`.
    public func forAuthenticateOnly() -> Self { type(.auth) }
    /// `for_streaming_only`: type `stream`.
    public func forStreamingOnly() -> Self { type(.stream) }
    /// `for_publishing_only`: type `publish`.
    public func forPublishingOnly() -> Self { type(.publish) }

    /// `for_session`.
    public func sessionId(_ sessionId: String) -> Self { setting("sessionId", .string(sessionId)) }
    /// `for_remote_address`.
    public func remoteAddress(_ address: String) -> Self { setting("remoteAddress", .string(address)) }
    /// `for_origin_stream`.
    public func originStreamId(_ streamId: String) -> Self { setting("originStreamId", .string(streamId)) }
    /// Sets `streamName`: the recording a publish token may record or append to.
    public func streamName(_ name: String) -> Self { setting("streamName", .string(name)) }

    /// Sets `requiredTag`.
    public func requiredTag(_ tag: RequiredTag) -> Self { setting("requiredTag", .string(tag.rawValue)) }
    /// `for_channel`: requiredTag `channelId:<id>`.
    public func channel(_ channelId: String) -> Self { requiredTag(.channelId(channelId)) }
    /// `for_channel_alias`: requiredTag `channelAlias:<alias>`.
    public func channelAlias(_ alias: String) -> Self { requiredTag(.channelAlias(alias)) }
    /// `for_room`: requiredTag `roomId:<id>`.
    public func room(_ roomId: String) -> Self { requiredTag(.roomId(roomId)) }
    /// `for_room_alias`: requiredTag `roomAlias:<alias>`.
    public func roomAlias(_ alias: String) -> Self { requiredTag(.roomAlias(alias)) }
    /// `for_tag`: requiredTag as given.
    public func tag(_ tag: String) -> Self { requiredTag(.raw(tag)) }

    /// `apply_tag`: adds a tag to apply to the new stream (de-duplicated, insertion order).
    public func applyTag(_ tag: String) -> Self {
        var list = strings("applyTags")
        if !Self.containsExactly(list, tag) { list.append(tag) }
        return setting("applyTags", .array(list.map(TokenValue.string)))
    }

    /// Adds each tag in turn.
    public func applyTags(_ tags: [String]) -> Self {
        tags.reduce(self) { $0.applyTag($1) }
    }

    /// The claims JSON that would be signed (Python `json.dumps(token, separators=(',', ':'))`).
    public var json: String {
        var out = ""
        TokenValue.object(fields).appendJSON(to: &out)
        return out
    }

    /// Signs and encodes the token (`build()`). Like the Python builder, refuses an empty
    /// application ID or secret and a token without expiry.
    public func encode(applicationId: String, secret: String) throws(DigestTokenError) -> String {
        guard !applicationId.isEmpty else { throw .missingApplicationId }
        guard !secret.isEmpty else { throw .missingSecret }
        guard fields.contains(where: { $0.name == "expires" }) else { throw .missingExpiry }
        return DigestToken.signAndEncode(applicationId: applicationId, secret: secret, tokenJSON: json)
    }
}

/// Verifying and decoding EdgeAuth digest tokens.
///
/// Results mirror Python's `DigestTokens.verify_and_decode` codes. Where Python would answer
/// `server-error` (undecodable base64, an envelope that is not an object, strings that cannot be
/// UTF-8 encoded, claims that are not an object) this answers `badToken`. Beyond Python, claims
/// must contain a numeric `expires` and the builder's fields must have the builder's types, and
/// tokens longer than ``maximumEncodedLength`` are rejected as `badToken`.
///
/// ```swift
/// switch DigestToken.verify(token, applicationId: "my-app", secret: "my-secret") {
/// case .verified(let claims): print(claims.expires)
/// case .notADigestToken, .badToken, .badDigest: break
/// }
/// ```
public enum DigestToken: Sendable {
    public static let prefix = "DIGEST:"
    /// Longest accepted token in UTF-8 bytes; a guard against resource exhaustion.
    public static let maximumEncodedLength = 65_536

    /// Outcome of ``verify(_:applicationId:secret:)``.
    ///
    /// ```swift
    /// DigestToken.Verification.badDigest.code // "bad-digest"
    /// ```
    public enum Verification: Sendable, Equatable {
        case verified(TokenClaims)
        /// Not prefixed with `DIGEST:` (Python `not-a-digest-token`).
        case notADigestToken
        /// Malformed envelope or claims (Python `bad-token`, and its `server-error` cases).
        case badToken
        /// The digest does not match (Python `bad-digest`).
        case badDigest

        /// The Python result code.
        public var code: String {
            switch self {
            case .verified: return "verified"
            case .notADigestToken: return "not-a-digest-token"
            case .badToken: return "bad-token"
            case .badDigest: return "bad-digest"
            }
        }
    }

    /// Python `is_digest_token`: non-empty and starts with `DIGEST:` (code point comparison).
    public static func isDigestToken(_ token: String) -> Bool {
        token.utf8.starts(with: prefix.utf8)
    }

    /// Verifies a token signed for `applicationId`. A token carrying a different application ID
    /// is `badDigest`: it was not signed with this application's credentials.
    public static func verify(_ token: String, applicationId: String, secret: String) -> Verification {
        verify(token, expectedApplicationId: applicationId, secret: secret)
    }

    /// Verifies a token with the application ID it carries, exactly like Python's
    /// `verify_and_decode(secret, token)`.
    public static func verify(_ token: String, secret: String) -> Verification {
        verify(token, expectedApplicationId: nil, secret: secret)
    }

    /// Decodes without verifying the digest.
    public static func decode(_ token: String) throws(DigestTokenError) -> UnverifiedDigestToken {
        let envelope = try parseEnvelope(token)
        guard let claims = parseClaims(envelope) else { throw .badToken }
        return UnverifiedDigestToken(
            applicationId: claims.applicationId, digest: PythonCompat.string(envelope.digest), claims: claims)
    }

    // MARK: Internals

    struct Envelope {
        var applicationId: [UInt32]
        var digest: [UInt32]
        var token: [UInt32]
    }

    private static func verify(_ token: String, expectedApplicationId: String?, secret: String) -> Verification {
        let envelope: Envelope
        do {
            envelope = try parseEnvelope(token)
        } catch {
            return error == .notADigestToken ? .notADigestToken : .badToken
        }
        // Python encodes both before comparing; a lone surrogate makes that raise (server-error).
        guard let appIdBytes = PythonCompat.encodeUTF8(envelope.applicationId),
              let tokenBytes = PythonCompat.encodeUTF8(envelope.token)
        else { return .badToken }
        if let expectedApplicationId, !appIdBytes.elementsEqual(expectedApplicationId.utf8) {
            return .badDigest
        }
        let expected = digest(key: appIdBytes + Array(secret.utf8), message: tokenBytes)
        guard constantTimeEquals(expected, envelope.digest) else { return .badDigest }
        guard let claims = parseClaims(envelope) else { return .badToken }
        return .verified(claims)
    }

    /// Steps of `verify_and_decode` up to (not including) the digest check.
    static func parseEnvelope(_ token: String) throws(DigestTokenError) -> Envelope {
        let utf8 = token.utf8
        guard utf8.starts(with: prefix.utf8) else { throw .notADigestToken }
        guard utf8.count <= maximumEncodedLength else { throw .badToken }
        let body = utf8.dropFirst(prefix.utf8.count)
        // b64decode of a str requires ASCII.
        guard body.allSatisfy({ $0 < 0x80 }),
              let decoded = PythonCompat.base64DecodeLenient(body),
              let text = PythonCompat.decodeJSONBytes(decoded),
              let info = PythonCompat.parseJSON(text),
              case .string(let applicationId)? = info.member("applicationId"), !applicationId.isEmpty,
              case .string(let digest)? = info.member("digest"), !digest.isEmpty,
              case .string(let claims)? = info.member("token"), !claims.isEmpty
        else { throw .badToken }
        return Envelope(applicationId: applicationId, digest: digest, token: claims)
    }

    private static func parseClaims(_ envelope: Envelope) -> TokenClaims? {
        guard let value = PythonCompat.parseJSON(envelope.token),
              PythonCompat.encodeUTF8(envelope.applicationId) != nil,
              PythonCompat.encodeUTF8(envelope.token) != nil
        else { return nil }
        return TokenClaims(
            applicationId: PythonCompat.string(envelope.applicationId),
            json: PythonCompat.string(envelope.token), value: value)
    }

    /// base64(HMAC-SHA512) as ASCII bytes.
    private static func digest(key: [UInt8], message: [UInt8]) -> [UInt8] {
        let mac = HMAC<SHA512>.authenticationCode(for: message, using: SymmetricKey(data: key))
        return PythonCompat.base64Encode(Array(mac))
    }

    /// Compares without an early exit so timing does not reveal how many leading bytes matched.
    static func constantTimeEquals(_ expected: [UInt8], _ actual: [UInt32]) -> Bool {
        var diff = UInt32(truncatingIfNeeded: expected.count ^ actual.count)
        for i in 0..<expected.count {
            let a = i < actual.count ? actual[i] : 0xFFFF_FFFF
            diff |= UInt32(expected[i]) ^ a
        }
        return diff == 0
    }

    static func signAndEncode(applicationId: String, secret: String, tokenJSON: String) -> String {
        let d = digest(key: Array((applicationId + secret).utf8), message: Array(tokenJSON.utf8))
        var info = "{\"applicationId\":"
        PythonCompat.appendJSONString(applicationId, to: &info)
        info += ",\"digest\":"
        PythonCompat.appendJSONString(String(decoding: d, as: UTF8.self), to: &info)
        info += ",\"token\":"
        PythonCompat.appendJSONString(tokenJSON, to: &info)
        info += "}"
        return prefix + String(decoding: PythonCompat.base64Encode(Array(info.utf8)), as: UTF8.self)
    }
}
