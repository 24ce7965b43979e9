/* bench_peer.c - peer mode's figures for the issue note, logreg on
 * Fashion-MNIST's shape (784*10 + 10 = 7,850 parameters).
 * 1. Rounds to 1e-6 consensus for 1,000 peers per topology: push-sum in
 *    running-sums form (gossip/pushsum.h), training off, synchronous rounds
 *    in which every peer gives 1/(m+1) of its (x, w) to each of its round's
 *    m out-neighbours (tests/test_pushsum.c's net_round, without loss), every
 *    peer starting from its own N(0,1) vector, until every estimate is
 *    within 1e-6 of the exact mean, the error measured per coordinate
 *    relative to the spread (max - min) of that coordinate's starting
 *    values. Short vectors (8 doubles) for every topology, then random:3 at
 *    logreg's 7,850 (same rounds: push-sum is linear, coordinate by
 *    coordinate) with the memory it held. Topologies that do not get there
 *    in a bounded number of rounds get the per-round contraction measured
 *    over the last rounds and the rounds it predicts, next to the
 *    second-eigenvalue prediction where it has a closed form (ring), and a
 *    plain-array run of the same mixing matrix taken to the end.
 * 2. Bytes sent per node per round, peer mode (random:3, bsp, real training
 *    on IID shards) against aggregator mode (FedAvg) for the same model and
 *    the same 100 nodes, from the wire counters of real sealed frames in the
 *    simulator (sim/world.h, sim/host.h), in the steady state of rounds 2..4;
 *    and why they differ (SHAREs carry K f64 running totals, a client one
 *    f32 delta).
 * 3. Exact all-reduce (gossip/allreduce.h) for n = 8, 64 and 1,000 at logreg's
 *    length: ring, tree and butterfly run in-process in lockstep (every
 *    member's sends of a step delivered, then every member advances), the
 *    result checked against the key-order mean (one round, every member the
 *    same bits); bytes a peer sends a round, as payload (f64) and as sealed
 *    SLICE frames, the ring's payload against 2(n-1)/n of the model; wall
 *    time a round with 100 MB/s links and 5 ms latency, modelled as the sum
 *    over steps of 5 ms + the most bytes one member sends in the step / 100
 *    MB/s, plus the fault rule's check (AR_VERIFY rows, ceil(log2 n) hops);
 *    groups of 16 (--group-size: ceil(log_16 n) rounds of group all-reduces,
 *    weights carried, ring or butterfly inside). Next to push-sum on random:3 (rounds to 1e-6 measured here, 8
 *    doubles; each round K = 3 SHAREs of the whole vector, one latency) and
 *    the aggregator (one f32 MODEL down and one f32 DELTA up a client, the
 *    aggregator's link carrying n of each).
 * Prints figures and ratios; asserts nothing about time. */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/err.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/rng.h"
#include "crypto/allow.h"
#include "gossip/allreduce.h"
#include "gossip/pushsum.h"
#include "gossip/topology.h"
#include "gossip/wire.h"
#include "model/backend.h"
#include "model/codec.h"
#include "model/data.h"
#include "model/merge.h"
#include "model/model.h"
#include "node/node.h"
#include "sim/host.h"
#include "sim/world.h"

#define NPEERS 1000
#define SHORT_DIM 8
#define TOL 1e-6
#define MAX_ROUNDS 30000  /* pushsum.h rounds per topology at most */
#define TAIL 1000         /* rounds the measured contraction is taken over */
#define REF_MAX_ROUNDS 4000000 /* the plain-array runs */
#define REF_CHECK 64      /* rounds between their error checks */
#define SEED 7

/* Part 2 runs 100 nodes: an aggregator takes at most FED_MERGE_DEFAULT_MAX_CLIENTS
 * (128) clients a round, so with 1,000 most clients would sit rounds out; and
 * 1,000 training peers took about 50 s (6.5 GB) on the 2-core machine this
 * was written on. A peer's and a client's bytes per round do not depend on N. */
#define SIM_NODES 100
#define SIM_ROUNDS 4
#define SIM_SEED 11

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A field of /proc/self/status ("VmRSS:", "VmHWM:") in bytes; 0 if unknown. */
static double proc_bytes(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;

    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, strlen(field))) {
            kb = strtod(line + strlen(field), NULL);
            break;
        }
    fclose(f);
    return kb * 1024.0;
}

/* Peak RSS (VmHWM) back to the current RSS (Linux 4.0 on); ignored elsewhere. */
static void reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");

    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

static void die(const char *what, fed_err e)
{
    fprintf(stderr, "bench_peer: %s: %s\n", what, fed_strerror(e));
    exit(1);
}

/* ==== part 1: consensus ==== */

/* Peer i's starting vector: dim N(0,1) values from (seed, i) alone, so the
 * push-sum run and the plain-array run start from the same numbers. */
static void start_vector(uint64_t seed, size_t i, size_t dim, double *v)
{
    fed_rng r;

    fed_rng_seed_stream(&r, seed, i);
    for (size_t d = 0; d < dim; d++)
        v[d] = fed_rng_normal(&r);
}

/* The exact mean and the spread (max - min) of each coordinate's start. */
static fed_err start_stats(uint64_t seed, size_t n, size_t dim, double *mean, double *spread)
{
    double *v = fed_malloc(dim * sizeof *v), *lo = fed_malloc(dim * sizeof *lo);
    double *hi = fed_malloc(dim * sizeof *hi);
    fed_err e = FED_ERR_NOMEM;

    if (!v || !lo || !hi)
        goto out;
    memset(mean, 0, dim * sizeof *mean);
    for (size_t i = 0; i < n; i++) {
        start_vector(seed, i, dim, v);
        for (size_t d = 0; d < dim; d++) {
            mean[d] += v[d];
            lo[d] = i == 0 || v[d] < lo[d] ? v[d] : lo[d];
            hi[d] = i == 0 || v[d] > hi[d] ? v[d] : hi[d];
        }
    }
    for (size_t d = 0; d < dim; d++) {
        mean[d] /= (double)n;
        spread[d] = hi[d] - lo[d];
    }
    e = FED_OK;
out:
    fed_free(v);
    fed_free(lo);
    fed_free(hi);
    return e;
}

/* n peers mixing by pushsum.h, keys in member order. */
typedef struct cons {
    size_t n, dim;
    fed_gossip_topo *topo;
    fed_gossip_ps **ps;   /* (n) */
    uint8_t (*key)[32];   /* (n) */
    double *mean, *spread, *z; /* (dim) each */
    uint32_t *nbr;        /* (n) scratch */
    uint8_t (*okeys)[32]; /* (n) scratch */
    double *frac;         /* (n) scratch */
    uint8_t *out0, *in0;  /* (n) peer 0's out- and in-neighbours so far */
    uint64_t frames;      /* mixing frames sent, all rounds */
    size_t max_out;       /* the largest out-degree seen */
} cons;

static void cons_free(cons *t)
{
    for (size_t i = 0; t->ps && i < t->n; i++)
        fed_gossip_ps_free(t->ps[i]);
    fed_free(t->ps);
    fed_free(t->key);
    fed_free(t->mean);
    fed_free(t->spread);
    fed_free(t->z);
    fed_free(t->nbr);
    fed_free(t->okeys);
    fed_free(t->frac);
    fed_free(t->out0);
    fed_free(t->in0);
    fed_gossip_topo_free(t->topo);
    memset(t, 0, sizeof *t);
}

static fed_err cons_new(cons *t, const char *spec, size_t n, size_t dim, uint64_t seed)
{
    fed_err e;

    memset(t, 0, sizeof *t);
    t->n = n;
    t->dim = dim;
    if ((e = fed_gossip_topo_new(spec, n, seed, &t->topo)) != FED_OK)
        goto out;
    t->ps = fed_calloc(n, sizeof *t->ps);
    t->key = fed_calloc(n, sizeof *t->key);
    t->mean = fed_malloc(dim * sizeof *t->mean);
    t->spread = fed_malloc(dim * sizeof *t->spread);
    t->z = fed_malloc(dim * sizeof *t->z);
    t->nbr = fed_malloc(n * sizeof *t->nbr);
    t->okeys = fed_malloc(n * sizeof *t->okeys);
    t->frac = fed_malloc(n * sizeof *t->frac);
    t->out0 = fed_calloc(n, 1);
    t->in0 = fed_calloc(n, 1);
    e = FED_ERR_NOMEM;
    if (!t->ps || !t->key || !t->mean || !t->spread || !t->z || !t->nbr || !t->okeys ||
        !t->frac || !t->out0 || !t->in0)
        goto out;
    if ((e = start_stats(seed, n, dim, t->mean, t->spread)) != FED_OK)
        goto out;
    for (size_t i = 0; i < n; i++) {
        t->key[i][0] = (uint8_t)(i >> 8); /* keys in member order */
        t->key[i][1] = (uint8_t)i;
        if ((e = fed_gossip_ps_new(dim, 0, &t->ps[i])) != FED_OK)
            goto out;
        start_vector(seed, i, dim, t->z);
        fed_gossip_ps_set(t->ps[i], t->z, 1.0);
    }
out:
    if (e != FED_OK)
        cons_free(t);
    return e;
}

/* One synchronous round: every peer splits 1/(m+1) to each of its m
 * out-neighbours and hands each its running total; then every peer adds
 * what it was given (tests/test_pushsum.c's net_round, no loss). */
static fed_err cons_round(cons *t, uint64_t round)
{
    fed_err e;

    for (size_t i = 0; i < t->n; i++) {
        size_t m = fed_gossip_topo_out(t->topo, i, round, t->nbr);

        for (size_t j = 0; j < m; j++) {
            memcpy(t->okeys[j], t->key[t->nbr[j]], 32);
            t->frac[j] = 1.0 / (double)(m + 1);
            if (i == 0)
                t->out0[t->nbr[j]] = 1;
        }
        if ((e = fed_gossip_ps_split(t->ps[i], (const uint8_t(*)[32])t->okeys, t->frac, m)) !=
            FED_OK)
            return e;
        for (size_t j = 0; j < m; j++) {
            const double *x;
            double w;

            if ((e = fed_gossip_ps_total(t->ps[i], t->key[t->nbr[j]], &x, &w)) != FED_OK ||
                (e = fed_gossip_ps_receive(t->ps[t->nbr[j]], t->key[i], 1, round, x, w, NULL)) !=
                    FED_OK)
                return e;
        }
        t->frames += m;
        t->max_out = m > t->max_out ? m : t->max_out;
    }
    for (size_t j = 0, m = fed_gossip_topo_in(t->topo, 0, round, t->nbr); j < m; j++)
        t->in0[t->nbr[j]] = 1;
    for (size_t i = 0; i < t->n; i++)
        (void)fed_gossip_ps_apply(t->ps[i]);
    return FED_OK;
}

/* max over peers i and coordinates d of |x_i/w_i - mean_d| / spread_d;
 * *head the same over the first SHORT_DIM coordinates only. */
static double cons_error(cons *t, double *head)
{
    double worst = 0;

    *head = 0;
    for (size_t i = 0; i < t->n; i++) {
        fed_gossip_ps_estimate_f64(t->ps[i], t->z);
        for (size_t d = 0; d < t->dim; d++) {
            double e = fabs(t->z[d] - t->mean[d]) / t->spread[d];

            worst = e > worst ? e : worst;
            if (d < SHORT_DIM)
                *head = e > *head ? e : *head;
        }
    }
    return worst;
}

static size_t count_set(const uint8_t *a, size_t n)
{
    size_t c = 0;

    for (size_t i = 0; i < n; i++)
        c += a[i] != 0;
    return c;
}

/* The same mixing in plain arrays, for a topology whose lists do not change
 * from round to round: x' = W x, w' = W w with W[j][i] = 1/(m_i + 1) for i
 * = j or i an in-neighbour of j: what pushsum.h computes without loss, up
 * to rounding (the running sums add differences of totals). The error only
 * ever falls (each estimate is a convex combination of the last round's),
 * so it is checked every REF_CHECK rounds and the last stretch is redone
 * round by round from a copy. *err_at gets the error after round at. */
typedef struct ref_run {
    long rounds;          /* to TOL; 0: not within REF_MAX_ROUNDS */
    double seconds;
    double err_at;
} ref_run;

static void ref_step(size_t n, const uint32_t *off, const uint32_t *idx, const double *c,
                     double (*x)[SHORT_DIM], double *w, double (*y)[SHORT_DIM], double *wy)
{
    for (size_t i = 0; i < n; i++) {
        wy[i] = w[i] * c[i];
        for (int d = 0; d < SHORT_DIM; d++)
            y[i][d] = x[i][d] * c[i];
    }
    for (size_t j = 0; j < n; j++) {
        double a[SHORT_DIM], aw = wy[j];

        for (int d = 0; d < SHORT_DIM; d++)
            a[d] = y[j][d];
        for (uint32_t k = off[j]; k < off[j + 1]; k++) {
            uint32_t i = idx[k];

            aw += wy[i];
            for (int d = 0; d < SHORT_DIM; d++)
                a[d] += y[i][d];
        }
        w[j] = aw;
        for (int d = 0; d < SHORT_DIM; d++)
            x[j][d] = a[d];
    }
}

static double ref_error(size_t n, double (*x)[SHORT_DIM], const double *w, const double *mean,
                        const double *spread)
{
    double worst = 0;

    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < SHORT_DIM; d++) {
            double e = fabs(x[i][d] / w[i] - mean[d]) / spread[d];

            worst = e > worst ? e : worst;
        }
    return worst;
}

static fed_err ref_consensus(const char *spec, size_t n, uint64_t seed, long at, ref_run *res)
{
    fed_gossip_topo *topo = NULL;
    uint32_t *off = fed_calloc(n + 1, sizeof *off), *idx = NULL, *tmp = fed_malloc(n * sizeof *tmp);
    double *c = fed_malloc(n * sizeof *c), *w = fed_malloc(n * sizeof *w);
    double *wy = fed_malloc(n * sizeof *wy), *w0 = fed_malloc(n * sizeof *w0);
    double (*x)[SHORT_DIM] = fed_malloc(n * sizeof *x), (*y)[SHORT_DIM] = fed_malloc(n * sizeof *y);
    double (*x0)[SHORT_DIM] = fed_malloc(n * sizeof *x0);
    double mean[SHORT_DIM], spread[SHORT_DIM], t0 = now_s();
    size_t edges = 0;
    long r0 = 0;
    fed_err e = FED_ERR_NOMEM;

    memset(res, 0, sizeof *res);
    if (!off || !tmp || !c || !w || !wy || !w0 || !x || !y || !x0)
        goto out;
    if ((e = fed_gossip_topo_new(spec, n, seed, &topo)) != FED_OK ||
        (e = start_stats(seed, n, SHORT_DIM, mean, spread)) != FED_OK)
        goto out;
    for (size_t j = 0; j < n; j++)
        edges += fed_gossip_topo_in(topo, j, 1, tmp);
    e = FED_ERR_NOMEM;
    if (!(idx = fed_malloc((edges ? edges : 1) * sizeof *idx)))
        goto out;
    for (size_t j = 0; j < n; j++) {
        off[j + 1] = off[j] + (uint32_t)fed_gossip_topo_in(topo, j, 1, idx + off[j]);
        c[j] = 1.0 / (double)(fed_gossip_topo_out(topo, j, 1, tmp) + 1);
        w[j] = 1.0;
        start_vector(seed, j, SHORT_DIM, x[j]);
    }
    memcpy(x0, x, n * sizeof *x);
    memcpy(w0, w, n * sizeof *w);
    for (long r = 1; r <= REF_MAX_ROUNDS; r++) {
        ref_step(n, off, idx, c, x, w, y, wy);
        if (r == at)
            res->err_at = ref_error(n, x, w, mean, spread);
        if (r % REF_CHECK)
            continue;
        if (ref_error(n, x, w, mean, spread) >= TOL) {
            memcpy(x0, x, n * sizeof *x);
            memcpy(w0, w, n * sizeof *w);
            r0 = r;
            continue;
        }
        memcpy(x, x0, n * sizeof *x); /* under TOL in (r0, r]: which round */
        memcpy(w, w0, n * sizeof *w);
        for (res->rounds = r0 + 1; res->rounds < r; res->rounds++) { /* the same bits again */
            ref_step(n, off, idx, c, x, w, y, wy);
            if (ref_error(n, x, w, mean, spread) < TOL)
                break;
        }
        break;
    }
    res->seconds = now_s() - t0;
    e = FED_OK;
out:
    fed_gossip_topo_free(topo);
    fed_free(off);
    fed_free(idx);
    fed_free(tmp);
    fed_free(c);
    fed_free(w);
    fed_free(wy);
    fed_free(w0);
    fed_free(x);
    fed_free(y);
    fed_free(x0);
    return e;
}

/* One topology through pushsum.h: rounds to TOL or MAX_ROUNDS. */
typedef struct cons_result {
    int rounds;           /* to TOL; 0: not within MAX_ROUNDS */
    int ran;              /* rounds run */
    int rounds_head;      /* to TOL over the first SHORT_DIM coordinates */
    double err0, err_end, seconds;
    double frames_mean;   /* mixing frames sent per peer per round */
    size_t frames_max;
    double rate;          /* measured contraction over the last TAIL rounds */
    size_t out0, in0;     /* peer 0's distinct out-/in-neighbours (pairs it keeps) */
} cons_result;

static fed_err run_consensus(const char *spec, size_t n, size_t dim, int max_rounds,
                             cons_result *res)
{
    double *hist = fed_malloc(((size_t)max_rounds + 1) * sizeof *hist);
    double t0 = now_s(), head;
    cons t;
    fed_err e;

    memset(res, 0, sizeof *res);
    if (!hist)
        return FED_ERR_NOMEM;
    if ((e = cons_new(&t, spec, n, dim, SEED)) != FED_OK) {
        fed_free(hist);
        return e;
    }
    hist[0] = res->err0 = cons_error(&t, &head);
    for (int r = 1; r <= max_rounds; r++) {
        if ((e = cons_round(&t, (uint64_t)r)) != FED_OK)
            goto out;
        hist[r] = cons_error(&t, &head);
        res->ran = r;
        if (!res->rounds_head && head < TOL)
            res->rounds_head = r;
        if (hist[r] < TOL) {
            res->rounds = r;
            break;
        }
    }
    res->err_end = hist[res->ran];
    if (!res->rounds && res->ran > TAIL)
        res->rate = pow(hist[res->ran] / hist[res->ran - TAIL], 1.0 / TAIL);
    res->frames_mean = (double)t.frames / ((double)n * res->ran);
    res->frames_max = t.max_out;
    res->out0 = count_set(t.out0, n);
    res->in0 = count_set(t.in0, n);
out:
    res->seconds = now_s() - t0;
    cons_free(&t);
    fed_free(hist);
    return e;
}

static double predict(const cons_result *r, double rate)
{
    return r->ran + log(TOL / r->err_end) / log(rate);
}

static void part_consensus(size_t logreg_dim)
{
    static const char *const specs[] = {"full", "random:3", "smallworld:4,0.1", "tree", "ring"};
    size_t share_bytes = 0;
    fed_codec f64 = {.id = FED_CODEC_F64};

    if (fed_codec_size(&f64, logreg_dim, &share_bytes) != FED_OK)
        die("codec size", FED_ERR_INTERNAL);
    share_bytes = fed_wire_frame_bytes(fed_wire_block_size(FED_WIRE_SHARE) + share_bytes);
    printf("\n== 1. rounds to consensus: %d peers, push-sum in running-sums form "
           "(gossip/pushsum.h)\n", NPEERS);
    printf("training off; each peer starts from its own N(0,1) vector of %d doubles; synchronous\n"
           "rounds, each peer gives 1/(m+1) of (x, w) to each of its round's m out-neighbours and\n"
           "keeps 1/(m+1) (tests/test_pushsum.c's net_round, no loss). Error = max over peers and\n"
           "coordinates of |x/w - exact mean| / (max - min of that coordinate's starting values);\n"
           "target 1e-6, at most %d rounds through pushsum.h. A SHARE at logreg's %zu parameters\n"
           "is %zu bytes sealed (f64 running totals), so bytes/node/round = frames x that.\n",
           SHORT_DIM, MAX_ROUNDS, logreg_dim, share_bytes);
    printf("%-17s %13s %10s %9s %8s %12s\n", "topology", "frames/node/rd", "(max)",
           "rounds", "wall s", "KB/node/rd");
    for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
        cons_result r;
        fed_err e = run_consensus(specs[k], NPEERS, SHORT_DIM, MAX_ROUNDS, &r);
        int fixed = strncmp(specs[k], "random:", 7) != 0;
        char rounds[32];

        if (e != FED_OK)
            die(specs[k], e);
        if (r.rounds)
            snprintf(rounds, sizeof rounds, "%d", r.rounds);
        else
            snprintf(rounds, sizeof rounds, ">%d", r.ran);
        printf("%-17s %13.3f %10zu %9s %8.2f %12.1f\n", specs[k], r.frames_mean, r.frames_max,
               rounds, r.seconds, r.frames_mean * (double)share_bytes / 1e3);
        if (!r.rounds && r.rate > 0) {
            double p_meas = predict(&r, r.rate);

            printf("  after %d rounds the error is %.3g (from %.3g); contraction over the last %d "
                   "rounds:\n  %.8f a round -> predicts %.0f rounds to 1e-6\n",
                   r.ran, r.err_end, r.err0, TAIL, r.rate, p_meas);
            if (!strcmp(specs[k], "ring")) {
                double l2 = (1.0 + 2.0 * cos(2.0 * M_PI / NPEERS)) / 3.0;
                double l3 = (1.0 + 2.0 * cos(4.0 * M_PI / NPEERS)) / 3.0;

                printf("  second eigenvalue of W = circulant(1/3,1/3,1/3), (1 + 2cos(2pi/n))/3:\n"
                       "  %.8f a round -> predicts %.0f rounds\n", l2, predict(&r, l2));
                printf("  (the measured rate is still faster than lambda2: the next mode, %.8f, "
                       "has shrunk only by\n  exp(%.2f) relative to the slowest by round %d, "
                       "so it still counts)\n", l3, r.ran * (log(l3) - log(l2)), r.ran);
            }
        }
        if (fixed) {
            ref_run ref;

            if ((e = ref_consensus(specs[k], NPEERS, SEED, r.ran, &ref)) != FED_OK)
                die("reference", e);
            if (ref.rounds)
                printf("  plain arrays, same W, same start: %ld rounds to 1e-6 (%.2f s); error "
                       "after round %d\n  %.6g there, %.6g through pushsum.h\n",
                       ref.rounds, ref.seconds, r.ran, ref.err_at, r.err_end);
            else
                printf("  plain arrays, same W: not within %d rounds\n", REF_MAX_ROUNDS);
        }
    }
    {
        double rss0, rss1, hwm, per_peer;
        cons_result r;
        fed_err e;

        malloc_trim(0);
        reset_peak();
        rss0 = proc_bytes("VmRSS:");
        e = run_consensus("random:3", NPEERS, logreg_dim, MAX_ROUNDS, &r);
        if (e != FED_OK)
            die("random:3 at logreg's length", e);
        rss1 = proc_bytes("VmHWM:");
        hwm = rss1 - rss0;
        per_peer = (1.0 + (double)r.out0 + 2.0 * (double)r.in0) * (double)logreg_dim * 8.0;
        printf("random:3 at logreg's length (%zu doubles a peer): %d rounds to 1e-6 (%.2f s)\n"
               "  over all %zu coordinates; over its first %d, which start from the same numbers "
               "as the\n  %d-double run above: %d rounds.\n  Push-sum is linear, coordinate by "
               "coordinate: the length changes nothing but how many\n  coordinates the max "
               "is taken over (%zu starts give a few farther out than %d do).\n",
               logreg_dim, r.rounds, r.seconds, logreg_dim, SHORT_DIM, SHORT_DIM, r.rounds_head,
               logreg_dim, SHORT_DIM);
        printf("  memory: the peak RSS rose %.0f MB above the %.0f MB before the run = %.2f MB a "
               "peer;\n  pushsum.h holds x, %zu out-totals, %zu in-totals and their held copies\n"
               "  = %zu x %zu doubles = %.2f MB a peer\n",
               hwm / 1e6, rss0 / 1e6, hwm / NPEERS / 1e6, r.out0, r.in0,
               1 + r.out0 + 2 * r.in0, logreg_dim, per_peer / 1e6);
    }
}

/* ==== part 2: bytes on the wire, in the simulator ==== */

/* Per node: its wire bytes_out at its commit of round 1 and of the last
 * round (peer: its own commits; aggregator mode: the aggregator's, read off
 * every node at that instant), so the figure is the steady state of rounds
 * 2..R, without the HELLOs and first contacts. */
typedef struct sim_scene {
    fed_sim_world *w;
    fed_crypto_allow *allow;
    fed_sim_host **h;     /* (nh) peers in key order; or [0] aggregator, then clients */
    size_t nh;
    uint32_t **idx;       /* (nh) shards */
    size_t *nidx;
    uint64_t *out1, *outR, *in1, *inR, *sh1, *shR; /* (nh) bytes_out, bytes_in and
                                                       frames sealed at the commits */
    int *done;            /* (nh) rounds finished */
    double *loss1, *lossR;/* (nh) peers' training loss in round 1 and R */
    uint32_t rounds;
    int agg_mode;
    uint32_t merged_min;  /* aggregator: the fewest deltas merged in a round */
    double seconds;       /* wall time of the run */
    fed_sim_counters ctr; /* the world's, at the end */
} sim_scene;

static int key_cmp_host(const void *a, const void *b)
{
    return memcmp(fed_sim_host_id(*(fed_sim_host *const *)a)->key,
                  fed_sim_host_id(*(fed_sim_host *const *)b)->key, 32);
}

/* Host index of the node with this key (peers are in key order). */
static size_t peer_index(const sim_scene *s, const uint8_t key[32])
{
    size_t lo = 0, hi = s->nh;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(fed_sim_host_id(s->h[mid])->key, key, 32);

        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return SIZE_MAX;
}

static void snap(sim_scene *s, size_t i, const fed_node *n, int last)
{
    const fed_wire_counters *c = fed_node_wire_counters(n);

    (last ? s->outR : s->out1)[i] = c->bytes_out;
    (last ? s->inR : s->in1)[i] = c->bytes_in;
    (last ? s->shR : s->sh1)[i] = c->sealed;
}

static void on_round_peer(void *ctx, const fed_node *n, const fed_node_round_info *r)
{
    sim_scene *s = ctx;
    size_t i = peer_index(s, fed_node_key(n));

    if (i == SIZE_MAX)
        return;
    s->done[i] = (int)r->round;
    if (r->round == 1) {
        snap(s, i, n, 0);
        s->loss1[i] = r->loss;
    } else if (r->round == s->rounds) {
        snap(s, i, n, 1);
        s->lossR[i] = r->loss;
    }
}

static void on_round_agg(void *ctx, const fed_node *n, const fed_node_round_info *r)
{
    sim_scene *s = ctx;

    if (fed_node_get_role(n) != FED_NODE_AGGREGATOR)
        return;
    s->done[0] = (int)r->round;
    if (r->round == 1 || r->merged < s->merged_min)
        s->merged_min = r->merged;
    if (r->round != 1 && r->round != s->rounds)
        return;
    for (size_t i = 0; i < s->nh; i++) {
        const fed_node *m = i == 0 ? n : fed_sim_host_node(s->h[i]);

        if (m)
            snap(s, i, m, r->round != 1);
    }
}

static void scene_free(sim_scene *s)
{
    fed_sim_world_free(s->w);
    for (size_t i = 0; s->h && i < s->nh; i++)
        fed_sim_host_free(s->h[i]);
    for (size_t i = 0; s->idx && i < s->nh; i++)
        fed_free(s->idx[i]);
    fed_free(s->h);
    fed_free(s->idx);
    fed_free(s->nidx);
    fed_free(s->out1);
    fed_free(s->outR);
    fed_free(s->in1);
    fed_free(s->inR);
    fed_free(s->sh1);
    fed_free(s->shR);
    fed_free(s->done);
    fed_free(s->loss1);
    fed_free(s->lossR);
    fed_crypto_allow_free(s->allow);
    memset(s, 0, sizeof *s);
}

/* n peers (agg_mode 0) or 1 aggregator + n clients (agg_mode 1), logreg,
 * rounds rounds, IID shards of train. */
static fed_err scene_build(sim_scene *s, int agg_mode, size_t n, uint32_t rounds,
                           const fed_dataset *train, fed_backend *be, fed_pool *pool)
{
    fed_sim_config wc;
    fed_rng idrng;
    size_t nh = n + (agg_mode ? 1 : 0);
    fed_err e = FED_ERR_NOMEM;

    memset(s, 0, sizeof *s);
    s->nh = nh;
    s->rounds = rounds;
    s->agg_mode = agg_mode;
    s->h = fed_calloc(nh, sizeof *s->h);
    s->idx = fed_calloc(nh, sizeof *s->idx);
    s->nidx = fed_calloc(nh, sizeof *s->nidx);
    s->out1 = fed_calloc(nh, sizeof *s->out1);
    s->outR = fed_calloc(nh, sizeof *s->outR);
    s->in1 = fed_calloc(nh, sizeof *s->in1);
    s->inR = fed_calloc(nh, sizeof *s->inR);
    s->sh1 = fed_calloc(nh, sizeof *s->sh1);
    s->shR = fed_calloc(nh, sizeof *s->shR);
    s->done = fed_calloc(nh, sizeof *s->done);
    s->loss1 = fed_calloc(nh, sizeof *s->loss1);
    s->lossR = fed_calloc(nh, sizeof *s->lossR);
    if (!s->h || !s->idx || !s->nidx || !s->out1 || !s->outR || !s->in1 || !s->inR || !s->sh1 ||
        !s->shR || !s->done || !s->loss1 || !s->lossR)
        goto out;
    memset(&wc, 0, sizeof wc); /* as tests/test_peer.c and test_node.c */
    wc.seed = SIM_SEED;
    wc.link.latency_ms = 5;
    wc.link.jitter_ms = 1;
    wc.link.bytes_per_ms = 100000; /* 100 MB/s */
    wc.flops_per_ms = 5e6;
    wc.epoch_base_s = 1700000000;
    wc.pool = pool;
    if ((e = fed_sim_world_new(&wc, &s->w)) != FED_OK ||
        (e = fed_crypto_allow_new(&s->allow)) != FED_OK)
        goto out;
    fed_rng_seed_stream(&idrng, SIM_SEED, 77);
    for (size_t i = 0; i < nh; i++)
        if ((e = fed_sim_host_new(&idrng, &s->h[i])) != FED_OK)
            goto out;
    /* peers: host i is member i; aggregator mode: aggregator first */
    qsort(s->h + agg_mode, n, sizeof *s->h, key_cmp_host);
    for (size_t i = 0; i < nh; i++) {
        char name[32];

        if (agg_mode && i == 0)
            snprintf(name, sizeof name, "aggregator");
        else
            snprintf(name, sizeof name, "node%zu", i);
        if ((e = fed_crypto_allow_add(s->allow, name, fed_sim_host_id(s->h[i])->key)) != FED_OK)
            goto out;
    }
    for (size_t i = 0; i < nh; i++) {
        fed_node_config c;

        fed_node_config_default(&c);
        c.seed = SIM_SEED;
        c.be = be;
        c.allow = s->allow;
        c.rounds = rounds;
        c.observer = s;
        snprintf(c.spec, sizeof c.spec, "logreg");
        c.shape = train->shape;
        if (agg_mode && i == 0) {
            c.role = FED_NODE_AGGREGATOR;
            c.agg.min_clients = (uint32_t)n;
            c.agg.wait_clients = (uint32_t)n;
            c.on_round = on_round_agg;
        } else {
            int shard = (int)(i - (size_t)agg_mode);

            if ((e = fed_data_partition(train, "iid", shard, (int)n, SIM_SEED, &s->idx[i],
                                        &s->nidx[i])) != FED_OK)
                goto out;
            c.data.train = train;
            c.data.shard = s->idx[i];
            c.data.shard_n = s->nidx[i];
            if (agg_mode) {
                c.role = FED_NODE_CLIENT;
                c.client.aggregator = *fed_sim_host_id(s->h[0]);
            } else {
                c.role = FED_NODE_PEER;
                snprintf(c.peer.topology, sizeof c.peer.topology, "random:3");
                snprintf(c.peer.sync, sizeof c.peer.sync, "bsp");
                c.on_round = on_round_peer;
            }
        }
        if ((e = fed_sim_host_attach(s->h[i], s->w, &c, NULL)) != FED_OK)
            goto out;
    }
out:
    if (e != FED_OK)
        scene_free(s);
    return e;
}

static int scene_done(const sim_scene *s)
{
    if (s->agg_mode)
        return s->done[0] >= (int)s->rounds;
    for (size_t i = 0; i < s->nh; i++)
        if (s->done[i] < (int)s->rounds)
            return 0;
    return 1;
}

/* Runs until every round is in (bounded in virtual time); FED_ERR_TIMEOUT
 * if not. */
static fed_err scene_run(sim_scene *s, uint64_t limit_ms)
{
    uint64_t t = 0;
    double t0 = now_s();
    fed_err e;

    while (!scene_done(s)) {
        if (t >= limit_ms)
            return FED_ERR_TIMEOUT;
        t += 100;
        if ((e = fed_sim_world_run_until(s->w, t)) != FED_OK)
            return e;
    }
    s->seconds = now_s() - t0;
    fed_sim_world_counters(s->w, &s->ctr);
    return FED_OK;
}

/* Steady-state figures per round of hosts [from, to). */
typedef struct traffic {
    double out_mean, out_max, in_mean, frames;
} traffic;

static traffic per_round(const sim_scene *s, size_t from, size_t to)
{
    double span = (double)(s->rounds - 1), k = (double)(to - from);
    traffic t = {0};

    for (size_t i = from; i < to; i++) {
        double b = (double)(s->outR[i] - s->out1[i]) / span;

        t.out_mean += b / k;
        t.out_max = b > t.out_max ? b : t.out_max;
        t.in_mean += (double)(s->inR[i] - s->in1[i]) / span / k;
        t.frames += (double)(s->shR[i] - s->sh1[i]) / span / k;
    }
    return t;
}

static void part_bytes(const fed_dataset *train, size_t nparams)
{
    fed_backend *be = NULL;
    fed_pool *pool = NULL;
    sim_scene peer, agg;
    traffic p, c, a;
    double l1 = 0, lR = 0;
    size_t share = 0, f32 = 0, ack, delta, model, next;
    fed_codec c64 = {.id = FED_CODEC_F64}, c32 = {.id = FED_CODEC_F32};
    fed_err e;

    printf("\n== 2. bytes sent per node per round: peer vs aggregator mode, %d nodes, logreg "
           "(%zu parameters)\n", SIM_NODES, nparams);
    printf("(%d, not 1,000: an aggregator takes at most %d clients a round, so most of 1,000\n"
           "would sit rounds out)\n", SIM_NODES, FED_MERGE_DEFAULT_MAX_CLIENTS);
    if (!train) {
        printf("skipped: no Fashion-MNIST at $FEDNODE_DATA or %s\n", FED_DATA_DEFAULT_DIR);
        return;
    }
    if ((e = fed_backend_cpu_new(1, &be)) != FED_OK || (e = fed_pool_new(2, &pool)) != FED_OK)
        die("backend or pool", e);
    if (fed_codec_size(&c64, nparams, &share) != FED_OK ||
        fed_codec_size(&c32, nparams, &f32) != FED_OK)
        die("codec size", FED_ERR_INTERNAL);
    share = fed_wire_frame_bytes(fed_wire_block_size(FED_WIRE_SHARE) + share);
    delta = fed_wire_frame_bytes(fed_wire_block_size(FED_WIRE_DELTA) + f32);
    model = fed_wire_frame_bytes(fed_wire_block_size(FED_WIRE_MODEL) + f32);
    ack = fed_wire_frame_bytes(fed_wire_block_size(FED_WIRE_ACK));
    next = fed_wire_frame_bytes(fed_wire_block_size(FED_WIRE_NEXT));
    printf("simulator (sim/world.h + sim/host.h), every frame sealed and opened, in-memory "
           "databases;\n%d rounds, figures = each node's wire bytes_out between its commit of "
           "round 1 and of round %d,\n/ %d (the steady state: no HELLO or first contact). "
           "Frames sealed: SHARE %zu B,\nDELTA %zu B, MODEL %zu B, ACK %zu B, NEXT %zu B.\n",
           SIM_ROUNDS, SIM_ROUNDS, SIM_ROUNDS - 1, share, delta, model, ack, next);

    if ((e = scene_build(&peer, 0, SIM_NODES, SIM_ROUNDS, train, be, pool)) != FED_OK ||
        (e = scene_run(&peer, 3600 * 1000)) != FED_OK)
        die("peer mode", e);
    p = per_round(&peer, 0, peer.nh);
    for (size_t i = 0; i < peer.nh; i++) {
        l1 += peer.loss1[i] / (double)peer.nh;
        lR += peer.lossR[i] / (double)peer.nh;
    }
    printf("peer mode: random:3, bsp, %d peers training on IID shards (%zu samples each; mean "
           "training loss\n  %.3f in round 1, %.3f in round %d): %.1f s; frames dropped %llu, node "
           "errors %llu\n",
           SIM_NODES, train->n / SIM_NODES, l1, lR, SIM_ROUNDS, peer.seconds,
           (unsigned long long)peer.ctr.frames_dropped, (unsigned long long)peer.ctr.node_errors);
    scene_free(&peer);

    if ((e = scene_build(&agg, 1, SIM_NODES, SIM_ROUNDS, train, be, pool)) != FED_OK ||
        (e = scene_run(&agg, 3600 * 1000)) != FED_OK)
        die("aggregator mode", e);
    c = per_round(&agg, 1, agg.nh);
    a = per_round(&agg, 0, 1);
    printf("aggregator mode: 1 aggregator + %d clients, fedavg, at least %u deltas merged each "
           "round: %.1f s;\n  frames dropped %llu, node errors %llu\n", SIM_NODES, agg.merged_min,
           agg.seconds,
           (unsigned long long)agg.ctr.frames_dropped, (unsigned long long)agg.ctr.node_errors);
    scene_free(&agg);

    printf("%-32s %10s %10s %10s %8s\n", "bytes per node per round", "sent mean", "sent max",
           "received", "sealed");
    printf("%-32s %10.0f %10.0f %10.0f %8.2f\n", "peer (random:3)", p.out_mean, p.out_max,
           p.in_mean, p.frames);
    printf("%-32s %10.0f %10.0f %10.0f %8.2f\n", "aggregator mode: a client", c.out_mean,
           c.out_max, c.in_mean, c.frames);
    printf("%-32s %10.0f %10s %10.0f %8.2f\n", "aggregator mode: the aggregator", a.out_mean, "",
           a.in_mean, a.frames);
    printf("peer / client sent: %.2fx (means); the aggregator sends %.1fx what a peer does,\n"
           "%.0fx what a client does\n", p.out_mean / c.out_mean, a.out_mean / p.out_mean,
           a.out_mean / c.out_mean);
    printf("why: a peer seals K = 3 SHAREs a round, each its running totals for that neighbour "
           "in f64\n(8 bytes a parameter, %zu B), and ACKs the 3 it gets: 3 x %zu + 3 x %zu = "
           "%zu B.\nA client seals one f32 DELTA (%zu B) and one NEXT (%zu B) = %zu B, and "
           "receives one MODEL\n(%zu B) and one ACK.\n",
           share, share, ack, 3 * share + 3 * ack, delta, next, delta + next, model);
    printf("a peer's and a client's figures do not depend on the number of nodes; the "
           "aggregator's is\nN x (MODEL + ACK): %.1f MB a round for 1,000 clients, were it to "
           "take them all (it takes at\nmost %d a round).\n",
           1000.0 * (double)(model + ack) / 1e6, FED_MERGE_DEFAULT_MAX_CLIENTS);
    fed_pool_free(pool);
    fed_backend_free(be);
}


/* ---- 3. exact all-reduce ---- */

#define LINK_BYTES_PER_MS 100000.0 /* 100 MB/s */
#define LINK_LATENCY_MS 5.0

typedef struct ar_figures {
    uint32_t rounds;                  /* to the exact mean */
    uint32_t steps;                   /* a round's (the largest group's) */
    double payload_max, payload_mean; /* bytes a peer sends a round, f64 ranges */
    double frames_max;                /* the same as sealed SLICE frames */
    double wall_ms;                   /* the lockstep model */
    double err;                       /* max |result - key-order mean|, relative */
    int same_bits;
} ar_figures;

static size_t slice_frame(size_t elems)
{
    fed_codec f64 = {.id = FED_CODEC_F64};
    size_t body = 0;

    if (fed_codec_size(&f64, elems, &body) != FED_OK)
        die("codec size", FED_ERR_INTERNAL);
    return fed_wire_frame_bytes(fed_wire_block_size(FED_WIRE_SLICE) + body);
}

/* One all-reduce in lockstep over the members ids[0..cnt) (every send of a
 * step delivered, then every member advances): x[ids[i]] (dim doubles)
 * weighted by w[ids[i]] in, the mean and the total weight out; bytes each
 * sends added to pay (f64 ranges) and fr (sealed SLICE frames); *wall the
 * lockstep model's time; *steps the plan's. */
static fed_err ar_lockstep(const char *spec, const uint32_t *ids, uint32_t cnt, size_t dim,
                           double **x, double *w, double *pay, double *fr, double *wall,
                           uint32_t *steps)
{
    fed_gossip_ar_plan plan;
    fed_gossip_ar_member **m = NULL;
    fed_err e;

    *wall = 0;
    *steps = 0;
    if (cnt < 2)
        return FED_OK;
    if ((e = fed_gossip_ar_plan_init(&plan, spec, cnt, dim)) != FED_OK)
        return e;
    if (!(m = fed_calloc(cnt, sizeof *m)))
        return FED_ERR_NOMEM;
    for (uint32_t i = 0; i < cnt; i++)
        if ((e = fed_gossip_ar_member_new(&plan, i, x[ids[i]], w[ids[i]], &m[i])) != FED_OK)
            goto out;
    *steps = fed_gossip_ar_steps(&plan);
    for (uint32_t s = 0; s < *steps; s++) {
        double step_max = 0;

        for (uint32_t i = 0; i < cnt; i++) { /* every send of the step delivered */
            double bytes = 0;

            for (size_t k = 0; k < fed_gossip_ar_member_nsend(m[i]); k++) {
                fed_gossip_ar_xfer xf;
                const double *d;

                if ((e = fed_gossip_ar_member_send(m[i], k, &xf, &d)) != FED_OK ||
                    (e = fed_gossip_ar_member_receive(m[xf.peer], i, s, d, xf.len, NULL)) !=
                        FED_OK)
                    goto out;
                bytes += (double)slice_frame(xf.len);
                pay[ids[i]] += 8.0 * (double)xf.len;
                fr[ids[i]] += (double)slice_frame(xf.len);
            }
            step_max = bytes > step_max ? bytes : step_max;
        }
        *wall += LINK_LATENCY_MS + step_max / LINK_BYTES_PER_MS;
        for (uint32_t i = 0; i < cnt; i++) /* then every member advances */
            if ((e = fed_gossip_ar_member_advance(m[i])) != FED_OK)
                goto out;
    }
    for (uint32_t i = 0; i < cnt; i++) {
        const double *sums = fed_gossip_ar_member_sums(m[i]);

        w[ids[i]] = sums[dim];
        for (size_t d = 0; d < dim; d++)
            x[ids[i]][d] = sums[d] / sums[dim];
    }
out:
    for (uint32_t i = 0; m && i < cnt; i++)
        fed_gossip_ar_member_free(m[i]);
    fed_free(m);
    return e;
}

/* The fault rule's check after a run (node/peer_allreduce.c): each member
 * sends its result's hash and row to the members 1, 2, 4, ... after it
 * (AR_VERIFY, 48 bytes, ACKed), once when its row first covers that
 * distance and once more with the whole: in lockstep the rows double each
 * hop, ceil(log2 cnt) hops. Adds the bytes to fr, returns the time. */
static double verify_pass(const uint32_t *ids, uint32_t cnt, double *fr)
{
    double frame = (double)fed_wire_frame_bytes(fed_wire_block_size(FED_WIRE_AR_VERIFY));
    double ack = (double)fed_wire_frame_bytes(fed_wire_block_size(FED_WIRE_ACK));
    uint32_t levels = 0;

    while ((1ull << levels) < cnt)
        levels++;
    for (uint32_t i = 0; i < cnt; i++)
        fr[ids[i]] += 2.0 * levels * (frame + ack);
    return (double)levels * LINK_LATENCY_MS;
}

/* n members, each its own start vector and weight 1; groups 0: one
 * all-reduce of all (spec); groups G: ceil(log_G n) rounds of group
 * all-reduces (spec inside each), the next round's group weights carried. */
static fed_err run_allreduce(const char *spec, uint32_t n, uint32_t groups, size_t dim,
                             ar_figures *f)
{
    double **x = fed_calloc(n, sizeof *x), *w = fed_calloc(n, sizeof *w);
    double *mean = fed_calloc(dim, sizeof *mean), *pay = fed_calloc(n, sizeof *pay);
    double *fr = fed_calloc(n, sizeof *fr);
    uint32_t *ids = fed_calloc(n, sizeof *ids), r[FED_GOSSIP_AR_MAX_RADICES];
    float *first = fed_malloc(dim * sizeof *first);
    fed_err e = FED_ERR_NOMEM;

    memset(f, 0, sizeof *f);
    if (!x || !w || !mean || !pay || !fr || !ids || !first)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        if (!(x[i] = fed_malloc(dim * sizeof *x[i])))
            goto out;
        start_vector(SEED, i, dim, x[i]);
        w[i] = 1;
        for (size_t d = 0; d < dim; d++)
            mean[d] += x[i][d] / n;
    }
    f->rounds = groups ? fed_gossip_ar_radices(n, groups, r) : 1;
    for (uint32_t t = 1; t <= f->rounds; t++) {
        double round_wall = 0;
        uint8_t *done = fed_calloc(n, 1);

        if (!done)
            goto out;
        for (uint32_t i = 0; i < n; i++) { /* each group once */
            uint32_t cnt = n, steps = 0;
            double wall = 0;

            if (done[i])
                continue;
            if (groups) {
                if ((e = fed_gossip_ar_group(n, groups, SEED, t, i, ids, &cnt)) != FED_OK) {
                    fed_free(done);
                    goto out;
                }
            } else {
                for (uint32_t k = 0; k < n; k++)
                    ids[k] = k;
            }
            for (uint32_t k = 0; k < cnt; k++)
                done[ids[k]] = 1;
            if ((e = ar_lockstep(spec, ids, cnt, dim, x, w, pay, fr, &wall, &steps)) != FED_OK) {
                fed_free(done);
                goto out;
            }
            wall += verify_pass(ids, cnt, fr);
            round_wall = wall > round_wall ? wall : round_wall;
            f->steps = steps > f->steps ? steps : f->steps;
        }
        fed_free(done);
        f->wall_ms += round_wall; /* the groups run side by side; rounds one after another */
    }
    f->same_bits = 1;
    for (uint32_t i = 0; i < n; i++) {
        for (size_t d = 0; d < dim; d++) {
            float v = (float)x[i][d];
            double rel = fabs((double)v - mean[d]) / (1.0 + fabs(mean[d]));

            if (!i)
                first[d] = v;
            else if (memcmp(&v, &first[d], sizeof v))
                f->same_bits = 0;
            f->err = rel > f->err ? rel : f->err;
        }
        f->payload_max = pay[i] > f->payload_max ? pay[i] : f->payload_max;
        f->frames_max = fr[i] > f->frames_max ? fr[i] : f->frames_max;
        f->payload_mean += pay[i] / n;
    }
    e = FED_OK;
out:
    for (uint32_t i = 0; x && i < n; i++)
        fed_free(x[i]);
    fed_free(x);
    fed_free(w);
    fed_free(mean);
    fed_free(pay);
    fed_free(fr);
    fed_free(ids);
    fed_free(first);
    return e;
}

static void part_allreduce(size_t dim)
{
    static const uint32_t ns[] = {8, 64, NPEERS};
    static const struct { const char *name, *spec; uint32_t groups; } kinds[] = {
        {"ring", "ring", 0}, {"tree", "tree", 0}, {"butterfly", "butterfly", 0},
        {"g16 ring", "ring", 16}, {"g16 bfly", "butterfly", 16}};
    fed_codec f32 = {.id = FED_CODEC_F32}, f64 = {.id = FED_CODEC_F64};
    size_t b32 = 0, b64 = 0, share, model_frame;
    double model64 = 8.0 * (double)dim;

    if (fed_codec_size(&f32, dim, &b32) != FED_OK || fed_codec_size(&f64, dim, &b64) != FED_OK)
        die("codec size", FED_ERR_INTERNAL);
    share = fed_wire_frame_bytes(fed_wire_block_size(FED_WIRE_SHARE) + b64);
    model_frame = fed_wire_frame_bytes(FED_WIRE_MODEL_BLOCK_BYTES + b32);
    printf("\n== 3. exact all-reduce at logreg's length (%zu parameters; ranges travel as f64, "
           "%.0f bytes the whole model),\n", dim, model64);
    printf("groups of 16 (--group-size 16: ceil(log_16 n) rounds of group all-reduces, ring or "
           "butterfly inside),\nnext to push-sum random:3 (rounds to 1e-6 measured here, 8 "
           "doubles) and an aggregator; wall time a round\n");
    printf("with 100 MB/s links and 5 ms latency (all-reduce: the sum over steps of 5 ms + the "
           "most bytes one member sends in it,\nthen the fault rule's check: ceil(log2 members) "
           "hops of AR_VERIFY rows); bytes to the mean are a peer's over all the\n"
           "rounds it takes (payload: the f64 ranges; frames: the sealed SLICEs, and the "
           "AR_VERIFYs with their ACKs)\n");
    printf("%6s %-10s %7s %6s %14s %14s %9s %11s %10s\n", "n", "mixing", "rounds", "steps",
           "payload/peer", "frames/peer", "payload/", "wall/round", "error f32");
    printf("%6s %-10s %7s %6s %14s %14s %9s %11s %10s\n", "", "", "to mean", "/round",
           "to mean (B)", "to mean (B)", "model", "(ms)", "");
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        uint32_t n = ns[k];
        cons_result ps;
        fed_err e;

        for (size_t t = 0; t < sizeof kinds / sizeof *kinds; t++) {
            ar_figures f;

            if ((e = run_allreduce(kinds[t].spec, n, kinds[t].groups, dim, &f)) != FED_OK)
                die("all-reduce", e);
            printf("%6u %-10s %7u %6u %14.0f %14.0f %9.4f %11.1f %10.2g%s\n", n, kinds[t].name,
                   f.rounds, f.steps, f.payload_max, f.frames_max, f.payload_max / model64,
                   f.wall_ms / f.rounds, f.err,
                   f.same_bits || kinds[t].groups ? "" : "  NOT THE SAME BITS");
            if (!strcmp(kinds[t].name, "ring"))
                printf("%6s %-10s   the ring's payload: %.4f of the model and its weight (%zu "
                       "doubles), bound 2(n-1)/n = %.4f (mean %.4f);\n%6s %-10s   frame overhead "
                       "(the SLICEs' seals, the AR_VERIFYs and their ACKs) %.2f%%\n", "", "",
                       f.payload_max / (model64 + 8), dim + 1, 2.0 * (n - 1) / n,
                       f.payload_mean / (model64 + 8), "", "",
                       100.0 * (f.frames_max - f.payload_max) / f.payload_max);
        }
        if ((e = run_consensus("random:3", n, SHORT_DIM, MAX_ROUNDS, &ps)) != FED_OK)
            die("push-sum", e);
        printf("%6u %-10s %7d %6d %14.0f %14.0f %9.4f %11.1f %10s\n", n, "push-sum:3", ps.rounds,
               1, ps.rounds * ps.frames_mean * (double)b64,
               ps.rounds * ps.frames_mean * (double)share, ps.frames_mean * (double)b64 / model64,
               LINK_LATENCY_MS + ps.frames_mean * (double)share / LINK_BYTES_PER_MS, "<1e-6");
        printf("%6u %-10s %7d %6d %14.0f %14.0f %9s %11.1f %10s\n", n, "aggregator", 1, 2,
               (double)b32, (double)fed_wire_frame_bytes(16 + b32), "(f32)",
               2 * LINK_LATENCY_MS + (double)n * (double)(model_frame + fed_wire_frame_bytes(16 + b32)) /
                   LINK_BYTES_PER_MS, "exact");
    }
    printf("(aggregator: a client sends one f32 DELTA; the aggregator's link carries n MODELs and "
           "n DELTAs, which sets its wall time;\n groups: every member ends within float "
           "rounding of the mean, not the same bits: the groups sum in different orders)\n");
}

/* `bench_peer allreduce`: part 3 alone. */
int main(int argc, char **argv)
{
    int only_ar = argc > 1 && !strcmp(argv[1], "allreduce");
    fed_dataset *train = NULL;
    double t0 = now_s();
    fed_model_shape shape = {.c = 1, .h = 28, .w = 28, .classes = 10};
    size_t nparams = 0;
    fed_err e;

    fed_log_set_level(FED_LOG_WARN);
    if (fed_data_open("fashion-mnist", 1, &train) == FED_OK)
        shape = train->shape;
    if ((e = fed_model_spec_nparams("logreg", shape, &nparams)) != FED_OK)
        die("logreg's size", e);
    printf("bench_peer: logreg on (%d, %d, %d) -> %d classes: %zu parameters\n", shape.c, shape.h,
           shape.w, shape.classes, nparams);
    if (!only_ar) {
        part_consensus(nparams);
        part_bytes(train, nparams);
    }
    part_allreduce(nparams);
    printf("\nbench_peer: %.1f s in all\n", now_s() - t0);
    fed_data_free(train);
    return 0;
}
