/* cli_store.c - the database subcommands: `fednode status` (the last rounds,
 * their contributions, checkpoints, peers and rejection counters as tables
 * or JSON), `export`
 * (a checkpoint's parameters to .safetensors), `import` (a .safetensors file
 * back to a model file or a checkpoint) and `verify` (integrity, hash chain,
 * signatures). Owns their options and printing only; never writes to a
 * database it was asked to inspect (status, export, verify open it read-only). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "core/opt.h"
#include "model/backend.h"
#include "model/io.h"
#include "model/metrics.h"
#include "model/model.h"
#include "app/cli.h"
#include "node/ckpt_model.h"
#include "model/safetensors.h"
#include "onnx/onnx_write.h"
#include "storage/store.h"

#define PATH_MAX_CLI 1024
#define LIST_MAX 1000

/* ------------------------------------------------------------ options -- */

static int open_db(const char *cmd, const char *path, unsigned flags, fed_store **st)
{
    fed_store_opts o;
    fed_err e;

    if (!path[0]) {
        fed_cli_error("%s: --db FILE is required", cmd);
        return 2;
    }
    fed_store_opts_default(&o);
    o.flags = flags;
    if ((e = fed_store_open(path, &o, st)) != FED_OK) {
        fed_cli_error("%s: cannot open %s: %s", cmd, path,
                      e == FED_ERR_MAGIC ? "not a fednode database" : fed_strerror(e));
        return 1;
    }
    return -1;
}

/* ----------------------------------------------------------- printing -- */

static void hex(char *out, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
    out[2 * n] = '\0';
}

static void fmt_time_ms(char *out, size_t cap, uint64_t ms)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;

    if (!ms || !gmtime_r(&s, &tm)) {
        snprintf(out, cap, "-");
        return;
    }
    strftime(out, cap, "%Y-%m-%d %H:%M:%S", &tm);
}

static void fmt_bytes(char *out, size_t cap, uint64_t b)
{
    static const char *const unit[] = {"B", "kB", "MB", "GB", "TB"};
    double v = (double)b;
    int u = 0;

    while (v >= 1000 && u < 4)
        v /= 1000, u++;
    if (u == 0)
        snprintf(out, cap, "%" PRIu64 " B", b);
    else
        snprintf(out, cap, "%.1f %s", v, unit[u]);
}

static void fmt_real(char *out, size_t cap, double v, int decimals, const char *suffix)
{
    if (isfinite(v))
        snprintf(out, cap, "%.*f%s", decimals, v, suffix);
    else
        snprintf(out, cap, "-");
}

/* A JSON string (our texts are ASCII; anything else escaped). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_real(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    else
        fputs("null", f);
}

/* ------------------------------------------------------------- status -- */

typedef struct status_cfg {
    char db[PATH_MAX_CLI];
    int json;
    int rounds;
    int checkpoints;
    int watch;
    double interval;
} status_cfg;

#define S(field, name, type, def, min, max, help)                              \
    FED_OPT_DEF(status_cfg, field, name, type, def, min, max, help)
static const fed_opt status_opts[] = {
    S(db, "db", FED_OPT_STR, "", 0, 0, "the node's database"),
    S(json, "json", FED_OPT_BOOL, "false", 0, 0, "print JSON instead of tables"),
    S(rounds, "rounds", FED_OPT_INT, "10", 1, LIST_MAX, "how many of the last rounds"),
    S(checkpoints, "checkpoints", FED_OPT_INT, "10", 1, LIST_MAX,
      "how many of the last checkpoints"),
    S(watch, "watch", FED_OPT_BOOL, "false", 0, 0,
      "redraw the tables in place every --interval seconds until Ctrl-C (with --json: one "
      "object a line)"),
    S(interval, "interval", FED_OPT_DOUBLE, "2", 0.1, 86400, "seconds between --watch's redraws"),
};
#undef S

/* A contribution as status shows it (no digest, signature or header). */
typedef struct status_contrib {
    uint64_t round;
    uint8_t key[32];
    int accepted;
    char reason[64];
    double dp_epsilon, dp_budget; /* the client's DP report with it (0, 0: none) */
} status_contrib;

/* A client's latest DP report among the contributions read (aggregator). */
typedef struct status_budget {
    uint8_t key[32];
    uint64_t round;
    double epsilon, budget;
} status_budget;

/* A figure as recorded (a site's name in it: longer than fed_metric_value's). */
typedef struct status_metric {
    char name[96];
    double value;
} status_metric;

typedef struct status_data {
    fed_store_round *rounds;
    fed_store_ckpt_row *ckpts;
    fed_store_peer *peers;
    fed_store_counter *counters;
    status_contrib *contribs; /* of rounds >= from_round, in (round, id) order */
    size_t nrounds, nckpts, npeers, ncounters, ncontribs;
    uint64_t from_round;
    size_t contribs_left_out; /* beyond LIST_MAX */
    uint64_t dp_charges;      /* DP-SGD releases charged, and the last one */
    fed_store_dp_charge dp_last;
    fed_store_secagg_try *tries; /* secure aggregation's tries of the rounds shown */
    size_t ntries;
    status_budget *budgets; /* (nbudgets) each reporting client's latest, by first seen */
    size_t nbudgets;
    status_metric *metrics; /* the newest evaluated round's figures (v7) */
    size_t nmetrics;
    uint64_t metrics_round;
    /* the newest site evaluation's (--eval-every): val.NAME pooled,
       site.MEMBER.NAME each site's */
    status_metric *site;
    size_t nsite;
    uint64_t site_round;
} status_data;

static void status_data_free(status_data *d)
{
    fed_free(d->metrics);
    fed_free(d->site);
    fed_free(d->tries);
    fed_free(d->budgets);
    fed_free(d->contribs);
    fed_free(d->rounds);
    fed_free(d->ckpts);
    fed_free(d->peers);
    fed_free(d->counters);
}

/* The client's latest report, from every contribution read (shown or not). */
static void keep_budget(status_data *d, const fed_store_contrib *c)
{
    size_t i = 0;

    if (c->dp_epsilon == 0 && c->dp_budget == 0)
        return;
    while (i < d->nbudgets && memcmp(d->budgets[i].key, c->peer_key, 32) != 0)
        i++;
    if (i == d->nbudgets) {
        if (d->nbudgets == LIST_MAX)
            return;
        memcpy(d->budgets[d->nbudgets++].key, c->peer_key, 32);
    }
    d->budgets[i].round = c->round;
    d->budgets[i].epsilon = c->dp_epsilon;
    d->budgets[i].budget = c->dp_budget;
}

static int keep_contrib(void *ctx, const fed_store_contrib *c)
{
    status_data *d = ctx;
    status_contrib *r;

    keep_budget(d, c);
    if (d->ncontribs == LIST_MAX) {
        d->contribs_left_out++;
        return 0;
    }
    r = &d->contribs[d->ncontribs++];
    r->round = c->round;
    memcpy(r->key, c->peer_key, 32);
    r->accepted = c->accepted;
    snprintf(r->reason, sizeof r->reason, "%s", c->reason);
    r->dp_epsilon = c->dp_epsilon;
    r->dp_budget = c->dp_budget;
    return 0;
}

static int keep_dp_charge(void *ctx, const fed_store_dp_charge *c)
{
    status_data *d = ctx;

    d->dp_charges++;
    d->dp_last = *c;
    return 0;
}

/* At most this many figures of a round are read (the headline ones, 256
 * recalls, a confusion matrix of up to 20 classes, with room). */
#define METRICS_MAX 1024

/* A figure into the central list or (val.*, site.*) the site evaluation's. */
static int keep_figure(status_data *d, int site, uint64_t round, const char *name, double value)
{
    status_metric *m = site ? d->site : d->metrics;
    size_t *n = site ? &d->nsite : &d->nmetrics;

    if (*n == METRICS_MAX)
        return 1;
    if (site != (!strncmp(name, "val.", 4) || !strncmp(name, "site.", 5)))
        return 0; /* the other list's */
    *(site ? &d->site_round : &d->metrics_round) = round;
    snprintf(m[*n].name, sizeof m[*n].name, "%s", name);
    m[(*n)++].value = value;
    return 0;
}

static int keep_metric(void *ctx, uint64_t round, const char *name, double value)
{
    return keep_figure(ctx, 0, round, name, value);
}

static int keep_site_metric(void *ctx, uint64_t round, const char *name, double value)
{
    return keep_figure(ctx, 1, round, name, value);
}

/* The newest site evaluation's figures, when a round has any. */
static fed_err load_site_metrics(fed_store *st, status_data *d)
{
    uint64_t round = 0;
    fed_err e = fed_store_metric_last(st, "val.samples", &round);

    if (e == FED_ERR_NOTFOUND)
        return FED_OK;
    return e == FED_OK ? fed_store_each_metric(st, round, keep_site_metric, d) : e;
}

static int keep_try(void *ctx, const fed_store_secagg_try *t)
{
    status_data *d = ctx;

    if (d->ntries == LIST_MAX)
        return 1;
    d->tries[d->ntries++] = *t;
    return 0;
}

static fed_err status_load(fed_store *st, const status_cfg *c, status_data *d)
{
    fed_err e;

    memset(d, 0, sizeof *d);
    d->rounds = fed_calloc((size_t)c->rounds, sizeof *d->rounds);
    d->ckpts = fed_calloc((size_t)c->checkpoints, sizeof *d->ckpts);
    d->peers = fed_calloc(LIST_MAX, sizeof *d->peers);
    d->counters = fed_calloc(LIST_MAX, sizeof *d->counters);
    d->contribs = fed_calloc(LIST_MAX, sizeof *d->contribs);
    d->tries = fed_calloc(LIST_MAX, sizeof *d->tries);
    d->budgets = fed_calloc(LIST_MAX, sizeof *d->budgets);
    d->metrics = fed_calloc(METRICS_MAX, sizeof *d->metrics);
    d->site = fed_calloc(METRICS_MAX, sizeof *d->site);
    if (!d->rounds || !d->ckpts || !d->peers || !d->counters || !d->contribs || !d->tries ||
        !d->budgets || !d->metrics || !d->site)
        return FED_ERR_NOMEM;
    if ((e = fed_store_last_rounds(st, d->rounds, (size_t)c->rounds, &d->nrounds)) != FED_OK ||
        (e = fed_store_list_checkpoints(st, d->ckpts, (size_t)c->checkpoints, &d->nckpts)) !=
            FED_OK ||
        (e = fed_store_list_peers(st, d->peers, LIST_MAX, &d->npeers)) != FED_OK)
        return e;
    /* the contributions of the rounds shown (and of any later attempt),
       read from the index, not the whole table */
    d->from_round = d->nrounds ? d->rounds[d->nrounds - 1].round : 0;
    if ((e = fed_store_each_contribution(st, d->from_round, keep_contrib, d)) != FED_OK ||
        (e = fed_store_each_dp_charge(st, keep_dp_charge, d)) != FED_OK ||
        (e = fed_store_each_secagg_try(st, d->from_round, keep_try, d)) != FED_OK ||
        (e = fed_store_each_metric(st, UINT64_MAX, keep_metric, d)) != FED_OK ||
        (e = load_site_metrics(st, d)) != FED_OK)
        return e;
    return fed_store_list_counters(st, d->counters, LIST_MAX, &d->ncounters);
}

static void print_rounds_table(const status_data *d)
{
    printf("\nrounds (last %zu, newest first)\n", d->nrounds);
    if (!d->nrounds) {
        printf("  none\n");
        return;
    }
    printf("  %7s  %-19s  %8s  %8s  %7s  %10s  %10s  %10s  %5s  %9s  %-10s  %s\n", "round",
           "ended (UTC)", "secs", "loss", "acc", "samples", "bytes in", "bytes out", "peers",
           "lr", "strategy", "epsilon");
    for (size_t i = 0; i < d->nrounds; i++) {
        const fed_store_round *r = &d->rounds[i];
        char when[32], loss[24], acc[24], in[24], out[24], lr[24], eps[24];
        double secs = r->end_ms >= r->start_ms ? (double)(r->end_ms - r->start_ms) / 1000 : 0;

        fmt_time_ms(when, sizeof when, r->end_ms);
        fmt_real(loss, sizeof loss, r->loss, 4, "");
        fmt_real(acc, sizeof acc, 100 * r->accuracy, 2, "%");
        fmt_real(eps, sizeof eps, r->epsilon > 0 ? r->epsilon : NAN, 4, "");
        fmt_bytes(in, sizeof in, r->bytes_in);
        fmt_bytes(out, sizeof out, r->bytes_out);
        if (r->lr > 0)
            snprintf(lr, sizeof lr, "%.4g", r->lr);
        else
            snprintf(lr, sizeof lr, "-"); /* none recorded: mixing only, or an older node */
        printf("  %7" PRIu64 "  %-19s  %8.2f  %8s  %7s  %10" PRIu64 "  %10s  %10s  %5" PRIu32
               "  %9s  %-10s  %s\n",
               r->round, when, secs, loss, acc, r->samples, in, out, r->peers, lr, r->strategy,
               eps);
    }
}

/* The newest evaluated round's figures: the scalars, then recall by class,
 * then the confusion matrix (row: true class). */
static void print_metrics(const status_data *d)
{
    int col = 0, k = 0;

    if (!d->nmetrics)
        return;
    printf("\nmetrics (round %" PRIu64 ", the aggregator's evaluation)\n ", d->metrics_round);
    for (size_t i = 0; i < d->nmetrics; i++) {
        const status_metric *m = &d->metrics[i];

        if (strchr(m->name, '.'))
            continue;
        printf("%s %s %.4f", col && col % 4 == 0 ? "\n " : "", m->name, m->value);
        col++;
    }
    printf("\n");
    for (size_t i = 0; i < d->nmetrics; i++)
        if (!strncmp(d->metrics[i].name, "recall.", 7))
            printf("%s %s:%.4f", k++ ? "" : "  recall by class:", d->metrics[i].name + 7,
                   d->metrics[i].value);
    if (k)
        printf("\n");
    for (size_t i = 0, row = (size_t)-1; i < d->nmetrics; i++) {
        const status_metric *m = &d->metrics[i];
        unsigned t, p;

        if (sscanf(m->name, "confusion.%u.%u", &t, &p) != 2)
            continue;
        if (t != row)
            printf("%s  confusion row %u:", row == (size_t)-1 ? "" : "\n", t);
        row = t;
        printf(" %.0f", m->value);
        if (i + 1 == d->nmetrics || strncmp(d->metrics[i + 1].name, "confusion.", 10))
            printf("\n");
    }
}

/* The newest site evaluation: the pooled scalars (with the AUC's bound),
 * then a line a site whose own figures were recorded. */
static void print_site_metrics(const status_data *d)
{
    const char *site = NULL;
    size_t slen = 0;
    int col = 0;

    if (!d->nsite)
        return;
    printf("\nsite evaluation (round %" PRIu64 "'s model, pooled over the sites' validation "
           "splits)\n ", d->site_round);
    for (size_t i = 0; i < d->nsite; i++) {
        const char *name = d->site[i].name;

        if (strncmp(name, "val.", 4) || strchr(name + 4, '.'))
            continue;
        printf("%s %s %.4f", col && col % 4 == 0 ? "\n " : "", name + 4, d->site[i].value);
        col++;
    }
    printf("\n");
    for (size_t i = 0; i < d->nsite; i++) { /* site.MEMBER.NAME: the scalars */
        const char *name = d->site[i].name, *dot;

        if (strncmp(name, "site.", 5) || !(dot = strrchr(name + 5, '.')) ||
            strstr(name, ".recall.") || strstr(name, ".confusion."))
            continue;
        if (!site || (size_t)(dot - name - 5) != slen || strncmp(site, name + 5, slen)) {
            site = name + 5;
            slen = (size_t)(dot - site);
            printf("%s  site %.*s:", i ? "\n" : "", (int)slen, site);
        }
        if (!strcmp(dot + 1, "samples") || !strcmp(dot + 1, "auc") ||
            !strcmp(dot + 1, "accuracy") || !strcmp(dot + 1, "sensitivity") ||
            !strcmp(dot + 1, "specificity") || !strcmp(dot + 1, "macro_f1"))
            printf(" %s %.4g", dot + 1, d->site[i].value);
    }
    if (site)
        printf("\n");
}

/* Whether the charges are an aggregator's DP-FedAvg (its rounds' strategy
 * says dp+...), not a site's DP-SGD. */
static int client_level(const status_data *d)
{
    return d->nrounds && !strncmp(d->rounds[0].strategy, "dp+", 3);
}

/* DP-SGD at this site, or DP-FedAvg at this aggregator: what its
 * accountant holds. */
static void print_privacy(const status_data *d)
{
    const fed_store_dp_charge *l = &d->dp_last;

    if (!d->dp_charges)
        return;
    if (client_level(d)) {
        printf("\nprivacy (client-level DP-FedAvg by this aggregator, RDP accountant; the "
               "aggregator adds the noise, so it is trusted: epsilon holds against everyone who "
               "sees the models it releases)\n");
        printf("  epsilon %.4f at delta %g spent in %" PRIu64 " rounds; the last: round %" PRIu64
               ", clients sampled at q %.4g, noise multiplier %g\n",
               l->epsilon, l->delta, d->dp_charges, l->round, l->q, l->sigma);
        if (d->ntries)
            printf("  with secure aggregation: each client clips its own delta and the "
                   "aggregator adds the noise after unmasking, so the same holds; a draw below "
                   "a secure round's floor (3 clients) voids the round, which the accounting "
                   "leaves out: the aggregator refuses to run where that chance exceeds delta / "
                   "10 a round\n");
        return;
    }
    printf("\nprivacy (DP-SGD at this site, RDP accountant)\n");
    printf("  epsilon %.4f at delta %g spent in %" PRIu64 " releases; the last: round %" PRIu64
           ", %" PRIu64 " steps at q %.4g, noise multiplier %g\n",
           l->epsilon, l->delta, d->dp_charges, l->round, l->steps, l->q, l->sigma);
}

/* Secure aggregation's tries: how many clients reached each stage. */
static void print_secagg(const status_data *d)
{
    if (!d->ntries)
        return;
    printf("\nsecure aggregation (tries of rounds %" PRIu64 " on; each client's fate is in "
           "contributions)\n", d->from_round);
    printf("  %7s  %3s  %7s  %5s  %4s  %4s  %6s  %6s  %6s  %8s  %s\n", "round", "try", "sampled",
           "keyed", "k", "t", "shared", "masked", "signed", "unmasked", "outcome");
    for (size_t i = 0; i < d->ntries; i++) {
        const fed_store_secagg_try *t = &d->tries[i];

        printf("  %7" PRIu64 "  %3" PRIu32 "  %7" PRIu32 "  %5" PRIu32 "  %4" PRIu32 "  %4" PRIu32
               "  %6" PRIu32 "  %6" PRIu32 "  %6" PRIu32 "  %8" PRIu32 "  %s\n",
               t->round, t->try_no, t->sampled, t->keyed, t->k, t->t, t->shared, t->masked,
               t->signed_, t->unmasked, t->outcome[0] ? t->outcome : "committed");
    }
}

static void print_contribs_table(const status_data *d)
{
    printf("\ncontributions (rounds %" PRIu64 " on, oldest first)\n", d->from_round);
    if (!d->ncontribs) {
        printf("  none\n");
        return;
    }
    printf("  %7s  %-16s  %-8s  %s\n", "round", "key", "merged", "reason");
    for (size_t i = 0; i < d->ncontribs; i++) {
        const status_contrib *r = &d->contribs[i];
        char k[65];

        hex(k, r->key, 8);
        printf("  %7" PRIu64 "  %-16s  %-8s  %s\n", r->round, k, r->accepted ? "yes" : "no",
               r->reason);
    }
    if (d->contribs_left_out)
        printf("  (%zu more not shown)\n", d->contribs_left_out);
}

/* Aggregator: each client's privacy budget as its latest DELTA or LEAVE
 * reported it. */
static void print_budgets_table(const status_data *d)
{
    if (!d->nbudgets)
        return;
    printf("\nclients' privacy budgets (as each last reported it, rounds %" PRIu64 " on)\n",
           d->from_round);
    printf("  %-16s  %7s  %10s  %10s\n", "key", "round", "epsilon", "budget");
    for (size_t i = 0; i < d->nbudgets; i++) {
        const status_budget *b = &d->budgets[i];
        char k[65];

        hex(k, b->key, 8);
        printf("  %-16s  %7" PRIu64 "  %10.4f  ", k, b->round, b->epsilon);
        if (b->budget > 0)
            printf("%10.4g%s\n", b->budget, b->epsilon >= 0.9 * b->budget ? "  (90% spent)" : "");
        else
            printf("%10s\n", "none");
    }
}

static void print_ckpts_table(const status_data *d)
{
    printf("\ncheckpoints (last %zu, newest first; the hash chain is kept, pruned blobs are"
           " not)\n", d->nckpts);
    if (!d->nckpts) {
        printf("  none\n");
        return;
    }
    printf("  %6s  %7s  %-19s  %10s  %6s  %-16s  %-16s  %s\n", "id", "round", "written (UTC)",
           "size", "chunks", "hash", "previous", "blob");
    for (size_t i = 0; i < d->nckpts; i++) {
        const fed_store_ckpt_row *r = &d->ckpts[i];
        char when[32], size[24], h[65], p[65];

        fmt_time_ms(when, sizeof when, r->created_s * 1000);
        fmt_bytes(size, sizeof size, r->size);
        hex(h, r->hash, 8);
        hex(p, r->prev_hash, 8);
        printf("  %6" PRIu64 "  %7" PRIu64 "  %-19s  %10s  %6" PRIu64 "  %-16s  %-16s  %s\n",
               r->id, r->round, when, size, r->chunks, h, p, r->pruned ? "pruned" : "stored");
    }
}

static void print_peers_table(const status_data *d)
{
    printf("\npeers (%zu, most recently seen first)\n", d->npeers);
    if (!d->npeers) {
        printf("  none\n");
        return;
    }
    printf("  %-16s  %-28s  %-19s  %10s  %12s\n", "key", "address", "last seen (UTC)",
           "last round", "epoch");
    for (size_t i = 0; i < d->npeers; i++) {
        const fed_store_peer *p = &d->peers[i];
        char k[65], when[32];

        hex(k, p->key, 8);
        fmt_time_ms(when, sizeof when, p->last_seen_ms);
        printf("  %-16s  %-28s  %-19s  %10" PRIu64 "  %12" PRIu64 "\n", k, p->addr, when,
               p->last_round, p->epoch);
    }
}

static void print_counters_table(const status_data *d)
{
    size_t w = 4;

    printf("\ncounters (%zu)\n", d->ncounters);
    if (!d->ncounters) {
        printf("  none\n");
        return;
    }
    for (size_t i = 0; i < d->ncounters; i++)
        if (strlen(d->counters[i].name) > w)
            w = strlen(d->counters[i].name);
    printf("  %-*s  %12s\n", (int)w, "name", "value");
    for (size_t i = 0; i < d->ncounters; i++)
        printf("  %-*s  %12" PRIu64 "\n", (int)w, d->counters[i].name, d->counters[i].value);
}

/* ,"key":{"round":R,"name":value,...} when there are figures. */
static void json_metrics(FILE *f, const char *key, uint64_t round, const status_metric *m,
                         size_t n)
{
    if (!n)
        return;
    fprintf(f, ",\"%s\":{\"round\":%" PRIu64, key, round);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, ",");
        json_str(f, m[i].name);
        fprintf(f, ":");
        json_real(f, m[i].value);
    }
    fprintf(f, "}");
}

static void print_status_json(FILE *f, const char *db, fed_store *st, const status_data *d)
{
    char h[65], p[65];

    fprintf(f, "{\"db\":");
    if (db)
        json_str(f, db);
    else
        fputs("null", f);
    fprintf(f, ",\"schema\":%d,\"epoch\":%" PRIu64 ",\"rounds\":[", fed_store_schema(st),
           fed_store_epoch(st));
    for (size_t i = 0; i < d->nrounds; i++) {
        const fed_store_round *r = &d->rounds[i];

        hex(h, r->model_hash, 32);
        fprintf(f, "%s{\"round\":%" PRIu64 ",\"start_ms\":%" PRIu64 ",\"end_ms\":%" PRIu64
               ",\"loss\":", i ? "," : "", r->round, r->start_ms, r->end_ms);
        json_real(f, r->loss);
        fprintf(f, ",\"accuracy\":");
        json_real(f, r->accuracy);
        fprintf(f, ",\"samples\":%" PRIu64 ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64
               ",\"peers\":%" PRIu32 ",\"strategy\":", r->samples, r->bytes_in, r->bytes_out,
               r->peers);
        json_str(f, r->strategy);
        fprintf(f, ",\"lr\":");
        json_real(f, r->lr > 0 ? r->lr : NAN);
        fprintf(f, ",\"epsilon\":");
        json_real(f, r->epsilon > 0 ? r->epsilon : NAN);
        fprintf(f, ",\"model_hash\":\"%s\"}", h);
    }
    if (d->dp_charges) {
        fprintf(f, "],\"privacy\":{\"releases\":%" PRIu64 ",\"epsilon\":", d->dp_charges);
        json_real(f, d->dp_last.epsilon);
        fprintf(f, ",\"delta\":");
        json_real(f, d->dp_last.delta);
        fprintf(f, ",\"level\":\"%s\"}", client_level(d) ? "client" : "site");
    } else {
        fprintf(f, "]");
    }
    json_metrics(f, "metrics", d->metrics_round, d->metrics, d->nmetrics);
    json_metrics(f, "site_metrics", d->site_round, d->site, d->nsite);
    /* what the rounds shown used: secure tries; DP charges or clients'
       reports (the database keeps no run settings) */
    fprintf(f, ",\"secure_aggregation\":%s,\"dp\":%s", d->ntries ? "true" : "false",
            d->dp_charges || d->nbudgets ? "true" : "false");
    fprintf(f, ",\"secagg\":[");
    for (size_t i = 0; i < d->ntries; i++) {
        const fed_store_secagg_try *t = &d->tries[i];

        fprintf(f, "%s{\"round\":%" PRIu64 ",\"try\":%" PRIu32 ",\"sampled\":%" PRIu32
               ",\"keyed\":%" PRIu32 ",\"k\":%" PRIu32 ",\"t\":%" PRIu32 ",\"shared\":%" PRIu32
               ",\"masked\":%" PRIu32 ",\"signed\":%" PRIu32 ",\"unmasked\":%" PRIu32
               ",\"outcome\":", i ? "," : "", t->round, t->try_no, t->sampled, t->keyed, t->k,
               t->t, t->shared, t->masked, t->signed_, t->unmasked);
        json_str(f, t->outcome);
        fprintf(f, "}");
    }
    fprintf(f, "]");
    fprintf(f, ",\"contributions\":[");
    for (size_t i = 0; i < d->ncontribs; i++) {
        const status_contrib *c = &d->contribs[i];

        hex(h, c->key, 32);
        fprintf(f, "%s{\"round\":%" PRIu64 ",\"key\":\"%s\",\"accepted\":%s,\"reason\":",
               i ? "," : "", c->round, h, c->accepted ? "true" : "false");
        json_str(f, c->reason);
        if (c->dp_epsilon != 0 || c->dp_budget != 0) {
            fprintf(f, ",\"dp_epsilon\":");
            json_real(f, c->dp_epsilon);
            fprintf(f, ",\"dp_budget\":");
            json_real(f, c->dp_budget);
        }
        fprintf(f, "}");
    }
    fprintf(f, "],\"contributions_left_out\":%zu,\"client_budgets\":[", d->contribs_left_out);
    for (size_t i = 0; i < d->nbudgets; i++) {
        const status_budget *b = &d->budgets[i];

        hex(h, b->key, 32);
        fprintf(f, "%s{\"key\":\"%s\",\"round\":%" PRIu64 ",\"epsilon\":", i ? "," : "", h,
                b->round);
        json_real(f, b->epsilon);
        fprintf(f, ",\"budget\":");
        json_real(f, b->budget);
        fprintf(f, "}");
    }
    fprintf(f, "],\"checkpoints\":[");
    for (size_t i = 0; i < d->nckpts; i++) {
        const fed_store_ckpt_row *r = &d->ckpts[i];

        hex(h, r->hash, 32);
        hex(p, r->prev_hash, 32);
        fprintf(f, "%s{\"id\":%" PRIu64 ",\"round\":%" PRIu64 ",\"created_s\":%" PRIu64
               ",\"size\":%" PRIu64 ",\"chunks\":%" PRIu64 ",\"epoch\":%" PRIu64
               ",\"hash\":\"%s\",\"prev_hash\":\"%s\",\"pruned\":%s}",
               i ? "," : "", r->id, r->round, r->created_s, r->size, r->chunks, r->epoch, h, p,
               r->pruned ? "true" : "false");
    }
    fprintf(f, "],\"peers\":[");
    for (size_t i = 0; i < d->npeers; i++) {
        const fed_store_peer *q = &d->peers[i];

        hex(h, q->key, 32);
        fprintf(f, "%s{\"key\":\"%s\",\"addr\":", i ? "," : "", h);
        json_str(f, q->addr);
        fprintf(f, ",\"first_seen_ms\":%" PRIu64 ",\"last_seen_ms\":%" PRIu64 ",\"last_round\":%"
               PRIu64 ",\"epoch\":%" PRIu64 "}", q->first_seen_ms, q->last_seen_ms,
               q->last_round, q->epoch);
    }
    fprintf(f, "],\"counters\":{");
    for (size_t i = 0; i < d->ncounters; i++) {
        fprintf(f, "%s", i ? "," : "");
        json_str(f, d->counters[i].name);
        fprintf(f, ":%" PRIu64, d->counters[i].value);
    }
    fprintf(f, "}}\n");
}

/* GET /status.json of `fednode run --http` (app/http.c): the document above. */
fed_err fed_cli_status_json(FILE *f, const char *db, fed_store *st, int rounds, int checkpoints)
{
    status_cfg c;
    status_data d;
    fed_err e;

    memset(&c, 0, sizeof c);
    c.rounds = rounds;
    c.checkpoints = checkpoints;
    if ((e = status_load(st, &c, &d)) == FED_OK)
        print_status_json(f, db, st, &d);
    status_data_free(&d);
    return e;
}

/* The tables (or the JSON) of c->db once: 0, or 1 when it could not be read. */
static int status_once(const status_cfg *c)
{
    status_data d;
    fed_store *st = NULL;
    int rc;
    fed_err e;

    if ((rc = open_db("status", c->db, FED_STORE_READONLY, &st)) >= 0)
        return rc;
    if ((e = status_load(st, c, &d)) != FED_OK) {
        fed_cli_error("status: reading %s: %s", c->db, fed_strerror(e));
        rc = 1;
        goto out;
    }
    if (c->json) {
        print_status_json(stdout, c->db, st, &d);
    } else {
        printf("database %s: schema %d, epoch %" PRIu64 ", page size %d\n", c->db,
               fed_store_schema(st), fed_store_epoch(st), fed_store_page_size(st));
        print_rounds_table(&d);
        print_metrics(&d);
        print_site_metrics(&d);
        print_privacy(&d);
        print_secagg(&d);
        print_contribs_table(&d);
        print_budgets_table(&d);
        print_ckpts_table(&d);
        print_peers_table(&d);
        print_counters_table(&d);
    }
    rc = 0;
out:
    status_data_free(&d);
    fed_store_close(st);
    return rc;
}

static volatile sig_atomic_t watch_stop;

static void on_watch_stop(int sig)
{
    (void)sig;
    watch_stop = 1;
}

/* --watch: the tables again every interval until SIGINT or SIGTERM. On a
 * terminal each frame goes in one write that homes the cursor and clears
 * the screen first, so it redraws in place; elsewhere (a pipe, a file)
 * frames follow one another, and with --json each is one line. A database
 * not there yet, or one that cannot be read for a moment, is said in the
 * frame and tried again. */
static int status_watch(const status_cfg *c)
{
    struct sigaction sa;
    int tty = isatty(STDOUT_FILENO), frames = 0;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_watch_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    setvbuf(stdout, NULL, _IOFBF, 1 << 20); /* a frame is one write */
    while (!watch_stop) {
        double whole;
        struct timespec ts = {0, 0};
        char when[32];

        if (!c->json) {
            fmt_time_ms(when, sizeof when, (uint64_t)time(NULL) * 1000);
            printf("%s%severy %.1f s, %s UTC (Ctrl-C to stop)\n", tty ? "\033[H\033[2J" : "",
                   frames && !tty ? "\n" : "", c->interval, when);
        }
        if (access(c->db, F_OK) != 0 && c->json) {
            printf("{\"db\":");
            json_str(stdout, c->db);
            printf(",\"waiting\":true}\n");
        } else if (access(c->db, F_OK) != 0) {
            printf("waiting for %s to appear\n", c->db);
        } else
            (void)status_once(c); /* a failed read is said on stderr; next frame tries again */
        fflush(stdout);
        frames++;
        ts.tv_nsec = (long)(modf(c->interval, &whole) * 1e9);
        ts.tv_sec = (time_t)whole;
        while (!watch_stop && nanosleep(&ts, &ts) != 0) {
        }
    }
    if (tty && !c->json)
        fputs("\n", stdout);
    fflush(stdout);
    return 0;
}

int fed_cli_status(int argc, char **argv)
{
    status_cfg c;
    int rc = fed_cli_load_options("status", "--db FILE [--json] [--watch [--interval S]]",
                                  status_opts, sizeof status_opts / sizeof status_opts[0], &c,
                                  argc, argv);

    if (rc >= 0)
        return rc;
    if (c.watch) {
        if (!c.db[0]) {
            fed_cli_error("status: --db FILE is required");
            return 2;
        }
        return status_watch(&c);
    }
    return status_once(&c);
}

/* ------------------------------------------------ model <-> checkpoint -- */

/* The model a checkpoint describes, built on the CPU with its parameters. */
static fed_err model_from_ckpt(const fed_store_ckpt *c, fed_backend *be, fed_model **out)
{
    fed_node_model_view v;
    fed_model *m = NULL;
    float *p = NULL;
    fed_err e;

    *out = NULL;
    if ((e = fed_node_model_sec_decode(c, &v)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "checkpoint %" PRIu64 " has no model (sections %s, %s, %s): %s",
                c->id, FED_CKPT_SEC_SPEC, FED_CKPT_SEC_INPUT, FED_CKPT_SEC_PARAMS,
                fed_strerror(e));
        return FED_ERR_NOTFOUND;
    }
    {
        char *whole = NULL; /* a graph the checkpoint carries whole */

        if ((e = fed_node_model_view_whole(&v, &whole)) == FED_OK)
            e = fed_model_new(whole, v.shape, be, NULL, 1, 1, &m);
        fed_free(whole);
        if (e != FED_OK)
            return e;
    }
    if (v.nparams != fed_model_nparams(m)) {
        e = FED_ERR_SHAPE;
        goto out;
    }
    if (!(p = fed_malloc(v.nparams ? v.nparams * sizeof *p : 1))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    fed_get_f32le_n(p, v.params, v.nparams);
    e = fed_model_set_params(m, p);
out:
    fed_free(p);
    if (e != FED_OK)
        fed_model_free(m);
    else
        *out = m;
    return e;
}

/* ------------------------------------------------------------- export -- */

typedef struct export_cfg {
    char db[PATH_MAX_CLI];
    char round[24];
    int best;
    char metric[FED_METRICS_NAME_MAX];
    char format[16];
    char out[PATH_MAX_CLI];
    int personal;
} export_cfg;

#define X(field, name, type, def, min, max, help)                              \
    FED_OPT_DEF(export_cfg, field, name, type, def, min, max, help)
static const fed_opt export_opts[] = {
    X(db, "db", FED_OPT_STR, "", 0, 0, "the node's database"),
    X(round, "round", FED_OPT_STR, "", 0, 0,
      "export the newest valid checkpoint of this round, 0 to 2147483647 (default: the "
      "newest valid one)"),
    X(best, "best", FED_OPT_BOOL, "false", 0, 0,
      "export the best round's model: the best by --metric among the rounds evaluated"),
    X(metric, "metric", FED_OPT_STR, "", 0, 0,
      "with --best: the figure that ranks the rounds (default: the aggregator's --best-metric, "
      "else accuracy)"),
    X(format, "format", FED_OPT_STR, "safetensors", 0, 0,
      "safetensors (the weights, for PyTorch's load_state_dict) or onnx (the inference graph "
      "with its weights, opset 14: logits out, dropout removed)"),
    X(out, "out", FED_OPT_STR, "", 0, 0, "the .safetensors (or .onnx) file to write"),
    X(personal, "personal", FED_OPT_BOOL, "false", 0, 0,
      "a client's database under Ditto (--ditto-lambda): export its personal model"),
};
#undef X

/* The largest --round export and import take: far past any database's
 * (a run's --rounds is at most 1,000,000), so a larger one is a typo. */
#define ROUND_ARG_MAX 2147483647ull

/* --round's text s as a round number into *r; 0 with the refusal printed,
 * naming cmd and the flag. */
static int parse_round(const char *cmd, const char *s, uint64_t *r)
{
    char *end = NULL;

    errno = 0;
    if (*s >= '0' && *s <= '9') {
        *r = strtoull(s, &end, 10);
        if (*end == '\0' && !errno && *r <= ROUND_ARG_MAX)
            return 1;
    }
    fed_cli_error("%s: --round '%s' is not a round number (0 to %llu)", cmd, s, ROUND_ARG_MAX);
    return 0;
}

/* Why round has no checkpoint to export, and the rounds that have one. */
static void explain_missing_round(fed_store *st, uint64_t round)
{
    enum { ROWS = 4096, SHOWN = 64 };
    fed_store_ckpt_row *rows = fed_calloc(ROWS, sizeof *rows);
    size_t n = 0, kept = 0;
    uint64_t last = 0;
    int pruned = 0;
    char list[SHOWN * 22 + 32] = "";
    size_t len = 0;

    if (!rows || fed_store_list_checkpoints(st, rows, ROWS, &n) != FED_OK) {
        fed_free(rows);
        return;
    }
    for (size_t i = n; i-- > 0;) { /* oldest first */
        if (rows[i].round == round && rows[i].pruned)
            pruned = 1;
        if (rows[i].pruned || (kept && rows[i].round == last))
            continue; /* a round's once */
        last = rows[i].round;
        if (kept++ < SHOWN)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%" PRIu64, kept > 1 ? ", " : "",
                                    rows[i].round);
    }
    if (kept > SHOWN)
        snprintf(list + len, sizeof list - len, ", ... (%zu in all)", kept);
    fed_cli_error("export: round %" PRIu64 "%s; the rounds whose checkpoint is kept: %s", round,
                  pruned ? "'s checkpoint is no longer kept (removed by retention: "
                           "--keep-checkpoints, the best round's always kept)"
                         : " has no checkpoint",
                  kept ? list : "none");
    fed_free(rows);
}

/* --best: the round ranked first by c->metric (or the database's best_metric,
 * else accuracy) into *round; 0, or the exit status. */
static int best_round(const export_cfg *c, fed_store *st, uint64_t *round)
{
    char metric[FED_METRICS_NAME_MAX] = "accuracy";
    int higher;
    double v;
    fed_err e;

    if (c->metric[0])
        snprintf(metric, sizeof metric, "%s", c->metric);
    else if (fed_store_meta_text(st, "best_metric", metric, sizeof metric) != FED_OK)
        snprintf(metric, sizeof metric, "accuracy");
    if ((higher = fed_metrics_higher_better(metric)) < 0) {
        fed_cli_error("export: --metric '%s' is no metric a round records (accuracy, loss, auc, "
                      "ap, f1, sensitivity, specificity, macro_f1, ...)", metric);
        return 2;
    }
    if ((e = fed_store_best_metric(st, metric, higher, round, &v)) != FED_OK) {
        fed_cli_error("export: --best: no round in %s has %s recorded%s", c->db, metric,
                      e == FED_ERR_NOTFOUND ? " (an aggregator with test data records them)" : "");
        return 1;
    }
    printf("best round by %s (%s is better): %" PRIu64 " (%.4f)\n", metric,
           higher ? "higher" : "lower", *round, v);
    return 0;
}

static void print_faults(const char *cmd, const fed_store_faults *f)
{
    for (size_t i = 0; i < f->n; i++)
        fed_cli_error("%s: checkpoint %" PRIu64 " (round %" PRIu64 ") skipped: %s", cmd,
                      f->v[i].id, f->v[i].round, f->v[i].what);
    if (f->total > f->n)
        fed_cli_error("%s: ... and %zu more faulty checkpoints", cmd, f->total - f->n);
}

/* The checkpoint's shared statistics (node/agg_stats.c: per column, or
 * per channel of images, mean, std, missing rate, count), when it has
 * them, as m's stats_mean,
 * stats_std and stats_missing (one block, freed through stats_mean). */
static fed_err ckpt_stats(const fed_store_ckpt *ck, size_t features, fed_store_st_model *m)
{
    const fed_store_section *sec = fed_store_ckpt_find(ck, FED_CKPT_SEC_STATS);
    double *v;
    size_t cols;

    if (!sec)
        return FED_OK;
    cols = sec->len / 32;
    if (sec->len % 32 || cols != features)
        return FED_ERR_FORMAT;
    if (!(v = fed_malloc(3 * cols * sizeof *v)))
        return FED_ERR_NOMEM;
    for (size_t j = 0; j < cols; j++) {
        v[j] = fed_get_f64le((const uint8_t *)sec->data + 32 * j);
        v[cols + j] = fed_get_f64le((const uint8_t *)sec->data + 32 * j + 8);
        v[2 * cols + j] = fed_get_f64le((const uint8_t *)sec->data + 32 * j + 16);
    }
    m->stats_mean = v;
    m->stats_std = v + cols;
    m->stats_missing = v + 2 * cols;
    m->stats_cols = cols;
    return FED_OK;
}

/* A client's checkpoint read as its personal model's (Ditto): the
 * personal section's floats (after their count, which must match) as the
 * params section; FED_ERR_NOTFOUND without one, FED_ERR_FORMAT when
 * malformed. */
static fed_err personal_view(fed_store_ckpt *ck)
{
    const fed_store_section *v = fed_store_ckpt_find(ck, FED_CKPT_SEC_PERSONAL);

    if (!v || fed_store_ckpt_find(ck, FED_CKPT_SEC_PARAMS))
        return FED_ERR_NOTFOUND;
    if (v->len <= 8 || (v->len - 8) % sizeof(float) ||
        fed_get_u64le(v->data) != (v->len - 8) / sizeof(float))
        return FED_ERR_FORMAT;
    if (ck->nsections == FED_CKPT_MAX_SECTIONS)
        return FED_ERR_FORMAT;
    ck->sections[ck->nsections++] = (fed_store_section){FED_CKPT_SEC_PARAMS,
                                                        (const uint8_t *)v->data + 8, v->len - 8};
    return FED_OK;
}

int fed_cli_export(int argc, char **argv)
{
    export_cfg c;
    fed_store *st = NULL;
    fed_store_ckpt ck;
    fed_store_faults faults;
    fed_backend *be = NULL;
    fed_model *m = NULL;
    float *p = NULL;
    uint64_t round = 0;
    int rc = fed_cli_load_options("export", "--db FILE [--round N | --best [--metric M]] [--format onnx] --out model.safetensors",
                           export_opts, sizeof export_opts / sizeof export_opts[0], &c, argc,
                           argv);
    fed_err e;

    memset(&ck, 0, sizeof ck);
    memset(&faults, 0, sizeof faults);
    if (rc >= 0)
        return rc;
    if (!c.out[0]) {
        fed_cli_error("export: --out FILE is required (the .safetensors or .onnx file to write)");
        return 2;
    }
    if (c.round[0] && !parse_round("export", c.round, &round))
        return 2;
    if (c.best && c.round[0]) {
        fed_cli_error("export: --best and --round both choose the round: give one of them");
        return 2;
    }
    if (c.metric[0] && !c.best) {
        fed_cli_error("export: --metric ranks the rounds for --best: add --best, or drop it");
        return 2;
    }
    if (strcmp(c.format, "safetensors") && strcmp(c.format, "onnx")) {
        fed_cli_error("export: --format '%s' is neither safetensors nor onnx", c.format);
        return 2;
    }
    if ((rc = open_db("export", c.db, FED_STORE_READONLY, &st)) >= 0)
        return rc;
    if (c.best && (rc = best_round(&c, st, &round)) != 0)
        goto out;
    rc = 1;
    e = c.round[0] || c.best ? fed_store_checkpoint_of_round(st, round, &ck, &faults)
                             : fed_store_latest_valid_checkpoint(st, &ck, &faults);
    print_faults("export", &faults);
    if (e == FED_ERR_NOTFOUND && (c.round[0] || c.best)) {
        explain_missing_round(st, round);
        goto out;
    }
    if (e != FED_OK) {
        fed_cli_error("export: no valid checkpoint%s%s in %s: %s", c.round[0] ? " of round " : "",
                      c.round, c.db, fed_strerror(e));
        goto out;
    }
    if (!c.personal && !fed_store_ckpt_find(&ck, FED_CKPT_SEC_PARAMS) &&
        fed_store_ckpt_find(&ck, FED_CKPT_SEC_PERSONAL)) {
        fed_cli_error("export: checkpoint %" PRIu64 " of %s holds a personal model only (a "
                      "client's under Ditto, --ditto-lambda): add --personal to export it",
                      ck.id, c.db);
        goto out;
    }
    if (c.personal && (e = personal_view(&ck)) != FED_OK) {
        fed_cli_error("export: --personal: checkpoint %" PRIu64 " of %s holds no personal model "
                      "(a client's database under --ditto-lambda has one): %s", ck.id, c.db,
                      fed_strerror(e));
        goto out;
    }
    if ((e = fed_backend_cpu_new(1, &be)) != FED_OK || (e = model_from_ckpt(&ck, be, &m)) != FED_OK) {
        fed_cli_error("export: checkpoint %" PRIu64 ": %s", ck.id, fed_strerror(e));
        goto out;
    }
    if (!(p = fed_malloc(fed_model_nparams(m) * sizeof *p)) ||
        (e = fed_model_get_params(m, p)) != FED_OK) {
        fed_cli_error("export: %s", p ? fed_strerror(e) : "out of memory");
        goto out;
    }
    {
        int nt = 0;
        const fed_tensor_info *t = fed_model_tensors(m, &nt);
        fed_model_shape in = fed_model_input(m);
        /* a CSV's samples are (1, 1, features); images have rows */
        fed_store_st_model sm = {fed_model_spec(m), in, t, nt, p,
                                 in.c == 1 && in.h == 1 ? FED_ST_INPUT_STANDARDIZED
                                                        : FED_ST_INPUT_PIXELS,
                                 NULL, NULL, 0, NULL};
        char why[512] = "";

        /* a CSV's a column, images' a channel */
        if ((e = ckpt_stats(&ck, sm.input_kind == FED_ST_INPUT_STANDARDIZED ? (size_t)in.w
                                                                            : (size_t)in.c,
                            &sm)) != FED_OK) {
            fed_cli_error("export: checkpoint %" PRIu64 ": its shared statistics: %s", ck.id,
                          fed_strerror(e));
            goto out;
        }
        if (!strcmp(c.format, "onnx"))
            e = fed_onnx_save(c.out, m, &sm, why, sizeof why);
        else
            e = fed_store_safetensors_save(c.out, &sm);
        fed_free((double *)sm.stats_mean); /* both in one block */
        if (e != FED_OK) {
            fed_cli_error("export: writing %s: %s", c.out, why[0] ? why : fed_strerror(e));
            goto out;
        }
        printf("exported round %" PRIu64 " (checkpoint %" PRIu64 ", %s, %zu parameters in %d"
               " tensors) to %s\n", ck.round, ck.id, fed_model_spec(m), fed_model_nparams(m),
               nt, c.out);
    }
    rc = 0;
out:
    fed_free(p);
    fed_model_free(m);
    fed_backend_free(be);
    fed_store_ckpt_fini(&ck);
    fed_store_close(st);
    return rc;
}

/* ------------------------------------------------------------- import -- */

typedef struct import_cfg {
    char in[PATH_MAX_CLI];
    char out[PATH_MAX_CLI];
    char db[PATH_MAX_CLI];
    char round[24];
    char model[FED_MODEL_SPEC_MAX];
    char input[64];
} import_cfg;

#define I(field, name, type, def, min, max, help)                              \
    FED_OPT_DEF(import_cfg, field, name, type, def, min, max, help)
static const fed_opt import_opts[] = {
    I(in, "in", FED_OPT_STR, "", 0, 0, "the .safetensors file to read"),
    I(out, "out", FED_OPT_STR, "", 0, 0, "write it as a model file (as fednode train --out)"),
    I(db, "db", FED_OPT_STR, "", 0, 0,
      "write it as a checkpoint into this database (a starting model for --resume)"),
    I(round, "round", FED_OPT_STR, "", 0, 0,
      "the checkpoint's round, 0 to 2147483647 (default: 0 in an empty database, else "
      "newest + 1)"),
    I(model, "model", FED_OPT_STR, "", 0, 0,
      "model spec, when the file's metadata has none (fednode.spec)"),
    I(input, "input", FED_OPT_STR, "", 0, 0,
      "C,H,W,CLASSES, when the file's metadata has none (fednode.input/classes)"),
};
#undef I

static int parse_input(const char *s, fed_model_shape *sh)
{
    int v[4], n = 0;

    return sscanf(s, "%d,%d,%d,%d%n", &v[0], &v[1], &v[2], &v[3], &n) == 4 && s[n] == '\0' &&
           v[0] > 0 && v[1] > 0 && v[2] > 0 && v[3] > 1 &&
           ((*sh = (fed_model_shape){v[0], v[1], v[2], v[3], 0}), 1);
}

/* The spec and shape to build: the file's, or the flags' when it has none;
 * both present and different is an error. */
static int import_target(const import_cfg *c, const fed_store_st_file *f, char *spec,
                         fed_model_shape *sh)
{
    fed_model_shape flag_shape;

    if (c->model[0] && f->spec[0] && strcmp(c->model, f->spec) != 0) {
        fed_cli_error("import: the file is for model '%s', not '%s'", f->spec, c->model);
        return 0;
    }
    snprintf(spec, FED_MODEL_SPEC_MAX, "%s", f->spec[0] ? f->spec : c->model);
    if (!spec[0]) {
        fed_cli_error("import: the file names no model spec: give --model SPEC");
        return 0;
    }
    if (c->input[0] && !parse_input(c->input, &flag_shape)) {
        fed_cli_error("import: --input takes C,H,W,CLASSES");
        return 0;
    }
    if (f->input.classes > 0) {
        if (c->input[0] && (flag_shape.c != f->input.c || flag_shape.h != f->input.h ||
                            flag_shape.w != f->input.w || flag_shape.classes != f->input.classes)) {
            fed_cli_error("import: --input differs from the file's metadata");
            return 0;
        }
        *sh = f->input;
    } else if (c->input[0]) {
        *sh = flag_shape;
    } else {
        fed_cli_error("import: the file names no input shape: give --input C,H,W,CLASSES");
        return 0;
    }
    return 1;
}

/* Writes m (and its spec and input shape) as a checkpoint into c->db, of
 * round *round (--round, parsed) or, without --round, the one after the
 * newest (0 in an empty database), set here. */
static fed_err import_to_db(const import_cfg *c, const fed_model *m, uint64_t *round,
                            uint64_t *id)
{
    fed_store_opts o;
    fed_store *st = NULL;
    fed_store_ckpt_row last;
    fed_node_model_sec ms;
    uint8_t *params = NULL;
    size_t n = 0, plen = 0;
    fed_err e;

    if ((e = fed_node_model_params_le(m, &params, &plen)) != FED_OK)
        return e;
    fed_store_opts_default(&o);
    o.flags = FED_STORE_NO_EPOCH; /* a tool, not the node starting */
    if ((e = fed_store_open(c->db, &o, &st)) != FED_OK)
        goto out;
    if ((e = fed_store_list_checkpoints(st, &last, 1, &n)) != FED_OK)
        goto out;
    if (!c->round[0])
        *round = n ? last.round + 1 : 0; /* else fed_cli_import's --round */
    fed_node_model_sec_encode(&ms, fed_model_graph(m), fed_model_input(m), params,
                              plen / sizeof(float));
    e = fed_store_checkpoint_write(st, *round, ms.s, FED_NODE_MODEL_SECTIONS, NULL);
    if (e == FED_OK)
        e = fed_store_list_checkpoints(st, &last, 1, &n);
    if (e == FED_OK)
        *id = last.id;
out:
    fed_store_close(st);
    fed_free(params);
    return e;
}

fed_err fed_cli_model_from_export(const char *path, fed_backend *be, fed_pool *pool, int shards,
                                  int batch, fed_store_st_file *f, fed_model **out)
{
    fed_model *m = NULL;
    float *p = NULL;
    const fed_tensor_info *t;
    int nt = 0;
    fed_err e;

    *out = NULL;
    memset(f, 0, sizeof *f);
    if ((e = fed_store_safetensors_read(path, f)) != FED_OK)
        return e;
    if (!f->spec[0] || f->input.classes <= 0)
        return FED_ERR_SPEC;
    if ((e = fed_model_new(f->spec, f->input, be, pool, shards, batch, &m)) != FED_OK)
        return e;
    t = fed_model_tensors(m, &nt);
    if (!(p = fed_malloc(fed_model_nparams(m) * sizeof *p)))
        e = FED_ERR_NOMEM;
    else if ((e = fed_store_safetensors_to_params(f, t, nt, f->spec, p)) == FED_OK)
        e = fed_model_set_params(m, p);
    fed_free(p);
    if (e != FED_OK) {
        fed_model_free(m);
        return e;
    }
    *out = m;
    return FED_OK;
}

int fed_cli_import(int argc, char **argv)
{
    import_cfg c;
    fed_store_st_file f;
    fed_backend *be = NULL;
    fed_model *m = NULL;
    float *p = NULL;
    char spec[FED_MODEL_SPEC_MAX];
    fed_model_shape sh;
    int nt = 0;
    const fed_tensor_info *t;
    uint64_t round = 0;
    int rc = fed_cli_load_options("import", "--in model.safetensors (--out model.bin | --db FILE)",
                           import_opts, sizeof import_opts / sizeof import_opts[0], &c, argc,
                           argv);
    fed_err e;

    memset(&f, 0, sizeof f);
    if (rc >= 0)
        return rc;
    if (!c.in[0] || (!c.out[0] && !c.db[0])) {
        fed_cli_error("import: --in FILE and one of --out FILE or --db FILE are required");
        return 2;
    }
    if (c.round[0] && !c.db[0]) {
        fed_cli_error("import: --round goes with --db");
        return 2;
    }
    if ((rc = fed_cli_refuse_onnx("import", "--in", c.in, "a .safetensors file (fednode export "
                                  "writes one)")) >= 0)
        return rc;
    if (c.round[0] && !parse_round("import", c.round, &round))
        return 2;
    rc = 1;
    if ((e = fed_store_safetensors_read(c.in, &f)) != FED_OK) {
        fed_cli_error("import: %s: %s%s", c.in, fed_strerror(e),
                      e == FED_ERR_TOO_LARGE ? " (its first 8 bytes, a .safetensors file's "
                                               "header length, say over 100 MiB: not a "
                                               ".safetensors file?)" : "");
        goto out;
    }
    if (!import_target(&c, &f, spec, &sh)) {
        rc = 2;
        goto out;
    }
    if ((e = fed_backend_cpu_new(1, &be)) != FED_OK ||
        (e = fed_model_new(spec, sh, be, NULL, 1, 1, &m)) != FED_OK) {
        fed_cli_error("import: model '%s': %s", spec, fed_strerror(e));
        goto out;
    }
    t = fed_model_tensors(m, &nt);
    if (!(p = fed_malloc(fed_model_nparams(m) * sizeof *p))) {
        fed_cli_error("import: out of memory");
        goto out;
    }
    if ((e = fed_store_safetensors_to_params(&f, t, nt, spec, p)) != FED_OK ||
        (e = fed_model_set_params(m, p)) != FED_OK) {
        fed_cli_error("import: %s does not fit model '%s': %s", c.in, spec, fed_strerror(e));
        goto out;
    }
    if (c.out[0]) {
        if ((e = fed_model_save(m, c.out)) != FED_OK) {
            fed_cli_error("import: writing %s: %s", c.out, fed_strerror(e));
            goto out;
        }
        printf("imported %s (%s, %zu parameters) to %s\n", c.in, spec, fed_model_nparams(m),
               c.out);
    }
    if (c.db[0]) {
        uint64_t id = 0;

        if ((e = import_to_db(&c, m, &round, &id)) != FED_OK) {
            fed_cli_error("import: writing a checkpoint into %s: %s", c.db, fed_strerror(e));
            goto out;
        }
        printf("imported %s (%s, %zu parameters) into %s as checkpoint %" PRIu64 " of round %"
               PRIu64 "\n", c.in, spec, fed_model_nparams(m), c.db, id, round);
    }
    rc = 0;
out:
    fed_free(p);
    fed_model_free(m);
    fed_backend_free(be);
    fed_store_safetensors_fini(&f);
    return rc;
}

/* ------------------------------------------------------------- verify -- */

typedef struct verify_cfg {
    char db[PATH_MAX_CLI];
} verify_cfg;

static const fed_opt verify_opts[] = {
    FED_OPT_DEF(verify_cfg, db, "db", FED_OPT_STR, "", 0, 0, "the database to check"),
};

typedef struct sig_tally {
    size_t ok, bad, unsigned_rows;
} sig_tally;

/* Ed25519 over the stored digest (BLAKE2b of header || payload) with the
 * stored sender key: the check an auditor can run without the payload. */
static int check_signature(void *ctx, const fed_store_contrib *k)
{
    sig_tally *t = ctx;
    char key[65];

    if (k->header_len == 0) { /* a client recorded missing: nothing was received */
        t->unsigned_rows++;
        return 0;
    }
    if (crypto_sign_verify_detached(k->signature, k->digest, sizeof k->digest, k->peer_key) ==
        0) {
        t->ok++;
        return 0;
    }
    t->bad++;
    hex(key, k->peer_key, 8);
    printf("  bad signature: round %" PRIu64 ", sender %s..., %s\n", k->round, key,
           k->accepted ? "accepted" : "rejected");
    return 0;
}

int fed_cli_verify(int argc, char **argv)
{
    verify_cfg c;
    fed_store *st = NULL;
    fed_store_faults faults;
    fed_store_ckpt_row rows[1];
    sig_tally tally = {0, 0, 0};
    char msg[1024], chain[64];
    size_t blobs = 0, nrows = 0;
    int rc = fed_cli_load_options("verify", "--db FILE", verify_opts, 1, &c, argc, argv), bad = 0;
    int damaged = 0; /* SQLite found the file damaged: not a hash or chain mismatch */
    fed_err e, le;

    if (rc >= 0)
        return rc;
    if ((rc = open_db("verify", c.db, FED_STORE_READONLY, &st)) >= 0)
        return rc;
    e = fed_store_integrity_check(st, msg, sizeof msg);
    printf("integrity_check: %s\n", e == FED_OK ? "ok" : msg[0] ? msg : fed_strerror(e));
    bad |= e != FED_OK;
    damaged |= e == FED_ERR_DB_DAMAGED;

    memset(&faults, 0, sizeof faults);
    e = fed_store_verify_checkpoints(st, &faults, &blobs);
    le = fed_store_list_checkpoints(st, rows, 1, &nrows);
    if (le == FED_OK)
        snprintf(chain, sizeof chain, "%" PRIu64 " in the chain", nrows ? rows[0].id : 0);
    else
        snprintf(chain, sizeof chain, "chain unreadable");
    printf("checkpoints: %s, %zu stored blobs hashed: %s\n", chain, blobs,
           e == FED_OK ? "chain and hashes ok" : fed_strerror(e));
    damaged |= e == FED_ERR_DB_DAMAGED || le == FED_ERR_DB_DAMAGED;
    for (size_t i = 0; i < faults.n; i++)
        printf("  checkpoint %" PRIu64 " (round %" PRIu64 "): %s\n", faults.v[i].id,
               faults.v[i].round, faults.v[i].what);
    if (faults.total > faults.n)
        printf("  ... and %zu more\n", faults.total - faults.n);
    bad |= e != FED_OK;

    e = fed_store_each_contribution(st, 0, check_signature, &tally);
    printf("contributions: %zu signatures ok, %zu bad, %zu missing (nothing received)%s%s\n",
           tally.ok, tally.bad, tally.unsigned_rows, e == FED_OK ? "" : "; ",
           e == FED_OK ? "" : fed_strerror(e));
    bad |= e != FED_OK || tally.bad;
    damaged |= e == FED_ERR_DB_DAMAGED;

    if (damaged)
        printf("FAULTS FOUND: the database file %s is damaged (SQLite-level corruption, "
               "not a hash or chain mismatch): restore it from a copy\n", c.db);
    else
        printf("%s\n", bad ? "FAULTS FOUND" : "all checks passed");
    fed_store_close(st);
    return bad ? 1 : 0;
}
