import PCastMedia
import PCastProtocol

/// The SDK's connection to the platform, as a pure state machine: `handle(event) -> [Action]`,
/// with the time passed in, like the platform's `SessionStateMachine`. ``PCast`` feeds it what
/// happens (start, authenticated, a connection closed, a retry timer fired, stop) and performs
/// what it returns (connect, schedule a retry, tell the application, end the streams).
///
/// ```
/// idle ──start──► connecting ──authenticated──► online ──closed──► reconnecting(since, attempt, resume)
///                     │                           ▲                    │   ▲
///                     └─failed──► stopped          └────authenticated───┘   └─retry fails: attempt + 1
/// any ──stop──► stopped
/// reconnecting ──refused (unauthorized)──► refreshing the token ──refreshed──► reconnecting (at once)
///                                                               ──not refreshed, or refused again──► stopped
/// ```
///
/// Only the session's current connection counts: ``PCast`` drops the close of a connection that
/// was never the session's (a failed authentication) or was already replaced, before it reaches
/// the machine.
struct ConnectionStateMachine: Sendable {
    /// The session to resume and its single-use key (the platform hands out a new one each time).
    struct Resume: Sendable, Hashable {
        var sessionId: String
        var key: String
    }

    enum State: Sendable, Hashable {
        case idle
        /// The first connection, from ``PCast/start(authToken:)``.
        case connecting
        /// Authenticated; `resume` is the session and key the next connection resumes with.
        case online(sessionId: String, resume: Resume?)
        case reconnecting(Outage)
        case stopped
    }

    /// A dropped connection being made again: everything the machine knows of the outage.
    struct Outage: Sendable, Hashable {
        /// When the connection dropped.
        var since: ContinuousClock.Instant
        /// Retries that have failed so far.
        var attempt = 0
        var resume: Resume?
        /// A connection attempt or a token refresh is under way (no retry is scheduled).
        var connecting = false
        /// The auth token was refreshed once in this outage: a second refusal ends the session.
        var refreshed = false
    }

    enum Event: Sendable {
        case start
        /// A connection authenticated (`resumeKey`: the key for the next resumption).
        case authenticated(sessionId: String, resumeKey: String?)
        /// The connection attempt failed with `status` (`unauthorized`: the platform refused the token).
        case connectFailed(status: RequestStatus, reason: String, now: ContinuousClock.Instant, jitter: Double)
        /// The session's connection closed (whoever closed it).
        case connectionClosed(now: ContinuousClock.Instant, jitter: Double)
        /// A scheduled retry is due.
        case retryDue
        /// A new auth token was obtained after a refusal (see ``Action/refreshToken(reason:)``).
        case tokenRefreshed
        /// None could be obtained (`reason`: why the session is over).
        case tokenRefreshFailed(reason: String)
        case stop
    }

    enum Action: Sendable, Hashable {
        /// Open a connection and authenticate, resuming `resume` when given.
        case connect(resume: Resume?)
        /// Fire ``Event/retryDue`` after `delay` (replacing any retry scheduled before).
        case scheduleRetry(after: Duration)
        case cancelRetry
        /// The application's online callback and authentication listeners.
        case notifyOnline(sessionId: String)
        case notifyOffline
        /// The application's authentication callback (the PCast iOS SDK's `authenticationCallback`).
        case notifyAuthentication(RequestStatus, sessionId: String?)
        /// Every published and subscribed stream ends as `failed` with `reason`.
        case endStreams(reason: String)
        /// Re-authentication was refused (`reason`): get a new auth token (the application's
        /// provider, see ``PCast/setAuthenticationTokenProvider(_:)``), then report
        /// ``Event/tokenRefreshed`` or ``Event/tokenRefreshFailed(reason:)``.
        case refreshToken(reason: String)
    }

    private(set) var state: State = .idle
    /// Whether a dropped connection is reconnected (``PCastOptions/reconnects``).
    let reconnects: Bool

    init(reconnects: Bool) {
        self.reconnects = reconnects
    }

    /// The session to resume on the next connection, if any.
    var resume: Resume? {
        switch state {
        case .online(_, let resume): resume
        case .reconnecting(let outage): outage.resume
        case .idle, .connecting, .stopped: nil
        }
    }
    /// The session's id while it is online (nil while it reconnects: it is not online then).
    var sessionId: String? { if case .online(let sessionId, _) = state { sessionId } else { nil } }
    var isOnline: Bool { sessionId != nil }
    var isReconnecting: Bool { if case .reconnecting = state { true } else { false } }
    var isStopped: Bool { state == .stopped || state == .idle }

    /// Every state and event is named: an event a state ignores is listed with why, so a new event
    /// cannot fall through unnoticed.
    mutating func handle(_ event: Event) -> [Action] {
        switch state {
        case .idle, .stopped:
            switch event {
            case .start:
                state = .connecting
                return [.connect(resume: nil)]
            case .stop:
                state = .stopped
                return []
            case .authenticated, .connectFailed, .connectionClosed, .retryDue, .tokenRefreshed, .tokenRefreshFailed:
                // Late news of an ended session (a retry due after stop, its connection's close).
                return []
            }

        case .connecting:
            switch event {
            case .authenticated(let sessionId, let key):
                return comeOnline(sessionId: sessionId, resume: key.map { Resume(sessionId: sessionId, key: $0) })
            case .connectFailed(let status, _, _, _):
                state = .stopped
                return [.notifyAuthentication(status, sessionId: nil)]
            case .stop:
                state = .stopped
                return []
            case .start, .connectionClosed, .retryDue, .tokenRefreshed, .tokenRefreshFailed:
                // Starting already; the first connection's close comes as its failure; no retry
                // or refresh is pending.
                return []
            }

        case .online(_, let resume):
            switch event {
            case .connectionClosed(let now, let jitter):
                guard reconnects else {
                    state = .stopped
                    return [.notifyOffline, .endStreams(reason: "the connection to the platform was lost")]
                }
                state = .reconnecting(Outage(since: now, resume: resume))
                return [.notifyOffline, .scheduleRetry(after: Self.retryDelay(attempt: 0, offline: .zero, jitter: jitter))]
            case .stop:
                state = .stopped
                return []
            case .start, .authenticated, .connectFailed, .retryDue, .tokenRefreshed, .tokenRefreshFailed:
                // Online already: a second start, or news of a connection that is no longer the session's.
                return []
            }

        case .reconnecting(var outage):
            switch event {
            case .retryDue:
                // A retry timer while an attempt or a refresh is under way changes nothing.
                guard !outage.connecting else { return [] }
                outage.connecting = true
                state = .reconnecting(outage)
                return [.connect(resume: outage.resume)]
            case .authenticated(let sessionId, let key):
                return comeOnline(sessionId: sessionId, resume: key.map { Resume(sessionId: sessionId, key: $0) } ?? outage.resume)
            case .connectFailed(.unauthorized, let reason, _, _) where !outage.refreshed:
                // The token expired (or was revoked) meanwhile: a new one may resume the session (its
                // resume key is still good: a refused authentication does not spend it).
                outage.refreshed = true
                outage.connecting = true
                state = .reconnecting(outage)
                return [.refreshToken(reason: reason)]
            case .connectFailed(.unauthorized, let reason, _, _), .tokenRefreshFailed(let reason):
                // No new token, or the new one refused too: the session is over.
                state = .stopped
                return [.endStreams(reason: "re-authentication refused: \(reason)"), .notifyAuthentication(.unauthorized, sessionId: nil)]
            case .connectFailed(_, _, let now, let jitter):
                outage.attempt += 1
                outage.connecting = false
                state = .reconnecting(outage)
                return [.scheduleRetry(after: Self.retryDelay(attempt: outage.attempt, offline: now - outage.since, jitter: jitter))]
            case .tokenRefreshed:
                // Only a refresh under way is answered (one after the session ended is late).
                guard outage.refreshed && outage.connecting else { return [] }
                return [.connect(resume: outage.resume)]
            case .stop:
                state = .stopped
                return [.cancelRetry]
            case .start, .connectionClosed:
                // Reconnecting already; a close here is that of an attempt, which fails as such.
                return []
            }
        }
    }

    private mutating func comeOnline(sessionId: String, resume: Resume?) -> [Action] {
        state = .online(sessionId: sessionId, resume: resume)
        return [.notifyOnline(sessionId: sessionId), .notifyAuthentication(.ok, sessionId: sessionId)]
    }

    /// Delay before retry `attempt` (0-based) after `offline` of being offline: 50 ms doubling to
    /// 200 ms for the first 10 s (a node restarting, a network handover: the time from the network's
    /// return to online is on average half this cap plus the handshake, about 130 ms), to 400 ms
    /// until a minute, then to 5 s; each with ±25 % jitter (`jitter` in 0...1) so clients cut off
    /// together do not return in lockstep. The price of the short cap: up to five refused
    /// connection attempts a second per client during the first 10 s of an outage.
    static func retryDelay(attempt: Int, offline: Duration, jitter: Double) -> Duration {
        let cap: Duration = offline < .seconds(10) ? .milliseconds(200) : offline < .seconds(60) ? .milliseconds(400) : .seconds(5)
        let base = Duration.milliseconds(50) * (1 << min(attempt, 10))
        return min(base, cap) * (0.75 + 0.5 * min(max(jitter, 0), 1))
    }
}
