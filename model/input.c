/* input.c - a model's declared input (input.h): a model file's [input] and
 * [output] and the options --input-shape, --features and --classes merged
 * into one shape and class count, every contradiction refused with both
 * sides named, and a site's dataset checked against the result. */
#include "model/input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INPUT_MAX_DIM 65536

/* "C,H,W": three counts in 1..INPUT_MAX_DIM. */
static int parse_shape(const char *s, fed_model_shape *out)
{
    long v[3];
    char *end = NULL;

    for (int i = 0; i < 3; i++) {
        if (*s < '0' || *s > '9')
            return 0;
        v[i] = strtol(s, &end, 10);
        if (v[i] < 1 || v[i] > INPUT_MAX_DIM || *end != (i < 2 ? ',' : '\0'))
            return 0;
        s = end + 1;
    }
    out->c = (int)v[0];
    out->h = (int)v[1];
    out->w = (int)v[2];
    return 1;
}

static int same_shape(const fed_model_shape *a, const fed_model_shape *b)
{
    return a->c == b->c && a->h == b->h && a->w == b->w;
}

/* The shape as its declaration reads: N for a row of features. */
static void shape_text(const fed_model_shape *s, char *out, size_t cap)
{
    if (s->c == 1 && s->h == 1)
        snprintf(out, cap, "%d features", s->w);
    else
        snprintf(out, cap, "%d,%d,%d", s->c, s->h, s->w);
}

/* One more declaration of the shape: taken when none came before, else it
 * must agree with the one that did. */
static fed_err add_shape(fed_model_decl *out, const fed_model_shape *s, const char *by,
                         char *why, size_t cap)
{
    char a[48], b[48];

    if (!out->in.c) {
        out->in.c = s->c;
        out->in.h = s->h;
        out->in.w = s->w;
        snprintf(out->shape_by, sizeof out->shape_by, "%s", by);
        return FED_OK;
    }
    if (same_shape(&out->in, s))
        return FED_OK;
    shape_text(&out->in, a, sizeof a);
    shape_text(s, b, sizeof b);
    return fed_err_why(why, cap, FED_ERR_SHAPE,
                       "the input is declared twice and differently: %s by %s, %s by %s", a,
                       out->shape_by, b, by);
}

fed_err fed_model_input_declare(const fed_model_decl_src *src, fed_model_decl *out,
                                char *why, size_t cap)
{
    fed_model_shape s = {0, 0, 0, 0, 0};
    char by[80];
    fed_err e;

    memset(out, 0, sizeof *out);
    if (why && cap)
        why[0] = '\0';
    if (src->file && src->file_in.c) {
        snprintf(by, sizeof by, "%s's [input]", src->file);
        if ((e = add_shape(out, &src->file_in, by, why, cap)) != FED_OK)
            return e;
    }
    if (src->shape && src->shape[0]) {
        if (!parse_shape(src->shape, &s))
            return fed_err_why(why, cap, FED_ERR_BAD_VALUE,
                               "--input-shape '%s': want C,H,W, three counts from 1 to %d "
                               "(e.g. 1,28,28)", src->shape, INPUT_MAX_DIM);
        snprintf(by, sizeof by, "--input-shape %s", src->shape);
        if ((e = add_shape(out, &s, by, why, cap)) != FED_OK)
            return e;
    }
    if (src->features > 0) {
        s = (fed_model_shape){1, 1, src->features, 0, 0};
        snprintf(by, sizeof by, "--features %d", src->features);
        if ((e = add_shape(out, &s, by, why, cap)) != FED_OK)
            return e;
    }
    if (src->file && src->file_in.classes) {
        out->in.classes = src->file_in.classes;
        snprintf(out->classes_by, sizeof out->classes_by, "%s", src->file);
    }
    if (src->classes > 0) {
        if (out->in.classes && out->in.classes != src->classes)
            return fed_err_why(why, cap, FED_ERR_SHAPE,
                               "--classes %d contradicts %s, whose model has %d classes",
                               src->classes, out->classes_by, out->in.classes);
        out->in.classes = src->classes;
        snprintf(out->classes_by, sizeof out->classes_by, "--classes %d", src->classes);
    }
    return FED_OK;
}

int fed_model_input_complete(const fed_model_decl *decl)
{
    return decl->in.c > 0 && decl->in.classes > 0;
}

fed_err fed_model_input_fit(fed_dataset *d, const fed_model_decl *decl, const char *what,
                            char *why, size_t cap)
{
    int32_t top = 0;
    size_t over = 0;

    if (why && cap)
        why[0] = '\0';
    if (decl->in.c && !same_shape(&decl->in, &d->shape)) {
        char a[48], b[48];

        shape_text(&decl->in, a, sizeof a);
        shape_text(&d->shape, b, sizeof b);
        return fed_err_why(why, cap, FED_ERR_SHAPE,
                           "%s does not fit the declared input: %s declares %s, the data has "
                           "%s%s", what, decl->shape_by, a, b,
                           d->x_f32 ? " (columns besides the label)" : " per sample");
    }
    if (!decl->in.classes)
        return FED_OK;
    for (size_t i = 0; i < d->n; i++) {
        if (d->y[i] > top)
            top = d->y[i];
        if (d->y[i] >= decl->in.classes)
            over++;
    }
    if (over)
        return fed_err_why(why, cap, FED_ERR_RANGE,
                           "%s does not fit the declared classes: %s declares %d (labels 0 to "
                           "%d), the data has %zu sample%s labelled %d or more, the largest "
                           "label %d", what, decl->classes_by, decl->in.classes,
                           decl->in.classes - 1, over, over == 1 ? "" : "s", decl->in.classes,
                           (int)top);
    d->shape.classes = decl->in.classes;
    return FED_OK;
}
