import Foundation
import PCastProtocol
import PCastServer
import Testing

@Suite struct SessionStateMachineTests {
    let tokens = TokenAuthority(applicationId: Fixture.applicationId, secret: Fixture.secret)
    let start = Date(timeIntervalSince1970: 1_700_000_000)

    func machine(remoteAddress: String? = "127.0.0.1") -> SessionStateMachine {
        SessionStateMachine(sessionId: "session-1", remoteAddress: remoteAddress, tokens: tokens, keepAliveInterval: 10, now: start)
    }

    func failureStatus(_ actions: [SessionStateMachine.Action]) -> RequestStatus? {
        for case .send(let envelope) in actions {
            if case .failure(let failure) = envelope.message { return failure.status }
        }
        return nil
    }

    @Test func authenticatesWithAnAuthTokenAndReturnsTheSessionId() {
        var session = machine()
        let token = Fixture.token(.auth, now: start)
        let actions = session.handle(.message(.request(id: 1, .authenticate(.init(token: token))), now: start))
        #expect(actions == [
            .opened(sessionId: "session-1"),
            .send(Envelope(id: 1, .authenticated(.init(sessionId: "session-1", keepAliveInterval: 10, resumed: false)))),
        ])
        #expect(session.state == .authenticated)
    }

    @Test func requestsBeforeAuthenticationAreRefused() {
        var session = machine()
        let messages: [ClientMessage] = [
            .keepAlive, .publish(Fixture.publish("x")), .subscribe(.init(streamToken: "x")),
            .unpublish(.init(streamId: "s", reason: .ended)), .unsubscribe(.init(streamId: "s")),
        ]
        for (index, message) in messages.enumerated() {
            let actions = session.handle(.message(.request(id: UInt64(index), message), now: start))
            #expect(failureStatus(actions) == .unauthorized)
            #expect(actions.count == 1)
        }
        #expect(session.state == .unauthenticated)
    }

    @Test func refusesWrongTokensWithTypedFailures() {
        let cases: [(String, RequestStatus)] = [
            ("not a token", .unauthorized),
            (Fixture.token(.auth, now: start, secret: "wrong"), .unauthorized),
            (Fixture.token(.auth, expiresIn: -10, now: start), .unauthorized),
            (Fixture.token(.stream, now: start), .unauthorized),
            (Fixture.token(.auth, now: start) { $0.sessionId("another-session") }, .unauthorized),
            (Fixture.token(.auth, now: start) { $0.remoteAddress("10.1.2.3") }, .unauthorized),
            (Fixture.token(.auth, now: start) { $0.capability("time-shift") }, .notSupported),
        ]
        for (token, status) in cases {
            var session = machine()
            let actions = session.handle(.message(.request(id: 9, .authenticate(.init(token: token))), now: start))
            #expect(failureStatus(actions) == status, "token \(token.prefix(20))")
            #expect(!actions.contains(.opened(sessionId: "session-1")))
            #expect(session.state == .unauthenticated)
        }
    }

    @Test func bindingsThatMatchAreAccepted() {
        var session = machine(remoteAddress: "::ffff:127.0.0.1")
        let token = Fixture.token(.auth, now: start) { $0.sessionId("session-1").remoteAddress("127.0.0.1").capability("real-time") }
        let actions = session.handle(.message(.request(id: 1, .authenticate(.init(token: token))), now: start))
        #expect(actions.contains(.opened(sessionId: "session-1")))
    }

    @Test func authenticatedRequestsGoToTheRegistryAndKeepAliveIsAnswered() {
        var session = machine()
        _ = session.handle(.message(.request(id: 1, .authenticate(.init(token: Fixture.token(.auth, now: start)))), now: start))
        #expect(session.handle(.message(.request(id: 2, .keepAlive), now: start)) == [.send(Envelope(id: 2, .ok))])
        let publish = Fixture.publish("t")
        #expect(session.handle(.message(.request(id: 3, .publish(publish)), now: start))
            == [.request(sessionId: "session-1", requestId: 3, .publish(publish))])
        let again = session.handle(.message(.request(id: 4, .authenticate(.init(token: Fixture.token(.auth, now: start)))), now: start))
        #expect(failureStatus(again) == .conflict)
    }

    @Test func keepAliveDeadlineClosesTheSession() {
        var session = machine()
        _ = session.handle(.message(.request(id: 1, .authenticate(.init(token: Fixture.token(.auth, now: start)))), now: start))
        // Timeout is three intervals (30 s) after the last message.
        let later = start.addingTimeInterval(20)
        _ = session.handle(.message(.request(id: 2, .keepAlive), now: later))
        #expect(session.handle(.tick(now: later.addingTimeInterval(29))) == [])
        let actions = session.handle(.tick(now: later.addingTimeInterval(30)))
        #expect(actions == [
            .close(.policyViolation, reason: "keep-alive timeout"),
            .ended(sessionId: "session-1", .keepAliveTimeout),
        ])
        #expect(session.state == .closed(.keepAliveTimeout))
        #expect(session.handle(.message(.request(id: 3, .keepAlive), now: later)) == [])
    }

    @Test func unauthenticatedConnectionsMustAuthenticateInTime() {
        var session = machine()
        let actions = session.handle(.tick(now: start.addingTimeInterval(31)))
        #expect(actions == [.close(.policyViolation, reason: "not authenticated in time")])
    }

    @Test func malformedMessagesAreAnsweredAndOversizedOnesClose() {
        var session = machine()
        let malformed = SignalingError(kind: .malformed, requestId: nil)
        #expect(session.handle(.invalid(malformed, now: start)) == [.send(malformed.reply)])
        #expect(session.state == .unauthenticated)
        let tooLarge = SignalingError(kind: .tooLarge(size: 70_000, limit: 65_536), requestId: nil)
        let actions = session.handle(.invalid(tooLarge, now: start))
        #expect(actions == [.close(.messageTooLarge, reason: tooLarge.description)])
    }

    @Test func byeClosesNormallyAndDisconnectEndsTheSession() {
        var session = machine()
        _ = session.handle(.message(.request(id: 1, .authenticate(.init(token: Fixture.token(.auth, now: start)))), now: start))
        #expect(session.handle(.message(.request(id: 2, .bye), now: start)) == [
            .send(Envelope(id: 2, .ok)), .close(.normal, reason: "bye"), .ended(sessionId: "session-1", .bye),
        ])
        var other = machine()
        _ = other.handle(.message(.request(id: 1, .authenticate(.init(token: Fixture.token(.auth, now: start)))), now: start))
        #expect(other.handle(.disconnected) == [.ended(sessionId: "session-1", .connectionLost)])
        #expect(other.handle(.disconnected) == [])
    }
}
