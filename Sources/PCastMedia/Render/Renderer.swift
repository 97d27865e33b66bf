import Foundation
import GStreamer
import Logging
import Synchronization

/// How video fills the render surface.
public enum AspectRatioMode: String, Sendable, Hashable, Codable {
    /// Fill (the PCast iOS SDK's default).
    case automatic
    /// Fill the whole surface; the video is cropped to the surface's shape.
    case fill
    /// Show the whole video; black bars fill the rest.
    case letterbox
}

/// Width and height in pixels.
public struct Dimensions: Sendable, Hashable, Codable, CustomStringConvertible {
    public var width: Int
    public var height: Int
    public init(width: Int, height: Int) {
        self.width = width
        self.height = height
    }
    public var description: String { "\(width)x\(height)" }
}

/// Options of ``MediaStream/createRenderer(_:)``.
public struct RendererOptions: Sendable, Hashable {
    public var aspectRatioMode: AspectRatioMode = .automatic
    /// Video goes to no device (a synchronised fake sink): frames are still timed, hooked and
    /// kept for screenshots.
    public var useNullVideoDevice = false
    /// Audio goes to no device.
    public var useNullAudioDevice = false
    /// The render surface's size. With it, video is scaled (and cropped or letterboxed) to exactly
    /// this size in the pipeline; without it, a window sink sizes the video itself and keeps its
    /// aspect ratio for `letterbox` (and for `fill`, which needs the surface's size to crop).
    public var displaySize: Dimensions?
    /// Whether the sinks wait for each frame's time (the playout delay) before taking the next.
    /// Off, frames reach the frame-ready hooks as soon as they are decoded: for a consumer that
    /// times them itself (our `pcastsrc` element hands them to a pipeline whose sink does). With it
    /// on, a hook fires only once the sink has shown the frame before, so a hook that forwards
    /// frames adds the playout delay again (measured: 74 ms instead of 8 ms, a third of the frames
    /// dropped by the branch's leaky queue).
    public var synchronized = true

    public init(aspectRatioMode: AspectRatioMode = .automatic, useNullVideoDevice: Bool = false,
                useNullAudioDevice: Bool = false, displaySize: Dimensions? = nil, synchronized: Bool = true) {
        self.aspectRatioMode = aspectRatioMode
        self.useNullVideoDevice = useNullVideoDevice
        self.useNullAudioDevice = useNullAudioDevice
        self.displaySize = displaySize
        self.synchronized = synchronized
    }
}

/// What ``Renderer/start()`` reports.
public enum RendererStartStatus: Sendable, Hashable, CustomStringConvertible {
    case ok
    /// There is no display to render video to (no `DISPLAY` or `WAYLAND_DISPLAY`); use
    /// `useNullVideoDevice` on headless machines.
    case noDisplay
    /// The renderer is already started.
    case alreadyStarted
    /// The stream has ended.
    case streamEnded
    /// The sinks could not be set up (missing plugin, no audio device…), with the reason.
    case failed(String)

    public var description: String {
        switch self {
        case .ok: return "ok"
        case .noDisplay: return "no display: set DISPLAY, or use useNullVideoDevice"
        case .alreadyStarted: return "already started"
        case .streamEnded: return "the stream has ended"
        case .failed(let why): return "failed: \(why)"
        }
    }
}

/// Where video is shown, reported when the sink is ready to draw.
public enum RenderSurface: Sendable, Hashable {
    /// A window of the display server (an X11 window id).
    case window(handle: UInt64)
    /// No window: the null video device.
    case offscreen
}

/// Shows a ``MediaStream``: decoded video to a video sink, audio to an audio sink.
///
/// ```swift
/// let renderer = stream.createRenderer(RendererOptions(useNullVideoDevice: true))
/// renderer.setVideoDisplayDimensionsChangedCallback { print("now \($0)") }
/// guard await renderer.start() == .ok else { return }
/// let still = try await renderer.lastVideoFrameRendered()
/// try still.pngData().write(to: URL(fileURLWithPath: "still.png"))
/// ```
public final class Renderer: Sendable {
    public let options: RendererOptions
    let stream: MediaStream
    private let id = "renderer-\(UUID().uuidString.prefix(6).lowercased())"
    private let log = SDKLog.logger("pcast.renderer")

    private struct State {
        var branches: [MediaType: Element] = [:]
        var probes: [PadProbe] = []
        var hooks: [MediaType: FrameHook] = [:]
        var lastFrame: (buffer: Buffer, info: VideoInfo)?
        /// When the first frame reached the sink (which shows it at once: see `installVideoProbes`).
        var firstFrameShownAt: ContinuousClock.Instant?
        var info: VideoInfo?
        var dimensions: Dimensions?
        var muted = false
        var surfaceReady: (@Sendable (RenderSurface) -> Void)?
        var dimensionsChanged: (@Sendable (Dimensions) -> Void)?
        var lastFrameReceived: (@Sendable (VideoFrame) -> Void)?
        var busTask: Task<Void, Never>?
        var qualityTask: Task<Void, Never>?
        var dataQualityChanged: (@Sendable (DataQualityStatus, DataQualityReason) -> Void)?
        var started = false
        /// Hands the audio going to the sink to echo cancellers in this process.
        var echoTap: RendererEchoTap?
        /// Its registration with the stream's playout delay (``PlayoutDelay/observe(_:)``).
        var delayObserver: Int?
    }
    private let state = Mutex(State())
    private let serial = AsyncSerial()
    private let qualityEvents = EventBroadcast<DataQuality>()
    private let dimensionEvents = EventBroadcast<Dimensions>()
    private let surfaceEvents = EventBroadcast<RenderSurface>()

    init(stream: MediaStream, options: RendererOptions) {
        self.stream = stream
        self.options = options
    }

    deinit {
        endEvents(closing: true)
        let (branches, probes, task, tap) = state.withLock { ($0.branches, $0.probes, $0.busTask, $0.echoTap) }
        state.withLock { $0.qualityTask }?.cancel()
        if let observer = state.withLock({ $0.delayObserver }) { stream.engine.playoutDelay?.unobserve(observer) }
        probes.forEach { $0.remove() }
        tap?.remove()
        task?.cancel()
        let pipeline = stream.engine.pipeline
        if !branches.isEmpty {
            Task { for branch in branches.values { await pipeline.detach(branch) } }
        }
    }

    // MARK: Callbacks

    /// Called with the viewer's data quality (see ``DataQualityEvaluator``) once a second has been
    /// received after ``start()``, then whenever it changes. Remote streams only.
    public func setDataQualityChangedCallback(_ callback: (@Sendable (DataQualityStatus, DataQualityReason) -> Void)?) {
        state.withLock { $0.dataQualityChanged = callback }
    }

    /// The viewer's data quality as it changes (what ``setDataQualityChangedCallback(_:)`` is
    /// called with), for any number of consumers. Each sequence ends when the renderer stops.
    ///
    /// ```swift
    /// for await quality in renderer.dataQualityChanges where quality.status == .noData { showSpinner() }
    /// ```
    public var dataQualityChanges: AsyncStream<DataQuality> { qualityEvents.stream() }

    /// The video's dimensions whenever they change (the PCast iOS SDK's
    /// ``setVideoDisplayDimensionsChangedCallback(_:)``). Each sequence ends when the renderer stops.
    public var videoDisplayDimensionsChanges: AsyncStream<Dimensions> { dimensionEvents.stream() }

    /// Each surface the sink gets (the PCast iOS SDK's ``setRenderSurfaceReadyCallback(_:)``). Each sequence
    /// ends when the renderer stops.
    public var renderSurfaces: AsyncStream<RenderSurface> { surfaceEvents.stream() }

    /// Ends the event sequences' consumers (`closing`: for good).
    private func endEvents(closing: Bool) {
        qualityEvents.finish(closing: closing)
        dimensionEvents.finish(closing: closing)
        surfaceEvents.finish(closing: closing)
    }

    private func watchDataQuality() {
        guard let receiver = stream.engine as? RTPReceiver else { return }
        let task = Task { [weak self] in
            var evaluator = DataQualityEvaluator()
            var previous = receiver.qualityCounters()
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                guard let self, !Task.isCancelled else { return }
                let now = receiver.qualityCounters()
                let sample = DataQualitySample(hasVideo: now.hasVideo, videoFramesDecoded: now.video - previous.video,
                                               audioBuffersDecoded: now.audio - previous.audio, packetsExpected: now.expected - previous.expected,
                                               packetsMissingOnArrival: now.missing - previous.missing)
                previous = now
                if let (status, reason) = evaluator.evaluate(sample, publisher: self.stream.publisherQuality,
                                                             videoSuspended: self.stream.isVideoSuspended,
                                                             layerReduced: self.stream.isLayerReduced) {
                    self.state.withLock { $0.dataQualityChanged }?(status, reason)
                    self.qualityEvents.yield(DataQuality(status: status, reason: reason))
                }
            }
        }
        state.withLock { $0.qualityTask = task }
    }

    /// Called when the sink has a surface (a window, or `.offscreen` for the null device); may be
    /// called again after the sink is re-created.
    public func setRenderSurfaceReadyCallback(_ callback: (@Sendable (RenderSurface) -> Void)?) {
        state.withLock { $0.surfaceReady = callback }
    }

    /// Called whenever the video's dimensions change (a camera switch, a resolution change).
    public func setVideoDisplayDimensionsChangedCallback(_ callback: (@Sendable (Dimensions) -> Void)?) {
        state.withLock { $0.dimensionsChanged = callback }
    }

    /// Called with the frame ``requestLastVideoFrameRendered()`` asks for.
    public func setLastVideoFrameRenderedReceivedCallback(_ callback: (@Sendable (VideoFrame) -> Void)?) {
        state.withLock { $0.lastFrameReceived = callback }
    }

    /// The video's current dimensions, once known.
    public var videoDimensions: Dimensions? { state.withLock { $0.dimensions } }

    // MARK: Start and stop

    /// Attaches sinks to the stream and starts rendering.
    public func start() async -> RendererStartStatus {
        await serial.run { () async -> RendererStartStatus in await self.startNow() }
    }

    private func startNow() async -> RendererStartStatus {
        if state.withLock({ $0.started }) { return .alreadyStarted }
        if stream.endReason != nil { return .streamEnded }
        let engine = stream.engine
        let videoTee = engine.tee(for: .video)
        let audioTee = engine.tee(for: .audio)
        if videoTee != nil && !options.useNullVideoDevice && !Self.hasDisplay {
            return .noDisplay
        }
        var attached: [MediaType: Element] = [:]
        do {
            if let videoTee {
                let branch = try Element.bin(description: videoBranchDescription(), name: "\(id)-video", ghosting: .sinks)
                try installVideoProbes(branch)
                try await engine.pipeline.attach(branch, after: videoTee)
                attached[.video] = branch
            }
            if let audioTee {
                let branch = try Element.bin(description: audioBranchDescription(), name: "\(id)-audio", ghosting: .sinks)
                try await engine.pipeline.attach(branch, after: audioTee)
                attached[.audio] = branch
                let sinkPad = try child(branch, "\(id)-audio-sink").staticPad("sink")
                let tap = RendererEchoTap(sinkPad: sinkPad, pipeline: engine.pipeline)
                state.withLock { $0.echoTap = tap }
            }
        } catch {
            for branch in attached.values { await engine.pipeline.detach(branch) }
            state.withLock { state in
                state.probes.forEach { $0.remove() }
                state.probes = []
                state.echoTap?.remove()
                state.echoTap = nil
            }
            return .failed(error.description)
        }
        let observer = stream.engine.playoutDelay?.observe { [weak self] delay in self?.resizeQueues(for: delay) }
        let muted = state.withLock { state in
            state.branches = attached
            state.started = true
            state.delayObserver = observer
            return state.muted
        }
        applyMute(muted)
        if attached[.video] != nil { stream.renderer(id, showing: true, displaySize: options.displaySize) }
        watchBus()
        watchDataQuality()
        if attached[.video] != nil, options.useNullVideoDevice {
            state.withLock { $0.surfaceReady }?(.offscreen)
            surfaceEvents.yield(.offscreen)
        }
        return .ok
    }

    /// Detaches the sinks; the stream keeps running for its other consumers.
    public func stop() async {
        await serial.run { () async in
            let (branches, probes, task, tap) = self.state.withLock { state in
                state.qualityTask?.cancel()
                if let observer = state.delayObserver { self.stream.engine.playoutDelay?.unobserve(observer) }
                defer {
                    state.delayObserver = nil
                    state.qualityTask = nil
                    state.branches = [:]
                    state.probes = []
                    state.busTask = nil
                    state.started = false
                    state.echoTap = nil
                }
                return (state.branches, state.probes, state.busTask, state.echoTap)
            }
            task?.cancel()
            probes.forEach { $0.remove() }
            tap?.remove()
            for branch in branches.values { await self.stream.engine.pipeline.detach(branch) }
            if branches[.video] != nil { self.stream.renderer(self.id, showing: false, displaySize: nil) }
            self.endEvents(closing: false)
        }
    }

    public var isStarted: Bool { state.withLock { $0.started } }

    static var hasDisplay: Bool {
        let environment = ProcessInfo.processInfo.environment
        return !(environment["DISPLAY"] ?? "").isEmpty || !(environment["WAYLAND_DISPLAY"] ?? "").isEmpty
    }

    /// How much its queues hold, in time: each frame (and audio buffer) waits at the sink for one
    /// playout delay, so a queue must hold that much and a little more; beyond it (a sink that
    /// cannot keep up) video leaks the oldest frames. A local stream has no playout delay.
    static func queueTimes(playoutDelay: Duration?) -> (video: UInt64, audio: UInt64) {
        let delay = UInt64(max(0, (playoutDelay ?? .zero) / .nanoseconds(1)))
        return (delay + 100_000_000, delay + 200_000_000)
    }

    private func resizeQueues(for delay: Duration) {
        let times = Self.queueTimes(playoutDelay: delay)
        let branches = state.withLock { $0.branches }
        for (kind, time) in [(MediaType.video, times.video), (.audio, times.audio)] {
            guard let queue = branches[kind]?.descendants.first(where: { $0.name == "\(id)-\(kind)-queue" }) else { continue }
            try? queue.set("max-size-time", time)
        }
    }

    private func videoBranchDescription() -> String {
        let time = Self.queueTimes(playoutDelay: stream.engine.playoutDelay?.current).video
        var parts = ["queue name=\(id)-video-queue leaky=downstream max-size-buffers=0 max-size-bytes=0 max-size-time=\(time)",
                     "identity name=\(id)-video-hook", "videoconvert"]
        if let size = options.displaySize {
            switch options.aspectRatioMode {
            case .letterbox:
                parts.append("videoscale add-borders=true")
            case .fill, .automatic:
                parts.append("aspectratiocrop aspect-ratio=\(size.width)/\(size.height)")
                parts.append("videoscale")
            }
            parts.append("video/x-raw,width=\(size.width),height=\(size.height),pixel-aspect-ratio=1/1")
        } else {
            parts.append("videoscale")
        }
        let sync = options.synchronized ? "true" : "false"
        if options.useNullVideoDevice {
            parts.append("fakesink name=\(id)-video-sink sync=\(sync) async=false")
        } else {
            parts.append("autovideosink name=\(id)-video-sink sync=\(sync)")
        }
        return parts.joined(separator: " ! ")
    }

    private func audioBranchDescription() -> String {
        // The queue does not leak: a leaky queue in front of an audio sink lost most of the audio
        // here (measured on a PulseAudio null sink: 10–20 dB less sound, whole seconds of silence),
        // while an audio sink consumes in real time and so never holds the stream back for long.
        // A null audio device plays nothing anyone hears: its queue leaks, so a sink that waits for
        // the clock (a file source decoded ahead of it) can never hold back the demuxer that feeds
        // the video too.
        let sync = options.synchronized ? "true" : "false"
        let sink = options.useNullAudioDevice ? "fakesink sync=\(sync) async=false" : "autoaudiosink sync=\(sync)"
        let leak = options.useNullAudioDevice ? " leaky=downstream" : ""
        let time = Self.queueTimes(playoutDelay: stream.engine.playoutDelay?.current).audio
        return "queue name=\(id)-audio-queue\(leak) max-size-time=\(time) max-size-buffers=0 max-size-bytes=0 ! identity name=\(id)-audio-hook ! audioconvert ! volume name=\(id)-volume ! \(sink) name=\(id)-audio-sink"
    }

    private func installVideoProbes(_ branch: Element) throws(GStreamerError) {
        let hook = try child(branch, "\(id)-video-hook").staticPad("src")
        let sinkPad = try child(branch, "\(id)-video-sink").staticPad("sink")
        let capsProbe = hook.addCapsProbe { [weak self] caps in self?.capsChanged(caps) }
        let framesProbe = sinkPad.addBufferProbe { [weak self] buffer in
            self?.rendered(buffer, caps: nil)
            return .pass
        }
        let sinkCaps = sinkPad.addCapsProbe { [weak self] caps in self?.sinkCapsChanged(caps) }
        // The first frame is shown the moment it reaches the sink, as browsers show theirs: a
        // buffer without timestamps is not waited for. Every later frame waits out the playout
        // delay, so the picture holds the first frame a little longer and then runs on time. Gone
        // after one frame; the branch's pad takes it along if no frame ever came.
        _ = sinkPad.addBufferProbe { buffer in
            buffer.presentationTimestamp = nil
            buffer.decodingTimestamp = nil
            return .remove
        }
        state.withLock { $0.probes = [capsProbe, framesProbe, sinkCaps] }
    }

    private func child(_ branch: Element, _ name: String) throws(GStreamerError) -> Element {
        guard let element = branch.descendants.first(where: { $0.name == name }) else { throw .elementNotFound(name) }
        return element
    }

    private func capsChanged(_ caps: Caps) {
        guard let info = caps.videoInfo else { return }
        let dimensions = Dimensions(width: info.width, height: info.height)
        let callback: (@Sendable (Dimensions) -> Void)? = state.withLock { state in
            guard state.dimensions != dimensions else { return nil }
            state.dimensions = dimensions
            return state.dimensionsChanged
        }
        callback?(dimensions)
        dimensionEvents.yield(dimensions)
    }

    private func sinkCapsChanged(_ caps: Caps) {
        state.withLock { $0.info = caps.videoInfo }
    }

    private func rendered(_ buffer: Buffer, caps: Caps?) {
        state.withLock { state in
            if state.firstFrameShownAt == nil { state.firstFrameShownAt = .now }
            guard let info = state.info else { return }
            state.lastFrame = (buffer, info)
        }
    }

    private func watchBus() {
        let bus = stream.engine.pipeline.bus
        let prefix = id
        let task = Task { [weak self] in
            for await message in bus {
                guard case .element(let structure) = message.kind, structure.name == "have-window-handle" else { continue }
                guard message.source.hasPrefix(prefix) || (self?.ownsSink(named: message.source) ?? false) else { continue }
                var handle: UInt64 = 0
                switch structure["window-handle"] {
                case .uint(let value): handle = value
                case .int(let value): handle = UInt64(clamping: value)
                default: continue
                }
                self?.state.withLock { $0.surfaceReady }?(.window(handle: handle))
                self?.surfaceEvents.yield(.window(handle: handle))
            }
        }
        state.withLock { $0.busTask = task }
    }

    private func ownsSink(named name: String) -> Bool {
        let branch = state.withLock { $0.branches[.video] }
        return branch?.descendants.contains { $0.name == name } ?? false
    }

    // MARK: Playout delay

    /// Sets the stream's playout delay (how long after its arrival each frame is shown, and how long
    /// a lost packet may take to come again) until the returned disposable is released. As the
    /// seed's `limitBandwidth`: the most recent override is in effect, releasing it restores the
    /// stream's default, and releasing one a later override superseded does nothing. A local stream
    /// has no jitter buffer: the override is accepted and changes nothing.
    public func overridePlayoutDelay(_ seconds: Double) -> Disposable {
        guard let delay = stream.engine.playoutDelay else { return Disposable {} }
        return delay.override(.milliseconds(Int64((max(seconds, 0) * 1000).rounded())))
    }

    /// The playout delay in effect (nil for local streams).
    public var playoutDelay: Duration? { stream.engine.playoutDelay?.current }

    // MARK: Audio

    public var isAudioMuted: Bool { state.withLock { $0.muted } }

    public func muteAudio() {
        state.withLock { $0.muted = true }
        applyMute(true)
    }

    public func unmuteAudio() {
        state.withLock { $0.muted = false }
        applyMute(false)
    }

    private func applyMute(_ muted: Bool) {
        guard let branch = state.withLock({ $0.branches[.audio] }),
              let volume = branch.descendants.first(where: { $0.name == "\(id)-volume" }) else { return }
        try? volume.set("mute", muted)
    }

    // MARK: Frames

    /// The last video frame that reached the sink, as rendered (after scaling to ``RendererOptions/displaySize``).
    ///
    /// - Throws: ``MediaError/unsupportedFormat(_:)`` when no frame has been rendered yet.
    public func lastVideoFrameRendered() throws(MediaError) -> VideoFrame {
        guard let (buffer, info) = state.withLock({ $0.lastFrame }) else {
            throw .unsupportedFormat("no video frame has been rendered yet")
        }
        return VideoFrame(storage: buffer.shallowCopy(), format: info.format, width: info.width, height: info.height,
                          strides: info.strides, planeOffsets: info.offsets,
                          presentationTimestamp: buffer.presentationTimestamp, duration: buffer.duration)
    }

    /// The PCast iOS SDK's form: the last frame is passed to the callback set with
    /// ``setLastVideoFrameRenderedReceivedCallback(_:)`` (nothing is called before a first frame).
    public func requestLastVideoFrameRendered() {
        guard let frame = try? lastVideoFrameRendered() else { return }
        state.withLock { $0.lastFrameReceived }?(frame)
    }

    /// When this renderer's first video frame was shown (nil before): the sink shows the first
    /// frame as it arrives, without waiting out the playout delay. For measuring a join.
    package var firstFrameShownAt: ContinuousClock.Instant? { state.withLock { $0.firstFrameShownAt } }

    /// Calls `presented` with each video frame at the moment the sink presents it: after the
    /// sink's clock wait (the playout delay), where a viewer would see it. Read only: the frame is
    /// already shown. For a renderer on the null video device, whose sink is in the pipeline (a
    /// window sink presents through the display server). Runs on the streaming thread: keep it short.
    package func onVideoPresented(_ presented: @escaping @Sendable (VideoFrame) -> Void) throws(MediaError) {
        guard options.useNullVideoDevice else {
            throw .unsupportedPad("presentation is observed on the null video device only (a window sink presents outside the pipeline)")
        }
        guard let branch = state.withLock({ $0.branches[.video] }) else {
            throw .unsupportedPad("start the renderer (with a video track) before observing its presentation")
        }
        guard let sink = branch.descendants.first(where: { $0.name == "\(id)-video-sink" }) else {
            throw .gstreamer(.elementNotFound("\(id)-video-sink"))
        }
        do throws(GStreamerError) {
            try sink.onHandoff { [weak self] buffer in
                guard let info = self?.state.withLock({ $0.info }) else { return }
                presented(VideoFrame(storage: buffer, format: info.format, width: info.width, height: info.height,
                                     strides: info.strides, planeOffsets: info.offsets, presentationTimestamp: nil, duration: nil))
            }
        } catch {
            throw .gstreamer(error)
        }
    }

    /// Calls `callback` with every decoded frame of `track` this renderer shows (after the decoder,
    /// before the sink): read, write or drop it. Only this renderer's output is affected.
    public func setFrameReadyCallback(_ track: MediaStreamTrack, _ callback: FrameReadyCallback?,
                                      options: FrameHook.Options = FrameHook.Options()) throws(MediaError) {
        guard stream.getTracks().contains(where: { $0 === track }) else {
            throw .unsupportedPad("track \(track.id) is not a track of this renderer's stream")
        }
        let hook: FrameHook = try state.withLock { (state: inout State) throws(MediaError) -> FrameHook in
            if let hook = state.hooks[track.kind] { return hook }
            guard let branch = state.branches[track.kind] else {
                throw .unsupportedPad("start the renderer before hooking its \(track.kind) frames")
            }
            guard let element = branch.descendants.first(where: { $0.name == "\(id)-\(track.kind)-hook" }) else {
                throw .gstreamer(.elementNotFound("\(id)-\(track.kind)-hook"))
            }
            let pad: Pad
            do throws(GStreamerError) { pad = try element.staticPad("src") } catch { throw .gstreamer(error) }
            let hook = try FrameHook(pad: pad, options: options)
            state.hooks[track.kind] = hook
            return hook
        }
        hook.setFrameReadyCallback(callback)
    }
}
