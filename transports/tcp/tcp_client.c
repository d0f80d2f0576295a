/* transports/tcp/tcp_client.c: the initiator side of the TCP transport.
 *
 * Why one file of more than 800 lines: everything here works on one
 * connection's ring under its one lock, and each part calls the others
 * (a failed send or read breaks the connection, a break resends on a new
 * one, a waiting submitter reads replies); split by concern, the files
 * would call each other in a circle and share the ring's invariants.
 *
 * An endpoint holds up to `connections` connections to one peer's data port
 * (from the peer's segment blob {"host", "port"}).  ep_connect opens the
 * first; another is opened (by its I/O thread) while the least loaded one
 * has more than a slice queued, and one idle for idle_close_ms closes again
 * (the first stays).  Each connection's slices sit in a ring in request
 * order: [head .. head+nsent) are fully sent and wait for their reply, the
 * rest are still to be sent (the first maybe partly, send_off bytes).
 *
 * Short path: submit() appends to the ring and, when the socket is free,
 * sends right away from the caller's thread (sendmsg of header and data
 * straight from registered memory); only what the socket does not take is
 * left to the I/O thread (EPOLLOUT).  The I/O thread reads replies (READ
 * data straight into registered memory) and hands each finished slice to
 * the core with complete() at once, without any lock held.
 *
 * Lone requests: a small request that is the only one on its connection
 * is most likely waited for next by its caller; submit() then waits for
 * the reply on the socket itself, up to reply_wait_us (conn_await), which
 * saves a thread wake per round trip.  The I/O thread reads every reply no
 * caller waits for, so a reply later than the wait is never left unread.
 *
 * Failure: EOF, a socket error, a malformed reply or no progress for
 * io_timeout ms while requests are outstanding break the connection: every
 * slice on it completes with an error and a message.  A connection that
 * broke before its first reply (the target closed it, e.g. as an idle
 * stranger) has applied nothing that a resend could harm: its slices are
 * resent once on a new connection.  Wire format: docs/protocol.md, "TCP
 * data frames". */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sched.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "tcp_auth.h"
#include "tcp_internal.h"
#include "tcp_wire.h"

#define SEND_IOV_MAX 64
#define SEND_BYTES_MAX (16u << 20)
/* What submit() sends from the caller's thread before leaving the rest to
 * the I/O thread: a small request goes out at once, a large one does not
 * hold the caller. */
#define SUBMIT_INLINE_MAX (256u << 10)
/* The largest request whose reply submit() waits for (see conn_await). */
#define LONE_MAX (16u << 10)
/* One lone request in LONE_PROBE goes out without a wait, to see whether
 * the caller submits more meanwhile (it pipelines: waiting would serialize
 * it); LONE_RESUME submits in a row onto an idle connection say it waits
 * for each one again. */
#define LONE_PROBE 32
#define LONE_RESUME 8

typedef struct done_list {
    tern_slice *head, *tail;
} done_list;

/* A lone request submit() waits for: its connection, its id, the socket. */
typedef struct lone_req {
    tcp_conn *c;
    uint64_t id;
    int fd;
} lone_req;

static size_t ring_at(const tcp_conn *c, size_t j) { return (c->head + j) & (c->cap - 1); }

static uint64_t wire_bytes(const tern_slice *s)
{
    return TCP_REQ_SIZE + (s->opcode == TERN_OP_WRITE ? s->length : 0);
}

static void done_add(done_list *d, tern_slice *s)
{
    s->plugin[0] = NULL;
    if (d->tail)
        d->tail->plugin[0] = s;
    else
        d->head = s;
    d->tail = s;
}

/* Hand the list to the core; called with no lock held. */
static void done_flush(tcp_ctx *ctx, done_list *d)
{
    tern_slice *s = d->head;
    d->head = d->tail = NULL;
    while (s) {
        tern_slice *next = s->plugin[0];
        s->plugin[0] = NULL;
        tcp_complete(ctx, s);
        s = next;
    }
}

static void slice_finish(tcp_conn *c, done_list *d, tern_slice *s, int status,
                         const char *msg)
{
    s->status = status;
    s->transferred = status == 0 ? s->length : 0;
    s->errmsg[0] = 0;
    if (status && msg) { /* truncate to the slice's message buffer */
        size_t n = strnlen(msg, sizeof s->errmsg - 1);
        memcpy(s->errmsg, msg, n);
        s->errmsg[n] = 0;
    }
    if (c)
        atomic_fetch_sub(&c->load, TCP_REQ_SIZE + s->length);
    done_add(d, s);
}

/* The request with this id leaves the ring (caller holds mu). */
static void conn_left(tcp_conn *c, uint64_t id)
{
    if (c->lone == TCP_LONE_PROBE && c->probe_id == id)
        c->lone = TCP_LONE_WAIT; /* nothing followed it: the caller waited for it */
}

static void ring_fail_all(tcp_conn *c, done_list *d, int code, const char *msg)
{
    while (c->count) {
        conn_left(c, c->ring[c->head].id);
        slice_finish(c, d, c->ring[c->head].s, code, msg);
        c->head = (c->head + 1) & (c->cap - 1);
        c->count--;
    }
    c->head = c->nsent = 0;
}

static void conn_reset_stream(tcp_conn *c)
{
    c->nsent = 0;
    c->send_off = 0;
    c->rx_have = 0;
    c->rx_payload = 0;
    c->rx_off = 0;
    c->want_out = 0;
    c->reader = TCP_READER_IO;
    c->in_off = 0;
}

static void conn_close_fd(tcp_conn *c)
{
    if (c->io.fd < 0)
        return;
    epoll_ctl(c->io.w->epfd, EPOLL_CTL_DEL, c->io.fd, NULL);
    close(c->io.fd);
    c->io.fd = -1;
    atomic_fetch_sub(&c->io.w->nconn, 1);
}

static void conn_kick(tcp_conn *c);

/* The socket is gone (caller holds mu).  Slices of a connection that never
 * got a reply are resent once on a new one; otherwise they fail. */
static void conn_break(tcp_conn *c, done_list *d, int code, const char *why)
{
    char msg[512];
    tcp_ep *ep = c->ep;
    snprintf(msg, sizeof msg, "tcp: connection %d to %s broke: %s (%zu requests in flight)",
             c->idx, ep->peer, why, c->count);
    if (c->io.fd >= 0) {
        conn_close_fd(c);
        atomic_fetch_add(&ep->ctx->st_conn_broken, 1);
        tcp_log(ep->ctx, c->count ? TERN_LOG_WARN : TERN_LOG_DEBUG, "%s", msg);
    }
    conn_reset_stream(c);
    if (c->count && c->fresh && !c->resent && code != TERN_ERR_PROTOCOL) {
        c->resent = 1;
        atomic_store(&c->state, TCP_C_CONNECTING);
        conn_kick(c);
        return;
    }
    ring_fail_all(c, d, code, msg);
    atomic_store(&c->state, TCP_C_OFF);
}

/* Wait for a non-blocking connect on fd to finish, up to io_timeout ms in
 * all: 0 once the socket is writable (SO_ERROR then says how it went),
 * else the code with its message.  A signal retries with the time left, so
 * signals cannot stretch the deadline; a failed poll() is an error of its
 * own, never a finished connect. */
static int connect_wait(tcp_ep *ep, int fd, char *err, size_t errlen)
{
    tcp_ctx *ctx = ep->ctx;
    uint64_t deadline = tern_kit_now_ms() + (uint64_t)ctx->io_timeout_ms;
    for (;;) {
        uint64_t now = tern_kit_now_ms();
        struct pollfd pf = {fd, POLLOUT, 0};
        int n = ctx->sys.poll(&pf, 1, now < deadline ? (int)(deadline - now) : 0);
        if (n > 0)
            return 0;
        if (n == 0)
            return tern_kit_errf(err, errlen, TERN_ERR_CONNECT,
                                 "tcp: connect to data port %s timed out after %d ms (is the "
                                 "target up and reachable?)",
                                 ep->peer, ctx->io_timeout_ms);
        if (errno != EINTR)
            return tern_kit_errf(err, errlen, TERN_ERR_IO,
                                 "tcp: poll() waiting for the connect to data port %s failed: "
                                 "%s (a local failure, not the target's: check this process's "
                                 "memory and open files limit)",
                                 ep->peer, strerror(errno));
    }
}

/* Connect with a deadline; the socket stays non-blocking. */
static int sock_connect(tcp_ep *ep, int *out, char *err, size_t errlen)
{
    tcp_ctx *ctx = ep->ctx;
    int fd = socket(ep->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return tern_kit_errf(err, errlen, TERN_ERR_IO, "tcp: socket() for %s: %s", ep->peer,
                             strerror(errno));
    tcp_sock_tune(ctx, fd);
    int rc = ctx->sys.connect(fd, (struct sockaddr *)&ep->addr, ep->addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
        rc = connect_wait(ep, fd, err, errlen);
        if (rc) {
            close(fd);
            return rc;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        errno = soerr;
        rc = soerr ? -1 : 0;
    }
    if (rc != 0) {
        int e = errno;
        close(fd);
        return tern_kit_errf(err, errlen, TERN_ERR_CONNECT,
                             "tcp: connect to data port %s failed: %s (is the target running and "
                             "is its advertised tcp host/port reachable from here?)",
                             ep->peer, strerror(e));
    }
    rc = tcp_auth_client(ctx, fd, ep->peer, ep->segment, err, errlen);
    if (rc) {
        close(fd);
        return rc;
    }
    atomic_fetch_add(&ctx->st_connects, 1);
    *out = fd;
    return 0;
}

static int ring_grow(tcp_conn *c)
{
    size_t nc = c->cap ? c->cap * 2 : TCP_RING_MIN;
    tcp_entry *nr = malloc(nc * sizeof *nr);
    if (!nr)
        return TERN_ERR_NOMEM;
    for (size_t j = 0; j < c->count; j++)
        nr[j] = c->ring[ring_at(c, j)];
    free(c->ring);
    c->ring = nr;
    c->cap = nc;
    c->head = 0;
    return 0;
}

/* Send as much as the socket takes, up to about `budget` bytes (caller
 * holds mu). */
static void conn_send(tcp_conn *c, done_list *d, uint64_t budget)
{
    uint64_t sent = 0;
    while (c->io.fd >= 0 && c->nsent < c->count && sent < budget) {
        struct iovec iov[SEND_IOV_MAX];
        int niov = 0;
        size_t total = 0;
        for (size_t j = c->nsent; j < c->count && niov <= SEND_IOV_MAX - 2 &&
                                  total < SEND_BYTES_MAX; j++) {
            tcp_entry *e = &c->ring[ring_at(c, j)];
            uint64_t off = j == c->nsent ? c->send_off : 0;
            if (off < TCP_REQ_SIZE) {
                iov[niov++] = (struct iovec){e->hdr + off, TCP_REQ_SIZE - off};
                total += TCP_REQ_SIZE - off;
            }
            if (e->s->opcode == TERN_OP_WRITE) {
                uint64_t poff = off > TCP_REQ_SIZE ? off - TCP_REQ_SIZE : 0;
                uint64_t len = e->s->length - poff;
                if (len > budget - sent)
                    len = budget - sent; /* the rest on the next call */
                iov[niov++] = (struct iovec){(char *)e->s->local + poff, len};
                total += len;
            }
            if (sent + total >= budget)
                break;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        ssize_t n = tcp_send(c->ep->ctx, c->io.fd, &mh, total);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            char why[128];
            snprintf(why, sizeof why, "send failed: %s", strerror(errno));
            conn_break(c, d, TERN_ERR_CLOSED, why);
            return;
        }
        c->last_progress_ms = tern_kit_now_ms();
        sent += (uint64_t)n;
        uint64_t left = (uint64_t)n;
        while (left) {
            const tern_slice *s = c->ring[ring_at(c, c->nsent)].s;
            uint64_t rem = wire_bytes(s) - c->send_off;
            if (left >= rem) {
                left -= rem;
                c->nsent++;
                c->send_off = 0;
            } else {
                c->send_off += left;
                left = 0;
            }
        }
    }
}

/* EPOLLOUT only while something waits to be sent.  EPOLLIN unless the
 * waiters read replies (TCP_READER_WAITER) and every reply due has one (or
 * none is due): then only EPOLLRDHUP, so the I/O thread is not woken by
 * replies the submitters read themselves, but still sees the peer go
 * (caller holds mu). */
static void conn_arm(tcp_conn *c)
{
    if (c->io.fd < 0)
        return;
    int want = c->nsent < c->count;
    int off = c->reader == TCP_READER_WAITER && (c->awaiting || !c->count);
    if (want != c->want_out || off != c->in_off) {
        tcp_io_mod(&c->io, (off ? EPOLLRDHUP : EPOLLIN) | (want ? EPOLLOUT : 0));
        c->want_out = want;
        c->in_off = off;
    }
}

static void conn_complete_head(tcp_conn *c, done_list *d, int status, const char *msg)
{
    tern_slice *s = c->ring[c->head].s;
    conn_left(c, c->ring[c->head].id);
    c->head = (c->head + 1) & (c->cap - 1);
    c->count--;
    c->nsent--;
    slice_finish(c, d, s, status, msg);
}

/* Check one reply header against the oldest request.  Returns 1 when the
 * head READ's data follows, 0 when the head completed, <0 on a bad reply. */
static int conn_take_reply(tcp_conn *c, done_list *d, const uint8_t *p)
{
    tcp_rep r;
    tcp_rep_decode(p, &r);
    tcp_entry *e = &c->ring[c->head];
    if (r.magic != TCP_REP_MAGIC || r.version != TCP_WIRE_VERSION || r.id != e->id ||
        r.opcode != e->s->opcode || r.status > 0)
        return TERN_ERR_PROTOCOL;
    c->fresh = 0;
    c->resent = 0;
    if (r.status == 0 && e->s->opcode == TERN_OP_READ)
        return 1;
    char msg[512] = "";
    if (r.status == TERN_ERR_RANGE)
        snprintf(msg, sizeof msg, "tcp: %s refused %s of %" PRIu64 " B at 0x%" PRIx64
                 ": not inside a buffer registered there", c->ep->peer,
                 e->s->opcode == TERN_OP_WRITE ? "WRITE" : "READ", e->s->length, e->s->remote);
    else if (r.status)
        snprintf(msg, sizeof msg, "tcp: %s refused the request: %s", c->ep->peer,
                 tcp_errname(r.status));
    conn_complete_head(c, d, r.status, msg);
    return 0;
}

/* recv() result: 1 = data, 0 = stop reading. */
static int conn_recv_result(tcp_conn *c, done_list *d, ssize_t n)
{
    if (n > 0) {
        c->last_progress_ms = tern_kit_now_ms();
        return 1;
    }
    if (n == 0) {
        conn_break(c, d, TERN_ERR_CLOSED, "the peer closed the connection");
        return 0;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return 0;
    char why[128];
    snprintf(why, sizeof why, "receive failed: %s", strerror(errno));
    conn_break(c, d, TERN_ERR_CLOSED, why);
    return 0;
}

/* Nothing is expected: data is a protocol error, EOF closes quietly. */
static void conn_probe(tcp_conn *c, done_list *d)
{
    uint8_t b;
    ssize_t n = c->ep->ctx->sys.recv(c->io.fd, &b, 1, MSG_DONTWAIT);
    if (n > 0)
        conn_break(c, d, TERN_ERR_PROTOCOL, "the peer sent data nobody asked for");
    else
        conn_recv_result(c, d, n);
}

/* The reply to a READ that is the only request due, and its data in the
 * same call: straight into the slice's memory after the header.  Nothing
 * else can follow a refused READ's header; bytes that do are a protocol
 * error.  1: go on reading, 0: stop (caller holds mu). */
static int conn_recv_lone_read(tcp_conn *c, done_list *d)
{
    tern_slice *s = c->ring[c->head].s;
    /* a small first part: the rest of a large READ comes as before */
    struct iovec iov[2] = {{c->rxbuf, TCP_REP_SIZE},
                           {s->local, s->length < LONE_MAX ? s->length : LONE_MAX}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t n = c->ep->ctx->sys.recvmsg(c->io.fd, &mh, MSG_DONTWAIT);
    if (!conn_recv_result(c, d, n))
        return 0;
    if ((size_t)n < TCP_REP_SIZE) {
        c->rx_have = (size_t)n;
        return 1;
    }
    int rc = conn_take_reply(c, d, c->rxbuf);
    if (rc < 0 || (rc == 0 && (size_t)n > TCP_REP_SIZE)) {
        conn_break(c, d, TERN_ERR_PROTOCOL, "malformed or out-of-order reply");
        return 0;
    }
    if (rc == 1) {
        c->rx_payload = 1;
        c->rx_off = (uint64_t)n - TCP_REP_SIZE;
        if (c->rx_off == s->length) {
            c->rx_payload = 0;
            conn_complete_head(c, d, 0, NULL);
        }
    }
    return 1;
}

/* Read replies until the socket is empty or nothing more is expected
 * (caller holds mu).  With nothing expected, a socket this call read from
 * is not probed again: epoll reports it again if anything is left. */
static void conn_recv(tcp_conn *c, done_list *d)
{
    int got = 0;
    while (c->io.fd >= 0) {
        if (c->rx_payload) {
            tern_slice *s = c->ring[c->head].s;
            ssize_t n = c->ep->ctx->sys.recv(c->io.fd, (char *)s->local + c->rx_off,
                                             s->length - c->rx_off, MSG_DONTWAIT);
            if (!conn_recv_result(c, d, n))
                return;
            got = 1;
            c->rx_off += (uint64_t)n;
            tcp_rcvlowat(&c->io, &c->lowat, s->length - c->rx_off);
            if (c->rx_off == s->length) {
                c->rx_payload = 0;
                conn_complete_head(c, d, 0, NULL);
            }
            continue;
        }
        /* Replies to a run of WRITEs carry no data: read them together. */
        size_t k = 0;
        while (k < c->nsent && k < sizeof c->rxbuf / TCP_REP_SIZE &&
               c->ring[ring_at(c, k)].s->opcode == TERN_OP_WRITE)
            k++;
        if (k == 0 && c->nsent > 0)
            k = 1; /* a READ: its header alone */
        if (k == 0) {
            if (!got)
                conn_probe(c, d);
            return;
        }
        if (k == 1 && c->nsent == 1 && c->rx_have == 0 &&
            c->ring[c->head].s->opcode == TERN_OP_READ) {
            if (!conn_recv_lone_read(c, d))
                return;
            got = 1;
            continue;
        }
        ssize_t n = c->ep->ctx->sys.recv(c->io.fd, c->rxbuf + c->rx_have,
                                         k * TCP_REP_SIZE - c->rx_have, MSG_DONTWAIT);
        if (!conn_recv_result(c, d, n))
            return;
        got = 1;
        c->rx_have += (size_t)n;
        size_t off = 0;
        while (c->rx_have - off >= TCP_REP_SIZE) {
            int rc = conn_take_reply(c, d, c->rxbuf + off);
            off += TCP_REP_SIZE;
            if (rc < 0) {
                conn_break(c, d, TERN_ERR_PROTOCOL, "malformed or out-of-order reply");
                return;
            }
            if (rc == 1) {
                c->rx_payload = 1;
                c->rx_off = 0;
                break;
            }
        }
        memmove(c->rxbuf, c->rxbuf + off, c->rx_have - off);
        c->rx_have -= off;
    }
}

static void conn_on_event(tcp_io *io, uint32_t ev)
{
    tcp_conn *c = (tcp_conn *)io;
    done_list d = {0};
    pthread_mutex_lock(&c->mu);
    /* EPOLLERR with zerocopy on may be only its completion reports */
    if (c->io.fd >= 0 && (ev & EPOLLERR) && c->ep->ctx->opt_zerocopy_min > 0 &&
        !tcp_zc_drain(c->ep->ctx, c->io.fd))
        ev &= ~(uint32_t)EPOLLERR;
    if (c->io.fd >= 0 && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
        conn_send(c, &d, UINT64_MAX);
    int gone = ev & (EPOLLERR | EPOLLHUP | EPOLLRDHUP);
    if (c->io.fd >= 0 && (ev & EPOLLIN) && c->awaiting && !gone)
        c->reader = TCP_READER_WAITER; /* a submitter waits on the socket for this: it reads */
    else if (c->io.fd >= 0 && ((ev & EPOLLIN) || gone))
        conn_recv(c, &d);
    conn_arm(c);
    pthread_mutex_unlock(&c->mu);
    done_flush(c->ep->ctx, &d);
}

static void conn_on_tick(tcp_io *io, uint64_t now)
{
    tcp_conn *c = (tcp_conn *)io;
    tcp_ctx *ctx = c->ep->ctx;
    done_list d = {0};
    pthread_mutex_lock(&c->mu);
    if (c->io.fd >= 0 && c->count &&
        tcp_since(now, c->last_progress_ms) > (uint64_t)ctx->io_timeout_ms) {
        char why[96];
        snprintf(why, sizeof why, "no progress for %d ms (io_timeout)", ctx->io_timeout_ms);
        c->fresh = 0; /* a stalled peer may have applied something: no resend */
        conn_break(c, &d, TERN_ERR_TIMEOUT, why);
    } else if (c->io.fd >= 0 && c->idx > 0 && !c->count && ctx->opt_idle_close_ms > 0 &&
               tcp_since(now, c->last_used_ms) > (uint64_t)ctx->opt_idle_close_ms) {
        conn_close_fd(c); /* idle extra connection: the pool shrinks again */
        conn_reset_stream(c);
        atomic_store(&c->state, TCP_C_OFF);
    }
    pthread_mutex_unlock(&c->mu);
    done_flush(ctx, &d);
}

/* Caller holds mu; fd is connected. */
static void conn_up(tcp_conn *c, int fd)
{
    c->io.fd = fd;
    c->fresh = 1;
    c->lowat = 1; /* a new socket's */
    conn_reset_stream(c);
    c->last_progress_ms = c->last_used_ms = tern_kit_now_ms();
    atomic_fetch_add(&c->io.w->nconn, 1);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->io};
    epoll_ctl(c->io.w->epfd, EPOLL_CTL_ADD, fd, &ev);
    atomic_store(&c->state, TCP_C_UP);
}

/* On the connection's I/O thread: open the socket (the connect and the
 * authentication take a round trip or three; a dead peer's refusal is
 * immediate), then send what is queued. */
static void conn_connect_cmd(void *arg)
{
    tcp_conn *c = arg;
    char err[256];
    int fd = -1;
    pthread_mutex_lock(&c->mu);
    int skip = atomic_load(&c->closed) || c->io.fd >= 0 ||
               atomic_load(&c->state) != TCP_C_CONNECTING;
    pthread_mutex_unlock(&c->mu);
    if (skip) {
        atomic_store(&c->ep->growing, 0);
        return;
    }
    int rc = sock_connect(c->ep, &fd, err, sizeof err);
    done_list d = {0};
    pthread_mutex_lock(&c->mu);
    if (!rc && atomic_load(&c->closed)) {
        close(fd);
    } else if (rc) {
        ring_fail_all(c, &d, rc == TERN_ERR_AUTH ? TERN_ERR_AUTH : TERN_ERR_CONNECT, err);
        atomic_store(&c->state, TCP_C_OFF);
    } else {
        conn_up(c, fd);
        conn_send(c, &d, UINT64_MAX);
        conn_arm(c);
    }
    pthread_mutex_unlock(&c->mu);
    atomic_store(&c->ep->growing, 0);
    done_flush(c->ep->ctx, &d);
}

static void conn_kick(tcp_conn *c)
{
    if (tcp_worker_post(c->io.w, conn_connect_cmd, c) != 0)
        tcp_log(c->ep->ctx, TERN_LOG_ERROR, "tcp: out of memory starting a connection to %s",
                c->ep->peer);
}

/* ---- endpoint operations ---------------------------------------------------- */

static int ep_resolve(tcp_ep *ep, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%u", ep->port);
    int g = getaddrinfo(ep->host, port, &hints, &ai);
    if (g != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_CONNECT,
                             "tcp: cannot resolve the peer's data host '%s': %s (check the "
                             "peer's transports.tcp.bind / server name)",
                             ep->host, gai_strerror(g));
    memcpy(&ep->addr, ai->ai_addr, ai->ai_addrlen);
    ep->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

static void ep_free(tcp_ep *ep)
{
    for (int i = 0; i < ep->nconn; i++) {
        pthread_mutex_destroy(&ep->conns[i].mu);
        free(ep->conns[i].ring);
    }
    free(ep->conns);
    free(ep);
}

/* The peer device's address: "host@<device>" and "port@<device>" of the
 * peer's blob when it publishes several NICs (the device is what follows
 * the last '@' of the peer NIC path), else its one "host" and "port".
 * A device address that is one of our own while the peer's main one is
 * not (a private bridge such as docker0 with the same address on every
 * host) would reach this host, maybe another engine on it: refused with
 * TERN_ERR_CONNECT, which pauses that pair (docs/topology.md). */
static int ep_peer_address(tcp_ctx *ctx, const tern_ep_params *p, const char **host,
                           uint64_t *port, char *err, size_t errlen)
{
    const char *at = p->peer_nic_path ? strrchr(p->peer_nic_path, '@') : NULL;
    const char *main_host = ctx->host.desc_get_str(p->peer_segment, "host");
    if (at && strlen(at + 1) < TERN_NAME_MAX) {
        char key[TERN_NAME_MAX + 8];
        snprintf(key, sizeof key, "host@%s", at + 1);
        *host = ctx->host.desc_get_str(p->peer_segment, key);
        snprintf(key, sizeof key, "port@%s", at + 1);
        if (*host && ctx->host.desc_get_u64(p->peer_segment, key, port) == 0) {
            if (main_host && strcmp(*host, main_host) != 0 && tcp_addr_is_local(*host) &&
                !tcp_addr_is_local(main_host))
                return tern_kit_errf(err, errlen, TERN_ERR_CONNECT,
                                     "tcp: device %s of %s has address %s, one of this host's own "
                                     "(a bridge with the same address on both hosts?): not used",
                                     at + 1, p->peer_name ? p->peer_name : "?", *host);
            return 0;
        }
    }
    *host = main_host;
    return ctx->host.desc_get_u64(p->peer_segment, "port", port);
}

int tcp_ep_open(void *vctx, const tern_ep_params *p, void **out, char *err, size_t errlen)
{
    tcp_ctx *ctx = vctx;
    if (!ctx || !p || !out || !p->peer_segment)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL, "tcp ep_open: missing parameters");
    const char *host;
    uint64_t port = 0;
    int rc = ep_peer_address(ctx, p, &host, &port, err, errlen);
    if (rc == TERN_ERR_CONNECT)
        return rc;
    if (!host || !*host || strlen(host) >= TCP_HOST_MAX || rc != 0 || port == 0 || port > 65535)
        return tern_kit_errf(
            err, errlen, TERN_ERR_PROTOCOL,
            "tcp ep_open: the segment of %s has no valid tcp address blob "
            "(need {\"host\": string, \"port\": 1..65535}; got host %s, port %" PRIu64 ")",
            p->peer_name ? p->peer_name : "?", host ? host : "(none)", port);
    tcp_ep *ep = calloc(1, sizeof *ep);
    if (!ep)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "tcp ep_open: out of memory");
    ep->ctx = ctx;
    snprintf(ep->host, sizeof ep->host, "%s", host);
    ep->port = (uint16_t)port;
    snprintf(ep->peer, sizeof ep->peer, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
             ep->port);
    snprintf(ep->segment, sizeof ep->segment, "%s", p->peer_name ? p->peer_name : "");
    ep->nconn = ctx->opt_nconn;
    ep->conns = calloc((size_t)ep->nconn, sizeof *ep->conns);
    if (!ep->conns) {
        free(ep);
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "tcp ep_open: out of memory");
    }
    /* The connections of one peer go to different I/O threads, so one large
     * transfer is copied on several cores. */
    unsigned base = atomic_fetch_add(&ctx->next_worker, 1);
    for (int i = 0; i < ep->nconn; i++) {
        tcp_conn *c = &ep->conns[i];
        c->ep = ep;
        c->idx = i;
        c->io.fd = -1;
        c->io.w = &ctx->workers[(base + (unsigned)i) % (unsigned)ctx->nworkers];
        c->io.on_event = conn_on_event;
        c->io.on_tick = conn_on_tick;
        pthread_mutex_init(&c->mu, NULL);
    }
    rc = ep_resolve(ep, err, errlen);
    if (rc) {
        ep_free(ep);
        return rc;
    }
    pthread_mutex_lock(&ctx->ep_mu);
    ep->next = ctx->eps;
    ctx->eps = ep;
    pthread_mutex_unlock(&ctx->ep_mu);
    *out = ep;
    return 0;
}

static void conn_list_cmd(void *arg)
{
    tcp_conn *c = arg;
    if (!atomic_load(&c->closed))
        tcp_io_list(&c->io);
}

/* On the connection's I/O thread, after every event and command that
 * could still name it: out of the list; the last one frees the endpoint. */
static void conn_unlist_cmd(void *arg)
{
    tcp_conn *c = arg;
    tcp_worker *w = c->io.w;
    if (c->io.listed) { /* not the grave: the endpoint owns the memory */
        if (c->io.prev)
            c->io.prev->next = c->io.next;
        else
            w->list = c->io.next;
        if (c->io.next)
            c->io.next->prev = c->io.prev;
        c->io.listed = 0;
    }
    tcp_ep *ep = c->ep;
    if (atomic_fetch_sub(&ep->refs, 1) == 1)
        ep_free(ep);
}

int tcp_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen)
{
    tcp_ep *ep = vep;
    (void)peer; /* no handshake: the segment blob had everything */
    if (!ep)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL, "tcp ep_connect: NULL endpoint");
    if (ep->connected)
        return 0;
    int fd;
    int rc = sock_connect(ep, &fd, err, errlen);
    if (rc)
        return rc;
    for (int i = 0; i < ep->nconn; i++)
        if (tcp_worker_post(ep->conns[i].io.w, conn_list_cmd, &ep->conns[i]) != 0) {
            close(fd);
            return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "tcp ep_connect: out of memory");
        }
    tcp_conn *c = &ep->conns[0];
    pthread_mutex_lock(&c->mu);
    conn_up(c, fd);
    pthread_mutex_unlock(&c->mu);
    ep->connected = 1;
    return 0;
}

/* A NIC pair that stalled (the core saw nothing come back while the
 * peer's other pairs moved; a link that went down resets nothing): every
 * slice on the endpoint fails now with TERN_ERR_TIMEOUT and the core sends
 * it over another pair.  The sockets close with SO_LINGER 0, a reset: no
 * byte still queued in them can reach the peer later, after the slice was
 * sent again and its request completed.  The endpoint stays usable: the
 * next slice on it connects again. */
int tcp_ep_reset(void *vep)
{
    tcp_ep *ep = vep;
    if (!ep)
        return TERN_ERR_INVAL;
    done_list d = {0};
    for (int i = 0; i < ep->nconn; i++) {
        tcp_conn *c = &ep->conns[i];
        pthread_mutex_lock(&c->mu);
        if (!atomic_load(&c->closed)) {
            if (c->io.fd >= 0) {
                struct linger lg = {1, 0};
                setsockopt(c->io.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
                conn_close_fd(c);
                atomic_fetch_add(&ep->ctx->st_conn_broken, 1);
            }
            conn_reset_stream(c);
            ring_fail_all(c, &d, TERN_ERR_TIMEOUT,
                          "tcp: no progress on this NIC pair while others moved (reset)");
            atomic_store(&c->state, TCP_C_OFF);
        }
        pthread_mutex_unlock(&c->mu);
    }
    done_flush(ep->ctx, &d);
    return 0;
}

/* Callable from any thread, an I/O thread's complete() included: the
 * sockets close and the slices fail here; the memory goes once each I/O
 * thread has let go of its connection (conn_unlist_cmd). */
void tcp_ep_close(void *vep)
{
    tcp_ep *ep = vep;
    if (!ep)
        return;
    tcp_ctx *ctx = ep->ctx;
    pthread_mutex_lock(&ctx->ep_mu);
    for (tcp_ep **pp = &ctx->eps; *pp; pp = &(*pp)->next) {
        if (*pp == ep) {
            *pp = ep->next;
            break;
        }
    }
    pthread_mutex_unlock(&ctx->ep_mu);
    done_list d = {0};
    for (int i = 0; i < ep->nconn; i++) {
        tcp_conn *c = &ep->conns[i];
        pthread_mutex_lock(&c->mu);
        atomic_store(&c->closed, 1);
        conn_close_fd(c);
        conn_reset_stream(c);
        ring_fail_all(c, &d, TERN_ERR_CLOSED, "tcp: the endpoint was closed");
        atomic_store(&c->state, TCP_C_OFF);
        pthread_mutex_unlock(&c->mu);
    }
    done_flush(ctx, &d);
    /* One reference per connection, plus ours while we post: an I/O thread
     * may run its command (and drop the last of the others) before this
     * loop has read ep->nconn again. */
    int n = ep->nconn;
    atomic_store(&ep->refs, n + 1);
    for (int i = 0; i < n; i++)
        while (tcp_worker_post(ep->conns[i].io.w, conn_unlist_cmd, &ep->conns[i]) != 0)
            sched_yield(); /* out of memory: a command is 40 bytes, wait for one */
    if (atomic_fetch_sub(&ep->refs, 1) == 1)
        ep_free(ep);
}

/* The least loaded open connection; opens another while that one has more
 * than a slice queued (one at a time per peer, up to `connections`). */
static tcp_conn *ep_pick(tcp_ep *ep)
{
    unsigned start = atomic_fetch_add(&ep->rr, 1);
    tcp_conn *best = NULL, *off = NULL, *pending = NULL;
    uint64_t best_load = UINT64_MAX;
    for (int i = 0; i < ep->nconn; i++) {
        tcp_conn *c = &ep->conns[(start + (unsigned)i) % (unsigned)ep->nconn];
        int st = atomic_load(&c->state);
        uint64_t l = atomic_load(&c->load);
        if (st == TCP_C_UP && l < best_load) {
            best = c;
            best_load = l;
        } else if (st == TCP_C_OFF && (!off || c->idx < off->idx)) {
            off = c;
        } else if (st == TCP_C_CONNECTING) {
            pending = c;
        }
    }
    if (best && (!off || best_load <= ep->ctx->opt_slice_size + TCP_REQ_SIZE))
        return best;
    if (!best && pending)
        return pending;
    int zero = 0;
    if (off && atomic_compare_exchange_strong(&ep->growing, &zero, 1)) {
        int st = TCP_C_OFF;
        if (atomic_compare_exchange_strong(&off->state, &st, TCP_C_CONNECTING))
            conn_kick(off);
        else
            atomic_store(&ep->growing, 0);
        if (!best)
            return off;
    }
    return best ? best : pending ? pending : off ? off : &ep->conns[0];
}

/* A submit onto connection c (caller holds mu, the slice is in the ring):
 * learn whether the caller pipelines.  A request queued while a probe is
 * in flight says it does; LONE_RESUME submits in a row that find nothing
 * else in flight say it waits for each one again. */
static void lone_learn(tcp_conn *c)
{
    if (c->lone == TCP_LONE_PROBE && c->count > 1) {
        c->lone = TCP_LONE_PIPED;
        c->idle_run = 0;
    } else if (c->lone == TCP_LONE_PIPED) {
        c->idle_run = c->count == 1 ? c->idle_run + 1 : 0;
        if (c->idle_run >= LONE_RESUME)
            c->lone = TCP_LONE_WAIT;
    }
}

/* Should submit() wait for the reply of this lone request (caller holds
 * mu)?  Not while the caller pipelines, and not for one in LONE_PROBE: that
 * one is the probe (TCP_LONE_WAIT -> TCP_LONE_PROBE). */
static int lone_wait(tcp_conn *c, uint64_t id)
{
    if (c->lone == TCP_LONE_PIPED)
        return 0;
    if (++c->lone_n % LONE_PROBE == 0) {
        c->lone = TCP_LONE_PROBE;
        c->probe_id = id;
        return 0;
    }
    return 1;
}

/* Queue one slice on c and send it now when the socket is free.  With
 * lone set, a small request that went out whole onto an otherwise idle
 * connection is noted there for conn_await. */
static void conn_enqueue(tcp_conn *c, tern_slice *s, done_list *d, lone_req *lone)
{
    atomic_fetch_add(&c->load, TCP_REQ_SIZE + s->length);
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->closed)) {
        slice_finish(c, d, s, TERN_ERR_CLOSED, "tcp: the endpoint was closed");
        pthread_mutex_unlock(&c->mu);
        return;
    }
    if (c->count == c->cap && ring_grow(c) != 0) {
        slice_finish(c, d, s, TERN_ERR_NOMEM, "tcp: out of memory queueing a slice");
        pthread_mutex_unlock(&c->mu);
        return;
    }
    tcp_entry *e = &c->ring[ring_at(c, c->count)];
    e->s = s;
    e->id = c->next_id++;
    tcp_req q = {.magic = TCP_REQ_MAGIC, .version = TCP_WIRE_VERSION,
                 .opcode = (uint8_t)s->opcode, .id = e->id, .addr = s->remote,
                 .length = s->length};
    tcp_req_encode(e->hdr, &q);
    if (c->count == 0)
        c->last_progress_ms = tern_kit_now_ms();
    c->count++;
    c->last_used_ms = c->last_progress_ms;
    lone_learn(c);
    int st = atomic_load(&c->state);
    if (st == TCP_C_UP && c->want_out) {
        c->reader = TCP_READER_IO;
        conn_arm(c);
    } else if (st == TCP_C_UP) {
        conn_send(c, d, SUBMIT_INLINE_MAX);
        if (lone && c->count == 1 && c->nsent == 1 && s->length <= LONE_MAX &&
            c->ep->ctx->opt_reply_wait_us > 0 && lone_wait(c, e->id)) {
            *lone = (lone_req){.c = c, .id = e->id, .fd = c->io.fd};
            c->awaiting++;
        } else {
            c->reader = TCP_READER_IO; /* replies no submitter waits for: the I/O thread's */
        }
        conn_arm(c);
    } else if (st == TCP_C_OFF) {
        atomic_store(&c->state, TCP_C_CONNECTING);
        c->resent = 0;
        conn_kick(c);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Is the lone request still in flight on the socket it went out on?
 * (caller holds mu; ids only grow, and the oldest request is the head) */
static int lone_pending(const tcp_conn *c, const lone_req *l)
{
    return c->io.fd == l->fd && c->count && c->ring[c->head].id == l->id;
}

/* On the caller's thread, right after submit() sent a lone request: wait
 * up to reply_wait_us for its reply on the socket and read it here.  A
 * caller with one request in flight waits for it next anyway; reading it
 * here takes the I/O thread's wake and its hand-over to the waiting thread
 * out of every round trip.
 *
 * Who reads (under mu, tcp_reader): while `awaiting`, an I/O thread that
 * sees a reply first leaves it in the socket and hands the replies to the
 * waiters (TCP_READER_WAITER; conn_arm: EPOLLIN off), so level-triggered
 * epoll does not report it again and again; a waiter that read its reply
 * itself leaves them there, so the next lone request needs no epoll_ctl
 * either.  As soon as a reply
 * is due that no waiter waits for (a waiter gave up at its deadline, a
 * request that is not lone was queued), EPOLLIN is armed again and the
 * I/O thread reads as usual: a reply is never left unread.  A connection
 * that breaks meanwhile is the I/O thread's to finish (EPOLLRDHUP, errors);
 * the waiter then returns at the latest at its deadline.  The core holds
 * the endpoint for as long as submit() runs, so c stays valid; the slice
 * is looked at only while it is in the ring (under mu), by its id. */
static void conn_await(tcp_ctx *ctx, const lone_req *l)
{
    tcp_conn *c = l->c;
    int64_t end = (int64_t)tern_kit_now_ns() + (int64_t)ctx->opt_reply_wait_us * 1000;
    for (int over = 0; !over;) {
        int64_t left = end - (int64_t)tern_kit_now_ns();
        struct timespec ts = {(time_t)(left / 1000000000), (long)(left % 1000000000)};
        struct pollfd pf = {l->fd, POLLIN, 0};
        int k = left > 0 ? ctx->sys.ppoll(&pf, 1, &ts, NULL) : 0;
        if (k < 0 && errno == EINTR)
            continue;
        if (k > 0 && (pf.revents & POLLERR) && ctx->opt_zerocopy_min > 0 &&
            !(pf.revents & POLLIN) && !tcp_zc_drain(ctx, l->fd))
            continue; /* only zerocopy reports: wait on */
        done_list d = {0};
        pthread_mutex_lock(&c->mu);
        int mine = lone_pending(c, l);
        if (mine && k > 0) {
            conn_recv(c, &d);
            mine = lone_pending(c, l);
            if (!mine && c->io.fd == l->fd)
                c->reader = TCP_READER_WAITER; /* read here: the next lone one is read here too */
        }
        over = !mine || k <= 0;
        if (over) {
            c->awaiting--;
            if (mine)
                c->reader = TCP_READER_IO; /* not in time: the I/O thread reads it */
        }
        conn_arm(c);
        pthread_mutex_unlock(&c->mu);
        done_flush(ctx, &d);
    }
}

int tcp_submit(void *vep, tern_slice *const *slices, int n)
{
    tcp_ep *ep = vep;
    if (!ep || !slices || n < 0)
        return TERN_ERR_INVAL;
    if (!ep->connected)
        return TERN_ERR_CONNECT;
    done_list d = {0};
    lone_req lone = {0};
    for (int i = 0; i < n; i++) {
        tern_slice *s = slices[i];
        s->status = 0;
        s->transferred = 0;
        s->errmsg[0] = 0;
        if ((s->opcode != TERN_OP_READ && s->opcode != TERN_OP_WRITE) || !s->local || !s->length) {
            slice_finish(NULL, &d, s, TERN_ERR_INVAL,
                         "tcp: slice with a bad opcode, NULL local address or zero length");
            continue;
        }
        conn_enqueue(ep_pick(ep), s, &d, n == 1 ? &lone : NULL);
    }
    done_flush(ep->ctx, &d);
    if (lone.c)
        conn_await(ep->ctx, &lone);
    return n;
}
