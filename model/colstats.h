/* colstats.h - shared statistics of numeric columns (federated analytics):
 * what one site contributes per column (its count of present values, its
 * count of missing ones, the sum and the sum of squares of its values) as
 * integers that add up exactly across sites, through the integer secure sum
 * (node/agg_input_impl.h's INT64 segment) or in the clear, and the totals read
 * back as the pooled mean, standard deviation and missing rate.
 *
 * Fixed point: a value x becomes q = round(x 2^32), so |x| must be under
 * 2^31 (FED_COLSTATS_MAX_ABS). A column's contribution is
 * FED_COLSTATS_INTS integers: count, missing, sum q as a 128-bit two's
 * complement in 4 limbs of 32 bits, sum q^2 as a 192-bit number in 6 limbs
 * of 32 bits (low limbs first; each limb in [0, 2^32)). Summed over fewer
 * than 2^31 sites no limb sum can wrap 2^64, and the limb sums are joined
 * again exactly (sum q modulo 2^128, sum q^2 in 192 bits).
 *
 * Precision (fed_colstats_decode against the pooled file's own statistics
 * in exact arithmetic): each value moves by at most 2^-33 when rounded, so
 * the mean and the population std each move by at most 2^-33 (1.2e-10)
 * absolute; the centred sum of squares is computed exactly in integers
 * (sum q^2 - N a^2 - 2 a b with sum q = N a + b, in 192 bits), so no
 * cancellation enters however large the mean is against the std, and only
 * the final division and square root round (a relative 2^-52 with a 64-bit
 * long double, 2^-63 with x86's 80-bit one). Up to 2^40 rows in all. */
#ifndef FED_MODEL_COLSTATS_H
#define FED_MODEL_COLSTATS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"

#define FED_COLSTATS_SCALE_BITS 32
#define FED_COLSTATS_MAX_ABS 2147483648.0 /* 2^31: |x| must be below */
#define FED_COLSTATS_INTS 12              /* per column */
#define FED_COLSTATS_MAX_ROWS (UINT64_C(1) << 40)

/* One column's pooled statistics. */
typedef struct fed_colstat {
    uint64_t count;      /* present values, over the sites that released it */
    uint64_t missing;    /* missing values, likewise */
    double mean, std;    /* population std; a suppressed or constant column: 0, 1 */
    double missing_rate; /* missing / (count + missing); 0 when none */
    int suppressed;      /* count under the minimum (or none): mean 0, std 1 */
} fed_colstat;

/* A site's contribution from its raw values x (n rows of features columns,
 * row-major, NaN for a missing cell) into out (features *
 * FED_COLSTATS_INTS integers). A column flagged in skip (NULL: none; a
 * categorical column) or with fewer than min_count present values
 * contributes zeros (and is counted in *suppressed, which may be NULL).
 * FED_ERR_RANGE for a value whose magnitude is 2^31 or more, or more than
 * FED_COLSTATS_MAX_ROWS rows; why (cap bytes, may be NULL) names the row
 * and column (1-based). */
FED_WUR fed_err fed_colstats_local(const double *x, size_t n, size_t features, const uint8_t *skip,
                                   uint64_t min_count, int64_t *out, size_t *suppressed, char *why,
                                   size_t cap);

/* Contributions summed over sites (each integer summed modulo 2^64, as
 * fed_node_int_sum_fn gives them; or in the clear) into out[features]. A
 * column whose total count is under min_count (or 0) is suppressed. A
 * column whose std is below 1e-12 |mean| (constant up to rounding) gets
 * std 1, as a file's own statistics do. FED_ERR_RANGE when a total is not
 * a valid one (a count over FED_COLSTATS_MAX_ROWS: a client sent a bad
 * contribution). */
FED_WUR fed_err fed_colstats_decode(const uint64_t *sum, size_t features, uint64_t min_count,
                                    fed_colstat *out);

/* DP statistics (--feature-bounds): the bounds the aggregator declares and
 * the Gaussian noise each site adds to its integers before they leave.
 *
 * Mechanism: a site clips every present value of column j into
 * [lo[j], hi[j]] and contributes the statistics of x - c[j] (c the
 * bounds' centre, h = (hi - lo) / 2 their half-width), so one record moves
 * a column's count or missing count by 1, its sum by at most h and its sum
 * of squares by at most h^2. Divided by (1, h, h^2) the contribution's L2
 * sensitivity to adding or removing one record is sqrt(3 d) over d
 * columns; each site adds to the count and the missing count Gaussian
 * noise of sigma = noise sqrt(3 d), to the sum sigma h, to the sum of
 * squares sigma h^2 (in fixed point), so its own release is the Gaussian
 * mechanism at noise multiplier `noise` whoever sees it (the aggregator
 * without secure aggregation): RDP alpha / (2 noise^2), charged as one
 * step at sampling rate 1. The totals of m sites carry sqrt(m) times each
 * sigma. */
typedef struct fed_colstats_dp {
    const double *lo, *hi; /* (features) lo < hi, |lo|, |hi| < 2^30 */
    double noise;          /* the noise multiplier, > 0 */
    /* The values one record gives each column (images: a record is an
     * image, H x W pixel values a channel), up to 2^24; 0 or 1: one (CSV
     * rows). A record then moves a column's count by up to this many,
     * its sum and its sum of squares by this many times h and h^2: every
     * sigma above is multiplied by it, so the release stays the Gaussian
     * mechanism at `noise` for a whole record. */
    uint32_t record_values;
} fed_colstats_dp;

/* dp's bounds and noise valid for features columns (else FED_ERR_RANGE,
 * why naming the column). */
FED_WUR fed_err fed_colstats_dp_check(const fed_colstats_dp *dp, size_t features, char *why,
                                      size_t cap);
/* A site's clipped contribution (as fed_colstats_local, no minimum count:
 * under DP the noise protects a small column, and the totals' minimum
 * count applies) from raw values x: each present value of column j
 * clipped into dp's bounds, then centred. *clipped (may be NULL) gets the
 * number of values moved. */
FED_WUR fed_err fed_colstats_local_dp(const double *x, size_t n, size_t features,
                                      const uint8_t *skip, const fed_colstats_dp *dp, int64_t *out,
                                      size_t *clipped);
/* A site's contribution from byte values (image pixels: the statistics of
 * the byte b itself, 0..255, whatever the model maps it to), as
 * fed_colstats_local (dp NULL: a column with fewer than min_count values
 * contributes zeros) or fed_colstats_local_dp (dp set: every value clipped
 * into the column's bounds and centred, *clipped, which may be NULL,
 * getting how many moved) would give for the values themselves: column
 * j's hist[j * FED_COLSTATS_BYTE_VALUES + v] counts its values equal to v.
 * Exact, and linear in the histogram's size, not in the values'.
 * FED_ERR_RANGE when the counts add up to more than FED_COLSTATS_MAX_ROWS.
 * No missing values. */
#define FED_COLSTATS_BYTE_VALUES 256
FED_WUR fed_err fed_colstats_local_bytes(const uint64_t *hist, size_t features,
                                         uint64_t min_count, const fed_colstats_dp *dp,
                                         int64_t *out, size_t *clipped);
/* Gaussian noise at dp's calibration added to a contribution in place,
 * each normal draw from 16 bytes of random (a CSPRNG at a site; a seeded
 * fed_rng_random in tests). */
void fed_colstats_noise(int64_t *out, size_t features, const fed_colstats_dp *dp,
                        fed_random_fn random, void *random_ctx);
/* The standard deviation of one site's noise on column j's mean, in the
 * column's units, for a pooled count n of values (what a test or the docs
 * compare the totals with: sqrt(m) times it over m sites). */
double fed_colstats_dp_mean_sigma(const fed_colstats_dp *dp, size_t features, size_t j, double n);
/* Noised totals (of fed_colstats_local_dp + fed_colstats_noise) into
 * out[features]: the centre added back; a column whose noisy count is
 * under max(min_count, 2) suppressed; the mean clamped into the bounds, the
 * std into [h / 1000, h] (a noisy centred sum of squares at or under 0: h
 * / sqrt(3), a uniform spread over the bounds). Never FED_ERR_RANGE for
 * noise; the count reported is the noisy one rounded at 0. */
FED_WUR fed_err fed_colstats_decode_dp(const uint64_t *sum, size_t features, uint64_t min_count,
                                       const fed_colstats_dp *dp, fed_colstat *out);

#endif
