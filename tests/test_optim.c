/* test_optim.c - the optimizers against double-precision transcriptions of
 * their update rules (PyTorch's SGD with momentum, weight decay and
 * Nesterov; Adam and AdamW), the learning-rate schedules (per step, and per
 * round or epoch of a run with a warm-up: fed_optim_sched_of_run), FedProx's term,
 * the fused train step against forward_backward + step, checkpointed state,
 * the parsers' rejects, and the one default learning rate per optimizer
 * that every program's --lr 0 resolves to. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/model.h"
#include "model/optim.h"

typedef struct world {
    fed_backend *be;
    fed_pool *pool;
} world;

static int setup(void **state)
{
    world *w = calloc(1, sizeof *w);

    assert_int_equal(fed_backend_cpu_new(1, &w->be), FED_OK);
    assert_int_equal(fed_pool_new(1, &w->pool), FED_OK);
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

/* A tiny model whose gradient buffer the test writes itself. */
static fed_model *small_model(world *w, int shards, uint64_t seed)
{
    fed_model *m = NULL;
    fed_rng rng;

    assert_int_equal(fed_model_new("mlp:7", (fed_model_shape){1, 2, 3, 4, 0}, w->be, w->pool,
                                   shards, 4, &m),
                     FED_OK);
    fed_rng_seed(&rng, seed);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    return m;
}

static void set_grads(fed_model *m, fed_rng *rng, double *g)
{
    size_t n = fed_model_nparams(m);
    float *dev = fed_model_grads_dev(m);

    for (size_t i = 0; i < n; i++) {
        dev[i] = (float)fed_rng_normal(rng);
        g[i] = dev[i];
    }
}

static void assert_close(const float *a, const double *b, size_t n, double tol)
{
    for (size_t i = 0; i < n; i++)
        if (fabs(a[i] - b[i]) > tol * (1.0 + fabs(b[i])))
            fail_msg("element %zu: %.9g vs %.9g", i, (double)a[i], b[i]);
}

/* SGD as torch.optim.SGD writes it, in double. */
static void ref_sgd(double *p, const double *g0, double *buf, size_t n, double lr, double mu,
                    double wd, int nesterov, int first)
{
    for (size_t i = 0; i < n; i++) {
        double g = g0[i] + wd * p[i];

        if (mu != 0.0) {
            buf[i] = first ? g : mu * buf[i] + g;
            g = nesterov ? g + mu * buf[i] : buf[i];
        }
        p[i] -= lr * g;
    }
}

static void sgd_case(world *w, float mu, float wd, int nesterov, int shards)
{
    fed_model *m = small_model(w, shards, 1);
    size_t n = fed_model_nparams(m);
    double *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *buf = calloc(n, sizeof *buf);
    float *got = malloc(n * sizeof *got);
    fed_optim_cfg cfg;
    fed_optim *o = NULL;
    fed_rng rng;

    fed_rng_seed(&rng, 2);
    assert_int_equal(fed_model_get_params(m, got), FED_OK);
    for (size_t i = 0; i < n; i++)
        p[i] = got[i];
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.lr = 0.1f;
    cfg.momentum = mu;
    cfg.weight_decay = wd;
    cfg.nesterov = nesterov;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    assert_int_equal(fed_optim_state_floats(o), mu > 0 ? n : 0);
    for (int s = 0; s < 5; s++) {
        set_grads(m, &rng, g);
        assert_int_equal(fed_optim_step(o, m), FED_OK);
        ref_sgd(p, g, buf, n, 0.1, mu, wd, nesterov, s == 0);
    }
    assert_int_equal(fed_optim_steps(o), 5);
    assert_int_equal(fed_model_get_params(m, got), FED_OK);
    assert_close(got, p, n, 1e-5);
    fed_optim_free(o);
    fed_model_free(m);
    free(p);
    free(g);
    free(buf);
    free(got);
}

static void test_sgd_rules(void **state)
{
    sgd_case(*state, 0.0f, 0.0f, 0, 1);
    sgd_case(*state, 0.0f, 0.01f, 0, 1);
    sgd_case(*state, 0.9f, 0.0f, 0, 1);
    sgd_case(*state, 0.9f, 5e-4f, 0, 2);
    sgd_case(*state, 0.9f, 5e-4f, 1, 1);
    sgd_case(*state, 0.5f, 0.1f, 1, 3);
}

/* Adam / AdamW as torch.optim.AdamW (decoupled decay), in double. */
static void adam_case(world *w, float wd, int shards)
{
    fed_model *m = small_model(w, shards, 3);
    size_t n = fed_model_nparams(m);
    double *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *mm = calloc(n, sizeof *mm),
           *vv = calloc(n, sizeof *vv);
    float *got = malloc(n * sizeof *got);
    fed_optim_cfg cfg;
    fed_optim *o = NULL;
    fed_rng rng;
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;

    fed_rng_seed(&rng, 4);
    assert_int_equal(fed_model_get_params(m, got), FED_OK);
    for (size_t i = 0; i < n; i++)
        p[i] = got[i];
    fed_optim_cfg_default(&cfg, FED_OPTIM_ADAM);
    cfg.lr = (float)lr;
    cfg.weight_decay = wd;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    assert_int_equal(fed_optim_state_floats(o), 2 * n);
    for (int t = 1; t <= 6; t++) {
        set_grads(m, &rng, g);
        assert_int_equal(fed_optim_step(o, m), FED_OK);
        for (size_t i = 0; i < n; i++) {
            double mh, vh;

            p[i] *= 1.0 - lr * wd;
            mm[i] = b1 * mm[i] + (1 - b1) * g[i];
            vv[i] = b2 * vv[i] + (1 - b2) * g[i] * g[i];
            mh = mm[i] / (1 - pow(b1, t));
            vh = vv[i] / (1 - pow(b2, t));
            p[i] -= lr * mh / (sqrt(vh) + eps);
        }
    }
    assert_int_equal(fed_model_get_params(m, got), FED_OK);
    assert_close(got, p, n, 2e-5);
    fed_optim_free(o);
    fed_model_free(m);
    free(p);
    free(g);
    free(mm);
    free(vv);
    free(got);
}

static void test_adam_rules(void **state)
{
    adam_case(*state, 0.0f, 1);
    adam_case(*state, 0.05f, 2);
}

static void test_prox_term(void **state)
{
    world *w = *state;
    fed_model *m = small_model(w, 1, 5);
    size_t n = fed_model_nparams(m);
    float *p0 = malloc(n * 4), *got = malloc(n * 4);
    double *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
    fed_optim_cfg cfg;
    fed_optim *o = NULL;
    fed_rng rng;

    fed_rng_seed(&rng, 6);
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.lr = 0.1f;
    cfg.momentum = 0.0f;
    cfg.prox_mu = 0.5f;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    assert_int_equal(fed_optim_set_anchor(o, m), FED_OK);
    assert_int_equal(fed_model_get_params(m, p0), FED_OK);
    for (size_t i = 0; i < n; i++)
        p[i] = p0[i];
    for (int s = 0; s < 4; s++) {
        set_grads(m, &rng, g);
        assert_int_equal(fed_optim_step(o, m), FED_OK);
        for (size_t i = 0; i < n; i++)
            p[i] -= 0.1 * (g[i] + 0.5 * (p[i] - p0[i]));
    }
    assert_int_equal(fed_model_get_params(m, got), FED_OK);
    assert_close(got, p, n, 1e-5);
    fed_optim_free(o);
    fed_model_free(m);
    free(p0);
    free(got);
    free(p);
    free(g);
}

/* SCAFFOLD's correction: each SGD step (momentum 0.9) follows g + corr. */
static void test_correction(void **state)
{
    world *w = *state;
    fed_model *m = small_model(w, 1, 5);
    size_t n = fed_model_nparams(m);
    float *corr = malloc(n * 4), *got = malloc(n * 4);
    double *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *v = calloc(n, sizeof *v);
    fed_optim_cfg cfg;
    fed_optim *o = NULL;
    fed_rng rng;

    fed_rng_seed(&rng, 7);
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.lr = 0.1f;
    cfg.momentum = 0.9f;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    assert_int_equal(fed_model_get_params(m, got), FED_OK);
    for (size_t i = 0; i < n; i++) {
        p[i] = got[i];
        corr[i] = (float)(0.25 * ((double)(i % 7) - 3.0));
    }
    assert_int_equal(fed_optim_set_correction(o, corr), FED_OK);
    for (int s = 0; s < 4; s++) {
        set_grads(m, &rng, g);
        assert_int_equal(fed_optim_step(o, m), FED_OK);
        for (size_t i = 0; i < n; i++) {
            v[i] = 0.9 * v[i] + (g[i] + (double)corr[i]);
            p[i] -= 0.1 * v[i];
        }
    }
    assert_int_equal(fed_model_get_params(m, got), FED_OK);
    assert_close(got, p, n, 1e-5);
    fed_optim_free(o);
    fed_model_free(m);
    free(corr);
    free(got);
    free(p);
    free(g);
    free(v);
}

static void test_schedules(void **state)
{
    world *w = *state;
    fed_model *m = small_model(w, 1, 1);
    fed_optim_cfg cfg;
    fed_optim *o = NULL;

    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.lr = 0.4f;
    assert_int_equal(fed_optim_sched_parse("step:3,0.5", &cfg), FED_OK);
    assert_int_equal(cfg.sched, FED_SCHED_STEP);
    assert_int_equal(cfg.step_size, 3);
    assert_true(fabsf(cfg.gamma - 0.5f) < 1e-7f);
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    {
        static const float want[] = {0.4f, 0.4f, 0.4f, 0.2f, 0.2f, 0.2f, 0.1f};

        for (int s = 0; s < 7; s++) {
            assert_true(fabsf(fed_optim_lr(o) - want[s]) < 1e-7f);
            assert_int_equal(fed_optim_step(o, m), FED_OK);
        }
    }
    fed_optim_free(o);

    assert_int_equal(fed_optim_sched_parse("cosine:10", &cfg), FED_OK);
    assert_int_equal(cfg.total_steps, 10);
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    for (int s = 0; s < 12; s++) {
        double want = s < 10 ? 0.4 * 0.5 * (1 + cos(M_PI * s / 10.0)) : 0.0;

        assert_true(fabs(fed_optim_lr(o) - want) < 1e-6);
        assert_int_equal(fed_optim_step(o, m), FED_OK);
    }
    fed_optim_free(o);

    assert_int_equal(fed_optim_sched_parse("const", &cfg), FED_OK);
    assert_int_equal(cfg.sched, FED_SCHED_CONST);
    assert_int_equal(fed_optim_sched_parse("cosine", &cfg), FED_OK);
    assert_int_equal(cfg.sched, FED_SCHED_COSINE);
    assert_int_equal(cfg.total_steps, 0);
    fed_model_free(m);
}

/* A schedule counted in a run's units (fed_optim_sched_of_run), as a node
 * counts rounds: the rate of each round of 10 (step r - 1), each value
 * worked out here by hand. Warm-up: round r <= W at lr r / (W + 1), then
 * the schedule as if the run began after it (cosine over the rounds left,
 * above 0 at the last round; step's decays counted from the warm-up's end). */
static void test_run_schedules(void **state)
{
    static const struct {
        const char *text;
        long warmup;
        double want[10];
    } cases[] = {
        {"const", 0, {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}},
        {"const", 1, {0.05, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}},
        {"step:4,0.5", 0, {0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.025, 0.025}},
        {"step:4,0.5", 2, {0.1 / 3, 0.2 / 3, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05}},
        /* cosine over 10: 0.1 (1 + cos(pi (r - 1) / 10)) / 2 */
        {"cosine", 0, {0.1, 0.0975528258, 0.0904508497, 0.0793892626, 0.0654508497, 0.05,
                       0.0345491503, 0.0206107374, 0.0095491503, 0.0024471742}},
        /* 4 rounds of warm-up, then cosine over the 6 left: cos(pi k / 6) */
        {"cosine", 4, {0.02, 0.04, 0.06, 0.08, 0.1, 0.0933012702, 0.075, 0.05, 0.025,
                       0.0066987298}},
    };
    fed_optim_cfg cfg;

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
        cfg.lr = 0.1f;
        assert_int_equal(fed_optim_sched_of_run(cases[i].text, 10, cases[i].warmup, 1, &cfg),
                         FED_OK);
        for (long r = 1; r <= 10; r++) {
            float got = fed_optim_sched_lr(&cfg, r - 1);

            if (fabs(got - cases[i].want[r - 1]) > 1e-7 || !(got > 0))
                fail_msg("%s, warm-up %ld: round %ld at %.10f, wanted %.10f", cases[i].text,
                         cases[i].warmup, r, (double)got, cases[i].want[r - 1]);
        }
    }
    /* in fednode train's units: 3 steps an epoch, 4 epochs, 1 of warm-up */
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    assert_int_equal(fed_optim_sched_of_run("step:2,0.5", 4, 1, 3, &cfg), FED_OK);
    assert_int_equal(cfg.step_size, 6);
    assert_int_equal(cfg.warmup_steps, 3);
    assert_int_equal(fed_optim_sched_of_run("cosine", 4, 1, 3, &cfg), FED_OK);
    assert_int_equal(cfg.total_steps, 12);
    assert_int_equal(cfg.warmup_steps, 3);
    /* what is not a run's schedule */
    assert_int_equal(fed_optim_sched_of_run("cosine", 0, 0, 1, &cfg), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_optim_sched_of_run("cosine", 5, 5, 1, &cfg), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_optim_sched_of_run("cosine:10", 10, 0, 1, &cfg), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_optim_sched_of_run("const", 10, -1, 1, &cfg), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_optim_sched_of_run("linear", 10, 0, 1, &cfg), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_optim_sched_of_run("const", 0, 3, 1, &cfg), FED_OK); /* forever */
    assert_int_equal(fed_optim_sched_of_run("step:2,0.5", 0, 0, 1, &cfg), FED_OK);
}

/* The optimizer's rate follows the same function as it counts its steps,
 * warm-up included. */
static void test_optim_warmup(void **state)
{
    world *w = *state;
    fed_model *m = small_model(w, 1, 1);
    fed_optim_cfg cfg;
    fed_optim *o = NULL;
    static const float want[] = {0.1f, 0.2f, 0.3f, 0.3f, 0.15f, 0.15f};

    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.lr = 0.3f;
    assert_int_equal(fed_optim_sched_of_run("step:2,0.5", 3, 2, 1, &cfg), FED_OK);
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    for (int s = 0; s < 6; s++) {
        assert_true(fabsf(fed_optim_lr(o) - want[s]) < 1e-7f);
        assert_true(fed_optim_lr(o) == fed_optim_sched_lr(&cfg, s));
        assert_int_equal(fed_optim_step(o, m), FED_OK);
    }
    fed_optim_free(o);
    fed_model_free(m);
}

static void test_parse_rejects(void **state)
{
    static const char *bad[] = {"", "cos", "cosine:", "cosine:0", "cosine:-3", "cosine:5x",
                                "step", "step:", "step:3", "step:3,", "step:0,0.5",
                                "step:3,0", "step:3,1.5", "step:3,x", "step:,0.5",
                                "step:3, 0.5", "Const"};
    fed_optim_cfg cfg;
    fed_optim_kind k;

    (void)state;
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (fed_optim_sched_parse(bad[i], &cfg) != FED_ERR_BAD_VALUE)
            fail_msg("schedule '%s' accepted", bad[i]);
    assert_int_equal(fed_optim_sched_parse(NULL, &cfg), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_optim_kind_parse("sgd", &k), FED_OK);
    assert_int_equal(k, FED_OPTIM_SGD);
    assert_int_equal(fed_optim_kind_parse("adam", &k), FED_OK);
    assert_int_equal(k, FED_OPTIM_ADAM);
    assert_int_equal(fed_optim_kind_parse("SGD", &k), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_optim_kind_parse("rmsprop", &k), FED_ERR_BAD_VALUE);
}

/* Adam 0.002, SGD 0.05: what fednode train, fednode run and fedsim give an
 * optimizer when --lr is not given (0), and fed_optim_cfg_default's rate;
 * an explicit rate wins; a bad one is left for the caller to refuse. */
static void test_default_lr(void **state)
{
    fed_optim_cfg cfg;

    (void)state;
    assert_true(fed_optim_default_lr(FED_OPTIM_ADAM) == 0.002f);
    assert_true(fed_optim_default_lr(FED_OPTIM_SGD) == 0.05f);
    assert_true(fed_optim_resolve_lr(FED_OPTIM_ADAM, 0) == 0.002f);
    assert_true(fed_optim_resolve_lr(FED_OPTIM_SGD, 0) == 0.05f);
    assert_true(fed_optim_resolve_lr(FED_OPTIM_ADAM, 0.01) == 0.01f);
    assert_true(fed_optim_resolve_lr(FED_OPTIM_SGD, 0.3) == 0.3f);
    assert_true(fed_optim_resolve_lr(FED_OPTIM_ADAM, -1) == -1.0f);
    assert_true(isnan(fed_optim_resolve_lr(FED_OPTIM_SGD, NAN)));
    fed_optim_cfg_default(&cfg, FED_OPTIM_ADAM);
    assert_true(cfg.lr == 0.002f);
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    assert_true(cfg.lr == 0.05f);
    /* the help texts say the same numbers */
    assert_string_equal(FED_OPTIM_LR_HELP, "0: the optimizer's own, sgd 0.05, adam 0.002");
}

static void test_bad_cfg(void **state)
{
    world *w = *state;
    fed_model *m = small_model(w, 1, 1);
    fed_optim_cfg cfg;
    fed_optim *o = (fed_optim *)1;

    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.momentum = 1.0f;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_ERR_INVAL);
    assert_null(o);
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.lr = -0.1f;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_ERR_INVAL);
    fed_optim_cfg_default(&cfg, FED_OPTIM_ADAM);
    cfg.beta2 = 1.0f;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_ERR_INVAL);
    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.sched = FED_SCHED_STEP;
    cfg.step_size = 0;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_ERR_INVAL);
    fed_model_free(m);
}

static void fixed_batch(float *x, int32_t *y)
{
    fed_rng rng;

    fed_rng_seed(&rng, 9);
    for (int i = 0; i < 12 * 64; i++)
        x[i] = (float)fed_rng_normal(&rng);
    for (int i = 0; i < 12; i++)
        y[i] = (int32_t)fed_rng_below(&rng, 5);
}

/* Train steps on a fixed batch: fused or not, with the given optimizer. */
static float *run_steps(world *w, fed_optim_kind kind, int fused, int shards, int steps,
                        fed_optim **keep, fed_model **keep_m)
{
    fed_model *m = NULL;
    fed_optim *o = NULL;
    fed_optim_cfg cfg;
    fed_rng rng;
    fed_model_shape in = {1, 8, 8, 5, 0};
    float x[12 * 64];
    int32_t y[12];
    float *p;

    assert_int_equal(fed_model_new("mlp:24,16", in, w->be, w->pool, shards, 12, &m), FED_OK);
    fed_rng_seed(&rng, 8);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    fixed_batch(x, y);
    fed_optim_cfg_default(&cfg, kind);
    cfg.weight_decay = 1e-3f;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    fed_batch b = {.n = 12, .x_f32 = x, .y = y};
    for (int s = 0; s < steps; s++) {
        if (fused) {
            assert_int_equal(fed_optim_train_step(o, m, &b, NULL), FED_OK);
        } else {
            assert_int_equal(fed_model_forward_backward(m, &b, NULL), FED_OK);
            assert_int_equal(fed_optim_step(o, m), FED_OK);
        }
    }
    p = malloc(fed_model_nparams(m) * sizeof *p);
    assert_int_equal(fed_model_get_params(m, p), FED_OK);
    if (keep) {
        *keep = o;
        *keep_m = m;
    } else {
        fed_optim_free(o);
        fed_model_free(m);
    }
    return p;
}

static void test_fused_step_matches(void **state)
{
    for (int k = 0; k < 2; k++)
        for (int shards = 1; shards <= 3; shards++) {
            fed_optim_kind kind = k ? FED_OPTIM_ADAM : FED_OPTIM_SGD;
            float *a = run_steps(*state, kind, 0, shards, 5, NULL, NULL);
            float *b = run_steps(*state, kind, 1, shards, 5, NULL, NULL);
            size_t n = 64 * 24 + 24 + 24 * 16 + 16 + 16 * 5 + 5;

            /* element-wise updates over chunks: the very same bits */
            assert_memory_equal(a, b, n * sizeof *a);
            free(a);
            free(b);
        }
}

static void test_state_round_trip(void **state)
{
    world *w = *state;

    for (int k = 0; k < 2; k++) {
        fed_optim_kind kind = k ? FED_OPTIM_ADAM : FED_OPTIM_SGD;
        fed_optim *o = NULL, *o2 = NULL;
        fed_model *m = NULL, *m2 = NULL;
        float *straight = run_steps(w, kind, 1, 1, 6, NULL, NULL);
        float *half = run_steps(w, kind, 1, 1, 3, &o, &m);
        size_t nf = fed_optim_state_floats(o), np = fed_model_nparams(m);
        float *st = malloc(nf * sizeof *st);
        long step = 0;
        float *resumed;

        assert_int_equal(nf, k ? 2 * np : np);
        assert_int_equal(fed_optim_get_state(o, st, &step), FED_OK);
        assert_int_equal(step, 3);
        /* a fresh model and optimizer, loaded with the checkpoint, goes on
         * exactly as the uninterrupted run */
        free(run_steps(w, kind, 1, 1, 0, &o2, &m2));
        assert_int_equal(fed_model_set_params(m2, half), FED_OK);
        assert_int_equal(fed_optim_set_state(o2, st, step), FED_OK);
        assert_int_equal(fed_optim_steps(o2), 3);
        assert_int_equal(fed_optim_set_state(o2, st, -1), FED_ERR_INVAL);
        {
            float x[12 * 64];
            int32_t y[12];

            fixed_batch(x, y);
            fed_batch b = {.n = 12, .x_f32 = x, .y = y};
            for (int s = 0; s < 3; s++)
                assert_int_equal(fed_optim_train_step(o2, m2, &b, NULL), FED_OK);
        }
        resumed = malloc(np * sizeof *resumed);
        assert_int_equal(fed_model_get_params(m2, resumed), FED_OK);
        assert_memory_equal(resumed, straight, np * sizeof *resumed);
        free(resumed);
        free(st);
        free(straight);
        free(half);
        fed_optim_free(o);
        fed_optim_free(o2);
        fed_model_free(m);
        fed_model_free(m2);
    }
}

static void test_alloc_failures(void **state)
{
    world *w = *state;
    fed_model *m = small_model(w, 1, 1);
    int ok = 0;

    for (unsigned long nth = 1; nth < 50 && !ok; nth++) {
        fed_optim_cfg cfg;
        fed_optim *o = (fed_optim *)1;
        fed_err e;

        fed_optim_cfg_default(&cfg, FED_OPTIM_ADAM);
        cfg.prox_mu = 0.1f;
        fed_alloc_fail_nth(nth, 0);
        e = fed_optim_new(&cfg, m, &o);
        fed_alloc_fail_nth(0, 0);
        if (e == FED_OK) {
            ok = 1;
            assert_true(nth > 3); /* struct, m, v, anchor */
            fed_optim_free(o);
        } else {
            assert_int_equal(e, FED_ERR_NOMEM);
            assert_null(o);
        }
    }
    assert_true(ok);
    fed_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_rules),          cmocka_unit_test(test_adam_rules),
        cmocka_unit_test(test_prox_term),          cmocka_unit_test(test_correction),          cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_run_schedules),      cmocka_unit_test(test_optim_warmup),
        cmocka_unit_test(test_parse_rejects),      cmocka_unit_test(test_bad_cfg),
        cmocka_unit_test(test_fused_step_matches), cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_alloc_failures),     cmocka_unit_test(test_default_lr),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
