import Foundation
import PCastMedia
import PCastProtocol
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// A publisher of the Express APIs (the PCast iOS SDK's `PhenixExpressPublisher`): stop, enable/disable
/// audio and video, the stream id, the preview renderer. Releasing it stops publishing.
public final class ExpressPublisher: Sendable {
    let express: PCastExpress
    public let media: UserMediaStream
    let options: PublishOptions
    let ownsMedia: Bool
    private struct State {
        var publisher: Publisher?
        var preview: Renderer?
        var stopped = false
        var endedCallbacks: [@Sendable (StreamEndedReason, String?) -> Void] = []
        var republishedCallbacks: [@Sendable (String) -> Void] = []
        var dataQualityCallback: (@Sendable (DataQualityStatus, DataQualityReason) -> Void)?
        var trackStateCallbacks: [@Sendable (MediaType, Bool) -> Void] = []
    }
    private let state = Mutex(State())
    /// Limits survive republishing (monitor/retry): each new publisher gets the one in effect.
    private let bandwidth = Mutex<BandwidthLimiter?>(nil)

    init(express: PCastExpress, media: UserMediaStream, options: PublishOptions, ownsMedia: Bool) {
        self.express = express
        self.media = media
        self.options = options
        self.ownsMedia = ownsMedia
    }

    /// The current stream id (a retry after a failure publishes a new stream).
    public var streamId: String { state.withLock { $0.publisher?.streamId ?? "" } }
    public var hasEnded: Bool { state.withLock { $0.stopped || ($0.publisher?.hasEnded ?? true) } }
    /// The local preview, when one was asked for.
    public internal(set) var preview: Renderer? {
        get { state.withLock { $0.preview } }
        set { state.withLock { $0.preview = newValue } }
    }
    /// The underlying low-level publisher.
    public var publisher: Publisher? { state.withLock { $0.publisher } }

    /// Called when a stream of this publisher ends (each time, with its reason).
    public func setPublisherEndedCallback(_ callback: @escaping @Sendable (StreamEndedReason, String?) -> Void) {
        state.withLock { $0.endedCallbacks.append(callback) }
    }

    /// Called with the new stream id each time a retry (``MonitorOptions/streamEnded``) has
    /// published again: a room's member offers the new stream instead.
    func setRepublishedCallback(_ callback: @escaping @Sendable (String) -> Void) {
        state.withLock { $0.republishedCallbacks.append(callback) }
    }

    /// Called with the publisher's data quality (see ``Publisher/setDataQualityChangedCallback(_:)``);
    /// it carries over to the stream published again after a failure (monitor retry).
    public func setDataQualityChangedCallback(_ callback: (@Sendable (DataQualityStatus, DataQualityReason) -> Void)?) {
        let publisher = state.withLock { state in
            state.dataQualityCallback = callback
            return state.publisher
        }
        publisher?.setDataQualityChangedCallback(callback)
    }

    /// Called when the application enables or disables the audio or video it publishes: a room's
    /// member updates its stream's state for the other members.
    func setTrackStateCallback(_ callback: @escaping @Sendable (MediaType, Bool) -> Void) {
        state.withLock { $0.trackStateCallbacks.append(callback) }
    }

    func connect() async throws(PCastError) {
        let pcast = try await express.pcast()
        let token: String
        if let given = options.streamToken {
            token = given
        } else {
            token = try await express.publishToken(capabilities: options.capabilities, tags: options.tags,
                                                   streamName: options.publishType == .live ? nil : options.streamName)
        }
        let publisher = try await pcast.publish(streamToken: token, mediaStream: media, tags: options.tags, settings: options.settings,
                                                publishType: options.publishType, streamName: options.streamName)
        let (stopped, republished) = state.withLock { state -> (Bool, [@Sendable (String) -> Void]) in
            let again = state.publisher != nil
            if !state.stopped { state.publisher = publisher }
            return (state.stopped, again ? state.republishedCallbacks : [])
        }
        if stopped {
            await publisher.stop()
            return
        }
        publisher.setPublisherEndedCallback { [weak self] reason, description in
            self?.ended(publisher, reason, description)
        }
        bandwidth.withLock { $0 }?.reapply()
        if let quality = state.withLock({ $0.dataQualityCallback }) { publisher.setDataQualityChangedCallback(quality) }
        for callback in republished { callback(publisher.streamId) }
    }

    /// Publishes again after a failure. The failure may be its node going away: the SDK is then
    /// moving to another node, so this waits until it is online again, and tries again while
    /// what failed is the connection (a node that stopped while the request was on its way).
    private func publishAgain() async throws(PCastError) {
        let pcast = try await express.pcast()
        let deadline = ContinuousClock.now + Self.republishLimit
        while true {
            _ = await pcast.waitUntilOnline(until: deadline)
            do throws(PCastError) {
                return try await connect()
            } catch where [.offline, .disconnected, .connectionFailed, .timeout].contains(error.code) && ContinuousClock.now < deadline {
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// How long ``publishAgain()`` waits for a connection to publish on.
    static let republishLimit: Duration = .seconds(30)

    /// Limits the published video bitrate (bits per second) until the returned disposable is
    /// released, with ``Publisher/limitBandwidth(_:)``'s rules; the limit carries over to the
    /// stream published again after a failure.
    public func limitBandwidth(_ bitsPerSecond: Int) -> Disposable {
        let limiter = bandwidth.withLock { limiter in
            if let limiter { return limiter }
            let created = BandwidthLimiter { [weak self] bitsPerSecond in
                self?.state.withLock { $0.publisher }?.applyVideoBitrateLimit(bitsPerSecond)
            }
            limiter = created
            return created
        }
        return limiter.limit(bitsPerSecond)
    }

    private func ended(_ publisher: Publisher, _ reason: StreamEndedReason, _ description: String?) {
        let (callbacks, stopped) = state.withLock { ($0.endedCallbacks, $0.stopped) }
        for callback in callbacks { callback(reason, description) }
        guard !stopped, let streamEnded = options.monitor?.streamEnded else { return }
        let retry: OptionalAction
        if reason == .failed || reason == .maintenance || reason == .capacity {
            retry = OptionalAction { [weak self] perform in
                guard perform, let self else { return }
                Task { try? await self.express.withSetupRetry(self.options.monitor) { () async throws(PCastError) in try await self.publishAgain() } }
            }
        } else {
            retry = .absent
        }
        streamEnded(reason, description, retry)
    }

    /// Stops publishing; subscribers get `ended` (or `custom` with a reason of your own).
    public func stop(reason: String? = nil) async {
        let (publisher, preview) = state.withLock { state in
            state.stopped = true
            return (state.publisher, state.preview)
        }
        if let reason { await publisher?.stop(reason: .custom, description: reason) } else { await publisher?.stop() }
        await preview?.stop()
        if ownsMedia { await media.stop() }
    }

    /// Sends the audio again (published to a room: the member's stream says `enabled`).
    public func enableAudio() { setEnabled(true, .audio) }
    /// Silence (published to a room: the member's stream says `disabled`).
    public func disableAudio() { setEnabled(false, .audio) }
    /// Sends the video again (published to a room: the member's stream says `enabled`).
    public func enableVideo() { setEnabled(true, .video) }
    /// Black frames (published to a room: the member's stream says `disabled`).
    public func disableVideo() { setEnabled(false, .video) }

    private func setEnabled(_ enabled: Bool, _ kind: MediaType) {
        (kind == .audio ? media.mediaStream.getAudioTracks() : media.mediaStream.getVideoTracks()).forEach { $0.setEnabled(enabled) }
        for callback in state.withLock({ $0.trackStateCallbacks }) { callback(kind, enabled) }
    }

    deinit {
        let (publisher, preview, stopped) = state.withLock { ($0.publisher, $0.preview, $0.stopped) }
        guard !stopped else { return }
        let media = self.media, owns = ownsMedia
        Task {
            await publisher?.stop()
            await preview?.stop()
            if owns { await media.stop() }
        }
    }
}
