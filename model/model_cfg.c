/* model_cfg.c - the model file a person writes (model_cfg.h): sections of
 * key = value lines parsed into graph nodes for fed_model_new_graph, with
 * every error naming the file, the line and the key, and a shape error the
 * shapes planned up to the layer that failed. Knows the syntax only: what a
 * layer computes is the model's layer table. */
#include "model/model_cfg.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/opt.h"

#define LINE_MAX_LEN 4096
#define VALUE_MAX 65536 /* any count or size a key takes */
#define FED_MODEL_CFG_MAX_COLUMN (1 << 24) /* a column index (the model's input limit) */
#define FED_MODEL_CFG_MAX_NUM (1 << 20)    /* an embedding's ids (CSV's most buckets) */

enum {
    K_NAME = 1 << 0,
    K_OUT = 1 << 1,
    K_KERNEL = 1 << 2,
    K_STRIDE = 1 << 3,
    K_PADDING = 1 << 4,
    K_DILATION = 1 << 5,
    K_SHAPE = 1 << 6,
    K_FEATURES = 1 << 7,
    K_LOSS = 1 << 8,
    K_CLASSES = 1 << 9,
    K_GROUPS = 1 << 10,
    K_INPUT = 1 << 11,
    K_FROM = 1 << 12,
    K_CATEGORICAL = 1 << 13,
    K_COLUMN = 1 << 14,
    K_NUM = 1 << 15,
    K_DIM = 1 << 16,
    K_BIAS = 1 << 17,
    K_P = 1 << 18,
    K_MOMENTUM = 1 << 19,
    K_EPS = 1 << 20,
};

static const char *const KEY_NAMES[] = {"name",     "out",   "kernel",   "stride", "padding",
                                        "dilation", "shape", "features", "loss",   "classes",
                                        "groups",   "input", "from",   "categorical",
                                        "column",   "num",   "dim",    "bias",     "p",
                                        "momentum", "eps"};
#define NKEYS ((int)(sizeof KEY_NAMES / sizeof KEY_NAMES[0]))

/* A section: the keys it takes and those it needs (any one of need_any). */
typedef struct section_def {
    const char *name;
    unsigned keys, need_all, need_any;
    int layer; /* a graph node (not [input] or [output]) */
} section_def;

static const section_def SECTIONS[] = {
    {"input", K_SHAPE | K_FEATURES | K_CATEGORICAL, 0, K_SHAPE | K_FEATURES, 0},
    {"output", K_LOSS | K_CLASSES, 0, 0, 0},
    {"linear", K_NAME | K_INPUT | K_OUT | K_BIAS, K_OUT, 0, 1},
    {"conv",
     K_NAME | K_INPUT | K_OUT | K_KERNEL | K_STRIDE | K_PADDING | K_DILATION | K_GROUPS | K_BIAS,
     K_OUT | K_KERNEL, 0, 1},
    {"maxpool", K_NAME | K_INPUT | K_KERNEL | K_STRIDE | K_PADDING, K_KERNEL, 0, 1},
    {"avgpool", K_NAME | K_INPUT | K_KERNEL | K_STRIDE | K_PADDING, K_KERNEL, 0, 1},
    {"global_avgpool", K_NAME | K_INPUT, 0, 0, 1},
    {"relu", K_NAME | K_INPUT, 0, 0, 1},
    {"flatten", K_NAME | K_INPUT, 0, 0, 1},
    {"leaky_relu", K_NAME | K_INPUT, 0, 0, 1},
    {"gelu", K_NAME | K_INPUT, 0, 0, 1},
    {"silu", K_NAME | K_INPUT, 0, 0, 1},
    {"sigmoid", K_NAME | K_INPUT, 0, 0, 1},
    {"tanh", K_NAME | K_INPUT, 0, 0, 1},
    {"add", K_NAME | K_INPUT | K_FROM, K_FROM, 0, 1},
    {"concat", K_NAME | K_INPUT | K_FROM, K_FROM, 0, 1},
    {"embedding", K_NAME | K_COLUMN | K_NUM | K_DIM, K_COLUMN | K_NUM | K_DIM, 0, 1},
    {"numeric", K_NAME, 0, 0, 1},
    {"layernorm", K_NAME | K_INPUT, 0, 0, 1},
    {"groupnorm", K_NAME | K_INPUT | K_GROUPS, K_GROUPS, 0, 1},
    {"dropout", K_NAME | K_INPUT | K_P, 0, 0, 1},
    {"batchnorm", K_NAME | K_INPUT | K_MOMENTUM | K_EPS, 0, 0, 1},
};
#define NSECTIONS ((int)(sizeof SECTIONS / sizeof SECTIONS[0]))

/* Layers that take the model's input row itself (input = - always). */
static int row_section(const section_def *s)
{
    return !strcmp(s->name, "embedding") || !strcmp(s->name, "numeric");
}

typedef struct cfg_node {
    fed_model_node n;        /* n.name is set when handed out: nodes move */
    char name[32];           /* "" when the file gives none */
    int out_classes; /* out = classes */
    int line;
} cfg_node;

struct fed_model_cfg {
    char label[FED_MODEL_SPEC_MAX];
    char file[256];
    fed_model_shape in; /* declared; classes 0 when unsaid */
    cfg_node *nodes;
    int count, cap;
    fed_model_node *view; /* (count) the nodes handed out */
    int *cat;             /* [input] categorical: the columns (ncat), and its line */
    int ncat, cat_line;
};

/* The parse in progress. */
typedef struct parser {
    fed_model_cfg *c;
    int line;
    const section_def *sec; /* the open section, NULL before the first */
    int sec_line;
    unsigned seen;          /* its keys so far */
    int had_input, had_output;
    char *why;
    size_t cap;
} parser;


/* "N" or "N,M" ... into v (n values, 1 <= each <= max or >= 0 with zero_ok);
 * one value given fills all n when fill. */
static int parse_ints(const char *s, int *v, int n, int fill, int min)
{
    int got = 0;

    for (;;) {
        long x = 0;
        const char *start = s;

        while (isdigit((unsigned char)*s)) {
            x = x * 10 + (*s - '0');
            if (x > VALUE_MAX)
                return 0;
            s++;
        }
        if (s == start || got == n || x < min)
            return 0;
        v[got++] = (int)x;
        if (!*s)
            break;
        if (*s++ != ',')
            return 0;
    }
    if (got == 1 && fill)
        for (int i = 1; i < n; i++)
            v[i] = v[0];
    return got == n || (got == 1 && fill);
}

/* A decimal count in [min, max] into *v. */
static int parse_count(const char *s, long min, long max, int *v)
{
    long x = 0;

    if (!*s)
        return 0;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s) || (x = x * 10 + (*s - '0')) > max)
            return 0;
    }
    if (x < min)
        return 0;
    *v = (int)x;
    return 1;
}

/* [input] categorical = C1,C2,...: distinct column indices. */
static fed_err parse_categorical(parser *p, const char *val)
{
    fed_model_cfg *c = p->c;
    char part[16];
    int n = 1;

    for (const char *q = val; *q; q++)
        n += *q == ',';
    if (n > FED_MODEL_MAX_NODES)
        return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [input] categorical: more than "
                           "%d columns", c->file, p->line, FED_MODEL_MAX_NODES);
    if (!(c->cat = fed_calloc((size_t)n, sizeof *c->cat)))
        return fed_err_why(p->why, p->cap, FED_ERR_NOMEM, "%s: out of memory", c->file);
    c->cat_line = p->line;
    for (const char *q = val;; q++) {
        size_t len = strcspn(q, ",");

        snprintf(part, sizeof part, "%.*s", (int)(len < sizeof part ? len : sizeof part - 1), q);
        if (len >= sizeof part || !parse_count(part, 0, FED_MODEL_CFG_MAX_COLUMN,
                                                &c->cat[c->ncat]))
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [input] categorical: '%s' "
                               "is not a list of column indices (0-based, comma-separated)",
                               c->file, p->line, val);
        for (int i = 0; i < c->ncat; i++)
            if (c->cat[i] == c->cat[c->ncat])
                return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [input] categorical: "
                                   "column %d given twice", c->file, p->line, c->cat[i]);
        c->ncat++;
        q += len;
        if (!*q)
            return FED_OK;
    }
}

static int cfg_features(const fed_model_cfg *c)
{
    return c->in.c * c->in.h * c->in.w;
}

/* An embedding's column: inside the row, and declared categorical. */
static fed_err check_column(parser *p, int col)
{
    fed_model_cfg *c = p->c;

    if (col >= cfg_features(c))
        return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [embedding] column: %d is "
                           "outside the input's %d columns (0 to %d)", c->file, p->line, col,
                           cfg_features(c), cfg_features(c) - 1);
    for (int i = 0; i < c->ncat; i++)
        if (c->cat[i] == col)
            return FED_OK;
    return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [embedding] column: %d is not "
                       "categorical (list it in [input] categorical)", c->file, p->line, col);
}

/* A probability 0 to below 1 with at most 6 decimals ("0.5", ".25", "0")
 * in millionths, exactly; -1 when it is none. */
static int parse_ppm(const char *s)
{
    long v = 0;
    int digits = 0, frac = -1; /* decimals after the point; -1 before it */

    for (; *s; s++) {
        if (*s == '.' && frac < 0) {
            frac = 0;
        } else if (isdigit((unsigned char)*s) && frac < 6 && v < 1000000) {
            v = v * 10 + (*s - '0');
            digits++;
            if (frac >= 0)
                frac++;
        } else {
            return -1;
        }
    }
    for (int f = frac < 0 ? 0 : frac; f < 6; f++)
        v *= 10;
    return digits && v < 1000000 ? (int)v : -1;
}

static cfg_node *cur_node(parser *p)
{
    return &p->c->nodes[p->c->count - 1];
}

/* One key = value of the open section. */
static fed_err push_node(parser *p, const char *kind);

static fed_err set_key(parser *p, const char *key, const char *val)
{
    int k = 0, ok = 1;
    const char *sec = p->sec->name;
    fed_model_cfg *c = p->c;

    while (k < NKEYS && strcmp(KEY_NAMES[k], key))
        k++;
    if (k == NKEYS || !(p->sec->keys & (1u << k))) {
        char list[128] = "";
        size_t used = 0;

        for (int i = 0; i < NKEYS; i++)
            if (p->sec->keys & (1u << i))
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                                         used ? ", " : "", KEY_NAMES[i]);
        return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [%s]: unknown key '%s' (%s)",
                           c->file,
                     p->line, sec, key, list);
    }
    if (p->seen & (1u << k))
        return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [%s] %s: given twice", c->file,
                     p->line, sec, key);
    p->seen |= 1u << k;
    switch (1 << k) {
    case K_NAME: {
        cfg_node *nd = cur_node(p);

        if (!fed_model_name_ok(val))
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC,
                               "%s:%d: [%s] name: '%s' must be 1 to %d letters, digits, '_' or "
                               "inner '.'", c->file, p->line, sec, val, FED_MODEL_NAME_MAX);
        memcpy(nd->name, val, strlen(val) + 1);
        for (int i = 0; i < c->count - 1; i++)
            if (!strcmp(c->nodes[i].name, val))
                return fed_err_why(p->why, p->cap, FED_ERR_SPEC,
                             "%s:%d: [%s] name: '%s' is taken by line %d", c->file, p->line,
                             sec, val, c->nodes[i].line);
        return FED_OK;
    }
    case K_OUT:
        if (!strcmp(val, "classes"))
            cur_node(p)->out_classes = 1;
        else
            ok = parse_ints(val, &cur_node(p)->n.out, 1, 0, 1);
        break;
    case K_KERNEL:
        ok = parse_ints(val, cur_node(p)->n.kernel, 2, 1, 1);
        break;
    case K_STRIDE:
        ok = parse_ints(val, cur_node(p)->n.stride, 2, 1, 1);
        break;
    case K_PADDING:
        ok = parse_ints(val, cur_node(p)->n.padding, 2, 1, 0);
        break;
    case K_DILATION:
        ok = parse_ints(val, cur_node(p)->n.dilation, 2, 1, 1);
        break;
    case K_GROUPS:
        ok = parse_ints(val, &cur_node(p)->n.groups, 1, 0, 1);
        break;
    case K_INPUT:
    case K_FROM: { /* an earlier layer, by its name (or index), or "-": the input */
        int j = -2;

        if (!strcmp(val, "-"))
            j = -1;
        for (int q = c->count - 2; j == -2 && q >= 0; q--) {
            char idx[16];

            snprintf(idx, sizeof idx, "%d", q);
            if (!strcmp(c->nodes[q].name[0] ? c->nodes[q].name : idx, val))
                j = q;
        }
        if (j == -2)
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC,
                               "%s:%d: [%s] %s: '%s' names no earlier layer (a name, an index, "
                               "or - for the input)", c->file, p->line, sec, key, val);
        if (1 << k == K_INPUT)
            cur_node(p)->n.input = j;
        else
            cur_node(p)->n.other = j;
        return FED_OK;
    }
    case K_SHAPE: {
        int v[3] = {0, 0, 0};

        ok = parse_ints(val, v, 3, 0, 1);
        c->in.c = v[0];
        c->in.h = v[1];
        c->in.w = v[2];
        break;
    }
    case K_FEATURES:
        ok = parse_ints(val, &c->in.w, 1, 0, 1);
        c->in.c = c->in.h = 1;
        break;
    case K_LOSS: /* bce, mse: a last node that chooses it */
        if (!strcmp(val, "bce") || !strcmp(val, "mse"))
            return c->count ? push_node(p, !strcmp(val, "bce") ? "bce" : "mse")
                            : fed_err_why(p->why, p->cap, FED_ERR_SPEC,
                                          "%s:%d: [output] loss: %s after no layer", c->file,
                                          p->line, val);
        if (strcmp(val, "cross_entropy") != 0)
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC,
                         "%s:%d: [output] loss: '%s' is not supported yet (cross_entropy, bce, "
                         "mse)", c->file, p->line, val);
        return FED_OK;
    case K_CLASSES:
        ok = parse_ints(val, &c->in.classes, 1, 0, 2);
        break;
    case K_P: /* dropout's probability */
        ok = (cur_node(p)->n.drop_ppm = parse_ppm(val)) >= 0;
        break;
    case K_BIAS: /* bias = 0 or false: PyTorch's bias=False */
        ok = !strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "1") ||
             !strcmp(val, "true");
        cur_node(p)->n.no_bias = !strcmp(val, "0") || !strcmp(val, "false");
        break;
    case K_CATEGORICAL:
        return parse_categorical(p, val);
    case K_COLUMN:
        if (!(ok = parse_count(val, 0, FED_MODEL_CFG_MAX_COLUMN, &cur_node(p)->n.column)))
            break;
        return check_column(p, cur_node(p)->n.column);
    case K_NUM:
        ok = parse_count(val, 1, FED_MODEL_CFG_MAX_NUM, &cur_node(p)->n.num);
        break;
    case K_DIM:
        ok = parse_ints(val, &cur_node(p)->n.out, 1, 0, 1);
        break;
    case K_MOMENTUM:
    case K_EPS: { /* a decimal in (0, 1] */
        double v = 0.0;

        if (!fed_opt_decimal(val, &v) || !(v > 0.0 && v <= 1.0))
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC,
                               "%s:%d: [%s] %s: '%s' is not a decimal number in (0, 1]", c->file,
                               p->line, sec, key, val);
        *(1 << k == K_EPS ? &cur_node(p)->n.eps : &cur_node(p)->n.momentum) = v;
        return FED_OK;
    }
    }
    if (!ok)
        return fed_err_why(p->why, p->cap, FED_ERR_SPEC,
                     "%s:%d: [%s] %s: '%s' is not %s", c->file, p->line, sec, key, val,
                     1 << k == K_SHAPE  ? "C,H,W (each 1 to 65536)"
                     : 1 << k == K_OUT  ? "a count 1 to 65536 or 'classes'"
                     : 1 << k == K_PADDING ? "N or H,W (each 0 to 65536)"
                     : 1 << k == K_CLASSES ? "a count 2 to 65536"
                     : 1 << k == K_GROUPS || 1 << k == K_DIM ? "a count 1 to 65536"
                     : 1 << k == K_COLUMN ? "a column index (0-based)"
                     : 1 << k == K_NUM ? "a count 1 to 1048576"
                     : 1 << k == K_BIAS    ? "0, 1, false or true"
                     : 1 << k == K_P       ? "a probability 0 to below 1 (at most 6 decimals)"
                                           : "N or H,W (each 1 to 65536)");
    if ((1 << k == K_SHAPE || 1 << k == K_FEATURES) && (p->seen & K_SHAPE) &&
        (p->seen & K_FEATURES))
        return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [input] %s: shape and features "
                     "both given", c->file, p->line, key);
    return FED_OK;
}

/* The open section is complete: its needed keys given. */
static fed_err close_section(parser *p)
{
    const section_def *s = p->sec;

    if (!s)
        return FED_OK;
    for (int k = 0; k < NKEYS; k++)
        if ((s->need_all & (1u << k)) && !(p->seen & (1u << k)))
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [%s] needs %s", p->c->file,
                         p->sec_line, s->name, KEY_NAMES[k]);
    if ((s->keys & K_P) && !(p->seen & K_P))
        p->c->nodes[p->c->count - 1].n.drop_ppm = 500000; /* p = 0.5, nn.Dropout's */
    if (s->need_any && !(p->seen & s->need_any))
        return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [input] needs shape or features",
                     p->c->file, p->sec_line);
    for (int i = 0; !s->layer && i < p->c->ncat; i++) /* [input]'s, once */
        if (p->c->cat[i] >= cfg_features(p->c))
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [input] categorical: column "
                               "%d is outside the input's %d columns (0 to %d)", p->c->file,
                               p->c->cat_line, p->c->cat[i], cfg_features(p->c),
                               cfg_features(p->c) - 1);
    return FED_OK;
}

/* Every categorical column feeds an embedding (a numeric layer leaves them
 * all out, so one that fed none would be dropped unsaid). */
static fed_err check_categorical_used(parser *p)
{
    fed_model_cfg *c = p->c;

    for (int i = 0; i < c->ncat; i++) {
        int used = 0;

        for (int j = 0; j < c->count && !used; j++)
            used = !strcmp(c->nodes[j].n.kind, "embedding") && c->nodes[j].n.column == c->cat[i];
        if (!used)
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [input] categorical: "
                               "column %d feeds no embedding", c->file, c->cat_line, c->cat[i]);
    }
    return FED_OK;
}

static fed_err open_section(parser *p, const char *name)
{
    fed_model_cfg *c = p->c;
    const section_def *s = NULL;
    fed_err err;

    for (int i = 0; i < NSECTIONS; i++)
        if (!strcmp(SECTIONS[i].name, name))
            s = &SECTIONS[i];
    if (!s)
        return fed_err_why(p->why, p->cap, FED_ERR_SPEC,
                     "%s:%d: unknown section [%s] (input, output, linear, conv, maxpool, "
                     "avgpool, global_avgpool, relu, flatten, leaky_relu, gelu, silu, sigmoid, "
                     "tanh, add, concat, embedding, numeric, layernorm, groupnorm, dropout, "
                     "batchnorm)",
                     c->file, p->line, name);
    if ((err = close_section(p)) != FED_OK)
        return err;
    if (p->had_output)
        return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [%s] after [output], which ends "
                     "the file", c->file, p->line, name);
    if (!strcmp(name, "input") ? p->had_input || c->count : !p->had_input)
        return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: [%s]: [input] comes first, once",
                     c->file, p->line, name);
    p->had_input = 1;
    p->had_output = !strcmp(name, "output");
    p->sec = s;
    p->sec_line = p->line;
    p->seen = 0;
    if (!s->layer)
        return FED_OK;
    if ((err = push_node(p, s->name)) != FED_OK)
        return err;
    if (row_section(s))
        cur_node(p)->n.input = -1;
    return FED_OK;
}

/* A node of kind (a static string) at the end, on the current line. */
static fed_err push_node(parser *p, const char *kind)
{
    fed_model_cfg *c = p->c;

    if (c->count == FED_MODEL_MAX_NODES)
        return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: more than %d layers", c->file,
                     p->line, FED_MODEL_MAX_NODES);
    if (c->count == c->cap) {
        int n = c->cap ? 2 * c->cap : 16;
        cfg_node *g = fed_realloc(c->nodes, (size_t)n * sizeof *g);

        if (!g)
            return fed_err_why(p->why, p->cap, FED_ERR_NOMEM, "%s: out of memory", c->file);
        c->nodes = g;
        c->cap = n;
    }
    memset(&c->nodes[c->count], 0, sizeof c->nodes[0]);
    c->nodes[c->count].n.kind = kind;
    c->nodes[c->count].n.input = c->count - 1;
    c->nodes[c->count].line = p->line;
    c->count++;
    return FED_OK;
}

/* One line (NUL-terminated, no newline): [section] and/or key = value ... */
static fed_err parse_line(parser *p, char *s)
{
    fed_err err;

    for (char *q = s; *q; q++)
        if (*q == '#' || *q == ';') {
            *q = '\0';
            break;
        }
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '[') {
        char *end = strchr(s, ']');

        if (!end)
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: '[' without ']'", p->c->file,
                         p->line);
        *end = '\0';
        if ((err = open_section(p, s + 1)) != FED_OK)
            return err;
        s = end + 1;
    }
    for (;;) {
        char *key, *val;

        while (isspace((unsigned char)*s))
            s++;
        if (!*s)
            return FED_OK;
        key = s;
        while (islower((unsigned char)*s) || *s == '_')
            s++;
        val = s;
        while (isspace((unsigned char)*s))
            s++;
        if (val == key || *s != '=')
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC,
                               "%s:%d: expected key = value at '%.20s'",
                         p->c->file, p->line, key);
        *val = '\0';
        s++;
        while (isspace((unsigned char)*s))
            s++;
        val = s;
        while (*s && !isspace((unsigned char)*s))
            s++;
        if (val == s)
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: %s: no value after '='",
                         p->c->file, p->line, key);
        if (*s)
            *s++ = '\0';
        if (!p->sec)
            return fed_err_why(p->why, p->cap, FED_ERR_SPEC, "%s:%d: %s: a key before any section",
                         p->c->file, p->line, key);
        if ((err = set_key(p, key, val)) != FED_OK)
            return err;
    }
}

fed_err fed_model_cfg_parse(const char *file, const char *text, size_t len, fed_model_cfg **out,
                            char *why, size_t cap)
{
    fed_model_cfg *c;
    parser p;
    const char *base;
    char line[LINE_MAX_LEN + 1];
    size_t at = 0;
    fed_err err = FED_OK;

    *out = NULL;
    if (why && cap)
        why[0] = '\0';
    if (!file)
        file = "model";
    if (len > FED_MODEL_CFG_MAX_BYTES)
        return fed_err_why(why, cap, FED_ERR_TOO_LARGE, "%s: %zu bytes, the limit is %u", file, len,
                     FED_MODEL_CFG_MAX_BYTES);
    if (!(c = fed_calloc(1, sizeof *c)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "%s: out of memory", file);
    snprintf(c->file, sizeof c->file, "%s", file);
    base = strrchr(file, '/');
    snprintf(c->label, sizeof c->label, "%s", base ? base + 1 : file);
    memset(&p, 0, sizeof p);
    p.c = c;
    p.why = why;
    p.cap = cap;
    while (at < len && err == FED_OK) {
        size_t n = 0;

        p.line++;
        while (at < len && text[at] != '\n') {
            if (n == LINE_MAX_LEN || text[at] == '\0') {
                err = fed_err_why(why, cap, FED_ERR_SPEC, "%s:%d: %s", c->file, p.line,
                            text[at] ? "line longer than 4096 bytes" : "a NUL byte");
                break;
            }
            line[n++] = text[at++];
        }
        at++;
        if (err != FED_OK)
            break;
        if (n && line[n - 1] == '\r')
            n--;
        line[n] = '\0';
        err = parse_line(&p, line);
    }
    if (err == FED_OK)
        err = close_section(&p);
    if (err == FED_OK && !p.had_input)
        err = fed_err_why(why, cap, FED_ERR_SPEC, "%s: no [input] section", c->file);
    if (err == FED_OK && !c->count)
        err = fed_err_why(why, cap, FED_ERR_SPEC, "%s: no layers", c->file);
    if (err == FED_OK)
        err = check_categorical_used(&p);
    if (err == FED_OK && !(c->view = fed_calloc((size_t)c->count, sizeof *c->view)))
        err = fed_err_why(why, cap, FED_ERR_NOMEM, "%s: out of memory", c->file);
    if (err != FED_OK) {
        fed_model_cfg_free(c);
        return err;
    }
    *out = c;
    return FED_OK;
}

fed_err fed_model_cfg_load(const char *path, fed_model_cfg **out, char *why, size_t cap)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len;
    fed_err err;

    *out = NULL;
    if (!f)
        return fed_err_why(why, cap, FED_ERR_IO, "%s: %s", path, strerror(errno));
    if (!(buf = fed_malloc(FED_MODEL_CFG_MAX_BYTES + 1))) {
        fclose(f);
        return fed_err_why(why, cap, FED_ERR_NOMEM, "%s: out of memory", path);
    }
    len = fread(buf, 1, FED_MODEL_CFG_MAX_BYTES + 1, f);
    if (ferror(f))
        err = fed_err_why(why, cap, FED_ERR_IO, "%s: read error", path);
    else
        err = fed_model_cfg_parse(path, buf, len, out, why, cap);
    fclose(f);
    fed_free(buf);
    return err;
}

void fed_model_cfg_free(fed_model_cfg *c)
{
    if (!c)
        return;
    fed_free(c->nodes);
    fed_free(c->view);
    fed_free(c->cat);
    fed_free(c);
}

fed_model_shape fed_model_cfg_input(const fed_model_cfg *c) { return c->in; }
const char *fed_model_cfg_label(const fed_model_cfg *c) { return c->label; }

int fed_model_cfg_classes(const fed_model_cfg *c)
{
    const cfg_node *last = &c->nodes[c->count - 1];

    if (c->in.classes)
        return c->in.classes;
    if (!strcmp(last->n.kind, "bce"))
        return 2; /* one logit, two classes */
    if (!strcmp(last->n.kind, "mse"))
        return 1; /* numbers to predict (unused by the loss) */
    return !last->out_classes && last->n.out >= 2 ? last->n.out : 0;
}

fed_model_shape fed_model_cfg_own_input(const fed_model_cfg *c)
{
    fed_model_shape in = c->in;

    in.classes = fed_model_cfg_classes(c);
    if (!in.classes)
        in.classes = 10;
    return in;
}
int fed_model_cfg_line(const fed_model_cfg *c, int i) { return c->nodes[i].line; }

const fed_model_node *fed_model_cfg_nodes(fed_model_cfg *c, int classes, int *count)
{
    for (int i = 0; i < c->count; i++) {
        c->view[i] = c->nodes[i].n;
        c->view[i].name = c->nodes[i].name[0] ? c->nodes[i].name : NULL;
        if (c->nodes[i].out_classes)
            c->view[i].out = classes;
    }
    *count = c->count;
    return c->view;
}

fed_err fed_model_cfg_check(fed_model_cfg *c, fed_model_shape in, fed_model_node_info *info,
                            char *why, size_t cap)
{
    fed_model_node_info *own = NULL;
    const fed_model_node *nodes;
    char inner[320];
    int count, planned = 0;
    fed_err err;

    if (why && cap)
        why[0] = '\0';
    if (c->in.c != in.c || c->in.h != in.h || c->in.w != in.w)
        return fed_err_why(why, cap, FED_ERR_SHAPE, "%s: [input] declares %dx%dx%d, the data gives "
                     "%dx%dx%d", c->file, c->in.c, c->in.h, c->in.w, in.c, in.h, in.w);
    if (c->in.classes && c->in.classes != in.classes)
        return fed_err_why(why, cap, FED_ERR_SHAPE,
                           "%s: [output] declares %d classes, the data has "
                     "%d", c->file, c->in.classes, in.classes);
    nodes = fed_model_cfg_nodes(c, in.classes, &count);
    if (!info && !(info = own = fed_calloc((size_t)count, sizeof *info)))
        return fed_err_why(why, cap, FED_ERR_NOMEM, "%s: out of memory", c->file);
    err = fed_model_graph_shapes(c->label, nodes, count, in, info, &planned, inner, sizeof inner);
    if (err != FED_OK && planned < count && why && cap) {
        size_t used = (size_t)snprintf(why, cap, "%s:%d: %s; shapes so far: input %dx%dx%d",
                                       c->file, c->nodes[planned].line, inner, in.c, in.h, in.w);

        for (int i = 0; i < planned && used < cap; i++)
            used += (size_t)snprintf(why + used, cap - used, ", %s %dx%dx%d",
                                     nodes[i].name ? nodes[i].name : nodes[i].kind, info[i].c,
                                     info[i].h, info[i].w);
    } else if (err != FED_OK) {
        fed_err_why(why, cap, err, "%s: %s", c->file, inner);
    }
    fed_free(own);
    return err;
}

fed_err fed_model_cfg_spec(fed_model_cfg *c, char *spec, size_t cap, char *why, size_t wcap)
{
    const fed_model_node *nodes;
    int count;
    fed_err err;

    nodes = fed_model_cfg_nodes(c, 0, &count); /* a linear layer's "classes" stays 0 */
    err = fed_model_graph_spec(nodes, count, spec, cap);
    if (err == FED_ERR_TOO_LARGE)
        return fed_err_why(why, wcap, err,
                           "%s: its graph takes more than the %d bytes a graph may take",
                           c->file, FED_MODEL_GRAPH_MAX - 1);
    if (err != FED_OK)
        return fed_err_why(why, wcap, err, "%s: no spec for its graph: %s", c->file,
                           fed_strerror(err));
    return FED_OK;
}

fed_err fed_model_cfg_build(fed_model_cfg *c, fed_model_shape in, fed_backend *be,
                            fed_pool *pool, int shards, int max_batch, fed_model **out,
                            char *why, size_t cap)
{
    const fed_model_node *nodes;
    int count;
    fed_err err;

    *out = NULL;
    if ((err = fed_model_cfg_check(c, in, NULL, why, cap)) != FED_OK)
        return err;
    nodes = fed_model_cfg_nodes(c, in.classes, &count);
    return fed_model_new_graph(c->label, nodes, count, in, be, pool, shards, max_batch, out);
}
