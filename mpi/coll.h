/* coll.h - the collective a site's ranks train through, behind one small
 * table so MPI fills it today and NCCL can later: a sum of a float buffer
 * in a fixed order (the same bits whatever the transport's own algorithm),
 * a broadcast from rank 0, and an abort; every wait has a deadline, so a
 * rank that dies or stalls ends the call with FED_ERR_TIMEOUT, never a hang.
 * fed_coll_local_new is the one-rank collective (every call the identity);
 * fed_coll_mpi_open (mpi/mpi_coll.c, built when mpicc is found; mpi/none.c
 * otherwise) the one over MPI_COMM_WORLD. Nothing here knows of models,
 * nodes or frames. */
#ifndef FED_MPI_COLL_H
#define FED_MPI_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct fed_coll fed_coll;

/* What a transport fills. self is the transport's own state. After a call
 * returned FED_ERR_TIMEOUT (or any error) the only calls left are abort and
 * close: a collective half done cannot be resumed. */
typedef struct fed_coll_ops {
    const char *name; /* "local", "mpi" */
    /* buf[0..n) becomes, on every rank, the sum over ranks of each rank's
       buf, added in rank order 0, 1, .. R-1 (so a fixed R gives the same
       bits on every run); timeout_ms bounds the whole call */
    fed_err (*allreduce_sum)(void *self, float *buf, size_t n, uint32_t timeout_ms);
    /* buf[0..len) of rank 0 into every rank's buf */
    fed_err (*bcast)(void *self, void *buf, size_t len, uint32_t timeout_ms);
    /* end every rank of the job now (never returns for MPI) */
    void (*abort)(void *self, int code);
    void (*close)(void *self);
    /* Point to point (a pipeline's stages): buf[0..n) to rank `to`, or
       from rank `from`, under tag (0..FED_COLL_TAG_MAX); messages of one
       tag between two ranks arrive in the order sent; NULL: the transport
       has none (FED_ERR_UNSUPPORTED) */
    fed_err (*send)(void *self, int to, int tag, const float *buf, size_t n,
                    uint32_t timeout_ms);
    fed_err (*recv)(void *self, int from, int tag, float *buf, size_t n, uint32_t timeout_ms);
    /* the ranks that give the same color as a collective of their own,
       ranked by key (every rank calls it); NULL: FED_ERR_UNSUPPORTED */
    fed_err (*split)(void *self, int color, int key, fed_coll **out);
} fed_coll_ops;

#define FED_COLL_TAG_MAX 32767 /* the least MPI_TAG_UB MPI promises */

/* A collective over ops (rank and size as the transport knows them); the
 * collective owns self from here on, also on failure (closed then). */
FED_WUR fed_err fed_coll_new(const fed_coll_ops *ops, void *self, int rank, int size,
                             fed_coll **out);
/* The one-rank collective: rank 0 of 1; sums and broadcasts leave buf as is. */
FED_WUR fed_err fed_coll_local_new(fed_coll **out);
void fed_coll_free(fed_coll *c);

int fed_coll_rank(const fed_coll *c);
int fed_coll_size(const fed_coll *c);
const char *fed_coll_name(const fed_coll *c);
/* The deadline of each call that follows (default 60000 ms; 1.. ms). */
void fed_coll_set_timeout(fed_coll *c, uint32_t ms);
uint32_t fed_coll_timeout(const fed_coll *c);

FED_WUR fed_err fed_coll_allreduce_sum(fed_coll *c, float *buf, size_t n);
FED_WUR fed_err fed_coll_bcast(fed_coll *c, void *buf, size_t len);
/* Point to point (mpi/coll.h's ops): n floats to or from one rank of c, in
 * order per tag; FED_ERR_INVAL for a rank outside c, itself, or a tag
 * outside 0..FED_COLL_TAG_MAX; FED_ERR_UNSUPPORTED on a transport without
 * (the one-rank collective). */
FED_WUR fed_err fed_coll_send(fed_coll *c, int to, int tag, const float *buf, size_t n);
FED_WUR fed_err fed_coll_recv(fed_coll *c, int from, int tag, float *buf, size_t n);
/* A collective of the ranks of c that give the same color, ranked by key
 * (ties by their rank in c): every rank of c calls it. The new one keeps
 * c's deadline; free it before c. FED_ERR_UNSUPPORTED without. */
FED_WUR fed_err fed_coll_split(fed_coll *c, int color, int key, fed_coll **out);
/* Ends the whole job (every rank) with code; for the local one, returns. */
void fed_coll_abort(fed_coll *c, int code);

/* Bytes one rank sends in one allreduce_sum of n floats over size ranks
 * (the reduce-scatter's and the all-gather's, for benchmarks). */
uint64_t fed_coll_allreduce_bytes(size_t n, int size);
/* The slice [*lo, *hi) of [0, n) that rank owns of size ranks: slices as
 * equal as can be, in rank order (the reduce-scatter's, and a global
 * batch's split). */
void fed_coll_slice(size_t n, int rank, int size, size_t *lo, size_t *hi);

/* mpi/mpi_coll.c (or mpi/none.c when built without MPI) */
/* 1 when the environment says this process was started by mpirun or srun
 * (Open MPI's OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, PMI's PMI_RANK). */
int fed_coll_mpi_launched(void);
/* 1 when this build has MPI. */
int fed_coll_mpi_built(void);
/* MPI_Init_thread with MPI_THREAD_SERIALIZED (a pool thread may make the
 * calls, one at a time), then the collective over MPI_COMM_WORLD. Once per
 * process; fed_coll_free finalizes. FED_ERR_UNSUPPORTED without MPI. */
FED_WUR fed_err fed_coll_mpi_open(int *argc, char ***argv, fed_coll **out);

#endif
