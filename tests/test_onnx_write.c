/* test_onnx_write.c - the ONNX export (onnx/onnx_write.h) read back by the
 * ONNX import (onnx/onnx.h): graphs of every layer kind the export writes,
 * the presets on images and on CSV rows, a one-logit net; each imports
 * again with the same weights bit for bit and the same logits on a batch,
 * and carries the input scaling as metadata; the tabular net (embeddings,
 * numeric columns) and group and layer norm too. Layers without an ONNX
 * form are refused by name. (onnx.checker and PyTorch: tests/test_onnx_export.sh.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "onnx/onnx.h"
#include "onnx/onnx_write.h"
#include "tests/support/support.h"

#define BATCH 5

/* spec on input in, initialized from seed, its export. */
typedef struct exported {
    fed_backend *be;
    fed_model *m;
    float *params;
    uint8_t *buf;
    size_t len;
} exported;

static fed_err export_spec(const char *spec, fed_model_shape in, int kind, exported *e,
                           char *why, size_t cap)
{
    fed_rng rng;
    fed_store_st_model sm;
    const fed_tensor_info *t;
    int nt;

    memset(e, 0, sizeof *e);
    assert_int_equal(fed_backend_cpu_new(1, &e->be), FED_OK);
    if (fed_model_new(spec, in, e->be, NULL, 1, BATCH, &e->m) != FED_OK) {
        if (fed_model_spec_explain(spec, in, why, cap) == FED_OK)
            snprintf(why, cap, "builds nowhere");
        fail_msg("%s: %s", spec, why);
    }
    fed_rng_seed(&rng, 7);
    assert_int_equal(fed_model_init(e->m, &rng), FED_OK);
    e->params = malloc(fed_model_nparams(e->m) * sizeof *e->params + 1);
    assert_non_null(e->params);
    assert_int_equal(fed_model_get_params(e->m, e->params), FED_OK);
    t = fed_model_tensors(e->m, &nt);
    for (int i = 0; i < nt; i++) /* batch norm's statistics moved, its counter counted */
        for (size_t k = 0; !(t[i].flags & FED_TENSOR_TRAINED) && k < t[i].numel; k++)
            e->params[t[i].offset + k] =
                t[i].flags & FED_TENSOR_INT64 ? 37.0f : 0.5f + 0.25f * (float)(k % 5);
    assert_int_equal(fed_model_set_params(e->m, e->params), FED_OK);
    sm = (fed_store_st_model){fed_model_spec(e->m), in, t, nt, e->params, kind, NULL, NULL, 0,
                              NULL};
    return fed_onnx_encode(e->m, &sm, &e->buf, &e->len, why, cap);
}

static void exported_fini(exported *e)
{
    fed_free(e->buf);
    free(e->params);
    fed_model_free(e->m);
    fed_backend_free(e->be);
}

/* The logits of m on a batch of BATCH seeded inputs into out: numbers in
 * [-1, 1), ids in the columns of src's embeddings (src: a model built
 * from a spec, m's original). */
static void logits_of(fed_model *m, const fed_model *src, float *out)
{
    fed_model_shape in = fed_model_input(m);
    size_t n = (size_t)in.c * in.h * in.w * BATCH;
    float *x = malloc(n * sizeof *x);
    int32_t y[BATCH] = {0};
    fed_batch b = {.n = BATCH, .y = y};
    fed_model_node *nodes = NULL;
    fed_rng rng;
    char why[256] = "";
    int count = 0;

    assert_non_null(x);
    fed_rng_seed(&rng, 11);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(fed_rng_uniform(&rng) * 2 - 1);
    if (fed_model_spec_nodes(fed_model_graph(src), in, &nodes, &count, why, sizeof why) != FED_OK)
        fail_msg("%s: %s", fed_model_graph(src), why);
    for (int j = 0; j < count; j++)
        for (int i = 0; !strcmp(nodes[j].kind, "embedding") && i < BATCH; i++)
            x[(size_t)i * in.w + (size_t)nodes[j].column] = (float)((i * 7 + j) % nodes[j].num);
    fed_free(nodes);
    b.x_f32 = x;
    assert_int_equal(fed_model_logits(m, &b, out), FED_OK);
    free(x);
}

/* spec exported and imported again: the same parameters, bit for bit, under
 * the same names, and the same logits; the file's metadata holds want. */
static void round_trip(const char *spec, fed_model_shape in, int kind, const char *want)
{
    exported e;
    fed_onnx *o = NULL;
    fed_model *m2 = NULL;
    const fed_model_node *nodes;
    const fed_tensor_info *t1, *t2;
    char why[512] = "";
    float *p2, a[BATCH * 16], b[BATCH * 16];
    int count, nt1, nt2, nl;
    fed_model_shape in2;

    if (export_spec(spec, in, kind, &e, why, sizeof why) != FED_OK)
        fail_msg("%s: %s", spec, why);
    if (want && !memmem(e.buf, e.len, want, strlen(want)))
        fail_msg("%s: the file lacks '%s'", spec, want);
    if (fed_onnx_parse("x.onnx", e.buf, e.len, &o, why, sizeof why) != FED_OK)
        fail_msg("%s: import: %s", spec, why);
    nodes = fed_onnx_nodes(o, &count);
    in2 = fed_onnx_input(o);
    assert_int_equal(in2.c, in.c);
    assert_int_equal(in2.h, in.h);
    assert_int_equal(in2.w, in.w);
    assert_int_equal(in2.classes, in.classes);
    assert_true(fed_onnx_has_weights(o));
    assert_int_equal(fed_model_new_graph("back", nodes, count, in2, e.be, NULL, 1, BATCH, &m2),
                     FED_OK);
    if (fed_onnx_apply_weights(o, m2, why, sizeof why) != FED_OK)
        fail_msg("%s: weights: %s", spec, why);
    assert_int_equal(fed_model_nparams(m2), fed_model_nparams(e.m));
    t1 = fed_model_tensors(e.m, &nt1);
    t2 = fed_model_tensors(m2, &nt2);
    assert_int_equal(nt1, nt2);
    p2 = malloc(fed_model_nparams(m2) * sizeof *p2 + 1);
    assert_non_null(p2);
    assert_int_equal(fed_model_get_params(m2, p2), FED_OK);
    for (int i = 0; i < nt1; i++) { /* by name: the order may differ */
        int j = 0;

        while (j < nt2 && strcmp(t1[i].name, t2[j].name))
            j++;
        if (j == nt2)
            fail_msg("%s: tensor %s is not imported", spec, t1[i].name);
        assert_int_equal(t1[i].numel, t2[j].numel);
        assert_memory_equal(e.params + t1[i].offset, p2 + t2[j].offset,
                            t1[i].numel * sizeof *p2);
    }
    nl = fed_model_nlogits(e.m);
    assert_int_equal(fed_model_nlogits(m2), nl);
    assert_true(nl <= 16);
    logits_of(e.m, e.m, a);
    logits_of(m2, e.m, b);
    assert_memory_equal(a, b, (size_t)(BATCH * nl) * sizeof *a);
    free(p2);
    fed_model_free(m2);
    fed_onnx_free(o);
    exported_fini(&e);
}

static void test_every_kind(void **state)
{
    (void)state;
    /* windows (a padded and dilated conv, a grouped one without bias, both
       pools padded), each activation, GELU's and SiLU's patterns, a
       residual, a channel concat, a global average pool, dropout */
    round_trip("g:c1=C8k3p1,r1=R,c2=C8k3p2d2g4b0,Y,+r1,a=Ak3s1p1,c3=C4k1,&a,Mk2,"
               "c4=C6k3s2p1,T,Z,P,F,fc1=L24,G,Dr250000,fc2=L16b0,S,fc3=L",
               (fed_model_shape){4, 9, 9, 10, 0}, FED_ST_INPUT_PIXELS, "fednode.input_scale");
}

static void test_batchnorm(void **state)
{
    (void)state;
    /* per channel after a bias-free conv (eps 1e-3, momentum 0.2) and per
       feature after a linear layer: BatchNormalization in its inference
       form over the running statistics, the counter an int64 initializer
       no node reads, all back by name */
    round_trip("g:c1=C6k3p1b0,bn1=Ne0.001m0.2,R,F,fc1=L12,bn2=N,R,fc2=L",
               (fed_model_shape){2, 6, 6, 5, 0}, FED_ST_INPUT_PIXELS, "bn2.num_batches_tracked");
}

static void test_presets(void **state)
{
    (void)state;
    /* mlp on images: a Flatten written before its first Gemm */
    round_trip("mlp:32,16", (fed_model_shape){1, 6, 6, 10, 0}, FED_ST_INPUT_PIXELS,
               "fednode.input_shift");
    round_trip("cnn", (fed_model_shape){1, 16, 16, 10, 0}, FED_ST_INPUT_PIXELS, NULL);
    /* CSV rows: input (batch, features) */
    round_trip("logreg", (fed_model_shape){1, 1, 7, 3, 0}, FED_ST_INPUT_STANDARDIZED,
               "fednode.input_transform");
    /* one logit (bce): the logit out, binary cross-entropy again on import */
    round_trip("g:fc1=L8,R,fc2=L1,B", (fed_model_shape){1, 1, 5, 2, 0}, FED_ST_INPUT_STANDARDIZED,
               "sigmoid(logit)");
}

static void test_tabular(void **state)
{
    (void)state;
    /* examples/models/tabular.cfg: embeddings of columns 0 and 1 (the
       exporter's Gather of the column, Cast, Gather of the weight's rows),
       the numeric columns 2 to 9 (Slice), concatenated, one logit */
    round_trip("g:emb_a=E8n1024c0,emb_b=E4n1024c1<-,cat_ab=&emb_b<emb_a,num=X<-,"
               "cat=&num<cat_ab,fc1=L32,R,fc2=L16,R,out=L1,B",
               (fed_model_shape){1, 1, 10, 2, 0}, FED_ST_INPUT_STANDARDIZED, "emb_b.weight");
}

static void test_norms(void **state)
{
    (void)state;
    /* group norm after a bias-free conv (Reshape, InstanceNormalization,
       Reshape, Mul and Add of the Unsqueezed weight and bias), layer norm
       after a linear layer (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
       Div, Mul, Add) */
    round_trip("g:c1=C8k3b0,gn=Ug4,R,F,fc=L6,ln=V,fc2=L", (fed_model_shape){3, 6, 6, 3, 0},
               FED_ST_INPUT_PIXELS, "InstanceNormalization");
    round_trip("g:c1=C6k3p1,gn1=Ug1,R,c2=C6k3,gn2=Ug6,F,fc1=L8,ln=V,R,fc2=L",
               (fed_model_shape){2, 5, 5, 4, 0}, FED_ST_INPUT_PIXELS, "ln.bias");
    /* more groups than the import keeps as small constants: the
       InstanceNormalization's scale and bias read as tensors */
    round_trip("g:c1=C32k3b0,gn=Ug32,R,F,fc=L", (fed_model_shape){1, 5, 5, 3, 0},
               FED_ST_INPUT_PIXELS, "gn.weight");
}

static void test_refusals(void **state)
{
    static const struct {
        const char *spec;
        fed_model_shape in;
        const char *want;
    } cases[] = {
        {"g:e=E4n10c1,n=X<-,&e,fc=L", {1, 1, 3, 2, 0},
         "layer 'n' (numeric): the categorical columns (an embedding's) are not the row's "
         "first ones"},
        {"g:c=C4k3,n=V,F,fc=L", {1, 5, 5, 2, 0},
         "layer 'n' (layernorm) of an image has no ONNX export yet"},
        {"g:fc1=L8,n=Ug2,fc2=L", {1, 1, 5, 2, 0},
         "layer 'n' (groupnorm) of features has no ONNX export yet"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        exported e;
        char why[512] = "";
        fed_err err = export_spec(cases[i].spec, cases[i].in, FED_ST_INPUT_UNSAID, &e, why,
                                  sizeof why);

        assert_int_equal(err, FED_ERR_UNSUPPORTED);
        assert_null(e.buf);
        if (!strstr(why, cases[i].want))
            fail_msg("%s: '%s' lacks '%s'", cases[i].spec, why, cases[i].want);
        exported_fini(&e);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kind),
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_tabular),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_refusals),
    };

    fed_test_log_quiet();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
