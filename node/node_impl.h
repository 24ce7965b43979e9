/* node_impl.h - internals shared by node/node.c (common machinery: sequence
 * numbers, sealing and sending, opening frames as jobs, checkpoint state)
 * and the rest of node/: the roles' operation tables among them. Not a
 * public header. */
#ifndef FED_NODE_NODE_IMPL_H
#define FED_NODE_NODE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "model/codec.h"
#include "model/optim.h"
#include "model/pipeline.h"
#include "model/train.h"
#include "node/layout.h"
#include "node/node.h"

/* Timer ids (one set per role). */
enum {
    NODE_TIMER_ROUND = 1,    /* aggregator: start a round (gather fallback) */
    NODE_TIMER_DEADLINE = 2, /* aggregator: close the round */
    NODE_TIMER_POLL = 3,     /* aggregator: answer holds older than poll_ms */
    NODE_TIMER_RETRY = 4,    /* client: no answer in time */
    NODE_TIMER_STAGE = 5,    /* aggregator: a secure-aggregation stage's deadline */
    NODE_TIMER_COUNT         /* one past the last id: an environment's timer
                                table of this many never fills */
};

_Static_assert(NODE_TIMER_COUNT - 1 == FED_NODE_MAX_TIMERS,
               "FED_NODE_MAX_TIMERS is the number of timer ids");

/* Frames at most this large are opened inline; larger ones as a job. */
#define NODE_INLINE_OPEN_BYTES (64u << 10)
/* Frames being opened at once (beyond: refused, counted as busy). */
#define NODE_MAX_OPENS 64

/* One recipient's sequence numbers in this node's epoch. */
typedef struct node_peer {
    uint8_t key[32];
    uint64_t next_seq;
    uint64_t told_old_ms; /* an aggregator: when it last told this client that a
                             frame was for an older epoch of it (0: never), + 1 */
} node_peer;

/* A frame on its way through precheck (loop), open + decode (job) and
 * finish (loop). */
typedef struct node_open {
    fed_job job;            /* job.user == this */
    struct node_open *next; /* in the node's list of opens in flight */
    const fed_wire *wire;   /* read only, in the job */
    fed_req *req;           /* the request to answer, or NULL for a reply */
    uint8_t *frame;         /* (len) a copy, opened in place */
    size_t len;
    fed_wire_ticket ticket;
    fed_wire_msg msg;
    fed_err result;         /* of open_ticket, then of decoding */
    /* decoding the vector (in the job): */
    size_t expect_n;        /* entries expected; 0: from a MODEL's spec */
    size_t expect_max;      /* a SLICE: at most this many entries */
    size_t expect_words;    /* an SA_MASKED: its u32 words (0: none taken) */
    fed_model_shape shape;  /* for a MODEL's spec */
    int classes;            /* client: the classes it declares (0: none) */
    const char *own_model;  /* client: the model it declares (NULL: any), and */
    double max_params, max_flops; /* what it builds from a MODEL at most */
    char model_why[384];    /* FED_ERR_MODEL_MISMATCH: what differs */
    uint16_t expect_codec;  /* FED_CODEC_NONE: any */
    float *vec;             /* (vec_n) decoded, owned until taken */
    size_t vec_n;
    uint8_t *rx_buf;        /* a stream's buffer lent to the wire by its first
                               frame, owned until the node keeps it */
    double *vec64;          /* (vec_n) a SHARE's f64 vector, owned until taken */
} node_open;

/* The whole spec of the node's model (cfg.graph, else cfg.spec): what
 * builds it. */
static inline const char *fed_node_cfg_whole(const fed_node_config *c)
{
    return c->graph ? c->graph : c->spec;
}

/* The whole spec a MODEL's settings name: its graph (field 13) when it
 * carries one, else its spec; a NUL-terminated copy in *out (fed_free). */
FED_WUR fed_err fedi_node_model_whole(const fed_wire_settings *s, char **out);

/* The input a MODEL's model is built over at a client whose data has
 * shape data (its classes: declared, else its largest label + 1): the
 * MODEL's declared input (field 15) when it carries one, else data. The
 * MODEL's must have data's sample shape and at least its classes (a site
 * holding fewer classes trains the federation's model), and the classes the
 * client declares (declared; 0: none) exactly: else FED_ERR_MODEL_MISMATCH
 * with why (cap bytes; may be NULL) saying both. */
FED_WUR fed_err fedi_node_model_input(const fed_wire_settings *s, fed_model_shape data,
                                      int declared, fed_model_shape *out, char *why, size_t cap);

typedef struct node_tx node_tx; /* an outgoing stream (transfer.c) */
typedef struct node_rx node_rx; /* an incoming stream's buffer (transfer.c) */

typedef struct node_agg node_agg;
typedef struct node_client node_client;
typedef struct node_mesh node_mesh;
typedef struct node_cast_buf node_cast_buf;
typedef struct node_role_ops node_role_ops;

struct fed_node {
    fed_node_config cfg;
    const node_role_ops *ops; /* cfg.role's */
    fed_env env;
    fed_wire *wire;
    uint8_t key[32];
    node_peer *peers; /* (npeers), sorted by key */
    size_t npeers, cap_peers;
    node_open *opens; /* in flight */
    int nopens;
    node_tx *txs;     /* streams being sent, one per recipient */
    node_rx *rxs;     /* streams being received */
    uint8_t *txbuf;   /* a sealed frame being built (cap_tx) */
    size_t cap_tx;
    node_cast_buf *cast; /* frames a broadcast seals together (broadcast.c) */
    uint64_t round;   /* last round finished */
    int finished;
    int started;
    fed_err failed;   /* why it stopped working (fed_node_failed); FED_OK */
    fed_optim_cfg lr_sched; /* cfg's lr, lr_schedule and lr_warmup, in rounds */
    node_agg *agg;
    node_client *client;
    struct node_sa_client *client_sa; /* client: secure aggregation's round (secagg_client.c) */
    node_mesh *mesh;
};

/* ---- node.c: the machinery both roles use ---- */
/* Arms timer id for at_ms (fed_env's set_timer): the one way the node arms
 * a timer. A timer that cannot be armed would stall the round without a
 * word, so a failure is handled here: logged as an error naming the timer,
 * and the node marked failed (fed_node_failed) for whoever runs it to stop
 * it. Returns the failure too, for callers that pass errors on. */
fed_err fedi_node_arm(fed_node *n, uint64_t at_ms, uint32_t id);
/* The same, after_ms from now. */
fed_err fedi_node_arm_in(fed_node *n, uint64_t after_ms, uint32_t id);
/* The learning rate round (1-based) trains at: cfg.lr on cfg.lr_schedule
 * after cfg.lr_warmup rounds, the schedule's step being round - 1. */
float fedi_node_round_lr(const fed_node *n, uint64_t round);
/* Wall-clock ms (env.wall_ms), for the times rows record. */
uint64_t fedi_node_wall_ms(const fed_node *n);
/* The next sequence number for a frame to key. */
FED_WUR fed_err fedi_node_next_seq(fed_node *n, const uint8_t key[32], uint64_t *seq);
/* Header for a frame of type to `to`, sequence and epochs filled in.
 * recipient_epoch: 0 for a HELLO, else the epoch the node last saw. */
FED_WUR fed_err fedi_node_header(fed_node *n, uint8_t type, const uint8_t to[32], uint64_t round,
                                 uint64_t recipient_epoch, uint16_t codec, fed_wire_hdr *h);
/* Seal a frame with block b and vector (vlen bytes) into txbuf, then send
 * it as a request (req == NULL) or as the reply to req. */
FED_WUR fed_err fedi_node_emit(fed_node *n, fed_req *req, fed_wire_hdr *h, const fed_wire_block *b,
                               const uint8_t *vec, size_t vlen);
/* frame (len bytes, sealed) to `to` as a request, or as the reply to req. */
FED_WUR fed_err fedi_node_transmit(fed_node *n, fed_req *req, const uint8_t to[32],
                                   const uint8_t *frame, size_t len);
/* Entries of the vector op's MODEL or DELTA carries, as the role expects. */
FED_WUR fed_err fedi_node_expected_entries(node_open *op, size_t *want);
/* Answer req with an ACK carrying status and flags (a failure is logged;
 * the requester then times out, so callers may ignore it). */
fed_err fedi_node_ack(fed_node *n, fed_req *req, const fed_wire_hdr *to, fed_err status,
                             uint32_t flags);
/* Refuse a request: no answer (an empty reply). NULL fine. */
void fedi_node_refuse(fed_node *n, fed_req *req);

/* x (n) encoded with codec c into *buf (grown as needed, *cap bytes), *len
 * its size; residual as fed_codec_encode. Touches only its arguments (jobs
 * call it). */
FED_WUR fed_err fedi_node_encode_vec(const fed_codec *c, const float *x, size_t n, float *residual,
                                     uint8_t **buf, size_t *cap, size_t *len);

/* Checkpoint helpers. */
void fedi_node_state_encode(uint8_t out[FED_NODE_STATE_BYTES], fed_node_role role, uint64_t round);
/* Every role's resume starts here: the newest checkpoint that verifies into
 * ck (zeroed first; the caller finis it, whatever this returns) and the
 * round its node.state names for this node's role. FED_ERR_NOTFOUND: none
 * (a fresh node); else the load's or the state's error. */
FED_WUR fed_err fedi_node_resume_latest(fed_node *n, fed_store_ckpt *ck, uint64_t *round);

/* ---- broadcast.c: one vector to many recipients, sealed together ---- */
/* A recipient: the request to answer (NULL: a request to `to`), and the
 * epoch its header names. */
typedef struct node_cast {
    fed_req *req;
    uint8_t to[32];
    uint64_t recipient_epoch;
} node_cast;
/* As fedi_node_header and fedi_node_emit_vec for each of the k recipients
 * in turn, with one type, round, codec, block and vector; but the frames
 * are sealed together on cfg.pool and then sent together (in batches of
 * at most 64 frames and 64 MiB; a vector that needs a stream goes one by
 * one).
 * A recipient whose frame could not be made or sent is refused and
 * logged, and the others are still served: returns the first error. */
FED_WUR fed_err fedi_node_broadcast(fed_node *n, const node_cast *to, size_t k, uint8_t type,
                                    uint64_t round, uint16_t codec, const fed_wire_block *b,
                                    const uint8_t *vec, size_t vlen);
/* Seals the same frames for `to` ahead, on the pool, with beside(ctx)
 * started first beside them (the loop thread waits for all of it); a later
 * fedi_node_broadcast of that type, round and payload (the block the same
 * byte for byte, the vector the same) sends each frame whose recipient it
 * names with the same epoch, and drops the others; of another payload, it
 * drops them all and seals its own. Nothing is sealed (beside just runs)
 * for a stream, past one batch or out of memory: the broadcast then seals
 * them itself. Only one set is kept: a new one drops the old. The caller
 * drops them when the vector's bytes change in place. */
void fedi_node_cast_ahead(fed_node *n, const node_cast *to, size_t k, uint8_t type,
                          uint64_t round, uint16_t codec, const fed_wire_block *b,
                          const uint8_t *vec, size_t vlen, void (*beside)(void *ctx),
                          void *beside_ctx);
/* One more frame sealed ahead, for `to`, here on the loop thread: joins
 * the set when it is of the same type, round and payload, else replaces
 * it; when `to` has one already, that one is sealed again (frames sent to
 * it since moved its sequence on: an old frame would fall out of the
 * replay window). Nothing for a stream or past one batch. The payload is
 * hashed once for the set. */
void fedi_node_cast_ahead_add(fed_node *n, const node_cast *to, uint8_t type, uint64_t round,
                              uint16_t codec, const fed_wire_block *b, const uint8_t *vec,
                              size_t vlen);
/* Drops the frames sealed ahead (their sequence numbers go unused). */
void fedi_node_cast_drop_ahead(fed_node *n);
/* Frames sealed ahead that a broadcast sent, since the node started. */
uint64_t fedi_node_cast_sent_ahead(const fed_node *n);
void fedi_node_cast_free(fed_node *n);

/* ---- transfer.c: vectors larger than one frame, as CHUNK streams ---- */
/* As fedi_node_emit, for a MODEL, DELTA or SA_MASKED with a vector: one
 * sealed frame when it fits max_frame, else the first frame of a stream to
 * h->recipient. A MODEL reply's recipient pulls the rest; a DELTA or
 * SA_MASKED request's sender pushes it with fedi_node_tx_push as each ACK
 * comes. The vector is borrowed until the stream is dropped. */
FED_WUR fed_err fedi_node_emit_vec(fed_node *n, fed_req *req, fed_wire_hdr *h,
                                   const fed_wire_block *b, const uint8_t *vec, size_t vlen);
/* As fedi_node_emit_vec, but a stream sends its own copy of vec (freed with
 * the stream): for a caller that reuses vec at once (a peer's SHARE buffer,
 * encoded anew for each out-neighbour). */
FED_WUR fed_err fedi_node_emit_vec_copy(fed_node *n, fed_req *req, fed_wire_hdr *h,
                                        const fed_wire_block *b, const uint8_t *vec,
                                        size_t vlen);
/* Sends the next CHUNK of the stream to `to` as a request; *done when
 * every frame was sent already (nothing is sent then). */
FED_WUR fed_err fedi_node_tx_push(fed_node *n, const uint8_t to[32], int *done);
/* Sends the last frame of the stream to `to` again, with a fresh sequence. */
FED_WUR fed_err fedi_node_tx_resend(fed_node *n, const uint8_t to[32]);
int fedi_node_tx_active(fed_node *n, const uint8_t to[32]);
/* ... and of that round (an ACK of an earlier stream's frame, come after a
 * newer stream replaced it, must not push the newer one's chunks). */
int fedi_node_tx_active_round(fed_node *n, const uint8_t to[32], uint64_t round);
/* Bytes the streams hold now: each outgoing one's frame (and copy), each
 * incoming one's buffer. */
size_t fedi_node_stream_bytes(const fed_node *n);
/* A stream to `to` whose every frame was sent (its last one awaits its
 * answer). */
int fedi_node_tx_sent_all(fed_node *n, const uint8_t to[32]);
void fedi_node_tx_drop(fed_node *n, const uint8_t to[32]);
void fedi_node_tx_drop_all(fed_node *n);

/* Asks again for the chunk awaited from sender (its reply was lost);
 * FED_ERR_NOTFOUND when no stream from it is under way. */
FED_WUR fed_err fedi_node_repull(fed_node *n, const uint8_t sender[32]);
void fedi_node_rx_init(fed_node *n);
/* Job side: a complete stream's whole MODEL or DELTA into op->msg. */
void fedi_node_rx_whole_msg(node_open *op);
/* Loop side, after the frame passed the wire: serves a PULL, or takes a
 * chunk of an unfinished stream (*handled = 1); else the role's turn. */
FED_WUR fed_err fedi_node_transfer_on_msg(fed_node *n, node_open *op, int *handled);
/* After the role took a complete stream's message: the stream goes. */
void fedi_node_transfer_done(fed_node *n, node_open *op);
/* Drops incoming streams that idled too long. */
void fedi_node_rx_sweep(fed_node *n);
/* Drops incoming streams of rounds before `round` (no longer wanted). */
void fedi_node_rx_drop_before(fed_node *n, uint64_t round);
/* The buffers of incoming streams, once the wire is freed. */
void fedi_node_rx_free_all(fed_node *n);

/* ---- retry.c: a request with no answer by its NODE_TIMER_RETRY ----
 * The one rule of a client's DELTA and LEAVE, a secure round's stage
 * request and an all-reduce member's queued frames: a retry is taken from a
 * budget the sender counts; each sends the frame in flight again when the
 * request went as a CHUNK stream still held for its recipient (restamped:
 * the receiver takes each frame once), else the sender builds its whole
 * request again (a fresh sequence number). */
/* One retry from a budget of max that *used counts: 1, *used + 1; or 0
 * when it is spent, the stream to `to` then dropped (to NULL: none). */
int fedi_node_retry_take(fed_node *n, const uint8_t to[32], uint32_t *used, uint32_t max);
/* When a stream to `to` is held: arms NODE_TIMER_RETRY in arm_ms (0: the
 * caller arms it), sends the stream's frame in flight again (*e: how that
 * went) and returns 1; else returns 0 and the caller sends the whole
 * request again. */
int fedi_node_retry_frame(fed_node *n, const uint8_t to[32], uint64_t arm_ms, fed_err *e);

/* ---- train_job.c: a round of local training, off the loop ---- */
typedef struct node_train_job {
    fed_job job;
    /* in */
    fed_wire_settings set;  /* spec, epochs, batch, optimizer, lr, momentum, mu;
                               graph: the whole spec, NUL-terminated, owned by
                               the role (NULL: spec is whole) */
    uint64_t round, seed;   /* the shuffle's stream */
    fed_backend *be;
    fed_pool *pool;
    int shards;
    uint32_t accumulate;    /* micro-batches per step (cfg.accumulate; at most the
                               batch, 0 or 1: none) */
    uint32_t recompute;     /* cfg.recompute (0 or 1: every output kept) */
    fed_precision precision; /* cfg.precision */
    uint32_t pipe_stages;   /* cfg.pipe_stages: > 1, this rank trains its stage of
                               split (site.c's pipe_*) */
    fed_coll *stage_coll;   /* cfg.stage_coll */
    int gpipe;              /* cfg.gpipe */
    size_t global_off;      /* global[0] is parameter global_off: a pipeline
                               rank beyond 0 holds its stage's slice only */
    fed_pipe_stage split[FED_PIPE_MAX_STAGES]; /* the round's stages */
    fed_tensor_info *whole; /* a pipeline: the whole model's tensors (whole_nt) */
    int whole_nt;
    const fed_dataset *data;
    const uint32_t *shard;
    size_t shard_n;
    const float *global;    /* (nparams) the round's MODEL */
    size_t nparams;
    const float *local;     /* client: its local tensors (node/layout.h's LOCAL
                               path, local_n floats) from earlier rounds; NULL:
                               this round's MODEL gives them */
    size_t local_n;
    fed_coll *coll;         /* a site's ranks (node/site.h); NULL: alone */
    fed_codec codec;        /* client: the delta's codec */
    float *residual;        /* (nparams) topk error feedback, or NULL */
    float *params;          /* (nparams) peer: the trained parameters go here;
                               NULL: the encoded delta goes to vec */
    const struct fed_node_test_hooks *hooks; /* cfg.hooks (NULL: the delta as trained) */
    int dp_on;              /* client: DP-SGD with dp (its random: the client's
                               keystream, touched only by this job while it runs) */
    fed_trainer_dp dp;
    fed_data_aug aug;       /* client, peer: the config's augment */
    double noise_std;       /* client, peer: the config's data.noise_std */
    const fed_dataset *local_test; /* client: the config's data.local_test */
    uint32_t finetune_epochs; /* client: the config's data.finetune_epochs */
    double own_acc;         /* out: its own model on local_test before
                               training (NaN: not scored) */
    const int64_t *stats;   /* client, the statistics pass: its contribution
                               (stats_cols x FED_COLSTATS_INTS) instead of
                               training (fedi_node_stats_job_run) */
    uint32_t stats_cols;
    uint32_t eval_ints;     /* client: > 0, the round evaluates the model it
                               starts from on val into eval_out (this many
                               integers, node/site_eval.h), sent after the
                               delta in the clear, or in the masked input */
    uint32_t eval_classes;
    int eval_consent;       /* its own figures may be recorded */
    const fed_dataset *val; /* its own, or val_n samples val_idx of data;
                               neither: an empty evaluation */
    const uint32_t *val_idx;
    size_t val_n;
    int64_t *eval_out;      /* the client's */
    uint32_t max_steps;     /* client: local steps at most (cfg.client.max_steps; 0: none) */
    const float *ctl_c;     /* client, SCAFFOLD: the server's c (nparams), else NULL */
    const float *ctl_i;     /* client, SCAFFOLD: its c_i (nparams; NULL: zero) */
    /* out */
    long dp_steps;          /* DP-SGD steps taken, and their sampling rate */
    double dp_rate;
    uint8_t *vec;           /* the encoded delta (vec_len of cap_vec) */
    size_t vec_len, cap_vec;
    fed_node_layout layout; /* client: the round's tensor paths */
    size_t sent_n;          /* client: floats of the delta in vec */
    float *local_out;       /* client: (layout.len[LOCAL]) the local tensors as
                               trained, owned; the client takes them */
    const float *personal;  /* client, Ditto: its personal model (nparams) from
                               earlier rounds; NULL: it starts from the global */
    float *personal_out;    /* client, Ditto: (nparams) the personal model as
                               trained, owned; the client takes it */
    double loss;
    uint64_t samples;
    fed_err err;
    /* kept from round to round while the spec and batch stay the same: the
       model (its parameters set afresh each round) and the trained copy */
    fed_model *model;
    float *trained;         /* (nparams + the layout's extra segment) */
    float *ctl_out;         /* (nparams) SCAFFOLD: the client's next c_i, or NULL */
    float *sent;            /* (layout.len[STATS]) the statistics while the delta
                               is packed in place (layout.h) */
    float *start;           /* (nparams) a site's ranks: global with the client's
                               local tensors (alone, the job puts them into the
                               model instead) */
    const float *from;      /* where training starts: global, or start */
    int drop_model;         /* model freed when the job ends (cfg.hooks->train_model_per_job) */
} node_train_job;

void fedi_node_train_job_run(fed_job *job);
/* An aggregator's SCAFFOLD control variate c (nparams; NULL: not an
 * aggregator, or another strategy). */
const float *fedi_node_agg_scaffold_control(const fed_node *n);
/* A client's SCAFFOLD control variate c_i (NULL: none yet, or not a
 * client), the round whose next one waits for its merge (0: none) and that
 * one (NULL: none). */
const float *fedi_node_client_control(const fed_node *n, uint64_t *pending_round,
                                      const float **pending);
/* FedNova's a_i for tau local steps of SGD with momentum rho (0: none). */
double fedi_node_fednova_steps(long tau, double rho);
/* The statistics pass's job (node/agg_stats.c): the contribution j->stats
 * as the DELTA of the pass (16-bit limbs, one float each, f32 codec) into
 * j->vec, j->samples the shard's rows; no training. */
void fedi_node_stats_job_run(fed_job *job);
/* client.c: the client's contribution to the running statistics pass as
 * it leaves (exact, or clipped and noised once for a DP pass: every try of
 * the round masks the same), or NULL when it has none. */
const int64_t *fedi_node_client_stats(const fed_node *n);
/* node/site.c: a site's ranks in a training job. The ranks the job trains
 * over (1: alone); the trainer's gradient sum over them and the epoch's
 * stats summed likewise (a failure ends the job, see node/site.h); rank
 * 0's announcement of the job to the others (its header and j->from). */
int fedi_node_site_ranks(const node_train_job *j);
fed_err fedi_node_site_reduce(void *ctx, float *buf, size_t n);
FED_WUR fed_err fedi_node_site_sum_stats(fed_coll *c, fed_step_stats *st);
FED_WUR fed_err fedi_node_site_announce(const node_train_job *j);
FED_WUR fed_err fedi_node_site_failed(const node_train_job *j, fed_err e);
/* A pipeline site (j->pipe_stages > 1): this rank's stage and replica; the
 * trainer's pipe to the stages of its replica (ctx: the job); the trained
 * stages laid end to end into rank 0's trained (nparams) from replica 0's
 * ranks, which send their stage's parameters (m's). */
int fedi_node_site_stage(const node_train_job *j);
int fedi_node_site_replica(const node_train_job *j);
fed_err fedi_node_site_pipe_send(void *ctx, int peer, const float *buf, size_t n);
fed_err fedi_node_site_pipe_recv(void *ctx, int peer, float *buf, size_t n);
FED_WUR fed_err fedi_node_site_pipe_gather(const node_train_job *j, fed_model *m, float *trained);
/* Frees what the job keeps between rounds (and its vec). */
void fedi_node_train_job_release(node_train_job *j);

/* ---- the roles: one table of operations each (aggregator.c, client.c,
 * peer.c), chosen once by fed_node_new from cfg.role ---- */
struct node_role_ops {
    /* The role's part of the configuration (the common part passed). */
    fed_err (*check)(const fed_node_config *c);
    /* The role's state (n->agg, n->client or n->mesh); destroy frees it,
     * also when create failed half way, and when there is none. */
    fed_err (*create)(fed_node *n);
    void (*destroy)(fed_node *n);
    fed_err (*start)(fed_node *n);
    /* Saves what the role keeps at stop; NULL: nothing to save. */
    fed_err (*stop)(fed_node *n);
    /* Before op is opened: where and how to decode its vector. */
    void (*prepare_open)(fed_node *n, node_open *op);
    /* An opened frame for the role; op's vec may be taken (set NULL). */
    fed_err (*on_msg)(fed_node *n, node_open *op);
    fed_err (*on_timer)(fed_node *n, uint32_t id);
    /* A job of the role came back (training, evaluation). */
    fed_err (*on_job)(fed_node *n, fed_job *job);
    /* The role's part of fed_node_get_progress (the common part filled);
     * NULL: none. */
    void (*progress)(const fed_node *n, fed_node_progress *out);
    /* A reply opened (the envelope held) but its vector did not decode
     * (why: FED_ERR_CODEC or FED_ERR_SPEC), or its stream announced more
     * bytes than it may (FED_ERR_TOO_LARGE): what the role makes of it
     * (a client declines a MODEL it cannot build); why when nothing.
     * NULL: why stands. */
    fed_err (*bad_reply)(fed_node *n, node_open *op, fed_err why);
    /* A chunk of a stream this node pulls came (the rest is coming); NULL:
     * nothing to note. */
    void (*pulled)(fed_node *n);
    /* What the machinery (node.c, transfer.c) needs to know of the role,
     * so that it never asks which role it runs: */
    /* 1: each round's rate comes from the round's MODEL (a client), and
     * cfg's schedule is not its own; 0: it computes it (fedi_node_round_lr) */
    int rate_from_model;
    /* 1: streams come to it as replies to its requests (a client's MODELs);
     * 0: as requests (DELTAs and masked inputs at an aggregator, SHAREs
     * between peers) */
    int streams_in_replies;
    /* 1: a member's request to an older epoch of this node is answered
     * FED_ERR_OLD_EPOCH (a restarted aggregator: its clients say HELLO at
     * once) */
    int tells_old_epoch;
};

extern const node_role_ops fedi_node_agg_ops;
extern const node_role_ops fedi_node_client_ops;
extern const node_role_ops fedi_node_peer_ops;

#endif
