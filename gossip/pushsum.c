/* pushsum.c - push-sum in running-sums form (pushsum.h): a node's (x, w),
 * the totals given to each out-neighbour and taken from each in-neighbour,
 * and the totals held until they are applied in key order. Owns those
 * vectors; knows nothing of frames, models or who is alive. */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "gossip/pushsum.h"

typedef struct ps_out {
    uint8_t key[32];
    double w;  /* running total given (plain: this round's share) */
    double *x; /* (dim) */
} ps_out;

typedef struct ps_in {
    uint8_t key[32];
    uint64_t epoch, round; /* of the last total taken (0, 0: none) */
    double w;              /* rho: the last total taken */
    double *x;             /* (dim) */
    int held;              /* a total waits for apply */
    uint64_t h_epoch, h_round;
    double h_w;
    double *h_x;           /* (dim) the total held (plain: the shares, summed);
                              NULL while none is: a node holds this round's
                              in-neighbours' alone, not every sender's since */
} ps_in;

struct fed_gossip_ps {
    size_t dim;
    int plain;
    double w;
    double *x;     /* (dim) */
    ps_out *outs;  /* (nout) by key */
    size_t nout, cap_out;
    ps_in *ins;    /* (nin) by key */
    size_t nin, cap_in;
};

fed_err fed_gossip_ps_new(size_t dim, int plain, fed_gossip_ps **out)
{
    fed_gossip_ps *ps = fed_calloc(1, sizeof *ps);

    *out = NULL;
    if (!ps || !(ps->x = fed_calloc(dim ? dim : 1, sizeof *ps->x))) {
        fed_free(ps);
        return FED_ERR_NOMEM;
    }
    ps->dim = dim;
    ps->plain = plain != 0;
    ps->w = 1.0;
    *out = ps;
    return FED_OK;
}

static void clear_pairs(fed_gossip_ps *ps)
{
    for (size_t i = 0; i < ps->nout; i++)
        fed_free(ps->outs[i].x);
    for (size_t i = 0; i < ps->nin; i++) {
        fed_free(ps->ins[i].x);
        fed_free(ps->ins[i].h_x);
    }
    ps->nout = ps->nin = 0;
}

void fed_gossip_ps_free(fed_gossip_ps *ps)
{
    if (!ps)
        return;
    clear_pairs(ps);
    fed_free(ps->outs);
    fed_free(ps->ins);
    fed_free(ps->x);
    fed_free(ps);
}

size_t fed_gossip_ps_dim(const fed_gossip_ps *ps) { return ps->dim; }
int fed_gossip_ps_plain(const fed_gossip_ps *ps) { return ps->plain; }
double *fed_gossip_ps_x(fed_gossip_ps *ps) { return ps->x; }
double fed_gossip_ps_w(const fed_gossip_ps *ps) { return ps->w; }

void fed_gossip_ps_set_model(fed_gossip_ps *ps, const float *v)
{
    for (size_t i = 0; i < ps->dim; i++)
        ps->x[i] = ps->w * (double)v[i];
}

void fed_gossip_ps_set(fed_gossip_ps *ps, const double *v, double weight)
{
    memcpy(ps->x, v, ps->dim * sizeof *v);
    ps->w = weight;
}

void fed_gossip_ps_estimate(const fed_gossip_ps *ps, float *out)
{
    for (size_t i = 0; i < ps->dim; i++)
        out[i] = (float)(ps->x[i] / ps->w);
}

void fed_gossip_ps_estimate_f64(const fed_gossip_ps *ps, double *out)
{
    for (size_t i = 0; i < ps->dim; i++)
        out[i] = ps->x[i] / ps->w;
}

/* ---- pairs, kept sorted by key ---- */

/* Room for one more record at index at; the new one zeroed, key set. */
static fed_err insert(void **base, size_t *n, size_t *cap, size_t size, size_t at,
                      const uint8_t key[32])
{
    uint8_t *b;

    if (*n == FED_GOSSIP_PS_MAX_PAIRS)
        return FED_ERR_FULL;
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 8;
        void *p = fed_realloc(*base, c * size);

        if (!p)
            return FED_ERR_NOMEM;
        *base = p;
        *cap = c;
    }
    b = *base;
    memmove(b + (at + 1) * size, b + at * size, (*n - at) * size);
    memset(b + at * size, 0, size);
    memcpy(b + at * size, key, 32);
    (*n)++;
    return FED_OK;
}

static fed_err out_pair(fed_gossip_ps *ps, const uint8_t key[32], ps_out **out)
{
    int found;
    size_t at = fed_key_search(ps->outs, ps->nout, sizeof *ps->outs, key, &found);
    fed_err e;

    if (!found) {
        double *x = fed_calloc(ps->dim ? ps->dim : 1, sizeof *x);

        if (!x)
            return FED_ERR_NOMEM;
        if ((e = insert((void **)&ps->outs, &ps->nout, &ps->cap_out, sizeof *ps->outs, at, key)) !=
            FED_OK) {
            fed_free(x);
            return e;
        }
        ps->outs[at].x = x;
    }
    *out = &ps->outs[at];
    return FED_OK;
}

static fed_err in_pair(fed_gossip_ps *ps, const uint8_t key[32], ps_in **out)
{
    int found;
    size_t at = fed_key_search(ps->ins, ps->nin, sizeof *ps->ins, key, &found);
    fed_err e = FED_ERR_NOMEM;

    if (!found) {
        double *x = fed_calloc(ps->dim ? ps->dim : 1, sizeof *x);

        if (!x ||
            (e = insert((void **)&ps->ins, &ps->nin, &ps->cap_in, sizeof *ps->ins, at, key)) !=
                FED_OK) {
            fed_free(x);
            return e;
        }
        ps->ins[at].x = x;
    }
    *out = &ps->ins[at];
    return FED_OK;
}

/* ---- sending ---- */

fed_err fed_gossip_ps_split(fed_gossip_ps *ps, const uint8_t (*keys)[32], const double *frac,
                            size_t m)
{
    double given = 0;
    fed_err e;

    for (size_t j = 0; j < m; j++) {
        if (!isfinite(frac[j]) || frac[j] < 0)
            return FED_ERR_INVAL;
        given += frac[j];
    }
    if (!(given < 1.0))
        return FED_ERR_INVAL;
    for (size_t j = 0; j < m; j++) {
        ps_out *o;

        if ((e = out_pair(ps, keys[j], &o)) != FED_OK)
            return e;
        if (ps->plain) {
            o->w = frac[j] * ps->w;
            for (size_t i = 0; i < ps->dim; i++)
                o->x[i] = frac[j] * ps->x[i];
        } else {
            o->w += frac[j] * ps->w;
            for (size_t i = 0; i < ps->dim; i++)
                o->x[i] += frac[j] * ps->x[i];
        }
    }
    ps->w *= 1.0 - given;
    for (size_t i = 0; i < ps->dim; i++)
        ps->x[i] *= 1.0 - given;
    return FED_OK;
}

fed_err fed_gossip_ps_total(const fed_gossip_ps *ps, const uint8_t to[32], const double **x,
                            double *w)
{
    int found;
    size_t at = fed_key_search(ps->outs, ps->nout, sizeof *ps->outs, to, &found);

    if (!found)
        return FED_ERR_NOTFOUND;
    *x = ps->outs[at].x;
    *w = ps->outs[at].w;
    return FED_OK;
}

/* ---- receiving ---- */

/* (epoch, round) after (e0, r0)? A new epoch wins whatever its round. */
static int newer(uint64_t epoch, uint64_t round, uint64_t e0, uint64_t r0)
{
    return epoch > e0 || (epoch == e0 && round > r0);
}

fed_err fed_gossip_ps_receive(fed_gossip_ps *ps, const uint8_t from[32], uint64_t epoch,
                              uint64_t round, const double *x, double w, int *taken)
{
    ps_in *p;
    fed_err e;

    if (taken)
        *taken = 0;
    if (!isfinite(w) || w < 0)
        return FED_ERR_BAD_VALUE;
    for (size_t i = 0; i < ps->dim; i++)
        if (!isfinite(x[i]))
            return FED_ERR_BAD_VALUE;
    if ((e = in_pair(ps, from, &p)) != FED_OK)
        return e;
    if (p->held ? !newer(epoch, round, p->h_epoch, p->h_round)
                : !newer(epoch, round, p->epoch, p->round))
        return FED_OK; /* a resend, or overtaken */
    if (ps->plain && p->held && epoch == p->h_epoch) { /* shares add up */
        p->h_w += w;
        for (size_t i = 0; i < ps->dim; i++)
            p->h_x[i] += x[i];
    } else {
        if (!p->h_x && !(p->h_x = fed_malloc((ps->dim ? ps->dim : 1) * sizeof *p->h_x)))
            return FED_ERR_NOMEM;
        p->h_w = w;
        memcpy(p->h_x, x, ps->dim * sizeof *x);
    }
    p->held = 1;
    p->h_epoch = epoch;
    p->h_round = round;
    if (taken)
        *taken = 1;
    return FED_OK;
}

size_t fed_gossip_ps_apply(fed_gossip_ps *ps)
{
    size_t applied = 0;

    for (size_t k = 0; k < ps->nin; k++) {
        ps_in *p = &ps->ins[k];

        if (!p->held)
            continue;
        if (ps->plain) {
            ps->w += p->h_w;
            for (size_t i = 0; i < ps->dim; i++)
                ps->x[i] += p->h_x[i];
        } else if (p->epoch == p->h_epoch || p->round == 0) {
            ps->w += p->h_w - p->w;
            for (size_t i = 0; i < ps->dim; i++)
                ps->x[i] += p->h_x[i] - p->x[i];
        } /* else a restarted sender: re-based below, nothing added */
        p->w = p->h_w;
        fed_free(p->x); /* the held total is the last one taken now */
        p->x = p->h_x;
        p->h_x = NULL;
        p->epoch = p->h_epoch;
        p->round = p->h_round;
        p->held = 0;
        applied++;
    }
    return applied;
}

uint64_t fed_gossip_ps_last_round(const fed_gossip_ps *ps, const uint8_t from[32])
{
    int found;
    size_t at = fed_key_search(ps->ins, ps->nin, sizeof *ps->ins, from, &found);

    if (!found)
        return 0;
    return ps->ins[at].held ? ps->ins[at].h_round : ps->ins[at].round;
}

size_t fed_gossip_ps_bytes(const fed_gossip_ps *ps, size_t *held)
{
    size_t v = ps->dim * sizeof(double), h = 0;

    for (size_t k = 0; k < ps->nin; k++)
        h += ps->ins[k].h_x ? v : 0;
    if (held)
        *held = h;
    return v * (1 + ps->nout + ps->nin);
}

/* ---- state ---- */

static uint8_t *put_f64s(uint8_t *p, const double *v, size_t n)
{
    fed_put_f64le_n(p, v, n);
    return p + 8 * n;
}

static const uint8_t *get_f64s(const uint8_t *p, double *v, size_t n, int *ok)
{
    fed_get_f64le_n(v, p, n);
    for (size_t i = 0; i < n; i++)
        *ok &= isfinite(v[i]) != 0;
    return p + 8 * n;
}

static size_t state_bytes(size_t dim, size_t nout, size_t nin)
{
    return 40 + 8 * dim + nout * (40 + 8 * dim) + nin * (56 + 8 * dim);
}

fed_err fed_gossip_ps_save(const fed_gossip_ps *ps, uint8_t **buf, size_t *len)
{
    size_t n = state_bytes(ps->dim, ps->nout, ps->nin);
    uint8_t *b = fed_malloc(n), *p;

    if (!b)
        return FED_ERR_NOMEM;
    memset(b, 0, 40);
    memcpy(b, FED_GOSSIP_PS_MAGIC, sizeof FED_GOSSIP_PS_MAGIC);
    fed_put_u32le(b + 8, FED_GOSSIP_PS_VERSION);
    fed_put_u32le(b + 12, (uint32_t)ps->plain);
    fed_put_u64le(b + 16, ps->dim);
    put_f64s(b + 24, &ps->w, 1);
    fed_put_u32le(b + 32, (uint32_t)ps->nout);
    fed_put_u32le(b + 36, (uint32_t)ps->nin);
    p = put_f64s(b + 40, ps->x, ps->dim);
    for (size_t k = 0; k < ps->nout; k++) {
        memcpy(p, ps->outs[k].key, 32);
        p = put_f64s(p + 32, &ps->outs[k].w, 1);
        p = put_f64s(p, ps->outs[k].x, ps->dim);
    }
    for (size_t k = 0; k < ps->nin; k++) {
        memcpy(p, ps->ins[k].key, 32);
        fed_put_u64le(p + 32, ps->ins[k].epoch);
        fed_put_u64le(p + 40, ps->ins[k].round);
        p = put_f64s(p + 48, &ps->ins[k].w, 1);
        p = put_f64s(p, ps->ins[k].x, ps->dim);
    }
    *buf = b;
    *len = n;
    return FED_OK;
}

fed_err fed_gossip_ps_load(fed_gossip_ps *ps, const uint8_t *buf, size_t len)
{
    size_t nout, nin;
    const uint8_t *p;
    int ok = 1;
    fed_err e = FED_OK;

    if (len < 40 || memcmp(buf, FED_GOSSIP_PS_MAGIC, sizeof FED_GOSSIP_PS_MAGIC) != 0)
        return len < 40 ? FED_ERR_FORMAT : FED_ERR_MAGIC;
    if (fed_get_u32le(buf + 8) != FED_GOSSIP_PS_VERSION)
        return FED_ERR_VERSION;
    nout = fed_get_u32le(buf + 32);
    nin = fed_get_u32le(buf + 36);
    if (fed_get_u32le(buf + 12) != (uint32_t)ps->plain || fed_get_u64le(buf + 16) != ps->dim ||
        nout > FED_GOSSIP_PS_MAX_PAIRS || nin > FED_GOSSIP_PS_MAX_PAIRS ||
        len != state_bytes(ps->dim, nout, nin))
        return FED_ERR_FORMAT;
    clear_pairs(ps);
    get_f64s(buf + 24, &ps->w, 1, &ok);
    p = get_f64s(buf + 40, ps->x, ps->dim, &ok);
    for (size_t k = 0; k < nout && e == FED_OK; k++) {
        ps_out *o;

        if ((e = out_pair(ps, p, &o)) != FED_OK)
            break;
        p = get_f64s(p + 32, &o->w, 1, &ok);
        p = get_f64s(p, o->x, ps->dim, &ok);
    }
    for (size_t k = 0; k < nin && e == FED_OK; k++) {
        ps_in *q;

        if ((e = in_pair(ps, p, &q)) != FED_OK)
            break;
        q->epoch = fed_get_u64le(p + 32);
        q->round = fed_get_u64le(p + 40);
        p = get_f64s(p + 48, &q->w, 1, &ok);
        p = get_f64s(p, q->x, ps->dim, &ok);
    }
    if (e == FED_OK && (!ok || !(ps->w > 0)))
        e = FED_ERR_FORMAT;
    if (e != FED_OK) { /* nothing half-loaded stays */
        clear_pairs(ps);
        memset(ps->x, 0, ps->dim * sizeof *ps->x);
        ps->w = 1.0;
    }
    return e;
}
