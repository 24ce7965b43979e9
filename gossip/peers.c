/* peers.c - the peer table and its text format (peers.h). Owns the entries;
 * checks membership against the allow-list it is given, never changes it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "crypto/identity.h"
#include "gossip/peers.h"

#define PEERS_LINE_MAX 1023
#define PEERS_FILE_MAX ((size_t)1 << 20)

typedef struct peer_entry {
    uint8_t key[32];
    char url[FED_GOSSIP_URL_MAX + 1];
} peer_entry;

struct fed_gossip_peers {
    peer_entry *e;
    size_t n;
};

fed_err fed_gossip_peers_new(fed_gossip_peers **out)
{
    *out = fed_calloc(1, sizeof **out);
    return *out ? FED_OK : FED_ERR_NOMEM;
}

void fed_gossip_peers_free(fed_gossip_peers *p)
{
    if (!p)
        return;
    fed_free(p->e);
    fed_free(p);
}

static fed_err line_error(int line, int *err_line, fed_err e, const char *why)
{
    fed_log(FED_LOG_ERROR, "peers: line %d: %s", line, why);
    if (err_line)
        *err_line = line;
    return e;
}

/* The member a NAME (or base64 key) names. */
static int member_key(const fed_crypto_allow *allow, const char *name, uint8_t key[32])
{
    for (size_t i = 0; i < fed_crypto_allow_count(allow); i++) {
        const char *nm;
        const uint8_t *pk;

        fed_crypto_allow_get(allow, i, &nm, &pk);
        if (!strcmp(nm, name)) {
            memcpy(key, pk, 32);
            return 1;
        }
    }
    return fed_crypto_pk_from_base64(name, strlen(name), key) == FED_OK &&
           fed_crypto_allow_find(allow, key) != NULL;
}

/* One line into e (*got = 1), or a blank/comment line (*got = 0). */
static fed_err parse_line(const fed_crypto_allow *allow, const char *s, size_t len, int line,
                          peer_entry *e, int *got, int *err_line)
{
    char buf[PEERS_LINE_MAX + 1], name[128], url[FED_GOSSIP_URL_MAX + 2], extra[2];
    const char *hash;
    int k;

    *got = 0;
    if (len > PEERS_LINE_MAX)
        return line_error(line, err_line, FED_ERR_FORMAT, "longer than 1023 characters");
    memcpy(buf, s, len);
    buf[len] = '\0';
    if ((hash = strchr(buf, '#')))
        buf[hash - buf] = '\0';
    k = sscanf(buf, "%127s %256s %1s", name, url, extra);
    if (k <= 0)
        return FED_OK;
    if (k != 2)
        return line_error(line, err_line, FED_ERR_FORMAT, "expected NAME URL");
    if (strlen(url) > FED_GOSSIP_URL_MAX ||
        (strncmp(url, "tcp://", 6) != 0 && strncmp(url, "ipc://", 6) != 0))
        return line_error(line, err_line, FED_ERR_FORMAT, "the URL is not tcp:// or ipc://");
    if (!member_key(allow, name, e->key))
        return line_error(line, err_line, FED_ERR_UNKNOWN_SENDER,
                          "not a member of the allow-list");
    snprintf(e->url, sizeof e->url, "%s", url);
    *got = 1;
    return FED_OK;
}

fed_err fed_gossip_peers_parse(fed_gossip_peers *p, const fed_crypto_allow *allow,
                               const char *text, size_t len, int *err_line)
{
    size_t cap = 1, n = 0, at = 0;
    peer_entry *e;
    fed_err err = FED_OK;
    int line = 0;

    if (err_line)
        *err_line = 0;
    for (size_t i = 0; i < len; i++)
        cap += text[i] == '\n';
    if (!(e = fed_calloc(cap, sizeof *e)))
        return FED_ERR_NOMEM;
    while (at <= len && err == FED_OK) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        int got = 0;

        line++;
        if (memchr(text + at, '\0', end - at))
            err = line_error(line, err_line, FED_ERR_FORMAT, "NUL byte in line");
        else
            err = parse_line(allow, text + at, end - at, line, &e[n], &got, err_line);
        for (size_t j = 0; got && err == FED_OK && j < n; j++)
            if (!memcmp(e[j].key, e[n].key, 32))
                err = line_error(line, err_line, FED_ERR_EXISTS, "the same member twice");
        n += (size_t)got;
        if (!nl)
            break;
        at = end + 1;
    }
    if (err != FED_OK) {
        fed_free(e);
        return err;
    }
    fed_free(p->e);
    p->e = e;
    p->n = n;
    return FED_OK;
}

fed_err fed_gossip_peers_load(fed_gossip_peers *p, const fed_crypto_allow *allow, const char *path,
                              int *err_line)
{
    FILE *f = fopen(path, "re");
    char *buf = NULL;
    size_t len;
    fed_err e = FED_OK;

    if (err_line)
        *err_line = 0;
    if (!f) {
        fed_log(FED_LOG_ERROR, "peers %s: %s", path, strerror(errno));
        return errno == ENOENT ? FED_ERR_NOTFOUND : FED_ERR_IO;
    }
    if (!(buf = fed_malloc(PEERS_FILE_MAX + 1))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    len = fread(buf, 1, PEERS_FILE_MAX + 1, f);
    if (ferror(f))
        e = FED_ERR_IO;
    else if (len > PEERS_FILE_MAX)
        e = FED_ERR_TOO_LARGE;
    else
        e = fed_gossip_peers_parse(p, allow, buf, len, err_line);
out:
    fed_free(buf);
    fclose(f);
    return e;
}

size_t fed_gossip_peers_count(const fed_gossip_peers *p) { return p->n; }

void fed_gossip_peers_get(const fed_gossip_peers *p, size_t i, const uint8_t **key,
                          const char **url)
{
    *key = p->e[i].key;
    *url = p->e[i].url;
}
