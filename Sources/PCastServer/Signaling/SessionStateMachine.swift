import Foundation
import PCastProtocol

/// WebSocket close codes the platform uses.
///
/// ```swift
/// SignalingCloseCode.messageTooLarge.rawValue // 1009
/// ```
public enum SignalingCloseCode: UInt16, Sendable, Hashable {
    /// `bye`, or the session otherwise ended in order.
    case normal = 1000
    /// The platform is shutting down.
    case goingAway = 1001
    /// No message within the keep-alive timeout.
    case policyViolation = 1008
    /// A message over the size limit (also after decompression).
    case messageTooLarge = 1009
}

/// How a session ended; decides what happens to the streams it published (see ``StreamRegistry``).
///
/// ```swift
/// SessionEnd.bye.streamEndedReason // .ended
/// ```
public enum SessionEnd: Sendable, Hashable {
    /// The client said `bye`.
    case bye
    /// The socket closed without a `bye`.
    case connectionLost
    /// No message within the keep-alive timeout.
    case keepAliveTimeout
    /// The client sent a message over the size limit.
    case messageTooLarge
    /// The platform is shutting down.
    case serverShutdown

    /// Why the streams of a publisher whose session ended this way end: an orderly `bye` ends
    /// them as `ended`, platform shutdown as `maintenance`, everything else as `failed`.
    public var streamEndedReason: StreamEndedReason {
        switch self {
        case .bye: return .ended
        case .serverShutdown: return .maintenance
        case .connectionLost, .keepAliveTimeout, .messageTooLarge: return .failed
        }
    }

    /// The description that goes with ``streamEndedReason``.
    public var streamEndedDescription: String {
        switch self {
        case .bye: return "the publisher's session ended"
        case .connectionLost: return "the publisher's connection was lost"
        case .keepAliveTimeout: return "the publisher's session timed out"
        case .messageTooLarge: return "the publisher's session was closed for an oversized message"
        case .serverShutdown: return "the platform is shutting down"
        }
    }
}

/// One signaling connection's session: unauthenticated → authenticated → closed.
///
/// Pure: no I/O, the caller passes time in and carries out the returned actions. Requests other
/// than `authenticate` and `bye` are refused as `unauthorized` until the session is
/// authenticated; authenticated requests are handed on (``Action/request(sessionId:requestId:_:)``)
/// for the ``StreamRegistry``. Once authenticated, any message (even a malformed one) moves the
/// keep-alive deadline to `now + keepAliveTimeout`; a `tick` past it closes the connection with
/// 1008. Before that the deadline is fixed when the connection opens: a connection that does not
/// authenticate in time is closed however much else it sends. A resumed session gets a new
/// resume key (keys are single-use).
///
/// ```swift
/// var session = SessionStateMachine(sessionId: "s-1", remoteAddress: "127.0.0.1",
///     tokens: TokenAuthority(applicationId: "app", secret: "s"), keepAliveInterval: 10, now: Date())
/// let actions = session.handle(.message(.request(id: 1, .keepAlive), now: Date()))
/// // [.send(Envelope(id: 1, .failure(... unauthorized ...)))]
/// ```
public struct SessionStateMachine: Sendable {
    public enum State: Sendable, Hashable {
        case unauthenticated
        case authenticated
        case closed(SessionEnd)
    }

    public enum Event: Sendable, Hashable {
        /// A message decoded from the socket.
        case message(Envelope<ClientMessage>, now: Date)
        /// A message the codec refused.
        case invalid(SignalingError, now: Date)
        /// Time passes (checks the keep-alive deadline).
        case tick(now: Date)
        /// The socket closed.
        case disconnected
        /// The platform is shutting down.
        case shutdown
    }

    /// Requests handed on to the registry once authenticated.
    public enum Request: Sendable, Hashable {
        case publish(ClientMessage.Publish)
        case unpublish(ClientMessage.Unpublish)
        case subscribe(ClientMessage.Subscribe)
        case unsubscribe(ClientMessage.StreamReference)
        /// Rooms and chat (for the ``RoomRegistry``).
        case room(RoomRegistry.Request)
        /// Ingest of a remote source (for the platform's ingest service).
        case publishRemote(ClientMessage.PublishRemote)
        case stopIngest(ClientMessage.StreamReference)
        /// A viewer's bandwidth request for the publisher (for the ``StreamRegistry``).
        case limitBandwidth(ClientMessage.LimitBandwidth)
        /// The size a viewer shows a stream's video at (for the ``StreamRegistry``).
        case setViewSize(ClientMessage.SetViewSize)
        /// A publisher's quality, for its stream's viewers.
        case publisherQuality(ClientMessage.PublisherQuality)
    }

    public enum Action: Sendable, Hashable {
        /// Send this to the client.
        case send(Envelope<ServerMessage>)
        /// The session authenticated: the registry should know it.
        case opened(sessionId: String)
        /// An authenticated request for the registry.
        case request(sessionId: String, requestId: UInt64?, Request)
        /// Close the socket with this code (after sending what came before).
        case close(SignalingCloseCode, reason: String)
        /// The authenticated session ended: the registry should forget it.
        case ended(sessionId: String, SessionEnd)
    }

    /// The id this session gets once authenticated: fixed when the connection opens, unless the
    /// client resumes an earlier session the platform offered (``offerResume(sessionId:resumeKey:)``).
    public private(set) var sessionId: String
    /// The secret that resumes this session later (sent in the `authenticated` reply).
    public private(set) var resumeKey: String
    /// Whether authentication resumed an earlier session.
    public private(set) var resumed = false
    /// The room roles the auth token allows (`role:<role>` capabilities); nil when it names none.
    public private(set) var roles: Set<MemberRole>?
    private var resumeOffer: (sessionId: String, resumeKey: String)?
    /// The client's address, for tokens bound to one.
    public let remoteAddress: String?
    public let tokens: TokenAuthority
    public let keepAliveInterval: Int
    public private(set) var state: State = .unauthenticated
    /// When the session is closed if nothing arrives before.
    public private(set) var deadline: Date

    private var keepAliveTimeout: TimeInterval {
        TimeInterval(keepAliveInterval * PlatformConfiguration.keepAliveTimeoutMultiplier)
    }

    public init(sessionId: String, remoteAddress: String?, tokens: TokenAuthority, keepAliveInterval: Int, now: Date,
                resumeKey: String = "") {
        self.sessionId = sessionId
        self.resumeKey = resumeKey
        self.remoteAddress = remoteAddress
        self.tokens = tokens
        self.keepAliveInterval = max(1, keepAliveInterval)
        self.deadline = now.addingTimeInterval(TimeInterval(max(1, keepAliveInterval) * PlatformConfiguration.keepAliveTimeoutMultiplier))
    }

    /// The platform found `sessionId` detached and `resumeKey` right: an `authenticate` naming them
    /// (with a valid token) takes that session over instead of starting a new one.
    public mutating func offerResume(sessionId: String, resumeKey: String) {
        resumeOffer = (sessionId, resumeKey)
    }

    public var isClosed: Bool {
        if case .closed = state { return true }
        return false
    }

    public mutating func handle(_ event: Event) -> [Action] {
        if isClosed { return [] }
        switch event {
        case .message(let envelope, let now):
            // The deadline to authenticate never moves: a client that keeps sending junk (or
            // anything but a valid `authenticate`) is closed when it runs out, like a silent one.
            if state == .authenticated { deadline = now.addingTimeInterval(keepAliveTimeout) }
            let actions = handle(envelope, now: now)
            if state == .authenticated { deadline = now.addingTimeInterval(keepAliveTimeout) }
            return actions
        case .invalid(let error, let now):
            if state == .authenticated { deadline = now.addingTimeInterval(keepAliveTimeout) }
            if case .tooLarge = error.kind {
                return close(.messageTooLarge, code: .messageTooLarge, reason: error.description)
            }
            return [.send(error.reply)]
        case .tick(let now):
            guard now >= deadline else { return [] }
            let reason = state == .unauthenticated ? "not authenticated in time" : "keep-alive timeout"
            return close(.keepAliveTimeout, code: .policyViolation, reason: reason)
        case .disconnected:
            return close(.connectionLost, code: nil, reason: "")
        case .shutdown:
            return close(.serverShutdown, code: .goingAway, reason: "the platform is shutting down")
        }
    }

    private mutating func handle(_ envelope: Envelope<ClientMessage>, now: Date) -> [Action] {
        let id = envelope.id
        func reply(_ message: ServerMessage) -> Action { .send(Envelope(id: id, message)) }
        func fail(_ status: RequestStatus, _ message: String) -> Action {
            .send(Envelope(id: id, .failure(.init(status: status, message: message))))
        }
        switch (state, envelope.message) {
        case (_, .bye):
            return [reply(.ok)] + close(.bye, code: .normal, reason: "bye")
        case (.unauthenticated, .authenticate(let request)):
            switch tokens.check(request.token, as: .auth, sessionId: sessionId, remoteAddress: remoteAddress, now: now) {
            case .failure(let failure):
                return [reply(.failure(failure))]
            case .success(let claims):
                state = .authenticated
                roles = TokenAuthority.roles(claims)
                if let offer = resumeOffer, offer.sessionId == request.sessionId, offer.resumeKey == request.resumeKey {
                    // The session continues under its id with this connection's fresh resume
                    // key: a key is good for one resume, so a key seen once cannot be replayed.
                    sessionId = offer.sessionId
                    resumed = true
                }
                resumeOffer = nil
                return [
                    .opened(sessionId: sessionId),
                    reply(.authenticated(.init(sessionId: sessionId, keepAliveInterval: keepAliveInterval,
                                               resumeKey: resumeKey.isEmpty ? nil : resumeKey, resumed: resumed))),
                ]
            }
        case (.unauthenticated, let message):
            return [fail(.unauthorized, "authenticate before '\(message.type)'")]
        case (.authenticated, .authenticate):
            return [fail(.conflict, "this connection is already authenticated as session \(sessionId)")]
        case (.authenticated, .keepAlive):
            return [reply(.ok)]
        case (.authenticated, .publish(let request)):
            return [.request(sessionId: sessionId, requestId: id, .publish(request))]
        case (.authenticated, .unpublish(let request)):
            return [.request(sessionId: sessionId, requestId: id, .unpublish(request))]
        case (.authenticated, .subscribe(let request)):
            return [.request(sessionId: sessionId, requestId: id, .subscribe(request))]
        case (.authenticated, .unsubscribe(let request)):
            return [.request(sessionId: sessionId, requestId: id, .unsubscribe(request))]
        case (.authenticated, .createRoom(let request)):
            return [.request(sessionId: sessionId, requestId: id, .room(.createRoom(request)))]
        case (.authenticated, .getRoomInfo(let request)):
            return [.request(sessionId: sessionId, requestId: id, .room(.getRoomInfo(request)))]
        case (.authenticated, .joinRoom(let request)):
            return [.request(sessionId: sessionId, requestId: id, .room(.joinRoom(request)))]
        case (.authenticated, .leaveRoom(let request)):
            return [.request(sessionId: sessionId, requestId: id, .room(.leaveRoom(request)))]
        case (.authenticated, .destroyRoom(let request)):
            return [.request(sessionId: sessionId, requestId: id, .room(.destroyRoom(request)))]
        case (.authenticated, .updateRoom(let request)):
            return [.request(sessionId: sessionId, requestId: id, .room(.updateRoom(request)))]
        case (.authenticated, .updateMember(let request)):
            return [.request(sessionId: sessionId, requestId: id, .room(.updateMember(request)))]
        case (.authenticated, .sendChatMessage(let request)):
            return [.request(sessionId: sessionId, requestId: id, .room(.sendChatMessage(request)))]
        case (.authenticated, .getChatMessages(let request)):
            return [.request(sessionId: sessionId, requestId: id, .room(.getChatMessages(request)))]
        case (.authenticated, .publishRemote(let request)):
            return [.request(sessionId: sessionId, requestId: id, .publishRemote(request))]
        case (.authenticated, .stopIngest(let request)):
            return [.request(sessionId: sessionId, requestId: id, .stopIngest(request))]
        case (.authenticated, .limitBandwidth(let request)):
            return [.request(sessionId: sessionId, requestId: id, .limitBandwidth(request))]
        case (.authenticated, .setViewSize(let request)):
            return [.request(sessionId: sessionId, requestId: id, .setViewSize(request))]
        case (.authenticated, .publisherQuality(let request)):
            return [.request(sessionId: sessionId, requestId: id, .publisherQuality(request))]
        case (.closed, _):
            return []
        }
    }

    private mutating func close(_ end: SessionEnd, code: SignalingCloseCode?, reason: String) -> [Action] {
        let wasAuthenticated = state == .authenticated
        state = .closed(end)
        var actions: [Action] = []
        if let code { actions.append(.close(code, reason: reason)) }
        if wasAuthenticated { actions.append(.ended(sessionId: sessionId, end)) }
        return actions
    }
}
