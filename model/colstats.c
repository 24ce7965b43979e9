/* colstats.c - a site's per-column count, missing count, sum and sum of
 * squares as fixed-point integers that add up exactly across sites, and
 * the pooled mean, std and missing rate read back from their totals
 * (colstats.h). */
#include "model/colstats.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef unsigned __int128 u128;

enum { AT_COUNT = 0, AT_MISSING = 1, AT_SUM = 2, SUM_LIMBS = 4, AT_SQ = 6, SQ_LIMBS = 6 };
_Static_assert(AT_SQ + SQ_LIMBS == FED_COLSTATS_INTS, "a column's integers");

/* A 192-bit unsigned accumulator, three 64-bit words, low first. */
typedef struct acc192 {
    uint64_t w[3];
} acc192;

static void acc_add(acc192 *a, u128 v)
{
    uint64_t lo = (uint64_t)v, hi = (uint64_t)(v >> 64);
    uint64_t c;

    a->w[0] += lo;
    c = a->w[0] < lo;
    a->w[1] += hi;
    uint64_t c2 = a->w[1] < hi;

    a->w[1] += c;
    c2 += a->w[1] < c;
    a->w[2] += c2;
}

/* The 32-bit limb l of a number given as 64-bit words w (low first). */
static int64_t limb(const uint64_t *w, int l)
{
    return (int64_t)((w[l / 2] >> (32 * (l % 2))) & UINT32_MAX);
}

static void say(char *why, size_t cap, size_t row, size_t col, double v)
{
    if (why && cap)
        snprintf(why, cap, "row %zu, column %zu: %g is outside the shared statistics' range "
                 "(|x| < 2^31)", row + 1, col + 1, v);
}

fed_err fed_colstats_local(const double *x, size_t n, size_t features, const uint8_t *skip,
                           uint64_t min_count, int64_t *out, size_t *suppressed, char *why,
                           size_t cap)
{
    if (suppressed)
        *suppressed = 0;
    if (n > FED_COLSTATS_MAX_ROWS) {
        if (why && cap)
            snprintf(why, cap, "%zu rows: the shared statistics take at most 2^40", n);
        return FED_ERR_RANGE;
    }
    memset(out, 0, features * FED_COLSTATS_INTS * sizeof *out);
    for (size_t j = 0; j < features; j++) {
        int64_t *o = out + j * FED_COLSTATS_INTS;
        uint64_t count = 0, missing = 0;
        u128 sum = 0; /* two's complement modulo 2^128: |sum| < 2^103 */
        acc192 sq = {{0, 0, 0}};

        if (skip && skip[j])
            continue;
        for (size_t i = 0; i < n; i++) {
            double v = x[i * features + j];
            int64_t q;

            if (isnan(v)) {
                missing++;
                continue;
            }
            if (!(fabs(v) < FED_COLSTATS_MAX_ABS)) {
                say(why, cap, i, j, v);
                return FED_ERR_RANGE;
            }
            q = (int64_t)llround(ldexp(v, FED_COLSTATS_SCALE_BITS)); /* |q| <= 2^63 - 2^10 */
            count++;
            sum += (u128)(__int128)q;
            acc_add(&sq, (u128)((__int128)q * q));
        }
        if (count < min_count) { /* nothing of it leaves, not even its missing count */
            if (suppressed)
                ++*suppressed;
            continue;
        }
        o[AT_COUNT] = (int64_t)count;
        o[AT_MISSING] = (int64_t)missing;
        {
            uint64_t w[2] = {(uint64_t)sum, (uint64_t)(sum >> 64)};

            for (int l = 0; l < SUM_LIMBS; l++)
                o[AT_SUM + l] = limb(w, l);
        }
        for (int l = 0; l < SQ_LIMBS; l++)
            o[AT_SQ + l] = limb(sq.w, l);
    }
    return FED_OK;
}

/* a -= v, 192 bits (v < 2^128). */
static void acc_sub(acc192 *a, u128 v)
{
    uint64_t lo = (uint64_t)v, hi = (uint64_t)(v >> 64);
    uint64_t b0 = a->w[0] < lo, b1;

    a->w[0] -= lo;
    b1 = a->w[1] < hi || (a->w[1] == hi && b0);
    a->w[1] -= hi + b0;
    a->w[2] -= b1;
}

/* a -= n m, 192 bits (m < 2^128). */
static void acc_sub_mul(acc192 *a, uint64_t n, u128 m)
{
    u128 lo = (u128)n * (uint64_t)m, hi = (u128)n * (uint64_t)(m >> 64);

    acc_sub(a, lo);
    a->w[2] -= (uint64_t)(hi >> 64); /* hi << 64: its high word into w[2] */
    acc_sub(a, hi << 64);
}

static long double acc_ld(const acc192 *a)
{
    return ldexpl((long double)a->w[2], 128) + ldexpl((long double)a->w[1], 64) +
           (long double)a->w[0];
}

fed_err fed_colstats_decode(const uint64_t *sum, size_t features, uint64_t min_count,
                            fed_colstat *out)
{
    for (size_t j = 0; j < features; j++) {
        const uint64_t *s = sum + j * FED_COLSTATS_INTS;
        fed_colstat *c = &out[j];
        u128 s1u = 0;
        __int128 s1, q, r;
        acc192 d = {{0, 0, 0}};
        long double mean, var, sd, n;

        memset(c, 0, sizeof *c);
        c->count = s[AT_COUNT];
        c->missing = s[AT_MISSING];
        if (c->count > FED_COLSTATS_MAX_ROWS || c->missing > FED_COLSTATS_MAX_ROWS)
            return FED_ERR_RANGE;
        c->missing_rate = c->count + c->missing
                              ? (double)c->missing / (double)(c->count + c->missing)
                              : 0.0;
        c->mean = 0.0;
        c->std = 1.0;
        if (c->count == 0 || c->count < min_count) {
            c->suppressed = 1;
            continue;
        }
        for (int l = SUM_LIMBS; l-- > 0;) /* exact modulo 2^128 */
            s1u = (s1u << 32) + (u128)s[AT_SUM + l];
        for (int l = SQ_LIMBS; l-- > 0;) { /* exact: 192 bits; a limb's sum may carry */
            d.w[2] = d.w[2] << 32 | d.w[1] >> 32;
            d.w[1] = d.w[1] << 32 | d.w[0] >> 32;
            d.w[0] <<= 32;
            acc_add(&d, s[AT_SQ + l]);
        }
        s1 = (__int128)s1u;
        /* s1 = N q + r, 0 <= r < N: the centred sum of squares
           D = S2 - s1^2 / N = S2 - N q^2 - 2 q r - r^2 / N, the first three
           terms exact in 192 bits (D >= r^2 / N >= 0), so no cancellation */
        q = s1 / (__int128)c->count;
        r = s1 % (__int128)c->count;
        if (r < 0) {
            q--;
            r += (__int128)c->count;
        }
        {
            u128 aq = (u128)(q < 0 ? -q : q), two_qr = 2 * aq * (u128)r;

            acc_sub_mul(&d, c->count, aq * aq);
            if (q >= 0)
                acc_sub(&d, two_qr);
            else
                acc_add(&d, two_qr);
        }
        if (d.w[2] >> 63) /* not a sum of squares: a bad contribution */
            return FED_ERR_RANGE;
        n = (long double)c->count;
        mean = ((long double)q + (long double)r / n) * ldexpl(1, -FED_COLSTATS_SCALE_BITS);
        var = (acc_ld(&d) - (long double)r * (long double)r / n) / n;
        sd = var > 0 ? sqrtl(var) * ldexpl(1, -FED_COLSTATS_SCALE_BITS) : 0;
        c->mean = (double)mean;
        /* a constant column (up to rounding of its mean) gets std 1, as a
           file's own statistics give it (model/data_csv.c) */
        c->std = sd > 1e-12L * fabsl(mean) && isfinite((double)sd) ? (double)sd : 1.0;
    }
    return FED_OK;
}
