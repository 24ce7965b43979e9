/* peer_members.c - the peer role's membership: the peer table (cfg.peer.peers
 * or its own), the member list rebuilt from the allow-list and vouched
 * entries, and the PEERS gossip that advertises and takes signed entries.
 * Never touches the push-sum state or a round's shares: peer.c's. */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "node/peer_impl.h"

/* The table the members come from: cfg.peer.peers, or one of its own; with
 * --publish's entry learned (and its address handed on to dial). */
fed_err fedi_node_peer_table_open(fed_node *n)
{
    node_mesh *p = n->mesh;
    const fed_node_config *c = &n->cfg;
    fed_err e;

    if (c->peer.peers) {
        p->table = c->peer.peers;
    } else if ((e = fed_gossip_peers_new(&p->own_table)) != FED_OK) {
        return e;
    } else {
        p->table = p->own_table;
    }
    if (c->peer.publish && (e = fed_gossip_peers_learn(p->table, c->peer.publish, NULL)) != FED_OK)
        return e;
    if (c->peer.publish && memcmp(c->peer.publish->key, n->key, 32) && c->peer.on_address)
        c->peer.on_address(c->peer.address_ctx, c->peer.publish->key, c->peer.publish->url); /* the one it vouched for */
    return FED_OK;
}

static int cmp_key(const void *a, const void *b) { return memcmp(a, b, 32); }

/* Whether key counts as a member: in the allow-list, or vouched for by a
 * member (where this node takes vouched keys, or it is this node itself). */
static int counts_as_member(const fed_node *n, const uint8_t key[32], uint64_t now_s)
{
    if (fed_crypto_allow_find(n->cfg.allow, key))
        return 1;
    return (n->cfg.peer.vouch || !memcmp(key, n->key, 32)) &&
           fed_gossip_peers_vouched(n->mesh->table, key, n->cfg.allow, now_s);
}

/* The wire's membership test (fed_wire_set_member_fn). */
int fedi_node_peer_wire_member(void *ctx, const uint8_t pk[32])
{
    fed_node *n = ctx;

    return counts_as_member(n, pk, n->env.wall_s(n->env.self));
}

static fed_err grow_scratch(node_mesh *p, size_t n)
{
    uint32_t *nbr = fed_realloc(p->nbr, n * sizeof *nbr);
    uint32_t *in = nbr ? fed_realloc(p->in, n * sizeof *in) : NULL;
    uint8_t(*okeys)[32] = in ? fed_realloc(p->okeys, n * sizeof *okeys) : NULL;
    double *frac = okeys ? fed_realloc(p->frac, n * sizeof *frac) : NULL;

    if (nbr)
        p->nbr = nbr;
    if (in)
        p->in = in;
    if (okeys)
        p->okeys = okeys;
    if (frac)
        p->frac = frac;
    return frac ? FED_OK : FED_ERR_NOMEM;
}

/* The members: the allow-list and the keys that count as members by a
 * voucher (see counts_as_member), in key order, this node among them. What
 * the node knew of each carries over; the topology is built anew when the
 * list changed (*changed). Every member computes the same list once it has
 * heard the same entries; until then the rounds' liveness rule covers the
 * difference, and the running sums keep every share's mass. */
fed_err fedi_node_peer_rebuild_members(fed_node *n, int *changed)
{
    node_mesh *p = n->mesh;
    const fed_node_config *c = &n->cfg;
    size_t na = fed_crypto_allow_count(c->allow), nt = fed_gossip_peers_count(p->table), k = 0;
    uint64_t now_s = n->env.wall_s(n->env.self);
    uint8_t(*keys)[32] = fed_malloc((na + nt + 1) * 32);
    mesh_member *mem = NULL;
    fed_gossip_topo *topo = NULL;
    size_t self = SIZE_MAX;
    fed_err e = FED_OK;

    *changed = 0;
    if (!keys)
        return FED_ERR_NOMEM;
    for (size_t i = 0; i < na; i++) {
        const char *name;
        const uint8_t *pk;

        fed_crypto_allow_get(c->allow, i, &name, &pk);
        memcpy(keys[k++], pk, 32);
    }
    for (size_t i = 0; i < nt; i++) {
        const uint8_t *pk;
        const char *url;

        fed_gossip_peers_get(p->table, i, &pk, &url);
        if (!fed_crypto_allow_find(c->allow, pk) && counts_as_member(n, pk, now_s) &&
            strcmp(c->peer.topology, "static") != 0) /* static lists name members only */
            memcpy(keys[k++], pk, 32);
    }
    qsort(keys, k, 32, cmp_key);
    if (p->mem && k == p->n) {
        size_t i = 0;

        while (i < k && !memcmp(keys[i], p->mem[i].key, 32))
            i++;
        if (i == k)
            goto out; /* the same members */
    }
    for (size_t i = 0; i < k; i++)
        if (!memcmp(keys[i], n->key, 32))
            self = i;
    if (self == SIZE_MAX) {
        fed_log(FED_LOG_ERROR, "peer: this node is neither in the allow-list nor vouched for");
        e = FED_ERR_UNKNOWN_SENDER;
        goto out;
    }
    if (k < 2) {
        e = FED_ERR_RANGE;
        goto out;
    }
    if (!(mem = fed_calloc(k, sizeof *mem)) || (e = grow_scratch(p, k)) != FED_OK) {
        e = e ? e : FED_ERR_NOMEM;
        goto out;
    }
    if ((e = fed_gossip_topo_new(fedi_node_peer_gossip_topology(c), k,
                                 fed_gossip_topo_seed(c->allow), &topo)) != FED_OK)
        goto out;
    if (!strcmp(c->peer.topology, "static")) {
        int line = 0;

        e = c->peer.neighbours ? fed_gossip_topo_parse_static(topo, c->allow, c->peer.neighbours,
                                                          strlen(c->peer.neighbours), &line)
                          : FED_ERR_INVAL;
        if (e != FED_OK) {
            fed_log(FED_LOG_ERROR, "peer: the static neighbour lists, line %d: %s", line,
                    fed_strerror(e));
            goto out;
        }
    }
    for (size_t i = 0; i < k; i++) {
        size_t old = p->mem ? fedi_node_peer_member_of(p, keys[i]) : SIZE_MAX;

        if (old != SIZE_MAX)
            mem[i] = p->mem[old];
        memcpy(mem[i].key, keys[i], 32);
    }
    if (p->mem)
        fed_log(FED_LOG_INFO, "peer: %zu members now (%zu by a voucher)", k, k - na);
    fed_free(p->mem);
    fed_gossip_topo_free(p->topo);
    p->mem = mem;
    p->topo = topo;
    p->n = k;
    p->self = self;
    mem = NULL;
    topo = NULL;
    *changed = 1;
out:
    fed_free(mem);
    fed_gossip_topo_free(topo);
    fed_free(keys);
    return e;
}

size_t fedi_node_peer_member_of(const node_mesh *p, const uint8_t key[32])
{
    int found;
    size_t i = fed_key_search(p->mem, p->n, sizeof *p->mem, key, &found); /* key order */

    return found ? i : SIZE_MAX;
}

#define PEERS_EVERY 10       /* rounds between PEERS frames (and round 1) */
#define PEERS_TTL_S 3600     /* a peer's own entry is good this long */
#define PEERS_PER_FRAME 32   /* entries a PEERS frame carries at most */

/* Its own signed entry, the one a member signed for it, and what the table
 * holds signed that still counts: to this round's out-neighbours. */
static void advertise(fed_node *n, uint64_t round, size_t m)
{
    node_mesh *p = n->mesh;
    const fed_node_config *c = &n->cfg;
    uint64_t now_s = n->env.wall_s(n->env.self);
    uint8_t *buf = fed_malloc(PEERS_PER_FRAME * FED_GOSSIP_ENTRY_MAX);
    fed_gossip_entry self;
    size_t len = 0;
    uint32_t count = 0;

    if (!buf)
        return;
    if (c->peer.advertise[0] &&
        fed_gossip_entry_sign(c->arena, n->key, c->peer.advertise, now_s + PEERS_TTL_S, &self) == FED_OK)
        len += fed_gossip_entry_encode(&self, buf + len), count++;
    /* the table holds --publish's entry too (learned at start), whoever its
       key is; fedi_node_peer_on_peers never stores another entry for our own key */
    for (size_t i = 0; i < fed_gossip_peers_count(p->table) && count < PEERS_PER_FRAME; i++) {
        const fed_gossip_entry *e = fed_gossip_peers_valid(p->table, i, c->allow, now_s);

        if (e)
            len += fed_gossip_entry_encode(e, buf + len), count++;
    }
    for (size_t j = 0; count && j < m; j++) {
        fed_wire_hdr h;
        fed_wire_block b;

        memset(&b, 0, sizeof b);
        b.count = count;
        if (fedi_node_header(n, FED_WIRE_PEERS, p->mem[p->nbr[j]].key, round, 0, FED_CODEC_NONE,
                             &h) == FED_OK &&
            fedi_node_emit(n, NULL, &h, &b, buf, len) != FED_OK)
            break; /* logged; the next advertisement tries again */
    }
    fed_free(buf);
}

/* A PEERS frame: each entry that verifies, for a member (or, where this node
 * takes vouched keys, any key), goes into the table; a new address is
 * handed to the daemon to dial. */
fed_err fedi_node_peer_on_peers(fed_node *n, node_open *op)
{
    node_mesh *p = n->mesh;
    const fed_node_config *c = &n->cfg;
    const fed_wire_msg *m = &op->msg;
    uint64_t now_s = n->env.wall_s(n->env.self);
    size_t at = 0, refused = 0;
    fed_err e = FED_OK;

    for (uint32_t i = 0; i < m->block.count && e == FED_OK; i++) {
        fed_gossip_entry en;
        size_t used = 0;
        int what = FED_GOSSIP_KEPT;
        fed_err err;

        if ((e = fed_gossip_entry_decode(m->vector + at, m->vector_len - at, &en, &used)) != FED_OK)
            break;
        at += used;
        if (!memcmp(en.key, n->key, 32))
            continue;
        if (!fed_crypto_allow_find(c->allow, en.key) && !c->peer.vouch) {
            refused++;
            continue;
        }
        err = fed_gossip_peers_offer(p->table, &en, c->allow, now_s, &what);
        if (err == FED_ERR_EXPIRED || err == FED_ERR_UNKNOWN_SENDER || err == FED_ERR_SIGNATURE)
            refused++;
        if (err != FED_OK || what == FED_GOSSIP_KEPT)
            continue; /* what the table knew already: members stay as they are */
        p->members_changed = 1;
        if (what == FED_GOSSIP_MOVED && c->peer.on_address)
            c->peer.on_address(c->peer.address_ctx, en.key, en.url);
    }
    if (e == FED_OK && at != m->vector_len)
        e = FED_ERR_PAYLOAD;
    if (refused)
        fed_log(FED_LOG_INFO, "peer: %zu entries refused (expired, unsigned by a member, or "
                "vouching off)", refused);
    if (e != FED_OK)
        fed_wire_note_reject(n->wire, &m->hdr, e);
    (void)fedi_node_ack(n, op->req, &m->hdr, e, 0);
    op->req = NULL;
    return e;
}

void fedi_node_peer_advertise_due(fed_node *n, uint64_t round, size_t m)
{
    node_mesh *p = n->mesh;

    if (round == 1 || round % PEERS_EVERY == 0 || p->advertise_now)
        advertise(n, round, m);
    p->advertise_now = 0;
}

void fedi_node_peer_refresh_members(fed_node *n)
{
    node_mesh *p = n->mesh;
    const fed_node_config *c = &n->cfg;
    fed_err e;

    /* PEERS entries came, vouches may have expired, or a SIGHUP reloaded
       the allow-list (the daemon reloads the very list this node reads) */
    if (p->members_changed || c->peer.vouch || c->peer.publish ||
        fed_crypto_allow_generation(c->allow) != p->allow_gen) {
        int changed = 0;

        if ((e = fedi_node_peer_rebuild_members(n, &changed)) != FED_OK)
            fed_log(FED_LOG_ERROR, "peer: members: %s", fed_strerror(e));
        else
            p->allow_gen = fed_crypto_allow_generation(c->allow);
        p->members_changed = 0;
        p->advertise_now |= changed;
    }
}
