/* agg_stats.c - the shared-statistics pass (federated analytics): an
 * aggregator with cfg.data.stats_cols runs round 1 as the pass when no
 * checkpoint holds the statistics. Each sampled client trains nothing and
 * contributes its columns' integers (model/colstats.h): in the clear as a
 * DELTA of 16-bit limbs, one float each (fedi_node_stats_job_run), or inside
 * its masked input (the integer secure sum). The totals are read back into
 * the pooled mean, std and missing rate, kept in the checkpoint
 * (input.stats) and sent in every later MODEL (field 14, with each
 * column's missing rate). With DP statistics (cfg.data.stats_lo/hi, the
 * declared --feature-bounds) the pass's MODEL carries the bounds and the
 * noise multiplier: each client clips, noises and charges its release, and
 * the noisy totals are read back clamped (fed_colstats_decode_dp). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "model/colstats.h"
#include "node/agg_input_impl.h"
#include "node/aggregator_impl.h"
#include "node/secagg_impl.h"

#define SEC_COL_BYTES 32 /* mean, std, missing rate f64, count u64 */

struct agg_stats {
    uint32_t cols;
    int have;          /* known: the pass committed, or a checkpoint held them */
    int pass;          /* the running round is the pass */
    int found;         /* the pass's close read its totals into col, its
                          commit pending (a retry commits these, not a
                          training round) */
    fed_colstat *col;  /* (cols) */
    uint8_t *wire;     /* (cols x FED_WIRE_STATS_COL_BYTES) mean, std, missing
                          rate: MODEL field 14 */
    uint8_t *sec;      /* (cols x SEC_COL_BYTES) the checkpoint's section */
    uint8_t *bounds;   /* (cols x FED_WIRE_STATS_BOUND_BYTES) DP: the pass's
                          MODEL's bounds; NULL: exact totals */
};

/* The minimum count in values: --stats-min-count records (an image's
 * pixels a channel each). */
static uint64_t min_values(const fed_node *n)
{
    uint32_t per = n->cfg.data.stats_per_record;

    return n->cfg.data.stats_min_count * (per > 1 ? per : 1);
}

/* The config's DP statistics, or NULL when the totals are exact. */
static const fed_colstats_dp *dp_of(const fed_node *n, fed_colstats_dp *dp)
{
    const fed_node_data_config *d = &n->cfg.data;

    if (!d->stats_lo)
        return NULL;
    *dp = (fed_colstats_dp){d->stats_lo, d->stats_hi, d->stats_noise, d->stats_per_record};
    return dp;
}

fed_err fedi_node_agg_stats_new(fed_node *n)
{
    node_agg *a = n->agg;
    uint32_t cols = n->cfg.data.stats_cols;
    agg_stats *s;
    fed_colstats_dp dpv;
    const fed_colstats_dp *dp = dp_of(n, &dpv);
    char why[160];

    if (!cols)
        return FED_OK;
    if (dp && fed_colstats_dp_check(dp, cols, why, sizeof why) != FED_OK) {
        fed_log(FED_LOG_ERROR, "aggregator: the shared statistics' DP bounds: %s", why);
        return FED_ERR_RANGE;
    }
    if (cols > FED_WIRE_STATS_COLS_MAX) {
        fed_log(FED_LOG_ERROR, "aggregator: shared statistics over %u columns: at most %u",
                cols, FED_WIRE_STATS_COLS_MAX);
        return FED_ERR_RANGE;
    }
    if (!(s = fed_calloc(1, sizeof *s)))
        return FED_ERR_NOMEM;
    s->cols = cols;
    s->col = fed_calloc(cols, sizeof *s->col);
    s->wire = fed_calloc(cols, FED_WIRE_STATS_COL_BYTES);
    s->sec = fed_calloc(cols, SEC_COL_BYTES);
    a->stats = s;
    if (dp && (s->bounds = fed_calloc(cols, FED_WIRE_STATS_BOUND_BYTES)))
        for (uint32_t j = 0; j < cols; j++) {
            fed_put_f64le(s->bounds + FED_WIRE_STATS_BOUND_BYTES * (size_t)j, dp->lo[j]);
            fed_put_f64le(s->bounds + FED_WIRE_STATS_BOUND_BYTES * (size_t)j + 8, dp->hi[j]);
        }
    if (!s->col || !s->wire || !s->sec || (dp && !s->bounds))
        return FED_ERR_NOMEM; /* freed with the role */
    return FED_OK;
}

void fedi_node_agg_stats_free(fed_node *n)
{
    agg_stats *s = n->agg ? n->agg->stats : NULL;

    if (!s)
        return;
    fed_free(s->col);
    fed_free(s->wire);
    fed_free(s->sec);
    fed_free(s->bounds);
    fed_free(s);
    n->agg->stats = NULL;
}

/* The known statistics into the MODEL's and the checkpoint's forms. */
static void encode(agg_stats *s)
{
    for (uint32_t j = 0; j < s->cols; j++) {
        const fed_colstat *c = &s->col[j];
        uint8_t *w = s->wire + FED_WIRE_STATS_COL_BYTES * (size_t)j;
        uint8_t *p = s->sec + SEC_COL_BYTES * (size_t)j;

        fed_put_f64le(w, c->mean);
        fed_put_f64le(w + 8, c->std);
        fed_put_f64le(w + 16, c->missing_rate);
        fed_put_f64le(p, c->mean);
        fed_put_f64le(p + 8, c->std);
        fed_put_f64le(p + 16, c->missing_rate);
        fed_put_u64le(p + 24, c->count);
    }
}

/* The statistics the pass found, and what they standardize: the
 * aggregator's own test set (its evaluation then scores as the clients'
 * standardized data does). */
static fed_err known(fed_node *n)
{
    agg_stats *s = n->agg->stats;
    double *mean = fed_malloc(s->cols * sizeof *mean), *sd = fed_malloc(s->cols * sizeof *sd);
    const fed_dataset *test = NULL;
    fed_err e = FED_OK;

    encode(s);
    s->have = 1;
    s->pass = 0;
    s->found = 0;
    if (!mean || !sd) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    for (uint32_t j = 0; j < s->cols; j++) {
        mean[j] = s->col[j].mean;
        sd[j] = s->col[j].std;
    }
    if (n->cfg.data.test && n->cfg.data.restandardize) {
        e = n->cfg.data.restandardize(n->cfg.data.stats_ctx, mean, sd, s->cols, &test);
        if (e == FED_OK)
            n->cfg.data.test = test;
        else
            fed_log(FED_LOG_ERROR, "aggregator: standardizing its test data with the shared "
                    "statistics failed: %s", fed_strerror(e));
    }
out:
    fed_free(mean);
    fed_free(sd);
    return e;
}

fed_err fedi_node_agg_stats_resume(fed_node *n, const fed_store_ckpt *ck)
{
    agg_stats *s = n->agg->stats;
    const fed_store_section *sec;

    if (!s || !ck || !(sec = fed_store_ckpt_find(ck, FED_CKPT_SEC_STATS)))
        return FED_OK;
    if (sec->len != (size_t)s->cols * SEC_COL_BYTES) {
        fed_log(FED_LOG_ERROR, "aggregator: the checkpoint's shared statistics hold %zu "
                "columns, the federation %u", sec->len / SEC_COL_BYTES, s->cols);
        return FED_ERR_SHAPE;
    }
    for (uint32_t j = 0; j < s->cols; j++) {
        const uint8_t *p = (const uint8_t *)sec->data + SEC_COL_BYTES * (size_t)j;
        fed_colstat *c = &s->col[j];

        c->mean = fed_get_f64le(p);
        c->std = fed_get_f64le(p + 8);
        c->missing_rate = fed_get_f64le(p + 16);
        c->count = fed_get_u64le(p + 24);
        if (!isfinite(c->mean) || !isfinite(c->std) || !(c->std > 0))
            return FED_ERR_FORMAT;
    }
    return known(n);
}

void fedi_node_agg_stats_begin(fed_node *n)
{
    agg_stats *s = n->agg->stats;

    if (s) {
        s->pass = !s->have;
        s->found = 0; /* a pass tried again (its commit failed) reads its totals anew */
    }
}

int fedi_node_agg_stats_known(const fed_node *n)
{
    return n->agg->stats && n->agg->stats->have;
}

int fedi_node_agg_stats_pass(const fed_node *n)
{
    return n->agg->stats && n->agg->stats->pass;
}

uint32_t fedi_node_agg_stats_ints(const fed_node *n)
{
    return fedi_node_agg_stats_pass(n) ? n->agg->stats->cols * FED_COLSTATS_INTS : 0;
}

/* The plain pass's DELTA: each of cols x FED_COLSTATS_INTS integers as
 * FED_AGG_PLAIN_INT_BITS-bit limbs, one float each. */
static size_t plain_words(uint32_t cols, agg_segment *seg)
{
    fedi_agg_seg_stats(cols, seg);
    return fedi_agg_seg_words(seg, 1, FED_AGG_PLAIN_INT_BITS);
}

size_t fedi_node_agg_stats_plain_entries(const fed_node *n)
{
    agg_segment seg;

    return fedi_node_agg_stats_pass(n) ? plain_words(n->agg->stats->cols, &seg) : 0;
}

void fedi_node_agg_stats_settings(const fed_node *n, uint64_t round, fed_wire_settings *set)
{
    const agg_stats *s = n->agg->stats;

    if (!s)
        return;
    set->stats_cols = s->cols;
    if (s->pass && s->found && round > n->round + 1) { /* sealed ahead at the pass's commit */
        set->stats_mode = FED_WIRE_STATS_APPLY;
        set->stats = s->wire;
    } else if (s->pass) {
        set->stats_mode = FED_WIRE_STATS_PASS;
        set->stats_min_count = n->cfg.data.stats_min_count;
        if (s->bounds) {
            set->stats_noise = n->cfg.data.stats_noise;
            set->stats_bounds = s->bounds;
        }
    } else if (s->have) {
        set->stats_mode = FED_WIRE_STATS_APPLY;
        set->stats = s->wire;
    } else {
        set->stats_cols = 0;
    }
}

int fedi_node_agg_stats_section(const fed_node *n, fed_store_section *out)
{
    const agg_stats *s = n->agg->stats;

    if (!s || !(s->have || s->found)) /* (found: the pass's own commit) */
        return 0;
    *out = (fed_store_section){FED_CKPT_SEC_STATS, s->sec, (size_t)s->cols * SEC_COL_BYTES};
    return 1;
}

size_t fedi_node_agg_limbs_bad(const float *v, size_t words)
{
    for (size_t w = 0; w < words; w++)
        if (!(v[w] >= 0 && v[w] <= 65535 && v[w] == floorf(v[w])))
            return w;
    return words;
}

/* The plain pass's totals: each delta's floats are 16-bit limbs (a value
 * that is not one is a bad contribution), summed as words, joined. */
static fed_err plain_totals(fed_node *n, uint64_t *tot, uint32_t *m)
{
    node_agg *a = n->agg;
    agg_segment seg;
    size_t words = plain_words(a->stats->cols, &seg);
    uint32_t *sum = fed_calloc(words, sizeof *sum);
    fed_err e;

    *m = 0;
    if (!sum)
        return FED_ERR_NOMEM;
    for (size_t i = 0; i < a->nparts; i++) {
        const agg_part *p = &a->parts[i];
        size_t bad;

        if (!p->got)
            continue;
        if ((bad = fedi_node_agg_limbs_bad(p->delta, words)) < words) {
            fed_log(FED_LOG_WARN, "aggregator: the statistics pass: a client's contribution "
                    "holds %g at %zu, not a 16-bit limb; left out", (double)p->delta[bad], bad);
            continue;
        }
        for (size_t w = 0; w < words; w++)
            sum[w] += (uint32_t)p->delta[w];
        ++*m;
    }
    e = fedi_agg_seg_dequantize(&seg, 1, FED_AGG_PLAIN_INT_BITS, sum, *m, NULL, tot);
    fed_free(sum);
    return e;
}

fed_err fedi_node_agg_stats_close(fed_node *n)
{
    node_agg *a = n->agg;
    agg_stats *s = a->stats;
    size_t nints = (size_t)s->cols * FED_COLSTATS_INTS;
    uint64_t *tot = NULL;
    uint32_t m = 0;
    fed_colstats_dp dpv;
    const fed_colstats_dp *dp = dp_of(n, &dpv);
    fed_err e;

    if (s->found) /* a secure pass's commit tried again: its totals are read */
        return FED_OK;
    if (a->sa && fedi_node_sa_agg_void(a->sa)) { /* failed closed: the next round tries again */
        fed_log(FED_LOG_WARN, "aggregator: the statistics pass found nothing (its secure sum "
                "failed); round %llu runs it again", (unsigned long long)(n->round + 2));
        return FED_OK;
    }
    if (a->sa) {
        size_t len = 0;
        const uint64_t *isum = fedi_node_sa_agg_ints(a->sa, &len, &m);

        if (len != nints)
            return FED_ERR_INTERNAL;
        tot = (uint64_t *)isum;
        e = FED_OK;
    } else {
        if (!(tot = fed_calloc(nints, sizeof *tot)))
            return FED_ERR_NOMEM;
        e = plain_totals(n, tot, &m);
    }
    if (e == FED_OK && m == 0) {
        fed_log(FED_LOG_WARN, "aggregator: the statistics pass: no client contributed; round "
                "%llu runs it again", (unsigned long long)(n->round + 2));
    } else if (e == FED_OK &&
               (e = dp ? fed_colstats_decode_dp(tot, s->cols, min_values(n), dp, s->col)
                       : fed_colstats_decode(tot, s->cols, min_values(n), s->col)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "aggregator: the statistics pass: the totals are not valid "
                "(a client sent a bad contribution): %s", fed_strerror(e));
    } else if (e == FED_OK) {
        uint32_t sup = 0;

        for (uint32_t j = 0; j < s->cols; j++) {
            const fed_colstat *c = &s->col[j];

            sup += (uint32_t)c->suppressed;
            fed_log(FED_LOG_INFO, "aggregator: shared statistics: column %u: n %llu, mean %.10g, "
                    "std %.10g, missing %.4f%s", j + 1, (unsigned long long)c->count, c->mean,
                    c->std, c->missing_rate, c->suppressed ? " (suppressed: under the minimum "
                                                             "count)" : "");
        }
        fed_log(FED_LOG_INFO, "aggregator: shared statistics of %u columns from %u clients "
                "(%u suppressed)%s%s", s->cols, m, sup, a->sa ? " through secure aggregation" : "",
                dp ? ", each site's release clipped and noised (DP statistics)" : "");
        encode(s); /* the commit's checkpoint and the MODELs sealed ahead carry them */
        s->found = 1;
    }
    if (!a->sa)
        fed_free(tot);
    return e;
}

fed_err fedi_node_agg_stats_committed(fed_node *n)
{
    agg_stats *s = n->agg->stats;

    return s && s->pass && s->found ? known(n) : FED_OK;
}

/* ---- the client's side: its contribution as the pass's DELTA ---- */

void fedi_node_stats_job_run(fed_job *job)
{
    node_train_job *j = (node_train_job *)job;
    agg_segment seg;
    size_t words = plain_words(j->stats_cols, &seg);
    uint32_t *limbs = fed_malloc(words * sizeof *limbs);
    float *f = fed_malloc(words * sizeof *f);
    fed_codec f32 = {.id = FED_CODEC_F32};

    j->loss = NAN;
    j->samples = j->shard_n ? j->shard_n : 1;
    j->err = limbs && f ? FED_OK : FED_ERR_NOMEM;
    if (j->err == FED_OK)
        j->err = fedi_agg_seg_quantize(&seg, 1, FED_AGG_PLAIN_INT_BITS, NULL, j->stats, NULL, limbs);
    if (j->err == FED_OK) {
        for (size_t w = 0; w < words; w++)
            f[w] = (float)limbs[w]; /* < 2^16: exact */
        j->err = fedi_node_encode_vec(&f32, f, words, NULL, &j->vec, &j->cap_vec, &j->vec_len);
    }
    fed_free(limbs);
    fed_free(f);
}
