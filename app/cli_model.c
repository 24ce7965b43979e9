/* cli_model.c - `fednode model FILE`: a model file's (or an .onnx file's)
 * graph as the model would be built from it: each layer's output shape per
 * sample, its parameters (trained, as PyTorch counts them; the values batch
 * norm keeps untrained are summed apart) and its forward + backward FLOPs
 * per sample, and the totals; or the file's error, with the line (the node,
 * for ONNX) and the shapes computed so far. With --plan, what one process
 * training it holds (parameters, gradients, optimizer state, activations:
 * the model built on the CPU backend and its allocator's counts) and its
 * FLOPs per step, for a batch, precision and recompute. */
#include <stdio.h>
#include <string.h>

#include "app/cli.h"
#include "core/alloc.h"
#include "core/opt.h"
#include "model/backend.h"
#include "model/model_cfg.h"
#include "model/pipeline.h"
#include "onnx/onnx.h"

typedef struct model_opts {
    int classes;
    int plan;
    int batch;
    char precision[8];
    int recompute;
    char optimizer[8];
    int stages;
} model_opts;

static const fed_opt model_opts_table[] = {
    FED_OPT_DEF(model_opts, classes, "classes", FED_OPT_INT, "0", 0, 65536,
                "classes of the data (0: the file's [output] classes, else its last "
                "layer's out, else 10)"),
    FED_OPT_DEF(model_opts, plan, "plan", FED_OPT_BOOL, "false", 0, 0,
                "also print what one training process holds (parameters, gradients, optimizer "
                "state, activations) and the FLOPs of a step"),
    FED_OPT_DEF(model_opts, batch, "batch", FED_OPT_INT, "64", 1, 65536,
                "--plan: the samples of one step (of one micro-batch with --accumulate)"),
    FED_OPT_DEF(model_opts, precision, "precision", FED_OPT_STR, "fp32", 0, 0,
                "--plan: fp32 or bf16"),
    FED_OPT_DEF(model_opts, recompute, "recompute", FED_OPT_INT, "1", 1, 4096,
                "--plan: keep every K-th layer's output (train's --recompute)"),
    FED_OPT_DEF(model_opts, optimizer, "optimizer", FED_OPT_STR, "sgd", 0, 0,
                "--plan: sgd (its momentum: one float a parameter) or adam (two)"),
    FED_OPT_DEF(model_opts, stages, "pipeline-stages", FED_OPT_INT, "1", 1, FED_PIPE_MAX_STAGES,
                "--plan: the graph split into S pipeline stages (train's --pipeline-stages): "
                "each stage's layers, parameters and FLOPs"),
};
#define NMODEL_OPTS (sizeof model_opts_table / sizeof model_opts_table[0])

static void print_graph(const char *label, const fed_model_node *nodes, int count,
                        fed_model_shape in, const fed_model_node_info *info)
{
    size_t total = 0, buffers = 0;
    double flops = 0.0;

    if (!strcmp(nodes[count - 1].kind, "mse")) /* numbers to predict: no classes */
        printf("# model %s: input %dx%dx%d, %d outputs (mse)\n", label, in.c, in.h, in.w,
               count > 1 ? info[count - 2].c * info[count - 2].h * info[count - 2].w : 0);
    else
        printf("# model %s: input %dx%dx%d, %d classes\n", label, in.c, in.h, in.w,
               in.classes);
    printf("%4s  %-14s %-24s %-12s %10s %14s\n", "node", "layer", "name", "output", "params",
           "FLOPs/sample");
    for (int i = 0; i < count; i++) {
        char shape[48], idx[16];

        snprintf(shape, sizeof shape, "%dx%dx%d", info[i].c, info[i].h, info[i].w);
        snprintf(idx, sizeof idx, "%d", i);
        printf("%4d  %-14s %-24s %-12s %10zu %14.0f\n", i, nodes[i].kind,
               nodes[i].name ? nodes[i].name : idx, shape, info[i].nparams, info[i].flops);
        total += info[i].nparams;
        buffers += info[i].nbuffers;
        flops += info[i].flops;
    }
    printf("%4s  %-14s %-24s %-12s %10zu %14.0f\n", "", "total", "", "", total, flops);
    if (buffers) /* PyTorch's buffers: in the model and its files, never trained */
        printf("# and %zu values not trained: batch norm's running statistics and counters\n",
               buffers);
}

static double mib(size_t bytes)
{
    return (double)bytes / 1048576.0;
}

/* --plan: the graph built for real on the CPU backend (one shard, no
 * pool), its allocator's counts read back. */
static int print_plan(const char *label, const fed_model_node *nodes, int count,
                      fed_model_shape in, const model_opts *o)
{
    fed_backend *be = NULL;
    fed_model *m = NULL;
    fed_precision prec;
    char why[256];
    int rc = 1, opt_floats = !strcmp(o->optimizer, "adam") ? 2 : 1;
    size_t np, pbytes, act, other;
    double fwdbwd, extra;
    fed_err e;

    if (fed_model_precision_parse(o->precision, &prec) != FED_OK)
        return 2; /* check_opts refused it */
    if ((e = fed_backend_cpu_new(1, &be)) != FED_OK ||
        (e = fed_model_new_graph(label, nodes, count, in, be, NULL, 1, o->batch, &m)) != FED_OK ||
        (e = fed_model_set_recompute(m, o->recompute)) != FED_OK) {
        fed_cli_error("model: --plan: building it at batch %d: %s", o->batch, fed_strerror(e));
        goto out;
    }
    np = fed_model_nparams(m);
    pbytes = np * sizeof(float);
    act = fed_model_activation_bytes(m);
    other = fed_model_bytes(m) - 2 * pbytes - act;
    fwdbwd = fed_model_flops_per_sample(m) * o->batch;
    extra = fed_model_recompute_flops(m) * o->batch;
    printf("# plan: batch %d, precision %s, recompute %d, optimizer %s; one process\n", o->batch,
           o->precision, o->recompute, o->optimizer);
    printf("%-18s %12.1f MiB  (%zu floats, fp32: the master weights)\n", "parameters",
           mib(pbytes), np);
    printf("%-18s %12.1f MiB  (fp32)\n", "gradients", mib(pbytes));
    printf("%-18s %12.1f MiB  (%s: %d float%s a parameter)\n", "optimizer state",
           mib(pbytes * (size_t)opt_floats), o->optimizer, opt_floats, opt_floats > 1 ? "s" : "");
    printf("%-18s %12.1f MiB  (the allocator's count: outputs, output gradients, im2col, "
           "argmax, scratch)\n", "activations", mib(act));
    printf("%-18s %12.1f MiB  (the batch's input, labels, DP-SGD's norms)\n", "other buffers",
           mib(other));
    printf("%-18s %12.1f MiB\n", "total",
           mib(2 * pbytes + pbytes * (size_t)opt_floats + act + other));
    printf("%-18s %12.4g  (forward + backward %.4g, recomputed forwards %.4g)\n",
           "FLOPs per step", fwdbwd + extra, fwdbwd, extra);
    if (prec == FED_PRECISION_BF16) {
        if (fed_model_set_precision(m, prec, why, sizeof why) != FED_OK)
            printf("# note: %s\n", why);
        printf("# note: bf16 rounds each GEMM's operands as it packs them (transient buffers "
               "per call); the buffers above stay fp32\n");
    }
    rc = 0;
out:
    fed_model_free(m);
    fed_backend_free(be);
    return rc;
}

/* The options, before anything is printed: --plan's own (their help says
 * "--plan:") only with --plan, and their values. 0, or the exit status
 * (2), the refusal printed. */
static int check_opts(const model_opts *o, const unsigned char *given)
{
    fed_precision prec;

    for (size_t i = 0; i < NMODEL_OPTS; i++)
        if (given[i] && !o->plan && !strncmp(model_opts_table[i].help, "--plan:", 7)) {
            fed_cli_error("model: --%s is a setting of --plan (what a training process holds): "
                          "add --plan, or drop it", model_opts_table[i].name);
            return 2;
        }
    if (fed_model_precision_parse(o->precision, &prec) != FED_OK) {
        fed_cli_error("model: --precision: '%s' is not fp32 or bf16", o->precision);
        return 2;
    }
    if (strcmp(o->optimizer, "sgd") && strcmp(o->optimizer, "adam")) {
        fed_cli_error("model: --optimizer: '%s' is not sgd or adam", o->optimizer);
        return 2;
    }
    return 0;
}

/* --plan --pipeline-stages S: the split train makes (model/pipeline.h),
 * a stage a row: its layers, what its rank holds, its FLOPs. */
static int print_stages(const char *label, const fed_model_node *nodes, int count,
                        fed_model_shape in, const model_opts *o)
{
    fed_pipe_stage st[FED_PIPE_MAX_STAGES];
    fed_model_layer_cost *c = NULL;
    char *spec = fed_malloc(FED_MODEL_GRAPH_MAX), why[320];
    int opt_floats = !strcmp(o->optimizer, "adam") ? 2 : 1, L = 0, rc = 1;
    double total = 0.0, most = 0.0;
    fed_err e;

    (void)label;
    if (!spec || (e = fed_model_graph_spec(nodes, count, spec, FED_MODEL_GRAPH_MAX)) != FED_OK ||
        (e = fed_model_spec_layers(spec, in, &c, &L)) != FED_OK) {
        fed_cli_error("model: --pipeline-stages: the graph does not plan");
        goto out;
    }
    if ((e = fed_pipe_split(c, L, (size_t)in.c * in.h * in.w, o->stages, st, why,
                            sizeof why)) != FED_OK) {
        fed_cli_error("model: %s", why);
        goto out;
    }
    for (int s = 0; s < o->stages; s++) {
        total += st[s].flops;
        most = st[s].flops > most ? st[s].flops : most;
    }
    printf("# pipeline: %d stages over %d layers, balanced by FLOPs (the largest stage %.1f%% "
           "of the step; an even split %.1f%%); a rank holds its stage's parameters, gradients "
           "and optimizer state\n", o->stages, L, 100.0 * most / total, 100.0 / o->stages);
    printf("%5s  %-14s %-24s %-24s %12s %10s %14s %10s\n", "stage", "layers", "first", "last",
           "params", "MiB held", "FLOPs/sample", "out/sample");
    for (int s = 0; s < o->stages; s++) {
        char range[32];
        size_t np = st[s].p_hi - st[s].p_lo;

        snprintf(range, sizeof range, "%d-%d", st[s].lo, st[s].hi - 1);
        printf("%5d  %-14s %-24s %-24s %12zu %10.2f %14.0f %10zu\n", s, range, c[st[s].lo].name,
               c[st[s].hi - 1].name, np, mib(np * sizeof(float) * (size_t)(2 + opt_floats)),
               st[s].flops, st[s].out_numel);
    }
    printf("# MiB held: parameters, gradients and %s's state (activations: each stage keeps "
           "every micro-batch's input, M x micro x its input values, and one micro-batch's "
           "buffers); out/sample: the floats a sample sends to the next stage (and its "
           "gradient back)\n", o->optimizer);
    rc = 0;
out:
    fed_free(c);
    fed_free(spec);
    return rc;
}

/* An .onnx file: the graph it translates to, and what the translation did. */
static int model_onnx(const char *path, const model_opts *mo)
{
    int classes = mo->classes;
    fed_onnx *o = NULL;
    fed_model_node_info *info = NULL;
    const fed_model_node *nodes;
    fed_model_shape in;
    char why[1024];
    int count, planned = 0, rc = 1;

    if (fed_onnx_load(path, &o, why, sizeof why) != FED_OK) {
        fed_cli_error("model: %s", why);
        return 1;
    }
    nodes = fed_onnx_nodes(o, &count);
    in = fed_onnx_input(o);
    if (classes && classes != in.classes) {
        fed_cli_error("model: --classes %d contradicts %s, whose last layer gives %d", classes,
                      path, in.classes);
        rc = 2;
        goto out;
    }
    if (!(info = fed_calloc((size_t)count, sizeof *info)))
        goto out;
    if (fed_model_graph_shapes(path, nodes, count, in, info, &planned, why, sizeof why) !=
        FED_OK) {
        fed_cli_error("model: %s", why);
        goto out;
    }
    print_graph(path, nodes, count, in, info);
    if (mo->plan && print_plan(path, nodes, count, in, mo) != 0)
        goto out;
    printf("# weights: %s\n", fed_onnx_has_weights(o) ? "from the file (its initializers)"
                                                     : "none in the file: initialized as PyTorch");
    if (fed_onnx_notes(o)[0]) {
        const char *s = fed_onnx_notes(o);

        while (*s) {
            const char *e = strchr(s, '\n');

            printf("# note: %.*s\n", (int)(e - s), s);
            s = e + 1;
        }
    }
    rc = 0;
out:
    fed_free(info);
    fed_onnx_free(o);
    return rc;
}

int fed_cli_model(int argc, char **argv)
{
    model_opts o;
    fed_model_cfg *cfg = NULL;
    fed_model_node_info *info = NULL;
    const fed_model_node *nodes;
    const char *path = argc > 0 && argv[0][0] != '-' ? argv[0] : NULL;
    char why[1024];
    fed_model_shape in;
    unsigned char given[NMODEL_OPTS];
    int count, rc;

    if (path) { /* FILE first, then the options */
        argv++;
        argc--;
    }
    rc = fed_cli_load_options_given("model", "FILE [--classes K] [--plan [--batch B] [--precision "
                              "P] [--recompute K] [--optimizer O] [--pipeline-stages S]]\n"
                              "  print a model file's (or an .onnx file's) layers: output "
                              "shape, parameters and FLOPs per sample; --plan: a training "
                              "process's memory and FLOPs per step",
                              model_opts_table, NMODEL_OPTS, &o, argc, argv, given);
    if (rc >= 0)
        return rc;
    if (!path) {
        fed_cli_error("model: give the model file (fednode model FILE)");
        return 2;
    }
    if ((rc = check_opts(&o, given)) != 0)
        return rc;
    if (fed_cli_is_onnx(path))
        return model_onnx(path, &o);
    if (fed_model_cfg_load(path, &cfg, why, sizeof why) != FED_OK) {
        fed_cli_error("model: %s", why);
        return 1;
    }
    in = fed_model_cfg_own_input(cfg);
    if (o.classes)
        in.classes = o.classes;
    nodes = fed_model_cfg_nodes(cfg, in.classes, &count);
    if (!(info = fed_calloc((size_t)count, sizeof *info))) {
        rc = 1;
        goto out;
    }
    if (fed_model_cfg_check(cfg, in, info, why, sizeof why) != FED_OK) {
        fed_cli_error("model: %s", why);
        rc = 1;
        goto out;
    }
    print_graph(fed_model_cfg_label(cfg), nodes, count, in, info);
    rc = o.plan ? print_plan(fed_model_cfg_label(cfg), nodes, count, in, &o) : 0;
    if (rc == 0 && o.plan && o.stages > 1)
        rc = print_stages(fed_model_cfg_label(cfg), nodes, count, in, &o);
out:
    fed_free(info);
    fed_model_cfg_free(cfg);
    return rc;
}
