/* host.h - a simulated machine: what survives a crash (the node's identity
 * and its database, in memory or in a file) and the fed_node running on it.
 * A crash frees the node and rolls back the database's open transaction,
 * as a killed process leaves them; a restart applies the epoch rule again
 * and builds a new node that resumes from its latest valid checkpoint. */
#ifndef FED_SIM_HOST_H
#define FED_SIM_HOST_H

#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"
#include "node/node.h"
#include "sim/world.h"

typedef struct fed_sim_host fed_sim_host;

/* A machine with a fresh identity drawn from rng (not yet in a world). */
FED_WUR fed_err fed_sim_host_new(fed_rng *rng, fed_sim_host **out);
/* The same with an arena of `slots` secret slots (0: the default), for
 * secure aggregation's shares (node/node.h's FED_NODE_SECAGG_SLOTS). */
FED_WUR fed_err fed_sim_host_new_slots(fed_rng *rng, uint32_t slots, fed_sim_host **out);
/* Frees the node, database and identity; NULL fine. Free the world first
 * (it waits for jobs and owns the requests). */
void fed_sim_host_free(fed_sim_host *h);
const fed_peer_id *fed_sim_host_id(const fed_sim_host *h);

/* Put the host into world w running a node of cfg (copied; its store and
 * arena are the host's own, its other borrowed pointers must outlive the
 * host). db_path NULL keeps the database in memory. The node is built and
 * started by the world's start event for it. */
FED_WUR fed_err fed_sim_host_attach(fed_sim_host *h, fed_sim_world *w, const fed_node_config *cfg,
                                    const char *db_path);
uint32_t fed_sim_host_index(const fed_sim_host *h);
/* The running node, or NULL while the host is down (or failed to start). */
fed_node *fed_sim_host_node(const fed_sim_host *h);
fed_store *fed_sim_host_store(const fed_sim_host *h);
/* The host's identity (to sign with, as its operator would). */
fed_crypto_arena *fed_sim_host_arena(const fed_sim_host *h);
/* Starts that failed (the node could not be built or resume). */
uint32_t fed_sim_host_start_failures(const fed_sim_host *h);

#endif
