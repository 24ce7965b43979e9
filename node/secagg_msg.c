/* secagg_msg.c - secure aggregation's stage vectors and signatures
 * (secagg_msg_impl.h): parsers that check sizes, order and ranges before any
 * value is taken, and the two signed statements. Holds no state. */
#include "node/secagg_msg_impl.h"

#include <sodium.h>
#include <string.h>

#include "core/bytes.h"

/* BLAKE2b-256 of label | ctx | a | b (b may be NULL): what is signed. */
static void statement(const char *label, const fed_secagg_ctx *c, const uint8_t *a, size_t alen,
                      const uint8_t *b, size_t blen, const uint8_t *x, size_t xlen,
                      uint8_t out[32])
{
    crypto_generichash_state st;
    uint8_t cb[FED_SECAGG_CTX_BYTES];

    fed_secagg_ctx_encode(c, cb);
    crypto_generichash_init(&st, NULL, 0, 32);
    crypto_generichash_update(&st, (const uint8_t *)label, strlen(label) + 1);
    crypto_generichash_update(&st, cb, sizeof cb);
    crypto_generichash_update(&st, a, alen);
    if (b)
        crypto_generichash_update(&st, b, blen);
    if (x)
        crypto_generichash_update(&st, x, xlen);
    crypto_generichash_final(&st, out, 32);
}

#define KEYS_LABEL "fednode secagg keys v1"
#define SURV_LABEL "fednode secagg survivors v1"

fed_err fedi_sa_keys_sign(const fed_crypto_arena *a, const fed_secagg_ctx *c, const uint8_t mask_pk[32],
                          const uint8_t enc_pk[32], uint8_t sig[64])
{
    uint8_t m[32];

    statement(KEYS_LABEL, c, mask_pk, 32, enc_pk, 32, NULL, 0, m);
    return fed_crypto_arena_sign(a, m, sizeof m, sig);
}

int fedi_sa_keys_verify(const uint8_t id[32], const fed_secagg_ctx *c, const uint8_t mask_pk[32],
                        const uint8_t enc_pk[32], const uint8_t sig[64])
{
    uint8_t m[32];

    statement(KEYS_LABEL, c, mask_pk, 32, enc_pk, 32, NULL, 0, m);
    return crypto_sign_verify_detached(sig, m, sizeof m, id) == 0;
}

fed_err fedi_sa_survivors_sign(const fed_crypto_arena *a, const fed_secagg_ctx *c,
                               const uint8_t seed[32], const uint8_t *alive, uint32_t n,
                               uint8_t sig[64])
{
    uint8_t m[32], nb[4];

    fed_put_u32le(nb, n);
    statement(SURV_LABEL, c, seed, 32, nb, 4, alive, n, m);
    return fed_crypto_arena_sign(a, m, sizeof m, sig);
}

int fedi_sa_survivors_verify(const uint8_t id[32], const fed_secagg_ctx *c, const uint8_t seed[32],
                             const uint8_t *alive, uint32_t n, const uint8_t sig[64])
{
    uint8_t m[32], nb[4];

    fed_put_u32le(nb, n);
    statement(SURV_LABEL, c, seed, 32, nb, 4, alive, n, m);
    return crypto_sign_verify_detached(sig, m, sizeof m, id) == 0;
}

fed_err fedi_sa_parse_keys_req(const uint8_t *v, size_t len, uint32_t count, uint8_t mask_pk[32],
                               uint8_t enc_pk[32], uint8_t sig[64])
{
    if (count != 1 || len != SA_KEYS_REQ_BYTES)
        return FED_ERR_SA_KEYS;
    memcpy(mask_pk, v, 32);
    memcpy(enc_pk, v + 32, 32);
    memcpy(sig, v + 64, 64);
    return FED_OK;
}

fed_err fedi_sa_parse_key_list(const uint8_t *v, size_t len, uint32_t count, sa_key_entry *out)
{
    if (count < 2 || count > SA_MAX_CLIENTS || len != (size_t)count * SA_KEY_ENTRY_BYTES)
        return FED_ERR_SA_KEYS;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *p = v + (size_t)i * SA_KEY_ENTRY_BYTES;

        if (i > 0 && memcmp(p - SA_KEY_ENTRY_BYTES, p, 32) >= 0)
            return FED_ERR_SA_KEYS; /* identities strictly increasing */
        memcpy(out[i].id, p, 32);
        memcpy(out[i].mask_pk, p + 32, 32);
        memcpy(out[i].enc_pk, p + 64, 32);
        memcpy(out[i].sig, p + 96, 64);
    }
    return FED_OK;
}

void fedi_sa_put_key_entry(uint8_t *out, const sa_key_entry *e)
{
    memcpy(out, e->id, 32);
    memcpy(out + 32, e->mask_pk, 32);
    memcpy(out + 64, e->enc_pk, 32);
    memcpy(out + 96, e->sig, 64);
}

fed_err fedi_sa_parse_sealed(const uint8_t *v, size_t len, uint32_t count, uint32_t n,
                             sa_sealed_entry *out)
{
    if (count > n || len != (size_t)count * SA_SEALED_ENTRY_BYTES)
        return FED_ERR_SA_SHARES;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *p = v + (size_t)i * SA_SEALED_ENTRY_BYTES;

        out[i].index = fed_get_u32le(p);
        out[i].sealed = p + 4;
        if (out[i].index >= n || (i > 0 && out[i].index <= out[i - 1].index))
            return FED_ERR_SA_SHARES;
    }
    return FED_OK;
}

fed_err fedi_sa_parse_flags(const uint8_t *v, size_t len, uint32_t n, fed_err err)
{
    if (len != n)
        return err;
    for (uint32_t i = 0; i < n; i++)
        if (v[i] > 1)
            return err;
    return FED_OK;
}

fed_err fedi_sa_parse_inbox(const uint8_t *v, size_t len, uint32_t count, uint32_t n,
                            const uint8_t **flags, sa_sealed_entry *out)
{
    if (len < 4 || fed_get_u32le(v) != n || len - 4 < n ||
        fedi_sa_parse_flags(v + 4, n, n, FED_ERR_SA_SHARES) != FED_OK)
        return FED_ERR_SA_SHARES;
    *flags = v + 4;
    return fedi_sa_parse_sealed(v + 4 + n, len - 4 - n, count, n, out);
}

fed_err fedi_sa_parse_sigs(const uint8_t *v, size_t len, uint32_t count, uint32_t n, uint32_t *idx,
                           const uint8_t **sig)
{
    if (count > n || len != (size_t)count * SA_SIG_ENTRY_BYTES)
        return FED_ERR_SA_CONSIST;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *p = v + (size_t)i * SA_SIG_ENTRY_BYTES;

        idx[i] = fed_get_u32le(p);
        sig[i] = p + 4;
        if (idx[i] >= n || (i > 0 && idx[i] <= idx[i - 1]))
            return FED_ERR_SA_CONSIST;
    }
    return FED_OK;
}

fed_err fedi_sa_parse_unmask(const uint8_t *v, size_t len, uint32_t count, uint32_t n,
                             sa_unmask_entry *out)
{
    if (count > n || len != (size_t)count * SA_UNMASK_ENTRY_BYTES)
        return FED_ERR_SA_UNMASK;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *p = v + (size_t)i * SA_UNMASK_ENTRY_BYTES;

        out[i].owner = fed_get_u32le(p);
        out[i].kind = p[4];
        if (out[i].owner >= n || (i > 0 && out[i].owner <= out[i - 1].owner) ||
            (out[i].kind != SA_KIND_SELF && out[i].kind != SA_KIND_KEY) || p[5] || p[6] ||
            p[7] || fed_secagg_share_decode(p + 8, FED_SECAGG_SHARE_BYTES, &out[i].share) != FED_OK)
            return FED_ERR_SA_UNMASK;
    }
    return FED_OK;
}

void fedi_sa_put_unmask_entry(uint8_t *out, const sa_unmask_entry *e)
{
    fed_put_u32le(out, e->owner);
    out[4] = e->kind;
    out[5] = out[6] = out[7] = 0;
    fed_secagg_share_encode(&e->share, out + 8);
}
