/* allow.c - allow-list parsing, lookup and reload (format in allow.h).
 * Owns a key-sorted array of members; a parse builds a new array and swaps it
 * in whole. Must never leave a half-parsed list in place. */
#include "crypto/allow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "crypto/identity.h"

#define LINE_MAX_CHARS 1023
#define FILE_MAX_BYTES (16u << 20)

typedef struct member {
    uint8_t pk[FED_CRYPTO_PK_BYTES]; /* first: the key fed_key_search orders by */
    char name[FED_CRYPTO_NAME_MAX + 1];
    int line;
} member;
_Static_assert(FED_CRYPTO_PK_BYTES == 32 && offsetof(member, pk) == 0,
               "members are fed_key_search records");

struct fed_crypto_allow {
    member *m; /* (n) sorted by pk */
    size_t n;
    uint64_t generation;
};

fed_err fed_crypto_allow_new(fed_crypto_allow **out)
{
    *out = fed_calloc(1, sizeof **out);
    return *out ? FED_OK : FED_ERR_NOMEM;
}

void fed_crypto_allow_free(fed_crypto_allow *al)
{
    if (!al)
        return;
    fed_free(al->m);
    fed_free(al);
}

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

static int name_ok(const char *s, size_t len)
{
    if (len < 1 || len > FED_CRYPTO_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!name_char(s[i]))
            return 0;
    return 1;
}

static int blank(char c) { return c == ' ' || c == '\t'; }

static fed_err line_error(int line, int *err_line, fed_err err, const char *why)
{
    if (err_line)
        *err_line = line;
    fed_log(FED_LOG_ERROR, "allow-list line %d: %s", line, why);
    return err;
}

/* Parses one line (no line end). *got is set when it names a member. */
static fed_err parse_line(const char *s, size_t len, int line, member *m, int *got, int *err_line)
{
    size_t i = 0, name_at, name_len, key_at, key_len;
    fed_err err;

    *got = 0;
    if (len && s[len - 1] == '\r')
        len--;
    while (i < len && blank(s[i]))
        i++;
    if (i == len || s[i] == '#')
        return FED_OK;
    name_at = i;
    while (i < len && !blank(s[i]) && s[i] != '#')
        i++;
    name_len = i - name_at;
    if (!name_ok(s + name_at, name_len))
        return line_error(line, err_line, FED_ERR_FORMAT,
                          "bad name (1-63 characters of A-Z a-z 0-9 . _ -)");
    while (i < len && blank(s[i]))
        i++;
    key_at = i;
    while (i < len && !blank(s[i]) && s[i] != '#')
        i++;
    key_len = i - key_at;
    if (key_len == 0)
        return line_error(line, err_line, FED_ERR_FORMAT, "expected NAME BASE64KEY");
    while (i < len && blank(s[i]))
        i++;
    if (i < len && s[i] != '#')
        return line_error(line, err_line, FED_ERR_FORMAT, "unexpected text after the key");
    err = fed_crypto_pk_from_base64(s + key_at, key_len, m->pk);
    if (err == FED_ERR_FORMAT)
        return line_error(line, err_line, err, "key is not base64 of 32 bytes");
    if (err != FED_OK)
        return line_error(line, err_line, err, "key is not a usable Ed25519 public key");
    memcpy(m->name, s + name_at, name_len);
    m->name[name_len] = 0;
    m->line = line;
    *got = 1;
    return FED_OK;
}

static int by_key(const void *a, const void *b)
{
    return memcmp(((const member *)a)->pk, ((const member *)b)->pk, FED_CRYPTO_PK_BYTES);
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const member *const *)a)->name, (*(const member *const *)b)->name);
}

static int later_line(const member *a, const member *b)
{
    return a->line > b->line ? a->line : b->line;
}

/* Sorts m by key and refuses duplicate keys or names. */
static fed_err sort_unique(member *m, size_t n, int *err_line)
{
    const member **names;

    qsort(m, n, sizeof *m, by_key);
    for (size_t i = 1; i < n; i++)
        if (memcmp(m[i - 1].pk, m[i].pk, FED_CRYPTO_PK_BYTES) == 0)
            return line_error(later_line(&m[i - 1], &m[i]), err_line, FED_ERR_EXISTS,
                              "key listed twice");
    names = fed_malloc((n ? n : 1) * sizeof *names);
    if (!names)
        return FED_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        names[i] = &m[i];
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(names[i - 1]->name, names[i]->name) == 0) {
            int line = later_line(names[i - 1], names[i]);

            fed_free(names);
            return line_error(line, err_line, FED_ERR_EXISTS, "name listed twice");
        }
    }
    fed_free(names);
    return FED_OK;
}

static size_t count_lines(const char *text, size_t len)
{
    size_t n = 1;

    for (size_t i = 0; i < len; i++)
        n += text[i] == '\n';
    return n;
}

fed_err fed_crypto_allow_parse(fed_crypto_allow *al, const char *text, size_t len, int *err_line)
{
    size_t cap = count_lines(text, len), n = 0, at = 0;
    member *m;
    fed_err err = FED_OK;
    int line = 0;

    if (err_line)
        *err_line = 0;
    m = fed_calloc(cap, sizeof *m);
    if (!m)
        return FED_ERR_NOMEM;
    while (at <= len && err == FED_OK) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        int got = 0;

        line++;
        if (end - at > LINE_MAX_CHARS)
            err = line_error(line, err_line, FED_ERR_FORMAT, "line longer than 1023 characters");
        else if (memchr(text + at, '\0', end - at))
            err = line_error(line, err_line, FED_ERR_FORMAT, "NUL byte in line");
        else
            err = parse_line(text + at, end - at, line, &m[n], &got, err_line);
        n += got;
        if (!nl)
            break;
        at = end + 1;
    }
    if (err == FED_OK)
        err = sort_unique(m, n, err_line);
    if (err != FED_OK) {
        fed_free(m);
        return err;
    }
    fed_free(al->m);
    al->m = m;
    al->n = n;
    al->generation++;
    return FED_OK;
}

fed_err fed_crypto_allow_load(fed_crypto_allow *al, const char *path, int *err_line)
{
    FILE *f;
    char *buf = NULL;
    size_t len = 0, cap;
    struct stat st;
    fed_err err = FED_OK;

    if (err_line)
        *err_line = 0;
    f = fopen(path, "re");
    if (!f) {
        int en = errno;

        if (!al->generation) /* the first load: nothing to keep */
            fed_log(FED_LOG_ERROR, "allow-list %s: %s", path, strerror(en));
        else if (en == ENOENT) /* a reload: the list in memory stays as it was */
            fed_log(FED_LOG_ERROR, "allow-list %s is gone (deleted or moved); keeping the %zu "
                    "members read before", path, al->n);
        else
            fed_log(FED_LOG_ERROR, "allow-list %s: %s; keeping the %zu members read before",
                    path, strerror(en), al->n);
        return en == ENOENT ? FED_ERR_NOTFOUND : FED_ERR_IO;
    }
    if (fstat(fileno(f), &st) != 0) {
        err = FED_ERR_IO;
        goto out;
    }
    if (st.st_size > (off_t)FILE_MAX_BYTES) {
        fed_log(FED_LOG_ERROR, "allow-list %s: larger than 16 MiB", path);
        err = FED_ERR_TOO_LARGE;
        goto out;
    }
    cap = (size_t)st.st_size + 1; /* one more byte tells a file that grew */
    buf = fed_malloc(cap);
    if (!buf) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    len = fread(buf, 1, cap, f);
    if (ferror(f) || len == cap) {
        err = FED_ERR_IO;
        goto out;
    }
    err = fed_crypto_allow_parse(al, buf, len, err_line);
    if (err == FED_OK)
        fed_log(FED_LOG_INFO, "allow-list %s: %zu members", path, al->n);
out:
    fed_free(buf);
    fclose(f);
    return err;
}

fed_err fed_crypto_allow_add(fed_crypto_allow *al, const char *name,
                             const uint8_t pk[FED_CRYPTO_PK_BYTES])
{
    size_t len = strlen(name), at;
    member *grown;
    int found;

    if (!name_ok(name, len))
        return FED_ERR_FORMAT;
    at = fed_key_search(al->m, al->n, sizeof *al->m, pk, &found);
    if (found)
        return FED_ERR_EXISTS;
    for (size_t i = 0; i < al->n; i++)
        if (strcmp(al->m[i].name, name) == 0)
            return FED_ERR_EXISTS;
    grown = fed_realloc(al->m, (al->n + 1) * sizeof *grown);
    if (!grown)
        return FED_ERR_NOMEM;
    al->m = grown;
    memmove(al->m + at + 1, al->m + at, (al->n - at) * sizeof *al->m);
    memset(&al->m[at], 0, sizeof al->m[at]);
    memcpy(al->m[at].pk, pk, FED_CRYPTO_PK_BYTES);
    memcpy(al->m[at].name, name, len + 1);
    al->n++;
    al->generation++;
    return FED_OK;
}

const char *fed_crypto_allow_find(const fed_crypto_allow *al, const uint8_t pk[FED_CRYPTO_PK_BYTES])
{
    int found;
    size_t at = fed_key_search(al->m, al->n, sizeof *al->m, pk, &found);

    return found ? al->m[at].name : NULL;
}

size_t fed_crypto_allow_count(const fed_crypto_allow *al) { return al->n; }

void fed_crypto_allow_get(const fed_crypto_allow *al, size_t i, const char **name,
                          const uint8_t **pk)
{
    if (name)
        *name = al->m[i].name;
    if (pk)
        *pk = al->m[i].pk;
}

uint64_t fed_crypto_allow_generation(const fed_crypto_allow *al) { return al->generation; }
