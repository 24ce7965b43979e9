/* test_pipeline.c - pipeline stages (model/pipeline.h, fed_model_new_stage,
 * fed_trainer_new_stage) in one process: each stage a thread of its own
 * with its own backend and pool, the pipe between them in-process queues.
 * The parameters after a few steps are, bit for bit, those of one model
 * trained with the same micro-batches in GPipe's order
 * (fed_trainer_set_gpipe_order), for a deep MLP and ResNet-8 (batch norm's
 * statistics per micro-batch) at S = 2 and 3; the evaluation through the
 * pipeline counts what the whole model counts; each stage holds its share
 * of the parameters; the split's refusals. The same over MPI processes:
 * tests/test_pipeline.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/model.h"
#include "model/model_cfg.h"
#include "model/optim.h"
#include "model/pipeline.h"
#include "model/train.h"
#include "tests/support/support.h"

#define SHARDS 2
#define MAXS 4

/* ---- the in-process pipe: one queue of messages per (from, to) ---- */

typedef struct msg {
    struct msg *next;
    size_t n;
    float v[];
} msg;

typedef struct pipes {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    msg *head[MAXS][MAXS], *tail[MAXS][MAXS];
} pipes;

typedef struct end {
    pipes *p;
    int stage;
} end;

static fed_err q_send(void *ctx, int peer, const float *buf, size_t n)
{
    end *e = ctx;
    msg *m = malloc(sizeof *m + n * sizeof(float));

    if (!m)
        return FED_ERR_NOMEM;
    m->next = NULL;
    m->n = n;
    memcpy(m->v, buf, n * sizeof(float));
    pthread_mutex_lock(&e->p->mu);
    if (e->p->tail[e->stage][peer])
        e->p->tail[e->stage][peer]->next = m;
    else
        e->p->head[e->stage][peer] = m;
    e->p->tail[e->stage][peer] = m;
    pthread_cond_broadcast(&e->p->cv);
    pthread_mutex_unlock(&e->p->mu);
    return FED_OK;
}

static fed_err q_recv(void *ctx, int peer, float *buf, size_t n)
{
    end *e = ctx;
    msg *m;

    pthread_mutex_lock(&e->p->mu);
    while (!(m = e->p->head[peer][e->stage]))
        pthread_cond_wait(&e->p->cv, &e->p->mu);
    e->p->head[peer][e->stage] = m->next;
    if (!m->next)
        e->p->tail[peer][e->stage] = NULL;
    pthread_mutex_unlock(&e->p->mu);
    if (m->n != n) {
        free(m);
        return FED_ERR_PAYLOAD;
    }
    memcpy(buf, m->v, n * sizeof(float));
    free(m);
    return FED_OK;
}

/* ---- a case: a model, its data, S stages ---- */

typedef struct pcase {
    const char *spec;
    fed_model_shape in;
    fed_dataset *d;
    int S, M, batch;
    size_t nsamples;
    float *params;     /* (whole nparams) the stages' parameters laid end to end */
    fed_pipe_stage st[MAXS];
    fed_step_stats eval[MAXS];
    size_t stage_np[MAXS];
    pipes pq;
} pcase;

typedef struct stage_job {
    pcase *c;
    int s;
    fed_err err;
} stage_job;

static fed_optim *sgd(fed_model *m)
{
    fed_optim_cfg cfg;
    fed_optim *o = NULL;

    fed_optim_cfg_default(&cfg, FED_OPTIM_SGD);
    cfg.lr = 0.05f;
    cfg.momentum = 0.9f;
    assert_int_equal(fed_optim_new(&cfg, m, &o), FED_OK);
    return o;
}

static void *stage_main(void *arg)
{
    stage_job *j = arg;
    pcase *c = j->c;
    fed_backend *be = NULL;
    fed_pool *pool = NULL;
    fed_model *m = NULL;
    fed_optim *o = NULL;
    fed_trainer *t = NULL;
    uint32_t *idx = malloc(c->nsamples * sizeof *idx);
    end e = {&c->pq, j->s};
    fed_train_pipe pipe = {j->s, c->S, q_send, q_recv, &e};
    fed_rng init, shuffle;
    fed_err err;

    for (size_t i = 0; i < c->nsamples; i++)
        idx[i] = (uint32_t)i;
    fed_rng_seed_stream(&init, 1, 0);
    fed_rng_seed_stream(&shuffle, 1, 1);
    if ((err = fed_backend_open("cpu", &be)) != FED_OK ||
        (err = fed_pool_new(SHARDS - 1, &pool)) != FED_OK ||
        (err = fed_model_new_stage(c->spec, c->in, c->st[j->s].lo, c->st[j->s].hi, be, pool,
                                   SHARDS, fed_trainer_micro_batch(c->batch, c->M), &m)) !=
            FED_OK ||
        (err = fed_model_init(m, &init)) != FED_OK)
        goto out;
    o = sgd(m);
    if ((err = fed_trainer_new_stage(m, o, c->d, c->batch, c->M, &pipe, &t)) != FED_OK ||
        (err = fed_trainer_epoch(t, idx, c->nsamples, &shuffle, NULL)) != FED_OK ||
        (err = fed_trainer_pipe_evaluate(t, c->d, &c->eval[j->s])) != FED_OK)
        goto out;
    c->stage_np[j->s] = fed_model_nparams(m);
    if (fed_model_nparams(m) == c->st[j->s].p_hi - c->st[j->s].p_lo)
        err = fed_model_get_params(m, c->params + c->st[j->s].p_lo);
    else
        err = FED_ERR_SHAPE;
out:
    j->err = err;
    fed_trainer_free(t);
    fed_optim_free(o);
    fed_model_free(m);
    fed_pool_free(pool);
    fed_backend_free(be);
    free(idx);
    return NULL;
}

/* The reference: the whole model, the same micro-batches in GPipe's order. */
static float *reference(pcase *c, size_t *np, fed_step_stats *ev)
{
    fed_backend *be = NULL;
    fed_pool *pool = NULL;
    fed_model *m = NULL;
    fed_optim *o;
    fed_trainer *t = NULL;
    uint32_t *idx = malloc(c->nsamples * sizeof *idx);
    fed_rng init, shuffle;
    float *p;

    for (size_t i = 0; i < c->nsamples; i++)
        idx[i] = (uint32_t)i;
    fed_rng_seed_stream(&init, 1, 0);
    fed_rng_seed_stream(&shuffle, 1, 1);
    assert_int_equal(fed_backend_open("cpu", &be), FED_OK);
    assert_int_equal(fed_pool_new(SHARDS - 1, &pool), FED_OK);
    assert_int_equal(fed_model_new(c->spec, c->in, be, pool, SHARDS,
                                   fed_trainer_micro_batch(c->batch, c->M), &m), FED_OK);
    assert_int_equal(fed_model_init(m, &init), FED_OK);
    o = sgd(m);
    assert_int_equal(fed_trainer_new_acc(m, o, c->d, c->batch, c->M, &t), FED_OK);
    fed_trainer_set_gpipe_order(t, 1);
    assert_int_equal(fed_trainer_epoch(t, idx, c->nsamples, &shuffle, NULL), FED_OK);
    assert_int_equal(fed_train_evaluate_all(m, c->d, ev), FED_OK);
    *np = fed_model_nparams(m);
    p = malloc(*np * sizeof *p);
    assert_int_equal(fed_model_get_params(m, p), FED_OK);
    fed_trainer_free(t);
    fed_optim_free(o);
    fed_model_free(m);
    fed_pool_free(pool);
    fed_backend_free(be);
    free(idx);
    return p;
}

static fed_dataset *random_images(fed_model_shape in, size_t n)
{
    fed_dataset *d = calloc(1, sizeof *d);
    fed_rng rng;

    fed_rng_seed(&rng, 99);
    d->n = n;
    d->shape = in;
    d->features = (size_t)in.c * in.h * in.w;
    d->x_u8 = malloc(n * d->features);
    d->y = malloc(n * sizeof *d->y);
    for (size_t i = 0; i < n; i++) {
        d->y[i] = (int32_t)fed_rng_below(&rng, (uint64_t)in.classes);
        for (size_t f = 0; f < d->features; f++) /* class-dependent bands: learnable */
            d->x_u8[i * d->features + f] = (uint8_t)(fed_rng_below(&rng, 100) +
                                                     (f * (size_t)in.classes / d->features ==
                                                      (size_t)d->y[i] ? 150 : 0));
    }
    return d;
}

static void images_free(fed_dataset *d)
{
    free(d->x_u8);
    free(d->y);
    free(d);
}

/* Trains c at S stages and at one, compares. */
static void pipeline_equals_reference(pcase *c)
{
    pthread_t th[MAXS];
    stage_job jobs[MAXS];
    fed_step_stats ev = {0};
    size_t np = 0, sum = 0;
    float *ref;
    char why[256];

    c->d = random_images(c->in, c->nsamples);
    ref = reference(c, &np, &ev);
    assert_int_equal(fed_pipe_plan(c->spec, c->in, c->S, c->st, why, sizeof why), FED_OK);
    assert_int_equal(c->st[c->S - 1].p_hi, np);
    c->params = calloc(np, sizeof *c->params);
    memset(c->eval, 0, sizeof c->eval);
    pthread_mutex_init(&c->pq.mu, NULL);
    pthread_cond_init(&c->pq.cv, NULL);
    memset(c->pq.head, 0, sizeof c->pq.head);
    memset(c->pq.tail, 0, sizeof c->pq.tail);
    for (int s = 0; s < c->S; s++) {
        jobs[s] = (stage_job){c, s, FED_OK};
        assert_int_equal(pthread_create(&th[s], NULL, stage_main, &jobs[s]), 0);
    }
    for (int s = 0; s < c->S; s++)
        pthread_join(th[s], NULL);
    for (int s = 0; s < c->S; s++) {
        if (jobs[s].err != FED_OK)
            fail_msg("%s S=%d: stage %d: %s", c->spec, c->S, s, fed_strerror(jobs[s].err));
        assert_true(c->st[s].lo < c->st[s].hi);
        sum += c->stage_np[s];
    }
    assert_int_equal(sum, np); /* each stage holds its own share, no more */
    for (size_t i = 0; i < np; i++)
        if (memcmp(&c->params[i], &ref[i], sizeof(float)) != 0)
            fail_msg("%.40s S=%d: parameter %zu: %.9g piped, %.9g in one model", c->spec, c->S,
                     i, (double)c->params[i], (double)ref[i]);
    /* the evaluation through the pipeline: the first and last stages know it */
    assert_int_equal(c->eval[0].samples, (long)c->nsamples);
    assert_int_equal(c->eval[0].correct, ev.correct);
    assert_int_equal(c->eval[c->S - 1].correct, ev.correct);
    pthread_cond_destroy(&c->pq.cv);
    pthread_mutex_destroy(&c->pq.mu);
    free(c->params);
    free(ref);
    images_free(c->d);
}

static void file_spec(const char *path, char *spec, size_t cap)
{
    fed_model_cfg *c = NULL;
    char why[512];

    assert_int_equal(fed_model_cfg_load(path, &c, why, sizeof why), FED_OK);
    assert_int_equal(fed_model_cfg_spec(c, spec, cap, why, sizeof why), FED_OK);
    fed_model_cfg_free(c);
}

/* A deep MLP, 2 and 3 stages; steps of 24 in 4 micro-batches of 6. */
static void test_mlp_stages(void **state)
{
    (void)state;
    for (int S = 2; S <= 3; S++) {
        pcase c = {.spec = "mlp:256,256,256,256", .in = {1, 8, 8, 10, 0}, .S = S, .M = 4,
                   .batch = 24, .nsamples = 100};

        pipeline_equals_reference(&c);
    }
}

/* ResNet-8 (batch norm: statistics per micro-batch, running statistics
 * updated in the backward's order), 2 and 3 stages, cut between blocks. */
static void test_resnet8_stages(void **state)
{
    static char spec[FED_MODEL_GRAPH_MAX];

    (void)state;
    file_spec("examples/models/resnet8.cfg", spec, sizeof spec);
    for (int S = 2; S <= 3; S++) {
        pcase c = {.spec = spec, .in = {1, 28, 28, 10, 0}, .S = S, .M = 3, .batch = 12,
                   .nsamples = 30};

        pipeline_equals_reference(&c);
    }
}

/* The split: balanced by FLOPs, cut only between blocks; refused when S
 * exceeds the places a cut may go, a stage across a residual, dropout. */
static void test_split(void **state)
{
    static char spec[FED_MODEL_GRAPH_MAX];
    fed_model_shape in = {1, 28, 28, 10, 0};
    fed_pipe_stage st[FED_PIPE_MAX_STAGES];
    fed_model_layer_cost *c = NULL;
    fed_backend *be = NULL;
    fed_model *m = (fed_model *)1;
    int count = 0, cuts = 0;
    char why[256];

    (void)state;
    fed_test_log_quiet();
    /* four equal layers of 100 x 100 in two stages: two each */
    assert_int_equal(fed_pipe_plan("mlp:100,100,100", (fed_model_shape){1, 10, 10, 100, 0}, 2, st,
                                   why, sizeof why), FED_OK);
    assert_int_equal(st[0].lo, 0);
    assert_int_equal(st[0].hi, 2);
    assert_int_equal(st[1].hi, 4);
    assert_int_equal(st[0].p_hi, st[1].p_lo);
    assert_int_equal(st[1].in_numel, 100);
    assert_int_equal(fed_pipe_plan("mlp:100", in, 3, st, why, sizeof why), FED_ERR_SPEC);
    assert_non_null(strstr(why, "2 stages at most"));
    assert_int_equal(fed_pipe_plan("mlp:100", in, 0, st, why, sizeof why), FED_ERR_INVAL);
    file_spec("examples/models/resnet8.cfg", spec, sizeof spec);
    assert_int_equal(fed_model_spec_layers(spec, in, &c, &count), FED_OK);
    for (int l = 0; l + 1 < count; l++) {
        cuts += c[l].cut_after;
        if (!strcmp(c[l].name, "layer1.0.conv1"))
            assert_false(c[l].cut_after); /* inside a block: the add takes its input */
    }
    assert_int_equal(cuts, 6); /* around the stem's batch norm, after each block, the pool */
    assert_int_equal(fed_pipe_plan(spec, in, 8, st, why, sizeof why), FED_ERR_SPEC);
    assert_int_equal(fed_pipe_plan(spec, in, 7, st, why, sizeof why), FED_OK);
    assert_int_equal(fed_backend_open("cpu", &be), FED_OK);
    for (int l = 0; l + 1 < count; l++)
        if (!c[l].cut_after) { /* a stage across a residual */
            assert_int_equal(fed_model_new_stage(spec, in, 0, l + 1, be, NULL, 1, 4, &m),
                             FED_ERR_SPEC);
            assert_null(m);
            break;
        }
    assert_int_equal(fed_model_new_stage("g:L8,R,Dr100000,L", (fed_model_shape){1, 4, 4, 10, 0},
                                         0, 1, be, NULL, 1, 4, &m),
                     FED_ERR_UNSUPPORTED);
    fed_free(c);
    fed_backend_free(be);
    fed_test_log_default();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_mlp_stages),
        cmocka_unit_test(test_resnet8_stages),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
