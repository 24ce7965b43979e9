/* safetensors.h - export a model's parameters as a .safetensors file that
 * PyTorch and friends load directly, and import one back, strictly.
 *
 * The format is Hugging Face's (it has no magic of its own; the length and
 * the JSON are its signature):
 *
 *   offset  size  field
 *   0       8     N: header length (u64 little-endian), 2 <= N <= 100 MiB
 *   8       N     JSON header, UTF-8, padded with spaces to a multiple of 8:
 *                 {"__metadata__":{"fednode.spec":"mlp:256,128",
 *                                  "fednode.input":"1,28,28","fednode.classes":"10",
 *                                  "fednode.input_dtype":"uint8",
 *                                  "fednode.input_scale":"0.0078431372549019607",
 *                                  "fednode.input_shift":"-1",
 *                                  "fednode.input_transform":"x = byte / 127.5 - 1 ..."},
 *                  "0.weight":{"dtype":"F32","shape":[256,784],
 *                              "data_offsets":[0,802816]}, ...}
 *   8+N     ...   data: each tensor's elements, row-major, little-endian,
 *                 at [begin, end) of data_offsets (relative to 8+N)
 *
 * Tensors are named and shaped as fed_model_tensors() reports (PyTorch
 * nn.Sequential state-dict names: "0.weight" (out, in), conv (out, in, kh, kw)),
 * dtype F32 (I64 for a FED_TENSOR_INT64 count: batch norm's
 * num_batches_tracked, a 0-dimensional tensor), written in table order,
 * back to back.
 *
 * The importer is strict: a hand-written, bounded JSON parser (no external
 * library); every tensor needs exactly dtype, shape and data_offsets; names
 * unique; the tensors must tile the data exactly (no gaps, no overlaps, none
 * out of range) and each size must equal its shape times 4 (8 for I64).
 * Malformed JSON or layout -> FED_ERR_FORMAT; N over the limit ->
 * FED_ERR_TOO_LARGE; fewer bytes than N or the offsets claim ->
 * FED_ERR_TRUNCATED; a dtype other than F32 or I64 -> FED_ERR_UNSUPPORTED.
 * Matching against a model's table: a missing, extra or differently shaped
 * tensor, or an I64 where the model has no count (or the reverse) ->
 * FED_ERR_SHAPE; a spec that differs
 * -> FED_ERR_SPEC; a NaN or infinity -> FED_ERR_NAN. A layout refusal is
 * logged with the file (or "safetensors" for a buffer), the tensor and its
 * offsets, e.g. "x.safetensors: tensor '0.weight': data_offsets [0, 999999]
 * past the data section (4096 bytes)". */
#ifndef FED_MODEL_SAFETENSORS_H
#define FED_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "model/model.h" /* fed_tensor_info, FED_MODEL_SPEC_MAX: the type only */

#define FED_ST_HEADER_MAX (100u << 20)
#define FED_ST_MAX_TENSORS 4096
#define FED_ST_MAX_DIMS 8
#define FED_ST_NAME_MAX 128
#define FED_ST_MAX_DEPTH 3 /* header object > tensor object > shape array */

/* What to export: a tensor table over a flat float buffer. */
typedef struct fed_store_st_model {
    const char *spec;           /* model spec, written as "fednode.spec"; may be NULL */
    fed_model_shape input;      /* written as "fednode.input"/"classes" when classes > 0 */
    const fed_tensor_info *t;   /* (nt) tensors; offsets in floats into params */
    int nt;
    const float *params;
    /* How the input is fed (needs classes > 0), so a user of the file feeds
     * it as training did: FED_ST_INPUT_PIXELS, pixel bytes mapped as
     * input.scale says (fed_model_input_map: centred, FED_MODEL_PIXEL_SCALE
     * and FED_MODEL_PIXEL_SHIFT; unit, 1/255 and 0)
     * ("fednode.input_dtype" uint8, "fednode.input_scale", "fednode.input_shift"
     * and the "fednode.input_transform" text); FED_ST_INPUT_STANDARDIZED, CSV
     * features standardized with the training file's statistics (the text
     * only); FED_ST_INPUT_UNSAID (0): no keys. The importer reads back
     * only the input scale ("fednode.input_scale": unit's 1/255, else
     * centred) into its input.scale, and ignores the rest. */
    int input_kind;
    /* With FED_ST_INPUT_STANDARDIZED: the federation's shared statistics
     * (model/colstats.h), one mean and std per feature, written as
     * "fednode.input_mean" and "fednode.input_std" (comma-separated,
     * %.17g: read back exactly); NULL: the training file's own (the text
     * says so). With FED_ST_INPUT_PIXELS: one per channel, of the bytes
     * 0..255 (x = (byte - mean) / std in place of the input scale's map),
     * written likewise and marked "fednode.input_stats" = "channel"; NULL:
     * the input scale's map alone. */
    const double *stats_mean, *stats_std;
    size_t stats_cols;
    const double *stats_missing; /* each feature's missing rate, written as
                                    "fednode.input_missing_rate" (the importer
                                    ignores it); NULL: not written */
} fed_store_st_model;

enum { FED_ST_INPUT_UNSAID = 0, FED_ST_INPUT_PIXELS = 1, FED_ST_INPUT_STANDARDIZED = 2 };

typedef struct fed_store_st_tensor {
    char name[FED_ST_NAME_MAX];
    int ndim;
    uint64_t shape[FED_ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets into data */
    int i64;             /* dtype I64 (else F32) */
} fed_store_st_tensor;

/* A parsed file. Free with fed_store_safetensors_fini. */
typedef struct fed_store_st_file {
    char spec[FED_MODEL_SPEC_MAX];  /* "" when the metadata has none */
    fed_model_shape input;          /* zeros when absent; scale from
                                       "fednode.input_scale" (centred without) */
    double *stats_mean, *stats_std; /* (stats_cols, owned) "fednode.input_mean" and
                                       "_std" when the file has both (the same
                                       count, finite, std > 0); NULL without */
    size_t stats_cols;
    size_t ntensors;
    fed_store_st_tensor *tensors;   /* owned, in file (header) order */
    const uint8_t *data;            /* into the parsed bytes */
    size_t data_len;
    uint8_t *owned;                 /* the file's bytes, when read from a path */
} fed_store_st_file;

/* The metadata m's file carries, key by key in file order: put(ctx, key,
 * value) for "fednode.spec" (when m has one), then with classes > 0
 * "fednode.input", "fednode.classes" and how the input is fed (input_kind
 * above). FED_ERR_NOMEM when a value could not be built. The ONNX export
 * (onnx/onnx_write.h) writes the same entries as its metadata_props. */
typedef void (*fed_store_st_meta_fn)(void *ctx, const char *key, const char *value);
FED_WUR fed_err fed_store_safetensors_metadata(const fed_store_st_model *m,
                                               fed_store_st_meta_fn put, void *ctx);

/* The exact file size for m (header padded, data). */
FED_WUR fed_err fed_store_safetensors_size(const fed_store_st_model *m, size_t *len);
/* Encode m into a new buffer (*out freed with fed_free). */
FED_WUR fed_err fed_store_safetensors_encode(const fed_store_st_model *m, uint8_t **out,
                                             size_t *len);
/* Write m to path atomically (a temporary file, fsync, rename). */
FED_WUR fed_err fed_store_safetensors_save(const char *path, const fed_store_st_model *m);

/* Parse bytes held by the caller (kept alive while out is used). */
FED_WUR fed_err fed_store_safetensors_parse(const uint8_t *buf, size_t len,
                                            fed_store_st_file *out);
/* Read and parse a file; out owns the bytes. */
FED_WUR fed_err fed_store_safetensors_read(const char *path, fed_store_st_file *out);
void fed_store_safetensors_fini(fed_store_st_file *f); /* zeroed or finished: fine */

/* Copy f's tensors into params (nparams floats laid out by t), requiring
 * the same set of names and shapes; spec (may be NULL) must equal f's when
 * f names one. On failure params is left partly written. */
FED_WUR fed_err fed_store_safetensors_to_params(const fed_store_st_file *f,
                                                const fed_tensor_info *t, int nt,
                                                const char *spec, float *params);

#endif
