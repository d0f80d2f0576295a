/* transports/tcp/tcp_server.c: the target side of the TCP transport.
 *
 * Every accepted connection lives on an I/O thread (tcp_loop.c); each connection is a small state machine driven by
 * non-blocking reads and writes, straight between the socket and
 * registered memory.  Wire format: docs/protocol.md, "TCP data frames".
 *
 * No lock is held across network I/O: a request's range is looked up under
 * the table lock and pinned (tcp_mr_pin), the lock is dropped, and each
 * read or write into the range is bracketed by tcp_mr_io_begin/end, so a
 * deregistration waits only for the transfers on its own range, up to
 * unregister_wait_ms, and then revokes them.
 *
 * Budgets (see docs/protocol.md, "Target budgets"; who may hold a
 * connection is tcp_budget.c's, accepting is tcp_accept.c's):
 *  - a stranger idle for unproven_idle_ms is dropped;
 *  - while a request is under way and the peer is what we wait for, it must
 *    move progress_min_rate bytes per progress_window_ms (averaged over the
 *    window) or the connection is cut;
 *  - replies already owed (requests applied) are sent before a connection
 *    is closed for garbage;
 *  - warnings about strangers are rate-limited, with a count.
 *
 * GPU memory (docs/gpu.md): a request inside registered device memory goes
 * through a per-connection bounce buffer of TCP_GPU_CHUNK bytes, copied to
 * or from the GPU with the host service mem_copy, one chunk at a time. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tcp_server.h"

#define DRAIN_CHUNK (64 * 1024)
/* Replies owed before they are sent, while requests keep coming: they go
 * out together, and no further request is read until the socket took them
 * (a peer that does not read its replies stops being served). */
#define OUT_MAX (16 * TCP_REP_SIZE)

/* ---- closing ------------------------------------------------------------------ */

void tcp_srv_close(tcp_srv_conn *c, int level, const char *why)
{
    tcp_ctx *ctx = c->ctx;
    if (c->io.dead)
        return;
    if (why && level <= TERN_LOG_WARN && !c->proven)
        tcp_warn_limited(ctx, &ctx->rl_garbage, "data connection from %s closed: %s",
                         c->peer, why);
    else if (why)
        tcp_log(ctx, level, "data connection from %s closed: %s", c->peer, why);
    tcp_budget_forget(c);
    epoll_ctl(c->io.w->epfd, EPOLL_CTL_DEL, c->io.fd, NULL);
    close(c->io.fd);
    c->io.fd = -1;
    atomic_fetch_sub(&c->io.w->nconn, 1);
    if (c->mr) {
        tcp_mr_unpin(c->mr);
        c->mr = NULL;
    }
    tcp_io_unlist(&c->io);
}

/* Before closing on purpose: FIN after the owed replies, and what the peer
 * already sent is read away, so the close does not turn into a reset that
 * could overtake the replies. */
static void srv_linger(tcp_srv_conn *c)
{
    shutdown(c->io.fd, SHUT_WR);
    char buf[4096];
    for (int i = 0; i < 64 && c->ctx->sys.recv(c->io.fd, buf, sizeof buf, MSG_DONTWAIT) > 0; i++)
        ;
}

/* The bounce buffer: pinned when the core can give one (full-rate copies). */
static int srv_bounce(tcp_srv_conn *c, int gpu)
{
    if (c->bounce)
        return 0;
    const tern_host_services *h = &c->ctx->host;
    if (TERN_HAS_MEMBER(h->struct_size, tern_host_services, pinned_free) && h->pinned_alloc &&
        (c->bounce = h->pinned_alloc(h->host, gpu, TCP_GPU_CHUNK)) != NULL) {
        c->bounce_pinned = 1;
        return 0;
    }
    c->bounce = malloc(TCP_GPU_CHUNK);
    return c->bounce ? 0 : TERN_ERR_NOMEM;
}

static void srv_bounce_free(tcp_srv_conn *c)
{
    if (c->bounce && c->bounce_pinned)
        c->ctx->host.pinned_free(c->ctx->host.host, c->bounce);
    else
        free(c->bounce);
    c->bounce = NULL;
}

static void srv_free(tcp_io *io)
{
    tcp_srv_conn *c = (tcp_srv_conn *)io;
    if (c->mr)
        tcp_mr_unpin(c->mr);
    free(c->out);
    free(c->drain);
    srv_bounce_free(c);
    free(c);
}

/* ---- output: replies owed, in request order ----------------------------------- */

static int out_append(tcp_srv_conn *c, const void *p, size_t n)
{
    if (c->outlen + n > c->outcap) {
        size_t nc = c->outcap ? c->outcap * 2 : 16 * TCP_REP_SIZE;
        while (nc < c->outlen + n)
            nc *= 2;
        uint8_t *o = realloc(c->out, nc);
        if (!o)
            return TERN_ERR_NOMEM;
        c->out = o;
        c->outcap = nc;
    }
    memcpy(c->out + c->outlen, p, n);
    c->outlen += n;
    return 0;
}

static int out_reply(tcp_srv_conn *c, const tcp_req *q, int status)
{
    uint8_t p[TCP_REP_SIZE];
    tcp_rep r = {.magic = TCP_REP_MAGIC, .version = TCP_WIRE_VERSION, .opcode = q->opcode,
                 .status = status, .id = q->id};
    tcp_rep_encode(p, &r);
    return out_append(c, p, sizeof p);
}

static void srv_progress(tcp_srv_conn *c, size_t n)
{
    c->win_bytes += n;
    c->moved += n;
    c->starved = 0;
    c->last_bytes_ms = tern_kit_now_ms();
}

/* Copy between the bounce buffer and [addr+at, +n) of the pinned device
 * range (to_gpu: into the GPU).  0, TERN_ERR_RANGE when the range was
 * revoked, or the copy's error. */
static int srv_gpu_copy(tcp_srv_conn *c, int to_gpu, uint64_t at, size_t n)
{
    tcp_ctx *ctx = c->ctx;
    if (srv_bounce(c, c->mr->gpu) != 0)
        return TERN_ERR_NOMEM;
    if (tcp_mr_io_begin(c->mr) != 0)
        return TERN_ERR_RANGE;
    char err[256] = "";
    void *dev = (char *)(uintptr_t)c->q.addr + at;
    int rc = to_gpu ? ctx->host.mem_copy(ctx->host.host, dev, c->bounce, n, err, sizeof err)
                    : ctx->host.mem_copy(ctx->host.host, c->bounce, dev, n, err, sizeof err);
    tcp_mr_io_end(c->mr);
    if (rc)
        tcp_log(ctx, TERN_LOG_WARN, "%s of %zu B at 0x%" PRIx64 " for %s: %s",
                to_gpu ? "WRITE into GPU memory" : "READ from GPU memory", n,
                c->q.addr + at, c->peer, err);
    return rc;
}

/* The READ's next bytes: straight from host memory, or from the bounce
 * buffer holding the chunk of device memory at c->off (loaded here). */
static int srv_read_data(tcp_srv_conn *c, struct iovec *iov)
{
    uint64_t left = c->q.length - c->off;
    if (c->mr->gpu < 0) {
        *iov = (struct iovec){(char *)(uintptr_t)c->q.addr + c->off, left};
        return 0;
    }
    uint64_t at = c->off - c->off % TCP_GPU_CHUNK;
    uint64_t chunk = c->q.length - at < TCP_GPU_CHUNK ? c->q.length - at : TCP_GPU_CHUNK;
    if (c->bounce_at != at) {
        int rc = srv_gpu_copy(c, 0, at, chunk);
        if (rc)
            return rc;
        c->bounce_at = at;
    }
    *iov = (struct iovec){c->bounce + (c->off - at), chunk - (c->off - at)};
    return 0;
}

/* Send owed replies and, in S_RPAY, the READ's data after them.
 * 0: as far as the socket takes; <0: the connection is gone. */
static int srv_write(tcp_srv_conn *c)
{
    for (;;) {
        struct iovec iov[2];
        int n = 0;
        if (c->outoff < c->outlen)
            iov[n++] = (struct iovec){c->out + c->outoff, c->outlen - c->outoff};
        int data = c->state == S_RPAY && c->off < c->q.length;
        if (data) {
            int rc = srv_read_data(c, &iov[n++]);
            if (rc) /* the reply is out: the peer learns of it by the connection closing */
                return rc;
        }
        if (!n)
            return 0;
        if (data && tcp_mr_io_begin(c->mr) != 0)
            return TERN_ERR_RANGE;
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        /* Never MSG_ZEROCOPY here: the owed replies' buffer is reused at
         * once, and the READ is over for this side when the call returns,
         * so memory unregistered then could still leave with later bytes. */
        ssize_t k = c->ctx->sys.sendmsg(c->io.fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        int e = errno;
        if (data)
            tcp_mr_io_end(c->mr);
        if (k < 0) {
            if (e == EINTR)
                continue;
            if (e == EAGAIN || e == EWOULDBLOCK) {
                c->starved = 1;
                return 0;
            }
            return TERN_ERR_CLOSED;
        }
        srv_progress(c, (size_t)k);
        size_t left = (size_t)k, o = c->outlen - c->outoff;
        size_t t = left < o ? left : o;
        c->outoff += t;
        left -= t;
        if (c->outoff == c->outlen)
            c->outoff = c->outlen = 0;
        if (data) {
            c->off += left;
            atomic_fetch_add(&c->ctx->st_bytes_out, left);
            if (c->off == c->q.length) {
                tcp_mr_unpin(c->mr);
                c->mr = NULL;
                c->state = S_HDR;
            }
        }
    }
}

/* ---- input --------------------------------------------------------------------- */

/* One recv from the socket: >0 bytes, 0 would block, <0 the connection is
 * gone.  A small read (ahead) that gets fewer bytes than asked for found
 * the socket empty: it is not read again until epoll reports it readable
 * (level-triggered, and EPOLLIN is armed whenever the state reads, see
 * srv_arm), which saves the read that would only say EAGAIN.  A large
 * payload is read on until EAGAIN: more of it arrives meanwhile. */
static ssize_t srv_sock_recv(tcp_srv_conn *c, void *buf, size_t len, int ahead)
{
    for (;;) {
        ssize_t n = c->ctx->sys.recv(c->io.fd, buf, len, MSG_DONTWAIT);
        if (n > 0) {
            srv_progress(c, (size_t)n);
            if (ahead && (size_t)n < len)
                c->dry = c->starved = 1;
            return n;
        }
        if (n == 0)
            return TERN_ERR_CLOSED;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            c->starved = c->dry = 1;
            return 0;
        }
        return TERN_ERR_IO;
    }
}

/* recv through the read-ahead buffer: a small read takes what the socket
 * holds, up to sizeof ra, so a small request and its data (or several
 * requests) cost one system call; a large one goes straight to buf.
 * >0 bytes, 0 would block, <0 the connection is gone. */
static ssize_t srv_recv(tcp_srv_conn *c, void *buf, size_t len)
{
    if (c->ra_off == c->ra_len) {
        if (c->dry) {
            c->starved = 1;
            return 0;
        }
        if (len >= sizeof c->ra)
            return srv_sock_recv(c, buf, len, 0);
        ssize_t n = srv_sock_recv(c, c->ra, sizeof c->ra, 1);
        if (n <= 0)
            return n;
        c->ra_off = 0;
        c->ra_len = (size_t)n;
    }
    size_t n = c->ra_len - c->ra_off < len ? c->ra_len - c->ra_off : len;
    memcpy(buf, c->ra + c->ra_off, n);
    c->ra_off += n;
    return (ssize_t)n;
}

/* Collect `need` bytes of a frame into c->in: 1 complete, 0 not yet, <0 gone. */
static int srv_collect(tcp_srv_conn *c, size_t need)
{
    while (c->have < need) {
        ssize_t n = srv_recv(c, c->in + c->have, need - c->have);
        if (n <= 0)
            return (int)n;
        c->have += (size_t)n;
    }
    return 1;
}

/* Garbage: no byte more is read; owed replies go out, then it closes. */
static void srv_garbage(tcp_srv_conn *c, const char *what)
{
    tcp_ctx *ctx = c->ctx;
    if (c->proven)
        tcp_log(ctx, TERN_LOG_WARN, "closing data connection from %s: %s", c->peer, what);
    else
        tcp_warn_limited(ctx, &ctx->rl_garbage, "closing data connection from %s: %s",
                         c->peer, what);
    c->state = S_CLOSING;
}

static void srv_hello(tcp_srv_conn *c)
{
    tcp_ctx *ctx = c->ctx;
    uint32_t magic = tcp_get32(c->in);
    if (magic == TCP_REQ_MAGIC) { /* a peer without the secret: refuse its request */
        tcp_req q;
        tcp_req_decode(c->in, &q);
        out_reply(c, &q, TERN_ERR_AUTH);
        tcp_warn_limited(ctx, &ctx->rl_auth,
                         "authentication failed: peer %s sent a request without proving "
                         "the shared secret (is auth_secret_file set on the peer?)", c->peer);
        c->state = S_CLOSING;
        return;
    }
    if (magic != TCP_AUTH_HELLO) {
        tcp_warn_limited(ctx, &ctx->rl_auth,
                         "authentication failed: peer %s sent 0x%08x instead of an "
                         "authentication hello (not a tern TCP transport?)", c->peer, magic);
        c->state = S_CLOSING;
        return;
    }
    uint8_t ch[TCP_AUTH_CHALLENGE_SIZE];
    memcpy(c->hello, c->in, sizeof c->hello);
    int rc = tcp_auth_challenge(ctx, c->hello, ch, c->ns);
    if (rc == TERN_ERR_AUTH) { /* not asking for us: say so, answer for no one else */
        out_append(c, ch, sizeof ch);
        tcp_warn_limited(ctx, &ctx->rl_auth,
                         "authentication failed: peer %s asked for another segment than this "
                         "one (%s), or is an older tern: a descriptor that is not ours points "
                         "at this data port", c->peer, ctx->host.server_name);
        c->state = S_CLOSING;
        return;
    }
    if (rc != 0 || out_append(c, ch, sizeof ch) != 0) {
        c->state = S_CLOSING;
        return;
    }
    c->have = 0;
    c->state = S_PROOF;
}

static void srv_proof(tcp_srv_conn *c)
{
    tcp_ctx *ctx = c->ctx;
    int rc = tcp_auth_verify(ctx, c->hello, c->ns, c->in);
    uint8_t v[TCP_AUTH_VERDICT_SIZE];
    tcp_put32(v, TCP_AUTH_VERDICT);
    tcp_put32(v + 4, (uint32_t)(rc == 0 ? 0 : TERN_ERR_AUTH));
    out_append(c, v, sizeof v);
    c->have = 0;
    if (rc) {
        tcp_warn_limited(ctx, &ctx->rl_auth,
                         "authentication failed: peer %s %s (check auth_secret_file on "
                         "both sides)", c->peer,
                         rc == TERN_ERR_PROTOCOL ? "sent something else than a proof"
                                                 : "did not prove the shared secret");
        c->state = S_CLOSING;
        return;
    }
    tcp_budget_prove(c);
    c->state = S_HDR;
}

/* A READ of device memory: its first chunk, before the reply says 0. */
static int srv_gpu_first(tcp_srv_conn *c)
{
    uint64_t n = c->q.length < TCP_GPU_CHUNK ? c->q.length : TCP_GPU_CHUNK;
    int rc = srv_gpu_copy(c, 0, 0, n);
    if (rc == 0)
        c->bounce_at = 0;
    return rc;
}

/* A complete request header in c->in. */
static void srv_header(tcp_srv_conn *c)
{
    tcp_ctx *ctx = c->ctx;
    tcp_req q;
    tcp_req_decode(c->in, &q);
    c->have = 0;
    if (q.magic != TCP_REQ_MAGIC || q.version != TCP_WIRE_VERSION || q.flags != 0 ||
        (q.opcode != TERN_OP_READ && q.opcode != TERN_OP_WRITE)) {
        char what[192];
        snprintf(what, sizeof what, "malformed request header (magic 0x%08x, version %u, "
                 "opcode %u, flags 0x%x); is the peer a tern TCP transport of wire "
                 "version %d?", q.magic, q.version, q.opcode, q.flags, TCP_WIRE_VERSION);
        srv_garbage(c, what);
        return;
    }
    atomic_fetch_add(&ctx->st_req_served, 1);
    c->q = q;
    c->off = 0;
    c->mr = q.length ? tcp_mr_pin(ctx, q.addr, q.length) : NULL;
    c->bounce_at = UINT64_MAX;
    c->gpu_status = 0;
    if (c->mr) {
        tcp_budget_prove(c); /* a request inside registered memory; a refused one proves nothing */
        if (q.opcode == TERN_OP_WRITE) {
            c->state = S_WPAY;
        } else if (c->mr->gpu >= 0 && srv_gpu_first(c) != 0) {
            tcp_mr_unpin(c->mr); /* the first chunk failed: refuse before any payload */
            c->mr = NULL;
            out_reply(c, &q, TERN_ERR_IO);
        } else {
            out_reply(c, &q, 0);
            c->state = S_RPAY;
        }
        return;
    }
    atomic_fetch_add(&ctx->st_refused, 1);
    c->status = q.length ? TERN_ERR_RANGE : TERN_ERR_INVAL;
    tcp_log(ctx, TERN_LOG_DEBUG, "refused %s of %" PRIu64 " B at 0x%" PRIx64 " from %s",
            q.opcode == TERN_OP_WRITE ? "WRITE" : "READ", q.length, q.addr, c->peer);
    if (q.opcode == TERN_OP_WRITE && q.length > TCP_DRAIN_MAX) {
        out_reply(c, &q, c->status); /* too big to skip: answer, then close */
        c->state = S_CLOSING;
    } else if (q.opcode == TERN_OP_WRITE && q.length) {
        c->state = S_DRAIN;
    } else {
        out_reply(c, &q, c->status);
    }
}

/* A WRITE into device memory: receive a chunk into the bounce buffer, copy
 * it to the GPU when full or at the end.  A failed copy is replied once the
 * payload is in (the stream stays in step). */
static int srv_wpay_gpu(tcp_srv_conn *c)
{
    if (srv_bounce(c, c->mr->gpu) != 0)
        return TERN_ERR_NOMEM;
    uint64_t at = c->off - c->off % TCP_GPU_CHUNK;
    uint64_t room = TCP_GPU_CHUNK - (c->off - at);
    if (room > c->q.length - c->off)
        room = c->q.length - c->off;
    ssize_t n = srv_recv(c, c->bounce + (c->off - at), (size_t)room);
    if (n <= 0)
        return (int)n;
    c->off += (uint64_t)n;
    if ((c->off % TCP_GPU_CHUNK == 0 || c->off == c->q.length) && !c->gpu_status) {
        int rc = srv_gpu_copy(c, 1, at, (size_t)(c->off - at));
        if (rc == TERN_ERR_RANGE)
            return rc;
        c->gpu_status = rc ? TERN_ERR_IO : 0;
    }
    if (c->off == c->q.length) {
        atomic_fetch_add(&c->ctx->st_bytes_in, c->q.length);
        tcp_mr_unpin(c->mr);
        c->mr = NULL;
        out_reply(c, &c->q, c->gpu_status);
        c->state = S_HDR;
    }
    return 1;
}

static int srv_wpay(tcp_srv_conn *c)
{
    if (c->mr->gpu >= 0)
        return srv_wpay_gpu(c);
    if (tcp_mr_io_begin(c->mr) != 0)
        return TERN_ERR_RANGE;
    ssize_t n = srv_recv(c, (char *)(uintptr_t)c->q.addr + c->off, c->q.length - c->off);
    tcp_mr_io_end(c->mr);
    if (n <= 0)
        return (int)n;
    c->off += (uint64_t)n;
    tcp_rcvlowat(&c->io, &c->lowat, c->q.length - c->off);
    if (c->off == c->q.length) {
        atomic_fetch_add(&c->ctx->st_bytes_in, c->q.length);
        tcp_mr_unpin(c->mr);
        c->mr = NULL;
        out_reply(c, &c->q, 0);
        c->state = S_HDR;
    }
    return 1;
}

static int srv_drain(tcp_srv_conn *c)
{
    if (!c->drain && !(c->drain = malloc(DRAIN_CHUNK)))
        return TERN_ERR_NOMEM;
    uint64_t left = c->q.length - c->off;
    ssize_t n = srv_recv(c, c->drain, left < DRAIN_CHUNK ? (size_t)left : DRAIN_CHUNK);
    if (n <= 0)
        return (int)n;
    c->off += (uint64_t)n;
    if (c->off == c->q.length) {
        out_reply(c, &c->q, c->status);
        c->state = S_HDR;
        free(c->drain);
        c->drain = NULL;
    }
    return 1;
}

/* Read and apply requests until the socket is empty or replies pile up.
 * 0, or <0 when the connection is gone. */
static int srv_read(tcp_srv_conn *c)
{
    for (;;) {
        int rc;
        switch (c->state) {
        case S_HELLO:
            rc = srv_collect(c, c->have < TCP_REQ_SIZE ? TCP_REQ_SIZE : TCP_AUTH_HELLO_SIZE);
            if (rc == 1 && c->have == TCP_REQ_SIZE && tcp_get32(c->in) == TCP_AUTH_HELLO)
                continue; /* the rest of the hello */
            if (rc == 1)
                srv_hello(c);
            break;
        case S_PROOF:
            rc = srv_collect(c, TCP_AUTH_PROOF_SIZE);
            if (rc == 1)
                srv_proof(c);
            break;
        case S_HDR:
            if (c->outlen - c->outoff >= OUT_MAX)
                return 0; /* send these replies first: the initiator waits for them */
            rc = srv_collect(c, TCP_REQ_SIZE);
            if (rc == 1)
                srv_header(c);
            break;
        case S_WPAY:
            rc = srv_wpay(c);
            break;
        case S_DRAIN:
            rc = srv_drain(c);
            break;
        default: /* S_RPAY, S_CLOSING: nothing to read now */
            return 0;
        }
        if (rc <= 0)
            return rc;
    }
}

/* The events we wait for, from the state.  Requests already in the
 * read-ahead buffer are invisible to epoll: while some wait there, the
 * connection also waits for EPOLLOUT, which comes at once when the socket
 * takes bytes (or when the owed replies it waits for anyway have gone). */
static void srv_arm(tcp_srv_conn *c)
{
    int reading = c->state != S_RPAY && c->state != S_CLOSING &&
                  !(c->state == S_HDR && c->outlen - c->outoff >= OUT_MAX);
    int pending = c->outoff < c->outlen || c->state == S_RPAY ||
                  (reading && c->ra_off < c->ra_len);
    uint32_t ev = (reading ? EPOLLIN : 0) | (pending ? EPOLLOUT : 0);
    if (ev != c->events) {
        tcp_io_mod(&c->io, ev);
        c->events = ev;
    }
}

static void srv_pump(tcp_srv_conn *c)
{
    for (int round = 0; round < 64; round++) {
        int st = c->state;
        size_t owed = c->outlen - c->outoff;
        uint64_t moved = c->moved;
        int rc = srv_read(c);
        if (rc == 0)
            rc = srv_write(c);
        if (rc < 0) {
            tcp_srv_close(c, rc == TERN_ERR_RANGE ? TERN_LOG_INFO : TERN_LOG_DEBUG,
                      rc == TERN_ERR_RANGE ? "its buffer was deregistered during a transfer"
                      : rc == TERN_ERR_CLOSED ? NULL : tcp_errname(rc));
            return;
        }
        if (c->state == S_CLOSING && c->outoff == c->outlen) {
            srv_linger(c); /* owed replies are out */
            tcp_srv_close(c, TERN_LOG_DEBUG, NULL);
            return;
        }
        /* A whole request served (header in, data out) leaves the state
         * where it was: the bytes moved tell that apart from a socket that
         * took nothing, so the next request waiting in the read-ahead
         * buffer is served now, not after another epoll_wait. */
        if (c->state == st && c->outlen - c->outoff == owed && c->moved == moved)
            break; /* nothing moved: wait for the socket */
        if (c->starved)
            break;
    }
    srv_arm(c);
}

static void srv_on_event(tcp_io *io, uint32_t ev)
{
    tcp_srv_conn *c = (tcp_srv_conn *)io;
    if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
        c->dry = 0;
    c->starved = 0;
    srv_pump(c);
}

static int srv_busy(const tcp_srv_conn *c)
{
    return c->state == S_WPAY || c->state == S_DRAIN || c->state == S_RPAY ||
           c->state == S_CLOSING || c->have > 0 || c->outoff < c->outlen ||
           c->ra_off < c->ra_len;
}

static void srv_on_tick(tcp_io *io, uint64_t now)
{
    tcp_srv_conn *c = (tcp_srv_conn *)io;
    tcp_ctx *ctx = c->ctx;
    /* A newer stranger evicted it (tcp_budget.c).  One that proved itself
     * since (its request had not arrived when it was chosen as idle) is
     * established now: its stranger slot is free already, so it stays. */
    if (atomic_load(&c->evict) && !c->proven) {
        tcp_srv_close(c, TERN_LOG_DEBUG, "evicted to make room");
        return;
    }
    if (!c->proven && ctx->opt_unproven_idle_ms > 0 &&
        tcp_since(now, c->born_ms) > (uint64_t)ctx->opt_unproven_idle_ms) {
        tcp_srv_close(c, TERN_LOG_DEBUG, "a stranger that proved nothing (unproven_idle_ms)");
        return;
    }
    if (!srv_busy(c)) {
        c->win_start = now;
        c->win_bytes = 0;
        c->last_bytes_ms = now;
        return;
    }
    uint64_t win = (uint64_t)ctx->opt_progress_window_ms;
    if (c->starved && tcp_since(now, c->last_bytes_ms) > (uint64_t)ctx->io_timeout_ms) {
        atomic_fetch_add(&ctx->st_slow_cut, 1);
        tcp_srv_close(c, TERN_LOG_WARN, "no progress for io_timeout");
        return;
    }
    if (tcp_since(now, c->win_start) < win)
        return;
    if (ctx->opt_progress_min_rate && c->starved &&
        c->win_bytes * 1000 < ctx->opt_progress_min_rate * win) {
        atomic_fetch_add(&ctx->st_slow_cut, 1);
        tcp_warn_limited(ctx, &ctx->rl_slow,
                         "cutting data connection from %s: %" PRIu64 " B in %" PRIu64
                         " ms, below progress_min_rate %" PRIu64 " B/s", c->peer,
                         c->win_bytes, tcp_since(now, c->win_start), ctx->opt_progress_min_rate);
        tcp_srv_close(c, TERN_LOG_DEBUG, NULL);
        return;
    }
    c->win_start = now;
    c->win_bytes = 0;
}

int tcp_srv_is_conn(const tcp_io *io)
{
    return io->on_event == srv_on_event;
}

void tcp_srv_begin(tcp_srv_conn *c)
{
    c->io.on_event = srv_on_event;
    c->io.on_tick = srv_on_tick;
    c->io.on_free = srv_free;
    c->state = c->ctx->auth ? S_HELLO : S_HDR;
    c->lowat = 1; /* a new socket's */
    c->born_ms = c->win_start = c->last_bytes_ms = tern_kit_now_ms();
}
