/* fuzz_simcsv.c - libFuzzer target for fedsim's CSV reader (the --compare
 * files): whatever the bytes, a parse either fails with a code or gives rows
 * whose count fits the input, and the series frees cleanly. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "app/chart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fed_chart_series s;

    if (fed_chart_series_parse_csv((const char *)data, size, "fuzz", &s) == FED_OK) {
        if (s.n > size)
            abort();
        fed_chart_series_fini(&s);
    }
    return 0;
}
