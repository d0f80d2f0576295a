/* transports/tcp/tcp_util.c: what every file of the transport uses: the
 * C library's socket calls (tcp_sys_libc, the default table), the log
 * (plain and rate-limited), error names, the socket options of a data
 * connection, handing a slice back.  The bottom of the plugin: it calls
 * nothing of it. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <time.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp_internal.h"

/* connect and accept4 take glibc's transparent sockaddr unions: wrapped
 * to the table's plain pointer types. */
static int libc_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    return connect(fd, addr, len);
}

static int libc_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    return accept4(fd, addr, len, flags);
}

const tcp_sys tcp_sys_libc = {
    .connect = libc_connect,
    .poll = poll,
    .ppoll = ppoll,
    .accept4 = libc_accept4,
    .recv = recv,
    .recvmsg = recvmsg,
    .send = send,
    .sendmsg = sendmsg,
};

void tcp_log(tcp_ctx *ctx, int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx && ctx->host.log)
        /* the host names the transport itself */
        ctx->host.log(ctx->host.host, level, "%s", strncmp(msg, "tcp: ", 5) ? msg : msg + 5);
    else if (level <= TERN_LOG_WARN)
        fprintf(stderr, "tern tcp: %s\n", msg);
}

const char *tcp_errname(int code)
{
    switch (code) {
    case TERN_OK: return "ok";
    case TERN_ERR_INVAL: return "TERN_ERR_INVAL";
    case TERN_ERR_NOMEM: return "TERN_ERR_NOMEM";
    case TERN_ERR_IO: return "TERN_ERR_IO";
    case TERN_ERR_TIMEOUT: return "TERN_ERR_TIMEOUT";
    case TERN_ERR_PROTOCOL: return "TERN_ERR_PROTOCOL";
    case TERN_ERR_CONNECT: return "TERN_ERR_CONNECT";
    case TERN_ERR_RANGE: return "TERN_ERR_RANGE";
    case TERN_ERR_CLOSED: return "TERN_ERR_CLOSED";
    default: return "error";
    }
}

/* Socket options every data connection gets (both sides). */
void tcp_sock_tune(tcp_ctx *ctx, int fd)
{
    int one = 1;
    if (ctx->opt_nodelay)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (ctx->opt_sndbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &ctx->opt_sndbuf, sizeof ctx->opt_sndbuf);
    if (ctx->opt_rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &ctx->opt_rcvbuf, sizeof ctx->opt_rcvbuf);
    if (ctx->opt_zerocopy_min > 0)
        setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one);
}

/* The sender of a large payload on loopback (or the NIC's softirq) wakes
 * the receiving thread for every batch of segments it delivers, and a wake
 * costs the sending side as much as a good part of the copy; with the low
 * mark at 128 KiB the receiver is woken once per 128 KiB instead and reads
 * it in one call.  Only while a payload is known to be coming: a reply
 * header or a small payload must wake it at once. */
void tcp_rcvlowat(tcp_io *io, int *cur, uint64_t left)
{
    /* Below TCP_LOWAT left: 1, not left, so a payload's end never waits
     * on a mark it cannot reach (two settings per payload at most). */
    int want = left >= TCP_LOWAT ? (int)TCP_LOWAT : 1;
    if (want > 1) /* a large payload: tcp_loop.c polls for the rest */
        atomic_store_explicit(&io->w->expect_more, 1, memory_order_relaxed);
    if (want == *cur)
        return;
    if (setsockopt(io->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0)
        *cur = want;
}

/* ---- MSG_ZEROCOPY (docs/protocol.md, TCP data frames) ----------------------
 * Only an initiator's WRITE payloads: the kernel sends straight from the
 * registered pages and reports on the socket's error queue when it no
 * longer holds them.  A slice still
 * completes at its reply, not at that report: the reply says the peer has
 * every byte, so nothing the application writes afterwards can reach it.
 * The reports are only read off (they would otherwise count against the
 * socket's option memory until sends fail with ENOBUFS), and counted:
 * one the kernel marks "copied" (loopback, a NIC without scatter-gather)
 * means zerocopy bought nothing there. */
ssize_t tcp_send(tcp_ctx *ctx, int fd, const struct msghdr *mh, uint64_t payload)
{
    int zc = ctx->opt_zerocopy_min > 0 && payload >= ctx->opt_zerocopy_min;
    ssize_t n = ctx->sys.sendmsg(fd, mh, MSG_DONTWAIT | MSG_NOSIGNAL | (zc ? MSG_ZEROCOPY : 0));
    if (n < 0 && zc && errno == ENOBUFS) /* no option memory for the report */
        return ctx->sys.sendmsg(fd, mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0 && zc)
        atomic_fetch_add(&ctx->zc_sends, 1);
    return n;
}

int tcp_zc_drain(tcp_ctx *ctx, int fd)
{
    for (;;) {
        char cbuf[CMSG_SPACE(sizeof(struct sock_extended_err)) + 64];
        struct msghdr m = {.msg_control = cbuf, .msg_controllen = sizeof cbuf};
        if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
            break;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
            const struct sock_extended_err *ee = (const void *)CMSG_DATA(cm);
            if (ee->ee_origin != SO_EE_ORIGIN_ZEROCOPY)
                continue;
            int copied = (ee->ee_code & SO_EE_CODE_ZEROCOPY_COPIED) != 0;
            if (copied)
                atomic_fetch_add(&ctx->zc_copied, (uint64_t)(ee->ee_data - ee->ee_info + 1));
            if (!atomic_exchange(&ctx->zc_logged, 1))
                ctx->host.log(ctx->host.host, TERN_LOG_DEBUG,
                              "tcp: MSG_ZEROCOPY completion reports arrive; the kernel %s",
                              copied ? "copied the pages anyway (loopback, or a NIC without "
                                       "scatter-gather): zerocopy_min buys nothing here"
                                     : "sent from the registered pages");
        }
    }
    int err = 0;
    socklen_t len = sizeof err;
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0;
}

void tcp_complete(tcp_ctx *ctx, tern_slice *s)
{
    ctx->host.complete(ctx->host.host, s);
}

void tcp_warn_limited(tcp_ctx *ctx, tcp_ratelim *rl, const char *fmt, ...)
{
    uint64_t now = tern_kit_now_ms(), last = atomic_load(&rl->last_ms);
    if (last && tcp_since(now, last) < 1000) {
        atomic_fetch_add(&rl->skipped, 1);
        return;
    }
    if (!atomic_compare_exchange_strong(&rl->last_ms, &last, now ? now : 1)) {
        atomic_fetch_add(&rl->skipped, 1);
        return;
    }
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint64_t skipped = atomic_exchange(&rl->skipped, 0);
    if (skipped)
        tcp_log(ctx, TERN_LOG_WARN, "%s (%" PRIu64 " more like it in the last %" PRIu64
                " ms not shown)", msg, skipped, last ? tcp_since(now, last) : 0);
    else
        tcp_log(ctx, TERN_LOG_WARN, "%s", msg);
}
