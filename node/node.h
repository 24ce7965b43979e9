/* node.h - the node state machine: one fed_node per process (daemon) or per
 * simulated host (sim/), in one of its roles, driven only by events and
 * acting only through fed_env (node/env.h).
 *
 * Aggregator mode (the consortium): clients dial the aggregator. A client
 * says HELLO; the aggregator holds that request (and each later NEXT) until
 * a round starts, then answers it with the round's MODEL (the global vector
 * and the round's settings), or after poll_ms with an ACK "no round yet".
 * Each round the aggregator samples a fraction of the clients waiting (at
 * least min_clients), waits for their DELTAs until all have come or the
 * deadline passes, merges those it got (fed_merge: FedAvg by samples, or a
 * robust or adaptive strategy), records every sampled client in
 * `contributions` (merged, refused and why, missing, late), evaluates on its
 * held-out data, and commits the round row and a checkpoint in one
 * transaction. A client trains E local epochs on its shard (a job), answers
 * with its delta and sample count, sealed, and asks NEXT.
 *
 * Async mode (FedBuff, async_k > 0): no rounds with a barrier. Every HELLO or
 * NEXT is answered at once with the current global model (version r: it is
 * sent as round r + 1), except from a client whose delta is already in the
 * buffer: that one waits for the next merge. A DELTA trained on round b that
 * arrives while round r + 1 is being filled has staleness s = r + 1 - b; it
 * is refused as late when s > max_staleness, else buffered with weight
 * samples / sqrt(1 + s). Once async_k deltas are buffered (or deadline_ms
 * after the first of them, with at least min_clients) they are merged as
 * round r + 1, which is then committed and checkpointed like a synchronous
 * round. The buffer is empty at every checkpoint: a crash loses at most the
 * deltas buffered since the last merge, whose clients then train again.
 *
 * Peer mode (no aggregator): see node/peer.c. Each round a peer trains on
 * its shard, enters the model into its push-sum state (x = w * model),
 * gives its round's out-neighbours (cfg.peer.topology) their shares as SHARE
 * requests carrying running totals, waits as cfg.peer.sync says (bsp: every
 * in-neighbour's share of this round or deadline_ms; ssp:S: while no
 * in-neighbour lags more than S rounds; asp:T and bap: never), adds what
 * came in sender-key order, evaluates, and commits the round (the neighbours
 * it mixed with in `contributions`) and a checkpoint with its push-sum
 * state. A restarted peer resumes from its checkpoint and skips ahead to the
 * round its neighbours are in.
 *
 * Restart: a node resumes from its latest valid checkpoint with a new epoch
 * (storage's rule): the aggregator at the round after its checkpoint, a
 * client by saying HELLO again. A request that gets no answer (lost, or
 * refused because it was addressed to the aggregator's previous epoch) times
 * out on the client's timer and is retried as a fresh request (new sequence
 * number); after DELTA retries run out the client falls back to HELLO.
 *
 * Checkpoint sections (storage/store.h) an aggregator writes: model.spec,
 * model.input, params, merge (strategy state, f32 LE), node.state; a client:
 * node.state, and codec.residual with topk. node.state, 64 bytes, LE:
 *   off size field
 *     0    8 magic "FEDNODE\0"
 *     8    4 version (u32) = 1
 *    12    4 role (u32, fed_node_role)
 *    16    8 round: the last round the node finished
 *    24   40 reserved, zero
 *
 * Threading: every function here runs on the node's loop thread. Jobs the
 * node submits touch only their own data. */
#ifndef FED_NODE_NODE_H
#define FED_NODE_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/pool.h"
#include "crypto/allow.h"
#include "crypto/arena.h"
#include "gossip/peers.h"
#include "gossip/wire.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/merge.h"
#include "model/metrics.h"
#include "model/model.h"
#include "mpi/coll.h"
#include "node/env.h"
#include "storage/store.h"

#define FED_NODE_SEC_STATE "node.state"
#define FED_NODE_STATE_MAGIC "FEDNODE"
#define FED_NODE_STATE_VERSION 1u
#define FED_NODE_STATE_BYTES 64u

typedef enum fed_node_role {
    FED_NODE_CLIENT = 1,
    FED_NODE_AGGREGATOR = 2,
    FED_NODE_PEER = 3,
} fed_node_role;

typedef struct fed_node fed_node;

/* What a committed aggregator round (or a client's local round) reports. */
/* The sites' pooled evaluation of one model (node/site_eval.h). */
typedef struct fed_node_site_figures {
    uint64_t round;          /* the model evaluated */
    double samples, accuracy, loss;
    double auc_bound;        /* binary: the pooled AUC's bound */
    fed_metrics_head head;   /* kind NONE: none */
} fed_node_site_figures;

typedef struct fed_node_round_info {
    uint64_t round;
    uint32_t sampled;   /* clients sent the round's MODEL */
    uint32_t merged;    /* deltas merged */
    uint32_t missing;   /* sampled, no delta by the close */
    uint32_t refused;   /* sampled, declined the round (a LEAVE) */
    uint64_t samples;   /* behind the merged deltas (client: trained on) */
    double loss;        /* client: mean training loss; aggregator: test loss or NaN */
    double accuracy;    /* aggregator: test accuracy, NaN without test data */
    uint64_t start_ms, end_ms; /* env->now_ms at start and commit */
    float lr;           /* the learning rate of the round's training: the one
                           its MODEL asked for (aggregator), trained at (client,
                           peer); 0 for a round that only mixed */
    uint8_t model_hash[32];    /* fed_crypto_model_hash of the params as checkpointed (aggregator) */
    double epsilon;     /* aggregator with DP-FedAvg: client-level epsilon spent
                           after this round (at dp_delta); 0: no DP-FedAvg */
    double dp_clip;     /* aggregator with DP-FedAvg: the clip the round used */
    fed_metrics_head metrics; /* aggregator: the test figures beyond loss and
                                 accuracy (kind NONE: not measured) */
    fed_node_site_figures site; /* aggregator: the sites' pooled evaluation this
                                   round measured (--eval-every; head.kind
                                   NONE: none) */
} fed_node_round_info;

/* Observers (tests, fedsim); may be NULL. Called on the loop thread. */
typedef void (*fed_node_round_fn)(void *ctx, const fed_node *n, const fed_node_round_info *r);
/* Aggregator: one delta accepted for merging into `round` (host floats,
 * nparams), trained on the model of base_round (== round, except for stale
 * deltas in async mode); valid during the call. */
typedef void (*fed_node_delta_fn)(void *ctx, const fed_node *n, uint64_t round,
                                  uint64_t base_round, const uint8_t key[32], const float *delta,
                                  size_t nparams, uint64_t samples);
/* The data standardized with pooled statistics (cols means and stds):
 * *out, owned by the caller and borrowed by the node until it ends (or the
 * next call). */
typedef fed_err (*fed_node_stats_fn)(void *ctx, const double *mean, const double *std,
                                     size_t cols, const fed_dataset **out);
/* Client of a DP statistics pass: its contribution (cols x
 * FED_COLSTATS_INTS into out) from its raw values clipped into the bounds
 * the aggregator declares (model/colstats.h's fed_colstats_local_dp; the
 * node adds the noise). */
typedef fed_err (*fed_node_stats_dp_fn)(void *ctx, const double *lo, const double *hi,
                                        size_t cols, int64_t *out);
/* Client of a secure round: its integers of round (n of them,
 * fed_node_config.secagg.ints) into out, summed exactly beside the delta;
 * called on the loop as its masked input is made. Its error drops the
 * round. */
typedef fed_err (*fed_node_ints_fn)(void *ctx, uint64_t round, int64_t *out, size_t n);
/* Aggregator: a secure round's integers unmasked, each summed exactly
 * (modulo 2^64; read as int64_t for signed values) over the m clients in
 * the sum; valid during the call. */
typedef void (*fed_node_int_sum_fn)(void *ctx, const fed_node *n, uint64_t round,
                                    const uint64_t *sum, size_t len, uint32_t m);

/* A node's configuration: what every role reads at the top level (role,
 * seed, compute, the model and the round's settings, what persists, the
 * observers), then one part per concern. A role reads the parts it needs
 * and leaves the others at their defaults. */

/* The data a client or a peer trains on and an aggregator or a peer
   evaluates on (all borrowed). */
typedef struct fed_node_data_config {
    const fed_dataset *train;     /* the dataset its shard indexes */
    const uint32_t *shard;        /* (shard_n) indices into train */
    size_t shard_n;
    fed_data_aug augment;         /* its training batches' (images only); none: zero */
    const fed_dataset *local_test; /* client: its local test split (the test set
                                     partitioned as the training set); each round
                                     it scores its own model there before
                                     training (the global with its local
                                     tensors, or its Ditto personal model):
                                     logged, the round's accuracy in its
                                     database. NULL: none */
    uint32_t finetune_epochs;     /* client, with local_test: its model is first
                                     fine-tuned this many epochs on its shard
                                     (a copy: the round trains from the global) */
    double noise_std;             /* Gaussian noise on its training inputs (the
                                     noise:SIGMA partition's share of this
                                     party, fed_data_partition_noise); 0: none */
    const fed_dataset *test;      /* held-out data; NULL: no evaluation */
    /* client: its validation split, on which it evaluates the model it
       receives when the aggregator asks (--eval-every): a dataset of its
       own (--val-data), else val_n samples of train (--val-fraction: not in
       its shard, and standardized with it); neither: it contributes an
       empty evaluation */
    const fed_dataset *val;
    const uint32_t *val_idx;
    size_t val_n;
    int no_site_metrics;          /* client: its evaluation only pooled, never
                                     recorded as its own (in the clear) */
    /* shared statistics of a CSV's numeric columns (model/colstats.h,
       node/agg_stats.c): an aggregator with stats_cols > 0 whose checkpoint
       holds none runs the statistics pass as round 1 (no training: each
       sampled client contributes its columns' integers, through secure
       aggregation when it is on) and sends the pooled mean and std in
       every later MODEL (field 14); a client contributes stats_local and
       standardizes its training set with what each MODEL carries */
    uint32_t stats_cols;          /* the columns (a client: its own); 0: none */
    uint64_t stats_min_count;     /* a column with fewer present values is
                                     suppressed: at each client (plain), and
                                     in the totals */
    const int64_t *stats_local;   /* client: its contribution (stats_cols x
                                     FED_COLSTATS_INTS, borrowed); NULL: it
                                     declines a statistics pass */
    fed_node_stats_fn restandardize; /* a client's training set, an aggregator's
                                     test set, standardized with the pooled
                                     statistics; NULL: a client declines a
                                     round that applies statistics */
    void *stats_ctx;              /* restandardize's and stats_local_dp's */
    fed_node_stats_dp_fn stats_local_dp; /* client: its clipped contribution
                                     to a DP pass; NULL: it declines one */
    const double *stats_lo, *stats_hi; /* aggregator: (stats_cols) the
                                     bounds of DP statistics (--feature-bounds,
                                     borrowed); NULL: exact totals */
    double stats_noise;           /* aggregator, with the bounds: the noise
                                     multiplier each site's release gets */
    int stats_only;               /* aggregator: the run ends once the statistics
                                     are known (the pass alone) */
    uint32_t stats_per_record;    /* the values one record gives a column:
                                     images' H x W pixels a channel (a record
                                     is an image); 0 or 1: one (CSV rows).
                                     The minimum count is in records, and a
                                     DP pass's noise covers a whole record */
} fed_node_data_config;

/* An aggregator's rounds, merge, evaluation and async mode. */
typedef struct fed_node_agg_config {
    char strategy[FED_MERGE_SPEC_MAX]; /* default "fedavg" */
    double weight_cap;            /* fed_merge_config's; 0: none */
    double sample_fraction;       /* of the waiting clients, in (0, 1]; default 1 */
    uint32_t min_clients;         /* deltas needed to merge; default 1 */
    uint32_t wait_clients;        /* waiting clients that start a round at once;
                                     default min_clients */
    uint64_t gather_ms;           /* start with >= min_clients waiting once this
                                     passed since the last round closed (round 1:
                                     since the first client came); default 1000 */
    /* with test data (data.test): the figure (model/metrics.h) that says
       which round is best, whose checkpoint retention keeps ("": none);
       early_stop > 0 ends the run once that many rounds after the best have
       not improved on it (each round then evaluated before the next starts) */
    char best_metric[FED_METRICS_NAME_MAX];
    uint32_t early_stop;
    uint32_t eval_every;          /* > 0: the clients evaluate the model they
                                     receive in rounds r % eval_every == 0 and
                                     send statistics (node/site_eval.h; the
                                     classes: shape.classes) */
    uint32_t async_k;             /* FedBuff: merge once this many deltas are
                                     buffered; 0: synchronous rounds (default) */
    uint32_t max_staleness;       /* async: older deltas are late; default 10 */
} fed_node_agg_config;

/* A client's aggregator and what it accepts of the model it is sent. */
typedef struct fed_node_client_config {
    fed_peer_id aggregator;
    /* the model its own --model declares (a whole spec, borrowed; NULL: it
       takes the aggregator's), refused at once when a MODEL names another
       (LEAVE FED_ERR_MODEL_MISMATCH); and what it builds from a MODEL at
       most, since the graph comes from the network */
    const char *own_model;
    double max_model_params;      /* default FED_NODE_MAX_MODEL_PARAMS */
    double max_model_flops;       /* forward + backward per sample; default
                                     FED_NODE_MAX_MODEL_FLOPS */
    uint32_t delta_retries;       /* DELTA resends before HELLO; default 3 */
    uint32_t max_steps;           /* local steps a round at most, over the MODEL's
                                     epochs (--max-steps); 0: no cap */
    int classes;                  /* the classes it declares (--classes, its model
                                     file's); a MODEL declaring others is
                                     declined; 0: none */
} fed_node_client_config;

/* A peer (no aggregator): every member in the allow-list is a peer; the
   round's settings at the top level are its own (spec, local_epochs,
   batch, optimizer, lr, momentum), and so are rounds and deadline_ms (how
   long bsp waits for its in-neighbours). */
typedef struct fed_node_peer_config {
    char topology[32];            /* gossip/topology.h spec; default "ring" */
    const char *neighbours;       /* static: every member's out-list, NUL-ended
                                     text (gossip/topology.h); borrowed */
    char sync[16];                /* bsp (default), ssp:S, asp:T or bap */
    char mixing[16];              /* pushsum (default), plain, metropolis, pairwise */
    uint32_t group_size;          /* allreduce: groups of at most this a round (0: none) */
    int mix_only;                 /* 1: no training; mix init (consensus runs) */
    char advertise[FED_GOSSIP_URL_MAX + 1]; /* where the others reach this peer,
                                     published in signed PEERS entries; "": none */
    int vouch;                    /* keys members vouch for count as members */
    const fed_gossip_entry *publish; /* a signed entry this peer spreads: the
                                     one a member signed for it, or one it
                                     signed for another key (a voucher) */
    fed_gossip_peers *peers;      /* the peer table (borrowed; NULL: its own) */
    /* a new address learned for key (the daemon dials it); may be NULL */
    void (*on_address)(void *ctx, const uint8_t key[32], const char *url);
    void *address_ctx;
    uint32_t checkpoint_every;    /* a checkpoint every Nth round (and the last);
                                     0 or 1: every round (default). Its push-sum
                                     state is running totals for every neighbour */
    uint32_t final_mix;           /* after the last training round, this many
                                     rounds that only mix, so the members end
                                     close to one model; default 0 */
    const double *init;           /* mix only: the starting vector (init_dim) */
    size_t init_dim;
} fed_node_peer_config;

/* Differential privacy. DP-SGD (node/dp_account.h): a client with sgd
   trains each round with it (CPU backend), noise from env.random through a
   keystream (crypto/keystream.h), and charges the round's epsilon to its
   database, durably, before its delta leaves; a round that would take the
   total past budget (0: none) is refused with a LEAVE (FED_ERR_DP_BUDGET).
   An aggregator with require_sgd puts sgd_clip and sgd_noise into every
   MODEL as required; a client without sgd refuses such a round
   (FED_ERR_DP_REQUIRED) and one with sgd trains at that clip and the larger
   of the two noise multipliers.
   DP-FedAvg (node/agg_dp.c; client-level DP, McMahan et al. 2018): an
   aggregator with client_clip > 0 samples each waiting client with
   probability agg.sample_fraction (Poisson; a small draw is never redrawn:
   the round runs with it), clips each delta to the clip, sums them with
   equal weight, adds Gaussian noise of standard deviation z times the clip,
   divides by the expected cohort agg.sample_fraction * agg.wait_clients,
   and charges the round (q = agg.sample_fraction, z) to its database;
   synchronous rounds and a weighted strategy (fedavg, fedavgm, fedprox,
   fedadam, ...) only. delta is the delta it accounts at. */
typedef struct fed_node_dp_config {
    int sgd;
    float sgd_clip;               /* C > 0; default 1 */
    float sgd_noise;              /* z >= 0; default 1 */
    double delta;                 /* in (0, 1); default 1e-5 */
    double budget;                /* epsilon; 0: no budget */
    int require_sgd;              /* aggregator */
    double client_clip;           /* C (adaptive: its start); 0: off (default) */
    double client_noise;          /* z; default 1 */
    double target_eps;            /* > 0: z calibrated so `rounds` rounds spend
                                     this (rounds must be > 0); 0: client_noise */
    double client_quantile;       /* adaptive clipping's target quantile gamma
                                     in (0, 1); 0: a fixed clip (default) */
    double client_clip_lr;        /* adaptive clipping's eta; default 0.2 */
} fed_node_dp_config;

/* Secure aggregation (node/secagg_agg.c, secagg_client.c): an aggregator
   with on runs every synchronous round as the protocol's stages and learns
   only the sum of its clients' quantized, weighted deltas; a client follows
   what each MODEL says (field 12). */
typedef struct fed_node_secagg_config {
    int on;
    double dropout;               /* the dropout rate a round survives; default 0.1 */
    double max_weight;            /* a client's weight cap in samples; default 1000 */
    uint32_t bits;                /* quantized bits; default 20 (4096 clients fit) */
    double range;                 /* per-coordinate clip; default 4 */
    double stats_range;           /* the statistics segment's clip (running
                                     means and variances, node/layout.h); default 64 */
    uint64_t stage_ms;            /* each stage's deadline (the masked input's:
                                     deadline_ms); default 10000 */
    uint32_t min_clients;         /* the floor of a secure round's key list and
                                     survivors, enforced by the aggregator and by
                                     each client: never below 3 (a smaller value
                                     counts as 3); default 3 */
    /* integers summed exactly beside the delta (node/agg_input_impl.h's INT64
       segment: federated statistics, a site evaluation's counts): how many
       each client adds to a secure round's masked input; 0: none (default).
       The aggregator and its clients agree on it (a masked input of
       another size is refused, FED_ERR_SA_MASKED); a client's come from
       ints_fn, the aggregator's sums go to on_int_sum */
    uint32_t ints;
    fed_node_ints_fn ints_fn;     /* client; NULL with ints > 0: the round
                                     fails (FED_ERR_INVAL) */
    fed_node_int_sum_fn on_int_sum; /* aggregator; may be NULL */
    void *ints_ctx;               /* passed to both */
} fed_node_secagg_config;

/* How vectors and requests travel. */
typedef struct fed_node_transfer_config {
    char codec[32];               /* the clients' delta codec, default "f32" */
    fed_wire_cfg wire;            /* zeroed: defaults */
    uint64_t poll_ms;             /* the aggregator's longest hold of a
                                     HELLO/NEXT; default 5000 */
    uint64_t retry_ms;            /* a client's or peer's answer wait beyond
                                     poll_ms; default 2000 */
} fed_node_transfer_config;

typedef struct fed_node_config {
    fed_node_role role;
    uint64_t seed;                /* model initialization; client shuffles */
    const float *init_params;     /* borrowed: the model's first parameters (its
                                     nparams floats: an ONNX file's weights) in
                                     place of seed's initialization, for an
                                     aggregator or a peer (a checkpoint still
                                     wins); NULL: seed's */

    /* compute (borrowed): backend, pool and shards for the model's steps */
    fed_backend *be;
    fed_pool *pool;               /* NULL: single-threaded models */
    int shards;                   /* >= 1 */
    /* a site run as several processes (node/site.h): rank 0's collective
       with the other ranks (borrowed; NULL or one rank: this process alone),
       and each rank's batch (0: the round's; a site of R ranks steps on R
       times it) */
    fed_coll *coll;
    uint32_t rank_batch;
    uint32_t accumulate;          /* micro-batches per step (1: none; model/train.h) */
    uint32_t recompute;           /* keep every K-th layer's output (0, 1: all;
                                     fed_model_set_recompute) */
    fed_precision precision;      /* the training GEMMs' (fed_model_set_precision) */
    /* --pipeline-stages S of a site (node/site.h): its R ranks as R / S
       replicas of S pipeline stages (model/pipeline.h), rank r stage r % S
       of replica r / S, each holding only its stage; 0 or 1: data
       parallel. stage_coll: the collective of this rank's stage across the
       replicas (borrowed; NULL with one replica). gpipe: accumulate's
       micro-batches in GPipe's order (--micro-batches) */
    uint32_t pipe_stages;
    fed_coll *stage_coll;
    int gpipe;

    /* the model and the round's settings (aggregator, peer; a client learns
       them from each MODEL) */
    char spec[FED_MODEL_SPEC_MAX]; /* its id (model.h: fed_model_spec_id) */
    const char *graph;            /* borrowed: the whole spec when spec is the id
                                     of a longer graph ("g#..."), sent in each
                                     MODEL's graph field; NULL: spec is whole */
    fed_model_shape shape;
    uint32_t local_epochs;        /* default 1 */
    uint32_t batch;               /* default 64 */
    uint8_t optimizer;            /* fed_optim_kind, default SGD (momentum 0.9) */
    float lr;                     /* 0 (default): the optimizer's own,
                                     fed_optim_default_lr */
    char lr_schedule[32];         /* the rate across rounds (aggregator,
                                     peer): "const" ("" too: the default),
                                     "step:ROUNDS,GAMMA" or "cosine" (down
                                     towards 0 at round `rounds`), the names
                                     of model/optim.h's fed_optim_sched_of_run
                                     counted in rounds. Round r trains at
                                     fed_optim_sched_lr at step r - 1: every
                                     peer computes the same rate from the
                                     round, and async mode's rounds are its
                                     merges. The rate goes in each round's
                                     MODEL; a client trains at what it says */
    uint32_t lr_warmup;           /* rounds of linear warm-up before the
                                     schedule: round r <= W trains at
                                     lr * r / (W + 1); default 0 */
    float momentum;               /* SGD's, in [0, 1); default 0.9 */
    float weight_decay;           /* >= 0, as `train`'s: SGD's L2 term, Adam's
                                     decoupled decay; sent in MODEL's field 19;
                                     default 0 */
    float ditto_lambda;           /* aggregator: > 0, Ditto: every client also
                                     trains a personal model v, v -= lr (grad(v)
                                     + lambda (v - w)) with w the round's global,
                                     kept in its checkpoint; sent in field 19 */
    /* aggregator: tensors that stay at the sites (node/layout.h), sent in
       each MODEL (field 16) so every site keeps the same ones; a client's
       own (when set) must agree or the round is declined */
    char local_layers[256];       /* comma-separated globs over tensor names
                                     ("fc3.*"); "": none */
    int local_bn;                 /* every norm tensor stays (FedBN) */
    uint32_t rounds;              /* stop after this round; 0: never */
    uint64_t deadline_ms;         /* a round's deadline from its start (a peer's
                                     bsp wait); default 60000 */

    fed_node_data_config data;
    fed_node_agg_config agg;
    fed_node_client_config client;
    fed_node_peer_config peer;
    fed_node_dp_config dp;
    fed_node_secagg_config secagg;
    fed_node_transfer_config transfer;

    /* what persists (borrowed, outlive the node): database, identity, members */
    fed_store *store;
    fed_crypto_arena *arena;
    const fed_crypto_allow *allow;

    fed_node_round_fn on_round;
    fed_node_delta_fn on_delta;
    void *observer;

    /* the simulator's and the tests' misbehaviours (node/test_hooks.h;
       borrowed): NULL in every real node, and fed_node_daemon_run refuses
       a config with one */
    const struct fed_node_test_hooks *hooks;
} fed_node_config;

/* Arena slots (crypto/arena.h) a client of a secure round with k neighbours
 * needs beyond the wire's: its keys, one per neighbour's pair of shares,
 * and two for a derivation in flight. A client refuses a round without them
 * (logged); an environment that builds arenas sizes them with this. */
#define FED_NODE_SECAGG_SLOTS(k) ((uint32_t)(k) + 3u)
/* A secure round's floor of clients (secagg.min_clients counts as this when
 * smaller): with 2, each could subtract its own delta from the released sum
 * (without noise, the other's exactly). */
#define FED_NODE_SA_FLOOR 3u

/* Defaults as documented above; role and the borrowed pointers are left
 * for the caller. */
#define FED_NODE_MAX_MODEL_PARAMS 1e8  /* 400 MB of f32 */
#define FED_NODE_MAX_MODEL_FLOPS 1e11  /* per sample: 8x a ResNet-50's */
void fed_node_config_default(fed_node_config *cfg);

/* Builds the node (nothing is sent yet). cfg is copied (its borrowed
 * pointers are not). env is copied and must stay valid. FED_ERR_INVAL for a
 * config that cannot work (no store or arena, no shard for a client, ...),
 * FED_ERR_SPEC/BAD_VALUE for a bad model, strategy or codec. */
FED_WUR fed_err fed_node_new(const fed_node_config *cfg, const fed_env *env, fed_node **out);
/* Frees everything the node owns, jobs it got back included. NULL fine.
 * Never touches the database beyond what was committed. */
void fed_node_free(fed_node *n);

/* Resume from the store (latest valid checkpoint), then begin: an
 * aggregator waits for clients, a client says HELLO. */
FED_WUR fed_err fed_node_start(fed_node *n);
/* A frame: req != NULL, a request to answer (the node replies exactly once,
 * possibly later; a refusal is an empty reply); req == NULL, the reply to
 * one of its requests. A rejected frame is counted, logged and dropped; the
 * return is its reason (FED_OK when it was taken). */
FED_WUR fed_err fed_node_on_frame(fed_node *n, fed_req *req, const uint8_t *frame, size_t len);
FED_WUR fed_err fed_node_on_timer(fed_node *n, uint32_t timer_id);
FED_WUR fed_err fed_node_on_job_done(fed_node *n, fed_job *job);
/* A graceful stop (the process ends on purpose, its jobs done): what the
 * role holds only in memory goes to the database (the aggregator's wire
 * counters, which a round's commit otherwise carries, so refusals after the
 * last round are kept too). Not called at a crash. */
FED_WUR fed_err fed_node_stop(fed_node *n);

fed_node_role fed_node_get_role(const fed_node *n);
const uint8_t *fed_node_key(const fed_node *n);
/* The last round finished (aggregator: committed; client: trained). */
uint64_t fed_node_round(const fed_node *n);
/* Aggregator: all rounds done. Client: told training is over. */
int fed_node_finished(const fed_node *n);
/* Where the node stands, for a status page or a health check (the daemon
 * copies it into the snapshot it publishes; node/snapshot.h). */
typedef struct fed_node_progress {
    uint64_t round;            /* the last round finished (fed_node_round) */
    int finished;              /* fed_node_finished */
    fed_err failed;            /* fed_node_failed */
    int round_open;            /* aggregator: a round runs; peer: trains or waits */
    uint64_t round_due_ms;     /* env.now_ms by which the open round closes at the
                                  latest (its deadline); 0: none due (none open,
                                  or one training, whose time no deadline bounds) */
    uint32_t commit_failures;  /* aggregator: rounds whose commit failed in a row */
    uint32_t clients_waiting;  /* aggregator: clients holding a request */
    uint32_t clients_training; /* aggregator: sampled clients whose delta is not in */
    int eval_local;            /* aggregator: tensors stay at the sites (--local-layers,
                                  --local-bn, DP), so its own evaluation, made with its
                                  initial ones, is not meaningful */
    uint64_t silent_ms;        /* client: how long its aggregator has not answered it
                                  while it waits, once past two polls with their
                                  retries; 0: it answers (or the client trains) */
} fed_node_progress;
void fed_node_get_progress(const fed_node *n, fed_node_progress *out);
/* Timers a node holds armed at once, at most (its ids are 1..this): an
 * environment's timer table this large never fills. */
#define FED_NODE_MAX_TIMERS 5
/* FED_OK, or why the node can no longer work and must be stopped: the
 * environment refused to arm one of its timers (set_timer failed; the node
 * logged which), without which a round would stall. The daemon stops with
 * this error. */
fed_err fed_node_failed(const fed_node *n);
/* Aggregator: the privacy budget client key reported in its last DELTA or
 * LEAVE (0 and 0 when none), and whether it is parked (it declined a round
 * for its budget and has not restarted since). Returns nonzero when it
 * reported one. */
int fed_node_member_dp(const fed_node *n, const uint8_t key[32], double *epsilon,
                       double *budget, int *parked);
/* Bumped whenever a value fed_node_member_dp gives changes (0: none yet). */
uint64_t fed_node_members_dp_version(const fed_node *n);
/* The largest request a listening node's own protocol brings it (a vector
 * of its model in the widest codec, f64, with room for the typed block and
 * the envelope), capped by the protocol's max_frame; max_frame itself when
 * the model is not known (a client learns it from the aggregator). The
 * daemon takes no larger request from anyone. */
size_t fed_node_recv_limit(const fed_node_config *cfg);
/* The transport's connection drops (daemon), into the wire's counters. */
void fed_node_set_conn_counters(fed_node *n, uint64_t refused, uint64_t stalled,
                                uint64_t handshake, uint64_t dropped);

/* Aggregator: the global model's parameters (nparams host floats). */
size_t fed_node_nparams(const fed_node *n);
FED_WUR fed_err fed_node_get_params(const fed_node *n, float *dst);
const fed_wire_counters *fed_node_wire_counters(const fed_node *n);
/* Client: the local tensors it keeps (node/layout.h's LOCAL path, in the
 * flat buffer's order: --local-layers, --local-bn) for a model of nparams
 * floats, and their count in *len; NULL and 0 when it keeps none for such
 * a model (yet), or is no client. */
const float *fed_node_client_local(const fed_node *n, size_t nparams, size_t *len);
/* Client under Ditto: its personal model (nparams floats); NULL when it
 * keeps none for such a model (yet), or is no client. */
const float *fed_node_client_personal(const fed_node *n, size_t nparams);

/* Peer: the length of its push-sum vector, its estimate x / w (dim
 * doubles), and its raw (x, w). FED_ERR_ROLE for other roles. */
size_t fed_node_peer_dim(const fed_node *n);
FED_WUR fed_err fed_node_peer_estimate(const fed_node *n, double *out);
FED_WUR fed_err fed_node_peer_mass(const fed_node *n, double *x, double *w);

/* What a peer holds, in bytes, by structure. Its model state is the
 * parameters (one copy), every push-sum running total and the optimizer's
 * state: `state`. `total` sums the rest (state not counted twice). */
typedef struct fed_node_peer_mem {
    uint64_t params;  /* the float vectors: the estimate, the job's result, asp's copy */
    uint64_t totals;  /* push-sum: its x and each pair's running total */
    uint64_t held;    /* push-sum: totals received, held until the round's end */
    uint64_t optim;   /* the optimizer's state (while the job trains) */
    uint64_t buffers; /* a SHARE's encoding, the frame sealed from it, streams */
    uint64_t models;  /* the training model (parameters, gradients, a batch's
                         buffers) and its own evaluation model (0 when lent) */
    uint64_t store;   /* its database's pages in memory */
    uint64_t tables;  /* what it knows of each member, its scratch lists, the
                         records of the shares a round's end adds */
    uint64_t state;   /* the model state: one params vector, totals, optim */
    uint64_t total;   /* params + totals + held + optim + buffers + models + store
                         + tables */
} fed_node_peer_mem;

/* Peer: its bytes now, and at its most (of the moments it notes: each
 * round's end with every total held, and after the round's commit).
 * Either may be NULL. FED_ERR_ROLE for other roles. */
FED_WUR fed_err fed_node_peer_mem_get(const fed_node *n, fed_node_peer_mem *now,
                                      fed_node_peer_mem *peak);
/* Checks peer-mode specs (topology, sync, mixing): FED_ERR_SPEC. */
FED_WUR fed_err fed_node_peer_check(const char *topology, const char *sync, const char *mixing);

#endif
