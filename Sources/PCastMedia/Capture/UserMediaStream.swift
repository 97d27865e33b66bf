import Foundation
import GStreamer
import Logging
import Synchronization

/// Captured local media: the result of ``UserMedia/getUserMedia(_:)``.
///
/// Its ``mediaStream`` feeds renderers (preview) and publishers. ``applyOptions(_:)`` switches
/// the device, size or frame rate while everything that consumes the stream keeps running.
public final class UserMediaStream: Sendable {
    public let mediaStream: MediaStream
    let engine: CaptureEngine
    private let currentOptions: Mutex<UserMediaOptions>
    private let hooks = Mutex<[MediaType: FrameHook]>([:])
    private let switching = AsyncSerial()

    private init(engine: CaptureEngine, options: UserMediaOptions) {
        self.engine = engine
        currentOptions = Mutex(options)
        var tracks: [MediaStreamTrack] = []
        if let video = engine.videoGate { tracks.append(MediaStreamTrack(kind: .video, source: engine.plan.withLock { $0.video?.device }, gate: video)) }
        if let audio = engine.audioGate { tracks.append(MediaStreamTrack(kind: .audio, source: engine.plan.withLock { $0.audio?.device }, gate: audio)) }
        mediaStream = MediaStream(engine: engine, tracks: tracks)
    }

    static func start(engine: CaptureEngine, options: UserMediaOptions) async throws(UserMediaError) -> UserMediaStream {
        let stream = UserMediaStream(engine: engine, options: options)
        engine.ends.attach { [weak stream] reason in stream?.mediaStream.finish(reason) }
        try await engine.start()
        return stream
    }

    /// The options in effect.
    public var options: UserMediaOptions { currentOptions.withLock { $0 } }

    /// The chosen video format (size and rate) and source, when there is video.
    public var videoSelection: VideoSelection? { engine.plan.withLock { $0.video } }
    public var audioSelection: AudioSelection? { engine.plan.withLock { $0.audio } }

    /// Applies new options to the running stream: another device, size or frame rate. Consumers
    /// (renderers, publishers) keep running and renegotiate; `enabled: false` disables the track
    /// (black or silence) rather than removing it.
    ///
    /// - Throws: ``UserMediaError``; on error the stream keeps its previous options.
    public func applyOptions(_ options: UserMediaOptions) async throws(UserMediaError) {
        guard mediaStream.endReason == nil else { throw .stopped }
        try await switching.run { () async throws(UserMediaError) in try await self.applyNow(options) }
    }

    private func applyNow(_ options: UserMediaOptions) async throws(UserMediaError) {
        if options.video.enabled && engine.videoGate == nil {
            throw .invalidOptions("this stream has no video track; get a new stream to add one")
        }
        if options.audio.enabled && engine.audioGate == nil {
            throw .invalidOptions("this stream has no audio track; get a new stream to add one")
        }
        if engine.videoGate != nil, options.video.enabled {
            let selection = try await CapturePlan.selectVideo(options.video)
            try await engine.apply(video: selection)
            mediaStream.getVideoTracks().first?.setSource(selection.device)
        }
        if engine.audioGate != nil, options.audio.enabled {
            let selection = try await CapturePlan.selectAudio(options.audio)
            try await engine.apply(audio: selection)
            mediaStream.getAudioTracks().first?.setSource(selection.device)
        }
        mediaStream.getVideoTracks().first?.setEnabled(options.video.enabled)
        mediaStream.getAudioTracks().first?.setEnabled(options.audio.enabled)
        currentOptions.withLock { $0 = options }
    }

    /// Calls `callback` with every raw frame of `track` before it reaches any consumer (the encoder,
    /// the preview): read, write or drop it. `nil` removes the callback.
    ///
    /// - Throws: ``MediaError/unsupportedPad(_:)`` when the track is not this stream's.
    public func setFrameReadyCallback(_ track: MediaStreamTrack, _ callback: FrameReadyCallback?,
                                      options: FrameHook.Options = FrameHook.Options()) throws(MediaError) {
        guard mediaStream.getTracks().contains(where: { $0 === track }) else {
            throw .unsupportedPad("track \(track.id) is not a track of this stream")
        }
        let hook: FrameHook = try hooks.withLock { (hooks: inout [MediaType: FrameHook]) throws(MediaError) -> FrameHook in
            if let existing = hooks[track.kind] { return existing }
            let made = try FrameHook(pipeline: engine.pipeline, element: track.kind == .video ? "video-hook" : "audio-hook", options: options)
            hooks[track.kind] = made
            return made
        }
        hook.setFrameReadyCallback(callback)
    }

    /// Frame-hook counters for `track` (delivered, dropped because the callback was late…).
    public func frameStatistics(_ track: MediaStreamTrack) -> FrameHook.Statistics? {
        hooks.withLock { $0[track.kind]?.statistics }
    }

    /// Stops capturing and releases the devices.
    public func stop() async {
        await mediaStream.stop()
    }
}

/// Runs async operations one at a time, in call order.
final class AsyncSerial: Sendable {
    private let tail = Mutex<Task<Void, Never>?>(nil)

    func run<T: Sendable, E: Error>(_ body: @escaping @Sendable () async throws(E) -> T) async throws(E) -> T {
        let (previous, result): (Task<Void, Never>?, Task<Result<T, E>, Never>) = tail.withLock { tail in
            let previous = tail
            let task = Task<Result<T, E>, Never> {
                await previous?.value
                do throws(E) { return .success(try await body()) } catch { return .failure(error) }
            }
            tail = Task { _ = await task.value }
            return (previous, task)
        }
        _ = previous
        return try await result.value.get()
    }
}

/// The capture pipeline: source bins in front of the stock user-media chains.
/// Unchecked: GStreamer objects and `Mutex`/atomic state; `endProbes` and `busTask` are set in `start()`, before `stop()` can run.
final class CaptureEngine: StreamEngine, @unchecked Sendable {
    let pipeline: Pipeline
    let plan: Mutex<CapturePlan>
    let videoGate: TrackGate?
    let audioGate: TrackGate?
    private let sources = Mutex<[MediaType: Element]>([:])
    private let stopped = Atomic<Bool>(false)
    private let log = SDKLog.logger("pcast.capture")
    /// Told once when the pipeline ends or fails.
    let ends: EndSignal
    private let firstData = FirstData()
    private var endProbes: [PadProbe] = []
    private let endReported = Atomic<Bool>(false)
    private var busTask: Task<Void, Never>?
    /// The far-end reference of echo cancellation, when the audio track has it.
    let echoReference: EchoReference?

    init(plan: CapturePlan, ends: EndSignal) throws(UserMediaError) {
        self.ends = ends
        var parts: [String] = []
        var reference: EchoReference?
        do {
            if let video = plan.video {
                parts.append(try StockPipelines.template("user-media-video").render(Self.videoValues(video)))
            }
            if let audio = plan.audio {
                var values = ["rate": String(audio.sampleRate), "channels": String(audio.channelCount)]
                if audio.echoCancelation {
                    // The probe must exist before webrtcdsp starts: it looks it up by name then.
                    let echo = try EchoReference(sampleRate: audio.sampleRate)
                    reference = echo
                    values["processing"] = "webrtcdsp name=audio-processing probe=\(echo.probeName) echo-cancel=true "
                        + "noise-suppression=false gain-control=false high-pass-filter=false"
                }
                parts.append(try StockPipelines.template("user-media-audio").render(values))
            }
            pipeline = try Pipeline(description: parts.joined(separator: "\n"), name: "user-media")
        } catch {
            throw UserMediaError.from(error, device: nil)
        }
        // The system clock is also what renderers and echo references run on.
        pipeline.useSystemClock()
        echoReference = reference
        self.plan = Mutex(plan)
        videoGate = plan.video == nil ? nil : TrackGate(kind: .video)
        audioGate = plan.audio == nil ? nil : TrackGate(kind: .audio)
    }

    deinit {
        busTask?.cancel()
        let plan = self.plan.withLock { $0 }
        DevicesInUse.release(plan.video?.device)
        DevicesInUse.release(plan.audio?.device)
    }

    static func videoValues(_ selection: VideoSelection) -> [String: String] {
        ["width": String(selection.width), "height": String(selection.height), "framerate": fraction(selection.frameRate)]
    }

    /// A frame rate as a GStreamer fraction (29.97 → 30000/1001).
    static func fraction(_ rate: Double) -> String {
        if rate == rate.rounded() { return "\(Int(rate))/1" }
        if abs(rate * 1001 - (rate * 1001).rounded()) < 0.5, abs(rate - 30000.0 / 1001) < 0.01 { return "30000/1001" }
        if abs(rate - 60000.0 / 1001) < 0.01 { return "60000/1001" }
        return "\(Int((rate * 1000).rounded()))/1000"
    }

    func tee(for kind: MediaType) -> Element? {
        try? pipeline.element(named: kind == .video ? "video-tee" : "audio-tee")
    }

    /// The source bin's description for a selection.
    static func sourceDescription(_ video: VideoSelection) -> String {
        guard let mode = video.mode else { return video.device.sourceDescription }
        let rate = fraction(video.frameRate)
        if mode.format == "MJPG" {
            return "\(video.device.sourceDescription) ! image/jpeg,width=\(video.width),height=\(video.height),framerate=\(rate) ! jpegdec"
        }
        let format = mode.format == "raw" ? "" : ",format=\(mode.format)"
        return "\(video.device.sourceDescription) ! video/x-raw\(format),width=\(video.width),height=\(video.height),framerate=\(rate)"
    }

    private func makeSource(_ description: String, kind: MediaType, device: SourceDeviceInfo) throws(UserMediaError) -> Element {
        do {
            return try Element.bin(description: description, name: "\(kind)-source-\(UUID().uuidString.prefix(6))", ghosting: .sources)
        } catch {
            throw UserMediaError.from(error, device: device)
        }
    }

    func start() async throws(UserMediaError) {
        let plan = self.plan.withLock { $0 }
        try DevicesInUse.claim(plan.video?.device ?? SourceDeviceInfo(id: "", name: "", mediaType: .video, deviceType: .null, sourceDescription: ""))
        do {
            try DevicesInUse.claim(plan.audio?.device ?? SourceDeviceInfo(id: "", name: "", mediaType: .audio, deviceType: .null, sourceDescription: ""))
        } catch {
            DevicesInUse.release(plan.video?.device)
            throw error
        }
        do {
            // Gates and the first-data watch go on the final-format pads before anything flows.
            var watched: [Pad] = []
            if let video = plan.video, let gate = videoGate {
                let pad = try pipeline.element(named: "video-caps").staticPad("src")
                gate.install(on: pad)
                watched.append(try pipeline.element(named: "video-hook").staticPad("src"))
                try await attachSource(makeSource(Self.sourceDescription(video), kind: .video, device: video.device), kind: .video, device: video.device, offset: false)
            }
            if let audio = plan.audio, let gate = audioGate {
                let pad = try pipeline.element(named: "audio-caps").staticPad("src")
                gate.install(on: pad)
                watched.append(try pipeline.element(named: "audio-hook").staticPad("src"))
                try await attachSource(makeSource(audio.device.sourceDescription, kind: .audio, device: audio.device), kind: .audio, device: audio.device, offset: false)
            }
            firstData.watch(watched)
            watchEnds(watched)
            watchBus()
            do {
                try await pipeline.play(timeout: .seconds(10))
            } catch {
                throw UserMediaError.from(error, device: plan.video?.device ?? plan.audio?.device)
            }
            switch await firstData.wait(timeout: .seconds(10)) {
            case .flowing:
                for kind in plan.looping { loop(kind) }
            case .failed(let error): throw UserMediaError.from(error, device: device(named: error.source, plan: plan))
            case .ended: throw UserMediaError.sourceFailed("the source ended before producing media")
            case .timeout: throw UserMediaError.sourceFailed("no media from the source within 10 s")
            }
            if let echoReference {
                guard let baseTime = pipeline.baseTime else { throw UserMediaError.sourceFailed("the capture pipeline has no base time") }
                do {
                    try await echoReference.start(captureBaseTime: baseTime)
                } catch {
                    throw UserMediaError.from(error, device: plan.audio?.device)
                }
            }
        } catch let error as UserMediaError {
            await stop()
            throw error
        } catch {
            await stop()
            let device = plan.video?.device ?? plan.audio?.device
            throw (error as? GStreamerError).map { UserMediaError.from($0, device: device) } ?? .sourceFailed("\(error)")
        }
    }

    private func device(named source: String, plan: CapturePlan) -> SourceDeviceInfo? {
        source.hasPrefix("audio") ? plan.audio?.device : plan.video?.device ?? plan.audio?.device
    }

    private func attachSource(_ source: Element, kind: MediaType, device: SourceDeviceInfo, offset: Bool) async throws(UserMediaError) {
        do {
            let convert = try pipeline.element(named: kind == .video ? "video-clock" : "audio-clock")
            // Only a source that is not live is paced and restamped: a live one (a camera, a
            // microphone) already runs in real time, and holding its buffers back would delay
            // them (echo cancellation matches capture and far end by the time they arrive).
            let live = Self.isLive(source)
            try convert.set("sync", !live)
            try pipeline.element(named: kind == .video ? "video-timeline" : "audio-timeline").set("single-segment", !live)
            if offset, !live, let running = pipeline.runningTime {
                // A file restarts its timestamps at zero: shift them to now, or the pacer would
                // see every frame as late and let them through at full speed.
                source.pads.filter(\.isSource).forEach { $0.offset = running }
            }
            try await pipeline.attach(source, before: convert)
        } catch {
            throw UserMediaError.from(error, device: device)
        }
        sources.withLock { $0[kind] = source }
        if let feed = plan.withLock({ $0.feeds[kind] }) {
            do {
                feed.attach(try pipeline.appSource(named: feed.appSourceName))
            } catch {
                throw UserMediaError.from(error, device: device)
            }
        }
    }

    /// Whether a source bin produces live media (devices, `is-live=true` test sources).
    static func isLive(_ bin: Element) -> Bool {
        let liveFactories: Set<String> = ["v4l2src", "pulsesrc", "alsasrc", "pipewiresrc", "ximagesrc", "udpsrc", "autovideosrc", "autoaudiosrc"]
        return bin.descendants.contains { element in
            if let factory = element.factoryName, liveFactories.contains(factory) { return true }
            return element.hasProperty("is-live") && ((try? element.property("is-live", as: Bool.self)) ?? false)
        }
    }

    /// Switches the video source and/or format on the running pipeline.
    func apply(video selection: VideoSelection) async throws(UserMediaError) {
        let current = plan.withLock { $0.video }
        guard let current else { return }
        let deviceChanged = current.device.id != selection.device.id || current.mode != selection.mode
            || (selection.mode != nil && (current.width != selection.width || current.height != selection.height || current.frameRate != selection.frameRate))
        if deviceChanged {
            if selection.device.id != current.device.id {
                try DevicesInUse.claim(selection.device)
            }
            let replacement = try makeSource(Self.sourceDescription(selection), kind: .video, device: selection.device)
            if let old = sources.withLock({ $0[.video] }) { await pipeline.detach(old) }
            do {
                try await attachSource(replacement, kind: .video, device: selection.device, offset: true)
            } catch {
                DevicesInUse.release(selection.device)
                throw error
            }
            if selection.device.id != current.device.id { DevicesInUse.release(current.device) }
        }
        do {
            let values = Self.videoValues(selection)
            try pipeline.element(named: "video-caps").set("caps", try Caps("video/x-raw,format=I420,width=\(values["width"]!),height=\(values["height"]!),framerate=\(values["framerate"]!),pixel-aspect-ratio=1/1"))
        } catch {
            throw UserMediaError.from(error, device: selection.device)
        }
        plan.withLock { $0.video = selection }
    }

    func apply(audio selection: AudioSelection) async throws(UserMediaError) {
        let current = plan.withLock { $0.audio }
        guard let current else { return }
        if current.device.id != selection.device.id {
            try DevicesInUse.claim(selection.device)
            let replacement = try makeSource(selection.device.sourceDescription, kind: .audio, device: selection.device)
            if let old = sources.withLock({ $0[.audio] }) { await pipeline.detach(old) }
            do {
                try await attachSource(replacement, kind: .audio, device: selection.device, offset: true)
            } catch {
                DevicesInUse.release(selection.device)
                throw error
            }
            DevicesInUse.release(current.device)
        }
        if current.sampleRate != selection.sampleRate || current.channelCount != selection.channelCount {
            do {
                try pipeline.element(named: "audio-caps").set("caps", try Caps("audio/x-raw,format=S16LE,layout=interleaved,rate=\(selection.sampleRate),channels=\(selection.channelCount)"))
            } catch {
                throw UserMediaError.from(error, device: selection.device)
            }
        }
        plan.withLock { $0.audio = selection }
    }

    private func watchBus() {
        let bus = pipeline.bus
        let firstData = self.firstData
        busTask = Task { [weak self] in
            for await message in bus {
                switch message.kind {
                case .error(let error):
                    firstData.resolve(.failed(error))
                    self?.end(.failed(error.description))
                    return
                case .endOfStream:
                    firstData.resolve(.ended)
                    self?.end(.endOfStream)
                    return
                case .other(let name) where name == "segment-done":
                    // A looping source reached its end: from the start again, time running on.
                    self?.segmentDone(from: message.source)
                default:
                    continue
                }
            }
        }
    }

    /// The `uridecodebin` of the `kind` source, when that source loops.
    private func loopingDecoder(_ kind: MediaType) -> Element? {
        guard plan.withLock({ $0.looping.contains(kind) }), let source = sources.withLock({ $0[kind] }) else { return nil }
        return source.descendants.first { $0.factoryName == "uridecodebin" }
    }

    /// Puts a looping source in segment mode: at its end it posts `segment-done` instead of
    /// ending, and a non-flushing seek continues it without a gap (running time goes on, so the
    /// clock pacing and the encoders downstream see one continuous stream).
    private func loop(_ kind: MediaType) {
        guard let decoder = loopingDecoder(kind) else { return }
        if !decoder.seek(to: .zero, flags: [.segment]) { log.warning("the \(kind) source cannot loop: it does not seek") }
    }

    /// Bins gather their children's `segment-done` and post their own once every looping stream
    /// in them is done, so the one that reaches the bus is usually the pipeline's: then every
    /// looping source starts again.
    private func segmentDone(from element: String) {
        let kinds = plan.withLock { $0.looping }
        let named = kinds.filter { kind in sources.withLock { $0[kind] }?.descendants.contains { $0.name == element } == true }
        for kind in named.isEmpty ? kinds : named { loop(kind) }
    }

    /// A source that plays out (a file, a description that ends) ends the stream once every
    /// track's source has: the end is seen where each track leaves for its consumers, because the
    /// bus's end-of-stream needs every sink, and an RTP branch's never ends.
    private func watchEnds(_ pads: [Pad]) {
        let ended = Mutex(0)
        let count = pads.count
        for pad in pads {
            endProbes.append(pad.onEndOfStream { [weak self] in
                let all = ended.withLock { value -> Bool in
                    value += 1
                    return value == count
                }
                guard all, let self else { return }
                // A source that failed posts its error, then pushes the end-of-stream that
                // reaches here before the bus's reader has seen the error: it failed, not ended.
                if let error = self.pipeline.bus.firstError {
                    self.firstData.resolve(.failed(error))
                    self.end(.failed(error.description))
                } else {
                    self.firstData.resolve(.ended)
                    self.end(.endOfStream)
                }
            })
        }
    }

    private func end(_ reason: MediaStreamEndReason) {
        guard !endReported.exchange(true, ordering: .relaxed) else { return }
        log.info("user media ended: \(reason)")
        ends.fire(reason)
    }

    func stop() async {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        busTask?.cancel()
        videoGate?.remove()
        audioGate?.remove()
        await echoReference?.stop()
        let plan = self.plan.withLock { $0 }
        for feed in plan.feeds.values { feed.detach() }
        await pipeline.stop()
        DevicesInUse.release(plan.video?.device)
        DevicesInUse.release(plan.audio?.device)
    }
}

/// Resolves once the first buffer passes any watched pad, or the pipeline fails or ends first.
final class FirstData: Sendable {
    enum Outcome: Sendable { case flowing, failed(StreamError), ended, timeout }
    private let state = Mutex<(outcome: Outcome?, waiter: CheckedContinuation<Outcome, Never>?, probes: [PadProbe])>((nil, nil, []))

    func watch(_ pads: [Pad]) {
        let probes = pads.map { pad in
            pad.addBufferProbe { [weak self] _ in
                self?.resolve(.flowing)
                return .remove
            }
        }
        state.withLock { $0.probes = probes }
    }

    func resolve(_ outcome: Outcome) {
        let waiter: CheckedContinuation<Outcome, Never>? = state.withLock { state in
            guard state.outcome == nil else { return nil }
            state.outcome = outcome
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: outcome)
    }

    func wait(timeout: Duration) async -> Outcome {
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            self?.resolve(.timeout)
        }
        defer { timer.cancel() }
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
            let ready: Outcome? = state.withLock { state in
                if let outcome = state.outcome { return outcome }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
        let probes = state.withLock { state in defer { state.probes = [] }; return state.probes }
        probes.forEach { $0.remove() }
        return outcome
    }
}
