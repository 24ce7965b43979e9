/* test_metrics.c - model/metrics: hand-worked binary, multi-class and
 * regression cases; histograms and moments that merge to the whole's; the
 * binned AUC within its bound; bad input refused; a model's probabilities
 * (fed_model_predict) and its evaluation report. With `--scores FILE` it
 * prints the metrics of the sets in FILE instead, one line each, for
 * tests/test_metrics_sklearn.sh to check against scikit-learn. */
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
#include "model/backend.h"
#include "model/metrics.h"
#include "model/model.h"
#include "model/train.h"

static fed_metrics_item work[4096];

/* scores 0.1 0.4 0.35 0.8, labels 0 0 1 1: scikit-learn's textbook case
 * (roc_auc_score 0.75, average_precision_score 0.8333...). */
static void test_binary_textbook(void **state)
{
    const double s[] = {0.1, 0.4, 0.35, 0.8};
    const int32_t y[] = {0, 0, 1, 1};
    fed_metrics_binary m;

    (void)state;
    assert_int_equal(fed_metrics_binary_exact(s, y, 4, work, &m), FED_OK);
    assert_int_equal(m.pos, 2);
    assert_int_equal(m.neg, 2);
    assert_true(fabs(m.auc - 0.75) < 1e-15);
    assert_true(fabs(m.ap - 5.0 / 6.0) < 1e-15);
    assert_true(m.auc_bound == 0.0);
    /* at 0.5 only 0.8 is positive: tp 1, fp 0, fn 1, tn 2 */
    assert_int_equal(m.half.tp, 1);
    assert_int_equal(m.half.fp, 0);
    assert_int_equal(m.half.tn, 2);
    assert_int_equal(m.half.fn, 1);
    assert_true(m.half.sensitivity == 0.5 && m.half.specificity == 1.0);
    assert_true(fabs(m.half.f1 - 2.0 / 3.0) < 1e-15);
    /* J: 0.8 -> 0.5, 0.4 -> 0, 0.35 -> 0.5, 0.1 -> 0: the higher of the two */
    assert_true(m.youden.threshold == 0.8);
    assert_true(m.youden.sensitivity - (1.0 - m.youden.specificity) == 0.5);
}

/* Tied scores count half a pair: one positive and one negative both at
 * 0.5, one negative at 0.2 -> AUC (1 + 0.5) / 2. */
static void test_binary_ties(void **state)
{
    const double s[] = {0.5, 0.5, 0.2};
    const int32_t y[] = {1, 0, 0};
    fed_metrics_binary m;

    (void)state;
    assert_int_equal(fed_metrics_binary_exact(s, y, 3, work, &m), FED_OK);
    assert_true(m.auc == 0.75);
    assert_true(m.ap == 0.5);
    assert_int_equal(m.half.tp, 1);
    assert_int_equal(m.half.fp, 1);
}

static void test_binary_rejects(void **state)
{
    const double bad_s[] = {0.2, 1.5}, nan_s[] = {0.2, NAN}, s[] = {0.2, 0.3};
    const int32_t y[] = {0, 1}, bad_y[] = {0, 2};
    fed_metrics_binary m;
    fed_metrics_hist h;

    (void)state;
    memset(&h, 0, sizeof h);
    assert_int_equal(fed_metrics_binary_exact(bad_s, y, 2, work, &m), FED_ERR_RANGE);
    assert_int_equal(fed_metrics_binary_exact(nan_s, y, 2, work, &m), FED_ERR_NAN);
    assert_int_equal(fed_metrics_binary_exact(s, bad_y, 2, work, &m), FED_ERR_RANGE);
    assert_int_equal(fed_metrics_binary_exact(s, y, 0, work, &m), FED_ERR_INVAL);
    assert_int_equal(fed_metrics_hist_add(&h, s, bad_y, 2), FED_ERR_RANGE);
    assert_int_equal(fed_metrics_binary_from_hist(&h, &m), FED_ERR_INVAL); /* unchanged: empty */
    /* one class only: no AUC */
    assert_int_equal(fed_metrics_binary_exact(s, (const int32_t[]){1, 1}, 2, work, &m), FED_OK);
    assert_true(isnan(m.auc) && isnan(m.half.specificity));
}

/* The bins: 0.5 is an edge; scores near 0 and 1 spread; the ends clamp. */
static void test_bins(void **state)
{
    (void)state;
    assert_int_equal(fed_metrics_bin(0.5), FED_METRICS_BINS / 2);
    assert_int_equal(fed_metrics_bin(nextafter(0.5, 0.0)), FED_METRICS_BINS / 2 - 1);
    assert_true(fed_metrics_bin_threshold(FED_METRICS_BINS / 2) == 0.5);
    assert_int_equal(fed_metrics_bin(0.0), 0);
    assert_int_equal(fed_metrics_bin(1e-300), 0);
    assert_int_equal(fed_metrics_bin(1.0), FED_METRICS_BINS - 1);
    /* 1e-3 and 2e-3 are logits -6.9068 and -6.2126: 0.694 apart, 44.4 bins */
    assert_in_range(fed_metrics_bin(2e-3) - fed_metrics_bin(1e-3), 44, 45);
    assert_in_range(fed_metrics_bin(1 - 1e-3) - fed_metrics_bin(1 - 2e-3), 44, 45);
    for (int b = 1; b < FED_METRICS_BINS; b++)
        assert_int_equal(fed_metrics_bin(fed_metrics_bin_threshold(b) * (1 + 1e-12)), b);
}

/* Three sites' histograms add to the whole's; the binned AUC is within its
 * bound of the exact one, and the counts at 0.5 are the exact counts. */
static void test_hist_merge(void **state)
{
    enum { N = 3000 };
    static double s[N];
    static int32_t y[N];
    static fed_metrics_hist whole, part[3], sum;
    fed_metrics_binary ex, bin;
    fed_rng rng;

    (void)state;
    fed_rng_seed(&rng, 36);
    for (int i = 0; i < N; i++) {
        s[i] = fed_rng_uniform(&rng);
        y[i] = fed_rng_uniform(&rng) < s[i];
    }
    memset(&whole, 0, sizeof whole);
    memset(part, 0, sizeof part);
    memset(&sum, 0, sizeof sum);
    assert_int_equal(fed_metrics_hist_add(&whole, s, y, N), FED_OK);
    for (int k = 0; k < 3; k++)
        assert_int_equal(fed_metrics_hist_add(&part[k], s + k * (N / 3), y + k * (N / 3), N / 3),
                         FED_OK);
    for (int k = 0; k < 3; k++)
        fed_metrics_hist_merge(&sum, &part[k]);
    assert_memory_equal(&sum, &whole, sizeof whole);
    assert_int_equal(fed_metrics_binary_exact(s, y, N, work, &ex), FED_OK);
    assert_int_equal(fed_metrics_binary_from_hist(&sum, &bin), FED_OK);
    assert_true(fabs(bin.auc - ex.auc) <= bin.auc_bound);
    assert_true(bin.auc_bound > 0 && bin.auc_bound < 0.002);
    assert_int_equal(bin.half.tp, ex.half.tp);
    assert_int_equal(bin.half.fp, ex.half.fp);
    assert_true(bin.half.f1 == ex.half.f1);
}

/* 3 classes: truth 0 0 1 1 2 2, predicted 0 1 1 1 2 0. */
static void test_multi(void **state)
{
    const int32_t t[] = {0, 0, 1, 1, 2, 2}, p[] = {0, 1, 1, 1, 2, 0}, bad[] = {0, 3};
    const double prob[] = {0.2, 0.5, 0.3, 0.4, 0.4, 0.2};
    uint64_t cm[9] = {0};
    double recall[3];
    int32_t am[2];
    fed_metrics_multi m;

    (void)state;
    assert_int_equal(fed_metrics_confusion_add(cm, 3, t, p, 6), FED_OK);
    assert_int_equal(fed_metrics_confusion_add(cm, 3, t, bad, 2), FED_ERR_RANGE);
    assert_int_equal(cm[0 * 3 + 1], 1);
    assert_int_equal(cm[2 * 3 + 0], 1);
    fed_metrics_multi_from_confusion(cm, 3, &m, recall);
    assert_int_equal(m.samples, 6);
    assert_int_equal(m.correct, 4);
    /* F1: class 0 2*1/(2+2) = 0.5, class 1 2*2/(2+3) = 0.8, class 2 2*1/(2+1) */
    assert_true(fabs(m.macro_f1 - (0.5 + 0.8 + 2.0 / 3.0) / 3.0) < 1e-15);
    assert_true(recall[0] == 0.5 && recall[1] == 1.0 && recall[2] == 0.5);
    fed_metrics_argmax(prob, 2, 3, am);
    assert_int_equal(am[0], 1);
    assert_int_equal(am[1], 0); /* equal maxima: the first */
}

static void test_regression(void **state)
{
    const double y[] = {3, -0.5, 2, 7}, yhat[] = {2.5, 0.0, 2, 8};
    fed_metrics_reg_stats a = {0}, b = {0}, all = {0};
    fed_metrics_reg r, r_all;

    (void)state;
    fed_metrics_reg_add(&all, y, yhat, 4);
    fed_metrics_reg_add(&a, y, yhat, 1);
    fed_metrics_reg_add(&b, y + 1, yhat + 1, 3);
    fed_metrics_reg_merge(&a, &b);
    fed_metrics_reg_finish(&a, &r);
    fed_metrics_reg_finish(&all, &r_all);
    /* scikit-learn's docstring example: MSE 0.375, MAE 0.5, R^2 0.9486... */
    assert_true(fabs(r.mse - 0.375) < 1e-15 && fabs(r.mae - 0.5) < 1e-15);
    assert_true(fabs(r.r2 - 0.9486081370449679) < 1e-12);
    assert_true(fabs(r.r2 - r_all.r2) < 1e-15);
}

/* fed_model_predict's probabilities are the softmax of the logreg's logits
 * computed here from its parameters, in pieces of max_batch (7) over 20
 * samples; fed_train_evaluate_report's figures are the exact metrics of
 * those probabilities: the binary set with 2 classes, the multi-class set
 * (confusion of the argmax) with 3. */
static void check_model(int classes)
{
    enum { N = 20, F = 3 };
    static float x[N * F];
    static int32_t y[N], pred[N];
    static double prob[N * 3], want[N * 3], score[N];
    fed_model_shape sh = {1, 1, F, classes, 0};
    fed_dataset d = {0};
    fed_backend *be = NULL;
    fed_model *m = NULL;
    fed_eval_report *r = NULL;
    fed_step_stats st = {0};
    fed_batch b;
    float p[(F + 1) * 3];
    const fed_tensor_info *t;
    int nt = 0;
    fed_rng rng;
    uint64_t cm[9] = {0};
    fed_metrics_binary ex;

    fed_rng_seed(&rng, 7);
    for (int i = 0; i < N * F; i++)
        x[i] = (float)(4 * fed_rng_uniform(&rng) - 2);
    for (int i = 0; i < N; i++)
        y[i] = (int32_t)(i % classes);
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    assert_int_equal(fed_model_new("logreg", sh, be, NULL, 1, 7, &m), FED_OK);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    assert_int_equal(fed_model_get_params(m, p), FED_OK);
    t = fed_model_tensors(m, &nt);
    assert_int_equal(nt, 2); /* 0.weight (classes, F), 0.bias (classes) */
    for (int i = 0; i < N; i++) {
        double z[3], mx = -INFINITY, sum = 0;

        for (int c = 0; c < classes; c++) {
            z[c] = p[t[1].offset + c];
            for (int f = 0; f < F; f++)
                z[c] += (double)p[t[0].offset + (size_t)c * F + f] * x[i * F + f];
            mx = fmax(mx, z[c]);
        }
        for (int c = 0; c < classes; c++)
            sum += exp(z[c] - mx);
        for (int c = 0; c < classes; c++)
            want[i * classes + c] = exp(z[c] - mx) / sum;
    }
    b.n = N;
    b.x_u8 = NULL;
    b.x_f32 = x;
    b.y = y;
    b.y_f32 = NULL;
    assert_int_equal(fed_model_predict(m, &b, &st, prob), FED_OK);
    assert_int_equal(st.samples, N);
    for (int i = 0; i < N * classes; i++)
        assert_true(fabs(prob[i] - want[i]) < 1e-5);
    d.n = N;
    d.shape = sh;
    d.features = F;
    d.x_f32 = x;
    d.y = y;
    assert_int_equal(fed_eval_report_new(classes, &r), FED_OK);
    assert_int_equal(fed_train_evaluate_report(m, &d, r), FED_OK);
    assert_int_equal(r->st.samples, N);
    fed_metrics_argmax(prob, N, classes, pred);
    assert_int_equal(fed_metrics_confusion_add(cm, classes, y, pred, N), FED_OK);
    assert_memory_equal(cm, r->confusion, (size_t)classes * classes * sizeof *cm);
    assert_int_equal(r->multi.correct, r->st.correct);
    assert_int_equal(r->has_binary, classes == 2);
    if (classes == 2) {
        for (int i = 0; i < N; i++)
            score[i] = prob[i * 2 + 1];
        assert_int_equal(fed_metrics_binary_exact(score, y, N, work, &ex), FED_OK);
        assert_true(ex.auc == r->bin.auc && ex.ap == r->bin.ap);
        assert_true(ex.youden.threshold == r->bin.youden.threshold);
    }
    fed_eval_report_free(r);
    fed_model_free(m);
    fed_backend_free(be);
}

static void test_model_report(void **state)
{
    (void)state;
    check_model(2);
    check_model(3);
}

/* The names a round's figures go by, which way each is better, and the
 * headline figures by kind. */
static void test_names(void **state)
{
    fed_metrics_head h = {0};
    fed_metric_value v[FED_METRICS_HEAD_MAX];

    (void)state;
    assert_int_equal(fed_metrics_higher_better("auc"), 1);
    assert_int_equal(fed_metrics_higher_better("accuracy"), 1);
    assert_int_equal(fed_metrics_higher_better("recall.3"), 1);
    assert_int_equal(fed_metrics_higher_better("macro_f1"), 1);
    assert_int_equal(fed_metrics_higher_better("loss"), 0);
    assert_int_equal(fed_metrics_higher_better("mse"), 0);
    assert_int_equal(fed_metrics_higher_better("youden_threshold"), -1);
    assert_int_equal(fed_metrics_higher_better("recall"), -1);
    assert_int_equal(fed_metrics_higher_better("confusion.1.1"), -1);
    assert_int_equal(fed_metrics_higher_better("aucc"), -1);
    assert_int_equal(fed_metrics_head_named(&h, v), 0);
    h.kind = FED_METRICS_MULTI;
    h.macro_f1 = 0.5;
    assert_int_equal(fed_metrics_head_named(&h, v), 1);
    assert_string_equal(v[0].name, "macro_f1");
    h.kind = FED_METRICS_BINARY;
    h.auc = 0.9;
    h.youden_f1 = 0.7;
    assert_int_equal(fed_metrics_head_named(&h, v), FED_METRICS_HEAD_MAX);
    assert_true(!strcmp(v[0].name, "auc") && v[0].value == 0.9);
    assert_true(!strcmp(v[9].name, "youden_f1") && v[9].value == 0.7);
}

/* ---- --scores FILE: each set a header line, then its rows ----
 *   b N      then N lines "label score"      -> b exact... | binned...
 *   m N K    then N lines "truth predicted"  -> m accuracy macro_f1 recall...
 *   r N      then N lines "y yhat"           -> r mse mae r2 (three parts merged) */
static int scores_main(const char *path)
{
    static double a[1 << 20], b[1 << 20];
    static int32_t ia[1 << 20], ib[1 << 20];
    static fed_metrics_item items[1 << 20];
    static fed_metrics_hist h;
    static uint64_t cm[64 * 64];
    FILE *f = fopen(path, "r");
    char kind;
    size_t n;

    if (!f) {
        perror(path);
        return 1;
    }
    while (fscanf(f, " %c %zu", &kind, &n) == 2 && n <= (1 << 20)) {
        if (kind == 'b') {
            fed_metrics_binary ex, bin;

            for (size_t i = 0; i < n; i++)
                if (fscanf(f, "%d %lf", &ia[i], &a[i]) != 2)
                    return 1;
            memset(&h, 0, sizeof h);
            if (fed_metrics_binary_exact(a, ia, n, items, &ex) != FED_OK ||
                fed_metrics_hist_add(&h, a, ia, n) != FED_OK ||
                fed_metrics_binary_from_hist(&h, &bin) != FED_OK)
                return 1;
            printf("b %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g"
                   " %.17g %.17g %.17g %llu %llu\n",
                   ex.auc, ex.ap, ex.half.sensitivity, ex.half.specificity, ex.half.precision,
                   ex.half.f1, ex.youden.threshold, ex.youden.sensitivity, ex.youden.specificity,
                   bin.auc, bin.auc_bound, bin.ap, bin.youden.sensitivity - (1 - bin.youden.specificity),
                   (unsigned long long)bin.half.tp, (unsigned long long)bin.half.fp);
        } else if (kind == 'm') {
            fed_metrics_multi m;
            double recall[64];
            int k;

            if (fscanf(f, "%d", &k) != 1 || k < 1 || k > 64)
                return 1;
            for (size_t i = 0; i < n; i++)
                if (fscanf(f, "%d %d", &ia[i], &ib[i]) != 2)
                    return 1;
            memset(cm, 0, sizeof cm);
            if (fed_metrics_confusion_add(cm, k, ia, ib, n) != FED_OK)
                return 1;
            fed_metrics_multi_from_confusion(cm, k, &m, recall);
            printf("m %.17g %.17g", m.accuracy, m.macro_f1);
            for (int c = 0; c < k; c++)
                printf(" %.17g", recall[c]);
            for (int c = 0; c < k * k; c++)
                printf(" %llu", (unsigned long long)cm[c]);
            printf("\n");
        } else if (kind == 'r') {
            fed_metrics_reg_stats s = {0}, part = {0};
            fed_metrics_reg r;

            for (size_t i = 0; i < n; i++)
                if (fscanf(f, "%lf %lf", &a[i], &b[i]) != 2)
                    return 1;
            /* as three sites would: each its own stats, then merged */
            for (size_t lo = 0, k = 0; k < 3; k++) {
                size_t hi = n * (k + 1) / 3;

                memset(&part, 0, sizeof part);
                fed_metrics_reg_add(&part, a + lo, b + lo, hi - lo);
                fed_metrics_reg_merge(&s, &part);
                lo = hi;
            }
            fed_metrics_reg_finish(&s, &r);
            printf("r %.17g %.17g %.17g\n", r.mse, r.mae, r.r2);
        } else {
            return 1;
        }
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_binary_textbook), cmocka_unit_test(test_binary_ties),
        cmocka_unit_test(test_binary_rejects),  cmocka_unit_test(test_bins),
        cmocka_unit_test(test_hist_merge),      cmocka_unit_test(test_multi),
        cmocka_unit_test(test_regression),      cmocka_unit_test(test_model_report),
        cmocka_unit_test(test_names),
    };

    if (argc == 3 && strcmp(argv[1], "--scores") == 0)
        return scores_main(argv[2]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
