// MARK: - Fragmenter

/// Turns access units, as they leave GStreamer, into fragments with contiguous decode times.
///
/// Times are rebased on a common origin: the first video keyframe's DTS (PTS when there is
/// no DTS) when the recording has video — everything before it is dropped — or the first
/// packet in an audio-only recording. `startOffset` (nanoseconds) is added to every track,
/// so an appended part continues where the recording ended. Each track holds back one
/// sample, whose duration is only known when the next one arrives.
///
/// ```swift
/// var fragmenter = FMP4Fragmenter(tracks: [video, audio], startOffset: appended.startOffset)
/// if let fragment = fragmenter.push(.init(trackID: 1, pts: pts, dts: dts, isKeyframe: key,
///                                          data: H264.lengthPrefixed(annexB: au))) {
///     try file.write(fragment)
/// }
/// if let last = fragmenter.flush() { try file.write(last) }
/// ```
public struct FMP4Fragmenter: Sendable {
    /// One access unit. Times are in nanoseconds on any common clock (e.g. GStreamer's
    /// buffer PTS/DTS). For H.264, `data` must already be length-prefixed.
    ///
    /// ```swift
    /// let unit = FMP4Fragmenter.AccessUnit(trackID: 2, pts: buffer.pts, isKeyframe: true,
    ///                                      data: opusPacket)
    /// ```
    public struct AccessUnit: Sendable, Equatable {
        public var trackID: UInt32
        public var pts: UInt64
        public var dts: UInt64?
        public var isKeyframe: Bool
        public var data: [UInt8]

        public init(trackID: UInt32, pts: UInt64, dts: UInt64? = nil, isKeyframe: Bool, data: [UInt8]) {
            self.trackID = trackID
            self.pts = pts
            self.dts = dts
            self.isKeyframe = isKeyframe
            self.data = data
        }
    }

    /// A sample whose duration is not known yet.
    struct Pending: Sendable {
        var decodeTime: UInt64
        var compositionOffset: Int32
        var isSync: Bool
        var data: [UInt8]
    }

    struct TrackState: Sendable {
        var track: FMP4Track
        var started = false
        var pending: Pending?
        var lastDecodeTime: UInt64?
        var lastDuration: UInt32?
        var completed: [FMP4Sample] = []
        var endDecodeTime: UInt64?
    }

    public let fragmentDuration: UInt64
    public let maxFragmentDuration: UInt64
    public let startOffset: UInt64
    /// Access units dropped: before the origin, before a track's first keyframe, or of an
    /// unknown track.
    public private(set) var droppedCount = 0

    var states: [TrackState]
    let primary: Int
    let hasVideo: Bool
    var origin: UInt64?
    var fragmentStart: UInt64 = 0
    var preroll: [AccessUnit] = []
    static let maxPreroll = 256

    /// - Parameters:
    ///   - startOffset: nanoseconds added to every decode time (the recording's end on append).
    ///   - fragmentDuration: cut at the first video keyframe (any packet when audio-only)
    ///     once the fragment is at least this long (nanoseconds).
    ///   - maxFragmentDuration: cut even without a keyframe once a fragment is this long,
    ///     so a stream with rare keyframes still reaches the disk regularly.
    public init(tracks: [FMP4Track], startOffset: UInt64 = 0,
                fragmentDuration: UInt64 = 1_000_000_000, maxFragmentDuration: UInt64 = 10_000_000_000) {
        states = tracks.map { TrackState(track: $0) }
        hasVideo = tracks.contains { $0.kind == .video }
        primary = tracks.firstIndex { $0.kind == .video } ?? 0
        self.startOffset = startOffset
        self.fragmentDuration = fragmentDuration
        self.maxFragmentDuration = max(maxFragmentDuration, fragmentDuration)
    }

    /// End of everything handed out or held as completed, in nanoseconds (0 before any).
    public var endNanoseconds: UInt64 {
        states.compactMap { state in
            state.endDecodeTime.map { FMP4Time.nanoseconds($0, timescale: state.track.timescale) }
        }.max() ?? 0
    }

    /// Adds one access unit; returns a fragment when this unit starts a new one.
    public mutating func push(_ unit: AccessUnit) -> FMP4Fragment? {
        guard let index = states.firstIndex(where: { $0.track.id == unit.trackID }) else {
            droppedCount += 1
            return nil
        }
        if origin == nil, hasVideo, states[index].track.kind == .audio {
            holdBeforeOrigin(unit)
            return nil
        }
        let fragment = add(unit, index: index)
        if origin != nil, !preroll.isEmpty { replayPreroll() }
        return fragment
    }

    /// Audio that arrives before the first video keyframe may still belong after it (same
    /// timestamp, network jitter): keep the latest few until the origin is known.
    mutating func holdBeforeOrigin(_ unit: AccessUnit) {
        preroll.append(unit)
        if preroll.count > Self.maxPreroll {
            preroll.removeFirst()
            droppedCount += 1
        }
    }

    /// Adds the held audio once the origin is known; units before it are dropped.
    /// Audio never cuts a fragment when there is video, so nothing is returned.
    mutating func replayPreroll() {
        let held = preroll
        preroll = []
        for unit in held {
            if let index = states.firstIndex(where: { $0.track.id == unit.trackID }) {
                _ = add(unit, index: index)
            }
        }
    }

    mutating func add(_ unit: AccessUnit, index: Int) -> FMP4Fragment? {
        guard let times = admit(unit, index: index) else {
            droppedCount += 1
            return nil
        }
        let timescale = states[index].track.timescale
        var decodeTime = FMP4Time.ticks(times.decode, timescale: timescale)
        if let last = states[index].lastDecodeTime, decodeTime <= last { decodeTime = saturatingAdd(last, 1) }
        let presentationTime = FMP4Time.ticks(times.presentation, timescale: timescale)
        let offset = Int64(clamping: presentationTime) - Int64(clamping: decodeTime)
        let startsPrimary = index == primary && states[index].pending == nil && states[index].completed.isEmpty
        completePending(index, nextDecodeTime: decodeTime)
        var fragment: FMP4Fragment?
        if index == primary, shouldCut(at: decodeTime, isKeyframe: unit.isKeyframe) {
            fragment = takeFragment()
        }
        if fragment != nil || startsPrimary { fragmentStart = decodeTime }
        states[index].pending = Pending(decodeTime: decodeTime, compositionOffset: Int32(clamping: offset),
                                        isSync: states[index].track.kind == .audio || unit.isKeyframe,
                                        data: unit.data)
        states[index].lastDecodeTime = decodeTime
        return fragment
    }

    /// Completes every held-back sample (with its track's previous duration, or 1/30 s for
    /// video and 20 ms for audio) and returns what is left as a last fragment.
    public mutating func flush() -> FMP4Fragment? {
        for index in states.indices {
            guard let pending = states[index].pending else { continue }
            let fallback = states[index].track.kind == .video ? 33_333_333 : 20_000_000
            let duration = states[index].lastDuration
                ?? UInt32(clamping: max(1, FMP4Time.ticks(UInt64(fallback), timescale: states[index].track.timescale)))
            completePending(index, nextDecodeTime: saturatingAdd(pending.decodeTime, UInt64(duration)))
        }
        return takeFragment()
    }

    /// Decides whether a unit is kept; returns its decode and presentation times relative to
    /// the origin plus `startOffset`, in nanoseconds.
    mutating func admit(_ unit: AccessUnit, index: Int) -> (decode: UInt64, presentation: UInt64)? {
        let kind = states[index].track.kind
        let decode = unit.dts ?? unit.pts
        if origin == nil {
            guard !hasVideo || (index == primary && unit.isKeyframe) else { return nil }
            origin = decode
        }
        guard let origin else { return nil }
        if kind == .video && !states[index].started {
            guard unit.isKeyframe else { return nil }
        }
        if kind == .audio && decode < origin { return nil }
        states[index].started = true
        return (rebase(decode, origin: origin), rebase(unit.pts, origin: origin))
    }

    /// `time - origin + startOffset`, clamped to 0 below and saturating above.
    func rebase(_ time: UInt64, origin: UInt64) -> UInt64 {
        let (value, overflow) = (time > origin ? time - origin : 0).addingReportingOverflow(startOffset)
        return overflow ? UInt64.max / 2 : value
    }

    var isFragmentEmpty: Bool { states.allSatisfy { $0.completed.isEmpty } }

    func shouldCut(at decodeTime: UInt64, isKeyframe: Bool) -> Bool {
        guard !isFragmentEmpty else { return false }
        let timescale = states[primary].track.timescale
        let elapsed = FMP4Time.nanoseconds(decodeTime &- min(decodeTime, fragmentStart), timescale: timescale)
        if elapsed >= maxFragmentDuration { return true }
        return (isKeyframe || !hasVideo) && elapsed >= fragmentDuration
    }

    mutating func completePending(_ index: Int, nextDecodeTime: UInt64) {
        guard let pending = states[index].pending else { return }
        let duration = UInt32(clamping: max(1, nextDecodeTime &- min(nextDecodeTime, pending.decodeTime)))
        states[index].completed.append(FMP4Sample(decodeTime: pending.decodeTime,
                                                  compositionOffset: pending.compositionOffset,
                                                  duration: duration, isSync: pending.isSync,
                                                  data: pending.data))
        let end = saturatingAdd(pending.decodeTime, UInt64(duration))
        states[index].lastDuration = duration
        states[index].pending = nil
        states[index].endDecodeTime = end
        // After a flush the next sample must not start before this one ends.
        states[index].lastDecodeTime = max(states[index].lastDecodeTime ?? 0, end - 1)
    }

    /// `a + b`, stopping at `UInt64.max` (only reachable with absurd timestamps or timescales).
    func saturatingAdd(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : sum
    }

    mutating func takeFragment() -> FMP4Fragment? {
        let runs = states.indices.compactMap { index -> FMP4TrackRun? in
            guard !states[index].completed.isEmpty else { return nil }
            defer { states[index].completed = [] }
            return FMP4TrackRun(trackID: states[index].track.id, samples: states[index].completed)
        }
        return runs.isEmpty ? nil : FMP4Fragment(runs: runs)
    }
}
