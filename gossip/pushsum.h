/* pushsum.h - push-sum mixing in running-sums form (Hadjicostis et al.,
 * "Robust distributed average consensus via exchange of running sums",
 * IEEE TAC 2016), in double precision.
 *
 * A node holds (x, w): x a vector of dim doubles, w a weight; its estimate
 * is x / w. A trained model enters as x = w * model. Each round the node
 * gives each out-neighbour j a fraction a_j of (x, w) and keeps the rest;
 * what j is given is added to sigma_j, the running total of all it was ever
 * given, and sigma_j is what goes on the wire. A receiver keeps rho_k, the
 * last total it took from in-neighbour k, and adds sigma_k - rho_k: a lost
 * frame is made good by the next one, so the sum of every x (and every w)
 * plus what is still in flight never changes. The plain form (plain = 1) sends
 * the share itself and adds what arrives: a lost frame loses its mass (kept
 * for comparison).
 *
 * Totals that arrive are held (the newest per sender) until fed_gossip_ps_apply
 * adds them in sender-key order, so the result does not depend on the order
 * they came in. A sender that restarted (a new epoch) is taken from its next
 * total on (rho re-based): what it sent between its checkpoint and its crash
 * is neither lost twice nor counted twice, only once, approximately.
 *
 * State file (fed_gossip_ps_save/load), little-endian:
 *   off size  field
 *     0    8  magic "FEDPSUM\0"
 *     8    4  version = 1
 *    12    4  plain (0 or 1)
 *    16    8  dim
 *    24    8  w (f64)
 *    32    4  out pairs      36 4 in pairs
 *    40  8*dim  x
 *    then per out pair: key (32), total w (8), total x (8*dim)
 *    then per in pair:  key (32), epoch (8), round (8), rho w (8), rho x (8*dim)
 * Pairs are in key order. */
#ifndef FED_GOSSIP_PUSHSUM_H
#define FED_GOSSIP_PUSHSUM_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define FED_GOSSIP_PS_MAGIC "FEDPSUM"
#define FED_GOSSIP_PS_VERSION 1u
#define FED_GOSSIP_PS_MAX_PAIRS 4096

typedef struct fed_gossip_ps fed_gossip_ps;

/* x = 0, w = 1. FED_ERR_NOMEM. */
FED_WUR fed_err fed_gossip_ps_new(size_t dim, int plain, fed_gossip_ps **out);
void fed_gossip_ps_free(fed_gossip_ps *ps);

size_t fed_gossip_ps_dim(const fed_gossip_ps *ps);
int fed_gossip_ps_plain(const fed_gossip_ps *ps);
/* (dim) the node's x; writable. */
double *fed_gossip_ps_x(fed_gossip_ps *ps);
double fed_gossip_ps_w(const fed_gossip_ps *ps);
/* x = w * v (the model enters; w stays). */
void fed_gossip_ps_set_model(fed_gossip_ps *ps, const float *v);
/* x = v, w = weight (a node's starting point). */
void fed_gossip_ps_set(fed_gossip_ps *ps, const double *v, double weight);
/* The estimate x / w, in floats (the model) or doubles. */
void fed_gossip_ps_estimate(const fed_gossip_ps *ps, float *out);
void fed_gossip_ps_estimate_f64(const fed_gossip_ps *ps, double *out);

/* Gives out-neighbour keys[j] the fraction frac[j] of (x, w) (sum of frac
 * < 1; the rest is kept). Then fed_gossip_ps_total tells what to send each.
 * FED_ERR_INVAL for bad fractions, FED_ERR_NOMEM, FED_ERR_FULL (pairs). */
FED_WUR fed_err fed_gossip_ps_split(fed_gossip_ps *ps, const uint8_t (*keys)[32],
                                    const double *frac, size_t m);
/* What goes to `to` now: the running total (or, plain, this round's share).
 * FED_ERR_NOTFOUND when nothing was ever given to it. */
FED_WUR fed_err fed_gossip_ps_total(const fed_gossip_ps *ps, const uint8_t to[32],
                                    const double **x, double *w);

/* A total from `from` (epoch, round as its frame said): held, the newest
 * per sender, until apply. FED_ERR_BAD_VALUE for a non-finite or negative
 * weight or a non-finite x; FED_ERR_NOMEM, FED_ERR_FULL. Older than the
 * total held or taken: ignored (FED_OK, and *taken, which may be NULL, 0;
 * else 1). */
FED_WUR fed_err fed_gossip_ps_receive(fed_gossip_ps *ps, const uint8_t from[32], uint64_t epoch,
                                      uint64_t round, const double *x, double w, int *taken);
/* Adds every total held, in sender-key order; returns how many. */
size_t fed_gossip_ps_apply(fed_gossip_ps *ps);
/* The round of the newest total seen from `from` (0: none). */
uint64_t fed_gossip_ps_last_round(const fed_gossip_ps *ps, const uint8_t from[32]);

/* Bytes of the vectors the state holds: x and every pair's running total
 * (8 dim each); *held (may be NULL): the totals held until apply, now. */
size_t fed_gossip_ps_bytes(const fed_gossip_ps *ps, size_t *held);

/* The state (above) into *buf (fed_malloc'd, *len bytes; caller frees),
 * and back. load: FED_ERR_MAGIC, FED_ERR_VERSION, FED_ERR_FORMAT (sizes,
 * dim other than ps's, non-finite values), FED_ERR_NOMEM. */
FED_WUR fed_err fed_gossip_ps_save(const fed_gossip_ps *ps, uint8_t **buf, size_t *len);
FED_WUR fed_err fed_gossip_ps_load(fed_gossip_ps *ps, const uint8_t *buf, size_t len);

#endif
