import PCastProtocol
import PCastContracts

// The publisher's side of the router: its packets cached and counted, gaps on its leg asked for
// again (the relay's own upstream recovery), its uplink estimated (REMB), and the answers an
// edge's origin sends for what its viewers asked.

extension RelayRouter {
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
            // One parse of the header for both questions (every publisher packet passes here).
            let (parameterSets, keyframe) = packet.withUnsafeBytes { bytes -> (Bool, Bool) in
                guard let layout = try? RTPPacketLayout(parsing: bytes) else { return (false, false) }
                let payload = UnsafeRawBufferPointer(rebasing: bytes[layout.payloadRange])
                return (H264Payload.startsWithParameterSets(payload), H264Payload.startsKeyframe(payload))
            }
            if parameterSets { streams[stream]!.tracks[track].sendsParameterSets = true }
            if parameterSets || keyframe {
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
    func neverArrived(stream: Int, track: Int, _ sequenceNumber: UInt16) -> Bool {
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
    func gapRequest(_ actions: [LossRecovery.Action], stream: Int, track: Int) -> RTCPGenericNACK? {
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
    mutating func recover(_ event: LossRecovery.Event, stream: Int, track: Int, now: UInt64) -> RelayAction<Context>? {
        let due = streams[stream]!.tracks[track].recovery.handle(event, now: Self.duration(now))
        noteRecoveryWake(stream: stream, track: track)
        guard let gap = gapRequest(due, stream: stream, track: track), let address = streams[stream]!.publisher.address,
              let bytes = feedback([.genericNACK(gap)], stream: stream) else { return nil }
        counters.gapRequests += UInt64(gap.lostSequenceNumbers.count)
        return .toPublisher(streams[stream]!.publisher.context, address, rtcp: bytes)
    }

    /// Brings ``recoveryDeadline`` forward to the track's next request.
    mutating func noteRecoveryWake(stream: Int, track: Int) {
        guard let wake = streams[stream]!.tracks[track].recovery.nextWake else { return }
        let at = UInt64(max(0, wake.components.seconds)) * 1_000_000_000 + UInt64(max(0, wake.components.attoseconds / 1_000_000_000))
        recoveryDeadline = min(recoveryDeadline ?? at, at)
    }

    /// A time of the router's clock (nanoseconds) as the ``Duration`` ``LossRecovery`` counts in.
    static func duration(_ nanoseconds: UInt64) -> Duration { .nanoseconds(Int64(clamping: nanoseconds)) }

    /// REMB for the stream's video (one packet naming its video tracks, at the lowest estimate:
    /// they share the uplink). The estimates are the relay's own of the publisher's uplink and
    /// each edge's latest of its leg from here (from the last `subscriberReportLifetime`): the
    /// publisher's one encoding must fit the worst edge, as the origin's viewers' loss reports
    /// make it fit the worst of them.
    func remb(stream: Int, now: UInt64) -> [RTCPPacket] {
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
    func localSSRC(_ stream: Int) -> UInt32 {
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
}
