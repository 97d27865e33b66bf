#include "CDTLSShim.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/bn.h>
#include <openssl/rand.h>

// Bounds on the datagram queues: a DTLS flight is a handful of datagrams; more than this queued
// means a peer flooding the handshake, and the excess is dropped like a full socket buffer would.
enum { PCAST_QUEUE_LIMIT = 32, PCAST_DATAGRAM_LIMIT = 65535 };

typedef struct pcast_datagram {
    struct pcast_datagram *next;
    size_t length;
    uint8_t bytes[];
} pcast_datagram;

typedef struct {
    pcast_datagram *head, *tail;
    int count;
} pcast_queue;

typedef struct {
    pcast_queue inbound, outbound;
} pcast_dgram_state;

static int queue_push(pcast_queue *queue, const uint8_t *bytes, size_t length) {
    if (queue->count >= PCAST_QUEUE_LIMIT || length > PCAST_DATAGRAM_LIMIT) return 0;
    pcast_datagram *datagram = malloc(sizeof(pcast_datagram) + length);
    if (datagram == NULL) return 0;
    datagram->next = NULL;
    datagram->length = length;
    if (length > 0) memcpy(datagram->bytes, bytes, length);
    if (queue->tail) queue->tail->next = datagram; else queue->head = datagram;
    queue->tail = datagram;
    queue->count += 1;
    return 1;
}

static pcast_datagram *queue_pop(pcast_queue *queue) {
    pcast_datagram *datagram = queue->head;
    if (datagram == NULL) return NULL;
    queue->head = datagram->next;
    if (queue->head == NULL) queue->tail = NULL;
    queue->count -= 1;
    return datagram;
}

static void queue_clear(pcast_queue *queue) {
    pcast_datagram *datagram;
    while ((datagram = queue_pop(queue)) != NULL) free(datagram);
}

static int dgram_create(BIO *bio) {
    pcast_dgram_state *state = calloc(1, sizeof(pcast_dgram_state));
    if (state == NULL) return 0;
    BIO_set_data(bio, state);
    BIO_set_init(bio, 1);
    return 1;
}

static int dgram_destroy(BIO *bio) {
    pcast_dgram_state *state = BIO_get_data(bio);
    if (state != NULL) {
        queue_clear(&state->inbound);
        queue_clear(&state->outbound);
        free(state);
        BIO_set_data(bio, NULL);
    }
    return 1;
}

static int dgram_write(BIO *bio, const char *bytes, int length) {
    pcast_dgram_state *state = BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    if (state == NULL || length < 0) return -1;
    // A full queue drops the datagram but reports it written: DTLS retransmits lost flights.
    queue_push(&state->outbound, (const uint8_t *)bytes, (size_t)length);
    return length;
}

static int dgram_read(BIO *bio, char *buffer, int capacity) {
    pcast_dgram_state *state = BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    if (state == NULL || capacity < 0) return -1;
    pcast_datagram *datagram = queue_pop(&state->inbound);
    if (datagram == NULL) {
        BIO_set_retry_read(bio);
        return -1;
    }
    // Datagram semantics: what does not fit is lost, as recvfrom would lose it.
    int length = datagram->length < (size_t)capacity ? (int)datagram->length : capacity;
    memcpy(buffer, datagram->bytes, (size_t)length);
    free(datagram);
    return length;
}

static long dgram_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)number;
    (void)pointer;
    pcast_dgram_state *state = BIO_get_data(bio);
    switch (command) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_PENDING:
        return (state && state->inbound.head) ? (long)state->inbound.head->length : 0;
    case BIO_CTRL_WPENDING:
        return 0;
    case BIO_CTRL_DGRAM_QUERY_MTU:
    case BIO_CTRL_DGRAM_GET_FALLBACK_MTU:
        // The MTU is set on the SSL (pcast_ssl_set_mtu, with SSL_OP_NO_QUERY_MTU); never asked.
        return 0;
    case BIO_CTRL_DGRAM_GET_MTU_OVERHEAD:
        // The relay's MTU setting already excludes IP and UDP headers.
        return 0;
    default:
        return 0;
    }
}

static BIO_METHOD *shared_method = NULL;

static void create_method(void) {
    BIO_METHOD *created = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "pcast datagram queue");
    if (created == NULL) return;
    BIO_meth_set_create(created, dgram_create);
    BIO_meth_set_destroy(created, dgram_destroy);
    BIO_meth_set_write(created, dgram_write);
    BIO_meth_set_read(created, dgram_read);
    BIO_meth_set_ctrl(created, dgram_ctrl);
    shared_method = created;
}

static BIO_METHOD *dgram_method(void) {
    // Created once for the process (and never freed: BIOs made from it may live until exit).
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, create_method);
    return shared_method;
}

BIO *pcast_dtls_bio_new(void) {
    BIO_METHOD *method = dgram_method();
    return method ? BIO_new(method) : NULL;
}

int pcast_dtls_bio_push(BIO *bio, const uint8_t *bytes, size_t length) {
    pcast_dgram_state *state = BIO_get_data(bio);
    return state ? queue_push(&state->inbound, bytes, length) : 0;
}

long pcast_dtls_bio_pop(BIO *bio, uint8_t *buffer, size_t capacity) {
    pcast_dgram_state *state = BIO_get_data(bio);
    if (state == NULL) return 0;
    pcast_datagram *datagram = queue_pop(&state->outbound);
    if (datagram == NULL) return 0;
    long length = datagram->length <= capacity ? (long)datagram->length : -1;
    if (length > 0) memcpy(buffer, datagram->bytes, datagram->length);
    free(datagram);
    return length;
}

long pcast_ssl_set_mtu(SSL *ssl, long mtu) {
    return SSL_set_mtu(ssl, mtu);
}

long pcast_dtls_timeout_milliseconds(SSL *ssl) {
    struct timeval remaining;
    if (!DTLSv1_get_timeout(ssl, &remaining)) return -1;
    return (long)remaining.tv_sec * 1000 + (long)remaining.tv_usec / 1000;
}

int pcast_dtls_handle_timeout(SSL *ssl) {
    return (int)DTLSv1_handle_timeout(ssl);
}

void pcast_ssl_ctx_set_no_query_mtu(SSL_CTX *context) {
    SSL_CTX_set_options(context, SSL_OP_NO_QUERY_MTU);
}

int pcast_ssl_ctx_set_min_proto_version(SSL_CTX *context, int version) {
    return (int)SSL_CTX_set_min_proto_version(context, version);
}

typedef struct {
    unsigned char expected[32];
    unsigned char received[32];
    int mismatched;
} pcast_fingerprint_check;

static int fingerprint_index = -1;

static void free_fingerprint_check(void *parent, void *pointer, CRYPTO_EX_DATA *data, int index, long argl, void *argp) {
    (void)parent; (void)data; (void)index; (void)argl; (void)argp;
    free(pointer);
}

static void create_fingerprint_index(void) {
    fingerprint_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, free_fingerprint_check);
}

int pcast_ssl_expect_fingerprint(SSL *ssl, const unsigned char *sha256) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, create_fingerprint_index);
    if (fingerprint_index < 0) return 0;
    pcast_fingerprint_check *check = calloc(1, sizeof *check);
    if (check == NULL) return 0;
    memcpy(check->expected, sha256, sizeof check->expected);
    if (!SSL_set_ex_data(ssl, fingerprint_index, check)) {
        free(check);
        return 0;
    }
    return 1;
}

int pcast_ssl_fingerprint_mismatch(SSL *ssl, unsigned char *received) {
    if (fingerprint_index < 0) return 0;
    pcast_fingerprint_check *check = SSL_get_ex_data(ssl, fingerprint_index);
    if (check == NULL || !check->mismatched) return 0;
    memcpy(received, check->received, sizeof check->received);
    return 1;
}

// Self-signed certificates fail chain verification by nature: the leaf's digest decides.
static int verify_peer_certificate(int preverified, X509_STORE_CTX *store) {
    (void)preverified;
    if (X509_STORE_CTX_get_error_depth(store) != 0) return 1;
    SSL *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
    pcast_fingerprint_check *check = (ssl != NULL && fingerprint_index >= 0) ? SSL_get_ex_data(ssl, fingerprint_index) : NULL;
    if (check == NULL) return 1;
    X509 *certificate = X509_STORE_CTX_get_current_cert(store);
    unsigned int length = 0;
    if (certificate == NULL || !X509_digest(certificate, EVP_sha256(), check->received, &length) || length != 32) return 0;
    if (CRYPTO_memcmp(check->received, check->expected, 32) != 0) {
        check->mismatched = 1;
        X509_STORE_CTX_set_error(store, X509_V_ERR_CERT_REJECTED);
        return 0;
    }
    return 1;
}

void pcast_ssl_ctx_require_peer_certificate(SSL_CTX *context) {
    SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_peer_certificate);
}

int pcast_dtls_make_certificate(const char *common_name, int days, EVP_PKEY **key_out, X509 **certificate_out) {
    *key_out = NULL;
    *certificate_out = NULL;
    EVP_PKEY *key = EVP_EC_gen("P-256");
    if (key == NULL) return 0;
    X509 *certificate = X509_new();
    BIGNUM *serial = BN_new();
    int ok = certificate != NULL && serial != NULL
        && X509_set_version(certificate, 2)
        && BN_rand(serial, 63, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY)
        && BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(certificate)) != NULL
        && X509_gmtime_adj(X509_getm_notBefore(certificate), -86400) != NULL
        && X509_gmtime_adj(X509_getm_notAfter(certificate), (long)days * 86400) != NULL
        && X509_set_pubkey(certificate, key)
        && X509_NAME_add_entry_by_txt(X509_get_subject_name(certificate), "CN", MBSTRING_UTF8,
                                      (const unsigned char *)common_name, -1, -1, 0)
        && X509_set_issuer_name(certificate, X509_get_subject_name(certificate))
        && X509_sign(certificate, key, EVP_sha256()) > 0;
    BN_free(serial);
    if (!ok) {
        X509_free(certificate);
        EVP_PKEY_free(key);
        return 0;
    }
    *key_out = key;
    *certificate_out = certificate;
    return 1;
}
