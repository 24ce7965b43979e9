/* gemm_bf16.c - C = alpha op(A) op(B) + beta C with both products' operands
 * rounded to bfloat16 (round to nearest even) and every sum kept in fp32:
 * AVX512-BF16's _mm512_dpbf16_ps over operands packed in pairs of k.
 * Where the CPU has AMX (amx_bf16), the same product on its tiles instead:
 * 32 x 32 blocks of C, four 16 x 16 fp32 tiles, k 32 at a time. Built
 * with -mavx512f -mavx512bf16 -mamx-tile -mamx-bf16 (Makefile); reached
 * only through fed_backend_cpu_bf16 (backend_cpu.c), which checks the CPU
 * by cpuid first. Debian 12's OpenBLAS 0.3.21 exports no cblas_sbgemm. */
#include "model/gemm_bf16.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/alloc.h"

#define MR 8   /* rows of C one kernel call makes */
#define NR 32  /* columns: two zmm of 16 */
#define KC 512 /* k of one pass (256 pairs): the kernel's panels stay in L1/L2 */

/* Rows [r0, r0 + width) of a matrix X of R rows and k [k0, k0 + kc),
 * element (r, k) at X[r ld + k] (contig: each pair of k side by side) or
 * X[k ld + r], as a panel: per pair p, width words each holding
 * (x[r][2p], x[r][2p + 1]) in bf16 (round to nearest even), zeros past R
 * and past kc. op(A) is packed by its rows, op(B) by its columns. */
static void pack_panel(int contig, const float *X, int ld, int R, int r0, int width, int k0,
                       int kc, uint32_t *out)
{
    int kp = (kc + 1) / 2, rows = R - r0 < width ? R - r0 : width;

    if (rows < width)
        memset(out, 0, (size_t)kp * width * sizeof *out);
    if (contig) { /* a row's 32 values at a time: 16 pairs, to 16 places */
        for (int r = 0; r < rows; r++) {
            const float *x = X + (size_t)(r0 + r) * ld + k0;

            for (int k = 0; k < kc; k += 32) {
                int n = kc - k < 32 ? kc - k : 32;
                __mmask16 lo = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
                __mmask16 hi = n <= 16 ? 0 : n >= 32 ? 0xffff : (__mmask16)((1u << (n - 16)) - 1);
                __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + k + 16),
                                                 _mm512_maskz_loadu_ps(lo, x + k));
                uint32_t w[16];

                _mm512_storeu_si512(w, (__m512i)v);
                for (int i = 0; i < (n + 1) / 2; i++)
                    out[(size_t)(k / 2 + i) * width + r] = w[i];
            }
        }
        return;
    }
    for (int p = 0; p < kp; p++) /* two rows of k, 16 of r at a time */
        for (int r = 0; r < rows; r += 16) {
            int n = rows - r < 16 ? rows - r : 16;
            __mmask16 mk = n == 16 ? 0xffff : (__mmask16)((1u << n) - 1);
            const float *x = X + (size_t)(k0 + 2 * p) * ld + r0 + r;
            __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(
                _mm512_maskz_loadu_ps(mk, x)));
            __m512i b = _mm512_setzero_si512();

            if (2 * p + 1 < kc)
                b = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(
                    _mm512_maskz_loadu_ps(mk, x + ld)));
            _mm512_mask_storeu_epi32(out + (size_t)p * width + r, mk,
                                     _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
        }
}

/* C[0:mr, 0:nr] = alpha t + beta C, t the sums, rows of 32 (nr <= 32). */
static void store_block(const float *t, float alpha, float beta, float *C, int ldc, int mr, int nr)
{
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr <= 16 ? 0 : nr >= 32 ? 0xffff : (__mmask16)((1u << (nr - 16)) - 1);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);

    for (int r = 0; r < mr; r++) {
        float *c = C + (size_t)r * ldc;
        __m512 o0 = _mm512_mul_ps(_mm512_loadu_ps(t + r * 32), va);
        __m512 o1 = _mm512_mul_ps(_mm512_loadu_ps(t + r * 32 + 16), va);

        if (beta != 0.0f) {
            o0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, c), vb, o0);
            if (m1)
                o1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, c + 16), vb, o1);
        }
        _mm512_mask_storeu_ps(c, m0, o0);
        if (m1)
            _mm512_mask_storeu_ps(c + 16, m1, o1);
    }
}

/* C[0:mr, 0:nr] = alpha (a b) + beta C over kp pairs: 8 rows x 32
 * columns of fp32 sums, each pair of products one dpbf16 lane. */
static void kernel(const uint32_t *a, const uint32_t *b, int kp, float alpha, float beta,
                   float *C, int ldc, int mr, int nr)
{
    /* sixteen sums in registers, named: an array of them stays in memory */
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00;
    __m512 c61 = c00, c70 = c00, c71 = c00;

    for (int p = 0; p < kp; p++, a += MR, b += NR) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 16);
        __m512bh ar;

#define ROW(r, x0, x1)                                                                       \
    ar = (__m512bh)_mm512_set1_epi32((int)a[r]);                                             \
    x0 = _mm512_dpbf16_ps(x0, ar, b0);                                                       \
    x1 = _mm512_dpbf16_ps(x1, ar, b1)
        ROW(0, c00, c01);
        ROW(1, c10, c11);
        ROW(2, c20, c21);
        ROW(3, c30, c31);
        ROW(4, c40, c41);
        ROW(5, c50, c51);
        ROW(6, c60, c61);
        ROW(7, c70, c71);
#undef ROW
    }
    {
        float t[MR * 32] __attribute__((aligned(64)));
        __m512 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                             {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};

        for (int r = 0; r < MR; r++) {
            _mm512_store_ps(t + r * 32, acc[r][0]);
            _mm512_store_ps(t + r * 32 + 16, acc[r][1]);
        }
        store_block(t, alpha, beta, C, ldc, mr, nr);
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

        for (int im = 0; im < mp; im++) /* op(A)'s rows: contiguous in k unless ta */
            pack_panel(!ta, A, lda, M, im * MR, MR, k0, kc, ap + (size_t)im * MR * kp);
        for (int jn = 0; jn < np; jn++) /* op(B)'s columns: contiguous in k when tb */
            pack_panel(tb, B, ldb, N, jn * NR, NR, k0, kc, bp + (size_t)jn * NR * kp);
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

/* ---- AMX ---- */

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

int fed_gemm_amx_permit(void)
{
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

/* ldtilecfg's 64 bytes: palette 1, eight tiles of 16 rows x 64 bytes
 * (0-3: C's fp32 sums, 4-5: A's rows, 6-7: B's columns). */
typedef struct tile_cfg {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_cfg;

/* Rows [r0, r0 + 16) of X (R rows; element (r, k) at X[r ld + k] when
 * contig, else X[k ld + r]) over k [0, K) as A tiles: tile q, row r, word
 * w = (x[r][32 q + 2 w], x[r][32 q + 2 w + 1]) in bf16. out is zeroed. */
static void pack_rows(int contig, const float *X, int ld, int R, int r0, int K, uint32_t *out)
{
    int rows = R - r0 < 16 ? R - r0 : 16;

    for (int q = 0; q * 32 < K; q++) {
        int n = K - q * 32 < 32 ? K - q * 32 : 32;

        if (contig) {
            __mmask16 lo = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
            __mmask16 hi = n <= 16 ? 0 : n >= 32 ? 0xffff : (__mmask16)((1u << (n - 16)) - 1);

            for (int r = 0; r < rows; r++) {
                const float *x = X + (size_t)(r0 + r) * ld + q * 32;

                _mm512_storeu_si512(out + ((size_t)q * 16 + r) * 16,
                                    (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + 16),
                                                                 _mm512_maskz_loadu_ps(lo, x)));
            }
            continue;
        }
        for (int w = 0; 2 * w < n; w++) {
            __mmask16 mk = rows == 16 ? 0xffff : (__mmask16)((1u << rows) - 1);
            const float *x = X + (size_t)(q * 32 + 2 * w) * ld + r0;
            uint16_t l[16], h[16] = {0};

            _mm256_storeu_si256((__m256i *)l,
                                (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, x)));
            if (2 * w + 1 < n)
                _mm256_storeu_si256((__m256i *)h,
                                    (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, x + ld)));
            for (int r = 0; r < rows; r++)
                out[((size_t)q * 16 + r) * 16 + w] = (uint32_t)l[r] | (uint32_t)h[r] << 16;
        }
    }
}

fed_err fed_gemm_amx(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc)
{
    int nq = (K + 31) / 32, mp = (M + 15) / 16, np = (N + 15) / 16;
    size_t panel = (size_t)nq * 256; /* words of one 16-row (or -column) panel */
    uint32_t *ap, *bp;
    float t[32 * 32] __attribute__((aligned(64)));
    tile_cfg cfg;

    if (K == 0) /* no product: the fp32 kernel's path says C = beta C */
        return fed_gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    ap = fed_alloc_aligned((size_t)(mp + 1) * panel * sizeof *ap);
    bp = fed_alloc_aligned((size_t)(np + 1) * panel * sizeof *bp);
    if (!ap || !bp) {
        fed_free(ap);
        fed_free(bp);
        return FED_ERR_NOMEM;
    }
    for (int i = 0; i < mp; i++) /* op(A)'s rows: contiguous in k unless ta */
        pack_rows(!ta, A, lda, M, i * 16, K, ap + (size_t)i * panel);
    for (int j = 0; j < np; j++) /* op(B)'s columns in pairs: the B tiles' layout */
        pack_panel(tb, B, ldb, N, j * 16, 16, 0, K, bp + (size_t)j * panel);
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    _tile_loadconfig(&cfg);
    for (int j = 0; j < np; j += 2)
        for (int i = 0; i < mp; i += 2) {
            /* a panel past the last is the zeroed spare at the end */
            const uint32_t *a0 = ap + (size_t)i * panel, *a1 = ap + (size_t)(i + 1) * panel;
            const uint32_t *b0 = bp + (size_t)j * panel, *b1 = bp + (size_t)(j + 1) * panel;
            int mr = M - i * 16 < 32 ? M - i * 16 : 32, nr = N - j * 16 < 32 ? N - j * 16 : 32;

            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int q = 0; q < nq; q++) {
                _tile_loadd(4, a0 + (size_t)q * 256, 64);
                _tile_loadd(5, a1 + (size_t)q * 256, 64);
                _tile_loadd(6, b0 + (size_t)q * 256, 64);
                _tile_loadd(7, b1 + (size_t)q * 256, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, t, 128);
            _tile_stored(1, t + 16, 128);
            _tile_stored(2, t + 16 * 32, 128);
            _tile_stored(3, t + 16 * 32 + 16, 128);
            store_block(t, alpha, beta, C + (size_t)i * 16 * ldc + (size_t)j * 16, ldc, mr, nr);
        }
    _tile_release();
    fed_free(ap);
    fed_free(bp);
    return FED_OK;
}
