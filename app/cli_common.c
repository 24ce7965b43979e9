/* cli_common.c - what every fednode subcommand shares: error printing and
 * the stderr log sink. The CLI is the one layer that may print. */
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/opt.h"
#include "onnx/onnx.h"
#include <sodium.h>

#include "crypto/identity.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/model_cfg.h"
#include "app/cli.h"

/* "PROGRAM: message" on stderr. fedsim's command is the program itself, so a
 * message that starts with the program's name is not prefixed twice. */
void fed_cli_error(const char *fmt, ...)
{
    const char *prog = program_invocation_short_name; /* fednode or fedsim */
    size_t plen = strlen(prog);
    char msg[4096];
    const char *m = msg;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!strncmp(msg, prog, plen) && msg[plen] == ':' && msg[plen + 1] == ' ')
        m += plen + 2;
    fprintf(stderr, "%s: %s\n", prog, m);
}

void fed_cli_log_init(void)
{
    const char *lvl = getenv("FEDNODE_LOG");
    fed_log_level level;

    fed_log_use_stream(2, FED_LOG_TEXT, program_invocation_short_name);
    if (lvl && fed_log_level_parse(lvl, &level) == 0)
        fed_log_set_level(level);
}

int fed_cli_log_apply(const char *cmd, const fed_cli_log_opts *o)
{
    fed_log_format format;
    fed_log_level level;

    if (fed_log_format_parse(o->format, &format) != 0) {
        fed_cli_error("%s: --log-format '%s': text or json", cmd, o->format);
        return 2;
    }
    if (o->level[0] && fed_log_level_parse(o->level, &level) != 0) {
        fed_cli_error("%s: --log-level '%s': debug, info, warn or error", cmd, o->level);
        return 2;
    }
    fed_log_use_stream(2, format, program_invocation_short_name);
    if (o->level[0])
        fed_log_set_level(level);
    return -1;
}

int fed_cli_help(const char *cmd, const char *synopsis, const char *title, const fed_opt *t,
                 size_t n, int argc, char **argv)
{
    const char *prog = program_invocation_short_name; /* fednode or fedsim */
    int sub = strcmp(cmd, prog) != 0;                  /* fednode CMD */

    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help-man")) {
            printf(".PP\n.B \"%s%s%s\"\n", prog, sub ? " " : "", sub ? cmd : "");
            fed_opt_man_text(stdout, synopsis);
            printf("\n");
            if (n) {
                printf(".PP\n");
                fed_opt_man_text(stdout, title);
                printf(":\n");
                fed_opt_print_man(t, n, stdout);
            }
            return 1;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s%s%s %s\n", prog, sub ? " " : "", sub ? cmd : "", synopsis);
            if (n) {
                printf("\n%s:\n", title);
                fed_opt_print_help(t, n, stdout);
            }
            return 1;
        }
    }
    return 0;
}

int fed_cli_load_options(const char *cmd, const char *synopsis, const fed_opt *t, size_t n,
                         void *cfg, int argc, char **argv)
{
    return fed_cli_load_options_given(cmd, synopsis, t, n, cfg, argc, argv, NULL);
}

int fed_cli_load_options_given(const char *cmd, const char *synopsis, const fed_opt *t,
                               size_t n, void *cfg, int argc, char **argv, unsigned char *given)
{
    fed_opt_error e = {{0}};
    char **pos;
    int npos = 0, rc = -1;
    fed_err err;

    if (fed_cli_help(cmd, synopsis, "options (also as KEY = VALUE in --config FILE)", t, n,
                     argc, argv))
        return 0;
    pos = fed_calloc((size_t)argc + 1, sizeof *pos);
    if (!pos) {
        fed_cli_error("%s: out of memory", cmd);
        return 1;
    }
    err = fed_opt_load_given(t, n, cfg, argc, argv, pos, &npos, given, &e);
    if (err != FED_OK) {
        fed_cli_error("%s: %s", cmd, e.msg[0] ? e.msg : fed_strerror(err));
        rc = 2;
    } else if (npos > 0) {
        fed_cli_error("%s: unexpected argument '%s' (see fednode %s --help)", cmd, pos[0], cmd);
        rc = 2;
    }
    fed_free(pos);
    return rc;
}

/* Whether the environment gives OpenBLAS its thread count (it reads these
 * when the process loads it, in this order). */
static int blas_threads_given(void)
{
    static const char *const vars[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                       "OMP_NUM_THREADS"};

    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]) && *getenv(vars[i]))
            return 1;
    return 0;
}

/* OpenBLAS chooses its kernels when the process loads it: if it fell back
 * to generic ones on this CPU, run this command again with the right
 * OPENBLAS_CORETYPE (set in the environment, so this happens once). It also
 * starts its worker threads then, one less than the cores, before main, and
 * each spins on sched_yield for about 0.1 s before it sleeps: 20-80 ms of
 * CPU in every start on a 2-core host, a third to five sixths of a client's
 * CPU before it is connected. Every backend runs OpenBLAS on one thread
 * (the pool splits the batches), so those workers never work: the command
 * runs again with OPENBLAS_NUM_THREADS=1 too, unless the environment gives
 * a count. The second load costs about 2 ms of CPU. */
void fed_cli_maybe_reexec_main(char **argv)
{
    const char *core = fed_backend_cpu_suggest_coretype();
    int threads = !blas_threads_given();

    if ((!core && !threads) || getenv("FEDNODE_NO_REEXEC"))
        return;
    if (core)
        fed_log(FED_LOG_INFO, "OpenBLAS picked generic kernels on this CPU; restarting with "
                              "OPENBLAS_CORETYPE=%s", core);
    if ((!core || setenv("OPENBLAS_CORETYPE", core, 1) == 0) &&
        (!threads || setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0))
        execv("/proc/self/exe", argv);
    if (core)
        fed_log(FED_LOG_WARN, "could not restart with OPENBLAS_CORETYPE=%s; going on", core);
    else
        fed_log(FED_LOG_DEBUG, "could not restart with one OpenBLAS thread; going on");
    if (core)
        unsetenv("OPENBLAS_CORETYPE");
    if (threads)
        unsetenv("OPENBLAS_NUM_THREADS");
}

void fed_cli_maybe_reexec(const char *cmd, int argc, char **argv)
{
    char **args = fed_calloc((size_t)argc + 3, sizeof *args);

    if (!args)
        return;
    args[0] = "fednode";
    args[1] = (char *)cmd;
    for (int i = 0; i < argc; i++)
        args[i + 2] = argv[i];
    fed_cli_maybe_reexec_main(args);
    fed_free(args);
}

int fed_cli_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    return n < 1 ? 1 : n > FED_CLI_MAX_THREADS ? FED_CLI_MAX_THREADS : (int)n;
}

int fed_cli_is_onnx(const char *path)
{
    size_t n = strlen(path);

    return n > 5 && !strcasecmp(path + n - 5, ".onnx");
}

int fed_cli_refuse_onnx(const char *cmd, const char *flag, const char *path, const char *takes)
{
    if (!fed_cli_is_onnx(path))
        return -1;
    fed_cli_error("%s: %s %s: an ONNX file; %s takes %s (an ONNX model goes in as --model "
                  "FILE.onnx of train, run, aggregate and fedsim)", cmd, flag, path, cmd, takes);
    return 2;
}

/* An .onnx file's graph as a spec; its weights kept in *onnx (NULL: the
 * command takes none, said at warning level). */
static fed_err onnx_spec(const char *cmd, const char *path, char *spec, fed_onnx **onnx,
                         fed_model_shape *declared, char *why, size_t cap)
{
    fed_onnx *o = NULL;
    const fed_model_node *nodes;
    int count;
    fed_err err;

    if ((err = fed_onnx_load(path, &o, why, cap)) != FED_OK)
        return err;
    nodes = fed_onnx_nodes(o, &count);
    if ((err = fed_model_graph_explain(path, nodes, count, fed_onnx_input(o), NULL, why, cap)) ==
            FED_OK &&
        (err = fed_model_graph_spec(nodes, count, spec, FED_MODEL_GRAPH_MAX)) != FED_OK)
        fed_err_why(why, cap, err, "%s: its graph does not fit a spec: %s", path,
                    fed_strerror(err));
    if (err == FED_OK && declared)
        *declared = fed_onnx_input(o); /* its input, and its outputs as the classes */
    if (err == FED_OK && fed_onnx_has_weights(o) && !onnx)
        fed_log(FED_LOG_WARN, "%s: --model %s: the file's weights are not used here: the model "
                              "starts from --seed's initialization", cmd, path);
    if (err == FED_OK && onnx) {
        *onnx = o;
        return FED_OK;
    }
    fed_onnx_free(o);
    return err;
}

int fed_cli_model_file(const char *cmd, char *model, size_t cap, char **graph, fed_onnx **onnx,
                       fed_model_shape *declared)
{
    fed_model_cfg *c = NULL;
    char why[512], id[FED_MODEL_SPEC_MAX];
    char *spec = fed_malloc(FED_MODEL_GRAPH_MAX);
    struct stat st;
    fed_err err;

    if (graph)
        *graph = NULL;
    if (onnx)
        *onnx = NULL;
    if (declared)
        memset(declared, 0, sizeof *declared);
    if (!spec) {
        fed_cli_error("%s: out of memory", cmd);
        return 1;
    }

    if (!strcmp(model, "logreg") || !strcmp(model, "cnn") || !strncmp(model, "mlp:", 4) ||
        !strncmp(model, "g:", 2)) {
        fed_free(spec);
        return -1; /* a spec: its own check says what is wrong with it */
    }
    if (stat(model, &st) != 0 || !S_ISREG(st.st_mode)) {
        fed_cli_error("%s: --model '%s': %s, and not a preset (logreg, mlp:W1,W2,..., cnn)", cmd,
                      model, stat(model, &st) != 0 ? "no such file" : "not a regular file");
        fed_free(spec);
        return 2;
    }
    if (fed_cli_is_onnx(model))
        err = onnx_spec(cmd, model, spec, onnx, declared, why, sizeof why);
    /* the file on its own input first: a shape error names its line */
    else if ((err = fed_model_cfg_load(model, &c, why, sizeof why)) == FED_OK &&
        (err = fed_model_cfg_check(c, fed_model_cfg_own_input(c), NULL, why, sizeof why)) ==
            FED_OK)
        err = fed_model_cfg_spec(c, spec, FED_MODEL_GRAPH_MAX, why, sizeof why);
    if (err == FED_OK && declared && c) {
        *declared = fed_model_cfg_input(c);
        declared->classes = fed_model_cfg_classes(c);
    }
    fed_model_cfg_free(c);
    if (err != FED_OK) {
        fed_cli_error("%s: --model: %s", cmd, why);
        fed_free(spec);
        return 2;
    }
    fed_model_spec_id(spec, id);
    if (strcmp(id, spec) != 0 && !graph) {
        if (onnx) {
            fed_onnx_free(*onnx);
            *onnx = NULL;
        }
        fed_cli_error("%s: --model %s: its graph takes %zu bytes; %s takes graphs of at most %d "
                      "(run, aggregate and train take longer ones)", cmd, model, strlen(spec),
                      cmd, FED_MODEL_SPEC_MAX - 1);
        fed_free(spec);
        return 2;
    }
    fed_log(FED_LOG_INFO, "%s: --model %s is %s", cmd, model, id);
    snprintf(model, cap, "%s", id);
    if (strcmp(id, spec) != 0)
        *graph = spec;
    else
        fed_free(spec);
    return -1;
}

/* "I/K" with 0 <= I < K. */
int fed_cli_parse_shard(const char *s, int *shard, int *k)
{
    char *end = NULL;
    long i, n;

    if (*s < '0' || *s > '9')
        return 0;
    i = strtol(s, &end, 10);
    if (*end != '/' || end[1] < '0' || end[1] > '9')
        return 0;
    n = strtol(end + 1, &end, 10);
    if (*end || n < 1 || n > 1000000 || i < 0 || i >= n)
        return 0;
    *shard = (int)i;
    *k = (int)n;
    return 1;
}

int fed_cli_data_opts(const char *cmd, const fed_data_flags *f, fed_data_opts *out)
{
    char why[160];

    if (fed_data_flags_opts(f, out, why, sizeof why) == FED_OK)
        return -1;
    fed_cli_error("%s: %s", cmd, why);
    return 2;
}

/* The passphrase into guarded memory: from the file, else the environment. */
int fed_cli_passphrase(const char *cmd, const char *file, char **pass, size_t *len)
{
    const char *env = getenv("FEDNODE_PASSPHRASE");
    fed_err err;

    *pass = NULL;
    *len = 0;
    if (!file[0] && (!env || !env[0]))
        return -1;
    *pass = sodium_malloc(FED_CRYPTO_PASSPHRASE_MAX + 1);
    if (!*pass) {
        fed_cli_error("%s: out of memory", cmd);
        return 1;
    }
    if (file[0]) {
        err = fed_crypto_passphrase_read(file, *pass, FED_CRYPTO_PASSPHRASE_MAX + 1,
                                         len);
        if (err != FED_OK) {
            fed_cli_error("%s: passphrase file %s: %s", cmd, file,
                          err == FED_ERR_FORMAT ? "first line is empty" : fed_strerror(err));
            return 1;
        }
        return -1;
    }
    *len = strlen(env);
    if (*len > FED_CRYPTO_PASSPHRASE_MAX) {
        fed_cli_error("%s: FEDNODE_PASSPHRASE is longer than %d bytes", cmd,
                      FED_CRYPTO_PASSPHRASE_MAX);
        return 1;
    }
    memcpy(*pass, env, *len + 1);
    return -1;
}
