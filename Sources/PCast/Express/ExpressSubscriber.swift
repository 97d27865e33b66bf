import Foundation
import PCastMedia
import PCastProtocol
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// A subscriber of the Express APIs (the PCast iOS SDK's `PhenixExpressSubscriber`): tracks, renderer,
/// stop, enable/disable. Releasing it stops the subscription.
public final class ExpressSubscriber: Sendable {
    let express: PCastExpress
    public let options: SubscribeOptions
    private struct State {
        var stream: MediaStream?
        var renderer: Renderer?
        var stopped = false
        /// Watches that live as long as the subscription (a member's stream state).
        var kept: [Disposable] = []
        /// The state of the member's stream it follows, applied to each stream it subscribes.
        var followed: (audio: RoomTrackState, video: RoomTrackState)?
    }
    private let state = Mutex(State())

    /// What ``SubscribeOptions/connectOptions`` set, read once when subscribing.
    private let connect: (playoutDelay: Duration?, layer: LayerSelection?)

    init(express: PCastExpress, options: SubscribeOptions, connect: (playoutDelay: Duration?, layer: LayerSelection?)) {
        self.express = express
        self.options = options
        self.connect = connect
    }

    public var streamId: String { options.streamId }
    /// The remote stream (replaced when a retry subscribes again).
    public var mediaStream: MediaStream? { state.withLock { $0.stream } }
    /// The renderer the options asked for (or ``createRenderer(_:)`` made).
    public var renderer: Renderer? { state.withLock { $0.renderer } }
    /// The current remote stream's tracks (none before it is subscribed).
    public var tracks: [MediaStreamTrack] { mediaStream?.tracks ?? [] }
    public var audioTracks: [MediaStreamTrack] { mediaStream?.audioTracks ?? [] }
    public var videoTracks: [MediaStreamTrack] { mediaStream?.videoTracks ?? [] }
    /// The PCast iOS SDK's spelling of ``tracks``.
    public func getTracks() -> [MediaStreamTrack] { tracks }
    /// The PCast iOS SDK's spelling of ``audioTracks``.
    public func getAudioTracks() -> [MediaStreamTrack] { audioTracks }
    /// The PCast iOS SDK's spelling of ``videoTracks``.
    public func getVideoTracks() -> [MediaStreamTrack] { videoTracks }

    func connect() async throws(PCastError) {
        let pcast = try await express.pcast()
        let token: String
        if let given = options.streamToken { token = given } else {
            token = try await express.streamToken(streamId: options.streamId, capabilities: options.capabilities)
        }
        let stream = try await pcast.subscribe(streamToken: token, playoutDelay: options.playoutDelay ?? connect.playoutDelay,
                                               layer: connect.layer ?? .adaptive, tags: options.tags)
        let rendererOptions = state.withLock { $0.renderer?.options } ?? options.renderer
        var renderer: Renderer?
        if let rendererOptions {
            renderer = stream.createRenderer(rendererOptions)
            _ = await renderer?.start()
        }
        let (stopped, old) = state.withLock { state -> (Bool, Renderer?) in
            guard !state.stopped else { return (true, nil) }
            let old = state.renderer
            state.stream = stream
            if let renderer { state.renderer = renderer }
            return (false, old)
        }
        await old?.stop()
        if stopped {
            await renderer?.stop()
            await stream.stop()
            return
        }
        stream.setStreamEndedCallback { [weak self] reason in self?.ended(stream, reason) }
        // A stream subscribed again (monitor retry) starts as the member's stream state says.
        if let followed = state.withLock({ $0.followed }) { follow(audio: followed.audio, video: followed.video) }
    }

    func keep(_ disposable: Disposable) {
        state.withLock { $0.kept.append(disposable) }
    }

    /// Enables or disables the tracks as the publishing member's stream says.
    func follow(audio: RoomTrackState, video: RoomTrackState) {
        let stream = state.withLock { state in
            state.followed = (audio, video)
            return state.stream
        }
        stream?.getAudioTracks().forEach { $0.setEnabled(audio == .enabled) }
        stream?.getVideoTracks().forEach { $0.setEnabled(video == .enabled) }
    }

    private func ended(_ stream: MediaStream, _ reason: MediaStreamEndReason) {
        guard state.withLock({ !$0.stopped && $0.stream === stream }), let streamEnded = options.monitor?.streamEnded else { return }
        let (platformReason, description): (StreamEndedReason, String?)
        switch reason {
        case .remote(let why, let text): (platformReason, description) = (why, text)
        case .stopped, .endOfStream: (platformReason, description) = (.ended, nil)
        case .failed(let text): (platformReason, description) = (.failed, text)
        }
        let retry: OptionalAction
        if platformReason == .failed || platformReason == .maintenance || platformReason == .capacity {
            retry = OptionalAction { [weak self] perform in
                guard perform, let self else { return }
                Task { try? await self.express.withSetupRetry(self.options.monitor) { () async throws(PCastError) in try await self.connect() } }
            }
        } else {
            retry = .absent
        }
        streamEnded(platformReason, description, retry)
    }

    /// A renderer for the stream (when the options asked for none).
    public func createRenderer(_ options: RendererOptions = RendererOptions()) -> Renderer? {
        guard let stream = mediaStream else { return nil }
        let renderer = stream.createRenderer(options)
        state.withLock { $0.renderer = renderer }
        return renderer
    }

    /// Stops the subscription (the stream ends as stopped).
    public func stop() async {
        let (stream, renderer) = state.withLock { state in
            state.stopped = true
            state.kept = []
            return (state.stream, state.renderer)
        }
        await renderer?.stop()
        await stream?.stop()
    }

    public func enableAudio() { getAudioTracks().forEach { $0.setEnabled(true) } }
    public func disableAudio() { getAudioTracks().forEach { $0.setEnabled(false) } }
    public func enableVideo() { getVideoTracks().forEach { $0.setEnabled(true) } }
    public func disableVideo() { getVideoTracks().forEach { $0.setEnabled(false) } }

    deinit {
        let (stream, renderer, stopped) = state.withLock { ($0.stream, $0.renderer, $0.stopped) }
        guard !stopped else { return }
        Task {
            await renderer?.stop()
            await stream?.stop()
        }
    }
}
