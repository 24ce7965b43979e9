/* merge_robust.c - Byzantine-robust rules: coordinate-wise median and trimmed
 * mean, Krum, Multi-Krum and Bulyan. Coordinate-wise selection runs on the
 * host over blocks of coordinates transposed into a small buffer; the Krum
 * Gram matrix comes from the backend's gemm. Owns its scratch (sized in
 * fed_merge_new); never allocates in a run, never writes a client's delta. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/merge_impl.h"

#define SMALL_SORT 24            /* insertion sort at or below this many values */
#define TBUF_FLOATS 65536        /* block buffer: 256 KiB, stays in L2 */
#define BLK_MAX 4096             /* most coordinates per block */
#define NET_MAX 128              /* sorting network up to this many clients */
#define KBLK 4096                /* coordinates per Gram gemm block */
#define KSTAGE_FLOATS (1u << 24) /* most floats in the gemm staging buffer */

static int coordwise(merge_kind k) { return k == MK_MEDIAN || k == MK_TRIMMED || k == MK_BULYAN; }
static int krumlike(merge_kind k) { return k == MK_KRUM || k == MK_MULTIKRUM || k == MK_BULYAN; }

/* ------------------------------------------------------------- scratch -- */

static fed_err host_buf(size_t count, size_t size, void *out)
{
    int ok = 1;
    size_t bytes = fed_mul_size(count, size, &ok);
    void **p = out;

    if (!ok)
        return FED_ERR_TOO_LARGE;
    *p = fed_alloc_aligned(bytes ? bytes : 1);
    return *p ? FED_OK : FED_ERR_NOMEM;
}

static fed_err dev_buf(fed_merge *m, size_t count, void *out)
{
    int ok = 1;
    size_t bytes = fed_mul_size(count, sizeof(float), &ok);

    if (!ok)
        return FED_ERR_TOO_LARGE;
    return m->be->alloc(m->be, bytes, (void **)out);
}

static fed_err alloc_coordwise(fed_merge *m)
{
    size_t mc = (size_t)m->max_clients;
    fed_err e;

    m->tcap = 16 * mc > TBUF_FLOATS ? 16 * mc : TBUF_FLOATS;
    if ((e = host_buf(m->tcap, sizeof(float), &m->tbuf)) != FED_OK ||
        (e = host_buf(BLK_MAX, sizeof(float), &m->lo)) != FED_OK ||
        (e = host_buf(BLK_MAX, sizeof(float), &m->hi)) != FED_OK ||
        (e = host_buf(BLK_MAX, sizeof(double), &m->acc)) != FED_OK ||
        (e = host_buf(mc, sizeof(size_t), &m->kept)) != FED_OK)
        return e;
    if (!m->host && ((e = host_buf(m->tcap, sizeof(float), &m->stage)) != FED_OK ||
                     (e = host_buf(BLK_MAX, sizeof(float), &m->hout)) != FED_OK))
        return e;
    return FED_OK;
}

static fed_err alloc_krum(fed_merge *m)
{
    size_t mc = (size_t)m->max_clients;
    int ok = 1;
    size_t mc2 = fed_mul_size(mc, mc, &ok);
    fed_err e;

    if (!ok)
        return FED_ERR_TOO_LARGE;
    m->kblk = KBLK;
    if (m->kblk * mc > KSTAGE_FLOATS)
        m->kblk = KSTAGE_FLOATS / mc < 64 ? 64 : KSTAGE_FLOATS / mc;
    if (m->kblk > m->nparams)
        m->kblk = m->nparams;
    if ((e = dev_buf(m, m->kblk * mc, &m->kstage)) != FED_OK ||
        (e = dev_buf(m, mc2, &m->gdev)) != FED_OK ||
        (e = host_buf(mc2, sizeof(float), &m->ghost)) != FED_OK ||
        (e = host_buf(mc2, sizeof(double), &m->gram)) != FED_OK ||
        (e = host_buf(mc2, sizeof(double), &m->dist)) != FED_OK ||
        (e = host_buf(mc, sizeof(double), &m->tmp)) != FED_OK ||
        (e = host_buf(mc, sizeof(double), &m->score)) != FED_OK ||
        (e = host_buf(mc, sizeof(int), &m->sel)) != FED_OK ||
        (e = host_buf(mc, sizeof(int), &m->alive)) != FED_OK)
        return e;
    return FED_OK;
}

fed_err fedi_merge_robust_alloc(fed_merge *m)
{
    fed_err e;

    if (coordwise(m->p.kind) && (e = alloc_coordwise(m)) != FED_OK)
        return e;
    if (krumlike(m->p.kind) && (e = alloc_krum(m)) != FED_OK)
        return e;
    return FED_OK;
}

void fedi_merge_robust_free(fed_merge *m)
{
    fed_free(m->tbuf);
    fed_free(m->stage);
    fed_free(m->hout);
    fed_free(m->lo);
    fed_free(m->hi);
    fed_free(m->kept);
    fed_free(m->acc);
    if (m->kstage)
        m->be->free(m->be, m->kstage);
    if (m->gdev)
        m->be->free(m->be, m->gdev);
    fed_free(m->ghost);
    fed_free(m->gram);
    fed_free(m->dist);
    fed_free(m->tmp);
    fed_free(m->score);
    fed_free(m->sel);
    fed_free(m->alive);
    m->tbuf = m->stage = m->hout = m->lo = m->hi = m->kstage = m->gdev = m->ghost = NULL;
    m->kept = NULL;
    m->gram = m->dist = m->tmp = m->score = m->acc = NULL;
    m->sel = m->alive = NULL;
}

/* ------------------------------------------------- sorting, selection -- */

static void insertion_f(float *v, int n)
{
    for (int i = 1; i < n; i++) {
        float x = v[i];
        int j = i - 1;

        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
}

static void sift_f(float *v, int root, int n)
{
    for (;;) {
        int c = 2 * root + 1;
        float t;

        if (c >= n)
            return;
        if (c + 1 < n && v[c + 1] > v[c])
            c++;
        if (!(v[c] > v[root]))
            return;
        t = v[c];
        v[c] = v[root];
        v[root] = t;
        root = c;
    }
}

/* O(n log n) whatever the values: the fallback when attackers pick them. */
static void heapsort_f(float *v, int n)
{
    for (int i = n / 2 - 1; i >= 0; i--)
        sift_f(v, i, n);
    for (int end = n - 1; end > 0; end--) {
        float t = v[0];

        v[0] = v[end];
        v[end] = t;
        sift_f(v, 0, end);
    }
}

static void sort_f(float *v, int n)
{
    if (n <= SMALL_SORT)
        insertion_f(v, n);
    else
        heapsort_f(v, n);
}

static void swap_f(float *a, float *b)
{
    float t = *a;

    *a = *b;
    *b = t;
}

/* Introselect: afterwards v[k] is the k-th smallest, v[0..k) <= v[k] <=
 * v(k..n). Median-of-3 Hoare partitions, heapsort after 2 log n rounds. */
static void select_f(float *v, int n, int k)
{
    int lo = 0, hi = n - 1, budget = 8;

    for (int t = n; t > 1; t >>= 1)
        budget += 2;
    while (hi - lo > SMALL_SORT) {
        int mid = lo + (hi - lo) / 2, i = lo, j = hi;
        float piv;

        if (budget-- == 0) {
            heapsort_f(v + lo, hi - lo + 1);
            return;
        }
        if (v[mid] < v[lo])
            swap_f(&v[mid], &v[lo]);
        if (v[hi] < v[lo])
            swap_f(&v[hi], &v[lo]);
        if (v[hi] < v[mid])
            swap_f(&v[hi], &v[mid]);
        piv = v[mid];
        while (i <= j) {
            while (v[i] < piv)
                i++;
            while (v[j] > piv)
                j--;
            if (i <= j) {
                swap_f(&v[i], &v[j]);
                i++;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return; /* v[j+1 .. i-1] all equal the pivot */
    }
    insertion_f(v + lo, hi - lo + 1);
}

static float min_f(const float *v, int n)
{
    float x = v[0];

    for (int i = 1; i < n; i++)
        if (v[i] < x)
            x = v[i];
    return x;
}

static void sort_d(double *v, int n)
{
    /* Shell sort (Ciura gaps): no recursion, O(n^1.3) in practice; n is a
     * count of clients and the values are our own distances. */
    static const int gaps[] = {701, 301, 132, 57, 23, 10, 4, 1};

    for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
        int gap = gaps[g];

        for (int i = gap; i < n; i++) {
            double x = v[i];
            int j = i;

            while (j >= gap && v[j - gap] > x) {
                v[j] = v[j - gap];
                j -= gap;
            }
            v[j] = x;
        }
    }
}

/* -------------------------------------------------- coordinate rules -- */

typedef struct coord_rule {
    merge_kind kind;
    int trim;  /* trimmed: values dropped at each end */
    int keep;  /* bulyan: values kept around the median */
} coord_rule;

/* The rules over one coordinate's r values v (reordered in place), for more
 * clients than the sorting network takes: introselect, not a full sort. */
static float rule_median(float *v, int r, float *lo, float *hi)
{
    int k = (r - 1) / 2;
    float other;

    select_f(v, r, k);
    if (r & 1) {
        *lo = *hi = v[k];
        return v[k];
    }
    other = min_f(v + k + 1, r - k - 1);
    *lo = v[k];
    *hi = other;
    return (float)(((double)v[k] + (double)other) * 0.5);
}

static float rule_trimmed(float *v, int r, int k, float *lo, float *hi)
{
    double s = 0.0;
    int last = r - k - 1;

    if (k == 0) {
        *lo = v[0];
        *hi = v[0];
        for (int i = 1; i < r; i++) {
            *lo = v[i] < *lo ? v[i] : *lo;
            *hi = v[i] > *hi ? v[i] : *hi;
        }
    } else {
        select_f(v, r, k);
        if (last > k)
            select_f(v + k + 1, r - k - 1, last - k - 1);
        *lo = v[k];
        *hi = v[last];
    }
    for (int i = k; i <= last; i++)
        s += (double)v[i];
    return (float)(s / (double)(r - 2 * k));
}

/* Bulyan's second stage over sorted v: the mean of the `keep` values closest
 * to the median (ties: the lower one). */
static float closest_sorted(const float *v, int r, int keep, float *lo, float *hi)
{
    double med, s = 0.0;
    int i, j;

    med = (r & 1) ? (double)v[r / 2] : ((double)v[r / 2 - 1] + (double)v[r / 2]) * 0.5;
    j = 0;
    while (j < r && (double)v[j] < med)
        j++;
    i = j - 1;
    for (int t = 0; t < keep; t++) {
        if (i >= 0 && (j >= r || med - (double)v[i] <= (double)v[j] - med))
            i--;
        else
            j++;
    }
    for (int t = i + 1; t < j; t++)
        s += (double)v[t];
    *lo = v[i + 1];
    *hi = v[j - 1];
    return (float)(s / (double)keep);
}

static float rule_closest(float *v, int r, int keep, float *lo, float *hi)
{
    sort_f(v, r);
    return closest_sorted(v, r, keep, lo, hi);
}

static float apply_rule(const coord_rule *cr, float *v, int r, float *lo, float *hi)
{
    switch (cr->kind) {
    case MK_TRIMMED: return rule_trimmed(v, r, cr->trim, lo, hi);
    case MK_BULYAN: return rule_closest(v, r, cr->keep, lo, hi);
    default: return rule_median(v, r, lo, hi);
    }
}

/* Coordinates per block for r clients: r * blk floats fill the buffer. */
static size_t block_len(const fed_merge *m, int r)
{
    size_t b = m->tcap / (size_t)r;

    b = b > BLK_MAX ? BLK_MAX : b & ~(size_t)15;
    return b < m->nparams ? b : m->nparams;
}

/* Host pointer to row i's original coordinates [base, base + len). */
static fed_err block_row(fed_merge *m, const merge_row *row, int i, size_t ld, size_t base,
                         size_t len, const float **out)
{
    fed_err e;

    if (m->host) {
        *out = row->delta + base;
        return FED_OK;
    }
    e = m->be->download(m->be, m->stage + (size_t)i * ld, row->delta + base,
                        len * sizeof(float));
    *out = m->stage + (size_t)i * ld;
    return e;
}

/* Transposed: t[j * r + i] = s * src[j] (the introselect path). */
static void gather_col(float *restrict t, const float *restrict src, float s, int r, size_t len)
{
    if (s == 1.0f)
        for (size_t j = 0; j < len; j++)
            t[j * (size_t)r] = src[j];
    else
        for (size_t j = 0; j < len; j++)
            t[j * (size_t)r] = src[j] * s;
}

/* Row-wise: dst[j] = s * src[j] (the network path). */
static void gather_row(float *restrict dst, const float *restrict src, float s, size_t len)
{
    if (s == 1.0f)
        memcpy(dst, src, len * sizeof *dst);
    else
        for (size_t j = 0; j < len; j++)
            dst[j] = src[j] * s;
}

/* Four lanes as a GNU vector (SSE on x86-64, NEON on arm64): compilers do
 * not vectorize the float select below on their own without fast-math. */
typedef float vf4 __attribute__((vector_size(16)));
typedef int32_t vi4 __attribute__((vector_size(16)));

/* One comparator applied to len coordinates: a = min, b = max, exactly as
 * the scalar (v < u ? v : u) would (no NaN reaches here). */
static void compare_rows(float *restrict a, float *restrict b, size_t len)
{
    size_t j = 0;

    for (; j + 4 <= len; j += 4) {
        vf4 u, v;
        vi4 lt, ui, vi, lo, hi;

        memcpy(&u, a + j, sizeof u);
        memcpy(&v, b + j, sizeof v);
        lt = v < u;
        ui = (vi4)u;
        vi = (vi4)v;
        lo = (vi & lt) | (ui & ~lt);
        hi = (ui & lt) | (vi & ~lt);
        memcpy(a + j, &lo, sizeof lo);
        memcpy(b + j, &hi, sizeof hi);
    }
    for (; j < len; j++) {
        float u = a[j], v = b[j];

        a[j] = v < u ? v : u;
        b[j] = v < u ? u : v;
    }
}

static size_t count_kept(const float *restrict src, float s, const float *restrict lo,
                         const float *restrict hi, size_t len)
{
    size_t c = 0, j = 0;
    vi4 acc = {0, 0, 0, 0};

    for (; j + 4 <= len; j += 4) {
        vf4 x, l, h;

        memcpy(&x, src + j, sizeof x);
        memcpy(&l, lo + j, sizeof l);
        memcpy(&h, hi + j, sizeof h);
        if (s != 1.0f)
            x = x * s;
        acc -= (x >= l) & (x <= h); /* lanes are -1 where kept */
    }
    c = (size_t)(acc[0] + acc[1]) + (size_t)(acc[2] + acc[3]);
    for (; j < len; j++) {
        float x = s == 1.0f ? src[j] : src[j] * s;

        c += (size_t)((x >= lo[j]) & (x <= hi[j]));
    }
    return c;
}

/* Sorts every column of the r rows (stride ld) with Batcher's odd-even merge
 * network, truncated to r wires: data-oblivious, so its cost does not depend
 * on what attackers send, and each comparator is a vector min/max. */
static void network_sort(float *buf, size_t ld, int r, size_t len)
{
    for (int p = 1; p < r; p += p)
        for (int k = p; k >= 1; k /= 2)
            for (int j = k % p; j + k < r; j += k + k)
                for (int i = 0; i < k && i < r - j - k; i++)
                    if ((i + j) / (p + p) == (i + j + k) / (p + p))
                        compare_rows(buf + (size_t)(i + j) * ld, buf + (size_t)(i + j + k) * ld,
                                     len);
}

/* The rule over sorted columns (row t holds each coordinate's t-th value). */
static void sorted_rule(fed_merge *m, const coord_rule *cr, const float *buf, size_t ld, int r,
                        size_t len, float *out)
{
    int k = cr->kind == MK_TRIMMED ? cr->trim : (r - 1) / 2;
    int last = cr->kind == MK_TRIMMED ? r - k - 1 : (r & 1) ? k : k + 1;
    const float *rk = buf + (size_t)k * ld, *rl = buf + (size_t)last * ld;

    if (cr->kind == MK_BULYAN) {
        for (size_t j = 0; j < len; j++) {
            float col[NET_MAX];

            for (int t = 0; t < r; t++)
                col[t] = buf[(size_t)t * ld + j];
            out[j] = closest_sorted(col, r, cr->keep, &m->lo[j], &m->hi[j]);
        }
        return;
    }
    memcpy(m->lo, rk, len * sizeof *rk);
    memcpy(m->hi, rl, len * sizeof *rl);
    if (cr->kind == MK_MEDIAN) {
        for (size_t j = 0; j < len; j++)
            out[j] = (r & 1) ? rk[j] : (float)(((double)rk[j] + (double)rl[j]) * 0.5);
        return;
    }
    for (size_t j = 0; j < len; j++)
        m->acc[j] = 0.0;
    for (int t = k; t <= last; t++) {
        const float *row = buf + (size_t)t * ld;

        for (size_t j = 0; j < len; j++)
            m->acc[j] += (double)row[j];
    }
    for (size_t j = 0; j < len; j++)
        out[j] = (float)(m->acc[j] / (double)(r - 2 * k));
}

/* D per coordinate over rows set[0..r), block by block. */
static fed_err coordinate_merge(fed_merge *m, merge_row **set, int r, const coord_rule *cr)
{
    size_t blk = block_len(m, r);
    int net = r <= NET_MAX;
    const float *src;
    fed_err e;

    memset(m->kept, 0, (size_t)r * sizeof *m->kept);
    for (size_t base = 0; base < m->nparams; base += blk) {
        size_t len = m->nparams - base < blk ? m->nparams - base : blk;
        float *out = m->host ? m->delta + base : m->hout;

        for (int i = 0; i < r; i++) {
            if ((e = block_row(m, set[i], i, blk, base, len, &src)) != FED_OK)
                return e;
            if (net)
                gather_row(m->tbuf + (size_t)i * blk, src, set[i]->scale, len);
            else
                gather_col(m->tbuf + i, src, set[i]->scale, r, len);
        }
        if (net) {
            network_sort(m->tbuf, blk, r, len);
            sorted_rule(m, cr, m->tbuf, blk, r, len, out);
        } else {
            for (size_t j = 0; j < len; j++)
                out[j] = apply_rule(cr, m->tbuf + j * (size_t)r, r, &m->lo[j], &m->hi[j]);
        }
        for (int i = 0; i < r; i++) {
            src = m->host ? set[i]->delta + base : m->stage + (size_t)i * blk;
            m->kept[i] += count_kept(src, set[i]->scale, m->lo, m->hi, len);
        }
        if (!m->host &&
            (e = m->be->upload(m->be, m->delta + base, m->hout, len * sizeof(float))) != FED_OK)
            return e;
    }
    for (int i = 0; i < r; i++) {
        set[i]->verdict = FED_MERGE_USED_COORDS;
        set[i]->share = (double)m->kept[i] / (double)m->nparams;
    }
    return FED_OK;
}

/* --------------------------------------------------------------- Krum -- */

/* Squared distances between the r rows (after clipping) into m->dist. */
static fed_err distances(fed_merge *m, merge_row **set, int r)
{
    fed_backend *be = m->be;
    size_t rr = (size_t)r * (size_t)r;
    fed_err e;

    memset(m->gram, 0, rr * sizeof *m->gram);
    for (size_t base = 0; base < m->nparams; base += m->kblk) {
        size_t len = m->nparams - base < m->kblk ? m->nparams - base : m->kblk;

        for (int i = 0; i < r; i++)
            be->copy(be, m->kstage + (size_t)i * len, set[i]->delta + base, len);
        be->gemm(be, 0, 1, r, r, (int)len, 1.0f, m->kstage, (int)len, m->kstage, (int)len, 0.0f,
                 m->gdev, r);
        if ((e = be->download(be, m->ghost, m->gdev, rr * sizeof(float))) != FED_OK)
            return e;
        for (int i = 0; i < r; i++)
            for (int j = i + 1; j < r; j++)
                m->gram[(size_t)i * r + j] += (double)m->ghost[(size_t)i * r + j];
    }
    for (int i = 0; i < r; i++) {
        double si = (double)set[i]->scale, ni = set[i]->sq * si * si;

        m->dist[(size_t)i * r + i] = 0.0;
        for (int j = i + 1; j < r; j++) {
            double sj = (double)set[j]->scale, nj = set[j]->sq * sj * sj;
            double d = ni + nj - 2.0 * si * sj * m->gram[(size_t)i * r + j];

            d = d > 0.0 ? d : 0.0;
            m->dist[(size_t)i * r + j] = m->dist[(size_t)j * r + i] = d;
        }
    }
    return FED_OK;
}

/* Krum scores of the alive rows: the sum of the q smallest distances to
 * other alive rows, q = max(1, alive - f - 2). */
static void krum_scores(fed_merge *m, int r, int nalive, double *score)
{
    int q = nalive - m->p.f - 2;

    q = q < 1 ? 1 : q;
    for (int i = 0; i < r; i++) {
        int c = 0;
        double s = 0.0;

        if (!m->alive[i])
            continue;
        for (int j = 0; j < r; j++)
            if (j != i && m->alive[j])
                m->tmp[c++] = m->dist[(size_t)i * r + j];
        sort_d(m->tmp, c);
        for (int t = 0; t < q && t < c; t++)
            s += m->tmp[t];
        score[i] = s;
    }
}

/* The alive row with the lowest score (ties: the lowest key). */
static int best_alive(const fed_merge *m, int r, const double *score)
{
    int best = -1;

    for (int i = 0; i < r; i++)
        if (m->alive[i] && (best < 0 || score[i] < score[best]))
            best = i;
    return best;
}

/* Scores of every valid row against all of them, recorded in the rows. */
static void first_scores(fed_merge *m, merge_row **set, int r, double *score)
{
    for (int i = 0; i < r; i++)
        m->alive[i] = 1;
    krum_scores(m, r, r, score);
    for (int i = 0; i < r; i++) {
        set[i]->score = score[i];
        set[i]->verdict = FED_MERGE_NOT_SELECTED;
        set[i]->share = 0.0;
    }
}

static void scaled_copy(fed_merge *m, const merge_row *row)
{
    m->be->copy(m->be, m->delta, row->delta, m->nparams);
    if (row->scale != 1.0f)
        m->be->scale(m->be, m->nparams, row->scale, m->delta);
}

static fed_err too_few(const char *what, int nv, int need)
{
    fed_log(FED_LOG_WARN, "merge: %s needs at least %d valid inputs, has %d", what, need, nv);
    return FED_ERR_TOO_FEW;
}

static fed_err run_krum(fed_merge *m, merge_row **set, int r)
{
    double *score;
    int take, best;
    fed_err e;

    if (r < 2 * m->p.f + 3)
        return too_few(m->p.kind == MK_KRUM ? "krum" : "multikrum", r, 2 * m->p.f + 3);
    if ((e = distances(m, set, r)) != FED_OK)
        return e;
    score = m->score;
    first_scores(m, set, r, score);
    if (m->p.kind == MK_KRUM) {
        best = best_alive(m, r, score);
        set[best]->verdict = FED_MERGE_USED;
        set[best]->share = 1.0;
        scaled_copy(m, set[best]);
        return FED_OK;
    }
    take = m->p.mm < r - m->p.f ? m->p.mm : r - m->p.f;
    for (int t = 0; t < take; t++) {
        best = best_alive(m, r, score);
        m->alive[best] = 0;
        m->sel[t] = best;
    }
    for (int t = 0; t < take; t++) { /* back in key order for the sum */
        int x = m->sel[t], j = t - 1;

        while (j >= 0 && m->sel[j] > x) {
            m->sel[j + 1] = m->sel[j];
            j--;
        }
        m->sel[j + 1] = x;
    }
    for (int t = 0; t < take; t++) {
        merge_row *row = set[m->sel[t]];

        row->verdict = FED_MERGE_USED;
        row->share = 1.0 / take;
        m->ptrs[t] = row->delta;
        m->w[t] = (double)row->scale / take;
    }
    m->be->weighted_sum(m->be, m->delta, m->ptrs, m->w, take, m->nparams);
    return FED_OK;
}

static fed_err run_bulyan(fed_merge *m, merge_row **set, int r)
{
    int f = m->p.f, theta = r - 2 * f, nalive = r;
    double *score;
    coord_rule cr = {MK_BULYAN, 0, 0};
    fed_err e;

    if (r < 4 * f + 3)
        return too_few("bulyan", r, 4 * f + 3);
    if ((e = distances(m, set, r)) != FED_OK)
        return e;
    score = m->score;
    first_scores(m, set, r, score);
    for (int t = 0; t < theta; t++) {
        int best;

        if (t > 0)
            krum_scores(m, r, nalive, score);
        best = best_alive(m, r, score);
        m->alive[best] = 0;
        nalive--;
        m->sel[t] = best;
    }
    /* Selected rows in key order, compacted to the front of m->sel. */
    for (int i = 0, c = 0; i < r; i++)
        if (!m->alive[i])
            m->sel[c++] = i;
    /* set is m->valid: compacting in place is safe as sel[t] >= t ascends. */
    for (int t = 0; t < theta; t++)
        set[t] = set[m->sel[t]];
    cr.keep = theta - 2 * f;
    return coordinate_merge(m, m->valid, theta, &cr);
}

fed_err fedi_merge_robust_run(fed_merge *m, int nv)
{
    coord_rule cr = {m->p.kind, 0, 0};

    switch (m->p.kind) {
    case MK_MEDIAN:
        return coordinate_merge(m, m->valid, nv, &cr);
    case MK_TRIMMED:
        cr.trim = (int)floor(m->p.beta * nv + 1e-9);
        if (nv - 2 * cr.trim < 1)
            return too_few("trimmed", nv, 2 * cr.trim + 1);
        return coordinate_merge(m, m->valid, nv, &cr);
    case MK_KRUM:
    case MK_MULTIKRUM:
        return run_krum(m, m->valid, nv);
    case MK_BULYAN:
        return run_bulyan(m, m->valid, nv);
    default:
        fed_log(FED_LOG_ERROR, "merge: not a robust strategy");
        return FED_ERR_INTERNAL;
    }
}
