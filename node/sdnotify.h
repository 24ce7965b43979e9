/* sdnotify.h - telling systemd (or whatever set $NOTIFY_SOCKET) how the
 * daemon is doing, without libsystemd: the sd_notify(3) datagram protocol.
 * $NOTIFY_SOCKET names an AF_UNIX datagram socket, a path ("/run/...") or
 * an abstract name ("@name": a leading NUL on the wire); each message is one
 * datagram of newline-separated KEY=VALUE lines: READY=1 once the node
 * listens or dials, STOPPING=1 when it begins to stop, WATCHDOG=1 every
 * half of $WATCHDOG_USEC (when $WATCHDOG_PID is unset or this process),
 * STATUS=... for `systemctl status`. Without $NOTIFY_SOCKET every call does
 * nothing. A send that fails is dropped (datagrams are best effort: systemd
 * then times the start or the watchdog out, as it would for a hung node). */
#ifndef FED_NODE_SDNOTIFY_H
#define FED_NODE_SDNOTIFY_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "core/err.h"

typedef struct fed_sd_notify {
    int fd;                   /* -1: nobody to tell */
    struct sockaddr_un addr;
    socklen_t addrlen;
    uint64_t watchdog_ms;     /* ping this often (half WATCHDOG_USEC); 0: never */
    uint64_t last_ping_ms;    /* monotonic */
} fed_sd_notify;

/* From the environment: FED_OK with n->fd -1 when $NOTIFY_SOCKET is unset
 * or empty; FED_ERR_BAD_VALUE when it names no usable socket address
 * (neither '/' nor '@' first, or too long); FED_ERR_IO when no socket could
 * be made. n is usable (and closable) whatever it returns. */
FED_WUR fed_err fed_sd_notify_open(fed_sd_notify *n);
/* Sends msg ("READY=1\nSTATUS=listening") as one datagram: FED_OK (also
 * when there is nobody to tell), FED_ERR_IO when the send failed. */
fed_err fed_sd_notify_send(fed_sd_notify *n, const char *msg);
/* WATCHDOG=1 when watchdog_ms passed since the last one (now_ms: a
 * monotonic clock); 1 when one was sent. */
int fed_sd_notify_watchdog(fed_sd_notify *n, uint64_t now_ms);
/* Milliseconds from now_ms until the next watchdog ping is due (UINT32_MAX
 * when there is no watchdog): how long the loop may wait. */
uint32_t fed_sd_notify_due_ms(const fed_sd_notify *n, uint64_t now_ms);
void fed_sd_notify_close(fed_sd_notify *n);

#endif
