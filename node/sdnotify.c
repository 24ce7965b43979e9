/* sdnotify.c - the sd_notify(3) datagrams (sdnotify.h): the address from
 * $NOTIFY_SOCKET, one SOCK_DGRAM socket kept open, the watchdog's pace from
 * $WATCHDOG_USEC and $WATCHDOG_PID. */
#include "node/sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

fed_err fed_sd_notify_open(fed_sd_notify *n)
{
    const char *path = getenv("NOTIFY_SOCKET");
    const char *usec = getenv("WATCHDOG_USEC"), *wpid = getenv("WATCHDOG_PID");
    size_t len;

    memset(n, 0, sizeof *n);
    n->fd = -1;
    if (!path || !path[0])
        return FED_OK;
    len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len < 2 || len >= sizeof n->addr.sun_path)
        return FED_ERR_BAD_VALUE;
    n->addr.sun_family = AF_UNIX;
    memcpy(n->addr.sun_path, path, len);
    if (path[0] == '@')
        n->addr.sun_path[0] = '\0'; /* abstract: the name is the bytes after the NUL */
    n->addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
                             (path[0] == '/' ? 1 : 0));
    if (usec && usec[0]) {
        char *end = NULL;
        unsigned long long us = strtoull(usec, &end, 10);
        long pid = wpid && wpid[0] ? strtol(wpid, NULL, 10) : 0;

        if (*end == '\0' && us > 0 && (pid == 0 || pid == (long)getpid()))
            n->watchdog_ms = us / 2000 ? us / 2000 : 1;
    }
    n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    return n->fd < 0 ? FED_ERR_IO : FED_OK;
}

fed_err fed_sd_notify_send(fed_sd_notify *n, const char *msg)
{
    ssize_t w;

    if (n->fd < 0)
        return FED_OK;
    do
        w = sendto(n->fd, msg, strlen(msg), MSG_NOSIGNAL, (const struct sockaddr *)&n->addr,
                   n->addrlen);
    while (w < 0 && errno == EINTR);
    return w == (ssize_t)strlen(msg) ? FED_OK : FED_ERR_IO;
}

int fed_sd_notify_watchdog(fed_sd_notify *n, uint64_t now_ms)
{
    if (n->fd < 0 || !n->watchdog_ms || now_ms - n->last_ping_ms < n->watchdog_ms)
        return 0;
    n->last_ping_ms = now_ms;
    return fed_sd_notify_send(n, "WATCHDOG=1") == FED_OK;
}

uint32_t fed_sd_notify_due_ms(const fed_sd_notify *n, uint64_t now_ms)
{
    uint64_t next;

    if (n->fd < 0 || !n->watchdog_ms)
        return UINT32_MAX;
    next = n->last_ping_ms + n->watchdog_ms;
    return next <= now_ms ? 0 : next - now_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)(next - now_ms);
}

void fed_sd_notify_close(fed_sd_notify *n)
{
    if (n->fd >= 0)
        close(n->fd);
    n->fd = -1;
}
