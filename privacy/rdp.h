/* rdp.h - the Rényi-DP accountant: how much (epsilon, delta) a run of a
 * randomized mechanism spends.
 *
 * A mechanism is known to the accountant by one function: its RDP at an order
 * alpha for one application (fed_rdp_step_fn). Composition adds RDP order by
 * order (steps times the per-step value); the total converts to (epsilon,
 * delta) at each order and the smallest epsilon over the order list is the
 * answer. Today's one mechanism is the Poisson-subsampled Gaussian of DP-SGD
 * and DP-FedAvg (sampling rate q, noise multiplier sigma = noise standard
 * deviation / clipping norm):
 *   - integer alpha: log A_alpha by the binomial sum in log space
 *     (Mironov, Talwar and Zhang 2019, section 3.3);
 *   - fractional alpha: the two-series form with erfc (ibid., section 3.3),
 *     summed until both terms fall below e^-30;
 *   RDP(alpha) = log A_alpha / (alpha - 1); q = 0 costs 0, sigma = 0 (with
 *   q > 0) is infinite, q = 1 is the plain Gaussian's alpha / (2 sigma^2).
 * Conversion to (epsilon, delta) is the improved bound (Balle et al. 2020,
 * Theorem 21; Canonne, Kamath and Steinke 2020, Proposition 12):
 *   epsilon = rdp + log((alpha - 1) / alpha) - (log delta + log alpha) / (alpha - 1),
 * with the two guards of Google's dp_accounting: epsilon is 0 when
 * delta^2 >= 1 - exp(-rdp) (the KL bound), and infinite for alpha <= 1.01
 * where the bound is numerically useless.
 *
 * Everything here is a pure function of its arguments in double precision:
 * no allocation, no global state, no logging; safe on any thread. A numeric
 * failure (a series that does not converge, a cancellation) gives +infinity
 * for that order, never an understatement of the loss. */
#ifndef FED_PRIVACY_RDP_H
#define FED_PRIVACY_RDP_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Orders the accountant takes: finite, above 1, at most this (the integer
 * sum costs alpha terms). */
#define FED_RDP_ORDER_MAX 10000.0

/* The default order list: 1 + k/10 for k = 1..99 (1.1 .. 10.9, as Opacus and
 * TF Privacy write them), then the integers 2..64. */
#define FED_RDP_DEFAULT_NORDERS 162
extern const double fed_rdp_default_orders[FED_RDP_DEFAULT_NORDERS];

/* ---- the one per-step interface ---- */

/* A mechanism's RDP at order alpha for one application, >= 0 or +infinity;
 * NaN when params are not valid. Pure. */
typedef double (*fed_rdp_step_fn)(const void *params, double order);

typedef struct fed_rdp_mech {
    fed_rdp_step_fn rdp;
    const void *params; /* what rdp reads, e.g. a fed_rdp_sgm */
} fed_rdp_mech;

/* ---- the Poisson-subsampled Gaussian ---- */

typedef struct fed_rdp_sgm {
    double q;     /* sampling rate, [0, 1] */
    double sigma; /* noise multiplier, >= 0 */
} fed_rdp_sgm;

/* Its RDP for one step at order alpha; NaN for q outside [0, 1], a negative
 * or NaN sigma or an order not above 1. */
double fed_rdp_subsampled_gaussian(double q, double sigma, double order);
/* The same as a fed_rdp_step_fn: params is a const fed_rdp_sgm *. */
double fed_rdp_sgm_step(const void *params, double order);

/* ---- composition and conversion ---- */

/* rdp[i] += steps * m's per-step RDP at orders[i], for i < n (0 steps add 0,
 * also to an infinite per-step value). */
void fed_rdp_compose(const fed_rdp_mech *m, uint64_t steps, const double *orders, size_t n,
                     double *rdp);

/* (epsilon, delta)'s epsilon at one order from its total RDP (see above);
 * NaN for an order below 1, a negative or NaN rdp, or delta outside (0, 1). */
double fed_rdp_order_epsilon(double order, double rdp, double delta);

/* The smallest epsilon over the orders (the first on a tie), and in *order
 * (may be NULL) the order that gives it; +infinity and NaN when none is
 * finite. */
double fed_rdp_epsilon(const double *orders, const double *rdp, size_t n, double delta,
                       double *order);

/* P(Bin(n, q) < m): the chance that a Poisson draw of n clients at rate q
 * holds fewer than m. A secure round with DP-FedAvg is void below its floor
 * of clients (node/agg_dp.c), an outcome that depends on the draw's size,
 * which the subsampled Gaussian's accounting does not cover; the aggregator
 * refuses a configuration where this exceeds delta / 10. 1 when m > n; NaN
 * for q outside [0, 1]. */
double fed_rdp_binom_below(uint64_t n, double q, uint64_t m);

/* ---- checks, for callers that take these from outside ---- */

/* FED_ERR_INVAL for an empty list (n == 0); FED_ERR_RANGE for an order that
 * is not finite, not above 1 or above FED_RDP_ORDER_MAX, with its index in
 * *bad (may be NULL). */
FED_WUR fed_err fed_rdp_check_orders(const double *orders, size_t n, size_t *bad);
/* FED_ERR_RANGE unless 0 <= q <= 1 and sigma >= 0 (finite). */
FED_WUR fed_err fed_rdp_check_sgm(double q, double sigma);
/* FED_ERR_RANGE unless 0 < delta < 1. */
FED_WUR fed_err fed_rdp_check_delta(double delta);

/* ---- one mechanism run `steps` times, streamed over the orders ---- */

/* epsilon (and the best order, may be NULL) of steps applications of m,
 * without an RDP vector: each order's total is converted as it is made.
 * orders NULL means the default list (n is then ignored). Errors: the
 * checks above (orders, delta). */
FED_WUR fed_err fed_rdp_mech_epsilon(const fed_rdp_mech *m, uint64_t steps, double delta,
                                     const double *orders, size_t n, double *eps,
                                     double *order);

/* The same for DP-SGD's subsampled Gaussian (also checks q and sigma). */
FED_WUR fed_err fed_rdp_sgm_epsilon(double q, double sigma, uint64_t steps, double delta,
                                    const double *orders, size_t n, double *eps,
                                    double *order);

/* The largest noise multiplier the calibration tries; a target that needs
 * more is FED_ERR_RANGE. */
#define FED_RDP_SIGMA_MAX 1e6

/* The smallest noise multiplier whose epsilon (q, steps, delta, the orders)
 * is at most target_eps, by bisection to a relative width of 1e-10 (as
 * Opacus's get_noise_multiplier, which stops at an epsilon within 0.01): in
 * *sigma, with its epsilon and best order in *eps and *order (both may be
 * NULL). 0 when q or steps is 0. Errors: target_eps not finite and > 0
 * (FED_ERR_RANGE), the checks above, FED_ERR_RANGE when even
 * FED_RDP_SIGMA_MAX spends more. */
FED_WUR fed_err fed_rdp_sgm_calibrate(double q, uint64_t steps, double delta, double target_eps,
                                      const double *orders, size_t n, double *sigma,
                                      double *eps, double *order);

#endif
