/* test_graph.c - models built from graphs of nodes (fed_model_new_graph):
 * strided, padded and dilated convolutions and pooling windows checked
 * against central differences of the test's own double-precision forward,
 * the cnn preset and its graph giving the same model bit for bit, graphs
 * past the old 16-layer/32-tensor caps, tensor flags, FLOPs, refusals
 * with their messages, a backend lacking a capability, and embeddings (the
 * spec, determinism over shards, ids refused, refusals). */
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
#include "model/model.h"
#include "tests/support/support.h"

typedef fed_test_world world;

static int world_setup(void **state) { return fed_test_world_new(state, 1); }
static int world_teardown(void **state) { return fed_test_world_free(state); }

#define NODE(k, nm, o, kern, str, pad, dil)                                                    \
    {.kind = k, .name = nm, .out = o, .kernel = {kern, kern}, .stride = {str, str},            \
     .padding = {pad, pad}, .dilation = {dil, dil}}

/* Node i takes node i - 1's output. */
static void chain(fed_model_node *nodes, int count)
{
    for (int i = 0; i < count; i++)
        nodes[i].input = i - 1;
}

/* ------------------------------------------------- double reference -- */

typedef struct pattern {
    int *v;
    size_t n, cap;
} pattern;

static void pat_push(pattern *p, int v)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 4096;
        p->v = realloc(p->v, p->cap * sizeof *p->v);
        assert_non_null(p->v);
    }
    p->v[p->n++] = v;
}

static const fed_tensor_info *tensor(const fed_model *m, const char *node, const char *what)
{
    int nt;
    const fed_tensor_info *t = fed_model_tensors(m, &nt);
    char name[64];

    snprintf(name, sizeof name, "%s.%s", node, what);
    for (int i = 0; i < nt; i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    fail_msg("no tensor %s", name);
    return NULL;
}

static int stride_of(const fed_model_node *nd, int pool)
{
    return nd->stride[0] ? nd->stride[0] : pool ? nd->kernel[0] : 1;
}

/* Mean cross-entropy of the batch under params P (double), read straight
 * off the node list with direct loops (square windows); pat gets every
 * ReLU sign and max-pool winner. */
static double ref_loss(const fed_model *m, const fed_model_node *nodes, int count,
                       const double *P, const double *X, const int32_t *Y, int n, pattern *pat)
{
    fed_model_shape in = fed_model_input(m);
    size_t cap = 1 << 16;
    double *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b), loss = 0.0;

    for (int s = 0; s < n; s++) {
        int c = in.c, h = in.h, w = in.w;

        memcpy(a, X + (size_t)s * c * h * w, (size_t)c * h * w * sizeof *a);
        for (int q = 0; q < count; q++) {
            const fed_model_node *nd = &nodes[q];
            char idx[16];
            const char *name = nd->name;
            int k = nd->kernel[0], pad = nd->padding[0];
            int d = nd->dilation[0] ? nd->dilation[0] : 1;

            if (!name) {
                snprintf(idx, sizeof idx, "%d", q);
                name = idx;
            }
            if (!strcmp(nd->kind, "conv")) {
                const double *W = P + tensor(m, name, "weight")->offset;
                const double *B = P + tensor(m, name, "bias")->offset;
                int st = stride_of(nd, 0), oh = (h + 2 * pad - d * (k - 1) - 1) / st + 1;
                int ow = (w + 2 * pad - d * (k - 1) - 1) / st + 1;

                for (int o = 0; o < nd->out; o++)
                    for (int i = 0; i < oh; i++)
                        for (int j = 0; j < ow; j++) {
                            double z = B[o];

                            for (int ci = 0; ci < c; ci++)
                                for (int ki = 0; ki < k; ki++)
                                    for (int kj = 0; kj < k; kj++) {
                                        int r = i * st - pad + ki * d, cc = j * st - pad + kj * d;

                                        if (r >= 0 && r < h && cc >= 0 && cc < w)
                                            z += W[((o * c + ci) * k + ki) * k + kj] *
                                                 a[(ci * h + r) * w + cc];
                                    }
                            b[(o * oh + i) * ow + j] = z;
                        }
                c = nd->out;
                h = oh;
                w = ow;
            } else if (!strcmp(nd->kind, "linear")) {
                const double *W = P + tensor(m, name, "weight")->offset;
                const double *B = P + tensor(m, name, "bias")->offset;
                int inn = c * h * w;

                for (int o = 0; o < nd->out; o++) {
                    double z = B[o];

                    for (int i = 0; i < inn; i++)
                        z += W[(size_t)o * inn + i] * a[i];
                    b[o] = z;
                }
                c = nd->out;
                h = w = 1;
            } else if (!strcmp(nd->kind, "maxpool") || !strcmp(nd->kind, "avgpool")) {
                int st = stride_of(nd, 1), oh = (h + 2 * pad - k) / st + 1;
                int ow = (w + 2 * pad - k) / st + 1, mx = !strcmp(nd->kind, "maxpool");

                for (int o = 0; o < c; o++)
                    for (int i = 0; i < oh; i++)
                        for (int j = 0; j < ow; j++) {
                            double best = -INFINITY, sum = 0.0;
                            int win = -1;

                            for (int ki = 0; ki < k; ki++)
                                for (int kj = 0; kj < k; kj++) {
                                    int r = i * st - pad + ki, cc = j * st - pad + kj;
                                    double v;

                                    if (r < 0 || r >= h || cc < 0 || cc >= w)
                                        continue;
                                    v = a[(o * h + r) * w + cc];
                                    sum += v;
                                    if (v > best) {
                                        best = v;
                                        win = r * w + cc;
                                    }
                                }
                            if (mx)
                                pat_push(pat, win);
                            b[(o * oh + i) * ow + j] = mx ? best : sum / (k * k);
                        }
                h = oh;
                w = ow;
            } else if (!strcmp(nd->kind, "relu")) {
                for (int i = 0; i < c * h * w; i++) {
                    pat_push(pat, a[i] > 0);
                    b[i] = a[i] > 0 ? a[i] : 0.0;
                }
            } else { /* flatten */
                memcpy(b, a, (size_t)c * h * w * sizeof *b);
                c = c * h * w;
                h = w = 1;
            }
            memcpy(a, b, (size_t)c * h * w * sizeof *a);
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

static fed_model *make_graph(world *w, const fed_model_node *nodes, int count, fed_model_shape in,
                             int shards, int max_batch, uint64_t seed)
{
    fed_model *m = NULL;
    fed_rng rng;

    assert_int_equal(fed_model_new_graph("g", nodes, count, in, w->be, w->pool, shards,
                                         max_batch, &m),
                     FED_OK);
    fed_rng_seed(&rng, seed);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    return m;
}

/* The model's gradient of every tensor against central differences (h =
 * 1e-6) of the reference, norm-wise relative error < 1e-4 per tensor;
 * coordinates whose +-h flips a ReLU sign or a max-pool winner are
 * skipped (fewer than 5% may be). The initial parameters are scaled by
 * gain (a deep net's signal fades under PyTorch's init). */
static void grad_check(world *w, const fed_model_node *nodes, int count, fed_model_shape in,
                       int n, int shards, float gain)
{
    fed_model *m = make_graph(w, nodes, count, in, shards, n, 42);
    size_t np = fed_model_nparams(m);
    int F = in.c * in.h * in.w, nt;
    const fed_tensor_info *t = fed_model_tensors(m, &nt);
    float *pf = malloc(np * sizeof *pf), *g = malloc(np * sizeof *g);
    float *x = malloc((size_t)n * F * sizeof *x);
    double *P = malloc(np * sizeof *P), *X = malloc((size_t)n * F * sizeof *X), loss0;
    int32_t *y = malloc(n * sizeof *y);
    fed_step_stats st = {0};
    pattern base = {0}, probe = {0};
    long skipped = 0, checked = 0;
    fed_rng rng;

    fed_rng_seed(&rng, 7);
    for (int i = 0; i < n * F; i++)
        X[i] = x[i] = (float)fed_rng_normal(&rng);
    for (int i = 0; i < n; i++)
        y[i] = (int32_t)fed_rng_below(&rng, (uint64_t)in.classes);
    assert_int_equal(fed_model_get_params(m, pf), FED_OK);
    for (size_t i = 0; i < np; i++)
        P[i] = pf[i] *= gain;
    assert_int_equal(fed_model_set_params(m, pf), FED_OK);
    fed_batch b = {.n = n, .x_f32 = x, .y = y};
    assert_int_equal(fed_model_forward_backward(m, &b, &st), FED_OK);
    memcpy(g, fed_model_grads_dev(m), np * sizeof *g);
    loss0 = ref_loss(m, nodes, count, P, X, y, n, &base);
    assert_true(fabs(st.loss_sum / n - loss0) < 1e-5 * (1.0 + fabs(loss0)));
    for (int ti = 0; ti < nt; ti++) {
        double num2 = 0.0, diff2 = 0.0;

        for (size_t k = 0; k < t[ti].numel; k++) {
            size_t i = t[ti].offset + k;
            double keep = P[i], lp, lm, num;
            int kink;

            P[i] = keep + 1e-6;
            probe.n = 0;
            lp = ref_loss(m, nodes, count, P, X, y, n, &probe);
            kink = probe.n != base.n || memcmp(probe.v, base.v, base.n * sizeof *base.v);
            P[i] = keep - 1e-6;
            probe.n = 0;
            lm = ref_loss(m, nodes, count, P, X, y, n, &probe);
            kink |= probe.n != base.n || memcmp(probe.v, base.v, base.n * sizeof *base.v);
            P[i] = keep;
            if (kink) {
                skipped++;
                continue;
            }
            checked++;
            num = (lp - lm) / 2e-6;
            num2 += num * num;
            diff2 += (num - g[i]) * (num - g[i]);
        }
        if (num2 > 0.0 && sqrt(diff2 / num2) >= 1e-4)
            fail_msg("shards %d tensor %s: relative error %g", shards, t[ti].name,
                     sqrt(diff2 / num2));
    }
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

/* stride 2 with padding, dilation 2 with padding, a 3x3 max pool of stride
 * 2 with padding 1, a padded 2x2 average pool of stride 1, then linear */
static fed_model_node windows_graph[] = {
    NODE("conv", "stem", 4, 3, 2, 1, 0),  NODE("relu", NULL, 0, 0, 0, 0, 0),
    NODE("conv", "c2", 3, 3, 1, 2, 2),    NODE("relu", NULL, 0, 0, 0, 0, 0),
    NODE("maxpool", NULL, 0, 3, 2, 1, 0), NODE("avgpool", NULL, 0, 2, 1, 1, 0),
    NODE("flatten", NULL, 0, 0, 0, 0, 0), NODE("linear", "fc", 6, 0, 0, 0, 0),
    NODE("relu", NULL, 0, 0, 0, 0, 0),    NODE("linear", "head", 5, 0, 0, 0, 0),
};
#define WINDOWS_COUNT ((int)(sizeof windows_graph / sizeof windows_graph[0]))

static void test_grad_windows(void **state)
{
    fed_model_shape in = {2, 11, 10, 5, 0};
    const char *names[] = {"stem.weight", "stem.bias", "c2.weight", "c2.bias",
                           "fc.weight",   "fc.bias",   "head.weight", "head.bias"};
    /* 11x10 -> conv s2 p1: 6x5 -> conv d2 p2: 6x5 -> maxpool 3/2/1: 3x3
       -> avgpool 2/1/1: 4x4, 3 channels: 48 features */
    const int shapes[][4] = {{4, 2, 3, 3}, {4}, {3, 4, 3, 3}, {3}, {6, 48}, {6}, {5, 6}, {5}};
    fed_model *m;
    int nt;
    const fed_tensor_info *t;
    size_t np = 0;
    char why[256];

    chain(windows_graph, WINDOWS_COUNT);
    assert_int_equal(fed_model_graph_explain("g", windows_graph, WINDOWS_COUNT, in, &np, why,
                                             sizeof why),
                     FED_OK);
    assert_int_equal(np, 4 * 18 + 4 + 3 * 36 + 3 + 6 * 48 + 6 + 5 * 6 + 5);
    m = make_graph(*state, windows_graph, WINDOWS_COUNT, in, 1, 4, 1);
    t = fed_model_tensors(m, &nt);
    assert_int_equal(nt, 8);
    for (int i = 0; i < nt; i++) {
        assert_string_equal(t[i].name, names[i]);
        for (int d = 0; d < t[i].ndim; d++)
            assert_int_equal(t[i].shape[d], shapes[i][d]);
        assert_int_equal(t[i].flags, FED_TENSOR_TRAINED | FED_TENSOR_SHARED);
    }
    assert_int_equal(fed_model_nparams(m), np);
    fed_model_free(m);
    grad_check(*state, windows_graph, WINDOWS_COUNT, in, 3, 1, 1.0f);
    grad_check(*state, windows_graph, WINDOWS_COUNT, in, 3, 2, 1.0f);
}

/* The cnn preset and the same modules as a graph: the same tensors, the
 * same initial parameters and the same gradients, bit for bit. */
static void test_cnn_as_graph(void **state)
{
    world *w = *state;
    fed_model_node nodes[] = {
        NODE("conv", NULL, 32, 5, 0, 0, 0),   NODE("relu", NULL, 0, 0, 0, 0, 0),
        NODE("maxpool", NULL, 0, 2, 0, 0, 0), NODE("conv", NULL, 64, 5, 0, 0, 0),
        NODE("relu", NULL, 0, 0, 0, 0, 0),    NODE("maxpool", NULL, 0, 2, 0, 0, 0),
        NODE("flatten", NULL, 0, 0, 0, 0, 0), NODE("linear", NULL, 512, 0, 0, 0, 0),
        NODE("relu", NULL, 0, 0, 0, 0, 0),    NODE("linear", NULL, 10, 0, 0, 0, 0),
    };
    fed_model_shape in = {1, 28, 28, 10, 0};
    fed_model *a = NULL, *b;
    const fed_tensor_info *ta, *tb;
    int na, nb, n = 6;
    float x[6 * 784];
    int32_t y[6];
    fed_rng rng;
    fed_step_stats sa = {0}, sb = {0};

    chain(nodes, 10);
    assert_int_equal(fed_model_new("cnn", in, w->be, w->pool, 2, n, &a), FED_OK);
    fed_rng_seed(&rng, 3);
    assert_int_equal(fed_model_init(a, &rng), FED_OK);
    b = make_graph(w, nodes, 10, in, 2, n, 3);
    ta = fed_model_tensors(a, &na);
    tb = fed_model_tensors(b, &nb);
    assert_int_equal(na, nb);
    for (int i = 0; i < na; i++) {
        assert_string_equal(ta[i].name, tb[i].name);
        assert_int_equal(ta[i].offset, tb[i].offset);
        assert_int_equal(ta[i].numel, tb[i].numel);
        assert_memory_equal(ta[i].shape, tb[i].shape, sizeof ta[i].shape);
    }
    assert_true(fed_model_flops_per_sample(a) == fed_model_flops_per_sample(b));
    fed_rng_seed(&rng, 9);
    for (int i = 0; i < n * 784; i++)
        x[i] = (float)fed_rng_normal(&rng);
    for (int i = 0; i < n; i++)
        y[i] = i % 10;
    fed_batch batch = {.n = n, .x_f32 = x, .y = y};
    assert_int_equal(fed_model_forward_backward(a, &batch, &sa), FED_OK);
    assert_int_equal(fed_model_forward_backward(b, &batch, &sb), FED_OK);
    assert_memory_equal(fed_model_params_dev(a), fed_model_params_dev(b),
                        fed_model_nparams(a) * sizeof(float));
    assert_memory_equal(fed_model_grads_dev(a), fed_model_grads_dev(b),
                        fed_model_nparams(a) * sizeof(float));
    assert_true(sa.loss_sum == sb.loss_sum);
    fed_model_free(a);
    fed_model_free(b);
}

/* Stride-1 convs whose input gradient is a conv of dy (same padding, out
 * channels no more than in: c2, c3) beside one that keeps W^T dy and
 * col2im (c4: unpadded, more out channels than in), against central
 * differences on 1 and 2 shards. */
static fed_model_node same_graph[] = {
    NODE("conv", "stem", 4, 3, 2, 1, 1), NODE("conv", "c2", 4, 3, 1, 1, 1),
    NODE("relu", NULL, 0, 0, 0, 0, 0),   NODE("conv", "c3", 3, 3, 1, 1, 1),
    NODE("relu", NULL, 0, 0, 0, 0, 0),   NODE("conv", "c4", 5, 2, 1, 0, 1),
    NODE("flatten", NULL, 0, 0, 0, 0, 0), NODE("linear", "head", 4, 0, 0, 0, 0),
};
#define SAME_COUNT ((int)(sizeof same_graph / sizeof same_graph[0]))

static void test_grad_same_convs(void **state)
{
    fed_model_shape in = {2, 9, 8, 4, 0}; /* 9x8 -> stem s2 p1: 5x4 -> 5x4 -> 5x4 -> 4x3 */

    chain(same_graph, SAME_COUNT);
    grad_check(*state, same_graph, SAME_COUNT, in, 3, 1, 1.0f);
    grad_check(*state, same_graph, SAME_COUNT, in, 3, 2, 1.0f);
}

/* "Same" 3 x 3 convs of 8 and 9 input channels, which run as shifted GEMMs
 * (conv_shifted in model.c: a GEMM a kernel offset over a padded copy of
 * the input), beside a 1 x 1 conv (its im2col is its input: im2col), on a
 * 7 x 6 input, against central differences on 1 and 2 shards (2 splits
 * the weight gradients' rows). */
static fed_model_node shifted_graph[] = {
    NODE("conv", "s1", 8, 3, 1, 1, 1),   NODE("relu", NULL, 0, 0, 0, 0, 0),
    NODE("conv", "p1", 9, 1, 1, 0, 1),   NODE("relu", NULL, 0, 0, 0, 0, 0),
    NODE("conv", "s2", 8, 3, 1, 1, 1),   NODE("relu", NULL, 0, 0, 0, 0, 0),
    NODE("flatten", NULL, 0, 0, 0, 0, 0), NODE("linear", "head", 4, 0, 0, 0, 0),
};
#define SHIFTED_COUNT ((int)(sizeof shifted_graph / sizeof shifted_graph[0]))

static void test_grad_shifted_convs(void **state)
{
    fed_model_shape in = {8, 7, 6, 4, 0};

    chain(shifted_graph, SHIFTED_COUNT);
    grad_check(*state, shifted_graph, SHIFTED_COUNT, in, 3, 1, 1.0f);
    grad_check(*state, shifted_graph, SHIFTED_COUNT, in, 3, 2, 1.0f);
}

/* 24 linear layers (48 tensors): past the old caps of 16 layers and 32
 * tensors, and still the right gradients. */
static void test_deep_graph(void **state)
{
    enum { DEPTH = 24, COUNT = 2 * DEPTH - 1 };
    fed_model_node nodes[COUNT];
    fed_model_shape in = {1, 2, 3, 3, 0};
    fed_model *m;
    int nt;

    memset(nodes, 0, sizeof nodes);
    for (int i = 0; i < COUNT; i++) {
        nodes[i].kind = i % 2 ? "relu" : "linear";
        nodes[i].out = i == COUNT - 1 ? 3 : 7;
    }
    chain(nodes, COUNT);
    m = make_graph(*state, nodes, COUNT, in, 1, 4, 5);
    fed_model_tensors(m, &nt);
    assert_int_equal(nt, 2 * DEPTH);
    assert_int_equal(fed_model_nparams(m), 6 * 7 + 7 + (DEPTH - 2) * (7 * 7 + 7) + 7 * 3 + 3);
    fed_model_free(m);
    grad_check(*state, nodes, COUNT, in, 3, 2, 2.5f); /* about He's init: sqrt(6) */
}

/* FLOPs per sample: a conv of stride 2 (layer 0: forward and weight
 * gradient), a 2x2 pool (2 per input value), a linear layer (forward and
 * both gradients). */
static void test_graph_flops(void **state)
{
    fed_model_node nodes[] = {
        NODE("conv", "c", 2, 3, 2, 1, 0),
        NODE("maxpool", NULL, 0, 2, 0, 0, 0),
        NODE("linear", "l", 5, 0, 0, 0, 0),
    };
    fed_model_shape in = {1, 8, 8, 5, 0};
    fed_model *m;

    chain(nodes, 3);
    m = make_graph(*state, nodes, 3, in, 1, 2, 1);
    /* conv: col 9 x 16 per sample times 2 channels, 2 FLOPs a MAC, twice;
       pool 2 x 32; linear 8 -> 5 three times */
    assert_true(fed_model_flops_per_sample(m) == 2.0 * 144 * 2 * 2 + 64 + 2.0 * 40 * 3);
    fed_model_free(m);
}

static void expect_why(const fed_model_node *nodes, int count, fed_model_shape in, fed_err want,
                       const char *msg)
{
    char why[320];

    memset(why, 'x', sizeof why);
    assert_int_equal(fed_model_graph_explain("bad", nodes, count, in, NULL, why, sizeof why),
                     want);
    if (strcmp(why, msg) != 0)
        fail_msg("got \"%s\", want \"%s\"", why, msg);
}

/* expect_why for a graph of node alone. */
static void expect_one(fed_model_node node, fed_model_shape in, fed_err want, const char *msg)
{
    node.input = -1;
    expect_why(&node, 1, in, want, msg);
}

/* Every refusal names the node, its kind and name, and the shape it saw. */
static void test_graph_errors(void **state)
{
    fed_model_shape in = {1, 4, 4, 3, 0};
    fed_model_node two[2] = {NODE("linear", "a", 8, 0, 0, 0, 0),
                             NODE("linear", "b", 3, 0, 0, 0, 0)};
    fed_model_node n1[1];
    fed_model *m = (fed_model *)1;
    world *w = *state;

    chain(two, 2);
    expect_why(two, 2, in, FED_OK, "");
    two[1].kind = "softmax";
    expect_why(two, 2, in, FED_ERR_SPEC,
               "model 'bad': node 1: unknown layer kind 'softmax' (linear, conv, maxpool, "
               "avgpool, global_avgpool, relu, flatten, leaky_relu, gelu, silu, "
               "sigmoid, tanh, bce, add, concat, embedding, numeric, layernorm, groupnorm, dropout, "
               "batchnorm)");
    two[1].kind = "linear";
    two[1].input = -1; /* a branch from the input: node 0 then goes unused */
    expect_why(two, 2, in, FED_ERR_SPEC,
               "model 'bad': node 0 (linear 'a'): no later node takes its output");
    two[1].input = 1;
    expect_why(two, 2, in, FED_ERR_SPEC,
               "model 'bad': node 1 (linear 'b') takes node 1's output: a node takes an "
               "earlier node's (or -1, the model's input)");
    two[1].input = 0;
    two[1].name = "a";
    expect_why(two, 2, in, FED_ERR_SPEC,
               "model 'bad': two tensors are named 'a.weight' (give each layer its own name)");
    two[1].name = "b!";
    expect_why(two, 2, in, FED_ERR_SPEC,
               "model 'bad': node 1 (linear): name 'b!' must be 1 to 23 letters, digits, '_' "
               "or inner '.'");
    two[1].name = "b";
    two[1].out = 4;
    expect_why(two, 2, in, FED_ERR_SHAPE,
               "model 'bad': the last layer gives 4x1x1 values, the loss wants 3 classes");
    expect_one((fed_model_node)NODE("conv", "c", 3, 5, 0, 0, 0), in, FED_ERR_SHAPE,
               "model 'bad': node 0 (conv 'c') on input 1x4x4: the window is larger than the "
               "padded input");
    expect_one((fed_model_node)NODE("maxpool", NULL, 0, 2, 0, 2, 0), in, FED_ERR_SHAPE,
               "model 'bad': node 0 (maxpool '0') on input 1x4x4: padding must be at most half "
               "the kernel");
    expect_one((fed_model_node)NODE("relu", NULL, 0, 0, 0, 0, 0), in, FED_ERR_SHAPE,
               "model 'bad': node 0 (relu '0') on input 1x4x4: a relu must follow a linear, "
               "conv, add, layernorm or groupnorm layer (a relu of its own is not supported "
               "yet)");
    {
        fed_model_node gn = {.kind = "groupnorm", .name = "gn", .groups = 3};
        fed_model_node drop = {.kind = "dropout", .name = "d", .drop_ppm = 1000000};

        expect_one(gn, (fed_model_shape){4, 2, 2, 3, 0}, FED_ERR_SHAPE,
                   "model 'bad': node 0 (groupnorm 'gn') on input 4x2x2: groups must divide "
                   "the input's channels");
        expect_one(drop, in, FED_ERR_SHAPE,
                   "model 'bad': node 0 (dropout 'd') on input 1x4x4: p must be 0 to below 1");
    }
    expect_one((fed_model_node)NODE("flatten", NULL, 0, 0, 0, 0, 0), in, FED_ERR_SPEC,
               "model 'bad': the last layer must be linear or conv (the logits)");
    /* fed_model_new_graph logs the same words and builds nothing */
    n1[0] = (fed_model_node)NODE("flatten", NULL, 0, 0, 0, 0, 0);
    n1[0].input = -1;
    fed_test_log_capture(FED_LOG_DEBUG);
    assert_int_equal(fed_model_new_graph("bad", n1, 1, in, w->be, NULL, 1, 4, &m), FED_ERR_SPEC);
    assert_null(m);
    assert_string_equal(fed_test_log_last(),
                        "model 'bad': the last layer must be linear or conv (the logits)");
    fed_test_log_default();
}

/* A backend without the window kernels (the CPU's table without that
 * capability) is refused a strided convolution, by the layer's name, and
 * still runs the plain ones. */
static void test_backend_caps(void **state)
{
    world *w = *state;
    fed_backend nowin = *w->be;
    fed_model *m = (fed_model *)1;

    nowin.name = "nowin";
    nowin.caps &= ~FED_BACKEND_CAP_WINDOW;
    chain(windows_graph, WINDOWS_COUNT);
    fed_test_log_capture(FED_LOG_DEBUG);
    assert_int_equal(fed_model_new_graph("g", windows_graph, WINDOWS_COUNT,
                                         (fed_model_shape){2, 11, 10, 5, 0}, &nowin, NULL, 1, 4,
                                         &m),
                     FED_ERR_UNSUPPORTED);
    assert_null(m);
    assert_string_equal(fed_test_log_last(),
                        "model: layer 'stem' (conv) needs kernels the nowin backend lacks");
    fed_test_log_default();
    assert_int_equal(fed_model_new("cnn", (fed_model_shape){1, 28, 28, 10, 0}, &nowin, NULL, 1, 4,
                                   &m),
                     FED_OK);
    fed_model_free(m);
    /* an activation of its own runs on the host: a device backend refuses
       it by name */
    nowin.name = "device";
    nowin.caps = w->be->caps & ~FED_BACKEND_CAP_HOST_MEMORY;
    fed_test_log_capture(FED_LOG_DEBUG);
    assert_int_equal(fed_model_new("g:L8,act=G,L", (fed_model_shape){1, 4, 4, 3, 0}, &nowin, NULL,
                                   1, 4, &m),
                     FED_ERR_UNSUPPORTED);
    assert_string_equal(fed_test_log_last(),
                        "model: layer 'act' (gelu) needs kernels the device backend lacks");
    fed_test_log_default();
    assert_int_equal(fed_model_new("g:L8,act=G,L", (fed_model_shape){1, 4, 4, 3, 0}, w->be, NULL,
                                   1, 4, &m),
                     FED_OK);
    fed_model_free(m);
    /* the loss bce: host-computed too, one logit of two classes, last */
    fed_test_log_capture(FED_LOG_DEBUG);
    assert_int_equal(fed_model_new("g:L8,R,L1,B", (fed_model_shape){1, 4, 4, 2, 0}, &nowin, NULL,
                                   1, 4, &m),
                     FED_ERR_UNSUPPORTED);
    assert_string_equal(fed_test_log_last(), "model: the loss bce is computed on the host, which "
                                             "the device backend's memory is not");
    fed_test_log_default();
    {
        char why[256];

        assert_int_equal(fed_model_spec_explain("g:L8,R,L,B", (fed_model_shape){1, 4, 4, 2, 0},
                                                why, sizeof why),
                         FED_ERR_SHAPE);
        assert_string_equal(why, "model 'g:L8,R,L,B': the loss bce takes one logit and two "
                                 "classes; the last layer gives 2x1x1 values, the data has 2 "
                                 "classes");
        assert_int_equal(fed_model_spec_explain("g:L8,B,L1", (fed_model_shape){1, 4, 4, 2, 0}, why,
                                                sizeof why),
                         FED_ERR_SPEC);
        assert_string_equal(why, "model 'g:L8,B,L1': node 1 (bce): the loss must be the last "
                                 "node");
    }
    assert_int_equal(fed_model_new("g:L8,R,L1,B", (fed_model_shape){1, 4, 4, 2, 0}, w->be, NULL, 1,
                                   4, &m),
                     FED_OK);
    assert_int_equal(fed_model_nlogits(m), 1);
    fed_model_free(m);
    /* normalization and dropout need their own kernels: a backend without
       them (CUDA's) refuses each by its layer's name */
    nowin = *w->be;
    nowin.name = "nonorm";
    nowin.caps &= ~FED_BACKEND_CAP_NORM;
    fed_test_log_capture(FED_LOG_DEBUG);
    assert_int_equal(fed_model_new("g:L8,ln=V,R,L", (fed_model_shape){1, 4, 4, 3, 0}, &nowin, NULL,
                                   1, 4, &m),
                     FED_ERR_UNSUPPORTED);
    assert_string_equal(fed_test_log_last(),
                        "model: layer 'ln' (layernorm) needs kernels the nonorm backend lacks");
    assert_int_equal(fed_model_new("g:C4k3,gn=Ug2,F,L", (fed_model_shape){1, 4, 4, 3, 0}, &nowin,
                                   NULL, 1, 4, &m),
                     FED_ERR_UNSUPPORTED);
    assert_string_equal(fed_test_log_last(),
                        "model: layer 'gn' (groupnorm) needs kernels the nonorm backend lacks");
    nowin.name = "nodrop";
    nowin.caps = w->be->caps & ~FED_BACKEND_CAP_DROPOUT;
    assert_int_equal(fed_model_new("g:L8,R,d=Dr100000,L", (fed_model_shape){1, 4, 4, 3, 0}, &nowin,
                                   NULL, 1, 4, &m),
                     FED_ERR_UNSUPPORTED);
    assert_string_equal(fed_test_log_last(),
                        "model: layer 'd' (dropout) needs kernels the nodrop backend lacks");
    fed_test_log_default();
}

/* dropout, seen through the weight gradient of a linear layer of zero
 * weights on it: its logits are 0 whatever the mask, so with label 0 row 1
 * of that gradient is 0.5 times the dropped-out input, summed over the
 * batch (divided by its size). In training about p of the values are
 * zeroed and the rest scaled by exactly 1 / (1 - p); the masks are the
 * same whatever the shards, new at every step, the same again from the
 * same key; evaluation is the identity. */
#define DROP_F 20000
static void test_dropout(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 1, DROP_F, 2, 0};
    fed_model *m1 = NULL, *m3 = NULL, *plain = NULL;
    float *x = malloc(3 * DROP_F * sizeof *x), *g1 = malloc(DROP_F * sizeof *g1);
    float *p = calloc(2 * DROP_F + 2, sizeof *p), logit[2][6]; /* 3 samples, 2 classes */
    int32_t y[3] = {0, 0, 0};
    fed_batch one = {.n = 1, .x_f32 = x, .y = y}, three = {.n = 3, .x_f32 = x, .y = y};
    int zeros = 0;
    fed_rng rng;

    assert_non_null(x);
    assert_non_null(g1);
    assert_non_null(p);
    for (int k = 0; k < 3 * DROP_F; k++)
        x[k] = 1.0f;
    assert_int_equal(fed_model_new("g:Dr250000,L", in, w->be, w->pool, 1, 3, &m1), FED_OK);
    assert_int_equal(fed_model_new("g:Dr250000,L", in, w->be, w->pool, 3, 3, &m3), FED_OK);
    assert_true(fed_model_has_dropout(m1));
    assert_int_equal(fed_model_set_params(m1, p), FED_OK);
    assert_int_equal(fed_model_set_params(m3, p), FED_OK);
    fed_model_set_dropout_key(m1, 42);
    assert_int_equal(fed_model_forward_backward(m1, &one, NULL), FED_OK);
    memcpy(g1, fed_model_grads_dev(m1) + DROP_F, DROP_F * sizeof *g1);
    for (int k = 0; k < DROP_F; k++) {
        if (g1[k] == 0.0f)
            zeros++;
        else if (fabsf(2.0f * g1[k] - 1.0f / 0.75f) > 1e-6f)
            fail_msg("value %d kept as %.9g, want %.9g", k, 2.0 * g1[k], 1.0 / 0.75);
    }
    /* 5,000 expected, standard deviation 61 */
    if (zeros < 5000 - 300 || zeros > 5000 + 300)
        fail_msg("%d of %d zeroed at p = 0.25", zeros, DROP_F);
    /* the next step draws another mask; the same key again, the same */
    assert_int_equal(fed_model_forward_backward(m1, &one, NULL), FED_OK);
    assert_true(memcmp(g1, fed_model_grads_dev(m1) + DROP_F, DROP_F * sizeof *g1) != 0);
    fed_model_set_dropout_key(m1, 42);
    assert_int_equal(fed_model_forward_backward(m1, &one, NULL), FED_OK);
    assert_memory_equal(g1, fed_model_grads_dev(m1) + DROP_F, DROP_F * sizeof *g1);
    /* three samples over 1 and 3 shards: the same masks */
    fed_model_set_dropout_key(m1, 7);
    fed_model_set_dropout_key(m3, 7);
    assert_int_equal(fed_model_forward_backward(m1, &three, NULL), FED_OK);
    assert_int_equal(fed_model_forward_backward(m3, &three, NULL), FED_OK);
    assert_memory_equal(fed_model_grads_dev(m1), fed_model_grads_dev(m3),
                        (2 * DROP_F + 2) * sizeof(float));
    /* evaluation: the identity, the logits of the same linear layer alone */
    fed_rng_seed(&rng, 3);
    for (int k = 0; k < 2 * DROP_F + 2; k++)
        p[k] = (float)fed_rng_normal(&rng) * 0.01f;
    for (int k = 0; k < 3 * DROP_F; k++)
        x[k] = (float)fed_rng_normal(&rng);
    assert_int_equal(fed_model_new("g:L", in, w->be, w->pool, 1, 3, &plain), FED_OK);
    assert_false(fed_model_has_dropout(plain));
    assert_int_equal(fed_model_set_params(plain, p), FED_OK);
    assert_int_equal(fed_model_set_params(m3, p), FED_OK);
    assert_int_equal(fed_model_logits(plain, &three, &logit[0][0]), FED_OK);
    assert_int_equal(fed_model_logits(m3, &three, &logit[1][0]), FED_OK);
    assert_memory_equal(logit[0], logit[1], sizeof logit[0]);
    fed_model_free(m1);
    fed_model_free(m3);
    fed_model_free(plain);
    free(x);
    free(g1);
    free(p);
}

/* Embeddings of two categorical columns concatenated with the numeric
 * columns: 5 columns, ids in columns 0 and 2. */
static fed_model_node tab_graph[] = {
    {.kind = "embedding", .name = "ea", .input = -1, .out = 3, .column = 0, .num = 7},
    {.kind = "embedding", .name = "eb", .input = -1, .out = 2, .column = 2, .num = 4},
    {.kind = "concat", .name = "cat", .input = 0, .other = 1},
    {.kind = "numeric", .name = "num", .input = -1},
    {.kind = "concat", .name = "all", .input = 2, .other = 3},
    {.kind = "linear", .name = "fc", .input = 4, .out = 6},
    {.kind = "relu", .input = 5},
    {.kind = "linear", .name = "head", .input = 6, .out = 3},
};
#define TAB_COUNT ((int)(sizeof tab_graph / sizeof tab_graph[0]))
#define TAB_N 10

/* A batch of TAB_N rows of 5 columns: ids in 0 and 2 (few, so rows
 * repeat), numbers elsewhere. */
static void tab_batch(float *x, int32_t *y)
{
    fed_rng rng;

    fed_rng_seed(&rng, 3);
    for (int i = 0; i < TAB_N; i++) {
        for (int j = 0; j < 5; j++)
            x[i * 5 + j] = (float)fed_rng_normal(&rng);
        x[i * 5 + 0] = (float)fed_rng_below(&rng, 3);
        x[i * 5 + 2] = (float)fed_rng_below(&rng, 4);
        y[i] = (int32_t)fed_rng_below(&rng, 3);
    }
}

/* The graph's spec and shapes; its gradient the same bit for bit at every
 * step and shard count of the embeddings' own (the scatter-add is split by
 * weight rows, each walking the batch in order), and near the one-shard
 * one elsewhere. */
static void test_embedding(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 1, 5, 3, 0};
    char spec[FED_MODEL_SPEC_MAX];
    fed_model *m1, *m3, *ms = NULL;
    float x[TAB_N * 5], g1[200], g3[200];
    int32_t y[TAB_N];
    const fed_tensor_info *t;
    int nt;

    assert_int_equal(fed_model_graph_spec(tab_graph, TAB_COUNT, spec, sizeof spec), FED_OK);
    assert_string_equal(spec, "g:ea=E3n7c0,eb=E2n4c2<-,cat=&eb<ea,num=X<-,all=&num<cat,fc=L6,R,"
                              "head=L3");
    m1 = make_graph(w, tab_graph, TAB_COUNT, in, 1, TAB_N, 5);
    m3 = make_graph(w, tab_graph, TAB_COUNT, in, 3, TAB_N, 5);
    assert_int_equal(fed_model_new(spec, in, w->be, w->pool, 1, TAB_N, &ms), FED_OK);
    /* ea 7x3, eb 4x2, fc 6x(3 + 2 + 3) + 6, head 3x6 + 3 */
    assert_int_equal(fed_model_nparams(m1), 21 + 8 + 54 + 21);
    assert_int_equal(fed_model_nparams(ms), fed_model_nparams(m1));
    t = fed_model_tensors(m1, &nt);
    assert_int_equal(nt, 6);
    assert_string_equal(t[0].name, "ea.weight");
    assert_int_equal(t[0].shape[0], 7);
    assert_int_equal(t[0].shape[1], 3);
    assert_string_equal(t[1].name, "eb.weight");
    assert_int_equal(t[2].shape[1], 8);
    tab_batch(x, y);
    fed_batch b = {.n = TAB_N, .x_f32 = x, .y = y};
    assert_int_equal(fed_model_forward_backward(m1, &b, NULL), FED_OK);
    memcpy(g1, fed_model_grads_dev(m1), fed_model_nparams(m1) * sizeof *g1);
    for (int rep = 0; rep < 3; rep++) {
        assert_int_equal(fed_model_forward_backward(m3, &b, NULL), FED_OK);
        if (rep == 0)
            memcpy(g3, fed_model_grads_dev(m3), fed_model_nparams(m3) * sizeof *g3);
        assert_memory_equal(g3, fed_model_grads_dev(m3), fed_model_nparams(m3) * sizeof *g3);
    }
    for (size_t i = 0; i < fed_model_nparams(m1); i++)
        assert_true(fabsf(g1[i] - g3[i]) <= 1e-6f * (1.0f + fabsf(g1[i])));
    /* an id row no sample picks has no gradient; ea's row 0..2 some do */
    for (int k = 3 * 3; k < 7 * 3; k++)
        assert_true(g1[k] == 0.0f);
    fed_model_free(m1);
    fed_model_free(m3);
    fed_model_free(ms);
}

/* An id that is not an integer in [0, num) is refused at the step, named;
 * never clamped. */
static void test_embedding_ids(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 1, 5, 3, 0};
    fed_model *m = make_graph(w, tab_graph, TAB_COUNT, in, 1, TAB_N, 5);
    float x[TAB_N * 5], bad[] = {7.0f, -1.0f, 1.5f, NAN};
    const char *said[] = {"7", "-1", "1.5", "nan"};
    int32_t y[TAB_N];
    char want[160];

    tab_batch(x, y);
    fed_batch b = {.n = TAB_N, .x_f32 = x, .y = y};
    for (int k = 0; k < 4; k++) {
        float keep = x[3 * 5];

        x[3 * 5] = bad[k];
        fed_test_log_capture(FED_LOG_DEBUG);
        assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_ERR_RANGE);
        snprintf(want, sizeof want, "model: layer 'ea' (embedding): sample 3's column 0 holds "
                 "%s, not an id in [0, 7)", said[k]);
        assert_string_equal(fed_test_log_last(), want);
        fed_test_log_default();
        x[3 * 5] = keep;
    }
    x[9 * 5 + 2] = 4.0f; /* eb takes 4 ids */
    fed_test_log_capture(FED_LOG_DEBUG);
    assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_ERR_RANGE);
    assert_string_equal(fed_test_log_last(), "model: layer 'eb' (embedding): sample 9's column 2 "
                                             "holds 4, not an id in [0, 4)");
    fed_test_log_default();
    x[9 * 5 + 2] = 3.0f;
    assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_OK);
    fed_model_free(m);
}

/* What an embedding graph refuses: a column outside the row, a layer
 * other than embedding and numeric on the input, an embedding on a layer's
 * output, no numeric column left, a backend without the gather. */
static void test_embedding_refusals(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 1, 5, 3, 0};
    fed_model_node g[TAB_COUNT];
    fed_backend nocat = *w->be;
    fed_model *m = (fed_model *)1;

    memcpy(g, tab_graph, sizeof g);
    g[1].column = 5;
    expect_why(g, TAB_COUNT, in, FED_ERR_SHAPE, "model 'bad': node 1 (embedding 'eb') on input "
               "1x1x5: column 5 is outside the input's 5 columns (0 to 4)");
    memcpy(g, tab_graph, sizeof g);
    g[3] = (fed_model_node){.kind = "linear", .name = "num", .input = -1, .out = 3};
    expect_why(g, TAB_COUNT, in, FED_ERR_SPEC, "model 'bad': node 3 (linear 'num') takes the "
               "model's input, whose categorical columns hold ids: only embedding and numeric "
               "layers take it");
    memcpy(g, tab_graph, sizeof g);
    g[1].input = 0;
    expect_why(g, TAB_COUNT, in, FED_ERR_SHAPE, "model 'bad': node 1 (embedding 'eb') on input "
               "3x1x1: an embedding takes the model's input row (its ids), not a layer's output");
    memcpy(g, tab_graph, sizeof g);
    g[1].column = 1;
    expect_why(g, TAB_COUNT, (fed_model_shape){1, 1, 2, 3, 0}, FED_ERR_SHAPE, "model 'bad': node 3 "
               "(numeric 'num') on input 1x1x2: every column of the input is categorical (read "
               "by an embedding)");
    nocat.name = "device";
    nocat.caps &= ~FED_BACKEND_CAP_EMBED;
    fed_test_log_capture(FED_LOG_DEBUG);
    assert_int_equal(fed_model_new_graph("t", tab_graph, TAB_COUNT, in, &nocat, NULL, 1, 4, &m),
                     FED_ERR_UNSUPPORTED);
    assert_null(m);
    assert_string_equal(fed_test_log_last(),
                        "model: layer 'ea' (embedding) needs kernels the device backend lacks");
    fed_test_log_default();
    assert_int_equal(fed_model_spec_check("g:E3n7c0,L", in), FED_OK);
    assert_int_equal(fed_model_spec_check("g:E3n7,L", in), FED_ERR_SPEC);  /* no column */
    assert_int_equal(fed_model_spec_check("g:E3c0,L", in), FED_ERR_SPEC);  /* no num */
    assert_int_equal(fed_model_spec_check("g:En7c0,L", in), FED_ERR_SPEC); /* no dim */
    assert_int_equal(fed_model_spec_check("g:E3n7c0x1,L", in), FED_ERR_SPEC);
}

/* The loss mse: MSELoss's mean over every output, its gradient 2 (z - t) /
 * (n K), predictions the outputs themselves; a batch without targets or
 * with a target that is not finite refused. And bce's predictions: (1 - p,
 * p) of each sample's one logit, over pieces of more than half max_batch. */
static void test_mse_and_predictions(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 1, 3, 2, 0};
    fed_model *m = NULL;
    float x[20 * 3], t[20 * 2], z[8 * 2], g[64];
    double pred[20 * 2], want = 0.0;
    fed_step_stats st = {0};
    fed_rng rng;
    size_t np;
    int nt;
    const fed_tensor_info *ti;

    fed_rng_seed(&rng, 9);
    for (int i = 0; i < 20 * 3; i++)
        x[i] = (float)fed_rng_normal(&rng);
    for (int i = 0; i < 20 * 2; i++)
        t[i] = (float)fed_rng_normal(&rng);
    assert_int_equal(fed_model_new("g:fc=L2,Q", in, w->be, w->pool, 1, 8, &m), FED_OK);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    assert_int_equal(fed_model_nlogits(m), 2);
    assert_int_equal(fed_model_predict_width(m), 2);
    np = fed_model_nparams(m);
    ti = fed_model_tensors(m, &nt);
    fed_batch b = {.n = 8, .x_f32 = x, .y_f32 = t};
    assert_int_equal(fed_model_logits(m, &b, z), FED_OK);
    assert_int_equal(fed_model_forward_backward(m, &b, &st), FED_OK);
    memcpy(g, fed_model_grads_dev(m), np * sizeof *g);
    for (int k = 0; k < 16; k++)
        want += ((double)z[k] - t[k]) * ((double)z[k] - t[k]);
    assert_true(fabs(st.loss_sum / 8 - want / 16) <= 1e-6 * want / 16);
    assert_int_equal(st.correct, 0);
    /* fc.bias's gradient: the mean over samples of 2 (z - t) / K */
    for (int o = 0; o < 2; o++) {
        double gb = 0.0;

        for (int i = 0; i < 8; i++)
            gb += 2.0 * ((double)z[i * 2 + o] - t[i * 2 + o]) / 16.0;
        assert_true(fabs(g[ti[1].offset + o] - gb) <= 1e-6 * (1.0 + fabs(gb)));
    }
    b.n = 20;
    assert_int_equal(fed_model_predict(m, &b, NULL, pred), FED_OK);
    for (int k = 0; k < 16; k++)
        assert_true(pred[k] == (double)z[k]);
    b.n = 8;
    b.y_f32 = NULL;
    assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_ERR_INVAL);
    b.y_f32 = t;
    t[5] = INFINITY;
    assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_ERR_NAN);
    fed_model_free(m);

    /* bce: a piece of 8 rows of one logit each, made two probabilities */
    {
        int32_t y[20] = {0};

        assert_int_equal(fed_model_new("g:L4,R,L1,B", in, w->be, w->pool, 1, 8, &m), FED_OK);
        assert_int_equal(fed_model_init(m, &rng), FED_OK);
        fed_batch c = {.n = 8, .x_f32 = x, .y = y};
        assert_int_equal(fed_model_logits(m, &c, z), FED_OK);
        c.n = 20;
        assert_int_equal(fed_model_predict(m, &c, NULL, pred), FED_OK);
        for (int i = 0; i < 8; i++) {
            double p = 1.0 / (1.0 + exp(-(double)z[i]));

            assert_true(fabs(pred[2 * i + 1] - p) <= 1e-12);
            assert_true(fabs(pred[2 * i] - (1.0 - p)) <= 1e-12);
        }
        fed_model_free(m);
    }
    (void)np;
}

/* A graph as a "g:" spec: the exact text, a model from it the same as from
 * the nodes (tensors, parameters, gradients bit for bit), refusals. */
static void test_graph_spec(void **state)
{
    world *w = *state;
    fed_model_shape in = {2, 11, 10, 5, 0};
    char spec[FED_MODEL_SPEC_MAX], why[256];
    fed_model *a, *b = NULL;
    fed_model_node deep[60];
    fed_rng rng;
    float x[3 * 220];
    int32_t y[3] = {0, 4, 2};
    size_t np;

    chain(windows_graph, WINDOWS_COUNT);
    assert_int_equal(fed_model_graph_spec(windows_graph, WINDOWS_COUNT, spec, sizeof spec),
                     FED_OK);
    assert_string_equal(spec, "g:stem=C4k3s2p1,R,c2=C3k3s1p2d2,R,Mk3s2p1,Ak2s1p1,F,fc=L6,R,"
                              "head=L5");
    a = make_graph(w, windows_graph, WINDOWS_COUNT, in, 1, 3, 11);
    assert_int_equal(fed_model_new(spec, in, w->be, w->pool, 1, 3, &b), FED_OK);
    fed_rng_seed(&rng, 11);
    assert_int_equal(fed_model_init(b, &rng), FED_OK);
    np = fed_model_nparams(a);
    assert_int_equal(fed_model_nparams(b), np);
    for (int i = 0; i < 3 * 220; i++)
        x[i] = (float)fed_rng_normal(&rng);
    fed_batch batch = {.n = 3, .x_f32 = x, .y = y};
    assert_int_equal(fed_model_forward_backward(a, &batch, NULL), FED_OK);
    assert_int_equal(fed_model_forward_backward(b, &batch, NULL), FED_OK);
    assert_memory_equal(fed_model_params_dev(a), fed_model_params_dev(b), np * sizeof(float));
    assert_memory_equal(fed_model_grads_dev(a), fed_model_grads_dev(b), np * sizeof(float));
    fed_model_free(a);
    fed_model_free(b);
    /* a linear layer's out 0 is the classes; unnamed nodes by their index */
    assert_int_equal(fed_model_spec_nparams("g:F,L", in, &np), FED_OK);
    assert_int_equal(np, 220 * 5 + 5);
    assert_int_equal(fed_model_spec_nparams("g:0=L7,R,2=L", in, &np), FED_OK);
    assert_int_equal(np, 220 * 7 + 7 + 7 * 5 + 5);
    /* refusals */
    assert_int_equal(fed_model_spec_explain("g:C6,R,L", in, why, sizeof why), FED_ERR_SPEC);
    assert_string_equal(why, "model spec 'g:C6,R,L': node 0 'C6' is none of NAME=Lout[b0], "
                             "NAME=CoutkK[sS][pP][dD][gG][b0], MkK[sS][pP], AkK[sS][pP], P, R, F, Y, G, S, "
                             "Z, T, B, +REF, &REF, NAME=EdimnNUMcCOL, X, V, UgG, D[rR], N[eE][mM], "
                             "each [<REF]");
    static const char *bad[] = {"g:",        "g:L,",     "g:K",       "g:Lk3",  "g:C4k3k3,L",
                                "g:Mk0,L",   "g:Ck3,L",  "g:a-b=L",   "g:=L",   "g:L5x5",
                                "g:C4k3x,L", "g:Rk2,L",  "g:L99999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (fed_model_spec_check(bad[i], in) != FED_ERR_SPEC)
            fail_msg("'%s' was not refused", bad[i]);
    /* a graph past the spec's 127 bytes has no spec in 128 bytes */
    memset(deep, 0, sizeof deep);
    for (int i = 0; i < 60; i++) {
        deep[i].kind = i % 2 ? "relu" : "linear";
        deep[i].out = 7;
        deep[i].input = i - 1;
    }
    assert_int_equal(fed_model_graph_spec(deep, 59, spec, sizeof spec), FED_ERR_TOO_LARGE);
    assert_string_equal(spec, "");
    assert_int_equal(fed_model_graph_spec(deep, 3, spec, sizeof spec), FED_OK);
    assert_string_equal(spec, "g:L7,R,L7");
    deep[2].input = 0; /* another input than the node before: "<REF" */
    assert_int_equal(fed_model_graph_spec(deep, 3, spec, sizeof spec), FED_OK);
    assert_string_equal(spec, "g:L7,R,L7<0");
    deep[2].input = 2;
    assert_int_equal(fed_model_graph_spec(deep, 3, spec, sizeof spec), FED_ERR_SPEC);
}

/* A graph past FED_MODEL_SPEC_MAX: built from its whole spec, named by its
 * id ("g#" and 32 hex digits), which alone builds nothing; the graph's
 * limit, its cost without building. */
static void test_graph_long_spec(void **state)
{
    world *w = *state;
    fed_model_shape in = {2, 11, 10, 5, 0};
    fed_model_node deep[101];
    static char big[FED_MODEL_GRAPH_MAX + 8];
    char id[FED_MODEL_SPEC_MAX], why[256];
    fed_model *m = NULL;
    size_t np, len;
    double flops;

    memset(deep, 0, sizeof deep);
    for (int i = 0; i < 101; i++) {
        deep[i].kind = i % 2 ? "relu" : "linear";
        deep[i].out = i == 100 ? 0 : 7;
        deep[i].input = i - 1;
    }
    assert_int_equal(fed_model_graph_spec(deep, 101, big, sizeof big), FED_OK);
    len = strlen(big);
    assert_true(len > 200);
    fed_model_spec_id(big, id);
    assert_int_equal(strlen(id), 34);
    assert_memory_equal(id, "g#", 2);
    assert_int_equal(fed_model_new(big, in, w->be, w->pool, 1, 3, &m), FED_OK);
    assert_string_equal(fed_model_spec(m), id);
    assert_string_equal(fed_model_graph(m), big);
    assert_int_equal(fed_model_nparams(m), 220 * 7 + 7 + 49 * (7 * 7 + 7) + 7 * 5 + 5);
    assert_int_equal(fed_model_spec_cost(big, in, &np, &flops, why, sizeof why), FED_OK);
    assert_int_equal(np, fed_model_nparams(m));
    assert_true(flops == fed_model_flops_per_sample(m));
    fed_model_free(m);
    /* one byte changed: another id */
    big[len - 1] = '6';
    {
        char id2[FED_MODEL_SPEC_MAX];

        fed_model_spec_id(big, id2);
        assert_string_not_equal(id, id2);
    }
    /* the id alone */
    assert_int_equal(fed_model_spec_explain(id, in, why, sizeof why), FED_ERR_SPEC);
    assert_non_null(strstr(why, "names a graph by its hash"));
    /* short specs are their own id */
    fed_model_spec_id("mlp:256,128", id);
    assert_string_equal(id, "mlp:256,128");
    /* past FED_MODEL_GRAPH_MAX */
    memcpy(big, "g:", 2);
    for (size_t i = 2; i + 1 < sizeof big; i += 2)
        memcpy(big + i, i + 3 < sizeof big ? "R," : "R", 2);
    big[sizeof big - 1] = '\0';
    assert_int_equal(fed_model_spec_explain(big, in, why, sizeof why), FED_ERR_SPEC);
    assert_non_null(strstr(why, "the limit is 16383"));
}

static fed_err try_graph_new(void *ctx)
{
    world *w = ctx;
    fed_model *m = (fed_model *)1;
    fed_err e = fed_model_new_graph("g", windows_graph, WINDOWS_COUNT,
                                    (fed_model_shape){2, 11, 10, 5, 0}, w->be, w->pool, 2, 4, &m);

    if (e == FED_OK)
        fed_model_free(m);
    else
        assert_null(m);
    return e;
}

/* Every allocation of a graph's model failing in turn gives FED_ERR_NOMEM
 * and leaves nothing behind. */
static void test_graph_alloc_failures(void **state)
{
    chain(windows_graph, WINDOWS_COUNT);
    assert_true(fed_test_alloc_sweep(try_graph_new, *state, 0, 500) > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_windows), cmocka_unit_test(test_grad_same_convs),
        cmocka_unit_test(test_grad_shifted_convs), cmocka_unit_test(test_cnn_as_graph),
        cmocka_unit_test(test_deep_graph),   cmocka_unit_test(test_graph_flops),
        cmocka_unit_test(test_graph_errors), cmocka_unit_test(test_backend_caps),
        cmocka_unit_test(test_embedding), cmocka_unit_test(test_embedding_ids),
        cmocka_unit_test(test_embedding_refusals), cmocka_unit_test(test_mse_and_predictions),
        cmocka_unit_test(test_graph_alloc_failures), cmocka_unit_test(test_graph_spec),
        cmocka_unit_test(test_graph_long_spec), cmocka_unit_test(test_dropout),
    };

    fed_test_log_quiet();
    return cmocka_run_group_tests(tests, world_setup, world_teardown);
}
