/* backend.h - the compute backend table: the one seam between the model and
 * the hardware. The CPU backend (model/backend_cpu.c, OpenBLAS + loops) and
 * the CUDA plugin (cuda/, loaded with dlopen) fill the same table.
 *
 * Pointers passed to kernels are device pointers from alloc(): the host never
 * dereferences them (on the CPU they happen to be host memory). All tensors
 * are float32, row-major, contiguous unless a leading dimension is given.
 * Kernels are asynchronous on devices that can be; download() and the
 * reductions that return host values synchronize. A kernel never allocates. */
#ifndef FED_MODEL_BACKEND_H
#define FED_MODEL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define FED_BACKEND_ABI 4

/* What a backend can do (fed_backend.caps); nothing compares its name. */
/* Device pointers are host memory and kernels finish before they return:
 * the host may read a model's buffers directly (DP-SGD, merging in place). */
#define FED_BACKEND_CAP_HOST_MEMORY (1u << 0)
/* Kernels may run at once from several threads on disjoint buffers: a
 * batch is split in shards over the core pool. */
#define FED_BACKEND_CAP_SHARDS (1u << 1)
/* Per-sample gradient norms for DP-SGD (fed_model_dp_grads). */
#define FED_BACKEND_CAP_DP_SGD (1u << 2)
/* Convolutions of stride 1 without padding and 2x2 max pooling:
 * chan_bias_act_fwd, chan_bias_bwd, im2col, col2im, maxpool_fwd/bwd. */
#define FED_BACKEND_CAP_CONV (1u << 3)
/* Any window (kernel, stride, padding, dilation): im2col_win, col2im_win,
 * maxpool_win_fwd/bwd, avgpool_win_fwd/bwd. */
#define FED_BACKEND_CAP_WINDOW (1u << 4)
/* Embedding gather and scatter-add: embed_fwd, embed_bwd. */
#define FED_BACKEND_CAP_EMBED (1u << 5)
/* Layer and group normalization: norm_fwd, norm_bwd, norm_affine_bwd. */
#define FED_BACKEND_CAP_NORM (1u << 8)
/* Dropout's counter-based masks: dropout. */
#define FED_BACKEND_CAP_DROPOUT (1u << 9)
/* Batch norm's statistics, normalization and gradients: bn_stats, bn_fwd,
 * bn_bwd_params, bn_bwd_input. */
#define FED_BACKEND_CAP_BATCHNORM (1u << 6)

/* A sliding window over one image (C, H, W): kernel KH x KW, stride S,
 * padding P on each side (zeros for a convolution, never the maximum for
 * max pooling), dilation D (1 for pooling), output OH x OW with
 * OH = (H + 2 PH - DH (KH - 1) - 1) / SH + 1, PyTorch's floor. */
typedef struct fed_window {
    int C, H, W;
    int KH, KW, SH, SW, PH, PW, DH, DW;
    int OH, OW;
} fed_window;

typedef struct fed_backend fed_backend;

struct fed_backend {
    int abi;           /* FED_BACKEND_ABI */
    const char *name;  /* "cpu", "cuda" */
    char device[128];  /* e.g. "NVIDIA H100 80GB HBM3" or "cpu (OpenBLAS)" */
    void *ctx;         /* the backend's own state */

    /* ---- memory ---- */
    FED_WUR fed_err (*alloc)(fed_backend *be, size_t bytes, void **dptr); /* zeroed */
    void (*free)(fed_backend *be, void *dptr);
    FED_WUR fed_err (*upload)(fed_backend *be, void *dst, const void *src, size_t bytes);
    FED_WUR fed_err (*download)(fed_backend *be, void *dst, const void *src, size_t bytes);
    void (*copy)(fed_backend *be, float *dst, const float *src, size_t n);
    void (*fill)(fed_backend *be, float *x, float value, size_t n);
    FED_WUR fed_err (*sync)(fed_backend *be);

    /* ---- GEMM: C = alpha * op(A) op(B) + beta * C, row-major.
     * op(A) is (M, K), op(B) is (K, N), C is (M, N). ---- */
    void (*gemm)(fed_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C,
                 int ldc);

    /* ---- layers (forward/backward pairs) ---- */
    /* y (B, N) += bias (N); then y = max(y, 0) when relu. */
    void (*bias_act_fwd)(fed_backend *be, float *y, const float *bias, int B, int N, int relu);
    /* dy (n) *= (y > 0): the ReLU backward, y the ReLU output. */
    void (*relu_bwd)(fed_backend *be, float *dy, const float *y, size_t n);
    /* dbias (N) = sum over b of dy (B, N), or += when accumulate. */
    void (*bias_bwd)(fed_backend *be, float *dbias, const float *dy, int B, int N, int accumulate);
    /* Images: dst (n) = src_u8 (n) * scale + shift, rounded after the
     * product and after the sum (no fused multiply-add); src is a device
     * copy of uint8. */
    void (*u8_to_f32)(fed_backend *be, float *dst, const uint8_t *src, size_t n, float scale,
                      float shift);
    /* Softmax cross-entropy fused with its gradient. logits (B, C) are
     * replaced by dlogits = (softmax - onehot(labels)) * grad_scale.
     * loss_sum (host) gets the summed loss, correct (host) the count of
     * argmax == label; both may be NULL. labels (B) are device int32. */
    void (*softmax_xent)(fed_backend *be, float *logits, const int32_t *labels, int B, int C,
                         float grad_scale, double *loss_sum, int *correct);
    /* Softmax + argmax only (evaluation): per-row loss summed, correct counted. */
    void (*softmax_eval)(fed_backend *be, const float *logits, const int32_t *labels, int B,
                         int C, double *loss_sum, int *correct);
    /* im2col for one image: x (C, H, W) -> col (C*KH*KW, OH*OW), stride 1, no padding. */
    void (*im2col)(fed_backend *be, const float *x, int C, int H, int W, int KH, int KW,
                   float *col);
    /* col2im, accumulating: dx (C, H, W) += fold(dcol (C*KH*KW, OH*OW)). */
    void (*col2im)(fed_backend *be, const float *dcol, int C, int H, int W, int KH, int KW,
                   float *dx);
    /* 2x2 max pooling, stride 2: x (B*C, H, W) -> y (B*C, H/2, W/2); argmax
     * (same shape as y) records the winning input offset within its plane. */
    void (*maxpool_fwd)(fed_backend *be, const float *x, int BC, int H, int W, float *y,
                        int32_t *argmax);
    /* dx (B*C, H, W) = 0 except dx[argmax] = dy. */
    void (*maxpool_bwd)(fed_backend *be, const float *dy, const int32_t *argmax, int BC, int H,
                        int W, float *dx);

    /* ---- vectors and reductions ---- */
    void (*axpy)(fed_backend *be, size_t n, float alpha, const float *x, float *y); /* y += a x */
    void (*scale)(fed_backend *be, size_t n, float alpha, float *x);               /* x *= a */
    /* Both return to the host in double, summed in a fixed order. */
    double (*dot)(fed_backend *be, size_t n, const float *x, const float *y);
    double (*sumsq)(fed_backend *be, size_t n, const float *x);
    /* out (n) = sum_i w[i] * in[i] (n), i = 0..k-1 in that order; w on the host. */
    void (*weighted_sum)(fed_backend *be, float *out, const float *const *in, const double *w,
                         int k, size_t n);

    /* ---- optimizer steps over a flat buffer of n parameters ---- */
    /* SGD: g += wd*p; m = mu*m + g; p -= lr * (nesterov ? g + mu*m : m).
     * With mu == 0, m may be NULL. g is scratch: its contents after the
     * step are unspecified (the CPU backend leaves it unchanged). */
    void (*sgd_step)(fed_backend *be, float *p, float *g, float *m, size_t n, float lr, float mu,
                     float wd, int nesterov);
    /* Adam (decoupled weight decay when wd > 0, AdamW); t >= 1 is the step. */
    void (*adam_step)(fed_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                      float lr, float b1, float b2, float eps, float wd, long t);
    /* FedProx: g += mu * (p - p0). */
    void (*prox_grad)(fed_backend *be, float *g, const float *p, const float *p0, size_t n,
                      float mu);

    /* Releases the backend and its context; the table itself too when the
     * backend allocated it. */
    void (*destroy)(fed_backend *be);

    /* ---- added for convolutions (NCHW maps; the cnn needs both) ---- */
    /* y (B, C, HW) += bias (C) per channel; then y = max(y, 0) when relu. */
    void (*chan_bias_act_fwd)(fed_backend *be, float *y, const float *bias, int B, int C, int HW,
                              int relu);
    /* dbias (C) = sum over b and hw of dy (B, C, HW), or += when accumulate. */
    void (*chan_bias_bwd)(fed_backend *be, float *dbias, const float *dy, int B, int C, int HW,
                          int accumulate);

    /* ---- ABI 2 ---- */
    unsigned caps; /* FED_BACKEND_CAP_* */
    /* im2col for one image, any window: col (C*KH*KW, OH*OW), row (c, ki,
     * kj), column (oi, oj) = x[c][oi*SH - PH + ki*DH][oj*SW - PW + kj*DW],
     * 0 outside the image. */
    void (*im2col_win)(fed_backend *be, const float *x, const fed_window *g, float *col);
    /* Its adjoint, accumulating: dx (C, H, W) += fold(dcol). */
    void (*col2im_win)(fed_backend *be, const float *dcol, const fed_window *g, float *dx);
    /* Max pooling of n images (n*C planes of H x W) -> y (n*C, OH, OW);
     * argmax (same shape as y) gets the winner's offset within its plane,
     * the first in row-major order among equals. */
    void (*maxpool_win_fwd)(fed_backend *be, const float *x, int n, const fed_window *g, float *y,
                            int32_t *argmax);
    /* dx (n*C, H, W) = 0, then dx[argmax] += dy. */
    void (*maxpool_win_bwd)(fed_backend *be, const float *dy, const int32_t *argmax, int n,
                            const fed_window *g, float *dx);
    /* Average pooling, padding counted (PyTorch's count_include_pad): each
     * output is the window's sum over KH*KW. */
    void (*avgpool_win_fwd)(fed_backend *be, const float *x, int n, const fed_window *g,
                            float *y);
    /* dx (n*C, H, W) = the adjoint of avgpool_win_fwd applied to dy. */
    void (*avgpool_win_bwd)(fed_backend *be, const float *dy, int n, const fed_window *g,
                            float *dx);

    /* ---- ABI 3: embeddings (FED_BACKEND_CAP_EMBED) ---- */
    /* Row i of y (n, dim) = row id_i of W (num, dim), id_i = (int)x[i * ldx
     * + col]; the caller checked each id is an integer in [0, num). */
    void (*embed_fwd)(fed_backend *be, float *y, const float *W, const float *x, int ldx, int col,
                      int n, int dim);
    /* The scatter-add over weight rows [lo, hi): those rows of dW (zeroed
     * first unless accumulate), then row i of dy (n, dim) added to row id_i
     * for each i in 0..n-1 in order whose id lies in [lo, hi). */
    void (*embed_bwd)(fed_backend *be, float *dW, const float *dy, const float *x, int ldx,
                      int col, int n, int dim, int lo, int hi, int accumulate);
    /* ---- ABI 3: normalization and dropout ---- */
    /* Normalization of n samples of G groups of M values each (x (n, G*M)):
     * each group's mean and rstd = 1/sqrt(var + eps) (the biased variance)
     * into stat (n, G, 2), and y = (x - mean) rstd gamma[k / rep] +
     * beta[k / rep] for the value at k of its sample, then max(y, 0) when
     * relu. nn.LayerNorm over a sample is G = 1, rep = 1; nn.GroupNorm(G, C)
     * over (C, H, W) is rep = H*W. M is a multiple of rep (an affine entry's
     * values lie in one group). */
    void (*norm_fwd)(fed_backend *be, const float *x, int n, int G, int M, int rep,
                     const float *gamma, const float *beta, float eps, int relu, float *stat,
                     float *y);
    /* Its input gradient dx (n, G*M) from dy (the ReLU mask applied), x and
     * stat: rstd (g - mean(g) - xhat mean(g xhat)) over each group, with
     * g = dy gamma[k / rep] and xhat = (x - mean) rstd. */
    void (*norm_bwd)(fed_backend *be, const float *dy, const float *x, const float *stat, int n,
                     int G, int M, int rep, const float *gamma, float *dx);
    /* Its affine gradients of entries [a0, a1) over the n samples:
     * dgamma[a] = the sum of dy xhat over the values k with k / rep == a,
     * dbeta[a] = the sum of dy; added to when accumulate. dgamma and dbeta
     * point at entry 0. */
    void (*norm_affine_bwd)(fed_backend *be, const float *dy, const float *x, const float *stat,
                            int n, int G, int M, int rep, int a0, int a1, float *dgamma,
                            float *dbeta, int accumulate);
    /* Dropout of n values: y[i] = x[i] / (1 - p) when the 64-bit hash of
     * (key, first + i) (fed_backend_dropout_keep, the one definition) keeps
     * value first + i, else 0. The same call on dy gives dx. */
    void (*dropout)(fed_backend *be, const float *x, size_t n, uint64_t key, uint64_t first,
                    float p, float *y);

    /* ---- ABI 4: batch norm (FED_BACKEND_CAP_BATCHNORM) over x (B, C, HW):
     * channel c's values are its B * HW; sums in double, in a fixed order ---- */
    /* Channels [c0, c1): their mean and biased variance into mean and var
     * (C each); unless run_mean is NULL, also run_mean = (1 - momentum)
     * run_mean + momentum mean, and run_var likewise with the unbiased
     * variance (PyTorch's rule; left as they are with one value a channel). */
    void (*bn_stats)(fed_backend *be, const float *x, int B, int C, int HW, int c0, int c1,
                     float *mean, float *var, float *run_mean, float *run_var, float momentum);
    /* y = (x - mean) / sqrt(var + eps) * gamma + beta per channel, then
     * max(y, 0) when relu; x and y (B, C, HW) may not overlap. */
    void (*bn_fwd)(fed_backend *be, const float *x, float *y, int B, int C, int HW,
                   const float *mean, const float *var, const float *gamma, const float *beta,
                   float eps, int relu);
    /* Channels [c0, c1) over all B rows: dgamma = sum dy * xhat, dbeta =
     * sum dy, xhat = (x - mean) / sqrt(var + eps). */
    void (*bn_bwd_params)(fed_backend *be, const float *dy, const float *x, int B, int C, int HW,
                          int c0, int c1, const float *mean, const float *var, float eps,
                          float *dgamma, float *dbeta);
    /* dx of B rows through the batch's statistics, count values a channel
     * in the whole batch: dx = gamma / sqrt(var + eps) (dy - (dbeta +
     * xhat dgamma) / count). */
    void (*bn_bwd_input)(fed_backend *be, const float *dy, const float *x, float *dx, int B, int C,
                         int HW, const float *mean, const float *var, float eps,
                         const float *gamma, const float *dgamma, const float *dbeta,
                         long count);
};

/* splitmix64's finalizer: a bijection of 64 bits that mixes every bit into
 * every other (dropout's counter-based hash, and its keys per layer). */
static inline uint64_t fed_backend_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Whether dropout of probability p keeps value i under key: the top 32
 * bits of fed_backend_mix64(key + (i + 1) * the golden ratio) at or above
 * p * 2^32. Counter-based: no state, the same on every thread and device. */
static inline int fed_backend_dropout_keep(uint64_t key, uint64_t i, float p)
{
    uint64_t z = fed_backend_mix64(key + (i + 1) * 0x9e3779b97f4a7c15ULL);

    return (double)(z >> 32) >= (double)p * 4294967296.0;
}

/* The CPU backend. threads: OpenBLAS's own thread count (1 when the pool
 * splits the batch, which is the default). */
FED_WUR fed_err fed_backend_cpu_new(int blas_threads, fed_backend **out);
/* --precision bf16: a view of the CPU backend cpu (its table, its context)
 * whose gemm rounds both operands to bfloat16 and sums in fp32
 * (model/gemm_bf16.h: on AMX tiles where the CPU has amx_bf16 and Linux
 * grants the process their state, else AVX512-BF16's dpbf16); everything
 * else is cpu's
 * fp32. Free it with its destroy (cpu stays). FED_ERR_UNSUPPORTED, with the
 * reason in why (cap bytes), where the CPU lacks avx512f or avx512_bf16
 * (cpuid) or cpu is not the CPU backend. */
FED_WUR fed_err fed_backend_cpu_bf16(fed_backend *cpu, fed_backend **out, char *why, size_t cap);
/* OpenBLAS picks its kernels when it loads, from the CPU's model number; on a
 * CPU newer than the library it falls back to generic SSE3 kernels, several
 * times slower. Returns the OPENBLAS_CORETYPE value to run with instead
 * ("SkylakeX" with AVX-512, "Haswell" with AVX2), or NULL when the choice is
 * fine or OPENBLAS_CORETYPE is set already. It takes effect only in a new
 * process (fednode train/eval re-execute themselves with it). */
const char *fed_backend_cpu_suggest_coretype(void);

/* "auto", "cpu", "cuda" or "cuda:N". auto takes the GPU when the plugin
 * libfedcuda.so loads and a device exists. Logs which one it took. */
FED_WUR fed_err fed_backend_open(const char *device, fed_backend **out);
/* Whether device asks for auto (NULL, "" or "auto"): the one test of it. */
int fed_backend_device_auto(const char *device);
void fed_backend_free(fed_backend *be);

/* The CUDA plugin exports this symbol; fed_backend_open finds it by dlsym. */
typedef fed_err (*fed_cuda_backend_new_fn)(int device, fed_backend **out);
#define FED_CUDA_ENTRY "fed_cuda_backend_new"

#endif
