/* merge.c - the merge interface: spec parsing, the merge object and its
 * scratch, apply's fixed key order, input rejection, clipping factors and the
 * sample-weighted strategies (FedAvg, FedProx's server side, and the merged
 * delta FedAvgM and the adaptive ones step with). Robust rules live in
 * merge_robust.c, server optimizers in merge_adaptive.c. Never writes a
 * client's delta, never allocates in apply, never prints. */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/opt.h"
#include "model/merge_impl.h"

/* The valid rows (in key order) into m->valid; returns how many. */
static int merge_collect_valid(fed_merge *m, int n);

static int merge_kind_robust(merge_kind k);

static int merge_kind_weighted(merge_kind k);

static fed_err merge_parse_spec(const char *spec, merge_params *p);

/* The squared norm of each valid row (rejecting NaN/Inf ones). */
static void merge_scan_rows(fed_merge *m, int nv);

/* ------------------------------------------------------------ parsing -- */

#define MAX_ARGS 4
#define ARG_CHARS 64

typedef struct spec_args {
    int n;
    const char *s[MAX_ARGS];
    size_t len[MAX_ARGS];
} spec_args;

static const struct {
    const char *name;
    merge_kind kind;
} kind_names[] = {
    {"fedavg", MK_FEDAVG},   {"fedavgm", MK_FEDAVGM},       {"fedprox", MK_FEDPROX},
    {"fedadam", MK_FEDADAM}, {"fedyogi", MK_FEDYOGI},       {"fedadagrad", MK_FEDADAGRAD},
    {"median", MK_MEDIAN},   {"trimmed", MK_TRIMMED},       {"krum", MK_KRUM},
    {"multikrum", MK_MULTIKRUM}, {"bulyan", MK_BULYAN},     {"fednova", MK_FEDNOVA},
    {"scaffold", MK_SCAFFOLD},
};

static fed_err spec_fail(const char *spec, const char *why)
{
    fed_log(FED_LOG_ERROR, "merge: bad strategy \"%s\": %s", spec ? spec : "(null)", why);
    return FED_ERR_BAD_VALUE;
}

/* A finite number filling exactly s[0..len). */
static int arg_double(const char *s, size_t len, double *v)
{
    char buf[ARG_CHARS];
    char *end = NULL;

    if (len == 0 || len >= sizeof buf || s[0] == ' ' || s[0] == '\t')
        return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    *v = fed_strtod_decimal(buf, &end);
    return end == buf + len && errno == 0 && isfinite(*v);
}

/* A decimal integer in [0, 1000000] filling exactly s[0..len). */
static int arg_int(const char *s, size_t len, int *v)
{
    long x = 0;

    if (len == 0 || len > 7)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        x = x * 10 + (s[i] - '0');
    }
    if (x > 1000000)
        return 0;
    *v = (int)x;
    return 1;
}

/* Split "a,b,c" (up to the end of the string) into args. */
static int split_args(const char *s, spec_args *a)
{
    a->n = 0;
    for (;;) {
        const char *c = strchr(s, ',');
        size_t len = c ? (size_t)(c - s) : strlen(s);

        if (a->n == MAX_ARGS)
            return 0;
        a->s[a->n] = s;
        a->len[a->n] = len;
        a->n++;
        if (!c)
            return 1;
        s = c + 1;
    }
}

static int in_unit(double v) { return v >= 0.0 && v < 1.0; }

/* Optional numbers into dst[i] in order; each checked by ok(). */
static fed_err parse_optional(const char *spec, const spec_args *a, double *const *dst, int ndst,
                              const char *what)
{
    if (a->n > ndst)
        return spec_fail(spec, what);
    for (int i = 0; i < a->n; i++)
        if (!arg_double(a->s[i], a->len[i], dst[i]))
            return spec_fail(spec, what);
    return FED_OK;
}

static fed_err parse_strategy_args(const char *spec, merge_params *p, const spec_args *a)
{
    double *avgm[2] = {&p->beta, &p->eta};
    double *adapt[4] = {&p->eta, &p->b1, &p->b2, &p->tau};
    fed_err e = FED_OK;

    switch (p->kind) {
    case MK_FEDAVG:
    case MK_MEDIAN:
    case MK_FEDNOVA:
        if (a->n)
            return spec_fail(spec, "this strategy takes no arguments");
        return FED_OK;
    case MK_FEDAVGM:
        e = parse_optional(spec, a, avgm, 2, "fedavgm takes [:BETA[,ETA]]");
        if (e == FED_OK && (!in_unit(p->beta) || !(p->eta > 0.0)))
            e = spec_fail(spec, "fedavgm needs BETA in [0, 1) and ETA > 0");
        return e;
    case MK_SCAFFOLD: /* the paper's global step size eta_g */
        e = parse_optional(spec, a, avgm + 1, 1, "scaffold takes [:ETA]");
        if (e == FED_OK && !(p->eta > 0.0))
            e = spec_fail(spec, "scaffold needs ETA > 0");
        return e;
    case MK_FEDPROX:
        /* MU travels to the clients as a float, and past 1000 the proximal
           term alone would hold any rate's step at the global model */
        if (a->n != 1 || !arg_double(a->s[0], a->len[0], &p->mu) || !(p->mu >= 0.0) ||
            p->mu > FED_MERGE_PROX_MU_MAX)
            return spec_fail(spec, "fedprox takes :MU with MU in [0, 1000]");
        return FED_OK;
    case MK_FEDADAM:
    case MK_FEDYOGI:
    case MK_FEDADAGRAD:
        e = parse_optional(spec, a, adapt, 4, "adaptive strategies take [:ETA[,B1[,B2[,TAU]]]]");
        if (e == FED_OK && (!(p->eta > 0.0) || !in_unit(p->b1) || !in_unit(p->b2) ||
                            !(p->tau > 0.0)))
            e = spec_fail(spec, "adaptive strategies need ETA > 0, B1 and B2 in [0, 1), TAU > 0");
        return e;
    case MK_TRIMMED:
        if (a->n != 1 || !arg_double(a->s[0], a->len[0], &p->beta) || !(p->beta >= 0.0) ||
            !(p->beta < 0.5))
            return spec_fail(spec, "trimmed takes :BETA with BETA in [0, 0.5)");
        return FED_OK;
    case MK_KRUM:
    case MK_BULYAN:
        if (a->n != 1 || !arg_int(a->s[0], a->len[0], &p->f))
            return spec_fail(spec, "krum and bulyan take :F, an integer >= 0");
        return FED_OK;
    case MK_MULTIKRUM:
        if (a->n != 2 || !arg_int(a->s[0], a->len[0], &p->f) ||
            !arg_int(a->s[1], a->len[1], &p->mm) || p->mm < 1)
            return spec_fail(spec, "multikrum takes :F,M with F >= 0 and M >= 1");
        return FED_OK;
    }
    return spec_fail(spec, "unknown strategy");
}

static void params_defaults(merge_params *p)
{
    memset(p, 0, sizeof *p);
    p->kind = MK_FEDAVG;
    p->beta = 0.9;
    p->eta = 1.0;
    p->b1 = 0.9;
    p->b2 = 0.99;
    p->tau = 1e-3;
}

static fed_err merge_parse_spec(const char *spec, merge_params *p)
{
    const char *s = spec;
    const char *colon;
    size_t name_len;
    spec_args args = {0};
    int found = 0;

    params_defaults(p);
    if (!spec || !*spec)
        return spec_fail(spec, "empty");
    if (strlen(spec) >= FED_MERGE_SPEC_MAX)
        return spec_fail(spec, "longer than FED_MERGE_SPEC_MAX");
    if (!strncmp(s, "clip:", 5)) {
        const char *plus = strchr(s + 5, '+');

        if (!plus || !arg_double(s + 5, (size_t)(plus - (s + 5)), &p->clip) || !(p->clip > 0.0))
            return spec_fail(spec, "clip takes :NORM with NORM > 0, then '+' and a strategy");
        s = plus + 1;
    }
    colon = strchr(s, ':');
    name_len = colon ? (size_t)(colon - s) : strlen(s);
    for (size_t i = 0; i < sizeof kind_names / sizeof kind_names[0]; i++) {
        if (strlen(kind_names[i].name) == name_len && !strncmp(s, kind_names[i].name, name_len)) {
            p->kind = kind_names[i].kind;
            found = 1;
        }
    }
    if (!found)
        return spec_fail(spec, "unknown strategy (clip may appear once, as a prefix)");
    if (p->kind == MK_FEDADAM || p->kind == MK_FEDYOGI || p->kind == MK_FEDADAGRAD)
        p->eta = 1e-2;
    if (colon && !split_args(colon + 1, &args))
        return spec_fail(spec, "too many arguments");
    return parse_strategy_args(spec, p, &args);
}

static int merge_kind_weighted(merge_kind k)
{
    return k == MK_FEDAVG || k == MK_FEDAVGM || k == MK_FEDPROX || k == MK_FEDADAM ||
           k == MK_FEDYOGI || k == MK_FEDADAGRAD || k == MK_FEDNOVA || k == MK_SCAFFOLD;
}

static int merge_kind_robust(merge_kind k) { return !merge_kind_weighted(k); }

fed_err fed_merge_spec_check(const char *spec)
{
    merge_params p;

    return merge_parse_spec(spec, &p);
}

static fed_merge_traits traits_of_params(const merge_params *p)
{
    fed_merge_traits t = {.weighted = merge_kind_weighted(p->kind), .clip = p->clip,
                          .fednova = p->kind == MK_FEDNOVA, .scaffold = p->kind == MK_SCAFFOLD};

    return t;
}

fed_err fed_merge_spec_traits(const char *spec, fed_merge_traits *out)
{
    merge_params p;
    fed_err e = merge_parse_spec(spec, &p);

    memset(out, 0, sizeof *out);
    if (e == FED_OK)
        *out = traits_of_params(&p);
    return e;
}

fed_merge_traits fed_merge_traits_of(const fed_merge *m) { return traits_of_params(&m->p); }

fed_merge_config fed_merge_config_default(void)
{
    fed_merge_config c = {FED_MERGE_DEFAULT_MAX_CLIENTS, 0.0, NULL};

    return c;
}

/* ------------------------------------------------------- new and free -- */

static fed_err alloc_host(size_t count, size_t size, void *out)
{
    int ok = 1;
    size_t bytes = fed_mul_size(count, size, &ok);
    void **p = out;

    if (!ok)
        return FED_ERR_TOO_LARGE;
    *p = fed_alloc_aligned(bytes ? bytes : 1);
    return *p ? FED_OK : FED_ERR_NOMEM;
}

static fed_err alloc_common(fed_merge *m)
{
    size_t mc = (size_t)m->max_clients;
    fed_err e;

    if ((e = m->be->alloc(m->be, m->nparams * sizeof(float), (void **)&m->delta)) != FED_OK)
        return e;
    if ((e = alloc_host(mc, sizeof *m->rows, &m->rows)) != FED_OK ||
        (e = alloc_host(mc, sizeof *m->valid, &m->valid)) != FED_OK ||
        (e = alloc_host(mc, sizeof *m->ptrs, &m->ptrs)) != FED_OK ||
        (e = alloc_host(mc, sizeof *m->w, &m->w)) != FED_OK ||
        (e = alloc_host(mc, sizeof *m->order, &m->order)) != FED_OK ||
        (e = alloc_host(mc, sizeof *m->otmp, &m->otmp)) != FED_OK)
        return e;
    return FED_OK;
}

fed_err fed_merge_new(const char *spec, size_t nparams, const fed_merge_config *cfg,
                      fed_backend *be, fed_merge **out)
{
    fed_merge_config c = cfg ? *cfg : fed_merge_config_default();
    fed_merge *m = NULL;
    merge_params p;
    fed_err e;

    assert(be && out);
    *out = NULL;
    if ((e = merge_parse_spec(spec, &p)) != FED_OK)
        return e;
    if (nparams == 0 || c.max_clients < 1 || nparams > ((size_t)1 << 40) ||
        !(c.weight_cap >= 0.0)) {
        fed_log(FED_LOG_ERROR, "merge: bad size (nparams %zu, max_clients %d, weight_cap %g)",
                nparams, c.max_clients, c.weight_cap);
        return FED_ERR_INVAL;
    }
    m = fed_calloc(1, sizeof *m);
    if (!m)
        return FED_ERR_NOMEM;
    m->p = p;
    strcpy(m->spec, spec); /* length checked by the parser */
    m->nparams = nparams;
    m->be = be;
    m->host = (be->caps & FED_BACKEND_CAP_HOST_MEMORY) != 0;
    m->max_clients = c.max_clients;
    m->weight_cap = c.weight_cap < 1.0 ? c.weight_cap : 0.0;
    m->pool = c.pool;
    m->step_scale = 1.0;
    if ((e = alloc_common(m)) != FED_OK)
        goto out;
    if ((e = fedi_merge_robust_alloc(m)) != FED_OK)
        goto out;
    if ((e = fedi_merge_adaptive_alloc(m)) != FED_OK)
        goto out;
    *out = m;
    return FED_OK;
out:
    fed_merge_free(m);
    return e;
}

void fed_merge_free(fed_merge *m)
{
    if (!m)
        return;
    fedi_merge_adaptive_free(m);
    fedi_merge_robust_free(m);
    if (m->delta)
        m->be->free(m->be, m->delta);
    fed_free(m->rows);
    fed_free(m->valid);
    fed_free(m->ptrs);
    fed_free(m->w);
    fed_free(m->order);
    fed_free(m->otmp);
    fed_free(m);
}

/* ---------------------------------------------------------- accessors -- */

const float *fed_merge_delta(const fed_merge *m) { return m->delta; }
void fed_merge_set_step_scale(fed_merge *m, double scale)
{
    assert(m && isfinite(scale) && scale > 0);
    m->step_scale = scale;
}

double fed_merge_prox_mu(const fed_merge *m) { return m->p.kind == MK_FEDPROX ? m->p.mu : 0.0; }
const char *fed_merge_spec(const fed_merge *m) { return m->spec; }
int fed_merge_max_clients(const fed_merge *m) { return m->max_clients; }

size_t fed_merge_state_floats(const fed_merge *m) { return fedi_merge_adaptive_state_floats(m); }

fed_err fed_merge_get_state(const fed_merge *m, float *dst)
{
    return fedi_merge_adaptive_get_state(m, dst);
}

fed_err fed_merge_set_state(fed_merge *m, const float *src)
{
    return fedi_merge_adaptive_set_state(m, src);
}

const char *fed_merge_verdict_name(fed_merge_verdict v)
{
    switch (v) {
    case FED_MERGE_USED: return "used";
    case FED_MERGE_USED_COORDS: return "used-coords";
    case FED_MERGE_NOT_SELECTED: return "not-selected";
    case FED_MERGE_REJECTED_NAN: return "rejected-nan";
    case FED_MERGE_REJECTED_WEIGHT: return "rejected-weight";
    case FED_MERGE_SKIPPED: return "skipped";
    }
    return "unknown";
}

/* -------------------------------------------------------- input order -- */

static int key_cmp(const fed_merge_input *in, int a, int b)
{
    return memcmp(in[a].key, in[b].key, FED_MERGE_KEY_BYTES);
}

/* Bottom-up merge sort of m->order[0..n) by key: O(n log n), no allocation. */
static void sort_by_key(fed_merge *m, const fed_merge_input *in, int n)
{
    int *a = m->order, *b = m->otmp;

    for (int i = 0; i < n; i++)
        a[i] = i;
    for (int width = 1; width < n; width *= 2) {
        for (int lo = 0; lo < n; lo += 2 * width) {
            int mid = lo + width < n ? lo + width : n;
            int hi = lo + 2 * width < n ? lo + 2 * width : n;
            int i = lo, j = mid, k = lo;

            while (i < mid && j < hi)
                b[k++] = key_cmp(in, a[i], a[j]) <= 0 ? a[i++] : a[j++];
            while (i < mid)
                b[k++] = a[i++];
            while (j < hi)
                b[k++] = a[j++];
        }
        int *t = a;
        a = b;
        b = t;
    }
    if (a != m->order)
        memcpy(m->order, a, (size_t)n * sizeof *a);
}

static void reject(merge_row *r, fed_merge_verdict v, fed_err e)
{
    r->used = 0;
    r->verdict = v;
    r->err = e;
    r->share = 0.0;
}

/* Rows in key order; FED_ERR_INVAL on a repeated key. */
static fed_err build_rows(fed_merge *m, const fed_merge_input *in, int n)
{
    sort_by_key(m, in, n);
    for (int j = 0; j < n; j++) {
        const fed_merge_input *x = &in[m->order[j]];
        merge_row *r = &m->rows[j];

        assert(x->delta);
        memset(r, 0, sizeof *r);
        r->delta = x->delta;
        r->key = x->key;
        r->weight = x->weight;
        r->sq = -1.0;
        r->scale = 1.0f;
        r->index = m->order[j];
        r->used = 1;
        r->verdict = FED_MERGE_USED;
        if (j > 0 && !memcmp(r->key, m->rows[j - 1].key, FED_MERGE_KEY_BYTES)) {
            fed_log(FED_LOG_ERROR, "merge: inputs %d and %d share one client key", m->order[j - 1],
                    m->order[j]);
            return FED_ERR_INVAL;
        }
        if (!isfinite(x->weight) || !(x->weight > 0.0)) {
            fed_log(FED_LOG_WARN, "merge: input %d claims weight %g, rejected", r->index,
                    x->weight);
            reject(r, FED_MERGE_REJECTED_WEIGHT, FED_ERR_BAD_VALUE);
        }
    }
    return FED_OK;
}

static int merge_collect_valid(fed_merge *m, int n)
{
    int nv = 0;

    for (int j = 0; j < n; j++)
        if (m->rows[j].used)
            m->valid[nv++] = &m->rows[j];
    return nv;
}

/* Squared norms of the valid rows not scanned yet: NaN/Inf rows rejected,
 * clip factors set. */
static void merge_scan_rows(fed_merge *m, int nv)
{
    for (int j = 0; j < nv; j++) {
        merge_row *r = m->valid[j];
        double norm;

        if (r->sq >= 0.0)
            continue;
        r->sq = m->be->sumsq(m->be, m->nparams, r->delta);
        if (!isfinite(r->sq)) {
            fed_log(FED_LOG_WARN, "merge: input %d has NaN or Inf in its delta, rejected",
                    r->index);
            reject(r, FED_MERGE_REJECTED_NAN, FED_ERR_NAN);
            continue;
        }
        norm = sqrt(r->sq);
        if (m->p.clip > 0.0 && norm > m->p.clip)
            r->scale = (float)(m->p.clip / norm);
    }
}

/* ------------------------------------------------- weighted strategies -- */

/* Shares p_i = w_i / W with no share above the cap (water-filling). */
static void weighted_shares(fed_merge *m, int nv)
{
    double cap = m->weight_cap, total = 0.0;
    int ncap = 0, changed = 1;

    for (int j = 0; j < nv; j++) {
        m->valid[j]->share = -1.0; /* -1: not capped */
        total += m->valid[j]->weight;
    }
    if (!(cap > 0.0) || nv == 1) {
        for (int j = 0; j < nv; j++)
            m->valid[j]->share = m->valid[j]->weight / total;
        return;
    }
    if (cap * nv <= 1.0) {
        for (int j = 0; j < nv; j++)
            m->valid[j]->share = 1.0 / nv;
        return;
    }
    while (changed) {
        double rest = 1.0 - ncap * cap, wfree = 0.0;

        changed = 0;
        for (int j = 0; j < nv; j++)
            if (m->valid[j]->share < 0.0)
                wfree += m->valid[j]->weight;
        for (int j = 0; j < nv; j++) {
            merge_row *r = m->valid[j];

            if (r->share < 0.0 && r->weight * rest / wfree > cap) {
                r->share = cap;
                ncap++;
                changed = 1;
            }
        }
        if (!changed)
            for (int j = 0; j < nv; j++)
                if (m->valid[j]->share < 0.0)
                    m->valid[j]->share = m->valid[j]->weight * rest / wfree;
    }
}

/* One slice of D, a piece of the pool's: whole 16-float groups, each
 * element summed as the unsplit call would (the same bits). */
typedef struct wsum_slices {
    fed_merge *m;
    int nv, pieces;
} wsum_slices;

static void wsum_slice(void *ctx, size_t i)
{
    wsum_slices *ws = ctx;
    fed_merge *m = ws->m;
    size_t per = ((m->nparams + (size_t)ws->pieces - 1) / (size_t)ws->pieces + 15) & ~(size_t)15;
    size_t from = i * per < m->nparams ? i * per : m->nparams;
    size_t to = from + per < m->nparams ? from + per : m->nparams;
    const float *p[FED_MERGE_SLICE_MAX_INPUTS];

    for (int j = 0; j < ws->nv; j++)
        p[j] = m->ptrs[j] + from;
    if (to > from)
        m->be->weighted_sum(m->be, m->delta + from, p, m->w, ws->nv, to - from);
}

/* D = sum p_i s_i d_i; FED_ERR_NAN when D is not finite (caller hunts). */
static fed_err weighted_merge(fed_merge *m, int nv)
{
    double chk;
    int pieces = m->pool && m->host && nv <= FED_MERGE_SLICE_MAX_INPUTS
                     ? fed_pool_workers(m->pool) + 1
                     : 1;

    weighted_shares(m, nv);
    for (int j = 0; j < nv; j++) {
        m->ptrs[j] = m->valid[j]->delta;
        m->w[j] = m->valid[j]->share * (double)m->valid[j]->scale;
    }
    if (pieces > 1 && m->nparams >= (size_t)pieces * 4096) {
        wsum_slices ws = {m, nv, pieces};

        fed_pool_parallel_for(m->pool, (size_t)pieces, wsum_slice, &ws);
    } else {
        m->be->weighted_sum(m->be, m->delta, m->ptrs, m->w, nv, m->nparams);
    }
    chk = m->be->sumsq(m->be, m->nparams, m->delta);
    return isfinite(chk) ? FED_OK : FED_ERR_NAN;
}

/* D from the valid rows; rows with NaN found on the way are rejected. */
static fed_err merge_delta(fed_merge *m, int n)
{
    int nv = merge_collect_valid(m, n);
    int scanned = 0;
    fed_err e;

    if (merge_kind_robust(m->p.kind) || m->p.clip > 0.0) {
        merge_scan_rows(m, nv);
        nv = merge_collect_valid(m, n);
        scanned = 1;
    }
    for (;;) {
        if (nv < 1) {
            fed_log(FED_LOG_WARN, "merge: no valid input among %d", n);
            return FED_ERR_TOO_FEW;
        }
        if (merge_kind_robust(m->p.kind))
            return fedi_merge_robust_run(m, nv);
        e = weighted_merge(m, nv);
        if (e != FED_ERR_NAN)
            return e;
        if (scanned) {
            fed_log(FED_LOG_WARN, "merge: merged delta overflows float");
            return FED_ERR_NAN;
        }
        merge_scan_rows(m, nv);
        nv = merge_collect_valid(m, n);
        scanned = 1;
    }
}

static void fill_results(const fed_merge *m, int n, fed_merge_result *res, int failed)
{
    if (!res)
        return;
    for (int j = 0; j < n; j++) {
        const merge_row *r = &m->rows[j];
        fed_merge_result *o = &res[r->index];

        o->verdict = r->verdict;
        o->err = r->err;
        o->share = r->used ? r->share : 0.0;
        o->norm = r->sq >= 0.0 ? sqrt(r->sq) : -1.0;
        o->clip_scale = r->scale;
        o->score = r->score;
        if (failed && r->verdict != FED_MERGE_REJECTED_NAN &&
            r->verdict != FED_MERGE_REJECTED_WEIGHT) {
            o->verdict = FED_MERGE_SKIPPED;
            o->share = 0.0;
        }
    }
}

static void fill_all_skipped(int n, fed_merge_result *res)
{
    if (!res)
        return;
    for (int i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].verdict = FED_MERGE_SKIPPED;
        res[i].norm = -1.0;
        res[i].clip_scale = 1.0f;
    }
}

fed_err fed_merge_apply(fed_merge *m, float *global, const fed_merge_input *in, int n,
                        fed_merge_result *results)
{
    fed_err e;

    assert(m && global && (in || n <= 0));
    fill_all_skipped(n > 0 ? n : 0, results);
    if (n < 1) {
        fed_log(FED_LOG_WARN, "merge: no inputs");
        return FED_ERR_TOO_FEW;
    }
    if (n > m->max_clients) {
        fed_log(FED_LOG_ERROR, "merge: %d inputs, more than max_clients %d", n, m->max_clients);
        return FED_ERR_TOO_LARGE;
    }
    if ((e = build_rows(m, in, n)) != FED_OK)
        return e;
    e = merge_delta(m, n);
    if (e == FED_OK) {
        if (m->p.kind == MK_FEDAVGM || m->p.kind == MK_FEDADAM || m->p.kind == MK_FEDYOGI ||
            m->p.kind == MK_FEDADAGRAD)
            e = fedi_merge_adaptive_step(m, global);
        else if (m->p.kind == MK_SCAFFOLD)
            m->be->axpy(m->be, m->nparams, (float)m->p.eta, m->delta, global);
        else
            m->be->axpy(m->be, m->nparams, (float)m->step_scale, m->delta, global);
    }
    m->step_scale = 1.0;
    fill_results(m, n, results, e != FED_OK);
    return e;
}
