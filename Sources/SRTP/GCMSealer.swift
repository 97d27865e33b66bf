import CSRTPCipher

/// Outbound AEAD_AES_128_GCM RTP (RFC 7714) sealed through OpenSSL's EVP (``CSRTPCipher``), with
/// libsrtp's own choice of each packet's index, so its output is libsrtp's byte for byte (checked
/// against libsrtp and pylibsrtp by the tests).
///
/// libsrtp, as Debian builds it, runs AES-GCM through NSS: about 2.5 µs per 1,200-byte packet
/// across many sessions, 42 % of the relay's thread at 1,000 viewers. What stays with libsrtp:
/// SRTCP, inbound packets and the AES-CM profile.
///
/// The index (rollover counter and sequence number) is kept per SSRC, as libsrtp keeps a stream
/// per SSRC under an `ssrc_any_outbound` policy: a flow carries a stream's video and audio.
/// Owned by its ``SRTPSession``, used under its lock.
struct GCMSealer {
    private let state: OpaquePointer
    /// The highest index sealed per SSRC (48 bits: rollover counter, sequence number).
    private var indices: [(ssrc: UInt32, index: UInt64)] = []

    init?(masterKey: ArraySlice<UInt8>, masterSalt: ArraySlice<UInt8>) {
        guard masterKey.count == 16, masterSalt.count == 12 else { return nil }
        let key = Array(masterKey), salt = Array(masterSalt)
        guard let state = key.withUnsafeBufferPointer({ k in salt.withUnsafeBufferPointer { s in pcast_srtp_gcm_new(k.baseAddress, s.baseAddress) } })
        else { return nil }
        self.state = state
    }

    /// Releases the OpenSSL state; the sealer is not used after.
    func free() {
        pcast_srtp_gcm_free(state)
    }

    /// The session key and salt derived from the master key (for tests).
    var sessionKeys: (key: [UInt8], salt: [UInt8]) {
        var key = [UInt8](repeating: 0, count: 16), salt = [UInt8](repeating: 0, count: 12)
        pcast_srtp_gcm_session_keys(state, &key, &salt)
        return (key, salt)
    }

    /// Seals the RTP packet of `length` bytes at `base` (with room for the 16-byte tag after it);
    /// returns the sealed length. Refuses what libsrtp refuses: a malformed header, and an index
    /// older than the replay window behind the highest one sealed.
    mutating func seal(_ base: UnsafeMutableRawPointer, length: Int) throws(SRTPError) -> Int {
        let bytes = base.assumingMemoryBound(to: UInt8.self)
        guard length >= 12, bytes[0] >> 6 == 2 else { throw .malformed }
        var header = 12 + 4 * Int(bytes[0] & 0x0F)
        if bytes[0] & 0x10 != 0 {
            guard length >= header + 4 else { throw .malformed }
            header += 4 + 4 * (Int(bytes[header + 2]) << 8 | Int(bytes[header + 3]))
        }
        guard length >= header else { throw .malformed }
        let ssrc = UInt32(bytes[8]) << 24 | UInt32(bytes[9]) << 16 | UInt32(bytes[10]) << 8 | UInt32(bytes[11])
        let sequence = UInt16(bytes[2]) << 8 | UInt16(bytes[3])
        let slot: Int
        if let found = indices.firstIndex(where: { $0.ssrc == ssrc }) {
            slot = found
        } else {
            indices.append((ssrc, 0))
            slot = indices.count - 1
        }
        let (guess, delta) = Self.estimate(local: indices[slot].index, sequence: sequence)
        // libsrtp lets a sender repeat an index (allow_repeat_tx: NACK answers) but not go back
        // further than its replay window.
        guard delta > 0 || delta + SRTPSession.replayWindow - 1 >= 0 else { throw .replayed }
        let sealed = pcast_srtp_gcm_seal(state, bytes, header, length, UInt32(truncatingIfNeeded: guess >> 16))
        guard sealed > 0 else { throw .failed(code: -1) }
        if delta > 0 { indices[slot].index = guess }
        return sealed
    }

    /// libsrtp's estimate of a sequence number's index from the highest one so far, and its
    /// distance from it (`srtp_rdbx_estimate_index`: the rollover counter stays 0 until the index
    /// passes 2^15, so a first sequence number above that is not taken for the end of a roll).
    static func estimate(local: UInt64, sequence: UInt16) -> (guess: UInt64, delta: Int) {
        let median = 1 << 15, maximum = 1 << 16
        guard local > UInt64(median) else { return (UInt64(sequence), Int(sequence) - Int(local)) }
        let localROC = UInt32(truncatingIfNeeded: local >> 16)
        let localSequence = Int(local & 0xFFFF), s = Int(sequence)
        var roc = localROC
        let difference: Int
        if localSequence < median {
            if s - localSequence > median {
                roc = localROC &- 1
                difference = s - localSequence - maximum
            } else {
                difference = s - localSequence
            }
        } else {
            if localSequence - median > s {
                roc = localROC &+ 1
                difference = s - localSequence + maximum
            } else {
                difference = s - localSequence
            }
        }
        return (UInt64(roc) << 16 | UInt64(sequence), difference)
    }
}
