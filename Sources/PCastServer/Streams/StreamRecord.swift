import Foundation
import PCastProtocol
import PCastContracts

/// A published stream as the platform knows it.
///
/// ```swift
/// registry.stream("s-1")?.tags // ["channelId:demo"]
/// ```
public struct StreamRecord: Sendable, Hashable {
    public let streamId: String
    public let publisherSessionId: String
    /// The publish request's tags, then the publish token's `applyTags`, without repeats.
    public let tags: [String]
    public let tracks: [MediaTrackDescription]
    public let publishType: PublishType
    public let streamName: String?
    /// Order of publication on this node (ties of `publishedAt`).
    public let sequence: UInt64
    /// Milliseconds since 1970 (UTC) when it was published: orders streams of different nodes, to
    /// pick the newest of several carrying a tag.
    public let publishedAt: Int64
    /// The node whose relay has the publisher, when it is not this one (a cluster's stream this
    /// node serves by pulling it from there); nil for a stream published here.
    public let originNodeId: String?
    /// Subscriber id → subscribing session, in order of subscription.
    public internal(set) var subscribers: [(subscriberId: String, sessionId: String)] = []
    /// Video bitrates viewers ask the publisher for, by subscriber id.
    public internal(set) var viewerLimits: [String: Int] = [:]
    /// The largest view each viewer whose token names a quality (``QualityCeiling``) may be sent of
    /// a simulcast, by subscriber id.
    public internal(set) var viewCeilings: [String: ViewSize] = [:]
    /// The tags each subscription was made with (the application's), by subscriber id.
    public internal(set) var subscriberTags: [String: [String]] = [:]
    /// What the publisher was last told: the lowest of `viewerLimits`.
    public var viewerLimit: Int? { viewerLimits.values.min() }
    /// VP9 or AV1 video, which may come in scalable layers (whether it does, the relay reads from
    /// its packets): each viewer's limit and view size go to the relay too.
    var mayBeLayered: Bool {
        tracks.contains { $0.kind == .video && ["VP9", "AV1"].contains($0.codec.uppercased()) }
    }
    /// Why the publisher says its stream is reduced (told to every viewer).
    public internal(set) var publisherQuality: PublisherQualityReason = .none

    public static func == (a: Self, b: Self) -> Bool {
        a.streamId == b.streamId && a.publisherSessionId == b.publisherSessionId && a.tags == b.tags
            && a.tracks == b.tracks && a.publishType == b.publishType && a.streamName == b.streamName
            && a.sequence == b.sequence && a.publishedAt == b.publishedAt && a.originNodeId == b.originNodeId
            && a.subscribers.map(\.subscriberId) == b.subscribers.map(\.subscriberId)
            && a.subscribers.map(\.sessionId) == b.subscribers.map(\.sessionId)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(streamId)
        hasher.combine(sequence)
    }

    /// Whether this stream was published after `other` (by time, then by this node's order).
    func isNewer(than other: StreamRecord) -> Bool {
        (publishedAt, sequence) > (other.publishedAt, other.sequence)
    }

    /// The directory entry other nodes of a cluster learn this stream from.
    func shared(nodeId: String) -> SharedStream {
        SharedStream(streamId: streamId, nodeId: originNodeId ?? nodeId, publisherSessionId: publisherSessionId, tags: tags,
                     tracks: tracks, publishType: publishType, streamName: streamName, publishedAt: publishedAt,
                     publisherQuality: publisherQuality == .none ? nil : publisherQuality)
    }
}
