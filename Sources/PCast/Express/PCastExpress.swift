public import Foundation
import PCastMedia
import PCastProtocol
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// Options of ``PCastExpress`` (the seed's `PCastExpressOptionsBuilder`).
public struct PCastExpressOptions: Sendable {
    /// The application backend: tokens come from its ``authenticationRoute`` and ``streamRoute``.
    public var backendURI: URL
    /// A JSON object sent (with the request's fields added) on every backend request.
    public var authenticationData: String?
    /// An auth token to use instead of asking the backend (once; later ones come from the backend).
    public var authenticationToken: String?
    /// The platform's signaling URI; when nil, the one the backend's auth route names.
    public var pcastURI: String?
    /// Options for the underlying ``PCast`` (its `uri` is replaced by the resolved platform URI).
    public var pcastOptions: PCastOptions?
    public var authenticationRoute = BackendAPI.authenticationRoute
    public var streamRoute = BackendAPI.streamRoute
    /// Room roles asked of the backend for this client's session.
    public var roles: [MemberRole] = []
    /// Called when authentication fails for good (the backend or platform refuses the client).
    public var unrecoverableErrorCallback: (@Sendable (RequestStatus, String) -> Void)?

    public init(backendURI: URL, authenticationData: String? = nil, authenticationToken: String? = nil, pcastURI: String? = nil,
                roles: [MemberRole] = [], unrecoverableErrorCallback: (@Sendable (RequestStatus, String) -> Void)? = nil) {
        self.backendURI = backendURI
        self.authenticationData = authenticationData
        self.authenticationToken = authenticationToken
        self.pcastURI = pcastURI
        self.roles = roles
        self.unrecoverableErrorCallback = unrecoverableErrorCallback
    }
}

/// An action that may or may not be possible (the seed's `PhenixOptionalAction`): a monitor's
/// retry. ``perform()`` or ``dismiss()`` decide; releasing it undecided dismisses it.
///
/// ```swift
/// if retry.isPresent { retry.perform() } else { retry.dismiss() }
/// ```
public final class OptionalAction: Sendable {
    /// In a struct: a closure that is itself a `Mutex`'s value gains a reabstraction thunk on every
    /// `withLock` (see `FrameHookCore.callback`).
    private struct Slot: Sendable { var decided: (@Sendable (Bool) -> Void)? }
    private let action: Mutex<Slot>

    /// An action that runs `decided(true)` on perform and `decided(false)` on dismiss (or release).
    init(_ decided: (@Sendable (Bool) -> Void)?) {
        action = Mutex(Slot(decided: decided))
    }

    /// No action possible (a stream that ended normally).
    static var absent: OptionalAction { OptionalAction(nil) }

    public var isPresent: Bool { action.withLock { $0.decided != nil } }

    /// Performs the action.
    ///
    /// - Throws: ``PCastError/invalidRequest(_:)`` when there is none (``isPresent`` is false).
    public func perform() throws(PCastError) {
        guard let action = action.withLock({ slot in defer { slot.decided = nil }; return slot.decided }) else {
            throw .invalidRequest("there is no action to perform")
        }
        action(true)
    }

    /// Gives the action up; can be called any number of times.
    public func dismiss() {
        action.withLock { slot in defer { slot.decided = nil }; return slot.decided }?(false)
    }

    deinit { dismiss() }
}

/// Monitor callbacks for an Express publisher or subscriber (the seed's `withMonitor`).
///
/// `setupFailed` is called when the stream cannot be set up; performing its retry tries again
/// (the call that was setting up waits for the decision), dismissing it makes the call throw.
/// `streamEnded` is called whenever the stream ends; for a failure its retry sets the stream up
/// again in the same publisher/subscriber, for a normal end there is no retry.
public struct MonitorOptions: Sendable {
    public var setupFailed: (@Sendable (RequestStatus, OptionalAction) -> Void)?
    public var streamEnded: (@Sendable (StreamEndedReason, String?, OptionalAction) -> Void)?

    public init(setupFailed: (@Sendable (RequestStatus, OptionalAction) -> Void)? = nil,
                streamEnded: (@Sendable (StreamEndedReason, String?, OptionalAction) -> Void)? = nil) {
        self.setupFailed = setupFailed
        self.streamEnded = streamEnded
    }
}

/// Options of ``PCastExpress/publish(_:)`` (the seed's `PublishOptionsBuilder`).
public struct PublishOptions: Sendable {
    /// Constraints for getUserMedia (ignored when ``userMedia`` is given).
    public var mediaConstraints = UserMediaOptions()
    /// Media to publish instead of getting user media.
    public var userMedia: UserMediaStream?
    public var capabilities: [String] = []
    /// Options of a local preview renderer; nil: no preview.
    public var previewRenderer: RendererOptions?
    public var monitor: MonitorOptions?
    public var tags: [String] = []
    /// A publish token to use instead of asking the backend.
    public var streamToken: String?
    public var settings = EncodingSettings()
    /// `name=value` options that set ``settings`` (see the connect options: `bitrate=…`,
    /// `keyframe-interval=…`, `audio-bitrate=…`); anything else is refused.
    public var connectOptions: [String] = []
    public var publishType: PublishType = .live
    public var streamName: String?

    public init(mediaConstraints: UserMediaOptions = UserMediaOptions(), userMedia: UserMediaStream? = nil, capabilities: [String] = [],
                previewRenderer: RendererOptions? = nil, monitor: MonitorOptions? = nil, tags: [String] = [], streamToken: String? = nil) {
        self.mediaConstraints = mediaConstraints
        self.userMedia = userMedia
        self.capabilities = capabilities
        self.previewRenderer = previewRenderer
        self.monitor = monitor
        self.tags = tags
        self.streamToken = streamToken
    }
}

/// Options of ``PCastExpress/publishRemote(_:)`` (the seed's `PublishRemoteOptionsBuilder`).
public struct PublishRemoteOptions: Sendable, Hashable {
    public var streamURI: String
    public var capabilities: [String] = []
    public var streamToken: String?
    public var connectOptions: [String] = []
    public var tags: [String] = []
    public var maximumFrameRate: Double?
    public var exactFrameRate: Double?
    public var prerollSkipDuration: Duration = .milliseconds(500)

    public init(streamURI: String, capabilities: [String] = [], tags: [String] = []) {
        self.streamURI = streamURI
        self.capabilities = capabilities
        self.tags = tags
    }
}

/// Options of ``PCastExpress/subscribe(_:)`` (the seed's `SubscribeOptionsBuilder`).
public struct SubscribeOptions: Sendable {
    public var streamId: String
    public var capabilities: [String] = []
    /// A stream token to use instead of asking the backend (a wildcard token from a room stream URI).
    public var streamToken: String?
    /// Options of a renderer to create and start; nil: none (``ExpressSubscriber/createRenderer(_:)`` makes one later).
    public var renderer: RendererOptions?
    public var monitor: MonitorOptions?
    /// The application's tags for this subscription (who watches, from where): kept with it at the
    /// platform and told to the backend with the viewer's notifications.
    public var tags: [String] = []
    public var playoutDelay: Duration?
    /// `name=value` options (`playout-delay=<ms>`, `layer=<adaptive|best|lowest|RID>`); anything
    /// else is refused. ``playoutDelay`` wins over `playout-delay`.
    public var connectOptions: [String] = []

    public init(streamId: String, capabilities: [String] = [], streamToken: String? = nil, renderer: RendererOptions? = nil,
                monitor: MonitorOptions? = nil) {
        self.streamId = streamId
        self.capabilities = capabilities
        self.streamToken = streamToken
        self.renderer = renderer
        self.monitor = monitor
    }
}

/// The seed's PCast Express: one step from a backend URI to publishing and subscribing. Tokens come
/// from the application backend (``PCastExpressOptions/backendURI``); the underlying ``PCast`` is
/// created and started on first use and shared (``pcast()``).
///
/// ```swift
/// let express = PCastExpress(PCastExpressOptions(backendURI: URL(string: "http://127.0.0.1:8080/backend/")!))
/// let publisher = try await express.publish(PublishOptions(capabilities: ["real-time"]))
/// let subscriber = try await express.subscribe(SubscribeOptions(streamId: publisher.streamId,
///                                                               renderer: RendererOptions(useNullVideoDevice: true)))
/// ```
public final class PCastExpress: Sendable {
    public let options: PCastExpressOptions
    private struct State {
        var pcast: PCast?
        var starting: Task<PCast, any Error>?
        /// Whether ``PCastExpressOptions/authenticationToken`` was used (it is used once).
        var givenTokenUsed = false
    }
    private let state = Mutex(State())

    public init(_ options: PCastExpressOptions) {
        self.options = options
    }

    /// The underlying PCast, started (the seed's `getPCast`).
    ///
    /// - Throws: the backend's or platform's refusal; ``PCastError/connectionFailed(_:)`` when
    ///   either cannot be reached. Refusals also go to the unrecoverable-error callback.
    public func pcast() async throws(PCastError) -> PCast {
        let task = state.withLock { state -> Task<PCast, any Error> in
            // A session that ended for good (its token refused on reconnecting, and no new one)
            // is replaced by a new one rather than failing every later call as not started.
            if let current = state.pcast, current.state.withLock({ $0.machine.isStopped }) {
                state.pcast = nil
                state.starting = nil
            }
            if let starting = state.starting { return starting }
            let task = Task<PCast, any Error> { try await self.startPCast() }
            state.starting = task
            return task
        }
        do {
            return try await task.value
        } catch {
            state.withLock { $0.starting = nil }
            let failure = error as? PCastError ?? .connectionFailed("\(error)")
            if failure.code == .refused { options.unrecoverableErrorCallback?(failure.status, failure.detail) }
            throw failure
        }
    }

    private func startPCast() async throws(PCastError) -> PCast {
        var token = state.withLock { state in
            defer { state.givenTokenUsed = true }
            return state.givenTokenUsed ? nil : options.authenticationToken
        }
        var uri = options.pcastURI
        if token == nil || uri == nil {
            let reply = try await authenticationReply()
            token = token ?? reply.authenticationToken
            uri = uri ?? reply.pcastUri
        }
        guard let token else { throw .refused(.failed, "the backend gave no authentication token") }
        guard let uri else { throw .invalidURI("no platform URI: the backend named none and none was given") }
        var pcastOptions = options.pcastOptions ?? PCastOptions(uri: uri)
        pcastOptions.uri = uri
        let pcast = PCast(pcastOptions)
        // A token that expires during an outage is replaced from the backend, and the session
        // resumes; when the backend refuses, the application hears it as unrecoverable.
        pcast.setAuthenticationTokenProvider { [weak self] in
            guard let self else { throw PCastError.notStarted }
            do throws(PCastError) {
                return try await self.authenticationToken()
            } catch {
                self.options.unrecoverableErrorCallback?(error.status, error.detail)
                throw error
            }
        }
        try await pcast.start(authToken: token)
        state.withLock { $0.pcast = pcast }
        return pcast
    }

    /// The backend's authentication route's answer (an auth token, perhaps the platform's URI)
    /// for this client's roles.
    private func authenticationReply() async throws(PCastError) -> BackendAPI.TokenReply {
        try await backend(options.authenticationRoute, .init(capabilities: nil, roles: options.roles.isEmpty ? nil : options.roles.map(\.rawValue)))
    }

    /// A new auth token from the backend's authentication route.
    private func authenticationToken() async throws(PCastError) -> String {
        guard let token = try await authenticationReply().authenticationToken else { throw .refused(.failed, "the backend gave no authentication token") }
        return token
    }

    /// Stops the underlying PCast.
    public func shutdown() async {
        let pcast = state.withLock { state -> PCast? in
            defer { state.pcast = nil; state.starting = nil }
            return state.pcast
        }
        await pcast?.shutdown()
    }

    deinit {
        if let pcast = state.withLock({ $0.pcast }) { Task { await pcast.shutdown() } }
    }

    // MARK: Backend

    /// A publish token from the backend; `streamName` asks for the right to record under that name.
    public func publishToken(capabilities: [String], tags: [String] = [], streamName: String? = nil) async throws(PCastError) -> String {
        let pcast = try await self.pcast()
        let reply = try await backend(options.streamRoute, .init(type: "publish", sessionId: pcast.sessionId, capabilities: capabilities,
                                                                 applyTags: tags.isEmpty ? nil : tags, streamName: streamName))
        guard let token = reply.streamToken else { throw .refused(.failed, "the backend gave no stream token") }
        return token
    }

    /// A stream (subscribe) token from the backend for one stream.
    public func streamToken(streamId: String, capabilities: [String]) async throws(PCastError) -> String {
        let pcast = try await self.pcast()
        let reply = try await backend(options.streamRoute, .init(type: "stream", sessionId: pcast.sessionId, capabilities: capabilities,
                                                                 originStreamId: streamId))
        guard let token = reply.streamToken else { throw .refused(.failed, "the backend gave no stream token") }
        return token
    }

    private func backend(_ route: String, _ request: BackendAPI.TokenRequest) async throws(PCastError) -> BackendAPI.TokenReply {
        let url = options.backendURI.appendingPathComponent(route)
        let body: Data
        do { body = try BackendAPI.body(authenticationData: options.authenticationData, request: request) } catch {
            throw .invalidRequest(error.description)
        }
        let data: Data, code: Int
        let trust = options.pcastOptions.map { SignalingTrust($0) } ?? SignalingTrust()
        if trust.isCustom {
            // A private CA (PCastOptions.certificateAuthorityFile): URLSession cannot be told one.
            let answer = try await HTTPSExchange(trust: trust).send("POST", url, headers: [("Content-Type", "application/json")], body: body)
            (data, code) = (answer.body, answer.status)
        } else {
            var http = URLRequest(url: url, timeoutInterval: 10)
            http.httpMethod = "POST"
            http.setValue("application/json", forHTTPHeaderField: "Content-Type")
            http.httpBody = body
            let response: URLResponse
            do {
                (data, response) = try await URLSession.shared.data(for: http)
            } catch {
                throw .connectionFailed("backend \(url.absoluteString): \(error.localizedDescription)")
            }
            code = (response as? HTTPURLResponse)?.statusCode ?? 0
        }
        guard let reply = try? JSONDecoder().decode(BackendAPI.TokenReply.self, from: data) else {
            throw .refused(code == 401 || code == 403 ? .unauthorized : .failed, "backend \(url.absoluteString) answered HTTP \(code) without a token reply")
        }
        guard reply.status == .ok, (200..<300).contains(code) else {
            throw .refused(reply.status == .ok ? .failed : reply.status, reply.message ?? "backend refused (HTTP \(code))")
        }
        return reply
    }

    // MARK: Media

    /// Local user media (the seed's Express getUserMedia).
    public func getUserMedia(_ options: UserMediaOptions = UserMediaOptions()) async throws(UserMediaError) -> UserMediaStream {
        try await UserMedia.getUserMedia(options)
    }

    /// Publishes local media (user media from the constraints, or the given stream), with a
    /// preview renderer when ``PublishOptions/previewRenderer`` is set.
    public func publish(_ options: PublishOptions) async throws(PCastError) -> ExpressPublisher {
        var options = options
        options.settings = try ConnectOptions.publish(options.connectOptions, onto: options.settings)
        let media: UserMediaStream
        if let given = options.userMedia {
            media = given
        } else {
            do { media = try await UserMedia.getUserMedia(options.mediaConstraints) } catch {
                throw .refused(error.status, error.description)
            }
        }
        let publisher = ExpressPublisher(express: self, media: media, options: options, ownsMedia: options.userMedia == nil)
        try await withSetupRetry(options.monitor) { () async throws(PCastError) in try await publisher.connect() }
        if let preview = options.previewRenderer {
            let renderer = media.mediaStream.createRenderer(preview)
            _ = await renderer.start()
            publisher.preview = renderer
        }
        return publisher
    }

    /// Has the platform pull a remote source (mp4 / rtmp / rtsp URI) and publish it; the publish
    /// token comes from the backend unless given.
    public func publishRemote(_ options: PublishRemoteOptions) async throws(PCastError) -> RemotePublisher {
        let pcast = try await self.pcast()
        let token: String
        if let given = options.streamToken { token = given } else { token = try await publishToken(capabilities: options.capabilities, tags: options.tags) }
        return try await pcast.publishRemote(.init(
            streamToken: token, streamURI: options.streamURI, capabilities: options.capabilities, tags: options.tags,
            connectOptions: options.connectOptions, maximumFrameRate: options.maximumFrameRate, exactFrameRate: options.exactFrameRate,
            prerollSkipMilliseconds: Int(options.prerollSkipDuration / .milliseconds(1))))
    }

    /// Subscribes to a stream, with a started renderer when ``SubscribeOptions/renderer`` is set.
    public func subscribe(_ options: SubscribeOptions) async throws(PCastError) -> ExpressSubscriber {
        let subscriber = ExpressSubscriber(express: self, options: options, connect: try ConnectOptions.subscribe(options.connectOptions))
        try await withSetupRetry(options.monitor) { () async throws(PCastError) in try await subscriber.connect() }
        return subscriber
    }

    /// Runs `setup`; on failure asks the monitor (if any) whether to retry and waits for its decision.
    func withSetupRetry(_ monitor: MonitorOptions?, _ setup: () async throws(PCastError) -> Void) async throws(PCastError) {
        while true {
            do throws(PCastError) {
                try await setup()
                return
            } catch {
                guard let setupFailed = monitor?.setupFailed else { throw error }
                let retry = await withCheckedContinuation { (decision: CheckedContinuation<Bool, Never>) in
                    setupFailed(error.status, OptionalAction { decision.resume(returning: $0) })
                }
                if !retry { throw error }
            }
        }
    }
}

/// A publisher of the Express APIs (the seed's `PhenixExpressPublisher`): stop, enable/disable
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

/// A subscriber of the Express APIs (the seed's `PhenixExpressSubscriber`): tracks, renderer,
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
    /// The seed's spelling of ``tracks``.
    public func getTracks() -> [MediaStreamTrack] { tracks }
    /// The seed's spelling of ``audioTracks``.
    public func getAudioTracks() -> [MediaStreamTrack] { audioTracks }
    /// The seed's spelling of ``videoTracks``.
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
