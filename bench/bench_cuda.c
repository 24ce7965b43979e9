/* bench_cuda.c - training samples/s of mlp:256,128 and cnn at batch 64, 256
 * and 1024 on the CUDA plugin and on the CPU backend, the TFLOP/s that is,
 * and the same step's sgemm calls alone through cuBLAS in the same run (plus
 * a large square sgemm). Data: random bytes of Fashion-MNIST's shape.
 * Without the plugin or a device it says why and exits 0. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/train.h"

#define SAMPLES 60000
#define MAX_GEMMS 24

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double seconds_per_figure(void)
{
    const char *s = getenv("FEDNODE_BENCH_SECONDS");
    double v = s ? strtod(s, NULL) : 0.0;

    return v > 0.0 ? v : 1.0;
}

static int make_data(fed_dataset *d, uint32_t **idx)
{
    fed_rng rng;

    memset(d, 0, sizeof *d);
    d->n = SAMPLES;
    d->shape = (fed_model_shape){1, 28, 28, 10, 0};
    d->features = 784;
    d->x_u8 = malloc((size_t)SAMPLES * 784);
    d->y = malloc(SAMPLES * sizeof *d->y);
    *idx = malloc(SAMPLES * sizeof **idx);
    if (!d->x_u8 || !d->y || !*idx)
        return -1;
    fed_rng_seed(&rng, 1);
    fed_rng_fill(&rng, d->x_u8, (size_t)SAMPLES * 784);
    for (size_t i = 0; i < SAMPLES; i++) {
        d->y[i] = (int32_t)fed_rng_below(&rng, 10);
        (*idx)[i] = (uint32_t)i;
    }
    return 0;
}

/* ------------------------------------------------------------ training -- */

/* Samples/s of training spec at batch on be (pool and shards for the CPU):
 * warm-up steps, then whole passes of steps until the time is spent. */
static double bench_train(fed_backend *be, fed_pool *pool, int shards, const char *spec,
                          int batch, const fed_dataset *d, const uint32_t *idx, double *flops)
{
    fed_model *m = NULL;
    fed_optim *o = NULL;
    fed_trainer *t = NULL;
    fed_optim_cfg cfg;
    fed_rng rng;
    double rate = 0.0, budget = seconds_per_figure(), t0, dt = 0.0;
    long steps = 0, per = 1024 / batch + 2;

    if (fed_model_new(spec, d->shape, be, pool, shards, batch, &m) != FED_OK)
        goto out;
    fed_rng_seed(&rng, 2);
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    if (fed_model_init(m, &rng) != FED_OK || fed_optim_new(&cfg, m, &o) != FED_OK ||
        fed_trainer_new(m, o, d, batch, &t) != FED_OK)
        goto out;
    *flops = fed_model_flops_per_sample(m);
    if (fed_trainer_steps(t, idx, d->n, per, &rng, NULL) != FED_OK || be->sync(be) != FED_OK)
        goto out;
    t0 = now_s();
    while (dt < budget || steps < 3) {
        if (fed_trainer_steps(t, idx, d->n, per, &rng, NULL) != FED_OK)
            goto out;
        steps += per;
        if (be->sync(be) != FED_OK)
            goto out;
        dt = now_s() - t0;
    }
    rate = (double)steps * batch / dt;
out:
    fed_trainer_free(t);
    fed_optim_free(o);
    fed_model_free(m);
    return rate;
}

/* ------------------------------------------------------ sgemm alone -- */

typedef struct gemm_call {
    int ta, tb, M, N, K, reps; /* reps: per step (per image for convolutions) */
    float beta;
} gemm_call;

/* The sgemm calls of one training step of the model at batch, as
 * model/model.c makes them on a device (one shard): a linear layer's
 * forward, weight gradient, bias gradient (dy^T times a ones vector) and
 * input gradient once per batch; a convolution's forward, weight gradient
 * and input gradient once per image; no input gradient for the first
 * layer. */
static int model_gemms(const fed_model *m, int batch, gemm_call *g)
{
    int nt, n = 0, first = 1;
    const fed_tensor_info *t = fed_model_tensors(m, &nt);
    fed_model_shape in = fed_model_input(m);
    int h = in.h, w = in.w;

    for (int i = 0; i < nt && n + 4 <= MAX_GEMMS; i++) {
        const fed_tensor_info *ti = &t[i];

        if (ti->ndim == 2) {
            int out = ti->shape[0], inn = ti->shape[1];

            g[n++] = (gemm_call){0, 1, batch, out, inn, 1, 0.0f};
            g[n++] = (gemm_call){1, 0, out, inn, batch, 1, 0.0f};
            g[n++] = (gemm_call){1, 0, out, 1, batch, 1, 0.0f};
            if (!first)
                g[n++] = (gemm_call){0, 0, batch, inn, out, 1, 0.0f};
            first = 0;
        } else if (ti->ndim == 4) {
            int oc = ti->shape[0], ckk = ti->shape[1] * ti->shape[2] * ti->shape[3];
            int oh = h - ti->shape[2] + 1, ow = w - ti->shape[3] + 1, P = oh * ow;

            g[n++] = (gemm_call){0, 0, oc, P, ckk, batch, 0.0f};
            g[n++] = (gemm_call){0, 1, oc, ckk, P, batch, 1.0f};
            if (!first)
                g[n++] = (gemm_call){1, 0, ckk, P, oc, batch, 0.0f};
            first = 0;
            h = oh / 2; /* the cnn pools after every convolution */
            w = ow / 2;
        }
    }
    return n;
}

static size_t op_elems(int rows, int cols)
{
    return (size_t)rows * (size_t)cols;
}

/* Runs the calls through be->gemm (cuBLAS, nothing else) until the time is
 * spent; returns FLOP/s and the steps/s they allow in *steps_per_s. */
static double bench_gemms(fed_backend *be, const gemm_call *g, int n, double *steps_per_s)
{
    size_t na = 1, nb = 1, nc = 1;
    float *A = NULL, *B = NULL, *C = NULL;
    double flop = 0.0, t0, dt = 0.0, budget = seconds_per_figure(), rate = 0.0;
    long steps = 0;

    *steps_per_s = 0.0;
    for (int i = 0; i < n; i++) {
        size_t a = op_elems(g[i].M, g[i].K), b = op_elems(g[i].K, g[i].N),
               c = op_elems(g[i].M, g[i].N);

        na = a > na ? a : na;
        nb = b > nb ? b : nb;
        nc = c > nc ? c : nc;
        flop += 2.0 * g[i].M * g[i].N * (double)g[i].K * g[i].reps;
    }
    if (be->alloc(be, na * sizeof(float), (void **)&A) != FED_OK ||
        be->alloc(be, nb * sizeof(float), (void **)&B) != FED_OK ||
        be->alloc(be, nc * sizeof(float), (void **)&C) != FED_OK)
        goto out;
    be->fill(be, A, 0.01f, na);
    be->fill(be, B, 0.02f, nb);
    for (int warm = 0; warm < 2; warm++)
        for (int i = 0; i < n; i++)
            for (int r = 0; r < g[i].reps; r++)
                be->gemm(be, g[i].ta, g[i].tb, g[i].M, g[i].N, g[i].K, 1.0f, A,
                         g[i].ta ? g[i].M : g[i].K, B, g[i].tb ? g[i].K : g[i].N, g[i].beta, C,
                         g[i].N);
    if (be->sync(be) != FED_OK)
        goto out;
    t0 = now_s();
    while (dt < budget || steps < 3) {
        for (int i = 0; i < n; i++)
            for (int r = 0; r < g[i].reps; r++)
                be->gemm(be, g[i].ta, g[i].tb, g[i].M, g[i].N, g[i].K, 1.0f, A,
                         g[i].ta ? g[i].M : g[i].K, B, g[i].tb ? g[i].K : g[i].N, g[i].beta, C,
                         g[i].N);
        steps++;
        if ((steps & 7) == 0 || dt == 0.0) {
            if (be->sync(be) != FED_OK)
                goto out;
            dt = now_s() - t0;
        }
    }
    if (be->sync(be) != FED_OK)
        goto out;
    dt = now_s() - t0;
    *steps_per_s = (double)steps / dt;
    rate = flop * (double)steps / dt;
out:
    if (A)
        be->free(be, A);
    if (B)
        be->free(be, B);
    if (C)
        be->free(be, C);
    return rate;
}

/* ------------------------------------------------------------- driver -- */

/* Collects the log lines (into a 512-byte buffer), to say why the device
 * is missing. */
static void keep_lines(void *ctx, fed_log_level level, const char *line)
{
    char *buf = ctx;
    size_t used = strlen(buf);

    (void)level;
    if (used < 511)
        snprintf(buf + used, 512 - used, "%s%s", used ? "; " : "", line);
}

/* The plugin from $FEDNODE_PLUGIN_DIR, which defaults to the build folder
 * this binary sits in (build/bench/bench_cuda -> build/). */
static fed_err open_gpu(fed_backend **gpu, char *why)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *env = getenv("FEDNODE_PLUGIN_DIR");
    fed_log_level level = fed_log_get_level();
    fed_err err;

    if ((!env || !*env) && len > 0) {
        char *slash;

        exe[len] = '\0';
        if ((slash = strrchr(exe, '/')) != NULL) {
            *slash = '\0';
            if ((slash = strrchr(exe, '/')) != NULL) {
                *slash = '\0';
                setenv("FEDNODE_PLUGIN_DIR", exe, 1);
            }
        }
    }
    fed_log_set_sink(keep_lines, why);
    fed_log_set_level(FED_LOG_INFO);
    err = fed_backend_open("cuda", gpu);
    fed_log_set_sink(NULL, NULL);
    fed_log_set_level(level);
    return err;
}

int main(int argc, char **argv)
{
    static const char *const specs[] = {"mlp:256,128", "cnn"};
    static const int batches[] = {64, 256, 1024};
    fed_backend *gpu = NULL, *cpu = NULL;
    fed_pool *pool = NULL;
    fed_dataset d;
    uint32_t *idx = NULL;
    char why[512] = "";
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = ncpu > 0 ? (int)ncpu : 1, rc = 1;
    const char *coretype = fed_backend_cpu_suggest_coretype();
    fed_err err;

    /* OpenBLAS chooses its kernels when it loads: a CPU it does not know
     * gets generic ones, which would understate the CPU. Run again with the
     * suggested kernels (as fednode train does). */
    (void)argc;
    if (coretype && setenv("OPENBLAS_CORETYPE", coretype, 1) == 0) {
        execv("/proc/self/exe", argv);
        fprintf(stderr, "bench_cuda: could not re-run with OPENBLAS_CORETYPE=%s\n", coretype);
    }
    err = open_gpu(&gpu, why);
    if (err != FED_OK) {
        printf("bench_cuda: skipped: no CUDA device (%s: %s)\n", fed_errname(err),
               why[0] ? why : fed_strerror(err));
        return 0;
    }
    if (make_data(&d, &idx) != 0 || fed_backend_cpu_new(1, &cpu) != FED_OK ||
        fed_pool_new(threads - 1, &pool) != FED_OK) {
        fprintf(stderr, "bench_cuda: setup failed\n");
        goto out;
    }
    printf("bench_cuda: GPU %s; CPU %s on %d threads (one shard each); %.1f s per figure\n",
           gpu->device, cpu->device, threads, seconds_per_figure());
    printf("%-12s %6s %14s %14s %8s %10s %10s %12s %8s\n", "model", "batch", "GPU samples/s",
           "CPU samples/s", "GPU/CPU", "GPU TF/s", "CPU TF/s", "sgemm TF/s", "model/sg");
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            int batch = batches[b];
            double flops = 0.0, gsps, csps, gemm_rate, gemm_steps;
            gemm_call calls[MAX_GEMMS];
            fed_model *shape = NULL;
            int ncalls;

            gsps = bench_train(gpu, NULL, 1, specs[s], batch, &d, idx, &flops);
            csps = bench_train(cpu, pool, threads, specs[s], batch, &d, idx, &flops);
            if (fed_model_new(specs[s], d.shape, cpu, NULL, 1, 1, &shape) != FED_OK)
                goto out;
            ncalls = model_gemms(shape, batch, calls);
            fed_model_free(shape);
            gemm_rate = bench_gemms(gpu, calls, ncalls, &gemm_steps);
            printf("%-12s %6d %14.0f %14.0f %8.2f %10.3f %10.3f %12.3f %7.1f%%\n", specs[s],
                   batch, gsps, csps, csps > 0 ? gsps / csps : 0.0, gsps * flops / 1e12,
                   csps * flops / 1e12, gemm_rate / 1e12,
                   gemm_rate > 0 ? 100.0 * gsps * flops / gemm_rate : 0.0);
            fflush(stdout);
        }
    {
        /* the device's sgemm ceiling on one large square product */
        gemm_call sq = {0, 0, 4096, 4096, 4096, 1, 0.0f};
        double steps, rate = bench_gemms(gpu, &sq, 1, &steps);

        printf("sgemm 4096x4096x4096 alone: %.2f TFLOP/s (FP32, no TF32)\n", rate / 1e12);
    }
    printf("GPU TF/s and CPU TF/s: the model's forward+backward FLOPs per sample times "
           "samples/s;\nsgemm TF/s: the same step's sgemm calls alone through cuBLAS; "
           "model/sg: the first as a share of that.\n");
    rc = 0;
out:
    fed_pool_free(pool);
    fed_backend_free(cpu);
    fed_backend_free(gpu);
    free(d.x_u8);
    free(d.y);
    free(idx);
    return rc;
}
