/* keystream.c - the bulk CSPRNG of keystream.h: AES-256-CTR on AES-NI (our
 * own key expansion and counter loop over the CPU's AES round
 * instructions), else libsodium's ChaCha20. Holds no state of its own
 * beyond the caller's struct. */
#include "crypto/keystream.h"

#include <string.h>

#include <sodium.h>

/* One request's most bytes: a longer one is cut, each piece its own request
 * (AES's 32-bit block counter never wraps). */
#define KS_REQUEST_MAX ((size_t)1 << 30)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KS_AESNI 1

/* One step of AES-256's key schedule (FIPS-197, section 5.2, in the form
 * the AES instructions compute it): a holds SubWord(RotWord(w)) ^ Rcon (the
 * even steps) or SubWord(w) (the odd ones) in every word, and each of k's
 * four words is xored with all the words before it. */
__attribute__((target("aes"))) static inline __m128i ks_expand(__m128i k, __m128i a)
{
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
    return _mm_xor_si128(k, a);
}

#define KS_EVEN(i, rcon)                                                                       \
    k[i] = ks_expand(k[(i) - 2],                                                               \
                     _mm_shuffle_epi32(_mm_aeskeygenassist_si128(k[(i) - 1], rcon), 0xff))
#define KS_ODD(i)                                                                              \
    k[i] = ks_expand(k[(i) - 2], _mm_shuffle_epi32(_mm_aeskeygenassist_si128(k[(i) - 1], 0), 0xaa))

/* AES-256's 15 round keys of key, into out (240 bytes). */
__attribute__((target("aes"))) static void ks_aes_expand(const uint8_t key[32], uint8_t *out)
{
    __m128i k[15];

    k[0] = _mm_loadu_si128((const __m128i *)key);
    k[1] = _mm_loadu_si128((const __m128i *)(key + 16));
    KS_EVEN(2, 0x01);
    KS_ODD(3);
    KS_EVEN(4, 0x02);
    KS_ODD(5);
    KS_EVEN(6, 0x04);
    KS_ODD(7);
    KS_EVEN(8, 0x08);
    KS_ODD(9);
    KS_EVEN(10, 0x10);
    KS_ODD(11);
    KS_EVEN(12, 0x20);
    KS_ODD(13);
    KS_EVEN(14, 0x40);
    for (int i = 0; i < 15; i++)
        _mm_storeu_si128((__m128i *)(out + 16 * i), k[i]);
    sodium_memzero(k, sizeof k);
}

/* Counter block c of request r: r (8 bytes LE), 4 zero bytes, c big endian. */
#define KS_CTR(r, c) _mm_set_epi32((int)__builtin_bswap32(c), 0, (int)((r) >> 32), (int)(r))
/* One block through AES-256's 14 rounds. */
#define KS_ROUNDS(b)                                                                           \
    do {                                                                                       \
        for (int i_ = 1; i_ < 14; i_++)                                                        \
            b = _mm_aesenc_si128(b, k[i_]);                                                    \
        b = _mm_aesenclast_si128(b, k[14]);                                                    \
    } while (0)

/* len bytes of request r's keystream into out: 8 blocks at a time (the AES
 * unit is pipelined: eight independent blocks keep it busy), then the rest
 * one by one. Blocks are numbered from 2, as GCM's encryption counter. */
__attribute__((target("aes"))) static void ks_aes_ctr(const uint8_t *rk, uint64_t r, uint8_t *out,
                                                      size_t len)
{
    __m128i k[15];
    uint8_t last[16];
    uint32_t c = 2;

    for (int i = 0; i < 15; i++)
        k[i] = _mm_loadu_si128((const __m128i *)(rk + 16 * i));
    for (; len >= 128; len -= 128, out += 128, c += 8) {
        __m128i b0 = _mm_xor_si128(KS_CTR(r, c), k[0]), b1 = _mm_xor_si128(KS_CTR(r, c + 1), k[0]);
        __m128i b2 = _mm_xor_si128(KS_CTR(r, c + 2), k[0]), b3 = _mm_xor_si128(KS_CTR(r, c + 3), k[0]);
        __m128i b4 = _mm_xor_si128(KS_CTR(r, c + 4), k[0]), b5 = _mm_xor_si128(KS_CTR(r, c + 5), k[0]);
        __m128i b6 = _mm_xor_si128(KS_CTR(r, c + 6), k[0]), b7 = _mm_xor_si128(KS_CTR(r, c + 7), k[0]);

        for (int i = 1; i < 14; i++) {
            b0 = _mm_aesenc_si128(b0, k[i]);
            b1 = _mm_aesenc_si128(b1, k[i]);
            b2 = _mm_aesenc_si128(b2, k[i]);
            b3 = _mm_aesenc_si128(b3, k[i]);
            b4 = _mm_aesenc_si128(b4, k[i]);
            b5 = _mm_aesenc_si128(b5, k[i]);
            b6 = _mm_aesenc_si128(b6, k[i]);
            b7 = _mm_aesenc_si128(b7, k[i]);
        }
        _mm_storeu_si128((__m128i *)out, _mm_aesenclast_si128(b0, k[14]));
        _mm_storeu_si128((__m128i *)(out + 16), _mm_aesenclast_si128(b1, k[14]));
        _mm_storeu_si128((__m128i *)(out + 32), _mm_aesenclast_si128(b2, k[14]));
        _mm_storeu_si128((__m128i *)(out + 48), _mm_aesenclast_si128(b3, k[14]));
        _mm_storeu_si128((__m128i *)(out + 64), _mm_aesenclast_si128(b4, k[14]));
        _mm_storeu_si128((__m128i *)(out + 80), _mm_aesenclast_si128(b5, k[14]));
        _mm_storeu_si128((__m128i *)(out + 96), _mm_aesenclast_si128(b6, k[14]));
        _mm_storeu_si128((__m128i *)(out + 112), _mm_aesenclast_si128(b7, k[14]));
    }
    for (; len > 0; c++) {
        __m128i b = _mm_xor_si128(KS_CTR(r, c), k[0]);
        size_t take = len < 16 ? len : 16;

        KS_ROUNDS(b);
        _mm_storeu_si128((__m128i *)last, b);
        memcpy(out, last, take);
        out += take;
        len -= take;
    }
    sodium_memzero(k, sizeof k);
    sodium_memzero(last, sizeof last);
}
#endif

int fed_crypto_keystream_has_aes(void)
{
#ifdef KS_AESNI
    return __builtin_cpu_supports("aes") != 0;
#else
    return 0;
#endif
}

/* A fresh key from the seed, and AES's round keys from it. */
static void ks_rekey(fed_crypto_keystream *ks)
{
    ks->seed(ks->seed_ctx, ks->key, sizeof ks->key);
    ks->nonce = 0;
#ifdef KS_AESNI
    if (ks->aes)
        ks_aes_expand(ks->key, ks->rk);
#endif
}

void fed_crypto_keystream_init_cipher(fed_crypto_keystream *ks, fed_random_fn seed,
                                      void *seed_ctx, int aes)
{
    memset(ks, 0, sizeof *ks);
    ks->seed = seed;
    ks->seed_ctx = seed_ctx;
    ks->aes = aes && fed_crypto_keystream_has_aes();
    ks_rekey(ks);
}

void fed_crypto_keystream_init(fed_crypto_keystream *ks, fed_random_fn seed, void *seed_ctx)
{
    fed_crypto_keystream_init_cipher(ks, seed, seed_ctx, 1);
}

void fed_crypto_keystream_random(void *ctx, void *buf, size_t len)
{
    fed_crypto_keystream *ks = ctx;
    uint8_t *out = buf;

    do {
        size_t take = len < KS_REQUEST_MAX ? len : KS_REQUEST_MAX;
        uint8_t nonce[crypto_stream_chacha20_NONCEBYTES];

        if (ks->nonce == UINT64_MAX) /* never reuse a (key, nonce) pair */
            ks_rekey(ks);
#ifdef KS_AESNI
        if (ks->aes) {
            ks_aes_ctr(ks->rk, ks->nonce++, out, take);
            out += take;
            len -= take;
            continue;
        }
#endif
        for (int i = 0; i < 8; i++)
            nonce[i] = (uint8_t)(ks->nonce >> (8 * i));
        ks->nonce++;
        crypto_stream_chacha20(out, (unsigned long long)take, nonce, ks->key);
        out += take;
        len -= take;
    } while (len > 0);
}

void fed_crypto_keystream_wipe(fed_crypto_keystream *ks)
{
    sodium_memzero(ks, sizeof *ks);
}
