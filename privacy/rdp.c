/* rdp.c - the RDP accountant of rdp.h: the subsampled Gaussian's RDP at
 * integer and fractional orders, composition, conversion to (epsilon, delta)
 * and the calibration of the noise multiplier. Pure functions in double
 * precision; nothing here allocates. */
#include "privacy/rdp.h"

#include <math.h>

const double fed_rdp_default_orders[FED_RDP_DEFAULT_NORDERS] = {
    /* 1 + k/10, k = 1..99: each literal is that double exactly */
    1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0,
    2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7, 2.8, 2.9, 3.0,
    3.1, 3.2, 3.3, 3.4, 3.5, 3.6, 3.7, 3.8, 3.9, 4.0,
    4.1, 4.2, 4.3, 4.4, 4.5, 4.6, 4.7, 4.8, 4.9, 5.0,
    5.1, 5.2, 5.3, 5.4, 5.5, 5.6, 5.7, 5.8, 5.9, 6.0,
    6.1, 6.2, 6.3, 6.4, 6.5, 6.6, 6.7, 6.8, 6.9, 7.0,
    7.1, 7.2, 7.3, 7.4, 7.5, 7.6, 7.7, 7.8, 7.9, 8.0,
    8.1, 8.2, 8.3, 8.4, 8.5, 8.6, 8.7, 8.8, 8.9, 9.0,
    9.1, 9.2, 9.3, 9.4, 9.5, 9.6, 9.7, 9.8, 9.9, 10.0,
    10.1, 10.2, 10.3, 10.4, 10.5, 10.6, 10.7, 10.8, 10.9,
    /* the integers 2..64 */
    2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,
    18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33,
    34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49,
    50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64,
};

/* The fractional series: how far below the sum (and below 1, which A_alpha
 * never is under) a term must fall to stop, and how many terms it may take
 * before it gives up (+infinity). */
#define FRAC_TAIL (-30.0)
#define FRAC_TERMS_MAX 1000000

/* log(e^x + e^y) */
static double log_add(double x, double y)
{
    double a = fmin(x, y), b = fmax(x, y);

    if (a == -INFINITY)
        return b;
    return log1p(exp(a - b)) + b;
}

/* log(e^x - e^y), x >= y; NaN when y > x (a cancellation went wrong). */
static double log_sub(double x, double y)
{
    if (y == -INFINITY)
        return x;
    if (y > x)
        return NAN;
    if (x == y)
        return -INFINITY;
    if (x - y > 700.0) /* expm1 would overflow; log(e^d - 1) = d there */
        return x;
    return log(expm1(x - y)) + y;
}

/* log(erfc(x)), also where erfc(x) underflows: beyond x = 25 the asymptotic
 * series erfc(x) ~ exp(-x^2) / (x sqrt(pi)) * exp(-1/(2x^2) + 5/(8x^4)
 * - 37/(24x^6) + 353/(64x^8)), within 3e-13 of log erfc(x) from there on
 * (checked with mpmath at 40 digits; most of that is the rounding of x^2). */
static double log_erfc(double x)
{
    double r;

    if (x < 25.0)
        return log(erfc(x));
    r = 1.0 / (x * x);
    return -0.5 * log(M_PI) - log(x) - x * x +
           r * (-0.5 + r * (0.625 + r * (-37.0 / 24.0 + r * (353.0 / 64.0))));
}

/* log A_alpha for an integer alpha >= 2 and 0 < q < 1:
 * A = sum_i C(alpha, i) q^i (1-q)^(alpha-i) exp((i^2 - i) / (2 sigma^2)). */
static double log_a_int(double q, double sigma, unsigned alpha)
{
    double lq = log(q), l1q = log1p(-q), s2 = 2.0 * sigma * sigma;
    double log_coef = 0.0, acc = -INFINITY;

    for (unsigned i = 0; i <= alpha; i++) {
        double di = (double)i;

        if (i)
            log_coef += log((double)(alpha - i + 1) / di);
        acc = log_add(acc, log_coef + di * lq + (double)(alpha - i) * l1q + (di * di - di) / s2);
    }
    return acc;
}

/* log A_alpha for a fractional alpha > 1 and 0 < q < 1: the two series of
 * Mironov, Talwar and Zhang (2019), split at z0 = sigma^2 log(1/q - 1) + 1/2,
 * with the generalized binomial coefficients C(alpha, i) (whose sign
 * alternates once i > alpha + 1).
 *
 * When to stop. The reference code (TF Privacy, Opacus, dp_accounting) stops
 * at the first i where both terms are below e^-30; that is wrong when the
 * first terms are tiny and the mass lies further on: q = 0.48, sigma = 11.31,
 * alpha = 61.636 stops at i = 0 with log A = -30.7, where A >= 1 always
 * (numerical integration gives RDP 0.0629). Here a term may end the sum only
 * once i > alpha + 1: from there |C(alpha, i)| falls with i, the series
 * alternate, and the other factors of each term do not grow, except by at
 * most 1/(2 sigma^2) for one step where the erfc argument changes sign
 * (i = z0 for the first series, alpha - i = z0 for the second), so until
 * both of those are passed the test allows for 1/sigma^2. An alternating
 * series with falling terms is within its next term of its sum. */
static double log_a_frac(double q, double sigma, double alpha)
{
    double lq = log(q), l1q = log1p(-q), s2 = 2.0 * sigma * sigma;
    double z0 = sigma * sigma * (l1q - lq) + 0.5, inv = 1.0 / (M_SQRT2 * sigma);
    double a0 = -INFINITY, a1 = -INFINITY, log_coef = 0.0, sign = 1.0;

    for (int k = 0; k < FRAC_TERMS_MAX; k++) {
        double i = (double)k, j = alpha - i, t0, t1, s0, s1, slack, sum;

        if (k) {
            double f = (alpha - i + 1.0) / i;

            log_coef += log(fabs(f));
            if (f < 0)
                sign = -sign;
        }
        t0 = log_coef + i * lq + j * l1q;
        t1 = log_coef + j * lq + i * l1q;
        s0 = t0 + (i * i - i) / s2 + (-M_LN2 + log_erfc((i - z0) * inv));
        s1 = t1 + (j * j - j) / s2 + (-M_LN2 + log_erfc((z0 - j) * inv));
        if (sign > 0) {
            a0 = log_add(a0, s0);
            a1 = log_add(a1, s1);
        } else {
            a0 = log_sub(a0, s0);
            a1 = log_sub(a1, s1);
        }
        if (isnan(a0) || isnan(a1))
            return INFINITY;
        if (i <= alpha + 1.0)
            continue;
        slack = (i < z0 + 1.0 || j > z0 - 1.0) ? 1.0 / (sigma * sigma) : 0.0;
        sum = log_add(a0, a1);
        if (fmax(s0, s1) + slack < FRAC_TAIL + fmax(sum, 0.0))
            return sum;
    }
    return INFINITY;
}

double fed_rdp_subsampled_gaussian(double q, double sigma, double order)
{
    double la;

    if (!(q >= 0.0 && q <= 1.0) || !(sigma >= 0.0) || !(order > 1.0))
        return NAN;
    if (q == 0.0)
        return 0.0;
    if (sigma == 0.0 || isinf(order))
        return INFINITY;
    if (isinf(sigma))
        return 0.0;
    if (q == 1.0)
        return order / (2.0 * sigma * sigma);
    if (order <= FED_RDP_ORDER_MAX && order == floor(order))
        la = log_a_int(q, sigma, (unsigned)order);
    else if (order <= FED_RDP_ORDER_MAX)
        la = log_a_frac(q, sigma, order);
    else
        return INFINITY; /* beyond what the sums are sized for: no claim */
    /* A_alpha >= 1 in exact arithmetic: rounding may leave a hair below 0,
       anything more is a failed sum, and no claim is made */
    if (isnan(la) || la < -1e-9)
        return INFINITY;
    return la > 0.0 ? la / (order - 1.0) : 0.0;
}

double fed_rdp_sgm_step(const void *params, double order)
{
    const fed_rdp_sgm *p = params;

    return fed_rdp_subsampled_gaussian(p->q, p->sigma, order);
}

void fed_rdp_compose(const fed_rdp_mech *m, uint64_t steps, const double *orders, size_t n,
                     double *rdp)
{
    if (!steps)
        return;
    for (size_t i = 0; i < n; i++)
        rdp[i] += (double)steps * m->rdp(m->params, orders[i]);
}

double fed_rdp_order_epsilon(double order, double rdp, double delta)
{
    double eps;

    if (!(order >= 1.0) || !(rdp >= 0.0) || !(delta > 0.0 && delta < 1.0))
        return NAN;
    if (isinf(rdp))
        return INFINITY;
    if (delta * delta + expm1(-rdp) > 0.0) /* delta <= sqrt(1 - exp(-KL)) */
        return 0.0;
    if (order <= 1.01)
        return INFINITY;
    eps = rdp + log1p(-1.0 / order) - log(delta * order) / (order - 1.0);
    return eps > 0.0 ? eps : 0.0;
}

double fed_rdp_epsilon(const double *orders, const double *rdp, size_t n, double delta,
                       double *order)
{
    double best = INFINITY, best_order = NAN;

    for (size_t i = 0; i < n; i++) {
        double e = fed_rdp_order_epsilon(orders[i], rdp[i], delta);

        if (e < best) {
            best = e;
            best_order = orders[i];
        }
    }
    if (order)
        *order = best_order;
    return best;
}

fed_err fed_rdp_check_orders(const double *orders, size_t n, size_t *bad)
{
    if (n == 0 || !orders)
        return FED_ERR_INVAL;
    for (size_t i = 0; i < n; i++)
        if (!(orders[i] > 1.0 && orders[i] <= FED_RDP_ORDER_MAX)) {
            if (bad)
                *bad = i;
            return FED_ERR_RANGE;
        }
    return FED_OK;
}

fed_err fed_rdp_check_sgm(double q, double sigma)
{
    return q >= 0.0 && q <= 1.0 && sigma >= 0.0 && isfinite(sigma) ? FED_OK : FED_ERR_RANGE;
}

fed_err fed_rdp_check_delta(double delta)
{
    return delta > 0.0 && delta < 1.0 ? FED_OK : FED_ERR_RANGE;
}

fed_err fed_rdp_mech_epsilon(const fed_rdp_mech *m, uint64_t steps, double delta,
                             const double *orders, size_t n, double *eps, double *order)
{
    double best = INFINITY, best_order = NAN;
    fed_err err;

    if (!orders) {
        orders = fed_rdp_default_orders;
        n = FED_RDP_DEFAULT_NORDERS;
    }
    if ((err = fed_rdp_check_orders(orders, n, NULL)) != FED_OK ||
        (err = fed_rdp_check_delta(delta)) != FED_OK)
        return err;
    for (size_t i = 0; i < n; i++) {
        double r = steps ? (double)steps * m->rdp(m->params, orders[i]) : 0.0;
        double e = fed_rdp_order_epsilon(orders[i], r, delta);

        if (e < best) {
            best = e;
            best_order = orders[i];
        }
    }
    *eps = best;
    if (order)
        *order = best_order;
    return FED_OK;
}

fed_err fed_rdp_sgm_epsilon(double q, double sigma, uint64_t steps, double delta,
                            const double *orders, size_t n, double *eps, double *order)
{
    fed_rdp_sgm p = {q, sigma};
    fed_rdp_mech m = {fed_rdp_sgm_step, &p};

    if (fed_rdp_check_sgm(q, sigma) != FED_OK)
        return FED_ERR_RANGE;
    return fed_rdp_mech_epsilon(&m, steps, delta, orders, n, eps, order);
}

fed_err fed_rdp_sgm_calibrate(double q, uint64_t steps, double delta, double target_eps,
                              const double *orders, size_t n, double *sigma, double *eps,
                              double *order)
{
    double lo = 0.0, hi = 1.0, e_hi, o_hi, e, o;
    fed_err err;

    if (!(target_eps > 0.0 && isfinite(target_eps)))
        return FED_ERR_RANGE;
    if (q == 0.0 || steps == 0)
        hi = 0.0; /* nothing is spent at any noise */
    if ((err = fed_rdp_sgm_epsilon(q, hi, steps, delta, orders, n, &e_hi, &o_hi)) != FED_OK)
        return err;
    while (e_hi > target_eps) {
        if (hi >= FED_RDP_SIGMA_MAX)
            return FED_ERR_RANGE;
        lo = hi;
        hi = fmin(2.0 * hi, FED_RDP_SIGMA_MAX);
        if ((err = fed_rdp_sgm_epsilon(q, hi, steps, delta, orders, n, &e_hi, &o_hi)) != FED_OK)
            return err;
    }
    /* eps(lo) > target >= eps(hi) (lo = 0 spends infinitely); epsilon falls
       as sigma grows at every order, so the smallest sigma lies between */
    while (hi - lo > 1e-10 * hi) {
        double mid = lo + (hi - lo) / 2.0;

        if (mid <= lo || mid >= hi)
            break;
        if ((err = fed_rdp_sgm_epsilon(q, mid, steps, delta, orders, n, &e, &o)) != FED_OK)
            return err;
        if (e <= target_eps) {
            hi = mid;
            e_hi = e;
            o_hi = o;
        } else {
            lo = mid;
        }
    }
    *sigma = hi;
    if (eps)
        *eps = e_hi;
    if (order)
        *order = o_hi;
    return FED_OK;
}

double fed_rdp_binom_below(uint64_t n, double q, uint64_t m)
{
    double lq, l1q, log_coef = 0.0, acc = -INFINITY;

    if (!(q >= 0.0 && q <= 1.0))
        return NAN;
    if (m > n)
        return 1.0;
    if (m == 0)
        return 0.0;
    if (q == 0.0)
        return 1.0; /* the draw is 0 < m */
    if (q == 1.0)
        return 0.0; /* the draw is n >= m */
    lq = log(q);
    l1q = log1p(-q);
    /* sum_{i < m} C(n, i) q^i (1 - q)^(n - i), each term in log space (a
       tail of 1e-30 must not round to 0 before it is compared) */
    for (uint64_t i = 0; i < m; i++) {
        double di = (double)i;

        if (i)
            log_coef += log((double)(n - i + 1) / di);
        acc = log_add(acc, log_coef + di * lq + (double)(n - i) * l1q);
    }
    return acc >= 0.0 ? 1.0 : exp(acc);
}
