import PCastProtocol
import PCastContracts

// The router's timers: a joining viewer's keyframe asked again, coalesced keyframe requests, the
// upstream NACKs that fell due and the relay's receiver reports to each publisher.

extension RelayRouter {
    /// When `tick` next has something to do.
    var nextDeadline: UInt64 {
        min(nextReport, state.keyframeDeadline ?? .max, state.joinDeadline ?? .max, state.recoveryDeadline ?? .max)
    }

    /// Asks again for the keyframe of viewers still waiting for their first one after
    /// ``RouterTiming/joinKeyframeWait`` (the request or its answer was lost), sends coalesced
    /// keyframe requests whose window ended, the upstream NACKs that fell due
    /// (``Track/recovery``) and, every report interval, one receiver report per publisher.
    mutating func tick(now: UInt64) -> [RelayAction<Context>] {
        var actions: [RelayAction<Context>] = []
        let handles = Array(streams.keys)
        if let due = state.joinDeadline, now >= due {
            state.joinDeadline = nil
            for handle in handles {
                actions += withStream(handle) { stream, state in stream.askJoinKeyframesAgain(now: now, &state) } ?? []
            }
        }
        state.keyframeDeadline = nil
        for handle in handles {
            actions += withStream(handle) { stream, state in stream.dueKeyframeRequests(now: now, &state) } ?? []
        }
        if let due = state.recoveryDeadline, now >= due {
            state.recoveryDeadline = nil
            for handle in handles {
                actions += withStream(handle) { stream, state in stream.recoverDue(now: now, &state) } ?? []
            }
        }
        if now >= nextReport {
            // Keep the cadence, but never try to catch up on missed intervals.
            nextReport = max(nextReport &+ settings.reportInterval, now &+ settings.reportInterval / 2)
            for handle in handles {
                if let action = receiverReport(stream: handle, now: now) { actions.append(action) }
                // Each point's measured rate moved: a scalable video's viewers choose again.
                actions += withStream(handle) { stream, state in stream.chooseLayeredAll(now: now, &state) } ?? []
            }
        }
        return actions
    }
}
