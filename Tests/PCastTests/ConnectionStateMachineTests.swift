@testable import PCast
import PCastProtocol
import Testing

/// The SDK's connection lifecycle, driven by hand: no sockets, the time passed in.
@Suite struct ConnectionStateMachineTests {
    let t0 = ContinuousClock.now

    @Test("start → connecting → online; the application hears online and the authentication")
    func startsAndComesOnline() {
        var machine = ConnectionStateMachine(reconnects: true)
        #expect(machine.state == .idle)
        #expect(machine.handle(.start) == [.connect(resume: nil)])
        #expect(machine.state == .connecting)
        #expect(machine.handle(.authenticated(sessionId: "s-1", resumeKey: "k-1"))
                == [.notifyOnline(sessionId: "s-1"), .notifyAuthentication(.ok, sessionId: "s-1")])
        #expect(machine.state == .online(sessionId: "s-1", resume: .init(sessionId: "s-1", key: "k-1")))
        #expect(machine.isOnline && machine.sessionId == "s-1")
        #expect(machine.resume == .init(sessionId: "s-1", key: "k-1"))
    }

    @Test("a refused first authentication stops the machine and reports the status")
    func refusedStart() {
        var machine = ConnectionStateMachine(reconnects: true)
        _ = machine.handle(.start)
        #expect(machine.handle(.connectFailed(status: .unauthorized, reason: "expired", now: t0, jitter: 0.5))
                == [.notifyAuthentication(.unauthorized, sessionId: nil)])
        #expect(machine.state == .stopped)
        // A late close of that connection changes nothing.
        #expect(machine.handle(.connectionClosed(now: t0, jitter: 0.5)).isEmpty)
    }

    @Test("a dropped connection reconnects with backoff, resumes the session with its latest key, and counts attempts")
    func reconnectsWithBackoff() {
        var machine = ConnectionStateMachine(reconnects: true)
        _ = machine.handle(.start)
        _ = machine.handle(.authenticated(sessionId: "s-1", resumeKey: "k-1"))
        // Jitter 0.5 is the middle of ±25 %: the delays are the base ones.
        #expect(machine.handle(.connectionClosed(now: t0, jitter: 0.5)) == [.notifyOffline, .scheduleRetry(after: .milliseconds(50))])
        let resume = ConnectionStateMachine.Resume(sessionId: "s-1", key: "k-1")
        #expect(machine.state == .reconnecting(.init(since: t0, attempt: 0, resume: resume, connecting: false)))
        #expect(!machine.isOnline && machine.sessionId == nil, "not online while it reconnects")
        #expect(machine.handle(.retryDue) == [.connect(resume: resume)])
        // A second retry timer while connecting does nothing.
        #expect(machine.handle(.retryDue).isEmpty)
        var delays: [Duration] = []
        for second in 1...4 {
            let actions = machine.handle(.connectFailed(status: .failed, reason: "refused", now: t0 + .seconds(second), jitter: 0.5))
            guard case .scheduleRetry(let delay) = actions.first, actions.count == 1 else {
                Issue.record("expected one retry, got \(actions)")
                return
            }
            delays.append(delay)
            _ = machine.handle(.retryDue)
        }
        // 200 ms at most while the outage is under 10 s old.
        #expect(delays == [.milliseconds(100), .milliseconds(200), .milliseconds(200), .milliseconds(200)])
        #expect(machine.state == .reconnecting(.init(since: t0, attempt: 4, resume: resume, connecting: true)))
        // Then 400 ms until a minute.
        #expect(machine.handle(.connectFailed(status: .failed, reason: "refused", now: t0 + .seconds(30), jitter: 0.5)) == [.scheduleRetry(after: .milliseconds(400))])
        _ = machine.handle(.retryDue)
        // A long outage backs off further, up to 5 s.
        let late = machine.handle(.connectFailed(status: .failed, reason: "refused", now: t0 + .seconds(90), jitter: 0.5))
        #expect(late == [.scheduleRetry(after: .milliseconds(3200))])
        _ = machine.handle(.retryDue)
        #expect(machine.handle(.authenticated(sessionId: "s-1", resumeKey: "k-2"))
                == [.notifyOnline(sessionId: "s-1"), .notifyAuthentication(.ok, sessionId: "s-1")])
        #expect(machine.resume == .init(sessionId: "s-1", key: "k-2"))
    }

    @Test("jitter spreads each delay by ±25 %")
    func jitter() {
        #expect(ConnectionStateMachine.retryDelay(attempt: 0, offline: .zero, jitter: 0) == .microseconds(37_500))
        #expect(ConnectionStateMachine.retryDelay(attempt: 0, offline: .zero, jitter: 1) == .microseconds(62_500))
        #expect(ConnectionStateMachine.retryDelay(attempt: 20, offline: .seconds(120), jitter: 0.5) == .seconds(5))
    }

    @Test("re-authentication refused while reconnecting asks for a new token once: refreshed, the same session is resumed at once; refused again, or no token, ends the session and its streams")
    func refusedResume() {
        func reconnecting() -> ConnectionStateMachine {
            var machine = ConnectionStateMachine(reconnects: true)
            _ = machine.handle(.start)
            _ = machine.handle(.authenticated(sessionId: "s-1", resumeKey: "k-1"))
            _ = machine.handle(.connectionClosed(now: t0, jitter: 0.5))
            _ = machine.handle(.retryDue)
            return machine
        }
        let resume = ConnectionStateMachine.Resume(sessionId: "s-1", key: "k-1")
        var machine = reconnecting()
        #expect(machine.handle(.connectFailed(status: .unauthorized, reason: "token expired", now: t0 + .seconds(1), jitter: 0.5))
                == [.refreshToken(reason: "token expired")])
        #expect(machine.handle(.retryDue) == [], "no retry while the token is being refreshed")
        #expect(machine.handle(.tokenRefreshed) == [.connect(resume: resume)], "the same session, at once")
        #expect(machine.handle(.connectFailed(status: .unauthorized, reason: "still refused", now: t0 + .seconds(2), jitter: 0.5))
                == [.endStreams(reason: "re-authentication refused: still refused"), .notifyAuthentication(.unauthorized, sessionId: nil)],
                "a second refusal in one outage ends the session")
        #expect(machine.state == .stopped && machine.resume == nil)

        machine = reconnecting()
        _ = machine.handle(.connectFailed(status: .unauthorized, reason: "token expired", now: t0 + .seconds(1), jitter: 0.5))
        #expect(machine.handle(.tokenRefreshFailed(reason: "token expired; no provider"))
                == [.endStreams(reason: "re-authentication refused: token expired; no provider"), .notifyAuthentication(.unauthorized, sessionId: nil)])
        #expect(machine.state == .stopped)
        #expect(machine.handle(.tokenRefreshed) == [], "late: nothing")

        // A refresh that resumed: the next outage may refresh again.
        machine = reconnecting()
        _ = machine.handle(.connectFailed(status: .unauthorized, reason: "expired", now: t0 + .seconds(1), jitter: 0.5))
        _ = machine.handle(.tokenRefreshed)
        _ = machine.handle(.authenticated(sessionId: "s-1", resumeKey: "k-2"))
        _ = machine.handle(.connectionClosed(now: t0 + .seconds(10), jitter: 0.5))
        _ = machine.handle(.retryDue)
        #expect(machine.handle(.connectFailed(status: .unauthorized, reason: "expired again", now: t0 + .seconds(11), jitter: 0.5))
                == [.refreshToken(reason: "expired again")])
    }

    @Test("without reconnection a dropped connection ends the streams at once")
    func noReconnect() {
        var machine = ConnectionStateMachine(reconnects: false)
        _ = machine.handle(.start)
        _ = machine.handle(.authenticated(sessionId: "s-1", resumeKey: "k-1"))
        #expect(machine.handle(.connectionClosed(now: t0, jitter: 0.5))
                == [.notifyOffline, .endStreams(reason: "the connection to the platform was lost")])
        #expect(machine.state == .stopped)
    }

    @Test("stop while reconnecting cancels the retry; late events after stop change nothing; start again begins afresh")
    func stopWhileReconnecting() {
        var machine = ConnectionStateMachine(reconnects: true)
        _ = machine.handle(.start)
        _ = machine.handle(.authenticated(sessionId: "s-1", resumeKey: "k-1"))
        _ = machine.handle(.connectionClosed(now: t0, jitter: 0.5))
        #expect(machine.handle(.stop) == [.cancelRetry])
        #expect(machine.state == .stopped)
        #expect(machine.handle(.retryDue).isEmpty)
        #expect(machine.handle(.authenticated(sessionId: "s-9", resumeKey: nil)).isEmpty)
        #expect(machine.state == .stopped)
        #expect(machine.handle(.start) == [.connect(resume: nil)])
    }
}
