/* checkpoint.c - hash-chained checkpoints: the byte format drawn in store.h,
 * written as chunk rows with a streamed hash, verified on every load
 * (hash, header, chain link), retention that prunes blobs but never rows.
 * Owns nothing beyond the caller's fed_store_ckpt buffer. Never returns a
 * checkpoint it could not verify: faulty ones are logged and listed instead. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "storage/store_impl.h"

#define HDR_FIXED 64u
#define HDR_ENTRY 40u
#define HDR_MAX (HDR_FIXED + HDR_ENTRY * FED_CKPT_MAX_SECTIONS)

static const uint8_t zero_hash[32];

/* ------------------------------------------------------------ hashing -- */

/* A checkpoint's hash, over all its bytes: BLAKE2b-256 from version 2,
 * SHA-256 in version 1, which is still read. BLAKE2b takes a quarter of
 * SHA-256's time here (0.93 against 3.4-4.4 ms a MB), and the aggregator's
 * commit, which the next round's models wait for, hashes the whole model.
 * A stored blob is hashed by its own version (bytes 8-11), so one written
 * before the change verifies as it did and chains on to newer ones. */
typedef struct ckpt_hash {
    uint32_t version;
    union {
        crypto_generichash_state blake2b;
        crypto_hash_sha256_state sha256;
    } u;
} ckpt_hash;

_Static_assert(FED_CKPT_VERSION_MIN == 1 && FED_CKPT_VERSION == 2,
               "ckpt_hash_init hashes versions 1 and 2: teach it a new one");

static fed_err ckpt_hash_init(ckpt_hash *h, uint32_t version)
{
    h->version = version;
    if (version == 1)
        return crypto_hash_sha256_init(&h->u.sha256) == 0 ? FED_OK : FED_ERR_INTERNAL;
    if (version == 2)
        return crypto_generichash_init(&h->u.blake2b, NULL, 0, 32) == 0 ? FED_OK
                                                                       : FED_ERR_INTERNAL;
    return FED_ERR_VERSION;
}

/* The hash a stored blob is checked with, from its first chunk, which
 * starts with the header whole, as every writer cuts it (at least 4 KiB). */
static fed_err ckpt_hash_for_blob(ckpt_hash *h, const uint8_t *first, size_t len)
{
    if (len < 12 || memcmp(first, FED_CKPT_MAGIC, 8) != 0)
        return FED_ERR_MAGIC;
    return ckpt_hash_init(h, fed_get_u32le(first + 8));
}

static void ckpt_hash_update(ckpt_hash *h, const uint8_t *p, uint64_t n)
{
    if (h->version == 1)
        crypto_hash_sha256_update(&h->u.sha256, p, (unsigned long long)n);
    else
        crypto_generichash_update(&h->u.blake2b, p, (unsigned long long)n);
}

static void ckpt_hash_final(ckpt_hash *h, uint8_t out[32])
{
    if (h->version == 1)
        crypto_hash_sha256_final(&h->u.sha256, out);
    else
        crypto_generichash_final(&h->u.blake2b, out, 32);
}

/* ------------------------------------------------------------- layout -- */

static int valid_name(const char *s)
{
    size_t n = 0;

    if (!s)
        return 0;
    for (; s[n]; n++) {
        char c = s[n];

        if (n >= FED_CKPT_NAME_MAX - 1)
            return 0;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return n > 0;
}

/* Offsets of each section's data and the total length, from the lengths. */
static fed_err layout_offsets(size_t n, const uint64_t *len, uint64_t *off, uint64_t *total)
{
    uint64_t pos = HDR_FIXED + HDR_ENTRY * (uint64_t)n;

    for (size_t i = 0; i < n; i++) {
        pos = (pos + 63) & ~(uint64_t)63;
        if (len[i] > UINT64_MAX / 2 - pos)
            return FED_ERR_TOO_LARGE;
        off[i] = pos;
        pos += len[i];
    }
    *total = pos;
    return FED_OK;
}

/* Header and section table for a parsed checkpoint: fills out's metadata
 * and section names/lengths/offsets (data pointers left NULL). */
typedef struct ckpt_hdr {
    uint64_t round, total;
    uint8_t prev[32];
    size_t n;
    char names[FED_CKPT_MAX_SECTIONS][FED_CKPT_NAME_MAX];
    uint64_t len[FED_CKPT_MAX_SECTIONS], off[FED_CKPT_MAX_SECTIONS];
} ckpt_hdr;

static fed_err parse_header(const uint8_t *b, size_t have, uint64_t total, ckpt_hdr *h)
{
    uint32_t n;
    uint64_t end;
    fed_err e;

    memset(h, 0, sizeof *h);
    if (have < HDR_FIXED)
        return FED_ERR_TRUNCATED;
    if (memcmp(b, FED_CKPT_MAGIC, 8) != 0)
        return FED_ERR_MAGIC;
    if (fed_get_u32le(b + 8) < FED_CKPT_VERSION_MIN || fed_get_u32le(b + 8) > FED_CKPT_VERSION)
        return FED_ERR_VERSION;
    n = fed_get_u32le(b + 12);
    if (n < 1 || n > FED_CKPT_MAX_SECTIONS)
        return FED_ERR_FORMAT;
    h->round = fed_get_u64le(b + 16);
    memcpy(h->prev, b + 24, 32);
    h->total = fed_get_u64le(b + 56);
    if (h->total != total)
        return FED_ERR_FORMAT;
    if (have < HDR_FIXED + HDR_ENTRY * (size_t)n)
        return FED_ERR_TRUNCATED;
    h->n = n;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *ent = b + HDR_FIXED + HDR_ENTRY * i;

        if (ent[FED_CKPT_NAME_MAX - 1] != 0)
            return FED_ERR_FORMAT;
        memcpy(h->names[i], ent, FED_CKPT_NAME_MAX);
        /* padding after the name must be zeros: one encoding per checkpoint */
        for (size_t k = strlen(h->names[i]); k < FED_CKPT_NAME_MAX; k++)
            if (ent[k])
                return FED_ERR_FORMAT;
        if (!valid_name(h->names[i]))
            return FED_ERR_FORMAT;
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(h->names[i], h->names[j]))
                return FED_ERR_FORMAT;
        h->len[i] = fed_get_u64le(ent + FED_CKPT_NAME_MAX);
    }
    if ((e = layout_offsets(n, h->len, h->off, &end)) != FED_OK)
        return FED_ERR_FORMAT;
    if (end != total)
        return FED_ERR_FORMAT;
    return FED_OK;
}

/* Padding between sections must be zero, so a checkpoint has one encoding. */
static int padding_is_zero(const uint8_t *b, const ckpt_hdr *h)
{
    uint64_t pos = HDR_FIXED + HDR_ENTRY * (uint64_t)h->n;

    for (size_t i = 0; i < h->n; i++) {
        for (; pos < h->off[i]; pos++)
            if (b[pos])
                return 0;
        pos = h->off[i] + h->len[i];
    }
    return 1;
}

fed_err fed_store_ckpt_parse(const uint8_t *buf, size_t len, fed_store_ckpt *out)
{
    ckpt_hdr h;
    fed_err e;

    memset(out, 0, sizeof *out);
    if (!buf && len)
        return FED_ERR_INVAL;
    if ((e = parse_header(buf, len, len, &h)) != FED_OK)
        return e;
    if (!padding_is_zero(buf, &h))
        return FED_ERR_FORMAT;
    out->round = h.round;
    memcpy(out->prev_hash, h.prev, 32);
    out->nsections = h.n;
    for (size_t i = 0; i < h.n; i++) {
        memcpy(out->names[i], h.names[i], FED_CKPT_NAME_MAX);
        out->sections[i].name = out->names[i];
        out->sections[i].data = buf + h.off[i];
        out->sections[i].len = (size_t)h.len[i];
    }
    out->len = len;
    return FED_OK;
}

void fed_store_ckpt_fini(fed_store_ckpt *c)
{
    if (!c)
        return;
    fed_free(c->buf);
    memset(c, 0, sizeof *c);
}

const fed_store_section *fed_store_ckpt_find(const fed_store_ckpt *c, const char *name)
{
    for (size_t i = 0; i < c->nsections; i++)
        if (!strcmp(c->sections[i].name, name))
            return &c->sections[i];
    return NULL;
}

/* -------------------------------------------------------------- write -- */

/* The checkpoint as a virtual byte string: header, then sections with zero
 * padding. A chunk lying inside one section is bound in place; others are
 * gathered into a staging buffer. */
typedef struct ckpt_src {
    const uint8_t *hdr;
    size_t hdr_len, n;
    const fed_store_section *s;
    uint64_t off[FED_CKPT_MAX_SECTIONS], len[FED_CKPT_MAX_SECTIONS];
    uint64_t total;
} ckpt_src;

/* Pointer to [a, b) if it lies inside one piece with data, else NULL. */
static const uint8_t *src_direct(const ckpt_src *c, uint64_t a, uint64_t b)
{
    if (b <= c->hdr_len)
        return c->hdr + a;
    for (size_t i = 0; i < c->n; i++)
        if (a >= c->off[i] && b <= c->off[i] + c->len[i])
            return (const uint8_t *)c->s[i].data + (a - c->off[i]);
    return NULL;
}

static void src_gather(const ckpt_src *c, uint64_t a, uint64_t b, uint8_t *dst)
{
    memset(dst, 0, (size_t)(b - a));
    if (a < c->hdr_len)
        memcpy(dst, c->hdr + a, (size_t)((b < c->hdr_len ? b : c->hdr_len) - a));
    for (size_t i = 0; i < c->n; i++) {
        uint64_t lo = c->off[i] > a ? c->off[i] : a;
        uint64_t hi = c->off[i] + c->len[i] < b ? c->off[i] + c->len[i] : b;

        if (lo < hi)
            memcpy(dst + (lo - a), (const uint8_t *)c->s[i].data + (lo - c->off[i]),
                   (size_t)(hi - lo));
    }
}

static fed_err check_sections(const fed_store_section *s, size_t n)
{
    if (n < 1 || n > FED_CKPT_MAX_SECTIONS)
        return FED_ERR_INVAL;
    for (size_t i = 0; i < n; i++) {
        if (!valid_name(s[i].name) || (s[i].len && !s[i].data))
            return FED_ERR_INVAL;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s[i].name, s[j].name))
                return FED_ERR_INVAL;
    }
    return FED_OK;
}

static fed_err last_row(fed_store *st, uint64_t *id, uint8_t hash[32])
{
    fed_err e = FED_OK;
    sqlite3_stmt *q = fedi_store_stmt(st, SQ_CKPT_LAST, &e);
    int rc;

    *id = 0;
    memset(hash, 0, 32);
    if (!q)
        return e;
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        *id = (uint64_t)sqlite3_column_int64(q, 0);
        if (sqlite3_column_bytes(q, 1) == 32)
            memcpy(hash, sqlite3_column_blob(q, 1), 32);
        else
            e = FED_ERR_CORRUPT; /* a chain we cannot extend */
    } else if (rc != SQLITE_DONE) {
        e = fedi_store_err(st, rc, "read last checkpoint");
    }
    sqlite3_reset(q);
    return e;
}

static fed_err insert_chunks(fed_store *st, uint64_t id, const ckpt_src *c,
                             ckpt_hash *hs, uint64_t *nchunks)
{
    uint64_t cb = st->opts.chunk_bytes, idx = 0;
    uint8_t *stage = NULL;
    fed_err e = FED_OK;

    for (uint64_t a = 0; a < c->total; a += cb, idx++) {
        uint64_t b = a + cb < c->total ? a + cb : c->total;
        const uint8_t *p = src_direct(c, a, b);
        sqlite3_stmt *q;

        if (!p) {
            if (!stage && !(stage = fed_malloc((size_t)(cb < c->total ? cb : c->total)))) {
                e = FED_ERR_NOMEM;
                goto out;
            }
            src_gather(c, a, b, stage);
            p = stage;
        }
        ckpt_hash_update(hs, p, b - a);
        if (!(q = fedi_store_stmt(st, SQ_CHUNK_INSERT, &e)))
            goto out;
        sqlite3_bind_int64(q, 1, (int64_t)id);
        sqlite3_bind_int64(q, 2, (int64_t)idx);
        sqlite3_bind_blob64(q, 3, p, b - a, SQLITE_STATIC);
        if (sqlite3_step(q) != SQLITE_DONE) {
            e = fedi_store_err(st, sqlite3_errcode(st->db), "write checkpoint chunk");
            sqlite3_reset(q);
            goto out;
        }
        sqlite3_reset(q);
    }
    *nchunks = idx;
out:
    fed_free(stage);
    return e;
}

static fed_err insert_row(fed_store *st, uint64_t id, uint64_t round, uint64_t size,
                          uint64_t chunks, const uint8_t hash[32], const uint8_t prev[32])
{
    fed_err e = FED_OK;
    sqlite3_stmt *q = fedi_store_stmt(st, SQ_CKPT_INSERT, &e);
    int rc;

    if (!q)
        return e;
    sqlite3_bind_int64(q, 1, (int64_t)id);
    sqlite3_bind_int64(q, 2, (int64_t)round);
    sqlite3_bind_int64(q, 3, (int64_t)fedi_store_wall_s(st));
    sqlite3_bind_int64(q, 4, (int64_t)size);
    sqlite3_bind_int64(q, 5, (int64_t)chunks);
    sqlite3_bind_blob(q, 6, hash, 32, SQLITE_STATIC);
    sqlite3_bind_blob(q, 7, prev, 32, SQLITE_STATIC);
    sqlite3_bind_int64(q, 8, (int64_t)st->epoch);
    rc = sqlite3_step(q);
    if (rc != SQLITE_DONE)
        e = fedi_store_err(st, rc, "write checkpoint row");
    sqlite3_reset(q);
    return e;
}

void fed_store_hold_checkpoints(fed_store *st, uint64_t best_round, uint64_t from_round)
{
    st->hold_best = best_round;
    st->hold_from = from_round;
}

/* Retention: keep the blobs of the keep_last newest, of every keep_every-th
 * and of the rounds held (fed_store_hold_checkpoints); drop the others'
 * chunk rows, mark their rows pruned. */
static fed_err apply_retention(fed_store *st, uint64_t newest)
{
    uint64_t k = st->opts.keep_last, m = st->opts.keep_every;
    store_stmt_id ids[2] = {SQ_PRUNE_CHUNKS, SQ_PRUNE_ROWS};
    fed_err e = FED_OK;

    if (k == 0 || newest <= k)
        return FED_OK;
    for (int i = 0; i < 2 && e == FED_OK; i++) {
        sqlite3_stmt *q = fedi_store_stmt(st, ids[i], &e);
        int rc;

        if (!q)
            break;
        sqlite3_bind_int64(q, 1, (int64_t)(newest - k));
        sqlite3_bind_int64(q, 2, (int64_t)m);
        sqlite3_bind_int64(q, 3, st->hold_best ? (int64_t)st->hold_best : -1);
        sqlite3_bind_int64(q, 4, st->hold_from && st->hold_from < INT64_MAX
                                     ? (int64_t)st->hold_from : INT64_MAX);
        rc = sqlite3_step(q);
        if (rc != SQLITE_DONE)
            e = fedi_store_err(st, rc, "prune checkpoints");
        sqlite3_reset(q);
    }
    return e;
}

static void build_header(uint8_t *h, uint64_t round, const uint8_t prev[32], const ckpt_src *c)
{
    memset(h, 0, c->hdr_len);
    memcpy(h, FED_CKPT_MAGIC, 8);
    fed_put_u32le(h + 8, FED_CKPT_VERSION);
    fed_put_u32le(h + 12, (uint32_t)c->n);
    fed_put_u64le(h + 16, round);
    memcpy(h + 24, prev, 32);
    fed_put_u64le(h + 56, c->total);
    for (size_t i = 0; i < c->n; i++) {
        uint8_t *ent = h + HDR_FIXED + HDR_ENTRY * i;

        memcpy(ent, c->s[i].name, strlen(c->s[i].name));
        fed_put_u64le(ent + FED_CKPT_NAME_MAX, c->len[i]);
    }
}

static fed_err checkpoint_write(fed_store *st, uint64_t round, const fed_store_section *s,
                                size_t n, uint8_t hash[32])
{
    uint8_t hdr[HDR_MAX], prev[32], h[32];
    ckpt_hash hs;
    ckpt_src c;
    uint64_t id = 0, nchunks = 0;
    store_tx tx;
    fed_err e;

    if (round > INT64_MAX || (e = check_sections(s, n)) != FED_OK)
        return FED_ERR_INVAL;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.s = s;
    c.hdr = hdr;
    c.hdr_len = HDR_FIXED + HDR_ENTRY * n;
    for (size_t i = 0; i < n; i++)
        c.len[i] = s[i].len;
    if ((e = layout_offsets(n, c.len, c.off, &c.total)) != FED_OK || c.total > INT64_MAX)
        return FED_ERR_TOO_LARGE;
    if ((e = fedi_store_tx_enter(st, &tx)) != FED_OK)
        return e;
    if ((e = last_row(st, &id, prev)) != FED_OK)
        goto out;
    id++;
    build_header(hdr, round, prev, &c);
    if ((e = ckpt_hash_init(&hs, FED_CKPT_VERSION)) != FED_OK ||
        (e = insert_chunks(st, id, &c, &hs, &nchunks)) != FED_OK)
        goto out;
    ckpt_hash_final(&hs, h);
    if ((e = insert_row(st, id, round, c.total, nchunks, h, prev)) != FED_OK)
        goto out;
    e = apply_retention(st, id);
out:
    e = fedi_store_tx_leave(st, &tx, e);
    if (e == FED_OK) {
        fed_log(FED_LOG_DEBUG, "store: checkpoint %" PRIu64 " of round %" PRIu64 ", %" PRIu64
                " bytes in %" PRIu64 " chunks", id, round, c.total, nchunks);
        if (hash)
            memcpy(hash, h, 32);
    }
    return e;
}

/* --------------------------------------------------------------- read -- */

static void add_fault(fed_store_faults *f, const fed_store_ckpt_row *r, fed_err err,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void add_fault(fed_store_faults *f, const fed_store_ckpt_row *r, fed_err err,
                      const char *fmt, ...)
{
    char what[96];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fed_log(FED_LOG_WARN, "store: checkpoint %" PRIu64 " (round %" PRIu64 ") skipped: %s (%s)",
            r->id, r->round, what, fed_errname(err));
    if (!f)
        return;
    if (f->n < sizeof f->v / sizeof f->v[0]) {
        fed_store_fault *x = &f->v[f->n++];

        x->id = r->id;
        x->round = r->round;
        x->err = err;
        memcpy(x->what, what, sizeof x->what);
    }
    f->total++;
}

/* One checkpoints row from a statement over CKPT_COLS. 0 if malformed. */
static int read_row(sqlite3_stmt *q, fed_store_ckpt_row *r)
{
    memset(r, 0, sizeof *r);
    r->id = (uint64_t)sqlite3_column_int64(q, 0);
    r->round = (uint64_t)sqlite3_column_int64(q, 1);
    r->created_s = (uint64_t)sqlite3_column_int64(q, 2);
    r->size = (uint64_t)sqlite3_column_int64(q, 3);
    r->chunks = (uint64_t)sqlite3_column_int64(q, 4);
    r->pruned = sqlite3_column_int(q, 7) != 0;
    r->epoch = (uint64_t)sqlite3_column_int64(q, 8);
    if (sqlite3_column_bytes(q, 5) != 32 || sqlite3_column_bytes(q, 6) != 32)
        return 0;
    memcpy(r->hash, sqlite3_column_blob(q, 5), 32);
    memcpy(r->prev_hash, sqlite3_column_blob(q, 6), 32);
    return 1;
}

/* The row with this id; FED_ERR_NOTFOUND if none, FED_ERR_CORRUPT if malformed. */
static fed_err row_by_id(fed_store *st, uint64_t id, fed_store_ckpt_row *r)
{
    fed_err e = FED_OK;
    sqlite3_stmt *q = fedi_store_stmt(st, SQ_CKPT_BY_ID, &e);
    int rc;

    if (!q)
        return e;
    sqlite3_bind_int64(q, 1, (int64_t)id);
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        e = read_row(q, r) ? FED_OK : FED_ERR_CORRUPT;
    else
        e = rc == SQLITE_DONE ? FED_ERR_NOTFOUND : fedi_store_err(st, rc, "read checkpoint row");
    sqlite3_reset(q);
    return e;
}

/* Does r's prev_hash name the previous row's hash? FED_ERR_CORRUPT if not. */
static fed_err check_link(fed_store *st, const fed_store_ckpt_row *r, fed_store_faults *f)
{
    fed_store_ckpt_row p;
    fed_err e;

    if (r->id == 1) {
        if (memcmp(r->prev_hash, zero_hash, 32) == 0)
            return FED_OK;
        add_fault(f, r, FED_ERR_CORRUPT, "first checkpoint has a previous hash");
        return FED_ERR_CORRUPT;
    }
    e = row_by_id(st, r->id - 1, &p);
    if (e == FED_ERR_NOTFOUND || e == FED_ERR_CORRUPT) {
        add_fault(f, r, FED_ERR_CORRUPT, "chain: previous row %s",
                  e == FED_ERR_NOTFOUND ? "missing" : "malformed");
        return FED_ERR_CORRUPT;
    }
    if (e != FED_OK)
        return e;
    if (memcmp(p.hash, r->prev_hash, 32) != 0) {
        add_fault(f, r, FED_ERR_CORRUPT, "chain: previous hash does not match row %" PRIu64,
                  p.id);
        return FED_ERR_CORRUPT;
    }
    return FED_OK;
}

/* Reads are one snapshot: a read transaction unless one is already open. */
static int read_begin(fed_store *st)
{
    return sqlite3_get_autocommit(st->db) &&
           sqlite3_exec(st->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
}

static void read_end(fed_store *st, int began)
{
    if (began && !sqlite3_get_autocommit(st->db))
        (void)sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
}

/* Pass 1 over the chunk rows: indices 0..chunks-1, lengths summing to size.
 * *maxlen gets the largest chunk. */
static fed_err check_chunk_list(fed_store *st, const fed_store_ckpt_row *r,
                                fed_store_faults *f, uint64_t *maxlen)
{
    fed_err e = FED_OK;
    sqlite3_stmt *q = fedi_store_stmt(st, SQ_CHUNK_LIST, &e);
    uint64_t idx = 0, sum = 0;
    int rc;

    *maxlen = 0;
    if (!q)
        return e;
    sqlite3_bind_int64(q, 1, (int64_t)r->id);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        uint64_t len = (uint64_t)sqlite3_column_int64(q, 2);

        if ((uint64_t)sqlite3_column_int64(q, 1) != idx++ || len == 0) {
            e = FED_ERR_CORRUPT;
            break;
        }
        sum += len;
        if (len > *maxlen)
            *maxlen = len;
    }
    if (e == FED_OK && rc != SQLITE_DONE)
        e = fedi_store_err(st, rc, "list checkpoint chunks");
    sqlite3_reset(q);
    if (e == FED_ERR_DB_DAMAGED) {
        add_fault(f, r, e, "chunk rows unreadable: database file damaged");
        return e;
    }
    if (e == FED_ERR_CORRUPT || (e == FED_OK && (idx != r->chunks || sum != r->size))) {
        add_fault(f, r, FED_ERR_CORRUPT, "chunk rows do not add up (%" PRIu64 " of %" PRIu64
                  ", %" PRIu64 " of %" PRIu64 " bytes)", idx, r->chunks, sum, r->size);
        return FED_ERR_CORRUPT;
    }
    return e;
}

/* Pass 2: stream every chunk through the hash of the version the first one
 * names (FED_ERR_MAGIC: it starts with no checkpoint's magic; FED_ERR_VERSION:
 * a version this build does not know). With dst, chunks land at their
 * offsets in dst; without, each goes through scratch, and the first HDR_MAX
 * bytes are kept in hdr. */
static fed_err read_chunks(fed_store *st, const fed_store_ckpt_row *r, uint8_t *dst,
                           uint8_t *scratch, uint8_t *hdr, uint8_t out_hash[32])
{
    ckpt_hash hs;
    sqlite3_blob *blob = NULL;
    fed_err e = FED_OK;
    sqlite3_stmt *q = fedi_store_stmt(st, SQ_CHUNK_LIST, &e);
    uint64_t pos = 0;
    int rc;

    if (!q)
        return e;
    hs.version = 0; /* set by the first chunk */
    sqlite3_bind_int64(q, 1, (int64_t)r->id);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t rowid = sqlite3_column_int64(q, 0);
        int len = sqlite3_column_int(q, 2);
        uint8_t *p = dst ? dst + pos : scratch;

        if (len <= 0 || (uint64_t)len > r->size - pos) {
            e = FED_ERR_CORRUPT; /* changed since pass 1: cannot happen in one snapshot */
            break;
        }
        rc = blob ? sqlite3_blob_reopen(blob, rowid)
                  : sqlite3_blob_open(st->db, "main", "checkpoint_chunks", "data", rowid, 0,
                                      &blob);
        if (rc == SQLITE_OK)
            rc = sqlite3_blob_read(blob, p, len, 0);
        if (rc != SQLITE_OK) {
            e = fedi_store_err(st, rc, "read checkpoint chunk");
            break;
        }
        if (pos == 0 && (e = ckpt_hash_for_blob(&hs, p, (size_t)len)) != FED_OK)
            break;
        ckpt_hash_update(&hs, p, (uint64_t)len);
        if (hdr && pos < HDR_MAX) {
            uint64_t k = HDR_MAX - pos < (uint64_t)len ? HDR_MAX - pos : (uint64_t)len;

            memcpy(hdr + pos, p, (size_t)k);
        }
        pos += (uint64_t)len;
    }
    if (e == FED_OK && rc != SQLITE_DONE)
        e = fedi_store_err(st, rc, "list checkpoint chunks");
    sqlite3_blob_close(blob);
    sqlite3_reset(q);
    if (e == FED_OK && hs.version == 0)
        e = FED_ERR_CORRUPT; /* no chunk: pass 1 says there are some */
    if (e == FED_OK)
        ckpt_hash_final(&hs, out_hash);
    return e;
}

/* The header agrees with its row: round, previous hash, total length. */
static fed_err check_header(const fed_store_ckpt_row *r, const uint8_t *hdr, size_t have,
                            fed_store_faults *f, ckpt_hdr *h)
{
    fed_err e = parse_header(hdr, have, r->size, h);

    if (e != FED_OK) {
        add_fault(f, r, e, "header: %s", fed_strerror(e));
        return e;
    }
    if (h->round != r->round || memcmp(h->prev, r->prev_hash, 32) != 0) {
        add_fault(f, r, FED_ERR_CORRUPT, "header disagrees with its row");
        return FED_ERR_CORRUPT;
    }
    return FED_OK;
}

/* A fault of this checkpoint: skip it (an older one may load). A damaged
 * database file counts, as it did when SQLite's corruption read as ours. */
static int is_fault(fed_err e)
{
    return e == FED_ERR_CORRUPT || e == FED_ERR_FORMAT || e == FED_ERR_MAGIC ||
           e == FED_ERR_VERSION || e == FED_ERR_TRUNCATED || e == FED_ERR_DB_DAMAGED;
}

/* Verify r's blob (hash, header) and, with out, load it. */
static fed_err verify_blob(fed_store *st, const fed_store_ckpt_row *r, fed_store_ckpt *out,
                           fed_store_faults *f)
{
    uint8_t got[32], hdr[HDR_MAX];
    uint8_t *buf = NULL, *scratch = NULL;
    uint64_t maxlen = 0;
    ckpt_hdr h;
    fed_err e;

    if (r->size < HDR_FIXED + HDR_ENTRY) {
        add_fault(f, r, FED_ERR_CORRUPT, "row claims %" PRIu64 " bytes", r->size);
        return FED_ERR_CORRUPT;
    }
    if ((e = check_chunk_list(st, r, f, &maxlen)) != FED_OK)
        return e;
    if (r->size > SIZE_MAX - 64) {
        add_fault(f, r, FED_ERR_TOO_LARGE, "larger than this machine can address");
        return FED_ERR_TOO_LARGE;
    }
    memset(hdr, 0, sizeof hdr);
    if (out)
        buf = fed_alloc_aligned((size_t)r->size);
    else
        scratch = fed_malloc((size_t)maxlen);
    if ((out && !buf) || (!out && !scratch)) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    e = read_chunks(st, r, buf, scratch, out ? NULL : hdr, got);
    if (e == FED_ERR_MAGIC) { /* overwritten, as no version of ours writes it */
        add_fault(f, r, FED_ERR_CORRUPT, "header: no checkpoint magic");
        e = FED_ERR_CORRUPT;
        goto out;
    }
    if (e == FED_ERR_VERSION) { /* from a newer build, say */
        add_fault(f, r, e, "header: %s", fed_strerror(e));
        goto out;
    }
    if (e == FED_ERR_DB_DAMAGED) {
        add_fault(f, r, e, "chunk unreadable: database file damaged");
        goto out;
    }
    if (is_fault(e)) {
        add_fault(f, r, e, "chunk unreadable");
        goto out;
    }
    if (e != FED_OK)
        goto out;
    if (memcmp(got, r->hash, 32) != 0) {
        add_fault(f, r, FED_ERR_CORRUPT, "hash does not match");
        e = FED_ERR_CORRUPT;
        goto out;
    }
    if (out) {
        if ((e = fed_store_ckpt_parse(buf, (size_t)r->size, out)) != FED_OK) {
            add_fault(f, r, e, "format: %s", fed_strerror(e));
            goto out;
        }
        if (out->round != r->round || memcmp(out->prev_hash, r->prev_hash, 32) != 0) {
            add_fault(f, r, FED_ERR_CORRUPT, "header disagrees with its row");
            e = FED_ERR_CORRUPT;
            goto out;
        }
        out->id = r->id;
        out->created_s = r->created_s;
        out->epoch = r->epoch;
        memcpy(out->hash, r->hash, 32);
        out->buf = buf;
        buf = NULL;
    } else {
        e = check_header(r, hdr, r->size < HDR_MAX ? (size_t)r->size : HDR_MAX, f, &h);
    }
out:
    if (e != FED_OK && out)
        memset(out, 0, sizeof *out);
    fed_free(buf);
    fed_free(scratch);
    return e;
}

/* Walk candidate rows newest first (of one round when by_round) until one
 * verifies and links. */
static fed_err load_newest(fed_store *st, int by_round, uint64_t round, fed_store_ckpt *out,
                           fed_store_faults *faults)
{
    uint64_t below = INT64_MAX;
    int began;
    fed_err e = FED_OK;

    memset(out, 0, sizeof *out);
    began = read_begin(st);
    for (;;) {
        fed_store_ckpt_row r;
        sqlite3_stmt *q = fedi_store_stmt(st, by_round ? SQ_CKPT_ROUND_CANDIDATES : SQ_CKPT_CANDIDATES,
                                          &e);
        int rc, ok = 0;

        if (!q)
            break;
        sqlite3_bind_int64(q, 1, (int64_t)below);
        if (by_round)
            sqlite3_bind_int64(q, 2, (int64_t)round);
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW)
            ok = read_row(q, &r);
        if (rc == SQLITE_ROW && !ok) {
            r.id = (uint64_t)sqlite3_column_int64(q, 0);
            r.round = (uint64_t)sqlite3_column_int64(q, 1);
        }
        sqlite3_reset(q);
        if (rc == SQLITE_DONE) {
            e = FED_ERR_NOTFOUND;
            break;
        }
        if (rc != SQLITE_ROW) {
            e = fedi_store_err(st, rc, "find checkpoint");
            break;
        }
        below = r.id;
        if (!ok) {
            add_fault(faults, &r, FED_ERR_CORRUPT, "row has malformed hashes");
            continue;
        }
        e = check_link(st, &r, faults);
        if (e == FED_OK)
            e = verify_blob(st, &r, out, faults);
        if (e == FED_OK || !is_fault(e))
            break;
    }
    read_end(st, began);
    return e;
}

fed_err fed_store_latest_valid_checkpoint(fed_store *st, fed_store_ckpt *out,
                                          fed_store_faults *faults)
{
    return load_newest(st, 0, 0, out, faults);
}

fed_err fed_store_checkpoint_of_round(fed_store *st, uint64_t round, fed_store_ckpt *out,
                                      fed_store_faults *faults)
{
    return load_newest(st, 1, round, out, faults);
}

fed_err fed_store_list_checkpoints(fed_store *st, fed_store_ckpt_row *out, size_t cap,
                                   size_t *n)
{
    fed_err e = FED_OK;
    sqlite3_stmt *q = fedi_store_stmt(st, SQ_CKPT_LIST, &e);
    int rc;

    *n = 0;
    if (!q)
        return e;
    sqlite3_bind_int64(q, 1, (int64_t)cap);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW && *n < cap) {
        if (!read_row(q, &out[*n]))
            memset(out[*n].hash, 0, 32); /* listed as is; verify reports it */
        (*n)++;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = fedi_store_err(st, rc, "list checkpoints");
    sqlite3_reset(q);
    return e;
}

fed_err fed_store_verify_checkpoints(fed_store *st, fed_store_faults *faults, size_t *checked)
{
    uint8_t prev[32];
    uint64_t last = 0;
    size_t nblobs = 0, nfaults = 0, ndamaged = 0;
    int began = read_begin(st);
    fed_err e = FED_OK;

    memset(prev, 0, sizeof prev);
    for (;;) {
        fed_store_ckpt_row r;
        sqlite3_stmt *q = fedi_store_stmt(st, SQ_CKPT_ALL, &e);
        int rc, ok = 0;

        if (!q)
            break;
        sqlite3_bind_int64(q, 1, (int64_t)last);
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW && !(ok = read_row(q, &r))) {
            r.id = (uint64_t)sqlite3_column_int64(q, 0);
            r.round = (uint64_t)sqlite3_column_int64(q, 1);
        }
        sqlite3_reset(q);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            e = fedi_store_err(st, rc, "read checkpoints");
            break;
        }
        if (!ok) {
            add_fault(faults, &r, FED_ERR_CORRUPT, "row has malformed hashes");
            nfaults++;
            memset(prev, 0xff, sizeof prev); /* the next link cannot hold */
            last = r.id;
            continue;
        }
        if (r.id != last + 1) {
            add_fault(faults, &r, FED_ERR_CORRUPT, "chain: id %" PRIu64 " follows %" PRIu64,
                      r.id, last);
            nfaults++;
        } else if (memcmp(r.prev_hash, prev, 32) != 0) {
            add_fault(faults, &r, FED_ERR_CORRUPT, "chain: previous hash does not match");
            nfaults++;
        }
        if (!r.pruned) {
            e = verify_blob(st, &r, NULL, faults);
            nblobs += e != FED_ERR_DB_DAMAGED; /* unread: not hashed */
            if (is_fault(e)) {
                nfaults++;
                ndamaged += e == FED_ERR_DB_DAMAGED;
                e = FED_OK;
            } else if (e != FED_OK) {
                break;
            }
        }
        memcpy(prev, r.hash, 32);
        last = r.id;
    }
    read_end(st, began);
    if (checked)
        *checked = nblobs;
    if (e == FED_OK && nfaults)
        e = ndamaged ? FED_ERR_DB_DAMAGED : FED_ERR_CORRUPT;
    return e;
}

/* Timed for fed_store_get_stats (the status page and /metrics). */
fed_err fed_store_checkpoint_write(fed_store *st, uint64_t round, const fed_store_section *s,
                                   size_t n, uint8_t hash[32])
{
    double t0 = fedi_store_mono_s();
    fed_err e = checkpoint_write(st, round, s, n, hash);

    st->stats.ckpt_writes++;
    st->stats.ckpt_write_s += fedi_store_mono_s() - t0;
    return e;
}
