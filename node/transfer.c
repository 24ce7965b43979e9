/* transfer.c - MODEL and DELTA vectors larger than one frame, as CHUNK
 * streams (gossip/stream.h): a MODEL reply is the stream's first frame and
 * its recipient pulls each next chunk with a CHUNK PULL request; a DELTA
 * request (or a secure round's masked input, SA_MASKED) is the first frame
 * and its sender pushes each next chunk as a CHUNK request once the
 * previous one was ACKed. Owns the node's outgoing
 * streams (one per recipient, with the last frame kept for a resend) and
 * the buffers it lends the wire for incoming ones; never looks at a vector. */
#include <stddef.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "gossip/stream.h"
#include "node/node_impl.h"

/* Asks the sender of st for its next chunk. */
static FED_WUR fed_err node_pull(fed_node *n, const fed_wire_stream_rx *st);

/* Chunks of at most this many bytes: a stream frame in hand costs one. */
#define NODE_CHUNK_BYTES ((size_t)1 << 20)
/* An incoming stream with no frame for this long is dropped. */
#define NODE_RX_IDLE_MS(n) (4 * ((n)->cfg.transfer.poll_ms + (n)->cfg.transfer.retry_ms))

struct node_tx {
    node_tx *next;
    uint8_t to[32];
    fed_wire_stream_tx *st;
    uint8_t *frame; /* (frame_cap) the last frame made, kept for a resend */
    uint64_t round; /* its header's */
    uint8_t *own;   /* the vector's copy the stream sends (fedi_node_emit_vec_copy), or NULL */
    size_t own_len;
    size_t frame_len;
    uint32_t frame_index; /* its index in the stream */
};

struct node_rx {
    node_rx *next;
    fed_wire_stream_rx *st;
    uint8_t sender[32];
    uint8_t *buf;   /* (total) lent to the wire while the stream lives */
    uint64_t last_ms;
};

/* ---- sending ---- */

static void tx_free(fed_node *n, node_tx *t)
{
    fed_wire_stream_tx_free(n->wire, t->st);
    fed_free(t->frame);
    fed_free(t->own);
    fed_free(t);
}

static node_tx *tx_find(fed_node *n, const uint8_t to[32])
{
    for (node_tx *t = n->txs; t; t = t->next)
        if (!memcmp(t->to, to, 32))
            return t;
    return NULL;
}

void fedi_node_tx_drop(fed_node *n, const uint8_t to[32])
{
    for (node_tx **p = &n->txs; *p; p = &(*p)->next)
        if (!memcmp((*p)->to, to, 32)) {
            node_tx *t = *p;

            *p = t->next;
            tx_free(n, t);
            return;
        }
}

void fedi_node_tx_drop_all(fed_node *n)
{
    while (n->txs) {
        node_tx *t = n->txs;

        n->txs = t->next;
        tx_free(n, t);
    }
}

/* The stream's next frame, sealed with a fresh sequence number, into
 * t->frame. FED_ERR_CLOSED when every frame was made. */
static fed_err tx_make_next(fed_node *n, node_tx *t)
{
    uint32_t index = fed_wire_stream_tx_next_index(t->st);
    uint64_t seq;
    fed_err e;

    if (fed_wire_stream_tx_done(t->st))
        return FED_ERR_CLOSED;
    if ((e = fedi_node_next_seq(n, t->to, &seq)) != FED_OK)
        return e;
    e = fed_wire_stream_tx_next(n->wire, t->st, seq, n->env.random, n->env.self, t->frame,
                                fed_wire_stream_tx_frame_cap(t->st), &t->frame_len);
    if (e == FED_OK)
        t->frame_index = index;
    return e;
}

/* The kept frame again, under a fresh sequence number. */
static fed_err tx_restamp(fed_node *n, node_tx *t)
{
    uint64_t seq;
    fed_err e = fedi_node_next_seq(n, t->to, &seq);

    if (e != FED_OK)
        return e;
    return fed_wire_stream_tx_restamp(n->wire, t->st, t->frame, t->frame_len, seq,
                                      n->env.random, n->env.self);
}

/* A new stream of vec (or of a copy of it) to h->recipient (replacing any
 * earlier one to it). */
static fed_err tx_begin(fed_node *n, const fed_wire_hdr *h, const fed_wire_block *b,
                        const uint8_t *vec, size_t vlen, int copy, node_tx **out)
{
    size_t chunk = fed_wire_stream_chunk_max_for(n->wire, h->type, b);
    node_tx *t;
    fed_err e = FED_OK;

    fedi_node_tx_drop(n, h->recipient);
    if (chunk > NODE_CHUNK_BYTES)
        chunk = NODE_CHUNK_BYTES;
    if (!(t = fed_calloc(1, sizeof *t)))
        return FED_ERR_NOMEM;
    memcpy(t->to, h->recipient, 32);
    t->round = h->round;
    if (copy && !(t->own = fed_malloc(vlen ? vlen : 1)))
        e = FED_ERR_NOMEM;
    else if (copy) {
        vec = memcpy(t->own, vec, vlen);
        t->own_len = vlen;
    }
    if (e == FED_OK)
        e = fed_wire_stream_tx_new(n->wire, h, b, vec, vlen, chunk, n->env.random, n->env.self,
                                   &t->st);
    if (e == FED_OK && !(t->frame = fed_malloc(fed_wire_stream_tx_frame_cap(t->st))))
        e = FED_ERR_NOMEM;
    if (e == FED_OK)
        e = tx_make_next(n, t);
    if (e != FED_OK) {
        tx_free(n, t);
        return e;
    }
    t->next = n->txs;
    n->txs = t;
    *out = t;
    return FED_OK;
}

static fed_err emit_vec(fed_node *n, fed_req *req, fed_wire_hdr *h, const fed_wire_block *b,
                        const uint8_t *vec, size_t vlen, int copy)
{
    size_t payload = fed_wire_block_bytes(h->type, b) + vlen;
    node_tx *t;
    fed_err e;

    if (fed_wire_frame_bytes(payload) <= fed_wire_config(n->wire)->max_frame)
        return fedi_node_emit(n, req, h, b, vec, vlen); /* sealed into txbuf at once */
    if ((e = tx_begin(n, h, b, vec, vlen, copy, &t)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "node: streaming a %s of %zu bytes failed: %s",
                fed_wire_type_name(h->type), vlen, fed_strerror(e));
        fedi_node_refuse(n, req);
        return e;
    }
    return fedi_node_transmit(n, req, t->to, t->frame, t->frame_len);
}

fed_err fedi_node_emit_vec(fed_node *n, fed_req *req, fed_wire_hdr *h, const fed_wire_block *b,
                           const uint8_t *vec, size_t vlen)
{
    return emit_vec(n, req, h, b, vec, vlen, 0);
}

fed_err fedi_node_emit_vec_copy(fed_node *n, fed_req *req, fed_wire_hdr *h,
                                const fed_wire_block *b, const uint8_t *vec, size_t vlen)
{
    return emit_vec(n, req, h, b, vec, vlen, 1);
}

fed_err fedi_node_tx_push(fed_node *n, const uint8_t to[32], int *done)
{
    node_tx *t = tx_find(n, to);
    fed_err e;

    *done = 1;
    if (!t || fed_wire_stream_tx_done(t->st))
        return FED_OK;
    *done = 0;
    if ((e = tx_make_next(n, t)) != FED_OK)
        return e;
    return fedi_node_transmit(n, NULL, t->to, t->frame, t->frame_len);
}

fed_err fedi_node_tx_resend(fed_node *n, const uint8_t to[32])
{
    node_tx *t = tx_find(n, to);
    fed_err e;

    if (!t)
        return FED_ERR_NOTFOUND;
    if ((e = tx_restamp(n, t)) != FED_OK)
        return e;
    return fedi_node_transmit(n, NULL, t->to, t->frame, t->frame_len);
}

int fedi_node_tx_active(fed_node *n, const uint8_t to[32]) { return tx_find(n, to) != NULL; }

int fedi_node_tx_active_round(fed_node *n, const uint8_t to[32], uint64_t round)
{
    const node_tx *t = tx_find(n, to);

    return t && t->round == round;
}

size_t fedi_node_stream_bytes(const fed_node *n)
{
    size_t bytes = 0;

    for (const node_tx *t = n->txs; t; t = t->next)
        bytes += fed_wire_stream_tx_frame_cap(t->st) + t->own_len;
    for (const node_rx *r = n->rxs; r; r = r->next)
        bytes += (size_t)fed_wire_stream_rx_total(r->st);
    return bytes;
}

int fedi_node_tx_sent_all(fed_node *n, const uint8_t to[32])
{
    const node_tx *t = tx_find(n, to);

    return t && fed_wire_stream_tx_done(t->st);
}

/* A recipient asks for chunk i of the stream we send it: the next frame, or
 * the last one again; anything else is answered FED_ERR_STREAM (with
 * NO_ROUND, so it asks for the model anew). */
static fed_err serve_pull(fed_node *n, node_open *op)
{
    const fed_wire_msg *m = &op->msg;
    node_tx *t = tx_find(n, m->hdr.sender);
    uint32_t i = m->block.chunk_index;
    fed_req *req = op->req;
    fed_err e = FED_ERR_STREAM;

    op->req = NULL;
    if (t && fed_wire_stream_tx_id(t->st) == m->block.stream_id) {
        if (i == fed_wire_stream_tx_next_index(t->st) && i > 0)
            e = tx_make_next(n, t);
        else if (i == t->frame_index && i > 0)
            e = tx_restamp(n, t);
    }
    if (e != FED_OK) {
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_STREAM);
        (void)fedi_node_ack(n, req, &m->hdr, FED_ERR_STREAM, FED_WIRE_ACK_NO_ROUND);
        return FED_ERR_STREAM;
    }
    return fedi_node_transmit(n, req, t->to, t->frame, t->frame_len);
}

/* ---- receiving ---- */

static node_rx *rx_find(fed_node *n, const fed_wire_stream_rx *st)
{
    for (node_rx *r = n->rxs; r; r = r->next)
        if (r->st == st)
            return r;
    return NULL;
}

/* A frame of this stream is being opened in a job right now. */
static int rx_busy(const fed_node *n, const node_rx *r)
{
    for (const node_open *op = n->opens; op; op = op->next)
        if (op->ticket.stream == r->st)
            return 1;
    return 0;
}

static void rx_close(fed_node *n, node_rx **p)
{
    node_rx *r = *p;

    *p = r->next;
    fed_wire_stream_close(n->wire, r->st);
    fed_free(r->buf);
    fed_free(r);
}

/* Drops the incoming streams that idled too long, or (sender != NULL) that
 * sender's others: a sender has one stream to us at a time. */
static void rx_sweep(fed_node *n, const uint8_t *sender, const fed_wire_stream_rx *keep)
{
    uint64_t now = n->env.now_ms(n->env.self);

    for (node_rx **p = &n->rxs; *p;) {
        node_rx *r = *p;
        int stale = sender ? r->st != keep && !memcmp(r->sender, sender, 32)
                           : now - r->last_ms > NODE_RX_IDLE_MS(n);

        /* rx_busy first: an open job may be writing the stream's state */
        if (stale && !rx_busy(n, r) && !fed_wire_stream_rx_done(r->st))
            rx_close(n, p);
        else
            p = &r->next;
    }
}

void fedi_node_rx_sweep(fed_node *n) { rx_sweep(n, NULL, NULL); }

void fedi_node_rx_drop_before(fed_node *n, uint64_t round)
{
    for (node_rx **p = &n->rxs; *p;) {
        node_rx *r = *p;

        if (fed_wire_stream_rx_hdr(r->st)->round < round && !rx_busy(n, r) &&
            !fed_wire_stream_rx_done(r->st))
            rx_close(n, p);
        else
            p = &r->next;
    }
}

void fedi_node_rx_free_all(fed_node *n)
{
    while (n->rxs) {
        node_rx *r = n->rxs;

        n->rxs = r->next;
        fed_free(r->buf);
        fed_free(r);
    }
}

/* The wire asks where a stream goes (in the job opening its first frame):
 * a fresh buffer, kept by the frame's node_open until the node takes it. */
static fed_err rx_dst(void *ctx, const fed_wire_msg *first, uint64_t total, uint8_t **dst)
{
    /* the wire fills the node_open's msg (node.c opens every frame so) */
    node_open *op = (node_open *)((char *)first - offsetof(node_open, msg));
    size_t want = 0;
    fed_err e;

    (void)ctx;
    if (first->hdr.type == FED_WIRE_SA_MASKED) {
        /* a masked input: its words of 4 bytes, exactly (a client's
           node expects none: it takes no requests; nor does a plain
           aggregator) */
        if (!op->expect_words)
            return FED_ERR_ROLE;
        if (first->block.sa_count != (uint64_t)op->expect_words ||
            total != (uint64_t)op->expect_words * 4)
            return FED_ERR_SA_MASKED;
        if (!(op->rx_buf = fed_malloc((size_t)total)))
            return FED_ERR_NOMEM;
        *dst = op->rx_buf;
        return FED_OK;
    }
    if ((e = fedi_node_expected_entries(op, &want)) != FED_OK)
        return e;
    /* no codec takes more than 8 bytes an entry (topk at fraction 1) */
    if (total > (uint64_t)want * 8 + 4096)
        return FED_ERR_TOO_LARGE;
    if (!(op->rx_buf = fed_malloc((size_t)total)))
        return FED_ERR_NOMEM;
    *dst = op->rx_buf;
    return FED_OK;
}

void fedi_node_rx_init(fed_node *n) { fed_wire_set_stream_dst(n->wire, rx_dst, n); }

/* In the job, once a stream is complete: op->msg describes the whole MODEL,
 * DELTA or SA_MASKED (first header, typed block, vector, digest, signature). */
void fedi_node_rx_whole_msg(node_open *op)
{
    fed_wire_msg *m = &op->msg;
    const fed_wire_stream_rx *st = m->stream;

    m->hdr = *fed_wire_stream_rx_hdr(st);
    m->header = fed_wire_stream_rx_header(st);
    m->block = *fed_wire_stream_rx_block(st);
    m->vector = fed_wire_stream_rx_dst(st);
    m->vector_len = (size_t)fed_wire_stream_rx_total(st);
    memcpy(m->digest, fed_wire_stream_rx_digest(st), sizeof m->digest);
    memcpy(m->sig, fed_wire_stream_rx_sig(st), sizeof m->sig);
}

/* A frame of a stream passed the wire (on the loop): the stream's record,
 * made at its first frame, when the buffer becomes the node's. */
static fed_err rx_keep(fed_node *n, node_open *op, node_rx **out)
{
    const fed_wire_msg *m = &op->msg;
    node_rx *r = rx_find(n, m->stream);

    if (!r) {
        if (!(r = fed_calloc(1, sizeof *r))) {
            fed_wire_stream_close(n->wire, m->stream); /* the buffer stays op's */
            return FED_ERR_NOMEM;
        }
        r->st = m->stream;
        memcpy(r->sender, fed_wire_stream_rx_sender(m->stream), 32);
        r->buf = op->rx_buf;
        op->rx_buf = NULL;
        r->next = n->rxs;
        n->rxs = r;
        rx_sweep(n, r->sender, r->st);
    }
    r->last_ms = n->env.now_ms(n->env.self);
    *out = r;
    return FED_OK;
}

/* A chunk of an unfinished stream: ACK a pushed one, pull the next one of
 * a reply. */
static fed_err rx_progress(fed_node *n, node_open *op)
{
    const fed_wire_msg *m = &op->msg;
    fed_err e;

    if (op->req) { /* a pushed chunk: taken */
        e = fedi_node_ack(n, op->req, &m->hdr, FED_OK, 0);
        op->req = NULL;
        return e;
    }
    if (n->ops->pulled) /* a client: a chunk of its MODEL came */
        n->ops->pulled(n);
    return node_pull(n, m->stream);
}

static fed_err node_pull(fed_node *n, const fed_wire_stream_rx *st)
{
    const fed_wire_hdr *h0 = fed_wire_stream_rx_hdr(st);
    fed_wire_hdr h;
    fed_wire_block b;
    fed_err e = fedi_node_header(n, FED_WIRE_CHUNK, h0->sender, h0->round, h0->sender_epoch,
                                 FED_CODEC_NONE, &h);

    if (e != FED_OK)
        return e;
    h.flags = FED_WIRE_FLAG_PULL;
    memset(&b, 0, sizeof b);
    b.stream_id = fed_wire_stream_rx_id(st);
    b.chunk_index = fed_wire_stream_rx_next(st);
    return fedi_node_emit(n, NULL, &h, &b, NULL, 0);
}

fed_err fedi_node_repull(fed_node *n, const uint8_t sender[32])
{
    for (node_rx *r = n->rxs; r; r = r->next)
        if (!memcmp(r->sender, sender, 32) && !rx_busy(n, r) && !fed_wire_stream_rx_done(r->st))
            return node_pull(n, r->st);
    return FED_ERR_NOTFOUND;
}

fed_err fedi_node_transfer_on_msg(fed_node *n, node_open *op, int *handled)
{
    const fed_wire_msg *m = &op->msg;

    *handled = 1;
    if (m->hdr.type == FED_WIRE_CHUNK && (m->hdr.flags & FED_WIRE_FLAG_PULL) && op->req)
        return serve_pull(n, op);
    if (m->stream) {
        node_rx *r;
        fed_err e;

        /* clients push DELTAs and masked inputs to the aggregator, which
           answers MODELs; peers push SHAREs to each other */
        if ((op->req != NULL) == n->ops->streams_in_replies) {
            fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
            fed_wire_stream_close(n->wire, m->stream);
            fedi_node_refuse(n, op->req);
            op->req = NULL;
            return FED_ERR_ROLE;
        }
        if ((e = rx_keep(n, op, &r)) != FED_OK) {
            fedi_node_refuse(n, op->req);
            op->req = NULL;
            return e;
        }
        if (!m->stream_done)
            return rx_progress(n, op);
    }
    *handled = 0; /* a whole message: the role's */
    return FED_OK;
}

void fedi_node_transfer_done(fed_node *n, node_open *op)
{
    node_rx **p;

    if (!op->msg.stream || !op->msg.stream_done)
        return;
    for (p = &n->rxs; *p; p = &(*p)->next)
        if ((*p)->st == op->msg.stream) {
            rx_close(n, p);
            return;
        }
    /* whole in its first frame and refused before it was kept: its buffer
       is still op's, freed with it */
    fed_wire_stream_close(n->wire, op->msg.stream);
}
