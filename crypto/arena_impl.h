/* arena_impl.h - raw access to the secrets inside a fed_crypto_arena, for
 * crypto/ itself and its tests only. Pointers returned here point into the
 * guarded region: never copy what they point to into ordinary memory. */
#ifndef FED_CRYPTO_ARENA_IMPL_H
#define FED_CRYPTO_ARENA_IMPL_H

#include "crypto/arena.h"

#define FED_CRYPTO_SCRATCH_BYTES 64

/* Where a seed is written before fedi_crypto_arena_adopt_seed. */
uint8_t *fedi_crypto_arena_seed_mem(fed_crypto_arena *a);
/* Derives the key pairs from the seed in seed_mem and drops every session. */
FED_WUR fed_err fedi_crypto_arena_adopt_seed(fed_crypto_arena *a);
/* Forgets the identity (wipes seed and keys, drops sessions). */
void fedi_crypto_arena_clear_identity(fed_crypto_arena *a);
/* The Ed25519 secret key (64 bytes: seed || public key). */
const uint8_t *fedi_crypto_arena_sk(const fed_crypto_arena *a);
/* FED_CRYPTO_SCRATCH_BYTES of guarded scratch for loop-thread work (key
 * files); wipe it when done. */
uint8_t *fedi_crypto_arena_scratch(fed_crypto_arena *a);
/* The pinned session's keys: tx seals frames to the peer, rx opens them. */
const uint8_t *fedi_crypto_session_rx(const fed_crypto_session *s);
const uint8_t *fedi_crypto_session_tx(const fed_crypto_session *s);

#endif
