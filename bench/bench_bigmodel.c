/* bench_bigmodel.c - `make bench`: the figures of --precision bf16 and
 * --recompute, measured as CPU time per step (the machine is shared: its
 * other load takes wall time, less so CPU time), A and B interleaved,
 * each a median with its spread (min-max) over rounds:
 *   - one-thread cblas_sgemm and our bf16 GEMMs (AVX512-BF16, AMX), GFLOP/s, on the
 *     MLP's forward product (256 x 2048 x 2048);
 *   - training steps of mlp:2048,2048 and of ResNet-8
 *     (examples/models/resnet8.cfg, run from the source tree; skipped,
 *     said so, where it is missing) on Fashion-MNIST-shaped batches of 256
 *     (random bytes), fp32 against bf16, on 1 and 2 shards;
 *   - a deep conv net and ResNet-8 at batch 256: step time with
 *     --recompute 2 against none, and the activation buffers' bytes of each.
 * Where the CPU lacks AVX512-BF16 the bf16 figures are skipped, said so. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/gemm_bf16.h"
#include "model/model.h"
#include "model/model_cfg.h"
#include "model/optim.h"
#include "bench/bench_stats.h"

#define ROUNDS 5
#define MLP "mlp:2048,2048"
#define DEEP "g:C16k3p1,R,C16k3p1,R,C16k3p1,R,C16k3p1,R,C16k3p1,R,C16k3p1,R,C16k3p1,R," \
             "C16k3p1,R,P,L"
#define BATCH 256
#define RESNET8 "examples/models/resnet8.cfg"

static int have_bf16(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

static void bench_gemm(int bf16)
{
    int M = BATCH, N = 2048, K = 2048, reps = 5;
    float *A = fed_alloc_aligned(sizeof(float) * (size_t)M * K);
    float *B = fed_alloc_aligned(sizeof(float) * (size_t)N * K);
    float *C = fed_alloc_aligned(sizeof(float) * (size_t)M * N);
    double t[3][ROUNDS], med, lo, hi;
    int amx = bf16 && fed_gemm_amx_permit();

    for (size_t i = 0; i < (size_t)M * K; i++)
        A[i] = (float)(i % 17) / 17.0f - 0.5f;
    for (size_t i = 0; i < (size_t)N * K; i++)
        B[i] = (float)(i % 13) / 13.0f - 0.5f;
    openblas_set_num_threads(1);
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < 1 + bf16 + amx; k++) { /* interleaved */
            double t0 = bench_cpu_s();

            for (int i = 0; i < reps; i++)
                if (k == 0)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, K, B,
                                K, 0.0f, C, N);
                else if ((k == 1 ? fed_gemm_bf16 : fed_gemm_amx)(0, 1, M, N, K, 1.0f, A, K, B, K,
                                                                 0.0f, C, N) != FED_OK)
                    exit(1);
            t[k][r] = 2.0 * M * N * K * reps / (bench_cpu_s() - t0) / 1e9;
        }
    bench_spread(t[0], ROUNDS, &med, &lo, &hi);
    printf("gemm %dx%dx%d, one thread: sgemm (OpenBLAS %s) %.1f GFLOP/s (%.1f-%.1f)\n", M, N, K,
           openblas_get_corename(), med, lo, hi);
    if (bf16) {
        bench_spread(t[1], ROUNDS, &med, &lo, &hi);
        printf("gemm %dx%dx%d, one thread: bf16 (AVX512-BF16) %.1f GFLOP/s (%.1f-%.1f)\n", M, N,
               K, med, lo, hi);
    }
    if (amx) {
        bench_spread(t[2], ROUNDS, &med, &lo, &hi);
        printf("gemm %dx%dx%d, one thread: bf16 (AMX tiles) %.1f GFLOP/s (%.1f-%.1f)\n", M, N, K,
               med, lo, hi);
    }
    fed_free(A);
    fed_free(B);
    fed_free(C);
}

typedef struct arm {
    fed_model *m;
    fed_optim *o;
} arm;

static void arm_new(arm *a, const char *spec, fed_model_shape in, fed_backend *be, fed_pool *pool,
                    int shards, fed_precision p, int recompute)
{
    fed_rng rng;
    fed_optim_cfg cfg;
    char why[256];

    fed_rng_seed(&rng, 1);
    if (fed_model_new(spec, in, be, pool, shards, BATCH, &a->m) != FED_OK ||
        fed_model_init(a->m, &rng) != FED_OK ||
        fed_model_set_precision(a->m, p, why, sizeof why) != FED_OK ||
        fed_model_set_recompute(a->m, recompute) != FED_OK)
        exit(1);
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    if (fed_optim_new(&cfg, a->m, &a->o) != FED_OK)
        exit(1);
}

static void arm_free(arm *a)
{
    fed_optim_free(a->o);
    fed_model_free(a->m);
}

/* CPU seconds per step of a and b over ROUNDS rounds of steps each,
 * interleaved; into ta, tb (ROUNDS). */
static void race(arm *a, arm *b, const fed_batch *bt, int steps, double *ta, double *tb)
{
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < 2; k++) {
            arm *x = k ? b : a;
            double t0;

            if (fed_optim_train_step(x->o, x->m, bt, NULL) != FED_OK) /* warm */
                exit(1);
            t0 = bench_cpu_s();
            for (int s = 0; s < steps; s++)
                if (fed_optim_train_step(x->o, x->m, bt, NULL) != FED_OK)
                    exit(1);
            (k ? tb : ta)[r] = (bench_cpu_s() - t0) / steps;
        }
}

static void report(const char *what, double *ta, double *tb, const char *na, const char *nb,
                   int per_sample)
{
    double ma, la, ha, mb, lb, hb;

    bench_spread(ta, ROUNDS, &ma, &la, &ha);
    bench_spread(tb, ROUNDS, &mb, &lb, &hb);
    if (per_sample)
        printf("%s: %s %.0f samples/CPU-s (%.0f-%.0f), %s %.0f (%.0f-%.0f): %.2fx\n", what, na,
               BATCH / ma, BATCH / ha, BATCH / la, nb, BATCH / mb, BATCH / hb, BATCH / lb,
               ma / mb);
    else
        printf("%s: %s %.1f ms/step CPU (%.1f-%.1f), %s %.1f (%.1f-%.1f): %.2fx\n", what, na,
               1e3 * ma, 1e3 * la, 1e3 * ha, nb, 1e3 * mb, 1e3 * lb, 1e3 * hb, mb / ma);
}

/* fp32 against bf16 samples per CPU-second of spec (name) on 1 and 2
 * shards, steps a round. */
static void bf16_races(const char *spec, const char *name, fed_backend *be, fed_pool *pool,
                       const fed_batch *bt, int steps)
{
    double ta[ROUNDS], tb[ROUNDS];

    for (int shards = 1; shards <= 2; shards++) {
        arm a, b;
        char what[96];

        arm_new(&a, spec, (fed_model_shape){1, 28, 28, 10, 0}, be, pool, shards,
                FED_PRECISION_FP32, 1);
        arm_new(&b, spec, (fed_model_shape){1, 28, 28, 10, 0}, be, pool, shards,
                FED_PRECISION_BF16, 1);
        race(&a, &b, bt, steps, ta, tb);
        snprintf(what, sizeof what, "%s batch %d, %d shard%s", name, BATCH, shards,
                 shards > 1 ? "s" : "");
        report(what, ta, tb, "fp32", "bf16", 1);
        arm_free(&a);
        arm_free(&b);
    }
}

/* spec (name)'s step time at --recompute 2 against none on 2 shards, and
 * the activation buffers of each. */
static void recompute_race(const char *spec, const char *name, fed_backend *be, fed_pool *pool,
                           const fed_batch *bt, int steps)
{
    double ta[ROUNDS], tb[ROUNDS];
    arm a, b;
    char what[96];

    arm_new(&a, spec, (fed_model_shape){1, 28, 28, 10, 0}, be, pool, 2, FED_PRECISION_FP32, 1);
    arm_new(&b, spec, (fed_model_shape){1, 28, 28, 10, 0}, be, pool, 2, FED_PRECISION_FP32, 2);
    race(&a, &b, bt, steps, ta, tb);
    snprintf(what, sizeof what, "%s batch %d, 2 shards", name, BATCH);
    report(what, ta, tb, "recompute 1", "recompute 2", 0);
    printf("%s activation buffers: %.1f MiB, %.1f MiB at recompute 2 (%.3f)\n", name,
           fed_model_activation_bytes(a.m) / 1048576.0,
           fed_model_activation_bytes(b.m) / 1048576.0,
           (double)fed_model_activation_bytes(b.m) / (double)fed_model_activation_bytes(a.m));
    arm_free(&a);
    arm_free(&b);
}

int main(void)
{
    fed_backend *be = NULL;
    fed_pool *pool = NULL;
    int bf16 = have_bf16();
    fed_rng rng;
    uint8_t *x = malloc((size_t)BATCH * 784);
    int32_t y[BATCH];
    fed_batch bt = {.n = BATCH, .x_u8 = x, .y = y};
    fed_model_cfg *cfg = NULL;
    char why[256], resnet8[FED_MODEL_GRAPH_MAX];
    int have_resnet8 = fed_model_cfg_load(RESNET8, &cfg, why, sizeof why) == FED_OK &&
                       fed_model_cfg_spec(cfg, resnet8, sizeof resnet8, why, sizeof why) == FED_OK;

    fed_model_cfg_free(cfg);
    printf("# bench_bigmodel: CPU time per step, interleaved, median (min-max) of %d rounds; "
           "under load: other processes share the machine\n", ROUNDS);
    if (fed_backend_cpu_new(1, &be) != FED_OK || fed_pool_new(2, &pool) != FED_OK)
        return 1;
    fed_rng_seed(&rng, 2);
    for (int i = 0; i < BATCH * 784; i++)
        x[i] = (uint8_t)fed_rng_u64(&rng);
    for (int i = 0; i < BATCH; i++)
        y[i] = (int32_t)(fed_rng_u64(&rng) % 10);
    if (!have_resnet8)
        printf("resnet8: skipped, %s\n", why);
    bench_gemm(bf16);
    if (!bf16)
        printf("bf16: skipped, this CPU lacks AVX512-BF16\n");
    if (bf16)
        bf16_races(MLP, MLP, be, pool, &bt, 4);
    if (bf16 && have_resnet8)
        bf16_races(resnet8, "resnet8", be, pool, &bt, 1);
    recompute_race(DEEP, "deep cnn (8 convs 16x28x28)", be, pool, &bt, 2);
    if (have_resnet8)
        recompute_race(resnet8, "resnet8", be, pool, &bt, 1);
    fed_pool_free(pool);
    fed_backend_free(be);
    free(x);
    return 0;
}
