/* opt.h - the options table: each option declared once, with its name (the
 * flag --NAME and the INI key NAME), type, default, range and help, so that
 * --help, config files, flags and their errors all come from one place.
 * Values land in the caller's config struct at the declared offset. */
#ifndef FED_CORE_OPT_H
#define FED_CORE_OPT_H

#include <stddef.h>
#include <stdio.h>

#include "core/err.h"

typedef enum fed_opt_type {
    FED_OPT_BOOL,   /* int: 0 or 1; "--x", "--no-x", "--x=true|false|1|0|yes|no" */
    FED_OPT_INT,    /* int */
    FED_OPT_U64,    /* uint64_t */
    FED_OPT_DOUBLE, /* double, written in decimal ("0.5", "1e-3"; not "0x1p-1", inf, nan) */
    FED_OPT_STR,    /* char[size] */
} fed_opt_type;

typedef struct fed_opt {
    const char *name; /* "lr": flag --lr, INI key lr */
    fed_opt_type type;
    size_t offset;    /* offsetof(config, field) */
    size_t size;      /* FED_OPT_STR: sizeof the char array */
    const char *def;  /* default as text; NULL or "" means zero / empty */
    double min, max;  /* numeric bounds, checked when min < max */
    const char *help;
    const char *alias_of; /* a deprecated spelling: the canonical option's name
                             (FED_OPT_ALIAS); every other field is unused. Set
                             through it, the value goes to that option and
                             fed_log warns once naming the new spelling */
    const char *implicit; /* FED_OPT_STR: the value of a bare --NAME (no '=',
                             and no value follows: the next argument is
                             another option or there is none); NULL: a
                             value is required (FED_OPT_DEF_IMPLICIT) */
} fed_opt;

/* Shorthand for tables: FED_OPT_DEF(cfgtype, field, "name", TYPE, "def", min, max, "help"). */
#define FED_OPT_DEF(T, field, name, type, def, min, max, help)                 \
    { name, type, offsetof(T, field), sizeof(((T *)0)->field), def, min, max, help, NULL, NULL }

/* A string option that may also be given bare: "--http" alone sets
 * implicit, "--http ADDR" sets ADDR (FED_OPT_DEF_IMPLICIT(T, http, "http",
 * "", "http://127.0.0.1:9464", "help")). */
#define FED_OPT_DEF_IMPLICIT(T, field, name, def, implicit, help)              \
    { name, FED_OPT_STR, offsetof(T, field), sizeof(((T *)0)->field), def, 0, 0, help, NULL,  \
      implicit }

/* A deprecated spelling kept working: FED_OPT_ALIAS("sample", "fraction").
 * Flags and INI keys both accept it; --help does not list it. */
#define FED_OPT_ALIAS(old, canonical)                                          \
    { old, FED_OPT_STR, 0, 0, NULL, 0, 0, NULL, canonical, NULL }

typedef struct fed_opt_error {
    char msg[512]; /* e.g. "run.ini:12: unknown key 'lrr'" */
} fed_opt_error;

/* Every option to its default. */
FED_WUR fed_err fed_opt_defaults(const fed_opt *t, size_t n, void *cfg, fed_opt_error *e);

/* Set one option from text; where ("run.ini:12" or "--lr") prefixes errors. */
FED_WUR fed_err fed_opt_set(const fed_opt *t, size_t n, void *cfg, const char *name,
                            const char *value, const char *where, fed_opt_error *e);

/* The option named name; an alias's canonical option (no warning). */
const fed_opt *fed_opt_find(const fed_opt *t, size_t n, const char *name);

/* Parse argv[0..argc): "--name value", "--name=value", "--flag", "--no-flag".
 * Arguments that are not options go to pos[] (room for argc), counted in
 * *npos; "--" ends the options. An option given twice, or as itself and an
 * alias, is FED_ERR_EXISTS naming both (one of them would be lost). "--config
 * FILE" and "--help" are left to the caller: this only knows the table.
 * Names and values from outside appear in errors escaped (\xNN). */
FED_WUR fed_err fed_opt_parse_argv(const fed_opt *t, size_t n, void *cfg, int argc,
                                   char **argv, char **pos, int *npos, fed_opt_error *e);

/* Parse an INI file or buffer: keys are option names; section headers are
 * allowed and do not change names, so a key may appear once per file (a
 * second one is FED_ERR_EXISTS, naming both lines). Errors name the file,
 * line and key. */
FED_WUR fed_err fed_opt_parse_ini(const fed_opt *t, size_t n, void *cfg, const char *path,
                                  fed_opt_error *e);
FED_WUR fed_err fed_opt_parse_ini_buf(const fed_opt *t, size_t n, void *cfg, const char *buf,
                                      size_t len, const char *label, fed_opt_error *e);

/* Defaults, then the INI file named by a "--config FILE" in argv (if any),
 * then the flags: later sources win (a flag over its key in the file). A
 * second --config is FED_ERR_EXISTS naming both files. */
FED_WUR fed_err fed_opt_load(const fed_opt *t, size_t n, void *cfg, int argc, char **argv,
                             char **pos, int *npos, fed_opt_error *e);
/* The same, and given (n bytes, may be NULL) set to 1 for each entry the file
 * or a flag set (an alias's canonical entry), 0 for those left at their
 * default: for checks that a value alone cannot tell (a flag given with its
 * default value). */
FED_WUR fed_err fed_opt_load_given(const fed_opt *t, size_t n, void *cfg, int argc, char **argv,
                                   char **pos, int *npos, unsigned char *given,
                                   fed_opt_error *e);

/* 1 and *out when v is a finite number written in decimal ([+-] digits [.
 * digits] [e [+-] digits]: no hexadecimal, inf, nan or blanks, which strtod
 * takes), else 0: what FED_OPT_DOUBLE accepts, for parsers of their own. */
int fed_opt_decimal(const char *v, double *out);
/* strtod for the numbers inside spec strings ("topk:0.1", "step:10,0.5"):
 * the decimal number at the start of s (the grammar above), *end after it;
 * none (hexadecimal, inf, nan, a blank first): 0 and *end = s, which the
 * callers' "nothing parsed" check then refuses. errno as strtod sets it. */
double fed_strtod_decimal(const char *s, char **end);

/* One line per option: flag, type, default, help. The caller picks the stream. */
void fed_opt_print_help(const fed_opt *t, size_t n, FILE *out);
/* The same options as man(7) roff, for the man pages the build writes: per
 * option a .TP paragraph, the flag and type (as --help shows them) its tag,
 * the help and default its text. */
void fed_opt_print_man(const fed_opt *t, size_t n, FILE *out);
/* Text as roff text: backslashes as \e, hyphens as \- (so they copy as
 * ASCII), a line that would start with '.' or '\'' guarded by \&. */
void fed_opt_man_text(FILE *out, const char *s);

#endif
