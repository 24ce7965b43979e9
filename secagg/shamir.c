/* shamir.c - t-of-k Shamir sharing of 32-byte seeds over GF(2^61 - 1): the
 * split (one random coefficient alive at a time), Lagrange interpolation in
 * barycentric form with batch inversion, the share codec. The layout of a
 * seed as limbs and of a share as bytes is in shamir.h. */
#include "secagg/shamir.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "secagg/field.h"

/* Limb l covers bytes [7l, 7l + width) of the seed. */
static size_t limb_width(int l) { return l < FED_SECAGG_LIMBS - 1 ? 7 : 4; }

void fed_secagg_seed_to_limbs(const uint8_t seed[FED_SECAGG_SEED_BYTES],
                              uint64_t limbs[FED_SECAGG_LIMBS])
{
    for (int l = 0; l < FED_SECAGG_LIMBS; l++) {
        uint64_t v = 0;

        for (size_t b = limb_width(l); b-- > 0;)
            v = (v << 8) | seed[7 * l + b];
        limbs[l] = v;
    }
}

fed_err fed_secagg_seed_from_limbs(const uint64_t limbs[FED_SECAGG_LIMBS],
                                   uint8_t seed[FED_SECAGG_SEED_BYTES])
{
    uint64_t over = 0;

    /* Every limb is written and every width checked, whatever the values;
     * the one branch is on the verdict. */
    for (int l = 0; l < FED_SECAGG_LIMBS; l++) {
        size_t w = limb_width(l);

        over |= limbs[l] >> (8 * w);
        for (size_t b = 0; b < w; b++)
            seed[7 * l + b] = (uint8_t)(limbs[l] >> (8 * b));
    }
    if (over) {
        sodium_memzero(seed, FED_SECAGG_SEED_BYTES);
        return FED_ERR_CORRUPT;
    }
    return FED_OK;
}

/* Uniform in [0, p): 61 random bits, redrawn in the one case (all ones,
 * which is p itself) that is not an element; the redraw depends on the
 * random draw only, never on the secret. */
static uint64_t random_element(fed_random_fn rnd, void *ctx)
{
    uint8_t b[8];
    uint64_t v;

    do {
        rnd(ctx, b, sizeof b);
        v = fed_get_u64le(b) & FED_SECAGG_P;
    } while (v == FED_SECAGG_P);
    sodium_memzero(b, sizeof b);
    return v;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

/* FED_OK when the n points are nonzero and distinct (a sorted copy). */
static fed_err check_points(const uint32_t *xs, size_t n)
{
    uint32_t *s = fed_malloc(n * sizeof *s);
    fed_err err = FED_OK;

    if (!s)
        return FED_ERR_NOMEM;
    memcpy(s, xs, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_u32);
    for (size_t i = 0; i < n; i++)
        if (s[i] == 0 || (i && s[i] == s[i - 1]))
            err = FED_ERR_INVAL;
    fed_free(s);
    return err;
}

fed_err fed_secagg_shamir_split(const uint8_t seed[FED_SECAGG_SEED_BYTES], uint32_t t, uint32_t k,
                                const uint32_t *xs, fed_random_fn rnd, void *rnd_ctx,
                                fed_secagg_share *out)
{
    uint64_t *xpow = NULL;
    uint64_t secret[FED_SECAGG_LIMBS], coef[FED_SECAGG_LIMBS];
    fed_err err = FED_OK;

    if (!seed || !rnd || !out || t < 1 || t > k || k > FED_SECAGG_MAX_SHARES)
        return FED_ERR_INVAL;
    for (uint32_t i = 0; i < k; i++)
        out[i].x = xs ? xs[i] : i + 1;
    {
        uint32_t *pts = fed_malloc((size_t)k * sizeof *pts);

        if (!pts) {
            err = FED_ERR_NOMEM;
            goto out;
        }
        for (uint32_t i = 0; i < k; i++)
            pts[i] = out[i].x;
        err = check_points(pts, k);
        fed_free(pts);
        if (err != FED_OK)
            goto out;
    }
    xpow = fed_malloc((size_t)k * sizeof *xpow);
    if (!xpow) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    /* f_l(x) = secret_l + sum_{d=1}^{t-1} c_{l,d} x^d, summed coefficient by
     * coefficient: each c_{l,d} is drawn, added into every share, wiped. */
    fed_secagg_seed_to_limbs(seed, secret);
    for (uint32_t i = 0; i < k; i++) {
        memcpy(out[i].y, secret, sizeof secret);
        xpow[i] = out[i].x;
    }
    for (uint32_t d = 1; d < t; d++) {
        for (int l = 0; l < FED_SECAGG_LIMBS; l++)
            coef[l] = random_element(rnd, rnd_ctx);
        for (uint32_t i = 0; i < k; i++) {
            for (int l = 0; l < FED_SECAGG_LIMBS; l++)
                out[i].y[l] = fed_secagg_fp_add(out[i].y[l], fed_secagg_fp_mul(coef[l], xpow[i]));
            xpow[i] = fed_secagg_fp_mul(xpow[i], out[i].x);
        }
    }
out:
    if (err != FED_OK)
        fed_secagg_share_wipe(out, k);
    sodium_memzero(secret, sizeof secret);
    sodium_memzero(coef, sizeof coef);
    fed_free(xpow);
    return err;
}

/* Montgomery's trick: every v[i] (nonzero) replaced by its inverse with one
 * inversion and 3(n-1) products; tmp holds n prefix products. */
static void batch_inverse(uint64_t *v, uint64_t *tmp, size_t n)
{
    uint64_t acc = 1, inv;

    for (size_t i = 0; i < n; i++) {
        tmp[i] = acc;
        acc = fed_secagg_fp_mul(acc, v[i]);
    }
    inv = fed_secagg_fp_inv(acc);
    for (size_t i = n; i-- > 0;) {
        uint64_t vi = v[i];

        v[i] = fed_secagg_fp_mul(inv, tmp[i]);
        inv = fed_secagg_fp_mul(inv, vi);
    }
}

/* f(z) per limb from the t points xs with barycentric weights w
 * (w_i = 1 / prod_{j != i} (x_i - x_j)): f(z) = L(z) sum_i w_i y_i / (z - x_i),
 * L(z) = prod_j (z - x_j); z differs from every x_i. The x's are public; the
 * y's pass through constant-time products and sums only. */
static void interpolate(const fed_secagg_share *s, const uint64_t *w, uint64_t *d, uint64_t *tmp,
                        uint32_t t, uint64_t z, uint64_t f[FED_SECAGG_LIMBS])
{
    uint64_t lz = 1;

    for (uint32_t i = 0; i < t; i++) {
        d[i] = fed_secagg_fp_sub(z, s[i].x);
        lz = fed_secagg_fp_mul(lz, d[i]);
    }
    batch_inverse(d, tmp, t);
    for (int l = 0; l < FED_SECAGG_LIMBS; l++)
        f[l] = 0;
    for (uint32_t i = 0; i < t; i++) {
        uint64_t c = fed_secagg_fp_mul(lz, fed_secagg_fp_mul(w[i], d[i]));

        for (int l = 0; l < FED_SECAGG_LIMBS; l++)
            f[l] = fed_secagg_fp_add(f[l], fed_secagg_fp_mul(c, s[i].y[l]));
    }
}

fed_err fed_secagg_shamir_combine(const fed_secagg_share *shares, size_t m, uint32_t t,
                                  uint8_t seed[FED_SECAGG_SEED_BYTES])
{
    uint64_t *buf = NULL, *w, *d, *tmp;
    uint32_t *pts = NULL;
    uint64_t f[FED_SECAGG_LIMBS];
    uint64_t bad = 0;
    fed_err err;

    if (!shares || !seed || t == 0 || t > FED_SECAGG_MAX_SHARES || m > FED_SECAGG_MAX_SHARES) {
        err = FED_ERR_INVAL;
        goto out;
    }
    if (m < t) {
        err = FED_ERR_TOO_FEW;
        goto out;
    }
    pts = fed_malloc(m * sizeof *pts);
    buf = fed_malloc(3 * (size_t)t * sizeof *buf);
    if (!pts || !buf) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < m; i++)
        pts[i] = shares[i].x;
    err = check_points(pts, m);
    if (err != FED_OK)
        goto out;
    w = buf;
    d = buf + t;
    tmp = buf + 2 * (size_t)t;
    for (uint32_t i = 0; i < t; i++) {
        w[i] = 1;
        for (uint32_t j = 0; j < t; j++)
            if (j != i)
                w[i] = fed_secagg_fp_mul(w[i], fed_secagg_fp_sub(shares[i].x, shares[j].x));
    }
    batch_inverse(w, tmp, t);
    /* Every share beyond the first t must lie on the same polynomials; the
     * differences are OR-ed so no branch looks at a secret value. */
    for (size_t e = t; e < m; e++) {
        interpolate(shares, w, d, tmp, t, shares[e].x, f);
        for (int l = 0; l < FED_SECAGG_LIMBS; l++)
            bad |= f[l] ^ shares[e].y[l];
    }
    interpolate(shares, w, d, tmp, t, 0, f);
    err = fed_secagg_seed_from_limbs(f, seed);
    if (err == FED_OK && bad)
        err = FED_ERR_CORRUPT;
out:
    if (err != FED_OK && seed)
        sodium_memzero(seed, FED_SECAGG_SEED_BYTES);
    sodium_memzero(f, sizeof f);
    sodium_memzero(&bad, sizeof bad);
    fed_free(pts);
    fed_free(buf);
    return err;
}

void fed_secagg_share_encode(const fed_secagg_share *s, uint8_t out[FED_SECAGG_SHARE_BYTES])
{
    fed_put_u32le(out, s->x);
    for (int l = 0; l < FED_SECAGG_LIMBS; l++)
        fed_put_u64le(out + 4 + 8 * l, s->y[l]);
}

fed_err fed_secagg_share_decode(const uint8_t *in, size_t len, fed_secagg_share *s)
{
    uint64_t over = 0;

    if (len < FED_SECAGG_SHARE_BYTES)
        return FED_ERR_TRUNCATED;
    s->x = fed_get_u32le(in);
    for (int l = 0; l < FED_SECAGG_LIMBS; l++) {
        s->y[l] = fed_get_u64le(in + 4 + 8 * l);
        /* y >= p: a bit above the low 61, or the low 61 all ones (p
         * itself); no branch on the share. */
        over |= (s->y[l] >> 61) | (((s->y[l] & FED_SECAGG_P) + 1) >> 61);
    }
    if (s->x == 0 || over) {
        fed_secagg_share_wipe(s, 1);
        return FED_ERR_FORMAT;
    }
    return FED_OK;
}

void fed_secagg_share_wipe(fed_secagg_share *s, size_t n)
{
    if (s && n)
        sodium_memzero(s, n * sizeof *s);
}
