/* codec.c - encoders and decoders of flat vectors (formats in codec.h).
 * Owns nothing but topk's two histograms for the length of a call. Must
 * never accept a non-finite value, read past len, or write past cap or n;
 * topk selection is deterministic (radix select on |x|'s bits, ties to the
 * lower index) and needs no n-sized scratch. */
#include "model/codec.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/opt.h"

#define Q8_MAX_INPUT 1e38f
#define Q8_MAX_SCALE 2e36f
#define Q8_TINY 0x1p-100f

static int nonfinite_bits(uint32_t u) { return (u & 0x7f800000u) == 0x7f800000u; }

/* ---- names ---- */

static const char *const names[FED_CODEC_COUNT_] = {"none", "f32", "f64", "f16", "q8", "topk"};

const char *fed_codec_name(fed_codec_id id)
{
    return (unsigned)id < FED_CODEC_COUNT_ ? names[id] : "?";
}

fed_err fed_codec_parse(const char *text, fed_codec *out)
{
    out->id = FED_CODEC_NONE;
    out->fraction = 0;
    for (int id = FED_CODEC_F32; id <= FED_CODEC_Q8; id++) {
        if (strcmp(text, names[id]) == 0) {
            out->id = (fed_codec_id)id;
            return FED_OK;
        }
    }
    if (strncmp(text, "topk:", 5) == 0 && text[5]) {
        char *end = NULL;
        double f = fed_strtod_decimal(text + 5, &end);

        if (*end == 0 && f > 0 && f <= 1) {
            out->id = FED_CODEC_TOPK;
            out->fraction = (float)f;
            return FED_OK;
        }
    }
    return FED_ERR_BAD_VALUE;
}

int fed_codec_format(const fed_codec *c, char *buf, size_t cap)
{
    if (c->id == FED_CODEC_TOPK)
        return snprintf(buf, cap, "topk:%g", (double)c->fraction);
    return snprintf(buf, cap, "%s", fed_codec_name(c->id));
}

/* ---- sizes ---- */

size_t fed_codec_topk_k(float fraction, size_t n)
{
    double k;

    if (n == 0)
        return 0;
    if (!(fraction > 0))
        return 1;
    /* A relative slack of 1e-6 keeps a fraction that came through a float
     * (0.1f is 0.100000001...) from rounding an exact k up by one. */
    k = (double)fraction * (double)n;
    k = ceil(k - k * 1e-6);
    if (k < 1)
        return 1;
    return k >= (double)n ? n : (size_t)k;
}

static size_t q8_blocks(size_t n) { return n / FED_CODEC_Q8_BLOCK + (n % FED_CODEC_Q8_BLOCK != 0); }

static fed_err body_size(fed_codec_id id, size_t n, size_t k, size_t *bytes)
{
    int ok = 1;
    size_t b = 0;

    switch (id) {
    case FED_CODEC_F32: b = fed_mul_size(n, 4, &ok); break;
    case FED_CODEC_F64: b = fed_mul_size(n, 8, &ok); break;
    case FED_CODEC_F16: b = fed_mul_size(n, 2, &ok); break;
    case FED_CODEC_Q8:
        b = fed_mul_size(q8_blocks(n), 4, &ok);
        ok = ok && b + n >= b;
        b += n;
        break;
    case FED_CODEC_TOPK:
        if (n > UINT32_MAX)
            return FED_ERR_RANGE;
        b = fed_mul_size(k, 8, &ok);
        break;
    default: return FED_ERR_INVAL;
    }
    if (!ok || b > SIZE_MAX - FED_CODEC_HEADER_BYTES)
        return FED_ERR_RANGE;
    *bytes = b + FED_CODEC_HEADER_BYTES;
    return FED_OK;
}

fed_err fed_codec_size(const fed_codec *c, size_t n, size_t *bytes)
{
    return body_size(c->id, n, c->id == FED_CODEC_TOPK ? fed_codec_topk_k(c->fraction, n) : 0,
                     bytes);
}

static void put_header(uint8_t *out, fed_codec_id id, uint32_t param, size_t n)
{
    out[0] = (uint8_t)id;
    out[1] = FED_CODEC_VERSION;
    fed_put_u16le(out + 2, 0);
    fed_put_u32le(out + 4, param);
    fed_put_u64le(out + 8, (uint64_t)n);
}

/* ---- f16 ---- */

/* binary32 -> binary16, round to nearest even; overflow gives infinity. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x = fed_f32_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;

    if (ax >= 0x47800000u) /* >= 65536: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {               /* below 2^-14: a subnormal half (or the least normal) */
        float v = fed_f32_from_bits(ax) * 0x1p24f; /* exact */

        return (uint16_t)(sign | (uint32_t)lrintf(v));
    }
    ax += 0xfffu + ((ax >> 13) & 1u); /* round to nearest even at bit 13 */
    ax -= (uint32_t)(127 - 15) << 23;
    return (uint16_t)(sign | (ax >> 13));
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;

    if (e == 0) {
        float v = (float)m * 0x1p-24f;

        return sign ? -v : v;
    }
    return fed_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- encoders ---- */

static int any_nonfinite(const float *x, size_t n)
{
    uint32_t bad = 0;

    for (size_t i = 0; i < n; i++)
        bad |= nonfinite_bits(fed_f32_bits(x[i]));
    return bad != 0;
}

static void encode_f32(const float *x, size_t n, uint8_t *body) { fed_put_f32le_n(body, x, n); }

static fed_err encode_f16(const float *x, size_t n, uint8_t *body)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t h = f32_to_f16(x[i]);

        if ((h & 0x7fffu) == 0x7c00u)
            return FED_ERR_RANGE;
        fed_put_u16le(body + 2 * i, h);
    }
    return FED_OK;
}

static fed_err encode_q8(const float *x, size_t n, uint8_t *body)
{
    for (size_t b0 = 0; b0 < n; b0 += FED_CODEC_Q8_BLOCK) {
        size_t len = n - b0 < FED_CODEC_Q8_BLOCK ? n - b0 : FED_CODEC_Q8_BLOCK;
        const float *xb = x + b0;
        float m = 0, scale = 0, inv = 0;

        for (size_t i = 0; i < len; i++)
            m = fmaxf(m, fabsf(xb[i]));
        if (m > Q8_MAX_INPUT)
            return FED_ERR_RANGE;
        if (m >= Q8_TINY) {
            scale = m / 127.0f;
            inv = 1.0f / scale;
        }
        fed_put_f32le(body, scale);
        body += 4;
        for (size_t i = 0; i < len; i++) {
            long q = lrintf(xb[i] * inv);

            q = q > 127 ? 127 : q < -127 ? -127 : q;
            body[i] = (uint8_t)(int8_t)q;
        }
        body += len;
    }
    return FED_OK;
}

static fed_err encode_f64_from_f32(const float *x, size_t n, uint8_t *body)
{
    for (size_t i = 0; i < n; i++)
        fed_put_f64le(body + 8 * i, (double)x[i]);
    return FED_OK;
}

/* ---- topk ---- */

static float acc_at(const float *x, const float *r, size_t i) { return r ? x[i] + r[i] : x[i]; }

/* The k-th largest |a| as bits (t) and how many entries lie strictly above it. */
static fed_err topk_threshold(const float *x, const float *r, size_t n, size_t k, uint32_t *t,
                              size_t *above)
{
    uint32_t *hi = fed_calloc(1u << 15, sizeof *hi), *lo = fed_calloc(1u << 16, sizeof *lo);
    size_t cum = 0, b, l;
    fed_err err = FED_OK;

    if (!hi || !lo) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        hi[(fed_f32_bits(acc_at(x, r, i)) & 0x7fffffffu) >> 16]++;
    for (b = (1u << 15) - 1; cum + hi[b] < k; b--)
        cum += hi[b];
    for (size_t i = 0; i < n; i++) {
        uint32_t u = fed_f32_bits(acc_at(x, r, i)) & 0x7fffffffu;

        if ((u >> 16) == b)
            lo[u & 0xffffu]++;
    }
    for (l = 0xffffu; cum + lo[l] < k; l--)
        cum += lo[l];
    *t = (uint32_t)(b << 16 | l);
    *above = cum;
out:
    fed_free(hi);
    fed_free(lo);
    return err;
}

static fed_err encode_topk(const fed_codec *c, const float *x, size_t n, float *r, uint8_t *body)
{
    size_t k = fed_codec_topk_k(c->fraction, n), above = 0, j = 0, ties;
    uint8_t *idx = body, *val = body + 4 * k;
    uint32_t t = 0;
    fed_err err;

    for (size_t i = 0; i < n; i++)
        if (nonfinite_bits(fed_f32_bits(acc_at(x, r, i))))
            return FED_ERR_NAN;
    if (k == 0)
        return FED_OK;
    err = topk_threshold(x, r, n, k, &t, &above);
    if (err != FED_OK)
        return err;
    ties = k - above;
    for (size_t i = 0; i < n; i++) {
        float xi = x[i], ri = r ? r[i] : 0.0f, a = xi + ri;
        uint32_t u = fed_f32_bits(a) & 0x7fffffffu;
        int take = u > t || (u == t && ties > 0);

        if (take) {
            if (u == t)
                ties--;
            fed_put_u32le(idx + 4 * j, (uint32_t)i);
            fed_put_f32le(val + 4 * j, a);
            j++;
            if (r) { /* TwoSum: a + e == xi + ri exactly */
                float bv = a - xi, e = (xi - (a - bv)) + (ri - bv);

                r[i] = e;
            }
        } else if (r) {
            r[i] = a;
        }
    }
    return FED_OK;
}

fed_err fed_codec_encode(const fed_codec *c, const float *x, size_t n, float *residual,
                         uint8_t *out, size_t cap, size_t *len)
{
    size_t need = 0, k = 0;
    fed_err err = fed_codec_size(c, n, &need);

    *len = 0;
    if (err != FED_OK)
        return err;
    if (need > cap)
        return FED_ERR_TOO_LARGE;
    if (c->id != FED_CODEC_TOPK && any_nonfinite(x, n))
        return FED_ERR_NAN;
    switch (c->id) {
    case FED_CODEC_F32: encode_f32(x, n, out + FED_CODEC_HEADER_BYTES); break;
    case FED_CODEC_F64: err = encode_f64_from_f32(x, n, out + FED_CODEC_HEADER_BYTES); break;
    case FED_CODEC_F16: err = encode_f16(x, n, out + FED_CODEC_HEADER_BYTES); break;
    case FED_CODEC_Q8: err = encode_q8(x, n, out + FED_CODEC_HEADER_BYTES); break;
    case FED_CODEC_TOPK:
        k = fed_codec_topk_k(c->fraction, n);
        err = encode_topk(c, x, n, residual, out + FED_CODEC_HEADER_BYTES);
        break;
    default: return FED_ERR_INVAL;
    }
    if (err != FED_OK)
        return err;
    put_header(out, c->id,
               c->id == FED_CODEC_Q8     ? FED_CODEC_Q8_BLOCK
               : c->id == FED_CODEC_TOPK ? (uint32_t)k
                                         : 0,
               n);
    *len = need;
    return FED_OK;
}

fed_err fed_codec_encode_f64(const double *x, size_t n, uint8_t *out, size_t cap, size_t *len)
{
    size_t need = 0;
    fed_err err = body_size(FED_CODEC_F64, n, 0, &need);
    uint8_t *body = out + FED_CODEC_HEADER_BYTES;

    *len = 0;
    if (err != FED_OK)
        return err;
    if (need > cap)
        return FED_ERR_TOO_LARGE;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return FED_ERR_NAN;
    fed_put_f64le_n(body, x, n);
    put_header(out, FED_CODEC_F64, 0, n);
    *len = need;
    return FED_OK;
}

/* ---- decoders ---- */

fed_err fed_codec_peek(const uint8_t *in, size_t len, fed_codec_id *id, uint64_t *n)
{
    if (len < FED_CODEC_HEADER_BYTES || in[0] == FED_CODEC_NONE || in[0] >= FED_CODEC_COUNT_ ||
        in[1] != FED_CODEC_VERSION || fed_get_u16le(in + 2) != 0)
        return FED_ERR_CODEC;
    *id = (fed_codec_id)in[0];
    *n = fed_get_u64le(in + 8);
    return FED_OK;
}

/* Header checks shared by every decoder: codec, n, and the exact length. */
static fed_err check_encoding(const uint8_t *in, size_t len, fed_codec_id expect, size_t n,
                              fed_codec_id *id)
{
    uint64_t got_n = 0;
    uint32_t param;
    size_t need = 0;
    fed_err err = fed_codec_peek(in, len, id, &got_n);

    if (err != FED_OK)
        return err;
    if ((expect != FED_CODEC_NONE && *id != expect) || got_n != (uint64_t)n)
        return FED_ERR_CODEC;
    param = fed_get_u32le(in + 4);
    if (*id == FED_CODEC_Q8) {
        if (param != FED_CODEC_Q8_BLOCK)
            return FED_ERR_CODEC;
    } else if (*id == FED_CODEC_TOPK) {
        if (param > n)
            return FED_ERR_CODEC;
    } else if (param != 0) {
        return FED_ERR_CODEC;
    }
    if (body_size(*id, n, param, &need) != FED_OK || need != len)
        return FED_ERR_CODEC;
    return FED_OK;
}

static fed_err decode_f32(const uint8_t *body, size_t n, float *x)
{
    uint32_t bad = 0;

    fed_get_f32le_n(x, body, n);
    for (size_t i = 0; i < n; i++)
        bad |= nonfinite_bits(fed_f32_bits(x[i]));
    return bad ? FED_ERR_NAN : FED_OK;
}

static fed_err decode_f16(const uint8_t *body, size_t n, float *x)
{
    uint32_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        uint16_t h = fed_get_u16le(body + 2 * i);

        bad |= (h & 0x7c00u) == 0x7c00u;
        x[i] = f16_to_f32(h);
    }
    return bad ? FED_ERR_NAN : FED_OK;
}

static fed_err decode_q8(const uint8_t *body, size_t n, float *x)
{
    for (size_t b0 = 0; b0 < n; b0 += FED_CODEC_Q8_BLOCK) {
        size_t len = n - b0 < FED_CODEC_Q8_BLOCK ? n - b0 : FED_CODEC_Q8_BLOCK;
        float scale = fed_get_f32le(body);
        uint32_t bad = 0;

        if (nonfinite_bits(fed_f32_bits(scale)))
            return FED_ERR_NAN;
        if (!(scale >= 0) || scale > Q8_MAX_SCALE)
            return FED_ERR_CODEC;
        body += 4;
        for (size_t i = 0; i < len; i++) {
            int8_t q = (int8_t)body[i];

            bad |= q == -128;
            x[b0 + i] = (float)q * scale;
        }
        if (bad)
            return FED_ERR_CODEC;
        body += len;
    }
    return FED_OK;
}

static fed_err decode_topk(const uint8_t *body, size_t k, size_t n, float *x)
{
    const uint8_t *idx = body, *val = body + 4 * k;
    uint64_t prev = 0;

    memset(x, 0, n * sizeof *x);
    for (size_t j = 0; j < k; j++) {
        uint32_t i = fed_get_u32le(idx + 4 * j);
        uint32_t u = fed_get_u32le(val + 4 * j);

        if (i >= n || (j > 0 && i <= prev))
            return FED_ERR_CODEC;
        if (nonfinite_bits(u))
            return FED_ERR_NAN;
        x[i] = fed_f32_from_bits(u);
        prev = i;
    }
    return FED_OK;
}

static fed_err decode_f64_to_f32(const uint8_t *body, size_t n, float *x)
{
    for (size_t i = 0; i < n; i++) {
        double d = fed_get_f64le(body + 8 * i);

        if (!isfinite(d))
            return FED_ERR_NAN;
        if (fabs(d) > (double)FLT_MAX)
            return FED_ERR_RANGE;
        x[i] = (float)d;
    }
    return FED_OK;
}

fed_err fed_codec_decode(const uint8_t *in, size_t len, fed_codec_id expect, float *x, size_t n)
{
    fed_codec_id id = FED_CODEC_NONE;
    fed_err err = check_encoding(in, len, expect, n, &id);
    const uint8_t *body = in + FED_CODEC_HEADER_BYTES;

    if (err != FED_OK)
        return err;
    switch (id) {
    case FED_CODEC_F32: return decode_f32(body, n, x);
    case FED_CODEC_F64: return decode_f64_to_f32(body, n, x);
    case FED_CODEC_F16: return decode_f16(body, n, x);
    case FED_CODEC_Q8: return decode_q8(body, n, x);
    case FED_CODEC_TOPK: return decode_topk(body, fed_get_u32le(in + 4), n, x);
    default: return FED_ERR_CODEC;
    }
}

fed_err fed_codec_decode_f64(const uint8_t *in, size_t len, double *x, size_t n)
{
    fed_codec_id id = FED_CODEC_NONE;
    fed_err err = check_encoding(in, len, FED_CODEC_F64, n, &id);
    const uint8_t *body = in + FED_CODEC_HEADER_BYTES;
    int bad = 0;

    if (err != FED_OK)
        return err;
    fed_get_f64le_n(x, body, n);
    for (size_t i = 0; i < n; i++)
        bad |= !isfinite(x[i]);
    return bad ? FED_ERR_NAN : FED_OK;
}
