// Only what Swift cannot do with OpenSSL 3 directly; every name is prefixed `pcast_`, and each
// declaration says why it exists. Including this header also makes OpenSSL's own declarations
// (SSL_*, X509_*, EVP_*) visible to the Swift target that imports it.
#ifndef PCAST_CDTLS_SHIM_H
#define PCAST_CDTLS_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/evp.h>
#include <openssl/err.h>

// A datagram BIO over two queues in memory: each write by OpenSSL is one outgoing datagram, each
// read returns one whole incoming datagram. OpenSSL's memory BIO is a byte stream (it would merge
// a flight's datagrams) and its socket BIO owns a socket (the relay owns one for every peer), so
// the BIO is ours; a BIO_METHOD is a table of C function pointers, which is why it lives in C.
// Both queues are bounded (see shim.c); the BIO is used by one SSL on one thread.
BIO *pcast_dtls_bio_new(void);
// Queues a received datagram for OpenSSL to read; 0 if the inbound queue is full (dropped).
int pcast_dtls_bio_push(BIO *bio, const uint8_t *bytes, size_t length);
// Moves the oldest datagram OpenSSL wrote into `buffer`: its length, 0 if none, -1 if it is longer
// than `capacity` (it is dropped).
long pcast_dtls_bio_pop(BIO *bio, uint8_t *buffer, size_t capacity);

// SSL_set_mtu, DTLSv1_get_timeout and DTLSv1_handle_timeout are function-like macros over SSL_ctrl.
long pcast_ssl_set_mtu(SSL *ssl, long mtu);
// Milliseconds until the handshake's retransmission timer fires, or -1 when none is running.
long pcast_dtls_timeout_milliseconds(SSL *ssl);
int pcast_dtls_handle_timeout(SSL *ssl);

// SSL_OP_NO_QUERY_MTU is built by the function-like macro SSL_OP_BIT: the MTU is set per
// connection (pcast_ssl_set_mtu) and OpenSSL must not ask the BIO, which has no socket.
void pcast_ssl_ctx_set_no_query_mtu(SSL_CTX *context);

// SSL_CTX_set_min_proto_version is a function-like macro over SSL_CTX_ctrl.
int pcast_ssl_ctx_set_min_proto_version(SSL_CTX *context, int version);

// Requires the peer's certificate (a server asks the client for one; a client checks the
// server's): WebRTC certificates are self-signed, so the chain is not verified; the peer is authenticated by its certificate's SHA-256 digest, which must be the one
// its signaling (the SDP offer) announced when pcast_ssl_expect_fingerprint set one. The verify
// callback is a C function pointer.
void pcast_ssl_ctx_require_peer_certificate(SSL_CTX *context);

// The SHA-256 digest (32 bytes) the peer's certificate must have: checked inside the handshake by
// the verify callback, so a peer with another certificate gets a bad_certificate alert and never a
// finished handshake. Kept in the SSL's ex_data (SSL_get_ex_new_index is a macro; freed with the
// SSL). Returns 1, or 0 when it could not be stored.
int pcast_ssl_expect_fingerprint(SSL *ssl, const unsigned char *sha256);

// Whether the verify callback refused the peer's certificate for its digest; if so, copies that
// digest (32 bytes) to `received` and returns 1.
int pcast_ssl_fingerprint_mismatch(SSL *ssl, unsigned char *received);

// A fresh ECDSA P-256 key and a self-signed certificate for it (SHA-256 signature, valid from a
// day ago for `days` days). EVP_EC_gen is a function-like macro over the variadic
// EVP_PKEY_Q_keygen, which Swift cannot call; the certificate is built beside it. Returns 1 and
// sets both (the caller frees them with EVP_PKEY_free / X509_free), 0 on failure.
int pcast_dtls_make_certificate(const char *common_name, int days, EVP_PKEY **key, X509 **certificate);

#endif
