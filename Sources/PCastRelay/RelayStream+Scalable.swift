import PCastProtocol
import PCastContracts

// A scalable video's viewers (VP9 or AV1 whose packets say their layers): each is sent the
// operating point its budget allows (its limit, its estimate, its losses, the size it shows the
// video at), moved down at once and up at a switch point, renumbered so it sees no gap, and its
// NACKs mapped back. The publisher's one encoding is never changed for a viewer.

extension RelayRouter.Subscriber {
    /// Makes it a viewer of a scalable video. Its audio-only fallback goes: a poor leg is sent
    /// fewer layers instead (and the fallback's own renumbering would fight this one).
    mutating func makeScalable(_ settings: RouterSettings) {
        guard !isEdge, scalable == nil else { return }
        scalable = ScalableViewer(settings: settings.layerSelection, probesUp: receiveBoundEstimate)
        scalable?.selector.setLimit(ownLimit)
        gate = nil
    }
}

extension RelayRouter.Stream {
    /// Reads a publisher packet's layers (see ``ScalableTrack/read(_:descriptor:now:)``); the
    /// first packet that says them makes every viewer a scalable video's viewer.
    mutating func readLayers(track: Int, packet: [UInt8], descriptor: [UInt8]?, now: UInt64, _ state: inout RouterState) -> ScalableLayers? {
        guard track < tracks.count, tracks[track].scalable != nil,
              let layers = tracks[track].scalable?.read(packet, descriptor: descriptor, now: now) else { return nil }
        if !isLayered {
            isLayered = true
            for slot in subscribers.indices { subscribers[slot].makeScalable(state.settings) }
        }
        return layers
    }

    /// The video track whose packets say their layers.
    var layeredTrack: Int? {
        isLayered ? tracks.firstIndex { $0.scalable != nil } : nil
    }

    /// A packet of a scalable video towards a viewer (see ``ScalableForwarder``). A packet that
    /// says no layers (a descriptor that did not parse) goes as its picture's others would.
    mutating func forwardLayered(_ packet: [UInt8], layers: ScalableLayers?, slot: Int, sequence: UInt16, now: UInt64,
                                 _ state: inout RouterState) -> VideoForwarding {
        if subscribers[slot].scalable == nil { subscribers[slot].makeScalable(state.settings) }
        let started = subscribers[slot].scalable?.forwarder.current != nil
        let timestamp = UInt32(packet[4]) << 24 | UInt32(packet[5]) << 16 | UInt32(packet[6]) << 8 | UInt32(packet[7])
        let outcome = subscribers[slot].scalable?.forwarder.forward(layers ?? .unread, sequence: sequence, timestamp: timestamp,
                                                                    marker: packet[1] & 0x80 != 0)
        guard let outcome else { return .dropped }
        if !started, subscribers[slot].scalable?.forwarder.current != nil { countJoin(slot: slot, now: now, &state) }
        if outcome.moved {
            state.counters.layerSwitches += UInt64(outcome.switched)
            state.layersChanged = true
        }
        guard let sent = outcome.sent else { return .dropped }
        return .layered(sequence: sent.sequence, marker: sent.marker)
    }

    /// A scalable video's viewer's NACK: each number mapped back to the packet sent as it, and
    /// answered from the cache under the viewer's numbering and marker. A place never sent (a
    /// packet lost upstream and still missing) is not answered.
    mutating func layeredRetransmissions(
        _ nack: RTCPGenericNACK, track: Int, slot: Int, context: Context, address: RelayAddress, now: UInt64, _ state: inout RouterState
    ) -> [Action] {
        guard let numbering = subscribers[slot].scalable?.forwarder.numbering else { return [] }
        var actions: [Action] = []
        var seen = Set<UInt16>()
        for sequence in nack.lostSequenceNumbers where seen.insert(sequence).inserted {
            guard let sent = numbering.original(ofSent: sequence),
                  var bytes = tracks[track].cache.packet(sequenceNumber: sent.original, now: now) else {
                if !numbering.isNewest(sequence) { state.counters.nacksMissed += 1 }
                continue
            }
            guard subscribers[slot].resends.spend(bytes.count, now: now) else {
                state.counters.nacksThrottled += 1
                continue
            }
            Self.rewrite(&bytes, ssrc: nil, sequence: sequence)
            if sent.marker { bytes[1] |= 0x80 }
            actions.append(.retransmit(context, address, rtp: bytes))
            state.counters.nacksServed += 1
        }
        return actions
    }

    /// Moves a scalable video's viewer to the point its selector chooses (each point's rate as
    /// measured now). A move up a spatial layer asks the publisher for a keyframe: a k-SVC
    /// stream's upper layers have no other switch point.
    mutating func chooseLayered(slot: Int, now: UInt64, _ state: inout RouterState) -> Action? {
        guard let track = layeredTrack, let scalable = tracks[track].scalable, var viewer = subscribers[slot].scalable else { return nil }
        let ladder = LayerPoint.ladder
        // The layers' sizes may have come since the viewer said its size.
        let cap = layeredSizeCap(subscribers[slot].viewSize)
        if cap != viewer.selector.sizeCap { viewer.selector.setSizeCap(cap) }
        let measured = ladder.map { scalable.rate(of: $0, now: now) }
        viewer.selector.bitrates = measured
        if viewer.selector.probesUp { viewer.selector.measured = measured }
        let from = viewer.forwarder.target
        let index = ladder.firstIndex(of: from) ?? 0
        let chosen = ladder[viewer.selector.choose(current: index, now: now)]
        viewer.forwarder.target = chosen
        subscribers[slot].scalable = viewer
        if chosen != from { state.layersChanged = true }
        // Still waiting for its first keyframe: the one asked at its join passed before it could be
        // sent it (it was not reachable yet), and a browser publisher sends no other unasked.
        if viewer.forwarder.current == nil {
            guard subscribers[slot].flow.address != nil, now &- subscribers[slot].joined >= RouterTiming.joinKeyframeWait else { return nil }
            return requestKeyframe(track: track, kind: .pli, now: now, &state)
        }
        guard chosen.spatial > (viewer.forwarder.current ?? chosen).spatial else { return nil }
        return requestKeyframe(track: track, kind: .pli, now: now, &state)
    }

    /// `chooseLayered` for every scalable video's viewer (measured rates change as time passes).
    mutating func chooseLayeredAll(now: UInt64, _ state: inout RouterState) -> [Action] {
        guard isLayered else { return [] }
        return subscribers.indices.compactMap { subscribers[$0].scalable == nil ? nil : chooseLayered(slot: $0, now: now, &state) }
    }

    /// The ladder index of the smallest point whose picture fills `size` (nil: any, or sizes not announced).
    func layeredSizeCap(_ size: ViewSize?) -> Int? {
        guard let size, let track = layeredTrack, let scalable = tracks[track].scalable else { return nil }
        let ladder = LayerPoint.ladder
        let sizes = ladder.map { scalable.size(of: $0) }
        guard sizes.allSatisfy({ $0 != nil }) else { return nil }
        return sizes.lastIndex { $0!.width >= size.width && $0!.height >= size.height } ?? 0
    }
}
