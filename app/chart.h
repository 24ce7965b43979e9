/* chart.h - the programs' pictures (fedsim's, and the status page of
 * `fednode run --http`):
 * accuracy against round and against bytes sent, one line per run, written
 * as SVG by our own code (no library). In app/ so that both programs can
 * draw without one depending on the simulator.
 * A run's rows are fedsim's CSV columns: round, t_s, accuracy, spread,
 * bytes, merged (header line first), then optionally lr, then optionally
 * epsilon. */
#ifndef FED_APP_CHART_H
#define FED_APP_CHART_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

#define FED_CHART_MAX_SERIES 8
#define FED_CHART_MAX_POINTS 100000

typedef struct fed_chart_series {
    char name[64];
    size_t n;
    double *round, *accuracy, *bytes; /* (n) each */
    double *epsilon;                  /* (n) DP-FedAvg's epsilon; 0: none */
} fed_chart_series;

/* What the second panel's x axis shows. */
typedef enum fed_chart_x {
    FED_CHART_X_BYTES = 0,   /* MB sent */
    FED_CHART_X_EPSILON = 1, /* client-level epsilon spent; a run without one
                                is drawn as a dashed line at its final accuracy */
} fed_chart_x;

/* Reads one run from fedsim's CSV (name: what the legend says).
 * FED_ERR_NOTFOUND, FED_ERR_IO, FED_ERR_FORMAT (not fedsim's columns, a bad
 * number), FED_ERR_TOO_LARGE, FED_ERR_NOMEM. */
FED_WUR fed_err fed_chart_series_load_csv(const char *path, const char *name, fed_chart_series *s);
/* The same from text. */
FED_WUR fed_err fed_chart_series_parse_csv(const char *text, size_t len, const char *name,
                                         fed_chart_series *s);
void fed_chart_series_fini(fed_chart_series *s);

/* Writes the two charts of n series (1..FED_CHART_MAX_SERIES) to path as
 * SVG: accuracy against round, and against megabytes sent. Rows with no
 * accuracy (NaN) are left out. FED_ERR_INVAL, FED_ERR_IO. */
FED_WUR fed_err fed_chart_svg(const char *path, const char *title, const fed_chart_series *s,
                                  size_t n);
/* The same SVG element to f (the status page inlines it); xlabel_bytes
 * names the second panel's x axis (NULL: "MB sent (all nodes)"). The title
 * and the series' names are escaped. FED_ERR_INVAL, FED_ERR_IO (f's error
 * flag). */
FED_WUR fed_err fed_chart_svg_write(FILE *f, const char *title, const char *xlabel_bytes,
                                    const fed_chart_series *s, size_t n);
/* The same with the second panel's x axis chosen (xlabel NULL: its own). */
FED_WUR fed_err fed_chart_svg_x(const char *path, const char *title, fed_chart_x x,
                                const fed_chart_series *s, size_t n);
FED_WUR fed_err fed_chart_svg_write_x(FILE *f, const char *title, fed_chart_x x,
                                      const char *xlabel, const fed_chart_series *s, size_t n);
/* s as XML text (and attribute) content: < > & " ' escaped, control
 * characters XML cannot carry as '?'. NULL writes nothing. */
void fed_chart_xml_text(FILE *f, const char *s);

#endif
