/* pipeline.c - the split of a layer graph into pipeline stages balanced by
 * FLOPs (model/pipeline.h): a dynamic program over the places a cut may go,
 * minimizing the largest stage. Reads the model's plan, owns nothing. */
#include "model/pipeline.h"

#include <float.h>

#include "core/alloc.h"

fed_err fed_pipe_split(const fed_model_layer_cost *c, int count, size_t in_numel, int S,
                       fed_pipe_stage *out, char *why, size_t cap)
{
    /* best[s * (L + 1) + j]: the least largest stage of layers [0, j) in s
       stages, each ending where a cut may go; from[...]: its last stage's lo */
    double *best = NULL, *pre = NULL;
    int *from = NULL, L = count, cuts = 0;
    fed_err err = FED_OK;

    if (S < 1 || S > FED_PIPE_MAX_STAGES || count < 1)
        return fed_err_why(why, cap, FED_ERR_INVAL, "pipeline: %d stages (1 to %d)", S,
                           FED_PIPE_MAX_STAGES);
    for (int l = 0; l + 1 < L; l++)
        cuts += c[l].cut_after != 0;
    if (S > cuts + 1)
        return fed_err_why(why, cap, FED_ERR_SPEC,
                           "pipeline: --pipeline-stages %d: the model's %d layers may be cut in "
                           "%d places only (a cut goes where one tensor crosses, between "
                           "blocks), so %d stages at most", S, L, cuts, cuts + 1);
    best = fed_malloc((size_t)(S + 1) * (size_t)(L + 1) * sizeof *best);
    from = fed_malloc((size_t)(S + 1) * (size_t)(L + 1) * sizeof *from);
    pre = fed_malloc((size_t)(L + 1) * sizeof *pre);
    if (!best || !from || !pre) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    pre[0] = 0.0;
    for (int l = 0; l < L; l++)
        pre[l + 1] = pre[l] + c[l].flops;
    for (int k = 0; k < (S + 1) * (L + 1); k++)
        best[k] = DBL_MAX;
    best[0] = 0.0;
    for (int s = 1; s <= S; s++)
        for (int j = 1; j <= L; j++) {
            if (j < L && !c[j - 1].cut_after)
                continue; /* no stage may end after layer j - 1 */
            for (int i = s - 1; i < j; i++) { /* the stage [i, j) */
                double prev = best[(s - 1) * (L + 1) + i], v;

                if (prev == DBL_MAX)
                    continue;
                v = pre[j] - pre[i] > prev ? pre[j] - pre[i] : prev;
                if (v < best[s * (L + 1) + j]) {
                    best[s * (L + 1) + j] = v;
                    from[s * (L + 1) + j] = i;
                }
            }
        }
    for (int s = S, j = L; s >= 1; s--) {
        int i = from[s * (L + 1) + j];

        out[s - 1].lo = i;
        out[s - 1].hi = j;
        out[s - 1].p_lo = i ? c[i - 1].p_end : 0;
        out[s - 1].p_hi = c[j - 1].p_end;
        out[s - 1].flops = pre[j] - pre[i];
        out[s - 1].in_numel = i ? c[i - 1].out_numel : in_numel;
        out[s - 1].out_numel = c[j - 1].out_numel;
        j = i;
    }
out:
    fed_free(best);
    fed_free(from);
    fed_free(pre);
    return err;
}

fed_err fed_pipe_plan(const char *spec, fed_model_shape in, int S, fed_pipe_stage *out,
                      char *why, size_t cap)
{
    fed_model_layer_cost *c = NULL;
    int count = 0;
    fed_err err = fed_model_spec_layers(spec, in, &c, &count);

    if (err != FED_OK)
        return fed_err_why(why, cap, err, "pipeline: model '%.60s' does not plan", spec);
    err = fed_pipe_split(c, count, (size_t)in.c * in.h * in.w, S, out, why, cap);
    fed_free(c);
    return err;
}
