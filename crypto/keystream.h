/* keystream.h - a fast CSPRNG for bulk draws: a stream cipher's keystream
 * under a 256-bit key taken from a seed source (the node's fed_random_fn:
 * randombytes_buf in the daemon and in fednode train), each request under a
 * fresh 64-bit request number. randombytes_buf costs a system call per
 * request; DP-SGD draws 4 bytes of noise per parameter per step, so its
 * noise comes from here. The cipher: AES-256 in counter mode where the CPU
 * has AES instructions (x86-64 AES-NI: about 0.15 ns a byte here, against
 * 0.4 for ChaCha20, which was a third of a DP-SGD step's noise), else
 * libsodium's ChaCha20. Request r's AES counter blocks are GCM's (NIST SP
 * 800-38D) for the 12-byte IV (r as u64 LE, then 4 zero bytes): IV || block
 * number from 2, big endian, so AES-256-GCM's ciphertext of zeros under the
 * same key and IV is this keystream (test_crypto checks it against
 * libsodium's). The two ciphers give different streams: a seeded run
 * (fedsim, tests) repeats on machines of the same kind. The key and round
 * keys are as secret as the noise they make: they live in the caller's
 * struct, are never written out, and are wiped by
 * fed_crypto_keystream_wipe. Not thread-safe: one per thread. */
#ifndef FED_CRYPTO_KEYSTREAM_H
#define FED_CRYPTO_KEYSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"

typedef struct fed_crypto_keystream {
    uint8_t key[32];
    uint8_t rk[15 * 16]; /* AES-256's round keys (aes) */
    uint64_t nonce;      /* requests so far; rekeyed from the seed before it wraps */
    int aes;             /* AES-256-CTR (the CPU has AES instructions), else ChaCha20 */
    fed_random_fn seed;
    void *seed_ctx;
} fed_crypto_keystream;

/* Keys ks from seed (32 bytes drawn through it). */
void fed_crypto_keystream_init(fed_crypto_keystream *ks, fed_random_fn seed, void *seed_ctx);
/* The same with the cipher chosen: aes 1 asks for AES-256-CTR (given only
 * where the CPU has it), 0 for ChaCha20. Tests use it to check both. */
void fed_crypto_keystream_init_cipher(fed_crypto_keystream *ks, fed_random_fn seed,
                                      void *seed_ctx, int aes);
/* Whether this CPU runs the AES path. */
int fed_crypto_keystream_has_aes(void);
/* A fed_random_fn: ctx is a fed_crypto_keystream *. */
void fed_crypto_keystream_random(void *ctx, void *buf, size_t len);
void fed_crypto_keystream_wipe(fed_crypto_keystream *ks);

#endif
