/* client.c - the client role: says HELLO to its aggregator, trains each
 * round's MODEL for E local epochs on its own shard (a job), answers with
 * its delta and sample count, sealed, and asks NEXT. One request out at a
 * time, each on a retry timer. Owns its shard's training state between
 * rounds (topk residual); its data never leaves it, only deltas do, and
 * in the shared-statistics pass (MODEL field 14) its columns' counts, sums
 * and sums of squares, with which every later round standardizes its data.
 * With DP-SGD (cfg.dp.sgd) it also owns the site's accountant
 * (node/dp_account.h): each round's epsilon is committed, fsynced, before
 * its delta is sent, and a round that would pass the budget, or that
 * requires DP-SGD this site does not run, is declined with a LEAVE. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "crypto/keystream.h"
#include "model/colstats.h"
#include "node/ckpt_model.h"
#include "node/dp_account.h"
#include "node/node_impl.h"
#include "node/secagg_impl.h"
#include "node/site_eval.h"

typedef enum client_state {
    CL_IDLE = 0,     /* nothing out (start, or between retries) */
    CL_ASKING = 1,   /* a HELLO or NEXT is out */
    CL_TRAINING = 2, /* the training job runs */
    CL_SENDING = 3,  /* a DELTA is out */
    CL_DONE = 4,     /* the aggregator said training is over */
    CL_SECAGG = 5,   /* trained; a secure-aggregation stage is out */
} client_state;


struct node_client {
    client_state state;
    uint8_t agg[32];
    uint64_t agg_epoch;   /* the aggregator's epoch as last seen; 0: unknown */
    uint32_t parked;      /* why the aggregator leaves it out until it restarts (said once) */
    uint64_t heard_ms;    /* env.now_ms of the aggregator's last frame, or of the end of
                             this client's own training (which it did not wait on) */
    uint64_t said_silent_ms; /* the silence last said (0: none since it was heard) */
    uint8_t out_type;     /* the request that is out */
    uint32_t resends;
    uint32_t repulls;     /* PULLs of the MODEL's current chunk sent again */
    uint64_t round;       /* the round being trained or sent */
    float *global;        /* (nparams) the round's MODEL */
    float *residual;      /* (nparams) topk, kept across rounds */
    size_t nparams;
    float *local;         /* (local_n) its local tensors (node/layout.h), kept across
                             rounds and restarts: no MODEL overwrites them */
    size_t local_n;
    uint64_t local_nparams; /* the model they belong to, by its size */
    float *personal;      /* Ditto: (personal_nparams) its personal model, kept
                             across rounds and restarts */
    uint64_t personal_nparams;
    char flops_spec[FED_WIRE_SPEC_BYTES];
    double flops_per_sample;
    char *graph;          /* the round's whole spec when its MODEL carried a
                             graph (job.set.graph points here), or NULL */
    uint64_t train_start_ms;
    uint32_t leave_reason; /* the LEAVE out (state CL_SENDING, out_type LEAVE) */
    fed_dp_account *acct;  /* cfg.dp.sgd: the site's accountant */
    fed_crypto_keystream ks; /* cfg.dp.sgd: DP-SGD's noise and sampling, keyed from
                                env.random; used by the training job only */
    double epsilon;        /* cfg.dp.sgd: spent after the last round charged */
    int secure;            /* the round in training runs secure aggregation: its
                              delta never leaves in the clear */
    int pass;              /* the round in training is the statistics pass */
    int pass_dp;           /* ... a DP one: its noised release is charged */
    uint8_t *stats_applied; /* the pooled statistics its data is standardized
                              with (MODEL field 14's values), or NULL */
    size_t stats_applied_len;
    int64_t *stats_out;    /* the pass's contribution as it leaves (plain: its
                              columns under the minimum count zeroed) */
    int64_t *eval_out;     /* a site evaluation's statistics (node/site_eval.h) */
    size_t eval_cap;
    /* SCAFFOLD: its control variate c_i (ctl_nparams floats, zero off the
       trained path; NULL: zero), and the next one (ctl_next), made by the
       round ctl_round (0: none), committed once the aggregator says that
       round merged (MODEL field 18) */
    float *ctl, *ctl_next;
    size_t ctl_nparams;
    uint64_t ctl_round;
    node_train_job job;
};

static fed_err fed_node_client_new(fed_node *n)
{
    node_client *c = fed_calloc(1, sizeof *c);

    if (!c)
        return FED_ERR_NOMEM;
    memcpy(c->agg, n->cfg.client.aggregator.key, 32);
    c->job.job.user = n;
    n->client = c;
    c->job.hooks = n->cfg.hooks;
    if (n->cfg.dp.sgd) {
        fed_err e = fed_dp_account_new(n->cfg.dp.delta, &c->acct);

        if (e != FED_OK)
            return e; /* fed_node_new frees the half-built role */
        fed_crypto_keystream_init(&c->ks, n->env.random, n->env.self);
    }
    /* after DP-SGD's keystream, so that one is still keyed from the node's
       first draw */
    return fedi_node_sa_client_new(n, &n->client_sa);
}

static void fed_node_client_free(fed_node *n)
{
    node_client *c = n->client;

    if (!c)
        return;
    fed_free(c->global);
    fed_free(c->residual);
    fed_free(c->local);
    fed_free(c->personal);
    fed_free(c->graph);
    fed_free(c->stats_applied);
    fed_free(c->stats_out);
    if (c->eval_out) /* a secure site's own figures: inside its masked input only */
        sodium_memzero(c->eval_out, c->eval_cap * sizeof *c->eval_out);
    fed_free(c->eval_out);
    fed_free(c->ctl);
    fed_free(c->ctl_next);
    fedi_node_train_job_release(&c->job);
    fed_dp_account_free(c->acct);
    fed_crypto_keystream_wipe(&c->ks);
    fedi_node_sa_client_free(n, n->client_sa);
    n->client_sa = NULL;
    fed_free(c);
    n->client = NULL;
}

/* ---- requests ---- */

static void arm_retry(fed_node *n, uint64_t after_ms)
{
    fedi_node_arm_in(n, after_ms, NODE_TIMER_RETRY); /* a failure stops the node */
}

/* How long the aggregator has not answered a client that asks it for
 * work or sends it a delta, once that is past two polls with their retries
 * (an ask is held at most a poll, a delta ACKed at once); 0 otherwise. Not
 * while it trains, nor while a secure round's stage is out: the aggregator
 * holds that until the stage closes, which its deadlines bound. */
static uint64_t silent_ms(const fed_node *n)
{
    const node_client *c = n->client;
    uint64_t now = n->env.now_ms(n->env.self), limit;

    if ((c->state != CL_IDLE && c->state != CL_ASKING && c->state != CL_SENDING) ||
        now <= c->heard_ms)
        return 0;
    limit = 2 * (n->cfg.transfer.poll_ms + n->cfg.transfer.retry_ms);
    return now - c->heard_ms > limit ? now - c->heard_ms : 0;
}

/* A silence said at warning level when it starts and each time it doubles,
 * so that an aggregator that is down, or an address or key that is wrong,
 * does not leave the client retrying without a word. */
static void say_silence(fed_node *n)
{
    node_client *c = n->client;
    uint64_t quiet = silent_ms(n);

    if (!quiet || (c->said_silent_ms && quiet < 2 * c->said_silent_ms))
        return;
    fed_log(FED_LOG_WARN, "client: no answer from the aggregator (key %02x%02x%02x%02x...) for "
            "%.0f s; asking again (is it up, is --aggregator its address and --aggregator-key "
            "its key?)", c->agg[0], c->agg[1], c->agg[2], c->agg[3], (double)quiet / 1000.0);
    c->said_silent_ms = quiet;
}

/* The aggregator was heard (or this client's training ended): a silence
 * said is over. */
static void heard(fed_node *n, int from_agg)
{
    node_client *c = n->client;

    if (from_agg && c->said_silent_ms)
        fed_log(FED_LOG_INFO, "client: the aggregator answers again");
    c->said_silent_ms = 0;
    c->heard_ms = n->env.now_ms(n->env.self);
}

/* HELLO (to whatever epoch the aggregator is in now) or NEXT. */
static fed_err ask(fed_node *n, uint8_t type)
{
    node_client *c = n->client;
    fed_wire_hdr h;
    fed_wire_block b;
    fed_err e;

    if (type == FED_WIRE_NEXT && c->agg_epoch == 0)
        type = FED_WIRE_HELLO;
    e = fedi_node_header(n, type, c->agg, n->round, type == FED_WIRE_HELLO ? 0 : c->agg_epoch,
                         FED_CODEC_NONE, &h);
    if (e != FED_OK)
        return e;
    memset(&b, 0, sizeof b);
    b.role = FED_WIRE_ROLE_CLIENT;
    b.round_ref = n->round;
    c->state = CL_ASKING;
    c->out_type = type;
    arm_retry(n, n->cfg.transfer.poll_ms + n->cfg.transfer.retry_ms);
    return fedi_node_emit(n, NULL, &h, &b, NULL, 0);
}

/* DP-SGD: the epsilon spent and the budget, for the aggregator's view
 * (the DP report field of a DELTA or LEAVE). */
static void put_dp_report(const fed_node *n, fed_wire_block *b)
{
    if (!n->cfg.dp.sgd)
        return;
    /* noise 0 (clipping alone) spends an infinite epsilon; the wire and the
       store take finite reports only, so it goes as the largest double */
    b->dp_epsilon = isfinite(n->client->epsilon) ? n->client->epsilon : DBL_MAX;
    b->dp_budget = n->cfg.dp.budget;
}

static fed_err send_delta(fed_node *n)
{
    node_client *c = n->client;
    node_train_job *j = &c->job;
    fed_wire_hdr h;
    fed_wire_block b;
    fed_err e;

    if (n->cfg.secagg.on) { /* on_model declines such rounds: never reached */
        fed_log(FED_LOG_ERROR, "client: round %llu: a plain delta was about to leave a "
                "--secagg client; not sent", (unsigned long long)c->round);
        return FED_ERR_SA_REQUIRED;
    }
    e = fedi_node_header(n, FED_WIRE_DELTA, c->agg, c->round, c->agg_epoch,
                         (uint16_t)j->codec.id, &h);
    if (e != FED_OK)
        return e;
    memset(&b, 0, sizeof b);
    b.samples = j->samples;
    b.round_ref = c->round;
    put_dp_report(n, &b);
    fed_node_layout_put(&j->layout, 0, &b); /* a partial vector: its segments said */
    c->state = CL_SENDING;
    c->out_type = FED_WIRE_DELTA;
    arm_retry(n, n->cfg.transfer.retry_ms);
    return fedi_node_emit_vec(n, NULL, &h, &b, j->vec, j->vec_len);
}

/* Declines the round in the header with reason (a LEAVE); the aggregator
 * records it and ACKs, then the client asks NEXT. */
static fed_err send_leave(fed_node *n)
{
    node_client *c = n->client;
    fed_wire_hdr h;
    fed_wire_block b;
    fed_err e = fedi_node_header(n, FED_WIRE_LEAVE, c->agg, c->round, c->agg_epoch,
                                 FED_CODEC_NONE, &h);

    if (e != FED_OK)
        return e;
    memset(&b, 0, sizeof b);
    b.reason = c->leave_reason;
    put_dp_report(n, &b);
    c->state = CL_SENDING;
    c->out_type = FED_WIRE_LEAVE;
    arm_retry(n, n->cfg.transfer.retry_ms);
    return fedi_node_emit(n, NULL, &h, &b, NULL, 0);
}

/* The delta's stream: the next chunk once the last one was taken. *sent
 * is 0 when every chunk was out already (this was the final ACK). */
static fed_err push_delta(fed_node *n, int *sent)
{
    int done = 1;
    fed_err e = fedi_node_tx_push(n, n->client->agg, &done);

    *sent = !done;
    if (*sent)
        arm_retry(n, n->cfg.transfer.retry_ms);
    return e;
}

/* A chunk of its MODEL came: the rest is coming, give it time. */
static void fed_node_client_pulling(fed_node *n)
{
    n->client->repulls = 0;
    if (n->client->state == CL_ASKING)
        arm_retry(n, n->cfg.transfer.retry_ms);
}

/* The MODEL's stream stalled: ask for its chunk again, a few times. */
static fed_err repull(fed_node *n)
{
    node_client *c = n->client;
    fed_err e;

    if (c->repulls >= n->cfg.client.delta_retries)
        return FED_ERR_NOTFOUND;
    if ((e = fedi_node_repull(n, c->agg)) != FED_OK)
        return e;
    c->repulls++;
    arm_retry(n, n->cfg.transfer.retry_ms);
    return FED_OK;
}

/* ---- SCAFFOLD's control variate ---- */

/* The checkpoint's section: u64 LE nparams, u64 LE the pending round (0:
 * none), f32 LE c_i (nparams), then the pending c_i (nparams) if any. */
#define CL_CKPT_SEC_CONTROL "scaffold.control"

/* A MODEL of round r: the c_i made by an earlier round is committed when
 * that round merged (MODEL field 18: not void), else dropped (its change is
 * not in the server's c, so keeping it would break c = mean(c_i)); one of
 * round r or later waits (training it again makes it again). */
static void ctl_settle(fed_node *n, const fed_wire_settings *s, uint64_t r)
{
    node_client *c = n->client;
    uint64_t p = c->ctl_round, k;

    if (!p || r <= p)
        return;
    k = r - 1 - p;
    if (k < 64 && !(s->scaffold_void >> k & 1) && c->ctl_next) {
        float *t = c->ctl;

        c->ctl = c->ctl_next;
        c->ctl_next = t;
    } else {
        fed_log(FED_LOG_INFO, "client: round %llu merged no update (or is past the last 64 "
                "rounds the aggregator reports): its control variate stays as it was",
                (unsigned long long)p);
    }
    c->ctl_round = 0;
}

/* Its section for the checkpoint into *buf: its length (0: none; SIZE_MAX:
 * out of memory). */
static size_t ctl_section(const node_client *c, uint8_t **buf)
{
    size_t np = c->ctl_nparams, len = 16 + (c->ctl_round ? 2 : 1) * np * sizeof(float);

    *buf = NULL;
    if (!np || (!c->ctl && !c->ctl_round))
        return 0;
    if (!(*buf = fed_calloc(1, len)))
        return SIZE_MAX;
    fed_put_u64le(*buf, np);
    fed_put_u64le(*buf + 8, c->ctl_round);
    if (c->ctl)
        fed_put_f32le_n(*buf + 16, c->ctl, np);
    if (c->ctl_round)
        fed_put_f32le_n(*buf + 16 + np * sizeof(float), c->ctl_next, np);
    return len;
}

static fed_err ctl_resume(node_client *c, const fed_store_section *s)
{
    uint64_t np, round;

    if (!s || s->len < 16)
        return FED_OK;
    np = fed_get_u64le(s->data);
    round = fed_get_u64le((const uint8_t *)s->data + 8);
    if (np == 0 || np > SIZE_MAX / 8 || s->len != 16 + (round ? 2 : 1) * np * sizeof(float))
        return FED_ERR_FORMAT;
    if (!(c->ctl = fed_malloc(np * sizeof(float))) ||
        (round && !(c->ctl_next = fed_malloc(np * sizeof(float)))))
        return FED_ERR_NOMEM;
    fed_get_f32le_n(c->ctl, (const uint8_t *)s->data + 16, np);
    if (round)
        fed_get_f32le_n(c->ctl_next, (const uint8_t *)s->data + 16 + np * sizeof(float), np);
    c->ctl_nparams = np;
    c->ctl_round = round;
    return FED_OK;
}

const float *fedi_node_client_control(const fed_node *n, uint64_t *pending_round,
                                      const float **pending)
{
    const node_client *c = n->client;

    if (!c)
        return NULL;
    *pending_round = c->ctl_round;
    *pending = c->ctl_round ? c->ctl_next : NULL;
    return c->ctl;
}

/* ---- resuming ---- */

static fed_err resume(fed_node *n)
{
    fed_store_ckpt ck;
    uint64_t round = 0;
    fed_err e;

    e = fedi_node_resume_latest(n, &ck, &round);
    if (e == FED_ERR_NOTFOUND)
        return FED_OK;
    if (e == FED_OK) {
        const fed_store_section *r = fed_store_ckpt_find(&ck, FED_CKPT_SEC_RESIDUAL);
        const fed_store_section *l = fed_store_ckpt_find(&ck, FED_CKPT_SEC_LOCAL);
        const fed_store_section *v = fed_store_ckpt_find(&ck, FED_CKPT_SEC_PERSONAL);
        node_client *c = n->client;

        if (v && v->len > 8 && (v->len - 8) % sizeof(float) == 0 &&
            fed_get_u64le(v->data) == (v->len - 8) / sizeof(float)) {
            c->personal_nparams = fed_get_u64le(v->data);
            if (!(c->personal = fed_malloc(v->len - 8)))
                e = FED_ERR_NOMEM;
            else
                fed_get_f32le_n(c->personal, v->data + 8, c->personal_nparams);
        }
        if (e == FED_OK)
            e = ctl_resume(c, fed_store_ckpt_find(&ck, CL_CKPT_SEC_CONTROL));

        if (e == FED_OK && l && l->len > 8 && (l->len - 8) % sizeof(float) == 0) {
            c->local_nparams = fed_get_u64le(l->data);
            c->local_n = (l->len - 8) / sizeof(float);
            if (!(c->local = fed_malloc(l->len - 8)))
                e = FED_ERR_NOMEM;
            else
                fed_get_f32le_n(c->local, l->data + 8, c->local_n);
        }

        n->round = round;
        if (r && r->len % sizeof(float) == 0 && r->len) {
            c->nparams = r->len / sizeof(float);
            if (!(c->residual = fed_malloc(r->len)))
                e = FED_ERR_NOMEM;
            else
                fed_get_f32le_n(c->residual, r->data, c->nparams);
        }
    }
    if (e != FED_OK)
        fed_log(FED_LOG_ERROR, "client: cannot resume: %s", fed_strerror(e));
    fed_store_ckpt_fini(&ck);
    return e;
}

static fed_err fed_node_client_start(fed_node *n)
{
    node_client *c = n->client;
    fed_err e = resume(n);

    if (e != FED_OK)
        return e;
    heard(n, 0); /* the silence is counted from the start */
    if (c->acct) {
        if ((e = fed_dp_account_load(c->acct, n->cfg.store)) != FED_OK) {
            fed_log(FED_LOG_ERROR, "client: cannot read the privacy spent: %s", fed_strerror(e));
            return e;
        }
        c->epsilon = fed_dp_account_epsilon(c->acct);
        fed_log(FED_LOG_INFO, "client: DP-SGD, clip %g, noise multiplier %g, delta %g: "
                "epsilon %.4f spent in %llu releases so far; budget %.4g (0: none)",
                (double)n->cfg.dp.sgd_clip, (double)n->cfg.dp.sgd_noise, n->cfg.dp.delta, c->epsilon,
                (unsigned long long)fed_dp_account_charges(c->acct), n->cfg.dp.budget);
    }
    return ask(n, FED_WIRE_HELLO);
}

/* ---- training ---- */

/* Forward+backward FLOPs per sample of spec, whose whole text is whole (a
 * model is built once per spec to count them; the simulator charges them). */
static fed_err flops_of(fed_node *n, const fed_wire_settings *s, const char *whole,
                        double *flops)
{
    node_client *c = n->client;
    const char *spec = s->spec;
    fed_model_shape in;
    fed_model *m = NULL;
    fed_err e;

    if (strcmp(c->flops_spec, spec) != 0) {
        if ((e = fedi_node_model_input(s, n->cfg.data.train->shape, 0, &in, NULL, 0)) != FED_OK ||
            (e = fed_model_new(whole, in, n->cfg.be, NULL, 1, 1, &m)) != FED_OK)
            return e;
        c->flops_per_sample = fed_model_flops_per_sample(m);
        snprintf(c->flops_spec, sizeof c->flops_spec, "%s", spec);
        fed_model_free(m);
    }
    *flops = c->flops_per_sample;
    return FED_OK;
}

static fed_err settings_ok(const fed_wire_settings *s)
{
    if (s->local_epochs < 1 || s->local_epochs > 1000 || s->batch < 1 || s->batch > 4096 ||
        !(s->lr > 0) || !isfinite(s->lr) || !(s->mu >= 0) || !isfinite(s->mu) ||
        !(s->momentum >= 0 && s->momentum < 1) ||
        !(s->weight_decay >= 0 && s->weight_decay < 1) ||
        !(s->ditto_lambda >= 0 && s->ditto_lambda <= 1000) ||
        s->optimizer > FED_OPTIM_ADAM || s->codec == FED_CODEC_NONE ||
        s->codec == FED_CODEC_F64 || s->codec >= FED_CODEC_COUNT_)
        return FED_ERR_PAYLOAD;
    if (s->codec == FED_CODEC_TOPK && !(s->fraction > 0 && s->fraction <= 1))
        return FED_ERR_PAYLOAD;
    if (s->eval_every && (!fed_site_eval_ints((int)s->eval_classes) ||
                          (!s->sa_on && s->codec != FED_CODEC_F32)))
        return FED_ERR_PAYLOAD; /* in the clear its limbs need f32 */
    return FED_OK;
}

/* DP-SGD for the round of settings s into j, or why the round must be
 * declined: the round requires DP-SGD and this site does not run it, or it
 * would take the site past its budget. A required round trains at its clip
 * and the larger of the two noise multipliers. */
static fed_err dp_plan(fed_node *n, const fed_wire_settings *s, node_train_job *j)
{
    node_client *c = n->client;
    const fed_node_config *cfg = &n->cfg;
    double q, next;
    uint64_t steps;

    j->dp_on = 0;
    if (!cfg->dp.sgd)
        return (s->dp_flags & FED_WIRE_DP_REQUIRED) ? FED_ERR_DP_REQUIRED : FED_OK;
    memset(&j->dp, 0, sizeof j->dp);
    j->dp.clip = cfg->dp.sgd_clip;
    j->dp.noise = cfg->dp.sgd_noise;
    if (s->dp_flags & FED_WIRE_DP_REQUIRED) {
        j->dp.clip = s->dp_clip;
        if (s->dp_noise > j->dp.noise)
            j->dp.noise = s->dp_noise;
    }
    j->dp.random = fed_crypto_keystream_random;
    j->dp.random_ctx = &c->ks;
    j->dp_on = 1;
    if (!(cfg->dp.budget > 0))
        return FED_OK;
    q = fed_dp_account_rate(cfg->data.shard_n, s->batch);
    steps = fed_dp_account_round_steps(cfg->data.shard_n, s->batch, s->local_epochs);
    next = fed_dp_account_preview(c->acct, q, j->dp.noise, steps);
    if (next > cfg->dp.budget) {
        fed_log(FED_LOG_WARN, "client: round %llu would take epsilon from %.4f to %.4f, past "
                "the budget %.4g: declined", (unsigned long long)c->round, c->epsilon, next,
                cfg->dp.budget);
        return FED_ERR_DP_BUDGET;
    }
    return FED_OK;
}

static fed_err on_model_train(fed_node *n, node_open *op);

/* A DP statistics pass (MODEL field 14 with bounds and noise): the
 * client's values clipped into the bounds (cfg.data.stats_local_dp), its
 * integers noised (model/colstats.h) into c->stats_out, and the release
 * previewed against its budget: charged (one Gaussian release at rate 1)
 * in the round's durable record before it leaves (c->pass_dp). */
static fed_err stats_plan_dp(fed_node *n, const fed_wire_settings *s)
{
    node_client *c = n->client;
    const fed_node_data_config *d = &n->cfg.data;
    size_t nints = (size_t)d->stats_cols * FED_COLSTATS_INTS;
    double *lo = fed_malloc(d->stats_cols * sizeof *lo), *hi = fed_malloc(d->stats_cols * sizeof *hi);
    /* one record (an image) moves a column by stats_per_record values */
    fed_colstats_dp dp = {lo, hi, s->stats_noise, d->stats_per_record};
    fed_err e = FED_OK;

    if (!lo || !hi || (!c->stats_out && !(c->stats_out = fed_malloc(nints * sizeof *c->stats_out)))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    for (uint32_t j = 0; j < d->stats_cols; j++) {
        lo[j] = fed_get_f64le(s->stats_bounds + FED_WIRE_STATS_BOUND_BYTES * (size_t)j);
        hi[j] = fed_get_f64le(s->stats_bounds + FED_WIRE_STATS_BOUND_BYTES * (size_t)j + 8);
    }
    if (c->acct && n->cfg.dp.budget > 0) {
        double next = fed_dp_account_preview(c->acct, 1.0, s->stats_noise, 1);

        if (next > n->cfg.dp.budget) {
            fed_log(FED_LOG_WARN, "client: the statistics pass (round %llu) would take epsilon "
                    "from %.4f to %.4f, past the budget %.4g: declined",
                    (unsigned long long)c->round, c->epsilon, next, n->cfg.dp.budget);
            e = FED_ERR_DP_BUDGET;
            goto out;
        }
    }
    if ((e = d->stats_local_dp(d->stats_ctx, lo, hi, d->stats_cols, c->stats_out)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "client: its clipped statistics failed: %s", fed_strerror(e));
        e = FED_ERR_STATS;
        goto out;
    }
    fed_colstats_noise(c->stats_out, d->stats_cols, &dp, n->env.random, n->env.self);
    c->pass_dp = 1;
    if (!c->acct)
        fed_log(FED_LOG_WARN, "client: the statistics pass (round %llu) is noised (multiplier "
                "%g) but this site keeps no privacy account (no --dp-sgd): not charged",
                (unsigned long long)c->round, s->stats_noise);
out:
    fed_free(lo);
    fed_free(hi);
    return e;
}

const int64_t *fedi_node_client_stats(const fed_node *n)
{
    const node_client *c = n->client;

    return c && c->pass ? c->stats_out : NULL;
}

/* What a MODEL's shared-statistics field (14) asks of this client: the
 * pass (its contribution, c->stats_out; with the plain pass a column under
 * the minimum count zeroed, so nothing of it leaves), or its training set
 * standardized with the pooled statistics (cfg.data.restandardize, once
 * for each new set). FED_ERR_STATS (the round declined) when it cannot. */
static fed_err stats_plan(fed_node *n, const fed_wire_settings *s)
{
    node_client *c = n->client;
    const fed_node_data_config *d = &n->cfg.data;
    size_t nints = (size_t)d->stats_cols * FED_COLSTATS_INTS;
    size_t len = FED_WIRE_STATS_COL_BYTES * (size_t)s->stats_cols;
    double *mean = NULL, *sd = NULL;
    const fed_dataset *train = NULL;
    fed_err e = FED_OK;

    c->pass = s->stats_mode == FED_WIRE_STATS_PASS;
    c->pass_dp = 0;
    if (!s->stats_mode)
        return FED_OK;
    if (s->stats_cols != d->stats_cols ||
        (c->pass ? !(s->stats_noise > 0 ? d->stats_local_dp != NULL : d->stats_local != NULL)
                 : !d->restandardize)) {
        fed_log(FED_LOG_WARN, "client: round %llu %s the shared statistics of %u columns; this "
                "client %s: declined", (unsigned long long)c->round,
                c->pass ? "is the pass that gathers" : "standardizes with", s->stats_cols,
                !d->stats_cols ? "has no columns or channels to share (CSV data or images, "
                                 "without --no-standardize)"
                : s->stats_cols != d->stats_cols ? "has another column count"
                : c->pass && d->stats_local_dp ? "runs under DP and releases no exact sums "
                                                 "(the aggregator declares no --feature-bounds)"
                                               : "cannot standardize its data again");
        return FED_ERR_STATS;
    }
    if (c->pass && s->stats_noise > 0)
        return stats_plan_dp(n, s);
    if (c->pass) {
        if (!c->stats_out && !(c->stats_out = fed_malloc(nints * sizeof *c->stats_out)))
            return FED_ERR_NOMEM;
        memcpy(c->stats_out, d->stats_local, nints * sizeof *c->stats_out);
        for (uint32_t j = 0; !s->sa_on && j < d->stats_cols; j++)
            if ((uint64_t)c->stats_out[(size_t)j * FED_COLSTATS_INTS] <
                s->stats_min_count * (d->stats_per_record > 1 ? d->stats_per_record : 1))
                memset(c->stats_out + (size_t)j * FED_COLSTATS_INTS, 0,
                       FED_COLSTATS_INTS * sizeof *c->stats_out);
        return FED_OK;
    }
    if (c->stats_applied && c->stats_applied_len == len && !memcmp(c->stats_applied, s->stats, len))
        return FED_OK; /* its data is standardized with these already */
    mean = fed_malloc(s->stats_cols * sizeof *mean);
    sd = fed_malloc(s->stats_cols * sizeof *sd);
    fed_free(c->stats_applied);
    c->stats_applied = fed_malloc(len);
    if (!mean || !sd || !c->stats_applied) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    for (uint32_t j = 0; j < s->stats_cols; j++) {
        mean[j] = fed_get_f64le(s->stats + FED_WIRE_STATS_COL_BYTES * (size_t)j);
        sd[j] = fed_get_f64le(s->stats + FED_WIRE_STATS_COL_BYTES * (size_t)j + 8);
    }
    if ((e = d->restandardize(d->stats_ctx, mean, sd, s->stats_cols, &train)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "client: standardizing its data with the shared statistics "
                "failed: %s", fed_strerror(e));
        e = FED_ERR_STATS;
        goto out;
    }
    n->cfg.data.train = train;
    memcpy(c->stats_applied, s->stats, len);
    c->stats_applied_len = len;
    fed_log(FED_LOG_INFO, "client: its data standardized with the shared statistics of %u "
            "columns", s->stats_cols);
out:
    if (e != FED_OK) {
        fed_free(c->stats_applied);
        c->stats_applied = NULL;
    }
    fed_free(mean);
    fed_free(sd);
    return e;
}

/* A client's own --local-layers or --local-bn, when set, must be what the
 * aggregator declares (MODEL field 16): the aggregator decides which
 * tensors stay, a client may only check it. */
static int paths_agree(const fed_node *n, const fed_wire_settings *s, uint64_t round)
{
    const char *own = n->cfg.local_layers;
    int bn = (s->paths_flags & FED_WIRE_PATHS_LOCAL_BN) != 0;

    if (!own[0] && !n->cfg.local_bn)
        return 1;
    if ((own[0] && strcmp(own, s->local_layers) != 0) || (n->cfg.local_bn && !bn)) {
        fed_log(FED_LOG_WARN, "client: round %llu: the aggregator keeps local --local-layers "
                "'%s'%s, this client '%s'%s: declined (the aggregator decides which tensors "
                "stay at the sites)", (unsigned long long)round, s->local_layers,
                bn ? " with --local-bn" : "", own, n->cfg.local_bn ? " with --local-bn" : "");
        return 0;
    }
    return 1;
}

/* A site in pipeline stages (each rank holds one stage) cannot evaluate the
 * whole model at its site or keep SCAFFOLD's control variates: such a
 * round is declined, said once a round, rather than failing its job. */
static int stages_can(const fed_node *n, const fed_wire_settings *s, uint64_t round)
{
    const char *what = s->eval_every ? "site evaluation (--eval-every)"
                       : s->paths_flags & FED_WIRE_PATHS_SCAFFOLD ? "SCAFFOLD's control variates"
                                                                  : NULL;

    if (n->cfg.pipe_stages <= 1 || !what)
        return 1;
    fed_log(FED_LOG_WARN, "client: round %llu: the aggregator asks for %s, which a site in "
            "%u pipeline stages cannot give (each rank holds one stage): declined",
            (unsigned long long)round, what, n->cfg.pipe_stages);
    return 0;
}

/* The round declined with a LEAVE saying why; no job runs. */
static fed_err decline_round(fed_node *n, uint64_t round, fed_err why)
{
    node_client *c = n->client;

    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_RETRY);
    c->round = round;
    c->leave_reason = (uint32_t)why;
    c->resends = 0;
    c->job.vec_len = 0;
    return send_leave(n);
}

/* The round declined for a model that does not fit this client: the
 * aggregator parks it until it restarts, which the log says. */
static fed_err decline_model(fed_node *n, uint64_t round)
{
    fed_log(FED_LOG_INFO, "client: the aggregator leaves a client that declines its model out "
            "of every later round; restart this one with data or settings that fit it");
    return decline_round(n, round, FED_ERR_MODEL_MISMATCH);
}

/* The trained delta of the round (the job's f32 vector) into secure
 * aggregation's masked input. */
static fed_err secure_trained(fed_node *n)
{
    node_client *c = n->client;
    node_train_job *j = &c->job;
    float *d = fed_malloc((j->sent_n ? j->sent_n : 1) * sizeof *d);
    fed_err e;

    if (!d)
        return FED_ERR_NOMEM;
    if (c->pass) /* the statistics pass: its integers alone (secagg_client.c) */
        e = fedi_node_sa_client_trained(n, NULL, &j->layout, j->samples, NULL, 0);
    else if ((e = fed_codec_decode(j->vec, j->vec_len, FED_CODEC_F32, d, j->sent_n)) == FED_OK)
        e = fedi_node_sa_client_trained(n, d, &j->layout, j->samples, c->eval_out, j->eval_ints);
    sodium_memzero(d, (j->sent_n ? j->sent_n : 1) * sizeof *d); /* the delta in the clear */
    fed_free(d);
    if (e != FED_OK)
        fedi_node_sa_client_abort(n);
    return e;
}

/* A MODEL of a secure round: its keys go out beside the training (or, for
 * a new try of the round it trained already, the same delta is masked
 * afresh). The delta never leaves in the clear. */
static fed_err on_secure_model(fed_node *n, node_open *op)
{
    node_client *c = n->client;
    const fed_wire_msg *m = &op->msg;
    node_train_job *j = &c->job;
    fed_err e;

    if (m->block.settings.codec != FED_CODEC_F32) { /* an aggregator sends no other */
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_PAYLOAD);
        return FED_ERR_PAYLOAD;
    }
    if (fedi_node_sa_client_took_part(n->client_sa, m->hdr.round) ||
        (m->hdr.round == n->round && !(c->round == n->round && j->vec_len))) {
        /* its masked input of this round went out already (the aggregator
           restarted, or a hostile one asks again), or it trained this round
           before it restarted (its record is durable before the masked
           input leaves, so it may have): declined, which tells the
           aggregator to close the round with no update */
        fed_log(FED_LOG_WARN, "client: secagg round %llu try %u: its masked input of this round "
                "went out already (or may have, before a restart); declined (a second sum "
                "over the same deltas would expose a client's)", (unsigned long long)m->hdr.round,
                m->block.settings.sa_try);
        c->round = m->hdr.round;
        c->leave_reason = (uint32_t)FED_ERR_SA_REVEALED;
        c->resends = 0;
        return send_leave(n);
    }
    if (m->hdr.round == n->round && c->round == n->round && c->secure && j->vec_len &&
        op->vec_n == c->nparams * (m->block.settings.paths_flags & FED_WIRE_PATHS_SCAFFOLD
                                       ? 2 /* SCAFFOLD: c after the model */
                                       : 1)) {
        fed_log(FED_LOG_INFO, "client: secagg round %llu try %u: masking its delta afresh",
                (unsigned long long)c->round, m->block.settings.sa_try);
        (void)n->env.cancel_timer(n->env.self, NODE_TIMER_RETRY);
        if ((e = fedi_node_sa_client_begin(n, m)) != FED_OK)
            return e;
        c->state = CL_SECAGG;
        if ((e = secure_trained(n)) != FED_OK)
            (void)ask(n, FED_WIRE_NEXT);
        return e;
    }
    c->secure = 1;
    if ((e = on_model_train(n, op)) != FED_OK || c->state != CL_TRAINING)
        return e;
    return fedi_node_sa_client_begin(n, m);
}

/* A MODEL for round r: take its vector and start training. */
static fed_err on_model(fed_node *n, node_open *op)
{
    node_client *c = n->client;
    const fed_wire_msg *m = &op->msg;
    node_train_job *j = &c->job;

    if (c->state != CL_ASKING)
        return FED_OK; /* an answer to a request we gave up on */
    if (m->block.settings.sa_on)
        return on_secure_model(n, op);
    if (n->cfg.secagg.on) {
        /* --secagg on a client is a requirement: its delta never leaves in
           the clear, so a round without secure aggregation is declined */
        fed_log(FED_LOG_WARN, "client: round %llu does not run secure aggregation and this "
                "client requires it (--secagg): declined, no delta sent",
                (unsigned long long)m->hdr.round);
        (void)n->env.cancel_timer(n->env.self, NODE_TIMER_RETRY);
        c->round = m->hdr.round;
        c->leave_reason = (uint32_t)FED_ERR_SA_REQUIRED;
        c->resends = 0;
        return send_leave(n);
    }
    if (m->hdr.round == n->round && c->round == n->round && j->vec_len && c->secure) {
        /* what it holds of this round was built for its masked input (a
           delta, a pass's columns under the minimum count among them): it
           never leaves in the clear, so the round in the clear is declined */
        fed_log(FED_LOG_WARN, "client: round %llu again, now without secure aggregation: its "
                "contribution went into a secure round; declined, nothing sent in the clear",
                (unsigned long long)c->round);
        (void)n->env.cancel_timer(n->env.self, NODE_TIMER_RETRY);
        c->leave_reason = (uint32_t)FED_ERR_SA_REVEALED;
        c->resends = 0;
        return send_leave(n);
    }
    c->secure = 0;
    if (m->hdr.round == n->round && c->round == n->round && j->vec_len) {
        /* the aggregator runs this round again: the delta we sent was lost */
        fed_log(FED_LOG_INFO, "client: round %llu again; resending its delta",
                (unsigned long long)c->round);
        c->resends = 0;
        return send_delta(n);
    }
    return on_model_train(n, op);
}

/* Its aggregator's MODEL opened (the envelope held) but its vector did not
 * decode (why: FED_ERR_CODEC or FED_ERR_SPEC), or its stream announced more
 * bytes than the model can take (FED_ERR_TOO_LARGE): when the model cannot
 * be built over this client's data (another input shape or class count)
 * the round is declined with a LEAVE FED_ERR_MODEL_MISMATCH; else why. */
static fed_err fed_node_client_bad_model(fed_node *n, node_open *op, fed_err why)
{
    node_client *c = n->client;
    const fed_wire_msg *m = &op->msg;
    const fed_model_shape in = n->cfg.data.train->shape;
    char spec_why[160] = "", *whole = NULL;
    size_t want = 0;
    uint64_t got = 0;
    fed_codec_id id;
    fed_err e;

    if (memcmp(m->hdr.sender, c->agg, 32) != 0 || c->state != CL_ASKING)
        return why;
    if (why == FED_ERR_MODEL_MISMATCH) { /* another graph than its own, or past its bounds */
        fed_log(FED_LOG_WARN, "client: round %llu: %s; declined (%s)",
                (unsigned long long)m->hdr.round, op->model_why,
                fed_errname(FED_ERR_MODEL_MISMATCH));
        goto decline;
    }
    if ((e = fedi_node_model_whole(&m->block.settings, &whole)) != FED_OK)
        return e;
    if (fed_model_spec_explain(whole, in, spec_why, sizeof spec_why) == FED_OK) {
        e = fed_model_spec_nparams(whole, in, &want);
        fed_free(whole);
        whole = NULL;
        if (e != FED_OK)
            return why;
        if (why == FED_ERR_TOO_LARGE) { /* the stream's first frame: no vector yet */
            fed_log(FED_LOG_WARN, "client: round %llu: the aggregator's model '%s' does not "
                    "fit this client's data: over its input %dx%dx%d with %d classes it has %zu "
                    "parameters, and the MODEL's stream is larger than any codec makes them; "
                    "declined (%s)", (unsigned long long)m->hdr.round, m->block.settings.spec,
                    in.c, in.h, in.w, in.classes, want, fed_errname(FED_ERR_MODEL_MISMATCH));
            goto decline;
        }
        if (fed_codec_peek(m->vector, m->vector_len, &id, &got) != FED_OK || got == want)
            return why; /* it builds, and the vector is malformed otherwise */
        fed_log(FED_LOG_WARN, "client: round %llu: the aggregator's model '%s' does not fit "
                "this client's data: over its input %dx%dx%d with %d classes it has %zu "
                "parameters, the MODEL carries %llu; declined (%s)",
                (unsigned long long)m->hdr.round, m->block.settings.spec, in.c, in.h, in.w,
                in.classes, want, (unsigned long long)got, fed_errname(FED_ERR_MODEL_MISMATCH));
    } else {
        fed_free(whole);
        fed_log(FED_LOG_WARN, "client: round %llu: the aggregator's model does not build over "
                "this client's input %dx%dx%d with %d classes: %s; declined (%s)",
                (unsigned long long)m->hdr.round, in.c, in.h, in.w, in.classes, spec_why,
                fed_errname(FED_ERR_MODEL_MISMATCH));
    }
decline:
    c->agg_epoch = m->hdr.sender_epoch;
    return decline_model(n, m->hdr.round);
}

/* Whether the round evaluates the model at this site (MODEL field 17):
 * the job's evaluation set up. A site under DP-SGD releases nothing beyond
 * its noised delta: its evaluation is empty. */
static fed_err eval_plan(fed_node *n, const fed_wire_settings *s, node_train_job *j)
{
    node_client *c = n->client;
    size_t k;

    j->eval_ints = 0;
    if (c->eval_out) /* the last evaluation's figures (a secure site's: its own secret) */
        sodium_memzero(c->eval_out, c->eval_cap * sizeof *c->eval_out);
    if (c->pass || !s->eval_every || c->round % s->eval_every != 0)
        return FED_OK;
    k = fed_site_eval_ints((int)s->eval_classes); /* > 0: settings_ok */
    if (c->eval_cap < k) {
        fed_free(c->eval_out); /* (wiped above) */
        c->eval_cap = 0;
        if (!(c->eval_out = fed_calloc(k, sizeof *c->eval_out)))
            return FED_ERR_NOMEM;
        c->eval_cap = k;
    }
    j->eval_ints = (uint32_t)k;
    j->eval_classes = s->eval_classes;
    j->eval_out = c->eval_out;
    j->val = n->cfg.dp.sgd ? NULL : n->cfg.data.val;
    j->val_idx = n->cfg.dp.sgd ? NULL : n->cfg.data.val_idx;
    j->val_n = n->cfg.data.val_n;
    j->eval_consent = !n->cfg.data.no_site_metrics && !s->sa_on;
    if (!j->val && !j->val_idx)
        fed_log(FED_LOG_INFO, "client: round %llu evaluates the model at the sites; this site "
                "%s: it adds an empty evaluation", (unsigned long long)c->round,
                n->cfg.dp.sgd ? "runs DP-SGD and releases nothing else"
                              : "has no validation split (--val-fraction, --val-data)");
    return FED_OK;
}

/* The MODEL's vector taken, the training job submitted. */
static fed_err on_model_train(fed_node *n, node_open *op)
{
    node_client *c = n->client;
    const fed_wire_msg *m = &op->msg;
    node_train_job *j = &c->job;
    double flops = 0;
    size_t nparams;
    fed_err e;

    if (m->hdr.round <= n->round) /* the aggregator lost it (restart, deadline): redo it */
        fed_log(FED_LOG_INFO, "client: round %llu again", (unsigned long long)m->hdr.round);
    if ((e = settings_ok(&m->block.settings)) != FED_OK) {
        fed_wire_note_reject(n->wire, &m->hdr, e);
        return e;
    }
    if (!paths_agree(n, &m->block.settings, m->hdr.round))
        return decline_round(n, m->hdr.round, FED_ERR_LOCAL_MISMATCH);
    if (!stages_can(n, &m->block.settings, m->hdr.round))
        return decline_round(n, m->hdr.round, FED_ERR_UNSUPPORTED);
    fed_free(c->graph); /* no job runs while the client asks */
    c->graph = NULL;
    if (m->block.settings.graph &&
        (e = fedi_node_model_whole(&m->block.settings, &c->graph)) != FED_OK)
        return e;
    if ((e = flops_of(n, &m->block.settings, c->graph ? c->graph : m->block.settings.spec,
                      &flops)) != FED_OK)
        return e;
    nparams = op->vec_n;
    if (m->block.settings.paths_flags & FED_WIRE_PATHS_SCAFFOLD) { /* c after the model */
        nparams /= 2;
        ctl_settle(n, &m->block.settings, m->hdr.round);
    }
    if (c->residual && c->nparams != nparams) { /* another model: start the residual over */
        fed_free(c->residual);
        c->residual = NULL;
    }
    c->nparams = nparams;
    if (m->block.settings.codec == FED_CODEC_TOPK && !c->residual &&
        !(c->residual = fed_calloc(c->nparams ? c->nparams : 1, sizeof(float))))
        return FED_ERR_NOMEM;
    fed_free(c->global);
    c->global = op->vec;
    op->vec = NULL;
    c->round = m->hdr.round;
    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_RETRY);
    if ((e = stats_plan(n, &m->block.settings)) != FED_OK) {
        c->leave_reason = (uint32_t)e;
        c->resends = 0;
        j->vec_len = 0;
        return send_leave(n);
    }
    j->dp_on = 0; /* the exact pass trains nothing, so spends nothing */
    if (c->pass && c->pass_dp && c->acct) { /* the DP pass: one Gaussian release */
        memset(&j->dp, 0, sizeof j->dp);
        j->dp.noise = (float)m->block.settings.stats_noise;
        j->dp_rate = 1.0;
        j->dp_steps = 1;
        j->dp_on = 1;
    }
    if (!c->pass && (e = dp_plan(n, &m->block.settings, j)) != FED_OK) {
        if (e == FED_ERR_DP_REQUIRED)
            fed_log(FED_LOG_WARN, "client: round %llu requires DP-SGD (clip %g, noise %g); this "
                    "site runs without --dp-sgd: declined", (unsigned long long)c->round,
                    (double)m->block.settings.dp_clip, (double)m->block.settings.dp_noise);
        c->leave_reason = (uint32_t)e;
        c->resends = 0;
        j->vec_len = 0; /* nothing of this round to resend */
        return send_leave(n);
    }

    if ((e = eval_plan(n, &m->block.settings, j)) != FED_OK)
        return e;
    j->job.fn = c->pass ? fedi_node_stats_job_run : fedi_node_train_job_run;
    j->stats = c->stats_out;
    j->stats_cols = n->cfg.data.stats_cols;
    j->job.user = n;
    j->set = m->block.settings;
    j->set.graph = c->graph; /* the frame's view goes with the frame */
    j->set.graph_len = c->graph ? (uint32_t)strlen(c->graph) : 0;
    if (n->cfg.rank_batch) /* a site's own batch per rank (node/site.h) */
        j->set.batch = n->cfg.rank_batch;
    j->coll = n->cfg.coll;
    j->round = c->round;
    j->seed = n->cfg.seed ^ ((uint64_t)n->key[0] | (uint64_t)n->key[1] << 8 |
                             (uint64_t)n->key[2] << 16 | (uint64_t)n->key[3] << 24 |
                             (uint64_t)n->key[4] << 32 | (uint64_t)n->key[5] << 40);
    j->be = n->cfg.be;
    j->pool = n->cfg.pool;
    j->shards = n->cfg.shards;
    j->accumulate = n->cfg.accumulate;
    j->recompute = n->cfg.recompute;
    j->precision = n->cfg.precision;
    j->pipe_stages = n->cfg.pipe_stages;
    j->stage_coll = n->cfg.stage_coll;
    j->gpipe = n->cfg.gpipe;
    j->data = n->cfg.data.train;
    j->aug = n->cfg.data.augment;
    j->noise_std = n->cfg.data.noise_std;
    j->local_test = n->cfg.data.local_test;
    j->finetune_epochs = n->cfg.data.finetune_epochs;
    j->shard = n->cfg.data.shard;
    j->shard_n = n->cfg.data.shard_n;
    j->max_steps = n->cfg.client.max_steps;
    /* SCAFFOLD: the server's c after the model, and its own c_i (NULL: 0) */
    j->ctl_c = j->set.paths_flags & FED_WIRE_PATHS_SCAFFOLD ? c->global + c->nparams : NULL;
    j->ctl_i = c->ctl && c->ctl_nparams == c->nparams ? c->ctl : NULL;
    j->global = c->global;
    j->nparams = c->nparams;
    /* its local tensors of this model, if it kept any (else the MODEL's) */
    j->local = c->local && c->local_nparams == c->nparams ? c->local : NULL;
    j->local_n = j->local ? c->local_n : 0;
    j->personal = c->personal && c->personal_nparams == c->nparams ? c->personal : NULL;
    j->codec.id = (fed_codec_id)m->block.settings.codec;
    j->codec.fraction = m->block.settings.fraction;
    j->residual = j->codec.id == FED_CODEC_TOPK ? c->residual : NULL;
    if (c->pass) { /* its integers' limbs are exact in f32, and in no other codec */
        j->codec.id = FED_CODEC_F32;
        j->residual = NULL;
    }
    j->err = FED_OK;
    c->state = CL_TRAINING;
    c->train_start_ms = fedi_node_wall_ms(n);
    n->env.charge(n->env.self, flops * (double)n->cfg.data.shard_n * j->set.local_epochs);
    if ((e = (fed_err)n->env.submit(n->env.self, &j->job)) != FED_OK) {
        c->state = CL_IDLE;
        arm_retry(n, n->cfg.transfer.retry_ms);
    }
    return e;
}

/* The round's local record: its row and the client's checkpoint, one
 * transaction. */
static fed_err record_round(fed_node *n)
{
    node_client *c = n->client;
    node_train_job *j = &c->job;
    fed_store *st = n->cfg.store;
    uint8_t state[FED_NODE_STATE_BYTES];
    uint8_t *res = NULL, *loc = NULL, *per = NULL, *ctl = NULL;
    fed_store_round row;
    fed_store_section sec[8] = {{FED_NODE_SEC_STATE, state, sizeof state}};
    fed_node_model_sec ms;
    size_t ns = 1, nctl;
    fed_err e;

    fedi_node_state_encode(state, FED_NODE_CLIENT, c->round);
    if (j->residual) {
        if (!(res = fed_malloc(c->nparams * sizeof(float))))
            return FED_ERR_NOMEM;
        fed_put_f32le_n(res, c->residual, c->nparams);
        sec[ns++] = (fed_store_section){FED_CKPT_SEC_RESIDUAL, res, c->nparams * sizeof(float)};
    }
    if (c->local) { /* the local tensors survive a restart */
        if (!(loc = fed_malloc(8 + c->local_n * sizeof(float)))) {
            fed_free(res);
            return FED_ERR_NOMEM;
        }
        fed_put_u64le(loc, c->local_nparams);
        fed_put_f32le_n(loc + 8, c->local, c->local_n);
        sec[ns++] = (fed_store_section){FED_CKPT_SEC_LOCAL, loc, 8 + c->local_n * sizeof(float)};
    }
    if (c->personal) { /* Ditto's personal model survives a restart */
        size_t len = 8 + c->personal_nparams * sizeof(float);

        if (!(per = fed_malloc(len))) {
            fed_free(res);
            fed_free(loc);
            return FED_ERR_NOMEM;
        }
        fed_put_u64le(per, c->personal_nparams);
        fed_put_f32le_n(per + 8, c->personal, c->personal_nparams);
        sec[ns++] = (fed_store_section){FED_CKPT_SEC_PERSONAL, per, len};
    }
    if (c->personal && j->model) { /* its model, so `export --personal` can build it */
        fed_node_model_sec_encode(&ms, c->graph ? c->graph : j->set.spec,
                                  fed_model_input(j->model), NULL, 0);
        sec[ns++] = ms.s[0];
        sec[ns++] = ms.s[1];
    }
    if ((nctl = ctl_section(c, &ctl)) == SIZE_MAX) { /* SCAFFOLD's c_i and the one pending */
        fed_free(res);
        fed_free(loc);
        fed_free(per);
        return FED_ERR_NOMEM;
    }
    if (nctl)
        sec[ns++] = (fed_store_section){CL_CKPT_SEC_CONTROL, ctl, nctl};
    memset(&row, 0, sizeof row);
    row.round = c->round;
    row.start_ms = c->train_start_ms;
    row.end_ms = fedi_node_wall_ms(n);
    row.loss = j->loss;
    row.accuracy = j->local_test ? j->own_acc : NAN; /* its own model, its local test split */
    row.samples = j->samples;
    row.lr = j->set.lr; /* what the round's MODEL said */
    row.peers = 1;
    snprintf(row.strategy, sizeof row.strategy, "client");
    {
        double eps = 0;

        /* a DP round's charge is fsynced whatever --db-sync says */
        /* (so is a secure round's: after a restart the record says its
           masked input may have gone out, and the round is declined) */
        e = j->dp_on || c->secure ? fed_store_begin_durable(st) : fed_store_begin(st);
        if (e == FED_OK && j->dp_on)
            e = fed_dp_account_charge(c->acct, st, c->round, row.end_ms, j->dp_rate,
                                      (double)j->dp.noise, (uint64_t)j->dp_steps, &eps);
        row.epsilon = eps;
        if (e == FED_OK && (e = fed_store_put_round(st, &row)) == FED_OK &&
            (e = fed_store_checkpoint_write(st, c->round, sec, ns, NULL)) == FED_OK)
            e = fed_store_commit(st);
        if (e != FED_OK)
            fed_store_rollback(st);
        if (j->dp_on && e == FED_OK)
            c->epsilon = eps;
        else if (j->dp_on && fed_dp_account_load(c->acct, st) != FED_OK)
            fed_log(FED_LOG_ERROR, "client: re-reading the privacy spent failed");
    }
    fed_free(res);
    fed_free(loc);
    fed_free(per);
    fed_free(ctl);
    return e;
}

/* A round whose record did not commit (a DP-SGD round's charge, or a
 * secure round's record, both durable before anything leaves): its delta
 * is not sent (nor masked), and the client asks again later. */
static fed_err not_sent_unrecorded(fed_node *n, fed_err why)
{
    node_client *c = n->client;

    fed_log(FED_LOG_ERROR, "client: recording round %llu%s failed: %s; its delta is not sent",
            (unsigned long long)c->round, c->job.dp_on ? " (its privacy charge)" : "",
            fed_strerror(why));
    c->job.vec_len = 0;
    c->state = CL_IDLE;
    arm_retry(n, n->cfg.transfer.retry_ms);
    return why;
}

static void dp_log_spent(const fed_node *n)
{
    const node_client *c = n->client;
    const node_train_job *j = &c->job;

    fed_log(FED_LOG_INFO, "client: round %llu: %ld DP-SGD steps at q %.4g, noise %g: "
            "epsilon %.4f spent (delta %g)", (unsigned long long)c->round, j->dp_steps,
            j->dp_rate, (double)j->dp.noise, c->epsilon, n->cfg.dp.delta);
}

static fed_err fed_node_client_on_job(fed_node *n, fed_job *job)
{
    node_client *c = n->client;
    node_train_job *j = &c->job;
    fed_node_round_info info;
    fed_err e, rec;

    if (job != &j->job)
        return FED_ERR_INTERNAL;
    heard(n, 0); /* it trained, it did not wait */
    if (j->err == FED_ERR_DP_STATS || j->err == FED_ERR_STEPS || j->err == FED_ERR_NAN) {
        /* a round this site may not send: declined; a training that
           diverged (FED_ERR_NAN) would diverge again from the same model */
        fed_log(j->err == FED_ERR_NAN ? FED_LOG_ERROR : FED_LOG_WARN,
                "client: round %llu: %s: declined, nothing sent", (unsigned long long)c->round,
                j->err == FED_ERR_NAN ? "its training diverged (loss not finite)"
                                      : fed_strerror(j->err));
        if (c->secure)
            fedi_node_sa_client_abort(n);
        c->leave_reason = (uint32_t)j->err;
        c->resends = 0;
        j->vec_len = 0;
        return send_leave(n);
    }
    if (j->err == FED_ERR_SHAPE) { /* the model does not fit this client's data (its
                                      task, say): every round would fail alike */
        fed_log(FED_LOG_ERROR, "client: round %llu: its training failed over this client's "
                "data (%s, said above): declined (%s)", (unsigned long long)c->round,
                fed_strerror(j->err), fed_errname(FED_ERR_MODEL_MISMATCH));
        if (c->secure)
            fedi_node_sa_client_abort(n);
        return decline_model(n, c->round);
    }
    if (j->err != FED_OK) {
        fed_log(FED_LOG_ERROR, "client: training round %llu failed: %s",
                (unsigned long long)c->round, fed_strerror(j->err));
        c->state = CL_IDLE;
        arm_retry(n, n->cfg.transfer.retry_ms);
        return j->err;
    }
    c->resends = 0;
    if (j->local_test && !isnan(j->own_acc))
        fed_log(FED_LOG_INFO, "client: round %llu: its own model scores accuracy %.4f on its local "
                "test split (%zu samples), before training", (unsigned long long)c->round,
                j->own_acc, j->local_test->n);
    if (j->ctl_c) { /* SCAFFOLD: its next c_i, committed once this round merged */
        float *t = c->ctl_next;

        c->ctl_next = j->ctl_out;
        j->ctl_out = t;
        c->ctl_round = c->round;
        if (c->ctl && c->ctl_nparams != c->nparams) { /* another model's */
            fed_free(c->ctl);
            c->ctl = NULL;
        }
        c->ctl_nparams = c->nparams;
    }
    if (j->local_out) { /* its local tensors as trained: kept, and in the record */
        fed_free(c->local);
        c->local = j->local_out;
        c->local_n = j->layout.len[LAYOUT_LOCAL];
        c->local_nparams = c->nparams;
        j->local_out = NULL;
    }
    if (j->personal_out) { /* Ditto: its personal model as trained */
        fed_free(c->personal);
        c->personal = j->personal_out;
        c->personal_nparams = c->nparams;
        j->personal_out = NULL;
    }
    if (c->secure) {
        /* secure aggregation: the delta goes only into the masked input */
        if ((rec = record_round(n)) != FED_OK) {
            /* the record (and a DP charge) is durable before the masked
               input leaves, or the input does not leave */
            fedi_node_sa_client_abort(n);
            return not_sent_unrecorded(n, rec);
        }
        if (j->dp_on)
            dp_log_spent(n);
        if (fedi_node_sa_client_active(n->client_sa)) {
            c->state = CL_SECAGG;
            e = secure_trained(n);
        } else {
            e = FED_OK;
        }
        if (!fedi_node_sa_client_active(n->client_sa))
            e = ask(n, FED_WIRE_NEXT); /* the round was dropped meanwhile */
    } else if (j->dp_on) {
        /* DP-SGD: the round's epsilon is charged and fsynced before the
           delta leaves, so no crash, full disk or restart forgets a
           release; a round that cannot be charged is not sent */
        if ((rec = record_round(n)) != FED_OK)
            return not_sent_unrecorded(n, rec);
        dp_log_spent(n);
        e = send_delta(n);
    } else {
        /* the delta goes out first: the aggregator waits for it, and the
           record's commit (an fsync) need not; a crash in between only
           means this round is trained again if it is asked for again */
        e = send_delta(n);
        if ((rec = record_round(n)) != FED_OK)
            fed_log(FED_LOG_ERROR, "client: recording round %llu failed: %s",
                    (unsigned long long)c->round, fed_strerror(rec));
    }
    n->round = c->round;
    fed_free(c->global);
    c->global = NULL;
    j->global = NULL;
    memset(&info, 0, sizeof info);
    info.round = c->round;
    info.samples = j->samples;
    info.loss = j->loss;
    info.lr = j->set.lr;
    info.accuracy = NAN;
    info.end_ms = fedi_node_wall_ms(n);
    info.start_ms = c->train_start_ms;
    if (n->cfg.on_round)
        n->cfg.on_round(n->cfg.observer, n, &info);
    return e;
}

/* ---- replies and timers ---- */

/* The aggregator held an ask a poll and answered that it leaves this
 * client out of its rounds until it restarts (why: the reason it declined
 * with): said once, and it asks again, so that it learns when the run is
 * over (FINISHED) or the aggregator restarts. */
static fed_err on_parked(fed_node *n, uint32_t why)
{
    node_client *c = n->client;

    if (c->parked != why)
        fed_log(FED_LOG_WARN, "client: the aggregator leaves this client out of its rounds "
                "(%s: %s) until it restarts", fed_errname((int)why), fed_strerror((int)why));
    c->parked = why;
    return ask(n, FED_WIRE_NEXT);
}

static fed_err on_ack(fed_node *n, const fed_wire_msg *m)
{
    node_client *c = n->client;
    const fed_wire_block *b = &m->block;

    if (b->ack_flags & FED_WIRE_ACK_FINISHED) {
        c->state = CL_DONE;
        n->finished = 1;
        (void)n->env.cancel_timer(n->env.self, NODE_TIMER_RETRY);
        fed_log(FED_LOG_INFO, "client: the aggregator finished training");
        return FED_OK;
    }
    if (c->state == CL_SENDING && m->hdr.round == c->round) {
        if (b->status == FED_OK && fedi_node_tx_active(n, c->agg)) {
            int sent = 0;
            fed_err e = push_delta(n, &sent);

            if (sent || e != FED_OK)
                return e; /* a failed push: the retry timer resends */
        }
        fedi_node_tx_drop(n, c->agg);
        if (b->status != FED_OK) {
            fed_log(FED_LOG_WARN, "client: delta of round %llu refused: %s",
                    (unsigned long long)c->round, fed_strerror((int)b->status));
            if (c->ctl_round == c->round) /* not merged: c_i stays */
                c->ctl_round = 0;
        }
        return ask(n, FED_WIRE_NEXT);
    }
    if (c->state == CL_ASKING && (b->ack_flags & FED_WIRE_ACK_NO_ROUND)) {
        if (b->status != FED_OK) /* left out, not a long poll that ran out */
            return on_parked(n, b->status);
        return ask(n, FED_WIRE_NEXT);
    }
    return FED_OK; /* an answer to a request we gave up on */
}

/* The aggregator answered a request with FED_ERR_OLD_EPOCH: it restarted
 * since this client learnt its epoch, so whatever round was under way is
 * gone with that process. The round's secure-aggregation state is dropped
 * (its record that a masked input went out stays) and the client says HELLO
 * at once, as it would after its retries, instead of asking the dead epoch
 * until they run out. */
static fed_err on_new_epoch(fed_node *n, const fed_wire_msg *m)
{
    node_client *c = n->client;

    if (c->state == CL_DONE || !c->agg_epoch || m->hdr.sender_epoch <= c->agg_epoch)
        return FED_OK; /* a late answer to a request of before the last HELLO */
    fed_log(FED_LOG_INFO, "client: the aggregator restarted (epoch %llu, was %llu): round %llu "
            "is gone with it; saying HELLO", (unsigned long long)m->hdr.sender_epoch,
            (unsigned long long)c->agg_epoch, (unsigned long long)c->round);
    c->agg_epoch = 0; /* the next ask is a HELLO */
    if (fedi_node_sa_client_active(n->client_sa))
        fedi_node_sa_client_abort(n);
    fedi_node_tx_drop(n, c->agg);
    if (c->state == CL_TRAINING)
        return FED_OK; /* the job's end asks (HELLO: the epoch is unknown) */
    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_RETRY);
    return ask(n, FED_WIRE_HELLO);
}

static void fed_node_client_prepare_open(fed_node *n, node_open *op)
{
    op->expect_n = 0; /* from the MODEL's spec */
    op->shape = n->cfg.data.train->shape;
    op->own_model = n->cfg.client.own_model;
    op->classes = n->cfg.client.classes;
    op->max_params = n->cfg.client.max_model_params;
    op->max_flops = n->cfg.client.max_model_flops;
    op->expect_codec = FED_CODEC_NONE;
    op->job.loop_ok = 1; /* its MODEL: nothing else to do meanwhile */
}

static void fed_node_client_progress(const fed_node *n, fed_node_progress *out)
{
    out->silent_ms = silent_ms(n);
}

static fed_err fed_node_client_on_msg(fed_node *n, node_open *op)
{
    node_client *c = n->client;
    const fed_wire_msg *m = &op->msg;

    if (op->req) { /* nobody sends a client requests */
        fedi_node_refuse(n, op->req);
        op->req = NULL;
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        return FED_ERR_ROLE;
    }
    if (memcmp(m->hdr.sender, c->agg, 32) != 0) {
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        return FED_ERR_ROLE;
    }
    heard(n, 1);
    if (m->hdr.type == FED_WIRE_ACK && m->block.status == (uint32_t)FED_ERR_OLD_EPOCH)
        return on_new_epoch(n, m);
    c->agg_epoch = m->hdr.sender_epoch;
    if (c->state == CL_DONE)
        return FED_OK;
    if (FED_WIRE_IS_SA(m->hdr.type) ||
        (m->hdr.type == FED_WIRE_ACK && fedi_node_sa_client_active(n->client_sa) &&
         !(m->block.ack_flags & FED_WIRE_ACK_FINISHED) &&
         (c->state == CL_TRAINING || c->state == CL_SECAGG))) {
        int done = 0;
        fed_err e;

        if (!fedi_node_sa_client_active(n->client_sa))
            return FED_OK; /* an answer to a stage given up on */
        e = fedi_node_sa_client_on_reply(n, op, &done);
        if (done && c->state != CL_TRAINING)
            return ask(n, FED_WIRE_NEXT);
        return e;
    }
    switch (m->hdr.type) {
    case FED_WIRE_MODEL: return on_model(n, op);
    case FED_WIRE_ACK: return on_ack(n, m);
    default:
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        return FED_ERR_ROLE;
    }
}

static fed_err fed_node_client_on_timer(fed_node *n, uint32_t id)
{
    node_client *c = n->client;

    if (id != NODE_TIMER_RETRY)
        return FED_ERR_INVAL;
    say_silence(n);
    if (fedi_node_sa_client_active(n->client_sa) &&
        (c->state == CL_TRAINING || c->state == CL_SECAGG)) {
        int gave_up = 0;
        fed_err e = fedi_node_sa_client_retry(n, &gave_up);

        if (gave_up && c->state != CL_TRAINING)
            return ask(n, FED_WIRE_HELLO);
        return e;
    }
    switch (c->state) {
    case CL_SENDING: {
        int leave = c->out_type == FED_WIRE_LEAVE;
        fed_err e;

        if (!fedi_node_retry_take(n, leave ? NULL : c->agg, &c->resends, n->cfg.client.delta_retries))
            return ask(n, FED_WIRE_HELLO); /* the aggregator may have restarted */
        if (leave)
            return send_leave(n);
        fed_log(FED_LOG_INFO, "client: no answer to the delta of round %llu; resending",
                (unsigned long long)c->round);
        if (fedi_node_retry_frame(n, c->agg, n->cfg.transfer.retry_ms, &e))
            return e;
        return send_delta(n);
    }
    case CL_ASKING:
        if (repull(n) == FED_OK)
            return FED_OK;
        return ask(n, FED_WIRE_HELLO);
    case CL_IDLE:
        return ask(n, FED_WIRE_HELLO);
    default:
        return FED_OK;
    }
}

/* The client's part of fed_node_new's configuration check. */
static fed_err fed_node_client_check(const fed_node_config *c)
{
    if (!c->data.train || !c->data.shard || !c->data.shard_n)
        return FED_ERR_INVAL;
    if (c->dp.sgd && (!(c->dp.sgd_clip > 0) || !(c->dp.sgd_noise >= 0) || !isfinite(c->dp.sgd_noise) ||
                      !(c->dp.delta > 0 && c->dp.delta < 1) || !(c->dp.budget >= 0)))
        return FED_ERR_BAD_VALUE;
    if (c->dp.sgd && !(c->be->caps & FED_BACKEND_CAP_DP_SGD))
        return FED_ERR_UNSUPPORTED; /* DP-SGD has no parity test on another backend */
    return FED_OK;
}

/* A reply whose vector did not decode, or whose stream is too long: a
 * MODEL (a too-long one once its settings named a spec) may be one it
 * cannot build. */
static fed_err fed_node_client_bad_reply(fed_node *n, node_open *op, fed_err why)
{
    if (op->msg.hdr.type != FED_WIRE_MODEL ||
        (why == FED_ERR_TOO_LARGE && !op->msg.block.settings.spec[0]))
        return why;
    return fed_node_client_bad_model(n, op, why);
}

const node_role_ops fedi_node_client_ops = {
    .check = fed_node_client_check,
    .create = fed_node_client_new,
    .destroy = fed_node_client_free,
    .start = fed_node_client_start,
    .stop = NULL, /* nothing to save */
    .prepare_open = fed_node_client_prepare_open,
    .on_msg = fed_node_client_on_msg,
    .on_timer = fed_node_client_on_timer,
    .on_job = fed_node_client_on_job,
    .progress = fed_node_client_progress,
    .bad_reply = fed_node_client_bad_reply,
    .pulled = fed_node_client_pulling,
    .rate_from_model = 1,
    .streams_in_replies = 1,
    .tells_old_epoch = 0,
};

const float *fed_node_client_local(const fed_node *n, size_t nparams, size_t *len)
{
    const node_client *c = n->client;

    *len = 0;
    if (!c || !c->local || c->local_nparams != nparams)
        return NULL;
    *len = c->local_n;
    return c->local;
}

const float *fed_node_client_personal(const fed_node *n, size_t nparams)
{
    const node_client *c = n->client;

    return c && c->personal && c->personal_nparams == nparams ? c->personal : NULL;
}
