import Foundation

/// The application backend's two routes the Express APIs call for tokens (the platform's sample
/// backend serves them; an application may serve its own). Both take a JSON object by HTTP POST:
/// the application's authentication data with the request's own fields added, and answer
/// `{"status":"ok", …}` or a refusal `{"status":"unauthorized","message":"…"}` (HTTP 4xx).
///
/// ```swift
/// // POST {backend}/auth   {"user":"ada","roles":["participant"]}
/// // → {"status":"ok","authenticationToken":"DIGEST:…","pcastUri":"ws://127.0.0.1:8080/ws"}
/// // POST {backend}/stream {"user":"ada","sessionId":"session-…","type":"stream","originStreamId":"stream-…"}
/// // → {"status":"ok","streamToken":"DIGEST:…"}
/// ```
public enum BackendAPI {
    public static let authenticationRoute = "auth"
    public static let streamRoute = "stream"

    /// The fields the Express APIs add to the authentication data.
    public struct TokenRequest: Codable, Sendable, Hashable {
        /// `publish` or `stream` on the stream route; absent on the auth route.
        public var type: String?
        public var sessionId: String?
        public var capabilities: [String]?
        /// Room roles asked for (auth route).
        public var roles: [String]?
        /// The stream to subscribe to (`stream` tokens).
        public var originStreamId: String?
        /// A tag the stream must carry (`stream` tokens without an origin; `publish` tokens).
        public var requiredTag: String?
        /// Tags the platform adds to the stream (`publish` tokens).
        public var applyTags: [String]?
        /// The recording a `publish` token may record or append to.
        public var streamName: String?

        public init(type: String? = nil, sessionId: String? = nil, capabilities: [String]? = nil, roles: [String]? = nil,
                    originStreamId: String? = nil, requiredTag: String? = nil, applyTags: [String]? = nil, streamName: String? = nil) {
            self.streamName = streamName
            self.type = type
            self.sessionId = sessionId
            self.capabilities = capabilities
            self.roles = roles
            self.originStreamId = originStreamId
            self.requiredTag = requiredTag
            self.applyTags = applyTags
        }
    }

    public struct TokenReply: Codable, Sendable, Hashable {
        public var status: RequestStatus
        public var message: String?
        public var authenticationToken: String?
        public var streamToken: String?
        /// The platform's signaling URI (auth route), so clients need only the backend's address.
        public var pcastUri: String?

        public init(status: RequestStatus, message: String? = nil, authenticationToken: String? = nil,
                    streamToken: String? = nil, pcastUri: String? = nil) {
            self.status = status
            self.message = message
            self.authenticationToken = authenticationToken
            self.streamToken = streamToken
            self.pcastUri = pcastUri
        }
    }

    /// The request body: the authentication data (a JSON object, or nothing) with `request`'s
    /// fields set on it.
    ///
    /// - Throws: ``BackendBodyError`` when the authentication data is not a JSON object.
    public static func body(authenticationData: String?, request: TokenRequest) throws(BackendBodyError) -> Data {
        var object: [String: Any] = [:]
        if let authenticationData, !authenticationData.isEmpty {
            guard let data = authenticationData.data(using: .utf8),
                  let parsed = try? JSONSerialization.jsonObject(with: data), let dictionary = parsed as? [String: Any] else {
                throw BackendBodyError()
            }
            object = dictionary
        }
        guard let fields = try? JSONEncoder().encode(request),
              let decoded = try? JSONSerialization.jsonObject(with: fields) as? [String: Any] else { throw BackendBodyError() }
        for (key, value) in decoded { object[key] = value }
        guard let body = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { throw BackendBodyError() }
        return body
    }
}

/// The authentication data given to the Express APIs is not a JSON object.
public struct BackendBodyError: Error, Sendable, Hashable, CustomStringConvertible {
    public init() {}
    public var description: String { "the authentication data must be a JSON object" }
}
