import PCastProtocol
import PCastContracts

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
    func simulcastSlot(streamId: String, subscriberId: String) -> (handle: Int, slot: Int)? {
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
    mutating func chooseLayer(stream: Int, slot: Int, now: UInt64) -> RelayAction<Context>? {
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
    mutating func requestLayerKeyframe(stream: Int, slot: Int, kind: KeyframeThrottle.Kind, now: UInt64) -> RelayAction<Context>? {
        guard let target = streams[stream]!.subscribers[slot].simulcast?.switcher.target else { return nil }
        return requestKeyframe(stream: stream, track: streams[stream]!.layers[target], kind: kind, now: now)
    }

    /// A simulcast viewer's NACK: each sequence number is mapped back to the layer and number it
    /// was sent as, and answered from that layer's cache under the viewer's numbering (an edge
    /// asks its origin for what it lacks).
    mutating func simulcastRetransmissions(
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
