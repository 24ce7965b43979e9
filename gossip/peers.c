/* peers.c - the peer table, its text format and its signed entries
 * (peers.h). Owns the entries; checks membership and signatures against the
 * allow-list it is given, never changes it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "crypto/identity.h"
#include "crypto/envelope.h"
#include "gossip/peers.h"

#define PEERS_LINE_MAX 1023
#define PEERS_FILE_MAX ((size_t)1 << 20)
#define PEERS_MAX 4096
#define ENTRY_DOMAIN "fednode peer entry v1"

typedef struct peer_entry {
    uint8_t key[32];
    char url[FED_GOSSIP_URL_MAX + 1];
    int is_signed;        /* learned from a PEERS frame; 0: a seed line */
    int sig_ok;           /* se's signature verifies under its voucher's key */
    fed_gossip_entry se;  /* the signed form */
} peer_entry;

struct fed_gossip_peers {
    peer_entry *e;
    size_t n, cap;
};

/* ---- signed entries ---- */

static int url_ok(const char *url)
{
    size_t n = strlen(url);

    if (n < 1 || n > FED_GOSSIP_URL_MAX ||
        (strncmp(url, "tcp://", 6) != 0 && strncmp(url, "ipc://", 6) != 0))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (url[i] < 0x21 || url[i] > 0x7e)
            return 0;
    return 1;
}

/* What the voucher signs: the domain, then the entry's bytes before the
 * signature. */
static void entry_digest(const uint8_t *bytes, size_t len, uint8_t digest[64])
{
    fed_crypto_digest((const uint8_t *)ENTRY_DOMAIN, sizeof ENTRY_DOMAIN - 1, bytes, len, digest);
}

static size_t entry_body(const fed_gossip_entry *e, uint8_t *out)
{
    size_t l = strlen(e->url);

    memcpy(out, e->key, 32);
    fed_put_u64le(out + 32, e->expiry);
    memcpy(out + 40, e->voucher, 32);
    out[72] = (uint8_t)l;
    memcpy(out + 73, e->url, l);
    return 73 + l;
}

fed_err fed_gossip_entry_sign(const fed_crypto_arena *voucher, const uint8_t key[32],
                              const char *url, uint64_t expiry, fed_gossip_entry *out)
{
    uint8_t body[FED_GOSSIP_ENTRY_MAX], digest[64];
    size_t len;

    memset(out, 0, sizeof *out);
    if (!url || !url_ok(url))
        return FED_ERR_FORMAT;
    memcpy(out->key, key, 32);
    out->expiry = expiry;
    memcpy(out->voucher, fed_crypto_arena_pubkey(voucher), 32);
    snprintf(out->url, sizeof out->url, "%s", url);
    len = entry_body(out, body);
    entry_digest(body, len, digest);
    return fed_crypto_arena_sign(voucher, digest, sizeof digest, out->sig);
}

size_t fed_gossip_entry_encode(const fed_gossip_entry *e, uint8_t *out)
{
    size_t len = entry_body(e, out);

    memcpy(out + len, e->sig, 64);
    return len + 64;
}

fed_err fed_gossip_entry_decode(const uint8_t *in, size_t len, fed_gossip_entry *e, size_t *used)
{
    size_t l;

    memset(e, 0, sizeof *e);
    if (len < 73 || (l = in[72]) < 1 || len < 73 + l + 64)
        return FED_ERR_PAYLOAD;
    memcpy(e->key, in, 32);
    e->expiry = fed_get_u64le(in + 32);
    memcpy(e->voucher, in + 40, 32);
    memcpy(e->url, in + 73, l);
    e->url[l] = 0;
    if (strlen(e->url) != l || !url_ok(e->url))
        return FED_ERR_PAYLOAD;
    memcpy(e->sig, in + 73 + l, 64);
    *used = 73 + l + 64;
    return FED_OK;
}

/* The signature alone: whether the voucher named in e signed these bytes
 * (which no later check can change; membership and expiry can). */
static fed_err entry_sig_verify(const fed_gossip_entry *e)
{
    uint8_t body[FED_GOSSIP_ENTRY_MAX], digest[64];
    size_t len = entry_body(e, body);

    entry_digest(body, len, digest);
    return fed_crypto_verify_digest(e->voucher, digest, e->sig);
}

/* The checks that depend on the time and the allow-list, cheap. */
static fed_err entry_still_valid(const fed_gossip_entry *e, const fed_crypto_allow *allow,
                                 uint64_t now_s)
{
    if (e->expiry <= now_s)
        return FED_ERR_EXPIRED;
    if (!fed_crypto_allow_find(allow, e->voucher))
        return FED_ERR_UNKNOWN_SENDER;
    return FED_OK;
}

fed_err fed_gossip_entry_verify(const fed_gossip_entry *e, const fed_crypto_allow *allow,
                                uint64_t now_s)
{
    fed_err err = entry_still_valid(e, allow, now_s);

    return err != FED_OK ? err : entry_sig_verify(e);
}

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
    if (!url_ok(url))
        return line_error(line, err_line, FED_ERR_FORMAT, "the URL is not tcp:// or ipc://");
    if (!member_key(allow, name, e->key))
        return line_error(line, err_line, FED_ERR_UNKNOWN_SENDER,
                          "not a member of the allow-list");
    memcpy(e->url, url, strlen(url) + 1); /* url_ok: at most FED_GOSSIP_URL_MAX */
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
    p->cap = cap;
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

/* Whether e replaces what the table holds for its key: any signed entry
 * replaces a seed line; between signed entries the later expiry wins (a
 * peer re-signs its own with a later one, and a voucher re-vouches with
 * one), and at equal expiry the greater URL, so that every peer keeps the
 * same entry whatever order the gossip brings them in. An older entry
 * replayed, or still going round after its key moved, changes nothing. */
static int entry_newer(const peer_entry *pe, const fed_gossip_entry *e)
{
    if (!pe->is_signed)
        return 1;
    if (e->expiry != pe->se.expiry)
        return e->expiry > pe->se.expiry;
    return strcmp(e->url, pe->url) > 0;
}

/* The slot of key in the table, NULL if none. */
static peer_entry *find_entry(const fed_gossip_peers *p, const uint8_t key[32])
{
    for (size_t i = 0; i < p->n; i++)
        if (!memcmp(p->e[i].key, key, 32))
            return &p->e[i];
    return NULL;
}

/* A new slot for key (its URL empty). */
static fed_err add_entry(fed_gossip_peers *p, const uint8_t key[32], peer_entry **out)
{
    if (p->n == PEERS_MAX)
        return FED_ERR_FULL;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        peer_entry *ne = fed_realloc(p->e, cap * sizeof *ne);

        if (!ne)
            return FED_ERR_NOMEM;
        p->e = ne;
        p->cap = cap;
    }
    *out = &p->e[p->n++];
    memset(*out, 0, sizeof **out);
    memcpy((*out)->key, key, 32);
    return FED_OK;
}

/* learn and offer: e into the table when it is newer than what the table
 * holds, its signature verified (only then) when check_sig, which refuses
 * it on a bad one, or else verified once for the verdict kept. */
static fed_err take_entry(fed_gossip_peers *p, const fed_gossip_entry *e, int check_sig,
                          int *what)
{
    peer_entry *pe = find_entry(p, e->key);
    int sig_ok;
    fed_err err;

    if (what)
        *what = FED_GOSSIP_KEPT;
    if (pe && !entry_newer(pe, e))
        return FED_OK;
    sig_ok = entry_sig_verify(e) == FED_OK; /* once: the bytes stay as they are */
    if (check_sig && !sig_ok)
        return FED_ERR_SIGNATURE;
    if (!pe && (err = add_entry(p, e->key, &pe)) != FED_OK)
        return err;
    if (what)
        *what = strcmp(pe->url, e->url) ? FED_GOSSIP_MOVED : FED_GOSSIP_TAKEN;
    snprintf(pe->url, sizeof pe->url, "%s", e->url);
    pe->is_signed = 1;
    pe->sig_ok = sig_ok;
    pe->se = *e;
    return FED_OK;
}

fed_err fed_gossip_peers_learn(fed_gossip_peers *p, const fed_gossip_entry *e, int *what)
{
    return take_entry(p, e, 0, what);
}

fed_err fed_gossip_peers_offer(fed_gossip_peers *p, const fed_gossip_entry *e,
                               const fed_crypto_allow *allow, uint64_t now_s, int *what)
{
    fed_err err = entry_still_valid(e, allow, now_s);

    if (what)
        *what = FED_GOSSIP_KEPT;
    return err != FED_OK ? err : take_entry(p, e, 1, what);
}

/* Whether the slot's signed entry counts at now_s: its signature held when
 * it was learned, it has not expired, its voucher is in allow. */
static int entry_counts(const peer_entry *pe, const fed_crypto_allow *allow, uint64_t now_s)
{
    return pe->is_signed && pe->sig_ok && entry_still_valid(&pe->se, allow, now_s) == FED_OK;
}

/* Asked for every frame a vouched-for peer sends, before it is opened: the
 * signature's verdict is the one taken when the entry was learned, so this
 * costs a scan and an allow-list lookup, not an Ed25519 verification that
 * anyone claiming the key could make us repeat. */
int fed_gossip_peers_vouched(const fed_gossip_peers *p, const uint8_t key[32],
                             const fed_crypto_allow *allow, uint64_t now_s)
{
    const peer_entry *pe;

    if (fed_crypto_allow_find(allow, key) || !(pe = find_entry(p, key)))
        return 0;
    return memcmp(pe->se.voucher, key, 32) != 0 && entry_counts(pe, allow, now_s);
}

const fed_gossip_entry *fed_gossip_peers_valid(const fed_gossip_peers *p, size_t i,
                                               const fed_crypto_allow *allow, uint64_t now_s)
{
    return entry_counts(&p->e[i], allow, now_s) ? &p->e[i].se : NULL;
}

size_t fed_gossip_peers_count(const fed_gossip_peers *p) { return p->n; }

void fed_gossip_peers_get(const fed_gossip_peers *p, size_t i, const uint8_t **key,
                          const char **url)
{
    *key = p->e[i].key;
    *url = p->e[i].url;
}
