/* chart.h - fedsim's pictures: accuracy against round and against bytes
 * sent, one line per run, written as SVG by our own code (no library).
 * A run's rows are fedsim's CSV columns: round, t_s, accuracy, spread,
 * bytes, merged (header line first). */
#ifndef FED_SIM_CHART_H
#define FED_SIM_CHART_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define FED_SIM_CHART_MAX_SERIES 8
#define FED_SIM_CHART_MAX_POINTS 100000

typedef struct fed_sim_series {
    char name[64];
    size_t n;
    double *round, *accuracy, *bytes; /* (n) each */
} fed_sim_series;

/* Reads one run from fedsim's CSV (name: what the legend says).
 * FED_ERR_NOTFOUND, FED_ERR_IO, FED_ERR_FORMAT (not fedsim's columns, a bad
 * number), FED_ERR_TOO_LARGE, FED_ERR_NOMEM. */
FED_WUR fed_err fed_sim_series_load_csv(const char *path, const char *name, fed_sim_series *s);
/* The same from text. */
FED_WUR fed_err fed_sim_series_parse_csv(const char *text, size_t len, const char *name,
                                         fed_sim_series *s);
void fed_sim_series_fini(fed_sim_series *s);

/* Writes the two charts of n series (1..FED_SIM_CHART_MAX_SERIES) to path as
 * SVG: accuracy against round, and against megabytes sent. Rows with no
 * accuracy (NaN) are left out. FED_ERR_INVAL, FED_ERR_IO. */
FED_WUR fed_err fed_sim_chart_svg(const char *path, const char *title, const fed_sim_series *s,
                                  size_t n);

#endif
