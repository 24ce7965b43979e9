/* test_model.c - the model module: specs and layouts, initialization,
 * gradients of every layer and the loss against central differences of an
 * independent double-precision reference (see grad_check), determinism
 * across runs and shard counts, the trainer, the model file, and
 * allocation failures. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
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
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/io.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/train.h"
#include "tests/support/support.h"

/* ------------------------------------------------- double reference -- */

/* Records the kink pattern of a forward pass: ReLU signs and pool winners. */
typedef struct pattern {
    int *v;
    size_t n, cap;
} pattern;

static void pat_push(pattern *p, int v)
{
    if (!p)
        return;
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 4096;
        p->v = realloc(p->v, p->cap * sizeof *p->v);
        assert_non_null(p->v);
    }
    p->v[p->n++] = v;
}

/* Mean cross-entropy of the batch under params P (double), the network
 * being read off the tensor list: a 4-d weight is conv + ReLU + pool 2, a
 * 2-d weight linear (+ ReLU unless it is the last). */
static double ref_loss(const fed_model *m, const double *P, const double *X, const int32_t *Y,
                       int n, pattern *pat)
{
    int nt;
    const fed_tensor_info *t = fed_model_tensors(m, &nt);
    fed_model_shape in = fed_model_input(m);
    size_t maxn = 1 << 16;
    double *a = malloc(maxn * sizeof *a), *b = malloc(maxn * sizeof *b);
    double loss = 0.0;

    assert_non_null(a);
    assert_non_null(b);
    for (int s = 0; s < n; s++) {
        int c = in.c, h = in.h, w = in.w, F = c * h * w;

        memcpy(a, X + (size_t)s * F, (size_t)F * sizeof *a);
        for (int ti = 0; ti < nt; ti += 2) {
            const fed_tensor_info *wt = &t[ti], *bt = &t[ti + 1];
            const double *W = P + wt->offset, *B = P + bt->offset;

            if (wt->ndim == 4) {
                int oc = wt->shape[0], k = wt->shape[2], oh = h - k + 1, ow = w - k + 1;

                for (int o = 0; o < oc; o++)
                    for (int i = 0; i < oh; i++)
                        for (int j = 0; j < ow; j++) {
                            double z = B[o];

                            for (int ci = 0; ci < c; ci++)
                                for (int ki = 0; ki < k; ki++)
                                    for (int kj = 0; kj < k; kj++)
                                        z += W[((o * c + ci) * k + ki) * k + kj] *
                                             a[(ci * h + i + ki) * w + j + kj];
                            pat_push(pat, z > 0);
                            b[(o * oh + i) * ow + j] = z > 0 ? z : 0;
                        }
                /* max pool 2x2 */
                c = oc;
                h = oh / 2;
                w = ow / 2;
                for (int o = 0; o < c; o++)
                    for (int i = 0; i < h; i++)
                        for (int j = 0; j < w; j++) {
                            const double *pl = b + (size_t)o * oh * ow;
                            int best = 2 * i * ow + 2 * j;
                            int cand[3] = {best + 1, best + ow, best + ow + 1};

                            for (int q = 0; q < 3; q++)
                                if (pl[cand[q]] > pl[best])
                                    best = cand[q];
                            /* ties at a positive value would be kinks too */
                            pat_push(pat, pl[best] > 0 ? best : -1);
                            a[(o * h + i) * w + j] = pl[best];
                        }
            } else {
                int out = wt->shape[0], inn = wt->shape[1], last = ti + 2 >= nt;

                for (int o = 0; o < out; o++) {
                    double z = B[o];

                    for (int i = 0; i < inn; i++)
                        z += W[(size_t)o * inn + i] * a[i];
                    if (!last)
                        pat_push(pat, z > 0);
                    b[o] = last || z > 0 ? z : 0;
                }
                memcpy(a, b, (size_t)out * sizeof *a);
                c = out;
                h = w = 1;
            }
        }
        {
            double mx = a[0], sum = 0.0;

            for (int j = 1; j < in.classes; j++)
                mx = a[j] > mx ? a[j] : mx;
            for (int j = 0; j < in.classes; j++)
                sum += exp(a[j] - mx);
            loss += log(sum) + mx - a[Y[s]];
        }
    }
    free(a);
    free(b);
    return loss / n;
}

/* --------------------------------------------------------- fixtures -- */

typedef fed_test_world world;

static int world_setup(void **state) { return fed_test_world_new(state, 1); }
static int world_teardown(void **state) { return fed_test_world_free(state); }

static fed_model *make_model(world *w, const char *spec, fed_model_shape in, int shards,
                             int max_batch, uint64_t seed)
{
    fed_model *m = NULL;
    fed_rng rng;

    assert_int_equal(fed_model_new(spec, in, w->be, w->pool, shards, max_batch, &m), FED_OK);
    fed_rng_seed(&rng, seed);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    return m;
}

static void random_batch(fed_rng *rng, int n, fed_model_shape in, float *x, int32_t *y)
{
    int F = in.c * in.h * in.w;

    for (int i = 0; i < n * F; i++)
        x[i] = (float)fed_rng_normal(rng);
    for (int i = 0; i < n; i++)
        y[i] = (int32_t)fed_rng_below(rng, (uint64_t)in.classes);
}

/* ---------------------------------------------------- gradient check -- */
/* The test holds its own forward pass in double (ref_loss: direct
 * convolution loops, no im2col, no BLAS) over the same flat layout. The
 * analytic gradient comes from the model (float); the numeric one from
 * central differences of the double reference at h = 1e-6. A coordinate
 * whose +-h evaluation flips any ReLU sign or max-pool winner is skipped (it
 * sits on a kink; fewer than 5% may be); the rest must agree with norm-wise
 * relative error ||g - g_num|| / ||g_num|| < 1e-4 per tensor. */

static int same_pattern(const pattern *a, const pattern *b)
{
    return a->n == b->n && (a->n == 0 || !memcmp(a->v, b->v, a->n * sizeof *a->v));
}

static void grad_check(world *w, const char *spec, fed_model_shape in, int n, int shards,
                       int per_tensor)
{
    fed_model *m = make_model(w, spec, in, shards, n, 42);
    size_t np = fed_model_nparams(m);
    int F = in.c * in.h * in.w, nt;
    const fed_tensor_info *t = fed_model_tensors(m, &nt);
    float *pf = malloc(np * sizeof *pf), *g = malloc(np * sizeof *g), *x = malloc(n * F * 4);
    double *P = malloc(np * sizeof *P), *X = malloc((size_t)n * F * sizeof *X);
    int32_t *y = malloc(n * sizeof *y);
    fed_rng rng;
    fed_step_stats st = {0};
    pattern base = {0}, probe = {0};
    const double h = 1e-6;
    long skipped = 0, checked = 0;
    double loss0;

    fed_rng_seed(&rng, 7);
    random_batch(&rng, n, in, x, y);
    for (int i = 0; i < n * F; i++)
        X[i] = x[i];
    assert_int_equal(fed_model_get_params(m, pf), FED_OK);
    for (size_t i = 0; i < np; i++)
        P[i] = pf[i];
    fed_batch b = {.n = n, .x_f32 = x, .y = y};
    assert_int_equal(fed_model_forward_backward(m, &b, &st), FED_OK);
    assert_int_equal(st.samples, n);
    assert_int_equal(w->be->sync(w->be), FED_OK);
    memcpy(g, fed_model_grads_dev(m), np * sizeof *g);

    loss0 = ref_loss(m, P, X, y, n, &base);
    /* the float forward computes the same function */
    assert_true(fabs(st.loss_sum / n - loss0) < 1e-5 * (1.0 + fabs(loss0)));

    for (int ti = 0; ti < nt; ti++) {
        double num2 = 0.0, diff2 = 0.0;
        size_t numel = t[ti].numel;
        int count = per_tensor <= 0 || (size_t)per_tensor >= numel ? (int)numel : per_tensor;

        for (int k = 0; k < count; k++) {
            size_t i = t[ti].offset +
                       (count == (int)numel ? (size_t)k : (size_t)fed_rng_below(&rng, numel));
            double keep = P[i], lp, lm, num;
            int kink;

            P[i] = keep + h;
            probe.n = 0;
            lp = ref_loss(m, P, X, y, n, &probe);
            kink = !same_pattern(&base, &probe);
            P[i] = keep - h;
            probe.n = 0;
            lm = ref_loss(m, P, X, y, n, &probe);
            kink |= !same_pattern(&base, &probe);
            P[i] = keep;
            if (kink) {
                skipped++;
                continue;
            }
            checked++;
            num = (lp - lm) / (2 * h);
            num2 += num * num;
            diff2 += (num - g[i]) * (num - g[i]);
        }
        if (num2 > 0.0) {
            double rel = sqrt(diff2 / num2);

            if (rel >= 1e-4)
                fail_msg("%s shards %d tensor %s: relative error %g", spec, shards,
                         t[ti].name, rel);
        }
    }
    /* the check must have looked at nearly everything */
    assert_true(checked > 0);
    assert_true(skipped * 20 < checked);
    free(base.v);
    free(probe.v);
    free(pf);
    free(g);
    free(x);
    free(P);
    free(X);
    free(y);
    fed_model_free(m);
}

static void test_grad_logreg(void **state)
{
    fed_model_shape in = {1, 3, 5, 4, 0};

    grad_check(*state, "logreg", in, 5, 1, 0);
    grad_check(*state, "logreg", in, 5, 2, 0);
}

static void test_grad_mlp(void **state)
{
    fed_model_shape in = {2, 3, 3, 5, 0};

    grad_check(*state, "mlp:9,7", in, 4, 1, 0);
    grad_check(*state, "mlp:9,7", in, 4, 3, 0);
    grad_check(*state, "mlp:6", in, 3, 2, 0);
}

static void test_grad_cnn(void **state)
{
    /* 16 -> 12 -> 6 -> 2 -> 1: every layer of the cnn at a small size; two
     * input channels so conv1 sums over channels too. */
    fed_model_shape in = {2, 16, 16, 5, 0};

    grad_check(*state, "cnn", in, 3, 1, 60);
    grad_check(*state, "cnn", in, 3, 2, 60);
}

static void test_grad_cnn_18(void **state)
{
    /* 18 -> 14 -> 7 (odd, pool floors) -> 3 -> 1 */
    fed_model_shape in = {1, 18, 18, 3, 0};

    grad_check(*state, "cnn", in, 2, 2, 40);
}

/* ------------------------------------------------ specs and layouts -- */

static void test_spec_mlp_layout(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 28, 28, 10, 0};
    fed_model *m = NULL;
    int nt;
    const fed_tensor_info *t;
    static const char *names[] = {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight",
                                  "4.bias"};
    static const int shapes[][2] = {{256, 784}, {256, 0}, {128, 256}, {128, 0}, {10, 128}, {10, 0}};
    size_t off = 0;

    assert_int_equal(fed_model_new("mlp:256,128", in, w->be, w->pool, 2, 64, &m), FED_OK);
    t = fed_model_tensors(m, &nt);
    assert_int_equal(nt, 6);
    for (int i = 0; i < nt; i++) {
        assert_string_equal(t[i].name, names[i]);
        assert_int_equal(t[i].ndim, shapes[i][1] ? 2 : 1);
        assert_int_equal(t[i].shape[0], shapes[i][0]);
        if (shapes[i][1])
            assert_int_equal(t[i].shape[1], shapes[i][1]);
        assert_int_equal(t[i].offset, off);
        off += t[i].numel;
    }
    assert_int_equal(fed_model_nparams(m), off);
    assert_int_equal(off, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
    assert_string_equal(fed_model_spec(m), "mlp:256,128");
    /* forward + weight gradient everywhere, input gradient but for layer 0 */
    assert_true(fabs(fed_model_flops_per_sample(m) - 2.0 * (2 * 200704 + 3 * 32768 + 3 * 1280)) <
                1.0);
    fed_model_free(m);
}

static void test_spec_cnn_layout(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 28, 28, 10, 0};
    fed_model *m = NULL;
    int nt;
    const fed_tensor_info *t;
    static const char *names[] = {"0.weight", "0.bias", "3.weight", "3.bias",
                                  "7.weight", "7.bias", "9.weight", "9.bias"};

    assert_int_equal(fed_model_new("cnn", in, w->be, NULL, 1, 8, &m), FED_OK);
    t = fed_model_tensors(m, &nt);
    assert_int_equal(nt, 8);
    for (int i = 0; i < nt; i++)
        assert_string_equal(t[i].name, names[i]);
    assert_int_equal(t[0].ndim, 4);
    assert_int_equal(t[0].shape[0], 32);
    assert_int_equal(t[0].shape[1], 1);
    assert_int_equal(t[0].shape[2], 5);
    assert_int_equal(t[0].shape[3], 5);
    assert_int_equal(t[2].shape[0], 64);
    assert_int_equal(t[2].shape[1], 32);
    assert_int_equal(t[4].shape[0], 512);
    assert_int_equal(t[4].shape[1], 64 * 4 * 4);
    assert_int_equal(t[6].shape[0], 10);
    assert_int_equal(t[6].shape[1], 512);
    assert_int_equal(fed_model_nparams(m),
                     32 * 25 + 32 + 64 * 32 * 25 + 64 + 512 * 1024 + 512 + 5120 + 10);
    fed_model_free(m);
}

static void test_spec_errors(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 28, 28, 10, 0}, tiny = {1, 8, 8, 10, 0}, csv = {1, 1, 20, 3, 0};
    fed_model *m = (fed_model *)1;
    static const char *bad[] = {"", "mlp", "mlp:", "mlp:0", "mlp:12,", "mlp:,3", "mlp:3,,4",
                                "mlp:-3", "mlp:3x", "MLP:3", "logreg ", "cnn2", "mlp:99999999",
                                "mlp:1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16"};

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(fed_model_spec_check(bad[i], in), FED_ERR_SPEC);
    assert_int_equal(fed_model_spec_check("cnn", tiny), FED_ERR_SHAPE);
    assert_int_equal(fed_model_spec_check("cnn", csv), FED_ERR_SHAPE);
    assert_int_equal(fed_model_spec_check("mlp:16", csv), FED_OK);
    assert_int_equal(fed_model_spec_check("logreg", (fed_model_shape){1, 28, 28, 1, 0}),
                     FED_ERR_SHAPE);
    /* dimensions whose product overflows 64 bits (a hostile model file's
       header) are refused, not wrapped into a small count */
    assert_int_equal(fed_model_spec_check("logreg",
                                          (fed_model_shape){INT_MAX, INT_MAX, INT_MAX, 10, 0}),
                     FED_ERR_SHAPE);
    assert_int_equal(fed_model_spec_check("mlp:4", (fed_model_shape){4096, 4096, 2, 10, 0}),
                     FED_ERR_SHAPE);
    assert_int_equal(fed_model_new("mlp:0", in, w->be, NULL, 1, 8, &m), FED_ERR_SPEC);
    assert_null(m);
    assert_int_equal(fed_model_new("mlp:4", in, w->be, NULL, 1, 0, &m), FED_ERR_INVAL);
    assert_null(m);
}

static void expect_why(const char *spec, fed_model_shape in, fed_err want, const char *msg)
{
    char why[256];

    memset(why, 'x', sizeof why);
    assert_int_equal(fed_model_spec_explain(spec, in, why, sizeof why), want);
    if (strcmp(why, msg) != 0)
        fail_msg("spec '%s': got \"%s\", want \"%s\"", spec, why, msg);
}

/* A refused spec says what is wrong and the limit it broke. */
static void test_spec_messages(void **state)
{
    fed_model_shape in = {1, 28, 28, 10, 0};
    fed_backend *be = NULL;
    fed_model *m = (fed_model *)1;

    (void)state;
    expect_why("mlp:99999999", in, FED_ERR_SPEC,
               "model spec 'mlp:99999999': layer 1 width 99999999 exceeds the limit 65536");
    expect_why("mlp:64,65537", in, FED_ERR_SPEC,
               "model spec 'mlp:64,65537': layer 2 width 65537 exceeds the limit 65536");
    expect_why("mlp:123456789012345678901234567890", in, FED_ERR_SPEC,
               "model spec 'mlp:123456789012345678901234567890': layer 1 width "
               "123456789012345678901234567890 exceeds the limit 65536");
    expect_why("mlp:8,0", in, FED_ERR_SPEC,
               "model spec 'mlp:8,0': layer 2 width 0 is below the minimum 1");
    expect_why("mlp:1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", in, FED_ERR_SPEC,
               "model spec 'mlp:1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16': more than 15 hidden "
               "layers");
    expect_why("mlp:12,", in, FED_ERR_SPEC,
               "model spec 'mlp:12,': layer 2: expected a width (digits)");
    expect_why("mlp:3x", in, FED_ERR_SPEC,
               "model spec 'mlp:3x': layer 1: 'x' after the width, expected ','");
    expect_why("cnn2", in, FED_ERR_SPEC,
               "model spec 'cnn2' is none of logreg, mlp:W1,W2,... or cnn");
    expect_why("cnn", (fed_model_shape){1, 8, 8, 10, 0}, FED_ERR_SHAPE,
               "model spec 'cnn': input 8x8 is too small for its two 5x5 convolutions and 2x2 "
               "pools");
    expect_why("mlp:65536", in, FED_OK, "");
    /* fed_model_new logs the same words */
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    fed_test_log_capture(FED_LOG_DEBUG);
    assert_int_equal(fed_model_new("mlp:99999999", in, be, NULL, 1, 8, &m), FED_ERR_SPEC);
    fed_backend_free(be);
    assert_null(m);
    assert_string_equal(fed_test_log_last(), "model spec 'mlp:99999999': layer 1 width 99999999 "
                                             "exceeds the limit 65536");
    fed_test_log_default();
}

/* ------------------------------------------------------------ init -- */

static void test_init_bounds_and_seed(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 28, 28, 10, 0};
    fed_model *a = make_model(w, "mlp:32", in, 1, 4, 5), *b = make_model(w, "mlp:32", in, 1, 4, 5),
              *c = make_model(w, "mlp:32", in, 1, 4, 6);
    size_t np = fed_model_nparams(a);
    float *pa = malloc(np * 4), *pb = malloc(np * 4), *pc = malloc(np * 4);
    int nt;
    const fed_tensor_info *t = fed_model_tensors(a, &nt);

    assert_int_equal(fed_model_get_params(a, pa), FED_OK);
    assert_int_equal(fed_model_get_params(b, pb), FED_OK);
    assert_int_equal(fed_model_get_params(c, pc), FED_OK);
    assert_memory_equal(pa, pb, np * 4);
    assert_memory_not_equal(pa, pc, np * 4);
    for (int ti = 0; ti < nt; ti++) {
        /* fan_in of the layer: the weight's second dimension */
        int fan_in = t[ti & ~1].shape[1];
        double bound = 1.0 / sqrt((double)fan_in), mx = 0.0, sum = 0.0;

        for (size_t i = 0; i < t[ti].numel; i++) {
            double v = pa[t[ti].offset + i];

            mx = fabs(v) > mx ? fabs(v) : mx;
            sum += v;
        }
        assert_true(mx <= bound);
        assert_true(mx > 0.9 * bound); /* the whole range is used */
        assert_true(fabs(sum / t[ti].numel) < 0.2 * bound);
    }
    free(pa);
    free(pb);
    free(pc);
    fed_model_free(a);
    fed_model_free(b);
    fed_model_free(c);
}

/* ------------------------------------------------------- training -- */

static double train_steps(fed_model *m, const float *x, const uint8_t *x8, const int32_t *y, int n,
                          int steps, double *first_loss)
{
    fed_optim_cfg cfg;
    fed_optim *o = NULL;
    fed_batch b = {.n = n, .x_f32 = x8 ? NULL : x, .x_u8 = x8, .y = y};
    double last = 0.0;

    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.lr = 0.05f;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    for (int s = 0; s < steps; s++) {
        fed_step_stats st = {0};

        assert_int_equal(fed_model_forward_backward(m, &b, &st), FED_OK);
        assert_int_equal(fed_optim_step(o, m), FED_OK);
        last = st.loss_sum / n;
        if (s == 0 && first_loss)
            *first_loss = last;
    }
    fed_optim_free(o);
    return last;
}

static void test_loss_decreases(void **state)
{
    world *w = *state;
    static const char *specs[] = {"logreg", "mlp:32,16", "cnn"};
    fed_model_shape in = {1, 28, 28, 10, 0};
    int n = 16;
    uint8_t *x = malloc((size_t)n * 784);
    int32_t y[16];
    fed_rng rng;

    fed_rng_seed(&rng, 3);
    fed_rng_fill(&rng, x, (size_t)n * 784);
    for (int i = 0; i < n; i++)
        y[i] = (int32_t)fed_rng_below(&rng, 10);
    for (size_t s = 0; s < 3; s++) {
        fed_model *m = make_model(w, specs[s], in, 2, n, 11);
        double first = 0.0, last = train_steps(m, NULL, x, y, n, 40, &first);

        if (!(first > 1.5 && last < 0.5 * first))
            fail_msg("%s: loss %g -> %g", specs[s], first, last);
        fed_model_free(m);
    }
    free(x);
}

/* The parameters after a few steps with the given shard count and pool. */
static float *params_after(fed_backend *be, fed_pool *pool, const char *spec, int shards)
{
    fed_model_shape in = {1, 28, 28, 10, 0};
    int n = 24;
    uint8_t *x = malloc((size_t)n * 784);
    int32_t y[24];
    fed_rng rng;
    fed_model *m = NULL;
    float *p;

    fed_rng_seed(&rng, 9);
    fed_rng_fill(&rng, x, (size_t)n * 784);
    for (int i = 0; i < n; i++)
        y[i] = (int32_t)fed_rng_below(&rng, 10);
    assert_int_equal(fed_model_new(spec, in, be, pool, shards, n, &m), FED_OK);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    train_steps(m, NULL, x, y, n, 6, NULL);
    p = malloc(fed_model_nparams(m) * sizeof *p);
    assert_int_equal(fed_model_get_params(m, p), FED_OK);
    fed_model_free(m);
    free(x);
    return p;
}

static void test_bit_identical(void **state)
{
    world *w = *state;
    static const char *specs[] = {"mlp:64,32", "cnn"};
    fed_pool *inline_pool = NULL;

    assert_int_equal(fed_pool_new(0, &inline_pool), FED_OK);
    for (int s = 0; s < 2; s++) {
        fed_model_shape in = {1, 28, 28, 10, 0};
        size_t np;
        float *a1 = params_after(w->be, w->pool, specs[s], 1),
              *b1 = params_after(w->be, w->pool, specs[s], 1),
              *a2 = params_after(w->be, w->pool, specs[s], 2),
              *b2 = params_after(w->be, w->pool, specs[s], 2),
              *c2 = params_after(w->be, inline_pool, specs[s], 2);

        assert_int_equal(fed_model_spec_nparams(specs[s], in, &np), FED_OK);
        assert_memory_equal(a1, b1, np * 4);
        assert_memory_equal(a2, b2, np * 4);
        /* two shards on a worker or inline: same bits, whatever the timing */
        assert_memory_equal(a2, c2, np * 4);
        /* and one shard is not just the same code path */
        {
            double d = 0.0;

            for (size_t i = 0; i < np; i++)
                d += fabs((double)a1[i] - a2[i]);
            assert_true(d / np < 1e-3);
        }
        free(a1);
        free(b1);
        free(a2);
        free(b2);
        free(c2);
    }
    fed_pool_free(inline_pool);
}

static void test_eval_matches_train_loss(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 28, 28, 10, 0};
    int n = 50;
    fed_model *m = make_model(w, "mlp:20", in, 2, 16, 4);
    uint8_t *x = malloc((size_t)n * 784);
    float *xf = malloc((size_t)n * 784 * 4);
    int32_t y[50];
    fed_rng rng;
    fed_step_stats ev = {0}, evf = {0}, tr = {0};

    fed_rng_seed(&rng, 5);
    fed_rng_fill(&rng, x, (size_t)n * 784);
    for (int i = 0; i < n * 784; i++) {
        float v = x[i] * FED_MODEL_PIXEL_SCALE; /* the u8 path's two roundings */
        xf[i] = v + FED_MODEL_PIXEL_SHIFT;
    }
    for (int i = 0; i < n; i++)
        y[i] = (int32_t)fed_rng_below(&rng, 10);
    fed_batch b = {.n = n, .x_u8 = x, .y = y}, bf = {.n = n, .x_f32 = xf, .y = y};
    /* 50 samples in pieces of 16 */
    assert_int_equal(fed_model_evaluate(m, &b, &ev), FED_OK);
    assert_int_equal(ev.samples, 50);
    assert_int_equal(fed_model_evaluate(m, &bf, &evf), FED_OK);
    assert_true(fabs(ev.loss_sum - evf.loss_sum) < 1e-9);
    assert_int_equal(ev.correct, evf.correct);
    {
        fed_batch part = {.n = 16, .x_u8 = x, .y = y};

        assert_int_equal(fed_model_forward_backward(m, &part, &tr), FED_OK);
    }
    {
        fed_step_stats e16 = {0};
        fed_batch part = {.n = 16, .x_u8 = x, .y = y};

        assert_int_equal(fed_model_evaluate(m, &part, &e16), FED_OK);
        assert_true(fabs(e16.loss_sum - tr.loss_sum) < 1e-9);
        assert_int_equal(e16.correct, tr.correct);
    }
    free(x);
    free(xf);
    fed_model_free(m);
}

static void test_batch_errors(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 2, 2, 3, 0};
    fed_model *m = make_model(w, "logreg", in, 1, 4, 1);
    float x[5 * 4] = {0};
    int32_t y[5] = {0, 1, 2, 0, 1};
    fed_batch b = {.n = 5, .x_f32 = x, .y = y};

    assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_ERR_INVAL);
    b.n = 0;
    assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_ERR_INVAL);
    b.n = 3;
    y[1] = 3;
    assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_ERR_RANGE);
    y[1] = -1;
    assert_int_equal(fed_model_evaluate(m, &b, NULL), FED_ERR_RANGE);
    y[1] = 1;
    assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_OK);
    b.x_f32 = NULL;
    assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_ERR_INVAL);
    fed_model_free(m);
}

/* -------------------------------------------------------- the file -- */

static void tmp_path(char *buf, size_t len, const char *name)
{
    const char *dir = getenv("TMPDIR");

    snprintf(buf, len, "%s/fednode-test-model-%d-%s", dir ? dir : "/tmp", (int)getpid(), name);
}

static void test_file_round_trip(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 28, 28, 10, 0};
    fed_model *m = make_model(w, "mlp:16,8", in, 1, 4, 77), *back = NULL;
    size_t np = fed_model_nparams(m);
    float *a = malloc(np * 4), *b = malloc(np * 4);
    char path[256];

    tmp_path(path, sizeof path, "rt.bin");
    assert_int_equal(fed_model_save(m, path), FED_OK);
    assert_int_equal(fed_model_load(path, w->be, w->pool, 2, 8, &back), FED_OK);
    assert_string_equal(fed_model_spec(back), "mlp:16,8");
    assert_int_equal(fed_model_nparams(back), np);
    assert_int_equal(fed_model_input(back).h, 28);
    assert_int_equal(fed_model_input(back).classes, 10);
    assert_int_equal(fed_model_get_params(m, a), FED_OK);
    assert_int_equal(fed_model_get_params(back, b), FED_OK);
    assert_memory_equal(a, b, np * 4);
    fed_model_free(back);
    back = NULL;
    unlink(path);
    assert_int_equal(fed_model_load(path, w->be, w->pool, 1, 8, &back), FED_ERR_NOTFOUND);
    assert_null(back);
    free(a);
    free(b);
    fed_model_free(m);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Recompute the trailing CRC after a deliberate edit. */
static void reseal(uint8_t *buf, size_t len)
{
    uint32_t crc = 0xffffffffu;

    for (size_t i = 0; i < len - 4; i++) {
        crc ^= buf[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    put32(buf + len - 4, ~crc);
}

/* A graph past FED_MODEL_SPEC_MAX: the file holds it whole and builds it
 * back (its id, its parameters); a long spec that is no graph is refused. */
static void test_file_long_graph(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 4, 4, 3, 0};
    char graph[512] = "g:", id[FED_MODEL_SPEC_MAX];
    fed_model *m, *back = NULL;
    size_t size, len = 0;
    uint8_t *buf;
    fed_model_file f;

    for (int i = 0; i < 20; i++)
        strcat(graph, "L6,R,");
    strcat(graph, "L");
    fed_model_spec_id(graph, id);
    m = make_model(w, graph, in, 1, 4, 1);
    size = fed_model_file_size(m);
    assert_int_equal(size, FED_MODEL_FILE_HEADER + strlen(graph) + 4 * fed_model_nparams(m) + 4);
    buf = malloc(size);
    assert_int_equal(fed_model_file_encode(m, buf, size, &len), FED_OK);
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_OK);
    assert_string_equal(f.spec, id);
    assert_string_equal(f.whole, graph);
    assert_int_equal(fed_model_new(f.whole, f.shape, w->be, NULL, 1, 4, &back), FED_OK);
    assert_string_equal(fed_model_spec(back), id);
    fed_model_file_fini(&f);
    assert_null(f.whole);
    /* the same length, no graph: refused */
    buf[FED_MODEL_FILE_HEADER] = 'h';
    reseal(buf, size);
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_ERR_SPEC);
    assert_null(f.whole);
    free(buf);
    fed_model_free(back);
    fed_model_free(m);
}

/* The input scale (--input-scale unit) travels in a version 2 file: read
 * back as unit; a version 1 file is centred; a scale that is neither is
 * refused. */
static void test_file_input_scale(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 4, 4, 3, FED_MODEL_INPUT_UNIT};
    fed_model *m = make_model(w, "mlp:5", in, 1, 4, 1);
    size_t size = fed_model_file_size(m), len = 0;
    uint8_t *buf = malloc(size);
    fed_model_file f;

    assert_int_equal(size, FED_MODEL_FILE_HEADER_V2 + strlen("mlp:5") +
                               4 * fed_model_nparams(m) + 4);
    assert_int_equal(fed_model_file_encode(m, buf, size, &len), FED_OK);
    assert_int_equal(get32(buf + 8), 2);
    assert_int_equal(get32(buf + FED_MODEL_FILE_HEADER), FED_MODEL_INPUT_UNIT);
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_OK);
    assert_int_equal(f.shape.scale, FED_MODEL_INPUT_UNIT);
    assert_string_equal(f.whole, "mlp:5");
    fed_model_file_fini(&f);
    /* a scale that is no scale */
    put32(buf + FED_MODEL_FILE_HEADER, 7);
    reseal(buf, size);
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_ERR_FORMAT);
    assert_null(f.params);
    /* shorter than version 2's header: in a buffer of exactly that length,
       so that reading the scale past it is an overflow ASan reports */
    {
        uint8_t *cut = malloc(FED_MODEL_FILE_HEADER_V2 - 1);

        assert_non_null(cut);
        memcpy(cut, buf, FED_MODEL_FILE_HEADER_V2 - 1);
        assert_int_equal(fed_model_file_parse(cut, FED_MODEL_FILE_HEADER_V2 - 1, &f),
                         FED_ERR_TRUNCATED);
        assert_null(f.params);
        free(cut);
    }
    free(buf);
    fed_model_free(m);
}

static void test_file_rejects(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 4, 4, 3, 0};
    fed_model *m = make_model(w, "mlp:5", in, 1, 4, 1);
    size_t size = fed_model_file_size(m), len = 0;
    uint8_t *good = malloc(size + 8), *buf = malloc(size + 8);
    fed_model_file f;

    assert_int_equal(fed_model_file_encode(m, good, size, &len), FED_OK);
    assert_int_equal(len, size);
    assert_int_equal(fed_model_file_encode(m, good, size - 1, &len), FED_ERR_RANGE);
    assert_int_equal(fed_model_file_parse(good, size, &f), FED_OK);
    assert_int_equal(f.nparams, fed_model_nparams(m));
    fed_model_file_fini(&f);
    /* our CRC-32 matches zlib's, so reseal() is trustworthy */
    memcpy(buf, good, size);
    reseal(buf, size);
    assert_memory_equal(buf, good, size);

    /* every truncation */
    for (size_t cut = 0; cut < size; cut++) {
        assert_int_equal(fed_model_file_parse(good, cut, &f), FED_ERR_TRUNCATED);
        assert_null(f.params);
    }
    /* wrong magic */
    memcpy(buf, good, size);
    buf[0] = 'X';
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_ERR_MAGIC);
    /* version: the default input scale writes 1; 3 is none */
    assert_int_equal(get32(good + 8), 1);
    memcpy(buf, good, size);
    put32(buf + 8, 3);
    reseal(buf, size);
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_ERR_VERSION);
    /* a flipped parameter bit: checksum */
    memcpy(buf, good, size);
    buf[size - 9] ^= 0x10;
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_ERR_CORRUPT);
    /* a flipped checksum bit */
    memcpy(buf, good, size);
    buf[size - 1] ^= 0x80;
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_ERR_CORRUPT);
    /* trailing bytes */
    memcpy(buf, good, size);
    buf[size] = 0;
    assert_int_equal(fed_model_file_parse(buf, size + 1, &f), FED_ERR_FORMAT);
    /* spec length out of range */
    memcpy(buf, good, size);
    put32(buf + 12, 0);
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_ERR_TOO_LARGE);
    /* a huge parameter count claims more bytes than there are */
    memcpy(buf, good, size);
    put32(buf + 32, 0xffffffffu);
    put32(buf + 36, 0xffffffffu);
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_ERR_TRUNCATED);
    /* the spec does not parse ("mlp:5" -> "mlq:5") */
    memcpy(buf, good, size);
    buf[FED_MODEL_FILE_HEADER + 2] = 'q';
    reseal(buf, size);
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_ERR_SPEC);
    /* a shape whose parameter count differs (3 -> 4 classes) */
    memcpy(buf, good, size);
    put32(buf + 28, 4);
    reseal(buf, size);
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_ERR_SHAPE);
    /* a NaN parameter */
    memcpy(buf, good, size);
    put32(buf + FED_MODEL_FILE_HEADER + 5, 0x7fc00000u);
    reseal(buf, size);
    assert_int_equal(fed_model_file_parse(buf, size, &f), FED_ERR_NAN);
    assert_null(f.params);
    free(good);
    free(buf);
    fed_model_free(m);
}

/* ------------------------------------------------------- the trainer -- */

/* A learnable synthetic set: class k lights up rows of band k. */
static fed_dataset *toy_dataset(size_t n, fed_rng *rng)
{
    fed_dataset *d = calloc(1, sizeof *d);

    d->n = n;
    d->shape = (fed_model_shape){1, 8, 8, 4, 0};
    d->features = 64;
    d->x_u8 = malloc(n * 64);
    d->y = malloc(n * sizeof *d->y);
    for (size_t i = 0; i < n; i++) {
        int k = (int)fed_rng_below(rng, 4);

        d->y[i] = k;
        for (int f = 0; f < 64; f++)
            d->x_u8[i * 64 + f] =
                (uint8_t)(fed_rng_below(rng, 60) + (f / 16 == k ? 150 : 0));
    }
    return d;
}

static void toy_free(fed_dataset *d)
{
    free(d->x_u8);
    free(d->y);
    free(d);
}

typedef struct progress_log {
    long calls, last_done, last_total;
} progress_log;

static void on_progress(void *ctx, long done, long total)
{
    progress_log *p = ctx;

    assert_true(done > p->last_done || p->calls == 0 || done <= 16);
    p->calls++;
    p->last_done = done;
    p->last_total = total;
}

static void test_trainer_epochs(void **state)
{
    world *w = *state;
    fed_rng rng, shuffle;
    fed_dataset *d;
    uint32_t idx[300];
    float *first = NULL;
    size_t np = 0;

    fed_rng_seed(&rng, 21);
    d = toy_dataset(300, &rng);
    for (int i = 0; i < 300; i++)
        idx[i] = (uint32_t)i;
    for (int run = 0; run < 2; run++) {
        fed_model *m = make_model(w, "mlp:16", d->shape, 2, 16, 5);
        fed_optim_cfg cfg;
        fed_optim *o = NULL;
        fed_trainer *t = NULL;
        fed_step_stats ep1 = {0}, ep3 = {0}, ev = {0}, evi = {0};
        progress_log pl = {0, 0, 0};
        float *p;

        fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
        assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
        assert_int_equal(fed_trainer_new(m, o, d, 16, &t), FED_OK);
        fed_trainer_set_progress(t, on_progress, &pl);
        fed_rng_seed(&shuffle, 99);
        /* 250 of the 300: 16 batches, the last of 10 */
        assert_int_equal(fed_trainer_epoch(t, idx, 250, &shuffle, &ep1), FED_OK);
        assert_int_equal(ep1.samples, 250);
        assert_int_equal(fed_optim_steps(o), 16);
        assert_int_equal(pl.calls, 16);
        assert_int_equal(pl.last_done, 250);
        assert_int_equal(pl.last_total, 250);
        assert_int_equal(fed_trainer_epoch(t, idx, 250, &shuffle, NULL), FED_OK);
        assert_int_equal(fed_trainer_epoch(t, idx, 250, &shuffle, &ep3), FED_OK);
        assert_true(ep3.loss_sum / 250 < 0.5 * ep1.loss_sum / 250);
        assert_int_equal(fed_trainer_steps(t, idx, 250, 3, &shuffle, NULL), FED_OK);
        assert_int_equal(fed_optim_steps(o), 51);
        /* held-out 50 by index list == the same samples evaluated whole */
        assert_int_equal(fed_trainer_evaluate(t, idx + 250, 50, &evi), FED_OK);
        assert_int_equal(evi.samples, 50);
        assert_true(evi.correct >= 45);
        assert_int_equal(fed_trainer_evaluate(t, NULL, 0, &ev), FED_OK);
        assert_int_equal(ev.samples, 300);
        {
            fed_step_stats direct = {0};

            assert_int_equal(fed_train_evaluate_all(m, d, &direct), FED_OK);
            assert_true(direct.loss_sum == ev.loss_sum);
        }
        /* bad index */
        idx[3] = 300;
        assert_int_equal(fed_trainer_epoch(t, idx, 10, &shuffle, NULL), FED_ERR_RANGE);
        idx[3] = 3;
        np = fed_model_nparams(m);
        p = malloc(np * sizeof *p);
        assert_int_equal(fed_model_get_params(m, p), FED_OK);
        if (!first)
            first = p;
        else {
            /* same seeds: the same run, bit for bit */
            assert_memory_equal(first, p, np * sizeof *p);
            free(p);
        }
        fed_trainer_free(t);
        fed_optim_free(o);
        fed_model_free(m);
    }
    free(first);
    toy_free(d);
}

/* ---- data parallel: three ranks as threads, summing through a barrier ---- */

#define RANKS 3
typedef struct rank_world {
    pthread_barrier_t bar;
    float *bufs[RANKS];
    const fed_dataset *d;
    const uint32_t *idx;
    world *w;
    float *params[RANKS]; /* out */
    long steps[RANKS];
} rank_world;

typedef struct rank_ctx {
    rank_world *rw;
    int rank;
} rank_ctx;

/* every rank's buffer summed in rank order, as mpi/coll.h's sum does */
static fed_err barrier_sum(void *ctx, float *buf, size_t n)
{
    rank_ctx *rc = ctx;
    rank_world *rw = rc->rw;
    float *sum = malloc(n * sizeof *sum);

    rw->bufs[rc->rank] = buf;
    pthread_barrier_wait(&rw->bar);
    for (size_t i = 0; i < n; i++) {
        sum[i] = rw->bufs[0][i];
        for (int r = 1; r < RANKS; r++)
            sum[i] += rw->bufs[r][i];
    }
    pthread_barrier_wait(&rw->bar);
    memcpy(buf, sum, n * sizeof *sum);
    free(sum);
    return FED_OK;
}

/* 2 epochs over 250 samples at 8 a rank (24 a step: 11 steps, the last
 * 10 = 3 + 3 + 4), then one over 2 samples (rank 0's share empty). */
static void train_as(rank_world *rw, int rank, int size, int batch, float *out, long *steps,
                     rank_ctx *rc)
{
    fed_model *m = make_model(rw->w, "mlp:16", rw->d->shape, 1, batch, 5);
    fed_optim_cfg cfg;
    fed_optim *o = NULL;
    fed_trainer *t = NULL;
    fed_rng shuffle;

    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.momentum = 0.9f;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    assert_int_equal(fed_trainer_new(m, o, rw->d, batch, &t), FED_OK);
    if (size > 1)
        assert_int_equal(fed_trainer_set_ranks(t, rank, size, barrier_sum, rc), FED_OK);
    fed_rng_seed(&shuffle, 99);
    for (int ep = 0; ep < 2; ep++)
        assert_int_equal(fed_trainer_epoch(t, rw->idx, 250, &shuffle, NULL), FED_OK);
    assert_int_equal(fed_trainer_epoch(t, rw->idx, 2, &shuffle, NULL), FED_OK);
    *steps = fed_optim_steps(o);
    assert_int_equal(fed_model_get_params(m, out), FED_OK);
    fed_trainer_free(t);
    fed_optim_free(o);
    fed_model_free(m);
}

static void *rank_main(void *arg)
{
    rank_ctx *rc = arg;

    train_as(rc->rw, rc->rank, RANKS, 8, rc->rw->params[rc->rank], &rc->rw->steps[rc->rank], rc);
    return NULL;
}

static void test_trainer_ranks(void **state)
{
    world *w = *state;
    rank_world rw;
    rank_ctx rc[RANKS];
    pthread_t th[RANKS];
    fed_rng rng;
    fed_dataset *d;
    uint32_t idx[250];
    float *one;
    long steps1;
    size_t np;
    double worst = 0;

    fed_rng_seed(&rng, 21);
    d = toy_dataset(250, &rng);
    for (int i = 0; i < 250; i++)
        idx[i] = (uint32_t)i;
    memset(&rw, 0, sizeof rw);
    rw.d = d;
    rw.idx = idx;
    rw.w = w;
    {
        fed_model *m = make_model(w, "mlp:16", d->shape, 1, 24, 5);

        np = fed_model_nparams(m);
        fed_model_free(m);
    }
    one = malloc(np * sizeof *one);
    for (int r = 0; r < RANKS; r++)
        rw.params[r] = malloc(np * sizeof(float));
    /* one process at the global batch */
    train_as(&rw, 0, 1, 24, one, &steps1, NULL);
    assert_int_equal(steps1, 11 + 11 + 1);
    pthread_barrier_init(&rw.bar, NULL, RANKS);
    for (int r = 0; r < RANKS; r++) {
        rc[r].rw = &rw;
        rc[r].rank = r;
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &rc[r]), 0);
    }
    for (int r = 0; r < RANKS; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&rw.bar);
    for (int r = 0; r < RANKS; r++) {
        assert_int_equal(rw.steps[r], steps1); /* the same steps */
        assert_memory_equal(rw.params[r], rw.params[0], np * sizeof(float)); /* bit for bit */
    }
    for (size_t i = 0; i < np; i++) { /* the one process's, to rounding */
        double e = fabs((double)rw.params[0][i] - (double)one[i]);

        worst = e > worst ? e : worst;
    }
    assert_true(worst < 1e-4);
    {
        fed_model *m = make_model(w, "mlp:16", d->shape, 1, 8, 5);
        fed_optim_cfg cfg;
        fed_optim *o = NULL;
        fed_trainer *t = NULL;
        fed_trainer_dp dp = {.clip = 1, .noise = 1, .random = NULL};

        fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
        assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
        assert_int_equal(fed_trainer_new(m, o, d, 8, &t), FED_OK);
        assert_int_equal(fed_trainer_set_ranks(t, 0, 0, barrier_sum, NULL), FED_ERR_INVAL);
        assert_int_equal(fed_trainer_set_ranks(t, 2, 2, barrier_sum, NULL), FED_ERR_INVAL);
        assert_int_equal(fed_trainer_set_ranks(t, 0, 2, NULL, NULL), FED_ERR_INVAL);
        assert_int_equal(fed_trainer_set_ranks(t, 0, 1, NULL, NULL), FED_OK);
        assert_int_equal(fed_trainer_set_ranks(t, 1, 2, barrier_sum, NULL), FED_OK);
        assert_int_equal(fed_trainer_set_dp(t, &dp), FED_ERR_UNSUPPORTED);
        fed_trainer_free(t);
        fed_optim_free(o);
        fed_model_free(m);
    }
    for (int r = 0; r < RANKS; r++)
        free(rw.params[r]);
    free(one);
    toy_free(d);
}

static void test_trainer_rejects(void **state)
{
    world *w = *state;
    fed_rng rng;
    fed_dataset *d;
    fed_model *m, *wrong;
    fed_optim_cfg cfg;
    fed_optim *o = NULL;
    fed_trainer *t = (fed_trainer *)1;
    uint32_t idx[64];

    fed_rng_seed(&rng, 22);
    d = toy_dataset(64, &rng);
    for (int i = 0; i < 64; i++)
        idx[i] = (uint32_t)i;
    m = make_model(w, "logreg", d->shape, 1, 32, 1);
    wrong = make_model(w, "logreg", (fed_model_shape){1, 8, 7, 4, 0}, 1, 32, 1);
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    assert_int_equal(fed_trainer_new(wrong, NULL, d, 8, &t), FED_ERR_SHAPE);
    assert_null(t);
    assert_int_equal(fed_trainer_new(m, NULL, d, 33, &t), FED_ERR_INVAL);
    assert_int_equal(fed_trainer_new(m, NULL, d, 0, &t), FED_ERR_INVAL);
    /* a non-finite loss (here from a NaN feature) stops with FED_ERR_NAN */
    {
        float *xf = malloc(64 * 64 * sizeof *xf);
        uint8_t *keep = d->x_u8;

        for (int i = 0; i < 64 * 64; i++)
            xf[i] = keep[i] / 255.0f;
        xf[5 * 64 + 7] = NAN;
        d->x_u8 = NULL;
        d->x_f32 = xf;
        assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
        assert_int_equal(fed_trainer_new(m, o, d, 32, &t), FED_OK);
        assert_int_equal(fed_trainer_epoch(t, idx, 64, &rng, NULL), FED_ERR_NAN);
        d->x_u8 = keep;
        d->x_f32 = NULL;
        free(xf);
    }
    fed_trainer_free(t);
    fed_optim_free(o);
    fed_model_free(m);
    fed_model_free(wrong);
    toy_free(d);
}

/* --accumulate: an epoch of steps of 30 samples, each run as 4 uneven
 * micro-batches (7, 8, 7, 8; the last step's 10 as 2, 3, 2, 3) in a model
 * with room for 8, ends where steps over the whole batches end, to float
 * rounding. Weighting each micro-batch's mean by 1 / N instead of its share
 * would not. */
static void test_trainer_accumulate(void **state)
{
    world *w = *state;
    fed_rng rng, shuffle;
    fed_dataset *d;
    uint32_t idx[100];
    float *p[2];
    fed_step_stats st[2];
    size_t np = 0;

    memset(st, 0, sizeof st);
    fed_rng_seed(&rng, 23);
    d = toy_dataset(100, &rng);
    for (int i = 0; i < 100; i++)
        idx[i] = (uint32_t)i;
    for (int run = 0; run < 2; run++) {
        int acc = run ? 4 : 1;
        fed_model *m = make_model(w, "mlp:16", d->shape, 2, run ? 8 : 30, 5);
        fed_optim_cfg cfg;
        fed_optim *o = NULL;
        fed_trainer *t = NULL;

        fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
        cfg.lr = 0.1f;
        assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
        if (run) { /* room for 8: 30 in 3 is refused, 31 in 4 too; more pieces than samples */
            assert_int_equal(fed_trainer_new_acc(m, o, d, 30, 3, &t), FED_ERR_INVAL);
            assert_int_equal(fed_trainer_new_acc(m, o, d, 33, 4, &t), FED_ERR_INVAL);
            assert_int_equal(fed_trainer_new_acc(m, o, d, 3, 4, &t), FED_ERR_INVAL);
            assert_int_equal(fed_trainer_new_acc(m, o, d, 30, 0, &t), FED_ERR_INVAL);
        }
        assert_int_equal(fed_trainer_new_acc(m, o, d, 30, acc, &t), FED_OK);
        if (run) { /* DP-SGD sums its own pieces */
            fed_trainer_dp dp = {1.0f, 1.0f, NULL, NULL};

            assert_int_equal(fed_trainer_set_dp(t, &dp), FED_ERR_UNSUPPORTED);
        }
        fed_rng_seed(&shuffle, 7);
        assert_int_equal(fed_trainer_epoch(t, idx, 100, &shuffle, &st[run]), FED_OK);
        assert_int_equal(fed_optim_steps(o), 4);
        assert_int_equal(st[run].samples, 100);
        np = fed_model_nparams(m);
        p[run] = malloc(np * sizeof *p[run]);
        assert_int_equal(fed_model_get_params(m, p[run]), FED_OK);
        fed_trainer_free(t);
        fed_optim_free(o);
        fed_model_free(m);
    }
    assert_true(fabs(st[0].loss_sum - st[1].loss_sum) < 1e-4 * (1 + fabs(st[0].loss_sum)));
    for (size_t i = 0; i < np; i++)
        if (!(fabsf(p[0][i] - p[1][i]) <= 1e-5f * (1 + fabsf(p[0][i]))))
            fail_msg("param %zu: %.9g whole, %.9g accumulated", i, (double)p[0][i],
                     (double)p[1][i]);
    free(p[0]);
    free(p[1]);
    toy_free(d);
}

/* GPipe's order (fed_trainer_set_gpipe_order): each step's 4 micro-batches
 * run from the last to the first and their weighted gradients are summed in
 * that order: the parameters after an epoch are, bit for bit, those of the
 * same loop written out by hand (what a pipeline of stages reproduces), and
 * not those of the plain order, first to last. */
static void test_trainer_gpipe_order(void **state)
{
    world *w = *state;
    fed_rng rng, shuffle;
    fed_dataset *d;
    uint32_t idx[100], order[100];
    float *p[3];
    size_t np = 0;

    fed_rng_seed(&rng, 23);
    d = toy_dataset(100, &rng);
    for (int i = 0; i < 100; i++)
        idx[i] = (uint32_t)i;
    for (int run = 0; run < 3; run++) { /* 0: by hand, 1: gpipe order, 2: plain */
        fed_model *m = make_model(w, "mlp:16,16", d->shape, 2, 8, 5);
        fed_optim_cfg cfg;
        fed_optim *o = NULL;
        fed_trainer *t = NULL;

        fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
        cfg.lr = 0.1f;
        assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
        fed_rng_seed(&shuffle, 7);
        np = fed_model_nparams(m);
        if (run == 0) {
            float *acc = malloc(np * sizeof *acc), *g = fed_model_grads_dev(m);
            uint8_t x[8 * 64];
            int32_t y[8];

            memcpy(order, idx, sizeof order);
            fed_rng_shuffle_u32(&shuffle, order, 100);
            for (size_t off = 0; off < 100; off += 30) {
                size_t n = 100 - off < 30 ? 100 - off : 30;

                for (int k = 3; k >= 0; k--) {
                    size_t lo = n * (size_t)k / 4, hi = n * (size_t)(k + 1) / 4;
                    float wk = (float)(hi - lo) / (float)n;
                    fed_batch b;

                    assert_true(d->features <= 64);
                    fed_data_gather(d, order + off + lo, (int)(hi - lo), x, y, &b);
                    assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_OK);
                    for (size_t i = 0; i < np; i++)
                        acc[i] = k == 3 ? g[i] * wk : acc[i] + g[i] * wk;
                }
                memcpy(g, acc, np * sizeof *g);
                assert_int_equal(fed_optim_step(o, m), FED_OK);
            }
            free(acc);
        } else {
            assert_int_equal(fed_trainer_new_acc(m, o, d, 30, 4, &t), FED_OK);
            fed_trainer_set_gpipe_order(t, run == 1);
            assert_int_equal(fed_trainer_epoch(t, idx, 100, &shuffle, NULL), FED_OK);
        }
        assert_int_equal(fed_optim_steps(o), 4);
        p[run] = malloc(np * sizeof *p[run]);
        assert_int_equal(fed_model_get_params(m, p[run]), FED_OK);
        fed_trainer_free(t);
        fed_optim_free(o);
        fed_model_free(m);
    }
    assert_memory_equal(p[0], p[1], np * sizeof *p[0]);
    assert_memory_not_equal(p[0], p[2], np * sizeof *p[0]);
    for (int run = 0; run < 3; run++)
        free(p[run]);
    toy_free(d);
}

/* ------------------------------------------------ allocation failures -- */

typedef struct model_try {
    world *w;
    const char *spec;
} model_try;

static fed_err try_model_new(void *ctx)
{
    const model_try *t = ctx;
    fed_model *m = (fed_model *)1;
    fed_err e = fed_model_new(t->spec, (fed_model_shape){1, 28, 28, 10, 0}, t->w->be, t->w->pool, 2,
                              8, &m);

    if (e == FED_OK)
        fed_model_free(m);
    else
        assert_null(m);
    return e;
}

static void test_alloc_failure_sweep(void **state)
{
    static const char *specs[] = {"mlp:16,8", "cnn"};
    model_try t = {.w = *state};

    for (int s = 0; s < 2; s++) {
        t.spec = specs[s];
        assert_true(fed_test_alloc_sweep(try_model_new, &t, 0, 500) > 10);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_mlp_layout),
        cmocka_unit_test(test_spec_cnn_layout),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_spec_messages),
        cmocka_unit_test(test_init_bounds_and_seed),
        cmocka_unit_test(test_grad_logreg),
        cmocka_unit_test(test_grad_mlp),
        cmocka_unit_test(test_grad_cnn),
        cmocka_unit_test(test_grad_cnn_18),
        cmocka_unit_test(test_loss_decreases),
        cmocka_unit_test(test_bit_identical),
        cmocka_unit_test(test_eval_matches_train_loss),
        cmocka_unit_test(test_batch_errors),
        cmocka_unit_test(test_file_round_trip),
        cmocka_unit_test(test_file_rejects),
        cmocka_unit_test(test_file_input_scale),
        cmocka_unit_test(test_file_long_graph),
        cmocka_unit_test(test_trainer_epochs),
        cmocka_unit_test(test_trainer_rejects),
        cmocka_unit_test(test_trainer_ranks),
        cmocka_unit_test(test_trainer_accumulate),
        cmocka_unit_test(test_trainer_gpipe_order),
        cmocka_unit_test(test_alloc_failure_sweep),
    };

    return cmocka_run_group_tests(tests, world_setup, world_teardown);
}
