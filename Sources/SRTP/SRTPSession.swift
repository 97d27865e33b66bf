import CSRTP
import CSRTPCipher
import Synchronization

/// An SRTP protection profile (RFC 3711, RFC 7714).
public enum SRTPProfile: String, Sendable, Hashable, CaseIterable, Codable {
    /// AEAD AES-128-GCM, 16-byte tag: ~4× cheaper than AES-CM + HMAC here; the default on every leg we control.
    case aeadAES128GCM = "AEAD_AES_128_GCM"
    /// AES-128 counter mode with a 10-byte HMAC-SHA1 tag: for peers that need it.
    case aes128CMHMACSHA1_80 = "AES_CM_128_HMAC_SHA1_80"

    /// Bytes of master key + master salt.
    public var keyingMaterialLength: Int {
        switch self {
        case .aeadAES128GCM: return 16 + 12
        case .aes128CMHMACSHA1_80: return 16 + 14
        }
    }
}

/// Why SRTP refused a packet or a key.
public enum SRTPError: Error, Sendable, Hashable, CustomStringConvertible {
    case initializationFailed(code: Int)
    case badKeyLength(expected: Int, given: Int)
    /// The tag did not verify: forged, corrupted, or protected with another key.
    case authenticationFailed
    /// A packet index seen before, or too old for the replay window.
    case replayed
    /// Too short or otherwise not an (S)RTP/(S)RTCP packet.
    case malformed
    /// Any other libsrtp failure, by its status code.
    case failed(code: Int)

    public var description: String {
        switch self {
        case .initializationFailed(let c): return "libsrtp could not be initialized (status \(c))"
        case .badKeyLength(let e, let g): return "SRTP keying material must be \(e) bytes, not \(g)"
        case .authenticationFailed: return "SRTP authentication failed"
        case .replayed: return "SRTP replay check failed"
        case .malformed: return "not a valid SRTP packet"
        case .failed(let c): return "libsrtp failed (status \(c))"
        }
    }

    init(status: srtp_err_status_t) {
        switch status {
        case srtp_err_status_auth_fail: self = .authenticationFailed
        case srtp_err_status_replay_fail, srtp_err_status_replay_old: self = .replayed
        case srtp_err_status_bad_param, srtp_err_status_parse_err: self = .malformed
        default: self = .failed(code: Int(status.rawValue))
        }
    }
}

/// Master key + salt for one direction of one flow.
///
/// ```swift
/// let key = SRTPKey.random(for: .aeadAES128GCM)
/// let text = key.base64   // handed to the peer over the authenticated signaling channel
/// ```
public struct SRTPKey: Sendable, Hashable {
    public let profile: SRTPProfile
    public let bytes: [UInt8]

    public init(profile: SRTPProfile, bytes: [UInt8]) throws(SRTPError) {
        guard bytes.count == profile.keyingMaterialLength else {
            throw .badKeyLength(expected: profile.keyingMaterialLength, given: bytes.count)
        }
        self.profile = profile
        self.bytes = bytes
    }

    public init(profile: SRTPProfile, base64: String) throws(SRTPError) {
        guard let data = Base64.decode(base64) else {
            throw .badKeyLength(expected: profile.keyingMaterialLength, given: 0)
        }
        try self.init(profile: profile, bytes: data)
    }

    /// Fresh keying material from the system's secure random source.
    public static func random(for profile: SRTPProfile) -> SRTPKey {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<profile.keyingMaterialLength).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return try! SRTPKey(profile: profile, bytes: bytes)
    }

    public var base64: String { Base64.encode(bytes) }
}

/// One direction of SRTP for one flow (any SSRC): protects what we send, or unprotects what we receive.
///
/// ```swift
/// let sender = try SRTPSession(key: key, direction: .outbound)
/// var packet: [UInt8] = rtpBytes
/// try sender.protect(&packet)            // appends the tag, encrypts the payload
/// let receiver = try SRTPSession(key: key, direction: .inbound)
/// try receiver.unprotect(&packet)        // verifies, decrypts, checks for replay
/// ```
///
/// Calls are serialised by a lock: a session can be shared, but one flow's packets are sequential anyway.
/// Unchecked: its libsrtp context lives in the `Mutex` `context`; every protect and unprotect runs under it.
public final class SRTPSession: @unchecked Sendable {
    public enum Direction: Sendable { case outbound, inbound }

    /// Bytes protect may add to an RTP or RTCP packet (tag, SRTCP index, MKI).
    public static let maximumOverhead = 16 + 128 + 4

    /// Packets remembered for replay protection; large enough for NACK-driven retransmissions.
    public static let replayWindow = 1024

    // Unchecked: holds libsrtp's `srtp_t` and the sealer, reached only inside the session's `Mutex`.
    private struct Context: @unchecked Sendable {
        let session: srtp_t
        /// Outbound AES-GCM RTP is sealed here rather than by libsrtp (see ``GCMSealer``).
        var sealer: GCMSealer?

        /// Protects the RTP packet of `size` bytes at `base` in place (with room for the tag after
        /// it): through the sealer when there is one, else libsrtp.
        mutating func protectRTP(_ base: UnsafeMutableRawPointer, _ size: inout Int32) throws(SRTPError) {
            if sealer != nil {
                size = Int32(try sealer!.seal(base, length: Int(size)))
            } else {
                try check(srtp_protect(session, base, &size))
            }
        }
    }
    private let context: Mutex<Context>
    public let profile: SRTPProfile
    public let direction: Direction

    private static let initialized = Mutex<srtp_err_status_t?>(nil)

    public convenience init(key: SRTPKey, direction: Direction) throws(SRTPError) {
        try self.init(key: key, direction: direction, sealsWithOpenSSL: true)
    }

    /// `sealsWithOpenSSL` false leaves outbound AES-GCM RTP to libsrtp too (the reference the
    /// OpenSSL path is checked and measured against).
    package init(key: SRTPKey, direction: Direction, sealsWithOpenSSL: Bool) throws(SRTPError) {
        let status = Self.initialized.withLock { state -> srtp_err_status_t in
            if let state { return state }
            let result = srtp_init()
            state = result
            return result
        }
        guard status == srtp_err_status_ok else { throw .initializationFailed(code: Int(status.rawValue)) }

        var policy = srtp_policy_t()
        switch key.profile {
        case .aeadAES128GCM:
            srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtp)
            srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtcp)
        case .aes128CMHMACSHA1_80:
            srtp_crypto_policy_set_rtp_default(&policy.rtp)
            srtp_crypto_policy_set_rtcp_default(&policy.rtcp)
        }
        policy.ssrc.type = direction == .outbound ? ssrc_any_outbound : ssrc_any_inbound
        policy.window_size = UInt(Self.replayWindow)
        // The relay re-sends cached packets to answer NACKs, so the same index may be protected twice.
        policy.allow_repeat_tx = 1
        var keyBytes = key.bytes
        var session: srtp_t?
        let created = keyBytes.withUnsafeMutableBufferPointer { buffer -> srtp_err_status_t in
            policy.key = buffer.baseAddress
            // libsrtp copies the key during creation.
            return srtp_create(&session, &policy)
        }
        guard created == srtp_err_status_ok, let session else { throw SRTPError(status: created) }
        var sealer: GCMSealer?
        if sealsWithOpenSSL, direction == .outbound, key.profile == .aeadAES128GCM {
            sealer = GCMSealer(masterKey: key.bytes[0..<16], masterSalt: key.bytes[16..<28])
            // Without it (OpenSSL failed) libsrtp seals as before.
        }
        context = Mutex(Context(session: session, sealer: sealer))
        profile = key.profile
        self.direction = direction
    }

    deinit {
        context.withLock { context in
            srtp_dealloc(context.session)
            context.sealer?.free()
        }
    }

    /// Whether outbound RTP is sealed through OpenSSL (AES-GCM) rather than libsrtp.
    package var sealsWithOpenSSL: Bool { context.withLock { $0.sealer != nil } }

    /// Protects an RTP packet in place (the array grows by the tag).
    public func protect(_ packet: inout [UInt8]) throws(SRTPError) {
        try transform(&packet, grows: true) { context, pointer, length throws(SRTPError) in try context.protectRTP(pointer, &length) }
    }

    /// Verifies and decrypts an SRTP packet in place (the array shrinks to the RTP packet).
    public func unprotect(_ packet: inout [UInt8]) throws(SRTPError) {
        try transform(&packet, grows: false) { context, pointer, length throws(SRTPError) in try check(srtp_unprotect(context.session, pointer, &length)) }
    }

    /// Protects an RTCP packet in place.
    public func protectRTCP(_ packet: inout [UInt8]) throws(SRTPError) {
        try transform(&packet, grows: true) { context, pointer, length throws(SRTPError) in try check(srtp_protect_rtcp(context.session, pointer, &length)) }
    }

    /// Verifies and decrypts an SRTCP packet in place.
    public func unprotectRTCP(_ packet: inout [UInt8]) throws(SRTPError) {
        try transform(&packet, grows: false) { context, pointer, length throws(SRTPError) in try check(srtp_unprotect_rtcp(context.session, pointer, &length)) }
    }

    /// Protects `length` bytes at the start of `buffer`, which must have room for ``maximumOverhead``
    /// more; returns the protected length. For callers that manage their own packet buffers.
    public func protect(_ buffer: UnsafeMutableRawBufferPointer, length: Int) throws(SRTPError) -> Int {
        guard length >= 12, buffer.count >= length + Self.maximumOverhead, let base = buffer.baseAddress else { throw .malformed }
        var size = Int32(length)
        try context.withLock { context throws(SRTPError) in try context.protectRTP(base, &size) }
        return Int(size)
    }

    private func transform(
        _ packet: inout [UInt8], grows: Bool,
        _ operation: (inout Context, UnsafeMutableRawPointer, inout Int32) throws(SRTPError) -> Void
    ) throws(SRTPError) {
        // The smallest RTP header is 12 bytes; RTCP's is 8. libsrtp checks lengths too, this just
        // keeps obviously short input away from it.
        guard packet.count >= 8, packet.count <= 65_535 else { throw .malformed }
        // Work on a copy: libsrtp transforms in place even when authentication then fails
        // (AES-GCM decrypts before the tag check), and a refused packet must come back untouched.
        var work = packet
        if grows { work.append(contentsOf: repeatElement(0, count: Self.maximumOverhead)) }
        var length = Int32(packet.count)
        let outcome = work.withUnsafeMutableBytes { raw in
            Result { () throws(SRTPError) in try context.withLock { context throws(SRTPError) in try operation(&context, raw.baseAddress!, &length) } }
        }
        try outcome.get()
        work.removeLast(work.count - Int(length))
        packet = work
    }

    /// The libsrtp version string (`libsrtp2 2.5.0`).
    public static var libraryVersion: String { String(cString: srtp_get_version_string()) }
}

/// Throws the typed error of a libsrtp status other than ok.
private func check(_ status: srtp_err_status_t) throws(SRTPError) {
    guard status == srtp_err_status_ok else { throw SRTPError(status: status) }
}

/// Base64 without Foundation, so this module stays small.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let b0 = bytes[index], b1 = index + 1 < bytes.count ? bytes[index + 1] : 0, b2 = index + 2 < bytes.count ? bytes[index + 2] : 0
            out.append(alphabet[Int(b0 >> 2)])
            out.append(alphabet[Int((b0 & 0x03) << 4 | b1 >> 4)])
            out.append(index + 1 < bytes.count ? alphabet[Int((b1 & 0x0F) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            out.append(index + 2 < bytes.count ? alphabet[Int(b2 & 0x3F)] : UInt8(ascii: "="))
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func decode(_ text: String) -> [UInt8]? {
        var values: [UInt8] = []
        var padding = 0
        for byte in text.utf8 {
            if byte == UInt8(ascii: "=") { padding += 1; continue }
            guard padding == 0, let value = alphabet.firstIndex(of: byte) else { return nil }
            values.append(UInt8(value))
        }
        guard (values.count + padding) % 4 == 0, padding <= 2 else { return nil }
        var out: [UInt8] = []
        var index = 0
        while index < values.count {
            let chunk = values[index..<min(index + 4, values.count)]
            let v = chunk.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (18 - 6 * UInt32($1.offset)) }
            out.append(UInt8(v >> 16 & 0xFF))
            if chunk.count > 2 { out.append(UInt8(v >> 8 & 0xFF)) }
            if chunk.count > 3 { out.append(UInt8(v & 0xFF)) }
            index += 4
        }
        return out
    }
}
