import PCastProtocol
import PCastContracts

// A stream's keyframe requests (throttled, a joining viewer's asked again) and the relay's own
// RTCP to its publisher: feedback compounds and the periodic receiver report.

extension RelayRouter.Stream {
    /// A keyframe request for `track` to the publisher, through the track's throttle: nil when the
    /// throttle holds it (its window's end is then a deadline the timer wakes for) or the
    /// publisher's address is not known (its first frame is a keyframe anyway).
    mutating func requestKeyframe(track: Int, kind: KeyframeThrottle.Kind, now: UInt64, _ state: inout RouterState) -> Action? {
        guard let address = publisher.address else { return nil }
        guard let send = tracks[track].throttle?.request(kind, now: now) else {
            if let due = tracks[track].throttle?.deadline { state.keyframeDeadline = min(state.keyframeDeadline ?? due, due) }
            return nil
        }
        return keyframeAction(track: track, kind: send, to: address, context: publisher.context, &state)
    }

    /// The PLI or FIR for `track`, to the publisher at `address`.
    mutating func keyframeAction(
        track: Int, kind: KeyframeThrottle.Kind, to address: RelayAddress, context: Context, _ state: inout RouterState
    ) -> Action? {
        let ssrc = tracks[track].wireSSRC
        let packet: RTCPPacket
        switch kind {
        case .pli:
            packet = .pictureLossIndication(RTCPPictureLossIndication(senderSSRC: localSSRC(state.settings), mediaSSRC: ssrc))
        case .fir:
            let sequence = tracks[track].firSequence
            tracks[track].firSequence &+= 1
            packet = .fullIntraRequest(RTCPFullIntraRequest(
                senderSSRC: localSSRC(state.settings), mediaSSRC: 0, entries: [.init(ssrc: ssrc, sequenceNumber: sequence)]))
        }
        guard let bytes = feedback([packet], state.settings) else { return nil }
        state.counters.keyframeRequests += 1
        return .toPublisher(context, address, rtcp: bytes)
    }

    /// Feedback the relay sends on its own, as a compound packet led by an empty receiver report
    /// (RFC 4585 §3.1): feedback-only RTCP is dropped by receivers that do not do reduced-size
    /// RTCP, GStreamer's among them.
    func feedback(_ packets: [RTCPPacket], _ settings: RouterSettings) -> [UInt8]? {
        try? RTCPCompoundPacket(packets: [.receiverReport(RTCPReceiverReport(ssrc: localSSRC(settings)))] + packets).serialized()
    }

    /// Asks again for the keyframe of viewers still waiting for their first one after
    /// ``RouterTiming/joinKeyframeWait`` (the request or its answer was lost).
    mutating func askJoinKeyframesAgain(now: UInt64, _ state: inout RouterState) -> [Action] {
        var actions: [Action] = []
        for slot in subscribers.indices {
            guard let asked = subscribers[slot].awaitingKeyframe else { continue }
            var next = asked &+ RouterTiming.joinKeyframeWait
            if now >= next {
                subscribers[slot].awaitingKeyframe = now
                next = now &+ RouterTiming.joinKeyframeWait
                // Held by the throttle when one is on its way: it answers this viewer too.
                for index in tracks.indices where tracks[index].carriesParameterSets {
                    if let action = requestKeyframe(track: index, kind: .pli, now: now, &state) { actions.append(action) }
                }
            }
            state.joinDeadline = min(state.joinDeadline ?? .max, next)
        }
        return actions
    }

    /// The coalesced keyframe requests whose throttle window ended.
    mutating func dueKeyframeRequests(now: UInt64, _ state: inout RouterState) -> [Action] {
        var actions: [Action] = []
        for index in tracks.indices {
            let kind = tracks[index].throttle?.due(now: now)
            if let due = tracks[index].throttle?.deadline { state.keyframeDeadline = min(state.keyframeDeadline ?? due, due) }
            guard let kind, let address = publisher.address else { continue }
            if let action = keyframeAction(track: index, kind: kind, to: address, context: publisher.context, &state) {
                actions.append(action)
            }
        }
        return actions
    }

    /// The relay's receiver report to the publisher: one block per SSRC the relay has received.
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
    mutating func receiverReport(now: UInt64, _ state: inout RouterState) -> Action? {
        guard let address = publisher.address else { return nil }
        let settings = state.settings
        var blocks: [RTCPReportBlock] = []
        for index in tracks.indices where tracks[index].reception.started {
            let ssrc = tracks[index].description.ssrc
            var block = tracks[index].reception.reportBlock(ssrc: tracks[index].wireSSRC, now: now)
            tracks[index].publisherLegLoss = Double(block.fractionLost) / 256
            for subscriber in subscribers {
                guard let report = subscriber.reports[ssrc], now &- report.arrival <= settings.subscriberReportLifetime,
                      subscriber.counts(report, on: tracks[index])
                else { continue }
                block.fractionLost = max(block.fractionLost, report.block.fractionLost)
                block.cumulativeLost = max(block.cumulativeLost, report.block.cumulativeLost)
                block.jitter = max(block.jitter, report.block.jitter)
            }
            blocks.append(block)
        }
        let remb = remb(now: now, settings)
        guard !blocks.isEmpty || upstream != nil,
              let bytes = try? RTCPCompoundPacket(packets: [.receiverReport(RTCPReceiverReport(
                  ssrc: localSSRC(settings), reportBlocks: Array(blocks.prefix(31))))] + remb).serialized()
        else { return nil }
        if !remb.isEmpty { state.counters.rembsSent += 1 }
        return .toPublisher(publisher.context, address, rtcp: bytes)
    }
}
