/* test_http.c - `fednode run --http` (app/http.h) without a node: the
 * Prometheus exposition of a snapshot (every line of the text format,
 * counters, the histogram, label escaping), the status page with hostile
 * strings everywhere an outside string goes, /healthz's verdicts, the
 * address forms, the database's last contribution per member; then the
 * server itself on 127.0.0.1 with a thread publishing snapshots as fast as
 * it can while client threads scrape every page (`make tsan` runs this:
 * the handlers read only the snapshot), and hostile clients (one that sends
 * nothing, 10 MB of headers, a byte a second, 200 scrapes at once) while
 * the publisher keeps its pace; /healthz through a flood of 2,000 held
 * connections; requests that could be read two ways refused; the database's
 * path shown to loopback only.
 *
 * Also a tool for tests/test_http_hostile.sh: `test_http --hostile PORT SECONDS`
 * runs the same hostile clients against a running fednode, then a flood of
 * 2,000 held connections with /healthz polled through it, and prints what
 * happened (exit 0 when every check held). */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "app/http.h"
#include "core/alloc.h"
#include "core/log.h"
#include "storage/store.h"
#include "tests/support/support.h"

#define HOSTILE "<script>alert(\"x\")</script>&'\\\n"

/* ------------------------------------------------------- a tiny client -- */

static uint64_t ms_now(void) { return fed_node_snap_now_ms(); }

static int dial(uint16_t port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* GET path: the status (0: no answer) and the body (malloc'd) in *body. */
static int http_get(uint16_t port, const char *path, char **body, size_t *blen)
{
    char req[256], *buf = NULL;
    size_t len = 0, cap = 0;
    int fd = dial(port), status = 0;

    if (body)
        *body = NULL;
    if (fd < 0)
        return 0;
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
             path);
    if (send_all(fd, req, strlen(req)) == 0) {
        for (;;) {
            ssize_t k;

            if (len + 4096 + 1 > cap) {
                char *nb = realloc(buf, cap = cap ? 2 * cap : 65536);

                if (!nb)
                    break;
                buf = nb;
            }
            if ((k = recv(fd, buf + len, cap - len - 1, 0)) <= 0)
                break;
            len += (size_t)k;
        }
    }
    close(fd);
    if (buf) {
        char *sep;

        buf[len] = 0;
        if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
            status = 0;
        if (body && (sep = strstr(buf, "\r\n\r\n"))) {
            *body = strdup(sep + 4);
            if (blen)
                *blen = len - (size_t)(sep + 4 - buf);
        }
    }
    free(buf);
    return status;
}

/* Waits up to ms for fd to be closed by the far end: 1 closed, 0 not. */
static int closed_within(int fd, int ms)
{
    uint64_t end = ms_now() + (uint64_t)ms;
    char b[4096];

    while (ms_now() < end) {
        struct pollfd pf = {fd, POLLIN, 0};

        if (poll(&pf, 1, 100) > 0) {
            ssize_t k = recv(fd, b, sizeof b, MSG_DONTWAIT);

            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
                return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------ the hostiles -- */

typedef struct hostile_result {
    int idle_closed;       /* the connection that sent nothing was closed */
    int big_refused;       /* 10 MB of headers: the server stopped it */
    int trickle_cut;       /* a byte a second: closed */
    int scrapes, scrapes_ok, scrapes_retried;
    double seconds;
} hostile_result;

typedef struct scrape_arg {
    uint16_t port;
    int ok;
    int retried; /* closed unanswered at first: the connection cap's edge */
} scrape_arg;

/* One scrape, asked again (at most twice) when the connection is closed
 * with no answer at all: libmicrohttpd closes a connection it accepted in a
 * burst past its cap before it stops accepting, and Prometheus asks again at
 * its next interval. An answer that is not 200 is not asked again. */
static void *scrape(void *arg)
{
    scrape_arg *a = arg;
    char *body = NULL;
    int status = 0;

    for (int t = 0; t < 3 && status == 0; t++) {
        if (t) {
            a->retried++;
            usleep(100000);
        }
        free(body);
        body = NULL;
        status = http_get(a->port, "/metrics", &body, NULL);
    }
    a->ok = status == 200 && body && strstr(body, "fednode_rounds_completed_total") != NULL;
    free(body);
    return NULL;
}

typedef struct big_arg {
    uint16_t port;
    int refused;
} big_arg;

/* 10 MB of headers: refused (an error status, or the connection closed
 * under it) long before the end. */
static void *big_headers(void *arg)
{
    big_arg *a = arg;
    int fd = dial(a->port);
    char line[1024];
    size_t sent = 0;

    if (fd < 0)
        return NULL;
    memset(line, 'a', sizeof line);
    memcpy(line, "X-Fill: ", 8);
    line[sizeof line - 2] = '\r';
    line[sizeof line - 1] = '\n';
    if (send_all(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n", 32) == 0)
        while (sent < (size_t)10 << 20 && send_all(fd, line, sizeof line) == 0)
            sent += sizeof line;
    a->refused = sent < (size_t)10 << 20;
    if (!a->refused) { /* all went in: the answer must be an error */
        char b[64] = {0};
        int st = 0;

        (void)send_all(fd, "\r\n", 2);
        if (recv(fd, b, sizeof b - 1, 0) > 0 && sscanf(b, "HTTP/1.%*d %d", &st) == 1)
            a->refused = st >= 400;
    }
    close(fd);
    return NULL;
}

typedef struct trickle_arg {
    uint16_t port;
    int seconds;
    int cut;
} trickle_arg;

/* A request's headers a byte a second: cut before it ends. */
static void *trickle(void *arg)
{
    trickle_arg *a = arg;
    const char *req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
                      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    int fd = dial(a->port);

    if (fd < 0)
        return NULL;
    for (int i = 0; i < a->seconds * 10 && req[i / 10]; i++) {
        char b[64];
        ssize_t k;

        if (i % 10 == 0 && send(fd, req + i / 10, 1, MSG_NOSIGNAL) != 1) {
            a->cut = 1;
            break;
        }
        k = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            a->cut = 1;
            break;
        }
        usleep(100000);
    }
    close(fd);
    return NULL;
}

/* One that sends nothing and one that trickles, alone: closed by the idle
 * timeout and the request deadline (nothing else connects, so no newcomer
 * closes them at the connection cap); each waits at most seconds. */
static void idle_and_trickle(uint16_t port, int seconds, int *idle_closed, int *trickle_cut)
{
    pthread_t tt;
    trickle_arg ta = {port, seconds, 0};
    int idle = dial(port);

    pthread_create(&tt, NULL, trickle, &ta);
    *idle_closed = idle >= 0 && closed_within(idle, seconds * 1000);
    if (idle >= 0)
        close(idle);
    pthread_join(tt, NULL);
    *trickle_cut = ta.cut;
}

/* The four hostile clients at once against port, then an idle and a
 * trickling one alone (at once, a burst of scrapes past the connection cap
 * may close the first two before their deadlines: the second pair shows the
 * deadlines); each waits at most seconds for its verdict. */
static void run_hostiles(uint16_t port, int seconds, int nscrapes, hostile_result *r)
{
    pthread_t tb, tt, *ts = calloc((size_t)nscrapes, sizeof *ts);
    scrape_arg *sa = calloc((size_t)nscrapes, sizeof *sa);
    big_arg ba = {port, 0};
    trickle_arg ta = {port, seconds, 0};
    uint64_t t0 = ms_now();
    int idle = dial(port), idle_alone = 0, cut_alone = 0;

    memset(r, 0, sizeof *r);
    pthread_create(&tb, NULL, big_headers, &ba);
    pthread_create(&tt, NULL, trickle, &ta);
    for (int i = 0; ts && sa && i < nscrapes; i++) {
        sa[i].port = port;
        if (pthread_create(&ts[i], NULL, scrape, &sa[i]) != 0)
            ts[i] = 0;
    }
    for (int i = 0; ts && sa && i < nscrapes; i++)
        if (ts[i]) {
            pthread_join(ts[i], NULL);
            r->scrapes++;
            r->scrapes_ok += sa[i].ok;
            r->scrapes_retried += sa[i].retried > 0;
        }
    r->idle_closed = idle >= 0 && closed_within(idle, seconds * 1000);
    if (idle >= 0)
        close(idle);
    pthread_join(tb, NULL);
    pthread_join(tt, NULL);
    idle_and_trickle(port, seconds, &idle_alone, &cut_alone);
    r->idle_closed &= idle_alone;
    r->big_refused = ba.refused;
    r->trickle_cut = ta.cut && cut_alone;
    r->seconds = (double)(ms_now() - t0) / 1000.0;
    free(ts);
    free(sa);
}

/* ------------------------------------------------------- fixtures -- */

static void fill_snap(fed_node_snap *s)
{
    memset(s, 0, sizeof *s);
    s->role = FED_NODE_AGGREGATOR;
    memset(s->key, 7, 32);
    snprintf(s->name, sizeof s->name, "%s", HOSTILE);
    s->started_wall_ms = 1700000000000ull;
    s->deadline_ms = 60000;
    s->progress.round = 3;
    s->progress.round_open = 1;
    s->progress.clients_waiting = 1;
    s->progress.clients_training = 2;
    s->rounds_run = 3;
    s->dur_bucket[2] = 1; /* 0.5 s */
    s->dur_bucket[4] = 2; /* 2.5 s */
    s->dur_sum_s = 4.75;
    s->have_last = 1;
    s->last.round = 3;
    s->last.sampled = 4;
    s->last.merged = 2;
    s->last.missing = 1;
    s->last.accuracy = 0.8125;
    s->last.loss = 0.5;
    s->deltas_merged = 9;
    s->deltas_missing = 1;
    s->deltas_refused = 2;
    s->wire.bytes_out = 1000;
    s->wire.bytes_in = 2000;
    s->wire.rej_unknown_sender = 5;
    s->wire.rej_replay = 1;
    s->wire.conn_refused = 3;
    s->wire.leave_no_secagg = 2;
    s->store.ckpt_writes = 3;
    s->store.ckpt_write_s = 0.25;
    s->metrics_round = 2; /* round 3 was not evaluated */
    s->metrics.kind = FED_METRICS_BINARY;
    s->metrics.auc = 0.875;
    s->metrics.sensitivity = 0.75;
    s->metrics.youden_threshold = 0.25;
    s->metrics.macro_f1 = NAN;
    s->site.round = 1; /* the sites evaluated round 1's model */
    s->site.samples = 220;
    s->site.accuracy = 0.75;
    s->site.loss = 0.5;
    s->site.auc_bound = 0.001;
    s->site.head.kind = FED_METRICS_BINARY;
    s->site.head.auc = 0.625;
}

static fed_node_snap_member members[2];

static void fill_members(void)
{
    memset(members, 0, sizeof members);
    snprintf(members[0].name, sizeof members[0].name, "%s", HOSTILE);
    memset(members[0].key, 1, 32);
    snprintf(members[0].addr, sizeof members[0].addr, "tcp://%s:1", HOSTILE);
    snprintf(members[1].name, sizeof members[1].name, "plain");
    memset(members[1].key, 2, 32);
}

static char *render(void (*fn)(FILE *, void *), void *ctx)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    assert_non_null(f);
    fn(f, ctx);
    assert_int_equal(fclose(f), 0);
    return buf;
}

typedef struct render_ctx {
    const fed_node_snap *s;
    const fed_http_db *db;
    fed_http_proc p;
} render_ctx;

static void do_metrics(FILE *f, void *ctx)
{
    render_ctx *c = ctx;

    fed_http_metrics(f, c->s, c->db, &c->p);
}

static void do_page(FILE *f, void *ctx)
{
    render_ctx *c = ctx;

    fed_http_page(f, c->s, c->db, &c->p, 0, "round 4 is overdue: " HOSTILE, 5);
}

static fed_store_round rounds[3];
static fed_http_member_db mdb[2];

static void fill_db(fed_http_db *db)
{
    memset(db, 0, sizeof *db);
    memset(rounds, 0, sizeof rounds);
    memset(mdb, 0, sizeof mdb);
    for (int i = 0; i < 3; i++) {
        rounds[i].round = (uint64_t)(3 - i);
        rounds[i].start_ms = 1700000000000ull + (uint64_t)i * 1000;
        rounds[i].end_ms = rounds[i].start_ms + 500;
        rounds[i].accuracy = 0.7 + 0.05 * (2 - i);
        rounds[i].loss = 0.6;
        snprintf(rounds[i].strategy, sizeof rounds[i].strategy, "<b>median</b>");
    }
    mdb[0].last_round = 3;
    snprintf(mdb[0].reason, sizeof mdb[0].reason, "%s", "<i>krum</i>");
    mdb[0].last_merged = 1;
    mdb[1].last_round = 3;
    mdb[1].accepted = 1;
    mdb[1].last_merged = 3;
    db->ok = 1;
    db->rounds = rounds;
    db->nrounds = 3;
    db->member = mdb;
    db->window_from = 1;
    db->db_bytes = 4096;
}

/* ------------------------------------------------------------ tests -- */

/* Every line of the exposition is a comment (# HELP / # TYPE) or a sample
 * NAME[{LABELS}] VALUE, each family's TYPE before its samples and once. */
static void check_exposition(const char *text)
{
    char types[64][96];
    int ntypes = 0;
    const char *p = text;

    while (*p) {
        const char *nl = strchr(p, '\n');
        char line[1024], name[96];
        size_t n;

        assert_non_null(nl);
        n = (size_t)(nl - p);
        assert_true(n < sizeof line);
        memcpy(line, p, n);
        line[n] = 0;
        p = nl + 1;
        if (!strncmp(line, "# HELP ", 7))
            continue;
        if (!strncmp(line, "# TYPE ", 7)) {
            char type[32];

            assert_int_equal(sscanf(line + 7, "%95s %31s", name, type), 2);
            assert_true(!strcmp(type, "counter") || !strcmp(type, "gauge") ||
                        !strcmp(type, "histogram") || !strcmp(type, "summary"));
            for (int i = 0; i < ntypes; i++)
                assert_string_not_equal(types[i], name);
            assert_true(ntypes < 64);
            snprintf(types[ntypes++], sizeof types[0], "%s", name);
            if (!strcmp(type, "counter"))
                assert_non_null(strstr(name, "_total"));
            continue;
        }
        assert_true(line[0] == 'f'); /* fednode_ */
        assert_int_equal(strncmp(line, "fednode_", 8), 0);
        {
            size_t k = strcspn(line, "{ ");
            int known = 0;

            memcpy(name, line, k);
            name[k] = 0;
            for (int i = 0; i < ntypes; i++) {
                size_t tl = strlen(types[i]);

                if (!strncmp(name, types[i], tl) &&
                    (!name[tl] || !strcmp(name + tl, "_bucket") || !strcmp(name + tl, "_sum") ||
                     !strcmp(name + tl, "_count")))
                    known = 1;
            }
            assert_true(known);
            if (line[k] == '{') { /* labels: no raw newline, quotes balanced */
                const char *q = line + k + 1;
                int in = 0;

                for (; *q && !(*q == '}' && !in); q++) {
                    if (*q == '\\' && in)
                        q++;
                    else if (*q == '"')
                        in = !in;
                }
                assert_int_equal(*q, '}');
                k = (size_t)(q - line) + 1;
            }
            assert_int_equal(line[k], ' ');
            {
                char *end;

                (void)strtod(line + k + 1, &end);
                assert_true(*end == 0 || !strcmp(line + k + 1, "NaN") ||
                            !strcmp(line + k + 1, "+Inf"));
            }
        }
    }
}

static void test_metrics(void **state)
{
    fed_node_snap s;
    fed_http_db db;
    render_ctx c;
    char *t;

    (void)state;
    fill_snap(&s);
    fill_members();
    s.member = members;
    s.nmembers = 2;
    fill_db(&db);
    memset(&c, 0, sizeof c);
    c.s = &s;
    c.db = &db;
    c.p.cpu_s = 1.5;
    c.p.rss_bytes = 1 << 20;
    t = render(do_metrics, &c);
    check_exposition(t);
    assert_non_null(strstr(t, "\nfednode_rounds_completed_total 3\n"));
    assert_non_null(strstr(t, "fednode_frames_rejected_total{reason=\"unknown_sender\"} 5\n"));
    assert_non_null(strstr(t, "fednode_frames_rejected_total{reason=\"replay\"} 1\n"));
    assert_non_null(strstr(t, "fednode_frames_rejected_total{reason=\"frame_truncated\"} 0\n"));
    assert_non_null(strstr(t, "fednode_frames_rejected_total{reason=\"other\"} 0\n"));
    assert_non_null(strstr(t, "fednode_connections_closed_total{reason=\"refused\"} 3\n"));
    assert_non_null(strstr(t, "fednode_rounds_declined_total{reason=\"sa_required\"} 2\n"));
    assert_non_null(strstr(t, "fednode_rounds_declined_total{reason=\"model_mismatch\"} 0\n"));
    /* the histogram is cumulative and ends with +Inf = count */
    assert_non_null(strstr(t, "fednode_round_duration_seconds_bucket{le=\"0.25\"} 0\n"));
    assert_non_null(strstr(t, "fednode_round_duration_seconds_bucket{le=\"0.5\"} 1\n"));
    assert_non_null(strstr(t, "fednode_round_duration_seconds_bucket{le=\"2.5\"} 3\n"));
    assert_non_null(strstr(t, "fednode_round_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
    assert_non_null(strstr(t, "fednode_round_duration_seconds_count 3\n"));
    assert_non_null(strstr(t, "fednode_last_round_accuracy_ratio 0.8125\n"));
    /* the newest evaluated round's figures, by name, and which round */
    assert_non_null(strstr(t, "fednode_eval_metric{metric=\"auc\"} 0.875\n"));
    assert_non_null(strstr(t, "fednode_eval_metric{metric=\"sensitivity\"} 0.75\n"));
    assert_non_null(strstr(t, "fednode_eval_metric{metric=\"youden_threshold\"} 0.25\n"));
    assert_non_null(strstr(t, "fednode_eval_metric{metric=\"macro_f1\"} NaN\n"));
    assert_non_null(strstr(t, "fednode_eval_metric_round 2\n"));
    /* the sites' pooled evaluation, apart, with its bound and round */
    assert_non_null(strstr(t, "fednode_site_eval_metric{metric=\"auc\"} 0.625\n"));
    assert_non_null(strstr(t, "fednode_site_eval_metric{metric=\"auc_bound\"} 0.001\n"));
    assert_non_null(strstr(t, "fednode_site_eval_metric{metric=\"samples\"} 220\n"));
    assert_non_null(strstr(t, "fednode_site_eval_metric_round 1\n"));
    assert_non_null(strstr(t, "fednode_clients{state=\"connected\"} 3\n"));
    assert_non_null(strstr(t, "fednode_clients{state=\"refused\"} 1\n"));
    assert_non_null(strstr(t, "fednode_client_deltas_total{outcome=\"refused\"} 2\n"));
    assert_non_null(strstr(t, "fednode_client_rounds_since_merged{client=\"plain\"} 0\n"));
    /* a hostile name: escaped in the label, never a raw newline or quote */
    assert_non_null(strstr(t, "fednode_client_rounds_since_merged{client=\"<script>alert("
                              "\\\"x\\\")</script>&'\\\\\\n\"} 2\n"));
    assert_non_null(strstr(t, "fednode_checkpoint_write_seconds_count 3\n"));
    assert_non_null(strstr(t, "fednode_database_bytes 4096\n"));
    assert_non_null(strstr(t, "fednode_cpu_seconds_total 1.5\n"));
    /* no key material: neither the node's key nor a member's, in hex */
    assert_null(strstr(t, "0707070707"));
    assert_null(strstr(t, "0101010101"));
    free(t);
    /* a client: no clients' families; without a database, no database's */
    s.role = FED_NODE_CLIENT;
    s.have_last = 0;
    c.db = NULL;
    t = render(do_metrics, &c);
    check_exposition(t);
    assert_null(strstr(t, "fednode_clients"));
    assert_null(strstr(t, "fednode_database_bytes"));
    assert_null(strstr(t, "fednode_last_round_accuracy_ratio"));
    free(t);
    s.metrics.kind = FED_METRICS_NONE; /* nothing evaluated: no family */
    s.site.head.kind = FED_METRICS_NONE;
    t = render(do_metrics, &c);
    check_exposition(t);
    assert_null(strstr(t, "fednode_eval_metric"));
    assert_null(strstr(t, "fednode_site_eval_metric"));
    free(t);
}

/* Every outside string on the page is escaped: no element but ours. */
static void test_page_escapes(void **state)
{
    fed_node_snap s;
    fed_http_db db;
    render_ctx c;
    char *t;

    (void)state;
    fill_snap(&s);
    fill_members();
    s.member = members;
    s.nmembers = 2;
    fill_db(&db);
    memset(&c, 0, sizeof c);
    c.s = &s;
    c.db = &db;
    t = render(do_page, &c);
    assert_null(strstr(t, "<script"));
    assert_null(strstr(t, "<b>"));
    assert_null(strstr(t, "<i>"));
    assert_non_null(strstr(t, "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;\\"));
    assert_non_null(strstr(t, "tcp://&lt;script&gt;"));
    assert_non_null(strstr(t, "&lt;b&gt;median&lt;/b&gt;"));
    assert_non_null(strstr(t, "&lt;i&gt;krum&lt;/i&gt;"));
    /* what the browser test looks for */
    assert_non_null(strstr(t, "<table id='rounds'>"));
    assert_non_null(strstr(t, "data-round='3'"));
    assert_non_null(strstr(t, "<h2>metrics (round 2)</h2>"));
    assert_non_null(strstr(t, "data-metric='auc'>0.8750</td>"));
    assert_non_null(strstr(t, "<h2>site evaluation, pooled (round 1)</h2>\n<table id='site-metrics'>"));
    assert_non_null(strstr(t, "data-metric='auc_bound'>0.0010</td>"));
    assert_non_null(strstr(t, "<table id='members'>"));
    assert_non_null(strstr(t, "<svg xmlns='http://www.w3.org/2000/svg'"));
    assert_non_null(strstr(t, "<polyline"));
    assert_non_null(strstr(t, "http-equiv='refresh'"));
    assert_null(strstr(t, "src="));  /* nothing loaded from elsewhere */
    assert_null(strstr(t, "href='http")); /* links stay on the node */
    assert_null(strstr(t, "id='eval-note'"));
    free(t);
    /* an aggregator whose tensors stay at the sites: its figures marked */
    s.progress.eval_local = 1;
    t = render(do_page, &c);
    assert_non_null(strstr(t, "<p id='eval-note'>not meaningful"));
    free(t);
    /* before the first snapshot */
    c.s = NULL;
    c.db = NULL;
    t = render(do_page, &c);
    assert_non_null(strstr(t, "starting"));
    free(t);
}

static void test_health(void **state)
{
    fed_node_snap s;
    char why[256];
    uint64_t now = 100000;

    (void)state;
    fill_snap(&s);
    assert_int_equal(fed_http_health(NULL, 0, now, why, sizeof why), 0);
    assert_non_null(strstr(why, "starting"));
    s.progress.round_due_ms = now + 1000;
    assert_int_equal(fed_http_health(&s, now - 500, now, why, sizeof why), 1);
    assert_non_null(strstr(why, "round 4 runs"));
    /* the loop stopped turning */
    assert_int_equal(fed_http_health(&s, now - FED_HTTP_STALE_MS - 1, now, why, sizeof why), 0);
    assert_non_null(strstr(why, "has not turned"));
    /* the round is past its deadline and the grace */
    s.progress.round_due_ms = now - FED_HTTP_OVERDUE_MS - 1;
    assert_int_equal(fed_http_health(&s, now, now, why, sizeof why), 0);
    assert_non_null(strstr(why, "overdue"));
    s.progress.round_due_ms = 0;
    s.progress.commit_failures = 2;
    assert_int_equal(fed_http_health(&s, now, now, why, sizeof why), 0);
    assert_non_null(strstr(why, "commits failed"));
    s.progress.commit_failures = 0;
    s.progress.failed = FED_ERR_FULL;
    assert_int_equal(fed_http_health(&s, now, now, why, sizeof why), 0);
    s.progress.failed = FED_OK;
    /* a client its aggregator does not answer */
    s.progress.silent_ms = 42000;
    assert_int_equal(fed_http_health(&s, now, now, why, sizeof why), 0);
    assert_string_equal(why, "no answer from the aggregator for 42 s");
    s.progress.silent_ms = 0;
    s.progress.finished = 1;
    assert_int_equal(fed_http_health(&s, now, now, why, sizeof why), 1);
    assert_non_null(strstr(why, "finished"));
}

static void test_addr(void **state)
{
    struct sockaddr_storage sa;
    socklen_t len;
    int lo;

    (void)state;
    assert_int_equal(fed_http_parse_addr(FED_HTTP_DEFAULT_ADDR, &sa, &len, &lo), FED_OK);
    assert_true(lo);
    assert_int_equal(ntohs(((struct sockaddr_in *)&sa)->sin_port), 9464);
    assert_int_equal(fed_http_parse_addr("9464", &sa, &len, &lo), FED_OK);
    assert_true(lo);
    assert_int_equal(fed_http_parse_addr("localhost:0/", &sa, &len, &lo), FED_OK);
    assert_true(lo);
    assert_int_equal(fed_http_parse_addr("0.0.0.0:9464", &sa, &len, &lo), FED_OK);
    assert_false(lo);
    assert_int_equal(fed_http_parse_addr("http://[::1]:9464", &sa, &len, &lo), FED_OK);
    assert_true(lo);
    assert_int_equal(sa.ss_family, AF_INET6);
    assert_int_equal(fed_http_parse_addr("[::]:1", &sa, &len, &lo), FED_OK);
    assert_false(lo);
    assert_int_equal(fed_http_parse_addr("example.org:80", &sa, &len, &lo), FED_ERR_INVAL);
    assert_int_equal(fed_http_parse_addr("127.0.0.1:65536", &sa, &len, &lo), FED_ERR_INVAL);
    assert_int_equal(fed_http_parse_addr("127.0.0.1:", &sa, &len, &lo), FED_ERR_INVAL);
    assert_int_equal(fed_http_parse_addr("[::1]9464", &sa, &len, &lo), FED_ERR_INVAL);
    assert_int_equal(fed_http_parse_addr("", &sa, &len, &lo), FED_ERR_INVAL);
}

/* Each member's last contribution and last merge, from a real database. */
static void test_db_members(void **state)
{
    char path[512];
    fed_store *st = NULL;
    fed_node_snap s;
    fed_http_db d;
    static const struct {
        uint64_t round;
        int who, accepted;
        const char *reason;
    } rows[] = {{1, 0, 1, ""}, {1, 1, 1, ""}, {2, 0, 1, ""}, {2, 1, 0, "missing"},
                {3, 0, 0, "krum"}, {3, 1, 0, "missing"}};

    (void)state;
    fed_test_path(path, sizeof path, "http.db");
    assert_int_equal(fed_store_open(path, NULL, &st), FED_OK);
    /* before the first commit nobody has missed a round: 0, not 2^64 - 1 */
    fill_members();
    memset(&s, 0, sizeof s);
    s.role = FED_NODE_AGGREGATOR;
    s.member = members;
    s.nmembers = 2;
    assert_int_equal(fed_http_db_load(st, path, &s, 10, &d), FED_OK);
    assert_int_equal(d.nrounds, 0);
    {
        render_ctx c;
        char *t;

        memset(&c, 0, sizeof c);
        c.s = &s;
        c.db = &d;
        t = render(do_metrics, &c);
        check_exposition(t);
        assert_non_null(strstr(t, "fednode_client_rounds_since_merged{client=\"plain\"} 0\n"));
        assert_null(strstr(t, "18446744073709551615"));
        free(t);
    }
    fed_http_db_fini(&d);
    assert_int_equal(fed_store_begin(st), FED_OK);
    for (uint64_t r = 1; r <= 3; r++) {
        fed_store_round row;

        memset(&row, 0, sizeof row);
        row.round = r;
        row.accuracy = NAN;
        row.loss = NAN;
        assert_int_equal(fed_store_put_round(st, &row), FED_OK);
    }
    fill_members();
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fed_store_contrib c;

        memset(&c, 0, sizeof c);
        c.round = rows[i].round;
        memcpy(c.peer_key, members[rows[i].who].key, 32);
        c.accepted = rows[i].accepted;
        snprintf(c.reason, sizeof c.reason, "%s", rows[i].reason);
        assert_int_equal(fed_store_put_contribution(st, &c), FED_OK);
    }
    assert_int_equal(fed_store_commit(st), FED_OK);
    memset(&s, 0, sizeof s);
    s.member = members;
    s.nmembers = 2;
    assert_int_equal(fed_http_db_load(st, path, &s, 10, &d), FED_OK);
    assert_true(d.ok);
    assert_int_equal(d.nrounds, 3);
    assert_int_equal(d.rounds[0].round, 3);
    assert_int_equal(d.member[0].last_round, 3);
    assert_false(d.member[0].accepted);
    assert_string_equal(d.member[0].reason, "krum");
    assert_int_equal(d.member[0].last_merged, 2);
    assert_int_equal(d.member[1].last_merged, 1);
    assert_string_equal(d.member[1].reason, "missing");
    assert_true(d.db_bytes > 0);
    fed_http_db_fini(&d);
    fed_store_close(st);
}

/* ---- the server against a publisher ---- */

typedef struct publisher {
    fed_node_snap_board *b;
    int stop;          /* __atomic */
    uint64_t published; /* __atomic */
    uint64_t worst_ms; /* the longest one publish took */
    int failed;        /* a publish failed (read after the join) */
} publisher;

static void *publish_loop(void *arg)
{
    publisher *p = arg;
    fed_node_snap s;

    fill_snap(&s);
    fill_members();
    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
        uint64_t t0 = ms_now(), dt;
        fed_node_round_info r;

        s.progress.round++;
        s.wire.bytes_out += 100;
        memset(&r, 0, sizeof r);
        r.start_ms = 0;
        r.end_ms = 300;
        r.sampled = 2;
        r.merged = 2;
        fed_node_snap_note_round(p->b, &r); /* the loop's side, too */
        if (fed_node_snap_publish(p->b, &s, members, 2) != FED_OK)
            p->failed = 1;
        dt = ms_now() - t0;
        if (dt > p->worst_ms)
            p->worst_ms = dt;
        __atomic_add_fetch(&p->published, 1, __ATOMIC_RELEASE);
        usleep(200);
    }
    return NULL;
}

typedef struct getter {
    uint16_t port;
    int n, ok;
} getter;

static void *get_loop(void *arg)
{
    getter *g = arg;
    static const char *const paths[] = {"/metrics", "/", "/healthz", "/status.json", "/nope"};
    static const int want[] = {200, 200, 200, 503, 404};

    for (int i = 0; i < g->n; i++) {
        int k = i % 5, st = http_get(g->port, paths[k], NULL, NULL);

        g->ok += st == want[k];
    }
    return NULL;
}

static fed_node_snap_board *board;
static fed_http *server;

static uint16_t start_server(uint32_t request_ms, uint32_t idle_s)
{
    fed_http_cfg c;

    memset(&c, 0, sizeof c);
    c.addr = "127.0.0.1:0";
    c.board = board;
    c.db_path = "/nonexistent/fednode-test.db"; /* status.json: 503 */
    c.request_ms = request_ms;
    c.idle_s = idle_s;
    assert_int_equal(fed_http_start(&c, &server), FED_OK);
    assert_true(fed_http_port(server) > 0);
    return fed_http_port(server);
}

static int board_setup(void **state)
{
    (void)state;
    fed_test_log_quiet();
    return fed_node_snap_board_new(&board) == FED_OK ? 0 : -1;
}

static int board_teardown(void **state)
{
    (void)state;
    fed_http_stop(server);
    server = NULL;
    fed_node_snap_board_free(board);
    board = NULL;
    fed_test_log_default();
    return 0;
}

static void test_server_races(void **state)
{
    publisher p = {board, 0, 0, 0, 0};
    pthread_t tp, tg[4];
    getter g[4];
    uint16_t port;
    char *body = NULL;

    (void)state;
    port = start_server(0, 0);
    /* before the first snapshot: starting, 503 */
    assert_int_equal(http_get(port, "/healthz", &body, NULL), 503);
    assert_non_null(strstr(body, "starting"));
    free(body);
    assert_int_equal(pthread_create(&tp, NULL, publish_loop, &p), 0);
    while (!__atomic_load_n(&p.published, __ATOMIC_ACQUIRE))
        usleep(1000);
    for (int i = 0; i < 4; i++) {
        g[i].port = port;
        g[i].n = 50;
        g[i].ok = 0;
        assert_int_equal(pthread_create(&tg[i], NULL, get_loop, &g[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(tg[i], NULL);
        assert_int_equal(g[i].ok, g[i].n);
    }
    __atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
    pthread_join(tp, NULL);
    assert_false(p.failed);
    assert_true(p.published > 10);
    /* a POST is refused; the page names the node */
    {
        int fd = dial(port);
        char b[256] = {0};
        const char *req = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                          "Connection: close\r\n\r\nabc";

        assert_true(fd >= 0);
        assert_int_equal(send_all(fd, req, strlen(req)), 0);
        assert_true(recv(fd, b, sizeof b - 1, 0) > 0);
        assert_non_null(strstr(b, " 405 "));
        close(fd);
    }
    assert_int_equal(http_get(port, "/", &body, NULL), 200);
    assert_non_null(strstr(body, "&lt;script&gt;"));
    assert_null(strstr(body, "<script"));
    free(body);
    fed_http_stop(server);
    server = NULL;
}

static void test_server_hostile(void **state)
{
    publisher p = {board, 0, 0, 0, 0};
    pthread_t tp;
    hostile_result r;
    uint16_t port;
    uint64_t before, during;

    (void)state;
    /* deadlines short for a short test, yet long enough that a scrape on a
       loaded host is not cut (1.5 s cut 27 of 200 under CI-like load) */
    port = start_server(4000, 2);
    assert_int_equal(pthread_create(&tp, NULL, publish_loop, &p), 0);
    /* a scrape before the first snapshot has no rounds to show: wait for it
       (CI's loaded host answered 9 of 200 scrapes before the publisher ran) */
    while (!__atomic_load_n(&p.published, __ATOMIC_ACQUIRE))
        usleep(1000);
    before = __atomic_load_n(&p.published, __ATOMIC_ACQUIRE);
    run_hostiles(port, 8, 200, &r);
    during = __atomic_load_n(&p.published, __ATOMIC_ACQUIRE) - before;
    __atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
    pthread_join(tp, NULL);
    print_message("hostile: idle closed %d, 10 MB headers refused %d, trickle cut %d, "
                  "%d/%d scrapes ok (%d asked again) in %.1f s; the publisher's slowest "
                  "publish %llu ms, %llu publishes meanwhile\n",
                  r.idle_closed, r.big_refused, r.trickle_cut, r.scrapes_ok, r.scrapes,
                  r.scrapes_retried, r.seconds, (unsigned long long)p.worst_ms,
                  (unsigned long long)during);
    assert_true(r.idle_closed);
    assert_true(r.big_refused);
    assert_true(r.trickle_cut);
    assert_int_equal(r.scrapes_ok, 200);
    /* the loop's side never waits on HTTP: it kept publishing throughout
       (a count, not a time; it publishes every 0.2 ms for seconds) */
    assert_true(during >= 10);
    /* still serving */
    assert_int_equal(http_get(port, "/healthz", NULL, NULL), 200);
    fed_http_stop(server);
    server = NULL;
}

/* ---- what a request may not carry (issue 31, item 13) ---- */

/* Sends n raw bytes (NULs and all) on a new connection and reads until the
 * server closes it, or 5 s with nothing more (a behaviour bound: no answer
 * in 5 s counts as none). The first answer's status (0: none) and how many
 * answers came (status lines); *closed: the server closed the connection;
 * *said: whether what came holds want (NULL: not looked for). */
static int raw_request(uint16_t port, const char *req, size_t n, int *answers, int *closed,
                       const char *want, int *said)
{
    char buf[65536];
    size_t len = 0;
    int fd = dial(port), status = 0;
    struct timeval tv = {5, 0};

    *answers = 0;
    *closed = 0;
    if (fd < 0)
        return 0;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (send_all(fd, req, n) == 0) {
        for (;;) {
            ssize_t k = recv(fd, buf + len, sizeof buf - 1 - len, 0);

            if (k == 0)
                *closed = 1;
            if (k <= 0 || (len += (size_t)k) == sizeof buf - 1)
                break;
        }
    }
    close(fd);
    buf[len] = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        status = 0;
    for (const char *p = buf; (p = strstr(p, "HTTP/1.1 ")) != NULL; p++)
        (*answers)++;
    if (said)
        *said = want && strstr(buf, want) != NULL;
    return status;
}

#define REQ(s) s, sizeof(s) - 1 /* a literal with its NULs */

static void test_server_refuses_smuggling(void **state)
{
    uint16_t port;
    int n, closed, said;
    static const struct {
        const char *req;
        size_t len;
        int status;
        const char *what; /* 400: what the answer says */
    } cases[] = {
        {REQ("GET /metrics%00anything HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 400,
         "an encoded NUL (%00) in its URI"},
        {REQ("GET /healthz?x=%00 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 400,
         "an encoded NUL (%00) in its URI"},
        {REQ("GET\0 /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 400,
         "a NUL in its method"},
        {REQ("GET /metrics\0x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 400,
         "a NUL in its URI"},
        {REQ("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5\r\n"
             "Connection: close\r\n\r\nabcde"), 400, "two different Content-Length headers"},
        {REQ("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
             "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n"), 400,
         "a Content-Length beside a Transfer-Encoding"},
        /* still served */
        {REQ("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n"
             "Connection: close\r\n\r\n"), 200, "the same Content-Length twice"},
        {REQ("GET /%6detrics?a=1&b=%41 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 200,
         "an encoded letter and a query"},
        {REQ("GET  /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 200,
         "spaces around the path"},
        {REQ("HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 200, "HEAD"},
        {REQ("GET /metrics%2500 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 404,
         "%25 then 00: a literal \"%00\", not a NUL"},
    };
    publisher p = {board, 0, 0, 0, 0};
    pthread_t tp;

    (void)state;
    port = start_server(0, 0);
    assert_int_equal(pthread_create(&tp, NULL, publish_loop, &p), 0);
    while (!__atomic_load_n(&p.published, __ATOMIC_ACQUIRE))
        usleep(1000);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st = raw_request(port, cases[i].req, cases[i].len, &n, &closed,
                             cases[i].what, &said);

        if (st != cases[i].status)
            print_message("%s: %d, not %d\n", cases[i].what, st, cases[i].status);
        assert_int_equal(st, cases[i].status);
        assert_int_equal(n, 1);
        if (st == 400) { /* says why, and closes: nothing after it is read */
            assert_true(said);
            assert_true(closed);
        }
    }
    /* the smuggling pattern: the request behind the first Content-Length's
       end is not served, and the connection is closed after the 400 */
    {
        static const char smuggle[] =
            "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 45\r\n"
            "\r\n"
            "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: 0\r\n\r\n";

        assert_int_equal(raw_request(port, smuggle, sizeof smuggle - 1, &n, &closed,
                                     "two different Content-Length headers", &said),
                         400);
        assert_true(said);
        assert_int_equal(n, 1);
        assert_true(closed);
    }
    __atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
    pthread_join(tp, NULL);
    fed_http_stop(server);
    server = NULL;
}

/* A non-loopback IPv4 address of this host (0: none). */
static in_addr_t outside_addr(void)
{
    struct ifaddrs *ifs = NULL;
    in_addr_t a = 0;

    if (getifaddrs(&ifs) != 0)
        return 0;
    for (struct ifaddrs *i = ifs; i && !a; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            in_addr_t v = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;

            if ((ntohl(v) >> 24) != 127)
                a = v;
        }
    freeifaddrs(ifs);
    return a;
}

/* GET /status.json from src (the server bound to 0.0.0.0): its body. */
static char *status_json_from(uint16_t port, in_addr_t src)
{
    struct sockaddr_in a;
    const char *req = "GET /status.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char buf[65536], *sep;
    size_t len = 0;
    ssize_t k;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = src;
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(send_all(fd, req, strlen(req)), 0);
    while (len < sizeof buf - 1 && (k = recv(fd, buf + len, sizeof buf - 1 - len, 0)) > 0)
        len += (size_t)k;
    close(fd);
    buf[len] = 0;
    assert_non_null(strstr(buf, "HTTP/1.1 200 "));
    assert_non_null(sep = strstr(buf, "\r\n\r\n"));
    return strdup(sep + 4);
}

/* /status.json names the database's path to a client on loopback only. */
static void test_status_path_loopback_only(void **state)
{
    char path[512], want[600], *body;
    fed_store *st = NULL;
    fed_http_cfg c;
    in_addr_t outside = outside_addr();

    (void)state;
    fed_test_path(path, sizeof path, "status.db");
    assert_int_equal(fed_store_open(path, NULL, &st), FED_OK);
    fed_store_close(st);
    memset(&c, 0, sizeof c);
    c.addr = "0.0.0.0:0";
    c.board = board;
    c.db_path = path;
    assert_int_equal(fed_http_start(&c, &server), FED_OK);
    snprintf(want, sizeof want, "{\"db\":\"%s\",", path);
    body = status_json_from(fed_http_port(server), htonl(INADDR_LOOPBACK));
    assert_non_null(strstr(body, want));
    free(body);
    if (!outside) {
        print_message("skipped: the path hidden from a client beyond loopback (this host has "
                      "no address but loopback)\n");
    } else {
        body = status_json_from(fed_http_port(server), outside);
        assert_non_null(strstr(body, "{\"db\":null,"));
        assert_null(strstr(body, path));
        assert_null(strstr(body, fed_test_tmpdir()));
        free(body);
    }
    fed_http_stop(server);
    server = NULL;
}

static int board_tmpdir_setup(void **state)
{
    return fed_test_tmpdir_setup(state) == 0 ? board_setup(state) : -1;
}

static int board_tmpdir_teardown(void **state)
{
    board_teardown(state);
    return fed_test_tmpdir_teardown(state);
}

/* ---- a flood of held connections (issue 31, item 12) ---- */

/* GET path with every step bounded: no answer within ms is none (0). A
 * behaviour bound, not a timing: "answered at all within ms". */
static int http_get_within(uint16_t port, const char *path, int ms, char **body)
{
    struct sockaddr_in a;
    char req[256], buf[65536], *sep;
    size_t len = 0;
    uint64_t end = ms_now() + (uint64_t)ms;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), status = 0;
    int ready = 0;

    if (body)
        *body = NULL;
    if (fd < 0)
        return 0;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
             path);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 || errno == EINPROGRESS) {
        struct pollfd pf = {fd, POLLOUT, 0};
        int err = 0;
        socklen_t el = sizeof err;

        while (!ready && ms_now() < end && poll(&pf, 1, 50) >= 0)
            ready = (pf.revents & (POLLOUT | POLLERR | POLLHUP)) && !getsockopt(fd, SOL_SOCKET,
                     SO_ERROR, &err, &el) && !err && (pf.revents & POLLOUT);
    }
    if (ready && send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req)) {
        while (len < sizeof buf - 1 && ms_now() < end) {
            struct pollfd pf = {fd, POLLIN, 0};
            ssize_t k;

            if (poll(&pf, 1, 50) <= 0)
                continue;
            if ((k = recv(fd, buf + len, sizeof buf - 1 - len, 0)) <= 0)
                break;
            len += (size_t)k;
        }
    }
    close(fd);
    buf[len] = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        status = 0;
    if (status && body && (sep = strstr(buf, "\r\n\r\n")))
        *body = strdup(sep + 4);
    return status;
}

typedef struct flood_result {
    int held;        /* connections opened and held (never closed by us) */
    int polls, health_ok, metrics_ok;
    uint64_t slowest_ms; /* the slowest /healthz answer (reported, not checked) */
} flood_result;

/* Opens n connections to port that send nothing and holds them, then asks
 * for /healthz `polls` times and /metrics once, each answered or not within
 * 5 s; then lets the flood go. */
static void run_flood(uint16_t port, int n, int polls, flood_result *r)
{
    int *fds = malloc((size_t)n * sizeof *fds);
    struct sockaddr_in a;

    memset(r, 0, sizeof *r);
    if (!fds)
        return;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fds[i] >= 0 &&
            (connect(fds[i], (struct sockaddr *)&a, sizeof a) == 0 || errno == EINPROGRESS))
            r->held++;
    }
    usleep(200000); /* the flood lands before the first poll */
    for (int i = 0; i < polls; i++) {
        uint64_t t0 = ms_now();

        r->polls++;
        if (http_get_within(port, "/healthz", 5000, NULL) != 200)
            break; /* no answer in 5 s: the check has failed already */
        r->health_ok++;
        if (ms_now() - t0 > r->slowest_ms)
            r->slowest_ms = ms_now() - t0;
    }
    if (r->health_ok == polls) {
        char *body = NULL;

        r->metrics_ok = http_get_within(port, "/metrics", 5000, &body) == 200 && body &&
                        strstr(body, "fednode_rounds_completed_total") != NULL;
        free(body);
    }
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
}

/* How many connections a flood holds: 2,000, fewer when descriptors are
 * short (the soft limit raised as far as it goes). */
static int flood_size(void)
{
    struct rlimit rl;
    int n = 2000;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2300) {
        rl.rlim_cur = rl.rlim_max < 2300 ? rl.rlim_max : 2300;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < 2300)
            n = (int)rl.rlim_cur - 300;
    }
    return n;
}

/* While 2,000 connections that send nothing are held (the cap is 64),
 * /healthz is answered 7 times of 7 and /metrics once, each within 5 s (a
 * bound on "answered at all": before, 0 of 7 came, the cap full and the
 * rest of the flood ahead in the listen backlog). */
static void test_server_flood(void **state)
{
    publisher p = {board, 0, 0, 0, 0};
    pthread_t tp;
    flood_result r;
    uint16_t port;
    int n = flood_size();

    (void)state;
    assert_true(n >= 500); /* a flood past the cap and the listen backlog */
    port = start_server(0, 0);
    assert_int_equal(pthread_create(&tp, NULL, publish_loop, &p), 0);
    while (!__atomic_load_n(&p.published, __ATOMIC_ACQUIRE))
        usleep(1000);
    run_flood(port, n, 7, &r);
    __atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
    pthread_join(tp, NULL);
    print_message("flood: %d connections held; /healthz answered %d of %d polls (the slowest "
                  "in %llu ms), /metrics %s\n",
                  r.held, r.health_ok, r.polls, (unsigned long long)r.slowest_ms,
                  r.metrics_ok ? "answered" : "not answered");
    assert_int_equal(r.held, n);
    assert_int_equal(r.health_ok, 7);
    assert_true(r.metrics_ok);
    /* the flood gone, it serves as before */
    assert_int_equal(http_get_within(port, "/metrics", 5000, NULL), 200);
    fed_http_stop(server);
    server = NULL;
}

/* Listening beyond loopback is said, as a warning; on loopback it is not. */
static void test_beyond_loopback_warns(void **state)
{
    fed_http_cfg c;
    fed_http *h = NULL;

    (void)state;
    memset(&c, 0, sizeof c);
    c.board = board;
    fed_test_log_capture(FED_LOG_WARN);
    c.addr = "127.0.0.1:0";
    assert_int_equal(fed_http_start(&c, &h), FED_OK);
    fed_http_stop(h);
    assert_int_equal(fed_test_log_count("reachable beyond this machine", ""), 0);
    c.addr = "0.0.0.0:0";
    assert_int_equal(fed_http_start(&c, &h), FED_OK);
    fed_http_stop(h);
    fed_test_log_has("is reachable beyond this machine");
    c.addr = "example.org:80";
    assert_int_equal(fed_http_start(&c, &h), FED_ERR_INVAL);
    assert_null(h);
}

/* The listening socket is ours: a port in use is FED_ERR_IO; [::1] serves
 * over IPv6. */
static void test_server_binds(void **state)
{
    fed_http_cfg c;
    fed_http *h = NULL, *h2 = NULL;
    char addr[64];

    (void)state;
    memset(&c, 0, sizeof c);
    c.board = board;
    c.addr = "127.0.0.1:0";
    assert_int_equal(fed_http_start(&c, &h), FED_OK);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", fed_http_port(h));
    c.addr = addr;
    assert_int_equal(fed_http_start(&c, &h2), FED_ERR_IO);
    assert_null(h2);
    fed_http_stop(h);
    c.addr = "[::1]:0";
    if (fed_http_start(&c, &h) != FED_OK) {
        print_message("skipped: serving on [::1] (this host has no IPv6 loopback)\n");
        return;
    }
    {
        struct sockaddr_in6 a;
        const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        char b[256] = {0};
        int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);

        assert_true(fd >= 0);
        memset(&a, 0, sizeof a);
        a.sin6_family = AF_INET6;
        a.sin6_port = htons(fed_http_port(h));
        a.sin6_addr = in6addr_loopback;
        assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
        assert_int_equal(send_all(fd, req, strlen(req)), 0);
        assert_true(recv(fd, b, sizeof b - 1, MSG_WAITALL) > 0);
        assert_non_null(strstr(b, "HTTP/1.1 503 ")); /* no snapshot yet: starting */
        close(fd);
    }
    fed_http_stop(h);
}

/* ---- tool mode for tests/test_http_hostile.sh ---- */

static int hostile_main(int argc, char **argv)
{
    hostile_result r;
    flood_result fr;
    int port, seconds, n = flood_size();

    if (argc != 4 || (port = atoi(argv[2])) <= 0 || port > 65535 || (seconds = atoi(argv[3])) <= 0) {
        fprintf(stderr, "usage: test_http --hostile PORT SECONDS\n");
        return 2;
    }
    run_hostiles((uint16_t)port, seconds, 200, &r);
    printf("hostile: idle_closed=%d big_refused=%d trickle_cut=%d scrapes_ok=%d/%d "
           "asked_again=%d seconds=%.1f\n",
           r.idle_closed, r.big_refused, r.trickle_cut, r.scrapes_ok, r.scrapes,
           r.scrapes_retried, r.seconds);
    run_flood((uint16_t)port, n, 7, &fr);
    printf("flood: held=%d/%d healthz_answered=%d/7 metrics_answered=%d (each within 5 s; "
           "the slowest /healthz %llu ms)\n",
           fr.held, n, fr.health_ok, fr.metrics_ok, (unsigned long long)fr.slowest_ms);
    return r.idle_closed && r.big_refused && r.trickle_cut && r.scrapes_ok == r.scrapes &&
                   fr.held == n && n >= 500 && fr.health_ok == 7 && fr.metrics_ok
               ? 0
               : 1;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_page_escapes),
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_addr),
        cmocka_unit_test_setup_teardown(test_db_members, fed_test_tmpdir_setup,
                                        fed_test_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_server_races, board_setup, board_teardown),
        cmocka_unit_test_setup_teardown(test_server_hostile, board_setup, board_teardown),
        cmocka_unit_test_setup_teardown(test_beyond_loopback_warns, board_setup, board_teardown),
        cmocka_unit_test_setup_teardown(test_server_flood, board_setup, board_teardown),
        cmocka_unit_test_setup_teardown(test_server_binds, board_setup, board_teardown),
        cmocka_unit_test_setup_teardown(test_server_refuses_smuggling, board_setup,
                                        board_teardown),
        cmocka_unit_test_setup_teardown(test_status_path_loopback_only, board_tmpdir_setup,
                                        board_tmpdir_teardown),
    };

    if (argc > 1 && !strcmp(argv[1], "--hostile"))
        return hostile_main(argc, argv);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
