// SRTP AEAD_AES_128_GCM sealing (RFC 7714) over the system's OpenSSL 3 EVP, for the relay's
// fan-out: libsrtp2 as Debian builds it runs AES-GCM through NSS, about 2.5 µs per 1,200-byte
// packet across many sessions (42 % of the relay's thread at 1,000 viewers); EVP uses AES-NI and
// carry-less multiplication.
//
// Why C and not Swift over EVP: the relay's DTLS target already sees OpenSSL's headers through
// CDTLSShim, and a second Swift module importing the same non-modular headers makes their
// declarations clash; here no OpenSSL type crosses into Swift. Every name is prefixed `pcast_`.
#ifndef PCAST_CSRTP_CIPHER_H
#define PCAST_CSRTP_CIPHER_H

#include <stddef.h>
#include <stdint.h>

// One SRTP sender's AES-128-GCM state: the session key and salt derived from the master key and
// salt (RFC 3711 §4.3 with a key derivation rate of 0: labels 0x00 and 0x02, AES-CM PRF), and an
// EVP context keyed once. Used by one thread at a time.
typedef struct pcast_srtp_gcm pcast_srtp_gcm;

// `master_key` is 16 bytes, `master_salt` 12 (RFC 7714 §12). NULL if OpenSSL fails.
pcast_srtp_gcm *pcast_srtp_gcm_new(const uint8_t *master_key, const uint8_t *master_salt);
void pcast_srtp_gcm_free(pcast_srtp_gcm *state);

// Seals the RTP packet of `length` bytes at `packet` in place: the payload after the
// `header_length` bytes of header (fixed header, CSRCs, extension: the additional authenticated
// data) is encrypted and the 16-byte tag appended, with the IV of RFC 7714 §8.1 built from the
// packet's SSRC and sequence number and the rollover counter `roc`. `packet` must have 16 bytes
// of room after `length`. Returns the sealed length, or -1 if OpenSSL fails.
long pcast_srtp_gcm_seal(pcast_srtp_gcm *state, uint8_t *packet, size_t header_length, size_t length, uint32_t roc);

// The derived session key (16 bytes) and salt (12 bytes), for tests against a reference.
void pcast_srtp_gcm_session_keys(const pcast_srtp_gcm *state, uint8_t *key, uint8_t *salt);

#endif
