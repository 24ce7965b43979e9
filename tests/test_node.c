/* test_node.c - the node state machine in the simulated world: aggregator
 * and clients on real Fashion-MNIST shards, sealed frames, in-memory
 * databases. FedAvg bit for bit against a weighted mean computed here;
 * accuracy after 5 rounds; a client dropped past the deadline, a client
 * crashed and restarted, the aggregator crashed after round 3; a non-member
 * rejected; a full disk at a round's commit, and at its evaluation (the
 * accuracy kept and written later); round 1 starting gather_ms after the
 * first client when fewer than wait_clients come; the same seed twice gives
 * the same model; a client without the simulator's tamper hook sends its
 * delta untouched; a learning-rate schedule across rounds (sync, and
 * FedBuff's merges): each round's MODEL carries its rate, and every client
 * trains at exactly that rate; a DP-SGD client whose charge cannot be
 * committed (full disk) sends nothing, and one that crashed after a charge
 * is charged again for the round it trains again; a client whose data has
 * another class count declines each round (LEAVE FED_ERR_MODEL_MISMATCH)
 * and the rounds go on without it; non-trained statistics averaged by
 * sample weight beside FedAdam, and --local-layers' tensors absent from
 * every DELTA frame, the aggregator's own kept, the shared part plain
 * FedAvg bit for bit, a client's kept across its restart. Skips without
 * data. Also,
 * without data, the checkpoint's
 * model sections (node/ckpt_model.h): a round trip, their byte image, and
 * every malformed or mismatched section refused. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/err.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/data.h"
#include "node/ckpt_model.h"
#include "node/node.h"
#include "node/daemon.h"
#include "node/layout.h"
#include "node/node_impl.h" /* the training job, tested alone */
#include "gossip/wire_hooks.h"
#include "node/test_hooks.h"
#include "sim/host.h"
#include "storage/store.h"
#include "storage/test_hooks.h"
#include "privacy/rdp.h"
#include "sim/world.h"
#include "tests/support/support.h"

#define MAXC 160
#define MAXR 8

typedef struct fixture {
    fed_dataset *train, *test;
    fed_backend *be;
    fed_pool *pool;
} fixture;

typedef struct scen_opts {
    int clients;
    const char *spec;
    size_t per_client;   /* samples per client; 0: an IID share of everything */
    int uneven;          /* client i gets (i + 1) * per_client */
    uint32_t rounds, min_clients;
    uint32_t wait_clients; /* 0: clients */
    uint64_t deadline_ms;
    uint64_t seed;
    int rogue;           /* one more client whose key is not a member */
    int evaluate;
    uint32_t async_k;    /* FedBuff's K; 0: synchronous rounds */
    size_t max_frame;    /* the protocol's largest frame; 0: the default */
    double loss;         /* of every link */
    int adam;            /* the aggregator's optimizer: Adam (else SGD) */
    float lr;            /* the aggregator's lr; 0: the default (the optimizer's own) */
    const char *lr_schedule; /* the aggregator's; NULL: const */
    uint32_t lr_warmup;
    int dp_client;       /* client dp_client - 1 runs DP-SGD (defaults); 0: none */
    int other_classes;   /* client other_classes - 1's data has 5 classes, not 10 */
    int classes;         /* ... or this many (0: 5) */
    const char *graph;   /* the aggregator's whole spec, spec its id (NULL: spec) */
    int odd_client;      /* client odd_client - 1 declares odd_model (its --model;
                            NULL: none) and builds at most odd_max_params (0: the
                            default) */
    const char *odd_model;
    double odd_max_params;
    const char *stats;   /* tensors every node marks non-trained statistics
                            (the mark_model test hook; NULL: none) */
    const char *local_layers; /* the aggregator's --local-layers (NULL: none) */
    int local_bn;        /* the aggregator's --local-bn */
    const char *strategy; /* the aggregator's (NULL: fedavg) */
    float ditto_lambda;  /* the aggregator's --ditto-lambda (0: none) */
    int unsealed;        /* every wire unsealed, so the test reads each frame */
    double dp_fedavg_clip; /* the aggregator's DP-FedAvg clip (0: off) */
    const char *odd_local; /* client odd_client - 1's own --local-layers (NULL: none) */
    int stats_agg_only;  /* o.stats marked by the aggregator only */
    uint32_t odd_max_steps; /* client odd_client - 1's --max-steps (0: none) */
    double fraction;     /* the aggregator's sample fraction (0: all) */
} scen_opts;

/* What the observers saw. */
typedef struct delta_rec {
    uint8_t key[32];
    uint64_t samples;
    uint64_t base;       /* the round it was trained on */
    float *delta;
    float *dc;           /* SCAFFOLD: its control change (nparams: every float trained) */
} delta_rec;

typedef struct scen {
    const fixture *fx;
    scen_opts o;
    fed_sim_world *w;
    fed_crypto_allow *allow;
    fed_sim_host *agg;
    fed_sim_host *cl[MAXC + 1];
    int ncl;
    uint32_t *idx[MAXC + 1];
    size_t nidx[MAXC + 1];
    size_t nparams;
    float *params[MAXR + 1];       /* global after round r (0: before round 1) */
    fed_node_round_info info[MAXR + 1];
    int commits[MAXR + 1];         /* times round r was committed */
    delta_rec deltas[MAXR + 1][MAXC + 1];
    int ndeltas[MAXR + 1];
    uint64_t first_round_after_restart;
    float client_lr[MAXR + 1];     /* the rate a client reported training round r at */
    int crash_agg_after;           /* crash the aggregator once it committed this round */
    int agg_crashed;
    fed_dataset five;              /* o.other_classes: the training set as 5 classes */
    fed_node_test_hooks hooks;     /* o.stats: the tensors marked */
    float *ctl[MAXR + 1];          /* SCAFFOLD: the aggregator's c after round r */
    int crash_cl_round;            /* at the first delta of this round, client
                                      crash_cl dies, and is back 30 s later */
    int crash_cl;
} scen;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);

    if (!fx)
        return -1;
    *state = fx;
    if (fed_backend_cpu_new(1, &fx->be) != FED_OK || fed_pool_new(2, &fx->pool) != FED_OK)
        return -1;
    fed_test_fashion_open(&fx->train, &fx->test); /* the tests skip without */
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;

    fed_data_free(fx->train);
    fed_data_free(fx->test);
    fed_pool_free(fx->pool);
    fed_backend_free(fx->be);
    free(fx);
    return 0;
}

/* ---- observers ---- */

static void on_round(void *ctx, const fed_node *n, const fed_node_round_info *r)
{
    scen *s = ctx;

    if (r->round > MAXR)
        return;
    if (fed_node_get_role(n) == FED_NODE_CLIENT)
        s->client_lr[r->round] = r->lr;
    if (fed_node_get_role(n) != FED_NODE_AGGREGATOR)
        return;
    s->info[r->round] = *r;
    s->commits[r->round]++;
    if (fedi_node_agg_scaffold_control(n)) {
        if (!s->ctl[r->round])
            s->ctl[r->round] = malloc(s->nparams * sizeof(float));
        memcpy(s->ctl[r->round], fedi_node_agg_scaffold_control(n), s->nparams * sizeof(float));
    }
    if (!s->params[r->round])
        s->params[r->round] = malloc(s->nparams * sizeof(float));
    assert_int_equal(fed_node_get_params(n, s->params[r->round]), FED_OK);
    if (s->crash_agg_after && (int)r->round == s->crash_agg_after && !s->agg_crashed) {
        uint64_t now = fed_sim_world_now_us(s->w) / 1000;

        s->agg_crashed = 1;
        assert_int_equal(fed_sim_world_crash_at(s->w, fed_sim_host_index(s->agg), now), FED_OK);
        assert_int_equal(fed_sim_world_restart_at(s->w, fed_sim_host_index(s->agg), now + 4000),
                         FED_OK);
    }
}

static void on_delta(void *ctx, const fed_node *n, uint64_t round, uint64_t base_round,
                     const uint8_t key[32], const float *delta, size_t nparams, uint64_t samples)
{
    scen *s = ctx;
    delta_rec *d;

    (void)n;
    if (s->crash_cl_round && (uint64_t)s->crash_cl_round == round) {
        uint64_t now = fed_sim_world_now_us(s->w) / 1000;
        uint32_t h = fed_sim_host_index(s->cl[s->crash_cl]);

        s->crash_cl_round = 0;
        assert_int_equal(fed_sim_world_crash_at(s->w, h, now), FED_OK);
        assert_int_equal(fed_sim_world_restart_at(s->w, h, now + 30000), FED_OK);
    }
    if (!s->o.async_k)
        assert_int_equal(base_round, round);
    if (round > MAXR || s->ndeltas[round] > MAXC)
        return;
    d = &s->deltas[round][s->ndeltas[round]++];
    memcpy(d->key, key, 32);
    d->samples = samples;
    d->base = base_round;
    d->delta = malloc(nparams * sizeof(float));
    memcpy(d->delta, delta, nparams * sizeof(float));
    d->dc = NULL;
    if (s->o.strategy && !strncmp(s->o.strategy, "scaffold", 8)) { /* after the tensors */
        d->dc = malloc(nparams * sizeof(float));
        memcpy(d->dc, delta + nparams, nparams * sizeof(float));
    }
}

/* ---- building a scenario ---- */

/* o.stats's tensors as a norm layer marks its running statistics. */
static void mark_stats(void *ctx, fed_model *m)
{
    const scen *s = ctx;

    assert_true(fed_model_tensor_flags(m, s->o.stats, FED_TENSOR_NORM, FED_TENSOR_TRAINED) > 0);
}

static void give_shard(scen *s, int i)
{
    const scen_opts *o = &s->o;

    if (o->per_client == 0) {
        assert_int_equal(fed_data_partition(s->fx->train, "iid", i, o->clients, o->seed,
                                            &s->idx[i], &s->nidx[i]),
                         FED_OK);
        return;
    }
    {
        size_t n = o->uneven ? (size_t)(i + 1) * o->per_client : o->per_client;
        size_t start = 0;

        for (int k = 0; k < i; k++)
            start += o->uneven ? (size_t)(k + 1) * o->per_client : o->per_client;
        s->idx[i] = fed_malloc(n * sizeof(uint32_t));
        for (size_t k = 0; k < n; k++)
            s->idx[i][k] = (uint32_t)((start + k) % s->fx->train->n);
        s->nidx[i] = n;
    }
}

static void scen_build(scen *s, const fixture *fx, const scen_opts *o)
{
    fed_sim_config wc;
    fed_node_config ac, cc;
    fed_rng idrng;
    char name[32];
    int total = o->clients + (o->rogue ? 1 : 0);

    memset(s, 0, sizeof *s);
    s->fx = fx;
    s->o = *o;
    memset(&wc, 0, sizeof wc);
    wc.seed = o->seed;
    wc.link.latency_ms = 5;
    wc.link.jitter_ms = 1;
    wc.link.bytes_per_ms = 100000; /* 100 MB/s */
    wc.link.loss = o->loss;
    wc.flops_per_ms = 5e6;
    wc.epoch_base_s = 1700000000;
    wc.pool = fx->pool;
    assert_int_equal(fed_sim_world_new(&wc, &s->w), FED_OK);
    assert_int_equal(fed_crypto_allow_new(&s->allow), FED_OK);
    fed_rng_seed_stream(&idrng, o->seed, 77);
    assert_int_equal(fed_sim_host_new(&idrng, &s->agg), FED_OK);
    assert_int_equal(fed_crypto_allow_add(s->allow, "aggregator", fed_sim_host_id(s->agg)->key),
                     FED_OK);
    for (int i = 0; i < total; i++) {
        assert_int_equal(fed_sim_host_new(&idrng, &s->cl[i]), FED_OK);
        snprintf(name, sizeof name, "client%d", i);
        if (i < o->clients)
            assert_int_equal(fed_crypto_allow_add(s->allow, name, fed_sim_host_id(s->cl[i])->key),
                             FED_OK);
    }
    s->ncl = total;
    assert_int_equal(fed_model_spec_nparams(o->graph ? o->graph : o->spec, fx->train->shape,
                                            &s->nparams),
                     FED_OK);

    fed_node_config_default(&ac);
    ac.role = FED_NODE_AGGREGATOR;
    ac.seed = o->seed;
    ac.be = fx->be;
    snprintf(ac.spec, sizeof ac.spec, "%s", o->spec);
    if (o->graph) {
        fed_model_spec_id(o->graph, ac.spec);
        ac.graph = o->graph;
    }
    ac.shape = fx->train->shape;
    ac.rounds = o->rounds;
    ac.agg.min_clients = o->min_clients;
    ac.agg.wait_clients = o->wait_clients ? o->wait_clients : (uint32_t)o->clients;
    ac.deadline_ms = o->deadline_ms;
    ac.agg.async_k = o->async_k;
    if (o->fraction > 0)
        ac.agg.sample_fraction = o->fraction;
    if (o->adam)
        ac.optimizer = FED_OPTIM_ADAM;
    if (o->lr > 0)
        ac.lr = o->lr;
    if (o->lr_schedule)
        snprintf(ac.lr_schedule, sizeof ac.lr_schedule, "%s", o->lr_schedule);
    ac.lr_warmup = o->lr_warmup;
    ac.transfer.wire.max_frame = o->max_frame;
    ac.transfer.wire.max_rx_streams = (uint32_t)total;
    ac.data.test = o->evaluate ? fx->test : NULL;
    ac.allow = s->allow;
    s->hooks.ctx = s;
    s->hooks.mark_model = mark_stats;
    if (o->stats)
        ac.hooks = &s->hooks;
    if (o->local_layers)
        snprintf(ac.local_layers, sizeof ac.local_layers, "%s", o->local_layers);
    ac.local_bn = o->local_bn;
    if (o->strategy)
        snprintf(ac.agg.strategy, sizeof ac.agg.strategy, "%s", o->strategy);
    ac.ditto_lambda = o->ditto_lambda;
    if (o->unsealed)
        ac.transfer.wire.hooks = &fedi_wire_hooks_unsealed;
    ac.dp.client_clip = o->dp_fedavg_clip;
    ac.on_round = on_round;
    ac.on_delta = on_delta;
    ac.observer = s;
    assert_int_equal(fed_sim_host_attach(s->agg, s->w, &ac, NULL), FED_OK);

    for (int i = 0; i < total; i++) {
        give_shard(s, i);
        fed_node_config_default(&cc);
        cc.role = FED_NODE_CLIENT;
        cc.seed = o->seed;
        cc.be = fx->be;
        cc.client.aggregator = *fed_sim_host_id(s->agg);
        cc.data.train = fx->train;
        if (o->other_classes == i + 1) { /* the same samples, another model */
            s->five = *fx->train;
            s->five.shape.classes = o->classes ? o->classes : 5;
            cc.data.train = &s->five;
        }
        cc.data.shard = s->idx[i];
        cc.data.shard_n = s->nidx[i];
        cc.allow = s->allow;
        cc.transfer.wire.max_frame = o->max_frame;
        cc.observer = s;
        cc.on_round = on_round;
        cc.dp.sgd = o->dp_client == i + 1;
        if (o->stats && !o->stats_agg_only)
            cc.hooks = &s->hooks;
        if (o->unsealed)
            cc.transfer.wire.hooks = &fedi_wire_hooks_unsealed;
        if (o->odd_client == i + 1) {
            if (o->odd_local)
                snprintf(cc.local_layers, sizeof cc.local_layers, "%s", o->odd_local);
            cc.client.own_model = o->odd_model;
            cc.client.max_steps = o->odd_max_steps;
            if (o->odd_max_params > 0)
                cc.client.max_model_params = o->odd_max_params;
        }
        assert_int_equal(fed_sim_host_attach(s->cl[i], s->w, &cc, NULL), FED_OK);
    }
}

static void scen_free(scen *s)
{
    fed_sim_world_free(s->w);
    fed_sim_host_free(s->agg);
    for (int i = 0; i < s->ncl; i++) {
        fed_sim_host_free(s->cl[i]);
        fed_free(s->idx[i]);
    }
    for (int r = 0; r <= MAXR; r++) {
        free(s->params[r]);
        for (int k = 0; k < s->ndeltas[r]; k++) {
            free(s->deltas[r][k].delta);
            free(s->deltas[r][k].dc);
        }
        free(s->ctl[r]);
    }
    fed_crypto_allow_free(s->allow);
}

/* Run until the aggregator finished (or limit_ms of virtual time), then a
 * little longer so clients hear so. */
static void scen_run(scen *s, uint64_t limit_ms)
{
    fed_test_sim_run(s->w, s->agg, limit_ms, 15000);
}

/* One event at a time until round r is committed. */
static void step_until_commit(scen *s, int r)
{
    while (s->commits[r] == 0) {
        int did = 0;

        assert_int_equal(fed_sim_world_step(s->w, &did), FED_OK);
        assert_true(did);
    }
}

static int key_cmp(const void *a, const void *b)
{
    return memcmp(((const delta_rec *)a)->key, ((const delta_rec *)b)->key, 32);
}

/* x_r = x_{r-1} + (float)(sum_i (w_i / W) d_i), summed in double in key
 * order: the plain weighted mean of the client updates, w_i its samples,
 * divided by sqrt(1 + staleness) for a delta trained on an older round. */
static void expect_fedavg(scen *s, int r)
{
    delta_rec *d = s->deltas[r];
    int k = s->ndeltas[r];
    double W = 0, w[MAXC + 1];
    float *want = malloc(s->nparams * sizeof(float));

    qsort(d, (size_t)k, sizeof *d, key_cmp);
    for (int i = 0; i < k; i++) {
        w[i] = (double)d[i].samples;
        if (d[i].base < (uint64_t)r)
            w[i] /= sqrt(1.0 + (double)((uint64_t)r - d[i].base));
        W += w[i];
    }
    for (size_t j = 0; j < s->nparams; j++) {
        double acc = 0;

        for (int i = 0; i < k; i++)
            acc = i == 0 ? (w[i] / W) * (double)d[i].delta[j]
                         : acc + (w[i] / W) * (double)d[i].delta[j];
        want[j] = s->params[r - 1][j] + (float)acc;
    }
    assert_memory_equal(want, s->params[r], s->nparams * sizeof(float));
    free(want);
}

/* ---- tests ---- */

/* The global before round 1 is the aggregator's seeded initialization. */
static void capture_initial(scen *s)
{
    fed_node *a;

    assert_int_equal(fed_sim_world_run_until(s->w, 0), FED_OK);
    a = fed_sim_host_node(s->agg);
    assert_non_null(a);
    s->params[0] = malloc(s->nparams * sizeof(float));
    assert_int_equal(fed_node_get_params(a, s->params[0]), FED_OK);
}

/* FedNova, round r from the recorded d_i = delta_i / a_i: x_r = x_{r-1} +
 * tau_eff sum_i p_i d_i, p_i = n_i / n, tau_eff = sum_i p_i a_i, a_i the
 * paper's momentum-weighted count of client i's steps (steps_of: from its
 * samples), all in double; within float tolerance. */
static void expect_fednova(scen *s, int r, long (*steps_of)(uint64_t samples))
{
    delta_rec *d = s->deltas[r];
    int k = s->ndeltas[r];
    double W = 0, tau = 0, a[MAXC + 1];

    qsort(d, (size_t)k, sizeof *d, key_cmp);
    for (int i = 0; i < k; i++) {
        a[i] = fedi_node_fednova_steps(steps_of(d[i].samples), 0.9);
        W += (double)d[i].samples;
    }
    for (int i = 0; i < k; i++)
        tau += (double)d[i].samples / W * a[i];
    for (size_t j = 0; j < s->nparams; j++) {
        double acc = 0, want, got = s->params[r][j];

        for (int i = 0; i < k; i++)
            acc += (double)d[i].samples / W * (double)d[i].delta[j];
        want = (double)s->params[r - 1][j] + tau * acc;
        if (fabs(want - got) > 1e-5 * (1 + fabs(want)))
            fail_msg("round %d coordinate %zu: %.9g, the formula %.9g", r, j, got, want);
    }
}

/* 100, 200 and 300 samples at batch 64: 2, 4 and 5 steps, the third
 * capped at 3 by its own --max-steps. */
static long nova_steps(uint64_t samples)
{
    return samples == 300 ? 3 : (long)((samples + 63) / 64);
}

static void test_fednova_unequal_steps(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "logreg", .per_client = 100, .uneven = 1, .rounds = 2,
                   .min_clients = 3, .deadline_ms = 60000, .seed = 12, .strategy = "fednova",
                   .odd_client = 3, .odd_max_steps = 3};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    capture_initial(&s);
    scen_run(&s, 600000);
    for (int r = 1; r <= 2; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.info[r].merged, 3);
        for (int i = 0; i < 3; i++) /* weighed by its data, not data x epochs */
            assert_true(s.deltas[r][i].samples == 100 || s.deltas[r][i].samples == 200 ||
                        s.deltas[r][i].samples == 300);
        expect_fednova(&s, r, nova_steps);
    }
    scen_free(&s);
}

/* Equal steps: a_i all alike, so FedNova's update is FedAvg's, within
 * float tolerance (the division by a_i and the product by tau_eff round). */
static void test_fednova_equal_is_fedavg(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "logreg", .per_client = 128, .rounds = 2,
                   .min_clients = 3, .deadline_ms = 60000, .seed = 13};
    scen avg, nova;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&avg, fx, &o);
    scen_run(&avg, 600000);
    o.strategy = "fednova";
    scen_build(&nova, fx, &o);
    scen_run(&nova, 600000);
    for (int r = 1; r <= 2; r++) {
        assert_int_equal(avg.commits[r], 1);
        assert_int_equal(nova.commits[r], 1);
        for (size_t j = 0; j < avg.nparams; j++)
            if (fabsf(avg.params[r][j] - nova.params[r][j]) > 1e-5f * (1 + fabsf(avg.params[r][j])))
                fail_msg("round %d coordinate %zu: fedavg %.9g, fednova %.9g", r, j,
                         avg.params[r][j], nova.params[r][j]);
    }
    scen_free(&avg);
    scen_free(&nova);
}

/* SCAFFOLD's Algorithm 1 (option II, partial participation) computed
 * directly from what the clients sent: the model as FedAvg (sample-weighted,
 * global step 1) bit for bit, each client's control change -c - dy / (K lr)
 * (K the momentum-weighted count a_i of its steps: 100, 200, 300 samples
 * at batch 64, SGD momentum 0.9; K itself without momentum), and c_r = c_{r-1} +
 * (|S| / N) mean_S dc_i, within float tolerance. */
static void expect_scaffold(scen *s, int r, int N)
{
    delta_rec *d = s->deltas[r];
    int k = s->ndeltas[r];
    const float *c0 = s->ctl[r - 1];

    expect_fedavg(s, r);
    for (int i = 0; i < k; i++) {
        /* K: the momentum-weighted count of its steps (SGD momentum 0.9) */
        double klr = fedi_node_fednova_steps((long)((d[i].samples + 63) / 64), 0.9) *
                     (double)s->info[r].lr;

        for (size_t j = 0; j < s->nparams; j++) {
            double want = -(c0 ? c0[j] : 0.0) - (double)d[i].delta[j] / klr;

            if (fabs(want - d[i].dc[j]) > 1e-4 * (1 + fabs(want)))
                fail_msg("round %d client %d coordinate %zu: dc %.9g, option II %.9g", r, i, j,
                         d[i].dc[j], want);
        }
    }
    for (size_t j = 0; j < s->nparams; j++) {
        double acc = 0, want;

        for (int i = 0; i < k; i++)
            acc += d[i].dc[j];
        want = (c0 ? c0[j] : 0.0) + (double)k / N * (acc / k);
        if (fabs(want - s->ctl[r][j]) > 1e-5 * (1 + fabs(want)))
            fail_msg("round %d coordinate %zu: c %.9g, Algorithm 1 %.9g", r, j, s->ctl[r][j],
                     want);
    }
}

/* c = (1/N) sum_i c_i: each client's c_i as committed, or the one its last
 * round made when that round merged (no later MODEL told it so yet). */
static void expect_control_mean(scen *s, int last)
{
    size_t np = s->nparams;
    double *sum = calloc(np, sizeof *sum);

    for (int i = 0; i < s->o.clients; i++) {
        uint64_t round = 0;
        const float *next = NULL;
        const float *ci = fedi_node_client_control(fed_sim_host_node(s->cl[i]), &round, &next);
        const float *use = round ? next : ci; /* merged (every round here did) */

        for (size_t j = 0; use && j < np; j++)
            sum[j] += use[j];
    }
    for (size_t j = 0; j < np; j++)
        if (fabs(sum[j] / s->o.clients - s->ctl[last][j]) > 1e-4 * (1 + fabs(sum[j])))
            fail_msg("coordinate %zu: c %.9g, mean c_i %.9g", j, s->ctl[last][j],
                     sum[j] / s->o.clients);
    free(sum);
}

static void test_scaffold_algorithm1(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "logreg", .per_client = 100, .uneven = 1, .rounds = 4,
                   .min_clients = 2, .deadline_ms = 60000, .seed = 14, .strategy = "scaffold",
                   .fraction = 0.6};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    capture_initial(&s);
    scen_run(&s, 600000);
    for (int r = 1; r <= 4; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.info[r].sampled, 2);
        assert_int_equal(s.info[r].merged, 2);
        expect_scaffold(&s, r, 3);
    }
    expect_control_mean(&s, 4);
    /* the correction c - c_i steers the local steps: round 1 (c = c_i = 0)
       is FedAvg's bit for bit, round 2 (c moved) is not */
    {
        scen avg;

        o.strategy = "fedavg";
        scen_build(&avg, fx, &o);
        scen_run(&avg, 600000);
        assert_memory_equal(avg.params[1], s.params[1], s.nparams * sizeof(float));
        assert_memory_not_equal(avg.params[2], s.params[2], s.nparams * sizeof(float));
        scen_free(&avg);
    }
    scen_free(&s);
}

/* SCAFFOLD across restarts and a dropped round: client 2 (300 samples,
 * the slowest) dies while it trains round 2, at the round's first delta,
 * and comes back 30 s later, so round 2 (every client needed) is dropped
 * at its 20 s deadline and runs again once it is back (the others train it
 * again, their first c_i of it replaced; client 2 commits round 1's c_i,
 * kept in its checkpoint, when round 2's MODEL says round 1 merged); the
 * aggregator dies once round 3 is committed and resumes c from its
 * checkpoint. Every later round is Algorithm 1 from the c recorded before
 * the crash, and c = mean(c_i) at the end. */
static void test_scaffold_restart(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "logreg", .per_client = 100, .uneven = 1, .rounds = 6,
                   .min_clients = 3, .deadline_ms = 20000, .seed = 15, .strategy = "scaffold"};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    capture_initial(&s);
    s.crash_agg_after = 3;
    s.crash_cl_round = 2;
    s.crash_cl = 2;
    scen_run(&s, 900000);
    assert_int_equal(s.crash_cl_round, 0);
    assert_int_equal(s.agg_crashed, 1);
    for (int r = 1; r <= 6; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.info[r].merged, 3);
        if (r != 2) /* (round 2's first try's deltas are recorded too) */
            expect_scaffold(&s, r, 3);
    }
    assert_true(s.ndeltas[2] > 3); /* round 2 ran twice */
    expect_control_mean(&s, 6);
    scen_free(&s);
}

static void test_fedavg_bit_exact(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 8, .spec = "logreg", .per_client = 60, .uneven = 1, .rounds = 2,
                   .min_clients = 8, .deadline_ms = 60000, .seed = 11};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    capture_initial(&s);
    scen_run(&s, 600000);
    for (int r = 1; r <= 2; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.ndeltas[r], 8);
        assert_int_equal(s.info[r].merged, 8);
        expect_fedavg(&s, r);
    }
    /* different weights really were used: the shards are 60..480 samples */
    assert_int_not_equal(s.deltas[1][0].samples, s.deltas[1][1].samples);
    scen_free(&s);
}

/* FedBuff: 4 clients of 2000..8000 samples (so 1x..4x the training time),
 * K = 2. No barrier: the fast clients come back before the slow ones have
 * finished, so rounds hold deltas trained on older rounds, each weighted by
 * samples / sqrt(1 + staleness); every round equals that weighted mean bit
 * for bit, and the fastest client is in more rounds than the slowest. */
/* Client 2's data has 12 classes, so the aggregator's 10-class model (its
 * MODEL says so) does not fit it: it declines round 1 with a LEAVE
 * FED_ERR_MODEL_MISMATCH (at once: the aggregator need not wait for a
 * deadline), the aggregator records and counts that once and samples it no
 * more, and every round merges the other three. */
static void model_mismatch(const fixture *fx, size_t max_frame, int classes)
{
    scen_opts o = {.clients = 4, .spec = "logreg", .per_client = 200, .rounds = 3,
                   .min_clients = 3, .deadline_ms = 600000, .seed = 5, .other_classes = 3,
                   .max_frame = max_frame, .classes = classes};
    const fed_wire_counters *wc;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    scen_run(&s, 120000);
    for (int r = 1; r <= 3; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.info[r].sampled, r == 1 ? 4 : 3); /* parked after round 1 */
        assert_int_equal(s.info[r].merged, 3);
    }
    /* (the deadline is 10 minutes, the run 2: no round waited for client 2) */
    wc = fed_node_wire_counters(fed_sim_host_node(s.agg));
    assert_non_null(wc);
    assert_int_equal(wc->leave_bad_model, 1);
    /* the parked client's ask is held a poll (5 s), not answered at once
       (when it was, the client asked again at once: 229 frames opened in
       all, against 25), and it too learns that the run is over */
    if (!max_frame)
        assert_in_range(wc->opened, 1, 60);
    assert_true(fed_node_finished(fed_sim_host_node(s.cl[2])));
    scen_free(&s);
}

static void test_model_mismatch_declined(void **state)
{
    fed_test_log_capture(FED_LOG_WARN);
    model_mismatch(*state, 0, 12);
    fed_test_log_has("client: round 1: the aggregator's model has 10 classes (labels 0 to 9), "
                     "this client's data has 12 (labels up to 11); declined "
                     "(FED_ERR_MODEL_MISMATCH)");
    fed_test_log_has("it takes part in no round until it restarts");
    fed_test_log_default();
    /* the MODEL as a CHUNK stream: refused at its first frame */
    model_mismatch(*state, 4096, 12);
}

/* A MODEL's declared input (field 14) at a client: absent, its data's own;
 * present, it replaces the data's classes when the data fits it, else
 * each mismatch is said with both sides (shape, classes, a client's own
 * declared classes). */
static void test_model_input_field(void **state)
{
    fed_wire_settings set;
    fed_model_shape data = {1, 1, 4, 1, 0}, in;
    char why[384];

    (void)state;
    memset(&set, 0, sizeof set);
    assert_int_equal(fedi_node_model_input(&set, data, 0, &in, why, sizeof why), FED_OK);
    assert_int_equal(in.classes, 1);
    set.input[0] = 1, set.input[1] = 1, set.input[2] = 4, set.input[3] = 2;
    assert_int_equal(fedi_node_model_input(&set, data, 0, &in, why, sizeof why), FED_OK);
    assert_int_equal(in.w, 4);
    assert_int_equal(in.classes, 2); /* a one-class site builds the 2-class model */
    assert_int_equal(fedi_node_model_input(&set, data, 2, &in, why, sizeof why), FED_OK);
    data.classes = 3;
    assert_int_equal(fedi_node_model_input(&set, data, 0, &in, why, sizeof why),
                     FED_ERR_MODEL_MISMATCH);
    assert_string_equal(why, "the aggregator's model has 2 classes (labels 0 to 1), this "
                             "client's data has 3 (labels up to 2)");
    data.classes = 1;
    assert_int_equal(fedi_node_model_input(&set, data, 3, &in, why, sizeof why),
                     FED_ERR_MODEL_MISMATCH);
    assert_string_equal(why, "the aggregator's model has 2 classes, this client declares 3 "
                             "(--classes or its model file)");
    data.w = 5;
    assert_int_equal(fedi_node_model_input(&set, data, 0, &in, why, sizeof why),
                     FED_ERR_MODEL_MISMATCH);
    assert_string_equal(why, "the aggregator's model takes input 1x1x4, this client's data has "
                             "1x1x5 per sample");
}

/* Runs o's scenario: every round commits with o.min_clients merged, and
 * the aggregator counts declines LEAVEs of a model a client would not take. */
static void run_declines(scen *s, const fixture *fx, const scen_opts *o, uint64_t declines)
{
    scen_build(s, fx, o);
    scen_run(s, 120000);
    for (uint32_t r = 1; r <= o->rounds; r++) {
        assert_int_equal(s->commits[r], 1);
        assert_int_equal(s->info[r].merged, o->min_clients);
    }
    assert_int_equal(fed_node_wire_counters(fed_sim_host_node(s->agg))->leave_bad_model,
                     declines);
}

/* Client 2's data says 5 classes (a site whose largest label is 4): the
 * MODEL's declared input (10 classes) has room for them, so it builds the
 * federation's model, not a 5-class one, and every round merges all four. */
static void test_fewer_classes_train(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "logreg", .per_client = 200, .rounds = 2,
                   .min_clients = 4, .deadline_ms = 600000, .seed = 5, .other_classes = 3,
                   .classes = 5};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    run_declines(&s, fx, &o, 0);
    scen_free(&s);
}

/* A graph longer than a spec (its id "g#..." in the MODEL's spec field):
 * it travels whole in the MODEL's graph field, every client builds it and
 * every round merges all three (as a stream too: the graph in its first
 * frame). */
static void test_graph_travels(void **state)
{
    const fixture *fx = *state;
    char graph[512] = "g:";

    fed_test_need_fashion(fx->train != NULL);
    for (int i = 0; i < 12; i++) {
        char node[32];

        snprintf(node, sizeof node, "hidden_%02d=L8,R,", i);
        strcat(graph, node);
    }
    strcat(graph, "head=L");
    assert_true(strlen(graph) >= FED_MODEL_SPEC_MAX);
    for (int stream = 0; stream < 2; stream++) {
        scen_opts o = {.clients = 3, .spec = "", .graph = graph, .per_client = 100,
                       .rounds = 2, .min_clients = 3, .deadline_ms = 600000, .seed = 9,
                       .max_frame = stream ? 4096 : 0};
        scen s;

        run_declines(&s, fx, &o, 0);
        scen_free(&s);
    }
}

/* A client whose own --model declares another graph than the aggregator's
 * declines round 1 at once (LEAVE FED_ERR_MODEL_MISMATCH; then parked), saying both
 * models' hashes and where they first differ, at warning level; a client
 * bounded below the model's parameters declines it the same way. */
static void test_declared_model_mismatch(void **state)
{
    const fixture *fx = *state;
    char ha[FED_MODEL_HASH_CHARS], hb[FED_MODEL_HASH_CHARS], want[512];

    fed_test_need_fashion(fx->train != NULL);
    for (int bound = 0; bound < 2; bound++) {
        scen_opts o = {.clients = 4, .spec = "mlp:16", .per_client = 100, .rounds = 2,
                       .min_clients = 3, .deadline_ms = 600000, .seed = 5, .odd_client = 3,
                       .odd_model = bound ? NULL : "mlp:17", .odd_max_params = bound ? 1000 : 0};
        scen s;

        fed_test_log_capture(FED_LOG_WARN);
        run_declines(&s, fx, &o, 1);
        fed_model_spec_hash("mlp:16", ha);
        fed_model_spec_hash("mlp:17", hb);
        if (!bound)
            snprintf(want, sizeof want, "client: round 1: the aggregator's model %s differs from "
                     "the one this client's --model declares, %s, at byte 5: '...mlp:16' "
                     "against '...mlp:17'; declined (FED_ERR_MODEL_MISMATCH)", ha, hb);
        else {
            size_t np;
            double flops;

            assert_int_equal(fed_model_spec_cost("mlp:16", fx->train->shape, &np, &flops, NULL,
                                                 0),
                             FED_OK);
            assert_int_equal(np, 12730);
            snprintf(want, sizeof want, "client: round 1: the aggregator's model %s has 12730 "
                     "parameters and %.4g FLOPs per sample, past this client's "
                     "--max-model-params 1000 or --max-model-flops 1e+11; declined "
                     "(FED_ERR_MODEL_MISMATCH)", ha, flops);
        }
        fed_test_log_has(want);
        fed_test_log_default();
        scen_free(&s);
    }
}

static void test_async_fedbuff(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "logreg", .per_client = 2000, .uneven = 1, .rounds = 6,
                   .min_clients = 1, .deadline_ms = 600000, .seed = 21, .async_k = 2};
    int stale = 0, in_rounds[MAXC + 1] = {0};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    capture_initial(&s);
    scen_run(&s, 600000);
    for (int r = 1; r <= 6; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.ndeltas[r], 2);
        assert_int_equal(s.info[r].merged, 2);
        expect_fedavg(&s, r);
        for (int k = 0; k < 2; k++) {
            const delta_rec *d = &s.deltas[r][k];

            assert_true(d->base <= (uint64_t)r);
            stale += d->base < (uint64_t)r;
            for (int c = 0; c < s.ncl; c++)
                in_rounds[c] += !memcmp(d->key, fed_sim_host_id(s.cl[c])->key, 32);
        }
    }
    printf("async: %d stale deltas merged; rounds per client %d %d %d %d\n", stale, in_rounds[0],
           in_rounds[1], in_rounds[2], in_rounds[3]);
    assert_true(stale > 0);
    assert_true(in_rounds[0] > in_rounds[3]);
    scen_free(&s);
}

/* An async round has no deadline until its first delta: what the aggregator
 * reports as due (for /healthz) is the deadline armed, never one already
 * past while the round waits for clients that train longer than it. */
static void test_async_due_is_armed_deadline(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 2, .spec = "mlp:256,128", .per_client = 6000, .rounds = 2,
                   .min_clients = 1, .deadline_ms = 1000, .seed = 5, .async_k = 2};
    int open_steps = 0, armed_steps = 0;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    for (uint64_t t = 100; t <= 60000; t += 100) {
        fed_node *a;
        fed_node_progress p;
        uint64_t now;

        assert_int_equal(fed_sim_world_run_until(s.w, t), FED_OK);
        a = fed_sim_host_node(s.agg);
        if (!a || fed_node_finished(a))
            break;
        fed_node_get_progress(a, &p);
        now = fed_sim_world_now_us(s.w) / 1000;
        open_steps += p.round_open;
        armed_steps += p.round_due_ms != 0;
        if (p.round_due_ms && p.round_due_ms + 100 < now)
            fail_msg("t=%llu ms: round %llu reported due at %llu ms, already past",
                     (unsigned long long)now, (unsigned long long)p.round + 1,
                     (unsigned long long)p.round_due_ms);
    }
    printf("async due: open %d steps of 100 ms, a deadline armed in %d, round %llu\n",
           open_steps, armed_steps, (unsigned long long)fed_node_round(fed_sim_host_node(s.agg)));
    assert_true(fed_node_finished(fed_sim_host_node(s.agg)));
    assert_true(open_steps > 20); /* clients trained for seconds: the rounds stayed open */
    scen_free(&s);
}

/* With 4 KiB frames the logreg's 31 KB MODEL and DELTA go as CHUNK streams
 * (pulled and pushed chunk by chunk): every round is bit for bit the one
 * of the same run in whole frames. That run's MODELs were sealed ahead
 * (broadcast.c): round 1's for the three clients that waited for the
 * fourth, round 2's beside round 1's commit; the streamed run's were not:
 * a MODEL sealed ahead with anything but the merged global (say the
 * round-1 vector) makes round 2 differ here. */
static void test_streamed_transfers(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "logreg", .per_client = 150, .uneven = 1, .rounds = 2,
                   .min_clients = 4, .deadline_ms = 60000, .seed = 31};
    scen whole, chunked;
    const fed_wire_counters *wa, *wc;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&whole, fx, &o);
    scen_run(&whole, 600000);
    o.max_frame = 4096;
    scen_build(&chunked, fx, &o);
    scen_run(&chunked, 600000);
    for (int r = 1; r <= 2; r++) {
        assert_int_equal(chunked.commits[r], 1);
        assert_int_equal(chunked.info[r].merged, 4);
        assert_memory_equal(chunked.params[r], whole.params[r], whole.nparams * sizeof(float));
    }
    wa = fed_node_wire_counters(fed_sim_host_node(chunked.agg));
    wc = fed_node_wire_counters(fed_sim_host_node(chunked.cl[0]));
    printf("streams: aggregator took %llu, client 0 took %llu; none at 16 MiB: %llu\n",
           (unsigned long long)wa->streams_done, (unsigned long long)wc->streams_done,
           (unsigned long long)fed_node_wire_counters(fed_sim_host_node(whole.agg))->streams_done);
    assert_int_equal(wa->streams_done, 8); /* 4 clients' DELTAs, 2 rounds */
    assert_int_equal(wc->streams_done, 2); /* its MODELs */
    assert_int_equal(wa->streams_failed, 0);
    assert_int_equal(fed_node_wire_counters(fed_sim_host_node(whole.agg))->streams_begun, 0);
    assert_int_equal(fedi_node_cast_sent_ahead(fed_sim_host_node(whole.agg)), 3 + 4);
    assert_int_equal(fedi_node_cast_sent_ahead(fed_sim_host_node(chunked.agg)), 0);
    scen_free(&whole);
    scen_free(&chunked);
}

/* The same streams over links that lose 10% of frames: chunks and their
 * ACKs are resent (fresh sequence numbers) until every round is merged. */
static void test_streamed_lossy(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "logreg", .per_client = 150, .rounds = 3,
                   .min_clients = 3, .deadline_ms = 60000, .seed = 32, .max_frame = 4096,
                   .loss = 0.1};
    const fed_wire_counters *wa;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    scen_run(&s, 3600000);
    for (int r = 1; r <= 3; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_true(s.info[r].merged >= 3);
    }
    wa = fed_node_wire_counters(fed_sim_host_node(s.agg));
    printf("lossy streams: aggregator took %llu, dropped %llu unfinished\n",
           (unsigned long long)wa->streams_done, (unsigned long long)wa->streams_failed);
    assert_true(wa->streams_done >= 9);
    scen_free(&s);
}

/* A round waits for as many clients as it is told to (min_clients 150, past
 * the merge's default table of 128): all 150 are merged. Their MODELs go
 * in batches of 64 (broadcast.c), the payload hashed in the first only:
 * every client opens its MODEL the first time. The first 64 to wait had
 * theirs sealed ahead; those frames pin no session while they wait (else
 * the other clients' HELLOs are refused, FED_ERR_BUSY, and the round never
 * starts). */
static void test_more_than_128_clients(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 150, .spec = "logreg", .per_client = 20, .rounds = 1,
                   .min_clients = 150, .deadline_ms = 600000, .seed = 41};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    scen_run(&s, 600000);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].sampled, 150);
    assert_int_equal(s.info[1].merged, 150);
    for (int i = 0; i < 150; i++)
        assert_int_equal(fed_node_wire_counters(fed_sim_host_node(s.cl[i]))->rej_signature, 0);
    assert_int_equal(fedi_node_cast_sent_ahead(fed_sim_host_node(s.agg)), 64);
    assert_int_equal(fed_node_wire_counters(fed_sim_host_node(s.agg))->rej_busy, 0);
    scen_free(&s);
}

static void test_accuracy_10_clients(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 10, .spec = "mlp:256,128", .rounds = 5, .min_clients = 10,
                   .deadline_ms = 120000, .seed = 1, .evaluate = 1};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    scen_run(&s, 3600000);
    for (int r = 1; r <= 5; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.info[r].merged, 10);
        assert_int_equal(s.info[r].samples, 60000);
        printf("round %d: accuracy %.4f loss %.4f\n", r, s.info[r].accuracy, s.info[r].loss);
    }
    assert_true(s.info[5].accuracy >= 0.82);
    assert_true(s.info[5].accuracy > s.info[1].accuracy);
    scen_free(&s);
}

/* The contributions row of (round, key), or -1 accepted when absent. */
typedef struct contrib_q {
    uint64_t round;
    uint8_t key[32];
    int accepted;
    char reason[64];
    int rows;
} contrib_q;

static int find_contrib(void *ctx, const fed_store_contrib *c)
{
    contrib_q *q = ctx;

    if (c->round == q->round && !memcmp(c->peer_key, q->key, 32)) {
        q->accepted = c->accepted;
        snprintf(q->reason, sizeof q->reason, "%s", c->reason);
        q->rows++;
    }
    return 0;
}

static contrib_q contribution(scen *s, uint64_t round, const fed_sim_host *h)
{
    contrib_q q;

    memset(&q, 0, sizeof q);
    q.round = round;
    q.accepted = -1;
    memcpy(q.key, fed_sim_host_id(h)->key, 32);
    assert_int_equal(fed_store_each_contribution(fed_sim_host_store(s->agg), round, find_contrib,
                                                 &q), FED_OK);
    return q;
}

static int delta_from(const scen *s, int r, const fed_sim_host *h)
{
    for (int k = 0; k < s->ndeltas[r]; k++)
        if (!memcmp(s->deltas[r][k].key, fed_sim_host_id(h)->key, 32))
            return 1;
    return 0;
}

/* Client 2's frames to the aggregator are lost while it trains round 2
 * (slowed down so the cut falls there): it is recorded missing, the round closes at its deadline with the others
 * (min_clients 4), and once its link heals it is back. */
static void test_dropped_client(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 5, .spec = "logreg", .per_client = 200, .rounds = 4,
                   .min_clients = 4, .deadline_ms = 20000, .seed = 5};
    fed_sim_link dead = {.latency_ms = 5, .loss = 1.0};
    fed_sim_link ok = {.latency_ms = 5, .jitter_ms = 1, .bytes_per_ms = 100000};
    uint32_t c2, ai;
    contrib_q q;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    c2 = fed_sim_host_index(s.cl[2]);
    ai = fed_sim_host_index(s.agg);
    step_until_commit(&s, 1);
    /* slow enough (about 9 virtual s) to be cut off while it trains round 2 */
    assert_int_equal(fed_sim_world_set_slowdown(s.w, c2, 5000), FED_OK);
    assert_int_equal(fed_sim_world_run_until(s.w, fed_sim_world_now_us(s.w) / 1000 + 2000),
                     FED_OK);
    assert_int_equal(fed_node_round(fed_sim_host_node(s.cl[2])), 1);
    assert_int_equal(fed_sim_world_set_link(s.w, c2, ai, &dead), FED_OK);
    step_until_commit(&s, 2);
    assert_int_equal(fed_sim_world_set_link(s.w, c2, ai, &ok), FED_OK);
    assert_int_equal(fed_sim_world_set_slowdown(s.w, c2, 1), FED_OK);
    scen_run(&s, 600000);

    assert_int_equal(s.info[2].sampled, 5);
    assert_int_equal(s.info[2].merged, 4);
    assert_int_equal(s.info[2].missing, 1);
    assert_false(delta_from(&s, 2, s.cl[2]));
    q = contribution(&s, 2, s.cl[2]);
    assert_int_equal(q.rows, 1);
    assert_int_equal(q.accepted, 0);
    assert_string_equal(q.reason, "missing");
    q = contribution(&s, 2, s.cl[0]);
    assert_int_equal(q.accepted, 1);
    /* healed: it is merged again by the last round */
    assert_int_equal(s.commits[4], 1);
    assert_true(delta_from(&s, 4, s.cl[2]));
    assert_int_equal(contribution(&s, 4, s.cl[2]).accepted, 1);
    scen_free(&s);
}

/* A straggler: client 0 trains round 1 so slowly that its delta comes after
 * the deadline. Round 1 closes with the other three (missing: client 0); its
 * delta, arriving in round 2, is answered, recorded "late" and never merged;
 * back at speed it is merged again. */
static void test_straggler_late(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "logreg", .per_client = 200, .rounds = 3,
                   .min_clients = 3, .deadline_ms = 5000, .seed = 13};
    contrib_q q;
    uint32_t c0;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    c0 = fed_sim_host_index(s.cl[0]);
    assert_int_equal(fed_sim_world_set_slowdown(s.w, c0, 5000), FED_OK); /* ~9 s */
    step_until_commit(&s, 1);
    assert_int_equal(fed_sim_world_set_slowdown(s.w, c0, 1), FED_OK);
    scen_run(&s, 600000);

    assert_int_equal(s.info[1].merged, 3);
    assert_int_equal(s.info[1].missing, 1);
    assert_false(delta_from(&s, 1, s.cl[0]));
    q = contribution(&s, 1, s.cl[0]);
    assert_int_equal(q.rows, 2); /* missing at the close, then late */
    assert_int_equal(q.accepted, 0);
    assert_string_equal(q.reason, "late");
    assert_true(fed_node_wire_counters(fed_sim_host_node(s.agg))->rej_other >= 1);
    assert_true(delta_from(&s, 3, s.cl[0]));
    scen_free(&s);
}

/* Client 1 crashes while training round 2 and restarts: it rejoins and is
 * merged in a later round, with a new epoch; the aggregator crashes right
 * after committing round 3 and restarts 4 s later: round 4 starts from the
 * round-3 checkpoint, every round is committed exactly once. */
static void test_crash_restart(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "logreg", .per_client = 300, .rounds = 8,
                   .min_clients = 3, .deadline_ms = 20000, .seed = 9};
    uint64_t epoch_before, epoch_after;
    uint32_t c1;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    s.crash_agg_after = 3;
    c1 = fed_sim_host_index(s.cl[1]);
    step_until_commit(&s, 1);
    epoch_before = fed_store_epoch(fed_sim_host_store(s.cl[1]));
    /* its NEXT is held or on its way: round 2 goes on without it */
    fed_sim_world_crash(s.w, c1);
    assert_null(fed_sim_host_node(s.cl[1]));
    assert_int_equal(fed_sim_world_restart_at(s.w, c1, fed_sim_world_now_us(s.w) / 1000 + 3000),
                     FED_OK);
    scen_run(&s, 900000);

    epoch_after = fed_store_epoch(fed_sim_host_store(s.cl[1]));
    assert_true(epoch_after > epoch_before);
    assert_int_equal(fed_sim_host_start_failures(s.cl[1]), 0);
    assert_false(delta_from(&s, 2, s.cl[1]));
    /* back by the last round (the three others hear at once that the
       aggregator restarted; it asks a dead one for up to 7 s) */
    assert_true(delta_from(&s, 8, s.cl[1]));
    /* the aggregator: crashed after 3, resumed from it */
    assert_int_equal(s.agg_crashed, 1);
    assert_int_equal(fed_sim_host_start_failures(s.agg), 0);
    for (int r = 1; r <= 8; r++)
        assert_int_equal(s.commits[r], 1);
    assert_non_null(fed_sim_host_node(s.agg));
    assert_int_equal(fed_node_round(fed_sim_host_node(s.agg)), 8);
    /* round 4's update was made against round 3's global: with FedAvg
       x4 = x3 + mean of deltas, reproduced here bit for bit */
    expect_fedavg(&s, 4);
    {
        fed_store_round rows[8];
        size_t n = 0;

        assert_int_equal(fed_store_last_rounds(fed_sim_host_store(s.agg), rows, 8, &n), FED_OK);
        assert_int_equal(n, 8);
    }
    scen_free(&s);
}

typedef struct dp_rounds {
    uint64_t round[8];
    uint64_t steps;
    double q, epsilon;
    int n;
} dp_rounds;

static int keep_dp_round(void *ctx, const fed_store_dp_charge *c)
{
    dp_rounds *d = ctx;

    if (d->n < 8)
        d->round[d->n] = c->round;
    d->n++;
    d->steps += c->steps;
    d->q = c->q;
    d->epsilon = c->epsilon;
    return 0;
}

static dp_rounds dp_charged(const fed_sim_host *h)
{
    dp_rounds d;

    memset(&d, 0, sizeof d);
    assert_int_equal(fed_store_each_dp_charge(fed_sim_host_store(h), keep_dp_round, &d), FED_OK);
    return d;
}

/* DP-SGD at client 0 (noise from the simulator's seeded stream). Its disk
 * is full when round 1's training ends: the charge cannot be committed, so
 * its delta is not sent (none arrives, nothing is charged); with room again
 * it trains round 1 again, is charged and merged. Then its link is cut and
 * it crashes right after charging round 2 (the delta lost on the way):
 * restarted, it trains round 2 again and is charged again. Its database
 * ends with the charges of rounds 1, 2, 2, 3 and the epsilon of all their
 * steps; every round merged its delta once. */
static void test_dp_client_charges(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "logreg", .per_client = 100, .rounds = 3,
                   .min_clients = 3, .deadline_ms = 20000, .seed = 31, .dp_client = 1};
    fed_sim_link dead = {.latency_ms = 5, .loss = 1.0};
    fed_sim_link ok = {.latency_ms = 5, .jitter_ms = 1, .bytes_per_ms = 100000};
    uint32_t c0, ai;
    dp_rounds d;
    double want = 0;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    c0 = fed_sim_host_index(s.cl[0]);
    ai = fed_sim_host_index(s.agg);
    assert_int_equal(fed_sim_world_run_until(s.w, 0), FED_OK); /* every node up */
    fedi_store_set_disk_full(fed_sim_host_store(s.cl[0]), 1);
    assert_int_equal(fed_sim_world_run_until(s.w, 1500), FED_OK);
    assert_int_equal(s.ndeltas[1], 2); /* the other two */
    assert_false(delta_from(&s, 1, s.cl[0]));
    assert_int_equal(dp_charged(s.cl[0]).n, 0);
    fedi_store_set_disk_full(fed_sim_host_store(s.cl[0]), 0);
    step_until_commit(&s, 1);
    assert_true(delta_from(&s, 1, s.cl[0]));
    d = dp_charged(s.cl[0]);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.round[0], 1);
    /* round 2: once its MODEL is out, the client's frames are lost, and it
       crashes once it has charged the round */
    for (int k = 0; k < 100000; k++) {
        fed_node_progress pr;
        int did = 0;

        fed_node_get_progress(fed_sim_host_node(s.agg), &pr);
        if (pr.round == 1 && pr.round_open)
            break;
        assert_int_equal(fed_sim_world_step(s.w, &did), FED_OK);
        assert_true(did);
    }
    assert_int_equal(fed_sim_world_set_link(s.w, c0, ai, &dead), FED_OK);
    for (int k = 0; dp_charged(s.cl[0]).n < 2; k++) {
        int did = 0;

        assert_true(k < 100000);
        assert_int_equal(fed_sim_world_step(s.w, &did), FED_OK);
        assert_true(did);
    }
    fed_sim_world_crash(s.w, c0);
    assert_int_equal(fed_sim_world_set_link(s.w, c0, ai, &ok), FED_OK);
    assert_int_equal(fed_sim_world_restart_at(s.w, c0, fed_sim_world_now_us(s.w) / 1000 + 1000),
                     FED_OK);
    scen_run(&s, 600000);
    for (int r = 1; r <= 3; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.info[r].merged, 3);
        assert_true(delta_from(&s, r, s.cl[0]));
    }
    d = dp_charged(s.cl[0]);
    assert_int_equal(d.n, 4);
    assert_int_equal(d.round[0], 1);
    assert_int_equal(d.round[1], 2);
    assert_int_equal(d.round[2], 2);
    assert_int_equal(d.round[3], 3);
    assert_int_equal(d.steps, 4 * 2); /* ceil(100 / 64) steps a round */
    assert_true(d.q == 0.64);
    assert_int_equal(fed_rdp_sgm_epsilon(0.64, 1.0, d.steps, 1e-5, NULL, 0, &want, NULL), FED_OK);
    assert_true(fabs(d.epsilon - want) <= 1e-12 * want);
    assert_int_equal(dp_charged(s.cl[1]).n, 0); /* no DP there */
    scen_free(&s);
}

/* A client whose key is not in the allow-list: its frames are refused and
 * counted, it is never sampled, never merged, never recorded. */
/* The aggregator's disk fills after round 1: round 2's commit fails
 * (FED_ERR_FULL) again and again, each try waiting twice as long as the
 * one before, nothing of it is committed, and round 3's MODEL, sealed
 * beside each failing commit, is never sent: no client trains round 3
 * while the disk stays full (round 2 runs again, its clients resending
 * their deltas). With room again, round 2 commits and rounds 3 and 4
 * follow, each the plain FedAvg of its deltas (round 2's into round 1's
 * global, not into a failed try's merge). */
static void test_full_disk_aggregator(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "logreg", .per_client = 100, .rounds = 4,
                   .min_clients = 4, .deadline_ms = 20000, .seed = 13};
    fed_store_round row;
    fed_store *st;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    capture_initial(&s);
    step_until_commit(&s, 1);
    st = fed_sim_host_store(s.agg);
    assert_int_equal(fed_store_set_max_bytes(st, 1), FED_OK); /* no room to grow */
    assert_int_equal(fed_sim_world_run_until(s.w, fed_sim_world_now_us(s.w) / 1000 + 10000),
                     FED_OK);
    assert_int_equal(s.commits[2], 0);
    assert_int_equal(fed_store_get_round(st, 2, &row), FED_ERR_NOTFOUND);
    /* tried at once, then 1, 2 and 4 s later (gather_ms, doubling): 4 tries
       of 4 deltas in these 10 s, not one every few ms */
    assert_int_equal(s.ndeltas[2], 16);
    assert_int_equal(s.ndeltas[3], 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(fed_node_round(fed_sim_host_node(s.cl[i])), 2);
    assert_int_equal(fed_store_set_max_bytes(st, 0), FED_OK);
    scen_run(&s, 600000);
    for (int r = 1; r <= 4; r++)
        assert_int_equal(s.commits[r], 1);
    assert_int_equal(s.info[2].merged, 4);
    assert_int_equal(fed_store_get_round(st, 2, &row), FED_OK);
    /* round 2 merged the last 4 deltas it took (earlier takes: the same
       deltas resent) into the global of round 1, not into a failed merge */
    for (int k = 0; k < s.ndeltas[2] - 4; k++)
        free(s.deltas[2][k].delta);
    memmove(s.deltas[2], s.deltas[2] + s.ndeltas[2] - 4, 4 * sizeof s.deltas[2][0]);
    s.ndeltas[2] = 4;
    expect_fedavg(&s, 2);
    expect_fedavg(&s, 3);
    expect_fedavg(&s, 4);
    scen_free(&s);
}

/* Async mode's side of a failed commit: the aggregator's disk fills after
 * round 1, and each buffer of K = 2 deltas that closes round 2 fails to
 * commit. Nothing of it is committed and the buffer is dropped; the round
 * opens again after the synchronous rounds' wait (1 s, then twice as long
 * each time), not at once, so its clients do not resend in a loop: 4 tries
 * in these 10 s. Clients whose dropped delta trained round 2 are not held
 * for a merge that would never come: given the model again, they send it
 * again, and once the disk has room rounds 2 and 3 commit, K deltas each. */
static void test_full_disk_async(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "logreg", .per_client = 100, .rounds = 3,
                   .min_clients = 1, .deadline_ms = 20000, .seed = 17, .async_k = 2};
    fed_store_round row;
    fed_store *st;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    step_until_commit(&s, 1);
    st = fed_sim_host_store(s.agg);
    assert_int_equal(fed_store_set_max_bytes(st, 1), FED_OK); /* no room to grow */
    fed_test_log_capture(FED_LOG_ERROR);
    assert_int_equal(fed_sim_world_run_until(s.w, fed_sim_world_now_us(s.w) / 1000 + 10000),
                     FED_OK);
    assert_int_equal(fed_test_log_count("aggregator: round 2 failed (no space left", ""), 4);
    fed_test_log_default();
    assert_int_equal(s.commits[2], 0);
    assert_int_equal(fed_node_round(fed_sim_host_node(s.agg)), 1);
    assert_int_equal(fed_store_get_round(st, 2, &row), FED_ERR_NOTFOUND);
    assert_int_equal(s.ndeltas[3], 0);
    assert_int_equal(fed_store_set_max_bytes(st, 0), FED_OK);
    scen_run(&s, 600000);
    for (int r = 1; r <= 3; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.info[r].merged, 2);
    }
    assert_int_equal(fed_store_get_round(st, 2, &row), FED_OK);
    assert_int_equal(fed_store_get_round(st, 3, &row), FED_OK);
    scen_free(&s);
}

/* A fresh aggregator told to wait for 4 clients (min_clients 2) gets 3,
 * coming late: their requests take 2 s to arrive, client 2's 2.5 s. Round 1
 * starts gather_ms (1 s) after the first came, with all 3 (not at once when
 * 2 wait, nor never, waiting for a fourth), and both rounds complete. */
static void test_first_round_after_gather(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "logreg", .per_client = 100, .rounds = 2,
                   .min_clients = 2, .wait_clients = 4, .deadline_ms = 20000, .seed = 23};
    fed_sim_link late = {.latency_ms = 2000, .bytes_per_ms = 100000};
    uint64_t base_ms = 1700000000ull * 1000, start_ms;
    uint32_t ai;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    ai = fed_sim_host_index(s.agg);
    for (int i = 0; i < 3; i++) {
        late.latency_ms = i == 2 ? 2500 : 2000;
        assert_int_equal(fed_sim_world_set_link(s.w, fed_sim_host_index(s.cl[i]), ai, &late),
                         FED_OK);
    }
    scen_run(&s, 600000);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].sampled, 3);
    assert_int_equal(s.info[1].merged, 3);
    /* virtual time: the first request came at 2 s, the third at 2.5 s */
    start_ms = s.info[1].start_ms - base_ms;
    printf("first round: started at %llu ms\n", (unsigned long long)start_ms);
    assert_true(start_ms >= 3000 && start_ms < 3100);
    /* round 2 follows the rule after a round (gather_ms from round 1's close):
       its clients' NEXTs, 2 s on the way, find the timer fired */
    assert_int_equal(s.commits[2], 1);
    assert_true(s.info[2].merged >= 2);
    scen_free(&s);
}

/* An aggregator whose clients are slow to come says whom it waits for and
 * how many: once at start, then every 30 s while no round can start (it
 * said nothing). Client 1's requests take 65 s to arrive: reports at 0, 30
 * and 60 s, naming it (and client 0 at first), none once the round ran. */
static void test_waiting_reported(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 2, .spec = "logreg", .per_client = 100, .rounds = 1,
                   .min_clients = 2, .deadline_ms = 20000, .seed = 29};
    fed_sim_link late = {.latency_ms = 65000, .bytes_per_ms = 100000};
    fed_log_level level = fed_log_get_level();
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    fed_log_set_level(FED_LOG_INFO);
    fed_test_log_capture(FED_LOG_INFO);
    scen_build(&s, fx, &o);
    /* client 1 comes late; client 0 asks at once (and again after each
       poll_ms answer of no round) */
    assert_int_equal(fed_sim_world_set_link(s.w, fed_sim_host_index(s.cl[1]),
                                            fed_sim_host_index(s.agg), &late),
                     FED_OK);
    scen_run(&s, 600000);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(fed_test_log_count("aggregator: round 1 waits for clients", ""), 3);
    fed_test_log_has("aggregator: round 1 waits for clients: 0 asking; 2 start it at once, or 2 "
                     "once --gather-ms 1000 passed since the first; 2 not asking: client0, "
                     "client1\n");
    fed_test_log_has("aggregator: round 1 waits for clients: 1 asking; 2 start it at once, or 2 "
                     "once --gather-ms 1000 passed since the first; 1 not asking: client1\n");
    fed_test_log_default();
    fed_log_set_level(level);
    scen_free(&s);
}

/* An allow-list of fewer clients than --min-clients: no round can start,
 * which the aggregator says at warning level with each report of whom it
 * waits for (the list may grow: SIGHUP reads it again), rather than wait
 * in silence; --wait-clients past the list is said too. */
static void test_too_few_members_said(void **state)
{
    const fixture *fx = *state;
    scen_opts few = {.clients = 2, .spec = "logreg", .per_client = 100, .rounds = 1,
                     .min_clients = 3, .deadline_ms = 20000, .seed = 29};
    scen_opts wait = {.clients = 2, .spec = "logreg", .per_client = 100, .rounds = 1,
                      .min_clients = 2, .wait_clients = 5, .deadline_ms = 20000, .seed = 29};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    fed_test_log_capture(FED_LOG_WARN);
    scen_build(&s, fx, &few);
    scen_run(&s, 65000);
    assert_int_equal(s.commits[1], 0);
    assert_int_equal(fed_test_log_count("aggregator: the allow-list has 2 clients, fewer than "
                                        "--min-clients 3: no round can start until it lists "
                                        "more (send SIGHUP once it does)", ""),
                     3); /* at 0, 30 and 60 s */
    scen_free(&s);
    scen_build(&s, fx, &wait);
    scen_run(&s, 120000);
    assert_int_equal(s.commits[1], 1);
    fed_test_log_has("aggregator: --wait-clients 5 is more than the allow-list's 2 clients: each "
                     "round starts only once --gather-ms");
    fed_test_log_default();
    scen_free(&s);
}

/* A client whose frames never reach its aggregator (a wrong address, a
 * wrong key, a link down) says so at warning level once two polls with
 * their retries passed (14 s by default), and again each time the silence
 * doubles; its progress (and so /healthz) says how long; once its link
 * heals it says the aggregator answers again, and round 1 runs. */
static void test_silence_said(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 2, .spec = "logreg", .per_client = 100, .rounds = 1,
                   .min_clients = 2, .deadline_ms = 20000, .seed = 31};
    fed_sim_link dead = {.latency_ms = 5, .loss = 1.0};
    fed_sim_link ok = {.latency_ms = 5, .jitter_ms = 1, .bytes_per_ms = 100000};
    fed_node_progress p;
    uint32_t c1;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    fed_test_log_capture(FED_LOG_INFO);
    scen_build(&s, fx, &o);
    c1 = fed_sim_host_index(s.cl[1]);
    assert_int_equal(fed_sim_world_set_link(s.w, c1, fed_sim_host_index(s.agg), &dead), FED_OK);
    assert_int_equal(fed_sim_world_run_until(s.w, 60000), FED_OK);
    assert_int_equal(s.commits[1], 0);
    fed_test_log_has("client: no answer from the aggregator (key ");
    /* said past 14 s, then past 28 s (the next once it passes 56 s): each
       time the silence doubled, not at each retry */
    assert_int_equal(fed_test_log_count("client: no answer from the aggregator", ""), 2);
    fed_node_get_progress(fed_sim_host_node(s.cl[1]), &p);
    assert_true(p.silent_ms > 50000 && p.silent_ms <= 60000);
    fed_node_get_progress(fed_sim_host_node(s.cl[0]), &p);
    assert_int_equal(p.silent_ms, 0); /* held by its aggregator, which answers each poll */
    assert_int_equal(fed_sim_world_set_link(s.w, c1, fed_sim_host_index(s.agg), &ok), FED_OK);
    scen_run(&s, 120000);
    assert_int_equal(s.commits[1], 1);
    fed_test_log_has("client: the aggregator answers again"); /* at info level */
    fed_test_log_default();
    scen_free(&s);
}

/* A client that waits long for round 1 has its MODEL sealed ahead, and
 * sealed again each time it asks (after every poll_ms answer of no round):
 * client 1 is down from 1 ms to 6,000 s, client 0 gets over 1,100 ACKs
 * meanwhile, past the replay window (1,024), so a frame sealed when it
 * first asked would reach it as a replay. It takes its MODEL at once. */
static void test_long_wait_sealed_ahead(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 2, .spec = "logreg", .per_client = 100, .rounds = 1,
                   .min_clients = 2, .deadline_ms = 20000, .seed = 30};
    uint32_t c1;
    const fed_wire_counters *c0;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    c1 = fed_sim_host_index(s.cl[1]);
    assert_int_equal(fed_sim_world_crash_at(s.w, c1, 1), FED_OK);
    assert_int_equal(fed_sim_world_restart_at(s.w, c1, 6000000), FED_OK);
    scen_run(&s, 7000000);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, 2);
    c0 = fed_node_wire_counters(fed_sim_host_node(s.cl[0]));
    printf("long wait: client 0 opened %llu frames, %llu replays refused; %llu sent ahead\n",
           (unsigned long long)c0->opened, (unsigned long long)c0->rej_replay,
           (unsigned long long)fedi_node_cast_sent_ahead(fed_sim_host_node(s.agg)));
    assert_true(c0->opened > 1024);
    assert_int_equal(c0->rej_replay, 0);
    assert_int_equal(fedi_node_cast_sent_ahead(fed_sim_host_node(s.agg)), 1);
    scen_free(&s);
}

/* ---- the accuracy of a round evaluated on a full disk ---- */

/* Steps until round r is committed (its row is in the database) and then
 * fills the disk before the round's evaluation ends (a later event: the
 * job's), and steps on until the evaluation was reported. */
static void full_disk_at_evaluation(scen *s, fed_store *st, uint64_t r)
{
    fed_store_round row;

    while (fed_store_get_round(st, r, &row) != FED_OK) {
        int did = 0;

        assert_int_equal(fed_sim_world_step(s->w, &did), FED_OK);
        assert_true(did);
    }
    assert_int_equal(s->commits[r], 0); /* committed, not evaluated yet */
    assert_true(isnan(row.accuracy));
    fedi_store_set_disk_full(st, 1);
    step_until_commit(s, (int)r);
    assert_false(isnan(s->info[r].accuracy));
    /* the write failed: the row is still without it */
    assert_int_equal(fed_store_get_round(st, r, &row), FED_OK);
    assert_true(isnan(row.accuracy));
}

/* The disk fills between round 2's commit and its evaluation: the accuracy
 * cannot be written, and the disk is freed right after. The figures were
 * kept: round 3's commit is followed by their write (before round 3's own
 * evaluation), so round 2's row ends with exactly the accuracy and loss
 * reported, and the log says it failed, was kept and then recorded. Every
 * other round has its own figures. */
static void test_full_disk_accuracy_kept(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "logreg", .per_client = 100, .rounds = 4,
                   .min_clients = 4, .deadline_ms = 20000, .seed = 17, .evaluate = 1};
    fed_log_level level = fed_log_get_level();
    fed_store_round row;
    fed_store *st;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    fed_log_set_level(FED_LOG_INFO);
    fed_test_log_capture(FED_LOG_INFO); /* a store's warning may come from the pool's thread */
    scen_build(&s, fx, &o);
    st = fed_sim_host_store(s.agg);
    full_disk_at_evaluation(&s, st, 2);
    fedi_store_set_disk_full(st, 0);
    /* written with round 3's commit, before round 3 is evaluated */
    while (fed_store_get_round(st, 3, &row) != FED_OK) {
        int did = 0;

        assert_int_equal(fed_sim_world_step(s.w, &did), FED_OK);
        assert_true(did);
    }
    assert_int_equal(s.commits[3], 0);
    assert_int_equal(fed_store_get_round(st, 2, &row), FED_OK);
    assert_true(row.accuracy == s.info[2].accuracy);
    scen_run(&s, 600000);
    fed_log_set_level(level);

    for (uint64_t r = 1; r <= 4; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(fed_store_get_round(st, r, &row), FED_OK);
        assert_true(row.accuracy > 0.1);
        assert_true(row.accuracy == s.info[r].accuracy);
        assert_true(row.loss == s.info[r].loss);
    }
    assert_int_equal(fed_test_log_count("recording round 2's accuracy failed", "kept"), 1);
    assert_int_equal(fed_test_log_count("round 2's accuracy", "recorded"), 1);
    assert_int_equal(fed_test_log_count("accuracy failed", ""), 1); /* no other round's */
    fed_test_log_default();
    scen_free(&s);
}

/* The same at the last round: no commit follows, so the figures kept are
 * written when the aggregator stops (the disk has room again by then). */
static void test_full_disk_accuracy_at_stop(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "logreg", .per_client = 100, .rounds = 2,
                   .min_clients = 3, .deadline_ms = 20000, .seed = 19, .evaluate = 1};
    fed_log_level level = fed_log_get_level();
    fed_store_round row;
    fed_store *st;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    fed_log_set_level(FED_LOG_INFO);
    fed_test_log_capture(FED_LOG_INFO); /* a store's warning may come from the pool's thread */
    scen_build(&s, fx, &o);
    st = fed_sim_host_store(s.agg);
    full_disk_at_evaluation(&s, st, 2);
    fedi_store_set_disk_full(st, 0);
    scen_run(&s, 600000);
    assert_true(fed_node_finished(fed_sim_host_node(s.agg)));
    assert_int_equal(fed_store_get_round(st, 2, &row), FED_OK);
    assert_true(isnan(row.accuracy)); /* nothing wrote since */
    assert_int_equal(fed_test_log_count("round 2's accuracy", "recorded"), 0);
    assert_int_equal(fed_node_stop(fed_sim_host_node(s.agg)), FED_OK);
    fed_log_set_level(level);
    assert_int_equal(fed_store_get_round(st, 2, &row), FED_OK);
    assert_true(row.accuracy == s.info[2].accuracy);
    assert_true(row.loss == s.info[2].loss);
    assert_int_equal(fed_store_get_round(st, 1, &row), FED_OK);
    assert_true(row.accuracy == s.info[1].accuracy);
    assert_int_equal(fed_test_log_count("recording round 2's accuracy failed", "kept"), 1);
    assert_int_equal(fed_test_log_count("round 2's accuracy", "recorded"), 1);
    assert_int_equal(fed_test_log_count("lost", "accuracy"), 0);
    fed_test_log_default();
    scen_free(&s);
}

static void test_non_member(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "logreg", .per_client = 100, .rounds = 2,
                   .min_clients = 3, .deadline_ms = 20000, .seed = 3, .rogue = 1};
    const fed_wire_counters *wc;
    uint64_t stored = 0;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    scen_run(&s, 600000);
    assert_int_equal(s.commits[2], 1);
    for (int r = 1; r <= 2; r++) {
        assert_int_equal(s.info[r].sampled, 3);
        assert_false(delta_from(&s, r, s.cl[3]));
        assert_int_equal(contribution(&s, r, s.cl[3]).rows, 0);
    }
    wc = fed_node_wire_counters(fed_sim_host_node(s.agg));
    assert_true(wc->rej_unknown_sender >= 1);
    assert_int_equal(fed_store_get_counter(fed_sim_host_store(s.agg), "wire.rej_unknown_sender",
                                           &stored),
                     FED_OK);
    assert_true(stored >= 1);
    assert_int_equal(fed_node_round(fed_sim_host_node(s.cl[3])), 0);
    scen_free(&s);
}

static void run_for_hash(const fixture *fx, uint8_t hash[32], uint64_t *trace)
{
    scen_opts o = {.clients = 4, .spec = "logreg", .per_client = 150, .uneven = 1, .rounds = 3,
                   .min_clients = 4, .deadline_ms = 20000, .seed = 21};
    scen s;

    scen_build(&s, fx, &o);
    scen_run(&s, 600000);
    assert_int_equal(s.commits[3], 1);
    memcpy(hash, s.info[3].model_hash, 32);
    *trace = fed_sim_world_trace_hash(s.w);
    scen_free(&s);
}

/* One round of local training in the job the client keeps: its model is
 * reused while the spec and batch stay the same. Three rounds (two on
 * mlp:32, then mlp:16) in one job give the same delta bytes as a fresh job
 * each round; SGD momentum 0.9, so a momentum carried over would show. */
static void train_one(node_train_job *j, const fixture *fx, const uint32_t *idx, size_t n,
                      const char *spec, uint64_t round, const float *global, size_t np)
{
    j->set.local_epochs = 1;
    j->set.batch = 32;
    j->set.optimizer = FED_OPTIM_SGD;
    j->set.lr = 0.05f;
    j->set.momentum = 0.9f;
    snprintf(j->set.spec, sizeof j->set.spec, "%s", spec);
    j->round = round;
    j->seed = 5;
    j->be = fx->be;
    j->pool = fx->pool;
    j->shards = 1;
    j->data = fx->train;
    j->shard = idx;
    j->shard_n = n;
    j->global = global;
    j->nparams = np;
    j->codec.id = FED_CODEC_F32;
    fedi_node_train_job_run(&j->job);
    assert_int_equal(j->err, FED_OK);
}

static void test_train_job_reuse(void **state)
{
    const fixture *fx = *state;
    const char *specs[3] = {"mlp:32", "mlp:32", "mlp:16"};
    uint32_t idx[256];
    node_train_job kept;
    uint8_t *first = NULL;
    size_t first_len = 0;

    fed_test_need_fashion(fx->train != NULL);
    for (uint32_t i = 0; i < 256; i++)
        idx[i] = i * 7;
    memset(&kept, 0, sizeof kept);
    for (int r = 0; r < 3; r++) {
        node_train_job fresh;
        size_t np = 0;
        float *g;
        fed_rng rng;

        assert_int_equal(fed_model_spec_nparams(specs[r], fx->train->shape, &np), FED_OK);
        g = malloc(np * sizeof *g);
        assert_non_null(g);
        fed_rng_seed(&rng, 100 + (uint64_t)r);
        for (size_t i = 0; i < np; i++)
            g[i] = 0.05f * (float)fed_rng_normal(&rng);
        memset(&fresh, 0, sizeof fresh);
        train_one(&kept, fx, idx, 256, specs[r], (uint64_t)r + 1, g, np);
        train_one(&fresh, fx, idx, 256, specs[r], (uint64_t)r + 1, g, np);
        assert_true(kept.vec_len > np * sizeof(float));
        assert_int_equal(kept.vec_len, fresh.vec_len);
        assert_memory_equal(kept.vec, fresh.vec, kept.vec_len);
        if (r == 0) {
            first = malloc(kept.vec_len);
            assert_non_null(first);
            memcpy(first, kept.vec, kept.vec_len);
            first_len = kept.vec_len;
        } else if (r == 1) { /* the same model, another start: another delta */
            assert_int_equal(kept.vec_len, first_len);
            assert_memory_not_equal(kept.vec, first, first_len);
        }
        fedi_node_train_job_release(&fresh);
        free(g);
    }
    fedi_node_train_job_release(&kept);
    free(first);
}

/* What a tamper hook saw: the round, the length and a copy of the delta. */
typedef struct tamper_seen {
    int calls, zero;
    uint64_t round;
    size_t n;
    float *delta;
} tamper_seen;

static void tamper_record(void *ctx, uint64_t round, float *delta, size_t n)
{
    tamper_seen *t = ctx;

    t->calls++;
    t->round = round;
    t->n = n;
    t->delta = malloc(n * sizeof *delta);
    assert_non_null(t->delta);
    memcpy(t->delta, delta, n * sizeof *delta);
    if (t->zero)
        memset(delta, 0, n * sizeof *delta);
}

/* The malloc bounds a daemon sets: blocks up to the node's largest frame
 * and 64 KiB come from the heap, and what a round of its role holds may stay
 * free there for the next: an aggregator of 10 clients of mlp:256,128 keeps
 * 32 MiB (two frames, 4 MB, cost it 16,000 more page faults in ten rounds),
 * a client four blocks, a small model's aggregator two per member and
 * itself. */
static void test_heap_bounds(void **state)
{
    fed_node_config cfg;
    fed_crypto_allow *al = NULL;
    uint8_t pk[32];
    char name[16];
    size_t at, trim;

    (void)state;
    fed_node_config_default(&cfg);
    snprintf(cfg.spec, sizeof cfg.spec, "mlp:256,128");
    cfg.shape = (fed_model_shape){1, 28, 28, 10, 0};
    assert_int_equal(fed_crypto_allow_new(&al), FED_OK);
    for (int i = 0; i < 11; i++) {
        memset(pk, 0, sizeof pk);
        pk[0] = (uint8_t)(i + 1);
        snprintf(name, sizeof name, "m%d", i);
        assert_int_equal(fed_crypto_allow_add(al, name, pk), FED_OK);
    }
    cfg.allow = al;
    cfg.role = FED_NODE_AGGREGATOR;
    fed_node_daemon_heap_bounds(&cfg, &at, &trim);
    assert_int_equal(at, fed_node_recv_limit(&cfg) + (64u << 10));
    assert_int_equal(at, 2012456);
    assert_int_equal(trim, (size_t)32 << 20);
    cfg.role = FED_NODE_CLIENT;
    fed_node_daemon_heap_bounds(&cfg, &at, &trim);
    assert_int_equal(trim, 4 * at);
    snprintf(cfg.spec, sizeof cfg.spec, "logreg");
    cfg.role = FED_NODE_AGGREGATOR;
    fed_node_daemon_heap_bounds(&cfg, &at, &trim);
    assert_int_equal(at, fed_node_recv_limit(&cfg) + (64u << 10));
    assert_int_equal(trim, 24 * at);
    fed_crypto_allow_free(al);
}

/* The receive limit takes the statistics pass's integers: 1024 columns
 * of a logistic regression (2,050 parameters) send a pass DELTA of
 * 1024 x 12 integers as 4 limbs each (49,152 floats), far over the
 * model's own frame; with secure aggregation its masked input (and
 * --secagg-ints) likewise. */
static void test_recv_limit_stats_pass(void **state)
{
    fed_node_config cfg;
    size_t np = 0, pass = 1024 * 12 * 4;

    (void)state;
    fed_node_config_default(&cfg);
    snprintf(cfg.spec, sizeof cfg.spec, "logreg");
    cfg.shape = (fed_model_shape){1, 1, 1024, 2, 0};
    assert_int_equal(fed_model_spec_nparams(cfg.spec, cfg.shape, &np), FED_OK);
    assert_int_equal(np, 2050);
    assert_int_equal(fed_node_recv_limit(&cfg), fed_wire_frame_bytes(np * 8 + (64u << 10)));
    cfg.data.stats_cols = 1024;
    assert_int_equal(fed_node_recv_limit(&cfg),
                     fed_wire_frame_bytes((np + pass) * 8 + (64u << 10)));
    assert_true(fed_node_recv_limit(&cfg) > fed_wire_frame_bytes(pass * sizeof(float)));
    cfg.secagg.on = 1;
    cfg.secagg.ints = 5;
    assert_int_equal(fed_node_recv_limit(&cfg),
                     fed_wire_frame_bytes((np + pass + 5 * 4) * 8 + (64u << 10)));
}

/* The simulator's tamper hook (node/test_hooks.h, through
 * fed_node_config.hooks): no hooks by default, and a daemon refuses a
 * config with them; a client job without one sends its delta untouched: the same
 * bytes as with a hook that only looks, and they decode to exactly the
 * trained - global that hook saw (round and length its own). A hook that
 * changes the delta changes what is sent. */
static void test_no_tamper_hook(void **state)
{
    const fixture *fx = *state;
    fed_node_config cfg;
    uint32_t idx[128];
    node_train_job plain, looked, zeroed;
    tamper_seen seen = {0}, zero = {.zero = 1};
    const fed_node_test_hooks look = {.ctx = &seen, .tamper_delta = tamper_record};
    const fed_node_test_hooks zap = {.ctx = &zero, .tamper_delta = tamper_record};
    fed_node_daemon_cfg dc;
    size_t np = 0;
    float *g, *got;
    fed_rng rng;

    fed_node_config_default(&cfg);
    assert_null(cfg.hooks);
    cfg.hooks = &look;
    fed_test_log_capture(FED_LOG_ERROR);
    memset(&dc, 0, sizeof dc);
    assert_int_equal(fed_node_daemon_run(&dc, &cfg), FED_ERR_INVAL);
    assert_non_null(strstr(fed_test_log_last(), "test hooks"));
    cfg.hooks = NULL; /* the wire's seam (fedsim --no-crypto's unsealed frames) likewise */
    cfg.transfer.wire.hooks = &fedi_wire_hooks_unsealed;
    assert_int_equal(fed_node_daemon_run(&dc, &cfg), FED_ERR_INVAL);
    assert_non_null(strstr(fed_test_log_last(), "test hooks"));
    cfg.transfer.wire.hooks = NULL;
    fed_test_log_default();
    fed_test_need_fashion(fx->train != NULL);
    for (uint32_t i = 0; i < 128; i++)
        idx[i] = i * 5;
    assert_int_equal(fed_model_spec_nparams("mlp:16", fx->train->shape, &np), FED_OK);
    g = malloc(np * sizeof *g);
    got = malloc(np * sizeof *got);
    assert_true(g && got);
    fed_rng_seed(&rng, 9);
    for (size_t i = 0; i < np; i++)
        g[i] = 0.05f * (float)fed_rng_normal(&rng);
    memset(&plain, 0, sizeof plain);
    memset(&looked, 0, sizeof looked);
    memset(&zeroed, 0, sizeof zeroed);
    looked.hooks = &look;
    zeroed.hooks = &zap;
    train_one(&plain, fx, idx, 128, "mlp:16", 3, g, np);
    train_one(&looked, fx, idx, 128, "mlp:16", 3, g, np);
    train_one(&zeroed, fx, idx, 128, "mlp:16", 3, g, np);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.round, 3);
    assert_int_equal(seen.n, np);
    assert_int_equal(plain.vec_len, looked.vec_len);
    assert_memory_equal(plain.vec, looked.vec, plain.vec_len);
    assert_int_equal(fed_codec_decode(plain.vec, plain.vec_len, FED_CODEC_F32, got, np), FED_OK);
    assert_memory_equal(got, seen.delta, np * sizeof *got);
    assert_memory_not_equal(got, g, np * sizeof *got); /* a delta, not the model */
    assert_int_equal(fed_codec_decode(zeroed.vec, zeroed.vec_len, FED_CODEC_F32, got, np), FED_OK);
    assert_memory_equal(zero.delta, seen.delta, np * sizeof *got); /* the same training */
    for (size_t i = 0; i < np; i++)
        assert_true(got[i] == 0.0f);
    fedi_node_train_job_release(&plain);
    fedi_node_train_job_release(&looked);
    fedi_node_train_job_release(&zeroed);
    free(seen.delta);
    free(zero.delta);
    free(got);
    free(g);
}

/* The retransmission budget (node/retry.c) every resend scheme takes from:
 * max retries, then none, the count left at max; a budget of 0 gives none. */
static void test_retry_budget(void **state)
{
    uint32_t used = 0;

    (void)state;
    for (int i = 0; i < 3; i++)
        assert_int_equal(fedi_node_retry_take(NULL, NULL, &used, 3), 1);
    assert_int_equal(used, 3);
    assert_int_equal(fedi_node_retry_take(NULL, NULL, &used, 3), 0);
    assert_int_equal(fedi_node_retry_take(NULL, NULL, &used, 3), 0);
    assert_int_equal(used, 3);
    used = 0;
    assert_int_equal(fedi_node_retry_take(NULL, NULL, &used, 0), 0);
    assert_int_equal(used, 0);
}

/* An aggregator whose lr is left at its default (0, as fednode run and
 * fedsim leave it without --lr) sends its optimizer's own rate in the
 * round's settings: with Adam every client trains at 0.002, not SGD's 0.05;
 * with SGD at 0.05; a rate that was set wins. */
static void test_default_lr(void **state)
{
    const fixture *fx = *state;
    static const struct {
        int adam;
        float lr, want;
    } cases[] = {{1, 0, 0.002f}, {0, 0, 0.05f}, {1, 0.01f, 0.01f}};

    fed_test_need_fashion(fx->train != NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        scen_opts o = {.clients = 2, .spec = "logreg", .per_client = 60, .rounds = 1,
                       .min_clients = 2, .deadline_ms = 60000, .seed = 5,
                       .adam = cases[i].adam, .lr = cases[i].lr};
        scen s;

        scen_build(&s, fx, &o);
        scen_run(&s, 600000);
        assert_int_equal(s.commits[1], 1);
        assert_true(s.info[1].lr == cases[i].want);    /* what the MODEL asked for */
        assert_true(s.client_lr[1] == cases[i].want);  /* what a client trained at */
        scen_free(&s);
    }
}

static void train_with_local(scen *s, int c, uint64_t round, const float *g, const float *local,
                             size_t local_n, float lr, float *out);

/* The delta client c would send for a round trained at lr from global g:
 * train_with_local without local tensors. */
static void train_as_client(const scen *s, int c, uint64_t round, const float *g, float lr,
                            float *out)
{
    train_with_local((scen *)s, c, round, g, NULL, 0, lr, out);
}

static int client_of(const scen *s, const uint8_t key[32])
{
    for (int c = 0; c < s->ncl; c++)
        if (!memcmp(key, fed_sim_host_id(s->cl[c])->key, 32))
            return c;
    fail_msg("a delta from no client");
    return -1;
}

/* Every delta merged into round r is, bit for bit, its client's training
 * of the model of the round it was trained on (b) at want[b]: the rate that
 * round's MODEL carried. Trained at another rate it would differ. */
static void expect_trained_at(const scen *s, int r, const float *want)
{
    float *got = malloc(s->nparams * sizeof(float));

    assert_non_null(got);
    for (int k = 0; k < s->ndeltas[r]; k++) {
        const delta_rec *d = &s->deltas[r][k];
        int c = client_of(s, d->key);

        train_as_client(s, c, d->base, s->params[d->base - 1], want[d->base], got);
        assert_memory_equal(got, d->delta, s->nparams * sizeof(float));
        train_as_client(s, c, d->base, s->params[d->base - 1], want[d->base] * 0.5f, got);
        assert_memory_not_equal(got, d->delta, s->nparams * sizeof(float));
    }
    free(got);
}

/* The rate of each round, as the schedule says (node/node.h's lr_schedule,
 * lr_warmup), in the round's MODEL: with cosine over 4 rounds after 1 round
 * of warm-up from 0.1, rounds 1..4 train at 0.05, 0.1, 0.075 and 0.025
 * (0.1 (1 + cos(pi k / 3)) / 2 for k = 0, 1, 2 after the warm-up). The
 * aggregator reports and records (its rounds table) each round's rate,
 * every client reports and records the same, and every merged delta is that
 * client's training at exactly that rate. FedBuff (async) counts merges:
 * step:1,0.5 halves the rate at each merge, and a stale delta was trained
 * at the rate of the round it started from. */
static void test_lr_schedule(void **state)
{
    const fixture *fx = *state;
    static const float want_sync[5] = {0, 0.05f, 0.1f, 0.075f, 0.025f};
    static const float want_async[7] = {0, 0.1f, 0.05f, 0.025f, 0.0125f, 0.00625f, 0.003125f};
    scen_opts o = {.clients = 3, .spec = "logreg", .per_client = 60, .rounds = 4,
                   .min_clients = 3, .deadline_ms = 60000, .seed = 13, .lr = 0.1f,
                   .lr_schedule = "cosine", .lr_warmup = 1};
    scen s;
    int stale = 0;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    capture_initial(&s);
    scen_run(&s, 600000);
    for (int r = 1; r <= 4; r++) {
        fed_store_round row;

        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.ndeltas[r], 3);
        if (fabsf(s.info[r].lr - want_sync[r]) > 1e-8f || fabsf(s.client_lr[r] - want_sync[r]) > 1e-8f)
            fail_msg("round %d: aggregator %.9f, client %.9f, wanted %.9f", r,
                     (double)s.info[r].lr, (double)s.client_lr[r], (double)want_sync[r]);
        assert_int_equal(fed_store_get_round(fed_sim_host_store(s.agg), (uint64_t)r, &row), FED_OK);
        assert_true(row.lr == (double)s.info[r].lr);
        for (int c = 0; c < s.ncl; c++) {
            assert_int_equal(fed_store_get_round(fed_sim_host_store(s.cl[c]), (uint64_t)r, &row),
                             FED_OK);
            assert_true(row.lr == (double)s.info[r].lr);
        }
    }
    /* each merged delta trained at the round's rate, from the round's model */
    {
        float want[5];

        for (int r = 0; r <= 4; r++)
            want[r] = s.info[r].lr;
        for (int r = 1; r <= 4; r++)
            expect_trained_at(&s, r, want);
    }
    scen_free(&s);

    /* async: the rate of merge r, halved each merge */
    {
        scen_opts a = {.clients = 3, .spec = "logreg", .per_client = 300, .uneven = 1,
                       .rounds = 6, .min_clients = 1, .deadline_ms = 600000, .seed = 21,
                       .async_k = 2, .lr = 0.1f, .lr_schedule = "step:1,0.5"};

        scen_build(&s, fx, &a);
        capture_initial(&s);
        scen_run(&s, 600000);
        for (int r = 1; r <= 6; r++) {
            assert_int_equal(s.commits[r], 1);
            assert_true(fabsf(s.info[r].lr - want_async[r]) <= 1e-9f);
            if (s.client_lr[r] != 0) /* a round some client was sent */
                assert_true(s.client_lr[r] == s.info[r].lr);
            expect_trained_at(&s, r, want_async);
            for (int k = 0; k < s.ndeltas[r]; k++)
                stale += s.deltas[r][k].base < (uint64_t)r;
        }
        printf("async: %d stale deltas, each trained at its own round's rate\n", stale);
        assert_true(stale > 0);
        scen_free(&s);
    }
}

/* ---- a timer the environment cannot arm ---- */

static int timer_refusals;

static int refuse_timer(void *self, uint64_t at_ms, uint32_t timer_id)
{
    (void)self;
    (void)at_ms;
    (void)timer_id;
    timer_refusals++;
    return FED_ERR_FULL;
}

/* set_timer fails (as the daemon's table would, full) once the nodes are
 * up: for the aggregator, arming the poll timer for the first client's
 * held HELLO; for a client, arming its retry once its delta is out. The
 * failure is not lost: an ERROR names the timer, the node reports itself
 * failed with set_timer's error, and no round is committed on a lost
 * timer. */
static void test_timer_refused(void **state)
{
    const fixture *fx = *state;
    static const struct {
        int client; /* the client's set_timer fails, else the aggregator's */
        const char *name;
    } cases[] = {{0, "the poll timer"}, {1, "the retry timer"}};

    fed_test_need_fashion(fx->train != NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        scen_opts o = {.clients = 2, .spec = "logreg", .per_client = 60, .rounds = 2,
                       .min_clients = 2, .wait_clients = 3, .deadline_ms = 60000, .seed = 9};
        fed_log_level level = fed_log_get_level();
        fed_node *a, *c, *victim;
        scen s;

        scen_build(&s, fx, &o);
        assert_int_equal(fed_sim_world_run_until(s.w, 0), FED_OK); /* every node up */
        a = fed_sim_host_node(s.agg);
        c = fed_sim_host_node(s.cl[0]);
        assert_non_null(a);
        assert_non_null(c);
        assert_int_equal(fed_node_failed(a), FED_OK);
        victim = cases[i].client ? c : a;
        victim->env.set_timer = refuse_timer;
        timer_refusals = 0;
        fed_test_log_capture(FED_LOG_ERROR);
        fed_log_set_level(FED_LOG_ERROR);
        assert_int_equal(fed_sim_world_run_until(s.w, 30000), FED_OK);
        fed_log_set_level(level);
        printf("%s refused: %s\n", cases[i].client ? "client" : "aggregator",
               fed_test_log_text());
        assert_true(timer_refusals > 0);
        assert_int_equal(fed_node_failed(victim), FED_ERR_FULL);
        assert_int_equal(fed_node_failed(cases[i].client ? a : c), FED_OK);
        assert_true(fed_test_log_count(cases[i].name, "could not be armed") >= 1);
        fed_test_log_default();
        if (!cases[i].client)
            assert_int_equal(s.commits[1], 0); /* round 1 never started */
        scen_free(&s);
    }
}

static void test_determinism(void **state)
{
    const fixture *fx = *state;
    uint8_t h1[32], h2[32];
    uint64_t t1, t2;

    fed_test_need_fashion(fx->train != NULL);
    run_for_hash(fx, h1, &t1);
    run_for_hash(fx, h2, &t2);
    assert_memory_equal(h1, h2, 32);
    assert_true(t1 == t2);
}

/* ---- the model sections of a checkpoint ---- */

/* A loaded checkpoint holding n sections (as fed_store_ckpt_find sees it). */
static void ckpt_of(fed_store_ckpt *c, const fed_store_section *s, size_t n)
{
    memset(c, 0, sizeof *c);
    c->id = 7;
    c->nsections = n;
    memcpy(c->sections, s, n * sizeof *s);
}

static void test_ckpt_model_sections(void **state)
{
    static const uint8_t input[16] = {1, 0, 0, 0, 28, 0, 0, 0, 28, 0, 0, 0, 10, 0, 0, 0};
    fed_model_shape shape = {.c = 1, .h = 28, .w = 28, .classes = 10}, other = shape;
    float host[5] = {1.5f, -0.0f, 3e-39f, -2.25f, 1e30f}, back[5];
    uint8_t le[20], bad_in[16], *pl = NULL;
    char longspec[FED_MODEL_SPEC_MAX + 1];
    fed_node_model_sec ms;
    fed_node_model_view v;
    fed_store_section s[3];
    fed_store_ckpt c;
    fed_backend *be = NULL;
    fed_model *m = NULL;
    size_t plen = 0;

    (void)state;
    /* round trip: the sections every writer puts first, in their order */
    fed_put_f32le_n(le, host, 5);
    fed_node_model_sec_encode(&ms, "mlp:4", shape, le, 5);
    assert_string_equal(ms.s[0].name, FED_CKPT_SEC_SPEC);
    assert_int_equal(ms.s[0].len, 5);
    assert_memory_equal(ms.s[0].data, "mlp:4", 5);
    assert_string_equal(ms.s[1].name, FED_CKPT_SEC_INPUT);
    assert_int_equal(ms.s[1].len, 16);
    assert_memory_equal(ms.s[1].data, input, 16);
    assert_string_equal(ms.s[2].name, FED_CKPT_SEC_PARAMS);
    assert_ptr_equal(ms.s[2].data, le);
    assert_int_equal(ms.s[2].len, 20);
    ckpt_of(&c, ms.s, 3);
    assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_OK);
    assert_string_equal(v.spec, "mlp:4");
    assert_memory_equal(&v.shape, &shape, sizeof shape);
    assert_int_equal(v.nparams, 5);
    fed_get_f32le_n(back, v.params, v.nparams);
    assert_memory_equal(back, host, sizeof host);
    assert_int_equal(fed_node_model_view_match(&v, "test", c.id, "mlp:4", shape, 5), FED_OK);
    /* ... against another model */
    assert_int_equal(fed_node_model_view_match(&v, "test", c.id, "mlp:8", shape, 5),
                     FED_ERR_SPEC);
    other.classes = 5;
    assert_int_equal(fed_node_model_view_match(&v, "test", c.id, "mlp:4", other, 5),
                     FED_ERR_SHAPE);
    assert_int_equal(fed_node_model_view_match(&v, "test", c.id, "mlp:4", shape, 6),
                     FED_ERR_SHAPE);
    /* --input-scale unit: a fifth word, read back, and a model of the other
       scale refused; 20 bytes saying centred, or an unknown scale, refused */
    {
        fed_model_shape unit = shape;
        fed_node_model_sec mu;
        uint8_t in20[20];

        unit.scale = FED_MODEL_INPUT_UNIT;
        fed_node_model_sec_encode(&mu, "mlp:4", unit, le, 5);
        assert_int_equal(mu.s[1].len, 20);
        assert_memory_equal(mu.s[1].data, input, 16);
        assert_int_equal(fed_get_u32le((const uint8_t *)mu.s[1].data + 16), 1);
        ckpt_of(&c, mu.s, 3);
        assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_OK);
        assert_memory_equal(&v.shape, &unit, sizeof unit);
        assert_int_equal(fed_node_model_view_match(&v, "test", c.id, "mlp:4", unit, 5), FED_OK);
        assert_int_equal(fed_node_model_view_match(&v, "test", c.id, "mlp:4", shape, 5),
                         FED_ERR_SHAPE);
        memcpy(s, mu.s, sizeof s);
        for (uint32_t bad = 0; bad < 3; bad += 2) {
            memcpy(in20, mu.s[1].data, 20);
            fed_put_u32le(in20 + 16, bad);
            s[1].data = in20;
            ckpt_of(&c, s, 3);
            assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_ERR_FORMAT);
        }
        ckpt_of(&c, ms.s, 3);
        assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_OK);
    }

    /* malformed sections, one at a time */
    memcpy(s, ms.s, sizeof s);
    ckpt_of(&c, s, 2); /* no params */
    assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_ERR_NOTFOUND);
    assert_null(v.params);
    s[0].len = 0; /* empty spec */
    ckpt_of(&c, s, 3);
    assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_ERR_FORMAT);
    s[0].data = "mlp\0:4"; /* a NUL inside */
    s[0].len = 6;
    ckpt_of(&c, s, 3);
    assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_ERR_FORMAT);
    memset(longspec, 'a', sizeof longspec);
    s[0].data = longspec; /* FED_MODEL_SPEC_MAX bytes leave no room for the NUL */
    s[0].len = FED_MODEL_SPEC_MAX;
    ckpt_of(&c, s, 3);
    assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_ERR_FORMAT);
    s[0].len = FED_MODEL_SPEC_MAX - 1; /* the longest that fits */
    ckpt_of(&c, s, 3);
    assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_OK);
    assert_int_equal(strlen(v.spec), FED_MODEL_SPEC_MAX - 1);
    assert_null(v.graph);
    /* a "g:" graph past FED_MODEL_SPEC_MAX: carried whole, named by its id */
    {
        static char graph[FED_MODEL_GRAPH_MAX + 1];
        char id[FED_MODEL_SPEC_MAX], *whole = NULL;

        strcpy(graph, "g:");
        for (int i = 0; i < 40; i++)
            strcat(graph, "L7,R,");
        strcat(graph, "L");
        fed_model_spec_id(graph, id);
        s[0].data = graph;
        s[0].len = strlen(graph);
        ckpt_of(&c, s, 3);
        assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_OK);
        assert_string_equal(v.spec, id);
        assert_ptr_equal(v.graph, graph);
        assert_int_equal(v.graph_len, strlen(graph));
        assert_int_equal(fed_node_model_view_whole(&v, &whole), FED_OK);
        assert_string_equal(whole, graph);
        fed_free(whole);
        assert_int_equal(fed_node_model_view_match(&v, "test", c.id, id, shape, 5), FED_OK);
        memset(graph + 2, 'R', sizeof graph - 3); /* FED_MODEL_GRAPH_MAX bytes: too long */
        s[0].len = FED_MODEL_GRAPH_MAX;
        ckpt_of(&c, s, 3);
        assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_ERR_FORMAT);
        s[0].len = FED_MODEL_GRAPH_MAX - 1; /* the longest graph */
        ckpt_of(&c, s, 3);
        assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_OK);
    }
    s[0] = ms.s[0];
    s[1].len = 15; /* input cut short */
    ckpt_of(&c, s, 3);
    assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_ERR_FORMAT);
    memcpy(bad_in, input, 16);
    fed_put_u32le(bad_in + 12, 0x80000000u); /* no int holds it */
    s[1].data = bad_in;
    s[1].len = 16;
    ckpt_of(&c, s, 3);
    assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_ERR_SHAPE);
    s[1] = ms.s[1];
    s[2].len = 19; /* not whole floats */
    ckpt_of(&c, s, 3);
    assert_int_equal(fed_node_model_sec_decode(&c, &v), FED_ERR_FORMAT);

    /* a model's parameters in the params section's form */
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    assert_int_equal(fed_model_new("logreg", shape, be, NULL, 1, 1, &m), FED_OK);
    assert_int_equal(fed_node_model_params_le(m, &pl, &plen), FED_OK);
    assert_int_equal(plen, fed_model_nparams(m) * sizeof(float));
    {
        float *p = fed_malloc(plen), *q = fed_malloc(plen);

        assert_non_null(p);
        assert_non_null(q);
        assert_int_equal(fed_model_get_params(m, p), FED_OK);
        fed_get_f32le_n(q, pl, plen / sizeof(float));
        assert_memory_equal(p, q, plen);
        fed_free(p);
        fed_free(q);
    }
    fed_free(pl);
    fed_model_free(m);
    fed_backend_free(be);
}

/* ---- tensors on their own paths (node/layout.h) ---- */

/* The layout every node of s computes: its model's tensors, o.stats
 * marked, under the aggregator's --local-layers. */
static void scen_layout(const scen *s, fed_node_layout *l)
{
    layout_rules r = {.local_layers = s->o.local_layers,
                      .local_bn = s->o.local_bn || s->o.dp_fedavg_clip > 0, /* DP: they stay */
                      .stats_local = s->o.dp_fedavg_clip > 0};
    const fed_tensor_info *t;
    fed_model *m = NULL;
    int nt;

    assert_int_equal(fed_model_new(s->o.spec, s->fx->train->shape, s->fx->be, NULL, 1, 8, &m),
                     FED_OK);
    if (s->o.stats)
        mark_stats((void *)s, m);
    t = fed_model_tensors(m, &nt);
    assert_int_equal(fed_node_layout_of(t, nt, s->nparams, &r, l), FED_OK);
    fed_model_free(m);
}

/* Round r's global, float by float on its path, from the deltas the
 * aggregator took (key order, weights their samples): a statistic is
 * x + (float)(sum w_i d_i / W), its segment's rule, whatever the strategy;
 * a local float stays as it was (the aggregator keeps its own); with
 * fedavg a trained float is x + (float)(sum (w_i / W) d_i), as
 * expect_fedavg. Returns how many trained floats differ from that. */
static size_t expect_paths(scen *s, int r, const fed_node_layout *l)
{
    delta_rec *d = s->deltas[r];
    int k = s->ndeltas[r];
    double W = 0;
    size_t off = 0;

    qsort(d, (size_t)k, sizeof *d, key_cmp);
    for (int i = 0; i < k; i++)
        W += (double)d[i].samples;
    for (size_t u = 0; u < l->nruns; u++) {
        const layout_run *run = &l->runs[u];

        for (size_t j = run->off; j < run->off + run->len; j++) {
            double acc = 0, mean = 0;

            for (int i = 0; i < k; i++) {
                acc = i == 0 ? ((double)d[i].samples / W) * (double)d[i].delta[j]
                             : acc + ((double)d[i].samples / W) * (double)d[i].delta[j];
                mean += (double)d[i].samples * (double)d[i].delta[j];
            }
            if (run->path == LAYOUT_LOCAL)
                assert_true(s->params[r][j] == s->params[r - 1][j]);
            else if (run->path == LAYOUT_STATS)
                assert_true(s->params[r][j] == s->params[r - 1][j] + (float)(mean / W));
            else
                off += s->params[r][j] != s->params[r - 1][j] + (float)acc;
        }
    }
    return off;
}

/* What the unsealed DELTA frames carried: their vectors' floats and
 * segments, against what the layout says leaves a site. */
typedef struct delta_frames {
    const fed_node_layout *l;
    size_t nparams;
    int seen, bad;
} delta_frames;

static int look_at_deltas(void *ctx, uint32_t node, const uint8_t *frame, size_t len)
{
    delta_frames *f = ctx;
    agg_segment segs[AGG_SEGMENTS_MAX];
    size_t nseg = fed_node_layout_segments(f->l, 0, 0, segs), used = 0;
    size_t sent = fed_node_layout_sent(f->l);
    fed_wire_hdr h;
    fed_wire_block b;
    float *v = malloc(f->nparams * sizeof *v);

    (void)node;
    assert_non_null(v);
    if (fed_wire_hdr_decode(frame, len, &h) != FED_OK || h.type != FED_WIRE_DELTA) {
        free(v);
        return 0;
    }
    memset(&b, 0, sizeof b);
    f->seen++;
    if (fed_wire_block_decode(FED_WIRE_DELTA, frame + FED_WIRE_HEADER_BYTES, h.payload_len, &b,
                              &used) != FED_OK ||
        b.seg_count != nseg || b.seg_len[0] != segs[0].len ||
        (nseg > 1 && b.seg_len[1] != segs[1].len) ||
        /* exactly the sent floats: one more (a local one) would not decode */
        fed_codec_decode(frame + FED_WIRE_HEADER_BYTES + used, h.payload_len - used,
                         FED_CODEC_F32, v, sent) != FED_OK ||
        (sent < f->nparams &&
         fed_codec_decode(frame + FED_WIRE_HEADER_BYTES + used, h.payload_len - used,
                          FED_CODEC_F32, v, f->nparams) == FED_OK))
        f->bad++;
    free(v);
    return 0;
}

/* A scenario of o with its layout in *l, its DELTA frames watched by f,
 * the initial global captured; the layout's statistics and local floats
 * as the test expects. */
static void paths_scen(scen *s, const fixture *fx, const scen_opts *o, fed_node_layout *l,
                       delta_frames *f, size_t stats, size_t local)
{
    scen_build(s, fx, o);
    scen_layout(s, l);
    assert_int_equal(l->len[LAYOUT_STATS], stats);
    assert_int_equal(l->len[LAYOUT_LOCAL], local);
    memset(f, 0, sizeof *f);
    f->l = l;
    f->nparams = s->nparams;
    fed_sim_world_set_send_filter(s->w, look_at_deltas, f);
    capture_initial(s);
}

/* Two rounds of o (3 clients, FedAdam) whose layout has stats statistics
 * and local floats kept: each DELTA says its segments, and each round's
 * statistics are their plain sample-weighted mean added to the global,
 * exactly, while the weights go through FedAdam (not that mean). The
 * scenario is left in s, its layout in l, for the caller to free. */
static void stats_under_fedadam(scen *s, const fixture *fx, const scen_opts *o,
                                fed_node_layout *l, size_t stats, size_t local)
{
    delta_frames f;

    paths_scen(s, fx, o, l, &f, stats, local);
    scen_run(s, 600000);
    assert_int_equal(f.seen, 6);
    assert_int_equal(f.bad, 0);
    for (int r = 1; r <= 2; r++) {
        assert_int_equal(s->commits[r], 1);
        assert_int_equal(s->ndeltas[r], 3);
        /* FedAdam moved the weights, not by the plain mean */
        assert_true(expect_paths(s, r, l) > 1000);
    }
}

/* Non-trained statistics (0.bias of mlp:16, marked as a norm layer's
 * running mean) under FedAdam. */
static void test_stats_own_segment(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "mlp:16", .per_client = 100, .uneven = 1, .rounds = 2,
                   .min_clients = 3, .deadline_ms = 60000, .seed = 21, .stats = "0.bias",
                   .strategy = "fedadam", .unsealed = 1};
    fed_node_layout l;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    stats_under_fedadam(&s, fx, &o, &l, 16, 0);
    fed_node_layout_fini(&l);
    scen_free(&s);
}

/* DP-FedAvg: the statistics carry no noise, so they stay at the sites
 * (--local-bn implied, and said): no DELTA frame holds 0.bias, and the
 * aggregator's own 0.bias stays as it was, the noise it adds to every
 * float notwithstanding. */
static void test_dp_statistics_stay(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "mlp:16", .per_client = 100, .rounds = 2,
                   .min_clients = 3, .deadline_ms = 60000, .seed = 25, .stats = "0.bias",
                   .unsealed = 1, .dp_fedavg_clip = 5};
    fed_node_layout l;
    delta_frames f;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    fed_test_log_capture(FED_LOG_INFO);
    paths_scen(&s, fx, &o, &l, &f, 0, 16);
    fed_test_log_has("stay at the sites (--local-bn implied)");
    scen_run(&s, 600000);
    fed_test_log_default();
    assert_int_equal(f.seen, 6);
    assert_int_equal(f.bad, 0);
    for (int r = 1; r <= 2; r++) {
        assert_int_equal(s.commits[r], 1);
        (void)expect_paths(&s, r, &l); /* the local floats as they were */
    }
    fed_node_layout_fini(&l);
    scen_free(&s);
}

/* A delta whose segments are not the aggregator's layout (here its clients
 * do not mark the statistics it marks, so they send the whole buffer
 * without a segments field) is refused and recorded (FED_ERR_SEGMENTS),
 * never merged. */
static void test_segments_mismatch_refused(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 2, .spec = "mlp:16", .per_client = 100, .rounds = 1,
                   .min_clients = 2, .deadline_ms = 5000, .seed = 5, .stats = "0.bias",
                   .stats_agg_only = 1};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    fed_test_log_capture(FED_LOG_WARN);
    scen_build(&s, fx, &o);
    scen_run(&s, 20000);
    fed_test_log_has("not this round's tensor layout");
    fed_test_log_default();
    assert_int_equal(s.commits[1], 0);
    assert_int_equal(s.ndeltas[1], 0);
    for (int c = 0; c < 2; c++)
        assert_non_null(strstr(contribution(&s, 1, s.cl[c]).reason, "SEGMENTS"));
    scen_free(&s);
}

/* A DP-SGD site whose aggregator would take the model's statistics (they
 * carry no noise) declines each round (LEAVE FED_ERR_DP_STATS, recorded)
 * and sends nothing; the rounds merge the three others. */
static void test_dp_sgd_statistics_declined(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "mlp:16", .per_client = 100, .rounds = 2,
                   .min_clients = 3, .deadline_ms = 600000, .seed = 5, .dp_client = 2,
                   .stats = "0.bias"};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    fed_test_log_capture(FED_LOG_WARN);
    run_declines(&s, fx, &o, 0);
    fed_test_log_has("non-trained statistics would leave the site without noise");
    fed_test_log_default();
    for (uint64_t r = 1; r <= 2; r++) {
        contrib_q q = contribution(&s, r, s.cl[1]);

        assert_int_equal(q.accepted, 0);
        assert_non_null(strstr(q.reason, "DP_STATS"));
        assert_false(delta_from(&s, (int)r, s.cl[1]));
    }
    scen_free(&s);
}

/* The aggregator decides which tensors stay: a client whose own
 * --local-layers says otherwise declines round 1 at once (LEAVE
 * FED_ERR_LOCAL_MISMATCH, recorded, said at warning level) and is parked:
 * it is drawn for no later round (asking again would change nothing), and
 * the rounds merge the three others. */
static void test_local_layers_mismatch(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "mlp:16", .per_client = 100, .rounds = 2,
                   .min_clients = 3, .deadline_ms = 600000, .seed = 5, .odd_client = 3,
                   .local_layers = "2.*", .odd_local = "0.*"};
    contrib_q q;
    scen s;

    fed_sim_link late = {.latency_ms = 30000, .bytes_per_ms = 100000};
    const fed_wire_counters *wc;

    fed_test_need_fashion(fx->train != NULL);
    fed_test_log_capture(FED_LOG_WARN);
    scen_build(&s, fx, &o);
    /* client 1 answers 30 s late, so the rounds last: the parked client's
       asks are held a poll (5 s) each and answered with why */
    assert_int_equal(fed_sim_world_set_link(s.w, fed_sim_host_index(s.cl[1]),
                                            fed_sim_host_index(s.agg), &late),
                     FED_OK);
    scen_run(&s, 1200000);
    for (uint32_t r = 1; r <= o.rounds; r++)
        assert_int_equal(s.info[r].merged, o.min_clients);
    fed_test_log_has("the aggregator keeps local --local-layers '2.*', this client '0.*'");
    fed_test_log_has("(FED_ERR_LOCAL_MISMATCH); it takes part in no round until it restarts");
    fed_test_log_has("client: the aggregator leaves this client out of its rounds "
                     "(FED_ERR_LOCAL_MISMATCH: ");
    fed_test_log_default();
    /* about one ask a poll over the minutes the rounds take, not one a
       message's round trip */
    wc = fed_node_wire_counters(fed_sim_host_node(s.cl[2]));
    printf("parked client: %llu frames opened in %.0f s\n", (unsigned long long)wc->opened,
           (double)fed_sim_world_now_us(s.w) / 1e6);
    assert_in_range(wc->opened, 1, fed_sim_world_now_us(s.w) / 5000000 + 10);
    q = contribution(&s, 1, s.cl[2]);
    assert_int_equal(q.accepted, 0);
    assert_non_null(strstr(q.reason, "LOCAL_MISMATCH"));
    q = contribution(&s, 2, s.cl[2]);
    assert_int_equal(q.accepted, -1); /* parked: not drawn */
    assert_false(delta_from(&s, 2, s.cl[2]));
    scen_free(&s);
}

/* The same mismatch where the federation needs every client (min_clients
 * 4 of 4): once the odd client is parked too few can take part, and the
 * run stops with FED_ERR_TOO_FEW_CLIENTS rather than starting round 1
 * again at each deadline, forever. */
static void test_local_layers_mismatch_stops(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 4, .spec = "mlp:16", .per_client = 100, .rounds = 2,
                   .min_clients = 4, .deadline_ms = 20000, .seed = 5, .odd_client = 3,
                   .local_layers = "2.*", .odd_local = "0.*"};
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    fed_test_log_capture(FED_LOG_ERROR);
    scen_build(&s, fx, &o);
    scen_run(&s, 600000);
    fed_test_log_has("only 3 clients can still take part (1 declined for settings that differ "
                     "from the aggregator's), fewer than --min-clients 4: stopping the run");
    fed_test_log_default();
    assert_int_equal(fed_node_failed(fed_sim_host_node(s.agg)), FED_ERR_TOO_FEW_CLIENTS);
    assert_int_equal(s.commits[1], 0);
    scen_free(&s);
}

/* The delta client c sends for round trained at lr from global g with its
 * local tensors local (NULL: the MODEL's), under s's paths: its own
 * training job (its shuffle seed: the config's seed and the key's low 6
 * bytes), the sent floats unpacked into out (zero on local ones). */
static void train_with_local(scen *s, int c, uint64_t round, const float *g, const float *local,
                             size_t local_n, float lr, float *out)
{
    const uint8_t *k = fed_sim_host_id(s->cl[c])->key;
    node_train_job j;
    fed_node_layout l;
    float *sent = malloc(s->nparams * sizeof *sent);

    assert_non_null(sent);
    memset(&j, 0, sizeof j);
    snprintf(j.set.spec, sizeof j.set.spec, "%s", s->o.spec);
    j.set.local_epochs = 1;
    j.set.batch = 64;
    j.set.optimizer = FED_OPTIM_SGD;
    j.set.lr = lr;
    j.set.momentum = 0.9f;
    j.set.paths_on = 1;
    j.set.paths_flags = s->o.local_bn ? FED_WIRE_PATHS_LOCAL_BN : 0;
    snprintf(j.set.local_layers, sizeof j.set.local_layers, "%s",
             s->o.local_layers ? s->o.local_layers : "");
    j.round = round;
    j.seed = s->o.seed ^ ((uint64_t)k[0] | (uint64_t)k[1] << 8 | (uint64_t)k[2] << 16 |
                          (uint64_t)k[3] << 24 | (uint64_t)k[4] << 32 | (uint64_t)k[5] << 40);
    j.be = s->fx->be;
    j.shards = 1;
    j.data = s->fx->train;
    j.shard = s->idx[c];
    j.shard_n = s->nidx[c];
    j.global = g;
    j.nparams = s->nparams;
    j.local = local;
    j.local_n = local_n;
    j.hooks = s->o.stats ? &s->hooks : NULL;
    j.codec.id = FED_CODEC_F32;
    fedi_node_train_job_run(&j.job);
    assert_int_equal(j.err, FED_OK);
    scen_layout(s, &l);
    assert_int_equal(j.sent_n, fed_node_layout_sent(&l));
    assert_int_equal(fed_codec_decode(j.vec, j.vec_len, FED_CODEC_F32, sent, j.sent_n), FED_OK);
    fed_node_layout_unpack(&l, sent, out);
    fed_node_layout_fini(&l);
    fedi_node_train_job_release(&j);
    free(sent);
}

/* Four rounds of o (fedavg) whose layout has stats statistics and local
 * floats kept at the sites: every DELTA frame lacks the local floats; the
 * aggregator's stay its own; the shared part of each round is plain FedAvg
 * of those tensors, bit for bit; and client 1 keeps its local floats
 * across a crash: the first delta it sends after its restart is its
 * training from its checkpoint's, not from the MODEL's. */
static void local_tensors_stay(const fixture *fx, const scen_opts *op, size_t stats,
                               size_t local)
{
    scen_opts o = *op;
    fed_node_layout l;
    delta_frames f;
    fed_store_ckpt ck;
    const fed_store_section *sec;
    float *kept, *got;
    size_t kept_n;
    uint32_t c1;
    int back = 0;
    scen s;

    paths_scen(&s, fx, &o, &l, &f, stats, local);
    c1 = fed_sim_host_index(s.cl[1]);
    step_until_commit(&s, 1);
    /* client 1's head after round 1, in its checkpoint */
    assert_int_equal(fed_store_latest_valid_checkpoint(fed_sim_host_store(s.cl[1]), &ck, NULL),
                     FED_OK);
    assert_non_null(sec = fed_store_ckpt_find(&ck, FED_CKPT_SEC_LOCAL));
    assert_int_equal(sec->len, 8 + local * sizeof(float));
    assert_int_equal(fed_get_u64le(sec->data), s.nparams);
    kept_n = local;
    kept = malloc(kept_n * sizeof *kept);
    got = malloc(s.nparams * sizeof *got);
    assert_true(kept && got);
    fed_get_f32le_n(kept, (const uint8_t *)sec->data + 8, kept_n);
    fed_store_ckpt_fini(&ck);
    fed_sim_world_crash(s.w, c1);
    assert_int_equal(fed_sim_world_restart_at(s.w, c1, fed_sim_world_now_us(s.w) / 1000 + 3000),
                     FED_OK);
    scen_run(&s, 900000);
    assert_true(f.seen >= 10);
    assert_int_equal(f.bad, 0);
    for (int r = 1; r <= 4; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(expect_paths(&s, r, &l), 0); /* local, statistics and FedAvg exact */
    }
    for (int r = 2; r <= 4 && !back; r++) {
        const delta_rec *d = NULL;

        for (int k = 0; k < s.ndeltas[r]; k++)
            if (!memcmp(s.deltas[r][k].key, fed_sim_host_id(s.cl[1])->key, 32))
                d = &s.deltas[r][k];
        if (!d)
            continue;
        back = r;
        train_with_local(&s, 1, (uint64_t)r, s.params[r - 1], kept, kept_n, s.client_lr[r], got);
        assert_memory_equal(got, d->delta, s.nparams * sizeof *got);
        train_with_local(&s, 1, (uint64_t)r, s.params[r - 1], NULL, 0, s.client_lr[r], got);
        assert_memory_not_equal(got, d->delta, s.nparams * sizeof *got);
    }
    assert_true(back >= 2); /* it came back and was merged */
    free(kept);
    free(got);
    fed_node_layout_fini(&l);
    scen_free(&s);
}

/* --local-layers 2.* (mlp:16's head, FedPer) with 0.bias a statistic: the
 * head's 170 floats stay at the sites, kept across a client's crash. */
static void test_local_layers_stay(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "mlp:16", .per_client = 150, .uneven = 1, .rounds = 4,
                   .min_clients = 2, .deadline_ms = 20000, .seed = 23, .stats = "0.bias",
                   .local_layers = "2.*", .unsealed = 1};

    fed_test_need_fashion(fx->train != NULL);
    local_tensors_stay(fx, &o, 16, 170);
}

/* A model with batch norm (fc1 16, bn, relu, head) and --local-bn (FedBN):
 * bn's weight, bias, running statistics and counter (65 floats) are in no
 * DELTA frame and the aggregator's stay its own; the rest is FedAvg bit
 * for bit; a client keeps its batch norm across a crash: its first delta
 * after the restart is its training from its checkpoint's bn, not the
 * MODEL's. */
static void test_bn_local_bn_stays(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "g:fc1=L16,bn=N,R,head=L", .per_client = 150,
                   .uneven = 1, .rounds = 4, .min_clients = 2, .deadline_ms = 20000, .seed = 23,
                   .local_bn = 1, .unsealed = 1};

    fed_test_need_fashion(fx->train != NULL);
    local_tensors_stay(fx, &o, 0, 4 * 16 + 1);
}

/* A model with batch norm under FedAdam, 3 clients of unequal shards: each
 * DELTA carries bn's running mean and variance (32 floats) as the
 * statistics segment, and each round's are their plain sample-weighted
 * mean added to the global, exactly, while the weights (bn's weight and
 * bias too) go through FedAdam; num_batches_tracked is never sent and the
 * aggregator keeps its own (a counter is not averaged). */
static void test_bn_stats_merged(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "g:fc1=L16,bn=N,R,head=L", .per_client = 100,
                   .uneven = 1, .rounds = 2, .min_clients = 3, .deadline_ms = 60000, .seed = 21,
                   .strategy = "fedadam", .unsealed = 1};
    fed_node_layout l;
    size_t rv = 12544 + 16 + 16 + 16 + 16; /* bn.running_var[0] */
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    stats_under_fedadam(&s, fx, &o, &l, 32, 1);
    for (int r = 1; r <= 2; r++) {
        assert_true(s.params[r][rv] != s.params[r - 1][rv]); /* the statistics moved */
        assert_true(s.params[r][rv + 16] == 0.0f); /* the aggregator's counter */
    }
    fed_node_layout_fini(&l);
    scen_free(&s);
}

/* Ditto: a client keeps its personal model in its checkpoint (with the
 * model's spec and input) and has it back after a crash and a restart,
 * before it trains again; the global rounds go on as without Ditto. */
static void test_ditto_personal_kept(void **state)
{
    const fixture *fx = *state;
    scen_opts o = {.clients = 3, .spec = "mlp:16", .per_client = 150, .rounds = 3,
                   .min_clients = 3, .deadline_ms = 20000, .seed = 29, .ditto_lambda = 0.1f,
                   .unsealed = 1};
    fed_store_ckpt ck;
    const fed_store_section *sec;
    const float *back;
    float *kept;
    uint64_t at;
    uint32_t c1;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    scen_build(&s, fx, &o);
    c1 = fed_sim_host_index(s.cl[1]);
    step_until_commit(&s, 1);
    assert_int_equal(fed_store_latest_valid_checkpoint(fed_sim_host_store(s.cl[1]), &ck, NULL),
                     FED_OK);
    assert_non_null(sec = fed_store_ckpt_find(&ck, FED_CKPT_SEC_PERSONAL));
    assert_int_equal(sec->len, 8 + s.nparams * sizeof(float));
    assert_int_equal(fed_get_u64le(sec->data), s.nparams);
    assert_non_null(fed_store_ckpt_find(&ck, FED_CKPT_SEC_SPEC));
    assert_non_null(fed_store_ckpt_find(&ck, FED_CKPT_SEC_INPUT));
    assert_null(fed_store_ckpt_find(&ck, FED_CKPT_SEC_PARAMS));
    kept = malloc(s.nparams * sizeof *kept);
    assert_non_null(kept);
    fed_get_f32le_n(kept, (const uint8_t *)sec->data + 8, s.nparams);
    assert_memory_equal(fed_node_client_personal(fed_sim_host_node(s.cl[1]), s.nparams), kept,
                        s.nparams * sizeof *kept);
    fed_store_ckpt_fini(&ck);
    /* the personal model is not the global one */
    assert_memory_not_equal(kept, s.params[1], s.nparams * sizeof *kept);
    fed_sim_world_crash(s.w, c1);
    at = fed_sim_world_now_us(s.w) / 1000 + 3000;
    assert_int_equal(fed_sim_world_restart_at(s.w, c1, at), FED_OK);
    assert_int_equal(fed_sim_world_run_until(s.w, at + 1), FED_OK);
    back = fed_node_client_personal(fed_sim_host_node(s.cl[1]), s.nparams);
    assert_non_null(back);
    assert_memory_equal(back, kept, s.nparams * sizeof *kept);
    scen_run(&s, 900000);
    for (int r = 1; r <= 3; r++)
        assert_int_equal(s.commits[r], 1);
    free(kept);
    scen_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fedavg_bit_exact),
        cmocka_unit_test(test_model_mismatch_declined),
        cmocka_unit_test(test_fewer_classes_train),
        cmocka_unit_test(test_model_input_field),
        cmocka_unit_test(test_graph_travels),
        cmocka_unit_test(test_declared_model_mismatch),
        cmocka_unit_test(test_dropped_client),
        cmocka_unit_test(test_straggler_late),
        cmocka_unit_test(test_crash_restart),
        cmocka_unit_test(test_ditto_personal_kept),
        cmocka_unit_test(test_dp_client_charges),
        cmocka_unit_test(test_non_member),
        cmocka_unit_test(test_full_disk_aggregator),
        cmocka_unit_test(test_full_disk_async),
        cmocka_unit_test(test_full_disk_accuracy_kept),
        cmocka_unit_test(test_full_disk_accuracy_at_stop),
        cmocka_unit_test(test_first_round_after_gather),
        cmocka_unit_test(test_waiting_reported),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_default_lr),
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_timer_refused),
        cmocka_unit_test(test_train_job_reuse),
        cmocka_unit_test(test_no_tamper_hook),
        cmocka_unit_test(test_retry_budget),
        cmocka_unit_test(test_async_fedbuff),
        cmocka_unit_test(test_async_due_is_armed_deadline),
        cmocka_unit_test(test_streamed_transfers),
        cmocka_unit_test(test_too_few_members_said),
        cmocka_unit_test(test_silence_said),
        cmocka_unit_test(test_long_wait_sealed_ahead),
        cmocka_unit_test(test_more_than_128_clients),
        cmocka_unit_test(test_streamed_lossy),
        cmocka_unit_test(test_accuracy_10_clients),
        cmocka_unit_test(test_ckpt_model_sections),
        cmocka_unit_test(test_heap_bounds),
        cmocka_unit_test(test_recv_limit_stats_pass),
        cmocka_unit_test(test_stats_own_segment),
        cmocka_unit_test(test_bn_stats_merged),
        cmocka_unit_test(test_bn_local_bn_stays),
        cmocka_unit_test(test_local_layers_stay),
        cmocka_unit_test(test_dp_statistics_stay),
        cmocka_unit_test(test_local_layers_mismatch),
        cmocka_unit_test(test_local_layers_mismatch_stops),
        cmocka_unit_test(test_dp_sgd_statistics_declined),
        cmocka_unit_test(test_segments_mismatch_refused),
        cmocka_unit_test(test_fednova_unequal_steps),
        cmocka_unit_test(test_fednova_equal_is_fedavg),
        cmocka_unit_test(test_scaffold_algorithm1),
        cmocka_unit_test(test_scaffold_restart),
    };

    if (sodium_init() < 0)
        return 1;
    if (getenv("FED_TEST_FILTER")) /* one case of this long binary, by cmocka's pattern */
        cmocka_set_test_filter(getenv("FED_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
