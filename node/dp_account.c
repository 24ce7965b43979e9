/* dp_account.c - the site's privacy accountant (dp_account.h): an RDP
 * vector over privacy/rdp.h's default orders, summed from the database's
 * charges and added to as releases are charged. */
#include "node/dp_account.h"

#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "privacy/rdp.h"

struct fed_dp_account {
    double delta;
    double rdp[FED_RDP_DEFAULT_NORDERS];
    uint64_t charges;
};

fed_err fed_dp_account_new(double delta, fed_dp_account **out)
{
    fed_dp_account *a;

    *out = NULL;
    if (fed_rdp_check_delta(delta) != FED_OK)
        return FED_ERR_RANGE;
    if (!(a = fed_calloc(1, sizeof *a)))
        return FED_ERR_NOMEM;
    a->delta = delta;
    *out = a;
    return FED_OK;
}

void fed_dp_account_free(fed_dp_account *a) { fed_free(a); }

static void add(double *rdp, double q, double sigma, uint64_t steps)
{
    fed_rdp_sgm p = {q, sigma};
    fed_rdp_mech m = {fed_rdp_sgm_step, &p};

    fed_rdp_compose(&m, steps, fed_rdp_default_orders, FED_RDP_DEFAULT_NORDERS, rdp);
}

static double epsilon_of(const double *rdp, double delta)
{
    double eps = fed_rdp_epsilon(fed_rdp_default_orders, rdp, FED_RDP_DEFAULT_NORDERS, delta,
                                 NULL);

    return isnan(eps) ? INFINITY : eps; /* nothing finite: never an understatement */
}

typedef struct load_ctx {
    fed_dp_account *a;
    int bad;
} load_ctx;

static int load_one(void *ctx, const fed_store_dp_charge *c)
{
    load_ctx *l = ctx;

    if (fed_rdp_check_sgm(c->q, c->sigma) != FED_OK) {
        l->bad = 1;
        return 1;
    }
    add(l->a->rdp, c->q, c->sigma, c->steps);
    l->a->charges++;
    return 0;
}

fed_err fed_dp_account_load(fed_dp_account *a, fed_store *st)
{
    load_ctx l = {a, 0};
    fed_err e;

    memset(a->rdp, 0, sizeof a->rdp);
    a->charges = 0;
    if ((e = fed_store_each_dp_charge(st, load_one, &l)) != FED_OK)
        return e;
    if (l.bad) {
        fed_log(FED_LOG_ERROR, "dp: a stored privacy charge is out of range");
        return FED_ERR_CORRUPT;
    }
    return FED_OK;
}

double fed_dp_account_epsilon(const fed_dp_account *a)
{
    return a->charges ? epsilon_of(a->rdp, a->delta) : 0.0;
}

double fed_dp_account_preview(const fed_dp_account *a, double q, double sigma, uint64_t steps)
{
    double rdp[FED_RDP_DEFAULT_NORDERS];

    if (fed_rdp_check_sgm(q, sigma) != FED_OK)
        return INFINITY;
    memcpy(rdp, a->rdp, sizeof rdp);
    add(rdp, q, sigma, steps);
    return epsilon_of(rdp, a->delta);
}

uint64_t fed_dp_account_round_steps(uint64_t n, uint32_t batch, uint32_t epochs)
{
    return batch ? (n + batch - 1) / batch * epochs : 0;
}

double fed_dp_account_rate(uint64_t n, uint32_t batch)
{
    return n <= batch ? 1.0 : (double)batch / (double)n;
}

fed_err fed_dp_account_charge(fed_dp_account *a, fed_store *st, uint64_t round, uint64_t at_ms,
                              double q, double sigma, uint64_t steps, double *eps)
{
    fed_store_dp_charge c;
    double total;
    fed_err e;

    if (fed_rdp_check_sgm(q, sigma) != FED_OK)
        return FED_ERR_RANGE;
    total = fed_dp_account_preview(a, q, sigma, steps);
    memset(&c, 0, sizeof c);
    c.round = round;
    c.at_ms = at_ms;
    c.q = q;
    c.sigma = sigma;
    c.steps = steps;
    c.delta = a->delta;
    c.epsilon = total;
    if ((e = fed_store_put_dp_charge(st, &c)) != FED_OK)
        return e;
    add(a->rdp, q, sigma, steps);
    a->charges++;
    if (eps)
        *eps = total;
    return FED_OK;
}

uint64_t fed_dp_account_charges(const fed_dp_account *a) { return a->charges; }
