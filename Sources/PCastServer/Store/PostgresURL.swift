import Foundation
import Logging
import PCastProtocol
import PostgresNIO
import Synchronization

// A `postgres://` URL as `pcast serve --database` takes it, and what is wrong with one.

/// A PostgreSQL connection URL: `postgres://user[:password]@host[:port]/database[?sslmode=…]`.
/// `sslmode` as libpq's: `disable`, `prefer` (the default: TLS when the server offers it,
/// unverified), `require` (TLS, unverified), `verify-full` (TLS with the certificate checked).
public struct PostgresURL: Sendable, Hashable, CustomStringConvertible {
    public enum TLSMode: String, Sendable, Hashable { case disable, prefer, require, verifyFull = "verify-full" }

    public var host: String
    public var port: Int
    public var user: String
    public var password: String?
    public var database: String
    public var tls: TLSMode

    public init(parsing text: String) throws(PostgresURLError) {
        guard let components = URLComponents(string: text), let scheme = components.scheme,
              scheme == "postgres" || scheme == "postgresql" else {
            throw .malformed(text: Self.redacted(text), reason: "not a postgres:// URL")
        }
        guard let host = components.host, !host.isEmpty else { throw .malformed(text: Self.redacted(text), reason: "no host") }
        guard let user = components.user, !user.isEmpty else { throw .malformed(text: Self.redacted(text), reason: "no user") }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else {
            throw .malformed(text: Self.redacted(text), reason: "no database name (postgres://user@host:port/database)")
        }
        var tls = TLSMode.prefer
        for item in components.queryItems ?? [] {
            switch item.name {
            case "sslmode":
                guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                    throw .malformed(text: Self.redacted(text), reason: "sslmode must be disable, prefer, require or verify-full")
                }
                tls = mode
            default:
                throw .malformed(text: Self.redacted(text), reason: "unknown parameter '\(item.name)'")
            }
        }
        self.host = host
        self.port = components.port ?? 5432
        self.user = user.removingPercentEncoding ?? user
        self.password = components.password.map { $0.removingPercentEncoding ?? $0 }
        self.database = database.removingPercentEncoding ?? database
        self.tls = tls
    }

    /// The URL without its password.
    public var description: String { "postgres://\(user)@\(host):\(port)/\(database)" }

    private static func redacted(_ text: String) -> String {
        guard var components = URLComponents(string: text), components.password != nil else { return text }
        components.password = "***"
        return components.string ?? "postgres://…"
    }
}

/// Why a database URL was refused.
public enum PostgresURLError: Error, Sendable, Hashable, CustomStringConvertible {
    case malformed(text: String, reason: String)

    public var description: String {
        switch self {
        case .malformed(let text, let reason): "malformed database URL \(text): \(reason)"
        }
    }
}
