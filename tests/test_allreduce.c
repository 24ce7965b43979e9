/* test_allreduce.c - the all-reduce schedules (gossip/allreduce.h) run
 * in-process: n simulated members pass messages (delivered in a shuffled
 * order, some twice), and for n = 2..17 on ring, tree, tree:3 and butterfly
 * every member ends with bit-identical parameters equal to the weighted mean
 * computed in one place in the schedule's fixed order (and to the plain
 * key-order mean to rounding); the ring sends 2(n-1)/n of the vector per
 * member; bad receives are refused by name. Groups: the grid schedule
 * puts every member in exactly one group a round, the same group in every
 * member's view, at most G members where n factors so, and ceil(log_G n)
 * rounds of weighted group means (no training between) give every member
 * the exact mean, for n up to 1,000. The fault rule's verification rows
 * span n after ceil(log2 n) hops, never with a member silent, and a
 * different hash gives a redo. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/rng.h"
#include "gossip/allreduce.h"

typedef struct msg {
    uint32_t from, to, step;
    size_t len;
    double *data;
} msg;

typedef struct sim {
    fed_gossip_ar_plan plan;
    uint32_t n;
    size_t len;
    float **x;     /* (n)(len) the models */
    double *w;     /* (n) the weights */
    fed_gossip_ar_member **m;
    int *sent;     /* (n) the current step's sends are out */
    msg *q;
    size_t nq, capq;
    size_t payload_max, payload_total;
} sim;

static void sim_init(sim *s, const char *spec, uint32_t n, size_t len, uint64_t seed)
{
    fed_rng r;

    memset(s, 0, sizeof *s);
    assert_int_equal(fed_gossip_ar_plan_init(&s->plan, spec, n, len), FED_OK);
    s->n = n;
    s->len = len;
    s->x = calloc(n, sizeof *s->x);
    s->w = calloc(n, sizeof *s->w);
    s->m = calloc(n, sizeof *s->m);
    s->sent = calloc(n, sizeof *s->sent);
    fed_rng_seed(&r, seed);
    for (uint32_t i = 0; i < n; i++) {
        double *xd = calloc(len ? len : 1, sizeof *xd);

        s->x[i] = calloc(len ? len : 1, sizeof(float));
        for (size_t j = 0; j < len; j++)
            /* magnitudes over 2^-20..2^20, so the order of summing shows
               in the bits (sums of w * x with integer w are otherwise exact) */
            s->x[i][j] = (float)ldexp(fed_rng_normal(&r) + (double)i,
                                      (int)fed_rng_below(&r, 41) - 20);
        s->w[i] = (double)(1 + fed_rng_below(&r, 600)); /* sample counts */
        for (size_t j = 0; j < len; j++)
            xd[j] = (double)s->x[i][j]; /* a trained model enters as doubles */
        assert_int_equal(fed_gossip_ar_member_new(&s->plan, i, xd, s->w[i], &s->m[i]), FED_OK);
        free(xd);
    }
}

static void sim_free(sim *s)
{
    for (size_t i = 0; i < s->nq; i++)
        free(s->q[i].data);
    for (uint32_t i = 0; i < s->n; i++) {
        fed_gossip_ar_member_free(s->m[i]);
        free(s->x[i]);
    }
    free(s->q);
    free(s->x);
    free(s->w);
    free(s->m);
    free(s->sent);
}

static void push(sim *s, uint32_t from, const fed_gossip_ar_xfer *x, uint32_t step,
                 const double *data)
{
    msg *q;

    if (s->nq == s->capq) {
        s->capq = s->capq ? 2 * s->capq : 64;
        s->q = realloc(s->q, s->capq * sizeof *s->q);
        assert_non_null(s->q);
    }
    q = &s->q[s->nq++];
    q->from = from;
    q->to = x->peer;
    q->step = step;
    q->len = x->len;
    q->data = malloc(x->len ? x->len * sizeof(double) : 1);
    if (x->len)
        memcpy(q->data, data, x->len * sizeof(double));
}

/* Runs the schedule: members send when they enter a step, messages are
 * delivered in a random order (one in eight delivered twice), members
 * advance when ready. Returns the rounds of delivery it took. */
static unsigned sim_run(sim *s, uint64_t seed)
{
    fed_rng r;
    unsigned rounds = 0;
    size_t *sent_elems = calloc(s->n, sizeof *sent_elems);

    fed_rng_seed_stream(&r, seed, 7);
    for (;;) {
        int all_done = 1, moved = 0;

        for (uint32_t i = 0; i < s->n; i++) {
            fed_gossip_ar_member *m = s->m[i];

            if (fed_gossip_ar_member_done(m))
                continue;
            all_done = 0;
            if (!s->sent[i]) {
                for (size_t k = 0; k < fed_gossip_ar_member_nsend(m); k++) {
                    fed_gossip_ar_xfer x;
                    const double *d;

                    assert_int_equal(fed_gossip_ar_member_send(m, k, &x, &d), FED_OK);
                    push(s, i, &x, fed_gossip_ar_member_step(m), d);
                    sent_elems[i] += x.len;
                }
                s->sent[i] = 1;
                moved = 1;
            }
        }
        if (all_done)
            break;
        /* deliver about half of the queue, in random order */
        for (size_t left = s->nq / 2 + 1; left > 0 && s->nq > 0; left--) {
            size_t k = (size_t)fed_rng_below(&r, s->nq);
            msg q = s->q[k];
            int fresh = -1;

            assert_int_equal(fed_gossip_ar_member_receive(s->m[q.to], q.from, q.step, q.data,
                                                          q.len, &fresh),
                             FED_OK);
            assert_int_equal(fresh, 1);
            if (fed_rng_below(&r, 8) == 0) { /* a duplicate: ignored */
                assert_int_equal(fed_gossip_ar_member_receive(s->m[q.to], q.from, q.step,
                                                              q.data, q.len, &fresh),
                                 FED_OK);
                assert_int_equal(fresh, 0);
            }
            free(q.data);
            s->q[k] = s->q[--s->nq];
            moved = 1;
        }
        for (uint32_t i = 0; i < s->n; i++)
            while (fed_gossip_ar_member_ready(s->m[i])) {
                assert_int_equal(fed_gossip_ar_member_advance(s->m[i]), FED_OK);
                s->sent[i] = 0;
                moved = 1;
                if (fed_gossip_ar_member_nsend(s->m[i]))
                    break; /* send before going on */
            }
        assert_true(moved); /* never stuck */
        rounds++;
        assert_true(rounds < 100000);
    }
    assert_int_equal(s->nq, 0);
    for (uint32_t i = 0; i < s->n; i++) {
        assert_int_equal(fed_gossip_ar_member_payload(&s->plan, i), sent_elems[i]);
        if (sent_elems[i] > s->payload_max)
            s->payload_max = sent_elems[i];
        s->payload_total += sent_elems[i];
    }
    free(sent_elems);
    return rounds;
}

/* ---- the reference: the same sums computed in one place ---- */

static double v_of(const sim *s, uint32_t i, size_t e)
{
    return e < s->len ? s->w[i] * (double)s->x[i][e] : s->w[i];
}

static double tree_sum(const sim *s, uint32_t i, size_t e, uint32_t k)
{
    double acc = v_of(s, i, e);

    for (uint64_t c = (uint64_t)i * k + 1; c <= (uint64_t)i * k + k && c < s->n; c++)
        acc = acc + tree_sum(s, (uint32_t)c, e, k);
    return acc;
}

static double ref_sum(const sim *s, size_t e)
{
    uint32_t n = s->n;

    if (s->plan.topo == FED_GOSSIP_AR_RING) {
        uint32_t c = 0;
        double acc;

        for (uint32_t q = 0; q < n; q++) { /* which slice holds e */
            size_t off, len;

            fed_gossip_ar_slice(&s->plan, q, &off, &len);
            if (e >= off && e < off + len)
                c = q;
        }
        acc = v_of(s, c, e);
        for (uint32_t j = 1; j < n; j++)
            acc = acc + v_of(s, (c + j) % n, e);
        return acc;
    }
    if (s->plan.topo == FED_GOSSIP_AR_TREE)
        return tree_sum(s, 0, e, s->plan.arity);
    {
        uint32_t p = 1;
        double a[32], b[32];

        while (p * 2 <= n)
            p *= 2;
        assert_true(p <= 32);
        for (uint32_t i = 0; i < p; i++)
            a[i] = i + p < n ? v_of(s, i, e) + v_of(s, i + p, e) : v_of(s, i, e);
        for (uint32_t d = p / 2; d >= 1; d /= 2) {
            for (uint32_t i = 0; i < p; i++)
                b[i] = a[i] + a[i ^ d];
            memcpy(a, b, sizeof a);
        }
        return a[0];
    }
}

static void check_result(const sim *s)
{
    size_t len = s->len;
    float *first = calloc(len ? len : 1, sizeof *first);
    float *got = calloc(len ? len : 1, sizeof *got);
    double wsum = 0, w;

    for (uint32_t i = 0; i < s->n; i++)
        wsum += s->w[i];
    assert_int_equal(fed_gossip_ar_member_result(s->m[0], first, &w), FED_OK);
    assert_true(w == wsum);
    for (uint32_t i = 1; i < s->n; i++) {
        assert_int_equal(fed_gossip_ar_member_result(s->m[i], got, &w), FED_OK);
        assert_memory_equal(got, first, len * sizeof *got); /* the same bits */
        assert_memory_equal(fed_gossip_ar_member_sums(s->m[i]), fed_gossip_ar_member_sums(s->m[0]),
                            (len + 1) * sizeof(double));
    }
    for (size_t e = 0; e < len; e++) {
        double naive = 0;
        float ref = (float)(ref_sum(s, e) / ref_sum(s, len));

        double rs = ref_sum(s, e);

        assert_true(ref_sum(s, len) == wsum);
        /* the sums themselves, in double, bit for bit */
        assert_true(memcmp(&rs, &fed_gossip_ar_member_sums(s->m[0])[e], sizeof rs) == 0);
        assert_true(memcmp(&ref, &first[e], sizeof ref) == 0);
        for (uint32_t i = 0; i < s->n; i++)
            naive += s->w[i] * (double)s->x[i][e];
        naive /= wsum;
        {
            double mag = 0;

            for (uint32_t i = 0; i < s->n; i++)
                mag += s->w[i] * fabs((double)s->x[i][e]);
            assert_true(fabs((double)first[e] - naive) <= 1e-6 * (fabs(naive) + mag / wsum));
        }
    }
    free(first);
    free(got);
}

static void run_topology(const char *spec)
{
    static const size_t lens[] = {1, 5, 37, 256};

    for (uint32_t n = 2; n <= 17; n++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            sim s;

            sim_init(&s, spec, n, lens[li], 1000 * n + li);
            (void)sim_run(&s, n + 31 * li);
            check_result(&s);
            sim_free(&s);
        }
}

static void test_ring(void **st)
{
    (void)st;
    run_topology("ring");
}

static void test_tree(void **st)
{
    (void)st;
    run_topology("tree");
}

static void test_tree3(void **st)
{
    (void)st;
    run_topology("tree:3");
    run_topology("tree:16");
}

static void test_butterfly(void **st)
{
    (void)st;
    run_topology("butterfly");
}

/* The ring's payload: 2(n-1) slices per member, 2(n-1)/n of the vector
 * (model and weight) when n divides it, within two elements otherwise. */
static void test_ring_payload(void **st)
{
    (void)st;
    for (uint32_t n = 2; n <= 17; n++) {
        size_t dims[] = {(size_t)n * 60, (size_t)n * 60 + 7};

        for (int k = 0; k < 2; k++) {
            sim s;
            size_t dim = dims[k], ceil_slice = (dim + n - 1) / n;

            sim_init(&s, "ring", n, dim - 1, 77 + n);
            assert_int_equal(fed_gossip_ar_steps(&s.plan), 2 * (n - 1));
            (void)sim_run(&s, 5);
            check_result(&s);
            assert_int_equal(s.payload_total, (size_t)2 * (n - 1) * dim);
            assert_true(s.payload_max <= (size_t)2 * (n - 1) * ceil_slice);
            assert_true((double)s.payload_max < 2.0 * (n - 1) / n * (double)dim + 2.0);
            if (dim % n == 0)
                assert_int_equal(s.payload_max, (size_t)2 * (n - 1) * dim / n);
            sim_free(&s);
        }
    }
}

static void test_step_counts(void **st)
{
    fed_gossip_ar_plan p;

    (void)st;
    assert_int_equal(fed_gossip_ar_plan_init(&p, "butterfly", 8, 10), FED_OK);
    assert_int_equal(fed_gossip_ar_steps(&p), 6);
    assert_int_equal(fed_gossip_ar_plan_init(&p, "butterfly", 11, 10), FED_OK);
    assert_int_equal(fed_gossip_ar_steps(&p), 8);
    assert_int_equal(fed_gossip_ar_plan_init(&p, "tree", 7, 10), FED_OK);
    assert_int_equal(fed_gossip_ar_steps(&p), 4);
    assert_int_equal(fed_gossip_ar_plan_init(&p, "tree:3", 13, 10), FED_OK);
    assert_int_equal(fed_gossip_ar_steps(&p), 4);
    assert_int_equal(fed_gossip_ar_plan_init(&p, "ring", 1, 10), FED_OK);
    assert_int_equal(fed_gossip_ar_steps(&p), 0);
    assert_int_equal(fed_gossip_ar_plan_init(&p, "ring", 0, 10), FED_ERR_RANGE);
}

static void test_specs(void **st)
{
    fed_gossip_ar_topo t;
    uint32_t k;
    static const char *bad[] = {"", "star", "tree:", "tree:1", "tree:x", "tree:2x",
                                "tree:65", "ring:2", "butterfly:2", "tree:-3"};

    (void)st;
    assert_int_equal(fed_gossip_ar_parse("tree", &t, &k), FED_OK);
    assert_int_equal(t, FED_GOSSIP_AR_TREE);
    assert_int_equal(k, 2);
    assert_int_equal(fed_gossip_ar_parse("tree:5", &t, &k), FED_OK);
    assert_int_equal(k, 5);
    assert_int_equal(fed_gossip_ar_parse("ring", &t, &k), FED_OK);
    assert_int_equal(t, FED_GOSSIP_AR_RING);
    assert_int_equal(fed_gossip_ar_parse("butterfly", &t, &k), FED_OK);
    assert_int_equal(t, FED_GOSSIP_AR_BUTTERFLY);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(fed_gossip_ar_parse(bad[i], &t, &k), FED_ERR_SPEC);
}

/* What a member refuses: a receive it does not expect, of the wrong length,
 * with a NaN, for a step past; advancing early; a non-positive weight. */
static void test_refusals(void **st)
{
    fed_gossip_ar_plan p;
    fed_gossip_ar_member *m;
    double x[4] = {1, 2, 3, 4};
    double d[5] = {1, 1, 1, 1, 1};
    size_t off, len;
    float out[4];

    (void)st;
    assert_int_equal(fed_gossip_ar_plan_init(&p, "ring", 4, 4), FED_OK);
    assert_int_equal(fed_gossip_ar_member_new(&p, 1, x, 0.0, &m), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_gossip_ar_member_new(&p, 4, x, 1.0, &m), FED_ERR_RANGE);
    assert_int_equal(fed_gossip_ar_member_new(&p, 1, x, 2.0, &m), FED_OK);
    /* member 1 takes from member 0 only, slice 0 at step 0 */
    fed_gossip_ar_slice(&p, 0, &off, &len);
    assert_int_equal(fed_gossip_ar_member_receive(m, 2, 0, d, len, NULL), FED_ERR_ROLE);
    assert_int_equal(fed_gossip_ar_member_receive(m, 0, 0, d, len + 1, NULL), FED_ERR_SHAPE);
    d[0] = NAN;
    assert_int_equal(fed_gossip_ar_member_receive(m, 0, 0, d, len, NULL), FED_ERR_BAD_VALUE);
    d[0] = 1;
    assert_int_equal(fed_gossip_ar_member_receive(m, 0, 99, d, len, NULL), FED_ERR_ROLE);
    assert_true(fed_gossip_ar_member_waits_for(m, 0));
    assert_int_equal(fed_gossip_ar_member_advance(m), FED_ERR_BUSY);
    assert_int_equal(fed_gossip_ar_member_result(m, out, NULL), FED_ERR_BUSY);
    assert_int_equal(fed_gossip_ar_member_receive(m, 0, 0, d, len, NULL), FED_OK);
    assert_false(fed_gossip_ar_member_waits_for(m, 0));
    assert_int_equal(fed_gossip_ar_member_advance(m), FED_OK);
    {
        int fresh = -1; /* a resend of one applied: taken as a copy, ignored */

        assert_int_equal(fed_gossip_ar_member_receive(m, 0, 0, d, len, &fresh), FED_OK);
        assert_int_equal(fresh, 0);
        assert_int_equal(fed_gossip_ar_member_receive(m, 2, 0, d, len, NULL), FED_ERR_ROLE);
    }
    fed_gossip_ar_member_free(m);
}

/* Groups: n members with random vectors and weight 1, d = the cycle's
 * rounds of group all-reduces (each group's weighted sum in member order;
 * each member then holds the group's mean and its total weight): every
 * member ends within 1e-12 of the mean; every member's view of its group
 * is its members' view; d = ceil(log_G n) for n that factor into radices
 * <= G, and groups are never larger than G then. */
static uint32_t ceil_log(uint32_t n, uint32_t g)
{
    uint32_t d = 0;

    for (uint64_t p = 1; p < n; p *= g)
        d++;
    return d;
}

static void groups_exact(uint32_t n, uint32_t g, uint64_t seed)
{
    enum { L = 3 };
    double *x = calloc((size_t)n * L, sizeof *x), *w = calloc(n, sizeof *w), mean[L] = {0};
    double *nx = calloc((size_t)n * L, sizeof *nx), *nw = calloc(n, sizeof *nw);
    uint32_t *grp = calloc(n, sizeof *grp), *other = calloc(n, sizeof *other);
    uint32_t r[FED_GOSSIP_AR_MAX_RADICES], d = fed_gossip_ar_radices(n, g, r), cnt, c2;
    uint32_t maxg = 0;
    double err = 0;
    fed_rng rng;

    assert_non_null(x);
    assert_non_null(nx);
    assert_non_null(grp);
    assert_non_null(other);
    fed_rng_seed(&rng, seed);
    for (uint32_t i = 0; i < n; i++) {
        w[i] = 1;
        for (int e = 0; e < L; e++) {
            x[(size_t)i * L + e] = fed_rng_normal(&rng) * 10;
            mean[e] += x[(size_t)i * L + e] / n;
        }
    }
    for (uint32_t t = 1; t <= d; t++) {
        for (uint32_t i = 0; i < n; i++) {
            double s[L] = {0}, W = 0;

            assert_int_equal(fed_gossip_ar_group(n, g, seed, t, i, grp, &cnt), FED_OK);
            maxg = cnt > maxg ? cnt : maxg;
            for (uint32_t k = 0; k < cnt; k++) { /* the same group in every member's view */
                assert_int_equal(fed_gossip_ar_group(n, g, seed, t, grp[k], other, &c2), FED_OK);
                assert_int_equal(c2, cnt);
                assert_memory_equal(other, grp, cnt * sizeof *grp);
                if (k)
                    assert_true(grp[k] > grp[k - 1]);
            }
            for (uint32_t k = 0; k < cnt; k++) {
                W += w[grp[k]];
                for (int e = 0; e < L; e++)
                    s[e] += w[grp[k]] * x[(size_t)grp[k] * L + e];
            }
            nw[i] = W;
            for (int e = 0; e < L; e++)
                nx[(size_t)i * L + e] = s[e] / W;
        }
        memcpy(x, nx, (size_t)n * L * sizeof *x);
        memcpy(w, nw, n * sizeof *w);
    }
    for (uint32_t i = 0; i < n; i++) {
        assert_true(w[i] == n);
        for (int e = 0; e < L; e++) {
            double a = fabs(x[(size_t)i * L + e] - mean[e]);

            err = a > err ? a : err;
        }
    }
    assert_true(err < 1e-12);
    printf("groups of %2u, n = %4u: exact mean (max error %.1e) after %u rounds (ceil(log_G n) "
           "= %u), groups of at most %u\n", g, n, err, d, ceil_log(n, g), maxg);
    free(x);
    free(nx);
    free(w);
    free(nw);
    free(grp);
    free(other);
}

static void test_groups(void **st)
{
    static const uint32_t cases[][2] = {{8, 16}, {64, 16}, {1000, 16}, {12, 4}, {27, 3},
                                        {100, 10}, {6, 4}, {30, 16}};
    uint32_t r[FED_GOSSIP_AR_MAX_RADICES], d;

    (void)st;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint32_t n = cases[i][0], g = cases[i][1];

        d = fed_gossip_ar_radices(n, g, r);
        assert_int_equal(d, ceil_log(n, g));
        for (uint32_t t = 0; t < d; t++)
            assert_true(r[t] <= g);
        groups_exact(n, g, 7 + i);
    }
    groups_exact(17, 4, 3); /* prime: one group of 17, one round */
    assert_int_equal(fed_gossip_ar_radices(17, 4, r), 1);
    assert_int_equal(r[0], 17);
    assert_int_equal(fed_gossip_ar_radices(1, 4, r), 0);
}

/* The verification rows in lockstep (every member done at hop 0; each hop
 * every member sends its row to the members 2^k after it once the row
 * covers 2^k, and the whole row once it has it): for n = 2..17 and 1,000
 * every member knows the whole row after ceil(log2 n) hops and not before;
 * with one member silent (it died after its run) no member ever claims
 * the whole row; a different hash heard gives 0 (a redo). */
static uint32_t rows_lockstep(uint32_t n, uint32_t silent, uint32_t max_hops)
{
    uint32_t levels = fed_gossip_ar_row_levels(n), hop;
    uint64_t *row = calloc(n, sizeof *row), *rx = calloc((size_t)n * 32, sizeof *rx);
    uint64_t *tx = calloc((size_t)n * 32, sizeof *tx), *nrx = calloc((size_t)n * 32, sizeof *nrx);
    uint8_t same[32];

    assert_non_null(row);
    assert_non_null(rx);
    assert_non_null(tx);
    assert_non_null(nrx);
    memset(same, 1, sizeof same);
    for (uint32_t i = 0; i < n; i++)
        row[i] = 1;
    for (hop = 0; hop < max_hops; hop++) {
        int all = 1;

        for (uint32_t i = 0; i < n; i++)
            all &= row[i] == n;
        if (all)
            break;
        memcpy(nrx, rx, (size_t)n * 32 * sizeof *rx);
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t k = 0; k < levels; k++) {
                uint64_t d = 1ull << k;

                if (i != silent && ((row[i] >= d && !tx[i * 32 + k]) ||
                                    (row[i] >= n && tx[i * 32 + k] < n))) {
                    tx[i * 32 + k] = row[i];
                    nrx[((i + d) % n) * 32 + k] = row[i];
                }
            }
        memcpy(rx, nrx, (size_t)n * 32 * sizeof *rx);
        for (uint32_t i = 0; i < n; i++) {
            row[i] = fed_gossip_ar_row(n, row[i], rx + (size_t)i * 32, same);
            assert_true(row[i] >= 1 && row[i] <= n);
            if (silent < n)
                assert_true(row[i] < n); /* the silent member's part never heard */
        }
    }
    free(row);
    free(rx);
    free(tx);
    free(nrx);
    return hop;
}

static void test_verify_rows(void **st)
{
    uint64_t rx[32] = {0};
    uint8_t same[32];

    (void)st;
    for (uint32_t n = 2; n <= 17; n++)
        assert_int_equal(rows_lockstep(n, UINT32_MAX, 64), fed_gossip_ar_row_levels(n));
    assert_int_equal(rows_lockstep(1000, UINT32_MAX, 64), 10);
    for (uint32_t n = 3; n <= 17; n += 7)
        for (uint32_t d = 0; d < n; d++)
            assert_int_equal(rows_lockstep(n, d, 40), 40); /* never the whole row */
    memset(same, 1, sizeof same);
    rx[1] = 3;
    assert_int_equal(fed_gossip_ar_row(8, 1, rx, same), 1); /* 2 before: needs a row of 2 */
    assert_int_equal(fed_gossip_ar_row(8, 2, rx, same), 5);
    rx[0] = 8;
    assert_int_equal(fed_gossip_ar_row(8, 1, rx, same), 8); /* the whole row, from anyone */
    same[1] = 0;
    assert_int_equal(fed_gossip_ar_row(8, 2, rx, same), 0); /* another hash: redone */
    printf("verification rows: the whole row after ceil(log2 n) hops for n = 2..17 and 1,000 "
           "(10 hops); a silent member keeps every row short of n\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_specs),
        cmocka_unit_test(test_step_counts),
        cmocka_unit_test(test_ring),
        cmocka_unit_test(test_tree),
        cmocka_unit_test(test_tree3),
        cmocka_unit_test(test_butterfly),
        cmocka_unit_test(test_ring_payload),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_verify_rows),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
