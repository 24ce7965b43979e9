/* test_onnx_nodes.c - ONNX's own per-operator vectors (Debian's
 * libonnx-testdata: node/TEST/model.onnx with test_data_set_0/input_K.pb
 * and output_0.pb) through our import and forward: every test whose ops
 * are all in the importer's table is imported, run in fednode and compared
 * with the expected output, and counted as passed, refused (with the
 * import's or the model's words) or failed. The test fails on any failure;
 * exit 77 without the test data.
 *
 * A node test is a single op with its weights as graph inputs, where a model
 * of ours is a network that ends in its logits; the harness rewrites each
 * file (test-only, the import is unchanged): inputs 1.. become initializers
 * from their input_K.pb; an identity layer (a 1x1 convolution, or a linear
 * layer, weight I, no bias) goes before the op so that an op of no layer of
 * its own (a relu) has one to fold into, and one after it (flatten, then a
 * linear layer of weight I) so that the model ends in a linear layer, except
 * after a Softmax/LogSoftmax, which the import folds into the loss and the
 * harness applies to the logits; element-wise ops (Relu, LeakyRelu, Sigmoid,
 * Tanh) on an input of rank 3 see it as (N, rest). Products by 1 and sums
 * with 0 are exact, so the identities change no value. Outputs compare
 * with ONNX's backend-test tolerance: |got - want| <= 1e-7 + 1e-3 |want|.
 * Usage: test_onnx_nodes [-v] [DIR] (default $FEDNODE_ONNX_TESTDATA, else
 * /usr/share/libonnx-testdata/data/node). */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <protobuf-c/protobuf-c.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/model.h"
#include "onnx.pb-c.h"
#include "onnx/onnx.h"

#define TESTDATA "/usr/share/libonnx-testdata/data/node"
#define HEAD_MAX 4096 /* outputs of the identity layer after the op */
#define CASES_MAX 2048

/* The importer's op table (onnx/onnx.c OPS): a test using another op is
 * out of scope, not counted. */
static const char *const OURS[] = {
    "Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool", "Relu",
    "LeakyRelu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Flatten", "Identity", "Add",
    "Concat", "Constant", "Shape", "Gather", "Unsqueeze", "Reshape", "Pad", "Div",
    "BatchNormalization", NULL};
static const char *const ELEMENTWISE[] = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", NULL};

static int in_list(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (!strcmp(*list, s))
            return 1;
    return 0;
}

typedef struct counts {
    int scope, passed, refused, failed;
} counts;

/* A file's bytes (the caller frees with fed_free), or NULL. */
static uint8_t *slurp(const char *dir, const char *name, size_t *len)
{
    char path[1200];
    uint8_t *buf = NULL;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (fed_data_read_file(path, 1u << 28, &buf, len) != FED_OK)
        return NULL;
    return buf;
}

static Onnx__TensorProto *read_tensor(const char *dir, const char *name)
{
    size_t len;
    uint8_t *buf = slurp(dir, name, &len);
    Onnx__TensorProto *t = buf ? onnx__tensor_proto__unpack(NULL, len, buf) : NULL;

    fed_free(buf);
    return t;
}

static size_t numel(const Onnx__TensorProto *t)
{
    size_t n = 1;

    for (size_t i = 0; i < t->n_dims; i++)
        n *= (size_t)t->dims[i];
    return n;
}

/* A float tensor's values (raw or float_data), or NULL. */
static const float *floats(const Onnx__TensorProto *t)
{
    if (t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
        return NULL;
    if (t->has_raw_data)
        return t->raw_data.len == numel(t) * 4 ? (const float *)t->raw_data.data : NULL;
    return t->n_float_data == numel(t) ? t->float_data : NULL;
}

/* The rewrite's own messages: the identity layers and what points to them. */
typedef struct rewrite {
    Onnx__NodeProto pre, flat, post;
    char *pre_in[2], *pre_out[1], *flat_in[1], *flat_out[1], *post_in[2], *post_out[1];
    Onnx__AttributeProto trans_b, flat_axis, *post_attrs[1], *pre_attrs[1], *flat_attrs[1];
    Onnx__TensorProto pre_w, post_w;
    int64_t pre_dims[4], post_dims[4];
    float *pre_v, *post_v;
    Onnx__TensorShapeProto view;
    Onnx__TensorShapeProto__Dimension view_dim[2], *view_pdim[2];
} rewrite;

/* t (name, n x n, or n x n x 1 x 1 with conv) as the identity. */
static float *identity(Onnx__TensorProto *t, int64_t *dims, const char *name, int64_t n,
                       int conv)
{
    float *v = calloc((size_t)(n * n), sizeof *v);

    if (!v)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        v[i * n + i] = 1;
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    dims[0] = dims[1] = n;
    dims[2] = dims[3] = 1;
    t->n_dims = conv ? 4 : 2;
    t->dims = dims;
    t->n_float_data = (size_t)(n * n);
    t->float_data = v;
    return v;
}

static void node(Onnx__NodeProto *nd, const char *op, const char *name, char **in, size_t nin,
                 char **out, Onnx__AttributeProto **attrs, size_t nattrs)
{
    onnx__node_proto__init(nd);
    nd->op_type = (char *)op;
    nd->name = (char *)name;
    nd->input = in;
    nd->n_input = nin;
    nd->output = out;
    nd->n_output = 1;
    nd->attribute = attrs;
    nd->n_attribute = nattrs;
}

static void int_attr(Onnx__AttributeProto *a, const char *name, int64_t v)
{
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = v;
}

/* One result line; counted. */
static void report(counts *c, int verbose, const char *test, char kind, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void report(counts *c, int verbose, const char *test, char kind, const char *fmt, ...)
{
    va_list ap;

    if (kind == 'P')
        c->passed++;
    else if (kind == 'R')
        c->refused++;
    else
        c->failed++;
    if (!verbose && kind != 'F')
        return;
    printf("%s %s: ", kind == 'P' ? "passed " : kind == 'R' ? "refused" : "FAILED ", test);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

/* Our forward of the rewritten graph on x (n rows) into *out (n * *k). */
static void run(const char *test, const uint8_t *buf, size_t len, const float *x, int n,
                const Onnx__TensorProto *want, int softmax, counts *c, int verbose)
{
    fed_onnx *o = NULL;
    fed_backend *be = NULL;
    fed_model *m = NULL;
    const fed_model_node *nodes;
    char why[1024] = "";
    float *out = NULL;
    int32_t *y = NULL;
    int count, k;
    size_t bad = 0, worst = 0;

    if (fed_onnx_parse(test, buf, len, &o, why, sizeof why) != FED_OK) {
        report(c, verbose, test, 'R', "import: %s", why);
        return;
    }
    nodes = fed_onnx_nodes(o, &count);
    if (fed_backend_cpu_new(1, &be) != FED_OK ||
        fed_model_new_graph(test, nodes, count, fed_onnx_input(o), be, NULL, 1, n, &m) != FED_OK) {
        if (fed_model_graph_explain(test, nodes, count, fed_onnx_input(o), NULL, why,
                                    sizeof why) == FED_OK)
            snprintf(why, sizeof why, "the backend refuses it");
        report(c, verbose, test, 'R', "model: %s", why);
        goto out;
    }
    if (fed_onnx_apply_weights(o, m, why, sizeof why) != FED_OK) {
        report(c, verbose, test, 'F', "weights: %s", why);
        goto out;
    }
    k = fed_model_nlogits(m);
    if ((size_t)n * (size_t)k != numel(want) || !floats(want)) {
        report(c, verbose, test, 'F', "gives %d x %d values, the test %zu", n, k, numel(want));
        goto out;
    }
    out = calloc((size_t)n * k, sizeof *out);
    y = calloc((size_t)n, sizeof *y);
    if (!out || !y) {
        report(c, verbose, test, 'F', "out of memory");
        goto out;
    }
    {
        fed_batch b = {.n = n, .x_f32 = x, .y = y};

        if (fed_model_logits(m, &b, out) != FED_OK) {
            report(c, verbose, test, 'F', "the forward failed");
            goto out;
        }
    }
    for (int r = 0; softmax && r < n; r++) { /* the folded (log-)softmax, in double */
        float *z = out + (size_t)r * k;
        double mx = z[0], sum = 0;

        for (int j = 1; j < k; j++)
            mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < k; j++)
            sum += exp((double)z[j] - mx);
        for (int j = 0; j < k; j++)
            z[j] = softmax == 1 ? (float)(exp((double)z[j] - mx) / sum)
                                : (float)((double)z[j] - mx - log(sum));
    }
    for (size_t i = 0; i < (size_t)n * k; i++) {
        double w = floats(want)[i], d = fabs((double)out[i] - w);

        if (!(d <= 1e-7 + 1e-3 * fabs(w))) {
            if (!bad++)
                worst = i;
        }
    }
    if (bad)
        report(c, verbose, test, 'F', "%zu of %zu values differ (value %zu: %.9g, want %.9g)",
               bad, (size_t)n * k, worst, out[worst], floats(want)[worst]);
    else
        report(c, verbose, test, 'P', "%d x %d values", n, k);
out:
    free(out);
    free(y);
    fed_model_free(m);
    fed_backend_free(be);
    fed_onnx_free(o);
}

/* One node test: rewritten (above), run, counted. */
static void one(const char *dir, const char *test, counts *c, int verbose)
{
    char set[1100];
    size_t len = 0, n_in, n_node, n_init;
    uint8_t *buf = slurp(dir, "model.onnx", &len), *packed = NULL;
    Onnx__ModelProto *m = buf ? onnx__model_proto__unpack(NULL, len, buf) : NULL;
    Onnx__GraphProto *g = m ? m->graph : NULL;
    Onnx__TensorProto *x = NULL, *want = NULL, *extra[16] = {NULL};
    char *extra_name[16] = {NULL}; /* the .pb's own names, while the graph's stand in */
    Onnx__NodeProto **node0, **nodes = NULL;
    Onnx__TensorProto **init0, **inits = NULL;
    Onnx__ValueInfoProto *in0 = NULL;
    Onnx__TensorShapeProto *shape0 = NULL;
    char *in_name = NULL, *out_name = NULL;
    rewrite *rw = calloc(1, sizeof *rw);
    int rank, softmax = 0, elementwise, n_extra = 0;
    int64_t ch, head;

    fed_free(buf);
    if (!g || !rw || g->n_node < 1 || g->n_input < 1 || g->n_output != 1 || g->n_input > 17) {
        if (g && rw && g->n_node >= 1) {
            int ours = 1;

            for (size_t i = 0; i < g->n_node; i++)
                ours &= g->node[i]->op_type && in_list(OURS, g->node[i]->op_type);
            if (ours) {
                c->scope++;
                report(c, verbose, test, 'R', "%zu inputs, %zu outputs", g->n_input,
                       g->n_output);
            }
        }
        goto done;
    }
    for (size_t i = 0; i < g->n_node; i++)
        if (!g->node[i]->op_type || !in_list(OURS, g->node[i]->op_type))
            goto done; /* another op: out of scope */
    c->scope++;
    snprintf(set, sizeof set, "%s/test_data_set_0", dir);
    if (!(x = read_tensor(set, "input_0.pb")) || !(want = read_tensor(set, "output_0.pb"))) {
        report(c, verbose, test, 'R', "no test_data_set_0/input_0.pb or output_0.pb");
        goto done;
    }
    if (!floats(x) || x->n_dims < 1) {
        report(c, verbose, test, 'R', "input 0 is not a float tensor (type %d)", x->data_type);
        goto done;
    }
    /* inputs 1.. as initializers */
    for (size_t i = 1; i < g->n_input; i++) {
        char name[32];

        snprintf(name, sizeof name, "input_%zu.pb", i);
        if (!(extra[n_extra] = read_tensor(set, name))) {
            report(c, verbose, test, 'R', "no %s", name);
            goto done;
        }
        extra_name[n_extra] = extra[n_extra]->name;
        extra[n_extra++]->name = g->input[i]->name;
    }
    rank = (int)x->n_dims;
    elementwise = g->n_node == 1 && in_list(ELEMENTWISE, g->node[0]->op_type);
    in0 = g->input[0];
    if (in0->type && in0->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
        elementwise && rank != 2 && rank != 4) { /* an element-wise op sees (N, rest) */
        shape0 = in0->type->tensor_type->shape;
        for (int k = 0; k < 2; k++) {
            onnx__tensor_shape_proto__dimension__init(&rw->view_dim[k]);
            rw->view_dim[k].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            rw->view_dim[k].dim_value = k ? (int64_t)(numel(x) / (size_t)x->dims[0]) : x->dims[0];
            rw->view_pdim[k] = &rw->view_dim[k];
        }
        onnx__tensor_shape_proto__init(&rw->view);
        rw->view.n_dim = 2;
        rw->view.dim = rw->view_pdim;
        in0->type->tensor_type->shape = &rw->view;
        rank = 2;
    }
    if (rank != 2 && rank != 4) {
        report(c, verbose, test, 'R', "input of rank %d ((N, C, H, W) or (N, features) only)",
               rank);
        goto restore;
    }
    /* the identity before: graph input "fed_x" -> pre -> the op's input */
    in_name = in0->name;
    ch = rank == 4 ? x->dims[1] : (int64_t)(numel(x) / (size_t)x->dims[0]);
    if (ch > HEAD_MAX) {
        report(c, verbose, test, 'R', "input of %lld features (the harness's identity takes "
               "at most %d)", (long long)ch, HEAD_MAX);
        goto restore;
    }
    if (!(rw->pre_v = identity(&rw->pre_w, rw->pre_dims, "pre.weight", ch, rank == 4)))
        goto restore;
    rw->pre_in[0] = "fed_x";
    rw->pre_in[1] = "pre.weight";
    rw->pre_out[0] = in_name;
    int_attr(&rw->trans_b, "transB", 1);
    rw->pre_attrs[0] = &rw->trans_b;
    node(&rw->pre, rank == 4 ? "Conv" : "Gemm", "/pre/Op", rw->pre_in, 2, rw->pre_out,
         rw->pre_attrs, rank == 4 ? 0 : 1);
    in0->name = "fed_x";
    /* the identity after, unless a softmax ends the graph */
    out_name = g->output[0]->name;
    softmax = !strcmp(g->node[g->n_node - 1]->op_type, "Softmax")      ? 1
              : !strcmp(g->node[g->n_node - 1]->op_type, "LogSoftmax") ? 2
                                                                       : 0;
    head = want->n_dims && want->dims[0] > 0 ? (int64_t)(numel(want) / (size_t)want->dims[0]) : 0;
    n_node = g->n_node + 1 + (softmax ? 0 : 2);
    nodes = calloc(n_node, sizeof *nodes);
    n_init = g->n_initializer + (size_t)n_extra + 2;
    inits = calloc(n_init, sizeof *inits);
    if (!nodes || !inits)
        goto restore;
    nodes[0] = &rw->pre;
    memcpy(nodes + 1, g->node, g->n_node * sizeof *nodes);
    if (g->n_initializer) /* (memcpy of a NULL source is undefined even for 0 bytes) */
        memcpy(inits, g->initializer, g->n_initializer * sizeof *inits);
    if (n_extra)
        memcpy(inits + g->n_initializer, extra, (size_t)n_extra * sizeof *inits);
    inits[g->n_initializer + n_extra] = &rw->pre_w;
    n_init = g->n_initializer + (size_t)n_extra + 1;
    if (!softmax) {
        if (head < 1 || head > HEAD_MAX) {
            report(c, verbose, test, 'R', "output of %lld values a sample (the harness's "
                   "identity takes 1 to %d)", (long long)head, HEAD_MAX);
            goto restore;
        }
        if (!(rw->post_v = identity(&rw->post_w, rw->post_dims, "post.weight", head, 0)))
            goto restore;
        rw->flat_in[0] = out_name;
        rw->flat_out[0] = "fed_flat";
        int_attr(&rw->flat_axis, "axis", 1);
        rw->flat_attrs[0] = &rw->flat_axis;
        node(&rw->flat, "Flatten", "/post/Flatten", rw->flat_in, 1, rw->flat_out,
             rw->flat_attrs, 1);
        rw->post_in[0] = "fed_flat";
        rw->post_in[1] = "post.weight";
        rw->post_out[0] = "fed_y";
        rw->post_attrs[0] = &rw->trans_b;
        node(&rw->post, "Gemm", "/post/Op", rw->post_in, 2, rw->post_out, rw->post_attrs, 1);
        nodes[n_node - 2] = &rw->flat;
        nodes[n_node - 1] = &rw->post;
        inits[n_init++] = &rw->post_w;
        g->output[0]->name = "fed_y";
    }
    node0 = g->node;
    init0 = g->initializer;
    n_in = g->n_input;
    g->node = nodes;
    g->n_node = n_node;
    g->initializer = inits;
    g->n_initializer = n_init;
    g->n_input = 1;
    len = onnx__model_proto__get_packed_size(m);
    if ((packed = malloc(len + 1)) != NULL) {
        onnx__model_proto__pack(m, packed);
        run(test, packed, len, floats(x), (int)x->dims[0], want, softmax, c, verbose);
    }
    g->node = node0;
    g->n_node = n_node - 1 - (softmax ? 0 : 2);
    g->initializer = init0;
    g->n_initializer = n_init - (size_t)n_extra - (softmax ? 1 : 2);
    g->n_input = n_in;
restore:
    if (in_name)
        in0->name = in_name;
    if (out_name)
        g->output[0]->name = out_name;
    if (shape0)
        in0->type->tensor_type->shape = shape0;
done:
    for (int i = 0; i < n_extra; i++) {
        extra[i]->name = extra_name[i];
        onnx__tensor_proto__free_unpacked(extra[i], NULL);
    }
    if (x)
        onnx__tensor_proto__free_unpacked(x, NULL);
    if (want)
        onnx__tensor_proto__free_unpacked(want, NULL);
    if (m)
        onnx__model_proto__free_unpacked(m, NULL);
    if (rw) {
        free(rw->pre_v);
        free(rw->post_v);
    }
    free(rw);
    free(nodes);
    free(inits);
    free(packed);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    const char *root = getenv("FEDNODE_ONNX_TESTDATA");
    int verbose = argc > 1 && !strcmp(argv[1], "-v");
    char *names[CASES_MAX];
    int n = 0, total = 0;
    counts c = {0};
    struct dirent *e;
    DIR *d;

    if (argc > 1 + verbose)
        root = argv[1 + verbose];
    if (!root || !root[0])
        root = TESTDATA;
    if (!(d = opendir(root))) {
        printf("skipped: no ONNX node tests in %s (Debian: apt-get install libonnx-testdata)\n",
               root);
        return 77;
    }
    while ((e = readdir(d)) && n < CASES_MAX)
        if (!strncmp(e->d_name, "test_", 5) && (names[n] = strdup(e->d_name)))
            n++;
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    fed_log_set_level(FED_LOG_ERROR); /* a refused model says why in its result */
    for (int i = 0; i < n; i++) {
        char dir[1024];

        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        total++;
        one(dir, names[i], &c, verbose);
        free(names[i]);
    }
    printf("ONNX node tests in %s: %d; of ops the import has, %d: %d passed, %d refused "
           "(the reason each: -v), %d failed\n", root, total, c.scope, c.passed, c.refused,
           c.failed);
    return c.failed ? 1 : 0;
}
