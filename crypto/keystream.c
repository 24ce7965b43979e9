/* keystream.c - ChaCha20 keystream as a fed_random_fn (keystream.h). */
#include "crypto/keystream.h"

#include <string.h>

#include <sodium.h>

void fed_crypto_keystream_init(fed_crypto_keystream *ks, fed_random_fn seed, void *seed_ctx)
{
    ks->seed = seed;
    ks->seed_ctx = seed_ctx;
    ks->nonce = 0;
    seed(seed_ctx, ks->key, sizeof ks->key);
}

void fed_crypto_keystream_random(void *ctx, void *buf, size_t len)
{
    fed_crypto_keystream *ks = ctx;
    uint8_t nonce[crypto_stream_chacha20_NONCEBYTES];

    if (ks->nonce == UINT64_MAX) { /* never reuse a (key, nonce) pair */
        ks->seed(ks->seed_ctx, ks->key, sizeof ks->key);
        ks->nonce = 0;
    }
    for (int i = 0; i < 8; i++)
        nonce[i] = (uint8_t)(ks->nonce >> (8 * i));
    ks->nonce++;
    crypto_stream_chacha20((unsigned char *)buf, (unsigned long long)len, nonce, ks->key);
}

void fed_crypto_keystream_wipe(fed_crypto_keystream *ks)
{
    sodium_memzero(ks, sizeof *ks);
}
