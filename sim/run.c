/* run.c - a fedsim scenario end to end (run.h): hosts with fresh identities
 * and in-memory databases, one allow-list, the shared data cut into shards,
 * node configurations from the scenario, Byzantine clients, stragglers and
 * crashes scheduled, then the world run in virtual time while the round
 * observers make one row per round. Owns everything it builds; borrows the
 * data and the pool. */
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/rng.h"
#include "crypto/allow.h"
#include "model/backend.h"
#include "model/optim.h"
#include "node/node.h"
#include "sim/attack.h"
#include "sim/host.h"
#include "sim/run.h"
#include "sim/world.h"

#define S(field, name, type, def, min, max, help)                                  \
    FED_OPT_DEF(fed_sim_scenario, field, name, type, def, min, max, help)
const fed_opt fed_sim_scenario_opts[] = {
    S(nodes, "nodes", FED_OPT_INT, "8", 2, 100000, "clients (aggregator mode) or peers"),
    S(role, "role", FED_OPT_STR, "aggregator", 0, 0,
      "aggregator (an aggregator and --nodes clients) or peer (--nodes peers, no aggregator)"),
    S(loss, "loss", FED_OPT_DOUBLE, "0", 0, 1, "share of frames lost on every link"),
    S(latency_ms, "latency-ms", FED_OPT_DOUBLE, "5", 0, 1e6, "one-way latency of a link"),
    S(jitter_ms, "jitter-ms", FED_OPT_DOUBLE, "0", 0, 1e6,
      "standard deviation of a link's latency (normal); 0: fixed"),
    S(bandwidth_mbps, "bandwidth", FED_OPT_DOUBLE, "100", 0, 1e6,
      "MB/s of a link (a frame of B bytes takes B / bandwidth; 0: unlimited)"),
    S(gflops, "gflops", FED_OPT_DOUBLE, "5", 1e-6, 1e9,
      "a node's training speed: virtual time = FLOPs / this"),
    S(stragglers, "stragglers", FED_OPT_STR, "", 0, 0,
      "FRACTION:SLOWDOWN: the last FRACTION of the nodes train SLOWDOWN times slower"),
    S(byzantine, "byzantine", FED_OPT_STR, "", 0, 0,
      "FRACTION:ATTACK: the first FRACTION of the clients send signflip:S, noise:SIGMA or zero"),
    S(crash, "crash", FED_OPT_STR, "", 0, 0,
      "NODE@SECONDS[,restart@SECONDS]: crash client/peer NODE (or agg), restart it later"),
    S(crash_rate, "crash-rate", FED_OPT_DOUBLE, "0", 0, 1,
      "each client or peer crashes with this probability a virtual second, back 1 s later"),
    S(db_dir, "db-dir", FED_OPT_STR, "", 0, 0,
      "keep each node's database in this directory (node-N.db); \"\": in memory"),
    S(loss_window, "loss-window", FED_OPT_STR, "", 0, 0,
      "P@T1-T2: every link loses a share P of frames from T1 to T2 virtual seconds"),
    S(partition_net, "partition-net", FED_OPT_STR, "", 0, 0,
      "GROUPS@T1-T2: the nodes split into GROUPS (the aggregator with the first) that cannot "
      "reach each other from T1 to T2 virtual seconds"),
    S(eval_peers, "eval-peers", FED_OPT_INT, "0", 0, 1000000,
      "peer: how many peers evaluate each round (the first N; 0: all): their mean is printed"),
    S(checkpoint_every, "checkpoint-every", FED_OPT_INT, "1", 1, 1000000,
      "peer: a checkpoint every Nth round (a crashed peer resumes from the last)"),
    S(no_crypto, "no-crypto", FED_OPT_BOOL, "false", 0, 0,
      "frames in the clear and unsigned, for the largest runs (the real seal is the default)"),
    FED_NODE_SETTINGS_OPTS(fed_sim_scenario, s),
};
#undef S
const size_t fed_sim_scenario_nopts = sizeof fed_sim_scenario_opts / sizeof *fed_sim_scenario_opts;

void fed_sim_scenario_settle(fed_sim_scenario *sc)
{
    if (strcmp(sc->s.mode, "aggregator") != 0 && strcmp(sc->s.mode, "peer") != 0)
        return;
    fed_log(FED_LOG_WARN, "--mode %s is deprecated: use --role %s (--mode is sync or async)",
            sc->s.mode, sc->s.mode);
    snprintf(sc->role, sizeof sc->role, "%s", sc->s.mode);
    snprintf(sc->s.mode, sizeof sc->s.mode, "sync");
}

#define RUN_STEP_MS 100

/* Per round, what the peers reported. */
typedef struct peer_round {
    int reports, measured;
    double acc_sum, acc_min, acc_max;
    uint32_t mixed;
    float lr;
    double t_s;
} peer_round;

typedef struct sim_run {
    const fed_sim_scenario *sc;
    int peer_mode;
    fed_sim_world *w;
    fed_crypto_allow *allow;
    fed_sim_host *agg;
    fed_sim_host **h;      /* (nodes) clients or peers */
    uint32_t **idx;        /* (nodes) their shards */
    size_t *nidx;
    fed_sim_attack *attack; /* (nodes) --byzantine: each client's tamper_ctx */
    peer_round *pr;        /* (rounds + 1) */
    fed_rng crash_rng;     /* --crash-rate's draws */
    uint64_t next_row;     /* the next round to report */
    uint64_t last_emitted; /* the last round reported */
    float client_lr;       /* the rate the last client to report trained at */
    fed_sim_row_fn on_row;
    void *ctx;
} sim_run;

static void emit(sim_run *r, const fed_sim_row *row)
{
    r->last_emitted = row->round;
    if (r->on_row)
        r->on_row(r->ctx, row);
}

static uint64_t bytes_sent(const sim_run *r)
{
    fed_sim_counters c;

    fed_sim_world_counters(r->w, &c);
    return c.bytes_sent;
}

/* Peer rounds reach the output in order, once every peer reported (or at
 * the end, flush). */
static void emit_peer_rounds(sim_run *r, int flush)
{
    while (r->next_row <= (uint64_t)r->sc->s.rounds) {
        peer_round *p = &r->pr[r->next_row];
        fed_sim_row row;

        if (!flush && p->reports < r->sc->nodes)
            return;
        if (!p->reports) {
            r->next_row++;
            continue;
        }
        memset(&row, 0, sizeof row);
        row.round = r->next_row;
        row.t_s = p->t_s;
        row.accuracy = p->measured ? p->acc_sum / p->measured : NAN;
        row.spread = p->measured ? p->acc_max - p->acc_min : NAN;
        row.bytes = bytes_sent(r);
        row.merged = p->mixed;
        row.lr = p->lr;
        emit(r, &row);
        r->next_row++;
    }
}

static void on_round(void *ctx, const fed_node *n, const fed_node_round_info *info)
{
    sim_run *r = ctx;
    double t_s = (double)fed_sim_world_now_us(r->w) / 1e6;

    if (!r->peer_mode) {
        fed_sim_row row;

        if (fed_node_get_role(n) != FED_NODE_AGGREGATOR) {
            r->client_lr = info->lr;
            return;
        }
        memset(&row, 0, sizeof row);
        row.round = info->round;
        row.t_s = t_s;
        row.accuracy = info->accuracy;
        row.bytes = bytes_sent(r);
        row.merged = info->merged;
        row.lr = r->client_lr;
        emit(r, &row);
        return;
    }
    if (info->round < 1 || info->round > (uint64_t)r->sc->s.rounds)
        return;
    {
        peer_round *p = &r->pr[info->round];

        p->reports++;
        p->mixed += info->merged;
        if (info->lr > 0)
            p->lr = info->lr;
        p->t_s = t_s > p->t_s ? t_s : p->t_s;
        if (!isnan(info->accuracy)) {
            if (!p->measured || info->accuracy < p->acc_min)
                p->acc_min = info->accuracy;
            if (!p->measured || info->accuracy > p->acc_max)
                p->acc_max = info->accuracy;
            p->acc_sum += info->accuracy;
            p->measured++;
        }
    }
    emit_peer_rounds(r, 0);
}

/* "F:REST": the fraction and what follows the colon. */
static fed_err parse_fraction(const char *s, double *f, const char **rest)
{
    char *end;

    *f = strtod(s, &end);
    if (end == s || *end != ':' || !(*f >= 0 && *f <= 1))
        return FED_ERR_SPEC;
    *rest = end + 1;
    return FED_OK;
}

/* "X@T1-T2" into x, t1 and t2 (seconds, t1 <= t2). */
static fed_err parse_window(const char *s, double *x, double *t1, double *t2)
{
    char *end;

    *x = strtod(s, &end);
    if (end == s || *end != '@')
        return FED_ERR_SPEC;
    s = end + 1;
    *t1 = strtod(s, &end);
    if (end == s || *end != '-' || !(*t1 >= 0))
        return FED_ERR_SPEC;
    s = end + 1;
    *t2 = strtod(s, &end);
    if (end == s || *end || !(*t2 >= *t1))
        return FED_ERR_SPEC;
    return FED_OK;
}

/* --loss-window and --partition-net. */
static fed_err schedule_network(sim_run *r)
{
    const fed_sim_scenario *sc = r->sc;
    double x, t1, t2;
    fed_err e;

    if (sc->loss_window[0]) {
        if (parse_window(sc->loss_window, &x, &t1, &t2) != FED_OK || !(x >= 0 && x <= 1))
            return FED_ERR_SPEC;
        if ((e = fed_sim_world_add_loss(r->w, x, (uint64_t)(t1 * 1000), (uint64_t)(t2 * 1000))) !=
            FED_OK)
            return e;
    }
    if (sc->partition_net[0]) {
        size_t n = fed_sim_world_node_count(r->w);
        uint32_t *group = NULL;

        if (parse_window(sc->partition_net, &x, &t1, &t2) != FED_OK || x < 2 || x > sc->nodes ||
            x != floor(x))
            return FED_ERR_SPEC;
        if (!(group = fed_calloc(n, sizeof *group)))
            return FED_ERR_NOMEM;
        for (int i = 0; i < sc->nodes; i++) /* the aggregator stays in group 0 */
            group[fed_sim_host_index(r->h[i])] = (uint32_t)((size_t)i * (size_t)x / (size_t)sc->nodes);
        e = fed_sim_world_add_partition(r->w, group, n, (uint64_t)(t1 * 1000),
                                        (uint64_t)(t2 * 1000));
        fed_free(group);
        if (e != FED_OK)
            return e;
    }
    return FED_OK;
}

/* Crash and restart events from "NODE@S[,restart@S]". */
static fed_err schedule_crash(sim_run *r)
{
    const char *s = r->sc->crash;
    char *end;
    uint32_t index;
    double at, back = -1;

    if (!s[0])
        return FED_OK;
    if (!strncmp(s, "agg@", 4) && !r->peer_mode) {
        index = fed_sim_host_index(r->agg);
        s += 4;
    } else {
        long k = strtol(s, &end, 10);

        if (end == s || *end != '@' || k < 0 || k >= r->sc->nodes)
            return FED_ERR_SPEC;
        index = fed_sim_host_index(r->h[k]);
        s = end + 1;
    }
    at = strtod(s, &end);
    if (end == s || !(at >= 0))
        return FED_ERR_SPEC;
    if (*end == ',') {
        s = end + 1;
        if (strncmp(s, "restart@", 8) != 0)
            return FED_ERR_SPEC;
        back = strtod(s + 8, &end);
        if (end == s + 8 || !(back > at))
            return FED_ERR_SPEC;
    }
    if (*end)
        return FED_ERR_SPEC;
    if (fed_sim_world_crash_at(r->w, index, (uint64_t)(at * 1000)) != FED_OK ||
        (back >= 0 && fed_sim_world_restart_at(r->w, index, (uint64_t)(back * 1000)) != FED_OK))
        return FED_ERR_NOMEM;
    return FED_OK;
}

/* Settings every node shares: the scenario's fed_node_settings (checked by
 * fed_sim_run before), wait-clients 0 meaning every one of --nodes. */
static void base_config(const sim_run *r, fed_node_config *c, const fed_dataset *train,
                        fed_backend *be)
{
    const fed_sim_scenario *sc = r->sc;

    fed_node_config_default(c);
    if (fed_node_settings_apply(&sc->s, (uint32_t)sc->nodes, c, NULL) != FED_OK)
        fed_log(FED_LOG_ERROR, "sim: settings refused after the check"); /* not reached */
    c->be = be;
    c->allow = r->allow;
    c->shape = train->shape;
    c->on_round = on_round;
    c->observer = (void *)r;
    c->wire.no_crypto = sc->no_crypto;
}

static fed_err attach_nodes(sim_run *r, const fed_dataset *train, const fed_dataset *test,
                            fed_backend *be)
{
    const fed_sim_scenario *sc = r->sc;
    double byz = 0, slow_f = 0, slow = 1;
    const char *attack = "", *rest;
    fed_sim_attack a = {0};
    char *end;
    fed_node_config c;
    char path[512];
    fed_err e;

    if (sc->byzantine[0] && (r->peer_mode || parse_fraction(sc->byzantine, &byz, &attack) != FED_OK ||
                             !attack[0] || fed_sim_attack_parse(attack, &a) != FED_OK)) {
        fed_log(FED_LOG_ERROR, "sim: --byzantine '%s': FRACTION:ATTACK, aggregator mode only",
                sc->byzantine);
        return FED_ERR_SPEC;
    }
    if (sc->stragglers[0]) {
        if (parse_fraction(sc->stragglers, &slow_f, &rest) != FED_OK)
            return FED_ERR_SPEC;
        slow = strtod(rest, &end);
        if (end == rest || *end || !(slow >= 1))
            return FED_ERR_SPEC;
    }
    if (!r->peer_mode) {
        base_config(r, &c, train, be);
        c.role = FED_NODE_AGGREGATOR;
        c.test = test;
        snprintf(path, sizeof path, "%s/aggregator.db", sc->db_dir);
        if ((e = fed_sim_host_attach(r->agg, r->w, &c, sc->db_dir[0] ? path : NULL)) != FED_OK)
            return e;
    }
    for (int i = 0; i < sc->nodes; i++) {
        base_config(r, &c, train, be);
        c.train = train;
        c.shard = r->idx[i];
        c.shard_n = r->nidx[i];
        if (r->peer_mode) {
            c.role = FED_NODE_PEER;
            c.test = !sc->eval_peers || i < sc->eval_peers ? test : NULL;
            c.checkpoint_every = (uint32_t)sc->checkpoint_every;
        } else {
            c.role = FED_NODE_CLIENT;
            c.aggregator = *fed_sim_host_id(r->agg);
            if (i < (int)floor(byz * sc->nodes + 1e-9)) {
                r->attack[i] = a;
                fed_sim_attack_install(&r->attack[i], &c, fed_sim_host_id(r->h[i])->key);
            }
        }
        snprintf(path, sizeof path, "%s/node-%d.db", sc->db_dir, i);
        if ((e = fed_sim_host_attach(r->h[i], r->w, &c, sc->db_dir[0] ? path : NULL)) != FED_OK)
            return e;
        if (i >= sc->nodes - (int)floor(slow_f * sc->nodes + 1e-9) &&
            (e = fed_sim_world_set_slowdown(r->w, fed_sim_host_index(r->h[i]), slow)) != FED_OK)
            return e;
    }
    return FED_OK;
}

static fed_err build_hosts(sim_run *r, const fed_dataset *train)
{
    const fed_sim_scenario *sc = r->sc;
    fed_rng idr;
    char name[32];
    fed_err e;

    /* secure aggregation: a slot per neighbour's shares (k < nodes) */
    uint32_t slots = sc->s.secagg ? 16 + FED_NODE_SECAGG_SLOTS(sc->nodes) : 0;

    fed_rng_seed_stream(&idr, sc->s.seed, 77);
    if ((e = fed_crypto_allow_new(&r->allow)) != FED_OK)
        return e;
    if (!r->peer_mode) {
        if ((e = fed_sim_host_new_slots(&idr, slots, &r->agg)) != FED_OK ||
            (e = fed_crypto_allow_add(r->allow, "agg", fed_sim_host_id(r->agg)->key)) != FED_OK)
            return e;
    }
    for (int i = 0; i < sc->nodes; i++) {
        snprintf(name, sizeof name, "n%d", i);
        if ((e = fed_sim_host_new_slots(&idr, slots, &r->h[i])) != FED_OK ||
            (e = fed_crypto_allow_add(r->allow, name, fed_sim_host_id(r->h[i])->key)) != FED_OK ||
            (e = fed_data_partition(train, sc->s.partition, i, sc->nodes, sc->s.seed, &r->idx[i],
                                    &r->nidx[i])) != FED_OK)
            return e;
        if (!r->nidx[i]) {
            fed_log(FED_LOG_ERROR, "sim: node %d's shard is empty (%s over %d nodes)", i,
                    sc->s.partition, sc->nodes);
            return FED_ERR_RANGE;
        }
    }
    return FED_OK;
}

/* --crash-rate: each up client or peer crashes with P a virtual second
 * (P / 10 a step of 100 ms), and restarts a second later. */
static fed_err random_crashes(sim_run *r, uint64_t t_ms)
{
    double p = r->sc->crash_rate * RUN_STEP_MS / 1000.0;

    for (int i = 0; p > 0 && i < r->sc->nodes; i++) {
        uint32_t k = fed_sim_host_index(r->h[i]);

        if (fed_sim_world_node_up(r->w, k) && fed_rng_uniform(&r->crash_rng) < p &&
            (fed_sim_world_crash_at(r->w, k, t_ms) != FED_OK ||
             fed_sim_world_restart_at(r->w, k, t_ms + 1000) != FED_OK))
            return FED_ERR_NOMEM;
    }
    return FED_OK;
}

static int finished(const sim_run *r)
{
    fed_node *n;

    if (!r->peer_mode)
        return (n = fed_sim_host_node(r->agg)) && fed_node_finished(n);
    for (int i = 0; i < r->sc->nodes; i++) {
        n = fed_sim_host_node(r->h[i]);
        if (n ? !fed_node_finished(n)
              : fed_sim_world_node_up(r->w, fed_sim_host_index(r->h[i]))) /* not started yet */
            return 0;
    }
    return 1;
}

/* sha256 of the final global model, or of every peer's estimate in turn. */
static void final_hash(const sim_run *r, uint8_t out[32])
{
    crypto_hash_sha256_state st;
    fed_node *n;

    crypto_hash_sha256_init(&st);
    if (!r->peer_mode && (n = fed_sim_host_node(r->agg))) {
        size_t np = fed_node_nparams(n);
        float *p = fed_malloc(np * sizeof *p);

        if (p && fed_node_get_params(n, p) == FED_OK)
            crypto_hash_sha256_update(&st, (const uint8_t *)p, np * sizeof *p);
        fed_free(p);
    }
    for (int i = 0; r->peer_mode && i < r->sc->nodes; i++)
        if ((n = fed_sim_host_node(r->h[i]))) {
            size_t d = fed_node_peer_dim(n);
            double *z = fed_malloc(d * sizeof *z);

            if (z && fed_node_peer_estimate(n, z) == FED_OK)
                crypto_hash_sha256_update(&st, (const uint8_t *)z, d * sizeof *z);
            fed_free(z);
        }
    crypto_hash_sha256_final(&st, out);
}

static void run_free(sim_run *r)
{
    fed_sim_world_free(r->w); /* first: it waits for jobs */
    fed_sim_host_free(r->agg);
    for (int i = 0; r->h && i < r->sc->nodes; i++) {
        fed_sim_host_free(r->h[i]);
        fed_free(r->idx[i]);
    }
    fed_free(r->h);
    fed_free(r->idx);
    fed_free(r->nidx);
    fed_free(r->attack);
    fed_free(r->pr);
    fed_crypto_allow_free(r->allow);
}

static int failed_to_start(const fed_sim_host *h)
{
    return h && !fed_sim_host_node(h) && fed_sim_host_start_failures(h) > 0;
}

/* A node that could not start (a strategy, codec or topology its config
 * names but the node refuses; logged at the refusal) would leave the run
 * waiting until max_virtual_s: the run stops at once instead. */
/* A node that failed (fed_node_failed: a timer it could not arm) stops
 * the run, as it stops the daemon. */
static fed_err node_failed(const fed_sim_host *h)
{
    const fed_node *n = fed_sim_host_node(h);

    return n ? fed_node_failed(n) : FED_OK;
}

static fed_err check_started(const sim_run *r)
{
    fed_err e;

    if (!r->peer_mode && failed_to_start(r->agg)) {
        fed_log(FED_LOG_ERROR, "sim: the aggregator could not start (the reason is logged above)");
        return FED_ERR_BAD_VALUE;
    }
    if (!r->peer_mode && (e = node_failed(r->agg)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "sim: the aggregator failed (%s): stopping", fed_strerror(e));
        return e;
    }
    for (int i = 0; i < r->sc->nodes; i++) {
        if (failed_to_start(r->h[i])) {
            fed_log(FED_LOG_ERROR, "sim: node %d could not start (the reason is logged above)", i);
            return FED_ERR_BAD_VALUE;
        }
        if ((e = node_failed(r->h[i])) != FED_OK) {
            fed_log(FED_LOG_ERROR, "sim: node %d failed (%s): stopping", i, fed_strerror(e));
            return e;
        }
    }
    return FED_OK;
}

fed_err fed_sim_run(const fed_sim_scenario *sc, const fed_dataset *train, const fed_dataset *test,
                    fed_pool *pool, double max_virtual_s, fed_sim_row_fn on_row, void *ctx,
                    uint8_t hash[32], fed_sim_counters *counters)
{
    sim_run r;
    fed_sim_config wc;
    fed_backend *be = NULL;
    uint64_t t = 0;
    fed_err e;

    memset(&r, 0, sizeof r);
    r.sc = sc;
    r.on_row = on_row;
    r.ctx = ctx;
    r.next_row = 1;
    r.peer_mode = !strcmp(sc->role, "peer");
    fed_rng_seed_stream(&r.crash_rng, sc->s.seed, 0xc4a5);
    {
        fed_node_config probe;
        const char *bad = NULL;

        fed_node_config_default(&probe);
        if (!r.peer_mode && strcmp(sc->role, "aggregator") != 0)
            bad = "role";
        else if (sc->s.rounds < 1)
            bad = "rounds"; /* 0 (forever) has no end to simulate */
        else if (fed_node_settings_apply(&sc->s, (uint32_t)sc->nodes, &probe, &bad) != FED_OK &&
                 !bad)
            bad = "settings";
        if (bad) {
            fed_log(FED_LOG_ERROR, "sim: --%s is not valid here (see fedsim --help)", bad);
            return FED_ERR_SPEC;
        }
        /* one settings block for every node: --dp-sgd goes to the clients,
           --require-dp-sgd to the aggregator */
        {
            fed_node_settings clients = sc->s;

            clients.require_dp_sgd = r.peer_mode && sc->s.require_dp_sgd;
            bad = fed_node_settings_dp_misuse(&clients, r.peer_mode ? FED_NODE_PEER
                                                                    : FED_NODE_CLIENT);
        }
        if (bad) {
            fed_log(FED_LOG_ERROR, "sim: %s", bad);
            return FED_ERR_SPEC;
        }
        if (sc->s.dp_sgd)
            fed_log(FED_LOG_WARN, "sim: DP-SGD's noise comes from each node's seeded stream, so "
                    "the run repeats: it shows what DP-SGD costs, and is not private");
    }
    memset(&wc, 0, sizeof wc);
    wc.seed = sc->s.seed;
    wc.link.latency_ms = sc->latency_ms;
    wc.link.jitter_ms = sc->jitter_ms;
    wc.link.loss = sc->loss;
    wc.link.bytes_per_ms = sc->bandwidth_mbps * 1000.0;
    wc.flops_per_ms = sc->gflops * 1e6;
    wc.epoch_base_s = 1700000000;
    wc.pool = pool;
    r.h = fed_calloc((size_t)sc->nodes, sizeof *r.h);
    r.idx = fed_calloc((size_t)sc->nodes, sizeof *r.idx);
    r.nidx = fed_calloc((size_t)sc->nodes, sizeof *r.nidx);
    r.attack = fed_calloc((size_t)sc->nodes, sizeof *r.attack);
    r.pr = fed_calloc((size_t)sc->s.rounds + 1, sizeof *r.pr);
    if (!r.h || !r.idx || !r.nidx || !r.attack || !r.pr) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    if ((e = fed_backend_cpu_new(1, &be)) != FED_OK ||
        (e = fed_sim_world_new(&wc, &r.w)) != FED_OK || (e = build_hosts(&r, train)) != FED_OK ||
        (e = attach_nodes(&r, train, test, be)) != FED_OK || (e = schedule_crash(&r)) != FED_OK ||
        (e = schedule_network(&r)) != FED_OK)
        goto out;
    /* the aggregator's last row comes once that round's evaluation is back */
    while ((!finished(&r) || (!r.peer_mode && r.last_emitted < (uint64_t)sc->s.rounds)) &&
           t < (uint64_t)(max_virtual_s * 1000)) {
        t += RUN_STEP_MS;
        if ((e = random_crashes(&r, t)) != FED_OK || (e = fed_sim_world_run_until(r.w, t)) != FED_OK ||
            (e = check_started(&r)) != FED_OK)
            goto out;
    }
    if (r.peer_mode)
        emit_peer_rounds(&r, 1);
    if (!finished(&r))
        e = FED_ERR_TIMEOUT;
    if (hash)
        final_hash(&r, hash);
    if (counters)
        fed_sim_world_counters(r.w, counters);
out:
    run_free(&r);
    fed_backend_free(be);
    return e;
}
