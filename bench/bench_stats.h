/* bench_stats.h - what the C benches share: the clocks (wall, and this
 * process's CPU time: the figure a machine shared with other work disturbs
 * least) and a median with its spread over rounds. */
#ifndef FED_BENCH_STATS_H
#define FED_BENCH_STATS_H

#include <stdlib.h>
#include <time.h>

static inline double bench_clock_s(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double bench_now_s(void)
{
    return bench_clock_s(CLOCK_MONOTONIC);
}

static inline double bench_cpu_s(void)
{
    return bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

static inline int bench_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* median, min and max of v[0..n) (sorted in place; n >= 1) */
static inline void bench_spread(double *v, int n, double *med, double *lo, double *hi)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    *med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    *lo = v[0];
    *hi = v[n - 1];
}

#endif
