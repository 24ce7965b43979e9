/* cli_model.c - `fednode model FILE`: a model file's (or an .onnx file's)
 * graph as the model would be built from it: each layer's output shape per
 * sample, its parameters and its forward + backward FLOPs per sample, and
 * the totals; or the file's error, with the line (the node, for ONNX) and
 * the shapes computed so far. */
#include <stdio.h>
#include <string.h>

#include "app/cli.h"
#include "core/alloc.h"
#include "core/opt.h"
#include "model/model_cfg.h"
#include "onnx/onnx.h"

typedef struct model_opts {
    int classes;
} model_opts;

static const fed_opt model_opts_table[] = {
    FED_OPT_DEF(model_opts, classes, "classes", FED_OPT_INT, "0", 0, 65536,
                "classes of the data (0: the file's [output] classes, else its last "
                "layer's out, else 10)"),
};
#define NMODEL_OPTS (sizeof model_opts_table / sizeof model_opts_table[0])

static void print_graph(const char *label, const fed_model_node *nodes, int count,
                        fed_model_shape in, const fed_model_node_info *info)
{
    size_t total = 0;
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
        flops += info[i].flops;
    }
    printf("%4s  %-14s %-24s %-12s %10zu %14.0f\n", "", "total", "", "", total, flops);
}

/* An .onnx file: the graph it translates to, and what the translation did. */
static int model_onnx(const char *path, int classes)
{
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
    int count, rc;

    if (path) { /* FILE first, then the options */
        argv++;
        argc--;
    }
    rc = fed_cli_load_options("model", "FILE [--classes K]\n"
                              "  print a model file's (or an .onnx file's) layers: output "
                              "shape, parameters and FLOPs per sample",
                              model_opts_table, NMODEL_OPTS, &o, argc, argv);
    if (rc >= 0)
        return rc;
    if (!path) {
        fed_cli_error("model: give the model file (fednode model FILE)");
        return 2;
    }
    if (fed_cli_is_onnx(path))
        return model_onnx(path, o.classes);
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
    rc = 0;
out:
    fed_free(info);
    fed_model_cfg_free(cfg);
    return rc;
}
