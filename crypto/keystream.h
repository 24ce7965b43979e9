/* keystream.h - a fast CSPRNG for bulk draws: ChaCha20's keystream under a
 * 256-bit key taken from a seed source (the node's fed_random_fn:
 * randombytes_buf in the daemon and in fednode train), each request under a
 * fresh 64-bit nonce. randombytes_buf costs a system call per request; DP-SGD
 * draws 4 bytes of noise per parameter per step, so its noise comes from here
 * (about a cycle per byte). The key is as secret as the noise it makes: it
 * lives in the caller's struct, is never written out, and is wiped by
 * fed_crypto_keystream_wipe. Not thread-safe: one per thread. */
#ifndef FED_CRYPTO_KEYSTREAM_H
#define FED_CRYPTO_KEYSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"

typedef struct fed_crypto_keystream {
    uint8_t key[32];
    uint64_t nonce; /* requests so far; rekeyed from the seed before it wraps */
    fed_random_fn seed;
    void *seed_ctx;
} fed_crypto_keystream;

/* Keys ks from seed (32 bytes drawn through it). */
void fed_crypto_keystream_init(fed_crypto_keystream *ks, fed_random_fn seed, void *seed_ctx);
/* A fed_random_fn: ctx is a fed_crypto_keystream *. */
void fed_crypto_keystream_random(void *ctx, void *buf, size_t len);
void fed_crypto_keystream_wipe(fed_crypto_keystream *ks);

#endif
