/* mpi_coll.c - the collective of mpi/coll.h over MPI_COMM_WORLD (Open MPI),
 * or a split of it (a pipeline's stage across its replicas): the sum as a
 * reduce-scatter into fixed slices, each summed by its owner in rank order,
 * then an all-gather, and a pipeline's point-to-point sends, all with
 * non-blocking calls polled against a deadline (Open MPI 4.1 has no fault
 * tolerance: a dead rank would block a blocking call forever). Owns MPI's
 * init and finalize and the scratch of the owner's slice; never aborts on
 * its own. */
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/log.h"
#include "mpi/coll.h"

enum { TAG_SCATTER = 0x6c1, TAG_GATHER = 0x6c2 };
#define BCAST_PIECE ((size_t)1 << 30) /* bytes per MPI_Ibcast (counts are int) */

typedef struct mpi_coll {
    MPI_Comm comm;      /* MPI_COMM_WORLD, or a split of it (freed at close) */
    int rank, size;
    float *scratch;     /* (size, slice) the owner's slice from every rank */
    size_t scratch_cap; /* floats */
    MPI_Request *req;   /* (2 * size) */
} mpi_coll;

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Until every request of req[0..n) is done or the deadline passes. MPI
   moves a large message in pieces only while it is polled (MPI_Testall), so
   the first WAIT_SPIN_MS poll back to back (yielding the core to whoever
   else wants it); after that the wait is for a slower rank, or for the next
   round, and naps grow from 50 us to 10 ms. */
#define WAIT_SPIN_MS 5
static fed_err wait_all(MPI_Request *req, int n, uint64_t deadline, const char *what)
{
    uint64_t start = mono_ms(), now;
    int done = 0;

    for (;;) {
        if (MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            return FED_ERR_IO;
        if (done)
            return FED_OK;
        if ((now = mono_ms()) >= deadline) {
            fed_log(FED_LOG_ERROR, "mpi: %s not done by its deadline: a rank died or stalls",
                    what);
            return FED_ERR_TIMEOUT;
        }
        if (now - start < WAIT_SPIN_MS) {
            sched_yield();
        } else {
            long us = now - start < 100 ? 50 : now - start < 2000 ? 1000 : 10000;
            struct timespec nap = {0, us * 1000};

            nanosleep(&nap, NULL);
        }
    }
}

static fed_err mpi_allreduce(void *self, float *buf, size_t n, uint32_t timeout_ms)
{
    mpi_coll *c = self;
    uint64_t deadline = mono_ms() + timeout_ms;
    size_t lo, hi, own, cap, slo, shi;
    int nreq = 0;
    fed_err e;

    if (c->size == 1)
        return FED_OK;
    fed_coll_slice(n, 0, c->size, &lo, &hi);
    if (hi - lo > INT_MAX)
        return FED_ERR_TOO_LARGE;
    fed_coll_slice(n, c->rank, c->size, &lo, &hi);
    own = hi - lo;
    cap = own * (size_t)c->size;
    if (cap > c->scratch_cap) {
        float *s = fed_malloc((cap ? cap : 1) * sizeof *s);

        if (!s)
            return FED_ERR_NOMEM;
        fed_free(c->scratch);
        c->scratch = s;
        c->scratch_cap = cap;
    }
    /* reduce-scatter: rank q's copy of my slice lands in scratch row q */
    for (int q = 0; q < c->size; q++) {
        if (q == c->rank)
            continue;
        fed_coll_slice(n, q, c->size, &slo, &shi);
        MPI_Irecv(c->scratch + (size_t)q * own, (int)own, MPI_FLOAT, q, TAG_SCATTER,
                  c->comm, &c->req[nreq++]);
        MPI_Isend(buf + slo, (int)(shi - slo), MPI_FLOAT, q, TAG_SCATTER, c->comm,
                  &c->req[nreq++]);
    }
    if ((e = wait_all(c->req, nreq, deadline, "allreduce (reduce-scatter)")) != FED_OK)
        return e;
    memcpy(c->scratch + (size_t)c->rank * own, buf + lo, own * sizeof *buf);
    /* the sum of my slice, in rank order whatever order the parts came in */
    for (size_t i = 0; i < own; i++) {
        float s = c->scratch[i];

        for (int q = 1; q < c->size; q++)
            s += c->scratch[(size_t)q * own + i];
        buf[lo + i] = s;
    }
    /* all-gather: every owner's summed slice to every rank */
    nreq = 0;
    for (int q = 0; q < c->size; q++) {
        if (q == c->rank)
            continue;
        fed_coll_slice(n, q, c->size, &slo, &shi);
        MPI_Irecv(buf + slo, (int)(shi - slo), MPI_FLOAT, q, TAG_GATHER, c->comm,
                  &c->req[nreq++]);
        MPI_Isend(buf + lo, (int)own, MPI_FLOAT, q, TAG_GATHER, c->comm,
                  &c->req[nreq++]);
    }
    return wait_all(c->req, nreq, deadline, "allreduce (all-gather)");
}

static fed_err mpi_bcast(void *self, void *buf, size_t len, uint32_t timeout_ms)
{
    mpi_coll *c = self;
    uint64_t deadline = mono_ms() + timeout_ms;
    fed_err e;

    if (c->size == 1)
        return FED_OK;
    for (size_t off = 0; off < len || off == 0; off += BCAST_PIECE) {
        size_t k = len - off < BCAST_PIECE ? len - off : BCAST_PIECE;

        MPI_Ibcast((char *)buf + off, (int)k, MPI_BYTE, 0, c->comm, &c->req[0]);
        if ((e = wait_all(c->req, 1, deadline, "broadcast")) != FED_OK)
            return e;
        if (len == 0)
            break;
    }
    return FED_OK;
}

static void mpi_abort(void *self, int code)
{
    (void)self;
    MPI_Abort(MPI_COMM_WORLD, code);
}

/* Point to point, in pieces of at most INT_MAX floats (counts are int),
   each polled to the call's deadline. */
static fed_err mpi_p2p(mpi_coll *c, int peer, int tag, float *buf, size_t n, int out,
                       uint32_t timeout_ms)
{
    uint64_t deadline = mono_ms() + timeout_ms;
    fed_err e;

    for (size_t off = 0; off < n || off == 0; off += INT_MAX) {
        int k = n - off < INT_MAX ? (int)(n - off) : INT_MAX;

        if (out)
            MPI_Isend(buf + off, k, MPI_FLOAT, peer, tag, c->comm, &c->req[0]);
        else
            MPI_Irecv(buf + off, k, MPI_FLOAT, peer, tag, c->comm, &c->req[0]);
        if ((e = wait_all(c->req, 1, deadline, out ? "send" : "receive")) != FED_OK)
            return e;
        if (n == 0)
            break;
    }
    return FED_OK;
}

static fed_err mpi_send(void *self, int to, int tag, const float *buf, size_t n,
                        uint32_t timeout_ms)
{
    return mpi_p2p(self, to, tag, (float *)(uintptr_t)buf, n, 1, timeout_ms);
}

static fed_err mpi_recv(void *self, int from, int tag, float *buf, size_t n, uint32_t timeout_ms)
{
    return mpi_p2p(self, from, tag, buf, n, 0, timeout_ms);
}

static void mpi_close(void *self)
{
    mpi_coll *c = self;
    int fin = 0;

    if (!c)
        return;
    fed_free(c->scratch);
    fed_free(c->req);
    if (c->comm != MPI_COMM_WORLD) { /* a split: MPI stays for the world's */
        if (c->comm != MPI_COMM_NULL)
            MPI_Comm_free(&c->comm);
        fed_free(c);
        return;
    }
    fed_free(c);
    if (MPI_Finalized(&fin) == MPI_SUCCESS && !fin)
        MPI_Finalize();
}

static fed_err mpi_split(void *self, int color, int key, fed_coll **out);

static const fed_coll_ops mpi_ops = {
    .name = "mpi",
    .allreduce_sum = mpi_allreduce,
    .bcast = mpi_bcast,
    .abort = mpi_abort,
    .close = mpi_close,
    .send = mpi_send,
    .recv = mpi_recv,
    .split = mpi_split,
};

/* The ranks' state over comm (owned from here on); NULL when out of
   memory (comm then freed unless it is the world). */
static mpi_coll *coll_over(MPI_Comm comm)
{
    mpi_coll *c = fed_calloc(1, sizeof *c);

    if (!c) {
        if (comm != MPI_COMM_WORLD)
            MPI_Comm_free(&comm);
        return NULL;
    }
    c->comm = comm;
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
    if (!(c->req = fed_calloc(2 * (size_t)c->size, sizeof *c->req))) {
        mpi_close(c);
        return NULL;
    }
    return c;
}

static fed_err mpi_split(void *self, int color, int key, fed_coll **out)
{
    mpi_coll *c = self, *sub;
    MPI_Comm nc = MPI_COMM_NULL;

    /* MPI_Comm_split blocks until every rank calls: a dead rank makes
       mpirun end the job, as its other collectives do */
    if (MPI_Comm_split(c->comm, color < 0 ? 0 : color, key, &nc) != MPI_SUCCESS)
        return FED_ERR_IO;
    if (!(sub = coll_over(nc)))
        return FED_ERR_NOMEM;
    return fed_coll_new(&mpi_ops, sub, sub->rank, sub->size, out);
}

int fed_coll_mpi_built(void)
{
    return 1;
}

fed_err fed_coll_mpi_open(int *argc, char ***argv, fed_coll **out)
{
    mpi_coll *c = NULL;
    int provided = 0, inited = 0;

    *out = NULL;
    if (MPI_Initialized(&inited) != MPI_SUCCESS || inited)
        return FED_ERR_BUSY; /* once per process */
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return FED_ERR_IO;
    if (provided < MPI_THREAD_SERIALIZED) {
        fed_log(FED_LOG_ERROR, "mpi: the library gives thread level %d; a pool thread "
                               "makes the calls, which needs MPI_THREAD_SERIALIZED", provided);
        MPI_Finalize();
        return FED_ERR_UNSUPPORTED;
    }
    if (!(c = coll_over(MPI_COMM_WORLD))) {
        int fin = 0;

        if (MPI_Finalized(&fin) == MPI_SUCCESS && !fin)
            MPI_Finalize();
        return FED_ERR_NOMEM;
    }
    return fed_coll_new(&mpi_ops, c, c->rank, c->size, out);
}
