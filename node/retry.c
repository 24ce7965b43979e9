/* retry.c - the one retransmission rule of a request that has had no answer
 * by its NODE_TIMER_RETRY, which a client's DELTA and LEAVE, a secure
 * round's stage requests and an all-reduce member's queued frames share: a
 * budget of retries, then the frame in flight again when the request went
 * as a CHUNK stream still held (node/transfer.c), else the whole request. */
#include "node/node_impl.h"

int fedi_node_retry_take(fed_node *n, const uint8_t to[32], uint32_t *used, uint32_t max)
{
    if (*used >= max) {
        if (to)
            fedi_node_tx_drop(n, to);
        return 0;
    }
    (*used)++;
    return 1;
}

int fedi_node_retry_frame(fed_node *n, const uint8_t to[32], uint64_t arm_ms, fed_err *e)
{
    if (!fedi_node_tx_active(n, to))
        return 0;
    if (arm_ms)
        fedi_node_arm_in(n, arm_ms, NODE_TIMER_RETRY); /* a failure stops the node */
    *e = fedi_node_tx_resend(n, to);
    return 1;
}
