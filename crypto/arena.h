/* arena.h - the one guarded secret arena of a node and what lives in it.
 * A node's secrets sit in a single sodium_malloc'd region (guard pages cost
 * 16 KiB and four mappings each, so thousands of simulated nodes hold one
 * each, never dozens): the identity (Ed25519 seed and secret key, its X25519
 * twin), a bounded LRU cache of per-peer session keys, and a fixed number of
 * 192-byte secret slots (chunk-stream keys and states). Everything is wiped
 * with sodium_memzero when released and when the arena is freed.
 *
 * Session keys: crypto_kx between the two nodes' X25519 keys (derived from
 * their Ed25519 identities). Roles are fixed by comparing the Ed25519 public
 * keys bytewise (memcmp): the lower key plays crypto_kx's "client", the
 * higher its "server". Each side then holds rx and tx; the client's tx is the
 * server's rx and vice versa. A frame is always sealed with the sender's tx
 * key and opened with the recipient's rx key, so each direction of a pair
 * has its own key.
 *
 * Threading: everything here runs on the node's loop thread, except that a
 * pinned session's keys and the identity may be read from any thread while
 * the pin is held (fed_crypto_seal/open in a job). */
#ifndef FED_CRYPTO_ARENA_H
#define FED_CRYPTO_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"

#define FED_CRYPTO_PK_BYTES 32   /* Ed25519 public key */
#define FED_CRYPTO_SEED_BYTES 32 /* Ed25519 seed: the whole identity */
#define FED_CRYPTO_SIG_BYTES 64  /* Ed25519 signature */
#define FED_CRYPTO_KEY_BYTES 32  /* symmetric keys (session, stream) */
#define FED_CRYPTO_SLOT_BYTES 192

typedef struct fed_crypto_arena_cfg {
    uint32_t sessions; /* session keys cached at once, >= 1 (default 64) */
    uint32_t slots;    /* secret slots, one per live chunk stream (default 16) */
} fed_crypto_arena_cfg;

typedef struct fed_crypto_arena fed_crypto_arena;
/* One cached session (the keys of one peer pair), pinned while in use. */
typedef struct fed_crypto_session fed_crypto_session;
/* FED_CRYPTO_SLOT_BYTES of guarded memory for one secret. */
typedef struct fed_crypto_slot fed_crypto_slot;

void fed_crypto_arena_cfg_default(fed_crypto_arena_cfg *cfg);

/* One sodium_malloc for cfg (NULL: defaults); the arena has no identity yet.
 * Calls sodium_init. */
FED_WUR fed_err fed_crypto_arena_new(const fed_crypto_arena_cfg *cfg, fed_crypto_arena **out);
/* Wipes and frees; NULL is fine. No session may be pinned any more. */
void fed_crypto_arena_free(fed_crypto_arena *a);
/* The size of the guarded region, in bytes (its pages, not its guards). */
size_t fed_crypto_arena_bytes(const fed_crypto_arena *a);

/* A fresh identity: a seed drawn from rnd straight into the arena (the
 * daemon passes randombytes_buf, the simulator a seeded fed_rng). Replaces
 * any identity and drops every cached session. */
FED_WUR fed_err fed_crypto_arena_generate(fed_crypto_arena *a, fed_random_fn rnd, void *rnd_ctx);
int fed_crypto_arena_has_identity(const fed_crypto_arena *a);
/* The Ed25519 public key (32 bytes); all zero before an identity is set. */
const uint8_t *fed_crypto_arena_pubkey(const fed_crypto_arena *a);
/* Ed25519 signature over msg with the node's key. FED_ERR_KEY: no identity. */
FED_WUR fed_err fed_crypto_arena_sign(const fed_crypto_arena *a, const uint8_t *msg, size_t len,
                                      uint8_t sig[FED_CRYPTO_SIG_BYTES]);

/* The session with peer (its Ed25519 key), from the cache or derived now
 * (evicting the least recently used unpinned entry), pinned until
 * fed_crypto_session_put. FED_ERR_KEY: no identity, peer is not a valid
 * key, or peer is this node. FED_ERR_BUSY: every entry is pinned. */
FED_WUR fed_err fed_crypto_session_get(fed_crypto_arena *a, const uint8_t peer[FED_CRYPTO_PK_BYTES],
                                       fed_crypto_session **out);
/* Unpins; NULL is fine. */
void fed_crypto_session_put(fed_crypto_arena *a, fed_crypto_session *s);
const uint8_t *fed_crypto_session_peer(const fed_crypto_session *s);
/* Key derivations done so far (cache misses), for tests and counters. */
uint64_t fed_crypto_arena_derivations(const fed_crypto_arena *a);

/* A free slot, zeroed. FED_ERR_FULL when every slot is taken. */
FED_WUR fed_err fed_crypto_slot_take(fed_crypto_arena *a, fed_crypto_slot **out);
/* Wipes and returns the slot; NULL is fine. */
void fed_crypto_slot_release(fed_crypto_arena *a, fed_crypto_slot *s);
uint8_t *fed_crypto_slot_mem(fed_crypto_slot *s);
uint32_t fed_crypto_slots_free(const fed_crypto_arena *a);

/* Guarded memory outside the arena for a secret too large for a slot and
 * alive for one step (a client's freshly split shares, the seeds of one
 * masking, the shares an aggregator rebuilds from): count x size bytes,
 * zeroed, in their own sodium_malloc mapping (guard pages, locked where
 * the host allows). NULL when out of memory, on overflow or for zero
 * bytes. fed_crypto_guarded_free wipes and unmaps; NULL is fine. */
void *fed_crypto_guarded_alloc(size_t count, size_t size);
void fed_crypto_guarded_free(void *p);

#endif
