/* backend_cpu.c - the CPU backend: OpenBLAS cblas_sgemm for matrix products
 * (its thread count set explicitly at creation), plain loops for everything
 * else. Device pointers are host memory here. Owns only its table and
 * context; a kernel never allocates, never prints, and keeps no state
 * between calls, so shards of a batch may call it from several threads. */
#include <cblas.h>
#include <math.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h> /* weighted_sum's AVX2 / AVX-512 paths, picked at run time */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/backend.h"
#include "model/gemm_bf16.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

/* Denormals: a momentum or moment buffer that decays towards zero (a dead
 * ReLU unit's, say) crawls through the subnormal range, where x86 is ~100x
 * slower. Kernels run with flush-to-zero and denormals-are-zero set, and
 * restore the caller's MXCSR on the way out (it is per-thread state). */
#if defined(__SSE__)
#define FTZ_BEGIN()                                                            \
    unsigned int saved_csr_ = _mm_getcsr();                                    \
    _mm_setcsr(saved_csr_ | 0x8040u)
#define FTZ_END() _mm_setcsr(saved_csr_)
#else
#define FTZ_BEGIN() (void)0
#define FTZ_END() (void)0
#endif

/* Sums whose bits matter (every path of a kernel giving the same): no a*b+c
 * contracted into an FMA. GCC's -std=c11 contracts nothing (and the
 * weighted sum's section says so again); clang does by default. */
#if defined(__clang__)
#define WSUM_EXACT _Pragma("STDC FP_CONTRACT OFF")
#else
#define WSUM_EXACT
#endif

/* What the CPU offers the kernels that pick a path at run time: 2 for
 * AVX-512F, 1 for AVX2, 0 for neither (or another architecture). */
static int cpu_simd_level(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return 2;
    if (__builtin_cpu_supports("avx2"))
        return 1;
#endif
    return 0;
}

typedef struct cpu_ctx {
    int blas_threads;
} cpu_ctx;

/* ---- memory ---- */

static fed_err cpu_alloc(fed_backend *be, size_t bytes, void **dptr)
{
    (void)be;
    *dptr = fed_alloc_aligned(bytes ? bytes : 1);
    return *dptr ? FED_OK : FED_ERR_NOMEM;
}

static void cpu_free(fed_backend *be, void *dptr)
{
    (void)be;
    fed_free(dptr);
}

static fed_err cpu_memcpy(fed_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memmove(dst, src, bytes);
    return FED_OK;
}

static void cpu_copy(fed_backend *be, float *dst, const float *src, size_t n)
{
    (void)be;
    if (n)
        memmove(dst, src, n * sizeof *dst);
}

static void cpu_fill(fed_backend *be, float *restrict x, float value, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        x[i] = value;
}

static fed_err cpu_sync(fed_backend *be)
{
    (void)be;
    return FED_OK;
}

/* ---- GEMM ---- */

static void cpu_gemm(fed_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc)
{
    FTZ_BEGIN();
    (void)be;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    FTZ_END();
}

/* ---- layers ---- */

static void cpu_bias_act_fwd(fed_backend *be, float *restrict y, const float *restrict bias, int B,
                             int N, int relu)
{
    (void)be;
    for (int b = 0; b < B; b++) {
        float *restrict row = y + (size_t)b * N;

        if (relu) {
            for (int j = 0; j < N; j++) {
                float v = row[j] + bias[j];
                row[j] = v > 0.0f ? v : 0.0f;
            }
        } else {
            for (int j = 0; j < N; j++)
                row[j] += bias[j];
        }
    }
}

static void cpu_relu_bwd(fed_backend *be, float *restrict dy, const float *restrict y, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static void cpu_bias_bwd(fed_backend *be, float *restrict dbias, const float *restrict dy, int B,
                         int N, int accumulate)
{
    (void)be;
    if (!accumulate)
        for (int j = 0; j < N; j++)
            dbias[j] = 0.0f;
    for (int b = 0; b < B; b++) {
        const float *restrict row = dy + (size_t)b * N;

        for (int j = 0; j < N; j++)
            dbias[j] += row[j];
    }
}

static void cpu_chan_bias_act_fwd(fed_backend *be, float *restrict y, const float *restrict bias,
                                  int B, int C, int HW, int relu)
{
    (void)be;
    for (int b = 0; b < B; b++) {
        for (int c = 0; c < C; c++) {
            float *restrict plane = y + ((size_t)b * C + c) * HW;
            float bc = bias[c];

            if (relu) {
                for (int i = 0; i < HW; i++) {
                    float v = plane[i] + bc;
                    plane[i] = v > 0.0f ? v : 0.0f;
                }
            } else {
                for (int i = 0; i < HW; i++)
                    plane[i] += bc;
            }
        }
    }
}

/* The sum of x (n) over 16 fixed float lanes: vectorizes, and sums in the
 * same order always. */
static float lanes_sum(const float *restrict x, int n)
{
    float lane[16] = {0}, s = 0.0f;
    int i = 0;

    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            lane[k] += x[i + k];
    for (; i < n; i++)
        lane[i & 15] += x[i];
    for (int k = 0; k < 16; k++)
        s += lane[k];
    return s;
}

static void cpu_chan_bias_bwd(fed_backend *be, float *restrict dbias, const float *restrict dy,
                              int B, int C, int HW, int accumulate)
{
    (void)be;
    if (!accumulate)
        for (int c = 0; c < C; c++)
            dbias[c] = 0.0f;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            dbias[c] += lanes_sum(dy + ((size_t)b * C + c) * HW, HW);
}

static void cpu_u8_to_f32(fed_backend *be, float *restrict dst, const uint8_t *restrict src,
                          size_t n, float scale, float shift)
{
    (void)be;
    for (size_t i = 0; i < n; i++) {
        float v = (float)src[i] * scale; /* -std=c11: no contraction into an FMA */
        dst[i] = v + shift;
    }
}

/* One row of logits: returns log(sum(exp(z - max))) and the max and argmax
 * (first index on ties). */
static double row_logsumexp(const float *z, int C, float *zmax, int *amax)
{
    float mx = z[0];
    int am = 0;
    double sum = 0.0;

    for (int j = 1; j < C; j++)
        if (z[j] > mx) {
            mx = z[j];
            am = j;
        }
    for (int j = 0; j < C; j++)
        sum += exp((double)(z[j] - mx));
    *zmax = mx;
    *amax = am;
    return log(sum);
}

static void cpu_softmax_xent(fed_backend *be, float *logits, const int32_t *labels, int B, int C,
                             float grad_scale, double *loss_sum, int *correct)
{
    double loss = 0.0;
    int right = 0;

    (void)be;
    for (int b = 0; b < B; b++) {
        float *z = logits + (size_t)b * C;
        float mx;
        int am;
        double lse = row_logsumexp(z, C, &mx, &am);
        int y = labels[b];

        loss += lse - (double)(z[y] - mx);
        right += am == y;
        for (int j = 0; j < C; j++) {
            float p = (float)exp((double)(z[j] - mx) - lse);
            z[j] = (p - (j == y ? 1.0f : 0.0f)) * grad_scale;
        }
    }
    if (loss_sum)
        *loss_sum = loss;
    if (correct)
        *correct = right;
}

static void cpu_softmax_eval(fed_backend *be, const float *logits, const int32_t *labels, int B,
                             int C, double *loss_sum, int *correct)
{
    double loss = 0.0;
    int right = 0;

    (void)be;
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * C;
        float mx;
        int am;
        double lse = row_logsumexp(z, C, &mx, &am);
        int y = labels[b];

        loss += lse - (double)(z[y] - mx);
        right += am == y;
    }
    if (loss_sum)
        *loss_sum = loss;
    if (correct)
        *correct = right;
}

/* col row r = (c, ki, kj); column = (oi, oj); col[r][oi*OW+oj] = x[c][oi+ki][oj+kj]. */
static void cpu_im2col(fed_backend *be, const float *restrict x, int C, int H, int W, int KH,
                       int KW, float *restrict col)
{
    int OH = H - KH + 1, OW = W - KW + 1;

    (void)be;
    for (int c = 0; c < C; c++)
        for (int ki = 0; ki < KH; ki++)
            for (int kj = 0; kj < KW; kj++) {
                float *restrict dst = col + ((size_t)(c * KH + ki) * KW + kj) * OH * OW;

                for (int oi = 0; oi < OH; oi++) {
                    const float *restrict src = x + ((size_t)c * H + oi + ki) * W + kj;

                    for (int oj = 0; oj < OW; oj++)
                        dst[oi * OW + oj] = src[oj];
                }
            }
}

static void cpu_col2im(fed_backend *be, const float *restrict dcol, int C, int H, int W, int KH,
                       int KW, float *restrict dx)
{
    int OH = H - KH + 1, OW = W - KW + 1;

    (void)be;
    for (int c = 0; c < C; c++)
        for (int ki = 0; ki < KH; ki++)
            for (int kj = 0; kj < KW; kj++) {
                const float *restrict src = dcol + ((size_t)(c * KH + ki) * KW + kj) * OH * OW;

                for (int oi = 0; oi < OH; oi++) {
                    float *restrict dst = dx + ((size_t)c * H + oi + ki) * W + kj;

                    for (int oj = 0; oj < OW; oj++)
                        dst[oj] += src[oi * OW + oj];
                }
            }
}

static void cpu_maxpool_fwd(fed_backend *be, const float *restrict x, int BC, int H, int W,
                            float *restrict y, int32_t *restrict argmax)
{
    int OH = H / 2, OW = W / 2;

    (void)be;
    for (int p = 0; p < BC; p++) {
        const float *plane = x + (size_t)p * H * W;
        float *yo = y + (size_t)p * OH * OW;
        int32_t *ao = argmax + (size_t)p * OH * OW;

        for (int oi = 0; oi < OH; oi++)
            for (int oj = 0; oj < OW; oj++) {
                int base = 2 * oi * W + 2 * oj;
                int best = base;
                const int cand[3] = {base + 1, base + W, base + W + 1};

                for (int k = 0; k < 3; k++)
                    if (plane[cand[k]] > plane[best])
                        best = cand[k];
                yo[oi * OW + oj] = plane[best];
                ao[oi * OW + oj] = best;
            }
    }
}

static void cpu_maxpool_bwd(fed_backend *be, const float *restrict dy,
                            const int32_t *restrict argmax, int BC, int H, int W,
                            float *restrict dx)
{
    int OH = H / 2, OW = W / 2;

    (void)be;
    memset(dx, 0, (size_t)BC * H * W * sizeof *dx);
    for (int p = 0; p < BC; p++) {
        float *plane = dx + (size_t)p * H * W;
        const float *dyo = dy + (size_t)p * OH * OW;
        const int32_t *ao = argmax + (size_t)p * OH * OW;

        for (int i = 0; i < OH * OW; i++)
            plane[ao[i]] += dyo[i];
    }
}

/* ---- any window: stride, padding, dilation ---- */

/* The outputs [*o0, *o1) of a line of `out` whose input o S - lead falls
 * inside [0, len): the rest read padding. Found once per kernel offset,
 * so the copies and sums below run branch-free; stride 1 divides
 * nothing. */
static void win_span(int lead, int len, int S, int out, int *o0, int *o1)
{
    int last = len - 1 + lead; /* o S <= last */

    if (S == 1) {
        *o0 = lead > 0 ? lead : 0;
        *o1 = last + 1;
    } else {
        *o0 = lead <= 0 ? 0 : (lead + S - 1) / S;
        *o1 = last < 0 ? 0 : last / S + 1;
    }
    if (*o1 > out)
        *o1 = out;
    if (*o1 < 0)
        *o1 = 0;
    if (*o0 > *o1)
        *o0 = *o1;
}

/* kernel column kj's output columns, kernel row ki's output rows */
static void win_cols(const fed_window *g, int kj, int *o0, int *o1)
{
    win_span(g->PW - kj * g->DW, g->W, g->SW, g->OW, o0, o1);
}

static void win_rows(const fed_window *g, int ki, int *r0, int *r1)
{
    win_span(g->PH - ki * g->DH, g->H, g->SH, g->OH, r0, r1);
}

/* One kernel offset's row of col (P values) from plane x. Stride 1 with
 * rows as wide as the input's ("same" padding): the inside rows are one
 * run of the plane shifted, copied whole; else row by row. Then the
 * columns that read padding are zeroed (over the run's wrapped values). */
static void im2col_offset(const fed_window *g, const float *restrict x, int ki, int kj,
                          float *restrict dst)
{
    int r0, r1, o0, o1, SW = g->SW, OW = g->OW;
    int shift = kj * g->DW - g->PW, rshift = ki * g->DH - g->PH;

    win_rows(g, ki, &r0, &r1);
    win_cols(g, kj, &o0, &o1);
    if (r0 > 0)
        memset(dst, 0, (size_t)r0 * OW * sizeof *dst);
    if (r1 < g->OH)
        memset(dst + (size_t)r1 * OW, 0, (size_t)(g->OH - r1) * OW * sizeof *dst);
    if (g->SH == 1 && SW == 1 && OW == g->W && r0 < r1) {
        /* dst[i] = x[i + rshift W + shift] over rows [r0, r1), the run
           clipped to the plane at its ends (those values are padding) */
        long a = (long)r0 * OW, b = (long)r1 * OW, d = (long)rshift * g->W + shift;
        long hw = (long)g->H * g->W;

        if (a + d < 0)
            a = -d;
        if (b + d > hw)
            b = hw - d;
        memcpy(dst + a, x + a + d, (size_t)(b - a) * sizeof *dst);
    } else {
        for (int oi = r0; oi < r1; oi++) {
            const float *restrict src = x + (size_t)(oi * g->SH + rshift) * g->W;
            float *restrict row = dst + (size_t)oi * OW;

            if (SW == 2) /* a constant stride: the compiler vectorizes it */
                for (int oj = o0; oj < o1; oj++)
                    row[oj] = src[2 * oj + shift];
            else
                for (int oj = o0; oj < o1; oj++)
                    row[oj] = src[oj * SW + shift];
        }
    }
    /* the padding columns of the inside rows, a column at a time (a few
       values a row: a call to memset each would cost more) */
    for (int oj = 0; oj < o0; oj++)
        for (int oi = r0; oi < r1; oi++)
            dst[(size_t)oi * OW + oj] = 0.0f;
    for (int oj = o1; oj < OW; oj++)
        for (int oi = r0; oi < r1; oi++)
            dst[(size_t)oi * OW + oj] = 0.0f;
}

static void cpu_im2col_win(fed_backend *be, const float *restrict x, const fed_window *g,
                           float *restrict col)
{
    size_t P = (size_t)g->OH * g->OW;

    (void)be;
    for (int c = 0; c < g->C; c++)
        for (int ki = 0; ki < g->KH; ki++)
            for (int kj = 0; kj < g->KW; kj++)
                im2col_offset(g, x + (size_t)c * g->H * g->W, ki, kj,
                              col + ((size_t)(c * g->KH + ki) * g->KW + kj) * P);
}

/* Each element of dx takes its terms in the order of the loops (c, ki, kj,
 * oi, oj), as the per-element form did: the same sums. */
static void cpu_col2im_win(fed_backend *be, const float *restrict dcol, const fed_window *g,
                           float *restrict dx)
{
    int P = g->OH * g->OW, SW = g->SW;

    (void)be;
    for (int c = 0; c < g->C; c++)
        for (int ki = 0; ki < g->KH; ki++)
            for (int kj = 0; kj < g->KW; kj++) {
                const float *restrict src = dcol + ((size_t)(c * g->KH + ki) * g->KW + kj) * P;
                int o0, o1, r0, r1, shift = kj * g->DW - g->PW;

                win_cols(g, kj, &o0, &o1);
                win_rows(g, ki, &r0, &r1);
                for (int oi = r0; oi < r1; oi++) {
                    const float *restrict row = src + (size_t)oi * g->OW;
                    float *restrict dst =
                        dx + ((size_t)c * g->H + oi * g->SH - g->PH + ki * g->DH) * g->W;

                    if (SW == 1)
                        for (int oj = o0; oj < o1; oj++)
                            dst[oj + shift] += row[oj];
                    else
                        for (int oj = o0; oj < o1; oj++)
                            dst[oj * SW + shift] += row[oj];
                }
            }
}

/* The window of output (oi, oj) clipped to the plane: rows [*h0, *h1),
 * columns [*w0, *w1) (pooling: dilation 1). */
static void pool_span(const fed_window *g, int oi, int oj, int *h0, int *h1, int *w0, int *w1)
{
    int hs = oi * g->SH - g->PH, ws = oj * g->SW - g->PW;

    *h0 = hs > 0 ? hs : 0;
    *h1 = hs + g->KH < g->H ? hs + g->KH : g->H;
    *w0 = ws > 0 ? ws : 0;
    *w1 = ws + g->KW < g->W ? ws + g->KW : g->W;
}

static void cpu_maxpool_win_fwd(fed_backend *be, const float *restrict x, int n,
                                const fed_window *g, float *restrict y, int32_t *restrict argmax)
{
    size_t planes = (size_t)n * g->C;
    int P = g->OH * g->OW;

    (void)be;
    for (size_t p = 0; p < planes; p++) {
        const float *plane = x + p * g->H * g->W;

        for (int oi = 0; oi < g->OH; oi++)
            for (int oj = 0; oj < g->OW; oj++) {
                int h0, h1, w0, w1, best;

                pool_span(g, oi, oj, &h0, &h1, &w0, &w1);
                best = h0 * g->W + w0; /* padding <= KH/2 keeps a window non-empty */
                for (int i = h0; i < h1; i++)
                    for (int j = w0; j < w1; j++)
                        if (plane[i * g->W + j] > plane[best])
                            best = i * g->W + j;
                y[p * P + (size_t)oi * g->OW + oj] = plane[best];
                argmax[p * P + (size_t)oi * g->OW + oj] = best;
            }
    }
}

static void cpu_maxpool_win_bwd(fed_backend *be, const float *restrict dy,
                                const int32_t *restrict argmax, int n, const fed_window *g,
                                float *restrict dx)
{
    size_t planes = (size_t)n * g->C, P = (size_t)g->OH * g->OW;

    (void)be;
    memset(dx, 0, planes * g->H * g->W * sizeof *dx);
    for (size_t p = 0; p < planes; p++)
        for (size_t i = 0; i < P; i++)
            dx[p * g->H * g->W + argmax[p * P + i]] += dy[p * P + i];
}

static void cpu_avgpool_win_fwd(fed_backend *be, const float *restrict x, int n,
                                const fed_window *g, float *restrict y)
{
    size_t planes = (size_t)n * g->C;
    int P = g->OH * g->OW;
    float inv = 1.0f / (float)(g->KH * g->KW);

    (void)be;
    for (size_t p = 0; p < planes; p++) {
        const float *plane = x + p * g->H * g->W;

        for (int oi = 0; oi < g->OH; oi++)
            for (int oj = 0; oj < g->OW; oj++) {
                int h0, h1, w0, w1;
                float s = 0.0f;

                pool_span(g, oi, oj, &h0, &h1, &w0, &w1);
                for (int i = h0; i < h1; i++)
                    for (int j = w0; j < w1; j++)
                        s += plane[i * g->W + j];
                y[p * P + (size_t)oi * g->OW + oj] = s * inv;
            }
    }
}

static void cpu_avgpool_win_bwd(fed_backend *be, const float *restrict dy, int n,
                                const fed_window *g, float *restrict dx)
{
    size_t planes = (size_t)n * g->C;
    int P = g->OH * g->OW;
    float inv = 1.0f / (float)(g->KH * g->KW);

    (void)be;
    memset(dx, 0, planes * g->H * g->W * sizeof *dx);
    for (size_t p = 0; p < planes; p++) {
        float *plane = dx + p * g->H * g->W;

        for (int oi = 0; oi < g->OH; oi++)
            for (int oj = 0; oj < g->OW; oj++) {
                int h0, h1, w0, w1;
                float v = dy[p * P + (size_t)oi * g->OW + oj] * inv;

                pool_span(g, oi, oj, &h0, &h1, &w0, &w1);
                for (int i = h0; i < h1; i++)
                    for (int j = w0; j < w1; j++)
                        plane[i * g->W + j] += v;
            }
    }
}

/* ---- embeddings ---- */

static void cpu_embed_fwd(fed_backend *be, float *restrict y, const float *restrict W,
                          const float *restrict x, int ldx, int col, int n, int dim)
{
    (void)be;
    for (int i = 0; i < n; i++)
        memcpy(y + (size_t)i * dim, W + (size_t)x[(size_t)i * ldx + col] * dim,
               (size_t)dim * sizeof *y);
}

/* Rows [lo, hi) of dW only, the batch walked in order: the same sums
 * whichever thread runs which range. */
static void cpu_embed_bwd(fed_backend *be, float *restrict dW, const float *restrict dy,
                          const float *restrict x, int ldx, int col, int n, int dim, int lo,
                          int hi, int accumulate)
{
    FTZ_BEGIN();
    (void)be;
    if (!accumulate)
        memset(dW + (size_t)lo * dim, 0, (size_t)(hi - lo) * dim * sizeof *dW);
    for (int i = 0; i < n; i++) {
        int id = (int)x[(size_t)i * ldx + col];
        float *row = dW + (size_t)id * dim;
        const float *g = dy + (size_t)i * dim;

        if (id < lo || id >= hi)
            continue;
        for (int k = 0; k < dim; k++)
            row[k] += g[k];
    }
    FTZ_END();
}

/* ---- normalization and dropout ---- */

/* A group of a sample is M values from value k0 of its sample; M and k0
 * are multiples of rep (a norm's affine entries cover whole channels or
 * single values), so the group is the runs of rep values of the affine
 * entries [k0 / rep, (k0 + M) / rep): no division per value. Sums go over
 * 16 fixed float lanes (lanes_sum's). */

/* sum of (x - mu)^2 */
static double lanes_csq(const float *restrict x, int n, float mu)
{
    float lane[16] = {0};
    double s = 0.0;
    int i = 0;

    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            lane[k] += (x[i + k] - mu) * (x[i + k] - mu);
    for (; i < n; i++)
        lane[i & 15] += (x[i] - mu) * (x[i] - mu);
    for (int k = 0; k < 16; k++)
        s += lane[k];
    return s;
}

/* *sd = sum of d w, *sdx = sum of d w (x - mu); w NULL is ones */
static void lanes_dot(const float *restrict d, const float *restrict x, const float *restrict w,
                      int n, float mu, double *sd, double *sdx)
{
    float l1[16] = {0}, l2[16] = {0};
    int i = 0;

    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) {
            float t = w ? d[i + k] * w[i + k] : d[i + k];

            l1[k] += t;
            l2[k] += t * (x[i + k] - mu);
        }
    for (; i < n; i++) {
        float t = w ? d[i] * w[i] : d[i];

        l1[i & 15] += t;
        l2[i & 15] += t * (x[i] - mu);
    }
    *sd = *sdx = 0.0;
    for (int k = 0; k < 16; k++) {
        *sd += l1[k];
        *sdx += l2[k];
    }
}

static void cpu_norm_fwd(fed_backend *be, const float *restrict x, int n, int G, int M, int rep,
                         const float *restrict gamma, const float *restrict beta, float eps,
                         int relu, float *restrict stat, float *restrict y)
{
    FTZ_BEGIN();
    (void)be;
    for (size_t sg = 0; sg < (size_t)n * G; sg++) {
        const float *xs = x + sg * M;
        float *ys = y + sg * M;
        int a0 = (int)(sg % (size_t)G) * (M / rep), runs = M / rep;
        float mu = (float)((double)lanes_sum(xs, M) / M);
        float rstd = (float)(1.0 / sqrt(lanes_csq(xs, M, mu) / M + (double)eps));

        stat[2 * sg] = mu;
        stat[2 * sg + 1] = rstd;
        /* an affine entry per value (rep 1) or per run */
        for (int k = 0; rep == 1 && k < M; k++) {
            float v = (xs[k] - mu) * rstd * gamma[a0 + k] + beta[a0 + k];

            ys[k] = relu && v < 0.0f ? 0.0f : v;
        }
        for (int r = 0; rep > 1 && r < runs; r++) {
            const float *xr = xs + (size_t)r * rep;
            float *yr = ys + (size_t)r * rep, sc = rstd * gamma[a0 + r], b = beta[a0 + r];

            for (int j = 0; j < rep; j++) {
                float v = (xr[j] - mu) * sc + b;

                yr[j] = relu && v < 0.0f ? 0.0f : v;
            }
        }
    }
    FTZ_END();
}

static void cpu_norm_bwd(fed_backend *be, const float *restrict dy, const float *restrict x,
                         const float *restrict stat, int n, int G, int M, int rep,
                         const float *restrict gamma, float *restrict dx)
{
    FTZ_BEGIN();
    (void)be;
    for (size_t sg = 0; sg < (size_t)n * G; sg++) {
        const float *xs = x + sg * M, *dys = dy + sg * M;
        float *dxs = dx + sg * M, mu = stat[2 * sg], rstd = stat[2 * sg + 1], cg, cx;
        int a0 = (int)(sg % (size_t)G) * (M / rep), runs = M / rep;
        double mg = 0.0, mgx = 0.0, sd, sdx;

        if (rep == 1) { /* gamma per value */
            lanes_dot(dys, xs, gamma + a0, M, mu, &mg, &mgx);
        } else {
            for (int r = 0; r < runs; r++) {
                lanes_dot(dys + (size_t)r * rep, xs + (size_t)r * rep, NULL, rep, mu, &sd, &sdx);
                mg += gamma[a0 + r] * sd;
                mgx += gamma[a0 + r] * sdx;
            }
        }
        /* dx = rstd (g - mean(g) - xhat mean(g xhat)), xhat = (x - mu) rstd */
        cg = (float)(mg / M);
        cx = (float)(mgx * rstd / M) * rstd;
        for (int k = 0; rep == 1 && k < M; k++)
            dxs[k] = rstd * (dys[k] * gamma[a0 + k] - cg - (xs[k] - mu) * cx);
        for (int r = 0; rep > 1 && r < runs; r++) {
            const float *xr = xs + (size_t)r * rep, *dr = dys + (size_t)r * rep;
            float *dxr = dxs + (size_t)r * rep, ga = gamma[a0 + r];

            for (int j = 0; j < rep; j++)
                dxr[j] = rstd * (dr[j] * ga - cg - (xr[j] - mu) * cx);
        }
    }
    FTZ_END();
}

/* Sample by sample and group by group, each entry's run summed then
 * added: every unit sums its entries over the samples in the same order,
 * whatever the shards. */
static void cpu_norm_affine_bwd(fed_backend *be, const float *restrict dy,
                                const float *restrict x, const float *restrict stat, int n,
                                int G, int M, int rep, int a0, int a1, float *restrict dgamma,
                                float *restrict dbeta, int accumulate)
{
    size_t per = (size_t)G * M;
    int runs = M / rep; /* affine entries a group covers */

    FTZ_BEGIN();
    (void)be;
    if (!accumulate)
        for (int a = a0; a < a1; a++)
            dgamma[a] = dbeta[a] = 0.0f;
    for (int i = 0; i < n; i++) {
        const float *xs = x + (size_t)i * per, *dys = dy + (size_t)i * per;

        for (int g = a0 / runs; g < G && g * runs < a1; g++) {
            const float *st = stat + 2 * ((size_t)i * G + (size_t)g);
            float mu = st[0], rstd = st[1];
            int lo = g * runs > a0 ? g * runs : a0, hi = (g + 1) * runs < a1 ? (g + 1) * runs : a1;

            if (rep == 1) {
                for (int a = lo; a < hi; a++) {
                    dgamma[a] += dys[a] * (xs[a] - mu) * rstd;
                    dbeta[a] += dys[a];
                }
                continue;
            }
            for (int a = lo; a < hi; a++) {
                double sd, sdx;

                lanes_dot(dys + (size_t)a * rep, xs + (size_t)a * rep, NULL, rep, mu, &sd, &sdx);
                dgamma[a] += (float)sdx * rstd;
                dbeta[a] += (float)sd;
            }
        }
    }
    FTZ_END();
}

static void cpu_dropout(fed_backend *be, const float *restrict x, size_t n, uint64_t key,
                        uint64_t first, float p, float *restrict y)
{
    float scale = 1.0f / (1.0f - p);

    (void)be;
    for (size_t i = 0; i < n; i++)
        y[i] = fed_backend_dropout_keep(key, first + i, p) ? x[i] * scale : 0.0f;
}

/* ---- batch norm ----
 * A channel's sums run over its planes in sample order, each plane in 8
 * double lanes (lane k takes i = k mod 8) added in order at the plane's
 * end: a fixed order whatever the shards (a unit takes whole channels
 * over every sample), the same on every path below (no FMA), and a lone
 * double chain no longer waits on each add. */
#define BN_LANES 8

enum { BN_SUM, BN_SUMSQ, BN_DOTS };

/* The first n8 (a multiple of 8) values into the lanes: BN_SUM l1 += x -
 * mu, BN_SUMSQ l1 += (x - mu)^2, BN_DOTS l1 += dy and l2 += dy (x - mu). */
typedef void (*bn_lanes_fn)(const float *dy, const float *x, int n8, double mu, int what,
                            double *l1, double *l2);

/* Values [from, to) into their lanes, one at a time. */
static void bn_lanes_from(const float *restrict dy, const float *restrict x, int from, int to,
                          double mu, int what, double *restrict l1, double *restrict l2)
{
    WSUM_EXACT
    for (int i = from; i < to; i++) {
        double d = (double)x[i] - mu;

        if (what == BN_DOTS) {
            l1[i % BN_LANES] += (double)dy[i];
            l2[i % BN_LANES] += (double)dy[i] * d;
        } else {
            l1[i % BN_LANES] += what == BN_SUMSQ ? d * d : d;
        }
    }
}

static void bn_lanes_plain(const float *dy, const float *x, int n8, double mu, int what,
                           double *l1, double *l2)
{
    bn_lanes_from(dy, x, 0, n8, mu, what, l1, l2);
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
__attribute__((target("avx512f"))) static void bn_lanes_avx512(const float *dy, const float *x,
                                                                int n8, double mu, int what,
                                                                double *l1, double *l2)
{
    WSUM_EXACT
    __m512d a = _mm512_loadu_pd(l1), b = _mm512_loadu_pd(l2), m = _mm512_set1_pd(mu);

    for (int i = 0; i < n8; i += BN_LANES) {
        __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), m);

        if (what == BN_DOTS) {
            __m512d g = _mm512_cvtps_pd(_mm256_loadu_ps(dy + i));

            a = _mm512_add_pd(a, g);
            b = _mm512_add_pd(b, _mm512_mul_pd(g, d));
        } else {
            a = _mm512_add_pd(a, what == BN_SUMSQ ? _mm512_mul_pd(d, d) : d);
        }
    }
    _mm512_storeu_pd(l1, a);
    _mm512_storeu_pd(l2, b);
}
#endif

static bn_lanes_fn bn_pick_lanes(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    if (cpu_simd_level() == 2)
        return bn_lanes_avx512;
#endif
    return bn_lanes_plain;
}

/* A plane's sums (what): *s1 += the first lanes' total, *s2 += the
 * second's (BN_DOTS). */
static void bn_plane(bn_lanes_fn lanes, const float *dy, const float *x, int n, double mu,
                     int what, double *s1, double *s2)
{
    double l1[BN_LANES] = {0}, l2[BN_LANES] = {0}, t1 = 0.0, t2 = 0.0;
    int n8 = n - n % BN_LANES;

    lanes(dy, x, n8, mu, what, l1, l2);
    bn_lanes_from(dy, x, n8, n, mu, what, l1, l2); /* the tail, on the lanes it falls to */
    for (int k = 0; k < BN_LANES; k++) {
        t1 += l1[k];
        t2 += l2[k];
    }
    *s1 += t1;
    if (s2)
        *s2 += t2;
}

static void cpu_bn_stats(fed_backend *be, const float *restrict x, int B, int C, int HW, int c0,
                         int c1, float *restrict mean, float *restrict var,
                         float *restrict run_mean, float *restrict run_var, float momentum)
{
    double count = (double)B * HW;
    bn_lanes_fn lanes = bn_pick_lanes();

    (void)be;
    for (int c = c0; c < c1; c++) {
        double s = 0.0, q = 0.0, mu;

        for (int b = 0; b < B; b++) /* two passes: the deviations' squares */
            bn_plane(lanes, NULL, x + ((size_t)b * C + c) * HW, HW, 0.0, BN_SUM, &s, NULL);
        mu = s / count;
        for (int b = 0; b < B; b++)
            bn_plane(lanes, NULL, x + ((size_t)b * C + c) * HW, HW, mu, BN_SUMSQ, &q, NULL);
        mean[c] = (float)mu;
        var[c] = (float)(q / count);
        if (run_mean && count > 1.0) {
            run_mean[c] = (float)((1.0 - momentum) * run_mean[c] + momentum * mu);
            run_var[c] = (float)((1.0 - momentum) * run_var[c] + momentum * q / (count - 1.0));
        }
    }
}

static void cpu_bn_fwd(fed_backend *be, const float *restrict x, float *restrict y, int B, int C,
                       int HW, const float *restrict mean, const float *restrict var,
                       const float *restrict gamma, const float *restrict beta, float eps,
                       int relu)
{
    (void)be;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            float inv = (float)(1.0 / sqrt((double)var[c] + eps));
            float a = gamma[c] * inv, m = mean[c], b0 = beta[c];
            size_t at = ((size_t)b * C + c) * HW;

            if (relu)
                for (int i = 0; i < HW; i++) {
                    float v = (x[at + i] - m) * a + b0;

                    y[at + i] = v < 0.0f ? 0.0f : v;
                }
            else
                for (int i = 0; i < HW; i++)
                    y[at + i] = (x[at + i] - m) * a + b0;
        }
}

static void cpu_bn_bwd_params(fed_backend *be, const float *restrict dy, const float *restrict x,
                              int B, int C, int HW, int c0, int c1, const float *restrict mean,
                              const float *restrict var, float eps, float *restrict dgamma,
                              float *restrict dbeta)
{
    bn_lanes_fn lanes = bn_pick_lanes();

    (void)be;
    for (int c = c0; c < c1; c++) {
        double sg = 0.0, sb = 0.0;

        for (int b = 0; b < B; b++) {
            size_t at = ((size_t)b * C + c) * HW;

            bn_plane(lanes, dy + at, x + at, HW, mean[c], BN_DOTS, &sb, &sg);
        }
        dgamma[c] = (float)(sg / sqrt((double)var[c] + eps));
        dbeta[c] = (float)sb;
    }
}

static void cpu_bn_bwd_input(fed_backend *be, const float *restrict dy, const float *restrict x,
                             float *restrict dx, int B, int C, int HW, const float *restrict mean,
                             const float *restrict var, float eps, const float *restrict gamma,
                             const float *restrict dgamma, const float *restrict dbeta,
                             long count)
{
    (void)be;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            double inv = 1.0 / sqrt((double)var[c] + eps);
            float k = (float)(gamma[c] * inv), m = mean[c];
            float gb = (float)(dbeta[c] / (double)count);
            float gg = (float)(dgamma[c] * inv / (double)count);
            size_t at = ((size_t)b * C + c) * HW;

            for (int i = 0; i < HW; i++)
                dx[at + i] = k * (dy[at + i] - gb - (x[at + i] - m) * gg);
        }
}

/* ---- vectors and reductions ---- */

static void cpu_axpy(fed_backend *be, size_t n, float alpha, const float *restrict x,
                     float *restrict y)
{
    FTZ_BEGIN();
    (void)be;
    for (size_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
    FTZ_END();
}

static void cpu_scale(fed_backend *be, size_t n, float alpha, float *restrict x)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        x[i] *= alpha;
}

/* ---- weighted sum ----
 * out[i] = (float)(((w0*x0[i] + w1*x1[i]) + w2*x2[i]) + ...) in double, the
 * products and sums in exactly that order (no FMA, no reassociation), so
 * every path below gives the bits of the plain per-element loop. The work is
 * cut into blocks of WSUM_BLOCK elements whose double partial sums stay in
 * L1; over a block, the inputs pass in groups of up to WSUM_GROUP, each
 * group summed in registers (so the partial sums are read and written once
 * per group, not once per input), with a software prefetch WSUM_AHEAD
 * floats ahead in each input. (Measured on a 2-core Xeon VM: all 100 inputs
 * of a 100-client round summed in registers at once, 100 streams, ran at half
 * the speed; groups of 12 with the prefetch read at the machine's one-thread
 * read rate.) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off") /* also under -std=gnu11, where it is "fast" */
#endif
#define WSUM_BLOCK 2048 /* doubles: 16 KiB of partial sums */
#define WSUM_GROUP 12
#define WSUM_AHEAD 256 /* floats: 1 KiB, four cache lines */

/* One group of inputs over one block. */
typedef struct wsum_pass {
    const float *p[WSUM_GROUP]; /* the group's inputs, at the block's start */
    const double *w;            /* their weights (g) */
    int g;                      /* inputs in the group, 1..WSUM_GROUP */
    int first;                  /* the group holds input 0: start from w[0] * p[0] */
    int last;                   /* the group holds input k-1: round into out */
    size_t len;                 /* elements in the block */
    size_t pf_len;              /* i < pf_len: i + WSUM_AHEAD is inside every input */
} wsum_pass;

typedef void (*wsum_kernel)(const wsum_pass *ps, double *acc, float *out);

/* The reference order, element by element, from element `from` on. */
static void wsum_pass_plain(const wsum_pass *ps, double *restrict acc, float *restrict out,
                            size_t from)
{
    WSUM_EXACT
    for (size_t i = from; i < ps->len; i++) {
        double s;
        int t = 0;

        if (ps->first)
            s = ps->w[t++] * (double)ps->p[0][i];
        else
            s = acc[i];
        for (; t < ps->g; t++)
            s += ps->w[t] * (double)ps->p[t][i];
        if (ps->last)
            out[i] = (float)s;
        else
            acc[i] = s;
    }
}

/* Portable: the partial sums pass through acc once per 4 inputs (loops the
 * compiler vectorizes across elements, which keeps each element's order). */
static void wsum_kernel_plain(const wsum_pass *ps, double *restrict acc, float *restrict out)
{
    WSUM_EXACT
    const size_t len = ps->len;
    int t = 0;

    if (ps->first) {
        const float *restrict a = ps->p[0];
        const double wa = ps->w[0];

        for (size_t i = 0; i < len; i++)
            acc[i] = wa * (double)a[i];
        t = 1;
    }
    for (; t + 4 <= ps->g; t += 4) {
        const float *restrict a = ps->p[t], *restrict b = ps->p[t + 1];
        const float *restrict c = ps->p[t + 2], *restrict d = ps->p[t + 3];
        const double wa = ps->w[t], wb = ps->w[t + 1], wc = ps->w[t + 2], wd = ps->w[t + 3];

        for (size_t i = 0; i < len; i++) {
            double s = acc[i];

            s += wa * (double)a[i];
            s += wb * (double)b[i];
            s += wc * (double)c[i];
            s += wd * (double)d[i];
            acc[i] = s;
        }
    }
    for (; t < ps->g; t++) {
        const float *restrict a = ps->p[t];
        const double wa = ps->w[t];

        for (size_t i = 0; i < len; i++)
            acc[i] += wa * (double)a[i];
    }
    if (ps->last)
        for (size_t i = 0; i < len; i++)
            out[i] = (float)acc[i];
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
/* 16 elements (one cache line of each input) from i on, in 2 x 8 doubles. */
__attribute__((target("avx512f"), always_inline)) static inline void
wsum_step_avx512(const wsum_pass *ps, double *restrict acc, float *restrict out, size_t i,
                 int prefetch)
{
    WSUM_EXACT
    __m512d a0, a1;
    int t = 0;

    if (ps->first) {
        __m512d w0 = _mm512_set1_pd(ps->w[0]);

        a0 = _mm512_mul_pd(w0, _mm512_cvtps_pd(_mm256_loadu_ps(ps->p[0] + i)));
        a1 = _mm512_mul_pd(w0, _mm512_cvtps_pd(_mm256_loadu_ps(ps->p[0] + i + 8)));
        if (prefetch)
            __builtin_prefetch(ps->p[0] + i + WSUM_AHEAD, 0, 3);
        t = 1;
    } else {
        a0 = _mm512_load_pd(acc + i);
        a1 = _mm512_load_pd(acc + i + 8);
    }
    for (; t < ps->g; t++) {
        __m512d wt = _mm512_set1_pd(ps->w[t]);

        if (prefetch)
            __builtin_prefetch(ps->p[t] + i + WSUM_AHEAD, 0, 3);
        a0 = _mm512_add_pd(a0, _mm512_mul_pd(wt, _mm512_cvtps_pd(_mm256_loadu_ps(ps->p[t] + i))));
        a1 = _mm512_add_pd(a1,
                           _mm512_mul_pd(wt, _mm512_cvtps_pd(_mm256_loadu_ps(ps->p[t] + i + 8))));
    }
    if (ps->last) {
        _mm256_storeu_ps(out + i, _mm512_cvtpd_ps(a0));
        _mm256_storeu_ps(out + i + 8, _mm512_cvtpd_ps(a1));
    } else {
        _mm512_store_pd(acc + i, a0);
        _mm512_store_pd(acc + i + 8, a1);
    }
}

__attribute__((target("avx512f"))) static void wsum_kernel_avx512(const wsum_pass *ps,
                                                                   double *acc, float *out)
{
    size_t n16 = ps->len & ~(size_t)15, i = 0;

    for (; i < n16 && i < ps->pf_len; i += 16)
        wsum_step_avx512(ps, acc, out, i, 1);
    for (; i < n16; i += 16)
        wsum_step_avx512(ps, acc, out, i, 0);
    wsum_pass_plain(ps, acc, out, n16);
}

/* The same over 4 x 4 doubles. */
__attribute__((target("avx2"), always_inline)) static inline void
wsum_step_avx2(const wsum_pass *ps, double *restrict acc, float *restrict out, size_t i,
               int prefetch)
{
    WSUM_EXACT
    __m256d a[4];
    int t = 0;

    if (ps->first) {
        __m256d w0 = _mm256_set1_pd(ps->w[0]);

        for (int q = 0; q < 4; q++)
            a[q] = _mm256_mul_pd(w0, _mm256_cvtps_pd(_mm_loadu_ps(ps->p[0] + i + 4 * q)));
        if (prefetch)
            __builtin_prefetch(ps->p[0] + i + WSUM_AHEAD, 0, 3);
        t = 1;
    } else {
        for (int q = 0; q < 4; q++)
            a[q] = _mm256_load_pd(acc + i + 4 * q);
    }
    for (; t < ps->g; t++) {
        __m256d wt = _mm256_set1_pd(ps->w[t]);

        if (prefetch)
            __builtin_prefetch(ps->p[t] + i + WSUM_AHEAD, 0, 3);
        for (int q = 0; q < 4; q++)
            a[q] = _mm256_add_pd(
                a[q], _mm256_mul_pd(wt, _mm256_cvtps_pd(_mm_loadu_ps(ps->p[t] + i + 4 * q))));
    }
    for (int q = 0; q < 4; q++) {
        if (ps->last)
            _mm_storeu_ps(out + i + 4 * q, _mm256_cvtpd_ps(a[q]));
        else
            _mm256_store_pd(acc + i + 4 * q, a[q]);
    }
}

__attribute__((target("avx2"))) static void wsum_kernel_avx2(const wsum_pass *ps, double *acc,
                                                             float *out)
{
    size_t n16 = ps->len & ~(size_t)15, i = 0;

    for (; i < n16 && i < ps->pf_len; i += 16)
        wsum_step_avx2(ps, acc, out, i, 1);
    for (; i < n16; i += 16)
        wsum_step_avx2(ps, acc, out, i, 0);
    wsum_pass_plain(ps, acc, out, n16);
}
#endif

static wsum_kernel wsum_pick_kernel(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    static const wsum_kernel by_level[3] = {wsum_kernel_plain, wsum_kernel_avx2,
                                            wsum_kernel_avx512};

    return by_level[cpu_simd_level()];
#else
    return wsum_kernel_plain;
#endif
}

static void cpu_weighted_sum(fed_backend *be, float *restrict out, const float *const *in,
                             const double *w, int k, size_t n)
{
    _Alignas(64) double acc[WSUM_BLOCK]; /* (WSUM_BLOCK) partial sums of a block */
    wsum_kernel kernel;
    int groups;

    (void)be;
    if (k <= 0) {
        memset(out, 0, n * sizeof *out);
        return;
    }
    kernel = wsum_pick_kernel();
    groups = (k + WSUM_GROUP - 1) / WSUM_GROUP;
    for (size_t base = 0; base < n; base += WSUM_BLOCK) {
        wsum_pass ps;
        int j = 0;

        ps.len = n - base < WSUM_BLOCK ? n - base : WSUM_BLOCK;
        ps.pf_len = n - base > WSUM_AHEAD ? n - base - WSUM_AHEAD : 0;
        for (int gi = 0; gi < groups; gi++) {
            ps.g = (k - j) / (groups - gi); /* balanced: 100 = 8 x 11 + 12 */
            ps.w = w + j;
            for (int t = 0; t < ps.g; t++)
                ps.p[t] = in[j + t] + base;
            ps.first = j == 0;
            ps.last = j + ps.g == k;
            kernel(&ps, acc, out + base);
            j += ps.g;
        }
    }
}

/* ---- dot products ----
 * Fixed-order double sums in 8 lanes (lane k takes elements i = k mod 8, in
 * order), then the lanes in order: the same result on every run and every
 * path below (each product rounded, then added: no FMA). */
typedef void (*dot_kernel)(const float *x, const float *y, size_t n8, double lane[8]);

static void dot_lanes_plain(const float *restrict x, const float *restrict y, size_t n8,
                            double lane[8])
{
    WSUM_EXACT
    for (size_t i = 0; i < n8; i += 8)
        for (int k = 0; k < 8; k++)
            lane[k] += (double)x[i + k] * (double)y[i + k];
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
__attribute__((target("avx512f"))) static void dot_lanes_avx512(const float *x, const float *y,
                                                                 size_t n8, double lane[8])
{
    WSUM_EXACT
    __m512d acc = _mm512_loadu_pd(lane);

    for (size_t i = 0; i < n8; i += 8)
        acc = _mm512_add_pd(acc, _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)),
                                               _mm512_cvtps_pd(_mm256_loadu_ps(y + i))));
    _mm512_storeu_pd(lane, acc);
}

__attribute__((target("avx2"))) static void dot_lanes_avx2(const float *x, const float *y,
                                                           size_t n8, double lane[8])
{
    WSUM_EXACT
    __m256d lo = _mm256_loadu_pd(lane), hi = _mm256_loadu_pd(lane + 4);

    for (size_t i = 0; i < n8; i += 8) {
        lo = _mm256_add_pd(lo, _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)),
                                             _mm256_cvtps_pd(_mm_loadu_ps(y + i))));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)),
                                             _mm256_cvtps_pd(_mm_loadu_ps(y + i + 4))));
    }
    _mm256_storeu_pd(lane, lo);
    _mm256_storeu_pd(lane + 4, hi);
}
#endif

static dot_kernel dot_pick_kernel(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    static const dot_kernel by_level[3] = {dot_lanes_plain, dot_lanes_avx2, dot_lanes_avx512};

    return by_level[cpu_simd_level()];
#else
    return dot_lanes_plain;
#endif
}

static double cpu_dot(fed_backend *be, size_t n, const float *restrict x, const float *restrict y)
{
    WSUM_EXACT
    double lane[8] = {0};
    size_t n8 = n & ~(size_t)7;
    double s = 0.0;

    (void)be;
    dot_pick_kernel()(x, y, n8, lane);
    for (size_t i = n8; i < n; i++)
        lane[i & 7] += (double)x[i] * (double)y[i];
    for (int k = 0; k < 8; k++)
        s += lane[k];
    return s;
}

static double cpu_sumsq(fed_backend *be, size_t n, const float *x)
{
    return cpu_dot(be, n, x, x);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* ---- optimizer steps ---- */

static void sgd_loop(float *restrict p, const float *restrict g, float *restrict m, size_t n, float lr,
                     float mu, float wd, int nesterov)
{
    if (mu == 0.0f || !m) {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * p[i];
            p[i] -= lr * gi;
        }
    } else if (nesterov) {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * p[i];
            float mi = mu * m[i] + gi;
            m[i] = mi;
            p[i] -= lr * (gi + mu * mi);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * p[i];
            float mi = mu * m[i] + gi;
            m[i] = mi;
            p[i] -= lr * mi;
        }
    }
}

static void cpu_sgd_step(fed_backend *be, float *restrict p, float *restrict g, float *restrict m,
                         size_t n, float lr, float mu, float wd, int nesterov)
{
    FTZ_BEGIN();
    (void)be;
    sgd_loop(p, g, m, n, lr, mu, wd, nesterov);
    FTZ_END();
}

static void cpu_adam_step(fed_backend *be, float *restrict p, const float *restrict g,
                          float *restrict m, float *restrict v, size_t n, float lr, float b1,
                          float b2, float eps, float wd, long t)
{
    float c1 = 1.0f - (float)pow((double)b1, (double)t);
    float c2 = 1.0f - (float)pow((double)b2, (double)t);
    float step = lr / c1;
    float rc2 = 1.0f / sqrtf(c2);
    FTZ_BEGIN();

    (void)be;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;

        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * wd * p[i] + step * mi / (sqrtf(vi) * rc2 + eps);
    }
    FTZ_END();
}

static void cpu_prox_grad(fed_backend *be, float *restrict g, const float *restrict p,
                          const float *restrict p0, size_t n, float mu)
{
    FTZ_BEGIN();
    (void)be;
    for (size_t i = 0; i < n; i++)
        g[i] += mu * (p[i] - p0[i]);
    FTZ_END();
}

static void cpu_destroy(fed_backend *be)
{
    if (!be)
        return;
    fed_free(be->ctx);
    fed_free(be);
}

static void cpu_fill_table(fed_backend *be)
{
    be->abi = FED_BACKEND_ABI;
    be->name = "cpu";
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_memcpy;
    be->download = cpu_memcpy;
    be->copy = cpu_copy;
    be->fill = cpu_fill;
    be->sync = cpu_sync;
    be->gemm = cpu_gemm;
    be->bias_act_fwd = cpu_bias_act_fwd;
    be->relu_bwd = cpu_relu_bwd;
    be->bias_bwd = cpu_bias_bwd;
    be->u8_to_f32 = cpu_u8_to_f32;
    be->softmax_xent = cpu_softmax_xent;
    be->softmax_eval = cpu_softmax_eval;
    be->im2col = cpu_im2col;
    be->col2im = cpu_col2im;
    be->maxpool_fwd = cpu_maxpool_fwd;
    be->maxpool_bwd = cpu_maxpool_bwd;
    be->axpy = cpu_axpy;
    be->scale = cpu_scale;
    be->dot = cpu_dot;
    be->sumsq = cpu_sumsq;
    be->weighted_sum = cpu_weighted_sum;
    be->sgd_step = cpu_sgd_step;
    be->adam_step = cpu_adam_step;
    be->prox_grad = cpu_prox_grad;
    be->destroy = cpu_destroy;
    be->chan_bias_act_fwd = cpu_chan_bias_act_fwd;
    be->chan_bias_bwd = cpu_chan_bias_bwd;
    be->caps = FED_BACKEND_CAP_HOST_MEMORY | FED_BACKEND_CAP_SHARDS | FED_BACKEND_CAP_DP_SGD |
               FED_BACKEND_CAP_CONV | FED_BACKEND_CAP_WINDOW | FED_BACKEND_CAP_EMBED |
               FED_BACKEND_CAP_NORM | FED_BACKEND_CAP_DROPOUT | FED_BACKEND_CAP_BATCHNORM;
    be->im2col_win = cpu_im2col_win;
    be->col2im_win = cpu_col2im_win;
    be->maxpool_win_fwd = cpu_maxpool_win_fwd;
    be->maxpool_win_bwd = cpu_maxpool_win_bwd;
    be->avgpool_win_fwd = cpu_avgpool_win_fwd;
    be->avgpool_win_bwd = cpu_avgpool_win_bwd;
    be->embed_fwd = cpu_embed_fwd;
    be->embed_bwd = cpu_embed_bwd;
    be->norm_fwd = cpu_norm_fwd;
    be->norm_bwd = cpu_norm_bwd;
    be->norm_affine_bwd = cpu_norm_affine_bwd;
    be->dropout = cpu_dropout;
    be->bn_stats = cpu_bn_stats;
    be->bn_fwd = cpu_bn_fwd;
    be->bn_bwd_params = cpu_bn_bwd_params;
    be->bn_bwd_input = cpu_bn_bwd_input;
}

/* OpenBLAS's generic x86-64 kernel sets, picked when it does not know the
 * CPU model (too new for the library, or masked by a hypervisor). */
static int generic_core(const char *name)
{
    static const char *const generic[] = {"Prescott", "Core2", "Penryn", "Dunnington",
                                          "Nehalem", "Atom", "Katmai", "Coppermine",
                                          "Northwood", "Banias", "Unknown"};

    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        if (name && !strcasecmp(name, generic[i]))
            return 1;
    return 0;
}

const char *fed_backend_cpu_suggest_coretype(void)
{
    const char *env = getenv("OPENBLAS_CORETYPE");

    if ((env && *env) || !generic_core(openblas_get_corename()))
        return NULL;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2"))
        return "Haswell";
#endif
    return NULL;
}

/* ---- the bf16 view (--precision bf16) ---- */

typedef fed_err (*bf16_gemm_fn)(int, int, int, int, int, float, const float *, int,
                                const float *, int, float, float *, int);

/* C by gemm, or, without room to pack its operands, the fp32 product (C
 * is never left unmade). */
static void bf16_or_sgemm(bf16_gemm_fn gemm, int trans_a, int trans_b, int M, int N, int K,
                          float alpha, const float *A, int lda, const float *B, int ldb,
                          float beta, float *C, int ldc)
{
    FTZ_BEGIN();
    if (gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) != FED_OK)
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta,
                    C, ldc);
    FTZ_END();
}

static void cpu_gemm_bf16(fed_backend *be, int trans_a, int trans_b, int M, int N, int K,
                          float alpha, const float *A, int lda, const float *B, int ldb,
                          float beta, float *C, int ldc)
{
    (void)be;
    bf16_or_sgemm(fed_gemm_bf16, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void cpu_gemm_amx(fed_backend *be, int trans_a, int trans_b, int M, int N, int K,
                         float alpha, const float *A, int lda, const float *B, int ldb,
                         float beta, float *C, int ldc)
{
    (void)be;
    bf16_or_sgemm(fed_gemm_amx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Whether the CPU has AMX's tiles and their bf16 product (cpuid leaf 7:
 * edx bits 24 and 22) and Linux grants this process their state. */
static int cpu_has_amx(void)
{
    unsigned a, b, c, d;

    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 22 & 1))
        return 0;
    return fed_gemm_amx_permit();
}

static void cpu_view_destroy(fed_backend *be)
{
    fed_free(be); /* the context is the CPU backend's */
}

fed_err fed_backend_cpu_bf16(fed_backend *cpu, fed_backend **out, char *why, size_t cap)
{
    fed_backend *v;
    int amx;

    *out = NULL;
    if (cpu->destroy != cpu_destroy)
        return fed_err_why(why, cap, FED_ERR_UNSUPPORTED,
                           "--precision bf16 runs on the CPU backend only");
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16"))
        return fed_err_why(why, cap, FED_ERR_UNSUPPORTED,
                           "--precision bf16: this CPU lacks AVX512-BF16 (the avx512_bf16 flag "
                           "of /proc/cpuinfo), which its bf16 GEMM needs: run fp32");
    if (!(v = fed_malloc(sizeof *v)))
        return FED_ERR_NOMEM;
    *v = *cpu;
    amx = cpu_has_amx();
    v->gemm = amx ? cpu_gemm_amx : cpu_gemm_bf16;
    v->destroy = cpu_view_destroy;
    snprintf(v->device, sizeof v->device, "%.*s, bf16 GEMMs (%s)", (int)(sizeof v->device - 32),
             cpu->device, amx ? "AMX" : "AVX512-BF16");
    *out = v;
    return FED_OK;
}

fed_err fed_backend_cpu_new(int blas_threads, fed_backend **out)
{
    fed_backend *be = NULL;
    cpu_ctx *ctx = NULL;

    *out = NULL;
    if (blas_threads < 1)
        blas_threads = 1;
    be = fed_calloc(1, sizeof *be);
    ctx = fed_calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        fed_free(be);
        fed_free(ctx);
        return FED_ERR_NOMEM;
    }
    ctx->blas_threads = blas_threads;
    openblas_set_num_threads(blas_threads);
    cpu_fill_table(be);
    be->ctx = ctx;
    snprintf(be->device, sizeof be->device, "cpu (OpenBLAS %s kernels, %d BLAS thread%s)",
             openblas_get_corename(), blas_threads, blas_threads == 1 ? "" : "s");
    if (fed_backend_cpu_suggest_coretype())
        fed_log(FED_LOG_INFO,
                "OpenBLAS chose its generic %s kernels on this CPU; OPENBLAS_CORETYPE=%s "
                "runs several times faster",
                openblas_get_corename(), fed_backend_cpu_suggest_coretype());
    *out = be;
    return FED_OK;
}
