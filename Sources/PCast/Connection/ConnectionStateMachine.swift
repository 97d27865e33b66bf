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
        case online(sessionId: String)
        /// The connection dropped at `since`; `attempt` retries have failed so far; `connecting`
        /// while one is under way.
        case reconnecting(since: ContinuousClock.Instant, attempt: Int, resume: Resume?, connecting: Bool)
        case stopped
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
        /// The application's authentication callback (the seed's `authenticationCallback`).
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
        if case .reconnecting(_, _, let resume, _) = state { return resume }
        return lastResume
    }
    private var lastResume: Resume?
    /// Whether the token was refreshed during this outage: a second refusal ends the session.
    private var refreshedThisOutage = false

    var isOnline: Bool { if case .online = state { return true } else { return false } }
    var isReconnecting: Bool { if case .reconnecting = state { return true } else { return false } }
    var isStopped: Bool { state == .stopped || state == .idle }

    mutating func handle(_ event: Event) -> [Action] {
        switch (state, event) {
        case (.idle, .start), (.stopped, .start):
            state = .connecting
            lastResume = nil
            refreshedThisOutage = false
            return [.connect(resume: nil)]

        case (.connecting, .authenticated(let sessionId, let key)), (.reconnecting, .authenticated(let sessionId, let key)):
            lastResume = key.map { Resume(sessionId: sessionId, key: $0) } ?? resume
            state = .online(sessionId: sessionId)
            refreshedThisOutage = false
            return [.notifyOnline(sessionId: sessionId), .notifyAuthentication(.ok, sessionId: sessionId)]

        case (.connecting, .connectFailed(let status, _, _, _)):
            state = .stopped
            return [.notifyAuthentication(status, sessionId: nil)]

        case (.online, .connectionClosed(let now, let jitter)):
            guard reconnects else {
                state = .stopped
                return [.notifyOffline, .endStreams(reason: "the connection to the platform was lost")]
            }
            state = .reconnecting(since: now, attempt: 0, resume: lastResume, connecting: false)
            return [.notifyOffline, .scheduleRetry(after: Self.retryDelay(attempt: 0, offline: .zero, jitter: jitter))]

        case (.reconnecting(let since, let attempt, let resume, false), .retryDue):
            state = .reconnecting(since: since, attempt: attempt, resume: resume, connecting: true)
            return [.connect(resume: resume)]

        case (.reconnecting(let since, let attempt, let resume, _), .connectFailed(.unauthorized, let reason, _, _)) where !refreshedThisOutage:
            // The token expired (or was revoked) meanwhile: a new one may resume the session (its
            // resume key is still good: a refused authentication does not spend it).
            refreshedThisOutage = true
            state = .reconnecting(since: since, attempt: attempt, resume: resume, connecting: true)
            return [.refreshToken(reason: reason)]

        case (.reconnecting(let since, let attempt, let resume, true), .tokenRefreshed):
            state = .reconnecting(since: since, attempt: attempt, resume: resume, connecting: true)
            return [.connect(resume: resume)]

        case (.reconnecting, .connectFailed(.unauthorized, let reason, _, _)), (.reconnecting, .tokenRefreshFailed(let reason)):
            // No new token, or the new one refused too: the session is over.
            state = .stopped
            lastResume = nil
            return [.endStreams(reason: "re-authentication refused: \(reason)"), .notifyAuthentication(.unauthorized, sessionId: nil)]

        case (.reconnecting(let since, let attempt, let resume, _), .connectFailed(_, _, let now, let jitter)):
            state = .reconnecting(since: since, attempt: attempt + 1, resume: resume, connecting: false)
            return [.scheduleRetry(after: Self.retryDelay(attempt: attempt + 1, offline: now - since, jitter: jitter))]

        case (_, .stop):
            let wasReconnecting = isReconnecting
            state = .stopped
            lastResume = nil
            return wasReconnecting ? [.cancelRetry] : []

        default:
            // Late or duplicate events (a retry due after stop, a close while reconnecting) change nothing.
            return []
        }
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
