/* bench_merge.c - the time each merge strategy takes for 10 x 1M and
 * 100 x 235,146 parameters on the CPU backend, next to the memory-bandwidth
 * bound: the bytes FedAvg must move (every delta read once, the global read
 * and written once) at the STREAM-triad rate this run measures itself over
 * buffers far larger than the caches. Also the backend's weighted_sum alone
 * (warm, cold, split over two threads of the pool) against the plain
 * per-element loop it must match bit for bit, and the one-thread rate of
 * just reading the deltas. Prints figures and ratios; asserts nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/merge.h"

#define TRIAD_FLOATS ((size_t)64 << 20) /* 3 x 256 MiB: far over a 300 MiB L3 */
#define EVICT_BYTES ((size_t)768 << 20)

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median_of(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return n & 1 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* STREAM triad a = b + s c in float, best of 5: bytes/s counted as STREAM
 * does (3 arrays, no write-allocate). */
static double triad_rate(void)
{
    float *a = fed_alloc_aligned(TRIAD_FLOATS * sizeof(float));
    float *b = fed_alloc_aligned(TRIAD_FLOATS * sizeof(float));
    float *c = fed_alloc_aligned(TRIAD_FLOATS * sizeof(float));
    const float s = 3.0f;
    double best = 1e30;

    if (!a || !b || !c) {
        fprintf(stderr, "bench_merge: no memory for the triad buffers\n");
        exit(1);
    }
    for (size_t i = 0; i < TRIAD_FLOATS; i++) {
        b[i] = (float)(i & 1023);
        c[i] = 1.0f;
    }
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_s(), t;

        for (size_t i = 0; i < TRIAD_FLOATS; i++)
            a[i] = b[i] + s * c[i];
        t = now_s() - t0;
        best = t < best ? t : best;
        b[rep] = a[rep + 1]; /* keep the loop live */
    }
    fed_free(a);
    fed_free(b);
    fed_free(c);
    return 3.0 * (double)TRIAD_FLOATS * sizeof(float) / best;
}

/* Stream through a big buffer so the deltas leave every cache. */
static void evict(unsigned char *buf)
{
    for (size_t i = 0; i < EVICT_BYTES; i += 64)
        buf[i]++;
}

typedef struct scene {
    int k;
    size_t d;
    fed_backend *be;
    float **x;
    fed_merge_input *in;
    float *global;
    fed_pool *pool; /* the merge's (fed_merge_config.pool): the daemon's two cores */
} scene;

static void scene_init(scene *s, fed_backend *be, int k, size_t d)
{
    fed_rng r;

    s->k = k;
    s->d = d;
    s->be = be;
    s->x = calloc((size_t)k, sizeof *s->x);
    s->in = calloc((size_t)k, sizeof *s->in);
    if (!s->x || !s->in || be->alloc(be, d * sizeof(float), (void **)&s->global) != FED_OK) {
        fprintf(stderr, "bench_merge: out of memory\n");
        exit(1);
    }
    fed_rng_seed(&r, 42);
    for (int i = 0; i < k; i++) {
        if (be->alloc(be, d * sizeof(float), (void **)&s->x[i]) != FED_OK) {
            fprintf(stderr, "bench_merge: out of memory\n");
            exit(1);
        }
        for (size_t j = 0; j < d; j++) /* host memory on the cpu backend */
            s->x[i][j] = 0.01f * (2.0f * fed_rng_uniform_f(&r) - 1.0f);
        s->in[i].delta = s->x[i];
        s->in[i].weight = 100.0 + (double)(i % 7);
        s->in[i].key[0] = (uint8_t)(i * 37);
        s->in[i].key[1] = (uint8_t)(i >> 8);
    }
}

static void scene_fini(scene *s)
{
    for (int i = 0; i < s->k; i++)
        s->be->free(s->be, s->x[i]);
    s->be->free(s->be, s->global);
    free(s->x);
    free(s->in);
}

/* Median seconds of reps applies (cold: caches evicted before each); the
 * fastest one into *best (on a shared machine, the least disturbed). */
static double time_strategy(scene *s, const char *spec, int reps, unsigned char *evict_buf,
                            double *best)
{
    fed_merge_config cfg = fed_merge_config_default();
    fed_merge *m = NULL;
    double t[65];

    cfg.max_clients = s->k;
    cfg.pool = s->pool;
    if (fed_merge_new(spec, s->d, &cfg, s->be, &m) != FED_OK) {
        fprintf(stderr, "bench_merge: cannot make %s\n", spec);
        exit(1);
    }
    if (fed_merge_apply(m, s->global, s->in, s->k, NULL) != FED_OK) { /* warm-up */
        fprintf(stderr, "bench_merge: %s failed\n", spec);
        exit(1);
    }
    for (int r = 0; r < reps; r++) {
        double t0;

        if (evict_buf)
            evict(evict_buf);
        t0 = now_s();
        if (fed_merge_apply(m, s->global, s->in, s->k, NULL) != FED_OK)
            exit(1);
        t[r] = now_s() - t0;
    }
    fed_merge_free(m);
    t[reps] = median_of(t, reps);
    *best = t[0];
    return t[reps];
}

/* One weighted sum: k inputs into out, elements [0, d); split into `pieces`
 * slices over the pool (every element's sum is the same whatever the split). */
typedef struct wsum_job {
    scene *s;
    float *out;
    const float **p; /* (k) the deltas */
    const float **slice; /* (pieces x k) the deltas at each slice's start */
    double *w;       /* (k) */
    size_t pieces;
} wsum_job;

static void wsum_piece(void *ctx, size_t i)
{
    wsum_job *j = ctx;
    size_t per = (j->s->d / j->pieces + 15) & ~(size_t)15;
    size_t from = i * per < j->s->d ? i * per : j->s->d;
    size_t to = from + per < j->s->d ? from + per : j->s->d;
    const float **p = j->slice + i * (size_t)j->s->k;

    for (int t = 0; t < j->s->k; t++)
        p[t] = j->p[t] + from;
    j->s->be->weighted_sum(j->s->be, j->out + from, p, j->w, j->s->k, to - from);
}

/* The backend's weighted_sum alone (weights 1/k), warm or cold, on one
 * thread (pool NULL) or split in two over pool. */
static double time_weighted_sum(scene *s, float *out, fed_pool *pool, int reps,
                                unsigned char *evict_buf, double *best)
{
    wsum_job j = {.s = s, .out = out, .pieces = pool ? 2 : 1};
    double t[65];

    j.p = calloc((size_t)s->k, sizeof *j.p);
    j.slice = calloc(2 * (size_t)s->k, sizeof *j.slice);
    j.w = calloc((size_t)s->k, sizeof *j.w);
    if (!j.p || !j.slice || !j.w) {
        fprintf(stderr, "bench_merge: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < s->k; i++) {
        j.p[i] = s->x[i];
        j.w[i] = 1.0 / s->k;
    }
    for (int r = 0; r < reps; r++) {
        double t0;

        if (evict_buf)
            evict(evict_buf);
        t0 = now_s();
        fed_pool_parallel_for(pool, j.pieces, wsum_piece, &j);
        t[r] = now_s() - t0;
    }
    free(j.p);
    free(j.slice);
    free(j.w);
    t[reps] = median_of(t, reps);
    *best = t[0];
    return t[reps];
}

/* What weighted_sum must equal bit for bit: element by element, inputs in
 * order, in double, no reassociation. Warm; returns the median seconds. */
static double time_reference(scene *s, float *out, int reps, double *best)
{
    const double w = 1.0 / s->k;
    double t[65];

    for (int r = 0; r < reps; r++) {
        double t0 = now_s();

        for (size_t i = 0; i < s->d; i++) {
            double acc = w * (double)s->x[0][i];

            for (int j = 1; j < s->k; j++)
                acc += w * (double)s->x[j][i];
            out[i] = (float)acc;
        }
        t[r] = now_s() - t0;
    }
    t[reps] = median_of(t, reps);
    *best = t[0];
    return t[reps];
}

/* Just reading every delta once, cold, one thread: about the most any
 * FedAvg on one core could reach here. The deltas are copied piece by piece
 * into one 16 KiB buffer that stays in L1, so the C library's widest loads
 * do the reading and the writes cost next to nothing. Best of reps, bytes/s. */
static double read_rate(scene *s, int reps, unsigned char *evict_buf)
{
    static unsigned char piece[16384];
    double best = 1e30;

    for (int r = 0; r < reps; r++) {
        double t0, t;

        evict(evict_buf);
        t0 = now_s();
        for (int j = 0; j < s->k; j++) {
            const unsigned char *b = (const unsigned char *)s->x[j];
            size_t bytes = s->d * sizeof(float);

            for (size_t i = 0; i < bytes; i += sizeof piece)
                memcpy(piece, b + i, bytes - i < sizeof piece ? bytes - i : sizeof piece);
        }
        t = now_s() - t0;
        best = t < best ? t : best;
        evict_buf[r] ^= piece[r]; /* keep the copies live */
    }
    return (double)s->k * (double)s->d * sizeof(float) / best;
}

static void run_scene(fed_backend *be, fed_pool *pool, int k, size_t d, double triad,
                      unsigned char *evict_buf)
{
    const int f = k >= 100 ? 10 : 2;
    char krum[32], mkrum[32], bulyan[32], trimmed[32];
    const char *specs[12];
    int ns = 0;
    scene s;
    double fed_bytes = ((double)k + 2.0) * (double)d * sizeof(float);
    double in_bytes = (double)k * (double)d * sizeof(float);
    double bound = fed_bytes / triad, t_warm, t_cold, t_ws, b_warm, b_cold, b_ws, b;
    double t_wsc, b_wsc, t_ws2, b_ws2, t_ref, b_ref, rd;
    float *out = NULL, *ref = NULL;
    int same;

    scene_init(&s, be, k, d);
    s.pool = pool;
    snprintf(krum, sizeof krum, "krum:%d", f);
    snprintf(mkrum, sizeof mkrum, "multikrum:%d,%d", f, k - 2 * f);
    snprintf(bulyan, sizeof bulyan, "bulyan:%d", k >= 100 ? 10 : 1);
    snprintf(trimmed, sizeof trimmed, "trimmed:%.2f", (double)f / k);
    printf("\n== %d clients x %zu parameters (%.1f MB of deltas)\n", k, d, in_bytes / 1e6);
    printf("bound: %.1f MB (deltas once + global read and written) at the triad rate = "
           "%.3f ms (deltas alone %.3f ms)\n",
           fed_bytes / 1e6, 1e3 * bound, 1e3 * in_bytes / triad);

    t_warm = time_strategy(&s, "fedavg", 21, NULL, &b_warm);
    t_cold = time_strategy(&s, "fedavg", 7, evict_buf, &b_cold);
    if (be->alloc(be, d * sizeof(float), (void **)&out) != FED_OK ||
        be->alloc(be, d * sizeof(float), (void **)&ref) != FED_OK)
        exit(1);
    t_ws = time_weighted_sum(&s, out, NULL, 21, NULL, &b_ws);
    t_wsc = time_weighted_sum(&s, out, NULL, 7, evict_buf, &b_wsc);
    t_ws2 = time_weighted_sum(&s, out, pool, 7, evict_buf, &b_ws2);
    t_ref = time_reference(&s, ref, 5, &b_ref);
    same = !memcmp(out, ref, d * sizeof(float));
    rd = read_rate(&s, 5, evict_buf);
    be->free(be, out);
    be->free(be, ref);
    printf("%-18s %9s %9s  %s\n", "strategy", "median", "best", "ratios (median; best)");
    printf("%-18s %6.3f ms %6.3f ms  bound/time %.2f; %.2f  (warm: the deltas fit a 300 MiB L3)\n",
           "fedavg", 1e3 * t_warm, 1e3 * b_warm, bound / t_warm, bound / b_warm);
    printf("%-18s %6.3f ms %6.3f ms  bound/time %.2f; %.2f  (caches evicted before each apply)\n",
           "fedavg cold", 1e3 * t_cold, 1e3 * b_cold, bound / t_cold, bound / b_cold);
    printf("%-18s %6.3f ms %6.3f ms  the backend's weighted_sum alone: %.1f; %.1f GB/s of deltas\n",
           "  weighted_sum", 1e3 * t_ws, 1e3 * b_ws, in_bytes / t_ws / 1e9, in_bytes / b_ws / 1e9);
    printf("%-18s %6.3f ms %6.3f ms  the same, caches evicted: %.1f; %.1f GB/s of deltas\n",
           "  weighted_sum cold", 1e3 * t_wsc, 1e3 * b_wsc, in_bytes / t_wsc / 1e9,
           in_bytes / b_wsc / 1e9);
    printf("%-18s %6.3f ms %6.3f ms  cold, halves on two threads of the pool: %.1f; %.1f GB/s\n",
           "  wsum cold 2 thr", 1e3 * t_ws2, 1e3 * b_ws2, in_bytes / t_ws2 / 1e9,
           in_bytes / b_ws2 / 1e9);
    printf("%-18s %6.3f ms %6.3f ms  the plain per-element loop (warm): weighted_sum %.1fx as "
           "fast; same bits: %s\n",
           "  reference loop", 1e3 * t_ref, 1e3 * b_ref, t_ref / t_ws, same ? "yes" : "NO");
    printf("%-18s %.1f GB/s: the deltas just read once, cold, one thread (%.3f ms): "
           "cold fedavg at %.2f of that\n",
           "  read rate", rd / 1e9, 1e3 * in_bytes / rd, in_bytes / rd / t_cold);
    printf("%-18s fedavg at >= 0.8 of the bound: warm %s, cold %s (medians)\n", "  verdict",
           bound / t_warm >= 0.8 ? "yes" : "NO", bound / t_cold >= 0.8 ? "yes" : "NO");
    if (k == 100 && d == 235146) {
        printf("%-18s numpy FedAvg took 15 ms here: ours %.1fx; %.1fx as fast (target <= 5 ms)\n",
               "  vs numpy", 15e-3 / t_warm, 15e-3 / b_warm);
        printf("%-18s 5 ms means reading the deltas at %.1f GB/s: %.1fx this run's triad rate, "
               "%.1fx its one-thread read rate\n",
               "", in_bytes / 5e-3 / 1e9, in_bytes / 5e-3 / triad, in_bytes / 5e-3 / rd);
    }

    specs[ns++] = "fedprox:0.01";
    specs[ns++] = "fedavgm";
    specs[ns++] = "fedadam";
    specs[ns++] = "fedyogi";
    specs[ns++] = "fedadagrad";
    specs[ns++] = "clip:1+fedavg";
    specs[ns++] = "median";
    specs[ns++] = trimmed;
    specs[ns++] = krum;
    specs[ns++] = mkrum;
    specs[ns++] = bulyan;
    for (int i = 0; i < ns; i++) {
        int robust = !strncmp(specs[i], "median", 6) || !strncmp(specs[i], "trimmed", 7) ||
                     strstr(specs[i], "krum") || !strncmp(specs[i], "bulyan", 6);
        double t = time_strategy(&s, specs[i], robust ? 3 : 9, NULL, &b);

        printf("%-18s %6.1f ms %6.1f ms  %5.1fx fedavg; bound/time %.3f; %.3f\n", specs[i],
               1e3 * t, 1e3 * b, b / b_warm, bound / t, bound / b);
    }
    scene_fini(&s);
}

int main(void)
{
    fed_backend *be = NULL;
    fed_pool *pool = NULL;
    unsigned char *evict_buf = calloc(EVICT_BYTES, 1);
    double triad;

    if (!evict_buf || fed_backend_cpu_new(1, &be) != FED_OK || fed_pool_new(1, &pool) != FED_OK) {
        fprintf(stderr, "bench_merge: setup failed\n");
        return 1;
    }
    printf("bench_merge on %s (BLAS on one thread; weighted sums over the pool's %d threads)\n",
           be->device, fed_pool_workers(pool) + 1);
    triad = triad_rate();
    printf("STREAM triad (float, 3 x %zu MiB): %.2f GB/s\n",
           TRIAD_FLOATS * sizeof(float) >> 20, triad / 1e9);
    run_scene(be, pool, 10, 1000000, triad, evict_buf);
    run_scene(be, pool, 100, 235146, triad, evict_buf);
    fed_pool_free(pool);
    fed_backend_free(be);
    free(evict_buf);
    return 0;
}
