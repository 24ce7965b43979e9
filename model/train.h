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
#include "model/optim.h"

typedef struct fed_trainer fed_trainer;

/* Called after every batch: done of total samples in this epoch. */
typedef void (*fed_train_progress_fn)(void *ctx, long done, long total);

/* Batches of `batch` samples (the last may be smaller), batch <=
 * fed_model_max_batch(m). The trainer borrows m, o and d; they must
 * outlive it. o may be NULL for a trainer that only evaluates. */
FED_WUR fed_err fed_trainer_new(fed_model *m, fed_optim *o, const fed_dataset *d, int batch,
                                fed_trainer **out);
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

/* Loss and accuracy of m over the samples idx[0..n) of the trainer's
 * dataset, or over all of it when idx is NULL; added to st. */
FED_WUR fed_err fed_trainer_evaluate(fed_trainer *t, const uint32_t *idx, size_t n,
                                     fed_step_stats *st);

/* Evaluation of a whole dataset without a trainer (reads it in place). */
FED_WUR fed_err fed_train_evaluate_all(fed_model *m, const fed_dataset *d, fed_step_stats *st);

/* Batches in an epoch of n samples: ceil(n / batch). */
long fed_train_batches(size_t n, int batch);

#endif
