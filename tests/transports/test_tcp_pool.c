/* tests/transports/test_tcp_pool.c: the TCP transport's fixed pool of I/O threads and
 * its adaptive connections, driven through the plugin's vtable (two plugin
 * instances in this process, a target and an initiator, over loopback).
 *
 *  - many endpoints (each a peer as far as the transport knows) add no
 *    thread, and at most one socket per side while idle; every write is
 *    read back and compared;
 *  - a deep queue on one endpoint opens more connections, never more than
 *    `connections`; unused ones close after idle_close_ms;
 *  - completions come back through the host service complete(), from the
 *    submitting thread or an I/O thread, each slice exactly once;
 *  - a lone small request (the only one on its connection) completes on
 *    the submitting thread, inside submit(), when reply_wait_us allows;
 *    replies later than that wait, and requests that pipeline after lone
 *    ones, still come back, each exactly once. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "desc/desc.h"
#include "plugin_harness.h"
#include "tern/tern.h"
#include "tern/transport.h"

#define PLUGIN_PATH TERN_BUILD_DIR "/lib/tern/libtern-tcp.so"

static void *g_dl;
static const tern_transport *T;

typedef struct inst {
    plugin_host ph; /* first: see plugin_harness.h */
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ndone;
    pthread_t submitter;             /* completions on this thread are counted */
    int on_submitter;
} inst;

/* Each slice's core field points at a counter: exactly once means 1. */
static void h_complete(void *host, tern_slice *s)
{
    inst *in = host;
    int *seen = s->core;
    pthread_mutex_lock(&in->mu);
    (*seen)++;
    in->ndone++;
    in->on_submitter += pthread_equal(pthread_self(), in->submitter) != 0;
    pthread_cond_broadcast(&in->cv);
    pthread_mutex_unlock(&in->mu);
}

static inst *inst_new(const char *k0, ...)
{
    inst *in = calloc(1, sizeof *in);
    pthread_mutex_init(&in->mu, NULL);
    pthread_cond_init(&in->cv, NULL);
    va_list ap;
    va_start(ap, k0);
    in->ctx = plugin_host_start(&in->ph, T, 5000, h_complete, k0, ap);
    va_end(ap);
    return in;
}

static void inst_free(inst *in)
{
    T->fini(in->ctx);
    free(in);
}

/* Wait until `want` slices in all were handed back. */
static void inst_wait(inst *in, int want, int tmo_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += tmo_ms / 1000;
    pthread_mutex_lock(&in->mu);
    while (in->ndone < want)
        if (pthread_cond_timedwait(&in->cv, &in->mu, &ts) != 0)
            break;
    int got = in->ndone;
    pthread_mutex_unlock(&in->mu);
    cr_assert_geq(got, want, "only %d of %d slices came back within %d ms", got, want, tmo_ms);
}

static void *ep_to(inst *from, inst *to)
{
    return plugin_ep_to(T, from->ctx, to->ctx);
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - (d && !strcmp(path, "/proc/self/fd"));
}

static uint64_t query_count(inst *in, const char *what)
{
    char out[1024];
    cr_assert_eq(T->query(in->ctx, "", out, sizeof out), 0);
    const char *p = strstr(out, what);
    cr_assert_not_null(p, "no '%s' in: %s", what, out);
    while (p > out && p[-1] == ' ')
        p--;
    while (p > out && p[-1] >= '0' && p[-1] <= '9')
        p--;
    return strtoull(p, NULL, 10);
}

static void setup(void)
{
    T = plugin_load(PLUGIN_PATH, &g_dl);
    cr_assert_null(T->poll, "slices come back through complete(), not poll()");
    cr_assert_geq(T->abi_minor, 1);
}

static void teardown(void)
{
    dlclose(g_dl);
}

TestSuite(tcp_pool, .init = setup, .fini = teardown, .timeout = 120);

Test(tcp_pool, endpoints_add_no_thread_and_one_socket_each)
{
    enum { NEP = 300, LEN = 4096 };
    /* 300 connections from one source arrive at once: the target's budget
     * for connections that proved nothing yet (16 per source by default,
     * the oldest dropped for a new one) is not what this case is about. */
    inst *tg = inst_new("io_threads", "2", "max_unproven_per_source", "1024", "max_unproven",
                        "1024", NULL),
         *in = inst_new("io_threads", "2", NULL);
    uint8_t *dst = calloc(NEP, LEN), *src = malloc((size_t)NEP * LEN);
    uint8_t *back = calloc(NEP, LEN);
    void *mr;
    tern_mr_keys k;
    char err[256];
    cr_assert_eq(T->mr_register(tg->ctx, dst, (size_t)NEP * LEN, &k, &mr, err, sizeof err), 0);
    for (size_t i = 0; i < (size_t)NEP * LEN; i++)
        src[i] = (uint8_t)(i * 31 + (i >> 12));
    int th0 = count_dir("/proc/self/task"), fd0 = count_dir("/proc/self/fd");
    static void *eps[NEP];
    static tern_slice s[NEP], r[NEP];
    static int seen[NEP], seen_r[NEP];
    for (int i = 0; i < NEP; i++)
        eps[i] = ep_to(in, tg);
    for (int i = 0; i < NEP; i++) {
        s[i] = (tern_slice){.struct_size = sizeof(tern_slice), .opcode = TERN_WRITE,
                            .local = src + (size_t)i * LEN,
                            .remote = (uint64_t)(uintptr_t)(dst + (size_t)i * LEN),
                            .length = LEN, .status = 1, .core = &seen[i]};
        tern_slice *sp = &s[i];
        cr_assert_eq(T->submit(eps[i], &sp, 1), 1);
    }
    inst_wait(in, NEP, 20000);
    for (int i = 0; i < NEP; i++) {
        r[i] = (tern_slice){.struct_size = sizeof(tern_slice), .opcode = TERN_READ,
                            .local = back + (size_t)i * LEN,
                            .remote = (uint64_t)(uintptr_t)(dst + (size_t)i * LEN),
                            .length = LEN, .status = 1, .core = &seen_r[i]};
        tern_slice *sp = &r[i];
        cr_assert_eq(T->submit(eps[i], &sp, 1), 1);
    }
    inst_wait(in, 2 * NEP, 20000);
    usleep(200000);
    int th1 = count_dir("/proc/self/task"), fd1 = count_dir("/proc/self/fd");
    for (int i = 0; i < NEP; i++) {
        cr_assert_eq(seen[i], 1, "write %d handed back %d times", i, seen[i]);
        cr_assert_eq(seen_r[i], 1, "read %d handed back %d times", i, seen_r[i]);
        cr_assert_eq(s[i].status, 0, "write %d: %s", i, s[i].errmsg);
        cr_assert_eq(r[i].status, 0, "read %d: %s", i, r[i].errmsg);
    }
    cr_assert_eq(memcmp(src, dst, (size_t)NEP * LEN), 0, "target memory differs");
    cr_assert_eq(memcmp(src, back, (size_t)NEP * LEN), 0, "data read back differs");
    cr_log_info("%d endpoints: threads %d -> %d, fds %d -> %d", NEP, th0, th1, fd0, fd1);
    cr_assert_eq(th1, th0, "threads grew with endpoints: %d -> %d", th0, th1);
    /* both sides live in this process: one socket each per idle endpoint */
    cr_assert_leq(fd1 - fd0, 2 * NEP, "%d fds for %d idle endpoints", fd1 - fd0, NEP);
    for (int i = 0; i < NEP; i++)
        T->ep_close(eps[i]);
    cr_assert_eq(T->mr_deregister(tg->ctx, mr), 0);
    inst_free(in);
    inst_free(tg);
    free(src);
    free(dst);
    free(back);
}

Test(tcp_pool, a_deep_queue_opens_connections_and_idle_ones_close)
{
    enum { N = 64, LEN = 1 << 20 };
    inst *tg = inst_new(NULL), *in = inst_new("connections", "3", "idle_close_ms", "1500", NULL);
    uint8_t *dst = calloc(N, LEN), *src = malloc((size_t)N * LEN);
    void *mr;
    tern_mr_keys k;
    char err[256];
    cr_assert_eq(T->mr_register(tg->ctx, dst, (size_t)N * LEN, &k, &mr, err, sizeof err), 0);
    for (size_t i = 0; i < (size_t)N * LEN; i++)
        src[i] = (uint8_t)(i * 7 + (i >> 16));
    void *ep = ep_to(in, tg);
    /* The target accepts on its own I/O thread: count fds once it has. */
    for (int i = 0; i < 500 && query_count(tg, "incoming connections") < 1; i++)
        usleep(10000);
    cr_assert_eq(query_count(tg, "incoming connections"), 1, "the target took the connection");
    int fd_one = count_dir("/proc/self/fd");
    cr_assert_eq(query_count(in, "connects"), 1, "ep_connect opens one connection");
    static tern_slice s[N];
    static int seen[N];
    tern_slice *sp[N];
    for (int round = 0; round < 4; round++) {
        memset(seen, 0, sizeof seen);
        pthread_mutex_lock(&in->mu);
        in->ndone = 0;
        pthread_mutex_unlock(&in->mu);
        for (int i = 0; i < N; i++) {
            s[i] = (tern_slice){.struct_size = sizeof(tern_slice), .opcode = TERN_WRITE,
                                .local = src + (size_t)i * LEN,
                                .remote = (uint64_t)(uintptr_t)(dst + (size_t)i * LEN),
                                .length = LEN, .status = 1, .core = &seen[i]};
            sp[i] = &s[i];
        }
        cr_assert_eq(T->submit(ep, sp, N), N);
        inst_wait(in, N, 30000);
        for (int i = 0; i < N; i++)
            cr_assert(seen[i] == 1 && s[i].status == 0, "slice %d: seen %d, %s", i, seen[i],
                      s[i].errmsg);
    }
    cr_assert_eq(memcmp(src, dst, (size_t)N * LEN), 0, "target memory differs");
    uint64_t connects = query_count(in, "connects");
    int fd_busy = count_dir("/proc/self/fd");
    cr_log_info("deep queue: %" PRIu64 " connects, fds %d with one connection, %d after", connects,
                fd_one, fd_busy);
    cr_assert_geq(connects, 2, "a deep queue did not open a second connection");
    cr_assert_leq(fd_busy - fd_one, 2 * 2, "more than `connections` (3) connections were open");
    /* unused for idle_close_ms: back to one connection (both sides' sockets) */
    int fd_now = fd_busy;
    for (int i = 0; i < 150 && fd_now > fd_one; i++) {
        usleep(100000);
        fd_now = count_dir("/proc/self/fd");
    }
    cr_assert_eq(fd_now, fd_one, "idle extra connections did not close (fds %d, %d with one)",
                 fd_now, fd_one);
    /* and the endpoint still works on the one left */
    s[0].status = 1;
    seen[0] = 0;
    pthread_mutex_lock(&in->mu);
    in->ndone = 0;
    pthread_mutex_unlock(&in->mu);
    cr_assert_eq(T->submit(ep, sp, 1), 1);
    inst_wait(in, 1, 10000);
    cr_assert_eq(s[0].status, 0, "%s", s[0].errmsg);
    T->ep_close(ep);
    cr_assert_eq(T->mr_deregister(tg->ctx, mr), 0);
    inst_free(in);
    inst_free(tg);
    free(src);
    free(dst);
}

/* n lone requests on ep, one at a time (each waited for before the next),
 * alternating WRITE and READ of len bytes at the start of dst, each read
 * back and compared; returns how many completed on this thread. */
static int lone_rounds(inst *in, void *ep, uint8_t *dst, int n, uint64_t len)
{
    static uint8_t src[4096], back[4096];
    pthread_mutex_lock(&in->mu);
    in->submitter = pthread_self();
    in->on_submitter = 0;
    pthread_mutex_unlock(&in->mu);
    for (int i = 0; i < n; i++) {
        int seen = 0;
        int op = i % 2 ? TERN_READ : TERN_WRITE; /* a READ reads the WRITE before it */
        for (uint64_t b = 0; op == TERN_WRITE && b < len; b++)
            src[b] = (uint8_t)(i * 13 + b);
        tern_slice s = {.struct_size = sizeof s, .opcode = op, .local = op == TERN_READ ? back : src,
                        .remote = (uint64_t)(uintptr_t)dst, .length = len, .status = 1,
                        .core = &seen};
        tern_slice *sp = &s;
        pthread_mutex_lock(&in->mu);
        in->ndone = 0;
        pthread_mutex_unlock(&in->mu);
        cr_assert_eq(T->submit(ep, &sp, 1), 1);
        inst_wait(in, 1, 20000);
        cr_assert(seen == 1 && s.status == 0, "request %d: seen %d, %s", i, seen, s.errmsg);
        if (op == TERN_READ)
            cr_assert_eq(memcmp(back, src, len), 0, "request %d read back other bytes", i);
    }
    pthread_mutex_lock(&in->mu);
    int on = in->on_submitter;
    pthread_mutex_unlock(&in->mu);
    return on;
}

Test(tcp_pool, a_lone_request_completes_on_the_submitting_thread)
{
    enum { N = 256 };
    uint8_t *dst = calloc(1, 4096);
    void *mr;
    tern_mr_keys k;
    char err[256];
    inst *tg = inst_new(NULL);
    cr_assert_eq(T->mr_register(tg->ctx, dst, 4096, &k, &mr, err, sizeof err), 0);
    /* A wait far longer than any round trip here: only the probes (one in
     * 32, which see whether the caller pipelines) are the I/O thread's. */
    inst *in = inst_new("reply_wait_us", "100000", NULL);
    void *ep = ep_to(in, tg);
    int on = lone_rounds(in, ep, dst, N, 8);
    cr_log_info("lone requests: %d of %d completed on the submitting thread", on, N);
    cr_assert_geq(on, N - N / 32 - 4, "only %d of %d lone requests completed inside submit()",
                  on, N);
    T->ep_close(ep);
    inst_free(in);
    /* reply_wait_us 0: submit() never waits, the I/O thread completes all */
    in = inst_new("reply_wait_us", "0", NULL);
    ep = ep_to(in, tg);
    on = lone_rounds(in, ep, dst, 64, 8);
    cr_assert_eq(on, 0, "%d requests completed inside submit() with reply_wait_us 0", on);
    T->ep_close(ep);
    inst_free(in);
    cr_assert_eq(T->mr_deregister(tg->ctx, mr), 0);
    inst_free(tg);
    free(dst);
}

/* A wait about as long as a round trip: some replies are read by the
 * submitting thread (the connection goes quiet: EPOLLIN off), some come
 * after the wait and must be read by the I/O thread; then single-slice
 * submits that pipeline (not waited for one by one), then lone ones
 * again.  Every slice comes back exactly once with the right bytes. */
Test(tcp_pool, replies_after_the_wait_and_pipelined_ones_are_not_lost)
{
    enum { N = 600, P = 200, LEN = 4096 };
    uint8_t *dst = calloc(P + 1, LEN), *src = malloc((size_t)P * LEN);
    void *mr;
    tern_mr_keys k;
    char err[256];
    inst *tg = inst_new(NULL), *in = inst_new("reply_wait_us", "25", NULL);
    cr_assert_eq(T->mr_register(tg->ctx, dst, (size_t)(P + 1) * LEN, &k, &mr, err, sizeof err),
                 0);
    void *ep = ep_to(in, tg);
    int on = lone_rounds(in, ep, dst, N, 8);
    cr_log_info("reply_wait_us 25: %d of %d read by the submitting thread", on, N);
    static tern_slice s[P];
    static int seen[P];
    for (size_t i = 0; i < (size_t)P * LEN; i++)
        src[i] = (uint8_t)(i * 11 + (i >> 12));
    pthread_mutex_lock(&in->mu);
    in->ndone = 0;
    pthread_mutex_unlock(&in->mu);
    for (int i = 0; i < P; i++) {
        s[i] = (tern_slice){.struct_size = sizeof(tern_slice), .opcode = TERN_WRITE,
                            .local = src + (size_t)i * LEN,
                            .remote = (uint64_t)(uintptr_t)(dst + (size_t)(i + 1) * LEN),
                            .length = LEN, .status = 1, .core = &seen[i]};
        tern_slice *sp = &s[i];
        cr_assert_eq(T->submit(ep, &sp, 1), 1);
    }
    inst_wait(in, P, 20000);
    for (int i = 0; i < P; i++)
        cr_assert(seen[i] == 1 && s[i].status == 0, "pipelined %d: seen %d, %s", i, seen[i],
                  s[i].errmsg);
    cr_assert_eq(memcmp(src, dst + LEN, (size_t)P * LEN), 0, "target memory differs");
    lone_rounds(in, ep, dst, 64, 8);
    T->ep_close(ep);
    cr_assert_eq(T->mr_deregister(tg->ctx, mr), 0);
    inst_free(in);
    inst_free(tg);
    free(src);
    free(dst);
}

/* A stand-in target speaking the TCP data frames (docs/protocol.md, "TCP
 * data frames") by hand: it answers WRITEs of up to 64 bytes at once,
 * except request number `late`, which it answers after late_ms. */
typedef struct slow_target {
    int lfd, port, late, late_ms;
    pthread_t th;
} slow_target;

static int io_full(int fd, void *buf, size_t n, int out)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = out ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
                        : recv(fd, (char *)buf + done, n - done, 0);
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}

static void *slow_target_main(void *arg)
{
    slow_target *t = arg;
    int fd = accept(t->lfd, NULL, NULL);
    uint8_t q[32], pay[64], r[24];
    for (int n = 0; fd >= 0 && io_full(fd, q, sizeof q, 0) == 0; n++) {
        uint64_t len = 0;
        memcpy(&len, q + 24, 8); /* little-endian host, as the frames */
        if (len > sizeof pay || io_full(fd, pay, (size_t)len, 0) != 0)
            break;
        if (n == t->late)
            usleep((useconds_t)t->late_ms * 1000);
        memset(r, 0, sizeof r);
        memcpy(r, "TNRP", 4);    /* 0x50524E54 */
        r[4] = 1;                /* wire version */
        r[5] = q[5];             /* opcode */
        memcpy(r + 16, q + 8, 8); /* id */
        if (io_full(fd, r, sizeof r, 1) != 0)
            break;
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* A waiter that read its replies itself leaves its connection quiet (no
 * EPOLLIN); when a later reply misses its wait, the I/O thread must take
 * over: the slice completes, late, instead of hanging until io_timeout. */
Test(tcp_pool, a_reply_later_than_the_wait_on_a_quiet_connection_arrives)
{
    enum { EARLY = 40 };
    slow_target t = {.late = EARLY, .late_ms = 300};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    t.lfd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(t.lfd >= 0 && bind(t.lfd, (struct sockaddr *)&a, sizeof a) == 0 &&
              listen(t.lfd, 1) == 0 && getsockname(t.lfd, (struct sockaddr *)&a, &al) == 0);
    t.port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&t.th, NULL, slow_target_main, &t), 0);
    inst *in = inst_new("reply_wait_us", "20000", NULL);
    tern_desc *blob = tern_desc_new();
    tern_desc_set_str(blob, "host", "127.0.0.1");
    tern_desc_set_u64(blob, "port", (uint64_t)t.port);
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "slow", .peer_segment = blob};
    void *ep = NULL;
    char err[512] = "";
    cr_assert_eq(T->ep_open(in->ctx, &p, &ep, err, sizeof err), 0, "%s", err);
    cr_assert_eq(T->ep_connect(ep, NULL, err, sizeof err), 0, "%s", err);
    tern_desc_free(blob);
    pthread_mutex_lock(&in->mu);
    in->submitter = pthread_self();
    pthread_mutex_unlock(&in->mu);
    uint8_t src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int i = 0; i <= EARLY; i++) {
        int seen = 0;
        tern_slice s = {.struct_size = sizeof s, .opcode = TERN_WRITE, .local = src,
                        .remote = 0x1000, .length = sizeof src, .status = 1, .core = &seen};
        tern_slice *sp = &s;
        pthread_mutex_lock(&in->mu);
        in->ndone = 0;
        in->on_submitter = 0;
        pthread_mutex_unlock(&in->mu);
        cr_assert_eq(T->submit(ep, &sp, 1), 1);
        inst_wait(in, 1, 3000); /* well before io_timeout (5 s) */
        cr_assert(seen == 1 && s.status == 0, "request %d: seen %d, %s", i, seen, s.errmsg);
        if (i == EARLY) /* 300 ms late, the wait was 20 ms: the I/O thread read it */
            cr_assert_eq(in->on_submitter, 0, "the late reply completed inside submit()");
    }
    T->ep_close(ep);
    inst_free(in);
    pthread_join(t.th, NULL);
    close(t.lfd);
}

