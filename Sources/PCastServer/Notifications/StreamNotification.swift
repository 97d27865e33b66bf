import Crypto
import Foundation
import PCastProtocol

/// What the platform tells the application's backend about a stream published on this node, as
/// the JSON body of a signed POST (see ``StreamNotifier``):
///
/// ```json
/// {"type":"stream-started","id":"…","applicationId":"…","streamId":"stream-…","sessionId":"session-…",
///  "tags":["channelAlias:news"],"publishType":"live","timestamp":1764230400000}
/// {"type":"stream-ended",…,"reason":"ended","description":"…"}
/// ```
///
/// With viewers included (``StreamNotificationSettings/includeViewers``), each subscription to a
/// stream here is told too: `subscriber-started` and `subscriber-ended`, with the viewer's
/// session, its `subscriberId` and the tags it subscribed with.
public struct StreamNotification: Sendable, Hashable, Codable {
    public enum Kind: String, Sendable, Hashable, Codable {
        case started = "stream-started"
        case ended = "stream-ended"
        case subscriberStarted = "subscriber-started"
        case subscriberEnded = "subscriber-ended"
    }

    public var type: Kind
    /// Unique per notification: a backend that receives one twice (a retry whose answer was lost)
    /// can tell.
    public var id: String
    public var applicationId: String
    public var streamId: String
    /// The publishing session (the viewer's, for a subscriber's notification).
    public var sessionId: String
    /// For a subscriber's notification: which subscription.
    public var subscriberId: String?
    /// The stream's tags: the publish request's and its token's `applyTags` (the subscription's
    /// own, for a subscriber's notification).
    public var tags: [String]
    /// The stream's (absent for a subscriber's notification).
    public var publishType: PublishType?
    public var streamName: String?
    /// For `stream-ended`: why, as subscribers are told.
    public var reason: StreamEndedReason?
    public var description: String?
    /// Milliseconds since 1970 (UTC) when it happened.
    public var timestamp: Int64

    public init(type: Kind, id: String, applicationId: String, streamId: String, sessionId: String, subscriberId: String? = nil,
                tags: [String], publishType: PublishType?, streamName: String? = nil, reason: StreamEndedReason? = nil,
                description: String? = nil, timestamp: Int64) {
        self.type = type
        self.id = id
        self.applicationId = applicationId
        self.streamId = streamId
        self.sessionId = sessionId
        self.subscriberId = subscriberId
        self.tags = tags
        self.publishType = publishType
        self.streamName = streamName
        self.reason = reason
        self.description = description
        self.timestamp = timestamp
    }

    /// The body as sent: compact JSON, keys sorted.
    public func body() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(self)) ?? Data("{}".utf8)
    }
}

/// How a notification is signed, so a backend can check that the platform sent it and when:
/// `X-PCast-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>` with
/// `X-PCast-Timestamp: <seconds since 1970>`. The timestamp is inside the signed text: a backend
/// that refuses old timestamps (say over five minutes) refuses replays.
public enum StreamNotificationSignature {
    public static let signatureHeader = "X-PCast-Signature"
    public static let timestampHeader = "X-PCast-Timestamp"
    public static let eventHeader = "X-PCast-Event"
    public static let deliveryHeader = "X-PCast-Delivery"

    /// The header value for `body` sent at `timestamp` (seconds).
    public static func sign(body: Data, timestamp: Int64, secret: String) -> String {
        var message = Data("\(timestamp).".utf8)
        message.append(body)
        let code = HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: Data(secret.utf8)))
        return "v1=" + code.map { String(format: "%02x", $0) }.joined()
    }

    /// Whether `signature` is right for `body` at `timestamp` (compared in constant time).
    public static func verify(signature: String, body: Data, timestamp: Int64, secret: String) -> Bool {
        AdminCredentials.constantTimeEquals(Array(signature.utf8), Array(sign(body: body, timestamp: timestamp, secret: secret).utf8))
    }
}
