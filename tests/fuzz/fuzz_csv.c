/* fuzz_csv.c - libFuzzer target for the CSV reader: the whole input is
 * one CSV buffer (label column "label"). A dataset that parses must have
 * finite standardized features and labels below its class count. */
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
    fed_csv_opts opts = { .label_column = "label" };
    fed_dataset *d = NULL;

    fed_log_set_sink(quiet, NULL);
    if (fed_data_parse_csv((const char *)data, size, &opts, &d) != FED_OK) {
        if (d)
            abort();
        return 0;
    }
    if (d->n == 0 || d->features == 0 || !d->x_f32 || d->shape.w != (int)d->features ||
        d->shape.classes < 1 || d->shape.classes > 256)
        abort();
    for (size_t i = 0; i < d->n * d->features; i++)
        if (!isfinite(d->x_f32[i]))
            abort();
    for (size_t i = 0; i < d->n; i++)
        if (d->y[i] < 0 || d->y[i] >= d->shape.classes)
            abort();
    fed_data_free(d);
    return 0;
}
