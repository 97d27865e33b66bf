import Foundation
import PCastProtocol
@testable import PCastServer
import Synchronization
import Testing

// The sample backend is pure apart from the clock it is given: each test posts a body to a route
// and checks the HTTP status, the reply and the token it carries (verified, not just decoded).

private let now = Date(timeIntervalSince1970: 1_700_000_000)
private let signalingURI = "ws://127.0.0.1:8080/ws"

/// A policy of an application's own: only "ada" gets tokens, with fixed capabilities. Records
/// what it was asked.
private struct GuestListPolicy: BackendPolicy {
    final class Log: Sendable {
        private let requests = Mutex<[BackendTokenRequest]>([])
        func append(_ request: BackendTokenRequest) { requests.withLock { $0.append(request) } }
        var all: [BackendTokenRequest] { requests.withLock { $0 } }
    }
    let log = Log()

    func decide(_ request: BackendTokenRequest) -> Result<TokenGrant, ServerMessage.Failure> {
        log.append(request)
        guard request.string("user") == "ada" else { return .failure(.init(status: .unauthorized, message: "not on the guest list")) }
        switch request.kind {
        case .authentication: return .success(TokenGrant(capabilities: ["streaming", "role:participant"], lifetime: 60))
        case .publish: return .success(TokenGrant(capabilities: [], lifetime: 60, applyTags: ["guest:ada"]))
        case .stream: return .failure(.init(status: .capacity, message: "no viewers today"))
        }
    }
}

@Suite struct SampleBackendTests {
    let applicationId = Fixture.applicationId
    let secret = Fixture.secret

    func backend(_ policy: any BackendPolicy = SampleBackendPolicy()) -> SampleBackend {
        SampleBackend(applicationId: applicationId, secret: secret, policy: policy)
    }

    func post(_ backend: SampleBackend, _ route: String, _ body: String) -> (status: Int, reply: BackendAPI.TokenReply) {
        backend.handle(route: route, body: Data(body.utf8), signalingURI: signalingURI, now: now)
    }

    /// Verifies the token with this application's credentials and returns its claims.
    func verified(_ token: String?, sourceLocation: SourceLocation = #_sourceLocation) -> TokenClaims? {
        guard let token else {
            Issue.record("no token", sourceLocation: sourceLocation)
            return nil
        }
        guard case .verified(let claims) = DigestToken.verify(token, applicationId: applicationId, secret: secret) else {
            Issue.record("the token does not verify: \(token.prefix(40))", sourceLocation: sourceLocation)
            return nil
        }
        return claims
    }

    // MARK: Auth route

    @Test func authTokensCarryTheRequestedRolesPlusAudience() throws {
        let result = post(backend(), "auth", #"{"user":"ada","roles":["presenter","participant"],"capabilities":["real-time"]}"#)
        #expect(result.status == 200)
        #expect(result.reply.status == .ok)
        #expect(result.reply.pcastUri == signalingURI)
        #expect(result.reply.streamToken == nil)
        #expect(result.reply.message == nil)
        let claims = try #require(verified(result.reply.authenticationToken))
        #expect(claims.type == .auth)
        #expect(claims.applicationId == applicationId)
        #expect(claims.capabilities == ["real-time", "role:audience", "role:participant", "role:presenter"])
        #expect(TokenAuthority.roles(claims) == [.audience, .participant, .presenter])
        #expect(claims.expires == 1_700_003_600_000)

        // The platform accepts what the backend gives out.
        let authority = TokenAuthority(applicationId: applicationId, secret: secret)
        let checked = authority.check(try #require(result.reply.authenticationToken), as: .auth, sessionId: "s-1", remoteAddress: nil, now: now)
        #expect((try? checked.get()) == claims)
    }

    @Test func authWithoutRolesNamesNone() throws {
        let result = post(backend(), "auth", #"{"user":"ada"}"#)
        #expect(result.status == 200)
        let claims = try #require(verified(result.reply.authenticationToken))
        #expect(claims.capabilities.isEmpty)
        #expect(TokenAuthority.roles(claims) == nil, "no role capabilities: the default roles apply")
    }

    @Test func moderatorNeedsThePassword() throws {
        let refused = post(backend(), "auth", #"{"roles":["moderator"]}"#)
        #expect(refused.status == 403)
        #expect(refused.reply.status == .unauthorized)
        #expect(refused.reply.authenticationToken == nil)
        #expect(refused.reply.message?.isEmpty == false)
        // No password configured: even a body carrying one is refused.
        #expect(post(backend(), "auth", #"{"roles":["moderator"],"moderatorPassword":""}"#).status == 403)

        let guarded = backend(SampleBackendPolicy(moderatorPassword: "let-me-moderate"))
        let allowed = post(guarded, "auth", #"{"roles":["moderator"],"moderatorPassword":"let-me-moderate"}"#)
        #expect(allowed.status == 200)
        let claims = try #require(verified(allowed.reply.authenticationToken))
        #expect(claims.capabilities.contains("role:moderator"))
        #expect(TokenAuthority.roles(claims) == [.moderator, .audience])

        for body in [#"{"roles":["moderator"],"moderatorPassword":"let-me-moderatE"}"#,
                     #"{"roles":["moderator"],"moderatorPassword":"let-me-moderate "}"#,
                     #"{"roles":["moderator"],"moderatorPassword":""}"#,
                     #"{"roles":["moderator"]}"#,
                     #"{"roles":["moderator"],"moderatorPassword":["let-me-moderate"]}"#] {
            let wrong = post(guarded, "auth", body)
            #expect(wrong.status == 403, "\(body)")
            #expect(wrong.reply.status == .unauthorized, "\(body)")
            #expect(wrong.reply.authenticationToken == nil, "\(body)")
        }
        // The password is for the moderator role only; the others still come from the policy.
        #expect(post(guarded, "auth", #"{"roles":["participant"],"moderatorPassword":"let-me-moderate"}"#).status == 200)
    }

    @Test func unknownCapabilitiesAndRolesAreRefused() {
        let capability = post(backend(), "auth", #"{"capabilities":["time-shift"]}"#)
        #expect(capability.status == 403)
        #expect(capability.reply.status == .unauthorized)
        #expect(capability.reply.message?.contains("time-shift") == true)
        #expect(capability.reply.authenticationToken == nil)
        // A role asked for as a raw capability is not let through either.
        #expect(post(backend(), "auth", #"{"capabilities":["role:moderator"]}"#).status == 403)
        #expect(post(backend(), "stream", #"{"type":"stream","originStreamId":"s","capabilities":["time-shift"]}"#).status == 403)

        let role = post(backend(), "auth", #"{"roles":["king"]}"#)
        #expect(role.status == 400)
        #expect(role.reply.status == .badRequest)

        let restricted = backend(SampleBackendPolicy(allowedRoles: [.audience]))
        #expect(post(restricted, "auth", #"{"roles":["participant"]}"#).status == 403)
        #expect(post(restricted, "auth", #"{"roles":["audience"]}"#).status == 200)
    }

    // MARK: Stream route

    @Test func streamTokensNeedAnOriginOrATag() throws {
        let missing = post(backend(), "stream", #"{"type":"stream","sessionId":"s-1"}"#)
        #expect(missing.status == 400)
        #expect(missing.reply.status == .badRequest)
        #expect(missing.reply.streamToken == nil)

        let byOrigin = post(backend(), "stream", #"{"type":"stream","originStreamId":"stream-42"}"#)
        #expect(byOrigin.status == 200)
        #expect(byOrigin.reply.authenticationToken == nil)
        #expect(byOrigin.reply.pcastUri == nil)
        let origin = try #require(verified(byOrigin.reply.streamToken))
        #expect(origin.type == .stream)
        #expect(origin.originStreamId == "stream-42")
        #expect(origin.requiredTag == nil)

        let byTag = post(backend(), "stream", #"{"type":"stream","requiredTag":"roomId:r-1"}"#)
        #expect(byTag.status == 200)
        let tag = try #require(verified(byTag.reply.streamToken))
        #expect(tag.type == .stream)
        #expect(tag.originStreamId == nil)
        #expect(tag.requiredTag == RequiredTag(rawValue: "roomId:r-1"))

        // Without a type, an origin means a stream token.
        let implied = post(backend(), "stream", #"{"originStreamId":"stream-7"}"#)
        #expect(try #require(verified(implied.reply.streamToken)).type == .stream)
    }

    @Test func publishTokensCarryApplyTags() throws {
        let result = post(backend(), "stream", #"{"type":"publish","applyTags":["roomId:r-1","x"],"capabilities":["streaming"]}"#)
        #expect(result.status == 200)
        #expect(result.reply.status == .ok)
        let claims = try #require(verified(result.reply.streamToken))
        #expect(claims.type == .publish)
        #expect(claims.applyTags == ["roomId:r-1", "x"])
        #expect(claims.capabilities == ["streaming"])
        #expect(claims.originStreamId == nil)

        let untyped = post(backend(), "stream", #"{"applyTags":["y"]}"#)
        let untypedClaims = try #require(verified(untyped.reply.streamToken))
        #expect(untypedClaims.type == .publish, "no type and no origin: a publish token")
        #expect(untypedClaims.applyTags == ["y"])

        let bogus = post(backend(), "stream", #"{"type":"broadcast"}"#)
        #expect(bogus.status == 400)
        #expect(bogus.reply.status == .badRequest)
    }

    // MARK: Refusals

    @Test func malformedBodiesAreBadRequests() {
        let bodies = [
            "", "not json", "[1,2]", #"[{"roles":["participant"]}]"#, "null", "42", #""auth""#,
            #"{"roles":"participant"}"#, #"{"capabilities":[1]}"#, #"{"type":5}"#, #"{"applyTags":"x"}"#,
            #"{"originStreamId":{"id":"s"}}"#, #"{"roles":["participant"]"#,
        ]
        for route in ["auth", "stream"] {
            for body in bodies {
                let result = post(backend(), route, body)
                #expect(result.status == 400, "\(route) \(body)")
                #expect(result.reply.status == .badRequest, "\(route) \(body)")
                #expect(result.reply.authenticationToken == nil && result.reply.streamToken == nil, "\(route) \(body)")
                #expect(result.reply.message?.isEmpty == false)
            }
        }
    }

    @Test func unknownRoutesAreNotFound() {
        for route in ["admin", "", "Auth", "auth/", "streams"] {
            let result = post(backend(), route, "{}")
            #expect(result.status == 404, "\(route)")
            #expect(result.reply.status == .notFound, "\(route)")
            #expect(result.reply.authenticationToken == nil && result.reply.streamToken == nil)
        }
    }

    // MARK: Custom policy

    @Test func aCustomPolicyDecides() throws {
        let policy = GuestListPolicy()
        let backend = backend(policy)

        // The sample policy would refuse the moderator role; this one ignores the roles asked for.
        let ada = post(backend, "auth", #"{"user":"ada","roles":["moderator"]}"#)
        #expect(ada.status == 200)
        let adaClaims = try #require(verified(ada.reply.authenticationToken))
        #expect(adaClaims.capabilities == ["role:participant", "streaming"])
        #expect(adaClaims.expires == 1_700_000_060_000)
        #expect(TokenAuthority.roles(adaClaims) == [.participant])

        let bob = post(backend, "auth", #"{"user":"bob"}"#)
        #expect(bob.status == 403)
        #expect(bob.reply.status == .unauthorized)
        #expect(bob.reply.message == "not on the guest list")

        let publish = post(backend, "stream", #"{"user":"ada","type":"publish","applyTags":["ignored"]}"#)
        #expect(try #require(verified(publish.reply.streamToken)).applyTags == ["guest:ada"])

        let stream = post(backend, "stream", #"{"user":"ada","type":"stream","originStreamId":"s-1"}"#)
        #expect(stream.status == 500)
        #expect(stream.reply.status == .capacity)
        #expect(stream.reply.message == "no viewers today")

        // Refused before the policy is asked: malformed bodies and unknown routes.
        _ = post(backend, "auth", "[]")
        _ = post(backend, "nowhere", #"{"user":"ada"}"#)

        let asked = policy.log.all
        #expect(asked.map(\.kind) == [.authentication, .authentication, .publish, .stream])
        #expect(asked.first?.fields.roles == ["moderator"])
        #expect(asked.first?.string("user") == "ada")
        #expect(asked[2].fields.applyTags == ["ignored"])
        #expect(asked[3].fields.originStreamId == "s-1")
    }

    // MARK: Sessions: roles and resume

    let tokens = TokenAuthority(applicationId: Fixture.applicationId, secret: Fixture.secret)

    func machine(resumeKey: String = "fresh-key") -> SessionStateMachine {
        SessionStateMachine(sessionId: "session-new", remoteAddress: "127.0.0.1", tokens: tokens, keepAliveInterval: 10, now: now,
                            resumeKey: resumeKey)
    }

    func authenticate(_ session: inout SessionStateMachine, token: String, sessionId: String? = nil, resumeKey: String? = nil)
        -> [SessionStateMachine.Action] {
        session.handle(.message(.request(id: 1, .authenticate(.init(token: token, sessionId: sessionId, resumeKey: resumeKey))), now: now))
    }

    @Test func theAuthTokensRolesReachTheSession() {
        var moderator = machine()
        let actions = authenticate(&moderator, token: Fixture.token(.auth, now: now) { $0.capability("role:moderator") })
        #expect(actions.first == .opened(sessionId: "session-new"))
        #expect(moderator.state == .authenticated)
        #expect(moderator.roles == [.moderator])

        var plain = machine()
        _ = authenticate(&plain, token: Fixture.token(.auth, now: now) { $0.capability("real-time") })
        #expect(plain.state == .authenticated)
        #expect(plain.roles == nil)

        var several = machine()
        _ = authenticate(&several, token: Fixture.token(.auth, now: now) { $0.capabilities(["role:participant", "role:audience"]) })
        #expect(several.roles == [.participant, .audience])

        var unknown = machine()
        let refused = authenticate(&unknown, token: Fixture.token(.auth, now: now) { $0.capability("role:king") })
        #expect(unknown.state == .unauthenticated)
        #expect(unknown.roles == nil)
        guard case .send(let reply) = refused.first, case .failure(let failure) = reply.message else {
            Issue.record("an unknown role must be refused: \(refused)")
            return
        }
        #expect(failure.status == .notSupported)
    }

    @Test("resuming an offered session keeps its id and hands out a fresh resume key (keys are single-use)")
    func resumingAnOfferedSessionKeepsItsId() {
        var session = machine()
        session.offerResume(sessionId: "session-old", resumeKey: "old-key")
        let actions = authenticate(&session, token: Fixture.token(.auth, now: now), sessionId: "session-old", resumeKey: "old-key")
        #expect(actions == [
            .opened(sessionId: "session-old"),
            .send(Envelope(id: 1, .authenticated(.init(sessionId: "session-old", keepAliveInterval: 10, resumeKey: "fresh-key", resumed: true)))),
        ])
        #expect(session.sessionId == "session-old")
        #expect(session.resumeKey == "fresh-key")
        #expect(session.resumed)
        // Later requests carry the resumed id.
        #expect(session.handle(.message(.request(id: 2, .leaveRoom(.init(roomId: "r-1"))), now: now))
            == [.request(sessionId: "session-old", requestId: 2, .room(.leaveRoom(.init(roomId: "r-1"))))])
    }

    @Test func aWrongResumeKeyStartsANewSession() {
        let attempts: [(offer: Bool, sessionId: String?, key: String?)] = [
            (true, "session-old", "wrong-key"),
            (true, "session-old", nil),
            (true, "session-other", "old-key"),
            (true, nil, "old-key"),
            (false, "session-old", "old-key"),   // not offered: the platform did not find it
        ]
        for attempt in attempts {
            var session = machine()
            if attempt.offer { session.offerResume(sessionId: "session-old", resumeKey: "old-key") }
            let actions = authenticate(&session, token: Fixture.token(.auth, now: now), sessionId: attempt.sessionId, resumeKey: attempt.key)
            #expect(actions == [
                .opened(sessionId: "session-new"),
                .send(Envelope(id: 1, .authenticated(.init(sessionId: "session-new", keepAliveInterval: 10, resumeKey: "fresh-key", resumed: false)))),
            ], "\(attempt)")
            #expect(session.sessionId == "session-new")
            #expect(session.resumeKey == "fresh-key")
            #expect(!session.resumed)
        }
    }

    @Test func aRefusedTokenDoesNotTakeTheOfferedSession() {
        var session = machine()
        session.offerResume(sessionId: "session-old", resumeKey: "old-key")
        let actions = authenticate(&session, token: Fixture.token(.auth, now: now, secret: "wrong"), sessionId: "session-old", resumeKey: "old-key")
        #expect(!actions.contains(.opened(sessionId: "session-old")))
        #expect(session.state == .unauthenticated)
        #expect(session.sessionId == "session-new")
        #expect(!session.resumed)
    }
}
