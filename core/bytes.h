/* bytes.h - little-endian integers in byte buffers, for every file and wire
 * format we draw as a byte table. Portable (byte by byte), no alignment
 * needs; the compiler turns them into plain loads and stores. Also the one
 * binary search over records kept in order of their leading 32-byte key. */
#ifndef FED_CORE_BYTES_H
#define FED_CORE_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

static inline void fed_put_u32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void fed_put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t fed_get_u32le(const uint8_t *p)
{
    uint32_t v = 0;

    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t fed_get_u64le(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

#endif
