/* gemm_bf16.h - a GEMM on bfloat16 operands with fp32 sums (AVX512-BF16),
 * the CPU backend's for --precision bf16. Call only where the CPU has
 * avx512f and avx512_bf16 (fed_backend_cpu_bf16 checks). */
#ifndef FED_MODEL_GEMM_BF16_H
#define FED_MODEL_GEMM_BF16_H

#include "core/err.h"

/* C (M, N) = alpha op(A) op(B) + beta C, row-major as cblas_sgemm, each
 * element of op(A) (M, K) and op(B) (K, N) rounded to bf16 (nearest even),
 * the products summed in fp32. FED_ERR_NOMEM when its packing buffers
 * cannot be had (C untouched). */
FED_WUR fed_err fed_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                              int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* fed_gemm_bf16 on AMX tiles (the same roundings; the sums in another
 * order). Call only where the CPU has amx_bf16 and fed_gemm_amx_permit
 * succeeded. */
FED_WUR fed_err fed_gemm_amx(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                             int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* Asks Linux for the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM, once
 * per process: the grant is the process's); 1 when granted. */
int fed_gemm_amx_permit(void);

#endif
