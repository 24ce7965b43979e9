/* input.h - a model's declared input: the sample shape and the number of
 * classes a federation agrees on before anyone loads data, from a model
 * file's [input] and [output] sections or from options (--input-shape
 * C,H,W, --features N, --classes K). Two declarations that differ are an
 * error naming both; a site's data is checked against the result (its
 * shape equal, every label below the classes), and takes its classes, so
 * a site holding fewer classes than declared builds the same model. */
#ifndef FED_MODEL_INPUT_H
#define FED_MODEL_INPUT_H

#include <stddef.h>

#include "core/err.h"
#include "model/data.h"
#include "model/model.h"

/* Whatever declares the input; each part absent when 0, NULL or "". */
typedef struct fed_model_decl_src {
    const char *file;        /* the model file's name (NULL: a preset spec) */
    fed_model_shape file_in; /* its [input] (c, h, w) and the classes it fixes (0: none) */
    const char *shape;       /* --input-shape "C,H,W" */
    int features;            /* --features N: shape 1,1,N */
    int classes;             /* --classes K */
} fed_model_decl_src;

/* The declared input, and who declared each part (for messages). */
typedef struct fed_model_decl {
    fed_model_shape in;  /* c, h, w 0 when undeclared; classes 0 when undeclared */
    char shape_by[80];   /* e.g. "--features 30" or "net.cfg's [input]" */
    char classes_by[80]; /* e.g. "--classes 2" or "net.cfg's [output]" */
} fed_model_decl;

/* Resolves src into *out. FED_ERR_BAD_VALUE for an --input-shape that is
 * not three counts C,H,W (1..65536 each); FED_ERR_SHAPE when two sources
 * declare different shapes or classes. why (cap bytes) names both values
 * and their sources. Nothing is logged. */
FED_WUR fed_err fed_model_input_declare(const fed_model_decl_src *src, fed_model_decl *out,
                                        char *why, size_t cap);

/* Whether dataset d (named what in messages) fits decl: its sample shape
 * is decl's (when declared) and every label lies below decl's classes
 * (when declared), which then become d's classes, whatever its own largest
 * label says. FED_ERR_SHAPE (the shape) or FED_ERR_RANGE (a label) with
 * why saying what was declared, by whom, and what the data holds. */
FED_WUR fed_err fed_model_input_fit(fed_dataset *d, const fed_model_decl *decl,
                                    const char *what, char *why, size_t cap);

/* Whether decl declares both the shape and the classes. */
int fed_model_input_complete(const fed_model_decl *decl);

#endif
