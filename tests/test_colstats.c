/* test_colstats.c - shared statistics (model/colstats.h): three sites'
 * contributions, summed in the clear and through the integer secure sum
 * (limbs under masks that cancel), give the pooled data's mean and std
 * within the stated precision on columns at very different scales (a mean
 * of 1e6 with std 1, a std of 1e-3, values near +-2^31, negative ones);
 * missing cells counted; the minimum count suppresses a site's column and
 * a total's; out-of-range values refused naming row and column; CSV files
 * against the pooled file's own statistics; images' channels from byte
 * histograms, the same integers as the pixels themselves give. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "model/colstats.h"
#include "model/data.h"
#include "node/agg_input_impl.h"
#include "tests/support/support.h"

enum { SITES = 3, COLS = 5, ROWS = 400 };

static const size_t site_rows[SITES] = {100, 170, 130};

/* column j's value for pooled row i */
static double value(fed_rng *r, size_t j)
{
    double g = fed_rng_normal(r);

    switch (j) {
    case 0: return 1e6 + g;                 /* mean >> std */
    case 1: return 1e-3 * g;                /* tiny spread */
    case 2: return (fed_rng_uniform(r) * 2 - 1) * 2.1e9; /* near +-2^31 */
    case 3: return -50 + 10 * g;            /* negative */
    default: return floor(g * 3);           /* integers */
    }
}

/* The pooled data (ROWS x COLS, row-major) and its two-pass statistics. */
static void pooled(double *x, double *mean, double *sd)
{
    fed_rng r;

    fed_rng_seed(&r, 35);
    for (size_t i = 0; i < ROWS; i++)
        for (size_t j = 0; j < COLS; j++)
            x[i * COLS + j] = value(&r, j);
    for (size_t j = 0; j < COLS; j++) {
        long double m = 0, v = 0;

        for (size_t i = 0; i < ROWS; i++)
            m += x[i * COLS + j];
        m /= ROWS;
        for (size_t i = 0; i < ROWS; i++)
            v += (x[i * COLS + j] - m) * (x[i * COLS + j] - m);
        mean[j] = (double)m;
        sd[j] = (double)sqrtl(v / ROWS);
    }
}

/* The stated precision: 2^-33 for each value's rounding to 2^-32, plus
 * the final rounding (the centred sum of squares is exact: no
 * cancellation term, even with a mean 1e6 times the std). */
static void within(const fed_colstat *c, double mean, double sd)
{
    double tm = ldexp(1, -33) + 4e-16 * fabs(mean);
    double ts = ldexp(1, -33) + 4e-16 * sd;

    if (fabs(c->mean - mean) > tm || fabs(c->std - sd) > ts)
        fail_msg("mean %.17g (want %.17g, tol %g), std %.17g (want %.17g, tol %g)", c->mean,
                 mean, tm, c->std, sd, ts);
}

static void contributions(const double *x, uint64_t min_count, int64_t c[SITES][COLS * FED_COLSTATS_INTS])
{
    size_t at = 0;

    for (int s = 0; s < SITES; s++) {
        size_t sup = 9;

        assert_int_equal(fed_colstats_local(x + at * COLS, site_rows[s], COLS, NULL, min_count,
                                            c[s], &sup, NULL, 0),
                         FED_OK);
        assert_int_equal(sup, 0);
        at += site_rows[s];
    }
}

static void test_plain_totals(void **state)
{
    static double x[ROWS * COLS];
    static int64_t c[SITES][COLS * FED_COLSTATS_INTS];
    uint64_t tot[COLS * FED_COLSTATS_INTS] = {0};
    double mean[COLS], sd[COLS];
    fed_colstat st[COLS];

    (void)state;
    pooled(x, mean, sd);
    contributions(x, 0, c);
    for (int s = 0; s < SITES; s++)
        for (size_t k = 0; k < COLS * FED_COLSTATS_INTS; k++)
            tot[k] += (uint64_t)c[s][k];
    assert_int_equal(fed_colstats_decode(tot, COLS, 0, st), FED_OK);
    for (size_t j = 0; j < COLS; j++) {
        assert_int_equal(st[j].count, ROWS);
        assert_int_equal(st[j].missing, 0);
        assert_false(st[j].suppressed);
        within(&st[j], mean[j], sd[j]);
    }
    /* every limb is a 32-bit number: no site's limb can make a sum wrap */
    for (int s = 0; s < SITES; s++)
        for (size_t j = 0; j < COLS; j++)
            for (int l = 2; l < FED_COLSTATS_INTS; l++)
                assert_true(c[s][j * FED_COLSTATS_INTS + l] >= 0 &&
                            c[s][j * FED_COLSTATS_INTS + l] <= (int64_t)UINT32_MAX);
}

/* sites' contributions (each ni integers, c + s * ni) summed through the
 * integer secure sum into tot: each site's integers as INT64 limbs of 20
 * bits, masked with pair streams that cancel mod 2^32. */
static void secure_sum(const int64_t *c, int sites, size_t ni, uint64_t *tot)
{
    enum { BITS = 20 };
    agg_segment seg = {.name = "stats", .len = ni, .rule = AGG_WEIGHT_SUM, .enc = AGG_ENC_INT64};
    size_t words = fedi_agg_seg_words(&seg, 1, BITS);
    uint32_t *q = calloc((size_t)sites * words, sizeof *q), *sum = calloc(words, sizeof *sum);
    fed_rng rng;

    assert_non_null(q);
    assert_non_null(sum);
    assert_int_equal(words, ni * 4);
    fed_rng_seed(&rng, 36);
    for (int s = 0; s < sites; s++)
        assert_int_equal(fedi_agg_seg_quantize(&seg, 1, BITS, NULL, c + (size_t)s * ni, &rng,
                                               q + (size_t)s * words),
                         FED_OK);
    for (int s = 0; s + 1 < sites; s++)
        for (size_t w = 0; w < words; w++) {
            uint32_t mk = (uint32_t)fed_rng_u64(&rng);

            q[(size_t)s * words + w] += mk;
            q[(size_t)(s + 1) * words + w] -= mk;
        }
    for (int s = 0; s < sites; s++)
        for (size_t w = 0; w < words; w++)
            sum[w] += q[(size_t)s * words + w];
    assert_int_equal(fedi_agg_seg_dequantize(&seg, 1, BITS, sum, (uint32_t)sites, NULL, tot), FED_OK);
    free(q);
    free(sum);
}

/* The same totals through the integer secure sum. */
static void test_secure_totals(void **state)
{
    enum { NI = COLS * FED_COLSTATS_INTS };
    static double x[ROWS * COLS];
    static int64_t c[SITES][NI];
    uint64_t tot[NI];
    double mean[COLS], sd[COLS];
    fed_colstat st[COLS];

    (void)state;
    pooled(x, mean, sd);
    contributions(x, 0, c);
    secure_sum(&c[0][0], SITES, NI, tot);
    assert_int_equal(fed_colstats_decode(tot, COLS, 0, st), FED_OK);
    for (size_t j = 0; j < COLS; j++) {
        assert_int_equal(st[j].count, ROWS);
        within(&st[j], mean[j], sd[j]);
    }
}

/* Images: three sites' RGB images (channels of very different means: red
 * near 220, green near 30, blue over the whole range), each site's
 * contribution from its byte histograms a channel (fed_data_channel_hist,
 * fed_colstats_local_bytes): the very integers the values themselves give
 * (fed_colstats_local over the bytes as numbers, and clipped under DP
 * bounds), and the totals, in the clear and through the secure sum, the
 * pooled pixels' mean and std within the stated precision. */
enum { IMG_C = 3, IMG_H = 5, IMG_W = 4, IMG_PLANE = IMG_H * IMG_W };

static void test_image_channels(void **state)
{
    enum { NI = IMG_C * FED_COLSTATS_INTS, FEAT = IMG_C * IMG_PLANE };
    static const size_t site_images[SITES] = {7, 19, 11};
    static int64_t c[SITES][NI], cx[NI], cdp[NI], cdx[NI];
    uint64_t hist[IMG_C * FED_COLSTATS_BYTE_VALUES], tot[NI] = {0}, stot[NI];
    long double sum[IMG_C] = {0}, sq[IMG_C] = {0};
    size_t nall = 0, clipped = 0, clipped_x = 0;
    double lo[IMG_C] = {100, 0, 0}, hi[IMG_C] = {230, 255, 64};
    fed_colstats_dp dp = {lo, hi, 1.0, 0};
    fed_colstat st[IMG_C];
    fed_rng r;

    (void)state;
    fed_rng_seed(&r, 37);
    for (int s = 0; s < SITES; s++) {
        fed_dataset d = {.n = site_images[s], .shape = {IMG_C, IMG_H, IMG_W, 2, 0},
                         .features = FEAT};
        double *v = malloc(site_images[s] * IMG_PLANE * IMG_C * sizeof *v);

        assert_non_null(d.x_u8 = malloc(d.n * FEAT));
        assert_non_null(v);
        for (size_t i = 0; i < d.n; i++)
            for (size_t k = 0; k < IMG_C; k++)
                for (size_t p = 0; p < IMG_PLANE; p++) {
                    double g = fed_rng_normal(&r);
                    double b = k == 0 ? 220 + 12 * g : k == 1 ? 30 + 4 * g
                                                             : (double)fed_rng_below(&r, 256);
                    uint8_t u = (uint8_t)(b < 0 ? 0 : b > 255 ? 255 : b);

                    d.x_u8[i * FEAT + k * IMG_PLANE + p] = u;
                    v[(i * IMG_PLANE + p) * IMG_C + k] = u; /* a row a pixel */
                    sum[k] += u;
                }
        fed_data_channel_hist(&d, NULL, d.n, hist);
        assert_int_equal(fed_colstats_local_bytes(hist, IMG_C, 0, NULL, c[s], NULL), FED_OK);
        /* the values themselves, a pixel a row and a channel a column */
        assert_int_equal(fed_colstats_local(v, d.n * IMG_PLANE, IMG_C, NULL, 0, cx, NULL, NULL, 0),
                         FED_OK);
        assert_memory_equal(c[s], cx, sizeof cx);
        assert_int_equal(fed_colstats_local_bytes(hist, IMG_C, 0, &dp, cdp, &clipped), FED_OK);
        assert_int_equal(fed_colstats_local_dp(v, d.n * IMG_PLANE, IMG_C, NULL, &dp, cdx,
                                               &clipped_x), FED_OK);
        assert_memory_equal(cdp, cdx, sizeof cdx);
        assert_int_equal(clipped, clipped_x);
        assert_true(clipped > 0);
        /* a channel under the minimum count releases nothing */
        assert_int_equal(fed_colstats_local_bytes(hist, IMG_C, d.n * IMG_PLANE + 1, NULL, cx, NULL),
                         FED_OK);
        for (size_t k = 0; k < NI; k++)
            assert_int_equal(cx[k], 0);
        for (size_t k = 0; k < NI; k++)
            tot[k] += (uint64_t)c[s][k];
        nall += d.n * IMG_PLANE;
        free(v);
        free(d.x_u8);
    }
    secure_sum(&c[0][0], SITES, NI, stot);
    assert_memory_equal(tot, stot, sizeof tot);
    assert_int_equal(fed_colstats_decode(tot, IMG_C, 0, st), FED_OK);
    fed_rng_seed(&r, 37); /* the pooled pixels again, for their centred squares */
    for (int s = 0; s < SITES; s++)
        for (size_t i = 0; i < site_images[s]; i++)
            for (size_t k = 0; k < IMG_C; k++)
                for (size_t p = 0; p < IMG_PLANE; p++) {
                    double g = fed_rng_normal(&r);
                    double b = k == 0 ? 220 + 12 * g : k == 1 ? 30 + 4 * g
                                                             : (double)fed_rng_below(&r, 256);
                    long double u = (uint8_t)(b < 0 ? 0 : b > 255 ? 255 : b), m = sum[k] / nall;

                    sq[k] += (u - m) * (u - m);
                }
    for (size_t k = 0; k < IMG_C; k++) {
        assert_int_equal(st[k].count, nall);
        within(&st[k], (double)(sum[k] / nall), (double)sqrtl(sq[k] / nall));
    }
    assert_true(st[0].mean > 200 && st[1].mean < 40); /* the channels kept apart */
}

/* Missing cells counted, not summed; the minimum count: a site's column
 * under it releases nothing, a total under it is suppressed. */
static void test_missing_and_min_count(void **state)
{
    /* site A: 4 rows, column 1 has 2 present; site B: 3 rows, all present */
    const double a[4 * 2] = {1, NAN, 2, 5, 3, NAN, 4, 7};
    const double b[3 * 2] = {10, 1, 20, 2, 30, 3};
    int64_t ca[2 * FED_COLSTATS_INTS], cb[2 * FED_COLSTATS_INTS];
    uint64_t tot[2 * FED_COLSTATS_INTS];
    fed_colstat st[2];
    size_t sup;

    (void)state;
    assert_int_equal(fed_colstats_local(a, 4, 2, NULL, 0, ca, &sup, NULL, 0), FED_OK);
    assert_int_equal(fed_colstats_local(b, 3, 2, NULL, 0, cb, &sup, NULL, 0), FED_OK);
    for (size_t k = 0; k < 2 * FED_COLSTATS_INTS; k++)
        tot[k] = (uint64_t)ca[k] + (uint64_t)cb[k];
    assert_int_equal(fed_colstats_decode(tot, 2, 0, st), FED_OK);
    assert_int_equal(st[0].count, 7);
    assert_true(fabs(st[0].mean - 70.0 / 7) < 1e-12);
    assert_int_equal(st[1].count, 5);
    assert_int_equal(st[1].missing, 2);
    assert_true(fabs(st[1].missing_rate - 2.0 / 7) < 1e-15);
    assert_true(fabs(st[1].mean - 18.0 / 5) < 1e-12);
    /* min count 3: site A's column 1 (2 present) releases nothing */
    assert_int_equal(fed_colstats_local(a, 4, 2, NULL, 3, ca, &sup, NULL, 0), FED_OK);
    assert_int_equal(sup, 1);
    for (int l = 0; l < FED_COLSTATS_INTS; l++)
        assert_int_equal(ca[FED_COLSTATS_INTS + l], 0);
    for (size_t k = 0; k < 2 * FED_COLSTATS_INTS; k++)
        tot[k] = (uint64_t)ca[k] + (uint64_t)cb[k];
    assert_int_equal(fed_colstats_decode(tot, 2, 0, st), FED_OK);
    assert_int_equal(st[1].count, 3);
    assert_true(fabs(st[1].mean - 2.0) < 1e-12);
    /* a total under the minimum: suppressed, mean 0, std 1 */
    assert_int_equal(fed_colstats_decode(tot, 2, 4, st), FED_OK);
    assert_false(st[0].suppressed);
    assert_true(st[1].suppressed && st[1].mean == 0 && st[1].std == 1);
    /* a skipped (categorical) column contributes zeros */
    {
        const uint8_t skip[2] = {1, 0};

        assert_int_equal(fed_colstats_local(b, 3, 2, skip, 0, cb, &sup, NULL, 0), FED_OK);
        for (int l = 0; l < FED_COLSTATS_INTS; l++)
            assert_int_equal(cb[l], 0);
    }
    /* a constant column gets std 1 */
    {
        const double k[3] = {0.1, 0.1, 0.1};
        int64_t ck[FED_COLSTATS_INTS];
        uint64_t tk[FED_COLSTATS_INTS];

        assert_int_equal(fed_colstats_local(k, 3, 1, NULL, 0, ck, &sup, NULL, 0), FED_OK);
        for (int l = 0; l < FED_COLSTATS_INTS; l++)
            tk[l] = (uint64_t)ck[l];
        assert_int_equal(fed_colstats_decode(tk, 1, 0, st), FED_OK);
        assert_true(fabs(st[0].mean - 0.1) < 1e-9 && st[0].std == 1.0);
    }
}

static void test_refusals(void **state)
{
    const double x[2 * 2] = {1, 2, 3, 2147483648.0};
    int64_t c[2 * FED_COLSTATS_INTS];
    uint64_t bad[FED_COLSTATS_INTS] = {0};
    char why[160] = "";
    fed_colstat st;

    (void)state;
    assert_int_equal(fed_colstats_local(x, 2, 2, NULL, 0, c, NULL, why, sizeof why),
                     FED_ERR_RANGE);
    assert_string_equal(why, "row 2, column 2: 2.14748e+09 is outside the shared statistics' "
                             "range (|x| < 2^31)");
    bad[0] = FED_COLSTATS_MAX_ROWS + 1;
    assert_int_equal(fed_colstats_decode(bad, 1, 0, &st), FED_ERR_RANGE);
}

/* Three CSV files against the pooled file: its own statistics (a file's
 * standardization, fed_data_csv_stats) within the stated precision. */
static void test_csv_sites(void **state)
{
    static double x[ROWS * COLS];
    double mean[COLS], sd[COLS], *pm = NULL, *ps = NULL;
    uint64_t tot[COLS * FED_COLSTATS_INTS] = {0};
    char path[512];
    fed_colstat st[COLS];
    size_t at = 0, f = 0, sup = 0;
    FILE *all;

    (void)state;
    pooled(x, mean, sd);
    fed_test_path(path, sizeof path, "all.csv");
    assert_non_null(all = fopen(path, "w"));
    fprintf(all, "a,b,c,d,e,label\n");
    for (int s = 0; s < SITES; s++) {
        char sp[512], name[32];
        FILE *fs;
        int64_t *ci = NULL;

        snprintf(name, sizeof name, "site%d.csv", s);
        fed_test_path(sp, sizeof sp, name);
        assert_non_null(fs = fopen(sp, "w"));
        fprintf(fs, "a,b,c,d,e,label\n");
        for (size_t i = at; i < at + site_rows[s]; i++) {
            for (size_t j = 0; j < COLS; j++) {
                fprintf(fs, "%.17g,", x[i * COLS + j]);
                fprintf(all, "%.17g,", x[i * COLS + j]);
            }
            fprintf(fs, "%d\n", (int)(i % 2));
            fprintf(all, "%d\n", (int)(i % 2));
        }
        assert_int_equal(fclose(fs), 0);
        at += site_rows[s];
        assert_int_equal(fed_data_csv_colstats(sp, NULL, NULL, 0, 0, &ci, &f, &sup), FED_OK);
        assert_int_equal(f, COLS);
        for (size_t k = 0; k < COLS * FED_COLSTATS_INTS; k++)
            tot[k] += (uint64_t)ci[k];
        fed_free(ci);
    }
    assert_int_equal(fclose(all), 0);
    assert_int_equal(fed_data_csv_stats(path, NULL, &pm, &ps, &f), FED_OK);
    assert_int_equal(fed_colstats_decode(tot, COLS, 0, st), FED_OK);
    for (size_t j = 0; j < COLS; j++)
        within(&st[j], pm[j], ps[j]);
    fed_free(pm);
    fed_free(ps);
}

/* DP statistics: three sites clip into bounds and add seeded noise. With a
 * vanishing noise the totals read back as the clipped pooled data's exact
 * statistics (the centring undone); at noise 1 each mean is within 4
 * sigma of the exact one (sigma: fed_colstats_dp_mean_sigma times
 * sqrt(3 sites)) over several seeds, and each std within its bound. */
enum { DP_COLS = 4, DP_ROWS = 3000 };

static void dp_run(double noise, uint64_t seed, const double *x, fed_colstat *st, size_t *clipped)
{
    static const double lo[DP_COLS] = {-10, 0, 100, -1}, hi[DP_COLS] = {10, 50, 300, 1};
    fed_colstats_dp dp = {lo, hi, noise, 0};
    int64_t c[DP_COLS * FED_COLSTATS_INTS];
    uint64_t tot[DP_COLS * FED_COLSTATS_INTS] = {0};
    fed_rng r;
    size_t at = 0, moved;

    assert_int_equal(fed_colstats_dp_check(&dp, DP_COLS, NULL, 0), FED_OK);
    fed_rng_seed(&r, seed);
    *clipped = 0;
    for (int s = 0; s < SITES; s++) {
        size_t n = DP_ROWS / SITES;

        assert_int_equal(fed_colstats_local_dp(x + at * DP_COLS, n, DP_COLS, NULL, &dp, c, &moved),
                         FED_OK);
        fed_colstats_noise(c, DP_COLS, &dp, fed_rng_random, &r);
        for (size_t k = 0; k < DP_COLS * FED_COLSTATS_INTS; k++)
            tot[k] += (uint64_t)c[k];
        at += n;
        *clipped += moved;
    }
    assert_int_equal(fed_colstats_decode_dp(tot, DP_COLS, 0, &dp, st), FED_OK);
}

/* DP statistics of images: a record is an image of record_values pixels a
 * channel, so one site's noise is that many times a row's (the same
 * normal draws, 64 times the deviation), the mean's sigma too; over 2^24
 * values a record refused. */
static void test_dp_record_values(void **state)
{
    static const double lo[1] = {0}, hi[1] = {255};
    fed_colstats_dp row = {lo, hi, 4.0, 0}, image = {lo, hi, 4.0, 64};
    uint64_t hist[FED_COLSTATS_BYTE_VALUES] = {0};
    int64_t clean[FED_COLSTATS_INTS], c1[FED_COLSTATS_INTS], c64[FED_COLSTATS_INTS];
    fed_rng r;
    char why[160];

    (void)state;
    hist[7] = 640, hist[200] = 1280; /* 30 images of 64 pixels */
    assert_int_equal(fed_colstats_local_bytes(hist, 1, 0, &row, clean, NULL), FED_OK);
    memcpy(c1, clean, sizeof c1);
    memcpy(c64, clean, sizeof c64);
    fed_rng_seed(&r, 41);
    fed_colstats_noise(c1, 1, &row, fed_rng_random, &r);
    fed_rng_seed(&r, 41);
    fed_colstats_noise(c64, 1, &image, fed_rng_random, &r);
    for (int k = 0; k < 2; k++) { /* the count and the missing count */
        double d1 = (double)(c1[k] - clean[k]), d64 = (double)(c64[k] - clean[k]);

        if (fabs(d64 - 64 * d1) > 33 || fabs(d1) < 1)
            fail_msg("integer %d: noise %g with a row, %g with an image of 64", k, d1, d64);
    }
    assert_true(fed_colstats_dp_mean_sigma(&image, 1, 0, 1920) ==
                64 * fed_colstats_dp_mean_sigma(&row, 1, 0, 1920));
    image.record_values = (1u << 24) + 1;
    assert_int_equal(fed_colstats_dp_check(&image, 1, why, sizeof why), FED_ERR_RANGE);
    assert_non_null(strstr(why, "values a record"));
}

static void test_dp_noise(void **state)
{
    static const double lo[DP_COLS] = {-10, 0, 100, -1}, hi[DP_COLS] = {10, 50, 300, 1};
    double *x = fed_malloc(DP_ROWS * DP_COLS * sizeof *x);
    double mean[DP_COLS], sd[DP_COLS];
    fed_colstat st[DP_COLS];
    fed_colstats_dp dp = {lo, hi, 1.0, 0};
    size_t clipped, want_clipped = 0;
    fed_rng r;

    (void)state;
    assert_non_null(x);
    fed_rng_seed(&r, 37);
    for (size_t i = 0; i < DP_ROWS; i++) {
        double g = fed_rng_normal(&r);

        x[i * DP_COLS] = 3 * g;                  /* inside its bounds mostly */
        x[i * DP_COLS + 1] = 20 + 40 * fed_rng_uniform(&r); /* a fifth over 50 */
        x[i * DP_COLS + 2] = 180 + 20 * g;
        x[i * DP_COLS + 3] = fed_rng_uniform(&r) * 2 - 1;
    }
    for (size_t j = 0; j < DP_COLS; j++) { /* the clipped pooled data's statistics */
        long double m = 0, v = 0;

        for (size_t i = 0; i < DP_ROWS; i++) {
            double c = fmin(fmax(x[i * DP_COLS + j], lo[j]), hi[j]);

            want_clipped += c != x[i * DP_COLS + j];
            m += c;
        }
        m /= DP_ROWS;
        for (size_t i = 0; i < DP_ROWS; i++) {
            double c = fmin(fmax(x[i * DP_COLS + j], lo[j]), hi[j]);

            v += (c - m) * (c - m);
        }
        mean[j] = (double)m;
        sd[j] = sqrt((double)(v / DP_ROWS));
    }
    dp_run(1e-12, 1, x, st, &clipped);
    assert_int_equal(clipped, want_clipped);
    assert_true(clipped > 0);
    for (size_t j = 0; j < DP_COLS; j++) {
        assert_int_equal(st[j].count, DP_ROWS);
        assert_true(fabs(st[j].mean - mean[j]) <= 1e-9 * (hi[j] - lo[j]));
        assert_true(fabs(st[j].std - sd[j]) <= 1e-9 * (hi[j] - lo[j]));
    }
    for (uint64_t seed = 1; seed <= 20; seed++) {
        int differs = 0;

        dp_run(1.0, seed, x, st, &clipped);
        for (size_t j = 0; j < DP_COLS; j++) {
            double h = (hi[j] - lo[j]) / 2;
            double ms = sqrt((double)SITES) * fed_colstats_dp_mean_sigma(&dp, DP_COLS, j, DP_ROWS);
            /* var's noise: sigma h^2 sqrt(3) / N, plus the mean's squared */
            double vs = sqrt((double)SITES) * ms * h + ms * ms * 16;

            differs |= st[j].mean != mean[j];
            assert_true(fabs(st[j].mean - mean[j]) <= 4 * ms + 1e-9);
            assert_true(fabs(st[j].std * st[j].std - sd[j] * sd[j]) <= 4 * vs + 2 * ms * h);
            assert_true(st[j].std > 0 && st[j].std <= h);
        }
        assert_true(differs); /* noise was added */
    }
    fed_free(x);
}

static void test_dp_check(void **state)
{
    double lo[2] = {0, 5}, hi[2] = {1, 5};
    fed_colstats_dp dp = {lo, hi, 1.0, 0};
    char why[160] = "";

    (void)state;
    assert_int_equal(fed_colstats_dp_check(&dp, 1, why, sizeof why), FED_OK);
    assert_int_equal(fed_colstats_dp_check(&dp, 2, why, sizeof why), FED_ERR_RANGE);
    assert_non_null(strstr(why, "column 2"));
    dp.noise = 0;
    assert_int_equal(fed_colstats_dp_check(&dp, 1, why, sizeof why), FED_ERR_RANGE);
    assert_non_null(strstr(why, "noise"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_totals),
        cmocka_unit_test(test_secure_totals),
        cmocka_unit_test(test_image_channels),
        cmocka_unit_test(test_missing_and_min_count),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_dp_noise),
        cmocka_unit_test(test_dp_record_values),
        cmocka_unit_test(test_dp_check),
        cmocka_unit_test_setup_teardown(test_csv_sites, fed_test_tmpdir_setup,
                                        fed_test_tmpdir_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
