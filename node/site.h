/* site.h - one site run as several processes (mpirun -np R fednode run):
 * rank 0 is the node (identity, federation, database) and announces each
 * round's training to the others through the collective (mpi/coll.h);
 * ranks 1.. run fed_node_site_rank_run, which trains their share of every
 * global batch until rank 0 says stop. A collective that fails (a rank died
 * or stalls past the deadline) ends the whole job: Open MPI 4.1 cannot go on
 * past it, and the site's supervisor restarts it from its checkpoint. */
#ifndef FED_NODE_SITE_H
#define FED_NODE_SITE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/pool.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/model.h"
#include "mpi/coll.h"

/* What a rank beyond 0 trains with (all borrowed): the same data and shard
 * rank 0 has, its own compute. */
typedef struct fed_node_site_rank_cfg {
    fed_coll *coll;
    uint32_t timeout_ms;        /* each step's collective deadline */
    fed_backend *be;
    fed_pool *pool;
    int shards;
    uint32_t accumulate;        /* micro-batches per step, as rank 0's */
    uint32_t recompute;         /* --recompute, as rank 0's */
    fed_precision precision;    /* --precision, as rank 0's */
    uint32_t pipe_stages;       /* --pipeline-stages, as rank 0's (fed_node_config) */
    fed_coll *stage_coll;       /* this rank's stage across the replicas, or NULL */
    int gpipe;                  /* --micro-batches: GPipe's order */
    const fed_dataset *train;
    const uint32_t *shard;      /* (shard_n) indices into train */
    size_t shard_n;
} fed_node_site_rank_cfg;

/* Ranks 1..: each round rank 0 announces, train it; FED_OK when rank 0 says
 * stop. Any failure ends the job (fed_coll_abort) after a line that says
 * why; returns only with the one-rank collective. */
FED_WUR fed_err fed_node_site_rank_run(const fed_node_site_rank_cfg *cfg);
/* Rank 0: tell the other ranks the site is done (they return FED_OK). */
FED_WUR fed_err fed_node_site_stop(fed_coll *c);

#endif
