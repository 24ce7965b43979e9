/* aggregator.c - the aggregator role: holds clients' HELLO/NEXT until a
 * round starts, samples the round's clients, answers them with the round's
 * MODEL, collects their DELTAs until all came or the deadline, merges them
 * (fed_merge, in client-key order), evaluates, and commits the round row,
 * contributions, counters and a checkpoint in one transaction; in async
 * mode (FedBuff) answers every request at once and merges whenever K deltas
 * are buffered. Owns the global model and the held requests; never sees a
 * client's data. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "core/rng.h"
#include "crypto/seal.h"
#include "node/ckpt_model.h"
#include "node/node_impl.h"

typedef enum agg_state { AGG_IDLE = 0, AGG_RUNNING = 1, AGG_DONE = 2 } agg_state;

/* A HELLO or NEXT held until a round starts (or poll_ms passes). */
typedef struct agg_hold {
    fed_req *req;
    fed_wire_hdr hdr; /* the request's header: who, which epoch */
    uint64_t since_ms;
} agg_hold;

/* A committed round waiting for the evaluation: its parameters and row. */
typedef struct agg_eval_wait {
    float *params; /* (nparams) */
    fed_node_round_info info;
    fed_store_round row;
} agg_eval_wait;

/* At most this many rounds wait, and no more than AGG_EVAL_QUEUE_BYTES of
 * their parameters (at least one); past that the oldest waiting round is
 * reported without an accuracy. */
#define AGG_EVAL_QUEUE_MAX 8
#define AGG_EVAL_QUEUE_BYTES ((size_t)64 << 20)
/* After a failed round (a failed commit), the next try waits gather_ms,
 * then twice as long each time, up to this. */
#define AGG_RETRY_MAX_MS 60000

/* The held-out evaluation of a committed round, as an idle job on its own
 * copy of the model (the loop goes on with the next round meanwhile, and
 * training anywhere on the machine comes first). Rounds committed while it
 * runs wait in a queue, evaluated in order once CPU time frees up (at the
 * latest when the job ends). */
typedef struct agg_eval {
    fed_job job;
    fed_model *model;          /* a copy of the global's spec, the round's params;
                                  no pool: it runs on one idle thread */
    const fed_dataset *test;
    fed_step_stats st;         /* out */
    fed_err err;               /* out */
    int busy;
    fed_node_round_info info;  /* the round evaluated */
    fed_store_round row;       /* its committed row, completed when done */
    agg_eval_wait wait[AGG_EVAL_QUEUE_MAX]; /* a ring: nwait from head */
    size_t head, nwait, cap_wait;             /* cap_wait: 0 until first used */
} agg_eval;

/* A round's measured figures whose write to its row failed (a full disk):
 * kept until a write goes through (the next commit, the next round's
 * figures, or stop), so a reported accuracy is never only in the log. */
typedef struct agg_pending {
    fed_store_round *rows; /* (n) committed rows with their loss and accuracy */
    size_t n, cap;
    uint32_t tries;        /* failed writes of the oldest one */
} agg_pending;

/* A client sampled for the current round. */
typedef struct agg_part {
    uint8_t key[32];
    int got;          /* its delta is in */
    uint64_t base;    /* the round it trained (< the round filled: stale, async) */
    uint64_t epoch;   /* its sender epoch, as its delta said */
    uint64_t samples;
    float *delta;     /* (nparams) host, owned */
    uint8_t header[FED_WIRE_HEADER_BYTES];
    uint8_t digest[FED_CRYPTO_DIGEST_BYTES];
    uint8_t sig[FED_CRYPTO_SIG_BYTES];
} agg_part;

struct node_agg {
    fed_model *model;      /* the global model, on cfg.be */
    fed_merge *merge;
    fed_codec codec;       /* what clients answer with */
    size_t nparams;
    agg_state state;
    int gathered;          /* gather_ms passed since the last round (or, before round 1,
                              since the first client came): min_clients will do */
    int first_armed;       /* the gather timer was armed for round 1 (arm_first_gather) */
    uint32_t failed;       /* rounds failed in a row (a full disk): the next try waits */
    uint64_t retry_at_ms;  /* no round starts before this (now_ms), after a failure */
    uint64_t round_start_ms;
    agg_hold *holds;
    size_t nholds, cap_holds;
    agg_part *parts;       /* (nparts) sampled this round, sorted by key */
    size_t nparts;
    uint8_t *model_vec;    /* host, f32 encoded for the MODEL; model_vec_len 0: not yet
                              since host last changed */
    size_t model_vec_len, model_vec_cap;
    float *host;           /* (nparams) the global model's parameters on the host, fetched
                              once at start and once after each merge; the checkpoint,
                              the MODEL and the evaluation read them from here */
    float *committed;      /* (nparams) the last committed global, kept while a round
                              merges: a failed commit puts it back */
    float *committed_state;/* (merge state floats) the strategy's state with it, or NULL */
    float **dev;           /* (max_clients) device copies on a non-host backend */
    fed_merge_input *inputs;
    fed_merge_result *results;
    int max_clients;
    fed_store_round last_row;      /* the round just committed (its accuracy
                                      is added once evaluated) */
    agg_eval ev;
    agg_pending pending;   /* figures not in their rows yet */
    uint64_t bytes_in0, bytes_out0; /* wire counters when the round started */
    uint64_t ctr_base[64]; /* wire counters the database held at start (earlier runs) */
};

static int backend_is_host(const fed_backend *be) { return strcmp(be->name, "cpu") == 0; }

static int is_async(const fed_node *n) { return n->cfg.async_k > 0; }

static fed_err async_open_round(fed_node *n);
static fed_err flush_pending(fed_node *n);

/* ---- building and resuming ---- */

static fed_err alloc_scratch(fed_node *n)
{
    node_agg *a = n->agg;
    size_t mc = (size_t)a->max_clients, sf = fed_merge_state_floats(a->merge);

    a->host = fed_malloc(a->nparams * sizeof(float));
    a->committed = fed_malloc(a->nparams * sizeof(float));
    a->committed_state = sf ? fed_malloc(sf * sizeof(float)) : NULL;
    a->dev = fed_calloc(mc, sizeof *a->dev);
    a->inputs = fed_calloc(mc, sizeof *a->inputs);
    a->results = fed_calloc(mc, sizeof *a->results);
    a->parts = fed_calloc(mc, sizeof *a->parts);
    if (!a->host || !a->committed || (sf && !a->committed_state) || !a->dev || !a->inputs ||
        !a->results || !a->parts)
        return FED_ERR_NOMEM;
    return FED_OK;
}

fed_err fed_node_agg_new(fed_node *n)
{
    const fed_node_config *c = &n->cfg;
    node_agg *a = fed_calloc(1, sizeof *a);
    fed_merge_config mc = {.max_clients = FED_MERGE_DEFAULT_MAX_CLIENTS,
                           .weight_cap = c->weight_cap,
                           .pool = c->pool};
    fed_err e;

    if (!a)
        return FED_ERR_NOMEM;
    /* a round takes as many clients as it is told to wait for */
    if (c->min_clients > (uint32_t)mc.max_clients)
        mc.max_clients = (int)c->min_clients;
    if (c->wait_clients > (uint32_t)mc.max_clients)
        mc.max_clients = (int)c->wait_clients;
    n->agg = a;
    a->max_clients = mc.max_clients;
    if ((e = fed_codec_parse(c->codec, &a->codec)) != FED_OK)
        return e;
    if (a->codec.id == FED_CODEC_F64) { /* push-sum's codec: no client's DELTA decodes with it */
        fed_log(FED_LOG_ERROR, "aggregator: codec f64 is for peers' shares; a DELTA takes f32, "
                               "f16, q8 or topk:F");
        return FED_ERR_CODEC;
    }
    if ((e = fed_model_new(c->spec, c->shape, c->be, c->pool, c->shards, 256, &a->model)) != FED_OK)
        return e;
    a->nparams = fed_model_nparams(a->model);
    if ((e = fed_merge_new(c->strategy, a->nparams, &mc, c->be, &a->merge)) != FED_OK)
        return e;
    return alloc_scratch(n);
}

static void parts_clear(node_agg *a)
{
    for (size_t i = 0; i < a->nparts; i++) {
        fed_free(a->parts[i].delta);
        memset(&a->parts[i], 0, sizeof a->parts[i]);
    }
    a->nparts = 0;
}

void fed_node_agg_free(fed_node *n)
{
    node_agg *a = n->agg;

    if (!a)
        return;
    /* held requests are the environment's: forgotten, never answered (the
       simulator has freed them at a crash; the daemon's transport frees
       its own when it closes) */
    if (a->parts)
        parts_clear(a);
    for (int i = 0; a->dev && i < a->max_clients; i++)
        if (a->dev[i])
            n->cfg.be->free(n->cfg.be, a->dev[i]);
    fed_free(a->dev);
    fed_free(a->parts);
    fed_free(a->inputs);
    fed_free(a->results);
    fed_free(a->holds);
    fed_free(a->model_vec);
    fed_free(a->host);
    fed_free(a->committed);
    fed_free(a->committed_state);
    fed_merge_free(a->merge);
    fed_model_free(a->model);
    fed_model_free(a->ev.model);
    for (size_t i = 0; i < AGG_EVAL_QUEUE_MAX; i++)
        fed_free(a->ev.wait[i].params);
    fed_free(a->pending.rows);
    fed_free(a);
    n->agg = NULL;
}

/* The newest valid checkpoint into the global model and strategy state. */
static fed_err resume(fed_node *n)
{
    node_agg *a = n->agg;
    fed_store_ckpt ck;
    fed_node_model_view v;
    const fed_store_section *merge;
    size_t sf = fed_merge_state_floats(a->merge);
    float *state = NULL;
    uint64_t round = 0;
    fed_err e;

    memset(&ck, 0, sizeof ck);
    e = fed_store_latest_valid_checkpoint(n->cfg.store, &ck, NULL);
    if (e == FED_ERR_NOTFOUND)
        return FED_OK;
    if (e != FED_OK)
        return e;
    merge = fed_store_ckpt_find(&ck, FED_CKPT_SEC_MERGE);
    if ((e = fed_node_state_decode(&ck, FED_NODE_AGGREGATOR, &round)) != FED_OK)
        goto out;
    if ((e = fed_node_model_sec_decode(&ck, &v)) != FED_OK) {
        e = FED_ERR_FORMAT;
        goto out;
    }
    if ((e = fed_node_model_view_match(&v, "aggregator", ck.id, n->cfg.spec, n->cfg.shape,
                                       a->nparams)) != FED_OK)
        goto out;
    if (sf && (!merge || merge->len != sf * sizeof(float))) {
        e = FED_ERR_FORMAT;
        goto out;
    }
    fed_get_f32le_n(a->host, v.params, a->nparams);
    if ((e = fed_model_set_params(a->model, a->host)) != FED_OK)
        goto out;
    if (sf) {
        if (!(state = fed_malloc(sf * sizeof *state))) {
            e = FED_ERR_NOMEM;
            goto out;
        }
        fed_get_f32le_n(state, merge->data, sf);
        if ((e = fed_merge_set_state(a->merge, state)) != FED_OK)
            goto out;
    }
    n->round = round;
    fed_log(FED_LOG_INFO, "aggregator: resumed from the checkpoint of round %llu (epoch %llu)",
            (unsigned long long)round, (unsigned long long)fed_wire_epoch(n->wire));
out:
    if (e != FED_OK)
        fed_log(FED_LOG_ERROR, "aggregator: cannot resume from checkpoint %llu: %s",
                (unsigned long long)ck.id, fed_strerror(e));
    fed_free(state);
    fed_store_ckpt_fini(&ck);
    return e;
}

/* The counters of earlier runs: put_counters adds this run's to them, so a
 * restart does not lower what the database showed. */
static fed_err load_counter_base(fed_node *n)
{
    size_t nc = fed_wire_counter_count();

    for (size_t i = 0; i < nc && i < 64; i++) {
        char name[48];
        fed_err e;

        snprintf(name, sizeof name, "wire.%s", fed_wire_counter_name(i));
        e = fed_store_get_counter(n->cfg.store, name, &n->agg->ctr_base[i]);
        if (e != FED_OK && e != FED_ERR_NOTFOUND)
            return e;
    }
    return FED_OK;
}

fed_err fed_node_agg_start(fed_node *n)
{
    node_agg *a = n->agg;
    fed_rng rng;
    fed_err e;

    fed_rng_seed(&rng, n->cfg.seed);
    if ((e = fed_model_init(a->model, &rng)) != FED_OK)
        return e;
    if ((e = resume(n)) != FED_OK || (e = load_counter_base(n)) != FED_OK ||
        (e = fed_model_get_params(a->model, a->host)) != FED_OK)
        return e;
    if (n->cfg.rounds && n->round >= n->cfg.rounds) {
        a->state = AGG_DONE;
        n->finished = 1;
        return FED_OK;
    }
    if (is_async(n))
        return async_open_round(n);
    if (n->round > 0) /* resumed after a round: as close_round would go on */
        return fed_node_arm_in(n, n->cfg.gather_ms, NODE_TIMER_ROUND);
    return FED_OK;
}

/* ---- holds ---- */

static void arm_poll(fed_node *n)
{
    node_agg *a = n->agg;
    uint64_t first = UINT64_MAX;

    for (size_t i = 0; i < a->nholds; i++)
        if (a->holds[i].since_ms < first)
            first = a->holds[i].since_ms;
    if (first == UINT64_MAX)
        (void)n->env.cancel_timer(n->env.self, NODE_TIMER_POLL);
    else
        fed_node_arm(n, first + n->cfg.poll_ms, NODE_TIMER_POLL); /* a failure stops the node */
}

static void hold_remove(node_agg *a, size_t i)
{
    a->holds[i] = a->holds[--a->nholds];
}

/* A client asks for work: replace its older hold (that request is over). */
static fed_err hold_add(fed_node *n, fed_req *req, const fed_wire_hdr *h)
{
    node_agg *a = n->agg;

    for (size_t i = 0; i < a->nholds; i++)
        if (!memcmp(a->holds[i].hdr.sender, h->sender, 32)) {
            fed_node_refuse(n, a->holds[i].req);
            hold_remove(a, i);
            break;
        }
    if (a->nholds == a->cap_holds) {
        size_t cap = a->cap_holds ? 2 * a->cap_holds : 16;
        agg_hold *p = fed_realloc(a->holds, cap * sizeof *p);

        if (!p) {
            fed_node_refuse(n, req);
            return FED_ERR_NOMEM;
        }
        a->holds = p;
        a->cap_holds = cap;
    }
    a->holds[a->nholds].req = req;
    a->holds[a->nholds].hdr = *h;
    a->holds[a->nholds].since_ms = n->env.now_ms(n->env.self);
    a->nholds++;
    arm_poll(n);
    return FED_OK;
}

static fed_err answer_no_round(fed_node *n, size_t i, uint32_t flags)
{
    node_agg *a = n->agg;
    agg_hold h = a->holds[i];

    hold_remove(a, i);
    return fed_node_ack(n, h.req, &h.hdr, FED_OK, flags);
}

static void finish_all(fed_node *n)
{
    while (n->agg->nholds)
        (void)answer_no_round(n, 0, FED_WIRE_ACK_FINISHED);
    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_POLL);
}

/* ---- starting a round ---- */

static int part_cmp(const void *x, const void *y)
{
    return memcmp(((const agg_part *)x)->key, ((const agg_part *)y)->key, 32);
}

static int hold_cmp(const void *x, const void *y)
{
    return memcmp(((const agg_hold *)x)->hdr.sender, ((const agg_hold *)y)->hdr.sender, 32);
}

/* How many of `waiting` clients a round takes: ceil(fraction * waiting),
 * at least min_clients, at most waiting and max_clients. */
static size_t sample_size(const fed_node *n, size_t waiting)
{
    size_t k = (size_t)ceil(n->cfg.sample_fraction * (double)waiting - 1e-9);

    if (k < n->cfg.min_clients)
        k = n->cfg.min_clients;
    if (k > waiting)
        k = waiting;
    if (k > (size_t)n->agg->max_clients)
        k = (size_t)n->agg->max_clients;
    return k;
}

/* The MODEL vector: the global parameters, f32 encoded, once per change
 * of host (a round sealed ahead encoded it at the last commit). */
static fed_err encode_global(fed_node *n)
{
    node_agg *a = n->agg;
    fed_codec f32 = {.id = FED_CODEC_F32};
    fed_err e;

    if (a->model_vec_len)
        return FED_OK;
    fed_node_tx_drop_all(n); /* streams of the old vector: their clients ask again */
    e = fed_node_encode_vec(&f32, a->host, a->nparams, NULL, &a->model_vec, &a->model_vec_cap,
                            &a->model_vec_len);
    if (e != FED_OK)
        a->model_vec_len = 0;
    return e;
}

static void settings_of_round(const fed_node *n, fed_wire_block *b)
{
    const fed_node_config *c = &n->cfg;
    fed_wire_settings *s = &b->settings;

    memset(b, 0, sizeof *b);
    b->samples = 0;
    snprintf(s->spec, sizeof s->spec, "%s", c->spec);
    s->local_epochs = c->local_epochs;
    s->batch = c->batch;
    s->optimizer = c->optimizer;
    s->codec = (uint16_t)n->agg->codec.id;
    s->fraction = n->agg->codec.fraction;
    s->lr = c->lr;
    s->momentum = c->momentum;
    s->mu = (float)fed_merge_prox_mu(n->agg->merge);
    s->deadline_ms = c->deadline_ms;
}

static node_cast cast_of(const agg_hold *h)
{
    node_cast c = {.req = h->req, .recipient_epoch = h->hdr.sender_epoch};

    memcpy(c.to, h->hdr.sender, 32);
    return c;
}

/* The MODEL of round n->round + 1 to holds[0..k), sealed together
 * (broadcast.c). A client whose frame could not be sent goes missing, or
 * asks again: returns the first such error. */
static fed_err send_models(fed_node *n, const agg_hold *holds, size_t k, const fed_wire_block *b)
{
    node_agg *a = n->agg;
    node_cast *to;
    fed_err e;

    if (k == 0)
        return FED_OK;
    if (!(to = fed_malloc(k * sizeof *to))) {
        for (size_t i = 0; i < k; i++)
            fed_node_refuse(n, holds[i].req);
        return FED_ERR_NOMEM;
    }
    for (size_t i = 0; i < k; i++)
        to[i] = cast_of(&holds[i]);
    e = fed_node_broadcast(n, to, k, FED_WIRE_MODEL, n->round + 1, FED_CODEC_F32, b,
                           a->model_vec, a->model_vec_len);
    fed_free(to);
    return e;
}

/* Draw k of the waiting clients (in key order, then a partial shuffle with
 * the node's random stream), answer them with the MODEL, keep the rest. */
static fed_err start_round(fed_node *n)
{
    node_agg *a = n->agg;
    size_t k = sample_size(n, a->nholds);
    fed_wire_block b;
    fed_rng rng;
    uint64_t seed;
    fed_err e;

    if ((e = encode_global(n)) != FED_OK)
        return e;
    n->env.random(n->env.self, &seed, sizeof seed);
    fed_rng_seed(&rng, seed);
    qsort(a->holds, a->nholds, sizeof *a->holds, hold_cmp);
    for (size_t i = 0; i < k; i++) {
        size_t j = i + (size_t)fed_rng_below(&rng, a->nholds - i);
        agg_hold t = a->holds[i];

        a->holds[i] = a->holds[j];
        a->holds[j] = t;
    }
    settings_of_round(n, &b);
    parts_clear(a);
    for (size_t i = 0; i < k; i++)
        memcpy(a->parts[i].key, a->holds[i].hdr.sender, 32);
    a->nparts = k;
    qsort(a->parts, k, sizeof *a->parts, part_cmp);
    a->state = AGG_RUNNING;
    a->gathered = 0;
    a->round_start_ms = n->env.now_ms(n->env.self);
    a->bytes_in0 = fed_wire_get_counters(n->wire)->bytes_in;
    a->bytes_out0 = fed_wire_get_counters(n->wire)->bytes_out;
    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_ROUND);
    if ((e = fed_node_arm(n, a->round_start_ms + n->cfg.deadline_ms, NODE_TIMER_DEADLINE)) !=
        FED_OK)
        return e; /* the node stops: a round without its deadline could wait forever */
    fed_log(FED_LOG_INFO, "aggregator: round %llu starts with %zu of %zu waiting clients",
            (unsigned long long)(n->round + 1), k, a->nholds);
    (void)send_models(n, a->holds, k, &b); /* a failed send: the client goes missing */
    memmove(a->holds, a->holds + k, (a->nholds - k) * sizeof *a->holds);
    a->nholds -= k;
    arm_poll(n);
    return FED_OK;
}

/* A fresh aggregator's first client: round 1 starts with min_clients once
 * gather_ms passed from now, as a later round does from the close of the
 * one before (a resumed aggregator arms it at start). From the first
 * client, not from start: clients coming a while after the aggregator
 * still get gather_ms for wait_clients to gather. */
static void arm_first_gather(fed_node *n)
{
    node_agg *a = n->agg;

    if (a->first_armed || n->round > 0 || a->state != AGG_IDLE)
        return;
    a->first_armed = 1;
    fed_node_arm_in(n, n->cfg.gather_ms, NODE_TIMER_ROUND); /* a failure stops the node */
}

/* Start a round when enough clients wait: wait_clients at once, or
 * min_clients once the gather timer has fired (a->gathered). */
static fed_err maybe_start(fed_node *n)
{
    node_agg *a = n->agg;
    size_t want = n->cfg.wait_clients ? n->cfg.wait_clients : n->cfg.min_clients;

    if (a->state != AGG_IDLE || n->env.now_ms(n->env.self) < a->retry_at_ms)
        return FED_OK;
    if (a->nholds >= want || (a->gathered && a->nholds >= n->cfg.min_clients))
        return start_round(n);
    return FED_OK;
}

/* ---- closing a round ---- */

static agg_part *part_find(node_agg *a, const uint8_t key[32])
{
    for (size_t i = 0; i < a->nparts; i++)
        if (!memcmp(a->parts[i].key, key, 32))
            return &a->parts[i];
    return NULL;
}

static size_t parts_got(const node_agg *a)
{
    size_t got = 0;

    for (size_t i = 0; i < a->nparts; i++)
        got += a->parts[i].got != 0;
    return got;
}

static fed_err put_contribution(fed_node *n, uint64_t round, const agg_part *p, int accepted,
                                const char *reason)
{
    fed_store_contrib c;

    memset(&c, 0, sizeof c);
    c.round = round;
    memcpy(c.peer_key, p->key, 32);
    if (p->got) {
        memcpy(c.digest, p->digest, sizeof c.digest);
        memcpy(c.signature, p->sig, sizeof c.signature);
        c.header = p->header;
        c.header_len = sizeof p->header;
    }
    c.accepted = accepted;
    snprintf(c.reason, sizeof c.reason, "%s", reason);
    return fed_store_put_contribution(n->cfg.store, &c);
}

/* The merge inputs, in part order (key order), on the backend. */
static fed_err gather_inputs(fed_node *n, int *count)
{
    node_agg *a = n->agg;
    fed_backend *be = n->cfg.be;
    int k = 0;
    fed_err e;

    for (size_t i = 0; i < a->nparts; i++) {
        agg_part *p = &a->parts[i];
        fed_merge_input *in = &a->inputs[k];

        if (!p->got)
            continue;
        if (backend_is_host(be)) {
            in->delta = p->delta;
        } else {
            if (!a->dev[k] &&
                (e = be->alloc(be, a->nparams * sizeof(float), (void **)&a->dev[k])) != FED_OK)
                return e;
            if ((e = be->upload(be, a->dev[k], p->delta, a->nparams * sizeof(float))) != FED_OK)
                return e;
            in->delta = a->dev[k];
        }
        in->weight = (double)p->samples;
        if (p->base <= n->round) /* FedBuff's discount of a stale delta */
            in->weight /= sqrt(1.0 + (double)(n->round + 1 - p->base));
        memcpy(in->key, p->key, 32);
        k++;
    }
    *count = k;
    return FED_OK;
}

/* The checkpoint sections of the round just merged. Its parameters are the
 * f32 MODEL vector's body, encoded already (encode_global): the same
 * little-endian floats. */
static fed_err write_checkpoint(fed_node *n, uint8_t hash[32])
{
    node_agg *a = n->agg;
    size_t sf = fed_merge_state_floats(a->merge);
    uint8_t st[FED_NODE_STATE_BYTES];
    const uint8_t *params = a->model_vec + FED_CODEC_HEADER_BYTES;
    fed_node_model_sec ms;
    uint8_t *merge = sf ? fed_malloc(sf * sizeof(float)) : NULL;
    float *state = sf ? fed_malloc(sf * sizeof(float)) : NULL;
    fed_err e = FED_OK;

    if (a->model_vec_len != FED_CODEC_HEADER_BYTES + a->nparams * sizeof(float))
        return FED_ERR_INTERNAL; /* commit_sealing_ahead encodes it first */
    if (sf && (!merge || !state)) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    if (sf) {
        if ((e = fed_merge_get_state(a->merge, state)) != FED_OK)
            goto out;
        fed_put_f32le_n(merge, state, sf);
    }
    fed_node_model_sec_encode(&ms, n->cfg.spec, n->cfg.shape, params, a->nparams);
    fed_node_state_encode(st, FED_NODE_AGGREGATOR, n->round + 1);
    fed_crypto_model_hash(params, a->nparams * sizeof(float), hash);
    {
        fed_store_section sec[FED_NODE_MODEL_SECTIONS + 2] = {
            ms.s[0], ms.s[1], ms.s[2],
            {FED_NODE_SEC_STATE, st, sizeof st},
            {FED_CKPT_SEC_MERGE, merge, sf * sizeof(float)},
        };
        e = fed_store_checkpoint_write(n->cfg.store, n->round + 1, sec,
                                       FED_NODE_MODEL_SECTIONS + (sf ? 2 : 1), NULL);
    }
out:
    fed_free(merge);
    fed_free(state);
    return e;
}

static fed_err put_counters(fed_node *n)
{
    const fed_wire_counters *wc = fed_wire_get_counters(n->wire);
    size_t nc = fed_wire_counter_count();
    fed_store_counter c[64];

    if (nc > 64)
        nc = 64;
    for (size_t i = 0; i < nc; i++) {
        snprintf(c[i].name, sizeof c[i].name, "wire.%s", fed_wire_counter_name(i));
        c[i].value = n->agg->ctr_base[i] + fed_wire_counter_value(wc, i);
    }
    return fed_store_put_counters(n->cfg.store, c, nc);
}

fed_err fed_node_agg_stop(fed_node *n)
{
    node_agg *a = n->agg;
    fed_store *st = n->cfg.store;
    fed_err e, pe = flush_pending(n);

    if (pe != FED_OK) /* the last chance: the figures go to the log at least */
        for (size_t i = 0; i < a->pending.n; i++)
            fed_log(FED_LOG_ERROR, "aggregator: round %llu's accuracy %.4f loss %.4f is lost "
                                   "at stop: %s",
                    (unsigned long long)a->pending.rows[i].round, a->pending.rows[i].accuracy,
                    a->pending.rows[i].loss, fed_strerror(pe));
    if ((e = fed_store_begin(st)) != FED_OK)
        goto out;
    if ((e = put_counters(n)) == FED_OK)
        e = fed_store_commit(st);
    if (e != FED_OK) {
        fed_store_rollback(st);
        fed_log(FED_LOG_WARN, "aggregator: saving the counters at stop failed: %s",
                fed_strerror(e));
    }
out:
    return pe != FED_OK ? pe : e;
}

/* Everything the round leaves in the database, in one transaction. */
static fed_err commit_round(fed_node *n, const fed_node_round_info *info, uint8_t hash[32])
{
    node_agg *a = n->agg;
    fed_store *st = n->cfg.store;
    fed_store_round row;
    fed_err e;

    if ((e = fed_store_begin(st)) != FED_OK)
        return e;
    for (size_t i = 0; i < a->nparts; i++) {
        const agg_part *p = &a->parts[i];
        int used = p->got && a->results[i].verdict <= FED_MERGE_USED_COORDS;

        e = put_contribution(n, info->round, p, used,
                             !p->got ? "missing"
                                     : used ? "" : fed_merge_verdict_name(a->results[i].verdict));
        if (e != FED_OK)
            goto out;
    }
    if ((e = put_counters(n)) != FED_OK || (e = write_checkpoint(n, hash)) != FED_OK)
        goto out;
    memset(&row, 0, sizeof row);
    row.round = info->round;
    row.start_ms = info->start_ms;
    row.end_ms = fed_node_wall_ms(n);
    row.loss = info->loss;
    row.accuracy = info->accuracy;
    row.samples = info->samples;
    row.bytes_in = fed_wire_get_counters(n->wire)->bytes_in - a->bytes_in0;
    row.bytes_out = fed_wire_get_counters(n->wire)->bytes_out - a->bytes_out0;
    row.peers = info->merged;
    snprintf(row.strategy, sizeof row.strategy, "%s", fed_merge_spec(a->merge));
    memcpy(row.model_hash, hash, 32);
    if ((e = fed_store_put_round(st, &row)) != FED_OK)
        goto out;
    if ((e = fed_store_commit(st)) == FED_OK)
        a->last_row = row;
out:
    if (e != FED_OK)
        fed_store_rollback(st);
    return e;
}

/* commit_round as one piece of the pool's work. */
typedef struct agg_commit {
    fed_node *n;
    const fed_node_round_info *info;
    uint8_t *hash;
    fed_err err;
} agg_commit;

static void commit_piece(void *ctx)
{
    agg_commit *c = ctx;

    c->err = commit_round(c->n, c->info, c->hash);
}

/* The round's commit, and beside it, on the pool, the next round's MODEL
 * sealed for the clients whose deltas just came: they ask for it at once,
 * and the next round samples them all whenever it takes every waiting
 * client. Nothing is sent before start_round, after the commit is durable:
 * sealing ahead only uses the core the commit (hashing, then fsync) leaves
 * idle. The last round and async mode just commit. The model is encoded
 * first, here on the loop: the checkpoint stores that vector's floats. */
static fed_err commit_sealing_ahead(fed_node *n, const fed_node_round_info *info,
                                    uint8_t hash[32])
{
    node_agg *a = n->agg;
    agg_commit c = {n, info, hash, FED_OK};
    node_cast *to = NULL;
    fed_wire_block b;
    size_t k = 0;

    if ((c.err = encode_global(n)) != FED_OK)
        return c.err;
    if (is_async(n) || (n->cfg.rounds && info->round >= n->cfg.rounds) ||
        !(to = fed_malloc((a->nparts ? a->nparts : 1) * sizeof *to))) {
        commit_piece(&c);
        return c.err;
    }
    for (size_t i = 0; i < a->nparts; i++) {
        if (!a->parts[i].got)
            continue;
        to[k].req = NULL;
        memcpy(to[k].to, a->parts[i].key, 32);
        to[k].recipient_epoch = a->parts[i].epoch;
        k++;
    }
    settings_of_round(n, &b);
    fed_node_cast_ahead(n, to, k, FED_WIRE_MODEL, info->round + 1, FED_CODEC_F32, &b,
                        a->model_vec, a->model_vec_len, commit_piece, &c);
    fed_free(to);
    return c.err;
}

static void evaluate(fed_node *n, fed_node_round_info *info)
{
    fed_step_stats st = {0};

    info->loss = NAN;
    info->accuracy = NAN;
    if (!n->cfg.test)
        return;
    if (fed_train_evaluate_all(n->agg->model, n->cfg.test, &st) != FED_OK || st.samples == 0)
        return;
    info->loss = st.loss_sum / (double)st.samples;
    info->accuracy = (double)st.correct / (double)st.samples;
}

/* Writes every pending row, oldest first, in one transaction: all of them
 * or, on failure, none (they stay pending for the next try). */
static fed_err flush_pending(fed_node *n)
{
    agg_pending *p = &n->agg->pending;
    fed_store *st = n->cfg.store;
    fed_err e;

    if (p->n == 0)
        return FED_OK;
    if ((e = fed_store_begin(st)) != FED_OK)
        goto out;
    for (size_t i = 0; i < p->n && e == FED_OK; i++)
        e = fed_store_put_round(st, &p->rows[i]);
    if (e == FED_OK)
        e = fed_store_commit(st);
out:
    if (e != FED_OK) {
        fed_store_rollback(st);
        p->tries++;
        return e;
    }
    for (size_t i = 0; i < p->n; i++)
        if (p->tries) /* written now, after the failures logged */
            fed_log(FED_LOG_INFO, "aggregator: round %llu's accuracy %.4f recorded, the "
                                  "database taking writes again (%u failed tries)",
                    (unsigned long long)p->rows[i].round, p->rows[i].accuracy, p->tries);
    p->n = 0;
    p->tries = 0;
    return FED_OK;
}

/* row (its loss and accuracy set) to the pending rows, then every pending
 * row to the database. */
static fed_err record_figures(fed_node *n, const fed_store_round *row)
{
    agg_pending *p = &n->agg->pending;
    fed_err e;

    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 4;
        fed_store_round *r = fed_realloc(p->rows, cap * sizeof *r);

        if (!r) { /* no room to keep it: one try, now */
            if ((e = fed_store_put_round(n->cfg.store, row)) != FED_OK)
                fed_log(FED_LOG_ERROR, "aggregator: round %llu's accuracy is lost: %s",
                        (unsigned long long)row->round, fed_strerror(e));
            return e;
        }
        p->rows = r;
        p->cap = cap;
    }
    p->rows[p->n++] = *row;
    if ((e = flush_pending(n)) != FED_OK)
        fed_log(FED_LOG_WARN, "aggregator: recording round %llu's accuracy failed: %s; kept "
                              "with %zu pending, written at the next commit or stop",
                (unsigned long long)row->round, fed_strerror(e), p->n);
    return e;
}

/* The round's figures into its committed row (or, while the database takes
 * no writes, kept until it does: record_figures), the log and the observer.
 * A crash before they are written leaves the committed row without them. */
static void finish_report(fed_node *n, fed_node_round_info *info, fed_store_round *row)
{
    if (!isnan(info->accuracy)) {
        row->loss = info->loss;
        row->accuracy = info->accuracy;
        (void)record_figures(n, row); /* logged */
        fed_log(FED_LOG_INFO, "aggregator: round %llu accuracy %.4f loss %.4f",
                (unsigned long long)info->round, info->accuracy, info->loss);
    }
    if (n->cfg.on_round)
        n->cfg.on_round(n->cfg.observer, n, info);
}

static void eval_job_run(fed_job *job)
{
    agg_eval *ev = (agg_eval *)job;

    memset(&ev->st, 0, sizeof ev->st);
    ev->err = fed_train_evaluate_all(ev->model, ev->test, &ev->st);
}

/* params (nparams floats) into the evaluation model and the job out. */
static fed_err eval_submit(fed_node *n, const float *params, const fed_node_round_info *info,
                           const fed_store_round *row)
{
    agg_eval *ev = &n->agg->ev;
    fed_err e = fed_model_set_params(ev->model, params);

    if (e != FED_OK)
        return e;
    ev->job.fn = eval_job_run;
    ev->job.user = n;
    ev->job.idle = 1;
    ev->test = n->cfg.test;
    ev->info = *info;
    ev->row = *row;
    ev->busy = 1;
    if ((e = (fed_err)n->env.submit(n->env.self, &ev->job)) != FED_OK)
        ev->busy = 0;
    return e;
}

/* The round waits for the evaluation in flight, after any that wait
 * already; when the queue is full its oldest round is reported now,
 * without an accuracy. */
static fed_err eval_defer(fed_node *n, const fed_node_round_info *info)
{
    node_agg *a = n->agg;
    agg_eval *ev = &a->ev;
    size_t bytes = a->nparams * sizeof(float);
    agg_eval_wait *w;

    if (!ev->cap_wait) {
        size_t fit = bytes ? AGG_EVAL_QUEUE_BYTES / bytes : AGG_EVAL_QUEUE_MAX;

        ev->cap_wait = fit < 1 ? 1 : fit > AGG_EVAL_QUEUE_MAX ? AGG_EVAL_QUEUE_MAX : fit;
    }
    if (ev->nwait == ev->cap_wait) {
        w = &ev->wait[ev->head];
        fed_log(FED_LOG_INFO, "aggregator: round %llu is not evaluated: %zu newer rounds wait "
                              "for the evaluation (no idle CPU)",
                (unsigned long long)w->info.round, ev->nwait);
        finish_report(n, &w->info, &w->row);
        ev->head = (ev->head + 1) % ev->cap_wait;
        ev->nwait--;
    }
    w = &ev->wait[(ev->head + ev->nwait) % ev->cap_wait];
    if (!w->params && !(w->params = fed_malloc(bytes ? bytes : 1)))
        return FED_ERR_NOMEM;
    memcpy(w->params, a->host, bytes);
    w->info = *info;
    w->row = a->last_row;
    ev->nwait++;
    return FED_OK;
}

/* The round just committed is evaluated on the held-out data in an idle
 * job, on a copy of its parameters, while the loop starts the next round
 * (its last client's NEXT must not wait behind the evaluation). When no
 * job can be made, the loop evaluates itself. */
static void report_round(fed_node *n, fed_node_round_info *info)
{
    node_agg *a = n->agg;
    agg_eval *ev = &a->ev;

    if (!n->cfg.test) {
        finish_report(n, info, &a->last_row);
        return;
    }
    if (!ev->model && fed_model_new(n->cfg.spec, n->cfg.shape, n->cfg.be, NULL, n->cfg.shards,
                                    256, &ev->model) != FED_OK)
        ev->model = NULL; /* the loop evaluates itself */
    if (ev->model &&
        (ev->busy ? eval_defer(n, info) : eval_submit(n, a->host, info, &a->last_row)) == FED_OK)
        return;
    evaluate(n, info);
    finish_report(n, info, &a->last_row);
}

fed_err fed_node_agg_on_job(fed_node *n, fed_job *job)
{
    agg_eval *ev = &n->agg->ev;
    fed_err e;

    if (job != &ev->job || !ev->busy)
        return FED_ERR_INTERNAL;
    ev->busy = 0;
    if (ev->err == FED_OK && ev->st.samples) {
        ev->info.loss = ev->st.loss_sum / (double)ev->st.samples;
        ev->info.accuracy = (double)ev->st.correct / (double)ev->st.samples;
    }
    finish_report(n, &ev->info, &ev->row);
    e = ev->err;
    while (ev->nwait > 0) { /* the next waiting round, in order */
        agg_eval_wait *w = &ev->wait[ev->head];
        fed_node_round_info info = w->info;
        fed_store_round row = w->row;

        ev->head = (ev->head + 1) % ev->cap_wait;
        ev->nwait--;
        if (eval_submit(n, w->params, &info, &row) == FED_OK)
            break;
        finish_report(n, &info, &row); /* without an accuracy */
    }
    return e;
}

/* Results of the merge by part index (inputs skipped missing parts). */
static void spread_results(node_agg *a, int count)
{
    int k = count;

    /* in place, from the end: input k-1 goes to part i >= k-1, and every
       input still to move sits below where this one lands */
    for (size_t i = a->nparts; i-- > 0;)
        if (a->parts[i].got)
            a->results[i] = a->results[--k];
}

/* Before a merge: the global and strategy state as committed (the host
 * copy mirrors the model between rounds). */
static fed_err keep_committed(fed_node *n)
{
    node_agg *a = n->agg;

    memcpy(a->committed, a->host, a->nparams * sizeof(float));
    return a->committed_state ? fed_merge_get_state(a->merge, a->committed_state) : FED_OK;
}

/* After a failed commit: the model and strategy as they were committed,
 * not as the merge left them (the round's deltas would count twice). */
static void back_to_committed(fed_node *n)
{
    node_agg *a = n->agg;
    fed_err e;

    memcpy(a->host, a->committed, a->nparams * sizeof(float));
    a->model_vec_len = 0;
    e = fed_model_set_params(a->model, a->host);
    if (e == FED_OK && a->committed_state)
        e = fed_merge_set_state(a->merge, a->committed_state);
    if (e != FED_OK) /* a device copy failed: the next try merges into what it holds */
        fed_log(FED_LOG_ERROR, "aggregator: restoring the committed model failed: %s",
                fed_strerror(e));
}

/* How long the next try waits after a->failed failures in a row: the
 * clients would resend at once and the commit fail again (a disk stays
 * full), so gather_ms, then twice as long each time, up to a minute. */
static uint64_t retry_wait_ms(const fed_node *n)
{
    uint64_t wait = n->cfg.gather_ms ? n->cfg.gather_ms : 1000;

    for (uint32_t i = 1; i < n->agg->failed && wait < AGG_RETRY_MAX_MS; i++)
        wait *= 2;
    return wait < AGG_RETRY_MAX_MS ? wait : AGG_RETRY_MAX_MS;
}

static fed_err close_round(fed_node *n)
{
    node_agg *a = n->agg;
    fed_node_round_info info;
    uint8_t hash[32];
    uint64_t wait_ms;
    int count = 0;
    fed_err e;

    memset(&info, 0, sizeof info);
    info.round = n->round + 1;
    info.sampled = (uint32_t)a->nparts;
    info.lr = n->cfg.lr;
    info.start_ms = fed_node_wall_ms(n) - (n->env.now_ms(n->env.self) - a->round_start_ms);
    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_DEADLINE);
    if ((e = gather_inputs(n, &count)) != FED_OK || (e = keep_committed(n)) != FED_OK)
        goto fail;
    e = fed_merge_apply(a->merge, fed_model_params_dev(a->model), a->inputs, count, a->results);
    a->model_vec_len = 0; /* the global moved: no MODEL vector encoded yet */
    if (e != FED_OK || (e = fed_model_get_params(a->model, a->host)) != FED_OK)
        goto fail;
    spread_results(a, count);
    for (size_t i = 0; i < a->nparts; i++) {
        if (!a->parts[i].got) {
            info.missing++;
        } else if (a->results[i].verdict <= FED_MERGE_USED_COORDS) {
            info.merged++;
            info.samples += a->parts[i].samples;
        }
    }
    info.loss = info.accuracy = NAN; /* measured once the next round is out */
    if ((e = commit_sealing_ahead(n, &info, hash)) != FED_OK)
        goto fail;
    memcpy(info.model_hash, hash, 32);
    a->failed = 0;
    a->retry_at_ms = 0;
    (void)flush_pending(n); /* the disk took a commit: earlier rounds' figures too */
    info.end_ms = fed_node_wall_ms(n);
    n->round = info.round;
    fed_log(FED_LOG_INFO, "aggregator: round %llu merged %u of %u (%u missing)",
            (unsigned long long)info.round, info.merged, info.sampled, info.missing);
    parts_clear(a);
    a->state = AGG_IDLE;
    if (n->cfg.rounds && n->round >= n->cfg.rounds) {
        a->state = AGG_DONE;
        n->finished = 1;
        finish_all(n);
    } else if (is_async(n)) {
        e = async_open_round(n);
    } else {
        fed_node_rx_drop_before(n, n->round + 1);
        if ((e = fed_node_arm_in(n, n->cfg.gather_ms, NODE_TIMER_ROUND)) == FED_OK)
            e = maybe_start(n);
    }
    report_round(n, &info);
    return e;
fail:
    /* nothing was committed: the round is redone with whoever is waiting,
       from the last committed global (its clients resend the same deltas) */
    back_to_committed(n);
    fed_node_cast_drop_ahead(n); /* the next round's, which will not come */
    parts_clear(a);
    if (is_async(n)) { /* the buffer is dropped; its clients train again */
        fed_log(FED_LOG_ERROR, "aggregator: round %llu failed (%s)",
                (unsigned long long)(n->round + 1), fed_strerror(e));
        (void)async_open_round(n);
        return e;
    }
    a->failed++;
    wait_ms = retry_wait_ms(n);
    a->retry_at_ms = n->env.now_ms(n->env.self) + wait_ms;
    fed_log(FED_LOG_ERROR, "aggregator: round %llu failed (%s); trying again in %llu ms",
            (unsigned long long)(n->round + 1), fed_strerror(e), (unsigned long long)wait_ms);
    a->state = AGG_IDLE;
    fed_node_arm(n, a->retry_at_ms, NODE_TIMER_ROUND); /* a failure stops the node */
    return e;
}

/* The MODEL of the round being filled, answering req now (async: every
 * ask; sync: a sampled client that asks again, having lost it). */
static fed_err answer_with_model(fed_node *n, fed_req *req, const fed_wire_hdr *h)
{
    agg_hold now = {.req = req, .hdr = *h};
    fed_wire_block b;

    settings_of_round(n, &b);
    return send_models(n, &now, 1, &b);
}

/* ---- async mode (FedBuff) ---- */

/* Round n->round + 1 takes deltas from now on: clients waiting for it get
 * the global model now. */
static fed_err async_open_round(fed_node *n)
{
    node_agg *a = n->agg;
    fed_wire_block b;
    fed_err e;

    a->state = AGG_RUNNING;
    a->round_start_ms = n->env.now_ms(n->env.self);
    a->bytes_in0 = fed_wire_get_counters(n->wire)->bytes_in;
    a->bytes_out0 = fed_wire_get_counters(n->wire)->bytes_out;
    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_DEADLINE);
    if (n->round + 1 > n->cfg.max_staleness)
        fed_node_rx_drop_before(n, n->round + 1 - n->cfg.max_staleness);
    if ((e = encode_global(n)) != FED_OK)
        return e;
    settings_of_round(n, &b);
    (void)send_models(n, a->holds, a->nholds, &b); /* a failed send: the client asks again */
    a->nholds = 0;
    arm_poll(n);
    return FED_OK;
}

/* A HELLO or NEXT: the model now, unless the client has trained this round
 * already (its delta is buffered, or it says so): then at the next merge. */
static fed_err async_on_ask(fed_node *n, fed_req *req, const fed_wire_hdr *h)
{
    node_agg *a = n->agg;
    if (part_find(a, h->sender) || h->round > n->round)
        return hold_add(n, req, h);
    return answer_with_model(n, req, h);
}

/* ---- frames ---- */

void fed_node_agg_prepare_open(fed_node *n, node_open *op)
{
    op->expect_n = n->agg->nparams;
    op->expect_codec = (uint16_t)n->agg->codec.id;
}

/* A late or unexpected delta: recorded, answered, never merged. */
static fed_err refuse_delta(fed_node *n, node_open *op, fed_err why, uint32_t flags)
{
    const fed_wire_msg *m = &op->msg;
    agg_part p;
    fed_err e;

    memset(&p, 0, sizeof p);
    memcpy(p.key, m->hdr.sender, 32);
    p.got = 1;
    memcpy(p.header, m->header, FED_WIRE_HEADER_BYTES);
    memcpy(p.digest, m->digest, sizeof p.digest);
    memcpy(p.sig, m->sig, sizeof p.sig);
    e = put_contribution(n, m->hdr.round, &p, 0, why == FED_ERR_LATE ? "late" : fed_errname(why));
    if (e != FED_OK)
        fed_log(FED_LOG_WARN, "aggregator: recording a refused delta failed: %s", fed_strerror(e));
    fed_wire_note_reject(n->wire, &m->hdr, why);
    (void)fed_node_ack(n, op->req, &m->hdr, why, flags);
    op->req = NULL;
    return why;
}

/* A resend of a delta already in: answered, the first one kept. */
static fed_err ack_duplicate(fed_node *n, node_open *op)
{
    fed_err e = fed_node_ack(n, op->req, &op->msg.hdr, FED_OK, FED_WIRE_ACK_DUPLICATE);

    op->req = NULL;
    return e;
}

/* op's delta into part p (taken from op), then ACK. */
static fed_err take_delta(fed_node *n, node_open *op, agg_part *p)
{
    node_agg *a = n->agg;
    const fed_wire_msg *m = &op->msg;
    fed_err e;

    p->got = 1;
    p->base = m->hdr.round;
    p->epoch = m->hdr.sender_epoch;
    p->samples = m->block.samples;
    p->delta = op->vec;
    op->vec = NULL;
    memcpy(p->header, m->header, FED_WIRE_HEADER_BYTES);
    memcpy(p->digest, m->digest, sizeof p->digest);
    memcpy(p->sig, m->sig, sizeof p->sig);
    if (n->cfg.on_delta)
        n->cfg.on_delta(n->cfg.observer, n, n->round + 1, p->base, p->key, p->delta, a->nparams,
                        p->samples);
    e = fed_node_ack(n, op->req, &m->hdr, FED_OK, 0);
    op->req = NULL;
    return e;
}

static fed_err on_delta(fed_node *n, node_open *op)
{
    node_agg *a = n->agg;
    const fed_wire_msg *m = &op->msg;
    agg_part *p;
    fed_err e;

    if (a->state != AGG_RUNNING || m->hdr.round != n->round + 1)
        return refuse_delta(n, op, FED_ERR_LATE, 0);
    if (!(p = part_find(a, m->hdr.sender)))
        return refuse_delta(n, op, FED_ERR_ROLE, 0);
    if (p->got)
        return ack_duplicate(n, op);
    if (m->block.samples == 0)
        return refuse_delta(n, op, FED_ERR_PAYLOAD, 0);
    e = take_delta(n, op, p);
    if (parts_got(a) == a->nparts)
        return close_round(n);
    return e;
}

/* Async: any member's delta of a round at most max_staleness old goes into
 * the buffer (one per client); K of them close the round. */
static fed_err on_delta_async(fed_node *n, node_open *op)
{
    node_agg *a = n->agg;
    const fed_wire_msg *m = &op->msg;
    uint64_t filling = n->round + 1;
    agg_part *p;
    fed_err e;

    if (a->state != AGG_RUNNING || m->hdr.round > filling ||
        filling - m->hdr.round > n->cfg.max_staleness)
        return refuse_delta(n, op, FED_ERR_LATE, 0);
    if ((p = part_find(a, m->hdr.sender)))
        return ack_duplicate(n, op);
    if (m->block.samples == 0)
        return refuse_delta(n, op, FED_ERR_PAYLOAD, 0);
    if (a->nparts == (size_t)a->max_clients) /* async_k <= max_clients: never */
        return refuse_delta(n, op, FED_ERR_FULL, 0);
    p = &a->parts[a->nparts++];
    memcpy(p->key, m->hdr.sender, 32);
    e = take_delta(n, op, p);
    if (a->nparts == 1 && fed_node_arm_in(n, n->cfg.deadline_ms, NODE_TIMER_DEADLINE) != FED_OK)
        return n->failed;
    if (a->nparts >= n->cfg.async_k)
        return close_round(n);
    return e;
}

fed_err fed_node_agg_on_msg(fed_node *n, node_open *op)
{
    node_agg *a = n->agg;
    const fed_wire_msg *m = &op->msg;
    fed_req *req = op->req;
    agg_part *p;
    fed_err e;

    if (!req) { /* the aggregator sends no requests: a stray reply */
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        return FED_ERR_ROLE;
    }
    switch (m->hdr.type) {
    case FED_WIRE_HELLO:
    case FED_WIRE_NEXT:
        op->req = NULL;
        if (a->state == AGG_DONE)
            return fed_node_ack(n, req, &m->hdr, FED_OK, FED_WIRE_ACK_FINISHED);
        if (is_async(n))
            return async_on_ask(n, req, &m->hdr);
        if (a->state == AGG_RUNNING && (p = part_find(a, m->hdr.sender)) && !p->got)
            return answer_with_model(n, req, &m->hdr); /* its MODEL was lost */
        if ((e = hold_add(n, req, &m->hdr)) != FED_OK)
            return e;
        arm_first_gather(n);
        return maybe_start(n);
    case FED_WIRE_DELTA:
        return is_async(n) ? on_delta_async(n, op) : on_delta(n, op);
    default:
        op->req = NULL;
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        (void)fed_node_ack(n, req, &m->hdr, FED_ERR_ROLE, 0);
        return FED_ERR_ROLE;
    }
}

fed_err fed_node_agg_on_timer(fed_node *n, uint32_t id)
{
    node_agg *a = n->agg;

    switch (id) {
    case NODE_TIMER_ROUND:
        a->gathered = 1; /* clients that come later start the round too */
        return maybe_start(n);
    case NODE_TIMER_DEADLINE:
        if (a->state != AGG_RUNNING)
            return FED_OK;
        if (parts_got(a) >= n->cfg.min_clients)
            return close_round(n);
        if (is_async(n)) /* too few buffered yet: keep filling */
            return fed_node_arm_in(n, n->cfg.deadline_ms, NODE_TIMER_DEADLINE);
        fed_log(FED_LOG_WARN, "aggregator: round %llu deadline with %zu of %u deltas needed;"
                " starting it again", (unsigned long long)(n->round + 1), parts_got(a),
                n->cfg.min_clients);
        {
            /* record who was missing, keep nothing of the attempt */
            for (size_t i = 0; i < a->nparts; i++)
                if (!a->parts[i].got)
                    (void)put_contribution(n, n->round + 1, &a->parts[i], 0, "missing");
        }
        parts_clear(a);
        a->state = AGG_IDLE;
        a->gathered = 1; /* min_clients will do, whenever they are back */
        return maybe_start(n);
    case NODE_TIMER_POLL: {
        uint64_t now = n->env.now_ms(n->env.self);

        for (size_t i = a->nholds; i-- > 0;)
            if (a->holds[i].since_ms + n->cfg.poll_ms <= now)
                (void)answer_no_round(n, i, FED_WIRE_ACK_NO_ROUND);
        arm_poll(n);
        return FED_OK;
    }
    default:
        return FED_ERR_INVAL;
    }
}

size_t fed_node_nparams(const fed_node *n)
{
    return n->agg ? n->agg->nparams : 0;
}

fed_err fed_node_get_params(const fed_node *n, float *dst)
{
    if (!n->agg)
        return FED_ERR_ROLE;
    return fed_model_get_params(n->agg->model, dst);
}
