/* test_cuda.c - the CUDA plugin (dlopen'd from $FEDNODE_PLUGIN_DIR or this
 * binary's build folder) against the CPU backend: every kernel on random
 * inputs, every layer's forward and backward through whole models, training
 * steps, 3 Fashion-MNIST epochs. Without plugin or device: says why, exits 77.
 * Closeness: max|gpu - cpu| / max|cpu| <= 1e-4 per tensor, or exact bits. */
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/train.h"

#define TOL 1e-4
#define SKIP 77

typedef struct fixture {
    fed_backend *cpu, *gpu;
    fed_cuda_backend_new_fn entry;
    char plugin_dir[PATH_MAX];
    fed_rng rng;
} fixture;

/* ------------------------------------------------------------ helpers -- */

static double max_abs(const float *x, size_t n)
{
    double m = 0.0;

    for (size_t i = 0; i < n; i++)
        if (fabs((double)x[i]) > m)
            m = fabs((double)x[i]);
    return m;
}

/* max|a - ref| / max|ref| (0 when both are all zero); NaN counts as a miss. */
static double rel_err(const float *a, const float *ref, size_t n)
{
    double worst = 0.0, scale = max_abs(ref, n);

    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);

        if (isnan(d))
            return INFINITY;
        if (d > worst)
            worst = d;
    }
    if (worst == 0.0)
        return 0.0;
    return scale > 0.0 ? worst / scale : INFINITY;
}

static void expect_close(const char *what, const float *gpu, const float *cpu, size_t n,
                         double tol)
{
    double e = rel_err(gpu, cpu, n);

    if (!(e <= tol)) {
        print_error("%s: relative error %.3g > %.1g (n = %zu)\n", what, e, tol, n);
        fail();
    }
}

static void expect_same(const char *what, const void *gpu, const void *cpu, size_t bytes)
{
    if (memcmp(gpu, cpu, bytes) != 0) {
        print_error("%s: GPU and CPU results differ in their bits\n", what);
        fail();
    }
}

static void fill_uniform(fed_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * fed_rng_uniform_f(r);
}

static float *host_floats(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);

    assert_non_null(p);
    return p;
}

/* One tensor living on both backends, with its host staging. */
typedef struct pair {
    size_t n;
    float *c, *g;  /* (n) device pointers on the CPU and GPU backends */
    float *hc, *hg; /* (n) host copies for comparison */
} pair;

static void pair_new(fixture *f, pair *p, size_t n, const float *init)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    p->hc = host_floats(n);
    p->hg = host_floats(n);
    assert_int_equal(f->cpu->alloc(f->cpu, n * sizeof(float), (void **)&p->c), FED_OK);
    assert_int_equal(f->gpu->alloc(f->gpu, n * sizeof(float), (void **)&p->g), FED_OK);
    if (init) {
        assert_int_equal(f->cpu->upload(f->cpu, p->c, init, n * sizeof(float)), FED_OK);
        assert_int_equal(f->gpu->upload(f->gpu, p->g, init, n * sizeof(float)), FED_OK);
    }
}

static void pair_random(fixture *f, pair *p, size_t n, float lo, float hi)
{
    float *h = host_floats(n);

    fill_uniform(&f->rng, h, n, lo, hi);
    pair_new(f, p, n, h);
    free(h);
}

/* Downloads both sides into hc / hg. */
static void pair_fetch(fixture *f, pair *p)
{
    assert_int_equal(f->cpu->download(f->cpu, p->hc, p->c, p->n * sizeof(float)), FED_OK);
    assert_int_equal(f->gpu->download(f->gpu, p->hg, p->g, p->n * sizeof(float)), FED_OK);
}

static void pair_close(fixture *f, pair *p, const char *what, double tol)
{
    pair_fetch(f, p);
    expect_close(what, p->hg, p->hc, p->n, tol);
}

static void pair_exact(fixture *f, pair *p, const char *what)
{
    pair_fetch(f, p);
    expect_same(what, p->hg, p->hc, p->n * sizeof(float));
}

static void pair_free(fixture *f, pair *p)
{
    f->cpu->free(f->cpu, p->c);
    f->gpu->free(f->gpu, p->g);
    free(p->hc);
    free(p->hg);
    memset(p, 0, sizeof *p);
}

/* A device buffer of raw bytes on both backends. */
static void raw_pair(fixture *f, const void *host, size_t bytes, void **c, void **g)
{
    assert_int_equal(f->cpu->alloc(f->cpu, bytes, c), FED_OK);
    assert_int_equal(f->gpu->alloc(f->gpu, bytes, g), FED_OK);
    assert_int_equal(f->cpu->upload(f->cpu, *c, host, bytes), FED_OK);
    assert_int_equal(f->gpu->upload(f->gpu, *g, host, bytes), FED_OK);
}

/* ------------------------------------------------------------- memory -- */

static void test_memory(void **state)
{
    fixture *f = *state;
    fed_backend *g = f->gpu;
    size_t n = 100003;
    float *h = host_floats(n), *back = host_floats(n);
    float *d = NULL, *e = NULL;
    void *huge = NULL;

    assert_int_equal(g->abi, FED_BACKEND_ABI);
    assert_string_equal(g->name, "cuda");
    assert_int_equal(g->alloc(g, n * sizeof(float), (void **)&d), FED_OK);
    assert_int_equal(g->alloc(g, n * sizeof(float), (void **)&e), FED_OK);
    /* alloc zeroes */
    memset(back, 0xff, n * sizeof(float));
    assert_int_equal(g->download(g, back, d, n * sizeof(float)), FED_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(back[i] == 0.0f);
    /* round trip, device copy, fill */
    fill_uniform(&f->rng, h, n, -3.0f, 3.0f);
    assert_int_equal(g->upload(g, d, h, n * sizeof(float)), FED_OK);
    g->copy(g, e, d, n);
    assert_int_equal(g->download(g, back, e, n * sizeof(float)), FED_OK);
    assert_memory_equal(back, h, n * sizeof(float));
    g->fill(g, e + 7, 2.5f, n - 10);
    g->fill(g, e, 0.0f, 3);
    assert_int_equal(g->sync(g), FED_OK);
    assert_int_equal(g->download(g, back, e, n * sizeof(float)), FED_OK);
    for (size_t i = 0; i < n; i++) {
        float want = i < 3 ? 0.0f : i >= 7 && i < n - 3 ? 2.5f : h[i];
        assert_true(back[i] == want);
    }
    /* an impossible allocation fails cleanly and leaves the backend usable */
    assert_int_equal(g->alloc(g, (size_t)1 << 52, &huge), FED_ERR_NOMEM);
    assert_null(huge);
    assert_int_equal(g->sync(g), FED_OK);
    g->fill(g, d, 1.0f, n);
    assert_int_equal(g->download(g, back, d, sizeof(float)), FED_OK);
    assert_true(back[0] == 1.0f);
    g->free(g, d);
    g->free(g, e);
    g->free(g, NULL);
    free(h);
    free(back);
}

/* --------------------------------------------------------------- GEMM -- */

static void gemm_case(fixture *f, int ta, int tb, int M, int N, int K, float alpha, float beta)
{
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    pair A, B, C;
    char what[96];

    pair_random(f, &A, na, -1.0f, 1.0f);
    pair_random(f, &B, nb, -1.0f, 1.0f);
    pair_random(f, &C, nc, -1.0f, 1.0f);
    f->cpu->gemm(f->cpu, ta, tb, M, N, K, alpha, A.c, lda, B.c, ldb, beta, C.c, ldc);
    f->gpu->gemm(f->gpu, ta, tb, M, N, K, alpha, A.g, lda, B.g, ldb, beta, C.g, ldc);
    snprintf(what, sizeof what, "gemm ta=%d tb=%d %dx%dx%d", ta, tb, M, N, K);
    pair_close(f, &C, what, TOL);
    pair_free(f, &A);
    pair_free(f, &B);
    pair_free(f, &C);
}

static void test_gemm(void **state)
{
    fixture *f = *state;

    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_case(f, ta, tb, 37, 53, 29, 1.0f, 0.0f);
            gemm_case(f, ta, tb, 64, 10, 128, 0.5f, 1.0f);
            gemm_case(f, ta, tb, 300, 257, 784, 1.0f, 0.25f);
        }
    gemm_case(f, 0, 0, 1, 1, 1, 2.0f, -1.0f);
    gemm_case(f, 0, 1, 1024, 256, 784, 1.0f, 0.0f); /* the mlp's first layer */
}

/* ------------------------------------------------------------- layers -- */

static void test_bias_act(void **state)
{
    fixture *f = *state;
    int B = 77, N = 129, C = 19, HW = 37;

    for (int relu = 0; relu < 2; relu++) {
        pair y, bias, yc, cb;

        pair_random(f, &y, (size_t)B * N, -1.0f, 1.0f);
        pair_random(f, &bias, (size_t)N, -0.5f, 0.5f);
        f->cpu->bias_act_fwd(f->cpu, y.c, bias.c, B, N, relu);
        f->gpu->bias_act_fwd(f->gpu, y.g, bias.g, B, N, relu);
        pair_exact(f, &y, relu ? "bias_act_fwd relu" : "bias_act_fwd");
        pair_random(f, &yc, (size_t)B * C * HW, -1.0f, 1.0f);
        pair_random(f, &cb, (size_t)C, -0.5f, 0.5f);
        f->cpu->chan_bias_act_fwd(f->cpu, yc.c, cb.c, B, C, HW, relu);
        f->gpu->chan_bias_act_fwd(f->gpu, yc.g, cb.g, B, C, HW, relu);
        pair_exact(f, &yc, relu ? "chan_bias_act_fwd relu" : "chan_bias_act_fwd");
        pair_free(f, &y);
        pair_free(f, &bias);
        pair_free(f, &yc);
        pair_free(f, &cb);
    }
}

static void test_relu_bias_bwd(void **state)
{
    fixture *f = *state;
    int B = 1024, N = 133, C = 32, HW = 576;
    pair dy, y, db, dyc, dbc;

    pair_random(f, &dy, (size_t)B * N, -1.0f, 1.0f);
    pair_random(f, &y, (size_t)B * N, -1.0f, 1.0f);
    f->cpu->relu_bwd(f->cpu, dy.c, y.c, dy.n);
    f->gpu->relu_bwd(f->gpu, dy.g, y.g, dy.n);
    pair_exact(f, &dy, "relu_bwd");
    for (int acc = 0; acc < 2; acc++) {
        pair_random(f, &db, (size_t)N, -1.0f, 1.0f);
        f->cpu->bias_bwd(f->cpu, db.c, dy.c, B, N, acc);
        f->gpu->bias_bwd(f->gpu, db.g, dy.g, B, N, acc);
        pair_close(f, &db, acc ? "bias_bwd accumulate" : "bias_bwd", TOL);
        pair_free(f, &db);
        pair_random(f, &dyc, (size_t)7 * C * HW, -1.0f, 1.0f);
        pair_random(f, &dbc, (size_t)C, -1.0f, 1.0f);
        f->cpu->chan_bias_bwd(f->cpu, dbc.c, dyc.c, 7, C, HW, acc);
        f->gpu->chan_bias_bwd(f->gpu, dbc.g, dyc.g, 7, C, HW, acc);
        pair_close(f, &dbc, acc ? "chan_bias_bwd accumulate" : "chan_bias_bwd", TOL);
        pair_free(f, &dyc);
        pair_free(f, &dbc);
    }
    pair_free(f, &dy);
    pair_free(f, &y);
}

static void test_u8_to_f32(void **state)
{
    fixture *f = *state;
    size_t n = 64 * 784 + 5;
    uint8_t *h = malloc(n);
    void *src_c, *src_g;
    pair dst;

    assert_non_null(h);
    fed_rng_fill(&f->rng, h, n);
    raw_pair(f, h, n, &src_c, &src_g);
    pair_new(f, &dst, n, NULL);
    f->cpu->u8_to_f32(f->cpu, dst.c, src_c, n, FED_MODEL_PIXEL_SCALE, FED_MODEL_PIXEL_SHIFT);
    f->gpu->u8_to_f32(f->gpu, dst.g, src_g, n, FED_MODEL_PIXEL_SCALE, FED_MODEL_PIXEL_SHIFT);
    pair_exact(f, &dst, "u8_to_f32");
    pair_free(f, &dst);
    f->cpu->free(f->cpu, src_c);
    f->gpu->free(f->gpu, src_g);
    free(h);
}

static void softmax_case(fixture *f, int B, int C)
{
    int32_t *labels = malloc((size_t)B * sizeof *labels);
    void *lc, *lg;
    pair z, ze;
    double loss_c = -1, loss_g = -2, eloss_c = -1, eloss_g = -2;
    int right_c = -1, right_g = -2, eright_c = -1, eright_g = -2;
    char what[64];

    assert_non_null(labels);
    for (int b = 0; b < B; b++)
        labels[b] = (int32_t)fed_rng_below(&f->rng, (uint64_t)C);
    raw_pair(f, labels, (size_t)B * sizeof *labels, &lc, &lg);
    pair_random(f, &z, (size_t)B * C, -4.0f, 4.0f);
    pair_fetch(f, &z);
    pair_new(f, &ze, z.n, z.hc);
    /* a row whose maximum ties: the first index wins on both */
    if (C > 3) {
        z.hc[2] = z.hc[3] = 100.0f;
        assert_int_equal(f->cpu->upload(f->cpu, z.c, z.hc, z.n * sizeof(float)), FED_OK);
        assert_int_equal(f->gpu->upload(f->gpu, z.g, z.hc, z.n * sizeof(float)), FED_OK);
        assert_int_equal(f->cpu->upload(f->cpu, ze.c, z.hc, z.n * sizeof(float)), FED_OK);
        assert_int_equal(f->gpu->upload(f->gpu, ze.g, z.hc, z.n * sizeof(float)), FED_OK);
    }
    f->cpu->softmax_eval(f->cpu, ze.c, lc, B, C, &eloss_c, &eright_c);
    f->gpu->softmax_eval(f->gpu, ze.g, lg, B, C, &eloss_g, &eright_g);
    f->cpu->softmax_xent(f->cpu, z.c, lc, B, C, 1.0f / (float)B, &loss_c, &right_c);
    f->gpu->softmax_xent(f->gpu, z.g, lg, B, C, 1.0f / (float)B, &loss_g, &right_g);
    snprintf(what, sizeof what, "softmax_xent %dx%d", B, C);
    pair_close(f, &z, what, TOL);
    pair_exact(f, &ze, "softmax_eval leaves logits alone");
    assert_true(fabs(loss_g - loss_c) <= TOL * fabs(loss_c));
    assert_true(fabs(eloss_g - eloss_c) <= TOL * fabs(eloss_c));
    assert_true(fabs(eloss_c - loss_c) <= 1e-12 * fabs(loss_c));
    assert_int_equal(right_g, right_c);
    assert_int_equal(eright_g, eright_c);
    /* NULL outputs are allowed */
    f->gpu->softmax_eval(f->gpu, ze.g, lg, B, C, NULL, NULL);
    f->gpu->softmax_xent(f->gpu, ze.g, lg, B, C, 1.0f, NULL, NULL);
    assert_int_equal(f->gpu->sync(f->gpu), FED_OK);
    pair_free(f, &z);
    pair_free(f, &ze);
    f->cpu->free(f->cpu, lc);
    f->gpu->free(f->gpu, lg);
    free(labels);
}

static void test_softmax(void **state)
{
    fixture *f = *state;

    softmax_case(f, 1, 2);
    softmax_case(f, 300, 10);
    softmax_case(f, 9000, 10); /* more rows than the kernel's blocks */
    softmax_case(f, 33, 1000); /* rows wider than a warp */
}

static void test_im2col_col2im(void **state)
{
    fixture *f = *state;
    const int cases[][5] = {{1, 28, 28, 5, 5}, {32, 12, 12, 5, 5}, {3, 9, 7, 3, 2}};

    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int C = cases[k][0], H = cases[k][1], W = cases[k][2], KH = cases[k][3],
            KW = cases[k][4];
        size_t ncol = (size_t)C * KH * KW * (H - KH + 1) * (W - KW + 1);
        pair x, col, dcol, dx;

        pair_random(f, &x, (size_t)C * H * W, -1.0f, 1.0f);
        pair_new(f, &col, ncol, NULL);
        f->cpu->im2col(f->cpu, x.c, C, H, W, KH, KW, col.c);
        f->gpu->im2col(f->gpu, x.g, C, H, W, KH, KW, col.g);
        pair_exact(f, &col, "im2col");
        pair_random(f, &dcol, ncol, -1.0f, 1.0f);
        pair_random(f, &dx, x.n, -1.0f, 1.0f); /* col2im accumulates */
        f->cpu->col2im(f->cpu, dcol.c, C, H, W, KH, KW, dx.c);
        f->gpu->col2im(f->gpu, dcol.g, C, H, W, KH, KW, dx.g);
        pair_exact(f, &dx, "col2im");
        pair_free(f, &x);
        pair_free(f, &col);
        pair_free(f, &dcol);
        pair_free(f, &dx);
    }
}

static void test_maxpool(void **state)
{
    fixture *f = *state;
    const int cases[][3] = {{64 * 32, 24, 24}, {5, 9, 7}, {3, 2, 2}};

    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int BC = cases[k][0], H = cases[k][1], W = cases[k][2];
        size_t ny = (size_t)BC * (H / 2) * (W / 2);
        int32_t *ac = malloc(ny * sizeof *ac), *ag = malloc(ny * sizeof *ag);
        void *arg_c, *arg_g;
        pair x, y, dy, dx;

        assert_non_null(ac);
        assert_non_null(ag);
        pair_random(f, &x, (size_t)BC * H * W, -1.0f, 1.0f);
        pair_new(f, &y, ny, NULL);
        assert_int_equal(f->cpu->alloc(f->cpu, ny * sizeof(int32_t), &arg_c), FED_OK);
        assert_int_equal(f->gpu->alloc(f->gpu, ny * sizeof(int32_t), &arg_g), FED_OK);
        f->cpu->maxpool_fwd(f->cpu, x.c, BC, H, W, y.c, arg_c);
        f->gpu->maxpool_fwd(f->gpu, x.g, BC, H, W, y.g, arg_g);
        pair_exact(f, &y, "maxpool_fwd");
        assert_int_equal(f->cpu->download(f->cpu, ac, arg_c, ny * sizeof(int32_t)), FED_OK);
        assert_int_equal(f->gpu->download(f->gpu, ag, arg_g, ny * sizeof(int32_t)), FED_OK);
        assert_memory_equal(ag, ac, ny * sizeof(int32_t));
        pair_random(f, &dy, ny, -1.0f, 1.0f);
        pair_random(f, &dx, x.n, -1.0f, 1.0f); /* overwritten, not accumulated */
        f->cpu->maxpool_bwd(f->cpu, dy.c, arg_c, BC, H, W, dx.c);
        f->gpu->maxpool_bwd(f->gpu, dy.g, arg_g, BC, H, W, dx.g);
        pair_exact(f, &dx, "maxpool_bwd");
        pair_free(f, &x);
        pair_free(f, &y);
        pair_free(f, &dy);
        pair_free(f, &dx);
        f->cpu->free(f->cpu, arg_c);
        f->gpu->free(f->gpu, arg_g);
        free(ac);
        free(ag);
    }
}

/* ------------------------------------------------ vectors, reductions -- */

static void test_axpy_scale(void **state)
{
    fixture *f = *state;
    size_t n = 1000003;
    pair x, y;

    pair_random(f, &x, n, -1.0f, 1.0f);
    pair_random(f, &y, n, -1.0f, 1.0f);
    f->cpu->axpy(f->cpu, n, -0.37f, x.c, y.c);
    f->gpu->axpy(f->gpu, n, -0.37f, x.g, y.g);
    pair_exact(f, &y, "axpy");
    f->cpu->scale(f->cpu, n, 1.7f, y.c);
    f->gpu->scale(f->gpu, n, 1.7f, y.g);
    pair_exact(f, &y, "scale");
    pair_free(f, &x);
    pair_free(f, &y);
}

static void test_dot_sumsq(void **state)
{
    fixture *f = *state;
    const size_t sizes[] = {1, 31, 1000003, 5000000};

    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        pair x, y;
        double dc, dg, dg2, sc, sg;

        pair_random(f, &x, n, -1.0f, 1.0f);
        pair_random(f, &y, n, -1.0f, 1.0f);
        dc = f->cpu->dot(f->cpu, n, x.c, y.c);
        dg = f->gpu->dot(f->gpu, n, x.g, y.g);
        dg2 = f->gpu->dot(f->gpu, n, x.g, y.g);
        sc = f->cpu->sumsq(f->cpu, n, x.c);
        sg = f->gpu->sumsq(f->gpu, n, x.g);
        /* both sum exact double products; only the order differs */
        assert_true(fabs(dg - dc) <= 1e-10 * (fabs(dc) + sqrt((double)n)));
        assert_true(fabs(sg - sc) <= 1e-11 * sc);
        assert_memory_equal(&dg, &dg2, sizeof dg); /* a fixed order: same bits */
        pair_free(f, &x);
        pair_free(f, &y);
    }
    assert_true(f->gpu->dot(f->gpu, 0, NULL, NULL) == 0.0);
}

static void wsum_case(fixture *f, int k, size_t n, int exact)
{
    pair in, out;
    const float **pc = malloc((size_t)(k ? k : 1) * sizeof *pc);
    const float **pg = malloc((size_t)(k ? k : 1) * sizeof *pg);
    double *w = malloc((size_t)(k ? k : 1) * sizeof *w);
    char what[64];

    assert_true(pc && pg && w);
    pair_random(f, &in, (size_t)(k ? k : 1) * n, -1.0f, 1.0f);
    pair_random(f, &out, n, -1.0f, 1.0f);
    for (int i = 0; i < k; i++) {
        pc[i] = in.c + (size_t)i * n;
        pg[i] = in.g + (size_t)i * n;
        w[i] = fed_rng_uniform(&f->rng) / (k ? k : 1);
    }
    f->cpu->weighted_sum(f->cpu, out.c, pc, w, k, n);
    f->gpu->weighted_sum(f->gpu, out.g, pg, w, k, n);
    snprintf(what, sizeof what, "weighted_sum k=%d n=%zu", k, n);
    if (exact)
        pair_exact(f, &out, what);
    else
        pair_close(f, &out, what, TOL);
    pair_free(f, &in);
    pair_free(f, &out);
    free(pc);
    free(pg);
    free(w);
}

static void test_weighted_sum(void **state)
{
    fixture *f = *state;

    wsum_case(f, 0, 1000, 1);
    wsum_case(f, 1, 1000, 1);
    wsum_case(f, 7, 300007, 1);
    wsum_case(f, 5000, 1000, 0); /* more inputs than one pass takes */
}

/* ---------------------------------------------------- optimizer steps -- */

static void test_sgd_prox(void **state)
{
    fixture *f = *state;
    size_t n = 200003;
    pair p, g, m, p0;

    pair_random(f, &p, n, -1.0f, 1.0f);
    pair_random(f, &g, n, -1.0f, 1.0f);
    pair_random(f, &m, n, -1.0f, 1.0f);
    pair_random(f, &p0, n, -1.0f, 1.0f);
    f->cpu->prox_grad(f->cpu, g.c, p.c, p0.c, n, 0.01f);
    f->gpu->prox_grad(f->gpu, g.g, p.g, p0.g, n, 0.01f);
    pair_exact(f, &g, "prox_grad");
    f->cpu->sgd_step(f->cpu, p.c, g.c, NULL, n, 0.1f, 0.0f, 1e-4f, 0);
    f->gpu->sgd_step(f->gpu, p.g, g.g, NULL, n, 0.1f, 0.0f, 1e-4f, 0);
    pair_exact(f, &p, "sgd plain p");
    /* g is scratch for sgd_step (its contents after are unspecified): set
     * it again on both sides before each step */
    for (int nest = 0; nest < 2; nest++) {
        pair_fetch(f, &g);
        assert_int_equal(f->gpu->upload(f->gpu, g.g, g.hc, n * sizeof(float)), FED_OK);
        f->cpu->sgd_step(f->cpu, p.c, g.c, m.c, n, 0.05f, 0.9f, 5e-4f, nest);
        f->gpu->sgd_step(f->gpu, p.g, g.g, m.g, n, 0.05f, 0.9f, 5e-4f, nest);
        pair_exact(f, &p, "sgd momentum p");
        pair_exact(f, &m, "sgd momentum m");
    }
    pair_free(f, &p);
    pair_free(f, &g);
    pair_free(f, &m);
    pair_free(f, &p0);
}

static void test_adam(void **state)
{
    fixture *f = *state;
    size_t n = 200003;
    pair p, g, m, v;

    pair_random(f, &p, n, -1.0f, 1.0f);
    pair_random(f, &g, n, -1.0f, 1.0f);
    pair_new(f, &m, n, NULL);
    pair_new(f, &v, n, NULL);
    for (long t = 1; t <= 4; t++) {
        float wd = t & 1 ? 0.0f : 0.01f;

        f->cpu->adam_step(f->cpu, p.c, g.c, m.c, v.c, n, 1e-3f, 0.9f, 0.999f, 1e-8f, wd, t);
        f->gpu->adam_step(f->gpu, p.g, g.g, m.g, v.g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, wd, t);
    }
    pair_close(f, &p, "adam p", 1e-6);
    pair_close(f, &m, "adam m", 1e-6);
    pair_close(f, &v, "adam v", 1e-6);
    pair_free(f, &p);
    pair_free(f, &g);
    pair_free(f, &m);
    pair_free(f, &v);
}

/* ------------------------------------------------------------- models -- */

typedef struct model_pair {
    fed_model *c, *g;
    size_t np;
    float *hc, *hg; /* (np) host staging */
} model_pair;

static void models_new(fixture *f, model_pair *mp, const char *spec, fed_model_shape in,
                       int max_batch)
{
    fed_rng init;

    memset(mp, 0, sizeof *mp);
    assert_int_equal(fed_model_new(spec, in, f->cpu, NULL, 1, max_batch, &mp->c), FED_OK);
    assert_int_equal(fed_model_new(spec, in, f->gpu, NULL, 1, max_batch, &mp->g), FED_OK);
    mp->np = fed_model_nparams(mp->c);
    assert_int_equal(fed_model_nparams(mp->g), mp->np);
    mp->hc = host_floats(mp->np);
    mp->hg = host_floats(mp->np);
    fed_rng_seed(&init, 42);
    assert_int_equal(fed_model_init(mp->c, &init), FED_OK);
    assert_int_equal(fed_model_get_params(mp->c, mp->hc), FED_OK);
    assert_int_equal(fed_model_set_params(mp->g, mp->hc), FED_OK);
}

static void models_free(model_pair *mp)
{
    fed_model_free(mp->c);
    fed_model_free(mp->g);
    free(mp->hc);
    free(mp->hg);
}

/* Compares a flat buffer tensor by tensor (params != 0 the parameters,
 * else the gradients); returns 1 when every tensor is within tol, else
 * prints the worst and returns 0. */
static int models_compare(model_pair *mp, int params, const char *when, double tol)
{
    int nt, ok = 1;
    const fed_tensor_info *t = fed_model_tensors(mp->c, &nt);

    if (params) {
        assert_int_equal(fed_model_get_params(mp->c, mp->hc), FED_OK);
        assert_int_equal(fed_model_get_params(mp->g, mp->hg), FED_OK);
    } else {
        fed_backend *bc = fed_model_backend(mp->c), *bg = fed_model_backend(mp->g);

        assert_int_equal(bc->download(bc, mp->hc, fed_model_grads_dev(mp->c),
                                      mp->np * sizeof(float)), FED_OK);
        assert_int_equal(bg->download(bg, mp->hg, fed_model_grads_dev(mp->g),
                                      mp->np * sizeof(float)), FED_OK);
    }
    for (int i = 0; i < nt; i++) {
        double e = rel_err(mp->hg + t[i].offset, mp->hc + t[i].offset, t[i].numel);

        if (!(e <= tol)) {
            printf("  %s %s %s: relative error %.3g > %.1g\n", fed_model_spec(mp->c), when,
                   t[i].name, e, tol);
            ok = 0;
        }
    }
    return ok;
}

typedef struct host_batch {
    uint8_t *x;
    int32_t *y;
    fed_batch b;
} host_batch;

static void batch_new(fixture *f, host_batch *hb, int n, fed_model_shape in)
{
    size_t feat = (size_t)in.c * in.h * in.w;

    hb->x = malloc((size_t)n * feat);
    hb->y = malloc((size_t)n * sizeof *hb->y);
    assert_true(hb->x && hb->y);
    fed_rng_fill(&f->rng, hb->x, (size_t)n * feat);
    for (int i = 0; i < n; i++)
        hb->y[i] = (int32_t)fed_rng_below(&f->rng, (uint64_t)in.classes);
    hb->b = (fed_batch){.n = n, .x_u8 = hb->x, .y = hb->y};
}

static void batch_free(host_batch *hb)
{
    free(hb->x);
    free(hb->y);
}

static void expect_stats(const fed_step_stats *g, const fed_step_stats *c, const char *what)
{
    if (!(fabs(g->loss_sum - c->loss_sum) <= TOL * fabs(c->loss_sum))) {
        print_error("%s: loss %.9g on the GPU, %.9g on the CPU\n", what, g->loss_sum, c->loss_sum);
        fail();
    }
    /* a near-tie of two logits may resolve differently: one sample at most */
    assert_true(labs(g->correct - c->correct) <= 1);
    assert_int_equal(g->samples, c->samples);
}

/* Forward (the loss) and backward (every tensor's gradient) of one random
 * batch; returns 1 when the gradients agree. */
static int fwd_bwd_case(fixture *f, const char *spec, int n)
{
    fed_model_shape in = {1, 28, 28, 10, 0};
    model_pair mp;
    host_batch hb;
    fed_step_stats sc = {0}, sg = {0}, ec = {0}, eg = {0};
    float *first = NULL;
    int ok;

    models_new(f, &mp, spec, in, n);
    batch_new(f, &hb, n, in);
    assert_int_equal(fed_model_evaluate(mp.c, &hb.b, &ec), FED_OK);
    assert_int_equal(fed_model_evaluate(mp.g, &hb.b, &eg), FED_OK);
    expect_stats(&eg, &ec, "evaluate");
    assert_int_equal(fed_model_forward_backward(mp.c, &hb.b, &sc), FED_OK);
    assert_int_equal(fed_model_forward_backward(mp.g, &hb.b, &sg), FED_OK);
    expect_stats(&sg, &sc, "forward_backward");
    ok = models_compare(&mp, 0, "gradient", TOL);
    /* the same batch again gives the same bits on the GPU */
    first = host_floats(mp.np);
    memcpy(first, mp.hg, mp.np * sizeof(float));
    assert_int_equal(fed_model_forward_backward(mp.g, &hb.b, NULL), FED_OK);
    (void)models_compare(&mp, 0, "gradient", INFINITY);
    assert_memory_equal(first, mp.hg, mp.np * sizeof(float));
    free(first);
    batch_free(&hb);
    models_free(&mp);
    return ok;
}

/* Whole training steps: forward, backward and the optimizer (with
 * FedProx's term), three times, then the parameters compared; returns 1
 * when they agree. */
static int train_steps_case(fixture *f, const char *spec, int n, fed_optim_kind kind)
{
    fed_model_shape in = {1, 28, 28, 10, 0};
    model_pair mp;
    fed_optim_cfg cfg;
    fed_optim *oc = NULL, *og = NULL;
    int ok;

    models_new(f, &mp, spec, in, n);
    fed_optim_cfg_default(&cfg, kind);
    cfg.weight_decay = 5e-4f;
    if (kind == FED_OPTIM_SGD)
        cfg.nesterov = 1;
    /* Adam's first steps move every weight by about lr * sign(g): a
     * gradient within rounding of zero may take either sign on either
     * backend and move a weight by 2 lr. eps = 1e-3 keeps such weights
     * still, so the comparison sees the kernels, not that amplification
     * (the Adam kernel itself is compared on its own above). */
    if (kind == FED_OPTIM_ADAM) {
        cfg.eps = 1e-3f;
        cfg.lr = 1e-3f; /* the rate TOL was set for (the default is now 0.002) */
    }
    cfg.prox_mu = 0.01f;
    assert_int_equal(fed_optim_new(&cfg, mp.c, &oc), FED_OK);
    assert_int_equal(fed_optim_new(&cfg, mp.g, &og), FED_OK);
    assert_int_equal(fed_optim_set_anchor(oc, mp.c), FED_OK);
    assert_int_equal(fed_optim_set_anchor(og, mp.g), FED_OK);
    for (int step = 0; step < 3; step++) {
        host_batch hb;
        fed_step_stats sc = {0}, sg = {0};

        batch_new(f, &hb, n, in);
        assert_int_equal(fed_model_forward_backward(mp.c, &hb.b, &sc), FED_OK);
        assert_int_equal(fed_model_forward_backward(mp.g, &hb.b, &sg), FED_OK);
        expect_stats(&sg, &sc, "training step");
        assert_int_equal(fed_optim_step(oc, mp.c), FED_OK);
        assert_int_equal(fed_optim_step(og, mp.g), FED_OK);
        batch_free(&hb);
    }
    ok = models_compare(&mp, 1, kind == FED_OPTIM_SGD ? "after 3 SGD steps" : "after 3 Adam steps",
                        TOL);
    fed_optim_free(oc);
    fed_optim_free(og);
    models_free(&mp);
    return ok;
}

/* A pre-activation within rounding of 0, or a max-pool window whose two
 * largest inputs are that close, can fall either way on the two backends
 * and send one sample's gradient down another path: rare (about 1e-7 per
 * activation at these sizes) but then far beyond 1e-4. Such a case is run
 * once more on a fresh batch; a real kernel error fails both. */
#define EXPECT_MODELS_AGREE(call)                                                           \
    do {                                                                                    \
        if (!(call)) {                                                                      \
            printf("  (retrying %s on a fresh batch: a ReLU or max-pool decision may have " \
                   "fallen differently)\n",                                                 \
                   #call);                                                                  \
            assert_true(call);                                                              \
        }                                                                                   \
    } while (0)

static void test_model_logreg(void **state)
{
    EXPECT_MODELS_AGREE(fwd_bwd_case(*state, "logreg", 64));
}

static void test_model_mlp(void **state)
{
    fixture *f = *state;

    EXPECT_MODELS_AGREE(fwd_bwd_case(f, "mlp:256,128", 64));
    EXPECT_MODELS_AGREE(fwd_bwd_case(f, "mlp:256,128", 1));
    EXPECT_MODELS_AGREE(fwd_bwd_case(f, "mlp:256,128", 300));
}

static void test_model_cnn(void **state)
{
    fixture *f = *state;

    EXPECT_MODELS_AGREE(fwd_bwd_case(f, "cnn", 9));
    EXPECT_MODELS_AGREE(fwd_bwd_case(f, "cnn", 2));
}

static void test_train_step_mlp(void **state)
{
    EXPECT_MODELS_AGREE(train_steps_case(*state, "mlp:256,128", 64, FED_OPTIM_SGD));
    EXPECT_MODELS_AGREE(train_steps_case(*state, "mlp:256,128", 64, FED_OPTIM_ADAM));
}

static void test_train_step_cnn(void **state)
{
    EXPECT_MODELS_AGREE(train_steps_case(*state, "cnn", 8, FED_OPTIM_SGD));
    EXPECT_MODELS_AGREE(train_steps_case(*state, "cnn", 8, FED_OPTIM_ADAM));
}

/* 3 epochs of mlp:256,128 at batch 64 on each backend from the same start
 * and in the same batch order; test accuracies within 0.5 points. */
static double train_fashion(fed_backend *be, const fed_dataset *tr, const fed_dataset *te,
                            double *train_loss)
{
    fed_model *m = NULL;
    fed_optim *o = NULL;
    fed_trainer *t = NULL;
    fed_optim_cfg cfg;
    fed_rng init, order;
    fed_step_stats st = {0};
    uint32_t *idx = malloc(tr->n * sizeof *idx);

    assert_non_null(idx);
    for (size_t i = 0; i < tr->n; i++)
        idx[i] = (uint32_t)i;
    assert_int_equal(fed_model_new("mlp:256,128", tr->shape, be, NULL, 1, 64, &m), FED_OK);
    fed_rng_seed(&init, 7);
    assert_int_equal(fed_model_init(m, &init), FED_OK);
    /* SGD with momentum (the defaults), the rate falling to 0 over the 3
     * epochs (cosine): the two runs drift apart by rounding, and an
     * annealed end leaves less of that drift in the final accuracy */
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.sched = FED_SCHED_COSINE;
    cfg.total_steps = 3 * fed_train_batches(tr->n, 64);
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    assert_int_equal(fed_trainer_new(m, o, tr, 64, &t), FED_OK);
    fed_rng_seed(&order, 11);
    for (int e = 0; e < 3; e++) {
        memset(&st, 0, sizeof st);
        assert_int_equal(fed_trainer_epoch(t, idx, tr->n, &order, &st), FED_OK);
    }
    *train_loss = st.loss_sum / (double)st.samples;
    memset(&st, 0, sizeof st);
    assert_int_equal(fed_train_evaluate_all(m, te, &st), FED_OK);
    fed_trainer_free(t);
    fed_optim_free(o);
    fed_model_free(m);
    free(idx);
    return 100.0 * (double)st.correct / (double)st.samples;
}

static void test_fashion_mnist_epochs(void **state)
{
    fixture *f = *state;
    fed_dataset *tr = NULL, *te = NULL;
    double acc_c, acc_g, loss_c, loss_g;
    const char *quick = getenv("FEDNODE_CUDA_QUICK");

    if (quick && *quick && strcmp(quick, "0") != 0) {
        printf("skipped: 3 Fashion-MNIST epochs (FEDNODE_CUDA_QUICK is set)\n");
        skip();
    }
    if (fed_data_open("fashion-mnist", 1, &tr) != FED_OK ||
        fed_data_open("fashion-mnist", 0, &te) != FED_OK) {
        fed_data_free(tr);
        printf("skipped: 3 Fashion-MNIST epochs (no data at $FEDNODE_DATA or %s)\n",
               FED_DATA_DEFAULT_DIR);
        skip();
    }
    acc_g = train_fashion(f->gpu, tr, te, &loss_g);
    acc_c = train_fashion(f->cpu, tr, te, &loss_c);
    printf("fashion-mnist mlp:256,128, 3 epochs, batch 64, SGD cosine: test accuracy %.2f%% on %s, "
           "%.2f%% on the CPU (train loss %.4f vs %.4f)\n",
           acc_g, f->gpu->device, acc_c, loss_g, loss_c);
    assert_true(fabs(acc_g - acc_c) <= 0.5);
    assert_true(acc_c > 80.0);
    fed_data_free(tr);
    fed_data_free(te);
}

/* The plugin has no embedding kernels: a graph with an embedding is
 * refused on it (backend_fits names the layer), and runs on the CPU. */
static void test_embedding_refused(void **state)
{
    fixture *f = *state;
    fed_model *m = (fed_model *)1;
    fed_model_shape in = {1, 1, 3, 2, 0};

    assert_false(f->gpu->caps & FED_BACKEND_CAP_EMBED);
    assert_int_equal(fed_model_new("g:e=E4n8c0,L", in, f->gpu, NULL, 1, 4, &m),
                     FED_ERR_UNSUPPORTED);
    assert_null(m);
    assert_int_equal(fed_model_new("g:e=E4n8c0,L", in, f->cpu, NULL, 1, 4, &m), FED_OK);
    fed_model_free(m);
}

/* ------------------------------------------------------- the loader -- */

/* fed_backend_open finds the same plugin through $FEDNODE_PLUGIN_DIR. */
static void test_backend_open(void **state)
{
    fixture *f = *state;
    fed_backend *be = NULL;

    assert_int_equal(setenv("FEDNODE_PLUGIN_DIR", f->plugin_dir, 1), 0);
    assert_int_equal(fed_backend_open("cuda", &be), FED_OK);
    assert_string_equal(be->name, "cuda");
    fed_backend_free(be);
    be = NULL;
    assert_int_equal(fed_backend_open("auto", &be), FED_OK);
    assert_string_equal(be->name, "cuda");
    fed_backend_free(be);
    be = NULL;
    assert_int_equal(fed_backend_open("cuda:1000", &be), FED_ERR_NODEVICE);
    assert_null(be);
    assert_int_equal(f->entry(-1, &be), FED_ERR_NODEVICE);
    assert_null(be);
}

/* ---------------------------------------------------- setup and main -- */

/* Keeps the last log line, for the skip message. */
static void keep_line(void *ctx, fed_log_level level, const char *line)
{
    (void)level;
    snprintf(ctx, 256, "%s", line);
}

static int try_dir(const char *dir, fixture *f, char *why, size_t why_len)
{
    char path[PATH_MAX];
    void *h;

    if (snprintf(path, sizeof path, "%s/libfedcuda.so", dir) >= (int)sizeof path)
        return 0;
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        size_t used = strlen(why);

        snprintf(why + used, why_len - used, "%s%s", used ? "; " : "", dlerror());
        return 0;
    }
    *(void **)&f->entry = dlsym(h, FED_CUDA_ENTRY);
    if (!f->entry) {
        snprintf(why, why_len, "%.900s has no %s", path, FED_CUDA_ENTRY);
        return 0;
    }
    snprintf(f->plugin_dir, sizeof f->plugin_dir, "%s", dir);
    return 1;
}

/* $FEDNODE_PLUGIN_DIR, else the build folder above this binary, else build/. */
static int load_plugin(fixture *f, char *why, size_t why_len)
{
    const char *env = getenv("FEDNODE_PLUGIN_DIR");
    char exe[PATH_MAX];
    ssize_t len;

    why[0] = '\0';
    if (env && *env)
        return try_dir(env, f, why, why_len);
    len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        char *slash;

        exe[len] = '\0';
        if ((slash = strrchr(exe, '/')) != NULL) {
            *slash = '\0';
            if ((slash = strrchr(exe, '/')) != NULL) {
                *slash = '\0';
                if (try_dir(exe, f, why, why_len))
                    return 1;
            }
        }
    }
    return try_dir("build", f, why, why_len);
}

/* FEDNODE_CUDA_QUICK=1 leaves out the epochs; FEDNODE_CUDA_FILTER=PATTERN
 * runs the matching tests only, FEDNODE_CUDA_SKIP=PATTERN all but those
 * (cmocka's * and ?). */
int main(void)
{
    fixture fx;
    char why[1024], last[256] = "";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_memory, &fx),
        cmocka_unit_test_prestate(test_gemm, &fx),
        cmocka_unit_test_prestate(test_bias_act, &fx),
        cmocka_unit_test_prestate(test_relu_bias_bwd, &fx),
        cmocka_unit_test_prestate(test_u8_to_f32, &fx),
        cmocka_unit_test_prestate(test_softmax, &fx),
        cmocka_unit_test_prestate(test_im2col_col2im, &fx),
        cmocka_unit_test_prestate(test_maxpool, &fx),
        cmocka_unit_test_prestate(test_axpy_scale, &fx),
        cmocka_unit_test_prestate(test_dot_sumsq, &fx),
        cmocka_unit_test_prestate(test_weighted_sum, &fx),
        cmocka_unit_test_prestate(test_sgd_prox, &fx),
        cmocka_unit_test_prestate(test_adam, &fx),
        cmocka_unit_test_prestate(test_model_logreg, &fx),
        cmocka_unit_test_prestate(test_model_mlp, &fx),
        cmocka_unit_test_prestate(test_model_cnn, &fx),
        cmocka_unit_test_prestate(test_train_step_mlp, &fx),
        cmocka_unit_test_prestate(test_train_step_cnn, &fx),
        cmocka_unit_test_prestate(test_backend_open, &fx),
        cmocka_unit_test_prestate(test_embedding_refused, &fx),
        cmocka_unit_test_prestate(test_fashion_mnist_epochs, &fx),
    };
    fed_err err;
    fed_log_level level;
    int failed;

    memset(&fx, 0, sizeof fx);
    fed_rng_seed(&fx.rng, 2024);
    if (!load_plugin(&fx, why, sizeof why)) {
        printf("test_cuda: skipped: no CUDA device (plugin libfedcuda.so did not load: %s)\n",
               why);
        return SKIP;
    }
    level = fed_log_get_level();
    fed_log_set_sink(keep_line, last);
    fed_log_set_level(FED_LOG_INFO);
    err = fx.entry(0, &fx.gpu);
    fed_log_set_sink(NULL, NULL);
    fed_log_set_level(level);
    if (err == FED_ERR_NODEVICE) {
        printf("test_cuda: skipped: no CUDA device (%s; plugin from %s)\n",
               last[0] ? last : fed_strerror(err), fx.plugin_dir);
        return SKIP;
    }
    if (err != FED_OK) {
        printf("test_cuda: the CUDA device failed to open: %s (%s)\n", fed_errname(err), last);
        return 1;
    }
    if (fed_backend_cpu_new(1, &fx.cpu) != FED_OK) {
        fed_backend_free(fx.gpu);
        return 1;
    }
    printf("test_cuda: %s against the CPU backend\n", fx.gpu->device);
    if (getenv("FEDNODE_CUDA_FILTER"))
        cmocka_set_test_filter(getenv("FEDNODE_CUDA_FILTER"));
    if (getenv("FEDNODE_CUDA_SKIP"))
        cmocka_set_skip_filter(getenv("FEDNODE_CUDA_SKIP"));
    failed = cmocka_run_group_tests(tests, NULL, NULL);
    fed_backend_free(fx.cpu);
    fed_backend_free(fx.gpu);
    return failed;
}
