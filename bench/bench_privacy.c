/* bench_privacy.c - the RDP accountant's time for 10,000 rounds of
 * composition, as a site charges them: each round adds its steps of DP-SGD
 * (q, sigma) to the RDP vector over the default 162 orders and converts the
 * total to epsilon. Beside it, in the same run: the same rounds with the
 * per-step RDP computed once (what a caller that knows q and sigma are fixed
 * may do), and one call for all the steps at once (the closed form of
 * identical rounds), whose epsilon the round by round totals must equal.
 * Best of several runs on a shared machine; nothing asserts a time. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "privacy/rdp.h"

#define ROUNDS 10000
#define STEPS 50 /* per round: one local epoch of 50 batches */
#define REPS 3
#define N FED_RDP_DEFAULT_NORDERS

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    const double q = 0.01, sigma = 1.1, delta = 1e-5, *orders = fed_rdp_default_orders;
    fed_rdp_sgm p = {q, sigma};
    fed_rdp_mech m = {fed_rdp_sgm_step, &p};
    double rdp[N], step[N], t_full = 1e9, t_cached = 1e9, t_once = 1e9, t, sink = 0;
    double eps_full = 0, eps_cached = 0, eps_once = 0, order = 0;

    printf("bench_privacy: %d rounds of %d steps, q %g, sigma %g, delta %g, %d orders, best of "
           "%d\n",
           ROUNDS, STEPS, q, sigma, delta, N, REPS);
    for (int k = 0; k < REPS; k++) {
        /* round by round: compose this round's steps, then epsilon so far */
        memset(rdp, 0, sizeof rdp);
        t = now_s();
        for (int r = 0; r < ROUNDS; r++) {
            fed_rdp_compose(&m, STEPS, orders, N, rdp);
            eps_full = fed_rdp_epsilon(orders, rdp, N, delta, &order);
            sink += eps_full;
        }
        t = now_s() - t;
        t_full = fmin(t_full, t);

        /* the per-step RDP once, then each round an add and a conversion */
        memset(rdp, 0, sizeof rdp);
        t = now_s();
        memset(step, 0, sizeof step);
        fed_rdp_compose(&m, 1, orders, N, step);
        for (int r = 0; r < ROUNDS; r++) {
            for (int i = 0; i < N; i++)
                rdp[i] += STEPS * step[i];
            eps_cached = fed_rdp_epsilon(orders, rdp, N, delta, &order);
            sink += eps_cached;
        }
        t = now_s() - t;
        t_cached = fmin(t_cached, t);

        /* every step at once */
        t = now_s();
        if (fed_rdp_sgm_epsilon(q, sigma, (uint64_t)ROUNDS * STEPS, delta, NULL, 0, &eps_once,
                                &order) != FED_OK)
            return 1;
        t = now_s() - t;
        t_once = fmin(t_once, t);
    }
    printf("  round by round (compose + epsilon)   %8.1f ms  %7.2f us/round  epsilon %.9g\n",
           t_full * 1e3, t_full * 1e6 / ROUNDS, eps_full);
    printf("  per-step RDP once, add + epsilon     %8.1f ms  %7.2f us/round  epsilon %.9g\n",
           t_cached * 1e3, t_cached * 1e6 / ROUNDS, eps_cached);
    printf("  one call for all %d steps        %8.3f ms                  epsilon %.9g "
           "(order %g)\n",
           ROUNDS * STEPS, t_once * 1e3, eps_once, order);
    if (fabs(eps_full - eps_once) > 1e-9 * eps_once ||
        fabs(eps_cached - eps_once) > 1e-9 * eps_once) {
        printf("bench_privacy: the round by round epsilon differs from the one-call epsilon\n");
        return 1;
    }
    return sink > 0 ? 0 : 1;
}
