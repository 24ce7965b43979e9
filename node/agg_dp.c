/* agg_dp.c - the aggregator's DP-FedAvg (client-level differential privacy,
 * McMahan et al. 2018; adaptive clipping of Andrew et al. 2021): the
 * Poisson draw of a round's clients, each delta clipped and summed with
 * equal weight, Gaussian noise on the sum, the fixed denominator (the
 * expected cohort), the clip's geometric update, and each round's charge to
 * the aggregator's own accountant (node/dp_account.h) in the round's
 * transaction. Noise and the draw come from the keystream
 * (crypto/keystream.h) keyed from env.random (libsodium in the daemon; a
 * seeded stream in fedsim, whose runs are then not private). The aggregator adds the noise: it is trusted for
 * client-level DP, and epsilon holds against everyone who sees the models
 * it releases. Never touches a client's delta beyond reading it.
 *
 * With secure aggregation (cfg.secagg.on) the aggregator sees no delta: each
 * client clips its own to the round's secagg clip (field 12: C less the
 * most quantization can add, so the sum as dequantized moves by at most C
 * when one client joins or leaves) at weight 1 (the secagg weight cap is 1),
 * and the aggregator noises the unmasked sum, so it is trusted for
 * client-level DP as without. A try that fails closed ends the round with
 * the noise alone (the draw stands: a new draw would void the accounting).
 * Adaptive clipping, which needs each client's unclipped bit, is refused. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "crypto/keystream.h"
#include "model/merge.h"
#include "model/dp.h"
#include "node/aggregator_impl.h"
#include "node/dp_account.h"
#include "node/secagg_impl.h"
#include "privacy/dpfedavg.h"
#include "privacy/rdp.h"

/* Andrew et al. (2021) take the count's noise as the expected cohort / 20. */
#define AGG_DP_COUNT_NOISE_SHARE 20.0

struct agg_dp {
    fed_dp_account *acct;
    fed_crypto_keystream ks;
    double q;          /* each client's sampling probability */
    double z;          /* the round's noise multiplier, as accounted */
    double z_delta;    /* the update's share of it (z without adaptive clipping) */
    double sigma_b;    /* the count's noise standard deviation (adaptive) */
    double cohort;     /* the expected cohort q N: the fixed denominator */
    double clip;       /* C of the round being filled */
    double clip_next;  /* C after it (adaptive), committed with its checkpoint */
    double sa_clip;    /* with secagg: the clip each client applies itself */
    double p_small;    /* with secagg: P(a draw below the secure round's floor) */
    double epsilon;    /* spent after the last committed round */
    float *sum;        /* (nparams) the noised mean of the round */
};

/* With secagg: the clip each client applies to its own delta, so that
 * its contribution to the dequantized sum stays within C. Stochastic
 * rounding moves each coordinate by less than one step 2 range / L
 * (secagg/quant.h), so by less than sqrt(nparams) steps in L2; the float
 * products on the way cost a relative 2^-22 at most. Adaptive clipping
 * would need each client's unclipped bit as one more masked coordinate,
 * which is not built: refused. */
static fed_err secagg_clip(const fed_node *n, agg_dp *d)
{
    const fed_node_config *c = &n->cfg;
    double step = 2 * c->secagg.range / (ldexp(1.0, (int)c->secagg.bits) - 1);

    if (c->dp.client_quantile > 0) {
        fed_log(FED_LOG_ERROR, "aggregator: adaptive clipping (--dp-client-quantile) with "
                               "--secagg is not built: the aggregator cannot count the "
                               "unclipped updates it never sees; use a fixed --dp-client-clip");
        return FED_ERR_UNSUPPORTED;
    }
    d->sa_clip = d->clip * (1 - 0x1p-22) - sqrt((double)n->agg->nparams) * step;
    if (!(d->sa_clip > d->clip / 2)) {
        fed_log(FED_LOG_ERROR, "aggregator: --secagg-bits %u are too few for --dp-client-clip "
                               "%g: quantizing %zu parameters may move a delta by %g in L2; "
                               "raise --secagg-bits or --dp-client-clip", c->secagg.bits,
                d->clip, n->agg->nparams, sqrt((double)n->agg->nparams) * step);
        return FED_ERR_RANGE;
    }
    return FED_OK;
}

/* With secagg: a draw of fewer clients than a secure round runs with (its
 * floor of 3, --secagg-min-clients, --min-clients) voids the round, which
 * then releases its noise alone: an outcome that depends on the draw's size,
 * which the Poisson-subsampled Gaussian's accounting does not cover (one
 * client more or less can decide it). Rather than widen every reported
 * delta by the chance of that, the aggregator refuses a configuration where
 * it exceeds delta / 10 a round, naming the rate that would do. */
static fed_err secagg_small_draw(const fed_node *n, agg_dp *d)
{
    const fed_node_config *c = &n->cfg;
    uint32_t m = fed_node_sa_floor(c) > c->agg.min_clients ? fed_node_sa_floor(c) : c->agg.min_clients;
    double lo = d->q, hi = 1.0;

    d->p_small = fed_rdp_binom_below(c->agg.wait_clients, d->q, m);
    if (d->p_small <= c->dp.delta / 10)
        return FED_OK;
    if (fed_rdp_binom_below(c->agg.wait_clients, 1.0, m) > c->dp.delta / 10) {
        fed_log(FED_LOG_ERROR, "aggregator: DP-FedAvg with --secagg: a round needs %u clients "
                "and the population (--wait-clients) is %u", m, c->agg.wait_clients);
        return FED_ERR_INVAL;
    }
    for (int i = 0; i < 60; i++) { /* the smallest rate that passes, to 1e-4 or so */
        double mid = (lo + hi) / 2;

        if (fed_rdp_binom_below(c->agg.wait_clients, mid, m) <= c->dp.delta / 10)
            hi = mid;
        else
            lo = mid;
    }
    fed_log(FED_LOG_ERROR, "aggregator: DP-FedAvg with --secagg: a draw of q %g from %u clients "
            "holds fewer than the %u a secure round needs with probability %.3g, over delta / 10 "
            "= %g; that round would be void, which the accounting does not cover: raise "
            "--fraction to %.4f or more (or --wait-clients)", d->q, c->agg.wait_clients, m,
            d->p_small, c->dp.delta / 10, ceil(hi * 1e4) / 1e4);
    return FED_ERR_INVAL;
}

fed_err fedi_node_agg_dp_new(fed_node *n)
{
    const fed_node_config *c = &n->cfg;
    node_agg *a = n->agg;
    agg_dp *d;
    double eps = 0, order = 0;
    fed_err e;

    if (!(c->dp.client_clip > 0))
        return FED_OK;
    if (fed_node_agg_is_async(n) || !fed_merge_traits_of(a->merge).weighted) {
        fed_log(FED_LOG_ERROR, "aggregator: DP-FedAvg (--dp-client-clip) takes synchronous "
                               "rounds and a weighted strategy (fedavg, fedavgm, fedprox, "
                               "fedadam, ...), not %s", fed_node_agg_is_async(n) ? "--mode async"
                                                                                 : c->agg.strategy);
        return FED_ERR_INVAL;
    }
    if (c->agg.wait_clients == 0) {
        fed_log(FED_LOG_ERROR, "aggregator: DP-FedAvg needs the population's size "
                               "(--wait-clients, or the allow-list's members)");
        return FED_ERR_INVAL;
    }
    if (c->allow) { /* a draw cut to fit would let one client push another out */
        size_t members = fed_crypto_allow_count(c->allow) -
                         (fed_crypto_allow_find(c->allow, n->key) != NULL);

        if (members > (size_t)a->max_clients) {
            fed_log(FED_LOG_ERROR, "aggregator: DP-FedAvg: the allow-list has %zu clients but a "
                    "round holds at most %d; a draw could be cut, which the accounting does "
                    "not cover: raise --wait-clients to %zu", members, a->max_clients, members);
            return FED_ERR_INVAL;
        }
    }
    if (!(d = fed_calloc(1, sizeof *d)))
        return FED_ERR_NOMEM;
    a->dp = d;
    d->q = c->agg.sample_fraction;
    d->cohort = c->agg.sample_fraction * (double)c->agg.wait_clients;
    d->clip = d->clip_next = c->dp.client_clip;
    d->z = c->dp.client_noise;
    if (c->dp.target_eps > 0) {
        if (c->rounds == 0) {
            fed_log(FED_LOG_ERROR, "aggregator: --dp-target-epsilon needs --rounds (the "
                                   "rounds it is spread over)");
            return FED_ERR_INVAL;
        }
        e = fed_rdp_sgm_calibrate(d->q, c->rounds, c->dp.delta, c->dp.target_eps, NULL, 0,
                                  &d->z, &eps, &order);
        if (e != FED_OK) {
            fed_log(FED_LOG_ERROR, "aggregator: no noise multiplier reaches epsilon %g in %u "
                                   "rounds at q %g: %s", c->dp.target_eps, c->rounds, d->q,
                    fed_strerror(e));
            return e;
        }
    }
    if (c->secagg.on && ((e = secagg_clip(n, d)) != FED_OK || (e = secagg_small_draw(n, d)) != FED_OK))
        return e;
    if (c->dp.client_quantile > 0)
        d->sigma_b = d->cohort / AGG_DP_COUNT_NOISE_SHARE;
    if ((e = fed_dp_fedavg_split(d->z, d->sigma_b, &d->z_delta)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "aggregator: adaptive clipping's count noise (sigma %g, the "
                               "expected cohort %g / 20) must exceed z / 2 = %g: more clients "
                               "a round or less noise", d->sigma_b, d->cohort, d->z / 2);
        return e;
    }
    if ((e = fed_dp_account_new(c->dp.delta, &d->acct)) != FED_OK)
        return e;
    if (!(d->sum = fed_malloc(a->nparams * sizeof *d->sum)))
        return FED_ERR_NOMEM;
    fed_crypto_keystream_init(&d->ks, n->env.random, n->env.self);
    fed_log(FED_LOG_INFO, "aggregator: DP-FedAvg (client-level; the aggregator adds the noise "
                          "and is trusted): q %g of %u clients (expected cohort %.4g), clip %g%s, "
                          "noise multiplier %.6g%s (update %.6g, count sigma %.4g), delta %g",
            d->q, c->agg.wait_clients, d->cohort, d->clip,
            c->dp.client_quantile > 0 ? " (adaptive)" : "", d->z,
            c->dp.target_eps > 0 ? " (calibrated)" : "", d->z_delta, d->sigma_b, c->dp.delta);
    if (c->dp.target_eps > 0)
        fed_log(FED_LOG_INFO, "aggregator: z %.6g spends epsilon %.6g (order %g) in %u rounds",
                d->z, eps, order, c->rounds);
    if (c->secagg.on)
        fed_log(FED_LOG_INFO, "aggregator: DP-FedAvg with --secagg: a draw too small for a "
                "secure round (void; outside the accounting) has probability %.3g a round, "
                "at most delta / 10 (larger is refused)", d->p_small);
    return FED_OK;
}

void fedi_node_agg_dp_free(node_agg *a)
{
    agg_dp *d = a->dp;

    if (!d)
        return;
    fed_dp_account_free(d->acct);
    fed_crypto_keystream_wipe(&d->ks);
    fed_free(d->sum);
    fed_free(d);
    a->dp = NULL;
}

fed_err fedi_node_agg_dp_start(fed_node *n, const fed_store_ckpt *ck)
{
    agg_dp *d = n->agg->dp;
    const fed_store_section *s = ck ? fed_store_ckpt_find(ck, AGG_CKPT_SEC_DP) : NULL;
    fed_err e;

    if (!d)
        return FED_OK;
    if ((e = fed_dp_account_load(d->acct, n->cfg.store)) != FED_OK)
        return e;
    d->epsilon = fed_dp_account_epsilon(d->acct);
    if (s && s->len == 8) {
        double clip = fed_get_f64le(s->data);

        if (clip > 0 && isfinite(clip))
            d->clip = d->clip_next = clip;
    }
    if (fed_dp_account_charges(d->acct))
        fed_log(FED_LOG_INFO, "aggregator: DP-FedAvg resumes at epsilon %.4f (%llu rounds "
                              "charged), clip %g", d->epsilon,
                (unsigned long long)fed_dp_account_charges(d->acct), d->clip);
    return FED_OK;
}

/* A uniform in [0, 1) from the keystream (53 bits). */
static double ks_uniform(agg_dp *d)
{
    uint8_t b[8];

    fed_crypto_keystream_random(&d->ks, b, sizeof b);
    return (double)(fed_get_u64le(b) >> 11) * 0x1p-53;
}

size_t fedi_node_agg_dp_sample(fed_node *n, agg_hold *holds, size_t nholds)
{
    agg_dp *d = n->agg->dp;
    size_t k = 0;

    for (size_t i = 0; i < nholds; i++) /* in key order: one draw each */
        if (ks_uniform(d) < d->q) {
            agg_hold t = holds[k];

            holds[k++] = holds[i];
            holds[i] = t;
        }
    if (k > (size_t)n->agg->max_clients) {
        fed_log(FED_LOG_WARN, "aggregator: the Poisson draw took %zu clients, more than a round "
                              "holds (%d): the rest wait (raise --wait-clients)", k,
                n->agg->max_clients);
        k = (size_t)n->agg->max_clients;
    }
    return k;
}

/* With secagg: the unmasked sum of the clipped deltas (each at weight 1,
 * so the summed weight is the count in it), none when the try failed. */
static void secagg_sum(node_agg *a)
{
    agg_dp *d = a->dp;
    double w = 0;
    const float *mean;

    if (!fedi_node_sa_agg_unmasked(a->sa))
        return;
    mean = fedi_node_sa_agg_mean(a->sa, &w);
    for (size_t j = 0; j < a->nparams; j++)
        d->sum[j] = (float)((double)mean[j] * w);
    for (size_t i = 0; i < a->nparts; i++) {
        fed_merge_result *r = &a->results[i];

        memset(r, 0, sizeof *r);
        r->verdict = a->parts[i].got ? FED_MERGE_USED : FED_MERGE_SKIPPED;
        r->share = a->parts[i].got ? 1.0 / d->cohort : 0;
        r->norm = -1; /* unseen: each client clipped its own */
    }
}

fed_err fedi_node_agg_dp_aggregate(fed_node *n, fed_merge_input *in, uint32_t *unclipped)
{
    node_agg *a = n->agg;
    agg_dp *d = a->dp;
    const fed_node_config *c = &n->cfg;
    float count = 0;
    uint32_t used = 0;
    fed_err e;

    memset(d->sum, 0, a->nparams * sizeof *d->sum);
    *unclipped = 0;
    if (a->sa)
        secagg_sum(a);
    for (size_t i = 0; i < a->nparts && !a->sa; i++) { /* parts are in key order */
        const agg_part *p = &a->parts[i];
        fed_merge_result *r = &a->results[i];
        double ss = 0, norm, s;
        float sf;

        memset(r, 0, sizeof *r);
        r->verdict = FED_MERGE_SKIPPED;
        r->norm = -1;
        if (!p->got)
            continue;
        for (size_t j = 0; j < a->nparams; j++)
            ss += (double)p->delta[j] * p->delta[j];
        norm = sqrt(ss);
        if (!isfinite(norm)) {
            r->verdict = FED_MERGE_REJECTED_NAN;
            r->err = FED_ERR_NAN;
            continue;
        }
        s = fed_dp_fedavg_scale(norm, d->clip);
        sf = (float)s;
        *unclipped += norm <= d->clip;
        used++;
        for (size_t j = 0; j < a->nparams; j++)
            d->sum[j] += sf * p->delta[j];
        r->verdict = FED_MERGE_USED;
        r->share = 1.0 / d->cohort;
        r->norm = norm;
        r->clip_scale = sf;
    }
    if ((e = fed_dp_add_noise(fed_crypto_keystream_random, &d->ks, d->sum, a->nparams,
                              d->z_delta * d->clip)) != FED_OK)
        return e;
    {
        float inv = (float)(1.0 / d->cohort);

        for (size_t j = 0; j < a->nparams; j++)
            d->sum[j] *= inv;
    }
    d->clip_next = d->clip;
    if (c->dp.client_quantile > 0) {
        /* centred, b_i - 1/2 (sensitivity 1/2), as the noise split assumes;
           the share is the noised sum over the expected cohort, plus 1/2 */
        count = (float)((double)*unclipped - 0.5 * used);
        if ((e = fed_dp_add_noise(fed_crypto_keystream_random, &d->ks, &count, 1, d->sigma_b)) !=
            FED_OK)
            return e;
        d->clip_next = fed_dp_fedavg_clip_next(d->clip, c->dp.client_clip_lr,
                                               (double)count / d->cohort + 0.5,
                                               c->dp.client_quantile);
    }
    memset(in, 0, sizeof *in);
    in->weight = 1;
    return fedi_node_agg_input_vec(n, 0, d->sum, &in->delta);
}

fed_err fedi_node_agg_dp_charge(fed_node *n, uint64_t round, uint64_t at_ms, double *eps)
{
    agg_dp *d = n->agg->dp;

    return fed_dp_account_charge(d->acct, n->cfg.store, round, at_ms, d->q, d->z, 1, eps);
}

void fedi_node_agg_dp_committed(fed_node *n, int ok, double eps)
{
    agg_dp *d = n->agg->dp;

    if (ok) {
        d->epsilon = eps;
        d->clip = d->clip_next;
    } else {
        d->clip_next = d->clip;
        if (fed_dp_account_load(d->acct, n->cfg.store) != FED_OK)
            fed_log(FED_LOG_ERROR, "aggregator: re-reading the privacy spent failed");
    }
}

double fedi_node_agg_dp_clip(const node_agg *a) { return a->dp->clip; }
double fedi_node_agg_dp_clip_next(const node_agg *a) { return a->dp->clip_next; }
double fedi_node_agg_dp_epsilon(const node_agg *a) { return a->dp->epsilon; }
double fedi_node_agg_dp_secagg_clip(const node_agg *a) { return a->dp->sa_clip; }
