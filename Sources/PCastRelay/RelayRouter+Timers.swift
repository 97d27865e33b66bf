import PCastProtocol
import PCastContracts

// Keyframe requests (throttled, a joining viewer's asked again) and the router's timers: the
// upstream NACKs that fell due and the relay's receiver reports to each publisher.

extension RelayRouter {
    // MARK: Keyframes

    /// Whether a subscriber's keyframe requests are still those of a receiver starting on its join
    /// keyframe (see `subscriberRTCP`). A function: its copy of the subscriber ends with it.
    func isStarting(stream: Int, slot: Int, now: UInt64) -> Bool {
        let joining = streams[stream]!.subscribers[slot]
        return joining.heldAtJoin && now &- joining.joined < Self.joinKeyframeWait
            && (joining.awaitingKeyframe != nil || joining.joinKeyframeSent.map { now &- $0 < Self.joinRequestGrace } ?? true)
    }

    mutating func requestKeyframe(stream: Int, track: Int, kind: KeyframeThrottle.Kind, now: UInt64) -> RelayAction<Context>? {
        // Without the publisher's address there is nowhere to send it; its first frame is a keyframe anyway.
        guard let publisher = streams[stream]?.publisher, let address = publisher.address else { return nil }
        guard let send = streams[stream]!.tracks[track].throttle?.request(kind, now: now) else {
            if let due = streams[stream]!.tracks[track].throttle?.deadline { keyframeDeadline = min(keyframeDeadline ?? due, due) }
            return nil
        }
        return keyframeAction(stream: stream, track: track, kind: send, to: address, context: publisher.context)
    }

    mutating func keyframeAction(
        stream: Int, track: Int, kind: KeyframeThrottle.Kind, to address: RelayAddress, context: Context
    ) -> RelayAction<Context>? {
        let ssrc = streams[stream]!.tracks[track].wireSSRC
        let packet: RTCPPacket
        switch kind {
        case .pli:
            packet = .pictureLossIndication(RTCPPictureLossIndication(senderSSRC: localSSRC(stream), mediaSSRC: ssrc))
        case .fir:
            let sequence = streams[stream]!.tracks[track].firSequence
            streams[stream]!.tracks[track].firSequence &+= 1
            packet = .fullIntraRequest(RTCPFullIntraRequest(
                senderSSRC: localSSRC(stream), mediaSSRC: 0, entries: [.init(ssrc: ssrc, sequenceNumber: sequence)]))
        }
        guard let bytes = feedback([packet], stream: stream) else { return nil }
        counters.keyframeRequests += 1
        return .toPublisher(context, address, rtcp: bytes)
    }

    /// Feedback the relay sends on its own, as a compound packet led by an empty receiver report
    /// (RFC 4585 §3.1): feedback-only RTCP is dropped by receivers that do not do reduced-size
    /// RTCP, GStreamer's among them.
    func feedback(_ packets: [RTCPPacket], stream: Int) -> [UInt8]? {
        try? RTCPCompoundPacket(packets: [.receiverReport(RTCPReceiverReport(ssrc: localSSRC(stream)))] + packets).serialized()
    }

    // MARK: Timers

    /// When `tick` next has something to do.
    var nextDeadline: UInt64 {
        min(nextReport, keyframeDeadline ?? .max, joinDeadline ?? .max, recoveryDeadline ?? .max)
    }

    /// Asks again for the keyframe of viewers still waiting for their first one after
    /// ``joinKeyframeWait`` (the request or its answer was lost), sends coalesced keyframe requests
    /// whose window ended, the upstream NACKs that fell due (``Track/recovery``) and, every report
    /// interval, one receiver report per publisher.
    mutating func tick(now: UInt64) -> [RelayAction<Context>] {
        var actions: [RelayAction<Context>] = []
        let handles = Array(streams.keys)
        if let due = joinDeadline, now >= due {
            joinDeadline = nil
            for handle in handles {
                for slot in streams[handle]!.subscribers.indices {
                    guard let asked = streams[handle]!.subscribers[slot].awaitingKeyframe else { continue }
                    var next = asked &+ Self.joinKeyframeWait
                    if now >= next {
                        streams[handle]!.subscribers[slot].awaitingKeyframe = now
                        next = now &+ Self.joinKeyframeWait
                        // Held by the throttle when one is on its way: it answers this viewer too.
                        for index in streams[handle]!.tracks.indices where streams[handle]!.tracks[index].isH264 {
                            if let action = requestKeyframe(stream: handle, track: index, kind: .pli, now: now) { actions.append(action) }
                        }
                    }
                    joinDeadline = min(joinDeadline ?? .max, next)
                }
            }
        }
        keyframeDeadline = nil
        for handle in handles {
            for index in streams[handle]!.tracks.indices {
                let kind = streams[handle]!.tracks[index].throttle?.due(now: now)
                if let due = streams[handle]!.tracks[index].throttle?.deadline { keyframeDeadline = min(keyframeDeadline ?? due, due) }
                guard let kind, let address = streams[handle]!.publisher.address else { continue }
                if let action = keyframeAction(
                    stream: handle, track: index, kind: kind, to: address, context: streams[handle]!.publisher.context) {
                    actions.append(action)
                }
            }
        }
        if let due = recoveryDeadline, now >= due {
            recoveryDeadline = nil
            for handle in handles {
                for index in streams[handle]!.tracks.indices {
                    if let action = recover(.tick, stream: handle, track: index, now: now) { actions.append(action) }
                }
            }
        }
        if now >= nextReport {
            // Keep the cadence, but never try to catch up on missed intervals.
            nextReport = max(nextReport &+ settings.reportInterval, now &+ settings.reportInterval / 2)
            for handle in handles {
                if let action = receiverReport(stream: handle, now: now) { actions.append(action) }
            }
        }
        return actions
    }

    /// The relay's receiver report to a publisher: one block per SSRC the relay has received.
    ///
    /// Aggregation: the extended highest sequence number, LSR and DLSR describe the
    /// publisher→relay leg the relay measures itself (so the publisher's RTT is to the relay).
    /// Fraction lost, cumulative lost and jitter are the worst of that leg and of every
    /// subscriber's latest report for the SSRC from the last `subscriberReportLifetime`: sequence
    /// numbers pass through unchanged, so a subscriber's figures are end to end, and a publisher
    /// sending one encoding to everyone must fit its worst receiver. A subscriber whose video is
    /// held back (or being probed) by its audio-only fallback does not count for the video, nor
    /// does a video loss at which a subscriber falls back: one viewer that cannot take the video
    /// must not drag the encoding down for all the others.
    ///
    /// On an edge the report goes to the origin, with its figures raised to the edge's worst
    /// viewer's in the same way, so the publisher behind the origin fits the worst viewer of every
    /// edge; it is sent even before any media came, to open the leg (the origin learns the edge's
    /// address from it) and keep it open.
    mutating func receiverReport(stream handle: Int, now: UInt64) -> RelayAction<Context>? {
        guard let stream = streams[handle], let address = stream.publisher.address else { return nil }
        var blocks: [RTCPReportBlock] = []
        for index in stream.tracks.indices where stream.tracks[index].reception.started {
            let ssrc = stream.tracks[index].description.ssrc
            var block = streams[handle]!.tracks[index].reception.reportBlock(ssrc: stream.tracks[index].wireSSRC, now: now)
            streams[handle]!.tracks[index].publisherLegLoss = Double(block.fractionLost) / 256
            for subscriber in stream.subscribers {
                guard let report = subscriber.reports[ssrc], now &- report.arrival <= settings.subscriberReportLifetime,
                      subscriber.counts(report, on: stream.tracks[index])
                else { continue }
                block.fractionLost = max(block.fractionLost, report.block.fractionLost)
                block.cumulativeLost = max(block.cumulativeLost, report.block.cumulativeLost)
                block.jitter = max(block.jitter, report.block.jitter)
            }
            blocks.append(block)
        }
        let remb = remb(stream: handle, now: now)
        guard !blocks.isEmpty || stream.upstream != nil,
              let bytes = try? RTCPCompoundPacket(packets: [.receiverReport(RTCPReceiverReport(ssrc: localSSRC(handle), reportBlocks: Array(blocks.prefix(31))))] + remb).serialized()
        else { return nil }
        if !remb.isEmpty { counters.rembsSent += 1 }
        return .toPublisher(stream.publisher.context, address, rtcp: bytes)
    }
}
