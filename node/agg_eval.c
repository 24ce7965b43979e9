/* agg_eval.c - the aggregator's held-out evaluation of committed rounds: an
 * idle job per round, the queue of rounds waiting for it, and the figures
 * whose write to their round's row failed (kept until a write goes through).
 * Never merges, samples or commits a round: it only measures and records. */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "node/aggregator_impl.h"

static void evaluate(fed_node *n, fed_node_round_info *info)
{
    fed_step_stats st = {0};

    info->loss = NAN;
    info->accuracy = NAN;
    if (!n->cfg.data.test)
        return;
    if (fed_train_evaluate_all(n->agg->model, n->cfg.data.test, &st) != FED_OK || st.samples == 0)
        return;
    info->loss = st.loss_sum / (double)st.samples;
    info->accuracy = (double)st.correct / (double)st.samples;
}

/* Writes every pending row, oldest first, in one transaction: all of them
 * or, on failure, none (they stay pending for the next try). */
fed_err fedi_node_agg_flush_pending(fed_node *n)
{
    agg_pending *p = &n->agg->pending;
    fed_store *st = n->cfg.store;
    fed_err e;

    if (p->n == 0)
        return FED_OK;
    if ((e = fed_store_begin(st)) != FED_OK)
        goto out;
    for (size_t i = 0; i < p->n && e == FED_OK; i++)
        e = fed_store_put_round(st, &p->rows[i]);
    if (e == FED_OK)
        e = fed_store_commit(st);
out:
    if (e != FED_OK) {
        fed_store_rollback(st);
        p->tries++;
        return e;
    }
    for (size_t i = 0; i < p->n; i++)
        if (p->tries) /* written now, after the failures logged */
            fed_log(FED_LOG_INFO, "aggregator: round %llu's accuracy %.4f recorded, the "
                                  "database taking writes again (%u failed tries)",
                    (unsigned long long)p->rows[i].round, p->rows[i].accuracy, p->tries);
    p->n = 0;
    p->tries = 0;
    return FED_OK;
}

/* row (its loss and accuracy set) to the pending rows, then every pending
 * row to the database. */
static fed_err record_figures(fed_node *n, const fed_store_round *row)
{
    agg_pending *p = &n->agg->pending;
    fed_err e;

    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 4;
        fed_store_round *r = fed_realloc(p->rows, cap * sizeof *r);

        if (!r) { /* no room to keep it: one try, now */
            if ((e = fed_store_put_round(n->cfg.store, row)) != FED_OK)
                fed_log(FED_LOG_ERROR, "aggregator: round %llu's accuracy is lost: %s",
                        (unsigned long long)row->round, fed_strerror(e));
            return e;
        }
        p->rows = r;
        p->cap = cap;
    }
    p->rows[p->n++] = *row;
    if ((e = fedi_node_agg_flush_pending(n)) != FED_OK)
        fed_log(FED_LOG_WARN, "aggregator: recording round %llu's accuracy failed: %s; kept "
                              "with %zu pending, written at the next commit or stop",
                (unsigned long long)row->round, fed_strerror(e), p->n);
    return e;
}

/* The evaluation's figures by name (round_metrics), in one transaction; a
 * failed write is logged and the figures dropped (the row's accuracy has
 * its own retry: record_figures). */
static void record_metrics(fed_node *n, uint64_t round)
{
    agg_eval *ev = &n->agg->ev;
    fed_store *st = n->cfg.store;
    size_t k = fed_eval_report_named(ev->rep, ev->named);
    fed_err e = fed_store_begin(st);

    if (e == FED_OK && n->cfg.agg.best_metric[0]) /* export --best's default */
        e = fed_store_put_meta_text(st, "best_metric", n->cfg.agg.best_metric);
    for (size_t i = 0; i < k && e == FED_OK; i++)
        e = fed_store_put_metric(st, round, ev->named[i].name, ev->named[i].value);
    if (e == FED_OK)
        e = fed_store_commit(st);
    if (e != FED_OK) {
        fed_store_rollback(st);
        fed_log(FED_LOG_WARN, "aggregator: round %llu's metrics are not recorded: %s",
                (unsigned long long)round, fed_strerror(e));
    }
}

/* The best round by cfg.agg.best_metric so far and its value; 0 when none (no
 * best metric, none recorded, or unreadable). */
static uint64_t best_round(fed_node *n, double *v)
{
    int higher = fed_metrics_higher_better(n->cfg.agg.best_metric);
    uint64_t best = 0;

    *v = NAN;
    if (!n->cfg.agg.best_metric[0] || higher < 0 ||
        fed_store_best_metric(n->cfg.store, n->cfg.agg.best_metric, higher, &best, v) != FED_OK)
        return 0;
    return best;
}

int fedi_node_agg_early_stopped(fed_node *n)
{
    double v;
    uint64_t best = n->cfg.agg.early_stop ? best_round(n, &v) : 0;

    return best && n->round >= best + n->cfg.agg.early_stop;
}

void fedi_node_agg_judge(fed_node *n, uint64_t round)
{
    double v;
    uint64_t best = best_round(n, &v); /* 0: only the unjudged are held */

    if (!n->cfg.agg.best_metric[0])
        return;
    fed_store_hold_checkpoints(n->cfg.store, best, round + 1);
    if (n->cfg.agg.early_stop && best && round >= best + n->cfg.agg.early_stop && !n->agg->early_stopped) {
        n->agg->early_stopped = 1;
        fed_log(FED_LOG_INFO, "aggregator: early stop: %s has not improved on round %llu's "
                              "%.4f for %u rounds; round %llu is the last",
                n->cfg.agg.best_metric, (unsigned long long)best, v, n->cfg.agg.early_stop,
                (unsigned long long)round);
    }
}

/* The round's figures into its committed row (or, while the database takes
 * no writes, kept until it does: record_figures), the log and the observer.
 * A crash before they are written leaves the committed row without them. */
static void finish_report(fed_node *n, fed_node_round_info *info, fed_store_round *row)
{
    if (!isnan(info->accuracy)) {
        row->loss = info->loss;
        row->accuracy = info->accuracy;
        (void)record_figures(n, row); /* logged */
        fed_log(FED_LOG_INFO, "aggregator: round %llu accuracy %.4f loss %.4f%s",
                (unsigned long long)info->round, info->accuracy, info->loss,
                n->agg->eval_local ? " (not meaningful: tensors that stay at the sites are "
                                     "this node's initial ones)" : "");
    }
    if (!n->cfg.agg.eval_every) /* else the sites' evaluation judges (site_eval.c) */
        fedi_node_agg_judge(n, info->round);
    if (n->cfg.on_round)
        n->cfg.on_round(n->cfg.observer, n, info);
}

static void eval_job_run(fed_job *job)
{
    agg_eval *ev = (agg_eval *)job;

    ev->err = fed_train_evaluate_report(ev->model, ev->test, ev->rep);
}

/* The evaluation of ev->info's round is done: its figures recorded and
 * reported. */
static void eval_done(fed_node *n)
{
    agg_eval *ev = &n->agg->ev;

    if (ev->err == FED_OK && ev->rep->st.samples) {
        const fed_step_stats *st = &ev->rep->st;

        ev->info.loss = st->loss_sum / (double)st->samples;
        ev->info.accuracy = (double)st->correct / (double)st->samples;
        fed_eval_report_head(ev->rep, &ev->info.metrics);
        record_metrics(n, ev->info.round);
    }
    finish_report(n, &ev->info, &ev->row);
}

/* params (nparams floats) into the evaluation model and the job out. */
static fed_err eval_submit(fed_node *n, const float *params, const fed_node_round_info *info,
                           const fed_store_round *row)
{
    agg_eval *ev = &n->agg->ev;
    fed_err e = fed_model_set_params(ev->model, params);

    if (e != FED_OK)
        return e;
    ev->job.fn = eval_job_run;
    ev->job.user = n;
    ev->job.idle = 1;
    ev->test = n->cfg.data.test;
    ev->info = *info;
    ev->row = *row;
    ev->busy = 1;
    if ((e = (fed_err)n->env.submit(n->env.self, &ev->job)) != FED_OK)
        ev->busy = 0;
    return e;
}

/* The round waits for the evaluation in flight, after any that wait
 * already; when the queue is full its oldest round is reported now,
 * without an accuracy. */
static fed_err eval_defer(fed_node *n, const fed_node_round_info *info)
{
    node_agg *a = n->agg;
    agg_eval *ev = &a->ev;
    size_t bytes = a->nparams * sizeof(float);
    agg_eval_wait *w;

    if (!ev->cap_wait) {
        size_t fit = bytes ? AGG_EVAL_QUEUE_BYTES / bytes : AGG_EVAL_QUEUE_MAX;

        ev->cap_wait = fit < 1 ? 1 : fit > AGG_EVAL_QUEUE_MAX ? AGG_EVAL_QUEUE_MAX : fit;
    }
    if (ev->nwait == ev->cap_wait) {
        w = &ev->wait[ev->head];
        fed_log(FED_LOG_INFO, "aggregator: round %llu is not evaluated: %zu newer rounds wait "
                              "for the evaluation (no idle CPU)",
                (unsigned long long)w->info.round, ev->nwait);
        finish_report(n, &w->info, &w->row);
        ev->head = (ev->head + 1) % ev->cap_wait;
        ev->nwait--;
    }
    w = &ev->wait[(ev->head + ev->nwait) % ev->cap_wait];
    if (!w->params && !(w->params = fed_malloc(bytes ? bytes : 1)))
        return FED_ERR_NOMEM;
    memcpy(w->params, a->host, bytes);
    w->info = *info;
    w->row = a->last_row;
    ev->nwait++;
    return FED_OK;
}

/* The evaluation's own model, report and names. */
static fed_err eval_model_new(fed_node *n)
{
    agg_eval *ev = &n->agg->ev;
    fed_err e;

    if ((e = fed_model_new(fed_node_cfg_whole(&n->cfg), n->cfg.shape, n->cfg.be, NULL,
                           n->cfg.shards, 256,
                           &ev->model)) != FED_OK ||
        (e = fed_eval_report_new(fed_model_input(ev->model).classes, &ev->rep)) != FED_OK)
        return e;
    if (!(ev->named = fed_malloc(fed_eval_report_named_max(ev->rep) * sizeof *ev->named)))
        return FED_ERR_NOMEM;
    return FED_OK;
}

static void eval_model_free(agg_eval *ev)
{
    fed_model_free(ev->model);
    fed_eval_report_free(ev->rep);
    fed_free(ev->named);
    ev->model = NULL;
    ev->rep = NULL;
    ev->named = NULL;
}

/* The round just committed is evaluated on the held-out data in an idle
 * job, on a copy of its parameters, while the loop starts the next round
 * (its last client's NEXT must not wait behind the evaluation). When no
 * job can be made, the loop evaluates itself. */
void fedi_node_agg_report_round(fed_node *n, fed_node_round_info *info)
{
    node_agg *a = n->agg;
    agg_eval *ev = &a->ev;

    if (!n->cfg.data.test) {
        finish_report(n, info, &a->last_row);
        return;
    }
    if (!ev->model && eval_model_new(n) != FED_OK)
        eval_model_free(ev); /* the loop evaluates itself */
    if (ev->model && n->cfg.agg.early_stop && !ev->busy &&
        fed_model_set_params(ev->model, a->host) == FED_OK) {
        /* the rule judges this round before the next one starts: here, now */
        ev->test = n->cfg.data.test;
        ev->info = *info;
        ev->row = a->last_row;
        eval_job_run(&ev->job);
        eval_done(n);
        return;
    }
    if (ev->model &&
        (ev->busy ? eval_defer(n, info) : eval_submit(n, a->host, info, &a->last_row)) == FED_OK)
        return;
    evaluate(n, info);
    finish_report(n, info, &a->last_row);
}

fed_err fedi_node_agg_on_job(fed_node *n, fed_job *job)
{
    agg_eval *ev = &n->agg->ev;
    fed_err e;

    if (job != &ev->job || !ev->busy)
        return FED_ERR_INTERNAL;
    ev->busy = 0;
    eval_done(n);
    e = ev->err;
    while (ev->nwait > 0) { /* the next waiting round, in order */
        agg_eval_wait *w = &ev->wait[ev->head];
        fed_node_round_info info = w->info;
        fed_store_round row = w->row;

        ev->head = (ev->head + 1) % ev->cap_wait;
        ev->nwait--;
        if (eval_submit(n, w->params, &info, &row) == FED_OK)
            break;
        finish_report(n, &info, &row); /* without an accuracy */
    }
    return e;
}

void fedi_node_agg_eval_free(node_agg *a)
{
    eval_model_free(&a->ev);
    for (size_t i = 0; i < AGG_EVAL_QUEUE_MAX; i++)
        fed_free(a->ev.wait[i].params);
    fed_free(a->pending.rows);
}
