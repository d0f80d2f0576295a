/* tests/transports/test_tcp_syscalls.c: the TCP transport's socket calls
 * failing on demand.  This program links the transport's objects
 * (tern_tcp_objects) instead of dlopen()ing the plugin, and starts an
 * instance with tcp_init_sys and a table of its own: each call in it fails
 * as a case asks (an errno, once, N times or always) and otherwise is the
 * C library's.  The other end is an instance with the C library's calls.
 * Every case checks that the failure comes back as a clean error with a
 * message naming it, in bounded time, and that the endpoint works again
 * once the calls do. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "desc/desc.h"
#include "tcp_harness.h"
#include "tcp_internal.h"
#include "tern/transport.h"

extern const tern_transport tern_transport_v1;

/* ---- the failing calls ----------------------------------------------------- */

/* One call's fault: the next `left` calls fail with `err` (-1: every call). */
typedef struct fault {
    atomic_int left, err, calls;
} fault;

static fault f_connect, f_poll, f_ppoll, f_accept4, f_recv, f_recvmsg, f_send, f_sendmsg;
/* connect() says EINPROGRESS even where loopback connected at once, so the
 * transport waits for it with poll() */
static atomic_int connect_in_progress;
/* poll() with a timeout sleeps up to 100 ms of it and fails with EINTR, as
 * under a stream of signals; the timeouts asked for are kept */
static atomic_int poll_interrupted;
static int poll_timeouts[256];
static atomic_int npoll_timeouts;

/* 0: make the call; else the errno to fail it with. */
static int fault_take(fault *f)
{
    atomic_fetch_add(&f->calls, 1);
    int left = atomic_load(&f->left);
    while (left != 0) {
        if (left < 0 || atomic_compare_exchange_weak(&f->left, &left, left - 1))
            return atomic_load(&f->err);
    }
    return 0;
}

static void fault_set(fault *f, int times, int err)
{
    atomic_store(&f->err, err);
    atomic_store(&f->calls, 0);
    atomic_store(&f->left, times);
}

#define FAIL_IF_ASKED(f)          \
    do {                          \
        int e_ = fault_take(&(f)); \
        if (e_) {                 \
            errno = e_;           \
            return -1;            \
        }                         \
    } while (0)

static int x_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    FAIL_IF_ASKED(f_connect);
    int rc = tcp_sys_libc.connect(fd, addr, len);
    if (atomic_load(&connect_in_progress) && (rc == 0 || errno == EINPROGRESS)) {
        errno = EINPROGRESS;
        return -1;
    }
    return rc;
}

static int x_poll(struct pollfd *fds, nfds_t n, int timeout_ms)
{
    if (atomic_load(&poll_interrupted) && timeout_ms != 0) {
        int i = atomic_fetch_add(&npoll_timeouts, 1);
        if (i < 256)
            poll_timeouts[i] = timeout_ms;
        usleep((useconds_t)(timeout_ms > 0 && timeout_ms < 100 ? timeout_ms : 100) * 1000);
        errno = EINTR;
        return -1;
    }
    FAIL_IF_ASKED(f_poll);
    return tcp_sys_libc.poll(fds, n, timeout_ms);
}

static int x_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *m)
{
    FAIL_IF_ASKED(f_ppoll);
    return tcp_sys_libc.ppoll(fds, n, t, m);
}

static int x_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    FAIL_IF_ASKED(f_accept4);
    return tcp_sys_libc.accept4(fd, addr, len, flags);
}

static ssize_t x_recv(int fd, void *buf, size_t len, int flags)
{
    FAIL_IF_ASKED(f_recv);
    return tcp_sys_libc.recv(fd, buf, len, flags);
}

static ssize_t x_recvmsg(int fd, struct msghdr *mh, int flags)
{
    FAIL_IF_ASKED(f_recvmsg);
    return tcp_sys_libc.recvmsg(fd, mh, flags);
}

static ssize_t x_send(int fd, const void *buf, size_t len, int flags)
{
    FAIL_IF_ASKED(f_send);
    return tcp_sys_libc.send(fd, buf, len, flags);
}

static ssize_t x_sendmsg(int fd, const struct msghdr *mh, int flags)
{
    FAIL_IF_ASKED(f_sendmsg);
    return tcp_sys_libc.sendmsg(fd, mh, flags);
}

static const tcp_sys faulty_sys = {
    .connect = x_connect, .poll = x_poll, .ppoll = x_ppoll, .accept4 = x_accept4,
    .recv = x_recv, .recvmsg = x_recvmsg, .send = x_send, .sendmsg = x_sendmsg,
};

/* ---- instances ------------------------------------------------------------- */

static int faulty_init(const tern_host_services *host, void **out, char *err, size_t errlen)
{
    return tcp_init_sys(&faulty_sys, host, out, err, errlen);
}

static void *host_start(plugin_host *h, const tern_transport *t, int io_timeout_ms, ...)
{
    va_list ap;
    va_start(ap, io_timeout_ms);
    void *ctx = plugin_host_start(h, t, io_timeout_ms, inst_complete, NULL, ap);
    va_end(ap);
    return ctx;
}

/* An instance with the failing calls (faulty) or the C library's. */
static inst *start(int faulty, int io_timeout_ms)
{
    static tern_transport faulty_table;
    faulty_table = tern_transport_v1;
    faulty_table.init = faulty_init;
    inst *in = calloc(1, sizeof *in);
    cr_assert_not_null(in);
    pthread_mutex_init(&in->cq_mu, NULL);
    pthread_cond_init(&in->cq_cv, NULL);
    in->ctx = host_start(&in->ph, faulty ? &faulty_table : T, io_timeout_ms);
    return in;
}

static void clear_faults(void)
{
    fault *all[] = {&f_connect, &f_poll, &f_ppoll, &f_accept4,
                    &f_recv,    &f_recvmsg, &f_send, &f_sendmsg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        fault_set(all[i], 0, 0);
    atomic_store(&connect_in_progress, 0);
    atomic_store(&poll_interrupted, 0);
    atomic_store(&npoll_timeouts, 0);
}

static void suite_init(void)
{
    T = &tern_transport_v1;
    clear_faults();
}

TestSuite(tcp_syscalls, .init = suite_init, .timeout = 60);

/* An endpoint from `from` to `to`, opened, not connected. */
static void *ep_open_to(inst *from, inst *to)
{
    tern_desc *blob = tern_desc_new();
    cr_assert_eq(T->segment_describe(to->ctx, blob), 0);
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "peer", .peer_segment = blob};
    void *ep = NULL;
    char err[512] = "";
    int rc = T->ep_open(from->ctx, &p, &ep, err, sizeof err);
    tern_desc_free(blob);
    cr_assert_eq(rc, 0, "ep_open: %s", err);
    return ep;
}

/* One WRITE then one READ of n bytes through ep, both byte-exact. */
static void round_trip(inst *in, void *ep, region *r, size_t n, unsigned seed)
{
    uint8_t *src = malloc(n), *back = malloc(n);
    fill(src, n, seed);
    char msg[128];
    cr_assert_eq(xfer1(in, ep, TERN_OP_WRITE, src, (uint64_t)(uintptr_t)r->buf, n, msg,
                       sizeof msg), 0, "WRITE: %s", msg);
    cr_assert_eq(memcmp(r->buf, src, n), 0);
    cr_assert_eq(xfer1(in, ep, TERN_OP_READ, back, (uint64_t)(uintptr_t)r->buf, n, msg,
                       sizeof msg), 0, "READ: %s", msg);
    cr_assert_eq(memcmp(back, src, n), 0);
    free(src);
    free(back);
}

/* One slice that must fail: its status and message. */
static int xfer_fails(inst *in, void *ep, int op, region *r, size_t n, char *msg, size_t msglen)
{
    uint8_t *buf = calloc(1, n);
    uint64_t t0 = now_ms();
    int st = xfer1(in, ep, op, buf, (uint64_t)(uintptr_t)r->buf, n, msg, msglen);
    cr_assert_lt(now_ms() - t0, 5000, "the failure took %llu ms",
                 (unsigned long long)(now_ms() - t0));
    free(buf);
    return st;
}

/* ---- connect ---------------------------------------------------------------- */

Test(tcp_syscalls, failed_poll_fails_the_connect)
{
    inst *a = start(1, 3000), *b = start(0, 3000);
    region r;
    region_make(b, &r, 4096);
    void *ep = ep_open_to(a, b);
    atomic_store(&connect_in_progress, 1);
    fault_set(&f_poll, 1, ENOMEM);
    char err[512] = "";
    int rc = T->ep_connect(ep, NULL, err, sizeof err);
    cr_assert_eq(f_poll.calls, 1, "the connect was waited for with poll()");
    cr_assert_eq(rc, TERN_ERR_IO, "a failed poll() is no finished connect: rc %d (%s)", rc, err);
    cr_assert(strstr(err, "poll()") && strstr(err, strerror(ENOMEM)) && strstr(err, "127.0.0.1"),
              "the message names the call, its error and the peer: %s", err);
    /* the next try connects: nothing was left half-open */
    rc = T->ep_connect(ep, NULL, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    round_trip(a, ep, &r, 4096, 1);
    T->ep_close(ep);
    region_free(b, &r);
    inst_free(a);
    inst_free(b);
}

Test(tcp_syscalls, interrupted_poll_waits_only_the_time_left, .timeout = 20)
{
    inst *a = start(1, 600), *b = start(0, 600);
    void *ep = ep_open_to(a, b);
    atomic_store(&connect_in_progress, 1);
    atomic_store(&poll_interrupted, 1);
    char err[512] = "";
    uint64_t t0 = now_ms();
    int rc = T->ep_connect(ep, NULL, err, sizeof err);
    uint64_t took = now_ms() - t0;
    atomic_store(&poll_interrupted, 0);
    int n = atomic_load(&npoll_timeouts);
    /* loopback connected at once: the poll(0) at the deadline finds it */
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_geq(n, 3, "poll() was interrupted %d times", n);
    for (int i = 1; i < n && i < 256; i++)
        cr_assert_lt(poll_timeouts[i], poll_timeouts[i - 1],
                     "each retry waits only the time left: %d ms after %d ms", poll_timeouts[i],
                     poll_timeouts[i - 1]);
    cr_assert_leq(poll_timeouts[0], 600);
    cr_assert_lt(took, 600 + 500, "signals stretched the connect deadline to %llu ms",
                 (unsigned long long)took);
    T->ep_close(ep);
    inst_free(a);
    inst_free(b);
}

Test(tcp_syscalls, refused_connect_is_reported_and_the_endpoint_recovers)
{
    inst *a = start(1, 3000), *b = start(0, 3000);
    region r;
    region_make(b, &r, 4096);
    void *ep = ep_open_to(a, b);
    fault_set(&f_connect, 1, ECONNREFUSED);
    char err[512] = "";
    int rc = T->ep_connect(ep, NULL, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_CONNECT, "rc %d (%s)", rc, err);
    cr_assert(strstr(err, "connect to data port") && strstr(err, strerror(ECONNREFUSED)), "%s",
              err);
    /* the next try connects */
    rc = T->ep_connect(ep, NULL, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    round_trip(a, ep, &r, 4096, 2);
    T->ep_close(ep);
    region_free(b, &r);
    inst_free(a);
    inst_free(b);
}

/* ---- the data path ---------------------------------------------------------- */

/* A send that fails once on a connection with no reply yet is sent again
 * on a new one (nothing was applied); one that fails on that one too fails
 * the slice, with the call's error. */
Test(tcp_syscalls, failed_send_fails_the_slice_cleanly)
{
    inst *a = start(1, 3000), *b = start(0, 3000);
    region r;
    region_make(b, &r, 64 << 10);
    void *ep = ep_open_to(a, b);
    char err[512] = "";
    cr_assert_eq(T->ep_connect(ep, NULL, err, sizeof err), 0, "%s", err);
    fault_set(&f_sendmsg, 1, ECONNRESET);
    round_trip(a, ep, &r, 4096, 3);
    cr_assert_geq(f_sendmsg.calls, 2, "the request was sent again");
    int sizes[] = {512, 64 << 10};
    for (int i = 0; i < 2; i++) {
        fault_set(&f_sendmsg, -1, ECONNRESET);
        char msg[128] = "";
        int st = xfer_fails(a, ep, TERN_OP_WRITE, &r, (size_t)sizes[i], msg, sizeof msg);
        cr_assert_eq(st, TERN_ERR_CLOSED, "status %d (%s)", st, msg);
        cr_assert(strstr(msg, "send failed") && strstr(msg, strerror(ECONNRESET)), "%s", msg);
        fault_set(&f_sendmsg, 0, 0);
        round_trip(a, ep, &r, (size_t)sizes[i], 4 + (unsigned)i);
    }
    T->ep_close(ep);
    region_free(b, &r);
    inst_free(a);
    inst_free(b);
}

/* Replies are read with recv() (WRITEs, the rest of a large READ) and
 * recvmsg() (a READ's header with its first data): either failing fails
 * the slice, whichever thread reads (the submitter waiting for a lone
 * reply, or the I/O thread). */
Test(tcp_syscalls, failed_receive_fails_the_slice_cleanly)
{
    inst *a = start(1, 3000), *b = start(0, 3000);
    region r;
    region_make(b, &r, 256 << 10);
    void *ep = ep_open_to(a, b);
    char err[512] = "";
    cr_assert_eq(T->ep_connect(ep, NULL, err, sizeof err), 0, "%s", err);
    int ops[] = {TERN_OP_WRITE, TERN_OP_READ, TERN_OP_WRITE, TERN_OP_READ};
    size_t sizes[] = {512, 512, 256 << 10, 256 << 10};
    for (int i = 0; i < 4; i++) {
        fault_set(&f_recv, -1, ECONNRESET);
        fault_set(&f_recvmsg, -1, ECONNRESET);
        char msg[128] = "";
        int st = xfer_fails(a, ep, ops[i], &r, sizes[i], msg, sizeof msg);
        cr_assert_eq(st, TERN_ERR_CLOSED, "case %d: status %d (%s)", i, st, msg);
        cr_assert(strstr(msg, "receive failed") && strstr(msg, strerror(ECONNRESET)),
                  "case %d: %s", i, msg);
        fault_set(&f_recv, 0, 0);
        fault_set(&f_recvmsg, 0, 0);
        round_trip(a, ep, &r, sizes[i], 10 + (unsigned)i);
    }
    T->ep_close(ep);
    region_free(b, &r);
    inst_free(a);
    inst_free(b);
}

/* The submitter that waits for a lone reply cannot poll its socket: the
 * I/O thread reads the reply instead. */
Test(tcp_syscalls, failed_ppoll_leaves_the_lone_reply_to_the_io_thread)
{
    inst *a = start(1, 3000), *b = start(0, 3000);
    region r;
    region_make(b, &r, 4096);
    void *ep = ep_open_to(a, b);
    char err[512] = "";
    cr_assert_eq(T->ep_connect(ep, NULL, err, sizeof err), 0, "%s", err);
    fault_set(&f_ppoll, -1, ENOMEM);
    for (unsigned i = 0; i < 4; i++)
        round_trip(a, ep, &r, 64, 20 + i);
    cr_assert_gt(f_ppoll.calls, 0, "the lone replies were waited for");
    T->ep_close(ep);
    region_free(b, &r);
    inst_free(a);
    inst_free(b);
}

/* A target out of file descriptors pauses its listener and accepts the
 * waiting connection afterwards: the request is served, late. */
Test(tcp_syscalls, failed_accept_delays_the_connection_without_losing_it)
{
    inst *a = start(0, 3000), *b = start(1, 3000);
    region r;
    region_make(b, &r, 4096);
    fault_set(&f_accept4, 2, EMFILE);
    void *ep = ep_open_to(a, b);
    char err[512] = "";
    cr_assert_eq(T->ep_connect(ep, NULL, err, sizeof err), 0, "%s", err);
    round_trip(a, ep, &r, 4096, 30);
    cr_assert_geq(f_accept4.calls, 3, "accept4 failed twice, then took the connection");
    T->ep_close(ep);
    region_free(b, &r);
    inst_free(a);
    inst_free(b);
}
