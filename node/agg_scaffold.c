/* agg_scaffold.c - SCAFFOLD's server side (Karimireddy et al. 2020,
 * Algorithm 1, option II at the clients): the control variate c the
 * aggregator keeps (nparams floats, zero off the trained path), sent after
 * the model in each MODEL's vector, moved by (|S| / N) times the round's
 * mean control change once the model merged; which recent rounds closed
 * with no update (MODEL field 18), so a client commits its c_i only for a
 * merged round; both kept with the committed model and in the checkpoint. */
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "node/aggregator_impl.h"

struct agg_scaffold {
    float *c;             /* (nparams) the server's control variate */
    float *c_committed;   /* (nparams) as last committed */
    uint64_t void_bits;   /* bit k: round (n->round - k) closed with no update */
    uint64_t void_committed;
    float *vec;           /* (2 nparams) the model, then c: the MODEL's vector */
};

fed_err fedi_node_agg_scaffold_new(fed_node *n)
{
    node_agg *a = n->agg;
    agg_scaffold *s;

    if (!a->rules.scaffold)
        return FED_OK;
    if (!(s = fed_calloc(1, sizeof *s)) || !(s->c = fed_calloc(a->nparams, sizeof *s->c)) ||
        !(s->c_committed = fed_calloc(a->nparams, sizeof *s->c)) ||
        !(s->vec = fed_malloc(2 * a->nparams * sizeof *s->vec))) {
        if (s) {
            fed_free(s->c);
            fed_free(s->c_committed);
            fed_free(s);
        }
        return FED_ERR_NOMEM;
    }
    a->scaffold = s;
    return FED_OK;
}

void fedi_node_agg_scaffold_free(fed_node *n)
{
    agg_scaffold *s = n->agg->scaffold;

    if (!s)
        return;
    fed_free(s->c);
    fed_free(s->c_committed);
    fed_free(s->vec);
    fed_free(s);
    n->agg->scaffold = NULL;
}

const float *fedi_node_agg_scaffold_vec(fed_node *n, size_t *len)
{
    node_agg *a = n->agg;
    agg_scaffold *s = a->scaffold;

    if (!s) {
        *len = a->nparams;
        return a->host;
    }
    memcpy(s->vec, a->host, a->nparams * sizeof *s->vec);
    memcpy(s->vec + a->nparams, s->c, a->nparams * sizeof *s->vec);
    *len = 2 * a->nparams;
    return s->vec;
}

fed_err fedi_node_agg_scaffold_merged(fed_node *n, uint32_t m)
{
    node_agg *a = n->agg;
    agg_scaffold *s = a->scaffold;
    double N = n->cfg.agg.wait_clients > m ? (double)n->cfg.agg.wait_clients : (double)m;
    const fed_node_layout *l = &a->layout;
    const float *dc = a->extra_mean; /* the trained floats' mean change, packed */

    if (!s || m == 0)
        return FED_OK;
    /* c += (|S| / N) mean_{i in S} (c_i+ - c_i), N the population */
    for (size_t i = 0; i < l->nruns; i++) {
        const layout_run *r = &l->runs[i];

        if (r->path != LAYOUT_TRAINED)
            continue;
        for (size_t j = 0; j < r->len; j++)
            s->c[r->off + j] = (float)((double)s->c[r->off + j] + (double)m / N * (double)*dc++);
    }
    return FED_OK;
}

void fedi_node_agg_scaffold_closed(fed_node *n, int update)
{
    agg_scaffold *s = n->agg->scaffold;

    if (s)
        s->void_bits = s->void_bits << 1 | (update ? 0u : 1u);
}

void fedi_node_agg_scaffold_keep(fed_node *n)
{
    agg_scaffold *s = n->agg->scaffold;

    if (!s)
        return;
    memcpy(s->c_committed, s->c, n->agg->nparams * sizeof *s->c);
    s->void_committed = s->void_bits;
}

void fedi_node_agg_scaffold_restore(fed_node *n)
{
    agg_scaffold *s = n->agg->scaffold;

    if (!s)
        return;
    memcpy(s->c, s->c_committed, n->agg->nparams * sizeof *s->c);
    s->void_bits = s->void_committed;
}

void fedi_node_agg_scaffold_settings(const fed_node *n, fed_wire_settings *st)
{
    const agg_scaffold *s = n->agg->scaffold;

    if (!s)
        return;
    st->scaffold_on = 1;
    st->scaffold_void = s->void_bits;
}

int fedi_node_agg_scaffold_section(fed_node *n, uint8_t **buf, fed_store_section *sec)
{
    agg_scaffold *s = n->agg->scaffold;
    size_t np = n->agg->nparams;

    *buf = NULL;
    if (!s)
        return 0;
    if (!(*buf = fed_malloc(8 + np * sizeof(float))))
        return -1;
    fed_put_u64le(*buf, s->void_bits);
    fed_put_f32le_n(*buf + 8, s->c, np);
    *sec = (fed_store_section){AGG_CKPT_SEC_SCAFFOLD, *buf, 8 + np * sizeof(float)};
    return 1;
}

fed_err fedi_node_agg_scaffold_resume(fed_node *n, const fed_store_ckpt *ck)
{
    agg_scaffold *s = n->agg->scaffold;
    size_t np = n->agg->nparams;
    const fed_store_section *sec;

    if (!s)
        return FED_OK;
    sec = fed_store_ckpt_find(ck, AGG_CKPT_SEC_SCAFFOLD);
    if (!sec) { /* a checkpoint of another strategy: c starts at zero */
        fed_log(FED_LOG_WARN, "aggregator: the checkpoint holds no SCAFFOLD control variate; "
                "it starts at zero");
        return FED_OK;
    }
    if (sec->len != 8 + np * sizeof(float)) {
        fed_log(FED_LOG_ERROR, "aggregator: the checkpoint's SCAFFOLD section has %zu bytes, "
                "this model's needs %zu", sec->len, 8 + np * sizeof(float));
        return FED_ERR_FORMAT;
    }
    s->void_bits = fed_get_u64le(sec->data);
    fed_get_f32le_n(s->c, (const uint8_t *)sec->data + 8, np);
    return FED_OK;
}

const float *fedi_node_agg_scaffold_control(const fed_node *n)
{
    return n->agg && n->agg->scaffold ? n->agg->scaffold->c : NULL;
}
