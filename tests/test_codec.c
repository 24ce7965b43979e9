/* test_codec.c - model/codec: round trips of every codec, the stated f16 and
 * q8 error bounds, topk's exact mass conservation under error feedback, and
 * each malformed encoding refused with its exact error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "model/codec.h"

static uint8_t *encode_new(const fed_codec *c, const float *x, size_t n, float *r, size_t *len)
{
    size_t cap = 0;
    uint8_t *out;

    assert_int_equal(fed_codec_size(c, n, &cap), FED_OK);
    out = malloc(cap ? cap : 1);
    assert_non_null(out);
    assert_int_equal(fed_codec_encode(c, x, n, r, out, cap, len), FED_OK);
    assert_int_equal(*len, cap);
    return out;
}

static void fill_normal(float *x, size_t n, uint64_t seed, double scale)
{
    fed_rng rng;

    fed_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(fed_rng_normal(&rng) * scale);
}

static void test_parse_format(void **state)
{
    fed_codec c;
    char buf[32];

    (void)state;
    assert_int_equal(fed_codec_parse("f32", &c), FED_OK);
    assert_int_equal(c.id, FED_CODEC_F32);
    assert_int_equal(fed_codec_parse("q8", &c), FED_OK);
    assert_int_equal(c.id, FED_CODEC_Q8);
    assert_int_equal(fed_codec_parse("topk:0.01", &c), FED_OK);
    assert_int_equal(c.id, FED_CODEC_TOPK);
    assert_true(fabsf(c.fraction - 0.01f) < 1e-9f);
    fed_codec_format(&c, buf, sizeof buf);
    assert_string_equal(buf, "topk:0.01");
    assert_int_equal(fed_codec_parse("topk:0", &c), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_codec_parse("topk:1.5", &c), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_codec_parse("topk:", &c), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_codec_parse("topk:0.1x", &c), FED_ERR_BAD_VALUE);
    /* numbers inside a spec are decimal, as the flags' are */
    assert_int_equal(fed_codec_parse("topk:0x0.1p0", &c), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_codec_parse("topk:nan", &c), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_codec_parse("topk: 0.1", &c), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_codec_parse("topk:1e-1", &c), FED_OK);
    assert_int_equal(fed_codec_parse("f8", &c), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_codec_parse("none", &c), FED_ERR_BAD_VALUE);
    assert_int_equal(fed_codec_topk_k(0.01f, 1000), 10);
    assert_int_equal(fed_codec_topk_k(0.001f, 10), 1);
    assert_int_equal(fed_codec_topk_k(1.0f, 10), 10);
    assert_int_equal(fed_codec_topk_k(0.5f, 0), 0);
}

static void test_sizes(void **state)
{
    fed_codec c = {FED_CODEC_Q8, 0};
    size_t b = 0;

    (void)state;
    assert_int_equal(fed_codec_size(&c, 513, &b), FED_OK);
    assert_int_equal(b, 16 + 3 * 4 + 513);
    c.id = FED_CODEC_F16;
    assert_int_equal(fed_codec_size(&c, 10, &b), FED_OK);
    assert_int_equal(b, 16 + 20);
    c.id = FED_CODEC_TOPK;
    c.fraction = 0.1f;
    assert_int_equal(fed_codec_size(&c, 100, &b), FED_OK);
    assert_int_equal(b, 16 + 10 * 8);
    c.id = FED_CODEC_F64;
    assert_int_equal(fed_codec_size(&c, SIZE_MAX / 4, &b), FED_ERR_RANGE);
    c.id = FED_CODEC_NONE;
    assert_int_equal(fed_codec_size(&c, 1, &b), FED_ERR_INVAL);
}

static void test_f32_f64_exact(void **state)
{
    enum { N = 1000 };
    fed_codec c32 = {FED_CODEC_F32, 0}, c64 = {FED_CODEC_F64, 0};
    float x[N], y[N];
    double d[N], e[N];
    size_t len = 0;
    uint8_t *buf;

    (void)state;
    fill_normal(x, N, 1, 3.0);
    x[0] = FLT_MAX;
    x[1] = -FLT_MIN / 8; /* subnormal */
    x[2] = -0.0f;
    buf = encode_new(&c32, x, N, NULL, &len);
    assert_int_equal(len, 16 + 4 * N);
    assert_int_equal(fed_codec_decode(buf, len, FED_CODEC_F32, y, N), FED_OK);
    assert_memory_equal(x, y, sizeof x);
    free(buf);
    buf = encode_new(&c64, x, N, NULL, &len); /* widened */
    assert_int_equal(fed_codec_decode(buf, len, FED_CODEC_NONE, y, N), FED_OK);
    assert_memory_equal(x, y, sizeof x);
    free(buf);
    for (int i = 0; i < N; i++)
        d[i] = (double)x[i] * (1 + 1e-12) + 1e-300;
    buf = malloc(16 + 8 * N);
    assert_int_equal(fed_codec_encode_f64(d, N, buf, 16 + 8 * N, &len), FED_OK);
    assert_int_equal(fed_codec_decode_f64(buf, len, e, N), FED_OK);
    assert_memory_equal(d, e, sizeof d);
    d[0] = 1e300; /* fine as double, too big for float */
    assert_int_equal(fed_codec_encode_f64(d, N, buf, 16 + 8 * N, &len), FED_OK);
    assert_int_equal(fed_codec_decode(buf, len, FED_CODEC_F64, y, N), FED_ERR_RANGE);
    d[5] = NAN;
    assert_int_equal(fed_codec_encode_f64(d, N, buf, 16 + 8 * N, &len), FED_ERR_NAN);
    free(buf);
}

static float f16_bits_to_float_ref(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);

    return (float)((h & 0x8000) ? -v : v);
}

static void test_f16_exhaustive_and_rounding(void **state)
{
    fed_codec c = {FED_CODEC_F16, 0};
    float x[1], y[1];
    uint8_t buf[18];
    size_t len;

    (void)state;
    /* Every finite half decodes to its exact value and encodes back to itself. */
    for (uint32_t h = 0; h < 65536; h++) {
        if (((h >> 10) & 31) == 31)
            continue;
        x[0] = f16_bits_to_float_ref((uint16_t)h);
        assert_int_equal(fed_codec_encode(&c, x, 1, NULL, buf, sizeof buf, &len), FED_OK);
        assert_int_equal(buf[16] | (buf[17] << 8), h == 0x8000 ? 0x8000 : h);
        assert_int_equal(fed_codec_decode(buf, len, FED_CODEC_F16, y, 1), FED_OK);
        assert_true(y[0] == x[0] && signbit(y[0]) == signbit(x[0]));
    }
    /* Halfway cases round to even. */
    x[0] = 1.0f + 0x1p-11f; /* between 1 and 1 + 2^-10: to 1 (even) */
    assert_int_equal(fed_codec_encode(&c, x, 1, NULL, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(buf[16] | (buf[17] << 8), 0x3c00);
    x[0] = 1.0f + 3 * 0x1p-11f; /* to 1 + 2^-9 (even mantissa 2) */
    assert_int_equal(fed_codec_encode(&c, x, 1, NULL, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(buf[16] | (buf[17] << 8), 0x3c02);
    x[0] = 65504.0f;
    assert_int_equal(fed_codec_encode(&c, x, 1, NULL, buf, sizeof buf, &len), FED_OK);
    x[0] = 65519.0f; /* still rounds to 65504 */
    assert_int_equal(fed_codec_encode(&c, x, 1, NULL, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(buf[16] | (buf[17] << 8), 0x7bff);
    x[0] = -65520.0f;
    assert_int_equal(fed_codec_encode(&c, x, 1, NULL, buf, sizeof buf, &len), FED_ERR_RANGE);
    x[0] = INFINITY;
    assert_int_equal(fed_codec_encode(&c, x, 1, NULL, buf, sizeof buf, &len), FED_ERR_NAN);
}

static void test_f16_error_bound(void **state)
{
    enum { N = 200000 };
    fed_codec c = {FED_CODEC_F16, 0};
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    double worst = 0;
    size_t len = 0;
    uint8_t *buf;
    fed_rng rng;

    (void)state;
    fed_rng_seed(&rng, 5);
    for (int i = 0; i < N; i++) /* magnitudes from 2^-30 to 2^15 */
        x[i] = (float)ldexp(fed_rng_uniform(&rng) * 2 - 1, (int)fed_rng_below(&rng, 46) - 30);
    buf = encode_new(&c, x, N, NULL, &len);
    assert_int_equal(fed_codec_decode(buf, len, FED_CODEC_F16, y, N), FED_OK);
    for (int i = 0; i < N; i++) {
        double err = fabs((double)y[i] - x[i]);
        double bound = fmax(fabs((double)x[i]) * 0x1p-11, 0x1p-25);

        assert_true(err <= bound);
        worst = fmax(worst, err / bound);
    }
    assert_true(worst > 0.5); /* the bound is tight, not vacuous */
    free(buf);
    free(x);
    free(y);
}

static void test_q8_error_bound(void **state)
{
    enum { N = 256 * 40 + 77 };
    fed_codec c = {FED_CODEC_Q8, 0};
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    double worst = 0;
    size_t len = 0;
    uint8_t *buf;

    (void)state;
    fill_normal(x, N, 9, 1.0);
    for (int i = 0; i < 256; i++) /* block 1: tiny values (all sent as zero) */
        x[256 + i] = x[256 + i] * 1e-35f;
    for (int i = 0; i < 256; i++) /* block 2: all zero */
        x[512 + i] = 0;
    x[800] = 1e30f;               /* block 3: one huge value */
    for (int i = 0; i < 256; i++) /* block 4: wide exponent range */
        x[1024 + i] = (float)ldexp(x[1024 + i], i % 40 - 20);
    buf = encode_new(&c, x, N, NULL, &len);
    assert_int_equal(len, 16 + 41 * 4 + N);
    assert_int_equal(fed_codec_decode(buf, len, FED_CODEC_Q8, y, N), FED_OK);
    for (size_t b0 = 0; b0 < N; b0 += 256) {
        size_t end = b0 + 256 < N ? b0 + 256 : N;
        double m = 0;

        for (size_t i = b0; i < end; i++)
            m = fmax(m, fabs((double)x[i]));
        for (size_t i = b0; i < end; i++) {
            double err = fabs((double)y[i] - x[i]);

            if (m >= 0x1p-100) {
                assert_true(err <= m / 254 * (1 + 0x1p-12));
                worst = fmax(worst, err / (m / 254));
            } else {
                assert_true(err <= m);
            }
        }
    }
    assert_true(worst > 0.9);
    x[3] = 2e38f;
    assert_int_equal(fed_codec_encode(&c, x, N, NULL, buf, len, &len), FED_ERR_RANGE);
    free(buf);
    free(x);
    free(y);
}

static void test_topk_roundtrip(void **state)
{
    enum { N = 1000 };
    fed_codec c = {FED_CODEC_TOPK, 0.05f};
    float x[N], y[N];
    size_t len = 0, nz = 0;
    uint8_t *buf;

    (void)state;
    fill_normal(x, N, 3, 1.0);
    buf = encode_new(&c, x, N, NULL, &len);
    assert_int_equal(len, 16 + 50 * 8);
    assert_int_equal(fed_codec_decode(buf, len, FED_CODEC_TOPK, y, N), FED_OK);
    /* The 50 largest magnitudes survive exactly; every kept |x| >= every dropped |x|. */
    {
        float min_kept = INFINITY, max_dropped = 0;

        for (int i = 0; i < N; i++) {
            if (y[i] != 0) {
                assert_true(y[i] == x[i]);
                min_kept = fminf(min_kept, fabsf(x[i]));
                nz++;
            } else {
                max_dropped = fmaxf(max_dropped, fabsf(x[i]));
            }
        }
        assert_true(min_kept >= max_dropped);
    }
    assert_int_equal(nz, 50);
    free(buf);
    /* Ties go to the lower index. */
    {
        float t[6] = {1, -2, 2, 2, 0.5f, -2};

        c.fraction = 0.5f; /* k = 3 */
        buf = encode_new(&c, t, 6, NULL, &len);
        assert_int_equal(fed_codec_decode(buf, len, FED_CODEC_TOPK, y, 6), FED_OK);
        assert_true(y[0] == 0 && y[1] == -2 && y[2] == 2 && y[3] == 2 && y[5] == 0);
        free(buf);
    }
}

static void test_topk_error_feedback_conserves_mass(void **state)
{
    /* Inputs on a grid (multiples of 2^-16, |x| <= 1): every float sum below is
     * exact, so the totals must match exactly, not approximately. */
    enum { N = 4096, ROUNDS = 30 };
    fed_codec c = {FED_CODEC_TOPK, 0.01f};
    float *x = malloc(N * sizeof *x), *r = calloc(N, sizeof *r), *y = malloc(N * sizeof *y);
    double sum_in = 0, sum_sent = 0, sum_r = 0;
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    fed_rng rng;

    (void)state;
    fed_rng_seed(&rng, 17);
    assert_int_equal(fed_codec_size(&c, N, &cap), FED_OK);
    buf = malloc(cap);
    for (int t = 0; t < ROUNDS; t++) {
        for (int i = 0; i < N; i++) {
            x[i] = (float)((double)((int64_t)fed_rng_below(&rng, 131073) - 65536) / 65536.0);
            sum_in += x[i];
        }
        assert_int_equal(fed_codec_encode(&c, x, N, r, buf, cap, &len), FED_OK);
        assert_int_equal(fed_codec_decode(buf, len, FED_CODEC_TOPK, y, N), FED_OK);
        for (int i = 0; i < N; i++)
            sum_sent += y[i];
    }
    for (int i = 0; i < N; i++)
        sum_r += r[i];
    assert_true(sum_sent != 0 && sum_r != 0);
    assert_true(sum_sent + sum_r == sum_in);
    free(buf);
    free(x);
    free(r);
    free(y);
}

static void test_topk_twosum_per_entry(void **state)
{
    /* Arbitrary floats: every sent entry keeps its exact rounding error, so
     * sent + residual' == x + residual exactly (checked in double, where the
     * sum of two floats of these magnitudes is exact); unsent ones keep
     * fl(x + residual). */
    enum { N = 2000 };
    fed_codec c = {FED_CODEC_TOPK, 0.1f};
    float x[N], r[N], r0[N], y[N];
    size_t cap = 0, len = 0;
    uint8_t *buf;
    int sent = 0, inexact = 0;

    (void)state;
    fill_normal(x, N, 21, 1.0);
    fill_normal(r, N, 22, 1e-3);
    memcpy(r0, r, sizeof r);
    assert_int_equal(fed_codec_size(&c, N, &cap), FED_OK);
    buf = malloc(cap);
    assert_int_equal(fed_codec_encode(&c, x, N, r, buf, cap, &len), FED_OK);
    assert_int_equal(fed_codec_decode(buf, len, FED_CODEC_TOPK, y, N), FED_OK);
    for (int i = 0; i < N; i++) {
        if (y[i] != 0) {
            assert_true((double)y[i] + (double)r[i] == (double)x[i] + (double)r0[i]);
            inexact += r[i] != 0;
            sent++;
        } else {
            assert_true(r[i] == x[i] + r0[i]);
        }
    }
    assert_int_equal(sent, 200);
    assert_true(inexact > 0); /* the rounding error was really kept */
    free(buf);
}

static void test_topk_nan_and_nomem_leave_residual(void **state)
{
    enum { N = 100 };
    fed_codec c = {FED_CODEC_TOPK, 0.1f};
    float x[N], r[N], r0[N];
    uint8_t buf[16 + 10 * 8];
    size_t len = 0;

    (void)state;
    fill_normal(x, N, 2, 1.0);
    fill_normal(r, N, 3, 1.0);
    memcpy(r0, r, sizeof r);
    fed_alloc_fail_nth(1, 1);
    assert_int_equal(fed_codec_encode(&c, x, N, r, buf, sizeof buf, &len), FED_ERR_NOMEM);
    fed_alloc_fail_nth(2, 1);
    assert_int_equal(fed_codec_encode(&c, x, N, r, buf, sizeof buf, &len), FED_ERR_NOMEM);
    fed_alloc_fail_nth(0, 0);
    assert_memory_equal(r, r0, sizeof r);
    r[7] = NAN;
    assert_int_equal(fed_codec_encode(&c, x, N, r, buf, sizeof buf, &len), FED_ERR_NAN);
    r[7] = FLT_MAX;
    x[7] = FLT_MAX; /* x + r overflows */
    assert_int_equal(fed_codec_encode(&c, x, N, r, buf, sizeof buf, &len), FED_ERR_NAN);
    assert_int_equal(fed_codec_encode(&c, x, N, r, buf, sizeof buf - 1, &len), FED_ERR_TOO_LARGE);
}

/* ---- malformed encodings ---- */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_decode_rejects(void **state)
{
    enum { N = 300 };
    fed_codec c32 = {FED_CODEC_F32, 0}, c16 = {FED_CODEC_F16, 0}, cq = {FED_CODEC_Q8, 0},
              ck = {FED_CODEC_TOPK, 0.02f};
    float x[N], y[N];
    uint8_t *b32, *b16, *bq, *bk, *tmp;
    size_t l32, l16, lq, lk;
    float nan = NAN;

    (void)state;
    fill_normal(x, N, 4, 1.0);
    b32 = encode_new(&c32, x, N, NULL, &l32);
    b16 = encode_new(&c16, x, N, NULL, &l16);
    bq = encode_new(&cq, x, N, NULL, &lq);
    bk = encode_new(&ck, x, N, NULL, &lk);
    tmp = malloc(l32 + 8);
    /* wrong lengths, counts, codec, version, reserved */
    assert_int_equal(fed_codec_decode(b32, l32 - 1, FED_CODEC_F32, y, N), FED_ERR_CODEC);
    assert_int_equal(fed_codec_decode(b32, 15, FED_CODEC_F32, y, N), FED_ERR_CODEC);
    assert_int_equal(fed_codec_decode(b32, l32, FED_CODEC_F32, y, N - 1), FED_ERR_CODEC);
    assert_int_equal(fed_codec_decode(b32, l32, FED_CODEC_F16, y, N), FED_ERR_CODEC);
    memcpy(tmp, b32, l32);
    tmp[1] = 2;
    assert_int_equal(fed_codec_decode(tmp, l32, FED_CODEC_F32, y, N), FED_ERR_CODEC);
    memcpy(tmp, b32, l32);
    tmp[2] = 1;
    assert_int_equal(fed_codec_decode(tmp, l32, FED_CODEC_F32, y, N), FED_ERR_CODEC);
    memcpy(tmp, b32, l32);
    tmp[0] = 9;
    assert_int_equal(fed_codec_decode(tmp, l32, FED_CODEC_NONE, y, N), FED_ERR_CODEC);
    memcpy(tmp, b32, l32);
    tmp[4] = 1; /* f32 has no parameter */
    assert_int_equal(fed_codec_decode(tmp, l32, FED_CODEC_F32, y, N), FED_ERR_CODEC);
    /* NaN and infinity */
    memcpy(tmp, b32, l32);
    memcpy(tmp + 16 + 4 * 100, &nan, 4);
    assert_int_equal(fed_codec_decode(tmp, l32, FED_CODEC_F32, y, N), FED_ERR_NAN);
    memcpy(tmp, b16, l16);
    tmp[16 + 2 * 5] = 0x00;
    tmp[16 + 2 * 5 + 1] = 0x7c; /* +inf */
    assert_int_equal(fed_codec_decode(tmp, l16, FED_CODEC_F16, y, N), FED_ERR_NAN);
    /* q8: NaN scale, negative scale, huge scale, code -128, block size */
    memcpy(tmp, bq, lq);
    memcpy(tmp + 16, &nan, 4);
    assert_int_equal(fed_codec_decode(tmp, lq, FED_CODEC_Q8, y, N), FED_ERR_NAN);
    {
        float neg = -1.0f, big = 1e37f;

        memcpy(tmp, bq, lq);
        memcpy(tmp + 16, &neg, 4);
        assert_int_equal(fed_codec_decode(tmp, lq, FED_CODEC_Q8, y, N), FED_ERR_CODEC);
        memcpy(tmp + 16, &big, 4);
        assert_int_equal(fed_codec_decode(tmp, lq, FED_CODEC_Q8, y, N), FED_ERR_CODEC);
    }
    memcpy(tmp, bq, lq);
    tmp[16 + 4 + 256 + 4 + 3] = 0x80;
    assert_int_equal(fed_codec_decode(tmp, lq, FED_CODEC_Q8, y, N), FED_ERR_CODEC);
    memcpy(tmp, bq, lq);
    put32(tmp + 4, 128);
    assert_int_equal(fed_codec_decode(tmp, lq, FED_CODEC_Q8, y, N), FED_ERR_CODEC);
    /* topk: index out of range, repeated, unsorted, NaN value, k > n */
    memcpy(tmp, bk, lk);
    put32(tmp + 16 + 4 * 5, N);
    assert_int_equal(fed_codec_decode(tmp, lk, FED_CODEC_TOPK, y, N), FED_ERR_CODEC);
    memcpy(tmp, bk, lk);
    memcpy(tmp + 16 + 4 * 3, tmp + 16 + 4 * 2, 4);
    assert_int_equal(fed_codec_decode(tmp, lk, FED_CODEC_TOPK, y, N), FED_ERR_CODEC);
    memcpy(tmp, bk, lk);
    memcpy(tmp + 16 + 4 * 3, tmp + 16, 4);
    assert_int_equal(fed_codec_decode(tmp, lk, FED_CODEC_TOPK, y, N), FED_ERR_CODEC);
    memcpy(tmp, bk, lk);
    memcpy(tmp + 16 + 4 * 6 + 4 * 2, &nan, 4);
    assert_int_equal(fed_codec_decode(tmp, lk, FED_CODEC_TOPK, y, N), FED_ERR_NAN);
    memcpy(tmp, bk, lk);
    put32(tmp + 4, N + 1);
    assert_int_equal(fed_codec_decode(tmp, lk, FED_CODEC_TOPK, y, N), FED_ERR_CODEC);
    /* and the originals still decode */
    assert_int_equal(fed_codec_decode(bk, lk, FED_CODEC_TOPK, y, N), FED_OK);
    assert_int_equal(fed_codec_decode(bq, lq, FED_CODEC_Q8, y, N), FED_OK);
    /* encoders refuse non-finite input */
    x[10] = NAN;
    assert_int_equal(fed_codec_encode(&c32, x, N, NULL, tmp, l32, &lk), FED_ERR_NAN);
    assert_int_equal(fed_codec_encode(&cq, x, N, NULL, tmp, l32, &lk), FED_ERR_NAN);
    assert_int_equal(lk, 0);
    free(b32);
    free(b16);
    free(bq);
    free(bk);
    free(tmp);
}

static void test_empty_vector(void **state)
{
    fed_codec codecs[] = {{FED_CODEC_F32, 0},
                          {FED_CODEC_F16, 0},
                          {FED_CODEC_Q8, 0},
                          {FED_CODEC_TOPK, 0.5f},
                          {FED_CODEC_F64, 0}};
    uint8_t buf[16];
    size_t len = 0;
    float y[1];

    (void)state;
    for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++) {
        assert_int_equal(fed_codec_encode(&codecs[i], y, 0, NULL, buf, sizeof buf, &len), FED_OK);
        assert_int_equal(len, 16);
        assert_int_equal(fed_codec_decode(buf, len, codecs[i].id, y, 0), FED_OK);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_format),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_f32_f64_exact),
        cmocka_unit_test(test_f16_exhaustive_and_rounding),
        cmocka_unit_test(test_f16_error_bound),
        cmocka_unit_test(test_q8_error_bound),
        cmocka_unit_test(test_topk_roundtrip),
        cmocka_unit_test(test_topk_error_feedback_conserves_mass),
        cmocka_unit_test(test_topk_twosum_per_entry),
        cmocka_unit_test(test_topk_nan_and_nomem_leave_residual),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_empty_vector),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
