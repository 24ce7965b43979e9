/* optim.c - SGD (momentum, weight decay, Nesterov) and Adam/AdamW, the
 * learning-rate schedules and FedProx's proximal term, over a model's flat
 * buffers through the backend's step kernels. Owns the moment buffers and
 * the anchor. A step allocates nothing, and its updates are element-wise,
 * so however the buffer is split over the pool the result is the same. */
#include "model/optim.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/opt.h"

struct fed_optim {
    fed_optim_cfg cfg;
    fed_backend *be;
    size_t n;
    float *m;  /* (n) momentum / first moment, NULL for plain SGD */
    float *v;  /* (n) Adam second moment */
    float *p0; /* (n) FedProx anchor */
    float *corr; /* (n) SCAFFOLD's correction added to each gradient, or NULL */
    long steps;
    /* the step in flight */
    fed_model *model;
    float lr;
    int pieces;
};

float fed_optim_default_lr(fed_optim_kind kind)
{
    return (float)(kind == FED_OPTIM_ADAM ? FED_OPTIM_ADAM_LR : FED_OPTIM_SGD_LR);
}

float fed_optim_resolve_lr(fed_optim_kind kind, double lr)
{
    return lr == 0 ? fed_optim_default_lr(kind) : (float)lr;
}

void fed_optim_cfg_default(fed_optim_cfg *cfg, fed_optim_kind kind)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = kind;
    cfg->lr = fed_optim_default_lr(kind);
    cfg->momentum = kind == FED_OPTIM_ADAM ? 0.0f : 0.9f;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.999f;
    cfg->eps = 1e-8f;
    cfg->sched = FED_SCHED_CONST;
    cfg->gamma = 0.1f;
}

fed_err fed_optim_kind_parse(const char *name, fed_optim_kind *out)
{
    if (name && !strcmp(name, "sgd")) {
        *out = FED_OPTIM_SGD;
        return FED_OK;
    }
    if (name && !strcmp(name, "adam")) {
        *out = FED_OPTIM_ADAM;
        return FED_OK;
    }
    return FED_ERR_BAD_VALUE;
}

static int parse_long(const char *s, char **end, long *out)
{
    if (*s < '0' || *s > '9')
        return 0;
    *out = strtol(s, end, 10);
    return *out > 0 && *out < (1L << 40);
}

fed_err fed_optim_sched_parse(const char *text, fed_optim_cfg *cfg)
{
    char *end = NULL;
    long v;

    if (!text)
        return FED_ERR_BAD_VALUE;
    if (!strcmp(text, "const")) {
        cfg->sched = FED_SCHED_CONST;
        return FED_OK;
    }
    if (!strcmp(text, "cosine")) { /* total filled in by the caller (0: the whole run) */
        cfg->sched = FED_SCHED_COSINE;
        cfg->total_steps = 0;
        return FED_OK;
    }
    if (!strncmp(text, "cosine:", 7)) {
        if (!parse_long(text + 7, &end, &v) || *end)
            return FED_ERR_BAD_VALUE;
        cfg->sched = FED_SCHED_COSINE;
        cfg->total_steps = v;
        return FED_OK;
    }
    if (!strncmp(text, "step:", 5)) {
        double g;

        if (!parse_long(text + 5, &end, &v) || *end != ',')
            return FED_ERR_BAD_VALUE;
        if (end[1] == '\0' || isspace((unsigned char)end[1]))
            return FED_ERR_BAD_VALUE;
        g = fed_strtod_decimal(end + 1, &end);
        if (*end || !(g > 0.0 && g <= 1.0))
            return FED_ERR_BAD_VALUE;
        cfg->sched = FED_SCHED_STEP;
        cfg->step_size = v;
        cfg->gamma = (float)g;
        return FED_OK;
    }
    return FED_ERR_BAD_VALUE;
}

fed_err fed_optim_sched_of_run(const char *text, long units, long warmup, long per_unit,
                               fed_optim_cfg *cfg)
{
    fed_err err;

    if (units < 0 || warmup < 0 || per_unit < 1 || warmup > (1L << 40) / per_unit ||
        units > (1L << 40) / per_unit)
        return FED_ERR_BAD_VALUE;
    if ((err = fed_optim_sched_parse(text, cfg)) != FED_OK)
        return err;
    if (cfg->sched == FED_SCHED_COSINE && strcmp(text, "cosine") != 0)
        return FED_ERR_BAD_VALUE; /* "cosine:N" is the library's step count: not a run's */
    if (cfg->sched == FED_SCHED_COSINE && units <= warmup)
        return FED_ERR_BAD_VALUE; /* no run's length, or nothing left after the warm-up */
    if (cfg->sched == FED_SCHED_STEP)
        cfg->step_size *= per_unit;
    else if (cfg->sched == FED_SCHED_COSINE)
        cfg->total_steps = units * per_unit;
    cfg->warmup_steps = warmup * per_unit;
    return FED_OK;
}

static fed_err check_cfg(const fed_optim_cfg *c)
{
    if (!(c->lr >= 0.0f && c->lr < 1e3f) || !(c->weight_decay >= 0.0f) || !(c->prox_mu >= 0.0f))
        return FED_ERR_INVAL;
    if (c->kind == FED_OPTIM_SGD && !(c->momentum >= 0.0f && c->momentum < 1.0f))
        return FED_ERR_INVAL;
    if (c->kind == FED_OPTIM_ADAM &&
        !(c->beta1 >= 0.0f && c->beta1 < 1.0f && c->beta2 >= 0.0f && c->beta2 < 1.0f &&
          c->eps > 0.0f))
        return FED_ERR_INVAL;
    if (c->kind != FED_OPTIM_SGD && c->kind != FED_OPTIM_ADAM)
        return FED_ERR_INVAL;
    if (c->sched == FED_SCHED_STEP && (c->step_size < 1 || !(c->gamma > 0.0f)))
        return FED_ERR_INVAL;
    if (c->sched == FED_SCHED_COSINE && c->total_steps < 0)
        return FED_ERR_INVAL;
    if (c->warmup_steps < 0)
        return FED_ERR_INVAL;
    return FED_OK;
}

static fed_err alloc_zeroed(fed_backend *be, size_t n, float **out)
{
    return be->alloc(be, n * sizeof(float), (void **)out);
}

size_t fed_optim_state_bytes(const fed_optim_cfg *cfg, size_t nparams)
{
    size_t vectors = (cfg->kind == FED_OPTIM_ADAM || cfg->momentum > 0.0f) +
                     (cfg->kind == FED_OPTIM_ADAM) + (cfg->prox_mu > 0.0f);

    return vectors * nparams * sizeof(float);
}

fed_err fed_optim_new(const fed_optim_cfg *cfg, fed_model *m, fed_optim **out)
{
    fed_optim *o = NULL;
    fed_err err = check_cfg(cfg);

    *out = NULL;
    if (err != FED_OK) {
        fed_log(FED_LOG_ERROR, "optim: invalid configuration");
        return err;
    }
    o = fed_calloc(1, sizeof *o);
    if (!o)
        return FED_ERR_NOMEM;
    o->cfg = *cfg;
    o->be = fed_model_backend(m);
    o->n = fed_model_nparams(m);
    if (cfg->kind == FED_OPTIM_ADAM || cfg->momentum > 0.0f)
        if ((err = alloc_zeroed(o->be, o->n, &o->m)) != FED_OK)
            goto out;
    if (cfg->kind == FED_OPTIM_ADAM && (err = alloc_zeroed(o->be, o->n, &o->v)) != FED_OK)
        goto out;
    if (cfg->prox_mu > 0.0f) {
        if ((err = alloc_zeroed(o->be, o->n, &o->p0)) != FED_OK)
            goto out;
        o->be->copy(o->be, o->p0, fed_model_params_dev(m), o->n);
    }
    *out = o;
    return FED_OK;
out:
    fed_optim_free(o);
    return err;
}

void fed_optim_free(fed_optim *o)
{
    if (!o)
        return;
    if (o->m)
        o->be->free(o->be, o->m);
    if (o->v)
        o->be->free(o->be, o->v);
    if (o->p0)
        o->be->free(o->be, o->p0);
    if (o->corr)
        o->be->free(o->be, o->corr);
    fed_free(o);
}

float fed_optim_sched_lr(const fed_optim_cfg *c, long step)
{
    long w = c->warmup_steps > 0 ? c->warmup_steps : 0, t;

    if (step < 0)
        step = 0;
    if (step < w)
        return (float)((double)c->lr * (double)(step + 1) / (double)(w + 1));
    t = step - w;
    switch (c->sched) {
    case FED_SCHED_STEP:
        return c->step_size > 0 ? c->lr * powf(c->gamma, (float)(t / c->step_size)) : c->lr;
    case FED_SCHED_COSINE: {
        long total = c->total_steps - w;
        double x;

        if (c->total_steps <= 0)
            return c->lr;
        if (total <= 0)
            return 0.0f;
        x = t < total ? (double)t / (double)total : 1.0;
        return (float)(c->lr * 0.5 * (1.0 + cos(M_PI * x)));
    }
    case FED_SCHED_CONST:
    default:
        return c->lr;
    }
}

float fed_optim_lr(const fed_optim *o) { return fed_optim_sched_lr(&o->cfg, o->steps); }

long fed_optim_steps(const fed_optim *o) { return o->steps; }

/* The update over [lo, hi) of the flat buffers. */
static void step_range(fed_optim *o, size_t lo, size_t hi)
{
    const fed_optim_cfg *c = &o->cfg;
    fed_backend *be = o->be;
    float *p = fed_model_params_dev(o->model) + lo, *g = fed_model_grads_dev(o->model) + lo;
    size_t n = hi - lo;

    if (o->p0)
        be->prox_grad(be, g, p, o->p0 + lo, n, c->prox_mu);
    if (o->corr)
        be->axpy(be, n, 1.0f, o->corr + lo, g);
    if (c->kind == FED_OPTIM_ADAM)
        be->adam_step(be, p, g, o->m + lo, o->v + lo, n, o->lr, c->beta1, c->beta2, c->eps,
                      c->weight_decay, o->steps + 1);
    else
        be->sgd_step(be, p, g, o->m ? o->m + lo : NULL, n, o->lr, c->momentum, c->weight_decay,
                     c->nesterov);
}

/* The update over the trained tensors' parts of [lo, hi): the others
 * (batch norm's running statistics) are not the optimizer's, and get no
 * decay, momentum or proximal term. */
static void step_trained(fed_optim *o, size_t lo, size_t hi)
{
    int nt;
    const fed_tensor_info *t = fed_model_tensors(o->model, &nt);
    size_t from = lo;

    for (int i = 0; i < nt; i++) { /* in offset order, back to back */
        size_t a = t[i].offset, b = t[i].offset + t[i].numel;

        if (t[i].flags & FED_TENSOR_TRAINED)
            continue;
        a = a > lo ? a : lo;
        b = b < hi ? b : hi;
        if (a >= b)
            continue;
        if (from < a)
            step_range(o, from, a);
        from = b;
    }
    if (from < hi)
        step_range(o, from, hi);
}

static void step_piece(void *ctx, size_t i)
{
    fed_optim *o = ctx;
    size_t per = (o->n / (size_t)o->pieces + 15) & ~(size_t)15;
    size_t lo = i * per, hi = lo + per < o->n ? lo + per : o->n;

    if (lo < hi)
        step_trained(o, lo, hi);
}

fed_err fed_optim_step(fed_optim *o, fed_model *m)
{
    if (fed_model_nparams(m) != o->n)
        return FED_ERR_SHAPE;
    o->model = m;
    o->lr = fed_optim_lr(o);
    o->pieces = fed_model_shards(m);
    if (o->pieces > 1)
        fed_pool_parallel_for(fed_model_pool(m), (size_t)o->pieces, step_piece, o);
    else
        step_trained(o, 0, o->n);
    o->steps++;
    o->model = NULL;
    return FED_OK;
}

/* The model passes the trained tensors' ranges only (its layers' weight
 * and bias rows). */
static void update_range(void *ctx, size_t lo, size_t hi)
{
    step_range(ctx, lo, hi);
}

fed_err fed_optim_train_step(fed_optim *o, fed_model *m, const fed_batch *b, fed_step_stats *st)
{
    fed_err err;

    if (fed_model_nparams(m) != o->n)
        return FED_ERR_SHAPE;
    o->model = m;
    o->lr = fed_optim_lr(o);
    err = fed_model_train_step(m, b, st, update_range, o);
    if (err == FED_OK)
        o->steps++;
    o->model = NULL;
    return err;
}

fed_err fed_optim_set_anchor(fed_optim *o, fed_model *m)
{
    if (fed_model_nparams(m) != o->n)
        return FED_ERR_SHAPE;
    if (!o->p0)
        return FED_OK; /* no proximal term configured */
    o->be->copy(o->be, o->p0, fed_model_params_dev(m), o->n);
    return FED_OK;
}

fed_err fed_optim_set_correction(fed_optim *o, const float *corr)
{
    fed_err err;

    if (!o->corr && (err = alloc_zeroed(o->be, o->n, &o->corr)) != FED_OK)
        return err;
    return o->be->upload(o->be, o->corr, corr, o->n * sizeof(float));
}

size_t fed_optim_state_floats(const fed_optim *o)
{
    return (o->m ? o->n : 0) + (o->v ? o->n : 0);
}

fed_err fed_optim_get_state(const fed_optim *o, float *dst, long *step)
{
    fed_err err = FED_OK;

    *step = o->steps;
    if (o->m)
        err = o->be->download(o->be, dst, o->m, o->n * sizeof(float));
    if (err == FED_OK && o->v)
        err = o->be->download(o->be, dst + o->n, o->v, o->n * sizeof(float));
    return err;
}

fed_err fed_optim_set_state(fed_optim *o, const float *src, long step)
{
    fed_err err = FED_OK;

    if (step < 0)
        return FED_ERR_INVAL;
    if (o->m)
        err = o->be->upload(o->be, o->m, src, o->n * sizeof(float));
    if (err == FED_OK && o->v)
        err = o->be->upload(o->be, o->v, src + o->n, o->n * sizeof(float));
    if (err == FED_OK)
        o->steps = step;
    return err;
}
