/* fedsim.c - main() of the simulator: a scenario from flags or an INI file
 * (--config, the same names), the data loaded once, the run in virtual time
 * (sim/run.h), one line per round on stdout and, with --csv, the same rows
 * in a file. Owns the command line and the output; decides nothing about a
 * node's behaviour. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/pool.h"
#include "model/data.h"
#include "node/cli.h"
#include "sim/run.h"

typedef struct out_ctx {
    FILE *csv;
    int quiet;
} out_ctx;

static void on_row(void *ctx, const fed_sim_row *row)
{
    out_ctx *o = ctx;

    if (!o->quiet)
        printf("round %4llu  t %9.2f s  accuracy %.4f  spread %.4f  bytes %12llu  merged %u\n",
               (unsigned long long)row->round, row->t_s, row->accuracy, row->spread,
               (unsigned long long)row->bytes, row->merged);
    if (o->csv)
        fprintf(o->csv, "%llu,%.3f,%.6f,%.6f,%llu,%u\n", (unsigned long long)row->round,
                row->t_s, row->accuracy, row->spread, (unsigned long long)row->bytes, row->merged);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    fed_sim_scenario sc;
    fed_dataset *train = NULL, *test = NULL;
    fed_pool *pool = NULL;
    out_ctx o = {0};
    const char *csv = NULL;
    uint8_t hash[32];
    char hex[65];
    int rc, threads = fed_cli_online_cores();
    fed_err e;

    fed_cli_log_init();
    if (!getenv("FEDNODE_LOG")) /* a thousand nodes' info lines would drown the rows */
        fed_log_set_level(FED_LOG_WARN);
    fed_cli_maybe_reexec_main(argv);
    for (int i = 1; i + 1 < argc; i++) /* output options, not the scenario's */
        if (!strcmp(argv[i], "--csv")) {
            csv = argv[i + 1];
            memmove(&argv[i], &argv[i + 2], (size_t)(argc - i - 1) * sizeof *argv);
            argc -= 2;
            i--;
        }
    rc = fed_cli_load_options("fedsim", "[--config FILE] [--OPTION VALUE ...] [--csv FILE]",
                              fed_sim_scenario_opts, fed_sim_scenario_nopts, &sc, argc - 1,
                              argv + 1);
    if (rc >= 0)
        return rc;
    if (sodium_init() < 0) {
        fed_cli_error("fedsim: libsodium failed to start");
        return 1;
    }
    if (csv && !(o.csv = fopen(csv, "w"))) {
        fed_cli_error("fedsim: cannot write %s", csv);
        return 1;
    }
    if (o.csv)
        fprintf(o.csv, "round,t_s,accuracy,spread,bytes,merged\n");
    if ((e = fed_data_open(sc.data, 1, &train)) != FED_OK ||
        (e = fed_data_open(sc.data, 0, &test)) != FED_OK) {
        fed_cli_error("fedsim: data %s: %s", sc.data, fed_strerror(e));
        rc = 1;
        goto out;
    }
    if (fed_pool_new(threads, &pool) != FED_OK) {
        fed_cli_error("fedsim: out of memory");
        rc = 1;
        goto out;
    }
    printf("fedsim: %d %s, %s, %s, %d rounds, seed %llu\n", sc.nodes,
           strcmp(sc.mode, "peer") ? "clients" : "peers", sc.model, sc.partition, sc.rounds,
           (unsigned long long)sc.seed);
    e = fed_sim_run(&sc, train, test, pool, 1e7, on_row, &o, hash, NULL);
    if (e != FED_OK) {
        fed_cli_error("fedsim: %s", fed_strerror(e));
        rc = 1;
        goto out;
    }
    sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
    printf("final model sha256 %s\n", hex);
    rc = 0;
out:
    if (o.csv && fclose(o.csv) != 0 && rc == 0) {
        fed_cli_error("fedsim: writing %s failed", csv);
        rc = 1;
    }
    fed_pool_free(pool);
    fed_data_free(train);
    fed_data_free(test);
    return rc;
}
