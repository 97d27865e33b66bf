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

/// A scalable video's viewer: the layers it is sent (and how), and which it should get (its
/// selector's ladder is ``LayerPoint/ladder``, each point's rate measured at the relay).
struct ScalableViewer: Sendable {
    var forwarder: ScalableForwarder
    var selector: LayerSelector

    init(settings: LayerSelector.Settings, probesUp: Bool) {
        selector = LayerSelector(bitrates: LayerPoint.ladder.map { _ in 0 }, settings: settings, probesUp: probesUp)
        // The best at first: whatever its leg, its estimate or limit moves it down at once (a
        // recorder, which has neither, keeps the whole picture).
        forwarder = ScalableForwarder(target: LayerPoint.ladder[0])
    }
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

/// A stream in the router: given when it is added, and worth nothing once it is removed (every
/// lookup by it then finds nothing). Integers, so the per-packet path hashes no strings.
struct StreamHandle: Hashable, Sendable, CustomStringConvertible {
    let value: Int
    var description: String { "stream #\(value)" }
}

/// How the relay finds a flow from the SSRC in a packet's clear header.
enum RelayRoute: Sendable, Equatable {
    /// A publisher's media SSRC (its RTP, and its RTCP whose sender SSRC is that SSRC).
    case track(stream: StreamHandle, track: Int)
    /// A subscriber's relay-assigned RTCP sender SSRC.
    case subscriber(stream: StreamHandle, rtcpSSRC: UInt32)
}

/// An authenticated plain publisher packet, to be sent to the stream's subscribers.
struct PendingPacket: Equatable {
    let stream: StreamHandle
    let track: Int
    let video: Bool
    let packet: [UInt8]
    /// When it arrived (ns).
    let arrival: UInt64
    /// Its layers, for a scalable video's packet that says them (read once on arrival).
    var layers: ScalableLayers? = nil
}

/// Something the I/O side must send. Contexts are the flows' SRTP sessions in the real relay and
/// plain values in tests; packets are plain (the I/O side protects them with the context).
enum RelayAction<Context> {
    /// RTCP the relay originates towards a publisher (PLI, FIR, receiver report).
    case toPublisher(Context, RelayAddress, rtcp: [UInt8])
    /// A cached RTP packet re-sent to the one subscriber that NACKed it.
    case retransmit(Context, RelayAddress, rtp: [UInt8])
    /// A publisher's RTCP (its sender reports) on its way to one subscriber.
    case toSubscriber(Context, RelayAddress, rtcp: [UInt8])
    /// A publisher's RTP packet to send to the stream's subscribers; the I/O side gathers a
    /// batch's worth and fans them out together, asking the router about each subscriber whose
    /// copy is not the packet as it is (see ``RelayRouter/forwardVideo(stream:track:slot:packet:now:)``).
    case forward(PendingPacket)
}

extension RelayAction: Equatable where Context: Equatable {}

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
    /// Sent with this sequence number and marker bit: some layers of a scalable video.
    case layered(sequence: UInt16, marker: Bool)
    /// Not sent.
    case dropped
}


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
    /// Simulcast viewers moved from one layer to another (at a keyframe of the new one), and
    /// scalable video's viewers moved from one operating point to another.
    var layerSwitches: UInt64 = 0
    /// Retransmissions not sent because they would have taken more than a subscriber's share of
    /// its estimated downlink (a congested leg whose NACKs would feed its congestion).
    var nacksThrottled: UInt64 = 0
    /// Viewers' waits from joining to their first keyframe sent (s), and their reports' fractions
    /// lost.
    var viewerJoin = HistogramCounts(bounds: HistogramCounts.joinBounds)
    var viewerLoss = HistogramCounts(bounds: HistogramCounts.lossBounds)
    /// Packets ``RelayRouter/receive(datagram:from:now:peer:)`` took for no flow: not RTP or RTCP,
    /// an SSRC it does not route, a header it cannot parse.
    var unknownPackets: UInt64 = 0
    /// Packets of a known flow that did not authenticate (forged, corrupted, another key).
    var srtpFailures: UInt64 = 0
    /// Publisher packets that authenticated but had come before (SRTP's replay check).
    var duplicates: UInt64 = 0
}

/// The relay's routing, caching, keyframe throttling and report aggregation, without sockets or
/// crypto: one thread owns it, feeds it events and carries out what it returns.
///
/// Every packet comes in by one call, ``receive(datagram:from:now:peer:)`` (in
/// `RelayRouter+Receive.swift`), which routes it by its SSRC, authenticates it with its flow's
/// keys and returns what to send; the control calls add and remove flows; ``tick(now:)`` runs the
/// timers. Streams are held by a ``StreamHandle``; each call looks its stream up once and hands
/// the work to the stream (``Stream``), whose methods see only their own stream and the
/// ``RouterState`` every stream shares (settings, counters, events, deadlines).
///
/// One concern a file: flows and the calls into a stream here; the stream's own state and its
/// forwarding in `RelayStream.swift`; its publisher's side (its packets, gaps on its leg, the
/// uplink estimate) in `RelayStream+Publisher.swift`; RTCP from publishers and subscribers in
/// `RelayStream+Feedback.swift`; keyframe requests and reports in `RelayStream+Keyframes.swift`;
/// simulcast layers in `RelayStream+Simulcast.swift`; the timers in `RelayRouter+Timers.swift`.
///
/// ```swift
/// var router = RelayRouter<Int>(settings: RouterSettings(relaySSRC: 9), now: 0)
/// router.addStream(id: "s", tracks: [video], publisher: 1)
/// let actions = router.addSubscriber(streamId: "s", subscriberId: "a", rtcpSSRC: 77, context: 2, now: 0)
/// ```
struct RelayRouter<Context> {
    private(set) var streams: [StreamHandle: Stream] = [:]
    private var handles: [String: StreamHandle] = [:]
    private var nextHandle = 0
    private(set) var routes: [UInt32: RelayRoute] = [:]
    /// What every stream's work shares (see ``RouterState``).
    var state: RouterState
    var nextReport: UInt64

    init(settings: RouterSettings, now: UInt64) {
        state = RouterState(settings: settings)
        nextReport = now &+ settings.reportInterval
    }

    var settings: RouterSettings { state.settings }
    var counters: RouterCounters { state.counters }
    /// Whether a simulcast viewer's layer changed since ``takeLayers()``.
    var layersChanged: Bool { state.layersChanged }
    /// Video suspended or resumed for subscribers, oldest first, until taken.
    var videoEvents: [SubscriberVideoEvent] { state.videoEvents }
    var streamCount: Int { streams.count }

    func handle(streamId: String) -> StreamHandle? { handles[streamId] }

    /// Runs `body` on the stream `handle` names, in place; nil (and nothing run) when it names
    /// none. The one way into a stream: the stream is looked up once per call, and a handle kept
    /// past its stream's removal finds nothing rather than trapping.
    @inline(__always)
    mutating func withStream<Result>(_ handle: StreamHandle, _ body: (inout Stream, inout RouterState) -> Result) -> Result? {
        guard let index = streams.index(forKey: handle) else { return nil }
        return body(&streams.values[index], &state)
    }

    /// The same for a stream by its id.
    @inline(__always)
    mutating func withStream<Result>(id: String, _ body: (inout Stream, inout RouterState) -> Result) -> Result? {
        guard let handle = handles[id] else { return nil }
        return withStream(handle, body)
    }

    // MARK: Flows

    /// Adds a publisher flow; false (and no change) if the id or one of its SSRCs is taken. With
    /// `upstream`, the stream is pulled from an origin relay at a known address (see ``UpstreamLeg``).
    @discardableResult
    mutating func addStream(id: String, tracks: [MediaTrackDescription], publisher: Context, upstream: UpstreamLeg? = nil) -> Bool {
        guard handles[id] == nil, !tracks.isEmpty,
              Set(tracks.map(\.ssrc)).count == tracks.count,
              tracks.allSatisfy({ routes[$0.ssrc] == nil })
        else { return false }
        let handle = StreamHandle(value: nextHandle)
        nextHandle += 1
        let stream = Stream(id: id, tracks: tracks, publisher: publisher, upstream: upstream, settings: settings)
        if !stream.layers.isEmpty { state.layersChanged = true }
        streams[handle] = stream
        handles[id] = handle
        for (index, track) in tracks.enumerated() { routes[track.ssrc] = .track(stream: handle, track: index) }
        return true
    }

    /// Moves a pulled stream to a new leg of its origin (new keys, the SSRC the origin assigned
    /// the new flow); its tracks, caches and subscribers stay. False for a stream that is not pulled.
    @discardableResult
    mutating func replaceUpstream(id: String, publisher: Context, upstream: UpstreamLeg) -> Bool {
        withStream(id: id) { stream, _ in
            guard stream.upstream != nil else { return false }
            stream.publisher = Flow(context: publisher, address: upstream.address)
            stream.upstream = upstream
            return true
        } ?? false
    }

    /// Removes a stream with its publisher and every subscriber; unknown ids are ignored.
    mutating func removeStream(id: String) {
        guard let handle = handles.removeValue(forKey: id), let stream = streams.removeValue(forKey: handle) else { return }
        if !stream.layers.isEmpty { state.layersChanged = true }
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
        return withStream(handle) { stream, state in
            stream.addSubscriber(id: subscriberId, rtcpSSRC: rtcpSSRC, context: context, now: now, isEdge: isEdge,
                                 receiveBoundEstimate: receiveBoundEstimate, &state)
        }
    }

    /// Removes a subscriber flow; unknown ids are ignored.
    mutating func removeSubscriber(streamId: String, subscriberId: String) {
        guard let rtcpSSRC = withStream(id: streamId, { stream, state in stream.removeSubscriber(id: subscriberId, &state) }) ?? nil
        else { return }
        routes[rtcpSSRC] = nil
    }

    // MARK: Routes

    @inline(__always)
    func route(ssrc: UInt32) -> RelayRoute? { routes[ssrc] }

    /// The track of a stream's simulcast layer `rid` (a WebRTC publisher's packet names it).
    func layerTrack(stream: StreamHandle, rid: String) -> Int? {
        streams[stream]?.layerTrack(rid: rid)
    }

    /// The SSRC a track is declared with (what the relay forwards it under).
    func declaredSSRC(stream: StreamHandle, track: Int) -> UInt32? {
        streams[stream].flatMap { track < $0.tracks.count ? $0.tracks[track].description.ssrc : nil }
    }

    /// Routes the publisher's own SSRC `ssrc` to a track declared under another (a WebRTC
    /// simulcast layer, found by its RID): the publisher's RTCP reaches it, and feedback to the
    /// publisher names `ssrc`. A later binding replaces an earlier one (a new encoder's SSRC).
    /// False when `ssrc` routes elsewhere already.
    @discardableResult
    mutating func bindWireSSRC(stream handle: StreamHandle, track: Int, ssrc: UInt32) -> Bool {
        guard let current = streams[handle], track < current.tracks.count else { return false }
        let old = current.tracks[track].wireSSRC
        if old == ssrc { return true }
        guard routes[ssrc] == nil else { return false }
        if old != current.tracks[track].description.ssrc { routes[old] = nil }
        routes[ssrc] = .track(stream: handle, track: track)
        withStream(handle) { stream, _ in stream.tracks[track].wireSSRC = ssrc }
        return true
    }

    /// Pairs (wire, declared) of a stream's tracks the publisher sends under SSRCs of its own.
    func wireSSRCs(stream: StreamHandle) -> [(wire: UInt32, declared: UInt32)] {
        streams[stream]?.wireSSRCs ?? []
    }

    func publisherContext(stream: StreamHandle) -> Context? { streams[stream]?.publisher.context }

    func subscriberContext(stream: StreamHandle, rtcpSSRC: UInt32) -> Context? {
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
        case .track(let handle, _):
            withStream(handle) { stream, _ in stream.publisherHeard(at: address) }
            return []
        case .subscriber(let handle, let rtcpSSRC):
            return withStream(handle) { stream, state in stream.subscriberHeard(rtcpSSRC: rtcpSSRC, at: address, now: now, &state) } ?? []
        }
    }

    // MARK: Fan-out

    /// Calls `body` for every subscriber of `stream` whose address is known.
    @inline(__always)
    func forEachReachableSubscriber(of stream: StreamHandle, _ body: (Context, RelayAddress) -> Void) {
        guard let s = streams[stream] else { return }
        for subscriber in s.subscribers {
            if let address = subscriber.flow.address { body(subscriber.flow.context, address) }
        }
    }

    /// Calls `body` for every subscriber of `stream` whose address is known, with its slot and
    /// whether every packet goes to it unchanged (else ask ``forwardVideo(stream:track:slot:packet:now:)``).
    @inline(__always)
    func forEachReachableSlot(of stream: StreamHandle, _ body: (_ slot: Int, Context, RelayAddress, _ transparent: Bool) -> Void) {
        streams[stream]?.forEachReachableSlot(body)
    }

    /// The context and address of the subscriber in `slot`, if it is reachable.
    func reachableSubscriber(stream: StreamHandle, slot: Int) -> (Context, RelayAddress)? {
        guard let s = streams[stream], slot < s.subscribers.count, let address = s.subscribers[slot].flow.address else { return nil }
        return (s.subscribers[slot].flow.context, address)
    }

    /// Whether a track carries video (its packets may be held back from a subscriber).
    func isVideo(stream: StreamHandle, track: Int) -> Bool { streams[stream]?.tracks[track].throttle != nil }

    /// The fate of a plain video packet of `track` towards the subscriber in `slot` (see
    /// ``Stream/forwardVideo(track:slot:packet:now:_:)``).
    mutating func forwardVideo(stream: StreamHandle, track: Int, slot: Int, packet: [UInt8], layers: ScalableLayers? = nil,
                               now: UInt64) -> VideoForwarding {
        withStream(stream) { stream, state in
            stream.forwardVideo(track: track, slot: slot, packet: packet, layers: layers, now: now, &state)
        } ?? .unchanged
    }

    /// The fan-out sent the stream's packets up to `sequence` of `track` (once per batch).
    mutating func noteForwarded(stream: StreamHandle, track: Int, sequence: UInt16) {
        withStream(stream) { stream, _ in
            guard track < stream.tracks.count else { return }
            stream.tracks[track].lastForwarded = sequence
        }
    }

    /// Takes the pending video events.
    mutating func takeVideoEvents() -> [SubscriberVideoEvent] {
        defer { state.videoEvents.removeAll() }
        return state.videoEvents
    }

    // MARK: The publisher's side

    /// An authenticated plain RTP packet from a publisher (see ``Stream/publisherRTP(track:packet:sequenceNumber:timestamp:now:_:)``).
    @discardableResult
    mutating func publisherRTP(
        stream: StreamHandle, track: Int, packet: [UInt8], sequenceNumber: UInt16, timestamp: UInt32, now: UInt64
    ) -> RelayAction<Context>? {
        withStream(stream) { stream, state in
            stream.publisherRTP(track: track, packet: packet, sequenceNumber: sequenceNumber, timestamp: timestamp, now: now, &state)
        } ?? nil
    }

    /// A copy of a publisher packet the relay already had (see ``Stream/publisherDuplicate(track:sequenceNumber:now:_:)``).
    mutating func publisherDuplicate(stream: StreamHandle, track: Int, sequenceNumber: UInt16, now: UInt64) -> RelayAction<Context>? {
        withStream(stream) { stream, state in stream.publisherDuplicate(track: track, sequenceNumber: sequenceNumber, now: now, &state) } ?? nil
    }

    /// On an edge: a packet from the origin that it asked for, sent to the subscribers that
    /// NACKed it only; nil when nobody asked for it (see ``Stream/answerRequested(track:sequenceNumber:packet:_:)``).
    mutating func answerRequested(stream: StreamHandle, track: Int, sequenceNumber: UInt16, packet: [UInt8]) -> [RelayAction<Context>]? {
        withStream(stream) { stream, state in stream.answerRequested(track: track, sequenceNumber: sequenceNumber, packet: packet, &state) } ?? nil
    }

    /// Whether the stream is pulled from an origin relay.
    func isUpstream(stream: StreamHandle) -> Bool { streams[stream]?.upstream != nil }

    /// The uplink estimate of a stream's video (bits per second), once there is one.
    func uplinkEstimate(streamId: String) -> Int? {
        guard let handle = handles[streamId] else { return nil }
        return streams[handle]?.tracks.compactMap { $0.estimator?.estimate }.min()
    }

    // MARK: Feedback

    /// Authenticated RTCP from a publisher (see ``Stream/publisherRTCP(packets:now:)``).
    mutating func publisherRTCP(stream: StreamHandle, packets: [RTCPPacket], now: UInt64) -> Bool {
        withStream(stream) { stream, _ in stream.publisherRTCP(packets: packets, now: now) } ?? false
    }

    /// Authenticated RTCP from a subscriber (see ``Stream/subscriberRTCP(rtcpSSRC:packets:now:_:)``).
    mutating func subscriberRTCP(stream: StreamHandle, rtcpSSRC: UInt32, packets: [RTCPPacket], now: UInt64) -> [RelayAction<Context>] {
        withStream(stream) { stream, state in stream.subscriberRTCP(rtcpSSRC: rtcpSSRC, packets: packets, now: now, &state) } ?? []
    }

    /// What a publisher's RTCP compound sent from `senderSSRC` becomes for the subscriber in
    /// `slot` (see ``Stream/rtcpForwarding(slot:senderSSRC:)``).
    func rtcpForwarding(stream: StreamHandle, slot: Int, senderSSRC: UInt32) -> RTCPForwarding {
        streams[stream]?.rtcpForwarding(slot: slot, senderSSRC: senderSSRC) ?? .unchanged
    }

    /// The relay's receiver report to a publisher (see ``Stream/receiverReport(now:_:)``).
    mutating func receiverReport(stream: StreamHandle, now: UInt64) -> RelayAction<Context>? {
        withStream(stream) { stream, state in stream.receiverReport(now: now, &state) } ?? nil
    }

    // MARK: Simulcast

    /// Sets a simulcast viewer's own bandwidth limit (bits per second; nil lifts it): its layer
    /// follows at once. Returns the keyframe request a move needs; nil for unknown or
    /// non-simulcast subscribers.
    mutating func setSubscriberLimit(streamId: String, subscriberId: String, bitsPerSecond: Int?, now: UInt64) -> RelayAction<Context>? {
        withStream(id: streamId) { stream, state in
            stream.setSubscriberLimit(subscriberId: subscriberId, bitsPerSecond: bitsPerSecond, now: now, &state)
        } ?? nil
    }

    /// Sets the size a simulcast viewer shows the video at (see ``Stream/setSubscriberViewSize(subscriberId:_:now:_:)``).
    mutating func setSubscriberViewSize(streamId: String, subscriberId: String, _ size: ViewSize?, now: UInt64) -> RelayAction<Context>? {
        withStream(id: streamId) { stream, state in stream.setSubscriberViewSize(subscriberId: subscriberId, size, now: now, &state) } ?? nil
    }

    /// Keeps a simulcast viewer on one layer (see ``Stream/pinSubscriberLayer(subscriberId:layer:now:_:)``).
    mutating func pinSubscriberLayer(streamId: String, subscriberId: String, layer: String?, now: UInt64) -> RelayAction<Context>? {
        withStream(id: streamId) { stream, state in stream.pinSubscriberLayer(subscriberId: subscriberId, layer: layer, now: now, &state) } ?? nil
    }

    /// Every simulcast viewer's layers (a scalable video's viewer's points, `S1T2`), by stream id
    /// and subscriber id, and each simulcast
    /// stream's watched layers (``watchedLayers(streamId:)``); clears ``layersChanged``.
    mutating func takeLayers() -> (viewers: [String: [String: SubscriberLayer]], watched: [String: Set<String>]) {
        state.layersChanged = false
        var all: [String: [String: SubscriberLayer]] = [:]
        var watched: [String: Set<String>] = [:]
        for stream in streams.values where !stream.layers.isEmpty || stream.isLayered {
            if !stream.layers.isEmpty { watched[stream.id] = stream.watchedLayers }
            for subscriber in stream.subscribers where subscriber.simulcast != nil || subscriber.scalable != nil {
                all[stream.id, default: [:]][subscriber.id] = stream.subscriberLayer(subscriberId: subscriber.id)
            }
        }
        return (all, watched)
    }

    /// The layers a simulcast viewer is sent and is moving to (RIDs); nil for others.
    func subscriberLayer(streamId: String, subscriberId: String) -> SubscriberLayer? {
        handles[streamId].flatMap { streams[$0]?.subscriberLayer(subscriberId: subscriberId) }
    }

    /// The layers some viewer is sent or awaits (RIDs), for a simulcast stream: the encodings
    /// nobody watches could rest. Nil for other streams.
    func watchedLayers(streamId: String) -> Set<String>? {
        guard let handle = handles[streamId], let stream = streams[handle], !stream.layers.isEmpty else { return nil }
        return stream.watchedLayers
    }
}
