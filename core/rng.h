/* rng.h - the seeded random number generator every random choice comes from.
 * xoshiro256** seeded through splitmix64: fast, reproducible on every
 * platform, and splittable into independent streams (one per node, per
 * thread). Not for keys: the daemon draws keys and nonces from libsodium
 * through a fed_random_fn; the simulator passes fed_rng_random instead. */
#ifndef FED_CORE_RNG_H
#define FED_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct fed_rng {
    uint64_t s[4];
} fed_rng;

/* The shape of "the RNG the caller passes" to crypto and node code. */
typedef void (*fed_random_fn)(void *ctx, void *buf, size_t len);

void fed_rng_seed(fed_rng *r, uint64_t seed);
/* An independent stream derived from seed and a stream number. */
void fed_rng_seed_stream(fed_rng *r, uint64_t seed, uint64_t stream);
uint64_t fed_rng_u64(fed_rng *r);
uint32_t fed_rng_u32(fed_rng *r);
/* Uniform in [0, n), unbiased; n > 0. */
uint64_t fed_rng_below(fed_rng *r, uint64_t n);
/* Uniform in [0, 1) with 53 (double) or 24 (float) random bits. */
double fed_rng_uniform(fed_rng *r);
float fed_rng_uniform_f(fed_rng *r);
/* Standard normal (Marsaglia polar method). */
double fed_rng_normal(fed_rng *r);
/* Gamma(shape, 1) for shape > 0 (Marsaglia-Tsang), for Dirichlet draws. */
double fed_rng_gamma(fed_rng *r, double shape);
void fed_rng_fill(fed_rng *r, void *buf, size_t len);
/* Fisher-Yates shuffle of n uint32 indices. */
void fed_rng_shuffle_u32(fed_rng *r, uint32_t *a, size_t n);
/* fed_random_fn adapter: ctx is a fed_rng *. */
void fed_rng_random(void *ctx, void *buf, size_t len);

#endif
