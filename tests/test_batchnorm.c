/* test_batchnorm.c - the batchnorm layer (1d after a linear layer, 2d after
 * a conv): every gradient against central differences of the test's own
 * double-precision forward in training mode (through the batch's
 * statistics), the running statistics and their counter after a step,
 * evaluation with the running statistics, the same bits for any shard
 * count, optimizers that leave the running statistics alone, tensor names
 * and flags, the "g:" spec and model-file keys, DP-SGD's and a backend's
 * refusals by name, --recompute accepted, batch norm in fp32
 * under --precision bf16, and a small net that learns a slice of
 * Fashion-MNIST. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/log.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/model.h"
#include "model/model_cfg.h"
#include "model/optim.h"
#include "model/train.h"
#include "tests/support/support.h"

typedef fed_test_world world;

static int world_setup(void **state) { return fed_test_world_new(state, 2); }
static int world_teardown(void **state) { return fed_test_world_free(state); }

/* conv 4x3x3 pad 1 -> bn2d + relu -> flatten -> linear 6 -> bn1d (eps
 * 1e-3, momentum 0.2) + relu -> linear (classes) */
static fed_model_node net[] = {
    {.kind = "conv", .name = "c1", .input = -1, .out = 4, .kernel = {3, 3}, .padding = {1, 1}},
    {.kind = "batchnorm", .name = "b1", .input = 0},
    {.kind = "relu", .input = 1},
    {.kind = "flatten", .input = 2},
    {.kind = "linear", .name = "fc", .input = 3, .out = 6},
    {.kind = "batchnorm", .name = "b2", .input = 4, .eps = 1e-3, .momentum = 0.2},
    {.kind = "relu", .input = 5},
    {.kind = "linear", .name = "head", .input = 6},
};
#define NET_COUNT ((int)(sizeof net / sizeof net[0]))
static const fed_model_shape IN = {2, 5, 5, 3, 0};
#define N 6

static const fed_tensor_info *tensor(const fed_model *m, const char *name)
{
    int nt;
    const fed_tensor_info *t = fed_model_tensors(m, &nt);

    for (int i = 0; i < nt; i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    fail_msg("no tensor %s", name);
    return NULL;
}

static fed_model *make(world *w, int shards)
{
    fed_model *m = NULL;
    fed_rng rng;

    assert_int_equal(fed_model_new_graph("bn", net, NET_COUNT, IN, w->be, w->pool, shards, N, &m),
                     FED_OK);
    fed_rng_seed(&rng, 3);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    return m;
}

static void batch(float *x, int32_t *y)
{
    fed_rng rng;

    fed_rng_seed(&rng, 9);
    for (int i = 0; i < N * IN.c * IN.h * IN.w; i++)
        x[i] = (float)fed_rng_normal(&rng);
    for (int i = 0; i < N; i++)
        y[i] = (int32_t)fed_rng_below(&rng, (uint64_t)IN.classes);
}

/* ------------------------------------------------- double reference -- */

/* Batch norm over a (N, C, P): with the batch's statistics (train: the
 * mean and biased variance into mean, var) or with mean and var given. */
static void ref_bn(double *a, int C, int P, const double *g, const double *b, double eps,
                   int train, double *mean, double *var, unsigned char *pat, size_t *np)
{
    for (int c = 0; c < C; c++) {
        if (train) {
            double s = 0.0, q = 0.0;

            for (int i = 0; i < N; i++)
                for (int p = 0; p < P; p++)
                    s += a[((size_t)i * C + c) * P + p];
            mean[c] = s / (N * P);
            for (int i = 0; i < N; i++)
                for (int p = 0; p < P; p++) {
                    double d = a[((size_t)i * C + c) * P + p] - mean[c];

                    q += d * d;
                }
            var[c] = q / (N * P);
        }
        for (int i = 0; i < N; i++)
            for (int p = 0; p < P; p++) {
                double *v = &a[((size_t)i * C + c) * P + p];

                *v = (*v - mean[c]) / sqrt(var[c] + eps) * g[c] + b[c];
                pat[(*np)++] = *v > 0; /* the relu after it */
                *v = *v > 0 ? *v : 0.0;
            }
    }
}

/* The net's mean cross-entropy on the batch under P (double), train or
 * eval; logits (N, classes) kept when not NULL; train: each bn's batch
 * statistics into st (mean, var of b1, then of b2); pat: relu signs. */
static double ref_loss(const fed_model *m, const double *P, const float *x, const int32_t *y,
                       int train, double *logits, double *st, unsigned char *pat)
{
    double a[N * 4 * 25], h[N * 6], loss = 0.0, local[2 * 4 + 2 * 6];
    const double *W = P + tensor(m, "c1.weight")->offset, *B = P + tensor(m, "c1.bias")->offset;
    size_t np = 0;

    if (!st)
        st = local;
    for (int i = 0; i < N; i++) /* conv 2 -> 4, 3x3, padding 1, on 5x5 */
        for (int o = 0; o < 4; o++)
            for (int r = 0; r < 5; r++)
                for (int c = 0; c < 5; c++) {
                    double z = B[o];

                    for (int ci = 0; ci < 2; ci++)
                        for (int ki = 0; ki < 3; ki++)
                            for (int kj = 0; kj < 3; kj++) {
                                int rr = r - 1 + ki, cc = c - 1 + kj;

                                if (rr >= 0 && rr < 5 && cc >= 0 && cc < 5)
                                    z += W[((o * 2 + ci) * 3 + ki) * 3 + kj] *
                                         x[((i * 2 + ci) * 5 + rr) * 5 + cc];
                            }
                    a[((i * 4 + o) * 5 + r) * 5 + c] = z;
                }
    if (!train) { /* the running statistics */
        memcpy(st, P + tensor(m, "b1.running_mean")->offset, 4 * sizeof *st);
        memcpy(st + 4, P + tensor(m, "b1.running_var")->offset, 4 * sizeof *st);
        memcpy(st + 8, P + tensor(m, "b2.running_mean")->offset, 6 * sizeof *st);
        memcpy(st + 14, P + tensor(m, "b2.running_var")->offset, 6 * sizeof *st);
    }
    ref_bn(a, 4, 25, P + tensor(m, "b1.weight")->offset, P + tensor(m, "b1.bias")->offset, 1e-5,
           train, st, st + 4, pat, &np);
    W = P + tensor(m, "fc.weight")->offset;
    B = P + tensor(m, "fc.bias")->offset;
    for (int i = 0; i < N; i++)
        for (int o = 0; o < 6; o++) {
            double z = B[o];

            for (int k = 0; k < 100; k++)
                z += W[o * 100 + k] * a[i * 100 + k];
            h[i * 6 + o] = z;
        }
    ref_bn(h, 6, 1, P + tensor(m, "b2.weight")->offset, P + tensor(m, "b2.bias")->offset, 1e-3,
           train, st + 8, st + 14, pat, &np);
    W = P + tensor(m, "head.weight")->offset;
    B = P + tensor(m, "head.bias")->offset;
    for (int i = 0; i < N; i++) {
        double z[3], mx, sum = 0.0;

        for (int o = 0; o < 3; o++) {
            z[o] = B[o];
            for (int k = 0; k < 6; k++)
                z[o] += W[o * 6 + k] * h[i * 6 + k];
            if (logits)
                logits[i * 3 + o] = z[o];
        }
        mx = fmax(z[0], fmax(z[1], z[2]));
        for (int o = 0; o < 3; o++)
            sum += exp(z[o] - mx);
        loss += log(sum) + mx - z[y[i]];
    }
    return loss / N;
}

static double *params_double(const fed_model *m, const float *pf)
{
    size_t np = fed_model_nparams(m);
    double *P = malloc(np * sizeof *P);

    assert_non_null(P);
    for (size_t i = 0; i < np; i++)
        P[i] = pf[i];
    return P;
}

/* Training mode: the loss, every trained tensor's gradient against central
 * differences (norm-wise within 1e-4), the untrained ones' gradients 0, and
 * the running statistics after the step as PyTorch's rule gives them. */
static void test_train_gradients(void **state)
{
    fed_model *m = make(*state, 1);
    size_t np = fed_model_nparams(m);
    float x[N * 50], *pf = malloc(np * sizeof *pf), *after = malloc(np * sizeof *after);
    int32_t y[N];
    double *P, st[20], loss;
    unsigned char base[1024], probe[1024];
    fed_step_stats ss = {0};
    int nt;
    const fed_tensor_info *t = fed_model_tensors(m, &nt);
    long checked = 0, skipped = 0;

    batch(x, y);
    assert_int_equal(fed_model_get_params(m, pf), FED_OK);
    P = params_double(m, pf);
    fed_batch b = {.n = N, .x_f32 = x, .y = y};
    assert_int_equal(fed_model_forward_backward(m, &b, &ss), FED_OK);
    loss = ref_loss(m, P, x, y, 1, NULL, st, base);
    assert_true(fabs(ss.loss_sum / N - loss) < 1e-5 * (1.0 + fabs(loss)));
    for (int ti = 0; ti < nt; ti++) {
        const float *g = fed_model_grads_dev(m) + t[ti].offset;
        double num2 = 0.0, diff2 = 0.0;

        if (!(t[ti].flags & FED_TENSOR_TRAINED)) {
            for (size_t k = 0; k < t[ti].numel; k++)
                assert_true(g[k] == 0.0f);
            continue;
        }
        for (size_t k = 0; k < t[ti].numel; k++) {
            size_t i = t[ti].offset + k;
            double keep = P[i], lp, lm, num;

            P[i] = keep + 1e-6;
            lp = ref_loss(m, P, x, y, 1, NULL, NULL, probe);
            if (memcmp(probe, base, N * 100 + N * 6)) {
                P[i] = keep, skipped++;
                continue;
            }
            P[i] = keep - 1e-6;
            lm = ref_loss(m, P, x, y, 1, NULL, NULL, probe);
            P[i] = keep;
            if (memcmp(probe, base, N * 100 + N * 6)) {
                skipped++;
                continue;
            }
            checked++;
            num = (lp - lm) / 2e-6;
            num2 += num * num;
            diff2 += (num - g[k]) * (num - g[k]);
        }
        /* (a bias before batch norm has no gradient: its difference alone) */
        if (sqrt(diff2) >= 1e-4 * sqrt(num2) + 1e-7)
            fail_msg("tensor %s: error %g of %g", t[ti].name, sqrt(diff2), sqrt(num2));
    }
    assert_true(checked > 100 && skipped * 20 < checked);
    /* running = 0.9 running + 0.1 batch (b2: momentum 0.2), the variance
       unbiased: N * P values a channel */
    assert_int_equal(fed_model_get_params(m, after), FED_OK);
    for (int c = 0; c < 4; c++) {
        assert_true(fabs(after[tensor(m, "b1.running_mean")->offset + c] - 0.1 * st[c]) < 1e-6);
        assert_true(fabs(after[tensor(m, "b1.running_var")->offset + c] -
                         (0.9 + 0.1 * st[4 + c] * 150.0 / 149.0)) < 1e-6);
    }
    for (int c = 0; c < 6; c++) {
        assert_true(fabs(after[tensor(m, "b2.running_mean")->offset + c] - 0.2 * st[8 + c]) <
                    1e-6);
        assert_true(fabs(after[tensor(m, "b2.running_var")->offset + c] -
                         (0.8 + 0.2 * st[14 + c] * 6.0 / 5.0)) < 1e-6);
    }
    assert_true(after[tensor(m, "b1.num_batches_tracked")->offset] == 1.0f);
    assert_true(after[tensor(m, "b2.num_batches_tracked")->offset] == 1.0f);
    free(P);
    free(pf);
    free(after);
    fed_model_free(m);
}

/* Evaluation normalizes with the running statistics (here those of three
 * training forwards), training's forward with the batch's. */
static void test_eval_mode(void **state)
{
    fed_model *m = make(*state, 1);
    size_t np = fed_model_nparams(m);
    float x[N * 50], *pf = malloc(np * sizeof *pf), out[N * 3];
    int32_t y[N];
    double *P, ref[N * 3];

    batch(x, y);
    fed_batch b = {.n = N, .x_f32 = x, .y = y};
    for (int k = 0; k < 3; k++) {
        x[k] += 1.0f; /* three batches a little apart */
        assert_int_equal(fed_model_logits_train(m, &b, out), FED_OK);
    }
    assert_int_equal(fed_model_get_params(m, pf), FED_OK);
    assert_true(pf[tensor(m, "b1.num_batches_tracked")->offset] == 3.0f);
    P = params_double(m, pf);
    assert_int_equal(fed_model_logits(m, &b, out), FED_OK);
    ref_loss(m, P, x, y, 0, ref, NULL, (unsigned char[1024]){0});
    for (int i = 0; i < N * 3; i++)
        assert_true(fabs(out[i] - ref[i]) < 1e-5 * (1.0 + fabs(ref[i])));
    /* the forward in evaluation changes nothing */
    {
        float *again = malloc(np * sizeof *again);

        assert_int_equal(fed_model_get_params(m, again), FED_OK);
        assert_memory_equal(again, pf, np * sizeof *pf);
        free(again);
    }
    assert_int_equal(fed_model_logits_train(m, &b, out), FED_OK);
    ref_loss(m, P, x, y, 1, ref, NULL, (unsigned char[1024]){0});
    for (int i = 0; i < N * 3; i++)
        assert_true(fabs(out[i] - ref[i]) < 1e-5 * (1.0 + fabs(ref[i])));
    free(P);
    free(pf);
    fed_model_free(m);
}

/* The batch split in 1, 2 or 3 shards: b1's running statistics (of the
 * conv's output, made a sample at a time) bit for bit, the batch
 * statistics being summed whole per channel; every other value within
 * rounding (a linear layer's GEMM over fewer rows may round otherwise). */
static void test_shards_same_bits(void **state)
{
    float x[N * 50], *p[3], *g[3];
    int32_t y[N];
    size_t np = 0;

    batch(x, y);
    for (int s = 0; s < 3; s++) {
        fed_model *m = make(*state, s + 1);
        fed_batch b = {.n = N, .x_f32 = x, .y = y};

        np = fed_model_nparams(m);
        p[s] = malloc(np * sizeof(float));
        g[s] = malloc(np * sizeof(float));
        assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_OK);
        assert_int_equal(fed_model_get_params(m, p[s]), FED_OK);
        memcpy(g[s], fed_model_grads_dev(m), np * sizeof(float));
        fed_model_free(m);
    }
    for (int s = 1; s < 3; s++) {
        assert_memory_equal(p[s] + 76, p[0] + 76, 9 * sizeof(float)); /* b1's statistics */
        for (size_t i = 0; i < np; i++) {
            assert_true(fabsf(p[s][i] - p[0][i]) <= 1e-6f * (1.0f + fabsf(p[0][i])));
            assert_true(fabsf(g[s][i] - g[0][i]) <= 1e-5f * (1.0f + fabsf(g[0][i])));
        }
    }
    for (int s = 0; s < 3; s++) {
        free(p[s]);
        free(g[s]);
    }
    /* a linear layer 0 split by columns, then batch norm at once (its
       statistics' phase right after the column phase) */
    {
        world *w = *state;
        fed_model *m[2];
        float out[2][N * 3], lo[2][N * 3];
        fed_rng rng;

        for (int k = 0; k < 2; k++) {
            assert_int_equal(fed_model_new("g:L8,N,R,L", IN, w->be, w->pool, 1 + k, N, &m[k]),
                             FED_OK);
            fed_rng_seed(&rng, 5);
            assert_int_equal(fed_model_init(m[k], &rng), FED_OK);
            fed_batch b = {.n = N, .x_f32 = x, .y = y};
            assert_int_equal(fed_model_logits_train(m[k], &b, out[k]), FED_OK);
            assert_int_equal(fed_model_logits(m[k], &b, lo[k]), FED_OK);
        }
        for (int i = 0; i < N * 3; i++) {
            assert_true(fabsf(out[1][i] - out[0][i]) <= 1e-5f * (1.0f + fabsf(out[0][i])));
            assert_true(fabsf(lo[1][i] - lo[0][i]) <= 1e-5f * (1.0f + fabsf(lo[0][i])));
        }
        fed_model_free(m[0]);
        fed_model_free(m[1]);
    }
}

/* Weight decay, momentum and Adam never touch the running statistics: a
 * step's statistics are its forward's, whichever optimizer runs, fused
 * into the backward or after it. */
static void test_optimizers_skip_stats(void **state)
{
    float x[N * 50], out[N * 3];
    int32_t y[N];
    fed_model *ref = make(*state, 2);
    size_t np = fed_model_nparams(ref);
    float *want = malloc(np * sizeof *want), *got = malloc(np * sizeof *got);
    const char *stats[] = {"b1.running_mean", "b1.running_var", "b1.num_batches_tracked",
                           "b2.running_mean", "b2.running_var", "b2.num_batches_tracked"};

    batch(x, y);
    fed_batch b = {.n = N, .x_f32 = x, .y = y};
    assert_int_equal(fed_model_logits_train(ref, &b, out), FED_OK);
    assert_int_equal(fed_model_get_params(ref, want), FED_OK);
    for (int kind = 0; kind < 2; kind++) {
        fed_model *m = make(*state, 2);
        fed_optim *o = NULL;
        fed_optim_cfg oc;

        fed_optim_cfg_default(&oc, kind ? FED_OPTIM_ADAM : FED_OPTIM_SGD);
        oc.weight_decay = 0.5f;
        oc.prox_mu = 0.1f;
        assert_int_equal(fed_optim_new(&oc, m, &o), FED_OK);
        assert_int_equal(fed_optim_train_step(o, m, &b, NULL), FED_OK); /* fused */
        assert_int_equal(fed_model_get_params(m, got), FED_OK);
        for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++) {
            const fed_tensor_info *t = tensor(m, stats[i]);

            assert_memory_equal(got + t->offset, want + t->offset, t->numel * sizeof *got);
        }
        assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_OK);
        assert_int_equal(fed_model_get_params(m, want), FED_OK);
        assert_int_equal(fed_optim_step(o, m), FED_OK); /* after the backward */
        assert_int_equal(fed_model_get_params(m, got), FED_OK);
        for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++) {
            const fed_tensor_info *t = tensor(m, stats[i]);

            assert_memory_equal(got + t->offset, want + t->offset, t->numel * sizeof *got);
        }
        assert_int_equal(fed_model_get_params(ref, want), FED_OK);
        /* while the trained tensors moved */
        assert_memory_not_equal(got + tensor(m, "b1.weight")->offset,
                                want + tensor(m, "b1.weight")->offset, 4 * sizeof *got);
        fed_optim_free(o);
        fed_model_free(m);
    }
    free(want);
    free(got);
    fed_model_free(ref);
}

/* PyTorch's state_dict names, shapes and order; which are trained; the
 * parameter count and the initial values. */
static void test_tensors(void **state)
{
    fed_model *m = make(*state, 1);
    int nt;
    const fed_tensor_info *t = fed_model_tensors(m, &nt);
    const char *names[] = {"c1.weight",        "c1.bias",        "b1.weight",
                           "b1.bias",          "b1.running_mean", "b1.running_var",
                           "b1.num_batches_tracked", "fc.weight", "fc.bias",
                           "b2.weight",        "b2.bias",        "b2.running_mean",
                           "b2.running_var",   "b2.num_batches_tracked", "head.weight",
                           "head.bias"};
    /* batch norm's are all a norm's (--local-bn); its statistics not trained */
    const unsigned TS = FED_TENSOR_TRAINED | FED_TENSOR_SHARED, NT = TS | FED_TENSOR_NORM,
                   ST = FED_TENSOR_SHARED | FED_TENSOR_NORM, CT = ST | FED_TENSOR_INT64;
    const unsigned flags[] = {TS, TS, NT, NT, ST, ST, CT, TS, TS, NT, NT, ST, ST, CT, TS, TS};
    float *p = malloc(fed_model_nparams(m) * sizeof *p);
    size_t np = 0;
    char why[256];

    assert_int_equal(nt, 16);
    for (int i = 0; i < nt; i++) {
        assert_string_equal(t[i].name, names[i]);
        assert_int_equal(t[i].flags, flags[i]);
    }
    assert_int_equal(t[6].ndim, 0);
    assert_int_equal(t[6].numel, 1);
    assert_int_equal(t[5].ndim, 1);
    assert_int_equal(t[5].shape[0], 4);
    assert_int_equal(t[12].shape[0], 6);
    assert_int_equal(fed_model_graph_explain("bn", net, NET_COUNT, IN, &np, why, sizeof why),
                     FED_OK);
    assert_int_equal(np, 4 * 18 + 4 + 4 * 4 + 1 + 6 * 100 + 6 + 6 * 4 + 1 + 3 * 6 + 3);
    assert_int_equal(fed_model_get_params(m, p), FED_OK);
    for (int c = 0; c < 4; c++) {
        assert_true(p[t[2].offset + c] == 1.0f && p[t[3].offset + c] == 0.0f);
        assert_true(p[t[4].offset + c] == 0.0f && p[t[5].offset + c] == 1.0f);
    }
    assert_true(p[t[6].offset] == 0.0f);
    free(p);
    fed_model_free(m);
}

/* The "g:" spec (N, eps then momentum, in the fewest digits that give them
 * back) and the model file's [batchnorm] keys, with their refusals. */
static void test_spec_and_file(void **state)
{
    world *w = *state;
    char spec[FED_MODEL_SPEC_MAX], why[512];
    fed_model *a = NULL;
    fed_model_cfg *c = NULL;
    const fed_model_node *nodes;
    int count;
    static const char file[] = "[input] shape = 2,5,5\n"
                               "[conv] name = c1 out = 4 kernel = 3 padding = 1\n"
                               "[batchnorm] name = b1\n[relu]\n[flatten]\n"
                               "[linear] name = fc out = 6\n"
                               "[batchnorm] name = b2 eps = 1e-3 momentum = 0.2\n[relu]\n"
                               "[linear] name = head out = classes\n[output] classes = 3\n";

    assert_int_equal(fed_model_graph_spec(net, NET_COUNT, spec, sizeof spec), FED_OK);
    assert_string_equal(spec, "g:c1=C4k3p1,b1=N,R,F,fc=L6,b2=Ne0.001m0.2,R,head=L");
    assert_int_equal(fed_model_new(spec, IN, w->be, NULL, 1, N, &a), FED_OK);
    assert_int_equal(fed_model_nparams(a), 4 * 18 + 4 + 4 * 4 + 1 + 6 * 100 + 6 + 6 * 4 + 1 + 21);
    fed_model_free(a);
    assert_int_equal(fed_model_cfg_parse("bn.cfg", file, strlen(file), &c, why, sizeof why),
                     FED_OK);
    nodes = fed_model_cfg_nodes(c, 3, &count);
    assert_int_equal(count, NET_COUNT);
    assert_string_equal(nodes[5].kind, "batchnorm");
    assert_true(nodes[5].eps == 1e-3 && nodes[5].momentum == 0.2);
    assert_int_equal(fed_model_cfg_spec(c, spec, sizeof spec, why, sizeof why), FED_OK);
    assert_string_equal(spec, "g:c1=C4k3p1,b1=N,R,F,fc=L6,b2=Ne0.001m0.2,R,head=L");
    fed_model_cfg_free(c);
    /* refusals: the spec's options, the file's values and keys */
    assert_int_equal(fed_model_spec_explain("g:L6,Nm0,L", IN, why, sizeof why), FED_ERR_SPEC);
    assert_int_equal(fed_model_spec_explain("g:L6,Nm0.1e0.01,L", IN, why, sizeof why),
                     FED_ERR_SPEC);
    assert_int_equal(fed_model_spec_explain("g:L6,Nk3,L", IN, why, sizeof why), FED_ERR_SPEC);
    assert_int_equal(fed_model_spec_explain("g:L6,Nm1.5,L", IN, why, sizeof why), FED_ERR_SHAPE);
    assert_string_equal(why, "model 'g:L6,Nm1.5,L': node 1 (batchnorm '1') on input 6x1x1: "
                             "momentum and eps must be in (0, 1]");
    assert_int_equal(fed_model_spec_explain("g:L6,Ne1e-05m0.5,L", IN, why, sizeof why), FED_OK);
    {
        static const char *bad[][2] = {
            {"[input] features = 4\n[batchnorm] momentum = 0\n[linear] out = 2\n",
             "bn.cfg:2: [batchnorm] momentum: '0' is not a decimal number in (0, 1]"},
            {"[input] features = 4\n[batchnorm] eps = 0x1p-3\n[linear] out = 2\n",
             "bn.cfg:2: [batchnorm] eps: '0x1p-3' is not a decimal number in (0, 1]"},
            {"[input] features = 4\n[batchnorm] out = 3\n[linear] out = 2\n",
             "bn.cfg:2: [batchnorm]: unknown key 'out' (name, input, momentum, eps)"},
        };

        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            assert_int_equal(fed_model_cfg_parse("bn.cfg", bad[i][0], strlen(bad[i][0]), &c, why,
                                                 sizeof why),
                             FED_ERR_SPEC);
            assert_string_equal(why, bad[i][1]);
        }
    }
}

/* DP-SGD refuses batch norm by the layer's name and names group norm; a
 * backend without the batch-norm kernels (the CUDA plugin's) refuses the
 * model by the layer's name. */
static void test_refusals(void **state)
{
    world *w = *state;
    fed_model *m = make(w, 1);
    fed_backend nobn = *w->be;
    float x[N * 50];
    int32_t y[N];
    char why[320];

    batch(x, y);
    fed_batch b = {.n = N, .x_f32 = x, .y = y};
    assert_int_equal(fed_model_dp_check(m, why, sizeof why), FED_ERR_UNSUPPORTED);
    assert_string_equal(why, "model: DP-SGD cannot train layer 'b1' (batchnorm): a sample's "
                             "gradient depends on the rest of its batch, so no clip bounds it; "
                             "use groupnorm, whose statistics are each sample's own");
    fed_test_log_capture(FED_LOG_DEBUG);
    assert_int_equal(fed_model_dp_grads(m, &b, 1.0f, 1.0f, 0, NULL, NULL), FED_ERR_UNSUPPORTED);
    assert_string_equal(fed_test_log_last(), why);
    fed_test_log_default();
    /* --recompute takes it: its statistics phase runs once a step
       (test_recompute checks the running statistics bit for bit) */
    assert_int_equal(fed_model_set_recompute(m, 2), FED_OK);
    assert_int_equal(fed_model_recompute(m), 2);
    fed_model_free(m);
    m = (fed_model *)1;
    nobn.name = "nobn";
    nobn.caps &= ~FED_BACKEND_CAP_BATCHNORM;
    fed_test_log_capture(FED_LOG_DEBUG);
    assert_int_equal(fed_model_new_graph("bn", net, NET_COUNT, IN, &nobn, NULL, 1, N, &m),
                     FED_ERR_UNSUPPORTED);
    assert_null(m);
    assert_string_equal(fed_test_log_last(),
                        "model: layer 'b1' (batchnorm) needs kernels the nobn backend lacks");
    fed_test_log_default();
}

/* --precision bf16 rounds the GEMMs' operands only: batch norm stays fp32.
 * A batch norm on the input, before any GEMM, gives the same running
 * statistics and counter bit for bit in both precisions, and the batch
 * (in evaluation, the running statistics) the same logits within bf16's
 * rounding of the linear layer after it. Skipped without AVX512-BF16. */
static void test_bf16_keeps_fp32(void **state)
{
    world *w = *state;
    fed_model *m[2] = {NULL, NULL};
    fed_model_shape in = {3, 4, 4, 5, 0};
    float x[N * 48], p[2][300], out[2][N * 5];
    int32_t y[N];
    fed_rng rng;
    char why[256];
    int nt;
    const fed_tensor_info *t;

    (void)w;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16"))
        skip();
    fed_rng_seed(&rng, 5);
    for (int i = 0; i < N * 48; i++)
        x[i] = (float)(3.0 * fed_rng_normal(&rng) + 1.0);
    for (int i = 0; i < N; i++)
        y[i] = (int32_t)fed_rng_below(&rng, 5);
    fed_batch b = {.n = N, .x_f32 = x, .y = y};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(fed_model_new("g:bn=N,F,fc=L", in, w->be, NULL, 1, N, &m[k]), FED_OK);
        fed_rng_seed(&rng, 3);
        assert_int_equal(fed_model_init(m[k], &rng), FED_OK);
        assert_int_equal(fed_model_set_precision(m[k], k ? FED_PRECISION_BF16 : FED_PRECISION_FP32,
                                                 why, sizeof why),
                         FED_OK);
        assert_int_equal(fed_model_logits_train(m[k], &b, out[k]), FED_OK);
        assert_int_equal(fed_model_logits(m[k], &b, out[k]), FED_OK);
        assert_int_equal(fed_model_nparams(m[k]), 13 + 48 * 5 + 5);
        assert_int_equal(fed_model_get_params(m[k], p[k]), FED_OK);
    }
    t = fed_model_tensors(m[0], &nt);
    for (int i = 0; i < nt; i++) {
        if (strncmp(t[i].name, "bn.", 3))
            continue;
        assert_memory_equal(p[0] + t[i].offset, p[1] + t[i].offset,
                            t[i].numel * sizeof(float));
    }
    assert_float_equal(p[1][tensor(m[1], "bn.num_batches_tracked")->offset], 1.0f, 0.0f);
    assert_float_not_equal(p[1][tensor(m[1], "bn.running_var")->offset], 1.0f, 1e-3f);
    for (int i = 0; i < N * 5; i++) /* bf16 operands: 8 bits of mantissa */
        assert_float_equal(out[0][i], out[1][i], 0.05f * (1.0f + fabsf(out[0][i])));
    fed_model_free(m[0]);
    fed_model_free(m[1]);
}

/* A small net with batch norm of both kinds learns: 3 epochs over 6,000
 * training images (SGD lr 0.05, momentum 0.9, batch 64, two shards), then
 * the test split's first 2,000 in evaluation mode (the running statistics)
 * at 0.82 or better (0.8535 measured; 0.8350 without the batch norms). */
static void test_learns_fashion(void **state)
{
    world *w = *state;
    fed_dataset *tr = NULL, *te = NULL;
    fed_model *m = NULL;
    fed_optim *o = NULL;
    fed_trainer *t = NULL;
    fed_optim_cfg oc;
    fed_rng rng;
    fed_step_stats st = {0};
    uint32_t *idx;
    const char *spec = "g:c1=C8k3s2p1,b1=N,R,F,fc1=L64,b2=N,R,fc=L";
    int have = fed_test_fashion_open(&tr, &te);

    fed_test_need_fashion(have);
    assert_int_equal(fed_model_new(spec, tr->shape, w->be, w->pool, 2, 64, &m), FED_OK);
    fed_rng_seed(&rng, 1);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    fed_optim_cfg_default(&oc, FED_OPTIM_SGD);
    oc.lr = 0.05f;
    assert_int_equal(fed_optim_new(&oc, m, &o), FED_OK);
    assert_int_equal(fed_trainer_new(m, o, tr, 64, &t), FED_OK);
    idx = malloc(6000 * sizeof *idx);
    for (uint32_t i = 0; i < 6000; i++)
        idx[i] = i;
    for (int e = 0; e < 3; e++)
        assert_int_equal(fed_trainer_epoch(t, idx, 6000, &rng, NULL), FED_OK);
    {
        fed_dataset part = *te;

        part.n = 2000;
        assert_int_equal(fed_train_evaluate_all(m, &part, &st), FED_OK);
    }
    printf("batch-norm net, 3 epochs of 6,000 images: test accuracy %.4f on 2,000\n",
           (double)st.correct / (double)st.samples);
    assert_true(st.samples == 2000 && st.correct >= 1640);
    free(idx);
    fed_trainer_free(t);
    fed_optim_free(o);
    fed_model_free(m);
    fed_data_free(tr);
    fed_data_free(te);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_gradients),  cmocka_unit_test(test_eval_mode),
        cmocka_unit_test(test_shards_same_bits), cmocka_unit_test(test_optimizers_skip_stats),
        cmocka_unit_test(test_tensors),          cmocka_unit_test(test_spec_and_file),
        cmocka_unit_test(test_refusals),         cmocka_unit_test(test_bf16_keeps_fp32),
        cmocka_unit_test(test_learns_fashion),
    };

    fed_test_log_quiet();
    return cmocka_run_group_tests(tests, world_setup, world_teardown);
}
