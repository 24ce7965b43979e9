/* ckpt_model.c - the model sections of a checkpoint (formats and why here
 * in ckpt_model.h): encodes spec, input shape and parameters for a writer,
 * decodes and checks them for a reader. Owns nothing; the views it returns
 * point into the caller's checkpoint. Never trusts a section's length. */
#include "node/ckpt_model.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"

void fed_node_model_sec_encode(fed_node_model_sec *out, const char *spec, fed_model_shape shape,
                               const void *params_le, size_t nparams)
{
    fed_put_u32le(out->input, (uint32_t)shape.c);
    fed_put_u32le(out->input + 4, (uint32_t)shape.h);
    fed_put_u32le(out->input + 8, (uint32_t)shape.w);
    fed_put_u32le(out->input + 12, (uint32_t)shape.classes);
    fed_put_u32le(out->input + 16, (uint32_t)shape.scale);
    out->s[0] = (fed_store_section){FED_CKPT_SEC_SPEC, spec, strlen(spec)};
    out->s[1] = (fed_store_section){FED_CKPT_SEC_INPUT, out->input,
                                    shape.scale ? FED_NODE_INPUT_SCALED_BYTES
                                                : FED_NODE_INPUT_BYTES};
    out->s[2] = (fed_store_section){FED_CKPT_SEC_PARAMS, params_le, nparams * sizeof(float)};
}

fed_err fed_node_model_params_le(const fed_model *m, uint8_t **out, size_t *len)
{
    size_t n = fed_model_nparams(m);
    float *p = fed_malloc(n ? n * sizeof *p : 1);
    fed_err e;

    *out = NULL;
    *len = 0;
    if (!p)
        return FED_ERR_NOMEM;
    if ((e = fed_model_get_params(m, p)) != FED_OK) {
        fed_free(p);
        return e;
    }
    fed_put_f32le_n((uint8_t *)p, p, n); /* in place */
    *out = (uint8_t *)p;
    *len = n * sizeof *p;
    return FED_OK;
}

fed_err fed_node_model_sec_decode(const fed_store_ckpt *c, fed_node_model_view *out)
{
    const fed_store_section *spec = fed_store_ckpt_find(c, FED_CKPT_SEC_SPEC);
    const fed_store_section *in = fed_store_ckpt_find(c, FED_CKPT_SEC_INPUT);
    const fed_store_section *par = fed_store_ckpt_find(c, FED_CKPT_SEC_PARAMS);
    uint32_t dim[4], scale = 0;
    int graph;

    memset(out, 0, sizeof *out);
    if (!spec || !in || !par)
        return FED_ERR_NOTFOUND;
    graph = spec->len >= sizeof out->spec && spec->len < FED_MODEL_GRAPH_MAX &&
            memcmp(spec->data, "g:", 2) == 0;
    if (spec->len == 0 || (spec->len >= sizeof out->spec && !graph) ||
        memchr(spec->data, '\0', spec->len) ||
        (in->len != FED_NODE_INPUT_BYTES && in->len != FED_NODE_INPUT_SCALED_BYTES) ||
        par->len % sizeof(float) != 0)
        return FED_ERR_FORMAT;
    if (in->len == FED_NODE_INPUT_SCALED_BYTES &&
        (scale = fed_get_u32le((const uint8_t *)in->data + 16)) != FED_MODEL_INPUT_UNIT)
        return FED_ERR_FORMAT; /* centred is written as 16 bytes */
    for (int i = 0; i < 4; i++)
        if ((dim[i] = fed_get_u32le((const uint8_t *)in->data + 4 * i)) > INT_MAX)
            return FED_ERR_SHAPE;
    if (graph) {
        char *whole = fed_malloc(spec->len + 1);

        if (!whole)
            return FED_ERR_NOMEM;
        memcpy(whole, spec->data, spec->len);
        whole[spec->len] = '\0';
        fed_model_spec_id(whole, out->spec);
        fed_free(whole);
        out->graph = (const char *)spec->data;
        out->graph_len = spec->len;
    } else {
        memcpy(out->spec, spec->data, spec->len);
    }
    out->shape.c = (int)dim[0];
    out->shape.h = (int)dim[1];
    out->shape.w = (int)dim[2];
    out->shape.classes = (int)dim[3];
    out->shape.scale = (int)scale;
    out->params = par->data;
    out->nparams = par->len / sizeof(float);
    return FED_OK;
}

fed_err fed_node_model_view_whole(const fed_node_model_view *v, char **out)
{
    const char *src = v->graph ? v->graph : v->spec;
    size_t len = v->graph ? v->graph_len : strlen(v->spec);

    if (!(*out = fed_malloc(len + 1)))
        return FED_ERR_NOMEM;
    memcpy(*out, src, len);
    (*out)[len] = '\0';
    return FED_OK;
}

fed_err fed_node_model_view_match(const fed_node_model_view *v, const char *who,
                                  uint64_t ckpt_id, const char *spec, fed_model_shape shape,
                                  size_t nparams)
{
    const fed_model_shape *s = &v->shape;

    if (strcmp(v->spec, spec) != 0) {
        fed_log(FED_LOG_ERROR, "%s: checkpoint %" PRIu64 " holds model %s, not %s", who, ckpt_id,
                v->spec, spec);
        return FED_ERR_SPEC;
    }
    if (s->c != shape.c || s->h != shape.h || s->w != shape.w || s->classes != shape.classes) {
        fed_log(FED_LOG_ERROR, "%s: checkpoint %" PRIu64 " holds input %dx%dx%d/%d, not %dx%dx%d/%d",
                who, ckpt_id, s->c, s->h, s->w, s->classes, shape.c, shape.h, shape.w,
                shape.classes);
        return FED_ERR_SHAPE;
    }
    if (s->scale != shape.scale) {
        fed_log(FED_LOG_ERROR, "%s: checkpoint %" PRIu64 " holds a model of input scale %s, not "
                "%s (--input-scale)", who, ckpt_id, fed_model_input_scale_name(s->scale),
                fed_model_input_scale_name(shape.scale));
        return FED_ERR_SHAPE;
    }
    if (v->nparams != nparams) {
        fed_log(FED_LOG_ERROR, "%s: checkpoint %" PRIu64 " holds %zu parameters, not %zu", who,
                ckpt_id, v->nparams, nparams);
        return FED_ERR_SHAPE;
    }
    return FED_OK;
}
