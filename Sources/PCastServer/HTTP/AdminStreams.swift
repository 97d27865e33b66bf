import PCastContracts
import PCastProtocol

/// The body of `GET /admin/api/streams`: the streams this node has (published on it, or pulled
/// from another node for its viewers), oldest first.
struct StreamList: Codable, Sendable {
    var nodeId: String
    var streams: [StreamSummary]
}

/// One stream as an operator looks at it.
struct StreamSummary: Codable, Sendable, Equatable {
    struct Publisher: Codable, Sendable, Equatable {
        var sessionId: String
        /// `sdk` (a PCast session), `webrtc` (WHIP), `ingest` (a URI pulled for a session) or
        /// `rtmp` (an encoder's push).
        var kind: String
    }

    struct Track: Codable, Sendable, Equatable {
        var kind: String
        var codec: String
        /// A simulcast layer's RID, size and bitrate (bits per second).
        var rid: String?
        var width: Int?
        var height: Int?
        var bitrate: Int?
    }

    struct Viewers: Codable, Sendable, Equatable {
        var total: Int
        /// PCast sessions (the SDK, the platform's own recorder and HLS packager among them).
        var sdk: Int
        /// WHEP viewers.
        var webrtc: Int
    }

    var streamId: String
    /// The node its publisher is on.
    var nodeId: String
    /// Whether this node pulls it from that node (for viewers of its own).
    var pulled: Bool
    var publisher: Publisher
    var publishType: String
    var streamName: String?
    var tags: [String]
    var tracks: [Track]
    /// Milliseconds since 1970.
    var publishedAt: Int64
    /// Why its publisher says it is reduced (`none` when it is not).
    var quality: String
    var viewers: Viewers
}

extension Platform {
    /// Every stream the registry has, as ``StreamSummary``s (publisher kinds from the ingest
    /// service's list).
    func streamSummaries() async -> StreamList {
        let ingestKinds = await ingest?.kinds() ?? [:]
        let streams = registry.streamIds.compactMap { registry.stream($0) }.map { record -> StreamSummary in
            let kind: String
            switch ingestKinds[record.streamId] {
            case .pull?: kind = "ingest"
            case .push?: kind = "rtmp"
            case nil: kind = record.publisherSessionId.hasPrefix("whip-") ? "webrtc" : "sdk"
            }
            let webrtc = record.subscribers.filter { $0.sessionId.hasPrefix("whep-") }.count
            return StreamSummary(
                streamId: record.streamId, nodeId: record.originNodeId ?? configuration.nodeId, pulled: record.originNodeId != nil,
                publisher: .init(sessionId: record.publisherSessionId, kind: kind), publishType: record.publishType.rawValue,
                streamName: record.streamName, tags: record.tags,
                tracks: record.tracks.map { track in
                    StreamSummary.Track(kind: track.kind.rawValue, codec: track.codec, rid: track.layer?.rid, width: track.layer?.width,
                                        height: track.layer?.height, bitrate: track.layer?.bitrate)
                },
                publishedAt: record.publishedAt, quality: record.publisherQuality.rawValue,
                viewers: .init(total: record.subscribers.count, sdk: record.subscribers.count - webrtc, webrtc: webrtc))
        }
        return StreamList(nodeId: configuration.nodeId, streams: streams)
    }
}
