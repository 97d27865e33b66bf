import Foundation
import PCastMedia
import PCastProtocol
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// The PCast iOS SDK's PCast Express: one step from a backend URI to publishing and subscribing. Tokens come
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

    /// The underlying PCast, started (the PCast iOS SDK's `getPCast`).
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

    /// Local user media (the PCast iOS SDK's Express getUserMedia).
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
