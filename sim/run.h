/* run.h - a whole fedsim scenario: the real node state machine on every
 * simulated host (an aggregator and its clients, or peers), the data loaded
 * once and shared, the faults scheduled, and one row per round reported.
 * The same scenario and seed give the same rows and the same final model,
 * bit for bit. */
#ifndef FED_SIM_RUN_H
#define FED_SIM_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/opt.h"
#include "core/pool.h"
#include "model/data.h"
#include "node/settings.h"
#include "sim/world.h"

#define FED_SIM_STR 64

/* Every option of a scenario, as flag and INI key (fed_sim_scenario_opts). */
typedef struct fed_sim_scenario {
    fed_node_settings s;            /* what `fednode run` takes too (node/settings.h) */
    int nodes;                      /* clients or peers */
    char role[16];                  /* aggregator (and clients) | peer */
    double loss;                    /* of every frame */
    double latency_ms;
    double jitter_ms;               /* standard deviation of a frame's latency; 0: fixed */
    double latency_floor_ms;        /* a frame's least latency */
    double bandwidth_mbps;          /* MB/s a link; 0: unlimited */
    double gflops;                  /* a node's speed, for training's virtual time */
    char stragglers[FED_SIM_STR];   /* FRACTION:SLOWDOWN */
    char byzantine[FED_SIM_STR];    /* FRACTION:ATTACK (signflip:S, noise:SIGMA, zero) */
    char crash[FED_SIM_STR];        /* NODE@SECONDS[,restart@SECONDS] */
    double crash_rate;              /* P: each node crashes with P a virtual second */
    char db_dir[256];               /* node databases on disk here; "": in memory */
    char loss_window[FED_SIM_STR];  /* P@T1-T2 */
    char partition_net[FED_SIM_STR];/* GROUPS@T1-T2 */
    int eval_peers;                 /* peers that evaluate (the first N); 0: all */
    int checkpoint_every;           /* peers checkpoint every Nth round */
    int no_crypto;                  /* frames unsealed, unsigned (largest runs) */
    int personal_eval;              /* score each client's own model at the end */
    int finetune_epochs;            /* ... after this many epochs on its shard */
    int local_only;                 /* no round: each client trains alone (the
                                       purely local baseline), then is scored */
    int shard_samples;              /* each shard cut to about this many samples,
                                       stratified by label (a scarce site); 0: all */
    /* not an option: the whole graph when s.model is the id of a longer one
       (model.h; fedsim's --model FILE), borrowed; NULL: s.model is whole.
       Set it: the option loader leaves it as it is */
    const char *graph;
} fed_sim_scenario;

extern const fed_opt fed_sim_scenario_opts[];
extern const size_t fed_sim_scenario_nopts;

/* The old spelling --mode aggregator|peer (before --mode meant sync or
 * async in both programs): moves it to role, sets mode to sync and warns
 * naming --role. Call after the options are loaded; role_given: --role was
 * set too (fed_opt_load_given), so one naming another role contradicts it:
 * FED_ERR_SPEC, logged naming both. */
FED_WUR fed_err fed_sim_scenario_settle(fed_sim_scenario *sc, int role_given);

/* One round, as fedsim prints it. */
typedef struct fed_sim_row {
    uint64_t round;
    double t_s;        /* virtual seconds when it closed */
    double accuracy;   /* aggregator: the global model; peers: their mean (NaN: not measured) */
    double loss;       /* aggregator: the global model's test loss, the mean squared error
                          under --task regression (NaN: not measured; peers: NaN) */
    double spread;     /* peers: max - min accuracy; aggregator: 0 */
    uint64_t bytes;    /* every node's frame bytes sent so far */
    uint32_t merged;   /* aggregator: deltas merged; peers: shares mixed, summed */
    float lr;          /* the learning rate clients (peers) trained at: the
                          last client's report so far; 0: none trained */
    double epsilon;    /* aggregator with DP-FedAvg: client-level epsilon spent
                          after the round; 0: no DP-FedAvg */
} fed_sim_row;

typedef void (*fed_sim_row_fn)(void *ctx, const fed_sim_row *row);

/* A run that makes no progress (no row; peers: no peer reports a round)
 * for this many times a round's longest timer (--deadline-ms, --gather-ms,
 * with --secagg --secagg-stage-ms) of virtual time stops: nothing it could
 * still do would finish a round (docs/simulator.md). */
#define FED_SIM_STALL_ROUNDS 100

/* Runs sc to its last round (or max_virtual_s). train/test are the shared
 * data (borrowed); pool runs the jobs (NULL: inline). Each finished round
 * goes to on_row, in order. final_hash (may be NULL) gets the sha256 of the
 * final global model (aggregator) or of every peer's estimate in key order,
 * and counters (may be NULL) the network's figures (sim/world.h).
 * FED_ERR_SPEC / BAD_VALUE for options that do not fit, each logged;
 * FED_ERR_TIMEOUT, logged with the likely cause, when the rounds did not
 * finish in max_virtual_s, when no round finished for FED_SIM_STALL_ROUNDS
 * timers, or once the aggregator crashed with no restart before the last. */
FED_WUR fed_err fed_sim_run(const fed_sim_scenario *sc, const fed_dataset *train,
                            const fed_dataset *test, fed_pool *pool, double max_virtual_s,
                            fed_sim_row_fn on_row, void *ctx, uint8_t final_hash[32],
                            fed_sim_counters *counters);

/* fed_sim_run split across the ranks of comm (core/comm.h; NULL: one
 * process): rank k runs the hosts whose world index i (the aggregator 0,
 * then the clients; or the peers) has i % size == k, and every rank runs
 * the same virtual time in windows of the lookahead (FED_ERR_SPEC when it
 * is 0: see --latency-floor-ms). train is taken: once this rank's shards
 * are cut from it into a dataset of their samples only, it is freed and
 * *train set to NULL. test may be NULL on a rank fed_sim_rank_needs_test
 * says needs none. Rows go to on_row on rank 0 only; hash and counters
 * (summed over ranks) come to every rank. The rows, hash and counters are
 * the same for any number of ranks, and the same as fed_sim_run's. A rank
 * that fails returns while the others wait: the caller aborts the job. */
FED_WUR fed_err fed_sim_run_ranks(const fed_sim_scenario *sc, fed_dataset **train,
                                  const fed_dataset *test, fed_pool *pool,
                                  const struct fed_comm *comm, double max_virtual_s,
                                  fed_sim_row_fn on_row, void *ctx, uint8_t final_hash[32],
                                  fed_sim_counters *counters);
/* Whether rank of size runs a node that evaluates on the test set. */
int fed_sim_rank_needs_test(const fed_sim_scenario *sc, int rank, int size);

#endif
