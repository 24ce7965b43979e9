/* io.h - the model file (`fednode train --out model.bin`): a model's spec,
 * input shape and parameters, checked end to end. The loader is strict: any
 * byte out of place is an error with its own code, and nothing is allocated
 * for sizes the file has not proven with its length.
 *
 * Layout (all integers little-endian):
 *
 *   offset  size  field
 *   0       8     magic "FEDMODEL"
 *   8       4     version (u32): 1, or 2 with the input scale (below)
 *   12      4     spec length L (u32), 1 <= L < FED_MODEL_GRAPH_MAX (a
 *                 "g:" graph when FED_MODEL_SPEC_MAX or longer: whole, so
 *                 the file builds it)
 *   16      4     input channels c (u32)
 *   20      4     input height h (u32)
 *   24      4     input width w (u32)
 *   28      4     classes (u32)
 *   32      8     nparams N (u64): must equal the spec's count for that shape
 *   40      L     spec string (ASCII, no NUL), e.g. "mlp:256,128"
 *   40+L    4N    parameters, float32 little-endian, in the layout of
 *                 model.h (tensor order, back to back)
 *   40+L+4N 4     CRC-32 (zlib's) of every byte before it
 *
 * Version 2 has one more header field, and everything after it moves 4
 * bytes on:
 *
 *   40      4     input scale (u32): how pixel bytes become floats
 *                 (model.h: FED_MODEL_INPUT_CENTRED 0, FED_MODEL_INPUT_UNIT
 *                 1, train's --input-scale), so eval maps them as training
 *                 did
 *
 * A model of the default scale (centred) is written as version 1, byte for
 * byte as before version 2; version 1 is read as centred. A version 2
 * scale that is neither -> FED_ERR_FORMAT.
 *
 * Errors: shorter than its fields claim -> FED_ERR_TRUNCATED; wrong magic
 * -> FED_ERR_MAGIC; other version -> FED_ERR_VERSION; a spec length out of
 * range -> FED_ERR_TOO_LARGE; bytes after the checksum -> FED_ERR_FORMAT;
 * checksum mismatch -> FED_ERR_CORRUPT; a spec that does not parse ->
 * FED_ERR_SPEC; N not the spec's count -> FED_ERR_SHAPE; a NaN or infinite
 * parameter -> FED_ERR_NAN. */
#ifndef FED_MODEL_IO_H
#define FED_MODEL_IO_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "model/model.h"

#define FED_MODEL_FILE_MAGIC "FEDMODEL"
#define FED_MODEL_FILE_VERSION 2u     /* the newest; 1 is read too */
#define FED_MODEL_FILE_HEADER 40u     /* version 1's */
#define FED_MODEL_FILE_HEADER_V2 44u  /* version 2's: the input scale after version 1's */

/* A parsed model file; params (nparams floats) is owned: free with
 * fed_model_file_fini. */
typedef struct fed_model_file {
    char spec[FED_MODEL_SPEC_MAX]; /* its id (model.h: fed_model_spec_id) */
    char *whole;                   /* the whole spec, what builds it (owned) */
    fed_model_shape shape;
    size_t nparams;
    float *params;
} fed_model_file;

/* Bytes of the file for a model: header + spec + params + checksum. */
size_t fed_model_file_size(const fed_model *m);
/* Serialize m into buf (cap >= fed_model_file_size(m)); *len gets the size. */
FED_WUR fed_err fed_model_file_encode(const fed_model *m, uint8_t *buf, size_t cap, size_t *len);
/* Parse a whole file held in memory (fuzz targets, tests). */
FED_WUR fed_err fed_model_file_parse(const uint8_t *buf, size_t len, fed_model_file *out);
void fed_model_file_fini(fed_model_file *f);

/* Write len bytes to path atomically: PATH.tmp written, synced and renamed
 * over path (removed on failure, logged). */
FED_WUR fed_err fed_model_write_file(const char *path, const void *buf, size_t len);
/* Write m to path atomically (a temporary file renamed over path). */
FED_WUR fed_err fed_model_save(const fed_model *m, const char *path);
/* Read and check path into out. */
FED_WUR fed_err fed_model_file_read(const char *path, fed_model_file *out);
/* Read path and build its model on be (see fed_model_new), parameters set. */
FED_WUR fed_err fed_model_load(const char *path, fed_backend *be, fed_pool *pool, int shards,
                               int max_batch, fed_model **out);

#endif
