/// ICE credentials: a username fragment and a password (RFC 8445 §5.3; RFC 8839 §5.4: 4–256 and
/// 22–256 characters of `[A-Za-z0-9+/]`).
public struct ICECredentials: Sendable, Hashable {
    public var ufrag: String
    public var password: String

    public init(ufrag: String, password: String) {
        self.ufrag = ufrag
        self.password = password
    }

    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")

    /// Fresh random credentials: 8 characters of ufrag (48 bits), 24 of password (144 bits).
    public static func random() -> ICECredentials {
        var generator = SystemRandomNumberGenerator()
        return random(using: &generator)
    }

    public static func random(using generator: inout some RandomNumberGenerator) -> ICECredentials {
        let characters = (0..<32).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] }
        return ICECredentials(ufrag: String(characters[..<8]), password: String(characters[8...]))
    }

    /// Whether these are credentials a peer may send: the lengths and the alphabet of RFC 8839.
    public var isValid: Bool {
        (4...256).contains(ufrag.count) && (22...256).contains(password.count)
            && (ufrag + password).allSatisfy { Self.alphabet.contains($0) }
    }
}

/// One WebRTC peer's ICE, as a lite agent (RFC 8445 §2.5) on a server with a single public
/// address: it never sends checks; it answers the peer's, authenticated with its own password,
/// takes the address of the pair the (controlling) peer nominates, and keeps consent (RFC 7675)
/// while checks keep coming, tearing the peer down after 30 s without one.
///
/// Pure: `handle(event) -> [Action]`, the time passed in; the relay's I/O thread owns one per
/// WebRTC transport and performs the actions.
///
/// ```swift
/// var agent = ICELiteAgent(local: .random(), remoteUfrag: offer.ufrag, now: now)
/// for action in agent.handle(.request(datagram, from: sender, at: now)) {
///     switch action {
///     case .send(let bytes, let to): socket.send(bytes, to: to)
///     case .selected(let address): transport.peer = address
///     case .refused(let why): statistics.count(why)
///     case .expired: tearDown()
///     }
/// }
/// ```
public struct ICELiteAgent: Sendable {
    public enum Event: Sendable {
        /// A STUN datagram from `from` (already told apart by ``DatagramKind``).
        case request([UInt8], from: STUNAddress, at: ContinuousClock.Instant)
        /// Time passes: consent and the connect deadline are checked.
        case tick(ContinuousClock.Instant)
    }

    public enum Action: Sendable, Hashable {
        /// A response (success or error) to send to the address the request came from.
        case send([UInt8], to: STUNAddress)
        /// The peer nominated this address (USE-CANDIDATE): media goes there from now on.
        case selected(STUNAddress)
        /// A datagram that is not a check this agent answers (counted, never answered unless
        /// the RFC asks for an error response).
        case refused(Refusal)
        /// No valid check for ``ICELiteAgent/consentTimeout`` (or none before
        /// ``ICELiteAgent/connectTimeout``): tear the peer down, freeing everything it holds.
        case expired
    }

    public enum Refusal: String, Sendable, Hashable {
        /// Not a STUN message, or one that does not decode.
        case malformed
        /// Not a Binding request (responses and indications are not answered).
        case notABindingRequest
        /// No FINGERPRINT, or a wrong one (RFC 8445 §7.3: checks carry one).
        case badFingerprint
        /// No USERNAME or MESSAGE-INTEGRITY: answered 400.
        case missingCredentials
        /// A USERNAME for another agent or peer: answered 401.
        case unknownUsername
        /// MESSAGE-INTEGRITY does not verify with this agent's password: answered 401.
        case badIntegrity
        /// The peer also claims the controlled role: answered 487 (a lite agent is never
        /// controlling).
        case roleConflict
        /// After the agent expired.
        case expired
    }

    /// RFC 7675 §5.1: consent is lost 30 s after the last answered check.
    public static let consentTimeout: Duration = .seconds(30)
    /// How long a peer has to send its first valid check after the agent is made.
    public static let connectTimeout: Duration = .seconds(30)

    public let local: ICECredentials
    /// The peer's ufrag from its offer; a check's USERNAME must be `local:remote`.
    public let remoteUfrag: String
    public private(set) var selected: STUNAddress?
    public private(set) var lastConsent: ContinuousClock.Instant?
    public private(set) var hasExpired = false
    /// Silence after the last valid check that ends consent (``consentTimeout`` unless a
    /// deployment chooses otherwise).
    public let consentTimeout: Duration
    /// Time from creation to the first valid check.
    public let connectTimeout: Duration
    private let created: ContinuousClock.Instant
    private let key: [UInt8]

    public init(local: ICECredentials, remoteUfrag: String, now: ContinuousClock.Instant,
                consentTimeout: Duration = ICELiteAgent.consentTimeout, connectTimeout: Duration = ICELiteAgent.connectTimeout) {
        self.local = local
        self.remoteUfrag = remoteUfrag
        self.created = now
        self.key = Array(local.password.utf8)
        self.consentTimeout = consentTimeout
        self.connectTimeout = connectTimeout
    }

    /// The local ufrag of a check's USERNAME (`local:remote`): how the relay finds the agent a
    /// datagram from an unknown address belongs to. Nil when the datagram is not such a check.
    public static func localUfrag(of datagram: [UInt8]) -> Substring? {
        guard let message = try? STUNMessage(decoding: datagram), let username = message.username,
              let colon = username.firstIndex(of: ":") else { return nil }
        return Substring(username[..<colon])
    }

    public mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .tick(let now):
            guard !hasExpired else { return [] }
            let deadline = lastConsent.map { $0 + consentTimeout } ?? created + connectTimeout
            guard now >= deadline else { return [] }
            hasExpired = true
            return [.expired]
        case .request(let datagram, let sender, let now):
            guard !hasExpired else { return [.refused(.expired)] }
            return answer(datagram, from: sender, at: now)
        }
    }

    private mutating func answer(_ datagram: [UInt8], from sender: STUNAddress, at now: ContinuousClock.Instant) -> [Action] {
        guard let request = try? STUNMessage(decoding: datagram) else { return [.refused(.malformed)] }
        guard request.kind == .request, request.method == .binding else { return [.refused(.notABindingRequest)] }
        // A check without a valid fingerprint may be another protocol's bytes: dropped silently.
        guard STUNMessage.fingerprintIsValid(datagram) else { return [.refused(.badFingerprint)] }
        guard let username = request.username, request.attribute(STUNAttribute.messageIntegrity) != nil else {
            return [.refused(.missingCredentials), .send(error(400, "Bad Request", to: request), to: sender)]
        }
        guard username == "\(local.ufrag):\(remoteUfrag)" else {
            return [.refused(.unknownUsername), .send(error(401, "Unauthorized", to: request), to: sender)]
        }
        guard STUNMessage.integrityIsValid(datagram, key: key) else {
            return [.refused(.badIntegrity), .send(error(401, "Unauthorized", to: request), to: sender)]
        }
        // RFC 8445 §7.3.1.1: a lite agent is controlled; a peer claiming the same role conflicts.
        if request.iceControlled != nil, request.iceControlling == nil {
            return [.refused(.roleConflict), .send(error(487, "Role Conflict", to: request, signed: true), to: sender)]
        }
        lastConsent = now
        var response = STUNMessage(kind: .successResponse, transactionID: request.transactionID)
        response.xorMappedAddress = sender
        var actions: [Action] = [.send(response.encoded(integrityKey: key), to: sender)]
        // Nomination: the controlling peer's USE-CANDIDATE selects this pair; a later nomination
        // of another address (a network change) moves the media.
        if request.useCandidate, selected != sender {
            selected = sender
            actions.append(.selected(sender))
        }
        return actions
    }

    private func error(_ code: Int, _ reason: String, to request: STUNMessage, signed: Bool = false) -> [UInt8] {
        var response = STUNMessage(kind: .errorResponse, transactionID: request.transactionID)
        response.errorCode = (code, reason)
        // An unauthenticated request gets an unsigned error (RFC 8489 §9.1.3): the peer's key is
        // what failed.
        return response.encoded(integrityKey: signed ? key : nil)
    }
}
