/* mask.c - per-round keys in an arena slot, seed derivations (X25519 then
 * keyed BLAKE2b, bound to both keys and the round), and ChaCha20 mask
 * expansion in chunks; the formats and signs are stated in mask.h. */
#include "secagg/mask.h"

#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "secagg/mask_impl.h"

/* The slot's layout: mask secret key | share-sealing secret key | self seed. */
enum { OFF_MASK_SK = 0, OFF_ENC_SK = 32, OFF_SELF = 64, SLOT_USED = 96 };

_Static_assert(SLOT_USED <= FED_CRYPTO_SLOT_BYTES, "secagg keys fit one arena slot");
_Static_assert(FED_SECAGG_CHUNK_WORDS * 4 % 64 == 0, "a chunk is whole ChaCha20 blocks");

struct fed_secagg_keys {
    fed_crypto_slot *slot;
    uint8_t mask_pk[FED_SECAGG_KEY_BYTES];
    uint8_t enc_pk[FED_SECAGG_KEY_BYTES];
};

static const char PAIR_LABEL[] = "fednode secagg pair v1";
static const char SELF_LABEL[] = "fednode secagg self v1";

fed_err fed_secagg_keys_new(fed_crypto_arena *a, fed_random_fn rnd, void *rnd_ctx,
                            fed_secagg_keys **out)
{
    fed_secagg_keys *k = NULL;
    uint8_t *mem;
    fed_err err;

    *out = NULL;
    if (!a || !rnd)
        return FED_ERR_INVAL;
    k = fed_calloc(1, sizeof *k);
    if (!k)
        return FED_ERR_NOMEM;
    err = fed_crypto_slot_take(a, &k->slot);
    if (err != FED_OK)
        goto out;
    mem = fed_crypto_slot_mem(k->slot);
    rnd(rnd_ctx, mem, SLOT_USED);
    /* X25519 clamps the scalar, so every 32 random bytes are a key. */
    if (crypto_scalarmult_base(k->mask_pk, mem + OFF_MASK_SK) != 0 ||
        crypto_scalarmult_base(k->enc_pk, mem + OFF_ENC_SK) != 0) {
        err = FED_ERR_KEY;
        goto out;
    }
    *out = k;
    k = NULL;
out:
    fed_secagg_keys_free(a, k);
    return err;
}

void fed_secagg_keys_free(fed_crypto_arena *a, fed_secagg_keys *k)
{
    if (!k)
        return;
    fed_crypto_slot_release(a, k->slot);
    fed_free(k);
}

const uint8_t *fed_secagg_keys_mask_pk(const fed_secagg_keys *k) { return k->mask_pk; }
const uint8_t *fed_secagg_keys_enc_pk(const fed_secagg_keys *k) { return k->enc_pk; }

const uint8_t *fed_secagg_keys_mask_sk(const fed_secagg_keys *k)
{
    return fed_crypto_slot_mem(k->slot) + OFF_MASK_SK;
}

const uint8_t *fed_secagg_keys_enc_sk(const fed_secagg_keys *k)
{
    return fed_crypto_slot_mem(k->slot) + OFF_ENC_SK;
}

const uint8_t *fed_secagg_keys_self_seed(const fed_secagg_keys *k)
{
    return fed_crypto_slot_mem(k->slot) + OFF_SELF;
}

int fed_secagg_pair_sign(const uint8_t a[FED_SECAGG_KEY_BYTES],
                         const uint8_t b[FED_SECAGG_KEY_BYTES])
{
    return memcmp(a, b, FED_SECAGG_KEY_BYTES) < 0 ? 1 : -1;
}

void fed_secagg_ctx_encode(const fed_secagg_ctx *c, uint8_t out[FED_SECAGG_CTX_BYTES])
{
    memcpy(out, c->agg_pk, 32);
    fed_put_u64le(out + 32, c->epoch);
    fed_put_u64le(out + 40, c->round);
    fed_put_u32le(out + 48, c->try_no);
}

static void hash_ctx(crypto_generichash_state *st, const fed_secagg_ctx *c)
{
    uint8_t b[FED_SECAGG_CTX_BYTES];

    fed_secagg_ctx_encode(c, b);
    crypto_generichash_update(st, b, sizeof b);
}

fed_err fedi_secagg_dh_kdf(const char *label, const uint8_t my_sk[FED_SECAGG_KEY_BYTES],
                           const uint8_t my_pk[FED_SECAGG_KEY_BYTES],
                           const uint8_t their_pk[FED_SECAGG_KEY_BYTES], const fed_secagg_ctx *c,
                           uint8_t out[FED_SECAGG_KEY_BYTES])
{
    uint8_t shared[crypto_scalarmult_BYTES];
    crypto_generichash_state st;
    const uint8_t *lo, *hi;
    fed_err err = FED_OK;

    if (sodium_memcmp(my_pk, their_pk, FED_SECAGG_KEY_BYTES) == 0) {
        err = FED_ERR_KEY;
        goto out;
    }
    /* libsodium refuses an all-zero result itself; the second check keeps
     * that a rule of ours, whatever the library version does. */
    if (crypto_scalarmult(shared, my_sk, their_pk) != 0 || sodium_is_zero(shared, sizeof shared)) {
        err = FED_ERR_KEY;
        goto out;
    }
    lo = fed_secagg_pair_sign(my_pk, their_pk) > 0 ? my_pk : their_pk;
    hi = lo == my_pk ? their_pk : my_pk;
    crypto_generichash_init(&st, shared, sizeof shared, FED_SECAGG_KEY_BYTES);
    crypto_generichash_update(&st, (const uint8_t *)label, strlen(label));
    crypto_generichash_update(&st, lo, FED_SECAGG_KEY_BYTES);
    crypto_generichash_update(&st, hi, FED_SECAGG_KEY_BYTES);
    hash_ctx(&st, c);
    crypto_generichash_final(&st, out, FED_SECAGG_KEY_BYTES);
out:
    if (err != FED_OK)
        sodium_memzero(out, FED_SECAGG_KEY_BYTES);
    sodium_memzero(shared, sizeof shared);
    sodium_memzero(&st, sizeof st);
    return err;
}

fed_err fed_secagg_pair_seed(const uint8_t my_sk[FED_SECAGG_KEY_BYTES],
                             const uint8_t my_pk[FED_SECAGG_KEY_BYTES],
                             const uint8_t their_pk[FED_SECAGG_KEY_BYTES], const fed_secagg_ctx *c,
                             uint8_t seed[FED_SECAGG_KEY_BYTES])
{
    return fedi_secagg_dh_kdf(PAIR_LABEL, my_sk, my_pk, their_pk, c, seed);
}

void fed_secagg_self_seed_key(const uint8_t self_seed[FED_SECAGG_KEY_BYTES],
                              const uint8_t owner_pk[FED_SECAGG_KEY_BYTES],
                              const fed_secagg_ctx *c, uint8_t key[FED_SECAGG_KEY_BYTES])
{
    crypto_generichash_state st;

    crypto_generichash_init(&st, self_seed, FED_SECAGG_KEY_BYTES, FED_SECAGG_KEY_BYTES);
    crypto_generichash_update(&st, (const uint8_t *)SELF_LABEL, sizeof SELF_LABEL - 1);
    crypto_generichash_update(&st, owner_pk, FED_SECAGG_KEY_BYTES);
    hash_ctx(&st, c);
    crypto_generichash_final(&st, key, FED_SECAGG_KEY_BYTES);
    sodium_memzero(&st, sizeof st);
}

/* The block one walk adds every seed's stream into: whole ChaCha20 blocks
 * (16 words each), and the block, its stream and the zeros the stream is
 * XORed onto stay in L1. */
#define BLOCK_WORDS FED_SECAGG_CHUNK_WORDS

struct fed_secagg_maskset {
    uint8_t (*seed)[FED_SECAGG_KEY_BYTES]; /* (cap) guarded memory */
    int8_t *sign;                          /* (cap) */
    size_t n, cap;
};

/* dst[i] += or -= word i of ks, i < w. A whole block goes through a loop of
 * constant count over restrict pointers, which -O2's cheap vectorizer
 * takes (an unknown count it leaves scalar: a quarter more time). */
static void add_words(uint32_t *restrict dst, const uint8_t *restrict ks, int sign, size_t w)
{
    if (w == BLOCK_WORDS && sign > 0)
        for (size_t i = 0; i < BLOCK_WORDS; i++)
            dst[i] += fed_get_u32le(ks + 4 * i);
    else if (w == BLOCK_WORDS)
        for (size_t i = 0; i < BLOCK_WORDS; i++)
            dst[i] -= fed_get_u32le(ks + 4 * i);
    else if (sign > 0)
        for (size_t i = 0; i < w; i++)
            dst[i] += fed_get_u32le(ks + 4 * i);
    else
        for (size_t i = 0; i < w; i++)
            dst[i] -= fed_get_u32le(ks + 4 * i);
}

/* vec[i] += or -= word i of each seed's stream, for i < n (n checked). */
static void expand_many(const uint8_t (*seed)[FED_SECAGG_KEY_BYTES], const int8_t *sign,
                        size_t m, uint32_t *vec, size_t n)
{
    static const uint8_t zero[BLOCK_WORDS * 4];
    static const uint8_t nonce[crypto_stream_chacha20_ietf_NONCEBYTES];
    uint8_t ks[BLOCK_WORDS * 4];

    for (size_t at = 0; at < n; at += BLOCK_WORDS) {
        size_t w = n - at < BLOCK_WORDS ? n - at : BLOCK_WORDS;
        size_t bytes = (w * 4 + 63) / 64 * 64; /* whole blocks: the stream ends on one */
        uint32_t *dst = vec + at;
        uint32_t ic = (uint32_t)(at / 16); /* the ChaCha20 block word `at` starts */

        for (size_t j = 0; j < m; j++) {
            crypto_stream_chacha20_ietf_xor_ic(ks, zero, bytes, nonce, ic, seed[j]);
            add_words(dst, ks, sign[j], w);
        }
    }
    sodium_memzero(ks, sizeof ks);
}

fed_err fed_secagg_mask_expand(const uint8_t key[FED_SECAGG_KEY_BYTES], int sign, uint32_t *vec,
                               size_t n)
{
    int8_t sg = (int8_t)sign;

    if (sign != 1 && sign != -1)
        return FED_ERR_INVAL;
    if (n > FED_SECAGG_MAX_WORDS)
        return FED_ERR_TOO_LARGE;
    expand_many((const uint8_t(*)[FED_SECAGG_KEY_BYTES])key, &sg, 1, vec, n);
    return FED_OK;
}

fed_err fed_secagg_maskset_new(size_t cap, fed_secagg_maskset **out)
{
    fed_secagg_maskset *ms = fed_calloc(1, sizeof *ms);

    *out = NULL;
    if (!ms)
        return FED_ERR_NOMEM;
    ms->cap = cap;
    ms->seed = fed_crypto_guarded_alloc(cap ? cap : 1, FED_SECAGG_KEY_BYTES);
    ms->sign = fed_calloc(cap ? cap : 1, sizeof *ms->sign);
    if (!ms->seed || !ms->sign) {
        fed_secagg_maskset_free(ms);
        return FED_ERR_NOMEM;
    }
    *out = ms;
    return FED_OK;
}

void fed_secagg_maskset_free(fed_secagg_maskset *ms)
{
    if (!ms)
        return;
    fed_crypto_guarded_free(ms->seed); /* wiped */
    fed_free(ms->sign);
    fed_free(ms);
}

size_t fed_secagg_maskset_count(const fed_secagg_maskset *ms) { return ms->n; }

static fed_err maskset_room(const fed_secagg_maskset *ms, int sign)
{
    if (sign != 1 && sign != -1)
        return FED_ERR_INVAL;
    return ms->n < ms->cap ? FED_OK : FED_ERR_FULL;
}

fed_err fed_secagg_maskset_add_pair(fed_secagg_maskset *ms,
                                    const uint8_t my_sk[FED_SECAGG_KEY_BYTES],
                                    const uint8_t my_pk[FED_SECAGG_KEY_BYTES],
                                    const uint8_t their_pk[FED_SECAGG_KEY_BYTES],
                                    const fed_secagg_ctx *c, int sign)
{
    fed_err err = maskset_room(ms, sign);

    if (err == FED_OK)
        err = fed_secagg_pair_seed(my_sk, my_pk, their_pk, c, ms->seed[ms->n]);
    if (err != FED_OK)
        return err;
    ms->sign[ms->n++] = (int8_t)sign;
    return FED_OK;
}

fed_err fed_secagg_maskset_add_self(fed_secagg_maskset *ms,
                                    const uint8_t self_seed[FED_SECAGG_KEY_BYTES],
                                    const uint8_t owner_pk[FED_SECAGG_KEY_BYTES],
                                    const fed_secagg_ctx *c, int sign)
{
    fed_err err = maskset_room(ms, sign);

    if (err != FED_OK)
        return err;
    fed_secagg_self_seed_key(self_seed, owner_pk, c, ms->seed[ms->n]);
    ms->sign[ms->n++] = (int8_t)sign;
    return FED_OK;
}

fed_err fed_secagg_maskset_apply(const fed_secagg_maskset *ms, uint32_t *vec, size_t n)
{
    if (n > FED_SECAGG_MAX_WORDS)
        return FED_ERR_TOO_LARGE;
    expand_many((const uint8_t(*)[FED_SECAGG_KEY_BYTES])ms->seed, ms->sign, ms->n, vec, n);
    return FED_OK;
}

fed_err fed_secagg_mask_pair(fed_crypto_arena *a, const uint8_t my_sk[FED_SECAGG_KEY_BYTES],
                             const uint8_t my_pk[FED_SECAGG_KEY_BYTES],
                             const uint8_t their_pk[FED_SECAGG_KEY_BYTES], const fed_secagg_ctx *c,
                             int sign, uint32_t *vec, size_t n)
{
    fed_crypto_slot *slot = NULL;
    fed_err err;

    err = fed_crypto_slot_take(a, &slot);
    if (err != FED_OK)
        return err;
    err = fed_secagg_pair_seed(my_sk, my_pk, their_pk, c, fed_crypto_slot_mem(slot));
    if (err == FED_OK)
        err = fed_secagg_mask_expand(fed_crypto_slot_mem(slot), sign, vec, n);
    fed_crypto_slot_release(a, slot);
    return err;
}

fed_err fed_secagg_mask_self(fed_crypto_arena *a, const uint8_t self_seed[FED_SECAGG_KEY_BYTES],
                             const uint8_t owner_pk[FED_SECAGG_KEY_BYTES], const fed_secagg_ctx *c,
                             int sign, uint32_t *vec, size_t n)
{
    fed_crypto_slot *slot = NULL;
    fed_err err;

    err = fed_crypto_slot_take(a, &slot);
    if (err != FED_OK)
        return err;
    fed_secagg_self_seed_key(self_seed, owner_pk, c, fed_crypto_slot_mem(slot));
    err = fed_secagg_mask_expand(fed_crypto_slot_mem(slot), sign, vec, n);
    fed_crypto_slot_release(a, slot);
    return err;
}

fed_err fed_secagg_mask_input(fed_crypto_arena *a, const fed_secagg_keys *keys,
                              const fed_secagg_ctx *c,
                              const uint8_t (*nbr_pk)[FED_SECAGG_KEY_BYTES], size_t k,
                              uint32_t *vec, size_t n)
{
    fed_secagg_maskset *ms = NULL;
    fed_err err;

    (void)a; /* the k + 1 seeds outgrow a slot: the mask set guards them */
    if ((err = fed_secagg_maskset_new(k + 1, &ms)) != FED_OK)
        return err;
    err = fed_secagg_maskset_add_self(ms, fed_secagg_keys_self_seed(keys), keys->mask_pk, c, 1);
    for (size_t j = 0; j < k && err == FED_OK; j++)
        err = fed_secagg_maskset_add_pair(ms, fed_secagg_keys_mask_sk(keys), keys->mask_pk,
                                          nbr_pk[j], c,
                                          fed_secagg_pair_sign(keys->mask_pk, nbr_pk[j]));
    if (err == FED_OK)
        err = fed_secagg_maskset_apply(ms, vec, n);
    fed_secagg_maskset_free(ms);
    return err;
}
