/* box.h - the box (X25519 key agreement, then AEAD, as NaCl's crypto_box)
 * one client's two shares (of its self seed and
 * of its mask key) travel in to one neighbour, through the aggregator, which
 * can neither read nor alter nor re-address them.
 *
 * Key: X25519 of the sender's share-sealing secret key and the recipient's
 * share-sealing public key (fed_secagg_keys' second pair), refused when all
 * zero, then BLAKE2b-256 keyed with it over "fednode secagg seal v1", both
 * share-sealing public keys in bytewise order and the round context (as the
 * mask seeds bind it: aggregator key, epoch, round, try). The key lives in
 * an arena slot while it is used. Cipher: XChaCha20-Poly1305 (IETF), a
 * random 24-byte nonce from the caller's source, and as associated data the
 * context, then sender index, recipient index and share index (u32le each;
 * indices into the round's signed key list, the share index being the x both
 * shares carry), so a share moved to another round, try, pair or position
 * does not open.
 *
 * Bytes (FED_SECAGG_BOX_BYTES):
 *   nonce (24) | ciphertext of self share (44) | mask-key share (44) | tag (16) */
#ifndef FED_SECAGG_BOX_H
#define FED_SECAGG_BOX_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"
#include "crypto/arena.h"
#include "secagg/mask.h"
#include "secagg/shamir.h"

#define FED_SECAGG_BOX_NONCE_BYTES 24
#define FED_SECAGG_BOX_TAG_BYTES 16
#define FED_SECAGG_BOX_BYTES                                                                   \
    (FED_SECAGG_BOX_NONCE_BYTES + 2 * FED_SECAGG_SHARE_BYTES + FED_SECAGG_BOX_TAG_BYTES)

/* Where a sealed pair of shares belongs: its round and its place in it. */
typedef struct fed_secagg_route {
    uint32_t sender;    /* the sender's index in the signed key list */
    uint32_t recipient; /* the recipient's */
    uint32_t x;         /* the share index both shares carry */
} fed_secagg_route;

/* The pair's sealing key (the X25519 + BLAKE2b above) into key, guarded
 * memory the caller keeps and wipes. It is the same for both clients of a
 * pair, so one derivation seals a client's shares for a neighbour and
 * opens the neighbour's for it (the route in the associated data keeps the
 * two directions apart; each seal draws its own nonce). FED_ERR_KEY: an
 * all-zero shared secret or the client's own key (key wiped). */
FED_WUR fed_err fed_secagg_box_key(const fed_secagg_keys *me,
                                   const uint8_t their_enc_pk[FED_SECAGG_KEY_BYTES],
                                   const fed_secagg_ctx *c, uint8_t key[FED_SECAGG_KEY_BYTES]);
/* fed_secagg_box_seal and fed_secagg_box_open under a key fed_secagg_box_key gave. */
FED_WUR fed_err fed_secagg_box_seal_with(const uint8_t key[FED_SECAGG_KEY_BYTES],
                                         const fed_secagg_ctx *c, const fed_secagg_route *route,
                                         const fed_secagg_share *self_share,
                                         const fed_secagg_share *key_share, fed_random_fn rnd,
                                         void *rnd_ctx, uint8_t out[FED_SECAGG_BOX_BYTES]);
FED_WUR fed_err fed_secagg_box_open_with(const uint8_t key[FED_SECAGG_KEY_BYTES],
                                         const fed_secagg_ctx *c, const fed_secagg_route *route,
                                         const uint8_t *in, size_t len, fed_secagg_share *self_share,
                                         fed_secagg_share *key_share);

/* Seals self_share and key_share (both with x == route->x, else
 * FED_ERR_INVAL) for the client whose share-sealing key is their_enc_pk.
 * FED_ERR_KEY: an all-zero shared secret or the sender's own key;
 * FED_ERR_FULL: no arena slot. */
FED_WUR fed_err fed_secagg_box_seal(fed_crypto_arena *a, const fed_secagg_keys *me,
                                    const uint8_t their_enc_pk[FED_SECAGG_KEY_BYTES],
                                    const fed_secagg_ctx *c, const fed_secagg_route *route,
                                    const fed_secagg_share *self_share,
                                    const fed_secagg_share *key_share, fed_random_fn rnd,
                                    void *rnd_ctx, uint8_t out[FED_SECAGG_BOX_BYTES]);
/* Opens what sender_enc_pk's owner sealed for me at route. FED_ERR_TRUNCATED
 * or FED_ERR_TOO_LARGE for a length other than FED_SECAGG_BOX_BYTES,
 * FED_ERR_AEAD when it does not open (altered, another key, round, try or
 * route), FED_ERR_FORMAT when it opens to shares that do not decode or do
 * not carry route->x (a sender that sealed nonsense), FED_ERR_KEY as above.
 * On failure both shares are wiped. */
FED_WUR fed_err fed_secagg_box_open(fed_crypto_arena *a, const fed_secagg_keys *me,
                                    const uint8_t sender_enc_pk[FED_SECAGG_KEY_BYTES],
                                    const fed_secagg_ctx *c, const fed_secagg_route *route,
                                    const uint8_t *in, size_t len, fed_secagg_share *self_share,
                                    fed_secagg_share *key_share);

#endif
