/* onnx.c - an .onnx file into the layer graph and its weights (onnx.h):
 * the protobuf unpacked under a counting allocator, checked as untrusted
 * input, then translated node by node through a table of op types into
 * model.h's graph nodes. Shape arithmetic the exporter writes (Shape,
 * Gather, Unsqueeze, Concat feeding a Reshape) is evaluated here on small
 * vectors whose elements are numbers or "the batch size". Owns the
 * unpacked message for as long as the result lives (the weights point
 * into it); never prints, never opens a path the file names. */
#include "onnx/onnx.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/data.h"
#include "onnx.pb-c.h"

#define ALLOC_SLACK (64u << 20) /* unpacking may take the file's size twice and this */
#define RANK_MAX 8
#define SMALL_MAX 16            /* elements of a constant or a shape vector */
#define NAME_LEN (FED_MODEL_NAME_MAX + 1)
#define NOTES_MAX 2048
#define VALUES_MAX (1 << 18)    /* names of a graph: node inputs and outputs, initializers */

typedef Onnx__NodeProto onode;
typedef Onnx__TensorProto otensor;

/* ---------------------------------------------------- the allocator -- */

/* What protobuf-c may allocate: each block carries its size in front. */
typedef struct counting_alloc {
    size_t used, cap;
    int over;
} counting_alloc;

#define BLOCK_HDR 16

static void *counting_malloc(void *ctx, size_t n)
{
    counting_alloc *a = ctx;
    unsigned char *p;

    if (n > a->cap - a->used || n > SIZE_MAX - BLOCK_HDR) {
        a->over = 1;
        return NULL;
    }
    if (!(p = fed_malloc(n + BLOCK_HDR)))
        return NULL;
    memcpy(p, &n, sizeof n);
    a->used += n;
    return p + BLOCK_HDR;
}

static void counting_free(void *ctx, void *ptr)
{
    counting_alloc *a = ctx;
    unsigned char *p = ptr;
    size_t n;

    if (!p)
        return;
    p -= BLOCK_HDR;
    memcpy(&n, p, sizeof n);
    a->used -= n;
    fed_free(p);
}

/* ---------------------------------------------------------- values -- */

enum {
    V_TENSOR = 1, /* a layer's output, or the model's input (node -1) */
    V_PARAM,      /* an initializer: weights */
    V_SMALL,      /* a few numbers known now (a Constant, a small initializer,
                     shape arithmetic); an element may be the batch size */
    V_COLUMN,     /* one column of the model's input row (x[:, col]): an
                     embedding's ids */
};

typedef struct oval {
    const char *name;
    int kind;
    int defined;
    int uses;            /* inputs of nodes and graph outputs naming it */
    /* V_TENSOR */
    int node;            /* ours, -1: the model's input */
    int rank;            /* 2 (features) or 4 (channels, height, width) */
    int pad[2];          /* a zero Pad not yet folded into a window (h, w) */
    int softmax;         /* the output of a Softmax/LogSoftmax (foldable) */
    int sigmoid_of;      /* a Sigmoid's output: its input's value index + 1 */
    /* V_COLUMN */
    int col;
    /* V_PARAM */
    const otensor *t;
    /* V_SMALL */
    int n;
    double v[SMALL_MAX];
    unsigned char batch[SMALL_MAX];
} oval;

/* A weight the file gives, under the name of our tensor it fills. */
typedef struct oweight {
    char name[FED_MODEL_NAME_MAX + 24]; /* a layer's name and ".num_batches_tracked" */
    const otensor *t;
    int transpose; /* MatMul's (in, out) into our (out, in) */
} oweight;

struct fed_onnx {
    counting_alloc alloc;
    ProtobufCAllocator pa;
    Onnx__ModelProto *msg;
    const char *file;
    int opset;
    fed_model_shape in;
    fed_model_node *nodes;
    char (*names)[NAME_LEN];
    int count, cap_nodes;
    oweight *weights;
    int nweights, cap_weights;
    char notes[NOTES_MAX];
};

/* The translation in flight. */
typedef struct trans {
    fed_onnx *o;
    const Onnx__GraphProto *g;
    oval *vals;
    int nvals;
    int *hash; /* open addressing over vals by name; -1 empty */
    size_t hash_mask;
    unsigned char *done; /* nodes a pattern took already */
    int numeric_from;    /* a Slice x[:, from:] taken as the numeric columns (-1: none) */
    char *why;
    size_t cap;
} trans;

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static oval *val_find(trans *t, const char *name)
{
    size_t i = name_hash(name) & t->hash_mask;

    for (; t->hash[i] >= 0; i = (i + 1) & t->hash_mask)
        if (!strcmp(t->vals[t->hash[i]].name, name))
            return &t->vals[t->hash[i]];
    return NULL;
}

/* The value of that name, made when new (so every name has one). */
static oval *val_get(trans *t, const char *name)
{
    size_t i = name_hash(name) & t->hash_mask;
    oval *v;

    for (; t->hash[i] >= 0; i = (i + 1) & t->hash_mask)
        if (!strcmp(t->vals[t->hash[i]].name, name))
            return &t->vals[t->hash[i]];
    t->hash[i] = t->nvals;
    v = &t->vals[t->nvals++];
    memset(v, 0, sizeof *v);
    v->name = name;
    return v;
}

/* --------------------------------------------------------- messages -- */

static fed_err fail(trans *t, fed_err err, const onode *nd, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static fed_err fail(trans *t, fed_err err, const onode *nd, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (nd)
        return fed_err_why(t->why, t->cap, err, "%s: node '%s' (%s, opset %d): %s", t->o->file,
                           nd->name && nd->name[0] ? nd->name : "(unnamed)", nd->op_type ? nd->op_type : "?",
                           t->o->opset, msg);
    return fed_err_why(t->why, t->cap, err, "%s: %s", t->o->file, msg);
}

static void note(fed_onnx *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(fed_onnx *o, const char *fmt, ...)
{
    size_t len = strlen(o->notes);
    va_list ap;

    if (len + 2 >= sizeof o->notes)
        return;
    va_start(ap, fmt);
    vsnprintf(o->notes + len, sizeof o->notes - len - 1, fmt, ap);
    va_end(ap);
    len = strlen(o->notes);
    o->notes[len] = '\n';
    o->notes[len + 1] = '\0';
}

/* ------------------------------------------------------- attributes -- */

static const Onnx__AttributeProto *attr(const onode *nd, const char *name)
{
    for (size_t i = 0; i < nd->n_attribute; i++)
        if (nd->attribute[i]->name && !strcmp(nd->attribute[i]->name, name))
            return nd->attribute[i];
    return NULL;
}

static int64_t attr_int(const onode *nd, const char *name, int64_t dflt)
{
    const Onnx__AttributeProto *a = attr(nd, name);

    return a && a->has_i ? a->i : dflt;
}

static double attr_float(const onode *nd, const char *name, double dflt)
{
    const Onnx__AttributeProto *a = attr(nd, name);

    return a && a->has_f ? a->f : dflt;
}

/* An INTS attribute of exactly n values into out (dflt each when absent). */
static fed_err attr_ints(trans *t, const onode *nd, const char *name, int n, int dflt, int *out)
{
    const Onnx__AttributeProto *a = attr(nd, name);

    for (int i = 0; i < n; i++)
        out[i] = dflt;
    if (!a)
        return FED_OK;
    if ((int)a->n_ints != n)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "attribute %s has %zu values, want %d", name,
                    a->n_ints, n);
    for (int i = 0; i < n; i++) {
        if (a->ints[i] < 0 || a->ints[i] > 65536)
            return fail(t, FED_ERR_UNSUPPORTED, nd, "attribute %s[%d] = %lld", name, i,
                        (long long)a->ints[i]);
        out[i] = (int)a->ints[i];
    }
    return FED_OK;
}

/* Only the attributes in allowed (NULL-ended) may appear. */
static fed_err attrs_only(trans *t, const onode *nd, const char *const *allowed)
{
    for (size_t i = 0; i < nd->n_attribute; i++) {
        const char *name = nd->attribute[i]->name ? nd->attribute[i]->name : "";
        int ok = 0;

        for (const char *const *a = allowed; *a; a++)
            ok |= !strcmp(*a, name);
        if (!ok)
            return fail(t, FED_ERR_UNSUPPORTED, nd, "attribute '%s' is not supported", name);
    }
    return FED_OK;
}

/* ---------------------------------------------------------- tensors -- */

static size_t tensor_numel(const otensor *x)
{
    size_t n = 1;

    for (size_t i = 0; i < x->n_dims; i++)
        n *= (size_t)x->dims[i];
    return n;
}

/* Element i of a float or int64 tensor as a double (checked in
 * check_tensor: its data holds numel elements). */
static double tensor_at(const otensor *x, size_t i)
{
    if (x->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) {
        float f;

        if (x->has_raw_data) {
            memcpy(&f, x->raw_data.data + i * 4, 4);
            return f;
        }
        return x->float_data[i];
    }
    if (x->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
        return x->has_raw_data ? (double)(x->raw_data.data[i] != 0) : (double)(x->int32_data[i] != 0);
    if (x->has_raw_data) {
        int64_t v;

        memcpy(&v, x->raw_data.data + i * 8, 8);
        return (double)v;
    }
    return (double)x->int64_data[i];
}

/* A tensor of the file checked before any use: float or int64, rank at
 * most RANK_MAX, dimensions in [0, 2^31), its data inside the file and as
 * long as its shape says. */
static fed_err check_tensor(trans *t, const otensor *x, const char *what)
{
    const char *name = x->name ? x->name : "";
    size_t numel = 1, width, have;

    if (x->n_external_data || (x->has_data_location &&
                               x->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL))
        return fail(t, FED_ERR_UNSUPPORTED, NULL,
                    "%s '%s': external data (data_location EXTERNAL names files on disk) is "
                    "refused: save the model with its weights inside the file",
                    what, name);
    if (x->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT &&
        x->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__INT64 &&
        x->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__BOOL) /* dropout's training_mode */
        return fail(t, FED_ERR_UNSUPPORTED, NULL,
                    "%s '%s': data type %d (float, int64 and bool only)", what, name,
                    x->data_type);
    if (x->n_dims > RANK_MAX)
        return fail(t, FED_ERR_FORMAT, NULL, "%s '%s': rank %zu over %d", what, name, x->n_dims,
                    RANK_MAX);
    for (size_t i = 0; i < x->n_dims; i++) {
        if (x->dims[i] < 0 || x->dims[i] >= (1ll << 31))
            return fail(t, FED_ERR_FORMAT, NULL, "%s '%s': dimension %zu is %lld", what, name, i,
                        (long long)x->dims[i]);
        if (x->dims[i] && numel > (size_t)(1ull << 40) / (size_t)x->dims[i])
            return fail(t, FED_ERR_TOO_LARGE, NULL, "%s '%s': over 2^40 elements", what, name);
        numel *= (size_t)x->dims[i];
    }
    width = x->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT  ? 4
            : x->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL ? 1
                                                                   : 8;
    if (x->has_raw_data)
        have = x->raw_data.len / width;
    else
        have = x->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT  ? x->n_float_data
               : x->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL ? x->n_int32_data
                                                                      : x->n_int64_data;
    if ((x->has_raw_data && x->raw_data.len % width) || have != numel)
        return fail(t, FED_ERR_FORMAT, NULL,
                    "%s '%s': holds %zu values where its shape says %zu", what, name, have,
                    numel);
    return FED_OK;
}

/* ----------------------------------------------------------- naming -- */

/* Our name of a layer: its weight's initializer name minus ".weight" when
 * that is a valid name, else its scope ("/layer1/layer1.0/conv1/Conv":
 * layer1.0.conv1), else none (named by its index). */
static void layer_name(const onode *nd, const char *weight, char *out)
{
    size_t len = weight ? strlen(weight) : 0;
    char buf[256] = "";
    const char *s = nd->name ? nd->name : "";

    out[0] = '\0';
    if (len > 7 && !strcmp(weight + len - 7, ".weight") && len - 7 < NAME_LEN) {
        memcpy(out, weight, len - 7);
        out[len - 7] = '\0';
        if (fed_model_name_ok(out))
            return;
    }
    /* scope components but the last (the op), a component that extends the
       one before ("layer1" then "layer1.0") replacing it */
    while (*s == '/') {
        const char *e = strchr(s + 1, '/');
        size_t n, blen = strlen(buf);

        if (!e)
            break;
        n = (size_t)(e - s - 1);
        if (n == 0 || n >= sizeof buf - blen - 2)
            break;
        if (blen && !strncmp(s + 1, buf, blen) && s[1 + blen] == '.')
            memcpy(buf, s + 1, n), buf[n] = '\0';
        else {
            if (blen)
                buf[blen++] = '.';
            memcpy(buf + blen, s + 1, n);
            buf[blen + n] = '\0';
        }
        s = e;
    }
    if (buf[0] && strlen(buf) < NAME_LEN && fed_model_name_ok(buf))
        strcpy(out, buf);
}

/* ------------------------------------------------------------ graph -- */

static fed_err grow(void **p, int *cap, int need, size_t size)
{
    int n = *cap ? *cap : 16;
    void *q;

    if (need <= *cap)
        return FED_OK;
    while (n < need)
        n *= 2;
    if (!(q = fed_realloc(*p, (size_t)n * size)))
        return FED_ERR_NOMEM;
    *p = q;
    *cap = n;
    return FED_OK;
}

/* A new node of ours taking value in (a tensor), its output out. */
static fed_err emit(trans *t, const onode *nd, const char *kind, const char *name, oval *in,
                    oval *out, fed_model_node **made)
{
    fed_onnx *o = t->o;
    fed_model_node *g;
    fed_err err;

    if (o->count >= FED_MODEL_MAX_NODES)
        return fail(t, FED_ERR_TOO_LARGE, nd, "more than %d layers", FED_MODEL_MAX_NODES);
    if (o->count + 1 > o->cap_nodes) {
        int cap = o->cap_nodes;
        void *names;

        if ((err = grow((void **)&o->nodes, &cap, o->count + 1, sizeof *o->nodes)))
            return err;
        if (!(names = fed_realloc(o->names, (size_t)cap * sizeof *o->names)))
            return FED_ERR_NOMEM;
        o->names = names;
        o->cap_nodes = cap;
        for (int k = 0; k < o->count; k++) /* the names moved with their block */
            if (o->nodes[k].name)
                o->nodes[k].name = o->names[k];
    }
    g = &o->nodes[o->count];
    memset(g, 0, sizeof *g);
    g->kind = kind;
    g->input = in->node;
    g->other = -1;
    if (name && name[0]) {
        snprintf(o->names[o->count], NAME_LEN, "%s", name);
        g->name = o->names[o->count];
    }
    out->kind = V_TENSOR;
    out->node = o->count++;
    out->rank = in->rank;
    *made = g;
    return FED_OK;
}

static fed_err add_weight(trans *t, const char *layer, const char *suffix, const otensor *x,
                          int transpose)
{
    fed_onnx *o = t->o;
    oweight *w;
    fed_err err;

    if ((err = grow((void **)&o->weights, &o->cap_weights, o->nweights + 1, sizeof *o->weights)))
        return err;
    w = &o->weights[o->nweights++];
    if (layer[0])
        snprintf(w->name, sizeof w->name, "%s%s", layer, suffix);
    else /* a layer of no name (its weight's is not NAME.weight, its node has no
            scope): named by its index, as the model names it; it is the last made */
        snprintf(w->name, sizeof w->name, "%d%s", o->count - 1, suffix);
    w->t = x;
    w->transpose = transpose;
    return FED_OK;
}

/* The input value i of nd (defined: checked before the op runs); NULL
 * when the node has fewer inputs or that one is empty (optional). */
static oval *in_val(trans *t, const onode *nd, size_t i)
{
    if (i >= nd->n_input || !nd->input[i][0])
        return NULL;
    return val_find(t, nd->input[i]);
}

static oval *out_val(trans *t, const onode *nd, size_t i)
{
    return i < nd->n_output && nd->output[i][0] ? val_get(t, nd->output[i]) : NULL;
}

static fed_err want_tensor(trans *t, const onode *nd, oval *v, int i)
{
    if (!v || v->kind != V_TENSOR)
        return fail(t, FED_ERR_UNSUPPORTED, nd,
                    "input %d is %s, where a layer's output is supported", i,
                    !v ? "missing" : v->kind == V_PARAM ? "an initializer" : "a constant");
    if (v->softmax)
        return fail(t, FED_ERR_UNSUPPORTED, nd,
                    "takes a Softmax's output: a softmax is supported only last");
    return FED_OK;
}

/* A pending zero Pad may fold only into a convolution or an average pool. */
static fed_err no_pad(trans *t, const onode *nd, const oval *v)
{
    if (v->pad[0] || v->pad[1])
        return fail(t, FED_ERR_UNSUPPORTED, nd, "takes a zero-padded input (a Pad before it)");
    return FED_OK;
}

/* kernel/stride/pads/dilations of a 2-D window: pads begin and end equal. */
static fed_err window_attrs(trans *t, const onode *nd, fed_model_node *g, int have_kernel)
{
    int k[2], s[2], p[4], d[2];
    fed_err err;
    const Onnx__AttributeProto *ap = attr(nd, "auto_pad");

    if (ap && ap->has_s && !(ap->s.len == 6 && !memcmp(ap->s.data, "NOTSET", 6)))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "auto_pad other than NOTSET");
    if ((err = attr_ints(t, nd, "kernel_shape", 2, 0, k)) ||
        (err = attr_ints(t, nd, "strides", 2, 1, s)) ||
        (err = attr_ints(t, nd, "pads", 4, 0, p)) ||
        (err = attr_ints(t, nd, "dilations", 2, 1, d)))
        return err;
    if (p[0] != p[2] || p[1] != p[3])
        return fail(t, FED_ERR_UNSUPPORTED, nd, "pads [%d, %d, %d, %d] differ at the two ends",
                    p[0], p[1], p[2], p[3]);
    if (have_kernel && (!k[0] || !k[1]))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "no kernel_shape");
    for (int i = 0; i < 2; i++) {
        if (have_kernel)
            g->kernel[i] = k[i];
        g->stride[i] = s[i];
        g->padding[i] = p[i];
        g->dilation[i] = d[i];
    }
    return FED_OK;
}

/* Defaults left 0, as a model file leaves them, so that the same graph
 * has the same spec (and hash) whether it came from ONNX or a file: a
 * convolution's stride and dilation of 1, a pool's stride of its kernel. */
static void window_canonical(fed_model_node *g, int pool)
{
    for (int i = 0; i < 2; i++) {
        if (g->stride[i] == (pool ? g->kernel[i] : 1))
            g->stride[i] = 0;
        if (g->dilation[i] == 1)
            g->dilation[i] = 0;
    }
    if (g->stride[0] != g->stride[1] && (!g->stride[0] || !g->stride[1])) {
        /* one side defaulted: both explicit */
        for (int i = 0; i < 2; i++)
            if (!g->stride[i])
                g->stride[i] = pool ? g->kernel[i] : 1;
    }
    if (g->dilation[0] != g->dilation[1] && (!g->dilation[0] || !g->dilation[1]))
        for (int i = 0; i < 2; i++)
            if (!g->dilation[i])
                g->dilation[i] = 1;
}

/* ------------------------------------------------------------- ops --- */

typedef fed_err (*op_fn)(trans *t, int i, const onode *nd);

static fed_err op_conv(trans *t, int i, const onode *nd)
{
    static const char *const ok[] = {"kernel_shape", "strides", "pads", "dilations", "group",
                                     "auto_pad", NULL};
    oval *x = in_val(t, nd, 0), *w = in_val(t, nd, 1), *b = in_val(t, nd, 2);
    fed_model_node *g;
    char name[NAME_LEN];
    int64_t groups = attr_int(nd, "group", 1);
    fed_err err;

    (void)i;
    if ((err = attrs_only(t, nd, ok)) || (err = want_tensor(t, nd, x, 0)))
        return err;
    if (!w || w->kind != V_PARAM || w->t->n_dims != 4)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "its weight is not a 4-D initializer (2-D "
                                                "convolutions with weights in the file only)");
    if (b && (b->kind != V_PARAM || b->t->n_dims != 1 || b->t->dims[0] != w->t->dims[0]))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "its bias is not a 1-D initializer of %lld",
                    (long long)w->t->dims[0]);
    if (x->rank != 4)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "its input is not an image (N, C, H, W)");
    if (groups < 1 || groups > 65536)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "group %lld", (long long)groups);
    layer_name(nd, w->name, name);
    if ((err = emit(t, nd, "conv", name, x, out_val(t, nd, 0), &g)))
        return err;
    g->out = (int)w->t->dims[0];
    g->groups = (int)groups;
    if ((err = window_attrs(t, nd, g, 0)))
        return err;
    g->kernel[0] = (int)w->t->dims[2];
    g->kernel[1] = (int)w->t->dims[3];
    window_canonical(g, 0);
    g->padding[0] += x->pad[0];
    g->padding[1] += x->pad[1];
    if (!b) {
        note(t->o, "conv '%s': no bias", name[0] ? name : "?");
        g->no_bias = 1;
    }
    if (strncmp(w->name, "onnx::", 6) == 0)
        note(t->o, "conv %s: weights named '%s' by the exporter (an eval-mode export folds "
                   "batch norm into the convolution before it): imported as %s.weight",
             name[0] ? name : "?", w->name, name[0] ? name : "?");
    if ((err = add_weight(t, name, ".weight", w->t, 0)))
        return err;
    return b ? add_weight(t, name, ".bias", b->t, 0) : FED_OK;
}

/* Gemm (transB = 1: nn.Linear's; transB = 0: the weight (in, out),
 * transposed on import), or MatMul by an initializer then Add of one. */
static fed_err linear_from(trans *t, const onode *nd, oval *x, oval *w, oval *b, int transpose,
                           oval *out)
{
    fed_model_node *g;
    char name[NAME_LEN];
    fed_err err;

    if ((err = want_tensor(t, nd, x, 0)) || (err = no_pad(t, nd, x)))
        return err;
    if (!w || w->kind != V_PARAM || w->t->n_dims != 2)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "its weight is not a 2-D initializer");
    if (x->rank != 2)
        return fail(t, FED_ERR_UNSUPPORTED, nd,
                    "its input is not flat (N, features): a Flatten or Reshape first");
    if (b && (b->kind != V_PARAM || tensor_numel(b->t) != (size_t)w->t->dims[transpose ? 1 : 0]))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "its bias is not an initializer of %lld",
                    (long long)w->t->dims[transpose ? 1 : 0]);
    layer_name(nd, w->name, name);
    if ((err = emit(t, nd, "linear", name, x, out, &g)))
        return err;
    g->out = (int)w->t->dims[transpose ? 1 : 0];
    if (!b)
        g->no_bias = 1;
    if ((err = add_weight(t, name, ".weight", w->t, transpose)))
        return err;
    return b ? add_weight(t, name, ".bias", b->t, 0) : FED_OK;
}

static fed_err op_gemm(trans *t, int i, const onode *nd)
{
    static const char *const ok[] = {"alpha", "beta", "transA", "transB", NULL};
    fed_err err;

    (void)i;
    if ((err = attrs_only(t, nd, ok)))
        return err;
    if (attr_float(nd, "alpha", 1) != 1 || attr_float(nd, "beta", 1) != 1 ||
        attr_int(nd, "transA", 0) != 0)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "alpha, beta other than 1, or transA");
    return linear_from(t, nd, in_val(t, nd, 0), in_val(t, nd, 1), in_val(t, nd, 2),
                       attr_int(nd, "transB", 0) == 0, out_val(t, nd, 0));
}

/* The one node that takes value v (its only use), or -1. */
static int sole_consumer(trans *t, int from, const oval *v)
{
    const Onnx__GraphProto *g = t->g;

    if (v->uses != 1)
        return -1;
    for (size_t j = (size_t)from + 1; j < g->n_node; j++)
        for (size_t k = 0; k < g->node[j]->n_input; k++)
            if (!strcmp(g->node[j]->input[k], v->name))
                return (int)j;
    return -1;
}

static fed_err op_matmul(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *w = in_val(t, nd, 1), *mid = out_val(t, nd, 0), *b = NULL;
    int j = sole_consumer(t, i, mid);
    const onode *add = j >= 0 ? t->g->node[j] : NULL;

    if (add && !strcmp(add->op_type, "Add") && add->n_input == 2) {
        b = in_val(t, add, strcmp(add->input[0], mid->name) ? 0 : 1);
        if (b && b->kind == V_PARAM) {
            t->done[j] = 1;
            return linear_from(t, nd, x, w, b, 1, out_val(t, add, 0));
        }
        b = NULL;
    }
    return linear_from(t, nd, x, w, NULL, 1, mid);
}

static fed_err pool(trans *t, const onode *nd, const char *kind, int may_take_pad)
{
    static const char *const ok[] = {"kernel_shape", "strides", "pads", "dilations", "ceil_mode",
                                     "auto_pad", "count_include_pad", "storage_order", NULL};
    oval *x = in_val(t, nd, 0);
    fed_model_node *g;
    fed_err err;

    if ((err = attrs_only(t, nd, ok)) || (err = want_tensor(t, nd, x, 0)))
        return err;
    if (!may_take_pad && (err = no_pad(t, nd, x)))
        return err;
    if (x->rank != 4)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "its input is not an image (N, C, H, W)");
    if (attr_int(nd, "ceil_mode", 0) || attr_int(nd, "storage_order", 0))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "ceil_mode or storage_order other than 0");
    if ((err = emit(t, nd, kind, NULL, x, out_val(t, nd, 0), &g)) ||
        (err = window_attrs(t, nd, g, 1)))
        return err;
    if (g->dilation[0] != 1 || g->dilation[1] != 1)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "dilated pooling");
    window_canonical(g, 1);
    if (!strcmp(kind, "avgpool") && g->padding[0] + g->padding[1] &&
        !attr_int(nd, "count_include_pad", 0))
        return fail(t, FED_ERR_UNSUPPORTED, nd,
                    "padding without count_include_pad (PyTorch's count_include_pad=False)");
    g->padding[0] += x->pad[0];
    g->padding[1] += x->pad[1];
    return FED_OK;
}

static fed_err op_maxpool(trans *t, int i, const onode *nd)
{
    (void)i;
    return pool(t, nd, "maxpool", 0);
}

static fed_err op_avgpool(trans *t, int i, const onode *nd)
{
    (void)i;
    return pool(t, nd, "avgpool", 1);
}

/* An op of one tensor input mapped onto a layer kind of ours. */
static fed_err unary(trans *t, const onode *nd, const char *kind, int rank)
{
    oval *x = in_val(t, nd, 0);
    fed_model_node *g;
    fed_err err;

    if ((err = want_tensor(t, nd, x, 0)) || (err = no_pad(t, nd, x)) ||
        (err = emit(t, nd, kind, NULL, x, out_val(t, nd, 0), &g)))
        return err;
    if (rank)
        out_val(t, nd, 0)->rank = rank;
    return FED_OK;
}

static fed_err op_gap(trans *t, int i, const onode *nd)
{
    (void)i;
    if (in_val(t, nd, 0) && in_val(t, nd, 0)->rank != 4)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "its input is not an image (N, C, H, W)");
    return unary(t, nd, "global_avgpool", 0);
}

static fed_err op_relu(trans *t, int i, const onode *nd)
{
    (void)i;
    return unary(t, nd, "relu", 0);
}

static fed_err op_leaky_relu(trans *t, int i, const onode *nd)
{
    (void)i;
    if (fabs(attr_float(nd, "alpha", 0.01) - 0.01) > 1e-7)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "alpha %g (the leaky_relu layer's is 0.01)",
                    attr_float(nd, "alpha", 0.01));
    return unary(t, nd, "leaky_relu", 0);
}

static fed_err op_tanh(trans *t, int i, const onode *nd)
{
    (void)i;
    return unary(t, nd, "tanh", 0);
}

/* Sigmoid: SiLU when its only use is Mul(x, sigmoid(x)); else a layer
 * (last, on one output: the bce loss's, folded). */
static fed_err op_sigmoid(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *s = out_val(t, nd, 0);
    int j = sole_consumer(t, i, s);
    const onode *mul = j >= 0 ? t->g->node[j] : NULL;
    fed_err err;

    if ((err = want_tensor(t, nd, x, 0)))
        return err;
    if (mul && !strcmp(mul->op_type, "Mul") && mul->n_input == 2 &&
        ((!strcmp(mul->input[0], x->name) && !strcmp(mul->input[1], s->name)) ||
         (!strcmp(mul->input[1], x->name) && !strcmp(mul->input[0], s->name)))) {
        fed_model_node *g;

        t->done[j] = 1;
        if ((err = no_pad(t, nd, x)))
            return err;
        return emit(t, nd, "silu", NULL, x, out_val(t, mul, 0), &g);
    }
    if (s->uses == 1 && t->g->n_output == 1 && !strcmp(t->g->output[0]->name, s->name)) {
        /* the model's output: a probability, which the bce loss computes */
        int uses = s->uses;

        *s = *x;
        s->name = nd->output[0];
        s->uses = uses;
        s->sigmoid_of = 1;
        return FED_OK;
    }
    return unary(t, nd, "sigmoid", 0);
}

static fed_err op_softmax(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *s = out_val(t, nd, 0);
    int64_t axis = attr_int(nd, "axis", t->o->opset >= 13 ? -1 : 1);
    fed_err err;

    (void)i;
    if ((err = want_tensor(t, nd, x, 0)))
        return err;
    if (x->rank != 2 || (axis != 1 && axis != -1))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a softmax other than over the classes of (N, "
                                                "classes)");
    {
        int uses = s->uses;

        *s = *x;
        s->name = nd->output[0];
        s->uses = uses;
        s->softmax = 1;
    }
    return FED_OK;
}

static fed_err op_flatten(trans *t, int i, const onode *nd)
{
    (void)i;
    if (attr_int(nd, "axis", 1) != 1)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "axis %lld (1 only: keep the batch)",
                    (long long)attr_int(nd, "axis", 1));
    return unary(t, nd, "flatten", 2);
}

static fed_err op_identity(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *y = out_val(t, nd, 0);
    const char *name = y->name;
    int uses = y->uses;

    (void)i;
    if (!x)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "no input");
    *y = *x;
    y->name = name;
    y->uses = uses;
    return FED_OK;
}

/* Add: a residual (two layers' outputs), a bias (MatMul's, taken there),
 * or a constant of GELU's pattern (taken there). */
static fed_err op_add(trans *t, int i, const onode *nd)
{
    oval *a = in_val(t, nd, 0), *b = in_val(t, nd, 1);
    fed_model_node *g;
    fed_err err;

    (void)i;
    if ((err = want_tensor(t, nd, a, 0)) || (err = want_tensor(t, nd, b, 1)) ||
        (err = no_pad(t, nd, a)) || (err = no_pad(t, nd, b)))
        return err;
    if (a->rank != b->rank)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "adds tensors of ranks %d and %d", a->rank,
                    b->rank);
    if ((err = emit(t, nd, "add", NULL, a, out_val(t, nd, 0), &g)))
        return err;
    g->other = b->node;
    return FED_OK;
}

static int small_int(const oval *v, int k, int64_t *out)
{
    if (v->kind != V_SMALL || k >= v->n || v->batch[k] || v->v[k] != floor(v->v[k]))
        return 0;
    /* INT64_MAX (a slice "to the end") is 2^63 as a double: out of range */
    *out = v->v[k] >= 9.2e18 ? INT64_MAX : v->v[k] <= -9.2e18 ? INT64_MIN : (int64_t)v->v[k];
    return 1;
}

/* Concat: channels of two layers' outputs, or shape arithmetic. */
static fed_err op_concat(trans *t, int i, const onode *nd)
{
    oval *a = in_val(t, nd, 0), *b = in_val(t, nd, 1), *y = out_val(t, nd, 0);
    int64_t axis = attr_int(nd, "axis", 0);
    fed_model_node *g;
    fed_err err;

    (void)i;
    if (nd->n_input < 1)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "no input");
    if (a && a->kind == V_SMALL) { /* shape arithmetic */
        int n = 0;

        for (size_t k = 0; k < nd->n_input; k++) {
            oval *v = in_val(t, nd, k);

            if (!v || v->kind != V_SMALL || n + v->n > SMALL_MAX)
                return fail(t, FED_ERR_UNSUPPORTED, nd, "concatenates a shape with a tensor");
            memcpy(y->v + n, v->v, (size_t)v->n * sizeof *v->v);
            memcpy(y->batch + n, v->batch, (size_t)v->n);
            n += v->n;
        }
        y->kind = V_SMALL;
        y->n = n;
        return FED_OK;
    }
    if (nd->n_input < 2 || nd->n_input > 64)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "%zu inputs (2 to 64 layers' outputs)",
                    nd->n_input);
    if (axis != 1 && axis != -1 + (a ? a->rank : 0))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "axis %lld (channels, 1, only)",
                    (long long)axis);
    /* torch.cat of k tensors: k - 1 concats, left to right */
    {
        oval run = {0}; /* the running concat's output */

        for (size_t k = 1; k < nd->n_input; k++) {
            oval *left = k == 1 ? a : &run;

            b = in_val(t, nd, k);
            if ((err = want_tensor(t, nd, left, 0)) || (err = want_tensor(t, nd, b, (int)k)) ||
                (err = no_pad(t, nd, left)) || (err = no_pad(t, nd, b)))
                return err;
            if (left->rank != b->rank || (axis != 1 && left->rank != 2))
                return fail(t, FED_ERR_UNSUPPORTED, nd, "axis %lld (channels, 1, only)",
                            (long long)axis);
            if ((err = emit(t, nd, "concat", NULL, left, k + 1 == nd->n_input ? y : &run, &g)))
                return err;
            g->other = b->node;
        }
    }
    return FED_OK;
}

static fed_err small_of_tensor(trans *t, const onode *nd, const otensor *x, oval *y)
{
    size_t n = tensor_numel(x);
    fed_err err;

    if ((err = check_tensor(t, x, "constant")))
        return err;
    if (n > SMALL_MAX)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a constant of %zu values used as a tensor", n);
    y->kind = V_SMALL;
    y->n = (int)n;
    for (size_t k = 0; k < n; k++) {
        y->v[k] = tensor_at(x, k);
        y->batch[k] = 0;
    }
    return FED_OK;
}

static fed_err op_constant(trans *t, int i, const onode *nd)
{
    const Onnx__AttributeProto *a = attr(nd, "value");

    (void)i;
    if (!a || !a->t || nd->n_attribute != 1)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a constant other than a 'value' tensor");
    if (tensor_numel(a->t) > SMALL_MAX) { /* a tensor of numbers: as an initializer */
        oval *y = out_val(t, nd, 0);
        fed_err err = check_tensor(t, a->t, "constant");

        if (err)
            return err;
        y->kind = V_PARAM;
        y->t = a->t;
        return FED_OK;
    }
    return small_of_tensor(t, nd, a->t, out_val(t, nd, 0));
}

/* The per-sample shape of a layer's output: planned by model.h. */
static fed_err tensor_dims(trans *t, const onode *nd, const oval *x, int d[3])
{
    fed_model_node_info *info;
    fed_model_node *nodes;
    fed_model_shape in;
    int planned = 0, count = x->node + 1;
    fed_err err;

    if (x->node < 0) {
        d[0] = t->o->in.c, d[1] = t->o->in.h, d[2] = t->o->in.w;
        return FED_OK;
    }
    /* the nodes up to x's, then a flatten and a linear layer, since a graph
       ends in its logits */
    info = fed_calloc((size_t)count + 2, sizeof *info);
    nodes = fed_malloc(((size_t)count + 2) * sizeof *nodes);
    if (!info || !nodes) {
        fed_free(info);
        fed_free(nodes);
        return FED_ERR_NOMEM;
    }
    memcpy(nodes, t->o->nodes, (size_t)count * sizeof *nodes);
    nodes[count] = (fed_model_node){.kind = "flatten", .input = count - 1, .other = -1};
    nodes[count + 1] = (fed_model_node){.kind = "linear", .input = count, .out = 2, .other = -1};
    in = t->o->in;
    in.classes = 2;
    err = fed_model_graph_shapes(t->o->file, nodes, count + 2, in, info, &planned, t->why,
                                 t->cap);
    if (err == FED_OK)
        d[0] = info[count - 1].c, d[1] = info[count - 1].h, d[2] = info[count - 1].w;
    fed_free(info);
    fed_free(nodes);
    return err != FED_OK ? fail(t, err, nd, "%s", t->why) : FED_OK;
}

static fed_err op_shape(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *y = out_val(t, nd, 0);
    int d[3];
    fed_err err;

    (void)i;
    if ((err = want_tensor(t, nd, x, 0)) || (err = tensor_dims(t, nd, x, d)))
        return err;
    y->kind = V_SMALL;
    y->batch[0] = 1;
    y->v[0] = 0;
    if (x->rank == 2) {
        y->n = 2;
        y->v[1] = (double)d[0] * d[1] * d[2], y->batch[1] = 0;
    } else {
        y->n = 4;
        for (int k = 0; k < 3; k++)
            y->v[k + 1] = d[k], y->batch[k + 1] = 0;
    }
    return FED_OK;
}

static fed_err op_gather(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *ix = in_val(t, nd, 1), *y = out_val(t, nd, 0);
    int64_t k;

    (void)i;
    if (x && x->kind == V_SMALL && ix && small_int(ix, 0, &k) && ix->n == 1 &&
        attr_int(nd, "axis", 0) == 0) {
        if (k < 0)
            k += x->n;
        if (k < 0 || k >= x->n)
            return fail(t, FED_ERR_FORMAT, nd, "index %lld of %d", (long long)k, x->n);
        y->kind = V_SMALL;
        y->n = 1;
        y->v[0] = x->v[k];
        y->batch[0] = x->batch[k];
        return FED_OK;
    }
    if (x && x->kind == V_TENSOR && x->node == -1 && x->rank == 2 && ix && ix->n == 1 &&
        small_int(ix, 0, &k) && attr_int(nd, "axis", 0) == 1) { /* x[:, k]: a column */
        if (k < 0 || k >= (int64_t)t->o->in.w)
            return fail(t, FED_ERR_FORMAT, nd, "column %lld of %d", (long long)k, t->o->in.w);
        y->kind = V_COLUMN;
        y->col = (int)k;
        return FED_OK;
    }
    if (x && x->kind == V_PARAM && x->t->n_dims == 2 && ix && ix->kind == V_COLUMN &&
        attr_int(nd, "axis", 0) == 0) { /* nn.Embedding of a column's ids */
        oval in = {.kind = V_TENSOR, .node = -1, .rank = 2};
        fed_model_node *g;
        char name[NAME_LEN];
        fed_err err;

        if (x->t->dims[0] < 1 || x->t->dims[0] > (1 << 20) || x->t->dims[1] < 1 ||
            x->t->dims[1] > 65536)
            return fail(t, FED_ERR_UNSUPPORTED, nd, "an embedding of %lld ids of %lld values",
                        (long long)x->t->dims[0], (long long)x->t->dims[1]);
        layer_name(nd, x->name, name);
        if ((err = emit(t, nd, "embedding", name, &in, y, &g)))
            return err;
        g->column = ix->col;
        g->num = (int)x->t->dims[0];
        g->out = (int)x->t->dims[1];
        return add_weight(t, name, ".weight", x->t, 0);
    }
    return fail(t, FED_ERR_UNSUPPORTED, nd, "a Gather other than of a shape's element, of an "
                                            "input column, or of an embedding's rows");
}

/* Cast: of a column (ids to int64) or of shape numbers, the same values. */
static fed_err op_cast(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *y = out_val(t, nd, 0);
    const char *name = y->name;
    int uses = y->uses;

    (void)i;
    if (!x || (x->kind != V_COLUMN && x->kind != V_SMALL))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a Cast other than of an input column (ids) "
                                                "or of shape numbers");
    *y = *x;
    y->name = name;
    y->uses = uses;
    return FED_OK;
}

/* Slice x[:, from:] of the model's input row: the numeric columns (those no
 * embedding reads, checked when the graph is done). */
static fed_err op_slice(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *st = in_val(t, nd, 1), *en = in_val(t, nd, 2),
         *ax = in_val(t, nd, 3), *sp = in_val(t, nd, 4);
    int64_t from, to, axis = 1, step = 1;
    fed_model_node *g;
    fed_err err;

    (void)i;
    if (!x || x->kind != V_TENSOR || x->node != -1 || x->rank != 2 || !st || !en ||
        !small_int(st, 0, &from) || !small_int(en, 0, &to) || st->n != 1 || en->n != 1 ||
        (ax && (!small_int(ax, 0, &axis) || ax->n != 1)) ||
        (sp && (!small_int(sp, 0, &step) || sp->n != 1)) || (axis != 1 && axis != -1) ||
        step != 1 || from < 0 || from >= t->o->in.w || to < (int64_t)t->o->in.w ||
        t->numeric_from >= 0)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a Slice other than x[:, k:] of the model's "
                                                "input row (its numeric columns), once");
    if ((err = emit(t, nd, "numeric", NULL, x, out_val(t, nd, 0), &g)))
        return err;
    t->numeric_from = (int)from;
    return FED_OK;
}

static fed_err op_unsqueeze(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *y = out_val(t, nd, 0);

    (void)i;
    if (x && ((x->kind == V_SMALL && x->n == 1) || x->kind == V_PARAM)) {
        /* a shape's element into a vector, or an initializer given axes
           (group norm's weight broadcast over the map): the same values */
        const char *name = y->name;
        int uses = y->uses;

        *y = *x;
        y->name = name;
        y->uses = uses;
        return FED_OK;
    }
    return fail(t, FED_ERR_UNSUPPORTED, nd, "an Unsqueeze other than of a shape's element or "
                                            "an initializer");
}

/* The first node after from of op type op taking value v (-1: none). */
static int consumer_of(trans *t, int from, const oval *v, const char *op)
{
    const Onnx__GraphProto *g = t->g;

    for (size_t j = (size_t)from + 1; j < g->n_node; j++) {
        if (t->done[j] || strcmp(g->node[j]->op_type, op))
            continue;
        for (size_t k = 0; k < g->node[j]->n_input; k++)
            if (!strcmp(g->node[j]->input[k], v->name))
                return (int)j;
    }
    return -1;
}

/* The other input of a two-input node than value v (NULL: none). */
static oval *other_input(trans *t, const onode *nd, const oval *v)
{
    if (nd->n_input != 2)
        return NULL;
    return in_val(t, nd, strcmp(nd->input[0], v->name) ? 0 : 1);
}

/* Whether value name is made by Shape(x) (it may come later in the file
 * than a pattern's head). */
static int shape_of(trans *t, const char *name, const oval *x)
{
    const Onnx__GraphProto *g = t->g;

    for (size_t j = 0; j < g->n_node; j++)
        if (g->node[j]->n_output >= 1 && !strcmp(g->node[j]->output[0], name))
            return !strcmp(g->node[j]->op_type, "Shape") && g->node[j]->n_input == 1 &&
                   !strcmp(g->node[j]->input[0], x->name);
    return 0;
}

/* v itself when an initializer, or the initializer an Unsqueeze (which may
 * come later in the file) gives axes to; NULL otherwise. */
static oval *param_through(trans *t, oval *v)
{
    const Onnx__GraphProto *g = t->g;

    if (!v || v->kind == V_PARAM)
        return v;
    for (size_t j = 0; j < g->n_node; j++)
        if (g->node[j]->n_output >= 1 && !strcmp(g->node[j]->output[0], v->name)) {
            oval *src;

            if (strcmp(g->node[j]->op_type, "Unsqueeze") || g->node[j]->n_input < 1)
                return NULL;
            src = val_find(t, g->node[j]->input[0]);
            return src && src->kind == V_PARAM ? src : NULL;
        }
    return NULL;
}

/* A small constant of one value near want. */
static int is_const(const oval *v, double want)
{
    return v && v->kind == V_SMALL && v->n == 1 && !v->batch[0] && fabs(v->v[0] - want) < 1e-6;
}

/* The norm layers take eps 1e-5 (PyTorch's default), written as a float. */
static int eps_ok(double eps)
{
    return fabs(eps - 1e-5) < 1e-9;
}

/* A norm layer of kind over x, its weight and bias initializers, its output
 * y; the layer named after its weight. */
static fed_err norm_emit(trans *t, const onode *nd, const char *kind, oval *x, oval *w, oval *b,
                         oval *y, int groups)
{
    fed_model_node *g;
    char name[NAME_LEN];
    fed_err err;

    if (!w || w->kind != V_PARAM || !b || b->kind != V_PARAM)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "%s without weight and bias initializers "
                                                "(elementwise_affine=False)", kind);
    if ((err = no_pad(t, nd, x)))
        return err;
    layer_name(nd, w->name, name);
    if ((err = emit(t, nd, kind, name, x, y, &g)))
        return err;
    g->groups = groups;
    if ((err = add_weight(t, name, ".weight", w->t, 0)))
        return err;
    return add_weight(t, name, ".bias", b->t, 0);
}

/* Whether v holds n values, each want: a small constant, or a larger one
 * (more than SMALL_MAX groups) kept as a tensor. */
static int all_of(const oval *v, size_t n, double want)
{
    if (!v || !((v->kind == V_SMALL && (size_t)v->n == n) ||
                (v->kind == V_PARAM && tensor_numel(v->t) == n)))
        return 0;
    for (size_t k = 0; k < n; k++)
        if ((v->kind == V_SMALL ? v->v[k] : tensor_at(v->t, k)) != want)
            return 0;
    return 1;
}

/* GroupNorm as PyTorch writes it: Reshape(x, [0, G, -1]),
 * InstanceNormalization (scale 1, bias 0), Reshape back to x's shape, Mul
 * by the weight and Add the bias (each an initializer given axes). */
static fed_err groupnorm_from(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *s = in_val(t, nd, 1), *r = out_val(t, nd, 0);
    int j1 = sole_consumer(t, i, r), j2, j3, j4;
    const onode *in, *back, *mul, *add;
    oval *scale, *bias, *inorm, *w, *b;
    int64_t G;

    if (!small_int(s, 1, &G) || s->batch[1] || !(s->batch[0] || s->v[0] == 0) ||
        s->batch[2] || s->v[2] != -1 || G < 1 || j1 < 0 ||
        strcmp((in = t->g->node[j1])->op_type, "InstanceNormalization"))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a Reshape of an image other than group "
                                                "norm's (batch, groups, -1)");
    scale = in_val(t, in, 1);
    bias = in_val(t, in, 2);
    if (!eps_ok(attr_float(in, "epsilon", 1e-5)))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "group norm's epsilon %g (1e-5 only)",
                    attr_float(in, "epsilon", 1e-5));
    if (!all_of(scale, (size_t)G, 1.0) || !all_of(bias, (size_t)G, 0.0))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "an InstanceNormalization other than group "
                                                "norm's (scale 1, bias 0 per group)");
    inorm = out_val(t, in, 0);
    if ((j2 = sole_consumer(t, j1, inorm)) < 0 ||
        strcmp((back = t->g->node[j2])->op_type, "Reshape") || back->n_input != 2 ||
        !shape_of(t, back->input[1], x) ||
        (j3 = sole_consumer(t, j2, out_val(t, back, 0))) < 0 ||
        strcmp((mul = t->g->node[j3])->op_type, "Mul") ||
        (j4 = sole_consumer(t, j3, out_val(t, mul, 0))) < 0 ||
        strcmp((add = t->g->node[j4])->op_type, "Add"))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a group norm pattern other than PyTorch's");
    w = param_through(t, other_input(t, mul, out_val(t, back, 0)));
    b = param_through(t, other_input(t, add, out_val(t, mul, 0)));
    t->done[j1] = t->done[j2] = t->done[j3] = t->done[j4] = 1;
    return norm_emit(t, nd, "groupnorm", x, w, b, out_val(t, add, 0), (int)G);
}

/* LayerNormalization (opset 17) over the features of (N, features). */
static fed_err op_layernorm(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0);
    fed_err err;

    (void)i;
    if ((err = want_tensor(t, nd, x, 0)))
        return err;
    if (x->rank != 2 || (attr_int(nd, "axis", -1) != -1 && attr_int(nd, "axis", -1) != 1))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a layer norm other than over the features "
                                                "of (N, features)");
    if (!eps_ok(attr_float(nd, "epsilon", 1e-5)))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "epsilon %g (1e-5 only)",
                    attr_float(nd, "epsilon", 1e-5));
    return norm_emit(t, nd, "layernorm", x, in_val(t, nd, 1), in_val(t, nd, 2),
                     out_val(t, nd, 0), 1);
}

/* A ReduceMean over the features of (N, features), the dimension kept. */
static int mean_of_features(const onode *nd)
{
    const Onnx__AttributeProto *axes = attr(nd, "axes");

    return axes && axes->n_ints == 1 && (axes->ints[0] == -1 || axes->ints[0] == 1) &&
           attr_int(nd, "keepdims", 1) == 1;
}

/* LayerNorm as PyTorch writes it before opset 17: m = ReduceMean(x), d =
 * Sub(x, m), v = ReduceMean(Pow(d, 2)), Div(d, Sqrt(Add(v, eps))), Mul by
 * the weight, Add the bias; over the last axis of (N, features). */
static fed_err op_reducemean(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *m = out_val(t, nd, 0), *d, *v, *e, *s, *q, *w, *b, *o;
    static const char *const chain[] = {"Pow", "ReduceMean", "Add", "Sqrt"};
    int js[9], at;
    const onode *n1;

    if (!x || x->kind != V_TENSOR || x->rank != 2 || !mean_of_features(nd))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a ReduceMean other than layer norm's over the "
                                                "features of (N, features)");
    /* d = x - m */
    if ((js[0] = consumer_of(t, i, m, "Sub")) < 0 ||
        strcmp((n1 = t->g->node[js[0]])->input[0], x->name) || n1->n_input != 2)
        goto bad;
    d = out_val(t, n1, 0);
    at = js[0];
    v = d;
    for (int k = 0; k < 4; k++) {
        const onode *c;

        if ((js[k + 1] = k == 0 ? consumer_of(t, at, v, chain[k]) : sole_consumer(t, at, v)) < 0 ||
            strcmp((c = t->g->node[js[k + 1]])->op_type, chain[k]))
            goto bad;
        if ((k == 0 && !is_const(other_input(t, c, v), 2.0)) ||
            (k == 1 && !mean_of_features(c)) ||
            (k == 2 && !(other_input(t, c, v) && other_input(t, c, v)->kind == V_SMALL &&
                         eps_ok(other_input(t, c, v)->v[0]))))
            goto bad;
        at = js[k + 1];
        v = out_val(t, c, 0);
    }
    s = v; /* sqrt(var + eps) */
    if ((js[5] = consumer_of(t, at, s, "Div")) < 0 ||
        strcmp(t->g->node[js[5]]->input[0], d->name))
        goto bad;
    q = out_val(t, t->g->node[js[5]], 0);
    if ((js[6] = sole_consumer(t, js[5], q)) < 0 || strcmp(t->g->node[js[6]]->op_type, "Mul"))
        goto bad;
    w = other_input(t, t->g->node[js[6]], q);
    e = out_val(t, t->g->node[js[6]], 0);
    if ((js[7] = sole_consumer(t, js[6], e)) < 0 || strcmp(t->g->node[js[7]]->op_type, "Add"))
        goto bad;
    b = other_input(t, t->g->node[js[7]], e);
    o = out_val(t, t->g->node[js[7]], 0);
    if (d->uses != 2)
        goto bad;
    for (int k = 0; k < 8; k++)
        t->done[js[k]] = 1;
    return norm_emit(t, nd, "layernorm", x, w, b, o, 1);
bad:
    return fail(t, FED_ERR_UNSUPPORTED, nd, "a ReduceMean other than the layer norm PyTorch "
                                            "writes (ReduceMean, Sub, Pow 2, ReduceMean, Add "
                                            "1e-5, Sqrt, Div, Mul, Add)");
}

/* Dropout: its ratio (a constant input since opset 12, an attribute
 * before); the mask output unused. */
static fed_err op_dropout(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *r = in_val(t, nd, 1);
    double ratio = t->o->opset >= 12 ? 0.5 : attr_float(nd, "ratio", 0.5);
    fed_model_node *g;
    fed_err err;

    (void)i;
    if ((err = want_tensor(t, nd, x, 0)) || (err = no_pad(t, nd, x)))
        return err;
    if (r) {
        if (r->kind != V_SMALL || r->n != 1)
            return fail(t, FED_ERR_UNSUPPORTED, nd, "a ratio that is not a constant");
        ratio = r->v[0];
    }
    if (!(ratio >= 0 && ratio < 1))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "ratio %g (0 to below 1)", ratio);
    if ((err = emit(t, nd, "dropout", NULL, x, out_val(t, nd, 0), &g)))
        return err;
    g->drop_ppm = (int)floor(ratio * 1e6 + 0.5);
    if (g->drop_ppm > 999999)
        g->drop_ppm = 999999;
    return FED_OK;
}

/* The shortest decimal d of at most 9 digits that f(d) gives the float
 * the file holds, (float)want: an attribute is a float, and a model file
 * (and so the spec) says 0.001, not 0.0010000000474974513. */
static double float_decimal(double want, double (*f)(double))
{
    char num[32];

    for (int digits = 1; digits <= 9; digits++) {
        double d;

        snprintf(num, sizeof num, "%.*g", digits, f(want));
        d = strtod(num, NULL);
        if ((float)f(d) == (float)want)
            return d;
    }
    return f(want);
}

static double same(double v)
{
    return v;
}

static double one_minus(double v)
{
    return 1.0 - v;
}

/* BatchNormalization: inference (one output), or training (training_mode
 * 1 and three outputs at opset 14 on, five before 14: the running
 * statistics' new values and the batch's, none of which may be used);
 * PyTorch's BatchNorm1d over (N, features) or BatchNorm2d over (N, C, H,
 * W). ONNX's momentum is 1 - PyTorch's; scale, B, mean and var are
 * NAME.weight, .bias, .running_mean and .running_var, and an initializer
 * NAME.num_batches_tracked (which an exporter may keep) the counter. The
 * defaults (momentum 0.1, eps 1e-5) stay unsaid, as a model file leaves
 * them: the same graph has the same spec. */
static fed_err op_batchnorm(trans *t, int i, const onode *nd)
{
    static const char *const ok[] = {"epsilon", "momentum", "training_mode", NULL};
    static const char *const what[] = {"scale", "B", "input_mean", "input_var"};
    static const char *const suffix[] = {".weight", ".bias", ".running_mean", ".running_var"};
    oval *x = in_val(t, nd, 0), *p[4], *nbt;
    double eps = attr_float(nd, "epsilon", 1e-5), mom = attr_float(nd, "momentum", 0.9);
    int train = t->o->opset >= 14 ? (int)attr_int(nd, "training_mode", 0) : nd->n_output > 1;
    fed_model_node *g;
    char name[NAME_LEN], counter[NAME_LEN + 24];
    fed_err err;

    (void)i;
    if ((err = attrs_only(t, nd, ok)) || (err = want_tensor(t, nd, x, 0)) ||
        (err = no_pad(t, nd, x)))
        return err;
    if (nd->n_input != 5)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "%zu inputs (x, scale, B, mean, var)",
                    nd->n_input);
    if (nd->n_output != (size_t)(!train ? 1 : t->o->opset >= 14 ? 3 : 5))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "%zu outputs in %s mode at opset %d",
                    nd->n_output, train ? "training" : "inference", t->o->opset);
    if (!(eps > 0.0 && eps <= 1.0) || !(mom >= 0.0 && mom < 1.0))
        return fail(t, FED_ERR_UNSUPPORTED, nd,
                    "epsilon %g or momentum %g (ONNX's: 1 - PyTorch's) outside (0, 1]", eps,
                    1.0 - mom);
    for (int k = 0; k < 4; k++) {
        p[k] = in_val(t, nd, (size_t)k + 1);
        if (!p[k] || p[k]->kind != V_PARAM || p[k]->t->n_dims != 1 ||
            p[k]->t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ||
            (k && p[k]->t->dims[0] != p[0]->t->dims[0]))
            return fail(t, FED_ERR_UNSUPPORTED, nd,
                        "its %s is not a 1-D float initializer as long as its scale", what[k]);
    }
    layer_name(nd, p[0]->name, name);
    if ((err = emit(t, nd, "batchnorm", name, x, out_val(t, nd, 0), &g)))
        return err;
    g->eps = float_decimal(eps, same);
    g->momentum = float_decimal(mom, one_minus);
    if (g->eps == 1e-5)
        g->eps = 0.0;
    if (g->momentum == 0.1)
        g->momentum = 0.0;
    for (int k = 0; k < 4; k++)
        if ((err = add_weight(t, name, suffix[k], p[k]->t, 0)))
            return err;
    snprintf(counter, sizeof counter, "%s.num_batches_tracked", name);
    nbt = name[0] ? val_find(t, counter) : NULL;
    /* (an int64 initializer of one value is also a small number) */
    if (nbt && (nbt->kind == V_PARAM || nbt->kind == V_SMALL) && nbt->t &&
        tensor_numel(nbt->t) == 1)
        return add_weight(t, name, ".num_batches_tracked", nbt->t, 0);
    return FED_OK;
}

/* Reshape to (batch, -1) or (batch, numel): a flatten. */
static fed_err op_reshape(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *s = in_val(t, nd, 1);
    int64_t rest;
    int d[3], first_batch;
    fed_err err;

    if ((err = want_tensor(t, nd, x, 0)))
        return err;
    if (s && s->kind == V_SMALL && s->n == 3 && x->rank == 4)
        return groupnorm_from(t, i, nd);
    if (!s || s->kind != V_SMALL || s->n != 2)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a Reshape other than to (batch, features)");
    first_batch = s->batch[0] || (small_int(s, 0, &rest) && (rest == 0 || rest == -1));
    if (!first_batch || !small_int(s, 1, &rest) || s->batch[1])
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a Reshape other than to (batch, features)");
    if (rest != -1) {
        if ((err = tensor_dims(t, nd, x, d)))
            return err;
        if (rest != (int64_t)d[0] * d[1] * d[2])
            return fail(t, FED_ERR_UNSUPPORTED, nd,
                        "reshapes %dx%dx%d values per sample to %lld", d[0], d[1], d[2],
                        (long long)rest);
    }
    return op_flatten(t, i, nd);
}

/* Pad, constant zero on height and width only: folded into the window
 * that takes it (a convolution or an average pool). */
static fed_err op_pad(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *p = in_val(t, nd, 1), *c = in_val(t, nd, 2),
         *y = out_val(t, nd, 0);
    const Onnx__AttributeProto *mode = attr(nd, "mode");
    int64_t v[8];
    fed_err err;

    (void)i;
    if ((err = want_tensor(t, nd, x, 0)))
        return err;
    if (mode && mode->has_s && !(mode->s.len == 8 && !memcmp(mode->s.data, "constant", 8)))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a mode other than constant");
    if (c && (c->kind != V_SMALL || c->n != 1 || c->v[0] != 0))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a pad value other than 0");
    if (x->rank != 4 || !p || p->kind != V_SMALL || p->n != 8)
        return fail(t, FED_ERR_UNSUPPORTED, nd, "pads other than 8 values of an image");
    for (int k = 0; k < 8; k++)
        if (!small_int(p, k, &v[k]) || v[k] < 0 || v[k] > 64)
            return fail(t, FED_ERR_UNSUPPORTED, nd, "pads[%d] is not in [0, 64]", k);
    if (v[0] || v[1] || v[4] || v[5] || v[2] != v[6] || v[3] != v[7])
        return fail(t, FED_ERR_UNSUPPORTED, nd,
                    "pads other than equal ones on height and width at both ends");
    *y = *x;
    y->name = nd->output[0];
    y->pad[0] += (int)v[2];
    y->pad[1] += (int)v[3];
    return FED_OK;
}

/* GELU as the exporter writes it: Div(x, sqrt 2), Erf, Add 1, Mul by x,
 * Mul by 0.5 (the last two in either order of operands). */
static fed_err op_div(trans *t, int i, const onode *nd)
{
    oval *x = in_val(t, nd, 0), *c = in_val(t, nd, 1), *cur = out_val(t, nd, 0);
    static const char *const chain[] = {"Erf", "Add", "Mul", "Mul"};
    int at = i;
    fed_model_node *g;
    fed_err err;

    if (!x || x->kind != V_TENSOR || !c || c->kind != V_SMALL || c->n != 1 ||
        !(fabs(c->v[0] - sqrt(2.0)) <= 1e-6)) /* (a NaN is no sqrt 2) */
        return fail(t, FED_ERR_UNSUPPORTED, nd, "a Div other than GELU's");
    for (int k = 0; k < 4; k++) {
        int j = sole_consumer(t, at, cur);
        const onode *n2 = j >= 0 ? t->g->node[j] : NULL;
        oval *other;

        if (!n2 || strcmp(n2->op_type, chain[k]))
            return fail(t, FED_ERR_UNSUPPORTED, nd, "a Div other than GELU's");
        if (k > 0) {
            if (n2->n_input != 2)
                return fail(t, FED_ERR_UNSUPPORTED, nd, "a Div other than GELU's");
            other = in_val(t, n2, strcmp(n2->input[0], cur->name) ? 0 : 1);
            if (!other ||
                (k == 1 && !(other->kind == V_SMALL && other->n == 1 && other->v[0] == 1)) ||
                (k == 2 && strcmp(other->name, x->name) &&
                 !(other->kind == V_TENSOR && other->node == x->node)) ||
                (k == 3 && !(other->kind == V_SMALL && other->n == 1 && other->v[0] == 0.5)))
                return fail(t, FED_ERR_UNSUPPORTED, nd, "a Div other than GELU's");
        }
        t->done[j] = 1;
        at = j;
        cur = out_val(t, n2, 0);
    }
    if ((err = no_pad(t, nd, x)))
        return err;
    return emit(t, nd, "gelu", NULL, x, cur, &g);
}

typedef struct op_row {
    const char *type;
    op_fn fn;
} op_row;

static const op_row OPS[] = {
    {"Conv", op_conv},
    {"Gemm", op_gemm},
    {"MatMul", op_matmul},
    {"MaxPool", op_maxpool},
    {"AveragePool", op_avgpool},
    {"GlobalAveragePool", op_gap},
    {"Relu", op_relu},
    {"LeakyRelu", op_leaky_relu},
    {"Sigmoid", op_sigmoid},
    {"Tanh", op_tanh},
    {"Softmax", op_softmax},
    {"LogSoftmax", op_softmax},
    {"Flatten", op_flatten},
    {"Identity", op_identity},
    {"Add", op_add},
    {"Concat", op_concat},
    {"Constant", op_constant},
    {"Shape", op_shape},
    {"Gather", op_gather},
    {"Unsqueeze", op_unsqueeze},
    {"Reshape", op_reshape},
    {"Pad", op_pad},
    {"Div", op_div},
    {"LayerNormalization", op_layernorm},
    {"ReduceMean", op_reducemean},
    {"Dropout", op_dropout},
    {"BatchNormalization", op_batchnorm},
    {"Cast", op_cast},
    {"Slice", op_slice},
};

static op_fn op_find(const char *type)
{
    for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
        if (!strcmp(OPS[i].type, type))
            return OPS[i].fn;
    return NULL;
}

/* --------------------------------------------------------- the model -- */

static fed_err check_opset(trans *t, const Onnx__ModelProto *m)
{
    int found = 0;

    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *op = m->opset_import[i];
        const char *dom = op->domain ? op->domain : "";

        if (dom[0] && strcmp(dom, "ai.onnx"))
            continue; /* another domain: refused where a node uses it */
        if (!op->has_version || op->version < FED_ONNX_OPSET_MIN ||
            op->version > FED_ONNX_OPSET_MAX)
            return fail(t, FED_ERR_UNSUPPORTED, NULL, "opset %lld (%d to %d are supported)",
                        (long long)op->version, FED_ONNX_OPSET_MIN, FED_ONNX_OPSET_MAX);
        t->o->opset = (int)op->version;
        found = 1;
    }
    if (!found)
        return fail(t, FED_ERR_FORMAT, NULL, "no opset of the default domain");
    return FED_OK;
}

/* The model's input: the graph input that is no initializer, (N, C, H, W)
 * or (N, features) of floats. */
static fed_err read_input(trans *t, oval **inv)
{
    const Onnx__GraphProto *g = t->g;
    const Onnx__ValueInfoProto *vi = NULL;
    const Onnx__TensorShapeProto *s;
    int64_t d[4];

    for (size_t i = 0; i < g->n_input; i++) {
        oval *v = g->input[i]->name ? val_find(t, g->input[i]->name) : NULL;

        if (v && v->kind == V_PARAM)
            continue;
        if (vi)
            return fail(t, FED_ERR_UNSUPPORTED, NULL, "more than one input ('%s', '%s')",
                        vi->name, g->input[i]->name ? g->input[i]->name : "");
        vi = g->input[i];
    }
    if (!vi || !vi->name || !vi->name[0])
        return fail(t, FED_ERR_FORMAT, NULL, "no input");
    if (!vi->type || vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
        !vi->type->tensor_type->shape ||
        vi->type->tensor_type->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
        return fail(t, FED_ERR_UNSUPPORTED, NULL, "input '%s' is not a float tensor of known shape",
                    vi->name);
    s = vi->type->tensor_type->shape;
    if (s->n_dim != 2 && s->n_dim != 4)
        return fail(t, FED_ERR_UNSUPPORTED, NULL,
                    "input '%s' has rank %zu: (N, C, H, W) or (N, features) only", vi->name,
                    s->n_dim);
    for (size_t k = 1; k < s->n_dim; k++) {
        if (s->dim[k]->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
            s->dim[k]->dim_value < 1 || s->dim[k]->dim_value > 65536)
            return fail(t, FED_ERR_UNSUPPORTED, NULL,
                        "input '%s': dimension %zu is not a number in [1, 65536]", vi->name, k);
        d[k] = s->dim[k]->dim_value;
    }
    if (s->n_dim == 4)
        t->o->in = (fed_model_shape){(int)d[1], (int)d[2], (int)d[3], 0, 0};
    else
        t->o->in = (fed_model_shape){1, 1, (int)d[1], 0, 0};
    *inv = val_get(t, vi->name);
    (*inv)->kind = V_TENSOR;
    (*inv)->node = -1;
    (*inv)->rank = (int)s->n_dim;
    (*inv)->defined = 1;
    return FED_OK;
}

/* Count each value's uses, and make every name a value (all before any
 * node runs: the table never grows after). */
static void count_uses(trans *t)
{
    const Onnx__GraphProto *g = t->g;

    for (size_t i = 0; i < g->n_node; i++) {
        for (size_t k = 0; k < g->node[i]->n_input; k++)
            if (g->node[i]->input[k][0])
                val_get(t, g->node[i]->input[k])->uses++;
        for (size_t k = 0; k < g->node[i]->n_output; k++)
            if (g->node[i]->output[k][0])
                val_get(t, g->node[i]->output[k]);
    }
    for (size_t i = 0; i < g->n_output; i++)
        if (g->output[i]->name)
            val_get(t, g->output[i]->name)->uses++;
}

/* What every node must be before any is translated (the pattern matchers
 * look ahead at nodes the walk has not reached): an op type, a first
 * output, its counts bounded; and every graph output named. */
static fed_err check_shapes(trans *t)
{
    const Onnx__GraphProto *g = t->g;

    for (size_t i = 0; i < g->n_node; i++) {
        const onode *nd = g->node[i];

        if (!nd->op_type || !nd->op_type[0]) /* a name is optional (ONNX's own node tests
                                                have none) */
            return fail(t, FED_ERR_FORMAT, NULL, "node %zu has no op type", i);
        if (nd->n_output < 1 || !nd->output[0][0])
            return fail(t, FED_ERR_FORMAT, nd, "no output");
        if (nd->n_input > 64 || nd->n_output > 8 || nd->n_attribute > 64)
            return fail(t, FED_ERR_UNSUPPORTED, nd, "%zu inputs, %zu outputs, %zu attributes",
                        nd->n_input, nd->n_output, nd->n_attribute);
    }
    for (size_t i = 0; i < g->n_output; i++)
        if (!g->output[i]->name || !g->output[i]->name[0])
            return fail(t, FED_ERR_FORMAT, NULL, "graph output %zu has no name", i);
    return FED_OK;
}

static fed_err check_node(trans *t, const onode *nd)
{
    if (nd->domain && nd->domain[0] && strcmp(nd->domain, "ai.onnx"))
        return fail(t, FED_ERR_UNSUPPORTED, nd, "domain '%s' (the default domain only)",
                    nd->domain);
    for (size_t k = 0; k < nd->n_input; k++) {
        oval *v;

        if (!nd->input[k][0])
            continue;
        v = val_find(t, nd->input[k]);
        if (!v || !v->defined)
            return fail(t, FED_ERR_SPEC, nd,
                        "input '%s' is made by no earlier node (a dangling input, or a cycle)",
                        nd->input[k]);
    }
    for (size_t k = 0; k < nd->n_output; k++) {
        oval *v = nd->output[k][0] ? val_find(t, nd->output[k]) : NULL;

        if (v && v->defined)
            return fail(t, FED_ERR_SPEC, nd, "output '%s' is made twice", nd->output[k]);
        if (k > 0 && v && v->uses)
            return fail(t, FED_ERR_UNSUPPORTED, nd, "its output %zu ('%s') is used", k,
                        nd->output[k]);
    }
    return FED_OK;
}

/* The last layer, its loss: softmax folded into cross-entropy; one logit
 * (a sigmoid folded) into binary cross-entropy. */
/* The numeric columns a Slice took are those no embedding reads: the
 * embeddings' columns all before it, each once. */
static fed_err check_numeric(trans *t)
{
    fed_onnx *o = t->o;
    int ncat = 0;

    if (t->numeric_from < 0)
        return FED_OK;
    for (int i = 0; i < o->count; i++) {
        if (strcmp(o->nodes[i].kind, "embedding"))
            continue;
        if (o->nodes[i].column >= t->numeric_from)
            return fail(t, FED_ERR_UNSUPPORTED, NULL, "an embedding reads column %d, inside "
                        "the numeric columns' slice from %d", o->nodes[i].column,
                        t->numeric_from);
        ncat++;
        for (int j = 0; j < i; j++)
            if (!strcmp(o->nodes[j].kind, "embedding") && o->nodes[j].column == o->nodes[i].column)
                ncat--; /* two embeddings of one column */
    }
    if (ncat != t->numeric_from)
        return fail(t, FED_ERR_UNSUPPORTED, NULL, "the numeric columns' slice starts at %d but "
                    "%d columns are an embedding's: the columns before the slice must all be "
                    "categorical", t->numeric_from, ncat);
    return FED_OK;
}

static fed_err finish_output(trans *t)
{
    const Onnx__GraphProto *g = t->g;
    fed_onnx *o = t->o;
    oval *y;
    fed_model_node *last;
    int d[3];
    fed_err err;

    if ((err = check_numeric(t)) != FED_OK)
        return err;
    if (g->n_output != 1 || !g->output[0]->name)
        return fail(t, FED_ERR_UNSUPPORTED, NULL, "%zu outputs (one only)", g->n_output);
    y = val_find(t, g->output[0]->name);
    if (!y || !y->defined || y->kind != V_TENSOR)
        return fail(t, FED_ERR_SPEC, NULL, "its output '%s' is no layer's output",
                    g->output[0]->name);
    if (y->node != o->count - 1 || y->node < 0)
        return fail(t, FED_ERR_UNSUPPORTED, NULL,
                    "its output '%s' is not the last layer's", y->name);
    if (y->rank != 2 || y->pad[0] || y->pad[1])
        return fail(t, FED_ERR_UNSUPPORTED, NULL, "its output is not (N, classes)");
    if ((err = tensor_dims(t, NULL, y, d)))
        return err;
    last = &o->nodes[o->count - 1];
    o->in.classes = d[0] * d[1] * d[2];
    if (y->softmax)
        note(o, "the softmax last is folded into the cross-entropy loss");
    if (o->in.classes == 1) {
        fed_model_node *b;
        oval tmp;

        note(o, "one output: a logit, trained with binary cross-entropy%s",
             y->sigmoid_of ? " (the sigmoid last folded into it)" : "");
        if ((err = emit(t, NULL, "bce", NULL, y, &tmp, &b)))
            return err;
        o->in.classes = 2;
    } else if (y->sigmoid_of) {
        return fail(t, FED_ERR_UNSUPPORTED, NULL, "a sigmoid last on %d outputs",
                    o->in.classes);
    }
    if (!strcmp(last->kind, "linear") && last->out == o->in.classes)
        last->out = 0; /* "the classes", as a model file's last layer says */
    return FED_OK;
}

static fed_err translate(trans *t)
{
    const Onnx__GraphProto *g = t->g;
    oval *inv;
    fed_err err;

    count_uses(t);
    for (size_t i = 0; i < g->n_initializer; i++) {
        const otensor *x = g->initializer[i];
        oval *v;

        if (!x->name || !x->name[0])
            return fail(t, FED_ERR_FORMAT, NULL, "an initializer without a name");
        if ((err = check_tensor(t, x, "initializer")))
            return err;
        v = val_get(t, x->name);
        if (v->defined)
            return fail(t, FED_ERR_FORMAT, NULL, "initializer '%s' given twice", x->name);
        v->defined = 1;
        v->kind = V_PARAM;
        v->t = x;
        if (x->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 && tensor_numel(x) <= SMALL_MAX &&
            (err = small_of_tensor(t, NULL, x, v)))
            return err;
    }
    if ((err = read_input(t, &inv)))
        return err;
    /* constants first: a pattern looks at the constants of nodes after its
       head, which the exporter may write after it */
    for (size_t i = 0; i < g->n_node; i++) {
        const onode *nd = g->node[i];

        if (!nd->op_type || strcmp(nd->op_type, "Constant"))
            continue;
        if ((err = check_node(t, nd)) || (err = op_constant(t, (int)i, nd)))
            return err;
        val_get(t, nd->output[0])->defined = 1;
        t->done[i] = 2;
    }
    for (size_t i = 0; i < g->n_node; i++) {
        const onode *nd = g->node[i];
        op_fn fn;

        if (t->done[i] == 2)
            continue; /* a constant, made above */
        if ((err = check_node(t, nd)))
            return err;
        if (t->done[i]) { /* taken by a pattern: its outputs are made */
            for (size_t k = 0; k < nd->n_output; k++)
                if (nd->output[k][0])
                    val_get(t, nd->output[k])->defined = 1;
            continue;
        }
        if (!(fn = op_find(nd->op_type)))
            return fail(t, FED_ERR_UNSUPPORTED, nd, "op %s is not supported (docs/onnx.md lists "
                                                    "what is)", nd->op_type);
        if ((err = fn(t, (int)i, nd)))
            return err;
        for (size_t k = 0; k < nd->n_output; k++)
            if (nd->output[k][0])
                val_get(t, nd->output[k])->defined = 1;
    }
    return finish_output(t);
}

/* Each layer's initializers hold what planning counts for it. */
static fed_err check_weights(trans *t)
{
    fed_onnx *o = t->o;
    fed_model_node_info *info = fed_calloc((size_t)o->count, sizeof *info);
    size_t nparams = 0, have = 0;
    int planned = 0;
    fed_err err;

    if (!info)
        return FED_ERR_NOMEM;
    err = fed_model_graph_shapes(o->file, o->nodes, o->count, o->in, info, &planned, t->why,
                                 t->cap);
    if (err == FED_OK) {
        for (int i = 0; i < o->count; i++) /* batch norm's statistics and counter too */
            nparams += info[i].nparams + info[i].nbuffers;
        for (int i = 0; i < o->count; i++) /* a counter the file lacks starts at 0 */
            have += !strcmp(o->nodes[i].kind, "batchnorm");
        for (int i = 0; i < o->nweights; i++) {
            size_t len = strlen(o->weights[i].name);

            have += tensor_numel(o->weights[i].t);
            have -= len > 20 && !strcmp(o->weights[i].name + len - 20, ".num_batches_tracked");
        }
        if (have != nparams)
            err = fail(t, FED_ERR_SPEC, NULL,
                       "its initializers hold %zu values where its layers take %zu", have,
                       nparams);
    }
    fed_free(info);
    return err;
}

fed_err fed_onnx_parse(const char *name, const void *buf, size_t len, fed_onnx **out,
                       char *why, size_t cap)
{
    fed_onnx *o = fed_calloc(1, sizeof *o);
    trans t = {0};
    size_t slots;
    fed_err err = FED_OK;

    *out = NULL;
    if (!o)
        return FED_ERR_NOMEM;
    t.o = o;
    t.why = why;
    t.cap = cap;
    t.numeric_from = -1;
    o->file = name;
    o->alloc.cap = len * 2 + ALLOC_SLACK;
    o->pa = (ProtobufCAllocator){counting_malloc, counting_free, &o->alloc};
    if (len > FED_ONNX_FILE_MAX) {
        err = fail(&t, FED_ERR_TOO_LARGE, NULL, "%zu bytes, over %llu", len,
                   (unsigned long long)FED_ONNX_FILE_MAX);
        goto out;
    }
    o->msg = onnx__model_proto__unpack(&o->pa, len, buf);
    if (!o->msg) {
        err = o->alloc.over
                  ? fail(&t, FED_ERR_TOO_LARGE, NULL, "unpacking would take over %zu bytes",
                         o->alloc.cap)
                  : fail(&t, FED_ERR_FORMAT, NULL, "not an ONNX model (a protobuf ModelProto)");
        goto out;
    }
    if (!o->msg->graph && !o->msg->n_opset_import) { /* protobuf takes any bytes: none, say */
        err = fail(&t, FED_ERR_FORMAT, NULL, "%s", len ? "not an ONNX model (no graph, no opset)"
                                                       : "an empty file, not an ONNX model");
        goto out;
    }
    if ((err = check_opset(&t, o->msg)))
        goto out;
    t.g = o->msg->graph;
    if (!t.g) {
        err = fail(&t, FED_ERR_FORMAT, NULL, "no graph");
        goto out;
    }
    if (t.g->n_node > FED_ONNX_NODES_MAX || t.g->n_initializer > FED_ONNX_NODES_MAX ||
        t.g->n_input > FED_ONNX_NODES_MAX || t.g->n_output > 64) {
        err = fail(&t, FED_ERR_TOO_LARGE, NULL, "%zu nodes, %zu initializers (at most %d each)",
                   t.g->n_node, t.g->n_initializer, FED_ONNX_NODES_MAX);
        goto out;
    }
    if (t.g->n_sparse_initializer) {
        err = fail(&t, FED_ERR_UNSUPPORTED, NULL, "sparse initializers");
        goto out;
    }
    if ((err = check_shapes(&t)))
        goto out;
    /* every name a value: node inputs and outputs, initializers, inputs */
    slots = t.g->n_initializer + t.g->n_input + t.g->n_output + 1;
    for (size_t i = 0; i < t.g->n_node; i++)
        slots += t.g->node[i]->n_input + t.g->node[i]->n_output;
    if (slots > VALUES_MAX) {
        err = fail(&t, FED_ERR_TOO_LARGE, NULL, "%zu values (at most %d)", slots, VALUES_MAX);
        goto out;
    }
    for (t.hash_mask = 63; t.hash_mask < 2 * slots; t.hash_mask = t.hash_mask * 2 + 1)
        ;
    t.vals = fed_calloc(slots, sizeof *t.vals);
    t.hash = fed_malloc((t.hash_mask + 1) * sizeof *t.hash);
    t.done = fed_calloc(t.g->n_node + 1, 1);
    if (!t.vals || !t.hash || !t.done) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    memset(t.hash, 0xff, (t.hash_mask + 1) * sizeof *t.hash);
    if ((err = translate(&t)) || (o->nweights && (err = check_weights(&t))))
        goto out;
    *out = o;
    o = NULL;
out:
    fed_free(t.vals);
    fed_free(t.hash);
    fed_free(t.done);
    fed_onnx_free(o);
    return err;
}

fed_err fed_onnx_load(const char *path, fed_onnx **out, char *why, size_t cap)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    fed_err err;

    *out = NULL;
    if ((err = fed_data_read_file(path, FED_ONNX_FILE_MAX, &buf, &len)) != FED_OK)
        return fed_err_why(why, cap, err, "%s: %s", path,
                           err == FED_ERR_TOO_LARGE ? "larger than 1 GiB" : fed_strerror(err));
    err = fed_onnx_parse(path, buf, len, out, why, cap);
    fed_free(buf);
    if (*out)
        (*out)->file = NULL; /* the caller's string: not kept past the call */
    return err;
}

void fed_onnx_free(fed_onnx *o)
{
    if (!o)
        return;
    if (o->msg)
        onnx__model_proto__free_unpacked(o->msg, &o->pa);
    fed_free(o->nodes);
    fed_free(o->names);
    fed_free(o->weights);
    fed_free(o);
}

const fed_model_node *fed_onnx_nodes(const fed_onnx *o, int *count)
{
    *count = o->count;
    return o->nodes;
}

fed_model_shape fed_onnx_input(const fed_onnx *o) { return o->in; }

int fed_onnx_has_weights(const fed_onnx *o) { return o->nweights > 0; }

const char *fed_onnx_notes(const fed_onnx *o) { return o->notes; }

fed_err fed_onnx_apply_weights(const fed_onnx *o, fed_model *m, char *why, size_t cap)
{
    const fed_tensor_info *ti;
    float *p;
    int nt;
    fed_err err = FED_OK;

    if (!o->nweights)
        return FED_OK;
    ti = fed_model_tensors(m, &nt);
    if (!(p = fed_malloc(fed_model_nparams(m) * sizeof *p)))
        return FED_ERR_NOMEM;
    if ((err = fed_model_get_params(m, p)))
        goto out;
    for (int i = 0; i < nt; i++) {
        const oweight *w = NULL;
        size_t n;

        for (int k = 0; k < o->nweights && !w; k++)
            if (!strcmp(o->weights[k].name, ti[i].name))
                w = &o->weights[k];
        if (!w && (ti[i].flags & FED_TENSOR_INT64))
            continue; /* batch norm's counter, which exporters drop: 0 */
        if (!w) {
            err = fed_err_why(why, cap, FED_ERR_MODEL_MISMATCH,
                              "the ONNX file has no weights for tensor '%s'", ti[i].name);
            goto out;
        }
        n = tensor_numel(w->t);
        if (n != ti[i].numel) {
            err = fed_err_why(why, cap, FED_ERR_MODEL_MISMATCH,
                              "tensor '%s' takes %zu values, the file's %zu", ti[i].name,
                              ti[i].numel, n);
            goto out;
        }
        if (w->transpose) { /* (in, out) into (out, in) */
            size_t rows = (size_t)w->t->dims[0], cols = (size_t)w->t->dims[1];

            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++)
                    p[ti[i].offset + c * rows + r] = (float)tensor_at(w->t, r * cols + c);
        } else {
            for (size_t k = 0; k < n; k++)
                p[ti[i].offset + k] = (float)tensor_at(w->t, k);
        }
    }
    err = fed_model_set_params(m, p);
out:
    fed_free(p);
    return err;
}
