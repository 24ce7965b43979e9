/* cli_keys.c - `fednode keygen` (a new node identity: DIR/node.key, mode
 * 0600, sealed with a passphrase when one is given, and DIR/node.pub),
 * `fednode pubkey DIR` (print the public key as an allow-list takes it) and
 * `fednode vouch` (a member's signed, expiring entry for another key).
 * Owns their options and messages; keys stay in a guarded arena and the
 * passphrase in guarded memory. Never overwrites or loosens a key file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/opt.h"
#include "crypto/arena.h"
#include "crypto/identity.h"
#include "gossip/peers.h"
#include "app/cli.h"

#define DIR_MAX 1024

typedef struct keygen_cfg {
    char out[DIR_MAX];
    char passphrase_file[DIR_MAX];
} keygen_cfg;

#define K(field, name, type, def, help) FED_OPT_DEF(keygen_cfg, field, name, type, def, 0, 0, help)
static const fed_opt keygen_opts[] = {
    K(out, "out", FED_OPT_STR, "", "directory for node.key and node.pub (created 0700)"),
    K(passphrase_file, "passphrase-file", FED_OPT_STR, "",
      "seal node.key with the first line of this file (else $FEDNODE_PASSPHRASE, if set)"),
};
#undef K

static void sodium_random(void *ctx, void *buf, size_t len)
{
    (void)ctx;
    randombytes_buf(buf, len);
}

/* -1 to go on, else the exit status. pos (room for argc) gets positionals. */
static int parse(const char *cmd, const char *synopsis, const fed_opt *t, size_t n, void *cfg,
                 int argc, char **argv, char **pos, int *npos)
{
    fed_opt_error e = {{0}};
    fed_err err;

    if (fed_cli_help(cmd, synopsis, "options", t, n, argc, argv))
        return 0;
    err = fed_opt_defaults(t, n, cfg, &e);
    if (err == FED_OK)
        err = fed_opt_parse_argv(t, n, cfg, argc, argv, pos, npos, &e);
    if (err != FED_OK) {
        fed_cli_error("%s: %s", cmd, e.msg[0] ? e.msg : fed_strerror(err));
        return 2;
    }
    return -1;
}

static int keygen_write(const keygen_cfg *cfg, const char *pass, size_t pass_len)
{
    fed_crypto_arena_cfg acfg = {1, 0};
    fed_crypto_arena *a = NULL;
    char text[FED_CRYPTO_PK_B64_LEN + 1];
    fed_err err;

    err = fed_crypto_arena_new(&acfg, &a);
    if (err == FED_OK)
        err = fed_crypto_arena_generate(a, sodium_random, NULL);
    if (err == FED_OK)
        err = fed_crypto_identity_save(a, cfg->out, pass, pass_len, NULL, sodium_random, NULL);
    if (err == FED_ERR_EXISTS) {
        fed_cli_error("keygen: %s/%s already exists; move it away to make a new key", cfg->out,
                      FED_CRYPTO_KEYFILE);
    } else if (err != FED_OK) {
        fed_cli_error("keygen: %s: %s", cfg->out, fed_strerror(err));
    } else {
        fed_crypto_pk_to_base64(fed_crypto_arena_pubkey(a), text);
        fprintf(stderr, "fednode: wrote %s/%s (mode 0600, %s) and %s/%s\n", cfg->out,
                FED_CRYPTO_KEYFILE, pass_len ? "sealed with the passphrase" : "NOT sealed",
                cfg->out, FED_CRYPTO_PUBFILE);
        printf("%s\n", text);
    }
    fed_crypto_arena_free(a);
    return err == FED_OK ? 0 : 1;
}

int fed_cli_keygen(int argc, char **argv)
{
    keygen_cfg cfg;
    char **pos = NULL, *pass = NULL;
    size_t pass_len = 0;
    int npos = 0, rc;

    pos = fed_calloc((size_t)argc + 1, sizeof *pos);
    if (!pos) {
        fed_cli_error("keygen: out of memory");
        return 1;
    }
    rc = parse("keygen", "--out DIR [--passphrase-file FILE]", keygen_opts,
               sizeof keygen_opts / sizeof keygen_opts[0], &cfg, argc, argv, pos, &npos);
    if (rc < 0 && npos > 0) {
        fed_cli_error("keygen: unexpected argument '%s' (see fednode keygen --help)", pos[0]);
        rc = 2;
    }
    if (rc < 0 && !cfg.out[0]) {
        fed_cli_error("keygen: --out DIR is required");
        rc = 2;
    }
    if (rc < 0)
        rc = fed_cli_passphrase("keygen", cfg.passphrase_file, &pass, &pass_len);
    if (rc < 0)
        rc = keygen_write(&cfg, pass, pass_len);
    if (pass) {
        sodium_memzero(pass, FED_CRYPTO_PASSPHRASE_MAX + 1);
        sodium_free(pass);
    }
    fed_free(pos);
    return rc;
}

int fed_cli_pubkey(int argc, char **argv)
{
    char **pos = NULL, text[FED_CRYPTO_PK_B64_LEN + 1];
    uint8_t pk[FED_CRYPTO_PK_BYTES];
    int npos = 0, rc;
    fed_err err;

    pos = fed_calloc((size_t)argc + 1, sizeof *pos);
    if (!pos) {
        fed_cli_error("pubkey: out of memory");
        return 1;
    }
    rc = parse("pubkey", "DIR   (prints DIR's public key, as node.pub and allow-lists write it)",
               NULL, 0, NULL, argc, argv, pos, &npos);
    if (rc < 0 && npos != 1) {
        fed_cli_error("pubkey: expected one DIR (see fednode pubkey --help)");
        rc = 2;
    }
    if (rc < 0) {
        if ((err = fed_crypto_pubkey_load(pos[0], pk)) != FED_OK) {
            fed_cli_error("pubkey: %s: %s", pos[0],
                          err == FED_ERR_NOTFOUND ? "no node.pub or node.key there"
                                                  : fed_strerror(err));
            rc = 1;
        } else {
            fed_crypto_pk_to_base64(pk, text);
            printf("%s\n", text);
            rc = 0;
        }
    }
    fed_free(pos);
    return rc;
}

/* ---- fednode vouch ---- */

typedef struct vouch_cfg {
    char keys[DIR_MAX];
    char passphrase_file[DIR_MAX];
    char key[FED_CRYPTO_PK_B64_LEN + 8];
    char url[FED_GOSSIP_URL_MAX + 1];
    int hours;
    char out[DIR_MAX];
} vouch_cfg;

#define V(field, name, type, def, min, max, help)                                        \
    FED_OPT_DEF(vouch_cfg, field, name, type, def, min, max, help)
static const fed_opt vouch_opts[] = {
    V(keys, "keys", FED_OPT_STR, "", 0, 0, "the voucher's directory (a member's node.key)"),
    V(passphrase_file, "passphrase-file", FED_OPT_STR, "", 0, 0,
      "file whose first line unseals node.key (else $FEDNODE_PASSPHRASE)"),
    V(key, "key", FED_OPT_STR, "", 0, 0, "the public key vouched for (base64, as node.pub)"),
    V(url, "url", FED_OPT_STR, "", 0, 0, "where that peer listens (tcp://HOST:PORT or ipc://PATH)"),
    V(hours, "hours", FED_OPT_INT, "24", 1, 24 * 365, "how long the entry counts"),
    V(out, "out", FED_OPT_STR, "", 0, 0, "the entry file to write (fednode run --publish takes it)"),
};
#undef V

/* Signs and writes the entry; the exit status. */
static int vouch_write(const vouch_cfg *c, const char *pass, size_t pass_len)
{
    fed_crypto_arena_cfg acfg = {1, 0};
    fed_crypto_arena *a = NULL;
    fed_gossip_entry e;
    uint8_t pk[FED_CRYPTO_PK_BYTES], buf[FED_GOSSIP_ENTRY_MAX];
    size_t len;
    FILE *f = NULL;
    fed_err err;
    int rc = 1;

    if ((err = fed_crypto_pk_from_base64(c->key, strlen(c->key), pk)) != FED_OK) {
        fed_cli_error("vouch: --key '%s' is not a public key", c->key);
        return 2;
    }
    err = fed_crypto_arena_new(&acfg, &a);
    if (err == FED_OK)
        err = fed_crypto_identity_load(a, c->keys, pass, pass_len);
    if (err != FED_OK) {
        fed_cli_error("vouch: %s/%s: %s", c->keys, FED_CRYPTO_KEYFILE,
                      err == FED_ERR_PASSPHRASE && !pass_len
                          ? "sealed, and no passphrase was given (--passphrase-file FILE or "
                            "$FEDNODE_PASSPHRASE)"
                          : fed_strerror(err));
        goto out;
    }
    err = fed_gossip_entry_sign(a, pk, c->url, (uint64_t)time(NULL) + 3600u * (uint64_t)c->hours,
                                &e);
    if (err != FED_OK) {
        fed_cli_error("vouch: --url '%s': %s", c->url, fed_strerror(err));
        rc = 2;
        goto out;
    }
    len = fed_gossip_entry_encode(&e, buf);
    if (!(f = fopen(c->out, "wbx")) || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        fed_cli_error("vouch: cannot write %s (it must not exist yet)", c->out);
        if (f)
            (void)remove(c->out);
        goto out;
    }
    fprintf(stderr, "fednode: wrote %s: %s at %s, for %d hours\n", c->out, c->key, c->url,
            c->hours);
    rc = 0;
out:
    fed_crypto_arena_free(a);
    return rc;
}

int fed_cli_vouch(int argc, char **argv)
{
    vouch_cfg cfg;
    char **pos = fed_calloc((size_t)argc + 1, sizeof(char *)), *pass = NULL;
    size_t pass_len = 0;
    int npos = 0, rc;

    if (!pos) {
        fed_cli_error("vouch: out of memory");
        fed_free(pos);
        return 1;
    }
    rc = parse("vouch", "--keys DIR --key BASE64 --url URL [--hours N] --out FILE", vouch_opts,
               sizeof vouch_opts / sizeof vouch_opts[0], &cfg, argc, argv, pos, &npos);
    if (rc < 0 && (npos > 0 || !cfg.keys[0] || !cfg.key[0] || !cfg.url[0] || !cfg.out[0])) {
        fed_cli_error("vouch: --keys, --key, --url and --out are required (see fednode vouch "
                      "--help)");
        rc = 2;
    }
    if (rc < 0)
        rc = fed_cli_passphrase("vouch", cfg.passphrase_file, &pass, &pass_len);
    if (rc < 0)
        rc = vouch_write(&cfg, pass, pass_len);
    if (pass)
        sodium_free(pass);
    fed_free(pos);
    return rc;
}
