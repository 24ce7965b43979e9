/* mpi_simcomm.c - core/comm.h over MPI_COMM_WORLD (mpi/simcomm.h): byte
 * counts first, then the bytes, each in rank order; counts past what an MPI
 * int holds are refused (FED_ERR_TOO_LARGE) rather than cut. Owns only its
 * comm struct; MPI's init and finalize are mpi_coll.c's. */
#include <limits.h>
#include <mpi.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "mpi/simcomm.h"

typedef struct simcomm {
    fed_comm c;
    int *scount, *sdispl, *rcount, *rdispl; /* (size) each */
    long long *slen, *rlen;                 /* (size) each */
    long long *shead, *rhead;               /* (3 * size) each: exchange's counts */
} simcomm;

/* Displacements for count[0..n): FED_ERR_TOO_LARGE past INT_MAX in all. */
static fed_err displs(const long long *len, int n, int *count, int *displ, size_t *total)
{
    long long sum = 0;

    for (int k = 0; k < n; k++) {
        if (len[k] < 0 || len[k] > INT_MAX - sum)
            return FED_ERR_TOO_LARGE;
        count[k] = (int)len[k];
        displ[k] = (int)sum;
        sum += len[k];
    }
    *total = (size_t)sum;
    return FED_OK;
}

/* A failure on this rank alone between collectives: the other ranks would
 * wait in the next one for ever (they have no deadline), so the job ends. */
static fed_err one_rank_failed(fed_err e, const char *what)
{
    fed_log(FED_LOG_ERROR, "mpi: %s (%s): ending the job", what, fed_strerror(e));
    MPI_Abort(MPI_COMM_WORLD, 1);
    return e;
}

/* One MPI_Alltoall of (bytes for you, my least time, my bytes in all) a
 * pair, then the bytes with MPI_Alltoallv unless no rank sends any. */
static fed_err sc_exchange(void *ctx, uint8_t *const *send, const size_t *send_len, uint64_t *min,
                           uint8_t **recv, size_t *recv_len)
{
    simcomm *s = ctx;
    int n = s->c.size;
    uint8_t *sbuf = NULL, *rbuf = NULL;
    size_t stotal, rtotal;
    long long mine = 0, anyone = 0;
    fed_err e;

    *recv = NULL;
    *recv_len = 0;
    for (int k = 0; k < n; k++) {
        if (send_len[k] > (size_t)INT_MAX)
            return one_rank_failed(FED_ERR_TOO_LARGE,
                                   "a window's frames to one rank are over 2 GiB: use more ranks");
        mine += (long long)send_len[k];
    }
    for (int k = 0; k < n; k++) {
        s->shead[3 * k] = (long long)send_len[k];
        s->shead[3 * k + 1] = (long long)(*min > (uint64_t)LLONG_MAX ? LLONG_MAX : *min);
        s->shead[3 * k + 2] = mine;
    }
    if (MPI_Alltoall(s->shead, 3, MPI_LONG_LONG, s->rhead, 3, MPI_LONG_LONG, MPI_COMM_WORLD) !=
        MPI_SUCCESS)
        return FED_ERR_IO;
    for (int k = 0; k < n; k++) {
        s->slen[k] = (long long)send_len[k];
        s->rlen[k] = s->rhead[3 * k];
        if ((uint64_t)s->rhead[3 * k + 1] < *min)
            *min = (uint64_t)s->rhead[3 * k + 1];
        anyone += s->rhead[3 * k + 2];
    }
    if (!anyone)
        return FED_OK;
    if ((e = displs(s->slen, n, s->scount, s->sdispl, &stotal)) != FED_OK ||
        (e = displs(s->rlen, n, s->rcount, s->rdispl, &rtotal)) != FED_OK)
        return one_rank_failed(e, "a window's frames are over 2 GiB: use more ranks");
    /* one send buffer in rank order (MPI wants one) */
    if ((stotal && !(sbuf = fed_malloc(stotal))) || (rtotal && !(rbuf = fed_malloc(rtotal)))) {
        fed_free(sbuf);
        return one_rank_failed(FED_ERR_NOMEM, "no memory for a window's frames");
    }
    for (int k = 0; k < n; k++)
        if (send_len[k])
            memcpy(sbuf + s->sdispl[k], send[k], send_len[k]);
    if (MPI_Alltoallv(sbuf, s->scount, s->sdispl, MPI_BYTE, rbuf, s->rcount, s->rdispl, MPI_BYTE,
                      MPI_COMM_WORLD) != MPI_SUCCESS) {
        fed_free(sbuf);
        fed_free(rbuf);
        return FED_ERR_IO;
    }
    fed_free(sbuf);
    *recv = rbuf;
    *recv_len = rtotal;
    return FED_OK;
}

static fed_err sc_allgather(void *ctx, const uint8_t *buf, size_t len, uint8_t **all,
                            size_t *all_len)
{
    simcomm *s = ctx;
    long long mine = len > (size_t)LLONG_MAX ? -1 : (long long)len;
    uint8_t *rbuf = NULL;
    size_t total;
    fed_err e;

    *all = NULL;
    *all_len = 0;
    if (MPI_Allgather(&mine, 1, MPI_LONG_LONG, s->rlen, 1, MPI_LONG_LONG, MPI_COMM_WORLD) !=
        MPI_SUCCESS)
        return FED_ERR_IO;
    if ((e = displs(s->rlen, s->c.size, s->rcount, s->rdispl, &total)) != FED_OK)
        return e;
    if (total && !(rbuf = fed_malloc(total)))
        return one_rank_failed(FED_ERR_NOMEM, "no memory for the gathered rows");
    if (MPI_Allgatherv(buf, (int)len, MPI_BYTE, rbuf, s->rcount, s->rdispl, MPI_BYTE,
                       MPI_COMM_WORLD) != MPI_SUCCESS) {
        fed_free(rbuf);
        return FED_ERR_IO;
    }
    *all = rbuf;
    *all_len = total;
    return FED_OK;
}

static fed_err sc_allreduce(void *ctx, uint64_t *v, size_t n, fed_comm_op op)
{
    MPI_Op mop = op == FED_COMM_MIN ? MPI_MIN : op == FED_COMM_MAX ? MPI_MAX : MPI_SUM;

    (void)ctx;
    if (n > INT_MAX)
        return FED_ERR_TOO_LARGE;
    if (MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_UINT64_T, mop, MPI_COMM_WORLD) != MPI_SUCCESS)
        return FED_ERR_IO;
    return FED_OK;
}

fed_err fed_mpi_sim_comm_new(fed_comm **out)
{
    simcomm *s;
    int inited = 0, rank, size;
    size_t n;

    *out = NULL;
    if (MPI_Initialized(&inited) != MPI_SUCCESS || !inited)
        return FED_ERR_INVAL;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS || size < 1)
        return FED_ERR_IO;
    if (!(s = fed_calloc(1, sizeof *s)))
        return FED_ERR_NOMEM;
    n = (size_t)size;
    s->scount = fed_calloc(n, sizeof *s->scount);
    s->sdispl = fed_calloc(n, sizeof *s->sdispl);
    s->rcount = fed_calloc(n, sizeof *s->rcount);
    s->rdispl = fed_calloc(n, sizeof *s->rdispl);
    s->slen = fed_calloc(n, sizeof *s->slen);
    s->rlen = fed_calloc(n, sizeof *s->rlen);
    s->shead = fed_calloc(3 * n, sizeof *s->shead);
    s->rhead = fed_calloc(3 * n, sizeof *s->rhead);
    s->c = (fed_comm){.rank = rank, .size = size, .ctx = s, .exchange = sc_exchange,
                          .allgather = sc_allgather, .allreduce = sc_allreduce};
    if (!s->scount || !s->sdispl || !s->rcount || !s->rdispl || !s->slen || !s->rlen ||
        !s->shead || !s->rhead) {
        fed_mpi_sim_comm_free(&s->c);
        return FED_ERR_NOMEM;
    }
    *out = &s->c;
    return FED_OK;
}

void fed_mpi_sim_comm_free(fed_comm *c)
{
    simcomm *s = c ? c->ctx : NULL;

    if (!s)
        return;
    fed_free(s->scount);
    fed_free(s->sdispl);
    fed_free(s->rcount);
    fed_free(s->rdispl);
    fed_free(s->slen);
    fed_free(s->rlen);
    fed_free(s->shead);
    fed_free(s->rhead);
    fed_free(s);
}
