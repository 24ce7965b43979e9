/* model.h - a model is one flat float32 parameter buffer, one gradient buffer
 * of the same layout, and a graph of layer nodes that read and write slices
 * of them (llm.c's shape). Each layer kind is one entry of model.c's layer
 * table (shape plan, forward, backward, FLOPs, init, DP-SGD's per-sample
 * norm) over the backend table; the CPU backend splits a batch into shards
 * run on the core pool. A spec string is a preset that expands to a graph
 * (a chain today), node by node as PyTorch's nn.Sequential:
 *
 * Spec strings:  logreg            linear in -> classes
 *                mlp:256,128       linear -> ReLU per hidden width, then classes
 *                cnn               conv5x5x32 -> ReLU -> maxpool2 -> conv5x5x64
 *                                  -> ReLU -> maxpool2 -> fc512 -> ReLU -> fc classes
 * Tensors are named and shaped as PyTorch's nn.Sequential of the same layers:
 * "0.weight" (out, in), "0.bias" (out); conv weights (out, in, kh, kw).
 * Sequential indices count every module, ReLU/pool/Flatten included:
 *   logreg   0 Linear                       -> 0.weight (classes, F)
 *   mlp:A,B  0 Linear 1 ReLU 2 Linear 3 ReLU 4 Linear
 *            -> 0.weight (A, F), 2.weight (B, A), 4.weight (classes, B)
 *   cnn      0 Conv2d(c,32,5) 1 ReLU 2 MaxPool2d(2) 3 Conv2d(32,64,5) 4 ReLU
 *            5 MaxPool2d(2) 6 Flatten 7 Linear(64*4*4, 512) 8 ReLU 9 Linear
 *            -> 0.weight (32,c,5,5), 3.weight (64,32,5,5), 7.weight (512,1024),
 *               9.weight (classes, 512), each followed by its bias
 * logreg and mlp take the input flattened (c*h*w = F features, no Flatten
 * module, as Sequential applied to x.view(B, -1)); the cnn flattens its
 * (64, 4, 4) maps in (c, h, w) order like nn.Flatten, so state dicts map
 * one to one. Tensors lie back to back in the flat buffer in this order. */
#ifndef FED_MODEL_MODEL_H
#define FED_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"

#define FED_MODEL_SPEC_MAX 128
/* A "g:" spec (a graph, below) may be longer than FED_MODEL_SPEC_MAX: it is
 * then named by its id, "g#" and 32 hex digits of a 128-bit hash of it
 * (two FNV-1a 64: an identity between honest nodes, not a MAC; the graph
 * itself is compared where two must agree), and travels and is stored
 * whole beside the id (the MODEL frame's graph field, a checkpoint's graph
 * section). Every spec's id fits FED_MODEL_SPEC_MAX, so the presets and
 * short graphs are their own id, unchanged. */
#define FED_MODEL_GRAPH_MAX 16384 /* bytes of a "g:" spec with its NUL */

typedef struct fed_model fed_model;

/* One input sample: (c, h, w) values, the number of classes, and how its
 * pixel bytes become floats (fed_model_input_scale; images only). */
typedef struct fed_model_shape {
    int c, h, w;
    int classes;
    int scale; /* FED_MODEL_INPUT_CENTRED (0, the default) or _UNIT */
} fed_model_shape;

/* fed_tensor_info.flags: the tensor is trained (batch norm's running
 * statistics are not: a round averages them by sample weight in a segment
 * of their own, outside the merge strategy), and it may leave the site
 * (sent, merged, exported). FED_TENSOR_INT64: an integer counter kept as a
 * float (num_batches_tracked, an int64 in PyTorch): never averaged, each
 * site and the aggregator keep their own. FED_TENSOR_NORM: a normalization
 * layer's tensor, the class "bn" that --local-bn keeps at the sites. The
 * planner marks every tensor TRAINED | SHARED; a norm layer sets NORM on
 * its tensors and clears TRAINED on its statistics and counter. */
#define FED_TENSOR_TRAINED (1u << 0)
#define FED_TENSOR_SHARED (1u << 1)
#define FED_TENSOR_INT64 (1u << 2)
#define FED_TENSOR_NORM (1u << 3)

typedef struct fed_tensor_info {
    char name[48];   /* "0.weight", "layer1.bn.num_batches_tracked" */
    size_t offset;   /* in floats, into the flat buffer */
    size_t numel;
    int ndim;
    int shape[4];
    unsigned flags;  /* FED_TENSOR_* */
} fed_tensor_info;

/* A pixel byte b enters the model as b * SCALE + SHIFT = b / 127.5 - 1, in
 * [-1, 1] and centred, the same on every node and backend. Centred inputs
 * condition SGD better than [0, 1]: on the reference job (10 IID clients,
 * mlp:256,128, plain SGD lr 0.05, 10 rounds) fedsim's seeds 1-5 end at
 * 0.8325-0.8378 against 0.8146-0.8171 with b / 255. A dataset's own mean and
 * std would need constants every node shares; [-1, 1] needs none. */
#define FED_MODEL_PIXEL_SCALE (2.0f / 255.0f)
#define FED_MODEL_PIXEL_SHIFT (-1.0f)

/* --input-scale: how a model maps pixel bytes, a setting of the model that
 * every site and the export share. CENTRED: b / 127.5 - 1 (above); UNIT:
 * b / 255 in [0, 1], torchvision's ToTensor() alone, as NIID-Bench feeds
 * its images. CSV features are never rescaled. */
typedef enum fed_model_input_scale {
    FED_MODEL_INPUT_CENTRED = 0,
    FED_MODEL_INPUT_UNIT = 1,
} fed_model_input_scale;

/* "centred" or "unit" into *out; FED_ERR_SPEC for anything else. */
FED_WUR fed_err fed_model_input_scale_parse(const char *text, int *out);
/* The name of scale ("centred", "unit"; "?" for no such scale). */
const char *fed_model_input_scale_name(int scale);
/* A byte b of an input of scale enters the model as b * *mul + *add. */
void fed_model_input_map(int scale, float *mul, float *add);

/* A batch on the host: exactly one of x_u8 (images, mapped to [-1, 1], or
 * [0, 1] with the input scale unit, on the device, above) or x_f32 is set, each (n, c*h*w); y (n) holds class labels,
 * or with the loss mse y_f32 (n, nlogits) the targets (y unused). */
typedef struct fed_batch {
    int n;
    const uint8_t *x_u8;
    const float *x_f32;
    const int32_t *y;
    const float *y_f32;
    /* images: (2 c) floats, channel k's byte b enters as b * x_map[2k] +
     * x_map[2k + 1] (the shared statistics, fed_dataset.chan_map) in place
     * of the input scale's map; NULL: the input scale's */
    const float *x_map;
} fed_batch;

typedef struct fed_step_stats {
    double loss_sum; /* summed over samples */
    long correct;
    long samples;
} fed_step_stats;

/* Parse a spec and build the model for inputs of shape in, on backend be.
 * max_batch bounds the batch size (activations are allocated once, here);
 * shards (1..64) > 1 splits each step over pool: every sample's forward and
 * input gradient by rows of the batch, every weight gradient by output rows
 * over the whole batch (so no gradient reduction), CPU only. Results then
 * depend on shards, never on timing or on how many pool threads join.
 * The model does not own be or pool. */
FED_WUR fed_err fed_model_new(const char *spec, fed_model_shape in, fed_backend *be,
                              fed_pool *pool, int shards, int max_batch, fed_model **out);
void fed_model_free(fed_model *m);

/* One node of a model's graph, in topological order: a layer of kind
 * "linear" (out features; takes its input flattened), "conv" (out
 * channels, kernel, stride, padding, dilation), "maxpool" or "avgpool"
 * (kernel, stride, padding at most half the kernel; average pooling counts
 * the padding, as PyTorch's default), "global_avgpool" (each channel's
 * mean, nn.AdaptiveAvgPool2d(1)), "relu" (folded into the linear or
 * conv layer before it), "flatten", or an activation of its own,
 * element-wise as PyTorch's module of the same name with its defaults:
 * "leaky_relu" (slope 0.01), "gelu" (exact), "silu", "sigmoid", "tanh"
 * (computed on the host: a backend without FED_BACKEND_CAP_HOST_MEMORY
 * refuses them by name). A last node "bce" is no layer but the loss:
 * binary cross-entropy with logits on the one logit the layer before it
 * gives, over two classes (host-computed too). name is the module's: its tensors
 * are "<name>.weight" and "<name>.bias" (NULL: the node's index, as
 * nn.Sequential). input is the node whose output it takes, -1 for the
 * model's input: any earlier node (a graph is a DAG in topological order),
 * every node's output but the last taken by a later one, and never from
 * before a relu folded into its layer. "add" (a residual) adds to its
 * input's output that of node other, of the same shape; a relu after it
 * folds in; computed on the host. "concat" takes its input's channels,
 * then node other's, of the same height and width (torch.cat on dim 1).
 * "embedding" (nn.Embedding(num, out), tensor "<name>.weight" (num, out),
 * init N(0, 1)) takes the model's input row and gives the weight row of
 * the id in its column, (out, 1, 1): the input's categorical columns are
 * exactly those the graph's embeddings read; an id that is not an integer
 * in [0, num) is refused at the step (FED_ERR_RANGE, logged with the
 * layer, sample, column and value), never clamped. "numeric" takes the
 * model's input row and gives its other columns, in order, (k, 1, 1).
 * Both take only the model's input, and no other node takes it when a
 * graph has an embedding. The embedding runs on the backend's gather and
 * scatter-add (FED_BACKEND_CAP_EMBED); its gradient is split over the
 * units by weight rows, each walking the batch in order (deterministic).
 * A zero stride is 1 for conv and the kernel for pooling; a zero dilation
 * is 1. [0] is the height's, [1] the width's. The last layer gives the
 * logits. A last node "mse" is the loss mean squared error (MSELoss, the
 * mean over every output) against a batch's float targets, of as many
 * outputs as the last layer gives (the classes unused; host-computed).
 * "layernorm" normalizes all of a sample's c*h*w values (nn.LayerNorm of
 * that shape: weight and bias (c) when h = w = 1, else (c, h, w));
 * "groupnorm" normalizes groups of channels (nn.GroupNorm(groups, c):
 * weight and bias (c)); both eps 1e-5, initialized to 1 and 0, a relu
 * after them folded in. "dropout" zeroes each value with probability
 * drop_ppm / 10^6 while training and scales the rest by 1 / (1 - p)
 * (nn.Dropout), the identity in evaluation; its masks are a hash of the
 * dropout key, the model's training step, the sample's row in the batch
 * and the value's index (fed_model_set_dropout_key), never of the shards
 * or threads. The three need FED_BACKEND_CAP_NORM and
 * FED_BACKEND_CAP_DROPOUT: another backend refuses them by name.
 * "batchnorm" normalizes each channel of its input (c, h, w) over the
 * batch and h w, as BatchNorm2d, or each feature of a (F, 1, 1) input (a
 * linear layer's, a flatten's) as BatchNorm1d: momentum (0: 0.1) and eps
 * (0: 1e-5), weight and bias trained, running_mean, running_var and
 * num_batches_tracked not; training uses the batch's statistics, the
 * evaluation the running ones; a relu after it folds in. It needs
 * FED_BACKEND_CAP_BATCHNORM. */
#define FED_MODEL_MAX_NODES 4096 /* nodes of one graph */
#define FED_MODEL_NAME_MAX 23    /* bytes of a node's name */

/* (A linear node's out 0 is the classes, whatever they are.) */
typedef struct fed_model_node {
    const char *kind;
    const char *name;
    int input;
    int out;
    int kernel[2], stride[2], padding[2], dilation[2];
    int groups; /* conv: groups of channels, dividing both in and out
                   (nn.Conv2d's groups; in channels: depthwise); 0 or 1: one */
    int other;  /* add: the node whose output it adds to its input's (-1: the
                   model's input) */
    double momentum, eps; /* batchnorm: 0 for PyTorch's 0.1 and 1e-5 */
    int no_bias; /* linear, conv: no NAME.bias tensor (PyTorch's bias=False) */
    int column; /* embedding: the input column holding its ids (0-based) */
    int num;    /* embedding: how many ids, [0, num) (nn.Embedding's
                   num_embeddings); out is its dim */
    int drop_ppm; /* dropout: its probability in millionths, 0 to 999999 */
} fed_model_node;

/* The graph as a spec string, what fed_model_new takes and a node sends
 * and stores like any spec: "g:" and the nodes, comma-separated, each
 * [NAME=] and a letter: Lout (linear; no out: the classes), CoutkK[sS][pP]
 * [dD][gG] (conv; G its groups), MkK[sS][pP] (maxpool), AkK[sS][pP] (avgpool), R (relu), F
 * (flatten), B (the loss bce, last), P (global_avgpool), +REF (add the
 * output of node REF: its name, its index if it has none, - the input),
 * &REF (concat node REF's channels), EdimnNUMcCOL (embedding), X (numeric),
 * Q (the loss mse, last),
 * and after any node <REF for an input other than the node before it;
 * b0 after a linear or conv node's other options: no bias (NAME.bias absent);
 * V (layernorm), UgG (groupnorm of G groups), DrR (dropout of R millionths);
 * Y (leaky_relu), G (gelu), S (silu), Z (sigmoid), T (tanh), N[eE][mM]
 * (batchnorm, eps E then momentum M, decimals);
 * K, S, P, D are N or HxW. A node without NAME is named by its
 * index. NIID-Bench's SimpleCNN (examples/models/simplecnn.cfg) is
 * "g:conv1=C6k5,R,Mk2,conv2=C16k5,R,Mk2,F,fc1=L120,R,fc2=L84,R,fc3=L".
 * FED_ERR_TOO_LARGE when it takes FED_MODEL_GRAPH_MAX bytes or cap; a chain
 * only (FED_ERR_UNSUPPORTED), with known kinds and valid names
 * (FED_ERR_SPEC). */
FED_WUR fed_err fed_model_graph_spec(const fed_model_node *nodes, int count, char *spec,
                                     size_t cap);
/* Whether name may name a node: 1 to FED_MODEL_NAME_MAX letters, digits,
 * '_' and '.', not first or last. */
int fed_model_name_ok(const char *name);
/* fed_model_new for a graph of count nodes; label (< FED_MODEL_SPEC_MAX
 * bytes) names it in messages and is what fed_model_spec returns (it is
 * not a spec: such a model cannot be saved or sent as one yet). */
FED_WUR fed_err fed_model_new_graph(const char *label, const fed_model_node *nodes, int count,
                                    fed_model_shape in, fed_backend *be, fed_pool *pool,
                                    int shards, int max_batch, fed_model **out);
/* Check a graph without building anything: its parameter count in
 * *nparams (may be NULL), or what was wrong in why (cap bytes), e.g.
 * "model 'g': node 2 (conv 'c2') on input 8x3x3: the window is larger than
 * the padded input". */
FED_WUR fed_err fed_model_graph_explain(const char *label, const fed_model_node *nodes,
                                        int count, fed_model_shape in, size_t *nparams,
                                        char *why, size_t cap);

/* What planning says of one node: its output per sample (c, h, w; a
 * linear layer's is (out, 1, 1)), its parameters and buffers, and its forward +
 * backward FLOPs per sample (0 for a relu folded into its layer or a
 * flatten; 0 for a view). */
typedef struct fed_model_node_info {
    int c, h, w;
    size_t nparams;  /* trained: what PyTorch counts as parameters */
    size_t nbuffers; /* kept, not trained: batch norm's running statistics */
    double flops;
} fed_model_node_info;
/* fed_model_graph_explain with info (count entries) filled node by node:
 * on failure *planned nodes were planned before the one that failed, so a
 * caller can show the shapes computed up to it. */
FED_WUR fed_err fed_model_graph_shapes(const char *label, const fed_model_node *nodes, int count,
                                       fed_model_shape in, fed_model_node_info *info,
                                       int *planned, char *why, size_t cap);

/* The nodes of spec (a preset, expanded for input in, or a whole "g:"
 * graph; fed_model_graph gives a model's), as fed_model_new_graph takes
 * them: *out holds *count nodes and their names in one block, freed with
 * fed_free. A node the spec leaves unnamed is named by its index; zero
 * strides and dilations stay zero (their defaults). FED_ERR_SPEC (why) for
 * a spec that is none, or a hash ("g#..."). */
FED_WUR fed_err fed_model_spec_nodes(const char *spec, fed_model_shape in, fed_model_node **out,
                                     int *count, char *why, size_t cap);

/* The id of spec (FED_MODEL_SPEC_MAX above): spec itself when shorter
 * than FED_MODEL_SPEC_MAX, else "g#" and its hash. */
void fed_model_spec_id(const char *spec, char id[FED_MODEL_SPEC_MAX]);
/* The hash part of an id, of any spec: "g#" and 32 hex digits (what a
 * mismatch names both models by). */
#define FED_MODEL_HASH_CHARS 35
void fed_model_spec_hash(const char *spec, char hash[FED_MODEL_HASH_CHARS]);
/* Parameters and forward + backward FLOPs per sample a spec gives for
 * input in, without building it (what a client bounds a MODEL frame's
 * graph by), or what was wrong in why (cap bytes). */
FED_WUR fed_err fed_model_spec_cost(const char *spec, fed_model_shape in, size_t *nparams,
                                    double *flops, char *why, size_t cap);
/* Whether a backend whose caps are caps (FED_BACKEND_CAP_*), named backend,
 * runs every layer of spec's graph for input in: FED_OK, else
 * FED_ERR_UNSUPPORTED with the first thing it lacks in why (cap bytes):
 * "layer 'emb_a' (embedding) needs kernels the cuda backend lacks"; a spec
 * that is none: its error, why saying what was wrong. Nothing is logged. */
FED_WUR fed_err fed_model_spec_fits(const char *spec, fed_model_shape in, unsigned caps,
                                    const char *backend, char *why, size_t cap);
/* --device's choice once the model is known: *be was opened for device by
 * fed_backend_open. When *be cannot run spec's graph (fed_model_spec_fits)
 * and device is auto, *be is freed and replaced by the CPU backend, with a
 * warning naming the layer; for any other device FED_ERR_UNSUPPORTED, logged
 * naming the layer. A spec that does not plan is left to fed_model_new to
 * refuse (FED_OK here). */
FED_WUR fed_err fed_model_backend_settle(const char *device, const char *spec,
                                         fed_model_shape in, fed_backend **be);
/* Check a spec string without building anything. */
FED_WUR fed_err fed_model_spec_check(const char *spec, fed_model_shape in);
/* fed_model_spec_check, with what was wrong in why (cap bytes), e.g.
 * "model spec 'mlp:99999999': layer 1 width 99999999 exceeds the limit 65536".
 * Nothing is logged: the caller says it where it fits. */
FED_WUR fed_err fed_model_spec_explain(const char *spec, fed_model_shape in, char *why,
                                       size_t cap);
/* The parameter count a spec gives for inputs of shape in. */
FED_WUR fed_err fed_model_spec_nparams(const char *spec, fed_model_shape in, size_t *nparams);

/* The model's id (fed_model_spec_id), and the whole spec it was built from
 * (the id itself unless a graph longer than FED_MODEL_SPEC_MAX). */
const char *fed_model_spec(const fed_model *m);
const char *fed_model_graph(const fed_model *m);
fed_model_shape fed_model_input(const fed_model *m);
size_t fed_model_nparams(const fed_model *m);
const fed_tensor_info *fed_model_tensors(const fed_model *m, int *count);
/* Whether column col of the input holds ids (an embedding reads it: a
 * categorical column); then *num (may be NULL) gets the fewest ids an
 * embedding of it takes. */
int fed_model_categorical(const fed_model *m, int col, int *num);
/* Sets, then clears, FED_TENSOR_* flags on every tensor whose name matches
 * one of the comma-separated shell globs of pattern (fnmatch: "fc3.*",
 * "conv1.bias,fc?.weight"); returns how many tensors matched. Tests mark
 * a tensor as a norm layer's statistic with it. */
int fed_model_tensor_flags(fed_model *m, const char *pattern, unsigned set, unsigned clear);
/* Whether name matches one of pattern's comma-separated globs. */
int fed_model_tensor_match(const char *pattern, const char *name);
/* Forward + backward FLOPs of one sample (the simulator charges these). */
double fed_model_flops_per_sample(const fed_model *m);
/* Whether m has a dropout layer, and the key its masks are hashed from
 * (the training step count restarts at 0 with it): fed_trainer_steps sets
 * one drawn from its rng, so a run repeats exactly from its seed. */
int fed_model_has_dropout(const fed_model *m);
void fed_model_set_dropout_key(fed_model *m, uint64_t key);
fed_backend *fed_model_backend(const fed_model *m);
/* The pool and shard count given at creation (shards is 1 on a device
 * backend), and the largest batch forward_backward accepts. */
fed_pool *fed_model_pool(const fed_model *m);
int fed_model_shards(const fed_model *m);
int fed_model_max_batch(const fed_model *m);
/* Bytes the model holds on its backend: parameters, gradients and the
 * batch's buffers (DP-SGD's, once made, too). */
size_t fed_model_bytes(const fed_model *m);

/* Gradient checkpointing (--recompute K): from now on the step keeps the
 * output of every K-th layer (of layers [s K, s K + K), segment s, the
 * last), and of any layer a later segment reads, and in the backward runs
 * each segment's forward again, from those, just before its layers'
 * gradients (the last segment's is still whole). The recomputed values are
 * the forward's bit for bit (the same rows per shard, the same dropout
 * step), so gradients are too. The other layers' outputs, output
 * gradients, im2col and argmax buffers share K slots, one per position in
 * a segment, each as large as its largest user. K 1: every output kept, as
 * built. Reallocates the batch's buffers. FED_ERR_INVAL for K < 1;
 * FED_ERR_UNSUPPORTED (logged, naming the layer) for a layer that updates
 * running statistics in its forward (batch norm: a second forward would
 * update them twice), with DP-SGD (fed_model_dp_check refuses a model that
 * recomputes) and off the CPU backend. On FED_ERR_NOMEM the model is back to
 * K 1, or, if even that fails, unusable (free it). */
FED_WUR fed_err fed_model_set_recompute(fed_model *m, int K);
int fed_model_recompute(const fed_model *m);
/* The FLOPs per sample the recomputed forwards add to a step: half of
 * each recomputed layer's forward + weight-gradient count (a linear or
 * conv layer's forward exactly, the others' about). 0 at K 1. */
double fed_model_recompute_flops(const fed_model *m);
/* Bytes of the batch's activation buffers, as allocated (the peak: they
 * are allocated once): every layer's output and output gradient, the
 * im2col buffers of convs (and a norm's per-sample statistics), max
 * pooling's argmax, the gradient scratch gx and each unit's col2im image;
 * not the input staging, the parameters, gradients or DP-SGD's buffers. */
size_t fed_model_activation_bytes(const fed_model *m);

/* --precision: fp32 everywhere, or bf16 GEMMs: every linear and conv
 * product (forward, input and weight gradients) on operands rounded to
 * bfloat16, summed in fp32 (fed_backend_cpu_bf16). The parameters (the
 * master weights), their gradients, the optimizer's state and the delta a
 * node sends stay fp32, and so do the norm layers, the activations'
 * functions, pooling, the embeddings and the loss. */
typedef enum { FED_PRECISION_FP32, FED_PRECISION_BF16 } fed_precision;
/* "fp32" or "bf16"; FED_ERR_SPEC otherwise. */
FED_WUR fed_err fed_model_precision_parse(const char *s, fed_precision *out);
/* From now on m's GEMMs run at p. FED_ERR_UNSUPPORTED with the reason in
 * why (cap bytes): bf16 off the CPU backend, on a CPU without AVX512-BF16
 * (cpuid), or on a model that took DP-SGD steps; fed_model_dp_check refuses
 * DP-SGD on a bf16 model. */
FED_WUR fed_err fed_model_set_precision(fed_model *m, fed_precision p, char *why, size_t cap);
fed_precision fed_model_precision(const fed_model *m);

/* PyTorch's default init (Kaiming-uniform weights, uniform biases), drawn
 * from rng in tensor order: the same seed gives the same parameters. */
FED_WUR fed_err fed_model_init(fed_model *m, fed_rng *rng);

/* Copy parameters to or from the host, (nparams) floats. */
FED_WUR fed_err fed_model_get_params(const fed_model *m, float *dst);
FED_WUR fed_err fed_model_set_params(fed_model *m, const float *src);
/* The device buffers themselves, for backend kernels (optimizers, merging). */
float *fed_model_params_dev(fed_model *m);
float *fed_model_grads_dev(fed_model *m);

/* Forward and backward of one batch (1 <= n <= max_batch): gradients (mean
 * over the batch) are written to the gradient buffer; loss, accuracy and
 * samples are added to st (may be NULL; with mse, correct stays 0 and the
 * loss is each sample's mean squared error). Labels outside [0, classes)
 * give FED_ERR_RANGE, a target that is not finite FED_ERR_NAN; a batch
 * without the labels (or, with mse, the targets) its loss takes
 * FED_ERR_INVAL. */
FED_WUR fed_err fed_model_forward_backward(fed_model *m, const fed_batch *b, fed_step_stats *st);
/* A whole training step: forward_backward, and update(ctx, lo, hi) over
 * ranges [lo, hi) of the flat buffers that together cover every parameter
 * once, each called as soon as its gradients are final and its weights no
 * longer needed (in parallel, so updates must be element-wise). The
 * optimizer's fed_optim_train_step uses it; update NULL is forward_backward. */
typedef void (*fed_model_update_fn)(void *ctx, size_t lo, size_t hi);
FED_WUR fed_err fed_model_train_step(fed_model *m, const fed_batch *b, fed_step_stats *st,
                                     fed_model_update_fn update, void *ctx);
/* DP-SGD's gradient (Abadi et al. 2016) of batch b (0 <= n <= max_batch):
 * each sample's gradient g_i, of its own loss, clipped to L2 norm clip
 * (g_i min(1, clip / |g_i|)), summed, times scale, into the gradient buffer,
 * or added to it when accumulate (a batch in pieces). norms (n floats, may
 * be NULL) gets each |g_i| before clipping. No model copy per sample: a
 * linear layer's per-sample norm is |dy_i| |(x_i, 1)|, a convolution's comes
 * from its per-sample weight gradient (one GEMM per sample, as the batch's
 * own gradient costs), a norm's from its affine gradients, sums over the
 * sample's own values. An empty batch adds nothing (writes zeros). The
 * noise, the sampling and the step are the caller's (model/dp.h,
 * fed_trainer_set_dp). CPU backend only: FED_ERR_UNSUPPORTED elsewhere. */
FED_WUR fed_err fed_model_dp_grads(fed_model *m, const fed_batch *b, float clip, float scale,
                                   int accumulate, float *norms, fed_step_stats *st);
/* Whether DP-SGD can train m: FED_ERR_UNSUPPORTED with the first layer it
 * cannot named in why (cap bytes): batch norm (a sample's gradient depends
 * on its batch), or a trainable layer without DP-SGD's per-sample norm
 * (linear, conv, layernorm and groupnorm have one). fed_trainer_set_dp and
 * fed_model_dp_grads refuse such a model with it. */
FED_WUR fed_err fed_model_dp_check(const fed_model *m, char *why, size_t cap);
/* The logits of one sample: the classes, or 1 with the loss bce, or with
 * mse the last layer's outputs. */
int fed_model_nlogits(const fed_model *m);
/* Forward only of b (1 <= n <= max_batch): its logits, (n, nlogits), into
 * out on the host (what a parity test compares with another framework). */
FED_WUR fed_err fed_model_logits(fed_model *m, const fed_batch *b, float *out);
/* fed_model_logits in training mode, as PyTorch's module after train():
 * batch norm normalizes with the batch's statistics and updates its
 * running ones (a step's forward, without its backward). */
FED_WUR fed_err fed_model_logits_train(fed_model *m, const fed_batch *b, float *out);
/* Forward only, any n >= 1 (run in pieces of max_batch): loss, accuracy and
 * samples added to st. */
FED_WUR fed_err fed_model_evaluate(fed_model *m, const fed_batch *b, fed_step_stats *st);
/* fed_model_evaluate, and each sample's predictions, in double on the
 * host, into prob (b->n * fed_model_predict_width), unless prob is NULL:
 * its class probabilities (the softmax of its logits; with bce (1 - p, p),
 * p the sigmoid of its one logit), or with mse its outputs. */
FED_WUR fed_err fed_model_predict(fed_model *m, const fed_batch *b, fed_step_stats *st,
                                  double *prob);
/* The values fed_model_predict gives a sample: the classes, or with mse
 * the outputs. */
int fed_model_predict_width(const fed_model *m);
/* Whether the loss is mse: its batches carry float targets (y_f32). */
int fed_model_regression(const fed_model *m);

/* ---- pipeline stages (model/pipeline.h: the split and the schedule) ---- */

/* One layer of a spec's plan as a pipeline sees it. */
typedef struct fed_model_layer_cost {
    char name[FED_MODEL_NAME_MAX + 1]; /* its node's */
    char kind[16];
    double flops;      /* forward + backward per sample (fed_model_flops_per_sample's) */
    size_t p_end;      /* floats of the flat buffer up to its end (layers [0, l]'s
                          tensors, batch norm's statistics included) */
    size_t out_numel;  /* its output's values per sample */
    int cut_after;     /* a stage may end after it: every later layer takes its output
                          or a later one's (no residual crosses) */
    int random;        /* it draws masks (dropout) */
} fed_model_layer_cost;
/* The layers of spec for inputs in, in order, into *out (count of them;
 * the caller frees *out with fed_free). */
FED_WUR fed_err fed_model_spec_layers(const char *spec, fed_model_shape in,
                                      fed_model_layer_cost **out, int *count);
/* The tensor table of spec for inputs in (what fed_model_tensors gives of
 * the whole model), without building it: *out (count entries), the
 * caller's to fed_free. */
FED_WUR fed_err fed_model_spec_tensors(const char *spec, fed_model_shape in,
                                       fed_tensor_info **out, int *count);
/* A pipeline stage: layers [lo, hi) of spec's graph, built alone: its
 * parameters (the whole model's floats [p_end(lo - 1), p_end(hi - 1)) in
 * the same order, so stages' buffers laid end to end are the model's),
 * gradients and workspace. A stage after the first takes floats, the
 * output of layer lo - 1 (its shape is the stage's input); a stage before
 * the last ends without a loss, its output's gradient given to the
 * backward. Refused: a cut across a residual (FED_ERR_SPEC, naming the
 * layer), dropout, a backend without host memory (FED_ERR_UNSUPPORTED). */
FED_WUR fed_err fed_model_new_stage(const char *spec, fed_model_shape in, int lo, int hi,
                                    fed_backend *be, fed_pool *pool, int shards, int max_batch,
                                    fed_model **out);
/* The whole graph's layer count, and the stage's [*lo, *hi) of it (a whole
 * model: [0, L)). */
int fed_model_stage_layers(const fed_model *m, int *lo, int *hi);
/* A stage's forward of b (its x the stage's input: the batch for the first
 * stage, the previous stage's output as x_f32 for the others; y the
 * labels): train 1 with the batch's statistics, running statistics left as
 * they are (its backward updates them), 0 in evaluation; its output (n,
 * nlogits) into out (may be NULL). The last stage's loss and accuracy
 * into st (may be NULL). */
FED_WUR fed_err fed_model_stage_forward(fed_model *m, const fed_batch *b, int train, float *out,
                                        fed_step_stats *st);
/* A stage's backward of b: its forward again (running statistics updated
 * now, once), then the gradients: of the stage's output dy (n, nlogits; a
 * stage before the last; NULL for the last, whose loss gives it), into the
 * gradient buffer (the batch's mean, as fed_model_forward_backward) and of
 * the stage's input into dx (n, input values; NULL for the first stage). */
FED_WUR fed_err fed_model_stage_backward(fed_model *m, const fed_batch *b, const float *dy,
                                         float *dx, fed_step_stats *st);

#endif
