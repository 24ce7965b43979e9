/* train.c - the local training loop of train.h: shuffle, gather, step,
 * evaluate, and DP-SGD's loop (Poisson draw, clipped gradients in pieces,
 * noise, step). Owns the staging buffers and the shuffled index copy of one
 * trainer; allocates only in fed_trainer_new and fed_trainer_set_dp. Never
 * prints, never reads a clock, never draws randomness except from the rng
 * and the random source it is handed. */
#include "model/train.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/data.h"
#include "model/dp.h"

struct fed_trainer {
    fed_model *m;
    fed_optim *o;
    const fed_dataset *d;
    int batch;          /* samples of one optimizer step (of this rank's share) */
    int accumulate;     /* micro-batches each step's gradient is summed over */
    int reverse;        /* fed_trainer_set_gpipe_order: micro-batches last to first */
    int micro;          /* the largest micro-batch, ceil(batch / accumulate) */
    float *acc;         /* (nparams) the step's gradient while it is summed; NULL
                           with accumulate 1 */
    void *x_stage;      /* (batch, features) uint8 or float */
    int32_t *y_stage;   /* (batch) */
    uint32_t *order;    /* (cap) shuffled copy of the epoch's indices, or DP's draw */
    size_t cap;
    int stage;          /* samples the staging buffers hold */
    fed_train_progress_fn progress;
    void *progress_ctx;
    int rank, size;     /* fed_trainer_set_ranks; 0 of 1 alone */
    fed_train_reduce_fn reduce;
    void *reduce_ctx;
    int dp;             /* DP-SGD: fed_trainer_set_dp */
    fed_trainer_dp dpc;
    long dp_steps;
    fed_data_aug aug;   /* fed_trainer_set_augment */
    fed_rng aug_rng;
    uint8_t *aug_scratch; /* (features), NULL: no augmentation */
    double noise_std;   /* fed_trainer_set_noise; 0: none */
    fed_rng noise_rng;
    float *noise_x;     /* (max_batch, features): a uint8 batch as floats */
    /* a pipeline stage (fed_trainer_new_stage): the pipe, and the buffers
       of what crosses it: each micro-batch's input (stages after the
       first), the output and its gradient (stages before the last) */
    int piped;
    fed_train_pipe pipe;
    size_t in_numel, out_numel; /* a sample's values in and out of the stage */
    float *stash;       /* (accumulate, micro, in_numel) */
    float *out_buf;     /* (micro, out_numel): the output, then its gradient */
    float *dx;          /* (micro, in_numel) */
};

/* A model with embeddings: its categorical columns (those they read) are
 * the data's (hashed by the CSV reader), and each embedding takes every id
 * the data can give (its --hash-buckets); else says which, and 0. A model
 * without one takes any ids as plain numbers (docs/data.md). */
static int fits_categorical(const fed_model *m, const fed_dataset *d)
{
    int any = 0;

    for (size_t j = 0; j < d->features && !any; j++)
        any = fed_model_categorical(m, (int)j, NULL);
    for (size_t j = 0; any && j < d->features; j++) {
        int num = 0, mc = fed_model_categorical(m, (int)j, &num);
        int dc = d->categorical && d->categorical[j];

        if (mc && !dc)
            fed_log(FED_LOG_ERROR, "train: feature column %zu (from 0, the label left out): an "
                    "embedding reads ids from it, the data does not hash it (--categorical)", j);
        else if (dc && !mc)
            fed_log(FED_LOG_ERROR, "train: feature column %zu (from 0, the label left out): the "
                    "data hashes it (--categorical), no embedding reads it", j);
        else if (mc && num < d->hash_buckets)
            fed_log(FED_LOG_ERROR, "train: feature column %zu (from 0, the label left out): an "
                    "embedding of it takes %d ids, the data gives up to %d (--hash-buckets)", j,
                    num, d->hash_buckets);
        else
            continue;
        return 0;
    }
    return 1;
}

fed_err fed_train_task_check(const fed_model *m, const fed_dataset *d, char *why, size_t cap)
{
    if (d->y_f32 && !fed_model_regression(m)) {
        fed_model_shape in = fed_model_input(m);

        /* the reason building the model for this data gives, as train says it */
        in.classes = d->shape.classes;
        if (fed_model_spec_explain(fed_model_graph(m), in, why, cap) != FED_OK)
            return FED_ERR_SHAPE;
        return fed_err_why(why, cap, FED_ERR_SHAPE, "the data's labels are numbers (--task "
                           "regression), the model's loss is not mse");
    }
    if (!d->y_f32 && fed_model_regression(m))
        return fed_err_why(why, cap, FED_ERR_SHAPE, "the model's loss mse takes numbers, the "
                           "data's labels are classes (--task regression reads them as numbers)");
    if (d->y_f32 && fed_model_nlogits(m) != 1)
        return fed_err_why(why, cap, FED_ERR_SHAPE, "the data has one number to predict a row, "
                           "the model gives %d outputs", fed_model_nlogits(m));
    return FED_OK;
}

/* fed_train_task_check, its refusal logged: 1 when d fits m's loss. */
static int fits_task(const fed_model *m, const fed_dataset *d)
{
    char why[320];

    if (fed_train_task_check(m, d, why, sizeof why) == FED_OK)
        return 1;
    fed_log(FED_LOG_ERROR, "train: %s", why);
    return 0;
}

/* A trainer's common fields: m trained by o on d in steps of batch rows,
 * accumulate micro-batches of micro rows each; one rank. */
static fed_trainer *trainer_alloc(fed_model *m, fed_optim *o, const fed_dataset *d, int batch,
                                  int accumulate, int micro)
{
    fed_trainer *t = fed_calloc(1, sizeof *t);

    if (!t)
        return NULL;
    t->m = m;
    t->o = o;
    t->d = d;
    t->batch = batch;
    t->accumulate = accumulate;
    t->micro = t->stage = micro;
    t->size = 1;
    return t;
}

/* Whether m ends with the whole graph's loss (a whole model, or a
 * pipeline's last stage): only then are its outputs the task's. */
static int stage_last(const fed_model *m)
{
    int lo, hi;

    return fed_model_stage_layers(m, &lo, &hi) == hi;
}

long fed_train_batches(size_t n, int batch)
{
    return batch > 0 ? (long)((n + (size_t)batch - 1) / (size_t)batch) : 0;
}

fed_err fed_trainer_new(fed_model *m, fed_optim *o, const fed_dataset *d, int batch,
                        fed_trainer **out)
{
    return fed_trainer_new_acc(m, o, d, batch, 1, out);
}

int fed_trainer_micro_batch(int batch, int accumulate)
{
    assert(batch >= 1 && accumulate >= 1);
    return (batch + accumulate - 1) / accumulate;
}

fed_err fed_trainer_new_acc(fed_model *m, fed_optim *o, const fed_dataset *d, int batch,
                            int accumulate, fed_trainer **out)
{
    fed_trainer *t;
    fed_model_shape ms = fed_model_input(m);
    size_t elem;
    int micro;

    *out = NULL;
    if (batch < 1 || accumulate < 1 || accumulate > batch || !d || (!d->x_u8 && !d->x_f32))
        return FED_ERR_INVAL;
    micro = fed_trainer_micro_batch(batch, accumulate);
    if (micro > fed_model_max_batch(m))
        return FED_ERR_INVAL;
    if (accumulate > 1 && !(fed_model_backend(m)->caps & FED_BACKEND_CAP_HOST_MEMORY))
        return FED_ERR_UNSUPPORTED; /* the sum is kept on the host */
    if (ms.c != d->shape.c || ms.h != d->shape.h || ms.w != d->shape.w ||
        ms.classes < d->shape.classes) {
        fed_log(FED_LOG_ERROR, "train: model input %dx%dx%d/%d does not fit data %dx%dx%d/%d",
                ms.c, ms.h, ms.w, ms.classes, d->shape.c, d->shape.h, d->shape.w,
                d->shape.classes);
        return FED_ERR_SHAPE;
    }
    if (!fits_categorical(m, d) || (stage_last(m) && !fits_task(m, d)))
        return FED_ERR_SHAPE;
    if (!(t = trainer_alloc(m, o, d, batch, accumulate, micro)))
        return FED_ERR_NOMEM;
    elem = d->x_u8 ? 1 : sizeof(float);
    t->x_stage = fed_alloc_aligned((size_t)micro * d->features * elem);
    t->y_stage = fed_malloc((size_t)micro * sizeof *t->y_stage);
    t->cap = d->n;
    t->order = fed_malloc((t->cap ? t->cap : 1) * sizeof *t->order);
    if (accumulate > 1)
        t->acc = fed_alloc_aligned(fed_model_nparams(m) * sizeof *t->acc);
    if (!t->x_stage || !t->y_stage || !t->order || (accumulate > 1 && !t->acc)) {
        fed_trainer_free(t);
        return FED_ERR_NOMEM;
    }
    *out = t;
    return FED_OK;
}

void fed_trainer_free(fed_trainer *t)
{
    if (!t)
        return;
    fed_free(t->x_stage);
    fed_free(t->y_stage);
    fed_free(t->order);
    fed_free(t->aug_scratch);
    fed_free(t->noise_x);
    fed_free(t->acc);
    fed_free(t->stash);
    fed_free(t->out_buf);
    fed_free(t->dx);
    fed_free(t);
}

void fed_trainer_set_progress(fed_trainer *t, fed_train_progress_fn fn, void *ctx)
{
    t->progress = fn;
    t->progress_ctx = ctx;
}

static fed_err check_indices(const fed_trainer *t, const uint32_t *idx, size_t n)
{
    if (n > t->cap)
        return FED_ERR_RANGE;
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= t->d->n)
            return FED_ERR_RANGE;
    return FED_OK;
}

fed_err fed_trainer_set_augment(fed_trainer *t, const fed_data_aug *a, uint64_t seed)
{
    if (!a->crop && !a->flip)
        return FED_OK;
    if (!t->d->x_u8 || t->size > 1)
        return FED_ERR_UNSUPPORTED;
    if (!t->aug_scratch && !(t->aug_scratch = fed_malloc(t->d->features)))
        return FED_ERR_NOMEM;
    t->aug = *a;
    fed_rng_seed_stream(&t->aug_rng, seed, 0x617567); /* "aug" */
    return FED_OK;
}

fed_err fed_trainer_set_noise(fed_trainer *t, double std, uint64_t seed)
{
    size_t room = (size_t)fed_model_max_batch(t->m) * t->d->features;

    if (!(std >= 0) || !isfinite(std))
        return FED_ERR_INVAL;
    if (std == 0)
        return FED_OK;
    if (t->size > 1)
        return FED_ERR_UNSUPPORTED;
    if (t->d->x_u8 && !t->noise_x && !(t->noise_x = fed_alloc_aligned(room * sizeof(float))))
        return FED_ERR_NOMEM;
    t->noise_std = std;
    fed_rng_seed_stream(&t->noise_rng, seed, 0x6e6f697365); /* "noise" */
    return FED_OK;
}

/* The batch's inputs plus Gaussian noise of std t->noise_std, in the
 * model's input scale: image bytes become floats first (as the model maps
 * them), CSV features take it in the staging copy. */
static void add_noise(fed_trainer *t, fed_batch *b)
{
    size_t cnt = (size_t)b->n * t->d->features;
    float *x = t->x_stage, mul, add;

    if (b->x_u8) {
        size_t c = (size_t)t->d->shape.c, plane = t->d->features / c;

        fed_model_input_map(fed_model_input(t->m).scale, &mul, &add);
        for (size_t i = 0; i < cnt; i++) {
            size_t k = i % t->d->features / plane; /* its channel */
            float v = (float)b->x_u8[i] * (b->x_map ? b->x_map[2 * k] : mul);

            t->noise_x[i] = v + (b->x_map ? b->x_map[2 * k + 1] : add);
        }
        x = t->noise_x;
        b->x_u8 = NULL;
        b->x_f32 = x;
        b->x_map = NULL;
    }
    for (size_t i = 0; i < cnt; i++)
        x[i] += (float)(t->noise_std * fed_rng_normal(&t->noise_rng));
}

/* A training batch: gathered, then augmented and made noisy when asked. */
static void train_gather(fed_trainer *t, const uint32_t *idx, int n, fed_batch *b)
{
    fed_data_gather(t->d, idx, n, t->x_stage, t->y_stage, b);
    if (t->aug_scratch)
        fed_data_augment(&t->aug, &t->aug_rng, &t->d->shape, t->x_stage, n, t->aug_scratch);
    if (t->noise_std > 0)
        add_noise(t, b);
}

fed_err fed_trainer_set_dp(fed_trainer *t, const fed_trainer_dp *dp)
{
    int room = fed_model_max_batch(t->m);
    size_t elem = t->d->x_u8 ? 1 : sizeof(float);
    void *x;
    int32_t *y;

    if (t->size > 1 || t->accumulate > 1) /* DP-SGD sums its draw in pieces of its own */
        return FED_ERR_UNSUPPORTED;
    if (!t->o || !dp || !dp->random || !(dp->clip > 0.0f) || !isfinite(dp->clip) ||
        !(dp->noise >= 0.0f) || !isfinite(dp->noise))
        return FED_ERR_INVAL;
    if (!(fed_model_backend(t->m)->caps & FED_BACKEND_CAP_DP_SGD))
        return FED_ERR_UNSUPPORTED;
    {
        char why[320];
        fed_err err = fed_model_dp_check(t->m, why, sizeof why);

        if (err != FED_OK) { /* a layer it cannot train, by name */
            fed_log(FED_LOG_ERROR, "%s", why);
            return err;
        }
    }
    if (room > t->stage) { /* a Poisson draw runs over the batch size: stage up to max_batch */
        x = fed_alloc_aligned((size_t)room * t->d->features * elem);
        y = fed_malloc((size_t)room * sizeof *y);
        if (!x || !y) {
            fed_free(x);
            fed_free(y);
            return FED_ERR_NOMEM;
        }
        fed_free(t->x_stage);
        fed_free(t->y_stage);
        t->x_stage = x;
        t->y_stage = y;
        t->stage = room;
    }
    t->dpc = *dp;
    t->dp = 1;
    return FED_OK;
}

fed_err fed_trainer_set_ranks(fed_trainer *t, int rank, int size, fed_train_reduce_fn reduce,
                              void *ctx)
{
    if (size < 1 || rank < 0 || rank >= size || (size > 1 && !reduce) ||
        (long)size * t->batch > (long)INT32_MAX)
        return FED_ERR_INVAL;
    if (size > 1 && (t->dp || t->aug_scratch || t->noise_std > 0 ||
                     !(fed_model_backend(t->m)->caps & FED_BACKEND_CAP_HOST_MEMORY)))
        return FED_ERR_UNSUPPORTED;
    t->rank = rank;
    t->size = size;
    t->reduce = reduce;
    t->reduce_ctx = ctx;
    return FED_OK;
}

void fed_trainer_set_gpipe_order(fed_trainer *t, int on)
{
    t->reverse = on != 0;
}

long fed_trainer_dp_steps(const fed_trainer *t)
{
    return t->dp_steps;
}

double fed_trainer_dp_rate(const fed_trainer *t, size_t n)
{
    return n == 0 ? 0.0 : n <= (size_t)t->batch ? 1.0 : (double)t->batch / (double)n;
}

/* One DP-SGD step over idx[0..n): a Poisson draw at rate q = batch / n, the
 * clipped gradients of the draw (in pieces of the staging room) divided by
 * the expected batch q n, noise of standard deviation noise * clip / (q n)
 * on every parameter, the optimizer's step. An empty draw steps on the noise
 * alone, as the accounting assumes. */
static fed_err dp_step(fed_trainer *t, const uint32_t *idx, size_t n, fed_step_stats *st)
{
    double q = fed_trainer_dp_rate(t, n), expected = q * (double)n;
    float scale = (float)(1.0 / expected);
    size_t k = fed_dp_poisson(t->dpc.random, t->dpc.random_ctx, idx, n, q, t->order);
    fed_model *m = t->m;
    fed_err err;

    for (size_t off = 0; off < k || off == 0; off += (size_t)t->stage) {
        int bn = k - off < (size_t)t->stage ? (int)(k - off) : t->stage;
        fed_batch b = {0};

        if (bn > 0)
            train_gather(t, t->order + off, bn, &b);
        else
            b.y = t->y_stage;
        err = fed_model_dp_grads(m, &b, t->dpc.clip, scale, off > 0, NULL, st);
        if (err != FED_OK)
            return err;
        if (k == 0)
            break;
    }
    err = fed_dp_add_noise(t->dpc.random, t->dpc.random_ctx, fed_model_grads_dev(m),
                           fed_model_nparams(m), (double)t->dpc.noise * t->dpc.clip / expected);
    if (err == FED_OK)
        err = fed_optim_step(t->o, m);
    if (err == FED_OK)
        t->dp_steps++;
    return err;
}

static fed_err dp_steps(fed_trainer *t, const uint32_t *idx, size_t n, long steps,
                        fed_step_stats *st)
{
    fed_err err;

    for (long s = 0; s < steps && n; s++) {
        fed_step_stats one = {0};

        if ((err = dp_step(t, idx, n, &one)) != FED_OK)
            return err;
        if (!isfinite(one.loss_sum)) {
            fed_log(FED_LOG_ERROR, "train: loss is not finite after %ld steps (lr too high?)",
                    fed_optim_steps(t->o));
            return FED_ERR_NAN;
        }
        if (st) {
            st->loss_sum += one.loss_sum;
            st->correct += one.correct;
            st->samples += one.samples;
        }
        if (t->progress) {
            size_t done = (size_t)(s + 1) * (size_t)t->batch;

            t->progress(t->progress_ctx, (long)(done < n ? done : n), (long)n);
        }
    }
    return FED_OK;
}

/* The j-th (from 0, in the order they run) of a step's pieces micro-batches,
 * of cnt samples of gbn: its mean gradient times cnt / gbn, kept in t->acc
 * (the first) or added to it; one piece alone is scaled in place. */
static void acc_piece(fed_trainer *t, size_t j, size_t pieces, size_t cnt, size_t gbn)
{
    size_t np = fed_model_nparams(t->m);
    float *g = fed_model_grads_dev(t->m), w = (float)cnt / (float)gbn;

    if (pieces == 1) {
        if (cnt != gbn)
            for (size_t i = 0; i < np; i++)
                g[i] *= w;
    } else if (j == 0) {
        for (size_t i = 0; i < np; i++)
            t->acc[i] = g[i] * w;
    } else {
        for (size_t i = 0; i < np; i++)
            t->acc[i] += g[i] * w;
    }
}

/* The step's summed gradient into the gradient buffer. */
static void acc_done(fed_trainer *t, size_t pieces)
{
    if (pieces > 1)
        memcpy(fed_model_grads_dev(t->m), t->acc, fed_model_nparams(t->m) * sizeof(float));
}

/* The gradient of this rank's share order[0..n) of a step over gbn
 * samples, weighted by n / gbn, into the gradient buffer: with accumulate
 * N the share's N micro-batches [n k / N, n (k + 1) / N), each one's mean
 * gradient times its own share of gbn, summed in order in t->acc (k from
 * N - 1 down to 0 in GPipe's order, fed_trainer_set_gpipe_order). A share
 * of one piece is the model's gradient scaled in place. */
static fed_err share_grads(fed_trainer *t, const uint32_t *order, size_t n, size_t gbn,
                           fed_step_stats *s)
{
    size_t np = fed_model_nparams(t->m);
    float *g = fed_model_grads_dev(t->m);
    size_t pieces = (size_t)t->accumulate < n ? (size_t)t->accumulate : n;
    fed_err err;

    if (n == 0) {
        memset(g, 0, np * sizeof *g);
        return FED_OK;
    }
    for (size_t j = 0; j < pieces; j++) {
        size_t k = t->reverse ? pieces - 1 - j : j;
        size_t lo = n * k / pieces, hi = n * (k + 1) / pieces;
        fed_batch b;

        train_gather(t, order + lo, (int)(hi - lo), &b);
        if ((err = fed_model_forward_backward(t->m, &b, s)) != FED_OK)
            return err;
        acc_piece(t, j, pieces, hi - lo, gbn);
    }
    acc_done(t, pieces);
    return FED_OK;
}

/* ---- a pipeline stage (GPipe) ---- */

fed_err fed_trainer_new_stage(fed_model *m, fed_optim *o, const fed_dataset *d, int batch,
                              int accumulate, const fed_train_pipe *pipe, fed_trainer **out)
{
    int lo, hi, L = fed_model_stage_layers(m, &lo, &hi), micro;
    fed_model_shape ms = fed_model_input(m);
    fed_trainer *t = NULL;
    fed_err err;

    *out = NULL;
    if (!pipe || pipe->stages < 2 || pipe->stage < 0 || pipe->stage >= pipe->stages ||
        !pipe->send || !pipe->recv || (pipe->stage == 0) != (lo == 0) ||
        (pipe->stage == pipe->stages - 1) != (hi == L) || batch < 1 || accumulate < 1)
        return FED_ERR_INVAL;
    micro = fed_trainer_micro_batch(batch, accumulate);
    if (lo > 0) { /* the data is checked against the first stage: here only its labels */
        if (micro > fed_model_max_batch(m) || !d || (!d->x_u8 && !d->x_f32))
            return FED_ERR_INVAL;
        if (hi == L && !fits_task(m, d))
            return FED_ERR_SHAPE;
        if (!(t = trainer_alloc(m, o, d, batch, accumulate, micro)))
            return FED_ERR_NOMEM;
        t->x_stage = fed_alloc_aligned((size_t)micro * d->features *
                                       (d->x_u8 ? 1 : sizeof(float)));
        t->y_stage = fed_malloc((size_t)micro * sizeof *t->y_stage);
        t->cap = d->n;
        t->order = fed_malloc((t->cap ? t->cap : 1) * sizeof *t->order);
        if (!t->x_stage || !t->y_stage || !t->order) {
            fed_trainer_free(t);
            return FED_ERR_NOMEM;
        }
    } else if ((err = fed_trainer_new_acc(m, o, d, batch, accumulate, &t)) != FED_OK) {
        return err;
    }
    t->piped = 1;
    t->reverse = 1;
    t->pipe = *pipe;
    t->in_numel = (size_t)ms.c * ms.h * ms.w;
    t->out_numel = (size_t)fed_model_nlogits(m);
    if (!t->acc)
        t->acc = fed_alloc_aligned((fed_model_nparams(m) ? fed_model_nparams(m) : 1) *
                                   sizeof *t->acc);
    if (lo > 0) {
        t->stash = fed_alloc_aligned((size_t)accumulate * micro * t->in_numel * sizeof(float));
        t->dx = fed_alloc_aligned((size_t)micro * t->in_numel * sizeof(float));
    }
    if (hi < L)
        t->out_buf = fed_alloc_aligned((size_t)micro * t->out_numel * sizeof(float));
    if (!t->acc || (lo > 0 && (!t->stash || !t->dx)) || (hi < L && !t->out_buf)) {
        fed_trainer_free(t);
        return FED_ERR_NOMEM;
    }
    *out = t;
    return FED_OK;
}

static int pipe_first(const fed_trainer *t)
{
    return t->pipe.stage == 0;
}

static int pipe_last(const fed_trainer *t)
{
    return t->pipe.stage == t->pipe.stages - 1;
}

/* Micro-batch order[0..n)'s batch at this stage: the first gathers it
 * (again in the backward: the same bytes), the others take their input
 * from x (n, in_numel) and only the labels from the data. */
static void stage_batch(fed_trainer *t, const uint32_t *order, int n, float *x, fed_batch *b)
{
    train_gather(t, order, n, b);
    if (!pipe_first(t)) {
        b->x_u8 = NULL;
        b->x_f32 = x;
        b->x_map = NULL;
    }
}

/* This stage's part of a step's gradient over its share order[0..n) of
 * gbn samples, as share_grads in GPipe's order: every micro-batch forward
 * (its input from the stage before, its output to the stage after), then
 * every one backward from the last (the output's gradient from the stage
 * after, the input's to the stage before), each one's mean gradient times
 * its share of gbn summed in that order. The last stage waits for every
 * input first; its forward is the backward's own. */
static fed_err pipe_grads(fed_trainer *t, const uint32_t *order, size_t n, size_t gbn,
                          fed_step_stats *s)
{
    size_t np = fed_model_nparams(t->m);
    float *g = fed_model_grads_dev(t->m);
    size_t pieces = (size_t)t->accumulate < n ? (size_t)t->accumulate : n;
    int prev = t->pipe.stage - 1, next = t->pipe.stage + 1;
    fed_err err = FED_OK;

    if (n == 0) {
        memset(g, 0, np * sizeof *g);
        return FED_OK;
    }
    for (size_t k = 0; k < pieces; k++) {
        size_t lo = n * k / pieces, hi = n * (k + 1) / pieces, cnt = hi - lo;
        float *x = t->stash ? t->stash + k * (size_t)t->micro * t->in_numel : NULL;
        fed_batch b;

        if (!pipe_first(t) &&
            (err = t->pipe.recv(t->pipe.ctx, prev, x, cnt * t->in_numel)) != FED_OK)
            return err;
        if (pipe_last(t))
            continue;
        stage_batch(t, order + lo, (int)cnt, x, &b);
        if ((err = fed_model_stage_forward(t->m, &b, 1, t->out_buf, NULL)) != FED_OK ||
            (err = t->pipe.send(t->pipe.ctx, next, t->out_buf, cnt * t->out_numel)) != FED_OK)
            return err;
    }
    for (size_t j = 0; j < pieces; j++) {
        size_t k = pieces - 1 - j;
        size_t lo = n * k / pieces, hi = n * (k + 1) / pieces, cnt = hi - lo;
        fed_batch b;

        stage_batch(t, order + lo, (int)cnt,
                    t->stash ? t->stash + k * (size_t)t->micro * t->in_numel : NULL, &b);
        if (!pipe_last(t) &&
            (err = t->pipe.recv(t->pipe.ctx, next, t->out_buf, cnt * t->out_numel)) != FED_OK)
            return err;
        if ((err = fed_model_stage_backward(t->m, &b, pipe_last(t) ? NULL : t->out_buf, t->dx,
                                            pipe_last(t) ? s : NULL)) != FED_OK)
            return err;
        if (!pipe_first(t) &&
            (err = t->pipe.send(t->pipe.ctx, prev, t->dx, cnt * t->in_numel)) != FED_OK)
            return err;
        acc_piece(t, j, pieces, cnt, gbn);
    }
    acc_done(t, pieces);
    return FED_OK;
}

/* A step's or an evaluation's figures from the last stage to the first
 * (the one that reports them): loss, correct and samples as doubles, sent
 * bit for bit as pairs of floats. */
static fed_err pipe_stats(fed_trainer *t, fed_step_stats *st)
{
    double v[3] = {st->loss_sum, (double)st->correct, (double)st->samples};
    float f[6];
    fed_err err = FED_OK;

    if (pipe_last(t)) {
        memcpy(f, v, sizeof f);
        err = t->pipe.send(t->pipe.ctx, 0, f, 6);
    } else if (pipe_first(t) && (err = t->pipe.recv(t->pipe.ctx, t->pipe.stages - 1, f, 6)) ==
                                    FED_OK) {
        memcpy(v, f, sizeof v);
        st->loss_sum = v[0];
        st->correct = (long)v[1];
        st->samples = (long)v[2];
    }
    return err;
}

fed_err fed_trainer_pipe_evaluate(fed_trainer *t, const fed_dataset *d, fed_step_stats *st)
{
    fed_step_stats mine = {0};
    int prev = t->pipe.stage - 1, next = t->pipe.stage + 1;
    fed_err err = FED_OK;

    assert(t->piped);
    if (!d || d->n == 0)
        return FED_ERR_INVAL;
    for (size_t off = 0; off < d->n; off += (size_t)t->micro) {
        size_t cnt = d->n - off < (size_t)t->micro ? d->n - off : (size_t)t->micro;
        fed_batch b = {0};

        b.n = (int)cnt;
        b.y = d->y + off;
        b.y_f32 = d->y_f32 ? d->y_f32 + off : NULL; /* one number a row (fits_task) */
        if (pipe_first(t)) { /* the data in place, as fed_train_evaluate_all reads it */
            b.x_u8 = d->x_u8 ? d->x_u8 + off * d->features : NULL;
            b.x_f32 = d->x_u8 ? NULL : d->x_f32 + off * d->features;
            b.x_map = d->x_u8 ? d->chan_map : NULL;
        } else {
            b.x_f32 = t->stash;
            if ((err = t->pipe.recv(t->pipe.ctx, prev, t->stash, cnt * t->in_numel)) != FED_OK)
                return err;
        }
        if ((err = fed_model_stage_forward(t->m, &b, 0, pipe_last(t) ? NULL : t->out_buf,
                                           &mine)) != FED_OK)
            return err;
        if (!pipe_last(t) &&
            (err = t->pipe.send(t->pipe.ctx, next, t->out_buf, cnt * t->out_numel)) != FED_OK)
            return err;
    }
    if (!pipe_last(t))
        memset(&mine, 0, sizeof mine);
    if ((err = pipe_stats(t, &mine)) == FED_OK && st) {
        st->loss_sum += mine.loss_sum;
        st->correct += mine.correct;
        st->samples += mine.samples;
    }
    return err;
}

/* One step over the global batch order[0..gbn): this rank's share's
 * gradient (share_grads), summed over the ranks when there are several,
 * then the optimizer's step. */
static fed_err accum_step(fed_trainer *t, const uint32_t *order, size_t gbn, fed_step_stats *s)
{
    size_t lo = gbn * (size_t)t->rank / (size_t)t->size;
    size_t hi = gbn * (size_t)(t->rank + 1) / (size_t)t->size;
    fed_err err;

    if ((err = (t->piped ? pipe_grads : share_grads)(t, order + lo, hi - lo, gbn, s)) !=
        FED_OK)
        return err;
    if (t->size > 1 &&
        (err = t->reduce(t->reduce_ctx, fed_model_grads_dev(t->m), fed_model_nparams(t->m))) !=
            FED_OK)
        return err;
    return fed_optim_step(t->o, t->m);
}

static fed_err run_steps(fed_trainer *t, const uint32_t *idx, size_t n, long steps,
                         fed_rng *rng, fed_step_stats *st);

fed_err fed_trainer_steps(fed_trainer *t, const uint32_t *idx, size_t n, long steps,
                          fed_rng *rng, fed_step_stats *st)
{
    fed_step_stats mine = {0};
    fed_err err;

    if (!t->piped)
        return run_steps(t, idx, n, steps, rng, st);
    /* a pipeline's figures are its last stage's: to the first, which reports
       them (the others' stay 0, so a sum over a site's ranks counts each
       replica once) */
    if ((err = run_steps(t, idx, n, steps, rng, &mine)) != FED_OK ||
        (err = pipe_stats(t, &mine)) != FED_OK)
        return err;
    if (st && pipe_first(t)) {
        st->loss_sum += mine.loss_sum;
        st->correct += mine.correct;
        st->samples += mine.samples;
    }
    return FED_OK;
}

static fed_err run_steps(fed_trainer *t, const uint32_t *idx, size_t n, long steps,
                         fed_rng *rng, fed_step_stats *st)
{
    size_t global = (size_t)t->batch * (size_t)t->size;
    fed_err err;
    long done = 0;

    if (!t->o)
        return FED_ERR_INVAL;
    if ((err = check_indices(t, idx, n)) != FED_OK)
        return err;
    /* dropout's masks from the run's own stream (a model without dropout
       draws nothing: its runs stay as they were) */
    if (rng && fed_model_has_dropout(t->m))
        fed_model_set_dropout_key(t->m, fed_rng_u64(rng));
    if (t->dp)
        return dp_steps(t, idx, n, steps, st);
    if (n)
        memcpy(t->order, idx, n * sizeof *idx);
    fed_rng_shuffle_u32(rng, t->order, n);
    for (size_t off = 0; off < n && done < steps; off += global, done++) {
        int bn = n - off < global ? (int)(n - off) : (int)global;
        fed_step_stats s = {0};
        fed_batch b;

        if (t->size > 1 || t->accumulate > 1 || t->piped) {
            if ((err = accum_step(t, t->order + off, (size_t)bn, &s)) != FED_OK)
                return err;
        } else {
            train_gather(t, t->order + off, bn, &b);
            if ((err = fed_optim_train_step(t->o, t->m, &b, &s)) != FED_OK)
                return err;
        }
        if (!isfinite(s.loss_sum)) {
            fed_log(FED_LOG_ERROR, "train: loss is not finite after %ld steps (lr too high?)",
                    fed_optim_steps(t->o));
            return FED_ERR_NAN;
        }
        if (st) {
            st->loss_sum += s.loss_sum;
            st->correct += s.correct;
            st->samples += s.samples;
        }
        if (t->progress)
            t->progress(t->progress_ctx, (long)(off + (size_t)bn), (long)n);
    }
    return FED_OK;
}

fed_err fed_trainer_epoch(fed_trainer *t, const uint32_t *idx, size_t n, fed_rng *rng,
                          fed_step_stats *st)
{
    return fed_trainer_steps(t, idx, n, fed_train_batches(n, t->batch * t->size), rng, st);
}

fed_err fed_trainer_evaluate(fed_trainer *t, const uint32_t *idx, size_t n, fed_step_stats *st)
{
    fed_err err;

    if (!idx && !(t->noise_std > 0))
        return fed_train_evaluate_all(t->m, t->d, st);
    if (!idx) { /* every sample in order, its noise drawn as a batch's */
        n = t->d->n;
        for (size_t i = 0; i < n; i++)
            t->order[i] = (uint32_t)i;
        idx = t->order;
    }
    if ((err = check_indices(t, idx, n)) != FED_OK)
        return err;
    for (size_t off = 0; off < n; off += (size_t)t->micro) {
        int bn = n - off < (size_t)t->micro ? (int)(n - off) : t->micro;
        fed_batch b;

        fed_data_gather(t->d, idx + off, bn, t->x_stage, t->y_stage, &b);
        if (t->noise_std > 0) /* the shift the party's inputs have */
            add_noise(t, &b);
        if ((err = fed_model_evaluate(t->m, &b, st)) != FED_OK)
            return err;
    }
    return FED_OK;
}

fed_err fed_train_evaluate_noise(fed_model *m, const fed_dataset *d, const uint32_t *idx,
                                 size_t n, double std, uint64_t seed, fed_step_stats *st)
{
    fed_trainer *t = NULL;
    fed_err e;

    if ((e = fed_trainer_new(m, NULL, d, fed_model_max_batch(m), &t)) == FED_OK &&
        (e = fed_trainer_set_noise(t, std, seed)) == FED_OK)
        e = fed_trainer_evaluate(t, idx, n, st);
    fed_trainer_free(t);
    return e;
}

/* The batch of d's samples [off, off + n), after checking d against m. */
static fed_err whole_batch(fed_model *m, const fed_dataset *d, size_t off, size_t n, fed_batch *b)
{
    fed_model_shape ms = fed_model_input(m);

    if (!d || d->n == 0 || d->n > (size_t)1 << 30)
        return FED_ERR_INVAL;
    if (ms.c != d->shape.c || ms.h != d->shape.h || ms.w != d->shape.w ||
        ms.classes < d->shape.classes ||
        fed_train_task_check(m, d, NULL, 0) != FED_OK) /* targets the loss takes */
        return FED_ERR_SHAPE;
    b->n = (int)n;
    b->x_u8 = d->x_u8 ? d->x_u8 + off * d->features : NULL;
    b->x_f32 = d->x_u8 ? NULL : d->x_f32 + off * d->features;
    b->x_map = d->x_u8 ? d->chan_map : NULL;
    b->y = d->y + off;
    b->y_f32 = d->y_f32 ? d->y_f32 + off : NULL;
    return FED_OK;
}

fed_err fed_train_evaluate_all(fed_model *m, const fed_dataset *d, fed_step_stats *st)
{
    fed_batch b;
    fed_err e = whole_batch(m, d, 0, d ? d->n : 0, &b);

    return e != FED_OK ? e : fed_model_evaluate(m, &b, st);
}

fed_err fed_eval_report_new(int classes, fed_eval_report **out)
{
    fed_eval_report *r = fed_calloc(1, sizeof *r);

    assert(classes >= 1 && out);
    *out = NULL;
    if (!r)
        return FED_ERR_NOMEM;
    r->classes = classes;
    r->recall = fed_calloc((size_t)classes, sizeof *r->recall);
    r->confusion = fed_calloc((size_t)classes * (size_t)classes, sizeof *r->confusion);
    if (!r->recall || !r->confusion) {
        fed_eval_report_free(r);
        return FED_ERR_NOMEM;
    }
    *out = r;
    return FED_OK;
}

void fed_eval_report_free(fed_eval_report *r)
{
    if (!r)
        return;
    fed_free(r->recall);
    fed_free(r->confusion);
    fed_free(r);
}

void fed_eval_report_head(const fed_eval_report *r, fed_metrics_head *h)
{
    const fed_metrics_binary *b = &r->bin;

    memset(h, 0, sizeof *h);
    if (r->regression) /* no headline figure: mse, mae and r2 go by name */
        return;
    h->kind = r->has_binary ? FED_METRICS_BINARY : FED_METRICS_MULTI;
    h->macro_f1 = r->multi.macro_f1;
    if (!r->has_binary)
        return;
    h->auc = b->auc;
    h->ap = b->ap;
    h->sensitivity = b->half.sensitivity;
    h->specificity = b->half.specificity;
    h->precision = b->half.precision;
    h->f1 = b->half.f1;
    h->youden_threshold = b->youden.threshold;
    h->youden_sensitivity = b->youden.sensitivity;
    h->youden_specificity = b->youden.specificity;
    h->youden_f1 = b->youden.f1;
}

size_t fed_eval_report_named_max(const fed_eval_report *r)
{
    size_t k = (size_t)r->classes;

    return 2 + FED_METRICS_HEAD_MAX + k + (k <= FED_EVAL_CONFUSION_MAX ? k * k : 0);
}

size_t fed_eval_report_named(const fed_eval_report *r, fed_metric_value *out)
{
    fed_metrics_head h;
    size_t n = 0;
    int k = r->classes;

    snprintf(out[n].name, sizeof out[n].name, "loss");
    out[n++].value = r->st.samples ? r->st.loss_sum / (double)r->st.samples : NAN;
    if (r->regression) {
        static const char *const names[] = {"mse", "mae", "r2"};
        const double v[] = {r->reg.mse, r->reg.mae, r->reg.r2};

        for (int i = 0; i < 3; i++) {
            snprintf(out[n].name, sizeof out[n].name, "%s", names[i]);
            out[n++].value = v[i];
        }
        return n;
    }
    snprintf(out[n].name, sizeof out[n].name, "accuracy");
    out[n++].value = r->multi.accuracy;
    fed_eval_report_head(r, &h);
    n += fed_metrics_head_named(&h, out + n);
    for (int c = 0; c < k; c++) {
        snprintf(out[n].name, sizeof out[n].name, "recall.%d", c);
        out[n++].value = r->recall[c];
    }
    for (int t = 0; k <= FED_EVAL_CONFUSION_MAX && t < k; t++)
        for (int c = 0; c < k; c++) {
            snprintf(out[n].name, sizeof out[n].name, "confusion.%d.%d", t, c);
            out[n++].value = (double)r->confusion[(size_t)t * k + c];
        }
    return n;
}

/* Rows of probabilities evaluated at a time. */
#define REPORT_PIECE 4096

/* fed_train_evaluate_report of a model whose loss is mse over d's
 * targets: the loss and the regression set, one output a sample. */
static fed_err evaluate_regression(fed_model *m, const fed_dataset *d, fed_eval_report *r)
{
    size_t n = d->n, piece = n < REPORT_PIECE ? n : REPORT_PIECE;
    double *pred = NULL, *truth = NULL;
    fed_metrics_reg_stats rs;
    fed_batch b;
    fed_err e;

    if (!d->y_f32 || fed_model_nlogits(m) != 1)
        return FED_ERR_SHAPE;
    memset(&r->st, 0, sizeof r->st);
    memset(&rs, 0, sizeof rs);
    r->has_binary = 0;
    r->regression = 1;
    if (!(pred = fed_malloc(piece * sizeof *pred)) || !(truth = fed_malloc(piece * sizeof *truth))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    for (size_t off = 0; off < n; off += piece) {
        size_t k = n - off < piece ? n - off : piece;

        if ((e = whole_batch(m, d, off, k, &b)) != FED_OK ||
            (e = fed_model_predict(m, &b, &r->st, pred)) != FED_OK)
            goto out;
        for (size_t i = 0; i < k; i++)
            truth[i] = d->y_f32[off + i];
        fed_metrics_reg_add(&rs, truth, pred, k);
    }
    fed_metrics_reg_finish(&rs, &r->reg);
    r->reg_stats = rs;
    e = FED_OK;
out:
    fed_free(pred);
    fed_free(truth);
    return e;
}

fed_err fed_train_evaluate_report(fed_model *m, const fed_dataset *d, fed_eval_report *r)
{
    int C = fed_model_input(m).classes;
    size_t n = d ? d->n : 0, piece = n < REPORT_PIECE ? n : REPORT_PIECE;
    double *prob = NULL, *score = NULL;
    int32_t *pred = NULL;
    fed_metrics_item *work = NULL;
    fed_batch b;
    fed_err e;

    assert(r);
    if ((e = whole_batch(m, d, 0, n, &b)) != FED_OK)
        return e;
    if (C != r->classes)
        return FED_ERR_SHAPE;
    if (fed_model_regression(m))
        return evaluate_regression(m, d, r);
    memset(&r->st, 0, sizeof r->st);
    memset(r->confusion, 0, (size_t)C * (size_t)C * sizeof *r->confusion);
    r->has_binary = C == 2;
    e = FED_ERR_NOMEM;
    if (!(prob = fed_malloc(piece * (size_t)C * sizeof *prob)) ||
        !(pred = fed_malloc(piece * sizeof *pred)))
        goto out;
    if (r->has_binary && (!(score = fed_malloc(n * sizeof *score)) ||
                          !(work = fed_malloc(n * sizeof *work))))
        goto out;
    for (size_t off = 0; off < n; off += piece) {
        size_t k = n - off < piece ? n - off : piece;

        if ((e = whole_batch(m, d, off, k, &b)) != FED_OK ||
            (e = fed_model_predict(m, &b, &r->st, prob)) != FED_OK)
            goto out;
        fed_metrics_argmax(prob, k, C, pred);
        if ((e = fed_metrics_confusion_add(r->confusion, C, b.y, pred, k)) != FED_OK)
            goto out;
        for (size_t i = 0; r->has_binary && i < k; i++)
            score[off + i] = prob[i * 2 + 1];
    }
    fed_metrics_multi_from_confusion(r->confusion, C, &r->multi, r->recall);
    e = r->has_binary ? fed_metrics_binary_exact(score, d->y, n, work, &r->bin) : FED_OK;
    if (e == FED_OK && r->has_binary && r->hist)
        e = fed_metrics_hist_add(r->hist, score, d->y, n);
out:
    fed_free(prob);
    fed_free(pred);
    fed_free(score);
    fed_free(work);
    return e;
}
