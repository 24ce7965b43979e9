/* ckpt_model.h - the one encoder and decoder of a checkpoint's model
 * sections (storage/store.h): model.spec (the whole spec string, no NUL:
 * a graph longer than FED_MODEL_SPEC_MAX whole, up to FED_MODEL_GRAPH_MAX,
 * so a checkpoint carries its graph; model.h names it by its id),
 * model.input (u32 LE x4: c, h, w, classes; a fifth, the input scale
 * (model.h: 1 unit), only when not centred, so a centred model's sections
 * are those of before) and params (f32 LE, nparams,
 * model.h's layout). Every writer puts them first, in that order: the
 * aggregator (then node.state, merge), local training records (then
 * train.state, optim) and `fednode import` (nothing else); the aggregator's
 * resume, `train --resume` and `fednode export` read them back.
 *
 * It lives in node/, not storage/: storage keeps checkpoints as named byte
 * strings and knows the model only as a type (its comment on model.h says
 * so), while what these sections mean, and matching them against a model,
 * is the node's business; the CLI (node/cli_*.c) is part of node/ and links
 * the same library, so both reach it without storage growing a model
 * dependency. */
#ifndef FED_NODE_CKPT_MODEL_H
#define FED_NODE_CKPT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "model/model.h"
#include "storage/store.h"

#define FED_NODE_MODEL_SECTIONS 3 /* model.spec, model.input, params */
#define FED_NODE_INPUT_BYTES 16u       /* model.input of a centred model */
#define FED_NODE_INPUT_SCALED_BYTES 20u /* ... with its input scale */

/* The sections of a model, ready for fed_store_checkpoint_write. spec and
 * params are borrowed; the input shape is encoded into input. */
typedef struct fed_node_model_sec {
    uint8_t input[FED_NODE_INPUT_SCALED_BYTES];
    fed_store_section s[FED_NODE_MODEL_SECTIONS];
} fed_node_model_sec;

/* Fills out for spec (whole: fed_model_graph), shape and nparams parameters already in the params
 * section's form (f32 LE: fed_put_f32le_n, or fed_node_model_params_le).
 * out->s[i].data for model.input points into out: do not copy out. */
void fed_node_model_sec_encode(fed_node_model_sec *out, const char *spec, fed_model_shape shape,
                               const void *params_le, size_t nparams);

/* m's parameters in the params section's form, in a new buffer of *len
 * bytes (fed_free). */
FED_WUR fed_err fed_node_model_params_le(const fed_model *m, uint8_t **out, size_t *len);

/* A checkpoint's model as its sections state it; params points into the
 * checkpoint (f32 LE: fed_get_f32le_n). */
typedef struct fed_node_model_view {
    char spec[FED_MODEL_SPEC_MAX];  /* its id (fed_model_spec_id) */
    const char *graph;  /* a graph longer than its id: graph_len bytes (no NUL)
                           in the checkpoint; NULL: spec is whole */
    size_t graph_len;
    fed_model_shape shape;
    const uint8_t *params;
    size_t nparams;
} fed_node_model_view;

/* Reads c's model sections into out (zeroed first). FED_ERR_NOTFOUND: one
 * of the three is missing; FED_ERR_FORMAT: one is malformed (spec empty,
 * FED_MODEL_SPEC_MAX or longer but for a "g:" graph shorter than
 * FED_MODEL_GRAPH_MAX, or holding a NUL; input not 16 bytes, nor 20 with
 * a known scale;
 * params not whole floats); FED_ERR_SHAPE: an input field above INT_MAX.
 * Nothing is logged: the caller knows what it was looking for. */
FED_WUR fed_err fed_node_model_sec_decode(const fed_store_ckpt *c, fed_node_model_view *out);

/* v's whole spec, NUL-terminated, in a new buffer (fed_free): what builds
 * its model. */
FED_WUR fed_err fed_node_model_view_whole(const fed_node_model_view *v, char **out);

/* Whether v is a model of spec and shape with nparams parameters:
 * FED_ERR_SPEC or FED_ERR_SHAPE, logged with who ("aggregator", ...) and
 * the checkpoint's id, else FED_OK. */
FED_WUR fed_err fed_node_model_view_match(const fed_node_model_view *v, const char *who,
                                          uint64_t ckpt_id, const char *spec,
                                          fed_model_shape shape, size_t nparams);

#endif
