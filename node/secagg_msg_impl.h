/* secagg_msg_impl.h - the vectors of secure aggregation's stage messages (frame
 * types FED_WIRE_SA_*, gossip/wire.h), their parsers, and the two
 * signatures the protocol binds (a client's round keys, and the survivor
 * list of the consistency check). Pure functions of their arguments: the
 * aggregator (secagg_agg.c) and the client (secagg_client.c) share them,
 * and tests/fuzz/fuzz_secagg_msg.c feeds them outside bytes.
 *
 * Every stage is a client's request the aggregator holds until the stage's
 * inputs are in or its deadline passes; the answer has the request's type
 * (UNMASK's is an ACK). The typed block (16 bytes) says the round's try and
 * how many entries the vector holds. Vectors, little-endian (core/bytes.h):
 *
 *   KEYS     request  mask pk 32 | share-sealing pk 32 | signature 64   (count 1)
 *            answer   count x (identity 32 | mask pk 32 | sealing pk 32 | signature 64),
 *                     identities strictly increasing: the round's list U1, a
 *                     client's index is its place in it
 *   SHARES   request  count x (recipient index u32 | sealed pair 128), recipients
 *                     strictly increasing, each a neighbour of the sender
 *            answer   u32 n | n flags (1: the client shared, U2) |
 *                     count x (sender index u32 | sealed pair 128)
 *   MASKED   request  count u32 words (the masked input; its last word the weight),
 *                     count = nparams + 1. Over a frame it goes as a CHUNK stream
 *                     (node/transfer.c), as a DELTA does: the answer is the reply
 *                     to its last frame; once every frame is out, a request with
 *                     count 0 and no vector asks again (answered ACK
 *                     FED_ERR_STREAM while the input is not in: stream it again)
 *            answer   n flags (1: the client's masked input is in, U3), count n
 *   CONSIST  request  signature 64 over the survivor list                (count 1)
 *            answer   count x (index u32 | signature 64), indices increasing
 *   UNMASK   request  count x (owner index u32 | kind u8 | 3 zero | share 44),
 *                     owners strictly increasing; kind 1 self-seed share, 2 mask-key
 *
 * Signatures (Ed25519 by the client's identity):
 *   keys       "fednode secagg keys v1" | ctx (secagg/mask.h) | mask pk | sealing pk
 *   survivors  "fednode secagg survivors v1" | ctx | graph seed 32 | n flags */
#ifndef FED_NODE_SECAGG_MSG_IMPL_H
#define FED_NODE_SECAGG_MSG_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "crypto/arena.h"
#include "secagg/mask.h"
#include "secagg/box.h"
#include "secagg/shamir.h"

#define SA_KEYS_REQ_BYTES (32 + 32 + 64)
#define SA_KEY_ENTRY_BYTES (32 + 32 + 32 + 64)
#define SA_SEALED_ENTRY_BYTES (4 + FED_SECAGG_BOX_BYTES)
#define SA_SIG_ENTRY_BYTES (4 + 64)
#define SA_UNMASK_ENTRY_BYTES (4 + 4 + FED_SECAGG_SHARE_BYTES)
#define SA_KIND_SELF 1
#define SA_KIND_KEY 2
/* The most clients one secure round takes (its key list fits a frame). */
#define SA_MAX_CLIENTS 4096u

typedef struct sa_key_entry {
    uint8_t id[32];
    uint8_t mask_pk[32];
    uint8_t enc_pk[32];
    uint8_t sig[64];
} sa_key_entry;

typedef struct sa_sealed_entry {
    uint32_t index; /* recipient (request) or sender (answer) */
    const uint8_t *sealed; /* FED_SECAGG_BOX_BYTES, in the message */
} sa_sealed_entry;

typedef struct sa_unmask_entry {
    uint32_t owner;
    uint8_t kind;
    fed_secagg_share share;
} sa_unmask_entry;

/* The signed bytes of a client's keys, and the signature check. */
FED_WUR fed_err fedi_sa_keys_sign(const fed_crypto_arena *a, const fed_secagg_ctx *c,
                                  const uint8_t mask_pk[32], const uint8_t enc_pk[32],
                                  uint8_t sig[64]);
int fedi_sa_keys_verify(const uint8_t id[32], const fed_secagg_ctx *c, const uint8_t mask_pk[32],
                        const uint8_t enc_pk[32], const uint8_t sig[64]);
/* The survivor list's signature (alive: n flags). */
FED_WUR fed_err fedi_sa_survivors_sign(const fed_crypto_arena *a, const fed_secagg_ctx *c,
                                       const uint8_t seed[32], const uint8_t *alive, uint32_t n,
                                       uint8_t sig[64]);
int fedi_sa_survivors_verify(const uint8_t id[32], const fed_secagg_ctx *c, const uint8_t seed[32],
                             const uint8_t *alive, uint32_t n, const uint8_t sig[64]);

/* Parsers: each checks the length against count, the order and ranges
 * (indices below n, flags 0 or 1, kinds, reserved zero) before anything is
 * taken, and returns err (the message's own FED_ERR_SA_*) when they fail. */
FED_WUR fed_err fedi_sa_parse_keys_req(const uint8_t *v, size_t len, uint32_t count, uint8_t mask_pk[32],
                                       uint8_t enc_pk[32], uint8_t sig[64]);
/* out: count entries (caller's, count <= SA_MAX_CLIENTS). */
FED_WUR fed_err fedi_sa_parse_key_list(const uint8_t *v, size_t len, uint32_t count, sa_key_entry *out);
void fedi_sa_put_key_entry(uint8_t *out, const sa_key_entry *e);
/* Sealed entries: count of them, indices strictly increasing, below n. */
FED_WUR fed_err fedi_sa_parse_sealed(const uint8_t *v, size_t len, uint32_t count, uint32_t n,
                                     sa_sealed_entry *out);
/* The SHARES answer: *flags points at n flags in v, then count entries. */
FED_WUR fed_err fedi_sa_parse_inbox(const uint8_t *v, size_t len, uint32_t count, uint32_t n,
                                    const uint8_t **flags, sa_sealed_entry *out);
/* n flags of 0 or 1. */
FED_WUR fed_err fedi_sa_parse_flags(const uint8_t *v, size_t len, uint32_t n, fed_err err);
FED_WUR fed_err fedi_sa_parse_sigs(const uint8_t *v, size_t len, uint32_t count, uint32_t n,
                                   uint32_t *idx, const uint8_t **sig);
/* Unmask entries (their shares decoded: x nonzero, values below p). */
FED_WUR fed_err fedi_sa_parse_unmask(const uint8_t *v, size_t len, uint32_t count, uint32_t n,
                                     sa_unmask_entry *out);
void fedi_sa_put_unmask_entry(uint8_t *out, const sa_unmask_entry *e);

#endif
