/* peer_allreduce.c - the peer role's --mixing allreduce: each round, after
 * training, the members (in key order) run one exact all-reduce
 * (gossip/allreduce.h: ring, tree[:K] or butterfly, from cfg.topology) of
 * their models weighted by samples. Each range a step sends goes as a SLICE
 * request (sealed and signed like every frame, a CHUNK stream when larger
 * than a frame), answered by ACK; slices wait in one queue, at most one in
 * flight per recipient, and are sent again after ar_retry_ms until ACKed, so
 * lost frames are made good. A receiver not yet in that round answers BUSY
 * (sent again later), one already past it OK (it had it). Every step has a
 * deadline (cfg.deadline_ms): a member that misses it ends the round with
 * its own model and logs whom it waited for; the rule by which the members
 * agree on whom to leave out and redo the round is not built yet. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "node/peer_impl.h"

struct ar_out {
    uint8_t to[32];  /* the recipient's key: the member list may be rebuilt (a
                        reload, a member expired) while a slice waits */
    uint64_t round, step;
    uint8_t *vec;    /* the encoded range (f64), owned */
    size_t len;
    int inflight;    /* sent, no ACK yet */
};

static uint64_t retry_ms(const fed_node *n)
{
    uint64_t r = n->cfg.deadline_ms / 20;

    if (r < 10)
        r = 10;
    return n->cfg.retry_ms && n->cfg.retry_ms < r ? n->cfg.retry_ms : r;
}

void fed_node_peer_ar_free(node_mesh *p)
{
    for (size_t i = 0; i < p->ar_nq; i++)
        fed_free(p->ar_q[i].vec);
    fed_free(p->ar_q);
    fed_free(p->ar_buf);
    fed_gossip_ar_member_free(p->ar);
    p->ar_q = NULL;
    p->ar_nq = p->ar_capq = 0;
    p->ar = NULL;
}

static void drop_entry(node_mesh *p, size_t i)
{
    fed_free(p->ar_q[i].vec);
    memmove(&p->ar_q[i], &p->ar_q[i + 1], (p->ar_nq - i - 1) * sizeof *p->ar_q);
    p->ar_nq--;
}

static fed_err emit(fed_node *n, const ar_out *o)
{
    fed_wire_hdr h;
    fed_wire_block b;
    fed_err e;

    /* addressed to any epoch (0): a restarted member holds no all-reduce a
       replayed slice could enter (gossip/wire.h) */
    if ((e = fed_node_header(n, FED_WIRE_SLICE, o->to, o->round, 0, FED_CODEC_F64, &h)) !=
        FED_OK)
        return e;
    memset(&b, 0, sizeof b);
    b.step = o->step;
    return fed_node_emit_vec(n, NULL, &h, &b, o->vec, o->len);
}

/* Sends the first slice waiting for each recipient with none in flight. */
static void pump(fed_node *n)
{
    node_mesh *p = n->mesh;
    int any = 0;

    for (size_t i = 0; i < p->ar_nq; i++) {
        ar_out *o = &p->ar_q[i];
        int busy = 0;

        for (size_t j = 0; j < i && !busy; j++)
            busy = !memcmp(p->ar_q[j].to, o->to, 32);
        if (!busy && !o->inflight) {
            fed_err e = emit(n, o);

            if (e != FED_OK)
                fed_log(FED_LOG_WARN, "peer: slice of round %llu step %llu to member %zu: %s "
                        "(sent again later)", (unsigned long long)o->round,
                        (unsigned long long)o->step, fed_node_peer_member_of(p, o->to),
                        fed_strerror(e));
            o->inflight = 1;
        }
        any = 1;
    }
    if (any)
        (void)fed_node_arm_in(n, retry_ms(n), NODE_TIMER_RETRY);
}

/* The current step's sends into the queue. */
static fed_err queue_sends(fed_node *n)
{
    node_mesh *p = n->mesh;
    fed_codec f64 = {.id = FED_CODEC_F64};
    size_t ns = fed_gossip_ar_member_nsend(p->ar);

    for (size_t i = 0; i < ns; i++) {
        fed_gossip_ar_xfer x;
        const double *d;
        size_t need = 0, len = 0;
        ar_out *o;
        fed_err e;

        if ((e = fed_gossip_ar_member_send(p->ar, i, &x, &d)) != FED_OK ||
            (e = fed_codec_size(&f64, x.len, &need)) != FED_OK)
            return e;
        if (p->ar_nq == p->ar_capq) {
            size_t cap = p->ar_capq ? 2 * p->ar_capq : 16;
            ar_out *q = fed_realloc(p->ar_q, cap * sizeof *q);

            if (!q)
                return FED_ERR_NOMEM;
            p->ar_q = q;
            p->ar_capq = cap;
        }
        o = &p->ar_q[p->ar_nq];
        memset(o, 0, sizeof *o);
        if (!(o->vec = fed_malloc(need)))
            return FED_ERR_NOMEM;
        if ((e = fed_codec_encode_f64(d, x.len, o->vec, need, &len)) != FED_OK) {
            fed_free(o->vec);
            return e;
        }
        memcpy(o->to, p->mem[x.peer].key, 32);
        o->round = n->round + 1;
        o->step = fed_gossip_ar_member_step(p->ar);
        o->len = len;
        p->ar_nq++;
    }
    return FED_OK;
}

/* The mean in, the run over, the round recorded. */
static fed_err finish(fed_node *n, int complete)
{
    node_mesh *p = n->mesh;
    const double *sums = fed_gossip_ar_member_sums(p->ar);
    double w = sums[p->dim];

    if (complete) {
        for (size_t i = 0; i < p->dim; i++)
            p->ar_buf[i] = sums[i] / w;
        fed_gossip_ps_set(p->ps, p->ar_buf, 1.0); /* estimate = the mean, bit for bit */
        p->ar_merged = p->n - 1;
    } else {
        p->ar_merged = 0; /* its own model goes on */
    }
    fed_gossip_ar_member_free(p->ar);
    p->ar = NULL;
    return fed_node_peer_finish_round(n);
}

/* Sends each step's ranges, applies the receives that are in, step after
 * step, until one is missing or the run is done. */
static fed_err progress(fed_node *n)
{
    node_mesh *p = n->mesh;
    fed_err e = FED_OK;

    while (p->ar) {
        uint32_t s = fed_gossip_ar_member_step(p->ar);

        if (fed_gossip_ar_member_done(p->ar)) {
            pump(n);
            return finish(n, 1);
        }
        if (p->ar_sent <= s) {
            if ((e = queue_sends(n)) != FED_OK)
                break;
            p->ar_sent = s + 1;
            if ((e = fed_node_arm_in(n, n->cfg.deadline_ms, NODE_TIMER_DEADLINE)) != FED_OK)
                break;
        }
        if (!fed_gossip_ar_member_ready(p->ar))
            break;
        if ((e = fed_gossip_ar_member_advance(p->ar)) != FED_OK)
            break;
    }
    pump(n);
    return e;
}

fed_err fed_node_peer_ar_begin(fed_node *n)
{
    node_mesh *p = n->mesh;
    double weight = p->samples ? (double)p->samples : 1.0;
    fed_err e;

    /* slices of rounds before the last are of no use to anyone now */
    for (size_t i = p->ar_nq; i-- > 0;)
        if (p->ar_q[i].round + 1 < n->round + 1)
            drop_entry(p, i);
    if ((e = fed_gossip_ar_plan_init(&p->ar_plan, n->cfg.topology, (uint32_t)p->n, p->dim)) !=
        FED_OK)
        return e;
    if (!p->ar_buf && !(p->ar_buf = fed_malloc((p->dim + 1) * sizeof *p->ar_buf)))
        return FED_ERR_NOMEM;
    fed_gossip_ps_estimate_f64(p->ps, p->ar_buf); /* the trained model, in double */
    if ((e = fed_gossip_ar_member_new(&p->ar_plan, (uint32_t)p->self, p->ar_buf, weight,
                                      &p->ar)) != FED_OK)
        return e;
    p->ar_sent = 0;
    p->state = MESH_WAITING;
    return progress(n);
}

static fed_err answer(fed_node *n, node_open *op, fed_err status)
{
    /* the step goes back with the ACK: a late ACK of a resent copy of an
       earlier step must not end the slice now in flight (gossip/wire.h) */
    fed_err e = fed_node_ack(n, op->req, &op->msg.hdr, status,
                             FED_WIRE_ACK_STEP(op->msg.block.step));

    op->req = NULL;
    return e;
}

fed_err fed_node_peer_ar_on_slice(fed_node *n, node_open *op)
{
    node_mesh *p = n->mesh;
    const fed_wire_msg *m = &op->msg;
    size_t k = fed_node_peer_member_of(p, m->hdr.sender);
    uint64_t cur = n->round + 1;
    int fresh = 0;
    fed_err e;

    if (p->mix != MIX_ALLREDUCE || k == SIZE_MAX || k == p->self || !op->vec64) {
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        (void)answer(n, op, FED_ERR_ROLE);
        return FED_ERR_ROLE;
    }
    if (m->hdr.round > p->mem[k].seen_round)
        p->mem[k].seen_round = m->hdr.round;
    if (m->hdr.round < cur) /* it was in the round this node finished, or is late */
        return answer(n, op, m->hdr.round + 1 == cur ? FED_OK : FED_ERR_LATE);
    if (m->hdr.round > cur || !p->ar) /* not there yet: asked again later */
        return answer(n, op, FED_ERR_BUSY);
    e = m->block.step > UINT32_MAX
            ? FED_ERR_ROLE /* checked before it is cut to 32 bits */
            : fed_gossip_ar_member_receive(p->ar, (uint32_t)k, (uint32_t)m->block.step,
                                           op->vec64, op->vec_n, &fresh);
    if (e != FED_OK) {
        fed_wire_note_reject(n->wire, &m->hdr, e);
        fed_log(FED_LOG_WARN, "peer: slice of round %llu step %llu from member %zu refused: %s",
                (unsigned long long)m->hdr.round, (unsigned long long)m->block.step, k,
                fed_strerror(e));
    }
    (void)answer(n, op, e);
    if (e == FED_OK && fresh)
        return progress(n);
    return e;
}

int fed_node_peer_ar_on_ack(fed_node *n, const fed_wire_msg *m, fed_err *out)
{
    node_mesh *p = n->mesh;
    size_t k = fed_node_peer_member_of(p, m->hdr.sender), i;
    fed_err status = (fed_err)m->block.status;

    *out = FED_OK;
    for (i = 0; i < p->ar_nq; i++)
        if (!memcmp(p->ar_q[i].to, m->hdr.sender, 32))
            break;
    if (k == SIZE_MAX || i == p->ar_nq || !p->ar_q[i].inflight || p->ar_q[i].round != m->hdr.round)
        return 0;
    if ((m->block.ack_flags & FED_WIRE_ACK_STEP_MASK) &&
        (m->block.ack_flags & FED_WIRE_ACK_STEP_MASK) != FED_WIRE_ACK_STEP(p->ar_q[i].step))
        return 1; /* the ACK of an earlier step's resent copy: not this slice's */
    if (status == FED_OK && fed_node_tx_active(n, m->hdr.sender)) {
        int done = 1;

        *out = fed_node_tx_push(n, m->hdr.sender, &done);
        if (!done || *out != FED_OK)
            return 1; /* the next chunk is out (or the retry sends it again) */
    }
    fed_node_tx_drop(n, m->hdr.sender);
    if (status == FED_ERR_BUSY) {
        p->ar_q[i].inflight = 0; /* sent again at the retry */
        return 1;
    }
    if (status != FED_OK)
        fed_log(FED_LOG_WARN, "peer: member %zu refused our slice of round %llu step %llu: %s",
                k, (unsigned long long)p->ar_q[i].round, (unsigned long long)p->ar_q[i].step,
                fed_strerror(status));
    drop_entry(p, i);
    pump(n);
    return 1;
}

fed_err fed_node_peer_ar_on_retry(fed_node *n)
{
    node_mesh *p = n->mesh;

    for (size_t i = 0; i < p->ar_nq; i++) {
        ar_out *o = &p->ar_q[i];

        if (!o->inflight)
            continue;
        if (fed_node_tx_active(n, o->to)) {
            if (fed_node_tx_resend(n, o->to) != FED_OK)
                o->inflight = 0;
        } else {
            o->inflight = 0; /* the whole slice again, with a fresh sequence */
        }
    }
    pump(n);
    return FED_OK;
}

fed_err fed_node_peer_ar_on_deadline(fed_node *n)
{
    node_mesh *p = n->mesh;
    char who[128];
    size_t at = 0;

    if (!p->ar)
        return FED_OK;
    who[0] = 0;
    for (size_t k = 0; k < p->n && at + 12 < sizeof who; k++)
        if (fed_gossip_ar_member_waits_for(p->ar, (uint32_t)k))
            at += (size_t)snprintf(who + at, sizeof who - at, " %zu", k);
    fed_log(FED_LOG_WARN, "peer: all-reduce of round %llu stalled at step %u waiting for "
            "member(s)%s: the round ends with this member's own model",
            (unsigned long long)(n->round + 1), fed_gossip_ar_member_step(p->ar), who);
    return finish(n, 0);
}
