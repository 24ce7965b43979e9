/* train_record.c - the round log and checkpoints of `fednode train --db`:
 * serializes a trainer's model, optimizer and shuffle state into checkpoint
 * sections and back, one transaction per epoch. Owns the "train.state"
 * section's format; never prints, never reads a clock (the caller times). */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "crypto/envelope.h"
#include "app/train_record.h"
#include "node/ckpt_model.h"

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

static void encode_train_state(uint8_t b[FED_NODE_TRAIN_STATE_BYTES], uint64_t epochs,
                               const fed_rng *rng, uint64_t samples)
{
    memset(b, 0, FED_NODE_TRAIN_STATE_BYTES);
    memcpy(b, FED_NODE_TRAIN_MAGIC, sizeof FED_NODE_TRAIN_MAGIC);
    fed_put_u32le(b + 8, FED_NODE_TRAIN_VERSION);
    fed_put_u64le(b + 16, epochs);
    for (int i = 0; i < 4; i++)
        fed_put_u64le(b + 24 + 8 * i, rng->s[i]);
    fed_put_u64le(b + 56, samples);
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
    fed_put_u64le(b, (uint64_t)(int64_t)step);
    fed_put_f32le_n(b + 8, f, n);
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
    row.lr = r->lr;
    snprintf(row.strategy, sizeof row.strategy, "%s", FED_NODE_STRATEGY_LOCAL);
    /* the round's model: the hash of the params section as stored */
    fed_crypto_model_hash(s[2].data, s[2].len, row.model_hash);
    if ((e = r->dp ? fed_store_begin_durable(st) : fed_store_begin(st)) != FED_OK)
        return e;
    if (r->dp && (e = fed_dp_account_charge(r->dp, st, r->epoch, r->end_ms, r->dp_q,
                                            r->dp_sigma, r->dp_steps, &row.epsilon)) != FED_OK) {
        fed_store_rollback(st);
        return e;
    }
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
    uint8_t ts[FED_NODE_TRAIN_STATE_BYTES];
    uint8_t *params = NULL, *optim = NULL;
    size_t plen = 0, olen = 0;
    fed_node_model_sec ms;
    fed_err e;

    if (!st || !m || !shuffle || !r || r->epoch == 0)
        return FED_ERR_INVAL;
    encode_train_state(ts, r->epoch, shuffle, epoch_samples);
    if ((e = fed_node_model_params_le(m, &params, &plen)) != FED_OK)
        goto out;
    if (o && (e = encode_optim(o, &optim, &olen)) != FED_OK)
        goto out;
    fed_node_model_sec_encode(&ms, fed_model_graph(m), fed_model_input(m), params,
                              plen / sizeof(float));
    {
        fed_store_section s[FED_NODE_MODEL_SECTIONS + 2] = {
            ms.s[0], ms.s[1], ms.s[2],
            {FED_NODE_SEC_TRAIN, ts, sizeof ts},
            {FED_CKPT_SEC_OPTIM, optim, olen},
        };

        e = write_round_and_ckpt(st, r, s, FED_NODE_MODEL_SECTIONS + (o ? 2 : 1));
    }
out:
    fed_free(params);
    fed_free(optim);
    return e;
}

/* ------------------------------------------------------------ resume -- */

typedef struct ckpt_view {
    fed_node_model_view model;
    const fed_store_section *optim, *train;
} ckpt_view;

static fed_err find_sections(const fed_store_ckpt *c, ckpt_view *v)
{
    fed_err e = fed_node_model_sec_decode(c, &v->model);

    v->optim = fed_store_ckpt_find(c, FED_CKPT_SEC_OPTIM);
    v->train = fed_store_ckpt_find(c, FED_NODE_SEC_TRAIN);
    if (e != FED_OK || !v->train || v->train->len != FED_NODE_TRAIN_STATE_BYTES) {
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
    if (fed_get_u32le(b + 8) != FED_NODE_TRAIN_VERSION)
        return FED_ERR_VERSION;
    return FED_OK;
}

/* Stored spec and shape into found, compared with m's. */
static fed_err check_model(const ckpt_view *v, const fed_model *m, fed_node_record_found *f)
{
    memcpy(f->spec, v->model.spec, sizeof f->spec);
    f->shape = v->model.shape;
    return fed_node_model_view_match(&v->model, "train", f->ckpt_id, fed_model_spec(m),
                                     fed_model_input(m), fed_model_nparams(m));
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
    fed_get_f32le_n(buf, v->model.params, np);
    if ((e = fed_model_set_params(m, buf)) != FED_OK)
        goto out;
    if (o) {
        const uint8_t *ob = v->optim->data;

        fed_get_f32le_n(buf, ob + 8, no);
        if ((e = fed_optim_set_state(o, buf, (long)(int64_t)fed_get_u64le(ob))) != FED_OK)
            goto out;
    }
    for (int i = 0; i < 4; i++)
        rng->s[i] = fed_get_u64le(tb + 24 + 8 * i);
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
    f->epochs_done = fed_get_u64le((const uint8_t *)v.train->data + 16);
    f->samples = fed_get_u64le((const uint8_t *)v.train->data + 56);
    if ((e = check_model(&v, m, f)) != FED_OK || (e = check_optim(&v, o)) != FED_OK)
        goto out;
    e = apply(&v, m, o, shuffle);
out:
    fed_store_ckpt_fini(&c);
    return e;
}
