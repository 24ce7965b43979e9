/* onnx_write.h - a trained model out as an .onnx inference graph that
 * ONNX tools and PyTorch read (fednode export --format onnx).
 *
 * The graph is the model's own (fed_model_graph, read back into nodes with
 * fed_model_spec_nodes), written at opset FED_ONNX_WRITE_OPSET: one ONNX op
 * (or the exporter's pattern) per layer, in order; initializers named as
 * the model names its tensors, which are PyTorch's state-dict names
 * ("conv1.weight", "fc3.bias"); the input "input" (batch, C, H, W), or
 * (batch, features) for a CSV model; the output "logits" (batch, classes):
 * no softmax added, a bce or mse loss dropped (its logit or outputs out),
 * dropout removed (the identity at inference). How the input is fed
 * (pixel scale and shift, the shared CSV statistics) goes into
 * metadata_props under the keys the safetensors export writes
 * (fed_store_safetensors_metadata). The file imports again with
 * fed_onnx_load into the same function with the same weights, bit for bit.
 *
 * Layers without an ONNX form here yet (embedding, numeric, layernorm,
 * groupnorm) are refused by name, FED_ERR_UNSUPPORTED. */
#ifndef FED_ONNX_ONNX_WRITE_H
#define FED_ONNX_ONNX_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "model/model.h"
#include "model/safetensors.h"

#define FED_ONNX_WRITE_OPSET 14
#define FED_ONNX_WRITE_IR 7 /* the IR version of opset 14 (ONNX 1.9) */

/* m as an ONNX model into *out (*len bytes; fed_free it): its graph and
 * input, the weights meta->params holds under meta->t's names, meta's
 * metadata. What was wrong in why (cap bytes): FED_ERR_UNSUPPORTED (a
 * layer), FED_ERR_MODEL_MISMATCH (a tensor the graph takes that meta
 * lacks, or one it has left over), FED_ERR_SPEC (a model without its whole
 * graph). */
FED_WUR fed_err fed_onnx_encode(const fed_model *m, const fed_store_st_model *meta, uint8_t **out,
                                size_t *len, char *why, size_t cap);
/* fed_onnx_encode written to path atomically (model/io.h). */
FED_WUR fed_err fed_onnx_save(const char *path, const fed_model *m,
                              const fed_store_st_model *meta, char *why, size_t cap);

#endif
