/* test_merge.c - merge strategies (model/merge.h) against references the
 * test computes itself: FedAvg as an exact double weighted mean (tolerance:
 * the float rounding of that mean, |got - ref| <= 2^-24 |ref| (1 + 1e-6)),
 * FedAdam/FedYogi/FedAdagrad/FedAvgM steps from the papers' update rules in
 * double (relative 1e-6), robust rules against f huge outliers, Krum and
 * Bulyan against a brute-force double reference, clipping, NaN rejection,
 * key order, state round trips, a download/upload backend path, and
 * allocation failures. Runs on the CPU backend; well under a second. */
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
#include "core/log.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/merge.h"
#include "tests/support/support.h"

/* ------------------------------------------------------------- world -- */

typedef struct world {
    fed_backend *be;       /* the CPU backend */
    fed_backend hostcopy;  /* its table without host memory: merge stages via download/upload */
} world;

static int world_setup(void **state)
{
    world *w = calloc(1, sizeof *w);

    if (!w || fed_backend_cpu_new(1, &w->be) != FED_OK)
        return -1;
    w->hostcopy = *w->be;
    w->hostcopy.name = "hostcopy";
    w->hostcopy.caps &= ~FED_BACKEND_CAP_HOST_MEMORY;
    fed_test_log_capture(FED_LOG_DEBUG);
    fed_log_set_level(FED_LOG_DEBUG);
    *state = w;
    return 0;
}

static int world_teardown(void **state)
{
    world *w = *state;

    fed_test_log_default();
    fed_backend_free(w->be);
    free(w);
    return 0;
}

/* ----------------------------------------------------------- clients -- */

typedef struct clients {
    int n;
    size_t d;
    float **x;            /* n vectors of d */
    fed_merge_input *in;  /* n */
    fed_merge_result *res;
} clients;

static void set_key(uint8_t *key, int i)
{
    memset(key, 0, FED_MERGE_KEY_BYTES);
    key[0] = (uint8_t)((i * 73 + 11) & 0xff); /* a bijection on 0..255, not index order */
    key[1] = (uint8_t)(i >> 8);
    key[31] = 0x5a;
}

static clients *clients_new(int n, size_t d)
{
    clients *c = calloc(1, sizeof *c);

    assert_non_null(c);
    c->n = n;
    c->d = d;
    c->x = calloc((size_t)n, sizeof *c->x);
    c->in = calloc((size_t)n, sizeof *c->in);
    c->res = calloc((size_t)n, sizeof *c->res);
    assert_non_null(c->x);
    assert_non_null(c->in);
    assert_non_null(c->res);
    for (int i = 0; i < n; i++) {
        c->x[i] = calloc(d, sizeof(float));
        assert_non_null(c->x[i]);
        c->in[i].delta = c->x[i];
        c->in[i].weight = 1.0;
        set_key(c->in[i].key, i);
    }
    return c;
}

static void clients_free(clients *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        free(c->x[i]);
    free(c->x);
    free(c->in);
    free(c->res);
    free(c);
}

static void fill_uniform(clients *c, fed_rng *r, float lo, float hi)
{
    for (int i = 0; i < c->n; i++)
        for (size_t j = 0; j < c->d; j++)
            c->x[i][j] = lo + (hi - lo) * fed_rng_uniform_f(r);
}

static float *zeros(size_t d)
{
    float *v = calloc(d, sizeof(float));

    assert_non_null(v);
    return v;
}

static float *dup_vec(const float *x, size_t d)
{
    float *v = malloc(d * sizeof(float));

    assert_non_null(v);
    memcpy(v, x, d * sizeof(float));
    return v;
}

/* New merge, apply once onto a copy of global0 (or zeros); returns the result. */
static float *merge_once(fed_backend *be, const char *spec, clients *c, const float *global0,
                         const fed_merge_config *cfg, fed_err expect)
{
    fed_merge *m = NULL;
    float *g = global0 ? dup_vec(global0, c->d) : zeros(c->d);

    assert_int_equal(fed_merge_new(spec, c->d, cfg, be, &m), FED_OK);
    assert_int_equal(fed_merge_apply(m, g, c->in, c->n, c->res), expect);
    fed_merge_free(m);
    return g;
}

/* |got - ref| within the float rounding of ref (half an ulp, 2^-24 relative). */
static void assert_rounded(double ref, float got)
{
    double tol = ldexp(fabs(ref), -24) * (1.0 + 1e-6) + 1e-300;

    if (!(fabs((double)got - ref) <= tol))
        fail_msg("got %.9g, reference %.17g, tolerance %.3g", (double)got, ref, tol);
}

/* |got - ref| <= rel |ref| + floor. */
static void assert_rel(double ref, double got, double rel, double floor_)
{
    double tol = rel * fabs(ref) + floor_;

    if (!(fabs(got - ref) <= tol))
        fail_msg("got %.9g, reference %.12g (tolerance %.3g)", got, ref, tol);
}

/* ------------------------------------------------------------- specs -- */

static void test_spec_grammar(void **state)
{
    world *w = *state;
    static const char *good[] = {
        "fedavg", "fedavgm", "fedavgm:0.5", "fedavgm:0,2", "fedprox:0", "fedprox:0.01", "fedprox:1000",
        "fedadam", "fedyogi:0.1", "fedadagrad:0.1,0.8,0.9,0.01", "median", "trimmed:0",
        "trimmed:0.49", "krum:0", "krum:3", "multikrum:2,5", "bulyan:1", "clip:10+median",
        "clip:0.5+fedadam:0.03", "clip:1e3+multikrum:1,2", "fednova", "scaffold",
        "scaffold:0.5",
    };
    static const char *bad[] = {
        "", "fedavg:1", "FedAvg", "fedprox", "fedprox:-1", "fedprox:1,2", "trimmed",
        "trimmed:0.5", "trimmed:-0.1", "krum", "krum:-1", "krum:1.5", "krum:1,2",
        "multikrum:2", "multikrum:2,0", "bulyan:x", "clip:0+fedavg", "clip:-1+fedavg",
        "clip:10", "clip:10+", "clip:1+clip:2+median", "fedadam:0.1,1.0", "fedadam:0",
        "fedadam:1,0.9,0.99,0", "fedadam:1,2,3,4,5", "median ", " median", "nope",
        "fedavgm:nan", "fedavgm:1", "fedadam:inf", "fedprox:0.1x", "fedprox:1000.5", "fedprox:4e38", "median+clip:1",
        "krum:", "multikrum:1,,2", "fednova:1", "scaffold:0", "scaffold:-1", "scaffold:1,2",
    };
    fed_merge *m = NULL;

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (fed_merge_spec_check(good[i]) != FED_OK)
            fail_msg("rejected good spec \"%s\"", good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fed_test_log_reset();
        if (fed_merge_spec_check(bad[i]) != FED_ERR_BAD_VALUE)
            fail_msg("accepted bad spec \"%s\"", bad[i]);
        assert_non_null(strstr(fed_test_log_last(), "merge: bad strategy"));
        if (bad[i][0] && !strstr(fed_test_log_last(), bad[i]))
            fail_msg("log line \"%s\" does not name \"%s\"", fed_test_log_last(), bad[i]);
    }
    assert_int_equal(fed_merge_spec_check(NULL), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_merge_new("nope", 10, NULL, w->be, &m), FED_ERR_BAD_VALUE);
    assert_null(m);

    assert_int_equal(fed_merge_new("fedprox:0.25", 10, NULL, w->be, &m), FED_OK);
    assert_true(fed_merge_prox_mu(m) == 0.25);
    assert_string_equal(fed_merge_spec(m), "fedprox:0.25");
    assert_int_equal(fed_merge_max_clients(m), FED_MERGE_DEFAULT_MAX_CLIENTS);
    fed_merge_free(m);
    assert_int_equal(fed_merge_new("fedavg", 10, NULL, w->be, &m), FED_OK);
    assert_true(fed_merge_prox_mu(m) == 0.0);
    fed_merge_free(m);
    fed_merge_free(NULL);
    assert_string_equal(fed_merge_verdict_name(FED_MERGE_NOT_SELECTED), "not-selected");
}

/* The traits query answers for every strategy name, with and without clip,
 * and a built merge answers as its spec does. */
static void test_spec_traits(void **state)
{
    world *w = *state;
    static const struct {
        const char *spec;
        int weighted;
        double clip;
    } cases[] = {
        {"fedavg", 1, 0},          {"fedavgm", 1, 0},           {"fedavgm:0.5,2", 1, 0},
        {"fedprox:0.01", 1, 0},    {"fedadam", 1, 0},           {"fedyogi:0.1", 1, 0},
        {"fedadagrad", 1, 0},      {"median", 0, 0},            {"trimmed:0.2", 0, 0},
        {"krum:1", 0, 0},          {"multikrum:2,5", 0, 0},     {"bulyan:1", 0, 0},
        {"clip:10+fedavg", 1, 10}, {"clip:2.5+fedavgm", 1, 2.5}, {"clip:0.5+fedprox:0", 1, 0.5},
        {"clip:1e3+fedadam:0.03", 1, 1e3}, {"clip:3+fedyogi", 1, 3}, {"clip:4+fedadagrad", 1, 4},
        {"clip:10+median", 0, 10}, {"clip:0.25+trimmed:0.1", 0, 0.25}, {"clip:7+krum:0", 0, 7},
        {"clip:2.5+multikrum:2,5", 0, 2.5}, {"clip:1+bulyan:0", 0, 1},
    };
    fed_merge_traits t;
    fed_merge *m = NULL;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        t.weighted = -1;
        t.clip = -1;
        if (fed_merge_spec_traits(cases[i].spec, &t) != FED_OK)
            fail_msg("spec \"%s\" refused", cases[i].spec);
        if (t.weighted != cases[i].weighted || t.clip != cases[i].clip)
            fail_msg("\"%s\": weighted %d clip %g, want %d and %g", cases[i].spec, t.weighted,
                     t.clip, cases[i].weighted, cases[i].clip);
        assert_int_equal(fed_merge_new(cases[i].spec, 10, NULL, w->be, &m), FED_OK);
        t = fed_merge_traits_of(m);
        assert_int_equal(t.weighted, cases[i].weighted);
        assert_true(t.clip == cases[i].clip);
        fed_merge_free(m);
        m = NULL;
    }
    t.weighted = 1;
    t.clip = 1;
    fed_test_log_reset();
    assert_int_equal(fed_merge_spec_traits("clip:1+multikrum", &t), FED_ERR_BAD_VALUE);
    assert_non_null(strstr(fed_test_log_last(), "clip:1+multikrum"));
    assert_int_equal(t.weighted, 0);
    assert_true(t.clip == 0);
}

/* ------------------------------------------------------------ FedAvg -- */

static void test_fedavg_weighted_mean(void **state)
{
    world *w = *state;
    const size_t d = 10007; /* crosses the backend's 4096 blocks, odd tail */
    clients *c = clients_new(5, d);
    static const double wt[5] = {10, 250, 3, 77, 1000};
    fed_rng r;
    float *g0, *g, *gz;
    double total = 0.0;
    fed_merge *m = NULL;

    fed_rng_seed(&r, 1);
    fill_uniform(c, &r, -3.0f, 3.0f);
    for (int i = 0; i < 5; i++) {
        c->in[i].weight = wt[i];
        total += wt[i];
    }
    gz = merge_once(w->be, "fedavg", c, NULL, NULL, FED_OK);
    for (size_t j = 0; j < d; j++) {
        double ref = 0.0;

        for (int i = 0; i < 5; i++)
            ref += wt[i] / total * (double)c->x[i][j];
        assert_rounded(ref, gz[j]);
    }
    for (int i = 0; i < 5; i++) {
        assert_int_equal(c->res[i].verdict, FED_MERGE_USED);
        assert_int_equal(c->res[i].err, FED_OK);
        assert_true(fabs(c->res[i].share - wt[i] / total) < 1e-15);
        assert_true(c->res[i].clip_scale == 1.0f);
    }
    /* global += D, and D is what fed_merge_delta shows. */
    g0 = zeros(d);
    for (size_t j = 0; j < d; j++)
        g0[j] = (float)j * 0.001f - 4.0f;
    g = dup_vec(g0, d);
    assert_int_equal(fed_merge_new("fedavg", d, NULL, w->be, &m), FED_OK);
    assert_int_equal(fed_merge_apply(m, g, c->in, c->n, NULL), FED_OK);
    assert_memory_equal(fed_merge_delta(m), gz, d * sizeof(float));
    for (size_t j = 0; j < d; j++)
        assert_true(g[j] == g0[j] + gz[j]);
    fed_merge_free(m);
    free(g0);
    free(g);
    free(gz);
    clients_free(c);
}

static void test_fedavg_weight_cap(void **state)
{
    world *w = *state;
    const size_t d = 64;
    clients *c = clients_new(4, d);
    fed_merge_config cfg = fed_merge_config_default();
    static const double wt[4] = {1e9, 100, 200, 300};
    double share[4];
    float *g;
    fed_rng r;

    fed_rng_seed(&r, 2);
    fill_uniform(c, &r, -1.0f, 1.0f);
    for (int i = 0; i < 4; i++)
        c->in[i].weight = wt[i];
    cfg.weight_cap = 0.4;
    share[0] = 0.4;
    for (int i = 1; i < 4; i++)
        share[i] = 0.6 * wt[i] / 600.0;
    g = merge_once(w->be, "fedavg", c, NULL, &cfg, FED_OK);
    for (int i = 0; i < 4; i++)
        assert_true(fabs(c->res[i].share - share[i]) < 1e-15);
    assert_true(c->res[0].share <= 0.4);
    for (size_t j = 0; j < d; j++) {
        double ref = 0.0;

        for (int i = 0; i < 4; i++)
            ref += share[i] * (double)c->x[i][j];
        assert_rounded(ref, g[j]);
    }
    free(g);

    /* Without the cap the big client takes ~all of it. */
    g = merge_once(w->be, "fedavg", c, NULL, NULL, FED_OK);
    assert_true(c->res[0].share > 0.999999);
    free(g);

    /* Two liars: both capped, and the excess re-spread in two rounds. */
    c->in[1].weight = 5e8;
    cfg.weight_cap = 0.3;
    g = merge_once(w->be, "fedavg", c, NULL, &cfg, FED_OK);
    assert_true(fabs(c->res[0].share - 0.3) < 1e-15);
    assert_true(fabs(c->res[1].share - 0.3) < 1e-15);
    assert_true(fabs(c->res[2].share - 0.4 * 200.0 / 500.0) < 1e-15);
    assert_true(fabs(c->res[3].share - 0.4 * 300.0 / 500.0) < 1e-15);
    free(g);

    /* cap * n <= 1 cannot be met: equal shares. */
    cfg.weight_cap = 0.2;
    g = merge_once(w->be, "fedavg", c, NULL, &cfg, FED_OK);
    for (int i = 0; i < 4; i++)
        assert_true(c->res[i].share == 0.25);
    free(g);
    clients_free(c);
}

static void test_fedprox_zero_is_fedavg(void **state)
{
    world *w = *state;
    clients *c = clients_new(6, 3001);
    fed_rng r;
    float *a, *b, *p;

    fed_rng_seed(&r, 3);
    fill_uniform(c, &r, -2.0f, 2.0f);
    for (int i = 0; i < 6; i++)
        c->in[i].weight = 1 + i * 17;
    a = merge_once(w->be, "fedavg", c, c->x[0], NULL, FED_OK);
    b = merge_once(w->be, "fedprox:0", c, c->x[0], NULL, FED_OK);
    p = merge_once(w->be, "fedprox:0.5", c, c->x[0], NULL, FED_OK);
    assert_memory_equal(a, b, c->d * sizeof(float));
    assert_memory_equal(a, p, c->d * sizeof(float)); /* mu only matters to clients */
    free(a);
    free(b);
    free(p);
    clients_free(c);
}

/* The weighted sum split over a pool (two and three threads) gives the
 * bits of the unsplit one, for a length that is no multiple of 16. */
static void test_pool_split_same_bits(void **state)
{
    world *w = *state;
    clients *c = clients_new(7, 40013);
    fed_merge_config cfg = fed_merge_config_default();
    fed_rng r;
    float *a, *b;

    fed_rng_seed(&r, 4);
    fill_uniform(c, &r, -3.0f, 3.0f);
    for (int i = 0; i < 7; i++)
        c->in[i].weight = 1 + i * 5;
    a = merge_once(w->be, "fedavg", c, c->x[0], NULL, FED_OK);
    for (int t = 1; t <= 2; t++) {
        assert_int_equal(fed_pool_new(t, &cfg.pool), FED_OK);
        b = merge_once(w->be, "fedavg", c, c->x[0], &cfg, FED_OK);
        assert_memory_equal(a, b, c->d * sizeof(float));
        free(b);
        fed_pool_free(cfg.pool);
    }
    free(a);
    clients_free(c);
}

/* Reversing and rotating the inputs changes nothing, bit for bit. */
static void test_order_independent(void **state)
{
    world *w = *state;
    static const char *specs[] = {"fedavg", "clip:3+fedavg", "fedadam", "median", "trimmed:0.2",
                                  "krum:2", "multikrum:2,4", "bulyan:2"};
    const int n = 11;
    clients *c = clients_new(n, 2500);
    clients *p = clients_new(n, 2500);
    fed_rng r;

    fed_rng_seed(&r, 4);
    fill_uniform(c, &r, -1.0f, 1.0f);
    for (int i = 0; i < n; i++)
        c->in[i].weight = 10 + i;
    for (int i = 0; i < n; i++)
        p->in[i] = c->in[(i * 7 + 3) % n]; /* a permutation of the inputs */
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        float *a = merge_once(w->be, specs[s], c, NULL, NULL, FED_OK);
        float *b = merge_once(w->be, specs[s], p, NULL, NULL, FED_OK);

        if (memcmp(a, b, c->d * sizeof(float)))
            fail_msg("%s depends on input order", specs[s]);
        for (int i = 0; i < n; i++) {
            const fed_merge_result *x = &p->res[i], *y = &c->res[(i * 7 + 3) % n];

            assert_int_equal(x->verdict, y->verdict);
            assert_true(x->share == y->share);
        }
        free(a);
        free(b);
    }
    clients_free(c);
    clients_free(p);
}

/* Where the order of a sum shows even in double (1e30 - 1e30 + 1 against
 * 1e30 + 1 - 1e30), every arrival order still gives the same bits. */
static void test_order_fixed_by_key(void **state)
{
    world *w = *state;
    static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                    {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    clients *c = clients_new(3, 4);
    clients *p = clients_new(3, 4);
    float *first = NULL;

    c->x[0][0] = 1e30f;
    c->x[1][0] = -1e30f;
    c->x[2][0] = 1.0f;
    for (int i = 0; i < 3; i++)
        c->x[i][1] = 0.1f * (float)(i + 1);
    for (int q = 0; q < 6; q++) {
        float *g;

        for (int i = 0; i < 3; i++)
            p->in[i] = c->in[perms[q][i]];
        g = merge_once(w->be, "fedavg", p, NULL, NULL, FED_OK);
        if (!first)
            first = g;
        else {
            assert_memory_equal(first, g, 4 * sizeof(float));
            free(g);
        }
    }
    free(first);
    clients_free(c);
    clients_free(p);
}

/* ------------------------------------------------- server optimizers -- */

typedef enum { REF_ADAM, REF_YOGI, REF_ADAGRAD } ref_kind;

/* Two server steps from the update rules of Reddi et al. (Alg. 2), in double. */
static void check_adaptive(world *w, const char *spec, ref_kind k, double eta, double b1,
                           double b2, double tau)
{
    const size_t d = 40;
    clients *c = clients_new(1, d);
    fed_merge *m = NULL;
    float *g = zeros(d), *st;
    double xm[40], mm[40], vv[40];

    assert_int_equal(fed_merge_new(spec, d, NULL, w->be, &m), FED_OK);
    assert_int_equal(fed_merge_state_floats(m), 2 * d);
    st = calloc(2 * d, sizeof(float));
    for (size_t j = 0; j < d; j++) {
        g[j] = 0.5f - 0.025f * (float)j;
        xm[j] = g[j];
        mm[j] = 0.0;
        vv[j] = tau * tau;
    }
    for (int step = 0; step < 2; step++) {
        for (size_t j = 0; j < d; j++) {
            /* step 1: |d| ~ 0.1..1; step 2: half tiny (v > d^2), half large */
            float dj = step == 0 ? (0.1f + 0.02f * (float)j) * (j & 1 ? -1.0f : 1.0f)
                                 : (j % 2 ? 1e-4f * (float)(j + 1) : -2.0f - 0.01f * (float)j);
            double dd = dj, d2 = dd * dd;

            c->x[0][j] = dj;
            mm[j] = b1 * mm[j] + (1 - b1) * dd;
            if (k == REF_ADAM)
                vv[j] = b2 * vv[j] + (1 - b2) * d2;
            else if (k == REF_YOGI)
                vv[j] = vv[j] - (1 - b2) * d2 * (vv[j] > d2 ? 1.0 : vv[j] < d2 ? -1.0 : 0.0);
            else
                vv[j] = vv[j] + d2;
            xm[j] += eta * mm[j] / (sqrt(vv[j]) + tau);
        }
        assert_int_equal(fed_merge_apply(m, g, c->in, 1, c->res), FED_OK);
        assert_int_equal(fed_merge_get_state(m, st), FED_OK);
        for (size_t j = 0; j < d; j++) {
            assert_rel(xm[j], g[j], 1e-6, 1e-7);
            assert_rel(mm[j], st[j], 1e-6, 1e-9);
            assert_rel(vv[j], st[d + j], 1e-6, 1e-12);
        }
    }
    free(st);
    free(g);
    fed_merge_free(m);
    clients_free(c);
}

static void test_adaptive_closed_forms(void **state)
{
    world *w = *state;

    check_adaptive(w, "fedadam", REF_ADAM, 1e-2, 0.9, 0.99, 1e-3);
    check_adaptive(w, "fedyogi", REF_YOGI, 1e-2, 0.9, 0.99, 1e-3);
    check_adaptive(w, "fedadagrad", REF_ADAGRAD, 1e-2, 0.9, 0.99, 1e-3);
    check_adaptive(w, "fedadam:0.1,0.8,0.9,0.01", REF_ADAM, 0.1, 0.8, 0.9, 0.01);
    check_adaptive(w, "fedyogi:0.3,0.5,0.7,0.05", REF_YOGI, 0.3, 0.5, 0.7, 0.05);
    check_adaptive(w, "fedadagrad:0.05,0,0.5,0.1", REF_ADAGRAD, 0.05, 0.0, 0.5, 0.1);
}

static void check_fedavgm(world *w, const char *spec, double beta, double eta)
{
    const size_t d = 33;
    clients *c = clients_new(2, d);
    fed_merge *m = NULL;
    float *g = zeros(d), st[33];
    double xm[33], vm[33];

    c->in[0].weight = 1;
    c->in[1].weight = 3;
    assert_int_equal(fed_merge_new(spec, d, NULL, w->be, &m), FED_OK);
    assert_int_equal(fed_merge_state_floats(m), d);
    for (size_t j = 0; j < d; j++) {
        g[j] = (float)j;
        xm[j] = g[j];
        vm[j] = 0.0;
    }
    for (int step = 0; step < 3; step++) {
        for (size_t j = 0; j < d; j++) {
            double dm;

            c->x[0][j] = (float)(step + 1) * 0.25f - (float)j * 0.01f;
            c->x[1][j] = (float)(step * step) * 0.5f + (float)j * 0.03f;
            dm = 0.25 * c->x[0][j] + 0.75 * c->x[1][j];
            vm[j] = beta * vm[j] + dm;
            xm[j] += eta * vm[j];
        }
        assert_int_equal(fed_merge_apply(m, g, c->in, 2, NULL), FED_OK);
        assert_int_equal(fed_merge_get_state(m, st), FED_OK);
        for (size_t j = 0; j < d; j++) {
            assert_rel(xm[j], g[j], 1e-6, 1e-6);
            assert_rel(vm[j], st[j], 1e-6, 1e-6);
        }
    }
    free(g);
    fed_merge_free(m);
    clients_free(c);
}

static void test_fedavgm_closed_form(void **state)
{
    world *w = *state;

    check_fedavgm(w, "fedavgm", 0.9, 1.0);
    check_fedavgm(w, "fedavgm:0.5,2", 0.5, 2.0);
    check_fedavgm(w, "fedavgm:0", 0.0, 1.0);
}

/* fednova: x += S D with the step scale of that apply only (1 after it);
 * scaffold:ETA: x += ETA D. D the weighted mean (weights 1 and 3). */
static void check_scaled(world *w, const char *spec, const double *scale, int steps)
{
    const size_t d = 17;
    clients *c = clients_new(2, d);
    fed_merge *m = NULL;
    float *g = zeros(d);
    double xm[17] = {0};

    c->in[0].weight = 1;
    c->in[1].weight = 3;
    assert_int_equal(fed_merge_new(spec, d, NULL, w->be, &m), FED_OK);
    assert_int_equal(fed_merge_state_floats(m), 0);
    for (int step = 0; step < steps; step++) {
        for (size_t j = 0; j < d; j++) {
            c->x[0][j] = (float)(step + 1) * 0.25f - (float)j * 0.01f;
            c->x[1][j] = (float)(step * step) * 0.5f + (float)j * 0.03f;
            xm[j] += scale[step] * (0.25 * c->x[0][j] + 0.75 * c->x[1][j]);
        }
        if (!strcmp(spec, "fednova") && scale[step] != 1.0)
            fed_merge_set_step_scale(m, scale[step]);
        assert_int_equal(fed_merge_apply(m, g, c->in, 2, NULL), FED_OK);
        for (size_t j = 0; j < d; j++)
            assert_rel(xm[j], g[j], 1e-6, 1e-6);
    }
    free(g);
    fed_merge_free(m);
    clients_free(c);
}

static void test_scaled_closed_forms(void **state)
{
    const double nova[3] = {2.71, 1.0, 0.5}, half[3] = {0.5, 0.5, 0.5};

    check_scaled(*state, "fednova", nova, 3); /* the scale of step 0 is not kept */
    check_scaled(*state, "scaffold:0.5", half, 3);
}

/* ------------------------------------------------ robust vs outliers -- */

/* n clients, the last f of them attackers at +1e6 (colluding, identical). */
static clients *attacked(int n, int f, size_t d, uint64_t seed)
{
    clients *c = clients_new(n, d);
    fed_rng r;

    fed_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        for (size_t j = 0; j < d; j++)
            c->x[i][j] = i < n - f ? -1.0f + 2.0f * fed_rng_uniform_f(&r) : 1e6f;
        c->in[i].weight = i < n - f ? 100 + i : 1e6; /* attackers also lie about samples */
    }
    return c;
}

/* Coordinates outside [min, max] over the honest clients. */
static size_t outside_honest(const clients *c, int honest, const float *v)
{
    size_t out = 0;

    for (size_t j = 0; j < c->d; j++) {
        float lo = c->x[0][j], hi = c->x[0][j];

        for (int i = 1; i < honest; i++) {
            lo = c->x[i][j] < lo ? c->x[i][j] : lo;
            hi = c->x[i][j] > hi ? c->x[i][j] : hi;
        }
        out += !(v[j] >= lo && v[j] <= hi);
    }
    return out;
}

static void test_robust_against_outliers(void **state)
{
    world *w = *state;
    const int n = 10, f = 2;
    const size_t d = 5000;
    clients *c = attacked(n, f, d, 5);
    float *v;
    int found = -1;

    v = merge_once(w->be, "median", c, NULL, NULL, FED_OK);
    assert_int_equal(outside_honest(c, n - f, v), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(c->res[i].verdict, FED_MERGE_USED_COORDS);
    assert_true(c->res[n - 1].share == 0.0); /* the attackers' values never kept */
    assert_true(c->res[0].share > 0.0);
    free(v);

    v = merge_once(w->be, "trimmed:0.2", c, NULL, NULL, FED_OK); /* beta = f/n */
    assert_int_equal(outside_honest(c, n - f, v), 0);
    free(v);
    v = merge_once(w->be, "trimmed:0.3", c, NULL, NULL, FED_OK);
    assert_int_equal(outside_honest(c, n - f, v), 0);
    free(v);
    /* Negative: trimming one per side leaves an attacker in every mean. */
    v = merge_once(w->be, "trimmed:0.1", c, NULL, NULL, FED_OK);
    assert_int_equal(outside_honest(c, n - f, v), d);
    free(v);

    v = merge_once(w->be, "krum:2", c, NULL, NULL, FED_OK);
    for (int i = 0; i < n - f; i++)
        if (!memcmp(v, c->x[i], d * sizeof(float)))
            found = i;
    assert_true(found >= 0); /* exactly one of the honest vectors */
    for (int i = 0; i < n; i++)
        assert_int_equal(c->res[i].verdict, i == found ? FED_MERGE_USED : FED_MERGE_NOT_SELECTED);
    assert_true(c->res[n - 1].score > 1e12);
    free(v);

    v = merge_once(w->be, "multikrum:2,5", c, NULL, NULL, FED_OK);
    assert_int_equal(outside_honest(c, n - f, v), 0);
    assert_int_equal(c->res[n - 1].verdict, FED_MERGE_NOT_SELECTED);
    assert_int_equal(c->res[n - 2].verdict, FED_MERGE_NOT_SELECTED);
    free(v);

    /* FedAvg is dragged out of range (and the weight cap alone cannot fix it). */
    v = merge_once(w->be, "fedavg", c, NULL, NULL, FED_OK);
    assert_int_equal(outside_honest(c, n - f, v), d);
    free(v);

    /* Bulyan refuses n < 4F+3 and leaves the global alone. */
    {
        float *g0 = zeros(d);

        g0[0] = 7.0f;
        v = merge_once(w->be, "bulyan:2", c, g0, NULL, FED_ERR_TOO_FEW);
        assert_memory_equal(v, g0, d * sizeof(float));
        for (int i = 0; i < n; i++)
            assert_int_equal(c->res[i].verdict, FED_MERGE_SKIPPED);
        free(v);
        free(g0);
    }
    clients_free(c);

    c = attacked(11, f, d, 6);
    v = merge_once(w->be, "bulyan:2", c, NULL, NULL, FED_OK);
    assert_int_equal(outside_honest(c, 11 - f, v), 0);
    /* The repeated Krum may take the two colluders last (with 2F+1 left, a
     * score counts one neighbour, and theirs is at distance 0); the closest-
     * to-median stage then never keeps their values. */
    assert_true(c->res[10].share == 0.0);
    assert_true(c->res[9].share == 0.0);
    assert_int_equal(c->res[0].verdict == FED_MERGE_USED_COORDS ||
                         c->res[0].verdict == FED_MERGE_NOT_SELECTED,
                     1);
    free(v);
    clients_free(c);

    /* Krum needs n >= 2F+3. */
    c = attacked(6, 2, 10, 7);
    v = merge_once(w->be, "krum:2", c, NULL, NULL, FED_ERR_TOO_FEW);
    free(v);
    clients_free(c);
}

/* ------------------------------------- small known answers, references -- */

static void test_coordinate_known_answers(void **state)
{
    world *w = *state;
    clients *c = clients_new(4, 3);
    static const float vals[4][3] = {{1, -5, 0}, {2, 8, 0}, {3, 1, 0}, {10, 2, 1}};
    float *v;

    for (int i = 0; i < 4; i++)
        memcpy(c->x[i], vals[i], sizeof vals[i]);
    v = merge_once(w->be, "median", c, NULL, NULL, FED_OK);
    assert_true(v[0] == 2.5f && v[1] == 1.5f && v[2] == 0.0f);
    free(v);
    v = merge_once(w->be, "trimmed:0.25", c, NULL, NULL, FED_OK);
    assert_true(v[0] == 2.5f && v[1] == 1.5f && v[2] == 0.0f);
    free(v);
    v = merge_once(w->be, "trimmed:0", c, NULL, NULL, FED_OK);
    assert_true(v[0] == 4.0f && v[1] == 1.5f && v[2] == 0.25f);
    free(v);
    c->n = 3; /* odd count */
    v = merge_once(w->be, "median", c, NULL, NULL, FED_OK);
    assert_true(v[0] == 2.0f && v[1] == 1.0f && v[2] == 0.0f);
    free(v);
    c->n = 4;
    clients_free(c);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;

    return (x > y) - (x < y);
}

/* Many clients (the introselect path), with ties and sorted runs. */
static void test_coordinate_many_clients(void **state)
{
    world *w = *state;
    const int n = 61;
    const size_t d = 700;
    clients *c = clients_new(n, d);
    fed_merge_config cfg = fed_merge_config_default();
    float col[61];
    fed_rng r;
    float *med, *tr;

    fed_rng_seed(&r, 8);
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            c->x[i][j] = j % 3 == 0 ? (float)fed_rng_below(&r, 4)          /* ties */
                         : j % 3 == 1 ? (float)i                              /* sorted */
                                      : fed_rng_uniform_f(&r) * 100.0f - 50.0f;
    cfg.max_clients = 64;
    med = merge_once(w->be, "median", c, NULL, &cfg, FED_OK);
    tr = merge_once(w->be, "trimmed:0.3", c, NULL, &cfg, FED_OK);
    for (size_t j = 0; j < d; j++) {
        double s = 0.0;
        int k = (int)floor(0.3 * n + 1e-9);

        for (int i = 0; i < n; i++)
            col[i] = c->x[i][j];
        qsort(col, (size_t)n, sizeof col[0], cmp_float);
        assert_true(med[j] == col[n / 2]);
        for (int i = k; i < n - k; i++)
            s += col[i];
        assert_rel(s / (n - 2 * k), tr[j], 1e-6, 1e-5);
    }
    free(med);
    free(tr);
    /* even count through the select path */
    c->n = 60;
    med = merge_once(w->be, "median", c, NULL, &cfg, FED_OK);
    for (size_t j = 0; j < d; j++) {
        for (int i = 0; i < 60; i++)
            col[i] = c->x[i][j];
        qsort(col, 60, sizeof col[0], cmp_float);
        assert_true(med[j] == (float)(((double)col[29] + (double)col[30]) * 0.5));
    }
    c->n = n;
    free(med);
    clients_free(c);
}

/* Brute-force references for Krum and Bulyan: distances summed directly in
 * double, clients in key order. */
static int key_order(const clients *c, int *ord)
{
    for (int i = 0; i < c->n; i++)
        ord[i] = i;
    for (int i = 1; i < c->n; i++)
        for (int j = i; j > 0 && memcmp(c->in[ord[j - 1]].key, c->in[ord[j]].key,
                                        FED_MERGE_KEY_BYTES) > 0; j--) {
            int t = ord[j];

            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    return c->n;
}

static double ref_dist(const clients *c, int a, int b)
{
    double s = 0.0;

    for (size_t j = 0; j < c->d; j++) {
        double t = (double)c->x[a][j] - (double)c->x[b][j];

        s += t * t;
    }
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Index (into c) of the Krum choice among alive ones, q = max(1, alive-f-2). */
static int ref_krum(const clients *c, const int *ord, const int *alive, int f, const double *dist)
{
    int nal = 0, best = -1;
    double best_s = 0.0;
    double *tmp = calloc((size_t)c->n, sizeof *tmp);

    assert_non_null(tmp);
    for (int i = 0; i < c->n; i++)
        nal += alive[i];
    for (int a = 0; a < c->n; a++) {
        int i = ord[a], k = 0, q = nal - f - 2 < 1 ? 1 : nal - f - 2;
        double s = 0.0;

        if (!alive[i])
            continue;
        for (int j = 0; j < c->n; j++)
            if (j != i && alive[j])
                tmp[k++] = dist[i * c->n + j];
        qsort(tmp, (size_t)k, sizeof tmp[0], cmp_double);
        for (int t = 0; t < q; t++)
            s += tmp[t];
        if (best < 0 || s < best_s) {
            best = i;
            best_s = s;
        }
    }
    free(tmp);
    return best;
}

/* Krum and Bulyan against the brute-force reference for n clients whose
 * spreads differ (so their scores do), one of them offset. */
static void check_krum_bulyan(world *w, int n, int f, size_t d, uint64_t seed)
{
    clients *c = clients_new(n, d);
    fed_merge_config cfg = fed_merge_config_default();
    double *dist = calloc((size_t)n * n, sizeof *dist), *dd = calloc((size_t)n, sizeof *dd);
    int *ord = calloc((size_t)n, sizeof *ord), *alive = calloc((size_t)n, sizeof *alive);
    int *chosen = calloc((size_t)n, sizeof *chosen), *used = calloc((size_t)n, sizeof *used);
    float *col = calloc((size_t)n, sizeof *col), *v;
    int theta = n - 2 * f, keep = theta - 2 * f, sel = 0;
    char spec[32];
    fed_rng r;

    assert_true(dist && dd && ord && alive && chosen && used && col);
    cfg.max_clients = n;
    fed_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        float spread = 0.2f + 0.3f * (float)i;

        for (size_t j = 0; j < d; j++)
            c->x[i][j] = spread * (2.0f * fed_rng_uniform_f(&r) - 1.0f) + (i == 4 ? 3.0f : 0.0f);
    }
    key_order(c, ord);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            dist[i * n + j] = ref_dist(c, i, j);
    for (int i = 0; i < n; i++)
        alive[i] = 1;
    snprintf(spec, sizeof spec, "krum:%d", f);
    v = merge_once(w->be, spec, c, NULL, &cfg, FED_OK);
    {
        int k = ref_krum(c, ord, alive, f, dist);

        assert_memory_equal(v, c->x[k], d * sizeof(float));
        assert_int_equal(c->res[k].verdict, FED_MERGE_USED);
    }
    free(v);

    /* Bulyan: theta = n - 2f picked by repeated Krum, then per coordinate
     * the mean of the theta - 2f values closest to the median. */
    for (int t = 0; t < theta; t++)
        alive[ref_krum(c, ord, alive, f, dist)] = 0;
    for (int a = 0; a < n; a++)
        if (!alive[ord[a]])
            chosen[sel++] = ord[a];
    snprintf(spec, sizeof spec, "bulyan:%d", f);
    v = merge_once(w->be, spec, c, NULL, &cfg, FED_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(c->res[i].verdict,
                         alive[i] ? FED_MERGE_NOT_SELECTED : FED_MERGE_USED_COORDS);
    for (size_t j = 0; j < d; j++) {
        double med, s = 0.0;

        for (int t = 0; t < theta; t++)
            col[t] = c->x[chosen[t]][j];
        qsort(col, (size_t)theta, sizeof col[0], cmp_float);
        med = theta & 1 ? (double)col[theta / 2]
                        : 0.5 * ((double)col[theta / 2 - 1] + (double)col[theta / 2]);
        for (int t = 0; t < theta; t++) {
            dd[t] = fabs((double)col[t] - med);
            used[t] = 0;
        }
        for (int q = 0; q < keep; q++) {
            int b = -1;

            for (int t = 0; t < theta; t++)
                if (!used[t] && (b < 0 || dd[t] < dd[b]))
                    b = t;
            used[b] = 1;
            s += col[b];
        }
        assert_rel(s / keep, v[j], 1e-6, 1e-6);
    }
    free(v);
    free(dist);
    free(dd);
    free(ord);
    free(alive);
    free(chosen);
    free(used);
    free(col);
    clients_free(c);
}

static void test_krum_bulyan_reference(void **state)
{
    world *w = *state;

    check_krum_bulyan(w, 9, 1, 9000, 9);   /* more than one gemm block; network path */
    check_krum_bulyan(w, 12, 2, 333, 15);  /* even theta */
    check_krum_bulyan(w, 131, 3, 150, 16); /* over the network's 128: introselect path */
}

/* Over 128 clients the coordinate rules take the transposed introselect path. */
static void test_coordinate_many_more_clients(void **state)
{
    world *w = *state;
    const int n = 150;
    const size_t d = 300;
    clients *c = clients_new(n, d);
    fed_merge_config cfg = fed_merge_config_default();
    float col[150];
    fed_rng r;
    float *med, *tr;

    fed_rng_seed(&r, 17);
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            c->x[i][j] = j % 2 ? (float)fed_rng_below(&r, 3) : fed_rng_uniform_f(&r) - 0.5f;
    cfg.max_clients = n;
    for (int odd = 0; odd < 2; odd++) {
        int nn = n - odd, k = (int)floor(0.2 * nn + 1e-9);

        c->n = nn;
        med = merge_once(w->be, "median", c, NULL, &cfg, FED_OK);
        tr = merge_once(w->be, "trimmed:0.2", c, NULL, &cfg, FED_OK);
        for (size_t j = 0; j < d; j++) {
            double s = 0.0;

            for (int i = 0; i < nn; i++)
                col[i] = c->x[i][j];
            qsort(col, (size_t)nn, sizeof col[0], cmp_float);
            if (nn & 1)
                assert_true(med[j] == col[nn / 2]);
            else
                assert_true(med[j] == (float)(((double)col[nn / 2 - 1] + col[nn / 2]) * 0.5));
            for (int i = k; i < nn - k; i++)
                s += col[i];
            assert_rel(s / (nn - 2 * k), tr[j], 1e-6, 1e-7);
        }
        free(med);
        free(tr);
    }
    c->n = n;
    clients_free(c);
}

/* -------------------------------------------------------------- clip -- */

static void test_clip_bounds_norms(void **state)
{
    world *w = *state;
    const size_t d = 1000;
    const double norm = 1.0;
    static const float mag[5] = {0.5f, 2.0f, 10.0f, 0.999f, 300.0f};
    clients *c = clients_new(5, d);
    clients *k = clients_new(5, d); /* pre-clipped copies */
    float *orig[5], *v, *u;
    double total = 0.0;
    fed_rng r;

    fed_rng_seed(&r, 10);
    for (int i = 0; i < 5; i++) {
        double sq = 0.0;

        for (size_t j = 0; j < d; j++) {
            c->x[i][j] = (float)fed_rng_normal(&r);
            sq += (double)c->x[i][j] * c->x[i][j];
        }
        for (size_t j = 0; j < d; j++) /* norm about mag[i] */
            c->x[i][j] = (float)(c->x[i][j] * mag[i] / sqrt(sq));
        c->in[i].weight = 1 + i;
        total += 1 + i;
        orig[i] = dup_vec(c->x[i], d);
        k->in[i] = c->in[i];
        k->in[i].delta = k->x[i];
    }
    v = merge_once(w->be, "clip:1+fedavg", c, NULL, NULL, FED_OK);
    for (int i = 0; i < 5; i++) {
        double sq = 0.0;
        float s = c->res[i].clip_scale;

        assert_memory_equal(c->x[i], orig[i], d * sizeof(float)); /* inputs untouched */
        assert_true(c->res[i].norm > 0.0);
        if (c->res[i].norm <= norm) {
            assert_true(s == 1.0f);
        } else {
            assert_true(s < 1.0f);
        }
        for (size_t j = 0; j < d; j++) {
            k->x[i][j] = c->x[i][j] * s;
            sq += (double)k->x[i][j] * k->x[i][j];
        }
        assert_true(sqrt(sq) <= norm * (1.0 + 1e-6));
        if (s < 1.0f)
            assert_true(sqrt(sq) >= norm * (1.0 - 1e-6));
    }
    assert_true(c->res[0].clip_scale == 1.0f && c->res[3].clip_scale == 1.0f);
    for (size_t j = 0; j < d; j++) {
        double ref = 0.0;

        for (int i = 0; i < 5; i++)
            ref += (1 + i) / total * (double)c->res[i].clip_scale * (double)c->x[i][j];
        assert_rounded(ref, v[j]);
    }
    free(v);

    /* Robust rules see exactly the clipped values. */
    v = merge_once(w->be, "clip:1+median", c, NULL, NULL, FED_OK);
    u = merge_once(w->be, "median", k, NULL, NULL, FED_OK);
    assert_memory_equal(v, u, d * sizeof(float));
    free(v);
    free(u);
    v = merge_once(w->be, "clip:1+krum:1", c, NULL, NULL, FED_OK);
    u = merge_once(w->be, "krum:1", k, NULL, NULL, FED_OK);
    assert_memory_equal(v, u, d * sizeof(float));
    free(v);
    free(u);
    for (int i = 0; i < 5; i++)
        free(orig[i]);
    clients_free(c);
    clients_free(k);
}

/* ---------------------------------------------------------- rejection -- */

static void test_nan_rejected(void **state)
{
    world *w = *state;
    static const char *specs[] = {"fedavg", "fedadam", "fedavgm", "median", "trimmed:0.2",
                                  "krum:0", "multikrum:0,2", "clip:5+fedavg"};
    const size_t d = 300;
    clients *c = clients_new(5, d);
    clients *clean = clients_new(3, d);
    fed_rng r;

    fed_rng_seed(&r, 11);
    fill_uniform(c, &r, -1.0f, 1.0f);
    for (int i = 0; i < 5; i++)
        c->in[i].weight = 2 + i;
    c->x[1][17] = NAN;
    c->x[3][d - 1] = INFINITY;
    clean->in[0] = c->in[0];
    clean->in[1] = c->in[2];
    clean->in[2] = c->in[4];
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        float *a = merge_once(w->be, specs[s], c, c->x[0], NULL, FED_OK);
        float *b = merge_once(w->be, specs[s], clean, c->x[0], NULL, FED_OK);

        if (memcmp(a, b, d * sizeof(float)))
            fail_msg("%s merged a NaN/Inf delta", specs[s]);
        assert_int_equal(c->res[1].verdict, FED_MERGE_REJECTED_NAN);
        assert_int_equal(c->res[1].err, FED_ERR_NAN);
        assert_int_equal(c->res[3].verdict, FED_MERGE_REJECTED_NAN);
        assert_true(c->res[1].share == 0.0);
        assert_int_not_equal(c->res[0].verdict, FED_MERGE_REJECTED_NAN);
        free(a);
        free(b);
    }
    /* Bad weights are rejected too. */
    c->x[1][17] = 0.0f;
    c->x[3][d - 1] = 0.0f;
    c->in[1].weight = 0.0;
    c->in[3].weight = NAN;
    free(merge_once(w->be, "fedavg", c, NULL, NULL, FED_OK));
    assert_int_equal(c->res[1].verdict, FED_MERGE_REJECTED_WEIGHT);
    assert_int_equal(c->res[1].err, FED_ERR_BAD_VALUE);
    assert_int_equal(c->res[3].verdict, FED_MERGE_REJECTED_WEIGHT);
    /* Nothing valid: too few, global unchanged. */
    for (int i = 0; i < 5; i++)
        c->x[i][0] = NAN;
    {
        float *g = merge_once(w->be, "fedavg", c, clean->x[0], NULL, FED_ERR_TOO_FEW);

        assert_memory_equal(g, clean->x[0], d * sizeof(float));
        free(g);
    }
    clients_free(c);
    clients_free(clean);
}

static void test_apply_errors(void **state)
{
    world *w = *state;
    clients *c = clients_new(4, 10);
    fed_merge_config cfg = fed_merge_config_default();
    fed_merge *m = NULL;
    float g[10] = {0};

    cfg.max_clients = 3;
    assert_int_equal(fed_merge_new("fedavg", 10, &cfg, w->be, &m), FED_OK);
    assert_int_equal(fed_merge_apply(m, g, c->in, 4, c->res), FED_ERR_TOO_LARGE);
    assert_int_equal(fed_merge_apply(m, g, c->in, 0, NULL), FED_ERR_TOO_FEW);
    memcpy(c->in[2].key, c->in[0].key, FED_MERGE_KEY_BYTES);
    assert_int_equal(fed_merge_apply(m, g, c->in, 3, c->res), FED_ERR_INVAL);
    fed_merge_free(m);
    cfg.max_clients = 0;
    assert_int_equal(fed_merge_new("fedavg", 10, &cfg, w->be, &m), FED_ERR_INVAL);
    assert_int_equal(fed_merge_new("fedavg", 0, NULL, w->be, &m), FED_ERR_INVAL);
    assert_null(m);
    clients_free(c);
}

/* --------------------------------------------------------------- state -- */

static void test_state_round_trip(void **state)
{
    world *w = *state;
    static const char *specs[] = {"fedadam", "fedyogi", "fedadagrad:0.1", "fedavgm:0.7"};
    const size_t d = 257;
    clients *c = clients_new(3, d);
    fed_rng r;

    fed_rng_seed(&r, 12);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        fed_merge *a = NULL, *b = NULL;
        float *ga = zeros(d), *gb, *sa, *sb;
        size_t nf;

        assert_int_equal(fed_merge_new(specs[s], d, NULL, w->be, &a), FED_OK);
        assert_int_equal(fed_merge_new(specs[s], d, NULL, w->be, &b), FED_OK);
        nf = fed_merge_state_floats(a);
        assert_true(nf > 0);
        sa = calloc(nf, sizeof(float));
        sb = calloc(nf, sizeof(float));
        for (int step = 0; step < 2; step++) {
            fill_uniform(c, &r, -1.0f, 1.0f);
            assert_int_equal(fed_merge_apply(a, ga, c->in, 3, NULL), FED_OK);
        }
        assert_int_equal(fed_merge_get_state(a, sa), FED_OK);
        assert_int_equal(fed_merge_set_state(b, sa), FED_OK);
        gb = dup_vec(ga, d);
        fill_uniform(c, &r, -1.0f, 1.0f);
        assert_int_equal(fed_merge_apply(a, ga, c->in, 3, NULL), FED_OK);
        assert_int_equal(fed_merge_apply(b, gb, c->in, 3, NULL), FED_OK);
        assert_memory_equal(ga, gb, d * sizeof(float));
        assert_int_equal(fed_merge_get_state(a, sa), FED_OK);
        assert_int_equal(fed_merge_get_state(b, sb), FED_OK);
        assert_memory_equal(sa, sb, nf * sizeof(float));
        /* Refused states leave it unchanged. */
        sb[nf - 1] = NAN;
        assert_int_equal(fed_merge_set_state(b, sb), FED_ERR_NAN);
        if (nf == 2 * d) {
            sb[nf - 1] = -1.0f;
            assert_int_equal(fed_merge_set_state(b, sb), FED_ERR_RANGE);
        }
        assert_int_equal(fed_merge_get_state(b, sb), FED_OK);
        assert_memory_equal(sa, sb, nf * sizeof(float));
        free(sa);
        free(sb);
        free(ga);
        free(gb);
        fed_merge_free(a);
        fed_merge_free(b);
    }
    {
        fed_merge *m = NULL;

        assert_int_equal(fed_merge_new("median", d, NULL, w->be, &m), FED_OK);
        assert_int_equal(fed_merge_state_floats(m), 0);
        assert_int_equal(fed_merge_get_state(m, NULL), FED_OK);
        fed_merge_free(m);
    }
    clients_free(c);
}

/* The download/upload path (a backend not named "cpu") gives the same bits. */
static void test_staged_backend_same_bits(void **state)
{
    world *w = *state;
    static const char *specs[] = {"median", "trimmed:0.2", "bulyan:1", "krum:1",
                                  "multikrum:1,3", "fedadam", "fedavgm", "clip:2+median"};
    const size_t d = 9001;
    clients *c = clients_new(8, d);
    fed_merge_config cfg = fed_merge_config_default();
    fed_rng r;

    fed_rng_seed(&r, 13);
    fill_uniform(c, &r, -1.0f, 1.0f);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        float *a = merge_once(w->be, specs[s], c, c->x[1], NULL, FED_OK);
        float *b = merge_once(&w->hostcopy, specs[s], c, c->x[1], NULL, FED_OK);

        if (memcmp(a, b, d * sizeof(float)))
            fail_msg("%s differs between cpu and staged paths", specs[s]);
        free(a);
        free(b);
    }
    clients_free(c);
    /* and over 128 clients (the transposed path) */
    c = clients_new(131, 700);
    fill_uniform(c, &r, -1.0f, 1.0f);
    cfg.max_clients = 131;
    for (size_t s = 0; s < 3; s++) {
        float *a = merge_once(w->be, specs[s], c, NULL, &cfg, FED_OK);
        float *b = merge_once(&w->hostcopy, specs[s], c, NULL, &cfg, FED_OK);

        if (memcmp(a, b, c->d * sizeof(float)))
            fail_msg("%s differs between cpu and staged paths (131 clients)", specs[s]);
        free(a);
        free(b);
    }
    clients_free(c);
}

/* ------------------------------------------------------- allocations -- */

typedef struct merge_try {
    world *w;
    const char *spec;
    clients *c;
} merge_try;

/* fed_merge_new with an allocation failing; once it succeeds, apply with
 * every allocation failing, which changes nothing: apply never allocates. */
static fed_err try_merge_new(void *ctx)
{
    const merge_try *t = ctx;
    fed_merge *m = NULL;
    float g[500] = {0};
    fed_err e = fed_merge_new(t->spec, 500, NULL, t->w->be, &m);

    if (e != FED_OK) {
        assert_null(m);
        return e;
    }
    fed_alloc_fail_nth(1, 1);
    e = fed_merge_apply(m, g, t->c->in, t->c->n, t->c->res);
    fed_alloc_fail_nth(0, 0);
    assert_int_equal(e, FED_OK);
    fed_merge_free(m);
    return FED_OK;
}

static void test_alloc_failure_sweep(void **state)
{
    static const char *specs[] = {"fedavg", "fedavgm", "fedadam", "median", "trimmed:0.1",
                                  "krum:1", "multikrum:1,2", "bulyan:1", "clip:1+fedyogi"};
    merge_try t = {.w = *state, .c = clients_new(7, 500)};
    fed_rng r;

    fed_rng_seed(&r, 14);
    fill_uniform(t.c, &r, -1.0f, 1.0f);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        t.spec = specs[s];
        assert_true(fed_test_alloc_sweep(try_merge_new, &t, 1, 1000) > 1);
    }
    clients_free(t.c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_grammar),
        cmocka_unit_test(test_spec_traits),
        cmocka_unit_test(test_fedavg_weighted_mean),
        cmocka_unit_test(test_fedavg_weight_cap),
        cmocka_unit_test(test_fedprox_zero_is_fedavg),
        cmocka_unit_test(test_order_independent),
        cmocka_unit_test(test_pool_split_same_bits),
        cmocka_unit_test(test_order_fixed_by_key),
        cmocka_unit_test(test_adaptive_closed_forms),
        cmocka_unit_test(test_fedavgm_closed_form),
        cmocka_unit_test(test_scaled_closed_forms),
        cmocka_unit_test(test_robust_against_outliers),
        cmocka_unit_test(test_coordinate_known_answers),
        cmocka_unit_test(test_coordinate_many_clients),
        cmocka_unit_test(test_krum_bulyan_reference),
        cmocka_unit_test(test_coordinate_many_more_clients),
        cmocka_unit_test(test_clip_bounds_norms),
        cmocka_unit_test(test_nan_rejected),
        cmocka_unit_test(test_apply_errors),
        cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_staged_backend_same_bits),
        cmocka_unit_test(test_alloc_failure_sweep),
    };

    return cmocka_run_group_tests(tests, world_setup, world_teardown);
}
