/* model_cfg.h - model files a person writes: a graph of layers in text, one
 * section per layer in order, in the spirit of darknet's .cfg files.
 *
 *   # NIID-Bench's SimpleCNN
 *   [input]   shape = 1,28,28          # or: features = 30 (a CSV row)
 *   [conv]    name = conv1  out = 6  kernel = 5
 *   [relu]
 *   [maxpool] kernel = 2
 *   ...
 *   [linear]  name = fc3  out = classes
 *   [output]  loss = cross_entropy  classes = 10
 *
 * Keys follow their section on its line or on lines of their own, as
 * key = value (no spaces inside a value); '#' or ';' starts a comment.
 * [input] comes first (shape = C,H,W or features = N; categorical =
 * C1,C2,...: the 0-based columns of the row that hold ids, each of which
 * an [embedding] must read); [output] last and optional (loss =
 * cross_entropy, or bce: binary cross-entropy on one logit, or mse: the
 * mean squared error against float targets, a last "bce" or "mse" node;
 * classes = K, else the data's). Layers, each an entry of the model's
 * layer table:
 *   [linear]   name, out (a count or "classes": the data's), bias (1)
 *   [conv]     name, out, kernel, stride (1), padding (0), dilation (1),
 *              groups (1; dividing the input's channels and out), bias (1)
 *   [maxpool]  name, kernel, stride (the kernel), padding (0)
 *   [avgpool]  name, kernel, stride (the kernel), padding (0)
 *   [relu]     name           [flatten]  name     [global_avgpool]  name
 *   [add]      name, from (an earlier layer's name or index, - the input):
 *              its input plus that layer's output (a residual)
 *   [concat]   name, from: its input's channels, then that layer's
 *   [batchnorm] name, momentum (0.1), eps (1e-5): per channel (per
 *              feature after a linear layer or flatten), PyTorch's
 *              BatchNorm2d/1d
 * and every layer input (the layer before it): an earlier layer whose
 * output it takes instead (a branch; model.h's rules).
 *   [leaky_relu] [gelu] [silu] [sigmoid] [tanh]  name: activations of their
 *              own (model.h), PyTorch's modules with their defaults
 *   [embedding] name, column (a categorical one), num (its ids, 0..num-1),
 *              dim: nn.Embedding(num, dim) of the id in that column
 *   [numeric]  name: the row's columns that are not categorical, in order
 * ([embedding] and [numeric] take the model's input row, never input =)
 *   [layernorm] name: over all of a sample's values
 *   [groupnorm] name, groups (dividing the input's channels)
 *   [dropout]  name, p (0.5; 0 to below 1, at most 6 decimals)
 * bias = 0 or false: no "<name>.bias" (PyTorch's bias=False).
 * kernel, stride, padding and dilation take N or H,W. name (letters,
 * digits, '_', inner '.') names the tensors "<name>.weight" and
 * "<name>.bias"; without one a layer is named by its index among the
 * sections after [input], as nn.Sequential would. Every error names the
 * file, the line and the key; a shape error also the shapes computed up to
 * the layer that failed. */
#ifndef FED_MODEL_MODEL_CFG_H
#define FED_MODEL_MODEL_CFG_H

#include <stddef.h>

#include "core/err.h"
#include "model/model.h"

#define FED_MODEL_CFG_MAX_BYTES (1u << 20)

typedef struct fed_model_cfg fed_model_cfg;

/* Parses text (len bytes) of the file named file (for messages; its last
 * path component labels the model). FED_ERR_SPEC (FED_ERR_TOO_LARGE past
 * FED_MODEL_CFG_MAX_BYTES) with what was wrong in why (cap bytes). */
FED_WUR fed_err fed_model_cfg_parse(const char *file, const char *text, size_t len,
                                    fed_model_cfg **out, char *why, size_t cap);
/* Reads and parses the file at path. */
FED_WUR fed_err fed_model_cfg_load(const char *path, fed_model_cfg **out, char *why,
                                   size_t cap);
void fed_model_cfg_free(fed_model_cfg *c);

/* The input the file declares, classes 0 when [output] says none. */
fed_model_shape fed_model_cfg_input(const fed_model_cfg *c);
/* The classes the file fixes: [output]'s, else 2 for a bce head, else its
 * last layer's out when that is a number (2 or more); 0 when the file
 * leaves them to the data or --classes ("out = classes"). */
int fed_model_cfg_classes(const fed_model_cfg *c);
/* The input the file describes on its own: fed_model_cfg_input, with the
 * classes its last layer gives when [output] says none (10 when that is
 * "classes" too; 2 with bce, 1 with mse): what `fednode model` shows and
 * --model checks first. */
fed_model_shape fed_model_cfg_own_input(const fed_model_cfg *c);
/* The model's label: the file's last path component. */
const char *fed_model_cfg_label(const fed_model_cfg *c);
/* The nodes, "out = classes" resolved to classes; valid until the next
 * call or fed_model_cfg_free. */
const fed_model_node *fed_model_cfg_nodes(fed_model_cfg *c, int classes, int *count);
/* The line of node i's section. */
int fed_model_cfg_line(const fed_model_cfg *c, int i);

/* Plans the graph for input in (the data's; it must agree with what the
 * file declares): info (fed_model_cfg's count entries; may be NULL) gets
 * each node's output, parameters and FLOPs. On failure why says the file,
 * line and what was wrong, and the shapes computed so far. */
FED_WUR fed_err fed_model_cfg_check(fed_model_cfg *c, fed_model_shape in,
                                    fed_model_node_info *info, char *why, size_t cap);
/* The graph as a spec string (model.h's fed_model_graph_spec: "g:..."),
 * what --model FILE becomes: it is stored and sent as any spec, so a node
 * never reads a file a spec names. The [input] and [output] sections stay
 * out of it: the data gives both, as with the presets. FED_ERR_TOO_LARGE
 * past FED_MODEL_GRAPH_MAX (or cap), with why (wcap bytes) saying so; one
 * past FED_MODEL_SPEC_MAX is named by its id (model.h) where it travels. */
FED_WUR fed_err fed_model_cfg_spec(fed_model_cfg *c, char *spec, size_t cap, char *why,
                                   size_t wcap);
/* fed_model_cfg_check, then fed_model_new_graph. */
FED_WUR fed_err fed_model_cfg_build(fed_model_cfg *c, fed_model_shape in, fed_backend *be,
                                    fed_pool *pool, int shards, int max_batch, fed_model **out,
                                    char *why, size_t cap);

#endif
