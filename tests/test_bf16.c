/* test_bf16.c - --precision bf16 on the CPU: the AVX512-BF16 GEMM (and the
 * AMX one where the CPU and Linux give its tiles) against
 * the same product in double of the operands rounded to bf16 (every
 * transpose, edges of the 8 x 32 kernel, K over one pass, alpha and beta);
 * each layer's logits and gradients within bf16's tolerance of fp32's
 * (linear, conv, a residual add, pooling, group norm, batch norm after a
 * strided padded conv; a ResNet-8-like net's logits and loss); a short training
 * run whose loss tracks fp32's; DP-SGD refused. Skipped (cmocka's skip)
 * where the CPU lacks avx512_bf16. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cpuid.h>

#include "core/rng.h"
#include "model/backend.h"
#include "model/gemm_bf16.h"
#include "model/model.h"
#include "model/optim.h"
#include "tests/support/support.h"

/* Whether this CPU runs the bf16 GEMM (else each test skips). */
static int have_bf16(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

static double bf16_round(float f) /* nearest even, as the kernel packs */
{
    uint32_t u;
    float r;

    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&r, &u, sizeof r);
    return r;
}

static float uniform(fed_rng *r)
{
    return (float)(fed_rng_u64(r) % 2000001) / 1000000.0f - 1.0f;
}

static int use_amx; /* one_gemm runs fed_gemm_amx */

static int have_amx(void)
{
    unsigned a, b, c, d;

    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 22 & 1) &&
           fed_gemm_amx_permit();
}

static void one_gemm(int ta, int tb, int M, int N, int K, float alpha, float beta)
{
    fed_rng r;
    int lda = ta ? M + 3 : K + 3, ldb = tb ? K + 1 : N + 1, ldc = N + 2;
    float *A = malloc(sizeof(float) * (size_t)(ta ? K : M) * lda);
    float *B = malloc(sizeof(float) * (size_t)(tb ? N : K) * ldb);
    float *C = malloc(sizeof(float) * (size_t)M * ldc), *C0 = malloc(sizeof(float) * (size_t)M * ldc);

    fed_rng_seed(&r, (uint64_t)(M * 7 + N * 13 + K));
    for (size_t i = 0; i < (size_t)(ta ? K : M) * lda; i++)
        A[i] = uniform(&r);
    for (size_t i = 0; i < (size_t)(tb ? N : K) * ldb; i++)
        B[i] = uniform(&r);
    for (size_t i = 0; i < (size_t)M * ldc; i++)
        C[i] = C0[i] = uniform(&r);
    assert_int_equal((use_amx ? fed_gemm_amx : fed_gemm_bf16)(ta, tb, M, N, K, alpha, A, lda, B,
                                                               ldb, beta, C, ldc),
                     FED_OK);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;

            for (int k = 0; k < K; k++) {
                double a = bf16_round(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                double b = bf16_round(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);

                s += a * b;
                mag += fabs(a * b);
            }
            s = alpha * s + beta * C0[(size_t)i * ldc + j];
            /* fp32 sums of exact products: K roundings at most */
            if (!(fabs(C[(size_t)i * ldc + j] - s) <= 1e-6 * (K + 4) * (mag + 1)))
                fail_msg("%s ta %d tb %d %dx%dx%d: C[%d][%d] %.9g, %.9g wanted",
                         use_amx ? "amx" : "avx512", ta, tb, M, N, K, i, j,
                         (double)C[(size_t)i * ldc + j], s);
        }
    /* the padding columns of C are left alone */
    for (int i = 0; i < M; i++)
        assert_true(C[(size_t)i * ldc + N] == C0[(size_t)i * ldc + N]);
    free(A);
    free(B);
    free(C);
    free(C0);
}

static void test_gemm(void **state)
{
    (void)state;
    if (!have_bf16())
        skip();
    for (use_amx = 0; use_amx < 1 + have_amx(); use_amx++) {
        print_message("%s\n", use_amx ? "AMX tiles" : "AVX512-BF16");
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                one_gemm(ta, tb, 13, 37, 7, 1.0f, 0.0f);
                one_gemm(ta, tb, 8, 32, 1031, 0.5f, 1.0f); /* three passes of k, one odd */
                one_gemm(ta, tb, 1, 1, 1, 2.0f, -1.0f);
                one_gemm(ta, tb, 45, 50, 70, 1.0f, 0.5f); /* blocks of 32 and their edges */
            }
    }
    use_amx = 0;
}

/* A net of every kind a bf16 GEMM reaches, and the fp32 ones around it. */
#define NET "g:c0=C8k3p1,r0=R,a=C8k3p1,Ug2,R,s=+r0,Mk2,c1=C6k3,R,F,f1=L24,R,L"
#define BATCH 16
/* ResNet-8's kinds: bias-free convs (padded, strided, a 1x1 shortcut) with
 * batch norm (fp32 under bf16), residual adds, global average pooling. */
#define BN_NET "g:c0=C6k3p1b0,N,r0=R,a=C6k3p1b0,N,R,b=C6k3p1b0,N,s=+r0,r1=R,C8k3s2p1b0,N,R," \
               "C8k3p1b0,e=N,d=C8k1s2b0<r1,N,+e,R,P,L"

static const char *net_spec = NET;

static fed_model *net(fed_backend *be, fed_precision p)
{
    fed_model *m = NULL;
    fed_rng rng;
    char why[256];

    assert_int_equal(fed_model_new(net_spec, (fed_model_shape){2, 10, 10, 4, 0}, be, NULL, 1, BATCH, &m),
                     FED_OK);
    fed_rng_seed(&rng, 3);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    assert_int_equal(fed_model_set_precision(m, p, why, sizeof why), FED_OK);
    assert_int_equal(fed_model_precision(m), p);
    return m;
}

static void batch_of(fed_rng *r, float *x, int32_t *y, int n)
{
    for (int i = 0; i < n * 200; i++)
        x[i] = uniform(r);
    for (int i = 0; i < n; i++) { /* a label the inputs' two channel sums decide */
        float c0 = 0, c1 = 0;

        for (int j = 0; j < 100; j++) {
            c0 += x[i * 200 + j];
            c1 += x[i * 200 + 100 + j];
        }
        y[i] = (c0 > 0) * 2 + (c1 > 0);
    }
}

/* Layer by layer (one GEMM layer before the logits' linear, with a kind
 * computed in fp32 between): each tensor's gradient within 1% of fp32's in
 * L2 (bf16 keeps 8 bits: 0.4% a rounding; a sum over the batch cancels,
 * so single entries stray further). A deeper net with ReLUs (a mask flips
 * where bf16 moves a value across 0): the logits within 3% of the largest
 * of fp32's, the loss within 1%, the gradients printed. */
static void layers_of(const char *spec, double tol);

static void test_layers(void **state)
{
    (void)state;
    if (!have_bf16())
        skip();
    layers_of("g:L", 0.01);
    layers_of("g:C4k3,F,L", 0.01);
    layers_of("g:C4k3s2p1d2,Mk2,F,L", 0.01);
    layers_of("g:C4k3p1,Ug2,F,L", 0.01);
    layers_of("g:c=C2k3p1,s=+-,Ak2,F,L", 0.01);
    layers_of("g:C4k3s2p1b0,N,F,L", 0.01); /* batch norm on a strided, padded conv */
    layers_of(NET, 0); /* relu masks flip where bf16 moves a value across 0 */
    layers_of(BN_NET, 0);
    net_spec = NET;
}

static void layers_of(const char *spec, double tol)
{
    fed_backend *be = NULL;
    fed_model *m32, *m16;
    fed_rng r;
    float x[BATCH * 200], l32[BATCH * 4], l16[BATCH * 4];

    int32_t y[BATCH];
    fed_batch b = {.n = BATCH, .x_f32 = x, .y = y};
    fed_step_stats s32 = {0, 0, 0}, s16 = {0, 0, 0};
    const fed_tensor_info *t;
    int nt;

    net_spec = spec;
    print_message("%s\n", spec);
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    m32 = net(be, FED_PRECISION_FP32);
    m16 = net(be, FED_PRECISION_BF16);
    fed_rng_seed(&r, 8);
    batch_of(&r, x, y, BATCH);
    assert_int_equal(fed_model_logits(m32, &b, l32), FED_OK);
    assert_int_equal(fed_model_logits(m16, &b, l16), FED_OK);
    {
        float big = 0, diff = 0;

        for (int i = 0; i < BATCH * 4; i++) {
            big = fmaxf(big, fabsf(l32[i]));
            diff = fmaxf(diff, fabsf(l32[i] - l16[i]));
        }
        assert_true(diff > 0); /* it did round */
        assert_true(diff <= 0.03f * big);
    }
    assert_int_equal(fed_model_forward_backward(m32, &b, &s32), FED_OK);
    assert_int_equal(fed_model_forward_backward(m16, &b, &s16), FED_OK);
    assert_true(fabs(s32.loss_sum - s16.loss_sum) <= 0.01 * s32.loss_sum);
    t = fed_model_tensors(m32, &nt);
    for (int k = 0; k < nt; k++) {
        const float *g32 = fed_model_grads_dev(m32) + t[k].offset;
        const float *g16 = fed_model_grads_dev(m16) + t[k].offset;
        double sq = 0, dsq = 0;

        for (size_t i = 0; i < t[k].numel; i++) {
            sq += (double)g32[i] * g32[i];
            dsq += ((double)g32[i] - g16[i]) * ((double)g32[i] - g16[i]);
        }
        if (!(t[k].flags & FED_TENSOR_TRAINED)) /* batch norm's running statistics */
            continue;
        print_message("%-10s |g| %.4g, |g - g_bf16| %.3g (%.2f%%)\n", t[k].name, sqrt(sq),
                      sqrt(dsq), 100.0 * sqrt(dsq / sq));
        if (tol > 0 && !(sqrt(dsq) <= tol * sqrt(sq)))
            fail_msg("%s: the bf16 gradient is %.2f%% off fp32's", t[k].name,
                     100.0 * sqrt(dsq / sq));
    }
    fed_model_free(m32);
    fed_model_free(m16);
    fed_backend_free(be);
}

/* 60 Adam steps from one init on the same batches: the bf16 run's loss
 * over each 10 steps within 5% of fp32's, and both learn. */
static void test_training(void **state)
{
    fed_backend *be = NULL;
    fed_model *m[2];
    fed_optim *o[2];
    double loss[2][6] = {{0}};
    fed_rng r;

    (void)state;
    if (!have_bf16())
        skip();
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    net_spec = "g:L64,R,L"; /* the channel sums are one linear map away */
    for (int k = 0; k < 2; k++) {
        fed_optim_cfg cfg;

        m[k] = net(be, k ? FED_PRECISION_BF16 : FED_PRECISION_FP32);
        fed_optim_cfg_default(&cfg, FED_OPTIM_ADAM);
        cfg.lr = 0.01f;
        assert_int_equal(fed_optim_new(&cfg, m[k], &o[k]), FED_OK);
    }
    fed_rng_seed(&r, 9);
    for (int s = 0; s < 60; s++) {
        float x[BATCH * 200];
        int32_t y[BATCH];
        fed_batch b = {.n = BATCH, .x_f32 = x, .y = y};

        batch_of(&r, x, y, BATCH);
        for (int k = 0; k < 2; k++) {
            fed_step_stats st = {0, 0, 0};

            assert_int_equal(fed_optim_train_step(o[k], m[k], &b, &st), FED_OK);
            loss[k][s / 10] += st.loss_sum / (10.0 * BATCH);
        }
    }
    for (int w = 0; w < 6; w++) {
        print_message("steps %2d-%2d: loss fp32 %.4f bf16 %.4f\n", w * 10, w * 10 + 9,
                      loss[0][w], loss[1][w]);
        assert_true(fabs(loss[0][w] - loss[1][w]) <= 0.05 * loss[0][w]);
    }
    assert_true(loss[0][5] < 0.8 * loss[0][0]);
    assert_true(loss[1][5] < 0.8 * loss[1][0]);
    for (int k = 0; k < 2; k++) {
        fed_optim_free(o[k]);
        fed_model_free(m[k]);
    }
    net_spec = NET;
    fed_backend_free(be);
}

static void test_refusals(void **state)
{
    fed_backend *be = NULL;
    fed_model *m;
    fed_precision p;
    char why[256];

    (void)state;
    assert_int_equal(fed_model_precision_parse("fp32", &p), FED_OK);
    assert_int_equal(p, FED_PRECISION_FP32);
    assert_int_equal(fed_model_precision_parse("fp16", &p), FED_ERR_SPEC);
    if (!have_bf16())
        skip();
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    m = net(be, FED_PRECISION_BF16);
    assert_int_equal(fed_model_dp_check(m, why, sizeof why), FED_ERR_UNSUPPORTED);
    assert_string_equal(why, "model: DP-SGD's per-sample norms, clipping and noise stay fp32: "
                             "train without --precision bf16");
    assert_int_equal(fed_model_set_precision(m, FED_PRECISION_FP32, why, sizeof why), FED_OK);
    assert_int_equal(fed_model_dp_check(m, why, sizeof why), FED_OK);
    fed_model_free(m);
    fed_backend_free(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_layers),
        cmocka_unit_test(test_training),
        cmocka_unit_test(test_refusals),
    };

    fed_test_log_quiet();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
