import PCastProtocol
import PCastContracts

// A stream's simulcast layers: each viewer's choice (its limit, its view size, a pin), the
// keyframes a move needs, reports and NACKs mapped to the layer a viewer is sent.

extension RelayRouter.Stream {
    /// The slot of a simulcast viewer; nil for unknown and other subscribers.
    func simulcastSlot(subscriberId: String) -> Int? {
        guard let slot = slot(ofSubscriber: subscriberId), subscribers[slot].simulcast != nil else { return nil }
        return slot
    }

    /// Sets a simulcast viewer's own bandwidth limit (bits per second; nil lifts it): its layer
    /// follows at once. Returns the keyframe request a move needs; nil for unknown or
    /// non-simulcast subscribers.
    mutating func setSubscriberLimit(subscriberId: String, bitsPerSecond: Int?, now: UInt64, _ state: inout RouterState) -> Action? {
        if let slot = slot(ofSubscriber: subscriberId) {
            subscribers[slot].ownLimit = bitsPerSecond
            if subscribers[slot].scalable != nil {
                subscribers[slot].scalable?.selector.setLimit(bitsPerSecond)
                return chooseLayered(slot: slot, now: now, &state)
            }
        }
        guard let slot = simulcastSlot(subscriberId: subscriberId) else { return nil }
        subscribers[slot].simulcast?.selector.setLimit(bitsPerSecond)
        state.layersChanged = true   // whether its link holds it down depends on its limit
        return chooseLayer(slot: slot, now: now, &state)
    }

    /// Sets the size a simulcast viewer shows the video at (nil: any): it is sent no better layer
    /// than the smallest that fills it (width and height), the best when none does. Layers of
    /// unknown size (a browser's) are not capped. Returns the keyframe request a move needs.
    mutating func setSubscriberViewSize(subscriberId: String, _ size: ViewSize?, now: UInt64, _ state: inout RouterState) -> Action? {
        if let slot = slot(ofSubscriber: subscriberId) {
            subscribers[slot].viewSize = size
            if subscribers[slot].scalable != nil { return chooseLayered(slot: slot, now: now, &state) }
        }
        guard let slot = simulcastSlot(subscriberId: subscriberId) else { return nil }
        let sizes = layers.compactMap { tracks[$0].description.layer }
        var cap: Int?
        if let size, sizes.allSatisfy({ $0.width > 0 && $0.height > 0 }) {
            cap = sizes.lastIndex { $0.width >= size.width && $0.height >= size.height } ?? 0
        }
        subscribers[slot].simulcast?.selector.setSizeCap(cap)
        state.layersChanged = true   // whether its link holds it down depends on its size
        return chooseLayer(slot: slot, now: now, &state)
    }

    /// Keeps a simulcast viewer on one layer: `best`, `lowest` or a RID (nil: adaptive again).
    /// Returns the keyframe request a move needs; nil for unknown names and non-simulcast viewers.
    mutating func pinSubscriberLayer(subscriberId: String, layer: String?, now: UInt64, _ state: inout RouterState) -> Action? {
        guard let slot = simulcastSlot(subscriberId: subscriberId) else { return nil }
        let index: Int?
        switch layer {
        case nil: index = nil
        case SimulcastLayer.best?: index = 0
        case SimulcastLayer.lowest?: index = layers.count - 1
        case let rid?:
            guard let found = layers.firstIndex(where: { tracks[$0].description.layer?.rid == rid }) else { return nil }
            index = found
        }
        subscribers[slot].simulcast?.selector.pin(index)
        state.layersChanged = true
        return chooseLayer(slot: slot, now: now, &state)
    }

    /// The layers a simulcast viewer is sent and is moving to (RIDs; a scalable video's viewer's
    /// points, ``LayerPoint``); nil for others.
    func subscriberLayer(subscriberId: String) -> SubscriberLayer? {
        if let slot = slot(ofSubscriber: subscriberId), let viewer = subscribers[slot].scalable {
            let sent = viewer.forwarder.current.flatMap { LayerPoint.ladder.firstIndex(of: $0) }
            return SubscriberLayer(current: viewer.forwarder.current?.description, target: viewer.forwarder.target.description,
                                   reduced: sent.map { viewer.selector.isHeldDown($0) } ?? false)
        }
        guard let slot = slot(ofSubscriber: subscriberId), let simulcast = subscribers[slot].simulcast else { return nil }
        func rid(_ layer: Int) -> String { tracks[layers[layer]].description.layer?.rid ?? "" }
        return SubscriberLayer(current: simulcast.switcher.current.map(rid), target: rid(simulcast.switcher.target),
                               reduced: simulcast.switcher.current.map { simulcast.selector.isHeldDown($0) } ?? false)
    }

    /// The layers some viewer is sent or awaits (RIDs): the encodings nobody watches could rest.
    /// All of them while an edge pulls the stream.
    var watchedLayers: Set<String> {
        var watched = Set<String>()
        for subscriber in subscribers {
            if subscriber.isEdge { return Set(layers.compactMap { tracks[$0].description.layer?.rid }) }
            guard let switcher = subscriber.simulcast?.switcher else { continue }
            for layer in [switcher.current, switcher.target].compactMap({ $0 }) {
                if let rid = tracks[layers[layer]].description.layer?.rid { watched.insert(rid) }
            }
        }
        return watched
    }

    /// What a publisher's RTCP compound sent from `senderSSRC` becomes for the subscriber in
    /// `slot`: a simulcast viewer gets the reports of the layer it is sent only, under its one
    /// video SSRC (the layers share timestamps, so each layer's report maps its clock the same).
    func rtcpForwarding(slot: Int, senderSSRC: UInt32) -> RTCPForwarding {
        guard slot < subscribers.count, let simulcast = subscribers[slot].simulcast,
              let index = trackIndex(ssrc: senderSSRC), tracks[index].layer != nil
        else { return .unchanged }
        guard let current = simulcast.switcher.current, layers[current] == index else { return .dropped }
        return senderSSRC == layerSSRC ? .unchanged : .rewritten(layerSSRC)
    }

    /// Moves a simulcast viewer to the layer its selector chooses; the keyframe request the new
    /// layer needs (also while a move waits for one).
    mutating func chooseLayer(slot: Int, now: UInt64, _ state: inout RouterState) -> Action? {
        guard let target = subscribers[slot].simulcast?.switcher.target else { return nil }
        if subscribers[slot].simulcast?.selector.probesUp == true {
            let measured = layers.map { tracks[$0].meter.rate(now: now) }
            subscribers[slot].simulcast?.selector.measured = measured
        }
        guard let chosen = subscribers[slot].simulcast?.selector.choose(current: target, now: now) else { return nil }
        if chosen != target {
            subscribers[slot].simulcast?.switcher.target = chosen
            state.layersChanged = true
        }
        // One not heard from yet is sent a keyframe when it is (see `subscriberHeard`).
        guard subscribers[slot].simulcast?.switcher.isSwitching == true, subscribers[slot].flow.address != nil else { return nil }
        return requestLayerKeyframe(slot: slot, kind: .pli, now: now, &state)
    }

    /// A keyframe of the layer a simulcast viewer gets or moves to.
    mutating func requestLayerKeyframe(slot: Int, kind: KeyframeThrottle.Kind, now: UInt64, _ state: inout RouterState) -> Action? {
        guard let target = subscribers[slot].simulcast?.switcher.target else { return nil }
        return requestKeyframe(track: layers[target], kind: kind, now: now, &state)
    }

    /// A simulcast viewer's NACK: each sequence number is mapped back to the layer and number it
    /// was sent as, and answered from that layer's cache under the viewer's numbering (an edge
    /// asks its origin for what it lacks).
    mutating func simulcastRetransmissions(
        _ nack: RTCPGenericNACK, slot: Int, context: Context, address: RelayAddress, now: UInt64, _ state: inout RouterState
    ) -> [Action] {
        guard let switcher = subscribers[slot].simulcast?.switcher else { return [] }
        var actions: [Action] = []
        var upstreamAsked: [UInt32: [UInt16]] = [:]
        let ssrc = layerSSRC
        var seen = Set<UInt16>()
        for sequence in nack.lostSequenceNumbers where seen.insert(sequence).inserted {
            guard let (layer, original) = switcher.original(ofSent: sequence) else {
                // A jitter buffer also asks for the packet it expects next, before it is sent.
                if !switcher.isAhead(sequence) { state.counters.nacksMissed += 1 }
                continue
            }
            let track = layers[layer]
            if var bytes = tracks[track].cache.packet(sequenceNumber: original, now: now) {
                guard subscribers[slot].resends.spend(bytes.count, now: now) else {
                    state.counters.nacksThrottled += 1
                    continue
                }
                Self.rewrite(&bytes, ssrc: ssrc, sequence: sequence)
                actions.append(.retransmit(context, address, rtp: bytes))
                state.counters.nacksServed += 1
            } else if upstream != nil {
                let rtcpSSRC = subscribers[slot].rtcpSSRC
                if askOrigin(track: track, original: original, waiter: (rtcpSSRC, sequence, ssrc), now: now, state.settings) {
                    upstreamAsked[tracks[track].description.ssrc, default: []].append(original)
                }
            } else {
                state.counters.nacksMissed += 1
            }
        }
        if let leg = upstream, let publisherAddress = publisher.address {
            for (mediaSSRC, lost) in upstreamAsked {
                guard let bytes = feedback([.genericNACK(RTCPGenericNACK(senderSSRC: leg.ssrc, mediaSSRC: mediaSSRC, lostSequenceNumbers: lost))],
                                           state.settings)
                else { continue }
                state.counters.nacksForwarded += UInt64(lost.count)
                actions.append(.toPublisher(publisher.context, publisherAddress, rtcp: bytes))
            }
        }
        return actions
    }
}
