/* dp.h - DP-SGD's randomness: Gaussian noise for the summed clipped
 * gradient and Poisson sampling of each batch, both drawn from the caller's
 * fed_random_fn, which must be the node's CSPRNG (libsodium's randombytes in
 * the daemon and in fednode train), never the reproducible training RNG: an
 * adversary who knows the seed would know the noise. Tests and the simulator
 * may pass a seeded stream (fed_rng_random) so runs repeat; such a run is not
 * private, and says so. The clipping itself is fed_model_dp_grads; the loop
 * that ties them together is fed_trainer_set_dp (model/train.h).
 *
 * Floating point: the noise is drawn by the ziggurat (Marsaglia and Tsang
 * 2000; Doornik 2005), 24 random bits for the point in a strip (the float
 * the noise lands in keeps no more) and 53 in the rare wedge and tail
 * cases, and rounded to float when added; Mironov (2012) showed
 * that textbook floating-point samplers (his case: Laplace) leak through the
 * pattern of representable outputs. Rounding to float, with the noise much
 * larger than a gradient's last bits, blurs that pattern but is no proof; an
 * exact discrete Gaussian (Canonne, Kamath and Steinke 2020) is the remedy and
 * is not implemented yet. docs/privacy.md says the same. */
#ifndef FED_MODEL_DP_H
#define FED_MODEL_DP_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"

/* x[i] += std * N(0, 1) for i < n, in order (the same stream gives the same
 * noise); std >= 0 and finite, else FED_ERR_INVAL. x is host memory (the CPU
 * backend's buffers). Allocates nothing. */
FED_WUR fed_err fed_dp_add_noise(fed_random_fn rnd, void *ctx, float *x, size_t n, double std);

/* Poisson sampling: each of idx[0..n) independently with probability q
 * (0 <= q <= 1), in their order, into out (room for n); the count. Gaps are
 * drawn as geometric variables, so a draw costs about q n + 1 uniforms. */
size_t fed_dp_poisson(fed_random_fn rnd, void *ctx, const uint32_t *idx, size_t n, double q,
                      uint32_t *out);

#endif
