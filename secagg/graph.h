/* graph.h - a secure-aggregation round's neighbour graph: its degree k and
 * threshold t from the dropout rate, the graph itself drawn from a hash of
 * the round's signed key list, and the checks on the survivors.
 *
 * Degree (after Bell et al., CCS 2020, whose correctness argument this is):
 * a client's secret can be rebuilt when at least t of its k neighbours are
 * still there to reveal their shares. With each client gone independently
 * with probability P, the live neighbours of one client are Binomial(k, 1-P),
 * and by the union bound over the n clients
 *     Pr[round fails for lack of shares] <= n Pr[Bin(k, 1-P) < t]
 *                                         = n sum_{j=0}^{t-1} C(k,j) (1-P)^j P^(k-j)
 * with t = floor(k/2) + 1 (always more than k/2; never configurable lower).
 * k is the smallest degree 2 <= k <= n-1 that brings this to at most
 * FED_SECAGG_FAIL_TARGET (1e-6) and for which a k-regular graph on n nodes
 * exists (n k even); not 1, whose graph is a matching that would reveal
 * each pair's sum (k = 1 only for n = 2). When no k does (few clients, or a high P), k = n - 1:
 * the complete graph of Bonawitz et al. 2017, with the probability it
 * reaches reported for the caller to log. This bounds correctness only;
 * Bell et al.'s further bound on k against colluding clients is not taken.
 *
 * Graph: the Harary graph H(k, n) (node at ring position p joined to
 * p +- 1 .. p +- floor(k/2), and to p + n/2 when k is odd) over a random
 * permutation of the n clients, as Bell et al. build it. The permutation is
 * a Fisher-Yates shuffle driven by ChaCha20 keyed with the 32-byte graph
 * seed, so every client that holds the same signed key list draws the same
 * graph and the aggregator cannot pick it. Clients are named by their index
 * in that list (0 .. n-1). */
#ifndef FED_SECAGG_GRAPH_H
#define FED_SECAGG_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define FED_SECAGG_FAIL_TARGET 1e-6
#define FED_SECAGG_MAX_CLIENTS 65535u
#define FED_SECAGG_MAX_EDGES ((size_t)1 << 24) /* n k, the adjacency's size */

typedef struct fed_secagg_graph fed_secagg_graph;

/* floor(k/2) + 1. */
uint32_t fed_secagg_threshold(uint32_t k);
/* n Pr[Bin(k, 1-P) < t]: the union bound above (capped at 1). */
double fed_secagg_fail_bound(uint32_t n, uint32_t k, uint32_t t, double dropout);
/* k and t for n clients and dropout rate P in [0, 1), and the bound they
 * reach (p_fail may be NULL). FED_ERR_INVAL for n < 2, n over
 * FED_SECAGG_MAX_CLIENTS or P outside [0, 1). */
FED_WUR fed_err fed_secagg_degree(uint32_t n, double dropout, uint32_t *k, uint32_t *t,
                                  double *p_fail);

/* The graph seed: BLAKE2b-256 over a label and the signed key list's bytes. */
void fed_secagg_graph_seed(const uint8_t *list, size_t len, uint8_t seed[32]);
/* The k-regular graph of seed over n clients. FED_ERR_INVAL when k is 0,
 * k >= n, n k is odd or n > FED_SECAGG_MAX_CLIENTS; FED_ERR_TOO_LARGE when
 * n k is over FED_SECAGG_MAX_EDGES; FED_ERR_NOMEM. */
FED_WUR fed_err fed_secagg_graph_new(const uint8_t seed[32], uint32_t n, uint32_t k,
                                     fed_secagg_graph **out);
void fed_secagg_graph_free(fed_secagg_graph *g);
uint32_t fed_secagg_graph_n(const fed_secagg_graph *g);
uint32_t fed_secagg_graph_k(const fed_secagg_graph *g);
/* Client i's k neighbours, in increasing order. */
const uint32_t *fed_secagg_graph_neighbours(const fed_secagg_graph *g, uint32_t i);
/* 1 when i and j are neighbours. */
int fed_secagg_graph_has_edge(const fed_secagg_graph *g, uint32_t i, uint32_t j);
/* How many of i's neighbours have alive[j] set (alive: n bytes). */
uint32_t fed_secagg_graph_live_neighbours(const fed_secagg_graph *g, uint32_t i,
                                          const uint8_t *alive);
/* *connected = 1 when the clients with alive[i] set are one connected part
 * of the graph (edges between them only); 1 also for none or one. A client
 * checks this before revealing anything: a split graph would reveal each
 * part's sum. FED_ERR_NOMEM. */
FED_WUR fed_err fed_secagg_graph_survivors_connected(const fed_secagg_graph *g,
                                                     const uint8_t *alive, int *connected);

#endif
