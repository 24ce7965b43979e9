/* chart.c - fedsim's CSV read back and drawn as SVG (chart.h): two panels
 * (accuracy against round, against MB sent), axes with round-number ticks,
 * one coloured line per run and a legend. Owns the series it reads; prints
 * only into the file it is given. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "model/data.h"
#include "app/chart.h"

/* fedsim's CSV: these columns, then lr (the round's learning rate), then
 * epsilon (DP-FedAvg's, 0 without); a file without the lr or epsilon
 * column, written before they came, reads the same */
#define CSV_HEADER "round,t_s,accuracy,spread,bytes,merged"

static const char *const colours[FED_CHART_MAX_SERIES] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

void fed_chart_series_fini(fed_chart_series *s)
{
    if (!s)
        return;
    fed_free(s->round);
    fed_free(s->accuracy);
    fed_free(s->bytes);
    fed_free(s->epsilon);
    memset(s, 0, sizeof *s);
}

fed_err fed_chart_series_parse_csv(const char *text, size_t len, const char *name,
                                 fed_chart_series *s)
{
    size_t lines = 0, at, cap;
    int has_lr, has_eps = 0;
    fed_err e = FED_OK;

    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name ? name : "");
    if (len < sizeof CSV_HEADER - 1 || memcmp(text, CSV_HEADER, sizeof CSV_HEADER - 1) != 0)
        return FED_ERR_FORMAT;
    has_lr = len >= sizeof CSV_HEADER + 2 && !memcmp(text + sizeof CSV_HEADER - 1, ",lr", 3);
    {
        size_t after = sizeof CSV_HEADER - 1 + (has_lr ? 3 : 0);

        if (has_lr && len >= after + 8 && !memcmp(text + after, ",epsilon", 8)) {
            has_eps = 1;
            after += 8;
        }
        if (after < len && text[after] != '\n' && text[after] != '\r')
            return FED_ERR_FORMAT; /* another column than lr and epsilon */
    }
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    if (lines > FED_CHART_MAX_POINTS)
        return FED_ERR_TOO_LARGE;
    cap = lines ? lines : 1;
    s->round = fed_malloc(cap * sizeof *s->round);
    s->accuracy = fed_malloc(cap * sizeof *s->accuracy);
    s->bytes = fed_malloc(cap * sizeof *s->bytes);
    s->epsilon = fed_malloc(cap * sizeof *s->epsilon);
    if (!s->round || !s->accuracy || !s->bytes || !s->epsilon) {
        fed_chart_series_fini(s);
        return FED_ERR_NOMEM;
    }
    {
        const char *nl = memchr(text, '\n', len); /* past the header */

        at = nl ? (size_t)(nl - text) + 1 : len;
    }
    while (at < len && e == FED_OK) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        char line[256];
        double r, t, acc, spread, bytes, lr, eps = 0;
        unsigned merged;
        char extra;

        if (end > at) {
            if (end - at >= sizeof line)
                e = FED_ERR_FORMAT;
            else {
                memcpy(line, text + at, end - at);
                line[end - at] = 0;
                int ok = has_eps ? sscanf(line, "%lf,%lf,%lf,%lf,%lf,%u,%lf,%lf %c", &r, &t,
                                          &acc, &spread, &bytes, &merged, &lr, &eps,
                                          &extra) == 8
                         : has_lr ? sscanf(line, "%lf,%lf,%lf,%lf,%lf,%u,%lf %c", &r, &t, &acc,
                                           &spread, &bytes, &merged, &lr, &extra) == 7
                                  : sscanf(line, "%lf,%lf,%lf,%lf,%lf,%u %c", &r, &t, &acc,
                                           &spread, &bytes, &merged, &extra) == 6;

                if (!ok || s->n >= cap)
                    e = FED_ERR_FORMAT;
                else {
                    s->round[s->n] = r;
                    s->accuracy[s->n] = acc;
                    s->bytes[s->n] = bytes;
                    s->epsilon[s->n] = isfinite(eps) && eps > 0 ? eps : 0;
                    s->n++;
                }
            }
        }
        at = end + 1;
    }
    if (e != FED_OK)
        fed_chart_series_fini(s);
    return e;
}

fed_err fed_chart_series_load_csv(const char *path, const char *name, fed_chart_series *s)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    fed_err e = fed_data_read_file(path, 64u << 20, &buf, &len);

    memset(s, 0, sizeof *s);
    if (e == FED_OK)
        e = fed_chart_series_parse_csv((const char *)buf, len, name, s);
    fed_free(buf);
    return e;
}

/* ---- drawing ---- */

typedef struct panel {
    double x0, y0, w, h;       /* the plot area, in SVG units */
    double xmin, xmax, ymin, ymax;
} panel;

/* A tick step of 1, 2 or 5 times a power of ten, giving about five ticks. */
static double tick_step(double span)
{
    double raw = span / 5, p = pow(10, floor(log10(raw > 0 ? raw : 1)));

    if (raw / p >= 5)
        return 5 * p;
    if (raw / p >= 2)
        return 2 * p;
    return p;
}

static double px(const panel *p, double x) { return p->x0 + (x - p->xmin) / (p->xmax - p->xmin) * p->w; }
static double py(const panel *p, double y) { return p->y0 + p->h - (y - p->ymin) / (p->ymax - p->ymin) * p->h; }

static void draw_axes(FILE *f, const panel *p, const char *xlabel, const char *ylabel)
{
    double sx = tick_step(p->xmax - p->xmin), sy = tick_step(p->ymax - p->ymin);

    fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#444'/>\n",
            p->x0, p->y0, p->w, p->h);
    for (double x = ceil(p->xmin / sx) * sx; x <= p->xmax + 1e-9; x += sx)
        fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>"
                   "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>%g</text>\n",
                px(p, x), p->y0, px(p, x), p->y0 + p->h, px(p, x), p->y0 + p->h + 14, x);
    for (double y = ceil(p->ymin / sy) * sy; y <= p->ymax + 1e-9; y += sy)
        fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>"
                   "<text x='%.1f' y='%.1f' font-size='11' text-anchor='end'>%g</text>\n",
                p->x0, py(p, y), p->x0 + p->w, py(p, y), p->x0 - 4, py(p, y) + 4, y);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' text-anchor='middle'>%s</text>\n",
            p->x0 + p->w / 2, p->y0 + p->h + 32, xlabel);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' text-anchor='middle' "
               "transform='rotate(-90 %.1f %.1f)'>%s</text>\n",
            p->x0 - 40, p->y0 + p->h / 2, p->x0 - 40, p->y0 + p->h / 2, ylabel);
}

static void draw_line(FILE *f, const panel *p, const double *x, const double *y, size_t n,
                      const char *colour)
{
    int open = 0;

    for (size_t i = 0; i < n; i++) {
        if (isnan(y[i]))
            continue;
        if (!open)
            fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", colour);
        open = 1;
        fprintf(f, " %.1f,%.1f", px(p, x[i]), py(p, y[i]));
    }
    if (open)
        fprintf(f, "'/>\n");
}

void fed_chart_xml_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            if ((unsigned char)*s < 0x20 && *s != '\t' && *s != '\n')
                fputc('?', f); /* not allowed in XML 1.0 */
            else
                fputc(*s, f);
        }
    }
}

/* The series' last measured accuracy (NaN: none). */
static double last_accuracy(const fed_chart_series *s)
{
    for (size_t i = s->n; i-- > 0;)
        if (!isnan(s->accuracy[i]))
            return s->accuracy[i];
    return NAN;
}

/* Whether a series has an epsilon (a DP-FedAvg run). */
static int has_epsilon(const fed_chart_series *s)
{
    for (size_t i = 0; s->epsilon && i < s->n; i++)
        if (s->epsilon[i] > 0)
            return 1;
    return 0;
}

fed_err fed_chart_svg_write_x(FILE *f, const char *title, fed_chart_x x, const char *xlabel,
                              const fed_chart_series *s, size_t n)
{
    panel pr = {70, 50, 380, 260, 0, 1, 1, 0}, pb = {540, 50, 380, 260, 0, 1, 1, 0};
    int eps = x == FED_CHART_X_EPSILON;

    if (!f || !s || n < 1 || n > FED_CHART_MAX_SERIES)
        return FED_ERR_INVAL;
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            if (isnan(s[k].accuracy[i]))
                continue;
            pr.xmax = fmax(pr.xmax, s[k].round[i]);
            pb.xmax = fmax(pb.xmax, eps ? (s[k].epsilon ? s[k].epsilon[i] : 0)
                                        : s[k].bytes[i] / 1e6);
            pr.ymin = fmin(pr.ymin, s[k].accuracy[i]);
            pr.ymax = fmax(pr.ymax, s[k].accuracy[i]);
        }
    if (!(pr.ymax > pr.ymin)) {
        pr.ymin = 0;
        pr.ymax = 1;
    }
    {   /* a little room above and below, on 0.05 steps */
        pr.ymin = fmax(0, floor((pr.ymin - 0.02) * 20) / 20);
        pr.ymax = fmin(1, ceil((pr.ymax + 0.01) * 20) / 20);
    }
    pb.ymin = pr.ymin;
    pb.ymax = pr.ymax;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='960' height='%zu' "
               "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
            (size_t)(380 + 18 * n));
    fprintf(f, "<text x='480' y='24' font-size='15' text-anchor='middle'>");
    fed_chart_xml_text(f, title);
    fprintf(f, "</text>\n");
    draw_axes(f, &pr, "round", "test accuracy");
    draw_axes(f, &pb, xlabel ? xlabel : eps ? "epsilon (client-level)" : "MB sent (all nodes)",
              "test accuracy");
    for (size_t k = 0; k < n; k++) {
        double *mb = fed_malloc((s[k].n ? s[k].n : 1) * sizeof *mb);

        if (mb && eps && !has_epsilon(&s[k])) { /* no DP: its final accuracy, dashed */
            double acc = last_accuracy(&s[k]);

            if (!isnan(acc))
                fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' "
                           "stroke-width='2' stroke-dasharray='6,4'/>\n",
                        pb.x0, py(&pb, acc), pb.x0 + pb.w, py(&pb, acc), colours[k]);
        } else if (mb) {
            for (size_t i = 0; i < s[k].n; i++)
                mb[i] = eps ? s[k].epsilon[i] : s[k].bytes[i] / 1e6;
            draw_line(f, &pb, mb, s[k].accuracy, s[k].n, colours[k]);
        }
        fed_free(mb);
        draw_line(f, &pr, s[k].round, s[k].accuracy, s[k].n, colours[k]);
        fprintf(f, "<rect x='70' y='%.1f' width='14' height='4' fill='%s'/>"
                   "<text x='90' y='%.1f' font-size='12'>",
                360.0 + 18 * (double)k, colours[k], 366.0 + 18 * (double)k);
        fed_chart_xml_text(f, s[k].name);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? FED_ERR_IO : FED_OK;
}

fed_err fed_chart_svg_write(FILE *f, const char *title, const char *xlabel_bytes,
                            const fed_chart_series *s, size_t n)
{
    return fed_chart_svg_write_x(f, title, FED_CHART_X_BYTES, xlabel_bytes, s, n);
}

fed_err fed_chart_svg(const char *path, const char *title, const fed_chart_series *s,
                          size_t n)
{
    return fed_chart_svg_x(path, title, FED_CHART_X_BYTES, s, n);
}

fed_err fed_chart_svg_x(const char *path, const char *title, fed_chart_x x,
                        const fed_chart_series *s, size_t n)
{
    FILE *f;
    fed_err e;

    if (!path || !s || n < 1 || n > FED_CHART_MAX_SERIES)
        return FED_ERR_INVAL;
    if (!(f = fopen(path, "w")))
        return FED_ERR_IO;
    e = fed_chart_svg_write_x(f, title, x, NULL, s, n);
    if (fclose(f) != 0 && e == FED_OK)
        e = FED_ERR_IO;
    return e;
}
