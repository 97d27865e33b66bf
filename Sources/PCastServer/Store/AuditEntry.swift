import Foundation

/// One line of the audit log: an operator's action through the admin API, or an admin request
/// the platform refused. Kept in the platform's store, so every node of a cluster lists them all.
public struct AuditEntry: Codable, Sendable, Hashable {
    /// The store's order (ascending with time); nil before it is stored.
    public var sequence: Int64?
    /// When (ms since 1970, the node's clock).
    public var time: Int64
    /// The node that took the request.
    public var nodeId: String
    /// Who: `admin` (HTTP Basic with the application's credentials), `token` (a token with the
    /// `admin` capability), `anonymous` (neither: a refused request).
    public var actor: String
    /// The address the request came from.
    public var remoteAddress: String
    /// What was asked: the method and path (`POST /admin/streams/stream-1/end`).
    public var action: String
    /// `done`, `refused` (no or wrong credentials) or `failed` (the action could not be done).
    public var outcome: String
    /// Why, for a refusal or a failure; what it did, for an action.
    public var detail: String

    public init(sequence: Int64? = nil, time: Int64, nodeId: String, actor: String, remoteAddress: String, action: String,
                outcome: String, detail: String) {
        self.sequence = sequence
        self.time = time
        self.nodeId = nodeId
        self.actor = actor
        self.remoteAddress = remoteAddress
        self.action = action
        self.outcome = outcome
        self.detail = detail
    }

    /// The longest action and detail kept (a request's path and reason are the client's words).
    public static let textLimit = 512

    /// The entry with its texts cut to ``textLimit`` characters.
    var bounded: AuditEntry {
        var entry = self
        for path in [\AuditEntry.actor, \.remoteAddress, \.action, \.outcome, \.detail, \.nodeId] where entry[keyPath: path].count > Self.textLimit {
            entry[keyPath: path] = String(entry[keyPath: path].prefix(Self.textLimit))
        }
        return entry
    }
}
