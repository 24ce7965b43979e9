/* model.h - a model is one flat float32 parameter buffer, one gradient buffer
 * of the same layout, and a list of layers that read and write slices of them
 * (llm.c's shape). Layers are plain forward/backward pairs over the backend
 * table; the CPU backend splits a batch into shards run on the core pool.
 *
 * Spec strings:  logreg            linear in -> classes
 *                mlp:256,128       linear -> ReLU per hidden width, then classes
 *                cnn               conv5x5x32 -> ReLU -> maxpool2 -> conv5x5x64
 *                                  -> ReLU -> maxpool2 -> fc512 -> ReLU -> fc classes
 * Tensors are named and shaped as PyTorch's nn.Sequential of the same layers:
 * "0.weight" (out, in), "0.bias" (out); conv weights (out, in, kh, kw). */
#ifndef FED_MODEL_MODEL_H
#define FED_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"

#define FED_MODEL_SPEC_MAX 128
#define FED_MODEL_MAX_TENSORS 32

typedef struct fed_model fed_model;

/* One input sample: (c, h, w) values, and the number of classes. */
typedef struct fed_model_shape {
    int c, h, w;
    int classes;
} fed_model_shape;

typedef struct fed_tensor_info {
    char name[32];   /* "0.weight" */
    size_t offset;   /* in floats, into the flat buffer */
    size_t numel;
    int ndim;
    int shape[4];
} fed_tensor_info;

/* A batch on the host: exactly one of x_u8 (images, scaled by 1/255 on the
 * device) or x_f32 is set, each (n, c*h*w); y (n) holds class labels. */
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
 * shards > 1 splits each batch over pool (CPU only; results then depend on
 * shards, never on timing). The model does not own be or pool. */
FED_WUR fed_err fed_model_new(const char *spec, fed_model_shape in, fed_backend *be,
                              fed_pool *pool, int shards, int max_batch, fed_model **out);
void fed_model_free(fed_model *m);

/* Check a spec string without building anything. */
FED_WUR fed_err fed_model_spec_check(const char *spec, fed_model_shape in);

const char *fed_model_spec(const fed_model *m);
fed_model_shape fed_model_input(const fed_model *m);
size_t fed_model_nparams(const fed_model *m);
const fed_tensor_info *fed_model_tensors(const fed_model *m, int *count);
/* Forward + backward FLOPs of one sample (the simulator charges these). */
double fed_model_flops_per_sample(const fed_model *m);
fed_backend *fed_model_backend(const fed_model *m);

/* PyTorch's default init (Kaiming-uniform weights, uniform biases), drawn
 * from rng in tensor order: the same seed gives the same parameters. */
FED_WUR fed_err fed_model_init(fed_model *m, fed_rng *rng);

/* Copy parameters to or from the host, (nparams) floats. */
FED_WUR fed_err fed_model_get_params(const fed_model *m, float *dst);
FED_WUR fed_err fed_model_set_params(fed_model *m, const float *src);
/* The device buffers themselves, for backend kernels (optimizers, merging). */
float *fed_model_params_dev(fed_model *m);
float *fed_model_grads_dev(fed_model *m);

/* Forward and backward of one batch: gradients (mean over the batch) are
 * written to the gradient buffer; stats get loss and accuracy. */
FED_WUR fed_err fed_model_forward_backward(fed_model *m, const fed_batch *b, fed_step_stats *st);
/* Forward only: loss and accuracy added to st. */
FED_WUR fed_err fed_model_evaluate(fed_model *m, const fed_batch *b, fed_step_stats *st);

#endif
