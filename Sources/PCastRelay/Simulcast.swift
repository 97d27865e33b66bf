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
struct LayerSelector: Sendable {
    struct Settings: Sendable, Equatable {
        var upHeadroom = 1.15
        var upHold: UInt64 = 1_000_000_000
        var lossDown = 0.10
        var lossHold: UInt64 = 8_000_000_000
        var estimateLifetime: UInt64 = 3_000_000_000
        var lossWindow: UInt64 = 1_000_000_000
    }

    let settings: Settings
    /// Each layer's bitrate, best first.
    let bitrates: [Int]
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

    init(bitrates: [Int], settings: Settings = Settings()) {
        self.bitrates = bitrates
        self.settings = settings
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

    mutating func estimate(_ bitsPerSecond: Int, now: UInt64) { estimate = (bitsPerSecond, now) }

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
        return min(current + 1, bitrates.count - 1)
    }

    /// The layer to send given the one sent (or awaited) now.
    mutating func choose(current: Int, now: UInt64) -> Int {
        if let pinned { return pinned }
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
        if let since = upSince, since.layer == roomy {
            guard now &- since.at >= settings.upHold else { return current }
            upSince = nil
            return roomy
        }
        upSince = (roomy, now)
        return current
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
