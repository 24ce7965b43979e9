/* agg_input.c - the round's aggregate input (agg_input_impl.h): segments
 * reduced plainly or quantized each on its own scale, and the three
 * implementations the aggregator's round path calls through one table:
 * plain (the list of contributions, as the robust merges need each),
 * secure (one unmasked sum, secagg_agg.c), DP-FedAvg (agg_dp.c) around
 * either. */
#include "node/agg_input_impl.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/colstats.h"
#include "model/backend.h"
#include "node/aggregator_impl.h"
#include "node/secagg_impl.h"
#include "secagg/quant.h"

/* After the strategy merged the trained floats into the host copy: the
 * other floats each by their own rule (node/layout.h): a statistic is its
 * committed value plus the round's mean delta, a local tensor stays as
 * committed (the aggregator keeps its own); the model takes the result. */
static FED_WUR fed_err node_agg_input_settle(fed_node *n);

/* The values of segs[0..nseg) of encoding enc together. */
static size_t seg_count(const agg_segment *segs, size_t nseg, agg_encoding enc)
{
    size_t len = 0;

    for (size_t s = 0; s < nseg; s++)
        if (segs[s].enc == enc)
            len += segs[s].len;
    return len;
}

size_t fedi_agg_seg_len(const agg_segment *segs, size_t nseg)
{
    return seg_count(segs, nseg, AGG_ENC_QUANT);
}

size_t fedi_agg_seg_ints(const agg_segment *segs, size_t nseg)
{
    return seg_count(segs, nseg, AGG_ENC_INT64);
}

uint32_t fedi_agg_int_limbs(uint32_t bits)
{
    assert(bits >= 1 && bits <= 32);
    return (64 + bits - 1) / bits;
}

size_t fedi_agg_seg_words(const agg_segment *segs, size_t nseg, uint32_t bits)
{
    return fedi_agg_seg_len(segs, nseg) + fedi_agg_seg_ints(segs, nseg) * fedi_agg_int_limbs(bits);
}

/* An INT64 segment sums; no other rule means anything for integers. */
static int ints_ok(const agg_segment *segs, size_t nseg)
{
    for (size_t s = 0; s < nseg; s++)
        if (segs[s].enc != AGG_ENC_QUANT &&
            (segs[s].enc != AGG_ENC_INT64 || segs[s].rule != AGG_WEIGHT_SUM))
            return 0;
    return 1;
}

fed_err fedi_agg_seg_reduce(const agg_segment *segs, size_t nseg, const float *const *x,
                            const double *w, size_t m, float *out)
{
    size_t off = 0;

    if (m == 0 || nseg > AGG_SEGMENTS_MAX)
        return FED_ERR_INVAL;
    for (size_t s = 0; s < nseg; s++) {
        const agg_segment *g = &segs[s];
        double div = 1;

        if (g->enc != AGG_ENC_QUANT) /* integers: fedi_agg_seg_reduce_ints */
            continue;
        if (g->rule == AGG_WEIGHT_SAMPLES) {
            div = 0;
            for (size_t i = 0; i < m; i++)
                div += w[i];
            if (!(div > 0))
                return FED_ERR_INVAL;
        } else if (g->rule == AGG_WEIGHT_MEAN) {
            div = (double)m;
        }
        for (size_t j = off; j < off + g->len; j++) {
            double acc = 0;

            for (size_t i = 0; i < m; i++)
                acc += (g->rule == AGG_WEIGHT_SAMPLES ? w[i] : 1.0) * (double)x[i][j];
            out[j] = (float)(acc / div);
        }
        off += g->len;
    }
    return FED_OK;
}

fed_err fedi_agg_seg_reduce_ints(const agg_segment *segs, size_t nseg, const int64_t *const *ix,
                                 size_t m, uint64_t *out)
{
    size_t n = fedi_agg_seg_ints(segs, nseg);

    if (m == 0 || nseg > AGG_SEGMENTS_MAX || !ints_ok(segs, nseg))
        return FED_ERR_INVAL;
    for (size_t j = 0; j < n; j++) {
        uint64_t acc = 0; /* unsigned: wraps modulo 2^64, as two's complement adds */

        for (size_t i = 0; i < m; i++)
            acc += (uint64_t)ix[i][j];
        out[j] = acc;
    }
    return FED_OK;
}

/* v's limbs of bits bits, low first, into out (fedi_agg_int_limbs words). */
static void int_limbs(uint64_t v, uint32_t bits, uint32_t *out)
{
    uint32_t nl = fedi_agg_int_limbs(bits);
    uint64_t mask = bits >= 32 ? UINT32_MAX : (UINT64_C(1) << bits) - 1;

    for (uint32_t l = 0; l < nl; l++, v >>= bits) /* bits <= 32 */
        out[l] = (uint32_t)(v & mask);
}

/* The limb sums back into one value modulo 2^64: each S_l is whole (the
 * round's check), shifted to its place; the bits past 64 fall away. */
static uint64_t int_join(const uint32_t *sum, uint32_t bits)
{
    uint32_t nl = fedi_agg_int_limbs(bits);
    uint64_t v = 0;

    for (uint32_t l = 0; l < nl; l++)
        v += (uint64_t)sum[l] << (l * bits); /* l bits < 64 for every limb */
    return v;
}

fed_err fedi_agg_seg_quantize(const agg_segment *segs, size_t nseg, uint32_t bits, const float *x,
                              const int64_t *ix, fed_rng *rng, uint32_t *out)
{
    size_t len = fedi_agg_seg_len(segs, nseg), off = 0, ioff = 0, w = 0;
    fed_err e;

    if (nseg > AGG_SEGMENTS_MAX || !ints_ok(segs, nseg) || bits < 1 || bits > 32 ||
        (fedi_agg_seg_ints(segs, nseg) && !ix))
        return FED_ERR_INVAL;
    for (size_t j = 0; j < len; j++) /* out untouched, no draw taken */
        if (!isfinite(x[j]))
            return FED_ERR_NAN;
    for (size_t s = 0; s < nseg; s++) {
        if (segs[s].enc == AGG_ENC_INT64) {
            uint32_t nl = fedi_agg_int_limbs(bits);

            for (size_t j = 0; j < segs[s].len; j++, w += nl)
                int_limbs((uint64_t)ix[ioff + j], bits, out + w);
            ioff += segs[s].len;
            continue;
        }
        fed_secagg_quant q = {.clip_norm = 0, .range = segs[s].range, .bits = bits};

        if ((e = fed_secagg_quantize(&q, x + off, segs[s].len, rng, out + w)) != FED_OK)
            return e;
        off += segs[s].len;
        w += segs[s].len;
    }
    return FED_OK;
}

fed_err fedi_agg_seg_dequantize(const agg_segment *segs, size_t nseg, uint32_t bits,
                                const uint32_t *sum, uint32_t m, float *out, uint64_t *iout)
{
    size_t off = 0, ioff = 0, w = 0;
    fed_err e;

    if (nseg > AGG_SEGMENTS_MAX || !ints_ok(segs, nseg) || bits < 1 || bits > 32 ||
        (fedi_agg_seg_ints(segs, nseg) && !iout))
        return FED_ERR_INVAL;
    for (size_t s = 0; s < nseg; s++) {
        if (segs[s].enc == AGG_ENC_INT64) {
            uint32_t nl = fedi_agg_int_limbs(bits);

            for (size_t j = 0; j < segs[s].len; j++, w += nl)
                iout[ioff + j] = int_join(sum + w, bits);
            ioff += segs[s].len;
            continue;
        }
        fed_secagg_quant q = {.clip_norm = 0, .range = segs[s].range, .bits = bits};

        if ((e = fed_secagg_dequantize(&q, sum + w, segs[s].len, m, out + off)) != FED_OK)
            return e;
        off += segs[s].len;
        w += segs[s].len;
    }
    return FED_OK;
}

void fedi_agg_seg_finish(const agg_segment *segs, size_t nseg, const float *deq, uint32_t m,
                         double weight, float *out)
{
    size_t off = 0;

    for (size_t s = 0; s < nseg; s++) {
        double div = segs[s].rule == AGG_WEIGHT_SAMPLES ? weight
                     : segs[s].rule == AGG_WEIGHT_MEAN  ? (double)m
                                                        : 1;

        if (segs[s].enc != AGG_ENC_QUANT)
            continue;
        for (size_t j = off; j < off + segs[s].len; j++)
            out[j] = (float)((double)deq[j] / div);
        off += segs[s].len;
    }
}

size_t fedi_agg_seg_secure(const agg_segment *delta, size_t nd, double range, size_t nints,
                           agg_segment *segs)
{
    memmove(segs, delta, nd * sizeof *segs);
    segs[nd] = (agg_segment){.name = "weight", .len = 1, .rule = AGG_WEIGHT_SUM, .range = range};
    if (!nints)
        return nd + 1;
    segs[nd + 1] = (agg_segment){.name = "ints", .len = nints, .rule = AGG_WEIGHT_SUM,
                                 .enc = AGG_ENC_INT64};
    return nd + 2;
}

size_t fedi_agg_seg_stats(uint32_t cols, agg_segment *seg)
{
    *seg = (agg_segment){.name = "stats", .len = (size_t)cols * FED_COLSTATS_INTS,
                         .rule = AGG_WEIGHT_SUM, .enc = AGG_ENC_INT64};
    return 1;
}

/* The round's statistics (node/layout.h's segment 1) out of the m host
 * deltas x (full vectors, weights w): their mean by the segment's rule
 * into a->norm_stats, and zeroed in each, so the strategy, its clips and its
 * robust rules never see them. */
static fed_err stats_take(node_agg *a, float *const *x, const double *w, size_t m)
{
    size_t ns = a->layout.len[LAYOUT_STATS];
    agg_segment segs[AGG_SEGMENTS_MAX];
    float *packed = NULL;
    const float **px = NULL;
    fed_err e = FED_ERR_NOMEM;

    if (!a->norm_stats || m == 0)
        return FED_OK;
    (void)fed_node_layout_segments(&a->layout, 0, 0, segs); /* segs[1]: the statistics */
    if (!(packed = fed_malloc(m * ns * sizeof *packed)) || !(px = fed_malloc(m * sizeof *px)))
        goto out;
    for (size_t i = 0; i < m; i++) {
        fed_node_layout_gather(&a->layout, LAYOUT_STATS, x[i], packed + i * ns);
        fed_node_layout_fill(&a->layout, LAYOUT_STATS, x[i], 0.0f);
        px[i] = packed + i * ns;
    }
    e = fedi_agg_seg_reduce(&segs[1], 1, px, w, m, a->norm_stats);
out:
    fed_free(px);
    fed_free(packed);
    return e;
}

/* The round's extra segment (node/layout.h: FedNova's steps, SCAFFOLD's
 * control change) by its rule into a->extra_mean, out of the tails of the
 * m full deltas x (weights w). */
static fed_err extra_take(node_agg *a, float *const *x, const double *w, size_t m)
{
    agg_segment segs[AGG_SEGMENTS_MAX];
    size_t ns;
    const float **px = NULL;
    fed_err e;

    if (!a->layout.extra || m == 0)
        return FED_OK;
    ns = fed_node_layout_segments(&a->layout, 0, 0, segs); /* the extra one last */
    if (!(px = fed_malloc(m * sizeof *px)))
        return FED_ERR_NOMEM;
    for (size_t i = 0; i < m; i++)
        px[i] = x[i] + a->nparams;
    e = fedi_agg_seg_reduce(&segs[ns - 1], 1, px, w, m, a->extra_mean);
    fed_free(px);
    return e;
}

/* What the strategy makes of the extra segment before its merge: FedNova's
 * server step x += tau_eff D, tau_eff = sum_i p_i a_i. */
static fed_err extra_before_merge(fed_node *n)
{
    node_agg *a = n->agg;
    double tau;

    if (!a->rules.fednova)
        return FED_OK;
    tau = a->extra_mean[0];
    if (!(isfinite(tau) && tau > 0)) {
        fed_log(FED_LOG_WARN, "aggregator: round %llu: fednova's effective step count "
                "tau_eff is %g (its clients' momentum-weighted steps): nothing merged",
                (unsigned long long)(n->round + 1), tau);
        return FED_ERR_RANGE;
    }
    fed_merge_set_step_scale(a->merge, tau);
    return FED_OK;
}

static fed_err node_agg_input_settle(fed_node *n)
{
    node_agg *a = n->agg;
    const fed_node_layout *l = &a->layout;
    const float *st = a->norm_stats;

    if (fed_node_layout_trivial(l))
        return FED_OK;
    for (size_t i = 0; i < l->nruns; i++) {
        const layout_run *r = &l->runs[i];

        if (r->path == LAYOUT_LOCAL) {
            memcpy(a->host + r->off, a->committed + r->off, r->len * sizeof *a->host);
        } else if (r->path == LAYOUT_STATS) {
            for (size_t j = 0; j < r->len; j++)
                a->host[r->off + j] = a->committed[r->off + j] + *st++;
        }
    }
    return fed_model_set_params(a->model, a->host);
}

fed_err fedi_node_agg_input_vec(fed_node *n, int k, const float *host, const float **delta)
{
    node_agg *a = n->agg;
    fed_backend *be = n->cfg.be;
    fed_err e;

    if (be->caps & FED_BACKEND_CAP_HOST_MEMORY) {
        *delta = host;
        return FED_OK;
    }
    if (!a->dev[k] &&
        (e = be->alloc(be, a->nparams * sizeof(float), (void **)&a->dev[k])) != FED_OK)
        return e;
    if ((e = be->upload(be, a->dev[k], host, a->nparams * sizeof(float))) != FED_OK)
        return e;
    *delta = a->dev[k];
    return FED_OK;
}

/* The strategy over out's merge inputs into the global model (on the
 * backend, then its host copy): every implementation's close ends here
 * unless its outcome is void. */
static fed_err agg_merge(fed_node *n, const agg_close *out)
{
    node_agg *a = n->agg;
    fed_err e = fed_merge_apply(a->merge, fed_model_params_dev(a->model), a->inputs, out->count,
                                out->results);

    a->model_vec_len = 0; /* the global moved: no MODEL vector encoded yet */
    if (e == FED_OK)
        e = fed_model_get_params(a->model, a->host);
    /* then the floats off the trained path, each by its own rule */
    return e != FED_OK ? e : node_agg_input_settle(n);
}

/* ---- plain: the list of contributions ---- */

static fed_err plain_begin(fed_node *n)
{
    (void)n;
    return FED_OK;
}

/* Results of the merge by part index (inputs skipped missing parts). */
static void plain_merged(fed_node *n, const agg_close *out)
{
    node_agg *a = n->agg;
    int k = out->count;

    /* in place, from the end: input k-1 goes to part i >= k-1, and every
       input still to move sits below where this one lands */
    for (size_t i = a->nparts; i-- > 0;)
        if (a->parts[i].got)
            a->results[i] = a->results[--k];
}

/* The merge inputs, in part order (key order), on the backend; weights the
 * samples (FedBuff discounts a stale delta by sqrt(1 + staleness));
 * merged. */
static fed_err plain_close(fed_node *n, agg_close *out)
{
    node_agg *a = n->agg;
    float **x = NULL;
    double *w = NULL;
    int k = 0;
    fed_err e = FED_OK;

    if ((a->norm_stats || a->layout.extra) && (!(x = fed_malloc(a->nparts * sizeof *x + 1)) ||
                     !(w = fed_malloc(a->nparts * sizeof *w + 1)))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < a->nparts; i++) {
        agg_part *p = &a->parts[i];
        fed_merge_input *in = &a->inputs[k];

        if (!p->got)
            continue;
        in->weight = (double)p->samples;
        if (p->base <= n->round) /* FedBuff's discount of a stale delta */
            in->weight /= sqrt(1.0 + (double)(n->round + 1 - p->base));
        memcpy(in->key, p->key, 32);
        if (x) {
            x[k] = p->delta;
            w[k] = in->weight;
        }
        k++;
    }
    /* the statistics by their own rule, out of what the strategy merges */
    if (x && ((e = stats_take(a, x, w, (size_t)k)) != FED_OK ||
              (e = extra_take(a, x, w, (size_t)k)) != FED_OK ||
              (e = extra_before_merge(n)) != FED_OK))
        goto out;
    for (int i = 0, j = 0; i < (int)a->nparts && j < k; i++) {
        if (!a->parts[i].got)
            continue;
        if ((e = fedi_node_agg_input_vec(n, j, a->parts[i].delta, &a->inputs[j].delta)) != FED_OK)
            goto out;
        j++;
    }
    out->update = 1;
    out->count = k;
    out->results = a->results;
    if ((e = agg_merge(n, out)) == FED_OK &&
        (e = fedi_node_agg_scaffold_merged(n, (uint32_t)k)) == FED_OK)
        plain_merged(n, out);
out:
    fed_free(x);
    fed_free(w);
    return e;
}

static void plain_committed(fed_node *n, fed_node_round_info *info, const agg_close *out)
{
    (void)n;
    (void)out;
    if (info->refused)
        fed_log(FED_LOG_INFO, "aggregator: round %llu merged %u of %u (%u missing, %u declined)",
                (unsigned long long)info->round, info->merged, info->sampled, info->missing,
                info->refused);
    else
        fed_log(FED_LOG_INFO, "aggregator: round %llu merged %u of %u (%u missing)",
                (unsigned long long)info->round, info->merged, info->sampled, info->missing);
}

static fed_err plain_record(fed_node *n, const fed_node_round_info *info, double *eps)
{
    (void)n;
    (void)info;
    (void)eps;
    return FED_OK;
}

static void plain_recorded(fed_node *n, int ok, double eps)
{
    (void)n;
    (void)ok;
    (void)eps;
}

static int plain_spent(const fed_node *n)
{
    (void)n;
    return 0;
}

static const char *plain_fate(const fed_node *n, size_t i)
{
    (void)n;
    (void)i;
    return "missing";
}

static void plain_drop(fed_node *n) { (void)n; }

static const agg_input_ops plain_ops = {
    .name = "plain",
    .strategy_prefix = "",
    .durable = 0,
    .begin = plain_begin,
    .take = fedi_node_agg_take_delta,
    .on_stage = NULL,
    .close = plain_close,
    .record = plain_record,
    .recorded = plain_recorded,
    .committed = plain_committed,
    .spent = plain_spent,
    .fate = plain_fate,
    .drop = plain_drop,
};

/* ---- secure: one unmasked sum (the protocol is secagg_agg.c's) ---- */

/* Each client in the sum was merged through it. */
static void secure_merged(fed_node *n, const agg_close *out)
{
    node_agg *a = n->agg;

    (void)out;
    for (size_t i = 0; i < a->nparts; i++)
        a->results[i].verdict = FED_MERGE_USED;
}

/* One input: the unmasked mean with the summed weight, merged; void when
 * the try failed once masked inputs were out (the model and strategy
 * stay). */
static fed_err secure_close(fed_node *n, agg_close *out)
{
    node_agg *a = n->agg;
    double w = 0;
    const float *mean;
    fed_err e;

    out->results = a->results;
    if (fedi_node_sa_agg_void(a->sa)) {
        for (size_t i = 0; i < a->nparts; i++) {
            memset(&a->results[i], 0, sizeof a->results[i]);
            a->results[i].verdict = FED_MERGE_SKIPPED;
        }
        out->update = 0;
        out->count = 0;
        return FED_OK;
    }
    mean = fedi_node_sa_agg_mean(a->sa, &w);
    if (a->norm_stats) /* the statistics' own mean, apart from the strategy's input */
        memcpy(a->norm_stats, fedi_node_sa_agg_stats(a->sa),
               a->layout.len[LAYOUT_STATS] * sizeof *a->norm_stats);
    if (a->layout.extra) { /* the strategy's own segment, after the tensors */
        memcpy(a->extra_mean, mean + a->nparams, a->layout.extra * sizeof *a->extra_mean);
        if ((e = extra_before_merge(n)) != FED_OK)
            return e;
    }
    memset(&a->inputs[0], 0, sizeof a->inputs[0]);
    if ((e = fedi_node_agg_input_vec(n, 0, mean, &a->inputs[0].delta)) != FED_OK)
        return e;
    a->inputs[0].weight = w;
    out->update = 1;
    out->count = 1;
    if ((e = agg_merge(n, out)) != FED_OK)
        return e;
    {
        size_t ni;
        uint32_t m3;

        (void)fedi_node_sa_agg_ints(a->sa, &ni, &m3); /* the survivors: the mean's count */
        if ((e = fedi_node_agg_scaffold_merged(n, m3)) != FED_OK)
            return e;
    }
    secure_merged(n, out);
    return FED_OK;
}

static void secure_committed(fed_node *n, fed_node_round_info *info, const agg_close *out)
{
    if (out->update)
        plain_committed(n, info, out);
    else
        fed_log(FED_LOG_WARN, "aggregator: round %llu closed with no update: its secure sum "
                "failed after the clients revealed their shares (%u sampled)",
                (unsigned long long)info->round, info->sampled);
}

/* The try's row with the round (a try that failed before masked inputs
 * were out wrote its own). */
static fed_err secure_record(fed_node *n, const fed_node_round_info *info, double *eps)
{
    node_sa_agg *s = n->agg->sa;
    fed_store_secagg_try t;

    (void)info;
    (void)eps;
    if (!fedi_node_sa_agg_unmasked(s) && !fedi_node_sa_agg_void(s))
        return FED_OK;
    fedi_node_sa_agg_row(n, &t, fedi_node_sa_agg_outcome(s));
    return fed_store_put_secagg_try(n->cfg.store, &t);
}

static int secure_spent(const fed_node *n)
{
    return fedi_node_sa_agg_unmasked(n->agg->sa) || fedi_node_sa_agg_void(n->agg->sa);
}

static const char *secure_fate(const fed_node *n, size_t i)
{
    return fedi_node_sa_agg_fate(n->agg->sa, i);
}

static const agg_input_ops secure_ops = {
    .name = "secure",
    .strategy_prefix = "",
    .durable = 0,
    .begin = fedi_node_sa_agg_begin,
    .take = NULL, /* a secure round takes masked inputs only */
    .on_stage = fedi_node_sa_agg_on_msg,
    .close = secure_close,
    .record = secure_record,
    .recorded = plain_recorded,
    .committed = secure_committed,
    .spent = secure_spent,
    .fate = secure_fate,
    .drop = fedi_node_sa_agg_end,
};

/* ---- DP-FedAvg around either: one noised mean, the strategy's only
 * input ---- */

static const agg_input_ops *dp_inner(const fed_node *n)
{
    return n->agg->sa ? &secure_ops : &plain_ops;
}

static fed_err dp_begin(fed_node *n) { return dp_inner(n)->begin(n); }

static fed_err dp_take(fed_node *n, node_open *op, agg_part *p)
{
    return dp_inner(n)->take(n, op, p);
}

static fed_err dp_on_stage(fed_node *n, node_open *op) { return dp_inner(n)->on_stage(n, op); }

/* Clipped (by the aggregator, or by each client under secagg), summed,
 * noised, over the expected cohort, merged; a->results per part. A failed
 * secure try still releases the noise alone. */
static fed_err dp_close(fed_node *n, agg_close *out)
{
    fed_err e;

    out->dp_clip = fedi_node_agg_dp_clip(n->agg);
    e = fedi_node_agg_dp_aggregate(n, &n->agg->inputs[0], &out->unclipped);
    out->update = 1;
    out->count = 1;
    out->results = &out->one;
    return e != FED_OK ? e : agg_merge(n, out);
}

static void dp_committed(fed_node *n, fed_node_round_info *info, const agg_close *out)
{
    const node_agg *a = n->agg;

    info->epsilon = fedi_node_agg_dp_epsilon(a);
    if (a->sa)
        fed_log(FED_LOG_INFO, "aggregator: round %llu merged %u of %u (%u missing, %u declined), "
                              "each clipped by its client to %.6g (secagg), client-level epsilon "
                              "%.4f (delta %g)", (unsigned long long)info->round, info->merged,
                info->sampled, info->missing, info->refused, fedi_node_agg_dp_secagg_clip(a),
                info->epsilon, n->cfg.dp.delta);
    else
        fed_log(FED_LOG_INFO, "aggregator: round %llu merged %u of %u (%u missing, %u declined), "
                              "%u within clip %.6g (next %.6g), client-level epsilon %.4f (delta %g)",
                (unsigned long long)info->round, info->merged, info->sampled, info->missing,
                info->refused, out->unclipped, info->dp_clip, fedi_node_agg_dp_clip(a),
                info->epsilon, n->cfg.dp.delta);
}

/* The round's charge (q, z, one step), then what the inner input records. */
static fed_err dp_record(fed_node *n, const fed_node_round_info *info, double *eps)
{
    fed_err e = fedi_node_agg_dp_charge(n, info->round, fedi_node_wall_ms(n), eps);

    return e != FED_OK ? e : dp_inner(n)->record(n, info, eps);
}

/* Epsilon and the next clip taken, or the charges reloaded. */
static void dp_recorded(fed_node *n, int ok, double eps)
{
    fedi_node_agg_dp_committed(n, ok, eps);
    dp_inner(n)->recorded(n, ok, eps);
}

static int dp_spent(const fed_node *n) { return dp_inner(n)->spent(n); }

static const char *dp_fate(const fed_node *n, size_t i) { return dp_inner(n)->fate(n, i); }

static void dp_drop(fed_node *n) { dp_inner(n)->drop(n); }

/* Two tables, so that what the inner one takes (a DELTA, or stage
 * messages) stays visible as it is. */
static const agg_input_ops dp_plain_ops = {
    .name = "dp+plain",
    .strategy_prefix = "dp+",
    .durable = 1,
    .begin = dp_begin,
    .take = dp_take,
    .on_stage = NULL,
    .close = dp_close,
    .record = dp_record,
    .recorded = dp_recorded,
    .committed = dp_committed,
    .spent = dp_spent,
    .fate = dp_fate,
    .drop = dp_drop,
};

static const agg_input_ops dp_secure_ops = {
    .name = "dp+secure",
    .strategy_prefix = "dp+",
    .durable = 1,
    .begin = dp_begin,
    .take = NULL,
    .on_stage = dp_on_stage,
    .close = dp_close,
    .record = dp_record,
    .recorded = dp_recorded,
    .committed = dp_committed,
    .spent = dp_spent,
    .fate = dp_fate,
    .drop = dp_drop,
};

const agg_input_ops *fedi_node_agg_input_of(const fed_node *n, const agg_input_ops **inner)
{
    const agg_input_ops *in = dp_inner(n);

    if (inner)
        *inner = in;
    if (!n->agg->dp)
        return in;
    return n->agg->sa ? &dp_secure_ops : &dp_plain_ops;
}
