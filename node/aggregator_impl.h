/* aggregator_impl.h - internals shared by the aggregator role's files:
 * aggregator.c (role setup, resume, holds, sampling, commit, frames),
 * agg_async.c (FedBuff), agg_eval.c (the evaluation queue and the pending
 * figures), agg_dp.c (DP-FedAvg), agg_budget.c (the clients' privacy
 * budgets) and agg_input.c (the round's aggregate input). Not a public header: nothing outside them includes it. */
#ifndef FED_NODE_AGGREGATOR_IMPL_H
#define FED_NODE_AGGREGATOR_IMPL_H

#include "node/agg_input_impl.h"
#include "node/node_impl.h"

typedef enum agg_state { AGG_IDLE = 0, AGG_RUNNING = 1, AGG_DONE = 2 } agg_state;

/* DP-FedAvg's state (agg_dp.c); NULL when off. */
typedef struct agg_dp agg_dp;

/* The aggregator checkpoint's DP-FedAvg section: the clipping norm the next
 * round uses, f64 LE (adaptive clipping moves it). */
#define AGG_CKPT_SEC_DP "dp.clip"
/* SCAFFOLD: u64 LE the void rounds' bits, then f32 LE c (nparams) */
#define AGG_CKPT_SEC_SCAFFOLD "scaffold"

/* A HELLO or NEXT held until a round starts (or poll_ms passes). */
typedef struct agg_hold {
    fed_req *req;
    fed_wire_hdr hdr; /* the request's header: who, which epoch */
    uint64_t since_ms;
} agg_hold;

/* A committed round waiting for the evaluation: its parameters and row. */
typedef struct agg_eval_wait {
    float *params; /* (nparams) */
    fed_node_round_info info;
    fed_store_round row;
} agg_eval_wait;

/* At most this many rounds wait, and no more than AGG_EVAL_QUEUE_BYTES of
 * their parameters (at least one); past that the oldest waiting round is
 * reported without an accuracy. */
#define AGG_EVAL_QUEUE_MAX 8
#define AGG_EVAL_QUEUE_BYTES ((size_t)64 << 20)

/* The held-out evaluation of a committed round, as an idle job on its own
 * copy of the model (the loop goes on with the next round meanwhile, and
 * training anywhere on the machine comes first). Rounds committed while it
 * runs wait in a queue, evaluated in order once CPU time frees up (at the
 * latest when the job ends). */
typedef struct agg_eval {
    fed_job job;
    fed_model *model;          /* a copy of the global's spec, the round's params;
                                  no pool: it runs on one idle thread */
    const fed_dataset *test;
    fed_eval_report *rep;      /* out: loss, accuracy and the metrics */
    fed_metric_value *named;   /* rep's figures by name, to record */
    fed_err err;               /* out */
    int busy;
    fed_node_round_info info;  /* the round evaluated */
    fed_store_round row;       /* its committed row, completed when done */
    agg_eval_wait wait[AGG_EVAL_QUEUE_MAX]; /* a ring: nwait from head */
    size_t head, nwait, cap_wait;             /* cap_wait: 0 until first used */
} agg_eval;

/* A round's measured figures whose write to its row failed (a full disk):
 * kept until a write goes through (the next commit, the next round's
 * figures, or stop), so a reported accuracy is never only in the log. */
typedef struct agg_pending {
    fed_store_round *rows; /* (n) committed rows with their loss and accuracy */
    size_t n, cap;
    uint32_t tries;        /* failed writes of the oldest one */
} agg_pending;

/* A client's privacy budget as it reported it (agg_budget.c), by key. */
typedef struct agg_member_dp {
    uint8_t key[32];
    double epsilon; /* spent, as its last DELTA or LEAVE said */
    double budget;  /* its budget (0: none) */
    int reported;   /* it sent a DP report */
    uint32_t parked; /* the fed_err it declined a round for, its budget or a model that
                        does not fit it: not sampled until it restarts; 0: none */
    uint64_t epoch; /* parked: the sender epoch of the run that declined */
} agg_member_dp;

/* A client sampled for the current round. */
typedef struct agg_part {
    uint8_t key[32];
    int got;          /* its delta is in */
    uint32_t refused; /* nonzero: it declined the round with this fed_err (a LEAVE,
                         whose header, digest and signature are kept below) */
    uint64_t base;    /* the round it trained (< the round filled: stale, async) */
    uint64_t epoch;   /* its sender epoch, as its delta said */
    uint64_t samples;
    float *delta;     /* (nparams + layout.extra) host, owned: the extra
                         segment (FedNova's steps, SCAFFOLD's control
                         change) after the tensors */
    uint8_t header[FED_WIRE_HEADER_BYTES];
    uint8_t digest[FED_CRYPTO_DIGEST_BYTES];
    uint8_t sig[FED_CRYPTO_SIG_BYTES];
} agg_part;

typedef struct agg_stats agg_stats;
typedef struct agg_scaffold agg_scaffold;

/* How one round follows another: synchronous rounds (a sampled cohort and
 * a deadline, aggregator.c) or FedBuff's async mode (agg_async.c), chosen
 * once from cfg.agg.async_k. The round path (fedi_node_agg_close_round), the
 * frames and the timers call through it and never ask which; how a round's
 * contributions combine is the other table, agg_input_ops (agg_input_impl.h). */
typedef struct agg_mode_ops {
    const char *name;
    /* 1: a round's parts are the cohort sampled for it, and a LEAVE answers
     * its sender's part; 0: parts are whoever sent a delta, a LEAVE is
     * recorded only */
    int cohort;
    /* 1: while a round commits, the next round's MODEL is sealed ahead for
     * the clients whose deltas it merged (sampled again at once) */
    int seal_ahead;
    /* The run begins, or resumes after round n->round (not done). */
    fed_err (*start)(fed_node *n);
    /* A HELLO or NEXT of a member that may train (the run is not done). */
    fed_err (*on_ask)(fed_node *n, fed_req *req, const fed_wire_hdr *h);
    fed_err (*on_delta)(fed_node *n, node_open *op);
    /* The deadline of a plain round passed with fewer deltas than it
     * needs to merge. */
    fed_err (*short_deadline)(fed_node *n);
    /* A round committed and the run goes on: the next one opens. */
    fed_err (*next)(fed_node *n);
    /* A round failed with nothing committed, its parts and input dropped:
     * what comes next; returns why. */
    fed_err (*failed)(fed_node *n, fed_err why);
    /* NODE_TIMER_ROUND (no secure commit pending): gather_ms passed, or a
     * failed round's wait is over. */
    fed_err (*round_timer)(fed_node *n);
} agg_mode_ops;

extern const agg_mode_ops fedi_node_agg_sync_mode;
extern const agg_mode_ops fedi_node_agg_async_mode;

struct node_agg {
    fed_model *model;      /* the global model, on cfg.be */
    fed_merge *merge;
    fed_codec codec;       /* what clients answer with */
    size_t nparams;
    agg_state state;
    int gathered;          /* gather_ms passed since the last round (or, before round 1,
                              since the first client came): min_clients will do */
    int first_armed;       /* the gather timer was armed for round 1 (arm_first_gather) */
    uint32_t failed;       /* rounds failed in a row (a full disk): the next try waits */
    int early_stopped;     /* cfg.agg.early_stop's rule ended the run */
    fed_node_site_figures site; /* the round's site evaluation (site_eval.c),
                                   for its round info */
    uint64_t site_judge;   /* 1 + the round whose sites' figures the closing round
                              recorded, judged once it commits (0: none) */
    uint64_t retry_at_ms;  /* no round starts before this (now_ms), after a failure */
    int commit_again;      /* a secure round's commit failed after its sum was
                              unmasked: the round timer commits it again */
    uint64_t round_start_ms;
    uint64_t deadline_at_ms; /* when the armed deadline timer fires (0: none armed) */
    uint64_t wait_report_ms; /* idle, no round startable: when to say who it waits
                                for again (the poll timer's; 0: not waiting) */
    agg_hold *holds;
    size_t nholds, cap_holds;
    agg_hold *parked;     /* the asks of clients parked (agg_budget.c), held a poll
                             and answered NO_ROUND with the reason, never sampled */
    size_t nparked, cap_parked;
    agg_part *parts;       /* (nparts) sampled this round, sorted by key */
    size_t nparts;
    uint8_t *model_vec;    /* host, f32 encoded for the MODEL; model_vec_len 0: not yet
                              since host last changed */
    size_t model_vec_len, model_vec_cap;
    float *host;           /* (nparams) the global model's parameters on the host, fetched
                              once at start and once after each merge; the checkpoint,
                              the MODEL and the evaluation read them from here */
    float *committed;      /* (nparams) the last committed global, kept while a round
                              merges: a failed commit puts it back */
    float *committed_state;/* (merge state floats) the strategy's state with it, or NULL */
    float **dev;           /* (max_clients) device copies on a non-host backend */
    fed_merge_input *inputs;
    fed_merge_result *results;
    int max_clients;
    fed_store_round last_row;      /* the round just committed (its accuracy
                                      is added once evaluated) */
    agg_eval ev;
    agg_pending pending;   /* figures not in their rows yet */
    uint64_t bytes_in0, bytes_out0; /* wire counters when the round started */
    uint64_t ctr_base[64]; /* wire counters the database held at start (earlier runs) */
    agg_dp *dp;            /* DP-FedAvg (cfg.dp.client_clip > 0), else NULL */
    struct node_sa_agg *sa; /* cfg.secagg.on: the round's secure aggregation (secagg_agg.c) */
    agg_stats *stats;       /* cfg.data.stats_cols: the shared statistics (agg_stats.c) */
    const agg_input_ops *in; /* the round's aggregate input (agg_input.c): plain,
                                secure, DP-FedAvg around either */
    fed_node_layout layout; /* the tensors' paths (node/layout.h): what a DELTA
                               carries, what the strategy merges */
    layout_rules rules;     /* what decided it, sent in each MODEL (field 16) */
    int eval_local;         /* tensors that shape the output stay at the sites:
                               this node's own evaluation is not meaningful */
    float *norm_stats;      /* (layout.len[STATS]) the round's non-trained statistics
                               (batch norm's): their sample-weighted mean delta,
                               outside the strategy */
    float *extra_mean;      /* (layout.extra) the round's extra segment by its rule:
                               FedNova's tau_eff, SCAFFOLD's mean control change */
    agg_scaffold *scaffold; /* --strategy scaffold: c (agg_scaffold.c), else NULL */
    const agg_mode_ops *mode; /* synchronous or async rounds */
    agg_member_dp *mdp;     /* (nmdp, sorted by key) clients' reported budgets */
    size_t nmdp, cap_mdp;
    uint64_t mdp_version;   /* bumped when a row changes (the status snapshot's cue) */
};

/* For the configuration's checks (DP-FedAvg and secure aggregation need
 * synchronous rounds); the round path asks n->agg->mode. */
static inline int fed_node_agg_is_async(const fed_node *n) { return n->cfg.agg.async_k > 0; }

/* ---- agg_stats.c: the shared-statistics pass ---- */
fed_err fedi_node_agg_stats_new(fed_node *n);
void fedi_node_agg_stats_free(fed_node *n);
/* The checkpoint's statistics (ck NULL or without them: the pass is due). */
fed_err fedi_node_agg_stats_resume(fed_node *n, const fed_store_ckpt *ck);
/* A round starts: it is the pass while the statistics are unknown. */
void fedi_node_agg_stats_begin(fed_node *n);
/* 1 once the statistics are known (the pass committed, or resumed). */
int fedi_node_agg_stats_known(const fed_node *n);
/* 1 while the running round is the pass. */
int fedi_node_agg_stats_pass(const fed_node *n);
/* The integers a secure pass round sums (0: not a pass). */
uint32_t fedi_node_agg_stats_ints(const fed_node *n);
/* The floats of a plain pass round's DELTA (0: not a pass). */
size_t fedi_node_agg_stats_plain_entries(const fed_node *n);
/* Field 14 of round's MODEL: the pass, or the statistics once known (or
 * read by the pass whose commit seals round's MODEL ahead). */
void fedi_node_agg_stats_settings(const fed_node *n, uint64_t round, fed_wire_settings *set);
/* The checkpoint's section, once known (1), else 0. */
int fedi_node_agg_stats_section(const fed_node *n, fed_store_section *out);
/* The pass's round closes: its totals read back (nothing merged), kept
 * pending for its commit (a commit tried again reads nothing again). */
fed_err fedi_node_agg_stats_close(fed_node *n);
/* The pass's round committed: its statistics known from now on (and the
 * aggregator's test set standardized with them). */
fed_err fedi_node_agg_stats_committed(fed_node *n);
/* The first of v[0..words) that is not a 16-bit limb (words: none): a
 * plain contribution's integers (the pass's, a site evaluation's). */
size_t fedi_node_agg_limbs_bad(const float *v, size_t words);

/* ---- aggregator.c ---- */
void fedi_node_agg_arm_poll(fed_node *n);
/* The round's deadline timer, armed for at_ms or cancelled; what
 * fed_node_agg_progress reports as due (an async round has none until its
 * first delta). */
fed_err fedi_node_agg_arm_deadline(fed_node *n, uint64_t at_ms);
void fedi_node_agg_cancel_deadline(fed_node *n);
/* Holds the HELLO or NEXT req (header h) until a round starts. */
fed_err fedi_node_agg_hold_add(fed_node *n, fed_req *req, const fed_wire_hdr *h);
fed_err fedi_node_agg_encode_global(fed_node *n);
/* The settings block of round's MODEL (its learning rate is the round's). */
void fedi_node_agg_settings(const fed_node *n, uint64_t round, fed_wire_block *b);
fed_err fedi_node_agg_send_models(fed_node *n, const agg_hold *holds, size_t k,
                                  const fed_wire_block *b);
fed_err fedi_node_agg_answer_model(fed_node *n, fed_req *req, const fed_wire_hdr *h);
agg_part *fedi_node_agg_part_find(node_agg *a, const uint8_t key[32]);
fed_err fedi_node_agg_refuse_delta(fed_node *n, node_open *op, fed_err why, uint32_t flags);
fed_err fedi_node_agg_ack_duplicate(fed_node *n, node_open *op);
fed_err fedi_node_agg_take_delta(fed_node *n, node_open *op, agg_part *p);
/* Merge, commit, report; then the next round (or the end). */
fed_err fedi_node_agg_close_round(fed_node *n);
/* Either mode's failed: the aggregator idles (nothing taken) until the
 * round timer it arms fires after gather_ms, doubling with each failure in
 * a row up to a minute (a full disk would fail each try at once). */
fed_err fedi_node_agg_retry_later(fed_node *n, fed_err why);
/* The running round is dropped, nothing merged (secure aggregation failed
 * closed): it starts again with whoever asks. */
fed_err fedi_node_agg_abandon_round(fed_node *n);


/* ---- agg_dp.c: DP-FedAvg ---- */
/* Sets a->dp up when cfg.dp.client_clip > 0 (after the model and merge):
 * checks the mode and strategy, calibrates z for --dp-target-epsilon,
 * splits it for adaptive clipping, keys the noise. */
fed_err fedi_node_agg_dp_new(fed_node *n);
void fedi_node_agg_dp_free(node_agg *a);
/* At start: the charges of earlier runs, and the clip from ck's section
 * (ck may be NULL: none). */
fed_err fedi_node_agg_dp_start(fed_node *n, const fed_store_ckpt *ck);
/* The round's Poisson draw over holds[0..nholds) (sorted by key): each in
 * with probability q, never redrawn; the drawn moved to the front, their
 * count returned. */
size_t fedi_node_agg_dp_sample(fed_node *n, agg_hold *holds, size_t nholds);
/* The round's parts clipped, summed with equal weight, noised and divided
 * by the expected cohort into *in (one merge input, weight 1); a->results
 * per part; *unclipped the parts within the clip. Adaptive: the next clip
 * is computed, taken by fedi_node_agg_dp_committed. */
fed_err fedi_node_agg_dp_aggregate(fed_node *n, fed_merge_input *in, uint32_t *unclipped);
/* The round's charge (q, z, one step) inside the commit's transaction;
 * *eps the total after it. */
fed_err fedi_node_agg_dp_charge(fed_node *n, uint64_t round, uint64_t at_ms, double *eps);
/* The commit went through (ok: epsilon and the next clip taken) or not. */
void fedi_node_agg_dp_committed(fed_node *n, int ok, double eps);
double fedi_node_agg_dp_clip(const node_agg *a);
double fedi_node_agg_dp_clip_next(const node_agg *a);
double fedi_node_agg_dp_epsilon(const node_agg *a);
/* With secagg: the L2 clip each client applies to its own delta (the round's
 * clip less what quantization may add). */
double fedi_node_agg_dp_secagg_clip(const node_agg *a);

/* ---- agg_budget.c: the clients' privacy budgets ---- */
/* A DELTA's or LEAVE's DP report (nothing when it has none). */
void fedi_node_agg_budget_note(fed_node *n, const fed_wire_msg *m);
/* Whether a LEAVE for reason parks its client: asking it again changes
 * nothing until it restarts. FED_ERR_DP_BUDGET; FED_ERR_MODEL_MISMATCH (a
 * model that does not fit the client's data or bounds, or its training
 * failed on it); FED_ERR_LOCAL_MISMATCH (--local-layers or --local-bn that
 * differ from the aggregator's); FED_ERR_UNSUPPORTED (pipeline stages the
 * client cannot give). */
int fedi_node_agg_budget_parks(uint32_t reason);
/* A LEAVE whose reason parks: logged once at warning level with the
 * client's name (and its figures), the client parked; when fewer than
 * min_clients clients can still take part the node is marked failed
 * (FED_ERR_TOO_FEW_CLIENTS, returned) with an error line saying why. */
fed_err fedi_node_agg_budget_declined(fed_node *n, const fed_wire_msg *m);
/* A HELLO or NEXT of header h: the reason (a fed_err, nonzero) when its
 * sender declined for a reason that parks in this run (its sender epoch),
 * else 0; a later epoch (a restart, maybe with a new budget, data or
 * settings) ends the parking. */
int fedi_node_agg_budget_parked(fed_node *n, const fed_wire_hdr *h);
void fedi_node_agg_budget_free(node_agg *a);

/* ---- agg_eval.c: the evaluation queue and the pending figures ---- */
/* The round's evaluation job came back. */
fed_err fedi_node_agg_on_job(fed_node *n, fed_job *job);
fed_err fedi_node_agg_flush_pending(fed_node *n);
void fedi_node_agg_report_round(fed_node *n, fed_node_round_info *info);
/* Whether --early-stop's rule has ended the run already, by the database's
 * figures (a restart after the stop trains no more). */
int fedi_node_agg_early_stopped(fed_node *n);
/* After round's figures: the best round by cfg.agg.best_metric keeps its
 * checkpoint, as do the rounds not judged yet; cfg.agg.early_stop's rule
 * (a->early_stopped). */
void fedi_node_agg_judge(fed_node *n, uint64_t round);
/* What the evaluation and the pending figures hold (a is being freed). */
void fedi_node_agg_eval_free(node_agg *a);

/* agg_scaffold.c: SCAFFOLD's control variate c (rules.scaffold; every
 * function does nothing without it). */
FED_WUR fed_err fedi_node_agg_scaffold_new(fed_node *n);
void fedi_node_agg_scaffold_free(fed_node *n);
/* The MODEL's vector: the model, then c (2 nparams); the model alone
 * without SCAFFOLD. */
const float *fedi_node_agg_scaffold_vec(fed_node *n, size_t *len);
/* The model merged m clients' deltas: c += (m / N) extra_mean (N:
 * --wait-clients, at least m). */
FED_WUR fed_err fedi_node_agg_scaffold_merged(fed_node *n, uint32_t m);
/* The round closed, with an update or void (field 18's bits). */
void fedi_node_agg_scaffold_closed(fed_node *n, int update);
/* c and the bits kept before a merge, and put back after a failed commit. */
void fedi_node_agg_scaffold_keep(fed_node *n);
void fedi_node_agg_scaffold_restore(fed_node *n);
void fedi_node_agg_scaffold_settings(const fed_node *n, fed_wire_settings *st);
/* The checkpoint's section (1, *buf to free after the write; 0: none; -1:
 * out of memory), and back from a checkpoint. */
int fedi_node_agg_scaffold_section(fed_node *n, uint8_t **buf, fed_store_section *sec);
FED_WUR fed_err fedi_node_agg_scaffold_resume(fed_node *n, const fed_store_ckpt *ck);

#endif
