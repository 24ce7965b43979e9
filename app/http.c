/* http.c - the `--http` server (http.h): libmicrohttpd driven from a thread
 * of our own (its epoll fd, our listening socket and a stop pipe under
 * poll), so that the same thread that answers can also close connections
 * past their deadlines between two turns of libmicrohttpd (a header trickled
 * a byte a second keeps its inactivity timeout at bay; our deadline does not
 * care), and accepts connections itself, closing the one idle longest when
 * the cap is reached (libmicrohttpd would stop accepting: a flood of idle
 * connections then kept every scrape and health check out). Every answer is
 * rendered whole into memory (http_render.c) from the node's snapshot and a
 * read-only database connection this thread owns. libmicrohttpd is loaded
 * (dlopen) by the first server started, never linked: a node without --http
 * maps neither it nor the GnuTLS stack it links (2.5 MiB of every process's
 * resident memory, 2 ms of every start's CPU). */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "app/cli.h"
#include "app/http.h"
#include "core/alloc.h"
#include "core/log.h"

/* ---- libmicrohttpd, loaded once for the process ---- */

#define MHD_SONAME "libmicrohttpd.so.12"

/* Its functions this file calls, as their declarations in microhttpd.h type
 * them. Filled once (pthread_once) and read-only after: the library stays
 * loaded until the process exits. */
static struct mhd_api {
    __typeof__(&MHD_start_daemon) start_daemon;
    __typeof__(&MHD_stop_daemon) stop_daemon;
    __typeof__(&MHD_run) run;
    __typeof__(&MHD_get_timeout) get_timeout;
    __typeof__(&MHD_get_daemon_info) get_daemon_info;
    __typeof__(&MHD_add_connection) add_connection;
    __typeof__(&MHD_get_connection_info) get_connection_info;
    __typeof__(&MHD_get_connection_values_n) get_connection_values_n;
    __typeof__(&MHD_create_response_from_buffer) create_response_from_buffer;
    __typeof__(&MHD_add_response_header) add_response_header;
    __typeof__(&MHD_queue_response) queue_response;
    __typeof__(&MHD_destroy_response) destroy_response;
} mhd;
static pthread_once_t mhd_once = PTHREAD_ONCE_INIT;
static int mhd_loaded;

static void mhd_load(void)
{
    void *lib = dlopen(MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
    const char *missing = NULL;

    if (!lib) {
        fed_log(FED_LOG_ERROR, "http: --http needs %s: %s", MHD_SONAME, dlerror());
        return;
    }
#define MHD_SYM(f)                                                                  \
    if (!missing && !(*(void **)&mhd.f = dlsym(lib, "MHD_" #f)))                   \
        missing = "MHD_" #f;
    MHD_SYM(start_daemon)
    MHD_SYM(stop_daemon)
    MHD_SYM(run)
    MHD_SYM(get_timeout)
    MHD_SYM(get_daemon_info)
    MHD_SYM(add_connection)
    MHD_SYM(get_connection_info)
    MHD_SYM(get_connection_values_n)
    MHD_SYM(create_response_from_buffer)
    MHD_SYM(add_response_header)
    MHD_SYM(queue_response)
    MHD_SYM(destroy_response)
#undef MHD_SYM
    if (missing) {
        fed_log(FED_LOG_ERROR, "http: %s has no %s", MHD_SONAME, missing);
        memset(&mhd, 0, sizeof mhd);
        dlclose(lib);
        return;
    }
    mhd_loaded = 1;
}

/* One connection libmicrohttpd holds, as this file tracks it. */
typedef struct http_conn {
    struct http_conn *prev, *next;
    int fd;
    uint64_t since_ms; /* the start of its current wait: for a whole request
                          (since it connected or got its last answer), or for
                          its answer to be taken */
    int busy;          /* a request is in; its answer goes out */
    int cut;           /* shut down (its deadline, or evicted): going */
    size_t uri_len;    /* its request's URI as on_uri saw it, raw: up to a NUL */
    int uri_nul;       /* ... holds "%00" */
} http_conn;

struct fed_http {
    fed_http_cfg cfg;
    char db_path[4096];
    struct MHD_Daemon *mhd;
    pthread_t thread;
    int started;
    int stop_pipe[2];
    int listen_fd;
    uint16_t port;
    fed_store *st;      /* read-only, this thread's */
    http_conn *conns;   /* the thread's (and MHD_stop_daemon's, after it) */
    uint32_t nconns;    /* tracked, ... */
    uint32_t ncut;      /* ... of them shut down, not yet freed by libmicrohttpd */
    uint64_t accept_after; /* out of descriptors: no accept before this (ms) */
    uint64_t requests, cut, evicted, refused_full, refused_big, refused_bad;
    double cpu_s;       /* the thread's, at its last answer */
};

static int marker; /* *req_cls once a request was seen */

static uint64_t now_ms(void) { return fed_node_snap_now_ms(); }

static double thread_cpu_s(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ----------------------------------------------------------- addresses -- */

/* 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104. */
static int addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

fed_err fed_http_parse_addr(const char *addr, struct sockaddr_storage *sa, socklen_t *salen,
                            int *loopback)
{
    char buf[256], *host, *port, *end;
    unsigned long p;

    memset(sa, 0, sizeof *sa);
    if (!addr || strlen(addr) >= sizeof buf)
        return FED_ERR_INVAL;
    if (!strncmp(addr, "http://", 7))
        addr += 7;
    snprintf(buf, sizeof buf, "%s", addr);
    if (buf[0] && buf[strlen(buf) - 1] == '/')
        buf[strlen(buf) - 1] = 0;
    if (buf[0] == '[') { /* [IPv6]:PORT */
        char *close = strchr(buf, ']');

        if (!close || close[1] != ':')
            return FED_ERR_INVAL;
        *close = 0;
        host = buf + 1;
        port = close + 2;
    } else if ((port = strrchr(buf, ':'))) {
        *port++ = 0;
        host = buf;
    } else {
        host = "127.0.0.1";
        port = buf;
    }
    if (!*port || *port < '0' || *port > '9')
        return FED_ERR_INVAL;
    errno = 0;
    p = strtoul(port, &end, 10);
    if (*end || errno || p > 65535)
        return FED_ERR_INVAL;
    if (!strcmp(host, "localhost"))
        host = "127.0.0.1";
    if (buf[0] == '[') {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;

        if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1)
            return FED_ERR_INVAL;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)p);
        *salen = sizeof *s6;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)sa;

        if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
            return FED_ERR_INVAL;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)p);
        *salen = sizeof *s4;
    }
    *loopback = addr_is_loopback((struct sockaddr *)sa);
    return FED_OK;
}

/* ------------------------------------------------------------ answers -- */

static enum MHD_Result send_answer(struct MHD_Connection *c, unsigned status, const char *type,
                                   char *body, size_t len)
{
    struct MHD_Response *r = mhd.create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    enum MHD_Result ok;

    if (!r) {
        free(body);
        return MHD_NO;
    }
    mhd.add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    mhd.add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    mhd.add_response_header(r, "X-Content-Type-Options", "nosniff");
    mhd.add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; style-src 'unsafe-inline'; "
                            "frame-ancestors 'none'");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        mhd.add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (status == MHD_HTTP_BAD_REQUEST) /* what follows it is not read as a request */
        mhd.add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    ok = mhd.queue_response(c, status, r);
    mhd.destroy_response(r);
    return ok;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *text)
{
    size_t n = strlen(text);
    char *b = malloc(n + 1);

    if (!b)
        return MHD_NO;
    memcpy(b, text, n + 1);
    return send_answer(c, status, "text/plain; charset=utf-8", b, n);
}

/* The read-only database, opened on first use (and again after a failure). */
static fed_store *db(fed_http *h)
{
    fed_store_opts o;

    if (h->st || !h->db_path[0])
        return h->st;
    fed_store_opts_default(&o);
    o.flags = FED_STORE_READONLY;
    o.busy_timeout_ms = 1000;
    if (fed_store_open(h->db_path, &o, &h->st) != FED_OK)
        h->st = NULL;
    return h->st;
}

typedef enum page_kind { PAGE_ROOT, PAGE_METRICS, PAGE_STATUS, PAGE_HEALTH, PAGE_NONE } page_kind;

static page_kind page_of(const char *url)
{
    return !strcmp(url, "/")              ? PAGE_ROOT
           : !strcmp(url, "/metrics")     ? PAGE_METRICS
           : !strcmp(url, "/status.json") ? PAGE_STATUS
           : !strcmp(url, "/healthz")     ? PAGE_HEALTH
                                          : PAGE_NONE;
}

/* The client connects from loopback. */
static int client_on_loopback(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        mhd.get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

    return ci && ci->client_addr && addr_is_loopback(ci->client_addr);
}

/* Renders the page into memory and sends it. */
static enum MHD_Result serve(fed_http *h, struct MHD_Connection *c, page_kind k)
{
    const fed_node_snap *s = fed_node_snap_acquire(h->cfg.board);
    uint64_t beat = fed_node_snap_heartbeat_ms(h->cfg.board);
    char *body = NULL, why[256];
    size_t len = 0;
    unsigned status = MHD_HTTP_OK;
    const char *type = "text/plain; charset=utf-8";
    int healthy = fed_http_health(s, beat, now_ms(), why, sizeof why);
    fed_http_proc proc;
    fed_http_db dv;
    FILE *f = open_memstream(&body, &len);

    memset(&dv, 0, sizeof dv);
    memset(&proc, 0, sizeof proc);
    if (!f) {
        fed_node_snap_release(h->cfg.board, s);
        return send_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    }
    if (k == PAGE_ROOT || k == PAGE_METRICS) {
        fed_store *st = db(h);

        if (st && fed_http_db_load(st, h->db_path, s, k == PAGE_ROOT ? FED_HTTP_CHART_ROUNDS : 1,
                                   &dv) != FED_OK)
            dv.ok = 0;
        fed_http_proc_read(&proc);
        proc.http_cpu_s = thread_cpu_s();
        proc.requests = h->requests;
        proc.cut = h->cut;
    }
    switch (k) {
    case PAGE_ROOT:
        type = "text/html; charset=utf-8";
        fed_http_page(f, s, &dv, &proc, healthy, why, h->cfg.refresh_s);
        break;
    case PAGE_METRICS:
        type = "text/plain; version=0.0.4; charset=utf-8";
        fed_http_metrics(f, s, &dv, &proc);
        break;
    case PAGE_STATUS: {
        fed_store *st = db(h);

        type = "application/json";
        /* the database's path says where the node's files are: to this
           machine only */
        if (!st || fed_cli_status_json(f, client_on_loopback(c) ? h->db_path : NULL, st, 10,
                                       10) != FED_OK) {
            status = MHD_HTTP_SERVICE_UNAVAILABLE;
            type = "text/plain; charset=utf-8";
            fputs("the database cannot be read\n", f);
        }
        break;
    }
    case PAGE_HEALTH:
        status = healthy ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
        fprintf(f, "%s\n", why);
        break;
    case PAGE_NONE:
        break;
    }
    fed_http_db_fini(&dv);
    fed_node_snap_release(h->cfg.board, s);
    if (fclose(f) != 0 || !body) {
        free(body);
        return send_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    }
    if (len > FED_HTTP_ANSWER_MAX) {
        free(body);
        h->refused_big++;
        return send_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "answer over its size limit\n");
    }
    return send_answer(c, status, type, body, len);
}

static http_conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        mhd.get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci ? ci->socket_context : NULL;
}

/* Called with each request's URI, raw (before libmicrohttpd splits off the
 * query and decodes it in place; NULL: none): what request_flaw checks. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    http_conn *hc = conn_of(c);

    (void)cls;
    if (hc) {
        hc->uri_len = uri ? strlen(uri) : 0;
        hc->uri_nul = uri && strstr(uri, "%00") != NULL;
    }
    return NULL; /* *req_cls stays NULL for the first on_request */
}

typedef struct head_check {
    const char *length; /* the first Content-Length */
    int lengths_differ, chunked;
} head_check;

static enum MHD_Result check_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    size_t key_size, const char *value, size_t value_size)
{
    head_check *hk = cls;

    (void)kind;
    (void)key_size;
    (void)value_size;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (!hk->length)
            hk->length = value ? value : "";
        else if (strcmp(hk->length, value ? value : "") != 0)
            hk->lengths_differ = 1;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        hk->chunked = 1;
    }
    return MHD_YES;
}

/* What makes a request ambiguous, so that it is refused (400) rather than
 * read one way here and another by whatever sits in front: a NUL in its
 * request line (the method, path and query are compared as C strings here,
 * so "GET\0" or "/metrics%00x" would be served as GET /metrics), two
 * different Content-Lengths, or one beside a Transfer-Encoding (the
 * request-smuggling patterns). NULL when none.
 *
 * libmicrohttpd (0.9.x) hands method, url and version as pointers into the
 * request head it received, [method, method + REQUEST_HEADER_SIZE), with its
 * separators overwritten by NULs: the method's end must be followed by
 * spaces only up to the URI, and the URI's raw length (on_uri's) must reach
 * the space before the version. A head laid out otherwise cannot be
 * checked, and is refused too (tests/test_http.c pins this). */
static const char *request_flaw(struct MHD_Connection *c, const http_conn *hc,
                                const char *method, const char *url, const char *version)
{
    const union MHD_ConnectionInfo *ci =
        mhd.get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    uintptr_t m = (uintptr_t)method, u = (uintptr_t)url, v = (uintptr_t)version;
    head_check hk;

    if (!ci || !(m < u && u < v && v < m + ci->header_size))
        return "its request line cannot be checked";
    for (uintptr_t p = m + strlen(method) + 1; p < u; p++)
        if (method[p - m] != ' ')
            return "a NUL in its method";
    if (hc->uri_nul)
        return "an encoded NUL (%00) in its URI";
    if (v - 1 - u != hc->uri_len)
        return "a NUL in its URI";
    memset(&hk, 0, sizeof hk);
    (void)mhd.get_connection_values_n(c, MHD_HEADER_KIND, check_header, &hk);
    if (hk.lengths_differ)
        return "two different Content-Length headers";
    if (hk.length && hk.chunked)
        return "a Content-Length beside a Transfer-Encoding";
    return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **req_cls)
{
    fed_http *h = cls;
    http_conn *hc = conn_of(c);
    page_kind k;
    enum MHD_Result r;
    const char *flaw;

    (void)upload_data;
    (void)upload_size;
    if (*req_cls) /* a body goes on arriving: the answer is queued already */
        return MHD_YES;
    *req_cls = &marker;
    if (hc) {
        hc->busy = 1;
        hc->since_ms = now_ms();
    }
    h->requests++;
    if (!hc) {
        r = send_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory\n");
    } else if ((flaw = request_flaw(c, hc, method, url, version))) {
        char text[128];

        h->refused_bad++;
        fed_log(FED_LOG_DEBUG, "http: refused a request with %s", flaw);
        snprintf(text, sizeof text, "bad request: %s\n", flaw);
        r = send_text(c, MHD_HTTP_BAD_REQUEST, text);
    } else if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
               strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        r = send_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "read-only: GET or HEAD\n");
    else if ((k = page_of(url)) == PAGE_NONE)
        r = send_text(c, MHD_HTTP_NOT_FOUND, "not found: /, /metrics, /status.json, /healthz\n");
    else
        r = serve(h, c, k);
    h->cpu_s = thread_cpu_s();
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_conn *hc = conn_of(c);

    (void)cls;
    (void)req_cls;
    (void)toe;
    if (hc) {
        hc->busy = 0;
        hc->since_ms = now_ms();
    }
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    fed_http *h = cls;

    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            mhd.get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        http_conn *hc = fed_calloc(1, sizeof *hc);

        *socket_context = hc;
        if (!hc)
            return; /* untracked: libmicrohttpd's own timeout still closes it */
        hc->fd = ci ? ci->connect_fd : -1;
        hc->since_ms = now_ms();
        hc->next = h->conns;
        if (h->conns)
            h->conns->prev = hc;
        h->conns = hc;
        h->nconns++;
    } else {
        http_conn *hc = *socket_context;

        if (!hc)
            return;
        if (hc->cut)
            h->ncut--;
        if (hc->prev)
            hc->prev->next = hc->next;
        else
            h->conns = hc->next;
        if (hc->next)
            hc->next->prev = hc->prev;
        h->nconns--;
        fed_free(hc);
        *socket_context = NULL;
    }
}

__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt,
                                                               va_list ap)
{
    char line[512];
    size_t n;

    (void)cls;
    vsnprintf(line, sizeof line, fmt, ap);
    n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = 0;
    fed_log(FED_LOG_DEBUG, "http: %s", line);
}

/* --------------------------------------------------------- the thread -- */

/* Shuts down the connections past their deadline (libmicrohttpd then sees
 * them end and frees them); returns the ms until the next deadline. */
static uint64_t cut_overdue(fed_http *h)
{
    uint64_t now = now_ms(), next = UINT64_MAX;

    for (http_conn *hc = h->conns; hc; hc = hc->next) {
        uint64_t due = hc->since_ms + h->cfg.request_ms;

        if (hc->cut || hc->fd < 0)
            continue;
        if (now >= due) {
            (void)shutdown(hc->fd, SHUT_RDWR);
            hc->cut = 1;
            h->ncut++;
            h->cut++;
            fed_log(FED_LOG_DEBUG, "http: closed a connection %s for %u ms",
                    hc->busy ? "that did not take its answer" : "that sent no whole request",
                    h->cfg.request_ms);
        } else if (due - now < next) {
            next = due - now;
        }
    }
    return next;
}

/* Shuts down the connection that has waited longest for a request (none
 * is answered: it sent nothing, trickles, or idles between requests) to
 * make room for a new one: 1, or 0 when every one is answering. */
static int evict_idlest(fed_http *h)
{
    http_conn *v = NULL;

    for (http_conn *hc = h->conns; hc; hc = hc->next) /* newest first */
        if (!hc->busy && !hc->cut && hc->fd >= 0 && (!v || hc->since_ms <= v->since_ms))
            v = hc;
    if (!v)
        return 0;
    (void)shutdown(v->fd, SHUT_RDWR);
    v->cut = 1;
    h->ncut++;
    h->evicted++;
    fed_log(FED_LOG_DEBUG, "http: at %u connections: closed the one idle for %" PRIu64 " ms",
            h->cfg.max_conns, now_ms() - v->since_ms);
    return 1;
}

/* Up to max_conns new connections from the listen backlog, each handed to
 * libmicrohttpd, the one idle longest closed for it once max_conns are open
 * (a newcomer is closed instead when every one is answering). At most
 * 2 x max_conns are tracked: those shut down wait for libmicrohttpd's next
 * turn to free them. */
static void accept_new(fed_http *h)
{
    for (uint32_t i = 0; i < h->cfg.max_conns && h->nconns < 2 * h->cfg.max_conns; i++) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        int fd = accept4(h->listen_fd, (struct sockaddr *)&sa, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                fed_log(FED_LOG_WARN, "http: cannot accept a connection: %s", strerror(errno));
                h->accept_after = now_ms() + 100;
            }
            return; /* EAGAIN: the backlog is empty */
        }
        if (h->nconns - h->ncut >= h->cfg.max_conns && !evict_idlest(h)) {
            close(fd);
            h->refused_full++;
            continue;
        }
        if (mhd.add_connection(h->mhd, fd, (struct sockaddr *)&sa, len) != MHD_YES)
            h->refused_full++; /* it closed fd */
    }
}

static void *run(void *arg)
{
    fed_http *h = arg;
    const union MHD_DaemonInfo *di = mhd.get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    struct pollfd pf[3] = {{.fd = di ? di->epoll_fd : -1, .events = POLLIN},
                           {.fd = h->stop_pipe[0], .events = POLLIN},
                           {.fd = h->listen_fd, .events = POLLIN}};
    sigset_t all;

    sigfillset(&all); /* signals are the main thread's (the daemon's self-pipe) */
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    for (;;) {
        MHD_UNSIGNED_LONG_LONG mt = 0;
        uint64_t wait = 1000, next = cut_overdue(h), now = now_ms();

        if (mhd.get_timeout(h->mhd, &mt) == MHD_YES && mt < wait)
            wait = mt;
        if (next < wait)
            wait = next;
        /* the listen backlog waits while those shut down are not yet freed
           (libmicrohttpd's next turn) or descriptors ran out */
        pf[2].fd = h->nconns < 2 * h->cfg.max_conns && now >= h->accept_after ? h->listen_fd
                                                                               : -1;
        if (now < h->accept_after && h->accept_after - now < wait)
            wait = h->accept_after - now;
        pf[2].revents = 0;
        if (poll(pf, 3, (int)wait) < 0 && errno != EINTR)
            break;
        if (pf[1].revents)
            break;
        mhd.run(h->mhd);
        if (pf[2].revents & POLLIN)
            accept_new(h);
    }
    h->cpu_s = thread_cpu_s(); /* read after the join */
    return NULL;
}

/* A listening socket on sa (non-blocking; IPv6 only for an IPv6 address,
 * as libmicrohttpd's own). */
static int listen_on(const struct sockaddr_storage *sa, socklen_t salen)
{
    int one = 1, fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        (sa->ss_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0) ||
        bind(fd, (const struct sockaddr *)sa, salen) != 0 ||
        listen(fd, FED_HTTP_BACKLOG) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

fed_err fed_http_start(const fed_http_cfg *cfg, fed_http **out)
{
    struct sockaddr_storage sa;
    socklen_t salen = 0;
    int loopback = 0;
    fed_http *h;
    char shown[300];

    *out = NULL;
    if (!cfg->board || fed_http_parse_addr(cfg->addr, &sa, &salen, &loopback) != FED_OK)
        return FED_ERR_INVAL;
    if (pthread_once(&mhd_once, mhd_load) != 0 || !mhd_loaded)
        return FED_ERR_NOTFOUND;
    if (!(h = fed_calloc(1, sizeof *h)))
        return FED_ERR_NOMEM;
    h->cfg = *cfg;
    h->stop_pipe[0] = h->stop_pipe[1] = h->listen_fd = -1;
    if (!h->cfg.max_conns)
        h->cfg.max_conns = FED_HTTP_MAX_CONNS;
    if (!h->cfg.conn_memory)
        h->cfg.conn_memory = FED_HTTP_CONN_MEMORY;
    if (!h->cfg.idle_s)
        h->cfg.idle_s = FED_HTTP_IDLE_S;
    if (!h->cfg.request_ms)
        h->cfg.request_ms = FED_HTTP_REQUEST_MS;
    if (!h->cfg.refresh_s)
        h->cfg.refresh_s = 5;
    if (cfg->db_path)
        snprintf(h->db_path, sizeof h->db_path, "%s", cfg->db_path);
    h->cfg.addr = NULL;
    h->cfg.db_path = NULL;
    if (pipe2(h->stop_pipe, O_CLOEXEC) != 0) {
        fed_free(h);
        return FED_ERR_IO;
    }
    if ((h->listen_fd = listen_on(&sa, salen)) < 0) {
        fed_log(FED_LOG_ERROR, "http: cannot listen on %s: %s", cfg->addr, strerror(errno));
        fed_http_stop(h);
        return FED_ERR_IO;
    }
    salen = sizeof sa;
    if (getsockname(h->listen_fd, (struct sockaddr *)&sa, &salen) != 0) {
        fed_http_stop(h);
        return FED_ERR_IO;
    }
    h->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                             : ((struct sockaddr_in *)&sa)->sin_port);
    /* connections come from accept_new; up to twice the cap are tracked
       (those shut down until libmicrohttpd frees them) */
    h->mhd = mhd.start_daemon(
        MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET, 0, NULL, NULL, on_request, h,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * h->cfg.max_conns),
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)h->cfg.conn_memory,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)h->cfg.idle_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h, MHD_OPTION_END);
    if (!h->mhd) {
        fed_log(FED_LOG_ERROR, "http: cannot start libmicrohttpd on %s", cfg->addr);
        fed_http_stop(h);
        return FED_ERR_IO;
    }
    if (sa.ss_family == AF_INET6) {
        char a[INET6_ADDRSTRLEN];

        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, a, sizeof a);
        snprintf(shown, sizeof shown, "http://[%s]:%u", a, h->port);
    } else {
        char a[INET_ADDRSTRLEN];

        inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, a, sizeof a);
        snprintf(shown, sizeof shown, "http://%s:%u", a, h->port);
    }
    if (pthread_create(&h->thread, NULL, run, h) != 0) {
        fed_http_stop(h);
        return FED_ERR_NOMEM;
    }
    h->started = 1;
    fed_log(FED_LOG_INFO,
            "http: serving %s/ (/metrics, /status.json, /healthz): up to %u connections of "
            "%u KiB (past them the one idle longest is closed), idle ones closed after %u s, "
            "a request or answer that takes %u ms cut",
            shown, h->cfg.max_conns, h->cfg.conn_memory >> 10, h->cfg.idle_s,
            h->cfg.request_ms);
    if (!loopback)
        fed_log(FED_LOG_WARN,
                "http: %s is reachable beyond this machine: anyone who can connect reads the "
                "node's status, members and metrics (no authentication); bind it to 127.0.0.1 "
                "unless that is meant", shown);
    *out = h;
    return FED_OK;
}

uint16_t fed_http_port(const fed_http *h) { return h ? h->port : 0; }

void fed_http_stop(fed_http *h)
{
    if (!h)
        return;
    if (h->started) {
        char c = 1;

        if (write(h->stop_pipe[1], &c, 1) < 0) {
            /* the pipe cannot be full: one byte, once */
        }
        pthread_join(h->thread, NULL);
        fed_log(FED_LOG_INFO,
                "http: served %" PRIu64 " requests, cut %" PRIu64
                " connections for their deadline, closed %" PRIu64
                " idle ones for new ones at the cap and %" PRIu64
                " new ones with every one answering, refused %" PRIu64
                " ambiguous requests (400); the HTTP thread used %.3f s CPU",
                h->requests, h->cut, h->evicted, h->refused_full, h->refused_bad, h->cpu_s);
    }
    if (h->mhd)
        mhd.stop_daemon(h->mhd);
    fed_store_close(h->st);
    if (h->listen_fd >= 0)
        close(h->listen_fd);
    if (h->stop_pipe[0] >= 0)
        close(h->stop_pipe[0]);
    if (h->stop_pipe[1] >= 0)
        close(h->stop_pipe[1]);
    fed_free(h);
}
