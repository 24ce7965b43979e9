/* peer_ar_queue.c - the all-reduce's outgoing queue (peer_allreduce.c
 * holds the attempts and the fault rule): SLICE, AR_ABORT and AR_VERIFY
 * frames wait here in send order, at most one in flight per recipient,
 * until ACKed (the ACK echoes the frame's tag, so a late ACK of a resent
 * copy ends nothing); a frame with no ACK by NODE_TIMER_RETRY goes again
 * by node/retry.c's rule. */
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "node/peer_impl.h"

void fedi_node_peer_arq_free(node_mesh *p)
{
    for (size_t i = 0; i < p->ar_nq; i++)
        fed_free(p->ar_q[i].vec);
    fed_free(p->ar_q);
    p->ar_q = NULL;
    p->ar_nq = p->ar_capq = 0;
}

/* How long a frame waits for its ACK: deadline_ms / 20 (10 ms at least),
 * or cfg.transfer.retry_ms when shorter. */
static uint64_t retry_ms(const fed_node *n)
{
    uint64_t r = n->cfg.deadline_ms / 20;

    if (r < 10)
        r = 10;
    return n->cfg.transfer.retry_ms && n->cfg.transfer.retry_ms < r ? n->cfg.transfer.retry_ms : r;
}

/* What a frame's ACK echoes (FED_WIRE_ACK_STEP's 16 bits): the step and
 * attempt of a SLICE (the step alone in attempt 0), the attempt of an
 * abort, the attempt and row of a verification. */
uint32_t fedi_node_peer_arq_ack_tag(uint8_t type, const fed_wire_block *b)
{
    uint64_t v = type == FED_WIRE_SLICE      ? b->step
                 : type == FED_WIRE_AR_ABORT ? 0xa000000000000000ull ^ b->attempt
                                             : 0xb000000000000000ull ^ b->attempt << 16 ^ b->in_row;

    return FED_WIRE_ACK_STEP((v ^ v >> 16 ^ v >> 32 ^ v >> 48) & 0xffffu);
}

void fedi_node_peer_arq_drop(node_mesh *p, size_t i)
{
    fed_free(p->ar_q[i].vec);
    memmove(&p->ar_q[i], &p->ar_q[i + 1], (p->ar_nq - i - 1) * sizeof *p->ar_q);
    p->ar_nq--;
}

static fed_err emit(fed_node *n, ar_out *o)
{
    fed_wire_hdr h;
    fed_err e;

    /* addressed to any epoch (0): a restarted member holds no all-reduce a
       replayed frame could enter (gossip/wire.h) */
    if ((e = fedi_node_header(n, o->type, o->to, o->round, 0, o->codec, &h)) != FED_OK)
        return e;
    return fedi_node_emit_vec(n, NULL, &h, &o->b, o->vec, o->len);
}

/* Sends the first frame waiting for each recipient with none in flight. */
void fedi_node_peer_arq_pump(fed_node *n)
{
    node_mesh *p = n->mesh;
    int any = 0;

    for (size_t i = 0; i < p->ar_nq; i++) {
        ar_out *o = &p->ar_q[i];
        int busy = 0;

        for (size_t j = 0; j < i && !busy; j++)
            busy = !memcmp(p->ar_q[j].to, o->to, 32);
        if (!busy && !o->inflight) {
            fed_err e = emit(n, o);

            if (e != FED_OK)
                fed_log(FED_LOG_WARN, "peer: %s of round %llu to member %zu: %s (sent again "
                        "later)", fed_wire_type_name(o->type), (unsigned long long)o->round,
                        fedi_node_peer_member_of(p, o->to), fed_strerror(e));
            o->inflight = 1;
        }
        any = 1;
    }
    if (any)
        (void)fedi_node_arm_in(n, retry_ms(n), NODE_TIMER_RETRY);
}

/* A new entry at the queue's end (zeroed but for what is given); vec is
 * taken. */
fed_err fedi_node_peer_arq_put(node_mesh *p, uint8_t type, const uint8_t to[32], uint64_t round,
                                const fed_wire_block *b, uint8_t *vec, size_t len, uint16_t codec)
{
    ar_out *o;

    if (p->ar_nq == p->ar_capq) {
        size_t cap = p->ar_capq ? 2 * p->ar_capq : 16;
        ar_out *q = fed_realloc(p->ar_q, cap * sizeof *q);

        if (!q) {
            fed_free(vec);
            return FED_ERR_NOMEM;
        }
        p->ar_q = q;
        p->ar_capq = cap;
    }
    o = &p->ar_q[p->ar_nq++];
    memset(o, 0, sizeof *o);
    memcpy(o->to, to, 32);
    o->type = type;
    o->codec = codec;
    o->round = round;
    o->attempt = p->ar_attempt;
    o->b = *b;
    o->vec = vec;
    o->len = len;
    return FED_OK;
}

/* Drops this round's waiting slices and verifications (aborts stay: the
 * others must hear them). */
void fedi_node_peer_arq_drop_round(fed_node *n)
{
    node_mesh *p = n->mesh;

    for (size_t i = p->ar_nq; i-- > 0;)
        if (p->ar_q[i].round == n->round + 1 && p->ar_q[i].type != FED_WIRE_AR_ABORT) {
            if (p->ar_q[i].inflight && fedi_node_tx_active(n, p->ar_q[i].to))
                fedi_node_tx_drop(n, p->ar_q[i].to);
            fedi_node_peer_arq_drop(p, i);
        }
}

int fedi_node_peer_ar_on_ack(fed_node *n, const fed_wire_msg *m, fed_err *out)
{
    node_mesh *p = n->mesh;
    size_t k = fedi_node_peer_member_of(p, m->hdr.sender), i;
    fed_err status = (fed_err)m->block.status;
    ar_out *o;

    *out = FED_OK;
    for (i = 0; i < p->ar_nq; i++)
        if (!memcmp(p->ar_q[i].to, m->hdr.sender, 32))
            break;
    if (k == SIZE_MAX || i == p->ar_nq || !p->ar_q[i].inflight || p->ar_q[i].round != m->hdr.round)
        return 0;
    o = &p->ar_q[i];
    if ((m->block.ack_flags & FED_WIRE_ACK_STEP_MASK) &&
        (m->block.ack_flags & FED_WIRE_ACK_STEP_MASK) != fedi_node_peer_arq_ack_tag(o->type, &o->b))
        return 1; /* the ACK of an earlier frame's resent copy: not this one's */
    if (status == FED_OK && fedi_node_tx_active(n, m->hdr.sender)) {
        int done = 1;

        *out = fedi_node_tx_push(n, m->hdr.sender, &done);
        if (!done || *out != FED_OK)
            return 1; /* the next chunk is out (or the retry sends it again) */
    }
    fedi_node_tx_drop(n, m->hdr.sender);
    if (status == FED_ERR_BUSY) {
        o->inflight = 0; /* sent again at the retry */
        return 1;
    }
    if (status != FED_OK)
        fed_log(status == FED_ERR_LATE ? FED_LOG_INFO : FED_LOG_WARN, /* it moved on */
                "peer: member %zu refused our %s of round %llu: %s", k,
                fed_wire_type_name(o->type), (unsigned long long)o->round, fed_strerror(status));
    fedi_node_peer_arq_drop(p, i);
    fedi_node_peer_arq_pump(n);
    return 1;
}

fed_err fedi_node_peer_ar_on_retry(fed_node *n)
{
    node_mesh *p = n->mesh;

    for (size_t i = 0; i < p->ar_nq; i++) {
        ar_out *o = &p->ar_q[i];
        fed_err e;

        /* no budget: an entry leaves when ACKed or when its attempt or
           round is dropped; the whole frame again (pump, a fresh
           sequence) unless a stream's frame in flight went again */
        if (o->inflight && (!fedi_node_retry_frame(n, o->to, 0, &e) || e != FED_OK))
            o->inflight = 0;
    }
    fedi_node_peer_arq_pump(n);
    return FED_OK;
}
