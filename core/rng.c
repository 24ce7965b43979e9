/* rng.c - xoshiro256** (Blackman and Vigna's published algorithm) with
 * splitmix64 seeding, and the distributions built on it. Holds no state of
 * its own: every generator lives in the caller's fed_rng. */
#include "core/rng.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void fed_rng_seed(fed_rng *r, uint64_t seed)
{
    uint64_t x = seed;

    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

void fed_rng_seed_stream(fed_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = stream;

    fed_rng_seed(r, seed ^ splitmix64(&x));
}

uint64_t fed_rng_u64(fed_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint32_t fed_rng_u32(fed_rng *r) { return (uint32_t)(fed_rng_u64(r) >> 32); }

uint64_t fed_rng_below(fed_rng *r, uint64_t n)
{
    /* Rejection of the top partial range keeps the draw unbiased. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;

    do {
        x = fed_rng_u64(r);
    } while (x >= limit);
    return x % n;
}

double fed_rng_uniform(fed_rng *r) { return (double)(fed_rng_u64(r) >> 11) * 0x1.0p-53; }

float fed_rng_uniform_f(fed_rng *r) { return (float)(fed_rng_u64(r) >> 40) * 0x1.0p-24f; }

double fed_rng_normal(fed_rng *r)
{
    double u, v, s;

    do {
        u = 2.0 * fed_rng_uniform(r) - 1.0;
        v = 2.0 * fed_rng_uniform(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    return u * sqrt(-2.0 * log(s) / s);
}

double fed_rng_gamma(fed_rng *r, double shape)
{
    double d, c, x, v, u;

    if (shape < 1.0) {
        /* Boost: Gamma(a) = Gamma(a + 1) * U^(1/a). */
        double g = fed_rng_gamma(r, shape + 1.0);
        double w = fed_rng_uniform(r);

        return g * pow(w > 0.0 ? w : 0x1.0p-53, 1.0 / shape);
    }
    d = shape - 1.0 / 3.0;
    c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        do {
            x = fed_rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        u = fed_rng_uniform(r);
        if (u < 1.0 - 0.0331 * x * x * x * x)
            return d * v;
        if (u > 0.0 && log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v;
    }
}

void fed_rng_fill(fed_rng *r, void *buf, size_t len)
{
    unsigned char *p = buf;

    while (len >= 8) {
        uint64_t x = fed_rng_u64(r);

        memcpy(p, &x, 8);
        p += 8;
        len -= 8;
    }
    if (len) {
        uint64_t x = fed_rng_u64(r);

        memcpy(p, &x, len);
    }
}

void fed_rng_shuffle_u32(fed_rng *r, uint32_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)fed_rng_below(r, i);
        uint32_t t = a[i - 1];

        a[i - 1] = a[j];
        a[j] = t;
    }
}

void fed_rng_random(void *ctx, void *buf, size_t len) { fed_rng_fill(ctx, buf, len); }
