/* test_dp_sgd.c - DP-SGD in local training (CPU backend): per-sample
 * gradient norms and clipped sums of fed_model_dp_grads against gradients
 * computed one sample at a time by the plain step, for every layer kind
 * (logreg, mlp, cnn: linear, convolution, pooling) and shard count; the
 * trainer's noisy step against a reference built from those plain
 * gradients, the same random stream and SGD's rule; the noise's moments, the
 * Poisson sampler, and the refusals. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/dp.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/train.h"
#include "tests/support/support.h"

#define assert_err(got, want) assert_string_equal(fed_errname(got), fed_errname(want))

typedef fed_test_world world;

static int world_setup(void **state) { return fed_test_world_new(state, 2); }
static int world_teardown(void **state) { return fed_test_world_free(state); }

static fed_model *make_model(world *w, const char *spec, fed_model_shape in, int shards,
                             int max_batch)
{
    fed_model *m = NULL;
    fed_rng rng;

    assert_err(fed_model_new(spec, in, w->be, w->pool, shards, max_batch, &m), FED_OK);
    fed_rng_seed(&rng, 42);
    assert_err(fed_model_init(m, &rng), FED_OK);
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

static double norm2(const float *x, size_t n)
{
    double s = 0;

    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s);
}

/* Each tensor of got against want: |got - want| <= tol |want| + 1e-7,
 * norm-wise (float rounding of sums in another order). */
static void assert_grads_close(const fed_model *m, const float *got, const double *want,
                               double tol)
{
    int nt;
    const fed_tensor_info *t = fed_model_tensors(m, &nt);

    for (int k = 0; k < nt; k++) {
        double d2 = 0, w2 = 0;

        for (size_t i = t[k].offset; i < t[k].offset + t[k].numel; i++) {
            d2 += (got[i] - want[i]) * (got[i] - want[i]);
            w2 += want[i] * want[i];
        }
        if (!(sqrt(d2) <= tol * sqrt(w2) + 1e-7)) {
            print_error("%s: |got - want| %.3g, |want| %.3g\n", t[k].name, sqrt(d2), sqrt(w2));
            fail();
        }
    }
}

/* The plain step's gradient of sample i alone (a batch of one: its mean is
 * the sample's own gradient), into g (nparams). */
static void one_sample_grad(fed_model *m, const float *x, const int32_t *y, int i, float *g)
{
    fed_model_shape in = fed_model_input(m);
    int F = in.c * in.h * in.w;
    fed_batch b = {.n = 1, .x_f32 = x + (size_t)i * F, .y = y + i};

    assert_err(fed_model_forward_backward(m, &b, NULL), FED_OK);
    memcpy(g, fed_model_grads_dev(m), fed_model_nparams(m) * sizeof *g);
}

/* ------------------------------------------------ per-sample gradients -- */

/* Per-sample norms and clipped sums of model m (made for batches of n)
 * against gradients of one sample at a time; frees m. */
static void check_model_per_sample(fed_model *m, int n)
{
    fed_model_shape in = fed_model_input(m);
    const char *spec = fed_model_spec(m);
    int shards = fed_model_shards(m);
    size_t np = fed_model_nparams(m);
    int F = in.c * in.h * in.w;
    float *x = malloc((size_t)n * F * sizeof *x), *g = malloc(np * sizeof *g);
    float *gi = malloc((size_t)n * np * sizeof *gi), norms[64], clip;
    double *want = calloc(np, sizeof *want), ref_norm[64], sorted[64];
    int32_t y[64];
    fed_rng rng;
    fed_batch all = {.n = n, .x_f32 = x, .y = y};
    fed_step_stats st = {0};

    assert_true(n <= 64);
    assert_non_null(x);
    assert_non_null(gi);
    fed_rng_seed(&rng, 5);
    random_batch(&rng, n, in, x, y);
    for (int i = 0; i < n; i++) {
        one_sample_grad(m, x, y, i, gi + (size_t)i * np);
        ref_norm[i] = norm2(gi + (size_t)i * np, np);
        sorted[i] = ref_norm[i];
    }

    /* no clipping (a bound far above every norm), scale 1: the plain sum,
       and each sample's norm */
    assert_err(fed_model_dp_grads(m, &all, 1e30f, 1.0f, 0, norms, &st), FED_OK);
    assert_int_equal(st.samples, n);
    memcpy(g, fed_model_grads_dev(m), np * sizeof *g);
    for (int i = 0; i < n; i++) {
        if (!(fabs(norms[i] - ref_norm[i]) <= 1e-4 * ref_norm[i])) {
            print_error("%s, %d shards: sample %d's norm %.9g, one at a time %.9g\n", spec,
                        shards, i, norms[i], ref_norm[i]);
            fail();
        }
        for (size_t j = 0; j < np; j++)
            want[j] += gi[(size_t)i * np + j];
    }
    assert_grads_close(m, g, want, 1e-4);

    /* clipped at the median norm, scaled by 1/4: half the samples clipped */
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && sorted[k] < sorted[k - 1]; k--) {
            double tmp = sorted[k];

            sorted[k] = sorted[k - 1];
            sorted[k - 1] = tmp;
        }
    clip = (float)sorted[n / 2];
    memset(want, 0, np * sizeof *want);
    for (int i = 0; i < n; i++) {
        double f = (ref_norm[i] > clip ? clip / ref_norm[i] : 1.0) * 0.25;

        for (size_t j = 0; j < np; j++)
            want[j] += f * gi[(size_t)i * np + j];
    }
    assert_err(fed_model_dp_grads(m, &all, clip, 0.25f, 0, NULL, NULL), FED_OK);
    assert_grads_close(m, fed_model_grads_dev(m), want, 1e-4);
    /* every clipped sample's contribution has norm clip / 4 at most */
    assert_true(norm2(fed_model_grads_dev(m), np) <= n * clip * 0.25 * (1 + 1e-5));

    /* the same batch in two pieces, the second accumulated */
    {
        int k = n / 3;
        fed_batch p1 = {.n = k, .x_f32 = x, .y = y};
        fed_batch p2 = {.n = n - k, .x_f32 = x + (size_t)k * F, .y = y + k};

        assert_err(fed_model_dp_grads(m, &p1, clip, 0.25f, 0, NULL, NULL), FED_OK);
        assert_err(fed_model_dp_grads(m, &p2, clip, 0.25f, 1, NULL, NULL), FED_OK);
        assert_grads_close(m, fed_model_grads_dev(m), want, 1e-4);
        /* an empty piece adds nothing; as the first, it writes zeros */
        p1.n = 0;
        assert_err(fed_model_dp_grads(m, &p1, clip, 0.25f, 1, NULL, NULL), FED_OK);
        assert_grads_close(m, fed_model_grads_dev(m), want, 1e-4);
        assert_err(fed_model_dp_grads(m, &p1, clip, 0.25f, 0, NULL, NULL), FED_OK);
        assert_true(norm2(fed_model_grads_dev(m), np) == 0.0);
    }
    /* the plain step after a DP one is the plain step (mean gradient) */
    assert_err(fed_model_forward_backward(m, &all, NULL), FED_OK);
    for (size_t j = 0; j < np; j++)
        want[j] = 0;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < np; j++)
            want[j] += gi[(size_t)i * np + j] / n;
    assert_grads_close(m, fed_model_grads_dev(m), want, 1e-4);

    free(x);
    free(g);
    free(gi);
    free(want);
    fed_model_free(m);
}

static void check_per_sample(world *w, const char *spec, fed_model_shape in, int shards, int n)
{
    check_model_per_sample(make_model(w, spec, in, shards, n), n);
}

static void test_per_sample_logreg(void **state)
{
    fed_model_shape in = {1, 6, 6, 5};

    check_per_sample(*state, "logreg", in, 1, 9);
    check_per_sample(*state, "logreg", in, 3, 9);
}

static void test_per_sample_mlp(void **state)
{
    fed_model_shape in = {1, 8, 8, 10};

    check_per_sample(*state, "mlp:32,16", in, 1, 12);
    check_per_sample(*state, "mlp:32,16", in, 4, 12);
    /* bias = 0: the norms leave out the bias a layer lacks */
    check_per_sample(*state, "g:L32b0,R,Lb0", in, 1, 12);
    check_per_sample(*state, "g:L32b0,R,L", in, 3, 12);
}

static void test_per_sample_cnn(void **state)
{
    fed_model_shape in = {1, 16, 16, 10};

    check_per_sample(*state, "cnn", in, 1, 6);
    check_per_sample(*state, "cnn", in, 3, 7);
}

/* check_model_per_sample on the graph of count nodes, 1 and 3 shards,
 * parameters drawn from seed. */
static void per_sample_graph(world *w, const char *label, const fed_model_node *nodes, int count,
                             fed_model_shape in, uint64_t seed)
{
    for (int shards = 1; shards <= 3; shards += 2) {
        fed_model *m = NULL;
        fed_rng rng;

        assert_err(fed_model_new_graph(label, nodes, count, in, w->be, w->pool, shards, 7, &m),
                   FED_OK);
        fed_rng_seed(&rng, seed);
        assert_err(fed_model_init(m, &rng), FED_OK);
        check_model_per_sample(m, 7);
    }
}

/* A graph of every window: strided and padded, grouped, dilated convolutions, padded
 * max and average pooling (model.h's fed_model_node). */
static void test_per_sample_windows(void **state)
{
    world *w = *state;
    fed_model_node nodes[] = {
        {.kind = "conv", .name = "stem", .out = 4, .kernel = {3, 3}, .stride = {2, 2},
         .padding = {1, 1}},
        {.kind = "relu"},
        /* grouped: 3 shards' rows (2 each) straddle its 2 groups of 3 */
        {.kind = "conv", .name = "grp", .out = 6, .kernel = {3, 3}, .padding = {1, 1},
         .groups = 2, .no_bias = 1},
        {.kind = "relu"},
        {.kind = "conv", .name = "dil", .out = 3, .kernel = {3, 2}, .padding = {2, 1},
         .dilation = {2, 1}},
        {.kind = "relu"},
        {.kind = "maxpool", .kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}},
        {.kind = "avgpool", .kernel = {2, 2}, .stride = {1, 1}, .padding = {1, 1}},
        {.kind = "linear", .name = "head", .out = 5},
    };
    fed_model_shape in = {2, 11, 10, 5};
    int count = (int)(sizeof nodes / sizeof nodes[0]);

    for (int i = 0; i < count; i++)
        nodes[i].input = i - 1;
    per_sample_graph(w, "windows", nodes, count, in, 42);
}

/* A residual graph: an add of an earlier layer's output, a branch from an
 * earlier layer (a strided 1x1 shortcut), a concat, every gradient summed
 * into the layer it reaches, relu masks after the sum, shards 1 and 3. */
static void test_per_sample_residual(void **state)
{
    world *w = *state;
    fed_model_node nodes[] = {
        {.kind = "conv", .name = "stem", .out = 4, .kernel = {3, 3}, .padding = {1, 1}},
        {.kind = "relu"},
        {.kind = "conv", .name = "b1", .out = 4, .kernel = {3, 3}, .padding = {1, 1}},
        {.kind = "add", .name = "res", .other = 1},
        {.kind = "relu"},
        {.kind = "conv", .name = "sc", .out = 6, .kernel = {1, 1}, .stride = {2, 2}},
        {.kind = "conv", .name = "c3", .out = 6, .kernel = {3, 3}, .stride = {2, 2},
         .padding = {1, 1}},
        {.kind = "add", .name = "res2", .other = 5},
        {.kind = "concat", .name = "cat", .other = 6}, /* res2's channels, then c3's */
        {.kind = "linear", .name = "head", .out = 5},
    };
    fed_model_shape in = {2, 8, 8, 5};
    int count = (int)(sizeof nodes / sizeof nodes[0]);

    for (int i = 0; i < count; i++)
        nodes[i].input = i - 1;
    nodes[6].input = 4; /* c3 takes the relu after res, as sc does */
    per_sample_graph(w, "residual", nodes, count, in, 43);
}

/* ------------------------------------------------- the noisy SGD step -- */

static fed_dataset *make_dataset(fed_model_shape in, size_t n, uint64_t seed)
{
    fed_dataset *d = calloc(1, sizeof *d);
    fed_rng rng;

    d->n = n;
    d->shape = in;
    d->features = (size_t)in.c * in.h * in.w;
    d->x_f32 = malloc(n * d->features * sizeof(float));
    d->y = malloc(n * sizeof(int32_t));
    fed_rng_seed(&rng, seed);
    random_batch(&rng, (int)n, in, d->x_f32, d->y);
    return d;
}

static void free_dataset(fed_dataset *d)
{
    free(d->x_f32);
    free(d->y);
    free(d);
}

/* Two DP-SGD steps of the trainer (SGD, no momentum, constant lr) against
 * the rule written out: w -= lr * (sum_i clip_i(g_i) + z C noise) / (q n),
 * the draw and the noise taken from a copy of the same random stream, each
 * g_i from the plain step on sample i alone. */
static void check_noisy_step(world *w, const char *spec, fed_model_shape in, int shards)
{
    const size_t N = 40;
    const int batch = 8;
    const float clip = 0.5f, z = 1.3f, lr = 0.1f;
    fed_dataset *d = make_dataset(in, N, 9);
    fed_model *m = make_model(w, spec, in, shards, 24), *r = make_model(w, spec, in, 1, 1);
    size_t np = fed_model_nparams(m);
    float *p = malloc(np * sizeof *p), *g = malloc(np * sizeof *g), *noise = malloc(np * 4);
    double *want = malloc(np * sizeof *want);
    uint32_t idx[40], drawn[40];
    fed_rng stream, copy, shuffle;
    fed_optim_cfg oc;
    fed_optim *o = NULL;
    fed_trainer *t = NULL;
    fed_trainer_dp dp = {clip, z, fed_rng_random, &stream};
    fed_step_stats st = {0};
    double q = (double)batch / N;

    for (size_t i = 0; i < N; i++)
        idx[i] = (uint32_t)(N - 1 - i); /* any order: the draw keeps it */
    fed_optim_cfg_default(&oc, FED_OPTIM_SGD);
    oc.lr = lr;
    oc.momentum = 0;
    oc.sched = FED_SCHED_CONST;
    assert_err(fed_optim_new(&oc, m, &o), FED_OK);
    assert_err(fed_trainer_new(m, o, d, batch, &t), FED_OK);
    fed_rng_seed(&stream, 77);
    copy = stream;
    fed_rng_seed(&shuffle, 1);
    assert_err(fed_trainer_set_dp(t, &dp), FED_OK);
    assert_true(fed_trainer_dp_rate(t, N) == q);
    assert_err(fed_model_get_params(m, p), FED_OK);
    assert_err(fed_model_set_params(r, p), FED_OK);

    for (int step = 0; step < 2; step++) {
        size_t k = fed_dp_poisson(fed_rng_random, &copy, idx, N, q, drawn);

        assert_true(k > 0 && k <= 24);
        for (size_t j = 0; j < np; j++)
            want[j] = 0;
        for (size_t s = 0; s < k; s++) {
            double nrm, f;

            one_sample_grad(r, d->x_f32 + (size_t)drawn[s] * d->features, d->y + drawn[s], 0, g);
            nrm = norm2(g, np);
            f = nrm > clip ? clip / nrm : 1.0;
            for (size_t j = 0; j < np; j++)
                want[j] += f * g[j];
        }
        memset(noise, 0, np * sizeof *noise);
        assert_err(fed_dp_add_noise(fed_rng_random, &copy, noise, np, (double)z * clip / (q * N)),
                   FED_OK);
        for (size_t j = 0; j < np; j++)
            want[j] = p[j] - lr * (float)((float)(want[j] / (q * N)) + noise[j]);
        assert_err(fed_trainer_steps(t, idx, N, 1, &shuffle, &st), FED_OK);
        assert_err(fed_model_get_params(m, p), FED_OK);
        assert_grads_close(m, p, want, 1e-5);
        assert_err(fed_model_set_params(r, p), FED_OK);
    }
    assert_int_equal(fed_trainer_dp_steps(t), 2);
    /* the draw (loss, samples) is counted, not the batch size */
    assert_true(st.samples > 0);

    fed_trainer_free(t);
    fed_optim_free(o);
    fed_model_free(m);
    fed_model_free(r);
    free_dataset(d);
    free(p);
    free(g);
    free(noise);
    free(want);
}

static void test_noisy_step_mlp(void **state)
{
    fed_model_shape in = {1, 6, 6, 4};

    check_noisy_step(*state, "mlp:16", in, 1);
    check_noisy_step(*state, "mlp:16", in, 3);
}

static void test_noisy_step_cnn(void **state)
{
    fed_model_shape in = {1, 16, 16, 4};

    check_noisy_step(*state, "cnn", in, 2);
}

/* With no noise, no clipping and every sample drawn (batch >= n, so q = 1),
 * a DP step is the plain full-batch step. */
static void test_dp_step_without_noise_is_plain(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 6, 6, 4};
    fed_dataset *d = make_dataset(in, 10, 3);
    fed_model *a = make_model(w, "mlp:16", in, 2, 16), *b = make_model(w, "mlp:16", in, 2, 16);
    size_t np = fed_model_nparams(a);
    float *pa = malloc(np * 4), *pb = malloc(np * 4);
    double *want = malloc(np * sizeof *want);
    uint32_t idx[10];
    fed_rng stream, shuffle;
    fed_optim_cfg oc;
    fed_optim *oa = NULL, *ob = NULL;
    fed_trainer *ta = NULL, *tb = NULL;
    fed_trainer_dp dp = {1e30f, 0.0f, fed_rng_random, &stream};

    for (int i = 0; i < 10; i++)
        idx[i] = (uint32_t)i;
    fed_optim_cfg_default(&oc, FED_OPTIM_SGD);
    oc.sched = FED_SCHED_CONST;
    assert_err(fed_optim_new(&oc, a, &oa), FED_OK);
    assert_err(fed_optim_new(&oc, b, &ob), FED_OK);
    assert_err(fed_trainer_new(a, oa, d, 16, &ta), FED_OK);
    assert_err(fed_trainer_new(b, ob, d, 16, &tb), FED_OK);
    fed_rng_seed(&stream, 2);
    assert_err(fed_trainer_set_dp(ta, &dp), FED_OK);
    for (int s = 0; s < 3; s++) {
        fed_rng_seed(&shuffle, 4);
        assert_err(fed_trainer_steps(ta, idx, 10, 1, &shuffle, NULL), FED_OK);
        assert_err(fed_trainer_steps(tb, idx, 10, 1, &shuffle, NULL), FED_OK);
    }
    assert_err(fed_model_get_params(a, pa), FED_OK);
    assert_err(fed_model_get_params(b, pb), FED_OK);
    for (size_t j = 0; j < np; j++)
        want[j] = pb[j];
    assert_grads_close(a, pa, want, 1e-5);
    fed_trainer_free(ta);
    fed_trainer_free(tb);
    fed_optim_free(oa);
    fed_optim_free(ob);
    fed_model_free(a);
    fed_model_free(b);
    free_dataset(d);
    free(pa);
    free(pb);
    free(want);
}

/* -------------------------------------------------- noise and sampling -- */

static void test_noise(void **state)
{
    const size_t n = 1 << 20;
    float *x = calloc(n, sizeof *x), *y = calloc(n, sizeof *y);
    double s1 = 0, s2 = 0, s4 = 0;
    fed_rng a, b;

    (void)state;
    fed_rng_seed(&a, 11);
    b = a;
    assert_err(fed_dp_add_noise(fed_rng_random, &a, x, n, 2.0), FED_OK);
    assert_err(fed_dp_add_noise(fed_rng_random, &b, y, n, 2.0), FED_OK);
    assert_memory_equal(x, y, n * sizeof *x); /* the same stream, the same noise */
    for (size_t i = 0; i < n; i++) {
        double v = x[i] / 2.0;

        s1 += v;
        s2 += v * v;
        s4 += v * v * v * v;
    }
    /* N(0, 1): mean 0 (sd 1/1024), variance 1 (sd sqrt(2/n)), kurtosis 3 */
    assert_true(fabs(s1 / n) < 5.0 / 1024);
    assert_true(fabs(s2 / n - 1) < 5 * sqrt(2.0 / n));
    assert_true(fabs(s4 / n - 3) < 0.05);
    /* std 0 adds nothing; it adds, it does not overwrite */
    memcpy(y, x, n * sizeof *x);
    assert_err(fed_dp_add_noise(fed_rng_random, &a, y, n, 0.0), FED_OK);
    assert_memory_equal(x, y, n * sizeof *x);
    assert_err(fed_dp_add_noise(fed_rng_random, &a, y, 3, -1.0), FED_ERR_INVAL);
    assert_err(fed_dp_add_noise(fed_rng_random, &a, y, 3, NAN), FED_ERR_INVAL);
    assert_err(fed_dp_add_noise(NULL, NULL, y, 3, 1.0), FED_ERR_INVAL);
    free(x);
    free(y);
}

static void test_poisson(void **state)
{
    enum { N = 1000, DRAWS = 4000 };
    uint32_t idx[N], out[N];
    static int hits[N];
    long total = 0;
    fed_rng r;

    (void)state;
    for (int i = 0; i < N; i++)
        idx[i] = (uint32_t)(3 * i + 1);
    fed_rng_seed(&r, 8);
    assert_int_equal(fed_dp_poisson(fed_rng_random, &r, idx, N, 0.0, out), 0);
    assert_int_equal(fed_dp_poisson(fed_rng_random, &r, idx, N, 1.0, out), N);
    assert_memory_equal(out, idx, sizeof idx);
    assert_int_equal(fed_dp_poisson(fed_rng_random, &r, idx, 0, 0.5, out), 0);
    for (int d = 0; d < DRAWS; d++) {
        size_t k = fed_dp_poisson(fed_rng_random, &r, idx, N, 0.05, out);

        total += (long)k;
        for (size_t j = 0; j < k; j++) {
            assert_true(j == 0 || out[j] > out[j - 1]); /* in order, no repeats */
            assert_true(out[j] % 3 == 1);
            hits[(out[j] - 1) / 3]++;
        }
    }
    /* expected 50 per draw: the total within 5 sd of 200,000 */
    assert_true(labs(total - (long)(0.05 * N * DRAWS)) < 5 * sqrt(0.05 * 0.95 * N * DRAWS));
    /* each sample about 200 times: first and last alike, none far off */
    for (int i = 0; i < N; i++)
        assert_true(hits[i] > 200 - 6 * 14 && hits[i] < 200 + 6 * 14);
}

/* ----------------------------------------------------------- refusals -- */

static void test_refusals(void **state)
{
    world *w = *state;
    fed_model_shape in = {1, 6, 6, 4};
    fed_dataset *d = make_dataset(in, 10, 3);
    fed_model *m = make_model(w, "logreg", in, 1, 8), *other = NULL;
    fed_backend fake;
    fed_optim_cfg oc;
    fed_optim *o = NULL;
    fed_trainer *t = NULL, *tev = NULL;
    fed_rng r;
    fed_trainer_dp dp = {1.0f, 1.0f, fed_rng_random, &r};
    float x[36] = {0};
    int32_t y[1] = {0};
    fed_batch b = {.n = 1, .x_f32 = x, .y = y};

    fed_optim_cfg_default(&oc, FED_OPTIM_SGD);
    assert_err(fed_optim_new(&oc, m, &o), FED_OK);
    assert_err(fed_trainer_new(m, o, d, 4, &t), FED_OK);
    dp.clip = 0;
    assert_err(fed_trainer_set_dp(t, &dp), FED_ERR_INVAL);
    dp.clip = 1;
    dp.noise = -1;
    assert_err(fed_trainer_set_dp(t, &dp), FED_ERR_INVAL);
    dp.noise = 1;
    dp.random = NULL;
    assert_err(fed_trainer_set_dp(t, &dp), FED_ERR_INVAL);
    dp.random = fed_rng_random;
    assert_err(fed_trainer_new(m, NULL, d, 4, &tev), FED_OK); /* evaluation only */
    assert_err(fed_trainer_set_dp(tev, &dp), FED_ERR_INVAL);
    assert_err(fed_model_dp_grads(m, &b, 0.0f, 1.0f, 0, NULL, NULL), FED_ERR_INVAL);
    assert_err(fed_model_dp_grads(m, &b, 1.0f, NAN, 0, NULL, NULL), FED_ERR_INVAL);
    y[0] = 9;
    assert_err(fed_model_dp_grads(m, &b, 1.0f, 1.0f, 0, NULL, NULL), FED_ERR_RANGE);
    /* a backend without per-sample norms (the CPU's table without that
       capability stands in for CUDA here) is refused */
    fake = *w->be;
    fake.name = "cuda";
    fake.caps &= ~FED_BACKEND_CAP_DP_SGD;
    assert_err(fed_model_new("logreg", in, &fake, w->pool, 1, 8, &other), FED_OK);
    y[0] = 0;
    assert_err(fed_model_dp_grads(other, &b, 1.0f, 1.0f, 0, NULL, NULL), FED_ERR_UNSUPPORTED);
    fed_model_free(other);
    fed_trainer_free(t);
    fed_trainer_free(tev);
    fed_optim_free(o);
    fed_model_free(m);
    free_dataset(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_sample_logreg),
        cmocka_unit_test(test_per_sample_mlp),
        cmocka_unit_test(test_per_sample_cnn),
        cmocka_unit_test(test_per_sample_windows),
        cmocka_unit_test(test_per_sample_residual),
        cmocka_unit_test(test_noisy_step_mlp),
        cmocka_unit_test(test_noisy_step_cnn),
        cmocka_unit_test(test_dp_step_without_noise_is_plain),
        cmocka_unit_test(test_noise),
        cmocka_unit_test(test_poisson),
        cmocka_unit_test(test_refusals),
    };

    fed_test_log_quiet();
    return cmocka_run_group_tests(tests, world_setup, world_teardown);
}
