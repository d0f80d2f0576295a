/* transports/tcp/tcp_server.c: the target side of the TCP transport.
 *
 * An accept thread (poll on the listening socket and an eventfd for stop)
 * starts one thread per accepted connection.  That thread serves the
 * connection's requests in order with blocking I/O: read the 32-byte
 * header, check the range under the registered-memory read lock, then move
 * the data straight between the socket and registered memory.  WRITE
 * replies are kept in a small buffer while further requests are already in
 * the socket and flushed before the thread would block (or after 16), which
 * saves a send per slice without delaying a lone request.
 *
 * Timeouts: SO_RCVTIMEO/SO_SNDTIMEO of at most one second let the thread
 * notice a stalled peer: an idle connection (between requests) may stay
 * open forever; a request whose bytes stop arriving for io_timeout ms
 * closes the connection.  Stop: fini shuts every socket down, which wakes
 * the blocked calls, then joins each thread and closes its fd. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tcp_auth.h"
#include "tcp_internal.h"
#include "tcp_wire.h"
#include "tern/tern.h"

#define ACK_BATCH 16
#define DRAIN_CHUNK (256 * 1024)

typedef struct srv_state {
    tcp_srv_conn *c;
    tcp_ctx *ctx;
    uint8_t acks[ACK_BATCH * TCP_REP_SIZE];
    int nacks;
    uint8_t *drain;            /* scratch for refused WRITE payloads */
} srv_state;

/* Is the connection being torn down? */
static int srv_stopping(tcp_ctx *ctx) { return atomic_load(&ctx->srv_stopping); }

/* Read len bytes.  idle_ok: the peer may stay silent forever before the
 * first byte.  Returns 0, TERN_ERR_CLOSED (EOF or stop), TERN_ERR_TIMEOUT,
 * TERN_ERR_IO. */
static int srv_read(srv_state *st, void *buf, size_t len, int idle_ok)
{
    size_t got = 0;
    uint64_t last = tcp_now_ms();
    while (got < len) {
        ssize_t n = recv(st->c->fd, (char *)buf + got, len - got, MSG_WAITALL);
        if (n > 0) {
            got += (size_t)n;
            last = tcp_now_ms();
            continue;
        }
        if (n == 0)
            return TERN_ERR_CLOSED;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return TERN_ERR_IO;
        if (srv_stopping(st->ctx))
            return TERN_ERR_CLOSED;
        if (!(idle_ok && got == 0) && tcp_now_ms() - last > (uint64_t)st->ctx->io_timeout_ms)
            return TERN_ERR_TIMEOUT;
    }
    return 0;
}

/* Write an iovec fully (modifies iov). */
static int srv_writev(srv_state *st, struct iovec *iov, int iovcnt)
{
    uint64_t last = tcp_now_ms();
    while (iovcnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t n = sendmsg(st->c->fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return errno == EPIPE || errno == ECONNRESET ? TERN_ERR_CLOSED : TERN_ERR_IO;
            if (srv_stopping(st->ctx))
                return TERN_ERR_CLOSED;
            if (tcp_now_ms() - last > (uint64_t)st->ctx->io_timeout_ms)
                return TERN_ERR_TIMEOUT;
            continue;
        }
        last = tcp_now_ms();
        size_t left = (size_t)n;
        while (iovcnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

static int srv_flush_acks(srv_state *st)
{
    if (!st->nacks)
        return 0;
    struct iovec iov = {st->acks, (size_t)st->nacks * TCP_REP_SIZE};
    st->nacks = 0;
    return srv_writev(st, &iov, 1);
}

static void srv_make_rep(uint8_t *p, const tcp_req *q, int status)
{
    tcp_rep r = {.magic = TCP_REP_MAGIC, .version = TCP_WIRE_VERSION, .opcode = q->opcode,
                 .status = status, .id = q->id};
    tcp_rep_encode(p, &r);
}

static int srv_queue_ack(srv_state *st, const tcp_req *q, int status)
{
    srv_make_rep(st->acks + (size_t)st->nacks * TCP_REP_SIZE, q, status);
    if (++st->nacks == ACK_BATCH)
        return srv_flush_acks(st);
    return 0;
}

/* Next request header: try without blocking first; if nothing is there,
 * flush the pending replies and wait (idle is fine). */
static int srv_read_header(srv_state *st, uint8_t *hdr)
{
    ssize_t n;
    do
        n = recv(st->c->fd, hdr, TCP_REQ_SIZE, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n == TCP_REQ_SIZE)
        return 0;
    if (n == 0)
        return TERN_ERR_CLOSED;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        return TERN_ERR_IO;
    size_t got = n > 0 ? (size_t)n : 0;
    int rc = srv_flush_acks(st);
    if (rc)
        return rc;
    return srv_read(st, hdr + got, TCP_REQ_SIZE - got, got == 0);
}

static int srv_drain(srv_state *st, uint64_t len)
{
    if (!st->drain && !(st->drain = malloc(DRAIN_CHUNK)))
        return TERN_ERR_NOMEM;
    while (len) {
        size_t n = len < DRAIN_CHUNK ? (size_t)len : DRAIN_CHUNK;
        int rc = srv_read(st, st->drain, n, 0);
        if (rc)
            return rc;
        len -= n;
    }
    return 0;
}

/* Serve one checked request while holding the read lock. */
static int srv_do_transfer(srv_state *st, const tcp_req *q)
{
    void *mem = (void *)(uintptr_t)q->addr;
    if (q->opcode == TERN_WRITE) {
        int rc = srv_read(st, mem, q->length, 0);
        if (rc == 0)
            atomic_fetch_add(&st->ctx->st_bytes_in, q->length);
        return rc;
    }
    int rc = srv_flush_acks(st); /* replies stay in request order */
    if (rc)
        return rc;
    uint8_t rep[TCP_REP_SIZE];
    srv_make_rep(rep, q, 0);
    struct iovec iov[2] = {{rep, TCP_REP_SIZE}, {mem, q->length}};
    rc = srv_writev(st, iov, 2);
    if (rc == 0)
        atomic_fetch_add(&st->ctx->st_bytes_out, q->length);
    return rc;
}

/* One request: 0 to go on, else the reason to close the connection. */
static int srv_serve_one(srv_state *st)
{
    uint8_t hdr[TCP_REQ_SIZE];
    int rc = srv_read_header(st, hdr);
    if (rc)
        return rc;
    tcp_req q;
    tcp_req_decode(hdr, &q);
    if (q.magic != TCP_REQ_MAGIC || q.version != TCP_WIRE_VERSION || q.flags != 0 ||
        (q.opcode != TERN_READ && q.opcode != TERN_WRITE)) {
        tcp_log(st->ctx, TERN_LOG_WARN,
                "closing data connection from %s: malformed request header (magic 0x%08x, "
                "version %u, opcode %u, flags 0x%x); is the peer a tern TCP transport "
                "of wire version %d?", st->c->peer, q.magic, q.version, q.opcode, q.flags,
                TCP_WIRE_VERSION);
        return TERN_ERR_PROTOCOL;
    }
    atomic_fetch_add(&st->ctx->st_req_served, 1);
    pthread_rwlock_rdlock(&st->ctx->mr_lock);
    if (q.length && tcp_mr_find(st->ctx, q.addr, q.length)) {
        rc = srv_do_transfer(st, &q);
        pthread_rwlock_unlock(&st->ctx->mr_lock);
        if (rc == 0 && q.opcode == TERN_WRITE)
            rc = srv_queue_ack(st, &q, 0);
        return rc;
    }
    pthread_rwlock_unlock(&st->ctx->mr_lock);
    atomic_fetch_add(&st->ctx->st_refused, 1);
    int status = q.length ? TERN_ERR_RANGE : TERN_ERR_INVAL;
    tcp_log(st->ctx, TERN_LOG_DEBUG, "refused %s of %" PRIu64 " B at 0x%" PRIx64 " from %s",
            q.opcode == TERN_WRITE ? "WRITE" : "READ", q.length, q.addr, st->c->peer);
    if (q.opcode == TERN_WRITE && q.length) {
        if (q.length > TCP_DRAIN_MAX)
            return TERN_ERR_RANGE; /* documented: close without a reply */
        rc = srv_drain(st, q.length);
        if (rc)
            return rc;
    }
    return srv_queue_ack(st, &q, status);
}

static void *srv_conn_main(void *arg)
{
    tcp_srv_conn *c = arg;
    srv_state st = {.c = c, .ctx = c->ctx};
    /* A peer that does not prove the shared secret is never served (tcp_auth.h). */
    int rc = tcp_auth_server(c->ctx, c->fd, c->peer) ? TERN_ERR_CLOSED : 0;
    while (rc == 0 && (rc = srv_serve_one(&st)) == 0)
        ;
    if (rc != TERN_ERR_CLOSED && rc != TERN_ERR_PROTOCOL)
        tcp_log(c->ctx, TERN_LOG_INFO, "data connection from %s closed: %s", c->peer,
                tcp_errname(rc));
    shutdown(c->fd, SHUT_RDWR);
    free(st.drain);
    atomic_store(&c->done, 1);
    return NULL;
}

/* Join and free connections whose thread ended (it takes no lock after
 * setting `done`, so joining under srv_mu is safe).  Caller holds srv_mu. */
static void srv_reap_locked(tcp_ctx *ctx)
{
    tcp_srv_conn **pp = &ctx->srv_conns;
    while (*pp) {
        tcp_srv_conn *c = *pp;
        if (!atomic_load(&c->done)) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        pthread_join(c->thread, NULL);
        close(c->fd);
        ctx->nsrv--;
        free(c);
    }
}

static void srv_accept_one(tcp_ctx *ctx)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(ctx->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    pthread_mutex_lock(&ctx->srv_mu);
    srv_reap_locked(ctx);
    int full = ctx->nsrv >= ctx->opt_max_server_conns;
    pthread_mutex_unlock(&ctx->srv_mu);
    tcp_srv_conn *c = full ? NULL : calloc(1, sizeof *c);
    if (!c) {
        tcp_log(ctx, TERN_LOG_WARN, "refusing a data connection: %s",
                full ? "max_server_connections reached" : "out of memory");
        close(fd);
        return;
    }
    c->ctx = ctx;
    c->fd = fd;
    char h[INET6_ADDRSTRLEN] = "?", p[16] = "?";
    getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(c->peer, sizeof c->peer, "%s:%s", h, p);
    tcp_sock_tune(ctx, fd);
    int tmo = ctx->io_timeout_ms < 1000 ? ctx->io_timeout_ms : 1000;
    struct timeval tv = {tmo / 1000, (tmo % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    pthread_mutex_lock(&ctx->srv_mu);
    if (ctx->srv_stopping || pthread_create(&c->thread, NULL, srv_conn_main, c) != 0) {
        pthread_mutex_unlock(&ctx->srv_mu);
        close(fd);
        free(c);
        return;
    }
    c->next = ctx->srv_conns;
    ctx->srv_conns = c;
    ctx->nsrv++;
    pthread_mutex_unlock(&ctx->srv_mu);
}

static void *srv_accept_main(void *arg)
{
    tcp_ctx *ctx = arg;
    for (;;) {
        struct pollfd pf[2] = {{ctx->lfd, POLLIN, 0}, {ctx->srv_efd, POLLIN, 0}};
        int n = poll(pf, 2, 1000);
        if (srv_stopping(ctx))
            break;
        if (n > 0 && (pf[0].revents & POLLIN))
            srv_accept_one(ctx);
        else if (n == 0) {
            pthread_mutex_lock(&ctx->srv_mu);
            srv_reap_locked(ctx);
            pthread_mutex_unlock(&ctx->srv_mu);
        }
    }
    return NULL;
}

static int srv_listen(tcp_ctx *ctx, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", ctx->opt_port);
    int g = getaddrinfo(ctx->bind_host, port, &hints, &ai);
    if (g != 0)
        return tcp_errf(err, errlen, TERN_ERR_CONFIG,
                        "tcp: cannot resolve bind address '%s': %s (check transports.tcp.bind "
                        "or the engine's server_name)", ctx->bind_host, gai_strerror(g));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        tcp_sock_tune(ctx, fd); /* buffer sizes must be set before listen to
                                   count for the window scale */
    }
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 256) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return tcp_errf(err, errlen, TERN_ERR_IO,
                        "tcp: cannot listen on %s port %d: %s (is the port in use? set "
                        "transports.tcp.port to 0 for an ephemeral one)",
                        ctx->bind_host, ctx->opt_port, strerror(e));
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    ctx->lport = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
    ctx->lfd = fd;
    return 0;
}

int tcp_server_start(tcp_ctx *ctx, char *err, size_t errlen)
{
    int rc = srv_listen(ctx, err, errlen);
    if (rc)
        return rc;
    ctx->srv_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ctx->srv_efd < 0 || pthread_create(&ctx->srv_thread, NULL, srv_accept_main, ctx) != 0) {
        int e = errno;
        close(ctx->lfd);
        if (ctx->srv_efd >= 0)
            close(ctx->srv_efd);
        ctx->lfd = ctx->srv_efd = -1;
        return tcp_errf(err, errlen, TERN_ERR_IO, "tcp: cannot start the data server: %s",
                        strerror(e));
    }
    ctx->srv_started = 1;
    return 0;
}

void tcp_server_stop(tcp_ctx *ctx)
{
    if (!ctx->srv_started)
        return;
    pthread_mutex_lock(&ctx->srv_mu);
    atomic_store(&ctx->srv_stopping, 1);
    for (tcp_srv_conn *c = ctx->srv_conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&ctx->srv_mu);
    uint64_t one = 1;
    if (write(ctx->srv_efd, &one, sizeof one) < 0) {
        /* the accept loop also wakes every second */
    }
    pthread_join(ctx->srv_thread, NULL);
    /* Join outside srv_mu: a serving thread may still look at the flag. */
    pthread_mutex_lock(&ctx->srv_mu);
    tcp_srv_conn *list = ctx->srv_conns;
    ctx->srv_conns = NULL;
    pthread_mutex_unlock(&ctx->srv_mu);
    while (list) {
        tcp_srv_conn *c = list;
        list = c->next;
        pthread_join(c->thread, NULL);
        close(c->fd);
        free(c);
    }
    ctx->nsrv = 0;
    close(ctx->lfd);
    close(ctx->srv_efd);
    ctx->lfd = ctx->srv_efd = -1;
    ctx->srv_started = 0;
}
