import Foundation
import GStreamer
import Logging
import PCastProtocol
import Synchronization

/// Whether a track still carries media.
public enum TrackState: String, Sendable, Hashable {
    case live
    case ended
}

/// One track of a ``MediaStream``: video or audio.
///
/// Disabling a track keeps the pipeline running and replaces its content: black frames for video,
/// silence for audio (what a muted camera or microphone sends).
public final class MediaStreamTrack: Sendable, Identifiable, CustomStringConvertible {
    public let id: String
    public let kind: MediaType
    let gate: TrackGate
    private let stateBox = Mutex<TrackState>(.live)
    private let sourceBox: Mutex<SourceDeviceInfo?>

    init(kind: MediaType, source: SourceDeviceInfo?, gate: TrackGate) {
        id = "\(kind)-\(UUID().uuidString.prefix(8).lowercased())"
        self.kind = kind
        self.gate = gate
        sourceBox = Mutex(source)
    }

    /// Whether the track's content is sent (`false`: black or silence).
    public var isEnabled: Bool { gate.isEnabled }

    /// Enables or disables the track without stopping it.
    public func setEnabled(_ enabled: Bool) { gate.isEnabled = enabled }

    public var state: TrackState { stateBox.withLock { $0 } }

    /// The device the track captures from, for local tracks.
    public var source: SourceDeviceInfo? { sourceBox.withLock { $0 } }

    func markEnded() { stateBox.withLock { $0 = .ended } }
    func setSource(_ source: SourceDeviceInfo) { sourceBox.withLock { $0 = source } }

    /// Set on a subscribed video track: passes this track's limit on to the publisher.
    private let bandwidth = Mutex<BandwidthLimiter?>(nil)

    /// For a subscribed video track: asks the publisher, through the platform, to send at most
    /// `bitsPerSecond` of video until the returned disposable is released or dropped. The most
    /// recent limit on this track is the one in effect, releasing it lifts it, releasing one that
    /// a later call superseded does nothing. With several viewers the publisher follows the lowest
    /// request. On other tracks (local media) it does nothing.
    ///
    /// ```swift
    /// var limit: Disposable? = stream.getVideoTracks()[0].limitBandwidth(300_000)
    /// limit = nil   // the publisher may send its full bitrate again
    /// ```
    public func limitBandwidth(_ bitsPerSecond: Int) -> Disposable {
        guard let limiter = bandwidth.withLock({ $0 }) else { return Disposable {} }
        return limiter.limit(bitsPerSecond)
    }

    /// Asks for the limit in effect again, if there is one (the subscription moved to another
    /// node, which has not heard it).
    package func reapplyBandwidthLimit() {
        guard let limiter = bandwidth.withLock({ $0 }), limiter.current != nil else { return }
        limiter.reapply()
    }

    /// Makes ``limitBandwidth(_:)`` call `request` with the limit in effect (nil: none).
    package func setBandwidthRequester(_ request: @escaping @Sendable (Int?) -> Void) {
        bandwidth.withLock { $0 = BandwidthLimiter(apply: request) }
    }

    public var description: String { "\(kind) track \(id) (\(state.rawValue), \(isEnabled ? "enabled" : "disabled"))" }
}

/// The pipeline behind a ``MediaStream``: where raw video and audio can be tapped.
protocol StreamEngine: AnyObject, Sendable {
    var pipeline: Pipeline { get }
    /// The `tee` carrying the raw media of `kind`, or nil when the stream has none.
    func tee(for kind: MediaType) -> Element?
    func stop() async
    /// The playout-delay overrides of the stream (nil for local media, which has no jitter buffer).
    var playoutDelay: PlayoutDelay? { get }
    /// When the first video frame came out of the decoder (nil before, and for local media).
    var firstVideoDecodedAt: ContinuousClock.Instant? { get }
}

extension StreamEngine {
    var playoutDelay: PlayoutDelay? { nil }
    var firstVideoDecodedAt: ContinuousClock.Instant? { nil }
}

/// Something to release: dropping the last reference releases it too, as the PCast iOS SDK's disposables do.
public final class Disposable: Sendable {
    private let action: Mutex<(@Sendable () -> Void)?>

    public init(_ action: @escaping @Sendable () -> Void) {
        self.action = Mutex(action)
    }

    /// Releases it now; later calls do nothing.
    public func dispose() {
        let action = self.action.withLock { action in defer { action = nil }; return action }
        action?()
    }

    deinit { dispose() }
}

/// A stream's jitter-buffer latency (its playout delay) and its overrides, by the PCast iOS SDK's rule for
/// `overridePlayoutDelay` (the same as `limitBandwidth`'s): the most recent override is the one in
/// effect; releasing it restores the stream's own delay; releasing one that a later override
/// superseded does nothing. The stream's own delay is fixed, or adapts to the path
/// (``isAdaptive``) while no override is in effect.
public final class PlayoutDelay: Sendable {
    /// The delay the stream started with (a fixed delay, or where the adaptive one starts).
    public let defaultDelay: Duration
    /// Whether the stream's own delay follows the path (within ``bounds``).
    public let isAdaptive: Bool
    /// The bounds of an adaptive delay (nil for a fixed one).
    public let bounds: ClosedRange<Duration>?
    private let apply: @Sendable (Duration) -> Void
    private struct State {
        var overrides = LatestOverride<Duration>()
        /// The stream's own delay: fixed, or the adaptive one's latest.
        var own: Duration
    }
    private let state: Mutex<State>
    private let nextObserver = Atomic<Int>(0)
    private let observers = Mutex<[Int: @Sendable (Duration) -> Void]>([:])

    init(default delay: Duration, adaptiveBounds: ClosedRange<Duration>? = nil, apply: @escaping @Sendable (Duration) -> Void) {
        defaultDelay = delay
        isAdaptive = adaptiveBounds != nil
        bounds = adaptiveBounds
        self.apply = apply
        state = Mutex(State(own: delay))
    }

    /// The delay in effect.
    public var current: Duration { state.withLock { $0.overrides.current ?? $0.own } }

    /// Whether an override is in effect (the adaptive delay then waits).
    var isOverridden: Bool { state.withLock { $0.overrides.current != nil } }

    func override(_ delay: Duration) -> Disposable {
        // Applied under the lock: two overrides never reach the pipeline out of order.
        let token = state.withLock { state in
            defer { changed(to: delay) }
            return state.overrides.set(delay)
        }
        return Disposable { [weak self] in
            guard let self else { return }
            self.state.withLock { state in
                if state.overrides.release(token) { self.changed(to: state.own) }
            }
        }
    }

    /// The adaptive delay's new value: in effect at once unless an override is.
    func adapt(to delay: Duration) {
        state.withLock { state in
            state.own = delay
            if state.overrides.current == nil { changed(to: delay) }
        }
    }

    /// Calls `changed` with each delay that takes effect from now on; ``unobserve(_:)`` with the
    /// returned id stops it. (Renderers size their queues to hold a delay's worth of frames.)
    func observe(_ changed: @escaping @Sendable (Duration) -> Void) -> Int {
        let id = nextObserver.add(1, ordering: .relaxed).newValue
        observers.withLock { $0[id] = changed }
        return id
    }

    func unobserve(_ id: Int) {
        observers.withLock { _ = $0.removeValue(forKey: id) }
    }

    private func changed(to delay: Duration) {
        apply(delay)
        for observer in observers.withLock({ Array($0.values) }) { observer(delay) }
    }
}

/// Why a stream ended.
public enum MediaStreamEndReason: Sendable, Hashable {
    /// `stop()` was called.
    case stopped
    /// The source reached its end (a file played out).
    case endOfStream
    /// The source or pipeline failed.
    case failed(String)
    /// The remote stream ended, for the platform's reason.
    case remote(StreamEndedReason, String?)
}

/// A stream of media tracks: local (from ``UserMedia/getUserMedia(_:)``) or, later, remote.
///
/// ```swift
/// let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true))
/// _ = await renderer.start()
/// for track in stream.getVideoTracks() { print(track) }
/// ```
public final class MediaStream: Sendable, Identifiable {
    public let id: String
    let engine: any StreamEngine
    private let trackList: [MediaStreamTrack]
    private struct EndState {
        var reason: MediaStreamEndReason?
        var waiters: [CheckedContinuation<MediaStreamEndReason, Never>] = []
        /// By observer id: an observer whose interest ended first (a publisher of a stream that
        /// outlives it) takes itself out, so a long-lived stream does not collect them.
        var callbacks: [Int: @Sendable (MediaStreamEndReason) -> Void] = [:]
        var nextObserver = 0
    }
    private let endState = Mutex(EndState())

    /// When the first video frame of a remote stream came out of its decoder (nil before): for
    /// measuring a join.
    package var firstVideoDecodedAt: ContinuousClock.Instant? { engine.firstVideoDecodedAt }

    init(engine: any StreamEngine, tracks: [MediaStreamTrack]) {
        id = "stream-\(UUID().uuidString.prefix(8).lowercased())"
        self.engine = engine
        trackList = tracks
    }

    /// Why the publisher says its stream is reduced (remote streams; from the platform).
    private let publisherReason = Mutex<DataQualityReason>(.none)
    package var publisherQuality: DataQualityReason { publisherReason.withLock { $0 } }
    package func setPublisherQuality(_ reason: DataQualityReason) { publisherReason.withLock { $0 = reason } }

    /// True while the relay holds this remote stream's video back because the viewer's own leg
    /// cannot carry it (the audio-only fallback); it resumes by itself once a probe shows the
    /// video gets through. Data quality then reads `audioOnly` / `downloadLimited`.
    public var isVideoSuspended: Bool { videoSuspended.withLock { $0 } }
    private let videoSuspended = Mutex(false)
    package func setVideoSuspended(_ suspended: Bool) { videoSuspended.withLock { $0 = suspended } }

    /// True while the relay sends this simulcast viewer a smaller layer than the best because its
    /// link cannot carry more (not its own choice or limit). Data quality then reads
    /// `downloadLimited`.
    public var isLayerReduced: Bool { layerReduced.withLock { $0 } }
    private let layerReduced = Mutex(false)
    package func setLayerReduced(_ reduced: Bool) { layerReduced.withLock { $0 = reduced } }

    /// The renderers showing the stream's video, by id, with their display size (nil: the video's
    /// own), and who the platform is told through (a subscribed stream).
    private struct ViewSizes {
        var renderers: [String: Dimensions?] = [:]
        /// What the platform was last told (it starts knowing of no size).
        var told: Dimensions?? = .some(nil)
        var request: (@Sendable (Dimensions?) -> Void)?

        /// The largest display size of the renderers showing the video; nil when one shows it at
        /// its own size, or none shows it.
        var current: Dimensions? {
            guard !renderers.isEmpty, renderers.values.allSatisfy({ $0 != nil }) else { return nil }
            let sizes = renderers.values.compactMap { $0 }
            return Dimensions(width: sizes.map(\.width).max()!, height: sizes.map(\.height).max()!)
        }
    }
    private let viewSizes = Mutex(ViewSizes())

    /// The size this stream's video is shown at: the largest ``RendererOptions/displaySize`` of
    /// its started renderers, nil when one has none (it shows the video at its own size) or none
    /// is started. Of a simulcast, a subscriber is sent no better layer than the smallest that
    /// fills it, so a thumbnail does not take a 720p layer.
    public var viewSize: Dimensions? { viewSizes.withLock { $0.current } }

    /// Makes changes of ``viewSize`` call `request` (a subscribed stream tells the platform).
    package func setViewSizeRequester(_ request: @escaping @Sendable (Dimensions?) -> Void) {
        viewSizes.withLock { $0.request = request }
    }

    /// Tells the view size again, if it is set (the subscription moved to another node).
    package func reapplyViewSize() {
        let (request, size) = viewSizes.withLock { ($0.request, $0.current) }
        if let request, let size { request(size) }
    }

    /// A renderer started showing the video (`displaySize` nil: at the video's own size) or
    /// stopped (`showing` false).
    func renderer(_ id: String, showing: Bool, displaySize: Dimensions?) {
        let change: (@Sendable (Dimensions?) -> Void, Dimensions?)? = viewSizes.withLock { sizes in
            if showing { sizes.renderers[id] = .some(displaySize) } else { sizes.renderers[id] = nil }
            let current = sizes.current
            guard let request = sizes.request, sizes.told != .some(current) else { return nil }
            sizes.told = .some(current)
            return (request, current)
        }
        if let (request, size) = change { request(size) }
    }

    /// The stream's tracks, video first.
    public var tracks: [MediaStreamTrack] { trackList }
    public var videoTracks: [MediaStreamTrack] { trackList.filter { $0.kind == .video } }
    public var audioTracks: [MediaStreamTrack] { trackList.filter { $0.kind == .audio } }
    /// The PCast iOS SDK's spelling of ``tracks``.
    public func getTracks() -> [MediaStreamTrack] { tracks }
    /// The PCast iOS SDK's spelling of ``videoTracks``.
    public func getVideoTracks() -> [MediaStreamTrack] { videoTracks }
    /// The PCast iOS SDK's spelling of ``audioTracks``.
    public func getAudioTracks() -> [MediaStreamTrack] { audioTracks }

    /// Network statistics per received track; empty for a local stream.
    public func networkStatistics() -> [ReceivedTrackStatistics] {
        (engine as? RTPReceiver)?.networkStatistics() ?? []
    }

    /// A subscribed stream's statistics as WebRTC names them: `inbound-rtp` per track (packets,
    /// bytes, lost, jitter, frames decoded, jitter-buffer target delay, NACKs / PLIs / FIRs sent).
    /// Empty for local media.
    public func rtcStatsReport() -> RTCStatsReport {
        RTCStatsReport(stats: (engine as? RTPReceiver)?.rtcStats() ?? [])
    }

    /// A renderer (decode-to-sink) for this stream. Call ``Renderer/start()`` to show it.
    public func createRenderer(_ options: RendererOptions = RendererOptions()) -> Renderer {
        Renderer(stream: self, options: options)
    }

    /// Why the stream ended, once it has.
    public var endReason: MediaStreamEndReason? { endState.withLock { $0.reason } }

    /// Waits until the stream ends.
    public func ended() async -> MediaStreamEndReason {
        await withCheckedContinuation { continuation in
            let reason: MediaStreamEndReason? = endState.withLock { state in
                if let reason = state.reason { return reason }
                state.waiters.append(continuation)
                return nil
            }
            if let reason { continuation.resume(returning: reason) }
        }
    }

    /// Calls `callback` once when the stream ends (at once if it has).
    public func setStreamEndedCallback(_ callback: @escaping @Sendable (MediaStreamEndReason) -> Void) {
        _ = observeEnd(callback)
    }

    /// Calls `callback` once when the stream ends, unless ``removeEndObserver(_:)`` is called with
    /// the returned id first; nil (and `callback` called at once) if the stream has ended.
    package func observeEnd(_ callback: @escaping @Sendable (MediaStreamEndReason) -> Void) -> Int? {
        let (id, ended): (Int?, MediaStreamEndReason?) = endState.withLock { state in
            if let reason = state.reason { return (nil, reason) }
            state.nextObserver += 1
            state.callbacks[state.nextObserver] = callback
            return (state.nextObserver, nil)
        }
        if let ended { callback(ended) }
        return id
    }

    package func removeEndObserver(_ id: Int) {
        _ = endState.withLock { $0.callbacks.removeValue(forKey: id) }
    }

    package func finish(_ reason: MediaStreamEndReason) {
        let (waiters, callbacks): ([CheckedContinuation<MediaStreamEndReason, Never>], [@Sendable (MediaStreamEndReason) -> Void]) = endState.withLock { state in
            guard state.reason == nil else { return ([], []) }
            state.reason = reason
            defer { state.waiters = []; state.callbacks = [:] }
            return (state.waiters, state.callbacks.sorted { $0.key < $1.key }.map(\.value))
        }
        trackList.forEach { $0.markEnded() }
        waiters.forEach { $0.resume(returning: reason) }
        callbacks.forEach { $0(reason) }
    }

    /// Stops every track and releases the devices.
    public func stop() async {
        await engine.stop()
        finish(.stopped)
    }
}

/// Replaces a track's content with black or silence while it is disabled.
final class TrackGate: Sendable {
    let kind: MediaType
    private let enabled = Atomic<Bool>(true)
    /// The blank buffer for the current format, shared by every replaced frame.
    private let blank = Mutex<(info: VideoInfo?, buffer: Buffer?)>((nil, nil))
    private let probes = Mutex<[PadProbe]>([])

    init(kind: MediaType) { self.kind = kind }

    var isEnabled: Bool {
        get { enabled.load(ordering: .relaxed) }
        set { enabled.store(newValue, ordering: .relaxed) }
    }

    /// Installs the gate on the source pad where raw media of the final format passes.
    func install(on pad: Pad) {
        let isVideo = kind == .video
        let caps = pad.addCapsProbe { [weak self] caps in
            self?.blank.withLock { $0 = (isVideo ? caps.videoInfo : nil, nil) }
        }
        let buffers = pad.addBufferProbe { [weak self] buffer in
            guard let self, !self.isEnabled else { return .pass }
            buffer = self.blankReplacement(for: buffer)
            return .pass
        }
        probes.withLock { $0 = [caps, buffers] }
    }

    func remove() {
        probes.withLock { probes in
            probes.forEach { $0.remove() }
            probes = []
        }
    }

    private func blankReplacement(for original: Buffer) -> Buffer {
        let size = original.size
        let template: Buffer = blank.withLock { state in
            if let buffer = state.buffer, buffer.size == size { return buffer }
            let made = Buffer(size: size)
            try? made.withUnsafeMutableBytes { bytes in
                if kind == .video, let info = state.info, info.format == .i420 || info.format == .nv12 {
                    // Black in YUV: luma 16, chroma 128.
                    let lumaEnd = min(info.offsets.count > 1 ? info.offsets[1] : bytes.count, bytes.count)
                    guard let base = bytes.baseAddress else { return }
                    memset(base, 16, lumaEnd)
                    if lumaEnd < bytes.count { memset(base + lumaEnd, 128, bytes.count - lumaEnd) }
                } else if let base = bytes.baseAddress {
                    // Silence (S16) and black in RGB formats are all zeros.
                    memset(base, 0, bytes.count)
                }
            }
            state.buffer = made
            return made
        }
        let replacement = template.shallowCopy()
        replacement.presentationTimestamp = original.presentationTimestamp
        replacement.decodingTimestamp = original.decodingTimestamp
        replacement.duration = original.duration
        return replacement
    }
}

/// A consumer attached to a stream's raw media with ``MediaStream/attachConsumer(_:to:)``: an
/// encoder branch, a recorder, an analyser.
public final class MediaConsumer: Sendable {
    let bin: Element
    let pipeline: Pipeline
    private let detached = Atomic<Bool>(false)

    init(bin: Element, pipeline: Pipeline) {
        self.bin = bin
        self.pipeline = pipeline
    }

    /// The element named `name` inside the consumer.
    public func element(named name: String) throws(MediaError) -> Element {
        guard let element = bin.descendants.first(where: { $0.name == name }) else { throw .gstreamer(.elementNotFound(name)) }
        return element
    }

    /// Takes the consumer off the stream; the stream and its other consumers keep running.
    public func detach() async {
        guard !detached.exchange(true, ordering: .relaxed) else { return }
        await pipeline.detach(bin)
    }
}

extension MediaStream {
    /// Attaches a gst-launch fragment that consumes the stream's raw `kind` media
    /// (`queue ! x264enc tune=zerolatency ! rtph264pay ! appsink name=rtp`), while the stream runs.
    /// Start it with a `queue` so it runs on its own thread.
    ///
    /// - Throws: ``MediaError/unsupportedPad(_:)`` when the stream has no such track, or
    ///   ``MediaError/gstreamer(_:)`` when the fragment cannot be parsed or linked.
    public func attachConsumer(_ description: String, to kind: MediaType) async throws(MediaError) -> MediaConsumer {
        guard let tee = engine.tee(for: kind) else { throw .unsupportedPad("the stream has no \(kind) track") }
        do {
            let bin = try Element.bin(description: description, name: "consumer-\(UUID().uuidString.prefix(6).lowercased())", ghosting: .sinks)
            try await engine.pipeline.attach(bin, after: tee)
            return MediaConsumer(bin: bin, pipeline: engine.pipeline)
        } catch {
            throw .gstreamer(error)
        }
    }
}
