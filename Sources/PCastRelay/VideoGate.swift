import PCastProtocol

/// Loss over windows of at least `minimum` nanoseconds, from successive receiver report blocks of
/// one SSRC (their extended highest sequence number and cumulative loss).
struct LossWindow: Sendable {
    private var start: (sequence: UInt32, lost: Int32, at: UInt64)?

    /// The share of packets lost since the window began (0...1), once `minimum` has passed and
    /// packets were expected; then a new window begins. Nil while the window is open, or when it
    /// saw no packets (nothing was sent: not a loss).
    mutating func add(_ block: RTCPReportBlock, now: UInt64, minimum: UInt64) -> Double? {
        guard let start else {
            self.start = (block.extendedHighestSequenceNumber, block.cumulativeLost, now)
            return nil
        }
        guard now &- start.at >= minimum else { return nil }
        self.start = (block.extendedHighestSequenceNumber, block.cumulativeLost, now)
        let expected = Int64(block.extendedHighestSequenceNumber) - Int64(start.sequence)
        guard expected > 0 else { return nil }
        let lost = Int64(block.cumulativeLost) - Int64(start.lost)
        return min(1, max(0, Double(lost) / Double(expected)))
    }

    mutating func reset() { start = nil }
}

/// One subscriber's audio-only fallback: stop forwarding video that cannot get through, keep the
/// audio, and try the video again later.
///
/// Decided from the subscriber's own receiver reports, in windows of `window`:
/// - *forwarding*: the subscriber's leg (its reported video loss less the publisher leg's, which
///   every viewer shares) losing `suspendLoss` or more for `suspendWindows` windows in a row
///   suspends the video;
/// - *suspended*: once `probeDelay` has passed and the audio gets through (under
///   `probeAudioLoss`), a probe starts: a keyframe is requested and video flows again from the
///   first packet that starts one;
/// - *probing*: `resumeWindows` windows in a row under `resumeLoss` resume for good (the delay is
///   reset); a window at `suspendLoss` or more, `probeWindows` windows without a verdict, or
///   `probeTimeout` without any, fail the probe and the next delay doubles (up to
///   `maximumProbeDelay`).
///
/// While video is held back, the subscriber's sequence numbers stay continuous: packets it is
/// sent are renumbered by a fixed offset from the resume point, and its NACKs are mapped back.
///
/// ```swift
/// var gate = VideoGate(settings: .init())
/// if gate.videoReport(block, publisherLegLoss: 0, now: now) == .suspended { tellTheViewer() }
/// let outgoing = gate.forward(sequenceNumber: 812) { startsKeyframe }   // nil: drop it
/// ```
struct VideoGate: Sendable {
    struct Settings: Sendable, Equatable {
        var window: UInt64 = 1_000_000_000
        var suspendLoss = 0.30
        var suspendWindows = 2
        var resumeLoss = 0.10
        var resumeWindows = 2
        var probeWindows = 5
        var probeTimeout: UInt64 = 10_000_000_000
        var probeAudioLoss = 0.10
        var firstProbeDelay: UInt64 = 4_000_000_000
        var maximumProbeDelay: UInt64 = 32_000_000_000
    }

    enum State: Sendable, Equatable {
        case forwarding
        case suspended(probeAt: UInt64)
        case probing(since: UInt64, windows: Int, good: Int)
    }

    /// A transition the router acts on.
    enum Change: Sendable, Equatable {
        /// Video stopped (from forwarding): tell the viewer.
        case suspended
        /// A probe began: ask the publisher for a keyframe.
        case probing
        /// The probe failed: still suspended, the next probe later.
        case probeFailed
        /// Video flows again: tell the viewer.
        case resumed
    }

    let settings: Settings
    private(set) var state: State = .forwarding
    private(set) var probeDelay: UInt64
    private var badWindows = 0
    private var video = LossWindow()
    private var audio = LossWindow()
    /// Waiting for a keyframe's first packet before forwarding video again.
    private(set) var awaitingKeyframe = false
    /// Original sequence number minus the one the subscriber is sent.
    private(set) var offset: UInt16 = 0
    /// The latest sequence number the subscriber was sent (its numbering), and the first one after
    /// the latest resume (NACKs for earlier ones name packets of another numbering).
    private var lastSent: UInt16?
    private var resumedAt: UInt16?

    init(settings: Settings) {
        self.settings = settings
        probeDelay = settings.firstProbeDelay
    }

    /// True while every video packet is forwarded unchanged (the fan-out's fast path).
    var isTransparent: Bool { state == .forwarding && offset == 0 && !awaitingKeyframe }

    /// Whether the subscriber's video reports describe video it is being sent (they count towards
    /// what the publisher is told, and its NACKs and keyframe requests are served).
    var isForwarding: Bool { state == .forwarding }

    var isSuspended: Bool {
        if case .suspended = state { return true }
        return false
    }

    // MARK: Reports

    /// A receiver report block for the video SSRC. `publisherLegLoss`: the share the relay itself
    /// lost from the publisher over its latest report interval.
    mutating func videoReport(_ block: RTCPReportBlock, publisherLegLoss: Double, now: UInt64) -> Change? {
        guard let loss = video.add(block, now: now, minimum: settings.window) else { return nil }
        let leg = max(0, loss - publisherLegLoss)
        switch state {
        case .forwarding:
            guard leg >= settings.suspendLoss else {
                badWindows = 0
                return nil
            }
            badWindows += 1
            guard badWindows >= settings.suspendWindows else { return nil }
            badWindows = 0
            state = .suspended(probeAt: now &+ probeDelay)
            return .suspended
        case .suspended:
            return nil
        case .probing(let since, let windows, let good):
            if leg >= settings.suspendLoss { return failProbe(now: now) }
            let stillGood = leg < settings.resumeLoss ? good + 1 : 0
            if stillGood >= settings.resumeWindows {
                state = .forwarding
                probeDelay = settings.firstProbeDelay
                return .resumed
            }
            if windows + 1 >= settings.probeWindows { return failProbe(now: now) }
            state = .probing(since: since, windows: windows + 1, good: stillGood)
            return nil
        }
    }

    /// A receiver report block for the audio SSRC: while suspended, a probe starts once it is due
    /// and the audio gets through; a probe that reached no verdict in time fails.
    mutating func audioReport(_ block: RTCPReportBlock, now: UInt64) -> Change? {
        let loss = audio.add(block, now: now, minimum: settings.window)
        switch state {
        case .forwarding:
            return nil
        case .suspended(let probeAt):
            guard now >= probeAt, let loss, loss < settings.probeAudioLoss else { return nil }
            state = .probing(since: now, windows: 0, good: 0)
            awaitingKeyframe = true
            video.reset()
            return .probing
        case .probing(let since, _, _):
            guard now &- since >= settings.probeTimeout else { return nil }
            return failProbe(now: now)
        }
    }

    private mutating func failProbe(now: UInt64) -> Change {
        probeDelay = min(probeDelay &* 2, settings.maximumProbeDelay)
        state = .suspended(probeAt: now &+ probeDelay)
        awaitingKeyframe = false
        return .probeFailed
    }

    // MARK: Packets

    /// The last sequence number the subscriber was sent while the fan-out sent it everything as it
    /// was (without asking the gate): where its numbering continues after a resume.
    mutating func adoptLastSent(_ sequenceNumber: UInt16?) {
        if lastSent == nil { lastSent = sequenceNumber }
    }

    /// The sequence number to send a video packet with, or nil to drop it. `startsKeyframe` is
    /// asked only while a keyframe is awaited.
    mutating func forward(sequenceNumber: UInt16, startsKeyframe: () -> Bool) -> UInt16? {
        if case .suspended = state { return nil }
        if awaitingKeyframe {
            guard startsKeyframe() else { return nil }
            awaitingKeyframe = false
            if let lastSent { offset = sequenceNumber &- (lastSent &+ 1) }
            resumedAt = sequenceNumber &- offset
        }
        let outgoing = sequenceNumber &- offset
        if let resumedAt, Int16(bitPattern: outgoing &- resumedAt) < 0 {
            // Older than the resume point (reordered): in the subscriber's numbering it would
            // collide with packets sent before the suspension.
            return nil
        }
        if let last = lastSent {
            if Int16(bitPattern: outgoing &- last) > 0 { lastSent = outgoing }
        } else {
            lastSent = outgoing
        }
        return outgoing
    }

    /// The original sequence number of a packet the subscriber NACKs (its numbering), or nil when
    /// there is none to repair: video is held back, or the packet predates the latest resume.
    func original(ofNacked sequenceNumber: UInt16) -> UInt16? {
        if isSuspended || awaitingKeyframe { return nil }
        if let resumedAt, Int16(bitPattern: sequenceNumber &- resumedAt) < 0 { return nil }
        return sequenceNumber &+ offset
    }
}
