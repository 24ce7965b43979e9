/* test_site_eval.c - a site evaluation's statistics (node/site_eval.h):
 * three sites' scores packed into integer vectors, summed modulo 2^64 as
 * the integer secure sum sums them, and read back: the confusion matrix,
 * accuracy, recall and the counts at 0.5 exactly those of the union, the
 * loss within the fixed point, the AUC within the bound the pooled
 * histogram reports of the exact AUC over the union (scores concentrated
 * near 0 and 1 among them); multi-class; a regression's moments as
 * fixed-point limbs (MSE, MAE, R^2 of the union); the plain path's 16-bit limbs
 * back to the same integers; every refusal with its code. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "node/agg_input_impl.h"
#include "node/site_eval.h"

enum { SITES = 3, PER = 400, ALL = SITES * PER };

/* One site's evaluation of scores s[0..n) with labels y, as a report and
 * histogram (the confusion matrix at 0.5, class 1 when s >= 0.5). */
static void site_report(const double *s, const int32_t *y, size_t n, fed_eval_report *r,
                        fed_metrics_hist *h, double *loss)
{
    memset(h, 0, sizeof *h);
    memset(r->confusion, 0, 4 * sizeof *r->confusion);
    memset(&r->st, 0, sizeof r->st);
    for (size_t i = 0; i < n; i++) {
        int p = s[i] >= 0.5;
        double q = y[i] ? s[i] : 1 - s[i];

        r->confusion[y[i] * 2 + p]++;
        r->st.correct += p == y[i];
        r->st.loss_sum += -log(q > 1e-12 ? q : 1e-12);
    }
    r->st.samples = (long)n;
    *loss = r->st.loss_sum;
    assert_int_equal(fed_metrics_hist_add(h, s, y, n), FED_OK);
}

static void check_binary(int concentrated)
{
    fed_eval_report *r = NULL, *pooled = NULL;
    fed_metrics_hist *h = fed_malloc(sizeof *h);
    size_t nints = fed_site_eval_ints(2);
    int64_t *v = fed_malloc(nints * sizeof *v);
    uint64_t *sum = fed_calloc(nints, sizeof *sum);
    double *s = fed_malloc(ALL * sizeof *s), loss = 0, total_loss = 0;
    int32_t *y = fed_malloc(ALL * sizeof *y);
    fed_metrics_item *work = fed_malloc(ALL * sizeof *work);
    fed_metrics_binary exact;
    uint64_t cm[4] = {0};
    fed_rng rng;

    assert_non_null(h);
    assert_non_null(v);
    assert_non_null(sum);
    assert_int_equal(nints, 3 + 4 + 2 * FED_METRICS_BINS);
    fed_rng_seed(&rng, concentrated ? 7 : 5);
    for (size_t i = 0; i < ALL; i++) {
        double u = fed_rng_uniform(&rng);

        y[i] = fed_rng_uniform(&rng) < 0.4 + 0.1 * (double)(i / PER); /* a mix per site */
        s[i] = concentrated ? (y[i] ? 1 - 1e-3 * u : 1e-3 * u)
                            : fmin(1, fmax(0, 0.3 * u + 0.45 * y[i] + 0.1));
        if (concentrated && i % 5 == 0) /* some on the wrong side */
            s[i] = 1 - s[i];
    }
    assert_int_equal(fed_eval_report_new(2, &r), FED_OK);
    assert_int_equal(fed_eval_report_new(2, &pooled), FED_OK);
    for (int k = 0; k < SITES; k++) {
        site_report(s + k * PER, y + k * PER, PER, r, h, &loss);
        total_loss += loss;
        for (int c = 0; c < 4; c++)
            cm[c] += r->confusion[c];
        assert_int_equal(fed_site_eval_pack(r, h, k != 1, v), FED_OK);
        assert_int_equal(v[FED_SITE_EVAL_SAMPLES], PER);
        assert_int_equal(v[FED_SITE_EVAL_CONSENT], k != 1);
        for (size_t j = 0; j < nints; j++)
            sum[j] += (uint64_t)v[j];
    }
    assert_int_equal(fed_site_eval_unpack(sum, pooled, h), FED_OK);
    assert_int_equal(sum[FED_SITE_EVAL_CONSENT], 2); /* a count of consenting sites */
    assert_int_equal(pooled->st.samples, ALL);
    for (int c = 0; c < 4; c++)
        assert_int_equal(pooled->confusion[c], cm[c]);
    assert_true(fabs(pooled->st.loss_sum - total_loss) <= SITES * 0x1p-24);
    assert_true(pooled->multi.accuracy == (double)(cm[0] + cm[3]) / ALL);
    assert_true(pooled->recall[1] == (double)cm[3] / (double)(cm[2] + cm[3]));
    assert_true(pooled->has_binary);
    /* the counts at 0.5 are exact (logit 0 is a bin edge) */
    assert_int_equal(pooled->bin.half.tp, cm[3]);
    assert_int_equal(pooled->bin.half.fp, cm[1]);
    assert_int_equal(pooled->bin.half.tn, cm[0]);
    assert_int_equal(pooled->bin.half.fn, cm[2]);
    assert_int_equal(fed_metrics_binary_exact(s, y, ALL, work, &exact), FED_OK);
    assert_true(fabs(pooled->bin.auc - exact.auc) <= pooled->bin.auc_bound + 1e-12);
    assert_true(pooled->bin.auc_bound < 0.01);
    fed_eval_report_free(r);
    fed_eval_report_free(pooled);
    fed_free(h);
    fed_free(v);
    fed_free(sum);
    fed_free(s);
    fed_free(y);
    fed_free(work);
}

static void test_binary_pooled(void **state)
{
    (void)state;
    check_binary(0);
}

static void test_binary_concentrated(void **state)
{
    (void)state;
    check_binary(1);
}

static void test_multi_pooled(void **state)
{
    static const uint64_t a[9] = {5, 1, 0, 2, 7, 1, 0, 0, 4}, b[9] = {3, 0, 1, 0, 2, 0, 1, 1, 6};
    fed_eval_report *r = NULL;
    size_t nints = fed_site_eval_ints(3);
    int64_t va[3 + 9], vb[3 + 9];
    uint64_t sum[3 + 9];

    (void)state;
    assert_int_equal(nints, 3 + 9);
    assert_int_equal(fed_eval_report_new(3, &r), FED_OK);
    memcpy(r->confusion, a, sizeof a);
    r->st.samples = 20;
    r->st.loss_sum = 7.25;
    assert_int_equal(fed_site_eval_pack(r, NULL, 1, va), FED_OK);
    memcpy(r->confusion, b, sizeof b);
    r->st.samples = 14;
    r->st.loss_sum = 3.5;
    assert_int_equal(fed_site_eval_pack(r, NULL, 0, vb), FED_OK);
    for (size_t j = 0; j < nints; j++)
        sum[j] = (uint64_t)va[j] + (uint64_t)vb[j];
    memset(r->confusion, 0, 9 * sizeof *r->confusion);
    assert_int_equal(fed_site_eval_unpack(sum, r, NULL), FED_OK);
    assert_int_equal(r->st.samples, 34);
    assert_int_equal(r->st.correct, 5 + 7 + 4 + 3 + 2 + 6);
    assert_true(r->st.loss_sum == 10.75); /* dyadic: exact in the fixed point */
    assert_true(r->multi.accuracy == 27.0 / 34);
    assert_true(r->recall[1] == 9.0 / 12);
    assert_false(r->has_binary);
    fed_eval_report_free(r);
}

/* Regression: three sites' moments (a mean far from 0, negative targets)
 * summed as limbs and read back as the union's MSE, MAE and R^2. */
static void test_regression_pooled(void **state)
{
    enum { RN = 300 };
    fed_eval_report *r = NULL;
    size_t nints = fed_site_eval_ints(1);
    int64_t v[32];
    uint64_t sum[32] = {0};
    double y[RN], yhat[RN];
    fed_metrics_reg_stats all = {0};
    fed_metrics_reg want;
    fed_rng rng;

    (void)state;
    assert_int_equal(nints, 3 + 16);
    fed_rng_seed(&rng, 11);
    for (int i = 0; i < RN; i++) {
        y[i] = (i < 100 ? -1000 : 50) + 20 * fed_rng_normal(&rng);
        yhat[i] = y[i] + 3 * fed_rng_normal(&rng) + 0.5;
    }
    fed_metrics_reg_add(&all, y, yhat, RN);
    fed_metrics_reg_finish(&all, &want);
    assert_int_equal(fed_eval_report_new(1, &r), FED_OK);
    for (int k = 0; k < 3; k++) {
        memset(&r->reg_stats, 0, sizeof r->reg_stats);
        fed_metrics_reg_add(&r->reg_stats, y + 100 * k, yhat + 100 * k, 100);
        r->regression = 1;
        r->st.samples = 100;
        r->st.loss_sum = r->reg_stats.sse / 2;
        assert_int_equal(fed_site_eval_pack(r, NULL, 1, v), FED_OK);
        for (size_t j = 0; j < nints; j++)
            sum[j] += (uint64_t)v[j];
    }
    memset(&r->reg, 0, sizeof r->reg);
    assert_int_equal(fed_site_eval_unpack(sum, r, NULL), FED_OK);
    assert_true(r->regression);
    assert_int_equal(r->st.samples, RN);
    assert_true(fabs(r->reg.mse - want.mse) <= 1e-9 * want.mse);
    assert_true(fabs(r->reg.mae - want.mae) <= 1e-9 * want.mae);
    assert_true(fabs(r->reg.r2 - want.r2) <= 1e-9);
    r->regression = 0; /* a one-class classifier is no regression */
    assert_int_equal(fed_site_eval_pack(r, NULL, 1, v), FED_ERR_INVAL);
    fed_eval_report_free(r);
}

/* In the clear: 16-bit limbs, one float each, back to the same integers. */
static void test_plain_limbs(void **state)
{
    int64_t ix[5] = {0, 1, 65535, 65536, (int64_t)0x123456789abcdefll};
    agg_segment seg = {.name = "evaluation", .len = 5, .rule = AGG_WEIGHT_SUM,
                       .enc = AGG_ENC_INT64};
    size_t words = fed_node_site_eval_plain_words(5);
    float f[20];
    uint32_t limbs[20];
    uint64_t back[5];

    (void)state;
    assert_int_equal(words, 20);
    assert_int_equal(fed_node_site_eval_plain_words(0), 0);
    assert_int_equal(fed_node_site_eval_plain_put(ix, 5, f), FED_OK);
    for (size_t w = 0; w < words; w++) {
        assert_true(f[w] >= 0 && f[w] <= 65535 && f[w] == floorf(f[w]));
        limbs[w] = (uint32_t)f[w];
    }
    assert_int_equal(fedi_agg_seg_dequantize(&seg, 1, FED_AGG_PLAIN_INT_BITS, limbs, 1, NULL, back),
                     FED_OK);
    for (int i = 0; i < 5; i++)
        assert_int_equal(back[i], (uint64_t)ix[i]);
}

static void test_refusals(void **state)
{
    fed_eval_report *r = NULL, *r1 = NULL;
    fed_metrics_hist *h = fed_calloc(1, sizeof *h);
    size_t nints = fed_site_eval_ints(2);
    uint64_t *v = fed_calloc(nints, sizeof *v);
    int64_t *p = fed_calloc(nints, sizeof *p);

    (void)state;
    assert_int_equal(fed_site_eval_ints(0), 0);
    assert_int_equal(fed_site_eval_ints(FED_SITE_EVAL_CLASSES_MAX + 1), 0);
    assert_int_equal(fed_eval_report_new(2, &r), FED_OK);
    assert_int_equal(fed_eval_report_new(1, &r1), FED_OK);
    assert_int_equal(fed_site_eval_pack(r1, h, 1, p), FED_ERR_INVAL); /* one class, no regression */
    assert_int_equal(fed_site_eval_pack(r, NULL, 1, p), FED_ERR_INVAL); /* no histogram */
    r->st.loss_sum = NAN;
    assert_int_equal(fed_site_eval_pack(r, h, 1, p), FED_ERR_RANGE);
    r->st.loss_sum = -1;
    assert_int_equal(fed_site_eval_pack(r, h, 1, p), FED_ERR_RANGE);
    assert_int_equal(fed_site_eval_unpack(v, r, h), FED_ERR_INVAL); /* no sample */
    v[FED_SITE_EVAL_SAMPLES] = 3;
    v[FED_SITE_EVAL_CONFUSION] = 2; /* the matrix counts 2 of 3 */
    assert_int_equal(fed_site_eval_unpack(v, r, h), FED_ERR_BAD_VALUE);
    v[FED_SITE_EVAL_CONFUSION + 3] = 1;
    v[FED_SITE_EVAL_CONFUSION + 4] = 2; /* the histogram counts 2 of 3 */
    v[FED_SITE_EVAL_CONFUSION + 4 + FED_METRICS_BINS] = 0;
    assert_int_equal(fed_site_eval_unpack(v, r, h), FED_ERR_BAD_VALUE);
    v[FED_SITE_EVAL_CONFUSION + 4 + FED_METRICS_BINS] = 1;
    assert_int_equal(fed_site_eval_unpack(v, r, h), FED_OK);
    fed_eval_report_free(r);
    fed_eval_report_free(r1);
    fed_free(h);
    fed_free(v);
    fed_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_binary_pooled),
        cmocka_unit_test(test_binary_concentrated),
        cmocka_unit_test(test_multi_pooled),
        cmocka_unit_test(test_regression_pooled),
        cmocka_unit_test(test_plain_limbs),
        cmocka_unit_test(test_refusals),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
