/* http_render.c - what `--http` answers, written from a snapshot
 * (node/snapshot.h), the read-only database and the process's own figures:
 * the Prometheus exposition (/metrics), the status page (/), the health
 * verdict (/healthz). No I/O but the FILE it writes to and the database and
 * /proc reads of fed_http_db_load and fed_http_proc_read. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "crypto/identity.h"
#include "app/chart.h"
#include "app/http.h"

/* ------------------------------------------------------------ escapes -- */

void fed_http_html(FILE *f, const char *s) { fed_chart_xml_text(f, s); }

void fed_http_label(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '\\')
            fputs("\\\\", f);
        else if (*s == '"')
            fputs("\\\"", f);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

static const char *role_name(fed_node_role r)
{
    return r == FED_NODE_AGGREGATOR ? "aggregator" : r == FED_NODE_CLIENT ? "client" : "peer";
}

static void hex8(char out[17], const uint8_t *k)
{
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", k[i]);
}

/* ------------------------------------------------------- the database -- */

typedef struct scan {
    const fed_node_snap *s;
    fed_http_db *d;
} scan;

static int on_contrib(void *ctx, const fed_store_contrib *c)
{
    scan *sc = ctx;

    for (size_t i = 0; i < sc->s->nmembers; i++) {
        fed_http_member_db *m = &sc->d->member[i];

        if (memcmp(sc->s->member[i].key, c->peer_key, 32) != 0)
            continue;
        if (c->round >= m->last_round) {
            m->last_round = c->round;
            m->accepted = c->accepted;
            snprintf(m->reason, sizeof m->reason, "%s", c->accepted ? "" : c->reason);
        }
        if (c->accepted && c->round > m->last_merged)
            m->last_merged = c->round;
        break;
    }
    return 0;
}

static uint64_t file_bytes(const char *path, const char *suffix)
{
    char p[4096];
    struct stat sb;

    snprintf(p, sizeof p, "%s%s", path, suffix);
    return stat(p, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

fed_err fed_http_db_load(fed_store *st, const char *db_path, const fed_node_snap *s,
                         size_t rounds, fed_http_db *d)
{
    uint64_t latest;
    scan sc = {s, d};
    fed_err e;

    memset(d, 0, sizeof *d);
    if (rounds < 1 || rounds > FED_HTTP_CHART_ROUNDS)
        rounds = rounds < 1 ? 1 : FED_HTTP_CHART_ROUNDS;
    d->rounds = fed_calloc(rounds, sizeof *d->rounds);
    d->member = fed_calloc(s && s->nmembers ? s->nmembers : 1, sizeof *d->member);
    if (!d->rounds || !d->member)
        return FED_ERR_NOMEM;
    if (db_path)
        d->db_bytes = file_bytes(db_path, "") + file_bytes(db_path, "-wal");
    if ((e = fed_store_last_rounds(st, d->rounds, rounds, &d->nrounds)) != FED_OK)
        return e;
    latest = d->nrounds ? d->rounds[0].round : 0;
    d->window_from = latest > FED_HTTP_CONTRIB_WINDOW ? latest - FED_HTTP_CONTRIB_WINDOW + 1 : 1;
    if (s && s->nmembers &&
        (e = fed_store_each_contribution(st, d->window_from, on_contrib, &sc)) != FED_OK)
        return e;
    d->ok = 1;
    return FED_OK;
}

void fed_http_db_fini(fed_http_db *d)
{
    if (!d)
        return;
    fed_free(d->rounds);
    fed_free(d->member);
    memset(d, 0, sizeof *d);
}

void fed_http_proc_read(fed_http_proc *p)
{
    struct rusage ru;
    FILE *f;
    unsigned long long size = 0, rss = 0;

    if (getrusage(RUSAGE_SELF, &ru) == 0)
        p->cpu_s = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                   (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    if ((f = fopen("/proc/self/statm", "r"))) {
        if (fscanf(f, "%llu %llu", &size, &rss) == 2)
            p->rss_bytes = (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
        fclose(f);
    }
}

/* ------------------------------------------------------------- health -- */

int fed_http_health(const fed_node_snap *s, uint64_t heartbeat_ms, uint64_t now_ms, char *why,
                    size_t cap)
{
    const fed_node_progress *p;

    if (!s || !heartbeat_ms) {
        snprintf(why, cap, "starting: the node has not published its state yet");
        return 0;
    }
    p = &s->progress;
    if (now_ms > heartbeat_ms + FED_HTTP_STALE_MS) {
        snprintf(why, cap, "the node's loop has not turned for %.1f s",
                 (double)(now_ms - heartbeat_ms) / 1000.0);
        return 0;
    }
    if (p->failed != FED_OK) {
        snprintf(why, cap, "the node cannot go on: %s", fed_strerror(p->failed));
        return 0;
    }
    if (p->commit_failures) {
        snprintf(why, cap, "round %" PRIu64 ": %u commits failed in a row", p->round + 1,
                 p->commit_failures);
        return 0;
    }
    if (p->silent_ms) {
        snprintf(why, cap, "no answer from the aggregator for %.0f s",
                 (double)p->silent_ms / 1000.0);
        return 0;
    }
    if (p->round_due_ms && now_ms > p->round_due_ms + FED_HTTP_OVERDUE_MS) {
        snprintf(why, cap, "round %" PRIu64 " is overdue: %.1f s past its deadline",
                 p->round + 1, (double)(now_ms - p->round_due_ms) / 1000.0);
        return 0;
    }
    if (p->finished)
        snprintf(why, cap, "ok: finished after round %" PRIu64, p->round);
    else if (p->round_open)
        snprintf(why, cap, "ok: round %" PRIu64 " runs", p->round + 1);
    else
        snprintf(why, cap, "ok: %" PRIu64 " rounds done, waiting for the next", p->round);
    return 1;
}

/* ------------------------------------------------------------ metrics -- */

static void num(FILE *f, double v)
{
    if (isnan(v))
        fputs("NaN", f);
    else if (isinf(v))
        fputs(v > 0 ? "+Inf" : "-Inf", f);
    else
        fprintf(f, "%.12g", v);
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(FILE *f, const char *name, double v)
{
    fprintf(f, "%s ", name);
    num(f, v);
    fputc('\n', f);
}

static void sample_u(FILE *f, const char *name, uint64_t v)
{
    fprintf(f, "%s %" PRIu64 "\n", name, v);
}

/* name{label="value"} v */
static void sample_l(FILE *f, const char *name, const char *label, const char *value, uint64_t v)
{
    fprintf(f, "%s{%s=\"", name, label);
    fed_http_label(f, value);
    fprintf(f, "\"} %" PRIu64 "\n", v);
}

/* name{label="value"} v, a real */
static void sample_lf(FILE *f, const char *name, const char *label, const char *value, double v)
{
    fprintf(f, "%s{%s=\"", name, label);
    fed_http_label(f, value);
    fputs("\"} ", f);
    num(f, v);
    fputc('\n', f);
}

/* The label of a rejection counter: its fed_err's name, lower case, without
 * FED_ERR_ ("replay", "unknown_sender", ...); "other" for rej_other. */
static void reason_label(size_t i, char *out, size_t cap)
{
    fed_err e = fed_wire_counter_reason(i);
    const char *n = e != FED_OK ? fed_errname(e) : "FED_ERR_OTHER";
    size_t k = 0;

    if (!strncmp(n, "FED_ERR_", 8))
        n += 8;
    for (; n[k] && k + 1 < cap; k++)
        out[k] = (char)(n[k] >= 'A' && n[k] <= 'Z' ? n[k] - 'A' + 'a' : n[k]);
    out[k] = 0;
}

/* The headline figures h holds, one sample of fam each, labelled by name. */
static void head_samples(FILE *f, const char *fam, const fed_metrics_head *h)
{
    fed_metric_value v[FED_METRICS_HEAD_MAX];
    size_t k = fed_metrics_head_named(h, v);

    for (size_t i = 0; i < k; i++)
        sample_lf(f, fam, "metric", v[i].name, v[i].value);
}

static void metrics_rounds(FILE *f, const fed_node_snap *s)
{
    uint64_t cum = 0;

    family(f, "fednode_rounds_completed_total", "counter",
           "Rounds this node has finished: an aggregator's committed, a client's trained, a "
           "peer's mixed (the number of its last round, across restarts).");
    sample_u(f, "fednode_rounds_completed_total", s->progress.round);
    family(f, "fednode_round_in_progress", "gauge", "1 while a round is open.");
    sample_u(f, "fednode_round_in_progress", (uint64_t)!!s->progress.round_open);
    family(f, "fednode_finished", "gauge", "1 once the node's last round is done.");
    sample_u(f, "fednode_finished", (uint64_t)!!s->progress.finished);
    family(f, "fednode_round_duration_seconds", "histogram",
           "Wall time of the rounds finished since the process started, from the round's start "
           "to its commit (a client: its training).");
    for (int k = 0; k <= FED_NODE_SNAP_BUCKETS; k++) {
        cum += s->dur_bucket[k];
        if (k < FED_NODE_SNAP_BUCKETS)
            fprintf(f, "fednode_round_duration_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
                    fed_node_snap_bucket_s[k], cum);
        else
            fprintf(f, "fednode_round_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
    }
    sample(f, "fednode_round_duration_seconds_sum", s->dur_sum_s);
    sample_u(f, "fednode_round_duration_seconds_count", s->rounds_run);
    if (s->have_last && isfinite(s->last.accuracy)) {
        family(f, "fednode_last_round_accuracy_ratio", "gauge",
               "Test accuracy of the newest round evaluated (0 to 1).");
        sample(f, "fednode_last_round_accuracy_ratio", s->last.accuracy);
    }
    if (s->have_last && isfinite(s->last.loss)) {
        family(f, "fednode_last_round_loss", "gauge",
               "Loss of the newest round: the aggregator's and peer's test loss, a client's "
               "training loss.");
        sample(f, "fednode_last_round_loss", s->last.loss);
    }
    if (s->metrics.kind != FED_METRICS_NONE) {
        family(f, "fednode_eval_metric", "gauge",
               "The aggregator's test figures of the newest round evaluated, by name: binary "
               "auc, ap, sensitivity, specificity, precision, f1 (at 0.5), youden_* (at the "
               "threshold maximizing Youden's J); macro_f1.");
        head_samples(f, "fednode_eval_metric", &s->metrics);
        family(f, "fednode_eval_metric_round", "gauge", "The round those figures are of.");
        sample_u(f, "fednode_eval_metric_round", s->metrics_round);
    }
    if (s->site.head.kind != FED_METRICS_NONE) {
        family(f, "fednode_site_eval_metric", "gauge",
               "The sites' pooled evaluation of the newest model they evaluated (--eval-every), "
               "on their validation splits, by name: the names of fednode_eval_metric, and "
               "samples, accuracy, loss, auc_bound (the pooled AUC is within it).");
        head_samples(f, "fednode_site_eval_metric", &s->site.head);
        sample_lf(f, "fednode_site_eval_metric", "metric", "samples", s->site.samples);
        sample_lf(f, "fednode_site_eval_metric", "metric", "accuracy", s->site.accuracy);
        sample_lf(f, "fednode_site_eval_metric", "metric", "loss", s->site.loss);
        if (s->site.head.kind == FED_METRICS_BINARY)
            sample_lf(f, "fednode_site_eval_metric", "metric", "auc_bound", s->site.auc_bound);
        family(f, "fednode_site_eval_metric_round", "gauge",
               "The round whose model the sites evaluated.");
        sample_u(f, "fednode_site_eval_metric_round", s->site.round);
    }
}

static void metrics_wire(FILE *f, const fed_node_snap *s)
{
    static const char *const conns[][2] = {
        {"conn_refused", "refused"}, {"conn_stalled", "stalled"},
        {"conn_handshake", "handshake"}, {"conn_dropped", "dropped"}};
    const fed_wire_counters *w = &s->wire;

    family(f, "fednode_sent_bytes_total", "counter", "Bytes of the frames this node sealed and sent.");
    sample_u(f, "fednode_sent_bytes_total", w->bytes_out);
    family(f, "fednode_received_bytes_total", "counter",
           "Bytes of the frames this node received and opened.");
    sample_u(f, "fednode_received_bytes_total", w->bytes_in);
    family(f, "fednode_frames_sealed_total", "counter", "Frames sealed.");
    sample_u(f, "fednode_frames_sealed_total", w->sealed);
    family(f, "fednode_frames_opened_total", "counter", "Frames opened and verified.");
    sample_u(f, "fednode_frames_opened_total", w->opened);
    family(f, "fednode_frames_rejected_total", "counter",
           "Frames the receiver refused, by reason (the fed_err it counted).");
    for (size_t i = 0; i < fed_wire_counter_count(); i++) {
        const char *n = fed_wire_counter_name(i);
        char reason[48];

        if (strncmp(n, "rej_", 4) != 0)
            continue;
        reason_label(i, reason, sizeof reason);
        sample_l(f, "fednode_frames_rejected_total", "reason", reason,
                 fed_wire_counter_value(w, i));
    }
    family(f, "fednode_connections_closed_total", "counter",
           "Listener connections the transport closed, by reason.");
    for (size_t k = 0; k < sizeof conns / sizeof conns[0]; k++)
        for (size_t i = 0; i < fed_wire_counter_count(); i++)
            if (!strcmp(fed_wire_counter_name(i), conns[k][0]))
                sample_l(f, "fednode_connections_closed_total", "reason", conns[k][1],
                         fed_wire_counter_value(w, i));
    family(f, "fednode_rounds_declined_total", "counter",
           "Rounds clients declined (a LEAVE) for a configuration to fix, by reason: "
           "sa_required (a --secagg client, a round without it), model_mismatch (a model "
           "the client cannot build over its data).");
    sample_l(f, "fednode_rounds_declined_total", "reason", "sa_required", w->leave_no_secagg);
    sample_l(f, "fednode_rounds_declined_total", "reason", "model_mismatch", w->leave_bad_model);
}

static void metrics_clients(FILE *f, const fed_node_snap *s, const fed_http_db *db)
{
    const fed_node_round_info *r = &s->last;
    uint32_t refused = s->have_last && r->sampled > r->merged + r->missing
                           ? r->sampled - r->merged - r->missing
                           : 0;
    uint64_t latest = db && db->ok && db->nrounds ? db->rounds[0].round : 0;

    family(f, "fednode_clients", "gauge",
           "Clients: connected now (holding a request or owing a delta), and in the newest "
           "round reported: sampled, merged, missing (no delta by the close) and refused.");
    sample_l(f, "fednode_clients", "state", "connected",
             (uint64_t)s->progress.clients_waiting + s->progress.clients_training);
    sample_l(f, "fednode_clients", "state", "sampled", s->have_last ? r->sampled : 0);
    sample_l(f, "fednode_clients", "state", "merged", s->have_last ? r->merged : 0);
    sample_l(f, "fednode_clients", "state", "missing", s->have_last ? r->missing : 0);
    sample_l(f, "fednode_clients", "state", "refused", refused);
    family(f, "fednode_client_deltas_total", "counter",
           "Sampled clients' deltas over the rounds since the process started, by outcome.");
    sample_l(f, "fednode_client_deltas_total", "outcome", "merged", s->deltas_merged);
    sample_l(f, "fednode_client_deltas_total", "outcome", "missing", s->deltas_missing);
    sample_l(f, "fednode_client_deltas_total", "outcome", "refused", s->deltas_refused);
    if (!db || !db->ok)
        return;
    family(f, "fednode_client_rounds_since_merged", "gauge",
           "Rounds committed since the client's delta was last merged (counted back at most "
           "256 rounds), by its name in the allow-list.");
    for (size_t i = 0; i < s->nmembers; i++) {
        const fed_http_member_db *m = &db->member[i];
        /* a commit may land between the two reads (last_merged past latest),
         * and before the first commit nothing is missed yet: never wraps */
        uint64_t since = m->last_merged
                             ? (latest > m->last_merged ? latest - m->last_merged : 0)
                             : (latest >= db->window_from ? latest - db->window_from + 1 : 0);

        sample_l(f, "fednode_client_rounds_since_merged", "client", s->member[i].name, since);
    }
}

/* One gauge of the clients that reported a DP account: their epsilon
 * spent, or (budget) their budget. */
static void member_dp(FILE *f, const fed_node_snap *s, const char *name, int budget,
                      const char *help)
{
    family(f, name, "gauge", help);
    for (size_t i = 0; i < s->nmembers; i++)
        if (s->member[i].dp_reported)
            sample_lf(f, name, "client", s->member[i].name,
                      budget ? s->member[i].dp_budget : s->member[i].dp_epsilon);
}

/* Whether secure aggregation and DP are on; an aggregator's clients'
 * reported privacy budgets (an alert can watch a budget nearly spent). */
static void metrics_privacy(FILE *f, const fed_node_snap *s)
{
    family(f, "fednode_secure_aggregation_enabled", "gauge",
           "1 when the rounds run secure aggregation (--secagg), else 0.");
    sample_u(f, "fednode_secure_aggregation_enabled", (uint64_t)s->secagg_on);
    family(f, "fednode_dp_enabled", "gauge",
           "1 when differential privacy is on (a client's --dp-sgd; an aggregator's "
           "--require-dp-sgd or DP-FedAvg), else 0.");
    sample_u(f, "fednode_dp_enabled", (uint64_t)s->dp_on);
    if (s->role != FED_NODE_AGGREGATOR)
        return;
    member_dp(f, s, "fednode_dp_epsilon_spent", 0,
              "Epsilon a client has spent, as its last DELTA or LEAVE reported it (clients "
              "with DP-SGD), by its name in the allow-list.");
    member_dp(f, s, "fednode_dp_epsilon_budget", 1,
              "The privacy budget (epsilon) a client reported with it; 0: none.");
    family(f, "fednode_client_parked", "gauge",
           "1 when a client declined a round because its privacy budget is spent: it is left "
           "out of the rounds until it restarts.");
    for (size_t i = 0; i < s->nmembers; i++)
        sample_l(f, "fednode_client_parked", "client", s->member[i].name,
                 (uint64_t)s->member[i].dp_parked);
}

void fed_http_metrics(FILE *f, const fed_node_snap *s, const fed_http_db *db,
                      const fed_http_proc *p)
{
    if (s) {
        family(f, "fednode_node_info", "gauge",
               "The node's role and its name in the allow-list (value 1).");
        fprintf(f, "fednode_node_info{role=\"%s\",name=\"", role_name(s->role));
        fed_http_label(f, s->name);
        fprintf(f, "\"} 1\n");
        family(f, "fednode_start_time_seconds", "gauge",
               "When the process started serving, seconds since the Unix epoch.");
        sample(f, "fednode_start_time_seconds", (double)s->started_wall_ms / 1000.0);
        metrics_rounds(f, s);
        metrics_wire(f, s);
        if (s->role == FED_NODE_AGGREGATOR)
            metrics_clients(f, s, db);
        metrics_privacy(f, s);
        family(f, "fednode_checkpoint_write_seconds", "summary",
               "Time spent writing checkpoints (serialized, hashed, stored; the commit apart).");
        sample(f, "fednode_checkpoint_write_seconds_sum", s->store.ckpt_write_s);
        sample_u(f, "fednode_checkpoint_write_seconds_count", s->store.ckpt_writes);
        family(f, "fednode_database_commit_seconds", "summary",
               "Time spent committing database transactions (the fsync included).");
        sample(f, "fednode_database_commit_seconds_sum", s->store.commit_s);
        sample_u(f, "fednode_database_commit_seconds_count", s->store.commits);
    }
    if (db && db->ok) {
        family(f, "fednode_database_bytes", "gauge",
               "Size of the node's database file and its write-ahead log.");
        sample_u(f, "fednode_database_bytes", db->db_bytes);
    }
    family(f, "fednode_resident_memory_bytes", "gauge", "Resident memory of the process.");
    sample_u(f, "fednode_resident_memory_bytes", p->rss_bytes);
    family(f, "fednode_cpu_seconds_total", "counter", "CPU time of the process, user and system.");
    sample(f, "fednode_cpu_seconds_total", p->cpu_s);
    family(f, "fednode_http_cpu_seconds_total", "counter", "CPU time of the HTTP server's thread.");
    sample(f, "fednode_http_cpu_seconds_total", p->http_cpu_s);
    family(f, "fednode_http_requests_total", "counter", "HTTP requests answered.");
    sample_u(f, "fednode_http_requests_total", p->requests);
    family(f, "fednode_http_connections_cut_total", "counter",
           "HTTP connections closed for taking too long to send a request or take an answer.");
    sample_u(f, "fednode_http_connections_cut_total", p->cut);
}

/* --------------------------------------------------------------- page -- */

static void when_ms(FILE *f, uint64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    char buf[32];

    if (!ms || !gmtime_r(&t, &tm)) {
        fputs("-", f);
        return;
    }
    strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
    fputs(buf, f);
}

static void real(FILE *f, double v, int decimals, const char *suffix)
{
    if (isfinite(v))
        fprintf(f, "%.*f%s", decimals, v, suffix);
    else
        fputs("-", f);
}

static void page_node(FILE *f, const fed_node_snap *s, const fed_http_proc *p, int healthy,
                      const char *why)
{
    char b64[FED_CRYPTO_PK_B64_LEN + 1];

    fed_crypto_pk_to_base64(s->key, b64);
    fputs("<table id='node'>\n<tr><th>role</th><td id='role'>", f);
    fputs(role_name(s->role), f);
    fputs("</td></tr>\n<tr><th>name</th><td id='name'>", f);
    fed_http_html(f, s->name[0] ? s->name : "(not in its allow-list)");
    fputs("</td></tr>\n<tr><th>key</th><td id='key'><code>", f);
    fed_http_html(f, b64);
    fprintf(f, "</code></td></tr>\n<tr><th>secure aggregation</th><td id='secagg'>%s</td></tr>"
               "\n<tr><th>differential privacy</th><td id='dp'>%s</td></tr>",
            s->secagg_on ? "on" : "off", s->dp_on ? "on" : "off");
    fprintf(f, "\n<tr><th>rounds done</th><td id='round'>%" PRIu64
               "</td></tr>\n<tr><th>state</th><td id='state'>%s</td></tr>\n"
               "<tr><th>health</th><td id='health' class='%s'>",
            s->progress.round,
            s->progress.finished     ? "finished"
            : s->progress.round_open ? "round open"
                                     : "between rounds",
            healthy ? "ok" : "bad");
    fed_http_html(f, why);
    fputs("</td></tr>\n<tr><th>started (UTC)</th><td>", f);
    when_ms(f, s->started_wall_ms);
    fprintf(f, "</td></tr>\n<tr><th>memory, CPU</th><td>%.1f MiB resident, %.2f s CPU "
               "(%.3f s serving HTTP)</td></tr>\n</table>\n",
            (double)p->rss_bytes / 1048576.0, p->cpu_s, p->http_cpu_s);
}

static void page_members(FILE *f, const fed_node_snap *s, const fed_http_db *db)
{
    const char *what = s->role == FED_NODE_AGGREGATOR ? "clients"
                       : s->role == FED_NODE_CLIENT   ? "members (its aggregator among them)"
                                                      : "peers";

    int agg = s->role == FED_NODE_AGGREGATOR;

    fprintf(f, "<h2>%s (%zu)</h2>\n<table id='members'>\n<tr><th>name</th><th>key</th>"
               "<th>address</th>%s<th>last round</th><th>last contribution</th></tr>\n",
            what, s->nmembers, agg ? "<th>epsilon spent (budget)</th>" : "");
    for (size_t i = 0; i < s->nmembers; i++) {
        const fed_node_snap_member *m = &s->member[i];
        const fed_http_member_db *md = db && db->ok ? &db->member[i] : NULL;
        char k[17];

        hex8(k, m->key);
        fputs("<tr class='member'><td class='name'>", f);
        fed_http_html(f, m->name);
        fprintf(f, "</td><td><code>%s</code></td><td class='addr'>", k);
        fed_http_html(f, m->addr[0] ? m->addr : "-");
        fputs("</td>", f);
        if (agg && !m->dp_reported)
            fputs("<td class='dp'>-</td>", f);
        else if (agg) {
            fprintf(f, "<td class='dp%s'>", m->dp_parked ? " bad" : "");
            real(f, m->dp_epsilon, 4, "");
            if (m->dp_budget > 0) {
                fputs(" (", f);
                real(f, m->dp_budget, 4, ")");
            }
            fputs(m->dp_parked ? ": spent, left out" : "", f);
            fputs("</td>", f);
        }
        if (md && md->last_round) {
            fprintf(f, "<td>%" PRIu64 "</td><td class='%s'>", md->last_round,
                    md->accepted ? "ok" : "bad");
            fed_http_html(f, md->accepted ? (s->role == FED_NODE_PEER ? "mixed" : "merged")
                             : md->reason[0]  ? md->reason
                                              : "refused");
            fputs("</td></tr>\n", f);
        } else {
            fputs("<td>-</td><td>none recorded</td></tr>\n", f);
        }
    }
    fputs("</table>\n", f);
}

static void page_rounds(FILE *f, const fed_http_db *db)
{
    size_t n = db->nrounds < FED_HTTP_TABLE_ROUNDS ? db->nrounds : FED_HTTP_TABLE_ROUNDS;

    fprintf(f, "<h2>rounds (last %zu, newest first)</h2>\n<table id='rounds'>\n<tr><th>round"
               "</th><th>ended (UTC)</th><th>secs</th><th>loss</th><th>accuracy</th>"
               "<th>samples</th><th>bytes in</th><th>bytes out</th><th>merged</th>"
               "<th>strategy</th></tr>\n", n);
    for (size_t i = 0; i < n; i++) {
        const fed_store_round *r = &db->rounds[i];
        double secs = r->end_ms >= r->start_ms ? (double)(r->end_ms - r->start_ms) / 1000 : 0;

        fprintf(f, "<tr class='round' data-round='%" PRIu64 "'><td>%" PRIu64 "</td><td>",
                r->round, r->round);
        when_ms(f, r->end_ms);
        fprintf(f, "</td><td>%.2f</td><td>", secs);
        real(f, r->loss, 4, "");
        fputs("</td><td class='acc'>", f);
        real(f, 100 * r->accuracy, 2, "%");
        fprintf(f, "</td><td>%" PRIu64 "</td><td>%" PRIu64 "</td><td>%" PRIu64 "</td><td>%u"
                   "</td><td>", r->samples, r->bytes_in, r->bytes_out, r->peers);
        fed_http_html(f, r->strategy);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* One table of a head's figures (and extra ones after them), titled. */
static void page_figures(FILE *f, const char *id, const char *title, uint64_t round,
                         const fed_metrics_head *h, const fed_metric_value *extra, size_t nx)
{
    fed_metric_value v[FED_METRICS_HEAD_MAX + 4];
    size_t k = fed_metrics_head_named(h, v);

    if (!k)
        return;
    for (size_t i = 0; i < nx && i < 4; i++)
        v[k++] = extra[i];
    fprintf(f, "<h2>%s (round %" PRIu64 ")</h2>\n<table id='%s'>\n", title, round, id);
    for (size_t i = 0; i < k; i++) {
        fputs("<tr><th>", f);
        fed_http_html(f, v[i].name);
        fprintf(f, "</th><td class='metric' data-metric='%s'>", v[i].name);
        real(f, v[i].value, 4, "");
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* The newest evaluated round's test figures (the snapshot's), and the
 * newest model the sites evaluated (--eval-every). */
static void page_metrics(FILE *f, const fed_node_snap *s)
{
    fed_metric_value x[4] = {{"samples", s->site.samples}, {"accuracy", s->site.accuracy},
                             {"loss", s->site.loss}, {"auc_bound", s->site.auc_bound}};

    if (s->progress.eval_local && s->metrics.kind != FED_METRICS_NONE) /* its copies: initial
                                                                           */
        fputs("<p id='eval-note'>not meaningful: tensors kept at the sites (--local-layers, "
              "--local-bn) are this node's initial values here; the sites' evaluation is the "
              "measure</p>\n", f);
    page_figures(f, "metrics", "metrics", s->metrics_round, &s->metrics, NULL, 0);
    page_figures(f, "site-metrics", "site evaluation, pooled", s->site.round, &s->site.head, x,
                 s->site.head.kind == FED_METRICS_BINARY ? 4 : 3);
}

/* The accuracy chart (app/chart.c), oldest round first. */
static void page_chart(FILE *f, const fed_node_snap *s, const fed_http_db *db)
{
    fed_chart_series cs;
    double bytes = 0;
    size_t n = db->nrounds;

    memset(&cs, 0, sizeof cs);
    snprintf(cs.name, sizeof cs.name, "%s", s->name[0] ? s->name : role_name(s->role));
    cs.round = fed_malloc((n ? n : 1) * sizeof *cs.round);
    cs.accuracy = fed_malloc((n ? n : 1) * sizeof *cs.accuracy);
    cs.bytes = fed_malloc((n ? n : 1) * sizeof *cs.bytes);
    fputs("<h2>accuracy</h2>\n<div id='chart'>\n", f);
    if (cs.round && cs.accuracy && cs.bytes) {
        for (size_t i = 0; i < n; i++) {
            const fed_store_round *r = &db->rounds[n - 1 - i];

            bytes += (double)r->bytes_in + (double)r->bytes_out;
            cs.round[i] = (double)r->round;
            cs.accuracy[i] = r->accuracy;
            cs.bytes[i] = bytes;
        }
        cs.n = n;
        if (fed_chart_svg_write(f, "test accuracy by round", "MB this node sent and received",
                                &cs, 1) != FED_OK)
            fputs("<p>(no chart)</p>\n", f);
    }
    fputs("</div>\n", f);
    fed_chart_series_fini(&cs);
}

static void page_rejections(FILE *f, const fed_node_snap *s)
{
    int any = 0;

    fputs("<h2>frames refused</h2>\n<table id='rejections'>\n<tr><th>reason</th><th>frames"
          "</th></tr>\n", f);
    for (size_t i = 0; i < fed_wire_counter_count(); i++) {
        const char *n = fed_wire_counter_name(i);
        uint64_t v = fed_wire_counter_value(&s->wire, i);
        char reason[48];

        if ((strncmp(n, "rej_", 4) && strncmp(n, "conn_", 5)) || !v)
            continue;
        if (n[0] == 'r')
            reason_label(i, reason, sizeof reason);
        else
            snprintf(reason, sizeof reason, "connection %s", n + 5);
        fprintf(f, "<tr><td>%s</td><td>%" PRIu64 "</td></tr>\n", reason, v);
        any = 1;
    }
    if (!any)
        fputs("<tr><td>none</td><td>0</td></tr>\n", f);
    fputs("</table>\n", f);
}

static const char page_style[] =
    "body{font-family:sans-serif;margin:1.5em;color:#222}"
    "table{border-collapse:collapse;margin-bottom:1em}"
    "th,td{border:1px solid #ccc;padding:2px 8px;text-align:left}"
    "th{background:#f0f0f0}.ok{color:#176b1f}.bad{color:#b00020;font-weight:bold}"
    "code{font-size:90%}";

void fed_http_page(FILE *f, const fed_node_snap *s, const fed_http_db *db,
                   const fed_http_proc *p, int healthy, const char *health_why,
                   unsigned refresh_s)
{
    fprintf(f, "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>\n"
               "<meta http-equiv='refresh' content='%u'>\n<title>fednode ", refresh_s);
    if (s) {
        fputs(role_name(s->role), f);
        fputc(' ', f);
        fed_http_html(f, s->name);
    }
    fprintf(f, "</title>\n<style>%s</style></head>\n<body>\n<h1>fednode</h1>\n", page_style);
    if (!s) {
        fputs("<p id='state'>starting: the node has not published its state yet</p>\n", f);
    } else {
        page_node(f, s, p, healthy, health_why);
        page_members(f, s, db);
        if (db && db->ok) {
            page_rounds(f, db);
            page_metrics(f, s);
            page_chart(f, s, db);
        } else {
            fputs("<p>(the database could not be read)</p>\n", f);
        }
        page_rejections(f, s);
    }
    fprintf(f, "<p><a href='/metrics'>/metrics</a> · <a href='/status.json'>/status.json</a>"
               " · <a href='/healthz'>/healthz</a> · this page reloads every %u s</p>\n"
               "</body></html>\n", refresh_s);
}
