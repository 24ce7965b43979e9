/* site_eval.c - evaluation at the sites (--eval-every): a site's
 * statistics packed into integers that add up and read back into the
 * pooled figures (pure); the client's evaluation of the model it received
 * on its validation split; the aggregator's reading of a round's sums
 * (plain: each delta's trailing 16-bit limbs; secure: the integer secure
 * sum) into round_metrics, "val.NAME" pooled and "site.MEMBER.NAME" per
 * consenting site in the clear. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "node/agg_input_impl.h"
#include "node/aggregator_impl.h"
#include "node/secagg_impl.h"
#include "node/site_eval.h"

/* Regression's sums after the first three: y, y^2, squared and absolute
 * errors, 4 limbs each. */
enum { REG_SUMS = 4, REG_LIMBS = 4 };
typedef unsigned __int128 u128;

size_t fed_site_eval_ints(int classes)
{
    size_t k = (size_t)classes;

    if (classes == 1)
        return FED_SITE_EVAL_CONFUSION + REG_SUMS * REG_LIMBS;
    if (classes < 2 || classes > FED_SITE_EVAL_CLASSES_MAX)
        return 0;
    return FED_SITE_EVAL_CONFUSION + k * k + (k == 2 ? 2 * (size_t)FED_METRICS_BINS : 0);
}

/* v (|v| < 2^95) in fixed point 2^-32 as 4 limbs of 32 bits, low first. */
static fed_err put_sum(double v, int64_t *out)
{
    double q = nearbyint(v * 0x1p32);
    u128 x;

    if (!(fabs(q) < 0x1p127))
        return FED_ERR_RANGE;
    x = q < 0 ? (u128)0 - (u128)(-q) : (u128)q;
    for (int j = 0; j < REG_LIMBS; j++)
        out[j] = (int64_t)(uint32_t)(x >> (32 * j));
    return FED_OK;
}

/* Summed limbs back: sum_j S_j 2^(32 j) modulo 2^128, as a signed value. */
static double get_sum(const uint64_t *s)
{
    u128 x = 0;

    for (int j = 0; j < REG_LIMBS; j++)
        x += (u128)s[j] << (32 * j);
    return (x >> 127) ? -(double)((u128)0 - x) * 0x1p-32 : (double)x * 0x1p-32;
}

/* The regression's sums into out (after the first three). */
static fed_err pack_regression(const fed_metrics_reg_stats *rs, int64_t *out)
{
    double n = (double)rs->n;
    const double v[REG_SUMS] = {n * rs->mean_y, rs->m2_y + n * rs->mean_y * rs->mean_y, rs->sse,
                                rs->sae};
    fed_err e = FED_OK;

    for (int i = 0; i < REG_SUMS && e == FED_OK; i++)
        e = isfinite(v[i]) && fabs(v[i]) < 0x1p94 ? put_sum(v[i], out + i * REG_LIMBS)
                                                  : FED_ERR_RANGE;
    return e;
}

fed_err fed_site_eval_pack(const fed_eval_report *r, const fed_metrics_hist *h, int consent,
                           int64_t *out)
{
    size_t k = (size_t)r->classes, cells = k * k;
    double loss = r->st.loss_sum * (double)(1u << FED_SITE_EVAL_LOSS_BITS);

    if (!fed_site_eval_ints(r->classes) || (k == 2 && !h) || (k == 1) != (r->regression != 0))
        return FED_ERR_INVAL;
    if (!(loss >= 0 && loss < 0x1p62)) /* a NaN too */
        return FED_ERR_RANGE;
    out[FED_SITE_EVAL_SAMPLES] = r->st.samples;
    out[FED_SITE_EVAL_CONSENT] = consent ? 1 : 0;
    out[FED_SITE_EVAL_LOSS] = (int64_t)llround(loss);
    if (k == 1)
        return pack_regression(&r->reg_stats, out + FED_SITE_EVAL_CONFUSION);
    for (size_t i = 0; i < cells; i++)
        out[FED_SITE_EVAL_CONFUSION + i] = (int64_t)r->confusion[i];
    if (k == 2)
        memcpy(out + FED_SITE_EVAL_CONFUSION + cells, h->n, sizeof h->n);
    return FED_OK;
}

fed_err fed_site_eval_unpack(const uint64_t *v, fed_eval_report *r, fed_metrics_hist *h)
{
    size_t k = (size_t)r->classes, cells = k * k;
    uint64_t n = v[FED_SITE_EVAL_SAMPLES], cm = 0, hn = 0, correct = 0;

    if (!fed_site_eval_ints(r->classes))
        return FED_ERR_INVAL;
    if (n == 0)
        return FED_ERR_INVAL;
    if (k == 1) { /* regression: the moments from the pooled sums */
        const uint64_t *s = v + FED_SITE_EVAL_CONFUSION;
        double sy = get_sum(s), syy = get_sum(s + REG_LIMBS);
        fed_metrics_reg_stats rs = {.n = n, .mean_y = sy / (double)n,
                                    .m2_y = fmax(0, syy - sy * sy / (double)n),
                                    .sse = get_sum(s + 2 * REG_LIMBS),
                                    .sae = get_sum(s + 3 * REG_LIMBS)};

        if (n > (uint64_t)LONG_MAX || rs.sse < 0 || rs.sae < 0)
            return FED_ERR_BAD_VALUE;
        memset(&r->st, 0, sizeof r->st);
        r->st.samples = (long)n;
        r->st.loss_sum = (double)v[FED_SITE_EVAL_LOSS] / (double)(1u << FED_SITE_EVAL_LOSS_BITS);
        r->regression = 1;
        r->has_binary = 0;
        r->reg_stats = rs;
        fed_metrics_reg_finish(&rs, &r->reg);
        return FED_OK;
    }
    for (size_t i = 0; i < cells; i++) {
        r->confusion[i] = v[FED_SITE_EVAL_CONFUSION + i];
        cm += r->confusion[i];
    }
    for (size_t c = 0; c < k; c++)
        correct += r->confusion[c * k + c];
    if (cm != n || n > (uint64_t)LONG_MAX)
        return FED_ERR_BAD_VALUE;
    memset(&r->st, 0, sizeof r->st);
    r->st.samples = (long)n;
    r->st.correct = (long)correct;
    r->st.loss_sum = (double)v[FED_SITE_EVAL_LOSS] / (double)(1u << FED_SITE_EVAL_LOSS_BITS);
    r->regression = 0;
    fed_metrics_multi_from_confusion(r->confusion, (int)k, &r->multi, r->recall);
    r->has_binary = k == 2;
    if (k != 2)
        return FED_OK;
    memcpy(h->n, v + FED_SITE_EVAL_CONFUSION + cells, sizeof h->n);
    for (int c = 0; c < 2; c++)
        for (int b = 0; b < FED_METRICS_BINS; b++)
            hn += h->n[c][b];
    if (hn != n)
        return FED_ERR_BAD_VALUE;
    return fed_metrics_binary_from_hist(h, &r->bin);
}

/* ---- the client: its evaluation, in the training job ---- */

fed_err fed_node_site_eval_run(fed_model *m, const fed_dataset *val, int consent, int64_t *out)
{
    int k = fed_model_input(m).classes;
    fed_eval_report *r = NULL;
    fed_metrics_hist *h = NULL;
    fed_err e;

    memset(out, 0, fed_site_eval_ints(k) * sizeof *out);
    if (!val || !val->n) /* nothing to evaluate on: an empty evaluation */
        return FED_OK;
    if ((e = fed_eval_report_new(k, &r)) != FED_OK)
        goto out;
    if (k == 2 && !(h = fed_calloc(1, sizeof *h))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    r->hist = h;
    if ((e = fed_train_evaluate_report(m, val, r)) == FED_OK)
        e = fed_site_eval_pack(r, h, consent, out);
out:
    fed_eval_report_free(r);
    fed_free(h);
    return e;
}

/* ---- the aggregator ---- */

uint32_t fed_node_site_eval_cfg_ints(const fed_node_config *c)
{
    return c->agg.eval_every ? (uint32_t)fed_site_eval_ints(c->shape.classes) : 0;
}

fed_err fed_node_agg_site_eval_check(const fed_node *n)
{
    const node_agg *a = n->agg;
    const char *why = NULL;

    if (!n->cfg.agg.eval_every)
        return FED_OK;
    if (a->dp || n->cfg.dp.require_sgd)
        why = "its statistics (confusion counts, score histograms) are a release that no "
              "noise covers, and the DP requirement (--require-dp-sgd, DP-FedAvg) would "
              "not account for it: drop --eval-every, or the requirement";
    else if (!fed_site_eval_ints(n->cfg.shape.classes) ||
             (n->cfg.shape.classes == 1) != (fed_model_regression(a->model) != 0))
        why = "it needs a regression (--task regression) or a classifier of 2 to 256 classes";
    else if (fed_node_agg_is_async(n))
        why = "it needs synchronous rounds: use --mode sync";
    else if (!a->sa && a->codec.id != FED_CODEC_F32)
        why = "in the clear the statistics travel after the delta and need --codec f32 "
              "(or --secagg)";
    if (!why)
        return FED_OK;
    fed_log(FED_LOG_ERROR, "aggregator: site evaluation (--eval-every %u) refused: %s",
            n->cfg.agg.eval_every, why);
    return FED_ERR_UNSUPPORTED;
}

size_t fed_node_ints_words(const fed_node_config *c, uint64_t nints)
{
    uint32_t bits = c->secagg.on && c->secagg.bits ? c->secagg.bits : FED_AGG_PLAIN_INT_BITS;

    if (bits > FED_AGG_PLAIN_INT_BITS)
        bits = FED_AGG_PLAIN_INT_BITS;
    return (size_t)nints * fedi_agg_int_limbs(bits);
}

size_t fed_node_site_eval_words(const fed_node_config *c)
{
    return fed_node_ints_words(c, fed_node_site_eval_cfg_ints(c));
}

uint32_t fed_node_agg_site_eval_ints(const fed_node *n)
{
    uint32_t every = n->cfg.agg.eval_every;

    if (!every || fedi_node_agg_stats_pass(n) || (n->round + 1) % every != 0)
        return 0;
    return fed_node_site_eval_cfg_ints(&n->cfg);
}

void fed_node_agg_site_eval_settings(const fed_node *n, fed_wire_settings *set)
{
    if (!n->cfg.agg.eval_every)
        return;
    set->eval_every = n->cfg.agg.eval_every;
    set->eval_classes = (uint32_t)n->cfg.shape.classes;
}

/* The plain round's evaluation vector: its integers as 16-bit limbs, one
 * float each, after the delta. */
static size_t plain_words(uint32_t nints, agg_segment *seg)
{
    *seg = (agg_segment){.name = "evaluation", .len = nints, .rule = AGG_WEIGHT_SUM,
                         .enc = AGG_ENC_INT64};
    return fedi_agg_seg_words(seg, 1, FED_AGG_PLAIN_INT_BITS);
}

size_t fed_node_site_eval_plain_words(uint32_t nints)
{
    agg_segment seg;

    return nints ? plain_words(nints, &seg) : 0;
}

fed_err fed_node_site_eval_plain_put(const int64_t *ix, uint32_t nints, float *out)
{
    agg_segment seg;
    size_t words = plain_words(nints, &seg);
    uint32_t *limbs = fed_malloc(words * sizeof *limbs);
    fed_err e;

    if (!limbs)
        return FED_ERR_NOMEM;
    if ((e = fedi_agg_seg_quantize(&seg, 1, FED_AGG_PLAIN_INT_BITS, NULL, ix, NULL, limbs)) ==
        FED_OK)
        for (size_t w = 0; w < words; w++)
            out[w] = (float)limbs[w]; /* < 2^16: exact */
    fed_free(limbs);
    return e;
}

/* The figures of v (summed vectors) by name, each as prefix NAME into the
 * round's metrics (the caller's transaction). */
static fed_err put_figures(fed_node *n, uint64_t round, const char *prefix, const uint64_t *v,
                           fed_eval_report *r, fed_metrics_hist *h, fed_metric_value *named)
{
    char name[96];
    size_t k;
    fed_err e;

    if ((e = fed_site_eval_unpack(v, r, h)) != FED_OK)
        return e;
    k = fed_eval_report_named(r, named);
    snprintf(named[k].name, sizeof named[k].name, "samples");
    named[k++].value = (double)v[FED_SITE_EVAL_SAMPLES];
    if (r->has_binary) {
        snprintf(named[k].name, sizeof named[k].name, "auc_bound");
        named[k++].value = r->bin.auc_bound;
    }
    for (size_t i = 0; i < k && e == FED_OK; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, named[i].name);
        e = fed_store_put_metric(n->cfg.store, round, name, named[i].value);
    }
    return e;
}

/* Part i's vector from its delta's trailing limbs into v (nints; limbs:
 * scratch of the plain words); 0 where it has none or a bad one. */
static int part_vector(fed_node *n, size_t i, uint32_t nints, uint32_t *limbs, uint64_t *v,
                       int warn)
{
    node_agg *a = n->agg;
    const agg_part *p = &a->parts[i];
    agg_segment seg;
    size_t words = plain_words(nints, &seg), bad;
    size_t at = a->nparams + a->layout.extra; /* after the flat buffer and the extra segment */

    if (!p->got || !p->delta)
        return 0;
    if ((bad = fedi_node_agg_limbs_bad(p->delta + at, words)) < words) {
        if (warn)
            fed_log(FED_LOG_WARN, "aggregator: site evaluation: a client's statistics hold %g "
                    "at %zu, not a 16-bit limb; left out", (double)p->delta[at + bad],
                    bad);
        return 0;
    }
    for (size_t w = 0; w < words; w++)
        limbs[w] = (uint32_t)p->delta[at + w];
    return fedi_agg_seg_dequantize(&seg, 1, FED_AGG_PLAIN_INT_BITS, limbs, 1, NULL, v) == FED_OK;
}

/* The parts' vectors summed into tot (v: scratch of nints); how many. */
static uint32_t plain_vectors(fed_node *n, uint32_t nints, uint32_t *limbs, uint64_t *v,
                              uint64_t *tot)
{
    uint32_t m = 0;

    for (size_t i = 0; i < n->agg->nparts; i++) {
        if (!part_vector(n, i, nints, limbs, v, 1))
            continue;
        for (uint32_t j = 0; j < nints; j++)
            tot[j] += v[j];
        m++;
    }
    return m;
}

/* A part's name in a metric's: the member's name, else its key's first
 * bytes in hex. */
static void part_name(const fed_node *n, const uint8_t key[32], char *out, size_t cap)
{
    const char *name = n->cfg.allow ? fed_crypto_allow_find(n->cfg.allow, key) : NULL;

    if (name)
        snprintf(out, cap, "%s", name);
    else
        snprintf(out, cap, "%02x%02x%02x%02x", key[0], key[1], key[2], key[3]);
}

fed_err fed_node_agg_site_eval_close(fed_node *n)
{
    node_agg *a = n->agg;
    uint32_t nints = fed_node_agg_site_eval_ints(n), m = 0;
    uint64_t round = n->round; /* the model the sites evaluated */
    uint64_t *tot = NULL, *iv = NULL; /* iv: one part's vector (plain) */
    uint32_t *limbs = NULL;
    agg_segment seg;
    fed_eval_report *r = NULL;
    fed_metrics_hist *h = NULL;
    fed_metric_value *named = NULL;
    fed_store *st = n->cfg.store;
    fed_err e;

    memset(&a->site, 0, sizeof a->site);
    a->site_judge = 0;
    if (!nints)
        return FED_OK;
    if (a->sa && fedi_node_sa_agg_void(a->sa))
        return FED_OK; /* no sums: the round measured nothing */
    if ((e = fed_eval_report_new(n->cfg.shape.classes, &r)) != FED_OK)
        goto out;
    e = FED_ERR_NOMEM;
    if (!(tot = fed_calloc(nints, sizeof *tot)) || !(h = fed_malloc(sizeof *h)) ||
        !(named = fed_malloc((fed_eval_report_named_max(r) + 2) * sizeof *named)))
        goto out;
    if (a->sa) {
        size_t len = 0;
        const uint64_t *isum = fedi_node_sa_agg_ints(a->sa, &len, &m);

        if (len != (size_t)n->cfg.secagg.ints + nints) {
            e = FED_ERR_INTERNAL;
            goto out;
        }
        memcpy(tot, isum + n->cfg.secagg.ints, nints * sizeof *tot);
    } else {
        if (!(iv = fed_calloc(nints, sizeof *iv)) ||
            !(limbs = fed_malloc(plain_words(nints, &seg) * sizeof *limbs)))
            goto out;
        m = plain_vectors(n, nints, limbs, iv, tot);
    }
    if ((e = fed_store_begin(st)) != FED_OK) {
        fed_log(FED_LOG_WARN, "aggregator: round %llu's site evaluation is not recorded: %s",
                (unsigned long long)round, fed_strerror(e));
        e = FED_OK;
        goto out;
    }
    e = put_figures(n, round, "val.", tot, r, h, named);
    if (e == FED_ERR_INVAL) {
        fed_log(FED_LOG_WARN, "aggregator: site evaluation of round %llu's model: no site "
                "evaluated a sample (--val-fraction or --val-data at the clients)",
                (unsigned long long)round);
    } else if (e != FED_OK) {
        fed_log(FED_LOG_WARN, "aggregator: site evaluation of round %llu's model: the sums "
                "of %u sites do not agree (a site sent a bad evaluation): %s",
                (unsigned long long)round, m, fed_strerror(e));
    } else {
        fed_log(FED_LOG_INFO, "aggregator: round %llu's model at %u sites: %llu samples, "
                "accuracy %.4f%s", (unsigned long long)round, m,
                (unsigned long long)tot[FED_SITE_EVAL_SAMPLES], r->multi.accuracy,
                a->sa ? " (pooled through secure aggregation)" : "");
        if (r->has_binary)
            fed_log(FED_LOG_INFO, "aggregator: round %llu's model at the sites: AUC %.4f "
                    "(within %.4f)", (unsigned long long)round, r->bin.auc, r->bin.auc_bound);
        a->site.round = round;
        a->site.samples = (double)tot[FED_SITE_EVAL_SAMPLES];
        a->site.accuracy = r->multi.accuracy;
        a->site.loss = r->st.loss_sum / (double)r->st.samples;
        a->site.auc_bound = r->has_binary ? r->bin.auc_bound : NAN;
        fed_eval_report_head(r, &a->site.head);
    }
    if (e == FED_OK || e == FED_ERR_INVAL || e == FED_ERR_BAD_VALUE)
        e = n->cfg.agg.best_metric[0]
                ? fed_store_put_meta_text(st, "best_metric", n->cfg.agg.best_metric)
                : FED_OK;
    for (size_t i = 0; !a->sa && e == FED_OK && i < a->nparts; i++) {
        const uint64_t *v = iv;
        char prefix[80], who[64];
        fed_err pe;

        if (!part_vector(n, i, nints, limbs, iv, 0) || v[FED_SITE_EVAL_CONSENT] != 1 ||
            !v[FED_SITE_EVAL_SAMPLES])
            continue;
        part_name(n, a->parts[i].key, who, sizeof who);
        snprintf(prefix, sizeof prefix, "site.%s.", who);
        if ((pe = put_figures(n, round, prefix, v, r, h, named)) == FED_ERR_BAD_VALUE ||
            pe == FED_ERR_INVAL)
            fed_log(FED_LOG_WARN, "aggregator: site %s's evaluation does not add up; its "
                    "figures are not recorded", who);
        else
            e = pe;
    }
    if (e == FED_OK)
        e = fed_store_commit(st);
    if (e != FED_OK) {
        fed_store_rollback(st);
        fed_log(FED_LOG_WARN, "aggregator: round %llu's site evaluation is not recorded: %s",
                (unsigned long long)round, fed_strerror(e));
        e = FED_OK; /* the round itself goes on */
    } else {
        a->site_judge = round + 1; /* judged once the round commits (aggregator.c) */
    }
out:
    fed_eval_report_free(r);
    fed_free(tot);
    fed_free(iv);
    fed_free(limbs);
    fed_free(h);
    fed_free(named);
    return e;
}
