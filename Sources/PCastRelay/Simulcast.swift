import PCastProtocol

/// Which encoding of a simulcast video one viewer is sent, and how its packets are rewritten so
/// that, whatever layer they come from, the viewer sees one video stream: one SSRC, continuous
/// sequence numbers. Timestamps need no rewriting: the layers of one picture share them.
///
/// A switch happens where the viewer can decode the new layer from scratch and has nothing half
/// done of the old one: at the first packet of a keyframe that carries its parameter sets (the
/// resolution changes with them), and only when the last packet sent ended a frame (a frame cut
/// short would be decoded as a corrupt picture). A keyframe that comes mid-frame is let pass; the
/// router asks for another.
///
/// Layers are indexed best first (0 is the largest encoding).
///
/// ```swift
/// var switcher = LayerSwitcher(target: 1)
/// let outgoing = switcher.forward(layer: 1, sequence: 812, marker: false) { startsWithSPS }   // nil: not sent
/// let (layer, original) = switcher.original(ofSent: nackedSequence)!
/// ```
struct LayerSwitcher: Sendable {
    /// The layer sent now; nil until its first keyframe.
    private(set) var current: Int?
    /// The layer to move to at its next keyframe (equal to `current` when settled).
    var target: Int
    /// Outgoing sequence number minus the layer's own, for the current layer.
    private var offset: UInt16 = 0
    /// The latest outgoing sequence number sent, and whether that packet ended a frame.
    private var lastSent: UInt16?
    private var atFrameEnd = true
    /// The outgoing sequence number where each recent layer began (newest last): NACKs of
    /// packets sent before a switch name another layer's packets.
    private var segments: [(layer: Int, start: UInt16, offset: UInt16)] = []
    private(set) var switches = 0

    static let remembered = 8

    init(target: Int) {
        self.target = target
    }

    /// Whether the viewer waits for a keyframe of `target` to switch.
    var isSwitching: Bool { current != target }

    /// The outgoing sequence number of a packet of `layer`, or nil when it is not sent.
    /// `startsWithParameterSets` is asked only while a switch to `layer` is due.
    mutating func forward(layer: Int, sequence: UInt16, marker: Bool, startsWithParameterSets: () -> Bool) -> UInt16? {
        if layer == target, layer != current, atFrameEnd, startsWithParameterSets() {
            offset = lastSent.map { ($0 &+ 1) &- sequence } ?? 0
            current = layer
            segments.append((layer, sequence &+ offset, offset))
            if segments.count > Self.remembered { segments.removeFirst() }
            if lastSent != nil { switches += 1 }
        }
        guard layer == current, let start = segments.last?.start else { return nil }
        let outgoing = sequence &+ offset
        // Older than the switch (reordered): in the viewer's numbering it belongs to the old layer.
        guard Int16(bitPattern: outgoing &- start) >= 0 else { return nil }
        if let last = lastSent, Int16(bitPattern: outgoing &- last) <= 0 { return outgoing }
        lastSent = outgoing
        atFrameEnd = marker
        return outgoing
    }

    /// Whether `sequence` is later than anything sent (nothing sent yet counts as ahead).
    func isAhead(_ sequence: UInt16) -> Bool {
        guard let last = lastSent else { return true }
        return Int16(bitPattern: sequence &- last) > 0
    }

    /// The layer and the layer's own sequence number of a packet sent as `sequence`; nil when it
    /// is older than what is remembered, or not sent yet.
    func original(ofSent sequence: UInt16) -> (layer: Int, sequence: UInt16)? {
        guard let last = lastSent, Int16(bitPattern: sequence &- last) <= 0 else { return nil }
        for segment in segments.reversed() where Int16(bitPattern: sequence &- segment.start) >= 0 {
            return (segment.layer, sequence &- segment.offset)
        }
        return nil
    }
}

/// Which layer a viewer should get: the best one that fits its budget, the lowest of its own
/// bandwidth limit and its estimate of its downlink (REMB: the SDK measures how fast a frame's
/// packets arrive once they queue behind each other; a browser sends its delay-based estimate).
///
/// - *Down* at once when the current layer no longer fits, or by one layer when a window of its
///   reports shows `lossDown` or more (its own leg's loss); after a loss nothing goes up for
///   `lossHold`.
/// - *Up* only when the better layer fits with `upHeadroom` to spare, and has for `upHold`.
/// - A viewer without a budget yet starts on the middle layer (on a constrained link the best
///   layer's keyframe alone could fill its queue), and without any estimate climbs after `upHold`
///   (a client that sends no REMB falls back on its losses).
///
/// A viewer whose estimate is bounded by what it receives (`probesUp`: a browser's REMB, a
/// receive-side delay-based estimate that never grows past about 1.5× its incoming rate) would
/// never show room for a layer larger than the one it is sent. For it the layers' measured rates
/// stand in for their declared bitrates, and:
/// - its estimate moves it *down* only when it signals congestion: it dropped by 10 %, or stayed
///   below the layer without rising for `flatTime` (a rising estimate is still catching up);
/// - when no better layer fits but the estimate has shown `probeRoom` over the current layer for
///   `probeHold`, it is moved *up* one layer (one that flows) as a probe; a move down (by estimate or loss) within
///   `probeWindow` of it means the link could not carry it, and the next probe waits
///   `probeBackoff`, doubled after each failure up to `probeBackoffLimit`.
struct LayerSelector: Sendable {
    struct Settings: Sendable, Equatable {
        var upHeadroom = 1.15
        var upHold: UInt64 = 1_000_000_000
        var lossDown = 0.10
        var lossHold: UInt64 = 8_000_000_000
        var estimateLifetime: UInt64 = 3_000_000_000
        var lossWindow: UInt64 = 1_000_000_000
        var flatTime: UInt64 = 3_000_000_000
        var probeRoom = 1.2
        var probeHold: UInt64 = 2_000_000_000
        var probeWindow: UInt64 = 30_000_000_000
        var probeBackoff: UInt64 = 8_000_000_000
        var probeBackoffLimit: UInt64 = 64_000_000_000
    }

    let settings: Settings
    /// Each layer's bitrate, best first (a scalable video's: each point's measured rate, set
    /// before each choice).
    var bitrates: [Int]
    /// Whether its estimate is bounded by what it receives (see the type's notes).
    let probesUp: Bool
    /// Each layer's measured rate, best first (0: not known, its bitrate stands in); read when
    /// `probesUp`.
    var measured: [Int] = []
    private var previousEstimate: Int?
    private var estimateRoseAt: UInt64 = 0
    private var estimateDropped = false
    /// The layer moved up to as a probe, and when.
    private(set) var probe: (layer: Int, since: UInt64)?
    private var roomSince: UInt64?
    private var nextProbe: UInt64 = 0
    private var probeBackoff: UInt64 = 0
    private(set) var limit: Int?
    private var estimate: (bitrate: Int, at: UInt64)?
    private var upSince: (layer: Int, at: UInt64)?
    private var holdUntil: UInt64 = 0
    private var losses = LossWindow()
    /// The layer the viewer asked to stay on, if any.
    private(set) var pinned: Int?
    /// The best layer worth sending for the size the viewer shows the video at (the smallest
    /// that fills it); nil: any.
    private(set) var sizeCap: Int?
    /// When the viewer was last moved down: the losses of the next windows are the layer it left.
    private var movedDownAt: UInt64?

    init(bitrates: [Int], settings: Settings = Settings(), probesUp: Bool = false) {
        self.bitrates = bitrates
        self.settings = settings
        self.probesUp = probesUp
        probeBackoff = settings.probeBackoff
    }

    /// Where a viewer starts.
    var initial: Int { bitrates.count / 2 }

    mutating func setLimit(_ bitsPerSecond: Int?) { limit = bitsPerSecond }

    /// Sends no layer better than `layer` (the smallest that fills the viewer's view; nil: any).
    mutating func setSizeCap(_ layer: Int?) {
        sizeCap = layer.map { min(max(0, $0), bitrates.count - 1) }
        upSince = nil
    }

    /// Whether sending `layer` is the link's doing: a better layer exists, the viewer did not pin
    /// this one, and neither its own limit nor the size it shows the video at would keep it there.
    func isHeldDown(_ layer: Int) -> Bool {
        guard layer > 0, pinned == nil else { return false }
        let allowed = limit.map { limit in bitrates.firstIndex { $0 <= limit } ?? bitrates.count - 1 } ?? 0
        return layer > max(allowed, sizeCap ?? 0)
    }

    /// Keeps the viewer on `layer` whatever its link (nil: adaptive again).
    mutating func pin(_ layer: Int?) {
        pinned = layer.map { min(max(0, $0), bitrates.count - 1) }
        upSince = nil
    }

    mutating func estimate(_ bitsPerSecond: Int, now: UInt64) {
        if let previous = previousEstimate {
            if bitsPerSecond > previous { estimateRoseAt = now }
            estimateDropped = Double(bitsPerSecond) < Double(previous) * 0.9
        } else {
            estimateRoseAt = now
        }
        previousEstimate = bitsPerSecond
        estimate = (bitsPerSecond, now)
    }

    /// A report block about the viewer's video; `publisherLegLoss` is what every viewer shares
    /// (lost before the relay). Returns the layer to go down to when the window lost too much.
    mutating func report(_ block: RTCPReportBlock, publisherLegLoss: Double, current: Int, now: UInt64) -> Int? {
        guard pinned == nil, let loss = losses.add(block, now: now, minimum: settings.lossWindow),
              loss - publisherLegLoss >= settings.lossDown else { return nil }
        holdUntil = now &+ settings.lossHold
        upSince = nil
        // Just moved down: these losses are the larger layer's, which the viewer has left.
        if let movedDownAt, now &- movedDownAt < 2 * settings.lossWindow { return nil }
        movedDownAt = now
        probeFailed(now: now)
        return min(current + 1, bitrates.count - 1)
    }

    /// A move down: a probe not long before it found the link could not carry its layer.
    private mutating func probeFailed(now: UInt64) {
        guard let started = probe?.since else { return }
        probe = nil
        roomSince = nil
        guard now &- started < settings.probeWindow else { return }
        nextProbe = now &+ probeBackoff
        probeBackoff = min(probeBackoff * 2, settings.probeBackoffLimit)
    }

    /// The layer to send given the one sent (or awaited) now.
    mutating func choose(current: Int, now: UInt64) -> Int {
        if let pinned { return pinned }
        if probesUp, let estimate, now &- estimate.at <= settings.estimateLifetime {
            return chooseProbing(current: current, estimate: estimate.bitrate, now: now)
        }
        var budget = limit ?? .max
        if let estimate, now &- estimate.at <= settings.estimateLifetime { budget = min(budget, estimate.bitrate) }
        let floor = sizeCap ?? 0
        let fits = max(floor, bitrates.firstIndex { $0 <= budget } ?? bitrates.count - 1)
        if fits > current {
            upSince = nil
            movedDownAt = now
            return fits
        }
        let roomy = max(floor, bitrates.firstIndex { Double($0) * settings.upHeadroom <= Double(budget) } ?? bitrates.count - 1)
        guard roomy < current, now >= holdUntil else {
            upSince = nil
            return current
        }
        // A limit the viewer raised itself is followed at once; the network has to prove itself.
        if limit != nil, estimate == nil { return roomy }
        return climb(to: roomy, from: current, now: now)
    }

    /// Moves up to `roomy` once it has been the layer to move to for `upHold`.
    private mutating func climb(to roomy: Int, from current: Int, now: UInt64) -> Int {
        if let since = upSince, since.layer == roomy {
            guard now &- since.at >= settings.upHold else { return current }
            upSince = nil
            return roomy
        }
        upSince = (roomy, now)
        return current
    }

    /// `choose` for a viewer whose estimate is bounded by what it receives (see the type's notes).
    private mutating func chooseProbing(current: Int, estimate: Int, now: UInt64) -> Int {
        let rates = bitrates.indices.map { index in index < measured.count && measured[index] > 0 ? measured[index] : bitrates[index] }
        let last = rates.count - 1
        // Its own limit and its view are followed at once, as for any viewer.
        let ownLimit = limit.map { limit in rates.firstIndex { $0 <= limit } ?? last } ?? 0
        let floor = max(sizeCap ?? 0, ownLimit)
        if current < floor {
            probe = nil
            upSince = nil
            return floor
        }
        // Down only on a sign of congestion.
        if estimate < rates[current], estimateDropped || now &- estimateRoseAt >= settings.flatTime {
            let fits = max(floor, rates.firstIndex { $0 <= estimate } ?? last)
            if fits > current {
                probeFailed(now: now)
                upSince = nil
                roomSince = nil
                movedDownAt = now
                return fits
            }
        }
        if let probed = probe?.layer, estimate >= rates[probed] {
            probe = nil   // the estimate caught up: the link carries it
            probeBackoff = settings.probeBackoff
        }
        guard now >= holdUntil else { return current }
        // Up when a better layer fits, as for any viewer.
        let roomy = max(floor, rates.firstIndex { Double($0) * settings.upHeadroom <= Double(estimate) } ?? last)
        if roomy < current {
            roomSince = nil
            return climb(to: roomy, from: current, now: now)
        }
        upSince = nil
        // A probe: nothing better fits, but the estimate shows room over what it is sent.
        // Only to a layer that flows (a browser turns its best layer on only once its uplink allows).
        let flowing = current > 0 && current - 1 < measured.count && measured[current - 1] > 0
        guard probe == nil, current > floor, flowing, now >= nextProbe, Double(estimate) >= Double(rates[current]) * settings.probeRoom else {
            roomSince = nil
            return current
        }
        guard let since = roomSince else {
            roomSince = now
            return current
        }
        guard now &- since >= settings.probeHold else { return current }
        roomSince = nil
        probe = (current - 1, now)
        return current - 1
    }
}

/// What one simulcast layer carries, measured at the relay over one-second windows.
struct RateMeter: Sendable {
    static let window: UInt64 = 1_000_000_000
    private var windowStart: UInt64?
    private var bytes = 0
    private var latest = 0

    mutating func add(_ count: Int, now: UInt64) {
        guard let start = windowStart else {
            windowStart = now
            bytes = count
            return
        }
        if now &- start >= Self.window {
            // A layer that was quiet for longer (rested, or turned off by its browser) starts over.
            latest = now &- start < 2 * Self.window ? Int(Double(bytes) * 8 * 1e9 / Double(now &- start)) : 0
            windowStart = now
            bytes = 0
        }
        bytes += count
    }

    /// Bits per second over the latest full window; 0 when not known or the layer went quiet.
    func rate(now: UInt64) -> Int {
        guard let start = windowStart, now &- start < 2 * Self.window else { return 0 }
        return latest
    }
}

/// How much a subscriber's retransmissions may send: a share of its estimated downlink (its REMB),
/// refilled as time passes. A leg that loses packets because it is full would otherwise be sent
/// every lost packet again each time the receiver asks (a receiver asks every few milliseconds
/// while the packet could still be played), and the answers would keep it full: a NACK storm.
/// Without a fresh estimate nothing is held back (random loss on a roomy link needs quick,
/// repeated answers).
struct RetransmissionBudget: Sendable {
    /// The share of the estimate retransmissions may take, how long an estimate holds, and how many
    /// seconds' worth of budget may build up.
    static let share = 0.25
    static let lifetime: UInt64 = 3_000_000_000
    static let burst = 0.25

    private var rate: Double?
    private var estimatedAt: UInt64 = 0
    private var tokens: Double = 0
    private var refilledAt: UInt64 = 0

    mutating func estimate(_ bitsPerSecond: Int, now: UInt64) {
        refill(now: now)
        let bytesPerSecond = Double(bitsPerSecond) / 8 * Self.share
        if rate == nil { tokens = bytesPerSecond * Self.burst }
        rate = bytesPerSecond
        estimatedAt = now
    }

    /// Whether `bytes` may be resent now (and takes them from the budget).
    mutating func spend(_ bytes: Int, now: UInt64) -> Bool {
        guard rate != nil, now &- estimatedAt <= Self.lifetime else { return true }
        refill(now: now)
        guard tokens >= Double(bytes) else { return false }
        tokens -= Double(bytes)
        return true
    }

    private mutating func refill(now: UInt64) {
        defer { refilledAt = now }
        guard let rate, now > refilledAt else { return }
        tokens = min(rate * Self.burst, tokens + rate * Double(now - refilledAt) / 1e9)
    }
}
