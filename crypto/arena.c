/* arena.c - the per-node guarded secret arena: identity, session-key cache
 * (LRU over a fixed number of entries) and secret slots, all inside one
 * sodium_malloc region. Owns that region and the (public) bookkeeping beside
 * it. Must never let a secret leave the region, nor leave one unwiped. */
#include "crypto/arena.h"

#include <assert.h>
#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "crypto/arena_impl.h"

/* Region layout (offsets in bytes; each part a multiple of 64):
 *   0   32  Ed25519 seed
 *   32  64  Ed25519 secret key (seed || public key)
 *   96  32  X25519 secret key
 *   128 64  scratch
 *   192 64  (reserved, zero)
 *   256     sessions: n x 64 (rx 32, tx 32)
 *   ...     slots:    m x FED_CRYPTO_SLOT_BYTES */
#define OFF_SEED 0
#define OFF_SK 32
#define OFF_XSK 96
#define OFF_SCRATCH 128
#define IDENTITY_BYTES 256
#define SESSION_BYTES 64

struct fed_crypto_session {
    uint8_t peer[FED_CRYPTO_PK_BYTES];
    uint8_t *keys; /* rx || tx, in the region */
    uint64_t last_used;
    uint32_t pins;
    int valid;
};

struct fed_crypto_arena {
    uint8_t *mem; /* the sodium_malloc region */
    size_t mem_bytes;
    uint8_t pk[FED_CRYPTO_PK_BYTES];  /* Ed25519 public */
    uint8_t xpk[FED_CRYPTO_PK_BYTES]; /* X25519 public */
    int has_identity;
    uint32_t nsessions;
    fed_crypto_session *sessions; /* (nsessions) */
    uint64_t tick;
    uint64_t derivations;
    uint32_t nslots;
    uint8_t *slot_used; /* (nslots) */
    uint32_t slots_free;
};

void fed_crypto_arena_cfg_default(fed_crypto_arena_cfg *cfg)
{
    cfg->sessions = 64;
    cfg->slots = 16;
}

static size_t slots_offset(const fed_crypto_arena *a)
{
    return IDENTITY_BYTES + (size_t)a->nsessions * SESSION_BYTES;
}

fed_err fed_crypto_arena_new(const fed_crypto_arena_cfg *cfg, fed_crypto_arena **out)
{
    fed_crypto_arena_cfg def;
    fed_crypto_arena *a = NULL;
    fed_err err = FED_OK;

    *out = NULL;
    if (!cfg) {
        fed_crypto_arena_cfg_default(&def);
        cfg = &def;
    }
    if (cfg->sessions < 1 || cfg->sessions > (1u << 20) || cfg->slots > (1u << 20))
        return FED_ERR_INVAL;
    if (sodium_init() < 0)
        return FED_ERR_INTERNAL;
    a = fed_calloc(1, sizeof *a);
    if (!a)
        return FED_ERR_NOMEM;
    a->nsessions = cfg->sessions;
    a->nslots = cfg->slots;
    a->sessions = fed_calloc(cfg->sessions, sizeof *a->sessions);
    a->slot_used = fed_calloc(cfg->slots ? cfg->slots : 1, 1);
    if (!a->sessions || !a->slot_used) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    a->mem_bytes = slots_offset(a) + (size_t)cfg->slots * FED_CRYPTO_SLOT_BYTES;
    a->mem = sodium_malloc(a->mem_bytes);
    if (!a->mem) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    sodium_memzero(a->mem, a->mem_bytes);
    for (uint32_t i = 0; i < a->nsessions; i++)
        a->sessions[i].keys = a->mem + IDENTITY_BYTES + (size_t)i * SESSION_BYTES;
    a->slots_free = a->nslots;
    *out = a;
    a = NULL;
out:
    fed_crypto_arena_free(a);
    return err;
}

void fed_crypto_arena_free(fed_crypto_arena *a)
{
    if (!a)
        return;
    if (a->mem) {
        sodium_memzero(a->mem, a->mem_bytes);
        sodium_free(a->mem);
    }
    fed_free(a->sessions);
    fed_free(a->slot_used);
    fed_free(a);
}

size_t fed_crypto_arena_bytes(const fed_crypto_arena *a) { return a->mem_bytes; }

/* ---- identity ---- */

static void drop_sessions(fed_crypto_arena *a)
{
    for (uint32_t i = 0; i < a->nsessions; i++) {
        assert(a->sessions[i].pins == 0);
        sodium_memzero(a->sessions[i].keys, SESSION_BYTES);
        memset(a->sessions[i].peer, 0, FED_CRYPTO_PK_BYTES);
        a->sessions[i].valid = 0;
    }
}

uint8_t *fedi_crypto_arena_seed_mem(fed_crypto_arena *a) { return a->mem + OFF_SEED; }

const uint8_t *fedi_crypto_arena_sk(const fed_crypto_arena *a) { return a->mem + OFF_SK; }

uint8_t *fedi_crypto_arena_scratch(fed_crypto_arena *a) { return a->mem + OFF_SCRATCH; }

void fedi_crypto_arena_clear_identity(fed_crypto_arena *a)
{
    drop_sessions(a);
    sodium_memzero(a->mem, IDENTITY_BYTES);
    memset(a->pk, 0, sizeof a->pk);
    memset(a->xpk, 0, sizeof a->xpk);
    a->has_identity = 0;
}

fed_err fedi_crypto_arena_adopt_seed(fed_crypto_arena *a)
{
    uint8_t *seed = a->mem + OFF_SEED, *sk = a->mem + OFF_SK, *xsk = a->mem + OFF_XSK;

    drop_sessions(a);
    a->has_identity = 0;
    if (crypto_sign_seed_keypair(a->pk, sk, seed) != 0 ||
        crypto_sign_ed25519_sk_to_curve25519(xsk, sk) != 0 ||
        crypto_sign_ed25519_pk_to_curve25519(a->xpk, a->pk) != 0) {
        fedi_crypto_arena_clear_identity(a);
        return FED_ERR_KEY;
    }
    a->has_identity = 1;
    return FED_OK;
}

fed_err fed_crypto_arena_generate(fed_crypto_arena *a, fed_random_fn rnd, void *rnd_ctx)
{
    rnd(rnd_ctx, a->mem + OFF_SEED, FED_CRYPTO_SEED_BYTES);
    return fedi_crypto_arena_adopt_seed(a);
}

int fed_crypto_arena_has_identity(const fed_crypto_arena *a) { return a->has_identity; }

const uint8_t *fed_crypto_arena_pubkey(const fed_crypto_arena *a) { return a->pk; }

fed_err fed_crypto_arena_sign(const fed_crypto_arena *a, const uint8_t *msg, size_t len,
                              uint8_t sig[FED_CRYPTO_SIG_BYTES])
{
    if (!a->has_identity)
        return FED_ERR_KEY;
    if (crypto_sign_detached(sig, NULL, msg, len, a->mem + OFF_SK) != 0)
        return FED_ERR_INTERNAL;
    return FED_OK;
}

/* ---- sessions ---- */

static fed_err derive_session(fed_crypto_arena *a, fed_crypto_session *s,
                              const uint8_t peer[FED_CRYPTO_PK_BYTES])
{
    uint8_t peer_x[crypto_kx_PUBLICKEYBYTES];
    uint8_t *rx = s->keys, *tx = s->keys + crypto_kx_SESSIONKEYBYTES;
    const uint8_t *xsk = a->mem + OFF_XSK;
    int rc;

    if (crypto_sign_ed25519_pk_to_curve25519(peer_x, peer) != 0)
        return FED_ERR_KEY;
    /* The lower Ed25519 key is crypto_kx's client: both sides agree. */
    if (memcmp(a->pk, peer, FED_CRYPTO_PK_BYTES) < 0)
        rc = crypto_kx_client_session_keys(rx, tx, a->xpk, xsk, peer_x);
    else
        rc = crypto_kx_server_session_keys(rx, tx, a->xpk, xsk, peer_x);
    if (rc != 0) {
        sodium_memzero(s->keys, SESSION_BYTES);
        return FED_ERR_KEY;
    }
    a->derivations++;
    return FED_OK;
}

static fed_crypto_session *find_session(fed_crypto_arena *a, const uint8_t *peer)
{
    for (uint32_t i = 0; i < a->nsessions; i++) {
        fed_crypto_session *s = &a->sessions[i];

        if (s->valid && memcmp(s->peer, peer, FED_CRYPTO_PK_BYTES) == 0)
            return s;
    }
    return NULL;
}

/* An empty entry, else the least recently used unpinned one; NULL if all pinned. */
static fed_crypto_session *victim_session(fed_crypto_arena *a)
{
    fed_crypto_session *best = NULL;

    for (uint32_t i = 0; i < a->nsessions; i++) {
        fed_crypto_session *s = &a->sessions[i];

        if (!s->valid)
            return s;
        if (s->pins == 0 && (!best || s->last_used < best->last_used))
            best = s;
    }
    return best;
}

fed_err fed_crypto_session_get(fed_crypto_arena *a, const uint8_t peer[FED_CRYPTO_PK_BYTES],
                               fed_crypto_session **out)
{
    fed_crypto_session *s;
    fed_err err;

    *out = NULL;
    if (!a->has_identity || memcmp(peer, a->pk, FED_CRYPTO_PK_BYTES) == 0)
        return FED_ERR_KEY;
    s = find_session(a, peer);
    if (!s) {
        s = victim_session(a);
        if (!s)
            return FED_ERR_BUSY;
        s->valid = 0;
        err = derive_session(a, s, peer);
        if (err != FED_OK)
            return err;
        memcpy(s->peer, peer, FED_CRYPTO_PK_BYTES);
        s->valid = 1;
    }
    s->last_used = ++a->tick;
    s->pins++;
    *out = s;
    return FED_OK;
}

void fed_crypto_session_put(fed_crypto_arena *a, fed_crypto_session *s)
{
    (void)a;
    if (!s)
        return;
    assert(s->pins > 0);
    s->pins--;
}

const uint8_t *fed_crypto_session_peer(const fed_crypto_session *s) { return s->peer; }

const uint8_t *fedi_crypto_session_rx(const fed_crypto_session *s) { return s->keys; }

const uint8_t *fedi_crypto_session_tx(const fed_crypto_session *s)
{
    return s->keys + crypto_kx_SESSIONKEYBYTES;
}

uint64_t fed_crypto_arena_derivations(const fed_crypto_arena *a) { return a->derivations; }

/* ---- slots ---- */

fed_err fed_crypto_slot_take(fed_crypto_arena *a, fed_crypto_slot **out)
{
    *out = NULL;
    for (uint32_t i = 0; i < a->nslots; i++) {
        if (!a->slot_used[i]) {
            uint8_t *mem = a->mem + slots_offset(a) + (size_t)i * FED_CRYPTO_SLOT_BYTES;

            a->slot_used[i] = 1;
            a->slots_free--;
            sodium_memzero(mem, FED_CRYPTO_SLOT_BYTES);
            *out = (fed_crypto_slot *)mem;
            return FED_OK;
        }
    }
    return FED_ERR_FULL;
}

void fed_crypto_slot_release(fed_crypto_arena *a, fed_crypto_slot *s)
{
    uint8_t *mem = (uint8_t *)s;
    size_t i;

    if (!s)
        return;
    assert(mem >= a->mem + slots_offset(a) && mem < a->mem + a->mem_bytes);
    i = (size_t)(mem - (a->mem + slots_offset(a))) / FED_CRYPTO_SLOT_BYTES;
    assert(a->slot_used[i]);
    sodium_memzero(mem, FED_CRYPTO_SLOT_BYTES);
    a->slot_used[i] = 0;
    a->slots_free++;
}

uint8_t *fed_crypto_slot_mem(fed_crypto_slot *s) { return (uint8_t *)s; }

uint32_t fed_crypto_slots_free(const fed_crypto_arena *a) { return a->slots_free; }

void *fed_crypto_guarded_alloc(size_t count, size_t size)
{
    void *p;

    if (!count || !size)
        return NULL;
    p = sodium_allocarray(count, size);
    if (p)
        sodium_memzero(p, count * size);
    return p;
}

void fed_crypto_guarded_free(void *p)
{
    if (p)
        sodium_free(p); /* sodium_free wipes the region before unmapping it */
}
