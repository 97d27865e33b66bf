#include "CSRTPCipher.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

struct pcast_srtp_gcm {
    EVP_CIPHER_CTX *context;
    uint8_t session_key[16];
    uint8_t session_salt[12];
};

// RFC 3711 §4.3.3 with a key derivation rate of 0: the AES-CM keystream under the master key
// from the block x || 0x0000, where x is the master salt (12 bytes here, zero-padded to 14) with
// the label XORed into its 8th byte.
static int derive(const uint8_t *master_key, const uint8_t *master_salt, uint8_t label, uint8_t *out, size_t length) {
    uint8_t block[16] = {0};
    memcpy(block, master_salt, 12);
    block[7] ^= label;
    uint8_t zeros[32] = {0};
    EVP_CIPHER_CTX *context = EVP_CIPHER_CTX_new();
    if (context == NULL) return 0;
    int written = 0;
    int ok = EVP_EncryptInit_ex(context, EVP_aes_128_ctr(), NULL, master_key, block) == 1
        && EVP_EncryptUpdate(context, out, &written, zeros, (int)length) == 1
        && written == (int)length;
    EVP_CIPHER_CTX_free(context);
    return ok;
}

pcast_srtp_gcm *pcast_srtp_gcm_new(const uint8_t *master_key, const uint8_t *master_salt) {
    pcast_srtp_gcm *state = calloc(1, sizeof *state);
    if (state == NULL) return NULL;
    state->context = EVP_CIPHER_CTX_new();
    if (state->context == NULL
        || !derive(master_key, master_salt, 0x00, state->session_key, 16)
        || !derive(master_key, master_salt, 0x02, state->session_salt, 12)
        || EVP_EncryptInit_ex(state->context, EVP_aes_128_gcm(), NULL, NULL, NULL) != 1
        || EVP_CIPHER_CTX_ctrl(state->context, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) != 1
        || EVP_EncryptInit_ex(state->context, NULL, NULL, state->session_key, NULL) != 1) {
        pcast_srtp_gcm_free(state);
        return NULL;
    }
    return state;
}

void pcast_srtp_gcm_free(pcast_srtp_gcm *state) {
    if (state == NULL) return;
    EVP_CIPHER_CTX_free(state->context);
    OPENSSL_cleanse(state, sizeof *state);
    free(state);
}

long pcast_srtp_gcm_seal(pcast_srtp_gcm *state, uint8_t *packet, size_t header_length, size_t length, uint32_t roc) {
    if (header_length < 12 || header_length > length) return -1;
    // RFC 7714 §8.1: 00 00 || SSRC || ROC || SEQ, XOR the session salt.
    uint8_t iv[12] = {0, 0, packet[8], packet[9], packet[10], packet[11],
                      (uint8_t)(roc >> 24), (uint8_t)(roc >> 16), (uint8_t)(roc >> 8), (uint8_t)roc,
                      packet[2], packet[3]};
    for (int i = 0; i < 12; i++) iv[i] ^= state->session_salt[i];
    int written = 0, tail = 0;
    size_t payload = length - header_length;
    if (EVP_EncryptInit_ex(state->context, NULL, NULL, NULL, iv) != 1
        || EVP_EncryptUpdate(state->context, NULL, &written, packet, (int)header_length) != 1
        || (payload > 0 && EVP_EncryptUpdate(state->context, packet + header_length, &written, packet + header_length, (int)payload) != 1)
        || EVP_EncryptFinal_ex(state->context, packet + length, &tail) != 1
        || EVP_CIPHER_CTX_ctrl(state->context, EVP_CTRL_GCM_GET_TAG, 16, packet + length) != 1) {
        return -1;
    }
    return (long)(length + 16);
}

void pcast_srtp_gcm_session_keys(const pcast_srtp_gcm *state, uint8_t *key, uint8_t *salt) {
    memcpy(key, state->session_key, 16);
    memcpy(salt, state->session_salt, 12);
}
