import PCastProtocol
import PCastContracts

/// What the router is tuned by; times in nanoseconds of a monotonic clock.
struct RouterSettings: Sendable, Equatable {
    /// Sender SSRC of the RTCP the relay originates (PLI, FIR, RR).
    var relaySSRC: UInt32
    var keyframeInterval: UInt64 = 300_000_000
    var packetCacheCapacity: Int = 512
    var packetCacheDuration: UInt64 = 1_000_000_000
    var reportInterval: UInt64 = 1_000_000_000
    /// A subscriber's receiver report counts in the aggregate for this long after it arrived.
    var subscriberReportLifetime: UInt64 = 5_000_000_000
    /// The audio-only fallback of subscribers to streams with audio and video; nil turns it off.
    var videoGate: VideoGate.Settings? = VideoGate.Settings()
    /// The delay-based estimate of each publisher's video uplink, sent to it in REMB; nil turns it off.
    var arrivalEstimator: ArrivalEstimator.Settings? = ArrivalEstimator.Settings()
    /// How long an edge waits for the origin to answer a retransmission it asked for before a
    /// subscriber's NACK of that packet asks again.
    var upstreamRetransmissionTimeout: UInt64 = 250_000_000
    /// The same for an origin asking a publisher for a packet that never came: short, since the
    /// subscribers' own NACKs (every few milliseconds until their playout deadline) are what ask
    /// again, and each try is a chance for the packet to get through before it is due.
    var publisherRetransmissionTimeout: UInt64 = 20_000_000
    /// How simulcast viewers are given a layer.
    var layerSelection = LayerSelector.Settings()
    /// How the relay asks upstream for the packets missing from a publisher's leg (or an edge's
    /// leg from its origin), before any subscriber notices: ``LossRecovery`` as the SDK's receiver
    /// runs it, without keyframe requests (the subscribers make those), and with the receiver's
    /// reordering allowance: a leg that reorders by 20 ms is asked for nothing. Its path jitter is
    /// not added (the relay keeps no measure of the latest packets' lateness, only RFC 3550's mean).
    /// A packet overtaken by more than the allowance is asked for once; the publisher's answer
    /// then comes as a copy (SRTP's replay check), which teaches it (``publisherDuplicate``; up to
    /// 100 ms, so a forged copy costs little). What it learnt halves after each quiet second (not 5 s): a leg that stops reordering gets
    /// its gaps asked for within a few milliseconds again soon, where each millisecond waited is
    /// one less for every subscriber's repair (at 5 % loss on the publisher's leg a viewer at a
    /// fixed 80 ms was shown 97.5–98.3 % of the frames in two runs of six with the allowance at
    /// 31 ms for the first 5 s).
    var upstreamRecovery: LossRecovery.Settings = {
        var settings = LossRecovery.Settings()
        settings.requestsKeyframes = false
        settings.reorderMemory = .seconds(1)
        settings.maximumReorderAllowance = .milliseconds(100)
        settings.largestGap = 64
        return settings
    }()
    /// How long a packet missing upstream is asked for: past this, hardly a subscriber's playout
    /// delay still waits for it (the cache keeps what comes later for a second, for those that do).
    var upstreamRepairDeadline: UInt64 = 500_000_000
}

/// A simulcast viewer's layer: which it is sent (and how), and which it should get.
struct SimulcastViewer: Sendable {
    var switcher: LayerSwitcher
    var selector: LayerSelector

    init(selector: LayerSelector) {
        self.selector = selector
        switcher = LayerSwitcher(target: selector.initial)
    }
}

/// The leg over which an edge relay pulls a stream from the origin relay that has its publisher
/// (a cascade): the edge is one subscriber of the origin, and to the edge the origin is the
/// stream's publisher.
struct UpstreamLeg: Sendable, Equatable {
    /// Where the origin relay is: known up front, unlike a publisher's address.
    var address: RelayAddress
    /// The SSRC the origin assigned this edge's subscriber flow: the sender SSRC of every RTCP the
    /// edge sends it (the origin finds the flow by it).
    var ssrc: UInt32
}

/// How the relay finds a flow from the SSRC in a packet's clear header.
enum RelayRoute: Sendable, Equatable {
    /// A publisher's media SSRC (its RTP, and its RTCP whose sender SSRC is that SSRC).
    case track(stream: Int, track: Int)
    /// A subscriber's relay-assigned RTCP sender SSRC.
    case subscriber(stream: Int, rtcpSSRC: UInt32)
}

/// Something the I/O side must send. Contexts are the flows' SRTP sessions in the real relay and
/// plain values in tests; packets are plain (the I/O side protects them with the context).
enum RelayAction<Context> {
    /// RTCP the relay originates towards a publisher (PLI, FIR, receiver report).
    case toPublisher(Context, RelayAddress, rtcp: [UInt8])
    /// A cached RTP packet re-sent to the one subscriber that NACKed it.
    case retransmit(Context, RelayAddress, rtp: [UInt8])
}

/// What happens to a publisher's RTCP compound on its way to one subscriber.
enum RTCPForwarding: Equatable {
    case unchanged
    /// Sent with the sender SSRC of its packets set to this (a simulcast layer's report, sent
    /// under the one video SSRC the viewer knows).
    case rewritten(UInt32)
    case dropped
}

/// What happens to one video packet on its way to one subscriber.
enum VideoForwarding: Equatable {
    /// Sent as it is.
    case unchanged
    /// Sent with this sequence number (the subscriber's numbering).
    case renumbered(UInt16)
    /// Sent with this SSRC and sequence number: a simulcast layer under the viewer's one video SSRC.
    case rewritten(ssrc: UInt32, sequence: UInt16)
    /// Not sent.
    case dropped
}

extension RelayAction: Equatable where Context: Equatable {}

/// Counters the router keeps; the I/O side publishes them.
struct RouterCounters: Sendable, Equatable {
    var nacksServed: UInt64 = 0
    var nacksMissed: UInt64 = 0
    var keyframeRequests: UInt64 = 0
    /// Viewers' keyframe requests in their first ``RelayRouter/joinKeyframeWait``, answered by the
    /// keyframe asked for their join.
    var keyframeRequestsAbsorbed: UInt64 = 0
    /// Subscribers whose video was suspended, probes begun, and resumptions (audio-only fallback).
    var videoSuspensions: UInt64 = 0
    var videoProbes: UInt64 = 0
    var videoResumptions: UInt64 = 0
    /// REMB packets sent to publishers (periodic and on a drop).
    var rembsSent: UInt64 = 0
    /// Sequence numbers asked upstream because subscribers NACKed them and the cache lacked them
    /// (of the origin by an edge, of the publisher by an origin), and an edge's answers from the
    /// origin sent on to the subscribers waiting.
    var nacksForwarded: UInt64 = 0
    /// Sequence numbers asked upstream because a later one came first and the reordering
    /// allowance passed (a gap on the publisher's leg, or an edge's leg from its origin); each
    /// request counts every number it names, a number asked twice twice.
    var gapRequests: UInt64 = 0
    var upstreamRetransmissions: UInt64 = 0
    /// Simulcast viewers moved from one layer to another (at a keyframe of the new one).
    var layerSwitches: UInt64 = 0
    /// Retransmissions not sent because they would have taken more than a subscriber's share of
    /// its estimated downlink (a congested leg whose NACKs would feed its congestion).
    var nacksThrottled: UInt64 = 0
}

/// The relay's routing, caching, keyframe throttling and report aggregation, without sockets or
/// crypto: one thread owns it, feeds it events and carries out what it returns.
///
/// Streams are addressed by an integer handle so the per-packet path hashes integers, not strings.
///
/// ```swift
/// var router = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 9), now: 0)
/// router.addStream(id: "s", tracks: [video], publisher: 1)
/// let actions = router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 77, context: 2, now: 0)
/// ```
struct RelayRouter<Context> {
    struct Flow {
        var context: Context
        /// Learned from the flow's first authenticated packet; nil until then.
        var address: RelayAddress?
    }

    struct Track {
        let description: MediaTrackDescription
        let cache: PacketCache
        var reception: ReceptionStatistics
        /// Video tracks only.
        var throttle: KeyframeThrottle?
        var firSequence: UInt8 = 0
        /// What the relay itself lost of this track over its latest report interval (0...1).
        var publisherLegLoss: Double = 0
        /// Video tracks only: the uplink estimate told to the publisher in REMB.
        var estimator: ArrivalEstimator?
        /// The latest sequence number fanned out (to every subscriber forwarded as it is).
        var lastForwarded: UInt16?
        /// What is missing of the track upstream, and when to ask for it.
        var recovery: LossRecovery
        /// Packets asked upstream (of the origin by an edge, of the publisher by an origin), by
        /// sequence number, with who waits for them (an edge sends each its answer; an origin fans
        /// the answer out and lets the entry expire).
        var requested: [UInt16: Requested] = [:]
        /// A simulcast encoding: its index among the stream's layers (0 is the best).
        var layer: Int?
        /// The SSRC the publisher actually sends the track with: its declared one, except for a
        /// WebRTC simulcast layer, declared by the platform and bound to the browser's own SSRC
        /// when its RID first arrives (``RelayRouter/bindWireSSRC(stream:track:ssrc:)``). Feedback
        /// to the publisher names this one; everything downstream sees the declared one.
        var wireSSRC: UInt32
        /// A simulcast layer's measured rate.
        var meter = RateMeter()
        /// H.264 video: a joining subscriber's keyframe is looked for in its cache.
        let isH264: Bool
        /// H.264 whose keyframes have come with their parameter sets: a joining viewer's video
        /// starts at them (see ``Subscriber/awaitingKeyframe``).
        var sendsParameterSets = false

        init(description: MediaTrackDescription, cache: PacketCache, reception: ReceptionStatistics,
             throttle: KeyframeThrottle?, estimator: ArrivalEstimator?, recovery: LossRecovery) {
            self.description = description
            self.recovery = recovery
            self.cache = cache
            self.reception = reception
            self.throttle = throttle
            self.estimator = estimator
            wireSSRC = description.ssrc
            isH264 = description.kind == .video && description.codec.uppercased() == "H264"
        }
    }

    /// A retransmission asked upstream (see ``Track/requested``).
    struct Requested {
        var until: UInt64
        /// Each waiting subscriber's RTCP SSRC and the sequence number it NACKed (its numbering),
        /// and for a simulcast viewer the SSRC it knows the video by.
        var waiters: [(rtcpSSRC: UInt32, sequence: UInt16, ssrc: UInt32?)]
    }

    struct SubscriberReport: Equatable {
        var block: RTCPReportBlock
        var arrival: UInt64
    }

    struct Subscriber {
        let id: String
        let rtcpSSRC: UInt32
        var flow: Flow
        /// When it was added: a keyframe that came after was asked for it (see `addSubscriber`).
        var joined: UInt64 = 0
        /// Whether the publisher's address was known when it joined, so its join keyframe was
        /// asked for then; if not, it is asked when the subscriber is first heard from.
        var keyframeAskedAtJoin = false
        /// A viewer of H.264 video that has not yet been sent a keyframe, and when one was last
        /// asked for it: its video starts at the parameter sets sent with one. What comes before
        /// cannot be decoded, and a receiver that gets it (or a keyframe without its parameter
        /// sets) asks for another keyframe at once.
        var awaitingKeyframe: UInt64?
        /// Whether its video was held for a keyframe when it joined (see ``awaitingKeyframe``):
        /// then its keyframe requests in its first ``RelayRouter/joinKeyframeWait`` are the ones a
        /// receiver makes as it starts, and the keyframe asked for its join answers them.
        var heldAtJoin = false
        /// When its join keyframe was sent (see ``RelayRouter/joinRequestGrace``).
        var joinKeyframeSent: UInt64?
        /// Latest report block per publisher SSRC.
        var reports: [UInt32: SubscriberReport] = [:]
        /// Its audio-only fallback, on streams with audio and video (never on an edge: its viewers
        /// have their own at the edge).
        var gate: VideoGate?
        /// An edge relay pulling the stream (a cascade), not a viewer.
        var isEdge = false
        /// An edge's latest REMB (bits per second) and when it came: its estimate of the leg.
        var edgeEstimate: (bitrate: UInt64, arrival: UInt64)?
        /// Its layer of a simulcast video (viewers of a stream with layers; never an edge, which
        /// takes every layer and chooses for its own viewers).
        var simulcast: SimulcastViewer?
        /// What its retransmissions may still use of its downlink (see ``RetransmissionBudget``).
        var resends = RetransmissionBudget()

        /// Whether its report on `track` counts towards what the publisher is told: not for video
        /// it is not being sent (held back or probed), nor a loss at which it falls back to audio
        /// only (that viewer's leg is the problem, not the encoding).
        func counts(_ report: SubscriberReport, on track: Track) -> Bool {
            // A simulcast viewer's losses choose its layer; the encodings stay as they are.
            guard track.layer == nil || isEdge else { return false }
            guard track.throttle != nil, let gate else { return true }
            return gate.isForwarding && Double(report.block.fractionLost) / 256 < gate.settings.suspendLoss
        }
    }

    struct Stream {
        let id: String
        var publisher: Flow
        var tracks: [Track]
        /// Set when the stream is pulled from an origin relay: its "publisher" is that relay.
        var upstream: UpstreamLeg?
        /// Dense, for the fan-out loop; `subscriberSlots` indexes it by RTCP SSRC.
        var subscribers: [Subscriber] = []
        var subscriberSlots: [UInt32: Int] = [:]
        var subscriberIDs: [String: UInt32] = [:]
        /// The track indices of a simulcast video's layers, best first (empty without simulcast),
        /// and the SSRC its viewers know it by (the best layer's).
        var layers: [Int] = []
        var layerSSRC: UInt32 = 0

        func trackIndex(ssrc: UInt32) -> Int? {
            tracks.firstIndex { $0.description.ssrc == ssrc }
        }
    }

    let settings: RouterSettings
    private(set) var streams: [Int: Stream] = [:]
    private var handles: [String: Int] = [:]
    private var nextHandle = 0
    private var routes: [UInt32: RelayRoute] = [:]
    private(set) var counters = RouterCounters()
    /// Video suspended or resumed for subscribers, oldest first, until taken.
    private(set) var videoEvents: [SubscriberVideoEvent] = []
    /// Whether a simulcast viewer's layer changed since ``takeLayers()``.
    private(set) var layersChanged = false
    private var nextReport: UInt64
    /// The earliest window end of a pending keyframe request (may be early, never late), so the
    /// timer need not scan every track after each request.
    private var keyframeDeadline: UInt64?
    /// The earliest time a track's ``Track/recovery`` has a request due (may be early, never late).
    private var recoveryDeadline: UInt64?

    init(settings: RouterSettings, now: UInt64) {
        self.settings = settings
        nextReport = now &+ settings.reportInterval
    }

    var streamCount: Int { streams.count }

    func handle(streamId: String) -> Int? { handles[streamId] }

    // MARK: Flows

    /// Adds a publisher flow; false (and no change) if the id or one of its SSRCs is taken. With
    /// `upstream`, the stream is pulled from an origin relay at a known address (see ``UpstreamLeg``).
    @discardableResult
    mutating func addStream(id: String, tracks: [MediaTrackDescription], publisher: Context, upstream: UpstreamLeg? = nil) -> Bool {
        guard handles[id] == nil, !tracks.isEmpty,
              Set(tracks.map(\.ssrc)).count == tracks.count,
              tracks.allSatisfy({ routes[$0.ssrc] == nil })
        else { return false }
        let handle = nextHandle
        nextHandle += 1
        let built = tracks.map { track in
            Track(
                description: track,
                cache: PacketCache(capacity: settings.packetCacheCapacity, maximumAge: settings.packetCacheDuration),
                reception: ReceptionStatistics(clockRate: track.clockRate),
                throttle: track.kind == .video ? KeyframeThrottle(interval: settings.keyframeInterval) : nil,
                estimator: track.kind == .video ? settings.arrivalEstimator.map { settings in
                    var settings = settings
                    settings.clockRate = Double(max(track.clockRate, 1))
                    return ArrivalEstimator(settings: settings)
                } : nil,
                recovery: LossRecovery(settings: settings.upstreamRecovery, deadline: .nanoseconds(Int64(clamping: settings.upstreamRepairDeadline))))
        }
        var stream = Stream(id: id, publisher: Flow(context: publisher, address: upstream?.address), tracks: built, upstream: upstream)
        stream.layers = tracks.indices.filter { tracks[$0].layer != nil && tracks[$0].kind == .video }
            .sorted { tracks[$0].layer!.bitrate > tracks[$1].layer!.bitrate }
        for (rank, index) in stream.layers.enumerated() { stream.tracks[index].layer = rank }
        stream.layerSSRC = stream.layers.first.map { tracks[$0].ssrc } ?? 0
        if !stream.layers.isEmpty { layersChanged = true }
        streams[handle] = stream
        handles[id] = handle
        for (index, track) in tracks.enumerated() { routes[track.ssrc] = .track(stream: handle, track: index) }
        return true
    }

    /// Moves a pulled stream to a new leg of its origin (new keys, the SSRC the origin assigned
    /// the new flow); its tracks, caches and subscribers stay. False for a stream that is not pulled.
    @discardableResult
    mutating func replaceUpstream(id: String, publisher: Context, upstream: UpstreamLeg) -> Bool {
        guard let handle = handles[id], streams[handle]?.upstream != nil else { return false }
        streams[handle]!.publisher = Flow(context: publisher, address: upstream.address)
        streams[handle]!.upstream = upstream
        return true
    }

    /// Removes a stream with its publisher and every subscriber; unknown ids are ignored.
    mutating func removeStream(id: String) {
        guard let handle = handles.removeValue(forKey: id), let stream = streams.removeValue(forKey: handle) else { return }
        if !stream.layers.isEmpty { layersChanged = true }
        for track in stream.tracks {
            routes[track.description.ssrc] = nil
            if track.wireSSRC != track.description.ssrc { routes[track.wireSSRC] = nil }
        }
        for subscriber in stream.subscribers { routes[subscriber.rtcpSSRC] = nil }
    }

    /// Adds a subscriber flow (replacing one with the same id on that stream). Returns nil if the
    /// stream or the SSRC is unknown/taken. An edge relay (`isEdge`) has no audio-only fallback,
    /// and its REMB joins the estimate the publisher is told. A viewer whose REMB is bounded by
    /// what it receives (`receiveBoundEstimate`: a browser's) is probed up a simulcast's layers
    /// (see ``LayerSelector``).
    mutating func addSubscriber(
        streamId: String, subscriberId: String, rtcpSSRC: UInt32, context: Context, now: UInt64, isEdge: Bool = false,
        receiveBoundEstimate: Bool = false
    ) -> [RelayAction<Context>]? {
        guard let handle = handles[streamId] else { return nil }
        removeSubscriber(streamId: streamId, subscriberId: subscriberId)
        guard routes[rtcpSSRC] == nil else { return nil }
        routes[rtcpSSRC] = .subscriber(stream: handle, rtcpSSRC: rtcpSSRC)
        streams[handle]!.subscriberSlots[rtcpSSRC] = streams[handle]!.subscribers.count
        let kinds = Set(streams[handle]!.tracks.map(\.description.kind))
        let layers = streams[handle]!.layers
        // A simulcast viewer's poor leg is served a smaller layer rather than audio alone.
        let gate = isEdge || !layers.isEmpty ? nil : settings.videoGate.flatMap { kinds == [.audio, .video] ? VideoGate(settings: $0) : nil }
        var subscriber = Subscriber(id: subscriberId, rtcpSSRC: rtcpSSRC, flow: Flow(context: context), gate: gate, isEdge: isEdge)
        subscriber.joined = now
        subscriber.keyframeAskedAtJoin = streams[handle]!.publisher.address != nil
        // An edge takes the stream as it comes (its own viewers wait at the edge); a simulcast
        // viewer's layer switcher starts it at a keyframe already. Held only where the publisher
        // has been seen to send parameter sets (one that never does is forwarded as it comes).
        if !isEdge && layers.isEmpty && streams[handle]!.tracks.contains(where: { $0.isH264 && $0.sendsParameterSets }) {
            subscriber.awaitingKeyframe = now
            subscriber.heldAtJoin = true
            joinDeadline = min(joinDeadline ?? .max, now &+ Self.joinKeyframeWait)
        }
        if !isEdge && !layers.isEmpty {
            let bitrates = layers.map { streams[handle]!.tracks[$0].description.layer!.bitrate }
            subscriber.simulcast = SimulcastViewer(selector: LayerSelector(bitrates: bitrates, settings: settings.layerSelection,
                                                                           probesUp: receiveBoundEstimate))
        }
        streams[handle]!.subscribers.append(subscriber)
        if subscriber.simulcast != nil { layersChanged = true }
        streams[handle]!.subscriberIDs[subscriberId] = rtcpSSRC
        // Its keyframe is asked for now, while it sets up its receiver: by the time it is first
        // heard from the keyframe is often here, and is sent from the cache at once (see
        // `authenticated`). A simulcast viewer's keyframe is its layer's, asked for then.
        guard subscriber.simulcast == nil else { return [] }
        return streams[handle]!.tracks.indices.compactMap { index in
            streams[handle]!.tracks[index].throttle == nil ? nil : requestKeyframe(stream: handle, track: index, kind: .pli, now: now)
        }
    }

    /// How long a keyframe asked for a new subscriber is waited for before it is asked again.
    static var joinKeyframeWait: UInt64 { 500_000_000 }

    /// How long after a viewer's join keyframe went out its keyframe requests are still taken for
    /// the ones a receiver makes as it starts (at its first packets: a few milliseconds and a
    /// round trip later).
    static var joinRequestGrace: UInt64 { 100_000_000 }

    /// When the earliest viewer waiting for its first keyframe has waited ``joinKeyframeWait``
    /// (may be early, never late).
    private var joinDeadline: UInt64?

    /// Removes a subscriber flow; unknown ids are ignored.
    mutating func removeSubscriber(streamId: String, subscriberId: String) {
        guard let handle = handles[streamId],
              let rtcpSSRC = streams[handle]!.subscriberIDs.removeValue(forKey: subscriberId),
              let slot = streams[handle]!.subscriberSlots.removeValue(forKey: rtcpSSRC)
        else { return }
        routes[rtcpSSRC] = nil
        if streams[handle]!.subscribers[slot].simulcast != nil { layersChanged = true }
        let last = streams[handle]!.subscribers.count - 1
        if slot != last {
            streams[handle]!.subscribers.swapAt(slot, last)
            streams[handle]!.subscriberSlots[streams[handle]!.subscribers[slot].rtcpSSRC] = slot
        }
        streams[handle]!.subscribers.removeLast()
    }

    // MARK: Packets

    @inline(__always)
    func route(ssrc: UInt32) -> RelayRoute? { routes[ssrc] }

    /// The track of a stream's simulcast layer `rid` (a WebRTC publisher's packet names it).
    func layerTrack(stream: Int, rid: String) -> Int? {
        streams[stream]?.layers.first { streams[stream]!.tracks[$0].description.layer?.rid == rid }
    }

    /// The SSRC a track is declared with (what the relay forwards it under).
    func declaredSSRC(stream: Int, track: Int) -> UInt32? {
        streams[stream].flatMap { track < $0.tracks.count ? $0.tracks[track].description.ssrc : nil }
    }

    /// Routes the publisher's own SSRC `ssrc` to a track declared under another (a WebRTC
    /// simulcast layer, found by its RID): the publisher's RTCP reaches it, and feedback to the
    /// publisher names `ssrc`. A later binding replaces an earlier one (a new encoder's SSRC).
    /// False when `ssrc` routes elsewhere already.
    @discardableResult
    mutating func bindWireSSRC(stream: Int, track: Int, ssrc: UInt32) -> Bool {
        guard let current = streams[stream], track < current.tracks.count else { return false }
        let old = current.tracks[track].wireSSRC
        if old == ssrc { return true }
        guard routes[ssrc] == nil else { return false }
        if old != current.tracks[track].description.ssrc { routes[old] = nil }
        routes[ssrc] = .track(stream: stream, track: track)
        streams[stream]!.tracks[track].wireSSRC = ssrc
        return true
    }

    /// Pairs (wire, declared) of a stream's tracks the publisher sends under SSRCs of its own.
    func wireSSRCs(stream: Int) -> [(wire: UInt32, declared: UInt32)] {
        guard let current = streams[stream] else { return [] }
        return current.tracks.compactMap { $0.wireSSRC == $0.description.ssrc ? nil : ($0.wireSSRC, $0.description.ssrc) }
    }

    func publisherContext(stream: Int) -> Context? { streams[stream]?.publisher.context }

    func subscriberContext(stream: Int, rtcpSSRC: UInt32) -> Context? {
        guard let s = streams[stream], let slot = s.subscriberSlots[rtcpSSRC] else { return nil }
        return s.subscribers[slot].flow.context
    }

    /// Symmetric RTP: an authenticated packet from `address` says where the flow is now.
    ///
    /// When a subscriber is heard from for the first time, it can receive from now on: that is
    /// when it needs a keyframe (one asked for earlier would reach the relay before the subscriber
    /// could be sent anything), so the returned actions ask the publisher for one.
    @discardableResult
    mutating func authenticated(_ route: RelayRoute, from address: RelayAddress, now: UInt64 = 0) -> [RelayAction<Context>] {
        switch route {
        case .track(let stream, _):
            if streams[stream]?.publisher.address != address { streams[stream]?.publisher.address = address }
            return []
        case .subscriber(let stream, let rtcpSSRC):
            guard let slot = streams[stream]?.subscriberSlots[rtcpSSRC],
                  streams[stream]!.subscribers[slot].flow.address != address
            else { return [] }
            let first = streams[stream]!.subscribers[slot].flow.address == nil
            streams[stream]!.subscribers[slot].flow.address = address
            guard first else { return [] }
            var actions: [RelayAction<Context>] = []
            let subscriber = streams[stream]!.subscribers[slot]
            let target = subscriber.simulcast.map { streams[stream]!.layers[$0.switcher.target] }
            for index in streams[stream]!.tracks.indices where streams[stream]!.tracks[index].throttle != nil {
                // A simulcast viewer needs a keyframe of the layer it starts on only.
                if let target, streams[stream]!.tracks[index].layer != nil, index != target { continue }
                if target == nil {
                    // The keyframe asked for when it was added came: from it on, what it missed,
                    // from the cache (a publisher that cannot make a keyframe on request, an
                    // ingest passed through, has no other way to start this viewer soon). And a
                    // new keyframe is asked for at once (within the throttle): over a 50 ms round
                    // trip a viewer sent the cached keyframe and the frames after it decoded
                    // pictures whose stamps could not be read until the encoder's next keyframe,
                    // 2 s later, in most `pcast bench latency` joins, with every packet there and
                    // in order (the cause was not found; the new keyframe ends it sooner).
                    let replay = cachedSinceKeyframe(stream: stream, track: index, after: subscriber.joined)
                    if !replay.isEmpty {
                        actions += replay.map { .retransmit(subscriber.flow.context, address, rtp: $0) }
                        // The live packets after the replay continue what it sent.
                        streams[stream]!.subscribers[slot].awaitingKeyframe = nil
                        streams[stream]!.subscribers[slot].joinKeyframeSent = now
                    } else if subscriber.keyframeAskedAtJoin && now &- subscriber.joined < Self.joinKeyframeWait {
                        // Still on its way (if it was asked for: a publisher not yet heard from
                        // when the subscriber joined was not asked).
                        continue
                    }
                }
                if let action = requestKeyframe(stream: stream, track: index, kind: .pli, now: now) { actions.append(action) }
            }
            return actions
        }
    }

    /// The cached packets of an H.264 track from its latest keyframe (the packet that carries its
    /// parameter sets) to the latest packet, when all of them came at `joined` or later; empty
    /// otherwise. Looked for backwards from the latest, at a join only: nothing per packet.
    private func cachedSinceKeyframe(stream: Int, track: Int, after joined: UInt64) -> [[UInt8]] {
        let state = streams[stream]!.tracks[track]
        guard state.isH264, var sequence = state.lastForwarded else { return [] }
        var packets: [[UInt8]] = []
        while packets.count < state.cache.capacity, let packet = state.cache.packet(sequenceNumber: sequence, storedSince: joined) {
            packets.append(packet)
            if packet.withUnsafeBytes({ H264Payload.packetStartsWithParameterSets($0) }) { return packets.reversed() }
            sequence &-= 1
        }
        return []
    }

    /// An authenticated plain RTP packet from a publisher: cached, counted for the upstream report
    /// and, for video, fed to the uplink estimate. Returns the REMB to send at once when the
    /// estimate dropped.
    @discardableResult
    mutating func publisherRTP(
        stream: Int, track: Int, packet: [UInt8], sequenceNumber: UInt16, timestamp: UInt32, now: UInt64
    ) -> RelayAction<Context>? {
        guard streams[stream] != nil else { return nil }
        streams[stream]!.tracks[track].cache.store(sequenceNumber: sequenceNumber, packet: packet, now: now)
        if streams[stream]!.tracks[track].isH264 {
            let parameterSets = packet.withUnsafeBytes { H264Payload.packetStartsWithParameterSets($0) }
            if parameterSets { streams[stream]!.tracks[track].sendsParameterSets = true }
            if parameterSets || packet.withUnsafeBytes({ H264Payload.packetStartsKeyframe($0) }) {
                // It answers the keyframe requests sent so far (see KeyframeThrottle).
                streams[stream]!.tracks[track].throttle?.keyframeArrived(now: now)
            }
        }
        if streams[stream]!.tracks[track].layer != nil { streams[stream]!.tracks[track].meter.add(packet.count, now: now) }
        var packets: [RTCPPacket] = []
        let recovered = streams[stream]!.tracks[track].recovery.handle(.packet(sequence: sequenceNumber, keyframe: false), now: Self.duration(now))
        if let gap = gapRequest(recovered, stream: stream, track: track) { packets.append(.genericNACK(gap)) }
        noteRecoveryWake(stream: stream, track: track)
        streams[stream]!.tracks[track].reception.update(sequenceNumber: sequenceNumber, rtpTimestamp: timestamp, arrival: now)
        let rembDue = streams[stream]!.tracks[track].estimator?.packet(timestamp: timestamp, size: packet.count, arrival: now) == true
        let estimate = rembDue ? remb(stream: stream, now: now) : []
        packets += estimate
        guard !packets.isEmpty, let address = streams[stream]!.publisher.address, let bytes = feedback(packets, stream: stream) else { return nil }
        if !estimate.isEmpty { counters.rembsSent += 1 }
        if case .genericNACK(let gap)? = packets.first { counters.gapRequests += UInt64(gap.lostSequenceNumbers.count) }
        return .toPublisher(streams[stream]!.publisher.context, address, rtcp: bytes)
    }

    /// Whether `sequenceNumber` is a recent one that never came from the publisher (not one the
    /// cache has had and let go): only the publisher may still have it.
    private func neverArrived(stream: Int, track: Int, _ sequenceNumber: UInt16) -> Bool {
        guard streams[stream]!.publisher.address != nil, let highest = streams[stream]!.tracks[track].reception.highestSequence else { return false }
        let behind = Int(Int16(bitPattern: highest &- sequenceNumber))
        let cache = streams[stream]!.tracks[track].cache
        return behind > 0 && behind < cache.capacity && !cache.holds(sequenceNumber: sequenceNumber)
    }

    /// The NACK of what the track's ``Track/recovery`` asks for, to the publisher (or the
    /// origin): a packet missing since a later one came, once the reordering allowance passed and
    /// again every round trip until ``RouterSettings/upstreamRepairDeadline``, asked before any
    /// subscriber's own NACK so the answer comes while every subscriber can still play it. Nil
    /// when nothing is due or there is nobody to ask.
    private func gapRequest(_ actions: [LossRecovery.Action], stream: Int, track: Int) -> RTCPGenericNACK? {
        guard streams[stream]!.publisher.address != nil else { return nil }
        for case .nack(let missing) in actions {
            return RTCPGenericNACK(senderSSRC: localSSRC(stream), mediaSSRC: streams[stream]!.tracks[track].wireSSRC, lostSequenceNumbers: missing)
        }
        return nil
    }

    /// A copy of a publisher packet the relay already had (SRTP's replay check caught it): when
    /// it is the answer to a request for a packet that came first anyway, the leg reorders, and
    /// the track's ``Track/recovery`` learns by how much. Returns a NACK that fell due meanwhile.
    mutating func publisherDuplicate(stream: Int, track: Int, sequenceNumber: UInt16, now: UInt64) -> RelayAction<Context>? {
        guard streams[stream] != nil, track < streams[stream]!.tracks.count else { return nil }
        return recover(.packet(sequence: sequenceNumber, keyframe: false), stream: stream, track: track, now: now)
    }

    /// Feeds `event` to the track's ``Track/recovery``; returns the NACK to the publisher that
    /// fell due, if any.
    private mutating func recover(_ event: LossRecovery.Event, stream: Int, track: Int, now: UInt64) -> RelayAction<Context>? {
        let due = streams[stream]!.tracks[track].recovery.handle(event, now: Self.duration(now))
        noteRecoveryWake(stream: stream, track: track)
        guard let gap = gapRequest(due, stream: stream, track: track), let address = streams[stream]!.publisher.address,
              let bytes = feedback([.genericNACK(gap)], stream: stream) else { return nil }
        counters.gapRequests += UInt64(gap.lostSequenceNumbers.count)
        return .toPublisher(streams[stream]!.publisher.context, address, rtcp: bytes)
    }

    /// Brings ``recoveryDeadline`` forward to the track's next request.
    private mutating func noteRecoveryWake(stream: Int, track: Int) {
        guard let wake = streams[stream]!.tracks[track].recovery.nextWake else { return }
        let at = UInt64(max(0, wake.components.seconds)) * 1_000_000_000 + UInt64(max(0, wake.components.attoseconds / 1_000_000_000))
        recoveryDeadline = min(recoveryDeadline ?? at, at)
    }

    /// A time of the router's clock (nanoseconds) as the ``Duration`` ``LossRecovery`` counts in.
    private static func duration(_ nanoseconds: UInt64) -> Duration { .nanoseconds(Int64(clamping: nanoseconds)) }

    /// REMB for the stream's video (one packet naming its video tracks, at the lowest estimate:
    /// they share the uplink). The estimates are the relay's own of the publisher's uplink and
    /// each edge's latest of its leg from here (from the last `subscriberReportLifetime`): the
    /// publisher's one encoding must fit the worst edge, as the origin's viewers' loss reports
    /// make it fit the worst of them.
    private func remb(stream: Int, now: UInt64) -> [RTCPPacket] {
        guard let s = streams[stream] else { return [] }
        var lowest: UInt64?
        if s.layers.isEmpty {
            lowest = s.tracks.compactMap { $0.estimator?.estimate }.min().map(UInt64.init)
        } else if s.layers.contains(where: { s.tracks[$0].estimator?.estimate != nil }) {
            // The layers share the uplink, and REMB caps what the publisher sends in all: the sum
            // of each layer's estimate (its arrival rate with the same headroom where none has
            // shown a limit yet). The smallest layer's estimate alone would starve the others.
            lowest = s.layers.reduce(0) { sum, index in
                guard let estimator = s.tracks[index].estimator else { return sum }
                return sum + UInt64(estimator.estimate ?? estimator.incomingRate * 3 / 2)
            }
        }
        for subscriber in s.subscribers where subscriber.isEdge {
            guard let estimate = subscriber.edgeEstimate, now &- estimate.arrival <= settings.subscriberReportLifetime else { continue }
            lowest = min(lowest ?? .max, estimate.bitrate)
        }
        let video = s.tracks.filter { $0.throttle != nil }.map(\.wireSSRC)
        guard let lowest, !video.isEmpty else { return [] }
        return [.receiverEstimatedMaxBitrate(RTCPReceiverEstimatedMaxBitrate(
            senderSSRC: localSSRC(stream), bitrate: lowest, ssrcs: video))]
    }

    /// The sender SSRC of the RTCP this relay sends a stream's publisher: its own, or towards an
    /// origin the one the origin assigned this edge.
    private func localSSRC(_ stream: Int) -> UInt32 {
        streams[stream]?.upstream?.ssrc ?? settings.relaySSRC
    }

    /// Whether the stream is pulled from an origin relay.
    func isUpstream(stream: Int) -> Bool { streams[stream]?.upstream != nil }

    /// On an edge: a packet from the origin that it asked for, sent to the subscribers that
    /// NACKed it (each in its own numbering) and to no one else. Nil when nobody asked for it:
    /// it is fanned out as any packet. Call after ``publisherRTP(stream:track:packet:sequenceNumber:timestamp:now:)``
    /// stored it.
    mutating func answerRequested(stream: Int, track: Int, sequenceNumber: UInt16, packet: [UInt8]) -> [RelayAction<Context>]? {
        guard streams[stream]?.upstream != nil,
              let requested = streams[stream]!.tracks[track].requested.removeValue(forKey: sequenceNumber)
        else { return nil }
        var actions: [RelayAction<Context>] = []
        for waiter in requested.waiters {
            guard let slot = streams[stream]!.subscriberSlots[waiter.rtcpSSRC],
                  let address = streams[stream]!.subscribers[slot].flow.address
            else { continue }
            var bytes = packet
            if waiter.sequence != sequenceNumber || waiter.ssrc != nil { Self.rewrite(&bytes, ssrc: waiter.ssrc, sequence: waiter.sequence) }
            actions.append(.retransmit(streams[stream]!.subscribers[slot].flow.context, address, rtp: bytes))
            counters.upstreamRetransmissions += 1
        }
        return actions
    }

    /// The uplink estimate of a stream's video (bits per second), once there is one.
    func uplinkEstimate(streamId: String) -> Int? {
        guard let handle = handles[streamId] else { return nil }
        return streams[handle]?.tracks.compactMap { $0.estimator?.estimate }.min()
    }

    /// Calls `body` for every subscriber of `stream` whose address is known.
    @inline(__always)
    func forEachReachableSubscriber(of stream: Int, _ body: (Context, RelayAddress) -> Void) {
        guard let s = streams[stream] else { return }
        for subscriber in s.subscribers {
            if let address = subscriber.flow.address { body(subscriber.flow.context, address) }
        }
    }

    /// Calls `body` for every subscriber of `stream` whose address is known, with its slot and
    /// whether every packet goes to it unchanged (else ask ``forwardVideo(stream:track:slot:packet:now:)``).
    @inline(__always)
    func forEachReachableSlot(of stream: Int, _ body: (_ slot: Int, Context, RelayAddress, _ transparent: Bool) -> Void) {
        guard let s = streams[stream] else { return }
        for (slot, subscriber) in s.subscribers.enumerated() {
            if let address = subscriber.flow.address {
                body(slot, subscriber.flow.context, address,
                     subscriber.simulcast == nil && subscriber.awaitingKeyframe == nil && subscriber.gate?.isTransparent ?? true)
            }
        }
    }

    /// The context and address of the subscriber in `slot`, if it is reachable.
    func reachableSubscriber(stream: Int, slot: Int) -> (Context, RelayAddress)? {
        guard let s = streams[stream], slot < s.subscribers.count, let address = s.subscribers[slot].flow.address else { return nil }
        return (s.subscribers[slot].flow.context, address)
    }

    /// Whether a track carries video (its packets may be held back from a subscriber).
    func isVideo(stream: Int, track: Int) -> Bool { streams[stream]?.tracks[track].throttle != nil }

    /// The fate of a plain video packet of `track` towards the subscriber in `slot` (which is not
    /// transparent): for a simulcast viewer, sent under its one video SSRC when it is the layer
    /// it gets (see ``LayerSwitcher``); otherwise dropped until its first keyframe, while its
    /// video is held back or a keyframe is awaited, else renumbered into its continuous sequence.
    mutating func forwardVideo(stream: Int, track: Int, slot: Int, packet: [UInt8], now: UInt64) -> VideoForwarding {
        guard streams[stream] != nil, slot < streams[stream]!.subscribers.count, packet.count >= RTPPacketLayout.fixedHeaderLength
        else { return .unchanged }
        let sequence = UInt16(packet[2]) << 8 | UInt16(packet[3])
        if streams[stream]!.subscribers[slot].simulcast != nil {
            guard let layer = streams[stream]!.tracks[track].layer else { return .unchanged }
            let before = streams[stream]!.subscribers[slot].simulcast!.switcher.current
            let outgoing = streams[stream]!.subscribers[slot].simulcast!.switcher.forward(
                layer: layer, sequence: sequence, marker: packet[1] & 0x80 != 0
            ) { packet.withUnsafeBytes { H264Payload.packetStartsWithParameterSets($0) } }
            guard let outgoing else { return .dropped }
            if before != layer {
                if before != nil { counters.layerSwitches += 1 }
                layersChanged = true
            }
            return .rewritten(ssrc: streams[stream]!.layerSSRC, sequence: outgoing)
        }
        if let asked = streams[stream]!.subscribers[slot].awaitingKeyframe {
            // At the parameter sets sent with a keyframe (x264 sends them in a STAP-A after an
            // access unit delimiter): the IDR slice alone leaves the receiver without them, and
            // its depayloader asks for another keyframe. After one wait without any (an encoder
            // that sends them only once), at an IDR slice.
            let retried = asked != streams[stream]!.subscribers[slot].joined
            guard streams[stream]!.tracks[track].isH264, packet.withUnsafeBytes({
                H264Payload.packetStartsWithParameterSets($0) || retried && H264Payload.packetStartsKeyframe($0)
            }) else { return .dropped }
            streams[stream]!.subscribers[slot].awaitingKeyframe = nil
            // Forwarded as it came (`now`: its arrival).
            streams[stream]!.subscribers[slot].joinKeyframeSent = now
        }
        guard streams[stream]!.subscribers[slot].gate != nil else { return .unchanged }
        let outgoing = streams[stream]!.subscribers[slot].gate!.forward(sequenceNumber: sequence) {
            packet.withUnsafeBytes { H264Payload.packetStartsKeyframe($0) }
        }
        guard let outgoing else { return .dropped }
        return outgoing == sequence ? .unchanged : .renumbered(outgoing)
    }

    /// The fan-out sent the stream's packets up to `sequence` of `track` (once per batch).
    mutating func noteForwarded(stream: Int, track: Int, sequence: UInt16) {
        guard streams[stream] != nil, track < streams[stream]!.tracks.count else { return }
        streams[stream]!.tracks[track].lastForwarded = sequence
    }

    /// Takes the pending video events.
    mutating func takeVideoEvents() -> [SubscriberVideoEvent] {
        defer { videoEvents.removeAll() }
        return videoEvents
    }

    /// Authenticated RTCP from a publisher. Notes its sender reports (for the relay's own
    /// reports' LSR/DLSR) and returns whether the packet should go on to the subscribers: it does
    /// when it carries a sender report, which subscribers need for lip sync.
    mutating func publisherRTCP(stream: Int, packets: [RTCPPacket], now: UInt64) -> Bool {
        guard streams[stream] != nil else { return false }
        var forward = false
        for case .senderReport(let report) in packets {
            forward = true
            if let index = streams[stream]!.trackIndex(ssrc: report.ssrc) {
                streams[stream]!.tracks[index].reception.senderReport(ntpTimestamp: report.ntpTimestamp, arrival: now)
            }
        }
        return forward
    }

    /// Authenticated RTCP from a subscriber: receiver reports are kept for aggregation, NACKs are
    /// answered from the cache, PLI/FIR become throttled keyframe requests to the publisher.
    mutating func subscriberRTCP(stream handle: Int, rtcpSSRC: UInt32, packets: [RTCPPacket], now: UInt64) -> [RelayAction<Context>] {
        // No local copy of the stream is kept: mutating it below while a copy is alive would copy
        // its subscriber array on every report.
        guard let slot = streams[handle]?.subscriberSlots[rtcpSSRC] else { return [] }
        let context = streams[handle]!.subscribers[slot].flow.context
        let address = streams[handle]!.subscribers[slot].flow.address
        // A receiver asks for a keyframe as it starts (GStreamer's decoder as its first segment
        // comes, its depayloader at the access unit delimiter before the parameter sets); the
        // keyframe asked for its join answers those. Served, each became one more keyframe for
        // every viewer, 300 ms later by the throttle, and delayed the next viewer's. Only until
        // shortly after that keyframe went out: a request after it is for a real loss (absorbed
        // for the whole join wait, a packet lost just after the join froze the picture until the
        // encoder's next keyframe, 2 s later).
        let starting = isStarting(stream: handle, slot: slot, now: now)
        var actions: [RelayAction<Context>] = []
        for packet in packets {
            switch packet {
            case .pictureLossIndication where starting, .fullIntraRequest where starting:
                counters.keyframeRequestsAbsorbed += 1
            case .receiverReport(let report):
                actions += record(report.reportBlocks, stream: handle, slot: slot, now: now)
            case .senderReport(let report):
                actions += record(report.reportBlocks, stream: handle, slot: slot, now: now)
            case .genericNACK(let nack) where streams[handle]!.subscribers[slot].simulcast != nil && nack.mediaSSRC == streams[handle]!.layerSSRC:
                guard let address else { continue }
                actions += simulcastRetransmissions(nack, stream: handle, slot: slot, context: context, address: address, now: now)
            case .genericNACK(let nack):
                guard let index = streams[handle]!.trackIndex(ssrc: nack.mediaSSRC), let address else { continue }
                let cache = streams[handle]!.tracks[index].cache
                let gate = streams[handle]!.tracks[index].throttle == nil ? nil : streams[handle]!.subscribers[slot].gate
                var seen = Set<UInt16>()
                var upstream: [UInt16] = []
                for sequence in nack.lostSequenceNumbers where seen.insert(sequence).inserted {
                    // In the subscriber's numbering when its video was ever held back.
                    let original = gate.map { $0.original(ofNacked: sequence) } ?? sequence
                    if let original, var bytes = cache.packet(sequenceNumber: original, now: now) {
                        guard streams[handle]!.subscribers[slot].resends.spend(bytes.count, now: now) else {
                            counters.nacksThrottled += 1
                            continue
                        }
                        if original != sequence { Self.rewrite(&bytes, ssrc: nil, sequence: sequence) }
                        actions.append(.retransmit(context, address, rtp: bytes))
                        counters.nacksServed += 1
                    } else if let original, streams[handle]!.upstream != nil || neverArrived(stream: handle, track: index, original) {
                        // An edge lacks it: the origin may have it; an origin lacks it: the
                        // publisher may (the SDK's keeps a second of what it sent). Asked once per
                        // timeout however many subscribers want it; on an edge each waiter is sent
                        // the answer, on an origin it is fanned out as it comes (all lacked it).
                        if askOrigin(stream: handle, track: index, original: original, waiter: (rtcpSSRC, sequence, nil), now: now) {
                            upstream.append(original)
                        }
                    } else {
                        counters.nacksMissed += 1
                    }
                }
                if !upstream.isEmpty, let publisherAddress = streams[handle]!.publisher.address,
                   let bytes = feedback([.genericNACK(RTCPGenericNACK(senderSSRC: localSSRC(handle), mediaSSRC: streams[handle]!.tracks[index].wireSSRC,
                                                                     lostSequenceNumbers: upstream))], stream: handle) {
                    counters.nacksForwarded += UInt64(upstream.count)
                    actions.append(.toPublisher(streams[handle]!.publisher.context, publisherAddress, rtcp: bytes))
                    // Its own requests for them wait a retry interval from now.
                    _ = streams[handle]!.tracks[index].recovery.handle(.requested(upstream), now: Self.duration(now))
                }
            case .receiverEstimatedMaxBitrate(let remb) where streams[handle]!.subscribers[slot].isEdge:
                streams[handle]!.subscribers[slot].edgeEstimate = (remb.bitrate, now)
            case .receiverEstimatedMaxBitrate(let remb):
                streams[handle]!.subscribers[slot].resends.estimate(Int(clamping: remb.bitrate), now: now)
                guard streams[handle]!.subscribers[slot].simulcast != nil else { continue }
                streams[handle]!.subscribers[slot].simulcast!.selector.estimate(Int(clamping: remb.bitrate), now: now)
                if let action = chooseLayer(stream: handle, slot: slot, now: now) { actions.append(action) }
            case .pictureLossIndication(let pli) where streams[handle]!.subscribers[slot].simulcast != nil && pli.mediaSSRC == streams[handle]!.layerSSRC:
                if let action = requestLayerKeyframe(stream: handle, slot: slot, kind: .pli, now: now) { actions.append(action) }
            case .fullIntraRequest(let fir) where streams[handle]!.subscribers[slot].simulcast != nil && fir.entries.contains(where: { $0.ssrc == streams[handle]!.layerSSRC }):
                if let action = requestLayerKeyframe(stream: handle, slot: slot, kind: .fir, now: now) { actions.append(action) }
            case .pictureLossIndication(let pli):
                // A subscriber whose video is held back is sent a keyframe when a probe begins.
                if streams[handle]!.subscribers[slot].gate?.isSuspended != true,
                   let index = videoTrack(stream: handle, ssrc: pli.mediaSSRC),
                   let action = requestKeyframe(stream: handle, track: index, kind: .pli, now: now) {
                    actions.append(action)
                }
            case .fullIntraRequest(let fir):
                for entry in fir.entries where streams[handle]!.subscribers[slot].gate?.isSuspended != true {
                    if let index = videoTrack(stream: handle, ssrc: entry.ssrc),
                       let action = requestKeyframe(stream: handle, track: index, kind: .fir, now: now) {
                        actions.append(action)
                    }
                }
            default:
                break
            }
        }
        return actions
    }

    /// Notes that `waiter` waits for `original` from the origin; true when the origin must be
    /// asked (no request for it is outstanding).
    private mutating func askOrigin(stream: Int, track: Int, original: UInt16, waiter: (rtcpSSRC: UInt32, sequence: UInt16, ssrc: UInt32?), now: UInt64) -> Bool {
        if var pending = streams[stream]!.tracks[track].requested[original], pending.until > now {
            if !pending.waiters.contains(where: { $0.rtcpSSRC == waiter.0 }) { pending.waiters.append(waiter) }
            streams[stream]!.tracks[track].requested[original] = pending
            return false
        }
        // Bounded: answers that never come are forgotten once expired, and at most a cache's worth is kept.
        if streams[stream]!.tracks[track].requested.count >= settings.packetCacheCapacity {
            streams[stream]!.tracks[track].requested = streams[stream]!.tracks[track].requested.filter { $0.value.until > now }
            guard streams[stream]!.tracks[track].requested.count < settings.packetCacheCapacity else { return false }
        }
        let timeout = streams[stream]!.upstream != nil ? settings.upstreamRetransmissionTimeout : settings.publisherRetransmissionTimeout
        streams[stream]!.tracks[track].requested[original] = Requested(until: now &+ timeout, waiters: [waiter])
        return true
    }

    private func videoTrack(stream: Int, ssrc: UInt32) -> Int? {
        guard let index = streams[stream]?.trackIndex(ssrc: ssrc), streams[stream]!.tracks[index].throttle != nil else { return nil }
        return index
    }

    /// Keeps a subscriber's report blocks for aggregation and feeds its audio-only fallback;
    /// returns the keyframe request a probe needs.
    private mutating func record(_ blocks: [RTCPReportBlock], stream: Int, slot: Int, now: UInt64) -> [RelayAction<Context>] {
        var actions: [RelayAction<Context>] = []
        for block in blocks {
            guard let index = streams[stream]!.trackIndex(ssrc: block.ssrc) else { continue }
            streams[stream]!.subscribers[slot].reports[block.ssrc] = SubscriberReport(block: block, arrival: now)
            if streams[stream]!.subscribers[slot].simulcast != nil, block.ssrc == streams[stream]!.layerSSRC {
                // Losses of the layer it is sent: measured on the viewer's own leg.
                let sent = streams[stream]!.subscribers[slot].simulcast!.switcher.current ?? 0
                let legLoss = streams[stream]!.tracks[streams[stream]!.layers[sent]].publisherLegLoss
                let target = streams[stream]!.subscribers[slot].simulcast!.switcher.target
                if let lower = streams[stream]!.subscribers[slot].simulcast!.selector.report(block, publisherLegLoss: legLoss, current: target, now: now),
                   lower != target {
                    streams[stream]!.subscribers[slot].simulcast!.switcher.target = lower
                    layersChanged = true
                }
                if let action = chooseLayer(stream: stream, slot: slot, now: now) { actions.append(action) }
                continue
            }
            guard streams[stream]!.subscribers[slot].gate != nil else { continue }
            let change: VideoGate.Change?
            if streams[stream]!.tracks[index].throttle != nil {
                let legLoss = streams[stream]!.tracks[index].publisherLegLoss
                change = streams[stream]!.subscribers[slot].gate!.videoReport(block, publisherLegLoss: legLoss, now: now)
            } else {
                change = streams[stream]!.subscribers[slot].gate!.audioReport(block, now: now)
            }
            guard let change else { continue }
            let subscriber = streams[stream]!.subscribers[slot]
            switch change {
            case .suspended:
                // Until now it was sent everything as it was: its numbering continues from there.
                let lastForwarded = streams[stream]!.tracks[index].lastForwarded
                streams[stream]!.subscribers[slot].gate!.adoptLastSent(lastForwarded)
                counters.videoSuspensions += 1
                videoEvents.append(SubscriberVideoEvent(streamId: streams[stream]!.id, subscriberId: subscriber.id, suspended: true))
            case .probing:
                counters.videoProbes += 1
                for video in streams[stream]!.tracks.indices where streams[stream]!.tracks[video].throttle != nil {
                    if let action = requestKeyframe(stream: stream, track: video, kind: .pli, now: now) { actions.append(action) }
                }
            case .probeFailed:
                break
            case .resumed:
                counters.videoResumptions += 1
                videoEvents.append(SubscriberVideoEvent(streamId: streams[stream]!.id, subscriberId: subscriber.id, suspended: false))
            }
        }
        return actions
    }

    // MARK: Keyframes

    /// Whether a subscriber's keyframe requests are still those of a receiver starting on its join
    /// keyframe (see `subscriberRTCP`). A function: its copy of the subscriber ends with it.
    private func isStarting(stream: Int, slot: Int, now: UInt64) -> Bool {
        let joining = streams[stream]!.subscribers[slot]
        return joining.heldAtJoin && now &- joining.joined < Self.joinKeyframeWait
            && (joining.awaitingKeyframe != nil || joining.joinKeyframeSent.map { now &- $0 < Self.joinRequestGrace } ?? true)
    }

    private mutating func requestKeyframe(stream: Int, track: Int, kind: KeyframeThrottle.Kind, now: UInt64) -> RelayAction<Context>? {
        // Without the publisher's address there is nowhere to send it; its first frame is a keyframe anyway.
        guard let publisher = streams[stream]?.publisher, let address = publisher.address else { return nil }
        guard let send = streams[stream]!.tracks[track].throttle?.request(kind, now: now) else {
            if let due = streams[stream]!.tracks[track].throttle?.deadline { keyframeDeadline = min(keyframeDeadline ?? due, due) }
            return nil
        }
        return keyframeAction(stream: stream, track: track, kind: send, to: address, context: publisher.context)
    }

    private mutating func keyframeAction(
        stream: Int, track: Int, kind: KeyframeThrottle.Kind, to address: RelayAddress, context: Context
    ) -> RelayAction<Context>? {
        let ssrc = streams[stream]!.tracks[track].wireSSRC
        let packet: RTCPPacket
        switch kind {
        case .pli:
            packet = .pictureLossIndication(RTCPPictureLossIndication(senderSSRC: localSSRC(stream), mediaSSRC: ssrc))
        case .fir:
            let sequence = streams[stream]!.tracks[track].firSequence
            streams[stream]!.tracks[track].firSequence &+= 1
            packet = .fullIntraRequest(RTCPFullIntraRequest(
                senderSSRC: localSSRC(stream), mediaSSRC: 0, entries: [.init(ssrc: ssrc, sequenceNumber: sequence)]))
        }
        guard let bytes = feedback([packet], stream: stream) else { return nil }
        counters.keyframeRequests += 1
        return .toPublisher(context, address, rtcp: bytes)
    }

    /// Feedback the relay sends on its own, as a compound packet led by an empty receiver report
    /// (RFC 4585 §3.1): feedback-only RTCP is dropped by receivers that do not do reduced-size
    /// RTCP, GStreamer's among them.
    private func feedback(_ packets: [RTCPPacket], stream: Int) -> [UInt8]? {
        try? RTCPCompoundPacket(packets: [.receiverReport(RTCPReceiverReport(ssrc: localSSRC(stream)))] + packets).serialized()
    }

    // MARK: Timers

    /// When `tick` next has something to do.
    var nextDeadline: UInt64 {
        min(nextReport, keyframeDeadline ?? .max, joinDeadline ?? .max, recoveryDeadline ?? .max)
    }

    /// Asks again for the keyframe of viewers still waiting for their first one after
    /// ``joinKeyframeWait`` (the request or its answer was lost), sends coalesced keyframe requests
    /// whose window ended, the upstream NACKs that fell due (``Track/recovery``) and, every report
    /// interval, one receiver report per publisher.
    mutating func tick(now: UInt64) -> [RelayAction<Context>] {
        var actions: [RelayAction<Context>] = []
        let handles = Array(streams.keys)
        if let due = joinDeadline, now >= due {
            joinDeadline = nil
            for handle in handles {
                for slot in streams[handle]!.subscribers.indices {
                    guard let asked = streams[handle]!.subscribers[slot].awaitingKeyframe else { continue }
                    var next = asked &+ Self.joinKeyframeWait
                    if now >= next {
                        streams[handle]!.subscribers[slot].awaitingKeyframe = now
                        next = now &+ Self.joinKeyframeWait
                        // Held by the throttle when one is on its way: it answers this viewer too.
                        for index in streams[handle]!.tracks.indices where streams[handle]!.tracks[index].isH264 {
                            if let action = requestKeyframe(stream: handle, track: index, kind: .pli, now: now) { actions.append(action) }
                        }
                    }
                    joinDeadline = min(joinDeadline ?? .max, next)
                }
            }
        }
        keyframeDeadline = nil
        for handle in handles {
            for index in streams[handle]!.tracks.indices {
                let kind = streams[handle]!.tracks[index].throttle?.due(now: now)
                if let due = streams[handle]!.tracks[index].throttle?.deadline { keyframeDeadline = min(keyframeDeadline ?? due, due) }
                guard let kind, let address = streams[handle]!.publisher.address else { continue }
                if let action = keyframeAction(
                    stream: handle, track: index, kind: kind, to: address, context: streams[handle]!.publisher.context) {
                    actions.append(action)
                }
            }
        }
        if let due = recoveryDeadline, now >= due {
            recoveryDeadline = nil
            for handle in handles {
                for index in streams[handle]!.tracks.indices {
                    if let action = recover(.tick, stream: handle, track: index, now: now) { actions.append(action) }
                }
            }
        }
        if now >= nextReport {
            // Keep the cadence, but never try to catch up on missed intervals.
            nextReport = max(nextReport &+ settings.reportInterval, now &+ settings.reportInterval / 2)
            for handle in handles {
                if let action = receiverReport(stream: handle, now: now) { actions.append(action) }
            }
        }
        return actions
    }

    /// The relay's receiver report to a publisher: one block per SSRC the relay has received.
    ///
    /// Aggregation: the extended highest sequence number, LSR and DLSR describe the
    /// publisher→relay leg the relay measures itself (so the publisher's RTT is to the relay).
    /// Fraction lost, cumulative lost and jitter are the worst of that leg and of every
    /// subscriber's latest report for the SSRC from the last `subscriberReportLifetime`: sequence
    /// numbers pass through unchanged, so a subscriber's figures are end to end, and a publisher
    /// sending one encoding to everyone must fit its worst receiver. A subscriber whose video is
    /// held back (or being probed) by its audio-only fallback does not count for the video, nor
    /// does a video loss at which a subscriber falls back: one viewer that cannot take the video
    /// must not drag the encoding down for all the others.
    ///
    /// On an edge the report goes to the origin, with its figures raised to the edge's worst
    /// viewer's in the same way, so the publisher behind the origin fits the worst viewer of every
    /// edge; it is sent even before any media came, to open the leg (the origin learns the edge's
    /// address from it) and keep it open.
    mutating func receiverReport(stream handle: Int, now: UInt64) -> RelayAction<Context>? {
        guard let stream = streams[handle], let address = stream.publisher.address else { return nil }
        var blocks: [RTCPReportBlock] = []
        for index in stream.tracks.indices where stream.tracks[index].reception.started {
            let ssrc = stream.tracks[index].description.ssrc
            var block = streams[handle]!.tracks[index].reception.reportBlock(ssrc: stream.tracks[index].wireSSRC, now: now)
            streams[handle]!.tracks[index].publisherLegLoss = Double(block.fractionLost) / 256
            for subscriber in stream.subscribers {
                guard let report = subscriber.reports[ssrc], now &- report.arrival <= settings.subscriberReportLifetime,
                      subscriber.counts(report, on: stream.tracks[index])
                else { continue }
                block.fractionLost = max(block.fractionLost, report.block.fractionLost)
                block.cumulativeLost = max(block.cumulativeLost, report.block.cumulativeLost)
                block.jitter = max(block.jitter, report.block.jitter)
            }
            blocks.append(block)
        }
        let remb = remb(stream: handle, now: now)
        guard !blocks.isEmpty || stream.upstream != nil,
              let bytes = try? RTCPCompoundPacket(packets: [.receiverReport(RTCPReceiverReport(ssrc: localSSRC(handle), reportBlocks: Array(blocks.prefix(31))))] + remb).serialized()
        else { return nil }
        if !remb.isEmpty { counters.rembsSent += 1 }
        return .toPublisher(stream.publisher.context, address, rtcp: bytes)
    }
}

// MARK: Simulcast

extension RelayRouter {
    /// Sets a simulcast viewer's own bandwidth limit (bits per second; nil lifts it): its layer
    /// follows at once. Returns the keyframe request a move needs; nil for unknown or
    /// non-simulcast subscribers.
    mutating func setSubscriberLimit(streamId: String, subscriberId: String, bitsPerSecond: Int?, now: UInt64) -> RelayAction<Context>? {
        guard let (handle, slot) = simulcastSlot(streamId: streamId, subscriberId: subscriberId) else { return nil }
        streams[handle]!.subscribers[slot].simulcast!.selector.setLimit(bitsPerSecond)
        layersChanged = true   // whether its link holds it down depends on its limit
        return chooseLayer(stream: handle, slot: slot, now: now)
    }

    /// Sets the size a simulcast viewer shows the video at (nil: any): it is sent no better layer
    /// than the smallest that fills it (width and height), the best when none does. Layers of
    /// unknown size (a browser's) are not capped. Returns the keyframe request a move needs.
    mutating func setSubscriberViewSize(streamId: String, subscriberId: String, _ size: ViewSize?, now: UInt64) -> RelayAction<Context>? {
        guard let (handle, slot) = simulcastSlot(streamId: streamId, subscriberId: subscriberId) else { return nil }
        let layers = streams[handle]!.layers.map { streams[handle]!.tracks[$0].description.layer! }
        var cap: Int?
        if let size, layers.allSatisfy({ $0.width > 0 && $0.height > 0 }) {
            cap = layers.lastIndex { $0.width >= size.width && $0.height >= size.height } ?? 0
        }
        streams[handle]!.subscribers[slot].simulcast!.selector.setSizeCap(cap)
        layersChanged = true   // whether its link holds it down depends on its size
        return chooseLayer(stream: handle, slot: slot, now: now)
    }

    /// The stream handle and slot of a simulcast viewer; nil for unknown and other subscribers.
    private func simulcastSlot(streamId: String, subscriberId: String) -> (handle: Int, slot: Int)? {
        guard let handle = handles[streamId], let rtcpSSRC = streams[handle]!.subscriberIDs[subscriberId],
              let slot = streams[handle]!.subscriberSlots[rtcpSSRC], streams[handle]!.subscribers[slot].simulcast != nil
        else { return nil }
        return (handle, slot)
    }

    /// Keeps a simulcast viewer on one layer: `best`, `lowest` or a RID (nil: adaptive again).
    /// Returns the keyframe request a move needs; nil for unknown names and non-simulcast viewers.
    mutating func pinSubscriberLayer(streamId: String, subscriberId: String, layer: String?, now: UInt64) -> RelayAction<Context>? {
        guard let (handle, slot) = simulcastSlot(streamId: streamId, subscriberId: subscriberId) else { return nil }
        let layers = streams[handle]!.layers
        let index: Int?
        switch layer {
        case nil: index = nil
        case SimulcastLayer.best?: index = 0
        case SimulcastLayer.lowest?: index = layers.count - 1
        case let rid?:
            guard let found = layers.firstIndex(where: { streams[handle]!.tracks[$0].description.layer?.rid == rid }) else { return nil }
            index = found
        }
        streams[handle]!.subscribers[slot].simulcast!.selector.pin(index)
        layersChanged = true
        return chooseLayer(stream: handle, slot: slot, now: now)
    }

    /// Every simulcast viewer's layers, by stream id and subscriber id, and each simulcast
    /// stream's watched layers (``watchedLayers(streamId:)``); clears ``layersChanged``.
    mutating func takeLayers() -> (viewers: [String: [String: SubscriberLayer]], watched: [String: Set<String>]) {
        layersChanged = false
        var all: [String: [String: SubscriberLayer]] = [:]
        var watched: [String: Set<String>] = [:]
        for stream in streams.values where !stream.layers.isEmpty {
            watched[stream.id] = watchedLayers(streamId: stream.id)
            for subscriber in stream.subscribers where subscriber.simulcast != nil {
                all[stream.id, default: [:]][subscriber.id] = subscriberLayer(streamId: stream.id, subscriberId: subscriber.id)
            }
        }
        return (all, watched)
    }

    /// The layers a simulcast viewer is sent and is moving to (RIDs); nil for others.
    func subscriberLayer(streamId: String, subscriberId: String) -> SubscriberLayer? {
        guard let handle = handles[streamId], let stream = streams[handle], let rtcpSSRC = stream.subscriberIDs[subscriberId],
              let slot = stream.subscriberSlots[rtcpSSRC], let simulcast = stream.subscribers[slot].simulcast
        else { return nil }
        func rid(_ layer: Int) -> String { stream.tracks[stream.layers[layer]].description.layer?.rid ?? "" }
        return SubscriberLayer(current: simulcast.switcher.current.map(rid), target: rid(simulcast.switcher.target),
                               reduced: simulcast.switcher.current.map { simulcast.selector.isHeldDown($0) } ?? false)
    }

    /// The layers some viewer is sent or awaits (RIDs), for each simulcast stream: the encodings
    /// nobody watches could rest.
    func watchedLayers(streamId: String) -> Set<String>? {
        guard let handle = handles[streamId], let stream = streams[handle], !stream.layers.isEmpty else { return nil }
        var watched = Set<String>()
        for subscriber in stream.subscribers {
            if subscriber.isEdge { return Set(stream.layers.compactMap { stream.tracks[$0].description.layer?.rid }) }
            guard let switcher = subscriber.simulcast?.switcher else { continue }
            for layer in [switcher.current, switcher.target].compactMap({ $0 }) {
                if let rid = stream.tracks[stream.layers[layer]].description.layer?.rid { watched.insert(rid) }
            }
        }
        return watched
    }

    /// What a publisher's RTCP compound sent from `senderSSRC` becomes for the subscriber in
    /// `slot`: a simulcast viewer gets the reports of the layer it is sent only, under its one
    /// video SSRC (the layers share timestamps, so each layer's report maps its clock the same).
    func rtcpForwarding(stream: Int, slot: Int, senderSSRC: UInt32) -> RTCPForwarding {
        guard let s = streams[stream], slot < s.subscribers.count, let simulcast = s.subscribers[slot].simulcast,
              let index = s.trackIndex(ssrc: senderSSRC), s.tracks[index].layer != nil
        else { return .unchanged }
        guard let current = simulcast.switcher.current, s.layers[current] == index else { return .dropped }
        return senderSSRC == s.layerSSRC ? .unchanged : .rewritten(s.layerSSRC)
    }

    /// Moves a simulcast viewer to the layer its selector chooses; the keyframe request the new
    /// layer needs (also while a move waits for one).
    fileprivate mutating func chooseLayer(stream: Int, slot: Int, now: UInt64) -> RelayAction<Context>? {
        let target = streams[stream]!.subscribers[slot].simulcast!.switcher.target
        if streams[stream]!.subscribers[slot].simulcast!.selector.probesUp {
            let measured = streams[stream]!.layers.map { streams[stream]!.tracks[$0].meter.rate(now: now) }
            streams[stream]!.subscribers[slot].simulcast!.selector.measured = measured
        }
        let chosen = streams[stream]!.subscribers[slot].simulcast!.selector.choose(current: target, now: now)
        if chosen != target {
            streams[stream]!.subscribers[slot].simulcast!.switcher.target = chosen
            layersChanged = true
        }
        // One not heard from yet is sent a keyframe when it is (see `authenticated`).
        guard streams[stream]!.subscribers[slot].simulcast!.switcher.isSwitching, streams[stream]!.subscribers[slot].flow.address != nil
        else { return nil }
        return requestLayerKeyframe(stream: stream, slot: slot, kind: .pli, now: now)
    }

    /// A keyframe of the layer a simulcast viewer gets or moves to.
    fileprivate mutating func requestLayerKeyframe(stream: Int, slot: Int, kind: KeyframeThrottle.Kind, now: UInt64) -> RelayAction<Context>? {
        guard let target = streams[stream]!.subscribers[slot].simulcast?.switcher.target else { return nil }
        return requestKeyframe(stream: stream, track: streams[stream]!.layers[target], kind: kind, now: now)
    }

    /// A simulcast viewer's NACK: each sequence number is mapped back to the layer and number it
    /// was sent as, and answered from that layer's cache under the viewer's numbering (an edge
    /// asks its origin for what it lacks).
    fileprivate mutating func simulcastRetransmissions(
        _ nack: RTCPGenericNACK, stream handle: Int, slot: Int, context: Context, address: RelayAddress, now: UInt64
    ) -> [RelayAction<Context>] {
        var actions: [RelayAction<Context>] = []
        var upstream: [UInt32: [UInt16]] = [:]
        let switcher = streams[handle]!.subscribers[slot].simulcast!.switcher
        let ssrc = streams[handle]!.layerSSRC
        var seen = Set<UInt16>()
        for sequence in nack.lostSequenceNumbers where seen.insert(sequence).inserted {
            guard let (layer, original) = switcher.original(ofSent: sequence) else {
                // A jitter buffer also asks for the packet it expects next, before it is sent.
                if !switcher.isAhead(sequence) { counters.nacksMissed += 1 }
                continue
            }
            let track = streams[handle]!.layers[layer]
            if var bytes = streams[handle]!.tracks[track].cache.packet(sequenceNumber: original, now: now) {
                guard streams[handle]!.subscribers[slot].resends.spend(bytes.count, now: now) else {
                    counters.nacksThrottled += 1
                    continue
                }
                Self.rewrite(&bytes, ssrc: ssrc, sequence: sequence)
                actions.append(.retransmit(context, address, rtp: bytes))
                counters.nacksServed += 1
            } else if streams[handle]!.upstream != nil {
                let rtcpSSRC = streams[handle]!.subscribers[slot].rtcpSSRC
                if askOrigin(stream: handle, track: track, original: original, waiter: (rtcpSSRC, sequence, ssrc), now: now) {
                    upstream[streams[handle]!.tracks[track].description.ssrc, default: []].append(original)
                }
            } else {
                counters.nacksMissed += 1
            }
        }
        if let leg = streams[handle]!.upstream, let publisherAddress = streams[handle]!.publisher.address {
            for (mediaSSRC, lost) in upstream {
                guard let bytes = feedback([.genericNACK(RTCPGenericNACK(senderSSRC: leg.ssrc, mediaSSRC: mediaSSRC, lostSequenceNumbers: lost))], stream: handle)
                else { continue }
                counters.nacksForwarded += UInt64(lost.count)
                actions.append(.toPublisher(streams[handle]!.publisher.context, publisherAddress, rtcp: bytes))
            }
        }
        return actions
    }

    /// Sets a plain RTP packet's sequence number (and SSRC, when given).
    static func rewrite(_ bytes: inout [UInt8], ssrc: UInt32?, sequence: UInt16) {
        guard bytes.count >= RTPPacketLayout.fixedHeaderLength else { return }
        bytes.withUnsafeMutableBytes { RTPRewrite.setSequence(sequence, ssrc: ssrc, in: $0) }
    }
}
