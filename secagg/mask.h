/* mask.h - secure aggregation's masks: a client's per-round X25519 keys and
 * self-mask seed (kept in one guarded arena slot), the seeds its masks come
 * from, and their expansion, chunk by chunk, into a vector of u32 words
 * added or subtracted modulo 2^32.
 *
 * Seeds. A pairwise seed is BLAKE2b-256 (crypto_generichash) keyed with the
 * X25519 shared secret of the two clients' mask keys, over the label
 * "fednode secagg pair v1", the two mask public keys in bytewise order (lower
 * first), and the round context (the aggregator's Ed25519 key, its epoch,
 * the round and the try, as u64le, u64le, u32le): both clients of a pair get
 * the same seed, and no seed repeats across aggregators, epochs, rounds or
 * tries. An all-zero shared secret (a low-order public key) is refused with
 * FED_ERR_KEY, as is a pair of a key with itself. A self-mask key is
 * BLAKE2b-256 keyed with the 32-byte self seed over "fednode secagg self v1",
 * the owner's mask public key and the same context.
 *
 * Expansion. A seed keys ChaCha20 (crypto_stream_chacha20_ietf, zero nonce:
 * every key is used for one vector only); word i of the mask is bytes
 * [4i, 4i+4) of the key stream, little-endian. The stream is made
 * FED_SECAGG_CHUNK_WORDS at a time into a stack buffer, added into the
 * vector and wiped: no whole mask vector ever exists. Many masks go in
 * together (a mask set): the vector is walked once, block by block, and
 * each seed's stream for the block (its ChaCha20 counter addressed to the
 * block's offset) is added while the block is hot in L1, rather than one
 * pass over the whole vector per seed; the words are the same either way.
 * Derived seeds live in an arena slot (one mask) or the mask set's own
 * guarded memory (many), and are wiped after use. A vector holds at most
 * FED_SECAGG_MAX_WORDS words (ChaCha20-IETF's 32-bit block counter).
 *
 * Signs. A client adds its self mask and, for each neighbour, the pair mask
 * with sign +1 when its own mask key sorts below the neighbour's
 * (fed_secagg_pair_sign), -1 otherwise, so the two masks of a pair cancel
 * in the sum. The aggregator removes a survivor's self mask (sign -1) from
 * its reconstructed self seed, and a dropped client d's mask with each of
 * its surviving neighbours s from d's reconstructed mask key, with the sign
 * -fed_secagg_pair_sign(s, d). */
#ifndef FED_SECAGG_MASK_H
#define FED_SECAGG_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"
#include "crypto/arena.h"

#define FED_SECAGG_KEY_BYTES 32 /* X25519 keys and mask seeds */
#define FED_SECAGG_CHUNK_WORDS 1024
#define FED_SECAGG_MAX_WORDS ((size_t)1 << 32) /* 2^32 blocks x 64 bytes / 4 */

/* What every seed of one round is bound to. */
typedef struct fed_secagg_ctx {
    uint8_t agg_pk[32]; /* the aggregator's Ed25519 key */
    uint64_t epoch;     /* the aggregator's epoch */
    uint64_t round;
    uint32_t try_no; /* the round's try (a failed round runs again) */
} fed_secagg_ctx;

/* The context as bytes, for hashes, signatures and associated data:
 * agg_pk (32) | epoch u64le | round u64le | try u32le. */
#define FED_SECAGG_CTX_BYTES (32 + 8 + 8 + 4)
void fed_secagg_ctx_encode(const fed_secagg_ctx *c, uint8_t out[FED_SECAGG_CTX_BYTES]);

/* A client's secrets for one round: the mask key pair, the key pair its
 * shares are sealed to, and the self-mask seed. The three secrets share one
 * arena slot; the public keys are plain memory. */
typedef struct fed_secagg_keys fed_secagg_keys;

/* Fresh keys and seed from rnd (randombytes in a daemon, a seeded fed_rng in
 * the simulator). FED_ERR_FULL when the arena has no free slot. */
FED_WUR fed_err fed_secagg_keys_new(fed_crypto_arena *a, fed_random_fn rnd, void *rnd_ctx,
                                    fed_secagg_keys **out);
/* Wipes and returns the slot; NULL is fine. */
void fed_secagg_keys_free(fed_crypto_arena *a, fed_secagg_keys *k);
const uint8_t *fed_secagg_keys_mask_pk(const fed_secagg_keys *k);
const uint8_t *fed_secagg_keys_enc_pk(const fed_secagg_keys *k);
/* The secrets the client Shamir-splits among its neighbours (arena memory). */
const uint8_t *fed_secagg_keys_mask_sk(const fed_secagg_keys *k);
const uint8_t *fed_secagg_keys_enc_sk(const fed_secagg_keys *k);
const uint8_t *fed_secagg_keys_self_seed(const fed_secagg_keys *k);

/* +1 when a sorts below b bytewise, -1 otherwise. */
int fed_secagg_pair_sign(const uint8_t a[FED_SECAGG_KEY_BYTES],
                         const uint8_t b[FED_SECAGG_KEY_BYTES]);

/* The pairwise seed of (my_sk, my_pk) with their_pk under c (the seeds
 * above). FED_ERR_KEY: an all-zero shared secret or their_pk == my_pk. The
 * caller keeps seed in guarded memory. */
FED_WUR fed_err fed_secagg_pair_seed(const uint8_t my_sk[FED_SECAGG_KEY_BYTES],
                                     const uint8_t my_pk[FED_SECAGG_KEY_BYTES],
                                     const uint8_t their_pk[FED_SECAGG_KEY_BYTES],
                                     const fed_secagg_ctx *c, uint8_t seed[FED_SECAGG_KEY_BYTES]);
/* The self-mask key of self_seed, owned by the client with owner_pk. */
void fed_secagg_self_seed_key(const uint8_t self_seed[FED_SECAGG_KEY_BYTES],
                              const uint8_t owner_pk[FED_SECAGG_KEY_BYTES],
                              const fed_secagg_ctx *c, uint8_t key[FED_SECAGG_KEY_BYTES]);

/* vec[i] += sign * word i of ChaCha20(key), modulo 2^32, for i < n; sign is
 * +1 or -1. FED_ERR_INVAL for another sign, FED_ERR_TOO_LARGE for n over
 * FED_SECAGG_MAX_WORDS. */
FED_WUR fed_err fed_secagg_mask_expand(const uint8_t key[FED_SECAGG_KEY_BYTES], int sign,
                                       uint32_t *vec, size_t n);

/* Many masks' seeds and signs, in guarded memory (crypto/arena.h's
 * fed_crypto_guarded_alloc), expanded into one vector together. */
typedef struct fed_secagg_maskset fed_secagg_maskset;

/* Room for cap seeds. FED_ERR_NOMEM. */
FED_WUR fed_err fed_secagg_maskset_new(size_t cap, fed_secagg_maskset **out);
/* Wipes the seeds and frees; NULL is fine. */
void fed_secagg_maskset_free(fed_secagg_maskset *ms);
size_t fed_secagg_maskset_count(const fed_secagg_maskset *ms);
/* The pair seed of (my_sk, my_pk) and their_pk (fed_secagg_pair_seed), with
 * sign; or the self-mask key of self_seed (fed_secagg_self_seed_key).
 * FED_ERR_FULL past cap, FED_ERR_INVAL for a sign other than +-1,
 * FED_ERR_KEY as fed_secagg_pair_seed. */
FED_WUR fed_err fed_secagg_maskset_add_pair(fed_secagg_maskset *ms,
                                            const uint8_t my_sk[FED_SECAGG_KEY_BYTES],
                                            const uint8_t my_pk[FED_SECAGG_KEY_BYTES],
                                            const uint8_t their_pk[FED_SECAGG_KEY_BYTES],
                                            const fed_secagg_ctx *c, int sign);
FED_WUR fed_err fed_secagg_maskset_add_self(fed_secagg_maskset *ms,
                                            const uint8_t self_seed[FED_SECAGG_KEY_BYTES],
                                            const uint8_t owner_pk[FED_SECAGG_KEY_BYTES],
                                            const fed_secagg_ctx *c, int sign);
/* Every mask of the set into vec (n words), block by block: the same words
 * as fed_secagg_mask_expand of each seed in turn. FED_ERR_TOO_LARGE for n
 * over FED_SECAGG_MAX_WORDS. */
FED_WUR fed_err fed_secagg_maskset_apply(const fed_secagg_maskset *ms, uint32_t *vec, size_t n);

/* The pair mask of (my_sk, my_pk) and their_pk, sign times, into vec; its
 * seed is derived into an arena slot and wiped after the pass. */
FED_WUR fed_err fed_secagg_mask_pair(fed_crypto_arena *a, const uint8_t my_sk[FED_SECAGG_KEY_BYTES],
                                     const uint8_t my_pk[FED_SECAGG_KEY_BYTES],
                                     const uint8_t their_pk[FED_SECAGG_KEY_BYTES],
                                     const fed_secagg_ctx *c, int sign, uint32_t *vec, size_t n);
/* The self mask of self_seed (owner_pk's), sign times, into vec, likewise. */
FED_WUR fed_err fed_secagg_mask_self(fed_crypto_arena *a,
                                     const uint8_t self_seed[FED_SECAGG_KEY_BYTES],
                                     const uint8_t owner_pk[FED_SECAGG_KEY_BYTES],
                                     const fed_secagg_ctx *c, int sign, uint32_t *vec, size_t n);
/* A client's whole masking of its quantized input: its self mask and the
 * pair mask with each of its k neighbours' mask keys (nbr_pk), each with its
 * sign: k + 1 seeds in a mask set, one blocked walk over vec. On failure vec
 * is untouched or partly masked: drop it. */
FED_WUR fed_err fed_secagg_mask_input(fed_crypto_arena *a, const fed_secagg_keys *keys,
                                      const fed_secagg_ctx *c,
                                      const uint8_t (*nbr_pk)[FED_SECAGG_KEY_BYTES], size_t k,
                                      uint32_t *vec, size_t n);

#endif
