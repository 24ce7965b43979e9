/* codec.h - delta codecs for a flat vector: f32, f64, f16, q8, topk.
 * Every encoding starts with a 16-byte header, all little-endian:
 *   off  size  field
 *     0     1  codec id (fed_codec_id)
 *     1     1  version = 1
 *     2     2  reserved, zero
 *     4     4  param: q8 block size (256), topk k (entries sent), else 0
 *     8     8  n, the vector's length
 *    16        body:
 *   f32   n x f32
 *   f64   n x f64 (push-sum's mixing state, kept in double)
 *   f16   n x IEEE binary16, rounded to nearest even
 *   q8    for each block of 256 entries (the last may be shorter):
 *         scale f32, then one int8 q per entry in [-127, 127]; x = q * scale
 *   topk  k x u32 indices, strictly increasing, each < n; then k x f32 values
 * Error bounds (tested): f16: |x' - x| <= max(2^-11 |x|, 2^-25) (half an ulp
 * of binary16; values over 65504 in magnitude are refused); q8: per block with
 * m = max |x|, |x' - x| <= m / 254 * (1 + 2^-12) when m >= 2^-100 (blocks
 * below that are sent as zero: |x' - x| <= m).
 * topk with error feedback: the sender keeps a residual r. Each call forms
 * a = fl(x + r), sends the k largest |a| (ties go to the lower index), keeps
 * as r' the exact rounding error of a on those (TwoSum, so sent + r' == x + r
 * exactly) and r' = a on the rest: no mass is lost except the rounding of
 * x + r on entries not sent, and none at all while x + r is exact in float.
 * Decoders reject NaN and infinities (FED_ERR_NAN), and a wrong codec,
 * version, length, n, block size, q8 code -128, or out-of-range, repeated or
 * unsorted topk index (FED_ERR_CODEC). */
#ifndef FED_MODEL_CODEC_H
#define FED_MODEL_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef enum fed_codec_id {
    FED_CODEC_NONE = 0, /* no vector */
    FED_CODEC_F32 = 1,
    FED_CODEC_F64 = 2,
    FED_CODEC_F16 = 3,
    FED_CODEC_Q8 = 4,
    FED_CODEC_TOPK = 5,
    FED_CODEC_COUNT_
} fed_codec_id;

typedef struct fed_codec {
    fed_codec_id id;
    float fraction; /* topk: share of entries sent, in (0, 1] */
} fed_codec;

#define FED_CODEC_HEADER_BYTES 16
#define FED_CODEC_VERSION 1
#define FED_CODEC_Q8_BLOCK 256

/* "f32", "f64", "f16", "q8", "topk:FRACTION". FED_ERR_BAD_VALUE otherwise. */
FED_WUR fed_err fed_codec_parse(const char *text, fed_codec *out);
/* The text fed_codec_parse takes back, into buf (cap bytes); returns snprintf's count. */
int fed_codec_format(const fed_codec *c, char *buf, size_t cap);
const char *fed_codec_name(fed_codec_id id);

/* topk's k for n entries: ceil(fraction * n) (with a relative slack of 1e-6
 * for fractions that passed through a float), at least 1 when n > 0. */
size_t fed_codec_topk_k(float fraction, size_t n);
/* The exact encoded size of n entries. FED_ERR_RANGE: too large (topk: n
 * over 2^32 - 1); FED_ERR_INVAL: not an encodable codec. */
FED_WUR fed_err fed_codec_size(const fed_codec *c, size_t n, size_t *bytes);

/* Encodes x (n) into out (cap bytes; *len gets the size). f64 widens.
 * residual (n, topk only, may be NULL: no error feedback) is read and
 * updated as above. FED_ERR_NAN: a NaN or infinity in x (or x + residual);
 * FED_ERR_RANGE: f16 over 65504, q8 over 1e38; FED_ERR_TOO_LARGE: cap too
 * small; FED_ERR_NOMEM (topk's histograms). Nothing is changed on error. */
FED_WUR fed_err fed_codec_encode(const fed_codec *c, const float *x, size_t n, float *residual,
                                 uint8_t *out, size_t cap, size_t *len);
/* f64 from doubles. */
FED_WUR fed_err fed_codec_encode_f64(const double *x, size_t n, uint8_t *out, size_t cap,
                                     size_t *len);

/* Decodes in (len bytes) into x (n entries; unspecified on error). The
 * encoding must be codec expect (FED_CODEC_NONE: any) and hold exactly n
 * entries. f64 narrows to float (FED_ERR_RANGE when a value does not fit). */
FED_WUR fed_err fed_codec_decode(const uint8_t *in, size_t len, fed_codec_id expect, float *x,
                                 size_t n);
/* f64 only, into doubles. */
FED_WUR fed_err fed_codec_decode_f64(const uint8_t *in, size_t len, double *x, size_t n);
/* The codec and length an encoding's header names (header checks only). */
FED_WUR fed_err fed_codec_peek(const uint8_t *in, size_t len, fed_codec_id *id, uint64_t *n);

#endif
