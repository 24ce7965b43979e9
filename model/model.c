/* model.c - models as graphs of layer nodes: the presets (logreg, mlp:...,
 * cnn) expand to graphs, a graph is planned through the layer table (one
 * entry per kind: shape plan, forward, input and weight gradients, FLOPs,
 * init, DP-SGD's per-sample norm) into the flat parameter and gradient
 * buffers with their layout table, and the step runs over the backend table
 * as phases of units on the pool whose work is fixed by the shard count
 * alone (never by timing). Allocates only in fed_model_new (and the first
 * DP-SGD step); never prints; never touches the data set; no code outside
 * the layer table branches on a layer's kind. */
#include "model/model.h"

#include <assert.h>
#include <ctype.h>
#include <fnmatch.h>
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
#include "core/opt.h"

#define MLP_MAX_HIDDEN 15 /* the preset's own limit: older nodes refuse more */
#define MAX_MLP_WIDTH 65536
#define MAX_LAYER_NUMEL (1L << 28) /* values of one layer's output per sample */
#define EMBED_MAX_NUM (1L << 20)   /* ids of one embedding (CSV's most hash buckets) */
#define NAME_MAX_LEN (FED_MODEL_NAME_MAX + 1)

typedef struct layer_ops layer_ops;

/* One layer as the step runs it: a node of the graph that computes (a relu
 * after a linear or conv layer is folded into it, a flatten is a view).
 * Shapes are per sample, (c, h, w); a linear layer has h = w = 1. */
typedef struct layer {
    const layer_ops *ops;
    char name[NAME_MAX_LEN];  /* the node's, for messages and tensor names */
    int relu;                 /* fused ReLU on the output */
    int act;                  /* an activation layer's function (ACT_*) */
    int in_c, in_h, in_w;
    int out_c, out_h, out_w;
    int in_numel, out_numel;
    fed_window win;           /* conv and pooling: the window over one input */
    int groups;               /* conv: groups of channels (1: a plain conv) */
    int src, src2;            /* the layers whose outputs it takes (-1: the model's
                                 input; src2: add's second, else -1) */
    unsigned char first_w[2]; /* it writes its input e's gradient first (else adds) */
    unsigned char last_w[2];  /* ... last: that input's relu mask is applied then */
    size_t w_off, b_off;      /* linear (out, in), conv (out_c, in_c, kh, kw); bias (out);
                                 both 0 for a layer without parameters */
    size_t w_numel, b_numel;  /* their sizes; b_numel 0: no bias (bias = 0) */
    int drop_ppm;             /* dropout: its probability in millionths */
    size_t col_numel;         /* conv: (in_c*kh*kw, out_h*out_w) per sample */
    size_t arg_numel;         /* max pooling: argmax entries per sample */
    size_t dgw_numel;         /* DP-SGD: one sample's weight gradient made whole */
    int column;               /* embedding: the input column of its ids */
    int wrows;                /* rows of its weight the gradient phase splits (0: out_c) */
    size_t st_off;            /* batchnorm: running_mean (C), running_var (C),
                                 num_batches_tracked (1), after its weight and bias */
    size_t aux_numel;         /* floats of the layer's own per step (ws.aux; batchnorm:
                                 the batch's mean and variance) */
    float eps, momentum;      /* batchnorm */
    int t_lo, t_hi;           /* its tensors: the plan's [t_lo, t_hi) */
} layer;

/* One node of a graph as a preset (or a model file) states it: its kind,
 * its module name (the PyTorch prefix of its tensors), the node whose
 * output it takes (-1: the model's input) and its settings. */
typedef struct node_desc {
    const layer_ops *ops;
    char name[NAME_MAX_LEN];
    int input;
    int out;                      /* linear: features; conv: channels */
    int kh, kw, sh, sw, ph, pw, dh, dw; /* conv and pooling windows */
    int groups;                   /* conv: 0 or 1 a plain one */
    int other;                    /* add: the node whose output it adds (-1: input) */
    double momentum, eps;         /* batchnorm: 0 its defaults */
    int no_bias;                  /* linear, conv: no bias tensor */
    int column, num;              /* embedding: its ids' column and count */
    int drop_ppm;                 /* dropout: its probability in millionths */
} node_desc;

/* The per-sample input (c, h, w) a node sees, updated to its output. */
typedef struct dims {
    int c, h, w;
} dims;

/* A graph planned into layers and tensors, before any device allocation. */
typedef struct plan {
    const char *spec;
    int classes;            /* a linear layer's out 0 */
    int loss;               /* LOSS_* */
    /* the node being planned: the layers its inputs come from (-1: the
       model's input; other: add's), whether src's output is taken already
       (a relu may fold into it only if not), and add's other shape */
    int cur_src, cur_other, cur_src_taken;
    dims other_dims;
    layer *layers;
    int nlayers, cap_layers;
    fed_tensor_info *tensors;
    int ntensors, cap_tensors;
    size_t nparams;
    /* (features) 1 for a column an embedding reads (its ids), or NULL:
       the graph has no embedding */
    uint8_t *cat;
    int features;
    int stage_lo, stage_hi, stage_of; /* a pipeline stage's slice (plan_stage); 0 0 0 */
    layer *pre;     /* (stage_lo) the layers before the stage, each at offset 0 of its
                       own tensors: what the stage's init draws past */
    size_t pre_max; /* floats of the largest of them */
} plan;


/* One layer kind. plan is the only entry every kind has; a kind that adds
 * no layer (relu folded, flatten) has no other. */
struct layer_ops {
    const char *kind;
    /* Plan node nd (index i) for input *s: add its layer to p (or fold it
     * into the last one) and set *s to its output shape. */
    fed_err (*plan)(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap);
    /* The FED_BACKEND_CAP_* flags layer ly needs. */
    unsigned (*needs)(const layer *ly);
    /* Output of rows [off, off + n) from their input x (n, in_numel). */
    void (*forward)(fed_model *m, int l, const float *x, int off, int n);
    /* Layer 0's forward by output columns for the whole batch of n, unit
     * u's share (the rows of the weights it updates); NULL: not split. */
    void (*forward_cols)(fed_model *m, int u, int n);
    /* dx of rows [off, off + n) from dy (the ReLU masks are the caller's). */
    void (*input_grads)(fed_model *m, int l, int u, const float *dy, float *dx, int off, int n);
    /* add and concat: dx of their second input, rows [off, off + n). */
    void (*input2_grads)(fed_model *m, int l, const float *dy, float *dx, int off, int n);
    /* Weight and bias gradients of output-row chunk u over all n samples;
     * NULL for a layer without parameters. */
    void (*weight_grads)(fed_model *m, int l, int u, const float *dy, int n);
    /* Forward + backward FLOPs of one sample (first: no input gradient). */
    double (*flops)(const layer *ly, int first);
    /* PyTorch's default init of its tensors, drawn from rng in order. */
    void (*init)(const layer *ly, float *host, fed_rng *rng);
    /* DP-SGD: adds each of rows [off, off + n)'s squared norm of its own
     * weight and bias gradient to norm2 (n); x is the layer's input. */
    void (*dp_norm2)(fed_model *m, int l, int u, const float *dy, const float *x, int off, int n,
                     double *norm2);
    /* What it needs of a batch before the step runs (an embedding: ids in
     * range), logged by layer and sample when not; NULL: nothing. */
    fed_err (*check)(const fed_model *m, int l, const fed_batch *b);
    /* Training: statistics over every row of the batch (the n of them) that
     * the forward of any row needs, unit u's share, in a phase of their own
     * once the layer's input is whole; NULL: none. */
    void (*stats)(fed_model *m, int l, int u, int n);
    /* Once a step (or an evaluation), before any unit runs: what every
     * unit's passes read of the layer's weights, made ready (a conv's
     * weights a kernel offset at a time); NULL: nothing. */
    void (*prepare)(fed_model *m, int l);
    /* Why DP-SGD refuses the layer by name (NULL: it does not). */
    const char *dp_refusal;
    /* Its input gradient needs every unit's weight gradients first: a
     * backward phase of its own after theirs. */
    int input_after_weights;
    int act;        /* an activation of its own: ACT_* (0: none) */
    char letter;    /* its node in a "g:" spec (model.h) */
    unsigned opts;  /* the spec's options it takes: OPT_OUT, OPT_K, ... */
    int fuses_relu; /* a relu right after it folds into its output */
    int keep_dy;    /* cheap to keep its output gradient per sample (DP-SGD) */
    int reads_row;  /* takes the model's input row itself, and only it */
    int loss;       /* a loss node, last: the LOSS_* it chooses */
    int ids;        /* its node's column holds ids: a categorical column */
    int random;     /* training draws its masks from the dropout key */
    int batch_stats; /* its training forward reads statistics over the batch
                        (batch norm): --recompute takes it only with .stats,
                        whose phase alone computes them into ws.aux (never a
                        slot) and updates the running ones, so a recomputed
                        forward reads them again and changes no state */
};

static const layer_ops *kind_find(const char *kind);
static const layer_ops *kind_of_letter(char letter);

/* What a node takes in a "g:" spec, besides a name: out, then kernel,
 * stride, padding and dilation as k, s, p, d. */
enum { OPT_OUT = 1, OPT_K = 2, OPT_S = 4, OPT_P = 8, OPT_D = 16, OPT_G = 32, OPT_N = 64,
       OPT_C = 128, OPT_B = 256, OPT_R = 512,
       OPT_EM = 1024 };

/* Activation layers of their own, element-wise, as PyTorch's modules:
 * LeakyReLU (slope 0.01), GELU (exact, erf), SiLU, Sigmoid, Tanh. */
enum { ACT_LEAKY_RELU = 1, ACT_GELU, ACT_SILU, ACT_SIGMOID, ACT_TANH };

/* The loss on the logits: softmax cross-entropy (the backend's), or binary
 * cross-entropy on one logit, as BCEWithLogitsLoss (two classes, label 1
 * the positive; computed on the host), or the mean squared error against
 * float targets, as MSELoss (the mean over every output; on the host). A
 * last "bce" or "mse" node chooses it. */
enum { LOSS_XENT = 0, LOSS_BCE, LOSS_MSE };
#define LEAKY_SLOPE 0.01

#define MAX_SHARDS 64
#define SPIN_NS 300000       /* how long a unit waits for its phase before sleeping */
#define STEAL_WAIT_NS 200000 /* how long a piece may take to start before its units go */
#define SPIN_MIN_NS 2000     /* the least either budget shrinks to */
/* Buffers for the whole batch (max_batch rows); shard u owns rows
 * [off[u], off[u] + n[u]) of each. */
typedef struct workspace {
    uint8_t *x_u8;              /* (max_batch, F) */
    float *x;                   /* (max_batch, F) */
    int32_t *y;                 /* (max_batch) */
    float *t;                   /* (max_batch, nlogits): float targets (mse), or NULL */
    float **act;                /* per layer: (max_batch, out_numel) */
    float **col;                /* per layer, conv: (max_batch, col_numel) */
    int32_t **arg;              /* per layer, max pool: (max_batch, arg_numel) */
    float **g;                  /* per layer but the last: (max_batch, out_numel), the
                                   gradient of its output, from every layer taking it */
    float *gx;                  /* (max_batch, max out_numel): a gradient to be added */
    float *gin;                 /* a pipeline stage after the first: (max_batch, its
                                   input's values), the gradient of its input */
    float *ones;                /* (max_batch) of 1.0: bias gradients as a GEMM */
    float *zeros;               /* (max out_c of a bias-free layer) of 0.0: its bias */
    float *dcol[MAX_SHARDS];    /* (max col_numel) per unit: one image at a time */
    float **wsh;                /* per layer, a conv run as shifted GEMMs (conv_shift_fits):
                                   its weights a kernel offset at a time, (KH KW, out_c,
                                   in_c), laid out once a step (conv_prepare); else NULL */
    /* DP-SGD (CPU only): each sample's squared gradient norm, and per unit a
       layer's weight gradient of one sample, (max dgw_numel) */
    double *norm2;              /* (max_batch), host */
    float *dgw[MAX_SHARDS];
    /* DP-SGD on a model of linear layers only: layer l's output gradient
       (max_batch, out_numel) for l < nlayers - 1, kept from the norm phases
       and scaled row by row there, so the backward needs no second pass of
       input gradients; allocated at the first fed_model_dp_grads (a model
       that never trains with DP-SGD holds none) */
    float **dpd;                /* per layer */
    int dpd_on;
    /* --recompute (fed_model_set_recompute): act, g, col and arg entries
       that point into the position slots below rather than own a buffer
       (bits WS_ACT..WS_ARG per layer), and the slots (ws_slots) */
    uint8_t *borrowed;
    float **slots;              /* (nslots) of at most nlayers * WS_KINDS */
    int nslots;
    size_t act_bytes;           /* what the activation buffers take (the list
                                   at fed_model_activation_bytes) */
    float **aux;                /* per layer: (aux_numel), the layer's own */
} workspace;

/* One phase of a step: what each of its units runs (schedule()). */
typedef struct phase {
    unsigned char what; /* PH_* */
    int l, l2;          /* PH_FWD: layers [l, l2) (their loss when l2 is the last's end);
                           else layer l */
} phase;
enum {
    PH_FWD,    /* the unit's rows through layers [l, l2) (the first also uploads them) */
    PH_COLS,   /* layer 0 by output columns over the whole batch */
    PH_STATS,  /* layer l's batch statistics, the unit's share */
    PH_DP,     /* DP-SGD's per-sample norms of layer l */
    PH_BWD,    /* layer l's weight gradients (output-row chunk), its input gradient
                  (the unit's rows) unless it is PH_BWD_IN's, the updates */
    PH_BWD_IN, /* layer l's input gradient, after every unit's weight gradients */
};
/* run_batch's modes: evaluation, training's forward only, a training step. */
enum { RUN_EVAL, RUN_FORWARD_TRAIN, RUN_TRAIN };

/* The step in flight. Pool piece p runs unit p of every phase, so a unit's
 * rows (its activations, its weight rows, their moments) stay in one core's
 * cache from step to step; a unit whose piece has not started yet (the pool
 * is busy, or slow to wake) is claimed by whoever is free. A unit of phase
 * k starts once every unit of phase k - 1 is done, and a thread waits only
 * for units already claimed, i.e. running: one thread alone, or a pool busy
 * elsewhere, still finishes the step. */
typedef struct step_run {
    const fed_batch *batch;
    int train;       /* forward and backward (else the forward only) */
    int batch_stats; /* batch norm with the batch's statistics (training) */
    phase *sched;    /* (max_phases) the step's phases in order */
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
    /* a pipeline stage (fed_model_stage_*): the gradient of its output
       (n, nlogits) that replaces the loss of a stage before the last, and
       whether the running statistics stay as they are (its forward pass) */
    const float *ext_dy;
    int no_running;
    int off[MAX_SHARDS], n[MAX_SHARDS];
    double loss[MAX_SHARDS];
    int correct[MAX_SHARDS];
    fed_err err[MAX_SHARDS];
    atomic_int started[MAX_SHARDS]; /* pool piece p has begun */
    int max_phases;                      /* 5 * nlayers + 3 */
    atomic_int (*claimed)[MAX_SHARDS];   /* (max_phases) */
    atomic_int *done;                    /* (max_phases) */
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
    int loss;                      /* LOSS_* */
    int nlogits;                   /* per sample: the classes, or 1 (bce) */
    char spec[FED_MODEL_SPEC_MAX]; /* its id (fed_model_spec_id) */
    char *graph;                   /* the whole spec, when longer than its id */
    fed_model_shape in;
    fed_backend *be;
    fed_pool *pool;
    int shards, max_batch;
    int nlayers;
    layer *layers;             /* (nlayers) */
    int ntensors;
    fed_tensor_info *tensors;  /* (ntensors) */
    size_t nparams;
    uint8_t *cat;  /* (features) the columns embeddings read, or NULL (plan.cat) */
    float *params; /* (nparams) device */
    float *grads;  /* (nparams) device */
    size_t bytes;  /* what params, grads and ws hold (fed_model_bytes) */
    workspace ws;
    step_run run;  /* the step in flight */
    uint64_t drop_key, drop_step; /* dropout's masks: fed_model_set_dropout_key, train steps */
    /* --recompute K (fed_model_set_recompute; 1: none): which layers keep
       their output (keep, per layer), and the backward's order (bseq, nbseq
       entries: a layer, or -1 - s for segment s's recomputed forward) */
    int recompute;
    uint8_t *keep;
    int *bseq;
    int nbseq;
    /* --precision: the backend every GEMM runs on (be, or bf16, a view of
       it whose GEMMs round their operands to bf16; owned) */
    fed_backend *gemm_be;
    fed_backend *bf16;
    /* a pipeline stage (fed_model_new_stage): layers [stage_lo, stage_hi)
       of a graph of stage_of layers; stage_of 0: a whole model */
    int stage_lo, stage_hi, stage_of;
    layer *pre;     /* (stage_lo) plan.pre: the layers init draws past */
    size_t pre_max;
};

/* A stage that ends before the graph's last layer: no loss of its own. */
static int stage_mid(const fed_model *m)
{
    return m->stage_of && m->stage_hi < m->stage_of;
}

/* Layer l's input rows: its source layer's output, or the model's input. */
static const float *layer_in(const fed_model *m, int l)
{
    int t = m->layers[l].src;

    return t >= 0 ? m->ws.act[t] : m->ws.x;
}

/* The rows of the batch in flight. */
static int batch_rows(const fed_model *m)
{
    return m->run.off[m->shards - 1] + m->run.n[m->shards - 1];
}

/* -------------------------------------------------------------- plan -- */


static void plan_fini(plan *p)
{
    fed_free(p->pre);
    fed_free(p->layers);
    fed_free(p->tensors);
    fed_free(p->cat);
    memset(p, 0, sizeof *p);
}

/* A new zeroed layer at the end of p, or NULL when out of memory. */
static layer *plan_layer(plan *p, const node_desc *nd)
{
    layer *l;

    if (p->nlayers == p->cap_layers) {
        int cap = p->cap_layers ? 2 * p->cap_layers : 8;
        layer *g = fed_realloc(p->layers, (size_t)cap * sizeof *g);

        if (!g)
            return NULL;
        p->layers = g;
        p->cap_layers = cap;
    }
    l = &p->layers[p->nlayers++];
    memset(l, 0, sizeof *l);
    l->ops = nd->ops;
    snprintf(l->name, sizeof l->name, "%s", nd->name);
    return l;
}

/* Tensor "<node name>.<what>" of shape (ndim) at the end of the flat
 * buffer, trained and shared: *off gets its offset. */
static fed_err plan_tensor(plan *p, const char *node, const char *what, int ndim,
                           const int *shape, size_t *off, char *why, size_t cap)
{
    fed_tensor_info *t;
    size_t numel = 1;

    if (p->ntensors == p->cap_tensors) {
        int n = p->cap_tensors ? 2 * p->cap_tensors : 16;
        fed_tensor_info *g = fed_realloc(p->tensors, (size_t)n * sizeof *g);

        if (!g)
            return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
        p->tensors = g;
        p->cap_tensors = n;
    }
    t = &p->tensors[p->ntensors];
    memset(t, 0, sizeof *t);
    if (snprintf(t->name, sizeof t->name, "%s.%s", node, what) >= (int)sizeof t->name)
        return fed_err_why(why, cap, FED_ERR_SPEC,
                         "model '%s': tensor name '%s.%s' is longer than %zu bytes", p->spec,
                         node, what, sizeof t->name - 1);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        numel *= (size_t)shape[i];
    }
    t->offset = p->nparams;
    t->numel = numel;
    t->flags = FED_TENSOR_TRAINED | FED_TENSOR_SHARED;
    p->nparams += numel;
    p->ntensors++;
    *off = t->offset;
    return FED_OK;
}

/* A shape error naming node i and the shapes so far. */
static fed_err shape_fail(const plan *p, const node_desc *nd, int i, const dims *s, char *why,
                          size_t cap, const char *what)
{
    return fed_err_why(why, cap, FED_ERR_SHAPE,
                       "model '%s': node %d (%s '%s') on input %dx%dx%d: %s",
                     p->spec, i, nd->ops->kind, nd->name, s->c, s->h, s->w, what);
}

/* The window of node nd over input s: stride 0 is 1 (conv) or the kernel
 * (pool), dilation 0 is 1. */
static fed_err plan_window(const plan *p, const node_desc *nd, int i, const dims *s, int pool,
                           fed_window *g, char *why, size_t cap)
{
    long eh, ew;

    g->C = s->c;
    g->H = s->h;
    g->W = s->w;
    g->KH = nd->kh;
    g->KW = nd->kw;
    g->SH = nd->sh ? nd->sh : pool ? nd->kh : 1;
    g->SW = nd->sw ? nd->sw : pool ? nd->kw : 1;
    g->PH = nd->ph;
    g->PW = nd->pw;
    g->DH = nd->dh ? nd->dh : 1;
    g->DW = nd->dw ? nd->dw : 1;
    if (g->KH < 1 || g->KW < 1 || g->SH < 1 || g->SW < 1 || g->PH < 0 || g->PW < 0 ||
        g->DH < 1 || g->DW < 1 || g->KH > 4096 || g->KW > 4096 || g->SH > 4096 ||
        g->SW > 4096 || g->PH > 4096 || g->PW > 4096 || g->DH > 4096 || g->DW > 4096)
        return shape_fail(p, nd, i, s, why, cap,
                          "kernel, stride and dilation must be 1 to 4096, padding 0 to 4096");
    eh = (long)g->H + 2L * g->PH - (long)g->DH * (g->KH - 1) - 1;
    ew = (long)g->W + 2L * g->PW - (long)g->DW * (g->KW - 1) - 1;
    if (eh < 0 || ew < 0)
        return shape_fail(p, nd, i, s, why, cap, "the window is larger than the padded input");
    g->OH = (int)(eh / g->SH + 1);
    g->OW = (int)(ew / g->SW + 1);
    return FED_OK;
}

/* The output (c, h, w) of ly, checked against the per-layer limit. */
static fed_err plan_output(const plan *p, const node_desc *nd, int i, dims *s, layer *ly,
                           int c, int h, int w, char *why, size_t cap)
{
    if ((long)c * h > MAX_LAYER_NUMEL || (long)c * h * w > MAX_LAYER_NUMEL)
        return shape_fail(p, nd, i, s, why, cap, "its output exceeds 2^28 values per sample");
    ly->in_c = s->c;
    ly->in_h = s->h;
    ly->in_w = s->w;
    ly->in_numel = s->c * s->h * s->w;
    ly->out_c = c;
    ly->out_h = h;
    ly->out_w = w;
    ly->out_numel = c * h * w;
    s->c = c;
    s->h = h;
    s->w = w;
    return FED_OK;
}

/* ly's NAME.weight of shape (ndim) and, unless the node says bias = 0, its
 * NAME.bias of out_c (linear and conv). */
static fed_err plan_weight_bias(plan *p, const node_desc *nd, layer *ly, int ndim,
                                const int *wshape, char *why, size_t cap)
{
    fed_err err = plan_tensor(p, nd->name, "weight", ndim, wshape, &ly->w_off, why, cap);

    if (err != FED_OK)
        return err;
    ly->w_numel = p->tensors[p->ntensors - 1].numel;
    if (nd->no_bias)
        return FED_OK;
    ly->b_numel = (size_t)ly->out_c;
    return plan_tensor(p, nd->name, "bias", 1, &ly->out_c, &ly->b_off, why, cap);
}

/* linear: takes its input flattened, (out, in) weights and a bias. */
static fed_err linear_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    layer *ly;
    long in = (long)s->c * s->h * s->w;
    int out = nd->out ? nd->out : p->classes, wshape[2] = {out, (int)in};
    fed_err err;

    if (out < 1 || out > MAX_LAYER_NUMEL)
        return shape_fail(p, nd, i, s, why, cap, "out must be 1 to 2^28");
    if (!(ly = plan_layer(p, nd)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    if ((err = plan_output(p, nd, i, s, ly, out, 1, 1, why, cap)) != FED_OK)
        return err;
    return plan_weight_bias(p, nd, ly, 2, wshape, why, cap);
}

/* conv: (out, c, kh, kw) weights over any window, and a bias. */
static fed_err conv_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    fed_window g;
    layer *ly;
    int G = nd->groups > 0 ? nd->groups : 1;
    int wshape[4] = {nd->out, s->c / G, nd->kh, nd->kw};
    fed_err err;

    if (nd->out < 1 || nd->out > 65536)
        return shape_fail(p, nd, i, s, why, cap, "out must be 1 to 65536 channels");
    if (s->c % G != 0 || nd->out % G != 0)
        return shape_fail(p, nd, i, s, why, cap,
                          "groups must divide both the input's channels and out");
    if ((err = plan_window(p, nd, i, s, 0, &g, why, cap)) != FED_OK)
        return err;
    if ((long)s->c * g.KH * g.KW > MAX_LAYER_NUMEL ||
        (double)s->c * g.KH * g.KW * g.OH * g.OW > (double)MAX_LAYER_NUMEL)
        return shape_fail(p, nd, i, s, why, cap, "its im2col buffer exceeds 2^28 values");
    if (!(ly = plan_layer(p, nd)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    ly->win = g;
    ly->groups = G;
    ly->col_numel = (size_t)s->c * g.KH * g.KW * g.OH * g.OW;
    ly->dgw_numel = (size_t)nd->out * (s->c / G) * g.KH * g.KW;
    if ((err = plan_output(p, nd, i, s, ly, nd->out, g.OH, g.OW, why, cap)) != FED_OK)
        return err;
    return plan_weight_bias(p, nd, ly, 4, wshape, why, cap);
}

/* maxpool and avgpool: channels kept, padding at most half the kernel
 * (PyTorch's rule: no window lies in the padding alone). */
static fed_err pool_plan(plan *p, const node_desc *nd, int i, dims *s, int argmax, char *why,
                         size_t cap)
{
    fed_window g;
    layer *ly;
    fed_err err;

    if (nd->dh > 1 || nd->dw > 1)
        return shape_fail(p, nd, i, s, why, cap, "pooling takes no dilation");
    if ((err = plan_window(p, nd, i, s, 1, &g, why, cap)) != FED_OK)
        return err;
    if (2 * g.PH > g.KH || 2 * g.PW > g.KW)
        return shape_fail(p, nd, i, s, why, cap, "padding must be at most half the kernel");
    if (!(ly = plan_layer(p, nd)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    ly->win = g;
    if ((err = plan_output(p, nd, i, s, ly, s->c, g.OH, g.OW, why, cap)) != FED_OK)
        return err;
    ly->arg_numel = argmax ? (size_t)ly->out_numel : 0;
    return FED_OK;
}

static fed_err maxpool_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    return pool_plan(p, nd, i, s, 1, why, cap);
}

static fed_err avgpool_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    return pool_plan(p, nd, i, s, 0, why, cap);
}

/* global_avgpool: the mean of each channel over the whole map, (c, 1, 1),
 * as nn.AdaptiveAvgPool2d(1): an average pool whose window is the input. */
static fed_err gap_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    node_desc whole = *nd;

    whole.kh = s->h;
    whole.kw = s->w;
    whole.sh = whole.sw = 1;
    whole.ph = whole.pw = 0;
    whole.dh = whole.dw = 0;
    return pool_plan(p, &whole, i, s, 0, why, cap);
}

/* relu: folds into the layer just before it (linear or conv). */
static fed_err relu_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    layer *last = p->cur_src >= 0 && p->cur_src == p->nlayers - 1 ? &p->layers[p->cur_src]
                                                                   : NULL;

    if (!last || !last->ops->fuses_relu || last->relu)
        return shape_fail(p, nd, i, s, why, cap,
                          "a relu must follow a linear, conv, add, layernorm or groupnorm "
                          "layer (a relu of its own is not supported yet)");
    if (p->cur_src_taken)
        return shape_fail(p, nd, i, s, why, cap,
                          "a relu folds into the layer before it, whose output another node "
                          "takes already");
    last->relu = 1;
    return FED_OK;
}

/* An activation of its own: a layer of the input's shape. */
static fed_err act_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    layer *ly = plan_layer(p, nd);

    if (!ly)
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    ly->act = nd->ops->act;
    return plan_output(p, nd, i, s, ly, s->c, s->h, s->w, why, cap);
}

/* add: the input plus another node's output of the same shape (a
 * residual), a relu after it folded in. */
static fed_err add_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    layer *ly;

    if (p->other_dims.c != s->c || p->other_dims.h != s->h || p->other_dims.w != s->w) {
        char what[96];

        snprintf(what, sizeof what, "it adds node %d's output of %dx%dx%d: not the same shape",
                 nd->other, p->other_dims.c, p->other_dims.h, p->other_dims.w);
        return shape_fail(p, nd, i, s, why, cap, what);
    }
    if (!(ly = plan_layer(p, nd)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    return plan_output(p, nd, i, s, ly, s->c, s->h, s->w, why, cap);
}

/* concat: the input's channels, then another node's of the same height
 * and width (torch.cat along the channels). */
static fed_err concat_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    layer *ly;

    if (p->other_dims.h != s->h || p->other_dims.w != s->w) {
        char what[112];

        snprintf(what, sizeof what, "it concatenates node %d's output of %dx%dx%d: not the same "
                 "height and width", nd->other, p->other_dims.c, p->other_dims.h,
                 p->other_dims.w);
        return shape_fail(p, nd, i, s, why, cap, what);
    }
    if ((long)s->c + p->other_dims.c > 65536)
        return shape_fail(p, nd, i, s, why, cap, "its output exceeds 65536 channels");
    if (!(ly = plan_layer(p, nd)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    return plan_output(p, nd, i, s, ly, s->c + p->other_dims.c, s->h, s->w, why, cap);
}

/* bce, mse: the loss, not a layer (it must be the last node). */
static fed_err loss_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    (void)i;
    (void)s;
    (void)why;
    (void)cap;
    p->loss = nd->ops->loss;
    return FED_OK;
}

/* flatten: (c, h, w) -> (c*h*w, 1, 1), a view (nn.Flatten's order). */
static fed_err flatten_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    (void)p;
    (void)nd;
    (void)i;
    (void)why;
    (void)cap;
    s->c = s->c * s->h * s->w;
    s->h = s->w = 1;
    return FED_OK;
}

/* The input's categorical columns: those the graph's embeddings read (a
 * column out of range is the embedding's plan's to refuse). */
static fed_err plan_categorical(plan *p, const node_desc *nodes, int count, fed_model_shape in,
                                char *why, size_t cap)
{
    p->features = in.c * in.h * in.w;
    for (int i = 0; i < count; i++) {
        if (!nodes[i].ops->ids)
            continue;
        if (!p->cat && !(p->cat = fed_calloc((size_t)p->features, 1)))
            return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
        if (nodes[i].column >= 0 && nodes[i].column < p->features)
            p->cat[nodes[i].column] = 1;
    }
    return FED_OK;
}

/* Plans the graph nodes (count) for input in into p. Nodes form a chain
 * today: node i takes node i - 1's output. info (may be NULL) gets each
 * node's output, parameters and FLOPs as far as it got; *planned (may be
 * NULL) how many nodes were planned. */
static void graph_writers(plan *p);
static fed_err graph_end(plan *p, fed_model_shape in, char *why, size_t cap);

static fed_err plan_graph(const node_desc *nodes, int count, fed_model_shape in, plan *p,
                          fed_model_node_info *info, int *planned, char *why, size_t cap)
{
    dims s = {in.c, in.h, in.w};
    fed_err err;
    /* per node: the layer giving its output (-1: the input), its shape, the
       relu state it saw, whether a later node takes it; per layer: taken */
    int *nlay = NULL, *nrelu = NULL, *used = NULL, *taken = NULL;
    dims *ndims = NULL;

    if (planned)
        *planned = 0;
    if (count > FED_MODEL_MAX_NODES)
        return fed_err_why(why, cap, FED_ERR_SPEC, "model '%s': %d nodes, the limit is %d",
                         p->spec, count, FED_MODEL_MAX_NODES);
    if (!(nlay = fed_calloc((size_t)count, sizeof *nlay)) ||
        !(nrelu = fed_calloc((size_t)count, sizeof *nrelu)) ||
        !(used = fed_calloc((size_t)count, sizeof *used)) ||
        !(taken = fed_calloc((size_t)count + 1, sizeof *taken)) ||
        !(ndims = fed_calloc((size_t)count, sizeof *ndims))) {
        err = fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
        goto out;
    }
    if ((err = plan_categorical(p, nodes, count, in, why, cap)) != FED_OK)
        goto out;
    for (int i = 0; i < count; i++) {
        const node_desc *nd = &nodes[i];
        int refs[2] = {nd->input, nd->ops->input2_grads ? nd->other : -2};
        int nl0 = p->nlayers, nt0 = p->ntensors;

        for (int e = 0; e < 2; e++) {
            int j = refs[e];

            if (j == -2)
                continue;
            if (j < -1 || j >= i) {
                err = fed_err_why(why, cap, FED_ERR_SPEC,
                                  "model '%s': node %d (%s '%s') takes node %d's output: a node "
                                  "takes an earlier node's (or -1, the model's input)", p->spec,
                                  i, nd->ops->kind, nd->name, j);
                goto out;
            }
            if (j >= 0 && nlay[j] >= 0 && p->layers[nlay[j]].relu != nrelu[j]) {
                err = fed_err_why(why, cap, FED_ERR_SPEC,
                                  "model '%s': node %d (%s '%s') takes node %d's output, from "
                                  "before the relu folded into its layer", p->spec, i,
                                  nd->ops->kind, nd->name, j);
                goto out;
            }
            if (j >= 0)
                used[j] = 1;
            if (j == -1 && p->cat && !nd->ops->reads_row) {
                err = fed_err_why(why, cap, FED_ERR_SPEC,
                                  "model '%s': node %d (%s '%s') takes the model's input, whose "
                                  "categorical columns hold ids: only embedding and numeric "
                                  "layers take it", p->spec, i, nd->ops->kind, nd->name);
                goto out;
            }
        }
        if (nd->ops->loss && i != count - 1) {
            err = fed_err_why(why, cap, FED_ERR_SPEC,
                              "model '%s': node %d (%s): the loss must be the last node",
                              p->spec, i, nd->ops->kind);
            goto out;
        }
        s = nd->input < 0 ? (dims){in.c, in.h, in.w} : ndims[nd->input];
        p->cur_src = nd->input < 0 ? -1 : nlay[nd->input];
        p->cur_src_taken = p->cur_src >= 0 && taken[p->cur_src];
        p->cur_other = refs[1] < 0 ? -1 : nlay[refs[1]];
        p->other_dims = refs[1] == -2 ? s : refs[1] < 0 ? (dims){in.c, in.h, in.w}
                                                         : ndims[refs[1]];
        if ((err = nd->ops->plan(p, nd, i, &s, why, cap)) != FED_OK)
            goto out;
        if (p->nlayers > nl0) { /* a layer of its own: it takes its inputs' outputs */
            layer *ly = &p->layers[nl0];

            ly->src = p->cur_src;
            ly->src2 = nd->ops->input2_grads ? p->cur_other : -1;
            ly->t_lo = nt0;
            ly->t_hi = p->ntensors;
            if (ly->src >= 0)
                taken[ly->src] = 1;
            if (ly->src2 >= 0)
                taken[ly->src2] = 1;
            nlay[i] = nl0;
        } else {
            nlay[i] = p->cur_src; /* folded (relu), a view (flatten), the loss */
        }
        nrelu[i] = nlay[i] >= 0 ? p->layers[nlay[i]].relu : 0;
        ndims[i] = s;
        if (info) {
            info[i].c = s.c;
            info[i].h = s.h;
            info[i].w = s.w;
            info[i].nparams = info[i].nbuffers = 0;
            for (int t = nt0; t < p->ntensors; t++)
                *(p->tensors[t].flags & FED_TENSOR_TRAINED ? &info[i].nparams
                                                           : &info[i].nbuffers) +=
                    p->tensors[t].numel;
            info[i].flops = p->nlayers > nl0 ? p->layers[nl0].ops->flops(&p->layers[nl0], nl0 == 0)
                                             : 0.0;
        }
        if (planned)
            *planned = i + 1;
    }
    for (int i = 0; i + 1 < count; i++)
        if (!used[i]) {
            err = fed_err_why(why, cap, FED_ERR_SPEC,
                              "model '%s': node %d (%s '%s'): no later node takes its output",
                              p->spec, i, nodes[i].ops->kind, nodes[i].name);
            goto out;
        }
    graph_writers(p);
    err = graph_end(p, in, why, cap);
out:
    fed_free(nlay);
    fed_free(nrelu);
    fed_free(used);
    fed_free(taken);
    fed_free(ndims);
    return err;
}

/* Which layer writes each layer's output gradient first and last: the
 * backward runs from the last layer down, so its highest consumer first. */
static void graph_writers(plan *p)
{
    for (int t = 0; t < p->nlayers; t++) {
        int first = -1, last = -1, fe = 0, le = 0;

        for (int l = p->nlayers - 1; l > t; l--)
            for (int e = 0; e < 2; e++)
                if ((e ? p->layers[l].src2 : p->layers[l].src) == t) {
                    if (first < 0)
                        first = l, fe = e;
                    last = l, le = e;
                }
        if (first >= 0) {
            p->layers[first].first_w[fe] = 1;
            p->layers[last].last_w[le] = 1;
        }
    }
}

/* The checks of a planned graph's end: the logits and the loss, tensor
 * names. */
static fed_err graph_end(plan *p, fed_model_shape in, char *why, size_t cap)
{
    const layer *last;

    last = p->nlayers ? &p->layers[p->nlayers - 1] : NULL;
    if (!last || !last->ops->weight_grads)
        return fed_err_why(why, cap, FED_ERR_SPEC,
                         "model '%s': the last layer must be linear or conv (the logits)",
                         p->spec);
    if (last->relu)
        return fed_err_why(why, cap, FED_ERR_SPEC,
                         "model '%s': a relu on the logits (the last layer) is not supported",
                         p->spec);
    if (p->loss == LOSS_BCE && (last->out_numel != 1 || in.classes != 2))
        return fed_err_why(why, cap, FED_ERR_SHAPE,
                           "model '%s': the loss bce takes one logit and two classes; the last "
                           "layer gives %dx%dx%d values, the data has %d classes", p->spec,
                           last->out_c, last->out_h, last->out_w, in.classes);
    if (p->loss == LOSS_XENT && in.classes < 2)
        return fed_err_why(why, cap, FED_ERR_SHAPE,
                           "model '%s': the loss cross_entropy takes 2 classes or more, the data "
                           "has %d (a number to predict: a model file whose loss is mse)",
                           p->spec, in.classes);
    if (p->loss == LOSS_XENT && last->out_numel != in.classes)
        return fed_err_why(why, cap, FED_ERR_SHAPE,
                         "model '%s': the last layer gives %dx%dx%d values, the loss wants %d "
                         "classes", p->spec, last->out_c, last->out_h, last->out_w, in.classes);
    for (int a = 0; a < p->ntensors; a++)
        for (int b = a + 1; b < p->ntensors; b++)
            if (!strcmp(p->tensors[a].name, p->tensors[b].name))
                return fed_err_why(why, cap, FED_ERR_SPEC,
                                 "model '%s': two tensors are named '%s' (give each layer its "
                                 "own name)", p->spec, p->tensors[a].name);
    return FED_OK;
}

/* ----------------------------------------------------------- presets -- */

/* Node i of a preset: kind, the Sequential index as its name, input i - 1. */
static node_desc *preset_node(node_desc *nodes, int i, const char *kind, int out, int k,
                              int stride)
{
    node_desc *nd = &nodes[i];

    memset(nd, 0, sizeof *nd);
    nd->ops = kind_find(kind);
    snprintf(nd->name, sizeof nd->name, "%d", i);
    nd->input = i - 1;
    nd->out = out;
    nd->kh = nd->kw = k;
    nd->sh = nd->sw = stride;
    nd->dh = nd->dw = 1;
    return nd;
}

/* "256,128": widths in [1, MAX_MLP_WIDTH], at most MLP_MAX_HIDDEN. */
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
            return fed_err_why(why, cap, FED_ERR_SPEC,
                             "model spec '%s': layer %d: expected a width (digits)", spec,
                             *count + 1);
        if (*count >= MLP_MAX_HIDDEN)
            return fed_err_why(why, cap, FED_ERR_SPEC,
                             "model spec '%s': more than %d hidden layers", spec,
                             MLP_MAX_HIDDEN);
        if (v < 1)
            return fed_err_why(why, cap, FED_ERR_SPEC,
                             "model spec '%s': layer %d width %.*s is below the minimum 1", spec,
                             *count + 1, (int)(s - start), start);
        if (v > MAX_MLP_WIDTH)
            return fed_err_why(why, cap, FED_ERR_SPEC,
                             "model spec '%s': layer %d width %.*s exceeds the limit %d", spec,
                             *count + 1, (int)(s - start), start, MAX_MLP_WIDTH);
        widths[(*count)++] = (int)v;
        if (*s == '\0')
            return FED_OK;
        if (*s++ != ',')
            return fed_err_why(why, cap, FED_ERR_SPEC,
                             "model spec '%s': layer %d: '%c' after the width, expected ','",
                             spec, *count, s[-1]);
    }
}

/* "N" or "NxM" at *s (1 to max each; 0 too when zero_ok), moving *s. */
static int spec_pair(const char **s, int *a, int *b, int zero_ok, long max)
{
    long v[2] = {0, 0};
    int got = 0;

    do {
        const char *start = *s;

        while (isdigit((unsigned char)**s) && v[got] <= max)
            v[got] = v[got] * 10 + (*(*s)++ - '0');
        if (*s == start || v[got] > max || (v[got] < 1 && !zero_ok))
            return 0;
        got++;
    } while (got < 2 && **s == 'x' && (*s)++);
    *a = (int)v[0];
    *b = got == 2 ? (int)v[1] : (int)v[0];
    return 1;
}

/* One node of a "g:" spec, from s to its end (',' or NUL); 0 when it is
 * none. */
/* The node of nodes[0, i) that ref (len bytes) names, the latest of that
 * name ("-": -1, the model's input); -2 when none. */
static int spec_ref(const node_desc *nodes, int i, const char *ref, size_t len)
{
    if (len == 1 && ref[0] == '-')
        return -1;
    for (int j = i - 1; j >= 0; j--)
        if (strlen(nodes[j].name) == len && !memcmp(nodes[j].name, ref, len))
            return j;
    return -2;
}

/* batchnorm's options in a "g:" spec, [eEPS][mMOMENTUM] in that order,
 * each a decimal (an eps's exponent may hold an 'e'; no 'm'). */
static int spec_floats(const char *s, const char *end, node_desc *nd)
{
    static const char keys[] = "em";
    double *dst[2] = {&nd->eps, &nd->momentum};

    for (int k = 0; k < 2 && s < end; k++) {
        const char *v;
        char num[32];

        if (*s != keys[k])
            continue;
        v = ++s;
        while (s < end && *s && strchr("0123456789.eE+-", *s))
            s++;
        if (s == v || (size_t)(s - v) >= sizeof num)
            return 0;
        memcpy(num, v, (size_t)(s - v));
        num[s - v] = '\0';
        if (!fed_opt_decimal(num, dst[k]) || !(*dst[k] > 0.0))
            return 0;
    }
    return s == end;
}

static int spec_node(const char *s, const char *end, int i, node_desc *nodes)
{
    node_desc *nd = &nodes[i];
    const char *eq = memchr(s, '=', (size_t)(end - s));
    const char *lt = memchr(s, '<', (size_t)(end - s));
    int one[3] = {0, 0, 0}; /* the second of a single number: groups, num, column */
    int bias = 1, bias2 = 1;
    int *pairs[8][2] = {{&nd->kh, &nd->kw}, {&nd->sh, &nd->sw}, {&nd->ph, &nd->pw},
                        {&nd->dh, &nd->dw}, {&nd->groups, &one[0]}, {&nd->num, &one[1]},
                        {&nd->column, &one[2]}, {&bias, &bias2}};
    unsigned seen = 0;

    memset(nd, 0, sizeof *nd);
    nd->input = i - 1;
    if (lt) { /* "<REF": another input than the node before */
        if ((nd->input = spec_ref(nodes, i, lt + 1, (size_t)(end - lt - 1))) < -1)
            return 0;
        end = lt;
    }
    if (eq && eq > end)
        return 0;
    if (eq) {
        if ((size_t)(eq - s) >= sizeof nd->name)
            return 0;
        memcpy(nd->name, s, (size_t)(eq - s));
        if (!fed_model_name_ok(nd->name))
            return 0;
        s = eq + 1;
    } else {
        snprintf(nd->name, sizeof nd->name, "%d", i);
    }
    if (s == end || !(nd->ops = kind_of_letter(*s++)))
        return 0;
    if (nd->ops->input2_grads) /* add, concat: the other node it takes */
        return (nd->other = spec_ref(nodes, i, s, (size_t)(end - s))) >= -1;
    if (nd->ops->opts & OPT_EM)
        return spec_floats(s, end, nd);
    while ((nd->ops->opts & OPT_OUT) && s < end && isdigit((unsigned char)*s))
        if ((nd->out = nd->out * 10 + (*s++ - '0')) > 65536)
            return 0;
    while (s < end) {
        static const char letters[] = "kspdgncbr";
        const char *at = strchr(letters, *s);
        int k = at && *s ? (int)(at - letters) : -1;

        if (k < 0 || !(nd->ops->opts & (OPT_K << k)) || (seen & (1u << k)))
            return 0;
        seen |= 1u << k;
        s++;
        if (k == 8) { /* r: dropout's millionths, 0 to 999999 */
            long v = 0;
            const char *start = s;

            while (s < end && isdigit((unsigned char)*s) && v < 1000000)
                v = v * 10 + (*s++ - '0');
            if (s == start || v > 999999)
                return 0;
            nd->drop_ppm = (int)v;
            continue;
        }
        if (!spec_pair(&s, pairs[k][0], pairs[k][1], k == 2 || k == 6 || k == 7,
                       k == 5 || k == 6 ? EMBED_MAX_NUM : 65536))
            return 0;
    }
    /* b0: no bias (b1, the default, is never written) */
    if ((seen & (1u << 7)) && (bias != bias2 || bias > 1))
        return 0;
    nd->no_bias = !bias;
    /* conv needs its out and kernel, pooling its kernel, an embedding its
       out, num and column; groups, num and column are one number each */
    if (((seen & (1u << 4)) && one[0] != nd->groups) ||
        ((seen & (1u << 5)) && one[1] != nd->num) || ((seen & (1u << 6)) && one[2] != nd->column))
        return 0;
    if ((nd->ops->opts & OPT_N) && (!(seen & (1u << 5)) || !(seen & (1u << 6)) || nd->out < 1))
        return 0;
    return s == end && (!(nd->ops->opts & OPT_K) || (seen & 1u)) &&
           (!(nd->ops->opts & OPT_K) || !(nd->ops->opts & OPT_OUT) || nd->out > 0);
}

/* A "g:" spec (model.h) into nodes (ncap of them). */
static fed_err graph_spec(const char *spec, node_desc *nodes, int ncap, int *count, char *why,
                          size_t cap)
{
    const char *s = spec + 2;
    int n = 0;

    for (;;) {
        const char *end = strchr(s, ',');

        if (!end)
            end = s + strlen(s);
        if (n == ncap || !spec_node(s, end, n, nodes))
            return fed_err_why(why, cap, FED_ERR_SPEC,
                               "model spec '%.40s%s': node %d '%.*s' is none of NAME=Lout[b0], "
                               "NAME=CoutkK[sS][pP][dD][gG][b0], MkK[sS][pP], AkK[sS][pP], P, R, F, Y, G, S, "
                               "Z, T, B, +REF, &REF, NAME=EdimnNUMcCOL, X, V, UgG, D[rR], "
                               "N[eE][mM], each [<REF]",
                               spec,
                               strlen(spec) > 40 ? "..." : "", n, (int)(end - s), s);
        n++;
        if (!*end)
            break;
        s = end + 1;
    }
    *count = n;
    return FED_OK;
}

/* Appends to spec (cap bytes; *used so far, counted past cap too). */
static void spec_put(char *spec, size_t cap, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void spec_put(char *spec, size_t cap, size_t *used, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(*used < cap ? spec + *used : NULL, *used < cap ? cap - *used : 0, fmt, ap);
    va_end(ap);
    *used += n > 0 ? (size_t)n : 0;
}

static void spec_put_pair(char *spec, size_t cap, size_t *used, char key, const int *v)
{
    if (v[0] == v[1])
        spec_put(spec, cap, used, "%c%d", key, v[0]);
    else
        spec_put(spec, cap, used, "%c%dx%d", key, v[0], v[1]);
}

/* key and v, in the fewest digits (of 15 or 17) that give v back. */
static void spec_put_real(char *spec, size_t cap, size_t *used, char key, double v)
{
    char num[32];

    snprintf(num, sizeof num, "%.15g", v);
    if (strtod(num, NULL) != v)
        snprintf(num, sizeof num, "%.17g", v);
    spec_put(spec, cap, used, "%c%s", key, num);
}

/* Node j as a "g:" spec names it: its name, or its index ("-": the input). */
static void spec_put_ref(char *spec, size_t cap, size_t *used, const fed_model_node *nodes,
                         int j)
{
    if (j < 0)
        spec_put(spec, cap, used, "-");
    else if (nodes[j].name)
        spec_put(spec, cap, used, "%s", nodes[j].name);
    else
        spec_put(spec, cap, used, "%d", j);
}

fed_err fed_model_graph_spec(const fed_model_node *nodes, int count, char *spec, size_t cap)
{
    size_t used = 0;

    if (cap)
        spec[0] = '\0';
    if (count < 1)
        return FED_ERR_INVAL;
    spec_put(spec, cap, &used, "g:");
    for (int i = 0; i < count; i++) {
        const fed_model_node *nd = &nodes[i];
        const layer_ops *ops = nd->kind ? kind_find(nd->kind) : NULL;
        char idx[16];

        if (!ops || (nd->name && !fed_model_name_ok(nd->name)) ||
            (nd->no_bias && !(ops->opts & OPT_B)) || nd->drop_ppm < 0 || nd->drop_ppm > 999999)
            return FED_ERR_SPEC;
        if (nd->input < -1 || nd->input >= i ||
            (ops->input2_grads && (nd->other < -1 || nd->other >= i)))
            return FED_ERR_SPEC;
        snprintf(idx, sizeof idx, "%d", i);
        if (nd->name && strcmp(nd->name, idx) != 0)
            spec_put(spec, cap, &used, "%s=", nd->name);
        spec_put(spec, cap, &used, "%c", ops->letter);
        if (ops->input2_grads)
            spec_put_ref(spec, cap, &used, nodes, nd->other);
        if ((ops->opts & OPT_OUT) && nd->out > 0)
            spec_put(spec, cap, &used, "%d", nd->out);
        if ((ops->opts & OPT_K) && nd->kernel[0] > 0)
            spec_put_pair(spec, cap, &used, 'k', nd->kernel);
        if ((ops->opts & OPT_S) && nd->stride[0] > 0)
            spec_put_pair(spec, cap, &used, 's', nd->stride);
        if ((ops->opts & OPT_P) && (nd->padding[0] > 0 || nd->padding[1] > 0))
            spec_put_pair(spec, cap, &used, 'p', nd->padding);
        if ((ops->opts & OPT_D) && nd->dilation[0] > 0)
            spec_put_pair(spec, cap, &used, 'd', nd->dilation);
        if ((ops->opts & OPT_G) && nd->groups > 1)
            spec_put(spec, cap, &used, "g%d", nd->groups);
        if (ops->opts & OPT_N)
            spec_put(spec, cap, &used, "n%dc%d", nd->num, nd->column);
        if ((ops->opts & OPT_B) && nd->no_bias)
            spec_put(spec, cap, &used, "b0");
        if ((ops->opts & OPT_R) && nd->drop_ppm > 0)
            spec_put(spec, cap, &used, "r%d", nd->drop_ppm);
        if ((ops->opts & OPT_EM) && (!(nd->eps >= 0.0) || !(nd->momentum >= 0.0)))
            return FED_ERR_SPEC;
        if ((ops->opts & OPT_EM) && nd->eps > 0.0)
            spec_put_real(spec, cap, &used, 'e', nd->eps);
        if ((ops->opts & OPT_EM) && nd->momentum > 0.0)
            spec_put_real(spec, cap, &used, 'm', nd->momentum);
        if (nd->input != i - 1) {
            spec_put(spec, cap, &used, "<");
            spec_put_ref(spec, cap, &used, nodes, nd->input);
        }
        if (i + 1 < count)
            spec_put(spec, cap, &used, ",");
    }
    if (used >= cap || used >= FED_MODEL_GRAPH_MAX) {
        if (cap)
            spec[0] = '\0';
        return FED_ERR_TOO_LARGE;
    }
    return FED_OK;
}

/* The graph of a preset spec, as PyTorch's nn.Sequential of the same
 * modules (model.h), or of a "g:" spec: nodes (ncap of them). */
static fed_err preset_graph(const char *spec, fed_model_shape in, node_desc *nodes, int ncap,
                            int *count, char *why, size_t cap)
{
    int n = 0;

    if (!strcmp(spec, "logreg")) {
        preset_node(nodes, n++, "linear", in.classes, 0, 0);
    } else if (!strcmp(spec, "cnn")) {
        /* 0 conv, 1 ReLU, 2 pool, 3 conv, 4 ReLU, 5 pool, 6 Flatten, 7 linear,
         * 8 ReLU, 9 linear */
        if (in.h - 4 < 2 || in.w - 4 < 2 || (in.h - 4) / 2 - 4 < 2 || (in.w - 4) / 2 - 4 < 2)
            return fed_err_why(why, cap, FED_ERR_SHAPE,
                             "model spec 'cnn': input %dx%d is too small for its two 5x5 "
                             "convolutions and 2x2 pools", in.h, in.w);
        preset_node(nodes, n++, "conv", 32, 5, 1);
        preset_node(nodes, n++, "relu", 0, 0, 0);
        preset_node(nodes, n++, "maxpool", 0, 2, 2);
        preset_node(nodes, n++, "conv", 64, 5, 1);
        preset_node(nodes, n++, "relu", 0, 0, 0);
        preset_node(nodes, n++, "maxpool", 0, 2, 2);
        preset_node(nodes, n++, "flatten", 0, 0, 0);
        preset_node(nodes, n++, "linear", 512, 0, 0);
        preset_node(nodes, n++, "relu", 0, 0, 0);
        preset_node(nodes, n++, "linear", in.classes, 0, 0);
    } else if (!strncmp(spec, "g:", 2)) {
        return graph_spec(spec, nodes, ncap, count, why, cap);
    } else if (!strncmp(spec, "mlp:", 4)) {
        int widths[MLP_MAX_HIDDEN], hidden;
        fed_err err = parse_widths(spec, spec + 4, widths, &hidden, why, cap);

        if (err != FED_OK)
            return err;
        for (int i = 0; i < hidden; i++) {
            preset_node(nodes, n++, "linear", widths[i], 0, 0);
            preset_node(nodes, n++, "relu", 0, 0, 0);
        }
        preset_node(nodes, n++, "linear", in.classes, 0, 0);
    } else {
        return fed_err_why(why, cap, FED_ERR_SPEC,
                         "model spec '%s' is none of logreg, mlp:W1,W2,... or cnn", spec);
    }
    *count = n;
    return FED_OK;
}

/* An empty plan p for a model named label on input in, both checked. */
static fed_err plan_start(const char *label, fed_model_shape in, plan *p, char *why, size_t cap)
{
    memset(p, 0, sizeof *p);
    p->spec = label;
    p->classes = in.classes;
    if (why && cap)
        why[0] = '\0';
    if (!label)
        return fed_err_why(why, cap, FED_ERR_SPEC, "no model spec");
    if (strlen(label) >= FED_MODEL_SPEC_MAX)
        return fed_err_why(why, cap, FED_ERR_SPEC,
                         "model spec '%.40s...' is %zu bytes, the limit is %d", label,
                         strlen(label), FED_MODEL_SPEC_MAX - 1);
    /* (c x h first: with it at most 2^24, times w cannot overflow) */
    if (in.c < 1 || in.h < 1 || in.w < 1 || in.classes < 1 || in.classes > 65536 ||
        (long)in.c * in.h > (1L << 24) || (long)in.c * in.h * in.w > (1L << 24))
        return fed_err_why(why, cap, FED_ERR_SHAPE,
                         "model spec '%s': input %dx%dx%d with %d classes is outside the limits "
                         "(at most %ld values, 1 to 65536 classes)", label, in.c, in.h, in.w,
                         in.classes, 1L << 24);
    return FED_OK;
}

/* The plan of a spec, named by its id (id_buf holds it for the plan's
 * life); why (cap bytes; may be NULL) gets what was wrong on failure. p is
 * to be released with plan_fini either way. */
static fed_err make_plan(const char *spec, fed_model_shape in, plan *p,
                         char id_buf[FED_MODEL_SPEC_MAX], char *why, size_t cap)
{
    node_desc *nodes = NULL;
    size_t len = spec ? strnlen(spec, FED_MODEL_GRAPH_MAX) : 0;
    int count = 0, ncap;
    fed_err err;

    memset(p, 0, sizeof *p);
    if (spec && strncmp(spec, "g#", 2) == 0)
        return fed_err_why(why, cap, FED_ERR_SPEC,
                           "model '%.40s' names a graph by its hash: the graph itself is needed "
                           "(the MODEL's graph field, a checkpoint's, or --model FILE)", spec);
    if (spec && strncmp(spec, "g:", 2) == 0 && len == FED_MODEL_GRAPH_MAX)
        return fed_err_why(why, cap, FED_ERR_SPEC, "model graph '%.40s...' is %d bytes or more, "
                           "the limit is %d", spec, FED_MODEL_GRAPH_MAX, FED_MODEL_GRAPH_MAX - 1);
    if (spec)
        fed_model_spec_id(spec, id_buf);
    if ((err = plan_start(spec ? id_buf : NULL, in, p, why, cap)) != FED_OK)
        return err;
    /* a "g:" node takes 2 bytes at least; a preset at most 2 per width */
    ncap = (int)(len / 2 + 2) > 2 * MLP_MAX_HIDDEN + 2 ? (int)(len / 2 + 2)
                                                       : 2 * MLP_MAX_HIDDEN + 2;
    if (!(nodes = fed_calloc((size_t)ncap, sizeof *nodes)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    if ((err = preset_graph(spec, in, nodes, ncap, &count, why, cap)) == FED_OK)
        err = plan_graph(nodes, count, in, p, NULL, NULL, why, cap);
    fed_free(nodes);
    return err;
}

/* FNV-1a, 64 bits, from basis: two bases give the id's 128 bits. */
static uint64_t spec_fnv(const char *s, size_t len, uint64_t basis)
{
    uint64_t h = basis;

    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
    return h;
}

void fed_model_spec_hash(const char *spec, char hash[FED_MODEL_HASH_CHARS])
{
    size_t len = strnlen(spec, FED_MODEL_GRAPH_MAX);

    snprintf(hash, FED_MODEL_HASH_CHARS, "g#%016llx%016llx",
             (unsigned long long)spec_fnv(spec, len, 0xcbf29ce484222325ULL),
             (unsigned long long)spec_fnv(spec, len, 0x84222325cbf29ce4ULL));
}

void fed_model_spec_id(const char *spec, char id[FED_MODEL_SPEC_MAX])
{
    size_t len = strnlen(spec, FED_MODEL_GRAPH_MAX);

    if (len < FED_MODEL_SPEC_MAX)
        memcpy(id, spec, len + 1);
    else
        fed_model_spec_hash(spec, id);
}

int fed_model_name_ok(const char *name)
{
    size_t len = strlen(name);

    if (len < 1 || len > FED_MODEL_NAME_MAX || name[0] == '.' || name[len - 1] == '.')
        return 0;
    for (size_t k = 0; k < len; k++)
        if (!isalnum((unsigned char)name[k]) && name[k] != '_' && name[k] != '.')
            return 0;
    return 1;
}

/* A fed_model_node as node_desc nd (index i): its kind found, its name
 * checked (letters, digits, '_' and inner '.'; the index when NULL). */
static fed_err graph_node(const char *label, const fed_model_node *gn, int i, node_desc *nd,
                          char *why, size_t cap)
{
    const char *name = gn->name;

    memset(nd, 0, sizeof *nd);
    if (!gn->kind || !(nd->ops = kind_find(gn->kind)))
        return fed_err_why(why, cap, FED_ERR_SPEC,
                         "model '%s': node %d: unknown layer kind '%s' (linear, conv, maxpool, "
                         "avgpool, global_avgpool, relu, flatten, leaky_relu, gelu, silu, "
                         "sigmoid, tanh, bce, add, concat, embedding, numeric, layernorm, "
                         "groupnorm, dropout, batchnorm)",
                         label, i, gn->kind ? gn->kind : "(none)");
    if (name) {
        if (!fed_model_name_ok(name))
            return fed_err_why(why, cap, FED_ERR_SPEC,
                               "model '%s': node %d (%s): name '%s' must be 1 to %d letters, "
                               "digits, '_' or inner '.'", label, i, gn->kind, name,
                               FED_MODEL_NAME_MAX);
        memcpy(nd->name, name, strlen(name) + 1);
    } else {
        snprintf(nd->name, sizeof nd->name, "%d", i);
    }
    nd->input = gn->input;
    nd->out = gn->out;
    nd->kh = gn->kernel[0];
    nd->kw = gn->kernel[1];
    nd->sh = gn->stride[0];
    nd->sw = gn->stride[1];
    nd->ph = gn->padding[0];
    nd->pw = gn->padding[1];
    nd->dh = gn->dilation[0];
    nd->dw = gn->dilation[1];
    nd->groups = gn->groups;
    nd->other = gn->other;
    nd->momentum = gn->momentum;
    nd->eps = gn->eps;
    nd->no_bias = gn->no_bias != 0;
    nd->drop_ppm = gn->drop_ppm;
    if (nd->no_bias && !(nd->ops->opts & OPT_B))
        return fed_err_why(why, cap, FED_ERR_SPEC,
                           "model '%s': node %d (%s '%s'): only linear and conv take bias = 0",
                           label, i, gn->kind, nd->name);
    nd->column = gn->column;
    nd->num = gn->num;
    if (nd->sh < 0 || nd->sw < 0 || nd->dh < 0 || nd->dw < 0 || nd->groups < 0)
        return fed_err_why(why, cap, FED_ERR_SPEC,
                         "model '%s': node %d (%s '%s'): a negative stride or dilation", label,
                         i, gn->kind, nd->name);
    return FED_OK;
}

/* The plan of a graph (label names it in messages), as make_plan. */
static fed_err make_graph_plan(const char *label, const fed_model_node *gnodes, int count,
                               fed_model_shape in, plan *p, fed_model_node_info *info,
                               int *planned, char *why, size_t cap)
{
    node_desc *nodes = NULL;
    fed_err err;

    if ((err = plan_start(label, in, p, why, cap)) != FED_OK)
        return err;
    if (!gnodes || count < 1 || count > FED_MODEL_MAX_NODES)
        return fed_err_why(why, cap, FED_ERR_SPEC, "model '%s': %d nodes, it takes 1 to %d",
                         label, count, FED_MODEL_MAX_NODES);
    if (!(nodes = fed_calloc((size_t)count, sizeof *nodes)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    for (int i = 0; i < count; i++)
        if ((err = graph_node(label, &gnodes[i], i, &nodes[i], why, cap)) != FED_OK)
            goto out;
    err = plan_graph(nodes, count, in, p, info, planned, why, cap);
out:
    fed_free(nodes);
    return err;
}

fed_err fed_model_graph_explain(const char *label, const fed_model_node *nodes, int count,
                                fed_model_shape in, size_t *nparams, char *why, size_t cap)
{
    plan p;
    fed_err err = make_graph_plan(label, nodes, count, in, &p, NULL, NULL, why, cap);

    if (nparams)
        *nparams = err == FED_OK ? p.nparams : 0;
    plan_fini(&p);
    return err;
}

fed_err fed_model_graph_shapes(const char *label, const fed_model_node *nodes, int count,
                               fed_model_shape in, fed_model_node_info *info, int *planned,
                               char *why, size_t cap)
{
    plan p;
    fed_err err = make_graph_plan(label, nodes, count, in, &p, info, planned, why, cap);

    plan_fini(&p);
    return err;
}

fed_err fed_model_spec_nodes(const char *spec, fed_model_shape in, fed_model_node **out,
                            int *count, char *why, size_t cap)
{
    size_t len = spec ? strnlen(spec, FED_MODEL_GRAPH_MAX) : 0;
    node_desc *nodes = NULL;
    fed_model_node *g = NULL;
    int n = 0, ncap;
    fed_err err;

    *out = NULL;
    *count = 0;
    if (!spec || !strncmp(spec, "g#", 2) || len == FED_MODEL_GRAPH_MAX)
        return fed_err_why(why, cap, FED_ERR_SPEC, "model '%.40s': no whole spec to read nodes "
                           "from", spec ? spec : "(none)");
    /* as make_plan: a "g:" node takes 2 bytes at least */
    ncap = (int)(len / 2 + 2) > 2 * MLP_MAX_HIDDEN + 2 ? (int)(len / 2 + 2)
                                                       : 2 * MLP_MAX_HIDDEN + 2;
    if (!(nodes = fed_calloc((size_t)ncap, sizeof *nodes)))
        return FED_ERR_NOMEM;
    if ((err = preset_graph(spec, in, nodes, ncap, &n, why, cap)) != FED_OK)
        goto out;
    /* the nodes, then their names, in one block */
    if (!(g = fed_calloc((size_t)n, sizeof *g + NAME_MAX_LEN))) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const node_desc *nd = &nodes[i];
        char *name = (char *)(g + n) + (size_t)i * NAME_MAX_LEN;

        memcpy(name, nd->name, NAME_MAX_LEN);
        g[i] = (fed_model_node){.kind = nd->ops->kind, .name = name, .input = nd->input,
                                .out = nd->out, .kernel = {nd->kh, nd->kw},
                                .stride = {nd->sh, nd->sw}, .padding = {nd->ph, nd->pw},
                                .dilation = {nd->dh, nd->dw}, .groups = nd->groups,
                                .other = nd->other, .no_bias = nd->no_bias,
                                .column = nd->column, .num = nd->num,
                                .drop_ppm = nd->drop_ppm};
    }
    *out = g;
    *count = n;
out:
    fed_free(nodes);
    return err;
}

static fed_err spec_nparams(const char *spec, fed_model_shape in, size_t *nparams, char *why,
                            size_t cap)
{
    plan p;
    char id[FED_MODEL_SPEC_MAX];
    fed_err err = make_plan(spec, in, &p, id, why, cap);

    *nparams = err == FED_OK ? p.nparams : 0;
    plan_fini(&p);
    return err;
}

fed_err fed_model_spec_cost(const char *spec, fed_model_shape in, size_t *nparams,
                            double *flops, char *why, size_t cap)
{
    plan p;
    char id[FED_MODEL_SPEC_MAX];
    fed_err err = make_plan(spec, in, &p, id, why, cap);

    *nparams = 0;
    *flops = 0.0;
    if (err == FED_OK) {
        *nparams = p.nparams;
        for (int l = 0; l < p.nlayers; l++)
            *flops += p.layers[l].ops->flops(&p.layers[l], l == 0);
    }
    plan_fini(&p);
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

static int conv_shift_fits(const fed_model *m, const layer *ly);

/* bytes on m's backend, counted in m->bytes (fed_model_bytes). */
static fed_err dev_alloc(fed_model *m, size_t bytes, void *dptr)
{
    fed_err e = m->be->alloc(m->be, bytes, (void **)dptr);

    if (e == FED_OK)
        m->bytes += bytes;
    return e;
}

static void dev_free(fed_backend *be, void *p)
{
    if (p)
        be->free(be, p);
}

/* ---- the activation buffers under --recompute ---- */

/* The buffers a layer has per batch: its output, its output's gradient,
 * its im2col (a conv's, a norm's statistics) and max pooling's argmax. */
enum { WS_ACT, WS_G, WS_COL, WS_ARG, WS_KINDS };

/* Whether layer l's buffer of kind k is one of the shared position slots
 * (the model recomputes, and the layer does not keep that output). */
static int ws_borrows(const fed_model *m, int l, int k)
{
    return m->ws.borrowed && (m->ws.borrowed[l] >> k & 1);
}

/* dev_alloc of an activation buffer, counted in ws.act_bytes. */
static fed_err ws_alloc(fed_model *m, size_t bytes, void *dptr)
{
    fed_err e = dev_alloc(m, bytes, dptr);

    if (e == FED_OK)
        m->ws.act_bytes += bytes;
    return e;
}

/* What each layer buffer of kind k takes per sample, in bytes (0: none). */
static size_t ws_per_sample(const fed_model *m, int l, int k)
{
    const layer *ly = &m->layers[l];

    switch (k) {
    case WS_ACT: return (size_t)ly->out_numel * sizeof(float);
    case WS_G: return l + 1 < m->nlayers ? (size_t)ly->out_numel * sizeof(float) : 0;
    case WS_COL: return ly->col_numel * sizeof(float);
    default: return ly->arg_numel * sizeof(int32_t);
    }
}

/* Under --recompute K, layer l at position j = l mod K of its segment
 * borrows slot j of each kind it has: its output and output gradient
 * unless it keeps them (m->keep), its im2col and argmax always (the
 * recomputed forward makes them again). Marks them in ws.borrowed. */
static fed_err ws_mark_borrowed(fed_model *m)
{
    if (m->recompute <= 1)
        return FED_OK;
    if (!(m->ws.borrowed = fed_calloc((size_t)m->nlayers, 1)))
        return FED_ERR_NOMEM;
    for (int l = 0; l < m->nlayers; l++)
        for (int k = 0; k < WS_KINDS; k++)
            if (ws_per_sample(m, l, k) && ((k != WS_ACT && k != WS_G) || !m->keep[l]))
                m->ws.borrowed[l] |= (uint8_t)(1u << k);
    return FED_OK;
}

/* ws.borrowed's bit past the kinds: layer l shares an im2col or argmax
 * slot with a layer of another size per sample, so no forward phase may
 * hold both (schedule() cuts before it). */
#define WS_MIXED WS_KINDS

/* Whether the forward must start a phase at layer l when the open one
 * began at layer from: l shares a slot with a layer of another size, and
 * one at its position (l - K, l - 2 K, ...) may be in the phase. */
static int ws_cut_before(const fed_model *m, int l, int from)
{
    return m->ws.borrowed && (m->ws.borrowed[l] >> WS_MIXED & 1) && from <= l - m->recompute;
}

/* Whether layers a and b at one position share their slot of kind k: an
 * output only when of one size per sample. A shard's rows [off, off + n)
 * lie at different bytes for layers of different sizes, so a shard running
 * ahead to one would write the rows another shard still reads of the
 * other. Outputs are read by the layers after theirs in the same forward
 * phase, but im2col and argmax by their own layer only (and the weight
 * gradients), so for them a phase cut between the two layers is enough
 * (WS_MIXED); output gradients live in the backward, a phase per layer. */
static int ws_same_slot(const fed_model *m, int a, int b, int k)
{
    return k != WS_ACT || ws_per_sample(m, a, k) == ws_per_sample(m, b, k);
}

/* The slots: one for each position and kind (outputs: and size per
 * sample), as large per sample as its largest borrower. */
static fed_err ws_slots(fed_model *m, size_t cap)
{
    workspace *w = &m->ws;
    int K = m->recompute;

    if (K <= 1)
        return FED_OK;
    if (!(w->slots = fed_calloc((size_t)m->nlayers * WS_KINDS, sizeof *w->slots)))
        return FED_ERR_NOMEM;
    for (int j = 0; j < K; j++)
        for (int k = 0; k < WS_KINDS; k++)
            for (int first = j; first < m->nlayers; first += K) {
                size_t size = 0, min = SIZE_MAX;
                float **slot = &w->slots[w->nslots];
                fed_err err;
                int taken = 0;

                for (int l = j; l < first && !taken; l += K)
                    taken = ws_borrows(m, l, k) && ws_same_slot(m, l, first, k);
                if (taken || !ws_borrows(m, first, k))
                    continue; /* its slot is made, or it owns its buffer */
                for (int l = first; l < m->nlayers; l += K)
                    if (ws_borrows(m, l, k) && ws_same_slot(m, l, first, k)) {
                        size_t b = ws_per_sample(m, l, k);

                        size = b > size ? b : size;
                        min = b < min ? b : min;
                    }
                if ((err = ws_alloc(m, cap * size, slot)) != FED_OK)
                    return err;
                w->nslots++;
                for (int l = first; l < m->nlayers; l += K) {
                    if (!ws_borrows(m, l, k) || !ws_same_slot(m, l, first, k))
                        continue;
                    if (min < size && k != WS_G)
                        w->borrowed[l] |= 1u << WS_MIXED;
                    if (k == WS_ACT)
                        w->act[l] = *slot;
                    else if (k == WS_G)
                        w->g[l] = *slot;
                    else if (k == WS_COL)
                        w->col[l] = *slot;
                    else
                        w->arg[l] = (int32_t *)(void *)*slot;
                }
            }
    return FED_OK;
}

static void ws_fini(fed_model *m, workspace *w)
{
    fed_backend *be = m->be;

    dev_free(be, w->x_u8);
    dev_free(be, w->x);
    dev_free(be, w->y);
    dev_free(be, w->t);
    for (int l = 0; l < m->nlayers; l++) {
        if (w->act && !ws_borrows(m, l, WS_ACT))
            dev_free(be, w->act[l]);
        if (w->col && !ws_borrows(m, l, WS_COL))
            dev_free(be, w->col[l]);
        if (w->arg && !ws_borrows(m, l, WS_ARG))
            dev_free(be, w->arg[l]);
        if (w->aux)
            dev_free(be, w->aux[l]);
        if (w->wsh)
            dev_free(be, w->wsh[l]);
    }
    fed_free(w->aux);
    fed_free(w->wsh);
    fed_free(w->act);
    fed_free(w->col);
    fed_free(w->arg);
    fed_free(w->dpd);
    for (int l = 0; w->g && l < m->nlayers; l++)
        if (!ws_borrows(m, l, WS_G))
            dev_free(be, w->g[l]);
    fed_free(w->g);
    for (int k = 0; k < w->nslots; k++)
        dev_free(be, w->slots[k]);
    fed_free(w->slots);
    fed_free(w->borrowed);
    dev_free(be, w->gx);
    dev_free(be, w->gin);
    dev_free(be, w->ones);
    dev_free(be, w->zeros);
    for (int u = 0; u < MAX_SHARDS; u++) {
        dev_free(be, w->dcol[u]);
        dev_free(be, w->dgw[u]);
    }
    fed_free(w->norm2);
}

static fed_err ws_init(fed_model *m, workspace *w)
{
    fed_backend *be = m->be;
    size_t cap = (size_t)m->max_batch, feat = (size_t)m->in.c * m->in.h * m->in.w;
    size_t maxout = 0, maxcol = 0, maxzero = 0, L = (size_t)m->nlayers;
    fed_err err;

    if ((err = ws_mark_borrowed(m)) != FED_OK)
        return err;
    if (!(w->act = fed_calloc(L, sizeof *w->act)) || !(w->col = fed_calloc(L, sizeof *w->col)) ||
        !(w->arg = fed_calloc(L, sizeof *w->arg)) || !(w->dpd = fed_calloc(L, sizeof *w->dpd)) ||
        !(w->aux = fed_calloc(L, sizeof *w->aux)))
        return FED_ERR_NOMEM;
    if ((err = dev_alloc(m, cap * feat, &w->x_u8)) ||
        (err = dev_alloc(m, cap * feat * sizeof(float), &w->x)) ||
        (err = dev_alloc(m, cap * sizeof(int32_t), &w->y)) ||
        (err = dev_alloc(m, cap * sizeof(float), &w->ones)) ||
        (m->loss == LOSS_MSE &&
         (err = dev_alloc(m, cap * (size_t)m->nlogits * sizeof(float), &w->t))))
        return err;
    be->fill(be, w->ones, 1.0f, cap);
    for (int l = 0; l < m->nlayers; l++) {
        const layer *ly = &m->layers[l];

        if ((size_t)ly->out_numel > maxout)
            maxout = (size_t)ly->out_numel;
        if (ly->col_numel > maxcol)
            maxcol = ly->col_numel;
        if (ly->w_numel && !ly->b_numel && (size_t)ly->out_c > maxzero)
            maxzero = (size_t)ly->out_c;
        for (int k = 0; k < WS_KINDS; k++) {
            void *dst = k == WS_ACT ? (void *)&w->act[l] : k == WS_COL ? (void *)&w->col[l]
                      : (void *)&w->arg[l];

            if (k != WS_G && ws_per_sample(m, l, k) && !ws_borrows(m, l, k) &&
                (err = ws_alloc(m, cap * ws_per_sample(m, l, k), dst)))
                return err;
        }
        if (ly->aux_numel && (err = dev_alloc(m, ly->aux_numel * sizeof(float), &w->aux[l])))
            return err;
        if (conv_shift_fits(m, ly) &&
            ((!w->wsh && !(w->wsh = fed_calloc(L, sizeof *w->wsh))) ||
             (err = dev_alloc(m, ly->w_numel * sizeof(float), &w->wsh[l]))))
            return err ? err : FED_ERR_NOMEM;
    }
    for (int u = 0; maxcol && u < m->shards; u++)
        if ((err = ws_alloc(m, maxcol * sizeof(float), &w->dcol[u])))
            return err;
    if (maxzero && (err = dev_alloc(m, maxzero * sizeof(float), &w->zeros))) /* zeroed */
        return err;
    if (be->caps & FED_BACKEND_CAP_DP_SGD) { /* DP-SGD's buffers */
        size_t maxgw = 0;

        if (!(w->norm2 = fed_calloc(cap, sizeof *w->norm2)))
            return FED_ERR_NOMEM;
        m->bytes += cap * sizeof *w->norm2;
        for (int l = 0; l < m->nlayers; l++)
            if (m->layers[l].dgw_numel > maxgw)
                maxgw = m->layers[l].dgw_numel;
        for (int u = 0; maxgw && u < m->shards; u++)
            if ((err = dev_alloc(m, maxgw * sizeof(float), &w->dgw[u])))
                return err;
    }
    if (!(w->g = fed_calloc(L, sizeof *w->g)))
        return FED_ERR_NOMEM;
    for (int l = 0; l + 1 < m->nlayers; l++)
        if (!ws_borrows(m, l, WS_G) &&
            (err = ws_alloc(m, cap * m->layers[l].out_numel * sizeof(float), &w->g[l])))
            return err;
    if (m->stage_lo > 0) { /* the input's gradient, which the layers reading it add up */
        if (feat > maxout)
            maxout = feat;
        if ((err = ws_alloc(m, cap * feat * sizeof(float), &w->gin)))
            return err;
    }
    if ((err = ws_alloc(m, cap * maxout * sizeof(float), &w->gx)))
        return err;
    return ws_slots(m, cap);
}

/* Whether a backend of caps, named name, can run every layer of p: else
 * FED_ERR_UNSUPPORTED with the first it cannot run named in why. */
static fed_err plan_fits(const plan *p, unsigned caps, const char *name, char *why, size_t cap)
{
    for (int l = 0; l < p->nlayers; l++) { /* the layers first: a layer names more */
        const layer *ly = &p->layers[l];
        unsigned need = ly->ops->needs ? ly->ops->needs(ly) : 0;

        if (need & ~caps) {
            snprintf(why, cap, "layer '%s' (%s) needs kernels the %s backend lacks", ly->name,
                     ly->ops->kind, name);
            return FED_ERR_UNSUPPORTED;
        }
    }
    if (p->loss != LOSS_XENT && !(caps & FED_BACKEND_CAP_HOST_MEMORY)) {
        snprintf(why, cap, "the loss %s is computed on the host, which the %s backend's memory "
                 "is not", p->loss == LOSS_BCE ? "bce" : "mse", name);
        return FED_ERR_UNSUPPORTED;
    }
    return FED_OK;
}

/* Whether be can run every layer of p: else logs the first it cannot. */
static fed_err backend_fits(const plan *p, const fed_backend *be)
{
    char why[256];
    fed_err err = plan_fits(p, be->caps, be->name, why, sizeof why);

    if (err != FED_OK)
        fed_log(FED_LOG_ERROR, "model: %s", why);
    return err;
}

fed_err fed_model_spec_fits(const char *spec, fed_model_shape in, unsigned caps,
                            const char *backend, char *why, size_t cap)
{
    plan p;
    char id[FED_MODEL_SPEC_MAX];
    fed_err err = make_plan(spec, in, &p, id, why, cap);

    if (err == FED_OK)
        err = plan_fits(&p, caps, backend, why, cap);
    plan_fini(&p);
    return err;
}

fed_err fed_model_backend_settle(const char *device, const char *spec, fed_model_shape in,
                                 fed_backend **be)
{
    char why[256];
    fed_backend *cpu = NULL;
    fed_err err;

    assert(be && *be && spec);
    err = fed_model_spec_fits(spec, in, (*be)->caps, (*be)->name, why, sizeof why);
    if (err != FED_ERR_UNSUPPORTED) /* fits, or a spec error fed_model_new reports */
        return FED_OK;
    if (!fed_backend_device_auto(device)) {
        fed_log(FED_LOG_ERROR, "model: %s (--device %s; --device auto runs it on the CPU)",
                why, device);
        return err;
    }
    if ((err = fed_backend_cpu_new(1, &cpu)) != FED_OK)
        return err;
    fed_log(FED_LOG_WARN, "model: %s: --device auto runs the model on the CPU (%s)", why,
            cpu->device);
    fed_backend_free(*be);
    *be = cpu;
    return FED_OK;
}

/* The model of plan p (its layers and tensors taken over, p emptied). */
static fed_err model_build(plan *p, fed_model_shape in, fed_backend *be, fed_pool *pool,
                           int shards, int max_batch, fed_model **out)
{
    fed_model *m = NULL;
    fed_err err;

    if (in.scale != FED_MODEL_INPUT_CENTRED && in.scale != FED_MODEL_INPUT_UNIT) {
        fed_log(FED_LOG_ERROR, "model: input scale %d: centred (0) or unit (1)", in.scale);
        err = FED_ERR_SHAPE;
        goto out;
    }
    if ((err = backend_fits(p, be)) != FED_OK)
        goto out;
    if (!(be->caps & FED_BACKEND_CAP_SHARDS))
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
    snprintf(m->spec, sizeof m->spec, "%s", p->spec);
    m->in = in;
    m->loss = p->loss;
    m->nlogits = p->layers[p->nlayers - 1].out_numel;
    m->be = be;
    m->pool = pool;
    m->shards = shards;
    m->max_batch = max_batch;
    m->recompute = 1;
    m->gemm_be = be;
    m->nlayers = p->nlayers;
    m->layers = p->layers;
    m->ntensors = p->ntensors;
    m->tensors = p->tensors;
    m->nparams = p->nparams;
    m->cat = p->cat;
    m->stage_lo = p->stage_lo;
    m->stage_hi = p->stage_hi;
    m->stage_of = p->stage_of;
    m->pre = p->pre;
    m->pre_max = p->pre_max;
    p->pre = NULL;
    p->layers = NULL;
    p->tensors = NULL;
    p->cat = NULL;
    m->run.max_phases = 5 * m->nlayers + 3;
    if (!(m->run.claimed = fed_calloc((size_t)m->run.max_phases, sizeof *m->run.claimed)) ||
        !(m->run.done = fed_calloc((size_t)m->run.max_phases, sizeof *m->run.done)) ||
        !(m->run.sched = fed_calloc((size_t)m->run.max_phases, sizeof *m->run.sched)))
        goto out;
    if ((err = dev_alloc(m, m->nparams * sizeof(float), &m->params)) ||
        (err = dev_alloc(m, m->nparams * sizeof(float), &m->grads)) ||
        (err = ws_init(m, &m->ws)))
        goto out;
    *out = m;
    m = NULL;
    err = FED_OK;
out:
    fed_model_free(m);
    return err;
}

fed_err fed_model_new(const char *spec, fed_model_shape in, fed_backend *be, fed_pool *pool,
                      int shards, int max_batch, fed_model **out)
{
    plan p;
    char why[256], id[FED_MODEL_SPEC_MAX];
    fed_err err;

    *out = NULL;
    if (!be || max_batch < 1 || max_batch > (1 << 20) || shards < 1 || shards > MAX_SHARDS)
        return FED_ERR_INVAL;
    err = make_plan(spec, in, &p, id, why, sizeof why);
    if (err != FED_OK)
        fed_log(FED_LOG_ERROR, "%s", why);
    else
        err = model_build(&p, in, be, pool, shards, max_batch, out);
    plan_fini(&p);
    if (err == FED_OK && strcmp(id, spec) != 0 && !((*out)->graph = fed_strdup(spec))) {
        fed_model_free(*out);
        *out = NULL;
        err = FED_ERR_NOMEM;
    }
    return err;
}

fed_err fed_model_new_graph(const char *label, const fed_model_node *nodes, int count,
                            fed_model_shape in, fed_backend *be, fed_pool *pool, int shards,
                            int max_batch, fed_model **out)
{
    plan p;
    char why[256];
    fed_err err;

    *out = NULL;
    if (!be || max_batch < 1 || max_batch > (1 << 20) || shards < 1 || shards > MAX_SHARDS)
        return FED_ERR_INVAL;
    err = make_graph_plan(label, nodes, count, in, &p, NULL, NULL, why, sizeof why);
    if (err != FED_OK)
        fed_log(FED_LOG_ERROR, "%s", why);
    else
        err = model_build(&p, in, be, pool, shards, max_batch, out);
    plan_fini(&p);
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
    fed_free(m->run.claimed);
    fed_free(m->run.done);
    fed_free(m->keep);
    fed_free(m->bseq);
    if (m->bf16)
        m->bf16->destroy(m->bf16);
    fed_free(m->run.sched);
    fed_free(m->layers);
    fed_free(m->pre);
    fed_free(m->tensors);
    fed_free(m->cat);
    fed_free(m->graph);
    fed_free(m);
}

/* ---------------------------------------------------------- accessors -- */

const char *fed_model_spec(const fed_model *m) { return m->spec; }
const char *fed_model_graph(const fed_model *m) { return m->graph ? m->graph : m->spec; }
int fed_model_nlogits(const fed_model *m) { return m->nlogits; }
fed_model_shape fed_model_input(const fed_model *m) { return m->in; }

fed_err fed_model_input_scale_parse(const char *text, int *out)
{
    if (!strcmp(text, "centred"))
        *out = FED_MODEL_INPUT_CENTRED;
    else if (!strcmp(text, "unit"))
        *out = FED_MODEL_INPUT_UNIT;
    else
        return FED_ERR_SPEC;
    return FED_OK;
}

const char *fed_model_input_scale_name(int scale)
{
    return scale == FED_MODEL_INPUT_CENTRED ? "centred" : scale == FED_MODEL_INPUT_UNIT ? "unit"
                                                                                          : "?";
}

void fed_model_input_map(int scale, float *mul, float *add)
{
    assert(scale == FED_MODEL_INPUT_CENTRED || scale == FED_MODEL_INPUT_UNIT);
    *mul = scale == FED_MODEL_INPUT_UNIT ? 1.0f / 255.0f : FED_MODEL_PIXEL_SCALE;
    *add = scale == FED_MODEL_INPUT_UNIT ? 0.0f : FED_MODEL_PIXEL_SHIFT;
}
size_t fed_model_nparams(const fed_model *m) { return m->nparams; }
fed_backend *fed_model_backend(const fed_model *m) { return m->be; }
float *fed_model_params_dev(fed_model *m) { return m->params; }
float *fed_model_grads_dev(fed_model *m) { return m->grads; }
fed_pool *fed_model_pool(const fed_model *m) { return m->pool; }
int fed_model_shards(const fed_model *m) { return m->shards; }
int fed_model_max_batch(const fed_model *m) { return m->max_batch; }
size_t fed_model_bytes(const fed_model *m) { return m->bytes; }

const fed_tensor_info *fed_model_tensors(const fed_model *m, int *count)
{
    *count = m->ntensors;
    return m->tensors;
}

int fed_model_categorical(const fed_model *m, int col, int *num)
{
    int fewest = 0;

    if (!m->cat || col < 0 || col >= m->in.c * m->in.h * m->in.w || !m->cat[col])
        return 0;
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].ops->ids && m->layers[l].column == col &&
            (!fewest || m->layers[l].wrows < fewest))
            fewest = m->layers[l].wrows;
    if (num)
        *num = fewest;
    return 1;
}

int fed_model_tensor_match(const char *pattern, const char *name)
{
    char glob[256];
    const char *p = pattern;

    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);

        if (n > 0 && n < sizeof glob) {
            memcpy(glob, p, n);
            glob[n] = '\0';
            if (fnmatch(glob, name, 0) == 0)
                return 1;
        }
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

int fed_model_tensor_flags(fed_model *m, const char *pattern, unsigned set, unsigned clear)
{
    int hit = 0;

    for (int i = 0; i < m->ntensors; i++)
        if (fed_model_tensor_match(pattern, m->tensors[i].name)) {
            m->tensors[i].flags = (m->tensors[i].flags | set) & ~clear;
            hit++;
        }
    return hit;
}

double fed_model_flops_per_sample(const fed_model *m)
{
    double f = 0.0;

    for (int l = 0; l < m->nlayers; l++)
        f += m->layers[l].ops->flops(&m->layers[l], l == 0);
    return f;
}

/* ----------------------------------------------------- initialization -- */

fed_err fed_model_init(fed_model *m, fed_rng *rng)
{
    float *host = fed_malloc(m->nparams * sizeof(float));
    fed_err err;

    if (!host)
        return FED_ERR_NOMEM;
    if (m->stage_lo > 0) { /* a stage: the draws of the layers before it, thrown away */
        float *skip = fed_malloc((m->pre_max ? m->pre_max : 1) * sizeof(float));

        if (!skip) {
            fed_free(host);
            return FED_ERR_NOMEM;
        }
        for (int l = 0; l < m->stage_lo; l++)
            if (m->pre[l].ops->init)
                m->pre[l].ops->init(&m->pre[l], skip, rng);
        fed_free(skip);
    }
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].ops->init)
            m->layers[l].ops->init(&m->layers[l], host, rng);
    err = m->be->upload(m->be, m->params, host, m->nparams * sizeof(float));
    fed_free(host);
    return err;
}

/* kaiming_uniform(a = sqrt(5)) gives bound 1/sqrt(fan_in); the bias is
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as well: PyTorch's Linear and Conv2d. */
static void init_fan_in(const layer *ly, size_t fan_in, float *host, fed_rng *rng)
{
    float bound = (float)(1.0 / sqrt((double)fan_in));

    for (size_t i = 0; i < ly->w_numel; i++)
        host[ly->w_off + i] = (2.0f * fed_rng_uniform_f(rng) - 1.0f) * bound;
    for (size_t i = 0; i < ly->b_numel; i++)
        host[ly->b_off + i] = (2.0f * fed_rng_uniform_f(rng) - 1.0f) * bound;
}

static void linear_init(const layer *ly, float *host, fed_rng *rng)
{
    init_fan_in(ly, (size_t)ly->in_numel, host, rng);
}

static void conv_init(const layer *ly, float *host, fed_rng *rng)
{
    init_fan_in(ly, (size_t)(ly->in_c / ly->groups) * ly->win.KH * ly->win.KW, host, rng);
}

/* forward, weight gradient, and input gradient except for layer 0 */
static double linear_flops(const layer *ly, int first)
{
    return 2.0 * ((double)ly->in_numel * ly->out_numel) * (first ? 2.0 : 3.0);
}

static double conv_flops(const layer *ly, int first)
{
    return 2.0 * ((double)ly->col_numel * ly->out_c / ly->groups) * (first ? 2.0 : 3.0);
}

/* every input read, every window's element compared: 2 in_numel for a 2x2
 * pool of stride 2, as counted before the windows came */
static double pool_flops(const layer *ly, int first)
{
    double win = (double)ly->out_numel * ly->win.KH * ly->win.KW;

    (void)first;
    return 2.0 * (win > ly->in_numel ? win : (double)ly->in_numel);
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
 *                rows, layer 0 by output columns (its forward_cols), the
 *                other layers by rows;
 *   phase F + j  (after the F = 1 or 3 forward phases) layer l = L - 1 - j,
 *                unit u: the weight and bias gradients of output-row chunk u
 *                over the whole batch (no reduction needed), and the input
 *                gradient of its own rows, masked by
 *                the ReLU of layer l - 1; with an update function, also the
 *                update of layer l + 1's rows of chunk u (their weights are
 *                no longer read), and of layer 0's at once in its phase.
 * A layer with batch statistics (batch norm, training) cuts the forward:
 * the rows up to its input, a phase of its statistics (unit u a share of
 * its channels, each over every row), then the rows on; and its backward
 * takes two phases, the weight gradients (its per-channel sums) and then
 * the input gradients, which need them all (schedule()).
 * A unit's work depends on (n, S) alone, never on the thread that runs it. */

static void row_chunk(int R, int S, int u, int *r0, int *r1)
{
    int chunk = ((R + S - 1) / S + 15) / 16 * 16;

    *r0 = u * chunk < R ? u * chunk : R;
    *r1 = (u + 1) * chunk < R ? (u + 1) * chunk : R;
}


/* The bias ly adds: its own, or zeros when it has none (bias = 0). */
static const float *layer_bias(const fed_model *m, const layer *ly)
{
    return ly->b_numel ? m->params + ly->b_off : m->ws.zeros;
}

/* ---- linear ---- */

static void linear_forward(fed_model *m, int l, const float *x, int off, int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    float *y = m->ws.act[l] + (size_t)off * ly->out_numel;

    /* y (n, out) = x (n, in) W^T, then bias and ReLU in one pass */
    m->gemm_be->gemm(m->gemm_be, 0, 1, n, ly->out_numel, ly->in_numel, 1.0f, x, ly->in_numel,
             m->params + ly->w_off, ly->in_numel, 0.0f, y, ly->out_numel);
    be->bias_act_fwd(be, y, layer_bias(m, ly), n, ly->out_numel, ly->relu);
}

/* Layer 0 (linear) by output columns: unit u computes y[:, r0:r1] for the
 * whole batch from its own rows of W, the rows it updates (so they stay in
 * its core's cache), and each core reads half of W instead of all of it. */
static void linear_forward_cols(fed_model *m, int u, int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[0];
    int in = ly->in_numel, out = ly->out_numel, r0, r1;
    float *y = m->ws.act[0];

    row_chunk(out, m->shards, u, &r0, &r1);
    if (r0 >= r1)
        return;
    m->gemm_be->gemm(m->gemm_be, 0, 1, n, r1 - r0, in, 1.0f, m->ws.x, in, m->params + ly->w_off + (size_t)r0 * in,
             in, 0.0f, y + r0, out);
    for (int b = 0; b < n; b++)
        be->bias_act_fwd(be, y + (size_t)b * out + r0, layer_bias(m, ly) + r0, 1, r1 - r0,
                         ly->relu);
}

/* Weight and bias gradients of output rows of chunk u, over all n samples;
 * dy (n, out) is already masked by this layer's ReLU. */
static void linear_weight_grads(fed_model *m, int l, int u, const float *dy, int n)
{
    const layer *ly = &m->layers[l];
    const float *x = layer_in(m, l);
    float *dW = m->grads + ly->w_off, *db = m->grads + ly->b_off;
    int r0, r1, in = ly->in_numel, out = ly->out_numel;
    float beta = m->run.accumulate ? 1.0f : 0.0f;

    row_chunk(ly->out_c, m->shards, u, &r0, &r1);
    if (r0 >= r1)
        return;
    /* dW[r0:r1] (r, in) = dy[:, r0:r1]^T (r, n) x (n, in) */
    m->gemm_be->gemm(m->gemm_be, 1, 0, r1 - r0, in, n, 1.0f, dy + r0, out, x, in, beta, dW + (size_t)r0 * in, in);
    /* db[r0:r1] = dy[:, r0:r1]^T ones (n) */
    if (ly->b_numel)
        m->gemm_be->gemm(m->gemm_be, 1, 0, r1 - r0, 1, n, 1.0f, dy + r0, out, m->ws.ones, 1, beta, db + r0, 1);
}

static void linear_input_grads(fed_model *m, int l, int u, const float *dy, float *dx, int off,
                               int n)
{
    const layer *ly = &m->layers[l];

    (void)u;
    /* dx (n, in) = dy (n, out) W (out, in) */
    m->gemm_be->gemm(m->gemm_be, 0, 0, n, ly->in_numel, ly->out_numel, 1.0f, dy + (size_t)off * ly->out_numel,
             ly->out_numel, m->params + ly->w_off, ly->in_numel, 0.0f,
             dx + (size_t)off * ly->in_numel, ly->in_numel);
}

static double sumsq_f(const float *x, size_t n)
{
    double s = 0.0;

    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

/* Sample i's weight gradient is dy_i x_i^T, so its squared norm is
 * |dy_i|^2 |x_i|^2, and its bias's |dy_i|^2: no per-sample gradient made. */
static void linear_dp_norm2(fed_model *m, int l, int u, const float *dy, const float *x, int off,
                            int n, double *norm2)
{
    const layer *ly = &m->layers[l];

    (void)u;
    for (int i = 0; i < n; i++)
        norm2[i] += sumsq_f(dy + (size_t)(off + i) * ly->out_numel, ly->out_numel) *
                    (sumsq_f(x + (size_t)(off + i) * ly->in_numel, ly->in_numel) +
                     (ly->b_numel ? 1.0 : 0.0));
}

/* ---- conv ---- */

/* Stride 1, no padding, no dilation: the kernels every backend has. */
static int conv_plain(const layer *ly)
{
    const fed_window *g = &ly->win;

    return g->SH == 1 && g->SW == 1 && g->PH == 0 && g->PW == 0 && g->DH == 1 && g->DW == 1;
}

static unsigned conv_needs(const layer *ly)
{
    return FED_BACKEND_CAP_CONV | (conv_plain(ly) ? 0u : FED_BACKEND_CAP_WINDOW);
}

static void conv_im2col(fed_backend *be, const layer *ly, const float *x, float *col)
{
    const fed_window *g = &ly->win;

    if (conv_plain(ly))
        be->im2col(be, x, g->C, g->H, g->W, g->KH, g->KW, col);
    else
        be->im2col_win(be, x, g, col);
}

static void conv_col2im(fed_backend *be, const layer *ly, const float *dcol, float *dx)
{
    const fed_window *g = &ly->win;

    if (conv_plain(ly))
        be->col2im(be, dcol, g->C, g->H, g->W, g->KH, g->KW, dx);
    else
        be->col2im_win(be, dcol, g, dx);
}

/* ---- conv as shifted GEMMs (host memory) ----
 * A stride-1 conv of one group is the sum over its kernel offsets (ki, kj)
 * of W[:, :, ki, kj] (out_c, C) times its input shifted by the offset.
 * With the input padded into xp (C, Hp, Wp), that shift is a view: channel
 * c's N = OH Wp values from xp + c Hp Wp + ki Wp + kj. So each offset is
 * one GEMM straight over xp, and no im2col is made (its KH KW copies of
 * the input were a fifth of a ResNet's step). Outputs come out Wp wide:
 * the last Wp - OW of each row read across the row's end and are dropped;
 * in an output gradient they are zero, so they add nothing to the
 * weights' gradient or to the input's. The last channel's view reads up
 * to KW - 1 values past xp (SHIFT_SLACK, kept zero). The weights are laid
 * out an offset at a time (ws.wsh) once a step by conv_prepare. Taken by
 * a layer whose input has at least SHIFT_MIN_C channels (a GEMM's K here
 * is C: the stem's one channel stays with im2col, K = KH KW), when xp and
 * the wide output fit in the im2col buffer they replace, and not under
 * --precision bf16 (its GEMMs repack their operands each call). Only
 * "same" convs of at most 3 x 3: without padding a row's dropped columns
 * are KW - 1 of every Wp (half the work for cnn's 5 x 5 on 12 x 12, which
 * ran 13% slower so), and a larger kernel means more GEMMs of K = C than
 * one of K = C KH KW runs faster. ResNet-8 trains 4% faster with it
 * (`bench_train --worker 1`, interleaved, 2026-11-29). */
#define SHIFT_MIN_C 8
#define SHIFT_MAX_KK 9
#define SHIFT_SLACK(ly) ((size_t)(ly)->win.KW)

static size_t shift_hp(const layer *ly) { return (size_t)ly->win.H + 2 * (size_t)ly->win.PH; }
static size_t shift_wp(const layer *ly) { return (size_t)ly->win.W + 2 * (size_t)ly->win.PW; }
/* xp's values, slack included; the wide output's follow them */
static size_t shift_xp_numel(const layer *ly)
{
    return (size_t)ly->win.C * shift_hp(ly) * shift_wp(ly) + SHIFT_SLACK(ly);
}
static size_t shift_wide_n(const layer *ly) { return (size_t)ly->out_h * shift_wp(ly); }

static int conv_shift_fits(const fed_model *m, const layer *ly)
{
    const fed_window *g = &ly->win;

    return ly->ops->prepare && ly->groups == 1 && g->SH == 1 && g->SW == 1 && g->DH == 1 &&
           g->DW == 1 && g->C >= SHIFT_MIN_C && 2 * g->PH == g->KH - 1 &&
           2 * g->PW == g->KW - 1 && g->KH * g->KW <= SHIFT_MAX_KK &&
           shift_xp_numel(ly) + (size_t)ly->out_c * shift_wide_n(ly) <= ly->col_numel &&
           (m->be->caps & (FED_BACKEND_CAP_HOST_MEMORY | FED_BACKEND_CAP_DP_SGD)) ==
               (FED_BACKEND_CAP_HOST_MEMORY | FED_BACKEND_CAP_DP_SGD);
}

/* This step runs layer l as shifted GEMMs. */
static int conv_shifted(const fed_model *m, int l)
{
    return m->ws.wsh && m->ws.wsh[l] && !m->bf16;
}

/* wsh[k] (out_c, C) = W[:, :, k] for each kernel offset k */
static void conv_prepare(fed_model *m, int l)
{
    const layer *ly = &m->layers[l];
    const float *W = m->params + ly->w_off;
    float *wsh = m->ws.wsh ? m->ws.wsh[l] : NULL;
    int O = ly->out_c, C = ly->in_c, KK = ly->win.KH * ly->win.KW;

    if (!wsh || !conv_shifted(m, l))
        return;
    for (int o = 0; o < O; o++)
        for (int c = 0; c < C; c++)
            for (int k = 0; k < KK; k++)
                wsh[((size_t)k * O + o) * C + c] = W[((size_t)o * C + c) * KK + k];
}

/* xp's inside (rows PH.., columns PW..) = x (C, H, W); its border stays */
static void shift_pad(const layer *ly, const float *restrict x, float *restrict xp)
{
    const fed_window *g = &ly->win;
    size_t hp = shift_hp(ly), wp = shift_wp(ly);

    for (int c = 0; c < g->C; c++)
        for (int h = 0; h < g->H; h++)
            memcpy(xp + ((size_t)c * hp + (size_t)h + g->PH) * wp + g->PW,
                   x + ((size_t)c * g->H + h) * g->W, (size_t)g->W * sizeof *x);
}

/* The wide rows of planes (rows r of (rows, OH, OW) in dy) into dw (rows,
 * OH, Wp), its dropped columns left as they are (zero) */
static void shift_widen(const layer *ly, const float *restrict dy, int rows, float *restrict dw)
{
    size_t wp = shift_wp(ly), OW = (size_t)ly->out_w;

    for (size_t r = 0; r < (size_t)rows * ly->out_h; r++)
        memcpy(dw + r * wp, dy + r * OW, OW * sizeof *dy);
}

/* The output's wide rows (rows, OH, Wp) narrowed into y (rows, OH, OW). */
static void shift_narrow(const layer *ly, const float *restrict wide, int rows,
                         float *restrict y)
{
    size_t wp = shift_wp(ly), OW = (size_t)ly->out_w;

    for (size_t r = 0; r < (size_t)rows * ly->out_h; r++)
        memcpy(y + r * OW, wide + r * wp, OW * sizeof *y);
}

/* The padded buffer's view at kernel offset k: channel 0's first value */
static size_t shift_at(const layer *ly, int k)
{
    return (size_t)(k / ly->win.KW) * shift_wp(ly) + (size_t)(k % ly->win.KW);
}

/* Rows [off, off + n): per sample, wide (O, N) = the sum over offsets k of
 * wsh[k] (O, C) view_k (C, N), then narrowed into y; xp and wide in the
 * im2col slot of the unit's first row. */
static void conv_forward_shift(fed_model *m, int l, const float *x, float *y, int off, int n)
{
    const layer *ly = &m->layers[l];
    const float *wsh = m->ws.wsh[l];
    float *xp = m->ws.col[l] + (size_t)off * ly->col_numel, *wide = xp + shift_xp_numel(ly);
    int O = ly->out_c, C = ly->in_c, KK = ly->win.KH * ly->win.KW;
    int N = (int)shift_wide_n(ly), ldx = (int)(shift_hp(ly) * shift_wp(ly));

    memset(xp, 0, shift_xp_numel(ly) * sizeof *xp); /* the border and slack, once */
    for (int i = 0; i < n; i++) {
        shift_pad(ly, x + (size_t)i * ly->in_numel, xp);
        for (int k = 0; k < KK; k++)
            m->gemm_be->gemm(m->gemm_be, 0, 0, O, N, C, 1.0f, wsh + (size_t)k * O * C, C,
                             xp + shift_at(ly, k), ldx, k ? 1.0f : 0.0f, wide, N);
        shift_narrow(ly, wide, O, y + (size_t)i * ly->out_numel);
    }
}

/* Output rows [r0, r1) of the weight gradient over samples [0, n): per
 * offset k, acc[k] (R, C) = the sum over samples of dy_i's wide rows
 * (R, N) view_k(x_i)^T (N, C), in unit u's dgw; then into dW's layout
 * (out_c, C, KH KW). xp and the wide rows in unit u's dcol. */
static void conv_weight_grads_shift(fed_model *m, int l, int u, const float *dy, int n, int r0,
                                    int r1)
{
    const layer *ly = &m->layers[l];
    const float *x = layer_in(m, l);
    float *dW = m->grads + ly->w_off, *acc = m->ws.dgw[u];
    float *xp = m->ws.dcol[u], *wide = xp + shift_xp_numel(ly);
    int R = r1 - r0, C = ly->in_c, KK = ly->win.KH * ly->win.KW, P = ly->out_h * ly->out_w;
    int N = (int)shift_wide_n(ly), ldx = (int)(shift_hp(ly) * shift_wp(ly));

    memset(xp, 0, (shift_xp_numel(ly) + (size_t)R * N) * sizeof *xp);
    for (int i = 0; i < n; i++) {
        shift_pad(ly, x + (size_t)i * ly->in_numel, xp);
        shift_widen(ly, dy + (size_t)i * ly->out_numel + (size_t)r0 * P, R, wide);
        for (int k = 0; k < KK; k++)
            m->gemm_be->gemm(m->gemm_be, 0, 1, R, C, N, 1.0f, wide, N, xp + shift_at(ly, k),
                             ldx, i ? 1.0f : 0.0f, acc + (size_t)k * R * C, C);
    }
    for (int a = 0; n > 0 && a < R; a++)
        for (int c = 0; c < C; c++)
            for (int k = 0; k < KK; k++) {
                float v = acc[((size_t)k * R + a) * C + c], *w;

                w = dW + ((size_t)(r0 + a) * C + c) * KK + k;
                *w = m->run.accumulate ? *w + v : v;
            }
}

/* Rows [off, off + n)'s input gradient: per sample, the padded dxp (C, Hp,
 * Wp) = the sum over offsets k of wsh[k]^T (C, O) dy_i's wide rows (O, N)
 * added into view_k, then its inside into dx. In unit u's dcol. */
static void conv_input_grads_shift(fed_model *m, int l, int u, const float *dy, float *dx, int n)
{
    const layer *ly = &m->layers[l];
    const fed_window *g = &ly->win;
    const float *wsh = m->ws.wsh[l];
    float *dxp = m->ws.dcol[u], *wide = dxp + shift_xp_numel(ly);
    int O = ly->out_c, C = ly->in_c, KK = g->KH * g->KW;
    int N = (int)shift_wide_n(ly), ldx = (int)(shift_hp(ly) * shift_wp(ly));
    size_t hp = shift_hp(ly), wp = shift_wp(ly);

    memset(wide, 0, (size_t)O * N * sizeof *wide); /* the dropped columns, once */
    for (int i = 0; i < n; i++) {
        float *dxi = dx + (size_t)i * ly->in_numel;

        memset(dxp, 0, shift_xp_numel(ly) * sizeof *dxp);
        shift_widen(ly, dy + (size_t)i * ly->out_numel, O, wide);
        for (int k = 0; k < KK; k++)
            m->gemm_be->gemm(m->gemm_be, 1, 0, C, N, O, 1.0f, wsh + (size_t)k * O * C, C, wide,
                             N, 1.0f, dxp + shift_at(ly, k), ldx);
        for (int c = 0; c < C; c++)
            for (int h = 0; h < g->H; h++)
                memcpy(dxi + ((size_t)c * g->H + h) * g->W,
                       dxp + ((size_t)c * hp + (size_t)h + g->PH) * wp + g->PW,
                       (size_t)g->W * sizeof *dxi);
    }
}

static void conv_forward(fed_model *m, int l, const float *x, int off, int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    const float *W = m->params + ly->w_off;
    float *y = m->ws.act[l] + (size_t)off * ly->out_numel;
    int G = ly->groups, og = ly->out_c / G;
    int ckk = ly->in_c / G * ly->win.KH * ly->win.KW, P = ly->out_h * ly->out_w;

    /* one sample's im2col at a time in the slot of the unit's first row,
       which stays in cache: the backward makes its own again */
    float *col = m->ws.col[l] + (size_t)off * ly->col_numel;

    if (conv_shifted(m, l))
        conv_forward_shift(m, l, x, y, off, n);
    else
        for (int i = 0; i < n; i++) {
            conv_im2col(be, ly, x + (size_t)i * ly->in_numel, col);
            /* per group g: y_i[g] (og, P) = W[g] (og, ckk) col[g] (ckk, P), the
               group's rows of each */
            for (int g = 0; g < G; g++)
                m->gemm_be->gemm(m->gemm_be, 0, 0, og, P, ckk, 1.0f,
                                 W + (size_t)g * og * ckk, ckk, col + (size_t)g * ckk * P, P,
                                 0.0f, y + (size_t)i * ly->out_numel + (size_t)g * og * P, P);
        }
    if (ly->b_numel || ly->relu) /* else adding zeros is a pass for nothing */
        be->chan_bias_act_fwd(be, y, layer_bias(m, ly), n, ly->out_c, P, ly->relu);
}

/* The bias gradient of output rows [r0, r1) over samples [0, n): all
 * channels in one call over the batch, a share of them sample by sample. */
static void conv_bias_grads(fed_model *m, const layer *ly, const float *dy, int n, int r0, int r1)
{
    fed_backend *be = m->be;
    float *db = m->grads + ly->b_off;
    int acc = m->run.accumulate, P = ly->out_h * ly->out_w;

    if (!ly->b_numel)
        return;
    if (r1 - r0 == ly->out_c) {
        be->chan_bias_bwd(be, db, dy, n, ly->out_c, P, acc);
        return;
    }
    for (int i = 0; i < n; i++)
        be->chan_bias_bwd(be, db + r0, dy + (size_t)i * ly->out_numel + (size_t)r0 * P, 1,
                          r1 - r0, P, i > 0 || acc);
}

/* Each sample's im2col is made again in the unit's scratch (dcol) and
 * used at once, from cache: storing the batch's in the forward cost more
 * (a conv's is KH KW times its input) than making it twice. */
static void conv_weight_grads(fed_model *m, int l, int u, const float *dy, int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    const float *x = layer_in(m, l);
    float *dW = m->grads + ly->w_off, *col = m->ws.dcol[u], *dWt;
    int r0, r1, acc = m->run.accumulate, og = ly->out_c / ly->groups;
    int ckk = ly->in_c / ly->groups * ly->win.KH * ly->win.KW, P = ly->out_h * ly->out_w;

    row_chunk(ly->out_c, m->shards, u, &r0, &r1);
    if (r0 >= r1)
        return;
    if (conv_shifted(m, l)) {
        conv_weight_grads_shift(m, l, u, dy, n, r0, r1);
        conv_bias_grads(m, ly, dy, n, r0, r1);
        return;
    }
    /* one group, on the host's memory: the transpose dWt (ckk, r) = the sum
       over i of col_i (ckk, P) dy_i[r0:r1]^T (P, r), in the unit's dgw,
       then into dW; OpenBLAS runs that shape faster (out_c is the small
       side) */
    dWt = ly->groups == 1 && m->ws.dgw[u] && (be->caps & FED_BACKEND_CAP_HOST_MEMORY)
              ? m->ws.dgw[u] : NULL;
    for (int i = 0; i < n; i++) {
        const float *dyi = dy + (size_t)i * ly->out_numel + (size_t)r0 * P;

        conv_im2col(be, ly, x + (size_t)i * ly->in_numel, col);
        if (dWt)
            m->gemm_be->gemm(m->gemm_be, 0, 1, ckk, r1 - r0, P, 1.0f, col, P, dyi, P,
                             i ? 1.0f : 0.0f, dWt, r1 - r0);
        /* else dW[a:b] (r, ckk) += dy_i[a:b] (r, P) col_i[g]^T (P, ckk), for
           the rows [a, b) of [r0, r1) in each group g */
        for (int a = r0, b; !dWt && a < r1; a = b) {
            int g = a / og;

            b = (g + 1) * og < r1 ? (g + 1) * og : r1;
            m->gemm_be->gemm(m->gemm_be, 0, 1, b - a, ckk, P, 1.0f, dyi + (size_t)(a - r0) * P, P,
                     col + (size_t)g * ckk * P, P, i || acc ? 1.0f : 0.0f, dW + (size_t)a * ckk, ckk);
        }
    }
    for (int a = r0; dWt && n > 0 && a < r1; a++)
        for (int k = 0; k < ckk; k++) {
            float v = dWt[(size_t)k * (r1 - r0) + (a - r0)];

            dW[(size_t)a * ckk + k] = acc ? dW[(size_t)a * ckk + k] + v : v;
        }
    conv_bias_grads(m, ly, dy, n, r0, r1);
}

/* The input gradient of a stride-1 conv is a conv of its output gradient:
 * dx_i (C, H W) = W' (C, out_c KH KW) im2col'(dy_i), with W' the weights'
 * channels swapped and kernels turned half a turn (unit u's dgw holds it)
 * and im2col' padding dy_i by K - 1 - P, so that it comes out H x W. One
 * GEMM writes dx whole: no col2im, no zeroed dx first. For one group,
 * dilation 1 and an im2col' no larger than the conv's own (dcol holds
 * it), on a backend whose memory the host reads. */
static int conv_transposed(const fed_model *m, const layer *ly, int u, fed_window *t)
{
    const fed_window *g = &ly->win;

    if (ly->groups != 1 || g->SH != 1 || g->SW != 1 || g->DH != 1 || g->DW != 1 ||
        g->PH >= g->KH || g->PW >= g->KW || !m->ws.dgw[u] ||
        (size_t)ly->out_c * g->KH * g->KW * g->H * g->W > ly->col_numel ||
        (m->be->caps & (FED_BACKEND_CAP_HOST_MEMORY | FED_BACKEND_CAP_WINDOW)) !=
            (FED_BACKEND_CAP_HOST_MEMORY | FED_BACKEND_CAP_WINDOW))
        return 0;
    *t = (fed_window){.C = ly->out_c, .H = ly->out_h, .W = ly->out_w, .KH = g->KH,
                      .KW = g->KW, .SH = 1, .SW = 1, .PH = g->KH - 1 - g->PH,
                      .PW = g->KW - 1 - g->PW, .DH = 1, .DW = 1, .OH = g->H, .OW = g->W};
    return 1;
}

static void conv_input_grads_t(fed_model *m, int l, int u, const fed_window *t, const float *dy,
                               float *dx, int n)
{
    const layer *ly = &m->layers[l];
    const float *W = m->params + ly->w_off;
    float *Wt = m->ws.dgw[u];
    int C = ly->in_c, O = ly->out_c, KK = t->KH * t->KW, HW = t->OH * t->OW;

    /* Wt[c][o][k] = W[o][c][KK - 1 - k] */
    for (int o = 0; o < O; o++)
        for (int c = 0; c < C; c++)
            for (int k = 0; k < KK; k++)
                Wt[((size_t)c * O + o) * KK + k] = W[((size_t)o * C + c) * KK + KK - 1 - k];
    for (int i = 0; i < n; i++) {
        m->be->im2col_win(m->be, dy + (size_t)i * ly->out_numel, t, m->ws.dcol[u]);
        m->gemm_be->gemm(m->gemm_be, 0, 0, C, HW, O * KK, 1.0f, Wt, O * KK, m->ws.dcol[u], HW,
                         0.0f, dx + (size_t)i * ly->in_numel, HW);
    }
}

static void conv_input_grads(fed_model *m, int l, int u, const float *dy, float *dx, int off,
                             int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    const float *W = m->params + ly->w_off, *dyo = dy + (size_t)off * ly->out_numel;
    float *dxo = dx + (size_t)off * ly->in_numel;
    int G = ly->groups, og = ly->out_c / G;
    int ckk = ly->in_c / G * ly->win.KH * ly->win.KW, P = ly->out_h * ly->out_w;
    fed_window t;

    if (conv_shifted(m, l)) {
        conv_input_grads_shift(m, l, u, dyo, dxo, n);
        return;
    }
    if (conv_transposed(m, ly, u, &t)) {
        conv_input_grads_t(m, l, u, &t, dyo, dxo, n);
        return;
    }
    be->fill(be, dxo, 0.0f, (size_t)n * ly->in_numel);
    for (int i = 0; i < n; i++) {
        /* per group: dcol[g] (ckk, P) = W[g]^T (ckk, og) dy_i[g] (og, P),
           then folded back */
        for (int g = 0; g < G; g++)
            m->gemm_be->gemm(m->gemm_be, 1, 0, ckk, P, og, 1.0f, W + (size_t)g * og * ckk, ckk,
                     dyo + (size_t)i * ly->out_numel + (size_t)g * og * P, P, 0.0f,
                     m->ws.dcol[u] + (size_t)g * ckk * P, P);
        conv_col2im(be, ly, m->ws.dcol[u], dxo + (size_t)i * ly->in_numel);
    }
}

/* Sample i's weight gradient dy_i (out_c, P) col_i^T (P, ckk) is made, one
 * at a time in the unit's scratch (its im2col made again in dcol); its
 * bias's is dy_i summed over P. */
static void conv_dp_norm2(fed_model *m, int l, int u, const float *dy, const float *x, int off,
                          int n, double *norm2)
{
    const layer *ly = &m->layers[l];
    float *col = m->ws.dcol[u];
    int G = ly->groups, og = ly->out_c / G;
    int ckk = ly->in_c / G * ly->win.KH * ly->win.KW, P = ly->out_h * ly->out_w;

    for (int i = 0; i < n; i++) {
        const float *dyi = dy + (size_t)(off + i) * ly->out_numel;

        conv_im2col(m->be, ly, x + (size_t)(off + i) * ly->in_numel, col);
        for (int g = 0; g < G; g++) /* each group's rows of the weight gradient */
            m->gemm_be->gemm(m->gemm_be, 0, 1, og, ckk, P, 1.0f, dyi + (size_t)g * og * P, P,
                     col + (size_t)g * ckk * P, P, 0.0f, m->ws.dgw[u] + (size_t)g * og * ckk, ckk);
        norm2[i] += sumsq_f(m->ws.dgw[u], (size_t)ly->out_c * ckk);
        for (int c = 0; ly->b_numel && c < ly->out_c; c++) {
            double b = 0.0;

            for (int p = 0; p < P; p++)
                b += dyi[(size_t)c * P + p];
            norm2[i] += b * b;
        }
    }
}

/* ---- maxpool, avgpool ---- */

/* A 2x2 window of stride 2 without padding: the kernels every backend has. */
static int pool_plain(const layer *ly)
{
    const fed_window *g = &ly->win;

    return g->KH == 2 && g->KW == 2 && g->SH == 2 && g->SW == 2 && g->PH == 0 && g->PW == 0;
}

static unsigned maxpool_needs(const layer *ly)
{
    return pool_plain(ly) ? FED_BACKEND_CAP_CONV : FED_BACKEND_CAP_WINDOW;
}

static void maxpool_forward(fed_model *m, int l, const float *x, int off, int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    float *y = m->ws.act[l] + (size_t)off * ly->out_numel;
    int32_t *arg = m->ws.arg[l] + (size_t)off * ly->arg_numel;

    if (pool_plain(ly))
        be->maxpool_fwd(be, x, n * ly->in_c, ly->in_h, ly->in_w, y, arg);
    else
        be->maxpool_win_fwd(be, x, n, &ly->win, y, arg);
}

static void maxpool_input_grads(fed_model *m, int l, int u, const float *dy, float *dx, int off,
                                int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    const float *dyo = dy + (size_t)off * ly->out_numel;
    const int32_t *arg = m->ws.arg[l] + (size_t)off * ly->arg_numel;
    float *dxo = dx + (size_t)off * ly->in_numel;

    (void)u;
    if (pool_plain(ly))
        be->maxpool_bwd(be, dyo, arg, n * ly->in_c, ly->in_h, ly->in_w, dxo);
    else
        be->maxpool_win_bwd(be, dyo, arg, n, &ly->win, dxo);
}

static unsigned avgpool_needs(const layer *ly)
{
    (void)ly;
    return FED_BACKEND_CAP_WINDOW;
}

static void avgpool_forward(fed_model *m, int l, const float *x, int off, int n)
{
    const layer *ly = &m->layers[l];

    m->be->avgpool_win_fwd(m->be, x, n, &ly->win, m->ws.act[l] + (size_t)off * ly->out_numel);
}

static void avgpool_input_grads(fed_model *m, int l, int u, const float *dy, float *dx, int off,
                                int n)
{
    const layer *ly = &m->layers[l];

    (void)u;
    m->be->avgpool_win_bwd(m->be, dy + (size_t)off * ly->out_numel, n, &ly->win,
                           dx + (size_t)off * ly->in_numel);
}

/* ---- activations of their own (leaky_relu, gelu, silu, sigmoid, tanh) ---- */

/* Computed on the host over the model's buffers: a backend whose device
 * memory the host reads (the CPU's); another refuses the layer by name. */
static unsigned act_needs(const layer *ly)
{
    (void)ly;
    return FED_BACKEND_CAP_HOST_MEMORY;
}

static double act_sigmoid(double x)
{
    double e;

    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    e = exp(x);
    return e / (1.0 + e);
}

/* f(x) of activation act, in double (PyTorch's float kernels agree to
 * rounding). */
static double act_value(int act, double x)
{
    switch (act) {
    case ACT_LEAKY_RELU: return x > 0 ? x : LEAKY_SLOPE * x;
    case ACT_GELU: return 0.5 * x * (1.0 + erf(x * M_SQRT1_2));
    case ACT_SILU: return x * act_sigmoid(x);
    case ACT_SIGMOID: return act_sigmoid(x);
    default: return tanh(x);
    }
}

/* f'(x), given x and y = f(x). */
static double act_slope(int act, double x, double y)
{
    double sg;

    switch (act) {
    case ACT_LEAKY_RELU: return x > 0 ? 1.0 : LEAKY_SLOPE;
    case ACT_GELU:
        return 0.5 * (1.0 + erf(x * M_SQRT1_2)) + x * exp(-0.5 * x * x) * 0.3989422804014327;
    case ACT_SILU:
        sg = act_sigmoid(x);
        return sg * (1.0 + x * (1.0 - sg));
    case ACT_SIGMOID: return y * (1.0 - y);
    default: return 1.0 - y * y;
    }
}

static void act_forward(fed_model *m, int l, const float *x, int off, int n)
{
    const layer *ly = &m->layers[l];
    float *y = m->ws.act[l] + (size_t)off * ly->out_numel;
    size_t cnt = (size_t)n * ly->out_numel;

    for (size_t k = 0; k < cnt; k++)
        y[k] = (float)act_value(ly->act, x[k]);
}

static void act_input_grads(fed_model *m, int l, int u, const float *dy, float *dx, int off,
                            int n)
{
    const layer *ly = &m->layers[l];
    size_t at = (size_t)off * ly->out_numel, cnt = (size_t)n * ly->out_numel;
    const float *x = layer_in(m, l) + at, *y = m->ws.act[l] + at;

    (void)u;
    for (size_t k = 0; k < cnt; k++)
        dx[at + k] = (float)(dy[at + k] * act_slope(ly->act, x[k], y[k]));
}

/* a few operations per value each way, as a pool's */
static double act_flops(const layer *ly, int first)
{
    (void)first;
    return 2.0 * ly->out_numel;
}

/* ---- add ---- */

/* y = a + b, then the ReLU when relu, over pointers that alias nothing:
 * blocks of 8 the compiler vectorizes at -O2 (a loop with a remainder it
 * leaves scalar there). */
static void add_rows(float *restrict y, const float *restrict a, const float *restrict b,
                     size_t n, int relu)
{
    size_t k = 0;

    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++) {
            float v = a[k + j] + b[k + j];

            y[k + j] = relu && v < 0.0f ? 0.0f : v;
        }
    for (; k < n; k++) {
        float v = a[k] + b[k];

        y[k] = relu && v < 0.0f ? 0.0f : v;
    }
}

/* Computed on the host, as the activations. */
static void add_forward(fed_model *m, int l, const float *x, int off, int n)
{
    const layer *ly = &m->layers[l];
    size_t at = (size_t)off * ly->out_numel, cnt = (size_t)n * ly->out_numel;
    const float *o = (ly->src2 >= 0 ? m->ws.act[ly->src2] : m->ws.x) + at;

    add_rows(m->ws.act[l] + at, x, o, cnt, ly->relu);
}

/* The gradient goes to both inputs as it is. */
static void add_input_grads(fed_model *m, int l, int u, const float *dy, float *dx, int off,
                            int n)
{
    const layer *ly = &m->layers[l];
    size_t at = (size_t)off * ly->out_numel;

    (void)u;
    m->be->copy(m->be, dx + at, dy + at, (size_t)n * ly->out_numel);
}

static void add_input2_grads(fed_model *m, int l, const float *dy, float *dx, int off, int n)
{
    add_input_grads(m, l, 0, dy, dx, off, n);
}

/* ---- concat ---- */

/* Each sample's output: its input's channels, then the other's (torch.cat
 * along dim 1), copied by the backend. */
static void concat_forward(fed_model *m, int l, const float *x, int off, int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    size_t a = (size_t)ly->in_numel, b = (size_t)(ly->out_numel - ly->in_numel);
    const float *o = (ly->src2 >= 0 ? m->ws.act[ly->src2] : m->ws.x) + (size_t)off * b;
    float *y = m->ws.act[l] + (size_t)off * ly->out_numel;

    for (int i = 0; i < n; i++) {
        be->copy(be, y + (size_t)i * ly->out_numel, x + (size_t)i * a, a);
        be->copy(be, y + (size_t)i * ly->out_numel + a, o + (size_t)i * b, b);
    }
}

/* Each input's gradient: its slice of the output's. */
static void concat_grads(fed_model *m, int l, const float *dy, float *dx, int off, int n,
                         int second)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];
    size_t a = (size_t)ly->in_numel, b = (size_t)(ly->out_numel - ly->in_numel);
    size_t part = second ? b : a;

    for (int i = off; i < off + n; i++)
        be->copy(be, dx + (size_t)i * part, dy + (size_t)i * ly->out_numel + (second ? a : 0),
                 part);
}

static void concat_input_grads(fed_model *m, int l, int u, const float *dy, float *dx, int off,
                               int n)
{
    (void)u;
    concat_grads(m, l, dy, dx, off, n, 0);
}

static void concat_input2_grads(fed_model *m, int l, const float *dy, float *dx, int off, int n)
{
    concat_grads(m, l, dy, dx, off, n, 1);
}

/* ---- embedding, numeric ---- */

/* embedding: nn.Embedding(num, dim) over the ids of one input column,
 * (dim, 1, 1); its weight (num, dim) and no bias. */
static fed_err embedding_plan(plan *p, const node_desc *nd, int i, dims *s, char *why,
                              size_t cap)
{
    layer *ly;
    int wshape[2] = {nd->num, nd->out};
    char what[128];
    fed_err err;

    if (nd->input != -1)
        return shape_fail(p, nd, i, s, why, cap,
                          "an embedding takes the model's input row (its ids), not a layer's "
                          "output");
    if (nd->column < 0 || nd->column >= p->features) {
        snprintf(what, sizeof what, "column %d is outside the input's %d columns (0 to %d)",
                 nd->column, p->features, p->features - 1);
        return shape_fail(p, nd, i, s, why, cap, what);
    }
    if (nd->num < 1 || nd->num > EMBED_MAX_NUM)
        return shape_fail(p, nd, i, s, why, cap, "num must be 1 to 2^20 ids");
    if (nd->out < 1 || nd->out > 65536)
        return shape_fail(p, nd, i, s, why, cap, "dim must be 1 to 65536");
    if ((double)nd->num * nd->out > (double)MAX_LAYER_NUMEL)
        return shape_fail(p, nd, i, s, why, cap, "its weight exceeds 2^28 values");
    if (!(ly = plan_layer(p, nd)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    ly->column = nd->column;
    ly->wrows = nd->num;
    if ((err = plan_output(p, nd, i, s, ly, nd->out, 1, 1, why, cap)) != FED_OK ||
        (err = plan_tensor(p, nd->name, "weight", 2, wshape, &ly->w_off, why, cap)) != FED_OK)
        return err;
    ly->w_numel = (size_t)nd->num * nd->out; /* and no bias */
    return FED_OK;
}

static unsigned embedding_needs(const layer *ly)
{
    (void)ly;
    return FED_BACKEND_CAP_EMBED;
}

/* Each sample's id, on the host before the step: an integer in [0, num),
 * else the step is refused (never clamped: a wrong bucket count or column
 * would train silently on the wrong rows). */
static fed_err embedding_check(const fed_model *m, int l, const fed_batch *b)
{
    const layer *ly = &m->layers[l];
    int num = ly->wrows;

    if (!b->x_f32) {
        fed_log(FED_LOG_ERROR, "model: layer '%s' (embedding) reads ids from a CSV row's "
                "column, not image bytes", ly->name);
        return FED_ERR_UNSUPPORTED;
    }
    for (int i = 0; i < b->n; i++) {
        float v = b->x_f32[(size_t)i * ly->in_numel + ly->column];

        if (!(v >= 0.0f && v < (float)num && v == floorf(v))) {
            fed_log(FED_LOG_ERROR, "model: layer '%s' (embedding): sample %d's column %d holds "
                    "%g, not an id in [0, %d)", ly->name, i, ly->column, (double)v, num);
            return FED_ERR_RANGE;
        }
    }
    return FED_OK;
}

static void embedding_forward(fed_model *m, int l, const float *x, int off, int n)
{
    const layer *ly = &m->layers[l];

    m->be->embed_fwd(m->be, m->ws.act[l] + (size_t)off * ly->out_numel, m->params + ly->w_off, x,
                     ly->in_numel, ly->column, n, ly->out_numel);
}

/* The weight gradient of unit u's rows (ids) of the weight, the whole
 * batch walked in order: no two units write one row. */
static void embedding_weight_grads(fed_model *m, int l, int u, const float *dy, int n)
{
    const layer *ly = &m->layers[l];
    int r0, r1;

    row_chunk(ly->wrows, m->shards, u, &r0, &r1);
    if (r0 < r1)
        m->be->embed_bwd(m->be, m->grads + ly->w_off, dy, m->ws.x, ly->in_numel, ly->column, n,
                         ly->out_numel, r0, r1, m->run.accumulate);
}

/* A sample's gradient is its dy in the one row its id picks. */
static void embedding_dp_norm2(fed_model *m, int l, int u, const float *dy, const float *x,
                               int off, int n, double *norm2)
{
    const layer *ly = &m->layers[l];

    (void)u;
    (void)x;
    for (int i = 0; i < n; i++)
        norm2[i] += sumsq_f(dy + (size_t)(off + i) * ly->out_numel, ly->out_numel);
}

/* N(0, 1), nn.Embedding's init. */
static void embedding_init(const layer *ly, float *host, fed_rng *rng)
{
    for (size_t k = 0; k < ly->w_numel; k++)
        host[ly->w_off + k] = (float)fed_rng_normal(rng);
}

/* numeric: the input row's columns no embedding reads, in order. */
static fed_err numeric_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    layer *ly;
    int k = p->features;

    if (nd->input != -1)
        return shape_fail(p, nd, i, s, why, cap,
                          "a numeric layer takes the model's input row, not a layer's output");
    for (int j = 0; p->cat && j < p->features; j++)
        k -= p->cat[j];
    if (k < 1)
        return shape_fail(p, nd, i, s, why, cap,
                          "every column of the input is categorical (read by an embedding)");
    if (!(ly = plan_layer(p, nd)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    return plan_output(p, nd, i, s, ly, k, 1, 1, why, cap);
}

/* Each sample's runs of numeric columns, copied by the backend. */
static void numeric_forward(fed_model *m, int l, const float *x, int off, int n)
{
    const layer *ly = &m->layers[l];
    int F = ly->in_numel;

    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * F;
        float *y = m->ws.act[l] + (size_t)(off + i) * ly->out_numel;

        for (int j = 0, e; j < F; j = e) {
            if (m->cat && m->cat[j]) {
                e = j + 1;
                continue;
            }
            for (e = j; e < F && !(m->cat && m->cat[e]); e++)
                ;
            m->be->copy(m->be, y, xi + j, (size_t)(e - j));
            y += e - j;
        }
    }
}

/* ---- layernorm, groupnorm ---- */

#define NORM_EPS 1e-5f

/* A normalization over groups of channels (G), whose weight and bias
 * (ndim, shape) scale each value by its entry k / rep of a sample's values
 * (rep = out_numel / their numel); each sample's mean and rstd per group
 * are kept in ws.col (col_numel = 2 G). */
static fed_err norm_plan(plan *p, const node_desc *nd, int i, dims *s, int G, int ndim,
                         const int *shape, char *why, size_t cap)
{
    layer *ly;
    fed_err err;

    if (G < 1 || s->c % G != 0)
        return shape_fail(p, nd, i, s, why, cap, "groups must divide the input's channels");
    if (!(ly = plan_layer(p, nd)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    ly->groups = G;
    ly->col_numel = 2 * (size_t)G;
    if ((err = plan_output(p, nd, i, s, ly, s->c, s->h, s->w, why, cap)) != FED_OK ||
        (err = plan_tensor(p, nd->name, "weight", ndim, shape, &ly->w_off, why, cap)) != FED_OK)
        return err;
    ly->w_numel = ly->b_numel = p->tensors[p->ntensors - 1].numel;
    return plan_tensor(p, nd->name, "bias", ndim, shape, &ly->b_off, why, cap);
}

/* layernorm: over all of a sample's values, nn.LayerNorm(its shape): (c)
 * for features (h = w = 1), else (c, h, w). */
static fed_err layernorm_plan(plan *p, const node_desc *nd, int i, dims *s, char *why,
                              size_t cap)
{
    int shape[3] = {s->c, s->h, s->w};

    return norm_plan(p, nd, i, s, 1, s->h * s->w == 1 ? 1 : 3, shape, why, cap);
}

/* groupnorm: nn.GroupNorm(groups, c), weight and bias per channel. */
static fed_err groupnorm_plan(plan *p, const node_desc *nd, int i, dims *s, char *why,
                              size_t cap)
{
    return norm_plan(p, nd, i, s, nd->groups > 0 ? nd->groups : 1, 1, &s->c, why, cap);
}

static unsigned norm_needs(const layer *ly)
{
    (void)ly;
    return FED_BACKEND_CAP_NORM;
}

/* A group's values (M), and how many values share an affine entry (rep). */
static void norm_dims(const layer *ly, int *M, int *rep)
{
    *M = ly->out_numel / ly->groups;
    *rep = ly->out_numel / (int)ly->w_numel;
}

static void norm_forward(fed_model *m, int l, const float *x, int off, int n)
{
    const layer *ly = &m->layers[l];
    int M, rep;

    norm_dims(ly, &M, &rep);
    m->be->norm_fwd(m->be, x, n, ly->groups, M, rep, m->params + ly->w_off,
                    m->params + ly->b_off, NORM_EPS, ly->relu,
                    m->ws.col[l] + (size_t)off * ly->col_numel,
                    m->ws.act[l] + (size_t)off * ly->out_numel);
}

static void norm_input_grads(fed_model *m, int l, int u, const float *dy, float *dx, int off,
                             int n)
{
    const layer *ly = &m->layers[l];
    size_t at = (size_t)off * ly->out_numel;
    int M, rep;

    (void)u;
    norm_dims(ly, &M, &rep);
    m->be->norm_bwd(m->be, dy + at, layer_in(m, l) + at,
                    m->ws.col[l] + (size_t)off * ly->col_numel, n, ly->groups, M, rep,
                    m->params + ly->w_off, dx + at);
}

/* Unit u's channels' affine entries, over all n samples. */
static void norm_weight_grads(fed_model *m, int l, int u, const float *dy, int n)
{
    const layer *ly = &m->layers[l];
    int M, rep, r0, r1, per = (int)ly->w_numel / ly->out_c;

    row_chunk(ly->out_c, m->shards, u, &r0, &r1);
    if (r0 >= r1)
        return;
    norm_dims(ly, &M, &rep);
    m->be->norm_affine_bwd(m->be, dy, layer_in(m, l), m->ws.col[l], n, ly->groups, M, rep,
                           r0 * per, r1 * per, m->grads + ly->w_off, m->grads + ly->b_off,
                           m->run.accumulate);
}

/* A sample's affine gradients are sums over its own values, so its norm is
 * made from them directly (host memory: DP-SGD is CPU only). */
static void norm_dp_norm2(fed_model *m, int l, int u, const float *dy, const float *x, int off,
                          int n, double *norm2)
{
    const layer *ly = &m->layers[l];
    int M, rep;

    (void)u;
    norm_dims(ly, &M, &rep);
    for (int i = 0; i < n; i++) {
        size_t row = (size_t)(off + i) * ly->out_numel;
        const float *st = m->ws.col[l] + (size_t)(off + i) * ly->col_numel;

        for (size_t a = 0; a < ly->w_numel; a++) {
            double sg = 0.0, sb = 0.0;

            for (size_t k = a * rep; k < (a + 1) * rep; k++) {
                const float *gs = st + 2 * (k / (size_t)M);

                sg += (double)dy[row + k] * (((double)x[row + k] - gs[0]) * gs[1]);
                sb += dy[row + k];
            }
            norm2[i] += sg * sg + sb * sb;
        }
    }
}

/* weight 1, bias 0: PyTorch's */
static void norm_init(const layer *ly, float *host, fed_rng *rng)
{
    (void)rng;
    for (size_t k = 0; k < ly->w_numel; k++) {
        host[ly->w_off + k] = 1.0f;
        host[ly->b_off + k] = 0.0f;
    }
}

/* the statistics, the normalization and the affine each way: about ten
 * operations a value */
static double norm_flops(const layer *ly, int first)
{
    (void)first;
    return 10.0 * ly->out_numel;
}

/* ---- dropout ---- */

/* dropout: the input's shape, p in millionths below one. */
static fed_err dropout_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    layer *ly;

    if (nd->drop_ppm < 0 || nd->drop_ppm > 999999)
        return shape_fail(p, nd, i, s, why, cap, "p must be 0 to below 1");
    if (!(ly = plan_layer(p, nd)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    ly->drop_ppm = nd->drop_ppm;
    return plan_output(p, nd, i, s, ly, s->c, s->h, s->w, why, cap);
}

static unsigned dropout_needs(const layer *ly)
{
    (void)ly;
    return FED_BACKEND_CAP_DROPOUT;
}

/* Layer l's key for this step: the model's key, the step and the layer
 * mixed. */
static uint64_t dropout_key(const fed_model *m, int l)
{
    return fed_backend_mix64(m->drop_key ^ (m->drop_step * 0xd1b54a32d192ed03ULL + (uint64_t)l));
}

/* Value k of the batch's row r is value r * numel + k of the step's
 * stream: the mask depends on neither the shards nor the thread. */
static void dropout_forward(fed_model *m, int l, const float *x, int off, int n)
{
    const layer *ly = &m->layers[l];
    size_t at = (size_t)off * ly->out_numel, cnt = (size_t)n * ly->out_numel;

    if (m->run.train)
        m->be->dropout(m->be, x, cnt, dropout_key(m, l), at, (float)(ly->drop_ppm * 1e-6),
                       m->ws.act[l] + at);
    else
        m->be->copy(m->be, m->ws.act[l] + at, x, cnt);
}

/* The same mask on the gradient (a backward runs only in training). */
static void dropout_input_grads(fed_model *m, int l, int u, const float *dy, float *dx, int off,
                                int n)
{
    const layer *ly = &m->layers[l];
    size_t at = (size_t)off * ly->out_numel;

    (void)u;
    m->be->dropout(m->be, dy + at, (size_t)n * ly->out_numel, dropout_key(m, l), at,
                   (float)(ly->drop_ppm * 1e-6), dx + at);
}

int fed_model_has_dropout(const fed_model *m)
{
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].ops->random)
            return 1;
    return 0;
}

void fed_model_set_dropout_key(fed_model *m, uint64_t key)
{
    m->drop_key = key;
    m->drop_step = 0;
}

/* ---- precision (--precision) ---- */

fed_err fed_model_precision_parse(const char *s, fed_precision *out)
{
    if (!strcmp(s, "fp32"))
        *out = FED_PRECISION_FP32;
    else if (!strcmp(s, "bf16"))
        *out = FED_PRECISION_BF16;
    else
        return FED_ERR_SPEC;
    return FED_OK;
}

fed_err fed_model_set_precision(fed_model *m, fed_precision p, char *why, size_t cap)
{
    fed_err err;

    if (p == FED_PRECISION_FP32) {
        m->gemm_be = m->be;
        if (m->bf16)
            m->bf16->destroy(m->bf16);
        m->bf16 = NULL;
        return FED_OK;
    }
    if (m->bf16)
        return FED_OK;
    if (m->ws.dpd_on)
        return fed_err_why(why, cap, FED_ERR_UNSUPPORTED,
                           "--precision bf16: DP-SGD stays fp32");
    if ((err = fed_backend_cpu_bf16(m->be, &m->bf16, why, cap)) != FED_OK)
        return err;
    m->gemm_be = m->bf16;
    return FED_OK;
}

fed_precision fed_model_precision(const fed_model *m)
{
    return m->bf16 ? FED_PRECISION_BF16 : FED_PRECISION_FP32;
}

/* ---- batch norm ---- */

/* PyTorch's BatchNorm1d (after a linear layer or a flatten: features, as
 * (F, 1, 1)) and BatchNorm2d (after a conv: channels over their maps) in
 * one: per channel c of its (c, h, w) input, over the batch's n h w values.
 * Training normalizes with the batch's mean and biased variance, which a
 * phase of their own computes once every row's input is there (a unit a
 * share of the channels, each summed whole in row order: the same bits
 * for any shard count), and updates the running statistics with momentum
 * and the unbiased variance; evaluation normalizes with the running ones.
 * Tensors as PyTorch's state_dict: weight (1), bias (0), then running_mean
 * (0), running_var (1) and num_batches_tracked (0), which are not trained.
 * The backward is the whole one, through the batch's statistics: the input
 * gradient needs the weight and bias gradients (its sums) of every
 * channel, so it is a phase of its own after theirs. */
#define BN_MOMENTUM 0.1
#define BN_EPS 1e-5

static fed_err bn_plan(plan *p, const node_desc *nd, int i, dims *s, char *why, size_t cap)
{
    layer *ly;
    int C = s->c;
    fed_err err;

    if (!(nd->momentum >= 0.0 && nd->momentum <= 1.0) || !(nd->eps >= 0.0 && nd->eps <= 1.0))
        return shape_fail(p, nd, i, s, why, cap, "momentum and eps must be in (0, 1]");
    if (!(ly = plan_layer(p, nd)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model spec: out of memory");
    ly->momentum = (float)(nd->momentum > 0.0 ? nd->momentum : BN_MOMENTUM);
    ly->eps = (float)(nd->eps > 0.0 ? nd->eps : BN_EPS);
    ly->aux_numel = 2 * (size_t)C; /* the batch's mean and variance */
    if ((err = plan_output(p, nd, i, s, ly, s->c, s->h, s->w, why, cap)) != FED_OK ||
        (err = plan_weight_bias(p, nd, ly, 1, &C, why, cap)) != FED_OK)
        return err;
    /* every tensor of it is a norm's (--local-bn keeps them at the sites) */
    p->tensors[p->ntensors - 2].flags |= FED_TENSOR_NORM;
    p->tensors[p->ntensors - 1].flags |= FED_TENSOR_NORM;
    if ((err = plan_tensor(p, nd->name, "running_mean", 1, &C, &ly->st_off, why, cap)) != FED_OK)
        return err;
    p->tensors[p->ntensors - 1].flags = FED_TENSOR_SHARED | FED_TENSOR_NORM;
    if ((err = plan_tensor(p, nd->name, "running_var", 1, &C, &ly->st_off, why, cap)) != FED_OK)
        return err;
    p->tensors[p->ntensors - 1].flags = FED_TENSOR_SHARED | FED_TENSOR_NORM;
    if ((err = plan_tensor(p, nd->name, "num_batches_tracked", 0, NULL, &ly->st_off, why,
                           cap)) != FED_OK)
        return err;
    p->tensors[p->ntensors - 1].flags = FED_TENSOR_SHARED | FED_TENSOR_INT64 | FED_TENSOR_NORM;
    ly->st_off -= 2 * (size_t)C; /* back to running_mean */
    return FED_OK;
}

static unsigned bn_needs(const layer *ly)
{
    (void)ly;
    return FED_BACKEND_CAP_BATCHNORM;
}

/* The values of one channel in a sample (h w). */
static int bn_hw(const layer *ly)
{
    return ly->out_h * ly->out_w;
}

/* Unit u's share of the channels: the batch's mean and variance over all
 * n rows, the running statistics updated (and counted, by unit 0). */
static void bn_stats(fed_model *m, int l, int u, int n)
{
    const layer *ly = &m->layers[l];
    int C = ly->out_c, S = m->shards;
    int c0 = (int)((long)C * u / S), c1 = (int)((long)C * (u + 1) / S);
    float *st = m->ws.aux[l], *run = m->params + ly->st_off;

    if (m->run.no_running) /* a pipeline stage's forward: its backward updates them */
        run = NULL;
    if (c0 < c1)
        m->be->bn_stats(m->be, layer_in(m, l), n, C, bn_hw(ly), c0, c1, st, st + C, run,
                        run ? run + C : NULL, ly->momentum);
    if (run && u == 0 && (long)n * bn_hw(ly) > 1) /* num_batches_tracked */
        m->be->axpy(m->be, 1, 1.0f, m->ws.ones, run + 2 * C);
}

/* The batch's statistics in training, the running ones in evaluation. */
static const float *bn_moments(const fed_model *m, const layer *ly, int l)
{
    return m->run.batch_stats ? m->ws.aux[l] : m->params + ly->st_off;
}

static void bn_forward(fed_model *m, int l, const float *x, int off, int n)
{
    const layer *ly = &m->layers[l];
    const float *st = bn_moments(m, ly, l);

    m->be->bn_fwd(m->be, x, m->ws.act[l] + (size_t)off * ly->out_numel, n, ly->out_c, bn_hw(ly),
                  st, st + ly->out_c, m->params + ly->w_off, m->params + ly->b_off, ly->eps,
                  ly->relu);
}

/* The weight and bias gradients of chunk u's channels: the sums the input
 * gradient takes too. */
static void bn_weight_grads(fed_model *m, int l, int u, const float *dy, int n)
{
    const layer *ly = &m->layers[l];
    const float *st = m->ws.aux[l];
    int r0, r1;

    row_chunk(ly->out_c, m->shards, u, &r0, &r1);
    if (r0 < r1)
        m->be->bn_bwd_params(m->be, dy, layer_in(m, l), n, ly->out_c, bn_hw(ly), r0, r1, st,
                             st + ly->out_c, ly->eps, m->grads + ly->w_off,
                             m->grads + ly->b_off);
}

static void bn_input_grads(fed_model *m, int l, int u, const float *dy, float *dx, int off,
                           int n)
{
    const layer *ly = &m->layers[l];
    const float *st = m->ws.aux[l];
    size_t at = (size_t)off * ly->out_numel;

    (void)u;
    m->be->bn_bwd_input(m->be, dy + at, layer_in(m, l) + at, dx + at, n, ly->out_c, bn_hw(ly), st,
                        st + ly->out_c, ly->eps, m->params + ly->w_off, m->grads + ly->w_off,
                        m->grads + ly->b_off, (long)batch_rows(m) * bn_hw(ly));
}

/* the statistics' two passes and the normalization; the backward's sums
 * and input gradient */
static double bn_flops(const layer *ly, int first)
{
    return (first ? 7.0 : 10.0) * ly->out_numel;
}

static void bn_init(const layer *ly, float *host, fed_rng *rng)
{
    int C = ly->out_c;

    (void)rng;
    for (int c = 0; c < C; c++) {
        host[ly->w_off + c] = 1.0f;
        host[ly->b_off + c] = 0.0f;
        host[ly->st_off + c] = 0.0f;
        host[ly->st_off + C + c] = 1.0f;
    }
    host[ly->st_off + 2 * C] = 0.0f;
}

/* ---- the table ---- */

static const layer_ops LAYER_KINDS[] = {
    {.kind = "linear", .letter = 'L', .opts = OPT_OUT | OPT_B, .plan = linear_plan,
     .forward = linear_forward,
     .forward_cols = linear_forward_cols, .input_grads = linear_input_grads,
     .weight_grads = linear_weight_grads, .flops = linear_flops, .init = linear_init,
     .dp_norm2 = linear_dp_norm2, .fuses_relu = 1, .keep_dy = 1},
    {.kind = "conv", .letter = 'C',
     .opts = OPT_OUT | OPT_K | OPT_S | OPT_P | OPT_D | OPT_G | OPT_B,
     .plan = conv_plan, .needs = conv_needs, .forward = conv_forward,
     .input_grads = conv_input_grads, .weight_grads = conv_weight_grads, .flops = conv_flops,
     .init = conv_init, .dp_norm2 = conv_dp_norm2, .prepare = conv_prepare, .fuses_relu = 1},
    {.kind = "maxpool", .letter = 'M', .opts = OPT_K | OPT_S | OPT_P, .plan = maxpool_plan,
     .needs = maxpool_needs, .forward = maxpool_forward,
     .input_grads = maxpool_input_grads, .flops = pool_flops},
    {.kind = "avgpool", .letter = 'A', .opts = OPT_K | OPT_S | OPT_P, .plan = avgpool_plan,
     .needs = avgpool_needs, .forward = avgpool_forward,
     .input_grads = avgpool_input_grads, .flops = pool_flops},
    {.kind = "global_avgpool", .letter = 'P', .plan = gap_plan, .needs = avgpool_needs,
     .forward = avgpool_forward, .input_grads = avgpool_input_grads, .flops = pool_flops},
    {.kind = "relu", .letter = 'R', .plan = relu_plan},
    {.kind = "bce", .letter = 'B', .plan = loss_plan, .loss = LOSS_BCE},
    {.kind = "add", .letter = '+', .plan = add_plan, .needs = act_needs, .forward = add_forward,
     .input_grads = add_input_grads, .input2_grads = add_input2_grads, .flops = act_flops,
     .fuses_relu = 1},
    {.kind = "concat", .letter = '&', .plan = concat_plan, .forward = concat_forward,
     .input_grads = concat_input_grads, .input2_grads = concat_input2_grads,
     .flops = act_flops},
#define ACT_KIND(k, l, a)                                                                     \
    {.kind = k, .letter = l, .act = a, .plan = act_plan, .needs = act_needs,                  \
     .forward = act_forward, .input_grads = act_input_grads, .flops = act_flops}
    ACT_KIND("leaky_relu", 'Y', ACT_LEAKY_RELU),
    ACT_KIND("gelu", 'G', ACT_GELU),
    ACT_KIND("silu", 'S', ACT_SILU),
    ACT_KIND("sigmoid", 'Z', ACT_SIGMOID),
    ACT_KIND("tanh", 'T', ACT_TANH),
#undef ACT_KIND
    {.kind = "flatten", .letter = 'F', .plan = flatten_plan},
    {.kind = "embedding", .letter = 'E', .opts = OPT_OUT | OPT_N | OPT_C, .plan = embedding_plan,
     .needs = embedding_needs, .forward = embedding_forward,
     .weight_grads = embedding_weight_grads, .flops = act_flops, .init = embedding_init,
     .dp_norm2 = embedding_dp_norm2, .check = embedding_check, .reads_row = 1, .ids = 1},
    {.kind = "numeric", .letter = 'X', .plan = numeric_plan, .forward = numeric_forward,
     .flops = act_flops, .reads_row = 1},
    {.kind = "mse", .letter = 'Q', .plan = loss_plan, .loss = LOSS_MSE},
    {.kind = "layernorm", .letter = 'V', .plan = layernorm_plan, .needs = norm_needs,
     .forward = norm_forward, .input_grads = norm_input_grads,
     .weight_grads = norm_weight_grads, .flops = norm_flops, .init = norm_init,
     .dp_norm2 = norm_dp_norm2, .fuses_relu = 1},
    {.kind = "groupnorm", .letter = 'U', .opts = OPT_G, .plan = groupnorm_plan,
     .needs = norm_needs, .forward = norm_forward, .input_grads = norm_input_grads,
     .weight_grads = norm_weight_grads, .flops = norm_flops, .init = norm_init,
     .dp_norm2 = norm_dp_norm2, .fuses_relu = 1},
    {.kind = "dropout", .letter = 'D', .opts = OPT_R, .plan = dropout_plan,
     .needs = dropout_needs, .forward = dropout_forward, .input_grads = dropout_input_grads,
     .flops = act_flops, .random = 1},
    {.kind = "batchnorm", .letter = 'N', .opts = OPT_EM, .plan = bn_plan, .needs = bn_needs,
     .forward = bn_forward, .stats = bn_stats, .input_grads = bn_input_grads,
     .weight_grads = bn_weight_grads, .flops = bn_flops, .init = bn_init,
     .dp_refusal = "a sample's gradient depends on the rest of its batch, so no clip bounds "
                   "it; use groupnorm, whose statistics are each sample's own",
     .input_after_weights = 1, .fuses_relu = 1, .batch_stats = 1},
};

static const layer_ops *kind_find(const char *kind)
{
    for (size_t i = 0; i < sizeof LAYER_KINDS / sizeof LAYER_KINDS[0]; i++)
        if (!strcmp(LAYER_KINDS[i].kind, kind))
            return &LAYER_KINDS[i];
    return NULL;
}

static const layer_ops *kind_of_letter(char letter)
{
    for (size_t i = 0; i < sizeof LAYER_KINDS / sizeof LAYER_KINDS[0]; i++)
        if (LAYER_KINDS[i].letter == letter)
            return &LAYER_KINDS[i];
    return NULL;
}

/* Input gradients of layer l for rows [off, off + n), into its sources'
 * gradient buffers (written by the first, added by the others, masked by
 * the source's ReLU by the last); the model's input has none, a pipeline
 * stage's input the buffer ws.gin. */
static void input_grads(fed_model *m, int l, int u, const float *dy, int off, int n)
{
    fed_backend *be = m->be;
    const layer *ly = &m->layers[l];

    for (int e = 0; e < 2; e++) {
        int t = e ? ly->src2 : ly->src;
        size_t numel, at, cnt;
        float *to, *gt;

        if (e && !ly->ops->input2_grads)
            continue; /* no second input */
        if (t < 0 && !m->ws.gin)
            continue; /* the model's input */
        /* a stage's input: its gradient goes back to the stage before,
           whose last layer applies its own relu mask */
        numel = t < 0 ? (size_t)m->in.c * m->in.h * m->in.w : (size_t)m->layers[t].out_numel;
        gt = t < 0 ? m->ws.gin : m->ws.g[t];
        at = (size_t)off * numel;
        cnt = (size_t)n * numel;
        to = ly->first_w[e] ? gt : m->ws.gx; /* its rows of gx, to be added */
        if (e == 0)
            ly->ops->input_grads(m, l, u, dy, to, off, n);
        else
            ly->ops->input2_grads(m, l, dy, to, off, n);
        if (!ly->first_w[e])
            be->axpy(be, cnt, 1.0f, m->ws.gx + at, gt + at);
        if (t >= 0 && ly->last_w[e] && m->layers[t].relu)
            be->relu_bwd(be, gt + at, m->ws.act[t] + at, cnt);
    }
}

/* Weight and bias gradients of layer l, output rows of chunk u, over all n
 * samples; nothing for a layer without parameters. */
static void weight_grads(fed_model *m, int l, int u, const float *dy, int n)
{
    if (m->layers[l].ops->weight_grads)
        m->layers[l].ops->weight_grads(m, l, u, dy, n);
}

static fed_err upload_rows(fed_model *m, int off, int n)
{
    fed_backend *be = m->be;
    const fed_batch *b = m->run.batch;
    size_t feat = (size_t)m->in.c * m->in.h * m->in.w, cnt = (size_t)n * feat;
    size_t at = (size_t)off * feat;
    fed_err err;

    if (b->x_u8) {
        float mul, add;

        fed_model_input_map(m->in.scale, &mul, &add);
        err = be->upload(be, m->ws.x_u8 + at, b->x_u8 + at, cnt);
        if (err == FED_OK && !b->x_map) {
            be->u8_to_f32(be, m->ws.x + at, m->ws.x_u8 + at, cnt, mul, add);
        } else if (err == FED_OK) { /* per channel: the shared statistics */
            size_t plane = (size_t)m->in.h * m->in.w;

            for (size_t p = at; p < at + cnt; p += plane) {
                size_t k = p / plane % (size_t)m->in.c;

                be->u8_to_f32(be, m->ws.x + p, m->ws.x_u8 + p, plane, b->x_map[2 * k],
                              b->x_map[2 * k + 1]);
            }
        }
    } else {
        err = be->upload(be, m->ws.x + at, b->x_f32 + at, cnt * sizeof(float));
    }
    if (err == FED_OK && m->loss == LOSS_MSE) /* the targets the loss reads (check_batch) */
        err = be->upload(be, m->ws.t + (size_t)off * m->nlogits, b->y_f32 + (size_t)off * m->nlogits,
                         (size_t)n * m->nlogits * sizeof(float));
    else if (err == FED_OK)
        err = be->upload(be, m->ws.y + off, b->y + off, (size_t)n * sizeof(int32_t));
    return err;
}

/* Layer 0 (linear) by output columns: unit u computes y[:, r0:r1] for the
 * whole batch from its own rows of W, the rows it updates (so they stay in
 * its core's cache), and each core reads half of W instead of all of it. */
/* Binary cross-entropy with logits (n logits z, labels y in {0, 1}): the
 * summed loss softplus(z) - y z, the count of (z > 0) == y, and, when
 * grad_scale, the logits replaced by (sigmoid(z) - y) * grad_scale. Host
 * memory (backend_fits checked). */
static void bce_loss(float *z, const int32_t *y, int n, const float *grad_scale, double *loss,
                     int *correct)
{
    double sum = 0.0;
    int right = 0;

    for (int i = 0; i < n; i++) {
        double x = z[i], t = y[i] == 1;

        sum += (x > 0 ? x : 0.0) - t * x + log1p(exp(-fabs(x)));
        right += (x > 0) == (y[i] == 1);
        if (grad_scale)
            z[i] = (float)((act_sigmoid(x) - t) * *grad_scale);
    }
    *loss = sum;
    *correct = right;
}

/* The mean squared error of n rows of C outputs z against targets t,
 * each row's (its C errors' mean) summed into *loss, and, when grad_scale,
 * z replaced by 2 (z - t) / C * grad_scale. Host memory. */
static void mse_loss(float *z, const float *t, int n, int C, const float *grad_scale,
                     double *loss)
{
    double sum = 0.0;

    for (size_t k = 0; k < (size_t)n * C; k++) {
        double e = (double)z[k] - t[k];

        sum += e * e;
        if (grad_scale)
            z[k] = (float)(2.0 * e / C * *grad_scale);
    }
    *loss = sum / C;
}

/* Layer l's forward of rows [off, off + n), from its input's rows. */
static void forward_layer(fed_model *m, int l, int off, int n)
{
    int t = m->layers[l].src;
    size_t feat = (size_t)m->in.c * m->in.h * m->in.w;
    const float *x = t < 0 ? m->ws.x + (size_t)off * feat
                           : m->ws.act[t] + (size_t)off * m->layers[t].out_numel;

    m->layers[l].ops->forward(m, l, x, off, n);
}

/* Unit u's rows through layers [from, to), then the loss when to is the
 * end. */
static void forward_rows(fed_model *m, int u, int from, int to)
{
    step_run *r = &m->run;
    int off = r->off[u], n = r->n[u], last = m->nlayers - 1, C = m->nlogits;
    float *logits;

    if (n == 0 || r->err[u] != FED_OK)
        return;
    for (int l = from; l < to; l++)
        forward_layer(m, l, off, n);
    if (to <= last)
        return;
    logits = m->ws.act[last] + (size_t)off * C;
    if (stage_mid(m)) { /* no loss: the next stage's gradient of the output, masked by
                           its relu as input_grads masks a source's */
        const float *dy = r->ext_dy ? r->ext_dy + (size_t)off * C : NULL;

        r->loss[u] = 0.0;
        r->correct[u] = 0;
        for (size_t k = 0; r->train && dy && k < (size_t)n * C; k++)
            logits[k] = m->layers[last].relu && !(logits[k] > 0.0f) ? 0.0f : dy[k];
        return;
    }
    if (m->loss == LOSS_MSE) {
        r->correct[u] = 0; /* no classes */
        mse_loss(logits, m->ws.t + (size_t)off * C, n, C, r->train ? &r->grad_scale : NULL,
                 &r->loss[u]);
    } else if (m->loss == LOSS_BCE)
        bce_loss(logits, m->ws.y + off, n, r->train ? &r->grad_scale : NULL, &r->loss[u],
                 &r->correct[u]);
    else if (r->train)
        m->be->softmax_xent(m->be, logits, m->ws.y + off, n, C, r->grad_scale, &r->loss[u],
                            &r->correct[u]);
    else
        m->be->softmax_eval(m->be, logits, m->ws.y + off, n, C, &r->loss[u], &r->correct[u]);
}

/* A forward phase of rows: the first uploads them. */
static void forward_unit(fed_model *m, int ph, int u)
{
    step_run *r = &m->run;

    if (ph == 0) {
        r->loss[u] = 0.0;
        r->correct[u] = 0;
        if (r->n[u] > 0)
            r->err[u] = upload_rows(m, r->off[u], r->n[u]);
    }
    forward_rows(m, u, r->sched[ph].l, r->sched[ph].l2);
}

/* Layer l's output gradient: the last layer's is its output's buffer (the
 * loss writes it there), the others' ws.g[l]. Only a backward phase asks:
 * a forward phase's l may be past the last layer. */
static float *out_grad(fed_model *m, int l)
{
    return l == m->nlayers - 1 ? m->ws.act[l] : m->ws.g[l];
}

/* DP-SGD's phases, one per layer l from the last, unit u's own rows: layer
 * l's part of each sample's squared gradient norm, then the input gradient
 * into the layer below (a phase per layer, as the backward's: the gradient
 * buffers are laid out per layer, so one unit's rows of one layer overlap
 * another's rows of the next); after layer 0, each sample's dlogits scaled
 * by min(1, clip / norm) * scale. Each kind's dp_norm2 entry gives its part
 * (linear: |dy_i|^2 (|x_i|^2 + 1), no per-sample gradient made; conv: the
 * per-sample weight gradient made in the unit's scratch). Reads the CPU
 * backend's buffers directly (DP-SGD is CPU only). The backward phases then
 * run from the scaled dlogits: backpropagation is linear in them, so each
 * layer's gradient becomes sum_i scale_i g_i. */
static void dp_unit(fed_model *m, int l, int u)
{
    step_run *r = &m->run;
    const layer *ly = &m->layers[l];
    int L = m->nlayers, off = r->off[u], n = r->n[u], C = m->nlogits;
    double *norm2 = m->ws.norm2 + off;
    int kept = m->ws.dpd_on; /* the output gradients kept per layer */
    float *dy = out_grad(m, l), *dl; /* (kept: dpd is g) */
    const float *x = layer_in(m, l);

    if (n == 0 || r->err[u] != FED_OK)
        return;
    if (l == L - 1)
        for (int i = 0; i < n; i++)
            norm2[i] = 0.0;
    if (ly->ops->dp_norm2)
        ly->ops->dp_norm2(m, l, u, dy, x, off, n, norm2);
    if (l > 0) {
        input_grads(m, l, u, dy, off, n);
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
    int r0, r1, rows = ly->wrows ? ly->wrows : ly->out_c;

    if (!ly->ops->weight_grads)
        return;
    row_chunk(rows, m->shards, u, &r0, &r1);
    if (r0 >= r1)
        return;
    per_row = ly->w_numel / (size_t)rows;
    m->run.update(m->run.update_ctx, ly->w_off + (size_t)r0 * per_row,
                  ly->w_off + (size_t)r1 * per_row);
    per_row = ly->b_numel / (size_t)rows;
    if (per_row)
        m->run.update(m->run.update_ctx, ly->b_off + (size_t)r0 * per_row,
                      ly->b_off + (size_t)r1 * per_row);
}

static void recompute_unit(fed_model *m, int s, int u);

static void run_unit(fed_model *m, int ph, int u)
{
    step_run *r = &m->run;
    int L = m->nlayers, ntotal = batch_rows(m), l = r->sched[ph].l;
    float *dy;

    switch (r->sched[ph].what) {
    case PH_FWD:
        forward_unit(m, ph, u);
        return;
    case PH_COLS:
        m->layers[0].ops->forward_cols(m, u, ntotal);
        return;
    case PH_STATS:
        m->layers[l].ops->stats(m, l, u, ntotal);
        return;
    case PH_DP:
        dp_unit(m, l, u);
        return;
    case PH_BWD_IN:
        if (r->n[u] > 0)
            input_grads(m, l, u, out_grad(m, l), r->off[u], r->n[u]);
        return;
    default:
        break;
    }
    if (l < 0) { /* --recompute: segment -1 - l's forward again */
        recompute_unit(m, -1 - l, u);
        return;
    }
    dy = out_grad(m, l);
    if (r->dp && m->ws.dpd_on) { /* every layer's output gradient is kept, scaled */
        weight_grads(m, l, u, l == L - 1 ? m->ws.act[L - 1] : m->ws.dpd[l], ntotal);
        return;
    }
    weight_grads(m, l, u, dy, ntotal);
    if ((l > 0 || m->ws.gin) && r->n[u] > 0 && !m->layers[l].ops->input_after_weights)
        input_grads(m, l, u, dy, r->off[u], r->n[u]);
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

/* ---- recomputed activations (--recompute K) ---- */

/* Segment s's layers [s K, s K + K), unit u's rows, forward again from
 * the outputs kept: every layer that keeps no output, and every one whose
 * im2col or argmax lives in a slot. The same rows, shards and dropout step
 * as the step's forward, so the same values bit for bit. Only forwards: a
 * batch norm normalizes with the batch statistics its PH_STATS phase left
 * in ws.aux (its own buffer, never a slot), which runs once a step, so
 * the running statistics and their counter are updated once. */
static void recompute_unit(fed_model *m, int s, int u)
{
    step_run *r = &m->run;
    int K = m->recompute, end = (s + 1) * K < m->nlayers ? (s + 1) * K : m->nlayers;

    if (r->n[u] == 0 || r->err[u] != FED_OK)
        return;
    for (int l = s * K; l < end; l++)
        if (!m->keep[l] || ws_borrows(m, l, WS_COL) || ws_borrows(m, l, WS_ARG))
            forward_layer(m, l, r->off[u], r->n[u]);
}

/* The layers that keep their output under --recompute K: the last of each
 * segment, the logits, a layer 0 split by columns (its forward is a phase
 * of its own), and any layer a later segment reads (a residual's source). */
static void recompute_keep(fed_model *m, int K)
{
    int L = m->nlayers;

    for (int l = 0; l < L; l++)
        m->keep[l] = l % K == K - 1 || l == L - 1;
    if (m->shards > 1 && m->layers[0].ops->forward_cols)
        m->keep[0] = 1;
    for (int c = 0; c < L; c++)
        for (int e = 0; e < 2; e++) {
            int t = e ? m->layers[c].src2 : m->layers[c].src;

            if (t >= 0 && t / K != c / K)
                m->keep[t] = 1;
        }
}

fed_err fed_model_set_recompute(fed_model *m, int K)
{
    int L = m->nlayers, nseg, n = 0;
    fed_err err;

    if (K < 1)
        return FED_ERR_INVAL;
    if (K == m->recompute)
        return FED_OK;
    if (K > 1 && (m->ws.dpd_on || !(m->be->caps & FED_BACKEND_CAP_HOST_MEMORY))) {
        fed_log(FED_LOG_ERROR, "model: --recompute runs %s", m->ws.dpd_on
                ? "without DP-SGD" : "on the CPU backend only");
        return FED_ERR_UNSUPPORTED;
    }
    for (int l = 0; K > 1 && l < L; l++)
        if (m->layers[l].ops->batch_stats && !m->layers[l].ops->stats) {
            fed_log(FED_LOG_ERROR, "model: --recompute: layer '%s' (%s) computes its batch "
                    "statistics in the forward, which a recomputation would do twice",
                    m->layers[l].name, m->layers[l].ops->kind);
            return FED_ERR_UNSUPPORTED;
        }
    ws_fini(m, &m->ws);
    memset(&m->ws, 0, sizeof m->ws);
    m->bytes = 2 * m->nparams * sizeof(float);
    fed_free(m->keep);
    fed_free(m->bseq);
    m->keep = NULL;
    m->bseq = NULL;
    m->nbseq = 0;
    m->recompute = K;
    nseg = (L + K - 1) / K;
    if (K > 1 && (!(m->keep = fed_calloc((size_t)L, 1)) ||
                  !(m->bseq = fed_calloc((size_t)(L + nseg), sizeof *m->bseq)))) {
        m->recompute = 1; /* a plain workspace again */
        err = FED_ERR_NOMEM;
        goto out;
    }
    if (K > 1) {
        recompute_keep(m, K);
        /* the last segment is still whole from the forward */
        for (int s = nseg - 1; s >= 0; s--) {
            if (s < nseg - 1)
                m->bseq[n++] = -1 - s;
            for (int l = ((s + 1) * K < L ? (s + 1) * K : L) - 1; l >= s * K; l--)
                m->bseq[n++] = l;
        }
        m->nbseq = n;
    }
    err = ws_init(m, &m->ws);
out:
    if (err != FED_OK) {
        fed_log(FED_LOG_ERROR, "model: --recompute %d: out of memory", K);
        if (m->recompute == 1 && ws_init(m, &m->ws) != FED_OK)
            return FED_ERR_NOMEM;
    }
    return err;
}

int fed_model_recompute(const fed_model *m)
{
    return m->recompute;
}

double fed_model_recompute_flops(const fed_model *m)
{
    int K = m->recompute, L = m->nlayers;
    double f = 0.0;

    for (int l = 0; K > 1 && l < (L - 1) / K * K; l++) /* the segments before the last */
        if (!m->keep[l] || ws_borrows(m, l, WS_COL) || ws_borrows(m, l, WS_ARG))
            f += m->layers[l].ops->flops(&m->layers[l], 1) / 2.0;
    return f;
}

size_t fed_model_activation_bytes(const fed_model *m)
{
    return m->ws.act_bytes;
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
    if (!b || b->n < 1 || b->n > max || (!b->x_u8 == !b->x_f32) ||
        (m->loss == LOSS_MSE ? !b->y_f32 : !b->y))
        return FED_ERR_INVAL;
    for (int i = 0; m->loss == LOSS_MSE && i < b->n * m->nlogits; i++)
        if (!isfinite(b->y_f32[i]))
            return FED_ERR_NAN;
    for (int i = 0; m->loss != LOSS_MSE && i < b->n; i++)
        if (b->y[i] < 0 || b->y[i] >= m->in.classes)
            return FED_ERR_RANGE;
    for (int l = 0; l < m->nlayers; l++) {
        fed_err err = m->layers[l].ops->check ? m->layers[l].ops->check(m, l, b) : FED_OK;

        if (err != FED_OK)
            return err;
    }
    return FED_OK;
}

/* The step's phases into r->sched (at most 5 L + 3): the forward by rows,
 * cut before each layer whose statistics need the whole batch (training
 * with batch norm) by a phase of those statistics; layer 0 by columns
 * when it is linear and shared out; DP-SGD's norm phases; a backward phase
 * per layer from the last (in bseq's order under --recompute, with its
 * segments' forwards again), two for a layer whose input gradient waits
 * for every unit's weight gradients. A recomputed segment holds no
 * statistics phase: its batch norms read the forward's (recompute_unit). */
static void schedule(fed_model *m)
{
    step_run *r = &m->run;
    phase *s = r->sched;
    int k = 0, from = 0, L = m->nlayers;

    s[k++] = (phase){PH_FWD, 0, 0}; /* the upload, then layers [0, ...) */
    if (m->shards > 1 && m->layers[0].ops->forward_cols && m->stage_lo == 0) {
        s[k++] = (phase){PH_COLS, 0, 0};
        s[k++] = (phase){PH_FWD, 1, 1};
        from = 1;
    }
    for (int l = from; l < L; l++)
        if (r->batch_stats && m->layers[l].ops->stats) {
            s[k - 1].l2 = l; /* the open forward phase ends before it */
            s[k++] = (phase){PH_STATS, l, 0};
            s[k++] = (phase){PH_FWD, l, l};
        } else if (ws_cut_before(m, l, s[k - 1].l)) {
            s[k - 1].l2 = l;
            s[k++] = (phase){PH_FWD, l, l};
        }
    s[k - 1].l2 = L;
    for (int l = L - 1; r->train && r->dp && l >= 0; l--)
        s[k++] = (phase){PH_DP, l, 0};
    for (int i = 0; r->train && i < (m->bseq ? m->nbseq : L); i++) {
        int l = m->bseq ? m->bseq[i] : L - 1 - i; /* < 0: --recompute's segment */

        s[k++] = (phase){PH_BWD, l, 0};
        if ((l > 0 || m->ws.gin) && m->layers[l].ops->input_after_weights)
            s[k++] = (phase){PH_BWD_IN, l, 0};
    }
    r->nphases = k;
}

/* Runs b (n <= max_batch) as the phases above in mode (RUN_*); stats summed
 * in unit order. */
static fed_err run_batch(fed_model *m, const fed_batch *b, int mode, fed_model_update_fn update,
                         void *update_ctx, fed_step_stats *st)
{
    step_run *r = &m->run;
    int S = m->shards;
    fed_err err = FED_OK;

    r->batch = b;
    r->train = mode == RUN_TRAIN;
    r->batch_stats = mode != RUN_EVAL;
    /* DP-SGD wants each sample's gradient of its own loss */
    r->grad_scale = r->dp ? 1.0f : 1.0f / (float)b->n;
    r->update = update;
    r->update_ctx = update_ctx;
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].ops->prepare)
            m->layers[l].ops->prepare(m, l);
    schedule(m);
    for (int u = 0; u < S; u++) {
        r->off[u] = (int)((long)b->n * u / S);
        r->n[u] = (int)((long)b->n * (u + 1) / S) - r->off[u];
        r->err[u] = FED_OK;
    }
    if (r->train)
        m->drop_step++; /* dropout's masks change every training step */
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
    return run_batch(m, b, RUN_TRAIN, update, ctx, st);
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
    if (m->ws.dpd_on)
        return FED_OK;
    for (int l = 0; l < m->nlayers; l++)
        if (!m->layers[l].ops->keep_dy || m->layers[l].src != l - 1)
            return FED_OK; /* a chain of linear layers only */
    for (int l = 0; l + 1 < m->nlayers; l++) /* the output gradients, kept where they are */
        m->ws.dpd[l] = m->ws.g[l];
    m->ws.dpd_on = 1;
    return FED_OK;
}

fed_err fed_model_dp_check(const fed_model *m, char *why, size_t cap)
{
    if (!(m->be->caps & FED_BACKEND_CAP_DP_SGD))
        return fed_err_why(why, cap, FED_ERR_UNSUPPORTED,
                           "model: DP-SGD needs per-sample gradient norms, which the %s backend "
                           "lacks", m->be->name);
    if (m->bf16)
        return fed_err_why(why, cap, FED_ERR_UNSUPPORTED,
                           "model: DP-SGD's per-sample norms, clipping and noise stay fp32: "
                           "train without --precision bf16");
    if (m->recompute > 1)
        return fed_err_why(why, cap, FED_ERR_UNSUPPORTED,
                           "model: DP-SGD's per-sample norms read every layer's output "
                           "gradient: train without --recompute");
    for (int l = 0; l < m->nlayers; l++) {
        const layer *ly = &m->layers[l];

        if (ly->ops->dp_refusal)
            return fed_err_why(why, cap, FED_ERR_UNSUPPORTED,
                               "model: DP-SGD cannot train layer '%s' (%s): %s", ly->name,
                               ly->ops->kind, ly->ops->dp_refusal);
        if (ly->ops->weight_grads && !ly->ops->dp_norm2)
            return fed_err_why(why, cap, FED_ERR_UNSUPPORTED,
                               "model: DP-SGD has no per-sample gradient norm for layer '%s' "
                               "(%s): train without --dp-sgd, or use a layer that has one",
                               ly->name, ly->ops->kind);
    }
    return FED_OK;
}

fed_err fed_model_dp_grads(fed_model *m, const fed_batch *b, float clip, float scale,
                           int accumulate, float *norms, fed_step_stats *st)
{
    step_run *r = &m->run;
    char why[320];
    fed_err err;

    if (!(m->be->caps & FED_BACKEND_CAP_DP_SGD) || !m->ws.norm2)
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
    if ((err = fed_model_dp_check(m, why, sizeof why)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "%s", why);
        return err;
    }
    if ((err = dp_keep_grads(m)) != FED_OK)
        return err;
    r->dp = 1;
    r->accumulate = accumulate != 0;
    r->dp_clip = clip;
    r->dp_scale = scale;
    err = run_batch(m, b, RUN_TRAIN, NULL, NULL, st);
    r->dp = 0;
    r->accumulate = 0;
    if (err == FED_OK && norms)
        for (int i = 0; i < b->n; i++)
            norms[i] = (float)m->ws.norm2[i];
    return err;
}

static fed_err logits_in(fed_model *m, const fed_batch *b, int mode, float *out)
{
    fed_err err = check_batch(m, b, m->max_batch);

    if (err != FED_OK || (err = run_batch(m, b, mode, NULL, NULL, NULL)) != FED_OK)
        return err;
    return m->be->download(m->be, out, m->ws.act[m->nlayers - 1],
                           (size_t)b->n * m->nlogits * sizeof(float));
}

fed_err fed_model_logits(fed_model *m, const fed_batch *b, float *out)
{
    return logits_in(m, b, RUN_EVAL, out);
}

fed_err fed_model_logits_train(fed_model *m, const fed_batch *b, float *out)
{
    return logits_in(m, b, RUN_FORWARD_TRAIN, out);
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

/* n rows of K floats at the start of p into what fed_model_predict gives
 * per row, doubles over the whole of p: cross-entropy's softmax, bce's two
 * probabilities (1 - sigmoid(z), sigmoid(z)) of its one logit, mse's
 * outputs as they are. From the last row to the first, as softmax_rows. */
static void predictions(const fed_model *m, double *p, int n)
{
    const float *z = (const float *)p;
    int K = m->nlogits;

    if (m->loss == LOSS_XENT) {
        softmax_rows(p, n, K);
        return;
    }
    for (long k = (long)n * K - 1; k >= 0; k--) {
        double v = z[k];

        if (m->loss == LOSS_BCE) {
            p[2 * k + 1] = act_sigmoid(v);
            p[2 * k] = 1.0 - p[2 * k + 1];
        } else {
            p[k] = v;
        }
    }
}

int fed_model_regression(const fed_model *m)
{
    return m->loss == LOSS_MSE;
}

int fed_model_predict_width(const fed_model *m)
{
    return m->loss == LOSS_MSE ? m->nlogits : m->in.classes;
}

fed_err fed_model_predict(fed_model *m, const fed_batch *b, fed_step_stats *st, double *prob)
{
    size_t feat = (size_t)m->in.c * m->in.h * m->in.w;
    int W = fed_model_predict_width(m), K = m->nlogits;
    fed_err err = check_batch(m, b, b ? b->n : 0);

    if (err != FED_OK)
        return err;
    for (int off = 0; off < b->n && err == FED_OK; off += m->max_batch) {
        fed_batch part = *b;
        double *dst = prob ? prob + (size_t)off * W : NULL;

        part.n = b->n - off < m->max_batch ? b->n - off : m->max_batch;
        part.x_u8 = b->x_u8 ? b->x_u8 + (size_t)off * feat : NULL;
        part.x_f32 = b->x_f32 ? b->x_f32 + (size_t)off * feat : NULL;
        part.y = b->y ? b->y + off : NULL;
        part.y_f32 = b->y_f32 ? b->y_f32 + (size_t)off * K : NULL;
        /* evaluation leaves the logits in the last layer's activations */
        if ((err = run_batch(m, &part, RUN_EVAL, NULL, NULL, st)) == FED_OK && dst &&
            (err = m->be->download(m->be, dst, m->ws.act[m->nlayers - 1],
                                   (size_t)part.n * K * sizeof(float))) == FED_OK)
            predictions(m, dst, part.n);
    }
    return err;
}

fed_err fed_model_evaluate(fed_model *m, const fed_batch *b, fed_step_stats *st)
{
    return fed_model_predict(m, b, st, NULL);
}

/* ------------------------------------------------- pipeline stages -- */

/* Whether a stage may begin at layer c (0 < c < L): every layer from c on
 * takes layer c - 1's output or a later one's, so exactly one tensor
 * crosses the cut (a residual's source is never left behind). */
static int cut_ok(const plan *p, int c)
{
    for (int l = c; l < p->nlayers; l++)
        for (int e = 0; e < 2; e++) {
            const layer *ly = &p->layers[l];

            if (e && !ly->ops->input2_grads)
                continue;
            if ((e ? ly->src2 : ly->src) < c - 1)
                return 0;
        }
    return 1;
}

/* Where layer l's tensors end in the flat buffer. */
static size_t layer_p_end(const plan *p, int l)
{
    int t = p->layers[l].t_hi;

    return t < p->ntensors ? p->tensors[t].offset : p->nparams;
}

fed_err fed_model_spec_layers(const char *spec, fed_model_shape in, fed_model_layer_cost **out,
                              int *count)
{
    plan p;
    char why[256], id[FED_MODEL_SPEC_MAX];
    fed_model_layer_cost *c = NULL;
    fed_err err;

    *out = NULL;
    *count = 0;
    if ((err = make_plan(spec, in, &p, id, why, sizeof why)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "%s", why);
        goto out;
    }
    if (!(c = fed_calloc((size_t)p.nlayers, sizeof *c))) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    for (int l = 0; l < p.nlayers; l++) {
        const layer *ly = &p.layers[l];

        snprintf(c[l].name, sizeof c[l].name, "%s", ly->name);
        snprintf(c[l].kind, sizeof c[l].kind, "%s", ly->ops->kind);
        c[l].flops = ly->ops->flops(ly, l == 0);
        c[l].p_end = layer_p_end(&p, l);
        c[l].out_numel = (size_t)ly->out_numel;
        c[l].cut_after = l + 1 < p.nlayers && cut_ok(&p, l + 1);
        c[l].random = ly->ops->random;
    }
    *out = c;
    *count = p.nlayers;
    c = NULL;
out:
    fed_free(c);
    plan_fini(&p);
    return err;
}

/* Layer ly's tensors' offsets base floats lower. */
static void layer_shift(layer *ly, size_t base)
{
    if (ly->w_numel)
        ly->w_off -= base;
    if (ly->b_numel)
        ly->b_off -= base;
    if (ly->ops->stats)
        ly->st_off -= base;
}

fed_err fed_model_spec_tensors(const char *spec, fed_model_shape in, fed_tensor_info **out,
                               int *count)
{
    plan p;
    char why[256], id[FED_MODEL_SPEC_MAX];
    fed_err err;

    *out = NULL;
    *count = 0;
    if ((err = make_plan(spec, in, &p, id, why, sizeof why)) != FED_OK)
        fed_log(FED_LOG_ERROR, "%s", why);
    else if (!(*out = fed_malloc(((size_t)p.ntensors + 1) * sizeof **out)))
        err = FED_ERR_NOMEM;
    else {
        memcpy(*out, p.tensors, (size_t)p.ntensors * sizeof **out);
        *count = p.ntensors;
    }
    plan_fini(&p);
    return err;
}

/* p (the whole graph's plan) cut down to layers [lo, hi): sources before
 * lo become the stage's input (-1), the tensors and offsets those of the
 * slice, the input shape *in that of layer lo - 1's output. The layers keep
 * the whole plan's writer flags: every layer taking the cut tensor is in
 * the slice, so the order in which they write its gradient is the same. */
static fed_err plan_stage(plan *p, int lo, int hi, fed_model_shape *in, char *why, size_t cap)
{
    int L = p->nlayers, t_lo, t_hi;
    size_t p_lo, p_hi;

    if (lo < 0 || hi > L || lo >= hi)
        return fed_err_why(why, cap, FED_ERR_INVAL, "model '%s': stage [%d, %d) of %d layers",
                           p->spec, lo, hi, L);
    for (int c = 0; c < 2; c++) {
        int at = c ? hi : lo;

        if (at > 0 && at < L && !cut_ok(p, at))
            return fed_err_why(why, cap, FED_ERR_SPEC,
                               "model '%s': a stage cannot begin at layer %d ('%s'): a later "
                               "layer takes an output from before it (a residual): cut "
                               "between blocks", p->spec, at, p->layers[at].name);
    }
    for (int l = 0; l < L; l++)
        if (p->layers[l].ops->random)
            return fed_err_why(why, cap, FED_ERR_UNSUPPORTED,
                               "model '%s': layer '%s' (%s): its masks follow the training "
                               "step count, which a stage's second forward would move on; "
                               "pipeline stages do not take dropout", p->spec,
                               p->layers[l].name, p->layers[l].ops->kind);
    if (lo > 0 && !(p->pre = fed_calloc((size_t)lo, sizeof *p->pre)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "model: out of memory");
    for (int l = 0; l < lo; l++) { /* each at offset 0 of a buffer of its own */
        layer *ly = &p->pre[l];
        size_t base = p->layers[l].t_lo < p->ntensors ? p->tensors[p->layers[l].t_lo].offset
                                                      : p->nparams;

        *ly = p->layers[l];
        layer_shift(ly, base);
        if (layer_p_end(p, l) - base > p->pre_max)
            p->pre_max = layer_p_end(p, l) - base;
    }
    t_lo = p->layers[lo].t_lo;
    t_hi = p->layers[hi - 1].t_hi;
    p_lo = t_lo < p->ntensors ? p->tensors[t_lo].offset : p->nparams;
    p_hi = layer_p_end(p, hi - 1);
    if (lo > 0) {
        const layer *prev = &p->layers[lo - 1];

        in->c = prev->out_c;
        in->h = prev->out_h;
        in->w = prev->out_w;
        fed_free(p->cat); /* only the first stage reads the input row */
        p->cat = NULL;
    }
    memmove(p->layers, p->layers + lo, (size_t)(hi - lo) * sizeof *p->layers);
    p->nlayers = hi - lo;
    for (int l = 0; l < p->nlayers; l++) {
        layer *ly = &p->layers[l];

        ly->src = ly->src >= lo ? ly->src - lo : -1;
        if (ly->ops->input2_grads)
            ly->src2 = ly->src2 >= lo ? ly->src2 - lo : -1;
        layer_shift(ly, p_lo);
        ly->t_lo -= t_lo;
        ly->t_hi -= t_lo;
    }
    memmove(p->tensors, p->tensors + t_lo, (size_t)(t_hi - t_lo) * sizeof *p->tensors);
    p->ntensors = t_hi - t_lo;
    for (int t = 0; t < p->ntensors; t++)
        p->tensors[t].offset -= p_lo;
    p->nparams = p_hi - p_lo;
    p->stage_lo = lo;
    p->stage_hi = hi;
    p->stage_of = L;
    return FED_OK;
}

fed_err fed_model_new_stage(const char *spec, fed_model_shape in, int lo, int hi,
                            fed_backend *be, fed_pool *pool, int shards, int max_batch,
                            fed_model **out)
{
    plan p;
    char why[320], id[FED_MODEL_SPEC_MAX];
    fed_err err;

    *out = NULL;
    if (!be || max_batch < 1 || max_batch > (1 << 20) || shards < 1 || shards > MAX_SHARDS)
        return FED_ERR_INVAL;
    if (!(be->caps & FED_BACKEND_CAP_HOST_MEMORY)) {
        fed_log(FED_LOG_ERROR, "model: pipeline stages run on a backend with host memory (the "
                "CPU); the %s backend has none", be->name);
        return FED_ERR_UNSUPPORTED;
    }
    err = make_plan(spec, in, &p, id, why, sizeof why);
    if (err == FED_OK)
        err = plan_stage(&p, lo, hi, &in, why, sizeof why);
    if (err != FED_OK)
        fed_log(FED_LOG_ERROR, "%s", why);
    else
        err = model_build(&p, in, be, pool, shards, max_batch, out);
    plan_fini(&p);
    return err;
}

int fed_model_stage_layers(const fed_model *m, int *lo, int *hi)
{
    *lo = m->stage_lo;
    *hi = m->stage_of ? m->stage_hi : m->nlayers;
    return m->stage_of ? m->stage_of : m->nlayers;
}

fed_err fed_model_stage_forward(fed_model *m, const fed_batch *b, int train, float *out,
                                fed_step_stats *st)
{
    fed_err err = check_batch(m, b, m->max_batch);

    assert(m->stage_of);
    if (err != FED_OK)
        return err;
    m->run.no_running = train;
    m->run.ext_dy = NULL;
    err = run_batch(m, b, train ? RUN_FORWARD_TRAIN : RUN_EVAL, NULL, NULL, st);
    m->run.no_running = 0;
    if (err == FED_OK && out)
        err = m->be->download(m->be, out, m->ws.act[m->nlayers - 1],
                              (size_t)b->n * m->nlogits * sizeof(float));
    return err;
}

fed_err fed_model_stage_backward(fed_model *m, const fed_batch *b, const float *dy, float *dx,
                                 fed_step_stats *st)
{
    fed_err err = check_batch(m, b, m->max_batch);

    assert(m->stage_of && !dy == !stage_mid(m) && !dx == !m->ws.gin);
    if (err != FED_OK)
        return err;
    m->run.ext_dy = dy;
    err = run_batch(m, b, RUN_TRAIN, NULL, NULL, st);
    m->run.ext_dy = NULL;
    if (err == FED_OK && dx)
        err = m->be->download(m->be, dx, m->ws.gin,
                              (size_t)b->n * m->in.c * m->in.h * m->in.w * sizeof(float));
    return err;
}
