/* cli.h - the fednode subcommands. Each lives in its own app/cli_*.c and is
 * listed once in app/fednode.c's table. A subcommand gets argv after its
 * name and returns the process exit status (0 ok, 1 failure, 2 usage). */
#ifndef FED_APP_CLI_H
#define FED_APP_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "core/err.h"

struct fed_opt;

typedef int (*fed_cli_fn)(int argc, char **argv);

typedef struct fed_cli_cmd {
    const char *name;
    fed_cli_fn fn;
    const char *summary;
} fed_cli_cmd;

/* Prints "fednode: " + message to stderr: the CLI layer may print. */
void fed_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Installs the stderr log sink (text) at the level FEDNODE_LOG names
 * (default info). */
void fed_cli_log_init(void);
/* --log-format and --log-level in a command's option table (the daemon's):
 * FED_CLI_LOG_OPTS(cfgtype, member) beside its own options, then
 * fed_cli_log_apply once they are loaded. */
typedef struct fed_cli_log_opts {
    char format[8];
    char level[8];
} fed_cli_log_opts;
#define FED_CLI_LOG_OPTS(T, m)                                                                   \
    FED_OPT_DEF(T, m.format, "log-format", FED_OPT_STR, "text", 0, 0,                            \
                "text (PROGRAM: LEVEL: MESSAGE) or json (one object a line: time, level, node, " \
                "component, round, message)"),                                                   \
    FED_OPT_DEF(T, m.level, "log-level", FED_OPT_STR, "", 0, 0,                                  \
                "debug, info, warn or error (default: $FEDNODE_LOG, else info)")
/* Applies them to the stderr sink; -1 to go on, 2 on a bad value (printed,
 * naming cmd). */
int fed_cli_log_apply(const char *cmd, const fed_cli_log_opts *o);
/* --help (or -h) in argv: prints "usage: PROGRAM [CMD] synopsis" and, when
 * n > 0, title and the table's lines; --help-man: the same as man(7) roff
 * (the build writes the man pages' option sections with it). 1 when it
 * printed, else 0. */
int fed_cli_help(const char *cmd, const char *synopsis, const char *title,
                 const struct fed_opt *t, size_t n, int argc, char **argv);
/* Options for a subcommand: defaults, then --config FILE, then the flags;
 * --help prints the table. Returns -1 to go on, else the exit status
 * (0 after --help, 2 on a bad option or a stray argument, 1 out of memory). */
int fed_cli_load_options(const char *cmd, const char *synopsis, const struct fed_opt *t,
                         size_t n, void *cfg, int argc, char **argv);
/* The same, and given (n bytes, may be NULL): which options the file or a
 * flag set (fed_opt_load_given). */
int fed_cli_load_options_given(const char *cmd, const char *synopsis, const struct fed_opt *t,
                               size_t n, void *cfg, int argc, char **argv, unsigned char *given);

#define FED_CLI_MAX_THREADS 64
/* OpenBLAS chooses its kernels and starts its worker threads when the
 * process loads it: exec `fednode CMD argv...` again (once: the environment
 * then says it) with the right OPENBLAS_CORETYPE when it fell back to
 * generic kernels on this CPU, and with OPENBLAS_NUM_THREADS=1 unless the
 * environment gives a count (every backend runs it on one thread; its
 * workers would only spin for 0.1 s). Returns when no restart is needed or
 * it failed. */
void fed_cli_maybe_reexec(const char *cmd, int argc, char **argv);
/* The same for a program's own argv (NULL-terminated, argv[0] first). */
void fed_cli_maybe_reexec_main(char **argv);
int fed_cli_online_cores(void); /* 1..FED_CLI_MAX_THREADS */
/* --model given a layer file (model/model_cfg.h: a value that is no preset
 * and names a regular file): model (cap bytes) becomes the spec of its
 * graph ("g:..."), or its id when the graph is longer (model.h), the whole
 * graph then in *graph (fed_free; graph NULL: the command takes no such
 * graph, an error). onnx (may be NULL) gets an .onnx file's weights
 * (fed_cli_is_onnx). declared (may be NULL) gets the input the file
 * declares: its [input] and the classes it fixes (fed_model_cfg_classes, 0:
 * none; an .onnx file's input and outputs); all zero for a spec. -1 to go
 * on (a spec is left as it is), 2 with the file's error printed, naming
 * cmd. */
typedef struct fed_onnx fed_onnx;
struct fed_model_shape;
int fed_cli_model_file(const char *cmd, char *model, size_t cap, char **graph, fed_onnx **onnx,
                       struct fed_model_shape *declared);
/* Whether path names an ONNX file (it ends in .onnx): --model FILE.onnx
 * (onnx/onnx.h) is translated into the graph, its weights kept in *onnx
 * (NULL: the command uses none, a warning says so). */
int fed_cli_is_onnx(const char *path);
/* A command that takes no ONNX file given one as flag (path): the refusal
 * printed, naming what cmd takes (takes, e.g. "a .safetensors file"), and
 * 2; else -1 to go on. */
int fed_cli_refuse_onnx(const char *cmd, const char *flag, const char *path, const char *takes);
/* An export (`fednode export`: a .safetensors file whose metadata names
 * its spec and input) built into a model on be (pool, shards and batch as
 * fed_model_load's); *f keeps the parsed file, whose shared statistics
 * (f->stats_mean, stats_std) standardize CSV input as in training, until
 * fed_store_safetensors_fini. FED_ERR_SPEC for a file whose metadata names
 * no spec or no input. */
struct fed_store_st_file;
struct fed_backend;
struct fed_pool;
struct fed_model;
fed_err fed_cli_model_from_export(const char *path, struct fed_backend *be, struct fed_pool *pool,
                                  int shards, int batch, struct fed_store_st_file *f,
                                  struct fed_model **out);
/* "I/K" with 0 <= I < K: 1 when s is one. */
int fed_cli_parse_shard(const char *s, int *shard, int *k);

/* --data's reader flags (model/data.h) as options; returns -1 to go on,
 * else the exit status (2: a bad value, printed naming cmd). */
struct fed_data_flags;
struct fed_data_opts;
int fed_cli_data_opts(const char *cmd, const struct fed_data_flags *f,
                      struct fed_data_opts *out);
/* A key's passphrase into sodium_malloc'd memory (*pass, free with
 * sodium_free; NULL when none): from file when it is not empty, else from
 * FEDNODE_PASSPHRASE. Returns -1 to go on, else the exit status (errors
 * printed, naming cmd). */
int fed_cli_passphrase(const char *cmd, const char *file, char **pass, size_t *len);

int fed_cli_train(int argc, char **argv);
/* app/cli_keys.c: a member vouching for another key */
int fed_cli_vouch(int argc, char **argv);
/* app/cli_run.c: the daemon */
int fed_cli_run(int argc, char **argv);
int fed_cli_aggregate(int argc, char **argv);
/* The shared settings (node/settings.h) `fednode run` would take from argv
 * (defaults, --config FILE, flags), for tests that hold fedsim beside it.
 * out is left alone on an error. */
struct fed_node_settings;
int fed_cli_run_settings(int argc, char **argv, struct fed_node_settings *out);
int fed_cli_eval(int argc, char **argv);
/* app/cli_store.c: the node's database */
int fed_cli_status(int argc, char **argv);
/* What `status --json` prints for st (db: the path it names, NULL: null; the last
 * `rounds` rounds and `checkpoints` checkpoints), to f: GET /status.json of
 * --http serves it. FED_ERR_NOMEM or the store's error (nothing written). */
struct fed_store;
fed_err fed_cli_status_json(FILE *f, const char *db, struct fed_store *st, int rounds,
                            int checkpoints);
int fed_cli_export(int argc, char **argv);
int fed_cli_import(int argc, char **argv);
int fed_cli_verify(int argc, char **argv);
/* app/cli_privacy.c: the RDP accountant (privacy/rdp.h) */
int fed_cli_privacy(int argc, char **argv);
/* fednode model FILE: a model file's layers, shapes, parameters and FLOPs. */
int fed_cli_model(int argc, char **argv);
/* app/cli_keys.c: node identity */
int fed_cli_keygen(int argc, char **argv);
int fed_cli_pubkey(int argc, char **argv);

#endif
