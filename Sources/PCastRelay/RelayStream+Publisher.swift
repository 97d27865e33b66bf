import PCastProtocol
import PCastContracts

// The publisher's side of a stream: its packets cached and counted, gaps on its leg asked for
// again (the relay's own upstream recovery), its uplink estimated (REMB), and the answers an
// edge's origin sends for what its viewers asked.

extension RelayRouter.Stream {
    /// An authenticated plain RTP packet from the publisher: cached, counted for the upstream
    /// report and, for video, fed to the uplink estimate. Returns the REMB to send at once when
    /// the estimate dropped, or the NACK of a gap on the publisher's leg that fell due.
    mutating func publisherRTP(
        track: Int, packet: [UInt8], sequenceNumber: UInt16, timestamp: UInt32, now: UInt64, _ state: inout RouterState
    ) -> Action? {
        guard track < tracks.count else { return nil }
        tracks[track].cache.store(sequenceNumber: sequenceNumber, packet: packet, now: now)
        if tracks[track].carriesParameterSets, let codec = tracks[track].keyframes {
            // One parse of the header for both questions (every publisher packet passes here).
            let (keyframe, parameterSets) = packet.withUnsafeBytes { bytes -> (Bool, Bool) in
                guard let layout = try? RTPPacketLayout(parsing: bytes) else { return (false, false) }
                return codec.payloadStarts(UnsafeRawBufferPointer(rebasing: bytes[layout.payloadRange]))
            }
            if parameterSets { tracks[track].sendsParameterSets = true }
            if parameterSets || keyframe {
                // It answers the keyframe requests sent so far (see KeyframeThrottle).
                tracks[track].throttle?.keyframeArrived(now: now)
            }
        } else if let keyframes = tracks[track].keyframes, keyframes.startsKeyframe(packet) {
            tracks[track].throttle?.keyframeArrived(now: now)
        }
        if tracks[track].layer != nil { tracks[track].meter.add(packet.count, now: now) }
        var packets: [RTCPPacket] = []
        let recovered = tracks[track].recovery.handle(.packet(sequence: sequenceNumber, keyframe: false), now: Self.duration(now))
        if let gap = gapRequest(recovered, track: track, state.settings) { packets.append(.genericNACK(gap)) }
        noteRecoveryWake(track: track, &state)
        tracks[track].reception.update(sequenceNumber: sequenceNumber, rtpTimestamp: timestamp, arrival: now)
        let rembDue = tracks[track].estimator?.packet(timestamp: timestamp, size: packet.count, arrival: now) == true
        let estimate = rembDue ? remb(now: now, state.settings) : []
        packets += estimate
        guard !packets.isEmpty, let address = publisher.address, let bytes = feedback(packets, state.settings) else { return nil }
        if !estimate.isEmpty { state.counters.rembsSent += 1 }
        if case .genericNACK(let gap)? = packets.first { state.counters.gapRequests += UInt64(gap.lostSequenceNumbers.count) }
        return .toPublisher(publisher.context, address, rtcp: bytes)
    }

    /// Whether `sequenceNumber` is a recent one that never came from the publisher (not one the
    /// cache has had and let go): only the publisher may still have it.
    func neverArrived(track: Int, _ sequenceNumber: UInt16) -> Bool {
        guard publisher.address != nil, let highest = tracks[track].reception.highestSequence else { return false }
        let behind = Int(Int16(bitPattern: highest &- sequenceNumber))
        let cache = tracks[track].cache
        return behind > 0 && behind < cache.capacity && !cache.holds(sequenceNumber: sequenceNumber)
    }

    /// The NACK of what the track's ``RelayRouter/Track/recovery`` asks for, to the publisher (or
    /// the origin): a packet missing since a later one came, once the reordering allowance passed
    /// and again every round trip until ``RouterSettings/upstreamRepairDeadline``, asked before
    /// any subscriber's own NACK so the answer comes while every subscriber can still play it.
    /// Nil when nothing is due or there is nobody to ask.
    func gapRequest(_ actions: [LossRecovery.Action], track: Int, _ settings: RouterSettings) -> RTCPGenericNACK? {
        guard publisher.address != nil else { return nil }
        for case .nack(let missing) in actions {
            return RTCPGenericNACK(senderSSRC: localSSRC(settings), mediaSSRC: tracks[track].wireSSRC, lostSequenceNumbers: missing)
        }
        return nil
    }

    /// A copy of a publisher packet the relay already had (SRTP's replay check caught it): when
    /// it is the answer to a request for a packet that came first anyway, the leg reorders, and
    /// the track's ``RelayRouter/Track/recovery`` learns by how much. Returns a NACK that fell due meanwhile.
    mutating func publisherDuplicate(track: Int, sequenceNumber: UInt16, now: UInt64, _ state: inout RouterState) -> Action? {
        guard track < tracks.count else { return nil }
        return recover(.packet(sequence: sequenceNumber, keyframe: false), track: track, now: now, &state)
    }

    /// Feeds `event` to the track's ``RelayRouter/Track/recovery``; returns the NACK to the
    /// publisher that fell due, if any.
    mutating func recover(_ event: LossRecovery.Event, track: Int, now: UInt64, _ state: inout RouterState) -> Action? {
        let due = tracks[track].recovery.handle(event, now: Self.duration(now))
        noteRecoveryWake(track: track, &state)
        guard let gap = gapRequest(due, track: track, state.settings), let address = publisher.address,
              let bytes = feedback([.genericNACK(gap)], state.settings) else { return nil }
        state.counters.gapRequests += UInt64(gap.lostSequenceNumbers.count)
        return .toPublisher(publisher.context, address, rtcp: bytes)
    }

    /// The NACKs to the publisher of every track that fell due.
    mutating func recoverDue(now: UInt64, _ state: inout RouterState) -> [Action] {
        var actions: [Action] = []
        for index in tracks.indices {
            if let action = recover(.tick, track: index, now: now, &state) { actions.append(action) }
        }
        return actions
    }

    /// Brings ``RouterState/recoveryDeadline`` forward to the track's next request.
    func noteRecoveryWake(track: Int, _ state: inout RouterState) {
        guard let wake = tracks[track].recovery.nextWake else { return }
        let at = UInt64(max(0, wake.components.seconds)) * 1_000_000_000 + UInt64(max(0, wake.components.attoseconds / 1_000_000_000))
        state.recoveryDeadline = min(state.recoveryDeadline ?? at, at)
    }

    /// A time of the router's clock (nanoseconds) as the ``Duration`` ``LossRecovery`` counts in.
    static func duration(_ nanoseconds: UInt64) -> Duration { .nanoseconds(Int64(clamping: nanoseconds)) }

    /// REMB for the stream's video (one packet naming its video tracks, at the lowest estimate:
    /// they share the uplink). The estimates are the relay's own of the publisher's uplink and
    /// each edge's latest of its leg from here (from the last `subscriberReportLifetime`): the
    /// publisher's one encoding must fit the worst edge, as the origin's viewers' loss reports
    /// make it fit the worst of them.
    func remb(now: UInt64, _ settings: RouterSettings) -> [RTCPPacket] {
        var lowest: UInt64?
        if layers.isEmpty {
            lowest = tracks.compactMap { $0.estimator?.estimate }.min().map(UInt64.init)
        } else if layers.contains(where: { tracks[$0].estimator?.estimate != nil }) {
            // The layers share the uplink, and REMB caps what the publisher sends in all: the sum
            // of each layer's estimate (its arrival rate with the same headroom where none has
            // shown a limit yet). The smallest layer's estimate alone would starve the others.
            lowest = layers.reduce(0) { sum, index in
                guard let estimator = tracks[index].estimator else { return sum }
                return sum + UInt64(estimator.estimate ?? estimator.incomingRate * 3 / 2)
            }
        }
        for subscriber in subscribers where subscriber.isEdge {
            guard let estimate = subscriber.edgeEstimate, now &- estimate.arrival <= settings.subscriberReportLifetime else { continue }
            lowest = min(lowest ?? .max, estimate.bitrate)
        }
        let video = tracks.filter { $0.throttle != nil }.map(\.wireSSRC)
        guard let lowest, !video.isEmpty else { return [] }
        return [.receiverEstimatedMaxBitrate(RTCPReceiverEstimatedMaxBitrate(
            senderSSRC: localSSRC(settings), bitrate: lowest, ssrcs: video))]
    }

    /// The sender SSRC of the RTCP this relay sends the stream's publisher: its own, or towards an
    /// origin the one the origin assigned this edge.
    func localSSRC(_ settings: RouterSettings) -> UInt32 {
        upstream?.ssrc ?? settings.relaySSRC
    }

    /// On an edge: a packet from the origin that it asked for, sent to the subscribers that
    /// NACKed it (each in its own numbering) and to no one else. Nil when nobody asked for it:
    /// it is fanned out as any packet. Call after ``publisherRTP(track:packet:sequenceNumber:timestamp:now:_:)``
    /// stored it.
    mutating func answerRequested(track: Int, sequenceNumber: UInt16, packet: [UInt8], _ state: inout RouterState) -> [Action]? {
        guard upstream != nil, track < tracks.count, let requested = tracks[track].requested.removeValue(forKey: sequenceNumber)
        else { return nil }
        var actions: [Action] = []
        for waiter in requested.waiters {
            guard let slot = subscriberSlots[waiter.rtcpSSRC], let address = subscribers[slot].flow.address else { continue }
            var bytes = packet
            if waiter.sequence != sequenceNumber || waiter.ssrc != nil { Self.rewrite(&bytes, ssrc: waiter.ssrc, sequence: waiter.sequence) }
            actions.append(.retransmit(subscribers[slot].flow.context, address, rtp: bytes))
            state.counters.upstreamRetransmissions += 1
        }
        return actions
    }

    /// Sets a plain RTP packet's sequence number (and SSRC, when given).
    static func rewrite(_ bytes: inout [UInt8], ssrc: UInt32?, sequence: UInt16) {
        guard bytes.count >= RTPPacketLayout.fixedHeaderLength else { return }
        bytes.withUnsafeMutableBytes { RTPRewrite.setSequence(sequence, ssrc: ssrc, in: $0) }
    }
}
