/* colstats.c - a site's per-column count, missing count, sum and sum of
 * squares as fixed-point integers that add up exactly across sites, and
 * the pooled mean, std and missing rate read back from their totals
 * (colstats.h). */
#include "model/colstats.h"

#include <assert.h>
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

/* One column's running count, missing count, sum of q and sum of q^2. */
typedef struct col_acc {
    uint64_t count, missing;
    u128 sum; /* two's complement modulo 2^128: |sum| < 2^103 */
    acc192 sq;
} col_acc;

/* times values of fixed point q (|q| < 2^63; q^2 times < 2^128) added. */
static void col_acc_add(col_acc *a, int64_t q, uint64_t times)
{
    a->count += times;
    a->sum += (u128)(__int128)q * times;
    acc_add(&a->sq, (u128)((__int128)q * q) * times);
}

/* The accumulated column as its FED_COLSTATS_INTS integers into o. */
static void col_acc_out(const col_acc *a, int64_t *o)
{
    uint64_t w[2] = {(uint64_t)a->sum, (uint64_t)(a->sum >> 64)};

    o[AT_COUNT] = (int64_t)a->count;
    o[AT_MISSING] = (int64_t)a->missing;
    for (int l = 0; l < SUM_LIMBS; l++)
        o[AT_SUM + l] = limb(w, l);
    for (int l = 0; l < SQ_LIMBS; l++)
        o[AT_SQ + l] = limb(a->sq.w, l);
}

/* v clipped into [lo, hi] and moved by -centre (counted in *clipped). */
static double clip_centre(double v, double lo, double hi, double centre, size_t *clipped)
{
    double c = v < lo ? lo : v > hi ? hi : v; /* +-inf clipped too */

    *clipped += c != v;
    return c - centre;
}

/* Column j's integers from its present values, each clipped into
 * [lo, hi] and moved by -centre when clip (counted in *clipped), into o.
 * FED_ERR_RANGE (why said) for a value out of the fixed point's range. */
static fed_err column_local(const double *x, size_t n, size_t features, size_t j, int clip,
                            double lo, double hi, double centre, int64_t *o, size_t *clipped,
                            char *why, size_t cap)
{
    col_acc a;

    memset(&a, 0, sizeof a);
    for (size_t i = 0; i < n; i++) {
        double v = x[i * features + j];

        if (isnan(v)) {
            a.missing++;
            continue;
        }
        if (clip)
            v = clip_centre(v, lo, hi, centre, clipped);
        if (!(fabs(v) < FED_COLSTATS_MAX_ABS)) {
            say(why, cap, i, j, v);
            return FED_ERR_RANGE;
        }
        /* |q| <= 2^63 - 2^10 */
        col_acc_add(&a, (int64_t)llround(ldexp(v, FED_COLSTATS_SCALE_BITS)), 1);
    }
    col_acc_out(&a, o);
    return FED_OK;
}

static fed_err rows_ok(size_t n, char *why, size_t cap)
{
    if (n <= FED_COLSTATS_MAX_ROWS)
        return FED_OK;
    if (why && cap)
        snprintf(why, cap, "%zu rows: the shared statistics take at most 2^40", n);
    return FED_ERR_RANGE;
}

fed_err fed_colstats_local(const double *x, size_t n, size_t features, const uint8_t *skip,
                           uint64_t min_count, int64_t *out, size_t *suppressed, char *why,
                           size_t cap)
{
    fed_err e;

    if (suppressed)
        *suppressed = 0;
    if ((e = rows_ok(n, why, cap)) != FED_OK)
        return e;
    memset(out, 0, features * FED_COLSTATS_INTS * sizeof *out);
    for (size_t j = 0; j < features; j++) {
        int64_t *o = out + j * FED_COLSTATS_INTS;

        if (skip && skip[j])
            continue;
        if ((e = column_local(x, n, features, j, 0, 0, 0, 0, o, NULL, why, cap)) != FED_OK)
            return e;
        if ((uint64_t)o[AT_COUNT] < min_count) { /* nothing of it leaves, not even its missing count */
            memset(o, 0, FED_COLSTATS_INTS * sizeof *o);
            if (suppressed)
                ++*suppressed;
        }
    }
    return FED_OK;
}

fed_err fed_colstats_dp_check(const fed_colstats_dp *dp, size_t features, char *why, size_t cap)
{
    if (!(dp->noise > 0) || !isfinite(dp->noise)) {
        if (why && cap)
            snprintf(why, cap, "the statistics' noise multiplier %g is not a number over 0",
                     dp->noise);
        return FED_ERR_RANGE;
    }
    if (dp->record_values > (1u << 24)) {
        if (why && cap)
            snprintf(why, cap, "%u values a record: at most 2^24", dp->record_values);
        return FED_ERR_RANGE;
    }
    for (size_t j = 0; j < features; j++)
        if (!(dp->lo[j] < dp->hi[j]) || !(fabs(dp->lo[j]) < FED_COLSTATS_MAX_ABS / 2) ||
            !(fabs(dp->hi[j]) < FED_COLSTATS_MAX_ABS / 2)) {
            if (why && cap)
                snprintf(why, cap, "column %zu: the bounds %g:%g are not LO < HI with |LO|, "
                         "|HI| < 2^30", j + 1, dp->lo[j], dp->hi[j]);
            return FED_ERR_RANGE;
        }
    return FED_OK;
}

fed_err fed_colstats_local_dp(const double *x, size_t n, size_t features, const uint8_t *skip,
                              const fed_colstats_dp *dp, int64_t *out, size_t *clipped)
{
    size_t moved = 0;
    fed_err e;

    assert(fed_colstats_dp_check(dp, features, NULL, 0) == FED_OK);
    if ((e = rows_ok(n, NULL, 0)) != FED_OK)
        return e;
    memset(out, 0, features * FED_COLSTATS_INTS * sizeof *out);
    for (size_t j = 0; j < features && e == FED_OK; j++)
        if (!(skip && skip[j]))
            e = column_local(x, n, features, j, 1, dp->lo[j], dp->hi[j],
                             (dp->lo[j] + dp->hi[j]) / 2, out + j * FED_COLSTATS_INTS, &moved,
                             NULL, 0);
    if (clipped)
        *clipped = moved;
    return e; /* clipped values are within 2^30: never out of range */
}

fed_err fed_colstats_local_bytes(const uint64_t *hist, size_t features, uint64_t min_count,
                                 const fed_colstats_dp *dp, int64_t *out, size_t *clipped)
{
    size_t moved = 0;
    uint64_t total = 0;

    assert(!dp || fed_colstats_dp_check(dp, features, NULL, 0) == FED_OK);
    for (size_t j = 0; j < features; j++)
        for (int v = 0; v < FED_COLSTATS_BYTE_VALUES; v++) {
            uint64_t h = hist[j * FED_COLSTATS_BYTE_VALUES + (size_t)v];

            if (h > FED_COLSTATS_MAX_ROWS - total)
                return rows_ok(FED_COLSTATS_MAX_ROWS + 1, NULL, 0);
            total += h;
        }
    memset(out, 0, features * FED_COLSTATS_INTS * sizeof *out);
    for (size_t j = 0; j < features; j++) {
        const uint64_t *h = hist + j * FED_COLSTATS_BYTE_VALUES;
        int64_t *o = out + j * FED_COLSTATS_INTS;
        col_acc a;

        memset(&a, 0, sizeof a);
        for (int v = 0; v < FED_COLSTATS_BYTE_VALUES; v++) {
            double x = v;
            size_t one = 0;

            if (!h[v])
                continue;
            if (dp) {
                x = clip_centre(x, dp->lo[j], dp->hi[j], (dp->lo[j] + dp->hi[j]) / 2, &one);
                moved += one * h[v];
            }
            col_acc_add(&a, (int64_t)llround(ldexp(x, FED_COLSTATS_SCALE_BITS)), h[v]);
        }
        col_acc_out(&a, o);
        if (!dp && a.count < min_count)
            memset(o, 0, FED_COLSTATS_INTS * sizeof *o);
    }
    if (clipped)
        *clipped = moved;
    return FED_OK;
}

/* One standard normal from 16 random bytes (Box-Muller, 53-bit uniforms). */
static long double normal_of(fed_random_fn random, void *ctx)
{
    uint8_t b[16];
    uint64_t u[2];
    long double u1, u2;

    random(ctx, b, sizeof b);
    memcpy(u, b, sizeof u);
    u1 = ((long double)(u[0] >> 11) + 1) * ldexpl(1, -53); /* (0, 1] */
    u2 = (long double)(u[1] >> 11) * ldexpl(1, -53);
    return sqrtl(-2 * logl(u1)) * cosl(2 * 3.14159265358979323846264338327950288L * u2);
}

/* v rounded into 192-bit two's complement words (|v| < 2^190). */
static void ld_words(long double v, uint64_t w[3])
{
    long double a = roundl(fabsl(v)), t;
    acc192 r = {{0, 0, 0}};

    t = floorl(ldexpl(a, -128));
    r.w[2] = (uint64_t)t;
    a -= ldexpl(t, 128);
    t = floorl(ldexpl(a, -64));
    r.w[1] = (uint64_t)t;
    a -= ldexpl(t, 64);
    r.w[0] = (uint64_t)a;
    if (v < 0) { /* -r = ~r + 1 */
        acc192 z = {{~r.w[0], ~r.w[1], ~r.w[2]}};

        acc_add(&z, 1);
        r = z;
    }
    memcpy(w, r.w, sizeof r.w);
}

/* limbs (32 bits each, nl of them, low first) += w modulo 2^(32 nl). */
static void limbs_add(int64_t *limbs, int nl, const uint64_t w[3])
{
    uint64_t carry = 0;

    for (int l = 0; l < nl; l++) {
        uint64_t v = (uint64_t)limbs[l] + (uint64_t)limb(w, l) + carry;

        limbs[l] = (int64_t)(v & UINT32_MAX);
        carry = v >> 32;
    }
}

static double dp_sigma(const fed_colstats_dp *dp, size_t features)
{
    double per = dp->record_values > 1 ? (double)dp->record_values : 1.0;

    return dp->noise * sqrt(3.0 * (double)features) * per;
}

void fed_colstats_noise(int64_t *out, size_t features, const fed_colstats_dp *dp,
                        fed_random_fn random, void *random_ctx)
{
    long double sigma = dp_sigma(dp, features);

    for (size_t j = 0; j < features; j++) {
        int64_t *o = out + j * FED_COLSTATS_INTS;
        long double h = ((long double)dp->hi[j] - dp->lo[j]) / 2;
        uint64_t w[3];

        o[AT_COUNT] = (int64_t)((uint64_t)o[AT_COUNT] +
                                (uint64_t)(int64_t)llroundl(sigma * normal_of(random, random_ctx)));
        o[AT_MISSING] = (int64_t)((uint64_t)o[AT_MISSING] +
                                  (uint64_t)(int64_t)llroundl(sigma * normal_of(random, random_ctx)));
        ld_words(sigma * h * ldexpl(normal_of(random, random_ctx), FED_COLSTATS_SCALE_BITS), w);
        limbs_add(o + AT_SUM, SUM_LIMBS, w);
        ld_words(sigma * h * h * ldexpl(normal_of(random, random_ctx),
                                        2 * FED_COLSTATS_SCALE_BITS), w);
        limbs_add(o + AT_SQ, SQ_LIMBS, w);
    }
}

double fed_colstats_dp_mean_sigma(const fed_colstats_dp *dp, size_t features, size_t j, double n)
{
    return dp_sigma(dp, features) * (dp->hi[j] - dp->lo[j]) / 2 / n;
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

/* Column s's totals into c. With dp (column j's bounds): the counts
 * signed and rounded at 0, the centre added back, a negative centred sum
 * of squares not an error, the mean and std clamped (colstats.h). */
static fed_err column_decode(const uint64_t *s, uint64_t min_count, const fed_colstats_dp *dp,
                             size_t j, fed_colstat *c)
{
    u128 s1u = 0;
    __int128 s1, q, r;
    acc192 d = {{0, 0, 0}};
    long double mean, var, sd, n;
    int negative;

    memset(c, 0, sizeof *c);
    c->count = s[AT_COUNT];
    c->missing = s[AT_MISSING];
    if (dp) {
        c->count = (int64_t)c->count < 0 ? 0 : c->count;
        c->missing = (int64_t)c->missing < 0 ? 0 : c->missing;
        if (min_count < 2)
            min_count = 2;
    }
    if (c->count > FED_COLSTATS_MAX_ROWS || c->missing > FED_COLSTATS_MAX_ROWS)
        return FED_ERR_RANGE;
    c->missing_rate = c->count + c->missing
                          ? (double)c->missing / (double)(c->count + c->missing)
                          : 0.0;
    c->mean = 0.0;
    c->std = 1.0;
    if (c->count == 0 || c->count < min_count) {
        c->suppressed = 1;
        return FED_OK;
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
    negative = (int)(d.w[2] >> 63);
    if (negative && !dp) /* not a sum of squares: a bad contribution */
        return FED_ERR_RANGE;
    n = (long double)c->count;
    mean = ((long double)q + (long double)r / n) * ldexpl(1, -FED_COLSTATS_SCALE_BITS);
    var = negative ? 0 : (acc_ld(&d) - (long double)r * (long double)r / n) / n;
    sd = var > 0 ? sqrtl(var) * ldexpl(1, -FED_COLSTATS_SCALE_BITS) : 0;
    if (dp) {
        long double lo = dp->lo[j], hi = dp->hi[j], h = (hi - lo) / 2;

        mean += (lo + hi) / 2;
        mean = mean < lo ? lo : mean > hi ? hi : mean;
        sd = !(sd > 0) ? h / sqrtl(3) : sd < h / 1000 ? h / 1000 : sd > h ? h : sd;
        c->mean = (double)mean;
        c->std = (double)sd;
        return FED_OK;
    }
    c->mean = (double)mean;
    /* a constant column (up to rounding of its mean) gets std 1, as a
       file's own statistics give it (model/data_csv.c) */
    c->std = sd > 1e-12L * fabsl(mean) && isfinite((double)sd) ? (double)sd : 1.0;
    return FED_OK;
}

fed_err fed_colstats_decode(const uint64_t *sum, size_t features, uint64_t min_count,
                            fed_colstat *out)
{
    fed_err e = FED_OK;

    for (size_t j = 0; j < features && e == FED_OK; j++)
        e = column_decode(sum + j * FED_COLSTATS_INTS, min_count, NULL, j, &out[j]);
    return e;
}

fed_err fed_colstats_decode_dp(const uint64_t *sum, size_t features, uint64_t min_count,
                               const fed_colstats_dp *dp, fed_colstat *out)
{
    fed_err e = FED_OK;

    assert(dp);
    for (size_t j = 0; j < features && e == FED_OK; j++)
        e = column_decode(sum + j * FED_COLSTATS_INTS, min_count, dp, j, &out[j]);
    return e;
}
