/* agg_budget.c - the aggregator's view of its clients' privacy budgets:
 * what each reports in its DELTA or LEAVE (wire.h's DP report), the clients
 * parked after declining a round for a reason that asking again does not
 * change (their budget, a model that does not fit them, settings that
 * differ from the aggregator's: never sampled, so never in a secure graph,
 * until they restart: a later epoch), and the stop when fewer than
 * --min-clients can still take part. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "node/aggregator_impl.h"

/* key's row, or NULL; *at where it goes (the rows sorted by key). */
static agg_member_dp *row_find(const node_agg *a, const uint8_t key[32], size_t *at)
{
    size_t lo = 0, hi = a->nmdp;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(a->mdp[mid].key, key, 32);

        if (c == 0)
            return &a->mdp[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (at)
        *at = lo;
    return NULL;
}

/* key's row, made when missing (NULL: out of memory, the report dropped). */
static agg_member_dp *row_get(node_agg *a, const uint8_t key[32])
{
    size_t at = 0;
    agg_member_dp *r = row_find(a, key, &at);

    if (r)
        return r;
    if (a->nmdp == a->cap_mdp) {
        size_t cap = a->cap_mdp ? 2 * a->cap_mdp : 16;
        agg_member_dp *p = fed_realloc(a->mdp, cap * sizeof *p);

        if (!p)
            return NULL;
        a->mdp = p;
        a->cap_mdp = cap;
    }
    memmove(a->mdp + at + 1, a->mdp + at, (a->nmdp - at) * sizeof *a->mdp);
    memset(&a->mdp[at], 0, sizeof a->mdp[at]);
    memcpy(a->mdp[at].key, key, 32);
    a->nmdp++;
    return &a->mdp[at];
}

/* The member's allow-list name, or its key's first bytes in hex. */
static const char *member_name(const fed_node *n, const uint8_t key[32], char buf[16])
{
    const char *name = fed_crypto_allow_find(n->cfg.allow, key);

    if (name)
        return name;
    snprintf(buf, 16, "%02x%02x%02x%02x", key[0], key[1], key[2], key[3]);
    return buf;
}

void fedi_node_agg_budget_note(fed_node *n, const fed_wire_msg *m)
{
    agg_member_dp *r;

    if (m->block.dp_epsilon == 0 && m->block.dp_budget == 0)
        return; /* no account kept (or an older client): nothing to show */
    if (!(r = row_get(n->agg, m->hdr.sender)))
        return;
    r->epsilon = m->block.dp_epsilon;
    r->budget = m->block.dp_budget;
    r->reported = 1;
    n->agg->mdp_version++;
}

int fedi_node_agg_budget_parks(uint32_t reason)
{
    return reason == (uint32_t)FED_ERR_DP_BUDGET || reason == (uint32_t)FED_ERR_MODEL_MISMATCH ||
           reason == (uint32_t)FED_ERR_LOCAL_MISMATCH || reason == (uint32_t)FED_ERR_UNSUPPORTED;
}

/* What a parked client was left out for, in a log line. */
static const char *park_what(uint32_t reason)
{
    switch (reason) {
    case (uint32_t)FED_ERR_DP_BUDGET:
        return "its privacy budget";
    case (uint32_t)FED_ERR_MODEL_MISMATCH:
        return "a model that does not fit it";
    case (uint32_t)FED_ERR_LOCAL_MISMATCH:
        return "--local-layers or --local-bn that differ from the aggregator's";
    default:
        return "pipeline stages it cannot give";
    }
}

/* Parked clients, by why. */
typedef struct {
    size_t all, budget, model, settings;
} park_counts;

/* Clients that could still take part: the allow-list's members but this
 * node and those parked (counted in *pc). */
static size_t can_take_part(const fed_node *n, park_counts *pc)
{
    size_t members = fed_crypto_allow_count(n->cfg.allow);

    memset(pc, 0, sizeof *pc);
    for (size_t i = 0; i < n->agg->nmdp; i++) {
        uint32_t why = n->agg->mdp[i].parked;

        if (!why || !fed_crypto_allow_find(n->cfg.allow, n->agg->mdp[i].key))
            continue;
        pc->all++;
        if (why == (uint32_t)FED_ERR_DP_BUDGET)
            pc->budget++;
        else if (why == (uint32_t)FED_ERR_MODEL_MISMATCH)
            pc->model++;
        else
            pc->settings++;
    }
    if (fed_crypto_allow_find(n->cfg.allow, n->key))
        members--;
    return members > pc->all ? members - pc->all : 0;
}

/* "2 declined for their privacy budget, 1 for ..." into buf */
static void park_say(const park_counts *pc, char *buf, size_t cap)
{
    const char *what[3] = {"for their privacy budget", "for a model that does not fit them",
                           "for settings that differ from the aggregator's"};
    size_t count[3] = {pc->budget, pc->model, pc->settings}, at = 0;

    buf[0] = '\0';
    for (int i = 0; i < 3; i++) {
        int w;

        if (!count[i])
            continue;
        w = snprintf(buf + at, cap - at, "%s%zu %s%s", at ? ", " : "", count[i],
                     at ? "" : "declined ", what[i]);
        if (w < 0 || (size_t)w >= cap - at)
            return;
        at += (size_t)w;
    }
}

fed_err fedi_node_agg_budget_declined(fed_node *n, const fed_wire_msg *m)
{
    node_agg *a = n->agg;
    agg_member_dp *r = row_get(a, m->hdr.sender);
    uint32_t reason = m->block.reason;
    park_counts pc;
    size_t left;
    char hex[16], why[192];
    const char *who = member_name(n, m->hdr.sender, hex);

    if (r && r->parked && r->epoch == m->hdr.sender_epoch)
        return FED_OK; /* said once (a LEAVE of the same run, sent again) */
    if (r) {
        r->parked = reason;
        r->epoch = m->hdr.sender_epoch;
        a->mdp_version++;
    }
    if (reason == (uint32_t)FED_ERR_MODEL_MISMATCH)
        fed_log(FED_LOG_WARN, "aggregator: client %s declined round %llu: the model does not "
                "fit it (%s: its data's input or classes, its own --model or its bounds; its "
                "log says both sides); it takes part in no round until it restarts", who,
                (unsigned long long)m->hdr.round, fed_errname(FED_ERR_MODEL_MISMATCH));
    else if (reason != (uint32_t)FED_ERR_DP_BUDGET)
        fed_log(FED_LOG_WARN, "aggregator: client %s declined round %llu: %s (%s); it takes "
                "part in no round until it restarts", who, (unsigned long long)m->hdr.round,
                fed_strerror((int)reason), fed_errname((int)reason));
    else if (m->block.dp_budget > 0)
        fed_log(FED_LOG_WARN, "aggregator: client %s declined round %llu: its privacy budget is "
                "spent (epsilon %.4f of %.4g); it takes part in no round until it restarts",
                who, (unsigned long long)m->hdr.round, m->block.dp_epsilon,
                m->block.dp_budget);
    else
        fed_log(FED_LOG_WARN, "aggregator: client %s declined round %llu: its privacy budget is "
                "spent; it takes part in no round until it restarts", who,
                (unsigned long long)m->hdr.round);
    left = can_take_part(n, &pc);
    if (left >= n->cfg.agg.min_clients)
        return FED_OK;
    park_say(&pc, why, sizeof why);
    fed_log(FED_LOG_ERROR, "aggregator: only %zu client%s can still take part (%s), fewer than "
            "--min-clients %u: stopping the run after round %llu", left, left == 1 ? "" : "s",
            why, n->cfg.agg.min_clients, (unsigned long long)n->round);
    if (n->failed == FED_OK) /* the first failure is the one the node reports */
        n->failed = FED_ERR_TOO_FEW_CLIENTS;
    return FED_ERR_TOO_FEW_CLIENTS;
}

int fedi_node_agg_budget_parked(fed_node *n, const fed_wire_hdr *h)
{
    agg_member_dp *r = row_find(n->agg, h->sender, NULL);
    char hex[16];

    if (!r || !r->parked)
        return 0;
    if (h->sender_epoch <= r->epoch) /* the run that declined: a HELLO of its is a retry */
        return (int)r->parked;
    fed_log(FED_LOG_WARN, "aggregator: client %s, left out for %s, restarted (epoch %llu): it "
            "is sampled again", member_name(n, h->sender, hex),
            park_what(r->parked),
            (unsigned long long)h->sender_epoch);
    r->parked = 0;
    n->agg->mdp_version++;
    return 0;
}

void fedi_node_agg_budget_free(node_agg *a)
{
    fed_free(a->mdp);
    a->mdp = NULL;
    a->nmdp = a->cap_mdp = 0;
}

int fed_node_member_dp(const fed_node *n, const uint8_t key[32], double *epsilon,
                       double *budget, int *parked)
{
    const agg_member_dp *r = n->agg ? row_find(n->agg, key, NULL) : NULL;

    *epsilon = r ? r->epsilon : 0;
    *budget = r ? r->budget : 0;
    *parked = r && r->parked == (uint32_t)FED_ERR_DP_BUDGET;
    return r && r->reported;
}

uint64_t fed_node_members_dp_version(const fed_node *n) { return n->agg ? n->agg->mdp_version : 0; }
