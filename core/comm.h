/* comm.h - the ranks one run is split across, as the simulator needs them:
 * this rank and their count, an all-to-all of bytes, an all-gather of bytes
 * and a sum, min or max of integers. A table of functions, so that sim/
 * (which fills worlds through it) and mpi/ (whose mpi_simcomm.c makes one
 * over MPI_COMM_WORLD) both include it downward and sim/ never sees MPI; a
 * NULL comm is a single process (the wrappers below then copy or do
 * nothing). Every call is collective: each rank makes the same calls in the
 * same order, and what comes back is in rank order, so it is the same
 * whatever order the messages travelled in. */
#ifndef FED_CORE_COMM_H
#define FED_CORE_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef enum fed_comm_op { FED_COMM_SUM = 0, FED_COMM_MIN = 1, FED_COMM_MAX = 2 } fed_comm_op;

typedef struct fed_comm {
    int rank, size;
    void *ctx;
    /* send[k] (send_len[k] bytes) goes to rank k; *recv gets (fed_malloc'd,
       NULL when empty) what every rank sent this one, in rank order; *min
       becomes the least of every rank's *min (one window's end: the
       frames, and the time of the earliest event anywhere) */
    fed_err (*exchange)(void *ctx, uint8_t *const *send, const size_t *send_len, uint64_t *min,
                        uint8_t **recv, size_t *recv_len);
    /* every rank's buf, in rank order, on every rank (fed_malloc'd) */
    fed_err (*allgather)(void *ctx, const uint8_t *buf, size_t len, uint8_t **all,
                         size_t *all_len);
    /* v[0..n) combined over the ranks, in place, on every rank */
    fed_err (*allreduce)(void *ctx, uint64_t *v, size_t n, fed_comm_op op);
} fed_comm;

int fed_comm_rank(const fed_comm *c);
int fed_comm_size(const fed_comm *c);
/* The wrappers: with c NULL (or of size 1), allgather copies buf and
 * allreduce leaves v as it is. */
FED_WUR fed_err fed_comm_allgather(const fed_comm *c, const uint8_t *buf, size_t len,
                                       uint8_t **all, size_t *all_len);
FED_WUR fed_err fed_comm_allreduce(const fed_comm *c, uint64_t *v, size_t n,
                                       fed_comm_op op);

#endif
