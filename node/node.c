/* node.c - the node state machine's common machinery: building a node for
 * its role, sequence numbers per recipient, sealing and sending frames,
 * opening received frames (inline when small, as a job when large), the
 * node.state checkpoint section and each round's learning rate. The roles
 * live in aggregator.c, client.c and peer.c, each behind its node_role_ops,
 * chosen once here. Never touches a socket, clock or random source: only
 * fed_env. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "model/colstats.h"
#include "node/node_impl.h"
#include "node/site_eval.h"

/* Whether a client takes the model whole (a spec) over its input in: the
 * same as own (its declared model; NULL: any), within max_params and
 * max_flops: FED_OK with its parameters in *nparams; FED_ERR_SPEC when it
 * builds nothing over in; else FED_ERR_MODEL_MISMATCH with why (cap bytes)
 * saying what differs: both models' hashes and the first difference, or
 * the bound passed. */
static FED_WUR fed_err node_model_admit(const char *whole, const char *own, fed_model_shape in,
                                        double max_params, double max_flops, size_t *nparams,
                                        char *why, size_t cap);

static void node_open_free(node_open *op);

static FED_WUR fed_err node_state_decode(const fed_store_ckpt *c, fed_node_role role,
                                         uint64_t *round);

/* "round", "deadline", "poll", "retry" (or "unknown"), for messages. */
static const char *node_timer_name(uint32_t id);

/* Room in txbuf for a frame with payload_len bytes of payload. */
static FED_WUR fed_err node_tx_reserve(fed_node *n, size_t payload_len);

void fed_node_config_default(fed_node_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->seed = 1;
    cfg->shards = 1;
    cfg->local_epochs = 1;
    cfg->batch = 64;
    cfg->client.max_model_params = FED_NODE_MAX_MODEL_PARAMS;
    cfg->client.max_model_flops = FED_NODE_MAX_MODEL_FLOPS;
    cfg->optimizer = FED_OPTIM_SGD;
    cfg->lr = 0; /* the optimizer's own (fed_optim_default_lr) */
    cfg->momentum = 0.9f;
    snprintf(cfg->transfer.codec, sizeof cfg->transfer.codec, "f32");
    snprintf(cfg->agg.strategy, sizeof cfg->agg.strategy, "fedavg");
    cfg->agg.sample_fraction = 1.0;
    cfg->agg.min_clients = 1;
    cfg->agg.gather_ms = 1000;
    cfg->deadline_ms = 60000;
    cfg->transfer.poll_ms = 5000;
    cfg->transfer.retry_ms = 2000;
    cfg->client.delta_retries = 3;
    cfg->agg.max_staleness = 10;
    cfg->dp.sgd_clip = 1.0f;
    cfg->dp.sgd_noise = 1.0f;
    cfg->dp.delta = 1e-5;
    cfg->dp.client_noise = 1.0;
    cfg->dp.client_clip_lr = 0.2;
    cfg->secagg.dropout = 0.1;
    cfg->secagg.max_weight = 1000;
    cfg->secagg.bits = 20;
    cfg->secagg.range = 4;
    cfg->secagg.stats_range = 64;
    cfg->secagg.stage_ms = 10000;
    cfg->secagg.min_clients = FED_NODE_SA_FLOOR;
}

/* The roles by fed_node_role: each role's file defines its entry. */
static const node_role_ops *const node_roles[] = {
    [FED_NODE_CLIENT] = &fedi_node_client_ops,
    [FED_NODE_AGGREGATOR] = &fedi_node_agg_ops,
    [FED_NODE_PEER] = &fedi_node_peer_ops,
};

/* The common part of the configuration, then the role's (*ops: its table). */
static fed_err check_config(const fed_node_config *c, const node_role_ops **ops)
{
    if (!c->store || !c->arena || !c->allow || !c->be)
        return FED_ERR_INVAL;
    if (!fed_crypto_arena_has_identity(c->arena))
        return FED_ERR_KEY;
    if ((unsigned)c->role >= sizeof node_roles / sizeof *node_roles || !node_roles[c->role])
        return FED_ERR_INVAL;
    *ops = node_roles[c->role];
    return (*ops)->check(c);
}

/* cfg's rate across rounds (aggregator, peer: they send or train at it; a
 * client trains at what each MODEL says and keeps none). */
static fed_err round_schedule(const fed_node_config *cfg, const node_role_ops *ops,
                              fed_optim_cfg *out)
{
    const char *text = cfg->lr_schedule[0] ? cfg->lr_schedule : "const";

    fed_optim_cfg_default(out, (fed_optim_kind)cfg->optimizer);
    out->lr = cfg->lr;
    if (ops->rate_from_model)
        return FED_OK;
    if (fed_optim_sched_of_run(text, cfg->rounds, cfg->lr_warmup, 1, out) != FED_OK) {
        fed_log(FED_LOG_ERROR, "node: lr schedule '%s' with %u warm-up rounds does not fit %u"
                " rounds (cosine needs rounds past the warm-up)", text, cfg->lr_warmup,
                cfg->rounds);
        return FED_ERR_BAD_VALUE;
    }
    return FED_OK;
}

float fedi_node_round_lr(const fed_node *n, uint64_t round)
{
    long step = round > 1 ? (round - 1 < (uint64_t)LONG_MAX ? (long)(round - 1) : LONG_MAX) : 0;
    float lr = fed_optim_sched_lr(&n->lr_sched, step);

    /* the wire's rate is > 0: one that underflowed (gamma^k over very many
       rounds) goes as the smallest normal float, which trains nothing too */
    return lr > 0 ? lr : FLT_MIN;
}

fed_err fed_node_new(const fed_node_config *given, const fed_env *env, fed_node **out)
{
    fed_node_config resolved;
    const fed_node_config *cfg = &resolved;
    fed_optim_cfg sched;
    const node_role_ops *ops = NULL;
    fed_node *n;
    fed_wire_cfg wc;
    fed_err e;

    *out = NULL;
    if (!given || !env)
        return FED_ERR_INVAL;
    resolved = *given;
    /* lr 0: the optimizer's own, the same rate fednode train would use */
    resolved.lr = fed_optim_resolve_lr((fed_optim_kind)given->optimizer, given->lr);
    if ((e = check_config(cfg, &ops)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "node: unusable configuration: %s", fed_strerror(e));
        return e;
    }
    if ((e = round_schedule(cfg, ops, &sched)) != FED_OK)
        return e;
    if (!(n = fed_calloc(1, sizeof *n)))
        return FED_ERR_NOMEM;
    n->cfg = *cfg;
    n->ops = ops;
    n->lr_sched = sched;
    n->env = *env;
    memcpy(n->key, fed_crypto_arena_pubkey(cfg->arena), 32);
    fed_wire_cfg_default(&wc); /* a zero field of cfg->transfer.wire: its default */
    if (cfg->transfer.wire.max_frame)
        wc.max_frame = cfg->transfer.wire.max_frame;
    if (cfg->transfer.wire.max_rx_streams)
        wc.max_rx_streams = cfg->transfer.wire.max_rx_streams;
    if (cfg->transfer.wire.max_stream_bytes)
        wc.max_stream_bytes = cfg->transfer.wire.max_stream_bytes;
    wc.hooks = cfg->transfer.wire.hooks; /* the simulator's (gossip/wire_hooks.h); NULL in a daemon */
    if ((e = fed_wire_new(&wc, cfg->arena, cfg->allow, &n->wire)) != FED_OK)
        goto out;
    fed_wire_set_epoch(n->wire, fed_store_epoch(cfg->store));
    fedi_node_rx_init(n);
    if ((e = fed_store_set_node_key(cfg->store, n->key)) != FED_OK)
        goto out;
    e = n->ops->create(n);
out:
    if (e != FED_OK) {
        fed_node_free(n);
        return e;
    }
    *out = n;
    return FED_OK;
}

static void node_open_free(node_open *op)
{
    if (!op)
        return;
    if (op->frame && op->msg.hdr.type == FED_WIRE_SA_UNMASK)
        sodium_memzero(op->frame, op->len); /* it carried revealed shares, in the clear */
    fed_free(op->frame);
    fed_free(op->vec);
    fed_free(op->rx_buf);
    fed_free(op->vec64);
    fed_free(op);
}

void fed_node_free(fed_node *n)
{
    if (!n)
        return;
    n->ops->destroy(n);
    while (n->opens) {
        node_open *op = n->opens;

        n->opens = op->next;
        /* a crash handed the job back unfinished: release its reservation */
        if (n->wire) {
            fed_err ignored = fed_wire_finish(n->wire, &op->ticket, FED_ERR_CLOSED, &op->msg);

            (void)ignored;
        }
        node_open_free(op);
    }
    if (n->wire)
        fedi_node_tx_drop_all(n);
    fedi_node_cast_free(n); /* unpins what was sealed ahead: before the wire */
    fed_wire_free(n->wire); /* closes the incoming streams ... */
    fedi_node_rx_free_all(n); /* ... whose buffers are ours */
    fed_free(n->peers);
    fed_free(n->txbuf);
    fed_free(n);
}

fed_node_role fed_node_get_role(const fed_node *n) { return n->cfg.role; }
const uint8_t *fed_node_key(const fed_node *n) { return n->key; }
uint64_t fed_node_round(const fed_node *n) { return n->round; }
int fed_node_finished(const fed_node *n) { return n->finished; }
fed_err fed_node_failed(const fed_node *n) { return n->failed; }

void fed_node_get_progress(const fed_node *n, fed_node_progress *out)
{
    memset(out, 0, sizeof *out);
    out->round = n->round;
    out->finished = n->finished;
    out->failed = n->failed;
    if (n->ops->progress)
        n->ops->progress(n, out);
}

static const char *node_timer_name(uint32_t id)
{
    switch (id) {
    case NODE_TIMER_ROUND:
        return "round";
    case NODE_TIMER_DEADLINE:
        return "deadline";
    case NODE_TIMER_POLL:
        return "poll";
    case NODE_TIMER_RETRY:
        return "retry";
    case NODE_TIMER_STAGE:
        return "stage";
    default:
        return "unknown";
    }
}

fed_err fedi_node_arm(fed_node *n, uint64_t at_ms, uint32_t id)
{
    fed_err e = (fed_err)n->env.set_timer(n->env.self, at_ms, id);

    if (e == FED_OK)
        return FED_OK;
    fed_log(FED_LOG_ERROR,
            "node: the %s timer (id %u) could not be armed: %s; without it round %llu would "
            "stall, so the node stops",
            node_timer_name(id), id, fed_strerror(e), (unsigned long long)(n->round + 1));
    if (n->failed == FED_OK)
        n->failed = e;
    return e;
}

fed_err fedi_node_arm_in(fed_node *n, uint64_t after_ms, uint32_t id)
{
    return fedi_node_arm(n, n->env.now_ms(n->env.self) + after_ms, id);
}
#define FED_NODE_RECV_SLACK ((size_t)64 << 10) /* typed block, PEERS frames */

size_t fed_node_recv_limit(const fed_node_config *cfg)
{
    size_t max = cfg->transfer.wire.max_frame ? cfg->transfer.wire.max_frame : FED_WIRE_MAX_FRAME_DEFAULT;
    size_t np = 0, need;

    if (max <= FED_NODE_RECV_SLACK || !cfg->spec[0] || fed_model_spec_nparams(cfg->spec, cfg->shape, &np) != FED_OK)
        return max;
    /* the integers a contribution carries: a site evaluation's, the
       statistics pass's (its DELTA, its masked input), --secagg-ints */
    np += fed_node_site_eval_words(cfg) +
          fed_node_ints_words(cfg, (uint64_t)cfg->data.stats_cols * FED_COLSTATS_INTS) +
          (cfg->secagg.on ? fed_node_ints_words(cfg, cfg->secagg.ints) : 0);
    if (np > (max - FED_NODE_RECV_SLACK) / sizeof(double))
        return max;
    need = fed_wire_frame_bytes(np * sizeof(double) + FED_NODE_RECV_SLACK);
    return need < max ? need : max;
}

void fed_node_set_conn_counters(fed_node *n, uint64_t refused, uint64_t stalled,
                                uint64_t handshake, uint64_t dropped)
{
    fed_wire_set_conn_counters(n->wire, refused, stalled, handshake, dropped);
}

const fed_wire_counters *fed_node_wire_counters(const fed_node *n)
{
    return fed_wire_get_counters(n->wire);
}

uint64_t fedi_node_wall_ms(const fed_node *n)
{
    return n->env.wall_ms(n->env.self);
}

/* ---- sequence numbers ---- */

fed_err fedi_node_next_seq(fed_node *n, const uint8_t key[32], uint64_t *seq)
{
    int found;
    size_t i = fed_key_search(n->peers, n->npeers, sizeof *n->peers, key, &found);

    if (!found) {
        if (n->npeers == n->cap_peers) {
            size_t cap = n->cap_peers ? 2 * n->cap_peers : 16;
            node_peer *p = fed_realloc(n->peers, cap * sizeof *p);

            if (!p)
                return FED_ERR_NOMEM;
            n->peers = p;
            n->cap_peers = cap;
        }
        memmove(&n->peers[i + 1], &n->peers[i], (n->npeers - i) * sizeof *n->peers);
        memcpy(n->peers[i].key, key, 32);
        n->peers[i].next_seq = 1;
        n->peers[i].told_old_ms = 0;
        n->npeers++;
    }
    *seq = n->peers[i].next_seq++;
    return FED_OK;
}

/* ---- sending ---- */

static fed_err node_tx_reserve(fed_node *n, size_t payload_len)
{
    size_t need = fed_wire_frame_bytes(payload_len);

    if (need > fed_wire_config(n->wire)->max_frame)
        return FED_ERR_FRAME_TOO_LARGE;
    if (need > n->cap_tx) {
        uint8_t *b = fed_realloc(n->txbuf, need);

        if (!b)
            return FED_ERR_NOMEM;
        n->txbuf = b;
        n->cap_tx = need;
    }
    return FED_OK;
}

fed_err fedi_node_header(fed_node *n, uint8_t type, const uint8_t to[32], uint64_t round,
                         uint64_t recipient_epoch, uint16_t codec, fed_wire_hdr *h)
{
    memset(h, 0, sizeof *h);
    h->type = type;
    memcpy(h->recipient, to, 32);
    h->sender_epoch = fed_wire_epoch(n->wire);
    h->recipient_epoch = recipient_epoch;
    h->round = round;
    h->codec = codec;
    return fedi_node_next_seq(n, to, &h->seq);
}

fed_err fedi_node_transmit(fed_node *n, fed_req *req, const uint8_t to[32], const uint8_t *frame,
                           size_t len)
{
    fed_err e;

    if (req)
        e = (fed_err)n->env.reply(n->env.self, req, frame, len);
    else {
        fed_peer_id id;

        memcpy(id.key, to, 32);
        e = (fed_err)n->env.send(n->env.self, &id, frame, len);
    }
    if (e != FED_OK)
        fed_log(FED_LOG_WARN, "node: sending a %s frame failed: %s", fed_wire_type_name(frame[5]),
                fed_strerror(e));
    return e;
}

static fed_err transmit(fed_node *n, fed_req *req, const fed_wire_hdr *h, size_t flen)
{
    return fedi_node_transmit(n, req, h->recipient, n->txbuf, flen);
}

fed_err fedi_node_emit(fed_node *n, fed_req *req, fed_wire_hdr *h, const fed_wire_block *b,
                       const uint8_t *vec, size_t vlen)
{
    size_t flen = 0;
    fed_err e = node_tx_reserve(n, fed_wire_block_bytes(h->type, b) + vlen);

    if (e == FED_OK)
        e = fed_wire_build(n->wire, h, b, vec, vlen, n->txbuf, n->cap_tx, n->env.random,
                           n->env.self, &flen);
    if (e != FED_OK) {
        fed_log(FED_LOG_ERROR, "node: building a %s frame failed: %s", fed_wire_type_name(h->type),
                fed_strerror(e));
        fedi_node_refuse(n, req);
        return e;
    }
    return transmit(n, req, h, flen);
}

fed_err fedi_node_ack(fed_node *n, fed_req *req, const fed_wire_hdr *to, fed_err status,
                      uint32_t flags)
{
    fed_wire_hdr h;
    fed_wire_block b;
    fed_err e = fedi_node_header(n, FED_WIRE_ACK, to->sender, to->round, to->sender_epoch,
                                 FED_CODEC_NONE, &h);

    if (e != FED_OK) {
        fedi_node_refuse(n, req);
        return e;
    }
    memset(&b, 0, sizeof b);
    b.status = (uint32_t)status;
    b.ack_flags = flags;
    return fedi_node_emit(n, req, &h, &b, NULL, 0);
}

void fedi_node_refuse(fed_node *n, fed_req *req)
{
    if (req)
        (void)n->env.reply(n->env.self, req, NULL, 0);
}

/* ---- receiving ---- */

fed_err fedi_node_expected_entries(node_open *op, size_t *want)
{
    fed_model_shape in;
    char *whole = NULL;
    fed_err e;

    if (op->expect_n) {
        *want = op->expect_n;
        return FED_OK;
    }
    if (op->msg.hdr.type != FED_WIRE_MODEL)
        return FED_ERR_PAYLOAD;
    if ((e = fedi_node_model_input(&op->msg.block.settings, op->shape, op->classes, &in,
                                   op->model_why, sizeof op->model_why)) != FED_OK ||
        (e = fedi_node_model_whole(&op->msg.block.settings, &whole)) != FED_OK)
        return e;
    e = node_model_admit(whole, op->own_model, in, op->max_params, op->max_flops, want,
                         op->model_why, sizeof op->model_why);
    fed_free(whole);
    if (e == FED_OK && (op->msg.block.settings.paths_flags & FED_WIRE_PATHS_SCAFFOLD))
        *want *= 2; /* SCAFFOLD: the server's control variate after the model */
    return e;
}

fed_err fedi_node_model_input(const fed_wire_settings *s, fed_model_shape data, int declared,
                              fed_model_shape *out, char *why, size_t cap)
{
    const uint32_t *m = s->input;

    *out = data;
    out->scale = (int)s->input_scale; /* the aggregator's, for every site alike */
    if (!m[3]) /* a sender before the field: the data's own */
        return FED_OK;
    if (m[0] != (uint32_t)data.c || m[1] != (uint32_t)data.h || m[2] != (uint32_t)data.w)
        return fed_err_why(why, cap, FED_ERR_MODEL_MISMATCH,
                           "the aggregator's model takes input %ux%ux%u, this client's data "
                           "has %dx%dx%d per sample", m[0], m[1], m[2], data.c, data.h, data.w);
    if (declared && m[3] != (uint32_t)declared)
        return fed_err_why(why, cap, FED_ERR_MODEL_MISMATCH,
                           "the aggregator's model has %u classes, this client declares %d "
                           "(--classes or its model file)", m[3], declared);
    if (m[3] < (uint32_t)data.classes)
        return fed_err_why(why, cap, FED_ERR_MODEL_MISMATCH,
                           "the aggregator's model has %u classes (labels 0 to %u), this "
                           "client's data has %d (labels up to %d)", m[3], m[3] - 1,
                           data.classes, data.classes - 1);
    out->classes = (int)m[3];
    return FED_OK;
}

fed_err fedi_node_model_whole(const fed_wire_settings *s, char **out)
{
    size_t len = s->graph ? s->graph_len : strlen(s->spec);

    if (!(*out = fed_malloc(len + 1)))
        return FED_ERR_NOMEM;
    memcpy(*out, s->graph ? s->graph : s->spec, len);
    (*out)[len] = '\0';
    return FED_OK;
}

static fed_err node_model_admit(const char *whole, const char *own, fed_model_shape in,
                                double max_params, double max_flops, size_t *nparams, char *why,
                                size_t cap)
{
    char ha[FED_MODEL_HASH_CHARS], hb[FED_MODEL_HASH_CHARS];
    double flops = 0;
    size_t at = 0;

    *nparams = 0;
    if (cap)
        why[0] = '\0';
    if (own && strcmp(whole, own) != 0) {
        while (whole[at] && whole[at] == own[at])
            at++;
        fed_model_spec_hash(whole, ha);
        fed_model_spec_hash(own, hb);
        /* bytes from just before the first difference, where both go apart */
        size_t from = at > 12 ? at - 12 : 0;
        return fed_err_why(why, cap, FED_ERR_MODEL_MISMATCH,
                           "the aggregator's model %s differs from the one this client's --model "
                           "declares, %s, at byte %zu: '...%.24s' against '...%.24s'", ha, hb,
                           at, whole + from, own + from);
    }
    if (fed_model_spec_cost(whole, in, nparams, &flops, NULL, 0) != FED_OK)
        return FED_ERR_SPEC;
    if ((double)*nparams > max_params || flops > max_flops) {
        fed_model_spec_hash(whole, ha);
        return fed_err_why(why, cap, FED_ERR_MODEL_MISMATCH,
                           "the aggregator's model %s has %zu parameters and %.4g FLOPs per "
                           "sample, past this client's --max-model-params %.4g or "
                           "--max-model-flops %.4g", ha, *nparams, flops, max_params, max_flops);
    }
    return FED_OK;
}

/* In the job (or inline): open, then decode the vector when one is due. */
static void open_job(fed_job *job)
{
    node_open *op = job->user;
    const fed_wire_msg *m = &op->msg;
    size_t want = 0;
    fed_err e;

    op->result = fed_wire_open_ticket(op->wire, &op->ticket, op->frame, op->len, &op->msg);
    if (op->result != FED_OK)
        return;
    if (m->stream) {
        if (!m->stream_done)
            return; /* a chunk in; the vector is not whole yet */
        fedi_node_rx_whole_msg(op);
    }
    if (m->hdr.type == FED_WIRE_SHARE || m->hdr.type == FED_WIRE_SLICE) {
        /* push-sum totals, all-reduce ranges: in double */
        want = m->hdr.type == FED_WIRE_SLICE ? op->expect_max : op->expect_n;
        if (!want || m->hdr.codec != FED_CODEC_F64) {
            op->result = !want ? FED_ERR_ROLE : FED_ERR_CODEC;
            return;
        }
        if (m->hdr.type == FED_WIRE_SLICE) { /* a range: at most expect_n */
            fed_codec_id id;
            uint64_t got = 0;

            if ((e = fed_codec_peek(m->vector, m->vector_len, &id, &got)) != FED_OK ||
                got > want) {
                op->result = e != FED_OK ? e : FED_ERR_CODEC;
                return;
            }
            want = (size_t)got;
        }
        if (!(op->vec64 = fed_malloc(want ? want * sizeof *op->vec64 : 1))) {
            op->result = FED_ERR_NOMEM;
            return;
        }
        op->vec_n = want;
        op->result = fed_codec_decode_f64(m->vector, m->vector_len, op->vec64, want);
        return;
    }
    if (m->hdr.type != FED_WIRE_MODEL && m->hdr.type != FED_WIRE_DELTA)
        return;
    if ((e = fedi_node_expected_entries(op, &want)) != FED_OK) {
        op->result = e;
        return;
    }
    if (op->expect_codec != FED_CODEC_NONE && m->hdr.codec != op->expect_codec) {
        op->result = FED_ERR_CODEC;
        return;
    }
    if (!(op->vec = fed_malloc((want ? want : 1) * sizeof(float)))) {
        op->result = FED_ERR_NOMEM;
        return;
    }
    op->vec_n = want;
    e = fed_codec_decode(m->vector, m->vector_len, (fed_codec_id)m->hdr.codec, op->vec, want);
    if (e != FED_OK)
        op->result = e;
}

static void opens_unlink(fed_node *n, node_open *op)
{
    for (node_open **p = &n->opens; *p; p = &(*p)->next)
        if (*p == op) {
            *p = op->next;
            n->nopens--;
            return;
        }
}

static int is_stream_frame(const fed_wire_hdr *h)
{
    return (h->type == FED_WIRE_CHUNK && h->flags == FED_WIRE_FLAG_DATA) ||
           (h->flags & FED_WIRE_FLAG_STREAM);
}

/* Back on the loop: settle the reservation, then hand the frame to the
 * transfer machinery or the role. */
static fed_err open_done(fed_node *n, node_open *op)
{
    fed_err e = op->result;
    int handled = 0;

    if (e == FED_ERR_CODEC || e == FED_ERR_NAN || e == FED_ERR_SPEC || e == FED_ERR_NOMEM ||
        e == FED_ERR_MODEL_MISMATCH) {
        /* the envelope held (the sender is who it says), its contents did not */
        if (fed_wire_finish(n->wire, &op->ticket, FED_OK, &op->msg) != FED_OK) {
            fedi_node_refuse(n, op->req); /* the sequence was taken meanwhile */
            op->req = NULL;
            return e;
        }
        fed_wire_note_reject(n->wire, &op->msg.hdr, e);
        if (op->req)
            (void)fedi_node_ack(n, op->req, &op->msg.hdr, e, 0);
        else if (n->ops->bad_reply &&
                 (e == FED_ERR_CODEC || e == FED_ERR_SPEC || e == FED_ERR_MODEL_MISMATCH))
            e = n->ops->bad_reply(n, op, e); /* a model it cannot build? */
        op->req = NULL;
        fedi_node_transfer_done(n, op);
        return e;
    }
    e = fed_wire_finish(n->wire, &op->ticket, e, &op->msg);
    if (e == FED_ERR_REPLAY && op->req && is_stream_frame(&op->ticket.hdr)) {
        /* a resend (fresh sequence) of a chunk we hold: its ACK was lost */
        (void)fedi_node_ack(n, op->req, &op->ticket.hdr, FED_OK, FED_WIRE_ACK_DUPLICATE);
        op->req = NULL;
        return e;
    }
    if (e != FED_OK) {
        if ((e == FED_ERR_TOO_LARGE || e == FED_ERR_MODEL_MISMATCH) && !op->req &&
            n->ops->bad_reply)
            /* a stream (its first frame opened) too long, or of another
               graph: a client's MODEL it cannot build over its data? */
            e = n->ops->bad_reply(n, op, e);
        fedi_node_refuse(n, op->req);
        op->req = NULL;
        return e;
    }
    if ((e = fedi_node_transfer_on_msg(n, op, &handled)), handled)
        return e;
    e = n->ops->on_msg(n, op);
    fedi_node_transfer_done(n, op);
    return e;
}

/* A member's request addressed to an older epoch of this aggregator (it
 * restarted, and the client still runs a round of the dead process): the
 * client is told so by an ACK FED_ERR_OLD_EPOCH from this epoch, sealed and
 * signed as any, and says HELLO at once instead of asking the dead epoch
 * until its retries run out. At most one such answer a second per client,
 * so replayed old frames cost a seal each only that often. 1: answered. */
static int tell_old_epoch(fed_node *n, fed_req *req, const uint8_t *frame, size_t len)
{
    uint64_t now = n->env.now_ms(n->env.self);
    fed_wire_hdr h;
    size_t i;
    int found = 0;

    if (!n->ops->tells_old_epoch || !req || fed_wire_hdr_decode(frame, len, &h) != FED_OK ||
        !fed_wire_is_member(n->wire, h.sender))
        return 0;
    i = fed_key_search(n->peers, n->npeers, sizeof *n->peers, h.sender, &found);
    if (found && n->peers[i].told_old_ms && now + 1 < n->peers[i].told_old_ms + 1000)
        return 0;
    if (fedi_node_ack(n, req, &h, FED_ERR_OLD_EPOCH, 0) != FED_OK)
        return 1; /* the request was answered empty (refused) */
    i = fed_key_search(n->peers, n->npeers, sizeof *n->peers, h.sender, &found);
    if (found) /* fedi_node_ack numbered the frame: the peer has an entry */
        n->peers[i].told_old_ms = now + 1;
    return 1;
}

fed_err fed_node_on_frame(fed_node *n, fed_req *req, const uint8_t *frame, size_t len)
{
    node_open *op = NULL;
    fed_err e;

    if (!(op = fed_calloc(1, sizeof *op)) || !(op->frame = fed_malloc(len ? len : 1))) {
        node_open_free(op);
        fedi_node_refuse(n, req);
        return FED_ERR_NOMEM;
    }
    memcpy(op->frame, frame, len);
    op->len = len;
    op->req = req;
    op->wire = n->wire;
    if ((e = fed_wire_precheck(n->wire, op->frame, len, &op->ticket)) != FED_OK)
        goto refuse;
    if (n->nopens >= NODE_MAX_OPENS) {
        e = fed_wire_finish(n->wire, &op->ticket, FED_ERR_BUSY, NULL);
        goto refuse;
    }
    op->job.fn = open_job;
    op->job.user = op;
    n->ops->prepare_open(n, op);
    if (len > NODE_INLINE_OPEN_BYTES) {
        op->next = n->opens;
        n->opens = op;
        n->nopens++;
        if ((e = (fed_err)n->env.submit(n->env.self, &op->job)) == FED_OK)
            return FED_OK;
        opens_unlink(n, op);
        op->result = e;
    } else {
        open_job(&op->job);
    }
    e = open_done(n, op);
    node_open_free(op);
    return e;
refuse:
    if (e != FED_ERR_OLD_EPOCH || !tell_old_epoch(n, req, frame, len))
        fedi_node_refuse(n, req);
    node_open_free(op);
    return e;
}

fed_err fed_node_on_job_done(fed_node *n, fed_job *job)
{
    fed_err e;

    if (job->fn == open_job) {
        node_open *op = job->user;

        opens_unlink(n, op);
        e = open_done(n, op);
        node_open_free(op);
        return e;
    }
    return n->ops->on_job(n, job);
}

fed_err fed_node_stop(fed_node *n)
{
    return n->ops->stop ? n->ops->stop(n) : FED_OK;
}

fed_err fed_node_on_timer(fed_node *n, uint32_t timer_id)
{
    fedi_node_rx_sweep(n);
    return n->ops->on_timer(n, timer_id);
}

fed_err fed_node_start(fed_node *n)
{
    if (n->started)
        return FED_ERR_INVAL;
    n->started = 1;
    return n->ops->start(n);
}

fed_err fedi_node_encode_vec(const fed_codec *c, const float *x, size_t n, float *residual,
                             uint8_t **buf, size_t *cap, size_t *len)
{
    size_t need = 0;
    fed_err e = fed_codec_size(c, n, &need);

    if (e != FED_OK)
        return e;
    if (need > *cap) {
        uint8_t *b = fed_realloc(*buf, need);

        if (!b)
            return FED_ERR_NOMEM;
        *buf = b;
        *cap = need;
    }
    return fed_codec_encode(c, x, n, residual, *buf, *cap, len);
}

/* ---- checkpoint state ---- */

void fedi_node_state_encode(uint8_t out[FED_NODE_STATE_BYTES], fed_node_role role, uint64_t round)
{
    memset(out, 0, FED_NODE_STATE_BYTES);
    memcpy(out, FED_NODE_STATE_MAGIC, sizeof FED_NODE_STATE_MAGIC);
    fed_put_u32le(out + 8, FED_NODE_STATE_VERSION);
    fed_put_u32le(out + 12, (uint32_t)role);
    fed_put_u64le(out + 16, round);
}

fed_err fedi_node_resume_latest(fed_node *n, fed_store_ckpt *ck, uint64_t *round)
{
    fed_err e;

    memset(ck, 0, sizeof *ck);
    if ((e = fed_store_latest_valid_checkpoint(n->cfg.store, ck, NULL)) != FED_OK)
        return e;
    return node_state_decode(ck, n->cfg.role, round);
}

static fed_err node_state_decode(const fed_store_ckpt *c, fed_node_role role, uint64_t *round)
{
    const fed_store_section *s = fed_store_ckpt_find(c, FED_NODE_SEC_STATE);
    const uint8_t *b;

    if (!s || s->len != FED_NODE_STATE_BYTES)
        return FED_ERR_FORMAT;
    b = s->data;
    if (memcmp(b, FED_NODE_STATE_MAGIC, sizeof FED_NODE_STATE_MAGIC) != 0)
        return FED_ERR_MAGIC;
    if (fed_get_u32le(b + 8) != FED_NODE_STATE_VERSION)
        return FED_ERR_VERSION;
    if (fed_get_u32le(b + 12) != (uint32_t)role) {
        fed_log(FED_LOG_ERROR, "node: the database belongs to another role");
        return FED_ERR_ROLE;
    }
    *round = fed_get_u64le(b + 16);
    return *round == c->round ? FED_OK : FED_ERR_FORMAT;
}
