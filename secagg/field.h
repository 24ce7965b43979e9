/* field.h - constant-time arithmetic in GF(p), p = 2^61 - 1, the prime field
 * secure aggregation's Shamir shares live in (secagg/shamir.c).
 *
 * Why this field: p is a Mersenne prime, so an element fits a uint64_t, a
 * product fits the compiler's 128-bit integer, and reduction is two shifts,
 * a mask and an add (2^61 = 1 mod p). A 32-byte seed is carried as five
 * elements of at most 56 bits each (secagg/shamir.h says how).
 *
 * Constant time: every operation here runs the same instructions whatever
 * the values. There is no branch and no table lookup on an operand; the one
 * conditional step ("subtract p when the result is >= p") is done with an
 * all-ones or all-zero mask built from the borrow bit of r - p, and the
 * 64 x 64 -> 128-bit product is one MUL instruction on x86-64 and aarch64,
 * whose timing does not depend on the operands. The one loop with branches,
 * fed_secagg_fp_inv's square-and-multiply, branches on the bits of the
 * public exponent p - 2 only, never on the element being inverted. Callers
 * keep values reduced: every function takes and returns elements in [0, p). */
#ifndef FED_SECAGG_FIELD_H
#define FED_SECAGG_FIELD_H

#include <stdint.h>

#define FED_SECAGG_P ((UINT64_C(1) << 61) - 1)

/* r - p when r >= p, else r; r < 2p. The borrow of r - p, as a mask,
 * adds p back when the subtraction went below zero. */
static inline uint64_t fed_secagg_fp_csub(uint64_t r)
{
    uint64_t t = r - FED_SECAGG_P;
    uint64_t borrow = 0 - (t >> 63); /* all ones when r < p (t wrapped) */

    return t + (FED_SECAGG_P & borrow);
}

static inline uint64_t fed_secagg_fp_add(uint64_t a, uint64_t b)
{
    return fed_secagg_fp_csub(a + b); /* < 2^62: no overflow */
}

static inline uint64_t fed_secagg_fp_sub(uint64_t a, uint64_t b)
{
    return fed_secagg_fp_csub(a + FED_SECAGG_P - b); /* in (0, 2p) */
}

static inline uint64_t fed_secagg_fp_mul(uint64_t a, uint64_t b)
{
    unsigned __int128 x = (unsigned __int128)a * b; /* < 2^122 */
    uint64_t lo = (uint64_t)x & FED_SECAGG_P;
    uint64_t hi = (uint64_t)(x >> 61); /* < 2^61 */
    uint64_t r = lo + hi;              /* < 2^62 */

    r = (r & FED_SECAGG_P) + (r >> 61); /* <= p + 1 < 2p */
    return fed_secagg_fp_csub(r);
}

/* a^(p-2) = 1/a for a != 0 (Fermat); 0 for 0. The exponent is the public
 * constant p - 2 = 2^61 - 3, so the loop's branches reveal nothing of a. */
static inline uint64_t fed_secagg_fp_inv(uint64_t a)
{
    const uint64_t e = FED_SECAGG_P - 2;
    uint64_t r = 1;

    for (int i = 60; i >= 0; i--) {
        r = fed_secagg_fp_mul(r, r);
        if ((e >> i) & 1)
            r = fed_secagg_fp_mul(r, a);
    }
    return r;
}

#endif
