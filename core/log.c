/* log.c - the log sink: one process-wide function pointer set by main(),
 * and the stream sink the programs install (text or JSON lines, log.h).
 * Formats into stack buffers (lines are cut at 1 KiB) and never allocates,
 * so logging works when memory has run out. */
#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 1024
/* a JSON line: every byte of a line escaped as \u00XX, and the fields */
#define LOG_JSON_MAX (6 * LOG_LINE_MAX + 512)

static fed_log_sink log_sink;
static void *log_ctx;
static fed_log_level log_level = FED_LOG_INFO;

void fed_log_set_sink(fed_log_sink sink, void *ctx)
{
    log_sink = sink;
    log_ctx = ctx;
}

void fed_log_set_level(fed_log_level level) { log_level = level; }

fed_log_level fed_log_get_level(void) { return log_level; }

const char *fed_log_level_name(fed_log_level level)
{
    switch (level) {
    case FED_LOG_DEBUG: return "debug";
    case FED_LOG_INFO: return "info";
    case FED_LOG_WARN: return "warn";
    case FED_LOG_ERROR: return "error";
    }
    return "?";
}

int fed_log_level_parse(const char *s, fed_log_level *out)
{
    static const struct {
        const char *name;
        fed_log_level level;
    } names[] = {{"debug", FED_LOG_DEBUG}, {"info", FED_LOG_INFO}, {"warn", FED_LOG_WARN},
                 {"warning", FED_LOG_WARN}, {"error", FED_LOG_ERROR}};

    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *out = names[i].level;
            return 0;
        }
    return -1;
}

int fed_log_format_parse(const char *s, fed_log_format *out)
{
    if (s && !strcmp(s, "text"))
        *out = FED_LOG_TEXT;
    else if (s && !strcmp(s, "json"))
        *out = FED_LOG_JSON;
    else
        return -1;
    return 0;
}

void fed_logv(fed_log_level level, const char *fmt, va_list ap)
{
    char line[LOG_LINE_MAX];

    if (level < log_level)
        return;
    vsnprintf(line, sizeof line, fmt, ap);
    if (log_sink) {
        log_sink(log_ctx, level, line);
    } else if (level >= FED_LOG_WARN) {
        fprintf(stderr, "fednode: %s: %s\n", fed_log_level_name(level), line);
    }
}

void fed_log(fed_log_level level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fed_logv(level, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- JSON -- */

/* The length of the UTF-8 character at s (1-4), or 0 when the bytes there
 * are not one (RFC 3629: no overlong forms, no surrogates, none past
 * U+10FFFF, no truncated sequence). */
static size_t utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xBF;
    size_t n;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* past U+10FFFF */
    } else {
        return 0; /* a continuation byte, C0, C1, F5-FF */
    }
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return n;
}

/* Appends s as a JSON string (quotes included) at out + *at, keeping room
 * for reserve more bytes and the NUL; stops before a character that would
 * not fit, closing the string all the same. 0 when not even "" fits. */
static int put_json_string(char *out, size_t cap, size_t *at, const char *s, size_t reserve)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = *at;

    if (cap < reserve + 3 || i > cap - reserve - 3)
        return 0;
    out[i++] = '"';
    while (*p) {
        char esc[8];
        const char *unit = esc;
        size_t ulen, adv = 1;

        if (*p == '"' || *p == '\\') {
            esc[0] = '\\', esc[1] = (char)*p, ulen = 2;
        } else if (*p == '\n') {
            unit = "\\n", ulen = 2;
        } else if (*p == '\t') {
            unit = "\\t", ulen = 2;
        } else if (*p == '\r') {
            unit = "\\r", ulen = 2;
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            ulen = 6;
        } else if ((adv = utf8_len(p)) == 0) {
            unit = "\\ufffd", ulen = 6, adv = 1;
        } else {
            unit = (const char *)p, ulen = adv;
        }
        if (i + ulen + 1 + reserve + 1 > cap)
            break;
        memcpy(out + i, unit, ulen);
        i += ulen;
        p += adv;
    }
    out[i++] = '"';
    out[i] = '\0';
    *at = i;
    return 1;
}

static int put_raw(char *out, size_t cap, size_t *at, const char *s)
{
    size_t n = strlen(s);

    if (*at + n + 1 > cap)
        return 0;
    memcpy(out + *at, s, n + 1);
    *at += n;
    return 1;
}

/* The bytes s takes as a JSON string, quotes included. */
static size_t json_string_len(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t need = 2;

    while (*p) {
        size_t l = utf8_len(p);

        if (*p == '"' || *p == '\\' || *p == '\n' || *p == '\t' || *p == '\r')
            need += 2, p++;
        else if (*p < 0x20 || *p == 0x7f || l == 0)
            need += 6, p++;
        else
            need += l, p += l;
    }
    return need;
}

size_t fed_log_json_string(char *out, size_t cap, const char *s)
{
    size_t at = 0;

    if (cap == 0)
        return 0;
    out[0] = '\0';
    if (json_string_len(s) + 1 > cap || !put_json_string(out, cap, &at, s, 0))
        return 0;
    return at;
}

/* The component: the word before the first ": ", lowercase letters, digits,
 * '_' and '-', at most 31 bytes. */
static int message_component(const char *msg, char *out, size_t cap)
{
    size_t n = 0;

    while ((msg[n] >= 'a' && msg[n] <= 'z') || (msg[n] >= '0' && msg[n] <= '9') ||
           msg[n] == '_' || msg[n] == '-')
        n++;
    if (n == 0 || n >= cap || msg[n] != ':' || msg[n + 1] != ' ' || msg[0] < 'a' ||
        msg[0] > 'z')
        return 0;
    memcpy(out, msg, n);
    out[n] = '\0';
    return 1;
}

/* The round: the digits after the first "round " (at a word's start), up to
 * 19 of them. */
static int message_round(const char *msg, char *out, size_t cap)
{
    for (const char *p = strstr(msg, "round "); p; p = strstr(p + 1, "round ")) {
        size_t n = 0;

        if (p != msg && ((p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= 'A' && p[-1] <= 'Z') ||
                         p[-1] == '_'))
            continue;
        p += 6;
        while (p[n] >= '0' && p[n] <= '9')
            n++;
        if (n == 0 || n > 19 || n >= cap || (n > 1 && p[0] == '0'))
            return 0;
        memcpy(out, p, n);
        out[n] = '\0';
        return 1;
    }
    return 0;
}

size_t fed_log_format_json(char *out, size_t cap, uint64_t wall_ms, fed_log_level level,
                           const char *node, const char *msg)
{
    char when[64], field[40];
    struct tm tm;
    time_t secs = (time_t)(wall_ms / 1000);
    size_t at = 0;

    if (cap < 2)
        return 0;
    out[0] = '\0';
    if (!gmtime_r(&secs, &tm))
        memset(&tm, 0, sizeof tm);
    snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (unsigned)(wall_ms % 1000));
    if (!put_raw(out, cap, &at, "{\"time\":\"") || !put_raw(out, cap, &at, when) ||
        !put_raw(out, cap, &at, "\",\"level\":\"") ||
        !put_raw(out, cap, &at, fed_log_level_name(level)) || !put_raw(out, cap, &at, "\""))
        goto small;
    /* the fields whole, or none of the line */
    if (node && node[0] &&
        (!put_raw(out, cap, &at, ",\"node\":") || at + json_string_len(node) + 1 > cap ||
         !put_json_string(out, cap, &at, node, 0)))
        goto small;
    if (message_component(msg, field, sizeof field) &&
        (!put_raw(out, cap, &at, ",\"component\":") ||
         at + json_string_len(field) + 1 > cap || !put_json_string(out, cap, &at, field, 0)))
        goto small;
    if (message_round(msg, field, sizeof field) &&
        (!put_raw(out, cap, &at, ",\"round\":") || !put_raw(out, cap, &at, field)))
        goto small;
    /* the message as much as fits, then the closing brace */
    if (!put_raw(out, cap, &at, ",\"message\":") || !put_json_string(out, cap, &at, msg, 1) ||
        !put_raw(out, cap, &at, "}"))
        goto small;
    return at;
small: /* cap too small for the fields: an empty object is still JSON */
    if (cap >= 3) {
        memcpy(out, "{}", 3);
        return 2;
    }
    out[0] = '\0';
    return 0;
}

/* ------------------------------------------------------- stream sink -- */

static struct {
    int fd;
    fed_log_format format;
    int journal; /* fd is $JOURNAL_STREAM: "<N>" level prefixes */
    char program[32];
    char node[96];
} stream = {2, FED_LOG_TEXT, 0, "fednode", ""};
static pthread_mutex_t stream_mu = PTHREAD_MUTEX_INITIALIZER;

/* 1 when fd is the stream $JOURNAL_STREAM ("DEVICE:INODE") names. */
static int is_journal(int fd)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;

    return js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(fd, &st) == 0 &&
           (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nowhere to say it */
        p += w;
        n -= (size_t)w;
    }
}

static uint64_t now_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void stream_sink(void *ctx, fed_log_level level, const char *line)
{
    static const char prio[] = {'7', '6', '4', '3'}; /* debug, info, warn, error */
    char buf[LOG_JSON_MAX], pfx[4] = "";
    uint64_t when = now_wall_ms();
    size_t n;

    (void)ctx;
    pthread_mutex_lock(&stream_mu);
    if (stream.format == FED_LOG_JSON) {
        n = fed_log_format_json(buf, sizeof buf - 1, when, level, stream.node, line);
    } else {
        int w;

        if (stream.journal)
            pfx[0] = '<', pfx[1] = prio[level & 3], pfx[2] = '>', pfx[3] = '\0';
        w = snprintf(buf, sizeof buf - 1, "%s%s: %s: %s", pfx, stream.program,
                     fed_log_level_name(level), line);
        n = w < 0 ? 0 : (size_t)w < sizeof buf - 1 ? (size_t)w : sizeof buf - 2;
    }
    buf[n++] = '\n';
    write_all(stream.fd, buf, n);
    pthread_mutex_unlock(&stream_mu);
}

void fed_log_use_stream(int fd, fed_log_format format, const char *program)
{
    pthread_mutex_lock(&stream_mu);
    stream.fd = fd;
    stream.format = format;
    stream.journal = format == FED_LOG_TEXT && is_journal(fd);
    snprintf(stream.program, sizeof stream.program, "%s", program ? program : "fednode");
    pthread_mutex_unlock(&stream_mu);
    fed_log_set_sink(stream_sink, NULL);
}

void fed_log_stream_set_node(const char *node)
{
    pthread_mutex_lock(&stream_mu);
    snprintf(stream.node, sizeof stream.node, "%s", node ? node : "");
    pthread_mutex_unlock(&stream_mu);
}
