/* box.c - a client's two shares for one neighbour boxed: sealed with
 * XChaCha20-Poly1305 under a key both derive from their share-sealing
 * X25519 keys, bound to the round and the route as associated data (the
 * layout is in box.h). */
#include "secagg/box.h"

#include <sodium.h>

#include "core/bytes.h"
#include "secagg/mask_impl.h"

static const char SEAL_LABEL[] = "fednode secagg seal v1";

#define AD_BYTES (FED_SECAGG_CTX_BYTES + 12)
#define PLAIN_BYTES (2 * FED_SECAGG_SHARE_BYTES)

_Static_assert(FED_SECAGG_BOX_NONCE_BYTES == crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
               "the nonce is XChaCha20's");
_Static_assert(FED_SECAGG_BOX_TAG_BYTES == crypto_aead_xchacha20poly1305_ietf_ABYTES,
               "the tag is Poly1305's");

static void route_ad(const fed_secagg_ctx *c, const fed_secagg_route *r, uint8_t ad[AD_BYTES])
{
    fed_secagg_ctx_encode(c, ad);
    fed_put_u32le(ad + FED_SECAGG_CTX_BYTES, r->sender);
    fed_put_u32le(ad + FED_SECAGG_CTX_BYTES + 4, r->recipient);
    fed_put_u32le(ad + FED_SECAGG_CTX_BYTES + 8, r->x);
}

fed_err fed_secagg_box_key(const fed_secagg_keys *me,
                           const uint8_t their_enc_pk[FED_SECAGG_KEY_BYTES],
                           const fed_secagg_ctx *c, uint8_t key[FED_SECAGG_KEY_BYTES])
{
    if (!me || !their_enc_pk || !c || !key)
        return FED_ERR_INVAL;
    return fedi_secagg_dh_kdf(SEAL_LABEL, fed_secagg_keys_enc_sk(me), fed_secagg_keys_enc_pk(me),
                              their_enc_pk, c, key);
}

fed_err fed_secagg_box_seal_with(const uint8_t key[FED_SECAGG_KEY_BYTES], const fed_secagg_ctx *c,
                                 const fed_secagg_route *route, const fed_secagg_share *self_share,
                                 const fed_secagg_share *key_share, fed_random_fn rnd, void *rnd_ctx,
                                 uint8_t out[FED_SECAGG_BOX_BYTES])
{
    uint8_t plain[PLAIN_BYTES], ad[AD_BYTES];

    if (!key || !c || !route || !self_share || !key_share || !rnd || !out ||
        self_share->x != route->x || key_share->x != route->x || route->x == 0)
        return FED_ERR_INVAL;
    fed_secagg_share_encode(self_share, plain);
    fed_secagg_share_encode(key_share, plain + FED_SECAGG_SHARE_BYTES);
    route_ad(c, route, ad);
    rnd(rnd_ctx, out, FED_SECAGG_BOX_NONCE_BYTES);
    crypto_aead_xchacha20poly1305_ietf_encrypt(out + FED_SECAGG_BOX_NONCE_BYTES, NULL, plain,
                                               sizeof plain, ad, sizeof ad, NULL, out, key);
    sodium_memzero(plain, sizeof plain);
    return FED_OK;
}

fed_err fed_secagg_box_open_with(const uint8_t key[FED_SECAGG_KEY_BYTES], const fed_secagg_ctx *c,
                                 const fed_secagg_route *route, const uint8_t *in, size_t len,
                                 fed_secagg_share *self_share, fed_secagg_share *key_share)
{
    uint8_t plain[PLAIN_BYTES], ad[AD_BYTES];
    fed_err err = FED_OK;

    if (!key || !c || !route || !in || !self_share || !key_share)
        return FED_ERR_INVAL;
    if (len != FED_SECAGG_BOX_BYTES) {
        err = len < FED_SECAGG_BOX_BYTES ? FED_ERR_TRUNCATED : FED_ERR_TOO_LARGE;
        goto out;
    }
    route_ad(c, route, ad);
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(plain, NULL, NULL,
                                                   in + FED_SECAGG_BOX_NONCE_BYTES,
                                                   len - FED_SECAGG_BOX_NONCE_BYTES, ad, sizeof ad,
                                                   in, key) != 0) {
        err = FED_ERR_AEAD;
        goto out;
    }
    if (fed_secagg_share_decode(plain, FED_SECAGG_SHARE_BYTES, self_share) != FED_OK ||
        fed_secagg_share_decode(plain + FED_SECAGG_SHARE_BYTES, FED_SECAGG_SHARE_BYTES,
                                key_share) != FED_OK ||
        self_share->x != route->x || key_share->x != route->x)
        err = FED_ERR_FORMAT;
out:
    if (err != FED_OK) {
        fed_secagg_share_wipe(self_share, 1);
        fed_secagg_share_wipe(key_share, 1);
    }
    sodium_memzero(plain, sizeof plain);
    return err;
}

fed_err fed_secagg_box_seal(fed_crypto_arena *a, const fed_secagg_keys *me,
                            const uint8_t their_enc_pk[FED_SECAGG_KEY_BYTES], const fed_secagg_ctx *c,
                            const fed_secagg_route *route, const fed_secagg_share *self_share,
                            const fed_secagg_share *key_share, fed_random_fn rnd, void *rnd_ctx,
                            uint8_t out[FED_SECAGG_BOX_BYTES])
{
    fed_crypto_slot *slot = NULL;
    fed_err err;

    if (!a || !me || !c || !route || !self_share || !key_share || !rnd || !out ||
        self_share->x != route->x || key_share->x != route->x || route->x == 0)
        return FED_ERR_INVAL;
    if ((err = fed_crypto_slot_take(a, &slot)) != FED_OK)
        return err;
    err = fed_secagg_box_key(me, their_enc_pk, c, fed_crypto_slot_mem(slot));
    if (err == FED_OK)
        err = fed_secagg_box_seal_with(fed_crypto_slot_mem(slot), c, route, self_share, key_share, rnd,
                                       rnd_ctx, out);
    fed_crypto_slot_release(a, slot);
    return err;
}

fed_err fed_secagg_box_open(fed_crypto_arena *a, const fed_secagg_keys *me,
                            const uint8_t sender_enc_pk[FED_SECAGG_KEY_BYTES], const fed_secagg_ctx *c,
                            const fed_secagg_route *route, const uint8_t *in, size_t len,
                            fed_secagg_share *self_share, fed_secagg_share *key_share)
{
    fed_crypto_slot *slot = NULL;
    fed_err err;

    if (!a || !me || !c || !route || !in || !self_share || !key_share)
        return FED_ERR_INVAL;
    if (len != FED_SECAGG_BOX_BYTES) {
        err = len < FED_SECAGG_BOX_BYTES ? FED_ERR_TRUNCATED : FED_ERR_TOO_LARGE;
        fed_secagg_share_wipe(self_share, 1);
        fed_secagg_share_wipe(key_share, 1);
        return err;
    }
    if ((err = fed_crypto_slot_take(a, &slot)) != FED_OK)
        goto out;
    err = fed_secagg_box_key(me, sender_enc_pk, c, fed_crypto_slot_mem(slot));
    if (err == FED_OK)
        err = fed_secagg_box_open_with(fed_crypto_slot_mem(slot), c, route, in, len, self_share,
                                       key_share);
out:
    if (err != FED_OK) {
        fed_secagg_share_wipe(self_share, 1);
        fed_secagg_share_wipe(key_share, 1);
    }
    fed_crypto_slot_release(a, slot);
    return err;
}
