import CDTLSShim
import SRTP

/// Why DTLS could not start, or why a handshake ended without keys.
public enum DTLSError: Error, Sendable, Hashable, CustomStringConvertible {
    /// OpenSSL could not make the key, certificate or context (its error text).
    case setup(String)
    /// The handshake failed: a malformed or hostile record, an alert from the peer, no common
    /// cipher or SRTP profile (OpenSSL's error text).
    case handshake(String)
    /// The peer's certificate is not the one its offer announced: someone else answered.
    case fingerprintMismatch(expected: String, received: String)
    /// The handshake ended without `use_srtp`, or with a profile the relay does not do.
    case noSRTPProfile
    /// The SRTP keys could not be exported or did not make an SRTP key.
    case keyExport(String)

    public var description: String {
        switch self {
        case .setup(let why): return "DTLS setup failed: \(why)"
        case .handshake(let why): return "DTLS handshake failed: \(why)"
        case .fingerprintMismatch(let expected, let received):
            return "the peer's certificate fingerprint \(received) is not the \(expected) its offer announced"
        case .noSRTPProfile: return "the peer negotiated no SRTP profile the relay supports (use_srtp)"
        case .keyExport(let why): return "SRTP keys could not be exported: \(why)"
        }
    }
}

/// An ECDSA P-256 key with its self-signed certificate: the relay's DTLS identity, announced in
/// every answer by its SHA-256 fingerprint.
///
/// ```swift
/// let certificate = try DTLSCertificate()
/// certificate.fingerprint   // "3A:9F:…" (32 bytes), for a=fingerprint:sha-256
/// ```
/// Unchecked: key and certificate are immutable after `init` and only read by OpenSSL, which takes its own references.
public final class DTLSCertificate: @unchecked Sendable {
    // Immutable after init and only read by OpenSSL (which takes its own references): Sendable.
    let key: OpaquePointer
    let certificate: OpaquePointer
    /// The certificate's SHA-256 fingerprint, upper-case hex pairs joined by colons.
    public let fingerprint: String

    /// A fresh key and certificate (`commonName` as subject and issuer, valid for `days`).
    public init(commonName: String = "PCastKit", days: Int = 30) throws(DTLSError) {
        var key: OpaquePointer?
        var certificate: OpaquePointer?
        guard pcast_dtls_make_certificate(commonName, Int32(clamping: days), &key, &certificate) == 1,
              let key, let certificate else { throw .setup("certificate: \(openSSLErrors())") }
        guard let fingerprint = Self.fingerprint(of: certificate) else {
            X509_free(certificate)
            EVP_PKEY_free(key)
            throw .setup("certificate fingerprint: \(openSSLErrors())")
        }
        self.key = key
        self.certificate = certificate
        self.fingerprint = fingerprint
    }

    deinit {
        X509_free(certificate)
        EVP_PKEY_free(key)
    }

    static func fingerprint(of certificate: OpaquePointer) -> String? {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        guard X509_digest(certificate, EVP_sha256(), &digest, &length) == 1 else { return nil }
        return DTLSFingerprint.format(digest.prefix(Int(length)))
    }
}

/// SHA-256 fingerprints as SDP writes them (`a=fingerprint:sha-256 AB:CD:…`).
public enum DTLSFingerprint {
    static let digits = Array("0123456789ABCDEF".utf8)

    static func format<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> String {
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 3)
        for byte in bytes {
            if !text.isEmpty { text.append(UInt8(ascii: ":")) }
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The 32 bytes of a SHA-256 fingerprint written as colon-separated hex pairs; nil otherwise.
    static func digest(_ text: String) -> [UInt8]? {
        let pairs = text.split(separator: ":")
        guard pairs.count == 32 else { return nil }
        var bytes: [UInt8] = []
        for pair in pairs {
            guard pair.count == 2, let byte = UInt8(pair, radix: 16) else { return nil }
            bytes.append(byte)
        }
        return bytes
    }

    /// Whether two fingerprints name the same digest (hex case does not matter).
    public static func matches(_ a: String, _ b: String) -> Bool {
        a.uppercased() == b.uppercased()
    }
}

/// A DTLS configuration: its certificate and role, DTLS 1.2 (system OpenSSL 3.0 has no DTLS 1.3;
/// a client offering 1.3 falls back to 1.2), `use_srtp` preferring AEAD AES-128-GCM over AES-CM-128
/// with HMAC-SHA1-80, and the peer's certificate required (checked against its offer's fingerprint
/// inside the handshake, and again once it ends). One context serves every peer of that role: the
/// relay is a server to every WebRTC peer; the client role serves load generators and relays
/// that dial another.
/// Unchecked: the SSL_CTX is configured in `init` and never changed; OpenSSL lets configured contexts be shared between threads.
public final class DTLSContext: @unchecked Sendable {
    public enum Role: Sendable, Hashable { case server, client }

    // OpenSSL's SSL_CTX may be shared by SSL objects on any thread once configured; it is never
    // changed after init.
    let context: OpaquePointer
    public let certificate: DTLSCertificate
    public let role: Role

    /// The SRTP profiles offered in `use_srtp`, the relay's preference first.
    public static let srtpProfiles = "SRTP_AEAD_AES_128_GCM:SRTP_AES128_CM_SHA1_80"

    public init(certificate: DTLSCertificate, role: Role = .server) throws(DTLSError) {
        guard let context = SSL_CTX_new(role == .server ? DTLS_server_method() : DTLS_client_method()) else {
            throw .setup("SSL_CTX_new: \(openSSLErrors())")
        }
        self.context = context
        self.certificate = certificate
        self.role = role
        guard pcast_ssl_ctx_set_min_proto_version(context, DTLS1_2_VERSION) == 1,
              SSL_CTX_use_certificate(context, certificate.certificate) == 1,
              SSL_CTX_use_PrivateKey(context, certificate.key) == 1,
              SSL_CTX_check_private_key(context) == 1,
              // 0 means success for this one.
              SSL_CTX_set_tlsext_use_srtp(context, Self.srtpProfiles) == 0
        else { throw .setup("context: \(openSSLErrors())") }
        pcast_ssl_ctx_set_no_query_mtu(context)
        // Self-signed certificates are the rule in WebRTC: any chain is accepted and the leaf's
        // digest is what is checked (both roles).
        pcast_ssl_ctx_require_peer_certificate(context)
    }

    deinit {
        SSL_CTX_free(context)
    }
}

/// The SRTP keys a DTLS-SRTP handshake produced (RFC 5764 §4.2).
public struct DTLSSRTPKeys: Sendable, Hashable {
    public var profile: SRTPProfile
    /// Protects what the DTLS client (the WebRTC peer) sends.
    public var client: SRTPKey
    /// Protects what the DTLS server (the relay) sends.
    public var server: SRTPKey
}

/// One peer's DTLS endpoint in its context's role, fed datagrams by its owner (no socket, no
/// thread): what it must send comes back as events. Not thread-safe: one owner thread. A client
/// starts the handshake with ``start()``; a server answers what it receives.
///
/// ```swift
/// let dtls = try DTLSEndpoint(context: context, peerFingerprint: offer.fingerprint)
/// for event in dtls.receive(datagram) {
///     switch event {
///     case .send(let bytes): socket.send(bytes, to: peer)
///     case .connected(let keys): startSRTP(keys)
///     case .closed, .failed: tearDown()
///     }
/// }
/// ```
public final class DTLSEndpoint {
    public enum State: Sendable, Hashable { case handshaking, connected, closed, failed }

    public enum Event: Sendable, Hashable {
        /// A datagram for the peer.
        case send([UInt8])
        /// The handshake finished and the peer is who its offer said: SRTP may start.
        case connected(DTLSSRTPKeys)
        /// The peer closed the association (close_notify).
        case closed
        /// The handshake failed or the peer is not who its offer said; nothing more will happen.
        case failed(DTLSError)
    }

    public private(set) var state: State = .handshaking
    /// The negotiated protocol once connected (`DTLSv1.2`).
    public private(set) var protocolVersion: String?
    private let ssl: OpaquePointer
    private let bio: OpaquePointer
    private let expectedFingerprint: String
    private var scratch = [UInt8](repeating: 0, count: 65_536)

    /// `peerFingerprint` is the SHA-256 fingerprint from the peer's offer; `mtu` bounds the
    /// datagrams the handshake sends (UDP payload bytes).
    public init(context: DTLSContext, peerFingerprint: String, mtu: Int = 1_200) throws(DTLSError) {
        guard let ssl = SSL_new(context.context) else { throw .setup("SSL_new: \(openSSLErrors())") }
        guard let bio = pcast_dtls_bio_new() else {
            SSL_free(ssl)
            throw .setup("BIO: \(openSSLErrors())")
        }
        // SSL_set_bio takes one reference per direction: the same BIO reads and writes.
        _ = BIO_up_ref(bio)
        SSL_set_bio(ssl, bio, bio)
        if context.role == .server { SSL_set_accept_state(ssl) } else { SSL_set_connect_state(ssl) }
        _ = pcast_ssl_set_mtu(ssl, max(256, mtu))
        self.ssl = ssl
        self.bio = bio
        expectedFingerprint = peerFingerprint
        // Checked inside the handshake too (a forged peer gets bad_certificate, not a finished
        // handshake); an unparsable fingerprint is left to the check after it, which fails.
        if let digest = DTLSFingerprint.digest(peerFingerprint) {
            _ = digest.withUnsafeBufferPointer { pcast_ssl_expect_fingerprint(ssl, $0.baseAddress) }
        }
    }

    deinit {
        // SSL_free releases the BIO's two references; ours (from BIO_up_ref) was handed over.
        SSL_free(ssl)
    }

    /// A client's first flight (its ClientHello); nothing for a server, which waits for one.
    public func start() -> [Event] {
        guard state == .handshaking, SSL_is_server(ssl) == 0 else { return [] }
        return advance()
    }

    /// Handles one datagram from the peer (a DTLS record or several).
    public func receive(_ datagram: [UInt8]) -> [Event] {
        guard state == .handshaking || state == .connected else { return [] }
        let queued = datagram.withUnsafeBufferPointer { pcast_dtls_bio_push(bio, $0.baseAddress, $0.count) }
        guard queued == 1 else { return [] }
        return advance()
    }

    /// Milliseconds until ``handleTimeout()`` should be called (a handshake flight is
    /// retransmitted), nil when no timer runs.
    public var timeoutMilliseconds: Int? {
        guard state == .handshaking else { return nil }
        let remaining = pcast_dtls_timeout_milliseconds(ssl)
        return remaining < 0 ? nil : remaining
    }

    /// Retransmits the last flight when its timer expired; fails after OpenSSL gives up.
    public func handleTimeout() -> [Event] {
        guard state == .handshaking else { return [] }
        ERR_clear_error()
        if pcast_dtls_handle_timeout(ssl) < 0 {
            state = .failed
            return drain() + [.failed(.handshake("the peer stopped answering: \(openSSLErrors())"))]
        }
        return drain()
    }

    /// Sends close_notify; nothing more is handled afterwards.
    public func close() -> [Event] {
        guard state == .connected else {
            state = .closed
            return []
        }
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
        state = .closed
        return drain()
    }

    private func advance() -> [Event] {
        ERR_clear_error()
        var events: [Event] = []
        if state == .handshaking {
            let result = SSL_do_handshake(ssl)
            if result == 1 {
                events += drain()
                let outcome = finishHandshake()
                switch outcome {
                case .success(let keys):
                    state = .connected
                    events.append(.connected(keys))
                case .failure(let error):
                    state = .failed
                    events.append(.failed(error))
                    return events
                }
            } else {
                let code = SSL_get_error(ssl, result)
                events += drain()
                if code != SSL_ERROR_WANT_READ && code != SSL_ERROR_WANT_WRITE {
                    state = .failed
                    var received = [UInt8](repeating: 0, count: 32)
                    if pcast_ssl_fingerprint_mismatch(ssl, &received) == 1 {
                        ERR_clear_error()
                        events.append(.failed(.fingerprintMismatch(expected: expectedFingerprint, received: DTLSFingerprint.format(received))))
                    } else {
                        events.append(.failed(.handshake(openSSLErrors(or: "error \(code)"))))
                    }
                }
                return events
            }
        }
        // Connected: records after the handshake (a retransmitted Finished, close_notify; the
        // relay negotiates no data channel, so application data is read and dropped).
        while state == .connected {
            let read = scratch.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
            if read > 0 { continue }
            let code = SSL_get_error(ssl, read)
            if code == SSL_ERROR_ZERO_RETURN {
                state = .closed
                events += drain()
                events.append(.closed)
            } else if code != SSL_ERROR_WANT_READ && code != SSL_ERROR_WANT_WRITE {
                state = .failed
                events += drain()
                events.append(.failed(.handshake(openSSLErrors(or: "error \(code) after the handshake"))))
            }
            break
        }
        return events + drain()
    }

    private func finishHandshake() -> Result<DTLSSRTPKeys, DTLSError> {
        protocolVersion = SSL_get_version(ssl).map { String(cString: $0) }
        guard let peer = SSL_get1_peer_certificate(ssl) else {
            return .failure(.fingerprintMismatch(expected: expectedFingerprint, received: "no certificate"))
        }
        defer { X509_free(peer) }
        guard let received = DTLSCertificate.fingerprint(of: peer) else {
            return .failure(.handshake("peer certificate digest: \(openSSLErrors())"))
        }
        guard DTLSFingerprint.matches(received, expectedFingerprint) else {
            return .failure(.fingerprintMismatch(expected: expectedFingerprint, received: received))
        }
        guard let selected = SSL_get_selected_srtp_profile(ssl) else { return .failure(.noSRTPProfile) }
        let profile: SRTPProfile
        let keyLength = 16
        let saltLength: Int
        switch selected.pointee.id {
        case UInt(SRTP_AEAD_AES_128_GCM):
            profile = .aeadAES128GCM
            saltLength = 12
        case UInt(SRTP_AES128_CM_SHA1_80):
            profile = .aes128CMHMACSHA1_80
            saltLength = 14
        default:
            return .failure(.noSRTPProfile)
        }
        // RFC 5764 §4.2: client key | server key | client salt | server salt.
        let label = "EXTRACTOR-dtls_srtp"
        var material = [UInt8](repeating: 0, count: 2 * (keyLength + saltLength))
        let exported = label.withCString { text in
            SSL_export_keying_material(ssl, &material, material.count, text, label.utf8.count, nil, 0, 0)
        }
        guard exported == 1 else { return .failure(.keyExport(openSSLErrors())) }
        let clientKey = material[0..<keyLength]
        let serverKey = material[keyLength..<(2 * keyLength)]
        let clientSalt = material[(2 * keyLength)..<(2 * keyLength + saltLength)]
        let serverSalt = material[(2 * keyLength + saltLength)...]
        do {
            return .success(DTLSSRTPKeys(
                profile: profile,
                client: try SRTPKey(profile: profile, bytes: Array(clientKey + clientSalt)),
                server: try SRTPKey(profile: profile, bytes: Array(serverKey + serverSalt))))
        } catch {
            return .failure(.keyExport("\(error)"))
        }
    }

    /// What OpenSSL wrote since the last call, one event per datagram.
    private func drain() -> [Event] {
        var events: [Event] = []
        while true {
            let length = scratch.withUnsafeMutableBufferPointer { pcast_dtls_bio_pop(bio, $0.baseAddress, $0.count) }
            if length == 0 { break }
            if length > 0 { events.append(.send(Array(scratch[0..<length]))) }
        }
        return events
    }
}

/// OpenSSL's queued errors for this thread, as text (and clears them).
func openSSLErrors(or fallback: String = "unknown OpenSSL error") -> String {
    var messages: [String] = []
    var buffer = [CChar](repeating: 0, count: 256)
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        ERR_error_string_n(code, &buffer, buffer.count)
        messages.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return messages.isEmpty ? fallback : messages.joined(separator: "; ")
}
