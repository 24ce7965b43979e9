/* test_peer.c - peer mode in the simulated world, real frames sealed and
 * opened: with training off, push-sum over a ring of 16 and random:3 over
 * 64 brings every node's estimate to the exact mean; the sums of x and w
 * stay constant round after round; with 20% of frames lost the running sums
 * still reach the exact mean while plain push-sum does not. With training:
 * 6 peers on IID shards of Fashion-MNIST learn, a peer crashed at round 3
 * resumes from its checkpoint and rejoins, the others go on past it, every
 * peer (the restarted one too) trains each round at the rate the schedule
 * gives that round, and the same seed gives the same models. --mixing
 * allreduce: n = 2..17 on ring, tree, tree:3 and butterfly end a round with
 * the same bits, the exact mean; with 20% loss the same bits as without;
 * trained peers commit the same hash every round; a member killed at each
 * ring step hangs nobody: the survivors agree whom to leave out, redo the
 * round and hold one model, the mean of the survivors (or of all, when it
 * died after its part was in); two members killed on both sides of a live
 * one, at any pair of steps, split nobody; a member whose result differs
 * is caught by the hash check and the round redone without it; a member
 * cut off rejoins; --group-size:
 * the exact mean after ceil(log_G n) rounds, a slow group holds up no
 * other. Skips the training parts without
 * the data. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/pool.h"
#include "core/rng.h"
#include "crypto/allow.h"
#include "gossip/allreduce.h"
#include "model/backend.h"
#include "model/data.h"
#include "node/node.h"
#include "node/test_hooks.h"
#include "sim/host.h"
#include "sim/world.h"
#include "storage/store.h"
#include "tests/support/support.h"

#define MAXN 64
#define DIM 6
#define MAXR 800

typedef struct mesh {
    fed_gossip_entry vouch_entry; /* member 0's entry for the outsider */
    fed_sim_world *w;
    fed_crypto_allow *allow;
    fed_sim_host *h[MAXN];
    int n;
    double init[MAXN][DIM];
    double mean[DIM];
    uint32_t *idx[MAXN];
    size_t nidx[MAXN];
    /* per round, what the observers saw */
    int done[MAXN];                 /* rounds finished by node i */
    double acc[MAXN];               /* its last accuracy */
    int commits[MAXN][16];
    float lr[MAXN][16];             /* the rate node i reported round r at */
    uint8_t hash[MAXN][32];         /* its last round's model hash */
    uint8_t hashes[MAXN][16][32];   /* each round's */
    uint64_t end_ms[MAXN][16];      /* when node i ended round r */
    uint64_t snap_round;            /* the round whose estimates go to snap */
    double snap[MAXN][DIM];
} mesh;

static fed_backend *be;
static fed_pool *pool;
static fed_dataset *train_set, *test_set;

static int setup(void **state)
{
    (void)state;
    if (fed_backend_cpu_new(1, &be) != FED_OK || fed_pool_new(2, &pool) != FED_OK)
        return -1;
    fed_test_fashion_open(&train_set, &test_set); /* the training tests skip without */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fed_data_free(train_set);
    fed_data_free(test_set);
    fed_pool_free(pool);
    fed_backend_free(be);
    return 0;
}

static void on_round(void *ctx, const fed_node *n, const fed_node_round_info *r)
{
    mesh *m = ctx;

    for (int i = 0; i < m->n; i++)
        if (fed_sim_host_node(m->h[i]) == n) {
            m->done[i] = (int)r->round;
            m->acc[i] = r->accuracy;
            memcpy(m->hash[i], r->model_hash, 32);
            if (r->round < 16) {
                memcpy(m->hashes[i][r->round], r->model_hash, 32);
                m->commits[i][r->round]++;
                m->lr[i][r->round] = r->lr;
                m->end_ms[i][r->round] = r->end_ms;
                if (r->round == m->snap_round)
                    assert_int_equal(fed_node_peer_estimate(n, m->snap[i]), FED_OK);
            }
        }
}

typedef struct mesh_opts {
    int n;
    const char *topology, *sync, *mixing;
    double loss;
    uint32_t rounds;
    uint64_t deadline_ms;
    int train;
    const char *spec;
    uint64_t seed;
    uint32_t final_mix;
    int outsider;  /* the last host is not in the allow-list: member 0 vouches for it */
    const char *neighbours; /* static: the lists */
    size_t per_peer;        /* train: samples per peer (0: an IID share of all) */
    int vouch;     /* members take vouched keys */
    const char *lr_schedule; /* train: the rate across rounds; NULL: const */
    uint32_t lr_warmup;
    size_t max_frame;       /* 0: the default */
    uint32_t group_size;    /* allreduce: groups of at most this (0: none) */
    /* allreduce: member tamper_who's result goes through these hooks' ar_tamper
       (NULL: none) */
    const fed_node_test_hooks *hooks;
    int tamper_who;
} mesh_opts;

static void mesh_build(mesh *m, const mesh_opts *o)
{
    fed_sim_config wc;
    fed_rng idrng, vr;
    fed_sim_host *tmp[MAXN];
    const uint8_t *keys[MAXN];

    memset(m, 0, sizeof *m);
    m->n = o->n;
    memset(&wc, 0, sizeof wc);
    wc.seed = o->seed;
    wc.link.latency_ms = 5;
    wc.link.jitter_ms = 1;
    wc.link.bytes_per_ms = 100000;
    wc.link.loss = o->loss;
    wc.flops_per_ms = 5e6;
    wc.epoch_base_s = 1700000000;
    wc.pool = pool;
    assert_int_equal(fed_sim_world_new(&wc, &m->w), FED_OK);
    assert_int_equal(fed_crypto_allow_new(&m->allow), FED_OK);
    fed_rng_seed_stream(&idrng, o->seed, 77);
    fed_rng_seed_stream(&vr, o->seed, 78);
    /* hosts in key order, so host i is member i */
    for (int i = 0; i < o->n; i++) {
        assert_int_equal(fed_sim_host_new(&idrng, &tmp[i]), FED_OK);
        keys[i] = fed_sim_host_id(tmp[i])->key;
    }
    for (int i = 0; i < o->n; i++) {
        int rank = 0;

        for (int j = 0; j < o->n; j++)
            rank += memcmp(keys[j], keys[i], 32) < 0;
        m->h[rank] = tmp[i];
    }
    for (int i = 0; i < o->n; i++) {
        char name[16];

        snprintf(name, sizeof name, "peer%d", i);
        if (!o->outsider || i < o->n - 1)
            assert_int_equal(fed_crypto_allow_add(m->allow, name, fed_sim_host_id(m->h[i])->key),
                             FED_OK);
        for (int d = 0; d < DIM; d++) {
            m->init[i][d] = fed_rng_normal(&vr) * 5 + i;
            m->mean[d] += m->init[i][d] / o->n;
        }
    }
    for (int i = 0; i < o->n; i++) {
        fed_node_config c;

        fed_node_config_default(&c);
        c.role = FED_NODE_PEER;
        c.seed = o->seed;
        c.be = be;
        c.allow = m->allow;
        c.rounds = o->rounds;
        c.peer.final_mix = o->final_mix;
        c.deadline_ms = o->deadline_ms;
        snprintf(c.peer.topology, sizeof c.peer.topology, "%s", o->topology);
        snprintf(c.peer.sync, sizeof c.peer.sync, "%s", o->sync ? o->sync : "bsp");
        snprintf(c.peer.mixing, sizeof c.peer.mixing, "%s", o->mixing ? o->mixing : "pushsum");
        c.on_round = on_round;
        c.observer = m;
        c.peer.vouch = o->vouch;
        c.peer.neighbours = o->neighbours;
        c.transfer.wire.max_frame = o->max_frame;
        c.peer.group_size = o->group_size;
        if (i == o->tamper_who)
            c.hooks = o->hooks;
        if (o->outsider && i == 0) /* an hour from the world's clock at 0 */
            assert_int_equal(fed_gossip_entry_sign(fed_sim_host_arena(m->h[0]),
                                                   fed_sim_host_id(m->h[o->n - 1])->key,
                                                   "tcp://sim:1", 1700000000 + 3600,
                                                   &m->vouch_entry),
                             FED_OK);
        if (o->outsider && (i == 0 || i == o->n - 1))
            c.peer.publish = &m->vouch_entry; /* the voucher and the vouched spread it */
        if (o->train) {
            snprintf(c.spec, sizeof c.spec, "%s", o->spec);
            c.shape = train_set->shape;
            c.data.train = train_set;
            assert_int_equal(fed_data_partition(train_set, "iid", i, o->n, o->seed, &m->idx[i],
                                                &m->nidx[i]),
                             FED_OK);
            if (o->per_peer && o->per_peer < m->nidx[i])
                m->nidx[i] = o->per_peer;
            c.data.shard = m->idx[i];
            c.data.shard_n = m->nidx[i];
            c.data.test = test_set;
            if (o->lr_schedule)
                snprintf(c.lr_schedule, sizeof c.lr_schedule, "%s", o->lr_schedule);
            c.lr_warmup = o->lr_warmup;
        } else {
            c.peer.mix_only = 1;
            c.peer.init = m->init[i];
            c.peer.init_dim = DIM;
        }
        assert_int_equal(fed_sim_host_attach(m->h[i], m->w, &c, NULL), FED_OK);
    }
}

static void mesh_free(mesh *m)
{
    fed_sim_world_free(m->w);
    for (int i = 0; i < m->n; i++) {
        fed_sim_host_free(m->h[i]);
        fed_free(m->idx[i]);
    }
    fed_crypto_allow_free(m->allow);
}

static double mesh_error(const mesh *m)
{
    double worst = 0, z[DIM];

    for (int i = 0; i < m->n; i++) {
        assert_int_equal(fed_node_peer_estimate(fed_sim_host_node(m->h[i]), z), FED_OK);
        for (int d = 0; d < DIM; d++)
            worst = fmax(worst, fabs(z[d] - m->mean[d]));
    }
    return worst;
}

static int min_done(const mesh *m)
{
    int lo = INT32_MAX;

    for (int i = 0; i < m->n; i++)
        lo = m->done[i] < lo ? m->done[i] : lo;
    return lo;
}

/* The fewest rounds done among the first four (the members). */
static int min_done4(const mesh *m)
{
    int lo = INT32_MAX;

    for (int i = 0; i < 4; i++)
        lo = m->done[i] < lo ? m->done[i] : lo;
    return lo;
}

/* Run until every node has finished round r (bounded in virtual time). */
static void run_to_round(mesh *m, int r, uint64_t limit_ms)
{
    uint64_t t = fed_sim_world_now_us(m->w) / 1000;

    while (min_done(m) < r && t < limit_ms) {
        t += 50;
        assert_int_equal(fed_sim_world_run_until(m->w, t), FED_OK);
    }
    assert_true(min_done(m) >= r);
}

/* Rounds until every estimate is within tol of the exact mean. */
static int consensus_rounds(const mesh_opts *o, double tol, double *err_out)
{
    mesh m;
    int r;

    mesh_build(&m, o);
    for (r = 1; r <= (int)o->rounds; r++) {
        run_to_round(&m, r, 100000000);
        if (mesh_error(&m) < tol)
            break;
    }
    *err_out = mesh_error(&m);
    mesh_free(&m);
    return r <= (int)o->rounds ? r : 0;
}

static void test_consensus_ring16(void **state)
{
    mesh_opts o = {.n = 16, .topology = "ring", .rounds = MAXR, .deadline_ms = 2000, .seed = 1};
    double err;
    int r;

    (void)state;
    r = consensus_rounds(&o, 1e-9, &err);
    printf("ring of 16 peers (bsp, sealed frames): every estimate within 1e-9 of the mean "
           "after %d rounds\n", r);
    assert_true(r > 0);
}

static void test_consensus_random3_64(void **state)
{
    mesh_opts o = {.n = 64, .topology = "random:3", .rounds = 200, .deadline_ms = 2000,
                   .seed = 2};
    double err;
    int r;

    (void)state;
    r = consensus_rounds(&o, 1e-9, &err);
    printf("random:3 over 64 peers: within 1e-9 after %d rounds\n", r);
    assert_true(r > 0);
}

/* The error's contraction per round on the ring of 16, between rounds 100
 * and 300 (the slowest mode dominates by then), is the second eigenvalue of
 * its mixing matrix, circulant(1/3, 1/3, 1/3), within 10%. */
static void test_ring_contraction(void **state)
{
    mesh_opts o = {.n = 16, .topology = "ring", .rounds = 300, .deadline_ms = 2000, .seed = 8};
    double lambda2 = (1 + 2 * cos(2 * M_PI / 16)) / 3, e100, rate;
    mesh m;

    (void)state;
    mesh_build(&m, &o);
    run_to_round(&m, 100, 100000000);
    e100 = mesh_error(&m);
    run_to_round(&m, 300, 100000000);
    rate = pow(mesh_error(&m) / e100, 1.0 / 200);
    printf("ring of 16 peers: contraction %.5f a round, lambda2 %.5f\n", rate, lambda2);
    assert_true(fabs(rate - lambda2) <= 0.1 * lambda2);
    mesh_free(&m);
}

/* The other consistency models and mixings, and static lists: six training
 * peers finish their rounds and end near one another; asp:T sends fewer
 * shares than bsp. */
static void test_sync_modes_and_mixings(void **state)
{
    struct {
        const char *topology, *sync, *mixing, *neighbours;
    } v[] = {
        {"ring", "bsp", "pushsum", NULL},
        {"ring", "ssp:1", "pushsum", NULL},
        {"ring", "asp:0.3", "pushsum", NULL},
        {"ring", "bap", "pushsum", NULL},
        {"ring", "bsp", "metropolis", NULL},
        {"random:2", "bsp", "pairwise", NULL},
        {"static", "bsp", "pushsum",
         "peer0: peer1 peer3\npeer1: peer2\npeer2: peer0 peer4\npeer3: peer4\npeer4: peer5\n"
         "peer5: peer0\n"},
    };
    uint64_t sealed_bsp = 0;

    (void)state;
    fed_test_need_fashion(train_set != NULL);
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
        mesh_opts o = {.n = 6, .topology = v[k].topology, .sync = v[k].sync,
                       .mixing = v[k].mixing, .neighbours = v[k].neighbours, .rounds = 8,
                       .deadline_ms = 5000, .train = 1, .spec = "logreg", .per_peer = 300,
                       .seed = 9};
        double spread = 0, est[6][DIM];
        uint64_t sealed = 0;
        mesh m;

        mesh_build(&m, &o);
        run_to_round(&m, 8, 100000000);
        for (int i = 0; i < m.n; i++) {
            fed_node *nd = fed_sim_host_node(m.h[i]);
            double *z = malloc(fed_node_peer_dim(nd) * sizeof *z);

            assert_int_equal(m.done[i], 8);
            assert_int_equal(fed_node_peer_estimate(nd, z), FED_OK);
            memcpy(est[i], z, sizeof est[i]); /* the first weights */
            free(z);
            sealed += fed_node_wire_counters(nd)->sealed;
        }
        for (int i = 0; i < m.n; i++)
            for (int d = 0; d < DIM; d++)
                spread = fmax(spread, fabs(est[i][d] - est[0][d]));
        printf("%-9s %-9s %-10s: 8 rounds, %llu frames sealed, estimates within %.3g\n",
               v[k].topology, v[k].sync, v[k].mixing, (unsigned long long)sealed, spread);
        assert_true(spread < 0.05);
        if (k == 0)
            sealed_bsp = sealed;
        if (!strncmp(v[k].sync, "asp", 3))
            assert_true(sealed < sealed_bsp);
        mesh_free(&m);
    }
}

/* Without loss, the sums of x and w over all nodes are the same at the end
 * of every bsp round: runs of R rounds, every share of round R added. */
static void test_mass_constant(void **state)
{
    const uint32_t rounds[] = {1, 2, 3, 5, 8, 13, 21};
    double x[DIM], w;

    (void)state;
    for (size_t k = 0; k < sizeof rounds / sizeof *rounds; k++) {
        mesh_opts o = {.n = 16, .topology = "random:3", .rounds = rounds[k],
                       .deadline_ms = 2000, .seed = 3};
        double xs[DIM] = {0}, x0[DIM] = {0}, ws = 0;
        mesh m;

        mesh_build(&m, &o);
        run_to_round(&m, (int)rounds[k], 100000000);
        for (int i = 0; i < m.n; i++) {
            assert_int_equal(fed_node_peer_mass(fed_sim_host_node(m.h[i]), x, &w), FED_OK);
            ws += w;
            for (int d = 0; d < DIM; d++) {
                xs[d] += x[d];
                x0[d] += m.init[i][d];
            }
        }
        assert_true(fabs(ws - 16.0) < 1e-12);
        for (int d = 0; d < DIM; d++)
            assert_true(fabs(xs[d] - x0[d]) < 1e-12 * (1 + fabs(x0[d])));
        mesh_free(&m);
    }
}

/* 20% of frames lost: bsp rounds end at the deadline when a share is
 * missing, the running sums make it good later and reach the exact mean;
 * plain push-sum loses the mass of every lost frame and ends off. */
static void test_loss_running_sums_vs_plain(void **state)
{
    mesh_opts o = {.n = 16, .topology = "ring", .loss = 0.2, .rounds = MAXR, .deadline_ms = 300,
                   .seed = 4};
    double err_rs, err_plain;
    int r;

    (void)state;
    r = consensus_rounds(&o, 1e-9, &err_rs);
    o.mixing = "plain";
    o.rounds = 300;
    (void)consensus_rounds(&o, 1e-9, &err_plain);
    printf("20%% loss, ring of 16 peers: running sums within 1e-9 after %d rounds; plain "
           "push-sum %.3g off after 300\n", r, err_plain);
    assert_true(r > 0);
    assert_true(err_plain > 1e-3);
}

/* A key outside the allow-list that member 0 vouches for: where the members
 * take vouched keys, its PEERS entry spreads, every member counts it, and
 * all five reach the exact mean of the five starting vectors; where they do
 * not, its frames are refused (counted) and the four agree among themselves. */
static void test_vouched_peer_joins(void **state)
{
    mesh_opts o = {.n = 5, .topology = "ring", .rounds = 300, .deadline_ms = 1000, .seed = 7,
                   .outsider = 1, .vouch = 1};
    double z[DIM], mean4[DIM] = {0}, worst = 0;
    uint64_t refused = 0;
    mesh m;

    (void)state;
    mesh_build(&m, &o);
    run_to_round(&m, 300, 100000000);
    printf("vouched peer: every estimate %.3g from the mean of all five\n", mesh_error(&m));
    assert_true(mesh_error(&m) < 1e-6);
    mesh_free(&m);

    o.vouch = 0;
    o.rounds = 200;
    mesh_build(&m, &o);
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < DIM; d++)
            mean4[d] += m.init[i][d] / 4;
    {
        uint64_t t = 0;

        while (min_done4(&m) < 200 && t < 100000000) {
            t += 50;
            assert_int_equal(fed_sim_world_run_until(m.w, t), FED_OK);
        }
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fed_node_peer_estimate(fed_sim_host_node(m.h[i]), z), FED_OK);
        for (int d = 0; d < DIM; d++)
            worst = fmax(worst, fabs(z[d] - mean4[d]));
        refused += fed_node_wire_counters(fed_sim_host_node(m.h[i]))->rej_unknown_sender;
    }
    printf("vouching off: %llu frames of the outsider refused; the four %.3g from their own "
           "mean\n", (unsigned long long)refused, worst);
    assert_true(refused > 0);
    assert_true(worst < 1e-6);
    mesh_free(&m);
}

/* ---- with training ---- */

static void test_training_crash_rejoin(void **state)
{
    mesh_opts o = {.n = 6, .topology = "random:2", .rounds = 6, .deadline_ms = 30000,
                   .train = 1, .spec = "mlp:64", .seed = 5, .lr_schedule = "step:2,0.5",
                   .lr_warmup = 1};
    /* SGD's 0.05: one round of warm-up at half, then halved every 2 rounds */
    static const float want_lr[7] = {0, 0.025f, 0.05f, 0.05f, 0.025f, 0.025f, 0.0125f};
    mesh m;

    (void)state;
    fed_test_need_fashion(train_set != NULL);
    mesh_build(&m, &o);
    run_to_round(&m, 3, 100000000);
    {
        uint64_t now = fed_sim_world_now_us(m.w) / 1000;

        assert_int_equal(fed_sim_world_crash_at(m.w, fed_sim_host_index(m.h[2]), now), FED_OK);
        assert_int_equal(fed_sim_world_restart_at(m.w, fed_sim_host_index(m.h[2]), now + 5000),
                         FED_OK);
    }
    run_to_round(&m, 6, 100000000);
    for (int i = 0; i < m.n; i++) {
        printf("peer %d: round %d accuracy %.4f\n", i, m.done[i], m.acc[i]);
        assert_int_equal(m.done[i], 6);
        assert_true(m.acc[i] > 0.75);
    }
    assert_int_equal(fed_sim_host_start_failures(m.h[2]), 0);
    for (int r = 1; r <= 3; r++) /* resumed after round 3, not from the start */
        assert_int_equal(m.commits[2][r], 1);
    /* every peer trained each round at the same rate, the one its round
       number gives, the restarted one too; its rows hold it */
    for (int i = 0; i < m.n; i++)
        for (int r = 1; r <= 6; r++) {
            fed_store_round row;

            if (!m.commits[i][r]) /* the restarted peer may skip to its neighbours' round */
                continue;
            if (m.lr[i][r] != want_lr[r])
                fail_msg("peer %d round %d at lr %g, wanted %g", i, r, (double)m.lr[i][r],
                         (double)want_lr[r]);
            assert_int_equal(fed_store_get_round(fed_sim_host_store(m.h[i]), (uint64_t)r, &row),
                             FED_OK);
            assert_true(row.lr == (double)want_lr[r]);
        }
    mesh_free(&m);
}

/* --mixing allreduce, one round with training off: every member's
 * estimate (and model hash) the same bits, equal to the mean of the
 * starting vectors. Returns the estimates in est (n x DIM) and the frames
 * sealed; *lost (may be NULL): frames the network lost. */
static uint64_t allreduce_round(const char *topo, int n, double loss, uint64_t seed,
                                double est[MAXN][DIM], uint64_t *lost)
{
    uint64_t sealed = 0;
    mesh_opts o = {.n = n, .topology = topo, .mixing = "allreduce", .loss = loss, .rounds = 1,
                   .deadline_ms = 2000, .seed = seed};
    fed_sim_counters wc;
    mesh m;

    mesh_build(&m, &o);
    run_to_round(&m, 1, 100000000);
    for (int i = 0; i < n; i++) {
        assert_int_equal(fed_node_peer_estimate(fed_sim_host_node(m.h[i]), est[i]), FED_OK);
        assert_memory_equal(est[i], est[0], sizeof est[0]);
        assert_memory_equal(m.hash[i], m.hash[0], 32);
        for (int d = 0; d < DIM; d++)
            assert_true(fabs(est[i][d] - m.mean[d]) < 1e-12 * (1 + fabs(m.mean[d])));
        sealed += fed_node_wire_counters(fed_sim_host_node(m.h[i]))->sealed;
    }
    fed_sim_world_counters(m.w, &wc);
    if (lost)
        *lost = wc.dropped_loss;
    mesh_free(&m);
    return sealed;
}

/* n = 2..17 peers in the simulator, sealed frames, each all-reduce
 * schedule: one round gives every member the same bits, the exact mean. */
static void test_allreduce_exact(void **state)
{
    static const char *topos[] = {"ring", "tree", "tree:3", "butterfly"};
    double est[MAXN][DIM];

    (void)state;
    for (size_t t = 0; t < sizeof topos / sizeof *topos; t++)
        for (int n = 2; n <= 17; n++)
            allreduce_round(topos[t], n, 0, 40 + (uint64_t)n, est, NULL);
}

/* 20% of frames lost: slices are sent again until ACKed, and the round
 * ends with the very bits of the run without loss; the same seed twice
 * gives the same bits. */
static void test_allreduce_loss(void **state)
{
    static const char *topos[] = {"ring", "tree", "butterfly"};
    static const int ns[] = {5, 8, 13};
    double clean[MAXN][DIM], lossy[MAXN][DIM], again[MAXN][DIM];

    (void)state;
    for (size_t t = 0; t < sizeof topos / sizeof *topos; t++)
        for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
            uint64_t lost = 0, f0 = allreduce_round(topos[t], ns[k], 0, 9, clean, NULL);
            uint64_t f1 = allreduce_round(topos[t], ns[k], 0.2, 9, lossy, &lost);

            (void)allreduce_round(topos[t], ns[k], 0.2, 9, again, NULL);
            printf("allreduce %-9s n=%2d: %llu frames sealed, %llu with 20%% loss (%llu lost), "
                   "same bits\n", topos[t], ns[k], (unsigned long long)f0,
                   (unsigned long long)f1, (unsigned long long)lost);
            assert_true(lost > 0); /* frames were lost and sent again */
            assert_memory_equal(lossy, clean, (size_t)ns[k] * sizeof clean[0]);
            assert_memory_equal(again, lossy, (size_t)ns[k] * sizeof clean[0]);
        }
}

/* Training: 6 peers on Fashion-MNIST shards, all-reduce each round on each
 * schedule: every member commits the same model hash every round, and
 * they learn. */
static void test_allreduce_training(void **state)
{
    static const char *topos[] = {"ring", "tree", "butterfly"};

    (void)state;
    fed_test_need_fashion(train_set != NULL);
    for (size_t t = 0; t < sizeof topos / sizeof *topos; t++) {
        mesh_opts o = {.n = 6, .topology = topos[t], .mixing = "allreduce", .rounds = 3,
                       .deadline_ms = 5000, .train = 1, .spec = "logreg", .per_peer = 300,
                       .seed = 9};
        mesh m;

        mesh_build(&m, &o);
        for (int r = 1; r <= 3; r++) {
            run_to_round(&m, r, 100000000);
            for (int i = 0; i < m.n; i++) /* a barrier: nobody two rounds ahead */
                assert_true(m.done[i] == r || m.done[i] == r + 1);
        }
        for (int r = 1; r <= 3; r++)
            for (int i = 0; i < m.n; i++)
                assert_memory_equal(m.hashes[i][r], m.hashes[0][r], 32);
        printf("allreduce %-9s 6 peers trained: round 3 accuracy %.4f on every one\n", topos[t],
               m.acc[0]);
        for (int i = 0; i < m.n; i++)
            assert_true(m.acc[i] == m.acc[0] && m.acc[0] > 0.6);
        mesh_free(&m);
    }
}

/* Trained peers (logreg, 200 samples each, 2 rounds) as o says, with whole
 * frames and then 4 kB frames: each member commits the same hash each round
 * both times (one_model: the very same on every member). Returns how many
 * vectors went as streams. */
static uint64_t chunked_as_whole(int n, const char *topology, const char *mixing, int one_model)
{
    uint8_t whole[MAXN][16][32];
    uint64_t streams = 0;

    for (int k = 0; k < 2; k++) {
        mesh_opts o = {.n = n, .topology = topology, .mixing = mixing, .rounds = 2,
                       .deadline_ms = 5000, .train = 1, .spec = "logreg", .per_peer = 200,
                       .seed = 3, .max_frame = k ? 4096 : 0};
        mesh m;

        mesh_build(&m, &o);
        run_to_round(&m, 2, 100000000);
        for (int i = 0; i < m.n; i++) {
            for (int r = 1; r <= 2; r++)
                assert_memory_equal(m.hashes[i][r],
                                    k ? whole[i][r] : m.hashes[one_model ? 0 : i][r], 32);
            if (k)
                streams += fed_node_wire_counters(fed_sim_host_node(m.h[i]))->streams_done;
        }
        if (!k)
            memcpy(whole, m.hashes, sizeof whole);
        mesh_free(&m);
    }
    return streams;
}

/* Slices larger than a frame go as CHUNK streams: 4 trained peers (logreg,
 * 7,850 parameters: ring slices of about 16 kB) with 4 kB frames commit,
 * round after round, the very hashes of the run with whole frames. */
static void test_allreduce_chunked(void **state)
{
    static const char *topos[] = {"ring", "butterfly"};

    (void)state;
    fed_test_need_fashion(train_set != NULL);
    for (size_t t = 0; t < sizeof topos / sizeof *topos; t++) {
        uint64_t streams = chunked_as_whole(4, topos[t], "allreduce", 1);

        printf("allreduce %-9s 4 peers, 4 kB frames: %llu slices went as streams, the same "
               "hashes as whole frames\n", topos[t], (unsigned long long)streams);
        assert_true(streams > 0);
    }
}

/* Push-sum SHAREs larger than a frame go as CHUNK streams too, one to each
 * out-neighbour at once: trained peers (logreg: SHAREs of 62,816 bytes,
 * two out-neighbours each a round) with 4 kB frames commit the very hashes
 * of the run with whole frames. 5 peers on random:2: every stream borrowed
 * the one encoding buffer, which the next out-neighbour's total overwrote
 * (the first stream's later chunks carried the second's total and failed
 * its digest; in round 1 both totals are equal). 3 peers, full: the ACK of
 * a round's last chunk, come after the next round's stream to that peer
 * began, pushed that stream's chunks out of turn (round 2's broke). (A
 * sender may start its next round before its last stream is through, as
 * with 4 peers on full: the newer total replaces it, the running sums keep
 * the mass, but the hashes are not whole frames'.) */
static void test_pushsum_chunked(void **state)
{
    static const struct {
        int n;
        const char *topology;
    } cases[] = {{5, "random:2"}, {3, "full"}};

    (void)state;
    fed_test_need_fashion(train_set != NULL);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        uint64_t streams = chunked_as_whole(cases[c].n, cases[c].topology, "pushsum", 0);

        printf("pushsum %s, %d peers, 4 kB frames: %llu shares went as streams, the same hashes "
               "as whole frames\n", cases[c].topology, cases[c].n, (unsigned long long)streams);
        assert_int_equal(streams, (uint64_t)cases[c].n * 2 * 2);
    }
}

/* A ring of 5 with member 2 killed at each step of round 1's all-reduce (and
 * a tree and a butterfly of 5)
 * (crash times spread over the round as a run without a crash took it):
 * nobody hangs; the survivors end both rounds within the deadlines the
 * fault rule allows (a stalled attempt, the abort window, the redo), each
 * round with one model hash on all four, and hold the same bits: the mean
 * of the four survivors' vectors when member 2 died before its part was
 * sent, else the mean of all five (it died after). Without loss and with
 * 20% of frames lost (the ring). */
static void killed_each_step(const char *topo, double loss)
{
    mesh_opts o = {.n = 5, .topology = topo, .mixing = "allreduce", .rounds = 2,
                   .deadline_ms = 300, .seed = 12, .loss = loss};
    uint64_t t_round, bound;
    fed_gossip_ar_plan plan;
    int steps, fours = 0;
    double mean4[DIM];
    mesh m;

    assert_int_equal(fed_gossip_ar_plan_init(&plan, topo, 5, DIM), FED_OK);
    steps = (int)fed_gossip_ar_steps(&plan);
    mesh_build(&m, &o);
    run_to_round(&m, 1, 100000000);
    t_round = fed_sim_world_now_us(m.w) / 1000;
    for (int d = 0; d < DIM; d++) /* the survivors' mean, summed in ring order */
        mean4[d] = (((m.init[0][d] + m.init[1][d]) + m.init[3][d]) + m.init[4][d]) / 4;
    mesh_free(&m);
    /* a round: the stalled attempt (its last step due), the abort window,
       the verification's window at worst, and the redo */
    bound = 2 * ((uint64_t)(steps + 2) * o.deadline_ms + 2 * o.deadline_ms + t_round);
    for (int k = 0; k <= steps; k++) {
        uint64_t at = (uint64_t)k * t_round / (uint64_t)steps;
        double z[MAXN][DIM];
        int is4 = 1, is5 = 1, first = -1;

        mesh_build(&m, &o);
        assert_int_equal(fed_sim_world_crash_at(m.w, fed_sim_host_index(m.h[2]), at), FED_OK);
        for (uint64_t t = 0; t < 4 * bound; t += 50) {
            int lo = INT32_MAX;

            for (int i = 0; i < m.n; i++) /* the survivors */
                lo = i != 2 && m.done[i] < lo ? m.done[i] : lo;
            if (lo >= 2)
                break;
            assert_int_equal(fed_sim_world_run_until(m.w, t), FED_OK);
        }
        assert_true(fed_sim_world_now_us(m.w) / 1000 <= bound + 50);
        for (int i = 0; i < m.n; i++) {
            if (i == 2)
                continue;
            assert_int_equal(m.done[i], 2);
            assert_int_equal(fed_node_peer_estimate(fed_sim_host_node(m.h[i]), z[i]), FED_OK);
            if (first < 0) {
                first = i;
                for (int d = 0; d < DIM; d++) {
                    is4 &= fabs(z[i][d] - mean4[d]) < 1e-12 * (1 + fabs(mean4[d]));
                    is5 &= fabs(z[i][d] - m.mean[d]) < 1e-12 * (1 + fabs(m.mean[d]));
                }
            }
            assert_memory_equal(z[i], z[first], sizeof z[i]);
            for (int r = 1; r <= 2; r++)
                assert_memory_equal(m.hashes[i][r], m.hashes[first][r], 32);
        }
        assert_true(is4 || is5);
        if (k == 0)
            assert_true(is4); /* dead before it sent anything */
        fours += is4;
        printf("%-9s of 5, %2.0f%% loss, member 2 killed at %3llu ms (step ~%d of %d): the 4 "
               "survivors hold the mean of %s, both rounds over at %llu ms (bound %llu)\n",
               topo, 100 * loss, (unsigned long long)at, k, steps, is4 ? "the four" : "all five",
               (unsigned long long)(fed_sim_world_now_us(m.w) / 1000),
               (unsigned long long)bound);
        mesh_free(&m);
    }
    if (!strcmp(topo, "ring")) /* a ring member's part is in only near the end */
        assert_true(fours >= steps / 2);
}

static void test_allreduce_killed_each_step(void **state)
{
    (void)state;
    killed_each_step("ring", 0);
    killed_each_step("ring", 0.2);
    killed_each_step("tree", 0);
    killed_each_step("butterfly", 0);
}

/* The faulty member of the hash-mismatch test: round 1's result changed
 * (its first sum nudged by 1e-9, as a float difference would), in attempt
 * 0 only (once) or in every attempt. */
typedef struct ar_fault {
    int every;      /* every attempt of round 1, not only the first */
    int calls;      /* runs it changed */
} ar_fault;

static void ar_fault_hook(void *ctx, uint64_t round, uint32_t attempt, double *sums, size_t n)
{
    ar_fault *f = ctx;

    assert_true(n == DIM + 1);
    if (round != 1 || (attempt && !f->every))
        return;
    sums[0] += 1e-9;
    f->calls++;
}

/* One member (2 of 5) ends round 1's run with a result unlike the others'
 * (node/test_hooks.h's ar_tamper), once or in every attempt, on each schedule:
 * its ring neighbour (3) sees the hash differ and leaves it out, it leaves
 * its own neighbour (1) out in turn, and the redo over 0, 3 and 4 ends
 * with one model on the three, the mean of their three vectors, while 1
 * and 2 keep their own; nobody hangs, and round 2 (no fault) ends with one
 * model hash on all five. */
static void test_allreduce_mismatch(void **state)
{
    static const char *topos[] = {"ring", "tree", "butterfly"};

    (void)state;
    for (size_t t = 0; t < sizeof topos / sizeof *topos; t++)
        for (int every = 0; every <= 1; every++) {
            ar_fault f = {.every = every};
            const fed_node_test_hooks hooks = {.ctx = &f, .ar_tamper = ar_fault_hook};
            mesh_opts o = {.n = 5, .topology = topos[t], .mixing = "allreduce", .rounds = 2,
                           .deadline_ms = 300, .seed = 12, .hooks = &hooks, .tamper_who = 2};
            static const int in3[3] = {0, 3, 4};
            double mean3[DIM];
            mesh m;

            mesh_build(&m, &o);
            m.snap_round = 1; /* round 1's estimates */
            run_to_round(&m, 2, 20000);
            for (int d = 0; d < DIM; d++)
                mean3[d] = (m.init[0][d] + m.init[3][d] + m.init[4][d]) / 3;
            assert_int_equal(f.calls, 1); /* the redo was over the three */
            for (int i = 0; i < 5; i++) {
                assert_int_equal(m.commits[i][1], 1);
                assert_int_equal(m.commits[i][2], 1);
                assert_memory_equal(m.hashes[i][2], m.hashes[0][2], 32);
            }
            for (int k = 0; k < 3; k++) {
                int i = in3[k];

                assert_memory_equal(m.hashes[i][1], m.hashes[0][1], 32);
                assert_memory_equal(m.snap[i], m.snap[0], sizeof m.snap[0]);
                for (int d = 0; d < DIM; d++)
                    assert_true(fabs(m.snap[i][d] - mean3[d]) < 1e-12 * (1 + fabs(mean3[d])));
            }
            for (int i = 1; i <= 2; i++) /* left out: their own */
                assert_memory_equal(m.snap[i], m.init[i], sizeof m.init[i]);
            printf("allreduce %-9s of 5, member 2's result off by 1e-9 %s: round 1 ends with "
                   "one model on 0, 3, 4 and 1, 2 keep their own; round 2 one hash on all five "
                   "at %llu ms\n", topos[t], every ? "in every attempt" : "once",
                   (unsigned long long)(fed_sim_world_now_us(m.w) / 1000));
            mesh_free(&m);
        }
}

/* A ring of n (7, 20% of frames lost) with members 2 and 4, the two beside
 * live member 3, killed at each pair of step times of round 1's all-reduce
 * (each from before the round to after its end, the same time or not):
 * nobody hangs, and the survivors end rounds 1 and 2 each with one model
 * hash on all of them, the same bits. Returns the runs that split. */
static int two_killed(int n, double loss, uint64_t seed)
{
    mesh_opts o = {.n = n, .topology = "ring", .mixing = "allreduce", .rounds = 2,
                   .deadline_ms = 300, .seed = seed, .loss = loss};
    int alive[MAXN], na = 0;
    uint64_t t_round, bound, worst = 0;
    fed_gossip_ar_plan plan;
    int steps, splits = 0;
    mesh m;

    for (int i = 0; i < n; i++)
        if (i != 2 && i != 4)
            alive[na++] = i;
    assert_int_equal(fed_gossip_ar_plan_init(&plan, "ring", (uint32_t)n, DIM), FED_OK);
    steps = (int)fed_gossip_ar_steps(&plan);
    mesh_build(&m, &o);
    run_to_round(&m, 1, 100000000);
    t_round = fed_sim_world_now_us(m.w) / 1000;
    mesh_free(&m);
    bound = 4 * ((uint64_t)(steps + 2) * o.deadline_ms + 2 * o.deadline_ms + t_round);
    for (int a = 0; a <= steps; a++)
        for (int b = 0; b <= steps; b++) {
            double z[MAXN][DIM];
            int split = 0;

            mesh_build(&m, &o);
            assert_int_equal(fed_sim_world_crash_at(m.w, fed_sim_host_index(m.h[2]),
                                                    (uint64_t)a * t_round / (uint64_t)steps),
                             FED_OK);
            assert_int_equal(fed_sim_world_crash_at(m.w, fed_sim_host_index(m.h[4]),
                                                    (uint64_t)b * t_round / (uint64_t)steps),
                             FED_OK);
            for (uint64_t t = 0; t < 2 * bound; t += 50) {
                int lo = INT32_MAX;

                for (int k = 0; k < na; k++)
                    lo = m.done[alive[k]] < lo ? m.done[alive[k]] : lo;
                if (lo >= 2)
                    break;
                assert_int_equal(fed_sim_world_run_until(m.w, t), FED_OK);
            }
            worst = fed_sim_world_now_us(m.w) / 1000 > worst ? fed_sim_world_now_us(m.w) / 1000
                                                              : worst;
            for (int k = 0; k < na; k++) {
                int i = alive[k];

                assert_int_equal(m.done[i], 2);
                assert_int_equal(fed_node_peer_estimate(fed_sim_host_node(m.h[i]), z[i]), FED_OK);
                for (int r = 1; r <= 2; r++)
                    split |= memcmp(m.hashes[i][r], m.hashes[0][r], 32) != 0;
                split |= memcmp(z[i], z[0], sizeof z[0]) != 0;
            }
            if (split)
                printf("ring of %d, %.0f%% loss, seed %llu, members 2 and 4 killed at steps ~%d "
                       "and ~%d: the survivors hold different models\n", n, 100 * loss,
                       (unsigned long long)seed, a, b);
            splits += split;
            mesh_free(&m);
        }
    printf("ring of %d, %.0f%% loss, members 2 and 4 killed at each pair of %d step times: %d "
           "of %d runs split, the last over by %llu ms (bound %llu)\n", n, 100 * loss,
           steps + 1, splits, (steps + 1) * (steps + 1), (unsigned long long)worst,
           (unsigned long long)bound);
    assert_true(worst <= bound + 50);
    return splits;
}

static void test_allreduce_two_killed(void **state)
{
    (void)state;
    assert_int_equal(two_killed(7, 0.2, 14), 0);
}

/* A ring of 5 with member 2 cut off from the others for the first 1.5 s:
 * the four leave it out and go on over themselves (each round the mean of
 * the four), it ends its rounds alone; once the link is back it skips to
 * the others' round and rejoins: from then on all five commit one hash a
 * round, and the five hold the same bits, the mean of all five starting
 * vectors (the four's mean weighed four times, its own once). */
static void test_allreduce_rejoin(void **state)
{
    mesh_opts o = {.n = 5, .topology = "ring", .mixing = "allreduce", .rounds = 12,
                   .deadline_ms = 300, .seed = 5};
    uint32_t groups[5] = {0, 0, 1, 0, 0};
    double z[MAXN][DIM];
    int joined = 0;
    mesh m;

    (void)state;
    mesh_build(&m, &o);
    assert_int_equal(fed_sim_world_add_partition(m.w, groups, 5, 0, 1500), FED_OK);
    run_to_round(&m, 12, 100000);
    for (int r = 1; r <= 12 && !joined; r++) {
        int same = 1;

        for (int i = 0; i < 5; i++)
            same &= m.commits[i][r] == 1 && !memcmp(m.hashes[i][r], m.hashes[0][r], 32);
        joined = same ? r : 0;
    }
    assert_true(joined > 1); /* not the first round: it was cut off */
    for (int r = joined; r <= 12; r++)
        for (int i = 0; i < 5; i++)
            assert_memory_equal(m.hashes[i][r], m.hashes[0][r], 32);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(fed_node_peer_estimate(fed_sim_host_node(m.h[i]), z[i]), FED_OK);
        assert_memory_equal(z[i], z[0], sizeof z[0]);
    }
    for (int d = 0; d < DIM; d++)
        assert_true(fabs(z[0][d] - m.mean[d]) < 1e-12 * (1 + fabs(m.mean[d])));
    printf("ring of 5, member 2 cut off for 1.5 s: all five hold one model hash from round %d "
           "of 12 on, the mean of all five\n", joined);
    mesh_free(&m);
}

/* --group-size G, no training: n members in groups of at most G by the
 * grid all compute from the seed, each group all-reducing alone. After
 * ceil(log_G n) rounds every member holds the exact mean (to 1e-12: the
 * groups sum in different orders). With the links of round 1's group of
 * member 0 made 40 times slower, the other groups end round 1 before it (a
 * slow group holds up nobody else), and round 2, whose groups wait for its
 * members, still ends with the exact mean. */
static void test_allreduce_groups(void **state)
{
    static const struct { int n; uint32_t g; const char *topo; int rounds; } cases[] = {
        {12, 4, "ring", 2}, {16, 4, "butterfly", 2}, {27, 3, "tree", 3}, {8, 16, "ring", 1}};

    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        mesh_opts o = {.n = cases[c].n, .topology = cases[c].topo, .mixing = "allreduce",
                       .rounds = (uint32_t)cases[c].rounds, .deadline_ms = 2000, .seed = 21,
                       .group_size = cases[c].g};
        double z[DIM], err = 0;
        mesh m;

        mesh_build(&m, &o);
        m.snap_round = (uint64_t)cases[c].rounds - 1;
        run_to_round(&m, cases[c].rounds, 100000000);
        if (cases[c].rounds > 1) { /* a round short: not there yet */
            double e1 = 0;

            for (int i = 0; i < m.n; i++)
                for (int d = 0; d < DIM; d++)
                    e1 = fmax(e1, fabs(m.snap[i][d] - m.mean[d]));
            assert_true(e1 > 1e-3);
        }
        for (int i = 0; i < m.n; i++) {
            assert_int_equal(fed_node_peer_estimate(fed_sim_host_node(m.h[i]), z), FED_OK);
            for (int d = 0; d < DIM; d++) {
                double a = fabs(z[d] - m.mean[d]) / (1 + fabs(m.mean[d]));

                err = a > err ? a : err;
            }
        }
        printf("groups of %2u, %2d peers (%s): the exact mean on every one after %d rounds "
               "(largest relative error %.1e)\n", cases[c].g, m.n, cases[c].topo,
               cases[c].rounds, err);
        assert_true(err < 1e-12);
        mesh_free(&m);
    }
    { /* a slow group */
        mesh_opts o = {.n = 12, .topology = "ring", .mixing = "allreduce", .rounds = 2,
                       .deadline_ms = 5000, .seed = 21, .group_size = 4};
        uint32_t grp[MAXN], cnt = 0;
        uint64_t slow = 0, fast = 0;
        double z[DIM], err = 0;
        uint8_t in[MAXN] = {0};
        fed_sim_link l;
        mesh m;

        mesh_build(&m, &o);
        assert_int_equal(fed_gossip_ar_group(12, 4, 21, 1, 0, grp, &cnt), FED_OK);
        memset(&l, 0, sizeof l);
        l.latency_ms = 200;
        l.bytes_per_ms = 100000;
        for (uint32_t a = 0; a < cnt; a++) {
            in[grp[a]] = 1;
            for (uint32_t b = 0; b < cnt; b++)
                if (a != b)
                    assert_int_equal(fed_sim_world_set_link(m.w, fed_sim_host_index(m.h[grp[a]]),
                                                            fed_sim_host_index(m.h[grp[b]]), &l),
                                     FED_OK);
        }
        run_to_round(&m, 2, 100000000);
        for (int i = 0; i < m.n; i++) { /* round 2 waited for the slow members: exact */
            assert_int_equal(fed_node_peer_estimate(fed_sim_host_node(m.h[i]), z), FED_OK);
            for (int d = 0; d < DIM; d++)
                err = fmax(err, fabs(z[d] - m.mean[d]) / (1 + fabs(m.mean[d])));
        }
        assert_true(err < 1e-12);
        for (int i = 0; i < m.n; i++) {
            uint64_t t = m.end_ms[i][1];

            if (in[i])
                slow = slow > t ? slow : t;
            else
                fast = fast > t ? fast : t;
        }
        printf("groups of 4, 12 peers, one group's links 200 ms: the other groups end round 1 "
               "at %llu ms, the slow one at %llu ms; round 2 the exact mean (%.1e)\n",
               (unsigned long long)(fast - 1700000000000ull),
               (unsigned long long)(slow - 1700000000000ull), err);
        assert_true(fast < slow);
        mesh_free(&m);
    }
}

/* --group-size 4 over 16 members, no training, with member 5 restarted
 * from its checkpoint between rounds 1 and 2 (down 200 ms, well within the
 * deadline: its round-2 group waits for it): after round 2 every member
 * holds the exact mean, so it came back with the weight its round-1 mean
 * stands for (the group's 4), not 1. */
static void test_allreduce_groups_restart(void **state)
{
    mesh_opts o = {.n = 16, .topology = "ring", .mixing = "allreduce", .rounds = 2,
                   .deadline_ms = 2000, .seed = 21, .group_size = 4};
    double z[DIM], err = 0;
    uint64_t t;
    mesh m;

    (void)state;
    mesh_build(&m, &o);
    for (t = 1; m.done[5] < 1 && t < 100000; t++)
        assert_int_equal(fed_sim_world_run_until(m.w, t), FED_OK);
    assert_int_equal(m.done[5], 1);
    assert_int_equal(fed_sim_world_crash_at(m.w, fed_sim_host_index(m.h[5]), t), FED_OK);
    assert_int_equal(fed_sim_world_restart_at(m.w, fed_sim_host_index(m.h[5]), t + 200), FED_OK);
    run_to_round(&m, 2, 100000);
    assert_int_equal(fed_sim_host_start_failures(m.h[5]), 0);
    assert_int_equal(m.commits[5][1], 1); /* resumed after round 1, not from the start */
    assert_int_equal(m.commits[5][2], 1);
    for (int i = 0; i < m.n; i++) {
        assert_int_equal(fed_node_peer_estimate(fed_sim_host_node(m.h[i]), z), FED_OK);
        for (int d = 0; d < DIM; d++)
            err = fmax(err, fabs(z[d] - m.mean[d]) / (1 + fabs(m.mean[d])));
    }
    printf("groups of 4, 16 peers, member 5 restarted between rounds 1 and 2: the exact mean on "
           "every one after round 2 (largest relative error %.1e)\n", err);
    assert_true(err < 1e-12);
    mesh_free(&m);
}

/* What all-reduce refuses: a sync mode other than bsp, a gossip topology. */
static void test_allreduce_settings(void **state)
{
    (void)state;
    assert_int_equal(fed_node_peer_check("ring", "bsp", "allreduce"), FED_OK);
    assert_int_equal(fed_node_peer_check("tree:4", "bsp", "allreduce"), FED_OK);
    assert_int_equal(fed_node_peer_check("butterfly", "bsp", "allreduce"), FED_OK);
    assert_int_equal(fed_node_peer_check("ring", "ssp:2", "allreduce"), FED_ERR_UNSUPPORTED);
    assert_int_equal(fed_node_peer_check("ring", "asp:0.1", "allreduce"), FED_ERR_UNSUPPORTED);
    assert_int_equal(fed_node_peer_check("ring", "bap", "allreduce"), FED_ERR_UNSUPPORTED);
    assert_int_equal(fed_node_peer_check("random:3", "bsp", "allreduce"), FED_ERR_SPEC);
    assert_int_equal(fed_node_peer_check("butterfly", "bsp", "pushsum"), FED_ERR_SPEC);
}

/* The same seed twice: the same estimates, bit for bit. */
static void test_determinism(void **state)
{
    mesh_opts o = {.n = 8, .topology = "random:2", .loss = 0.1, .rounds = 20, .deadline_ms = 500,
                   .seed = 6};
    double a[MAXN][DIM], b[DIM];
    mesh m;

    (void)state;
    mesh_build(&m, &o);
    run_to_round(&m, 20, 100000000);
    for (int i = 0; i < m.n; i++)
        assert_int_equal(fed_node_peer_estimate(fed_sim_host_node(m.h[i]), a[i]), FED_OK);
    mesh_free(&m);
    mesh_build(&m, &o);
    run_to_round(&m, 20, 100000000);
    for (int i = 0; i < m.n; i++) {
        assert_int_equal(fed_node_peer_estimate(fed_sim_host_node(m.h[i]), b), FED_OK);
        assert_memory_equal(a[i], b, sizeof b);
    }
    mesh_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_consensus_ring16),
        cmocka_unit_test(test_consensus_random3_64),
        cmocka_unit_test(test_mass_constant),
        cmocka_unit_test(test_ring_contraction),
        cmocka_unit_test(test_sync_modes_and_mixings),
        cmocka_unit_test(test_loss_running_sums_vs_plain),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_allreduce_settings),
        cmocka_unit_test(test_allreduce_exact),
        cmocka_unit_test(test_allreduce_loss),
        cmocka_unit_test(test_allreduce_training),
        cmocka_unit_test(test_allreduce_chunked),
        cmocka_unit_test(test_pushsum_chunked),
        cmocka_unit_test(test_allreduce_killed_each_step),
        cmocka_unit_test(test_allreduce_rejoin),
        cmocka_unit_test(test_allreduce_mismatch),
        cmocka_unit_test(test_allreduce_two_killed),
        cmocka_unit_test(test_allreduce_groups),
        cmocka_unit_test(test_allreduce_groups_restart),
        cmocka_unit_test(test_vouched_peer_joins),
        cmocka_unit_test(test_training_crash_rejoin),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
