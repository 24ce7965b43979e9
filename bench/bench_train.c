/* bench_train.c - `make bench`: training throughput of the reference nets
 * (NETS: mlp:256,128, cnn, SimpleCNN, the tabular net; a model file not
 * there is skipped, said so) at batch 64 on one core against PyTorch's
 * (bench/torch_nets.py: the same model, batch and SGD, one thread), and the
 * GFLOP/s each achieves against a one-thread sgemm measured in the same
 * run. Without arguments it re-runs itself, torch_nets.py and the sgemm as
 * children under `taskset -c 0`, the contenders interleaved round by round
 * (A B A B: a machine shared with other work slows them alike), and prints
 * each figure as a median with its spread (min-max). Samples are counted
 * per CPU-second of the child (its own clock: the machine is shared).
 * Also mlp:256,128 on 2 threads against 1, per second of wall time, and
 * its sgemm calls alone. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_stats.h"
#include "core/alloc.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/model.h"
#include "model/model_cfg.h"
#include "model/optim.h"
#include "model/train.h"

#define BENCH_BATCH 64
#define BENCH_SAMPLES 60000
#define BENCH_ROUNDS 5
#define BENCH_CHUNK 50     /* steps between looks at the clock */
#define BENCH_MIN_CPU 0.6  /* CPU-seconds a child trains for, at least */
#define BENCH_GEMM "mlp:256,128"

/* A reference net: a preset spec or a model file, and the least ratio to
 * PyTorch's samples/s it should reach (0: none stated). ResNet-8 is one
 * more line here once its file lands. */
typedef struct bench_net {
    const char *label;
    const char *net; /* a spec, or a path ending in .cfg */
    double target;
} bench_net;

static const bench_net NETS[] = {
    {"mlp:256,128", "mlp:256,128", 1.2},
    {"cnn", "cnn", 0.0},
    {"SimpleCNN", "examples/models/simplecnn.cfg", 2.0},
    {"tabular", "examples/models/tabular.cfg", 2.0},
    {"ResNet-8", "examples/models/resnet8.cfg", 2.0},
};
#define NNETS ((int)(sizeof NETS / sizeof NETS[0]))

static int is_file(const char *net)
{
    size_t n = strlen(net);

    return n > 4 && !strcmp(net + n - 4, ".cfg");
}

/* The spec and input of net: a preset on Fashion-MNIST's shape, or a model
 * file's graph and the input it declares. 0, or -1 with why printed. */
static int net_resolve(const char *net, char *spec, size_t cap, fed_model_shape *in)
{
    fed_model_cfg *c = NULL;
    char why[512];

    if (!is_file(net)) {
        snprintf(spec, cap, "%s", net);
        *in = (fed_model_shape){1, 28, 28, 10, 0};
        return 0;
    }
    if (fed_model_cfg_load(net, &c, why, sizeof why) != FED_OK ||
        fed_model_cfg_spec(c, spec, cap, why, sizeof why) != FED_OK) {
        fprintf(stderr, "bench_train: %s\n", why);
        fed_model_cfg_free(c);
        return -1;
    }
    *in = fed_model_cfg_own_input(c);
    fed_model_cfg_free(c);
    return 0;
}

/* ---- worker: our trainer ---- */

/* Random data of m's input: images as bytes, or a CSV's row (the ids an
 * embedding reads in its column, N(0, 1) elsewhere); labels below the
 * classes (bce's 2). */
static int make_data(const fed_model *m, fed_model_shape in, fed_dataset *d, uint32_t **idx)
{
    fed_rng rng;
    size_t f = (size_t)in.c * in.h * in.w;
    int row = 0;

    memset(d, 0, sizeof *d);
    for (size_t j = 0; j < f; j++)
        row |= fed_model_categorical(m, (int)j, NULL);
    d->n = BENCH_SAMPLES;
    d->shape = in;
    d->features = f;
    d->y = malloc(BENCH_SAMPLES * sizeof *d->y);
    *idx = malloc(BENCH_SAMPLES * sizeof **idx);
    if (row) {
        d->x_f32 = malloc(BENCH_SAMPLES * f * sizeof *d->x_f32);
        d->categorical = calloc(f, 1);
        d->hash_buckets = FED_CSV_DEFAULT_BUCKETS;
    } else {
        d->x_u8 = malloc(BENCH_SAMPLES * f);
    }
    if (!d->y || !*idx || (row ? !d->x_f32 || !d->categorical : !d->x_u8))
        return -1;
    fed_rng_seed(&rng, 1);
    if (!row)
        fed_rng_fill(&rng, d->x_u8, BENCH_SAMPLES * f);
    for (size_t j = 0; row && j < f; j++) {
        int num = 0;

        d->categorical[j] = (uint8_t)fed_model_categorical(m, (int)j, &num);
        for (size_t i = 0; i < BENCH_SAMPLES; i++)
            d->x_f32[i * f + j] = d->categorical[j] ? (float)fed_rng_below(&rng, (uint64_t)num)
                                                    : (float)fed_rng_normal(&rng);
    }
    for (size_t i = 0; i < BENCH_SAMPLES; i++) {
        d->y[i] = (int32_t)fed_rng_below(&rng, (uint64_t)in.classes);
        (*idx)[i] = (uint32_t)i;
    }
    return 0;
}

/* Samples per CPU-second of training net (after a warm-up), printed with
 * its FLOPs per sample. */
static int bench_ours(const char *net, int threads)
{
    fed_dataset d;
    uint32_t *idx = NULL;
    fed_backend *be = NULL;
    fed_pool *pool = NULL;
    fed_model *m = NULL;
    fed_optim *o = NULL;
    fed_trainer *t = NULL;
    fed_optim_cfg cfg;
    fed_model_shape in;
    fed_rng rng;
    char spec[FED_MODEL_GRAPH_MAX];
    double t0, w0, dt;
    long steps = 0;
    int rc = 1;

    memset(&d, 0, sizeof d);
    if (net_resolve(net, spec, sizeof spec, &in) != 0 || fed_backend_cpu_new(1, &be) != FED_OK ||
        fed_pool_new(threads - 1, &pool) != FED_OK ||
        fed_model_new(spec, in, be, pool, threads, BENCH_BATCH, &m) != FED_OK ||
        make_data(m, in, &d, &idx) != 0)
        goto out;
    fed_rng_seed(&rng, 2);
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    if (fed_model_init(m, &rng) != FED_OK || fed_optim_new(&cfg, m, &o) != FED_OK ||
        fed_trainer_new(m, o, &d, BENCH_BATCH, &t) != FED_OK ||
        fed_trainer_steps(t, idx, d.n, BENCH_CHUNK, &rng, NULL) != FED_OK) /* warm-up */
        goto out;
    t0 = bench_cpu_s();
    w0 = bench_now_s();
    do {
        if (fed_trainer_steps(t, idx, d.n, BENCH_CHUNK, &rng, NULL) != FED_OK)
            goto out;
        steps += BENCH_CHUNK;
        dt = bench_cpu_s() - t0;
    } while (dt < BENCH_MIN_CPU);
    /* per CPU-second, and per second of wall time (what 2 threads gain) */
    printf("samples_per_s=%.1f\nwall_samples_per_s=%.1f\nflops_per_sample=%.0f\n",
           (double)steps * BENCH_BATCH / dt,
           (double)steps * BENCH_BATCH / (bench_now_s() - w0), fed_model_flops_per_sample(m));
    rc = 0;
out:
    fed_trainer_free(t);
    fed_optim_free(o);
    fed_model_free(m);
    fed_pool_free(pool);
    fed_backend_free(be);
    free(d.x_u8);
    free(d.x_f32);
    free(d.categorical);
    free(d.y);
    free(idx);
    return rc;
}

/* The same sgemm calls as one training step of mlp:256,128 on one thread,
 * alone: forward, weight and bias gradients, input gradients. Samples per
 * CPU-second. */
static double bench_gemm(void)
{
    static const int dims[4] = {784, 256, 128, 10};
    const int B = BENCH_BATCH;
    float *w[3], *dw[3], *act[4], *dact[4];
    float *ones = fed_alloc_aligned(B * sizeof(float)), *db = fed_alloc_aligned(256 * sizeof(float));
    double t0 = 0.0, dt = 0.0;
    long steps = 0;

    openblas_set_num_threads(1);
    for (int i = 0; i < B; i++)
        ones[i] = 1.0f;
    for (int l = 0; l < 4; l++) {
        act[l] = fed_alloc_aligned((size_t)B * dims[l] * sizeof(float));
        dact[l] = fed_alloc_aligned((size_t)B * dims[l] * sizeof(float));
        if (l < 3) {
            w[l] = fed_alloc_aligned((size_t)dims[l] * dims[l + 1] * sizeof(float));
            dw[l] = fed_alloc_aligned((size_t)dims[l] * dims[l + 1] * sizeof(float));
        }
    }
    for (int l = 0; l < 4; l++)
        for (int i = 0; i < B * dims[l]; i++)
            act[l][i] = dact[l][i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    for (long s = -BENCH_CHUNK; s < 0 || dt < BENCH_MIN_CPU; s++) { /* a warm-up chunk first */
        if (s == 0)
            t0 = bench_cpu_s();
        for (int l = 0; l < 3; l++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, dims[l + 1], dims[l], 1.0f,
                        act[l], dims[l], w[l], dims[l], 0.0f, act[l + 1], dims[l + 1]);
        for (int l = 2; l >= 0; l--) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dims[l + 1], dims[l], B, 1.0f,
                        dact[l + 1], dims[l + 1], act[l], dims[l], 0.0f, dw[l], dims[l]);
            /* the bias gradient, as the model computes it: dy^T ones */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dims[l + 1], 1, B, 1.0f,
                        dact[l + 1], dims[l + 1], ones, 1, 0.0f, db, 1);
            if (l > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, dims[l], dims[l + 1],
                            1.0f, dact[l + 1], dims[l + 1], w[l], dims[l], 0.0f, dact[l],
                            dims[l]);
        }
        if (s >= 0 && ++steps % BENCH_CHUNK == 0)
            dt = bench_cpu_s() - t0;
    }
    fed_free(ones);
    fed_free(db);
    for (int l = 0; l < 4; l++) {
        fed_free(act[l]);
        fed_free(dact[l]);
        if (l < 3) {
            fed_free(w[l]);
            fed_free(dw[l]);
        }
    }
    return (double)steps * B / dt;
}

/* One thread's sgemm rate, GFLOP/s per CPU-second, on a product as large
 * as the MLP's forward at batch 256 (bench_bigmodel's: 256 x 2048 x 2048):
 * what OpenBLAS gives this core. */
static double bench_sgemm(void)
{
    const int M = 256, N = 2048, K = 2048;
    float *A = fed_alloc_aligned(sizeof(float) * (size_t)M * K);
    float *B = fed_alloc_aligned(sizeof(float) * (size_t)N * K);
    float *C = fed_alloc_aligned(sizeof(float) * (size_t)M * N);
    double t0, dt;
    long calls = 0;

    openblas_set_num_threads(1);
    for (size_t i = 0; i < (size_t)M * K; i++)
        A[i] = (float)(i % 17) / 17.0f - 0.5f;
    for (size_t i = 0; i < (size_t)N * K; i++)
        B[i] = (float)(i % 13) / 13.0f - 0.5f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
    t0 = bench_cpu_s();
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, K, B, K, 0.0f, C,
                    N);
        calls++;
        dt = bench_cpu_s() - t0;
    } while (dt < BENCH_MIN_CPU / 2);
    fed_free(A);
    fed_free(B);
    fed_free(C);
    return 2.0 * M * N * K * (double)calls / dt / 1e9;
}

/* ---- driver ---- */

/* Runs argv, its output into out (cap bytes). 0, or -1 when it failed. */
static int run_child(char *const argv[], char *out, size_t cap)
{
    int fds[2], status;
    pid_t pid;
    size_t used = 0;
    ssize_t r;

    out[0] = '\0';
    if (pipe(fds) != 0)
        return -1;
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    while (used < cap - 1 && (r = read(fds[0], out + used, cap - 1 - used)) > 0)
        used += (size_t)r;
    out[used] = '\0';
    close(fds[0]);
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    return 0;
}

/* The number of the line "key=N" in out, 0 when none. */
static double child_value(const char *out, const char *key)
{
    size_t n = strlen(key);

    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, key, n) && l[n] == '=')
            return strtod(l + n + 1, NULL);
    return 0.0;
}

static int have_program(const char *name)
{
    char cmd[256];

    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", name);
    return system(cmd) == 0;
}

/* bench/NAME: from the working directory (make runs us from the source
 * root) or relative to this binary (BUILD/bench/bench_train); a model file
 * likewise. */
static int find_source(const char *self, const char *name, char *path, size_t len)
{
    char dir[PATH_MAX];
    char *slash;

    if (access(name, R_OK) == 0) {
        snprintf(path, len, "%s", name);
        return 1;
    }
    snprintf(dir, sizeof dir, "%s", self);
    slash = strrchr(dir, '/');
    if (!slash)
        return 0;
    *slash = '\0';
    if (snprintf(path, len, "%s/../../%s", dir, name) >= (int)len)
        return 0;
    return access(path, R_OK) == 0;
}

/* The figures of one contender over the rounds. */
typedef struct series {
    double v[BENCH_ROUNDS];
    int n;
} series;

static void series_add(series *s, double v)
{
    if (v > 0.0)
        s->v[s->n++] = v;
}

/* Runs argv (run_child) and adds what it said under key to s. */
static void series_run(series *s, char *const argv[], const char *key)
{
    char out[4096];

    if (run_child(argv, out, sizeof out) == 0)
        series_add(s, child_value(out, key));
}

/* Median (min-max) of s, or n/a; *med 0 when none. */
static void series_print(const char *what, series *s, const char *unit, double *med)
{
    double lo, hi;

    *med = 0.0;
    if (!s->n) {
        printf("  %-46s %10s\n", what, "n/a");
        return;
    }
    bench_spread(s->v, s->n, med, &lo, &hi);
    printf("  %-46s %10.0f %s  (%.0f-%.0f, %d rounds)\n", what, *med, unit, lo, hi, s->n);
}

static void print_ratio(const char *what, double a, double b, double target)
{
    if (a <= 0.0 || b <= 0.0)
        printf("  %-46s    n/a\n", what);
    else if (target > 0.0)
        printf("  %-46s %6.2fx   (target >= %.1fx: %s)\n", what, a / b, target,
               a / b >= target ? "met" : "NOT met");
    else
        printf("  %-46s %6.2fx\n", what, a / b);
}

static int drive(const char *self_arg)
{
    char self[PATH_MAX], script[PATH_MAX + 32], path[NNETS][PATH_MAX + 32];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    int pin = have_program("taskset"), torch, have[NNETS], rc = 0;
    series ours[NNETS], pt[NNETS], sg, gemm, ours2, wall1;
    double flops[NNETS], med_sg;
    fed_model_shape in[NNETS];
    const char *core = fed_backend_cpu_suggest_coretype();

    if (len <= 0)
        snprintf(self, sizeof self, "%s", self_arg);
    else
        self[len] = '\0';
    /* OpenBLAS on a CPU it does not know runs generic kernels: every child
     * (PyTorch's too, which uses the same OpenBLAS) gets the right ones. */
    if (core && setenv("OPENBLAS_CORETYPE", core, 1) != 0)
        core = NULL;
    printf("bench_train: batch %d, SGD lr 0.05 momentum 0.9, random data of each net's input; "
           "%d rounds, each child training >= %.1f CPU-s; samples per CPU-second, median "
           "(min-max)\n", BENCH_BATCH, BENCH_ROUNDS, BENCH_MIN_CPU);
    if (core)
        printf("  OpenBLAS picked generic kernels here: every run uses OPENBLAS_CORETYPE=%s\n",
               core);
    if (!pin)
        printf("  (taskset not found: one-core runs are not pinned)\n");
    torch = find_source(self, "bench/torch_nets.py", script, sizeof script) &&
            system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
    if (!torch)
        printf("  PyTorch: not available (/usr/bin/python3 with torch): its columns are n/a\n");
    memset(ours, 0, sizeof ours);
    memset(pt, 0, sizeof pt);
    memset(&sg, 0, sizeof sg);
    memset(&gemm, 0, sizeof gemm);
    memset(&ours2, 0, sizeof ours2);
    memset(&wall1, 0, sizeof wall1);
    for (int i = 0; i < NNETS; i++) {
        char spec[FED_MODEL_GRAPH_MAX];
        size_t np;

        have[i] = !is_file(NETS[i].net) ||
                  find_source(self, NETS[i].net, path[i], sizeof path[i]);
        if (!is_file(NETS[i].net))
            snprintf(path[i], sizeof path[i], "%s", NETS[i].net);
        if (!have[i]) {
            printf("  %s: skipped, %s is not there\n", NETS[i].label, NETS[i].net);
            continue;
        }
        flops[i] = 0.0;
        if (net_resolve(path[i], spec, sizeof spec, &in[i]) != 0 ||
            fed_model_spec_cost(spec, in[i], &np, &flops[i], NULL, 0) != FED_OK) {
            printf("  %s: skipped, %s does not build\n", NETS[i].label, NETS[i].net);
            have[i] = 0;
        }
    }
    for (int round = 0; round < BENCH_ROUNDS; round++) {
        char *s1[] = {"taskset", "-c", "0", self, "--sgemm", NULL};
        char *g1[] = {"taskset", "-c", "0", self, "--gemm", NULL};
        char *a2[] = {self, "--worker", "2", BENCH_GEMM, NULL};
        char out[4096];

        series_run(&sg, pin ? s1 : s1 + 3, "gflops");
        for (int i = 0; i < NNETS; i++) {
            char cls[16], shape[48];
            char *a1[] = {"taskset", "-c", "0", self, "--worker", "1", path[i], NULL};
            char *p1[] = {"taskset", "-c", "0", "/usr/bin/python3", script, path[i], shape, cls,
                          NULL};

            if (!have[i])
                continue;
            snprintf(cls, sizeof cls, "%d", in[i].classes);
            snprintf(shape, sizeof shape, "%d,%d,%d", in[i].c, in[i].h, in[i].w);
            if (run_child(pin ? a1 : a1 + 3, out, sizeof out) == 0) {
                double f = child_value(out, "flops_per_sample");

                series_add(&ours[i], child_value(out, "samples_per_s"));
                if (!strcmp(NETS[i].net, BENCH_GEMM))
                    series_add(&wall1, child_value(out, "wall_samples_per_s"));
                if (f != flops[i]) /* the model's count and the spec's are one */
                    printf("  %s: FLOPs per sample %.0f built, %.0f planned\n", NETS[i].label,
                           f, flops[i]);
            }
            if (torch)
                series_run(&pt[i], pin ? p1 : p1 + 3, "samples_per_s");
        }
        series_run(&ours2, a2, "wall_samples_per_s");
        series_run(&gemm, pin ? g1 : g1 + 3, "samples_per_s");
    }
    series_print("sgemm 256x2048x2048, 1 thread", &sg, "GFLOP/s", &med_sg);
    for (int i = 0; i < NNETS; i++) {
        double mo, mp;

        if (!have[i])
            continue;
        printf("%s (%s): %.0f FLOPs per sample (forward + backward, as `fednode model` "
               "counts)\n", NETS[i].label, NETS[i].net, flops[i]);
        series_print("ours, 1 thread, taskset -c 0", &ours[i], "samples/s", &mo);
        series_print("PyTorch, 1 thread, taskset -c 0", &pt[i], "samples/s", &mp);
        if (!strcmp(NETS[i].net, BENCH_GEMM)) {
            double mg, m2, mw;

            series_print("its sgemm calls alone, taskset -c 0", &gemm, "samples/s", &mg);
            series_print("ours, 1 thread, per second of wall time", &wall1, "samples/s", &mw);
            series_print("ours, 2 threads, per second of wall time", &ours2, "samples/s", &m2);
            print_ratio("ours 2 threads / 1 thread, wall time", m2, mw, 1.4);
            print_ratio("ours / its sgemm calls alone", mo, mg, 0.0);
        }
        if (med_sg > 0.0)
            printf("  %-46s %6.2f ours, %.2f PyTorch GFLOP/s  (%.0f%% and %.0f%% of sgemm)\n",
                   "achieved", mo * flops[i] / 1e9, mp * flops[i] / 1e9,
                   100.0 * mo * flops[i] / 1e9 / med_sg, 100.0 * mp * flops[i] / 1e9 / med_sg);
        if (torch)
            print_ratio("ours / PyTorch, one core", mo, mp, NETS[i].target);
        if (!ours[i].n)
            rc = 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--worker")) {
        int threads = atoi(argv[2]);

        return threads >= 1 && threads <= 64 ? bench_ours(argv[3], threads) : 1;
    }
    if (argc == 2 && !strcmp(argv[1], "--gemm")) {
        printf("samples_per_s=%.1f\n", bench_gemm());
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--sgemm")) {
        printf("gflops=%.2f\n", bench_sgemm());
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--worker THREADS NET | --gemm | --sgemm]\n", argv[0]);
        return 2;
    }
    return drive(argv[0]);
}
