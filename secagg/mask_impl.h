/* mask_impl.h - what mask.c shares with the rest of secagg/ and nothing else:
 * the one X25519-then-BLAKE2b derivation behind pair seeds (mask.c) and share
 * sealing keys (box.c), each under its own label. */
#ifndef FED_SECAGG_MASK_IMPL_H
#define FED_SECAGG_MASK_IMPL_H

#include "secagg/mask.h"

/* BLAKE2b-256 keyed with X25519(my_sk, their_pk) over label, the two public
 * keys in bytewise order and c's bytes. FED_ERR_KEY (out wiped): an all-zero
 * shared secret, or their_pk == my_pk. */
FED_WUR fed_err fedi_secagg_dh_kdf(const char *label, const uint8_t my_sk[FED_SECAGG_KEY_BYTES],
                                   const uint8_t my_pk[FED_SECAGG_KEY_BYTES],
                                   const uint8_t their_pk[FED_SECAGG_KEY_BYTES],
                                   const fed_secagg_ctx *c, uint8_t out[FED_SECAGG_KEY_BYTES]);

#endif
