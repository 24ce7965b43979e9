/* partition.c - the seeded partitioners ("iid", "dirichlet:ALPHA", "shards:N")
 * that give node `shard` of `k` its list of sample indices. Every node computes
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

/* Stream numbers for the RNGs derived from the partition seed. */
enum { STREAM_SPLIT = 0, STREAM_NODE_ORDER = 1 };

static fed_err parse_scheme(const char *scheme, fed_data_scheme *out)
{
    const char *arg;
    char *end = NULL;

    memset(out, 0, sizeof *out);
    if (!scheme) {
        fed_log(FED_LOG_ERROR, "partition: no scheme given (want iid, dirichlet:ALPHA or shards:N)");
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
    fed_log(FED_LOG_ERROR, "partition: unknown scheme '%s' (want iid, dirichlet:ALPHA or shards:N)",
            scheme);
    return FED_ERR_BAD_VALUE;
}

fed_err fed_data_parse_scheme(const char *scheme, fed_data_scheme *out)
{
    return parse_scheme(scheme, out);
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
    if (k < 1 || shard < 0 || shard >= k) {
        fed_log(FED_LOG_ERROR, "partition: shard %d/%d out of range (want 0 <= I < K)", shard, k);
        return FED_ERR_RANGE;
    }
    if (d->n == 0 || d->n > FED_DATA_MAX_SAMPLES) {
        fed_log(FED_LOG_ERROR, "partition: dataset has %zu samples", d->n);
        return FED_ERR_RANGE;
    }
    switch (s.kind) {
    case FED_DATA_IID: err = partition_iid(d->n, shard, k, seed, idx, n); break;
    case FED_DATA_DIRICHLET:
        err = partition_dirichlet(d, s.alpha, shard, k, seed, idx, n);
        break;
    case FED_DATA_SHARDS: err = partition_shards(d, s.shards, shard, k, seed, idx, n); break;
    }
    if (err)
        return err;
    /* The node's own order: seeded per node, independent of the split. */
    fed_rng_seed_stream(&rng, seed, STREAM_NODE_ORDER + (uint64_t)shard);
    fed_rng_shuffle_u32(&rng, *idx, *n);
    return FED_OK;
}
