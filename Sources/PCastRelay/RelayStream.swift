import PCastProtocol
import PCastContracts

/// What the router keeps outside its streams, which a stream's work reads and writes: the
/// settings, the counters, the events and changes the I/O side collects, and the deadlines its
/// timer wakes for. Handed to a ``RelayRouter/Stream`` method beside the stream itself, so the
/// stream never reaches the router (nor another stream).
struct RouterState {
    let settings: RouterSettings
    var counters = RouterCounters()
    /// Video suspended or resumed for subscribers, oldest first, until taken.
    var videoEvents: [SubscriberVideoEvent] = []
    /// Whether a simulcast viewer's layer changed since ``RelayRouter/takeLayers()``.
    var layersChanged = false
    /// The earliest window end of a pending keyframe request (may be early, never late), so the
    /// timer need not scan every track after each request.
    var keyframeDeadline: UInt64?
    /// The earliest time a track's ``RelayRouter/Track/recovery`` has a request due (may be early, never late).
    var recoveryDeadline: UInt64?
    /// When the earliest viewer waiting for its first keyframe has waited
    /// ``RouterTiming/joinKeyframeWait`` (may be early, never late).
    var joinDeadline: UInt64?

    init(settings: RouterSettings) {
        self.settings = settings
    }
}

/// The router's fixed waits around a viewer's join.
enum RouterTiming {
    /// How long a keyframe asked for a new subscriber is waited for before it is asked again.
    static let joinKeyframeWait: UInt64 = 500_000_000

    /// How long after a viewer's join keyframe went out its keyframe requests are still taken for
    /// the ones a receiver makes as it starts (at its first packets: a few milliseconds and a
    /// round trip later).
    static let joinRequestGrace: UInt64 = 100_000_000
}

extension RelayRouter {
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
        /// The video's codec, where its keyframes are read from (nil: not video, or a codec the
        /// relay cannot read keyframes of).
        let keyframes: VideoPayload?
        /// H.264 or H.265 whose keyframes have come with their parameter sets: a joining viewer's video
        /// starts at them (see ``Subscriber/awaitingKeyframe``).
        var sendsParameterSets = false
        /// H.264 or H.265 video (parameter sets in band): a joining subscriber starts at them,
        /// looked for in the cache.
        var carriesParameterSets: Bool { keyframes?.sendsParameterSets ?? false }
        /// VP9 or AV1: the layers its packets say they are of (see ``ScalableTrack``).
        var scalable: ScalableTrack?

        init(description: MediaTrackDescription, settings: RouterSettings) {
            self.description = description
            cache = PacketCache(capacity: settings.packetCacheCapacity, maximumAge: settings.packetCacheDuration)
            reception = ReceptionStatistics(clockRate: description.clockRate)
            throttle = description.kind == .video ? KeyframeThrottle(interval: settings.keyframeInterval) : nil
            estimator = description.kind == .video ? settings.arrivalEstimator.map { estimator in
                var estimator = estimator
                estimator.clockRate = Double(max(description.clockRate, 1))
                return ArrivalEstimator(settings: estimator)
            } : nil
            recovery = LossRecovery(settings: settings.upstreamRecovery,
                                    deadline: .nanoseconds(Int64(clamping: settings.upstreamRepairDeadline)))
            wireSSRC = description.ssrc
            keyframes = description.kind == .video ? VideoPayload(encodingName: description.codec) : nil
            scalable = ScalableTrack(codec: keyframes)
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
        /// then its keyframe requests in its first ``RouterTiming/joinKeyframeWait`` are the ones a
        /// receiver makes as it starts, and the keyframe asked for its join answers them.
        var heldAtJoin = false
        /// When its join keyframe was sent (see ``RouterTiming/joinRequestGrace``).
        var joinKeyframeSent: UInt64?
        /// Whether its wait for a first keyframe was counted (``RouterCounters/viewerJoin``).
        var joinCounted = false
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
        /// Its layers of a scalable video (viewers of a stream whose packets say their layers;
        /// never an edge). Made at its first such packet.
        var scalable: ScalableViewer?
        /// Whether its REMB is bounded by what it receives (a browser's: see ``LayerSelector``).
        var receiveBoundEstimate = false
        /// Its own bandwidth limit and view size, kept for when its stream turns out layered.
        var ownLimit: Int?
        var viewSize: ViewSize?

        /// Whether its report on `track` counts towards what the publisher is told: not for video
        /// it is not being sent (held back or probed), nor a loss at which it falls back to audio
        /// only (that viewer's leg is the problem, not the encoding).
        func counts(_ report: SubscriberReport, on track: Track) -> Bool {
            // A simulcast viewer's losses choose its layer, a scalable video's viewer's its layers;
            // the encodings stay as they are.
            guard track.layer == nil || isEdge, scalable == nil else { return false }
            guard track.throttle != nil, let gate else { return true }
            return gate.isForwarding && Double(report.block.fractionLost) / 256 < gate.settings.suspendLoss
        }

        /// Whether its keyframe requests are still those of a receiver starting on its join
        /// keyframe (see ``Stream/subscriberRTCP(rtcpSSRC:packets:now:_:)``).
        func isStarting(now: UInt64) -> Bool {
            heldAtJoin && now &- joined < RouterTiming.joinKeyframeWait
                && (awaitingKeyframe != nil || joinKeyframeSent.map { now &- $0 < RouterTiming.joinRequestGrace } ?? true)
        }
    }

    /// One stream: its publisher (or the origin it is pulled from), its tracks and its
    /// subscribers. Its methods (here and in the `RelayStream+…` files) see this stream and the
    /// ``RouterState`` only.
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
        /// Whether a packet of its video said its layers (see ``ScalableTrack``): its viewers get
        /// the layers their budgets allow.
        var isLayered = false

        init(id: String, tracks: [MediaTrackDescription], publisher: Context, upstream: UpstreamLeg?, settings: RouterSettings) {
            self.id = id
            self.publisher = Flow(context: publisher, address: upstream?.address)
            self.tracks = tracks.map { Track(description: $0, settings: settings) }
            self.upstream = upstream
            let layered = tracks.indices.compactMap { index in
                tracks[index].kind == .video ? tracks[index].layer.map { (index: index, bitrate: $0.bitrate) } : nil
            }
            layers = layered.sorted { $0.bitrate > $1.bitrate }.map(\.index)
            for (rank, index) in layers.enumerated() { self.tracks[index].layer = rank }
            layerSSRC = layers.first.map { tracks[$0].ssrc } ?? 0
        }

        func trackIndex(ssrc: UInt32) -> Int? {
            tracks.firstIndex { $0.description.ssrc == ssrc }
        }

        /// The track of a simulcast layer `rid`.
        func layerTrack(rid: String) -> Int? {
            layers.first { tracks[$0].description.layer?.rid == rid }
        }

        /// Pairs (wire, declared) of the tracks the publisher sends under SSRCs of its own.
        var wireSSRCs: [(wire: UInt32, declared: UInt32)] {
            tracks.compactMap { $0.wireSSRC == $0.description.ssrc ? nil : ($0.wireSSRC, $0.description.ssrc) }
        }

        /// The slot of the subscriber `id`.
        func slot(ofSubscriber id: String) -> Int? {
            subscriberIDs[id].flatMap { subscriberSlots[$0] }
        }
    }
}

/// A video track's keyframes, read from a plain RTP packet's first bytes (the codec's payload
/// reader is PCastProtocol's ``VideoPayload``, shared with the SDK's receiver).
extension VideoPayload {
    /// Whether the packet begins a keyframe.
    func startsKeyframe(_ packet: [UInt8]) -> Bool {
        packet.withUnsafeBytes { packetStartsKeyframe($0) }
    }

    /// Whether a decoder that has seen nothing of this encoding can start at the packet.
    func startsDecoding(_ packet: [UInt8]) -> Bool {
        packet.withUnsafeBytes { packetStartsDecoding($0) }
    }
}

// MARK: Flows and forwarding

extension RelayRouter.Stream {
    typealias Action = RelayAction<Context>

    /// Adds a subscriber (its route is the router's); the keyframe requests its join makes.
    mutating func addSubscriber(
        id subscriberId: String, rtcpSSRC: UInt32, context: Context, now: UInt64, isEdge: Bool, receiveBoundEstimate: Bool,
        _ state: inout RouterState
    ) -> [Action] {
        subscriberSlots[rtcpSSRC] = subscribers.count
        let kinds = Set(tracks.map(\.description.kind))
        // A simulcast viewer's poor leg is served a smaller layer rather than audio alone.
        let gate = isEdge || !layers.isEmpty ? nil : state.settings.videoGate.flatMap { kinds == [.audio, .video] ? VideoGate(settings: $0) : nil }
        var subscriber = RelayRouter.Subscriber(id: subscriberId, rtcpSSRC: rtcpSSRC, flow: RelayRouter.Flow(context: context), gate: gate, isEdge: isEdge)
        subscriber.joined = now
        subscriber.receiveBoundEstimate = receiveBoundEstimate
        if isLayered && !isEdge { subscriber.makeScalable(state.settings) }
        subscriber.keyframeAskedAtJoin = publisher.address != nil
        // An edge takes the stream as it comes (its own viewers wait at the edge); a simulcast
        // viewer's layer switcher starts it at a keyframe already. Held only where the publisher
        // has been seen to send parameter sets (one that never does is forwarded as it comes).
        if !isEdge && layers.isEmpty && tracks.contains(where: \.sendsParameterSets) {
            subscriber.awaitingKeyframe = now
            subscriber.heldAtJoin = true
            state.joinDeadline = min(state.joinDeadline ?? .max, now &+ RouterTiming.joinKeyframeWait)
        }
        if !isEdge && !layers.isEmpty {
            let bitrates = layers.map { tracks[$0].description.layer?.bitrate ?? 0 }
            subscriber.simulcast = SimulcastViewer(selector: LayerSelector(bitrates: bitrates, settings: state.settings.layerSelection,
                                                                           probesUp: receiveBoundEstimate))
        }
        subscribers.append(subscriber)
        if subscriber.simulcast != nil { state.layersChanged = true }
        subscriberIDs[subscriberId] = rtcpSSRC
        // Its keyframe is asked for now, while it sets up its receiver: by the time it is first
        // heard from the keyframe is often here, and is sent from the cache at once (see
        // `subscriberHeard`). A simulcast viewer's keyframe is its layer's, asked for then.
        guard subscriber.simulcast == nil else { return [] }
        return tracks.indices.compactMap { index in
            tracks[index].throttle == nil ? nil : requestKeyframe(track: index, kind: .pli, now: now, &state)
        }
    }

    /// Removes the subscriber `id`; its RTCP SSRC (whose route the router drops), nil when unknown.
    mutating func removeSubscriber(id subscriberId: String, _ state: inout RouterState) -> UInt32? {
        guard let rtcpSSRC = subscriberIDs.removeValue(forKey: subscriberId),
              let slot = subscriberSlots.removeValue(forKey: rtcpSSRC)
        else { return nil }
        if subscribers[slot].simulcast != nil { state.layersChanged = true }
        let last = subscribers.count - 1
        if slot != last {
            subscribers.swapAt(slot, last)
            subscriberSlots[subscribers[slot].rtcpSSRC] = slot
        }
        subscribers.removeLast()
        return rtcpSSRC
    }

    /// An authenticated packet of the publisher came from `address`: its media goes there.
    mutating func publisherHeard(at address: RelayAddress) {
        if publisher.address != address { publisher.address = address }
    }

    /// An authenticated packet of a subscriber came from `address`. The first time, it can
    /// receive from now on: that is when it needs a keyframe (one asked for earlier would reach
    /// the relay before the subscriber could be sent anything), so the returned actions send it
    /// the cached one or ask the publisher for one.
    mutating func subscriberHeard(rtcpSSRC: UInt32, at address: RelayAddress, now: UInt64, _ state: inout RouterState) -> [Action] {
        guard let slot = subscriberSlots[rtcpSSRC], subscribers[slot].flow.address != address else { return [] }
        let first = subscribers[slot].flow.address == nil
        subscribers[slot].flow.address = address
        guard first else { return [] }
        var actions: [Action] = []
        let subscriber = subscribers[slot]
        let target = subscriber.simulcast.map { layers[$0.switcher.target] }
        for index in tracks.indices where tracks[index].throttle != nil {
            // A simulcast viewer needs a keyframe of the layer it starts on only.
            if let target, tracks[index].layer != nil, index != target { continue }
            if target == nil {
                // The keyframe asked for when it was added came: from it on, what it missed,
                // from the cache (a publisher that cannot make a keyframe on request, an
                // ingest passed through, has no other way to start this viewer soon). And a
                // new keyframe is asked for at once (within the throttle): over a 50 ms round
                // trip a viewer sent the cached keyframe and the frames after it decoded
                // pictures whose stamps could not be read until the encoder's next keyframe,
                // 2 s later, in most `pcast-bench latency` joins, with every packet there and
                // in order (the cause was not found; the new keyframe ends it sooner).
                let replay = cachedSinceKeyframe(track: index, after: subscriber.joined)
                if !replay.isEmpty {
                    actions += replay.map { .retransmit(subscriber.flow.context, address, rtp: $0) }
                    // The live packets after the replay continue what it sent.
                    subscribers[slot].awaitingKeyframe = nil
                    subscribers[slot].joinKeyframeSent = now
                    countJoin(slot: slot, now: now, &state)
                } else if subscriber.keyframeAskedAtJoin && now &- subscriber.joined < RouterTiming.joinKeyframeWait {
                    // Still on its way (if it was asked for: a publisher not yet heard from
                    // when the subscriber joined was not asked).
                    continue
                }
            }
            if let action = requestKeyframe(track: index, kind: .pli, now: now, &state) { actions.append(action) }
        }
        return actions
    }

    /// The cached packets of an H.264 or H.265 track from its latest keyframe (the packet that carries its
    /// parameter sets) to the latest packet, when all of them came at `joined` or later; empty
    /// otherwise. Looked for backwards from the latest, at a join only: nothing per packet.
    func cachedSinceKeyframe(track: Int, after joined: UInt64) -> [[UInt8]] {
        let state = tracks[track]
        guard state.carriesParameterSets, let codec = state.keyframes, var sequence = state.lastForwarded else { return [] }
        var packets: [[UInt8]] = []
        while packets.count < state.cache.capacity, let packet = state.cache.packet(sequenceNumber: sequence, storedSince: joined) {
            packets.append(packet)
            if codec.startsDecoding(packet) { return packets.reversed() }
            sequence &-= 1
        }
        return []
    }

    /// Calls `body` for every subscriber whose address is known, with its slot and whether every
    /// packet goes to it unchanged (else ask ``forwardVideo(track:slot:packet:now:_:)``).
    @inline(__always)
    func forEachReachableSlot(_ body: (_ slot: Int, Context, RelayAddress, _ transparent: Bool) -> Void) {
        for (slot, subscriber) in subscribers.enumerated() {
            if let address = subscriber.flow.address {
                body(slot, subscriber.flow.context, address,
                     subscriber.simulcast == nil && subscriber.awaitingKeyframe == nil && subscriber.gate?.isTransparent ?? true
                        && (!isLayered || subscriber.isEdge))
            }
        }
    }

    /// The fate of a plain video packet of `track` towards the subscriber in `slot` (which is not
    /// transparent): for a simulcast viewer, sent under its one video SSRC when it is the layer
    /// it gets (see ``LayerSwitcher``); otherwise dropped until its first keyframe, while its
    /// video is held back or a keyframe is awaited, else renumbered into its continuous sequence.
    mutating func forwardVideo(
        track: Int, slot: Int, packet: [UInt8], layers: ScalableLayers? = nil, now: UInt64, _ state: inout RouterState
    ) -> VideoForwarding {
        guard slot < subscribers.count, track < tracks.count, packet.count >= RTPPacketLayout.fixedHeaderLength else { return .unchanged }
        let sequence = UInt16(packet[2]) << 8 | UInt16(packet[3])
        if isLayered, !subscribers[slot].isEdge, tracks[track].scalable != nil {
            return forwardLayered(packet, layers: layers, slot: slot, sequence: sequence, now: now, &state)
        }
        let keyframes = tracks[track].keyframes
        if subscribers[slot].simulcast != nil {
            guard let layer = tracks[track].layer else { return .unchanged }
            let before = subscribers[slot].simulcast?.switcher.current
            let outgoing = subscribers[slot].simulcast?.switcher.forward(layer: layer, sequence: sequence, marker: packet[1] & 0x80 != 0) {
                keyframes?.startsDecoding(packet) ?? false
            }
            guard let outgoing else { return .dropped }
            if before != layer {
                if before != nil { state.counters.layerSwitches += 1 } else { countJoin(slot: slot, now: now, &state) }
                state.layersChanged = true
            }
            return .rewritten(ssrc: layerSSRC, sequence: outgoing)
        }
        if let asked = subscribers[slot].awaitingKeyframe {
            // At the parameter sets sent with a keyframe (x264 sends them in a STAP-A after an
            // access unit delimiter): the IDR slice alone leaves the receiver without them, and
            // its depayloader asks for another keyframe. After one wait without any (an encoder
            // that sends them only once), at an IDR slice.
            let retried = asked != subscribers[slot].joined
            guard tracks[track].carriesParameterSets, let codec = keyframes,
                  codec.startsDecoding(packet) || retried && codec.startsKeyframe(packet) else { return .dropped }
            subscribers[slot].awaitingKeyframe = nil
            // Forwarded as it came (`now`: its arrival).
            subscribers[slot].joinKeyframeSent = now
            countJoin(slot: slot, now: now, &state)
        }
        guard subscribers[slot].gate != nil else { return .unchanged }
        let outgoing = subscribers[slot].gate?.forward(sequenceNumber: sequence) {
            keyframes?.startsKeyframe(packet) ?? false
        }
        guard let outgoing else { return .dropped }
        return outgoing == sequence ? .unchanged : .renumbered(outgoing)
    }
}

extension RelayRouter.Stream {
    /// A viewer's first keyframe went out: its wait since it subscribed is counted once (edges
    /// take the stream as it comes and are not viewers).
    mutating func countJoin(slot: Int, now: UInt64, _ state: inout RouterState) {
        guard !subscribers[slot].joinCounted, !subscribers[slot].isEdge else { return }
        subscribers[slot].joinCounted = true
        state.counters.viewerJoin.record(Double(now &- subscribers[slot].joined) / 1e9)
    }
}
