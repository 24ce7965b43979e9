/* run.c - a fedsim scenario end to end (run.h): hosts with fresh identities
 * and in-memory databases, one allow-list, the shared data cut into shards,
 * node configurations from the scenario, Byzantine clients, stragglers and
 * crashes scheduled, then the world run in virtual time while the round
 * observers make one row per round. Owns everything it builds; borrows the
 * data and the pool. */
#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/opt.h"
#include "crypto/allow.h"
#include "gossip/wire_hooks.h"
#include "model/backend.h"
#include "model/optim.h"
#include "model/train.h"
#include "node/layout.h"
#include "node/node.h"
#include "node/settings.h"
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
    S(latency_floor_ms, "latency-floor-ms", FED_OPT_DOUBLE, "1", 0, 1e6,
      "no frame arrives sooner than this after it was sent (jitter or not): the lookahead that "
      "lets ranks under mpirun run apart"),
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
      "peer: a checkpoint every Nth round (a crashed peer resumes from the last); written "
      "only when a peer can crash (--crash, --crash-rate) or --db-dir keeps the databases"),
    S(no_crypto, "no-crypto", FED_OPT_BOOL, "false", 0, 0,
      "frames in the clear and unsigned, for the largest runs (the real seal is the default)"),
    S(personal_eval, "personal-eval", FED_OPT_BOOL, "false", 0, 0,
      "aggregator: at the end, each client scores its own model (the global with its "
      "--local-layers/--local-bn tensors) on its local test split (the test set partitioned "
      "as --partition cuts the training set): per client, mean and worst"),
    S(finetune_epochs, "finetune-epochs", FED_OPT_INT, "0", 0, 1000,
      "aggregator, with --personal-eval: each client first fine-tunes its model this many "
      "epochs on its own shard (FedAvg + fine-tuning, the personalization baseline)"),
    S(local_only, "local-only", FED_OPT_BOOL, "false", 0, 0,
      "aggregator, with --personal-eval: purely local training, personalization's other "
      "baseline: no round runs; each client trains --rounds x --local-epochs epochs (at most "
      "--max-steps steps each --local-epochs) on its own shard alone, from the model the "
      "aggregator starts with, one optimizer throughout at the constant --lr"),
    S(shard_samples, "shard-samples", FED_OPT_INT, "0", 0, 1000000000,
      "each client's or peer's shard cut to this many samples, a seeded draw of each label's "
      "share (rounded per label): a site with scarce data (0: the whole shard)"),
    FED_NODE_SETTINGS_OPTS(fed_sim_scenario, s),
};
#undef S
const size_t fed_sim_scenario_nopts = sizeof fed_sim_scenario_opts / sizeof *fed_sim_scenario_opts;

fed_err fed_sim_scenario_settle(fed_sim_scenario *sc, int role_given)
{
    if (strcmp(sc->s.mode, "aggregator") != 0 && strcmp(sc->s.mode, "peer") != 0)
        return FED_OK;
    if (role_given && strcmp(sc->role, sc->s.mode) != 0) {
        fed_log(FED_LOG_ERROR, "sim: --role %s and --mode %s (the old spelling of --role %s) "
                "contradict each other: give --role alone", sc->role, sc->s.mode, sc->s.mode);
        return FED_ERR_SPEC;
    }
    fed_log(FED_LOG_WARN, "--mode %s is deprecated: use --role %s (--mode is sync or async)",
            sc->s.mode, sc->s.mode);
    snprintf(sc->role, sizeof sc->role, "%s", sc->s.mode);
    snprintf(sc->s.mode, sizeof sc->s.mode, "sync");
    return FED_OK;
}

#define RUN_STEP_MS 100
#define NO_NODE UINT32_MAX
#define ID_STREAM (77ull << 32)    /* + 0 the aggregator, + 1 + i node i */
#define CRASH_STREAM (0xc4a5ull << 32) /* + i: node i's --crash-rate draws */
#define ACC_ONE 4294967296.0 /* accuracies summed as integers of 2^-32 */

/* Per round, what the clients or peers reported: sums that come out the
 * same in any order (and over any split of the nodes across ranks). */
typedef struct round_sum {
    uint32_t reports, measured, mixed;
    uint32_t lr_node; /* the lowest node that reported a rate; NO_NODE: none */
    float lr;
    uint64_t acc_fx;  /* sum of round(accuracy * 2^32) */
    double acc_min, acc_max;
    uint64_t t_us;    /* the latest report */
    int dirty;        /* local: reported since the last sync */
} round_sum;

/* The aggregator's row of a round, before its bytes and rate are known. */
typedef struct agg_row {
    uint64_t round, t_us;
    double accuracy;
    uint32_t merged;
    double epsilon; /* DP-FedAvg's client-level epsilon after the round; 0: none */
    double loss;    /* the global model's test loss (mse under --task regression); NaN */
} agg_row;

/* The fault and attack options (--crash, --stragglers, --byzantine,
 * --loss-window, --partition-net), parsed and checked once by check_faults
 * before anything is built; each refusal logged naming its option, value
 * and what is wrong. */
typedef struct sim_faults {
    int crash;                   /* --crash given */
    int crash_node;              /* its client or peer; -1: the aggregator */
    double crash_at, restart_at; /* virtual seconds; restart_at < 0: never */
    double slow_f, slow;         /* --stragglers: the last slow_f train slow times slower */
    double byz;                  /* --byzantine: the first byz of the clients ... */
    fed_sim_attack attack;       /* ... send this */
    int loss_window;             /* --loss-window given: loss_p from loss_t1 to loss_t2 */
    double loss_p, loss_t1, loss_t2;
    int partition;               /* --partition-net given: groups from part_t1 to part_t2 */
    double groups, part_t1, part_t2;
} sim_faults;

#define FAULT_MAX_S 1e9 /* no fault time past this (its ms must fit a uint64_t) */

typedef struct sim_run sim_run;

typedef struct node_obs { /* each node's observer: the run and its number */
    sim_run *r;
    uint32_t i;
} node_obs;

struct sim_run {
    const fed_sim_scenario *sc;
    int peer_mode;
    fed_sim_world *w;
    fed_crypto_allow *allow;
    fed_sim_host *agg;
    fed_sim_host **h;      /* (nodes) clients or peers */
    uint32_t **idx;        /* (nodes) their shards */
    size_t *nidx;
    fed_sim_attack *attack; /* (nodes) --byzantine: each client's hooks and their ctx */
    node_obs *obs;         /* (nodes + 1) the observers; [nodes] the aggregator */
    fed_rng *crash_rng;    /* (nodes) --crash-rate's draws, one stream a node */
    round_sum *local;      /* (rounds + 1) this rank's reports since the last sync */
    round_sum *all;        /* (rounds + 1) everyone's, merged at each sync */
    agg_row *rows;         /* the aggregator's rows not yet emitted */
    size_t nrows, cap_rows;
    uint64_t next_row;     /* peers: the next round to report */
    uint64_t last_emitted; /* the last round reported */
    float last_lr;         /* the last row's rate */
    fed_sim_row_fn on_row;
    void *ctx;
    const fed_comm *comm; /* the ranks (NULL: one process) */
    fed_peer_id *ids;      /* (hosts) every host's identity, by world index */
    fed_dataset *own;      /* across ranks: this rank's nodes' samples only */
    fed_model_shape shape;
    fed_node_test_hooks peer_hooks; /* peers: the economies of node/test_hooks.h */
    fed_model *eval_model; /* peers: the one they all evaluate in (lent to each;
                              the world runs their events one at a time) */
    sim_faults f;          /* the fault and attack options, parsed */
};

static void emit(sim_run *r, const fed_sim_row *row)
{
    r->last_emitted = row->round;
    r->last_lr = row->lr;
    if (r->on_row)
        r->on_row(r->ctx, row);
}

static void round_sum_clear(round_sum *p)
{
    memset(p, 0, sizeof *p);
    p->lr_node = NO_NODE;
}

static void round_sum_merge(round_sum *to, const round_sum *from)
{
    if (from->measured) {
        if (!to->measured || from->acc_min < to->acc_min)
            to->acc_min = from->acc_min;
        if (!to->measured || from->acc_max > to->acc_max)
            to->acc_max = from->acc_max;
    }
    to->reports += from->reports;
    to->measured += from->measured;
    to->mixed += from->mixed;
    to->acc_fx += from->acc_fx;
    if (from->lr_node < to->lr_node) {
        to->lr_node = from->lr_node;
        to->lr = from->lr;
    }
    if (from->t_us > to->t_us)
        to->t_us = from->t_us;
}

static void on_round(void *ctx, const fed_node *n, const fed_node_round_info *info)
{
    node_obs *o = ctx;
    sim_run *r = o->r;
    uint64_t now = fed_sim_world_now_us(r->w);
    round_sum one;

    if (!r->peer_mode && fed_node_get_role(n) == FED_NODE_AGGREGATOR) {
        agg_row *a;

        if (r->nrows == r->cap_rows) {
            size_t cap = r->cap_rows ? 2 * r->cap_rows : 16;
            agg_row *p = fed_realloc(r->rows, cap * sizeof *p);

            if (!p) {
                fed_log(FED_LOG_ERROR, "sim: no memory for round %llu's row",
                        (unsigned long long)info->round);
                return;
            }
            r->rows = p;
            r->cap_rows = cap;
        }
        a = &r->rows[r->nrows++];
        a->round = info->round;
        a->t_us = now;
        a->accuracy = info->accuracy;
        a->merged = info->merged;
        a->epsilon = info->epsilon;
        a->loss = info->loss;
        return;
    }
    if (info->round < 1 || info->round > (uint64_t)r->sc->s.rounds)
        return;
    round_sum_clear(&one);
    one.t_us = now;
    if (info->lr > 0) {
        one.lr_node = o->i;
        one.lr = info->lr;
    }
    if (r->peer_mode) {
        one.reports = 1;
        one.mixed = info->merged;
        if (!isnan(info->accuracy)) {
            one.measured = 1;
            one.acc_min = one.acc_max = info->accuracy;
            one.acc_fx = (uint64_t)llround(info->accuracy * ACC_ONE);
        }
    }
    round_sum_merge(&r->local[info->round], &one);
    r->local[info->round].dirty = 1;
}

/* What a rank tells the others at each sync: its dirty rounds and its
 * aggregator rows, in little-endian records. */
enum { REC_ROUND = 1, REC_AGG = 2, REC_BYTES = 64 };

static void put_round(uint8_t *p, uint64_t round, const round_sum *s)
{
    p[0] = REC_ROUND;
    fed_put_u64le(p + 1, round);
    fed_put_u32le(p + 9, s->reports);
    fed_put_u32le(p + 13, s->measured);
    fed_put_u32le(p + 17, s->mixed);
    fed_put_u32le(p + 21, s->lr_node);
    fed_put_f32le(p + 25, s->lr);
    fed_put_u64le(p + 29, s->acc_fx);
    fed_put_f64le(p + 37, s->acc_min);
    fed_put_f64le(p + 45, s->acc_max);
    fed_put_u64le(p + 53, s->t_us);
}

static void get_round(const uint8_t *p, round_sum *s)
{
    round_sum_clear(s);
    s->reports = fed_get_u32le(p + 9);
    s->measured = fed_get_u32le(p + 13);
    s->mixed = fed_get_u32le(p + 17);
    s->lr_node = fed_get_u32le(p + 21);
    s->lr = fed_get_f32le(p + 25);
    s->acc_fx = fed_get_u64le(p + 29);
    s->acc_min = fed_get_f64le(p + 37);
    s->acc_max = fed_get_f64le(p + 45);
    s->t_us = fed_get_u64le(p + 53);
}

static void put_agg(uint8_t *p, const agg_row *a)
{
    p[0] = REC_AGG;
    fed_put_u64le(p + 1, a->round);
    fed_put_u64le(p + 9, a->t_us);
    fed_put_f64le(p + 17, a->accuracy);
    fed_put_u32le(p + 25, a->merged);
    fed_put_f64le(p + 29, a->epsilon);
    fed_put_f64le(p + 37, a->loss);
}

/* This rank's news since the last sync, as records; clears it. */
static fed_err pack_news(sim_run *r, uint8_t **out, size_t *len)
{
    size_t n = r->nrows;
    uint8_t *buf, *p;

    for (int k = 1; k <= r->sc->s.rounds; k++)
        n += r->local[k].dirty != 0;
    *out = NULL;
    *len = 0;
    if (!n)
        return FED_OK;
    if (!(buf = fed_calloc(n, REC_BYTES)))
        return FED_ERR_NOMEM;
    p = buf;
    for (int k = 1; k <= r->sc->s.rounds; k++)
        if (r->local[k].dirty) {
            put_round(p, (uint64_t)k, &r->local[k]);
            round_sum_clear(&r->local[k]);
            p += REC_BYTES;
        }
    for (size_t i = 0; i < r->nrows; i++, p += REC_BYTES)
        put_agg(p, &r->rows[i]);
    r->nrows = 0;
    *out = buf;
    *len = n * REC_BYTES;
    return FED_OK;
}

/* Everyone's news into r->all and, for the aggregator's, r->rows (one rank
 * holds the aggregator: its rows come in their order). */
static fed_err merge_news(sim_run *r, const uint8_t *buf, size_t len)
{
    for (size_t off = 0; off + REC_BYTES <= len; off += REC_BYTES) {
        const uint8_t *p = buf + off;
        uint64_t round = fed_get_u64le(p + 1);

        if (p[0] == REC_ROUND && round >= 1 && round <= (uint64_t)r->sc->s.rounds) {
            round_sum s;

            get_round(p, &s);
            round_sum_merge(&r->all[round], &s);
        } else if (p[0] == REC_AGG) {
            agg_row a = {round, fed_get_u64le(p + 9), fed_get_f64le(p + 17),
                         fed_get_u32le(p + 25), fed_get_f64le(p + 29), fed_get_f64le(p + 37)};

            if (r->nrows == r->cap_rows) {
                size_t cap = r->cap_rows ? 2 * r->cap_rows : 16;
                agg_row *q = fed_realloc(r->rows, cap * sizeof *q);

                if (!q)
                    return FED_ERR_NOMEM;
                r->rows = q;
                r->cap_rows = cap;
            }
            r->rows[r->nrows++] = a;
        } else {
            return FED_ERR_FORMAT;
        }
    }
    return FED_OK;
}

/* The rows due now: the aggregator's (their rate from the lowest client
 * that reported training that round, else the last row's), or the peers'
 * rounds every peer reported (flush: any reported), in order; each with the
 * bytes every node sent up to its time, summed over the ranks. */
static fed_err emit_due(sim_run *r, const fed_comm *comm, int flush)
{
    fed_sim_row *due = NULL;
    uint64_t *bytes = NULL;
    size_t n = 0, cap = r->peer_mode ? (size_t)r->sc->s.rounds + 1 : r->nrows + 1;
    fed_err e = FED_OK;

    if (!(due = fed_calloc(cap, sizeof *due)) || !(bytes = fed_calloc(cap, sizeof *bytes))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    if (!r->peer_mode) {
        for (size_t i = 0; i < r->nrows; i++) {
            fed_sim_row *row = &due[n++];

            row->round = r->rows[i].round;
            row->t_s = (double)r->rows[i].t_us / 1e6;
            row->accuracy = r->rows[i].accuracy;
            row->loss = r->rows[i].loss;
            row->merged = r->rows[i].merged;
            row->epsilon = r->rows[i].epsilon;
            bytes[n - 1] = r->rows[i].t_us;
        }
        r->nrows = 0;
    } else {
        for (uint64_t k = r->next_row; k <= (uint64_t)r->sc->s.rounds; k++) {
            const round_sum *p = &r->all[k];
            fed_sim_row *row;

            if (!flush && p->reports < (uint32_t)r->sc->nodes)
                break;
            r->next_row = k + 1;
            if (!p->reports)
                continue;
            row = &due[n++];
            row->round = k;
            row->t_s = (double)p->t_us / 1e6;
            row->accuracy = p->measured ? (double)p->acc_fx / ACC_ONE / p->measured : NAN;
            row->loss = NAN;
            row->spread = p->measured ? p->acc_max - p->acc_min : NAN;
            row->merged = p->mixed;
            row->lr = p->lr_node != NO_NODE ? p->lr : 0;
            bytes[n - 1] = p->t_us;
        }
    }
    for (size_t i = 0; i < n; i++)
        bytes[i] = fed_sim_world_bytes_at(r->w, bytes[i]);
    if (n && (e = fed_comm_allreduce(comm, bytes, n, FED_COMM_SUM)) != FED_OK)
        goto out;
    for (size_t i = 0; i < n; i++) {
        due[i].bytes = bytes[i];
        if (!r->peer_mode) {
            const round_sum *p = due[i].round <= (uint64_t)r->sc->s.rounds ? &r->all[due[i].round]
                                                                            : NULL;

            due[i].lr = p && p->lr_node != NO_NODE ? p->lr : r->last_lr;
        }
        if (fed_comm_rank(comm) == 0)
            emit(r, &due[i]);
        else
            r->last_emitted = due[i].round, r->last_lr = due[i].lr;
    }
out:
    fed_free(due);
    fed_free(bytes);
    return e;
}

/* At the end of a step (every rank at virtual time t_us): the news shared,
 * the rows due emitted, the byte marks no row can need again dropped. */
static fed_err sync_rows(sim_run *r, const fed_comm *comm, uint64_t t_us, int flush)
{
    uint8_t *mine = NULL, *all = NULL;
    size_t mine_len, all_len;
    uint64_t keep = t_us;
    fed_err e;

    if ((e = pack_news(r, &mine, &mine_len)) != FED_OK ||
        (e = fed_comm_allgather(comm, mine, mine_len, &all, &all_len)) != FED_OK ||
        (e = merge_news(r, all, all_len)) != FED_OK || (e = emit_due(r, comm, flush)) != FED_OK)
        goto out;
    for (uint64_t k = r->next_row; r->peer_mode && k <= (uint64_t)r->sc->s.rounds; k++)
        if (r->all[k].reports && r->all[k].t_us < keep)
            keep = r->all[k].t_us;
    fed_sim_world_bytes_forget(r->w, keep);
out:
    fed_free(mine);
    fed_free(all);
    return e;
}

/* Node i's place in the world: after the aggregator's (0), if any. */
static uint32_t node_index(const sim_run *r, int i)
{
    return (uint32_t)i + (r->peer_mode ? 0u : 1u);
}


/* Logs "sim: --OPT VALUE: WHY" (the value's control bytes as \xNN, as the
 * option loader shows outside text); FED_ERR_SPEC. */
static fed_err __attribute__((format(printf, 3, 4)))
refuse_opt(const char *opt, const char *value, const char *fmt, ...)
{
    char shown[4 * FED_SIM_STR + 1], why[256];
    size_t k = 0;
    va_list ap;

    for (const unsigned char *p = (const unsigned char *)value; *p && k + 5 < sizeof shown; p++)
        k += (size_t)snprintf(shown + k, sizeof shown - k, *p < 0x20 || *p == 0x7f ? "\\x%02x" : "%c",
                              *p);
    shown[k] = '\0';
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fed_log(FED_LOG_ERROR, "sim: --%s %s: %s", opt, shown, why);
    return FED_ERR_SPEC;
}

/* A time in virtual seconds at the start of s ("what" names it in a
 * refusal): *end after it. */
static fed_err parse_time(const char *opt, const char *value, const char *what, const char *s,
                          double *t, char **end)
{
    size_t sign = *s == '-' || *s == '+';

    *t = fed_strtod_decimal(s, end);
    if (*end == s || !(*t >= 0 && *t <= FAULT_MAX_S))
        return refuse_opt(opt, value, "%s '%.*s' is not a time: give virtual seconds, 0 to %g",
                          what, *end > s ? (int)(*end - s) : (int)(sign + strcspn(s + sign, ",@-:")),
                          s, FAULT_MAX_S);
    return FED_OK;
}

/* "FRACTION:REST" (rest_name names REST): the fraction, in [0, 1], and
 * what follows the colon. */
static fed_err parse_fraction(const char *opt, const char *s, const char *rest_name, double *f,
                              const char **rest)
{
    char *end;

    *f = fed_strtod_decimal(s, &end);
    if (end == s || !(*f >= 0 && *f <= 1))
        return refuse_opt(opt, s, "FRACTION:%s: the fraction '%.*s' is not a number from 0 to 1",
                          rest_name, (int)strcspn(s, ":"), s);
    if (*end != ':' || !end[1])
        return refuse_opt(opt, s, "FRACTION:%s: no %s after the fraction", rest_name,
                          rest_name);
    *rest = end + 1;
    return FED_OK;
}

/* "X@T1-T2" into x, t1 and t2 (virtual seconds, t1 <= t2); x_name names X. */
static fed_err parse_window(const char *opt, const char *value, const char *x_name, double *x,
                            double *t1, double *t2)
{
    char *end;
    fed_err e;

    *x = fed_strtod_decimal(value, &end);
    if (end == value || *end != '@')
        return refuse_opt(opt, value, "%s@T1-T2: %s", x_name,
                          end == value ? "it does not start with a number" : "no @ after the number");
    if ((e = parse_time(opt, value, "T1", end + 1, t1, &end)) != FED_OK)
        return e;
    if (*end != '-')
        return refuse_opt(opt, value, "%s@T1-T2: no -T2 after T1", x_name);
    if ((e = parse_time(opt, value, "T2", end + 1, t2, &end)) != FED_OK)
        return e;
    if (*end)
        return refuse_opt(opt, value, "%s@T1-T2: '%s' after T2", x_name, end);
    if (*t2 < *t1)
        return refuse_opt(opt, value, "the window ends (%g s) before it starts (%g s)", *t2, *t1);
    return FED_OK;
}

/* "NODE@S[,restart@S]" into f. */
static fed_err parse_crash(const fed_sim_scenario *sc, int peer_mode, sim_faults *f)
{
    const char *v = sc->crash, *s = v;
    char *end;
    fed_err e;

    f->crash = 1;
    f->restart_at = -1;
    if (!strncmp(s, "agg@", 4)) {
        if (peer_mode)
            return refuse_opt("crash", v, "peers have no aggregator: NODE is a peer, 0 to %d",
                              sc->nodes - 1);
        f->crash_node = -1;
        s += 4;
    } else {
        long k = strtol(s, &end, 10);

        if (end == s)
            return refuse_opt("crash", v, "NODE@SECONDS[,restart@SECONDS]: NODE is a number, "
                              "0 to %d%s", sc->nodes - 1, peer_mode ? "" : ", or agg");
        if (k < 0 || k >= sc->nodes)
            return refuse_opt("crash", v, "node %ld is not one of the %d nodes (0 to %d%s)", k,
                              sc->nodes, sc->nodes - 1, peer_mode ? "" : ", or agg");
        if (*end != '@')
            return refuse_opt("crash", v, "NODE@SECONDS[,restart@SECONDS]: no @SECONDS after "
                              "the node");
        f->crash_node = (int)k;
        s = end + 1;
    }
    if ((e = parse_time("crash", v, "SECONDS", s, &f->crash_at, &end)) != FED_OK)
        return e;
    if (*end == ',' && !strncmp(end + 1, "restart@", 8) &&
        (e = parse_time("crash", v, "restart's SECONDS", end + 9, &f->restart_at, &end)) !=
            FED_OK)
        return e;
    if (*end)
        return refuse_opt("crash", v, "NODE@SECONDS[,restart@SECONDS]: '%s' where the spec "
                          "should end or go on with ,restart@SECONDS", end);
    if (f->restart_at >= 0 && !(f->restart_at > f->crash_at))
        return refuse_opt("crash", v, "the restart (%g s) must come after the crash (%g s)",
                          f->restart_at, f->crash_at);
    return FED_OK;
}

/* The fault and attack options into f, each refusal logged. */
static fed_err check_faults(const fed_sim_scenario *sc, int peer_mode, sim_faults *f)
{
    const char *rest;
    char *end;
    fed_err e;

    memset(f, 0, sizeof *f);
    f->slow = 1;
    if (sc->crash[0] && (e = parse_crash(sc, peer_mode, f)) != FED_OK)
        return e;
    if (sc->stragglers[0]) {
        if ((e = parse_fraction("stragglers", sc->stragglers, "SLOWDOWN", &f->slow_f, &rest)) !=
            FED_OK)
            return e;
        f->slow = fed_strtod_decimal(rest, &end);
        if (end == rest || *end || !(f->slow >= 1 && f->slow <= 1e6))
            return refuse_opt("stragglers", sc->stragglers, "the slowdown '%s' is not a number "
                              "from 1 to 1e6 (how many times slower the stragglers train)",
                              rest);
    }
    if (sc->byzantine[0]) {
        if (peer_mode)
            return refuse_opt("byzantine", sc->byzantine, "Byzantine clients send their "
                              "deltas to an aggregator: peers have none (--role aggregator)");
        if ((e = parse_fraction("byzantine", sc->byzantine, "ATTACK", &f->byz, &rest)) != FED_OK)
            return e;
        if (fed_sim_attack_parse(rest, &f->attack) != FED_OK)
            return refuse_opt("byzantine", sc->byzantine, "the attack '%s' is not signflip:S, "
                              "noise:SIGMA or zero (S and SIGMA in (0, 1e6])", rest);
    }
    if (sc->loss_window[0]) {
        f->loss_window = 1;
        if ((e = parse_window("loss-window", sc->loss_window, "P", &f->loss_p, &f->loss_t1,
                              &f->loss_t2)) != FED_OK)
            return e;
        if (!(f->loss_p >= 0 && f->loss_p <= 1))
            return refuse_opt("loss-window", sc->loss_window, "the loss %g is not a share "
                              "from 0 to 1", f->loss_p);
    }
    if (sc->partition_net[0]) {
        f->partition = 1;
        if ((e = parse_window("partition-net", sc->partition_net, "GROUPS", &f->groups,
                              &f->part_t1, &f->part_t2)) != FED_OK)
            return e;
        if (!(f->groups >= 2 && f->groups <= sc->nodes && f->groups == floor(f->groups)))
            return refuse_opt("partition-net", sc->partition_net, "GROUPS is %g: the %d nodes "
                              "split into a whole number of groups, 2 to %d", f->groups,
                              sc->nodes, sc->nodes);
    }
    return FED_OK;
}

/* --loss-window and --partition-net (checked by check_faults). */
static fed_err schedule_network(sim_run *r)
{
    const sim_faults *f = &r->f;
    size_t n = fed_sim_world_node_count(r->w);
    uint32_t *group = NULL;
    fed_err e = FED_OK;

    if (f->loss_window &&
        (e = fed_sim_world_add_loss(r->w, f->loss_p, (uint64_t)(f->loss_t1 * 1000),
                                    (uint64_t)(f->loss_t2 * 1000))) != FED_OK)
        goto out;
    if (!f->partition)
        goto out;
    if (!(group = fed_calloc(n, sizeof *group))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    for (int i = 0; i < r->sc->nodes; i++) /* the aggregator stays in group 0 */
        group[node_index(r, i)] = (uint32_t)((size_t)i * (size_t)f->groups / (size_t)r->sc->nodes);
    e = fed_sim_world_add_partition(r->w, group, n, (uint64_t)(f->part_t1 * 1000),
                                    (uint64_t)(f->part_t2 * 1000));
out:
    fed_free(group);
    return e;
}

/* --crash's events (checked by check_faults). */
static fed_err schedule_crash(sim_run *r)
{
    const sim_faults *f = &r->f;
    uint32_t index = f->crash_node < 0 ? 0 : node_index(r, f->crash_node);
    fed_err e;

    if (!f->crash)
        return FED_OK;
    if ((e = fed_sim_world_crash_at(r->w, index, (uint64_t)(f->crash_at * 1000))) != FED_OK)
        return e;
    if (f->restart_at >= 0)
        return fed_sim_world_restart_at(r->w, index, (uint64_t)(f->restart_at * 1000));
    return FED_OK;
}

/* Settings every node shares: the scenario's fed_node_settings (checked by
 * fed_sim_run before), wait-clients 0 meaning every one of --nodes. */
static void base_config(sim_run *r, fed_node_config *c, const fed_dataset *train,
                        fed_backend *be, int i)
{
    const fed_sim_scenario *sc = r->sc;

    fed_node_config_default(c);
    if (fed_node_settings_apply(&sc->s, (uint32_t)sc->nodes, c, NULL) != FED_OK)
        fed_log(FED_LOG_ERROR, "sim: settings refused after the check"); /* not reached */
    c->be = be;
    c->graph = sc->graph; /* the aggregator's (and peers') model, whole */
    c->allow = r->allow;
    (void)train;
    c->shape = r->shape;
    c->shape.scale = fed_node_settings_input_scale(&sc->s);
    c->on_round = on_round;
    c->observer = &r->obs[i];
    c->transfer.wire.hooks = sc->no_crypto ? &fedi_wire_hooks_unsealed : NULL; /* unsealed frames */
}

static int owns(const sim_run *r, uint32_t index)
{
    return (int)(index % (uint32_t)fed_comm_size(r->comm)) == fed_comm_rank(r->comm);
}

/* Into the world, in index order: this rank's hosts with their nodes,
 * the others' as shadows (their identity only). */
static fed_err attach_nodes(sim_run *r, const fed_dataset *train, const fed_dataset *test,
                            fed_backend *be)
{
    const fed_sim_scenario *sc = r->sc;
    const sim_faults *f = &r->f;
    fed_node_config c;
    char path[512];
    fed_err e;

    if (!r->peer_mode && !r->agg && (e = fed_sim_world_add_remote(r->w, &r->ids[0], NULL)))
        return e;
    if (r->agg) {
        base_config(r, &c, train, be, sc->nodes);
        c.role = FED_NODE_AGGREGATOR;
        c.data.test = test;
        snprintf(path, sizeof path, "%s/aggregator.db", sc->db_dir);
        if ((e = fed_sim_host_attach(r->agg, r->w, &c, sc->db_dir[0] ? path : NULL)) != FED_OK)
            return e;
    }
    for (int i = 0; i < sc->nodes; i++) {
        if (!r->h[i]) {
            if ((e = fed_sim_world_add_remote(r->w, &r->ids[node_index(r, i)], NULL)) != FED_OK)
                return e;
            continue;
        }
        base_config(r, &c, train, be, i);
        c.data.train = train;
        c.data.shard = r->idx[i];
        c.data.shard_n = r->nidx[i];
        if ((e = fed_data_partition_noise(sc->s.partition, i, sc->nodes, &c.data.noise_std)) !=
            FED_OK)
            return e;
        if (r->peer_mode) {
            if (!r->eval_model && (e = fed_model_new(c.spec, c.shape, c.be, c.pool, c.shards, 256,
                                                     &r->eval_model)) != FED_OK)
                return e;
            r->peer_hooks.eval_model = r->eval_model;
            c.role = FED_NODE_PEER;
            c.data.test = !sc->eval_peers || i < sc->eval_peers ? test : NULL;
            c.peer.checkpoint_every = (uint32_t)sc->checkpoint_every;
            /* nothing restarts a peer, so nothing would read a checkpoint (a
               database on disk keeps them, for the record) */
            r->peer_hooks.no_checkpoints = !sc->crash[0] && !(sc->crash_rate > 0) &&
                                           !sc->db_dir[0];
            r->peer_hooks.no_final_mix_eval = 1; /* on_round keeps no row past --rounds */
            r->peer_hooks.train_model_per_job = 1;
            c.hooks = &r->peer_hooks; /* the same for every peer */
        } else {
            c.role = FED_NODE_CLIENT;
            c.client.aggregator = r->ids[0];
            if (i < (int)floor(f->byz * sc->nodes + 1e-9)) {
                r->attack[i] = f->attack;
                fed_sim_attack_install(&r->attack[i], &c, fed_sim_host_id(r->h[i])->key);
            }
        }
        snprintf(path, sizeof path, "%s/node-%d.db", sc->db_dir, i);
        if ((e = fed_sim_host_attach(r->h[i], r->w, &c, sc->db_dir[0] ? path : NULL)) != FED_OK)
            return e;
        if (i >= sc->nodes - (int)floor(f->slow_f * sc->nodes + 1e-9) &&
            (e = fed_sim_world_set_slowdown(r->w, node_index(r, i), f->slow)) != FED_OK)
            return e;
    }
    return FED_OK;
}

/* Every rank's identities into r->ids (index u32 and key, a record each). */
static fed_err share_ids(sim_run *r, size_t nhosts)
{
    uint8_t *mine = NULL, *all = NULL, *p;
    size_t n = 0, all_len = 0;
    fed_err e = FED_OK;

    for (size_t k = 0; k < nhosts; k++)
        n += owns(r, (uint32_t)k);
    if (n && !(mine = fed_malloc(n * 36)))
        return FED_ERR_NOMEM;
    p = mine;
    for (size_t k = 0; k < nhosts; k++)
        if (owns(r, (uint32_t)k)) {
            fed_put_u32le(p, (uint32_t)k);
            memcpy(p + 4, r->ids[k].key, 32);
            p += 36;
        }
    if ((e = fed_comm_allgather(r->comm, mine, n * 36, &all, &all_len)) != FED_OK)
        goto out;
    if (all_len != nhosts * 36) {
        e = FED_ERR_FORMAT;
        goto out;
    }
    for (size_t off = 0; off < all_len; off += 36) {
        uint32_t k = fed_get_u32le(all + off);

        if (k >= nhosts) {
            e = FED_ERR_FORMAT;
            goto out;
        }
        memcpy(r->ids[k].key, all + off + 4, 32);
    }
out:
    fed_free(mine);
    fed_free(all);
    return e;
}

/* --shard-samples N: the nodes whose shard holds another count, said once
 * (a shard of fewer samples stays whole; each of its labels keeps one at
 * least, and each label's share is rounded). */
static void say_shard_samples(const sim_run *r, const fed_sim_scenario *sc)
{
    size_t lo = SIZE_MAX, hi = 0;
    int off = 0, owned = 0;

    if (!sc->shard_samples)
        return;
    for (int i = 0; i < sc->nodes; i++) {
        if (!owns(r, node_index(r, i)))
            continue;
        owned++;
        if (r->nidx[i] == (size_t)sc->shard_samples)
            continue;
        off++;
        lo = r->nidx[i] < lo ? r->nidx[i] : lo;
        hi = r->nidx[i] > hi ? r->nidx[i] : hi;
    }
    if (off)
        fed_log(FED_LOG_WARN, "sim: --shard-samples %lld: %d of %d nodes keep another count "
                "(%zu to %zu samples): a shard of fewer samples stays whole, each label keeps "
                "one at least, and each label's share is rounded",
                (long long)sc->shard_samples, off, owned, lo, hi);
}

/* This rank's hosts (identities from their own streams), every host's
 * identity in the allow-list, this rank's nodes' shards. */
static fed_err build_hosts(sim_run *r, const fed_dataset *train)
{
    const fed_sim_scenario *sc = r->sc;
    size_t nhosts = (size_t)sc->nodes + (r->peer_mode ? 0 : 1);
    fed_rng idr;
    char name[32];
    fed_err e;

    /* secure aggregation: a slot per neighbour's shares (k < nodes) */
    uint32_t slots = sc->s.secagg ? 16 + FED_NODE_SECAGG_SLOTS(sc->nodes) : 0;

    if ((e = fed_crypto_allow_new(&r->allow)) != FED_OK)
        return e;
    if (!(r->ids = fed_calloc(nhosts, sizeof *r->ids)))
        return FED_ERR_NOMEM;
    if (!r->peer_mode && owns(r, 0)) {
        fed_rng_seed_stream(&idr, sc->s.seed, ID_STREAM);
        if ((e = fed_sim_host_new_slots(&idr, slots, &r->agg)) != FED_OK)
            return e;
        r->ids[0] = *fed_sim_host_id(r->agg);
    }
    for (int i = 0; i < sc->nodes; i++) {
        if (!owns(r, node_index(r, i)))
            continue;
        fed_rng_seed_stream(&idr, sc->s.seed, ID_STREAM + 1 + (uint64_t)i);
        if ((e = fed_sim_host_new_slots(&idr, slots, &r->h[i])) != FED_OK ||
            (e = fed_data_partition(train, sc->s.partition, i, sc->nodes, sc->s.seed, &r->idx[i],
                                    &r->nidx[i])) != FED_OK ||
            (e = fed_data_keep(train, r->idx[i], &r->nidx[i], (size_t)sc->shard_samples,
                               sc->s.seed ^ (0x6b656570ull + (uint64_t)i))) != FED_OK) /* "keep" */
            return e;
        r->ids[node_index(r, i)] = *fed_sim_host_id(r->h[i]);
        if (!r->nidx[i]) {
            fed_log(FED_LOG_ERROR, "sim: node %d's shard is empty (%s over %d nodes)", i,
                    sc->s.partition, sc->nodes);
            return FED_ERR_RANGE;
        }
    }
    say_shard_samples(r, sc);
    if (fed_comm_size(r->comm) > 1 && (e = share_ids(r, nhosts)) != FED_OK)
        return e;
    if (!r->peer_mode && (e = fed_crypto_allow_add(r->allow, "agg", r->ids[0].key)) != FED_OK)
        return e;
    for (int i = 0; i < sc->nodes; i++) {
        snprintf(name, sizeof name, "n%d", i);
        if ((e = fed_crypto_allow_add(r->allow, name, r->ids[node_index(r, i)].key)) != FED_OK)
            return e;
    }
    return FED_OK;
}

/* Only this rank's nodes' samples, in one dataset of their own (each
 * node's shard then the run of its samples there, in the same order, so
 * training sees the same samples); the whole set is freed. */
static fed_err keep_own_samples(sim_run *r, fed_dataset **train)
{
    size_t total = 0, off = 0;
    uint32_t *all = NULL;
    fed_err e = FED_OK;

    for (int i = 0; i < r->sc->nodes; i++)
        total += r->nidx[i];
    if (total) {
        if (!(all = fed_malloc(total * sizeof *all)))
            return FED_ERR_NOMEM;
        for (int i = 0; i < r->sc->nodes; i++) {
            memcpy(all + off, r->idx[i], r->nidx[i] * sizeof *all);
            for (size_t j = 0; j < r->nidx[i]; j++)
                r->idx[i][j] = (uint32_t)(off + j);
            off += r->nidx[i];
        }
        e = fed_data_subset(*train, all, total, &r->own);
        fed_free(all);
    }
    if (e == FED_OK) {
        fed_data_free(*train);
        *train = NULL;
    }
    return e;
}

/* --crash-rate: each up client or peer crashes with P a virtual second
 * (P / 10 a step of 100 ms), and restarts a second later. Every rank draws
 * for every node (from the node's stream), so each knows every crash. */
static fed_err random_crashes(sim_run *r, uint64_t t_ms)
{
    double p = r->sc->crash_rate * RUN_STEP_MS / 1000.0;

    for (int i = 0; p > 0 && i < r->sc->nodes; i++) {
        uint32_t k = node_index(r, i);

        if (fed_sim_world_node_up(r->w, k) && fed_rng_uniform(&r->crash_rng[i]) < p &&
            (fed_sim_world_crash_at(r->w, k, t_ms) != FED_OK ||
             fed_sim_world_restart_at(r->w, k, t_ms + 1000) != FED_OK))
            return FED_ERR_NOMEM;
    }
    return FED_OK;
}

/* This rank's nodes are done (the aggregator, or every peer). */
static int finished_here(const sim_run *r)
{
    fed_node *n;

    if (!r->peer_mode)
        return !r->agg || ((n = fed_sim_host_node(r->agg)) && fed_node_finished(n));
    for (int i = 0; i < r->sc->nodes; i++) {
        if (!r->h[i])
            continue;
        n = fed_sim_host_node(r->h[i]);
        if (n ? !fed_node_finished(n)
              : fed_sim_world_node_up(r->w, node_index(r, i))) /* not started yet */
            return 0;
    }
    return 1;
}

/* Each live peer of this rank: its most bytes noted, and its state then. */
static void peer_mem_sums(const sim_run *r, fed_sim_counters *c)
{
    fed_node_peer_mem m;
    fed_node *node;

    for (int i = 0; r->peer_mode && i < r->sc->nodes; i++)
        if (r->h[i] && (node = fed_sim_host_node(r->h[i])) &&
            fed_node_peer_mem_get(node, NULL, &m) == FED_OK) {
            c->peer_bytes += m.total;
            c->peer_state_bytes += m.state;
            c->peers_counted++;
        }
}

/* Client i's local training of m for --personal-eval: blocks of epochs
 * epochs on its shard (each block at most cap steps, 0: no cap), one
 * optimizer throughout with the round's settings (the constant --lr), its
 * noise: partition's noise on the batches. */
static fed_err personal_train(const sim_run *r, int i, fed_model *m, const fed_dataset *train,
                              int blocks, int epochs, long cap)
{
    const fed_node_settings *s = &r->sc->s;
    fed_optim *o = NULL;
    fed_trainer *t = NULL;
    fed_optim_cfg oc;
    fed_optim_kind kind;
    double noise = 0;
    fed_rng rng;
    fed_err e;

    if ((e = fed_optim_kind_parse(s->optimizer, &kind)) != FED_OK)
        return e;
    fed_optim_cfg_default(&oc, kind);
    if (s->lr > 0)
        oc.lr = (float)s->lr;
    if (kind == FED_OPTIM_SGD)
        oc.momentum = (float)s->momentum;
    oc.weight_decay = (float)s->weight_decay;
    fed_rng_seed_stream(&rng, s->seed, 0x70657273ull + (uint64_t)i); /* "pers" */
    if ((e = fed_optim_new(&oc, m, &o)) != FED_OK ||
        (e = fed_trainer_new(m, o, train, s->batch, &t)) != FED_OK ||
        (e = fed_data_partition_noise(s->partition, i, r->sc->nodes, &noise)) != FED_OK ||
        (e = fed_trainer_set_noise(t, noise, s->seed ^ (uint64_t)i)) != FED_OK)
        goto out;
    for (int b = 0; b < blocks && e == FED_OK; b++)
        for (int ep = 0; ep < epochs && e == FED_OK; ep++) {
            long left = cap * (b + 1) - fed_optim_steps(o);

            if (!cap)
                e = fed_trainer_epoch(t, r->idx[i], r->nidx[i], &rng, NULL);
            else if (left > 0)
                e = fed_trainer_steps(t, r->idx[i], r->nidx[i], left, &rng, NULL);
        }
out:
    fed_trainer_free(t);
    fed_optim_free(o);
    return e;
}

/* m's accuracy on client i's local test split idx[0..n) of test, its
 * inputs shifted as its training inputs are (noise:, from a stream of
 * their own). */
static fed_err personal_score(const sim_run *r, int i, fed_model *m, const fed_dataset *test,
                              const uint32_t *idx, size_t n, double *acc)
{
    const fed_node_settings *s = &r->sc->s;
    fed_step_stats st = {0};
    double noise = 0;
    fed_err e;

    if ((e = fed_data_partition_noise(s->partition, i, r->sc->nodes, &noise)) == FED_OK &&
        (e = fed_train_evaluate_noise(m, test, idx, n, noise, s->seed ^ 0x74657374ull ^ (uint64_t)i,
                                      &st)) == FED_OK) /* seed: "test" */
        *acc = st.samples ? (double)st.correct / (double)st.samples : NAN;
    return e;
}

/* One client's own model scored on its local test split: params (the
 * final global, nparams) with its local tensors put in, fine-tuned
 * sc->finetune_epochs on its shard, then evaluated; under --local-only
 * params is the initial model, trained --rounds x --local-epochs epochs
 * on the shard alone. The accuracy in *acc. */
static fed_err personal_one(const sim_run *r, int i, const fed_dataset *train,
                            const fed_dataset *test, fed_backend *be, fed_pool *pool,
                            float *params, double *acc)
{
    const fed_sim_scenario *sc = r->sc;
    const fed_node_settings *s = &sc->s;
    layout_rules rules = {.local_layers = s->local_layers, .local_bn = s->local_bn};
    fed_node_layout lay = {0};
    fed_node *node = fed_sim_host_node(r->h[i]); /* NULL under --local-only */
    fed_model *m = NULL;
    fed_model_shape in = r->shape;
    uint32_t *idx = NULL;
    const float *local;
    size_t n = 0, nlocal = 0;
    const fed_tensor_info *ti;
    int nt = 0;
    fed_err e;

    *acc = NAN;
    in.scale = fed_node_settings_input_scale(s);
    if ((e = fed_model_new(sc->graph ? sc->graph : s->model, in, be, pool, 1, s->batch, &m)) !=
            FED_OK ||
        (e = fed_data_partition(test, s->partition, i, sc->nodes, s->seed, &idx, &n)) != FED_OK)
        goto out;
    if (!n) /* its labels have no test sample: nothing to score */
        goto out;
    ti = fed_model_tensors(m, &nt);
    if ((e = fed_node_layout_of(ti, nt, fed_model_nparams(m), &rules, &lay)) != FED_OK)
        goto out;
    local = node ? fed_node_client_local(node, fed_model_nparams(m), &nlocal) : NULL;
    if (local && nlocal == lay.len[LAYOUT_LOCAL])
        fed_node_layout_scatter(&lay, LAYOUT_LOCAL, local, params);
    if (node && (local = fed_node_client_personal(node, fed_model_nparams(m))))
        params = (float *)memcpy(params, local, fed_model_nparams(m) * sizeof *params); /* Ditto */
    if ((e = fed_model_set_params(m, params)) != FED_OK)
        goto out;
    if (sc->local_only)
        e = personal_train(r, i, m, train, s->rounds, s->local_epochs, s->max_steps);
    else if (sc->finetune_epochs > 0) /* as the clients train: the round's settings */
        e = personal_train(r, i, m, train, 1, sc->finetune_epochs, 0);
    if (e == FED_OK)
        e = personal_score(r, i, m, test, idx, n, acc);
out:
    fed_model_free(m);
    fed_node_layout_fini(&lay);
    fed_free(idx);
    return e;
}

/* The model personal_eval starts each client from: the aggregator's final
 * global, or under --local-only (no node ever started) the model it starts
 * with, drawn here as it draws it (fed_model_init from --seed). Into
 * *params (fed_malloc'd, *np floats). */
static fed_err personal_start(const sim_run *r, fed_backend *be, fed_pool *pool, float **params,
                              size_t *np)
{
    const fed_node_settings *s = &r->sc->s;
    fed_node *agg = r->agg ? fed_sim_host_node(r->agg) : NULL;
    fed_model *m = NULL;
    fed_rng rng;
    fed_err e;

    *params = NULL;
    *np = agg ? fed_node_nparams(agg) : 0;
    if (!r->sc->local_only) {
        if (!agg || !*np) /* run() refused it across ranks */
            return FED_ERR_ROLE;
        if (!(*params = fed_malloc(*np * sizeof **params)))
            return FED_ERR_NOMEM;
        return fed_node_get_params(agg, *params);
    }
    fed_rng_seed(&rng, s->seed);
    if ((e = fed_model_new(r->sc->graph ? r->sc->graph : s->model, r->shape, be, pool, 1, 1, &m)) !=
            FED_OK ||
        (e = fed_model_init(m, &rng)) != FED_OK)
        goto out;
    *np = fed_model_nparams(m);
    if (!(*params = fed_malloc(*np * sizeof **params)))
        e = FED_ERR_NOMEM;
    else
        e = fed_model_get_params(m, *params);
out:
    fed_model_free(m);
    return e;
}

/* --personal-eval: every client's own model on its local test split, into
 * counters (one process, an aggregator's run; a client whose split is
 * empty is left out). Logs each and the mean and worst. */
static fed_err personal_eval(const sim_run *r, const fed_dataset *train, const fed_dataset *test,
                             fed_pool *pool, fed_sim_counters *counters)
{
    size_t np = 0;
    float *global = NULL, *params = NULL;
    fed_backend *be = NULL;
    double acc, sum = 0, worst = 1;
    fed_err e;

    counters->personal_n = 0;
    if ((e = fed_backend_cpu_new(1, &be)) != FED_OK ||
        (e = personal_start(r, be, pool, &global, &np)) != FED_OK)
        goto out;
    if (!(params = fed_malloc(np * sizeof *params))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    for (int i = 0; i < r->sc->nodes && i < FED_SIM_PERSONAL_MAX; i++) {
        memcpy(params, global, np * sizeof *params);
        if ((e = personal_one(r, i, train, test, be, pool, params, &acc)) != FED_OK)
            goto out;
        if (isnan(acc))
            continue;
        counters->personal_ppm[counters->personal_n++] = (uint64_t)llround(acc * 1e6);
        sum += acc;
        worst = acc < worst ? acc : worst;
        fed_log(FED_LOG_INFO, "sim: client %d's own model: accuracy %.4f on its local test split",
                i, acc);
    }
    if (counters->personal_n)
        fed_log(FED_LOG_INFO, "sim: personalized accuracy over %llu clients: mean %.4f, worst "
                "%.4f", (unsigned long long)counters->personal_n,
                sum / (double)counters->personal_n, worst);
out:
    fed_backend_free(be);
    fed_free(params);
    fed_free(global);
    return e;
}

/* sha256 of the final global model; for peers, of every peer's estimate's
 * sha256 in node order (32 bytes a peer, whichever rank holds it). */
static fed_err final_hash(const sim_run *r, uint8_t out[32])
{
    crypto_hash_sha256_state st;
    uint8_t *mine = NULL, *all = NULL;
    size_t n = 0, all_len = 0;
    fed_node *node;
    fed_err e = FED_OK;

    crypto_hash_sha256_init(&st);
    if (!r->peer_mode && r->agg && (node = fed_sim_host_node(r->agg))) {
        size_t np = fed_node_nparams(node);
        float *p = fed_malloc(np * sizeof *p);

        if (p && fed_node_get_params(node, p) == FED_OK)
            crypto_hash_sha256_update(&st, (const uint8_t *)p, np * sizeof *p);
        fed_free(p);
    }
    if (r->peer_mode) {
        if (!(mine = fed_calloc((size_t)r->sc->nodes, 36)))
            return FED_ERR_NOMEM;
        for (int i = 0; i < r->sc->nodes; i++)
            if (r->h[i] && (node = fed_sim_host_node(r->h[i]))) {
                size_t d = fed_node_peer_dim(node);
                double *z = fed_malloc(d * sizeof *z);

                if (z && fed_node_peer_estimate(node, z) == FED_OK) {
                    fed_put_u32le(mine + 36 * n, (uint32_t)i);
                    crypto_hash_sha256(mine + 36 * n + 4, (const uint8_t *)z, d * sizeof *z);
                    n++;
                }
                fed_free(z);
            }
        if ((e = fed_comm_allgather(r->comm, mine, 36 * n, &all, &all_len)) != FED_OK)
            goto out;
        /* in node order: node i's record, wherever it came from */
        for (int i = 0; i < r->sc->nodes; i++)
            for (size_t off = 0; off + 36 <= all_len; off += 36)
                if (fed_get_u32le(all + off) == (uint32_t)i) {
                    crypto_hash_sha256_update(&st, all + off + 4, 32);
                    break;
                }
    }
    crypto_hash_sha256_final(&st, out);
out:
    fed_free(mine);
    fed_free(all);
    return e;
}

static void run_free(sim_run *r)
{
    fed_sim_world_free(r->w); /* first: it waits for jobs */
    fed_sim_host_free(r->agg);
    for (int i = 0; r->h && i < r->sc->nodes; i++) {
        fed_sim_host_free(r->h[i]);
        fed_free(r->idx[i]);
    }
    fed_free(r->ids);
    fed_data_free(r->own);
    fed_free(r->h);
    fed_free(r->idx);
    fed_free(r->nidx);
    fed_free(r->attack);
    fed_free(r->obs);
    fed_free(r->crash_rng);
    fed_free(r->local);
    fed_free(r->all);
    fed_free(r->rows);
    fed_crypto_allow_free(r->allow);
    fed_model_free(r->eval_model); /* after the peers that borrowed it */
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
    const fed_node *n = h ? fed_sim_host_node(h) : NULL;

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

/* What --local-only cannot mean: the options that shape a federation's
 * rounds or what a client keeps of them (no round runs), and a schedule
 * (its training runs at the constant --lr). NULL: none. */
static const char *local_only_misuse(const fed_sim_scenario *sc)
{
    const fed_node_settings *s = &sc->s;

    if (s->local_layers[0] || s->local_bn || s->ditto_lambda > 0)
        return "--local-only trains each client alone: --local-layers, --local-bn and "
               "--ditto-lambda keep parts of a federated model, and no round runs";
    if (sc->finetune_epochs)
        return "--local-only trains each client alone already: give its epochs as --rounds x "
               "--local-epochs, not --finetune-epochs";
    if (strcmp(s->lr_schedule, "const") != 0 || s->lr_warmup)
        return "--local-only trains at the constant --lr: leave --lr-schedule and --lr-warmup "
               "out";
    return NULL;
}

/* The scenario's settings, checked once for every node. */
static fed_err check_scenario(const fed_sim_scenario *sc, int peer_mode)
{
    fed_node_config probe;
    const char *bad = NULL, *why = NULL;

    fed_node_config_default(&probe);
    if (!peer_mode && strcmp(sc->role, "aggregator") != 0)
        why = "--role: fedsim runs an aggregator with its clients (aggregator) or peers (peer)";
    else if (sc->s.rounds < 1)
        why = "--rounds 0 (forever) has no end to simulate: give a number of rounds";
    else if (sc->personal_eval && peer_mode)
        why = "--personal-eval scores an aggregator's clients: peers have none";
    else if (peer_mode && !strcmp(sc->s.dflags.task, "regression"))
        why = "--task regression runs with an aggregator: a peer's rows score accuracies, which "
              "a regression has none of (the aggregator's rows give its mse)";
    else if (sc->personal_eval && !strcmp(sc->s.dflags.task, "regression"))
        why = "--personal-eval scores each client's accuracy: a regression (--task "
              "regression) has none; the rows give the global model's mse";
    else if (sc->finetune_epochs && !sc->personal_eval)
        why = "--finetune-epochs fine-tunes the models --personal-eval scores: give both";
    else if (sc->local_only && !sc->personal_eval)
        why = "--local-only's only figures are --personal-eval's: give both";
    else if (peer_mode && strcmp(sc->s.strategy, "fedavg") != 0)
        why = "--strategy is the aggregator's: peers merge by --mixing";
    else if (!peer_mode && sc->loss >= 1)
        why = "--loss 1 loses every frame, so no client ever reaches the aggregator and no "
              "round can finish: give a share below 1 (--loss-window 1@T1-T2 cuts the network "
              "for a while)";
    else if (fed_node_settings_apply(&sc->s, (uint32_t)sc->nodes, &probe, &bad) != FED_OK && !bad)
        bad = "settings";
    if (why || bad) {
        if (why)
            fed_log(FED_LOG_ERROR, "sim: %s", why);
        else
            fed_log(FED_LOG_ERROR, "sim: --%s is not valid here (see fedsim --help)", bad);
        return FED_ERR_SPEC;
    }
    if (sc->s.ditto_lambda > 0 && !sc->personal_eval)
        fed_log(FED_LOG_WARN, "sim: --ditto-lambda trains personal models that only "
                "--personal-eval scores; without it the rows show the global model alone");
    /* one settings block for every node: --dp-sgd goes to the clients,
       --require-dp-sgd to the aggregator */
    {
        fed_node_settings clients = sc->s;

        clients.require_dp_sgd = peer_mode && sc->s.require_dp_sgd;
        if (!peer_mode) { /* DP-FedAvg's settings are the aggregator's */
            clients.dp_client_clip = clients.dp_target_epsilon = 0;
            clients.dp_client_quantile = 0;
        }
        bad = fed_node_settings_dp_misuse(&clients, peer_mode ? FED_NODE_PEER : FED_NODE_CLIENT);
        if (!bad)
            bad = fed_node_settings_local_misuse(&sc->s, peer_mode ? FED_NODE_PEER
                                                                    : FED_NODE_AGGREGATOR);
    }
    if (!bad && sc->local_only)
        bad = local_only_misuse(sc);
    if (bad) {
        fed_log(FED_LOG_ERROR, "sim: %s", bad);
        return FED_ERR_SPEC;
    }
    if (sc->s.dp_sgd)
        fed_log(FED_LOG_WARN, "sim: DP-SGD's noise comes from each node's seeded stream, so "
                "the run repeats: it shows what DP-SGD costs, and is not private");
    if (sc->s.dp_client_clip > 0)
        fed_log(FED_LOG_WARN, "sim: DP-FedAvg's noise and draw come from the aggregator's "
                "seeded stream, so the run repeats: it shows what DP-FedAvg costs, and is "
                "not private");
    return FED_OK;
}

/* What changes when a round makes progress: the rows emitted, and the
 * peers' reports of any round. The same on every rank after sync_rows. */
static uint64_t progress_mark(const sim_run *r)
{
    uint64_t m = r->last_emitted;

    for (int k = 1; r->peer_mode && k <= r->sc->s.rounds; k++)
        m += r->all[k].reports;
    return m;
}

/* A round's longest timer, in virtual ms, and its option's name: a run
 * stops after FED_SIM_STALL_ROUNDS of it without progress. */
static uint64_t round_timer_ms(const fed_sim_scenario *sc, const char **name)
{
    int longest = sc->s.deadline_ms;

    *name = "--deadline-ms";
    if (sc->s.gather_ms > longest)
        longest = sc->s.gather_ms, *name = "--gather-ms";
    if (sc->s.secagg && sc->s.secagg_stage_ms > longest)
        longest = sc->s.secagg_stage_ms, *name = "--secagg-stage-ms";
    return (uint64_t)longest;
}

/* Why no round may be finishing at t_ms, as far as the scenario says (the
 * same words on every rank), into why. */
static void stall_cause(const sim_run *r, uint64_t t_ms, char *why, size_t cap)
{
    const fed_sim_scenario *sc = r->sc;
    const sim_faults *f = &r->f;

    if (f->crash && f->crash_node >= 0 && f->restart_at < 0 && t_ms >= f->crash_at * 1000)
        snprintf(why, cap, "node %d has been down since %g s for good (--crash %s has no "
                 "restart)%s", f->crash_node, f->crash_at, sc->crash,
                 !r->peer_mode && sc->s.min_clients >= sc->nodes
                     ? ", and --min-clients needs a delta from every client" : "");
    else if (sc->crash_rate > 0)
        snprintf(why, cap, "--crash-rate %g keeps nodes down", sc->crash_rate);
    else if (sc->loss > 0 || f->loss_window || f->partition)
        snprintf(why, cap, "frames are lost (--loss, --loss-window or --partition-net), "
                 "retries too");
    else
        snprintf(why, cap, "none the scenario names: FEDNODE_LOG=info logs what the %s "
                 "waits for", r->peer_mode ? "peers" : "aggregator");
}

/* Whether a scheduled fault heals after t_ms (a restart, a loss window's
 * or a partition's end): the run waits for it. *last: the latest heal at
 * or before t_ms, in ms (0: none). */
static int heals_later(const sim_faults *f, uint64_t t_ms, uint64_t *last)
{
    double heal[3] = {f->crash ? f->restart_at : -1, f->loss_window ? f->loss_t2 : -1,
                      f->partition ? f->part_t2 : -1};
    int later = 0;

    *last = 0;
    for (int k = 0; k < 3; k++) {
        uint64_t at;

        if (heal[k] < 0)
            continue;
        at = (uint64_t)(heal[k] * 1000);
        if (at > t_ms)
            later = 1;
        else if (at > *last)
            *last = at;
    }
    return later;
}

/* 0 while the run can still finish; else logged why, FED_ERR_TIMEOUT: the
 * aggregator down for good (--crash agg@S with no restart), or no progress
 * (*mark, since *since_ms or the last fault healed) for FED_SIM_STALL_ROUNDS
 * x round_timer_ms while no scheduled fault is still to heal. */
static fed_err check_stalled(sim_run *r, uint64_t t_ms, uint64_t *mark, uint64_t *since_ms)
{
    const sim_faults *f = &r->f;
    uint64_t now = progress_mark(r);
    const char *timer;
    uint64_t timer_ms = round_timer_ms(r->sc, &timer), healed;
    char why[256];

    if (f->crash && f->crash_node < 0 && f->restart_at < 0 && t_ms >= f->crash_at * 1000) {
        fed_log(FED_LOG_ERROR, "sim: the aggregator crashed at %g s and never restarts (--crash "
                "%s): round %llu of %d cannot finish; stopping (give ,restart@SECONDS)",
                f->crash_at, r->sc->crash, (unsigned long long)r->last_emitted + 1,
                r->sc->s.rounds);
        return FED_ERR_TIMEOUT;
    }
    if (now != *mark) {
        *mark = now;
        *since_ms = t_ms;
        return FED_OK;
    }
    if (heals_later(f, t_ms, &healed))
        return FED_OK;
    if (healed > *since_ms)
        *since_ms = healed;
    if (t_ms - *since_ms < FED_SIM_STALL_ROUNDS * timer_ms)
        return FED_OK;
    stall_cause(r, t_ms, why, sizeof why);
    fed_log(FED_LOG_ERROR, "sim: no round finished for %g virtual seconds (%g s to %g s, %d x "
            "%s %llu): stopping; the likely cause: %s", (double)(t_ms - *since_ms) / 1000,
            (double)*since_ms / 1000, (double)t_ms / 1000, FED_SIM_STALL_ROUNDS, timer,
            (unsigned long long)timer_ms, why);
    return FED_ERR_TIMEOUT;
}

/* Whether every rank is done, and the worst error any rank met (each logs
 * its own): one reduction a step. */
static fed_err step_status(sim_run *r, int *done)
{
    uint64_t v[2] = {!finished_here(r), (uint64_t)check_started(r)};
    fed_err e = fed_comm_allreduce(r->comm, v, 2, FED_COMM_MAX);

    *done = !v[0];
    return e != FED_OK ? e : (fed_err)v[1];
}

static fed_err run(const fed_sim_scenario *sc, const fed_dataset *train, fed_dataset **own_train,
                   const fed_dataset *test, fed_pool *pool, const fed_comm *comm,
                   double max_virtual_s, fed_sim_row_fn on_row, void *ctx, uint8_t hash[32],
                   fed_sim_counters *counters)
{
    sim_run r;
    fed_sim_config wc;
    fed_backend *be = NULL;
    uint64_t t = 0, mark = 0, since = 0;
    int done = 0;
    fed_err e;

    memset(&r, 0, sizeof r);
    r.sc = sc;
    r.on_row = on_row;
    r.ctx = ctx;
    r.comm = comm;
    r.next_row = 1;
    r.peer_mode = !strcmp(sc->role, "peer");
    if ((e = check_scenario(sc, r.peer_mode)) != FED_OK ||
        (e = check_faults(sc, r.peer_mode, &r.f)) != FED_OK)
        return e;
    if (sc->personal_eval && fed_comm_size(comm) > 1) {
        fed_log(FED_LOG_ERROR, "sim: --personal-eval runs in one process (not across ranks)");
        return FED_ERR_SPEC;
    }
    if (!train)
        train = *own_train;
    r.shape = train->shape;
    memset(&wc, 0, sizeof wc);
    wc.seed = sc->s.seed;
    wc.link.latency_ms = sc->latency_ms;
    wc.link.jitter_ms = sc->jitter_ms;
    wc.link.floor_ms = sc->latency_floor_ms;
    wc.link.loss = sc->loss;
    wc.link.bytes_per_ms = sc->bandwidth_mbps * 1000.0;
    wc.flops_per_ms = sc->gflops * 1e6;
    wc.epoch_base_s = 1700000000;
    wc.pool = pool;
    wc.comm = comm;
    r.h = fed_calloc((size_t)sc->nodes, sizeof *r.h);
    r.idx = fed_calloc((size_t)sc->nodes, sizeof *r.idx);
    r.nidx = fed_calloc((size_t)sc->nodes, sizeof *r.nidx);
    r.attack = fed_calloc((size_t)sc->nodes, sizeof *r.attack);
    r.obs = fed_calloc((size_t)sc->nodes + 1, sizeof *r.obs);
    r.crash_rng = fed_calloc((size_t)sc->nodes, sizeof *r.crash_rng);
    r.local = fed_calloc((size_t)sc->s.rounds + 1, sizeof *r.local);
    r.all = fed_calloc((size_t)sc->s.rounds + 1, sizeof *r.all);
    if (!r.h || !r.idx || !r.nidx || !r.attack || !r.obs || !r.crash_rng || !r.local || !r.all) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    for (int i = 0; i <= sc->nodes; i++)
        r.obs[i] = (node_obs){&r, (uint32_t)i};
    for (int i = 0; i < sc->nodes; i++)
        fed_rng_seed_stream(&r.crash_rng[i], sc->s.seed, CRASH_STREAM + (uint64_t)i);
    for (int k = 0; k <= sc->s.rounds; k++) {
        round_sum_clear(&r.local[k]);
        round_sum_clear(&r.all[k]);
    }
    if ((e = fed_backend_cpu_new(1, &be)) != FED_OK || (e = fed_sim_world_new(&wc, &r.w)) != FED_OK)
        goto out;
    if (comm && !fed_sim_world_lookahead_us(r.w)) {
        fed_log(FED_LOG_ERROR, "sim: across ranks a frame needs a least delay (the lookahead): "
                "give --latency-floor-ms above 0 (or --latency-ms above 0 without jitter)");
        e = FED_ERR_SPEC;
        goto out;
    }
    if ((e = build_hosts(&r, train)) != FED_OK ||
        (own_train && (e = keep_own_samples(&r, own_train)) != FED_OK) ||
        (e = attach_nodes(&r, own_train ? r.own : train, test, be)) != FED_OK ||
        (e = schedule_crash(&r)) != FED_OK || (e = schedule_network(&r)) != FED_OK)
        goto out;
    /* the aggregator's last row comes once that round's evaluation is back;
       --local-only runs no round (its clients train in personal_eval) */
    while (!sc->local_only && (!done || (!r.peer_mode && r.last_emitted < (uint64_t)sc->s.rounds)) &&
           t < (uint64_t)(max_virtual_s * 1000)) {
        t += RUN_STEP_MS;
        if ((e = random_crashes(&r, t)) != FED_OK || (e = fed_sim_world_run_until(r.w, t)) != FED_OK ||
            (e = step_status(&r, &done)) != FED_OK || (e = sync_rows(&r, comm, t * 1000, 0)) != FED_OK ||
            (!done && (e = check_stalled(&r, t, &mark, &since)) != FED_OK))
            goto out;
    }
    if ((e = sync_rows(&r, comm, t * 1000, 1)) != FED_OK || (e = step_status(&r, &done)) != FED_OK)
        goto out;
    if (hash && (e = final_hash(&r, hash)) != FED_OK)
        goto out;
    if (counters) {
        fed_sim_world_counters(r.w, counters);
        peer_mem_sums(&r, counters);
        if (sc->personal_eval && !r.peer_mode &&
            (e = personal_eval(&r, own_train ? r.own : train, test, pool, counters)) != FED_OK)
            goto out;
        if ((e = fed_comm_allreduce(comm, (uint64_t *)counters,
                                    sizeof *counters / sizeof(uint64_t), FED_COMM_SUM)) != FED_OK)
            goto out;
    }
    if (!done && !sc->local_only) {
        fed_log(FED_LOG_ERROR, "sim: the rounds did not finish in %g virtual seconds (the "
                "run's limit): stopping", max_virtual_s);
        e = FED_ERR_TIMEOUT;
    }
out:
    run_free(&r);
    fed_backend_free(be);
    return e;
}

fed_err fed_sim_run(const fed_sim_scenario *sc, const fed_dataset *train, const fed_dataset *test,
                    fed_pool *pool, double max_virtual_s, fed_sim_row_fn on_row, void *ctx,
                    uint8_t hash[32], fed_sim_counters *counters)
{
    return run(sc, train, NULL, test, pool, NULL, max_virtual_s, on_row, ctx, hash, counters);
}

fed_err fed_sim_run_ranks(const fed_sim_scenario *sc, fed_dataset **train,
                          const fed_dataset *test, fed_pool *pool, const fed_comm *comm,
                          double max_virtual_s, fed_sim_row_fn on_row, void *ctx,
                          uint8_t hash[32], fed_sim_counters *counters)
{
    if (!train || !*train)
        return FED_ERR_INVAL;
    return run(sc, NULL, train, test, pool, comm, max_virtual_s, on_row, ctx, hash, counters);
}

int fed_sim_rank_needs_test(const fed_sim_scenario *sc, int rank, int size)
{
    int peer_mode = !strcmp(sc->role, "peer");

    if (!peer_mode)
        return rank == 0; /* the aggregator is node 0 */
    for (int i = rank; i < sc->nodes; i += size)
        if (!sc->eval_peers || i < sc->eval_peers)
            return 1;
    return 0;
}
