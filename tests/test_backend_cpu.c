/* test_backend_cpu.c - every kernel of the CPU backend against a plain
 * double-precision loop written here, plus fed_backend_open's device
 * grammar. These are the references the CUDA plugin's kernels are held to
 * as well (the same table, the same semantics). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <cmocka.h>

#include "core/rng.h"
#include "model/backend.h"
#include "model/model.h"

static fed_backend *be;
static fed_rng rng;

static int setup(void **state)
{
    (void)state;
    fed_rng_seed(&rng, 12345);
    return fed_backend_cpu_new(1, &be) == FED_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    fed_backend_free(be);
    return 0;
}

static float *randn(size_t n)
{
    float *x = malloc(n * sizeof *x);

    for (size_t i = 0; i < n; i++)
        x[i] = (float)fed_rng_normal(&rng);
    return x;
}

static void assert_near(const float *a, const double *b, size_t n, double tol)
{
    for (size_t i = 0; i < n; i++)
        if (fabs(a[i] - b[i]) > tol * (1.0 + fabs(b[i])))
            fail_msg("element %zu: %.9g vs %.9g", i, (double)a[i], b[i]);
}

static void test_gemm_all_transposes(void **state)
{
    const int M = 7, N = 5, K = 9;

    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            /* padded leading dimensions to prove they are honoured */
            int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
            float *A = randn((size_t)(ta ? K : M) * lda), *B = randn((size_t)(tb ? N : K) * ldb);
            float *C = randn((size_t)M * ldc);
            double *ref = malloc((size_t)M * ldc * sizeof *ref);

            for (int i = 0; i < M * ldc; i++)
                ref[i] = C[i];
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double s = 0.0;

                    for (int k = 0; k < K; k++)
                        s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) *
                             (tb ? B[j * ldb + k] : B[k * ldb + j]);
                    ref[i * ldc + j] = 0.5 * s + 2.0 * C[i * ldc + j];
                }
            be->gemm(be, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 2.0f, C, ldc);
            assert_near(C, ref, (size_t)M * ldc, 1e-5);
            free(A);
            free(B);
            free(C);
            free(ref);
        }
}

static void test_bias_relu(void **state)
{
    const int B = 6, N = 11;
    float *y = randn(B * N), *bias = randn(N), *y2 = malloc(B * N * sizeof *y2);
    double ref[66], ref2[66];

    (void)state;
    memcpy(y2, y, B * N * sizeof *y);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < N; j++) {
            double v = (double)y[b * N + j] + bias[j];

            ref[b * N + j] = v > 0 ? v : 0;
            ref2[b * N + j] = v;
        }
    be->bias_act_fwd(be, y, bias, B, N, 1);
    be->bias_act_fwd(be, y2, bias, B, N, 0);
    assert_near(y, ref, B * N, 1e-6);
    assert_near(y2, ref2, B * N, 1e-6);
    {
        float *dy = randn(B * N), *dy0 = malloc(B * N * sizeof *dy0), *db = randn(N);
        double rdb[11] = {0};

        memcpy(dy0, dy, B * N * sizeof *dy);
        be->relu_bwd(be, dy, y, (size_t)B * N);
        for (int i = 0; i < B * N; i++)
            assert_true(dy[i] == (y[i] > 0 ? dy0[i] : 0.0f));
        for (int b = 0; b < B; b++)
            for (int j = 0; j < N; j++)
                rdb[j] += dy0[b * N + j];
        be->bias_bwd(be, db, dy0, B, N, 0);
        assert_near(db, rdb, N, 1e-5);
        for (int j = 0; j < N; j++)
            rdb[j] *= 2;
        be->bias_bwd(be, db, dy0, B, N, 1);
        assert_near(db, rdb, N, 1e-5);
        free(dy);
        free(dy0);
        free(db);
    }
    free(y);
    free(y2);
    free(bias);
}

static void test_channel_bias(void **state)
{
    const int B = 3, C = 4, HW = 37;
    float *y = randn(B * C * HW), *bias = randn(C), *db = randn(C);
    double *ref = malloc(B * C * HW * sizeof *ref), rdb[4] = {0};

    (void)state;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++) {
                int k = (b * C + c) * HW + i;
                double v = (double)y[k] + bias[c];

                ref[k] = v > 0 ? v : 0;
                rdb[c] += y[k];
            }
    be->chan_bias_bwd(be, db, y, B, C, HW, 0);
    assert_near(db, rdb, C, 1e-5);
    be->chan_bias_bwd(be, db, y, B, C, HW, 1);
    for (int c = 0; c < C; c++)
        rdb[c] *= 2;
    assert_near(db, rdb, C, 1e-5);
    be->chan_bias_act_fwd(be, y, bias, B, C, HW, 1);
    assert_near(y, ref, (size_t)B * C * HW, 1e-6);
    free(y);
    free(bias);
    free(db);
    free(ref);
}

static void test_u8_scale(void **state)
{
    uint8_t src[300];
    float dst[300];

    (void)state;
    for (int i = 0; i < 300; i++)
        src[i] = (uint8_t)(i * 7);
    be->u8_to_f32(be, dst, src, 300, 1.0f / 255.0f, 0.0f);
    for (int i = 0; i < 300; i++)
        assert_true(fabs(dst[i] - src[i] / 255.0) < 1e-7);
    /* the model's own map: 0 -> -1, 255 -> 1, centred and exact at the ends */
    be->u8_to_f32(be, dst, src, 300, FED_MODEL_PIXEL_SCALE, FED_MODEL_PIXEL_SHIFT);
    for (int i = 0; i < 300; i++)
        assert_true(fabs(dst[i] - (src[i] / 127.5 - 1.0)) < 2e-7);
    src[0] = 0;
    src[1] = 255;
    be->u8_to_f32(be, dst, src, 2, FED_MODEL_PIXEL_SCALE, FED_MODEL_PIXEL_SHIFT);
    assert_true(dst[0] == -1.0f && dst[1] == 1.0f);
}

static void test_softmax_xent(void **state)
{
    const int B = 9, C = 7;
    float *z = randn(B * C), *z0 = malloc(B * C * sizeof *z0);
    int32_t y[9];
    double loss = 0, eloss = 0, rloss = 0, *rd = malloc(B * C * sizeof *rd);
    int correct = -1, ecorrect = -1, rcorrect = 0;

    (void)state;
    for (int i = 0; i < B * C; i++)
        z[i] *= 4.0f; /* confident rows too */
    z[3] = 80.0f;     /* a large logit must not overflow */
    memcpy(z0, z, B * C * sizeof *z);
    for (int b = 0; b < B; b++)
        y[b] = (int32_t)fed_rng_below(&rng, C);
    for (int b = 0; b < B; b++) {
        double mx = z[b * C], sum = 0;
        int am = 0;

        for (int j = 1; j < C; j++)
            if (z[b * C + j] > mx) {
                mx = z[b * C + j];
                am = j;
            }
        for (int j = 0; j < C; j++)
            sum += exp(z[b * C + j] - mx);
        rloss += log(sum) + mx - z[b * C + y[b]];
        rcorrect += am == y[b];
        for (int j = 0; j < C; j++)
            rd[b * C + j] = (exp(z[b * C + j] - mx) / sum - (j == y[b])) * 0.25;
    }
    be->softmax_eval(be, z, y, B, C, &eloss, &ecorrect);
    assert_memory_equal(z, z0, B * C * sizeof *z); /* eval leaves logits alone */
    be->softmax_xent(be, z, y, B, C, 0.25f, &loss, &correct);
    assert_true(fabs(loss - rloss) < 1e-5 * (1 + rloss));
    assert_true(fabs(eloss - rloss) < 1e-5 * (1 + rloss));
    assert_int_equal(correct, rcorrect);
    assert_int_equal(ecorrect, rcorrect);
    assert_near(z, rd, B * C, 1e-5);
    be->softmax_xent(be, z0, y, B, C, 1.0f, NULL, NULL); /* NULL outputs are fine */
    free(z);
    free(z0);
    free(rd);
}

static void test_im2col_col2im(void **state)
{
    const int C = 3, H = 9, W = 7, K = 4, OH = H - K + 1, OW = W - K + 1;
    size_t ncol = (size_t)C * K * K * OH * OW;
    float *x = randn(C * H * W), *col = malloc(ncol * sizeof *col), *dcol = randn(ncol);
    float *dx = calloc(C * H * W, sizeof *dx);
    double lhs = 0, rhs = 0;

    (void)state;
    be->im2col(be, x, C, H, W, K, K, col);
    for (int c = 0; c < C; c++)
        for (int ki = 0; ki < K; ki++)
            for (int kj = 0; kj < K; kj++)
                for (int i = 0; i < OH; i++)
                    for (int j = 0; j < OW; j++)
                        assert_true(col[(((size_t)c * K + ki) * K + kj) * OH * OW + i * OW + j] ==
                                    x[(c * H + i + ki) * W + j + kj]);
    /* col2im is im2col's adjoint: <col2im(dcol), x> == <dcol, im2col(x)> */
    be->col2im(be, dcol, C, H, W, K, K, dx);
    for (int i = 0; i < C * H * W; i++)
        lhs += (double)dx[i] * x[i];
    for (size_t i = 0; i < ncol; i++)
        rhs += (double)dcol[i] * col[i];
    assert_true(fabs(lhs - rhs) < 1e-4 * (1 + fabs(rhs)));
    free(x);
    free(col);
    free(dcol);
    free(dx);
}

/* A window over (C, H, W) with its output size, PyTorch's floor. */
static fed_window window(int C, int H, int W, int K, int S, int P, int D)
{
    fed_window g = {C, H, W, K, K, S, S, P, P, D, D, 0, 0};

    g.OH = (H + 2 * P - D * (K - 1) - 1) / S + 1;
    g.OW = (W + 2 * P - D * (K - 1) - 1) / S + 1;
    return g;
}

/* The value of x at (c, i, j), or pad outside the image. */
static float at(const float *x, const fed_window *g, int c, int i, int j, float pad)
{
    return i >= 0 && i < g->H && j >= 0 && j < g->W ? x[(c * g->H + i) * g->W + j] : pad;
}

/* The embedding's gather, and its scatter-add over two row ranges: each
 * range's rows zeroed (or accumulated into), every sample's row added in
 * order, rows outside the range untouched. */
static void test_embed(void **state)
{
    /* 4 rows of 3 columns, the ids in column 1 of rows of 2 */
    const float W[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
    const float x[4 * 3] = {9, 2, 9, 9, 0, 9, 9, 2, 9, 9, 3, 9};
    const float dy[4 * 2] = {1, 10, 2, 20, 4, 40, 8, 80};
    float y[4 * 2], dW[4 * 2];

    (void)state;
    be->embed_fwd(be, y, W, x, 3, 1, 4, 2);
    assert_true(y[0] == 5 && y[1] == 6 && y[2] == 1 && y[3] == 2 && y[4] == 5 && y[6] == 7);
    for (int k = 0; k < 8; k++)
        dW[k] = -1.0f;
    be->embed_bwd(be, dW, dy, x, 3, 1, 4, 2, 0, 2, 0); /* rows 0, 1 */
    assert_true(dW[0] == 2 && dW[1] == 20 && dW[2] == 0 && dW[3] == 0);
    assert_true(dW[4] == -1 && dW[7] == -1);
    be->embed_bwd(be, dW, dy, x, 3, 1, 4, 2, 2, 4, 0); /* rows 2, 3 */
    assert_true(dW[4] == 5 && dW[5] == 50 && dW[6] == 8 && dW[7] == 80);
    be->embed_bwd(be, dW, dy, x, 3, 1, 4, 2, 2, 4, 1); /* accumulated */
    assert_true(dW[4] == 10 && dW[5] == 100 && dW[0] == 2);
}

/* norm_fwd on two samples of two groups of two channels of two values
 * (G 2, M 4, rep 2): the statistics and outputs written out, a relu; the
 * input gradient of each group sums to 0, the affine gradients of a dy of
 * ones count their values. */
static void test_norm_known(void **state)
{
    const float x[16] = {1, 2, 3, 2, 0, 0, 6, 2, -1, -1, -1, -1, 2, 4, 6, 8};
    const float gamma[4] = {1.0f, 2.0f, 1.0f, -1.0f}, beta[4] = {0.5f, 0.0f, 0.0f, 0.0f};
    float stat[8], y[16], dy[16], dx[16], dg[4], db[4];

    (void)state;
    be->norm_fwd(be, x, 2, 2, 4, 2, gamma, beta, 1e-5f, 0, stat, y);
    /* sample 0, group 0: mean 2, variance 1/2; group 1: mean 2, variance 6 */
    assert_float_equal(stat[0], 2.0f, 1e-7);
    assert_float_equal(stat[1], 1.0 / sqrt(0.5 + 1e-5), 1e-6);
    assert_float_equal(stat[3], 1.0 / sqrt(6.0 + 1e-5), 1e-6);
    /* value 2 (group 0, channel 1): (3 - 2) rstd 2 */
    assert_float_equal(y[2], 2.0 / sqrt(0.5 + 1e-5), 1e-5);
    /* value 6 (group 1, channel 3): (6 - 2) rstd (-1) */
    assert_float_equal(y[6], -4.0 / sqrt(6.0 + 1e-5), 1e-5);
    /* sample 1, group 0 is constant: 0 normalized, beta left */
    assert_float_equal(stat[4], -1.0f, 1e-7);
    assert_float_equal(y[8], 0.5f, 1e-7);
    be->norm_fwd(be, x, 2, 2, 4, 2, gamma, beta, 1e-5f, 1, stat, y);
    assert_float_equal(y[6], 0.0f, 0.0);
    assert_float_equal(y[2], 2.0 / sqrt(0.5 + 1e-5), 1e-5);
    for (int k = 0; k < 16; k++)
        dy[k] = 1.0f;
    be->norm_bwd(be, dy, x, stat, 2, 2, 4, 2, gamma, dx);
    for (int g = 0; g < 4; g++)
        assert_float_equal(dx[4 * g] + dx[4 * g + 1] + dx[4 * g + 2] + dx[4 * g + 3], 0.0f,
                           1e-5);
    be->norm_affine_bwd(be, dy, x, stat, 2, 2, 4, 2, 0, 4, dg, db, 0);
    for (int a = 0; a < 4; a++)
        assert_float_equal(db[a], 4.0f, 0.0);
    /* channel 0's xhat over both samples: sample 0's -1, 0 (rstd units), 1
       sample's 0, 0 */
    assert_float_equal(dg[0], -1.0 / sqrt(0.5 + 1e-5), 1e-5);
    be->norm_affine_bwd(be, dy, x, stat, 2, 2, 4, 2, 1, 2, dg, db, 1);
    assert_float_equal(db[1], 8.0f, 0.0);
    assert_float_equal(db[0], 4.0f, 0.0);
}

/* im2col_win against its definition for strided, padded and dilated
 * windows ("same" padding at stride 1 too, which copies whole runs);
 * col2im_win its adjoint, and bit for bit the sums of its definition taken
 * in the loops' order (c, ki, kj, oi, oj); the plain window (stride 1, no
 * padding) gives exactly what im2col gives. */
static void test_im2col_window(void **state)
{
    static const int cases[][4] = {{3, 2, 1, 1}, {3, 1, 2, 2}, {5, 2, 2, 1}, {2, 3, 0, 2},
                                   {4, 1, 0, 1}, {1, 2, 0, 1}, {3, 1, 1, 1}, {5, 1, 2, 1},
                                   {1, 1, 0, 1}};

    (void)state;
    assert_int_equal(be->caps, FED_BACKEND_CAP_HOST_MEMORY | FED_BACKEND_CAP_SHARDS |
                                   FED_BACKEND_CAP_DP_SGD | FED_BACKEND_CAP_CONV |
                                   FED_BACKEND_CAP_WINDOW | FED_BACKEND_CAP_EMBED |
                                   FED_BACKEND_CAP_NORM | FED_BACKEND_CAP_DROPOUT |
                                   FED_BACKEND_CAP_BATCHNORM);
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        fed_window g = window(3, 9, 8, cases[t][0], cases[t][1], cases[t][2], cases[t][3]);
        int P = g.OH * g.OW;
        size_t ncol = (size_t)g.C * g.KH * g.KW * P, nx = (size_t)g.C * g.H * g.W;
        float *x = randn((int)nx), *col = malloc(ncol * sizeof *col), *dcol = randn((int)ncol);
        float *dx = calloc(nx, sizeof *dx), *ref = calloc(nx, sizeof *ref);
        double lhs = 0, rhs = 0;

        be->im2col_win(be, x, &g, col);
        for (int c = 0; c < g.C; c++)
            for (int ki = 0; ki < g.KH; ki++)
                for (int kj = 0; kj < g.KW; kj++)
                    for (int i = 0; i < g.OH; i++)
                        for (int j = 0; j < g.OW; j++)
                            assert_true(col[(((size_t)c * g.KH + ki) * g.KW + kj) * P +
                                            i * g.OW + j] ==
                                        at(x, &g, c, i * g.SH - g.PH + ki * g.DH,
                                           j * g.SW - g.PW + kj * g.DW, 0.0f));
        be->col2im_win(be, dcol, &g, dx);
        for (int c = 0; c < g.C; c++)
            for (int ki = 0; ki < g.KH; ki++)
                for (int kj = 0; kj < g.KW; kj++)
                    for (int i = 0; i < g.OH; i++)
                        for (int j = 0; j < g.OW; j++) {
                            int h = i * g.SH - g.PH + ki * g.DH, w = j * g.SW - g.PW + kj * g.DW;

                            if (h >= 0 && h < g.H && w >= 0 && w < g.W)
                                ref[((size_t)c * g.H + h) * g.W + w] +=
                                    dcol[(((size_t)c * g.KH + ki) * g.KW + kj) * P +
                                         i * g.OW + j];
                        }
        assert_memory_equal(ref, dx, nx * sizeof *dx);
        for (size_t i = 0; i < nx; i++)
            lhs += (double)dx[i] * x[i];
        for (size_t i = 0; i < ncol; i++)
            rhs += (double)dcol[i] * col[i];
        assert_true(fabs(lhs - rhs) < 1e-4 * (1 + fabs(rhs)));
        if (g.SH == 1 && g.PH == 0 && g.DH == 1) {
            float *col0 = malloc(ncol * sizeof *col0);

            be->im2col(be, x, g.C, g.H, g.W, g.KH, g.KW, col0);
            assert_memory_equal(col0, col, ncol * sizeof *col);
            free(col0);
        }
        free(x);
        free(col);
        free(dcol);
        free(dx);
        free(ref);
    }
}

/* Max and average pooling over any window against their definitions (the
 * first maximum in row-major order wins; the average divides by the whole
 * kernel, padding counted); 2x2 of stride 2 gives exactly what the fixed
 * 2x2 kernels give. Backwards: max routes dy to the winner, average is the
 * forward's adjoint. */
static void test_pool_window(void **state)
{
    static const int cases[][3] = {{2, 2, 0}, {3, 2, 1}, {3, 1, 1}, {2, 1, 0}, {4, 3, 2},
                                   {5, 5, 0}};
    const int n = 2;

    (void)state;
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        fed_window g = window(3, 7, 9, cases[t][0], cases[t][1], cases[t][2], 1);
        int P = g.OH * g.OW, planes = n * g.C;
        size_t nx = (size_t)planes * g.H * g.W, ny = (size_t)planes * P;
        float *x = randn((int)nx), *y = malloc(ny * sizeof *y), *dy = randn((int)ny);
        float *dx = randn((int)nx), *ya = malloc(ny * sizeof *ya), *dxa = randn((int)nx);
        int32_t *arg = malloc(ny * sizeof *arg);
        double lhs = 0, rhs = 0;

        x[5] = x[6] = 3.0f; /* a tie: the first wins */
        be->maxpool_win_fwd(be, x, n, &g, y, arg);
        be->maxpool_win_bwd(be, dy, arg, n, &g, dx);
        be->avgpool_win_fwd(be, x, n, &g, ya);
        be->avgpool_win_bwd(be, dy, n, &g, dxa);
        for (int p = 0; p < planes; p++)
            for (int i = 0; i < g.OH; i++)
                for (int j = 0; j < g.OW; j++) {
                    const float *pl = x + (size_t)p * g.H * g.W;
                    float best = -INFINITY;
                    int win = -1;
                    double sum = 0;
                    size_t o = (size_t)p * P + i * g.OW + j;

                    for (int a = 0; a < g.KH; a++)
                        for (int b = 0; b < g.KW; b++) {
                            int r = i * g.SH - g.PH + a, c = j * g.SW - g.PW + b;
                            float v = at(pl, &g, 0, r, c, -INFINITY);

                            if (v > best) {
                                best = v;
                                win = r * g.W + c;
                            }
                            if (v > -INFINITY)
                                sum += v;
                        }
                    assert_true(y[o] == best);
                    assert_int_equal(arg[o], win);
                    assert_true(fabs(ya[o] - sum / (g.KH * g.KW)) < 1e-5);
                }
        for (int p = 0; p < planes; p++)
            for (int k = 0; k < g.H * g.W; k++) {
                double want = 0;

                for (int o = 0; o < P; o++)
                    if (arg[(size_t)p * P + o] == k)
                        want += dy[(size_t)p * P + o];
                assert_true(fabs(dx[(size_t)p * g.H * g.W + k] - want) < 1e-5);
            }
        for (size_t i = 0; i < nx; i++)
            lhs += (double)dxa[i] * x[i];
        for (size_t i = 0; i < ny; i++)
            rhs += (double)dy[i] * ya[i];
        assert_true(fabs(lhs - rhs) < 1e-4 * (1 + fabs(rhs)));
        if (g.KH == 2 && g.SH == 2 && g.PH == 0) {
            float *y0 = malloc(ny * sizeof *y0), *dx0 = malloc(nx * sizeof *dx0);
            int32_t *arg0 = malloc(ny * sizeof *arg0);

            be->maxpool_fwd(be, x, planes, g.H, g.W, y0, arg0);
            be->maxpool_bwd(be, dy, arg0, planes, g.H, g.W, dx0);
            assert_memory_equal(y0, y, ny * sizeof *y);
            assert_memory_equal(arg0, arg, ny * sizeof *arg);
            assert_memory_equal(dx0, dx, nx * sizeof *dx);
            free(y0);
            free(dx0);
            free(arg0);
        }
        free(x);
        free(y);
        free(dy);
        free(dx);
        free(ya);
        free(dxa);
        free(arg);
    }
}

static void test_maxpool(void **state)
{
    const int BC = 5, H = 7, W = 6, OH = 3, OW = 3;
    float *x = randn(BC * H * W), y[45], dy[45], *dx = randn(BC * H * W);
    int32_t arg[45];

    (void)state;
    for (int i = 0; i < 45; i++)
        dy[i] = (float)(i + 1);
    be->maxpool_fwd(be, x, BC, H, W, y, arg);
    be->maxpool_bwd(be, dy, arg, BC, H, W, dx);
    for (int p = 0; p < BC; p++)
        for (int i = 0; i < OH; i++)
            for (int j = 0; j < OW; j++) {
                const float *pl = x + p * H * W;
                float best = pl[2 * i * W + 2 * j];
                int o = (p * OH + i) * OW + j;

                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 2; b++)
                        best = fmaxf(best, pl[(2 * i + a) * W + 2 * j + b]);
                assert_true(y[o] == best);
                assert_true(pl[arg[o]] == best);
                assert_true(dx[p * H * W + arg[o]] == dy[o]);
            }
    {
        /* everything else in dx is zero (odd last row included) */
        int nonzero = 0;

        for (int i = 0; i < BC * H * W; i++)
            nonzero += dx[i] != 0.0f;
        assert_int_equal(nonzero, 45);
    }
    free(x);
    free(dx);
}

/* dot and sumsq (vector paths picked at run time) give the bits of the
 * plain 8-lane order: lane k sums x[i] * y[i] for i = k mod 8 in order, each
 * product rounded before it is added, then the lanes 0..7. Every n from 0 to
 * 40 (the tails) and a long one, at an unaligned start. */
static double dot_reference(const float *x, const float *y, size_t n)
{
    double lane[8] = {0}, s = 0;

    for (size_t i = 0; i < n; i++) {
        double p = (double)x[i] * (double)y[i]; /* its own statement: never fused */

        lane[i & 7] += p;
    }
    for (int k = 0; k < 8; k++)
        s += lane[k];
    return s;
}

static void test_dot_bits(void **state)
{
    const size_t big = 100003;
    float *x = randn(big + 1), *y = randn(big + 1);

    (void)state;
    for (size_t i = 0; i < big + 1; i += 97) /* spikes: a reordered sum shows */
        x[i] *= 1e6f;
    for (size_t n = 0; n <= 40; n++) {
        double want = dot_reference(x + 1, y + 1, n), got = be->dot(be, n, x + 1, y + 1);

        assert_memory_equal(&got, &want, sizeof got);
        want = dot_reference(x + 1, x + 1, n);
        got = be->sumsq(be, n, x + 1);
        assert_memory_equal(&got, &want, sizeof got);
    }
    {
        double want = dot_reference(x + 1, y + 1, big), got = be->dot(be, big, x + 1, y + 1);

        assert_memory_equal(&got, &want, sizeof got);
    }
    free(x);
    free(y);
}

static void test_vectors(void **state)
{
    const size_t n = 1031;
    float *x = randn(n), *y = randn(n), *y0 = malloc(n * sizeof *y0), out[1031];
    const float *in[3] = {x, y, x};
    const double w[3] = {0.5, -2.0, 0.25};
    double dot = 0, ss = 0, *ref = malloc(n * sizeof *ref);

    (void)state;
    memcpy(y0, y, n * sizeof *y);
    for (size_t i = 0; i < n; i++) {
        dot += (double)x[i] * y[i];
        ss += (double)x[i] * x[i];
        ref[i] = 0.5 * x[i] - 2.0 * y[i] + 0.25 * x[i];
    }
    assert_true(fabs(be->dot(be, n, x, y) - dot) < 1e-9 * (1 + fabs(dot)));
    assert_true(fabs(be->sumsq(be, n, x) - ss) < 1e-9 * ss);
    /* fixed order: the same bits every time */
    assert_true(be->dot(be, n, x, y) == be->dot(be, n, x, y));
    be->weighted_sum(be, out, in, w, 3, n);
    assert_near(out, ref, n, 1e-6);
    be->axpy(be, n, 3.0f, x, y);
    for (size_t i = 0; i < n; i++)
        ref[i] = y0[i] + 3.0 * x[i];
    assert_near(y, ref, n, 1e-6);
    be->scale(be, n, -0.5f, y);
    for (size_t i = 0; i < n; i++)
        ref[i] *= -0.5;
    assert_near(y, ref, n, 1e-6);
    be->fill(be, y, 2.5f, n);
    be->copy(be, out, y, n);
    for (size_t i = 0; i < n; i++)
        assert_true(out[i] == 2.5f);
    free(x);
    free(y);
    free(y0);
    free(ref);
}

/* Kernels flush denormals (a decaying momentum buffer would otherwise
 * crawl through them) but give the caller's floating-point mode back. */
static void test_denormals_flushed_mode_restored(void **state)
{
    float p[4] = {1, 1, 1, 1}, g[4] = {0}, m[4] = {1e-39f, 1e-39f, 1e-39f, 1e-39f};

    (void)state;
#if defined(__SSE__)
    {
        unsigned int before = _mm_getcsr();

        be->sgd_step(be, p, g, m, 4, 0.1f, 0.5f, 0.0f, 0);
        assert_int_equal(_mm_getcsr(), before);
        for (int i = 0; i < 4; i++)
            assert_true(m[i] == 0.0f);
    }
#else
    be->sgd_step(be, p, g, m, 4, 0.1f, 0.5f, 0.0f, 0);
#endif
}

static void test_backend_open(void **state)
{
    fed_backend *b = (fed_backend *)1;

    (void)state;
    assert_int_equal(fed_backend_open("cpu", &b), FED_OK);
    assert_string_equal(b->name, "cpu");
    assert_int_equal(b->abi, FED_BACKEND_ABI);
    fed_backend_free(b);
    static const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU", "cpu0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        b = (fed_backend *)1;
        assert_int_equal(fed_backend_open(bad[i], &b), FED_ERR_INVAL);
        assert_null(b);
    }
    /* auto always gives a backend: the GPU's, or the CPU's */
    assert_int_equal(fed_backend_open("auto", &b), FED_OK);
    assert_non_null(b);
    fed_backend_free(b);
    fed_backend_free(NULL);
}

/* weighted_sum's fast paths (register groups, blocks, prefetch, whatever
 * vector width this CPU has) give the bits of the plain loop below: for each
 * element, w[0]*x0 + w[1]*x1 + ... in double, left to right, then rounded to
 * float. Every input is its own exact-size allocation (so ASan sees any read
 * past an end), at an aligned or an unaligned (+1 float) start, and nothing
 * outside out[0, n) is written. k and n cross the group, block, vector and
 * prefetch edges. Random data alone cannot tell a reordered double sum from
 * the right one once rounded to float, hence the spikes. */
static void weighted_sum_reference(float *out, const float *const *in, const double *w, int k,
                                   size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double s = w[0] * (double)in[0][i];

        for (int j = 1; j < k; j++) {
            double p = w[j] * (double)in[j][i]; /* its own statement: never fused */

            s += p;
        }
        out[i] = (float)s;
    }
}

static void test_weighted_sum_bits(void **state)
{
    static const int ks[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 25, 100};
    static const size_t ns[] = {1, 15, 17, 257, 2049, 4095, 4096, 4097, 100003};
    const float guard = -12345.0f;
    const size_t pool_n = 150011; /* random floats each input copies a window of */
    float *pool = randn(pool_n);

    (void)state;
    assert_non_null(pool);
    for (size_t i = 0; i < pool_n; i += 97)
        pool[i] = 1e-39f; /* denormal floats, too */
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const int k = ks[ki];
        float *raw[100];
        const float *in[100];
        double w[100];

        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const size_t n = ns[ni];

            for (size_t run = 0; run < 4; run++) {
                const size_t off = run & 1, spikes = run >> 1;
                float *got = malloc((n + 2) * sizeof *got), *want = malloc(n * sizeof *want);
                size_t differ = 0;

                assert_non_null(got);
                assert_non_null(want);
                for (int j = 0; j < k; j++) {
                    raw[j] = malloc((n + off) * sizeof *raw[j]);
                    assert_non_null(raw[j]);
                    memcpy(raw[j], pool + (size_t)j * 499 % (pool_n - 100005),
                           (n + off) * sizeof *raw[j]);
                    in[j] = raw[j] + off;
                    w[j] = spikes ? 1.0 : 4.0 * fed_rng_uniform(&rng) - 1.0; /* some < 0 */
                }
                /* Spikes: +2^60 and -2^60 at two random inputs of each element
                 * swallow what was summed before them, so a sum in any other
                 * order (a group's inputs added up before the partial sum,
                 * say) ends in other floats, not just other low double bits. */
                for (size_t i = 0; spikes && k > 1 && i < n; i++) {
                    int a = (int)(fed_rng_uniform(&rng) * k) % k;
                    int b = (a + 1 + (int)(fed_rng_uniform(&rng) * (k - 1)) % (k - 1)) % k;

                    raw[a][off + i] = 0x1p60f;
                    raw[b][off + i] = -0x1p60f;
                }
                got[0] = got[n + off] = got[n + 1] = guard;
                weighted_sum_reference(want, in, w, k, n);
                be->weighted_sum(be, got + off, in, w, k, n); /* out unaligned too */
                for (size_t i = 0; i < n; i++)
                    differ += memcmp(&got[off + i], &want[i], sizeof(float)) != 0;
                if (differ)
                    fail_msg("k %d n %zu offset %zu spikes %zu: %zu elements differ from the "
                             "plain loop",
                             k, n, off, spikes, differ);
                if (off)
                    assert_true(got[0] == guard);
                assert_true(got[n + off] == guard);
                for (int j = 0; j < k; j++)
                    free(raw[j]);
                free(got);
                free(want);
            }
        }
    }
    free(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_all_transposes),
        cmocka_unit_test(test_bias_relu),
        cmocka_unit_test(test_channel_bias),
        cmocka_unit_test(test_u8_scale),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_im2col_col2im),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_im2col_window),
        cmocka_unit_test(test_pool_window),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_norm_known),
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_denormals_flushed_mode_restored),
        cmocka_unit_test(test_backend_open),
        cmocka_unit_test(test_weighted_sum_bits),
        cmocka_unit_test(test_dot_bits),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
