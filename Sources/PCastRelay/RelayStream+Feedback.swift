import PCastProtocol
import PCastContracts

// RTCP through a stream: its publisher's sender reports, and its subscribers' reports, NACKs and
// keyframe requests (answered from the cache, asked upstream, coalesced), with the audio-only
// fallback their reports drive.

extension RelayRouter.Stream {
    /// Authenticated RTCP from the publisher. Notes its sender reports (for the relay's own
    /// reports' LSR/DLSR) and returns whether the packet should go on to the subscribers: it does
    /// when it carries a sender report, which subscribers need for lip sync.
    mutating func publisherRTCP(packets: [RTCPPacket], now: UInt64) -> Bool {
        var forward = false
        for case .senderReport(let report) in packets {
            forward = true
            if let index = trackIndex(ssrc: report.ssrc) {
                tracks[index].reception.senderReport(ntpTimestamp: report.ntpTimestamp, arrival: now)
            }
        }
        return forward
    }

    /// The publisher's plain RTCP compound `packet`, sent from `senderSSRC`, for each reachable
    /// subscriber as ``rtcpForwarding(slot:senderSSRC:)`` says.
    func subscriberCopies(of packet: [UInt8], senderSSRC: UInt32) -> [Action] {
        var actions: [Action] = []
        forEachReachableSlot { slot, context, address, _ in
            var copy = packet
            switch rtcpForwarding(slot: slot, senderSSRC: senderSSRC) {
            case .unchanged: break
            case .rewritten(let ssrc): RTPRewrite.replaceSenderSSRC(&copy, senderSSRC, with: ssrc)
            case .dropped: return
            }
            actions.append(.toSubscriber(context, address, rtcp: copy))
        }
        return actions
    }

    /// Authenticated RTCP from a subscriber: receiver reports are kept for aggregation, NACKs are
    /// answered from the cache, PLI/FIR become throttled keyframe requests to the publisher.
    mutating func subscriberRTCP(rtcpSSRC: UInt32, packets: [RTCPPacket], now: UInt64, _ state: inout RouterState) -> [Action] {
        guard let slot = subscriberSlots[rtcpSSRC] else { return [] }
        let context = subscribers[slot].flow.context
        let address = subscribers[slot].flow.address
        // A receiver asks for a keyframe as it starts (GStreamer's decoder as its first segment
        // comes, its depayloader at the access unit delimiter before the parameter sets); the
        // keyframe asked for its join answers those. Served, each became one more keyframe for
        // every viewer, 300 ms later by the throttle, and delayed the next viewer's. Only until
        // shortly after that keyframe went out: a request after it is for a real loss (absorbed
        // for the whole join wait, a packet lost just after the join froze the picture until the
        // encoder's next keyframe, 2 s later).
        let starting = subscribers[slot].isStarting(now: now)
        var actions: [Action] = []
        for packet in packets {
            switch packet {
            case .pictureLossIndication where starting, .fullIntraRequest where starting:
                state.counters.keyframeRequestsAbsorbed += 1
            case .receiverReport(let report):
                actions += record(report.reportBlocks, slot: slot, now: now, &state)
            case .senderReport(let report):
                actions += record(report.reportBlocks, slot: slot, now: now, &state)
            case .genericNACK(let nack) where subscribers[slot].scalable != nil && videoTrack(ssrc: nack.mediaSSRC) == layeredTrack:
                guard let address, let track = layeredTrack else { continue }
                actions += layeredRetransmissions(nack, track: track, slot: slot, context: context, address: address, now: now, &state)
            case .genericNACK(let nack) where subscribers[slot].simulcast != nil && nack.mediaSSRC == layerSSRC:
                guard let address else { continue }
                actions += simulcastRetransmissions(nack, slot: slot, context: context, address: address, now: now, &state)
            case .genericNACK(let nack):
                guard let index = trackIndex(ssrc: nack.mediaSSRC), let address else { continue }
                actions += retransmissions(nack, track: index, slot: slot, context: context, address: address, now: now, &state)
            case .receiverEstimatedMaxBitrate(let remb) where subscribers[slot].isEdge:
                subscribers[slot].edgeEstimate = (remb.bitrate, now)
            case .receiverEstimatedMaxBitrate(let remb):
                subscribers[slot].resends.estimate(Int(clamping: remb.bitrate), now: now)
                if subscribers[slot].scalable != nil {
                    subscribers[slot].scalable?.selector.estimate(Int(clamping: remb.bitrate), now: now)
                    if let action = chooseLayered(slot: slot, now: now, &state) { actions.append(action) }
                    continue
                }
                guard subscribers[slot].simulcast != nil else { continue }
                subscribers[slot].simulcast?.selector.estimate(Int(clamping: remb.bitrate), now: now)
                if let action = chooseLayer(slot: slot, now: now, &state) { actions.append(action) }
            case .pictureLossIndication(let pli) where subscribers[slot].simulcast != nil && pli.mediaSSRC == layerSSRC:
                if let action = requestLayerKeyframe(slot: slot, kind: .pli, now: now, &state) { actions.append(action) }
            case .fullIntraRequest(let fir) where subscribers[slot].simulcast != nil && fir.entries.contains(where: { $0.ssrc == layerSSRC }):
                if let action = requestLayerKeyframe(slot: slot, kind: .fir, now: now, &state) { actions.append(action) }
            case .pictureLossIndication(let pli):
                // A subscriber whose video is held back is sent a keyframe when a probe begins.
                if subscribers[slot].gate?.isSuspended != true, let index = videoTrack(ssrc: pli.mediaSSRC),
                   let action = requestKeyframe(track: index, kind: .pli, now: now, &state) {
                    actions.append(action)
                }
            case .fullIntraRequest(let fir):
                for entry in fir.entries where subscribers[slot].gate?.isSuspended != true {
                    if let index = videoTrack(ssrc: entry.ssrc), let action = requestKeyframe(track: index, kind: .fir, now: now, &state) {
                        actions.append(action)
                    }
                }
            default:
                break
            }
        }
        return actions
    }

    /// A subscriber's NACK of `track`: answered from the cache (in its numbering when its video
    /// was ever held back), within its share of its downlink; what the cache lacks is asked
    /// upstream when upstream may still have it.
    mutating func retransmissions(
        _ nack: RTCPGenericNACK, track index: Int, slot: Int, context: Context, address: RelayAddress, now: UInt64, _ state: inout RouterState
    ) -> [Action] {
        var actions: [Action] = []
        let cache = tracks[index].cache
        let gate = tracks[index].throttle == nil ? nil : subscribers[slot].gate
        let rtcpSSRC = subscribers[slot].rtcpSSRC
        var seen = Set<UInt16>()
        var upstreamAsked: [UInt16] = []
        for sequence in nack.lostSequenceNumbers where seen.insert(sequence).inserted {
            // In the subscriber's numbering when its video was ever held back.
            let original = gate.map { $0.original(ofNacked: sequence) } ?? sequence
            if let original, var bytes = cache.packet(sequenceNumber: original, now: now) {
                guard subscribers[slot].resends.spend(bytes.count, now: now) else {
                    state.counters.nacksThrottled += 1
                    continue
                }
                if original != sequence { Self.rewrite(&bytes, ssrc: nil, sequence: sequence) }
                actions.append(.retransmit(context, address, rtp: bytes))
                state.counters.nacksServed += 1
            } else if let original, upstream != nil || neverArrived(track: index, original) {
                // An edge lacks it: the origin may have it; an origin lacks it: the
                // publisher may (the SDK's keeps a second of what it sent). Asked once per
                // timeout however many subscribers want it; on an edge each waiter is sent
                // the answer, on an origin it is fanned out as it comes (all lacked it).
                if askOrigin(track: index, original: original, waiter: (rtcpSSRC, sequence, nil), now: now, state.settings) {
                    upstreamAsked.append(original)
                }
            } else {
                state.counters.nacksMissed += 1
            }
        }
        if !upstreamAsked.isEmpty, let publisherAddress = publisher.address,
           let bytes = feedback([.genericNACK(RTCPGenericNACK(senderSSRC: localSSRC(state.settings), mediaSSRC: tracks[index].wireSSRC,
                                                             lostSequenceNumbers: upstreamAsked))], state.settings) {
            state.counters.nacksForwarded += UInt64(upstreamAsked.count)
            actions.append(.toPublisher(publisher.context, publisherAddress, rtcp: bytes))
            // Its own requests for them wait a retry interval from now.
            _ = tracks[index].recovery.handle(.requested(upstreamAsked), now: Self.duration(now))
        }
        return actions
    }

    /// Notes that `waiter` waits for `original` from upstream; true when upstream must be asked
    /// (no request for it is outstanding).
    mutating func askOrigin(
        track: Int, original: UInt16, waiter: (rtcpSSRC: UInt32, sequence: UInt16, ssrc: UInt32?), now: UInt64, _ settings: RouterSettings
    ) -> Bool {
        if var pending = tracks[track].requested[original], pending.until > now {
            if !pending.waiters.contains(where: { $0.rtcpSSRC == waiter.0 }) { pending.waiters.append(waiter) }
            tracks[track].requested[original] = pending
            return false
        }
        // Bounded: answers that never come are forgotten once expired, and at most a cache's worth is kept.
        if tracks[track].requested.count >= settings.packetCacheCapacity {
            tracks[track].requested = tracks[track].requested.filter { $0.value.until > now }
            guard tracks[track].requested.count < settings.packetCacheCapacity else { return false }
        }
        let timeout = upstream != nil ? settings.upstreamRetransmissionTimeout : settings.publisherRetransmissionTimeout
        tracks[track].requested[original] = RelayRouter.Requested(until: now &+ timeout, waiters: [waiter])
        return true
    }

    func videoTrack(ssrc: UInt32) -> Int? {
        guard let index = trackIndex(ssrc: ssrc), tracks[index].throttle != nil else { return nil }
        return index
    }

    /// Keeps a subscriber's report blocks for aggregation and feeds its audio-only fallback (or,
    /// for a simulcast viewer, its layer choice); returns the keyframe requests that needs.
    mutating func record(_ blocks: [RTCPReportBlock], slot: Int, now: UInt64, _ state: inout RouterState) -> [Action] {
        var actions: [Action] = []
        for block in blocks {
            guard let index = trackIndex(ssrc: block.ssrc) else { continue }
            subscribers[slot].reports[block.ssrc] = RelayRouter.SubscriberReport(block: block, arrival: now)
            if !subscribers[slot].isEdge { state.counters.viewerLoss.record(Double(block.fractionLost) / 256) }
            if let target = subscribers[slot].simulcast?.switcher.target, block.ssrc == layerSSRC {
                // Losses of the layer it is sent: measured on the viewer's own leg.
                let sent = subscribers[slot].simulcast?.switcher.current ?? 0
                let legLoss = tracks[layers[sent]].publisherLegLoss
                if let lower = subscribers[slot].simulcast?.selector.report(block, publisherLegLoss: legLoss, current: target, now: now),
                   lower != target {
                    subscribers[slot].simulcast?.switcher.target = lower
                    state.layersChanged = true
                }
                if let action = chooseLayer(slot: slot, now: now, &state) { actions.append(action) }
                continue
            }
            if let viewer = subscribers[slot].scalable, index == layeredTrack {
                // Losses of the layers it is sent: measured on the viewer's own leg.
                let target = LayerPoint.ladder.firstIndex(of: viewer.forwarder.target) ?? 0
                if let lower = subscribers[slot].scalable?.selector.report(block, publisherLegLoss: tracks[index].publisherLegLoss,
                                                                            current: target, now: now), lower != target {
                    subscribers[slot].scalable?.forwarder.target = LayerPoint.ladder[lower]
                    state.layersChanged = true
                }
                if let action = chooseLayered(slot: slot, now: now, &state) { actions.append(action) }
                continue
            }
            guard subscribers[slot].gate != nil else { continue }
            let change: VideoGate.Change?
            if tracks[index].throttle != nil {
                let legLoss = tracks[index].publisherLegLoss
                change = subscribers[slot].gate?.videoReport(block, publisherLegLoss: legLoss, now: now)
            } else {
                change = subscribers[slot].gate?.audioReport(block, now: now)
            }
            guard let change else { continue }
            let subscriberId = subscribers[slot].id
            switch change {
            case .suspended:
                // Until now it was sent everything as it was: its numbering continues from there.
                subscribers[slot].gate?.adoptLastSent(tracks[index].lastForwarded)
                state.counters.videoSuspensions += 1
                state.videoEvents.append(SubscriberVideoEvent(streamId: id, subscriberId: subscriberId, suspended: true))
            case .probing:
                state.counters.videoProbes += 1
                for video in tracks.indices where tracks[video].throttle != nil {
                    if let action = requestKeyframe(track: video, kind: .pli, now: now, &state) { actions.append(action) }
                }
            case .probeFailed:
                break
            case .resumed:
                state.counters.videoResumptions += 1
                state.videoEvents.append(SubscriberVideoEvent(streamId: id, subscriberId: subscriberId, suspended: false))
            }
        }
        return actions
    }
}
