/* broadcast.c - one typed block and vector sent to many recipients at
 * once (the aggregator's MODEL to a round's clients): every frame is
 * sealed on the pool first, then all are sent. Sealing is nearly all of
 * the work: one BLAKE2b pass over the payload, which every frame carries
 * alike and is hashed once for all, then an AEAD pass per recipient. Made
 * one by one on the loop thread, it lets the first clients start
 * training while the last ones still wait, competing with them for the
 * cores; sealed together, every recipient starts within a few ms of the
 * others. Frames may also be sealed ahead, beside other work (the
 * aggregator's commit) or one at a time (a client waiting while no round
 * runs), and sent by the broadcast that names their recipient, type,
 * round and payload; they pin no session while they wait. Owns the frame
 * buffers it keeps between broadcasts; the wire's sequence numbers,
 * sessions and nonces are still drawn on the loop thread, in recipient
 * order, exactly as one fedi_node_emit each would (a frame sealed ahead
 * draws its sequence early; the replay window takes it out of order). */
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "node/node_impl.h"

/* Frames sealed together: at most this many, holding at most this many
 * bytes (at least one frame); past either a broadcast goes out in batches
 * (and nothing is sealed ahead). */
#define NODE_CAST_MAX_FRAMES 64
#define NODE_CAST_BYTES ((size_t)64 << 20)

/* One frame: the ticket made on the loop, sealed on the pool, sent (or
 * dropped) on the loop; the ticket pins its session until then. */
typedef struct cast_one {
    fed_wire_ticket t;
    uint8_t nonce[24]; /* drawn on the loop thread, in order */
    uint8_t *frame;
    size_t len;        /* out: the sealed frame's bytes */
    fed_err err;       /* out */
    int ready;         /* the ticket was made (pinned, until a frame sealed
                          ahead is unpinned: ahead_settle) */
} cast_one;

/* The payload every frame of a broadcast carries alike, hashed once for
 * all its batches (fed_crypto_payload_hash). */
typedef struct cast_payload {
    uint8_t hash[FED_CRYPTO_DIGEST_BYTES];
    int hashed;
} cast_payload;

struct node_cast_buf {
    uint8_t **frames; /* (nframes) each cap bytes */
    size_t nframes, cap;
    /* frames sealed ahead: frames[0..nahead), each ticket's header naming
       its recipient, epoch, type and round; all carry one payload: the
       typed block encoded as blk, then the vector at vec (vlen bytes),
       hashed as pl */
    cast_one *ahead;
    size_t nahead, cap_ahead;
    uint8_t *blk;
    size_t blk_len, blk_cap;
    const uint8_t *vec;
    size_t vlen;
    cast_payload pl;
    uint64_t sent_ahead; /* frames sealed ahead that went, since the start */
};

typedef struct cast_batch {
    fed_node *n;
    const fed_wire_block *b;
    const uint8_t *vec;
    size_t vlen;
    cast_one *one;
    size_t k;
    void (*beside)(void *ctx); /* run beside the sealing, when set */
    void *beside_ctx;
    cast_payload *pl;
    const cast_one *encoded; /* the frame whose payload was hashed, or NULL */
} cast_batch;

/* The ticket's pin released: counted as sent when result is FED_OK. */
static void cast_done(fed_node *n, cast_one *o, fed_err result)
{
    if (o->ready)
        fed_wire_seal_done(n->wire, &o->t, result);
    o->ready = 0;
}

void fedi_node_cast_drop_ahead(fed_node *n)
{
    node_cast_buf *c = n->cast;

    if (!c)
        return;
    for (size_t i = 0; i < c->nahead; i++)
        cast_done(n, &c->ahead[i], FED_ERR_CLOSED);
    c->nahead = 0;
    c->blk_len = 0;
    c->vec = NULL;
    c->vlen = 0;
    c->pl.hashed = 0;
}

uint64_t fedi_node_cast_sent_ahead(const fed_node *n) { return n->cast ? n->cast->sent_ahead : 0; }

void fedi_node_cast_free(fed_node *n)
{
    node_cast_buf *c = n->cast;

    if (!c)
        return;
    fedi_node_cast_drop_ahead(n);
    for (size_t i = 0; i < c->nframes; i++)
        fed_free(c->frames[i]);
    fed_free(c->frames);
    fed_free(c->ahead);
    fed_free(c->blk);
    fed_free(c);
    n->cast = NULL;
}

/* At least want frames of cap bytes each (a larger cap than before drops
 * every frame, those sealed ahead included). */
static fed_err cast_reserve(fed_node *n, size_t want, size_t cap)
{
    node_cast_buf *c = n->cast;
    uint8_t **f;

    if (!c) {
        if (!(c = fed_calloc(1, sizeof *c)))
            return FED_ERR_NOMEM;
        n->cast = c;
    }
    if (cap > c->cap) {
        fedi_node_cast_drop_ahead(n);
        for (size_t i = 0; i < c->nframes; i++)
            fed_free(c->frames[i]);
        c->nframes = 0;
        c->cap = cap;
    }
    if (want <= c->nframes)
        return FED_OK;
    if (!(f = fed_realloc(c->frames, want * sizeof *f)))
        return FED_ERR_NOMEM;
    c->frames = f;
    for (; c->nframes < want; c->nframes++)
        if (!(c->frames[c->nframes] = fed_malloc(c->cap)))
            return FED_ERR_NOMEM;
    return FED_OK;
}

/* The pre-drawn nonce (a fed_random_fn: ctx is the cast_one). */
static void cast_nonce(void *ctx, void *buf, size_t len)
{
    const cast_one *o = ctx;

    memcpy(buf, o->nonce, len < sizeof o->nonce ? len : sizeof o->nonce);
}

/* Block and vector into o's payload. */
static fed_err cast_encode(const cast_batch *cb, cast_one *o)
{
    uint8_t *payload = fed_wire_payload(o->frame);
    size_t blen = 0;
    fed_err e = fed_wire_block_encode(o->t.hdr.type, cb->b, payload, o->t.hdr.payload_len, &blen);

    if (e == FED_OK && blen + cb->vlen != o->t.hdr.payload_len)
        e = FED_ERR_INTERNAL;
    if (e == FED_OK && cb->vlen)
        memcpy(payload + blen, cb->vec, cb->vlen);
    return e;
}

/* The payload every frame carries, unless an earlier batch hashed it:
 * encoded into the first frame that was prepared and hashed there once
 * (for two frames or more). */
static void cast_hash_payload(cast_batch *cb)
{
    size_t i = 0;
    cast_one *o;

    while (i < cb->k && !cb->one[i].ready)
        i++;
    if (cb->pl->hashed || cb->k < 2 || i == cb->k)
        return;
    o = &cb->one[i];
    if ((o->err = cast_encode(cb, o)) != FED_OK)
        return; /* its piece sees the error; the others hash their own */
    fed_crypto_payload_hash(fed_wire_payload(o->frame), o->t.hdr.payload_len, cb->pl->hash);
    cb->pl->hashed = 1;
    cb->encoded = o;
}

/* Pool piece i: frame i encoded (the hashed one already is) and sealed. */
static void cast_seal(void *ctx, size_t i)
{
    cast_batch *cb = ctx;
    cast_one *o = &cb->one[i];

    if (!o->ready || o->err != FED_OK)
        return;
    if (o != cb->encoded && (o->err = cast_encode(cb, o)) != FED_OK)
        return;
    o->err = fed_wire_seal_ticket(cb->n->wire, &o->t, o->frame,
                                  cb->pl->hashed ? cb->pl->hash : NULL, cast_nonce, o, &o->len);
}

/* The payload hashed once, then every frame sealed on the pool. */
static void cast_seal_frames(cast_batch *cb)
{
    cast_hash_payload(cb);
    fed_pool_parallel_for(cb->n->cfg.pool, cb->k, cast_seal, cb);
}

/* Pool piece i of two: the work beside first (it starts at once, and the
 * thread running it is the one that waits on its fsync), the sealing
 * second, its frames spread over the pool in turn. */
static void cast_beside_or_seal(void *ctx, size_t i)
{
    cast_batch *cb = ctx;

    if (i == 0)
        cb->beside(cb->beside_ctx);
    else
        cast_seal_frames(cb);
}

/* Loop thread: header, sequence, session and nonce of one frame. */
static fed_err cast_prepare(fed_node *n, const node_cast *to, uint8_t type, uint64_t round,
                            uint16_t codec, size_t payload_len, cast_one *o)
{
    fed_wire_hdr h;
    fed_err e = fedi_node_header(n, type, to->to, round, to->recipient_epoch, codec, &h);

    if (e == FED_OK)
        e = fed_wire_seal_prepare(n->wire, &h, n->cast->cap, payload_len, &o->t);
    if (e != FED_OK)
        return e;
    n->env.random(n->env.self, o->nonce, sizeof o->nonce);
    o->ready = 1;
    return FED_OK;
}

/* Seals k frames into one[i].frame (set by the caller) on the pool, with
 * beside (may be NULL) run beside them; pl carries the payload's hash from
 * batch to batch. The tickets stay pinned. */
static void cast_seal_all(fed_node *n, const node_cast *to, size_t k, uint8_t type,
                          uint64_t round, uint16_t codec, const fed_wire_block *b,
                          const uint8_t *vec, size_t vlen, cast_one *one, cast_payload *pl,
                          void (*beside)(void *ctx), void *beside_ctx)
{
    size_t payload_len = fed_wire_block_bytes(type, b) + vlen;
    cast_batch cb = {.n = n, .b = b, .vec = vec, .vlen = vlen, .one = one, .k = k,
                     .beside = beside, .beside_ctx = beside_ctx, .pl = pl};

    for (size_t i = 0; i < k; i++) {
        uint8_t *frame = one[i].frame;

        memset(&one[i], 0, sizeof one[i]);
        one[i].frame = frame;
        one[i].err = cast_prepare(n, &to[i], type, round, codec, payload_len, &one[i]);
    }
    if (beside)
        fed_pool_parallel_for(n->cfg.pool, 2, cast_beside_or_seal, &cb);
    else
        cast_seal_frames(&cb);
}

/* Loop thread: frame o to `to`, or its refusal. */
static fed_err cast_send(fed_node *n, const node_cast *to, cast_one *o, uint8_t type)
{
    fed_err e = o->err;

    cast_done(n, o, e);
    if (e == FED_OK)
        return fedi_node_transmit(n, to->req, to->to, o->frame, o->len);
    fed_log(FED_LOG_ERROR, "node: sealing a %s frame failed: %s", fed_wire_type_name(type),
            fed_strerror(e));
    fedi_node_refuse(n, to->req);
    return e;
}

/* Frames of at most this many bytes go in batches of this many. */
static size_t cast_batch_size(size_t fbytes)
{
    size_t batch = NODE_CAST_BYTES / fbytes;

    return batch == 0 ? 1 : batch > NODE_CAST_MAX_FRAMES ? NODE_CAST_MAX_FRAMES : batch;
}

/* Room for k frames sealed ahead, in frames[0..k). */
static fed_err ahead_reserve(fed_node *n, size_t k, size_t fbytes)
{
    node_cast_buf *c;
    fed_err e = cast_reserve(n, k, fbytes);

    if (e != FED_OK)
        return e;
    c = n->cast;
    if (k > c->cap_ahead) {
        cast_one *a = fed_realloc(c->ahead, k * sizeof *a);

        if (!a)
            return FED_ERR_NOMEM;
        c->ahead = a;
        c->cap_ahead = k;
    }
    for (size_t i = 0; i < k; i++)
        c->ahead[i].frame = c->frames[i];
    return FED_OK;
}

/* b encoded into *buf (grown to fit), its length in *len. */
static fed_err block_encode_into(uint8_t type, const fed_wire_block *b, uint8_t **buf, size_t *cap,
                                 size_t *len)
{
    size_t want = fed_wire_block_bytes(type, b);

    if (want > *cap) {
        uint8_t *p = fed_realloc(*buf, want);

        if (!p)
            return FED_ERR_NOMEM;
        *buf = p;
        *cap = want;
    }
    return fed_wire_block_encode(type, b, *buf, want, len);
}

/* A frame sealed ahead: kept, its session unpinned (the frame may wait a
 * while, and a pin would keep other peers' sessions out), or given up. */
static void ahead_settle(fed_node *n, cast_one *o, uint8_t type)
{
    if (!o->ready)
        return;
    if (o->err == FED_OK) {
        fed_wire_seal_unpin(n->wire, &o->t);
        return;
    }
    fed_log(FED_LOG_DEBUG, "node: sealing a %s frame ahead failed: %s", fed_wire_type_name(type),
            fed_strerror(o->err));
    cast_done(n, o, o->err);
}

/* The payload the frames sealed ahead carry: b's encoding and the vector
 * (its place and length: the aggregator drops them when it encodes its
 * vector anew). */
static fed_err ahead_keep_payload(node_cast_buf *c, uint8_t type, const fed_wire_block *b,
                                  const uint8_t *vec, size_t vlen)
{
    fed_err e = block_encode_into(type, b, &c->blk, &c->blk_cap, &c->blk_len);

    c->vec = vec;
    c->vlen = vlen;
    if (e != FED_OK)
        c->blk_len = 0;
    return e;
}

/* Whether the frames sealed ahead carry the payload of b and vec: the
 * block the same byte for byte (a setting that moved since, a secure
 * round's try, makes them stale), the vector the same one. */
static int ahead_carries(const node_cast_buf *c, uint8_t type, const fed_wire_block *b,
                         const uint8_t *vec, size_t vlen)
{
    uint8_t *now = NULL;
    size_t cap = 0, len = 0;
    int same = c->vec == vec && c->vlen == vlen && c->blk_len &&
               block_encode_into(type, b, &now, &cap, &len) == FED_OK && len == c->blk_len &&
               !memcmp(now, c->blk, len);

    fed_free(now);
    return same;
}

void fedi_node_cast_ahead(fed_node *n, const node_cast *to, size_t k, uint8_t type,
                          uint64_t round, uint16_t codec, const fed_wire_block *b,
                          const uint8_t *vec, size_t vlen, void (*beside)(void *ctx),
                          void *beside_ctx)
{
    size_t fbytes = fed_wire_frame_bytes(fed_wire_block_bytes(type, b) + vlen);
    cast_payload pl = {.hashed = 0};

    fedi_node_cast_drop_ahead(n);
    if (k == 0 || fbytes > fed_wire_config(n->wire)->max_frame || k > cast_batch_size(fbytes) ||
        ahead_reserve(n, k, fbytes) != FED_OK ||
        ahead_keep_payload(n->cast, type, b, vec, vlen) != FED_OK) {
        beside(beside_ctx); /* nothing ahead: the broadcast seals them all */
        return;
    }
    cast_seal_all(n, to, k, type, round, codec, b, vec, vlen, n->cast->ahead, &pl, beside,
                  beside_ctx);
    for (size_t i = 0; i < k; i++)
        ahead_settle(n, &n->cast->ahead[i], type);
    n->cast->nahead = k;
    n->cast->pl = pl;
}

/* The frame sealed ahead for `to` (same key and epoch), type and round, or
 * NULL: as its ticket's header says. */
static cast_one *ahead_find(node_cast_buf *c, const node_cast *to, uint8_t type, uint64_t round)
{
    for (size_t i = 0; c && i < c->nahead; i++) {
        const fed_wire_hdr *h = &c->ahead[i].t.hdr;

        if (c->ahead[i].ready && h->type == type && h->round == round &&
            h->recipient_epoch == to->recipient_epoch && !memcmp(h->recipient, to->to, 32))
            return &c->ahead[i];
    }
    return NULL;
}

void fedi_node_cast_ahead_add(fed_node *n, const node_cast *to, uint8_t type, uint64_t round,
                              uint16_t codec, const fed_wire_block *b, const uint8_t *vec,
                              size_t vlen)
{
    size_t payload_len = fed_wire_block_bytes(type, b) + vlen;
    size_t fbytes = fed_wire_frame_bytes(payload_len);
    node_cast_buf *c = n->cast;
    cast_batch cb = {.n = n, .b = b, .vec = vec, .vlen = vlen, .k = 1};
    cast_one *o = NULL;
    uint8_t *frame;

    if (fbytes > fed_wire_config(n->wire)->max_frame)
        return; /* a stream: each pulls its own */
    if (c && c->nahead) {
        const fed_wire_hdr *h = &c->ahead[0].t.hdr;

        if (h->type != type || h->round != round || !ahead_carries(c, type, b, vec, vlen))
            fedi_node_cast_drop_ahead(n); /* another round's, or another payload */
        else if ((o = ahead_find(c, to, type, round)))
            cast_done(n, o, FED_ERR_CLOSED); /* sealed again below: a recipient that
                                                asks again has had frames since, and
                                                its sequence must stay in the window */
    }
    if (!o) { /* a new one: frames of fbytes first (a larger size drops the set) */
        if (cast_reserve(n, 1, fbytes) != FED_OK)
            return;
        c = n->cast;
        if (!c->nahead) { /* the first of a set: its payload, hashed below */
            c->pl.hashed = 0;
            if (ahead_keep_payload(c, type, b, vec, vlen) != FED_OK)
                return;
        }
        if (c->nahead + 1 > cast_batch_size(fbytes) ||
            ahead_reserve(n, c->nahead + 1, fbytes) != FED_OK)
            return;
        o = &c->ahead[c->nahead++]; /* a slot that stays not ready if sealing fails */
    }
    frame = o->frame;
    memset(o, 0, sizeof *o);
    o->frame = frame;
    cb.one = o;
    cb.pl = &c->pl;
    if ((o->err = cast_prepare(n, to, type, round, codec, payload_len, o)) != FED_OK)
        return;
    if (!c->pl.hashed && (o->err = cast_encode(&cb, o)) == FED_OK) { /* kept for the next */
        fed_crypto_payload_hash(fed_wire_payload(o->frame), payload_len, c->pl.hash);
        c->pl.hashed = 1;
        cb.encoded = o;
    }
    cast_seal(&cb, 0);
    ahead_settle(n, o, type);
}

/* One by one, through fedi_node_emit_vec (a stream, or a single frame). */
static fed_err cast_one_by_one(fed_node *n, const node_cast *to, size_t k, uint8_t type,
                               uint64_t round, uint16_t codec, const fed_wire_block *b,
                               const uint8_t *vec, size_t vlen)
{
    fed_err e, first = FED_OK;

    for (size_t i = 0; i < k; i++) {
        fed_wire_hdr h;

        e = fedi_node_header(n, type, to[i].to, round, to[i].recipient_epoch, codec, &h);
        if (e == FED_OK)
            e = fedi_node_emit_vec(n, to[i].req, &h, b, vec, vlen);
        else
            fedi_node_refuse(n, to[i].req);
        if (e != FED_OK && first == FED_OK)
            first = e;
    }
    return first;
}

/* Seals rest together, in batches, and sends each batch; pl: the payload's
 * hash when known. */
static fed_err cast_rest(fed_node *n, const node_cast *rest, size_t nrest, uint8_t type,
                         uint64_t round, uint16_t codec, const fed_wire_block *b,
                         const uint8_t *vec, size_t vlen, cast_payload *pl)
{
    size_t fbytes = fed_wire_frame_bytes(fed_wire_block_bytes(type, b) + vlen);
    size_t batch = cast_batch_size(fbytes);
    cast_one *one = NULL;
    fed_err e, first = FED_OK;

    batch = batch > nrest ? nrest : batch;
    if ((e = cast_reserve(n, batch, fbytes)) != FED_OK ||
        !(one = fed_malloc(batch * sizeof *one))) {
        for (size_t i = 0; i < nrest; i++)
            fedi_node_refuse(n, rest[i].req);
        return e != FED_OK ? e : FED_ERR_NOMEM;
    }
    for (size_t i = 0; i < nrest; i += batch) {
        size_t m = nrest - i < batch ? nrest - i : batch;

        for (size_t j = 0; j < m; j++)
            one[j].frame = n->cast->frames[j];
        cast_seal_all(n, rest + i, m, type, round, codec, b, vec, vlen, one, pl, NULL, NULL);
        for (size_t j = 0; j < m; j++)
            if ((e = cast_send(n, &rest[i + j], &one[j], type)) != FED_OK && first == FED_OK)
                first = e;
    }
    fed_free(one);
    return first;
}

/* One frame as any other (fedi_node_emit_vec) unless the payload's hash
 * is known (pl, from the frames sealed ahead), more sealed together. */
static fed_err cast_sealed_here(fed_node *n, const node_cast *to, size_t k, uint8_t type,
                                uint64_t round, uint16_t codec, const fed_wire_block *b,
                                const uint8_t *vec, size_t vlen, cast_payload *pl)
{
    if (k == 0)
        return FED_OK;
    if (k == 1 && !pl->hashed)
        return cast_one_by_one(n, to, 1, type, round, codec, b, vec, vlen);
    return cast_rest(n, to, k, type, round, codec, b, vec, vlen, pl);
}

fed_err fedi_node_broadcast(fed_node *n, const node_cast *to, size_t k, uint8_t type,
                            uint64_t round, uint16_t codec, const fed_wire_block *b,
                            const uint8_t *vec, size_t vlen)
{
    size_t fbytes = fed_wire_frame_bytes(fed_wire_block_bytes(type, b) + vlen), nrest = 0;
    node_cast *rest = NULL;
    cast_payload pl = {.hashed = 0};
    fed_err e, first = FED_OK;

    if (fbytes > fed_wire_config(n->wire)->max_frame) { /* streams: each pulls its own */
        fedi_node_cast_drop_ahead(n);
        return cast_one_by_one(n, to, k, type, round, codec, b, vec, vlen);
    }
    if (n->cast && n->cast->nahead && !ahead_carries(n->cast, type, b, vec, vlen))
        fedi_node_cast_drop_ahead(n); /* sealed with a payload that moved since */
    if (!n->cast || !n->cast->nahead) /* none sealed ahead: all sealed here */
        return cast_sealed_here(n, to, k, type, round, codec, b, vec, vlen, &pl);
    pl = n->cast->pl; /* the rest carry the same payload */
    /* those sealed ahead go now (transmit copies them); the rest are sealed
       together after */
    for (size_t i = 0; i < k; i++) {
        cast_one *o = ahead_find(n->cast, &to[i], type, round);

        e = FED_OK;
        if (o) {
            if ((e = cast_send(n, &to[i], o, type)) == FED_OK)
                n->cast->sent_ahead++;
        } else if (rest || (rest = fed_malloc(k * sizeof *rest)))
            rest[nrest++] = to[i];
        else {
            e = FED_ERR_NOMEM;
            fedi_node_refuse(n, to[i].req);
        }
        if (e != FED_OK && first == FED_OK)
            first = e;
    }
    fedi_node_cast_drop_ahead(n); /* the ones nobody took */
    e = cast_sealed_here(n, rest, nrest, type, round, codec, b, vec, vlen, &pl);
    if (e != FED_OK && first == FED_OK)
        first = e;
    fed_free(rest);
    return first;
}
