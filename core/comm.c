/* comm.c - the single-process side of core/comm.h: a NULL comm is rank 0 of
 * 1, its all-gather a copy and its reductions the identity. */
#include "core/comm.h"

#include <string.h>

#include "core/alloc.h"

int fed_comm_rank(const fed_comm *c) { return c ? c->rank : 0; }
int fed_comm_size(const fed_comm *c) { return c ? c->size : 1; }

fed_err fed_comm_allgather(const fed_comm *c, const uint8_t *buf, size_t len,
                               uint8_t **all, size_t *all_len)
{
    *all = NULL;
    *all_len = 0;
    if (c && c->size > 1)
        return c->allgather(c->ctx, buf, len, all, all_len);
    if (!len)
        return FED_OK;
    if (!(*all = fed_malloc(len)))
        return FED_ERR_NOMEM;
    memcpy(*all, buf, len);
    *all_len = len;
    return FED_OK;
}

fed_err fed_comm_allreduce(const fed_comm *c, uint64_t *v, size_t n, fed_comm_op op)
{
    if (c && c->size > 1)
        return c->allreduce(c->ctx, v, n, op);
    return FED_OK;
}
