/* topology.h - whom each peer sends its shares to, round by round.
 *
 * Members are numbered 0..n-1 in allow-list (key) order, the order every
 * member sees, and every choice below is a function of (spec, n, seed,
 * round, member) alone, where seed comes from the allow-list
 * (fed_gossip_topo_seed): so each member can compute every other member's
 * out-neighbours, hence its own in-neighbours, without asking anyone and
 * whatever is alive. Specs:
 *   full              everyone else
 *   ring              i-1 and i+1 (symmetric)
 *   random:K          K out-neighbours a round, drawn from a fixed set of
 *                     min(16, 4K, n-1) members: i + d for the offsets d of
 *                     a set D (1 and others drawn once from the seed), so
 *                     the pairs a node keeps running sums for stay few; each
 *                     round draws K offsets of D for everyone, so every
 *                     member has K out- and K in-neighbours
 *   tree              parent (i-1)/2 and children 2i+1, 2i+2 (symmetric)
 *   smallworld:K,P    Watts-Strogatz: the ring lattice of K nearest (K even),
 *                     each edge rewired with probability P, kept symmetric
 *   static            the lists given with fed_gossip_topo_set_static, or read
 *                     with fed_gossip_topo_parse_static from text every member
 *                     holds the same copy of, one member a line:
 *                         NAME: NEIGHBOUR NEIGHBOUR ...    # a comment
 *                     (names as in the allow-list; a member with no line has
 *                     no out-neighbours)
 * Metropolis weights need a symmetric topology (fed_gossip_topo_symmetric). */
#ifndef FED_GOSSIP_TOPOLOGY_H
#define FED_GOSSIP_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "crypto/allow.h"

#define FED_GOSSIP_TOPO_SPEC_MAX 32
#define FED_GOSSIP_RANDOM_SET_MAX 16

typedef struct fed_gossip_topo fed_gossip_topo;

/* The seed every member derives from the allow-list: BLAKE2b of its keys in
 * order, folded to 64 bits. */
uint64_t fed_gossip_topo_seed(const fed_crypto_allow *allow);

/* FED_ERR_SPEC for an unknown or malformed spec, FED_ERR_RANGE when n is
 * too small for it (n >= 2; smallworld needs K < n), FED_ERR_NOMEM. */
FED_WUR fed_err fed_gossip_topo_new(const char *spec, size_t n, uint64_t seed,
                                    fed_gossip_topo **out);
void fed_gossip_topo_free(fed_gossip_topo *t);
/* Checks a spec without building it. */
FED_WUR fed_err fed_gossip_topo_spec_check(const char *spec);

/* static: member i's out-neighbours (copied; ids < n, not i, no repeats). */
FED_WUR fed_err fed_gossip_topo_set_static(fed_gossip_topo *t, size_t i, const uint32_t *out,
                                           size_t count);

/* static: every member's out-list from text (len bytes, above), names looked
 * up in allow (member i = allow-list entry i). On error nothing changes and
 * *err_line (may be NULL) says where: FED_ERR_FORMAT (syntax, a member
 * twice, itself or a neighbour twice in a list), FED_ERR_UNKNOWN_SENDER (a
 * name not in the list). */
FED_WUR fed_err fed_gossip_topo_parse_static(fed_gossip_topo *t, const fed_crypto_allow *allow,
                                             const char *text, size_t len, int *err_line);

size_t fed_gossip_topo_size(const fed_gossip_topo *t);
int fed_gossip_topo_symmetric(const fed_gossip_topo *t);
/* Member i's out-neighbours in round r, ascending, into out (room for n);
 * returns how many. */
size_t fed_gossip_topo_out(const fed_gossip_topo *t, size_t i, uint64_t round, uint32_t *out);
/* Member i's in-neighbours in round r (those whose out-lists hold i),
 * ascending, into in (room for n); returns how many. */
size_t fed_gossip_topo_in(const fed_gossip_topo *t, size_t i, uint64_t round, uint32_t *in);

#endif
