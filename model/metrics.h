/* metrics.h - the figures a clinician or an analyst reads: binary (AUC-ROC,
 * average precision, sensitivity, specificity, F1 at 0.5 and at the
 * threshold that maximizes Youden's J), multi-class (accuracy, macro-F1,
 * per-class recall, the confusion matrix) and regression (MSE, MAE, R^2).
 *
 * Each comes two ways: exact, from the scores themselves; and from
 * sufficient statistics that add up across sites (a confusion matrix; for
 * AUC and AP a histogram of scores per class on fixed logit bins, an integer
 * vector that a secure sum can carry; for regression a few moments). Pure
 * functions: no allocation (the caller passes any scratch), no logging. */
#ifndef FED_MODEL_METRICS_H
#define FED_MODEL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* The score histogram's bins: the logit of the score, log(s / (1 - s)),
 * on [-FED_METRICS_LOGIT_MAX, FED_METRICS_LOGIT_MAX) in steps of
 * 1 / FED_METRICS_BINS_PER_UNIT; a logit outside goes to the edge bin. On
 * the logit, scores within 1e-3 of 0 or 1 still spread over hundreds of
 * bins. Logit 0 (score 0.5) is a bin edge: the counts at 0.5 are exact. */
#define FED_METRICS_LOGIT_MAX 16
#define FED_METRICS_BINS_PER_UNIT 64
#define FED_METRICS_BINS (2 * FED_METRICS_LOGIT_MAX * FED_METRICS_BINS_PER_UNIT)

/* Per class (0: negative, 1: positive) a count per bin. Every site bins
 * alike, so histograms add element by element; as a flat vector it is
 * 2 * FED_METRICS_BINS uint64_t, class-major. */
typedef struct fed_metrics_hist {
    uint64_t n[2][FED_METRICS_BINS];
} fed_metrics_hist;

/* One operating point: a sample is predicted positive when its score is
 * >= threshold. A rate with a zero denominator (no positives, no
 * negatives) is NaN; precision and F1 with a zero denominator are 0, as
 * scikit-learn's zero_division default gives them. */
typedef struct fed_metrics_at {
    double threshold;
    uint64_t tp, fp, tn, fn;
    double sensitivity, specificity, precision, f1;
} fed_metrics_at;

typedef struct fed_metrics_binary {
    uint64_t pos, neg;
    double auc;       /* NaN without both classes */
    double auc_bound; /* |auc - the exact AUC| <= this: 0 when exact; from a
                         histogram 0.5 * sum over bins of p_b * q_b */
    double ap;        /* average precision (from a histogram: each bin one
                         threshold) */
    fed_metrics_at half;   /* at 0.5 */
    fed_metrics_at youden; /* at the highest threshold maximizing TPR - FPR */
} fed_metrics_binary;

/* The exact metrics' scratch: one per sample. */
typedef struct fed_metrics_item {
    double score;
    int32_t label;
} fed_metrics_item;

/* Exact binary metrics of n scores in [0, 1] with labels 0 or 1; work holds
 * n items (overwritten). FED_ERR_RANGE: a label not 0 or 1, a score outside
 * [0, 1]; FED_ERR_NAN: a NaN score. n == 0 gives FED_ERR_INVAL. */
FED_WUR fed_err fed_metrics_binary_exact(const double *score, const int32_t *label, size_t n,
                                         fed_metrics_item *work, fed_metrics_binary *out);

/* The histogram bin of a score in [0, 1] (0 and 1 go to the edge bins). */
int fed_metrics_bin(double score);
/* The score at bin b's lower edge (bin 0's is 0). */
double fed_metrics_bin_threshold(int b);
/* n scores and labels added to h (which the caller zeroes first); the same
 * errors as fed_metrics_binary_exact, and on error h is unchanged. */
FED_WUR fed_err fed_metrics_hist_add(fed_metrics_hist *h, const double *score,
                                     const int32_t *label, size_t n);
/* dst += src (another site's histogram). */
void fed_metrics_hist_merge(fed_metrics_hist *dst, const fed_metrics_hist *src);
/* The metrics a histogram gives: the counts at 0.5 are exact; AUC within
 * its auc_bound; AP and the Youden point with the bins as thresholds. An
 * empty histogram gives FED_ERR_INVAL. */
FED_WUR fed_err fed_metrics_binary_from_hist(const fed_metrics_hist *h, fed_metrics_binary *out);

/* ---- multi-class: the confusion matrix cm (k * k), truth-major:
 * cm[t * k + p] counts samples of class t predicted p. ---- */

/* The predicted class of each of n rows of k probabilities (the first of
 * equal maxima). */
void fed_metrics_argmax(const double *prob, size_t n, int k, int32_t *pred);
/* n (truth, prediction) pairs added to cm; a class outside [0, k) gives
 * FED_ERR_RANGE and leaves cm unchanged. */
FED_WUR fed_err fed_metrics_confusion_add(uint64_t *cm, int k, const int32_t *truth,
                                          const int32_t *pred, size_t n);

typedef struct fed_metrics_multi {
    uint64_t samples, correct;
    double accuracy; /* NaN when empty */
    double macro_f1; /* over the classes that occur as truth or prediction */
} fed_metrics_multi;

/* The multi-class metrics of cm; recall (k, may be NULL) gets each class's
 * recall, NaN for a class with no sample. */
void fed_metrics_multi_from_confusion(const uint64_t *cm, int k, fed_metrics_multi *out,
                                      double *recall);

/* ---- what a round's evaluation records and a running node shows ---- */
enum { FED_METRICS_NONE, FED_METRICS_BINARY, FED_METRICS_MULTI };

/* The headline figures: binary (at 0.5, and at the Youden point), or the
 * multi-class macro-F1 (accuracy and loss travel beside them). */
typedef struct fed_metrics_head {
    int kind; /* FED_METRICS_*: NONE, nothing measured */
    double auc, ap, sensitivity, specificity, precision, f1;
    double youden_threshold, youden_sensitivity, youden_specificity, youden_f1;
    double macro_f1;
} fed_metrics_head;

/* A figure by name: "auc", "recall.3", "confusion.2.0", ... */
#define FED_METRICS_NAME_MAX 24
typedef struct fed_metric_value {
    char name[FED_METRICS_NAME_MAX];
    double value;
} fed_metric_value;

/* The headline figures h holds, by name, into out (room for
 * FED_METRICS_HEAD_MAX); returns how many (0 for NONE). */
#define FED_METRICS_HEAD_MAX 11
size_t fed_metrics_head_named(const fed_metrics_head *h, fed_metric_value *out);
/* Whether a higher value of the named figure is better (AUC, F1, ...: 1;
 * loss, mse, mae: 0); -1 for a name no round records. Per-class names
 * ("recall.3") count as their family. */
int fed_metrics_higher_better(const char *name);

/* ---- regression: moments that merge (Chan et al.'s pairwise update). ---- */
typedef struct fed_metrics_reg_stats {
    uint64_t n;
    double mean_y, m2_y; /* the targets' mean and summed squared deviation */
    double sse, sae;     /* summed squared and absolute errors */
} fed_metrics_reg_stats;

typedef struct fed_metrics_reg {
    double mse, mae, r2; /* NaN when empty; r2 NaN when every target is equal */
} fed_metrics_reg;

/* n targets y and predictions yhat added to s (zeroed first). */
void fed_metrics_reg_add(fed_metrics_reg_stats *s, const double *y, const double *yhat, size_t n);
void fed_metrics_reg_merge(fed_metrics_reg_stats *dst, const fed_metrics_reg_stats *src);
void fed_metrics_reg_finish(const fed_metrics_reg_stats *s, fed_metrics_reg *out);

#endif
