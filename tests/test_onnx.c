/* test_onnx.c - the ONNX reader (onnx/onnx.h) on files built here with
 * protobuf-c from onnx.proto: a Gemm net and a MatMul + Add net translate
 * into linear layers whose weights are the file's (MatMul's transposed),
 * with PyTorch's names; and each bad file is refused with the words that
 * say what was wrong: truncated bytes, a negative or 2^40 dimension, an
 * initializer shorter than its shape, external data, an unsupported op, an
 * opset outside 11..17, a cycle, a file past the size limit. (PyTorch's
 * own exports are checked in tests/test_onnx.sh.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "model/backend.h"
#include "model/model.h"
#include "onnx.pb-c.h"
#include "onnx/onnx.h"
#include "tests/support/support.h"

/* A model under construction: everything it points to lives here. */
typedef struct mk {
    Onnx__ModelProto m;
    Onnx__GraphProto g;
    Onnx__OperatorSetIdProto op, *ops[1];
    Onnx__NodeProto nodes[8], *pnodes[8];
    char *ins[8][3], *outs[8][1];
    Onnx__AttributeProto attrs[8], *pattrs[8][1];
    Onnx__TensorProto inits[8], *pinits[8];
    int64_t dims[8][2];
    float data[8][64];
    Onnx__ValueInfoProto in, out, *pin[1], *pout[1];
    Onnx__TypeProto in_type;
    Onnx__TypeProto__Tensor in_tensor;
    Onnx__TensorShapeProto in_shape;
    Onnx__TensorShapeProto__Dimension dim[2], *pdim[2];
} mk;

static void mk_tensor(mk *k, int i, const char *name, int64_t d0, int64_t d1, float base)
{
    Onnx__TensorProto *t = &k->inits[i];

    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    k->dims[i][0] = d0;
    k->dims[i][1] = d1;
    t->n_dims = d1 ? 2 : 1;
    t->dims = k->dims[i];
    t->n_float_data = (size_t)(d0 * (d1 ? d1 : 1));
    for (size_t j = 0; j < t->n_float_data; j++)
        k->data[i][j] = base + 0.01f * (float)j;
    t->float_data = k->data[i];
    k->pinits[i] = t;
}

static void mk_node(mk *k, int i, const char *op, const char *name, const char *a, const char *b,
                    const char *c, const char *out)
{
    Onnx__NodeProto *n = &k->nodes[i];

    onnx__node_proto__init(n);
    n->op_type = (char *)op;
    n->name = (char *)name;
    k->ins[i][0] = (char *)a;
    k->ins[i][1] = (char *)b;
    k->ins[i][2] = (char *)c;
    n->n_input = c ? 3 : b ? 2 : 1;
    n->input = k->ins[i];
    k->outs[i][0] = (char *)out;
    n->n_output = 1;
    n->output = k->outs[i];
    k->pnodes[i] = n;
}

static void mk_attr_int(mk *k, int i, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = &k->attrs[i];

    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = v;
    k->pattrs[i][0] = a;
    k->nodes[i].n_attribute = 1;
    k->nodes[i].attribute = k->pattrs[i];
}

/* x (N, 4) -> Gemm fc1 (3) -> Relu -> Gemm fc2 (2): nn.Linear's layout. */
static void mk_gemm_net(mk *k)
{
    memset(k, 0, sizeof *k);
    onnx__model_proto__init(&k->m);
    onnx__graph_proto__init(&k->g);
    onnx__operator_set_id_proto__init(&k->op);
    k->op.domain = (char *)"";
    k->op.has_version = 1;
    k->op.version = 13;
    k->ops[0] = &k->op;
    k->m.n_opset_import = 1;
    k->m.opset_import = k->ops;
    k->m.has_ir_version = 1;
    k->m.ir_version = 7;
    k->m.graph = &k->g;
    k->g.name = (char *)"g";
    mk_tensor(k, 0, "fc1.weight", 3, 4, 0.1f);
    mk_tensor(k, 1, "fc1.bias", 3, 0, -0.2f);
    mk_tensor(k, 2, "fc2.weight", 2, 3, 0.3f);
    mk_tensor(k, 3, "fc2.bias", 2, 0, 0.4f);
    k->g.n_initializer = 4;
    k->g.initializer = k->pinits;
    mk_node(k, 0, "Gemm", "/fc1/Gemm", "x", "fc1.weight", "fc1.bias", "h");
    mk_attr_int(k, 0, "transB", 1);
    mk_node(k, 1, "Relu", "/Relu", "h", NULL, NULL, "r");
    mk_node(k, 2, "Gemm", "/fc2/Gemm", "r", "fc2.weight", "fc2.bias", "y");
    mk_attr_int(k, 2, "transB", 1);
    k->g.n_node = 3;
    k->g.node = k->pnodes;
    onnx__value_info_proto__init(&k->in);
    onnx__type_proto__init(&k->in_type);
    onnx__type_proto__tensor__init(&k->in_tensor);
    onnx__tensor_shape_proto__init(&k->in_shape);
    for (int i = 0; i < 2; i++) {
        onnx__tensor_shape_proto__dimension__init(&k->dim[i]);
        k->dim[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        k->dim[i].dim_value = i ? 4 : 1;
        k->pdim[i] = &k->dim[i];
    }
    k->in_shape.n_dim = 2;
    k->in_shape.dim = k->pdim;
    k->in_tensor.has_elem_type = 1;
    k->in_tensor.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    k->in_tensor.shape = &k->in_shape;
    k->in_type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    k->in_type.tensor_type = &k->in_tensor;
    k->in.name = (char *)"x";
    k->in.type = &k->in_type;
    k->pin[0] = &k->in;
    k->g.n_input = 1;
    k->g.input = k->pin;
    onnx__value_info_proto__init(&k->out);
    k->out.name = (char *)"y";
    k->pout[0] = &k->out;
    k->g.n_output = 1;
    k->g.output = k->pout;
}

/* The model packed; the caller frees. */
static uint8_t *mk_pack(mk *k, size_t *len)
{
    uint8_t *buf;

    *len = onnx__model_proto__get_packed_size(&k->m);
    buf = malloc(*len + 1);
    assert_non_null(buf);
    assert_int_equal(onnx__model_proto__pack(&k->m, buf), *len);
    return buf;
}

/* Parse k: the error, and why it says (which must contain want). */
static fed_err mk_parse(mk *k, const char *want)
{
    size_t len;
    uint8_t *buf = mk_pack(k, &len);
    fed_onnx *o = (fed_onnx *)1;
    char why[1024] = "";
    fed_err err = fed_onnx_parse("t.onnx", buf, len, &o, why, sizeof why);

    free(buf);
    if (err == FED_OK) {
        fed_onnx_free(o);
    } else {
        assert_null(o);
        if (!strstr(why, want))
            fail_msg("'%s' lacks '%s'", why, want);
    }
    return err;
}

static void check_weights(fed_onnx *o, int transposed)
{
    fed_backend *be = NULL;
    fed_model *m = NULL;
    const fed_model_node *nodes;
    const fed_tensor_info *ti;
    fed_rng rng;
    float p[32];
    char why[256];
    int count, nt;

    nodes = fed_onnx_nodes(o, &count);
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    assert_int_equal(fed_model_new_graph("t", nodes, count, fed_onnx_input(o), be, NULL, 1, 4,
                                         &m),
                     FED_OK);
    fed_rng_seed(&rng, 1);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    assert_int_equal(fed_onnx_apply_weights(o, m, why, sizeof why), FED_OK);
    assert_int_equal(fed_model_nparams(m), 3 * 4 + 3 + 2 * 3 + 2);
    assert_int_equal(fed_model_get_params(m, p), FED_OK);
    ti = fed_model_tensors(m, &nt);
    assert_int_equal(nt, 4);
    assert_string_equal(ti[0].name, "fc1.weight");
    assert_string_equal(ti[3].name, "fc2.bias");
    /* fc1.weight (3, 4): row r, column c; the file's (in, out) when transposed */
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++)
            assert_true(p[ti[0].offset + (size_t)(r * 4 + c)] ==
                        0.1f + 0.01f * (float)(transposed ? c * 3 + r : r * 4 + c));
    assert_true(p[ti[1].offset + 2] == -0.2f + 0.01f * 2);
    fed_model_free(m);
    fed_backend_free(be);
}

static void test_gemm_and_matmul(void **state)
{
    mk k;
    size_t len;
    uint8_t *buf;
    fed_onnx *o = NULL;
    const fed_model_node *nodes;
    char why[512];
    int count;

    (void)state;
    mk_gemm_net(&k);
    buf = mk_pack(&k, &len);
    assert_int_equal(fed_onnx_parse("t.onnx", buf, len, &o, why, sizeof why), FED_OK);
    free(buf);
    nodes = fed_onnx_nodes(o, &count);
    assert_int_equal(count, 3);
    assert_string_equal(nodes[0].kind, "linear");
    assert_string_equal(nodes[0].name, "fc1");
    assert_int_equal(nodes[0].out, 3);
    assert_string_equal(nodes[1].kind, "relu");
    assert_int_equal(fed_onnx_input(o).w, 4);
    assert_int_equal(fed_onnx_input(o).classes, 2);
    assert_true(fed_onnx_has_weights(o));
    check_weights(o, 0);
    fed_onnx_free(o);

    /* fc1 as MatMul by a (4, 3) weight, then Add of the bias */
    mk_gemm_net(&k);
    k.dims[0][0] = 4;
    k.dims[0][1] = 3;
    mk_node(&k, 0, "MatMul", "/fc1/MatMul", "x", "fc1.weight", NULL, "m");
    mk_node(&k, 1, "Add", "/fc1/Add", "m", "fc1.bias", NULL, "h");
    mk_node(&k, 2, "Relu", "/Relu", "h", NULL, NULL, "r");
    mk_node(&k, 3, "Gemm", "/fc2/Gemm", "r", "fc2.weight", "fc2.bias", "y");
    mk_attr_int(&k, 3, "transB", 1);
    k.g.n_node = 4;
    buf = mk_pack(&k, &len);
    assert_int_equal(fed_onnx_parse("t.onnx", buf, len, &o, why, sizeof why), FED_OK);
    free(buf);
    nodes = fed_onnx_nodes(o, &count);
    assert_int_equal(count, 3);
    assert_string_equal(nodes[0].name, "fc1");
    check_weights(o, 1);
    fed_onnx_free(o);
}

static void test_bad_files(void **state)
{
    mk k;
    size_t len;
    uint8_t *buf;
    fed_onnx *o = NULL;
    char why[512] = "";
    Onnx__StringStringEntryProto loc = ONNX__STRING_STRING_ENTRY_PROTO__INIT, *ploc = &loc;

    (void)state;
    /* truncated: every prefix of a good file is refused or a good model */
    mk_gemm_net(&k);
    buf = mk_pack(&k, &len);
    assert_int_equal(fed_onnx_parse("t.onnx", buf, len / 2, &o, why, sizeof why),
                     FED_ERR_FORMAT);
    assert_non_null(strstr(why, "t.onnx: not an ONNX model"));
    /* nothing at all, or bytes that decode to no graph and no opset: said so */
    assert_int_equal(fed_onnx_parse("t.onnx", buf, 0, &o, why, sizeof why), FED_ERR_FORMAT);
    assert_null(o);
    assert_non_null(strstr(why, "t.onnx: an empty file, not an ONNX model"));
    assert_int_equal(fed_onnx_parse("t.onnx", "\x08\x07", 2, &o, why, sizeof why),
                     FED_ERR_FORMAT); /* ir_version 7 alone */
    assert_non_null(strstr(why, "t.onnx: not an ONNX model (no graph, no opset)"));
    for (size_t n = 0; n < len; n++) {
        fed_err err = fed_onnx_parse("t.onnx", buf, n, &o, why, sizeof why);

        assert_true(err != FED_OK || o);
        fed_onnx_free(o);
        o = NULL;
    }
    /* past the size limit: refused before a byte is read */
    assert_int_equal(fed_onnx_parse("t.onnx", buf, (size_t)FED_ONNX_FILE_MAX + 1, &o, why,
                                    sizeof why),
                     FED_ERR_TOO_LARGE);
    free(buf);

    mk_gemm_net(&k);
    k.dims[1][0] = -3;
    assert_int_equal(mk_parse(&k, "initializer 'fc1.bias': dimension 0 is -3"), FED_ERR_FORMAT);
    mk_gemm_net(&k);
    k.dims[0][0] = 1ll << 40;
    assert_int_equal(mk_parse(&k, "initializer 'fc1.weight': dimension 0 is 1099511627776"),
                     FED_ERR_FORMAT);
    mk_gemm_net(&k);
    k.inits[2].n_float_data = 5;
    assert_int_equal(mk_parse(&k, "initializer 'fc2.weight': holds 5 values where its shape "
                                  "says 6"),
                     FED_ERR_FORMAT);
    mk_gemm_net(&k);
    loc.key = (char *)"location";
    loc.value = (char *)"/etc/passwd";
    k.inits[0].n_external_data = 1;
    k.inits[0].external_data = &ploc;
    k.inits[0].has_data_location = 1;
    k.inits[0].data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    assert_int_equal(mk_parse(&k, "initializer 'fc1.weight': external data"),
                     FED_ERR_UNSUPPORTED);
    mk_gemm_net(&k);
    k.nodes[1].op_type = (char *)"Loop";
    assert_int_equal(mk_parse(&k, "node '/Relu' (Loop, opset 13): op Loop is not supported"),
                     FED_ERR_UNSUPPORTED);
    mk_gemm_net(&k);
    k.op.version = 10;
    assert_int_equal(mk_parse(&k, "opset 10 (11 to 17 are supported)"), FED_ERR_UNSUPPORTED);
    k.op.version = 18;
    assert_int_equal(mk_parse(&k, "opset 18 (11 to 17 are supported)"), FED_ERR_UNSUPPORTED);
    /* a cycle: the Relu takes the output of the Gemm after it */
    mk_gemm_net(&k);
    k.ins[1][0] = (char *)"y";
    assert_int_equal(mk_parse(&k, "input 'y' is made by no earlier node (a dangling input, or "
                                  "a cycle)"),
                     FED_ERR_SPEC);
    /* a dangling input */
    mk_gemm_net(&k);
    k.ins[2][0] = (char *)"nowhere";
    assert_int_equal(mk_parse(&k, "input 'nowhere' is made by no earlier node"), FED_ERR_SPEC);
    /* weights that do not fit the layers: fc2 takes 3 inputs, its weight says 4 */
    mk_gemm_net(&k);
    k.dims[2][1] = 4;
    k.inits[2].n_float_data = 8;
    assert_int_equal(mk_parse(&k, "initializers hold"), FED_ERR_SPEC);
    /* nodes the pattern matchers look ahead at, malformed: refused, no crash */
    mk_gemm_net(&k);
    k.nodes[1].op_type = NULL; /* the node after a Gemm has no op type */
    assert_int_equal(mk_parse(&k, "node 1 has no op type"), FED_ERR_FORMAT);
    mk_gemm_net(&k);
    k.nodes[2].n_output = 0; /* the last node makes nothing */
    assert_int_equal(mk_parse(&k, "no output"), FED_ERR_FORMAT);
    mk_gemm_net(&k);
    k.out.name = NULL; /* the graph's output has no name */
    assert_int_equal(mk_parse(&k, "graph output 0 has no name"), FED_ERR_FORMAT);
    mk_gemm_net(&k);
    k.nodes[1].op_type = (char *)"Sigmoid"; /* a Sigmoid without input */
    k.nodes[1].n_input = 0;
    assert_int_equal(mk_parse(&k, "input 0 is missing"), FED_ERR_UNSUPPORTED);
    /* a Div by NaN is no GELU */
    mk_gemm_net(&k);
    k.nodes[1].op_type = (char *)"Div";
    k.ins[1][1] = (char *)"nan";
    k.nodes[1].n_input = 2;
    mk_tensor(&k, 4, "nan", 1, 0, NAN);
    k.g.n_initializer = 5;
    k.dims[4][0] = 1;
    k.inits[4].n_dims = 0; /* a scalar */
    assert_int_equal(mk_parse(&k, "a Div other than GELU's"), FED_ERR_UNSUPPORTED);
    /* an attribute it does not know */
    mk_gemm_net(&k);
    k.attrs[0].name = (char *)"transA";
    k.attrs[0].i = 1;
    assert_int_equal(mk_parse(&k, "alpha, beta other than 1, or transA"), FED_ERR_UNSUPPORTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_and_matmul),
        cmocka_unit_test(test_bad_files),
    };

    fed_test_log_quiet();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
