/* envelope.h - the sealed frame envelope: AEAD(payload || signature) with the frame header as
 * associated data.
 *   digest    = BLAKE2b-512(ad || BLAKE2b-512(payload))
 *   signature = Ed25519(sender's key, digest)
 *   sealed    = XChaCha20-Poly1305-IETF(key, nonce, ad, payload || signature)
 * In memory a sealed buffer is: ciphertext (len + 64) || tag (16). Sealing is
 * in place: the caller writes the payload where the ciphertext will be and
 * leaves FED_CRYPTO_SEAL_OVERHEAD bytes after it; the signature is written
 * there and the AEAD encrypts payload || signature once. The signature sits
 * inside the ciphertext, so an eavesdropper learns nothing from it, while
 * whoever later holds (ad, payload, signature) can check who sent it.
 * The payload is hashed on its own, and that hash with the ad, so that one
 * payload sent to many (the aggregator's MODEL to a round's clients) is
 * hashed once, not once per recipient: each further frame costs the AEAD
 * pass alone (wire version 2; version 1 signed BLAKE2b-512(ad || payload)).
 * The key is the sender's tx session key (crypto/arena.h). */
#ifndef FED_CRYPTO_ENVELOPE_H
#define FED_CRYPTO_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "crypto/arena.h"

#define FED_CRYPTO_NONCE_BYTES 24
#define FED_CRYPTO_TAG_BYTES 16
#define FED_CRYPTO_DIGEST_BYTES 64
#define FED_CRYPTO_SEAL_OVERHEAD (FED_CRYPTO_SIG_BYTES + FED_CRYPTO_TAG_BYTES)

/* A round's model hash (rounds.model_hash): BLAKE2b-256 of its parameters
 * as stored (f32 LE; a peer's f64 estimate). BLAKE2b runs at about 1 GB/s
 * here, libsodium's SHA-256 at 330 MB/s, and the aggregator hashes its
 * model between the last delta and the next round's start. */
void fed_crypto_model_hash(const uint8_t *params, size_t len, uint8_t out[32]);

/* BLAKE2b-512 over ad || payload (either may be empty), in one pass: what
 * a vouched peer entry's signature covers (gossip/peers.c). */
void fed_crypto_digest(const uint8_t *ad, size_t ad_len, const uint8_t *payload, size_t len,
                       uint8_t digest[FED_CRYPTO_DIGEST_BYTES]);

/* A sealed frame's two steps: BLAKE2b-512 of the payload (may be empty),
 * then the digest signed, BLAKE2b-512(ad || payload_hash) (digest may be
 * payload_hash). */
void fed_crypto_payload_hash(const uint8_t *payload, size_t len,
                             uint8_t out[FED_CRYPTO_DIGEST_BYTES]);
void fed_crypto_frame_digest(const uint8_t *ad, size_t ad_len,
                             const uint8_t payload_hash[FED_CRYPTO_DIGEST_BYTES],
                             uint8_t digest[FED_CRYPTO_DIGEST_BYTES]);

/* Seals buf in place for the session's peer: buf holds len payload bytes and
 * room for FED_CRYPTO_SEAL_OVERHEAD more. payload_hash: the payload's
 * fed_crypto_payload_hash when the caller has it (the same payload sealed
 * for many), else NULL and it is computed; a wrong one makes a frame its
 * recipient rejects (FED_ERR_SIGNATURE). digest_out (may be NULL) gets the
 * digest that was signed. The session must be pinned. FED_ERR_KEY: the
 * arena has no identity. */
FED_WUR fed_err fed_crypto_seal(const fed_crypto_arena *a, const fed_crypto_session *s,
                                const uint8_t *ad, size_t ad_len,
                                const uint8_t nonce[FED_CRYPTO_NONCE_BYTES], uint8_t *buf,
                                size_t len, const uint8_t *payload_hash,
                                uint8_t digest_out[FED_CRYPTO_DIGEST_BYTES]);

/* Opens what the session's peer sealed: ct holds len + FED_CRYPTO_SEAL_OVERHEAD
 * bytes; payload || signature (len + FED_CRYPTO_SIG_BYTES bytes) is written
 * to out, which may equal ct (in place). digest_out and sig_out (may be
 * NULL) get the checked digest and signature for the record.
 * FED_ERR_AEAD: wrong key, tampered ad, nonce or
 * ciphertext (out is untouched); FED_ERR_SIGNATURE: the AEAD held but the
 * signature is not the peer's over (ad, payload) (out is wiped). */
FED_WUR fed_err fed_crypto_open(const fed_crypto_session *s, const uint8_t *ad, size_t ad_len,
                                const uint8_t nonce[FED_CRYPTO_NONCE_BYTES], const uint8_t *ct,
                                uint8_t *out, size_t len,
                                uint8_t digest_out[FED_CRYPTO_DIGEST_BYTES],
                                uint8_t sig_out[FED_CRYPTO_SIG_BYTES]);

/* Checks a signature again later (an auditor's verify): FED_OK or
 * FED_ERR_SIGNATURE. */
FED_WUR fed_err fed_crypto_verify(const uint8_t pk[FED_CRYPTO_PK_BYTES], const uint8_t *ad,
                                  size_t ad_len, const uint8_t *payload, size_t len,
                                  const uint8_t sig[FED_CRYPTO_SIG_BYTES]);
FED_WUR fed_err fed_crypto_verify_digest(const uint8_t pk[FED_CRYPTO_PK_BYTES],
                                         const uint8_t digest[FED_CRYPTO_DIGEST_BYTES],
                                         const uint8_t sig[FED_CRYPTO_SIG_BYTES]);

#endif
