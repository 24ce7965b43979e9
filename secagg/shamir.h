/* shamir.h - t-of-k Shamir secret sharing of 32-byte seeds over GF(2^61 - 1)
 * (secagg/field.h), the shares secure aggregation hands each neighbour.
 *
 * A seed as field elements: its 32 bytes, little-endian, cut into five limbs
 * of 7, 7, 7, 7 and 4 bytes (56, 56, 56, 56 and 32 bits). Each limb is below
 * 2^56 < p, so it is a field element as it is, and the cut is a bijection
 * between seeds and the limb vectors whose limbs fit those widths. Each limb
 * is shared on its own polynomial of degree t - 1 (independent random
 * coefficients), all five evaluated at the same point x: a share is (x, five
 * y's). Any t shares give back the seed by Lagrange interpolation at 0; any
 * t - 1 shares are uniformly distributed whatever the seed (each limb's
 * t - 1 values are a bijective image of its t - 1 random coefficients).
 * A reconstructed limb wider than its width is the mark of shares that do
 * not belong together: FED_ERR_CORRUPT (also when more than t shares are
 * given and one of them is not on the polynomial the first t define).
 *
 * Shares hold secrets: callers keep them in guarded memory (crypto/arena.h)
 * and wipe them (fed_secagg_share_wipe); the split keeps only one random
 * coefficient at a time, on the stack, wiped before it returns.
 *
 * Encoding (FED_SECAGG_SHARE_BYTES, through core/bytes.h):
 *   u32le x (1 .. p-1) | 5 x u64le y (each < p) */
#ifndef FED_SECAGG_SHAMIR_H
#define FED_SECAGG_SHAMIR_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"

#define FED_SECAGG_SEED_BYTES 32
#define FED_SECAGG_LIMBS 5
#define FED_SECAGG_SHARE_BYTES (4 + 8 * FED_SECAGG_LIMBS)
/* The most shares of one secret (k) and the largest threshold. */
#define FED_SECAGG_MAX_SHARES 65535u

typedef struct fed_secagg_share {
    uint32_t x;                   /* the evaluation point, nonzero */
    uint64_t y[FED_SECAGG_LIMBS]; /* one value per limb, each < p */
} fed_secagg_share;

/* The seed as five limbs, and back. fed_secagg_seed_from_limbs checks the
 * widths (FED_ERR_CORRUPT) without branching on the limbs' values. */
void fed_secagg_seed_to_limbs(const uint8_t seed[FED_SECAGG_SEED_BYTES],
                              uint64_t limbs[FED_SECAGG_LIMBS]);
FED_WUR fed_err fed_secagg_seed_from_limbs(const uint64_t limbs[FED_SECAGG_LIMBS],
                                           uint8_t seed[FED_SECAGG_SEED_BYTES]);

/* k shares of seed, any t of which rebuild it: 1 <= t <= k <=
 * FED_SECAGG_MAX_SHARES. xs gives the k distinct nonzero points (NULL:
 * 1, 2, ..., k); the coefficients come from rnd (libsodium's randombytes
 * in a daemon, a seeded fed_rng in the simulator). FED_ERR_INVAL for bad
 * t, k or points; FED_ERR_NOMEM. On failure out is wiped. */
FED_WUR fed_err fed_secagg_shamir_split(const uint8_t seed[FED_SECAGG_SEED_BYTES], uint32_t t,
                                        uint32_t k, const uint32_t *xs, fed_random_fn rnd,
                                        void *rnd_ctx, fed_secagg_share *out);

/* The seed from m >= t shares: the first t interpolated at 0, every other
 * one checked to lie on the same polynomials. FED_ERR_TOO_FEW when m < t,
 * FED_ERR_INVAL for a zero or repeated x or t == 0, FED_ERR_CORRUPT when
 * the shares disagree, FED_ERR_NOMEM. On failure seed is wiped. */
FED_WUR fed_err fed_secagg_shamir_combine(const fed_secagg_share *shares, size_t m, uint32_t t,
                                          uint8_t seed[FED_SECAGG_SEED_BYTES]);

void fed_secagg_share_encode(const fed_secagg_share *s, uint8_t out[FED_SECAGG_SHARE_BYTES]);
/* FED_ERR_TRUNCATED when len < FED_SECAGG_SHARE_BYTES (only the first
 * FED_SECAGG_SHARE_BYTES are read), FED_ERR_FORMAT for x == 0 or a y >= p. */
FED_WUR fed_err fed_secagg_share_decode(const uint8_t *in, size_t len, fed_secagg_share *s);
/* sodium_memzero over n shares. */
void fed_secagg_share_wipe(fed_secagg_share *s, size_t n);

#endif
