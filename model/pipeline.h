/* pipeline.h - a model's layer graph split into S contiguous pipeline
 * stages (GPipe): cuts only where one tensor crosses (fed_model_layer_cost's
 * cut_after: never across a residual), balanced by the layers' FLOPs per
 * sample. The stages themselves are models of their own
 * (fed_model_new_stage), trained by a trainer over a stage
 * (fed_trainer_new_stage, model/train.h). Pure arithmetic: no allocation
 * beyond the plan's, no logging but the refusals. */
#ifndef FED_MODEL_PIPELINE_H
#define FED_MODEL_PIPELINE_H

#include <stddef.h>

#include "core/err.h"
#include "model/model.h"

#define FED_PIPE_MAX_STAGES 64

/* One stage: layers [lo, hi), parameters [p_lo, p_hi) of the flat buffer
 * (floats, batch norm's statistics included), forward + backward FLOPs per
 * sample, and the values per sample it takes in and gives out. */
typedef struct fed_pipe_stage {
    int lo, hi;
    size_t p_lo, p_hi;
    double flops;
    size_t in_numel, out_numel;
} fed_pipe_stage;

/* The layers c[0..count) (fed_model_spec_layers) into S stages, out[0..S):
 * the split whose largest stage has the fewest FLOPs, cut only after a
 * layer whose cut_after is set; in_numel is the model's input values a
 * sample. FED_ERR_SPEC with the reason in why when S is more than the
 * places a cut may go plus one, FED_ERR_INVAL for S outside
 * 1..FED_PIPE_MAX_STAGES. */
FED_WUR fed_err fed_pipe_split(const fed_model_layer_cost *c, int count, size_t in_numel, int S,
                               fed_pipe_stage *out, char *why, size_t cap);
/* fed_pipe_split of spec's layers for inputs in. */
FED_WUR fed_err fed_pipe_plan(const char *spec, fed_model_shape in, int S, fed_pipe_stage *out,
                              char *why, size_t cap);

#endif
