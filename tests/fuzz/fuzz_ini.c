/* fuzz_ini.c - libFuzzer target for the INI reader of the options table:
 * the input is one config buffer parsed against a small table of every
 * option type. Every error must come with a message; values that parse
 * must respect the declared ranges and sizes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/opt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fuzz_cfg {
    int flag;
    int count;
    uint64_t seed;
    double rate;
    char name[12];
} fuzz_cfg;

static const fed_opt table[] = {
    FED_OPT_DEF(fuzz_cfg, flag, "flag", FED_OPT_BOOL, "0", 0, 0, "a boolean"),
    FED_OPT_DEF(fuzz_cfg, count, "count", FED_OPT_INT, "3", -5, 100, "an int"),
    FED_OPT_DEF(fuzz_cfg, seed, "seed", FED_OPT_U64, "1", 0, 0, "a u64"),
    FED_OPT_DEF(fuzz_cfg, rate, "rate", FED_OPT_DOUBLE, "0.5", 0, 1, "a double"),
    FED_OPT_DEF(fuzz_cfg, name, "name", FED_OPT_STR, "x", 0, 0, "a string"),
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_cfg c;
    fed_opt_error e;
    fed_err err;

    memset(&e, 0, sizeof e);
    if (fed_opt_defaults(table, sizeof table / sizeof *table, &c, &e) != FED_OK)
        abort();
    err = fed_opt_parse_ini_buf(table, sizeof table / sizeof *table, &c, (const char *)data, size,
                                "fuzz.ini", &e);
    if (err != FED_OK && (e.msg[0] == 0 || !memchr(e.msg, 0, sizeof e.msg)))
        abort();
    if (c.flag != 0 && c.flag != 1)
        abort();
    if (c.count < -5 || c.count > 100 || !(c.rate >= 0 && c.rate <= 1))
        abort();
    if (!memchr(c.name, 0, sizeof c.name))
        abort();
    return 0;
}
