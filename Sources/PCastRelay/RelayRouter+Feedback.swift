import PCastProtocol
import PCastContracts

// RTCP through the router: publishers' sender reports, and subscribers' reports, NACKs and
// keyframe requests (answered from the cache, asked upstream, coalesced), with the audio-only
// fallback their reports drive.

extension RelayRouter {
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
    mutating func askOrigin(stream: Int, track: Int, original: UInt16, waiter: (rtcpSSRC: UInt32, sequence: UInt16, ssrc: UInt32?), now: UInt64) -> Bool {
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

    func videoTrack(stream: Int, ssrc: UInt32) -> Int? {
        guard let index = streams[stream]?.trackIndex(ssrc: ssrc), streams[stream]!.tracks[index].throttle != nil else { return nil }
        return index
    }

    /// Keeps a subscriber's report blocks for aggregation and feeds its audio-only fallback;
    /// returns the keyframe request a probe needs.
    mutating func record(_ blocks: [RTCPReportBlock], stream: Int, slot: Int, now: UInt64) -> [RelayAction<Context>] {
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
}
