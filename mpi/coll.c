/* coll.c - the collective's dispatch (mpi/coll.h), its one-rank transport
 * and the slicing arithmetic every transport shares. Owns the fed_coll
 * shell and closes its transport; never talks to a network itself. */
#include "mpi/coll.h"

#include <stdlib.h>

#include "core/alloc.h"

struct fed_coll {
    const fed_coll_ops *ops;
    void *self;
    int rank, size;
    uint32_t timeout_ms;
};

fed_err fed_coll_new(const fed_coll_ops *ops, void *self, int rank, int size, fed_coll **out)
{
    fed_coll *c;

    *out = NULL;
    if (!ops || !ops->allreduce_sum || !ops->bcast || size < 1 || rank < 0 || rank >= size) {
        if (ops && ops->close)
            ops->close(self);
        return FED_ERR_INVAL;
    }
    if (!(c = fed_calloc(1, sizeof *c))) {
        if (ops->close)
            ops->close(self);
        return FED_ERR_NOMEM;
    }
    c->ops = ops;
    c->self = self;
    c->rank = rank;
    c->size = size;
    c->timeout_ms = 60000;
    *out = c;
    return FED_OK;
}

void fed_coll_free(fed_coll *c)
{
    if (!c)
        return;
    if (c->ops->close)
        c->ops->close(c->self);
    fed_free(c);
}

int fed_coll_rank(const fed_coll *c) { return c->rank; }
int fed_coll_size(const fed_coll *c) { return c->size; }
const char *fed_coll_name(const fed_coll *c) { return c->ops->name; }
uint32_t fed_coll_timeout(const fed_coll *c) { return c->timeout_ms; }

void fed_coll_set_timeout(fed_coll *c, uint32_t ms)
{
    c->timeout_ms = ms ? ms : 1;
}

fed_err fed_coll_allreduce_sum(fed_coll *c, float *buf, size_t n)
{
    if (!buf && n)
        return FED_ERR_INVAL;
    return c->ops->allreduce_sum(c->self, buf, n, c->timeout_ms);
}

fed_err fed_coll_bcast(fed_coll *c, void *buf, size_t len)
{
    if (!buf && len)
        return FED_ERR_INVAL;
    return c->ops->bcast(c->self, buf, len, c->timeout_ms);
}

static int p2p_ok(const fed_coll *c, int peer, int tag, const void *buf, size_t n)
{
    return peer >= 0 && peer < c->size && peer != c->rank && tag >= 0 &&
           tag <= FED_COLL_TAG_MAX && (buf || !n);
}

fed_err fed_coll_send(fed_coll *c, int to, int tag, const float *buf, size_t n)
{
    if (!c->ops->send)
        return FED_ERR_UNSUPPORTED;
    if (!p2p_ok(c, to, tag, buf, n))
        return FED_ERR_INVAL;
    return c->ops->send(c->self, to, tag, buf, n, c->timeout_ms);
}

fed_err fed_coll_recv(fed_coll *c, int from, int tag, float *buf, size_t n)
{
    if (!c->ops->recv)
        return FED_ERR_UNSUPPORTED;
    if (!p2p_ok(c, from, tag, buf, n))
        return FED_ERR_INVAL;
    return c->ops->recv(c->self, from, tag, buf, n, c->timeout_ms);
}

fed_err fed_coll_split(fed_coll *c, int color, int key, fed_coll **out)
{
    fed_err err;

    *out = NULL;
    if (!c->ops->split)
        return FED_ERR_UNSUPPORTED;
    if ((err = c->ops->split(c->self, color, key, out)) == FED_OK)
        (*out)->timeout_ms = c->timeout_ms;
    return err;
}

void fed_coll_abort(fed_coll *c, int code)
{
    if (c->ops->abort)
        c->ops->abort(c->self, code);
}

int fed_coll_mpi_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

void fed_coll_slice(size_t n, int rank, int size, size_t *lo, size_t *hi)
{
    size_t q = n / (size_t)size, r = n % (size_t)size, k = (size_t)rank;

    /* the first r ranks take one more */
    *lo = k * q + (k < r ? k : r);
    *hi = *lo + q + (k < r ? 1 : 0);
}

uint64_t fed_coll_allreduce_bytes(size_t n, int size)
{
    size_t lo, hi, own;

    if (size <= 1)
        return 0;
    fed_coll_slice(n, 0, size, &lo, &hi);
    own = hi - lo; /* the largest slice */
    /* the reduce-scatter sends every slice but its own; the all-gather sends
       its own slice to every other rank */
    return (uint64_t)sizeof(float) * ((uint64_t)(n - own) + (uint64_t)own * (uint64_t)(size - 1));
}

/* ---- the one-rank transport ---- */

static fed_err local_allreduce(void *self, float *buf, size_t n, uint32_t timeout_ms)
{
    (void)self, (void)buf, (void)n, (void)timeout_ms;
    return FED_OK;
}

static fed_err local_bcast(void *self, void *buf, size_t len, uint32_t timeout_ms)
{
    (void)self, (void)buf, (void)len, (void)timeout_ms;
    return FED_OK;
}

static const fed_coll_ops local_ops = {
    .name = "local",
    .allreduce_sum = local_allreduce,
    .bcast = local_bcast,
};

fed_err fed_coll_local_new(fed_coll **out)
{
    return fed_coll_new(&local_ops, NULL, 0, 1, out);
}
