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
/// One concern a file: flows and packet routing here; the publisher's side (its packets, gaps on
/// its leg, the uplink estimate) in `RelayRouter+Publisher.swift`; RTCP from publishers and
/// subscribers in `RelayRouter+Feedback.swift`; keyframe requests and timers in
/// `RelayRouter+Timers.swift`; simulcast layers in `RelayRouter+Simulcast.swift`. Its state is
/// internal rather than private so those extensions can use it; nothing outside the router
/// writes it (`RelayEngine` reads `streams` and `counters`).
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
    var streams: [Int: Stream] = [:]
    var handles: [String: Int] = [:]
    var nextHandle = 0
    var routes: [UInt32: RelayRoute] = [:]
    var counters = RouterCounters()
    /// Video suspended or resumed for subscribers, oldest first, until taken.
    var videoEvents: [SubscriberVideoEvent] = []
    /// Whether a simulcast viewer's layer changed since ``takeLayers()``.
    var layersChanged = false
    var nextReport: UInt64
    /// The earliest window end of a pending keyframe request (may be early, never late), so the
    /// timer need not scan every track after each request.
    var keyframeDeadline: UInt64?
    /// The earliest time a track's ``Track/recovery`` has a request due (may be early, never late).
    var recoveryDeadline: UInt64?

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
    var joinDeadline: UInt64?

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
                    // 2 s later, in most `pcast-bench latency` joins, with every packet there and
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
    func cachedSinceKeyframe(stream: Int, track: Int, after joined: UInt64) -> [[UInt8]] {
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
}
