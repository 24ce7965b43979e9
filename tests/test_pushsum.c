/* test_pushsum.c - push-sum mixing and the topologies it runs on, as plain
 * synchronous rounds (the node-level runs in the simulator are in
 * test_peer.c): every estimate reaches the exact mean, x and w sums stay
 * constant, the running-sums form survives dropped frames where the plain
 * form does not, the ring's contraction matches its mixing matrix's second
 * eigenvalue; topology lists are symmetric where they must be and the same
 * for every member; the state file round-trips and rejects bad bytes. */
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
#include "core/rng.h"
#include "crypto/allow.h"
#include "gossip/pushsum.h"
#include "gossip/topology.h"

#define DIM 8

typedef struct net {
    size_t n;
    fed_gossip_ps **ps;
    uint8_t (*key)[32];
    fed_gossip_topo *topo;
    double mean[DIM];
    fed_rng loss_rng;
    double loss;
} net;

static void net_build(net *t, const char *spec, size_t n, int plain, double loss, uint64_t seed)
{
    fed_rng r;

    memset(t, 0, sizeof *t);
    t->n = n;
    t->loss = loss;
    t->ps = calloc(n, sizeof *t->ps);
    t->key = calloc(n, sizeof *t->key);
    assert_int_equal(fed_gossip_topo_new(spec, n, seed, &t->topo), FED_OK);
    fed_rng_seed(&r, seed);
    fed_rng_seed_stream(&t->loss_rng, seed, 99);
    for (size_t i = 0; i < n; i++) {
        double v[DIM];

        memset(t->key[i], 0, 32);
        t->key[i][0] = (uint8_t)(i >> 8); /* keys in member order */
        t->key[i][1] = (uint8_t)i;
        assert_int_equal(fed_gossip_ps_new(DIM, plain, &t->ps[i]), FED_OK);
        for (int d = 0; d < DIM; d++) {
            v[d] = fed_rng_normal(&r) * 10 + (double)i;
            t->mean[d] += v[d] / (double)n;
        }
        fed_gossip_ps_set(t->ps[i], v, 1.0);
    }
}

static void net_free(net *t)
{
    for (size_t i = 0; i < t->n; i++)
        fed_gossip_ps_free(t->ps[i]);
    free(t->ps);
    free(t->key);
    fed_gossip_topo_free(t->topo);
}

/* One synchronous round: everyone splits 1/(m+1) to each out-neighbour,
 * frames are lost with t->loss, everyone applies what came. */
static void net_round(net *t, uint64_t round)
{
    uint32_t *out = malloc(t->n * sizeof *out);
    uint8_t (*keys)[32] = malloc(t->n * 32);
    double *frac = malloc(t->n * sizeof *frac);

    for (size_t i = 0; i < t->n; i++) {
        size_t m = fed_gossip_topo_out(t->topo, i, round, out);

        for (size_t j = 0; j < m; j++) {
            memcpy(keys[j], t->key[out[j]], 32);
            frac[j] = 1.0 / (double)(m + 1);
        }
        assert_int_equal(fed_gossip_ps_split(t->ps[i], (const uint8_t(*)[32])keys, frac, m),
                         FED_OK);
        for (size_t j = 0; j < m; j++) {
            const double *x;
            double w;

            assert_int_equal(fed_gossip_ps_total(t->ps[i], t->key[out[j]], &x, &w), FED_OK);
            if (fed_rng_uniform(&t->loss_rng) < t->loss)
                continue;
            assert_int_equal(fed_gossip_ps_receive(t->ps[out[j]], t->key[i], 1, round, x, w, NULL),
                             FED_OK);
        }
    }
    for (size_t i = 0; i < t->n; i++)
        fed_gossip_ps_apply(t->ps[i]);
    free(out);
    free(keys);
    free(frac);
}

/* The largest |estimate - mean| over every node and coordinate. */
static double net_error(const net *t)
{
    double worst = 0, z[DIM];

    for (size_t i = 0; i < t->n; i++) {
        fed_gossip_ps_estimate_f64(t->ps[i], z);
        for (int d = 0; d < DIM; d++)
            if (fabs(z[d] - t->mean[d]) > worst)
                worst = fabs(z[d] - t->mean[d]);
    }
    return worst;
}

/* Rounds until every estimate is within tol of the mean (0: never in max). */
static int rounds_to(net *t, double tol, int max)
{
    for (int r = 1; r <= max; r++) {
        net_round(t, (uint64_t)r);
        if (net_error(t) < tol)
            return r;
    }
    return 0;
}

static void test_ring16_exact_mean(void **state)
{
    net t;
    int r;

    (void)state;
    net_build(&t, "ring", 16, 0, 0.0, 1);
    r = rounds_to(&t, 1e-9, 2000);
    printf("ring of 16: every estimate within 1e-9 of the mean after %d rounds\n", r);
    assert_true(r > 0);
    net_free(&t);
}

static void test_random3_64_exact_mean(void **state)
{
    net t;
    int r;

    (void)state;
    net_build(&t, "random:3", 64, 0, 0.0, 2);
    r = rounds_to(&t, 1e-9, 2000);
    printf("random:3 over 64: within 1e-9 after %d rounds\n", r);
    assert_true(r > 0);
    net_free(&t);
}

/* Without loss, the sums of x and of w over all nodes are the same after
 * every round (to rounding). */
static void test_mass_conserved(void **state)
{
    net t;
    double x0 = 0;

    (void)state;
    net_build(&t, "random:3", 64, 0, 0.0, 3);
    for (size_t i = 0; i < t.n; i++)
        x0 += fed_gossip_ps_x(t.ps[i])[0];
    for (int r = 1; r <= 50; r++) {
        double xs = 0, ws = 0;

        net_round(&t, (uint64_t)r);
        for (size_t i = 0; i < t.n; i++) {
            xs += fed_gossip_ps_x(t.ps[i])[0];
            ws += fed_gossip_ps_w(t.ps[i]);
        }
        assert_true(fabs(ws - 64.0) < 1e-10);
        assert_true(fabs(xs - x0) < 1e-9 * fabs(x0));
    }
    net_free(&t);
}

/* 20% of frames dropped: the running sums still reach the exact mean; the
 * plain form converges, but to a wrong value. */
static void test_loss_running_sums_vs_plain(void **state)
{
    net rs, pl;
    int r;
    double plain_err;

    (void)state;
    net_build(&rs, "ring", 16, 0, 0.2, 4);
    r = rounds_to(&rs, 1e-9, 4000);
    net_build(&pl, "ring", 16, 1, 0.2, 4);
    for (int k = 1; k <= 4000; k++)
        net_round(&pl, (uint64_t)k);
    plain_err = net_error(&pl);
    printf("20%% loss on a ring of 16: running sums within 1e-9 after %d rounds; plain "
           "push-sum ends %.3g away\n", r, plain_err);
    assert_true(r > 0);
    assert_true(plain_err > 1e-3);
    net_free(&rs);
    net_free(&pl);
}

/* The error on the ring shrinks by the second-largest eigenvalue modulus of
 * its mixing matrix each round: W = circulant(1/3, 1/3, 1/3), eigenvalues
 * (1 + 2 cos(2 pi k / n)) / 3. Measured over rounds 100..300 (the slowest
 * mode dominates by then), the geometric mean ratio is within 10%. */
static void test_ring_contraction_is_lambda2(void **state)
{
    const size_t n = 16;
    double lambda2 = (1 + 2 * cos(2 * M_PI / (double)n)) / 3, e100 = 0, rate;
    net t;

    (void)state;
    net_build(&t, "ring", n, 0, 0.0, 5);
    for (int r = 1; r <= 300; r++) {
        net_round(&t, (uint64_t)r);
        if (r == 100)
            e100 = net_error(&t);
    }
    rate = pow(net_error(&t) / e100, 1.0 / 200);
    printf("ring of 16: contraction %.5f per round, lambda2 %.5f\n", rate, lambda2);
    assert_true(fabs(rate - lambda2) <= 0.1 * lambda2);
    net_free(&t);
}

/* ---- topologies ---- */

static int contains(const uint32_t *a, size_t n, uint32_t v)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] == v)
            return 1;
    return 0;
}

/* in-lists are exactly the members whose out-lists name i; symmetric
 * topologies have out == in; random:K gives K of a fixed set of at most 16,
 * the same whoever computes it. */
static void test_topologies(void **state)
{
    const char *specs[] = {"full", "ring", "random:3", "tree", "smallworld:4,0.2"};
    const size_t n = 40;
    uint32_t out[40], in[40], other[40];

    (void)state;
    for (size_t s = 0; s < sizeof specs / sizeof *specs; s++) {
        fed_gossip_topo *t, *t2;

        assert_int_equal(fed_gossip_topo_new(specs[s], n, 77, &t), FED_OK);
        assert_int_equal(fed_gossip_topo_new(specs[s], n, 77, &t2), FED_OK);
        for (uint64_t r = 1; r <= 3; r++)
            for (size_t i = 0; i < n; i++) {
                size_t m = fed_gossip_topo_out(t, i, r, out), k = fed_gossip_topo_in(t, i, r, in);

                assert_int_equal(fed_gossip_topo_out(t2, i, r, other), m);
                assert_memory_equal(out, other, m * sizeof *out);
                assert_false(contains(out, m, (uint32_t)i));
                for (size_t j = 0; j < n; j++) {
                    uint32_t oj[40];
                    size_t mj = fed_gossip_topo_out(t, j, r, oj);

                    assert_int_equal(contains(in, k, (uint32_t)j),
                                     j != i && contains(oj, mj, (uint32_t)i));
                }
                if (fed_gossip_topo_symmetric(t)) {
                    assert_int_equal(m, k);
                    assert_memory_equal(out, in, m * sizeof *out);
                }
                if (!strcmp(specs[s], "random:3"))
                    assert_int_equal(m, 3);
                if (!strcmp(specs[s], "ring"))
                    assert_int_equal(m, 2);
            }
        fed_gossip_topo_free(t);
        fed_gossip_topo_free(t2);
    }
}

/* random:K's choices over many rounds stay inside a set of at most 16 and
 * differ from round to round. */
static void test_random_set_bounded(void **state)
{
    fed_gossip_topo *t;
    uint32_t out[200], seen[200], prev[4] = {0};
    size_t nseen = 0;
    int changed = 0;

    (void)state;
    assert_int_equal(fed_gossip_topo_new("random:4", 200, 9, &t), FED_OK);
    for (uint64_t r = 1; r <= 300; r++) {
        size_t m = fed_gossip_topo_out(t, 17, r, out);

        if (r > 1 && memcmp(prev, out, sizeof prev))
            changed = 1;
        memcpy(prev, out, sizeof prev);
        for (size_t j = 0; j < m; j++)
            if (!contains(seen, nseen, out[j]))
                seen[nseen++] = out[j];
    }
    assert_true(nseen <= FED_GOSSIP_RANDOM_SET_MAX);
    assert_true(nseen >= 4);
    assert_true(changed);
    fed_gossip_topo_free(t);
}

static void test_topology_specs(void **state)
{
    fed_gossip_topo *t;
    const char *bad[] = {"", "rings", "random:", "random:0", "random:17", "random:3x",
                         "smallworld:3,0.1", "smallworld:4", "smallworld:4,2", NULL};

    (void)state;
    for (int i = 0; bad[i]; i++)
        assert_int_equal(fed_gossip_topo_new(bad[i], 10, 1, &t), FED_ERR_SPEC);
    assert_int_equal(fed_gossip_topo_new(NULL, 10, 1, &t), FED_ERR_SPEC);
    assert_int_equal(fed_gossip_topo_new("ring", 1, 1, &t), FED_ERR_RANGE);
    assert_int_equal(fed_gossip_topo_new("smallworld:10,0.1", 8, 1, &t), FED_ERR_RANGE);
    assert_int_equal(fed_gossip_topo_new("static", 4, 1, &t), FED_OK);
    {
        uint32_t l[2] = {2, 3}, bad_self[1] = {1}, dup[2] = {2, 2};

        assert_int_equal(fed_gossip_topo_set_static(t, 1, l, 2), FED_OK);
        assert_int_equal(fed_gossip_topo_set_static(t, 1, bad_self, 1), FED_ERR_INVAL);
        assert_int_equal(fed_gossip_topo_set_static(t, 1, dup, 2), FED_ERR_INVAL);
        assert_int_equal(fed_gossip_topo_in(t, 2, 1, l), 1);
        assert_int_equal(l[0], 1);
    }
    fed_gossip_topo_free(t);
}

/* The static lists from text: names of the allow-list, member i = entry i;
 * a bad line is named and changes nothing. */
static void test_static_lists_from_text(void **state)
{
    fed_crypto_allow *al;
    fed_gossip_topo *t;
    uint32_t l[4];
    int line = 0;
    const char *good = "# who sends to whom\na: b c\nb: c   # a comment\n\nc: a\n";
    const char *bad[] = {"a: b\na: c\n", "a: zz\n", "a: a\n", "a: b b\n", "a b c\n",
                         "zz: a\n"};
    const fed_err want[] = {FED_ERR_FORMAT, FED_ERR_UNKNOWN_SENDER, FED_ERR_FORMAT,
                            FED_ERR_FORMAT, FED_ERR_FORMAT, FED_ERR_UNKNOWN_SENDER};
    const int at[] = {2, 1, 1, 1, 1, 1};

    (void)state;
    assert_int_equal(fed_crypto_allow_new(&al), FED_OK);
    {
        const char *text = "a 7m74LiEOQEaAlN/dKHzHvKjKsZBvWn8JpgY20rqGnIE=\n"
                           "b dsTAzewvfytWBtVAm0ORK7PEAdDCjFiTMXAUFjdiYhY=\n"
                           "c gQIah0GEdPkiuUgoq9aVxg/t/bNWfb2Hh44wk9P6fG0=\n";

        assert_int_equal(fed_crypto_allow_parse(al, text, strlen(text), NULL), FED_OK);
    }
    assert_int_equal(fed_gossip_topo_new("static", 3, 1, &t), FED_OK);
    assert_int_equal(fed_gossip_topo_parse_static(t, al, good, strlen(good), &line), FED_OK);
    for (size_t i = 0; i < 3; i++) { /* names map to allow-list order */
        const char *name;
        const uint8_t *pk;

        fed_crypto_allow_get(al, i, &name, &pk);
        if (!strcmp(name, "a")) {
            assert_int_equal(fed_gossip_topo_out(t, i, 1, l), 2);
        } else if (!strcmp(name, "c")) {
            assert_int_equal(fed_gossip_topo_out(t, i, 1, l), 1);
            assert_int_equal(fed_gossip_topo_in(t, i, 1, l), 2); /* from a and b */
        }
    }
    for (int k = 0; k < 6; k++) {
        assert_int_equal(fed_gossip_topo_parse_static(t, al, bad[k], strlen(bad[k]), &line),
                         want[k]);
        assert_int_equal(line, at[k]);
    }
    fed_gossip_topo_free(t);
    fed_crypto_allow_free(al);
}

/* ---- state ---- */

static void test_state_roundtrip(void **state)
{
    net t;
    uint8_t *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    fed_gossip_ps *copy;

    (void)state;
    net_build(&t, "ring", 5, 0, 0.0, 6);
    for (int r = 1; r <= 3; r++)
        net_round(&t, (uint64_t)r);
    assert_int_equal(fed_gossip_ps_save(t.ps[2], &buf, &len), FED_OK);
    assert_int_equal(fed_gossip_ps_new(DIM, 0, &copy), FED_OK);
    assert_int_equal(fed_gossip_ps_load(copy, buf, len), FED_OK);
    assert_int_equal(fed_gossip_ps_save(copy, &buf2, &len2), FED_OK);
    assert_int_equal(len, len2);
    assert_memory_equal(buf, buf2, len);
    assert_int_equal(fed_gossip_ps_last_round(copy, t.key[1]), 3);
    /* bad bytes: each refused, nothing half-loaded */
    assert_int_equal(fed_gossip_ps_load(copy, buf, len - 1), FED_ERR_FORMAT);
    buf[0] ^= 1;
    assert_int_equal(fed_gossip_ps_load(copy, buf, len), FED_ERR_MAGIC);
    buf[0] ^= 1;
    buf[8] = 9;
    assert_int_equal(fed_gossip_ps_load(copy, buf, len), FED_ERR_VERSION);
    buf[8] = 1;
    memset(buf + 40, 0xff, 8); /* x[0] NaN */
    assert_int_equal(fed_gossip_ps_load(copy, buf, len), FED_ERR_FORMAT);
    assert_true(fed_gossip_ps_w(copy) == 1.0);
    {
        double nan_x[DIM] = {NAN};

        assert_int_equal(fed_gossip_ps_receive(copy, t.key[0], 1, 9, nan_x, 1.0, NULL),
                         FED_ERR_BAD_VALUE);
        memset(nan_x, 0, sizeof nan_x);
        assert_int_equal(fed_gossip_ps_receive(copy, t.key[0], 1, 9, nan_x, -1.0, NULL),
                         FED_ERR_BAD_VALUE);
    }
    fed_free(buf);
    fed_free(buf2);
    fed_gossip_ps_free(copy);
    net_free(&t);
}

/* A sender that restarted (new epoch, totals rolled back) is re-based, not
 * subtracted: the receiver's weight never goes negative. */
static void test_restarted_sender_rebased(void **state)
{
    fed_gossip_ps *ps;
    uint8_t k[32] = {7};
    double x[DIM] = {0};
    double w0;
    int taken = -1;

    (void)state;
    assert_int_equal(fed_gossip_ps_new(DIM, 0, &ps), FED_OK);
    x[0] = 4;
    assert_int_equal(fed_gossip_ps_receive(ps, k, 1, 5, x, 2.0, NULL), FED_OK);
    assert_int_equal(fed_gossip_ps_apply(ps), 1);
    assert_true(fed_gossip_ps_w(ps) == 3.0);
    w0 = fed_gossip_ps_w(ps);
    x[0] = 1;
    assert_int_equal(fed_gossip_ps_receive(ps, k, 2, 3, x, 0.5, NULL), FED_OK); /* epoch 2 */
    assert_int_equal(fed_gossip_ps_apply(ps), 1);
    assert_true(fed_gossip_ps_w(ps) == w0);
    x[0] = 2;
    assert_int_equal(fed_gossip_ps_receive(ps, k, 2, 4, x, 1.0, &taken), FED_OK);
    assert_int_equal(taken, 1);
    /* a resend, then an old epoch: ignored, and said so (a peer must not
       count either as the round's share) */
    assert_int_equal(fed_gossip_ps_receive(ps, k, 2, 4, x, 1.0, &taken), FED_OK);
    assert_int_equal(taken, 0);
    assert_int_equal(fed_gossip_ps_receive(ps, k, 1, 9, x, 9.0, &taken), FED_OK);
    assert_int_equal(taken, 0);
    assert_int_equal(fed_gossip_ps_apply(ps), 1);
    assert_true(fed_gossip_ps_w(ps) == w0 + 0.5);
    fed_gossip_ps_free(ps);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring16_exact_mean),
        cmocka_unit_test(test_random3_64_exact_mean),
        cmocka_unit_test(test_mass_conserved),
        cmocka_unit_test(test_loss_running_sums_vs_plain),
        cmocka_unit_test(test_ring_contraction_is_lambda2),
        cmocka_unit_test(test_topologies),
        cmocka_unit_test(test_random_set_bounded),
        cmocka_unit_test(test_topology_specs),
        cmocka_unit_test(test_static_lists_from_text),
        cmocka_unit_test(test_state_roundtrip),
        cmocka_unit_test(test_restarted_sender_rebased),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
