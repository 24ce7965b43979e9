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
#include "node/site_eval.h"
#include "node/test_hooks.h"

/* The micro-batches each step runs as: the config's, at most the batch's
 * samples, none under DP-SGD (its draw runs in pieces of its own). */
static int job_accumulate(const node_train_job *j)
{
    if (j->dp_on || j->accumulate <= 1)
        return 1;
    return j->accumulate < j->set.batch ? (int)j->accumulate : (int)j->set.batch;
}

static fed_err train_epochs(node_train_job *j, fed_model *m, fed_optim *o, uint32_t epochs,
                            double *loss)
{
    fed_trainer *t = NULL;
    fed_step_stats st = {0};
    fed_rng rng;
    fed_err e;

    fed_rng_seed_stream(&rng, j->seed, j->round);
    j->dp_steps = 0;
    j->dp_rate = 0;
    if (j->pipe_stages > 1) { /* this rank's stage; its replicas sum over stage_coll */
        fed_train_pipe pipe = {fedi_node_site_stage(j), (int)j->pipe_stages,
                               fedi_node_site_pipe_send, fedi_node_site_pipe_recv, j};
        int D = fed_coll_size(j->coll) / (int)j->pipe_stages;

        if ((e = fed_trainer_new_stage(m, o, j->data, (int)j->set.batch, job_accumulate(j), &pipe,
                                       &t)) != FED_OK)
            return e;
        if (D > 1 && (e = fed_trainer_set_ranks(t, fedi_node_site_replica(j), D,
                                                fedi_node_site_reduce, j->stage_coll)) != FED_OK)
            goto out;
    } else {
        if ((e = fed_trainer_new_acc(m, o, j->data, (int)j->set.batch, job_accumulate(j), &t)) !=
            FED_OK)
            return e;
        fed_trainer_set_gpipe_order(t, j->gpipe);
    }
    if (j->dp_on && (e = fed_trainer_set_dp(t, &j->dp)) != FED_OK)
        goto out;
    if (fedi_node_site_ranks(j) > 1 && j->pipe_stages <= 1 &&
        (e = fed_trainer_set_ranks(t, fed_coll_rank(j->coll), fed_coll_size(j->coll),
                                   fedi_node_site_reduce, j->coll)) != FED_OK)
        goto out;
    /* a stream of draws per node and round (FED_ERR_UNSUPPORTED on float
       features or over several ranks) */
    if ((e = fed_trainer_set_augment(t, &j->aug, j->seed ^ j->round * 0x9e3779b97f4a7c15ull)) !=
            FED_OK ||
        (e = fed_trainer_set_noise(t, j->noise_std, j->seed ^ j->round * 0x9e3779b97f4a7c15ull)) !=
            FED_OK)
        goto out;
    for (uint32_t ep = 0; ep < epochs && e == FED_OK; ep++) {
        long left = (long)j->max_steps - fed_optim_steps(o); /* the client's own cap */

        if (!j->max_steps)
            e = fed_trainer_epoch(t, j->shard, j->shard_n, &rng, &st);
        else if (left > 0)
            e = fed_trainer_steps(t, j->shard, j->shard_n, left, &rng, &st);
    }
    if (e == FED_OK && fedi_node_site_ranks(j) > 1) /* every rank's share of the loss */
        e = fedi_node_site_sum_stats(j->coll, &st);
    if (j->dp_on) { /* what the round spent, for the client's charge */
        j->dp_steps = fed_trainer_dp_steps(t);
        j->dp_rate = fed_trainer_dp_rate(t, j->shard_n);
    }
out:
    fed_trainer_free(t);
    *loss = st.samples ? st.loss_sum / (double)st.samples : NAN;
    return e;
}

/* FedNova's a_i (Wang et al. 2020, section 4 and appendix: the norm of the
 * vector a of a client's local solver) for tau steps of SGD with momentum
 * rho: a_i = sum_{t<tau} sum_{k<=t} rho^k = sum_{t<tau} (1 - rho^(t+1)) /
 * (1 - rho); tau itself without momentum (and for Adam, which the paper
 * does not normalize). */
double fedi_node_fednova_steps(long tau, double rho)
{
    double a = 0, run = 0;

    for (long t = 0; t < tau; t++) {
        run = run * rho + 1.0; /* sum_{k<=t} rho^k */
        a += run;
    }
    return a;
}

/* FedNova: the trained floats of the delta divided by a_i, a_i after the
 * tensors (the layout's steps segment). */
static fed_err fednova_normalize(node_train_job *j, fed_optim *o, float *delta)
{
    const fed_node_layout *l = &j->layout;
    double rho = j->set.optimizer == FED_OPTIM_SGD ? j->set.momentum : 0.0;
    double a = fedi_node_fednova_steps(fed_optim_steps(o), rho);

    if (!(a >= 1))
        return FED_ERR_RANGE; /* no step taken */
    if (j->set.sa_on && a > FED_NODE_STEPS_RANGE)
        return FED_ERR_STEPS; /* more than the secure steps segment holds: declined */
    for (size_t i = 0; i < l->nruns; i++)
        if (l->runs[i].path == LAYOUT_TRAINED)
            for (size_t k = l->runs[i].off; k < l->runs[i].off + l->runs[i].len; k++)
                delta[k] = (float)((double)delta[k] / a);
    delta[j->nparams] = (float)a;
    return FED_OK;
}

/* SCAFFOLD (Karimireddy et al. 2020, Algorithm 1): the local steps follow
 * g - c_i + c, the correction c - c_i into the optimizer. */
static fed_err scaffold_correct(node_train_job *j, fed_optim *o)
{
    float *corr;
    fed_err e;

    if (!j->ctl_c)
        return FED_OK;
    if (!(corr = fed_malloc(j->nparams * sizeof *corr)))
        return FED_ERR_NOMEM;
    for (size_t k = 0; k < j->nparams; k++)
        corr[k] = j->ctl_c[k] - (j->ctl_i ? j->ctl_i[k] : 0.0f);
    e = fed_optim_set_correction(o, corr);
    fed_free(corr);
    return e;
}

/* SCAFFOLD's option II over the delta's trained floats: c_i+ = c_i - c +
 * (x - y_i) / (K lr) into ctl_out, and its change c_i+ - c_i = -c - delta /
 * (K lr) after the tensors (the layout's control segment, packed in buffer
 * order). K is the paper's count of local steps for plain SGD; with
 * momentum rho the steps move y_i by about lr a_i g (a_i FedNova's
 * momentum-weighted count, 1 / (1 - rho) times K for long runs), so K is
 * a_i, which is K itself without momentum: with K, c_i would overstate the
 * gradient up to tenfold at rho 0.9 and the corrected steps diverge. */
static fed_err scaffold_control(node_train_job *j, fed_optim *o, float *delta)
{
    const fed_node_layout *l = &j->layout;
    double rho = j->set.optimizer == FED_OPTIM_SGD ? j->set.momentum : 0.0;
    double klr = fedi_node_fednova_steps(fed_optim_steps(o), rho) * (double)j->set.lr;
    float *dc = delta + j->nparams;

    if (!(klr > 0))
        return FED_ERR_RANGE; /* no step taken */
    if (!j->ctl_out && !(j->ctl_out = fed_malloc(j->nparams * sizeof *j->ctl_out)))
        return FED_ERR_NOMEM;
    memset(j->ctl_out, 0, j->nparams * sizeof *j->ctl_out);
    for (size_t i = 0; i < l->nruns; i++) {
        const layout_run *r = &l->runs[i];

        if (r->path != LAYOUT_TRAINED)
            continue;
        for (size_t k = r->off; k < r->off + r->len; k++) {
            double ci = j->ctl_i ? j->ctl_i[k] : 0.0;
            double d = -(double)j->ctl_c[k] - (double)delta[k] / klr;

            *dc++ = (float)d;
            j->ctl_out[k] = (float)(ci + d);
        }
    }
    return FED_OK;
}

/* delta = trained - global, the floats that leave the site packed as the
 * layout says (then the simulator's tamper hook, if any), encoded with the
 * round's codec; the local tensors as trained kept in local_out; in the
 * clear a site evaluation's statistics follow it as 16-bit limbs (f32 only:
 * the client refused a round that evaluates with another codec). */
static fed_err encode_delta(node_train_job *j, fed_optim *o, float *p)
{
    const fed_node_layout *l = &j->layout;
    size_t words = j->eval_ints && !j->set.sa_on ? fed_node_site_eval_plain_words(j->eval_ints) : 0;
    float *all = NULL;
    fed_err e;

    if (l->len[LAYOUT_LOCAL]) {
        if (!j->local_out && !(j->local_out = fed_malloc(l->len[LAYOUT_LOCAL] * sizeof(float))))
            return FED_ERR_NOMEM;
        fed_node_layout_gather(l, LAYOUT_LOCAL, p, j->local_out);
    }
    for (size_t i = 0; i < j->nparams; i++)
        p[i] -= j->from[i];
    if (l->extra && j->set.paths_flags & FED_WIRE_PATHS_FEDNOVA &&
        (e = fednova_normalize(j, o, p)) != FED_OK)
        return e;
    if (l->extra && j->ctl_c && (e = scaffold_control(j, o, p)) != FED_OK)
        return e;
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
    if (!words)
        return fedi_node_encode_vec(&j->codec, p, j->sent_n, j->residual, &j->vec, &j->cap_vec,
                                    &j->vec_len);
    if (j->codec.id != FED_CODEC_F32)
        return FED_ERR_PAYLOAD;
    if (!(all = fed_malloc((j->sent_n + words) * sizeof *all)))
        return FED_ERR_NOMEM;
    memcpy(all, p, j->sent_n * sizeof *all);
    if ((e = fed_node_site_eval_plain_put(j->eval_out, j->eval_ints, all + j->sent_n)) == FED_OK)
        e = fedi_node_encode_vec(&j->codec, all, j->sent_n + words, NULL, &j->vec, &j->cap_vec,
                                 &j->vec_len);
    fed_free(all);
    return e;
}

/* The round's site evaluation of m (the global parameters set), before it
 * trains: on the validation split, into j->eval_out. */
static fed_err site_eval(node_train_job *j, fed_model *m)
{
    if (fed_model_input(m).classes != (int)j->eval_classes ||
        fed_site_eval_ints((int)j->eval_classes) != j->eval_ints)
        return FED_ERR_SHAPE;
    fed_dataset *sub = NULL;
    fed_err e;

    if (j->pipe_stages > 1) {
        fed_log(FED_LOG_ERROR, "site evaluation (--eval-every) of a model in pipeline stages "
                "is not supported: each rank holds one stage");
        return FED_ERR_UNSUPPORTED;
    }

    if (fedi_node_site_ranks(j) > 1 && fed_coll_rank(j->coll) != 0)
        return FED_OK; /* rank 0 sends */
    if (!j->val && j->val_idx && j->val_n && /* its rows of the training file, as now scaled */
        (e = fed_data_subset(j->data, j->val_idx, j->val_n, &sub)) != FED_OK)
        return e;
    e = fed_node_site_eval_run(m, j->val ? j->val : sub, j->eval_consent, j->eval_out);
    fed_data_free(sub);
    return e;
}

void fedi_node_train_job_release(node_train_job *j)
{
    fed_free(j->whole);
    j->whole = NULL;
    j->whole_nt = 0;
    fed_model_free(j->model);
    fed_free(j->trained);
    fed_free(j->sent);
    fed_free(j->start);
    fed_free(j->vec);
    fed_free(j->local_out);
    fed_free(j->personal_out);
    fed_free(j->ctl_out);
    fed_node_layout_fini(&j->layout);
    j->ctl_out = NULL;
    j->model = NULL;
    j->trained = NULL;
    j->sent = NULL;
    j->start = NULL;
    j->vec = NULL;
    j->local_out = NULL;
    j->personal_out = NULL;
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
                      .stats_local = (s->paths_flags & FED_WIRE_PATHS_STATS_LOCAL) != 0,
                      .fednova = (s->paths_flags & FED_WIRE_PATHS_FEDNOVA) != 0,
                      .scaffold = (s->paths_flags & FED_WIRE_PATHS_SCAFFOLD) != 0};
    const fed_tensor_info *t;
    size_t extra;
    int nt;
    fed_err e;

    t = j->whole ? j->whole : fed_model_tensors(j->model, &nt); /* a pipeline: the model's */
    if (j->whole)
        nt = j->whole_nt;
    extra = j->layout.extra;
    fed_node_layout_fini(&j->layout);
    fed_free(j->local_out); /* both sized for the last layout */
    fed_free(j->sent);
    j->local_out = NULL;
    j->sent = NULL;
    if ((e = fed_node_layout_of(t, nt, j->nparams, &r, &j->layout)) != FED_OK)
        return e;
    if (j->layout.extra != extra) { /* sized for the last layout's extra segment */
        fed_free(j->trained);
        j->trained = NULL;
    }
    if (j->dp_on && j->layout.len[LAYOUT_STATS])
        return FED_ERR_DP_STATS;
    if (j->pipe_stages > 1 && s->paths_flags & FED_WIRE_PATHS_SCAFFOLD) {
        fed_log(FED_LOG_ERROR, "SCAFFOLD's control variates over a model in pipeline stages "
                "are not supported (each rank holds one stage)");
        return FED_ERR_UNSUPPORTED;
    }
    if (j->local && j->local_n == j->layout.len[LAYOUT_LOCAL] && j->local_n &&
        fedi_node_site_ranks(j) > 1) { /* the start the other ranks are sent */
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

/* A pipeline rank's model: the split (model/pipeline.h), this rank's stage
 * of it, and the whole model's tensor table (rank 0 lays out the delta by
 * it). */
static fed_err stage_model(node_train_job *j, fed_model_shape in, int room)
{
    const char *spec = j->set.graph ? j->set.graph : j->set.spec;
    int st = fedi_node_site_stage(j);
    char why[320];
    fed_err e;

    fed_free(j->whole);
    j->whole = NULL;
    if ((e = fed_pipe_plan(spec, in, (int)j->pipe_stages, j->split, why, sizeof why)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "%s", why);
        return e;
    }
    if ((e = fed_model_spec_tensors(spec, in, &j->whole, &j->whole_nt)) != FED_OK)
        return e;
    return fed_model_new_stage(spec, in, j->split[st].lo, j->split[st].hi, j->be, j->pool,
                               j->shards, room, &j->model);
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
    if ((e = fedi_node_model_input(&j->set, j->data->shape, 0, &in, NULL, 0)) != FED_OK)
        return e;
    if (j->pipe_stages > 1)
        return stage_model(j, in, room);
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

/* The optimizer the round trains with, as its MODEL says. */
static void round_optim(const node_train_job *j, fed_optim_cfg *oc)
{
    fed_optim_cfg_default(oc, (fed_optim_kind)j->set.optimizer);
    oc->lr = j->set.lr;
    oc->prox_mu = j->set.mu;
    if (oc->kind == FED_OPTIM_SGD)
        oc->momentum = j->set.momentum;
    oc->weight_decay = j->set.weight_decay;
}

/* A client's own model scored on its local test split before the round
 * trains (into j->own_acc): m as it stands (the global with the client's
 * local tensors), or its Ditto personal model, first fine-tuned
 * j->finetune_epochs on its shard when asked; then m is put back. */
static fed_err score_own(node_train_job *j, fed_model *m)
{
    fed_step_stats st = {0};
    fed_optim_cfg oc;
    fed_optim *o = NULL;
    double loss;
    int moved = j->set.ditto_lambda > 0 && j->personal;
    fed_err e;

    j->own_acc = NAN;
    if (!j->local_test || fedi_node_site_ranks(j) > 1)
        return FED_OK;
    if (moved && (e = fed_model_set_params(m, j->personal)) != FED_OK)
        return e;
    if (j->finetune_epochs > 0) { /* FedAvg + fine-tuning: the baseline */
        round_optim(j, &oc);
        oc.prox_mu = 0;
        if ((e = fed_optim_new(&oc, m, &o)) == FED_OK)
            e = train_epochs(j, m, o, j->finetune_epochs, &loss);
        fed_optim_free(o);
        if (e != FED_OK)
            return e;
        moved = 1;
    }
    /* a noise: party's test inputs shifted as its training inputs are */
    if ((e = fed_train_evaluate_noise(m, j->local_test, NULL, 0, j->noise_std,
                                      j->seed ^ 0x74657374ull, &st)) != FED_OK) /* "test" */
        return e;
    if (st.samples)
        j->own_acc = (double)st.correct / (double)st.samples;
    if (moved && ((e = fed_model_set_params(m, j->from)) != FED_OK || (e = put_local(j, m)) != FED_OK))
        return e;
    return FED_OK;
}

/* Ditto's personal step (Li et al., ICML 2021): v, the client's personal
 * model (the round's start the first time), trained as the global was and
 * pulled toward that start w: v -= lr (grad(v) + lambda (v - w)), FedProx's
 * proximal term with mu = lambda anchored at w. Into j->personal_out. */
static fed_err train_personal(node_train_job *j, fed_model *m, const fed_optim_cfg *base)
{
    fed_optim_cfg oc = *base;
    fed_optim *o = NULL;
    double loss;
    fed_err e;

    if (fedi_node_site_ranks(j) > 1)
        return FED_ERR_UNSUPPORTED;
    if (!j->personal_out && !(j->personal_out = fed_malloc(j->nparams * sizeof *j->personal_out)))
        return FED_ERR_NOMEM;
    oc.prox_mu = j->set.ditto_lambda;
    if ((e = fed_model_set_params(m, j->from)) != FED_OK || (e = put_local(j, m)) != FED_OK ||
        (e = fed_optim_new(&oc, m, &o)) != FED_OK || (e = fed_optim_set_anchor(o, m)) != FED_OK)
        goto out;
    if (j->personal && (e = fed_model_set_params(m, j->personal)) != FED_OK)
        goto out;
    if ((e = train_epochs(j, m, o, j->set.local_epochs, &loss)) == FED_OK)
        e = fed_model_get_params(m, j->personal_out);
out:
    fed_optim_free(o);
    return e;
}

void fedi_node_train_job_run(fed_job *job)
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
    if (j->pipe_stages > 1 ? j->split[j->pipe_stages - 1].p_hi != j->nparams
                           : fed_model_nparams(m) != j->nparams) {
        e = FED_ERR_SHAPE;
        goto out;
    }
    j->from = j->global;
    if (!j->params && (e = round_layout(j)) != FED_OK)
        goto out;
    if (fedi_node_site_ranks(j) > 1 && fed_coll_rank(j->coll) == 0 &&
        (e = fedi_node_site_announce(j)) != FED_OK)
        goto out;
    round_optim(j, &oc);
    if ((e = fed_model_set_params(m, j->from + (j->pipe_stages > 1
                                                    ? j->split[fedi_node_site_stage(j)].p_lo -
                                                          j->global_off
                                                    : 0))) != FED_OK ||
        (!j->params && (e = put_local(j, m)) != FED_OK) ||
        (!j->params && (e = score_own(j, m)) != FED_OK) ||
        (e = fed_optim_new(&oc, m, &o)) != FED_OK)
        goto out;
    if ((oc.prox_mu > 0 && (e = fed_optim_set_anchor(o, m)) != FED_OK) ||
        (!j->params && (e = scaffold_correct(j, o)) != FED_OK))
        goto out;
    if (j->eval_ints && !j->params && (e = site_eval(j, m)) != FED_OK)
        goto out;
    if ((e = train_epochs(j, m, o, j->set.local_epochs, &j->loss)) != FED_OK)
        goto out;
    /* FedNova weighs a client by its data, p_i = n_i / n: its steps are a_i */
    j->samples = j->layout.extra && j->set.paths_flags & FED_WIRE_PATHS_FEDNOVA
                     ? (uint64_t)j->shard_n
                     : (uint64_t)j->shard_n * j->set.local_epochs;
    if (j->params && j->pipe_stages > 1) { /* a pipeline rank: its stage to rank 0 */
        e = fedi_node_site_pipe_gather(j, m, j->params);
        goto out;
    }
    if (j->params) { /* the peer's: the trained parameters themselves */
        e = fed_model_get_params(m, j->params);
        goto out;
    }
    if (!j->trained &&
        !(j->trained = fed_malloc((j->nparams + j->layout.extra) * sizeof *j->trained))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    if ((e = j->pipe_stages > 1 ? fedi_node_site_pipe_gather(j, m, j->trained)
                                : fed_model_get_params(m, j->trained)) != FED_OK)
        goto out;
    if ((e = encode_delta(j, o, j->trained)) == FED_OK && j->set.ditto_lambda > 0)
        e = train_personal(j, m, &oc);
out:
    fed_optim_free(o);
    if (j->drop_model) {
        fed_model_free(j->model);
        j->model = NULL;
    }
    if (e != FED_OK && fedi_node_site_ranks(j) > 1) /* the other ranks cannot go on alone */
        e = fedi_node_site_failed(j, e);
    j->err = e;
}
