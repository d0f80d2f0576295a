/* transports/tcp/tcp_mooncake.c: Mooncake's TCP data format, target and
 * initiator side (see tcp_mooncake.h and docs/protocol.md, "Mooncake
 * compatibility").
 *
 * Blocking sockets, one thread per connection, on purpose: the format has
 * no request ids (one request at a time per connection, in order), so a
 * thread that reads a header, moves the bytes and answers is the whole
 * state machine.  Every wait is bounded by io_timeout_ms except the wait
 * for the next request header on an idle connection (Mooncake keeps pooled
 * connections open), and a stop descriptor wakes every wait at shutdown.
 *
 * Target side: each request is range-checked through the transport's pin
 * hook before a byte is moved; a request it refuses never touches memory
 * (a WRITE's payload is not read; the connection closes). */
#define _GNU_SOURCE
#include "tcp_mooncake.h"
#include "tern/plugin_kit.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tern/accept.h"
#include "tern/errors.h"

/* ---- codec ------------------------------------------------------------------ */

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

void tcp_mc_hdr_encode(uint8_t out[TCP_MC_HDR_SIZE], uint64_t size, uint64_t addr,
                       uint8_t opcode)
{
    memset(out, 0, TCP_MC_HDR_SIZE);
    put_le64(out, size);
    put_le64(out + 8, addr);
    out[16] = opcode;
}

void tcp_mc_hdr_decode(const uint8_t in[TCP_MC_HDR_SIZE], uint64_t *size, uint64_t *addr,
                       uint8_t *opcode)
{
    *size = get_le64(in);
    *addr = get_le64(in + 8);
    *opcode = in[16];
}

void tcp_mc_status_encode(uint8_t out[8], uint64_t status) { put_le64(out, status); }
uint64_t tcp_mc_status_decode(const uint8_t in[8]) { return get_le64(in); }

/* ---- small helpers ------------------------------------------------------------ */

static void mc_log(const tcp_mc_hooks *h, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void mc_log(const tcp_mc_hooks *h, int level, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (h->log)
        h->log(h->arg, level, msg);
}

/* Move exactly len bytes (out: send, else receive).  timeout_ms bounds the
 * time without progress (< 0: none, for the idle wait of a header); the
 * stop descriptor (readable at shutdown) ends any wait.  0, or
 * TERN_ERR_CLOSED (peer closed / stop), TERN_ERR_TIMEOUT, TERN_ERR_IO. */
typedef struct io_guard {
    const tcp_mc_hooks *h;
    void *pin;
    int floor; /* apply the progress floor (min_rate over window_ms) */
} io_guard;

/* Whether a transfer that moved done bytes since t0 is below the floor:
 * checked once a window has passed, so a short pause is no cut. */
static int below_floor(const io_guard *g, uint64_t t0, uint64_t done)
{
    if (!g || !g->floor || !g->h->min_rate || g->h->window_ms <= 0)
        return 0;
    uint64_t ms = tern_kit_now_ms() - t0;
    return ms >= (uint64_t)g->h->window_ms && done * 1000u < g->h->min_rate * ms;
}

static int io_full_g(int fd, int stopfd, void *buf, uint64_t len, int out, int timeout_ms,
                     const io_guard *g)
{
    uint8_t *p = buf;
    uint64_t done = 0;
    uint64_t t0 = tern_kit_now_ms();
    while (done < len) {
        if (below_floor(g, t0, done))
            return TERN_ERR_TIMEOUT; /* a trickle keeps neither the thread nor the pin */
        size_t want = len - done > (1u << 30) ? (1u << 30) : (size_t)(len - done);
        if (g && g->h->io_begin && g->h->io_begin(g->pin) != 0)
            return TERN_ERR_CLOSED; /* the range was deregistered */
        ssize_t n = out ? send(fd, p + done, want, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, p + done, want, MSG_DONTWAIT);
        int e = errno;
        if (g && g->h->io_end)
            g->h->io_end(g->pin);
        errno = e;
        if (n > 0) {
            done += (uint64_t)n;
            continue;
        }
        if (n == 0 && !out)
            return TERN_ERR_CLOSED;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return errno == ECONNRESET || errno == EPIPE ? TERN_ERR_CLOSED : TERN_ERR_IO;
        struct pollfd pf[2] = {{.fd = fd, .events = out ? POLLOUT : POLLIN},
                               {.fd = stopfd, .events = POLLIN}};
        int r = poll(pf, stopfd >= 0 ? 2 : 1, timeout_ms);
        if (r == 0)
            return TERN_ERR_TIMEOUT;
        if (r < 0 && errno != EINTR)
            return TERN_ERR_IO;
        if (stopfd >= 0 && (pf[1].revents & POLLIN))
            return TERN_ERR_CLOSED;
    }
    return 0;
}

static int io_full(int fd, int stopfd, void *buf, uint64_t len, int out, int timeout_ms)
{
    return io_full_g(fd, stopfd, buf, len, out, timeout_ms, NULL);
}

/* ---- target side ---------------------------------------------------------------- */

typedef struct mc_srv_conn {
    struct tcp_mc_server *srv;
    int fd;
    char peer[64];
    int served;                    /* requests answered */
    int idle, evicted;             /* under srv->mu */
    struct mc_srv_conn *prev, *next;
} mc_srv_conn;

struct tcp_mc_server {
    tcp_mc_hooks h;
    int lfd, stopfd, port;
    pthread_t acceptor;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* a connection thread ended */
    mc_srv_conn *conns;    /* live connections (for shutdown) */
    int nconn, stopping;
};

/* Refuse a request: the version-2 status frame when the peer asked for
 * version 2, then the caller closes the connection. */
static int srv_refuse(mc_srv_conn *c, int v2, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int srv_refuse(mc_srv_conn *c, int v2, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    mc_log(&c->srv->h, TERN_LOG_WARN,
           "tcp: refused a Mooncake-format request from %s: %s; closing the connection", c->peer,
           why);
    if (v2) {
        uint8_t st[8];
        tcp_mc_status_encode(st, TCP_MC_STATUS_REFUSED);
        io_full(c->fd, c->srv->stopfd, st, 8, 1, c->srv->h.io_timeout_ms);
    }
    /* Closing with unread bytes (a refused WRITE's payload) sends a reset,
     * which can destroy the refusal frame before the peer reads it: send
     * FIN first, then discard a bounded amount into scratch memory. */
    shutdown(c->fd, SHUT_WR);
    uint8_t scratch[16384];
    for (int i = 0; i < 64; i++) {
        struct pollfd pf = {.fd = c->fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0 || recv(c->fd, scratch, sizeof scratch, MSG_DONTWAIT) <= 0)
            break;
    }
    return TERN_ERR_RANGE;
}

static int srv_send_status(mc_srv_conn *c, uint64_t status)
{
    uint8_t st[8];
    tcp_mc_status_encode(st, status);
    return io_full(c->fd, c->srv->stopfd, st, 8, 1, c->srv->h.io_timeout_ms);
}

/* Marks c idle (waiting for a pooled request) or busy; returns whether it
 * was evicted meanwhile. */
static int srv_set_idle(mc_srv_conn *c, int idle)
{
    pthread_mutex_lock(&c->srv->mu);
    c->idle = idle;
    int evicted = c->evicted;
    pthread_mutex_unlock(&c->srv->mu);
    return evicted;
}

/* One request; 0 to go on with the next, else close. */
static int srv_serve_one(mc_srv_conn *c)
{
    const tcp_mc_hooks *h = &c->srv->h;
    uint8_t hdr[TCP_MC_HDR_SIZE];
    /* The first byte of a pooled connection's next request may take
     * forever, unless a new connection needs the slot (srv_make_room); a
     * new connection sends its first within unproven_idle_ms. */
    srv_set_idle(c, 1);
    int first_ms = h->unproven_idle_ms > 0 ? h->unproven_idle_ms : h->io_timeout_ms;
    int rc = io_full(c->fd, c->srv->stopfd, hdr, 1, 0, c->served > 0 ? -1 : first_ms);
    if (srv_set_idle(c, 0) && !rc)
        rc = TERN_ERR_CLOSED;
    if (!rc)
        rc = io_full(c->fd, c->srv->stopfd, hdr + 1, TCP_MC_HDR_SIZE - 1, 0, h->io_timeout_ms);
    if (rc)
        return rc;
    uint64_t size, addr;
    uint8_t op;
    tcp_mc_hdr_decode(hdr, &size, &addr, &op);
    int v2 = (op & TCP_MC_OP_V2) != 0;
    op &= (uint8_t)~TCP_MC_OP_V2;
    if (op != TCP_MC_OP_READ && op != TCP_MC_OP_WRITE)
        return srv_refuse(c, v2, "opcode %u is neither READ (0) nor WRITE (1)", op);
    if (size == 0)
        return srv_refuse(c, v2, "%s of 0 bytes at 0x%" PRIx64, op ? "WRITE" : "READ", addr);
    if (size > UINT64_MAX - addr)
        return srv_refuse(c, v2, "%s of %" PRIu64 " bytes at 0x%" PRIx64 " overflows 64 bits",
                          op ? "WRITE" : "READ", size, addr);
    void *pin = h->pin(h->arg, addr, size);
    if (!pin)
        return srv_refuse(c, v2,
                          "%s of %" PRIu64 " bytes at 0x%" PRIx64
                          " is not inside one registered buffer",
                          op ? "WRITE" : "READ", size, addr);
    void *mem = (void *)(uintptr_t)addr;
    io_guard g = {h, pin, 1};
    if (op == TCP_MC_OP_WRITE) {
        rc = io_full_g(c->fd, c->srv->stopfd, mem, size, 0, h->io_timeout_ms, &g);
        h->unpin(h->arg, pin);
        if (!rc && v2)
            rc = srv_send_status(c, TCP_MC_STATUS_OK);
    } else {
        rc = v2 ? srv_send_status(c, TCP_MC_STATUS_OK) : 0;
        if (!rc)
            rc = io_full_g(c->fd, c->srv->stopfd, mem, size, 1, h->io_timeout_ms, &g);
        h->unpin(h->arg, pin);
    }
    return rc;
}

static void *srv_conn_main(void *arg)
{
    mc_srv_conn *c = arg;
    tcp_mc_server *s = c->srv;
    while (srv_serve_one(c) == 0)
        c->served++;
    pthread_mutex_lock(&s->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconn--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    close(c->fd);
    free(c);
    return NULL;
}

/* Returns -1 when accept() lacked a resource (tern/accept.h): the caller
 * pauses accepting. */
static int srv_accept_one(tcp_mc_server *s)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0) {
        if (!tern_accept_starved(errno))
            return 0;
        mc_log(&s->h, TERN_LOG_WARN, "tcp: cannot accept Mooncake-format connections: %s "
               "(raise the open files limit); accepting again in %d ms", strerror(errno),
               TERN_ACCEPT_PAUSE_MS);
        return -1;
    }
    mc_srv_conn *c = calloc(1, sizeof *c);
    char host[INET6_ADDRSTRLEN] = "?", port[8] = "?";
    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
    pthread_mutex_lock(&s->mu);
    int full = s->nconn >= s->h.max_conns;
    if (c && !full && !s->stopping) {
        c->srv = s;
        c->fd = fd;
        snprintf(c->peer, sizeof c->peer, "%s:%s", host, port);
        if (s->h.tune)
            s->h.tune(s->h.arg, fd);
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        if (pthread_create(&t, &at, srv_conn_main, c) == 0) {
            c->next = s->conns;
            if (s->conns)
                s->conns->prev = c;
            s->conns = c;
            s->nconn++;
            c = NULL;
            fd = -1;
        }
        pthread_attr_destroy(&at);
    }
    pthread_mutex_unlock(&s->mu);
    if (fd >= 0) {
        if (full)
            mc_log(&s->h, TERN_LOG_WARN,
                   "tcp: Mooncake-format connection from %s:%s closed: %d connections "
                   "already served (max_server_connections)",
                   host, port, s->h.max_conns);
        close(fd);
    }
    free(c);
    return 0;
}

/* Every slot taken: the oldest connection that waits idle for a pooled
 * request is closed for the new one, and the new one waits (in the
 * listen backlog) up to io_timeout for a slot.  A peer that opens a
 * connection per request (Mooncake without its pool) then meets a slow
 * target with back-pressure, not refusals. */
static void srv_make_room(tcp_mc_server *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->nconn >= s->h.max_conns) {
        /* the oldest silent one (never sent a byte), else the oldest
         * pooled one; never one whose request is in its socket already */
        mc_srv_conn *old = NULL, *silent = NULL;
        for (mc_srv_conn *c = s->conns; c; c = c->next) {
            int n = 0;
            if (!c->idle || c->evicted || ioctl(c->fd, FIONREAD, &n) != 0 || n > 0)
                continue;
            old = c; /* the list is newest first: the last one is the oldest */
            if (!c->served)
                silent = c;
        }
        if (silent)
            old = silent;
        if (old) {
            old->evicted = 1;
            shutdown(old->fd, SHUT_RDWR);
        }
        int ms = s->h.io_timeout_ms > 0 ? s->h.io_timeout_ms : 5000;
        struct timespec until = tern_kit_deadline_mono(ms); /* s->cv is monotonic */
        while (s->nconn >= s->h.max_conns && !s->stopping &&
               pthread_cond_timedwait(&s->cv, &s->mu, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&s->mu);
}

static void *srv_accept_main(void *arg)
{
    tcp_mc_server *s = arg;
    int paused = 0; /* accept lacked a resource: the listener is not watched for a while */
    for (;;) {
        struct pollfd pf[2] = {{.fd = s->lfd, .events = paused ? 0 : POLLIN},
                               {.fd = s->stopfd, .events = POLLIN}};
        if (poll(pf, 2, paused ? TERN_ACCEPT_PAUSE_MS : -1) < 0 && errno != EINTR)
            break;
        if (pf[1].revents & POLLIN)
            break;
        paused = 0;
        if (pf[0].revents & POLLIN) {
            srv_make_room(s);
            paused = srv_accept_one(s) != 0;
        }
    }
    return NULL;
}

static int srv_listen(tcp_mc_server *s, const char *bind_host, int port, char *err,
                      size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(bind_host && *bind_host ? bind_host : NULL, ps, &hints, &ai);
    if (g)
        return snprintf(err, errlen, "tcp: Mooncake-format port: cannot resolve %s: %s",
                        bind_host, gai_strerror(g)),
               TERN_ERR_CONFIG;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
        snprintf(err, errlen, "tcp: Mooncake-format port: cannot listen on %s port %d: %s",
                 bind_host, port, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return TERN_ERR_IO;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    s->lfd = fd;
    return 0;
}

int tcp_mc_server_start(const tcp_mc_hooks *h, const char *bind_host, int port,
                        tcp_mc_server **out, char *err, size_t errlen)
{
    tcp_mc_server *s = calloc(1, sizeof *s);
    if (!s)
        return TERN_ERR_NOMEM;
    s->h = *h;
    if (s->h.max_conns < 1)
        s->h.max_conns = 256;
    s->lfd = -1;
    s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&s->mu, NULL);
    tern_kit_cond_init_mono(&s->cv); /* srv_make_room waits against the monotonic clock */
    int rc = s->stopfd < 0 ? TERN_ERR_IO : srv_listen(s, bind_host, port, err, errlen);
    if (!rc && pthread_create(&s->acceptor, NULL, srv_accept_main, s) != 0)
        rc = TERN_ERR_IO;
    if (rc) {
        if (s->lfd >= 0)
            close(s->lfd);
        if (s->stopfd >= 0)
            close(s->stopfd);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int tcp_mc_server_port(const tcp_mc_server *s) { return s ? s->port : 0; }

void tcp_mc_server_stop(tcp_mc_server *s)
{
    if (!s)
        return;
    uint64_t one = 1;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv); /* an acceptor waiting for a slot */
    pthread_mutex_unlock(&s->mu);
    if (write(s->stopfd, &one, sizeof one) < 0) { /* eventfd: cannot fail here */
    }
    pthread_join(s->acceptor, NULL);
    pthread_mutex_lock(&s->mu);
    for (mc_srv_conn *c = s->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    while (s->nconn)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    close(s->lfd);
    close(s->stopfd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* ---- initiator side -------------------------------------------------------------- */

typedef struct mc_worker {
    struct tcp_mc_ep *ep;
    pthread_t thread;
    int started;
    int ordered; /* serves the ordered queue (worker 0) */
    int fd; /* guarded by ep->mu for shutdown() at close */
} mc_worker;

struct tcp_mc_ep {
    tcp_mc_hooks h;
    char peer[300];
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int v2;
    int stopfd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tern_slice *head, *tail;   /* queued for any worker, linked by plugin[0] */
    tern_slice *ohead, *otail; /* format 1: queued for the ordered worker only */
    uint64_t wr_sent;          /* format 1: WRITEs handed to the ordered worker */
    uint64_t wr_applied;       /* ...of which the target has surely applied */
    int closing;
    int nworkers;
    mc_worker *workers;
};

static void slice_done(tcp_mc_ep *ep, tern_slice *s, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void slice_done(tcp_mc_ep *ep, tern_slice *s, int status, const char *fmt, ...)
{
    s->status = status;
    s->transferred = status ? 0 : s->length;
    s->errmsg[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->errmsg, sizeof s->errmsg, fmt, ap);
        va_end(ap);
    }
    ep->h.complete(ep->h.arg, s);
}

static int ep_connect_fd(tcp_mc_ep *ep, int *out)
{
    int fd = socket(ep->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return TERN_ERR_IO;
    int rc = connect(fd, (struct sockaddr *)&ep->addr, ep->addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
        struct pollfd pf[2] = {{.fd = fd, .events = POLLOUT}, {.fd = ep->stopfd, .events = POLLIN}};
        int r = poll(pf, 2, ep->h.io_timeout_ms);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (r > 0 && (pf[0].revents & (POLLOUT | POLLERR | POLLHUP)))
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        rc = r > 0 && !(pf[1].revents & POLLIN) && soerr == 0 ? 0 : -1;
        if (soerr)
            errno = soerr;
        else if (r == 0)
            errno = ETIMEDOUT;
    }
    if (rc != 0) {
        close(fd);
        return TERN_ERR_CONNECT;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (ep->h.tune)
        ep->h.tune(ep->h.arg, fd);
    *out = fd;
    return 0;
}

/* Read a version-2 status frame: 0 ok, else an error with the reason. */
static int read_status(tcp_mc_ep *ep, int fd, const char **why)
{
    uint8_t st[8];
    int rc = io_full(fd, ep->stopfd, st, 8, 0, ep->h.io_timeout_ms);
    if (rc) {
        *why = "no status frame (connection closed or timed out)";
        return rc;
    }
    uint64_t v = tcp_mc_status_decode(st);
    if ((v & UINT64_C(0xFFFFFFFF00000000)) != TCP_MC_STATUS_MAGIC) {
        *why = "malformed status frame (the peer does not speak format 2)";
        return TERN_ERR_PROTOCOL;
    }
    if (v != TCP_MC_STATUS_OK) {
        *why = "the peer refused the address range";
        return TERN_ERR_RANGE;
    }
    return 0;
}

/* A request's first half: its header, and a WRITE's payload.  0, or an
 * error (the socket is then in an unknown state and must be closed). */
static int ep_send(tcp_mc_ep *ep, int fd, tern_slice *s, const char **why)
{
    int write = s->opcode == TERN_OP_WRITE;
    uint8_t hdr[TCP_MC_HDR_SIZE];
    tcp_mc_hdr_encode(hdr, s->length, s->remote,
                      (uint8_t)((write ? TCP_MC_OP_WRITE : TCP_MC_OP_READ) |
                                (ep->v2 ? TCP_MC_OP_V2 : 0)));
    *why = "sending the request failed";
    int rc = io_full(fd, ep->stopfd, hdr, sizeof hdr, 1, ep->h.io_timeout_ms);
    if (rc || !write)
        return rc;
    rc = io_full(fd, ep->stopfd, s->local, s->length, 1, ep->h.io_timeout_ms);
    if (rc && ep->v2 && read_status(ep, fd, why) == TERN_ERR_RANGE)
        return TERN_ERR_RANGE; /* the target refused it and closed */
    return rc;
}

/* Its second half: a WRITE's acknowledgement (format 2; format 1 has none:
 * sent is all it can tell), a READ's status and data. */
static int ep_recv(tcp_mc_ep *ep, int fd, tern_slice *s, const char **why)
{
    int rc;
    if (s->opcode == TERN_OP_WRITE)
        return ep->v2 ? read_status(ep, fd, why) : 0;
    if (ep->v2 && (rc = read_status(ep, fd, why)) != 0)
        return rc;
    *why = "receiving the READ data failed (format 1: a refused READ shows as a close)";
    return io_full(fd, ep->stopfd, s->local, s->length, 0, ep->h.io_timeout_ms);
}

static tern_slice *q_pop(tern_slice **head, tern_slice **tail)
{
    tern_slice *s = *head;
    if (s && !(*head = s->plugin[0]))
        *tail = NULL;
    return s;
}

static void q_push(tern_slice **head, tern_slice **tail, tern_slice *s)
{
    s->plugin[0] = NULL;
    if (*tail)
        (*tail)->plugin[0] = s;
    else
        *head = s;
    *tail = s;
}

/* Up to max queued slices (waits for the first); 0 once closing.  The
 * ordered worker takes its own queue first, so its connection sees the
 * format-1 requests in the order they were submitted. */
static int ep_take(tcp_mc_ep *ep, const mc_worker *w, tern_slice **out, int max)
{
    int n = 0;
    pthread_mutex_lock(&ep->mu);
    while (!ep->head && !(w->ordered && ep->ohead) && !ep->closing)
        pthread_cond_wait(&ep->cv, &ep->mu);
    while (!ep->closing && w->ordered && ep->ohead && n < max)
        out[n++] = q_pop(&ep->ohead, &ep->otail);
    while (!ep->closing && ep->head && n < max)
        out[n++] = q_pop(&ep->head, &ep->tail);
    pthread_mutex_unlock(&ep->mu);
    return n;
}

/* A READ that went through the ordered connection came back: every WRITE
 * sent on it before that READ has been applied (the target serves one
 * connection's requests in order). */
static void ep_fence_passed(tcp_mc_ep *ep, const tern_slice *s)
{
    uint64_t fence = (uint64_t)(uintptr_t)s->plugin[1];
    if (ep->v2 || s->opcode != TERN_OP_READ || !fence)
        return;
    pthread_mutex_lock(&ep->mu);
    if (fence > ep->wr_applied)
        ep->wr_applied = fence;
    pthread_mutex_unlock(&ep->mu);
}

static void worker_set_fd(mc_worker *w, int fd)
{
    pthread_mutex_lock(&w->ep->mu);
    w->fd = fd;
    pthread_mutex_unlock(&w->ep->mu);
}

/* Requests are pipelined, MC_PIPE per connection: every header (and WRITE
 * payload) of a round is sent before the first answer is read.  The target
 * serves a connection's requests in order, so the answers come back in
 * order, and the link does not idle for a round trip between requests.
 * A failure leaves the stream in an unknown state: that request and the
 * ones after it in the round fail, the connection is closed. */
#define MC_PIPE 4

static void *ep_worker_main(void *arg)
{
    mc_worker *w = arg;
    tcp_mc_ep *ep = w->ep;
    int fd = -1, n;
    tern_slice *s[MC_PIPE];
    while ((n = ep_take(ep, w, s, MC_PIPE)) > 0) {
        const char *why = "connect failed";
        int rc = 0, sent = 0, done = 0;
        if (fd < 0 && (rc = ep_connect_fd(ep, &fd)) == 0)
            worker_set_fd(w, fd);
        for (; !rc && sent < n; sent++)
            rc = ep_send(ep, fd, s[sent], &why);
        for (; !rc && done < sent; done++)
            if ((rc = ep_recv(ep, fd, s[done], &why)) == 0) {
                ep_fence_passed(ep, s[done]);
                slice_done(ep, s[done], 0, NULL);
            }
        if (!rc)
            continue;
        if (fd >= 0) {
            worker_set_fd(w, -1);
            close(fd);
            fd = -1;
        }
        for (int i = done; i < n; i++)
            slice_done(ep, s[i], i == done ? rc : TERN_ERR_CLOSED,
                       "Mooncake peer %s (format %d): %s", ep->peer, ep->v2 ? 2 : 1,
                       i == done ? why : "an earlier request on its connection failed");
    }
    if (fd >= 0) {
        worker_set_fd(w, -1);
        close(fd);
    }
    return NULL;
}

int tcp_mc_ep_open(const tcp_mc_hooks *h, const char *host, uint16_t port, int version,
                   int nconn, tcp_mc_ep **out, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int g = port ? getaddrinfo(host, ps, &hints, &ai) : EAI_SERVICE;
    if (g) {
        snprintf(err, errlen, "tcp: Mooncake peer %s port %u: %s", host, port,
                 port ? gai_strerror(g) : "the descriptor has no tcp_data_port");
        return TERN_ERR_UNREACHABLE;
    }
    tcp_mc_ep *ep = calloc(1, sizeof *ep);
    mc_worker *ws = calloc((size_t)(nconn < 1 ? 1 : nconn), sizeof *ws);
    if (!ep || !ws) {
        freeaddrinfo(ai);
        free(ep);
        free(ws);
        return TERN_ERR_NOMEM;
    }
    ep->h = *h;
    memcpy(&ep->addr, ai->ai_addr, ai->ai_addrlen);
    ep->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    snprintf(ep->peer, sizeof ep->peer, "%s:%u", host, port);
    ep->v2 = version >= 2;
    ep->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&ep->mu, NULL);
    pthread_cond_init(&ep->cv, NULL);
    ep->workers = ws;
    /* Every format uses nconn connections.  Format 1 acknowledges nothing (a
     * WRITE is done when it is sent), so its order rests on one connection:
     * see tcp_mc_ep_submit. */
    ep->nworkers = nconn < 1 ? 1 : nconn;
    for (int i = 0; i < ep->nworkers; i++) {
        ws[i].ep = ep;
        ws[i].fd = -1;
        ws[i].ordered = i == 0;
        ws[i].started = pthread_create(&ws[i].thread, NULL, ep_worker_main, &ws[i]) == 0;
    }
    if (ep->stopfd < 0 || !ws[0].started) {
        tcp_mc_ep_close(ep);
        snprintf(err, errlen, "tcp: Mooncake peer %s: cannot start its threads", ep->peer);
        return TERN_ERR_IO;
    }
    *out = ep;
    return 0;
}

/* Where a slice waits (ep->mu held).  Format 2 acknowledges each request,
 * so any connection will do.  Format 1 only says "sent": its WRITEs all go
 * down the ordered connection, and so does every READ while a WRITE sent
 * there is not yet known to be applied; that READ coming back proves it
 * (ep_fence_passed).  A READ submitted after a WRITE completed thus sees
 * its bytes, and READs spread over every connection again once the last
 * WRITE is fenced.  Requests in flight together have no order, as with
 * tern's own format. */
static void ep_queue(tcp_mc_ep *ep, tern_slice *s)
{
    s->plugin[1] = NULL;
    if (ep->v2 || (s->opcode == TERN_OP_READ && ep->wr_applied == ep->wr_sent)) {
        q_push(&ep->head, &ep->tail, s);
        return;
    }
    if (s->opcode == TERN_OP_WRITE)
        ep->wr_sent++;
    else
        s->plugin[1] = (void *)(uintptr_t)ep->wr_sent;
    q_push(&ep->ohead, &ep->otail, s);
}

int tcp_mc_ep_submit(tcp_mc_ep *ep, tern_slice *const *slices, int n)
{
    if (!ep || n < 0 || (n && !slices))
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&ep->mu);
    if (ep->closing) {
        pthread_mutex_unlock(&ep->mu);
        return TERN_ERR_CLOSED;
    }
    for (int i = 0; i < n; i++)
        ep_queue(ep, slices[i]);
    pthread_cond_broadcast(&ep->cv);
    pthread_mutex_unlock(&ep->mu);
    return n; /* all taken (the vtable's contract: the number accepted) */
}

void tcp_mc_ep_close(tcp_mc_ep *ep)
{
    if (!ep)
        return;
    uint64_t one = 1;
    pthread_mutex_lock(&ep->mu);
    ep->closing = 1;
    for (int i = 0; i < ep->nworkers; i++)
        if (ep->workers[i].fd >= 0)
            shutdown(ep->workers[i].fd, SHUT_RDWR);
    tern_slice *left = ep->ohead;
    if (ep->otail)
        ep->otail->plugin[0] = ep->head;
    else
        left = ep->head;
    ep->head = ep->tail = ep->ohead = ep->otail = NULL;
    pthread_cond_broadcast(&ep->cv);
    pthread_mutex_unlock(&ep->mu);
    if (ep->stopfd >= 0 && write(ep->stopfd, &one, sizeof one) < 0) { /* cannot fail */
    }
    for (int i = 0; i < ep->nworkers; i++)
        if (ep->workers[i].started)
            pthread_join(ep->workers[i].thread, NULL);
    while (left) {
        tern_slice *next = left->plugin[0];
        slice_done(ep, left, TERN_ERR_CLOSED, "Mooncake peer %s: endpoint closed", ep->peer);
        left = next;
    }
    if (ep->stopfd >= 0)
        close(ep->stopfd);
    pthread_mutex_destroy(&ep->mu);
    pthread_cond_destroy(&ep->cv);
    free(ep->workers);
    free(ep);
}
