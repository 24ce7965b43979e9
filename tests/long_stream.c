/* long_stream.c - `make test-long`: a 300M-parameter model (1.2 GB of f32)
 * pulled through one CHUNK stream between two processes, as DESIGN's
 * "Transport" has it: the aggregator (child) answers with the MODEL's first
 * frame, the client (parent) asks for each next chunk with a sealed CHUNK
 * PULL request, one at a time. The client writes every chunk straight into
 * its model buffer; the test then checks it bit for bit (regenerating the
 * model chunk by chunk from its seed) and reports each side's peak RSS
 * (getrusage): the client's must stay within the model plus a few frames.
 * FEDNODE_LONG_PARAMS overrides the parameter count (for a quick run). */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/rng.h"
#include "crypto/allow.h"
#include "crypto/arena.h"
#include "gossip/stream.h"
#include "gossip/wire.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0 /* ASan's shadow and quarantine would void the memory bound */
#endif

#define PARAMS_DEFAULT 300000000ull
#define MAX_FRAME ((size_t)16 << 20)
#define DATA_SEED 20240601u
#define EPOCH_AGG 1700000000u
#define EPOCH_CLIENT 1700000100u

typedef struct side {
    fed_crypto_arena *agg, *client; /* both identities; each side uses its own */
    fed_crypto_allow *allow;
    fed_wire *w;
    fed_rng rng;
} side;

static int fail(const char *what, fed_err err)
{
    fprintf(stderr, "long_stream: %s: %s\n", what, fed_strerror(err));
    return 1;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long peak_rss_kib(int who) /* RUSAGE_SELF or RUSAGE_CHILDREN */
{
    struct rusage ru;

    return getrusage(who, &ru) == 0 ? ru.ru_maxrss : -1;
}

static long current_rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;

    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = -1;
    fclose(f);
    return rss < 0 ? -1 : rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len) {
        ssize_t n = write(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;

    while (len) {
        ssize_t n = read(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int send_frame(int fd, const uint8_t *f, size_t len)
{
    uint64_t n = len;

    return write_all(fd, &n, sizeof n) || write_all(fd, f, len) ? -1 : 0;
}

static int recv_frame(int fd, uint8_t *f, size_t cap, size_t *len)
{
    uint64_t n = 0;

    if (read_all(fd, &n, sizeof n) || n > cap || read_all(fd, f, (size_t)n))
        return -1;
    *len = (size_t)n;
    return 0;
}

static fed_crypto_arena *identity(uint64_t seed)
{
    fed_crypto_arena *a = NULL;
    fed_rng rng;

    fed_rng_seed(&rng, seed);
    if (fed_crypto_arena_new(NULL, &a) != FED_OK ||
        fed_crypto_arena_generate(a, fed_rng_random, &rng) != FED_OK)
        exit(1);
    return a;
}

static void side_open(side *s, int is_agg)
{
    fed_wire_cfg cfg;

    s->agg = identity(1);
    s->client = identity(2);
    if (fed_crypto_allow_new(&s->allow) != FED_OK ||
        fed_crypto_allow_add(s->allow, "agg", fed_crypto_arena_pubkey(s->agg)) != FED_OK ||
        fed_crypto_allow_add(s->allow, "client", fed_crypto_arena_pubkey(s->client)) != FED_OK)
        exit(1);
    fed_wire_cfg_default(&cfg);
    cfg.max_frame = MAX_FRAME;
    if (fed_wire_new(&cfg, is_agg ? s->agg : s->client, s->allow, &s->w) != FED_OK)
        exit(1);
    fed_wire_set_epoch(s->w, is_agg ? EPOCH_AGG : EPOCH_CLIENT);
    fed_rng_seed(&s->rng, is_agg ? 11 : 12);
}

static void side_close(side *s)
{
    fed_wire_free(s->w);
    fed_crypto_allow_free(s->allow);
    fed_crypto_arena_free(s->agg);
    fed_crypto_arena_free(s->client);
}

/* ---- the aggregator (child) ---- */

static int aggregator(uint64_t params, int to_client, int from_client)
{
    uint64_t total = params * 4, seq = 1;
    uint8_t *model = fed_malloc(total), *frame = fed_malloc(MAX_FRAME);
    fed_wire_stream_tx *tx = NULL;
    fed_wire_block b;
    fed_wire_hdr h;
    size_t len = 0;
    side s;
    fed_rng data_rng;
    fed_err err;

    side_open(&s, 1);
    if (!model || !frame)
        return fail("aggregator model", FED_ERR_NOMEM);
    fed_rng_seed(&data_rng, DATA_SEED);
    fed_rng_fill(&data_rng, model, total);
    memset(&h, 0, sizeof h);
    h.type = FED_WIRE_MODEL;
    memcpy(h.recipient, fed_crypto_arena_pubkey(s.client), 32);
    h.sender_epoch = EPOCH_AGG;
    h.recipient_epoch = EPOCH_CLIENT;
    h.round = 1;
    h.codec = 1; /* f32, raw */
    memset(&b, 0, sizeof b);
    snprintf(b.settings.spec, sizeof b.settings.spec, "flat:%" PRIu64, params);
    b.settings.local_epochs = 1;
    b.settings.lr = 0.01f;
    err = fed_wire_stream_tx_new(s.w, &h, &b, model, total, 0, fed_rng_random, &s.rng, &tx);
    if (err != FED_OK)
        return fail("stream_tx_new", err);
    /* the MODEL reply: the stream's first frame, carrying chunk 0 */
    err = fed_wire_stream_tx_next(s.w, tx, seq++, fed_rng_random, &s.rng, frame, MAX_FRAME, &len);
    if (err != FED_OK || send_frame(to_client, frame, len))
        return fail("first frame", err ? err : FED_ERR_IO);
    while (!fed_wire_stream_tx_done(tx)) {
        fed_wire_msg m;

        if (recv_frame(from_client, frame, MAX_FRAME, &len))
            return fail("reading a request", FED_ERR_IO);
        err = fed_wire_open(s.w, frame, len, &m);
        if (err != FED_OK)
            return fail("opening a request", err);
        if (m.hdr.type != FED_WIRE_CHUNK || m.block.stream_id != fed_wire_stream_tx_id(tx) ||
            m.block.chunk_index != fed_wire_stream_tx_next_index(tx))
            return fail("unexpected request", FED_ERR_PAYLOAD);
        err =
            fed_wire_stream_tx_next(s.w, tx, seq++, fed_rng_random, &s.rng, frame, MAX_FRAME, &len);
        if (err != FED_OK || send_frame(to_client, frame, len))
            return fail("chunk frame", err ? err : FED_ERR_IO);
    }
    fed_wire_stream_tx_free(s.w, tx);
    side_close(&s);
    fed_free(model);
    fed_free(frame);
    return 0;
}

/* ---- the client (parent) ---- */

typedef struct client_ctx {
    uint8_t *model;
    uint64_t cap;
} client_ctx;

static fed_err model_dst(void *ctx, const fed_wire_msg *first, uint64_t total, uint8_t **dst)
{
    client_ctx *c = ctx;

    (void)first;
    if (total != c->cap)
        return FED_ERR_SHAPE;
    *dst = c->model;
    return FED_OK;
}

#define VERIFY_PIECE ((size_t)1 << 20)

static int verify_model(const uint8_t *model, uint64_t total)
{
    uint8_t *piece = fed_malloc(VERIFY_PIECE);
    fed_rng data_rng;
    int bad = 0;

    if (!piece)
        return 1;
    fed_rng_seed(&data_rng, DATA_SEED);
    for (uint64_t at = 0; at < total && !bad; at += VERIFY_PIECE) {
        size_t n = total - at < VERIFY_PIECE ? (size_t)(total - at) : VERIFY_PIECE;

        fed_rng_fill(&data_rng, piece, n); /* multiples of 8: the same stream */
        bad = memcmp(piece, model + at, n) != 0;
    }
    fed_free(piece);
    return bad;
}

static int client(uint64_t params, int from_agg, int to_agg, double *secs, uint32_t *chunks)
{
    uint64_t total = params * 4, seq = 1;
    client_ctx c = {NULL, total};
    uint8_t *frame = fed_malloc(MAX_FRAME), *req = fed_malloc(4096);
    fed_wire_stream_rx *rx = NULL;
    fed_wire_msg m;
    size_t len = 0;
    double t0;
    side s;
    fed_err err;

    side_open(&s, 0);
    c.model = fed_malloc(total);
    if (!c.model || !frame || !req)
        return fail("client buffers", FED_ERR_NOMEM);
    fed_wire_set_stream_dst(s.w, model_dst, &c);
    t0 = now_s();
    if (recv_frame(from_agg, frame, MAX_FRAME, &len))
        return fail("reading the MODEL reply", FED_ERR_IO);
    err = fed_wire_open(s.w, frame, len, &m);
    if (err != FED_OK || !m.stream)
        return fail("opening the MODEL reply", err ? err : FED_ERR_STREAM);
    rx = m.stream;
    while (!fed_wire_stream_rx_done(rx)) {
        fed_wire_hdr h;
        fed_wire_block b;

        memset(&h, 0, sizeof h);
        h.type = FED_WIRE_CHUNK;
        h.flags = FED_WIRE_FLAG_PULL;
        memcpy(h.recipient, fed_crypto_arena_pubkey(s.agg), 32);
        h.sender_epoch = EPOCH_CLIENT;
        h.recipient_epoch = EPOCH_AGG;
        h.seq = seq++;
        h.round = 1;
        memset(&b, 0, sizeof b);
        b.stream_id = fed_wire_stream_rx_id(rx);
        b.chunk_index = fed_wire_stream_rx_next(rx);
        err = fed_wire_build(s.w, &h, &b, NULL, 0, req, 4096, fed_rng_random, &s.rng, &len);
        if (err != FED_OK || send_frame(to_agg, req, len))
            return fail("pull request", err ? err : FED_ERR_IO);
        if (recv_frame(from_agg, frame, MAX_FRAME, &len))
            return fail("reading a chunk", FED_ERR_IO);
        err = fed_wire_open(s.w, frame, len, &m);
        if (err != FED_OK)
            return fail("opening a chunk", err);
    }
    *secs = now_s() - t0;
    *chunks = fed_wire_stream_rx_chunks(rx);
    err = fed_wire_stream_rx_status(rx);
    if (err != FED_OK)
        return fail("stream status", err);
    fed_wire_stream_close(s.w, rx);
    if (verify_model(c.model, total))
        return fail("the model differs from what was sent", FED_ERR_CORRUPT);
    side_close(&s);
    fed_free(c.model);
    fed_free(frame);
    fed_free(req);
    return 0;
}

int main(void)
{
    const char *env = getenv("FEDNODE_LONG_PARAMS");
    uint64_t params = env ? strtoull(env, NULL, 10) : PARAMS_DEFAULT;
    int down[2], up[2], status = 0, rc;
    long base_kib, client_kib, agg_kib;
    double secs = 0, model_mib = params * 4 / 1048576.0;
    uint32_t chunks = 0;
    pid_t pid;

    fed_log_set_level(FED_LOG_WARN);
    if (params == 0 || pipe(down) || pipe(up))
        return 1;
    pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(down[0]);
        close(up[1]);
        _exit(aggregator(params, down[1], up[0]));
    }
    close(down[1]);
    close(up[0]);
    base_kib = current_rss_kib();
    rc = client(params, down[0], up[1], &secs, &chunks);
    close(down[0]);
    close(up[1]);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        rc = 1;
    client_kib = peak_rss_kib(RUSAGE_SELF);
    agg_kib = peak_rss_kib(RUSAGE_CHILDREN);
    printf("long_stream: %" PRIu64 " parameters (%.1f MiB) in %u chunks of <= %zu MiB frames, "
           "pulled one at a time\n",
           params, model_mib, chunks, MAX_FRAME >> 20);
    printf("long_stream: reassembled bit for bit: %s; %.2f s, %.0f MiB/s end to end "
           "(both sides share this machine's cores)\n",
           rc == 0 ? "yes" : "NO", secs, secs > 0 ? model_mib / secs : 0);
    printf("long_stream: peak RSS: client (receiver) %.1f MiB = model %.1f MiB + %.1f MiB "
           "(process baseline %.1f MiB); aggregator (sender) %.1f MiB\n",
           client_kib / 1024.0, model_mib, client_kib / 1024.0 - model_mib, base_kib / 1024.0,
           agg_kib / 1024.0);
    /* The receiver's bound: the model, one frame in hand, the 1 MiB verify
     * piece, a request buffer and some slack for the allocator. */
    if (rc == 0 && !UNDER_ASAN &&
        (double)client_kib / 1024.0 > model_mib + base_kib / 1024.0 + (MAX_FRAME >> 20) + 8) {
        printf("long_stream: receiver memory above model + one frame\n");
        rc = 1;
    }
    return rc;
}
