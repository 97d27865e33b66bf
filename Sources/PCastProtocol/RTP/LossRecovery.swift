import Foundation

/// What a receiver does about the missing packets of one RTP stream, as libwebrtc's NACK module
/// and keyframe requester do it: a pure state machine, fed the packets' sequence numbers and the
/// time, that says when to send a NACK and when to ask for a keyframe.
///
/// - **NACKs only for real gaps.** A sequence number is missing only once a later one has arrived
///   (jitter that keeps the order never makes a gap, however long it is). It is asked for after a
///   reordering allowance (a packet overtaken on the path arrives without being asked for), then
///   again every round trip, until its deadline (the playout delay after it went missing).
/// - **The reordering allowance learns** from packets that arrived late without being asked for:
///   1.25 × the latest such lateness beyond the path's jitter, halved after each quiet
///   ``Settings/reorderMemory``, never under ``Settings/minimumReorderAllowance``, plus the path's
///   jitter (``Event/pathJitter(_:)``: a packet overtaken on a jittery path comes later by its
///   own jitter too). It starts at ``Settings/initialReorderAllowance``, so a path that reorders
///   from its first packets is not taken for lossy.
/// - **The round trip** is measured from a NACK's first (only) send to the packet's arrival
///   (Karn's rule: a packet asked for twice gives no sample).
/// - **No freeze waits for the natural keyframe.** A video packet still missing at its deadline
///   cannot be played in time, and the depayloader says when it needs a keyframe (a packet that
///   came too late for the jitter buffer, a gap): one is asked for at once, and again every
///   ``keyframeRetryInterval`` until a complete keyframe leaves the depayloader (a request or its
///   answer lost on the way would otherwise leave the picture frozen until the encoder's next
///   one). A need felt just after a keyframe's first packet arrived (a receiver starting on the
///   keyframe its join brought) waits that interval for it to complete. And as libwebrtc's
///   receive stream does, a decoder that has made no frame for ``Settings/stallTimeout`` while
///   frames kept arriving asks for one, whatever the cause.
public struct LossRecovery: Sendable {
    public struct Settings: Sendable, Equatable {
        public var initialReorderAllowance: Duration = .milliseconds(25)
        public var minimumReorderAllowance: Duration = .milliseconds(3)
        public var reorderMemory: Duration = .seconds(5)
        /// The round trip assumed before the first sample.
        public var initialRoundTrip: Duration = .milliseconds(30)
        /// The shortest time between two NACKs of one packet (on a short path, 1.25 round trips
        /// are less: the receiver's timer ticks every 5 ms).
        public var minimumRetryInterval: Duration = .milliseconds(5)
        /// The shortest time between two keyframe requests while one is awaited.
        public var minimumKeyframeRetry: Duration = .milliseconds(150)
        /// A jump of more sequence numbers than this is a restart of the sender's numbering, not a loss.
        public var largestGap = 1_000
        /// Whether keyframes are asked for (video).
        public var requestsKeyframes = true
        /// How long frames may arrive without any being decoded before a keyframe is asked for.
        public var stallTimeout: Duration = .milliseconds(200)
        /// How many losses make ``LossRecovery/repeatedLoss``.
        public var lossesForRepairRoom = 3
        /// The longest reordering allowance, whatever was learnt (duplicates teach it, and a
        /// forged one costs no more than this).
        public var maximumReorderAllowance: Duration = .seconds(1)
        /// The share of tries assumed to fail before any repair was seen (``tryFailure``).
        public var assumedTryFailure = 0.1
        /// The share of lost packets the repair room may leave unrepaired: it holds as many
        /// tries as make the chance that all of them fail this small (``triesForRepair``).
        public var unrepairedTarget = 1e-4
        /// The most tries the repair room holds.
        public var maximumTries = 8

        public init() {}
    }

    public enum Event: Sendable, Equatable {
        /// A packet arrived; `keyframe` when it starts a keyframe (its parameter sets or IDR slice).
        case packet(sequence: UInt16, keyframe: Bool)
        /// The deadline of missing packets (the playout delay in effect) changed.
        case deadline(Duration)
        /// The depayloader or decoder asked for a keyframe.
        case keyframeNeeded
        /// A complete keyframe left the depayloader.
        case keyframeComplete
        /// Frames so far: whose packets reached the depayloader, and that left the decoder.
        case frames(received: Int, decoded: Int)
        /// The path's jitter as measured (the latest packet's lateness of the last seconds).
        case pathJitter(Duration)
        /// Time passed (see ``nextWake``).
        case tick
        /// These packets were asked for by other means (a relay passing a subscriber's NACK
        /// upstream): they count as asked now, so their arrival is an answer, not a packet
        /// overtaken on the path (taken for one, it grew the reordering allowance past the
        /// subscribers' own requests), and the next request waits a retry interval.
        case requested([UInt16])
    }

    public enum Action: Sendable, Equatable {
        /// Ask for these packets again (one generic NACK).
        case nack([UInt16])
        /// Ask for a keyframe (a PLI).
        case requestKeyframe
    }

    private struct Missing {
        var noticed: Duration
        var lastAsked: Duration?
        var asks = 0
    }

    public let settings: Settings
    private var deadline: Duration
    private var highest: Int?
    private var missing: [Int: Missing] = [:]
    /// Packets asked for once that came, kept for a deadline: when which went missing and when
    /// it came. A copy of one arriving after it says the first was the packet itself, overtaken
    /// on the path (the answer to the request is the copy): the allowance learns from it as from
    /// a packet that came unasked. (Without it, a packet overtaken by more than the allowance was
    /// asked for, taken for answered, and every later one was asked for too.)
    private var answered: [Int: (noticed: Duration, arrived: Duration)] = [:]
    private var learnedReorder: Duration
    private var pathJitter: Duration = .zero
    private var lastReorderChange: Duration?
    private var smoothedRoundTrip: Duration?
    private var awaitingKeyframeSince: Duration?
    private var nextKeyframeRequest: Duration?
    private var lastKeyframePacket: Duration?
    /// The decoder's progress: its count of frames, and when it last grew, with the frames
    /// received then.
    private var decodedFrames = 0
    private var decodedAt: Duration?
    private var receivedAtDecode = 0
    /// The extended sequence number of the latest keyframe's first packet.
    private var latestKeyframe: Int?

    /// Sequence numbers asked for (each NACK counts every number it names), packets that arrived
    /// late without being asked for, packets given up at their deadline, keyframes asked for.
    public private(set) var nacked = 0
    public private(set) var reordered = 0
    public private(set) var expired = 0
    public private(set) var keyframesRequested = 0
    /// When the latest ``Settings/lossesForRepairRoom`` losses began (the time of the earliest of
    /// them); nil before there were that many. A loss is a packet asked for (its first request)
    /// or given up unasked, not one overtaken within the reordering allowance. The playout delay
    /// makes room for repairs while they are recent: counting every gap raised a viewer's delay
    /// to 180 ms on a path that only reordered by 20 ms, and a single packet taken for lost (one
    /// overtaken by more than the allowance) did it for 10 s. libwebrtc's jitter estimate adds
    /// the round trip likewise only after three frames needed NACKs.
    public var repeatedLoss: Duration? {
        recentLosses.count >= settings.lossesForRepairRoom ? recentLosses.first : nil
    }
    /// The times of the latest losses, oldest first (at most ``Settings/lossesForRepairRoom``).
    private var recentLosses: [Duration] = []
    /// Whether the latest packet was one asked for again (a retransmission: its lateness is the
    /// repair's, not the path's jitter).
    public private(set) var latestWasRepair = false
    /// The share of first requests whose packet had not come when the next try was due (the
    /// request or its answer lost on the way), smoothed over about the latest 32 repairs. At 10 %
    /// loss each way it is about 0.19.
    public private(set) var tryFailure: Double

    public init(settings: Settings = Settings(), deadline: Duration) {
        self.settings = settings
        self.deadline = deadline
        learnedReorder = settings.initialReorderAllowance
        tryFailure = min(max(settings.assumedTryFailure, 0.001), 0.9)
    }

    /// How long a missing packet is waited for before it is asked for.
    /// At most the deadline less 10 ms, so one request and its answer still fit (a short fixed
    /// playout delay on a loaded machine had an allowance past its deadline: nothing was asked for).
    public var reorderAllowance: Duration {
        min(max(settings.minimumReorderAllowance, learnedReorder * 1.25) + pathJitter,
            max(settings.minimumReorderAllowance, deadline - .milliseconds(10)), settings.maximumReorderAllowance)
    }
    /// The round trip, measured (or assumed before the first sample).
    public var roundTrip: Duration { smoothedRoundTrip ?? settings.initialRoundTrip }
    /// The time between two NACKs of one packet.
    /// (Its floor is at most a quarter of the deadline: a 12 ms fixed delay gets its tries 3 ms apart.)
    public var retryInterval: Duration { max(min(settings.minimumRetryInterval, deadline / 4), roundTrip * 1.25) }
    public var keyframeRetryInterval: Duration { max(settings.minimumKeyframeRetry, roundTrip * 2) }
    public var isAwaitingKeyframe: Bool { awaitingKeyframeSince != nil }
    public var missingCount: Int { missing.count }

    /// When ``handle(_:now:)`` with `.tick` next has something to do; nil when nothing is pending.
    public var nextWake: Duration? {
        var wake: Duration?
        for entry in missing.values {
            let due = entry.lastAsked.map { $0 + retryInterval } ?? entry.noticed + reorderAllowance
            let at = min(due, entry.noticed + deadline)
            wake = min(wake ?? at, at)
        }
        if let at = nextKeyframeRequest, awaitingKeyframeSince != nil { wake = min(wake ?? at, at) }
        return wake
    }

    public mutating func handle(_ event: Event, now: Duration) -> [Action] {
        switch event {
        case .deadline(let value):
            deadline = value
            return []
        case .pathJitter(let value):
            pathJitter = max(.zero, value)
            return []
        case .packet(let sequence, let keyframe):
            let extended = arrived(sequence, now: now)
            if keyframe {
                latestKeyframe = max(latestKeyframe ?? extended, extended)
                lastKeyframePacket = now
                // Give it time to complete before asking again.
                if awaitingKeyframeSince != nil { nextKeyframeRequest = max(nextKeyframeRequest ?? now, now + keyframeRetryInterval) }
            }
            return due(now: now)
        case .keyframeNeeded:
            guard settings.requestsKeyframes, awaitingKeyframeSince == nil else { return [] }
            awaitingKeyframeSince = now
            if let arrived = lastKeyframePacket, now < arrived + keyframeRetryInterval {
                nextKeyframeRequest = arrived + keyframeRetryInterval
            } else {
                nextKeyframeRequest = now
            }
            return due(now: now)
        case .keyframeComplete:
            awaitingKeyframeSince = nil
            nextKeyframeRequest = nil
            return []
        case .frames(let received, let decoded):
            if decoded != decodedFrames || decodedAt == nil {
                decodedFrames = decoded
                decodedAt = now
                receivedAtDecode = received
                return due(now: now)
            }
            // Stalled: three frames or more came since the decoder last made one, and it has been a while.
            if let decodedAt, now >= decodedAt + settings.stallTimeout, received >= receivedAtDecode + 3 {
                self.decodedAt = now
                receivedAtDecode = received
                return handle(.keyframeNeeded, now: now) + due(now: now)
            }
            return due(now: now)
        case .tick:
            if !answered.isEmpty { answered = answered.filter { now - $0.value.arrived < deadline } }
            return due(now: now)
        case .requested(let sequences):
            guard let highest else { return [] }
            for sequence in sequences {
                let extended = Self.extend(sequence, near: highest)
                guard let entry = missing[extended] else { continue }
                if entry.asks == 0 { noteLoss(now) }
                missing[extended]!.asks += 1
                missing[extended]!.lastAsked = now
            }
            return []
        }
    }

    /// `sequence` extended to the value nearest `highest` (sequence numbers wrap at 65,536).
    private static func extend(_ sequence: UInt16, near highest: Int) -> Int {
        var extended = (highest & ~0xFFFF) | Int(sequence)
        if extended - highest > 32_768 { extended -= 65_536 } else if highest - extended > 32_768 { extended += 65_536 }
        return extended
    }

    /// Notes an arrival; returns its extended sequence number.
    private mutating func arrived(_ sequence: UInt16, now: Duration) -> Int {
        latestWasRepair = false
        if let lastChange = lastReorderChange, now - lastChange >= settings.reorderMemory {
            learnedReorder = learnedReorder / 2
            lastReorderChange = now
        } else if lastReorderChange == nil {
            lastReorderChange = now
        }
        guard let highest else {
            self.highest = Int(sequence)
            return Int(sequence)
        }
        let extended = Self.extend(sequence, near: highest)
        if extended > highest {
            if extended - highest > settings.largestGap {
                missing.removeAll()
            } else {
                for gap in (highest + 1)..<extended { missing[gap] = Missing(noticed: now) }
            }
            self.highest = extended
            return extended
        }
        guard let entry = missing.removeValue(forKey: extended) else {
            // A duplicate, or too old. The copy of a packet asked for once: it was overtaken.
            if let first = answered.removeValue(forKey: extended), now - first.arrived < deadline {
                reordered += 1
                learnedReorder = max(learnedReorder, first.arrived - first.noticed - pathJitter)
                lastReorderChange = now
            }
            return extended
        }
        if entry.asks == 0 {
            // Overtaken on the path, not lost: the allowance grows to cover it.
            reordered += 1
            learnedReorder = max(learnedReorder, now - entry.noticed - pathJitter)
            lastReorderChange = now
        } else {
            latestWasRepair = true
            // Answered after one request: a try that worked, and a round trip to learn from.
            if entry.asks == 1 {
                answered[extended] = (entry.noticed, now)
                noteTry(failed: false)
                if let asked = entry.lastAsked {
                    let sample = now - asked
                    smoothedRoundTrip = smoothedRoundTrip.map { $0 * 0.875 + sample * 0.125 } ?? sample
                }
            }
        }
        return extended
    }

    /// A first request's outcome: answered before the next try, or not.
    private mutating func noteTry(failed: Bool) {
        tryFailure += ((failed ? 1 : 0) - tryFailure) / 32
        tryFailure = min(max(tryFailure, 0.001), 0.9)
    }

    private mutating func noteLoss(_ now: Duration) {
        recentLosses.append(now)
        if recentLosses.count > settings.lossesForRepairRoom { recentLosses.removeFirst(recentLosses.count - settings.lossesForRepairRoom) }
    }

    private mutating func due(now: Duration) -> [Action] {
        var ask: [Int] = []
        var gaveUp = false
        for (sequence, entry) in missing {
            if now >= entry.noticed + deadline {
                missing[sequence] = nil
                expired += 1
                if entry.asks == 0 { noteLoss(now) }
                if entry.asks == 1 { noteTry(failed: true) }
                // One before a keyframe that has arrived costs nothing after it.
                if latestKeyframe.map({ sequence > $0 }) ?? true { gaveUp = true }
                continue
            }
            let due = entry.lastAsked.map { $0 + retryInterval } ?? entry.noticed + reorderAllowance
            if now >= due {
                missing[sequence]!.lastAsked = now
                missing[sequence]!.asks += 1
                if entry.asks == 0 { noteLoss(now) }
                if entry.asks == 1 { noteTry(failed: true) }
                ask.append(sequence)
            }
        }
        var actions: [Action] = []
        if !ask.isEmpty {
            nacked += ask.count
            actions.append(.nack(ask.sorted().map { UInt16(truncatingIfNeeded: $0) }))
        }
        guard settings.requestsKeyframes else { return actions }
        if gaveUp && awaitingKeyframeSince == nil {
            awaitingKeyframeSince = now
            nextKeyframeRequest = now
        }
        if awaitingKeyframeSince != nil, let at = nextKeyframeRequest, now >= at {
            nextKeyframeRequest = now + keyframeRetryInterval
            keyframesRequested += 1
            actions.append(.requestKeyframe)
        }
        return actions
    }
}

extension LossRecovery {
    /// Tries that leave at most ``Settings/unrepairedTarget`` of the lost packets unrepaired when
    /// each fails with ``tryFailure``'s chance, from 2 to ``Settings/maximumTries``. At 10 % loss
    /// each way a try fails one time in five: six tries; four left one lost packet in 750
    /// unrepaired, about one a run of the latency bench, and a 133 ms freeze when it happened.
    /// At 2 % loss, three.
    public var triesForRepair: Int {
        let tries = (log(settings.unrepairedTarget) / log(tryFailure)).rounded(.up)
        return min(max(2, Int(tries)), max(2, settings.maximumTries))
    }

    /// The time a lost packet's repair takes: the reordering allowance, the first request's round
    /// trip and the retries ``triesForRepair`` counts.
    public var repairRoom: Duration { reorderAllowance + roundTrip + retryInterval * (triesForRepair - 1) }
}
