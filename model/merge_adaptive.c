/* merge_adaptive.c - server optimizers applied to the merged delta D:
 * FedAvgM's momentum (backend vector ops) and FedAdam / FedYogi / FedAdagrad
 * (Reddi et al., element-wise on the host), with their state for checkpoints.
 * Owns the moment buffers; never changes the state when a step fails. */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/merge_impl.h"

static int is_adaptive(merge_kind k)
{
    return k == MK_FEDADAM || k == MK_FEDYOGI || k == MK_FEDADAGRAD;
}

static fed_err host_floats(size_t n, float **out)
{
    int ok = 1;
    size_t bytes = fed_mul_size(n, sizeof(float), &ok);

    if (!ok)
        return FED_ERR_TOO_LARGE;
    *out = fed_alloc_aligned(bytes);
    return *out ? FED_OK : FED_ERR_NOMEM;
}

fed_err fedi_merge_adaptive_alloc(fed_merge *m)
{
    size_t n = m->nparams;
    fed_err e;

    if (m->p.kind == MK_FEDAVGM)
        return m->be->alloc(m->be, n * sizeof(float), (void **)&m->mom);
    if (!is_adaptive(m->p.kind))
        return FED_OK;
    if ((e = host_floats(n, &m->am)) != FED_OK || (e = host_floats(n, &m->av)) != FED_OK)
        return e;
    if (!m->host &&
        ((e = host_floats(n, &m->hx)) != FED_OK || (e = host_floats(n, &m->hd)) != FED_OK))
        return e;
    for (size_t i = 0; i < n; i++)
        m->av[i] = (float)(m->p.tau * m->p.tau); /* v_{-1} = tau^2 (Reddi et al., Alg. 2) */
    return FED_OK;
}

void fedi_merge_adaptive_free(fed_merge *m)
{
    if (m->mom)
        m->be->free(m->be, m->mom);
    fed_free(m->am);
    fed_free(m->av);
    fed_free(m->hx);
    fed_free(m->hd);
    m->mom = m->am = m->av = m->hx = m->hd = NULL;
}

/* One coordinate's new moments from d and the old ones. */
static inline void moments(merge_kind k, const merge_params *p, float d, float m, float v,
                           float *mo, float *vo)
{
    double dd = (double)d, d2 = dd * dd, vn;

    *mo = (float)(p->b1 * (double)m + (1.0 - p->b1) * dd);
    switch (k) {
    case MK_FEDYOGI: {
        double diff = (double)v - d2;
        double sgn = (double)((diff > 0.0) - (diff < 0.0));

        vn = (double)v - (1.0 - p->b2) * d2 * sgn;
        break;
    }
    case MK_FEDADAGRAD:
        vn = (double)v + d2;
        break;
    default: /* MK_FEDADAM */
        vn = p->b2 * (double)v + (1.0 - p->b2) * d2;
        break;
    }
    *vo = (float)vn;
}

static inline float stepped(const merge_params *p, float x, float m, float v)
{
    return (float)((double)x + p->eta * (double)m / (sqrt((double)v) + p->tau));
}

/* x, d host (nparams): x updated and, when commit, the moments too. */
static void adaptive_loop(fed_merge *m, float *x, const float *d, int commit)
{
    merge_kind k = m->p.kind;
    const merge_params *p = &m->p;

    for (size_t i = 0; i < m->nparams; i++) {
        float mo, vo;

        moments(k, p, d[i], m->am[i], m->av[i], &mo, &vo);
        x[i] = stepped(p, x[i], mo, vo);
        if (commit) {
            m->am[i] = mo;
            m->av[i] = vo;
        }
    }
}

static void moments_only(fed_merge *m, const float *d)
{
    for (size_t i = 0; i < m->nparams; i++)
        moments(m->p.kind, &m->p, d[i], m->am[i], m->av[i], &m->am[i], &m->av[i]);
}

fed_err fedi_merge_adaptive_step(fed_merge *m, float *global)
{
    fed_backend *be = m->be;
    size_t bytes = m->nparams * sizeof(float);
    fed_err e;

    if (m->p.kind == MK_FEDAVGM) {
        be->scale(be, m->nparams, (float)m->p.beta, m->mom);
        be->axpy(be, m->nparams, 1.0f, m->delta, m->mom);
        be->axpy(be, m->nparams, (float)m->p.eta, m->mom, global);
        return FED_OK;
    }
    if (m->host) {
        adaptive_loop(m, global, m->delta, 1);
        return FED_OK;
    }
    /* Device: x goes up before the moments change, so a failed transfer
     * leaves the state as it was. */
    if ((e = be->download(be, m->hd, m->delta, bytes)) != FED_OK ||
        (e = be->download(be, m->hx, global, bytes)) != FED_OK)
        return e;
    adaptive_loop(m, m->hx, m->hd, 0);
    if ((e = be->upload(be, global, m->hx, bytes)) != FED_OK)
        return e;
    moments_only(m, m->hd);
    return FED_OK;
}

size_t fedi_merge_adaptive_state_floats(const fed_merge *m)
{
    if (m->p.kind == MK_FEDAVGM)
        return m->nparams;
    if (is_adaptive(m->p.kind))
        return 2 * m->nparams;
    return 0;
}

fed_err fedi_merge_adaptive_get_state(const fed_merge *m, float *dst)
{
    size_t bytes = m->nparams * sizeof(float);

    if (m->p.kind == MK_FEDAVGM)
        return m->be->download(m->be, dst, m->mom, bytes);
    if (is_adaptive(m->p.kind)) {
        memcpy(dst, m->am, bytes);
        memcpy(dst + m->nparams, m->av, bytes);
    }
    return FED_OK;
}

fed_err fedi_merge_adaptive_set_state(fed_merge *m, const float *src)
{
    size_t nf = fedi_merge_adaptive_state_floats(m);
    size_t bytes = m->nparams * sizeof(float);

    for (size_t i = 0; i < nf; i++) {
        if (!isfinite(src[i])) {
            fed_log(FED_LOG_ERROR, "merge: state float %zu is not finite", i);
            return FED_ERR_NAN;
        }
        if (is_adaptive(m->p.kind) && i >= m->nparams && src[i] < 0.0f) {
            fed_log(FED_LOG_ERROR, "merge: second moment %zu is negative", i - m->nparams);
            return FED_ERR_RANGE;
        }
    }
    if (m->p.kind == MK_FEDAVGM)
        return m->be->upload(m->be, m->mom, src, bytes);
    if (is_adaptive(m->p.kind)) {
        memcpy(m->am, src, bytes);
        memcpy(m->av, src + m->nparams, bytes);
    }
    return FED_OK;
}
