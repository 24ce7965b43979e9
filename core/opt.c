/* opt.c - option parsing from flags and INI (through libinih) into a
 * caller-owned config struct, driven only by the caller's fed_opt table.
 * Strict: unknown names, bad numbers, values out of range and overlong
 * strings are errors that name the option and where it came from. */
#include "core/opt.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/log.h"

static fed_err opt_fail(fed_opt_error *e, fed_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static fed_err opt_fail(fed_opt_error *e, fed_err err, const char *fmt, ...)
{
    va_list ap;

    if (e) {
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return err;
}

/* Text from a file or the command line as it may go into a message: bytes
 * outside printable ASCII as \xNN and a backslash as \\, so a key or value
 * cannot send escape sequences to a terminal; cut at size with "...". */
static const char *opt_escaped(const char *s, char *buf, size_t size)
{
    static const char hex[] = "0123456789abcdef";
    size_t k = 0;

    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        size_t need = ch == '\\' ? 2 : ch < 0x20 || ch > 0x7e ? 4 : 1;

        if (k + need + 4 > size) {
            memcpy(buf + k, "...", 3);
            k += 3;
            break;
        }
        if (need == 1) {
            buf[k++] = (char)ch;
        } else if (need == 2) {
            buf[k++] = '\\';
            buf[k++] = '\\';
        } else {
            buf[k++] = '\\';
            buf[k++] = 'x';
            buf[k++] = hex[ch >> 4];
            buf[k++] = hex[ch & 15];
        }
    }
    buf[k] = '\0';
    return buf;
}

/* The length of the decimal number at the start of s (is_decimal's
 * grammar), 0 when none. */
static size_t decimal_prefix(const char *s)
{
    const char *v = s;
    int digits = 0;

    if (*v == '+' || *v == '-')
        v++;
    for (; *v >= '0' && *v <= '9'; v++)
        digits++;
    if (*v == '.')
        for (v++; *v >= '0' && *v <= '9'; v++)
            digits++;
    if (!digits)
        return 0;
    if (*v == 'e' || *v == 'E') {
        const char *e = v + 1;

        if (*e == '+' || *e == '-')
            e++;
        if (*e >= '0' && *e <= '9') {
            while (*e >= '0' && *e <= '9')
                e++;
            v = e;
        }
    }
    return (size_t)(v - s);
}

/* A decimal number as people write one: [+-] digits [. digits] [e [+-]
 * digits], at least one digit before the exponent. strtod alone would also
 * take hexadecimal ("0x10" is 16), "inf", "nan" and leading blanks. */
static int is_decimal(const char *v)
{
    size_t len = decimal_prefix(v);

    return len > 0 && v[len] == '\0';
}

double fed_strtod_decimal(const char *s, char **end)
{
    size_t len = decimal_prefix(s);
    char buf[128], *e = NULL;
    double x;

    if (len == 0 || len >= sizeof buf) {
        *end = (char *)s;
        return 0.0;
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
    x = strtod(buf, &e); /* errno as strtod sets it (ERANGE) */
    *end = (char *)s + (e - buf);
    return x;
}

int fed_opt_decimal(const char *v, double *out)
{
    char *end = NULL;
    double x;

    if (!is_decimal(v))
        return 0;
    errno = 0;
    x = strtod(v, &end);
    if (*end || errno || !isfinite(x))
        return 0;
    *out = x;
    return 1;
}

static const fed_opt *find_exact(const fed_opt *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

const fed_opt *fed_opt_find(const fed_opt *t, size_t n, const char *name)
{
    const fed_opt *o = find_exact(t, n, name);

    return o && o->alias_of ? find_exact(t, n, o->alias_of) : o;
}

/* name's option, through an alias with one warning (flag: "--old is
 * deprecated", INI: "file:3: key 'old' is deprecated"). warned (one flag per
 * entry, may be NULL) keeps it to one warning per alias per parse. */
static const fed_opt *resolve(const fed_opt *t, size_t n, const char *name, const char *where,
                              int flag, unsigned char *warned)
{
    const fed_opt *o = find_exact(t, n, name);

    if (!o || !o->alias_of)
        return o;
    if (!warned || !warned[o - t]) {
        if (flag)
            fed_log(FED_LOG_WARN, "--%s is deprecated: use --%s", name, o->alias_of);
        else
            fed_log(FED_LOG_WARN, "%s: key '%s' is deprecated: use '%s'", where, name,
                    o->alias_of);
        if (warned)
            warned[o - t] = 1;
    }
    return find_exact(t, n, o->alias_of);
}

static int parse_bool(const char *v, int *out)
{
    if (!strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
        !strcasecmp(v, "on")) {
        *out = 1;
        return 1;
    }
    if (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") ||
        !strcasecmp(v, "off")) {
        *out = 0;
        return 1;
    }
    return 0;
}

static int in_range(const fed_opt *o, double v)
{
    return !(o->min < o->max) || (v >= o->min && v <= o->max);
}

/* The refusal of value (as given, already checked a number of o's type)
 * outside o's [min, max]: an integer option's bounds as integers, a
 * decimal one's as %g. */
static fed_err range_fail(fed_opt_error *e, const fed_opt *o, const char *where,
                          const char *value)
{
    int dec = o->type == FED_OPT_DOUBLE;
    char lo[40], hi[40];

    if (dec) {
        snprintf(lo, sizeof lo, "%g", o->min);
        snprintf(hi, sizeof hi, "%g", o->max);
    } else {
        snprintf(lo, sizeof lo, "%.0f", o->min);
        snprintf(hi, sizeof hi, "%.0f", o->max);
    }
    return opt_fail(e, FED_ERR_RANGE, "%s: option '%s': %s is outside [%s, %s]", where, o->name,
                    value, lo, hi);
}

static fed_err set_value(const fed_opt *o, void *cfg, const char *v, const char *where,
                         fed_opt_error *e)
{
    char *field = (char *)cfg + o->offset;
    char *end = NULL;
    char shown[128];

    errno = 0;
    switch (o->type) {
    case FED_OPT_BOOL: {
        int b;

        if (!parse_bool(v, &b))
            return opt_fail(e, FED_ERR_BAD_VALUE, "%s: option '%s': '%s' is not a boolean",
                            where, o->name, opt_escaped(v, shown, sizeof shown));
        *(int *)field = b;
        return FED_OK;
    }
    case FED_OPT_INT: {
        long x = strtol(v, &end, 10);

        if (!*v || *end || errno || x < INT32_MIN || x > INT32_MAX)
            return opt_fail(e, FED_ERR_BAD_VALUE, "%s: option '%s': '%s' is not an integer",
                            where, o->name, opt_escaped(v, shown, sizeof shown));
        if (!in_range(o, (double)x)) {
            snprintf(shown, sizeof shown, "%ld", x);
            return range_fail(e, o, where, shown);
        }
        *(int *)field = (int)x;
        return FED_OK;
    }
    case FED_OPT_U64: {
        unsigned long long x;

        if (*v < '0' || *v > '9') /* strtoull would take " -1" as 2^64 - 1 */
            return opt_fail(e, FED_ERR_BAD_VALUE,
                            "%s: option '%s': '%s' is not an unsigned integer", where, o->name,
                            opt_escaped(v, shown, sizeof shown));
        x = strtoull(v, &end, 10);
        if (*end || errno)
            return opt_fail(e, FED_ERR_BAD_VALUE,
                            "%s: option '%s': '%s' is not an unsigned integer", where, o->name,
                            opt_escaped(v, shown, sizeof shown));
        if (!in_range(o, (double)x)) {
            snprintf(shown, sizeof shown, "%llu", x);
            return range_fail(e, o, where, shown);
        }
        *(uint64_t *)field = x;
        return FED_OK;
    }
    case FED_OPT_DOUBLE: {
        double x;

        if (!fed_opt_decimal(v, &x))
            return opt_fail(e, FED_ERR_BAD_VALUE,
                            "%s: option '%s': '%s' is not a decimal number", where, o->name,
                            opt_escaped(v, shown, sizeof shown));
        if (!in_range(o, x)) {
            snprintf(shown, sizeof shown, "%g", x);
            return range_fail(e, o, where, shown);
        }
        *(double *)field = x;
        return FED_OK;
    }
    case FED_OPT_STR: {
        size_t len = strlen(v);

        if (len >= o->size)
            return opt_fail(e, FED_ERR_TOO_LARGE,
                            "%s: option '%s': value is %zu bytes, the limit is %zu", where,
                            o->name, len, o->size - 1);
        memcpy(field, v, len + 1);
        return FED_OK;
    }
    }
    return opt_fail(e, FED_ERR_INTERNAL, "%s: option '%s' has no type", where, o->name);
}

fed_err fed_opt_set(const fed_opt *t, size_t n, void *cfg, const char *name, const char *value,
                    const char *where, fed_opt_error *e)
{
    const fed_opt *o = resolve(t, n, name, where, where[0] == '-', NULL);

    if (!o)
        return opt_fail(e, FED_ERR_UNKNOWN_OPTION, "%s: unknown option '%s'", where, name);
    return set_value(o, cfg, value, where, e);
}

fed_err fed_opt_defaults(const fed_opt *t, size_t n, void *cfg, fed_opt_error *e)
{
    for (size_t i = 0; i < n; i++) {
        const char *def = t[i].def;
        fed_err err;

        if (t[i].alias_of)
            continue;
        if (!def || !*def) {
            char *field = (char *)cfg + t[i].offset;

            switch (t[i].type) {
            case FED_OPT_BOOL:
            case FED_OPT_INT: *(int *)field = 0; break;
            case FED_OPT_U64: *(uint64_t *)field = 0; break;
            case FED_OPT_DOUBLE: *(double *)field = 0.0; break;
            case FED_OPT_STR: field[0] = '\0'; break;
            }
            continue;
        }
        err = set_value(&t[i], cfg, def, "default", e);
        if (err)
            return err;
    }
    return FED_OK;
}

/* Where a flag set an option first: argv[argi], with its value in the next
 * argument when words is 2. */
typedef struct argv_seen {
    int argi; /* + 1; 0: not yet */
    int words;
} argv_seen;

/* The words of an option as given ("--lr 0.5", "--lr=0.5", "--no-x"). */
static const char *argv_words(char **argv, const argv_seen *s, char *buf, size_t size)
{
    char a[64], b[64]; /* (buf: at least 130) */

    opt_escaped(argv[s->argi - 1], a, sizeof a);
    if (s->words == 2)
        snprintf(buf, size, "%s %s", a, opt_escaped(argv[s->argi], b, sizeof b));
    else
        snprintf(buf, size, "%s", a);
    return buf;
}

/* An option set twice from the command line: an error naming both, since
 * only one of them could take effect (the INI parser refuses a key twice
 * alike). An alias and its option are one option. */
static fed_err argv_twice(const fed_opt *o, char **argv, const argv_seen *first,
                          const argv_seen *again, fed_opt_error *e)
{
    char w1[160], w2[160];
    const char *a = argv[first->argi - 1] + 2, *b = argv[again->argi - 1] + 2;
    size_t la, lb;

    if (o->type == FED_OPT_BOOL && !strncmp(a, "no-", 3) && strcmp(o->name, a)) /* --no-x */
        a += 3;
    if (o->type == FED_OPT_BOOL && !strncmp(b, "no-", 3) && strcmp(o->name, b))
        b += 3;
    la = strcspn(a, "=");
    lb = strcspn(b, "=");

    argv_words(argv, first, w1, sizeof w1);
    argv_words(argv, again, w2, sizeof w2);
    if (la == lb && !strncmp(a, b, la))
        return opt_fail(e, FED_ERR_EXISTS, "option '--%s' given twice ('%s' and '%s'): give it "
                        "once", o->name, w1, w2);
    return opt_fail(e, FED_ERR_EXISTS, "'%s' and '%s' set the same option '--%s': give it once",
                    w1, w2, o->name);
}

/* skip_config: fed_opt_load read "--config FILE" already; pass over it when
 * the table does not declare a "config" option of its own. given (n, may be
 * NULL): 1 for each option a flag set. */
static fed_err parse_argv(const fed_opt *t, size_t n, void *cfg, int argc, char **argv,
                          char **pos, int *npos, fed_opt_error *e, int skip_config,
                          unsigned char *given)
{
    unsigned char *warned = fed_calloc(n ? n : 1, 1);
    argv_seen *seen = fed_calloc(n ? n : 1, sizeof *seen);
    fed_err err = FED_OK;
    int only_pos = 0;

    if (!warned || !seen) {
        err = opt_fail(e, FED_ERR_NOMEM, "out of memory while parsing options");
        goto out;
    }

    *npos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        char name[128];
        const char *eq, *value;
        const fed_opt *o;
        char where[160];
        argv_seen here = {i + 1, 1};
        size_t len;

        if (only_pos || a[0] != '-' || a[1] != '-' || a[2] == '\0') {
            if (!only_pos && strcmp(a, "--") == 0) {
                only_pos = 1;
                continue;
            }
            pos[(*npos)++] = argv[i];
            continue;
        }
        a += 2;
        eq = strchr(a, '=');
        len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof name) {
            err = opt_fail(e, FED_ERR_UNKNOWN_OPTION, "unknown option '--%s'",
                           opt_escaped(a, where, 44));
            break;
        }
        memcpy(name, a, len);
        name[len] = '\0';
        snprintf(where, sizeof where, "--%s", name);
        o = resolve(t, n, name, where, 1, warned);
        if (!o && skip_config && strcmp(name, "config") == 0) {
            if (!eq && ++i >= argc) {
                err = opt_fail(e, FED_ERR_BAD_VALUE, "option '--config' needs a value");
                break;
            }
            continue;
        }
        if (!o && !eq && strncmp(name, "no-", 3) == 0) {
            o = resolve(t, n, name + 3, where, 1, warned);
            if (o && o->type == FED_OPT_BOOL) {
                if (seen[o - t].argi) {
                    err = argv_twice(o, argv, &seen[o - t], &here, e);
                    break;
                }
                seen[o - t] = here;
                *(int *)((char *)cfg + o->offset) = 0;
                continue;
            }
            o = NULL;
        }
        if (!o) {
            err = opt_fail(e, FED_ERR_UNKNOWN_OPTION, "unknown option '--%s'",
                           opt_escaped(name, where, sizeof where));
            break;
        }
        if (eq) {
            value = eq + 1;
        } else if (o->type == FED_OPT_BOOL) {
            value = "1";
        } else if (o->implicit && (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)) {
            value = o->implicit;
        } else if (i + 1 < argc) {
            value = argv[++i];
            here.words = 2;
        } else {
            err = opt_fail(e, FED_ERR_BAD_VALUE, "option '--%s' needs a value", name);
            break;
        }
        if (seen[o - t].argi) {
            err = argv_twice(o, argv, &seen[o - t], &here, e);
            break;
        }
        seen[o - t] = here;
        if ((err = set_value(o, cfg, value, where, e)) != FED_OK)
            break;
    }
    for (size_t k = 0; err == FED_OK && given && k < n; k++)
        given[k] |= seen[k].argi != 0;
out:
    fed_free(seen);
    fed_free(warned);
    return err;
}

fed_err fed_opt_parse_argv(const fed_opt *t, size_t n, void *cfg, int argc, char **argv,
                           char **pos, int *npos, fed_opt_error *e)
{
    return parse_argv(t, n, cfg, argc, argv, pos, npos, e, 0, NULL);
}

/* libinih plumbing: a reader over a memory buffer that counts lines, so the
 * handler can name the line of a bad key. first[i] is the line that set
 * option i (0: not yet): sections do not change names, so a key given twice
 * anywhere in the file is refused rather than the last one winning. */
typedef struct ini_state {
    const fed_opt *t;
    size_t n;
    void *cfg;
    const char *label;
    const char *p, *end;
    int line;
    int indented; /* the line starts with a space or tab */
    fed_err err;
    fed_opt_error *e;
    int *first;
    unsigned char *warned; /* (n) an alias warned about already */
} ini_state;

static char *ini_read_line(char *str, int num, void *stream)
{
    ini_state *s = stream;
    size_t room = (size_t)num - 1, k = 0;

    if (s->p >= s->end || s->err)
        return NULL;
    s->line++;
    s->indented = *s->p == ' ' || *s->p == '\t';
    while (s->p < s->end && *s->p != '\n') {
        if (*s->p == '\0') {
            s->err = opt_fail(s->e, FED_ERR_FORMAT, "%s:%d: NUL byte in config", s->label,
                              s->line);
            return NULL;
        }
        if (k == room) {
            s->err = opt_fail(s->e, FED_ERR_TOO_LARGE, "%s:%d: line longer than %d bytes",
                              s->label, s->line, num - 1);
            return NULL;
        }
        str[k++] = *s->p++;
    }
    if (s->p < s->end)
        s->p++; /* the newline */
    str[k] = '\0';
    return str;
}

static int ini_on_value(void *user, const char *section, const char *name, const char *value)
{
    ini_state *s = user;
    const fed_opt *o;
    int *first;
    char where[600], shown[128];

    (void)section;
    if (s->err)
        return 0;
    snprintf(where, sizeof where, "%s:%d", s->label, s->line);
    /* an alias and its option share one slot: both in a file is a key twice */
    o = resolve(s->t, s->n, name, where, 0, s->warned);
    first = o ? &s->first[o - s->t] : NULL;
    if (first && *first && s->indented) /* libinih: an indented line continues the key */
        s->err = opt_fail(s->e, FED_ERR_FORMAT,
                          "%s: indented line continues option '%s' from line %d "
                          "(a value is one line)", where, name, *first);
    else if (first && *first)
        s->err = opt_fail(s->e, FED_ERR_EXISTS, "%s: option '%s' given twice (first at line %d)",
                          where, name, *first);
    else if (!o)
        s->err = opt_fail(s->e, FED_ERR_UNKNOWN_OPTION, "%s: unknown option '%s'", where,
                          opt_escaped(name, shown, sizeof shown));
    else
        s->err = set_value(o, s->cfg, value, where, s->e);
    if (s->err == FED_OK)
        *first = s->line;
    return s->err == FED_OK;
}

/* given (n, may be NULL): 1 for each option the file set. */
static fed_err opt_ini_buf(const fed_opt *t, size_t n, void *cfg, const char *buf, size_t len,
                             const char *label, fed_opt_error *e, unsigned char *given)
{
    ini_state s = {t, n, cfg, label, buf, buf + len, 0, 0, FED_OK, e, NULL, NULL};
    fed_err err;
    int rc;

    s.first = fed_calloc(n ? n : 1, sizeof *s.first);
    s.warned = fed_calloc(n ? n : 1, 1);
    if (!s.first || !s.warned) {
        fed_free(s.first);
        fed_free(s.warned);
        return opt_fail(e, FED_ERR_NOMEM, "%s: out of memory while parsing", label);
    }
    rc = ini_parse_stream(ini_read_line, &s, ini_on_value, &s);
    if (s.err)
        err = s.err;
    else if (rc > 0)
        err = opt_fail(e, FED_ERR_FORMAT, "%s:%d: syntax error", label, rc);
    else if (rc < 0)
        err = opt_fail(e, FED_ERR_NOMEM, "%s: out of memory while parsing", label);
    else
        err = FED_OK;
    for (size_t k = 0; err == FED_OK && given && k < n; k++)
        given[k] |= s.first[k] != 0;
    fed_free(s.first);
    fed_free(s.warned);
    return err;
}

fed_err fed_opt_parse_ini_buf(const fed_opt *t, size_t n, void *cfg, const char *buf,
                              size_t len, const char *label, fed_opt_error *e)
{
    return opt_ini_buf(t, n, cfg, buf, len, label, e, NULL);
}

static fed_err opt_ini_file(const fed_opt *t, size_t n, void *cfg, const char *path,
                              fed_opt_error *e, unsigned char *given)
{
    enum { MAX_CONFIG = 1 << 20 };
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len;
    fed_err err;

    if (!f)
        return opt_fail(e, FED_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    buf = fed_malloc(MAX_CONFIG + 1);
    if (!buf) {
        err = opt_fail(e, FED_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    len = fread(buf, 1, MAX_CONFIG + 1, f);
    if (ferror(f)) {
        err = opt_fail(e, FED_ERR_IO, "%s: read error", path);
        goto out;
    }
    if (len > MAX_CONFIG) {
        err = opt_fail(e, FED_ERR_TOO_LARGE, "%s: config file over %d bytes", path, MAX_CONFIG);
        goto out;
    }
    err = opt_ini_buf(t, n, cfg, buf, len, path, e, given);
out:
    fed_free(buf);
    fclose(f);
    return err;
}

fed_err fed_opt_parse_ini(const fed_opt *t, size_t n, void *cfg, const char *path,
                          fed_opt_error *e)
{
    return opt_ini_file(t, n, cfg, path, e, NULL);
}

fed_err fed_opt_load_given(const fed_opt *t, size_t n, void *cfg, int argc, char **argv,
                           char **pos, int *npos, unsigned char *given, fed_opt_error *e)
{
    const char *config = NULL;
    fed_err err = fed_opt_defaults(t, n, cfg, e);

    if (err)
        return err;
    if (given)
        memset(given, 0, n);
    for (int i = 0; i < argc; i++) {
        const char *file = NULL;

        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            file = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            file = argv[i] + 9;
        if (file && config) /* one file holds the settings: no silent winner */
            return opt_fail(e, FED_ERR_EXISTS, "option '--config' given twice ('%s' and '%s'): "
                            "put the settings in one file (flags still override its keys)",
                            config, file);
        if (file)
            config = file;
    }
    if (config) {
        err = opt_ini_file(t, n, cfg, config, e, given);
        if (err)
            return err;
    }
    return parse_argv(t, n, cfg, argc, argv, pos, npos, e, 1, given);
}

fed_err fed_opt_load(const fed_opt *t, size_t n, void *cfg, int argc, char **argv, char **pos,
                     int *npos, fed_opt_error *e)
{
    return fed_opt_load_given(t, n, cfg, argc, argv, pos, npos, NULL, e);
}

static const char *type_name(fed_opt_type type)
{
    switch (type) {
    case FED_OPT_BOOL: return "";
    case FED_OPT_INT: return " N";
    case FED_OPT_U64: return " N";
    case FED_OPT_DOUBLE: return " X";
    case FED_OPT_STR: return " S";
    }
    return "";
}

void fed_opt_print_help(const fed_opt *t, size_t n, FILE *out)
{
    for (size_t i = 0; i < n; i++) {
        char flag[64];

        if (t[i].alias_of) /* deprecated spellings are not advertised */
            continue;
        snprintf(flag, sizeof flag, "--%s%s", t[i].name, type_name(t[i].type));
        fprintf(out, "  %-24s %s", flag, t[i].help ? t[i].help : "");
        if (t[i].def && *t[i].def)
            fprintf(out, " (default %s)", t[i].def);
        if (t[i].implicit)
            fprintf(out, " (given bare: %s)", t[i].implicit);
        fputc('\n', out);
    }
}

/* One word (no blanks) as roff into w (cap bytes): its length. */
static size_t man_word(const char *s, size_t n, char *w, size_t cap)
{
    size_t k = 0;

    for (size_t i = 0; i < n && k + 3 < cap; i++) {
        if (s[i] == '\\')
            w[k++] = '\\', w[k++] = 'e';
        else if (s[i] == '-')
            w[k++] = '\\', w[k++] = '-';
        else
            w[k++] = s[i];
    }
    w[k] = '\0';
    return k;
}

void fed_opt_man_text(FILE *out, const char *s)
{
    enum { WIDTH = 78 };
    size_t col = 0;

    while (*s) {
        char w[256];
        size_t n = strcspn(s, " \t\n"), len;
        int sentence_end;

        if (n == 0) { /* blanks between words: one space, where the line goes on */
            s++;
            continue;
        }
        len = man_word(s, n, w, sizeof w);
        sentence_end = n > 1 && strchr(".?!", s[n - 1]) && s[n] != '\0' &&
                       strncmp(s, "e.g.", n) != 0 && strncmp(s, "i.e.", n) != 0;
        if (col && col + 1 + len > WIDTH) {
            fputc('\n', out);
            col = 0;
        }
        if (col) {
            fputc(' ', out);
            col++;
        } else if (w[0] == '.' || w[0] == '\'') {
            fputs("\\&", out); /* not a request */
            col += 2;
        }
        fputs(w, out);
        col += len;
        s += n;
        if (sentence_end) { /* a new sentence on a new line, as roff wants */
            fputc('\n', out);
            col = 0;
        }
    }
}

void fed_opt_print_man(const fed_opt *t, size_t n, FILE *out)
{
    for (size_t i = 0; i < n; i++) {
        const char *type = type_name(t[i].type);
        char word[256], text[2048];

        if (t[i].alias_of)
            continue;
        snprintf(text, sizeof text, "--%s", t[i].name);
        man_word(text, strlen(text), word, sizeof word);
        fprintf(out, ".TP\n\\fB%s\\fR", word);
        if (*type)
            fprintf(out, " \\fI%s\\fR", type + 1);
        fputc('\n', out);
        snprintf(text, sizeof text, "%s%s%s%s", t[i].help ? t[i].help : "",
                 t[i].def && *t[i].def ? " (default " : "", t[i].def ? t[i].def : "",
                 t[i].def && *t[i].def ? ")" : "");
        if (text[0]) {
            fed_opt_man_text(out, text);
            fputc('\n', out);
        }
    }
}
