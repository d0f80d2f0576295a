/* transports/tcp/tcp_client.c: the initiator side of the TCP transport.
 *
 * An endpoint is a pool of persistent connections to one peer's data port
 * (from the peer's segment blob {"host", "port"}).  Each connection has one
 * thread and a non-blocking socket; its slices sit in a ring in request
 * order: [head .. head+nsent) are fully sent and wait for their reply, the
 * rest are still to be sent (the first maybe partly, send_off bytes).  The
 * thread sends as much as the socket takes (sendmsg gathers many headers
 * and payloads straight from registered memory), reads replies as they
 * come (many WRITE replies per recv, READ data straight into registered
 * memory), and sleeps in poll() on the socket and an eventfd that submit()
 * rings only when the thread is asleep.
 *
 * Failure: EOF, a socket error, a malformed reply or no progress for
 * io_timeout ms while requests are outstanding break the connection: every
 * slice on it completes with an error and a message, the socket is closed,
 * and the next slice queued on it opens a new one.  Idle connections stay
 * open (a peer closing one is noticed by poll and it is re-opened on use),
 * so a burst after an idle gap goes out on live connections. */
#define _GNU_SOURCE
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

#define SEND_IOV_MAX 64
#define SEND_BYTES_MAX (16u << 20)

typedef struct done_list {
    tern_slice *head, *tail;
    int n;
} done_list;

static size_t ring_at(const tcp_conn *c, size_t j) { return (c->head + j) & (c->cap - 1); }

static uint64_t wire_bytes(const tern_slice *s)
{
    return TCP_REQ_SIZE + (s->opcode == TERN_WRITE ? s->length : 0);
}

static void done_add(done_list *d, tern_slice *s)
{
    s->plugin[0] = NULL;
    if (d->tail)
        d->tail->plugin[0] = s;
    else
        d->head = s;
    d->tail = s;
    d->n++;
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

/* Fail every slice on the connection and close its socket. */
static void conn_break(tcp_conn *c, done_list *d, int code, const char *why)
{
    char msg[512];
    tcp_ep *ep = c->ep;
    snprintf(msg, sizeof msg, "tcp: connection %d to %s broke: %s (%zu requests in flight)",
             c->idx, ep->peer, why, c->count);
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
        atomic_fetch_add(&ep->ctx->st_conn_broken, 1);
        tcp_log(ep->ctx, c->count ? TERN_LOG_WARN : TERN_LOG_DEBUG, "%s", msg);
    }
    while (c->count) {
        slice_finish(c, d, c->ring[c->head].s, code, msg);
        c->head = (c->head + 1) & (c->cap - 1);
        c->count--;
    }
    c->head = c->nsent = 0;
    c->send_off = 0;
    c->rx_have = 0;
    c->rx_payload = 0;
    c->rx_off = 0;
    c->can_send = c->can_recv = 0;
}

/* Connect with a deadline; the socket stays non-blocking. */
static int sock_connect(tcp_ep *ep, int *out, char *err, size_t errlen)
{
    tcp_ctx *ctx = ep->ctx;
    int fd = socket(ep->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return tcp_errf(err, errlen, TERN_ERR_IO, "tcp: socket() for %s: %s", ep->peer,
                        strerror(errno));
    tcp_sock_tune(ctx, fd);
    int rc = connect(fd, (struct sockaddr *)&ep->addr, ep->addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
        struct pollfd pf = {fd, POLLOUT, 0};
        int n;
        do
            n = poll(&pf, 1, ctx->io_timeout_ms);
        while (n < 0 && errno == EINTR);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (n == 0) {
            close(fd);
            return tcp_errf(err, errlen, TERN_ERR_CONNECT,
                            "tcp: connect to data port %s timed out after %d ms (is the "
                            "target up and reachable?)", ep->peer, ctx->io_timeout_ms);
        }
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        errno = soerr;
        rc = soerr ? -1 : 0;
    }
    if (rc != 0) {
        int e = errno;
        close(fd);
        return tcp_errf(err, errlen, TERN_ERR_CONNECT,
                        "tcp: connect to data port %s failed: %s (is the target running and "
                        "is its advertised tcp host/port reachable from here?)", ep->peer,
                        strerror(e));
    }
    rc = tcp_auth_client(ctx, fd, ep->peer, err, errlen); /* tcp_auth.h (hardening) */
    if (rc) {
        close(fd);
        return rc;
    }
    atomic_fetch_add(&ctx->st_connects, 1);
    *out = fd;
    return 0;
}

static void conn_reconnect(tcp_conn *c, done_list *d)
{
    char err[256];
    int fd;
    if (sock_connect(c->ep, &fd, err, sizeof err) != 0) {
        while (c->count) {
            slice_finish(c, d, c->ring[c->head].s, TERN_ERR_CONNECT, err);
            c->head = (c->head + 1) & (c->cap - 1);
            c->count--;
        }
        c->head = c->nsent = 0;
        c->send_off = 0;
        return;
    }
    c->fd = fd;
    c->lowat = 1;
    c->can_send = 1;
    c->can_recv = 0;
    c->last_progress_ms = tcp_now_ms();
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

/* Move newly submitted slices into the ring.  Returns 1 when asked to stop. */
static int conn_take_pending(tcp_conn *c, done_list *d)
{
    pthread_mutex_lock(&c->mu);
    tern_slice *s = c->pend_head;
    c->pend_head = c->pend_tail = NULL;
    int stop = c->stop;
    pthread_mutex_unlock(&c->mu);
    if (s && c->count == 0)
        c->last_progress_ms = tcp_now_ms();
    while (s) {
        tern_slice *next = s->plugin[0];
        if (c->count == c->cap && ring_grow(c) != 0) {
            slice_finish(c, d, s, TERN_ERR_NOMEM, "tcp: out of memory queueing a slice");
        } else {
            tcp_entry *e = &c->ring[ring_at(c, c->count)];
            e->s = s;
            e->id = c->next_id++;
            tcp_req q = {.magic = TCP_REQ_MAGIC, .version = TCP_WIRE_VERSION,
                         .opcode = (uint8_t)s->opcode, .id = e->id, .addr = s->remote,
                         .length = s->length};
            tcp_req_encode(e->hdr, &q);
            c->count++;
        }
        s = next;
    }
    return stop;
}

/* Send as much as the socket takes. */
static void conn_send(tcp_conn *c, done_list *d)
{
    while (c->fd >= 0 && c->can_send && c->nsent < c->count) {
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
            if (e->s->opcode == TERN_WRITE) {
                uint64_t poff = off > TCP_REQ_SIZE ? off - TCP_REQ_SIZE : 0;
                iov[niov++] = (struct iovec){(char *)e->s->local + poff, e->s->length - poff};
                total += e->s->length - poff;
            }
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        ssize_t n = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                c->can_send = 0;
                return;
            }
            char why[128];
            snprintf(why, sizeof why, "send failed: %s", strerror(errno));
            conn_break(c, d, TERN_ERR_CLOSED, why);
            return;
        }
        c->last_progress_ms = tcp_now_ms();
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

static void conn_complete_head(tcp_conn *c, done_list *d, int status, const char *msg)
{
    tern_slice *s = c->ring[c->head].s;
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
    if (r.status == 0 && e->s->opcode == TERN_READ)
        return 1;
    char msg[512] = "";
    if (r.status == TERN_ERR_RANGE)
        snprintf(msg, sizeof msg, "tcp: %s refused %s of %" PRIu64 " B at 0x%" PRIx64
                 ": not inside a buffer registered there", c->ep->peer,
                 e->s->opcode == TERN_WRITE ? "WRITE" : "READ", e->s->length, e->s->remote);
    else if (r.status)
        snprintf(msg, sizeof msg, "tcp: %s refused the request: %s", c->ep->peer,
                 tcp_errname(r.status));
    conn_complete_head(c, d, r.status, msg);
    return 0;
}

/* recv() result handling shared by the paths below: 1 = data, 0 = stop. */
static int conn_recv_result(tcp_conn *c, done_list *d, ssize_t n)
{
    if (n > 0) {
        c->last_progress_ms = tcp_now_ms();
        return 1;
    }
    if (n == 0) {
        conn_break(c, d, TERN_ERR_CLOSED, "the peer closed the connection");
        return 0;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        if (errno != EINTR)
            c->can_recv = 0;
        return 0;
    }
    char why[128];
    snprintf(why, sizeof why, "receive failed: %s", strerror(errno));
    conn_break(c, d, TERN_ERR_CLOSED, why);
    return 0;
}

/* Nothing is expected: data is a protocol error, EOF closes quietly. */
static void conn_probe(tcp_conn *c, done_list *d)
{
    uint8_t b;
    ssize_t n = recv(c->fd, &b, 1, MSG_DONTWAIT);
    if (n > 0)
        conn_break(c, d, TERN_ERR_PROTOCOL, "the peer sent data nobody asked for");
    else
        conn_recv_result(c, d, n);
}

static void conn_recv_payload(tcp_conn *c, done_list *d)
{
    tern_slice *s = c->ring[c->head].s;
    ssize_t n = recv(c->fd, (char *)s->local + c->rx_off, s->length - c->rx_off, MSG_DONTWAIT);
    if (!conn_recv_result(c, d, n))
        return;
    c->rx_off += (uint64_t)n;
    if (c->rx_off == s->length) {
        c->rx_payload = 0;
        conn_complete_head(c, d, 0, NULL);
    }
}

static void conn_recv(tcp_conn *c, done_list *d)
{
    while (c->fd >= 0 && c->can_recv) {
        if (c->rx_payload) {
            conn_recv_payload(c, d);
            continue;
        }
        /* Replies to a run of WRITEs carry no data: read them together. */
        size_t k = 0;
        while (k < c->nsent && k < sizeof c->rxbuf / TCP_REP_SIZE &&
               c->ring[ring_at(c, k)].s->opcode == TERN_WRITE)
            k++;
        if (k == 0 && c->nsent > 0)
            k = 1; /* a READ: its header alone */
        if (k == 0) {
            conn_probe(c, d);
            return;
        }
        ssize_t n = recv(c->fd, c->rxbuf + c->rx_have, k * TCP_REP_SIZE - c->rx_have,
                         MSG_DONTWAIT);
        if (!conn_recv_result(c, d, n))
            return;
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

/* While a READ's data is arriving, wake only when a good part of the rest
 * is there (SO_RCVLOWAT, honoured by poll for TCP) rather than once per
 * segment; back to 1 byte for reply headers.  Changed only when going to
 * sleep, so a busy connection makes no extra system calls. */
#define RX_LOWAT_MAX (256 * 1024)
static void conn_set_lowat(tcp_conn *c)
{
    int want = 1;
    if (c->rx_payload) {
        uint64_t rest = c->ring[c->head].s->length - c->rx_off;
        want = rest < RX_LOWAT_MAX ? (int)rest : RX_LOWAT_MAX;
    }
    if (want != c->lowat &&
        setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0)
        c->lowat = want;
}

/* Sleep until the socket or a submit/stop needs us. */
static void conn_wait(tcp_conn *c)
{
    struct pollfd pf[2] = {{c->efd, POLLIN, 0}, {c->fd, POLLIN, 0}};
    int nfd = c->fd >= 0 ? 2 : 1;
    if (c->nsent < c->count && !c->can_send)
        pf[1].events |= POLLOUT;
    int tmo = -1;
    if (c->fd >= 0)
        conn_set_lowat(c);
    if (c->count && c->fd >= 0) {
        uint64_t idle = tcp_now_ms() - c->last_progress_ms;
        uint64_t lim = (uint64_t)c->ep->ctx->io_timeout_ms;
        tmo = idle >= lim ? 0 : (int)(lim - idle) + 1;
    }
    pthread_mutex_lock(&c->mu);
    if (c->pend_head || c->stop) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->sleeping = 1;
    pthread_mutex_unlock(&c->mu);
    int n = poll(pf, (nfds_t)nfd, tmo);
    pthread_mutex_lock(&c->mu);
    c->sleeping = 0;
    pthread_mutex_unlock(&c->mu);
    if (n <= 0)
        return;
    if (pf[0].revents) {
        uint64_t v;
        if (read(c->efd, &v, sizeof v) < 0) {
            /* nothing to drain: EAGAIN */
        }
    }
    if (nfd == 2 && (pf[1].revents & (POLLIN | POLLHUP | POLLERR)))
        c->can_recv = 1;
    if (nfd == 2 && (pf[1].revents & (POLLOUT | POLLERR)))
        c->can_send = 1;
}

static void conn_check_timeout(tcp_conn *c, done_list *d)
{
    if (c->fd < 0 || !c->count)
        return;
    int lim = c->ep->ctx->io_timeout_ms;
    if (tcp_now_ms() - c->last_progress_ms > (uint64_t)lim) {
        char why[96];
        snprintf(why, sizeof why, "no progress for %d ms (io_timeout)", lim);
        conn_break(c, d, TERN_ERR_TIMEOUT, why);
    }
}

static void *conn_main(void *arg)
{
    tcp_conn *c = arg;
    tcp_ctx *ctx = c->ep->ctx;
    for (;;) {
        done_list d = {0};
        if (conn_take_pending(c, &d)) {
            tcp_cq_push(ctx, d.head, d.tail, d.n);
            break;
        }
        if (c->count && c->fd < 0)
            conn_reconnect(c, &d);
        conn_send(c, &d);
        conn_recv(c, &d);
        conn_check_timeout(c, &d);
        tcp_cq_push(ctx, d.head, d.tail, d.n);
        int busy = c->fd >= 0 && ((c->can_send && c->nsent < c->count) ||
                                  (c->can_recv && c->count));
        if (!busy && !d.n)
            conn_wait(c);
    }
    return NULL;
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
        return tcp_errf(err, errlen, TERN_ERR_CONNECT,
                        "tcp: cannot resolve the peer's data host '%s': %s (check the "
                        "peer's transports.tcp.bind / server name)", ep->host, gai_strerror(g));
    memcpy(&ep->addr, ai->ai_addr, ai->ai_addrlen);
    ep->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

static void ep_free(tcp_ep *ep)
{
    for (int i = 0; i < ep->nconn; i++) {
        tcp_conn *c = &ep->conns[i];
        if (c->efd >= 0)
            close(c->efd);
        pthread_mutex_destroy(&c->mu);
        free(c->ring);
    }
    free(ep->conns);
    free(ep);
}

int tcp_ep_open(void *vctx, const tern_ep_params *p, void **out, char *err, size_t errlen)
{
    tcp_ctx *ctx = vctx;
    if (!ctx || !p || !out || !p->peer_segment)
        return tcp_errf(err, errlen, TERN_ERR_INVAL, "tcp ep_open: missing parameters");
    const char *host = ctx->host.desc_get_str(p->peer_segment, "host");
    uint64_t port = 0;
    int rc = ctx->host.desc_get_u64(p->peer_segment, "port", &port);
    if (!host || !*host || strlen(host) >= TCP_HOST_MAX || rc != 0 || port == 0 || port > 65535)
        return tcp_errf(err, errlen, TERN_ERR_PROTOCOL,
                        "tcp ep_open: the segment of %s has no valid tcp address blob "
                        "(need {\"host\": string, \"port\": 1..65535}; got host %s, port %"
                        PRIu64 ")", p->peer_name ? p->peer_name : "?", host ? host : "(none)",
                        port);
    tcp_ep *ep = calloc(1, sizeof *ep);
    if (!ep)
        return tcp_errf(err, errlen, TERN_ERR_NOMEM, "tcp ep_open: out of memory");
    ep->wire = TCP_WIRE_TERN;
    ep->ctx = ctx;
    snprintf(ep->host, sizeof ep->host, "%s", host);
    ep->port = (uint16_t)port;
    snprintf(ep->peer, sizeof ep->peer, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
             ep->port);
    ep->nconn = ctx->opt_nconn;
    ep->conns = calloc((size_t)ep->nconn, sizeof *ep->conns);
    if (!ep->conns) {
        free(ep);
        return tcp_errf(err, errlen, TERN_ERR_NOMEM, "tcp ep_open: out of memory");
    }
    for (int i = 0; i < ep->nconn; i++) {
        tcp_conn *c = &ep->conns[i];
        c->ep = ep;
        c->idx = i;
        c->fd = -1;
        pthread_mutex_init(&c->mu, NULL);
        c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->efd < 0) {
            int e = errno;
            ep->nconn = i + 1;
            ep_free(ep);
            return tcp_errf(err, errlen, TERN_ERR_IO, "tcp ep_open: eventfd: %s", strerror(e));
        }
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

int tcp_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen)
{
    tcp_ep *ep = vep;
    (void)peer; /* no handshake: the segment blob had everything */
    if (!ep)
        return tcp_errf(err, errlen, TERN_ERR_INVAL, "tcp ep_connect: NULL endpoint");
    if (ep->connected)
        return 0;
    for (int i = 0; i < ep->nconn; i++) {
        int rc = sock_connect(ep, &ep->conns[i].fd, err, errlen);
        if (rc) {
            for (int j = 0; j < i; j++) {
                close(ep->conns[j].fd);
                ep->conns[j].fd = -1;
            }
            return rc;
        }
        ep->conns[i].can_send = 1;
        ep->conns[i].lowat = 1;
    }
    for (int i = 0; i < ep->nconn; i++) {
        tcp_conn *c = &ep->conns[i];
        if (pthread_create(&c->thread, NULL, conn_main, c) != 0)
            return tcp_errf(err, errlen, TERN_ERR_IO,
                            "tcp ep_connect: cannot start connection thread %d", i);
        c->started = 1;
    }
    ep->connected = 1;
    return 0;
}

/* Stop a connection's thread and fail what it still holds. */
static void conn_shutdown(tcp_conn *c)
{
    done_list d = {0};
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_mutex_unlock(&c->mu);
    if (c->started) {
        uint64_t one = 1;
        if (write(c->efd, &one, sizeof one) < 0) {
            /* eventfd write cannot fail short of overflow */
        }
        pthread_join(c->thread, NULL);
        c->started = 0;
    }
    conn_take_pending(c, &d);
    conn_break(c, &d, TERN_ERR_CLOSED, "the endpoint was closed");
    tcp_cq_push(c->ep->ctx, d.head, d.tail, d.n);
}

void tcp_ep_close(void *vep)
{
    tcp_ep *ep = vep;
    if (!ep)
        return;
    tcp_ctx *ctx = ep->ctx;
    for (int i = 0; i < ep->nconn; i++)
        conn_shutdown(&ep->conns[i]);
    pthread_mutex_lock(&ctx->ep_mu);
    for (tcp_ep **pp = &ctx->eps; *pp; pp = &(*pp)->next) {
        if (*pp == ep) {
            *pp = ep->next;
            break;
        }
    }
    pthread_mutex_unlock(&ctx->ep_mu);
    ep_free(ep);
}

/* The connection with the fewest bytes queued or in flight. */
static tcp_conn *ep_pick(tcp_ep *ep)
{
    unsigned start = atomic_fetch_add(&ep->rr, 1);
    tcp_conn *best = NULL;
    uint64_t best_load = UINT64_MAX;
    for (int i = 0; i < ep->nconn; i++) {
        tcp_conn *c = &ep->conns[(start + (unsigned)i) % (unsigned)ep->nconn];
        uint64_t l = atomic_load(&c->load);
        if (l < best_load) {
            best = c;
            best_load = l;
        }
    }
    return best;
}

int tcp_submit(void *vep, tern_slice *const *slices, int n)
{
    tcp_ep *ep = vep;
    if (!ep || !slices || n < 0)
        return TERN_ERR_INVAL;
    if (!ep->connected)
        return TERN_ERR_CONNECT;
    done_list bad = {0};
    for (int i = 0; i < n; i++) {
        tern_slice *s = slices[i];
        s->status = 0;
        s->transferred = 0;
        s->errmsg[0] = 0;
        if ((s->opcode != TERN_READ && s->opcode != TERN_WRITE) || !s->local || !s->length) {
            slice_finish(NULL, &bad, s, TERN_ERR_INVAL,
                         "tcp: slice with a bad opcode, NULL local address or zero length");
            continue;
        }
        tcp_conn *c = ep_pick(ep);
        atomic_fetch_add(&c->load, TCP_REQ_SIZE + s->length);
        s->plugin[0] = NULL;
        pthread_mutex_lock(&c->mu);
        if (c->pend_tail)
            c->pend_tail->plugin[0] = s;
        else
            c->pend_head = s;
        c->pend_tail = s;
        int wake = c->sleeping;
        c->sleeping = 0; /* one wake-up is enough */
        pthread_mutex_unlock(&c->mu);
        if (wake) {
            uint64_t one = 1;
            if (write(c->efd, &one, sizeof one) < 0) {
                /* cannot fail short of overflow */
            }
        }
    }
    tcp_cq_push(ep->ctx, bad.head, bad.tail, bad.n);
    return n;
}
