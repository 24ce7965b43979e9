/* allreduce.h - exact all-reduce schedules (ring, k-ary tree, butterfly) as
 * pure step functions, and one member's execution of a schedule.
 *
 * n members, numbered 0..n-1 in key order (the order every member sees),
 * each hold a vector of len doubles and a weight (its sample count). A member
 * enters with v = weight * model and the weight appended as element len, so
 * the count travels with the vector: the schedule works on len + 1 doubles
 * and every member ends with the same sums (sum of w_i * x_i, and W = sum of
 * w_i as the last element); the mean is sums / W.
 *
 * A schedule is a number of steps; at step s member i sends some ranges of
 * its vector to some members and receives some ranges from some members
 * (fed_gossip_ar_xfers). What it sends at step s is its vector as it stands
 * before step s's receives are applied; the receives are applied, once all
 * of the step's have arrived, in the order listed: ADD adds the range in
 * (acc = acc + msg), COPY takes it (acc = msg). Every element of the result
 * is summed by exactly one member in one fixed order and copied to the
 * others, so every member ends with the same bits, whatever order frames
 * arrive in:
 *   ring       reduce-scatter then all-gather, n - 1 steps each; the vector is
 *              cut into n slices whose sizes differ by at most one; at step s
 *              of the reduce-scatter member i sends slice (i - s) mod n to
 *              i + 1 and adds slice (i - s - 1) mod n from i - 1, so slice c
 *              is summed in the order c, c + 1, ..., c + n - 1 and ends on
 *              member c - 1, which starts the all-gather with it. Each member
 *              sends 2(n - 1) slices: 2(n - 1)/n of the vector when n divides
 *              it, at most 2(n - 1) * ceil((len + 1) / n) elements otherwise.
 *   tree:K     the heap-ordered K-ary tree (parent (i - 1) / K): with D its
 *              depth, at step t < D the members at depth D - t send their
 *              partial sums up and each parent adds its children's in key
 *              order after its own; at step D + u the members at depth u send
 *              the total down. 2D steps, whole vectors.
 *   butterfly  p the largest power of two <= n, r = n - p: the r extra
 *              members p + j first fold their vector into member j (one
 *              step, if r > 0); then recursive halving among 0..p-1 (log2 p
 *              steps: at distance d = p/2, p/4, .., 1 the pair i, i ^ d
 *              splits its range in half, the lower member keeps the lower
 *              half, each sends the other half to the other and adds what
 *              it gets), recursive doubling back (the kept halves
 *              exchanged and copied), and the extra members get the total
 *              from j (one step). */
#ifndef FED_GOSSIP_ALLREDUCE_H
#define FED_GOSSIP_ALLREDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define FED_GOSSIP_AR_SPEC_MAX 32
#define FED_GOSSIP_AR_MAX_ARITY 64
#define FED_GOSSIP_AR_MAX_MEMBERS 65536u

typedef enum fed_gossip_ar_topo {
    FED_GOSSIP_AR_RING = 1,
    FED_GOSSIP_AR_TREE,
    FED_GOSSIP_AR_BUTTERFLY
} fed_gossip_ar_topo;

typedef enum fed_gossip_ar_op { FED_GOSSIP_AR_ADD = 1, FED_GOSSIP_AR_COPY } fed_gossip_ar_op;

/* One transfer: to (a send) or from (a receive) `peer`, the range
 * [off, off + len) of the len + 1 doubles; op says what the receiver does. */
typedef struct fed_gossip_ar_xfer {
    uint32_t peer;
    fed_gossip_ar_op op;
    size_t off, len;
} fed_gossip_ar_xfer;

typedef struct fed_gossip_ar_plan {
    fed_gossip_ar_topo topo;
    uint32_t n;     /* members */
    uint32_t arity; /* tree: K (2 for "tree"); others 0 */
    size_t dim;     /* len + 1: the model's length and the weight */
} fed_gossip_ar_plan;

/* "ring", "tree" (K = 2), "tree:K" (2 <= K <= FED_GOSSIP_AR_MAX_ARITY),
 * "butterfly". FED_ERR_SPEC for anything else. */
FED_WUR fed_err fed_gossip_ar_parse(const char *spec, fed_gossip_ar_topo *topo, uint32_t *arity);
/* A plan for n members (1..FED_GOSSIP_AR_MAX_MEMBERS) and a model of len
 * floats. FED_ERR_SPEC, FED_ERR_RANGE. */
FED_WUR fed_err fed_gossip_ar_plan_init(fed_gossip_ar_plan *p, const char *spec, uint32_t n,
                                        size_t len);

uint32_t fed_gossip_ar_steps(const fed_gossip_ar_plan *p);
/* The most sends (or receives) one member has in one step: room to give
 * fed_gossip_ar_xfers. */
size_t fed_gossip_ar_fanout(const fed_gossip_ar_plan *p);
/* Member me's sends and receives at step s, into send and recv (each room for
 * fed_gossip_ar_fanout); receives in the order they are applied. Both counts
 * 0 for a step it sits out (or s >= steps). */
void fed_gossip_ar_xfers(const fed_gossip_ar_plan *p, uint32_t me, uint32_t s,
                         fed_gossip_ar_xfer *send, size_t *nsend, fed_gossip_ar_xfer *recv,
                         size_t *nrecv);
/* Ring slice c of the dim doubles: [*off, *off + *len). */
void fed_gossip_ar_slice(const fed_gossip_ar_plan *p, uint32_t c, size_t *off, size_t *len);

/* One member's run of a plan: its vector, the step it is at, and the
 * receives that arrived early (for this or a later step), kept until their
 * step is applied. */
typedef struct fed_gossip_ar_member fed_gossip_ar_member;

/* v = weight * model, weight appended. FED_ERR_RANGE for me >= n,
 * FED_ERR_BAD_VALUE for a weight not finite and > 0 or a model value not
 * finite, FED_ERR_NOMEM. */
FED_WUR fed_err fed_gossip_ar_member_new(const fed_gossip_ar_plan *p, uint32_t me,
                                         const double *model, double weight,
                                         fed_gossip_ar_member **out);
void fed_gossip_ar_member_free(fed_gossip_ar_member *m);

/* The step the member is at (== steps once done). */
uint32_t fed_gossip_ar_member_step(const fed_gossip_ar_member *m);
int fed_gossip_ar_member_done(const fed_gossip_ar_member *m);
/* The current step's i-th send: its transfer, and a pointer to the doubles
 * to send (valid until the next advance). FED_ERR_RANGE past the last. */
FED_WUR fed_err fed_gossip_ar_member_send(const fed_gossip_ar_member *m, size_t i,
                                          fed_gossip_ar_xfer *x, const double **data);
size_t fed_gossip_ar_member_nsend(const fed_gossip_ar_member *m);
/* A range from `from` for step s: copied and kept until step s is applied.
 * FED_ERR_ROLE when step s has no such receive from `from`, FED_ERR_SHAPE
 * for a length other than the receive's, FED_ERR_BAD_VALUE for a non-finite
 * value, FED_ERR_NOMEM. A second copy of a receive already held or applied
 * (a resend whose ACK was lost): FED_OK, ignored (*fresh, which may be
 * NULL, says which). */
FED_WUR fed_err fed_gossip_ar_member_receive(fed_gossip_ar_member *m, uint32_t from, uint32_t s,
                                             const double *data, size_t len, int *fresh);
/* Whether every receive of the current step has arrived. */
int fed_gossip_ar_member_ready(const fed_gossip_ar_member *m);
/* Whether the receive of the current step from `from` is still missing. */
int fed_gossip_ar_member_waits_for(const fed_gossip_ar_member *m, uint32_t from);
/* Applies the current step's receives in order and moves to the next step.
 * FED_ERR_BUSY when one is missing; FED_ERR_NOMEM. */
FED_WUR fed_err fed_gossip_ar_member_advance(fed_gossip_ar_member *m);
/* The sums (dim doubles, the total weight last). */
const double *fed_gossip_ar_member_sums(const fed_gossip_ar_member *m);
/* Once done: the mean sums / W into out (len floats) and W. FED_ERR_BUSY
 * before. */
FED_WUR fed_err fed_gossip_ar_member_result(const fed_gossip_ar_member *m, float *out,
                                            double *weight);
/* Elements this member sends over the whole schedule (for the payload bound). */
size_t fed_gossip_ar_member_payload(const fed_gossip_ar_plan *p, uint32_t me);

/* ---- the fault rule's verification rows (node/peer_allreduce.c) ----
 * A member whose run is done knows a row of r >= 1 members, ending with it
 * in key order (wrapping), that finished with its result's hash. It tells
 * the members 2^k after it (k < fed_gossip_ar_row_levels) its row; one
 * told by the member 2^k before it that the rx[k] ending there did, and
 * knowing a row of at least 2^k itself, knows 2^k + rx[k] (at most n). A
 * row of n, from anyone, means every member finished with that hash. */
uint32_t fed_gossip_ar_row_levels(uint32_t n);
/* The row a member of n knows now, from its row so far (>= 1) and rx[k]
 * (0: nothing heard) with same[k] (its hash is the member's own) for each
 * level; 0 when a heard hash differs (the attempt is redone). */
uint64_t fed_gossip_ar_row(uint32_t n, uint64_t row, const uint64_t *rx, const uint8_t *same);

/* ---- groups (Moshpit-style averaging for large n) ----
 * n members split each round into groups by a grid every member can
 * compute: n is factored into radices r_0, r_1, ..., r_{d-1} (greedily the
 * largest divisor <= G of what is left; where what is left has no divisor
 * in 2..G, its smallest prime factor, a group larger than G); a cycle of d
 * rounds places the members at the positions of a permutation drawn from
 * (seed, cycle); round t of the cycle groups the members whose positions,
 * written in those radices, differ only in digit t. With no training
 * between them, d rounds of group all-reduces (each weighted by the total
 * weight of what its members hold) leave every member the exact mean: the
 * grid is full, so digit t's groups join disjoint sub-grids that together
 * cover the next. d = ceil(log_G n) whenever n factors into radices <= G. */
#define FED_GOSSIP_AR_MAX_RADICES 32

/* The radices for n members and groups of at most g (g >= 2); their count
 * (the rounds of a cycle), at most FED_GOSSIP_AR_MAX_RADICES. */
uint32_t fed_gossip_ar_radices(uint32_t n, uint32_t g, uint32_t r[FED_GOSSIP_AR_MAX_RADICES]);
/* Member me's group in round (1-based) for seed: its members in increasing
 * order into out (room for n), their count in *cnt. FED_ERR_RANGE for
 * me >= n or g < 2, FED_ERR_NOMEM. */
FED_WUR fed_err fed_gossip_ar_group(uint32_t n, uint32_t g, uint64_t seed, uint64_t round,
                                    uint32_t me, uint32_t *out, uint32_t *cnt);

#endif
