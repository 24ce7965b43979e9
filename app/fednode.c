/* fednode.c - main(): dispatch to a subcommand from the table below.
 * Owns nothing; each subcommand sets up and tears down its own world. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "app/cli.h"
#include "core/opt.h"

static const fed_cli_cmd commands[] = {
    /* one line per subcommand, in the order --help lists them */
    {"run", fed_cli_run, "run a node (--role aggregator|client|peer) until training is over"},
    {"aggregate", fed_cli_aggregate, "run an aggregator (run --role aggregator)"},
    {"train", fed_cli_train, "train a model locally on a dataset"},
    {"eval", fed_cli_eval, "evaluate a saved model on a dataset"},
    {"model", fed_cli_model, "print a model file's layers: shapes, parameters, FLOPs"},
    {"privacy", fed_cli_privacy, "epsilon spent by DP-SGD's noise, or the noise for a target"},
    {"status", fed_cli_status, "print a node database's rounds, checkpoints, peers, counters"},
    {"export", fed_cli_export, "write a checkpoint's model as .safetensors or .onnx (--format)"},
    {"import", fed_cli_import, "read .safetensors into a model file or a checkpoint"},
    {"verify", fed_cli_verify, "check a database: integrity, checkpoint chain, signatures"},
    {"keygen", fed_cli_keygen, "make a node identity: DIR/node.key (0600) and DIR/node.pub"},
    {"pubkey", fed_cli_pubkey, "print a node's public key (for allow-lists)"},
    {"vouch", fed_cli_vouch, "sign an expiring entry that makes another key a peer (--vouch)"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: fednode COMMAND [options]   (fednode COMMAND --help)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

/* --help-man: every command's section of fednode(1), as man(7) roff (the
 * build puts it in the page; each command prints its own usage and options
 * from its table, as its --help does). */
static int help_man(void)
{
    char arg[] = "--help-man", *args[] = {arg, NULL};

    setenv("FEDNODE_NO_REEXEC", "1", 1); /* no command may restart the process */
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        printf(".SS \"fednode %s\"\n", commands[i].name);
        fed_opt_man_text(stdout, commands[i].summary);
        printf(".\n");
        fflush(stdout);
        if (commands[i].fn(1, args) != 0)
            return 1;
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--help-man"))
        return help_man();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    fed_cli_log_init();
    /* Before any subcommand: a passphrase read into guarded memory, a key
       loaded, a hash taken all need libsodium started, whatever path gets
       there first. */
    if (sodium_init() < 0) {
        fed_cli_error("libsodium failed to start");
        return 1;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 2, argv + 2);
    fed_cli_error("unknown command '%s'", argv[1]);
    usage(stderr);
    return 2;
}
