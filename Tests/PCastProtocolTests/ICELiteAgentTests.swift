import Foundation
import PCastProtocol
import Testing

/// The ICE-lite agent with a manual clock, against checks made by aioice (aiortc's ICE, an
/// independent implementation) and against forged ones.
@Suite("ICE-lite agent: answers, nomination, consent")
struct ICELiteAgentTests {
    static let local = ICECredentials(ufrag: "relayUfr", password: "relayPasswordRelayPassw0")
    static let browser = STUNAddress(ipv4: "127.0.0.1", port: 50_123)!
    static let start = ContinuousClock.now

    static func agent() -> ICELiteAgent {
        ICELiteAgent(local: local, remoteUfrag: "peer", now: start)
    }

    /// A check as a browser sends it, made with our encoder (the aioice tests below make theirs).
    static func check(username: String = "relayUfr:peer", password: String = local.password, nominate: Bool = true,
                      controlling: Bool = true, fingerprint: Bool = true) -> [UInt8] {
        var request = STUNMessage(kind: .request, transactionID: STUNMessage.newTransactionID())
        request.username = username
        request.priority = 1_853_824_767
        if controlling { request.iceControlling = 42 } else { request.iceControlled = 42 }
        request.useCandidate = nominate
        return request.encoded(integrityKey: Array(password.utf8), fingerprint: fingerprint)
    }

    static func responses(_ actions: [ICELiteAgent.Action]) -> [STUNMessage] {
        actions.compactMap { action in
            guard case .send(let bytes, _) = action else { return nil }
            return try? STUNMessage(decoding: bytes)
        }
    }

    @Test("aioice's nominating check is answered with a signed success carrying its address, and selects that address")
    func aioiceCheck() throws {
        let checks = try AioiceOracle.requests([
            .init(username: "relayUfr:peer", password: Self.local.password, nominate: true),
            .init(username: "relayUfr:peer", password: Self.local.password, nominate: false),
        ])
        var agent = Self.agent()
        let first = agent.handle(.request(checks[0].bytes, from: Self.browser, at: Self.start + .milliseconds(10)))
        #expect(first.contains(.selected(Self.browser)))
        #expect(agent.selected == Self.browser)
        let second = agent.handle(.request(checks[1].bytes, from: Self.browser, at: Self.start + .milliseconds(20)))
        #expect(!second.contains { if case .selected = $0 { true } else { false } }, "the same pair is not selected twice")
        let sent = (first + second).compactMap { action -> [UInt8]? in
            if case .send(let bytes, let to) = action, to == Self.browser { return bytes } else { return nil }
        }
        // aioice parses our responses (it checks FINGERPRINT) and verifies MESSAGE-INTEGRITY.
        let parsed = try AioiceOracle.parse(sent, password: Self.local.password)
        #expect(parsed.count == 2)
        for (index, response) in parsed.enumerated() {
            #expect(response.messageClass == "RESPONSE" && response.method == "BINDING", "\(response)")
            #expect(response.integrity && response.fingerprint, "\(response)")
            #expect(response.transactionID == checks[index].transactionID)
            #expect(response.mappedAddress == "127.0.0.1:50123")
        }
    }

    @Test("a check under another password or username is answered 401 unsigned, nothing is selected, no consent is granted")
    func forgedChecks() throws {
        let forged = try AioiceOracle.requests([
            .init(username: "relayUfr:peer", password: "notTheRelayPasswordAtAll", nominate: true),
            .init(username: "otherUfr:peer", password: Self.local.password, nominate: true),
        ])
        var agent = Self.agent()
        var sent: [[UInt8]] = []
        for (check, refusal) in zip(forged, [ICELiteAgent.Refusal.badIntegrity, .unknownUsername]) {
            let actions = agent.handle(.request(check.bytes, from: Self.browser, at: Self.start + .seconds(1)))
            #expect(actions.first == .refused(refusal))
            for case .send(let bytes, _) in actions { sent.append(bytes) }
        }
        #expect(agent.selected == nil && agent.lastConsent == nil)
        let parsed = try AioiceOracle.parse(sent, password: nil)
        #expect(parsed.map(\.errorCode) == [401, 401] && parsed.allSatisfy { $0.messageClass == "ERROR" && $0.fingerprint })
        // The peer never proved itself: the agent expires at the connect deadline.
        #expect(agent.handle(.tick(Self.start + .seconds(29))) == [])
        #expect(agent.handle(.tick(Self.start + ICELiteAgent.connectTimeout)) == [.expired])
    }

    @Test("malformed, unsigned, fingerprint-less, non-request and role-conflicting datagrams: each refused as the RFCs say")
    func refusals() {
        var agent = Self.agent()
        let at = Self.start + .seconds(1)
        #expect(agent.handle(.request([0, 1, 0, 0, 1, 2, 3], from: Self.browser, at: at)) == [.refused(.malformed)])
        #expect(agent.handle(.request(Self.check(fingerprint: false), from: Self.browser, at: at)) == [.refused(.badFingerprint)])
        var unsigned = STUNMessage(kind: .request, transactionID: STUNMessage.newTransactionID())
        unsigned.username = "relayUfr:peer"
        let missing = agent.handle(.request(unsigned.encoded(), from: Self.browser, at: at))
        #expect(missing.first == .refused(.missingCredentials) && Self.responses(missing).first?.errorCode?.code == 400)
        let indication = STUNMessage(kind: .indication, transactionID: STUNMessage.newTransactionID()).encoded()
        #expect(agent.handle(.request(indication, from: Self.browser, at: at)) == [.refused(.notABindingRequest)])
        let conflict = agent.handle(.request(Self.check(controlling: false), from: Self.browser, at: at))
        #expect(conflict.first == .refused(.roleConflict) && Self.responses(conflict).first?.errorCode?.code == 487)
        #expect(agent.selected == nil && agent.lastConsent == nil)
    }

    @Test("consent: every answered check renews it; 30 s without one expires the peer, and nothing is answered after")
    func consent() {
        var agent = Self.agent()
        _ = agent.handle(.request(Self.check(), from: Self.browser, at: Self.start + .seconds(1)))
        // Consent checks every 5 s keep it alive well past the connect deadline.
        for second in stride(from: 6, through: 61, by: 5) {
            let actions = agent.handle(.request(Self.check(nominate: false), from: Self.browser, at: Self.start + .seconds(second)))
            #expect(Self.responses(actions).first?.kind == .successResponse)
            #expect(agent.handle(.tick(Self.start + .seconds(second) + .milliseconds(500))) == [])
        }
        #expect(agent.handle(.tick(Self.start + .seconds(61 + 29))) == [])
        #expect(agent.handle(.tick(Self.start + .seconds(61 + 30))) == [.expired])
        #expect(agent.handle(.tick(Self.start + .seconds(200))) == [], "expired once")
        #expect(agent.handle(.request(Self.check(), from: Self.browser, at: Self.start + .seconds(201))) == [.refused(.expired)])
    }

    @Test("a nomination from a new address moves the media there (the peer's network changed)")
    func renomination() {
        var agent = Self.agent()
        let wifi = STUNAddress(ipv4: "127.0.0.2", port: 40_000)!
        _ = agent.handle(.request(Self.check(), from: Self.browser, at: Self.start))
        #expect(agent.handle(.request(Self.check(), from: wifi, at: Self.start + .seconds(1))).contains(.selected(wifi)))
        #expect(agent.selected == wifi)
    }

    @Test("the relay finds the agent of an unknown address by the local ufrag of the check's USERNAME")
    func lookup() {
        #expect(ICELiteAgent.localUfrag(of: Self.check()) == "relayUfr")
        #expect(ICELiteAgent.localUfrag(of: [0x80, 0x60, 0, 1]) == nil)
        var noColon = STUNMessage(kind: .request, transactionID: STUNMessage.newTransactionID())
        noColon.username = "relayUfr"
        #expect(ICELiteAgent.localUfrag(of: noColon.encoded()) == nil)
    }

    @Test("credentials: random ones are valid and distinct; RFC 8839's lengths and alphabet are enforced")
    func credentials() {
        let made = (0..<100).map { _ in ICECredentials.random() }
        #expect(made.allSatisfy { $0.isValid })
        #expect(Set(made.map(\.ufrag)).count == 100 && Set(made.map(\.password)).count == 100)
        #expect(!ICECredentials(ufrag: "abc", password: String(repeating: "p", count: 22)).isValid)
        #expect(!ICECredentials(ufrag: "abcd", password: String(repeating: "p", count: 21)).isValid)
        #expect(!ICECredentials(ufrag: "ab:d", password: String(repeating: "p", count: 22)).isValid)
        #expect(ICECredentials(ufrag: "ab+d", password: String(repeating: "p/", count: 11)).isValid)
    }
}
