/* quant.h - the fixed-point form secure aggregation sums: clipping, the
 * check that a cohort's sum cannot wrap 2^32, stochastic rounding, and the
 * way back from a sum of quantized vectors to floats.
 *
 * A vector x is clipped twice: scaled by min(1, clip_norm / ||x||_2) (the
 * L2 clip; clip_norm 0 leaves it), then each coordinate clamped into
 * [-range, range]. A clipped value v becomes u = (v + range) * L / (2 range)
 * in [0, L], L = 2^bits - 1, rounded to floor(u) + 1 with probability
 * u - floor(u) and to floor(u) otherwise, the draw from the caller's RNG
 * (the round's): unbiased, E[q] = u. The words of m clients summed modulo
 * 2^32 equal their true sum as long as m L < 2^32, which
 * fed_secagg_quant_check makes sure of before a round starts. The sum Q of
 * m clients is read back as Q 2 range / L - m range.
 *
 * The bound (fed_secagg_quant_bound): each rounding moves a value by less
 * than one step 2 range / L, so per coordinate
 *     |dequantized sum - sum of the clipped values| < m 2 range / (2^bits - 1)
 * plus the float rounding of the result (half an ulp of it, |sum| 2^-24);
 * for the mean of m clients, less than 2 range / (2^bits - 1). The error
 * has mean zero and a standard deviation of at most sqrt(m) range / L. */
#ifndef FED_SECAGG_QUANT_H
#define FED_SECAGG_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"

typedef struct fed_secagg_quant {
    double clip_norm; /* L2 clip before the range (0: none) */
    double range;     /* each coordinate into [-range, range]; > 0 */
    uint32_t bits;    /* quantized words in [0, 2^bits - 1]; 1 .. 32 */
} fed_secagg_quant;

/* FED_ERR_INVAL for bad settings (why says which). FED_ERR_RANGE when
 * max_clients (2^bits - 1) >= 2^32: why names the settings to change
 * (secagg-bits, or the number of clients a round samples) and the largest
 * value of each that fits. why may be NULL. */
FED_WUR fed_err fed_secagg_quant_check(const fed_secagg_quant *q, uint32_t max_clients, char *why,
                                       size_t cap);
/* The L2 clip's factor for x: min(1, clip_norm / ||x||), 1 without a clip. */
double fed_secagg_clip_scale(const fed_secagg_quant *q, const float *x, size_t n);
/* x, clipped and stochastically rounded, into out (n words). FED_ERR_NAN
 * when x holds a NaN or infinity (out untouched); FED_ERR_INVAL for bad
 * settings. */
FED_WUR fed_err fed_secagg_quantize(const fed_secagg_quant *q, const float *x, size_t n,
                                    fed_rng *rng, uint32_t *out);
/* The sum of m clients' quantized vectors (n words) as floats. */
FED_WUR fed_err fed_secagg_dequantize(const fed_secagg_quant *q, const uint32_t *sum, size_t n,
                                      uint32_t m, float *out);
/* m 2 range / (2^bits - 1): the bound above, without the float rounding. */
double fed_secagg_quant_bound(const fed_secagg_quant *q, uint32_t m);

#endif
