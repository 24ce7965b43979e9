/* dp.c - DP-SGD's noise and Poisson sampling (dp.h), from the caller's
 * random source. Pure arithmetic over what it draws; allocates nothing. */
#include "model/dp.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#define BLOCK 512 /* 64-bit words drawn per call to the source */

typedef struct draws {
    fed_random_fn rnd;
    void *ctx;
    uint64_t buf[BLOCK];
    int left;
} draws;

static uint64_t word(draws *d)
{
    if (d->left == 0) {
        d->rnd(d->ctx, d->buf, sizeof d->buf);
        d->left = BLOCK;
    }
    return d->buf[--d->left];
}

/* Uniform in (0, 1]: 53 random bits, never 0 (log is taken of it). */
static double uniform(draws *d)
{
    return (double)((word(d) >> 11) + 1) * 0x1.0p-53;
}

/* ---- the ziggurat (Marsaglia and Tsang 2000, in Doornik's 2005 form: the
 * strip index and the uniform from separate bits) ---- */

#define ZIG_C 128
#define ZIG_R 3.442619855899         /* where the tail begins */
#define ZIG_V 9.91256303526217e-3    /* each strip's area */

static double zig_x[ZIG_C + 1], zig_r[ZIG_C];
static double zig_f[ZIG_C + 1]; /* exp(-x_i^2 / 2): the density at each strip's edge */
/* the fast path in 24-bit integers and floats, indexed by a draw's low 8
   bits (the strip i, then the sign): a point m (0..2^24-1) of strip i lies
   in its rectangle when m < zig_k[i], at (m + 1/2) zig_w[i], negated when
   the sign bit is set (the table holds -zig_w[i] there: the same bits as
   negating the product) */
static uint32_t zig_k[2 * ZIG_C];
static float zig_w[2 * ZIG_C];
static pthread_once_t zig_once = PTHREAD_ONCE_INIT;

static void zig_init(void)
{
    double f = exp(-0.5 * ZIG_R * ZIG_R);

    zig_x[0] = ZIG_V / f; /* the bottom strip with the tail, as a rectangle */
    zig_x[1] = ZIG_R;
    zig_x[ZIG_C] = 0.0;
    for (int i = 2; i < ZIG_C; i++) {
        zig_x[i] = sqrt(-2.0 * log(ZIG_V / zig_x[i - 1] + f));
        f = exp(-0.5 * zig_x[i] * zig_x[i]);
    }
    for (int i = 0; i <= ZIG_C; i++)
        zig_f[i] = exp(-0.5 * zig_x[i] * zig_x[i]);
    for (int i = 0; i < ZIG_C; i++) {
        zig_r[i] = zig_x[i + 1] / zig_x[i];
        /* (m + 1/2) / 2^24 < r[i]  <=>  m < r[i] 2^24 - 1/2 */
        zig_k[i] = zig_k[i + ZIG_C] = (uint32_t)ceil(zig_r[i] * 0x1.0p24 - 0.5);
        zig_w[i] = (float)(zig_x[i] * 0x1.0p-24);
        zig_w[i + ZIG_C] = -zig_w[i];
    }
}

/* The rare cases: a wedge or the tail, with u in (-1, 1) already drawn for
 * strip i; fresh 53-bit uniforms from here on. */
static double zig_slow(draws *d, double u, unsigned i)
{
    for (;;) {
        double x;

        if (i == 0) { /* the tail beyond R (Marsaglia 1964) */
            double t, y;

            do {
                t = log(uniform(d)) / ZIG_R;
                y = log(uniform(d));
            } while (-2.0 * y < t * t);
            return u < 0 ? t - ZIG_R : ZIG_R - t;
        }
        /* the wedge: a uniform height between the strip's two edges' densities
           falls under the density at x (one exp, the edges from the table) */
        x = u * zig_x[i];
        if (zig_f[i + 1] + uniform(d) * (zig_f[i] - zig_f[i + 1]) < exp(-0.5 * x * x))
            return x;
        /* rejected: a new point, at full precision */
        {
            uint64_t w = word(d);

            i = (unsigned)(w & (ZIG_C - 1));
            u = 2.0 * ((double)(w >> 11) + 0.5) * 0x1.0p-53 - 1.0;
            if (fabs(u) < zig_r[i])
                return u * zig_x[i];
        }
    }
}

/* One point from 32 random bits: 7 choose the strip, 1 the sign, 24 the
 * point (the float the noise lands in keeps no more). */
static inline float zig_one(uint32_t h, draws *slow)
{
    uint32_t m = h >> 8, t = h & (2 * ZIG_C - 1);

    if (m < zig_k[t]) /* inside strip t's rectangle: about 98.8% of draws */
        return ((float)m + 0.5f) * zig_w[t];
    return (float)zig_slow(slow, ((double)m + 0.5) * 0x1.0p-24 * (h & 0x80 ? -1 : 1),
                           h & (ZIG_C - 1));
}

/* x[j] += sd * noise for j < take from buf's 32-bit halves, each word's low
 * half first (two at a time: no variable shift per point). */
static void noise_block(const uint64_t *buf, size_t take, float *x, float sd, draws *slow)
{
    size_t j;

    for (j = 0; j + 2 <= take; j += 2) {
        uint64_t w = buf[j >> 1];

        x[j] += sd * zig_one((uint32_t)w, slow);
        x[j + 1] += sd * zig_one((uint32_t)(w >> 32), slow);
    }
    if (j < take)
        x[j] += sd * zig_one((uint32_t)buf[j >> 1], slow);
}

fed_err fed_dp_add_noise(fed_random_fn rnd, void *ctx, float *x, size_t n, double std)
{
    draws slow = {rnd, ctx, {0}, 0}; /* the rare wedge and tail cases' own draws */
    uint64_t buf[BLOCK];
    float sd = (float)std;

    if (!rnd || !(std >= 0.0) || !isfinite(std) || (n && !x))
        return FED_ERR_INVAL;
    pthread_once(&zig_once, zig_init);
    for (size_t i = 0; i < n;) {
        size_t take = n - i < 2 * BLOCK ? n - i : 2 * BLOCK;

        rnd(ctx, buf, (take + 1) / 2 * sizeof *buf);
        noise_block(buf, take, x + i, sd, &slow);
        i += take;
    }
    /* the bits that make the noise would let one take it off again */
    explicit_bzero(buf, sizeof buf);
    explicit_bzero(&slow, sizeof slow);
    return FED_OK;
}

size_t fed_dp_poisson(fed_random_fn rnd, void *ctx, const uint32_t *idx, size_t n, double q,
                      uint32_t *out)
{
    draws d = {rnd, ctx, {0}, 0};
    double l1q;
    size_t k = 0, i = 0;

    if (!(q > 0.0) || n == 0)
        return 0;
    if (q >= 1.0) {
        for (i = 0; i < n; i++)
            out[i] = idx[i];
        return n;
    }
    l1q = log1p(-q);
    for (;;) {
        /* the number of samples skipped before the next one taken:
           P(gap = g) = (1 - q)^g q */
        double gap = floor(log(uniform(&d)) / l1q);

        if (gap >= (double)(n - i))
            break;
        i += (size_t)gap;
        out[k++] = idx[i++];
        if (i >= n)
            break;
    }
    explicit_bzero(&d, sizeof d); /* which samples were drawn stays private too */
    return k;
}
