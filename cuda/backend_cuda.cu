/* backend_cuda.cu - the CUDA backend behind model/backend.h's table (kernels
 * plus cuBLAS on one stream), built as the plugin libfedcuda.so. Owns its
 * stream, handle and scratch, all made at creation: a kernel never allocates.
 * Matches the CPU backend (the reference); reductions sum in a fixed order.
 * Links cudart and cuBLAS only; never prints, never exits. */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/log.h"
#include "model/backend.h"
}

#include "cuda/backend_cuda.h"

/* The host program's log sink and allocator, when it exports them (fednode is
 * linked -rdynamic); weak, so the plugin still loads into a program that
 * does not, and then logs nothing and uses calloc/free. */
extern "C" {
void fed_log(fed_log_level level, const char *fmt, ...) __attribute__((weak));
void *fed_calloc(size_t n, size_t size) __attribute__((weak));
void fed_free(void *p) __attribute__((weak));
}

#define THREADS 256
#define MAX_GRID 4096     /* elementwise kernels loop over larger inputs */
#define RED_BLOCKS 1024   /* dot / sumsq: fixed grid, so a fixed summation order */
#define XENT_ROWS 8       /* softmax rows per block, one warp each */
#define XENT_BLOCKS 1024  /* at most; partial results per block */
#define WSUM_CAP 4096     /* weighted_sum inputs per pass */
#define BLAS_WS_BYTES ((size_t)32 << 20)

typedef struct cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;             /* (BLAS_WS_BYTES) cuBLAS workspace */
    double *red_part;          /* (RED_BLOCKS) dot/sumsq partials */
    double *xent_loss;         /* (XENT_BLOCKS) softmax partial loss */
    int *xent_right;           /* (XENT_BLOCKS) softmax partial correct */
    double *result;            /* (2) device: final reduction */
    double *host_result;       /* (2) pinned host copy of result */
    const float **wsum_in;     /* (WSUM_CAP) device copy of the input pointers */
    double *wsum_w;            /* (WSUM_CAP) device copy of the weights */
    pthread_mutex_t result_lock; /* host_result between threads */
    int lock_ready;
    cudaError_t err;           /* first failure, reported by sync/download */
} cuda_ctx;

/* ------------------------------------------------------------ helpers -- */

static void log_line(fed_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void log_line(fed_log_level level, const char *fmt, ...)
{
    char line[512];
    va_list ap;

    if (!fed_log)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fed_log(level, "%s", line);
}

static void *host_calloc(size_t n, size_t size)
{
    return fed_calloc ? fed_calloc(n, size) : calloc(n, size);
}

static void host_free(void *p)
{
    if (fed_free)
        fed_free(p);
    else
        free(p);
}

static cuda_ctx *ctx_of(fed_backend *be)
{
    return (cuda_ctx *)be->ctx;
}

/* Records the first failure (later calls keep reporting it) and logs it. */
static void note(cuda_ctx *c, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return;
    if (c->err == cudaSuccess) {
        c->err = e;
        log_line(FED_LOG_ERROR, "cuda: %s failed: %s", what, cudaGetErrorString(e));
    }
}

static void note_blas(cuda_ctx *c, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return;
    if (c->err == cudaSuccess) {
        c->err = cudaErrorUnknown;
        log_line(FED_LOG_ERROR, "cuda: %s failed: cuBLAS status %d", what, (int)s);
    }
}

/* Every entry point runs on the backend's device, whichever thread calls. */
static cuda_ctx *enter(fed_backend *be)
{
    cuda_ctx *c = ctx_of(be);

    note(c, cudaSetDevice(c->device), "cudaSetDevice");
    return c;
}

static void launched(cuda_ctx *c, const char *what)
{
    note(c, cudaGetLastError(), what);
}

static unsigned grid_for(size_t n)
{
    size_t g = (n + THREADS - 1) / THREADS;

    return (unsigned)(g < 1 ? 1 : g > MAX_GRID ? MAX_GRID : g);
}

static fed_err status(cuda_ctx *c)
{
    return c->err == cudaSuccess ? FED_OK : FED_ERR_DEVICE;
}

/* kernel<<<grid, block, 0, stream>>>(args) written as
 * LAUNCH(kernel, grid, block, stream)(args): the one place that spells the
 * launch, and a seam where a host emulation can stand in for checking the
 * kernels without a GPU (it defines LAUNCH first). */
#ifndef LAUNCH
#define LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#endif

#define GRID_STRIDE(i, n)                                                              \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);             \
         i += (size_t)gridDim.x * blockDim.x)

/* Sums blockDim.x (a power of two) values of s in a fixed tree; s[0] holds it. */
template <typename T> __device__ void block_tree_sum(T *s)
{
    for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
        __syncthreads();
        if (threadIdx.x < w)
            s[threadIdx.x] += s[threadIdx.x + w];
    }
    __syncthreads();
}

/* ------------------------------------------------------------- memory -- */

static fed_err cu_alloc(fed_backend *be, size_t bytes, void **dptr)
{
    cuda_ctx *c = enter(be);
    cudaError_t e;

    *dptr = NULL;
    if (bytes == 0)
        bytes = 1;
    e = cudaMalloc(dptr, bytes);
    if (e != cudaSuccess) {
        *dptr = NULL;
        (void)cudaGetLastError(); /* an allocation failure is not sticky */
        log_line(FED_LOG_WARN, "cuda: cudaMalloc(%zu) failed: %s", bytes, cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? FED_ERR_NOMEM : FED_ERR_DEVICE;
    }
    e = cudaMemsetAsync(*dptr, 0, bytes, c->stream);
    if (e != cudaSuccess) {
        note(c, e, "cudaMemsetAsync");
        cudaFree(*dptr);
        *dptr = NULL;
        return FED_ERR_DEVICE;
    }
    return FED_OK;
}

static void cu_free(fed_backend *be, void *dptr)
{
    cuda_ctx *c;

    if (!dptr)
        return;
    c = enter(be);
    note(c, cudaFree(dptr), "cudaFree");
}

/* Returns once src may be reused by the caller. */
static fed_err cu_upload(fed_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_ctx *c = enter(be);

    if (bytes) {
        note(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), "upload");
        note(c, cudaStreamSynchronize(c->stream), "upload sync");
    }
    return status(c);
}

static fed_err cu_download(fed_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_ctx *c = enter(be);

    if (bytes)
        note(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "download");
    note(c, cudaStreamSynchronize(c->stream), "download sync");
    return status(c);
}

static void cu_copy(fed_backend *be, float *dst, const float *src, size_t n)
{
    cuda_ctx *c = enter(be);

    if (n && dst != src)
        note(c, cudaMemcpyAsync(dst, src, n * sizeof *dst, cudaMemcpyDeviceToDevice, c->stream),
             "copy");
}

__global__ void k_fill(float *__restrict__ x, float value, size_t n)
{
    GRID_STRIDE(i, n)
    x[i] = value;
}

static void cu_fill(fed_backend *be, float *x, float value, size_t n)
{
    cuda_ctx *c = enter(be);
    uint32_t bits;

    if (!n)
        return;
    memcpy(&bits, &value, sizeof bits);
    if (bits == 0) {
        note(c, cudaMemsetAsync(x, 0, n * sizeof *x, c->stream), "fill");
        return;
    }
    LAUNCH(k_fill, grid_for(n), THREADS, c->stream)(x, value, n);
    launched(c, "fill");
}

static fed_err cu_sync(fed_backend *be)
{
    cuda_ctx *c = enter(be);

    note(c, cudaStreamSynchronize(c->stream), "sync");
    return status(c);
}

/* --------------------------------------------------------------- GEMM -- */

/* Row-major C (M, N) = op(A) op(B) is column-major C^T (N, M) =
 * op(B)^T op(A)^T: the row-major buffers read as column-major are the
 * transposes, so the operands swap and each keeps its own flag. */
static void cu_gemm(fed_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    cuda_ctx *c = enter(be);

    if (M <= 0 || N <= 0)
        return;
    note_blas(c,
              cublasSgemm(c->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A, lda,
                          &beta, C, ldc),
              "cublasSgemm");
}

/* ------------------------------------------------------------- layers -- */

__global__ void k_bias_act(float *__restrict__ y, const float *__restrict__ bias, size_t n, int N,
                           int relu)
{
    GRID_STRIDE(i, n)
    {
        float v = __fadd_rn(y[i], bias[i % (size_t)N]);
        y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
    }
}

static void cu_bias_act_fwd(fed_backend *be, float *y, const float *bias, int B, int N, int relu)
{
    cuda_ctx *c = enter(be);
    size_t n = (size_t)B * N;

    if (!n)
        return;
    LAUNCH(k_bias_act, grid_for(n), THREADS, c->stream)(y, bias, n, N, relu);
    launched(c, "bias_act_fwd");
}

__global__ void k_relu_bwd(float *__restrict__ dy, const float *__restrict__ y, size_t n)
{
    GRID_STRIDE(i, n)
    dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static void cu_relu_bwd(fed_backend *be, float *dy, const float *y, size_t n)
{
    cuda_ctx *c = enter(be);

    if (!n)
        return;
    LAUNCH(k_relu_bwd, grid_for(n), THREADS, c->stream)(dy, y, n);
    launched(c, "relu_bwd");
}

/* Block (32, 8): 32 columns, 8 row lanes each summing rows ty, ty+8, ...;
 * the lanes then add in a fixed tree. */
__global__ void k_bias_bwd(float *__restrict__ dbias, const float *__restrict__ dy, int B, int N,
                           int accumulate)
{
    __shared__ float s[8][33];
    int j = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;

    if (j < N)
        for (int b = threadIdx.y; b < B; b += 8)
            acc += dy[(size_t)b * N + j];
    s[threadIdx.y][threadIdx.x] = acc;
    for (int w = 4; w > 0; w >>= 1) {
        __syncthreads();
        if ((int)threadIdx.y < w)
            s[threadIdx.y][threadIdx.x] += s[threadIdx.y + w][threadIdx.x];
    }
    if (threadIdx.y == 0 && j < N)
        dbias[j] = accumulate ? dbias[j] + s[0][threadIdx.x] : s[0][threadIdx.x];
}

static void cu_bias_bwd(fed_backend *be, float *dbias, const float *dy, int B, int N,
                        int accumulate)
{
    cuda_ctx *c = enter(be);

    if (N <= 0)
        return;
    LAUNCH(k_bias_bwd, (N + 31) / 32, dim3(32, 8), c->stream)(dbias, dy, B, N, accumulate);
    launched(c, "bias_bwd");
}

__global__ void k_chan_bias_act(float *__restrict__ y, const float *__restrict__ bias, size_t n,
                                int C, int HW, int relu)
{
    GRID_STRIDE(i, n)
    {
        float v = __fadd_rn(y[i], bias[(i / (size_t)HW) % (size_t)C]);
        y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
    }
}

static void cu_chan_bias_act_fwd(fed_backend *be, float *y, const float *bias, int B, int C,
                                 int HW, int relu)
{
    cuda_ctx *c = enter(be);
    size_t n = (size_t)B * C * HW;

    if (!n)
        return;
    LAUNCH(k_chan_bias_act, grid_for(n), THREADS, c->stream)(y, bias, n, C, HW, relu);
    launched(c, "chan_bias_act_fwd");
}

/* One block per channel; threads stride over (b, hw), then a fixed tree. */
__global__ void k_chan_bias_bwd(float *__restrict__ dbias, const float *__restrict__ dy, int B,
                                int C, int HW, int accumulate)
{
    __shared__ float s[THREADS];
    int ch = blockIdx.x;
    size_t total = (size_t)B * HW;
    float acc = 0.0f;

    for (size_t k = threadIdx.x; k < total; k += blockDim.x) {
        size_t b = k / (size_t)HW, i = k % (size_t)HW;
        acc += dy[(b * C + ch) * HW + i];
    }
    s[threadIdx.x] = acc;
    block_tree_sum(s);
    if (threadIdx.x == 0)
        dbias[ch] = accumulate ? dbias[ch] + s[0] : s[0];
}

static void cu_chan_bias_bwd(fed_backend *be, float *dbias, const float *dy, int B, int C, int HW,
                             int accumulate)
{
    cuda_ctx *c = enter(be);

    if (C <= 0)
        return;
    LAUNCH(k_chan_bias_bwd, C, THREADS, c->stream)(dbias, dy, B, C, HW, accumulate);
    launched(c, "chan_bias_bwd");
}

__global__ void k_u8_to_f32(float *__restrict__ dst, const uint8_t *__restrict__ src, size_t n,
                            float scale, float shift)
{
    GRID_STRIDE(i, n)
    dst[i] = __fadd_rn(__fmul_rn((float)src[i], scale), shift);
}

static void cu_u8_to_f32(fed_backend *be, float *dst, const uint8_t *src, size_t n, float scale,
                         float shift)
{
    cuda_ctx *c = enter(be);

    if (!n)
        return;
    LAUNCH(k_u8_to_f32, grid_for(n), THREADS, c->stream)(dst, src, n, scale, shift);
    launched(c, "u8_to_f32");
}

/* ------------------------------------------------ softmax cross-entropy -- */

/* Max and argmax of a row across a warp; the first index wins ties, as on
 * the CPU. */
__device__ void warp_argmax(const float *z, int C, float *zmax, int *amax)
{
    int lane = threadIdx.x & 31;
    float mx = -INFINITY;
    int am = C;

    for (int j = lane; j < C; j += 32)
        if (am == C || z[j] > mx) {
            mx = z[j];
            am = j;
        }
    for (int off = 16; off > 0; off >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, mx, off);
        int oa = __shfl_xor_sync(0xffffffffu, am, off);
        if (oa < C && (am == C || om > mx || (om == mx && oa < am))) {
            mx = om;
            am = oa;
        }
    }
    *zmax = mx;
    *amax = am;
}

__device__ double warp_sum(double v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* One warp per row, rows strided over a grid fixed by B. With write, the
 * logits become (softmax - onehot) * grad_scale. Each block leaves its
 * summed loss and correct count in part_loss / part_right. */
__global__ void k_softmax(float *__restrict__ logits, const int32_t *__restrict__ labels, int B,
                          int C, float grad_scale, int write, double *__restrict__ part_loss,
                          int *__restrict__ part_right)
{
    __shared__ double s_loss[XENT_ROWS];
    __shared__ int s_right[XENT_ROWS];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    double loss = 0.0;
    int right = 0;

    for (int r = blockIdx.x * XENT_ROWS + warp; r < B; r += gridDim.x * XENT_ROWS) {
        float *z = logits + (size_t)r * C;
        int y = labels[r];
        float mx;
        int am;
        double sum = 0.0, lse;

        warp_argmax(z, C, &mx, &am);
        for (int j = lane; j < C; j += 32)
            sum += exp((double)(z[j] - mx));
        lse = log(warp_sum(sum));
        if (lane == 0) {
            /* labels are checked by the caller; one out of range adds no
             * label term and counts as wrong */
            loss += lse - (y >= 0 && y < C ? (double)(z[y] - mx) : 0.0);
            right += am == y;
        }
        if (write) {
            __syncwarp();
            for (int j = lane; j < C; j += 32) {
                float p = (float)exp((double)(z[j] - mx) - lse);
                z[j] = __fmul_rn(__fsub_rn(p, j == y ? 1.0f : 0.0f), grad_scale);
            }
        }
    }
    if (lane == 0) {
        s_loss[warp] = loss;
        s_right[warp] = right;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < XENT_ROWS; w++) {
            loss += s_loss[w];
            right += s_right[w];
        }
        part_loss[blockIdx.x] = loss;
        part_right[blockIdx.x] = right;
    }
}

/* Adds nparts partials in index order into result (loss, correct). */
__global__ void k_softmax_final(const double *__restrict__ part_loss,
                                const int *__restrict__ part_right, int nparts,
                                double *__restrict__ result)
{
    double loss = 0.0;
    long right = 0;

    for (int i = 0; i < nparts; i++) {
        loss += part_loss[i];
        right += part_right[i];
    }
    result[0] = loss;
    result[1] = (double)right;
}

/* Copies result (2 doubles) to the host; holds result_lock while it does. */
static void fetch_result(cuda_ctx *c, double out[2])
{
    out[0] = out[1] = 0.0;
    pthread_mutex_lock(&c->result_lock);
    note(c, cudaMemcpyAsync(c->host_result, c->result, 2 * sizeof(double), cudaMemcpyDeviceToHost,
                            c->stream),
         "result download");
    note(c, cudaStreamSynchronize(c->stream), "result sync");
    if (c->err == cudaSuccess) {
        out[0] = c->host_result[0];
        out[1] = c->host_result[1];
    }
    pthread_mutex_unlock(&c->result_lock);
}

static void softmax_run(fed_backend *be, float *logits, const int32_t *labels, int B, int C,
                        float grad_scale, int write, double *loss_sum, int *correct)
{
    cuda_ctx *c = enter(be);
    int blocks = (B + XENT_ROWS - 1) / XENT_ROWS;
    double res[2];

    if (loss_sum)
        *loss_sum = 0.0;
    if (correct)
        *correct = 0;
    if (B <= 0 || C <= 0)
        return;
    if (blocks > XENT_BLOCKS)
        blocks = XENT_BLOCKS;
    LAUNCH(k_softmax, blocks, XENT_ROWS * 32, c->stream)
    (logits, labels, B, C, grad_scale, write, c->xent_loss, c->xent_right);
    launched(c, "softmax");
    if (!loss_sum && !correct)
        return;
    LAUNCH(k_softmax_final, 1, 1, c->stream)(c->xent_loss, c->xent_right, blocks, c->result);
    launched(c, "softmax_final");
    fetch_result(c, res);
    if (loss_sum)
        *loss_sum = res[0];
    if (correct)
        *correct = (int)res[1];
}

static void cu_softmax_xent(fed_backend *be, float *logits, const int32_t *labels, int B, int C,
                            float grad_scale, double *loss_sum, int *correct)
{
    softmax_run(be, logits, labels, B, C, grad_scale, 1, loss_sum, correct);
}

static void cu_softmax_eval(fed_backend *be, const float *logits, const int32_t *labels, int B,
                            int C, double *loss_sum, int *correct)
{
    /* write == 0: the kernel only reads the logits */
    softmax_run(be, (float *)logits, labels, B, C, 1.0f, 0, loss_sum, correct);
}

/* ------------------------------------------------- im2col and pooling -- */

/* col row r = (c, ki, kj); column p = (oi, oj). */
__global__ void k_im2col(const float *__restrict__ x, int C, int H, int W, int KH, int KW,
                         float *__restrict__ col)
{
    int OH = H - KH + 1, OW = W - KW + 1;
    size_t P = (size_t)OH * OW, n = (size_t)C * KH * KW * P;

    GRID_STRIDE(idx, n)
    {
        int r = (int)(idx / P), p = (int)(idx % P);
        int ch = r / (KH * KW), ki = (r / KW) % KH, kj = r % KW;
        int oi = p / OW, oj = p % OW;

        col[idx] = x[((size_t)ch * H + oi + ki) * W + oj + kj];
    }
}

static void cu_im2col(fed_backend *be, const float *x, int C, int H, int W, int KH, int KW,
                      float *col)
{
    cuda_ctx *c = enter(be);
    size_t n = (size_t)C * KH * KW * (H - KH + 1) * (W - KW + 1);

    if (C <= 0 || H < KH || W < KW || !n)
        return;
    LAUNCH(k_im2col, grid_for(n), THREADS, c->stream)(x, C, H, W, KH, KW, col);
    launched(c, "im2col");
}

/* One thread per input element gathers its (ki, kj) terms in the CPU's
 * order, so no atomics and the same bits as the CPU. */
__global__ void k_col2im(const float *__restrict__ dcol, int C, int H, int W, int KH, int KW,
                         float *__restrict__ dx)
{
    int OH = H - KH + 1, OW = W - KW + 1;
    size_t P = (size_t)OH * OW, n = (size_t)C * H * W;

    GRID_STRIDE(idx, n)
    {
        int ch = (int)(idx / ((size_t)H * W)), h = (int)(idx / W % H), w = (int)(idx % W);
        float acc = dx[idx];

        for (int ki = 0; ki < KH; ki++) {
            int oi = h - ki;

            if (oi < 0 || oi >= OH)
                continue;
            for (int kj = 0; kj < KW; kj++) {
                int oj = w - kj;

                if (oj < 0 || oj >= OW)
                    continue;
                acc = __fadd_rn(acc, dcol[((size_t)(ch * KH + ki) * KW + kj) * P + oi * OW + oj]);
            }
        }
        dx[idx] = acc;
    }
}

static void cu_col2im(fed_backend *be, const float *dcol, int C, int H, int W, int KH, int KW,
                      float *dx)
{
    cuda_ctx *c = enter(be);
    size_t n = (size_t)C * H * W;

    if (C <= 0 || H < KH || W < KW || !n)
        return;
    LAUNCH(k_col2im, grid_for(n), THREADS, c->stream)(dcol, C, H, W, KH, KW, dx);
    launched(c, "col2im");
}

__global__ void k_maxpool_fwd(const float *__restrict__ x, int BC, int H, int W,
                              float *__restrict__ y, int32_t *__restrict__ argmax)
{
    int OH = H / 2, OW = W / 2;
    size_t n = (size_t)BC * OH * OW;

    GRID_STRIDE(idx, n)
    {
        size_t p = idx / ((size_t)OH * OW);
        int o = (int)(idx % ((size_t)OH * OW)), oi = o / OW, oj = o % OW;
        const float *plane = x + p * H * W;
        int base = 2 * oi * W + 2 * oj, best = base;
        int cand[3] = {base + 1, base + W, base + W + 1};

        for (int k = 0; k < 3; k++)
            if (plane[cand[k]] > plane[best])
                best = cand[k];
        y[idx] = plane[best];
        argmax[idx] = best;
    }
}

static void cu_maxpool_fwd(fed_backend *be, const float *x, int BC, int H, int W, float *y,
                           int32_t *argmax)
{
    cuda_ctx *c = enter(be);
    size_t n = (size_t)BC * (H / 2) * (W / 2);

    if (BC <= 0 || !n)
        return;
    LAUNCH(k_maxpool_fwd, grid_for(n), THREADS, c->stream)(x, BC, H, W, y, argmax);
    launched(c, "maxpool_fwd");
}

/* One thread per input element: dy where it won its window, else 0. */
__global__ void k_maxpool_bwd(const float *__restrict__ dy, const int32_t *__restrict__ argmax,
                              int BC, int H, int W, float *__restrict__ dx)
{
    int OH = H / 2, OW = W / 2;
    size_t n = (size_t)BC * H * W;

    GRID_STRIDE(idx, n)
    {
        size_t p = idx / ((size_t)H * W);
        int off = (int)(idx % ((size_t)H * W)), h = off / W, w = off % W;
        int oi = h / 2, oj = w / 2;
        float v = 0.0f;

        if (oi < OH && oj < OW) {
            size_t o = p * OH * OW + (size_t)oi * OW + oj;
            if (argmax[o] == off)
                v = __fadd_rn(0.0f, dy[o]);
        }
        dx[idx] = v;
    }
}

static void cu_maxpool_bwd(fed_backend *be, const float *dy, const int32_t *argmax, int BC, int H,
                           int W, float *dx)
{
    cuda_ctx *c = enter(be);
    size_t n = (size_t)BC * H * W;

    if (BC <= 0 || !n)
        return;
    LAUNCH(k_maxpool_bwd, grid_for(n), THREADS, c->stream)(dy, argmax, BC, H, W, dx);
    launched(c, "maxpool_bwd");
}

/* ------------------------------------------------ vectors, reductions -- */

__global__ void k_axpy(size_t n, float alpha, const float *__restrict__ x, float *__restrict__ y)
{
    GRID_STRIDE(i, n)
    y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
}

static void cu_axpy(fed_backend *be, size_t n, float alpha, const float *x, float *y)
{
    cuda_ctx *c = enter(be);

    if (!n)
        return;
    LAUNCH(k_axpy, grid_for(n), THREADS, c->stream)(n, alpha, x, y);
    launched(c, "axpy");
}

__global__ void k_scale(size_t n, float alpha, float *__restrict__ x)
{
    GRID_STRIDE(i, n)
    x[i] = __fmul_rn(x[i], alpha);
}

static void cu_scale(fed_backend *be, size_t n, float alpha, float *x)
{
    cuda_ctx *c = enter(be);

    if (!n)
        return;
    LAUNCH(k_scale, grid_for(n), THREADS, c->stream)(n, alpha, x);
    launched(c, "scale");
}

/* RED_BLOCKS x THREADS threads, each summing a fixed stride of elements in
 * double; then a fixed tree per block, then the blocks in a fixed tree. */
__global__ void k_dot_part(size_t n, const float *__restrict__ x, const float *__restrict__ y,
                           double *__restrict__ part)
{
    __shared__ double s[THREADS];
    double acc = 0.0;

    GRID_STRIDE(i, n)
    acc += (double)x[i] * (double)y[i];
    s[threadIdx.x] = acc;
    block_tree_sum(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s[0];
}

__global__ void k_tree_final(const double *__restrict__ part, double *__restrict__ result)
{
    __shared__ double s[RED_BLOCKS];

    s[threadIdx.x] = part[threadIdx.x];
    block_tree_sum(s);
    if (threadIdx.x == 0) {
        result[0] = s[0];
        result[1] = 0.0;
    }
}

static double cu_dot(fed_backend *be, size_t n, const float *x, const float *y)
{
    cuda_ctx *c = enter(be);
    double res[2];

    if (!n)
        return 0.0;
    LAUNCH(k_dot_part, RED_BLOCKS, THREADS, c->stream)(n, x, y, c->red_part);
    launched(c, "dot");
    LAUNCH(k_tree_final, 1, RED_BLOCKS, c->stream)(c->red_part, c->result);
    launched(c, "dot final");
    fetch_result(c, res);
    return res[0];
}

static double cu_sumsq(fed_backend *be, size_t n, const float *x)
{
    return cu_dot(be, n, x, x);
}

/* out[i] = sum_j w[j] in[j][i] in double, j in order (the CPU's order and
 * rounding); first != 0 starts from zero, else from out (a later pass). */
__global__ void k_wsum(float *__restrict__ out, const float *const *__restrict__ in,
                       const double *__restrict__ w, int k, size_t n, int first)
{
    GRID_STRIDE(i, n)
    {
        double acc = first ? __dmul_rn(w[0], (double)in[0][i]) : (double)out[i];

        for (int j = first ? 1 : 0; j < k; j++)
            acc = __dadd_rn(acc, __dmul_rn(w[j], (double)in[j][i]));
        out[i] = (float)acc;
    }
}

/* Up to WSUM_CAP inputs in one pass; more go in further passes that start
 * from the float partial already in out. */
static void cu_weighted_sum(fed_backend *be, float *out, const float *const *in, const double *w,
                            int k, size_t n)
{
    cuda_ctx *c = enter(be);

    if (!n)
        return;
    if (k <= 0) {
        note(c, cudaMemsetAsync(out, 0, n * sizeof *out, c->stream), "weighted_sum");
        return;
    }
    for (int base = 0; base < k; base += WSUM_CAP) {
        int cnt = k - base < WSUM_CAP ? k - base : WSUM_CAP;

        note(c, cudaMemcpyAsync(c->wsum_in, in + base, (size_t)cnt * sizeof *in,
                                cudaMemcpyHostToDevice, c->stream),
             "weighted_sum inputs");
        note(c, cudaMemcpyAsync(c->wsum_w, w + base, (size_t)cnt * sizeof *w,
                                cudaMemcpyHostToDevice, c->stream),
             "weighted_sum weights");
        /* a later pass overwrites the device copies after this kernel: the
         * stream orders them */
        LAUNCH(k_wsum, grid_for(n), THREADS, c->stream)
        (out, c->wsum_in, c->wsum_w, cnt, n, base == 0);
        launched(c, "weighted_sum");
    }
    /* the caller may change in and w once this returns (a merge is rare:
     * the wait costs nothing that matters) */
    note(c, cudaStreamSynchronize(c->stream), "weighted_sum sync");
}

/* ---------------------------------------------------- optimizer steps -- */

/* g is only read (backend.h leaves it unspecified after the step; the CPU
 * leaves it unchanged, and so does this). */
__global__ void k_sgd_plain(float *__restrict__ p, const float *__restrict__ g, size_t n,
                            float lr, float wd)
{
    GRID_STRIDE(i, n)
    {
        float gi = __fadd_rn(g[i], __fmul_rn(wd, p[i]));
        p[i] = __fsub_rn(p[i], __fmul_rn(lr, gi));
    }
}

__global__ void k_sgd_momentum(float *__restrict__ p, const float *__restrict__ g,
                               float *__restrict__ m, size_t n, float lr, float mu, float wd,
                               int nesterov)
{
    GRID_STRIDE(i, n)
    {
        float gi = __fadd_rn(g[i], __fmul_rn(wd, p[i]));
        float mi = __fadd_rn(__fmul_rn(mu, m[i]), gi);
        float upd = nesterov ? __fadd_rn(gi, __fmul_rn(mu, mi)) : mi;

        m[i] = mi;
        p[i] = __fsub_rn(p[i], __fmul_rn(lr, upd));
    }
}

static void cu_sgd_step(fed_backend *be, float *p, float *g, float *m, size_t n, float lr,
                        float mu, float wd, int nesterov)
{
    cuda_ctx *c = enter(be);

    if (!n)
        return;
    if (mu == 0.0f || !m)
        LAUNCH(k_sgd_plain, grid_for(n), THREADS, c->stream)(p, g, n, lr, wd);
    else
        LAUNCH(k_sgd_momentum, grid_for(n), THREADS, c->stream)
        (p, g, m, n, lr, mu, wd, nesterov);
    launched(c, "sgd_step");
}

/* The CPU's expression, operation for operation:
 * p -= (lr*wd)*p + (step*m) / (sqrt(v)*rc2 + eps). */
__global__ void k_adam(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                       float *__restrict__ v, size_t n, float lrwd, float b1, float b2, float eps,
                       float step, float rc2)
{
    float one_b1 = 1.0f - b1, one_b2 = 1.0f - b2;

    GRID_STRIDE(i, n)
    {
        float gi = g[i];
        float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_b1, gi));
        float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(one_b2, gi), gi));
        float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), rc2), eps);
        float upd = __fadd_rn(__fmul_rn(lrwd, p[i]), __fdiv_rn(__fmul_rn(step, mi), den));

        m[i] = mi;
        v[i] = vi;
        p[i] = __fsub_rn(p[i], upd);
    }
}

static void cu_adam_step(fed_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                         float lr, float b1, float b2, float eps, float wd, long t)
{
    cuda_ctx *c = enter(be);
    /* the bias corrections exactly as the CPU computes them */
    float c1 = 1.0f - (float)pow((double)b1, (double)t);
    float c2 = 1.0f - (float)pow((double)b2, (double)t);
    float step = lr / c1;
    float rc2 = 1.0f / sqrtf(c2);

    if (!n)
        return;
    LAUNCH(k_adam, grid_for(n), THREADS, c->stream)
    (p, g, m, v, n, lr * wd, b1, b2, eps, step, rc2);
    launched(c, "adam_step");
}

__global__ void k_prox(float *__restrict__ g, const float *__restrict__ p,
                       const float *__restrict__ p0, size_t n, float mu)
{
    GRID_STRIDE(i, n)
    g[i] = __fadd_rn(g[i], __fmul_rn(mu, __fsub_rn(p[i], p0[i])));
}

static void cu_prox_grad(fed_backend *be, float *g, const float *p, const float *p0, size_t n,
                         float mu)
{
    cuda_ctx *c = enter(be);

    if (!n)
        return;
    LAUNCH(k_prox, grid_for(n), THREADS, c->stream)(g, p, p0, n, mu);
    launched(c, "prox_grad");
}

/* ------------------------------------------------------- construction -- */

static void ctx_release(cuda_ctx *c)
{
    if (!c)
        return;
    cudaSetDevice(c->device);
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    if (c->blas)
        cublasDestroy(c->blas);
    cudaFree(c->blas_ws);
    cudaFree(c->red_part);
    cudaFree(c->xent_loss);
    cudaFree(c->xent_right);
    cudaFree(c->result);
    cudaFree(c->wsum_in);
    cudaFree(c->wsum_w);
    if (c->host_result)
        cudaFreeHost(c->host_result);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    if (c->lock_ready)
        pthread_mutex_destroy(&c->result_lock);
    host_free(c);
}

static void cu_destroy(fed_backend *be)
{
    if (!be)
        return;
    ctx_release(ctx_of(be));
    host_free(be);
}

static void fill_table(fed_backend *be)
{
    be->abi = FED_BACKEND_ABI;
    be->name = "cuda";
    be->alloc = cu_alloc;
    be->free = cu_free;
    be->upload = cu_upload;
    be->download = cu_download;
    be->copy = cu_copy;
    be->fill = cu_fill;
    be->sync = cu_sync;
    be->gemm = cu_gemm;
    be->bias_act_fwd = cu_bias_act_fwd;
    be->relu_bwd = cu_relu_bwd;
    be->bias_bwd = cu_bias_bwd;
    be->u8_to_f32 = cu_u8_to_f32;
    be->softmax_xent = cu_softmax_xent;
    be->softmax_eval = cu_softmax_eval;
    be->im2col = cu_im2col;
    be->col2im = cu_col2im;
    be->maxpool_fwd = cu_maxpool_fwd;
    be->maxpool_bwd = cu_maxpool_bwd;
    be->axpy = cu_axpy;
    be->scale = cu_scale;
    be->dot = cu_dot;
    be->sumsq = cu_sumsq;
    be->weighted_sum = cu_weighted_sum;
    be->sgd_step = cu_sgd_step;
    be->adam_step = cu_adam_step;
    be->prox_grad = cu_prox_grad;
    be->destroy = cu_destroy;
    be->chan_bias_act_fwd = cu_chan_bias_act_fwd;
    be->chan_bias_bwd = cu_chan_bias_bwd;
    /* no window kernels yet: a model needing them is refused on this backend */
    be->caps = FED_BACKEND_CAP_CONV;
}

/* Device buffers and handles; every failure is FED_ERR_DEVICE or NOMEM. */
static fed_err ctx_setup(cuda_ctx *c)
{
    cudaError_t e;

    if ((e = cudaSetDevice(c->device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        log_line(FED_LOG_WARN, "cuda: device %d: %s", c->device, cudaGetErrorString(e));
        return FED_ERR_DEVICE;
    }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        log_line(FED_LOG_WARN, "cuda: cublasCreate failed on device %d", c->device);
        return FED_ERR_DEVICE;
    }
    if ((e = cudaMalloc(&c->blas_ws, BLAS_WS_BYTES)) != cudaSuccess ||
        (e = cudaMalloc(&c->red_part, RED_BLOCKS * sizeof(double))) != cudaSuccess ||
        (e = cudaMalloc(&c->xent_loss, XENT_BLOCKS * sizeof(double))) != cudaSuccess ||
        (e = cudaMalloc(&c->xent_right, XENT_BLOCKS * sizeof(int))) != cudaSuccess ||
        (e = cudaMalloc(&c->result, 2 * sizeof(double))) != cudaSuccess ||
        (e = cudaMalloc(&c->wsum_in, WSUM_CAP * sizeof(float *))) != cudaSuccess ||
        (e = cudaMalloc(&c->wsum_w, WSUM_CAP * sizeof(double))) != cudaSuccess ||
        (e = cudaMallocHost(&c->host_result, 2 * sizeof(double))) != cudaSuccess) {
        log_line(FED_LOG_WARN, "cuda: scratch allocation failed: %s", cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? FED_ERR_NOMEM : FED_ERR_DEVICE;
    }
    /* one stream, the fixed workspace (no allocation inside a step), and
     * plain FP32 products (no TF32): results must match the CPU to 1e-4 */
    if (cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WS_BYTES) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS ||
        cublasSetPointerMode(c->blas, CUBLAS_POINTER_MODE_HOST) != CUBLAS_STATUS_SUCCESS) {
        log_line(FED_LOG_WARN, "cuda: cuBLAS setup failed on device %d", c->device);
        return FED_ERR_DEVICE;
    }
    return FED_OK;
}

/* A tiny kernel run at once: fails here, not mid-training, when this build
 * has no code for the device's architecture. */
static fed_err probe_kernels(cuda_ctx *c)
{
    cudaError_t e;

    LAUNCH(k_fill, 1, 32, c->stream)((float *)c->red_part, 0.0f, 2);
    e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        log_line(FED_LOG_WARN, "cuda: device %d cannot run this plugin's kernels: %s", c->device,
                 cudaGetErrorString(e));
        return FED_ERR_DEVICE;
    }
    return FED_OK;
}

extern "C" fed_err fed_cuda_backend_new(int device, fed_backend **out)
{
    fed_backend *be = NULL;
    cuda_ctx *c = NULL;
    cudaDeviceProp prop;
    int count = 0;
    cudaError_t e;
    fed_err err;

    *out = NULL;
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        (void)cudaGetLastError();
        log_line(FED_LOG_INFO, "cuda: no device: %s (%s)",
                 e == cudaErrorInsufficientDriver
                     ? "no NVIDIA driver, or one older than this plugin's CUDA runtime"
                 : e == cudaSuccess || e == cudaErrorNoDevice ? "the driver sees no GPU"
                                                               : "the CUDA runtime failed",
                 e != cudaSuccess ? cudaGetErrorString(e) : "device count 0");
        return FED_ERR_NODEVICE;
    }
    if (device < 0 || device >= count) {
        log_line(FED_LOG_INFO, "cuda: no device %d (%d present)", device, count);
        return FED_ERR_NODEVICE;
    }
    be = (fed_backend *)host_calloc(1, sizeof *be);
    c = (cuda_ctx *)host_calloc(1, sizeof *c);
    if (!be || !c) {
        host_free(be);
        host_free(c);
        return FED_ERR_NOMEM;
    }
    c->device = device;
    if (pthread_mutex_init(&c->result_lock, NULL) != 0) {
        err = FED_ERR_INTERNAL;
        goto out;
    }
    c->lock_ready = 1;
    if ((err = ctx_setup(c)) != FED_OK || (err = probe_kernels(c)) != FED_OK)
        goto out;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
        err = FED_ERR_DEVICE;
        goto out;
    }
    fill_table(be);
    be->ctx = c;
    snprintf(be->device, sizeof be->device, "%.80s (cuda:%d, sm_%d%d, %d SMs)", prop.name, device,
             prop.major, prop.minor, prop.multiProcessorCount);
    *out = be;
    return FED_OK;
out:
    ctx_release(c);
    host_free(be);
    return err;
}

/* compiles only while the definition has the type model/backend.c looks up */
[[maybe_unused]] static const fed_cuda_backend_new_fn entry_type_check = &fed_cuda_backend_new;
