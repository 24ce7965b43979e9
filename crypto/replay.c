/* replay.c - per-peer 1024-wide replay windows with reserve/commit/release.
 * Owns the windows (one per peer seen) behind an index sorted by public key
 * and binary-searched with fed_key_search. Must never move a window on a
 * reservation alone: only a commit (an opened, authentic frame) may slide
 * it or change its epoch. */
#include "crypto/replay.h"

#include <assert.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"

#define BITS_WORDS (FED_CRYPTO_REPLAY_WINDOW / 64)

typedef struct pending {
    uint64_t epoch, seq;
} pending;

typedef struct window {
    int has_epoch; /* something was committed */
    uint64_t epoch;
    uint64_t top;              /* highest committed sequence */
    uint64_t bits[BITS_WORDS]; /* seen, indexed by seq % 1024 */
    uint32_t npending;
    pending pend[FED_CRYPTO_REPLAY_PENDING];
} window;

/* An index entry: a fed_key_search record (key first); the window lives
 * apart, at one address while the index grows and shifts. */
typedef struct slot {
    uint8_t peer[32];
    window *w;
} slot;

struct fed_crypto_replay {
    slot *s; /* (n) sorted by peer */
    size_t n, cap;
};

fed_err fed_crypto_replay_new(fed_crypto_replay **out)
{
    *out = fed_calloc(1, sizeof **out);
    return *out ? FED_OK : FED_ERR_NOMEM;
}

void fed_crypto_replay_free(fed_crypto_replay *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        fed_free(r->s[i].w);
    fed_free(r->s);
    fed_free(r);
}

static window *find(const fed_crypto_replay *r, const uint8_t *peer)
{
    int found;
    size_t i = fed_key_search(r->s, r->n, sizeof *r->s, peer, &found);

    return found ? r->s[i].w : NULL;
}

static fed_err find_or_add(fed_crypto_replay *r, const uint8_t *peer, window **out)
{
    int found;
    size_t i = fed_key_search(r->s, r->n, sizeof *r->s, peer, &found);
    window *w;

    if (found) {
        *out = r->s[i].w;
        return FED_OK;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 8;
        slot *grown = fed_realloc(r->s, cap * sizeof *grown);

        if (!grown)
            return FED_ERR_NOMEM;
        r->s = grown;
        r->cap = cap;
    }
    w = fed_calloc(1, sizeof *w);
    if (!w)
        return FED_ERR_NOMEM;
    memmove(r->s + i + 1, r->s + i, (r->n - i) * sizeof *r->s);
    memcpy(r->s[i].peer, peer, 32);
    r->s[i].w = w;
    r->n++;
    *out = w;
    return FED_OK;
}

static int bit_get(const window *w, uint64_t seq)
{
    uint64_t b = seq % FED_CRYPTO_REPLAY_WINDOW;

    return (int)((w->bits[b / 64] >> (b % 64)) & 1u);
}

static void bit_set(window *w, uint64_t seq, int on)
{
    uint64_t b = seq % FED_CRYPTO_REPLAY_WINDOW;

    if (on)
        w->bits[b / 64] |= (uint64_t)1 << (b % 64);
    else
        w->bits[b / 64] &= ~((uint64_t)1 << (b % 64));
}

static int pending_index(const window *w, uint64_t epoch, uint64_t seq)
{
    for (uint32_t i = 0; i < w->npending; i++)
        if (w->pend[i].epoch == epoch && w->pend[i].seq == seq)
            return (int)i;
    return -1;
}

static void pending_remove(window *w, int i)
{
    w->pend[i] = w->pend[w->npending - 1];
    w->npending--;
}

/* Seen in the current epoch, or too old to tell. */
static int seen(const window *w, uint64_t seq)
{
    if (seq > w->top)
        return 0;
    if (w->top - seq >= FED_CRYPTO_REPLAY_WINDOW)
        return 1;
    return bit_get(w, seq);
}

fed_err fed_crypto_replay_reserve(fed_crypto_replay *r, const uint8_t peer[32], uint64_t epoch,
                                  uint64_t seq)
{
    window *w;
    fed_err err = find_or_add(r, peer, &w);

    if (err != FED_OK)
        return err;
    if (w->has_epoch && epoch < w->epoch)
        return FED_ERR_SENDER_EPOCH;
    if (pending_index(w, epoch, seq) >= 0)
        return FED_ERR_REPLAY;
    if (w->has_epoch && epoch == w->epoch && seen(w, seq))
        return FED_ERR_REPLAY;
    if (w->npending == FED_CRYPTO_REPLAY_PENDING)
        return FED_ERR_BUSY;
    w->pend[w->npending].epoch = epoch;
    w->pend[w->npending].seq = seq;
    w->npending++;
    return FED_OK;
}

static void slide_to(window *w, uint64_t seq)
{
    if (seq - w->top >= FED_CRYPTO_REPLAY_WINDOW) {
        memset(w->bits, 0, sizeof w->bits);
    } else {
        for (uint64_t s = w->top + 1; s != seq + 1; s++)
            bit_set(w, s, 0);
    }
    w->top = seq;
}

fed_err fed_crypto_replay_commit(fed_crypto_replay *r, const uint8_t peer[32], uint64_t epoch,
                                 uint64_t seq)
{
    window *w = find(r, peer);
    int i = w ? pending_index(w, epoch, seq) : -1;

    assert(i >= 0 && "commit without a reservation");
    if (i < 0)
        return FED_ERR_INVAL;
    pending_remove(w, i);
    if (w->has_epoch && epoch < w->epoch)
        return FED_ERR_SENDER_EPOCH;
    if (!w->has_epoch || epoch > w->epoch) {
        w->has_epoch = 1;
        w->epoch = epoch;
        w->top = seq;
        memset(w->bits, 0, sizeof w->bits);
    } else if (seq > w->top) {
        slide_to(w, seq);
    } else if (w->top - seq >= FED_CRYPTO_REPLAY_WINDOW) {
        return FED_OK; /* below the window now; the reservation kept copies out */
    } else if (bit_get(w, seq)) {
        return FED_ERR_REPLAY;
    }
    bit_set(w, seq, 1);
    return FED_OK;
}

void fed_crypto_replay_release(fed_crypto_replay *r, const uint8_t peer[32], uint64_t epoch,
                               uint64_t seq)
{
    window *w = find(r, peer);
    int i = w ? pending_index(w, epoch, seq) : -1;

    if (i >= 0)
        pending_remove(w, i);
}

uint64_t fed_crypto_replay_epoch(const fed_crypto_replay *r, const uint8_t peer[32])
{
    const window *w = find(r, peer);

    return w && w->has_epoch ? w->epoch : 0;
}

void fed_crypto_replay_forget(fed_crypto_replay *r, const uint8_t peer[32])
{
    int found;
    size_t i = fed_key_search(r->s, r->n, sizeof *r->s, peer, &found);

    if (!found)
        return;
    assert(r->s[i].w->npending == 0);
    fed_free(r->s[i].w);
    memmove(r->s + i, r->s + i + 1, (r->n - i - 1) * sizeof *r->s);
    r->n--;
}

size_t fed_crypto_replay_peers(const fed_crypto_replay *r) { return r->n; }
