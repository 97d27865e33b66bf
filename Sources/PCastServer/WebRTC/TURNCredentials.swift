import Crypto
import Foundation

/// TURN servers that share a secret with the platform (coturn's `use-auth-secret`, the "REST API
/// for access to TURN services" draft): the platform mints a time-limited username and password
/// for each WHIP/WHEP session, and the TURN server checks them with the same secret, so no
/// long-lived TURN password is ever handed to a browser.
///
/// ```swift
/// var turn = TURNSettings(secret: "shared-with-coturn", servers: ["turns:turn.example.com:443?transport=tcp"])
/// turn.lifetime = 3600
/// configuration.turn = turn
/// ```
public struct TURNSettings: Sendable, Hashable {
    /// coturn's `static-auth-secret`.
    public var secret: String
    /// `turn:` and `turns:` URIs the minted credentials are announced with.
    public var servers: [String]
    /// How long a minted credential is valid, seconds (default a day: a viewer keeps its
    /// allocation for the length of a show).
    public var lifetime: TimeInterval = 86_400

    public init(secret: String, servers: [String]) {
        self.secret = secret
        self.servers = servers
    }
}

/// One minted TURN credential.
struct TURNCredential: Sendable, Hashable {
    /// `<expiry, seconds since 1970>:<label>`.
    let username: String
    /// base64(HMAC-SHA1(secret, username)).
    let password: String

    /// The credential valid until `now + lifetime` for `label` (random per session: it names
    /// nothing a TURN server's logs should not see).
    static func mint(secret: String, lifetime: TimeInterval, now: Date, label: String) -> TURNCredential {
        let expiry = Int((now.timeIntervalSince1970 + lifetime).rounded(.down))
        let username = "\(expiry):\(label)"
        let mac = HMAC<Insecure.SHA1>.authenticationCode(for: Data(username.utf8), using: SymmetricKey(data: Data(secret.utf8)))
        return TURNCredential(username: username, password: Data(mac).base64EncodedString())
    }

    /// The ICE servers announcing it, one per TURN URI of `settings`.
    static func iceServers(_ settings: TURNSettings, now: Date) -> [ICEServer] {
        let credential = mint(secret: settings.secret, lifetime: settings.lifetime, now: now,
                              label: "pcast-" + String(UInt64.random(in: 0...UInt64.max), radix: 36))
        return settings.servers.compactMap { try? ICEServer(url: $0, username: credential.username, credential: credential.password) }
    }
}
