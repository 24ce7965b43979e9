/* metrics.c - binary, multi-class and regression metrics, exact from the
 * scores or from statistics that add across sites (model/metrics.h). The
 * binary figures, exact or binned, come from one walk over distinct
 * thresholds in descending order (the tie groups of the sorted scores, or
 * the histogram's non-empty bins), so both answer by the same arithmetic. */
#include "model/metrics.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the walk over thresholds, shared by the exact and binned forms ---- */

typedef struct curve {
    uint64_t P, N;   /* positives, negatives in all */
    uint64_t tp, fp; /* predicted positive so far (score >= this threshold) */
    double auc2;     /* twice the pairs ordered right, ties counted half */
    double ties;     /* pairs within one group: pos_g * neg_g summed */
    double ap;
    int64_t best_j; /* tp * N - fp * P at the Youden point */
    int have_best;
    double best_thr, half_thr;
    uint64_t best_tp, best_fp, half_tp, half_fp;
} curve;

static void curve_init(curve *c, uint64_t P, uint64_t N)
{
    memset(c, 0, sizeof *c);
    c->P = P;
    c->N = N;
    c->half_thr = 0.5;
}

/* One group: pos and neg samples at threshold thr, below every earlier one. */
static void curve_step(curve *c, double thr, uint64_t pos, uint64_t neg)
{
    uint64_t below = c->N - c->fp - neg; /* negatives under this group */
    int64_t j;

    c->auc2 += (double)pos * (2.0 * (double)below + (double)neg);
    c->ties += (double)pos * (double)neg;
    c->tp += pos;
    c->fp += neg;
    if (pos && c->P)
        c->ap += ((double)pos / (double)c->P) * ((double)c->tp / (double)(c->tp + c->fp));
    if (thr >= 0.5) {
        c->half_tp = c->tp;
        c->half_fp = c->fp;
    }
    j = (int64_t)c->tp * (int64_t)c->N - (int64_t)c->fp * (int64_t)c->P;
    if (!c->have_best || j > c->best_j) { /* strictly: the highest threshold wins */
        c->have_best = 1;
        c->best_j = j;
        c->best_thr = thr;
        c->best_tp = c->tp;
        c->best_fp = c->fp;
    }
}

static double ratio(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : NAN;
}

static void point(fed_metrics_at *at, double thr, uint64_t tp, uint64_t fp, uint64_t P,
                  uint64_t N)
{
    at->threshold = thr;
    at->tp = tp;
    at->fp = fp;
    at->fn = P - tp;
    at->tn = N - fp;
    at->sensitivity = ratio(tp, P);
    at->specificity = ratio(at->tn, N);
    at->precision = tp + fp ? (double)tp / (double)(tp + fp) : 0.0;
    at->f1 = 2 * tp + fp + at->fn ? 2.0 * (double)tp / (double)(2 * tp + fp + at->fn) : 0.0;
}

static void curve_finish(const curve *c, fed_metrics_binary *out)
{
    double pairs = (double)c->P * (double)c->N;

    out->pos = c->P;
    out->neg = c->N;
    out->auc = pairs > 0 ? c->auc2 / (2.0 * pairs) : NAN;
    out->auc_bound = pairs > 0 ? c->ties / (2.0 * pairs) : NAN;
    out->ap = c->P ? c->ap : NAN;
    point(&out->half, c->half_thr, c->half_tp, c->half_fp, c->P, c->N);
    point(&out->youden, c->best_thr, c->best_tp, c->best_fp, c->P, c->N);
}

static fed_err check_scores(const double *score, const int32_t *label, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (isnan(score[i]))
            return FED_ERR_NAN;
        if (score[i] < 0.0 || score[i] > 1.0 || (label[i] != 0 && label[i] != 1))
            return FED_ERR_RANGE;
    }
    return FED_OK;
}

/* ---- exact ---- */

static int by_score_desc(const void *a, const void *b)
{
    double x = ((const fed_metrics_item *)a)->score, y = ((const fed_metrics_item *)b)->score;

    return (x < y) - (x > y);
}

fed_err fed_metrics_binary_exact(const double *score, const int32_t *label, size_t n,
                                 fed_metrics_item *work, fed_metrics_binary *out)
{
    uint64_t P = 0;
    curve c;
    fed_err e;

    assert(score && label && work && out);
    if (n == 0)
        return FED_ERR_INVAL;
    if ((e = check_scores(score, label, n)) != FED_OK)
        return e;
    for (size_t i = 0; i < n; i++) {
        work[i].score = score[i];
        work[i].label = label[i];
        P += (uint64_t)label[i];
    }
    qsort(work, n, sizeof *work, by_score_desc);
    curve_init(&c, P, n - P);
    for (size_t i = 0; i < n;) {
        uint64_t pos = 0, neg = 0;
        size_t j = i;

        for (; j < n && work[j].score == work[i].score; j++)
            work[j].label ? pos++ : neg++;
        curve_step(&c, work[i].score, pos, neg);
        i = j;
    }
    curve_finish(&c, out);
    out->auc_bound = 0.0; /* ties are exact here: the scores are equal */
    return FED_OK;
}

/* ---- the histogram ---- */

int fed_metrics_bin(double s)
{
    const int half = FED_METRICS_BINS / 2;
    double z;
    int b;

    if (!(s > 0.0))
        return 0;
    if (s >= 1.0)
        return FED_METRICS_BINS - 1;
    z = (log(s) - log1p(-s) + FED_METRICS_LOGIT_MAX) * FED_METRICS_BINS_PER_UNIT;
    b = z < 0.0 ? 0 : z >= FED_METRICS_BINS ? FED_METRICS_BINS - 1 : (int)z;
    /* 0.5 is an edge: which side a score is on never depends on rounding */
    if (s >= 0.5 && b < half)
        b = half;
    if (s < 0.5 && b >= half)
        b = half - 1;
    return b;
}

double fed_metrics_bin_threshold(int b)
{
    assert(b >= 0 && b < FED_METRICS_BINS);
    if (b == 0)
        return 0.0;
    return 1.0 / (1.0 + exp(FED_METRICS_LOGIT_MAX - (double)b / FED_METRICS_BINS_PER_UNIT));
}

fed_err fed_metrics_hist_add(fed_metrics_hist *h, const double *score, const int32_t *label,
                             size_t n)
{
    fed_err e;

    assert(h && (n == 0 || (score && label)));
    if ((e = check_scores(score, label, n)) != FED_OK)
        return e;
    for (size_t i = 0; i < n; i++)
        h->n[label[i]][fed_metrics_bin(score[i])]++;
    return FED_OK;
}

void fed_metrics_hist_merge(fed_metrics_hist *dst, const fed_metrics_hist *src)
{
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < FED_METRICS_BINS; b++)
            dst->n[k][b] += src->n[k][b];
}

fed_err fed_metrics_binary_from_hist(const fed_metrics_hist *h, fed_metrics_binary *out)
{
    uint64_t P = 0, N = 0;
    curve c;

    assert(h && out);
    for (int b = 0; b < FED_METRICS_BINS; b++) {
        N += h->n[0][b];
        P += h->n[1][b];
    }
    if (P + N == 0)
        return FED_ERR_INVAL;
    curve_init(&c, P, N);
    for (int b = FED_METRICS_BINS - 1; b >= 0; b--)
        if (h->n[0][b] || h->n[1][b])
            curve_step(&c, fed_metrics_bin_threshold(b), h->n[1][b], h->n[0][b]);
    curve_finish(&c, out);
    return FED_OK;
}

/* ---- multi-class ---- */

void fed_metrics_argmax(const double *prob, size_t n, int k, int32_t *pred)
{
    assert(k >= 1);
    for (size_t i = 0; i < n; i++) {
        const double *p = prob + i * (size_t)k;
        int32_t best = 0;

        for (int j = 1; j < k; j++)
            if (p[j] > p[best])
                best = j;
        pred[i] = best;
    }
}

fed_err fed_metrics_confusion_add(uint64_t *cm, int k, const int32_t *truth, const int32_t *pred,
                                  size_t n)
{
    assert(cm && k >= 1);
    for (size_t i = 0; i < n; i++)
        if (truth[i] < 0 || truth[i] >= k || pred[i] < 0 || pred[i] >= k)
            return FED_ERR_RANGE;
    for (size_t i = 0; i < n; i++)
        cm[(size_t)truth[i] * (size_t)k + (size_t)pred[i]]++;
    return FED_OK;
}

void fed_metrics_multi_from_confusion(const uint64_t *cm, int k, fed_metrics_multi *out,
                                      double *recall)
{
    double f1_sum = 0.0;
    int present = 0;

    assert(cm && k >= 1 && out);
    memset(out, 0, sizeof *out);
    for (int c = 0; c < k; c++) {
        uint64_t tp = cm[(size_t)c * k + c], row = 0, col = 0;

        for (int j = 0; j < k; j++) {
            row += cm[(size_t)c * k + j];
            col += cm[(size_t)j * k + c];
        }
        out->samples += row;
        out->correct += tp;
        if (recall)
            recall[c] = ratio(tp, row);
        if (row + col) { /* 2tp + fp + fn = row + col */
            f1_sum += 2.0 * (double)tp / (double)(row + col);
            present++;
        }
    }
    out->accuracy = ratio(out->correct, out->samples);
    out->macro_f1 = present ? f1_sum / present : NAN;
}

/* ---- regression ---- */

void fed_metrics_reg_add(fed_metrics_reg_stats *s, const double *y, const double *yhat, size_t n)
{
    assert(s);
    for (size_t i = 0; i < n; i++) {
        double d = y[i] - s->mean_y, err = y[i] - yhat[i];

        s->n++;
        s->mean_y += d / (double)s->n;
        s->m2_y += d * (y[i] - s->mean_y);
        s->sse += err * err;
        s->sae += fabs(err);
    }
}

void fed_metrics_reg_merge(fed_metrics_reg_stats *dst, const fed_metrics_reg_stats *src)
{
    uint64_t n = dst->n + src->n;
    double d = src->mean_y - dst->mean_y;

    if (src->n == 0)
        return;
    dst->m2_y += src->m2_y + d * d * (double)dst->n * (double)src->n / (double)n;
    dst->mean_y += d * (double)src->n / (double)n;
    dst->n = n;
    dst->sse += src->sse;
    dst->sae += src->sae;
}

void fed_metrics_reg_finish(const fed_metrics_reg_stats *s, fed_metrics_reg *out)
{
    double n = (double)s->n;

    out->mse = s->n ? s->sse / n : NAN;
    out->mae = s->n ? s->sae / n : NAN;
    out->r2 = s->n && s->m2_y > 0.0 ? 1.0 - s->sse / s->m2_y : NAN;
}

/* ---- named figures ---- */

static const struct {
    const char *name;
    size_t off;
    int binary_only;
} head_fields[FED_METRICS_HEAD_MAX] = {
#define HF(f, b) {#f, offsetof(fed_metrics_head, f), b}
    HF(auc, 1),
    HF(ap, 1),
    HF(sensitivity, 1),
    HF(specificity, 1),
    HF(precision, 1),
    HF(f1, 1),
    HF(youden_threshold, 1),
    HF(youden_sensitivity, 1),
    HF(youden_specificity, 1),
    HF(youden_f1, 1),
    HF(macro_f1, 0),
#undef HF
};

size_t fed_metrics_head_named(const fed_metrics_head *h, fed_metric_value *out)
{
    size_t n = 0;

    assert(h && out);
    if (h->kind == FED_METRICS_NONE)
        return 0;
    for (size_t i = 0; i < FED_METRICS_HEAD_MAX; i++) {
        if (head_fields[i].binary_only && h->kind != FED_METRICS_BINARY)
            continue;
        snprintf(out[n].name, sizeof out[n].name, "%s", head_fields[i].name);
        memcpy(&out[n].value, (const char *)h + head_fields[i].off, sizeof(double));
        n++;
    }
    return n;
}

int fed_metrics_higher_better(const char *name)
{
    static const char *const lower[] = {"loss", "mse", "mae"};
    static const char *const higher[] = {"accuracy", "r2"};
    size_t len;

    if (!strncmp(name, "val.", 4)) /* the pooled site evaluation's */
        name += 4;
    len = strcspn(name, ".");

    for (size_t i = 0; i < sizeof lower / sizeof lower[0]; i++)
        if (!strcmp(name, lower[i]))
            return 0;
    for (size_t i = 0; i < sizeof higher / sizeof higher[0]; i++)
        if (!strcmp(name, higher[i]))
            return 1;
    for (size_t i = 0; i < FED_METRICS_HEAD_MAX; i++)
        if (!strcmp(name, head_fields[i].name))
            return strcmp(name, "youden_threshold") != 0 ? 1 : -1;
    if ((len == 6 && !strncmp(name, "recall", 6)) && name[6] == '.')
        return 1;
    return -1;
}
