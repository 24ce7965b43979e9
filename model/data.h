/* data.h - datasets on the node's own disk: IDX (optionally gzip) and CSV
 * readers, strict about every byte, and the seeded partitioners that give a
 * node its shard. A dataset is loaded once and shared read-only by every
 * model that uses it; a shard is just a list of indices into it. */
#ifndef FED_MODEL_DATA_H
#define FED_MODEL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"
#include "model/model.h"

#define FED_DATA_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

typedef struct fed_dataset {
    size_t n;             /* samples */
    fed_model_shape shape;/* (c, h, w) per sample and the number of classes */
    size_t features;      /* c * h * w */
    uint8_t *x_u8;        /* (n, features) images, or NULL */
    float *x_f32;         /* (n, features) standardized features, or NULL */
    int32_t *y;           /* (n) labels in [0, classes) */
} fed_dataset;

/* Limits a reader enforces before allocating. */
#define FED_DATA_MAX_SAMPLES (1u << 26)
#define FED_DATA_MAX_FEATURES (1u << 20)

/* IDX: images idx3 (uint8, n x rows x cols) and labels idx1 (uint8), plain
 * or gzip (by magic bytes). Errors are logged with the path and cause. */
FED_WUR fed_err fed_data_load_idx(const char *images_path, const char *labels_path,
                                  fed_dataset **out);
/* Same on memory buffers (fuzz targets, tests). */
FED_WUR fed_err fed_data_parse_idx(const uint8_t *images, size_t images_len,
                                   const uint8_t *labels, size_t labels_len, fed_dataset **out);

/* CSV with a header row; the label column is named; every other column must
 * be numeric. Features are standardized with the given statistics file
 * ("mean,std" lines per feature) or with this file's own statistics. */
typedef struct fed_csv_opts {
    const char *label_column; /* default "label" */
    const char *stats_path;   /* NULL: compute from this file */
} fed_csv_opts;
FED_WUR fed_err fed_data_load_csv(const char *path, const fed_csv_opts *opts, fed_dataset **out);
FED_WUR fed_err fed_data_parse_csv(const char *buf, size_t len, const fed_csv_opts *opts,
                                   fed_dataset **out);

/* --data argument: "fashion-mnist" (the Debian dataset), a directory holding
 * train-/t10k- IDX files, or a CSV path. train selects the split (a CSV has
 * only one). */
FED_WUR fed_err fed_data_open(const char *what, int train, fed_dataset **out);
void fed_data_free(fed_dataset *d);

/* Partitioners: "iid", "dirichlet:ALPHA", "shards:N". The same scheme, k and
 * seed give every node the same split; node `shard` (0-based, < k) receives
 * its own indices, in a seeded order. The caller frees *idx with fed_free. */
FED_WUR fed_err fed_data_partition(const fed_dataset *d, const char *scheme, int shard, int k,
                                   uint64_t seed, uint32_t **idx, size_t *n);

/* Fill a host batch from indices idx[0..n): copies samples into the caller's
 * staging buffers (x: n * features bytes or floats, y: n labels). */
void fed_data_gather(const fed_dataset *d, const uint32_t *idx, int n, void *x_stage,
                     int32_t *y_stage, fed_batch *b);

#endif
