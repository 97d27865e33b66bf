import PCastProtocol

/// What the signaling side of the platform asks of the media relay.
///
/// The platform decides *who* may publish and subscribe (tokens, sessions); the relay only moves
/// packets between flows it has been told about. Every flow gets its own SRTP keys, returned in
/// the `MediaTransport` that signaling hands to the client.
public protocol RelayControl: Sendable {
    /// The one UDP port all media uses.
    var mediaPort: UInt16 { get }

    /// Opens a publisher flow for `streamId`. The relay recognises the publisher's packets by
    /// the SSRCs in `tracks`; an SSRC already used by another flow is `.ssrcInUse`.
    func addPublisher(streamId: String, tracks: [MediaTrackDescription]) throws(RelayError) -> MediaTransport

    /// Opens a subscriber flow on a published stream. The returned transport carries the
    /// `rtcpSSRC` the subscriber must send its RTCP with; its first authenticated RTCP packet
    /// tells the relay where to send (symmetric RTP). Asks the publisher for a keyframe.
    func addSubscriber(streamId: String, subscriberId: String) throws(RelayError) -> MediaTransport

    /// Closes one subscriber flow; unknown ids are ignored.
    func removeSubscriber(streamId: String, subscriberId: String)

    /// Closes a stream: its publisher flow and every subscriber flow on it; unknown ids are ignored.
    func removeStream(streamId: String)

    /// How long since the stream's publisher last sent media the relay could authenticate (since
    /// the flow opened, if it never did); nil for an unknown stream. The platform ends the streams
    /// of a session whose signaling dropped once their media stops too.
    func publisherIdleTime(streamId: String) -> Duration?

    /// Counters since the relay started.
    func statistics() -> RelayStatistics

    /// Subscribers whose video the relay stopped or started sending again since the last call
    /// (the audio-only fallback), oldest first. The platform tells their sessions.
    func takeSubscriberVideoEvents() -> [SubscriberVideoEvent]
}

/// Why the relay refused a request.
public enum RelayError: Error, Sendable, Hashable, CustomStringConvertible {
    case streamNotFound(String)
    case streamExists(String)
    case ssrcInUse(UInt32)
    case invalidTracks(String)
    case socket(operation: String, errno: Int32)
    case stopped

    public var description: String {
        switch self {
        case .streamNotFound(let id): return "no stream '\(id)' on this relay"
        case .streamExists(let id): return "stream '\(id)' is already published"
        case .ssrcInUse(let ssrc): return "SSRC \(ssrc) is already used by another flow"
        case .invalidTracks(let why): return "invalid tracks: \(why)"
        case .socket(let op, let code): return "\(op) failed: errno \(code)"
        case .stopped: return "the relay has stopped"
        }
    }
}

/// Relay counters, all monotonic since start except the gauges (`streams`, `subscribers`).
public struct RelayStatistics: Sendable, Hashable, Codable {
    public var streams: Int = 0
    public var subscribers: Int = 0
    public var packetsIn: UInt64 = 0
    public var bytesIn: UInt64 = 0
    public var packetsOut: UInt64 = 0
    public var bytesOut: UInt64 = 0
    /// Packets dropped because SRTP/SRTCP authentication or the replay check failed.
    public var srtpFailures: UInt64 = 0
    /// Packets from an unknown SSRC, or not RTP/RTCP at all.
    public var unknownPackets: UInt64 = 0
    /// Retransmissions sent from the packet cache in answer to NACKs.
    public var nacksServed: UInt64 = 0
    /// NACKed packets that were no longer in the cache.
    public var nacksMissed: UInt64 = 0
    /// PLI/FIR sent to publishers (after throttling).
    public var keyframeRequests: UInt64 = 0
    /// Datagrams the relay could not send (kernel refused them, or its send buffer was full).
    public var sendFailures: UInt64 = 0
    /// Audio-only fallback: subscribers' video suspended, probes of it begun, and resumed.
    public var videoSuspensions: UInt64 = 0
    public var videoProbes: UInt64 = 0
    public var videoResumptions: UInt64 = 0
    /// REMB packets sent to publishers: the relay's delay-based estimate of their video uplink.
    public var rembsSent: UInt64 = 0

    public init() {}
}
