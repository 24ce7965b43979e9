/* peer.c - the peer role: decentralized training with no aggregator. Each
 * round a peer trains on its shard (a job), enters the trained model into
 * its push-sum state, sends its round's out-neighbours their running totals
 * (SHARE requests, answered ACK), waits as its consistency model says, adds
 * the totals that came in sender-key order, evaluates, and commits the round
 * and a checkpoint. Owns the push-sum state and the topology; the member
 * list and its PEERS gossip are peer_members.c. Never sees another peer's
 * data. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "core/opt.h"
#include "crypto/envelope.h"
#include "gossip/pushsum.h"
#include "gossip/topology.h"
#include "node/peer_impl.h"
#include "node/test_hooks.h"

#define NODE_SEC_PUSHSUM "pushsum"
/* all-reduce with groups: the weight the model stands for (ar_carry), f64 LE;
   absent (another mixing, an older checkpoint): 1 */
#define NODE_SEC_AR_CARRY "allreduce.carry"

/* ---- configuration ---- */

static fed_err parse_sync(const char *s, node_mesh *p)
{
    char *end;

    if (!strcmp(s, "bsp") || !s[0])
        p->sync = SYNC_BSP;
    else if (!strcmp(s, "bap"))
        p->sync = SYNC_BAP;
    else if (!strncmp(s, "ssp:", 4)) {
        unsigned long v = strtoul(s + 4, &end, 10);

        if (end == s + 4 || *end || v > 1000)
            return FED_ERR_SPEC;
        p->sync = SYNC_SSP;
        p->ssp_lag = (uint32_t)v;
    } else if (!strncmp(s, "asp:", 4)) {
        p->asp_thresh = fed_strtod_decimal(s + 4, &end);
        if (end == s + 4 || *end || !(p->asp_thresh >= 0 && p->asp_thresh < 1e6))
            return FED_ERR_SPEC;
        p->sync = SYNC_ASP;
    } else {
        return FED_ERR_SPEC;
    }
    return FED_OK;
}

static fed_err parse_mixing(const char *s, node_mesh *p)
{
    if (!strcmp(s, "pushsum") || !s[0])
        p->mix = MIX_PUSHSUM;
    else if (!strcmp(s, "plain"))
        p->mix = MIX_PLAIN;
    else if (!strcmp(s, "metropolis"))
        p->mix = MIX_METROPOLIS;
    else if (!strcmp(s, "pairwise"))
        p->mix = MIX_PAIRWISE;
    else if (!strcmp(s, "allreduce"))
        p->mix = MIX_ALLREDUCE;
    else
        return FED_ERR_SPEC;
    return FED_OK;
}

/* All-reduce is a barrier by nature: bsp only, on its own topologies. */
static fed_err check_allreduce(const node_mesh *p, const char *topology)
{
    fed_gossip_ar_topo t;
    uint32_t k;

    if (p->mix != MIX_ALLREDUCE)
        return FED_OK;
    if (p->sync != SYNC_BSP)
        return FED_ERR_UNSUPPORTED;
    return fed_gossip_ar_parse(topology, &t, &k);
}

fed_err fed_node_peer_check(const char *topology, const char *sync, const char *mixing)
{
    node_mesh p;

    memset(&p, 0, sizeof p);
    if (parse_sync(sync, &p) != FED_OK || parse_mixing(mixing, &p) != FED_OK)
        return FED_ERR_SPEC;
    if (p.mix == MIX_ALLREDUCE)
        return check_allreduce(&p, topology);
    return fed_gossip_topo_spec_check(topology) != FED_OK ? FED_ERR_SPEC : FED_OK;
}

const char *fedi_node_peer_gossip_topology(const fed_node_config *c)
{
    /* all-reduce schedules are not gossip topologies: the member list and
       the topology object of push-sum stay on a plain ring */
    if (!strcmp(c->peer.mixing, "allreduce"))
        return "ring";
    return c->peer.topology[0] ? c->peer.topology : "ring";
}

/* The model every peer starts from, and the one it evaluates in: its own,
 * or cfg.hooks->eval_model (lent; its parameters are set before each use). */
static fed_err build_model_parts(fed_node *n)
{
    node_mesh *p = n->mesh;
    const fed_node_config *c = &n->cfg;
    fed_model *m = c->hooks ? c->hooks->eval_model : NULL;
    fed_rng rng;
    fed_err e;

    if (c->peer.mix_only) {
        if (!c->peer.init || !c->peer.init_dim)
            return FED_ERR_INVAL;
        p->dim = c->peer.init_dim;
        return FED_OK;
    }
    if (!c->data.train || !c->data.shard || !c->data.shard_n)
        return FED_ERR_INVAL;
    if (m && (strcmp(fed_model_spec(m), c->spec) != 0 || fed_model_max_batch(m) != 256))
        return FED_ERR_SHAPE; /* a lent model of another spec: the caller's mistake */
    if (!m && (e = fed_model_new(fed_node_cfg_whole(c), c->shape, c->be, c->pool, c->shards, 256,
                                 &m)) != FED_OK)
        return e;
    p->dim = fed_model_nparams(m);
    p->flops = fed_model_flops_per_sample(m);
    fed_rng_seed(&rng, c->seed); /* every peer starts from the same model */
    if ((e = fed_model_init(m, &rng)) == FED_OK && c->init_params)
        e = fed_model_set_params(m, c->init_params);
    if (e == FED_OK && (p->model = fed_malloc(p->dim * sizeof(float))))
        e = fed_model_get_params(m, p->model);
    else if (e == FED_OK)
        e = FED_ERR_NOMEM;
    if (c->hooks && m == c->hooks->eval_model)
        p->eval = c->data.test ? m : NULL;
    else if (e == FED_OK && c->data.test)
        p->eval = p->own_eval = m;
    else
        fed_model_free(m);
    return e;
}

static fed_err fed_node_peer_new(fed_node *n)
{
    const fed_node_config *c = &n->cfg;
    node_mesh *p = fed_calloc(1, sizeof *p);
    int changed;
    fed_err e;

    if (!p)
        return FED_ERR_NOMEM;
    n->mesh = p;
    if ((e = fedi_node_peer_table_open(n)) != FED_OK)
        return e;
    if ((e = parse_sync(c->peer.sync, p)) != FED_OK || (e = parse_mixing(c->peer.mixing, p)) != FED_OK)
        return e;
    if ((e = check_allreduce(p, c->peer.topology)) != FED_OK) {
        fed_log(FED_LOG_ERROR, e == FED_ERR_UNSUPPORTED
                    ? "peer: --mixing allreduce is a barrier by nature: --sync %s cannot go "
                      "with it (use bsp)"
                    : "peer: --mixing allreduce takes --topology ring, tree, tree:K or butterfly, "
                      "not %s",
                e == FED_ERR_UNSUPPORTED ? c->peer.sync : c->peer.topology);
        return e;
    }
    if (c->peer.group_size && (p->mix != MIX_ALLREDUCE || c->peer.group_size < 2)) {
        fed_log(FED_LOG_ERROR, "peer: --group-size %u needs --mixing allreduce and at least 2",
                c->peer.group_size);
        return FED_ERR_SPEC;
    }
    if ((e = fedi_node_peer_rebuild_members(n, &changed)) != FED_OK ||
        (e = build_model_parts(n)) != FED_OK)
        return e;
    fed_wire_set_member_fn(n->wire, fedi_node_peer_wire_member, n);
    if (p->mix == MIX_METROPOLIS && !fed_gossip_topo_symmetric(p->topo)) {
        fed_log(FED_LOG_ERROR, "peer: metropolis weights need a symmetric topology, not %s",
                c->peer.topology);
        return FED_ERR_SPEC;
    }
    if ((e = fed_gossip_ps_new(p->dim, p->mix == MIX_PLAIN, &p->ps)) != FED_OK)
        return e;
    if (c->peer.mix_only)
        fed_gossip_ps_set(p->ps, c->peer.init, 1.0);
    else
        fed_gossip_ps_set_model(p->ps, p->model);
    p->trained = fed_malloc(p->dim * sizeof(float));
    if (p->sync == SYNC_ASP) /* asp:T alone compares with the model last sent */
        p->sent = fed_calloc(p->dim, sizeof(float));
    if (!p->trained || (p->sync == SYNC_ASP && !p->sent))
        return FED_ERR_NOMEM;
    return FED_OK;
}

static void fed_node_peer_free(fed_node *n)
{
    node_mesh *p = n->mesh;

    if (!p)
        return;
    fed_gossip_topo_free(p->topo);
    fed_gossip_ps_free(p->ps);
    fed_gossip_peers_free(p->own_table);
    fed_model_free(p->own_eval);
    fed_free(p->mem);
    fed_free(p->recs);
    fed_free(p->model);
    fed_free(p->trained);
    fed_free(p->sent);
    fed_free(p->nbr);
    fed_free(p->in);
    fed_free(p->okeys);
    fed_free(p->frac);
    fed_free(p->vec);
    fedi_node_peer_ar_free(p);
    fedi_node_train_job_release(&p->job);
    fed_free(p);
    n->mesh = NULL;
}

/* ---- checkpoints ---- */

static fed_err resume(fed_node *n)
{
    node_mesh *p = n->mesh;
    fed_store_ckpt ck;
    const fed_store_section *s;
    uint64_t round = 0;
    fed_err e;

    e = fedi_node_resume_latest(n, &ck, &round);
    if (e == FED_ERR_NOTFOUND)
        return FED_OK;
    if (e == FED_OK && !(s = fed_store_ckpt_find(&ck, NODE_SEC_PUSHSUM)))
        e = FED_ERR_FORMAT;
    if (e == FED_OK)
        e = fed_gossip_ps_load(p->ps, s->data, s->len);
    if (e == FED_OK && (s = fed_store_ckpt_find(&ck, NODE_SEC_AR_CARRY))) {
        double w = s->len == 8 ? fed_get_f64le(s->data) : 0;

        if (w > 0 && isfinite(w))
            p->ar_carry = w;
        else
            e = FED_ERR_FORMAT;
    }
    if (e == FED_OK) {
        n->round = round;
        p->rejoining = 1;
        if (p->model)
            fed_gossip_ps_estimate(p->ps, p->model);
        fed_log(FED_LOG_INFO, "peer: resumed from the checkpoint of round %llu",
                (unsigned long long)round);
    } else {
        fed_log(FED_LOG_ERROR, "peer: cannot resume: %s", fed_strerror(e));
    }
    fed_store_ckpt_fini(&ck);
    return e;
}

/* The round row, who was mixed in, counters and the checkpoint: one
 * transaction. */
static fed_err commit_round(fed_node *n, uint64_t round, const fed_node_round_info *info,
                            uint8_t hash[32])
{
    node_mesh *p = n->mesh;
    fed_store *st = n->cfg.store;
    const fed_wire_counters *wc = fed_wire_get_counters(n->wire);
    uint8_t state[FED_NODE_STATE_BYTES], *ps = NULL, carry[8];
    size_t ps_len = 0;
    fed_store_round row;
    fed_err e;

    int ckpt = !(n->cfg.hooks && n->cfg.hooks->no_checkpoints) &&
               (n->cfg.peer.checkpoint_every <= 1 || round % n->cfg.peer.checkpoint_every == 0 ||
                (n->cfg.rounds && round >= n->cfg.rounds));
    double *est = fed_malloc(p->dim * sizeof *est);

    if (!est)
        return FED_ERR_NOMEM;
    fed_gossip_ps_estimate_f64(p->ps, est); /* the round's model: its estimate */
    fed_crypto_model_hash((const uint8_t *)est, p->dim * sizeof *est, hash);
    fed_free(est);
    if (ckpt && (e = fed_gossip_ps_save(p->ps, &ps, &ps_len)) != FED_OK)
        return e;
    fedi_node_state_encode(state, FED_NODE_PEER, round);
    if ((e = fed_store_begin(st)) != FED_OK)
        goto out;
    for (size_t k = 0; k < p->nrecs && e == FED_OK; k++) { /* in key order */
        const mesh_share_rec *r = &p->recs[k];
        fed_store_contrib c;

        memset(&c, 0, sizeof c);
        c.round = round;
        memcpy(c.peer_key, r->key, 32);
        memcpy(c.digest, r->digest, sizeof c.digest);
        memcpy(c.signature, r->sig, sizeof c.signature);
        c.header = r->header;
        c.header_len = sizeof r->header;
        c.accepted = 1;
        e = fed_store_put_contribution(st, &c);
    }
    memset(&row, 0, sizeof row);
    row.round = round;
    row.start_ms = info->start_ms;
    row.end_ms = fedi_node_wall_ms(n);
    row.loss = info->loss;
    row.accuracy = info->accuracy;
    row.samples = info->samples;
    row.bytes_in = wc->bytes_in - p->bytes_in0;
    row.bytes_out = wc->bytes_out - p->bytes_out0;
    row.peers = info->merged;
    row.lr = info->lr; /* 0 (NULL) for a round that only mixed */
    snprintf(row.strategy, sizeof row.strategy, "%s %s", n->cfg.peer.mixing[0] ? n->cfg.peer.mixing : "pushsum",
             n->cfg.peer.sync[0] ? n->cfg.peer.sync : "bsp");
    memcpy(row.model_hash, hash, 32);
    if (e == FED_OK)
        e = fed_store_put_round(st, &row);
    if (e == FED_OK && ckpt) {
        fed_store_section sec[3] = {
            {FED_NODE_SEC_STATE, state, sizeof state},
            {NODE_SEC_PUSHSUM, ps, ps_len},
            {NODE_SEC_AR_CARRY, carry, sizeof carry},
        };

        fed_put_f64le(carry, p->ar_carry > 0 ? p->ar_carry : 1.0);
        e = fed_store_checkpoint_write(st, round, sec, p->mix == MIX_ALLREDUCE ? 3 : 2, NULL);
    }
    if (e == FED_OK)
        e = fed_store_commit(st);
    if (e != FED_OK)
        fed_store_rollback(st);
out:
    fed_free(ps);
    return e;
}

/* ---- memory ---- */

static void mem_now(const fed_node *n, fed_node_peer_mem *m)
{
    const node_mesh *p = n->mesh;
    const fed_model *jm = p->job.model;
    size_t held = 0, f = p->dim * sizeof(float);
    fed_optim_cfg oc;

    memset(m, 0, sizeof *m);
    m->params = (p->model ? f : 0) + (p->trained ? f : 0) + (p->sent ? f : 0);
    m->totals = fed_gossip_ps_bytes(p->ps, &held);
    m->held = held;
    if (!n->cfg.peer.mix_only) { /* as the training job makes it (train_job.c) */
        fed_optim_cfg_default(&oc, (fed_optim_kind)n->cfg.optimizer);
        if (oc.kind == FED_OPTIM_SGD)
            oc.momentum = n->cfg.momentum;
        m->optim = fed_optim_state_bytes(&oc, p->dim);
    }
    m->buffers = p->cap_vec + n->cap_tx + fedi_node_stream_bytes(n);
    m->models = (jm ? fed_model_bytes(jm) : 0) + (p->own_eval ? fed_model_bytes(p->own_eval) : 0);
    m->store = n->cfg.store ? fed_store_cache_bytes(n->cfg.store) : 0;
    /* the member list, and nbr, in, okeys and frac (grow_scratch) */
    m->tables = p->n * (sizeof *p->mem + 2 * sizeof(uint32_t) + 32 + sizeof(double)) +
                p->cap_recs * sizeof *p->recs;
    m->state = (p->model ? f : 0) + m->totals + m->optim;
    m->total = m->params + m->totals + m->held + m->optim + m->buffers + m->models + m->store +
               m->tables;
}

/* The peak kept: the largest total noted. */
static void note_mem(fed_node *n)
{
    fed_node_peer_mem m;

    mem_now(n, &m);
    if (m.total > n->mesh->mem_peak.total)
        n->mesh->mem_peak = m;
}

fed_err fed_node_peer_mem_get(const fed_node *n, fed_node_peer_mem *now, fed_node_peer_mem *peak)
{
    if (!n->mesh)
        return FED_ERR_ROLE;
    if (now)
        mem_now(n, now);
    if (peak)
        *peak = n->mesh->mem_peak;
    return FED_OK;
}

/* ---- rounds ---- */

/* All rounds done: the training rounds, then the final mixing-only ones. */
static int all_done(const fed_node *n)
{
    return n->cfg.rounds && n->round >= (uint64_t)n->cfg.rounds + n->cfg.peer.final_mix;
}

static void evaluate(fed_node *n, fed_node_round_info *info)
{
    node_mesh *p = n->mesh;
    fed_step_stats st = {0};

    info->loss = p->samples ? p->loss : NAN;
    info->accuracy = NAN;
    if (!p->eval || !n->cfg.data.test ||
        (n->cfg.hooks && n->cfg.hooks->no_final_mix_eval && n->cfg.rounds &&
         info->round > n->cfg.rounds))
        return;
    if (fed_model_set_params(p->eval, p->model) != FED_OK ||
        fed_train_evaluate_all(p->eval, n->cfg.data.test, &st) != FED_OK || !st.samples)
        return;
    info->accuracy = (double)st.correct / (double)st.samples;
}

static void next_round_soon(fed_node *n)
{
    n->mesh->state = MESH_IDLE;
    fedi_node_arm_in(n, 0, NODE_TIMER_ROUND); /* a failure stops the node */
}

static int cmp_rec(const void *a, const void *b)
{
    return memcmp(((const mesh_share_rec *)a)->key, ((const mesh_share_rec *)b)->key, 32);
}

/* The record of a SHARE taken: the sender's, replacing any it had. */
static fed_err keep_rec(node_mesh *p, const fed_wire_msg *m)
{
    mesh_share_rec *r = NULL;

    for (size_t i = 0; i < p->nrecs && !r; i++)
        if (!memcmp(p->recs[i].key, m->hdr.sender, 32))
            r = &p->recs[i];
    if (!r) {
        if (p->nrecs == p->cap_recs) {
            size_t cap = p->cap_recs ? 2 * p->cap_recs : 4;
            mesh_share_rec *v = fed_realloc(p->recs, cap * sizeof *v);

            if (!v)
                return FED_ERR_NOMEM;
            p->recs = v;
            p->cap_recs = cap;
        }
        r = &p->recs[p->nrecs++];
        memcpy(r->key, m->hdr.sender, 32);
    }
    memcpy(r->header, m->header, FED_WIRE_HEADER_BYTES);
    memcpy(r->digest, m->digest, sizeof r->digest);
    memcpy(r->sig, m->sig, sizeof r->sig);
    return FED_OK;
}

/* The totals that came are added (or the all-reduce's mean is in); the
 * round is recorded. */
fed_err fedi_node_peer_finish_round(fed_node *n)
{
    node_mesh *p = n->mesh;
    uint64_t round = n->round + 1;
    fed_node_round_info info;
    fed_err e;

    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_DEADLINE);
    memset(&info, 0, sizeof info);
    info.round = round;
    note_mem(n); /* every total of the round held */
    /* the totals held now are the ones apply adds: their records, in key order */
    if (p->nrecs > 1)
        qsort(p->recs, p->nrecs, sizeof *p->recs, cmp_rec);
    info.merged = (uint32_t)fed_gossip_ps_apply(p->ps);
    if (p->mix == MIX_ALLREDUCE)
        info.merged = p->ar_merged;
    info.samples = p->samples;
    info.lr = p->samples ? fedi_node_round_lr(n, round) : 0;
    if (p->model)
        fed_gossip_ps_estimate(p->ps, p->model);
    evaluate(n, &info);
    info.start_ms = fedi_node_wall_ms(n) - (n->env.now_ms(n->env.self) - p->round_start_ms);
    e = commit_round(n, round, &info, info.model_hash);
    p->nrecs = 0;
    note_mem(n); /* the store after the round's pages */
    if (e != FED_OK) {
        fed_log(FED_LOG_ERROR, "peer: recording round %llu failed: %s", (unsigned long long)round,
                fed_strerror(e));
        /* the state lives on in memory; the next commit checkpoints it */
    }
    n->round = round;
    info.end_ms = fedi_node_wall_ms(n);
    fed_log(FED_LOG_INFO, "peer: round %llu mixed %u shares, accuracy %.4f",
            (unsigned long long)round, info.merged, info.accuracy);
    if (n->cfg.on_round)
        n->cfg.on_round(n->cfg.observer, n, &info);
    if (all_done(n)) {
        p->state = MESH_DONE;
        n->finished = 1;
        return FED_OK;
    }
    next_round_soon(n);
    return FED_OK;
}

/* Liveness, counted in rounds: an in-neighbour whose share did not come by
 * a round's deadline is suspected; after two such rounds in a row nobody
 * waits for it any more, until a frame from it welcomes it back. */
static int member_dropped(const fed_node *n, size_t k) { return n->mesh->mem[k].missed >= 2; }

static void note_missing(fed_node *n, uint64_t need)
{
    node_mesh *p = n->mesh;

    for (size_t i = 0; i < p->nin; i++) {
        mesh_member *m = &p->mem[p->in[i]];

        if (fed_gossip_ps_last_round(p->ps, m->key) >= need || m->missed >= 2)
            continue;
        if (++m->missed == 1)
            fed_log(FED_LOG_INFO, "peer: no share from member %u this round: suspected",
                    p->in[i]);
        else
            fed_log(FED_LOG_WARN, "peer: member %u silent two rounds: not waited for until it "
                    "is heard again", p->in[i]);
    }
}

/* Whether the round can end: bsp wants every live in-neighbour's share of
 * this round; ssp:S lets it end while none lags more than S rounds. */
static int may_finish(fed_node *n)
{
    node_mesh *p = n->mesh;
    uint64_t round = n->round + 1;
    uint64_t need = p->sync == SYNC_BSP ? round : round > p->ssp_lag ? round - p->ssp_lag : 0;

    if (p->sync == SYNC_ASP || p->sync == SYNC_BAP)
        return 1;
    for (size_t i = 0; i < p->nin; i++) {
        size_t k = p->in[i];

        if (fed_gossip_ps_last_round(p->ps, p->mem[k].key) < need && !member_dropped(n, k))
            return 0;
    }
    return 1;
}

/* Fractions of (x, w) for this round's out-neighbours (nbr, m of them). */
static size_t fractions(fed_node *n, uint64_t round, size_t m)
{
    node_mesh *p = n->mesh;

    if (p->mix == MIX_PAIRWISE && m > 0) { /* one partner, half each */
        p->nbr[0] = p->nbr[round % m];
        p->frac[0] = 0.5;
        return 1;
    }
    for (size_t j = 0; j < m; j++) {
        if (p->mix == MIX_METROPOLIS) {
            uint32_t *tmp = p->in; /* free until the in-list is computed */
            size_t dj = fed_gossip_topo_out(p->topo, p->nbr[j], round, tmp);

            p->frac[j] = 1.0 / (1.0 + (double)(dj > m ? dj : m));
        } else {
            p->frac[j] = 1.0 / (double)(m + 1);
        }
    }
    return m;
}

/* asp:T: is the model's relative change since the last send above T? */
static int changed_enough(const node_mesh *p)
{
    double d = 0, s = 0;

    if (!p->sent_once || !p->model)
        return 1;
    for (size_t i = 0; i < p->dim; i++) {
        double a = (double)p->model[i] - (double)p->sent[i];

        d += a * a;
        s += (double)p->sent[i] * (double)p->sent[i];
    }
    return d > p->asp_thresh * p->asp_thresh * (s > 0 ? s : 1e-30);
}

static fed_err send_share(fed_node *n, uint64_t round, size_t k)
{
    node_mesh *p = n->mesh;
    const double *x;
    fed_codec f64 = {.id = FED_CODEC_F64};
    size_t len = 0, need = 0;
    fed_wire_hdr h;
    fed_wire_block b;
    double w;
    fed_err e;

    if ((e = fed_gossip_ps_total(p->ps, p->mem[k].key, &x, &w)) != FED_OK)
        return e;
    if ((e = fed_codec_size(&f64, p->dim, &need)) != FED_OK)
        return e;
    if (need > p->cap_vec) {
        uint8_t *v = fed_realloc(p->vec, need);

        if (!v)
            return FED_ERR_NOMEM;
        p->vec = v;
        p->cap_vec = need;
    }
    if ((e = fed_codec_encode_f64(x, p->dim, p->vec, p->cap_vec, &len)) != FED_OK)
        return e;
    /* addressed to any epoch (0): a neighbour's restart must not stop its
       shares, and a replayed total adds nothing (gossip/wire.h) */
    if ((e = fedi_node_header(n, FED_WIRE_SHARE, p->mem[k].key, round, 0, FED_CODEC_F64, &h)) !=
        FED_OK)
        return e;
    memset(&b, 0, sizeof b);
    b.samples = p->samples;
    b.weight = w;
    /* p->vec is encoded anew for the next out-neighbour at once: a stream
       (a SHARE over a frame) sends a copy of its own */
    return fedi_node_emit_vec_copy(n, NULL, &h, &b, p->vec, len);
}

/* Shares out, then wait (or not) for the in-neighbours'. */
static fed_err mix(fed_node *n)
{
    node_mesh *p = n->mesh;
    uint64_t round = n->round + 1;
    size_t m = fed_gossip_topo_out(p->topo, p->self, round, p->nbr);
    fed_err e = FED_OK;

    if (p->mix == MIX_ALLREDUCE)
        return fedi_node_peer_ar_begin(n);
    fedi_node_peer_advertise_due(n, round, m);
    if (p->sync != SYNC_ASP || changed_enough(p)) {
        m = fractions(n, round, m);
        for (size_t j = 0; j < m; j++)
            memcpy(p->okeys[j], p->mem[p->nbr[j]].key, 32);
        if ((e = fed_gossip_ps_split(p->ps, (const uint8_t(*)[32])p->okeys, p->frac, m)) != FED_OK)
            return e;
        for (size_t j = 0; j < m; j++)
            (void)send_share(n, round, p->nbr[j]); /* a lost one is made good by the next */
        if (p->model && p->sent) {
            memcpy(p->sent, p->model, p->dim * sizeof *p->sent);
            p->sent_once = 1;
        }
    }
    p->nin = fed_gossip_topo_in(p->topo, p->self, round, p->in);
    p->state = MESH_WAITING;
    if (may_finish(n))
        return fedi_node_peer_finish_round(n);
    if (fedi_node_arm(n, p->round_start_ms + n->cfg.deadline_ms, NODE_TIMER_DEADLINE) != FED_OK)
        return n->failed; /* the node stops: bsp would wait forever */
    return e;
}

/* A restarted peer skips to the round its neighbours are in, once their
 * shares tell it (a live peer a round or two behind just goes on: skipping
 * would leave its neighbours waiting for shares it never sends). */
static void catch_up(fed_node *n)
{
    node_mesh *p = n->mesh;
    /* all-reduce groups: another group's member may legitimately be a round
       ahead; only two rounds ahead says this one is left behind */
    uint64_t ahead = 0, slack = !p->rejoining && p->mix == MIX_ALLREDUCE && n->cfg.peer.group_size;

    for (size_t k = 0; k < p->n; k++)
        if (k != p->self && p->mem[k].seen_round > ahead)
            ahead = p->mem[k].seen_round;
    if (ahead > n->round + 1 + slack) {
        fed_log(FED_LOG_INFO, "peer: rejoining at round %llu, neighbours at %llu: skipping ahead",
                (unsigned long long)n->round, (unsigned long long)ahead);
        n->round = ahead - 1 - slack;
    }
    if (ahead > 0)
        p->rejoining = 0;
}

static fed_err begin_round(fed_node *n)
{
    node_mesh *p = n->mesh;
    const fed_node_config *c = &n->cfg;
    const fed_wire_counters *wc = fed_wire_get_counters(n->wire);
    node_train_job *j = &p->job;
    fed_err e;

    if (p->rejoining || p->mix == MIX_ALLREDUCE) /* all-reduce: a member left behind (cut
                                                     off, stalled) skips to the others' round */
        catch_up(n);
    fedi_node_peer_refresh_members(n);
    if (all_done(n)) {
        p->state = MESH_DONE;
        n->finished = 1;
        return FED_OK;
    }
    p->round_start_ms = n->env.now_ms(n->env.self);
    p->bytes_in0 = wc->bytes_in;
    p->bytes_out0 = wc->bytes_out;
    p->samples = 0;
    if (c->peer.mix_only || (c->rounds && n->round >= c->rounds))
        return mix(n); /* no training: consensus, or the final mixing rounds */
    memset(&j->set, 0, sizeof j->set);
    snprintf(j->set.spec, sizeof j->set.spec, "%s", c->spec);
    j->set.graph = c->graph; /* borrowed as the config's */
    j->set.local_epochs = c->local_epochs;
    j->set.batch = c->rank_batch ? c->rank_batch : c->batch;
    j->coll = c->coll;
    j->set.optimizer = c->optimizer;
    j->set.lr = fedi_node_round_lr(n, n->round + 1); /* every peer's rate of this round */
    j->set.momentum = c->momentum;
    j->set.weight_decay = c->weight_decay;
    j->set.input_scale = (uint32_t)c->shape.scale;
    j->job.fn = fedi_node_train_job_run;
    j->job.user = n;
    j->round = n->round + 1;
    j->seed = c->seed ^ ((uint64_t)n->key[0] | (uint64_t)n->key[1] << 8 |
                         (uint64_t)n->key[2] << 16 | (uint64_t)n->key[3] << 24);
    j->be = c->be;
    j->pool = c->pool;
    j->shards = c->shards;
    j->accumulate = c->accumulate;
    j->recompute = c->recompute;
    j->precision = c->precision;
    j->data = c->data.train;
    j->aug = c->data.augment;
    j->noise_std = c->data.noise_std;
    j->shard = c->data.shard;
    j->shard_n = c->data.shard_n;
    j->global = p->model;
    j->drop_model = c->hooks && c->hooks->train_model_per_job;
    j->nparams = p->dim;
    j->params = p->trained;
    j->err = FED_OK;
    p->state = MESH_TRAINING;
    n->env.charge(n->env.self, p->flops * (double)c->data.shard_n * c->local_epochs);
    if ((e = (fed_err)n->env.submit(n->env.self, &j->job)) != FED_OK)
        next_round_soon(n); /* tried again from the top */
    return e;
}

static void fed_node_peer_progress(const fed_node *n, fed_node_progress *out)
{
    const node_mesh *p = n->mesh;

    out->round_open = p->state == MESH_TRAINING || p->state == MESH_WAITING;
    out->round_due_ms = p->state == MESH_WAITING ? p->round_start_ms + n->cfg.deadline_ms : 0;
}

static fed_err fed_node_peer_start(fed_node *n)
{
    fed_err e = resume(n);

    if (e != FED_OK)
        return e;
    return begin_round(n);
}

static fed_err fed_node_peer_on_job(fed_node *n, fed_job *job)
{
    node_mesh *p = n->mesh;
    node_train_job *j = &p->job;

    if (job != &j->job)
        return FED_ERR_INTERNAL;
    if (p->state != MESH_TRAINING)
        return FED_OK;
    if (j->err != FED_OK) {
        fed_log(FED_LOG_ERROR, "peer: training round %llu failed: %s",
                (unsigned long long)(n->round + 1), fed_strerror(j->err));
        fedi_node_arm_in(n, n->cfg.transfer.retry_ms, NODE_TIMER_ROUND); /* a failure stops the node */
        p->state = MESH_IDLE;
        return j->err;
    }
    memcpy(p->model, p->trained, p->dim * sizeof *p->model);
    fed_gossip_ps_set_model(p->ps, p->model);
    p->loss = j->loss;
    p->samples = j->samples;
    return mix(n);
}

/* ---- frames ---- */

static void fed_node_peer_prepare_open(fed_node *n, node_open *op)
{
    op->expect_n = n->mesh->dim;
    op->expect_max = n->mesh->dim + 1; /* a SLICE: a range of the model and its weight */
    op->expect_codec = FED_CODEC_F64;
}

static fed_err on_share(fed_node *n, node_open *op)
{
    node_mesh *p = n->mesh;
    const fed_wire_msg *m = &op->msg;
    size_t k = fedi_node_peer_member_of(p, m->hdr.sender);
    int taken = 0;
    fed_err e;

    if (k == SIZE_MAX || k == p->self || !op->vec64) {
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        (void)fedi_node_ack(n, op->req, &m->hdr, FED_ERR_ROLE, 0);
        op->req = NULL;
        return FED_ERR_ROLE;
    }
    e = fed_gossip_ps_receive(p->ps, m->hdr.sender, m->hdr.sender_epoch, m->hdr.round, op->vec64,
                              m->block.weight, &taken);
    if (e == FED_OK && taken) { /* not a resend or an overtaken share: the record's */
        mesh_member *mb = &p->mem[k];

        if (m->hdr.round > mb->seen_round)
            mb->seen_round = m->hdr.round;
        if (keep_rec(p, m) != FED_OK) /* the total is held and will be added all the same */
            fed_log(FED_LOG_WARN, "peer: no memory for the record of member %zu's share", k);
    } else if (e != FED_OK) {
        fed_wire_note_reject(n->wire, &m->hdr, e);
    }
    (void)fedi_node_ack(n, op->req, &m->hdr, e, 0);
    op->req = NULL;
    if (e == FED_OK && p->state == MESH_WAITING && may_finish(n))
        return fedi_node_peer_finish_round(n);
    return e;
}

/* The ACK of one of our SHARE frames: push the stream's next chunk. */
static fed_err on_ack(fed_node *n, const fed_wire_msg *m)
{
    int done = 1;
    fed_err e;

    if (fedi_node_peer_ar_on_ack(n, m, &e))
        return e;
    if (m->block.status != FED_OK || !fedi_node_tx_active_round(n, m->hdr.sender, m->hdr.round))
        return FED_OK;
    return fedi_node_tx_push(n, m->hdr.sender, &done);
}

static fed_err fed_node_peer_on_msg(fed_node *n, node_open *op)
{
    node_mesh *p = n->mesh;
    const fed_wire_msg *m = &op->msg;
    size_t k = fedi_node_peer_member_of(p, m->hdr.sender);

    if (k != SIZE_MAX) {
        if (p->mem[k].missed >= 2)
            fed_log(FED_LOG_INFO, "peer: member %zu is back", k);
        p->mem[k].missed = 0;
    }
    if (m->hdr.type == FED_WIRE_SHARE && op->req)
        return on_share(n, op);
    if (m->hdr.type == FED_WIRE_SLICE && op->req)
        return fedi_node_peer_ar_on_slice(n, op);
    if ((m->hdr.type == FED_WIRE_AR_ABORT || m->hdr.type == FED_WIRE_AR_VERIFY) && op->req)
        return fedi_node_peer_ar_on_control(n, op);
    if (m->hdr.type == FED_WIRE_PEERS && op->req)
        return fedi_node_peer_on_peers(n, op);
    if (m->hdr.type == FED_WIRE_ACK && !op->req)
        return on_ack(n, m);
    fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
    if (op->req)
        (void)fedi_node_ack(n, op->req, &m->hdr, FED_ERR_ROLE, 0);
    op->req = NULL;
    return FED_ERR_ROLE;
}

static fed_err fed_node_peer_on_timer(fed_node *n, uint32_t id)
{
    node_mesh *p = n->mesh;

    switch (id) {
    case NODE_TIMER_ROUND:
        return p->state == MESH_IDLE ? begin_round(n) : FED_OK;
    case NODE_TIMER_RETRY:
        return fedi_node_peer_ar_on_retry(n);
    case NODE_TIMER_DEADLINE:
        if (p->state != MESH_WAITING)
            return FED_OK;
        if (p->mix == MIX_ALLREDUCE)
            return fedi_node_peer_ar_on_deadline(n);
        if (!may_finish(n))
            note_missing(n, p->sync == SYNC_BSP ? n->round + 1
                            : n->round + 1 > p->ssp_lag ? n->round + 1 - p->ssp_lag : 0);
        return fedi_node_peer_finish_round(n);
    default:
        return FED_ERR_INVAL;
    }
}

size_t fed_node_peer_dim(const fed_node *n) { return n->mesh ? n->mesh->dim : 0; }

fed_err fed_node_peer_estimate(const fed_node *n, double *out)
{
    if (!n->mesh)
        return FED_ERR_ROLE;
    fed_gossip_ps_estimate_f64(n->mesh->ps, out);
    return FED_OK;
}

fed_err fed_node_peer_mass(const fed_node *n, double *x, double *w)
{
    if (!n->mesh)
        return FED_ERR_ROLE;
    memcpy(x, fed_gossip_ps_x(n->mesh->ps), n->mesh->dim * sizeof *x);
    *w = fed_gossip_ps_w(n->mesh->ps);
    return FED_OK;
}

/* The peer's part of fed_node_new's configuration check. */
static fed_err fed_node_peer_check_config(const fed_node_config *c)
{
    return c->deadline_ms > 0 && c->local_epochs >= 1 && c->batch >= 1 && c->lr > 0 &&
                   c->momentum >= 0 && c->momentum < 1 && c->weight_decay >= 0 &&
                   c->weight_decay < 1
               ? FED_OK
               : FED_ERR_BAD_VALUE;
}

const node_role_ops fedi_node_peer_ops = {
    .check = fed_node_peer_check_config,
    .create = fed_node_peer_new,
    .destroy = fed_node_peer_free,
    .start = fed_node_peer_start,
    .stop = NULL, /* nothing to save */
    .prepare_open = fed_node_peer_prepare_open,
    .on_msg = fed_node_peer_on_msg,
    .on_timer = fed_node_peer_on_timer,
    .on_job = fed_node_peer_on_job,
    .progress = fed_node_peer_progress,
    .bad_reply = NULL, /* a share that does not decode is refused as it is */
    .pulled = NULL,
    .rate_from_model = 0,
    .streams_in_replies = 0,
    .tells_old_epoch = 0,
};
