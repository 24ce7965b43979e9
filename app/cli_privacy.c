/* cli_privacy.c - `fednode privacy`: the (epsilon, delta) that DP-SGD's
 * subsampled Gaussian spends over T steps (--sigma), or the smallest noise
 * multiplier that keeps it within a target epsilon (--target-epsilon).
 * Owns the command's options, their checks and messages and the printing;
 * the arithmetic is privacy/rdp.c. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/opt.h"
#include "privacy/rdp.h"
#include "app/cli.h"

#define NUM_MAX 64

typedef struct privacy_cfg {
    char q[NUM_MAX];
    char sigma[NUM_MAX];
    char target_epsilon[NUM_MAX];
    char steps[NUM_MAX];
    char delta[NUM_MAX];
    char orders[8192];
} privacy_cfg;

#define P(field, name, help) FED_OPT_DEF(privacy_cfg, field, name, FED_OPT_STR, "", 0, 0, help)
static const fed_opt privacy_opts[] = {
    P(q, "q", "sampling rate per step, in [0, 1] (batch / examples for DP-SGD)"),
    P(sigma, "sigma", "noise multiplier: noise standard deviation / clipping norm, >= 0"),
    P(target_epsilon, "target-epsilon",
      "instead of --sigma: find the smallest noise multiplier that spends at most this"),
    P(steps, "steps", "number of steps composed (an integer >= 0)"),
    P(delta, "delta", "the delta of (epsilon, delta), in (0, 1)"),
    P(orders, "orders",
      "comma-separated RDP orders, each above 1 and at most 10000 (default: 1.1..10.9 by "
      "0.1 and the integers 2..64)"),
};
#undef P
#define NPRIVACY_OPTS (sizeof privacy_opts / sizeof privacy_opts[0])

/* text as a finite double: 1, else 0 with the error printed. */
static int parse_double(const char *name, const char *text, double *out)
{
    if (!fed_opt_decimal(text, out)) { /* not 0x10 (16), inf or nan */
        fed_cli_error("privacy: --%s '%s' is not a number", name, text);
        return 0;
    }
    return 1;
}

/* --orders into a fed_alloc'd array (*orders, *n). Returns -1 to go on,
 * else the exit status. */
static int parse_orders(const char *text, double **orders, size_t *n)
{
    const char *p = text;
    size_t cap = 1, bad = 0, k = 0;
    fed_err err;
    double *v;

    *orders = NULL;
    *n = 0;
    while (*p == ' ')
        p++;
    if (!*p) {
        fed_cli_error("privacy: --orders is an empty list");
        return 2;
    }
    for (const char *c = text; *c; c++)
        cap += *c == ',';
    if (!(v = fed_calloc(cap, sizeof *v))) {
        fed_cli_error("privacy: out of memory");
        return 1;
    }
    for (;;) {
        char item[NUM_MAX];
        size_t len = strcspn(p, ",");

        while (len && p[len - 1] == ' ')
            len--;
        if (len == 0 || len >= sizeof item) {
            fed_cli_error("privacy: --orders '%s': item %zu is %s", text, k + 1,
                          len ? "too long" : "empty");
            fed_free(v);
            return 2;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (!fed_opt_decimal(item, &v[k])) {
            fed_cli_error("privacy: --orders: '%s' is not a number", item);
            fed_free(v);
            return 2;
        }
        k++;
        p += strcspn(p, ",");
        if (!*p)
            break;
        p++;
        while (*p == ' ')
            p++;
    }
    if ((err = fed_rdp_check_orders(v, k, &bad)) != FED_OK) {
        fed_cli_error("privacy: --orders: %g is not an order (each must be above 1 and at most "
                      "%g)", v[bad], FED_RDP_ORDER_MAX);
        fed_free(v);
        return 2;
    }
    *orders = v;
    *n = k;
    return -1;
}

/* The checked inputs. */
typedef struct privacy_in {
    double q, sigma, target, delta;
    uint64_t steps;
    int calibrate;
} privacy_in;

/* -1 to go on, else the exit status (the error printed). */
static int check_inputs(const privacy_cfg *c, privacy_in *in)
{
    char *end = NULL;

    if (!c->q[0] || !c->steps[0] || !c->delta[0]) {
        fed_cli_error("privacy: --q, --steps and --delta are required (see fednode privacy "
                      "--help)");
        return 2;
    }
    if (c->sigma[0] && c->target_epsilon[0]) {
        fed_cli_error("privacy: --sigma and --target-epsilon exclude each other: --sigma "
                      "computes epsilon, --target-epsilon the noise multiplier");
        return 2;
    }
    if (!c->sigma[0] && !c->target_epsilon[0]) {
        fed_cli_error("privacy: give --sigma S (to compute epsilon) or --target-epsilon E (to "
                      "compute the noise multiplier)");
        return 2;
    }
    in->calibrate = c->target_epsilon[0] != '\0';
    if (!parse_double("q", c->q, &in->q) || !parse_double("delta", c->delta, &in->delta))
        return 2;
    if (fed_rdp_check_sgm(in->q, 0.0) != FED_OK) {
        fed_cli_error("privacy: --q %s: the sampling rate must lie in [0, 1]", c->q);
        return 2;
    }
    if (fed_rdp_check_delta(in->delta) != FED_OK) {
        fed_cli_error("privacy: --delta %s: delta must lie strictly between 0 and 1", c->delta);
        return 2;
    }
    errno = 0;
    if (c->steps[0] < '0' || c->steps[0] > '9' ||
        (in->steps = strtoull(c->steps, &end, 10), *end || errno)) {
        fed_cli_error("privacy: --steps '%s' is not a whole number of steps", c->steps);
        return 2;
    }
    if (!in->calibrate) {
        if (!parse_double("sigma", c->sigma, &in->sigma))
            return 2;
        if (in->sigma < 0) {
            fed_cli_error("privacy: --sigma %s: the noise multiplier must be 0 or more",
                          c->sigma);
            return 2;
        }
        return -1;
    }
    if (!parse_double("target-epsilon", c->target_epsilon, &in->target))
        return 2;
    if (!(in->target > 0)) {
        fed_cli_error("privacy: --target-epsilon %s: the target must be above 0",
                      c->target_epsilon);
        return 2;
    }
    return -1;
}

int fed_cli_privacy(int argc, char **argv)
{
    privacy_cfg c;
    privacy_in in = {0};
    double *orders = NULL, eps = 0, order = NAN;
    size_t n = 0;
    fed_err err;
    int rc = fed_cli_load_options(
        "privacy",
        "--q Q (--sigma S | --target-epsilon E) --steps T --delta D [--orders A,B,...]\n"
        "  epsilon spent by T steps of DP-SGD's Poisson-subsampled Gaussian (RDP accountant,\n"
        "  the improved conversion to (epsilon, delta)), and the order that gives it",
        privacy_opts, NPRIVACY_OPTS, &c, argc, argv);

    if (rc < 0)
        rc = check_inputs(&c, &in);
    if (rc < 0 && c.orders[0])
        rc = parse_orders(c.orders, &orders, &n);
    if (rc >= 0)
        goto out;
    if (in.calibrate) {
        err = fed_rdp_sgm_calibrate(in.q, in.steps, in.delta, in.target, orders, n, &in.sigma,
                                    &eps, &order);
        if (err == FED_ERR_RANGE) {
            fed_cli_error("privacy: no noise multiplier up to %g keeps epsilon within %s",
                          FED_RDP_SIGMA_MAX, c.target_epsilon);
            rc = 1;
            goto out;
        }
    } else {
        err = fed_rdp_sgm_epsilon(in.q, in.sigma, in.steps, in.delta, orders, n, &eps, &order);
    }
    if (err != FED_OK) {
        fed_cli_error("privacy: %s", fed_strerror(err));
        rc = 1;
        goto out;
    }
    printf("epsilon %.12g\n", eps);
    if (isnan(order))
        printf("order   -\n");
    else
        printf("order   %.12g\n", order);
    printf("sigma   %.12g%s\n", in.sigma,
           in.calibrate ? "   (the smallest that meets --target-epsilon)" : "");
    printf("q       %.12g\nsteps   %llu\ndelta   %.12g\n", in.q, (unsigned long long)in.steps,
           in.delta);
    if (orders)
        printf("orders  %zu given\n", n);
    else
        printf("orders  %d (default: 1.1..10.9 by 0.1, 2..64)\n", FED_RDP_DEFAULT_NORDERS);
    rc = 0;
out:
    fed_free(orders);
    return rc;
}
