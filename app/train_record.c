/* train_record.c - the round log and checkpoints of `fednode train --db`:
 * serializes a trainer's model, optimizer and shuffle state into checkpoint
 * sections and back, one transaction per epoch. Owns the "train.state"
 * section's format; never prints, never reads a clock (the caller times). */
#include <stdio.h>
#include <string.h>


#include "core/alloc.h"
#include "core/log.h"
#include "crypto/seal.h"
#include "app/train_record.h"

static void put_u32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32le(const uint8_t *p)
{
    uint32_t v = 0;

    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64le(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* n floats as f32 little-endian bytes (dst may alias src). */
static void floats_to_le(uint8_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;

        memcpy(&u, &src[i], 4);
        put_u32le(dst + 4 * i, u);
    }
}

static void floats_from_le(float *dst, const uint8_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = get_u32le(src + 4 * i);

        memcpy(&dst[i], &u, 4);
    }
}

fed_err fed_node_record_open(const char *path, fed_store **out)
{
    fed_store_opts o;

    fed_store_opts_default(&o);
    return fed_store_open(path, &o, out);
}

fed_err fed_node_record_last_round(fed_store *st, uint64_t *round)
{
    fed_store_round r;
    size_t n = 0;
    fed_err e = fed_store_last_rounds(st, &r, 1, &n);

    *round = (e == FED_OK && n) ? r.round : 0;
    return e;
}

static void encode_input(uint8_t in[16], fed_model_shape s)
{
    put_u32le(in, (uint32_t)s.c);
    put_u32le(in + 4, (uint32_t)s.h);
    put_u32le(in + 8, (uint32_t)s.w);
    put_u32le(in + 12, (uint32_t)s.classes);
}

static void encode_train_state(uint8_t b[FED_NODE_TRAIN_STATE_BYTES], uint64_t epochs,
                               const fed_rng *rng, uint64_t samples)
{
    memset(b, 0, FED_NODE_TRAIN_STATE_BYTES);
    memcpy(b, FED_NODE_TRAIN_MAGIC, sizeof FED_NODE_TRAIN_MAGIC);
    put_u32le(b + 8, FED_NODE_TRAIN_VERSION);
    put_u64le(b + 16, epochs);
    for (int i = 0; i < 4; i++)
        put_u64le(b + 24 + 8 * i, rng->s[i]);
    put_u64le(b + 56, samples);
}

/* The params section (f32 LE) of m into a new buffer of *len bytes. */
static fed_err encode_params(const fed_model *m, uint8_t **out, size_t *len)
{
    size_t n = fed_model_nparams(m);
    float *p = fed_malloc(n * sizeof *p);
    fed_err e;

    *out = NULL;
    if (!p)
        return FED_ERR_NOMEM;
    if ((e = fed_model_get_params(m, p)) != FED_OK) {
        fed_free(p);
        return e;
    }
    floats_to_le((uint8_t *)p, p, n);
    *out = (uint8_t *)p;
    *len = n * sizeof(float);
    return FED_OK;
}

/* The optim section: i64 LE step, then the state as f32 LE. */
static fed_err encode_optim(const fed_optim *o, uint8_t **out, size_t *len)
{
    size_t n = fed_optim_state_floats(o);
    uint8_t *b = fed_malloc(8 + n * sizeof(float));
    float *f = n ? fed_malloc(n * sizeof *f) : NULL;
    long step = 0;
    fed_err e = FED_OK;

    *out = NULL;
    if (!b || (n && !f)) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    if ((e = fed_optim_get_state(o, f, &step)) != FED_OK)
        goto out;
    put_u64le(b, (uint64_t)(int64_t)step);
    floats_to_le(b + 8, f, n);
    *out = b;
    *len = 8 + n * sizeof(float);
    b = NULL;
out:
    fed_free(f);
    fed_free(b);
    return e;
}

static fed_err write_round_and_ckpt(fed_store *st, const fed_node_record_round *r,
                                    const fed_store_section *s, size_t ns)
{
    fed_store_round row;
    fed_err e;

    memset(&row, 0, sizeof row);
    row.round = r->epoch;
    row.start_ms = r->start_ms;
    row.end_ms = r->end_ms;
    row.loss = r->loss;
    row.accuracy = r->accuracy;
    row.samples = r->samples;
    snprintf(row.strategy, sizeof row.strategy, "%s", FED_NODE_STRATEGY_LOCAL);
    /* the round's model: the hash of the params section as stored */
    fed_crypto_model_hash(s[2].data, s[2].len, row.model_hash);
    if ((e = fed_store_begin(st)) != FED_OK)
        return e;
    if ((e = fed_store_put_round(st, &row)) != FED_OK ||
        (e = fed_store_checkpoint_write(st, r->epoch, s, ns, NULL)) != FED_OK ||
        (e = fed_store_commit(st)) != FED_OK) {
        fed_store_rollback(st);
        return e;
    }
    return FED_OK;
}

fed_err fed_node_record_epoch(fed_store *st, const fed_model *m, const fed_optim *o,
                              const fed_rng *shuffle, uint64_t epoch_samples,
                              const fed_node_record_round *r)
{
    uint8_t in[16], ts[FED_NODE_TRAIN_STATE_BYTES];
    uint8_t *params = NULL, *optim = NULL;
    size_t plen = 0, olen = 0, ns = 4;
    const char *spec;
    fed_err e;

    if (!st || !m || !shuffle || !r || r->epoch == 0)
        return FED_ERR_INVAL;
    spec = fed_model_spec(m);
    encode_input(in, fed_model_input(m));
    encode_train_state(ts, r->epoch, shuffle, epoch_samples);
    if ((e = encode_params(m, &params, &plen)) != FED_OK)
        goto out;
    if (o && (e = encode_optim(o, &optim, &olen)) != FED_OK)
        goto out;
    {
        fed_store_section s[5] = {
            {FED_CKPT_SEC_SPEC, spec, strlen(spec)},
            {FED_CKPT_SEC_INPUT, in, sizeof in},
            {FED_CKPT_SEC_PARAMS, params, plen},
            {FED_NODE_SEC_TRAIN, ts, sizeof ts},
            {FED_CKPT_SEC_OPTIM, optim, olen},
        };

        if (o)
            ns = 5;
        e = write_round_and_ckpt(st, r, s, ns);
    }
out:
    fed_free(params);
    fed_free(optim);
    return e;
}

/* ------------------------------------------------------------ resume -- */

typedef struct ckpt_view {
    const fed_store_section *spec, *input, *params, *optim, *train;
} ckpt_view;

static fed_err find_sections(const fed_store_ckpt *c, ckpt_view *v)
{
    v->spec = fed_store_ckpt_find(c, FED_CKPT_SEC_SPEC);
    v->input = fed_store_ckpt_find(c, FED_CKPT_SEC_INPUT);
    v->params = fed_store_ckpt_find(c, FED_CKPT_SEC_PARAMS);
    v->optim = fed_store_ckpt_find(c, FED_CKPT_SEC_OPTIM);
    v->train = fed_store_ckpt_find(c, FED_NODE_SEC_TRAIN);
    if (!v->spec || !v->input || !v->params || !v->train || v->spec->len == 0 ||
        v->spec->len >= FED_MODEL_SPEC_MAX || v->input->len != 16 ||
        v->train->len != FED_NODE_TRAIN_STATE_BYTES) {
        fed_log(FED_LOG_ERROR, "checkpoint %llu is not a training checkpoint (sections %s, %s, "
                "%s, %s)", (unsigned long long)c->id, FED_CKPT_SEC_SPEC, FED_CKPT_SEC_INPUT,
                FED_CKPT_SEC_PARAMS, FED_NODE_SEC_TRAIN);
        return FED_ERR_FORMAT;
    }
    return FED_OK;
}

static fed_err check_train_state(const uint8_t *b)
{
    if (memcmp(b, FED_NODE_TRAIN_MAGIC "\0\0", 8) != 0)
        return FED_ERR_MAGIC;
    if (get_u32le(b + 8) != FED_NODE_TRAIN_VERSION)
        return FED_ERR_VERSION;
    return FED_OK;
}

/* Stored spec and shape into found, compared with m's. */
static fed_err check_model(const ckpt_view *v, const fed_model *m, fed_node_record_found *f)
{
    const uint8_t *in = v->input->data;
    fed_model_shape want = fed_model_input(m);

    memcpy(f->spec, v->spec->data, v->spec->len);
    f->spec[v->spec->len] = '\0';
    f->shape.c = (int)get_u32le(in);
    f->shape.h = (int)get_u32le(in + 4);
    f->shape.w = (int)get_u32le(in + 8);
    f->shape.classes = (int)get_u32le(in + 12);
    if (strcmp(f->spec, fed_model_spec(m)) != 0) {
        fed_log(FED_LOG_ERROR, "checkpoint %llu holds model %s, not %s",
                (unsigned long long)f->ckpt_id, f->spec, fed_model_spec(m));
        return FED_ERR_SPEC;
    }
    if (f->shape.c != want.c || f->shape.h != want.h || f->shape.w != want.w ||
        f->shape.classes != want.classes) {
        fed_log(FED_LOG_ERROR, "checkpoint %llu holds input %dx%dx%d/%d, not %dx%dx%d/%d",
                (unsigned long long)f->ckpt_id, f->shape.c, f->shape.h, f->shape.w,
                f->shape.classes, want.c, want.h, want.w, want.classes);
        return FED_ERR_SHAPE;
    }
    if (v->params->len != fed_model_nparams(m) * sizeof(float))
        return FED_ERR_SHAPE;
    return FED_OK;
}

static fed_err check_optim(const ckpt_view *v, const fed_optim *o)
{
    if (!o)
        return FED_OK;
    if (!v->optim || v->optim->len < 8)
        return FED_ERR_FORMAT;
    if (v->optim->len != 8 + fed_optim_state_floats(o) * sizeof(float)) {
        fed_log(FED_LOG_ERROR, "checkpoint optimizer state is %zu bytes, this optimizer's %zu",
                v->optim->len - 8, fed_optim_state_floats(o) * sizeof(float));
        return FED_ERR_SHAPE;
    }
    return FED_OK;
}

/* Everything checked: set m, o and rng from the sections. */
static fed_err apply(const ckpt_view *v, fed_model *m, fed_optim *o, fed_rng *rng)
{
    size_t np = fed_model_nparams(m), no = o ? fed_optim_state_floats(o) : 0;
    float *buf = fed_malloc((np > no ? np : no) * sizeof *buf + sizeof *buf);
    const uint8_t *tb = v->train->data;
    fed_err e;

    if (!buf)
        return FED_ERR_NOMEM;
    floats_from_le(buf, v->params->data, np);
    if ((e = fed_model_set_params(m, buf)) != FED_OK)
        goto out;
    if (o) {
        const uint8_t *ob = v->optim->data;

        floats_from_le(buf, ob + 8, no);
        if ((e = fed_optim_set_state(o, buf, (long)(int64_t)get_u64le(ob))) != FED_OK)
            goto out;
    }
    for (int i = 0; i < 4; i++)
        rng->s[i] = get_u64le(tb + 24 + 8 * i);
out:
    fed_free(buf);
    return e;
}

fed_err fed_node_record_resume(fed_store *st, fed_model *m, fed_optim *o, fed_rng *shuffle,
                               fed_node_record_found *found)
{
    fed_node_record_found local;
    fed_node_record_found *f = found ? found : &local;
    fed_store_ckpt c;
    ckpt_view v;
    fed_err e;

    memset(f, 0, sizeof *f);
    memset(&c, 0, sizeof c);
    if (!st || !m || !shuffle)
        return FED_ERR_INVAL;
    if ((e = fed_store_latest_valid_checkpoint(st, &c, &f->faults)) != FED_OK)
        goto out;
    f->ckpt_id = c.id;
    if ((e = find_sections(&c, &v)) != FED_OK ||
        (e = check_train_state(v.train->data)) != FED_OK)
        goto out;
    f->epochs_done = get_u64le((const uint8_t *)v.train->data + 16);
    f->samples = get_u64le((const uint8_t *)v.train->data + 56);
    if ((e = check_model(&v, m, f)) != FED_OK || (e = check_optim(&v, o)) != FED_OK)
        goto out;
    e = apply(&v, m, o, shuffle);
out:
    fed_store_ckpt_fini(&c);
    return e;
}
