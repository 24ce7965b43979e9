/* fuzz_csv_lenient.c - libFuzzer target for the CSV reader's lenient paths:
 * categorical columns detected (auto) and hashed into 8 buckets, missing
 * cells filled, bad rows skipped. A dataset that parses must have bucket
 * ids in [0, 8) in its categorical columns, finite features elsewhere,
 * counts no larger than the file, and labels below its class count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/log.h"
#include "model/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(void *ctx, fed_log_level level, const char *line)
{
    (void)ctx;
    (void)level;
    (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fed_csv_opts opts = { .label_column = "label", .categorical = "auto", .hash_buckets = 8,
                          .skip_bad_rows = 1 };
    fed_dataset *d = NULL;

    fed_log_set_sink(quiet, NULL);
    if (fed_data_parse_csv((const char *)data, size, &opts, &d) != FED_OK) {
        if (d)
            abort();
        return 0;
    }
    if (d->n == 0 || d->features == 0 || !d->x_f32 || d->skipped > size ||
        d->missing > size || d->shape.classes < 1 || d->shape.classes > 256)
        abort();
    for (size_t i = 0; i < d->n; i++)
        for (size_t j = 0; j < d->features; j++) {
            float v = d->x_f32[i * d->features + j];

            if (d->categorical && d->categorical[j] ? !(v >= 0 && v < 8 && v == floorf(v))
                                                    : !isfinite(v))
                abort();
        }
    for (size_t i = 0; i < d->n; i++)
        if (d->y[i] < 0 || d->y[i] >= d->shape.classes)
            abort();
    fed_data_free(d);
    return 0;
}
