/* test_model_cfg.c - model files (model/model_cfg.h): the shipped
 * SimpleCNN and its 44,426 parameters, the syntax (keys on the section's
 * line or their own, comments, CRLF, pairs), every refusal's words with the
 * file, line and key, a shape error with the shapes so far, and the data
 * disagreeing with the file; the declared input (model/input.h): a file's
 * [input] and [output] with --input-shape, --features and --classes, every
 * contradiction's words, and a dataset checked against it. With
 * --torch-dump DIR FILE it is instead the tool of tests/test_torch_parity.sh: a model built from FILE (seed 1), a
 * batch, and DIR/ours.safetensors holding the initial parameters, the batch
 * (x, y), the logits in training mode ("logits") and in evaluation
 * ("eval_logits": batch norm's running statistics), the loss, every
 * gradient ("grad.NAME") and the parameters after one SGD step of lr 0.1
 * ("step.NAME", batch norm's running statistics and counter after it). */
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
#include "core/log.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/input.h"
#include "model/model.h"
#include "model/model_cfg.h"
#include "model/optim.h"
#include "model/safetensors.h"
#include "onnx/onnx.h"
#include "tests/support/support.h"

#define SIMPLECNN "examples/models/simplecnn.cfg"

static fed_model_cfg *parse(const char *text)
{
    fed_model_cfg *c = NULL;
    char why[512];

    if (fed_model_cfg_parse("t.cfg", text, strlen(text), &c, why, sizeof why) != FED_OK)
        fail_msg("parse: %s", why);
    return c;
}

static void test_simplecnn(void **state)
{
    static const char *names[] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                  "fc1.weight",   "fc1.bias",   "fc2.weight",   "fc2.bias",
                                  "fc3.weight",   "fc3.bias"};
    fed_model_cfg *c = NULL;
    fed_backend *be = NULL;
    fed_model *m = NULL;
    fed_model_node_info info[12];
    fed_model_shape in;
    const fed_tensor_info *t;
    char why[512];
    size_t total = 0;
    int nt, count;

    (void)state;
    assert_int_equal(fed_model_cfg_load(SIMPLECNN, &c, why, sizeof why), FED_OK);
    in = fed_model_cfg_input(c);
    assert_int_equal(in.c, 1);
    assert_int_equal(in.h, 28);
    assert_int_equal(in.w, 28);
    assert_int_equal(in.classes, 0); /* the data's */
    in.classes = 10;
    fed_model_cfg_nodes(c, 10, &count);
    assert_int_equal(count, 12);
    assert_int_equal(fed_model_cfg_check(c, in, info, why, sizeof why), FED_OK);
    for (int i = 0; i < count; i++)
        total += info[i].nparams;
    assert_int_equal(total, 44426);
    assert_int_equal(info[5].c, 16); /* the second pool: 16x4x4 */
    assert_int_equal(info[5].h, 4);
    assert_int_equal(info[6].c, 256); /* flatten */
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    assert_int_equal(fed_model_cfg_build(c, in, be, NULL, 1, 8, &m, why, sizeof why), FED_OK);
    assert_int_equal(fed_model_nparams(m), 44426);
    assert_string_equal(fed_model_spec(m), "simplecnn.cfg");
    t = fed_model_tensors(m, &nt);
    assert_int_equal(nt, 10);
    for (int i = 0; i < nt; i++)
        assert_string_equal(t[i].name, names[i]);
    assert_int_equal(t[2].shape[0], 16);
    assert_int_equal(t[2].shape[1], 6);
    assert_int_equal(t[4].shape[1], 256);
    fed_model_free(m);
    fed_backend_free(be);
    fed_model_cfg_free(c);
}

/* Keys on the section's line or their own, comments, CRLF, H,W pairs,
 * out = classes, unnamed layers named by their index. */
static void test_syntax(void **state)
{
    fed_model_cfg *c = parse("# a comment\r\n"
                             "[input]\r\n"
                             "  features = 30 ; the CSV's columns\r\n"
                             "[linear] name = fc1   out=16\n"
                             "[relu]\n"
                             "[linear]\n"
                             "out = classes\n"
                             "[output] loss = cross_entropy classes = 3\n");
    fed_model_cfg *d = parse("[input] shape = 2,9,8\n"
                             "[conv] out = 4 kernel = 3,5 stride = 2,1 padding = 1,2 "
                             "dilation = 2\n"
                             "[avgpool] kernel = 2 padding = 1\n"
                             "[flatten]\n[linear] out = 3\n");
    const fed_model_node *n;
    fed_model_shape in = fed_model_cfg_input(c);
    int count;

    (void)state;
    assert_int_equal(in.c, 1);
    assert_int_equal(in.h, 1);
    assert_int_equal(in.w, 30);
    assert_int_equal(in.classes, 3);
    n = fed_model_cfg_nodes(c, 3, &count);
    assert_int_equal(count, 3);
    assert_string_equal(n[0].kind, "linear");
    assert_string_equal(n[0].name, "fc1");
    assert_int_equal(n[0].out, 16);
    assert_int_equal(n[0].input, -1);
    assert_string_equal(n[1].kind, "relu");
    assert_int_equal(n[1].input, 0);
    assert_null(n[2].name);
    assert_int_equal(n[2].out, 3);
    assert_int_equal(fed_model_cfg_line(c, 2), 6);
    assert_int_equal(fed_model_cfg_check(c, in, NULL, NULL, 0), FED_OK);
    n = fed_model_cfg_nodes(d, 3, &count);
    assert_int_equal(count, 4);
    assert_int_equal(n[0].kernel[0], 3);
    assert_int_equal(n[0].kernel[1], 5);
    assert_int_equal(n[0].stride[0], 2);
    assert_int_equal(n[0].stride[1], 1);
    assert_int_equal(n[0].padding[1], 2);
    assert_int_equal(n[0].dilation[0], 2);
    assert_int_equal(n[0].dilation[1], 2);
    assert_int_equal(n[1].padding[0], 1);
    assert_int_equal(n[1].stride[0], 0); /* the kernel's */
    fed_model_cfg_free(c);
    fed_model_cfg_free(d);
}

/* A file of 40 named layers (its node table grows while it is parsed): each
 * keeps its name (under ASan a name left pointing into the old table is a
 * use after free: what the fuzzer found first). */
static void test_many_layers(void **state)
{
    char text[4096], want[16];
    size_t used = (size_t)snprintf(text, sizeof text, "[input] features = 4\n");
    fed_model_cfg *c;
    const fed_model_node *n;
    int count;

    (void)state;
    for (int i = 0; i < 40; i++)
        used += (size_t)snprintf(text + used, sizeof text - used,
                                 "[linear] name = fc%d out = %s\n", i, i < 39 ? "8" : "classes");
    c = parse(text);
    n = fed_model_cfg_nodes(c, 3, &count);
    assert_int_equal(count, 40);
    for (int i = 0; i < count; i++) {
        snprintf(want, sizeof want, "fc%d", i);
        assert_string_equal(n[i].name, want);
    }
    assert_int_equal(fed_model_cfg_check(c, (fed_model_shape){1, 1, 4, 3, 0}, NULL, NULL, 0), FED_OK);
    fed_model_cfg_free(c);
}

/* bias = 0 (or false): PyTorch's bias=False, no NAME.bias tensor, through
 * the graph's spec and back. */
static void test_bias_free(void **state)
{
    fed_model_cfg *c = parse("[input] shape = 2,6,6\n"
                             "[conv] name = c out = 3 kernel = 3 bias = 0\n[relu]\n"
                             "[conv] name = d out = 3 kernel = 1 bias = true\n[flatten]\n"
                             "[linear] name = fc out = classes bias = false\n");
    fed_model_shape in = {2, 6, 6, 4, 0};
    fed_backend *be = NULL;
    fed_model *m = NULL, *m2 = NULL;
    const fed_tensor_info *t;
    char spec[256], why[512];
    int nt;

    (void)state;
    assert_int_equal(fed_model_cfg_spec(c, spec, sizeof spec, why, sizeof why), FED_OK);
    assert_string_equal(spec, "g:c=C3k3b0,R,d=C3k1,F,fc=Lb0");
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    assert_int_equal(fed_model_cfg_build(c, in, be, NULL, 1, 4, &m, why, sizeof why), FED_OK);
    assert_int_equal(fed_model_new(spec, in, be, NULL, 1, 4, &m2), FED_OK);
    assert_int_equal(fed_model_nparams(m), 3 * 2 * 9 + 3 * 3 + 3 + 4 * 48);
    assert_int_equal(fed_model_nparams(m2), fed_model_nparams(m));
    t = fed_model_tensors(m2, &nt);
    assert_int_equal(nt, 4);
    assert_string_equal(t[0].name, "c.weight");
    assert_string_equal(t[1].name, "d.weight");
    assert_string_equal(t[2].name, "d.bias");
    assert_string_equal(t[3].name, "fc.weight");
    assert_int_equal(t[3].offset, 3 * 2 * 9 + 3 * 3 + 3);
    /* a bias-free node only where a bias could be; b0 only as 0 */
    assert_int_equal(fed_model_spec_check("g:C3k3b0,Mk2b0,F,L", in), FED_ERR_SPEC);
    assert_int_equal(fed_model_spec_check("g:C3k3b2,F,L", in), FED_ERR_SPEC);
    fed_model_free(m);
    fed_model_free(m2);
    fed_backend_free(be);
    fed_model_cfg_free(c);
}

/* [layernorm], [groupnorm] groups = G, [dropout] p = P (0.5 unsaid): the
 * graph's spec, the tensors as PyTorch names them. */
static void test_norms_dropout(void **state)
{
    fed_model_cfg *c = parse("[input] shape = 2,8,8\n"
                             "[conv] name = c out = 6 kernel = 3 bias = 0\n"
                             "[groupnorm] name = gn groups = 3\n[relu]\n"
                             "[layernorm] name = lnm\n"
                             "[dropout] name = d p = 0.1\n[flatten]\n"
                             "[linear] name = fc out = 10\n[layernorm] name = ln\n[relu]\n"
                             "[dropout]\n"
                             "[linear] name = head out = classes\n");
    fed_model_shape in = {2, 8, 8, 3, 0};
    fed_backend *be = NULL;
    fed_model *m = NULL;
    const fed_tensor_info *t;
    char spec[256], why[512];
    int nt;

    (void)state;
    assert_int_equal(fed_model_cfg_spec(c, spec, sizeof spec, why, sizeof why), FED_OK);
    assert_string_equal(spec, "g:c=C6k3b0,gn=Ug3,R,lnm=V,d=Dr100000,F,fc=L10,ln=V,R,Dr500000,"
                              "head=L");
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    assert_int_equal(fed_model_new(spec, in, be, NULL, 1, 4, &m), FED_OK);
    t = fed_model_tensors(m, &nt);
    assert_int_equal(nt, 11);
    assert_string_equal(t[1].name, "gn.weight");
    assert_int_equal(t[1].ndim, 1);
    assert_int_equal(t[1].shape[0], 6);
    assert_string_equal(t[3].name, "lnm.weight"); /* over a map: its shape */
    assert_int_equal(t[3].ndim, 3);
    assert_int_equal(t[3].shape[0], 6);
    assert_int_equal(t[3].shape[2], 6);
    assert_string_equal(t[4].name, "lnm.bias");
    assert_string_equal(t[7].name, "ln.weight"); /* over features: (10) */
    assert_int_equal(t[7].ndim, 1);
    assert_int_equal(t[7].shape[0], 10);
    assert_int_equal(fed_model_nparams(m),
                     6 * 2 * 9 + 2 * 6 + 2 * 216 + 216 * 10 + 10 + 2 * 10 + 10 * 3 + 3);
    fed_model_free(m);
    fed_backend_free(be);
    fed_model_cfg_free(c);
    /* groups that do not divide the channels: the line and the shapes */
    c = parse("[input] shape = 1,8,8\n"
              "[conv] name = c out = 6 kernel = 3\n[groupnorm] name = gn groups = 4\n"
              "[flatten]\n[linear] out = classes\n");
    assert_int_equal(fed_model_cfg_check(c, (fed_model_shape){1, 8, 8, 3, 0}, NULL, why, sizeof why),
                     FED_ERR_SHAPE);
    assert_string_equal(why, "t.cfg:3: model 't.cfg': node 1 (groupnorm 'gn') on input 6x6x6: "
                             "groups must divide the input's channels; shapes so far: input "
                             "1x8x8, c 6x6x6");
    fed_model_cfg_free(c);
}

static void expect_parse(const char *text, fed_err want, const char *msg)
{
    fed_model_cfg *c = (fed_model_cfg *)1;
    char why[512];

    memset(why, 'x', sizeof why);
    assert_int_equal(fed_model_cfg_parse("m.cfg", text, strlen(text), &c, why, sizeof why), want);
    assert_null(c);
    if (strcmp(why, msg) != 0)
        fail_msg("got \"%s\", want \"%s\"", why, msg);
}

#define IN "[input] shape = 1,8,8\n"

/* Every refusal names the file, the line and the key. */
static void test_errors(void **state)
{
    (void)state;
    expect_parse("", FED_ERR_SPEC, "m.cfg: no [input] section");
    expect_parse(IN, FED_ERR_SPEC, "m.cfg: no layers");
    expect_parse(IN "[softmax]\n", FED_ERR_SPEC,
                 "m.cfg:2: unknown section [softmax] (input, output, linear, conv, maxpool, "
                 "avgpool, global_avgpool, relu, flatten, leaky_relu, gelu, silu, sigmoid, "
                 "tanh, add, concat, embedding, numeric, layernorm, groupnorm, dropout, "
                 "batchnorm)");
    expect_parse(IN "[conv] out = 3 kernel = 3 momentum = 0\n", FED_ERR_SPEC,
                 "m.cfg:2: [conv]: unknown key 'momentum' (name, out, kernel, stride, padding, "
                 "dilation, groups, input, bias)");
    expect_parse(IN "[maxpool] kernel = 2 bias = 0\n", FED_ERR_SPEC,
                 "m.cfg:2: [maxpool]: unknown key 'bias' (name, kernel, stride, padding, input)");
    expect_parse(IN "[groupnorm] name = g\n", FED_ERR_SPEC, "m.cfg:2: [groupnorm] needs groups");
    expect_parse(IN "[groupnorm] groups = 0\n", FED_ERR_SPEC,
                 "m.cfg:2: [groupnorm] groups: '0' is not a count 1 to 65536");
    expect_parse(IN "[layernorm] groups = 2\n", FED_ERR_SPEC,
                 "m.cfg:2: [layernorm]: unknown key 'groups' (name, input)");
    expect_parse(IN "[dropout] p = 1\n", FED_ERR_SPEC,
                 "m.cfg:2: [dropout] p: '1' is not a probability 0 to below 1 (at most 6 "
                 "decimals)");
    expect_parse(IN "[dropout] p = -0.1\n", FED_ERR_SPEC,
                 "m.cfg:2: [dropout] p: '-0.1' is not a probability 0 to below 1 (at most 6 "
                 "decimals)");
    expect_parse(IN "[dropout]\n p = 0.1234567\n", FED_ERR_SPEC,
                 "m.cfg:3: [dropout] p: '0.1234567' is not a probability 0 to below 1 (at most "
                 "6 decimals)");
    expect_parse(IN "[dropout] p = .\n", FED_ERR_SPEC,
                 "m.cfg:2: [dropout] p: '.' is not a probability 0 to below 1 (at most 6 "
                 "decimals)");
    expect_parse(IN "[linear] out = 3 bias = no\n", FED_ERR_SPEC,
                 "m.cfg:2: [linear] bias: 'no' is not 0, 1, false or true");
    expect_parse(IN "[linear] name = a out = 4\n[add] from = b\n", FED_ERR_SPEC,
                 "m.cfg:3: [add] from: 'b' names no earlier layer (a name, an index, or - for "
                 "the input)");
    expect_parse(IN "[conv] out = 3 kernel = 3 groups = 0\n", FED_ERR_SPEC,
                 "m.cfg:2: [conv] groups: '0' is not a count 1 to 65536");
    expect_parse(IN "[conv] out = 3\n  kernel = 0\n", FED_ERR_SPEC,
                 "m.cfg:3: [conv] kernel: '0' is not N or H,W (each 1 to 65536)");
    expect_parse(IN "[conv] out = 3 kernel = 3,3,3\n", FED_ERR_SPEC,
                 "m.cfg:2: [conv] kernel: '3,3,3' is not N or H,W (each 1 to 65536)");
    expect_parse(IN "[linear] out = many\n", FED_ERR_SPEC,
                 "m.cfg:2: [linear] out: 'many' is not a count 1 to 65536 or 'classes'");
    expect_parse(IN "[conv]\nout = 3\n[relu]\n", FED_ERR_SPEC, "m.cfg:2: [conv] needs kernel");
    expect_parse(IN "[linear] out = 3 out = 4\n", FED_ERR_SPEC,
                 "m.cfg:2: [linear] out: given twice");
    expect_parse("out = 3\n" IN, FED_ERR_SPEC, "m.cfg:1: out: a key before any section");
    expect_parse("[linear] out = 3\n" IN, FED_ERR_SPEC,
                 "m.cfg:1: [linear]: [input] comes first, once");
    expect_parse(IN "[linear] out = 3\n" IN, FED_ERR_SPEC,
                 "m.cfg:3: [input]: [input] comes first, once");
    expect_parse(IN "[linear] name = a out = 3\n[linear] name = a out = 3\n", FED_ERR_SPEC,
                 "m.cfg:3: [linear] name: 'a' is taken by line 2");
    expect_parse(IN "[linear] name = a-b out = 3\n", FED_ERR_SPEC,
                 "m.cfg:2: [linear] name: 'a-b' must be 1 to 23 letters, digits, '_' or inner "
                 "'.'");
    expect_parse(IN "[linear] out = 3\n[output] loss = hinge\n", FED_ERR_SPEC,
                 "m.cfg:3: [output] loss: 'hinge' is not supported yet (cross_entropy, bce, "
                 "mse)");
    expect_parse(IN "[linear] out = 3\n[output]\n[relu]\n", FED_ERR_SPEC,
                 "m.cfg:4: [relu] after [output], which ends the file");
    expect_parse("[input]\n[linear] out = 3\n", FED_ERR_SPEC,
                 "m.cfg:1: [input] needs shape or features");
    expect_parse("[input] shape = 1,8,8 features = 64\n", FED_ERR_SPEC,
                 "m.cfg:1: [input] features: shape and features both given");
    expect_parse(IN "[linear] out 3\n", FED_ERR_SPEC, "m.cfg:2: expected key = value at 'out 3'");
    expect_parse(IN "[linear] out =\n", FED_ERR_SPEC, "m.cfg:2: out: no value after '='");
    expect_parse(IN "[linear out = 3\n", FED_ERR_SPEC, "m.cfg:2: '[' without ']'");
    {
        char nul[] = IN "[linear]\0 out = 3\n";

        fed_model_cfg *c = (fed_model_cfg *)1;
        char why[256];

        assert_int_equal(fed_model_cfg_parse("m.cfg", nul, sizeof nul - 1, &c, why, sizeof why),
                         FED_ERR_SPEC);
        assert_string_equal(why, "m.cfg:2: a NUL byte");
    }
}

#define TAB "[input] features = 6 categorical = 0,3\n"
#define EMB_A "[embedding] name = a column = 0 num = 16 dim = 4\n"

/* The model file's side of embeddings: every refusal with file, line and
 * key. */
static void test_embedding_errors(void **state)
{
    (void)state;
    expect_parse(TAB "[embedding] name = a column = 6 num = 16 dim = 4\n", FED_ERR_SPEC,
                 "m.cfg:2: [embedding] column: 6 is outside the input's 6 columns (0 to 5)");
    expect_parse(TAB "[embedding] name = a column = 2 num = 16 dim = 4\n", FED_ERR_SPEC,
                 "m.cfg:2: [embedding] column: 2 is not categorical (list it in [input] "
                 "categorical)");
    expect_parse(TAB "[embedding] name = a column = 0 num = 16 dim = 0\n", FED_ERR_SPEC,
                 "m.cfg:2: [embedding] dim: '0' is not a count 1 to 65536");
    expect_parse(TAB "[embedding] name = a column = 0 num = 0 dim = 4\n", FED_ERR_SPEC,
                 "m.cfg:2: [embedding] num: '0' is not a count 1 to 1048576");
    expect_parse(TAB "[embedding] name = a column = x num = 16 dim = 4\n", FED_ERR_SPEC,
                 "m.cfg:2: [embedding] column: 'x' is not a column index (0-based)");
    expect_parse(TAB "[embedding] name = a num = 16 dim = 4\n", FED_ERR_SPEC,
                 "m.cfg:2: [embedding] needs column");
    expect_parse(TAB "[embedding] name = a column = 0 num = 16 dim = 4 input = -\n",
                 FED_ERR_SPEC, "m.cfg:2: [embedding]: unknown key 'input' (name, column, num, "
                 "dim)");
    expect_parse(TAB EMB_A "[numeric] name = n\n[concat] from = a\n[linear] out = 2\n",
                 FED_ERR_SPEC, "m.cfg:1: [input] categorical: column 3 feeds no embedding");
    expect_parse("[input]\ncategorical = 0,9\nfeatures = 6\n" EMB_A, FED_ERR_SPEC,
                 "m.cfg:2: [input] categorical: column 9 is outside the input's 6 columns (0 to "
                 "5)");
    expect_parse("[input] features = 6 categorical = 0,0\n", FED_ERR_SPEC,
                 "m.cfg:1: [input] categorical: column 0 given twice");
    expect_parse("[input] features = 6 categorical = 0,,1\n", FED_ERR_SPEC,
                 "m.cfg:1: [input] categorical: '0,,1' is not a list of column indices "
                 "(0-based, comma-separated)");
    expect_parse(IN "[numeric] input = -\n", FED_ERR_SPEC,
                 "m.cfg:2: [numeric]: unknown key 'input' (name)");
    expect_parse(IN "[output] loss = mse\n", FED_ERR_SPEC,
                 "m.cfg:2: [output] loss: mse after no layer");
}

/* loss = mse: a last node, its outputs the last layer's, one class of its
 * own (numbers to predict). */
static void test_mse_file(void **state)
{
    fed_model_cfg *c = parse("[input] features = 5\n[linear] name = fc out = 3\n"
                             "[output] loss = mse\n");
    const fed_model_node *n;
    char spec[FED_MODEL_SPEC_MAX], why[256];
    int count;

    (void)state;
    n = fed_model_cfg_nodes(c, 1, &count);
    assert_int_equal(count, 2);
    assert_string_equal(n[1].kind, "mse");
    assert_int_equal(fed_model_cfg_own_input(c).classes, 1);
    assert_int_equal(fed_model_cfg_check(c, fed_model_cfg_own_input(c), NULL, why, sizeof why),
                     FED_OK);
    assert_int_equal(fed_model_cfg_spec(c, spec, sizeof spec, why, sizeof why), FED_OK);
    assert_string_equal(spec, "g:fc=L3,Q");
    fed_model_cfg_free(c);
}

/* examples/models/tabular.cfg: its parameters, tensors, the columns each
 * layer takes, and its graph as a spec. */
static void test_tabular(void **state)
{
    fed_model_cfg *c = NULL;
    fed_model_node_info info[12];
    const fed_model_node *n;
    char why[512], spec[FED_MODEL_SPEC_MAX];
    size_t total = 0;
    int count;

    (void)state;
    assert_int_equal(fed_model_cfg_load("examples/models/tabular.cfg", &c, why, sizeof why),
                     FED_OK);
    n = fed_model_cfg_nodes(c, 2, &count);
    assert_int_equal(count, 11);
    assert_string_equal(n[0].kind, "embedding");
    assert_int_equal(n[0].input, -1);
    assert_int_equal(n[1].column, 1);
    assert_int_equal(n[1].num, 1024);
    assert_int_equal(n[1].out, 4);
    assert_int_equal(n[3].input, -1); /* numeric */
    assert_int_equal(fed_model_cfg_check(c, fed_model_cfg_own_input(c), info, why, sizeof why),
                     FED_OK);
    for (int i = 0; i < count; i++)
        total += info[i].nparams;
    assert_int_equal(total, 13505);
    assert_int_equal(info[3].c, 8);  /* the numeric columns 2..9 */
    assert_int_equal(info[4].c, 20); /* 8 + 4 + 8 */
    assert_int_equal(fed_model_cfg_spec(c, spec, sizeof spec, why, sizeof why), FED_OK);
    assert_string_equal(spec, "g:emb_a=E8n1024c0,emb_b=E4n1024c1<-,cat_ab=&emb_b<emb_a,num=X<-,"
                              "cat=&num<cat_ab,fc1=L32,R,fc2=L16,R,out=L1,B");
    fed_model_cfg_free(c);
}

/* A backend claiming the CUDA plugin's flags (conv only:
 * cuda/backend_cuda.cu), the CPU's kernels behind them. */
static fed_backend *fake_cuda(void)
{
    fed_backend *be = NULL;

    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    be->caps = FED_BACKEND_CAP_CONV;
    be->name = "cuda";
    return be;
}

/* --device once the model is known: auto takes the CPU for a layer the
 * device lacks, with a warning naming it; cuda refuses naming it; a graph
 * the device runs keeps it, silently. */
static void test_device_settle(void **state)
{
    static const char *lacks = "layer 'emb_a' (embedding) needs kernels the cuda backend lacks";
    fed_model_cfg *c = NULL;
    fed_backend *be;
    fed_model *m = NULL;
    fed_model_shape in, cnn_in;
    char why[512], spec[FED_MODEL_SPEC_MAX], cnn[FED_MODEL_SPEC_MAX];

    (void)state;
    assert_int_equal(fed_model_cfg_load("examples/models/tabular.cfg", &c, why, sizeof why),
                     FED_OK);
    in = fed_model_cfg_own_input(c);
    assert_int_equal(fed_model_cfg_spec(c, spec, sizeof spec, why, sizeof why), FED_OK);
    fed_model_cfg_free(c);
    assert_int_equal(fed_model_cfg_load(SIMPLECNN, &c, why, sizeof why), FED_OK);
    cnn_in = fed_model_cfg_own_input(c);
    assert_int_equal(fed_model_cfg_spec(c, cnn, sizeof cnn, why, sizeof why), FED_OK);
    fed_model_cfg_free(c);

    assert_int_equal(fed_model_spec_fits(spec, in, FED_BACKEND_CAP_CONV, "cuda", why,
                                         sizeof why), FED_ERR_UNSUPPORTED);
    assert_string_equal(why, lacks);
    /* with the embedding's kernels, the bce loss on the host is next */
    assert_int_equal(fed_model_spec_fits(spec, in, FED_BACKEND_CAP_CONV | FED_BACKEND_CAP_EMBED,
                                         "cuda", why, sizeof why), FED_ERR_UNSUPPORTED);
    assert_string_equal(why, "the loss bce is computed on the host, which the cuda backend's "
                             "memory is not");

    fed_test_log_capture(FED_LOG_WARN);
    for (int i = 0; i < 2; i++) { /* "auto" and its spelling as no device */
        be = fake_cuda();
        assert_int_equal(fed_model_backend_settle(i ? NULL : "auto", spec, in, &be), FED_OK);
        assert_string_equal(be->name, "cpu");
        assert_int_equal(be->caps & FED_BACKEND_CAP_EMBED, FED_BACKEND_CAP_EMBED);
        assert_int_equal(fed_test_log_lines(), 1);
        fed_test_log_has(lacks);
        fed_test_log_has("--device auto runs the model on the CPU");
        assert_int_equal(fed_model_new(spec, in, be, NULL, 1, 8, &m), FED_OK);
        fed_model_free(m);
        fed_backend_free(be);
        fed_test_log_reset();
    }

    be = fake_cuda();
    assert_int_equal(fed_model_backend_settle("cuda", spec, in, &be), FED_ERR_UNSUPPORTED);
    assert_string_equal(be->name, "cuda"); /* kept, for the caller to free */
    fed_test_log_has(lacks);
    fed_test_log_has("(--device cuda; --device auto runs it on the CPU)");
    fed_test_log_reset();
    assert_int_equal(fed_model_new(spec, in, be, NULL, 1, 8, &m), FED_ERR_UNSUPPORTED);
    fed_test_log_has(lacks);
    fed_test_log_reset();

    /* SimpleCNN needs conv alone: the device stays, nothing said */
    for (int i = 0; i < 2; i++) {
        fed_backend *kept = be;

        assert_int_equal(fed_model_backend_settle(i ? "cuda:0" : "auto", cnn, cnn_in, &be),
                         FED_OK);
        assert_ptr_equal(be, kept);
        assert_int_equal(fed_test_log_lines(), 0);
    }
    /* a spec that does not plan is fed_model_new's to refuse */
    assert_int_equal(fed_model_backend_settle("cuda", "mlp:x", in, &be), FED_OK);
    assert_string_equal(be->name, "cuda");
    fed_test_log_quiet();
    fed_backend_free(be);
}

/* A shape that does not fit names its line and prints the shapes so far;
 * data that disagrees with the file is refused with both. */
static void test_shape_errors(void **state)
{
    fed_model_cfg *c = parse(IN "[conv] name = c1 out = 4 kernel = 3\n[relu]\n"
                                "[maxpool] kernel = 2\n[conv] name = c2 out = 4 kernel = 5\n"
                                "[linear] out = classes\n");
    char why[512];

    (void)state;
    assert_int_equal(fed_model_cfg_check(c, (fed_model_shape){1, 8, 8, 3, 0}, NULL, why, sizeof why),
                     FED_ERR_SHAPE);
    assert_string_equal(why, "t.cfg:5: model 't.cfg': node 3 (conv 'c2') on input 4x3x3: the "
                             "window is larger than the padded input; shapes so far: input "
                             "1x8x8, c1 4x6x6, relu 4x6x6, maxpool 4x3x3");
    assert_int_equal(fed_model_cfg_check(c, (fed_model_shape){1, 28, 28, 3, 0}, NULL, why,
                                         sizeof why),
                     FED_ERR_SHAPE);
    assert_string_equal(why, "t.cfg: [input] declares 1x8x8, the data gives 1x28x28");
    fed_model_cfg_free(c);
    c = parse(IN "[linear] out = 4\n[output] classes = 4\n");
    assert_int_equal(fed_model_cfg_check(c, (fed_model_shape){1, 8, 8, 3, 0}, NULL, why, sizeof why),
                     FED_ERR_SHAPE);
    assert_string_equal(why, "t.cfg: [output] declares 4 classes, the data has 3");
    assert_int_equal(fed_model_cfg_check(c, (fed_model_shape){1, 8, 8, 4, 0}, NULL, why, sizeof why),
                     FED_OK);
    fed_model_cfg_free(c);
    c = parse(IN "[linear] out = 5\n");
    assert_int_equal(fed_model_cfg_check(c, (fed_model_shape){1, 8, 8, 3, 0}, NULL, why, sizeof why),
                     FED_ERR_SHAPE);
    assert_string_equal(why, "t.cfg: model 't.cfg': the last layer gives 5x1x1 values, the loss "
                             "wants 3 classes");
    fed_model_cfg_free(c);
}

/* ------------------------------------------------- --torch-dump mode -- */

#define DUMP_N 8
#define DUMP_CLASSES 10
#define DUMP_LR 0.1f

/* Appends tensor name (shape) with its values to the table and buffer. */
static void dump_add(fed_tensor_info *t, int *nt, float *buf, size_t *used, const char *name,
                     int ndim, const int *shape, const float *v)
{
    fed_tensor_info *x = &t[(*nt)++];
    size_t numel = 1;

    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        x->shape[i] = shape[i];
        numel *= (size_t)shape[i];
    }
    x->offset = *used;
    x->numel = numel;
    memcpy(buf + *used, v, numel * sizeof *v);
    *used += numel;
}

static int torch_dump(const char *dir, const char *file)
{
    fed_model_cfg *c = NULL;
    fed_onnx *ox = NULL;
    fed_backend *be = NULL;
    fed_model *m = NULL;
    fed_optim *o = NULL;
    fed_optim_cfg oc;
    fed_model_shape in;
    fed_rng rng;
    fed_step_stats st = {0};
    const fed_tensor_info *mt;
    fed_tensor_info *t = NULL;
    float *buf = NULL, *p0 = NULL, *x = NULL, *logits = NULL, *eval = NULL, *yf = NULL, loss;
    int32_t y[DUMP_N];
    const fed_model_node *gnodes;
    int nt, n = 0, F, shape[4], nlog, cnt, mse;
    size_t np, used = 0;
    char why[1024], path[4096], name[64];
    int rc = 1;

    if (fed_backend_cpu_new(1, &be) != FED_OK)
        goto out;
    if (strlen(file) > 5 && !strcmp(file + strlen(file) - 5, ".onnx")) {
        /* an ONNX file: its graph, and its weights in place of the seed's */
        const fed_model_node *nodes;
        int count;

        if (fed_onnx_load(file, &ox, why, sizeof why) != FED_OK) {
            fprintf(stderr, "%s\n", why);
            goto out;
        }
        nodes = fed_onnx_nodes(ox, &count);
        in = fed_onnx_input(ox);
        if (fed_model_new_graph("onnx", nodes, count, in, be, NULL, 1, DUMP_N, &m) != FED_OK) {
            fprintf(stderr, "build failed\n");
            goto out;
        }
    } else {
        if (fed_model_cfg_load(file, &c, why, sizeof why) != FED_OK) {
            fprintf(stderr, "%s\n", why);
            goto out;
        }
        in = fed_model_cfg_input(c);
        if (!in.classes) /* bce's own two classes, else the dump's */
            in.classes = fed_model_cfg_own_input(c).classes == 2 ? 2 : DUMP_CLASSES;
        if (fed_model_cfg_build(c, in, be, NULL, 1, DUMP_N, &m, why, sizeof why) != FED_OK) {
            fprintf(stderr, "build: %s\n", why);
            goto out;
        }
    }
    fed_rng_seed(&rng, 1);
    np = fed_model_nparams(m);
    mt = fed_model_tensors(m, &nt);
    F = in.c * in.h * in.w;
    t = calloc((size_t)3 * nt + 5, sizeof *t);
    nlog = fed_model_nlogits(m);
    gnodes = c ? fed_model_cfg_nodes(c, in.classes, &cnt) : fed_onnx_nodes(ox, &cnt);
    mse = !strcmp(gnodes[cnt - 1].kind, "mse");
    buf = malloc((3 * np + (size_t)DUMP_N * (F + 3 * nlog + 1) + 1) * sizeof *buf);
    yf = malloc((size_t)DUMP_N * nlog * sizeof *yf);
    p0 = malloc(np * sizeof *p0);
    x = malloc((size_t)DUMP_N * F * sizeof *x);
    logits = malloc((size_t)DUMP_N * nlog * sizeof *logits);
    eval = malloc((size_t)DUMP_N * nlog * sizeof *eval);
    if (!t || !buf || !p0 || !x || !logits || !eval || !yf || fed_model_init(m, &rng) != FED_OK ||
        (ox && fed_onnx_apply_weights(ox, m, why, sizeof why) != FED_OK) ||
        fed_model_get_params(m, p0) != FED_OK)
        goto out;
    /* a tensor initialized to a constant (a norm's weight 1 and bias 0) is
       jittered, so that the parity covers what it multiplies and adds */
    for (int i = 0; !ox && i < nt; i++) { /* an ONNX file's weights are the file's */
        int same = (mt[i].flags & FED_TENSOR_TRAINED) != 0; /* batch norm's statistics stay */

        for (size_t k = 1; k < mt[i].numel && same; k++)
            same = p0[mt[i].offset + k] == p0[mt[i].offset];
        for (size_t k = 0; same && k < mt[i].numel; k++)
            p0[mt[i].offset + k] += (float)(0.3 * fed_rng_normal(&rng));
    }
    if (fed_model_set_params(m, p0) != FED_OK)
        goto out;
    for (int i = 0; i < DUMP_N * F; i++)
        x[i] = (float)fed_rng_normal(&rng);
    { /* an embedding's column holds ids, few so that rows repeat in the batch */
        const fed_model_node *nd = gnodes;

        for (int k = 0; k < cnt; k++)
            for (int i = 0; !strcmp(nd[k].kind, "embedding") && i < DUMP_N; i++)
                x[(size_t)i * F + nd[k].column] =
                    (float)fed_rng_below(&rng, (uint64_t)(nd[k].num < 5 ? nd[k].num : 5));
    }
    for (int i = 0; i < DUMP_N; i++)
        yf[i] = (float)(y[i] = (int32_t)fed_rng_below(&rng, (uint64_t)in.classes));
    for (int i = 0; mse && i < DUMP_N * nlog; i++) /* mse: float targets */
        yf[i] = (float)fed_rng_normal(&rng);
    fed_batch b = {.n = DUMP_N, .x_f32 = x, .y = mse ? NULL : y, .y_f32 = mse ? yf : NULL};
    /* evaluation (batch norm: the initial running statistics), then
       training's forward (the batch's, the running ones updated), then the
       step's forward and backward from the same parameters */
    if (fed_model_logits(m, &b, eval) != FED_OK || fed_model_logits_train(m, &b, logits) != FED_OK ||
        fed_model_set_params(m, p0) != FED_OK ||
        fed_model_forward_backward(m, &b, &st) != FED_OK || be->sync(be) != FED_OK)
        goto out;
    for (int i = 0; i < nt; i++) { /* a count as PyTorch's int64, as export writes it */
        dump_add(t, &n, buf, &used, mt[i].name, mt[i].ndim, mt[i].shape, p0 + mt[i].offset);
        t[n - 1].flags = mt[i].flags & FED_TENSOR_INT64;
    }
    for (int i = 0; i < nt; i++) {
        snprintf(name, sizeof name, "grad.%s", mt[i].name);
        dump_add(t, &n, buf, &used, name, mt[i].ndim, mt[i].shape,
                 fed_model_grads_dev(m) + mt[i].offset);
    }
    shape[0] = DUMP_N;
    shape[1] = in.c;
    shape[2] = in.h;
    shape[3] = in.w;
    dump_add(t, &n, buf, &used, "x", 4, shape, x);
    shape[1] = nlog;
    dump_add(t, &n, buf, &used, "y", mse ? 2 : 1, shape, yf);
    dump_add(t, &n, buf, &used, "logits", 2, shape, logits);
    dump_add(t, &n, buf, &used, "eval_logits", 2, shape, eval);
    loss = (float)(st.loss_sum / DUMP_N);
    shape[0] = 1;
    dump_add(t, &n, buf, &used, "loss", 1, shape, &loss);
    /* one plain SGD step from the same parameters */
    fed_optim_cfg_default(&oc, FED_OPTIM_SGD);
    oc.lr = DUMP_LR;
    oc.momentum = 0.0f;
    if (fed_model_set_params(m, p0) != FED_OK || fed_optim_new(&oc, m, &o) != FED_OK ||
        fed_optim_train_step(o, m, &b, NULL) != FED_OK || fed_model_get_params(m, p0) != FED_OK)
        goto out;
    for (int i = 0; i < nt; i++) {
        snprintf(name, sizeof name, "step.%s", mt[i].name);
        dump_add(t, &n, buf, &used, name, mt[i].ndim, mt[i].shape, p0 + mt[i].offset);
        t[n - 1].flags = mt[i].flags & FED_TENSOR_INT64;
    }
    snprintf(path, sizeof path, "%s/ours.safetensors", dir);
    {
        fed_store_st_model sm = {.spec = fed_model_spec(m), .t = t, .nt = n, .params = buf};

        if (fed_store_safetensors_save(path, &sm) != FED_OK)
            goto out;
    }
    printf("dumped %s: %zu parameters, loss %.6f\n", path, np, loss);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "torch-dump failed\n");
    fed_optim_free(o);
    fed_model_free(m);
    fed_backend_free(be);
    fed_model_cfg_free(c);
    fed_onnx_free(ox);
    free(t);
    free(buf);
    free(p0);
    free(x);
    free(logits);
    free(yf);
    free(eval);
    return rc;
}

/* The declared input from a model file and the options: agreeing ones
 * merge, each contradiction is refused naming both sides. */
static void test_declared_input(void **state)
{
    fed_model_cfg *c = parse("[input] features = 30\n[linear] out = classes\n"
                             "[output] classes = 2\n");
    fed_model_shape file = fed_model_cfg_input(c);
    fed_model_decl_src src;
    fed_model_decl d;
    char why[400];

    (void)state;
    file.classes = fed_model_cfg_classes(c);
    assert_int_equal(file.classes, 2);
    fed_model_cfg_free(c);
    /* the file alone; the file with options that agree */
    memset(&src, 0, sizeof src);
    src.file = "net.cfg";
    src.file_in = file;
    assert_int_equal(fed_model_input_declare(&src, &d, why, sizeof why), FED_OK);
    assert_true(fed_model_input_complete(&d));
    assert_int_equal(d.in.c, 1);
    assert_int_equal(d.in.h, 1);
    assert_int_equal(d.in.w, 30);
    assert_int_equal(d.in.classes, 2);
    assert_string_equal(d.shape_by, "net.cfg's [input]");
    src.features = 30;
    src.shape = "1,1,30";
    src.classes = 2;
    assert_int_equal(fed_model_input_declare(&src, &d, why, sizeof why), FED_OK);
    assert_int_equal(d.in.w, 30);
    /* --features against the file's [input] */
    src.shape = "";
    src.features = 31;
    assert_int_equal(fed_model_input_declare(&src, &d, why, sizeof why), FED_ERR_SHAPE);
    assert_string_equal(why, "the input is declared twice and differently: 30 features by "
                             "net.cfg's [input], 31 features by --features 31");
    /* --classes against the file's classes */
    src.features = 0;
    src.classes = 3;
    assert_int_equal(fed_model_input_declare(&src, &d, why, sizeof why), FED_ERR_SHAPE);
    assert_string_equal(why, "--classes 3 contradicts net.cfg, whose model has 2 classes");
    /* --input-shape against --features, no file */
    memset(&src, 0, sizeof src);
    src.shape = "1,28,28";
    src.features = 784;
    assert_int_equal(fed_model_input_declare(&src, &d, why, sizeof why), FED_ERR_SHAPE);
    assert_string_equal(why, "the input is declared twice and differently: 1,28,28 by "
                             "--input-shape 1,28,28, 784 features by --features 784");
    /* a malformed --input-shape */
    const char *bad[] = {"28,28", "1,28,28,1", "0,28,28", "1,x,28", "1,28,", "-1,2,3",
                         "1,28,70000"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        src.shape = bad[i];
        src.features = 0;
        assert_int_equal(fed_model_input_declare(&src, &d, why, sizeof why), FED_ERR_BAD_VALUE);
        assert_non_null(strstr(why, "want C,H,W"));
    }
    /* options alone: complete only with a shape and classes */
    memset(&src, 0, sizeof src);
    src.classes = 2;
    assert_int_equal(fed_model_input_declare(&src, &d, why, sizeof why), FED_OK);
    assert_false(fed_model_input_complete(&d));
    src.shape = "3,32,32";
    assert_int_equal(fed_model_input_declare(&src, &d, why, sizeof why), FED_OK);
    assert_true(fed_model_input_complete(&d));
    assert_int_equal(d.in.c, 3);
    assert_int_equal(d.in.h, 32);
    assert_string_equal(d.classes_by, "--classes 2");
    /* a file whose head fixes no count leaves the classes to the options */
    c = parse("[input] shape = 1,28,28\n[flatten]\n[linear] out = classes\n");
    assert_int_equal(fed_model_cfg_classes(c), 0);
    fed_model_cfg_free(c);
    c = parse("[input] features = 4\n[linear] out = 1\n[output] loss = bce\n");
    assert_int_equal(fed_model_cfg_classes(c), 2);
    fed_model_cfg_free(c);
}

/* A dataset against the declared input: the shape must be equal, every
 * label below the classes (the numbers said), and a site with fewer
 * classes takes the declared count. */
static void test_declared_fit(void **state)
{
    int32_t y[4] = {0, 0, 0, 0};
    fed_dataset d;
    fed_model_decl decl;
    char why[400];

    (void)state;
    memset(&d, 0, sizeof d);
    d.n = 4;
    d.shape = (fed_model_shape){1, 1, 30, 1, 0}; /* one class: its largest label is 0 */
    d.features = 30;
    d.y = y;
    d.x_f32 = (float *)y; /* a CSV's features (not read) */
    memset(&decl, 0, sizeof decl);
    decl.in = (fed_model_shape){1, 1, 30, 2, 0};
    snprintf(decl.shape_by, sizeof decl.shape_by, "--features 30");
    snprintf(decl.classes_by, sizeof decl.classes_by, "--classes 2");
    assert_int_equal(fed_model_input_fit(&d, &decl, "a.csv", why, sizeof why), FED_OK);
    assert_int_equal(d.shape.classes, 2);
    /* labels at or above the classes: refused with the numbers */
    y[1] = 4;
    y[3] = 2;
    d.shape.classes = 5;
    assert_int_equal(fed_model_input_fit(&d, &decl, "a.csv", why, sizeof why), FED_ERR_RANGE);
    assert_string_equal(why, "a.csv does not fit the declared classes: --classes 2 declares 2 "
                             "(labels 0 to 1), the data has 2 samples labelled 2 or more, the "
                             "largest label 4");
    assert_int_equal(d.shape.classes, 5);
    /* another column count */
    d.shape.w = 29;
    assert_int_equal(fed_model_input_fit(&d, &decl, "a.csv", why, sizeof why), FED_ERR_SHAPE);
    assert_string_equal(why, "a.csv does not fit the declared input: --features 30 declares 30 "
                             "features, the data has 29 features (columns besides the label)");
    /* images of another size */
    d.x_f32 = NULL;
    d.shape = (fed_model_shape){1, 28, 28, 10, 0};
    decl.in = (fed_model_shape){3, 32, 32, 10, 0};
    snprintf(decl.shape_by, sizeof decl.shape_by, "--input-shape 3,32,32");
    assert_int_equal(fed_model_input_fit(&d, &decl, "imgs", why, sizeof why), FED_ERR_SHAPE);
    assert_string_equal(why, "imgs does not fit the declared input: --input-shape 3,32,32 "
                             "declares 3,32,32, the data has 1,28,28 per sample");
    /* nothing declared: anything fits, its classes its own */
    memset(&decl, 0, sizeof decl);
    assert_int_equal(fed_model_input_fit(&d, &decl, "imgs", why, sizeof why), FED_OK);
    assert_int_equal(d.shape.classes, 10);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simplecnn),
        cmocka_unit_test(test_declared_input),
        cmocka_unit_test(test_declared_fit),
        cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_many_layers),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bias_free),
        cmocka_unit_test(test_norms_dropout),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_embedding_errors),
        cmocka_unit_test(test_tabular),
        cmocka_unit_test(test_mse_file),
        cmocka_unit_test(test_device_settle),
    };

    if (argc == 4 && !strcmp(argv[1], "--torch-dump"))
        return torch_dump(argv[2], argv[3]);
    fed_test_log_quiet();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
