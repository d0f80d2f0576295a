/* transports/tcp/tcp_accept.c: the target's listening sockets, one per NIC
 * (tcp_nics.c).  NIC i's lives on I/O thread i mod io_threads; each
 * accepted connection is counted against the budgets (tcp_budget.c),
 * placed on the least busy I/O thread and handed to its state machine
 * (tcp_server.c).  Strangers a newer one evicted are closed by their own
 * worker, from the connection's on_tick (tcp_server.c). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "tcp_server.h"
#include "tern/accept.h"

/* ---- accepting ------------------------------------------------------------------ */

/* A listening socket and when its accept pause (tern/accept.h) ends. */
typedef struct tcp_listener {
    tcp_io io;
    uint64_t resume_ms;              /* 0: not paused */
} tcp_listener;

static void srv_attach(void *arg)
{
    tcp_srv_conn *c = arg;
    c->events = EPOLLIN;
    if (tcp_io_add(&c->io, c->events) != 0) {
        tcp_io_list(&c->io);
        tcp_srv_close(c, TERN_LOG_WARN, "epoll_ctl failed");
        return;
    }
    if (atomic_load(&c->evict))
        tcp_srv_close(c, TERN_LOG_DEBUG, NULL);
}

static void srv_admit(tcp_ctx *ctx, int fd, const struct sockaddr_storage *ss, socklen_t sl)
{
    char h[INET6_ADDRSTRLEN] = "?", p[16] = "?";
    getnameinfo((const struct sockaddr *)ss, sl, h, sizeof h, p, sizeof p,
                NI_NUMERICHOST | NI_NUMERICSERV);
    tcp_srv_conn *c = calloc(1, sizeof *c);
    if (c) {
        c->ctx = ctx;
        c->io.fd = fd;
        c->io.w = tcp_worker_pick(ctx);
        snprintf(c->src, sizeof c->src, "%s", h);
        snprintf(c->peer, sizeof c->peer, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
    }
    if (!c || tcp_budget_admit(ctx, c) != 0) {
        tcp_warn_limited(ctx, &ctx->rl_refuse, "refusing a data connection from %s: %s", h,
                         c ? "max_server_connections established connections" : "out of memory");
        free(c);
        close(fd);
        return;
    }
    tcp_srv_begin(c);
    tcp_sock_tune(ctx, fd);
    if (tcp_worker_is_self(c->io.w))
        srv_attach(c);
    else if (tcp_worker_post(c->io.w, srv_attach, c) != 0) {
        tcp_io_list(&c->io); /* not reached in practice: out of memory */
        tcp_srv_close(c, TERN_LOG_WARN, "out of memory");
    }
}

static void listener_on_event(tcp_io *io, uint32_t ev)
{
    tcp_ctx *ctx = io->w->ctx;
    (void)ev;
    for (int i = 0; i < 256; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = ctx->sys.accept4(io->fd, (struct sockaddr *)&ss, &sl,
                                  SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (tern_accept_starved(errno)) {
                tcp_warn_limited(ctx, &ctx->rl_refuse,
                                 "cannot accept data connections: %s (raise the open files "
                                 "limit); accepting again in %d ms", strerror(errno),
                                 TERN_ACCEPT_PAUSE_MS);
                tcp_io_mod(io, 0); /* the backlog keeps it readable: stop watching */
                ((tcp_listener *)io)->resume_ms = tern_kit_now_ms() + TERN_ACCEPT_PAUSE_MS;
            }
            return;
        }
        srv_admit(ctx, fd, &ss, sl);
    }
}

/* Watch the listener again once its pause is over. */
static void listener_on_tick(tcp_io *io, uint64_t now_ms)
{
    tcp_listener *l = (tcp_listener *)io;
    if (l->resume_ms && now_ms >= l->resume_ms) {
        l->resume_ms = 0;
        tcp_io_mod(io, EPOLLIN);
    }
}

static void listener_free(tcp_io *io)
{
    free(io);
}

static int srv_listen(tcp_ctx *ctx, tcp_nic *nic, int want_port, int *out, char *err,
                      size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", want_port);
    int g = getaddrinfo(nic->bind, port, &hints, &ai);
    if (g != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG,
                             "tcp: cannot resolve bind address '%s' (device %s): %s (check "
                             "transports.tcp.bind or the engine's server_name)",
                             nic->bind, nic->name, gai_strerror(g));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        tcp_sock_tune(ctx, fd); /* buffer sizes must be set before listen to
                                   count for the window scale */
    }
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return tern_kit_errf(
            err, errlen, TERN_ERR_IO,
            "tcp: cannot listen on %s port %d (device %s): %s (is the port in use? "
            "set transports.tcp.port to 0 for an ephemeral one)",
            nic->bind, want_port, nic->name, strerror(e));
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    nic->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *out = fd;
    return 0;
}

static void listener_add(void *arg)
{
    tcp_io *io = arg;
    if (tcp_io_add(io, EPOLLIN) != 0) {
        tcp_io_list(io);
        close(io->fd);
        io->fd = -1;
        tcp_io_unlist(io);
    }
}

/* NIC i's listening socket goes on I/O thread i (mod their count); it stops
 * with it.  With an ephemeral port, the NICs after the first try the first
 * one's port (one number to open in a firewall), else take their own. */
static int srv_start_nic(tcp_ctx *ctx, int i, char *err, size_t errlen)
{
    tcp_nic *nic = &ctx->nics[i];
    int fd = -1, rc = -1;
    if (i > 0 && ctx->opt_port == 0)
        rc = srv_listen(ctx, nic, ctx->nics[0].port, &fd, err, errlen);
    if (rc != 0)
        rc = srv_listen(ctx, nic, ctx->opt_port, &fd, err, errlen);
    if (rc)
        return rc;
    tcp_listener *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "tcp: out of memory");
    }
    l->io.fd = fd;
    l->io.w = &ctx->workers[i % ctx->nworkers];
    l->io.on_event = listener_on_event;
    l->io.on_tick = listener_on_tick;
    l->io.on_free = listener_free;
    tcp_worker_call(l->io.w, listener_add, &l->io);
    return 0;
}

/* A failure leaves the listeners already started to tcp_workers_stop. */
int tcp_server_start(tcp_ctx *ctx, char *err, size_t errlen)
{
    for (int i = 0; i < ctx->nnics; i++) {
        int rc = srv_start_nic(ctx, i, err, errlen);
        if (rc)
            return rc;
    }
    ctx->lport = ctx->nics[0].port;
    return 0;
}
