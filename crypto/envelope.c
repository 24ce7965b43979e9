/* envelope.c - the sealed envelope: hash the payload (or take its hash), sign
 * the digest, encrypt once in place (see envelope.h). Owns no state; keys come
 * pinned from the arena. Must never copy the payload, nor release
 * plaintext whose AEAD tag or signature did not verify. */
#include "crypto/envelope.h"

#include <string.h>

#include <sodium.h>

#include "crypto/arena_impl.h"

void fed_crypto_model_hash(const uint8_t *params, size_t len, uint8_t out[32])
{
    crypto_generichash_blake2b(out, 32, params, (unsigned long long)len, NULL, 0);
}

void fed_crypto_digest(const uint8_t *ad, size_t ad_len, const uint8_t *payload, size_t len,
                       uint8_t digest[FED_CRYPTO_DIGEST_BYTES])
{
    crypto_generichash_blake2b_state st;

    crypto_generichash_blake2b_init(&st, NULL, 0, FED_CRYPTO_DIGEST_BYTES);
    if (ad_len)
        crypto_generichash_blake2b_update(&st, ad, ad_len);
    if (len)
        crypto_generichash_blake2b_update(&st, payload, len);
    crypto_generichash_blake2b_final(&st, digest, FED_CRYPTO_DIGEST_BYTES);
    sodium_memzero(&st, sizeof st);
}

void fed_crypto_payload_hash(const uint8_t *payload, size_t len,
                             uint8_t out[FED_CRYPTO_DIGEST_BYTES])
{
    fed_crypto_digest(NULL, 0, payload, len, out);
}

void fed_crypto_frame_digest(const uint8_t *ad, size_t ad_len,
                             const uint8_t payload_hash[FED_CRYPTO_DIGEST_BYTES],
                             uint8_t digest[FED_CRYPTO_DIGEST_BYTES])
{
    fed_crypto_digest(ad, ad_len, payload_hash, FED_CRYPTO_DIGEST_BYTES, digest);
}

/* The frame digest of (ad, payload). */
static void frame_digest_of(const uint8_t *ad, size_t ad_len, const uint8_t *payload, size_t len,
                            uint8_t digest[FED_CRYPTO_DIGEST_BYTES])
{
    uint8_t ph[FED_CRYPTO_DIGEST_BYTES];

    fed_crypto_payload_hash(payload, len, ph);
    fed_crypto_frame_digest(ad, ad_len, ph, digest);
}

fed_err fed_crypto_seal(const fed_crypto_arena *a, const fed_crypto_session *s, const uint8_t *ad,
                        size_t ad_len, const uint8_t nonce[FED_CRYPTO_NONCE_BYTES], uint8_t *buf,
                        size_t len, const uint8_t *payload_hash,
                        uint8_t digest_out[FED_CRYPTO_DIGEST_BYTES])
{
    uint8_t digest[FED_CRYPTO_DIGEST_BYTES];
    uint8_t *sig = buf + len, *tag = buf + len + FED_CRYPTO_SIG_BYTES;
    fed_err err;

    if (payload_hash)
        fed_crypto_frame_digest(ad, ad_len, payload_hash, digest);
    else
        frame_digest_of(ad, ad_len, buf, len, digest);
    err = fed_crypto_arena_sign(a, digest, sizeof digest, sig);
    if (err != FED_OK)
        return err;
    if (crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
            buf, tag, NULL, buf, (unsigned long long)len + FED_CRYPTO_SIG_BYTES, ad, ad_len, NULL,
            nonce, fedi_crypto_session_tx(s)) != 0)
        return FED_ERR_INTERNAL;
    if (digest_out)
        memcpy(digest_out, digest, sizeof digest);
    return FED_OK;
}

fed_err fed_crypto_verify_digest(const uint8_t pk[FED_CRYPTO_PK_BYTES],
                                 const uint8_t digest[FED_CRYPTO_DIGEST_BYTES],
                                 const uint8_t sig[FED_CRYPTO_SIG_BYTES])
{
    if (crypto_sign_verify_detached(sig, digest, FED_CRYPTO_DIGEST_BYTES, pk) != 0)
        return FED_ERR_SIGNATURE;
    return FED_OK;
}

fed_err fed_crypto_verify(const uint8_t pk[FED_CRYPTO_PK_BYTES], const uint8_t *ad, size_t ad_len,
                          const uint8_t *payload, size_t len,
                          const uint8_t sig[FED_CRYPTO_SIG_BYTES])
{
    uint8_t digest[FED_CRYPTO_DIGEST_BYTES];

    frame_digest_of(ad, ad_len, payload, len, digest);
    return fed_crypto_verify_digest(pk, digest, sig);
}

fed_err fed_crypto_open(const fed_crypto_session *s, const uint8_t *ad, size_t ad_len,
                        const uint8_t nonce[FED_CRYPTO_NONCE_BYTES], const uint8_t *ct,
                        uint8_t *out, size_t len, uint8_t digest_out[FED_CRYPTO_DIGEST_BYTES],
                        uint8_t sig_out[FED_CRYPTO_SIG_BYTES])
{
    uint8_t digest[FED_CRYPTO_DIGEST_BYTES];
    const uint8_t *tag = ct + len + FED_CRYPTO_SIG_BYTES;
    uint8_t *sig = out + len;

    /* libsodium checks the tag before it decrypts: out is untouched on failure. */
    if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
            out, NULL, ct, (unsigned long long)len + FED_CRYPTO_SIG_BYTES, tag, ad, ad_len, nonce,
            fedi_crypto_session_rx(s)) != 0)
        return FED_ERR_AEAD;
    frame_digest_of(ad, ad_len, out, len, digest);
    if (fed_crypto_verify_digest(fed_crypto_session_peer(s), digest, sig) != FED_OK) {
        sodium_memzero(out, len + FED_CRYPTO_SIG_BYTES);
        return FED_ERR_SIGNATURE;
    }
    if (digest_out)
        memcpy(digest_out, digest, sizeof digest);
    if (sig_out)
        memcpy(sig_out, sig, FED_CRYPTO_SIG_BYTES);
    return FED_OK;
}
