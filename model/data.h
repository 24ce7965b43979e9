/* data.h - datasets on the node's own disk: IDX (optionally gzip) and CSV
 * readers, strict about every byte, and the seeded partitioners that give a
 * node its shard. A dataset is loaded once and shared read-only by every
 * model that uses it; a shard is just a list of indices into it. */
#ifndef FED_MODEL_DATA_H
#define FED_MODEL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/opt.h"
#include "core/rng.h"
#include "model/colstats.h"
#include "model/model.h"

#define FED_DATA_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

typedef struct fed_dataset {
    size_t n;             /* samples */
    fed_model_shape shape;/* (c, h, w) per sample and the number of classes */
    size_t features;      /* c * h * w */
    uint8_t *x_u8;        /* (n, features) images, or NULL */
    float *x_f32;         /* (n, features) standardized features, or NULL */
    int32_t *y;           /* (n) labels in [0, classes) */
    /* CSV under --task regression: (n) the label column's numbers, the
     * targets of a model whose loss is mse (as written, not standardized);
     * y is then all 0 and classes 1. NULL otherwise. */
    float *y_f32;
    /* What a lenient reader did (zero for IDX and strict CSV): */
    size_t skipped;       /* bad images or bad rows skipped (--skip-bad-*) */
    size_t missing;       /* CSV cells empty or NA, filled */
    size_t empty_classes; /* image class folders left with no image */
    /* CSV: (features) 1 where the column holds hash-bucket ids in
     * [0, hash_buckets) (0 = missing) as plain numbers, kept out of
     * standardization; NULL when no column is categorical. */
    uint8_t *categorical;
    int hash_buckets;
    void *map;            /* x_u8 lies in this read-only mapping of map_len
                             bytes (an inflated cache file), or NULL: x_u8 is
                             the dataset's own */
    size_t map_len;
    /* Images standardized per channel with the federation's shared
     * statistics (fed_data_set_channel_stats): (2 c) floats; channel k's
     * byte b enters the model as b * chan_map[2k] + chan_map[2k + 1] =
     * (b - mean_k) / std_k in place of the input scale's map, applied as a
     * batch becomes floats (fed_batch.x_map), the bytes left as they are.
     * NULL: the input scale's map. Owned. */
    float *chan_map;
    int view;             /* fed_data_view: the samples are another
                             dataset's, only chan_map and the struct this
                             one's */
} fed_dataset;

/* Limits a reader enforces before allocating. */
#define FED_DATA_MAX_SAMPLES (1u << 26)
#define FED_DATA_MAX_FEATURES (1u << 20)
/* Bound on one file read into memory and on one dataset's sample bytes. */
#define FED_DATA_MAX_BYTES (1ull << 32)
/* IDX labels must lie in [0, FED_DATA_IDX_CLASSES) (MNIST-style data sets);
 * CSV labels in [0, 256), with classes = largest label + 1. */
#define FED_DATA_IDX_CLASSES 10

/* IDX: images idx3 (uint8, n x rows x cols) and labels idx1 (uint8), plain
 * or gzip (by magic bytes 1f 8b; concatenated members allowed). Images stay
 * uint8: shape (1, rows, cols), classes FED_DATA_IDX_CLASSES.
 *
 *   offset  size   field
 *   0       2      0x00 0x00 (else FED_ERR_MAGIC)
 *   2       1      dtype 0x08 = uint8 (else FED_ERR_FORMAT)
 *   3       1      ndim: 3 images, 1 labels (else FED_ERR_FORMAT)
 *   4       4*ndim sizes, big-endian uint32: count[, rows, cols]
 *   ...     prod   the values, row-major, nothing after them
 *
 * Errors, each logged with the path (or "<images buffer>") and cause:
 * FED_ERR_TRUNCATED (short header or data, gzip cut short, or gzip input too
 * small to hold what the header claims), FED_ERR_FORMAT (wrong dtype or
 * ndim, zero count or size, trailing bytes, corrupt gzip), FED_ERR_TOO_LARGE
 * (count, rows*cols or total bytes over the FED_DATA_MAX_* limits, checked
 * before allocating), FED_ERR_SHAPE (image and label counts differ),
 * FED_ERR_RANGE (a label >= FED_DATA_IDX_CLASSES), FED_ERR_NOMEM. Nothing is
 * inflated past the header-implied size plus one byte. Files are read through
 * a 256 KiB window, never whole, so loading holds the dataset and little more. */
FED_WUR fed_err fed_data_load_idx(const char *images_path, const char *labels_path,
                                  fed_dataset **out);
/* Same on memory buffers (fuzz targets, tests). */
FED_WUR fed_err fed_data_parse_idx(const uint8_t *images, size_t images_len,
                                   const uint8_t *labels, size_t labels_len, fed_dataset **out);

/* CSV with a header row; the label column is named; every other column must
 * be numeric. Features are standardized with the given statistics file
 * ("mean,std" lines per feature) or with this file's own statistics.
 * Shape (1, 1, features), x_f32 set, classes = largest label + 1.
 * Strict: lines end in \n or \r\n, fields are split at ',' and trimmed of
 * blanks, quotes are refused (FED_ERR_FORMAT); a feature must parse whole
 * with strtod (FED_ERR_NOT_NUMERIC), be finite (FED_ERR_NAN; overflow
 * FED_ERR_RANGE); a label is decimal digits in [0, 255] (FED_ERR_RANGE when
 * negative or larger); every row has the header's field count, no empty
 * lines (FED_ERR_FORMAT); a missing label column is FED_ERR_NOTFOUND; no
 * data rows FED_ERR_TRUNCATED. Errors are logged as "PATH:LINE: column C:
 * cause". Standardization: (x - mean) / std with the population std, and
 * std 1 for a constant column. */
typedef struct fed_csv_opts {
    const char *label_column; /* default "label" */
    const char *stats_path;   /* NULL: compute from this file */
    /* Categorical columns: NULL or "" none (strict: every feature numeric),
     * "auto" every column with a cell that is not a number (each reported
     * at info level where the training split is read, at debug level where
     * the test split reads the training file again), else a comma-separated list of column names (one not
     * in the header is FED_ERR_NOTFOUND). Such a column's cell becomes
     * 1 + SipHash-2-4(FED_CSV_HASH_KEY, cell) % (hash_buckets - 1), a
     * missing cell bucket 0: the same id at every site, no vocabulary. */
    const char *categorical;
    int hash_buckets;         /* 0: FED_CSV_DEFAULT_BUCKETS; else >= 2 */
    /* The label column holds a number to predict (--task regression): any
     * finite number that fits a float, kept in fed_dataset.y_f32. */
    int regression;
    /* A bad row (ragged, a cell that does not parse, a bad label) is logged
     * by PATH:LINE and skipped, counted in fed_dataset.skipped, instead of
     * refusing the file. */
    int skip_bad_rows;
    /* Missing numeric cells (empty or NA) are filled with fill[j] for
     * feature j when set (the hook for shared statistics), else with the
     * statistics file's mean, else the training file's, else the mean of the
     * file's present values. */
    const double *fill;
    /* Shared statistics (model/colstats.h): when set, every numeric column
     * j is standardized with (stats_mean[j], stats_std[j]) instead of the
     * statistics file's or the file's own, and its missing cells filled
     * with stats_mean[j] (unless fill is set); stats_features must be the
     * file's feature count (else FED_ERR_SHAPE). A categorical column
     * keeps its ids. */
    const double *stats_mean, *stats_std;
    size_t stats_features;
    /* fed_data_csv_colstats under DP statistics: every numeric value
     * clipped into these bounds and centred (model/colstats.h's
     * fed_colstats_local_dp, no minimum count); NULL: exact. */
    const struct fed_colstats_dp *colstats_dp;
} fed_csv_opts;
#define FED_CSV_DEFAULT_BUCKETS 1024
#define FED_CSV_MAX_BUCKETS (1 << 20)
/* The fixed, public SipHash key of categorical cells (16 bytes). */
#define FED_CSV_HASH_KEY "fednode/csv-cat1"
/* SipHash-2-4 of msg under a 16-byte key (also names image-folder caches). */
uint64_t fed_data_siphash(const uint8_t key[16], const void *msg, size_t len);
FED_WUR fed_err fed_data_load_csv(const char *path, const fed_csv_opts *opts, fed_dataset **out);
FED_WUR fed_err fed_data_parse_csv(const char *buf, size_t len, const fed_csv_opts *opts,
                                   fed_dataset **out);

/* --data argument: "fashion-mnist" (the Debian dataset in $FEDNODE_DATA when
 * set, else FED_DATA_DEFAULT_DIR), a directory holding
 * {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (plain preferred), or a
 * CSV path (see fed_data_open_csv for its test split). train selects the
 * split. A missing file or directory is FED_ERR_NOTFOUND.
 * A gzip IDX pair is inflated once and kept, as plain IDX files, in
 * $FEDNODE_CACHE (default $XDG_CACHE_HOME/fednode, else ~/.cache/fednode;
 * "off" keeps nothing): later opens read those instead of inflating again
 * (a quarter of a second per process for Fashion-MNIST's training split).
 * Their names carry the source's size and modification time, so a changed
 * source is never answered from an old copy, and they go through the same
 * strict reader (a damaged copy is ignored and written anew). */
FED_WUR fed_err fed_data_open(const char *what, int train, fed_dataset **out);

/* Image folders: DIR/CLASS/FILE, one subfolder per class; classes are the
 * subfolder names sorted bytewise (strcmp), class i the i-th; names starting
 * with '.' are ignored. DIR/train and DIR/test, when both are folders, are
 * the two splits, the test split's classes those of DIR/train by name (a
 * class it lacks has no images, no error; a folder DIR/train lacks is
 * FED_ERR_SHAPE); else DIR serves both (a note is logged). Every other
 * regular file in a class folder must be a PNG or a JPEG, told by its magic
 * bytes (never its name). Each is decoded (libpng, libjpeg-turbo) to gray or
 * RGB, resized bilinearly so that it covers c x h x w, center-cropped, and
 * stored planar (c, h, w) as uint8: the same dataset the IDX reader gives.
 * Memory: one source file (at most FED_DATA_IMG_MAX_FILE bytes) and one
 * decoded image (at most FED_DATA_IMG_MAX_PIXELS pixels, checked from the
 * header before allocating) at a time, and the dataset itself, whose size
 * n * c * h * w is checked against max_bytes before any image is decoded.
 * The decoded dataset is kept in the cache (as for gzip IDX, see
 * fed_data_open) under a name that hashes the shape, the flags and every
 * file's name, size and modification time.
 * Errors (each logged with the path): a bad image (not PNG/JPEG, corrupt,
 * truncated, too large) FED_ERR_MAGIC / FED_ERR_FORMAT / FED_ERR_TOO_LARGE;
 * a class folder without images FED_ERR_NOTFOUND; with skip_bad_images
 * these are logged as warnings and counted (skipped, empty_classes: an
 * empty class keeps its number, so labels agree across sites). */
typedef struct fed_data_opts {
    int c, h, w;           /* image input shape; 0: 1, 28, 28 */
    int skip_bad_images;
    uint64_t max_bytes;    /* decoded image dataset bound; 0: FED_DATA_IMG_MAX_BYTES */
    fed_csv_opts csv;
} fed_data_opts;
#define FED_DATA_IMG_MAX_PIXELS (1u << 25) /* per source image (about 5800 x 5800) */
#define FED_DATA_IMG_MAX_FILE (64u << 20)  /* per source file */
#define FED_DATA_IMG_MAX_BYTES (2ull << 30)
#define FED_DATA_IMG_MAX_CLASSES 256
#define FED_DATA_IMG_MAX_SIDE 4096         /* of the input shape */
/* The reader options as flags and INI keys (core/opt.h): a member m of a
 * config struct T, its table rows FED_DATA_FLAG_OPTS(T, m). `fednode train`,
 * `eval`, `run` and fedsim take them alike. */
typedef struct fed_data_flags {
    char image_shape[32];
    int skip_bad_images;
    char categorical[512];
    int hash_buckets;
    int skip_bad_rows;
    char task[16];
} fed_data_flags;
#define FED_DATA_FLAG_OPTS(T, m)                                                              \
    FED_OPT_DEF(T, m.image_shape, "image-shape", FED_OPT_STR, "1x28x28", 0, 0,               \
                "image folders: the input shape CxHxW (C 1 gray or 3 RGB); each image is "   \
                "resized (bilinear) to cover HxW and center-cropped"),                        \
    FED_OPT_DEF(T, m.skip_bad_images, "skip-bad-images", FED_OPT_BOOL, "false", 0, 0,        \
                "image folders: skip and count an unreadable image or an empty class "       \
                "folder instead of refusing the data"),                                       \
    FED_OPT_DEF(T, m.categorical, "categorical", FED_OPT_STR, "", 0, 0,                      \
                "CSV: columns of words (comma-separated names, or auto: every column with "  \
                "a cell that is not a number), hashed into --hash-buckets ids"),              \
    FED_OPT_DEF(T, m.hash_buckets, "hash-buckets", FED_OPT_INT, "1024", 2, 1048576,          \
                "CSV: ids of a categorical column (0 = missing; the same at every site)"),   \
    FED_OPT_DEF(T, m.skip_bad_rows, "skip-bad-rows", FED_OPT_BOOL, "false", 0, 0,            \
                "CSV: skip and count a bad row (logged as FILE:LINE) instead of refusing "   \
                "the file"),                                                                  \
    FED_OPT_DEF(T, m.task, "task", FED_OPT_STR, "classification", 0, 0,                       \
                "CSV: classification (the label a class 0..255) or regression (the label a " \
                "number, for a model whose loss is mse; eval: when not given, the model's "  \
                "loss says which)")
/* The flags as reader options (out->csv.categorical points into f).
 * FED_ERR_BAD_VALUE with why (cap bytes) for a bad --image-shape; nothing
 * is logged. */
FED_WUR fed_err fed_data_flags_opts(const fed_data_flags *f, fed_data_opts *out, char *why,
                                    size_t cap);
/* fed_data_open with options (NULL: defaults, as fed_data_open). */
FED_WUR fed_err fed_data_open_opts(const char *what, int train, const fed_data_opts *opts,
                                   fed_dataset **out);
/* An image folder (see above) as one split. */
FED_WUR fed_err fed_data_load_images(const char *dir, const fed_data_opts *opts,
                                     fed_dataset **out);
/* One PNG or JPEG in memory (by magic) to c (1 gray, 3 RGB) interleaved
 * 8-bit channels; *pixels (w * h * c bytes) freed by the caller with
 * fed_free. name is for the log. */
FED_WUR fed_err fed_data_decode_image(const uint8_t *buf, size_t len, const char *name, int c,
                                      uint8_t **pixels, int *w, int *h);
/* Resize (bilinear, covering) and center-crop interleaved src (sw x sh x c)
 * into planar dst (c x dh x dw). Same size: an exact copy. */
void fed_data_fit_image(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh);
/* The CSV part of fed_data_open: for train, path itself; for test, the
 * sibling "X.test.csv" of "X.csv" when it exists, standardized with the
 * training file's statistics (or opts->stats_path), else path again (a note
 * is logged). The sibling must have the training file's header, column for
 * column (else FED_ERR_SHAPE, naming both files and the first column that
 * differs), and only its classes (a label beyond them is a bad row:
 * FED_ERR_RANGE, or skipped with skip_bad_rows); it takes the training
 * file's categorical columns. opts may be NULL (label column "label", own
 * statistics). */
FED_WUR fed_err fed_data_open_csv(const char *path, int train, const fed_csv_opts *opts,
                                  fed_dataset **out);
/* Per-feature mean and std (population; std 0 -> 1) of a CSV file's raw
 * features, as used to standardize it; (features) doubles each, freed by the
 * caller with fed_free. */
FED_WUR fed_err fed_data_csv_stats(const char *path, const fed_csv_opts *opts, double **mean,
                                   double **std, size_t *features);
/* A site's shared-statistics contribution (model/colstats.h) from a CSV
 * file's raw values (missing cells as missing, categorical columns as
 * zeros), over its rows rows[0..nrows) (row i: the dataset's sample i;
 * rows NULL: every row): *out (*features * FED_COLSTATS_INTS integers,
 * freed by the caller with fed_free); a column with fewer than min_count
 * present values contributes zeros and is counted in *suppressed. A value
 * out of the statistics' range is FED_ERR_RANGE, logged with the path, row
 * and column; a row index past the file FED_ERR_RANGE. */
FED_WUR fed_err fed_data_csv_colstats(const char *path, const fed_csv_opts *opts,
                                      const uint32_t *rows, size_t nrows, uint64_t min_count,
                                      int64_t **out, size_t *features, size_t *suppressed);
/* Write a statistics file ("mean,std" header, then one "MEAN,STD" line per
 * feature, %.17g) that fed_csv_opts.stats_path reads back exactly. */
FED_WUR fed_err fed_data_write_stats(const char *path, const double *mean, const double *std,
                                     size_t features);
/* A whole file into memory (NUL-terminated, *len excludes the NUL), refused
 * with FED_ERR_TOO_LARGE over max bytes; logs path and cause on error. */
FED_WUR fed_err fed_data_read_file(const char *path, uint64_t max, uint8_t **buf, size_t *len);
void fed_data_free(fed_dataset *d);

/* Partitioners: "iid", "dirichlet:ALPHA", "shards:N", "niid-dirichlet:BETA",
 * "labels:K", "quantity:BETA". The same scheme, k and
 * seed give every node the same split; node `shard` (0-based, < k) receives
 * its own indices, in a seeded order. The caller frees *idx with fed_free.
 * Every sample goes to exactly one node.
 *   iid          shuffle all, node i takes block [n*i/k, n*(i+1)/k)
 *   dirichlet:A  per class (in class order): shuffle its samples, draw
 *                p ~ Dirichlet(A,...,A) over k nodes, node i takes the slice
 *                between round(n_c * P_{i-1}) and round(n_c * P_i) (P the
 *                cumulative sums); small A = strong label skew; a node may
 *                get nothing
 *   shards:N     sort by label (stable), cut into N*k equal chunks, deal
 *                each node N chunks at random; N*k > n is FED_ERR_RANGE
 * and NIID-Bench's (Li, Diao, Chen, He, ICDE 2022), as its code draws them:
 *   niid-dirichlet:B  per class, p ~ Dir(B) over the parties, the share of
 *                a party holding n/k samples already zeroed; the split redrawn
 *                until every party holds 10 samples (FED_ERR_RANGE after 1000)
 *   labels:K     party j holds label j mod C and K - 1 other random labels;
 *                each label split equally among its holders ("#C=K")
 *   quantity:B   shuffled samples cut by p ~ Dir(B), redrawn until every
 *                party holds 10
 *   noise:S      iid; party i's training inputs get Gaussian noise of std
 *                S * i / (k - 1) at batch time (fed_data_partition_noise,
 *                fed_trainer_set_noise): feature skew, not label skew
 * A bad scheme is FED_ERR_BAD_VALUE, a bad shard/k FED_ERR_RANGE (logged). */
FED_WUR fed_err fed_data_partition(const fed_dataset *d, const char *scheme, int shard, int k,
                                   uint64_t seed, uint32_t **idx, size_t *n);

/* A held-out split of idx[0..n) (a site's shard), stratified by label:
 * of each class's samples a fraction frac in (0, 1), rounded, at least one
 * when the class has two or more, drawn by a shuffle seeded with seed;
 * *val gets them and idx keeps the rest, each in its old order (*n, *nval
 * the counts). FED_ERR_RANGE when either side would be empty. */
FED_WUR fed_err fed_data_split_val(const fed_dataset *d, uint32_t *idx, size_t *n, double frac,
                                   uint64_t seed, uint32_t **val, size_t *nval);

/* A scarce site: idx[0..*n) cut to about keep samples, each label's
 * share of them (rounded; a label with two or more samples keeps at least
 * one) drawn by a shuffle seeded with seed, the rest dropped; what is kept
 * stays in its old order. Nothing changes when keep is 0, *n <= keep, or
 * no label has a sample to spare. fedsim's --shard-samples. FED_ERR_NOMEM. */
FED_WUR fed_err fed_data_keep(const fed_dataset *d, uint32_t *idx, size_t *n, size_t keep,
                              uint64_t seed);

/* A node that keeps only its shard: a new dataset holding copies of
 * samples idx[0..n) (n >= 1) in that order, same shape and classes, so the
 * full one can be freed. */
FED_WUR fed_err fed_data_subset(const fed_dataset *d, const uint32_t *idx, size_t n,
                                fed_dataset **out);

/* A view of d (images or CSV): the same samples, borrowed (d must outlive
 * it), with a chan_map of its own (d's copied), freed with fed_data_free;
 * what the shared statistics standardize without copying a sample. */
FED_WUR fed_err fed_data_view(const fed_dataset *d, fed_dataset **out);
/* Images: every channel k of d standardized with the pooled byte
 * statistics (mean[k], std[k], over bytes 0..255; c must be d's channel
 * count) from the next batch on: d->chan_map set. FED_ERR_SHAPE for CSV
 * data or another channel count, FED_ERR_RANGE for a mean or std that is
 * not finite or a std not over 0 (logged naming the channel). */
FED_WUR fed_err fed_data_set_channel_stats(fed_dataset *d, const double *mean, const double *std,
                                           size_t c);
/* Images: each channel's histogram of byte values over samples
 * idx[0..n) (idx NULL: the first n) into hist (c x
 * FED_COLSTATS_BYTE_VALUES counts, channel k's from
 * hist[k * FED_COLSTATS_BYTE_VALUES]), what model/colstats.h's
 * fed_colstats_local_bytes reads. */
void fed_data_channel_hist(const fed_dataset *d, const uint32_t *idx, size_t n, uint64_t *hist);

/* A parsed partition scheme (for checking --partition early). */
typedef enum fed_data_scheme_kind {
    FED_DATA_IID,
    FED_DATA_DIRICHLET,
    FED_DATA_SHARDS,
    FED_DATA_NIID_DIRICHLET,
    FED_DATA_LABELS,
    FED_DATA_QUANTITY,
    FED_DATA_NOISE,
} fed_data_scheme_kind;
typedef struct fed_data_scheme {
    fed_data_scheme_kind kind;
    double alpha; /* dirichlet, niid-dirichlet, quantity: concentration, > 0 */
    int shards;   /* shards: chunks per node, >= 1 */
    int labels;   /* labels: per party, >= 1 */
    double sigma; /* noise: the last party's std, >= 0 */
} fed_data_scheme;
/* FED_ERR_BAD_VALUE (logged, naming the text) when scheme is none of the above. */
FED_WUR fed_err fed_data_parse_scheme(const char *scheme, fed_data_scheme *out);
/* The std of the Gaussian noise party shard of k adds to its training
 * inputs under scheme: noise:S gives S * shard / (k - 1) (0 with k = 1),
 * every other scheme 0. Errors as fed_data_partition's. */
FED_WUR fed_err fed_data_partition_noise(const char *scheme, int shard, int k, double *std);

/* Training augmentation of uint8 images: "none" (or ""), "crop:P" (each
 * sample shifted by dx, dy drawn uniformly from [-P, P], as a random crop
 * of the image padded with P zeros each side), "flip" (mirrored left-right
 * with probability 1/2), or both "crop:P,flip". FED_ERR_BAD_VALUE (logged,
 * naming the text) otherwise; P in 1..64. */
typedef struct fed_data_aug {
    int crop; /* P, 0: none */
    int flip;
} fed_data_aug;
FED_WUR fed_err fed_data_parse_augment(const char *spec, fed_data_aug *out);
/* Augments n planar uint8 samples of shape s in x, in place, with draws
 * from rng in sample order (the same rng state, the same result); scratch
 * holds one sample (c * h * w bytes). Features as floats (CSV) are left
 * alone. */
void fed_data_augment(const fed_data_aug *a, fed_rng *rng, const fed_model_shape *s, uint8_t *x,
                      int n, uint8_t *scratch);
/* Whether the augmentation spec fits d (images, or "none"): else
 * FED_ERR_UNSUPPORTED, logged naming --augment (FED_ERR_BAD_VALUE for a bad
 * spec). For programs to refuse at start what training would refuse. */
FED_WUR fed_err fed_data_augment_check(const char *spec, const fed_dataset *d);

/* Fill a host batch from indices idx[0..n): copies samples into the caller's
 * staging buffers (x: n * features bytes or floats, y: n labels, or with
 * regression targets n floats in the same bytes: b->y_f32 set, b->y NULL). */
void fed_data_gather(const fed_dataset *d, const uint32_t *idx, int n, void *x_stage,
                     int32_t *y_stage, fed_batch *b);

#endif
