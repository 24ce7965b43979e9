/* cli_model.c - `fednode model FILE`: a model file's graph as the model
 * would be built from it: each layer's output shape per sample, its
 * parameters (trained, as PyTorch counts them; the values batch norm keeps
 * untrained are summed apart) and its forward + backward FLOPs per sample,
 * and the totals;
 * or the file's error, with the line and the shapes computed so far. */
#include <stdio.h>
#include <string.h>

#include "app/cli.h"
#include "core/alloc.h"
#include "core/opt.h"
#include "model/model_cfg.h"

typedef struct model_opts {
    int classes;
} model_opts;

static const fed_opt model_opts_table[] = {
    FED_OPT_DEF(model_opts, classes, "classes", FED_OPT_INT, "0", 0, 65536,
                "classes of the data (0: the file's [output] classes, else its last "
                "layer's out, else 10)"),
};
#define NMODEL_OPTS (sizeof model_opts_table / sizeof model_opts_table[0])

int fed_cli_model(int argc, char **argv)
{
    model_opts o;
    fed_model_cfg *cfg = NULL;
    fed_model_node_info *info = NULL;
    const fed_model_node *nodes;
    const char *path = argc > 0 && argv[0][0] != '-' ? argv[0] : NULL;
    char why[1024];
    fed_model_shape in;
    size_t total = 0, buffers = 0;
    double flops = 0.0;
    int count, rc, wide = 16;

    if (path) { /* FILE first, then the options */
        argv++;
        argc--;
    }
    rc = fed_cli_load_options("model", "FILE [--classes K]\n"
                              "  print a model file's layers: output shape, parameters and "
                              "FLOPs per sample",
                              model_opts_table, NMODEL_OPTS, &o, argc, argv);
    if (rc >= 0)
        return rc;
    if (!path) {
        fed_cli_error("model: give the model file (fednode model FILE)");
        return 2;
    }
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
    printf("# model %s: input %dx%dx%d, %d classes\n", fed_model_cfg_label(cfg), in.c, in.h,
           in.w, in.classes);
    for (int i = 0; i < count; i++) /* the name column fits the longest */
        if (nodes[i].name && (int)strlen(nodes[i].name) > wide)
            wide = (int)strlen(nodes[i].name);
    printf("%4s  %-14s %-*s %-12s %10s %14s\n", "node", "layer", wide, "name", "output",
           "params", "FLOPs/sample");
    for (int i = 0; i < count; i++) {
        char shape[48], idx[16];

        snprintf(shape, sizeof shape, "%dx%dx%d", info[i].c, info[i].h, info[i].w);
        snprintf(idx, sizeof idx, "%d", i);
        printf("%4d  %-14s %-*s %-12s %10zu %14.0f\n", i, nodes[i].kind, wide,
               nodes[i].name ? nodes[i].name : idx, shape, info[i].nparams, info[i].flops);
        total += info[i].nparams;
        buffers += info[i].nbuffers;
        flops += info[i].flops;
    }
    printf("%4s  %-14s %-*s %-12s %10zu %14.0f\n", "", "total", wide, "", "", total, flops);
    if (buffers) /* PyTorch's buffers: in the model and its files, never trained */
        printf("# and %zu values not trained: batch norm's running statistics and counters\n",
               buffers);
    rc = 0;
out:
    fed_free(info);
    fed_model_cfg_free(cfg);
    return rc;
}
