/* train_job.c - one round of local training as a pool job, for the client
 * (its encoded delta) and the peer (its trained parameters): the round's
 * parameters in a model kept while the settings' spec and batch stay the
 * same, a fresh optimizer, E epochs over the node's shard, then the
 * result. Touches only the job: never the node, the network or the
 * database. */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "node/node_impl.h"
#include "node/test_hooks.h"

/* The micro-batches each step runs as: the config's, at most the batch's
 * samples, none under DP-SGD (its draw runs in pieces of its own). */
static int job_accumulate(const node_train_job *j)
{
    if (j->dp_on || j->accumulate <= 1)
        return 1;
    return j->accumulate < j->set.batch ? (int)j->accumulate : (int)j->set.batch;
}

static fed_err train_epochs(node_train_job *j, fed_model *m, fed_optim *o, double *loss)
{
    fed_trainer *t = NULL;
    fed_step_stats st = {0};
    fed_rng rng;
    fed_err e;

    fed_rng_seed_stream(&rng, j->seed, j->round);
    j->dp_steps = 0;
    j->dp_rate = 0;
    if ((e = fed_trainer_new_acc(m, o, j->data, (int)j->set.batch, job_accumulate(j), &t)) !=
        FED_OK)
        return e;
    if (j->dp_on && (e = fed_trainer_set_dp(t, &j->dp)) != FED_OK)
        goto out;
    if (fed_node_site_ranks(j) > 1 &&
        (e = fed_trainer_set_ranks(t, fed_coll_rank(j->coll), fed_coll_size(j->coll),
                                   fed_node_site_reduce, j->coll)) != FED_OK)
        goto out;
    /* a stream of draws per node and round (FED_ERR_UNSUPPORTED on float
       features or over several ranks) */
    if ((e = fed_trainer_set_augment(t, &j->aug, j->seed ^ j->round * 0x9e3779b97f4a7c15ull)) !=
        FED_OK)
        goto out;
    for (uint32_t ep = 0; ep < j->set.local_epochs && e == FED_OK; ep++)
        e = fed_trainer_epoch(t, j->shard, j->shard_n, &rng, &st);
    if (e == FED_OK && fed_node_site_ranks(j) > 1) /* every rank's share of the loss */
        e = fed_node_site_sum_stats(j->coll, &st);
    if (j->dp_on) { /* what the round spent, for the client's charge */
        j->dp_steps = fed_trainer_dp_steps(t);
        j->dp_rate = fed_trainer_dp_rate(t, j->shard_n);
    }
out:
    fed_trainer_free(t);
    *loss = st.samples ? st.loss_sum / (double)st.samples : NAN;
    return e;
}

/* delta = trained - global, the floats that leave the site packed as the
 * layout says (then the simulator's tamper hook, if any), encoded with the
 * round's codec; the local tensors as trained kept in local_out. */
static fed_err encode_delta(node_train_job *j, float *p)
{
    const fed_node_layout *l = &j->layout;

    if (l->len[LAYOUT_LOCAL]) {
        if (!j->local_out && !(j->local_out = fed_malloc(l->len[LAYOUT_LOCAL] * sizeof(float))))
            return FED_ERR_NOMEM;
        fed_node_layout_gather(l, LAYOUT_LOCAL, p, j->local_out);
    }
    for (size_t i = 0; i < j->nparams; i++)
        p[i] -= j->from[i];
    j->sent_n = j->nparams;
    if (!fed_node_layout_trivial(l)) {
        if (l->len[LAYOUT_STATS] && !j->sent &&
            !(j->sent = fed_malloc(l->len[LAYOUT_STATS] * sizeof *j->sent)))
            return FED_ERR_NOMEM;
        fed_node_layout_pack_inplace(l, p, j->sent);
        j->sent_n = fed_node_layout_sent(l);
    }
    if (j->hooks && j->hooks->tamper_delta)
        j->hooks->tamper_delta(j->hooks->ctx, j->round, p, j->sent_n);
    return fed_node_encode_vec(&j->codec, p, j->sent_n, j->residual, &j->vec, &j->cap_vec,
                               &j->vec_len);
}

void fed_node_train_job_release(node_train_job *j)
{
    fed_model_free(j->model);
    fed_free(j->trained);
    fed_free(j->sent);
    fed_free(j->start);
    fed_free(j->vec);
    fed_free(j->local_out);
    fed_node_layout_fini(&j->layout);
    j->model = NULL;
    j->trained = NULL;
    j->sent = NULL;
    j->start = NULL;
    j->vec = NULL;
    j->local_out = NULL;
    j->cap_vec = j->vec_len = 0;
}

/* The round's tensor paths over the model's table, as the MODEL's field 16
 * says; the client's kept local tensors put into the start (or, the first
 * time, taken from the MODEL). A DP-SGD site sends no noiseless
 * statistics. */
static fed_err round_layout(node_train_job *j)
{
    const fed_wire_settings *s = &j->set;
    layout_rules r = {.local_layers = s->local_layers,
                      .local_bn = (s->paths_flags & FED_WIRE_PATHS_LOCAL_BN) != 0,
                      .stats_local = (s->paths_flags & FED_WIRE_PATHS_STATS_LOCAL) != 0};
    const fed_tensor_info *t;
    int nt;
    fed_err e;

    t = fed_model_tensors(j->model, &nt);
    fed_node_layout_fini(&j->layout);
    fed_free(j->local_out); /* both sized for the last layout */
    fed_free(j->sent);
    j->local_out = NULL;
    j->sent = NULL;
    if ((e = fed_node_layout_of(t, nt, j->nparams, &r, &j->layout)) != FED_OK)
        return e;
    if (j->dp_on && j->layout.len[LAYOUT_STATS])
        return FED_ERR_DP_STATS;
    if (j->local && j->local_n == j->layout.len[LAYOUT_LOCAL] && j->local_n &&
        fed_node_site_ranks(j) > 1) { /* the start the other ranks are sent */
        if (!j->start && !(j->start = fed_malloc(j->nparams * sizeof *j->start)))
            return FED_ERR_NOMEM;
        memcpy(j->start, j->global, j->nparams * sizeof *j->start);
        fed_node_layout_scatter(&j->layout, LAYOUT_LOCAL, j->local, j->start);
        j->from = j->start;
    }
    return FED_OK;
}

/* A client alone: its kept local tensors into the model's parameters, run
 * by run, once the round's global is in (a site's ranks start from
 * j->start instead, which round_layout made). */
static fed_err put_local(node_train_job *j, fed_model *m)
{
    fed_backend *be = fed_model_backend(m);
    const fed_node_layout *l = &j->layout;
    const float *src = j->local;
    fed_err e = FED_OK;

    if (j->from != j->global || !j->local || !j->local_n || j->local_n != l->len[LAYOUT_LOCAL])
        return FED_OK;
    for (size_t i = 0; i < l->nruns && e == FED_OK; i++)
        if (l->runs[i].path == LAYOUT_LOCAL) {
            e = be->upload(be, fed_model_params_dev(m) + l->runs[i].off, src,
                           l->runs[i].len * sizeof *src);
            src += l->runs[i].len;
        }
    return e;
}

/* The round's model: last round's when its spec and batch are the same (a
 * fresh one costs its buffers' page faults each round), else a new one. */
static fed_err round_model(node_train_job *j)
{
    fed_model_shape in;
    fed_err e;
    int room = j->dp_on ? (int)j->set.batch
                        : fed_trainer_micro_batch((int)j->set.batch, job_accumulate(j));

    if (j->model && fed_model_max_batch(j->model) == room &&
        !strcmp(fed_model_spec(j->model), j->set.spec) &&
        fed_model_input(j->model).classes == (j->set.input[3] ? (int)j->set.input[3]
                                                              : j->data->shape.classes))
        return FED_OK;
    fed_model_free(j->model);
    fed_free(j->trained); /* sized for the old model */
    fed_free(j->sent);
    fed_free(j->start);
    j->model = NULL;
    j->trained = NULL;
    j->sent = NULL;
    j->start = NULL;
    /* a graph named by its id is built from its whole text, over the
       MODEL's declared input (checked against the data when it came) */
    if ((e = fed_node_model_input(&j->set, j->data->shape, 0, &in, NULL, 0)) != FED_OK)
        return e;
    e = fed_model_new(j->set.graph ? j->set.graph : j->set.spec, in, j->be, j->pool, j->shards,
                      room, &j->model);
    if (e == FED_OK && j->recompute > 1)
        e = fed_model_set_recompute(j->model, (int)j->recompute);
    if (e == FED_OK && j->precision != FED_PRECISION_FP32) {
        char why[256];

        if ((e = fed_model_set_precision(j->model, j->precision, why, sizeof why)) != FED_OK)
            fed_log(FED_LOG_ERROR, "%s", why);
    }
    if (e == FED_OK && j->hooks && j->hooks->mark_model)
        j->hooks->mark_model(j->hooks->ctx, j->model);
    return e;
}

void fed_node_train_job_run(fed_job *job)
{
    node_train_job *j = (node_train_job *)job;
    fed_model *m;
    fed_optim *o = NULL;
    fed_optim_cfg oc;
    fed_err e;

    /* the model first: its tensors' paths put the client's local tensors
       into the start its other ranks are sent */
    if ((e = round_model(j)) != FED_OK)
        goto out;
    m = j->model;
    if (fed_model_nparams(m) != j->nparams) {
        e = FED_ERR_SHAPE;
        goto out;
    }
    j->from = j->global;
    if (!j->params && (e = round_layout(j)) != FED_OK)
        goto out;
    if (fed_node_site_ranks(j) > 1 && fed_coll_rank(j->coll) == 0 &&
        (e = fed_node_site_announce(j)) != FED_OK)
        goto out;
    fed_optim_cfg_default(&oc, (fed_optim_kind)j->set.optimizer);
    oc.lr = j->set.lr;
    oc.prox_mu = j->set.mu;
    if (oc.kind == FED_OPTIM_SGD)
        oc.momentum = j->set.momentum;
    if ((e = fed_model_set_params(m, j->from)) != FED_OK ||
        (!j->params && (e = put_local(j, m)) != FED_OK) ||
        (e = fed_optim_new(&oc, m, &o)) != FED_OK)
        goto out;
    if (oc.prox_mu > 0 && (e = fed_optim_set_anchor(o, m)) != FED_OK)
        goto out;
    if ((e = train_epochs(j, m, o, &j->loss)) != FED_OK)
        goto out;
    j->samples = (uint64_t)j->shard_n * j->set.local_epochs;
    if (j->params) { /* the peer's: the trained parameters themselves */
        e = fed_model_get_params(m, j->params);
        goto out;
    }
    if (!j->trained && !(j->trained = fed_malloc(j->nparams * sizeof *j->trained))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    if ((e = fed_model_get_params(m, j->trained)) != FED_OK)
        goto out;
    e = encode_delta(j, j->trained);
out:
    fed_optim_free(o);
    if (j->drop_model) {
        fed_model_free(j->model);
        j->model = NULL;
    }
    if (e != FED_OK && fed_node_site_ranks(j) > 1) /* the other ranks cannot go on alone */
        e = fed_node_site_failed(j, e);
    j->err = e;
}
