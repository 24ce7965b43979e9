/* peer_allreduce.c - the peer role's --mixing allreduce: each round, after
 * training, the members (in key order) run one exact all-reduce
 * (gossip/allreduce.h: ring, tree[:K] or butterfly, from cfg.peer.topology) of
 * their models weighted by samples. Each range a step sends goes as a SLICE
 * request (sealed and signed like every frame, a CHUNK stream when larger
 * than a frame), answered by ACK; slices wait in one queue
 * (peer_ar_queue.c), at most one in flight per recipient, and are sent
 * again until ACKed, so lost frames are made good. A receiver not yet in that round or attempt
 * answers BUSY (sent again later), one already past it OK (it had it).
 *
 * The fault rule (docs/DESIGN.md, "All-reduce faults"): a round is a run of
 * attempts over shrinking member sets. Every step has a deadline
 * (cfg.deadline_ms); a member that misses it gives the attempt up, leaves
 * out the members it waited for, and tells every member so in an AR_ABORT
 * naming whom it leaves out; a member that hears an abort of its attempt
 * gives it up too and passes on the union it knows. For one deadline after
 * it gave up, a member adds every abort of that attempt it hears; then it
 * starts the next attempt over the members no abort named. A member that
 * finished an attempt hashes its result with the members' keys and passes
 * the hash in AR_VERIFY to the members 1, 2, 4, ... after it in the ring
 * (the first its ring neighbour), with a row: how many members in a row,
 * ending with the sender, finished with that hash; rows double each hop, a
 * member whose row spans the attempt takes the mean (every member holds
 * it) and says so to the same members; a hash unlike its own gives the
 * attempt up, leaving out its sender; a verification that has not
 * come round steps + 1 deadlines after the run ended here (every member
 * began before that, so one stalled anywhere has given up and its abort
 * has come), with no abort heard, takes the mean too (every member
 * finished with it; a dead one broke the row). Step s is due s + 1 deadlines after the attempt began, so the
 * member stalled nearest a dead one gives up a deadline before those
 * stalled behind it, and its abort reaches them first. A member named
 * in an abort ends the round with its own model and is back at the next:
 * every round starts over all members. With cfg.peer.group_size the round's
 * members are this member's group of the grid (fed_gossip_ar_group), and
 * all of the above is the group's. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "node/peer_impl.h"
#include "node/test_hooks.h"

enum { AR_RUN = 1, AR_VERIFY, AR_ABORT };

void fedi_node_peer_ar_free(node_mesh *p)
{
    fedi_node_peer_arq_free(p);
    fed_free(p->ar_buf);
    fed_free(p->ar_left);
    fed_free(p->ar_grp);
    fed_free(p->ar_ids);
    fed_free(p->ar_rank);
    fed_gossip_ar_member_free(p->ar);
    p->ar_capn = 0;
    p->ar = NULL;
    p->ar_left = p->ar_grp = NULL;
    p->ar_ids = p->ar_rank = NULL;
}

/* The current step's sends into the queue, ranks turned into members. */
static fed_err queue_sends(fed_node *n)
{
    node_mesh *p = n->mesh;
    fed_codec f64 = {.id = FED_CODEC_F64};
    size_t ns = fed_gossip_ar_member_nsend(p->ar);

    for (size_t i = 0; i < ns; i++) {
        fed_gossip_ar_xfer x;
        fed_wire_block b;
        const double *d;
        size_t need = 0, len = 0;
        uint8_t *vec;
        fed_err e;

        if ((e = fed_gossip_ar_member_send(p->ar, i, &x, &d)) != FED_OK ||
            (e = fed_codec_size(&f64, x.len, &need)) != FED_OK)
            return e;
        if (!(vec = fed_malloc(need)))
            return FED_ERR_NOMEM;
        if ((e = fed_codec_encode_f64(d, x.len, vec, need, &len)) != FED_OK) {
            fed_free(vec);
            return e;
        }
        memset(&b, 0, sizeof b);
        b.step = (uint64_t)p->ar_attempt << 32 | fed_gossip_ar_member_step(p->ar);
        if ((e = fedi_node_peer_arq_put(p, FED_WIRE_SLICE, p->mem[p->ar_ids[x.peer]].key, n->round + 1, &b, vec,
                         len, FED_CODEC_F64)) != FED_OK)
            return e;
    }
    return FED_OK;
}

/* The round over: the mean in (complete), or this member's own model. */
static fed_err finish(fed_node *n, int complete)
{
    node_mesh *p = n->mesh;

    if (complete) { /* ar_buf holds the sums verify_begin hashed */
        double w = p->ar_buf[p->dim];

        for (size_t i = 0; i < p->dim; i++)
            p->ar_buf[i] /= w;
        fed_gossip_ps_set(p->ps, p->ar_buf, 1.0); /* estimate = the mean, bit for bit */
        p->ar_merged = p->ar_nids - 1;
        p->ar_carry = w;
    } else {
        p->ar_merged = 0; /* its own model goes on */
    }
    fed_gossip_ar_member_free(p->ar);
    p->ar = NULL;
    p->ar_phase = 0;
    return fedi_node_peer_finish_round(n);
}

/* An AR_ABORT naming every member of the group left out, to every member
 * of the group but this one (those left out too: they learn they are
 * out). */
static fed_err send_aborts(fed_node *n)
{
    node_mesh *p = n->mesh;
    size_t cnt = 0;
    fed_wire_block b;
    fed_err e = FED_OK;

    for (size_t k = 0; k < p->n; k++)
        cnt += p->ar_grp[k] && p->ar_left[k];
    memset(&b, 0, sizeof b);
    b.attempt = p->ar_attempt;
    b.count = (uint32_t)cnt;
    for (size_t k = 0; k < p->n && e == FED_OK; k++) {
        uint8_t *keys = NULL;
        size_t at = 0;

        if (k == p->self || !p->ar_grp[k])
            continue;
        if (cnt && !(keys = fed_malloc(cnt * 32)))
            return FED_ERR_NOMEM;
        for (size_t j = 0; j < p->n; j++)
            if (p->ar_grp[j] && p->ar_left[j]) {
                memcpy(keys + at, p->mem[j].key, 32);
                at += 32;
            }
        e = fedi_node_peer_arq_put(p, FED_WIRE_AR_ABORT, p->mem[k].key, n->round + 1, &b, keys, at,
                    FED_CODEC_NONE);
    }
    return e;
}

/* The attempt given up: its frames dropped, the abort told, the window
 * (one deadline) for the others' open. */
static fed_err give_up(fed_node *n)
{
    node_mesh *p = n->mesh;
    fed_err e;

    fed_gossip_ar_member_free(p->ar);
    p->ar = NULL;
    p->ar_phase = AR_ABORT;
    fedi_node_peer_arq_drop_round(n);
    if ((e = send_aborts(n)) != FED_OK)
        return e;
    fedi_node_peer_arq_pump(n);
    return fedi_node_arm_in(n, n->cfg.deadline_ms, NODE_TIMER_DEADLINE);
}

/* A row to a ring neighbour (an AR_VERIFY waiting for it, not yet sent, is
 * brought up to date instead). */
static fed_err send_row(fed_node *n, uint32_t to, uint64_t row)
{
    node_mesh *p = n->mesh;
    fed_wire_block b;

    for (size_t i = 0; i < p->ar_nq; i++) {
        ar_out *o = &p->ar_q[i];

        if (o->type == FED_WIRE_AR_VERIFY && !o->inflight && o->round == n->round + 1 &&
            !memcmp(o->to, p->mem[to].key, 32)) {
            o->b.in_row = row;
            return FED_OK;
        }
    }
    memset(&b, 0, sizeof b);
    b.attempt = p->ar_attempt;
    b.in_row = row;
    memcpy(b.result_hash, p->ar_hash, 32);
    return fedi_node_peer_arq_put(p, FED_WIRE_AR_VERIFY, p->mem[to].key, n->round + 1, &b, NULL, 0,
                   FED_CODEC_NONE);
}

/* The row grown from what members 2^k before said (k = 0: the ring
 * neighbour): a member that knows the 2^k members ending with it finished
 * with its hash, told that the r ending 2^k before it did, knows 2^k + r;
 * a row that spans the attempt (from anyone) is the whole. Then the row to
 * members 2^k after it, for each 2^k it covers (once), and the whole to all
 * of them; a hash unlike ours gives the attempt up; the whole takes the
 * mean. Rows double each hop: ceil(log2 n) hops in lockstep. */
static fed_err verify_step(fed_node *n)
{
    node_mesh *p = n->mesh;
    uint32_t me = p->ar_rank[p->self], nn = p->ar_nids;
    uint32_t levels = fed_gossip_ar_row_levels(nn);
    uint8_t same[32];
    uint64_t row;
    fed_err e;

    for (uint32_t k = 0; k < levels; k++)
        same[k] = !p->ar_rx[k] || !memcmp(p->ar_rx_hash[k], p->ar_hash, 32);
    if (!(row = fed_gossip_ar_row(nn, p->ar_row, p->ar_rx, same))) {
        for (uint32_t k = 0; k < levels; k++)
            if (!same[k]) { /* which of the two is wrong, neither can tell: the
                               one that told it is left out, and it leaves this
                               one out in turn (the redo runs without either) */
                uint32_t who = p->ar_ids[(me + nn - (uint32_t)(1ull << k)) % nn];

                p->ar_left[who] = 1;
                fed_log(FED_LOG_WARN, "peer: all-reduce of round %llu attempt %u: member %u "
                        "holds another result: redone without it",
                        (unsigned long long)(n->round + 1), p->ar_attempt, who);
            }
        return give_up(n);
    }
    p->ar_row = row;
    for (uint32_t k = 0; k < levels; k++) {
        uint64_t d = 1ull << k;

        if ((row >= d && !p->ar_tx[k]) || (row >= nn && p->ar_tx[k] < nn)) {
            p->ar_tx[k] = row;
            if ((e = send_row(n, p->ar_ids[(me + d) % nn], row)) != FED_OK)
                return e;
        }
    }
    fedi_node_peer_arq_pump(n);
    return row >= nn ? finish(n, 1) : FED_OK;
}

/* The run done: its result (the sums, into ar_buf, where finish takes the
 * mean from; a test's ar_tamper hook may change them) hashed with the
 * members' keys, the verification begun. It has until a deadline after the
 * last step's deadline of any member (by then a member stalled anywhere has
 * given up and its abort has come) to come round. */
static fed_err verify_begin(fed_node *n)
{
    node_mesh *p = n->mesh;
    size_t nk = (size_t)p->ar_nids * 32, len = nk + (p->dim + 1) * 8;
    uint8_t *buf = fed_malloc(len);
    uint64_t end;
    fed_err e;

    if (!buf)
        return FED_ERR_NOMEM;
    memcpy(p->ar_buf, fed_gossip_ar_member_sums(p->ar), (p->dim + 1) * sizeof *p->ar_buf);
    if (n->cfg.hooks && n->cfg.hooks->ar_tamper)
        n->cfg.hooks->ar_tamper(n->cfg.hooks->ctx, n->round + 1, p->ar_attempt, p->ar_buf,
                                p->dim + 1);
    for (uint32_t r = 0; r < p->ar_nids; r++)
        memcpy(buf + (size_t)r * 32, p->mem[p->ar_ids[r]].key, 32);
    fed_put_f64le_n(buf + nk, p->ar_buf, p->dim + 1);
    fed_crypto_model_hash(buf, len, p->ar_hash);
    fed_free(buf);
    p->ar_phase = AR_VERIFY;
    p->ar_row = 0;
    memset(p->ar_tx, 0, sizeof p->ar_tx);
    /* every member's vector is in this result, so every member began the
       attempt by now, and one that stalls gives up by its last step's
       deadline, at most `steps` deadlines from now: its abort has come a
       deadline after that */
    end = n->env.now_ms(n->env.self) + (uint64_t)(fed_gossip_ar_steps(&p->ar_plan) + 1) *
                                           n->cfg.deadline_ms;
    if (end < p->ar_t0 + (uint64_t)(fed_gossip_ar_steps(&p->ar_plan) + 2) * n->cfg.deadline_ms)
        end = p->ar_t0 + (uint64_t)(fed_gossip_ar_steps(&p->ar_plan) + 2) * n->cfg.deadline_ms;
    if ((e = fedi_node_arm(n, end, NODE_TIMER_DEADLINE)) != FED_OK)
        return e;
    return verify_step(n);
}

/* Sends each step's ranges, applies the receives that are in, step after
 * step, until one is missing or the run is done. */
static fed_err progress(fed_node *n)
{
    node_mesh *p = n->mesh;
    fed_err e = FED_OK;

    while (p->ar && p->ar_phase == AR_RUN) {
        uint32_t s = fed_gossip_ar_member_step(p->ar);

        if (fed_gossip_ar_member_done(p->ar)) {
            fedi_node_peer_arq_pump(n);
            return verify_begin(n);
        }
        if (p->ar_sent <= s) {
            if ((e = queue_sends(n)) != FED_OK)
                break;
            p->ar_sent = s + 1;
            /* step s is due (s + 1) deadlines after the attempt began: the
               member stalled nearest a dead one gives up first, a deadline
               before those stalled behind it */
            if ((e = fedi_node_arm(n, p->ar_t0 + (uint64_t)(s + 1) * n->cfg.deadline_ms,
                                   NODE_TIMER_DEADLINE)) != FED_OK)
                break;
        }
        if (!fed_gossip_ar_member_ready(p->ar))
            break;
        if ((e = fed_gossip_ar_member_advance(p->ar)) != FED_OK)
            break;
    }
    fedi_node_peer_arq_pump(n);
    return e;
}

/* An attempt over the members no abort named. */
static fed_err start_attempt(fed_node *n)
{
    node_mesh *p = n->mesh;
    uint64_t round = n->round + 1;
    /* a trained model stands for its samples; in groups, a mean for the
       weight of what it averaged (the grid's exactness rests on it) */
    double weight = p->samples ? (double)p->samples : n->cfg.peer.group_size ? p->ar_carry : 1.0;
    fed_err e;

    for (size_t k = 0; k < p->n; k++) /* (groups: another group's member may be a round
                                          ahead by right; two rounds is left behind; so
                                          may a member left out of this round) */
        if (k != p->self && !p->ar_left[k] &&
            p->mem[k].seen_round > round + (n->cfg.peer.group_size ? 1 : 0)) {
            fed_log(FED_LOG_WARN, "peer: all-reduce of round %llu: member %zu is at round %llu "
                    "already: this round ends with this member's own model, it rejoins there",
                    (unsigned long long)round, k, (unsigned long long)p->mem[k].seen_round);
            return finish(n, 0);
        }
    p->ar_nids = 0;
    for (size_t k = 0; k < p->n; k++) {
        int in = p->ar_grp[k] && !p->ar_left[k];

        p->ar_rank[k] = in ? p->ar_nids : UINT32_MAX;
        if (in)
            p->ar_ids[p->ar_nids++] = (uint32_t)k;
    }
    if (p->ar_left[p->self] || p->ar_nids < 2 || p->ar_attempt > p->n) {
        fed_log(FED_LOG_WARN, "peer: all-reduce of round %llu: %s: the round ends with this "
                "member's own model", (unsigned long long)round,
                p->ar_left[p->self] ? "the others left this member out"
                : p->ar_nids < 2    ? "no other member is left"
                                    : "too many attempts");
        return finish(n, 0);
    }
    if (p->ar_attempt)
        fed_log(FED_LOG_INFO, "peer: all-reduce of round %llu redone (attempt %u) over %u "
                "members", (unsigned long long)round, p->ar_attempt, p->ar_nids);
    if ((e = fed_gossip_ar_plan_init(&p->ar_plan, n->cfg.peer.topology, p->ar_nids, p->dim)) != FED_OK)
        return e;
    fed_gossip_ps_estimate_f64(p->ps, p->ar_buf); /* the trained model, in double */
    if ((e = fed_gossip_ar_member_new(&p->ar_plan, p->ar_rank[p->self], p->ar_buf, weight,
                                      &p->ar)) != FED_OK)
        return e;
    p->ar_sent = 0;
    p->ar_t0 = n->env.now_ms(n->env.self);
    p->ar_row = 0;
    memset(p->ar_rx, 0, sizeof p->ar_rx);
    memset(p->ar_tx, 0, sizeof p->ar_tx);
    p->ar_phase = AR_RUN;
    return progress(n);
}

fed_err fedi_node_peer_ar_begin(fed_node *n)
{
    node_mesh *p = n->mesh;

    /* frames of rounds before the last are of no use to anyone now */
    for (size_t i = p->ar_nq; i-- > 0;)
        if (p->ar_q[i].round + 1 < n->round + 1)
            fedi_node_peer_arq_drop(p, i);
    uint32_t cnt = 0;
    fed_err e;

    if (p->ar_capn < p->n) {
        fed_free(p->ar_left);
        fed_free(p->ar_grp);
        fed_free(p->ar_ids);
        fed_free(p->ar_rank);
        p->ar_left = fed_calloc(p->n, 1);
        p->ar_grp = fed_calloc(p->n, 1);
        p->ar_ids = fed_calloc(p->n, sizeof *p->ar_ids);
        p->ar_rank = fed_calloc(p->n, sizeof *p->ar_rank);
        p->ar_capn = p->ar_left && p->ar_grp && p->ar_ids && p->ar_rank ? p->n : 0;
        if (!p->ar_capn)
            return FED_ERR_NOMEM;
    }
    if (!p->ar_buf && !(p->ar_buf = fed_malloc((p->dim + 1) * sizeof *p->ar_buf)))
        return FED_ERR_NOMEM;
    if (!(p->ar_carry > 0))
        p->ar_carry = 1.0;
    memset(p->ar_left, 0, p->n); /* a member left out last round is back */
    memset(p->ar_grp, 1, p->n);
    if (n->cfg.peer.group_size) { /* this round's group, from the grid all compute */
        if ((e = fed_gossip_ar_group((uint32_t)p->n, n->cfg.peer.group_size, n->cfg.seed,
                                     n->round + 1, (uint32_t)p->self, p->ar_ids, &cnt)) != FED_OK)
            return e;
        memset(p->ar_grp, 0, p->n);
        for (uint32_t i = 0; i < cnt; i++)
            p->ar_grp[p->ar_ids[i]] = 1;
    }
    p->ar_attempt = 0;
    p->state = MESH_WAITING;
    return start_attempt(n);
}

static fed_err answer(fed_node *n, node_open *op, fed_err status)
{
    /* the step (or attempt) goes back with the ACK: a late ACK of a resent
       copy of an earlier frame must not end the one now in flight
       (gossip/wire.h) */
    fed_err e = fedi_node_ack(n, op->req, &op->msg.hdr, status,
                              fedi_node_peer_arq_ack_tag(op->msg.hdr.type, &op->msg.block));

    op->req = NULL;
    return e;
}

/* Where a frame of (round, attempt) stands against this member's run:
 * FED_OK to take it; else the answer (*stale: OK, it is of no use now). */
static fed_err placement(fed_node *n, uint64_t round, uint64_t attempt, int *stale)
{
    node_mesh *p = n->mesh;
    uint64_t cur = n->round + 1;

    *stale = 0;
    if (round < cur) { /* it was in the round this node finished, or is late */
        *stale = 1;
        return round + 1 == cur ? FED_OK : FED_ERR_LATE;
    }
    if (round > cur || !p->ar_phase || attempt > p->ar_attempt)
        return FED_ERR_BUSY; /* not there yet: asked again later */
    if (attempt < p->ar_attempt) {
        *stale = 1;
        return FED_OK;
    }
    return FED_OK;
}

fed_err fedi_node_peer_ar_on_slice(fed_node *n, node_open *op)
{
    node_mesh *p = n->mesh;
    const fed_wire_msg *m = &op->msg;
    size_t k = fedi_node_peer_member_of(p, m->hdr.sender);
    uint64_t attempt = m->block.step >> 32;
    int fresh = 0, stale;
    fed_err e;

    if (p->mix != MIX_ALLREDUCE || k == SIZE_MAX || k == p->self || !op->vec64) {
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        (void)answer(n, op, FED_ERR_ROLE);
        return FED_ERR_ROLE;
    }
    if (m->hdr.round > p->mem[k].seen_round)
        p->mem[k].seen_round = m->hdr.round;
    e = placement(n, m->hdr.round, attempt, &stale);
    if (e != FED_OK || stale)
        return answer(n, op, e);
    if (p->ar_phase == AR_ABORT || !p->ar) /* the attempt given up here */
        return answer(n, op, FED_OK);
    e = p->ar_rank[k] == UINT32_MAX
            ? FED_ERR_ROLE /* left out here: it hears the abort */
            : fed_gossip_ar_member_receive(p->ar, p->ar_rank[k], (uint32_t)m->block.step,
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

/* An AR_ABORT: the members it names left out; this attempt given up (if it
 * was not already), the union passed on when it grew. */
static fed_err on_abort(fed_node *n, node_open *op, size_t k)
{
    node_mesh *p = n->mesh;
    const fed_wire_msg *m = &op->msg;
    int grew = 0;

    if ((uint64_t)m->block.count * 32 != m->vector_len || m->hdr.codec != FED_CODEC_NONE) {
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_PAYLOAD);
        (void)answer(n, op, FED_ERR_PAYLOAD);
        return FED_ERR_PAYLOAD;
    }
    for (uint32_t i = 0; i < m->block.count; i++) {
        size_t j = fedi_node_peer_member_of(p, m->vector + (size_t)i * 32);

        if (j != SIZE_MAX && p->ar_grp[j] && !p->ar_left[j]) {
            p->ar_left[j] = 1;
            grew = 1;
        }
    }
    (void)answer(n, op, FED_OK);
    fed_log(FED_LOG_INFO, "peer: member %zu gave up round %llu attempt %llu, leaving out %u "
            "member(s)", k, (unsigned long long)m->hdr.round,
            (unsigned long long)m->block.attempt, m->block.count);
    /* (an abort of a later attempt never gets here: placement answers it
       BUSY, and it is heard again once this member reaches that attempt) */
    if (p->ar_phase == AR_ABORT) {
        if (!grew)
            return FED_OK;
        fedi_node_peer_arq_drop_round(n); /* nothing but aborts waits; tell the grown union */
        (void)send_aborts(n);
        fedi_node_peer_arq_pump(n);
        return FED_OK;
    }
    return give_up(n);
}

/* An AR_VERIFY from the member 2^k before this one: the row it says. */
static fed_err on_verify(fed_node *n, node_open *op, size_t k)
{
    node_mesh *p = n->mesh;
    const fed_wire_msg *m = &op->msg;
    uint32_t nn = p->ar_nids, dist, lvl = 0;

    if (p->ar_phase == AR_ABORT)
        return answer(n, op, FED_OK);
    if (p->ar_rank[k] == UINT32_MAX)
        return answer(n, op, FED_ERR_ROLE);
    dist = (p->ar_rank[p->self] + nn - p->ar_rank[k]) % nn;
    while (lvl < 31 && (1u << lvl) < dist)
        lvl++;
    if (dist == 0 || (1u << lvl) != dist)
        return answer(n, op, FED_ERR_ROLE);
    (void)answer(n, op, FED_OK);
    if (m->block.in_row <= p->ar_rx[lvl])
        return FED_OK; /* a resend, or overtaken */
    p->ar_rx[lvl] = m->block.in_row;
    memcpy(p->ar_rx_hash[lvl], m->block.result_hash, 32);
    return p->ar_phase == AR_VERIFY ? verify_step(n) : FED_OK;
}

fed_err fedi_node_peer_ar_on_control(fed_node *n, node_open *op)
{
    node_mesh *p = n->mesh;
    const fed_wire_msg *m = &op->msg;
    size_t k = fedi_node_peer_member_of(p, m->hdr.sender);
    int stale;
    fed_err e;

    if (p->mix != MIX_ALLREDUCE || k == SIZE_MAX || k == p->self ||
        m->block.attempt > UINT32_MAX) {
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        (void)answer(n, op, FED_ERR_ROLE);
        return FED_ERR_ROLE;
    }
    if (m->hdr.round > p->mem[k].seen_round)
        p->mem[k].seen_round = m->hdr.round;
    e = placement(n, m->hdr.round, m->block.attempt, &stale);
    if (e != FED_OK || stale)
        return answer(n, op, e);
    if (!p->ar_grp[k]) { /* another group's member: not ours to hear */
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        return answer(n, op, FED_ERR_ROLE);
    }
    if (m->hdr.type == FED_WIRE_AR_ABORT)
        return on_abort(n, op, k);
    return on_verify(n, op, k);
}

fed_err fedi_node_peer_ar_on_deadline(fed_node *n)
{
    node_mesh *p = n->mesh;
    char who[128];
    size_t at = 0;

    switch (p->ar_phase) {
    case AR_RUN:
        who[0] = 0;
        for (uint32_t r = 0; r < p->ar_nids; r++)
            if (fed_gossip_ar_member_waits_for(p->ar, r)) {
                p->ar_left[p->ar_ids[r]] = 1;
                if (at + 12 < sizeof who)
                    at += (size_t)snprintf(who + at, sizeof who - at, " %u", p->ar_ids[r]);
            }
        fed_log(FED_LOG_WARN, "peer: all-reduce of round %llu attempt %u stalled at step %u "
                "waiting for member(s)%s: given up, they are left out",
                (unsigned long long)(n->round + 1), p->ar_attempt,
                fed_gossip_ar_member_step(p->ar), who);
        return give_up(n);
    case AR_VERIFY:
        fed_log(FED_LOG_WARN, "peer: all-reduce of round %llu attempt %u: the verification did "
                "not come round (a member died after its run), no abort heard: the mean "
                "taken", (unsigned long long)(n->round + 1), p->ar_attempt);
        return finish(n, 1);
    case AR_ABORT:
        p->ar_attempt++;
        return start_attempt(n);
    default:
        return FED_OK;
    }
}
