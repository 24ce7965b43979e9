/* topology.c - out- and in-neighbours per member and round (topology.h).
 * Owns the fixed structures (random:K's neighbour sets, smallworld's and
 * static's adjacency); computes everything else on the fly. Never looks at
 * who is alive: the lists depend on the spec, the seed and the round only. */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "core/opt.h"
#include "gossip/topology.h"

typedef enum topo_kind {
    TOPO_FULL,
    TOPO_RING,
    TOPO_RANDOM,
    TOPO_TREE,
    TOPO_SMALLWORLD,
    TOPO_STATIC,
} topo_kind;

struct fed_gossip_topo {
    topo_kind kind;
    size_t n;
    uint64_t seed;
    int k;          /* random: per round; smallworld: lattice degree */
    double p;       /* smallworld: rewiring probability */
    uint32_t *adj;  /* fixed lists: random's sets, smallworld, static (n x stride) */
    uint32_t *deg;  /* (n) their lengths */
    size_t stride;
};

uint64_t fed_gossip_topo_seed(const fed_crypto_allow *allow)
{
    crypto_generichash_state st;
    uint8_t h[32];
    uint64_t s = 0;

    crypto_generichash_init(&st, (const uint8_t *)"fednode topology", 16, sizeof h);
    for (size_t i = 0; i < fed_crypto_allow_count(allow); i++) {
        const char *name;
        const uint8_t *pk;

        fed_crypto_allow_get(allow, i, &name, &pk);
        crypto_generichash_update(&st, pk, FED_CRYPTO_PK_BYTES);
    }
    crypto_generichash_final(&st, h, sizeof h);
    for (int i = 0; i < 8; i++)
        s |= (uint64_t)h[i] << (8 * i);
    return s;
}

/* ---- specs ---- */

static fed_err parse_spec(const char *spec, topo_kind *kind, int *k, double *p)
{
    char *end;

    *k = 0;
    *p = 0;
    if (!spec)
        return FED_ERR_SPEC;
    if (!strcmp(spec, "full"))
        *kind = TOPO_FULL;
    else if (!strcmp(spec, "ring"))
        *kind = TOPO_RING;
    else if (!strcmp(spec, "tree"))
        *kind = TOPO_TREE;
    else if (!strcmp(spec, "static"))
        *kind = TOPO_STATIC;
    else if (!strncmp(spec, "random:", 7)) {
        long v;

        errno = 0;
        v = strtol(spec + 7, &end, 10);
        if (end == spec + 7 || *end || errno || v < 1 || v > FED_GOSSIP_RANDOM_SET_MAX)
            return FED_ERR_SPEC;
        *kind = TOPO_RANDOM;
        *k = (int)v;
    } else if (!strncmp(spec, "smallworld:", 11)) {
        long v;

        errno = 0;
        v = strtol(spec + 11, &end, 10);
        if (end == spec + 11 || *end != ',' || errno || v < 2 || v > 64 || v % 2)
            return FED_ERR_SPEC;
        *k = (int)v;
        *p = fed_strtod_decimal(end + 1, &end);
        if (*end || errno || !(*p >= 0 && *p <= 1))
            return FED_ERR_SPEC;
        *kind = TOPO_SMALLWORLD;
    } else {
        return FED_ERR_SPEC;
    }
    return FED_OK;
}

fed_err fed_gossip_topo_spec_check(const char *spec)
{
    topo_kind kind;
    int k;
    double p;

    return parse_spec(spec, &kind, &k, &p);
}

/* ---- fixed lists ---- */

static int has(const uint32_t *list, uint32_t len, uint32_t v)
{
    for (uint32_t i = 0; i < len; i++)
        if (list[i] == v)
            return 1;
    return 0;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

static fed_err alloc_lists(fed_gossip_topo *t, size_t stride)
{
    t->stride = stride;
    t->adj = fed_calloc(t->n * stride, sizeof *t->adj);
    t->deg = fed_calloc(t->n, sizeof *t->deg);
    return t->adj && t->deg ? FED_OK : FED_ERR_NOMEM;
}

/* random:K: one set D of offsets, 1 and set-1 others drawn once from the
 * seed; member i's fixed neighbour set is {i + d mod n : d in D}. Kept in
 * adj[0..set) (one list for all). */
static fed_err build_random_offsets(fed_gossip_topo *t)
{
    size_t set = (size_t)(4 * t->k);
    uint32_t *d;
    fed_rng r;

    if (set > FED_GOSSIP_RANDOM_SET_MAX)
        set = FED_GOSSIP_RANDOM_SET_MAX;
    if (set > t->n - 1)
        set = t->n - 1;
    t->stride = set;
    if (!(t->adj = fed_calloc(set, sizeof *t->adj)))
        return FED_ERR_NOMEM;
    d = t->adj;
    d[0] = 1; /* so the sets join every member to the next: connected */
    fed_rng_seed_stream(&r, t->seed, 0x0ff5e7);
    for (size_t c = 1; c < set;) {
        uint32_t v = 1 + (uint32_t)fed_rng_below(&r, t->n - 1);

        if (!has(d, (uint32_t)c, v))
            d[c++] = v;
    }
    qsort(d, set, sizeof *d, cmp_u32);
    return FED_OK;
}

/* Adds the undirected edge a-b (both lists); 0 when it is there already. */
static int add_edge(fed_gossip_topo *t, uint32_t a, uint32_t b)
{
    uint32_t *la = t->adj + a * t->stride, *lb = t->adj + b * t->stride;

    if (a == b || has(la, t->deg[a], b) || t->deg[a] == t->stride || t->deg[b] == t->stride)
        return 0;
    la[t->deg[a]++] = b;
    lb[t->deg[b]++] = a;
    return 1;
}

/* Watts-Strogatz: each lattice edge (i, i+d), d <= K/2, kept with 1-P, or
 * else moved to (i, j) for a uniform j that is not i nor a neighbour yet. */
static fed_err build_smallworld(fed_gossip_topo *t)
{
    size_t half = (size_t)t->k / 2;
    fed_rng r;
    fed_err e;

    if ((size_t)t->k >= t->n)
        return FED_ERR_RANGE;
    if ((e = alloc_lists(t, 4 * (size_t)t->k)) != FED_OK)
        return e;
    fed_rng_seed_stream(&r, t->seed, 0x5a11);
    for (size_t d = 1; d <= half; d++)
        for (size_t i = 0; i < t->n; i++) {
            uint32_t a = (uint32_t)i, b = (uint32_t)((i + d) % t->n);

            if (fed_rng_uniform(&r) < t->p)
                for (int tries = 0; tries < 32; tries++) {
                    uint32_t j = (uint32_t)fed_rng_below(&r, t->n);

                    if (add_edge(t, a, j)) {
                        b = UINT32_MAX;
                        break;
                    }
                }
            if (b != UINT32_MAX)
                (void)add_edge(t, a, b);
        }
    for (size_t i = 0; i < t->n; i++)
        qsort(t->adj + i * t->stride, t->deg[i], sizeof *t->adj, cmp_u32);
    return FED_OK;
}

fed_err fed_gossip_topo_new(const char *spec, size_t n, uint64_t seed, fed_gossip_topo **out)
{
    fed_gossip_topo *t;
    fed_err e;

    *out = NULL;
    if (!(t = fed_calloc(1, sizeof *t)))
        return FED_ERR_NOMEM;
    t->n = n;
    t->seed = seed;
    if ((e = parse_spec(spec, &t->kind, &t->k, &t->p)) != FED_OK)
        goto out;
    if (n < 2 || n > UINT32_MAX) {
        e = FED_ERR_RANGE;
        goto out;
    }
    if (t->kind == TOPO_RANDOM)
        e = build_random_offsets(t);
    else if (t->kind == TOPO_SMALLWORLD)
        e = build_smallworld(t);
    else if (t->kind == TOPO_STATIC)
        e = alloc_lists(t, n - 1);
out:
    if (e != FED_OK) {
        fed_gossip_topo_free(t);
        return e;
    }
    *out = t;
    return FED_OK;
}

void fed_gossip_topo_free(fed_gossip_topo *t)
{
    if (!t)
        return;
    fed_free(t->adj);
    fed_free(t->deg);
    fed_free(t);
}

fed_err fed_gossip_topo_set_static(fed_gossip_topo *t, size_t i, const uint32_t *out,
                                   size_t count)
{
    uint32_t *l;

    if (t->kind != TOPO_STATIC || i >= t->n || count > t->n - 1)
        return FED_ERR_INVAL;
    l = t->adj + i * t->stride;
    for (size_t k = 0; k < count; k++) {
        if (out[k] >= t->n || out[k] == i || has(out, (uint32_t)k, out[k]))
            return FED_ERR_INVAL;
        l[k] = out[k];
    }
    t->deg[i] = (uint32_t)count;
    qsort(l, count, sizeof *l, cmp_u32);
    return FED_OK;
}

static int member_index(const fed_crypto_allow *allow, const char *name, size_t n, uint32_t *out)
{
    for (size_t i = 0; i < fed_crypto_allow_count(allow) && i < n; i++) {
        const char *nm;
        const uint8_t *pk;

        fed_crypto_allow_get(allow, i, &nm, &pk);
        if (!strcmp(nm, name)) {
            *out = (uint32_t)i;
            return 1;
        }
    }
    return 0;
}

/* One "NAME: N N ..." line into lists (stride n-1) and deg; blank or
 * comment lines set nothing. */
static fed_err static_line(const fed_gossip_topo *t, const fed_crypto_allow *allow, char *s,
                           uint32_t *lists, uint32_t *deg, uint8_t *seen)
{
    char *colon, *tok, *save = NULL;
    uint32_t i, j;

    if ((tok = strchr(s, '#')))
        *tok = 0;
    if (!(colon = strchr(s, ':'))) {
        for (char *c = s; *c; c++)
            if (*c != ' ' && *c != '\t' && *c != '\r')
                return FED_ERR_FORMAT;
        return FED_OK;
    }
    *colon = 0;
    if (!(tok = strtok_r(s, " \t\r", &save)) || strtok_r(NULL, " \t\r", &save))
        return FED_ERR_FORMAT;
    if (!member_index(allow, tok, t->n, &i))
        return FED_ERR_UNKNOWN_SENDER;
    if (seen[i]++)
        return FED_ERR_FORMAT;
    for (tok = strtok_r(colon + 1, " \t\r", &save); tok; tok = strtok_r(NULL, " \t\r", &save)) {
        if (!member_index(allow, tok, t->n, &j))
            return FED_ERR_UNKNOWN_SENDER;
        if (j == i || has(lists + i * (t->n - 1), deg[i], j) || deg[i] == t->n - 1)
            return FED_ERR_FORMAT;
        lists[i * (t->n - 1) + deg[i]++] = j;
    }
    return FED_OK;
}

fed_err fed_gossip_topo_parse_static(fed_gossip_topo *t, const fed_crypto_allow *allow,
                                     const char *text, size_t len, int *err_line)
{
    uint32_t *lists = NULL, *deg = NULL;
    uint8_t *seen = NULL;
    char line[4096];
    size_t at = 0;
    int ln = 0;
    fed_err e = FED_OK;

    if (err_line)
        *err_line = 0;
    if (t->kind != TOPO_STATIC)
        return FED_ERR_INVAL;
    lists = fed_calloc(t->n * (t->n - 1), sizeof *lists);
    deg = fed_calloc(t->n, sizeof *deg);
    seen = fed_calloc(t->n, 1);
    if (!lists || !deg || !seen) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    while (at < len && e == FED_OK) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;

        ln++;
        if (end - at >= sizeof line || memchr(text + at, 0, end - at))
            e = FED_ERR_FORMAT;
        else {
            memcpy(line, text + at, end - at);
            line[end - at] = 0;
            e = static_line(t, allow, line, lists, deg, seen);
        }
        at = end + 1;
    }
    if (e != FED_OK) {
        if (err_line)
            *err_line = ln;
        goto out;
    }
    for (size_t i = 0; i < t->n; i++) {
        memcpy(t->adj + i * t->stride, lists + i * (t->n - 1), deg[i] * sizeof *lists);
        t->deg[i] = deg[i];
        qsort(t->adj + i * t->stride, deg[i], sizeof *t->adj, cmp_u32);
    }
out:
    fed_free(lists);
    fed_free(deg);
    fed_free(seen);
    return e;
}

size_t fed_gossip_topo_size(const fed_gossip_topo *t) { return t->n; }

int fed_gossip_topo_symmetric(const fed_gossip_topo *t)
{
    return t->kind == TOPO_FULL || t->kind == TOPO_RING || t->kind == TOPO_TREE ||
           t->kind == TOPO_SMALLWORLD;
}

/* ---- per round ---- */

/* random:K: the round's K offsets, drawn from D with (seed, round): the
 * same for every member, so each has K out- and K in-neighbours and the
 * mixing stays doubly stochastic. */
static size_t random_offsets(const fed_gossip_topo *t, uint64_t round, uint32_t *off)
{
    uint32_t pick[FED_GOSSIP_RANDOM_SET_MAX];
    size_t set = t->stride, k = (size_t)t->k < set ? (size_t)t->k : set;
    fed_rng r;

    memcpy(pick, t->adj, set * sizeof *pick);
    fed_rng_seed_stream(&r, t->seed ^ (round * 0x9e3779b97f4a7c15ULL), 0x0ff5e7);
    for (size_t a = 0; a < k; a++) { /* a partial Fisher-Yates */
        size_t b = a + (size_t)fed_rng_below(&r, set - a);
        uint32_t x = pick[a];

        pick[a] = pick[b];
        pick[b] = x;
    }
    memcpy(off, pick, k * sizeof *off);
    return k;
}

static size_t random_list(const fed_gossip_topo *t, size_t i, uint64_t round, int in,
                          uint32_t *out)
{
    uint32_t off[FED_GOSSIP_RANDOM_SET_MAX];
    size_t k = random_offsets(t, round, off);

    for (size_t a = 0; a < k; a++)
        out[a] = (uint32_t)(in ? (i + t->n - off[a]) % t->n : (i + off[a]) % t->n);
    qsort(out, k, sizeof *out, cmp_u32);
    return k;
}

static size_t sorted_unique(uint32_t *a, size_t len, uint32_t self)
{
    size_t w = 0;

    qsort(a, len, sizeof *a, cmp_u32);
    for (size_t r = 0; r < len; r++)
        if (a[r] != self && (w == 0 || a[w - 1] != a[r]))
            a[w++] = a[r];
    return w;
}

size_t fed_gossip_topo_out(const fed_gossip_topo *t, size_t i, uint64_t round, uint32_t *out)
{
    size_t c = 0;

    switch (t->kind) {
    case TOPO_FULL:
        for (size_t j = 0; j < t->n; j++)
            if (j != i)
                out[c++] = (uint32_t)j;
        return c;
    case TOPO_RING:
        out[0] = (uint32_t)((i + t->n - 1) % t->n);
        out[1] = (uint32_t)((i + 1) % t->n);
        return sorted_unique(out, 2, (uint32_t)i);
    case TOPO_TREE:
        if (i > 0)
            out[c++] = (uint32_t)((i - 1) / 2);
        if (2 * i + 1 < t->n)
            out[c++] = (uint32_t)(2 * i + 1);
        if (2 * i + 2 < t->n)
            out[c++] = (uint32_t)(2 * i + 2);
        return c;
    case TOPO_RANDOM:
        return random_list(t, i, round, 0, out);
    case TOPO_SMALLWORLD:
    case TOPO_STATIC:
        memcpy(out, t->adj + i * t->stride, t->deg[i] * sizeof *out);
        return t->deg[i];
    }
    return 0;
}

size_t fed_gossip_topo_in(const fed_gossip_topo *t, size_t i, uint64_t round, uint32_t *in)
{
    size_t c = 0;

    if (fed_gossip_topo_symmetric(t))
        return fed_gossip_topo_out(t, i, round, in);
    if (t->kind == TOPO_RANDOM)
        return random_list(t, i, round, 1, in);
    for (size_t j = 0; j < t->n; j++) /* static */
        if (j != i && has(t->adj + j * t->stride, t->deg[j], (uint32_t)i))
            in[c++] = (uint32_t)j;
    return c;
}
