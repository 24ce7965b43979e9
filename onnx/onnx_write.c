/* onnx_write.c - a model's graph and weights as an ONNX ModelProto
 * (onnx_write.h): the graph's nodes walked in order, each written as the
 * ONNX op (or the exporter's op pattern) that computes it at inference,
 * built as protobuf-c messages in memory that this file owns (every
 * allocation listed and freed at the end), then packed. Never prints. */
#include "onnx/onnx_write.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "model/io.h"
#include "onnx.pb-c.h"

#define NODE_ATTRS 8  /* attributes of one node, at most */
#define NODE_INPUTS 5 /* inputs of one node, at most (BatchNormalization's, Slice's) */
#define NORM_EPS 1e-5f /* layer and group norm's epsilon: model.c's, PyTorch's default */

typedef Onnx__NodeProto onode;

/* The model in construction: every block it allocates, the lists the
 * graph points to. */
typedef struct wb {
    void **blocks;
    int nblocks, cap_blocks;
    int oom;
    onode **nodes;
    int nnodes, cap_nodes;
    Onnx__TensorProto **inits;
    int ninits, cap_inits;
    Onnx__StringStringEntryProto **meta;
    int nmeta, cap_meta;
} wb;

/* A pointer list *p (*n used, *cap room) one longer; 0 when out of memory. */
static int wb_grow(wb *b, void ***p, int *n, int *cap)
{
    void **q;
    int c = *cap ? *cap * 2 : 16;

    if (b->oom)
        return 0;
    if (*n < *cap)
        return 1;
    if (!(q = fed_realloc(*p, (size_t)c * sizeof *q))) {
        b->oom = 1;
        return 0;
    }
    *p = q;
    *cap = c;
    return 1;
}

/* n zeroed bytes that live as long as b; NULL (b->oom) when out of memory. */
static void *wb_new(wb *b, size_t n)
{
    void *p;

    if (!wb_grow(b, &b->blocks, &b->nblocks, &b->cap_blocks))
        return NULL;
    if (!(p = fed_calloc(1, n ? n : 1))) {
        b->oom = 1;
        return NULL;
    }
    b->blocks[b->nblocks++] = p;
    return p;
}

static char *wb_str(wb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static char *wb_str(wb *b, const char *fmt, ...)
{
    va_list ap;
    char *s;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !(s = wb_new(b, (size_t)n + 1)))
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* A node op(inputs: NULL-ended, at most 3) -> out, named name. */
static onode *wb_node(wb *b, const char *op, const char *name, const char *out,
                      const char *in0, const char *in1, const char *in2)
{
    const char *ins[3] = {in0, in1, in2};
    onode *n = wb_new(b, sizeof *n);
    char **pin = wb_new(b, NODE_INPUTS * sizeof *pin), **pout = wb_new(b, sizeof *pout);
    Onnx__AttributeProto **pa = wb_new(b, NODE_ATTRS * sizeof *pa);

    if (!n || !pin || !pout || !pa || !out || !name ||
        !wb_grow(b, (void ***)&b->nodes, &b->nnodes, &b->cap_nodes))
        return NULL;
    onnx__node_proto__init(n);
    n->op_type = (char *)op;
    n->name = (char *)name;
    for (int i = 0; i < 3 && ins[i]; i++)
        pin[n->n_input++] = (char *)ins[i];
    n->input = pin;
    pout[0] = (char *)out;
    n->n_output = 1;
    n->output = pout;
    n->attribute = pa;
    b->nodes[b->nnodes++] = n;
    return n;
}

static Onnx__AttributeProto *wb_attr(wb *b, onode *n, const char *name,
                                     Onnx__AttributeProto__AttributeType type)
{
    Onnx__AttributeProto *a;

    if (!n || !(a = wb_new(b, sizeof *a)))
        return NULL;
    assert(n->n_attribute < NODE_ATTRS);
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

static void wb_attr_int(wb *b, onode *n, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = wb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);

    if (a)
        a->has_i = 1, a->i = v;
}

static void wb_attr_float(wb *b, onode *n, const char *name, float v)
{
    Onnx__AttributeProto *a = wb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);

    if (a)
        a->has_f = 1, a->f = v;
}

/* An INTS attribute of the n values v. */
static void wb_attr_ints(wb *b, onode *n, const char *name, const int64_t *v, int count)
{
    Onnx__AttributeProto *a = wb_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *ints = wb_new(b, (size_t)count * sizeof *ints);

    if (!a || !ints)
        return;
    memcpy(ints, v, (size_t)count * sizeof *ints);
    a->ints = ints;
    a->n_ints = (size_t)count;
}

/* An INTS attribute of 2 values, or of both twice (pads: begins, ends). */
static void wb_attr_pair(wb *b, onode *n, const char *name, const int v[2], int twice)
{
    int64_t ints[4];

    for (int k = 0; k < 4; k++)
        ints[k] = v[k % 2];
    wb_attr_ints(b, n, name, ints, twice ? 4 : 2);
}

/* A float tensor named name of ndim dims holding v (n values), as raw
 * little-endian bytes; an int64 one when i64 (a count kept as a float,
 * batch norm's num_batches_tracked, as PyTorch keeps it); v NULL: zeros,
 * for the caller to fill. */
static Onnx__TensorProto *wb_tensor_of(wb *b, const char *name, int ndim, const int *dims,
                                       const float *v, size_t n, int i64)
{
    Onnx__TensorProto *t = wb_new(b, sizeof *t);
    int64_t *d = wb_new(b, (size_t)(ndim ? ndim : 1) * sizeof *d);
    uint8_t *raw = wb_new(b, n * (i64 ? 8 : 4));

    if (!t || !d || !raw)
        return NULL;
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type =
        i64 ? ONNX__TENSOR_PROTO__DATA_TYPE__INT64 : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    for (int k = 0; k < ndim; k++)
        d[k] = dims[k];
    t->n_dims = (size_t)ndim;
    t->dims = d;
    if (v && i64)
        for (size_t k = 0; k < n; k++)
            fed_put_u64le(raw + 8 * k, (uint64_t)(int64_t)v[k]);
    else if (v)
        fed_put_f32le_n(raw, v, n);
    t->has_raw_data = 1;
    t->raw_data.data = raw;
    t->raw_data.len = n * (i64 ? 8 : 4);
    return t;
}

static Onnx__TensorProto *wb_tensor(wb *b, const char *name, int ndim, const int *dims,
                                    const float *v, size_t n)
{
    return wb_tensor_of(b, name, ndim, dims, v, n, 0);
}

/* A Constant node named name giving the tensor t as out. */
static void wb_const_of(wb *b, const char *name, const char *out, Onnx__TensorProto *t)
{
    onode *n = wb_node(b, "Constant", name, out, NULL, NULL, NULL);
    Onnx__AttributeProto *a = wb_attr(b, n, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);

    if (a)
        a->t = t;
}

/* A Constant node named name giving the float scalar v as out. */
static void wb_const(wb *b, const char *name, const char *out, float v)
{
    wb_const_of(b, name, out, wb_tensor(b, NULL, 0, NULL, &v, 1));
}

/* A Constant node giving int64 values as out: the scalar v[0] (count 0),
 * else the vector v of count values. */
static void wb_const_ints(wb *b, const char *name, const char *out, const int64_t *v, int count)
{
    int dims[1] = {count};
    Onnx__TensorProto *t = wb_tensor_of(b, NULL, count ? 1 : 0, dims, NULL,
                                        (size_t)(count ? count : 1), 1);

    if (t)
        for (int k = 0; k < (count ? count : 1); k++)
            fed_put_u64le(t->raw_data.data + 8 * k, (uint64_t)v[k]);
    wb_const_of(b, name, out, t);
}

/* A graph input or output: a float tensor (batch, dims...). */
static Onnx__ValueInfoProto *wb_value(wb *b, const char *name, int rank, const int *dims)
{
    Onnx__ValueInfoProto *vi = wb_new(b, sizeof *vi);
    Onnx__TypeProto *tp = wb_new(b, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = wb_new(b, sizeof *tt);
    Onnx__TensorShapeProto *sh = wb_new(b, sizeof *sh);
    Onnx__TensorShapeProto__Dimension *dm = wb_new(b, (size_t)rank * sizeof *dm),
                                      **pd = wb_new(b, (size_t)rank * sizeof *pd);

    if (!vi || !tp || !tt || !sh || !dm || !pd)
        return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    for (int k = 0; k < rank; k++) {
        onnx__tensor_shape_proto__dimension__init(&dm[k]);
        if (k == 0) {
            dm[k].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dm[k].dim_param = "batch";
        } else {
            dm[k].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dm[k].dim_value = dims[k - 1];
        }
        pd[k] = &dm[k];
    }
    sh->n_dim = (size_t)rank;
    sh->dim = pd;
    tt->has_elem_type = 1;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->name = (char *)name;
    vi->type = tp;
    return vi;
}

static void put_meta(void *ctx, const char *key, const char *value)
{
    wb *b = ctx;
    Onnx__StringStringEntryProto *e = wb_new(b, sizeof *e);
    char *k = wb_str(b, "%s", key), *v = wb_str(b, "%s", value);

    if (!e || !k || !v || !wb_grow(b, (void ***)&b->meta, &b->nmeta, &b->cap_meta))
        return;
    onnx__string_string_entry_proto__init(e);
    e->key = k;
    e->value = v;
    b->meta[b->nmeta++] = e;
}

/* ------------------------------------------------------------ the walk -- */

/* A value of the graph: its name, rank (2: (N, features), 4: images) and
 * the node that makes it (NULL: the graph's input). */
typedef struct wval {
    const char *name;
    int rank;
    onode *made_by;
} wval;

typedef struct walk {
    wb *b;
    const fed_model_node *nodes;
    const fed_store_st_model *meta;
    int count;           /* nodes */
    int features;        /* a CSV row's columns (0: an image) */
    unsigned char *used; /* meta's tensors taken */
    char *why;
    size_t cap;
} walk;

/* meta's tensor LAYER.SUFFIX as an initializer, its name; NULL when meta
 * has none (*missing set) or out of memory. */
static const char *weight(walk *w, const char *layer, const char *suffix, int *missing)
{
    char name[sizeof w->meta->t[0].name];
    const fed_store_st_model *meta = w->meta;

    snprintf(name, sizeof name, "%s%s", layer, suffix);
    for (int i = 0; i < meta->nt; i++) {
        const fed_tensor_info *t = &meta->t[i];
        Onnx__TensorProto *x;

        if (strcmp(t->name, name))
            continue;
        w->used[i] = 1;
        x = wb_tensor_of(w->b, wb_str(w->b, "%s", name), t->ndim, t->shape,
                         meta->params + t->offset, t->numel, (t->flags & FED_TENSOR_INT64) != 0);
        if (!x || !wb_grow(w->b, (void ***)&w->b->inits, &w->b->ninits, &w->b->cap_inits))
            return NULL;
        w->b->inits[w->b->ninits++] = x;
        return x->name;
    }
    *missing = 1;
    return NULL;
}

/* The op of a layer of one input: x -> a node op named /LAYER/OP (and
 * _IDX when idx >= 0: one of several of that op), its output y. */
static onode *opn(walk *w, const char *op, const char *layer, int idx, const wval *x, wval *y)
{
    char tag[16] = "";
    char *out, *name;
    onode *n;

    if (idx >= 0)
        snprintf(tag, sizeof tag, "_%d", idx);
    out = wb_str(w->b, "/%s/%s%s_output_0", layer, op, tag);
    name = wb_str(w->b, "/%s/%s%s", layer, op, tag);
    n = wb_node(w->b, op, name, out, x->name, NULL, NULL);

    y->name = out;
    y->rank = x->rank;
    y->made_by = n;
    return n;
}

static onode *op1(walk *w, const char *op, const char *layer, const wval *x, wval *y)
{
    return opn(w, op, layer, -1, x, y);
}

/* opn with a second input in1 (a value's or an initializer's name). */
static onode *op2(walk *w, const char *op, const char *layer, int idx, const wval *x,
                  const char *in1, wval *y)
{
    onode *n = opn(w, op, layer, idx, x, y);

    if (n)
        n->input[n->n_input++] = (char *)in1;
    return n;
}

/* A Constant /LAYER/Constant_IDX of int64 values (count 0: the scalar
 * v[0]), its output's name. */
static const char *const_ints(walk *w, const char *layer, int idx, const int64_t *v, int count)
{
    const char *out = wb_str(w->b, "/%s/Constant_%d_output_0", layer, idx);

    wb_const_ints(w->b, wb_str(w->b, "/%s/Constant_%d", layer, idx), out, v, count);
    return out;
}

/* x flattened to (N, features) when it is an image. */
static void flat(walk *w, const char *layer, wval *x)
{
    if (x->rank == 4) {
        wval f;

        wb_attr_int(w->b, op1(w, "Flatten", layer, x, &f), "axis", 1);
        f.rank = 2;
        *x = f;
    }
}

/* kernel, strides, pads and dilations of node nd's window (zero strides
 * and dilations: the defaults, 1 for a convolution, the kernel for a pool). */
static void window(walk *w, onode *n, const fed_model_node *nd, const int kernel[2], int pool)
{
    int s[2], d[2];

    for (int k = 0; k < 2; k++) {
        s[k] = nd->stride[k] ? nd->stride[k] : pool ? kernel[k] : 1;
        d[k] = nd->dilation[k] ? nd->dilation[k] : 1;
    }
    wb_attr_pair(w->b, n, "kernel_shape", kernel, 0);
    wb_attr_pair(w->b, n, "strides", s, 0);
    wb_attr_pair(w->b, n, "pads", nd->padding, 1);
    if (!pool)
        wb_attr_pair(w->b, n, "dilations", d, 0);
}

/* A norm layer nd's weight and bias initializers when its input x is of
 * the rank its export takes (2: features, 4: an image); else 0, why said. */
static int norm_weights(walk *w, const fed_model_node *nd, const wval *x, int rank,
                        const char **wt, const char **bias, int *missing)
{
    if (x->rank != rank) {
        fed_err_why(w->why, w->cap, FED_ERR_UNSUPPORTED,
                    "layer '%s' (%s) of %s has no ONNX export yet (only of %s)", nd->name,
                    nd->kind, rank == 2 ? "an image" : "features",
                    rank == 2 ? "features" : "an image");
        return 0;
    }
    *wt = weight(w, nd->name, ".weight", missing);
    *bias = weight(w, nd->name, ".bias", missing);
    return 1;
}

/* Node i (x its input, x2 add's or concat's other) into the graph; *y its
 * output. */
static fed_err layer_out(walk *w, int i, const wval *x, const wval *x2, wval *y)
{
    const fed_model_node *nd = &w->nodes[i];
    const char *k = nd->kind, *name = nd->name, *wt = NULL, *bias = NULL;
    wb *b = w->b;
    int missing = 0;
    onode *n;

    if (!strcmp(k, "linear")) {
        wval xf = *x;

        flat(w, name, &xf);
        wt = weight(w, name, ".weight", &missing);
        bias = nd->no_bias ? NULL : weight(w, name, ".bias", &missing);
        n = op1(w, "Gemm", name, &xf, y);
        if (n) { /* Gemm(x, W, b), transB: nn.Linear's (out, in) */
            n->input[n->n_input++] = (char *)wt;
            if (bias)
                n->input[n->n_input++] = (char *)bias;
        }
        wb_attr_int(b, n, "transB", 1);
        y->rank = 2;
    } else if (!strcmp(k, "conv")) {
        if (x->rank != 4)
            return fed_err_why(w->why, w->cap, FED_ERR_UNSUPPORTED,
                               "layer '%s' (conv) takes features, not an image", name);
        wt = weight(w, name, ".weight", &missing);
        bias = nd->no_bias ? NULL : weight(w, name, ".bias", &missing);
        n = op1(w, "Conv", name, x, y);
        if (n) {
            n->input[n->n_input++] = (char *)wt;
            if (bias)
                n->input[n->n_input++] = (char *)bias;
        }
        window(w, n, nd, nd->kernel, 0);
        if (nd->groups > 1)
            wb_attr_int(b, n, "group", nd->groups);
    } else if (!strcmp(k, "batchnorm")) { /* inference: the running statistics */
        const char *rm, *rv;

        wt = weight(w, name, ".weight", &missing);
        bias = weight(w, name, ".bias", &missing);
        rm = weight(w, name, ".running_mean", &missing);
        rv = weight(w, name, ".running_var", &missing);
        /* read by no node: PyTorch's buffer, so load_state_dict(strict=True) takes the file */
        (void)weight(w, name, ".num_batches_tracked", &missing);
        n = op1(w, "BatchNormalization", name, x, y);
        if (n) {
            n->input[n->n_input++] = (char *)wt;
            n->input[n->n_input++] = (char *)bias;
            n->input[n->n_input++] = (char *)rm;
            n->input[n->n_input++] = (char *)rv;
        }
        wb_attr_float(b, n, "epsilon", (float)(nd->eps > 0.0 ? nd->eps : 1e-5));
        wb_attr_float(b, n, "momentum", (float)(1.0 - (nd->momentum > 0.0 ? nd->momentum : 0.1)));
    } else if (!strcmp(k, "maxpool") || !strcmp(k, "avgpool")) {
        int avg = k[0] == 'a';

        n = op1(w, avg ? "AveragePool" : "MaxPool", name, x, y);
        window(w, n, nd, nd->kernel, 1);
        if (avg) /* the padding counted, as PyTorch's default */
            wb_attr_int(b, n, "count_include_pad", 1);
    } else if (!strcmp(k, "global_avgpool")) {
        op1(w, "GlobalAveragePool", name, x, y);
    } else if (!strcmp(k, "relu") || !strcmp(k, "sigmoid") || !strcmp(k, "tanh")) {
        op1(w, !strcmp(k, "relu") ? "Relu" : !strcmp(k, "tanh") ? "Tanh" : "Sigmoid", name, x, y);
    } else if (!strcmp(k, "leaky_relu")) {
        wb_attr_float(b, op1(w, "LeakyRelu", name, x, y), "alpha", 0.01f);
    } else if (!strcmp(k, "flatten")) {
        *y = *x;
        flat(w, name, y);
    } else if (!strcmp(k, "silu")) { /* x * sigmoid(x) */
        wval s;

        op1(w, "Sigmoid", name, x, &s);
        n = op1(w, "Mul", name, x, y);
        if (n)
            n->input[n->n_input++] = (char *)s.name;
    } else if (!strcmp(k, "gelu")) { /* x * (1 + erf(x / sqrt 2)) * 0.5, the exporter's */
        static const char *const ops[] = {"Div", "Erf", "Add", "Mul", "Mul"};
        static const float c[] = {1.41421353816986083984f, 0, 1, 0, 0.5f};
        wval cur = *x;

        for (int j = 0; j < 5; j++) {
            const char *cname = NULL;
            wval nx;

            if (c[j] != 0) {
                cname = wb_str(b, "/%s/Constant_%d_output_0", name, j);
                wb_const(b, wb_str(b, "/%s/Constant_%d", name, j), cname, c[j]);
            }
            n = opn(w, ops[j], name, j, &cur, &nx);
            if (n && (cname || j == 3))
                n->input[n->n_input++] = (char *)(cname ? cname : x->name);
            cur = nx;
        }
        *y = cur;
    } else if (!strcmp(k, "add") || !strcmp(k, "concat")) {
        n = op1(w, k[0] == 'a' ? "Add" : "Concat", name, x, y);
        if (n)
            n->input[n->n_input++] = (char *)x2->name;
        if (k[0] == 'c')
            wb_attr_int(b, n, "axis", 1);
    } else if (!strcmp(k, "embedding")) {
        /* the exporter's nn.Embedding of x[:, column].long(): Gather of the
           column (axis 1), Cast to int64, Gather of the weight's rows */
        int64_t col = nd->column;
        wval c, ids;

        wt = weight(w, name, ".weight", &missing);
        wb_attr_int(b, op2(w, "Gather", name, 0, x, const_ints(w, name, 0, &col, 0), &c), "axis",
                    1);
        wb_attr_int(b, op1(w, "Cast", name, &c, &ids), "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
        n = opn(w, "Gather", name, 1, &ids, y);
        if (n) { /* Gather(weight, ids) */
            n->input[1] = n->input[0];
            n->input[0] = (char *)wt;
            n->n_input = 2;
        }
        y->rank = 2;
    } else if (!strcmp(k, "numeric")) {
        /* x[:, from:] (Slice): the columns no embedding reads, which must be
           the row's last ones, the categorical columns all before them */
        int64_t from = 0, v[4] = {0, INT64_MAX, 1, 1};
        unsigned char *cat = fed_calloc((size_t)w->features + 1, 1);

        if (!cat)
            return FED_ERR_NOMEM;
        for (int j = 0; j < w->count; j++)
            if (!strcmp(w->nodes[j].kind, "embedding") && w->nodes[j].column < w->features &&
                !cat[w->nodes[j].column]++)
                from++;
        for (int j = 0; j < from; j++)
            if (!cat[j])
                from = -1;
        fed_free(cat);
        if (from < 0)
            return fed_err_why(w->why, w->cap, FED_ERR_UNSUPPORTED,
                               "layer '%s' (numeric): the categorical columns (an embedding's) "
                               "are not the row's first ones, so the numeric columns are no "
                               "slice x[:, k:] (put the categorical columns first in the CSV)",
                               name);
        const char *in[4];

        v[0] = from;
        for (int j = 0; j < 4; j++) /* starts, ends, axes, steps */
            in[j] = const_ints(w, name, j, &v[j], 1);
        n = op1(w, "Slice", name, x, y);
        for (int j = 0; n && j < 4; j++)
            n->input[n->n_input++] = (char *)in[j];
    } else if (!strcmp(k, "layernorm")) {
        /* over the features, as the exporter writes it before opset 17:
           d = x - mean(x), d / sqrt(mean(d^2) + eps) * weight + bias */
        static const int64_t last[1] = {-1};
        const char *two = wb_str(b, "/%s/Constant_output_0", name),
                   *eps = wb_str(b, "/%s/Constant_1_output_0", name);
        wval m, d, p, v, s, r, q, e;

        if (!norm_weights(w, nd, x, 2, &wt, &bias, &missing))
            return FED_ERR_UNSUPPORTED;
        wb_const(b, wb_str(b, "/%s/Constant", name), two, 2.0f);
        wb_const(b, wb_str(b, "/%s/Constant_1", name), eps, NORM_EPS);
        wb_attr_ints(b, opn(w, "ReduceMean", name, 0, x, &m), "axes", last, 1);
        op2(w, "Sub", name, -1, x, m.name, &d);
        op2(w, "Pow", name, -1, &d, two, &p);
        wb_attr_ints(b, opn(w, "ReduceMean", name, 1, &p, &v), "axes", last, 1);
        op2(w, "Add", name, 0, &v, eps, &s);
        op1(w, "Sqrt", name, &s, &r);
        op2(w, "Div", name, -1, &d, r.name, &q);
        op2(w, "Mul", name, -1, &q, wt, &e);
        op2(w, "Add", name, 1, &e, bias, y);
    } else if (!strcmp(k, "groupnorm")) {
        /* the exporter's: Reshape to (N, G, -1), InstanceNormalization
           (scale 1, bias 0), Reshape back to x's Shape, Mul by the weight
           and Add the bias, each Unsqueezed to (C, 1, 1) */
        int G = nd->groups > 0 ? nd->groups : 1;
        int64_t to[3] = {0, G, -1}, axes[2] = {1, 2};
        float *ones = wb_new(b, (size_t)G * sizeof *ones), *zeros = wb_new(b, (size_t)G * 4);
        const char *one = wb_str(b, "/%s/Constant_1_output_0", name),
                   *zero = wb_str(b, "/%s/Constant_2_output_0", name), *ax;
        wval r, in, sh, back, mul;
        onode *wn, *bn;

        if (!norm_weights(w, nd, x, 4, &wt, &bias, &missing))
            return FED_ERR_UNSUPPORTED;
        if (!ones || !zeros)
            return FED_ERR_NOMEM;
        for (int j = 0; j < G; j++)
            ones[j] = 1.0f;
        op2(w, "Reshape", name, 0, x, const_ints(w, name, 0, to, 3), &r);
        wb_const_of(b, wb_str(b, "/%s/Constant_1", name), one, wb_tensor(b, NULL, 1, &G, ones, (size_t)G));
        wb_const_of(b, wb_str(b, "/%s/Constant_2", name), zero,
                    wb_tensor(b, NULL, 1, &G, zeros, (size_t)G));
        n = op2(w, "InstanceNormalization", name, -1, &r, one, &in);
        if (n)
            n->input[n->n_input++] = (char *)zero;
        wb_attr_float(b, n, "epsilon", NORM_EPS);
        op1(w, "Shape", name, x, &sh);
        op2(w, "Reshape", name, 1, &in, sh.name, &back);
        ax = const_ints(w, name, 3, axes, 2);
        wn = wb_node(b, "Unsqueeze", wb_str(b, "/%s/Unsqueeze", name),
                     wb_str(b, "/%s/Unsqueeze_output_0", name), wt, ax, NULL);
        bn = wb_node(b, "Unsqueeze", wb_str(b, "/%s/Unsqueeze_1", name),
                     wb_str(b, "/%s/Unsqueeze_1_output_0", name), bias, ax, NULL);
        if (!wn || !bn)
            return FED_ERR_NOMEM;
        op2(w, "Mul", name, -1, &back, wn->output[0], &mul);
        op2(w, "Add", name, -1, &mul, bn->output[0], y);
        y->rank = 4;
    } else if (!strcmp(k, "dropout") || !strcmp(k, "bce") || !strcmp(k, "mse")) {
        *y = *x; /* the identity at inference; a loss is no op: its logits out */
    } else {
        return fed_err_why(w->why, w->cap, FED_ERR_UNSUPPORTED,
                           "layer '%s' (%s) has no ONNX export yet (export it as safetensors)",
                           name, k);
    }
    if (missing)
        return fed_err_why(w->why, w->cap, FED_ERR_MODEL_MISMATCH,
                           "layer '%s' (%s): the weights lack one of its tensors '%s.weight', "
                           "'%s.bias'%s", name, k, name, name,
                           !strcmp(k, "batchnorm") ? " and its running statistics and counter"
                                                   : "");
    return b->oom ? FED_ERR_NOMEM : FED_OK;
}

/* The graph's nodes, input and output into g. */
static fed_err write_graph(walk *w, int count, fed_model_shape in, int out_numel,
                           Onnx__GraphProto *g)
{
    wb *b = w->b;
    wval *v = fed_calloc((size_t)count, sizeof *v), x, last;
    int csv = in.c == 1 && in.h == 1, dims[3] = {in.c, in.h, in.w};
    Onnx__ValueInfoProto **pin = wb_new(b, sizeof *pin), **pout = wb_new(b, sizeof *pout);
    fed_err err = FED_OK;

    if (!v || !pin || !pout) {
        fed_free(v);
        return FED_ERR_NOMEM;
    }
    x = (wval){"input", csv ? 2 : 4, NULL};
    for (int i = 0; i < count && err == FED_OK; i++) {
        const fed_model_node *nd = &w->nodes[i];
        const wval *src = nd->input < 0 ? &x : &v[nd->input];
        const wval *src2 = nd->other < 0 ? &x : &v[nd->other];

        err = layer_out(w, i, src, src2, &v[i]);
    }
    if (err == FED_OK) {
        last = v[count - 1];
        if (last.rank == 4) /* (N, classes) out */
            flat(w, "output", &last);
        if (!last.made_by) {
            err = fed_err_why(w->why, w->cap, FED_ERR_UNSUPPORTED,
                              "the graph computes nothing of its input");
        } else {
            last.made_by->output[0] = "logits";
            pin[0] = wb_value(b, "input", csv ? 2 : 4, csv ? &dims[2] : dims);
            pout[0] = wb_value(b, "logits", 2, &out_numel);
            g->n_input = g->n_output = 1;
            g->input = pin;
            g->output = pout;
            g->n_node = (size_t)b->nnodes;
            g->node = b->nodes;
            g->n_initializer = (size_t)b->ninits;
            g->initializer = b->inits;
            err = b->oom ? FED_ERR_NOMEM : FED_OK;
        }
    }
    fed_free(v);
    return err;
}

fed_err fed_onnx_encode(const fed_model *m, const fed_store_st_model *meta, uint8_t **out,
                        size_t *len, char *why, size_t cap)
{
    fed_model_shape in = fed_model_input(m);
    fed_model_node *nodes = NULL;
    fed_model_node_info *info = NULL;
    Onnx__ModelProto mp;
    Onnx__GraphProto g;
    Onnx__OperatorSetIdProto op;
    Onnx__OperatorSetIdProto *ops[1] = {&op};
    wb b;
    walk w = {&b, NULL, meta, 0, in.c == 1 && in.h == 1 ? in.w : 0, NULL, why, cap};
    int count = 0, planned = 0, last;
    fed_err err;

    memset(&b, 0, sizeof b);
    *out = NULL;
    *len = 0;
    if ((err = fed_model_spec_nodes(fed_model_graph(m), in, &nodes, &count, why, cap)))
        goto out;
    w.nodes = nodes;
    w.count = count;
    info = fed_calloc((size_t)count, sizeof *info);
    w.used = fed_calloc((size_t)meta->nt + 1, 1);
    if (!info || !w.used) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    if ((err = fed_model_graph_shapes(fed_model_spec(m), nodes, count, in, info, &planned, why,
                                      cap)))
        goto out;
    onnx__model_proto__init(&mp);
    onnx__graph_proto__init(&g);
    onnx__operator_set_id_proto__init(&op);
    op.domain = "";
    op.has_version = 1;
    op.version = FED_ONNX_WRITE_OPSET;
    g.name = "fednode";
    last = count - 1; /* the logits: the layer before a loss node */
    while (last > 0 && (!strcmp(nodes[last].kind, "bce") || !strcmp(nodes[last].kind, "mse") ||
                        !strcmp(nodes[last].kind, "dropout")))
        last--;
    if ((err = write_graph(&w, count, in, info[last].c * info[last].h * info[last].w, &g)))
        goto out;
    for (int i = 0; i < meta->nt; i++)
        if (!w.used[i]) {
            err = fed_err_why(why, cap, FED_ERR_MODEL_MISMATCH,
                              "tensor '%s' is no layer's of the graph", meta->t[i].name);
            goto out;
        }
    if ((err = fed_store_safetensors_metadata(meta, put_meta, &b)))
        goto out;
    put_meta(&b, "fednode.output",
             !strcmp(nodes[count - 1].kind, "bce")
                 ? "logits: one logit, P(class 1) = sigmoid(logit) (trained with binary "
                   "cross-entropy)"
             : !strcmp(nodes[count - 1].kind, "mse")
                 ? "the regression outputs (trained with mean squared error)"
                 : "logits: class probabilities are softmax(logits) (trained with "
                   "cross-entropy); dropout removed");
    if (b.oom) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    mp.has_ir_version = 1;
    mp.ir_version = FED_ONNX_WRITE_IR;
    mp.n_opset_import = 1;
    mp.opset_import = ops;
    mp.producer_name = "fednode";
    mp.graph = &g;
    mp.n_metadata_props = (size_t)b.nmeta;
    mp.metadata_props = b.meta;
    *len = onnx__model_proto__get_packed_size(&mp);
    if (!(*out = fed_malloc(*len ? *len : 1))) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    onnx__model_proto__pack(&mp, *out);
out:
    if (err == FED_ERR_NOMEM)
        fed_err_why(why, cap, err, "out of memory");
    for (int i = 0; i < b.nblocks; i++)
        fed_free(b.blocks[i]);
    fed_free(b.blocks);
    fed_free(b.nodes);
    fed_free(b.inits);
    fed_free(b.meta);
    fed_free(w.used);
    fed_free(info);
    fed_free(nodes);
    return err;
}

fed_err fed_onnx_save(const char *path, const fed_model *m, const fed_store_st_model *meta,
                      char *why, size_t cap)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    fed_err err = fed_onnx_encode(m, meta, &buf, &len, why, cap);

    if (err == FED_OK && (err = fed_model_write_file(path, buf, len)) != FED_OK)
        fed_err_why(why, cap, err, "writing %s: %s", path, fed_strerror(err));
    fed_free(buf);
    return err;
}
