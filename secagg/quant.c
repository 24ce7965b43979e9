/* quant.c - clipping, stochastic rounding into u32 words and back, and the
 * cohort check that keeps a sum of words from wrapping 2^32 (quant.h). */
#include "secagg/quant.h"

#include <math.h>
#include <stdio.h>

static void say(char *why, size_t cap, const char *msg)
{
    if (why && cap)
        snprintf(why, cap, "%s", msg);
}

static uint64_t levels(const fed_secagg_quant *q) /* L = 2^bits - 1 */
{
    return (q->bits >= 32 ? (UINT64_C(1) << 32) : (UINT64_C(1) << q->bits)) - 1;
}

static fed_err valid(const fed_secagg_quant *q, char *why, size_t cap)
{
    if (!q)
        return FED_ERR_INVAL;
    if (q->bits < 1 || q->bits > 32) {
        say(why, cap, "secagg: secagg-bits must be 1 to 32");
        return FED_ERR_INVAL;
    }
    if (!(q->range > 0) || !isfinite(q->range)) {
        say(why, cap, "secagg: the coordinate range must be a positive number");
        return FED_ERR_INVAL;
    }
    if (!(q->clip_norm >= 0) || !isfinite(q->clip_norm)) {
        say(why, cap, "secagg: the L2 clip must be 0 (none) or a positive number");
        return FED_ERR_INVAL;
    }
    return FED_OK;
}

fed_err fed_secagg_quant_check(const fed_secagg_quant *q, uint32_t max_clients, char *why,
                               size_t cap)
{
    fed_err err = valid(q, why, cap);
    uint64_t l, most_clients;
    uint32_t most_bits = 0;

    if (err != FED_OK)
        return err;
    if (max_clients == 0) {
        say(why, cap, "secagg: a round needs at least one client");
        return FED_ERR_INVAL;
    }
    l = levels(q);
    if ((uint64_t)max_clients * l <= UINT32_MAX)
        return FED_OK;
    most_clients = UINT32_MAX / l;
    while (most_bits < 32 && (uint64_t)max_clients * ((UINT64_C(1) << (most_bits + 1)) - 1) <=
                                 UINT32_MAX)
        most_bits++;
    if (why && cap)
        snprintf(why, cap,
                 "secagg: %u clients x (2^%u - 1) does not fit 2^32, so their sum would wrap: "
                 "set secagg-bits to %u or fewer, or sample at most %llu clients a round",
                 max_clients, q->bits, most_bits, (unsigned long long)most_clients);
    return FED_ERR_RANGE;
}

double fed_secagg_clip_scale(const fed_secagg_quant *q, const float *x, size_t n)
{
    double ss = 0, norm;

    if (!q || q->clip_norm <= 0)
        return 1.0;
    for (size_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    norm = sqrt(ss);
    return norm > q->clip_norm ? q->clip_norm / norm : 1.0;
}

fed_err fed_secagg_quantize(const fed_secagg_quant *q, const float *x, size_t n, fed_rng *rng,
                            uint32_t *out)
{
    fed_err err = valid(q, NULL, 0);
    double scale, step_inv;
    uint64_t l;

    if (err != FED_OK)
        return err;
    if ((n && (!x || !out)) || !rng)
        return FED_ERR_INVAL;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return FED_ERR_NAN;
    l = levels(q);
    scale = fed_secagg_clip_scale(q, x, n);
    step_inv = (double)l / (2 * q->range);
    for (size_t i = 0; i < n; i++) {
        double v = fmin(fmax((double)x[i] * scale, -q->range), q->range);
        double u = (v + q->range) * step_inv;
        double f = floor(u);
        uint64_t w = (uint64_t)f + (fed_rng_uniform(rng) < u - f);

        out[i] = (uint32_t)(w > l ? l : w);
    }
    return FED_OK;
}

fed_err fed_secagg_dequantize(const fed_secagg_quant *q, const uint32_t *sum, size_t n, uint32_t m,
                              float *out)
{
    fed_err err = valid(q, NULL, 0);
    double step, offset;

    if (err != FED_OK)
        return err;
    if (n && (!sum || !out))
        return FED_ERR_INVAL;
    step = 2 * q->range / (double)levels(q);
    offset = (double)m * q->range;
    for (size_t i = 0; i < n; i++)
        out[i] = (float)((double)sum[i] * step - offset);
    return FED_OK;
}

double fed_secagg_quant_bound(const fed_secagg_quant *q, uint32_t m)
{
    return (double)m * 2 * q->range / (double)levels(q);
}
