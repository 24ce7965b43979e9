/* model.c - models from spec strings: layers, the flat parameter and
 * gradient buffers with their layout table, initialization, and the step
 * over the backend table, run as phases of units on the pool whose work is
 * fixed by the shard count alone (never by timing). Allocates only in
 * fed_model_new; never prints; never touches the data set. */
#include "model/model.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/log.h"

#define MAX_LAYERS 16
#define MAX_MLP_WIDTH 65536

typedef enum layer_kind { LAYER_LINEAR, LAYER_CONV, LAYER_POOL } layer_kind;

/* One layer; shapes are per sample, (c, h, w); a linear layer has h = w = 1. */
typedef struct layer {
    layer_kind kind;
    int relu;                 /* fused ReLU on the output */
    int in_c, in_h, in_w;
    int out_c, out_h, out_w;
    int in_numel, out_numel;
    int k;                    /* conv kernel size (square) */
    size_t w_off, b_off;      /* linear (out, in), conv (out_c, in_c, k, k); bias (out) */
    size_t col_numel;         /* conv: (in_c*k*k, out_h*out_w) per sample */
} layer;

#define MAX_SHARDS 64
#define SPIN_NS 300000       /* how long a unit waits for its phase before sleeping */
#define STEAL_WAIT_NS 200000 /* how long a piece may take to start before its units go */
#define SPIN_MIN_NS 2000     /* the least either budget shrinks to */
#define MAX_PHASES (2 * MAX_LAYERS + 3)

/* Buffers for the whole batch (max_batch rows); shard u owns rows
 * [off[u], off[u] + n[u]) of each. */
typedef struct workspace {
    uint8_t *x_u8;              /* (max_batch, F) */
    float *x;                   /* (max_batch, F) */
    int32_t *y;                 /* (max_batch) */
    float *act[MAX_LAYERS];     /* (max_batch, out_numel) per layer */
    float *col[MAX_LAYERS];     /* conv: (max_batch, col_numel) */
    int32_t *arg[MAX_LAYERS];   /* pool: (max_batch, out_numel) */
    float *d[2];                /* (max_batch, max out_numel): gradients ping-pong */
    float *ones;                /* (max_batch) of 1.0: bias gradients as a GEMM */
    float *dcol[MAX_SHARDS];    /* (max col_numel) per unit: one image at a time */
    /* DP-SGD (CPU only): each sample's squared gradient norm, and per unit a
       convolution's weight gradient of one sample, (max out_c * in_c*k*k) */
    double *norm2;              /* (max_batch), host */
    float *dgw[MAX_SHARDS];
    /* DP-SGD on a model of linear layers only: layer l's output gradient
       (max_batch, out_numel) for l < nlayers - 1, kept from the norm phases
       and scaled row by row there, so the backward needs no second pass of
       input gradients; allocated at the first fed_model_dp_grads (a model
       that never trains with DP-SGD holds none) */
    float *dpd[MAX_LAYERS];
    int dpd_on;
} workspace;

/* The step in flight. Pool piece p runs unit p of every phase, so a unit's
 * rows (its activations, its weight rows, their moments) stay in one core's
 * cache from step to step; a unit whose piece has not started yet (the pool
 * is busy, or slow to wake) is claimed by whoever is free. A unit of phase
 * k starts once every unit of phase k - 1 is done, and a thread waits only
 * for units already claimed, i.e. running: one thread alone, or a pool busy
 * elsewhere, still finishes the step. */
typedef struct step_run {
    const fed_batch *batch;
    int train;
    int fwd_phases; /* 1, or 3 with layer 0 split by columns */
    int nphases;
    float grad_scale;
    fed_model_update_fn update;
    void *update_ctx;
    /* DP-SGD (fed_model_dp_grads): phases after the forward, one per layer,
       that measure each sample's gradient norm and scale its dlogits by
       min(1, dp_clip / norm) * dp_scale; the weight gradients are then added
       to the buffer when accumulate */
    int dp, accumulate;
    float dp_clip, dp_scale;
    int bwd0; /* the first backward phase: fwd_phases (+ nlayers with dp) */
    int off[MAX_SHARDS], n[MAX_SHARDS];
    double loss[MAX_SHARDS];
    int correct[MAX_SHARDS];
    fed_err err[MAX_SHARDS];
    atomic_int started[MAX_SHARDS]; /* pool piece p has begun */
    atomic_int claimed[MAX_PHASES][MAX_SHARDS];
    atomic_int done[MAX_PHASES];
    /* a thread that waited long sleeps here (a core shared with other
     * processes must not be burnt spinning on a preempted unit) */
    atomic_int sleepers;
    /* the spin and steal budgets in ns: halved each time one runs out (the
     * other thread was preempted: the cores are shared, and spinning only
     * burns what it waits for), doubled back, up to SPIN_NS and
     * STEAL_WAIT_NS, each time a wait ends within it. Timing only: which
     * thread runs a unit never changes a result. */
    atomic_uint spin_ns, steal_ns;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sync_ready;
} step_run;

struct fed_model {
    char spec[FED_MODEL_SPEC_MAX];
    fed_model_shape in;
    fed_backend *be;
    fed_pool *pool;
    int shards, max_batch;
    int nlayers;
    layer layers[MAX_LAYERS];
    int ntensors;
    fed_tensor_info tensors[FED_MODEL_MAX_TENSORS];
    size_t nparams;
    float *params; /* (nparams) device */
    float *grads;  /* (nparams) device */
    workspace ws;
    step_run run;  /* the step in flight */
};

/* ---------------------------------------------------------------- spec -- */

/* The layer plan of a spec, before any allocation. */
typedef struct plan {
    int nlayers;
    layer layers[MAX_LAYERS];
    int ntensors;
    fed_tensor_info tensors[FED_MODEL_MAX_TENSORS];
    size_t nparams;
} plan;

static void add_tensor(plan *p, int seq, const char *what, int ndim, const int *shape)
{
    fed_tensor_info *t = &p->tensors[p->ntensors++];
    size_t numel = 1;

    snprintf(t->name, sizeof t->name, "%d.%s", seq, what);
    t->ndim = ndim;
    for (int i = 0; i < 4; i++)
        t->shape[i] = i < ndim ? shape[i] : 0;
    for (int i = 0; i < ndim; i++)
        numel *= (size_t)shape[i];
    t->offset = p->nparams;
    t->numel = numel;
    p->nparams += numel;
}

static layer *last_out(plan *p, int *c, int *h, int *w)
{
    layer *l = p->nlayers ? &p->layers[p->nlayers - 1] : NULL;

    if (l) {
        *c = l->out_c;
        *h = l->out_h;
        *w = l->out_w;
    }
    return l;
}

/* A linear layer at nn.Sequential index seq taking the flattened input. */
static void add_linear(plan *p, int seq, int c, int h, int w, int out, int relu)
{
    layer *l = &p->layers[p->nlayers++];
    int wshape[2] = {out, c * h * w};

    memset(l, 0, sizeof *l);
    l->kind = LAYER_LINEAR;
    l->relu = relu;
    l->in_c = c;
    l->in_h = h;
    l->in_w = w;
    l->in_numel = c * h * w;
    l->out_c = out;
    l->out_h = l->out_w = 1;
    l->out_numel = out;
    add_tensor(p, seq, "weight", 2, wshape);
    l->w_off = p->tensors[p->ntensors - 1].offset;
    add_tensor(p, seq, "bias", 1, &out);
    l->b_off = p->tensors[p->ntensors - 1].offset;
}

static void add_conv(plan *p, int seq, int c, int h, int w, int out, int k)
{
    layer *l = &p->layers[p->nlayers++];
    int wshape[4] = {out, c, k, k};

    memset(l, 0, sizeof *l);
    l->kind = LAYER_CONV;
    l->relu = 1;
    l->in_c = c;
    l->in_h = h;
    l->in_w = w;
    l->in_numel = c * h * w;
    l->k = k;
    l->out_c = out;
    l->out_h = h - k + 1;
    l->out_w = w - k + 1;
    l->out_numel = out * l->out_h * l->out_w;
    l->col_numel = (size_t)c * k * k * l->out_h * l->out_w;
    add_tensor(p, seq, "weight", 4, wshape);
    l->w_off = p->tensors[p->ntensors - 1].offset;
    add_tensor(p, seq, "bias", 1, &out);
    l->b_off = p->tensors[p->ntensors - 1].offset;
}

static void add_pool(plan *p, int c, int h, int w)
{
    layer *l = &p->layers[p->nlayers++];

    memset(l, 0, sizeof *l);
    l->kind = LAYER_POOL;
    l->in_c = l->out_c = c;
    l->in_h = h;
    l->in_w = w;
    l->in_numel = c * h * w;
    l->out_h = h / 2;
    l->out_w = w / 2;
    l->out_numel = c * l->out_h * l->out_w;
}

static fed_err spec_fail(char *why, size_t cap, fed_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* err, with why (cap bytes; may be NULL) saying what was wrong. */
static fed_err spec_fail(char *why, size_t cap, fed_err err, const char *fmt, ...)
{
    va_list ap;

    if (why && cap) {
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return err;
}

/* "256,128": widths in [1, MAX_MLP_WIDTH], at most MAX_LAYERS - 1. */
static fed_err parse_widths(const char *spec, const char *s, int *widths, int *count, char *why,
                            size_t cap)
{
    *count = 0;
    for (;;) {
        const char *start = s;
        long v = 0;

        while (isdigit((unsigned char)*s)) {
            if (v <= MAX_MLP_WIDTH) /* past the limit: counted, not kept */
                v = v * 10 + (*s - '0');
            s++;
        }
        if (s == start)
            return spec_fail(why, cap, FED_ERR_SPEC,
                             "model spec '%s': layer %d: expected a width (digits)", spec,
                             *count + 1);
        if (*count >= MAX_LAYERS - 1)
            return spec_fail(why, cap, FED_ERR_SPEC,
                             "model spec '%s': more than %d hidden layers", spec,
                             MAX_LAYERS - 1);
        if (v < 1)
            return spec_fail(why, cap, FED_ERR_SPEC,
                             "model spec '%s': layer %d width %.*s is below the minimum 1", spec,
                             *count + 1, (int)(s - start), start);
        if (v > MAX_MLP_WIDTH)
            return spec_fail(why, cap, FED_ERR_SPEC,
                             "model spec '%s': layer %d width %.*s exceeds the limit %d", spec,
                             *count + 1, (int)(s - start), start, MAX_MLP_WIDTH);
        widths[(*count)++] = (int)v;
        if (*s == '\0')
            return FED_OK;
        if (*s++ != ',')
            return spec_fail(why, cap, FED_ERR_SPEC,
                             "model spec '%s': layer %d: '%c' after the width, expected ','",
                             spec, *count, s[-1]);
    }
}

static fed_err plan_cnn(plan *p, fed_model_shape in)
{
    int c = in.c, h = in.h, w = in.w;

    /* Sequential: 0 conv, 1 ReLU, 2 pool, 3 conv, 4 ReLU, 5 pool, 6 Flatten,
     * 7 linear, 8 ReLU, 9 linear. */
    if (h - 4 < 2 || w - 4 < 2 || (h - 4) / 2 - 4 < 2 || (w - 4) / 2 - 4 < 2)
        return FED_ERR_SHAPE;
    add_conv(p, 0, c, h, w, 32, 5);
    last_out(p, &c, &h, &w);
    add_pool(p, c, h, w);
    last_out(p, &c, &h, &w);
    add_conv(p, 3, c, h, w, 64, 5);
    last_out(p, &c, &h, &w);
    add_pool(p, c, h, w);
    last_out(p, &c, &h, &w);
    add_linear(p, 7, c, h, w, 512, 1);
    add_linear(p, 9, 512, 1, 1, in.classes, 0);
    return FED_OK;
}

/* why (cap bytes; may be NULL) gets what was wrong on failure. */
static fed_err make_plan(const char *spec, fed_model_shape in, plan *p, char *why,
                         size_t cap)
{
    memset(p, 0, sizeof *p);
    if (why && cap)
        why[0] = '\0';
    if (!spec)
        return spec_fail(why, cap, FED_ERR_SPEC, "no model spec");
    if (strlen(spec) >= FED_MODEL_SPEC_MAX)
        return spec_fail(why, cap, FED_ERR_SPEC,
                         "model spec '%.40s...' is %zu bytes, the limit is %d", spec,
                         strlen(spec), FED_MODEL_SPEC_MAX - 1);
    /* (c x h first: with it at most 2^24, times w cannot overflow) */
    if (in.c < 1 || in.h < 1 || in.w < 1 || in.classes < 2 || in.classes > 65536 ||
        (long)in.c * in.h > (1L << 24) || (long)in.c * in.h * in.w > (1L << 24))
        return spec_fail(why, cap, FED_ERR_SHAPE,
                         "model spec '%s': input %dx%dx%d with %d classes is outside the limits "
                         "(at most %ld values, 2 to 65536 classes)", spec, in.c, in.h, in.w,
                         in.classes, 1L << 24);
    if (!strcmp(spec, "logreg")) {
        add_linear(p, 0, in.c, in.h, in.w, in.classes, 0);
        return FED_OK;
    }
    if (!strcmp(spec, "cnn")) {
        fed_err err = plan_cnn(p, in);

        if (err != FED_OK)
            spec_fail(why, cap, err, "model spec 'cnn': input %dx%d is too small for its two "
                      "5x5 convolutions and 2x2 pools", in.h, in.w);
        return err;
    }
    if (!strncmp(spec, "mlp:", 4)) {
        int widths[MAX_LAYERS], count, c = in.c, h = in.h, w = in.w;
        fed_err err = parse_widths(spec, spec + 4, widths, &count, why, cap);

        if (err != FED_OK)
            return err;
        for (int i = 0; i < count; i++) {
            add_linear(p, 2 * i, c, h, w, widths[i], 1);
            last_out(p, &c, &h, &w);
        }
        add_linear(p, 2 * count, c, h, w, in.classes, 0);
        return FED_OK;
    }
    return spec_fail(why, cap, FED_ERR_SPEC,
                     "model spec '%s' is none of logreg, mlp:W1,W2,... or cnn", spec);
}

static fed_err spec_nparams(const char *spec, fed_model_shape in, size_t *nparams, char *why,
                            size_t cap)
{
    plan *p = fed_malloc(sizeof *p);
    fed_err err;

    *nparams = 0;
    if (!p)
        return spec_fail(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    err = make_plan(spec, in, p, why, cap);
    if (err == FED_OK)
        *nparams = p->nparams;
    fed_free(p);
    return err;
}

fed_err fed_model_spec_nparams(const char *spec, fed_model_shape in, size_t *nparams)
{
    return spec_nparams(spec, in, nparams, NULL, 0);
}

fed_err fed_model_spec_explain(const char *spec, fed_model_shape in, char *why, size_t cap)
{
    size_t n;

    return spec_nparams(spec, in, &n, why, cap);
}

fed_err fed_model_spec_check(const char *spec, fed_model_shape in)
{
    size_t n;

    return fed_model_spec_nparams(spec, in, &n);
}

/* ------------------------------------------------------- construction -- */

static fed_err dev_alloc(fed_backend *be, size_t bytes, void *dptr)
{
    return be->alloc(be, bytes, (void **)dptr);
}

static void dev_free(fed_backend *be, void *p)
{
    if (p)
        be->free(be, p);
}

static void ws_fini(fed_model *m, workspace *w)
{
    fed_backend *be = m->be;

    dev_free(be, w->x_u8);
    dev_free(be, w->x);
    dev_free(be, w->y);
    for (int l = 0; l < MAX_LAYERS; l++) {
        dev_free(be, w->act[l]);
        dev_free(be, w->col[l]);
        dev_free(be, w->arg[l]);
    }
    dev_free(be, w->d[0]);
    dev_free(be, w->d[1]);
    dev_free(be, w->ones);
    for (int u = 0; u < MAX_SHARDS; u++) {
        dev_free(be, w->dcol[u]);
        dev_free(be, w->dgw[u]);
    }
    fed_free(w->norm2);
    for (int l = 0; l < MAX_LAYERS; l++)
        dev_free(be, w->dpd[l]);
}

static fed_err ws_init(fed_model *m, workspace *w)
{
    fed_backend *be = m->be;
    size_t cap = (size_t)m->max_batch, feat = (size_t)m->in.c * m->in.h * m->in.w;
    size_t maxout = 0, maxcol = 0;
    fed_err err;

    if ((err = dev_alloc(be, cap * feat, &w->x_u8)) ||
        (err = dev_alloc(be, cap * feat * sizeof(float), &w->x)) ||
        (err = dev_alloc(be, cap * sizeof(int32_t), &w->y)) ||
        (err = dev_alloc(be, cap * sizeof(float), &w->ones)))
        return err;
    be->fill(be, w->ones, 1.0f, cap);
    for (int l = 0; l < m->nlayers; l++) {
        const layer *ly = &m->layers[l];

        if ((size_t)ly->out_numel > maxout)
            maxout = (size_t)ly->out_numel;
        if (ly->col_numel > maxcol)
            maxcol = ly->col_numel;
        if ((err = dev_alloc(be, cap * ly->out_numel * sizeof(float), &w->act[l])))
            return err;
        if (ly->kind == LAYER_CONV &&
            (err = dev_alloc(be, cap * ly->col_numel * sizeof(float), &w->col[l])))
            return err;
        if (ly->kind == LAYER_POOL &&
            (err = dev_alloc(be, cap * ly->out_numel * sizeof(int32_t), &w->arg[l])))
            return err;
    }
    for (int u = 0; maxcol && u < m->shards; u++)
        if ((err = dev_alloc(be, maxcol * sizeof(float), &w->dcol[u])))
            return err;
    if (!strcmp(be->name, "cpu")) { /* DP-SGD's buffers: the CPU backend only */
        size_t maxgw = 0;

        if (!(w->norm2 = fed_calloc(cap, sizeof *w->norm2)))
            return FED_ERR_NOMEM;
        for (int l = 0; l < m->nlayers; l++)
            if (m->layers[l].kind == LAYER_CONV && m->layers[l].b_off - m->layers[l].w_off > maxgw)
                maxgw = m->layers[l].b_off - m->layers[l].w_off; /* out_c * in_c*k*k */
        for (int u = 0; maxgw && u < m->shards; u++)
            if ((err = dev_alloc(be, maxgw * sizeof(float), &w->dgw[u])))
                return err;
    }
    if ((err = dev_alloc(be, cap * maxout * sizeof(float), &w->d[0])) ||
        (err = dev_alloc(be, cap * maxout * sizeof(float), &w->d[1])))
        return err;
    return FED_OK;
}

static int has_conv(const plan *p)
{
    for (int l = 0; l < p->nlayers; l++)
        if (p->layers[l].kind == LAYER_CONV)
            return 1;
    return 0;
}

fed_err fed_model_new(const char *spec, fed_model_shape in, fed_backend *be, fed_pool *pool,
                      int shards, int max_batch, fed_model **out)
{
    fed_model *m = NULL;
    plan *p = NULL;
    char why[256];
    fed_err err;

    *out = NULL;
    if (!be || max_batch < 1 || max_batch > (1 << 20) || shards < 1 || shards > MAX_SHARDS)
        return FED_ERR_INVAL;
    p = fed_malloc(sizeof *p);
    if (!p)
        return FED_ERR_NOMEM;
    err = make_plan(spec, in, p, why, sizeof why);
    if (err != FED_OK) {
        fed_log(FED_LOG_ERROR, "%s", why);
        goto out;
    }
    if (has_conv(p) && (!be->chan_bias_act_fwd || !be->chan_bias_bwd)) {
        fed_log(FED_LOG_ERROR, "model: backend %s has no convolution kernels", be->name);
        err = FED_ERR_UNSUPPORTED;
        goto out;
    }
    if (strcmp(be->name, "cpu") != 0)
        shards = 1; /* a device runs the whole batch itself */
    if (shards > max_batch)
        shards = max_batch;
    err = FED_ERR_NOMEM;
    m = fed_calloc(1, sizeof *m);
    if (!m)
        goto out;
    if (pthread_mutex_init(&m->run.mu, NULL) != 0) {
        fed_free(m);
        m = NULL;
        goto out;
    }
    if (pthread_cond_init(&m->run.cv, NULL) != 0) {
        pthread_mutex_destroy(&m->run.mu);
        fed_free(m);
        m = NULL;
        goto out;
    }
    m->run.sync_ready = 1;
    atomic_store(&m->run.spin_ns, SPIN_NS);
    atomic_store(&m->run.steal_ns, STEAL_WAIT_NS);
    snprintf(m->spec, sizeof m->spec, "%s", spec);
    m->in = in;
    m->be = be;
    m->pool = pool;
    m->shards = shards;
    m->max_batch = max_batch;
    m->nlayers = p->nlayers;
    memcpy(m->layers, p->layers, sizeof m->layers);
    m->ntensors = p->ntensors;
    memcpy(m->tensors, p->tensors, sizeof m->tensors);
    m->nparams = p->nparams;
    if ((err = dev_alloc(be, m->nparams * sizeof(float), &m->params)) ||
        (err = dev_alloc(be, m->nparams * sizeof(float), &m->grads)) ||
        (err = ws_init(m, &m->ws)))
        goto out;
    *out = m;
    m = NULL;
    err = FED_OK;
out:
    fed_model_free(m);
    fed_free(p);
    return err;
}

void fed_model_free(fed_model *m)
{
    if (!m)
        return;
    ws_fini(m, &m->ws);
    dev_free(m->be, m->params);
    dev_free(m->be, m->grads);
    if (m->run.sync_ready) {
        pthread_cond_destroy(&m->run.cv);
        pthread_mutex_destroy(&m->run.mu);
    }
    fed_free(m);
}

/* ---------------------------------------------------------- accessors -- */

const char *fed_model_spec(const fed_model *m) { return m->spec; }
fed_model_shape fed_model_input(const fed_model *m) { return m->in; }
size_t fed_model_nparams(const fed_model *m) { return m->nparams; }
fed_backend *fed_model_backend(const fed_model *m) { return m->be; }
float *fed_model_params_dev(fed_model *m) { return m->params; }
float *fed_model_grads_dev(fed_model *m) { return m->grads; }
fed_pool *fed_model_pool(const fed_model *m) { return m->pool; }
int fed_model_shards(const fed_model *m) { return m->shards; }
int fed_model_max_batch(const fed_model *m) { return m->max_batch; }

const fed_tensor_info *fed_model_tensors(const fed_model *m, int *count)
{
    *count = m->ntensors;
    return m->tensors;
}

double fed_model_flops_per_sample(const fed_model *m)
{
    double f = 0.0;

    for (int l = 0; l < m->nlayers; l++) {
        const layer *ly = &m->layers[l];
        double macs;

        if (ly->kind == LAYER_POOL) {
            f += 2.0 * ly->in_numel;
            continue;
        }
        macs = ly->kind == LAYER_LINEAR
                   ? (double)ly->in_numel * ly->out_numel
                   : (double)ly->col_numel * ly->out_c;
        /* forward, weight gradient, and input gradient except for layer 0 */
        f += 2.0 * macs * (l == 0 ? 2.0 : 3.0);
    }
    return f;
}

/* ----------------------------------------------------- initialization -- */

fed_err fed_model_init(fed_model *m, fed_rng *rng)
{
    float *host = fed_malloc(m->nparams * sizeof(float));
    fed_err err;

    if (!host)
        return FED_ERR_NOMEM;
    for (int l = 0; l < m->nlayers; l++) {
        const layer *ly = &m->layers[l];
        size_t fan_in, wn;
        float bound;

        if (ly->kind == LAYER_POOL)
            continue;
        /* kaiming_uniform(a = sqrt(5)) gives bound 1/sqrt(fan_in); the bias
         * is U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as well. */
        fan_in = ly->kind == LAYER_LINEAR ? (size_t)ly->in_numel
                                          : (size_t)ly->in_c * ly->k * ly->k;
        wn = ly->b_off - ly->w_off;
        bound = (float)(1.0 / sqrt((double)fan_in));
        for (size_t i = 0; i < wn; i++)
            host[ly->w_off + i] = (2.0f * fed_rng_uniform_f(rng) - 1.0f) * bound;
        for (int i = 0; i < ly->out_c; i++)
            host[ly->b_off + i] = (2.0f * fed_rng_uniform_f(rng) - 1.0f) * bound;
    }
    err = m->be->upload(m->be, m->params, host, m->nparams * sizeof(float));
    fed_free(host);
    return err;
}

fed_err fed_model_get_params(const fed_model *m, float *dst)
{
    return m->be->download(m->be, dst, m->params, m->nparams * sizeof(float));
}

fed_err fed_model_set_params(fed_model *m, const float *src)
{
    return m->be->upload(m->be, m->params, src, m->nparams * sizeof(float));
}

/* ----------------------------------------------------------- the step -- */
/* A step over n samples with S shards runs as phases of S units each:
 *   phase 0      unit u: forward of its rows [off_u, off_u + n_u) through
 *                every layer, then the loss (and, training, its gradient:
 *                the logits are replaced in place by dlogits); when layer 0
 *                is linear and S > 1 this is three phases: upload of the
 *                rows, layer 0 by output columns (forward_layer0_cols), the
 *                other layers by rows;
 *   phase F + j  (after the F = 1 or 3 forward phases) layer l = L - 1 - j,
 *                unit u: the weight and bias gradients of output-row chunk u
 *                over the whole batch (no reduction needed), and the input
 *                gradient of its own rows, masked by
 *                the ReLU of layer l - 1; with an update function, also the
 *                update of layer l + 1's rows of chunk u (their weights are
 *                no longer read), and of layer 0's at once in its phase.
 * A unit's work depends on (n, S) alone, never on the thread that runs it. */

static void row_chunk(int R, int S, int u, int *r0, int *r1)
{
    int chunk = ((R + S - 1) / S + 15) / 16 * 16;

    *r0 = u * chunk < R ? u * chunk : R;
    *r1 = (u + 1) * chunk < R ? (u + 1) * chunk : R;
}

static void layer_forward(fed_model *m, int l, const float *x, int off, int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    const float *W = m->params + ly->w_off, *b = m->params + ly->b_off;
    float *y = m->ws.act[l] + (size_t)off * ly->out_numel;

    switch (ly->kind) {
    case LAYER_LINEAR:
        /* y (n, out) = x (n, in) W^T, then bias and ReLU in one pass */
        be->gemm(be, 0, 1, n, ly->out_numel, ly->in_numel, 1.0f, x, ly->in_numel, W,
                 ly->in_numel, 0.0f, y, ly->out_numel);
        be->bias_act_fwd(be, y, b, n, ly->out_numel, ly->relu);
        break;
    case LAYER_CONV: {
        int ckk = ly->in_c * ly->k * ly->k, P = ly->out_h * ly->out_w;

        for (int i = 0; i < n; i++) {
            float *col = m->ws.col[l] + (size_t)(off + i) * ly->col_numel;

            be->im2col(be, x + (size_t)i * ly->in_numel, ly->in_c, ly->in_h, ly->in_w, ly->k,
                       ly->k, col);
            /* y_i (out_c, P) = W (out_c, ckk) col (ckk, P) */
            be->gemm(be, 0, 0, ly->out_c, P, ckk, 1.0f, W, ckk, col, P, 0.0f,
                     y + (size_t)i * ly->out_numel, P);
        }
        be->chan_bias_act_fwd(be, y, b, n, ly->out_c, P, ly->relu);
        break;
    }
    case LAYER_POOL:
        be->maxpool_fwd(be, x, n * ly->in_c, ly->in_h, ly->in_w, y,
                        m->ws.arg[l] + (size_t)off * ly->out_numel);
        break;
    }
}

/* Weight and bias gradients of layer l, output rows of chunk u, over all n
 * samples; dy (n, out) is already masked by this layer's ReLU. */
static void weight_grads(fed_model *m, int l, int u, const float *dy, int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    const float *x = l > 0 ? m->ws.act[l - 1] : m->ws.x;
    float *dW = m->grads + ly->w_off, *db = m->grads + ly->b_off;
    int r0, r1, acc = m->run.accumulate;
    float beta = acc ? 1.0f : 0.0f;

    if (ly->kind == LAYER_POOL)
        return;
    row_chunk(ly->out_c, m->shards, u, &r0, &r1);
    if (r0 >= r1)
        return;
    if (ly->kind == LAYER_LINEAR) {
        int in = ly->in_numel, out = ly->out_numel;

        /* dW[r0:r1] (r, in) = dy[:, r0:r1]^T (r, n) x (n, in) */
        be->gemm(be, 1, 0, r1 - r0, in, n, 1.0f, dy + r0, out, x, in, beta,
                 dW + (size_t)r0 * in, in);
        /* db[r0:r1] = dy[:, r0:r1]^T ones (n) */
        be->gemm(be, 1, 0, r1 - r0, 1, n, 1.0f, dy + r0, out, m->ws.ones, 1, beta, db + r0, 1);
        return;
    }
    {
        int ckk = ly->in_c * ly->k * ly->k, P = ly->out_h * ly->out_w;

        for (int i = 0; i < n; i++) {
            const float *dyi = dy + (size_t)i * ly->out_numel + (size_t)r0 * P;

            /* dW[r0:r1] (r, ckk) += dy_i[r0:r1] (r, P) col_i^T (P, ckk) */
            be->gemm(be, 0, 1, r1 - r0, ckk, P, 1.0f, dyi, P,
                     m->ws.col[l] + (size_t)i * ly->col_numel, P, i || acc ? 1.0f : 0.0f,
                     dW + (size_t)r0 * ckk, ckk);
            if (r1 - r0 < ly->out_c)
                be->chan_bias_bwd(be, db + r0, dyi, 1, r1 - r0, P, i > 0 || acc);
        }
        if (r1 - r0 == ly->out_c) /* all channels: one call over the batch */
            be->chan_bias_bwd(be, db, dy, n, ly->out_c, P, acc);
    }
}

/* Input gradient of layer l > 0 for rows [off, off + n), into dx, then
 * masked by the ReLU of layer l - 1. */
static void input_grads(fed_model *m, int l, int u, const float *dy, float *dx, int off, int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    const float *W = m->params + ly->w_off;
    const float *dyo = dy + (size_t)off * ly->out_numel;
    float *dxo = dx + (size_t)off * ly->in_numel;

    switch (ly->kind) {
    case LAYER_LINEAR:
        /* dx (n, in) = dy (n, out) W (out, in) */
        be->gemm(be, 0, 0, n, ly->in_numel, ly->out_numel, 1.0f, dyo, ly->out_numel, W,
                 ly->in_numel, 0.0f, dxo, ly->in_numel);
        break;
    case LAYER_CONV: {
        int ckk = ly->in_c * ly->k * ly->k, P = ly->out_h * ly->out_w;

        be->fill(be, dxo, 0.0f, (size_t)n * ly->in_numel);
        for (int i = 0; i < n; i++) {
            /* dcol (ckk, P) = W^T (ckk, out_c) dy_i (out_c, P), folded back */
            be->gemm(be, 1, 0, ckk, P, ly->out_c, 1.0f, W, ckk, dyo + (size_t)i * ly->out_numel,
                     P, 0.0f, m->ws.dcol[u], P);
            be->col2im(be, m->ws.dcol[u], ly->in_c, ly->in_h, ly->in_w, ly->k, ly->k,
                       dxo + (size_t)i * ly->in_numel);
        }
        break;
    }
    case LAYER_POOL:
        be->maxpool_bwd(be, dyo, m->ws.arg[l] + (size_t)off * ly->out_numel, n * ly->in_c,
                        ly->in_h, ly->in_w, dxo);
        break;
    }
    if (m->layers[l - 1].relu)
        be->relu_bwd(be, dxo, m->ws.act[l - 1] + (size_t)off * ly->in_numel,
                     (size_t)n * ly->in_numel);
}

static fed_err upload_rows(fed_model *m, int off, int n)
{
    fed_backend *be = m->be;
    const fed_batch *b = m->run.batch;
    size_t feat = (size_t)m->in.c * m->in.h * m->in.w, cnt = (size_t)n * feat;
    size_t at = (size_t)off * feat;
    fed_err err;

    if (b->x_u8) {
        err = be->upload(be, m->ws.x_u8 + at, b->x_u8 + at, cnt);
        if (err == FED_OK)
            be->u8_to_f32(be, m->ws.x + at, m->ws.x_u8 + at, cnt, FED_MODEL_PIXEL_SCALE,
                          FED_MODEL_PIXEL_SHIFT);
    } else {
        err = be->upload(be, m->ws.x + at, b->x_f32 + at, cnt * sizeof(float));
    }
    if (err == FED_OK)
        err = be->upload(be, m->ws.y + off, b->y + off, (size_t)n * sizeof(int32_t));
    return err;
}

/* Layer 0 (linear) by output columns: unit u computes y[:, r0:r1] for the
 * whole batch from its own rows of W, the rows it updates (so they stay in
 * its core's cache), and each core reads half of W instead of all of it. */
static void forward_layer0_cols(fed_model *m, int u, int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[0];
    int in = ly->in_numel, out = ly->out_numel, r0, r1;
    float *y = m->ws.act[0];

    row_chunk(out, m->shards, u, &r0, &r1);
    if (r0 >= r1)
        return;
    be->gemm(be, 0, 1, n, r1 - r0, in, 1.0f, m->ws.x, in, m->params + ly->w_off + (size_t)r0 * in,
             in, 0.0f, y + r0, out);
    for (int b = 0; b < n; b++)
        be->bias_act_fwd(be, y + (size_t)b * out + r0, m->params + ly->b_off + r0, 1, r1 - r0,
                         ly->relu);
}

/* Layers from..L-1 for unit u's rows, then the loss (and its gradient when
 * training: the logits are replaced by dlogits). */
static void forward_rows(fed_model *m, int u, int from)
{
    step_run *r = &m->run;
    int off = r->off[u], n = r->n[u], last = m->nlayers - 1, C = m->in.classes;
    size_t feat = (size_t)m->in.c * m->in.h * m->in.w;
    const float *x;
    float *logits;

    if (n == 0 || r->err[u] != FED_OK)
        return;
    x = from == 0 ? m->ws.x + (size_t)off * feat
                  : m->ws.act[from - 1] + (size_t)off * m->layers[from - 1].out_numel;
    for (int l = from; l <= last; l++) {
        layer_forward(m, l, x, off, n);
        x = m->ws.act[l] + (size_t)off * m->layers[l].out_numel;
    }
    logits = m->ws.act[last] + (size_t)off * C;
    if (r->train)
        m->be->softmax_xent(m->be, logits, m->ws.y + off, n, C, r->grad_scale, &r->loss[u],
                            &r->correct[u]);
    else
        m->be->softmax_eval(m->be, logits, m->ws.y + off, n, C, &r->loss[u], &r->correct[u]);
}

/* Forward phase f of r->fwd_phases: with a column-split layer 0, upload,
 * layer 0, the rest; else all three in one. */
static void forward_unit(fed_model *m, int f, int u)
{
    step_run *r = &m->run;
    int ntotal = r->off[m->shards - 1] + r->n[m->shards - 1];

    if (f == 0) {
        r->loss[u] = 0.0;
        r->correct[u] = 0;
        if (r->n[u] > 0)
            r->err[u] = upload_rows(m, r->off[u], r->n[u]);
        if (r->fwd_phases == 1)
            forward_rows(m, u, 0);
    } else if (f == 1) {
        forward_layer0_cols(m, u, ntotal);
    } else {
        forward_rows(m, u, 1);
    }
}

static double sumsq_f(const float *x, size_t n)
{
    double s = 0.0;

    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

/* DP-SGD's phases, one per layer l from the last, unit u's own rows: layer
 * l's part of each sample's squared gradient norm, then the input gradient
 * into the layer below (a phase per layer, as the backward's: the gradient
 * buffers are laid out per layer, so one unit's rows of one layer overlap
 * another's rows of the next); after layer 0, each sample's dlogits scaled
 * by min(1, clip / norm) * scale. Linear layer: sample i's weight gradient is
 * dy_i x_i^T, so its squared norm is |dy_i|^2 |x_i|^2, and its bias's
 * |dy_i|^2, with no per-sample gradient made. Convolution: sample i's weight
 * gradient dy_i (out_c, P) col_i^T (P, ckk) is made, one at a time in the
 * unit's scratch, and its bias's is dy_i summed over P. Reads the CPU
 * backend's buffers directly (DP-SGD is CPU only). The backward phases then
 * run from the scaled dlogits: backpropagation is linear in them, so each
 * layer's gradient becomes sum_i scale_i g_i. */
static void dp_unit(fed_model *m, int l, int u)
{
    step_run *r = &m->run;
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    int L = m->nlayers, off = r->off[u], n = r->n[u], C = m->in.classes;
    double *norm2 = m->ws.norm2 + off;
    int kept = m->ws.dpd_on; /* the output gradients kept per layer */
    float *dy = l == L - 1 ? m->ws.act[L - 1] : kept ? m->ws.dpd[l] : m->ws.d[(L - 2 - l) & 1];
    float *dx = l == 0 ? NULL : kept ? m->ws.dpd[l - 1] : m->ws.d[(L - 1 - l) & 1], *dl;
    const float *x = l > 0 ? m->ws.act[l - 1] : m->ws.x;

    if (n == 0 || r->err[u] != FED_OK)
        return;
    if (l == L - 1)
        for (int i = 0; i < n; i++)
            norm2[i] = 0.0;
    if (ly->kind == LAYER_LINEAR) {
        for (int i = 0; i < n; i++)
            norm2[i] += sumsq_f(dy + (size_t)(off + i) * ly->out_numel, ly->out_numel) *
                        (sumsq_f(x + (size_t)(off + i) * ly->in_numel, ly->in_numel) + 1.0);
    } else if (ly->kind == LAYER_CONV) {
        int ckk = ly->in_c * ly->k * ly->k, P = ly->out_h * ly->out_w;

        for (int i = 0; i < n; i++) {
            const float *dyi = dy + (size_t)(off + i) * ly->out_numel;

            be->gemm(be, 0, 1, ly->out_c, ckk, P, 1.0f, dyi, P,
                     m->ws.col[l] + (size_t)(off + i) * ly->col_numel, P, 0.0f, m->ws.dgw[u],
                     ckk);
            norm2[i] += sumsq_f(m->ws.dgw[u], (size_t)ly->out_c * ckk);
            for (int c = 0; c < ly->out_c; c++) {
                double b = 0.0;

                for (int p = 0; p < P; p++)
                    b += dyi[(size_t)c * P + p];
                norm2[i] += b * b;
            }
        }
    }
    if (l > 0) {
        input_grads(m, l, u, dy, dx, off, n);
        return;
    }
    dl = m->ws.act[L - 1] + (size_t)off * C;
    for (int i = 0; i < n; i++) {
        double norm = sqrt(norm2[i]);
        float f = (float)((norm > r->dp_clip ? r->dp_clip / norm : 1.0) * r->dp_scale);

        norm2[i] = norm; /* kept for the caller */
        for (int c = 0; c < C; c++)
            dl[(size_t)i * C + c] *= f;
        /* the kept gradients of the layers below, by the same factor: what
           the backward from the scaled dlogits would give (it is linear in
           them, the ReLU masks fixed) */
        for (int k = 0; kept && k < L - 1; k++) {
            float *row = m->ws.dpd[k] + (size_t)(off + i) * m->layers[k].out_numel;

            for (int j = 0; j < m->layers[k].out_numel; j++)
                row[j] *= f;
        }
    }
}

/* The update of layer l's parameters in unit u's rows (the rows whose
 * gradients the same unit computed): weights, then biases. */
static void update_rows(fed_model *m, int l, int u)
{
    const layer *ly = &m->layers[l];
    size_t per_row;
    int r0, r1;

    if (ly->kind == LAYER_POOL)
        return;
    row_chunk(ly->out_c, m->shards, u, &r0, &r1);
    if (r0 >= r1)
        return;
    per_row = (ly->b_off - ly->w_off) / (size_t)ly->out_c;
    m->run.update(m->run.update_ctx, ly->w_off + (size_t)r0 * per_row,
                  ly->w_off + (size_t)r1 * per_row);
    m->run.update(m->run.update_ctx, ly->b_off + (size_t)r0, ly->b_off + (size_t)r1);
}

static void run_unit(fed_model *m, int ph, int u)
{
    step_run *r = &m->run;
    int L = m->nlayers, ntotal = r->off[m->shards - 1] + r->n[m->shards - 1];
    int l = L - 1 - (ph - r->bwd0);
    float *dy, *dx;

    if (ph < r->fwd_phases) {
        forward_unit(m, ph, u);
        return;
    }
    if (ph < r->bwd0) {
        dp_unit(m, L - 1 - (ph - r->fwd_phases), u);
        return;
    }
    if (r->dp && m->ws.dpd_on) { /* every layer's output gradient is kept, scaled */
        weight_grads(m, l, u, l == L - 1 ? m->ws.act[L - 1] : m->ws.dpd[l], ntotal);
        return;
    }
    dy = l == L - 1 ? m->ws.act[L - 1] : m->ws.d[(L - 2 - l) & 1];
    dx = m->ws.d[(L - 1 - l) & 1];
    weight_grads(m, l, u, dy, ntotal);
    if (l > 0 && r->n[u] > 0)
        input_grads(m, l, u, dy, dx, r->off[u], r->n[u]);
    if (!r->update)
        return;
    /* Layer l + 1's weights were last read in the previous phase (its
     * input gradient): update them now, while their gradients are warm.
     * Layer 0 needs no input gradient, so it is updated at once. */
    if (l + 1 < L)
        update_rows(m, l + 1, u);
    if (l == 0)
        update_rows(m, 0, u);
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spin a while (the phase's other units are running on other cores, and a
 * sleeping thread takes long to wake), then sleep until the last unit of
 * the phase wakes us (a core shared with other processes must not be
 * burnt spinning on a preempted unit). */
/* A wait of the budget *b (max its ceiling) ended: within it, or not. */
static void budget_adapt(atomic_uint *b, int in_time, unsigned ceiling)
{
    unsigned v = atomic_load_explicit(b, memory_order_relaxed);

    if (in_time && v < ceiling)
        atomic_store_explicit(b, v * 2 < ceiling ? v * 2 : ceiling, memory_order_relaxed);
    else if (!in_time && v > SPIN_MIN_NS)
        atomic_store_explicit(b, v / 2 > SPIN_MIN_NS ? v / 2 : SPIN_MIN_NS,
                              memory_order_relaxed);
}

static void wait_phase(step_run *r, atomic_int *done, int units)
{
    uint64_t t0 = 0, budget = atomic_load_explicit(&r->spin_ns, memory_order_relaxed);

    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(done, memory_order_acquire) >= units) {
                if (t0)
                    budget_adapt(&r->spin_ns, 1, SPIN_NS);
                return;
            }
            cpu_relax();
        }
        if (!t0)
            t0 = now_ns();
        else if (now_ns() - t0 > budget)
            break;
    }
    budget_adapt(&r->spin_ns, 0, SPIN_NS);
    pthread_mutex_lock(&r->mu);
    atomic_fetch_add(&r->sleepers, 1);
    while (atomic_load(done) < units)
        pthread_cond_wait(&r->cv, &r->mu);
    atomic_fetch_sub(&r->sleepers, 1);
    pthread_mutex_unlock(&r->mu);
}

static void unit_done(step_run *r, atomic_int *done)
{
    atomic_fetch_add(done, 1);
    if (atomic_load(&r->sleepers) > 0) {
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
}

static int claim(step_run *r, int ph, int u)
{
    int free_ = 0;

    return atomic_load_explicit(&r->claimed[ph][u], memory_order_relaxed) == 0 &&
           atomic_compare_exchange_strong(&r->claimed[ph][u], &free_, 1);
}

/* Whether piece u has begun, after giving it a moment to (once per call:
 * a pool worker takes tens of microseconds to wake, and the whole step
 * would go to this thread if it took the others' units at once). */
static int piece_started(step_run *r, int u, int *waited)
{
    uint64_t t0, budget = atomic_load_explicit(&r->steal_ns, memory_order_relaxed);

    if (atomic_load(&r->started[u]))
        return 1;
    if (*waited)
        return 0;
    *waited = 1;
    t0 = now_ns();
    while (now_ns() - t0 < budget)
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(&r->started[u], memory_order_relaxed)) {
                budget_adapt(&r->steal_ns, 1, STEAL_WAIT_NS);
                return 1;
            }
            cpu_relax();
        }
    budget_adapt(&r->steal_ns, 0, STEAL_WAIT_NS);
    return atomic_load(&r->started[u]);
}

static void step_worker(void *ctx, size_t piece)
{
    fed_model *m = ctx;
    step_run *r = &m->run;
    int S = m->shards, own = (int)(piece % (size_t)S);
    /* with no pool worker the pieces run one after another: never wait */
    int waited = fed_pool_workers(m->pool) == 0;

    atomic_store(&r->started[own], 1);
    for (int ph = 0; ph < r->nphases; ph++) {
        /* our own unit, then those of pieces that have not begun */
        for (int k = 0; k < S; k++) {
            int u = (own + k) % S;

            if ((k == 0 || !piece_started(r, u, &waited)) && claim(r, ph, u)) {
                run_unit(m, ph, u);
                unit_done(r, &r->done[ph]);
            }
        }
        wait_phase(r, &r->done[ph], S);
    }
}

static fed_err check_batch(const fed_model *m, const fed_batch *b, int max)
{
    if (!b || b->n < 1 || b->n > max || (!b->x_u8 == !b->x_f32) || !b->y)
        return FED_ERR_INVAL;
    for (int i = 0; i < b->n; i++)
        if (b->y[i] < 0 || b->y[i] >= m->in.classes)
            return FED_ERR_RANGE;
    return FED_OK;
}

/* Runs b (n <= max_batch) as the phases above; stats summed in unit order. */
static fed_err run_batch(fed_model *m, const fed_batch *b, int train, fed_model_update_fn update,
                         void *update_ctx, fed_step_stats *st)
{
    step_run *r = &m->run;
    int S = m->shards;
    fed_err err = FED_OK;

    r->batch = b;
    r->train = train;
    /* DP-SGD wants each sample's gradient of its own loss */
    r->grad_scale = r->dp ? 1.0f : 1.0f / (float)b->n;
    r->update = update;
    r->update_ctx = update_ctx;
    /* a column split of layer 0 pays when it is linear and shared out */
    r->fwd_phases = m->shards > 1 && m->layers[0].kind == LAYER_LINEAR ? 3 : 1;
    r->bwd0 = r->fwd_phases + (train && r->dp ? m->nlayers : 0);
    r->nphases = r->bwd0 + (train ? m->nlayers : 0);
    for (int u = 0; u < S; u++) {
        r->off[u] = (int)((long)b->n * u / S);
        r->n[u] = (int)((long)b->n * (u + 1) / S) - r->off[u];
        r->err[u] = FED_OK;
    }
    for (int u = 0; u < S; u++)
        atomic_store(&r->started[u], 0);
    for (int ph = 0; ph < r->nphases; ph++) {
        atomic_store(&r->done[ph], 0);
        for (int u = 0; u < S; u++)
            atomic_store(&r->claimed[ph][u], 0);
    }
    if (S == 1)
        step_worker(m, 0);
    else
        fed_pool_parallel_for(m->pool, (size_t)S, step_worker, m);
    for (int u = 0; u < S; u++) {
        if (r->err[u] != FED_OK && err == FED_OK)
            err = r->err[u];
        if (st) {
            st->loss_sum += r->loss[u];
            st->correct += r->correct[u];
        }
    }
    if (st)
        st->samples += b->n;
    r->batch = NULL;
    return err;
}

fed_err fed_model_train_step(fed_model *m, const fed_batch *b, fed_step_stats *st,
                             fed_model_update_fn update, void *ctx)
{
    fed_err err = check_batch(m, b, m->max_batch);

    if (err != FED_OK)
        return err;
    return run_batch(m, b, 1, update, ctx, st);
}

fed_err fed_model_forward_backward(fed_model *m, const fed_batch *b, fed_step_stats *st)
{
    return fed_model_train_step(m, b, st, NULL, NULL);
}

/* At the first DP-SGD step of a model of linear layers: the buffers of the
 * output gradients kept per layer (workspace.dpd). Other models recompute
 * the input gradients in the backward, as a plain step does. */
static fed_err dp_keep_grads(fed_model *m)
{
    fed_err err;

    if (m->ws.dpd_on)
        return FED_OK;
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].kind != LAYER_LINEAR)
            return FED_OK;
    for (int l = 0; l + 1 < m->nlayers; l++)
        if (!m->ws.dpd[l] &&
            (err = dev_alloc(m->be, (size_t)m->max_batch * m->layers[l].out_numel * sizeof(float),
                             &m->ws.dpd[l])) != FED_OK)
            return err;
    m->ws.dpd_on = 1;
    return FED_OK;
}

fed_err fed_model_dp_grads(fed_model *m, const fed_batch *b, float clip, float scale,
                           int accumulate, float *norms, fed_step_stats *st)
{
    step_run *r = &m->run;
    fed_err err;

    if (strcmp(m->be->name, "cpu") != 0 || !m->ws.norm2)
        return FED_ERR_UNSUPPORTED;
    if (!(clip > 0.0f) || !isfinite(clip) || !(scale >= 0.0f) || !isfinite(scale) || !b)
        return FED_ERR_INVAL;
    if (b->n == 0) { /* an empty Poisson draw: nothing to add */
        if (!accumulate)
            m->be->fill(m->be, m->grads, 0.0f, m->nparams);
        return FED_OK;
    }
    if ((err = check_batch(m, b, m->max_batch)) != FED_OK)
        return err;
    if ((err = dp_keep_grads(m)) != FED_OK)
        return err;
    r->dp = 1;
    r->accumulate = accumulate != 0;
    r->dp_clip = clip;
    r->dp_scale = scale;
    err = run_batch(m, b, 1, NULL, NULL, st);
    r->dp = 0;
    r->accumulate = 0;
    if (err == FED_OK && norms)
        for (int i = 0; i < b->n; i++)
            norms[i] = (float)m->ws.norm2[i];
    return err;
}

/* n rows of C logits, floats at the start of p, into their softmax as
 * doubles over the whole of p (n * C). From the last element to the first:
 * double i covers floats 2i and 2i + 1, which are read by then (i >= 1), and
 * float 0 is read before double 0 is written. */
static void softmax_rows(double *p, int n, int C)
{
    const float *z = (const float *)p;

    for (int i = n - 1; i >= 0; i--) {
        const float *row = z + (size_t)i * C;
        double mx = row[0], sum = 0.0;

        for (int c = 1; c < C; c++)
            mx = row[c] > mx ? row[c] : mx;
        for (int c = 0; c < C; c++)
            sum += exp((double)row[c] - mx);
        for (int c = C - 1; c >= 0; c--)
            p[(size_t)i * C + c] = exp((double)row[c] - mx) / sum;
    }
}

fed_err fed_model_predict(fed_model *m, const fed_batch *b, fed_step_stats *st, double *prob)
{
    size_t feat = (size_t)m->in.c * m->in.h * m->in.w;
    int C = m->in.classes;
    fed_err err = check_batch(m, b, b ? b->n : 0);

    if (err != FED_OK)
        return err;
    for (int off = 0; off < b->n && err == FED_OK; off += m->max_batch) {
        fed_batch part = *b;
        double *dst = prob ? prob + (size_t)off * C : NULL;

        part.n = b->n - off < m->max_batch ? b->n - off : m->max_batch;
        part.x_u8 = b->x_u8 ? b->x_u8 + (size_t)off * feat : NULL;
        part.x_f32 = b->x_f32 ? b->x_f32 + (size_t)off * feat : NULL;
        part.y = b->y + off;
        /* evaluation leaves the logits in the last layer's activations */
        if ((err = run_batch(m, &part, 0, NULL, NULL, st)) == FED_OK && dst &&
            (err = m->be->download(m->be, dst, m->ws.act[m->nlayers - 1],
                                   (size_t)part.n * C * sizeof(float))) == FED_OK)
            softmax_rows(dst, part.n, C);
    }
    return err;
}

fed_err fed_model_evaluate(fed_model *m, const fed_batch *b, fed_step_stats *st)
{
    return fed_model_predict(m, b, st, NULL);
}
