/* fedsim.c - main() of the simulator: a scenario from flags or an INI file
 * (--config, the same names), the data loaded once, the run in virtual time
 * (sim/run.h), one line per round on stdout; with --csv the same rows in a
 * file, with --svg the charts of this run beside the --compare CSVs of
 * earlier ones. Owns the command line and the output; decides nothing about
 * a node's behaviour. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/opt.h"
#include "core/pool.h"
#include "model/data.h"
#include "app/cli.h"
#include "app/chart.h"
#include "mpi/coll.h"
#include "mpi/simcomm.h"
#include "node/settings.h"
#include "sim/run.h"
#include "storage/store.h"

typedef struct out_ctx {
    FILE *csv;
    fed_store *db;      /* --db: the rows as a node database's rounds */
    char label[32];     /* its strategy column */
    int bar;            /* a progress bar on stderr (a terminal) */
    int rounds;
    int quiet;
    int regression;     /* --task regression: rows show the mse, not an accuracy */
    double t0, t_first, t_last; /* wall seconds at the start, the first row, the last */
    fed_sim_row *rows; /* (nrows) for the chart */
    size_t nrows, cap;
} out_ctx;

static void keep(out_ctx *o, const fed_sim_row *row)
{
    if (o->nrows == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        fed_sim_row *r = fed_realloc(o->rows, cap * sizeof *r);

        if (!r)
            return; /* the chart lacks a row; the run goes on */
        o->rows = r;
        o->cap = cap;
    }
    o->rows[o->nrows++] = *row;
}

static double wall_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_row(void *ctx, const fed_sim_row *row)
{
    out_ctx *o = ctx;
    double now = wall_s();

    char eps[32] = "";

    keep(o, row);
    if (!o->t_first)
        o->t_first = now;
    o->t_last = now;
    if (row->epsilon > 0)
        snprintf(eps, sizeof eps, "  epsilon %.4f", row->epsilon);
    if (!o->quiet)
        printf("round %4llu  t %9.2f s  %s %.4f  spread %.4f  bytes %12llu  merged %u"
               "  lr %.4g%s  (wall %.2f s)\n",
               (unsigned long long)row->round, row->t_s, o->regression ? "mse" : "accuracy",
               o->regression ? row->loss : row->accuracy, row->spread,
               (unsigned long long)row->bytes, row->merged, (double)row->lr, eps, now - o->t0);
    if (o->csv)
        fprintf(o->csv, "%llu,%.3f,%.6f,%.6f,%llu,%u,%.6g,%.6g\n", (unsigned long long)row->round,
                row->t_s, o->regression ? row->loss : row->accuracy, row->spread, (unsigned long long)row->bytes, row->merged,
                (double)row->lr, row->epsilon);
    if (o->db) {
        fed_store_round sr;
        fed_err e;

        memset(&sr, 0, sizeof sr);
        sr.round = row->round;
        sr.start_ms = sr.end_ms = (uint64_t)(row->t_s * 1000); /* virtual */
        sr.loss = row->loss;
        sr.accuracy = o->regression ? NAN : row->accuracy;
        sr.bytes_out = row->bytes;
        sr.peers = row->merged;
        sr.lr = row->lr;
        sr.epsilon = row->epsilon;
        snprintf(sr.strategy, sizeof sr.strategy, "%s", o->label);
        if ((e = fed_store_put_round(o->db, &sr)) != FED_OK)
            fed_log(FED_LOG_WARN, "--db: round %llu: %s", (unsigned long long)row->round,
                    fed_strerror(e));
    }
    if (o->bar) {
        int w = 40, done = o->rounds ? (int)(row->round * (uint64_t)w / (uint64_t)o->rounds) : w;

        fprintf(stderr, "\r[%.*s%*s] round %llu/%d", done,
                "########################################", w - done, "",
                (unsigned long long)row->round, o->rounds);
        if (row->round >= (uint64_t)o->rounds)
            fputc('\n', stderr);
    }
    fflush(stdout);
}

/* The output options: flags only (not the scenario's, not INI keys), taken
 * out of argv before the scenario's table reads the rest. This table is
 * their --help and man page; take_option finds them by its names. */
typedef struct out_opts {
    char csv[1], svg[1], name[1], compare[1], db[1], svg_x[1]; /* never filled: names and help */
} out_opts;
enum { OUT_CSV, OUT_SVG, OUT_NAME, OUT_COMPARE, OUT_DB, OUT_SVG_X, NOUT };
#define O(field, name, help) FED_OPT_DEF(out_opts, field, name, FED_OPT_STR, "", 0, 0, help)
static const fed_opt fedsim_out_opts[NOUT] = {
    [OUT_CSV] = O(csv, "csv", "write each round's row (round, t_s, accuracy, spread, bytes, "
                              "merged, lr, epsilon) to this CSV file"),
    [OUT_SVG] = O(svg, "svg", "draw accuracy against round and against bytes (or --svg-x) in "
                              "this SVG file"),
    [OUT_NAME] = O(name, "name", "this run's name in --svg's legend (default: its role and "
                                 "strategy or topology)"),
    [OUT_COMPARE] = O(compare, "compare", "earlier runs' CSV files to draw beside it in --svg, "
                                          "comma-separated, each NAME=PATH or PATH"),
    [OUT_DB] = O(db, "db", "keep the rounds as a node database that fednode status reads"),
    [OUT_SVG_X] = O(svg_x, "svg-x", "--svg's second panel: bytes (default) or epsilon (accuracy "
                                    "against DP-FedAvg's epsilon; a run without DP is a dashed "
                                    "line at its final accuracy)"),
};
#undef O
#define OUT_TITLE "output options (flags only, not INI keys)"

/* argv's "--NAME VALUE" (an output option, not the scenario's), taken out
 * into *out (NULL: not given). 0, or 2 when it is given twice (printed:
 * the second one would be lost). */
static int take_option(int *argc, char **argv, const char *opt, const char **out)
{
    char name[64];

    *out = NULL;
    snprintf(name, sizeof name, "--%s", opt);
    for (int i = 1; i + 1 < *argc; i++)
        if (!strcmp(argv[i], name)) {
            const char *v = argv[i + 1];

            if (*out) {
                fed_cli_error("option '%s' given twice ('%s' and '%s'): give it once", name,
                              *out, v);
                return 2;
            }
            *out = v;
            memmove(&argv[i], &argv[i + 2], (size_t)(*argc - i - 1) * sizeof *argv);
            *argc -= 2;
            i--;
        }
    return 0;
}

/* --svg: this run (named --name, else by its mode) and the --compare CSVs
 * (comma-separated, each NAME=PATH or PATH, named by its file then). */
static int write_chart(const char *svg, fed_chart_x x, const char *compare,
                       const char *this_name, const fed_sim_scenario *sc, const out_ctx *o)
{
    fed_chart_series s[FED_CHART_MAX_SERIES];
    char list[1024], *save = NULL;
    size_t n = 0;
    fed_err e = FED_OK;
    int rc = 0;

    memset(s, 0, sizeof s);
    snprintf(list, sizeof list, "%s", compare ? compare : "");
    for (char *p = strtok_r(list, ",", &save); p && e == FED_OK; p = strtok_r(NULL, ",", &save)) {
        const char *base = strrchr(p, '/') ? strrchr(p, '/') + 1 : p, *eq = strchr(p, '=');
        char name[64];

        if (n == FED_CHART_MAX_SERIES - 1) {
            fed_cli_error("at most %d runs to --compare", FED_CHART_MAX_SERIES - 1);
            rc = 2;
            goto out;
        }
        if (eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - p), p);
            p = (char *)eq + 1;
        } else {
            snprintf(name, sizeof name, "%.*s", (int)strcspn(base, "."), base);
        }
        if ((e = fed_chart_series_load_csv(p, name, &s[n])) != FED_OK) {
            fed_cli_error("--compare %s: %s", p, fed_strerror(e));
            rc = 1;
            goto out;
        }
        n++;
    }
    if (this_name)
        snprintf(s[n].name, sizeof s[n].name, "%s", this_name);
    else
        snprintf(s[n].name, sizeof s[n].name, "%.15s %.40s", sc->role,
                 strcmp(sc->role, "peer") ? sc->s.strategy : sc->s.topology);
    s[n].round = fed_malloc((o->nrows + 1) * sizeof(double));
    s[n].accuracy = fed_malloc((o->nrows + 1) * sizeof(double));
    s[n].bytes = fed_malloc((o->nrows + 1) * sizeof(double));
    s[n].epsilon = fed_malloc((o->nrows + 1) * sizeof(double));
    if (!s[n].round || !s[n].accuracy || !s[n].bytes || !s[n].epsilon) {
        n++;
        rc = 1;
        goto out;
    }
    for (size_t i = 0; i < o->nrows; i++) {
        s[n].round[i] = (double)o->rows[i].round;
        s[n].accuracy[i] = o->rows[i].accuracy;
        s[n].bytes[i] = (double)o->rows[i].bytes;
        s[n].epsilon[i] = o->rows[i].epsilon;
    }
    s[n].n = o->nrows;
    n++;
    if ((e = fed_chart_svg_x(svg, "fedsim: test accuracy", x, s, n)) != FED_OK) {
        fed_cli_error("cannot write %s: %s", svg, fed_strerror(e));
        rc = 1;
    } else {
        printf("wrote %s (%zu runs)\n", svg, n);
    }
out:
    for (size_t k = 0; k < FED_CHART_MAX_SERIES; k++)
        fed_chart_series_fini(&s[k]);
    return rc;
}

/* Under mpirun: MPI and the comm the ranks simulate through; the pool's
 * threads shared by the ranks on this host. 0, or 1 after an error. */
static int open_ranks(int *argc, char ***argv, fed_coll **coll, fed_comm **comm, int *threads)
{
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    fed_err e;

    if ((e = fed_coll_mpi_open(argc, argv, coll)) != FED_OK) {
        fed_cli_error("started by mpirun, but %s", e == FED_ERR_UNSUPPORTED
                      ? "this fedsim was built without MPI (make deps installs Open MPI)"
                      : "MPI would not start");
        return 1;
    }
    if ((e = fed_mpi_sim_comm_new(comm)) != FED_OK) {
        fed_cli_error("MPI: %s", fed_strerror(e));
        return 1;
    }
    if (local && atoi(local) > 1)
        *threads = *threads / atoi(local) > 1 ? *threads / atoi(local) : 1;
    return 0;
}

/* The closing lines: wall time to the first row, a row's, what came after
 * the last (peers: their final mixing rounds, which have no row), the peak
 * RSS; for peers, what one holds at most against its model state. */
static void print_summary(const out_ctx *o, const fed_sim_scenario *sc, const fed_sim_counters *c,
                          double end, double rss_mib)
{
    int peers = !strcmp(sc->role, "peer");

    if (!o->nrows) { /* --local-only: no round ran */
        printf("wall %.2f s, no round; peak RSS %.0f MiB\n", end - o->t0, rss_mib);
        return;
    }
    printf("wall %.2f s: %.2f s to the first round, then %.3f s a round", end - o->t0,
           o->t_first - o->t0,
           o->nrows > 1 ? (o->t_last - o->t_first) / (double)(o->nrows - 1) : 0.0);
    if (peers && sc->s.final_mix > 0)
        printf(", then %.2f s for the %d final mixing rounds (no rows)", end - o->t_last,
               sc->s.final_mix);
    else
        printf(", then %.2f s to the end", end - o->t_last);
    printf("; peak RSS %.0f MiB\n", rss_mib);
    if (peers && c->peers_counted)
        printf("a peer holds at most %.2f MB, its model state %.2f MB (parameters, push-sum "
               "totals, optimizer), on average over %llu peers\n",
               (double)c->peer_bytes / (double)c->peers_counted / 1e6,
               (double)c->peer_state_bytes / (double)c->peers_counted / 1e6,
               (unsigned long long)c->peers_counted);
}

/* Each rank's peak RSS, printed by rank 0 (every rank calls it). */
static void print_rss(const fed_comm *comm)
{
    struct rusage ru;
    uint8_t mine[8], *all = NULL;
    size_t len = 0;

    getrusage(RUSAGE_SELF, &ru);
    fed_put_u64le(mine, (uint64_t)ru.ru_maxrss);
    if (fed_comm_allgather(comm, mine, sizeof mine, &all, &len) != FED_OK)
        return;
    for (size_t k = 0; fed_comm_rank(comm) == 0 && k + 8 <= len; k += 8)
        printf("rank %zu of %d: peak RSS %.1f MiB\n", k / 8, fed_comm_size(comm),
               (double)fed_get_u64le(all + k) / 1024.0);
    fed_free(all);
}

/* --personal-eval's figures: each client's own model on its local test
 * split, then the mean and the worst. */
static void print_personal(const fed_sim_scenario *sc, const fed_sim_counters *c)
{
    double sum = 0, worst = 1;
    char arm[384] = "", layers[sizeof sc->s.local_layers + 16];
    const char *part[3];
    int np = 0;

    if (sc->s.local_layers[0]) {
        snprintf(layers, sizeof layers, "--local-layers %s", sc->s.local_layers);
        part[np++] = layers;
    }
    if (sc->s.local_bn)
        part[np++] = "--local-bn";
    if (sc->s.ditto_lambda > 0)
        part[np++] = "Ditto's personal models";
    else if (sc->local_only)
        part[np++] = "purely local training, no round";
    if (!np)
        part[np++] = "the global model";
    for (int i = 0; i < np; i++)
        snprintf(arm + strlen(arm), sizeof arm - strlen(arm), "%s%s", i ? " " : "", part[i]);
    printf("personalized accuracy (%s, each client on its local test split%s):\n", arm,
           sc->finetune_epochs ? ", after fine-tuning" : "");
    for (uint64_t i = 0; i < c->personal_n; i++) {
        double a = (double)c->personal_ppm[i] / 1e6;

        printf("  client %2llu  %.4f\n", (unsigned long long)i, a);
        sum += a;
        worst = a < worst ? a : worst;
    }
    if (c->personal_n)
        printf("personalized mean %.4f worst %.4f over %llu clients\n", sum / (double)c->personal_n,
               worst, (unsigned long long)c->personal_n);
}

int main(int argc, char **argv)
{
    fed_sim_scenario sc;
    fed_coll *coll = NULL;
    fed_comm *comm = NULL;
    int rank = 0;
    fed_dataset *train = NULL, *test = NULL;
    fed_data_opts dopts;
    fed_pool *pool = NULL;
    out_ctx o = {0};
    const char *csv, *svg, *compare, *name, *dbpath, *svg_x;
    fed_chart_x chart_x = FED_CHART_X_BYTES;
    uint8_t hash[32];
    fed_sim_counters cnt;
    char hex[65], why[256];
    unsigned char *given = NULL; /* (scenario options) set by the file or a flag */
    char *graph = NULL;          /* --model FILE of a graph longer than its id: the whole */
    int rc, threads = fed_cli_online_cores();
    fed_err e;

    fed_cli_log_init();
    if (!getenv("FEDNODE_LOG")) /* a thousand nodes' info lines would drown the rows */
        fed_log_set_level(FED_LOG_WARN);
    fed_cli_maybe_reexec_main(argv);
    if (take_option(&argc, argv, fedsim_out_opts[OUT_CSV].name, &csv) ||
        take_option(&argc, argv, fedsim_out_opts[OUT_SVG].name, &svg) ||
        take_option(&argc, argv, fedsim_out_opts[OUT_COMPARE].name, &compare) ||
        take_option(&argc, argv, fedsim_out_opts[OUT_NAME].name, &name) ||
        take_option(&argc, argv, fedsim_out_opts[OUT_DB].name, &dbpath) ||
        take_option(&argc, argv, fedsim_out_opts[OUT_SVG_X].name, &svg_x))
        return 2;
    if (svg_x && !strcmp(svg_x, "epsilon")) {
        chart_x = FED_CHART_X_EPSILON;
    } else if (svg_x && strcmp(svg_x, "bytes") != 0) {
        fed_cli_error("--svg-x '%s': bytes or epsilon", svg_x);
        return 2;
    }
    given = fed_calloc(fed_sim_scenario_nopts, 1);
    if (!given) {
        fed_cli_error("out of memory");
        return 1;
    }
    rc = fed_cli_load_options_given("fedsim",
                              "[--config FILE] [--OPTION VALUE ...] [--csv FILE] [--svg FILE "
                              "[--name NAME] [--compare [NAME=]A.csv,...] [--svg-x bytes|epsilon]] [--db FILE]",
                              fed_sim_scenario_opts, fed_sim_scenario_nopts, &sc, argc - 1,
                              argv + 1, given);
    if (rc == 0) { /* --help (or --help-man): the output options after the scenario's */
        int man = 0;

        for (int i = 1; i < argc; i++)
            man |= !strcmp(argv[i], "--help-man");
        if (man) {
            printf(".PP\n");
            fed_opt_man_text(stdout, OUT_TITLE);
            printf(":\n");
            fed_opt_print_man(fedsim_out_opts, NOUT, stdout);
        } else {
            printf("\n%s:\n", OUT_TITLE);
            fed_opt_print_help(fedsim_out_opts, NOUT, stdout);
        }
    }
    sc.graph = NULL;
    if (rc < 0 && (rc = fed_cli_model_file("fedsim", sc.s.model, sizeof sc.s.model, &graph, NULL, NULL)) < 0)
        sc.graph = graph;
    if (rc >= 0)
        goto out;
    /* the old --mode aggregator|peer; --secagg* on peers */
    if (fed_sim_scenario_settle(&sc, given[fed_opt_find(fed_sim_scenario_opts,
                                                        fed_sim_scenario_nopts, "role") -
                                           fed_sim_scenario_opts]) != FED_OK) {
        rc = 2;
        goto out;
    }
    if (fed_node_settings_secagg_misuse(fed_sim_scenario_opts, fed_sim_scenario_nopts, given,
                                        strcmp(sc.role, "peer") ? FED_NODE_AGGREGATOR
                                                                : FED_NODE_PEER,
                                        why, sizeof why)) {
        fed_cli_error("%s", why);
        rc = 2;
        goto out;
    }
    if (sodium_init() < 0) {
        fed_cli_error("libsodium failed to start");
        rc = 1;
        goto out;
    }
    if (fed_coll_mpi_launched() && open_ranks(&argc, &argv, &coll, &comm, &threads) != 0) {
        rc = 1;
        goto out;
    }
    rank = fed_comm_rank(comm);
    if (rank != 0) /* rank 0 writes the rows, the files and the chart */
        csv = svg = dbpath = NULL, o.quiet = 1;
    o.regression = !strcmp(sc.s.dflags.task, "regression");
    if (o.regression && svg) {
        fed_cli_error("--svg charts accuracy: a regression (--task regression) has none; its "
                      "mse is in the rows and in --csv");
        rc = 2;
        goto out;
    }
    if (csv && !(o.csv = fopen(csv, "w"))) {
        fed_cli_error("cannot write %s", csv);
        rc = 1;
        goto out;
    }
    if (o.csv)
        fprintf(o.csv, "round,t_s,%s,spread,bytes,merged,lr,epsilon\n",
                o.regression ? "mse" : "accuracy");
    if (dbpath && (e = fed_store_open(dbpath, NULL, &o.db)) != FED_OK) {
        fed_cli_error("--db %s: %s", dbpath, fed_strerror(e));
        rc = 1;
        goto out;
    }
    snprintf(o.label, sizeof o.label, "fedsim %.24s", strcmp(sc.role, "peer") ? sc.s.strategy : sc.s.topology);
    o.rounds = sc.s.rounds;
    o.bar = rank == 0 && isatty(fileno(stderr)) && !isatty(fileno(stdout)); /* rows go to a file: show progress */
    if ((rc = fed_cli_data_opts("fedsim", &sc.s.dflags, &dopts)) >= 0)
        goto out;
    rc = 1;
    if ((e = fed_data_open_opts(sc.s.data, 1, &dopts, &train)) != FED_OK ||
        (e = fed_data_augment_check(sc.s.augment, train)) != FED_OK ||
        (fed_sim_rank_needs_test(&sc, rank, fed_comm_size(comm)) &&
         (e = fed_data_open_opts(sc.s.data, 0, &dopts, &test)) != FED_OK)) {
        fed_cli_error("data %s: %s", sc.s.data, fed_strerror(e));
        rc = 1;
        goto out;
    }
    if (fed_pool_new(threads, &pool) != FED_OK) {
        fed_cli_error("out of memory");
        rc = 1;
        goto out;
    }
    if (rank == 0)
        printf("fedsim: %d %s, %s, %s, %d rounds, seed %llu%s\n", sc.nodes,
               strcmp(sc.role, "peer") ? "clients" : "peers", sc.s.model, sc.s.partition,
               sc.s.rounds, (unsigned long long)sc.s.seed, comm ? ", across ranks" : "");
    if (rank == 0 && sc.local_only)
        printf("fedsim: --local-only: no round runs; each client trains %d x %d epochs on its "
               "shard alone\n", sc.s.rounds, sc.s.local_epochs);
    if (comm && rank == 0)
        printf("fedsim: %d ranks (node i on rank i %% %d), %d pool threads each\n", comm->size,
               comm->size, threads);
    o.t0 = wall_s();
    if (comm)
        e = fed_sim_run_ranks(&sc, &train, test, pool, comm, 1e7, on_row, &o, hash, &cnt);
    else
        e = fed_sim_run(&sc, train, test, pool, 1e7, on_row, &o, hash, &cnt);
    if (e != FED_OK) {
        /* the scenario's refusal (FED_ERR_SPEC) names its option above, a
           run that cannot finish (FED_ERR_TIMEOUT) its likely cause */
        fed_cli_error("%s%s", e == FED_ERR_SPEC      ? "the scenario is refused (why is said above)"
                              : e == FED_ERR_TIMEOUT ? "the run stopped before its last round "
                                                       "(why is said above)"
                                                     : fed_strerror(e),
                      comm ? " (ending every rank)" : "");
        rc = 1;
        goto out;
    }
    sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
    if (rank == 0 && !sc.local_only) /* no model was federated */
        printf("final model sha256 %s\n", hex);
    if (rank == 0 && sc.personal_eval)
        print_personal(&sc, &cnt);
    {
        struct rusage ru;
        double end = wall_s();

        getrusage(RUSAGE_SELF, &ru);
        if (rank == 0)
            print_summary(&o, &sc, &cnt, end, (double)ru.ru_maxrss / 1024.0);
        if (comm)
            print_rss(comm);
    }
    rc = svg ? write_chart(svg, chart_x, compare, name, &sc, &o) : 0;
out:
    if (o.csv && fclose(o.csv) != 0 && rc == 0) {
        fed_cli_error("writing %s failed", csv);
        rc = 1;
    }
    fed_free(o.rows);
    fed_store_close(o.db);
    fed_pool_free(pool);
    fed_data_free(train);
    fed_data_free(test);
    if (coll && rc != 0)
        fed_coll_abort(coll, rc); /* the other ranks wait in a collective */
    fed_mpi_sim_comm_free(comm);
    fed_coll_free(coll);
    fed_free(given);
    fed_free(graph);
    return rc;
}
