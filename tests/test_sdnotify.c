/* test_sdnotify.c - node/sdnotify.c, systemd's notify protocol without
 * libsystemd: datagrams reach a path socket and an abstract one ("@name"),
 * a bad $NOTIFY_SOCKET is refused, none means silence, and the watchdog's
 * pace follows $WATCHDOG_USEC and $WATCHDOG_PID. Then the daemon itself
 * (./fednode aggregate, or $FEDNODE) under a fake NOTIFY_SOCKET this test
 * listens on, with --log-format json: READY=1 once it listens, WATCHDOG=1 at
 * half of WATCHDOG_USEC, STOPPING=1 on SIGTERM, exit 0, and every line it
 * logged one valid JSON object naming the node. Its data is a small CSV
 * written here, so it needs no dataset.
 *
 * Also a helper for the process tests: `test_sdnotify --listen @NAME|PATH
 * SECONDS` prints each datagram it receives (its newlines as spaces) until
 * STOPPING=1 or SECONDS pass. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "node/sdnotify.h"
#include "tests/support/json_check.h"
#include "tests/support/support.h"

/* A datagram socket bound to name ("@x": abstract); -1 on failure. */
static int listen_on(const char *name)
{
    struct sockaddr_un a;
    size_t len = strlen(name);
    socklen_t alen;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    if (fd < 0 || len >= sizeof a.sun_path)
        return -1;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, name, len);
    if (name[0] == '@')
        a.sun_path[0] = '\0';
    else
        unlink(name);
    alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (name[0] == '@' ? 0 : 1));
    if (bind(fd, (struct sockaddr *)&a, alen) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The next datagram within ms, NUL-ended: its length, or -1. */
static ssize_t recv_within(int fd, char *buf, size_t cap, int ms)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    ssize_t n;

    if (poll(&pf, 1, ms) != 1)
        return -1;
    n = recv(fd, buf, cap - 1, 0);
    if (n >= 0)
        buf[n] = '\0';
    return n;
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void clear_env(void)
{
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
}

static void test_none(void **state)
{
    fed_sd_notify n;

    (void)state;
    clear_env();
    assert_int_equal(fed_sd_notify_open(&n), FED_OK);
    assert_int_equal(n.fd, -1);
    assert_int_equal(fed_sd_notify_send(&n, "READY=1"), FED_OK);
    assert_int_equal(fed_sd_notify_watchdog(&n, 1000000), 0);
    assert_int_equal(fed_sd_notify_due_ms(&n, 5), UINT32_MAX);
    fed_sd_notify_close(&n);
    setenv("NOTIFY_SOCKET", "", 1);
    assert_int_equal(fed_sd_notify_open(&n), FED_OK);
    assert_int_equal(n.fd, -1);
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    assert_int_equal(fed_sd_notify_open(&n), FED_ERR_BAD_VALUE);
    assert_int_equal(n.fd, -1);
    setenv("NOTIFY_SOCKET", "@", 1);
    assert_int_equal(fed_sd_notify_open(&n), FED_ERR_BAD_VALUE);
    {
        char longname[200];

        memset(longname, 'x', sizeof longname - 1);
        longname[0] = '/';
        longname[sizeof longname - 1] = 0;
        setenv("NOTIFY_SOCKET", longname, 1);
        assert_int_equal(fed_sd_notify_open(&n), FED_ERR_BAD_VALUE);
    }
    fed_sd_notify_close(&n);
    clear_env();
}

static void send_to(const char *name)
{
    fed_sd_notify n;
    char buf[256];
    int fd = listen_on(name);

    assert_true(fd >= 0);
    setenv("NOTIFY_SOCKET", name, 1);
    assert_int_equal(fed_sd_notify_open(&n), FED_OK);
    assert_true(n.fd >= 0);
    assert_int_equal(fed_sd_notify_send(&n, "READY=1\nSTATUS=listening"), FED_OK);
    assert_true(recv_within(fd, buf, sizeof buf, 2000) > 0);
    assert_string_equal(buf, "READY=1\nSTATUS=listening");
    assert_int_equal(fed_sd_notify_send(&n, "STOPPING=1"), FED_OK);
    assert_true(recv_within(fd, buf, sizeof buf, 2000) > 0);
    assert_string_equal(buf, "STOPPING=1");
    fed_sd_notify_close(&n);
    close(fd);
    /* nobody listening any more: the send fails, nothing else happens */
    assert_int_equal(fed_sd_notify_open(&n), FED_OK);
    if (name[0] == '/')
        unlink(name);
    assert_int_equal(fed_sd_notify_send(&n, "WATCHDOG=1"), FED_ERR_IO);
    fed_sd_notify_close(&n);
    clear_env();
}

static void test_path_socket(void **state)
{
    char path[512];

    (void)state;
    fed_test_path(path, sizeof path, "notify.sock");
    send_to(path);
}

static void test_abstract_socket(void **state)
{
    char name[64];

    (void)state;
    snprintf(name, sizeof name, "@fed_test_sdnotify_%ld", (long)getpid());
    send_to(name);
}

static void test_watchdog(void **state)
{
    fed_sd_notify n;
    char name[64], buf[64], pid[32];
    int fd;

    (void)state;
    snprintf(name, sizeof name, "@fed_test_sdnotify_wd_%ld", (long)getpid());
    fd = listen_on(name);
    assert_true(fd >= 0);
    setenv("NOTIFY_SOCKET", name, 1);
    setenv("WATCHDOG_USEC", "200000", 1);
    assert_int_equal(fed_sd_notify_open(&n), FED_OK);
    assert_int_equal(n.watchdog_ms, 100); /* half */
    n.last_ping_ms = 1000;
    assert_int_equal(fed_sd_notify_due_ms(&n, 1040), 60);
    assert_int_equal(fed_sd_notify_watchdog(&n, 1099), 0);
    assert_int_equal(fed_sd_notify_watchdog(&n, 1100), 1);
    assert_true(recv_within(fd, buf, sizeof buf, 2000) > 0);
    assert_string_equal(buf, "WATCHDOG=1");
    assert_int_equal(fed_sd_notify_due_ms(&n, 1100), 100);
    assert_int_equal(fed_sd_notify_due_ms(&n, 5000), 0);
    fed_sd_notify_close(&n);
    /* another process's watchdog: not ours to ping */
    snprintf(pid, sizeof pid, "%ld", (long)getpid() + 1);
    setenv("WATCHDOG_PID", pid, 1);
    assert_int_equal(fed_sd_notify_open(&n), FED_OK);
    assert_int_equal(n.watchdog_ms, 0);
    fed_sd_notify_close(&n);
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("WATCHDOG_PID", pid, 1);
    setenv("WATCHDOG_USEC", "1500", 1); /* under 2 ms: every millisecond */
    assert_int_equal(fed_sd_notify_open(&n), FED_OK);
    assert_int_equal(n.watchdog_ms, 1);
    fed_sd_notify_close(&n);
    setenv("WATCHDOG_USEC", "12x", 1);
    assert_int_equal(fed_sd_notify_open(&n), FED_OK);
    assert_int_equal(n.watchdog_ms, 0);
    fed_sd_notify_close(&n);
    close(fd);
    clear_env();
}

/* ---- the daemon under a fake NOTIFY_SOCKET ---- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void copy_file(const char *from, const char *to, mode_t mode)
{
    char buf[4096];
    size_t n;
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");

    assert_non_null(in);
    assert_non_null(out);
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
    assert_int_equal(chmod(to, mode), 0);
}

static void test_daemon(void **state)
{
    const char *fednode = getenv("FEDNODE") ? getenv("FEDNODE") : "./fednode";
    char keys[512], keyfile[600], allow[512], csv[512], db[512], log[512], name[64];
    char buf[512], pub[128], *text;
    size_t len = 0;
    int fd, st, watchdogs = 0, lines = 0, named = 0;
    uint64_t t0, ready_at = 0, first_wd = 0;
    pid_t pid;
    FILE *f;

    (void)state;
    if (access(fednode, X_OK) != 0) {
        print_message("skipped: no %s (run make)\n", fednode);
        skip();
    }
    fed_test_path(keys, sizeof keys, "agg");
    assert_int_equal(mkdir(keys, 0700), 0);
    snprintf(keyfile, sizeof keyfile, "%s/node.key", keys);
    copy_file("tests/keys/agg/node.key", keyfile, 0600);
    f = fopen("tests/keys/agg/node.pub", "r");
    assert_non_null(f);
    assert_non_null(fgets(pub, sizeof pub, f));
    fclose(f);
    fed_test_path(allow, sizeof allow, "allow.txt");
    snprintf(buf, sizeof buf, "agg %s", pub);
    write_file(allow, buf);
    fed_test_path(csv, sizeof csv, "data.csv");
    write_file(csv, "a,b,label\n0.1,1,0\n0.9,0,1\n0.2,1,0\n0.8,0,1\n");
    fed_test_path(db, sizeof db, "agg.db");
    fed_test_path(log, sizeof log, "agg.log");
    snprintf(name, sizeof name, "@fed_test_sdnotify_daemon_%ld", (long)getpid());
    fd = listen_on(name);
    assert_true(fd >= 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int out = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

        if (out < 0 || dup2(out, 2) < 0 || dup2(out, 1) < 0)
            _exit(127);
        setenv("NOTIFY_SOCKET", name, 1);
        setenv("WATCHDOG_USEC", "200000", 1); /* a ping every 100 ms */
        setenv("FEDNODE_NO_REEXEC", "1", 1);
        execl(fednode, fednode, "aggregate", "--keys", keys, "--allow", allow, "--db", db,
              "--data", csv, "--model", "logreg", "--listen", "tcp://127.0.0.1:0", "--rounds",
              "1", "--threads", "1", "--log-format", "json", "--log-level", "debug",
              (char *)NULL);
        _exit(127);
    }
    t0 = now_ms();
    /* READY=1 first, then the watchdog's pings; 30 s for a slow machine */
    while (now_ms() - t0 < 30000 && watchdogs < 3) {
        if (recv_within(fd, buf, sizeof buf, 1000) < 0)
            continue;
        if (!strncmp(buf, "READY=1", 7)) {
            assert_int_equal(ready_at, 0);
            assert_non_null(strstr(buf, "STATUS=listening on tcp://127.0.0.1:0"));
            ready_at = now_ms();
        } else if (!strcmp(buf, "WATCHDOG=1")) {
            assert_true(ready_at > 0); /* never before READY=1 */
            if (!watchdogs++)
                first_wd = now_ms();
        } else {
            print_error("unexpected datagram '%s'\n", buf);
            kill(pid, SIGKILL);
            fail();
        }
    }
    if (watchdogs < 3) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        print_error("%s under NOTIFY_SOCKET: READY %s, %d watchdog pings in 30 s (log %s)\n",
                    fednode, ready_at ? "received" : "never received", watchdogs, log);
        fail();
    }
    /* three pings at 100 ms apart: well under the 200 ms WATCHDOG_USEC */
    assert_true(now_ms() - first_wd < 1000);
    assert_int_equal(kill(pid, SIGTERM), 0);
    t0 = now_ms();
    for (;;) {
        assert_true(now_ms() - t0 < 20000);
        if (recv_within(fd, buf, sizeof buf, 1000) < 0)
            continue;
        if (!strncmp(buf, "STOPPING=1", 10))
            break;
        assert_string_equal(buf, "WATCHDOG=1"); /* nothing else before it */
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    close(fd);
    /* every line it logged: one JSON object, naming the node (by its key
       until the allow-list that names it is loaded) */
    f = fopen(log, "r");
    assert_non_null(f);
    text = NULL;
    while (getline(&text, &len, f) > 0) {
        size_t n = strlen(text);
        char node[64];

        if (n && text[n - 1] == '\n')
            text[--n] = '\0';
        if (!fed_test_json_valid(text, n) ||
            !fed_test_json_get_string(text, n, "node", node, sizeof node)) {
            print_error("not a JSON log line with a node: '%s'\n", text);
            fail();
        }
        if (strcmp(node, "agg") != 0) {
            assert_int_equal(named, 0);
            assert_int_equal(strlen(node), 16); /* its key's first 8 bytes in hex */
        } else {
            named = 1;
        }
        lines++;
    }
    free(text);
    fclose(f);
    assert_true(named);
    assert_true(lines >= 3); /* listening, stopping, done at least */
}

/* --listen NAME SECONDS: print each datagram until STOPPING=1 or SECONDS. */
static int listen_main(const char *name, const char *secs)
{
    int fd = listen_on(name);
    uint64_t end = now_ms() + (uint64_t)(atof(secs) * 1000);
    char buf[4096];

    if (fd < 0) {
        fprintf(stderr, "test_sdnotify: cannot bind %s: %s\n", name, strerror(errno));
        return 1;
    }
    printf("listening\n");
    fflush(stdout);
    while (now_ms() < end) {
        if (recv_within(fd, buf, sizeof buf, 100) < 0)
            continue;
        for (char *p = buf; *p; p++)
            if (*p == '\n')
                *p = ' ';
        printf("%s\n", buf);
        fflush(stdout);
        if (!strncmp(buf, "STOPPING=1", 10))
            break;
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none),
        cmocka_unit_test_setup_teardown(test_path_socket, fed_test_tmpdir_setup,
                                        fed_test_tmpdir_teardown),
        cmocka_unit_test(test_abstract_socket),
        cmocka_unit_test(test_watchdog),
        cmocka_unit_test_setup_teardown(test_daemon, fed_test_tmpdir_setup,
                                        fed_test_tmpdir_teardown),
    };

    if (argc == 4 && !strcmp(argv[1], "--listen"))
        return listen_main(argv[2], argv[3]);
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
