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

/* One input sample: (c, h, w) values, and the number of classes. */
typedef struct fed_model_shape {
    int c, h, w;
    int classes;
} fed_model_shape;

/* fed_tensor_info.flags: the tensor is trained (batch norm's running
 * statistics and counter are not: no optimizer touches them, their
 * gradients stay 0), and it may leave the site (sent, merged, exported);
 * every tensor is shared today. FED_TENSOR_INT64: a count kept as a float
 * (exact to 2^24), an int64 in PyTorch (num_batches_tracked): .safetensors
 * files carry it as I64. */
#define FED_TENSOR_TRAINED (1u << 0)
#define FED_TENSOR_SHARED (1u << 1)
#define FED_TENSOR_INT64 (1u << 2)

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

/* A batch on the host: exactly one of x_u8 (images, mapped to [-1, 1] on the
 * device, above) or x_f32 is set, each (n, c*h*w); y (n) holds class labels. */
typedef struct fed_batch {
    int n;
    const uint8_t *x_u8;
    const float *x_f32;
    const int32_t *y;
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
 * "batchnorm" normalizes each channel of its input (c, h, w) over the
 * batch and h w, as BatchNorm2d, or each feature of a (F, 1, 1) input (a
 * linear layer's, a flatten's) as BatchNorm1d: momentum (0: 0.1) and eps
 * (0: 1e-5), weight and bias trained, running_mean, running_var and
 * num_batches_tracked not; training uses the batch's statistics, the
 * evaluation the running ones; a relu after it folds in.
 * A zero stride
 * is 1 for conv and the kernel for pooling; a zero dilation is 1. [0] is
 * the height's, [1] the width's. The last layer gives the logits. */
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
} fed_model_node;

/* The graph as a spec string, what fed_model_new takes and a node sends
 * and stores like any spec: "g:" and the nodes, comma-separated, each
 * [NAME=] and a letter: Lout (linear; no out: the classes), CoutkK[sS][pP]
 * [dD][gG] (conv; G its groups), MkK[sS][pP] (maxpool), AkK[sS][pP] (avgpool), R (relu), F
 * (flatten), B (the loss bce, last), P (global_avgpool), +REF (add the
 * output of node REF: its name, its index if it has none, - the input),
 * &REF (concat node REF's channels),
 * and after any node <REF for an input other than the node before it;
 * b0 after a linear or conv node's other options: no bias (NAME.bias absent);
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
/* Forward + backward FLOPs of one sample (the simulator charges these). */
double fed_model_flops_per_sample(const fed_model *m);
fed_backend *fed_model_backend(const fed_model *m);
/* The pool and shard count given at creation (shards is 1 on a device
 * backend), and the largest batch forward_backward accepts. */
fed_pool *fed_model_pool(const fed_model *m);
int fed_model_shards(const fed_model *m);
int fed_model_max_batch(const fed_model *m);
/* Bytes the model holds on its backend: parameters, gradients and the
 * batch's buffers (DP-SGD's, once made, too). */
size_t fed_model_bytes(const fed_model *m);

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
 * samples are added to st (may be NULL). Labels outside [0, classes) give
 * FED_ERR_RANGE. */
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
 * own gradient costs). An empty batch adds nothing (writes zeros). The
 * noise, the sampling and the step are the caller's (model/dp.h,
 * fed_trainer_set_dp). CPU backend only: FED_ERR_UNSUPPORTED elsewhere. */
FED_WUR fed_err fed_model_dp_grads(fed_model *m, const fed_batch *b, float clip, float scale,
                                   int accumulate, float *norms, fed_step_stats *st);
/* The logits of one sample: the classes, or 1 with the loss bce. */
int fed_model_nlogits(const fed_model *m);
/* Forward only of b (1 <= n <= max_batch): its logits, (n, nlogits), into
 * out on the host (what a parity test compares with another framework). */
FED_WUR fed_err fed_model_logits(fed_model *m, const fed_batch *b, float *out);
/* fed_model_logits in training mode, as PyTorch's module after train():
 * batch norm normalizes with the batch's statistics and updates its
 * running ones (a step's forward, without its backward). */
FED_WUR fed_err fed_model_logits_train(fed_model *m, const fed_batch *b, float *out);
/* Whether DP-SGD can train m: FED_ERR_UNSUPPORTED naming the first layer
 * it cannot (batch norm: a sample's gradient depends on its batch) in why
 * (cap bytes), or no per-sample norm on m's backend. */
FED_WUR fed_err fed_model_dp_check(const fed_model *m, char *why, size_t cap);
/* Forward only, any n >= 1 (run in pieces of max_batch): loss, accuracy and
 * samples added to st. */
FED_WUR fed_err fed_model_evaluate(fed_model *m, const fed_batch *b, fed_step_stats *st);
/* fed_model_evaluate, and each sample's class probabilities (the softmax
 * of its logits, in double on the host) into prob (b->n * classes), unless
 * prob is NULL. */
FED_WUR fed_err fed_model_predict(fed_model *m, const fed_batch *b, fed_step_stats *st,
                                  double *prob);

#endif
