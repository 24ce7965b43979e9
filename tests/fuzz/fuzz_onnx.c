/* fuzz_onnx.c - libFuzzer target for the ONNX reader (onnx/onnx.h): the
 * input is a whole .onnx file. A refusal owns nothing and says why; what is
 * accepted is a graph that plans for the input it declares, whose
 * initializers (when it has them) hold exactly its parameter count. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "onnx/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(void *ctx, fed_log_level level, const char *line)
{
    (void)ctx;
    (void)level;
    (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fed_onnx *o = NULL;
    const fed_model_node *nodes;
    char why[1024] = "";
    size_t np = 0;
    int count;

    fed_log_set_sink(quiet, NULL);
    if (fed_onnx_parse("fuzz.onnx", data, size, &o, why, sizeof why) != FED_OK) {
        if (o || !why[0])
            abort();
        return 0;
    }
    nodes = fed_onnx_nodes(o, &count);
    if (count < 1 ||
        fed_model_graph_explain("fuzz", nodes, count, fed_onnx_input(o), &np, why, sizeof why) !=
            FED_OK)
        abort(); /* an accepted file plans */
    fed_onnx_free(o);
    return 0;
}
