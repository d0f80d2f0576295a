/* core/control/server.c: the handshake daemon (server.h).
 *
 * One epoll thread accepts and reads frames without blocking (header, then
 * payload, each connection with its own deadline so a slow or hostile
 * client is dropped after io_timeout), plus a small worker pool that runs
 * the handler: handlers may block (bringing up QPs), so they run on the
 * epoll thread only for the request types the caller names as never
 * blocking (inline_types).  Workers hand the encoded reply back to the
 * epoll thread, which writes it, shuts down writing and closes.
 *
 * Framing, per-type request limits, the Connection lane and the
 * rate-limited warnings: docs/protocol.md, "Handshake frames". */
#include "control/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <malloc.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/auth.h"
#include "control/frames.h"
#include "tern/accept.h"
#include "tern/errors.h"
#include "tern/transport.h"
#include "base/util.h"

#define HS_WORKERS_START 4
#define HS_WORKERS 64 /* handlers block on I/O (QP bring-up): grow up to this */
#define HS_DEFAULT_MAX_CONN 1024
#define HS_WARN_INTERVAL_MS 10000 /* one warning about strangers per interval */
#define HS_TRIM_BYTES (4u << 20)  /* payload bytes since the last trim worth a trim */
/* Budgets of unproven connections (no secret, or not proved yet), see
 * docs/protocol.md, "Connection budgets": a source holds at most half of
 * max_connections, kept Notify connections at most three quarters (the
 * rest stays for short requests: Metadata, Probe, Connection), a kept one
 * lives at most HS_KEEP_LIFE_MS from its accept, and a newcomer at a cap
 * takes the slot of the oldest idle unproven connection. */
#define HS_KEEP_LIFE_MS 10000

enum { C_HDR, C_PAYLOAD, C_WORK, C_WRITE, C_DRAIN };

typedef struct hs_conn {
    int fd;
    int state;
    int in_epoll;
    uint8_t hdr[9];              /* the length and the type byte: checked before allocating */
    size_t hgot;
    uint8_t *payload;
    uint64_t plen, pgot;
    uint64_t deadline_ms;
    uint8_t *out;
    size_t outlen, outoff;
    tern_auth_session auth;      /* step != 0: the peer has not proved the secret yet */
    int is_conn;                 /* a Connection request: the bounded lane */
    int resume;                  /* after writing out: read the next frame (auth) */
    int keep;                    /* a Notify answered: the client may send another
                                    on this connection (docs/protocol.md, Notify) */
    int kept;                    /* counted in nkept: an unproven kept connection */
    uint64_t born_ms;            /* accepted at */
    struct sockaddr_storage src; /* the peer's address (port zeroed): per-source cap */
    struct hs_conn *prev, *next; /* all connections */
    struct hs_conn *qnext;       /* work or done queue */
} hs_conn;

struct tern_hs_server {
    tern_hs_options opt;
    char bind_host[256];
    int lfds[TERN_HS_MAX_LISTEN]; /* [0]: bind_host; then the host's other addresses */
    int nlfd;
    char addrs[TERN_HS_MAX_LISTEN][TERN_HS_ADDR_MAX]; /* "host:port" of lfds[1..] */
    int epfd, evfd;
    uint16_t port;
    int accepting;
    int fd_starved; /* accept hit EMFILE: wait for a connection to close */
    uint64_t starved_until_ms; /* or until then (the files may be held elsewhere) */
    int nconns;
    int nkept;          /* unproven connections kept after a Notify */
    hs_conn *conns;     /* newest first */
    hs_conn *conns_tail; /* the oldest */
    pthread_t loop;
    pthread_t workers[HS_WORKERS];
    int nworkers;
    int idle;           /* workers waiting for a request */
    int queued;         /* requests waiting for a worker */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hs_conn *work_head, *work_tail; /* Metadata, Probe, Notify: answered first */
    hs_conn *conn_head, *conn_tail; /* Connection: at most TERN_HS_CONN_WORKERS at once */
    int conn_busy;
    hs_conn *done_head, *done_tail;
    uint64_t alloc_since_trim;      /* payload bytes allocated since malloc_trim */
    uint64_t warn_last_ms;          /* strangers' warnings: the last one logged */
    unsigned long warn_suppressed;  /* and how many were held back since */
    int stop_workers;
    atomic_int stop_loop;
};

static void conn_free(tern_hs_server *s, hs_conn *c)
{
    if (c->in_epoll)
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        s->conns_tail = c->prev;
    s->nconns--;
    s->nkept -= c->kept;
    s->fd_starved = 0;
    free(c->payload);
    free(c->out);
    free(c);
}

static void q_push(hs_conn **head, hs_conn **tail, hs_conn *c)
{
    c->qnext = NULL;
    if (*tail)
        (*tail)->qnext = c;
    else
        *head = c;
    *tail = c;
}

static hs_conn *q_pop(hs_conn **head, hs_conn **tail)
{
    hs_conn *c = *head;
    if (c) {
        *head = c->qnext;
        if (!*head)
            *tail = NULL;
    }
    return c;
}

static int ep_set(tern_hs_server *s, hs_conn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};
    int rc = epoll_ctl(s->epfd, c->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &ev);
    if (rc == 0)
        c->in_epoll = 1;
    return rc;
}

/* Run one request: decode, check JSON, call the handler, encode the reply. */
static void conn_process(tern_hs_server *s, hs_conn *c)
{
    int type = 0;
    const char *json = NULL;
    size_t jlen = 0;
    char msg[256];
    char *reply = NULL;
    size_t rlen = 0;
    int old = c->payload[0] > TERN_HS_PROBE;
    int rc = tern_hs_frame_payload(c->payload, c->plen, &type, &json, &jlen, msg, sizeof msg);
    if (!rc && type != TERN_HS_PROBE)
        rc = tern_hs_json_check(json, jlen, msg, sizeof msg);
    if (rc) {
        reply = tern_hs_refusal(msg);
    } else if (s->opt.handler) {
        rc = s->opt.handler(s->opt.arg, type, json, jlen, &reply, &rlen);
        if (rc && !reply) {
            snprintf(msg, sizeof msg, "%s request failed: %s", tern_hs_type_name(type),
                     tern_strerror(rc));
            reply = tern_hs_refusal(msg);
        }
    }
    if (!reply && !rc)
        reply = strdup("{}");
    if (reply && !rlen)
        rlen = strlen(reply);
    if (reply)
        tern_hs_frame_build(old ? -1 : type, reply, rlen, &c->out, &c->outlen);
    free(reply);
    free(c->payload);
    c->payload = NULL;
    c->keep = !old && type == TERN_HS_NOTIFY && reply;
}

/* Send what the socket takes right away, from the worker, so the client
 * has its reply without waiting for the epoll thread; the epoll thread
 * finishes the rest (if any), shuts down writing and closes. */
static void send_now(hs_conn *c)
{
    while (c->out && c->outoff < c->outlen) {
        ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0)
            c->outoff += (size_t)w;
        else if (!(w < 0 && errno == EINTR))
            return;
    }
    if (c->out && !c->keep)
        shutdown(c->fd, SHUT_WR);
}

static void *worker_main(void *arg)
{
    tern_hs_server *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        s->idle++;
        while (!s->stop_workers && !s->work_head &&
               !(s->conn_head && s->conn_busy < TERN_HS_CONN_WORKERS))
            pthread_cond_wait(&s->cv, &s->mu);
        s->idle--;
        if (s->stop_workers)
            break;
        hs_conn *c = s->work_head ? q_pop(&s->work_head, &s->work_tail)
                                  : q_pop(&s->conn_head, &s->conn_tail);
        s->conn_busy += c->is_conn;
        s->queued--;
        pthread_mutex_unlock(&s->mu);
        conn_process(s, c);
        send_now(c);
        pthread_mutex_lock(&s->mu);
        if (c->is_conn) { /* a lane slot is free: a waiting Connection may go */
            s->conn_busy--;
            pthread_cond_signal(&s->cv);
        }
        q_push(&s->done_head, &s->done_tail, c);
        uint64_t one = 1;
        if (write(s->evfd, &one, sizeof one) < 0) { /* counter full: loop wakes anyway */
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static uint64_t io_timeout(const tern_hs_server *s) { return (uint64_t)s->opt.io_timeout_ms; }

/* A peer that proved the shared secret; without one nobody is proven. */
static int hs_proven(const tern_hs_server *s, const hs_conn *c)
{
    return s->opt.auth && c->auth.step == 0;
}

/* Whether a Notify connection may stay open for the next request: always
 * for a proven peer; an unproven one within its lifetime and within the
 * kept share (three quarters of max_connections), so that kept connections
 * can never take the slots of short requests (a metadata fetch). */
static int keep_budget(tern_hs_server *s, hs_conn *c)
{
    if (hs_proven(s, c))
        return 1;
    if (tern_now_ms() >= c->born_ms + HS_KEEP_LIFE_MS)
        return 0;
    if (!c->kept) {
        if (s->nkept >= s->opt.max_connections * 3 / 4)
            return 0;
        c->kept = 1;
        s->nkept++;
    }
    return 1;
}

/* Write what we can; finished -> shutdown(SHUT_WR) and wait for the peer's EOF. */
static void conn_write(tern_hs_server *s, hs_conn *c)
{
    while (c->outoff < c->outlen) {
        ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            c->outoff += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (ep_set(s, c, EPOLLOUT) != 0)
                conn_free(s, c);
            return;
        }
        conn_free(s, c);
        return;
    }
    if (c->keep && !keep_budget(s, c))
        c->keep = 0; /* over the unproven budget: close after this reply */
    if (c->resume || c->keep) { /* an authentication step, or a Notify
                                  * connection kept: the next request frame */
        int keep = c->keep;
        c->resume = c->keep = 0;
        c->hgot = 0;
        c->plen = c->pgot = 0;
        free(c->out);
        c->out = NULL;
        c->outlen = c->outoff = 0;
        c->state = C_HDR;
        c->deadline_ms = tern_now_ms() + io_timeout(s);
        if (keep && !hs_proven(s, c) && c->deadline_ms > c->born_ms + HS_KEEP_LIFE_MS)
            c->deadline_ms = c->born_ms + HS_KEEP_LIFE_MS; /* answering never renews it */
        if (ep_set(s, c, EPOLLIN | EPOLLRDHUP) != 0)
            conn_free(s, c);
        return;
    }
    shutdown(c->fd, SHUT_WR);
    c->state = C_DRAIN;
    if (ep_set(s, c, EPOLLIN | EPOLLRDHUP) != 0)
        conn_free(s, c);
}

static void hs_log(tern_hs_server *s, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void hs_log(tern_hs_server *s, int level, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (s->opt.log)
        s->opt.log(s->opt.arg, level, "handshake daemon: %s", msg);
    else
        fprintf(stderr, "tern handshake daemon: %s\n", msg);
}

/* Warnings about strangers (no or bad authentication, oversized frames):
 * one per HS_WARN_INTERVAL_MS, with the count of those held back, so a
 * flood of them cannot flood the log.  Epoll thread only. */
/* Whether a warning now would be held back (then the caller need not
 * build it: a flood's refusals stay cheap). */
static int hs_warn_held(const tern_hs_server *s)
{
    return s->warn_last_ms && tern_now_ms() - s->warn_last_ms < HS_WARN_INTERVAL_MS;
}

static void hs_warn_stranger(tern_hs_server *s, const char *msg)
{
    uint64_t now = tern_now_ms();
    if (hs_warn_held(s)) {
        s->warn_suppressed++;
        return;
    }
    if (s->warn_suppressed)
        hs_log(s, TERN_LOG_WARN, "%s (and %lu similar warnings in the last %llu s)", msg,
               s->warn_suppressed, (unsigned long long)(now - s->warn_last_ms) / 1000);
    else
        hs_log(s, TERN_LOG_WARN, "%s", msg);
    s->warn_last_ms = now;
    s->warn_suppressed = 0;
}

/* The warnings held back, once their interval is over (no new one came). */
static void hs_warn_flush(tern_hs_server *s)
{
    uint64_t now = tern_now_ms();
    if (!s->warn_suppressed || now - s->warn_last_ms < HS_WARN_INTERVAL_MS)
        return;
    hs_log(s, TERN_LOG_WARN, "%lu more warnings about unauthenticated or malformed "
           "connections in the last %llu s", s->warn_suppressed,
           (unsigned long long)(now - s->warn_last_ms) / 1000);
    s->warn_last_ms = now;
    s->warn_suppressed = 0;
}

static void peer_of(int fd, char *out, size_t outlen)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[NI_MAXHOST] = "?", p[NI_MAXSERV] = "?";
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(out, outlen, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
}

/* One frame of the authentication exchange (auth.h), on the epoll thread:
 * an HMAC over 80 bytes is cheap.  Returns 0 to go on reading frames, 1
 * when the connection went to the writer (or was freed). */
static int auth_frame(tern_hs_server *s, hs_conn *c)
{
    char peer[NI_MAXHOST + NI_MAXSERV + 4], why[512];
    peer_of(c->fd, peer, sizeof peer);
    uint8_t *out = NULL;
    size_t outlen = 0;
    int rc = tern_auth_hs_server_step(s->opt.auth, &c->auth, c->payload, (size_t)c->plen, peer,
                                      &out, &outlen, why, sizeof why);
    free(c->payload);
    c->payload = NULL;
    c->hgot = 0;
    c->plen = c->pgot = 0;
    c->state = C_HDR;
    if (rc < 0)
        hs_warn_stranger(s, why);
    if (rc == TERN_AUTH_STEP_DONE)
        return 0;
    if (!out) {
        conn_free(s, c);
        return 1;
    }
    c->out = out;
    c->outlen = outlen;
    c->outoff = 0;
    c->resume = rc == TERN_AUTH_STEP_REPLY;
    c->state = C_WRITE;
    c->deadline_ms = tern_now_ms() + io_timeout(s);
    conn_write(s, c);
    return 1;
}

/* No request may exceed the largest per-type limit (nor max_frame). */
static uint64_t request_cap(const tern_hs_server *s)
{
    return s->opt.max_frame < TERN_HS_LIMIT_REQUEST ? s->opt.max_frame : TERN_HS_LIMIT_REQUEST;
}

/* A frame over its limit is dropped unread (see docs/protocol.md). */
static void over_limit(tern_hs_server *s, hs_conn *c, const char *what, uint64_t len,
                       uint64_t limit)
{
    char peer[NI_MAXHOST + NI_MAXSERV + 4] = "", why[NI_MAXHOST + NI_MAXSERV + 200];
    if (!hs_warn_held(s))
        peer_of(c->fd, peer, sizeof peer);
    snprintf(why, sizeof why, "peer %s sent a %s frame of %llu bytes, above its limit of %llu "
             "bytes: connection dropped", peer, what, (unsigned long long)len,
             (unsigned long long)limit);
    hs_warn_stranger(s, why);
    conn_free(s, c);
}

/* A frame's 9 first bytes are in (its length already checked against the
 * request cap): check the type's limit, then allocate the payload (docs/protocol.md,
 * Request limits).  Returns 0, or -1 when the connection was dropped. */
static int conn_header(tern_hs_server *s, hs_conn *c)
{
    uint8_t first = c->hdr[8];
    if (c->plen > tern_hs_request_limit(first)) {
        over_limit(s, c, tern_hs_type_name(first > TERN_HS_AUTH ? 0 : first), c->plen,
                   tern_hs_request_limit(first));
        return -1;
    }
    c->payload = malloc(c->plen);
    if (!c->payload) {
        conn_free(s, c);
        return -1;
    }
    c->payload[0] = first;
    c->pgot = 1;
    s->alloc_since_trim += c->plen;
    c->state = C_PAYLOAD;
    return 0;
}

/* A request whose handler never blocks (tern_hs_options.inline_types) is
 * answered here, on the epoll thread: two thread hand-offs fewer, which is
 * what a peer's Metadata fetch waits on while a flood keeps the CPUs busy
 * (docs/protocol.md, Request limits). */
static void conn_answer_here(tern_hs_server *s, hs_conn *c)
{
    conn_process(s, c);
    if (!c->out) {
        conn_free(s, c);
        return;
    }
    c->state = C_WRITE;
    c->deadline_ms = tern_now_ms() + io_timeout(s);
    conn_write(s, c);
}

/* Read header then payload; a complete frame goes to the worker pool (or
 * is answered here, above). */
static void conn_read(tern_hs_server *s, hs_conn *c)
{
    for (;;) {
        uint8_t sink[512];
        void *dst;
        size_t want;
        if (c->state == C_HDR) {
            dst = c->hdr + c->hgot;
            want = sizeof c->hdr - c->hgot;
        } else if (c->state == C_PAYLOAD) {
            dst = c->payload + c->pgot;
            want = (size_t)(c->plen - c->pgot);
        } else { /* C_DRAIN: discard until EOF */
            dst = sink;
            want = sizeof sink;
        }
        ssize_t r = recv(c->fd, dst, want, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r <= 0) { /* EOF (truncated frame) or error */
            if (c->auth.step == 2) { /* it read our proof and left: a wrong secret */
                char peer[NI_MAXHOST + NI_MAXSERV + 4];
                peer_of(c->fd, peer, sizeof peer);
                char why[NI_MAXHOST + NI_MAXSERV + 160];
                snprintf(why, sizeof why, "authentication failed: peer %s did not prove the "
                         "shared secret (it hung up after our challenge; check "
                         "auth_secret_file)", peer);
                hs_warn_stranger(s, why);
            }
            conn_free(s, c);
            return;
        }
        if (c->state == C_DRAIN)
            continue;
        if (c->state == C_HDR) {
            c->hgot += (size_t)r;
            if (c->hgot >= 8 && tern_hs_frame_header(c->hdr, request_cap(s), &c->plen) != 0) {
                over_limit(s, c, "request", c->plen, request_cap(s));
                return;
            }
            if (c->hgot < sizeof c->hdr)
                continue;
            if (conn_header(s, c) != 0)
                return;
        } else {
            c->pgot += (uint64_t)r;
        }
        if (c->pgot < c->plen)
            continue;
        if (c->auth.step) { /* not yet authenticated: this frame is part of it */
            if (auth_frame(s, c))
                return;
            continue;
        }
        if (c->payload[0] <= TERN_HS_PROBE && (s->opt.inline_types >> c->payload[0]) & 1) {
            conn_answer_here(s, c);
            return;
        }
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        c->in_epoll = 0;
        c->state = C_WORK;
        c->is_conn = c->payload[0] == TERN_HS_CONNECTION || c->payload[0] > TERN_HS_PROBE;
        pthread_mutex_lock(&s->mu);
        if (c->is_conn)
            q_push(&s->conn_head, &s->conn_tail, c);
        else
            q_push(&s->work_head, &s->work_tail, c);
        s->queued++;
        pthread_cond_signal(&s->cv);
        /* More requests than idle workers (they block in handlers): add one,
         * up to the cap. */
        if (s->queued > s->idle && s->nworkers < HS_WORKERS &&
            pthread_create(&s->workers[s->nworkers], NULL, worker_main, s) == 0)
            s->nworkers++;
        pthread_mutex_unlock(&s->mu);
        return;
    }
}

static void set_accepting(tern_hs_server *s, int on)
{
    if (s->accepting == on)
        return;
    for (int i = 0; i < s->nlfd; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->lfds[i]};
        epoll_ctl(s->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s->lfds[i], &ev);
    }
    s->accepting = on;
}

static int is_listener(const tern_hs_server *s, const void *p)
{
    return p >= (const void *)&s->lfds[0] && p < (const void *)&s->lfds[s->nlfd];
}

/* Same source address (the port aside). */
static int same_source(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (!b || a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
    return 1;
}

/* How fit an unproven connection is to make room, 0 not at all: one that
 * waits for its next frame with none of it read loses nothing it sent
 * when it is dropped (a kept Notify sender sends again on a new
 * connection, docs/protocol.md).  Kept ones (2: served already) go before
 * fresh ones (1), and a fresh one only after HS_FRESH_MS: its request may
 * be on its way still.  No system call: the scan is over every connection. */
#define HS_FRESH_MS 200
#define HS_EVICT_PROBES 8 /* candidates whose socket is looked at per newcomer */
static int evict_rank(const tern_hs_server *s, const hs_conn *c, uint64_t now)
{
    if (c->state != C_HDR || c->hgot || hs_proven(s, c))
        return 0;
    if (c->kept)
        return 2;
    return now - c->born_ms >= HS_FRESH_MS ? 1 : 0;
}

/* The oldest connection of the best rank (of src, or of all when src is
 * NULL) with nothing in its socket (a request in it is about to be
 * served); NULL when none. */
static hs_conn *evict_pick(const tern_hs_server *s, const struct sockaddr_storage *src)
{
    uint64_t now = tern_now_ms();
    int probes = 0;
    for (int rank = 2; rank >= 1; rank--)
        for (hs_conn *c = s->conns_tail; c && probes < HS_EVICT_PROBES; c = c->prev) {
            if ((src && !same_source(&c->src, src)) || evict_rank(s, c, now) != rank)
                continue;
            int n = 0;
            probes++;
            if (ioctl(c->fd, FIONREAD, &n) == 0 && n == 0)
                return c;
        }
    return NULL;
}

static int source_count(const tern_hs_server *s, const struct sockaddr_storage *src)
{
    int n = 0;
    for (const hs_conn *c = s->conns; c; c = c->next)
        n += !hs_proven(s, c) && same_source(&c->src, src);
    return n;
}

/* Make room for a newcomer from src (NULL: of no particular source): a
 * connection of that source goes when it holds half of max_connections
 * unproven, one of all when the daemon is full.  Returns 0 when there is
 * room now. */
static int make_room(tern_hs_server *s, const struct sockaddr_storage *src)
{
    hs_conn *v;
    if (src && source_count(s, src) >= s->opt.max_connections / 2 &&
        (v = evict_pick(s, src)) != NULL)
        conn_free(s, v);
    if (s->nconns < s->opt.max_connections)
        return 0;
    if ((v = evict_pick(s, NULL)) == NULL)
        return -1;
    conn_free(s, v);
    return 0;
}

static void accept_all(tern_hs_server *s, int lfd)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (s->nconns >= s->opt.max_connections && make_room(s, NULL) != 0)
            break; /* full of busy or proven connections: the backlog waits */
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (tern_accept_starved(errno)) { /* tern/accept.h */
                s->fd_starved = 1;
                s->starved_until_ms = tern_now_ms() + TERN_ACCEPT_PAUSE_MS;
                set_accepting(s, 0); /* until a connection closes, or the pause ends */
            }
            return;
        }
        if (make_room(s, &ss) != 0) { /* not reached: room was made above */
            close(fd);
            continue;
        }
        hs_conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            return;
        }
        c->fd = fd;
        c->src = ss;
        c->born_ms = tern_now_ms();
        c->state = C_HDR;
        c->auth.step = s->opt.auth ? 1 : 0;
        c->deadline_ms = tern_now_ms() + io_timeout(s);
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        else
            s->conns_tail = c;
        s->conns = c;
        s->nconns++;
        if (ep_set(s, c, EPOLLIN | EPOLLRDHUP) != 0)
            conn_free(s, c);
    }
    set_accepting(s, 0); /* at the cap: the backlog waits */
}

static void take_done(tern_hs_server *s)
{
    uint64_t v;
    if (read(s->evfd, &v, sizeof v) < 0) { /* nothing pending */
    }
    pthread_mutex_lock(&s->mu);
    hs_conn *list = s->done_head;
    s->done_head = s->done_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (list) {
        hs_conn *c = list;
        list = c->qnext;
        if (!c->out) { /* no reply: just close */
            conn_free(s, c);
            continue;
        }
        c->state = C_WRITE;
        c->deadline_ms = tern_now_ms() + io_timeout(s);
        conn_write(s, c);
    }
}

/* Drop connections past their deadline; returns ms to the next one. */
static int expire(tern_hs_server *s)
{
    uint64_t now = tern_now_ms(), next = now + 1000;
    for (hs_conn *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (c->state == C_WORK)
            continue;
        if (c->deadline_ms <= now)
            conn_free(s, c);
        else if (c->deadline_ms < next)
            next = c->deadline_ms;
    }
    return (int)(next - now);
}

static void *loop_main(void *arg)
{
    tern_hs_server *s = arg;
    pthread_setname_np(pthread_self(), "tern-hs-loop");
    struct epoll_event evs[128];
    int timeout = 1000;
    while (!atomic_load(&s->stop_loop)) {
        int n = epoll_wait(s->epfd, evs, 128, timeout);
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (is_listener(s, p)) {
                accept_all(s, *(const int *)p);
            } else if (p == &s->evfd) {
                take_done(s);
            } else {
                hs_conn *c = p;
                if (c->state == C_WRITE && !(evs[i].events & (EPOLLERR | EPOLLHUP)))
                    conn_write(s, c);
                else if (c->state == C_WRITE)
                    conn_free(s, c);
                else
                    conn_read(s, c);
            }
        }
        timeout = expire(s);
        if (s->fd_starved && tern_now_ms() >= s->starved_until_ms)
            s->fd_starved = 0;
        else if (s->fd_starved && timeout > TERN_ACCEPT_PAUSE_MS)
            timeout = TERN_ACCEPT_PAUSE_MS;
        if (s->nconns < s->opt.max_connections && !s->fd_starved)
            set_accepting(s, 1);
        hs_warn_flush(s);
        if (s->nconns == 0 && s->alloc_since_trim >= HS_TRIM_BYTES) {
            malloc_trim(0); /* a burst's payloads go back to the system */
            s->alloc_since_trim = 0;
        }
    }
    return NULL;
}

static int listen_on(tern_hs_server *s, char *err, size_t errlen)
{
    char port[8];
    snprintf(port, sizeof port, "%u", s->opt.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *res = NULL;
    int g = getaddrinfo(s->bind_host, port, &hints, &res);
    if (g)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "handshake daemon: bind address %s: %s",
                         s->bind_host, gai_strerror(g));
    int last = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            getsockname(fd, (struct sockaddr *)&ss, &sl);
            s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
            s->lfds[s->nlfd++] = fd;
            freeaddrinfo(res);
            return 0;
        }
        last = errno;
        close(fd);
    }
    freeaddrinfo(res);
    return tern_errf(err, errlen, TERN_ERR_IO,
                     "handshake daemon: cannot listen on %s port %u: %s (is the port in use?)",
                     s->bind_host, s->opt.port, strerror(last));
}

/* A numeric, non-loopback, non-wildcard address: one of several a host may
 * have (server_name names one NIC's address). */
static int one_nic_address(const char *host, int *family)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) {
        *family = AF_INET;
        return a4.s_addr != htonl(INADDR_ANY) && (ntohl(a4.s_addr) >> 24) != 127;
    }
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        *family = AF_INET6;
        return !IN6_IS_ADDR_UNSPECIFIED(&a6) && !IN6_IS_ADDR_LOOPBACK(&a6);
    }
    return 0;
}

/* Listen on the same port on every other address of bind_host's family
 * that an up, non-loopback interface holds (IPv6: not link-local), so the
 * daemon stays reachable while any NIC is (docs/topology.md, Stalled NIC
 * pairs).  An address that cannot be bound is logged and left out. */
static void listen_on_others(tern_hs_server *s)
{
    int family = 0;
    struct ifaddrs *ifs = NULL;
    if (!one_nic_address(s->bind_host, &family) || getifaddrs(&ifs) != 0)
        return;
    for (struct ifaddrs *i = ifs; i && s->nlfd < TERN_HS_MAX_LISTEN; i = i->ifa_next) {
        char host[INET6_ADDRSTRLEN];
        struct sockaddr_storage ss;
        socklen_t sl;
        if (!i->ifa_addr || i->ifa_addr->sa_family != family || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK))
            continue;
        memset(&ss, 0, sizeof ss);
        if (family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            *a = *(const struct sockaddr_in *)i->ifa_addr;
            a->sin_port = htons(s->port);
            sl = sizeof *a;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        } else {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            *a = *(const struct sockaddr_in6 *)i->ifa_addr;
            if (IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr))
                continue;
            a->sin6_port = htons(s->port);
            sl = sizeof *a;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        }
        if (strcmp(host, s->bind_host) == 0)
            continue;
        int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
        if (fd >= 0)
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (fd < 0 || bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, SOMAXCONN) != 0) {
            hs_log(s, TERN_LOG_WARN, "handshake daemon: not answering on %s port %u too: %s",
                   host, (unsigned)s->port, strerror(errno));
            if (fd >= 0)
                close(fd);
            continue;
        }
        snprintf(s->addrs[s->nlfd], TERN_HS_ADDR_MAX, family == AF_INET6 ? "[%s]:%u" : "%s:%u",
                 host, (unsigned)s->port);
        s->lfds[s->nlfd++] = fd;
    }
    freeifaddrs(ifs);
}

static void server_free(tern_hs_server *s)
{
    while (s->conns)
        conn_free(s, s->conns);
    for (int i = 0; i < s->nlfd; i++)
        close(s->lfds[i]);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->evfd >= 0)
        close(s->evfd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

int tern_hs_server_start(const tern_hs_options *opt, tern_hs_server **out, char *err,
                         size_t errlen)
{
    if (!opt || !out)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "handshake daemon: no options");
    tern_hs_server *s = calloc(1, sizeof *s);
    if (!s)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "handshake daemon: out of memory");
    s->opt = *opt;
    tern_strlcpy(s->bind_host, opt->bind_host ? opt->bind_host : "0.0.0.0",
                 sizeof s->bind_host);
    if (!s->opt.max_frame)
        s->opt.max_frame = TERN_HS_DEFAULT_MAX_FRAME;
    if (s->opt.io_timeout_ms <= 0)
        s->opt.io_timeout_ms = TERN_HS_DEFAULT_IO_TIMEOUT_MS;
    if (s->opt.max_connections <= 0)
        s->opt.max_connections = HS_DEFAULT_MAX_CONN;
    s->epfd = s->evfd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int rc = listen_on(s, err, errlen);
    if (rc) {
        server_free(s);
        return rc;
    }
    if (s->opt.every_address)
        listen_on_others(s);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->evfd};
    if (s->epfd < 0 || s->evfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->evfd, &ev) != 0) {
        rc = tern_errf(err, errlen, TERN_ERR_IO, "handshake daemon: epoll setup: %s",
                       strerror(errno));
        server_free(s);
        return rc;
    }
    set_accepting(s, 1);
    pthread_mutex_lock(&s->mu);
    for (; s->nworkers < HS_WORKERS_START; s->nworkers++)
        if (pthread_create(&s->workers[s->nworkers], NULL, worker_main, s) != 0)
            break;
    pthread_mutex_unlock(&s->mu);
    if (s->nworkers == 0 || pthread_create(&s->loop, NULL, loop_main, s) != 0) {
        s->stop_workers = 1;
        pthread_cond_broadcast(&s->cv);
        for (int i = 0; i < s->nworkers; i++)
            pthread_join(s->workers[i], NULL);
        server_free(s);
        return tern_errf(err, errlen, TERN_ERR_IO, "handshake daemon: cannot start threads");
    }
    *out = s;
    return 0;
}

uint16_t tern_hs_server_port(const tern_hs_server *s) { return s ? s->port : 0; }

size_t tern_hs_server_addrs(const tern_hs_server *s, char out[][TERN_HS_ADDR_MAX], size_t max)
{
    size_t n = 0;
    for (int i = 1; s && i < s->nlfd && n < max; i++)
        tern_strlcpy(out[n++], s->addrs[i], TERN_HS_ADDR_MAX);
    return n;
}

void tern_hs_server_stop(tern_hs_server *s)
{
    if (!s)
        return;
    atomic_store(&s->stop_loop, 1);
    uint64_t one = 1;
    if (write(s->evfd, &one, sizeof one) < 0) { /* the loop also wakes each second */
    }
    pthread_join(s->loop, NULL);
    pthread_mutex_lock(&s->mu);
    s->stop_workers = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->nworkers; i++)
        pthread_join(s->workers[i], NULL);
    server_free(s);
}

