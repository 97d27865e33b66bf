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

    // MARK: Cascade (several nodes)

    /// Opens a subscriber flow for an edge relay that pulls the stream for viewers of its own
    /// (an origin → edge cascade): as ``addSubscriber(streamId:subscriberId:)``, but the flow has
    /// no audio-only fallback (each viewer at the edge has its own) and the edge's REMB joins the
    /// estimate sent to the publisher, so one encoding fits the worst edge.
    func addEdgeSubscriber(streamId: String, subscriberId: String) throws(RelayError) -> MediaTransport

    /// Opens a stream pulled from an origin relay (the edge side of a cascade): the origin's
    /// subscriber flow, seen from this end. Media from the origin is fanned out to this relay's
    /// subscribers as a publisher's is; their NACKs are answered from this relay's cache, and
    /// what it lacks is asked of the origin once however many ask; keyframe requests go to the
    /// origin, throttled here; this relay's reports to the origin carry its worst viewer's figures.
    func addUpstream(streamId: String, tracks: [MediaTrackDescription], origin: UpstreamOrigin) throws(RelayError)

    /// Points a pulled stream at a new flow of its origin (the edge asked the origin again after
    /// its leg went silent: a cut link, or an origin that dropped the edge meanwhile). The
    /// stream's subscribers stay; the edge speaks first on the new flow, as on a new leg.
    func replaceUpstream(streamId: String, origin: UpstreamOrigin) throws(RelayError)

    /// How long since an edge relay's flow (``addEdgeSubscriber(streamId:subscriberId:)``) last
    /// sent RTCP the relay could authenticate (an edge reports once a second); nil for an unknown
    /// flow. The origin drops the flows of edges that stopped reporting.
    func edgeIdleTime(streamId: String, subscriberId: String) -> Duration?

    /// Closes a stream: its publisher flow and every subscriber flow on it; unknown ids are ignored.
    func removeStream(streamId: String)

    /// How long since the stream's publisher last sent media the relay could authenticate (since
    /// the flow opened, if it never did); nil for an unknown stream. The platform ends the streams
    /// of a session whose signaling dropped once their media stops too.
    func publisherIdleTime(streamId: String) -> Duration?

    /// Counters since the relay started.
    func statistics() -> RelayStatistics

    // MARK: Simulcast

    /// A simulcast viewer's own bandwidth limit (bits per second; nil lifts it): it is sent the
    /// best layer under it, and the publisher's encodings stay. Ignored without layers.
    func limitSubscriber(streamId: String, subscriberId: String, bitsPerSecond: Int?)

    /// The size a simulcast viewer shows the video at (nil: any): it is sent no better layer than
    /// the smallest that fills it. Ignored without layers.
    func setSubscriberViewSize(streamId: String, subscriberId: String, size: ViewSize?)

    /// Keeps a simulcast viewer on one layer (`best`, `lowest` or a RID; nil: adaptive again),
    /// whatever its link: a recording takes the best, a thumbnail the lowest.
    func pinSubscriberLayer(streamId: String, subscriberId: String, layer: String?)

    /// The RIDs of a simulcast stream's layers that some viewer is sent or moves to (every layer
    /// while another node pulls the stream); nil for a stream without layers. The platform lets
    /// the publisher rest the others.
    func watchedLayers(streamId: String) -> Set<String>?

    /// Calls `grew` whenever some simulcast's watched layers gain one (a viewer moves to a layer its
    /// publisher may have rested), so the platform can wake that layer at once rather than at its
    /// next tick. Runs on the relay's thread: `grew` must return at once. Replaces an earlier handler.
    func onWatchedLayersGrew(_ grew: @escaping @Sendable () -> Void)

    /// The layer a simulcast viewer is sent and the one it moves to; nil for viewers of streams
    /// without layers.
    func subscriberLayer(streamId: String, subscriberId: String) -> SubscriberLayer?

    /// Subscribers whose video the relay stopped or started sending again since the last call
    /// (the audio-only fallback), oldest first. The platform tells their sessions.
    func takeSubscriberVideoEvents() -> [SubscriberVideoEvent]

    // MARK: Standard WebRTC peers (WHIP / WHEP)

    /// What a WebRTC answer announces about the relay (its DTLS fingerprint and ICE candidates);
    /// nil when this relay does not speak DTLS-SRTP.
    var webRTC: WebRTCEndpoint? { get }

    /// Opens a publisher flow for a WebRTC peer (WHIP): as ``addPublisher(streamId:tracks:)``,
    /// but its keys come from the DTLS handshake the peer starts after ICE; its media flows once
    /// that succeeds. `tracks` are the peer's, from its offer (SSRCs and payload types as sent).
    func addWebRTCPublisher(streamId: String, tracks: [MediaTrackDescription], peer: WebRTCPeerParameters) throws(RelayError)

    /// Opens a subscriber flow for a WebRTC peer (WHEP): as ``addSubscriber(streamId:subscriberId:)``,
    /// keyed by DTLS; its RTCP is recognised by its address (browsers pick their own RTCP SSRCs)
    /// and the relay asks for a keyframe once the peer is ready.
    func addWebRTCViewer(streamId: String, subscriberId: String, peer: WebRTCPeerParameters) throws(RelayError)

    /// WebRTC peers that connected or ended on their own (DTLS close or failure, consent
    /// expired) since the last call, oldest first. An ended peer's flow is already closed on the
    /// relay; the platform ends its stream or subscription.
    func takeWebRTCEvents() -> [WebRTCPeerEvent]
}

extension RelayControl {
    public var webRTC: WebRTCEndpoint? { nil }

    public func onWatchedLayersGrew(_ grew: @escaping @Sendable () -> Void) {}

    public func addEdgeSubscriber(streamId: String, subscriberId: String) throws(RelayError) -> MediaTransport {
        throw .cascadeUnavailable
    }

    public func addUpstream(streamId: String, tracks: [MediaTrackDescription], origin: UpstreamOrigin) throws(RelayError) {
        throw .cascadeUnavailable
    }

    public func replaceUpstream(streamId: String, origin: UpstreamOrigin) throws(RelayError) {
        throw .cascadeUnavailable
    }

    public func edgeIdleTime(streamId: String, subscriberId: String) -> Duration? { nil }

    public func addWebRTCPublisher(streamId: String, tracks: [MediaTrackDescription], peer: WebRTCPeerParameters) throws(RelayError) {
        throw .webRTCUnavailable
    }

    public func addWebRTCViewer(streamId: String, subscriberId: String, peer: WebRTCPeerParameters) throws(RelayError) {
        throw .webRTCUnavailable
    }

    public func takeWebRTCEvents() -> [WebRTCPeerEvent] { [] }
}

/// Where an edge pulls a stream from: the origin relay's address and the transport of the
/// subscriber flow the origin opened for the edge (``RelayControl/addEdgeSubscriber(streamId:subscriberId:)``).
public struct UpstreamOrigin: Sendable, Hashable {
    /// The origin relay's IPv4 address and media port.
    public var host: String
    public var port: UInt16
    public var transport: MediaTransport

    public init(host: String, port: UInt16, transport: MediaTransport) {
        self.host = host
        self.port = port
        self.transport = transport
    }
}

/// The relay as a WebRTC answer describes it.
public struct WebRTCEndpoint: Sendable, Hashable {
    /// SHA-256 fingerprint of the relay's DTLS certificate (`AB:CD:…`).
    public var fingerprint: String
    /// Host candidates: the announced or bound addresses, with the media port.
    public var candidates: [STUNAddress]
    /// Passive TCP host candidates (ICE over TCP): the same addresses with the relay's TCP port;
    /// empty when the relay has none.
    public var tcpCandidates: [STUNAddress]

    public init(fingerprint: String, candidates: [STUNAddress], tcpCandidates: [STUNAddress] = []) {
        self.fingerprint = fingerprint
        self.candidates = candidates
        self.tcpCandidates = tcpCandidates
    }
}

/// One WebRTC peer's transport parameters, from the negotiation.
public struct WebRTCPeerParameters: Sendable, Hashable {
    /// The relay's ICE credentials for this peer (in the answer).
    public var local: ICECredentials
    /// The peer's ICE username fragment and DTLS certificate fingerprint (from its offer).
    public var remoteUfrag: String
    public var remoteFingerprint: String
    /// For a viewer: the stream's payload types → the peer's (what it negotiated for each codec).
    public var payloadTypes: [UInt8: UInt8]
    /// For a simulcast publisher: the header extension id of `rtp-stream-id`, by which each
    /// packet of a new SSRC names its layer (the tracks' ``SimulcastLayer/rid``).
    public var rtpStreamIDExtension: UInt8?
    /// For an AV1 publisher: the header extension id of the dependency descriptor, from which the
    /// relay reads each packet's layers.
    public var dependencyDescriptorExtension: UInt8?

    public init(local: ICECredentials, remoteUfrag: String, remoteFingerprint: String, payloadTypes: [UInt8: UInt8] = [:],
                rtpStreamIDExtension: UInt8? = nil, dependencyDescriptorExtension: UInt8? = nil) {
        self.dependencyDescriptorExtension = dependencyDescriptorExtension
        self.local = local
        self.remoteUfrag = remoteUfrag
        self.remoteFingerprint = remoteFingerprint
        self.payloadTypes = payloadTypes
        self.rtpStreamIDExtension = rtpStreamIDExtension
    }
}

/// A WebRTC peer's transport changed on its own.
public struct WebRTCPeerEvent: Sendable, Hashable {
    public enum Change: Sendable, Hashable {
        /// ICE and DTLS succeeded: media flows (the SRTP profile negotiated).
        case connected(srtpProfile: String)
        /// The transport ended: why (DTLS close_notify, a failed handshake, consent expired).
        case ended(String)
    }

    public var streamId: String
    /// Nil for a publisher.
    public var subscriberId: String?
    public var change: Change

    public init(streamId: String, subscriberId: String?, change: Change) {
        self.streamId = streamId
        self.subscriberId = subscriberId
        self.change = change
    }
}

/// Why the relay refused a request.
public enum RelayError: Error, Sendable, Hashable, CustomStringConvertible {
    case streamNotFound(String)
    case streamExists(String)
    case ssrcInUse(UInt32)
    case invalidTracks(String)
    case socket(operation: String, errno: Int32)
    case stopped
    /// This relay does not speak DTLS-SRTP (WebRTC peers).
    case webRTCUnavailable
    /// Another WebRTC peer uses this ICE username fragment.
    case iceUfragInUse(String)
    /// This relay takes no part in cascades.
    case cascadeUnavailable
    /// An origin that cannot be pulled from: an address or transport the relay cannot use.
    case invalidUpstream(String)

    public var description: String {
        switch self {
        case .streamNotFound(let id): return "no stream '\(id)' on this relay"
        case .streamExists(let id): return "stream '\(id)' is already published"
        case .ssrcInUse(let ssrc): return "SSRC \(ssrc) is already used by another flow"
        case .invalidTracks(let why): return "invalid tracks: \(why)"
        case .socket(let op, let code): return "\(op) failed: errno \(code)"
        case .stopped: return "the relay has stopped"
        case .webRTCUnavailable: return "this relay does not accept WebRTC peers (no DTLS)"
        case .iceUfragInUse(let ufrag): return "ICE username fragment '\(ufrag)' is already in use"
        case .cascadeUnavailable: return "this relay does not pull or serve streams for other relays"
        case .invalidUpstream(let why): return "cannot pull from the origin: \(why)"
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
    /// Packets dropped because SRTP/SRTCP authentication failed (or, for RTCP, its replay check).
    public var srtpFailures: UInt64 = 0
    /// Publishers' RTP packets that authenticated but had been received before (dropped).
    public var duplicates: UInt64 = 0
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
    /// Sequence numbers asked upstream (subscribers NACKed what this relay lacked): of the origin
    /// by an edge, of the publisher by an origin; and an edge's answers from the origin sent on to
    /// the subscribers waiting for them.
    public var nacksForwarded: UInt64 = 0
    /// Sequence numbers asked upstream because a later one arrived first and the reordering
    /// allowance passed: a gap on the publisher's leg (or an edge's leg from its origin), repaired
    /// before subscribers notice. A number asked again (every round trip until it comes) counts again.
    public var gapRequests: UInt64 = 0
    public var upstreamRetransmissions: UInt64 = 0
    /// WebRTC peers open now (gauge), STUN checks refused (bad credentials, malformed, unknown
    /// ufrag) and DTLS handshakes that failed (including certificate fingerprint mismatches).
    public var webRTCPeers: Int = 0
    public var stunRefusals: UInt64 = 0
    public var dtlsFailures: UInt64 = 0
    /// Batches of a stream's packets whose fan-out was split over the relay's threads (one per
    /// core by default) rather than sent by its I/O thread alone.
    public var sharedFanOuts: UInt64 = 0
    /// Datagrams sent as part of a segmented message (UDP GSO: a subscriber's packets of one
    /// burst handed to the kernel at once; ``RelayConfiguration``'s `segmentationOffload`).
    public var segmentedDatagrams: UInt64 = 0
    /// Simulcast viewers moved from one layer to another.
    public var layerSwitches: UInt64 = 0
    /// Retransmissions held back: they would have taken more than a quarter of the subscriber's
    /// estimated downlink (its REMB), on a leg losing packets because it is full.
    public var nacksThrottled: UInt64 = 0
    /// Of ``webRTCPeers``, those whose media comes over TCP (ICE-TCP: a network that blocks UDP).
    public var webRTCPeersOverTCP: Int = 0
    /// Viewers' waits from their subscription to the first keyframe the relay sent them (s).
    public var viewerJoin = HistogramCounts(bounds: HistogramCounts.joinBounds)
    /// The fraction lost of each viewer's receiver report (0…1).
    public var viewerLoss = HistogramCounts(bounds: HistogramCounts.lossBounds)

    public init() {}
}

/// A histogram's observations counted into buckets with fixed upper bounds (Prometheus'
/// `le`), kept as counts per bucket so that a snapshot is a value.
public struct HistogramCounts: Sendable, Hashable, Codable {
    /// Upper bounds, ascending; the last bucket (`+Inf`) is implied.
    public let bounds: [Double]
    /// Observations per bucket (not cumulative): one more than `bounds`, the last for `+Inf`.
    public private(set) var counts: [UInt64]
    public private(set) var sum: Double = 0

    public static let joinBounds: [Double] = [0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8]
    public static let lossBounds: [Double] = [0, 0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5]

    public init(bounds: [Double]) {
        self.bounds = bounds
        counts = Array(repeating: 0, count: bounds.count + 1)
    }

    public var count: UInt64 { counts.reduce(0, +) }

    public mutating func record(_ value: Double) {
        let bucket = bounds.firstIndex { value <= $0 } ?? bounds.count
        counts[bucket] &+= 1
        sum += value
    }

    /// Counts up to and including each bound, then the total (Prometheus' cumulative buckets).
    public var cumulative: [UInt64] {
        var running: UInt64 = 0
        return counts.map { running &+= $0; return running }
    }
}

/// The layers a simulcast viewer is sent (`current`, nil before its first keyframe) and is moving
/// to (`target`, equal when settled), by RID, and whether its link holds it down.
public struct SubscriberLayer: Sendable, Equatable {
    public var current: String?
    public var target: String
    /// Whether the viewer's link holds it below the best layer (not its own choice or limit): its
    /// data quality reads `downloadLimited`.
    public var reduced: Bool

    public init(current: String?, target: String, reduced: Bool = false) {
        self.current = current
        self.target = target
        self.reduced = reduced
    }
}
