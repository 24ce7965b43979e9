/* peer_impl.h - internals shared by the peer role's files: peer.c (rounds,
 * push-sum, checkpoints, frames) and peer_members.c (the member list and the
 * PEERS gossip). Not a public header: nothing outside these two includes it. */
#ifndef FED_NODE_PEER_IMPL_H
#define FED_NODE_PEER_IMPL_H

#include "crypto/envelope.h"
#include "gossip/allreduce.h"
#include "gossip/peers.h"
#include "gossip/pushsum.h"
#include "gossip/topology.h"
#include "node/node_impl.h"


typedef enum mesh_state {
    MESH_IDLE = 0,     /* between rounds (the next starts on NODE_TIMER_ROUND) */
    MESH_TRAINING = 1, /* the training job runs */
    MESH_WAITING = 2,  /* shares sent; waiting for the in-neighbours' */
    MESH_DONE = 3,
} mesh_state;

typedef enum mesh_sync { SYNC_BSP, SYNC_SSP, SYNC_ASP, SYNC_BAP } mesh_sync;
typedef enum mesh_mix {
    MIX_PUSHSUM,
    MIX_PLAIN,
    MIX_METROPOLIS,
    MIX_PAIRWISE,
    MIX_ALLREDUCE /* exact: peer_allreduce.c */
} mesh_mix;

/* A SLICE, AR_ABORT or AR_VERIFY frame sent or waiting (peer_ar_queue.c). */
typedef struct ar_out {
    uint8_t to[32];  /* the recipient's key: the member list may be rebuilt (a
                        reload, a member expired) while a frame waits */
    uint8_t type;    /* SLICE, AR_ABORT, AR_VERIFY */
    uint16_t codec;
    uint64_t round, attempt;
    fed_wire_block b;
    uint8_t *vec;    /* the encoded range (f64) or the keys left out, owned */
    size_t len;
    int inflight;    /* sent, no ACK yet */
} ar_out;

/* What the node knows of each member (index = allow-list order). */
typedef struct mesh_member {
    uint8_t key[32];
    uint64_t seen_round;  /* the newest round of its SHAREs since this start */
    uint32_t missed;      /* rounds in a row it was waited for in vain (it
                             is suspected at 1, no longer waited for at 2;
                             any frame from it sets it back to 0) */
} mesh_member;

/* A sender's newest SHARE taken since the last round's end, for the record
 * of the round that adds it (a member costs its 48 bytes alone: every peer
 * knows every member, but only its in-neighbours' shares wait here). */
typedef struct mesh_share_rec {
    uint8_t key[32];
    uint8_t header[FED_WIRE_HEADER_BYTES];
    uint8_t digest[FED_CRYPTO_DIGEST_BYTES];
    uint8_t sig[FED_CRYPTO_SIG_BYTES];
} mesh_share_rec;

struct node_mesh {
    fed_gossip_peers *table;     /* cfg.peer.peers, or own_table */
    fed_gossip_peers *own_table;
    int members_changed;         /* PEERS brought new entries: rebuild at the round */
    uint64_t allow_gen;          /* the allow-list's generation at the last rebuild */
    int advertise_now;           /* the members changed: spread the entries */
    fed_gossip_topo *topo;
    fed_gossip_ps *ps;
    mesh_member *mem;     /* (n) */
    mesh_share_rec *recs; /* (nrecs) the shares the round's end will add */
    size_t nrecs, cap_recs;
    size_t n, self;
    mesh_state state;
    int rejoining;        /* resumed from a checkpoint, not yet in step */
    mesh_sync sync;
    uint32_t ssp_lag;     /* ssp:S */
    double asp_thresh;    /* asp:T */
    mesh_mix mix;
    size_t dim;
    float *model;         /* (dim) the estimate: where training starts */
    float *trained;       /* (dim) the job's result */
    float *sent;          /* (dim) asp: the model at the last send; NULL otherwise */
    int sent_once;
    uint32_t *nbr;        /* (n) scratch: neighbour ids */
    uint32_t *in;         /* (n) this round's in-neighbours */
    size_t nin;
    uint8_t (*okeys)[32]; /* (n) scratch: out-neighbour keys */
    double *frac;         /* (n) scratch */
    uint8_t *vec;         /* SHARE vector scratch (f64) */
    size_t cap_vec;
    uint64_t round_start_ms;
    uint64_t bytes_in0, bytes_out0;
    double loss;
    uint64_t samples;
    fed_model *eval;      /* the model evaluated on cfg.data.test, or NULL: own_eval,
                             or the one cfg.hooks->eval_model lends */
    fed_model *own_eval;  /* the node's own (NULL when lent one) */
    double flops;         /* per sample, for the simulator's clock */
    fed_node_peer_mem mem_peak; /* the largest total noted (fed_node_peer_mem_get) */
    node_train_job job;
    /* mixing allreduce (peer_allreduce.c) */
    fed_gossip_ar_plan ar_plan;
    fed_gossip_ar_member *ar;  /* this round's run, NULL when none */
    uint32_t ar_sent;          /* steps whose sends are queued */
    ar_out *ar_q;              /* slices not yet ACKed, in send order */
    size_t ar_nq, ar_capq;
    double *ar_buf;            /* (dim + 1) scratch */
    uint32_t ar_merged;        /* members whose models the round's mean holds,
                                  besides this one (0: the run failed) */
    /* the fault rule (peer_allreduce.c, docs/DESIGN.md) */
    int ar_phase;              /* 0: not begun; AR_RUN, AR_VERIFY, AR_ABORT */
    uint32_t ar_attempt;       /* this round's attempt: 0, then each redo */
    size_t ar_capn;            /* room in the three arrays below */
    uint8_t *ar_left;          /* (n) members left out of this round */
    uint8_t *ar_grp;           /* (n) members of this round's group (cfg.peer.group_size) */
    double ar_carry;           /* groups: the weight the last mean stands for */
    uint32_t *ar_ids;          /* (n) the attempt's members, in key order */
    uint32_t *ar_rank;         /* (n) a member's place in ar_ids, UINT32_MAX: out */
    uint32_t ar_nids;
    uint64_t ar_t0;            /* when the attempt started (env ms) */
    uint8_t ar_hash[32];       /* the attempt's result: keys and sums hashed */
    uint64_t ar_row;           /* members in a row, ending here, whose hash is ours */
    uint64_t ar_rx[32];        /* the row member (rank - 2^k) said (0: nothing yet) */
    uint8_t ar_rx_hash[32][32];/* ... and its hash */
    uint64_t ar_tx[32];        /* the row sent to member (rank + 2^k) (0: none yet) */
};

/* ---- peer.c ---- */
/* The gossip topology's spec (cfg.peer.topology; a ring under all-reduce). */
const char *fedi_node_peer_gossip_topology(const fed_node_config *c);
/* The round's end: what was mixed in, evaluation, the record, the next round. */
fed_err fedi_node_peer_finish_round(fed_node *n);

/* ---- peer_allreduce.c ---- */
/* After training: this round's all-reduce starts (its first sends out). */
fed_err fedi_node_peer_ar_begin(fed_node *n);
/* A SLICE request: taken into the run, ACKed (BUSY: not in that round yet). */
fed_err fedi_node_peer_ar_on_slice(fed_node *n, node_open *op);
/* NODE_TIMER_DEADLINE: a step stalled (the attempt is given up), the
 * verification window closed (the result is taken), or the abort window
 * closed (the round is redone over the rest). */
fed_err fedi_node_peer_ar_on_deadline(fed_node *n);
/* An AR_ABORT or AR_VERIFY request. */
fed_err fedi_node_peer_ar_on_control(fed_node *n, node_open *op);
void fedi_node_peer_ar_free(node_mesh *p);

/* ---- peer_ar_queue.c: the all-reduce's frames until ACKed ---- */
/* A new entry at the queue's end, of p->ar_attempt (vec is taken, freed
 * on failure too). */
FED_WUR fed_err fedi_node_peer_arq_put(node_mesh *p, uint8_t type, const uint8_t to[32],
                                       uint64_t round, const fed_wire_block *b, uint8_t *vec,
                                       size_t len, uint16_t codec);
/* Sends the first frame waiting for each recipient with none in flight,
 * and arms NODE_TIMER_RETRY while any waits. */
void fedi_node_peer_arq_pump(fed_node *n);
/* Drops entry i (its vector freed). */
void fedi_node_peer_arq_drop(node_mesh *p, size_t i);
/* Drops the running round's SLICEs and AR_VERIFYs, and their streams
 * (AR_ABORTs stay: the others must hear them). */
void fedi_node_peer_arq_drop_round(fed_node *n);
/* What the ACK of a frame of type with block b echoes (FED_WIRE_ACK_STEP). */
uint32_t fedi_node_peer_arq_ack_tag(uint8_t type, const fed_wire_block *b);
/* An ACK: 1 when it answered one of our frames (*e: what handling it gave). */
int fedi_node_peer_ar_on_ack(fed_node *n, const fed_wire_msg *m, fed_err *e);
/* NODE_TIMER_RETRY: frames with no ACK go again. */
fed_err fedi_node_peer_ar_on_retry(fed_node *n);
void fedi_node_peer_arq_free(node_mesh *p);

/* ---- peer_members.c ---- */
/* p->table: cfg.peer.peers or a table of its own, --publish's entry learned. */
fed_err fedi_node_peer_table_open(fed_node *n);
/* The member list anew from the allow-list and the table (*changed: it
 * differs from the one before, and the topology was rebuilt). */
fed_err fedi_node_peer_rebuild_members(fed_node *n, int *changed);
/* At a round's start: rebuild the members when anything they come from
 * may have changed (logged on failure: the old list stays). */
void fedi_node_peer_refresh_members(fed_node *n);
/* The wire's membership test (fed_wire_set_member_fn); ctx is the node. */
int fedi_node_peer_wire_member(void *ctx, const uint8_t pk[32]);
/* key's index in p->mem, or SIZE_MAX. */
size_t fedi_node_peer_member_of(const node_mesh *p, const uint8_t key[32]);
/* PEERS to round's m out-neighbours (p->nbr) when one is due. */
void fedi_node_peer_advertise_due(fed_node *n, uint64_t round, size_t m);
/* A PEERS request: its entries into the table, answered. */
fed_err fedi_node_peer_on_peers(fed_node *n, node_open *op);

#endif
