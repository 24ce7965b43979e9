/* test_recompute.c - gradient checkpointing (fed_model_set_recompute):
 * gradients, losses and the parameters after optimizer steps (batch
 * norm's running statistics and counter included) bit for bit those of
 * the step that keeps every output, for the shipped SimpleCNN, tabular
 * net and ResNet-8, a residual net with group norm and dropout, a small
 * batch-norm net and a deep MLP, at K 2 and 3, on one to three shards;
 * the activation buffers at K 2 at most 0.6 of K 1's on deep nets and
 * ResNet-8 at batch 256; and the refusals (K < 1, DP-SGD). */
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
#include "model/model_cfg.h"
#include "model/optim.h"
#include "tests/support/support.h"

#define N 12 /* samples of the batch stepped */

typedef struct world {
    fed_backend *be;
    fed_pool *pool;
} world;

static int setup(void **state)
{
    world *w = calloc(1, sizeof *w);

    if (!w || fed_backend_cpu_new(1, &w->be) != FED_OK || fed_pool_new(2, &w->pool) != FED_OK)
        return -1;
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world *w = *state;

    fed_pool_free(w->pool);
    fed_backend_free(w->be);
    free(w);
    return 0;
}

/* A layer file's graph as a spec. */
static void file_spec(const char *path, char *spec, size_t cap)
{
    fed_model_cfg *c = NULL;
    char why[512];

    assert_int_equal(fed_model_cfg_load(path, &c, why, sizeof why), FED_OK);
    assert_int_equal(fed_model_cfg_spec(c, spec, cap, why, sizeof why), FED_OK);
    fed_model_cfg_free(c);
}

/* A batch of N for input in: features in [-1, 1) (tabular: ids in [0,
 * 1024) in columns 0 and 1), labels below the classes. */
static void make_batch(fed_model_shape in, int ids, float *x, int32_t *y)
{
    fed_rng rng;
    int F = in.c * in.h * in.w;

    fed_rng_seed(&rng, 77);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < F; j++)
            x[i * F + j] = j < ids ? (float)(fed_rng_u64(&rng) % 1024)
                                   : (float)(fed_rng_u64(&rng) % 2000) / 1000.0f - 1.0f;
        y[i] = (int32_t)(fed_rng_u64(&rng) % (uint64_t)in.classes);
    }
}

#define MAX_LOGITS 16 /* per sample, of the nets here */

/* Two fused SGD steps (momentum 0.9) of m on b, then every parameter of
 * m into params and b's logits in evaluation (batch norm's running
 * statistics) into logits (N * MAX_LOGITS). */
static void train_steps(fed_model *m, const fed_batch *b, float *params, float *logits)
{
    fed_optim_cfg cfg;
    fed_optim *o = NULL;

    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    for (int step = 0; step < 2; step++) {
        fed_step_stats st = {0, 0, 0};

        assert_int_equal(fed_optim_train_step(o, m, b, &st), FED_OK);
    }
    assert_int_equal(fed_model_get_params(m, params), FED_OK);
    assert_true(fed_model_nlogits(m) <= MAX_LOGITS);
    memset(logits, 0, N * MAX_LOGITS * sizeof *logits);
    assert_int_equal(fed_model_logits(m, b, logits), FED_OK);
    fed_optim_free(o);
}

/* got (n floats) bit for bit ref, else a failure naming what differs. */
static void same_bits(const char *spec, int K, int shards, const char *what, const float *got,
                      const float *ref, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&ref[i], &got[i], sizeof *ref))
            fail_msg("%s, K %d, %d shards: %s %zu is %.9g, %.9g kept", spec, K, shards, what, i,
                     (double)got[i], (double)ref[i]);
}

/* spec's gradients and loss over one batch with --recompute K, for K 1,
 * 2, 3, each on shards 1 to 3, then its parameters after two fused SGD
 * steps (fed_optim_train_step: the updates ride the backward's phases),
 * the running statistics and counter of a batch norm among them, and the
 * logits of an evaluation after them: all bit for bit K 1's of the same
 * shards. (Two shards sharing a buffer between layers of different widths
 * wrote each other's rows in the forward: the tabular net caught it for
 * outputs, the residual net for im2col buffers without their phase cut,
 * ResNet-8's evaluation likewise.) */
static void same_grads(world *w, const char *spec, fed_model_shape in, int ids)
{
    int F = in.c * in.h * in.w;
    float *x = malloc((size_t)N * F * sizeof *x);
    int32_t y[N];
    float *ref = NULL, *got = NULL, *pref = NULL, *pgot = NULL;
    float lref[N * MAX_LOGITS], lgot[N * MAX_LOGITS];
    size_t np = 0;

    make_batch(in, ids, x, y);
    for (int shards = 1; shards <= 3; shards++) {
        double loss1 = 0;

        for (int K = 1; K <= 3; K++) {
            fed_model *m = NULL;
            fed_rng rng;
            fed_batch b = {.n = N, .x_f32 = x, .y = y};
            fed_step_stats st = {0, 0, 0};

            assert_int_equal(fed_model_new(spec, in, w->be, w->pool, shards, N, &m), FED_OK);
            fed_rng_seed(&rng, 5);
            assert_int_equal(fed_model_init(m, &rng), FED_OK);
            fed_model_set_dropout_key(m, 99);
            assert_int_equal(fed_model_set_recompute(m, K), FED_OK);
            assert_int_equal(fed_model_recompute(m), K);
            np = fed_model_nparams(m);
            if (!ref) {
                ref = malloc(np * sizeof *ref);
                got = malloc(np * sizeof *got);
                pref = malloc(np * sizeof *pref);
                pgot = malloc(np * sizeof *pgot);
            }
            /* two steps: the second's dropout masks are a new step's */
            for (int step = 0; step < 2; step++) {
                memset(&st, 0, sizeof st);
                assert_int_equal(fed_model_forward_backward(m, &b, &st), FED_OK);
            }
            memcpy(K == 1 ? ref : got, fed_model_grads_dev(m), np * sizeof *ref);
            train_steps(m, &b, K == 1 ? pref : pgot, K == 1 ? lref : lgot);
            if (K == 1)
                loss1 = st.loss_sum;
            else {
                if (st.loss_sum != loss1)
                    fail_msg("%s, K %d, %d shards: loss %.17g, %.17g kept", spec, K, shards,
                             st.loss_sum, loss1);
                same_bits(spec, K, shards, "gradient", got, ref, np);
                same_bits(spec, K, shards, "parameter after the steps", pgot, pref, np);
                same_bits(spec, K, shards, "evaluation's logit", lgot, lref, N * MAX_LOGITS);
            }
            fed_model_free(m);
        }
    }
    free(ref);
    free(got);
    free(pref);
    free(pgot);
    free(x);
}

/* same_grads on a shipped layer file's graph. */
static void file_grads(world *w, const char *path, fed_model_shape in, int ids)
{
    char spec[FED_MODEL_GRAPH_MAX];

    file_spec(path, spec, sizeof spec);
    same_grads(w, spec, in, ids);
}

static void test_simplecnn(void **state)
{
    file_grads(*state, "examples/models/simplecnn.cfg", (fed_model_shape){1, 28, 28, 10, 0}, 0);
}

static void test_tabular(void **state)
{
    file_grads(*state, "examples/models/tabular.cfg", (fed_model_shape){10, 1, 1, 2, 0}, 2);
}

/* Residual blocks whose skips cross segments, group norm (its statistics
 * in the im2col slot), dropout, max and global average pooling. */
#define RESNET "g:c0=C8k3p1,r0=R,a=C8k3p1,Ug2,R,b=C8k3p1,s1=+r0,r1=R,c=C8k3p1,R,d=C8k3p1," \
               "s2=+r1,R,Mk2,e=C12k3p1,R,Dr250000,f=C12k3p1,R,P,L"

static void test_residual(void **state)
{
    same_grads(*state, RESNET, (fed_model_shape){3, 12, 12, 5, 0}, 0);
}

static void test_resnet8(void **state)
{
    file_grads(*state, "examples/models/resnet8.cfg", (fed_model_shape){1, 28, 28, 10, 0}, 0);
}

/* Batch norm at every position of a segment, after a strided conv, in a
 * residual block whose skip crosses segments, before dropout, and on a
 * linear layer's outputs (one value a channel). */
#define BNNET "g:c0=C6k3p1b0,N,r0=R,a=C6k3p1b0,Ne0.001m0.2,b=+r0,R,C8k3s2p1b0,N,R," \
              "Dr200000,Mk2,L16b0,N,R,L"

static void test_bn_net(void **state)
{
    same_grads(*state, BNNET, (fed_model_shape){2, 10, 10, 4, 0}, 0);
}

static void test_deep_mlp(void **state)
{
    same_grads(*state, "mlp:64,64,64,64,64,64,64,64", (fed_model_shape){1, 8, 8, 10, 0}, 0);
}

/* What the activation buffers take at batch 256, K 1 and 2. */
static double act_ratio(world *w, const char *spec, fed_model_shape in)
{
    fed_model *m = NULL;
    size_t plain, half;

    assert_int_equal(fed_model_new(spec, in, w->be, w->pool, 2, 256, &m), FED_OK);
    plain = fed_model_activation_bytes(m);
    assert_int_equal(fed_model_set_recompute(m, 2), FED_OK);
    half = fed_model_activation_bytes(m);
    assert_int_equal(fed_model_set_recompute(m, 1), FED_OK);
    assert_int_equal(fed_model_activation_bytes(m), plain); /* back as built */
    fed_model_free(m);
    print_message("%s: %zu bytes, %zu at K 2 (%.3f)\n", spec, plain, half,
                  (double)half / (double)plain);
    return (double)half / (double)plain;
}

/* A deep conv net (10 convs, im2col included): at most 0.6. A deep MLP
 * saves less (0.77: with 2 shards its layer 0, split by columns, keeps its
 * output, and the gradient buffers of the outputs kept stay), printed. */
#define DEEPCNN "g:C8k3p1,R,C8k3p1,R,C8k3p1,R,C8k3p1,R,C8k3p1,R,C8k3p1,R,C8k3p1,R," \
                "C8k3p1,R,C8k3p1,R,C8k3p1,R,P,L"

static void test_memory(void **state)
{
    assert_true(act_ratio(*state, DEEPCNN, (fed_model_shape){1, 16, 16, 10, 0}) <= 0.6);
    assert_true(act_ratio(*state, "mlp:64,64,64,64,64,64,64,64", (fed_model_shape){1, 8, 8, 10, 0}) <
                1.0);
}

/* ResNet-8 at K 2, batch 256 (the figure; 0.716 while im2col
 * slots took one size each: its 3x3 convs' im2col, 16-64 times their
 * output, dominate). */
static void test_memory_resnet8(void **state)
{
    char spec[FED_MODEL_GRAPH_MAX];

    file_spec("examples/models/resnet8.cfg", spec, sizeof spec);
    assert_true(act_ratio(*state, spec, (fed_model_shape){1, 28, 28, 10, 0}) <= 0.6);
}

static void test_refusals(void **state)
{
    world *w = *state;
    fed_model *m = NULL;
    char why[256];

    assert_int_equal(fed_model_new("mlp:8,8", (fed_model_shape){1, 4, 4, 3, 0}, w->be, w->pool, 1, 4,
                                   &m),
                     FED_OK);
    assert_int_equal(fed_model_set_recompute(m, 0), FED_ERR_INVAL);
    assert_int_equal(fed_model_dp_check(m, why, sizeof why), FED_OK);
    assert_int_equal(fed_model_set_recompute(m, 2), FED_OK);
    assert_int_equal(fed_model_dp_check(m, why, sizeof why), FED_ERR_UNSUPPORTED);
    assert_string_equal(why, "model: DP-SGD's per-sample norms read every layer's output "
                             "gradient: train without --recompute");
    fed_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simplecnn),
        cmocka_unit_test(test_tabular),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_resnet8),
        cmocka_unit_test(test_bn_net),
        cmocka_unit_test(test_deep_mlp),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_memory_resnet8),
        cmocka_unit_test(test_refusals),
    };

    fed_test_log_quiet();
    return cmocka_run_group_tests(tests, setup, teardown);
}
