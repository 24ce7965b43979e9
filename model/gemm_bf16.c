/* gemm_bf16.c - C = alpha op(A) op(B) + beta C with both products' operands
 * rounded to bfloat16 (round to nearest even) and every sum kept in fp32:
 * AVX512-BF16's _mm512_dpbf16_ps over operands packed in pairs of k.
 * Built with -mavx512f -mavx512bf16 (Makefile); reached only through
 * fed_backend_cpu_bf16 (backend_cpu.c), which checks the CPU by cpuid
 * first. Debian 12's OpenBLAS 0.3.21 exports no cblas_sbgemm. */
#include "model/gemm_bf16.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"

#define MR 8   /* rows of C one kernel call makes */
#define NR 32  /* columns: two zmm of 16 */
#define KC 512 /* k of one pass (256 pairs): the kernel's panels stay in L1/L2 */

/* fp32 to bf16, round to nearest even (a NaN stays a NaN). */
static uint16_t bf16_of(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* op(A) rows [0, M), k [k0, k0 + kc) into panels of MR rows: per panel,
 * per pair p, MR words each holding (a[r][2p], a[r][2p + 1]); padded with
 * zeros. */
static void pack_a(int ta, const float *A, int lda, int M, int k0, int kc, uint32_t *out)
{
    int kp = (kc + 1) / 2;

    for (int m0 = 0; m0 < M; m0 += MR)
        for (int p = 0; p < kp; p++)
            for (int r = 0; r < MR; r++, out++) {
                int i = m0 + r, k = k0 + 2 * p;
                uint16_t lo = 0, hi = 0;

                if (i < M) {
                    lo = bf16_of(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                    if (2 * p + 1 < kc)
                        hi = bf16_of(ta ? A[(size_t)(k + 1) * lda + i]
                                        : A[(size_t)i * lda + k + 1]);
                }
                *out = (uint32_t)lo | (uint32_t)hi << 16;
            }
}

/* op(B) k [k0, k0 + kc), columns [0, N) into panels of NR columns: per
 * panel, per pair p, NR words (b[2p][j], b[2p + 1][j]). */
static void pack_b(int tb, const float *B, int ldb, int N, int k0, int kc, uint32_t *out)
{
    int kp = (kc + 1) / 2;

    for (int n0 = 0; n0 < N; n0 += NR)
        for (int p = 0; p < kp; p++)
            for (int c = 0; c < NR; c++, out++) {
                int j = n0 + c, k = k0 + 2 * p;
                uint16_t lo = 0, hi = 0;

                if (j < N) {
                    lo = bf16_of(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                    if (2 * p + 1 < kc)
                        hi = bf16_of(tb ? B[(size_t)j * ldb + k + 1]
                                        : B[(size_t)(k + 1) * ldb + j]);
                }
                *out = (uint32_t)lo | (uint32_t)hi << 16;
            }
}

/* C[0:mr, 0:nr] = alpha (a b) + beta C over kp pairs: 8 rows x 32
 * columns of fp32 sums, each pair of products one dpbf16 lane. */
static void kernel(const uint32_t *a, const uint32_t *b, int kp, float alpha, float beta,
                   float *C, int ldc, int mr, int nr)
{
    __m512 acc[MR][2];
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr <= 16 ? 0 : nr >= 32 ? 0xffff : (__mmask16)((1u << (nr - 16)) - 1);

    for (int r = 0; r < MR; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++, a += MR, b += NR) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 16);

        for (int r = 0; r < MR; r++) {
            __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r]);

            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
        }
    }
    for (int r = 0; r < mr; r++) {
        float *c = C + (size_t)r * ldc;
        __m512 va = _mm512_set1_ps(alpha);
        __m512 c0 = _mm512_mul_ps(acc[r][0], va), c1 = _mm512_mul_ps(acc[r][1], va);

        if (beta != 0.0f) {
            __m512 vb = _mm512_set1_ps(beta);

            c0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, c), vb, c0);
            if (m1)
                c1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, c + 16), vb, c1);
        }
        _mm512_mask_storeu_ps(c, m0, c0);
        if (m1)
            _mm512_mask_storeu_ps(c + 16, m1, c1);
    }
}

fed_err fed_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc)
{
    int mp = (M + MR - 1) / MR, np = (N + NR - 1) / NR, kcap = K < KC ? K : KC;
    size_t pairs = (size_t)(kcap + 1) / 2;
    uint32_t *ap = fed_alloc_aligned((size_t)mp * MR * pairs * sizeof *ap);
    uint32_t *bp = fed_alloc_aligned((size_t)np * NR * pairs * sizeof *bp);

    if (!ap || !bp) {
        fed_free(ap);
        fed_free(bp);
        return FED_ERR_NOMEM;
    }
    if (K == 0) /* C = beta C */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
    for (int k0 = 0; k0 < K; k0 += KC) {
        int kc = K - k0 < KC ? K - k0 : KC, kp = (kc + 1) / 2;
        float bk = k0 == 0 ? beta : 1.0f; /* later passes add to the first's */

        pack_a(ta, A, lda, M, k0, kc, ap);
        pack_b(tb, B, ldb, N, k0, kc, bp);
        for (int jn = 0; jn < np; jn++)
            for (int im = 0; im < mp; im++) {
                int mr = M - im * MR < MR ? M - im * MR : MR;
                int nr = N - jn * NR < NR ? N - jn * NR : NR;

                kernel(ap + (size_t)im * MR * kp, bp + (size_t)jn * NR * kp, kp, alpha, bk,
                       C + (size_t)im * MR * ldc + (size_t)jn * NR, ldc, mr, nr);
            }
    }
    fed_free(ap);
    fed_free(bp);
    return FED_OK;
}
