/* aggregator.c - the aggregator role: holds clients' HELLO/NEXT until a
 * round starts, samples the round's clients, answers them with the round's
 * MODEL, collects their DELTAs until all came or the deadline, merges the
 * round's aggregate input (agg_input.c: plain, secure, DP around either)
 * through fed_merge, and commits the round row, contributions, counters
 * and a checkpoint in one transaction. How rounds follow one another is a
 * round mode (agg_mode_ops): the synchronous one here, async (FedBuff) in
 * agg_async.c; the evaluation is agg_eval.c. Owns the global
 * model and the held requests; never sees a client's data. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "core/rng.h"
#include "crypto/envelope.h"
#include "node/ckpt_model.h"
#include "node/aggregator_impl.h"
#include "node/secagg_impl.h"
#include "node/test_hooks.h"
#include "node/site_eval.h"

/* After a failed round (a failed commit), the next try waits gather_ms,
 * then twice as long each time, up to this. */
#define AGG_RETRY_MAX_MS 60000


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

/* round is the run's last: --rounds training rounds after the statistics
 * pass (round 1, which trains nothing), or the pass alone with stats_only. */
static int run_done_at(const fed_node *n, uint64_t round)
{
    if (n->cfg.data.stats_only && fedi_node_agg_stats_known(n))
        return 1;
    return n->cfg.rounds && round >= n->cfg.rounds + (n->agg->stats ? 1u : 0u);
}

/* The rate of round: the schedule counts training rounds, so after the
 * statistics pass round r trains at round r - 1's step. */
static float round_lr(const fed_node *n, uint64_t round)
{
    return fedi_node_round_lr(n, n->agg->stats && round > 1 ? round - 1 : round);
}

/* Each glob of --local-layers names some tensor of the model (a typo would
 * send what the operator meant to keep): FED_ERR_SPEC naming the first
 * that names none, and the model's first tensor names. */
static fed_err globs_match(const fed_node *n, const fed_tensor_info *t, int nt)
{
    const char *p = n->cfg.local_layers;

    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char glob[256], names[160] = "";
        int hit = 0;

        snprintf(glob, sizeof glob, "%.*s", (int)len, p);
        for (int i = 0; i < nt && !hit; i++)
            hit = fed_model_tensor_match(glob, t[i].name);
        if (!hit) {
            int listed = 0;

            while (listed < nt && strlen(names) + strlen(t[listed].name) + 8 < sizeof names) {
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         listed ? ", " : "", t[listed].name);
                listed++;
            }
            fed_log(FED_LOG_ERROR, "aggregator: --local-layers: '%s' names no tensor of model "
                    "'%s' (its tensors: %s%s)", glob, n->cfg.spec, names,
                    listed < nt ? ", ..." : "");
            return FED_ERR_SPEC;
        }
        p = comma ? comma + 1 : p + len;
    }
    return FED_OK;
}

/* FED_TENSOR_NORM: a batch norm's tensor (model.h), what --local-bn keeps */
static int has_batchnorm(const fed_tensor_info *t, int nt)
{
    for (int i = 0; i < nt; i++)
        if (t[i].flags & FED_TENSOR_NORM)
            return 1;
    return 0;
}

/* The tensors' paths (node/layout.h) from --local-layers and --local-bn;
 * under DP (DP-FedAvg, or DP-SGD required) every norm tensor and every
 * statistic stays at the sites, computed from the data without noise. */
static fed_err paths_new(fed_node *n)
{
    const fed_node_config *c = &n->cfg;
    node_agg *a = n->agg;
    int dp = c->dp.client_clip > 0 || c->dp.require_sgd, nt;
    const fed_tensor_info *t = fed_model_tensors(a->model, &nt);
    size_t kept = 0; /* norm tensors and statistics: what DP keeps at the sites */
    fed_merge_traits mt;
    fed_err e;

    if ((e = globs_match(n, t, nt)) != FED_OK)
        return e;
    if (c->local_bn && !has_batchnorm(t, nt)) { /* FedBN asked of a model it cannot change */
        fed_log(FED_LOG_ERROR, "aggregator: --local-bn: model '%s' has no batch-norm layer "
                "whose tensors could stay at the sites (--local-bn keeps batch norm's; a layer "
                "or group norm is federated, or kept by --local-layers)", c->spec);
        return FED_ERR_SPEC;
    }
    a->rules.local_layers = c->local_layers;
    a->rules.local_bn = c->local_bn || dp;
    a->rules.stats_local = dp;
    if ((e = fed_merge_spec_traits(c->agg.strategy, &mt)) != FED_OK)
        return e;
    a->rules.fednova = mt.fednova;
    a->rules.scaffold = mt.scaffold;
    if ((e = fed_node_layout_of(t, nt, a->nparams, &a->rules, &a->layout)) != FED_OK)
        return e;
    if (!a->layout.len[LAYOUT_TRAINED] && !a->layout.len[LAYOUT_STATS]) {
        fed_log(FED_LOG_ERROR, "aggregator: --local-layers '%s'%s keeps every tensor of model "
                "'%s' at the sites: nothing is left to federate", c->local_layers,
                a->rules.local_bn ? " with --local-bn" : "", c->spec);
        return FED_ERR_SPEC;
    }
    for (int i = 0; i < nt; i++) {
        if (((t[i].flags & FED_TENSOR_NORM) || !(t[i].flags & FED_TENSOR_TRAINED)) &&
            !(t[i].flags & FED_TENSOR_INT64))
            kept += t[i].numel;
        /* a counter shapes no output: the aggregator keeps its own */
        if (!(t[i].flags & FED_TENSOR_INT64) &&
            fed_node_layout_path(&t[i], &a->rules) == LAYOUT_LOCAL)
            a->eval_local = 1;
    }
    if (dp && !c->local_bn && kept)
        fed_log(FED_LOG_INFO, "aggregator: DP: the model's batch-norm tensors and non-trained "
                "statistics (%zu floats) stay at the sites (--local-bn implied): they are "
                "computed from the data without noise", kept);
    if (a->layout.len[LAYOUT_STATS] &&
        !(a->norm_stats = fed_calloc(a->layout.len[LAYOUT_STATS], sizeof *a->norm_stats)))
        return FED_ERR_NOMEM;
    if (a->layout.extra &&
        !(a->extra_mean = fed_calloc(a->layout.extra, sizeof *a->extra_mean)))
        return FED_ERR_NOMEM;
    if (a->eval_local)
        fed_log(FED_LOG_WARN, "aggregator: %zu of %zu parameters stay at the sites (%s): this "
                "node's own evaluation uses its initial values of them and is not meaningful; "
                "the sites' evaluation is the measure", a->layout.len[LAYOUT_LOCAL], a->nparams,
                c->local_layers[0] ? "--local-layers" : dp ? "DP" : "--local-bn");
    return FED_OK;
}

static fed_err fed_node_agg_new(fed_node *n)
{
    const fed_node_config *c = &n->cfg;
    node_agg *a = fed_calloc(1, sizeof *a);
    fed_merge_config mc = {.max_clients = FED_MERGE_DEFAULT_MAX_CLIENTS,
                           .weight_cap = c->agg.weight_cap,
                           .pool = c->pool};
    fed_err e;

    if (!a)
        return FED_ERR_NOMEM;
    /* a round takes as many clients as it is told to wait for */
    if (c->agg.min_clients > (uint32_t)mc.max_clients)
        mc.max_clients = (int)c->agg.min_clients;
    if (c->agg.wait_clients > (uint32_t)mc.max_clients)
        mc.max_clients = (int)c->agg.wait_clients;
    n->agg = a;
    a->max_clients = mc.max_clients;
    a->mode = c->agg.async_k ? &fedi_node_agg_async_mode : &fedi_node_agg_sync_mode;
    if ((e = fed_codec_parse(c->transfer.codec, &a->codec)) != FED_OK)
        return e;
    if (a->codec.id == FED_CODEC_F64) { /* push-sum's codec: no client's DELTA decodes with it */
        fed_log(FED_LOG_ERROR, "aggregator: codec f64 is for peers' shares; a DELTA takes f32, "
                               "f16, q8 or topk:F");
        return FED_ERR_CODEC;
    }
    if (c->graph) { /* a graph named by its id: the id must be the graph's */
        char id[FED_MODEL_SPEC_MAX];

        fed_model_spec_id(c->graph, id);
        if (strcmp(id, c->spec) != 0)
            return FED_ERR_INVAL;
    }
    if ((e = fed_model_new(fed_node_cfg_whole(c), c->shape, c->be, c->pool, c->shards, 256,
                           &a->model)) != FED_OK)
        return e;
    a->nparams = fed_model_nparams(a->model);
    if (c->hooks && c->hooks->mark_model)
        c->hooks->mark_model(c->hooks->ctx, a->model);
    if ((e = paths_new(n)) != FED_OK)
        return e;
    if ((e = fed_merge_new(c->agg.strategy, a->nparams, &mc, c->be, &a->merge)) != FED_OK)
        return e;
    if ((e = alloc_scratch(n)) != FED_OK || (e = fedi_node_agg_scaffold_new(n)) != FED_OK)
        return e;
    if (c->secagg.on) {
        const char *why = fedi_node_sa_agg_misfit(c, fed_node_layout_sent(&a->layout),
                                                  (size_t)a->max_clients);

        if (why) {
            fed_log(FED_LOG_ERROR, "aggregator: %s", why);
            return FED_ERR_UNSUPPORTED;
        }
        if ((e = fedi_node_sa_agg_new(n, &a->sa)) != FED_OK)
            return e;
    }
    if ((e = fedi_node_agg_dp_new(n)) != FED_OK)
        return e;
    if (a->layout.extra && (a->dp || fed_node_agg_is_async(n))) {
        /* each needs every client's own change in the round's sum: DP-FedAvg
           noises one clipped mean, FedBuff merges stale deltas one by one */
        fed_log(FED_LOG_ERROR, "aggregator: --strategy %s %s", c->agg.strategy,
                a->dp ? "does not combine with DP-FedAvg (--dp-client-clip): its clip and "
                        "noise would cover the model delta but not the strategy's own "
                        "segment; use fedavg"
                      : "needs synchronous rounds (its clients' segments are merged over "
                        "one round's cohort): use --mode sync");
        return FED_ERR_UNSUPPORTED;
    }
    if (c->data.stats_cols && (a->dp || fed_node_agg_is_async(n))) {
        /* the pass's totals are a release DP-FedAvg's accounting does not
           cover (no noise is added to them), and it needs a round of its own */
        fed_log(FED_LOG_ERROR, "aggregator: shared statistics (--standardize) %s",
                a->dp ? "are not noised, and DP-FedAvg's epsilon would not cover them: use "
                        "--no-standardize, or a statistics file (--stats)"
                      : "need synchronous rounds: use --mode sync");
        return FED_ERR_UNSUPPORTED;
    }
    if (a->rules.fednova && c->agg.weight_cap > 0 && c->agg.weight_cap < 1) {
        /* the merge would cap the shares p_i of sum p_i d_i, not those of
           tau_eff = sum p_i a_i */
        fed_log(FED_LOG_ERROR, "aggregator: --strategy fednova weighs each client by its data "
                "in two sums, and --weight-cap would cap only one: leave --weight-cap at 0");
        return FED_ERR_UNSUPPORTED;
    }
    if (a->layout.extra && (a->codec.id == FED_CODEC_Q8 || a->codec.id == FED_CODEC_TOPK)) {
        /* FedNova's a_i or SCAFFOLD's control change, cut to 8 bits or dropped */
        fed_log(FED_LOG_ERROR, "aggregator: --strategy %s sends its own segment with each "
                "delta, which --codec %s would round to 8 bits or drop: use f32 or f16",
                c->agg.strategy, c->transfer.codec);
        return FED_ERR_UNSUPPORTED;
    }
    if ((e = fedi_node_agg_stats_new(n)) != FED_OK ||
        (e = fed_node_agg_site_eval_check(n)) != FED_OK)
        return e;
    a->in = fedi_node_agg_input_of(n, NULL);
    return FED_OK;
}

static void parts_clear(node_agg *a)
{
    for (size_t i = 0; i < a->nparts; i++) {
        fed_free(a->parts[i].delta);
        memset(&a->parts[i], 0, sizeof a->parts[i]);
    }
    a->nparts = 0;
}

static void fed_node_agg_free(fed_node *n)
{
    node_agg *a = n->agg;

    if (!a)
        return;
    /* held requests are the environment's: forgotten, never answered (the
       simulator has freed them at a crash; the daemon's transport frees
       its own when it closes) */
    if (a->parts)
        parts_clear(a);
    fedi_node_sa_agg_free(n, a->sa);
    fedi_node_agg_stats_free(n);
    for (int i = 0; a->dev && i < a->max_clients; i++)
        if (a->dev[i])
            n->cfg.be->free(n->cfg.be, a->dev[i]);
    fed_free(a->dev);
    fed_free(a->parts);
    fed_free(a->inputs);
    fed_free(a->results);
    fed_free(a->holds);
    fed_free(a->parked);
    fed_free(a->model_vec);
    fed_free(a->host);
    fed_free(a->committed);
    fed_free(a->committed_state);
    fed_merge_free(a->merge);
    fed_model_free(a->model);
    fedi_node_agg_eval_free(a);
    fedi_node_agg_dp_free(a);
    fedi_node_agg_budget_free(a);
    fed_node_layout_fini(&a->layout);
    fed_free(a->norm_stats);
    fed_free(a->extra_mean);
    fedi_node_agg_scaffold_free(n);
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

    e = fedi_node_resume_latest(n, &ck, &round);
    if (e == FED_ERR_NOTFOUND)
        return fedi_node_agg_dp_start(n, NULL);
    if (e != FED_OK)
        goto out;
    merge = fed_store_ckpt_find(&ck, FED_CKPT_SEC_MERGE);
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
    if ((e = fedi_node_agg_dp_start(n, &ck)) == FED_OK &&
        (e = fedi_node_agg_stats_resume(n, &ck)) == FED_OK)
        e = fedi_node_agg_scaffold_resume(n, &ck);
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

static void report_waiting(fed_node *n);

static fed_err fed_node_agg_start(fed_node *n)
{
    node_agg *a = n->agg;
    fed_rng rng;
    fed_err e;

    fed_rng_seed(&rng, n->cfg.seed);
    if ((e = fed_model_init(a->model, &rng)) != FED_OK ||
        (n->cfg.init_params && (e = fed_model_set_params(a->model, n->cfg.init_params)) != FED_OK))
        return e;
    if ((e = resume(n)) != FED_OK || (e = load_counter_base(n)) != FED_OK ||
        (e = fed_model_get_params(a->model, a->host)) != FED_OK)
        return e;
    if (run_done_at(n, n->round) || fedi_node_agg_early_stopped(n)) {
        a->state = AGG_DONE;
        n->finished = 1;
        return FED_OK;
    }
    return a->mode->start(n);
}

/* Synchronous rounds begin: clients are held until enough gather. */
static fed_err sync_start(fed_node *n)
{
    report_waiting(n);
    fedi_node_agg_arm_poll(n);
    if (n->round > 0) /* resumed after a round: as fedi_node_agg_close_round would go on */
        return fedi_node_arm_in(n, n->cfg.agg.gather_ms, NODE_TIMER_ROUND);
    return FED_OK;
}

/* ---- holds ---- */

/* The poll timer: the oldest hold's poll_ms, or the next report of whom
 * an idle aggregator waits for, whichever comes first. */
void fedi_node_agg_arm_poll(fed_node *n)
{
    node_agg *a = n->agg;
    uint64_t first = UINT64_MAX;

    for (size_t i = 0; i < a->nholds; i++)
        if (a->holds[i].since_ms + n->cfg.transfer.poll_ms < first)
            first = a->holds[i].since_ms + n->cfg.transfer.poll_ms;
    for (size_t i = 0; i < a->nparked; i++)
        if (a->parked[i].since_ms + n->cfg.transfer.poll_ms < first)
            first = a->parked[i].since_ms + n->cfg.transfer.poll_ms;
    if (a->state == AGG_IDLE && a->wait_report_ms && a->wait_report_ms < first)
        first = a->wait_report_ms;
    if (first == UINT64_MAX)
        (void)n->env.cancel_timer(n->env.self, NODE_TIMER_POLL);
    else
        fedi_node_arm(n, first, NODE_TIMER_POLL); /* a failure stops the node */
}

#define AGG_WAIT_REPORT_MS 30000
#define AGG_WAIT_NAMES 320 /* bytes of member names in one report */

static int key32_cmp(const void *x, const void *y) { return memcmp(x, y, 32); }

/* An allow-list of fewer clients than a round needs: no round can start
 * until it grows (it is read again on SIGHUP), said at warning level with
 * each report of whom the aggregator waits for. */
static void say_too_few_members(const fed_node *n)
{
    const fed_node_config *c = &n->cfg;
    unsigned need = c->agg.min_clients;
    const char *what = "--min-clients";
    size_t clients;

    if (!c->allow)
        return;
    clients = fed_crypto_allow_count(c->allow) - (fed_crypto_allow_find(c->allow, n->key) != NULL);
    if (c->secagg.on) { /* a secure round's floor, never below FED_NODE_SA_FLOOR */
        unsigned floor = c->secagg.min_clients > FED_NODE_SA_FLOOR ? c->secagg.min_clients
                                                                     : FED_NODE_SA_FLOOR;

        if (floor > need) {
            need = floor;
            what = "--secagg-min-clients";
        }
    }
    if (clients < need)
        fed_log(FED_LOG_WARN, "aggregator: the allow-list has %zu client%s, fewer than %s %u: no "
                "round can start until it lists more (send SIGHUP once it does)", clients,
                clients == 1 ? "" : "s", what, need);
    else if (c->agg.wait_clients > clients)
        fed_log(FED_LOG_WARN, "aggregator: --wait-clients %u is more than the allow-list's %zu "
                "clients: each round starts only once --gather-ms %llu passed",
                c->agg.wait_clients, clients, (unsigned long long)c->agg.gather_ms);
}

/* Who an idle aggregator waits for: the count asking, what starts the round,
 * and the members not asking (by name, the first that fit). Said when it
 * starts waiting, then every AGG_WAIT_REPORT_MS while no round starts (it
 * said nothing while clients were missing). The holds' keys are sorted in
 * a copy, so a report costs N log H over N members and H holds (N H when
 * the copy cannot be had). */
static void report_waiting(fed_node *n)
{
    node_agg *a = n->agg;
    size_t members = n->cfg.allow ? fed_crypto_allow_count(n->cfg.allow) : 0, absent = 0;
    size_t len = 0, more = 0;
    uint8_t (*asking)[32] = a->nholds ? fed_malloc(a->nholds * 32) : NULL;
    char names[AGG_WAIT_NAMES + 8] = "";

    for (size_t k = 0; asking && k < a->nholds; k++)
        memcpy(asking[k], a->holds[k].hdr.sender, 32);
    if (asking)
        qsort(asking, a->nholds, 32, key32_cmp);
    for (size_t i = 0; i < members; i++) {
        const char *name;
        const uint8_t *pk;
        int found = 0;

        fed_crypto_allow_get(n->cfg.allow, i, &name, &pk);
        if (asking)
            (void)fed_key_search(asking, a->nholds, 32, pk, &found);
        for (size_t k = 0; !asking && !found && k < a->nholds; k++) /* out of memory */
            found = !memcmp(a->holds[k].hdr.sender, pk, 32);
        if (found || !memcmp(pk, n->key, 32))
            continue;
        absent++;
        if (more || len + strlen(name) + 2 > AGG_WAIT_NAMES) {
            more++;
            continue;
        }
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", name);
    }
    fed_free(asking);
    say_too_few_members(n);
    fed_log(FED_LOG_INFO, "aggregator: round %llu waits for clients: %zu asking; %u start it "
            "at once, or %u once --gather-ms %llu passed since the first; %zu not asking%s%s"
            "%s", (unsigned long long)(n->round + 1), a->nholds,
            n->cfg.agg.wait_clients ? n->cfg.agg.wait_clients : n->cfg.agg.min_clients, n->cfg.agg.min_clients,
            (unsigned long long)n->cfg.agg.gather_ms, absent, absent ? ": " : "", names,
            more ? " and more" : "");
    a->wait_report_ms = n->env.now_ms(n->env.self) + AGG_WAIT_REPORT_MS;
}

/* holds[i], out of holds[0..*nh) (the last takes its place) */
static agg_hold hold_take(agg_hold *holds, size_t *nh, size_t i)
{
    agg_hold h = holds[i];

    holds[i] = holds[--*nh];
    return h;
}

/* holds[i] taken out and answered: an ACK of status and flags */
static fed_err hold_answer(fed_node *n, agg_hold *holds, size_t *nh, size_t i, fed_err status,
                           uint32_t flags)
{
    agg_hold h = hold_take(holds, nh, i);

    return fedi_node_ack(n, h.req, &h.hdr, status, flags);
}

/* h's sender's hold in holds[0..*nh), refused and removed (that request
 * is over); 1 when there was one. */
static int holds_drop(fed_node *n, agg_hold *holds, size_t *nh, const uint8_t sender[32])
{
    for (size_t i = 0; i < *nh; i++)
        if (!memcmp(holds[i].hdr.sender, sender, 32)) {
            fedi_node_refuse(n, hold_take(holds, nh, i).req);
            return 1;
        }
    return 0;
}

/* req held in *holds (*nh of *cap), in place of its sender's older hold. */
static fed_err holds_put(fed_node *n, agg_hold **holds, size_t *nh, size_t *cap, fed_req *req,
                         const fed_wire_hdr *h)
{
    (void)holds_drop(n, *holds, nh, h->sender);
    if (*nh == *cap) {
        size_t c = *cap ? 2 * *cap : 16;
        agg_hold *p = fed_realloc(*holds, c * sizeof *p);

        if (!p) {
            fedi_node_refuse(n, req);
            return FED_ERR_NOMEM;
        }
        *holds = p;
        *cap = c;
    }
    (*holds)[*nh].req = req;
    (*holds)[*nh].hdr = *h;
    (*holds)[*nh].since_ms = n->env.now_ms(n->env.self);
    (*nh)++;
    fedi_node_agg_arm_poll(n);
    return FED_OK;
}

/* A client asks for work: replace its older hold (that request is over). */
fed_err fedi_node_agg_hold_add(fed_node *n, fed_req *req, const fed_wire_hdr *h)
{
    node_agg *a = n->agg;

    return holds_put(n, &a->holds, &a->nholds, &a->cap_holds, req, h);
}

static fed_err answer_no_round(fed_node *n, size_t i, uint32_t flags)
{
    return hold_answer(n, n->agg->holds, &n->agg->nholds, i, FED_OK, flags);
}

static void finish_all(fed_node *n)
{
    node_agg *a = n->agg;

    while (a->nholds)
        (void)answer_no_round(n, 0, FED_WIRE_ACK_FINISHED);
    while (a->nparked) /* a parked client too learns that the run is over */
        (void)hold_answer(n, a->parked, &a->nparked, a->nparked - 1, FED_OK,
                          FED_WIRE_ACK_FINISHED);
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
    size_t k = (size_t)ceil(n->cfg.agg.sample_fraction * (double)waiting - 1e-9);

    if (k < n->cfg.agg.min_clients)
        k = n->cfg.agg.min_clients;
    if (k > waiting)
        k = waiting;
    if (k > (size_t)n->agg->max_clients)
        k = (size_t)n->agg->max_clients;
    return k;
}

/* The MODEL vector: the global parameters, f32 encoded, once per change
 * of host (a round sealed ahead encoded it at the last commit). */
fed_err fedi_node_agg_encode_global(fed_node *n)
{
    node_agg *a = n->agg;
    fed_codec f32 = {.id = FED_CODEC_F32};
    size_t len;
    fed_err e;

    if (a->model_vec_len)
        return FED_OK;
    fedi_node_tx_drop_all(n); /* streams of the old vector: their clients ask again */
    fedi_node_cast_drop_ahead(n); /* and frames sealed ahead with it */
    const float *v = fedi_node_agg_scaffold_vec(n, &len); /* SCAFFOLD: c after the model */

    e = fedi_node_encode_vec(&f32, v, len, NULL, &a->model_vec, &a->model_vec_cap,
                             &a->model_vec_len);
    if (e != FED_OK)
        a->model_vec_len = 0;
    return e;
}

void fedi_node_agg_settings(const fed_node *n, uint64_t round, fed_wire_block *b)
{
    const fed_node_config *c = &n->cfg;
    fed_wire_settings *s = &b->settings;

    memset(b, 0, sizeof *b);
    b->samples = 0;
    snprintf(s->spec, sizeof s->spec, "%s", c->spec);
    s->graph = c->graph; /* sent whole when the spec is its id */
    s->graph_len = c->graph ? (uint32_t)strlen(c->graph) : 0;
    /* the input it is built over: a client with fewer classes builds the same */
    s->input[0] = (uint32_t)c->shape.c;
    s->input[1] = (uint32_t)c->shape.h;
    s->input[2] = (uint32_t)c->shape.w;
    s->input[3] = (uint32_t)c->shape.classes;
    s->input_scale = (uint32_t)c->shape.scale;
    s->local_epochs = c->local_epochs;
    s->batch = c->batch;
    s->optimizer = c->optimizer;
    s->codec = (uint16_t)n->agg->codec.id;
    s->fraction = n->agg->codec.fraction;
    s->lr = round_lr(n, round);
    s->momentum = c->momentum;
    s->weight_decay = c->weight_decay;
    s->ditto_lambda = c->ditto_lambda;
    s->mu = (float)fed_merge_prox_mu(n->agg->merge);
    s->deadline_ms = c->deadline_ms;
    if (c->dp.require_sgd) {
        s->dp_flags = FED_WIRE_DP_REQUIRED;
        s->dp_clip = c->dp.sgd_clip;
        s->dp_noise = c->dp.sgd_noise;
    }
    if (n->agg->sa)
        fedi_node_sa_agg_settings(n, round, s);
    fedi_node_agg_stats_settings(n, round, s);
    fedi_node_agg_scaffold_settings(n, s);
    if (!fed_node_layout_trivial(&n->agg->layout) || c->local_layers[0] || c->local_bn ||
        n->agg->rules.local_bn) { /* field 16: which tensors stay, for every client alike */
        s->paths_on = 1;
        s->paths_flags = (n->agg->rules.local_bn ? FED_WIRE_PATHS_LOCAL_BN : 0) |
                         (n->agg->rules.stats_local ? FED_WIRE_PATHS_STATS_LOCAL : 0) |
                         (n->agg->rules.fednova ? FED_WIRE_PATHS_FEDNOVA : 0) |
                         (n->agg->rules.scaffold ? FED_WIRE_PATHS_SCAFFOLD : 0);
        snprintf(s->local_layers, sizeof s->local_layers, "%s", c->local_layers);
        s->sa_stats_range = n->agg->sa ? (float)c->secagg.stats_range : 0;
    }
    fed_node_agg_site_eval_settings(n, s);
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
fed_err fedi_node_agg_send_models(fed_node *n, const agg_hold *holds, size_t k,
                                  const fed_wire_block *b)
{
    node_agg *a = n->agg;
    node_cast *to;
    fed_err e;

    if (k == 0)
        return FED_OK;
    if (!(to = fed_malloc(k * sizeof *to))) {
        for (size_t i = 0; i < k; i++)
            fedi_node_refuse(n, holds[i].req);
        return FED_ERR_NOMEM;
    }
    for (size_t i = 0; i < k; i++)
        to[i] = cast_of(&holds[i]);
    e = fedi_node_broadcast(n, to, k, FED_WIRE_MODEL, n->round + 1, FED_CODEC_F32, b,
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

    if ((e = fedi_node_agg_encode_global(n)) != FED_OK)
        return e;
    qsort(a->holds, a->nholds, sizeof *a->holds, hold_cmp);
    if (a->dp) { /* DP-FedAvg: Poisson, never redrawn */
        k = fedi_node_agg_dp_sample(n, a->holds, a->nholds);
        if (k < n->cfg.agg.min_clients)
            fed_log(FED_LOG_INFO, "aggregator: round %llu: the Poisson draw took %zu clients, "
                                  "fewer than --min-clients %u; not redrawn (a redraw would void "
                                  "the accounting): the round runs with them",
                    (unsigned long long)(n->round + 1), k, n->cfg.agg.min_clients);
    } else {
        n->env.random(n->env.self, &seed, sizeof seed);
        fed_rng_seed(&rng, seed);
        for (size_t i = 0; i < k; i++) {
            size_t j = i + (size_t)fed_rng_below(&rng, a->nholds - i);
            agg_hold t = a->holds[i];

            a->holds[i] = a->holds[j];
            a->holds[j] = t;
        }
    }
    parts_clear(a);
    for (size_t i = 0; i < k; i++)
        memcpy(a->parts[i].key, a->holds[i].hdr.sender, 32);
    a->nparts = k;
    qsort(a->parts, k, sizeof *a->parts, part_cmp);
    fedi_node_agg_stats_begin(n); /* before the input's begin: a secure pass sums no delta */
    if ((e = a->in->begin(n)) != FED_OK)
        return e;
    fedi_node_agg_settings(n, n->round + 1, &b);
    a->state = AGG_RUNNING;
    a->gathered = 0;
    a->wait_report_ms = 0;
    a->round_start_ms = n->env.now_ms(n->env.self);
    a->bytes_in0 = fed_wire_get_counters(n->wire)->bytes_in;
    a->bytes_out0 = fed_wire_get_counters(n->wire)->bytes_out;
    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_ROUND);
    /* a secure round's stages bound it instead: the masked input waits
       deadline_ms, each other stage secagg_stage_ms (the timer only says
       when it is due, for the health check) */
    if ((e = fedi_node_agg_arm_deadline(n, a->round_start_ms + n->cfg.deadline_ms +
                                              (a->sa ? 4 * n->cfg.secagg.stage_ms : 0))) !=
        FED_OK)
        return e; /* the node stops: a round without its deadline could wait forever */
    fed_log(FED_LOG_INFO, "aggregator: round %llu starts with %zu of %zu waiting clients",
            (unsigned long long)(n->round + 1), k, a->nholds);
    (void)fedi_node_agg_send_models(n, a->holds, k, &b); /* a failed send: the client goes missing */
    memmove(a->holds, a->holds + k, (a->nholds - k) * sizeof *a->holds);
    a->nholds -= k;
    fedi_node_agg_arm_poll(n);
    if (a->dp && k == 0) /* nobody drawn: the round releases its noise at once */
        return fedi_node_agg_close_round(n);
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
    fedi_node_arm_in(n, n->cfg.agg.gather_ms, NODE_TIMER_ROUND); /* a failure stops the node */
}

/* Start a round when enough clients wait: wait_clients at once, or
 * min_clients once the gather timer has fired (a->gathered). */
static fed_err maybe_start(fed_node *n)
{
    node_agg *a = n->agg;
    size_t want = n->cfg.agg.wait_clients ? n->cfg.agg.wait_clients : n->cfg.agg.min_clients;
    size_t least = n->cfg.agg.min_clients;

    if (a->sa && least < fed_node_sa_floor(&n->cfg)) /* a try below it fails at once */
        least = fed_node_sa_floor(&n->cfg);
    want = want > least ? want : least;
    if (a->state != AGG_IDLE || n->env.now_ms(n->env.self) < a->retry_at_ms)
        return FED_OK;
    if (a->nholds >= want || (a->gathered && a->nholds >= least))
        return start_round(n);
    if (!a->wait_report_ms) { /* waiting again: say so if it lasts */
        a->wait_report_ms = n->env.now_ms(n->env.self) + AGG_WAIT_REPORT_MS;
        fedi_node_agg_arm_poll(n);
    }
    return FED_OK;
}

fed_err fedi_node_agg_arm_deadline(fed_node *n, uint64_t at_ms)
{
    fed_err e = fedi_node_arm(n, at_ms, NODE_TIMER_DEADLINE);

    n->agg->deadline_at_ms = e == FED_OK ? at_ms : 0;
    return e;
}

void fedi_node_agg_cancel_deadline(fed_node *n)
{
    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_DEADLINE);
    n->agg->deadline_at_ms = 0;
}

/* ---- closing a round ---- */

static void fed_node_agg_progress(const fed_node *n, fed_node_progress *out)
{
    const node_agg *a = n->agg;

    out->round_open = a->state == AGG_RUNNING;
    out->round_due_ms = out->round_open ? a->deadline_at_ms : 0;
    out->commit_failures = a->failed;
    out->eval_local = a->eval_local;
    out->clients_waiting = (uint32_t)a->nholds;
    for (size_t i = 0; out->round_open && i < a->nparts; i++)
        out->clients_training += !a->parts[i].got;
}

agg_part *fedi_node_agg_part_find(node_agg *a, const uint8_t key[32])
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

/* Parts that answered: a delta, or a refusal. */
static size_t parts_answered(const node_agg *a)
{
    size_t n = 0;

    for (size_t i = 0; i < a->nparts; i++)
        n += a->parts[i].got || a->parts[i].refused;
    return n;
}

/* Every sampled client answered, with enough deltas to merge (as before
 * refusals: every part a delta; with refusals: at least min_clients). */
static int round_complete(const fed_node *n)
{
    size_t got = parts_got(n->agg);

    if (n->agg->dp) /* DP-FedAvg: the draw stands, whoever of it answered */
        return parts_answered(n->agg) == n->agg->nparts;
    return parts_answered(n->agg) == n->agg->nparts && got > 0 &&
           (got == n->agg->nparts || got >= n->cfg.agg.min_clients);
}

/* What the contributions table says of a part without a delta. */
static const char *absent_reason(const fed_node *n, const agg_part *p, char *buf, size_t cap)
{
    if (!p->refused)
        return n->agg->in->fate(n, (size_t)(p - n->agg->parts));
    snprintf(buf, cap, "declined %s", fed_errname((int)p->refused));
    return buf;
}

static fed_err put_contribution(fed_node *n, uint64_t round, const agg_part *p, int accepted,
                                const char *reason)
{
    fed_store_contrib c;
    int parked;

    memset(&c, 0, sizeof c);
    c.round = round;
    memcpy(c.peer_key, p->key, 32);
    if (p->got || p->refused) {
        memcpy(c.digest, p->digest, sizeof c.digest);
        memcpy(c.signature, p->sig, sizeof c.signature);
        c.header = p->header;
        c.header_len = sizeof p->header;
        /* the privacy budget it reported (its frames carry it) */
        (void)fed_node_member_dp(n, p->key, &c.dp_epsilon, &c.dp_budget, &parked);
    }
    c.accepted = accepted;
    snprintf(c.reason, sizeof c.reason, "%s", reason);
    return fed_store_put_contribution(n->cfg.store, &c);
}

/* The checkpoint sections of the round just merged. Its parameters are the
 * f32 MODEL vector's body, encoded already (fedi_node_agg_encode_global): the same
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

    if (a->model_vec_len != FED_CODEC_HEADER_BYTES + (a->scaffold ? 2 : 1) * a->nparams *
                                                         sizeof(float))
        return FED_ERR_INTERNAL; /* commit_sealing_ahead encodes it first (SCAFFOLD: c after) */
    if (sf && (!merge || !state)) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    if (sf) {
        if ((e = fed_merge_get_state(a->merge, state)) != FED_OK)
            goto out;
        fed_put_f32le_n(merge, state, sf);
    }
    fed_node_model_sec_encode(&ms, fed_node_cfg_whole(&n->cfg), n->cfg.shape, params,
                              a->nparams);
    fedi_node_state_encode(st, FED_NODE_AGGREGATOR, n->round + 1);
    fed_crypto_model_hash(params, a->nparams * sizeof(float), hash);
    {
        uint8_t clip[8], *ctl = NULL;
        fed_store_section sec[FED_NODE_MODEL_SECTIONS + 5] = {
            ms.s[0], ms.s[1], ms.s[2],
            {FED_NODE_SEC_STATE, st, sizeof st},
        };
        size_t ns = FED_NODE_MODEL_SECTIONS + 1;

        if (sf)
            sec[ns++] = (fed_store_section){FED_CKPT_SEC_MERGE, merge, sf * sizeof(float)};
        if (a->dp) { /* the clip the next round uses */
            fed_put_f64le(clip, fedi_node_agg_dp_clip_next(a));
            sec[ns++] = (fed_store_section){AGG_CKPT_SEC_DP, clip, sizeof clip};
        }
        if (fedi_node_agg_stats_section(n, &sec[ns])) /* the shared statistics, once known */
            ns++;
        switch (fedi_node_agg_scaffold_section(n, &ctl, &sec[ns])) { /* c and the void rounds */
        case 1: ns++; break;
        case -1: e = FED_ERR_NOMEM; break;
        default: break;
        }
        if (e == FED_OK)
            e = fed_store_checkpoint_write(n->cfg.store, n->round + 1, sec, ns, NULL);
        fed_free(ctl);
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

static fed_err fed_node_agg_stop(fed_node *n)
{
    node_agg *a = n->agg;
    fed_store *st = n->cfg.store;
    fed_err e, pe = fedi_node_agg_flush_pending(n);

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
    double eps = 0;
    fed_err e;

    /* what the input records with the round (a DP-FedAvg round's charge,
       fsynced whatever --db-sync says; a secure try's row) */
    if ((e = a->in->durable ? fed_store_begin_durable(st) : fed_store_begin(st)) != FED_OK)
        return e;
    if ((e = a->in->record(n, info, &eps)) != FED_OK)
        goto out;
    for (size_t i = 0; i < a->nparts; i++) {
        const agg_part *p = &a->parts[i];
        int used = p->got && a->results[i].verdict <= FED_MERGE_USED_COORDS;
        char why[64];

        e = put_contribution(n, info->round, p, used,
                             !p->got ? absent_reason(n, p, why, sizeof why)
                                     : used ? "" : fed_merge_verdict_name(a->results[i].verdict));
        if (e != FED_OK)
            goto out;
    }
    if ((e = put_counters(n)) != FED_OK || (e = write_checkpoint(n, hash)) != FED_OK)
        goto out;
    memset(&row, 0, sizeof row);
    row.round = info->round;
    row.start_ms = info->start_ms;
    row.end_ms = fedi_node_wall_ms(n);
    row.loss = info->loss;
    row.accuracy = info->accuracy;
    row.samples = info->samples;
    row.bytes_in = fed_wire_get_counters(n->wire)->bytes_in - a->bytes_in0;
    row.bytes_out = fed_wire_get_counters(n->wire)->bytes_out - a->bytes_out0;
    row.peers = info->merged;
    row.lr = info->lr;
    row.epsilon = eps;
    snprintf(row.strategy, sizeof row.strategy, "%s%s", a->in->strategy_prefix,
             fed_merge_spec(a->merge));
    memcpy(row.model_hash, hash, 32);
    if ((e = fed_store_put_round(st, &row)) != FED_OK)
        goto out;
    if ((e = fed_store_commit(st)) == FED_OK)
        a->last_row = row;
out:
    if (e != FED_OK)
        fed_store_rollback(st);
    a->in->recorded(n, e == FED_OK, eps);
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

/* Whether every client drawn for the round declined it because its
 * training diverged (a LEAVE of FED_ERR_NAN), none sending a delta. */
static int all_diverged(const node_agg *a)
{
    for (size_t i = 0; i < a->nparts; i++)
        if (a->parts[i].got || a->parts[i].refused != (uint32_t)FED_ERR_NAN)
            return 0;
    return a->nparts > 0;
}

/* Every one of the k clients drawn for round r diverged: the same model
 * would make them diverge again, a loop, not a round. The run stops. */
static fed_err stop_diverged(fed_node *n, uint64_t r, size_t k, const char *next)
{
    fed_log(FED_LOG_ERROR, "aggregator: round %llu: the training of every client drawn (%zu) "
            "diverged from the model (loss not finite); %s would give the same: stopping the "
            "run (a lower --lr?)", (unsigned long long)r, k, next);
    if (n->failed == FED_OK)
        n->failed = FED_ERR_NAN;
    return FED_ERR_NAN;
}

/* The round's commit, and beside it, on the pool, the next round's MODEL
 * sealed for the clients whose deltas just came: they ask for it at once,
 * and the next round samples them all whenever it takes every waiting
 * client. Nothing is sent before start_round, after the commit is durable:
 * sealing ahead only uses the core the commit (hashing, then fsync) leaves
 * idle. The last round, and a mode that seals nothing ahead (async), just
 * commit. The model is encoded
 * first, here on the loop: the checkpoint stores that vector's floats. */
static fed_err commit_sealing_ahead(fed_node *n, const fed_node_round_info *info,
                                    uint8_t hash[32])
{
    node_agg *a = n->agg;
    agg_commit c = {n, info, hash, FED_OK};
    node_cast *to = NULL;
    fed_wire_block b;
    size_t k = 0;

    if ((c.err = fedi_node_agg_encode_global(n)) != FED_OK)
        return c.err;
    if (!a->mode->seal_ahead || run_done_at(n, info->round) ||
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
    fedi_node_agg_settings(n, info->round + 1, &b);
    fedi_node_cast_ahead(n, to, k, FED_WIRE_MODEL, info->round + 1, FED_CODEC_F32, &b,
                         a->model_vec, a->model_vec_len, commit_piece, &c);
    fed_free(to);
    return c.err;
}

/* Before a merge: the global and strategy state as committed (the host
 * copy mirrors the model between rounds). */
static fed_err keep_committed(fed_node *n)
{
    node_agg *a = n->agg;

    memcpy(a->committed, a->host, a->nparams * sizeof(float));
    fedi_node_agg_scaffold_keep(n);
    return a->committed_state ? fed_merge_get_state(a->merge, a->committed_state) : FED_OK;
}

/* After a failed commit: the model and strategy as they were committed,
 * not as the merge left them (the round's deltas would count twice). */
static void back_to_committed(fed_node *n)
{
    node_agg *a = n->agg;
    fed_err e;

    memcpy(a->host, a->committed, a->nparams * sizeof(float));
    fedi_node_agg_scaffold_restore(n);
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
    uint64_t wait = n->cfg.agg.gather_ms ? n->cfg.agg.gather_ms : 1000;

    for (uint32_t i = 1; i < n->agg->failed && wait < AGG_RETRY_MAX_MS; i++)
        wait *= 2;
    return wait < AGG_RETRY_MAX_MS ? wait : AGG_RETRY_MAX_MS;
}

/* A secure round whose sum is unmasked (or void) and whose commit failed:
 * the clients revealed their shares once for this round, so the protocol
 * never runs again over their deltas; the round stays open, its sum kept,
 * and the round timer commits it again after the usual wait. */
static fed_err commit_later(fed_node *n, fed_err why)
{
    node_agg *a = n->agg;
    uint64_t wait_ms;

    a->failed++;
    wait_ms = retry_wait_ms(n);
    a->retry_at_ms = n->env.now_ms(n->env.self) + wait_ms;
    a->commit_again = 1;
    fed_log(FED_LOG_ERROR, "aggregator: round %llu's commit failed (%s); its secure sum is kept "
            "and committed again in %llu ms", (unsigned long long)(n->round + 1),
            fed_strerror(why), (unsigned long long)wait_ms);
    fedi_node_arm(n, a->retry_at_ms, NODE_TIMER_ROUND); /* a failure stops the node */
    return why;
}

fed_err fedi_node_agg_close_round(fed_node *n)
{
    node_agg *a = n->agg;
    fed_node_round_info info;
    uint8_t hash[32];
    agg_close out;
    int stats_pass = fedi_node_agg_stats_pass(n);
    size_t diverged;
    fed_err e;

    a->commit_again = 0; /* (a retry pending is this one) */
    memset(&info, 0, sizeof info);
    info.round = n->round + 1;
    info.sampled = (uint32_t)a->nparts;
    info.lr = round_lr(n, info.round);
    info.start_ms = fedi_node_wall_ms(n) - (n->env.now_ms(n->env.self) - a->round_start_ms);
    fedi_node_agg_cancel_deadline(n);
    /* the round's aggregate input (agg_input.c) merged by the strategy, or
       a void outcome that leaves the model and strategy as committed (kept
       first, so that a failed commit restores these and not an older copy) */
    memset(&out, 0, sizeof out);
    if ((e = keep_committed(n)) != FED_OK)
        goto fail;
    if (stats_pass) { /* the statistics pass: read back, nothing merged */
        if ((e = fedi_node_agg_stats_close(n)) != FED_OK)
            goto fail;
        out.results = a->results;
        for (size_t i = 0; i < a->nparts; i++) {
            memset(&a->results[i], 0, sizeof a->results[i]);
            a->results[i].verdict = FED_MERGE_USED; /* its contribution is in the totals */
        }
    } else if ((e = a->in->close(n, &out)) != FED_OK ||
               (e = fed_node_agg_site_eval_close(n)) != FED_OK) {
        goto fail;
    } else {
        fedi_node_agg_scaffold_closed(n, out.update); /* which rounds' changes count */
    }
    info.dp_clip = out.dp_clip;
    info.site = a->site; /* the sites' evaluation, when the round had one */
    for (size_t i = 0; i < a->nparts; i++) {
        if (a->parts[i].refused) {
            info.refused++;
        } else if (!a->parts[i].got) {
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
    if (stats_pass) /* known from now on (a failure to standardize its test set: logged) */
        (void)fedi_node_agg_stats_committed(n);
    if (a->site_judge) /* the sites' figures: the best round, early stop, on what committed */
        fedi_node_agg_judge(n, a->site_judge - 1);
    a->site_judge = 0;
    a->failed = 0;
    a->retry_at_ms = 0;
    (void)fedi_node_agg_flush_pending(n); /* the disk took a commit: earlier rounds' figures too */
    info.end_ms = fedi_node_wall_ms(n);
    n->round = info.round;
    if (stats_pass)
        fed_log(FED_LOG_INFO, "aggregator: round %llu: the statistics pass, %u of %u sampled "
                "clients in it", (unsigned long long)info.round, info.merged, info.sampled);
    else
        a->in->committed(n, &info, &out); /* its epsilon, its line in the log */
    /* a secure round whose clients all diverged closes with no update (the
       masked inputs never came), as void as a plain one that stops */
    diverged = !out.update && !stats_pass && all_diverged(a) ? a->nparts : 0;
    parts_clear(a);
    a->in->drop(n);
    a->state = AGG_IDLE;
    if (n->cfg.agg.early_stop) /* its rule judges this round before the next starts */
        fedi_node_agg_report_round(n, &info);
    if (diverged) {
        e = stop_diverged(n, info.round, diverged, "the next round");
    } else if (run_done_at(n, n->round) || a->early_stopped) {
        a->state = AGG_DONE;
        n->finished = 1;
        finish_all(n);
    } else {
        e = a->mode->next(n);
    }
    if (!n->cfg.agg.early_stop)
        fedi_node_agg_report_round(n, &info);
    return e;
fail:
    /* nothing was committed: the round is redone with whoever is waiting,
       from the last committed global (its clients resend the same deltas) */
    back_to_committed(n);
    a->site_judge = 0; /* judged when the round commits (a retry closes it again) */
    fedi_node_cast_drop_ahead(n); /* the next round's, which will not come */
    if (a->in->spent(n))
        return commit_later(n, e);
    parts_clear(a);
    a->in->drop(n);
    return a->mode->failed(n, e);
}

/* The next synchronous round: once gather_ms passed, with whoever waits. */
static fed_err sync_next(fed_node *n)
{
    fed_err e;

    fedi_node_rx_drop_before(n, n->round + 1);
    if ((e = fedi_node_arm_in(n, n->cfg.agg.gather_ms, NODE_TIMER_ROUND)) == FED_OK)
        e = maybe_start(n);
    return e;
}

fed_err fedi_node_agg_retry_later(fed_node *n, fed_err why)
{
    node_agg *a = n->agg;
    uint64_t wait_ms;

    a->failed++;
    wait_ms = retry_wait_ms(n);
    a->retry_at_ms = n->env.now_ms(n->env.self) + wait_ms;
    fed_log(FED_LOG_ERROR, "aggregator: round %llu failed (%s); trying again in %llu ms",
            (unsigned long long)(n->round + 1), fed_strerror(why), (unsigned long long)wait_ms);
    a->state = AGG_IDLE;
    fedi_node_arm(n, a->retry_at_ms, NODE_TIMER_ROUND); /* a failure stops the node */
    return why;
}

fed_err fedi_node_agg_abandon_round(fed_node *n)
{
    node_agg *a = n->agg;
    char why[64];

    for (size_t i = 0; i < a->nparts; i++) /* who dropped where, in the record */
        (void)put_contribution(n, n->round + 1, &a->parts[i], 0,
                               absent_reason(n, &a->parts[i], why, sizeof why));
    fedi_node_agg_cancel_deadline(n);
    a->in->drop(n);
    parts_clear(a);
    a->state = AGG_IDLE;
    a->gathered = 1; /* min_clients will do, whenever they are back */
    return maybe_start(n);
}

/* The MODEL of the round being filled, answering req now (async: every
 * ask; sync: a sampled client that asks again, having lost it). */
fed_err fedi_node_agg_answer_model(fed_node *n, fed_req *req, const fed_wire_hdr *h)
{
    agg_hold now = {.req = req, .hdr = *h};
    fed_wire_block b;

    fedi_node_agg_settings(n, n->round + 1, &b);
    return fedi_node_agg_send_models(n, &now, 1, &b);
}

/* ---- async mode (FedBuff) ---- */

/* ---- frames ---- */

/* The floats and codec of the running round's DELTA. */
static size_t agg_delta_expect(const fed_node *n, uint16_t *codec)
{
    size_t want = fed_node_layout_sent(&n->agg->layout); /* what leaves a site */

    *codec = (uint16_t)n->agg->codec.id;
    if (fedi_node_agg_stats_pass(n) && !n->agg->sa) { /* the pass's DELTA: 16-bit limbs */
        want = fedi_node_agg_stats_plain_entries(n);
        *codec = FED_CODEC_F32;
    }
    if (!n->agg->sa) /* a site evaluation's statistics after the delta */
        want += fed_node_site_eval_plain_words(fed_node_agg_site_eval_ints(n));
    return want;
}

static void fed_node_agg_prepare_open(fed_node *n, node_open *op)
{
    op->expect_n = agg_delta_expect(n, &op->expect_codec);
    op->expect_words = n->agg->sa ? fedi_node_sa_agg_words(n->agg->sa) : 0;
}

/* A late or unexpected delta: recorded, answered, never merged. */
fed_err fedi_node_agg_refuse_delta(fed_node *n, node_open *op, fed_err why, uint32_t flags)
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
    (void)fedi_node_ack(n, op->req, &m->hdr, why, flags);
    op->req = NULL;
    return why;
}

/* A resend of a delta already in: answered, the first one kept. */
fed_err fedi_node_agg_ack_duplicate(fed_node *n, node_open *op)
{
    fed_err e = fedi_node_ack(n, op->req, &op->msg.hdr, FED_OK, FED_WIRE_ACK_DUPLICATE);

    op->req = NULL;
    return e;
}

/* op's delta into part p (taken from op), then ACK; a delta whose
 * segments are not the round's is refused (FED_ERR_SEGMENTS). */
fed_err fedi_node_agg_take_delta(fed_node *n, node_open *op, agg_part *p)
{
    node_agg *a = n->agg;
    const fed_wire_msg *m = &op->msg;
    uint16_t codec;
    size_t want = agg_delta_expect(n, &codec);
    fed_err e;

    /* decoded as the round open when it arrived: the round may have changed
       since (the pass, a site evaluation), and its length with it */
    if (op->vec_n != want || m->hdr.codec != codec) {
        fed_log(FED_LOG_WARN, "aggregator: round %llu: a delta of %zu floats (codec %u), this "
                "round's are %zu (codec %u): refused", (unsigned long long)m->hdr.round,
                op->vec_n, (unsigned)m->hdr.codec, want, (unsigned)codec);
        return fedi_node_agg_refuse_delta(n, op, FED_ERR_PAYLOAD, 0);
    }
    /* (the statistics pass's DELTA holds its integers, not the layout) */
    if (!fedi_node_agg_stats_pass(n) && !fed_node_layout_matches(&a->layout, 0, &m->block)) {
        fed_log(FED_LOG_WARN, "aggregator: round %llu: a delta whose segments (%u listed) are "
                "not this round's tensor layout (%zu floats sent of %zu): refused",
                (unsigned long long)m->hdr.round, m->block.seg_count,
                fed_node_layout_sent(&a->layout), a->nparams);
        return fedi_node_agg_refuse_delta(n, op, FED_ERR_SEGMENTS, 0);
    }

    p->got = 1;
    p->base = m->hdr.round;
    p->epoch = m->hdr.sender_epoch;
    p->samples = m->block.samples;
    if (fed_node_layout_trivial(&a->layout) || fedi_node_agg_stats_pass(n)) {
        p->delta = op->vec; /* (a pass's DELTA: its integers' limbs) */
        op->vec = NULL;
    } else { /* the sent floats where they belong, zero on the local ones; the
                extra segment's (SCAFFOLD, FedNova) after the flat buffer, then a
                site evaluation's limbs, as after a whole delta */
        size_t sent = fed_node_layout_sent(&a->layout);
        size_t tail = want > sent ? want - sent : 0;

        if (!(p->delta = fed_malloc((a->nparams + a->layout.extra + tail) * sizeof *p->delta))) {
            p->got = 0;
            return FED_ERR_NOMEM;
        }
        fed_node_layout_unpack(&a->layout, op->vec, p->delta);
        memcpy(p->delta + a->nparams, fed_node_layout_extra(&a->layout, op->vec),
               a->layout.extra * sizeof *p->delta);
        if (tail)
            memcpy(p->delta + a->nparams + a->layout.extra, op->vec + sent,
                   tail * sizeof *p->delta);
    }
    memcpy(p->header, m->header, FED_WIRE_HEADER_BYTES);
    memcpy(p->digest, m->digest, sizeof p->digest);
    memcpy(p->sig, m->sig, sizeof p->sig);
    if (n->cfg.on_delta && !fedi_node_agg_stats_pass(n)) /* a pass's DELTA is no delta */
        n->cfg.on_delta(n->cfg.observer, n, n->round + 1, p->base, p->key, p->delta, a->nparams,
                        p->samples);
    e = fedi_node_ack(n, op->req, &m->hdr, FED_OK, 0);
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
        return fedi_node_agg_refuse_delta(n, op, FED_ERR_LATE, 0);
    if (!(p = fedi_node_agg_part_find(a, m->hdr.sender)))
        return fedi_node_agg_refuse_delta(n, op, FED_ERR_ROLE, 0);
    if (!a->in->take) /* a secure round takes masked inputs only */
        return fedi_node_agg_refuse_delta(n, op, FED_ERR_ROLE, 0);
    if (p->got)
        return fedi_node_agg_ack_duplicate(n, op);
    if (m->block.samples == 0)
        return fedi_node_agg_refuse_delta(n, op, FED_ERR_PAYLOAD, 0);
    e = a->in->take(n, op, p);
    if (round_complete(n))
        return fedi_node_agg_close_round(n);
    return e;
}

/* A LEAVE: the client declines the round (its privacy budget is spent, it
 * cannot train with DP-SGD as the round requires). Recorded with its
 * reason, header and signature, and ACKed; a sampled client's part of the
 * running round is then answered, so the round closes without waiting for
 * it (with at least min_clients deltas; else at the deadline). */
static fed_err on_leave(fed_node *n, node_open *op)
{
    node_agg *a = n->agg;
    const fed_wire_msg *m = &op->msg;
    agg_part one, *p = NULL;
    const char *who;
    char why[64];
    fed_err e = FED_OK;

    if (a->mode->cohort && a->state == AGG_RUNNING && m->hdr.round == n->round + 1)
        p = fedi_node_agg_part_find(a, m->hdr.sender);
    if (p && p->got) /* its delta is in already: that stands */
        return fedi_node_agg_ack_duplicate(n, op);
    if (!p) { /* no part of a running round: recorded at once */
        memset(&one, 0, sizeof one);
        memcpy(one.key, m->hdr.sender, 32);
        p = &one;
    }
    p->refused = m->block.reason ? m->block.reason : (uint32_t)FED_ERR_ROLE;
    memcpy(p->header, m->header, FED_WIRE_HEADER_BYTES);
    memcpy(p->digest, m->digest, sizeof p->digest);
    memcpy(p->sig, m->sig, sizeof p->sig);
    fedi_node_agg_budget_note(n, m);
    fed_wire_note_leave(n->wire, (fed_err)p->refused);
    who = fed_crypto_allow_find(n->cfg.allow, m->hdr.sender);
    if (fedi_node_agg_budget_parks(p->refused))
        /* asking it again changes nothing: parked, said once; may stop the
           run (n->failed) */
        (void)fedi_node_agg_budget_declined(n, m);
    else /* a configuration to fix (DP or secure aggregation required, shared
            statistics it cannot take part in) or training that diverged (the
            round's settings, say its rate): a warning, counted */
        fed_log(p->refused == (uint32_t)FED_ERR_DP_REQUIRED ||
                        p->refused == (uint32_t)FED_ERR_SA_REQUIRED ||
                        p->refused == (uint32_t)FED_ERR_STATS ||
                        p->refused == (uint32_t)FED_ERR_NAN
                    ? FED_LOG_WARN
                    : FED_LOG_INFO,
                "aggregator: client %s declined round %llu: %s (%s)", who ? who : "(not listed)",
                (unsigned long long)m->hdr.round, fed_strerror((int)p->refused),
                fed_errname((int)p->refused));
    if (p == &one &&
        (e = put_contribution(n, m->hdr.round, p, 0, absent_reason(n, p, why, sizeof why))) != FED_OK)
        fed_log(FED_LOG_WARN, "aggregator: recording a declined round failed: %s",
                fed_strerror(e));
    e = fedi_node_ack(n, op->req, &m->hdr, FED_OK, 0);
    op->req = NULL;
    if (p != &one && a->sa && p->refused == (uint32_t)FED_ERR_SA_REVEALED &&
        !fedi_node_sa_agg_keys_closed(a->sa)) /* later on, it is a dropout */
        return fedi_node_sa_agg_revealed_before(n);
    if (p != &one && a->sa && !fedi_node_sa_agg_keys_closed(a->sa)) {
        /* the keys stage need not wait for it: it may end now (or the try
           fail), and then the round is in other hands */
        fed_err d = fedi_node_sa_agg_declined(n);

        if (d != FED_OK || a->state != AGG_RUNNING || fedi_node_sa_agg_keys_closed(a->sa))
            return d != FED_OK ? d : e;
    }
    if (p != &one && !a->commit_again && round_complete(n))
        return fedi_node_agg_close_round(n);
    return e;
}

/* A client waiting while no round runs: its MODEL of the next round sealed
 * now, so that the round that takes it sends at once. It matters for the
 * first round above all, whose frames no commit sealed ahead: the clients
 * arrive one by one, and the last of them starts the round. A round that
 * draws others, or whose settings moved, drops the frame (broadcast.c). */
static void seal_for_waiting(fed_node *n, const fed_wire_hdr *h)
{
    node_agg *a = n->agg;
    node_cast to = {.req = NULL, .recipient_epoch = h->sender_epoch};
    fed_wire_block b;

    if (a->state != AGG_IDLE || !a->mode->seal_ahead || run_done_at(n, n->round) ||
        fedi_node_agg_encode_global(n) != FED_OK)
        return;
    memcpy(to.to, h->sender, 32);
    fedi_node_agg_settings(n, n->round + 1, &b);
    fedi_node_cast_ahead_add(n, &to, FED_WIRE_MODEL, n->round + 1, FED_CODEC_F32, &b,
                             n->agg->model_vec, n->agg->model_vec_len);
}

/* A HELLO or NEXT, synchronous rounds: held until a round samples it, or
 * its MODEL again (a sampled client that lost it). */
static fed_err sync_on_ask(fed_node *n, fed_req *req, const fed_wire_hdr *h)
{
    node_agg *a = n->agg;
    agg_part *p;
    fed_err e;

    if (a->state == AGG_RUNNING && (p = fedi_node_agg_part_find(a, h->sender)) && !p->got &&
        !p->refused && (!a->sa || !fedi_node_sa_agg_keys_closed(a->sa)))
        return fedi_node_agg_answer_model(n, req, h); /* its MODEL was lost */
    if ((e = fedi_node_agg_hold_add(n, req, h)) != FED_OK)
        return e;
    arm_first_gather(n);
    if ((e = maybe_start(n)) != FED_OK)
        return e;
    seal_for_waiting(n, h);
    return FED_OK;
}

/* Too few deltas by a synchronous round's deadline: who was missing is
 * recorded, nothing of the attempt kept, and a round starts again with
 * whoever waits. */
static fed_err sync_short_deadline(fed_node *n)
{
    node_agg *a = n->agg;
    char why[64];

    if (all_diverged(a))
        return stop_diverged(n, n->round + 1, a->nparts, "starting the round again");

    fed_log(FED_LOG_WARN, "aggregator: round %llu deadline with %zu of %u deltas needed;"
            " starting it again", (unsigned long long)(n->round + 1), parts_got(a),
            n->cfg.agg.min_clients);
    for (size_t i = 0; i < a->nparts; i++)
        if (!a->parts[i].got)
            (void)put_contribution(n, n->round + 1, &a->parts[i], 0,
                                   absent_reason(n, &a->parts[i], why, sizeof why));
    parts_clear(a);
    a->state = AGG_IDLE;
    a->gathered = 1; /* min_clients will do, whenever they are back */
    return maybe_start(n);
}

/* gather_ms passed (clients that come later start the round too), or a
 * failed round's wait is over. */
static fed_err sync_round_timer(fed_node *n)
{
    n->agg->gathered = 1;
    return maybe_start(n);
}

const agg_mode_ops fedi_node_agg_sync_mode = {
    .name = "sync",
    .cohort = 1,
    .seal_ahead = 1,
    .start = sync_start,
    .on_ask = sync_on_ask,
    .on_delta = on_delta,
    .short_deadline = sync_short_deadline,
    .next = sync_next,
    .failed = fedi_node_agg_retry_later,
    .round_timer = sync_round_timer,
};

static fed_err fed_node_agg_on_msg(fed_node *n, node_open *op)
{
    node_agg *a = n->agg;
    const fed_wire_msg *m = &op->msg;
    fed_req *req = op->req;

    if (!req) { /* the aggregator sends no requests: a stray reply */
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        return FED_ERR_ROLE;
    }
    switch (m->hdr.type) {
    case FED_WIRE_HELLO:
    case FED_WIRE_NEXT:
        op->req = NULL;
        if (a->state == AGG_DONE)
            return fedi_node_ack(n, req, &m->hdr, FED_OK, FED_WIRE_ACK_FINISHED);
        if (fedi_node_agg_budget_parked(n, &m->hdr)) /* never sampled: held a poll, then
                                                         answered NO_ROUND with why */
            return holds_put(n, &a->parked, &a->nparked, &a->cap_parked, req, &m->hdr);
        (void)holds_drop(n, a->parked, &a->nparked, m->hdr.sender); /* restarted */
        return a->mode->on_ask(n, req, &m->hdr);
    case FED_WIRE_DELTA:
        fedi_node_agg_budget_note(n, m);
        return a->mode->on_delta(n, op);
    case FED_WIRE_LEAVE:
        return on_leave(n, op);
    case FED_WIRE_SA_KEYS:
    case FED_WIRE_SA_SHARES:
    case FED_WIRE_SA_MASKED:
    case FED_WIRE_SA_CONSIST:
    case FED_WIRE_SA_UNMASK:
        if (a->in->on_stage)
            return a->in->on_stage(n, op);
        __attribute__((fallthrough)); /* no secure rounds here */
    default:
        op->req = NULL;
        fed_wire_note_reject(n->wire, &m->hdr, FED_ERR_ROLE);
        (void)fedi_node_ack(n, req, &m->hdr, FED_ERR_ROLE, 0);
        return FED_ERR_ROLE;
    }
}

static fed_err fed_node_agg_on_timer(fed_node *n, uint32_t id)
{
    node_agg *a = n->agg;

    switch (id) {
    case NODE_TIMER_ROUND:
        if (a->commit_again && a->state == AGG_RUNNING) {
            if (n->env.now_ms(n->env.self) < a->retry_at_ms)
                return FED_OK; /* another round timer, earlier than the retry */
            return fedi_node_agg_close_round(n);
        }
        return a->mode->round_timer(n);
    case NODE_TIMER_STAGE:
        return fedi_node_sa_agg_on_timer(n);
    case NODE_TIMER_DEADLINE:
        a->deadline_at_ms = 0; /* fired */
        if (a->state != AGG_RUNNING || a->sa) /* secure rounds: the stages' deadlines */
            return FED_OK;
        if (parts_got(a) >= n->cfg.agg.min_clients || a->dp) /* DP: never redrawn */
            return fedi_node_agg_close_round(n);
        return a->mode->short_deadline(n);
    case NODE_TIMER_POLL: {
        uint64_t now = n->env.now_ms(n->env.self);

        for (size_t i = a->nholds; i-- > 0;)
            if (a->holds[i].since_ms + n->cfg.transfer.poll_ms <= now)
                (void)answer_no_round(n, i, FED_WIRE_ACK_NO_ROUND);
        for (size_t i = a->nparked; i-- > 0;)
            if (a->parked[i].since_ms + n->cfg.transfer.poll_ms <= now)
                (void)hold_answer(n, a->parked, &a->nparked, i,
                                  (fed_err)fedi_node_agg_budget_parked(n, &a->parked[i].hdr),
                                  FED_WIRE_ACK_NO_ROUND);
        if (a->state == AGG_IDLE && a->wait_report_ms && a->wait_report_ms <= now)
            report_waiting(n);
        fedi_node_agg_arm_poll(n);
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

/* The aggregator's part of fed_node_new's configuration check. */
static fed_err fed_node_agg_check(const fed_node_config *c)
{
    if (!(c->agg.sample_fraction > 0 && c->agg.sample_fraction <= 1) || c->agg.min_clients < 1 ||
        c->local_epochs < 1 || c->batch < 1 || !(c->lr > 0) ||
        !(c->momentum >= 0 && c->momentum < 1) || !(c->weight_decay >= 0 && c->weight_decay < 1) ||
        c->transfer.poll_ms == 0 || c->deadline_ms == 0 ||
        c->agg.async_k > FED_MERGE_DEFAULT_MAX_CLIENTS)
        return FED_ERR_BAD_VALUE;
    if (c->dp.require_sgd && (!(c->dp.sgd_clip > 0) || !isfinite(c->dp.sgd_clip) ||
                              !(c->dp.sgd_noise >= 0) || !isfinite(c->dp.sgd_noise)))
        return FED_ERR_BAD_VALUE; /* the MODEL's DP-SGD field would not encode */
    if (!(c->dp.client_clip >= 0) || !isfinite(c->dp.client_clip))
        return FED_ERR_BAD_VALUE;
    if (c->dp.client_clip > 0 &&
        (!(c->dp.client_noise >= 0) || !isfinite(c->dp.client_noise) ||
         !(c->dp.target_eps >= 0) || !isfinite(c->dp.target_eps) ||
         !(c->dp.client_quantile >= 0 && c->dp.client_quantile < 1) ||
         !(c->dp.client_clip_lr >= 0) || !isfinite(c->dp.client_clip_lr) ||
         !(c->dp.delta > 0 && c->dp.delta < 1)))
        return FED_ERR_BAD_VALUE; /* DP-FedAvg's settings */
    return FED_OK;
}

const node_role_ops fedi_node_agg_ops = {
    .check = fed_node_agg_check,
    .create = fed_node_agg_new,
    .destroy = fed_node_agg_free,
    .start = fed_node_agg_start,
    .stop = fed_node_agg_stop,
    .prepare_open = fed_node_agg_prepare_open,
    .on_msg = fed_node_agg_on_msg,
    .on_timer = fed_node_agg_on_timer,
    .on_job = fedi_node_agg_on_job,
    .progress = fed_node_agg_progress,
    .bad_reply = NULL, /* it takes no vector in a reply */
    .pulled = NULL,
    .rate_from_model = 0,
    .streams_in_replies = 0,
    .tells_old_epoch = 1,
};
