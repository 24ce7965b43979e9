/* identity.c - key files (node.key, node.pub), base64 public keys and
 * passphrase sealing with crypto_pwhash. Owns no state: secrets go straight
 * between the file and the caller's arena. Must never write a key file
 * readable by others, overwrite one, nor leave a secret in ordinary memory. */
#include "crypto/identity.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "core/bytes.h"
#include "core/log.h"
#include "crypto/arena_impl.h"

#define KF_MAGIC "FEDK"
#define KF_VERSION 1
#define KF_PLAIN 0
#define KF_SEALED 1
#define KF_HDR 40
#define KF_PLAIN_BYTES 72
#define KF_AD_BYTES 96
#define KF_SEALED_BYTES 144
#define KF_SALT 40
#define KF_OPS 56
#define KF_MEM 64
#define KF_NONCE 72
#define KF_BOX 96

/* ---- base64 ---- */

void fed_crypto_pk_to_base64(const uint8_t pk[FED_CRYPTO_PK_BYTES],
                             char out[FED_CRYPTO_PK_B64_LEN + 1])
{
    sodium_bin2base64(out, FED_CRYPTO_PK_B64_LEN + 1, pk, FED_CRYPTO_PK_BYTES,
                      sodium_base64_VARIANT_ORIGINAL);
}

fed_err fed_crypto_pk_from_base64(const char *text, size_t len, uint8_t pk[FED_CRYPTO_PK_BYTES])
{
    uint8_t x[crypto_scalarmult_curve25519_BYTES];
    size_t bin_len = 0;
    const char *end = NULL;

    if (sodium_init() < 0)
        return FED_ERR_INTERNAL;
    if (len != FED_CRYPTO_PK_B64_LEN ||
        sodium_base642bin(pk, FED_CRYPTO_PK_BYTES, text, len, NULL, &bin_len, &end,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        bin_len != FED_CRYPTO_PK_BYTES || end != text + len)
        return FED_ERR_FORMAT;
    /* A key that has no X25519 twin can never hold a session. */
    if (crypto_sign_ed25519_pk_to_curve25519(x, pk) != 0)
        return FED_ERR_KEY;
    return FED_OK;
}

/* ---- little helpers ---- */

static fed_err join_path(char *buf, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(buf, cap, "%s/%s", dir, name);

    return n < 0 || (size_t)n >= cap ? FED_ERR_RANGE : FED_OK;
}

static fed_err write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len) {
        ssize_t n = write(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return FED_ERR_IO;
        p += n;
        len -= (size_t)n;
    }
    return FED_OK;
}

static fed_err read_all(int fd, void *buf, size_t cap, size_t *got)
{
    uint8_t *p = buf;

    *got = 0;
    while (*got < cap) {
        ssize_t n = read(fd, p + *got, cap - *got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return FED_ERR_IO;
        if (n == 0)
            break;
        *got += (size_t)n;
    }
    return FED_OK;
}

fed_crypto_pwcost fed_crypto_pwcost_default(void)
{
    fed_crypto_pwcost c = {crypto_pwhash_OPSLIMIT_INTERACTIVE, crypto_pwhash_MEMLIMIT_INTERACTIVE};

    return c;
}

static int pwcost_ok(uint64_t ops, uint64_t mem)
{
    return ops >= crypto_pwhash_OPSLIMIT_MIN && ops <= crypto_pwhash_OPSLIMIT_SENSITIVE &&
           mem >= crypto_pwhash_MEMLIMIT_MIN && mem <= crypto_pwhash_MEMLIMIT_SENSITIVE;
}

/* The passphrase key, into the arena's scratch. */
static fed_err derive_pass_key(fed_crypto_arena *a, const char *pass, size_t pass_len,
                               const uint8_t *salt, uint64_t ops, uint64_t mem)
{
    if (crypto_pwhash(fedi_crypto_arena_scratch(a), crypto_aead_xchacha20poly1305_ietf_KEYBYTES,
                      pass, pass_len, salt, ops, (size_t)mem, crypto_pwhash_ALG_ARGON2ID13) != 0)
        return FED_ERR_NOMEM; /* libsodium fails here only when it cannot get memlimit */
    return FED_OK;
}

/* ---- save ---- */

static fed_err write_pub(const char *dir, const uint8_t *pk)
{
    char path[4096], tmp[4096], line[FED_CRYPTO_PK_B64_LEN + 2];
    fed_err err;
    int fd;

    if ((err = join_path(path, sizeof path, dir, FED_CRYPTO_PUBFILE)) != FED_OK ||
        (err = join_path(tmp, sizeof tmp, dir, FED_CRYPTO_PUBFILE ".tmp")) != FED_OK)
        return err;
    fed_crypto_pk_to_base64(pk, line);
    line[FED_CRYPTO_PK_B64_LEN] = '\n';
    (void)unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return FED_ERR_IO;
    err = write_all(fd, line, FED_CRYPTO_PK_B64_LEN + 1);
    if (err == FED_OK && fsync(fd) != 0)
        err = FED_ERR_IO;
    if (close(fd) != 0 && err == FED_OK)
        err = FED_ERR_IO;
    if (err == FED_OK && rename(tmp, path) != 0)
        err = FED_ERR_IO;
    if (err != FED_OK)
        (void)unlink(tmp);
    return err;
}

/* Builds the header (and for a sealed file the whole sealed tail) in hdr. */
static fed_err build_keyfile(fed_crypto_arena *a, const char *pass, size_t pass_len,
                             const fed_crypto_pwcost *cost, fed_random_fn rnd, void *rnd_ctx,
                             uint8_t hdr[KF_SEALED_BYTES], size_t *hdr_len)
{
    fed_err err;

    memset(hdr, 0, KF_SEALED_BYTES);
    memcpy(hdr, KF_MAGIC, 4);
    hdr[4] = KF_VERSION;
    hdr[5] = pass_len ? KF_SEALED : KF_PLAIN;
    memcpy(hdr + 8, fed_crypto_arena_pubkey(a), FED_CRYPTO_PK_BYTES);
    if (!pass_len) {
        *hdr_len = KF_HDR; /* the seed follows, written from the arena */
        return FED_OK;
    }
    if (!pwcost_ok(cost->opslimit, cost->memlimit))
        return FED_ERR_INVAL;
    rnd(rnd_ctx, hdr + KF_SALT, crypto_pwhash_SALTBYTES);
    fed_put_u64le(hdr + KF_OPS, cost->opslimit);
    fed_put_u64le(hdr + KF_MEM, cost->memlimit);
    rnd(rnd_ctx, hdr + KF_NONCE, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
    err = derive_pass_key(a, pass, pass_len, hdr + KF_SALT, cost->opslimit, cost->memlimit);
    if (err == FED_OK &&
        crypto_aead_xchacha20poly1305_ietf_encrypt(
            hdr + KF_BOX, NULL, fedi_crypto_arena_seed_mem(a), FED_CRYPTO_SEED_BYTES, hdr,
            KF_AD_BYTES, NULL, hdr + KF_NONCE, fedi_crypto_arena_scratch(a)) != 0)
        err = FED_ERR_INTERNAL;
    sodium_memzero(fedi_crypto_arena_scratch(a), FED_CRYPTO_SCRATCH_BYTES);
    *hdr_len = KF_SEALED_BYTES;
    return err;
}

static fed_err write_key(fed_crypto_arena *a, const char *path, const char *tmp, const uint8_t *hdr,
                         size_t hdr_len)
{
    fed_err err;
    int fd;

    (void)unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return FED_ERR_IO;
    err = fchmod(fd, 0600) == 0 ? FED_OK : FED_ERR_IO;
    if (err == FED_OK)
        err = write_all(fd, hdr, hdr_len);
    if (err == FED_OK && hdr_len == KF_HDR)
        err = write_all(fd, fedi_crypto_arena_seed_mem(a), FED_CRYPTO_SEED_BYTES);
    if (err == FED_OK && fsync(fd) != 0)
        err = FED_ERR_IO;
    if (close(fd) != 0 && err == FED_OK)
        err = FED_ERR_IO;
    /* link() never replaces: a key that appeared meanwhile survives. */
    if (err == FED_OK && link(tmp, path) != 0)
        err = errno == EEXIST ? FED_ERR_EXISTS : FED_ERR_IO;
    (void)unlink(tmp);
    return err;
}

/* mkdir -p, each missing directory 0700. */
static fed_err make_dirs(const char *dir)
{
    char path[4096];
    size_t len = strlen(dir);

    if (len == 0 || len >= sizeof path)
        return FED_ERR_RANGE;
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != 0)
            continue;
        path[i] = 0;
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            fed_log(FED_LOG_ERROR, "keygen: cannot create %s: %s", path, strerror(errno));
            return FED_ERR_IO;
        }
        path[i] = i < len ? '/' : 0;
    }
    return FED_OK;
}

fed_err fed_crypto_identity_save(fed_crypto_arena *a, const char *dir, const char *pass,
                                 size_t pass_len, const fed_crypto_pwcost *cost, fed_random_fn rnd,
                                 void *rnd_ctx)
{
    char path[4096], tmp[4096];
    uint8_t hdr[KF_SEALED_BYTES];
    fed_crypto_pwcost def = fed_crypto_pwcost_default();
    size_t hdr_len = 0;
    struct stat st;
    fed_err err;

    if (!fed_crypto_arena_has_identity(a))
        return FED_ERR_KEY;
    if (!pass)
        pass_len = 0;
    if ((err = join_path(path, sizeof path, dir, FED_CRYPTO_KEYFILE)) != FED_OK ||
        (err = join_path(tmp, sizeof tmp, dir, FED_CRYPTO_KEYFILE ".tmp")) != FED_OK)
        return err;
    if ((err = make_dirs(dir)) != FED_OK)
        return err;
    if (lstat(path, &st) == 0) {
        fed_log(FED_LOG_ERROR, "keygen: %s exists; it is never overwritten", path);
        return FED_ERR_EXISTS;
    }
    err = build_keyfile(a, pass, pass_len, cost ? cost : &def, rnd, rnd_ctx, hdr, &hdr_len);
    if (err == FED_OK)
        err = write_pub(dir, fed_crypto_arena_pubkey(a));
    if (err == FED_OK)
        err = write_key(a, path, tmp, hdr, hdr_len);
    if (err != FED_OK && err != FED_ERR_EXISTS)
        fed_log(FED_LOG_ERROR, "keygen: cannot write %s: %s", path, fed_strerror(err));
    return err;
}

/* ---- load ---- */

/* 1 when path lies directly in $CREDENTIALS_DIRECTORY: systemd's copy of a
 * LoadCredential= file for this service (fednode@.service hands node.key
 * over so). systemd writes it 0400 and root's, in a private read-only
 * folder, and lets the service's user read it with an ACL entry, whose
 * mask shows as the group's read bit. */
static int in_credentials_dir(const char *path)
{
    const char *cd = getenv("CREDENTIALS_DIRECTORY");
    char want[PATH_MAX], dir[PATH_MAX], got[PATH_MAX];
    const char *slash = strrchr(path, '/');
    struct stat ds;

    if (!cd || !cd[0] || !slash || (size_t)(slash - path) >= sizeof dir)
        return 0;
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
    if (!realpath(cd, want) || !realpath(dir[0] ? dir : "/", got) || strcmp(want, got))
        return 0;
    /* as systemd makes it: root's (or ours), nobody else may add a file */
    return stat(want, &ds) == 0 && S_ISDIR(ds.st_mode) && !(ds.st_mode & 022) &&
           (ds.st_uid == 0 || ds.st_uid == geteuid());
}

/* Opens path for reading after checking it is a regular file of ours that
 * group and others cannot touch (or systemd's credential, as it writes one:
 * root's or ours, readable by the group bit's ACL mask at most). */
static fed_err open_private(const char *path, int *fd_out)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), cred;

    *fd_out = -1;
    if (fd < 0) {
        if (errno == ENOENT)
            return FED_ERR_NOTFOUND;
        fed_log(FED_LOG_ERROR, "%s: %s", path, strerror(errno));
        return errno == ELOOP ? FED_ERR_PERM : FED_ERR_IO;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        fed_log(FED_LOG_ERROR, "%s: not a regular file", path);
        return FED_ERR_KEY;
    }
    cred = in_credentials_dir(path);
    if (cred && !(st.st_mode & 037) && (st.st_uid == geteuid() || st.st_uid == 0)) {
        *fd_out = fd;
        return FED_OK;
    }
    if (st.st_mode & 077) {
        close(fd);
        fed_log(FED_LOG_ERROR,
                "%s has mode %04o: a key file must not be accessible by group or others "
                "(chmod 600 %s)",
                path, (unsigned)(st.st_mode & 07777), path);
        return FED_ERR_PERM;
    }
    if (st.st_uid != geteuid()) {
        close(fd);
        fed_log(FED_LOG_ERROR, "%s is owned by uid %u, not by this user", path,
                (unsigned)st.st_uid);
        return FED_ERR_PERM;
    }
    *fd_out = fd;
    return FED_OK;
}

/* The bytes a key file of hdr's kind has (a plain one's when the header is
 * too short to say). */
static size_t kf_bytes(const uint8_t *hdr, size_t got)
{
    return got > 5 && hdr[5] == KF_SEALED ? KF_SEALED_BYTES : KF_PLAIN_BYTES;
}

/* A file that ends early: said with its length and the length its kind has. */
static fed_err kf_truncated(const char *path, const uint8_t *hdr, size_t got)
{
    fed_log(FED_LOG_ERROR, "%s: truncated key file: %zu bytes where %s%zu are needed", path,
            got, got > 5 ? "" : "at least ", kf_bytes(hdr, got));
    return FED_ERR_TRUNCATED;
}

static fed_err check_header(const char *path, const uint8_t *hdr, size_t got)
{
    /* what a key file starts with, cut short: truncated, not something else */
    if (got < KF_HDR && memcmp(hdr, KF_MAGIC, got < 4 ? got : 4) == 0 &&
        (got < 5 || hdr[4] == KF_VERSION) && (got < 6 || hdr[5] <= KF_SEALED))
        return kf_truncated(path, hdr, got);
    if (got < KF_HDR || memcmp(hdr, KF_MAGIC, 4) != 0 || hdr[4] != KF_VERSION || hdr[6] != 0 ||
        hdr[7] != 0 || (hdr[5] != KF_PLAIN && hdr[5] != KF_SEALED)) {
        fed_log(FED_LOG_ERROR, "%s: not a fednode key file (version %d)", path, KF_VERSION);
        return FED_ERR_KEY;
    }
    return FED_OK;
}

static fed_err unseal_seed(fed_crypto_arena *a, const char *path, const uint8_t *file,
                           const char *pass, size_t pass_len)
{
    uint64_t ops = fed_get_u64le(file + KF_OPS), mem = fed_get_u64le(file + KF_MEM);
    fed_err err;

    if (!pass || !pass_len) {
        fed_log(FED_LOG_ERROR, "%s is sealed: a passphrase is needed", path);
        return FED_ERR_PASSPHRASE;
    }
    if (!pwcost_ok(ops, mem)) {
        fed_log(FED_LOG_ERROR, "%s: passphrase cost out of range", path);
        return FED_ERR_KEY;
    }
    err = derive_pass_key(a, pass, pass_len, file + KF_SALT, ops, mem);
    if (err == FED_OK &&
        crypto_aead_xchacha20poly1305_ietf_decrypt(
            fedi_crypto_arena_seed_mem(a), NULL, NULL, file + KF_BOX,
            FED_CRYPTO_SEED_BYTES + crypto_aead_xchacha20poly1305_ietf_ABYTES, file, KF_AD_BYTES,
            file + KF_NONCE, fedi_crypto_arena_scratch(a)) != 0) {
        fed_log(FED_LOG_ERROR, "%s: wrong passphrase (or a damaged key file)", path);
        err = FED_ERR_PASSPHRASE;
    }
    sodium_memzero(fedi_crypto_arena_scratch(a), FED_CRYPTO_SCRATCH_BYTES);
    return err;
}

fed_err fed_crypto_identity_load(fed_crypto_arena *a, const char *dir, const char *pass,
                                 size_t pass_len)
{
    char path[4096];
    uint8_t file[KF_SEALED_BYTES + 1];
    size_t got = 0;
    fed_err err;
    int fd = -1;

    fedi_crypto_arena_clear_identity(a);
    if ((err = join_path(path, sizeof path, dir, FED_CRYPTO_KEYFILE)) != FED_OK)
        return err;
    if ((err = open_private(path, &fd)) != FED_OK)
        return err;
    /* The header first; a plain seed is read straight into the arena. */
    err = read_all(fd, file, KF_HDR, &got);
    if (err == FED_OK)
        err = check_header(path, file, got);
    if (err == FED_OK && file[5] == KF_PLAIN) {
        err = read_all(fd, fedi_crypto_arena_seed_mem(a), FED_CRYPTO_SEED_BYTES, &got);
        if (err == FED_OK && got != FED_CRYPTO_SEED_BYTES)
            err = kf_truncated(path, file, KF_HDR + got);
    } else if (err == FED_OK) {
        err = read_all(fd, file + KF_HDR, KF_SEALED_BYTES - KF_HDR, &got);
        if (err == FED_OK && got != KF_SEALED_BYTES - KF_HDR)
            err = kf_truncated(path, file, KF_HDR + got);
        if (err == FED_OK)
            err = unseal_seed(a, path, file, pass, pass_len);
    }
    if (err == FED_OK && read_all(fd, file + KF_SEALED_BYTES, 1, &got) == FED_OK && got != 0) {
        fed_log(FED_LOG_ERROR, "%s: malformed key file: longer than the %zu bytes of its kind",
                path, kf_bytes(file, KF_HDR));
        err = FED_ERR_KEY;
    }
    close(fd);
    if (err == FED_OK)
        err = fedi_crypto_arena_adopt_seed(a);
    if (err == FED_OK && sodium_memcmp(fed_crypto_arena_pubkey(a), file + 8, 32) != 0) {
        fed_log(FED_LOG_ERROR, "%s: public key does not match the seed", path);
        err = FED_ERR_KEY;
    }
    if (err != FED_OK)
        fedi_crypto_arena_clear_identity(a);
    return err;
}

static fed_err pub_from_keyfile(const char *dir, uint8_t pk[FED_CRYPTO_PK_BYTES])
{
    char path[4096];
    uint8_t hdr[KF_HDR];
    size_t got = 0;
    fed_err err;
    int fd = -1;

    if ((err = join_path(path, sizeof path, dir, FED_CRYPTO_KEYFILE)) != FED_OK)
        return err;
    if ((err = open_private(path, &fd)) != FED_OK)
        return err;
    err = read_all(fd, hdr, sizeof hdr, &got);
    close(fd);
    if (err == FED_OK)
        err = check_header(path, hdr, got);
    if (err == FED_OK)
        memcpy(pk, hdr + 8, FED_CRYPTO_PK_BYTES);
    return err;
}

fed_err fed_crypto_pubkey_load(const char *dir, uint8_t pk[FED_CRYPTO_PK_BYTES])
{
    char path[4096], line[FED_CRYPTO_PK_B64_LEN + 4];
    size_t len = 0;
    fed_err err;
    FILE *f;

    if ((err = join_path(path, sizeof path, dir, FED_CRYPTO_PUBFILE)) != FED_OK)
        return err;
    f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? pub_from_keyfile(dir, pk) : FED_ERR_IO;
    if (!fgets(line, sizeof line, f))
        line[0] = 0;
    fclose(f);
    len = strcspn(line, "\r\n");
    err = fed_crypto_pk_from_base64(line, len, pk);
    if (err != FED_OK)
        fed_log(FED_LOG_ERROR, "%s: not one base64 public key line", path);
    return err;
}

fed_err fed_crypto_passphrase_read(const char *path, char *buf, size_t cap, size_t *len)
{
    size_t got = 0, n;
    fed_err err;
    int fd;

    *len = 0;
    if (cap < 2)
        return FED_ERR_INVAL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? FED_ERR_NOTFOUND : FED_ERR_IO;
    err = read_all(fd, buf, cap - 1, &got);
    close(fd);
    if (err != FED_OK) {
        sodium_memzero(buf, cap);
        return err;
    }
    n = 0;
    while (n < got && buf[n] != '\n' && buf[n] != '\r')
        n++;
    if (n == got && got == cap - 1) {
        sodium_memzero(buf, cap);
        return FED_ERR_TOO_LARGE;
    }
    sodium_memzero(buf + n, cap - n);
    if (n == 0)
        return FED_ERR_FORMAT;
    *len = n;
    return FED_OK;
}
