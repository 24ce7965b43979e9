/* graph.c - the degree from the dropout rate (a binomial tail in log space),
 * the seeded Harary graph over a ChaCha20-shuffled order, and the survivor
 * checks; the formula and construction are stated in graph.h. */
#include "secagg/graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"

struct fed_secagg_graph {
    uint32_t n, k;
    uint32_t *adj; /* n x k, each row sorted */
};

static const char GRAPH_LABEL[] = "fednode secagg graph v1";

uint32_t fed_secagg_threshold(uint32_t k) { return k / 2 + 1; }

static double log_binom_term(uint32_t k, uint32_t j, double dropout)
{
    return lgamma((double)k + 1) - lgamma((double)j + 1) - lgamma((double)(k - j) + 1) +
           j * log1p(-dropout) + (double)(k - j) * log(dropout);
}

/* n Pr[Bin(k, q) < t], q = 1 - P, summed from the terms next to t outward,
 * where the binomial's mode (about k q) is not: for P < 1/2 the lower tail
 * sum_{j<t} from j = t - 1 down, for P >= 1/2 one minus the upper tail
 * sum_{j>=t} from j = t up. Each term comes from its neighbour (C(k,j-1)
 * q^(j-1) P^(k-j+1) = C(k,j) q^j P^(k-j) j / (k-j+1) P / q), and they
 * shrink away from the mode, so the sum stops once a term is under 1e-17 of
 * it: the rest is below rounding. That keeps fed_secagg_degree's search at
 * O(k) work, and a first term that underflows means a tail that does. */
double fed_secagg_fail_bound(uint32_t n, uint32_t k, uint32_t t, double dropout)
{
    double s = 0, term;

    if (t == 0)
        return 0;
    if (t > k)
        return 1;
    if (dropout <= 0)
        return 0;
    if (dropout >= 1)
        return 1;
    if (dropout < 0.5) {
        double down = dropout / (1 - dropout);

        term = exp(log_binom_term(k, t - 1, dropout));
        for (uint32_t j = t - 1;; j--) {
            s += term;
            if (j == 0 || term < s * 1e-17)
                break;
            term *= (double)j / (double)(k - j + 1) * down;
        }
    } else {
        double up = (1 - dropout) / dropout, upper = 0;

        term = exp(log_binom_term(k, t, dropout));
        for (uint32_t j = t;; j++) {
            upper += term;
            if (j == k || term < upper * 1e-17)
                break;
            term *= (double)(k - j) / (double)(j + 1) * up;
        }
        s = 1 - upper;
    }
    s *= n;
    return s < 1 ? s : 1;
}

fed_err fed_secagg_degree(uint32_t n, double dropout, uint32_t *k, uint32_t *t, double *p_fail)
{
    uint32_t best = n - 1;

    if (n < 2 || n > FED_SECAGG_MAX_CLIENTS || !(dropout >= 0) || !(dropout < 1) || !k || !t)
        return FED_ERR_INVAL;
    /* From 2: H(1, n) is a matching, and each pair's sum would be revealed. */
    /* With P >= 1/2 a client keeps more than half its neighbours with
     * probability 1/2 at best: no k reaches the target. */
    for (uint32_t c = n > 2 ? 2 : 1; c < n && dropout < 0.5; c++) {
        if (((uint64_t)n * c) & 1)
            continue;
        if (fed_secagg_fail_bound(n, c, fed_secagg_threshold(c), dropout) <=
            FED_SECAGG_FAIL_TARGET) {
            best = c;
            break;
        }
    }
    *k = best;
    *t = fed_secagg_threshold(best);
    if (p_fail)
        *p_fail = fed_secagg_fail_bound(n, best, *t, dropout);
    return FED_OK;
}

void fed_secagg_graph_seed(const uint8_t *list, size_t len, uint8_t seed[32])
{
    crypto_generichash_state st;

    crypto_generichash_init(&st, NULL, 0, 32);
    crypto_generichash_update(&st, (const uint8_t *)GRAPH_LABEL, sizeof GRAPH_LABEL - 1);
    crypto_generichash_update(&st, list, len);
    crypto_generichash_final(&st, seed, 32);
}

/* ChaCha20 with the graph seed as key, read 64 bits at a time. */
typedef struct stream {
    const uint8_t *key;
    uint8_t buf[256];
    size_t at;
    uint32_t block;
} stream;

static uint64_t stream_u64(stream *s)
{
    static const uint8_t zero[sizeof s->buf];
    static const uint8_t nonce[crypto_stream_chacha20_ietf_NONCEBYTES];

    if (s->at == sizeof s->buf) {
        crypto_stream_chacha20_ietf_xor_ic(s->buf, zero, sizeof s->buf, nonce, s->block, s->key);
        s->block += sizeof s->buf / 64;
        s->at = 0;
    }
    s->at += 8;
    return fed_get_u64le(s->buf + s->at - 8);
}

/* Uniform in [0, bound), bound >= 1: draws in the biased tail are redrawn. */
static uint64_t stream_below(stream *s, uint64_t bound)
{
    uint64_t lim = UINT64_MAX - UINT64_MAX % bound, v;

    do
        v = stream_u64(s);
    while (v >= lim);
    return v % bound;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

fed_err fed_secagg_graph_new(const uint8_t seed[32], uint32_t n, uint32_t k,
                             fed_secagg_graph **out)
{
    fed_secagg_graph *g = NULL;
    uint32_t *perm = NULL;
    stream s = {.key = seed, .at = sizeof s.buf};
    fed_err err = FED_OK;

    *out = NULL;
    if (!seed || n > FED_SECAGG_MAX_CLIENTS || k == 0 || k >= n || (((uint64_t)n * k) & 1))
        return FED_ERR_INVAL;
    if ((size_t)n * k > FED_SECAGG_MAX_EDGES)
        return FED_ERR_TOO_LARGE;
    g = fed_calloc(1, sizeof *g);
    perm = fed_malloc((size_t)n * sizeof *perm);
    if (!g || !perm) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    g->n = n;
    g->k = k;
    g->adj = fed_malloc((size_t)n * k * sizeof *g->adj);
    if (!g->adj) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    /* perm[p]: the client at ring position p. */
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)stream_below(&s, (uint64_t)i + 1), x = perm[i];

        perm[i] = perm[j];
        perm[j] = x;
    }
    for (uint32_t p = 0; p < n; p++) {
        uint32_t *row = g->adj + (size_t)perm[p] * k, m = 0;

        for (uint32_t d = 1; d <= k / 2; d++) {
            row[m++] = perm[(p + d) % n];
            row[m++] = perm[(p + n - d) % n];
        }
        if (k & 1)
            row[m++] = perm[(p + n / 2) % n];
        qsort(row, k, sizeof *row, cmp_u32);
    }
    *out = g;
    g = NULL;
out:
    sodium_memzero(&s, sizeof s);
    fed_free(perm);
    fed_secagg_graph_free(g);
    return err;
}

void fed_secagg_graph_free(fed_secagg_graph *g)
{
    if (!g)
        return;
    fed_free(g->adj);
    fed_free(g);
}

uint32_t fed_secagg_graph_n(const fed_secagg_graph *g) { return g->n; }
uint32_t fed_secagg_graph_k(const fed_secagg_graph *g) { return g->k; }

const uint32_t *fed_secagg_graph_neighbours(const fed_secagg_graph *g, uint32_t i)
{
    return i < g->n ? g->adj + (size_t)i * g->k : NULL;
}

int fed_secagg_graph_has_edge(const fed_secagg_graph *g, uint32_t i, uint32_t j)
{
    if (i >= g->n || j >= g->n)
        return 0;
    return bsearch(&j, g->adj + (size_t)i * g->k, g->k, sizeof j, cmp_u32) != NULL;
}

uint32_t fed_secagg_graph_live_neighbours(const fed_secagg_graph *g, uint32_t i,
                                          const uint8_t *alive)
{
    const uint32_t *row = fed_secagg_graph_neighbours(g, i);
    uint32_t c = 0;

    for (uint32_t d = 0; row && d < g->k; d++)
        c += alive[row[d]] != 0;
    return c;
}

fed_err fed_secagg_graph_survivors_connected(const fed_secagg_graph *g, const uint8_t *alive,
                                             int *connected)
{
    uint32_t *queue = NULL, head = 0, tail = 0, live = 0, start = g->n;
    uint8_t *seen = NULL;
    fed_err err = FED_OK;

    for (uint32_t i = 0; i < g->n; i++)
        if (alive[i]) {
            live++;
            if (start == g->n)
                start = i;
        }
    *connected = 1;
    if (live <= 1)
        return FED_OK;
    queue = fed_malloc((size_t)g->n * sizeof *queue);
    seen = fed_calloc(g->n, 1);
    if (!queue || !seen) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    seen[start] = 1;
    queue[tail++] = start;
    while (head < tail) {
        const uint32_t *row = g->adj + (size_t)queue[head++] * g->k;

        for (uint32_t d = 0; d < g->k; d++)
            if (alive[row[d]] && !seen[row[d]]) {
                seen[row[d]] = 1;
                queue[tail++] = row[d];
            }
    }
    *connected = tail == live;
out:
    fed_free(queue);
    fed_free(seen);
    return err;
}
