/* onnx.h - ONNX files in: a model a PyTorch team exported with
 * torch.onnx.export, read as untrusted input into the layer graph
 * (model/model.h) and its initial weights.
 *
 * The file is protobuf (onnx.proto, compiled at build time from the schema
 * Debian's libonnx-dev ships, read with libprotobuf-c). Reading is bounded:
 * the file at most FED_ONNX_FILE_MAX bytes, what unpacking allocates capped
 * (a counting ProtobufCAllocator), every count, rank and dimension checked
 * before use; tensors stored outside the file (data_location EXTERNAL,
 * which names files on disk) are refused, and no string of the file is
 * ever used as a path.
 *
 * The graph is translated node by node, in the file's order (which ONNX
 * requires to be topological: an input used before it is made is a
 * dangling input or a cycle, and refused). What PyTorch 1.13 writes
 * (opsets 11 to 17) maps onto layers: Conv, Gemm, MatMul then Add,
 * MaxPool and AveragePool (a zero Pad before them folds into their
 * padding), GlobalAveragePool, Relu, LeakyRelu (slope 0.01), Sigmoid, Tanh,
 * Flatten, Add (a residual), Concat (channels), Identity, Constant,
 * Softmax or LogSoftmax last (folded into the loss), and the patterns the
 * exporter writes for what ONNX lacks: GELU (Div, Erf, Add, Mul, Mul), SiLU
 * (Sigmoid, Mul) and a flatten written x.view(x.size(0), -1) (Shape,
 * Gather, Unsqueeze, Concat, Reshape). Anything else is refused with the
 * node's name, its op type and the opset.
 *
 * Tensors are named as PyTorch named them: a layer is named by its weight's
 * initializer ("fc1.weight": layer fc1), or, where the exporter renamed it
 * ("onnx::Conv_38", after folding a batch norm into a convolution), by the
 * node's scope ("/layer1/layer1.0/conv1/Conv": layer1.0.conv1). */
#ifndef FED_ONNX_ONNX_H
#define FED_ONNX_ONNX_H

#include <stddef.h>

#include "core/err.h"
#include "model/model.h"

#define FED_ONNX_FILE_MAX (1ull << 30)   /* bytes of a file */
#define FED_ONNX_OPSET_MIN 11
#define FED_ONNX_OPSET_MAX 17
#define FED_ONNX_NODES_MAX 65536         /* nodes of a graph, shape arithmetic included */

typedef struct fed_onnx fed_onnx;

/* Read and translate the file at path. On failure, what was wrong in why
 * (cap bytes), naming the file and the node: FED_ERR_IO, FED_ERR_TOO_LARGE
 * (the file, or what unpacking would allocate), FED_ERR_FORMAT (not a
 * model, a bad tensor), FED_ERR_UNSUPPORTED (an op, an attribute, an
 * opset, external data), FED_ERR_SPEC (a graph that does not fit: a
 * dangling input, a shape). */
FED_WUR fed_err fed_onnx_load(const char *path, fed_onnx **out, char *why, size_t cap);
/* The same from a buffer; name names it in messages. */
FED_WUR fed_err fed_onnx_parse(const char *name, const void *buf, size_t len, fed_onnx **out,
                               char *why, size_t cap);
void fed_onnx_free(fed_onnx *o);

/* The graph as model.h takes it (valid while o lives), and the input it
 * declares per sample (classes: the last layer's outputs; 2 for one logit). */
const fed_model_node *fed_onnx_nodes(const fed_onnx *o, int *count);
fed_model_shape fed_onnx_input(const fed_onnx *o);
/* Whether the file held the weights (initializers) of every layer. */
int fed_onnx_has_weights(const fed_onnx *o);
/* Notes on what the translation did, one per line (a folded softmax,
 * weights renamed after a folded batch norm), "" when none. */
const char *fed_onnx_notes(const fed_onnx *o);

/* Copy the file's weights into m, a model built from fed_onnx_nodes: each
 * of m's tensors from the initializer of its name. FED_ERR_MODEL_MISMATCH
 * (why: the tensor) when a tensor is missing or of another size. A file
 * without weights leaves m as it is (its own initialization). */
FED_WUR fed_err fed_onnx_apply_weights(const fed_onnx *o, fed_model *m, char *why, size_t cap);

#endif
