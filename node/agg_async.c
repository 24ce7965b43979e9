/* agg_async.c - the aggregator's async mode (FedBuff), its round mode
 * (agg_mode_ops, fedi_node_agg_async_mode): every ask answered with the
 * global model at once, any member's delta at most max_staleness rounds old
 * buffered (one per client), K of them closing the round. Never holds a
 * request for sampling: that is the synchronous rounds' way. */
#include <string.h>

#include "node/aggregator_impl.h"

/* Round n->round + 1 takes deltas from now on: clients waiting for it get
 * the global model now. The run's start, what follows each merge, and
 * the end of a failed merge's wait. */
static fed_err async_open(fed_node *n)
{
    node_agg *a = n->agg;
    fed_wire_block b;
    fed_err e;

    a->state = AGG_RUNNING;
    a->round_start_ms = n->env.now_ms(n->env.self);
    a->bytes_in0 = fed_wire_get_counters(n->wire)->bytes_in;
    a->bytes_out0 = fed_wire_get_counters(n->wire)->bytes_out;
    fedi_node_agg_cancel_deadline(n); /* armed by the round's first delta */
    if (n->round + 1 > n->cfg.agg.max_staleness)
        fedi_node_rx_drop_before(n, n->round + 1 - n->cfg.agg.max_staleness);
    if ((e = fedi_node_agg_encode_global(n)) != FED_OK)
        return e;
    fedi_node_agg_settings(n, n->round + 1, &b); /* the rate of merge n->round + 1 */
    /* a failed send: the client asks again */
    (void)fedi_node_agg_send_models(n, a->holds, a->nholds, &b);
    a->nholds = 0;
    fedi_node_agg_arm_poll(n);
    return FED_OK;
}

/* A HELLO or NEXT: the model now, unless the client's delta is buffered
 * (then at the next merge) or a failed merge's wait runs (then when it
 * ends). A client that says it trained the round being filled but whose
 * delta is not buffered lost it (a failed merge dropped it, or a restart):
 * it gets that round's model again, and sends its delta again. */
static fed_err async_on_ask(fed_node *n, fed_req *req, const fed_wire_hdr *h)
{
    node_agg *a = n->agg;

    if (a->state != AGG_RUNNING || fedi_node_agg_part_find(a, h->sender))
        return fedi_node_agg_hold_add(n, req, h);
    return fedi_node_agg_answer_model(n, req, h);
}

/* Async: any member's delta of a round at most max_staleness old goes into
 * the buffer (one per client); K of them close the round. */
static fed_err async_on_delta(fed_node *n, node_open *op)
{
    node_agg *a = n->agg;
    const fed_wire_msg *m = &op->msg;
    uint64_t filling = n->round + 1;
    agg_part *p;
    fed_err e;

    if (a->state != AGG_RUNNING || m->hdr.round > filling ||
        filling - m->hdr.round > n->cfg.agg.max_staleness)
        return fedi_node_agg_refuse_delta(n, op, FED_ERR_LATE, 0);
    if ((p = fedi_node_agg_part_find(a, m->hdr.sender)))
        return fedi_node_agg_ack_duplicate(n, op);
    if (m->block.samples == 0)
        return fedi_node_agg_refuse_delta(n, op, FED_ERR_PAYLOAD, 0);
    if (a->nparts == (size_t)a->max_clients) /* async_k <= max_clients: never */
        return fedi_node_agg_refuse_delta(n, op, FED_ERR_FULL, 0);
    p = &a->parts[a->nparts++];
    memcpy(p->key, m->hdr.sender, 32);
    e = fedi_node_agg_take_delta(n, op, p);
    if (!p->got) { /* refused (its segments), or no memory: not in the buffer */
        memset(p, 0, sizeof *p);
        a->nparts--;
        return e;
    }
    if (a->nparts == 1 &&
        fedi_node_agg_arm_deadline(n, n->env.now_ms(n->env.self) + n->cfg.deadline_ms) != FED_OK)
        return n->failed;
    if (a->nparts >= n->cfg.agg.async_k)
        return fedi_node_agg_close_round(n);
    return e;
}

/* Too few deltas buffered by the deadline: the buffer keeps filling. */
static fed_err async_short_deadline(fed_node *n)
{
    return fedi_node_agg_arm_deadline(n, n->env.now_ms(n->env.self) + n->cfg.deadline_ms);
}

/* A failed merge's wait (fedi_node_agg_retry_later) is over: the round
 * takes deltas again, and the clients held meanwhile get the model as
 * committed (those whose deltas were dropped send them again). */
static fed_err async_round_timer(fed_node *n)
{
    node_agg *a = n->agg;

    if (a->state != AGG_IDLE || n->env.now_ms(n->env.self) < a->retry_at_ms)
        return FED_OK;
    return async_open(n);
}

const agg_mode_ops fedi_node_agg_async_mode = {
    .name = "async",
    .cohort = 0,
    .seal_ahead = 0,
    .start = async_open,
    .on_ask = async_on_ask,
    .on_delta = async_on_delta,
    .short_deadline = async_short_deadline,
    .next = async_open,
    .failed = fedi_node_agg_retry_later,
    .round_timer = async_round_timer,
};
