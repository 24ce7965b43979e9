/* bytes.h - little-endian integers in byte buffers, for every file and wire
 * format we draw as a byte table. Portable (byte by byte), no alignment
 * needs; the compiler turns them into plain loads and stores. */
#ifndef FED_CORE_BYTES_H
#define FED_CORE_BYTES_H

#include <stdint.h>
#include <string.h>

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
