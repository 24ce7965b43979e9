/* fuzz_model_cfg.c - libFuzzer target for the model file a person writes
 * (model/model_cfg.h): the input is a whole file. Whatever parses has at
 * least one layer, each of a known kind taking an earlier one's output (or
 * the input: an embedding or numeric layer always), and an
 * input of positive size; it is then planned for the input it declares (10
 * classes unless it says), which must succeed or explain itself, and when it
 * succeeds the layers' parameters add up to the graph's count, which its
 * "g:" spec (when it fits one) gives too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/model_cfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(void *ctx, fed_log_level level, const char *line)
{
    (void)ctx;
    (void)level;
    (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fed_model_cfg *c = NULL;
    fed_model_node_info *info;
    const fed_model_node *nodes;
    fed_model_shape in;
    char why[1024], spec[FED_MODEL_SPEC_MAX];
    size_t total = 0, np = 0;
    int count;

    fed_log_set_sink(quiet, NULL);
    if (fed_model_cfg_parse("fuzz.cfg", (const char *)data, size, &c, why, sizeof why) !=
        FED_OK) {
        if (c || !why[0])
            abort(); /* a refusal owns nothing and says why */
        return 0;
    }
    in = fed_model_cfg_input(c);
    if (in.c < 1 || in.h < 1 || in.w < 1)
        abort();
    if (!in.classes)
        in.classes = 10;
    nodes = fed_model_cfg_nodes(c, in.classes, &count);
    if (count < 1)
        abort();
    for (int i = 0; i < count; i++)
        if (!nodes[i].kind || nodes[i].input < -1 || nodes[i].input >= i)
            abort();
    info = calloc((size_t)count, sizeof *info);
    if (!info)
        abort();
    if (fed_model_cfg_check(c, in, info, why, sizeof why) == FED_OK) {
        for (int i = 0; i < count; i++) /* batch norm's statistics are values too */
            total += info[i].nparams + info[i].nbuffers;
        if (fed_model_graph_explain("fuzz", nodes, count, in, &np, NULL, 0) != FED_OK ||
            np != total)
            abort();
        /* as a spec (what --model FILE becomes) it is the same graph */
        if (fed_model_cfg_spec(c, spec, sizeof spec, why, sizeof why) == FED_OK &&
            (fed_model_spec_nparams(spec, in, &np) != FED_OK || np != total))
            abort();
    } else if (!why[0]) {
        abort();
    }
    free(info);
    fed_model_cfg_free(c);
    return 0;
}
