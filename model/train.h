/* train.h - the local training loop shared by `fednode train`, the node and
 * the simulator: epochs over a shard's index list (a seeded shuffle per
 * epoch, batches gathered from the shared dataset, forward/backward, one
 * optimizer step per batch), and evaluation over a dataset. A trainer owns
 * its staging buffers, so an epoch allocates nothing. It never prints and
 * reads no clock: progress goes to an optional callback. */
#ifndef FED_MODEL_TRAIN_H
#define FED_MODEL_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"
#include "model/data.h"
#include "model/model.h"
#include "model/metrics.h"
#include "model/optim.h"

typedef struct fed_trainer fed_trainer;

/* Called after every batch: done of total samples in this epoch. */
typedef void (*fed_train_progress_fn)(void *ctx, long done, long total);

/* Batches of `batch` samples (the last may be smaller), batch <=
 * fed_model_max_batch(m). The trainer borrows m, o and d; they must
 * outlive it. o may be NULL for a trainer that only evaluates. */
FED_WUR fed_err fed_trainer_new(fed_model *m, fed_optim *o, const fed_dataset *d, int batch,
                                fed_trainer **out);
/* fed_trainer_new with gradient accumulation (--accumulate): each
 * optimizer step's batch of `batch` samples (of this rank's share, with
 * fed_trainer_set_ranks) runs as `accumulate` micro-batches, the pieces
 * [n k / N, n (k + 1) / N) of the step's n samples, whose mean gradients,
 * each weighted by its share of the step, are summed in order before the
 * step: the step equals one over the whole batch to float rounding (for
 * layers without batch statistics; dropout's masks are drawn per
 * micro-batch). Only ceil(batch / accumulate) samples need the model's
 * room (fed_model_max_batch), so activations take that much. 1 <=
 * accumulate <= batch (FED_ERR_INVAL); above 1, a backend without host
 * memory is FED_ERR_UNSUPPORTED, and so is DP-SGD (fed_trainer_set_dp),
 * which sums its Poisson draw in pieces of its own. */
FED_WUR fed_err fed_trainer_new_acc(fed_model *m, fed_optim *o, const fed_dataset *d, int batch,
                                    int accumulate, fed_trainer **out);
/* GPipe's order (on 1) for the micro-batches of fed_trainer_new_acc: each
 * step's micro-batches run forward and backward from the last, N - 1, down
 * to 0, their weighted gradients summed in that order (the order a
 * pipeline's backwards run in, so that a pipeline of stages can give the
 * same bits: model/pipeline.h); batch norm's running statistics are
 * updated in that order too. 0: from the first, as plain accumulation. */
void fed_trainer_set_gpipe_order(fed_trainer *t, int on);
/* The micro-batch the trainer's model needs room for: ceil(batch / N). */
int fed_trainer_micro_batch(int batch, int accumulate);
void fed_trainer_free(fed_trainer *t);
void fed_trainer_set_progress(fed_trainer *t, fed_train_progress_fn fn, void *ctx);

/* One epoch over idx[0..n) in an order shuffled by rng (the caller's list
 * is left as it is). st gets the running training loss and accuracy
 * (summed over samples, measured as the weights move). A non-finite loss
 * stops the epoch with FED_ERR_NAN. */
FED_WUR fed_err fed_trainer_epoch(fed_trainer *t, const uint32_t *idx, size_t n, fed_rng *rng,
                                  fed_step_stats *st);

/* At most `steps` batches of an epoch-like pass (for rounds counted in
 * steps): the same as fed_trainer_epoch but stops early. */
FED_WUR fed_err fed_trainer_steps(fed_trainer *t, const uint32_t *idx, size_t n, long steps,
                                  fed_rng *rng, fed_step_stats *st);

/* DP-SGD (Abadi et al. 2016) for every step from now on. Each step draws
 * its batch by Poisson sampling from the call's idx[0..n): every sample
 * with probability q = batch / n (1 when n <= batch), from random, not from
 * the rng the calls are handed; clips each sample's gradient to clip
 * (fed_model_dp_grads), sums, adds Gaussian noise of standard deviation
 * noise * clip to the sum (fed_dp_add_noise, from random), divides by the
 * expected batch q n, and takes the optimizer's step. An epoch is
 * ceil(n / batch) such steps (one pass in expectation); a draw larger than
 * the model's max_batch runs in pieces (the staging buffers grow to it).
 * The spent privacy is the subsampled Gaussian's at rate q, noise
 * multiplier noise, over fed_trainer_dp_steps steps (privacy/rdp.h).
 * random must be the node's CSPRNG for the result to be private (model/dp.h).
 * CPU backend only, not with accumulation (FED_ERR_UNSUPPORTED); FED_ERR_INVAL for clip <= 0,
 * noise < 0, no random or a trainer without an optimizer. */
typedef struct fed_trainer_dp {
    float clip;           /* C > 0: the L2 bound of each sample's gradient */
    float noise;          /* z >= 0: the noise multiplier */
    fed_random_fn random; /* noise and sampling */
    void *random_ctx;
} fed_trainer_dp;
FED_WUR fed_err fed_trainer_set_dp(fed_trainer *t, const fed_trainer_dp *dp);
/* Training batches of uint8 images are augmented (model/data.h,
 * fed_data_augment) with draws from a stream of their own seeded by seed,
 * so a run is repeatable; evaluation never is. FED_ERR_UNSUPPORTED on float
 * features or once the trainer is one of several ranks. */
struct fed_data_aug;
FED_WUR fed_err fed_trainer_set_augment(fed_trainer *t, const struct fed_data_aug *a,
                                        uint64_t seed);
/* Training batches get Gaussian noise of standard deviation std on every
 * input value (the noise:SIGMA partition's feature skew), drawn from a
 * stream of their own seeded by seed: fresh each batch and epoch, the same
 * again for the same seed; image bytes are mapped to floats first, as the
 * model maps them, and the noise added there. std 0: nothing.
 * FED_ERR_UNSUPPORTED once the trainer is one of several ranks. */
FED_WUR fed_err fed_trainer_set_noise(fed_trainer *t, double std, uint64_t seed);
/* Data parallel over ranks (one site run as several processes): the sum of
 * buf[0..n) over every rank, in an order fixed for a given rank count, left
 * in buf on every rank (mpi/coll.h's fed_coll_allreduce_sum fills it). */
typedef fed_err (*fed_train_reduce_fn)(void *ctx, float *buf, size_t n);
/* From now on this trainer is rank `rank` of `size`: every rank shuffles
 * alike (the same rng and indices), each step covers a global batch of
 * size * batch samples of which this rank takes the share
 * [gbn rank / size, gbn (rank + 1) / size), its gradient weighted by its
 * share of the global batch and summed over ranks by reduce before the
 * optimizer steps, so every rank takes the steps one process would take at
 * the global batch (to rounding: the sum's order differs). size 1 leaves
 * the trainer as it was. CPU backend only; not with DP-SGD
 * (FED_ERR_UNSUPPORTED). */
FED_WUR fed_err fed_trainer_set_ranks(fed_trainer *t, int rank, int size,
                                      fed_train_reduce_fn reduce, void *ctx);

/* A pipeline stage's link to the other stages of its pipeline (model/
 * pipeline.h; mpi/coll.h's point-to-point calls fill it): n floats to or
 * from the process of stage `peer` of the same pipeline, in order. */
typedef struct fed_train_pipe {
    int stage, stages; /* this process's stage of S >= 2 */
    fed_err (*send)(void *ctx, int peer, const float *buf, size_t n);
    fed_err (*recv)(void *ctx, int peer, float *buf, size_t n);
    void *ctx;
} fed_train_pipe;
/* A trainer over a pipeline stage m (fed_model_new_stage) whose every
 * other stage runs a trainer alike, over the same data, with the same rng:
 * each step's `batch` samples run as `accumulate` micro-batches in GPipe's
 * schedule: all forwards (activations to the next stage), then all
 * backwards from the last micro-batch (their gradients to the stage
 * before), the gradients summed in that order (fed_trainer_set_gpipe_order
 * is the one-process reference; the result is its bits). A stage holds
 * every micro-batch's input (accumulate x ceil(batch / accumulate) samples)
 * and recomputes its forward in the backward (batch norm's running
 * statistics updated then, once). The step's loss is the last stage's; it
 * goes to the first stage at the end of each fed_trainer_steps call (the
 * other stages' figures stay 0). With
 * fed_trainer_set_ranks, D such pipelines are data-parallel replicas, each
 * stage's gradient summed with the same stage's of the others. */
FED_WUR fed_err fed_trainer_new_stage(fed_model *m, fed_optim *o, const fed_dataset *d,
                                      int batch, int accumulate, const fed_train_pipe *pipe,
                                      fed_trainer **out);
/* Loss and accuracy of the whole model over all of d, through the
 * pipeline (every stage calls it; pieces of the micro-batch): added to
 * *st at the first and the last stage. */
FED_WUR fed_err fed_trainer_pipe_evaluate(fed_trainer *t, const fed_dataset *d,
                                          fed_step_stats *st);

/* DP-SGD steps taken so far. */
long fed_trainer_dp_steps(const fed_trainer *t);
/* The sampling rate a DP step over n samples uses: batch / n, at most 1. */
double fed_trainer_dp_rate(const fed_trainer *t, size_t n);

/* Loss and accuracy of m over the samples idx[0..n) of the trainer's
 * dataset, or over all of it when idx is NULL; added to st. The trainer's
 * noise (fed_trainer_set_noise) is added to these inputs as to training
 * batches' (a noise: party scored on inputs shifted as its own are). */
FED_WUR fed_err fed_trainer_evaluate(fed_trainer *t, const uint32_t *idx, size_t n,
                                     fed_step_stats *st);

/* m's loss and accuracy over d's samples idx[0..n) (all of d when idx is
 * NULL), each input with Gaussian noise of std added as a trainer's
 * (fed_trainer_set_noise, from seed): a noise: party's own test split
 * scored with the shift its training inputs have. Added to st. */
FED_WUR fed_err fed_train_evaluate_noise(fed_model *m, const fed_dataset *d, const uint32_t *idx,
                                         size_t n, double std, uint64_t seed, fed_step_stats *st);

/* Whether d's labels are what m's loss takes: classes for cross-entropy
 * and bce, one number a row (--task regression) for mse. FED_ERR_SHAPE
 * with the reason in why (cap bytes; may be NULL), for a classifier on
 * numbers the one building it for d gives (fed_model_spec_explain).
 * Nothing is logged. The trainers and the evaluations refuse such data
 * with it. */
FED_WUR fed_err fed_train_task_check(const fed_model *m, const fed_dataset *d, char *why,
                                     size_t cap);

/* Evaluation of a whole dataset without a trainer (reads it in place). */
FED_WUR fed_err fed_train_evaluate_all(fed_model *m, const fed_dataset *d, fed_step_stats *st);

/* A whole dataset's evaluation with the metrics of model/metrics.h: the
 * multi-class set always (with two classes: accuracy, macro-F1, recall of
 * each, the confusion matrix), and with two classes the binary set too
 * (class 1 positive, its probability the score; exact, from the scores);
 * for a model whose loss is mse (--task regression data) the regression
 * set instead: MSE, MAE, R^2 of its one output against the targets. */
typedef struct fed_eval_report {
    fed_step_stats st;   /* loss and accuracy */
    int classes;         /* the model's */
    fed_metrics_multi multi;
    double *recall;      /* (classes) */
    uint64_t *confusion; /* (classes * classes), truth-major */
    int has_binary;      /* classes == 2: bin holds the binary set */
    fed_metrics_binary bin;
    int regression;      /* a model whose loss is mse: reg holds its figures, and
                            the classes' are unset */
    fed_metrics_reg reg;
    fed_metrics_reg_stats reg_stats; /* regression: the moments reg comes from */
    fed_metrics_hist *hist; /* NULL, or (the caller's, zeroed) with two classes
                               the scores' histogram added (site evaluation) */
} fed_eval_report;

FED_WUR fed_err fed_eval_report_new(int classes, fed_eval_report **out);
void fed_eval_report_free(fed_eval_report *r);
/* m over all of d into r (its figures replaced). Allocates what it needs
 * for the call: the probabilities of a piece of the data, and with two
 * classes a score and a sort item per sample. */
FED_WUR fed_err fed_train_evaluate_report(fed_model *m, const fed_dataset *d,
                                          fed_eval_report *r);

/* r's headline figures (model/metrics.h). */
void fed_eval_report_head(const fed_eval_report *r, fed_metrics_head *h);
/* Confusion matrices are named cell by cell up to this many classes. */
#define FED_EVAL_CONFUSION_MAX 20
/* Room fed_eval_report_named needs for r. */
size_t fed_eval_report_named_max(const fed_eval_report *r);
/* Every figure of r by name into out (fed_eval_report_named_max entries):
 * loss, accuracy, the headline figures, recall.C per class (NaN: no sample
 * of C), and with at most FED_EVAL_CONFUSION_MAX classes confusion.T.P per
 * cell; for regression loss, mse, mae and r2 alone. Returns how many. */
size_t fed_eval_report_named(const fed_eval_report *r, fed_metric_value *out);

/* Batches in an epoch of n samples: ceil(n / batch). */
long fed_train_batches(size_t n, int batch);

#endif
