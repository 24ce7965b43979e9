/* secagg_impl.h - what the aggregator and client roles call of secure
 * aggregation's stages (node/secagg_agg.c, node/secagg_client.c). Not a
 * public header. */
#ifndef FED_NODE_SECAGG_IMPL_H
#define FED_NODE_SECAGG_IMPL_H

#include "node/node_impl.h"

/* The floor cfg sets: secagg.min_clients, never below FED_NODE_SA_FLOOR
 * (node.h). */
static inline uint32_t fed_node_sa_floor(const fed_node_config *c)
{
    return c->secagg.min_clients > FED_NODE_SA_FLOOR ? c->secagg.min_clients
                                                     : FED_NODE_SA_FLOOR;
}

typedef struct node_sa_agg node_sa_agg;
typedef struct node_sa_client node_sa_client;

/* ---- secagg_agg.c ---- */
/* Why cfg cannot run secure aggregation (NULL: it can): async, a robust
 * strategy, a lossy codec, quantization that would wrap, a vector over one
 * frame. */
const char *fedi_node_sa_agg_misfit(const fed_node_config *cfg, size_t nparams, size_t max_clients);
FED_WUR fed_err fedi_node_sa_agg_new(fed_node *n, node_sa_agg **out);
void fedi_node_sa_agg_free(fed_node *n, node_sa_agg *s);
/* The round's parts are drawn (n->agg->parts): a fresh try begins. */
FED_WUR fed_err fedi_node_sa_agg_begin(fed_node *n);
/* The MODEL's field 12 for round (its running try; 0 for a later round). */
void fedi_node_sa_agg_settings(const fed_node *n, uint64_t round, fed_wire_settings *s);
/* 1 once the key list is drawn: a part that asks for its MODEL again is
 * then out of this try. */
int fedi_node_sa_agg_keys_closed(const node_sa_agg *s);
/* A stage's request (types FED_WIRE_SA_*). */
FED_WUR fed_err fedi_node_sa_agg_on_msg(fed_node *n, node_open *op);
/* NODE_TIMER_STAGE fired. */
FED_WUR fed_err fedi_node_sa_agg_on_timer(fed_node *n);
/* The u32 words of a client's masked input: the delta, its weight and
 * cfg.secagg.ints integers as limbs (node/agg_input_impl.h). */
size_t fedi_node_sa_agg_words(const node_sa_agg *s);
/* The integers' exact sums of the try (*len of them; *m clients in the
 * sum), after its last stage. */
const uint64_t *fedi_node_sa_agg_ints(const node_sa_agg *s, size_t *len, uint32_t *m);
/* The unmasked mean and its weight (after the round's last stage): nparams
 * floats, then the layout's extra segment by its rule (node/layout.h). */
const float *fedi_node_sa_agg_mean(const node_sa_agg *s, double *weight);
/* The unmasked mean of the statistics segment (node/layout.h), or NULL
 * when the model sends none. */
const float *fedi_node_sa_agg_stats(const node_sa_agg *s);
/* 1 once the try's sum is unmasked (0 after a try failed closed). */
int fedi_node_sa_agg_unmasked(const node_sa_agg *s);
/* 1 once the try failed from the masked-input stage on: the round closes
 * with no update (fedi_node_agg_close_round keeps the model). */
int fedi_node_sa_agg_void(const node_sa_agg *s);
/* The try's outcome for its row: "" when unmasked, why when void. */
const char *fedi_node_sa_agg_outcome(const node_sa_agg *s);
/* A client of the running try declined it, having revealed its shares of
 * this round before (to an aggregator process that then stopped): the try
 * fails and the round closes with no update. */
FED_WUR fed_err fedi_node_sa_agg_revealed_before(fed_node *n);
/* A sampled client declined the round (its part refused): while the keys
 * are open the stage no longer waits for it (it may end now). */
FED_WUR fed_err fedi_node_sa_agg_declined(fed_node *n);
/* What the contributions table says of part i's secure aggregation
 * (who dropped at which stage); "" for one in the sum. */
const char *fedi_node_sa_agg_fate(const node_sa_agg *s, size_t i);
/* The try's row for the database (outcome "" when it committed). */
void fedi_node_sa_agg_row(const fed_node *n, fed_store_secagg_try *t, const char *outcome);
/* The round is over (committed or dropped): secrets wiped. */
void fedi_node_sa_agg_end(fed_node *n);

/* ---- secagg_client.c ---- */
FED_WUR fed_err fedi_node_sa_client_new(fed_node *n, node_sa_client **out);
void fedi_node_sa_client_free(fed_node *n, node_sa_client *s);
/* A MODEL with field 12 came for round: keys out (beside the training). */
FED_WUR fed_err fedi_node_sa_client_begin(fed_node *n, const fed_wire_msg *model);
/* The round's training is done: the sent delta (fed_node_layout_sent(l)
 * floats: its segments, node/layout.h) and its samples; extra: a site
 * evaluation's nextra integers (node/site_eval.h), summed after
 * cfg.secagg.ints's (NULL, 0: none). */
FED_WUR fed_err fedi_node_sa_client_trained(fed_node *n, const float *delta,
                                            const fed_node_layout *l, uint64_t samples,
                                            const int64_t *extra, uint32_t nextra);
/* A reply of a stage (an SA_* answer or an ACK) while one is out;
 * *done once the round's part is over (then the client asks NEXT). */
FED_WUR fed_err fedi_node_sa_client_on_reply(fed_node *n, node_open *op, int *done);
/* The retry timer: the stage's request again (fresh sequence); *gave_up
 * when retries ran out (the round is dropped). */
FED_WUR fed_err fedi_node_sa_client_retry(fed_node *n, int *gave_up);
/* 1 while a secure round is under way for this client. */
int fedi_node_sa_client_active(const node_sa_client *s);
/* 1 once the client's masked input of round went out (in this process):
 * it takes no later try of that round (its delta may be in a sum already). */
int fedi_node_sa_client_took_part(const node_sa_client *s, uint64_t round);
/* Drops the round (secrets wiped). */
void fedi_node_sa_client_abort(fed_node *n);

#endif
