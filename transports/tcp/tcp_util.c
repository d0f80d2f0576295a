/* transports/tcp/tcp_util.c: what every file of the transport uses: the
 * log (plain and rate-limited), error names, the socket options of a data
 * connection, handing a slice back.  The bottom of the plugin: it calls
 * nothing of it. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp_internal.h"
#include "tern/tern.h"

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
