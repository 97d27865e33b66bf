/// The playout delay a receiver chooses for itself, as libwebrtc's jitter buffers do: long enough
/// for the packets that come latest (the path's jitter, a frame's packets spread by a capped
/// link), plus, once packets have gone missing, room for their retransmissions; no longer. A pure
/// state machine, fed each packet's arrival and RTP timestamp and the time.
///
/// - **Jitter.** A packet's transit (arrival − its RTP timestamp, in seconds) less the smallest
///   transit of its stream over ``Settings/baselineWindow`` is how late it came; the target covers
///   the latest packet of the last ``Settings/jitterWindow``.
/// - **Repairs.** While packets were lost repeatedly within ``Settings/lossMemory``
///   (``LossRecovery/repeatedLoss``), the target adds the time their repair takes
///   (``target(repairRoom:repeatedLoss:now:)``: the reordering allowance and a few round trips,
///   from ``LossRecovery``).
/// - **Smooth changes.** The delay rises to its target at once (the picture waits once, for that
///   long, rather than dropping late frames again) and falls by at most ``Settings/fallStep`` every
///   ``Settings/updateInterval``: a frame shown 2 ms early is not seen, an audio skip of 2 ms barely
///   heard.
/// - **Bounds.** The application's, always.
struct AdaptivePlayoutDelay: Sendable {
    struct Settings: Sendable, Equatable {
        var bounds: ClosedRange<Duration>
        var initial: Duration
        /// Long enough to hold a rare late packet (one overtaken on a path that reorders 1 % of
        /// them) until the next: with 2 s, the delay fell between them and frames went missing.
        var jitterWindow: Duration = .seconds(5)
        var baselineWindow: Duration = .seconds(10)
        var lossMemory: Duration = .seconds(10)
        var updateInterval: Duration = .milliseconds(250)
        var fallStep: Duration = .milliseconds(2)
        /// Added to the jitter: the decoder and the sinks' own scheduling.
        var margin: Duration = .milliseconds(4)
        /// The jitter is covered with this much to spare: a packet later than any of the last
        /// seconds (one overtaken on a jittery path, late by both) is still in time. At 1.0, a
        /// path with 20 ms of jitter reordering 1 % lost two frames in 240 that way.
        var jitterHeadroom = 1.25
        /// How long after the first packet the delay first moves (see ``update(repairRoom:repeatedLoss:now:)``).
        var settleTime: Duration = .seconds(1)
        /// How long after the first packet lateness is not counted (the packets still set the
        /// baseline): the receiver's own start (its decoders and sinks starting on the same two
        /// cores) made packets of a path with 20 ms of jitter 65 to 85 ms late in its first half
        /// second, and the delay rose to 300 ms for the rest of the session's first minute.
        var startupGrace: Duration = .milliseconds(500)
    }

    /// One bucket of ``Settings/updateInterval``: the latest packet's lateness, and per stream the
    /// smallest transit seen in it.
    private struct Bucket {
        var start: Duration
        var latest: Duration = .zero
        var smallestTransit: [UInt8: Duration] = [:]
    }

    let settings: Settings
    private(set) var current: Duration
    private var buckets: [Bucket] = []
    /// Per stream, the smallest transit of the buckets before the latest (recomputed when a bucket
    /// starts, so each packet compares with two values, not with every bucket of the baseline window).
    private var earlierSmallest: [UInt8: Duration] = [:]
    private var lastUpdate: Duration?
    private var firstArrival: Duration?
    /// Per stream: the extended RTP timestamp of its latest packet (timestamps wrap at 2³²).
    private var extended: [UInt8: (last: UInt32, cycles: Int64)] = [:]

    init(settings: Settings) {
        self.settings = settings
        current = min(max(settings.initial, settings.bounds.lowerBound), settings.bounds.upperBound)
    }

    /// How late the latest packet of the jitter window came. (Passing over a single bucket's
    /// spike was tried: the packets overtaken on a reordering path are such spikes, and came too
    /// late to be played.)
    var jitter: Duration { buckets.suffix(windowBuckets).map(\.latest).max() ?? .zero }

    private var windowBuckets: Int { max(1, Int(settings.jitterWindow / settings.updateInterval)) }

    /// A packet of stream `stream` (its payload type) with RTP timestamp `timestamp` arrived at `now`.
    mutating func arrived(stream: UInt8, timestamp: UInt32, clockRate: Int, now: Duration) {
        guard clockRate > 0 else { return }
        if firstArrival == nil { firstArrival = now }
        var state = extended[stream] ?? (timestamp, 0)
        let delta = Int64(Int32(bitPattern: timestamp &- state.last))
        if delta.magnitude > UInt64(clockRate) * UInt64(Self.largestTimestampStep) {
            // Another timeline: a simulcast viewer switched to a layer whose timestamps start
            // elsewhere (a browser's layers each have their own), or the sender restarted. Its
            // transits start a new baseline. (Counted as wraps, such jumps once overflowed the
            // media time and crashed the receiver.)
            state = (timestamp, 0)
            forget(stream)
        }
        var cycles = state.cycles
        if delta > 0 {
            if timestamp < state.last { state.cycles += 1 }
            state.last = timestamp
            cycles = state.cycles
        } else if delta < 0, timestamp > state.last {
            cycles = state.cycles - 1  // a late packet from before the latest wrap
        }
        extended[stream] = state
        let media = Duration.seconds((Double(cycles) * 4_294_967_296 + Double(timestamp)) / Double(clockRate))
        let transit = now - media
        if buckets.last.map({ now >= $0.start + settings.updateInterval }) ?? true {
            buckets.append(Bucket(start: now))
            let keep = max(windowBuckets, Int(settings.baselineWindow / settings.updateInterval))
            if buckets.count > keep { buckets.removeFirst(buckets.count - keep) }
            earlierSmallest = [:]
            for bucket in buckets.dropLast() {
                earlierSmallest.merge(bucket.smallestTransit, uniquingKeysWith: min)
            }
        }
        let last = buckets.count - 1
        buckets[last].smallestTransit[stream] = min(buckets[last].smallestTransit[stream] ?? transit, transit)
        let baseline = min(earlierSmallest[stream] ?? transit, buckets[last].smallestTransit[stream]!)
        if let first = firstArrival, now >= first + settings.startupGrace {
            buckets[last].latest = max(buckets[last].latest, transit - baseline)
        }
    }

    /// A step of more seconds than this between a stream's timestamps starts a new timeline.
    static let largestTimestampStep: Int64 = 10

    /// Drops what was measured of `stream`'s transits (its timeline changed).
    private mutating func forget(_ stream: UInt8) {
        for index in buckets.indices { buckets[index].smallestTransit[stream] = nil }
        earlierSmallest[stream] = nil
    }

    /// The delay the receiver would want now: the jitter with its headroom, the margin, and `repairRoom` when the
    /// latest few losses began within the loss memory (`repeatedLoss`), within the bounds.
    func target(repairRoom: Duration, repeatedLoss: Duration?, now: Duration) -> Duration {
        var target = jitter * settings.jitterHeadroom + settings.margin
        if let repeatedLoss, now - repeatedLoss < settings.lossMemory { target += repairRoom }
        return min(max(target, settings.bounds.lowerBound), settings.bounds.upperBound)
    }

    /// Moves the delay towards the target every update interval; returns the new delay when it
    /// changed (by a millisecond or more).
    mutating func update(repairRoom: Duration, repeatedLoss: Duration?, now: Duration) -> Duration? {
        if let lastUpdate, now < lastUpdate + settings.updateInterval { return nil }
        guard let first = firstArrival, now >= first + settings.settleTime else { return nil }
        lastUpdate = now
        let target = target(repairRoom: repairRoom, repeatedLoss: repeatedLoss, now: now)
        let next = target > current ? target : max(target, current - settings.fallStep)
        guard abs(next - current) >= .milliseconds(1) else { return nil }
        current = next
        return next
    }
}

private func abs(_ duration: Duration) -> Duration { duration < .zero ? .zero - duration : duration }
