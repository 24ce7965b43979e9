/* train_record.h - `fednode train --db FILE`: a single node keeps the record
 * a federated one does. Each epoch is one round of the node's database (its
 * row: times, loss, test accuracy, samples, the rate of its first step,
 * strategy "local", the hash of the parameters, with --dp-sgd the epsilon
 * spent and the epoch's privacy charge) and one checkpoint, written in one
 * transaction; `--resume`
 * loads the newest valid checkpoint and goes on from the next epoch, bit for
 * bit as if the run had never stopped (same data, seed and options).
 *
 * A training checkpoint holds the sections of storage/store.h that a node
 * writes (model.spec, model.input, params, optim) and one of its own:
 *
 *   "train.state" (FED_NODE_SEC_TRAIN), 64 bytes, integers little-endian:
 *   offset  size  field
 *   0       8     magic "FEDTRN\0\0"
 *   8       4     version (u32) = 1
 *   12      4     reserved (u32) = 0
 *   16      8     epochs done (u64), = the checkpoint's round
 *   24      32    shuffle rng state after those epochs: s[0..3] (u64 each)
 *   56      8     samples per epoch (u64): the shard's size, for a check
 */
#ifndef FED_APP_TRAIN_RECORD_H
#define FED_APP_TRAIN_RECORD_H

#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"
#include "model/model.h"
#include "model/optim.h"
#include "node/dp_account.h"
#include "storage/store.h"

#define FED_NODE_SEC_TRAIN "train.state"
#define FED_NODE_TRAIN_MAGIC "FEDTRN"
#define FED_NODE_TRAIN_VERSION 1u
#define FED_NODE_TRAIN_STATE_BYTES 64u
#define FED_NODE_STRATEGY_LOCAL "local"

/* What one epoch leaves in the round log. */
typedef struct fed_node_record_round {
    uint64_t epoch;           /* 1-based; also the round number */
    uint64_t start_ms, end_ms; /* wall clock, ms since the Unix epoch */
    double loss;              /* mean training loss over the epoch */
    double accuracy;          /* test accuracy; NaN when not measured */
    uint64_t samples;         /* training samples seen in the epoch */
    double lr;                /* the learning rate of its first step */
    /* DP-SGD: the epoch's privacy charge (dp_steps steps at rate dp_q, noise
       multiplier dp_sigma), made in the same transaction, fsynced; dp NULL:
       none. On failure dp must be loaded again (node/dp_account.h). */
    fed_dp_account *dp;
    double dp_q, dp_sigma;
    uint64_t dp_steps;
} fed_node_record_round;

/* What resume found (filled as far as it got, also on a mismatch, so the
 * caller can say what the database holds). */
typedef struct fed_node_record_found {
    uint64_t ckpt_id, epochs_done, samples;
    char spec[FED_MODEL_SPEC_MAX]; /* the stored model spec */
    fed_model_shape shape;         /* the stored input shape */
    fed_store_faults faults;       /* newer checkpoints skipped as faulty */
} fed_node_record_found;

/* Open (or create) the node database at path for training: store defaults
 * (WAL, FULL sync, keep the 3 newest checkpoint blobs). */
FED_WUR fed_err fed_node_record_open(const char *path, fed_store **out);

/* The newest round in the log (0 when there is none). */
FED_WUR fed_err fed_node_record_last_round(fed_store *st, uint64_t *round);

/* One transaction: r's round row and a checkpoint of m, o (may be NULL: no
 * optim section) and the shuffle rng as it stands after the epoch. samples
 * per epoch goes into train.state. On failure nothing of it is kept. */
FED_WUR fed_err fed_node_record_epoch(fed_store *st, const fed_model *m, const fed_optim *o,
                                      const fed_rng *shuffle, uint64_t epoch_samples,
                                      const fed_node_record_round *r);

/* Load the newest valid checkpoint into m, o and shuffle. Everything is
 * checked before anything is changed: no checkpoint -> FED_ERR_NOTFOUND; a
 * section missing or malformed -> FED_ERR_FORMAT; another model spec ->
 * FED_ERR_SPEC; another input shape -> FED_ERR_SHAPE; optimizer state of
 * another size (another optimizer) -> FED_ERR_SHAPE. found may be NULL. */
FED_WUR fed_err fed_node_record_resume(fed_store *st, fed_model *m, fed_optim *o,
                                       fed_rng *shuffle, fed_node_record_found *found);

#endif
