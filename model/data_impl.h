/* data_impl.h - what the data readers (data.c, data_csv.c, data_img.c)
 * share and nothing else sees: the error logger, the decoded cache's folder
 * and its atomic IDX writer, and the image-folder side of fed_data_open. */
#ifndef FED_MODEL_DATA_IMPL_H
#define FED_MODEL_DATA_IMPL_H

#include "model/data.h"

/* Logs "NAME: CAUSE (ERRNAME)" at error level and returns e. */
fed_err fedi_data_log_fail(fed_err e, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* As fedi_data_log_fail, but when why is set (cap bytes) the cause goes
 * there, unlogged, for a caller who says it itself (a skipped image). */
fed_err fedi_data_fail(char *why, size_t cap, fed_err e, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* fed_data_read_file, its failure said into why as fedi_data_fail says it. */
fed_err fedi_data_read_file(const char *path, uint64_t max, uint8_t **buf, size_t *len, char *why,
                            size_t cap);
/* The cache folder ($FEDNODE_CACHE, ...), made when missing; 0 when caching
 * is off or the folder cannot be made. */
int fedi_data_cache_dir(char *dir, size_t size);
/* Keeps d (uint8 samples, at most 256 classes) as an IDX pair: images
 * (n, c * h, w) and labels. Best effort, logged at info level when done. */
void fedi_data_cache_keep(const char *icache, const char *lcache, const fed_dataset *d);
/* Whether dir holds a subfolder (a class, or train/test). */
int fedi_data_has_subdirs(const char *dir);
/* The train or test split of an image folder (DIR/train, DIR/test, or DIR). */
fed_err fedi_data_open_images(const char *dir, int train, const fed_data_opts *opts,
                              fed_dataset **out);

#endif
