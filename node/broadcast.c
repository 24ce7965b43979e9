/* broadcast.c - one typed block and vector sent to many recipients at
 * once (the aggregator's MODEL to a round's clients): every frame is
 * sealed on the pool first, then all are sent. Sealing is nearly all of
 * the work (a BLAKE2b and an AEAD pass over the vector per recipient), and
 * made one by one on the loop thread it lets the first clients start
 * training while the last ones still wait, competing with them for the
 * cores; sealed together, every recipient starts within a few ms of the
 * others. Owns the frame buffers it keeps between broadcasts; the wire's
 * sequence numbers, sessions and nonces are still drawn on the loop
 * thread, in recipient order, exactly as one fed_node_emit each would. */
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "node/node_impl.h"

/* Frames sealed together: at most this many, holding at most this many
 * bytes (at least one frame); past either a broadcast goes out in batches. */
#define NODE_CAST_MAX_FRAMES 64
#define NODE_CAST_BYTES ((size_t)64 << 20)

struct node_cast_buf {
    uint8_t **frames; /* (nframes) each cap bytes */
    size_t nframes, cap;
};

/* One frame of a batch: the ticket made on the loop, sealed on the pool. */
typedef struct cast_one {
    fed_wire_ticket t;
    uint8_t nonce[24]; /* drawn on the loop thread, in order */
    size_t len;        /* out: the sealed frame's bytes */
    fed_err err;       /* out */
    int ready;         /* the ticket was made */
} cast_one;

typedef struct cast_batch {
    fed_node *n;
    const fed_wire_block *b;
    const uint8_t *vec;
    size_t vlen;
    cast_one *one;
    uint8_t **frames;
} cast_batch;

void fed_node_cast_free(fed_node *n)
{
    node_cast_buf *c = n->cast;

    if (!c)
        return;
    for (size_t i = 0; i < c->nframes; i++)
        fed_free(c->frames[i]);
    fed_free(c->frames);
    fed_free(c);
    n->cast = NULL;
}

/* At least want frames of cap bytes each. */
static fed_err cast_reserve(fed_node *n, size_t want, size_t cap)
{
    node_cast_buf *c = n->cast;
    uint8_t **f;

    if (!c) {
        if (!(c = fed_calloc(1, sizeof *c)))
            return FED_ERR_NOMEM;
        n->cast = c;
    }
    if (cap > c->cap) { /* a larger vector than before: every frame again */
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

/* Pool piece i: block and vector into frame i, sealed. */
static void cast_seal(void *ctx, size_t i)
{
    cast_batch *cb = ctx;
    cast_one *o = &cb->one[i];
    uint8_t *payload = fed_wire_payload(cb->frames[i]);
    size_t blen = 0;

    if (!o->ready)
        return;
    o->err = fed_wire_block_encode(o->t.hdr.type, cb->b, payload, o->t.hdr.payload_len, &blen);
    if (o->err == FED_OK && blen + cb->vlen != o->t.hdr.payload_len)
        o->err = FED_ERR_INTERNAL;
    if (o->err != FED_OK)
        return;
    if (cb->vlen)
        memcpy(payload + blen, cb->vec, cb->vlen);
    o->err = fed_wire_seal_ticket(cb->n->wire, &o->t, cb->frames[i], cast_nonce, o, &o->len);
}

/* Loop thread: header, sequence, session and nonce of frame i. */
static fed_err cast_prepare(fed_node *n, const node_cast *to, uint8_t type, uint64_t round,
                            uint16_t codec, size_t payload_len, cast_one *o)
{
    fed_wire_hdr h;
    fed_err e = fed_node_header(n, type, to->to, round, to->recipient_epoch, codec, &h);

    if (e == FED_OK)
        e = fed_wire_seal_prepare(n->wire, &h, n->cast->cap, payload_len, &o->t);
    if (e != FED_OK)
        return e;
    n->env.random(n->env.self, o->nonce, sizeof o->nonce);
    o->ready = 1;
    return FED_OK;
}

static fed_err cast_batch_send(fed_node *n, const node_cast *to, size_t k, uint8_t type,
                               uint64_t round, uint16_t codec, const fed_wire_block *b,
                               const uint8_t *vec, size_t vlen, cast_one *one)
{
    size_t payload_len = fed_wire_block_size(type) + vlen;
    cast_batch cb = {n, b, vec, vlen, one, n->cast->frames};
    fed_err first = FED_OK;

    memset(one, 0, k * sizeof *one);
    for (size_t i = 0; i < k; i++)
        one[i].err = cast_prepare(n, &to[i], type, round, codec, payload_len, &one[i]);
    fed_pool_parallel_for(n->cfg.pool, k, cast_seal, &cb);
    for (size_t i = 0; i < k; i++) {
        fed_err e = one[i].err;

        if (one[i].ready)
            fed_wire_seal_done(n->wire, &one[i].t, e);
        if (e == FED_OK) {
            e = fed_node_transmit(n, to[i].req, to[i].to, cb.frames[i], one[i].len);
        } else {
            fed_log(FED_LOG_ERROR, "node: sealing a %s frame failed: %s",
                    fed_wire_type_name(type), fed_strerror(e));
            fed_node_refuse(n, to[i].req);
        }
        if (e != FED_OK && first == FED_OK)
            first = e;
    }
    return first;
}

fed_err fed_node_broadcast(fed_node *n, const node_cast *to, size_t k, uint8_t type,
                           uint64_t round, uint16_t codec, const fed_wire_block *b,
                           const uint8_t *vec, size_t vlen)
{
    size_t payload_len = fed_wire_block_size(type) + vlen;
    size_t fbytes = fed_wire_frame_bytes(payload_len), batch;
    cast_one *one = NULL;
    fed_err e, first = FED_OK;

    if (k == 0)
        return FED_OK;
    if (fbytes > fed_wire_config(n->wire)->max_frame || k == 1) {
        /* a stream (each recipient pulls its own), or nothing to overlap */
        for (size_t i = 0; i < k; i++) {
            fed_wire_hdr h;

            e = fed_node_header(n, type, to[i].to, round, to[i].recipient_epoch, codec, &h);
            if (e == FED_OK)
                e = fed_node_emit_vec(n, to[i].req, &h, b, vec, vlen);
            else
                fed_node_refuse(n, to[i].req);
            if (e != FED_OK && first == FED_OK)
                first = e;
        }
        return first;
    }
    batch = NODE_CAST_BYTES / fbytes;
    batch = batch == 0 ? 1 : batch > NODE_CAST_MAX_FRAMES ? NODE_CAST_MAX_FRAMES : batch;
    batch = batch > k ? k : batch;
    if ((e = cast_reserve(n, batch, fbytes)) != FED_OK ||
        !(one = fed_malloc(batch * sizeof *one))) {
        e = e != FED_OK ? e : FED_ERR_NOMEM;
        for (size_t i = 0; i < k; i++)
            fed_node_refuse(n, to[i].req);
        goto out;
    }
    for (size_t i = 0; i < k; i += batch) {
        size_t m = k - i < batch ? k - i : batch;

        e = cast_batch_send(n, to + i, m, type, round, codec, b, vec, vlen, one);
        if (e != FED_OK && first == FED_OK)
            first = e;
    }
    e = first;
out:
    fed_free(one);
    return e;
}
