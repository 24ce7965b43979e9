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

fed_err fed_secagg_dh_kdf(const char *label, const uint8_t my_sk[FED_SECAGG_KEY_BYTES],
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
    return fed_secagg_dh_kdf(PAIR_LABEL, my_sk, my_pk, their_pk, c, seed);
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

fed_err fed_secagg_mask_expand(const uint8_t key[FED_SECAGG_KEY_BYTES], int sign, uint32_t *vec,
                               size_t n)
{
    static const uint8_t zero[FED_SECAGG_CHUNK_WORDS * 4];
    static const uint8_t nonce[crypto_stream_chacha20_ietf_NONCEBYTES];
    uint8_t ks[FED_SECAGG_CHUNK_WORDS * 4];
    const uint32_t blocks = FED_SECAGG_CHUNK_WORDS * 4 / 64;

    if (sign != 1 && sign != -1)
        return FED_ERR_INVAL;
    if (n > FED_SECAGG_MAX_WORDS)
        return FED_ERR_TOO_LARGE;
    /* Key stream, vector chunk and the zeros it is XORed onto stay in L1
     * (3 x 4 KiB); the words are read little-endian straight from the key
     * stream (a plain load on a little-endian host, so the loop vectorizes). */
    for (size_t at = 0, chunk = 0; at < n; at += FED_SECAGG_CHUNK_WORDS, chunk++) {
        size_t m = n - at < FED_SECAGG_CHUNK_WORDS ? n - at : FED_SECAGG_CHUNK_WORDS;
        size_t bytes = (m * 4 + 63) / 64 * 64; /* whole blocks: the stream ends on one */
        uint32_t *dst = vec + at;

        crypto_stream_chacha20_ietf_xor_ic(ks, zero, bytes, nonce, (uint32_t)(chunk * blocks), key);
        if (sign > 0)
            for (size_t i = 0; i < m; i++)
                dst[i] += fed_get_u32le(ks + 4 * i);
        else
            for (size_t i = 0; i < m; i++)
                dst[i] -= fed_get_u32le(ks + 4 * i);
    }
    sodium_memzero(ks, sizeof ks);
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
    fed_err err;

    err = fed_secagg_mask_self(a, fed_secagg_keys_self_seed(keys), keys->mask_pk, c, 1, vec, n);
    for (size_t j = 0; j < k && err == FED_OK; j++)
        err = fed_secagg_mask_pair(a, fed_secagg_keys_mask_sk(keys), keys->mask_pk, nbr_pk[j], c,
                                   fed_secagg_pair_sign(keys->mask_pk, nbr_pk[j]), vec, n);
    return err;
}
