/* partition.c - the seeded partitioners ("iid", "dirichlet:ALPHA", "shards:N",
 * and NIID-Bench's "niid-dirichlet:BETA", "labels:K", "quantity:BETA",
 * "noise:SIGMA", whose split is iid and whose noise std it says) that
 * give node `shard` of `k` its list of sample indices. Every node computes
 * the whole split from (scheme, k, seed) alone and keeps its own part, so all
 * nodes agree without talking. Owns only the index arrays it returns; never
 * touches the dataset's samples and never draws randomness from anywhere but
 * RNGs seeded from the caller's seed. */
#include "model/data.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/opt.h"

#define SCHEMES                                                                               \
    "iid, dirichlet:ALPHA, shards:N, niid-dirichlet:BETA, labels:K, quantity:BETA or "       \
    "noise:SIGMA"
/* NIID-Bench's rules: every party holds at least this many samples (the
 * Dirichlet splits are redrawn until it does), and gives up after this many
 * draws. */
#define NIID_MIN_SIZE 10
#define NIID_MAX_DRAWS 1000

/* Stream numbers for the RNGs derived from the partition seed. */
enum { STREAM_SPLIT = 0, STREAM_NODE_ORDER = 1, STREAM_VAL = 2 };

static fed_err parse_scheme(const char *scheme, fed_data_scheme *out)
{
    const char *arg;
    char *end = NULL;

    memset(out, 0, sizeof *out);
    if (!scheme) {
        fed_log(FED_LOG_ERROR, "partition: no scheme given (want " SCHEMES ")");
        return FED_ERR_BAD_VALUE;
    }
    if (strcmp(scheme, "iid") == 0) {
        out->kind = FED_DATA_IID;
        return FED_OK;
    }
    if (strncmp(scheme, "dirichlet:", 10) == 0) {
        arg = scheme + 10;
        errno = 0;
        out->alpha = fed_strtod_decimal(arg, &end);
        if (*arg == '\0' || *arg == ' ' || *end != '\0' || errno != 0 || !isfinite(out->alpha) ||
            out->alpha <= 0.0) {
            fed_log(FED_LOG_ERROR, "partition: bad scheme '%s': ALPHA must be a positive number",
                    scheme);
            return FED_ERR_BAD_VALUE;
        }
        out->kind = FED_DATA_DIRICHLET;
        return FED_OK;
    }
    if (strncmp(scheme, "noise:", 6) == 0) {
        arg = scheme + 6;
        errno = 0;
        out->sigma = fed_strtod_decimal(arg, &end);
        if (*arg == '\0' || *end != '\0' || errno != 0 || !isfinite(out->sigma) ||
            out->sigma < 0.0 || out->sigma > 1e3) {
            fed_log(FED_LOG_ERROR, "partition: bad scheme '%s': SIGMA must be a number in "
                    "[0, 1000]", scheme);
            return FED_ERR_BAD_VALUE;
        }
        out->kind = FED_DATA_NOISE;
        return FED_OK;
    }
    if (strncmp(scheme, "niid-dirichlet:", 15) == 0 || strncmp(scheme, "quantity:", 9) == 0) {
        int niid = scheme[0] == 'n';

        arg = scheme + (niid ? 15 : 9);
        errno = 0;
        out->alpha = fed_strtod_decimal(arg, &end);
        if (*arg == '\0' || *end != '\0' || errno != 0 || !isfinite(out->alpha) ||
            out->alpha <= 0.0) {
            fed_log(FED_LOG_ERROR, "partition: bad scheme '%s': BETA must be a positive number",
                    scheme);
            return FED_ERR_BAD_VALUE;
        }
        out->kind = niid ? FED_DATA_NIID_DIRICHLET : FED_DATA_QUANTITY;
        return FED_OK;
    }
    if (strncmp(scheme, "labels:", 7) == 0) {
        long v;

        arg = scheme + 7;
        errno = 0;
        v = strtol(arg, &end, 10);
        if (*arg < '0' || *arg > '9' || *end != '\0' || errno != 0 || v < 1 || v > 65536) {
            fed_log(FED_LOG_ERROR,
                    "partition: bad scheme '%s': K must be an integer in [1, 65536]", scheme);
            return FED_ERR_BAD_VALUE;
        }
        out->kind = FED_DATA_LABELS;
        out->labels = (int)v;
        return FED_OK;
    }
    if (strncmp(scheme, "shards:", 7) == 0) {
        long v;

        arg = scheme + 7;
        errno = 0;
        v = strtol(arg, &end, 10);
        if (*arg < '0' || *arg > '9' || *end != '\0' || errno != 0 || v < 1 || v > (1L << 20)) {
            fed_log(FED_LOG_ERROR,
                    "partition: bad scheme '%s': N must be an integer in [1, 1048576]", scheme);
            return FED_ERR_BAD_VALUE;
        }
        out->kind = FED_DATA_SHARDS;
        out->shards = (int)v;
        return FED_OK;
    }
    fed_log(FED_LOG_ERROR, "partition: unknown scheme '%s' (want " SCHEMES ")", scheme);
    return FED_ERR_BAD_VALUE;
}

fed_err fed_data_parse_scheme(const char *scheme, fed_data_scheme *out)
{
    return parse_scheme(scheme, out);
}

/* shard of k in range, else FED_ERR_RANGE (logged). */
static fed_err shard_ok(int shard, int k)
{
    if (k < 1 || shard < 0 || shard >= k) {
        fed_log(FED_LOG_ERROR, "partition: shard %d/%d out of range (want 0 <= I < K)", shard, k);
        return FED_ERR_RANGE;
    }
    return FED_OK;
}

fed_err fed_data_partition_noise(const char *scheme, int shard, int k, double *std)
{
    fed_data_scheme s;
    fed_err err;

    *std = 0;
    if ((err = parse_scheme(scheme, &s)) != FED_OK || (err = shard_ok(shard, k)) != FED_OK)
        return err;
    if (s.kind == FED_DATA_NOISE && k > 1)
        *std = s.sigma * shard / (k - 1);
    return FED_OK;
}

/* Node shard's block [n*shard/k, n*(shard+1)/k) of a list of n. */
static size_t block_start(size_t n, int shard, int k)
{
    return (size_t)(((uint64_t)n * (uint64_t)shard) / (uint64_t)k);
}

static fed_err copy_out(const uint32_t *src, size_t n, uint32_t **idx, size_t *nout)
{
    uint32_t *dst = fed_malloc(n ? n * sizeof *dst : 1);

    if (!dst)
        return FED_ERR_NOMEM;
    if (n)
        memcpy(dst, src, n * sizeof *dst);
    *idx = dst;
    *nout = n;
    return FED_OK;
}

static fed_err partition_iid(size_t n, int shard, int k, uint64_t seed, uint32_t **idx,
                             size_t *nout)
{
    fed_rng rng;
    uint32_t *all = fed_malloc(n * sizeof *all);
    size_t lo, hi;
    fed_err err;

    if (!all)
        return FED_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        all[i] = (uint32_t)i;
    fed_rng_seed_stream(&rng, seed, STREAM_SPLIT);
    fed_rng_shuffle_u32(&rng, all, n);
    lo = block_start(n, shard, k);
    hi = block_start(n, shard + 1, k);
    err = copy_out(all + lo, hi - lo, idx, nout);
    fed_free(all);
    return err;
}

/* Indices grouped by class: order[start[c] .. start[c+1]) are class c's, in
 * increasing index order (a counting sort, stable). */
static fed_err group_by_class(const fed_dataset *d, uint32_t **order, size_t **start)
{
    int classes = d->shape.classes;
    size_t *st = fed_calloc((size_t)classes + 1, sizeof *st);
    size_t *fill = fed_calloc((size_t)classes + 1, sizeof *fill);
    uint32_t *ord = fed_malloc(d->n * sizeof *ord);

    if (!st || !fill || !ord) {
        fed_free(st);
        fed_free(fill);
        fed_free(ord);
        return FED_ERR_NOMEM;
    }
    for (size_t i = 0; i < d->n; i++) {
        assert(d->y[i] >= 0 && d->y[i] < classes); /* readers guarantee it */
        st[d->y[i] + 1]++;
    }
    for (int c = 0; c < classes; c++)
        st[c + 1] += st[c];
    memcpy(fill, st, ((size_t)classes + 1) * sizeof *fill);
    for (size_t i = 0; i < d->n; i++)
        ord[fill[d->y[i]]++] = (uint32_t)i;
    fed_free(fill);
    *order = ord;
    *start = st;
    return FED_OK;
}

/* Proportions p[0..k) ~ Dirichlet(alpha, ..., alpha). When every gamma draw
 * underflows (tiny alpha), the whole class goes to one node drawn uniformly,
 * which is the limit of the distribution. */
static void draw_dirichlet(fed_rng *rng, double alpha, int k, double *p)
{
    double sum = 0.0;

    for (int j = 0; j < k; j++) {
        p[j] = fed_rng_gamma(rng, alpha);
        sum += p[j];
    }
    if (!(sum > 0.0) || !isfinite(sum)) {
        uint64_t pick = fed_rng_below(rng, (uint64_t)k);

        for (int j = 0; j < k; j++)
            p[j] = (j == (int)pick) ? 1.0 : 0.0;
        return;
    }
    for (int j = 0; j < k; j++)
        p[j] /= sum;
}

static fed_err partition_dirichlet(const fed_dataset *d, double alpha, int shard, int k,
                                   uint64_t seed, uint32_t **idx, size_t *nout)
{
    fed_rng rng;
    uint32_t *order = NULL, *mine = NULL;
    size_t *start = NULL;
    double *p = NULL;
    size_t nmine = 0;
    fed_err err;

    err = group_by_class(d, &order, &start);
    if (err)
        goto out;
    p = fed_malloc((size_t)k * sizeof *p);
    mine = fed_malloc(d->n * sizeof *mine);
    if (!p || !mine) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    fed_rng_seed_stream(&rng, seed, STREAM_SPLIT);
    for (int c = 0; c < d->shape.classes; c++) {
        uint32_t *cls = order + start[c];
        size_t nc = start[c + 1] - start[c];
        double cum = 0.0;
        size_t lo, hi;

        fed_rng_shuffle_u32(&rng, cls, nc);
        draw_dirichlet(&rng, alpha, k, p);
        /* Cut points from cumulative proportions: node j takes
         * [round(nc*P_{j-1}), round(nc*P_j)), the last one ends at nc. */
        for (int j = 0; j < shard; j++)
            cum += p[j];
        lo = (size_t)floor(cum * (double)nc + 0.5);
        cum += p[shard];
        hi = shard == k - 1 ? nc : (size_t)floor(cum * (double)nc + 0.5);
        if (lo > nc)
            lo = nc;
        if (hi > nc)
            hi = nc;
        if (hi > lo) {
            memcpy(mine + nmine, cls + lo, (hi - lo) * sizeof *mine);
            nmine += hi - lo;
        }
    }
    err = copy_out(mine, nmine, idx, nout);
out:
    fed_free(order);
    fed_free(start);
    fed_free(p);
    fed_free(mine);
    return err;
}

/* Sort by label (stable), cut into nshards*k equal chunks, deal each node
 * nshards chunks drawn at random. */
static fed_err partition_shards(const fed_dataset *d, int nshards, int shard, int k,
                                uint64_t seed, uint32_t **idx, size_t *nout)
{
    fed_rng rng;
    uint32_t *order = NULL, *perm = NULL, *mine = NULL;
    size_t *start = NULL;
    size_t total = (size_t)nshards * (size_t)k, nmine = 0;
    fed_err err;

    if (total > d->n) {
        fed_log(FED_LOG_ERROR,
                "partition: shards:%d over %d nodes needs %zu chunks but the data has only %zu "
                "samples",
                nshards, k, total, d->n);
        return FED_ERR_RANGE;
    }
    err = group_by_class(d, &order, &start);
    if (err)
        goto out;
    perm = fed_malloc(total * sizeof *perm);
    mine = fed_malloc(d->n * sizeof *mine);
    if (!perm || !mine) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < total; i++)
        perm[i] = (uint32_t)i;
    fed_rng_seed_stream(&rng, seed, STREAM_SPLIT);
    fed_rng_shuffle_u32(&rng, perm, total);
    for (int s = 0; s < nshards; s++) {
        size_t chunk = perm[(size_t)shard * (size_t)nshards + (size_t)s];
        size_t lo = (size_t)(((uint64_t)d->n * chunk) / total);
        size_t hi = (size_t)(((uint64_t)d->n * (chunk + 1)) / total);

        memcpy(mine + nmine, order + lo, (hi - lo) * sizeof *mine);
        nmine += hi - lo;
    }
    err = copy_out(mine, nmine, idx, nout);
out:
    fed_free(order);
    fed_free(start);
    fed_free(perm);
    fed_free(mine);
    return err;
}

/* NIID-Bench's splits compute every party's part at once: party j's
 * indices are mine[] when j is the caller's shard, and only its size is
 * kept otherwise. */
typedef struct niid_split {
    int shard, k;
    size_t *sizes;  /* (k) */
    uint32_t *mine; /* (n) */
    size_t nmine;
} niid_split;

static void niid_reset(niid_split *s)
{
    memset(s->sizes, 0, (size_t)s->k * sizeof *s->sizes);
    s->nmine = 0;
}

/* Party j takes a[0..n). */
static void niid_give(niid_split *s, int j, const uint32_t *a, size_t n)
{
    s->sizes[j] += n;
    if (j == s->shard && n) {
        memcpy(s->mine + s->nmine, a, n * sizeof *a);
        s->nmine += n;
    }
}

/* a[0..n) cut as NumPy's split at floor(cumsum(p) * n)[:-1]: party j takes
 * the j-th piece. */
static void niid_cut(niid_split *s, const double *p, const uint32_t *a, size_t n)
{
    double cum = 0.0;
    size_t lo = 0;

    for (int j = 0; j < s->k; j++) {
        size_t hi = n;

        if (j < s->k - 1) {
            cum += p[j];
            hi = (size_t)(cum * (double)n);
            if (hi > n)
                hi = n;
            if (hi < lo)
                hi = lo;
        }
        niid_give(s, j, a + lo, hi - lo);
        lo = hi;
    }
}

static size_t niid_min_size(const niid_split *s)
{
    size_t m = s->sizes[0];

    for (int j = 1; j < s->k; j++)
        if (s->sizes[j] < m)
            m = s->sizes[j];
    return m;
}

static fed_err niid_new(const fed_dataset *d, int shard, int k, niid_split *s)
{
    s->shard = shard;
    s->k = k;
    s->nmine = 0;
    s->sizes = fed_calloc((size_t)k, sizeof *s->sizes);
    s->mine = fed_malloc(d->n * sizeof *s->mine);
    return s->sizes && s->mine ? FED_OK : FED_ERR_NOMEM;
}

static void niid_free(niid_split *s)
{
    fed_free(s->sizes);
    fed_free(s->mine);
}

static fed_err niid_too_small(const char *what, double beta, int k, size_t n)
{
    fed_log(FED_LOG_ERROR,
            "partition: %s:%g over %d parties: no draw in %d gave every party %d samples (the "
            "data has %zu): use a larger BETA or fewer parties",
            what, beta, k, NIID_MAX_DRAWS, NIID_MIN_SIZE, n);
    return FED_ERR_RANGE;
}

/* NIID-Bench's label skew by Dirichlet (its "noniid-labeldir"): per class,
 * shuffle its samples and draw p ~ Dir(beta) over the parties, zero the
 * share of every party that holds N/k samples already, renormalize and cut;
 * redraw the whole split until every party holds NIID_MIN_SIZE. */
static fed_err partition_niid_dirichlet(const fed_dataset *d, double beta, int shard, int k,
                                        uint64_t seed, uint32_t **idx, size_t *nout)
{
    niid_split s = {0};
    uint32_t *order = NULL;
    size_t *start = NULL;
    double *p = NULL, full = (double)d->n / k;
    fed_rng rng;
    int draw;
    fed_err err;

    if ((err = group_by_class(d, &order, &start)) != FED_OK || (err = niid_new(d, shard, k, &s)))
        goto out;
    if (!(p = fed_malloc((size_t)k * sizeof *p))) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    fed_rng_seed_stream(&rng, seed, STREAM_SPLIT);
    for (draw = 0; draw < NIID_MAX_DRAWS; draw++) {
        niid_reset(&s);
        for (int c = 0; c < d->shape.classes; c++) {
            uint32_t *cls = order + start[c];
            size_t nc = start[c + 1] - start[c];
            double sum = 0.0;

            fed_rng_shuffle_u32(&rng, cls, nc);
            draw_dirichlet(&rng, beta, k, p);
            for (int j = 0; j < k; j++) {
                if ((double)s.sizes[j] >= full)
                    p[j] = 0.0;
                sum += p[j];
            }
            for (int j = 0; j < k; j++)
                p[j] = sum > 0.0 ? p[j] / sum : 1.0 / k;
            niid_cut(&s, p, cls, nc);
        }
        if (niid_min_size(&s) >= NIID_MIN_SIZE)
            break;
    }
    if (draw == NIID_MAX_DRAWS)
        err = niid_too_small("niid-dirichlet", beta, k, d->n);
    else
        err = copy_out(s.mine, s.nmine, idx, nout);
out:
    fed_free(order);
    fed_free(start);
    fed_free(p);
    niid_free(&s);
    return err;
}

/* NIID-Bench's "#C=K": party j holds label j mod C and K - 1 other labels
 * drawn at random; each label's samples, shuffled, are split equally (as
 * NumPy's array_split) among the parties that hold it, in party order. A
 * label nobody holds (fewer parties than labels) is left out. */
static fed_err partition_labels(const fed_dataset *d, int labels, int shard, int k,
                                uint64_t seed, uint32_t **idx, size_t *nout)
{
    int C = d->shape.classes;
    niid_split s = {0};
    uint32_t *order = NULL;
    size_t *start = NULL;
    unsigned char *holds = NULL; /* (k, C) */
    int *times = NULL;
    fed_rng rng;
    fed_err err;

    if (labels > C) {
        fed_log(FED_LOG_ERROR, "partition: labels:%d but the data has %d classes", labels, C);
        return FED_ERR_RANGE;
    }
    if ((err = group_by_class(d, &order, &start)) != FED_OK || (err = niid_new(d, shard, k, &s)))
        goto out;
    holds = fed_calloc((size_t)k * (size_t)C, 1);
    times = fed_calloc((size_t)C, sizeof *times);
    if (!holds || !times) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    fed_rng_seed_stream(&rng, seed, STREAM_SPLIT);
    for (int j = 0; j < k; j++) {
        unsigned char *h = holds + (size_t)j * C;
        int have = 1;

        h[j % C] = 1;
        times[j % C]++;
        while (have < labels) {
            int c = (int)fed_rng_below(&rng, (uint64_t)C);

            if (!h[c]) {
                h[c] = 1;
                times[c]++;
                have++;
            }
        }
    }
    for (int c = 0; c < C; c++) {
        uint32_t *cls = order + start[c];
        size_t nc = start[c + 1] - start[c], lo = 0;
        int piece = 0;

        if (!times[c])
            continue;
        fed_rng_shuffle_u32(&rng, cls, nc);
        for (int j = 0; j < k; j++) {
            size_t len;

            if (!holds[(size_t)j * C + c])
                continue;
            len = nc / (size_t)times[c] + ((size_t)piece < nc % (size_t)times[c]);
            niid_give(&s, j, cls + lo, len);
            lo += len;
            piece++;
        }
    }
    err = copy_out(s.mine, s.nmine, idx, nout);
out:
    fed_free(order);
    fed_free(start);
    fed_free(holds);
    fed_free(times);
    niid_free(&s);
    return err;
}

/* NIID-Bench's quantity skew ("iid-diff-quantity"): all samples shuffled,
 * sizes from p ~ Dir(beta), redrawn until every party's share p_j N is at
 * least NIID_MIN_SIZE, then cut. */
static fed_err partition_quantity(const fed_dataset *d, double beta, int shard, int k,
                                  uint64_t seed, uint32_t **idx, size_t *nout)
{
    niid_split s = {0};
    uint32_t *all = NULL;
    double *p = NULL;
    fed_rng rng;
    int draw;
    fed_err err;

    if ((err = niid_new(d, shard, k, &s)) != FED_OK)
        goto out;
    all = fed_malloc(d->n * sizeof *all);
    p = fed_malloc((size_t)k * sizeof *p);
    if (!all || !p) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < d->n; i++)
        all[i] = (uint32_t)i;
    fed_rng_seed_stream(&rng, seed, STREAM_SPLIT);
    fed_rng_shuffle_u32(&rng, all, d->n);
    for (draw = 0; draw < NIID_MAX_DRAWS; draw++) {
        double least;

        draw_dirichlet(&rng, beta, k, p);
        least = p[0];
        for (int j = 1; j < k; j++)
            if (p[j] < least)
                least = p[j];
        if (least * (double)d->n >= NIID_MIN_SIZE)
            break;
    }
    if (draw == NIID_MAX_DRAWS) {
        err = niid_too_small("quantity", beta, k, d->n);
        goto out;
    }
    niid_cut(&s, p, all, d->n);
    err = copy_out(s.mine, s.nmine, idx, nout);
out:
    fed_free(all);
    fed_free(p);
    niid_free(&s);
    return err;
}

fed_err fed_data_partition(const fed_dataset *d, const char *scheme, int shard, int k,
                           uint64_t seed, uint32_t **idx, size_t *n)
{
    fed_data_scheme s;
    fed_rng rng;
    fed_err err;

    *idx = NULL;
    *n = 0;
    err = parse_scheme(scheme, &s);
    if (err)
        return err;
    if ((err = shard_ok(shard, k)) != FED_OK)
        return err;
    if (d->n == 0 || d->n > FED_DATA_MAX_SAMPLES) {
        fed_log(FED_LOG_ERROR, "partition: dataset has %zu samples", d->n);
        return FED_ERR_RANGE;
    }
    switch (s.kind) {
    case FED_DATA_IID:
    case FED_DATA_NOISE: /* the noise is the trainer's (fed_trainer_set_noise) */
        err = partition_iid(d->n, shard, k, seed, idx, n);
        break;
    case FED_DATA_DIRICHLET:
        err = partition_dirichlet(d, s.alpha, shard, k, seed, idx, n);
        break;
    case FED_DATA_SHARDS: err = partition_shards(d, s.shards, shard, k, seed, idx, n); break;
    case FED_DATA_NIID_DIRICHLET:
        err = partition_niid_dirichlet(d, s.alpha, shard, k, seed, idx, n);
        break;
    case FED_DATA_LABELS: err = partition_labels(d, s.labels, shard, k, seed, idx, n); break;
    case FED_DATA_QUANTITY: err = partition_quantity(d, s.alpha, shard, k, seed, idx, n); break;
    }
    if (err)
        return err;
    /* The node's own order: seeded per node, independent of the split. */
    fed_rng_seed_stream(&rng, seed, STREAM_NODE_ORDER + (uint64_t)shard);
    fed_rng_shuffle_u32(&rng, *idx, *n);
    return FED_OK;
}

fed_err fed_data_split_val(const fed_dataset *d, uint32_t *idx, size_t *n, double frac,
                           uint64_t seed, uint32_t **val, size_t *nval)
{
    int k = d->shape.classes > 0 ? d->shape.classes : 1;
    size_t m = *n, kept = 0, nv = 0;
    uint32_t *pos = fed_malloc((m ? m : 1) * sizeof *pos);
    uint8_t *out = fed_calloc(m ? m : 1, 1);
    uint32_t *v = NULL;
    fed_rng rng;
    fed_err e = FED_ERR_NOMEM;

    *val = NULL;
    *nval = 0;
    if (!pos || !out)
        goto out;
    fed_rng_seed_stream(&rng, seed, STREAM_VAL);
    for (int c = 0; c < k; c++) { /* each class's positions, shuffled, the first taken */
        size_t cn = 0, take;

        for (size_t i = 0; i < m; i++)
            if (d->y[idx[i]] == c)
                pos[cn++] = (uint32_t)i;
        for (size_t i = cn; i > 1; i--) {
            size_t j = (size_t)fed_rng_below(&rng, i);
            uint32_t t = pos[i - 1];

            pos[i - 1] = pos[j];
            pos[j] = t;
        }
        take = (size_t)llround(frac * (double)cn);
        if (take == 0 && cn >= 2)
            take = 1;
        if (take >= cn && cn > 0)
            take = cn - 1;
        for (size_t i = 0; i < take; i++)
            out[pos[i]] = 1;
        nv += take;
    }
    e = FED_ERR_RANGE;
    if (nv == 0 || nv == m)
        goto out;
    e = FED_ERR_NOMEM;
    if (!(v = fed_malloc(nv * sizeof *v)))
        goto out;
    nv = 0;
    for (size_t i = 0; i < m; i++) {
        if (out[i])
            v[nv++] = idx[i];
        else
            idx[kept++] = idx[i];
    }
    *n = kept;
    *val = v;
    *nval = nv;
    e = FED_OK;
out:
    fed_free(pos);
    fed_free(out);
    return e;
}

fed_err fed_data_keep(const fed_dataset *d, uint32_t *idx, size_t *n, size_t keep, uint64_t seed)
{
    uint32_t *drop = NULL;
    size_t ndrop = 0;
    fed_err e;

    if (!keep || *n <= keep)
        return FED_OK;
    /* the dropped side is the held-out one: each label's share of it */
    e = fed_data_split_val(d, idx, n, 1.0 - (double)keep / (double)*n, seed, &drop, &ndrop);
    fed_free(drop);
    /* no label can spare a sample (each keeps one): the shard stays whole */
    return e == FED_ERR_RANGE ? FED_OK : e;
}
