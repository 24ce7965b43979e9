/* allreduce.c - the ring, k-ary tree and butterfly all-reduce schedules
 * (allreduce.h) as functions of (plan, member, step), and one member's
 * execution: its vector, the receives held until their step, the fixed order
 * they are applied in. Knows nothing of frames, keys or clocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "gossip/allreduce.h"

fed_err fed_gossip_ar_parse(const char *spec, fed_gossip_ar_topo *topo, uint32_t *arity)
{
    if (!spec)
        return FED_ERR_SPEC;
    if (!strcmp(spec, "ring")) {
        *topo = FED_GOSSIP_AR_RING;
        *arity = 0;
        return FED_OK;
    }
    if (!strcmp(spec, "butterfly")) {
        *topo = FED_GOSSIP_AR_BUTTERFLY;
        *arity = 0;
        return FED_OK;
    }
    if (!strcmp(spec, "tree")) {
        *topo = FED_GOSSIP_AR_TREE;
        *arity = 2;
        return FED_OK;
    }
    if (!strncmp(spec, "tree:", 5)) {
        const char *s = spec + 5;
        char *end = NULL;
        unsigned long k;

        if (*s < '0' || *s > '9')
            return FED_ERR_SPEC;
        k = strtoul(s, &end, 10);
        if (*end || k < 2 || k > FED_GOSSIP_AR_MAX_ARITY)
            return FED_ERR_SPEC;
        *topo = FED_GOSSIP_AR_TREE;
        *arity = (uint32_t)k;
        return FED_OK;
    }
    return FED_ERR_SPEC;
}

fed_err fed_gossip_ar_plan_init(fed_gossip_ar_plan *p, const char *spec, uint32_t n, size_t len)
{
    fed_err e = fed_gossip_ar_parse(spec, &p->topo, &p->arity);

    if (e != FED_OK)
        return e;
    if (n < 1 || n > FED_GOSSIP_AR_MAX_MEMBERS || len >= SIZE_MAX / sizeof(double) - 1)
        return FED_ERR_RANGE;
    p->n = n;
    p->dim = len + 1;
    return FED_OK;
}

/* ---- the schedules ---- */

static uint32_t log2_floor(uint32_t n)
{
    uint32_t l = 0;

    while (n >>= 1)
        l++;
    return l;
}

static uint32_t tree_depth(uint32_t i, uint32_t k)
{
    uint32_t d = 0;

    while (i) {
        i = (i - 1) / k;
        d++;
    }
    return d;
}

uint32_t fed_gossip_ar_steps(const fed_gossip_ar_plan *p)
{
    uint32_t lp;

    if (p->n < 2)
        return 0;
    switch (p->topo) {
    case FED_GOSSIP_AR_RING:
        return 2 * (p->n - 1);
    case FED_GOSSIP_AR_TREE:
        return 2 * tree_depth(p->n - 1, p->arity);
    case FED_GOSSIP_AR_BUTTERFLY:
        lp = log2_floor(p->n);
        return 2 * lp + ((p->n != (1u << lp)) ? 2 : 0);
    }
    return 0;
}

size_t fed_gossip_ar_fanout(const fed_gossip_ar_plan *p)
{
    return p->topo == FED_GOSSIP_AR_TREE ? p->arity : 1;
}

void fed_gossip_ar_slice(const fed_gossip_ar_plan *p, uint32_t c, size_t *off, size_t *len)
{
    /* boundaries floor(c * dim / n): sizes differ by at most one */
    size_t q = p->dim / p->n, r = p->dim % p->n;
    size_t a = (size_t)c * q + ((size_t)c * r) / p->n;
    size_t b = (size_t)(c + 1) * q + ((size_t)(c + 1) * r) / p->n;

    *off = a;
    *len = b - a;
}

static void put(fed_gossip_ar_xfer *x, size_t *cnt, uint32_t peer, fed_gossip_ar_op op,
                size_t off, size_t len)
{
    x[*cnt].peer = peer;
    x[*cnt].op = op;
    x[*cnt].off = off;
    x[*cnt].len = len;
    (*cnt)++;
}

static void ring_xfers(const fed_gossip_ar_plan *p, uint32_t me, uint32_t s,
                       fed_gossip_ar_xfer *send, size_t *nsend, fed_gossip_ar_xfer *recv,
                       size_t *nrecv)
{
    uint32_t n = p->n, next = (me + 1) % n, prev = (me + n - 1) % n;
    uint32_t cs, cr;
    fed_gossip_ar_op op;
    size_t off, len;

    if (s < n - 1) { /* reduce-scatter */
        cs = (me + n - s % n) % n;
        cr = (me + 2 * n - s - 1) % n;
        op = FED_GOSSIP_AR_ADD;
    } else { /* all-gather */
        uint32_t t = s - (n - 1);

        cs = (me + 1 + n - t) % n;
        cr = (me + n - t) % n;
        op = FED_GOSSIP_AR_COPY;
    }
    fed_gossip_ar_slice(p, cs, &off, &len);
    put(send, nsend, next, op, off, len);
    fed_gossip_ar_slice(p, cr, &off, &len);
    put(recv, nrecv, prev, op, off, len);
}

static void tree_xfers(const fed_gossip_ar_plan *p, uint32_t me, uint32_t s,
                       fed_gossip_ar_xfer *send, size_t *nsend, fed_gossip_ar_xfer *recv,
                       size_t *nrecv)
{
    uint32_t k = p->arity, n = p->n;
    uint32_t depth = tree_depth(n - 1, k), d = tree_depth(me, k);
    uint64_t first = (uint64_t)me * k + 1;

    if (s < depth) { /* up: depth - s sends, depth - s - 1 receives */
        if (d == depth - s && me > 0)
            put(send, nsend, (me - 1) / k, FED_GOSSIP_AR_ADD, 0, p->dim);
        if (d + 1 == depth - s)
            for (uint64_t c = first; c < first + k && c < n; c++)
                put(recv, nrecv, (uint32_t)c, FED_GOSSIP_AR_ADD, 0, p->dim);
    } else { /* down: depth u sends, u + 1 receives */
        uint32_t u = s - depth;

        if (d == u)
            for (uint64_t c = first; c < first + k && c < n; c++)
                put(send, nsend, (uint32_t)c, FED_GOSSIP_AR_COPY, 0, p->dim);
        if (d == u + 1)
            put(recv, nrecv, (me - 1) / k, FED_GOSSIP_AR_COPY, 0, p->dim);
    }
}

/* The range member i < p holds after `levels` halving levels. */
static void bf_range(size_t dim, uint32_t pw, uint32_t i, uint32_t levels, size_t *lo, size_t *hi)
{
    size_t a = 0, b = dim;

    for (uint32_t t = 0; t < levels; t++) {
        uint32_t d = pw >> (t + 1);
        size_t mid = a + (b - a) / 2;

        if (i & d)
            a = mid;
        else
            b = mid;
    }
    *lo = a;
    *hi = b;
}

static void bf_xfers(const fed_gossip_ar_plan *p, uint32_t me, uint32_t s,
                     fed_gossip_ar_xfer *send, size_t *nsend, fed_gossip_ar_xfer *recv,
                     size_t *nrecv)
{
    uint32_t lp = log2_floor(p->n), pw = 1u << lp, r = p->n - pw;
    uint32_t fold = r ? 1 : 0, nsteps = 2 * lp + 2 * fold;
    size_t lo, hi, mid;

    if (fold && s == 0) {
        if (me >= pw)
            put(send, nsend, me - pw, FED_GOSSIP_AR_ADD, 0, p->dim);
        else if (me < r)
            put(recv, nrecv, me + pw, FED_GOSSIP_AR_ADD, 0, p->dim);
        return;
    }
    if (fold && s == nsteps - 1) {
        if (me >= pw)
            put(recv, nrecv, me - pw, FED_GOSSIP_AR_COPY, 0, p->dim);
        else if (me < r)
            put(send, nsend, me + pw, FED_GOSSIP_AR_COPY, 0, p->dim);
        return;
    }
    if (me >= pw)
        return;
    s -= fold;
    if (s < lp) { /* halving, level s: distance pw >> (s + 1) */
        uint32_t d = pw >> (s + 1), peer = me ^ d;

        bf_range(p->dim, pw, me, s, &lo, &hi);
        mid = lo + (hi - lo) / 2;
        if (me & d) {
            put(send, nsend, peer, FED_GOSSIP_AR_ADD, lo, mid - lo);
            put(recv, nrecv, peer, FED_GOSSIP_AR_ADD, mid, hi - mid);
        } else {
            put(send, nsend, peer, FED_GOSSIP_AR_ADD, mid, hi - mid);
            put(recv, nrecv, peer, FED_GOSSIP_AR_ADD, lo, mid - lo);
        }
    } else { /* doubling, back up the levels */
        uint32_t level = 2 * lp - 1 - s, d = pw >> (level + 1), peer = me ^ d;
        size_t klo, khi;

        bf_range(p->dim, pw, me, level + 1, &klo, &khi);
        bf_range(p->dim, pw, peer, level + 1, &lo, &hi);
        put(send, nsend, peer, FED_GOSSIP_AR_COPY, klo, khi - klo);
        put(recv, nrecv, peer, FED_GOSSIP_AR_COPY, lo, hi - lo);
    }
}

void fed_gossip_ar_xfers(const fed_gossip_ar_plan *p, uint32_t me, uint32_t s,
                         fed_gossip_ar_xfer *send, size_t *nsend, fed_gossip_ar_xfer *recv,
                         size_t *nrecv)
{
    *nsend = *nrecv = 0;
    if (me >= p->n || s >= fed_gossip_ar_steps(p))
        return;
    switch (p->topo) {
    case FED_GOSSIP_AR_RING:
        ring_xfers(p, me, s, send, nsend, recv, nrecv);
        break;
    case FED_GOSSIP_AR_TREE:
        tree_xfers(p, me, s, send, nsend, recv, nrecv);
        break;
    case FED_GOSSIP_AR_BUTTERFLY:
        bf_xfers(p, me, s, send, nsend, recv, nrecv);
        break;
    }
}

size_t fed_gossip_ar_member_payload(const fed_gossip_ar_plan *p, uint32_t me)
{
    size_t fan = fed_gossip_ar_fanout(p), total = 0, ns, nr;
    fed_gossip_ar_xfer *s = fed_calloc(2 * fan, sizeof *s);
    uint32_t steps = fed_gossip_ar_steps(p);

    if (!s)
        return SIZE_MAX;
    for (uint32_t t = 0; t < steps; t++) {
        fed_gossip_ar_xfers(p, me, t, s, &ns, s + fan, &nr);
        for (size_t i = 0; i < ns; i++)
            total += s[i].len;
    }
    fed_free(s);
    return total;
}

/* ---- one member's run ---- */

typedef struct ar_held {
    uint32_t step, from;
    double *data; /* (len of the receive) */
} ar_held;

struct fed_gossip_ar_member {
    fed_gossip_ar_plan plan;
    uint32_t me, step, steps;
    double *acc;              /* (dim) */
    fed_gossip_ar_xfer *send; /* (fanout) the current step's */
    fed_gossip_ar_xfer *recv; /* (fanout) */
    fed_gossip_ar_xfer *tmp;  /* (2 * fanout) for other steps' lists */
    size_t nsend, nrecv;
    ar_held *held;            /* (cap) receives arrived, not yet applied */
    size_t nheld, cap;
};

static void load_step(fed_gossip_ar_member *m)
{
    fed_gossip_ar_xfers(&m->plan, m->me, m->step, m->send, &m->nsend, m->recv, &m->nrecv);
}

fed_err fed_gossip_ar_member_new(const fed_gossip_ar_plan *p, uint32_t me, const double *model,
                                 double weight, fed_gossip_ar_member **out)
{
    fed_gossip_ar_member *m = NULL;
    size_t fan = fed_gossip_ar_fanout(p), ns, nr;
    fed_err e = FED_ERR_NOMEM;

    *out = NULL;
    if (me >= p->n || p->dim < 1)
        return FED_ERR_RANGE;
    if (!isfinite(weight) || !(weight > 0))
        return FED_ERR_BAD_VALUE;
    for (size_t i = 0; i + 1 < p->dim; i++)
        if (!isfinite(model[i]))
            return FED_ERR_BAD_VALUE;
    if (!(m = fed_calloc(1, sizeof *m)))
        goto out;
    m->plan = *p;
    m->me = me;
    m->steps = fed_gossip_ar_steps(p);
    if (!(m->acc = fed_calloc(p->dim, sizeof *m->acc)) ||
        !(m->send = fed_calloc(fan, sizeof *m->send)) ||
        !(m->recv = fed_calloc(fan, sizeof *m->recv)) ||
        !(m->tmp = fed_calloc(2 * fan, sizeof *m->tmp)))
        goto out;
    for (uint32_t t = 0; t < m->steps; t++) {
        fed_gossip_ar_xfers(p, me, t, m->tmp, &ns, m->tmp + fan, &nr);
        m->cap += nr;
    }
    if (m->cap && !(m->held = fed_calloc(m->cap, sizeof *m->held)))
        goto out;
    for (size_t i = 0; i + 1 < p->dim; i++)
        m->acc[i] = weight * model[i];
    m->acc[p->dim - 1] = weight;
    load_step(m);
    *out = m;
    m = NULL;
    e = FED_OK;
out:
    fed_gossip_ar_member_free(m);
    return e;
}

void fed_gossip_ar_member_free(fed_gossip_ar_member *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nheld; i++)
        fed_free(m->held[i].data);
    fed_free(m->held);
    fed_free(m->tmp);
    fed_free(m->recv);
    fed_free(m->send);
    fed_free(m->acc);
    fed_free(m);
}

uint32_t fed_gossip_ar_member_step(const fed_gossip_ar_member *m) { return m->step; }
int fed_gossip_ar_member_done(const fed_gossip_ar_member *m) { return m->step >= m->steps; }
size_t fed_gossip_ar_member_nsend(const fed_gossip_ar_member *m) { return m->nsend; }
const double *fed_gossip_ar_member_sums(const fed_gossip_ar_member *m) { return m->acc; }

fed_err fed_gossip_ar_member_send(const fed_gossip_ar_member *m, size_t i, fed_gossip_ar_xfer *x,
                                  const double **data)
{
    if (i >= m->nsend)
        return FED_ERR_RANGE;
    *x = m->send[i];
    *data = m->acc + x->off;
    return FED_OK;
}

static ar_held *find_held(const fed_gossip_ar_member *m, uint32_t step, uint32_t from)
{
    for (size_t i = 0; i < m->nheld; i++)
        if (m->held[i].step == step && m->held[i].from == from)
            return &m->held[i];
    return NULL;
}

fed_err fed_gossip_ar_member_receive(fed_gossip_ar_member *m, uint32_t from, uint32_t s,
                                     const double *data, size_t len, int *fresh)
{
    size_t fan = fed_gossip_ar_fanout(&m->plan), ns, nr;
    const fed_gossip_ar_xfer *want = NULL;
    ar_held *h;

    if (fresh)
        *fresh = 0;
    fed_gossip_ar_xfers(&m->plan, m->me, s, m->tmp, &ns, m->tmp + fan, &nr);
    for (size_t i = 0; i < nr; i++)
        if (m->tmp[fan + i].peer == from)
            want = &m->tmp[fan + i];
    if (!want)
        return FED_ERR_ROLE;
    if (len != want->len)
        return FED_ERR_SHAPE;
    if (s < m->step || find_held(m, s, from))
        return FED_OK; /* a second copy (its ACK was lost): applied or held already */
    for (size_t i = 0; i < len; i++)
        if (!isfinite(data[i]))
            return FED_ERR_BAD_VALUE;
    if (m->nheld >= m->cap)
        return FED_ERR_INTERNAL; /* cannot happen: cap counts every receive */
    h = &m->held[m->nheld];
    if (!(h->data = fed_malloc(len ? len * sizeof *h->data : 1)))
        return FED_ERR_NOMEM;
    if (len)
        memcpy(h->data, data, len * sizeof *data);
    h->step = s;
    h->from = from;
    m->nheld++;
    if (fresh)
        *fresh = 1;
    return FED_OK;
}

int fed_gossip_ar_member_waits_for(const fed_gossip_ar_member *m, uint32_t from)
{
    for (size_t i = 0; i < m->nrecv; i++)
        if (m->recv[i].peer == from && !find_held(m, m->step, from))
            return 1;
    return 0;
}

int fed_gossip_ar_member_ready(const fed_gossip_ar_member *m)
{
    if (m->step >= m->steps)
        return 0;
    for (size_t i = 0; i < m->nrecv; i++)
        if (!find_held(m, m->step, m->recv[i].peer))
            return 0;
    return 1;
}

fed_err fed_gossip_ar_member_advance(fed_gossip_ar_member *m)
{
    if (!fed_gossip_ar_member_ready(m))
        return FED_ERR_BUSY;
    for (size_t i = 0; i < m->nrecv; i++) {
        const fed_gossip_ar_xfer *x = &m->recv[i];
        ar_held *h = find_held(m, m->step, x->peer);
        double *acc = m->acc + x->off;

        if (x->op == FED_GOSSIP_AR_ADD)
            for (size_t j = 0; j < x->len; j++)
                acc[j] = acc[j] + h->data[j];
        else if (x->len)
            memcpy(acc, h->data, x->len * sizeof *acc);
        fed_free(h->data);
        *h = m->held[--m->nheld];
    }
    m->step++;
    load_step(m);
    return FED_OK;
}

fed_err fed_gossip_ar_member_result(const fed_gossip_ar_member *m, float *out, double *weight)
{
    size_t len = m->plan.dim - 1;
    double w = m->acc[len];

    if (m->step < m->steps)
        return FED_ERR_BUSY;
    if (!(w > 0))
        return FED_ERR_BAD_VALUE;
    for (size_t i = 0; i < len; i++)
        out[i] = (float)(m->acc[i] / w);
    if (weight)
        *weight = w;
    return FED_OK;
}

/* ---- verification rows ---- */

uint32_t fed_gossip_ar_row_levels(uint32_t n)
{
    uint32_t k = 0;

    while (k < 32 && (1ull << k) < n)
        k++;
    return k;
}

uint64_t fed_gossip_ar_row(uint32_t n, uint64_t row, const uint64_t *rx, const uint8_t *same)
{
    uint32_t levels = fed_gossip_ar_row_levels(n);

    for (uint32_t k = 0; k < levels; k++)
        if (rx[k] && !same[k])
            return 0;
    if (row < 1)
        row = 1;
    /* ascending: a level usable at all (row >= 2^k) was usable before the
       larger ones raised the row, and what it adds does not depend on it */
    for (uint32_t k = 0; k < levels; k++) {
        uint64_t d = 1ull << k;

        if (rx[k] >= n)
            row = n;
        else if (rx[k] && row >= d && d + rx[k] > row)
            row = d + rx[k] < n ? d + rx[k] : n;
    }
    return row < n ? row : n;
}

/* ---- groups ---- */

uint32_t fed_gossip_ar_radices(uint32_t n, uint32_t g, uint32_t r[FED_GOSSIP_AR_MAX_RADICES])
{
    uint32_t d = 0, m = n;

    while (m > 1 && d < FED_GOSSIP_AR_MAX_RADICES) {
        uint32_t f = 0;

        for (uint32_t k = g < m ? g : m; k >= 2 && !f; k--)
            if (m % k == 0)
                f = k;
        for (uint32_t k = 2; !f; k++) /* no divisor in 2..g: the smallest prime */
            if (m % k == 0)
                f = k;
        r[d++] = f;
        m /= f;
    }
    return d;
}

fed_err fed_gossip_ar_group(uint32_t n, uint32_t g, uint64_t seed, uint64_t round, uint32_t me,
                            uint32_t *out, uint32_t *cnt)
{
    uint32_t r[FED_GOSSIP_AR_MAX_RADICES], d, dig;
    uint32_t *perm = NULL, *at = NULL;
    uint64_t below = 1, pos, base;
    fed_rng rng;
    fed_err e = FED_ERR_NOMEM;

    *cnt = 0;
    if (me >= n || g < 2 || round < 1)
        return FED_ERR_RANGE;
    d = fed_gossip_ar_radices(n, g, r);
    if (d == 0) { /* one member */
        out[0] = me;
        *cnt = 1;
        return FED_OK;
    }
    dig = (uint32_t)((round - 1) % d);
    if (!(perm = fed_malloc((size_t)n * sizeof *perm)) || !(at = fed_malloc((size_t)n * sizeof *at)))
        goto out;
    /* the cycle's permutation: position -> member (Fisher-Yates) */
    fed_rng_seed_stream(&rng, seed, (round - 1) / d);
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)fed_rng_below(&rng, (uint64_t)i + 1), t = perm[i];

        perm[i] = perm[j];
        perm[j] = t;
    }
    for (uint32_t i = 0; i < n; i++)
        at[perm[i]] = i;
    for (uint32_t t = 0; t < dig; t++)
        below *= r[t];
    pos = at[me];
    base = pos - (pos / below % r[dig]) * below; /* digit dig cleared */
    for (uint32_t v = 0; v < r[dig]; v++)
        out[(*cnt)++] = perm[base + v * below];
    /* increasing member order (key order): a short insertion sort */
    for (uint32_t i = 1; i < *cnt; i++)
        for (uint32_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
            uint32_t t = out[j];

            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    e = FED_OK;
out:
    fed_free(perm);
    fed_free(at);
    return e;
}
