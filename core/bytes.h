/* bytes.h - little-endian integers and floats in byte buffers, for every
 * file and wire format we draw as a byte table (the one codec: no module
 * keeps its own put_u32 or get_u64). No alignment needs; one byte-order
 * routine (fed_le_array) under every field and array: a memcpy on a
 * little-endian host, a byte reversal on a big-endian one. Floats travel
 * as their IEEE bits, so NaNs and signed zeros pass unchanged. Also the one
 * binary search over records kept in order of their leading 32-byte key. */
#ifndef FED_CORE_BYTES_H
#define FED_CORE_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* On a little-endian host a field is one memcpy, which compilers keep a plain
 * load or store even inside loops they vectorize (shift-and-or byte loops
 * cost codec.c's f64 vectors 4x); a big-endian host reverses the bytes. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FED_HOST_LE 1
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define FED_HOST_LE 0
#else
#error "core/bytes.h: a little- or big-endian host (__BYTE_ORDER__) is needed"
#endif

/* In n records of size bytes each, sorted by the 32-byte key each begins
 * with: the index of key (*found = 1), or where it would go (*found = 0). */
static inline size_t fed_key_search(const void *base, size_t n, size_t size,
                                    const uint8_t key[32], int *found)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp((const uint8_t *)base + mid * size, key, 32);

        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

/* n values of width bytes (2, 4 or 8) between host order and little-endian,
 * either way (it is the same byte reversal); dst may be src itself (in
 * place), and must not overlap it otherwise. */
static inline void fed_le_array(void *dst, const void *src, size_t n, size_t width)
{
    if (FED_HOST_LE) {
        if (dst != src && n)
            memcpy(dst, src, n * width);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t t[8];

        memcpy(t, (const uint8_t *)src + i * width, width);
        for (size_t k = 0; k < width; k++)
            ((uint8_t *)dst)[i * width + k] = t[width - 1 - k];
    }
}

static inline void fed_put_u16le(uint8_t *p, uint16_t v) { fed_le_array(p, &v, 1, 2); }
static inline void fed_put_u32le(uint8_t *p, uint32_t v) { fed_le_array(p, &v, 1, 4); }
static inline void fed_put_u64le(uint8_t *p, uint64_t v) { fed_le_array(p, &v, 1, 8); }

static inline uint16_t fed_get_u16le(const uint8_t *p)
{
    uint16_t v;

    fed_le_array(&v, p, 1, 2);
    return v;
}

static inline uint32_t fed_get_u32le(const uint8_t *p)
{
    uint32_t v;

    fed_le_array(&v, p, 1, 4);
    return v;
}

static inline uint64_t fed_get_u64le(const uint8_t *p)
{
    uint64_t v;

    fed_le_array(&v, p, 1, 8);
    return v;
}

/* ---- floats: their bits, and those bits little-endian ---- */

static inline uint32_t fed_f32_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    return u;
}

static inline float fed_f32_from_bits(uint32_t u)
{
    float f;

    memcpy(&f, &u, 4);
    return f;
}

static inline uint64_t fed_f64_bits(double d)
{
    uint64_t u;

    memcpy(&u, &d, 8);
    return u;
}

static inline double fed_f64_from_bits(uint64_t u)
{
    double d;

    memcpy(&d, &u, 8);
    return d;
}

static inline void fed_put_f32le(uint8_t *p, float f) { fed_put_u32le(p, fed_f32_bits(f)); }

static inline float fed_get_f32le(const uint8_t *p) { return fed_f32_from_bits(fed_get_u32le(p)); }

static inline void fed_put_f64le(uint8_t *p, double d) { fed_put_u64le(p, fed_f64_bits(d)); }

static inline double fed_get_f64le(const uint8_t *p) { return fed_f64_from_bits(fed_get_u64le(p)); }

/* n floats into 4n bytes, and back; the aliasing rule of fed_le_array. */
static inline void fed_put_f32le_n(uint8_t *dst, const float *src, size_t n)
{
    fed_le_array(dst, src, n, 4);
}

static inline void fed_get_f32le_n(float *dst, const uint8_t *src, size_t n)
{
    fed_le_array(dst, src, n, 4);
}

static inline void fed_put_f64le_n(uint8_t *dst, const double *src, size_t n)
{
    fed_le_array(dst, src, n, 8);
}

static inline void fed_get_f64le_n(double *dst, const uint8_t *src, size_t n)
{
    fed_le_array(dst, src, n, 8);
}

#endif
