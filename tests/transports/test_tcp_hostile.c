/* tests/transports/test_tcp_hostile.c: strangers on the TCP data port while a
 * legitimate peer keeps moving verified data (each round: a batch of
 * WRITEs of a fresh pattern, a batch of READs back, every byte compared).
 *
 * The target engine T runs the tcp transport with its default budgets (see
 * docs/protocol.md, "TCP data frames"), so these cases hold for what users
 * get.  Rates are measured inside the tests with generous margins: the
 * attack may cost the legitimate peer at most half of its rate measured
 * just before it.
 *
 * Cases: a WRITE trickled one byte at a time (register_memory and other
 * peers are not blocked; the trickler is cut by the progress floor); the
 * same while its range is unregistered (bounded wait, no byte lands after
 * it returned); 1,100 idle connections (no thread per stranger; strangers
 * are evicted and dropped; a new peer still gets in); garbage after
 * pipelined requests (the replies of the applied ones come first);
 * hundreds of malformed connections (warnings rate-limited with a count). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../transports/tcp/tcp_wire.h"
#include "desc/segment_desc.h"
#include "fd_limit.h"
#include "tern/tern.h"

#define LEGIT_BLOCK (64u << 10)
#define LEGIT_N 8
#define TBUF (8u << 20)          /* T's buffer; the legitimate peer uses its upper half */
#define LEGIT_OFF (4u << 20)

static char err[1024];

static const char *yaml_target = "server_name: 127.0.0.1:0\n"
                                 "metadata: p2p\n"
                                 "transports:\n"
                                 "  - name: tcp\n"
                                 "io_timeout_ms: 5000\n"
                                 "log_level: error\n";
static const char *yaml_target_warn = "server_name: 127.0.0.1:0\n"
                                      "metadata: p2p\n"
                                      "transports:\n"
                                      "  - name: tcp\n"
                                      "io_timeout_ms: 5000\n"
                                      "log_level: warn\n";
static const char *yaml_peer = "server_name: 127.0.0.1:0\n"
                               "metadata: p2p\n"
                               "transports:\n"
                               "  - name: tcp\n"
                               "io_timeout_ms: 5000\n"
                               "retries: 1\n"
                               "log_level: error\n";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* ---- the target ------------------------------------------------------------------- */

typedef struct target {
    tern_engine *e;
    uint8_t *buf;
    uint16_t port;
} target;

static void target_start(target *t, const char *yaml)
{
    t->e = tern_engine_create_from_yaml(yaml, "target.yaml", err, sizeof err);
    cr_assert_not_null(t->e, "%s", err);
    t->buf = calloc(1, TBUF);
    cr_assert_eq(tern_register_memory(t->e, t->buf, TBUF, NULL), 0, "%s",
                 tern_engine_last_error(t->e));
    char *json = NULL;
    cr_assert_eq(tern_segment_descriptor(t->e, TERN_LOCAL_SEGMENT, &json), 0);
    tern_segment_desc *d = NULL;
    cr_assert_eq(tern_segment_desc_decode(json, strlen(json), &d, err, sizeof err), 0, "%s", err);
    t->port = d->tcp_data_port;
    tern_segment_desc_free(d);
    free(json);
    cr_assert_gt(t->port, 0);
}

static void target_stop(target *t)
{
    tern_engine_destroy(t->e);
    free(t->buf);
}

/* ---- the legitimate peer ---------------------------------------------------------- */

typedef struct legit {
    tern_engine *e;
    tern_segment_id seg;
    uint8_t *src, *dst;
    uint64_t remote;
    unsigned round;
} legit;

static void legit_open(legit *l, target *t)
{
    l->e = tern_engine_create_from_yaml(yaml_peer, "peer.yaml", err, sizeof err);
    cr_assert_not_null(l->e, "%s", err);
    l->src = malloc(LEGIT_N * LEGIT_BLOCK);
    l->dst = malloc(LEGIT_N * LEGIT_BLOCK);
    cr_assert_eq(tern_register_memory(l->e, l->src, LEGIT_N * LEGIT_BLOCK, NULL), 0);
    cr_assert_eq(tern_register_memory(l->e, l->dst, LEGIT_N * LEGIT_BLOCK, NULL), 0);
    l->seg = tern_segment_open(l->e, tern_engine_server_name(t->e));
    cr_assert_geq(l->seg, 0, "%s", tern_engine_last_error(l->e));
    l->remote = (uint64_t)(uintptr_t)(t->buf + LEGIT_OFF);
}

static void legit_close(legit *l)
{
    tern_engine_destroy(l->e);
    free(l->src);
    free(l->dst);
}

static void legit_batch(legit *l, int op, uint8_t *local)
{
    tern_request r[LEGIT_N];
    for (int i = 0; i < LEGIT_N; i++)
        r[i] = (tern_request){.opcode = op, .local = local + (size_t)i * LEGIT_BLOCK,
                              .segment = l->seg, .remote = l->remote + (uint64_t)i * LEGIT_BLOCK,
                              .length = LEGIT_BLOCK};
    tern_batch *b = tern_batch_alloc(l->e, LEGIT_N);
    cr_assert_not_null(b);
    cr_assert_eq(tern_batch_submit(b, r, LEGIT_N), LEGIT_N, "%s", tern_engine_last_error(l->e));
    cr_assert_eq(tern_batch_wait(b, 20000), 0, "legitimate %s failed: %s",
                 op == TERN_WRITE ? "WRITE" : "READ", tern_engine_last_error(l->e));
    cr_assert_eq(tern_batch_free(b), 0);
}

/* One verified round: a fresh pattern written, read back, compared. */
static void legit_round(legit *l)
{
    l->round++;
    for (size_t i = 0; i < LEGIT_N * LEGIT_BLOCK; i++)
        l->src[i] = (uint8_t)(i * 7 + l->round * 13);
    legit_batch(l, TERN_WRITE, l->src);
    memset(l->dst, 0, LEGIT_N * LEGIT_BLOCK);
    legit_batch(l, TERN_READ, l->dst);
    cr_assert_eq(memcmp(l->src, l->dst, LEGIT_N * LEGIT_BLOCK), 0,
                 "round %u: data read back differs from what was written", l->round);
}

/* Verified bytes per second (written and read back) over about secs. */
static double legit_rate(legit *l, double secs)
{
    double t0 = now_s(), t;
    uint64_t bytes = 0;
    do {
        legit_round(l);
        bytes += 2ull * LEGIT_N * LEGIT_BLOCK;
        t = now_s();
    } while (t - t0 < secs);
    return (double)bytes / (t - t0);
}

/* ---- strangers -------------------------------------------------------------------- */

static int dial(uint16_t port, int nonblock)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    cr_assert(rc == 0 || (nonblock && errno == EINPROGRESS), "connect: %s", strerror(errno));
    return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
    cr_assert_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n, "send: %s", strerror(errno));
}

/* Has the peer closed fd (EOF or reset) within ms? */
static int closed_within(int fd, int ms)
{
    double end = now_s() + ms / 1000.0;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)((end - now_s()) * 1000);
        if (poll(&p, 1, left > 0 ? left : 0) > 0) {
            char b[256];
            ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                return 1;
        }
        if (now_s() >= end)
            return 0;
    }
}

/* A WRITE of 1 MiB at addr announced, then one byte every 100 ms. */
typedef struct trickle {
    int fd;
    atomic_int stop, cut;
    atomic_long sent;
    pthread_t th;
} trickle;

static void *trickle_main(void *arg)
{
    trickle *tr = arg;
    uint8_t b = 0xFF;
    while (!atomic_load(&tr->stop)) {
        if (send(tr->fd, &b, 1, MSG_NOSIGNAL) != 1) {
            atomic_store(&tr->cut, 1);
            break;
        }
        atomic_fetch_add(&tr->sent, 1);
        sleep_ms(100);
    }
    return NULL;
}

static void trickle_start(trickle *tr, uint16_t port, uint64_t addr)
{
    memset(tr, 0, sizeof *tr);
    tr->fd = dial(port, 0);
    uint8_t h[TCP_REQ_SIZE];
    tcp_req q = {.magic = TCP_REQ_MAGIC, .version = TCP_WIRE_VERSION, .opcode = TERN_WRITE,
                 .id = 1, .addr = addr, .length = 1u << 20};
    tcp_req_encode(h, &q);
    send_all(tr->fd, h, sizeof h);
    cr_assert_eq(pthread_create(&tr->th, NULL, trickle_main, tr), 0);
}

static void trickle_stop(trickle *tr)
{
    atomic_store(&tr->stop, 1);
    pthread_join(tr->th, NULL);
    close(tr->fd);
}

typedef struct reg_call {
    tern_engine *e;
    void *addr;
    size_t len;
    int unregister;
    atomic_int done;
    int rc;
} reg_call;

static void *reg_main(void *arg)
{
    reg_call *c = arg;
    c->rc = c->unregister ? tern_unregister_memory(c->e, c->addr)
                          : tern_register_memory(c->e, c->addr, c->len, NULL);
    atomic_store(&c->done, 1);
    return NULL;
}

/* Seconds the call took, or -1 when it had not returned after limit_s (the
 * thread is then left behind: the test fails anyway). */
static double timed_reg(reg_call *c, double limit_s)
{
    pthread_t th;
    double t0 = now_s();
    cr_assert_eq(pthread_create(&th, NULL, reg_main, c), 0);
    while (!atomic_load(&c->done) && now_s() - t0 < limit_s)
        sleep_ms(5);
    if (!atomic_load(&c->done))
        return -1;
    pthread_join(th, NULL);
    return now_s() - t0;
}

/* ---- cases -------------------------------------------------------------------------- */

Test(tcp_hostile, trickled_write_blocks_neither_register_nor_other_peers, .timeout = 120)
{
    target t;
    target_start(&t, yaml_target);
    legit l;
    legit_open(&l, &t);
    double before = legit_rate(&l, 1.0);
    trickle tr;
    trickle_start(&tr, t.port, (uint64_t)(uintptr_t)t.buf);
    sleep_ms(300); /* the trickle is under way */

    uint8_t *extra = malloc(1 << 20);
    reg_call rc = {.e = t.e, .addr = extra, .len = 1 << 20};
    double took = timed_reg(&rc, 1.0);
    cr_assert(took >= 0, "tern_register_memory did not return within 1 s during a trickled WRITE");
    cr_assert_eq(rc.rc, 0, "%s", tern_engine_last_error(t.e));

    double during = legit_rate(&l, 1.0);
    double after_start = now_s();
    /* the progress floor (64 KiB/s over 2 s by default) cuts the trickler */
    int cut = closed_within(tr.fd, 10000);
    double cut_s = now_s() - after_start;
    double after = legit_rate(&l, 1.0);
    cr_log_info("trickle: register took %.3f s; legitimate rate %.1f MB/s before, %.1f during, "
                "%.1f after; trickler cut %s (%.1f s after the measurement, %ld bytes sent)",
                took, before / 1e6, during / 1e6, after / 1e6, cut ? "yes" : "no", cut_s,
                (long)atomic_load(&tr.sent));
    double base = before < after ? before : after;
    cr_assert_geq(during, 0.5 * base, "the trickle slowed the legitimate peer to %.0f%% of its "
                  "rate (%.1f of %.1f MB/s)", 100 * during / base, during / 1e6, base / 1e6);
    cr_assert(cut, "a WRITE trickled at 10 B/s was still served 10 s later");
    trickle_stop(&tr);
    cr_assert_eq(tern_unregister_memory(t.e, extra), 0);
    free(extra);
    legit_close(&l);
    target_stop(&t);
}

Test(tcp_hostile, unregister_waits_only_for_its_range_and_only_so_long, .timeout = 120)
{
    target t;
    target_start(&t, yaml_target);
    uint8_t *a = calloc(1, 1 << 20), *b = calloc(1, 1 << 20);
    cr_assert_eq(tern_register_memory(t.e, a, 1 << 20, NULL), 0);
    cr_assert_eq(tern_register_memory(t.e, b, 1 << 20, NULL), 0);
    legit l;
    legit_open(&l, &t);
    trickle tr;
    trickle_start(&tr, t.port, (uint64_t)(uintptr_t)a);
    sleep_ms(300);

    reg_call ub = {.e = t.e, .addr = b, .unregister = 1};
    double tb = timed_reg(&ub, 1.0);
    cr_assert(tb >= 0, "unregistering an untouched range waited for a transfer on another one");
    cr_assert_eq(ub.rc, 0);
    reg_call ua = {.e = t.e, .addr = a, .unregister = 1};
    double ta = timed_reg(&ua, 3.0);
    cr_assert(ta >= 0, "unregistering a range under a stalled transfer did not return within "
              "3 s (unregister_wait_ms is 1 s by default)");
    cr_assert_eq(ua.rc, 0);
    /* From here on no byte may land in a: the trickler keeps sending. */
    uint8_t *snap = malloc(1 << 20);
    memcpy(snap, a, 1 << 20);
    long sent0 = atomic_load(&tr.sent);
    sleep_ms(500);
    cr_assert_eq(memcmp(snap, a, 1 << 20), 0, "bytes reached a range after its unregister "
                 "returned");
    legit_round(&l); /* the others still move */
    cr_log_info("unregister: other range %.3f s, trickled range %.3f s; trickler sent %ld "
                "bytes before, %ld after", tb, ta, sent0, (long)atomic_load(&tr.sent) - sent0);
    trickle_stop(&tr);
    free(snap);
    free(a);
    free(b);
    legit_close(&l);
    target_stop(&t);
}

Test(tcp_hostile, idle_strangers_cost_no_thread_and_do_not_deny_the_port, .timeout = 180)
{
    enum { N = 1100 };
    /* the strangers and, in this process too, the target's side of them */
    test_need_fds(2 * N + 512);
    target t;
    target_start(&t, yaml_target);
    legit l;
    legit_open(&l, &t);
    double before = legit_rate(&l, 1.0);
    int th0 = count_threads();
    static int fds[N];
    for (int i = 0; i < N; i++)
        fds[i] = dial(t.port, 1);
    sleep_ms(500);
    int th1 = count_threads();
    double during = legit_rate(&l, 1.0);
    /* a new peer (new data connections) gets in while they are there */
    legit fresh;
    legit_open(&fresh, &t);
    fresh.remote += LEGIT_N * LEGIT_BLOCK;
    legit_round(&fresh);
    double after = legit_rate(&l, 1.0);
    /* strangers: at most max_unproven_per_source (16) stay, and not past
     * unproven_idle_ms (5 s) */
    int open = 0;
    for (int i = 0; i < N; i++)
        open += !closed_within(fds[i], 0);
    double end = now_s() + 12;
    int still = 0;
    for (int i = 0; i < N; i++) {
        int left = (int)(1000 * (end - now_s()));
        still += !closed_within(fds[i], left > 0 ? left : 0);
    }
    cr_log_info("idle strangers: %d connections, threads %d -> %d, %d still open after 3 s, "
                "%d 12 s later; legitimate rate %.1f MB/s before, %.1f during, %.1f after",
                N, th0, th1, open, still, before / 1e6, during / 1e6, after / 1e6);
    cr_assert_leq(th1 - th0, 8, "%d threads more for %d idle connections", th1 - th0, N);
    cr_assert_leq(open, 64, "%d idle strangers still held after the legitimate runs", open);
    cr_assert_eq(still, 0, "%d idle strangers still held after 12 s", still);
    double base = before < after ? before : after;
    cr_assert_geq(during, 0.5 * base, "idle strangers slowed the legitimate peer to %.0f%%",
                  100 * during / base);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    legit_close(&fresh);
    legit_close(&l);
    target_stop(&t);
}

Test(tcp_hostile, garbage_after_pipelined_requests_gets_the_applied_replies, .timeout = 60)
{
    target t;
    target_start(&t, yaml_target);
    legit l;
    legit_open(&l, &t);
    legit_round(&l);
    int fd = dial(t.port, 0);
    uint8_t msg[3 * (TCP_REQ_SIZE + 8) + TCP_REQ_SIZE];
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        tcp_req q = {.magic = TCP_REQ_MAGIC, .version = TCP_WIRE_VERSION, .opcode = TERN_WRITE,
                     .id = 100 + (uint64_t)i, .addr = (uint64_t)(uintptr_t)(t.buf + 64 * i),
                     .length = 8};
        tcp_req_encode(msg + off, &q);
        off += TCP_REQ_SIZE;
        memset(msg + off, 0x30 + i, 8);
        off += 8;
    }
    memset(msg + off, 0xEE, TCP_REQ_SIZE); /* garbage */
    off += TCP_REQ_SIZE;
    send_all(fd, msg, off);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (int i = 0; i < 3; i++) {
        uint8_t rep[TCP_REP_SIZE];
        ssize_t n = recv(fd, rep, sizeof rep, MSG_WAITALL);
        cr_assert_eq(n, TCP_REP_SIZE, "reply %d of the 3 applied WRITEs before the garbage did "
                     "not come (recv %zd: %s)", i, n, n < 0 ? strerror(errno) : "closed");
        tcp_rep r;
        tcp_rep_decode(rep, &r);
        cr_assert_eq(r.magic, TCP_REP_MAGIC);
        cr_assert_eq(r.id, 100 + (uint64_t)i);
        cr_assert_eq(r.status, 0);
        for (int k = 0; k < 8; k++)
            cr_assert_eq(t.buf[64 * i + k], 0x30 + i, "WRITE %d acknowledged but not applied", i);
    }
    cr_assert(closed_within(fd, 3000), "the connection stayed open after garbage");
    close(fd);
    legit_round(&l);
    legit_close(&l);
    target_stop(&t);
}

Test(tcp_hostile, stranger_warnings_are_rate_limited_with_a_count, .timeout = 60)
{
    enum { N = 300 };
    char path[] = "/tmp/tern-tcp-hostile-log.XXXXXX";
    int logfd = mkstemp(path);
    cr_assert_geq(logfd, 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(logfd, 2);
    target t;
    target_start(&t, yaml_target_warn);
    legit l;
    legit_open(&l, &t);
    uint8_t junk[TCP_REQ_SIZE];
    memset(junk, 0x5A, sizeof junk);
    for (int i = 0; i < N; i++) {
        int fd = dial(t.port, 0);
        send_all(fd, junk, sizeof junk);
        closed_within(fd, 2000);
        close(fd);
    }
    sleep_ms(1100);
    int fd = dial(t.port, 0); /* the next warning carries the count */
    send_all(fd, junk, sizeof junk);
    closed_within(fd, 2000);
    close(fd);
    legit_round(&l);
    legit_close(&l);
    target_stop(&t);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    char line[2048];
    int lines = 0, counted = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strstr(line, "malformed request header"))
            lines++;
        if (strstr(line, "more like it"))
            counted = 1;
    }
    if (f)
        fclose(f);
    unlink(path);
    close(logfd);
    cr_log_info("%d malformed connections: %d warning lines", N + 1, lines);
    cr_assert_geq(lines, 1, "no warning at all about malformed requests");
    cr_assert_leq(lines, 10, "%d warning lines for %d malformed connections", lines, N + 1);
    cr_assert(counted, "no warning said how many were left out");
}

Test(tcp_hostile, a_refused_request_proves_nothing, .timeout = 120)
{
    enum { N = 100 };
    target t;
    target_start(&t, yaml_target);
    legit l;
    legit_open(&l, &t);
    legit_round(&l);
    static int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = dial(t.port, 0);
        uint8_t h[TCP_REQ_SIZE];
        tcp_req q = {.magic = TCP_REQ_MAGIC, .version = TCP_WIRE_VERSION, .opcode = TERN_READ,
                     .id = 7, .addr = 4096, .length = 8}; /* nothing registered there */
        tcp_req_encode(h, &q);
        send_all(fds[i], h, sizeof h);
    }
    /* each gets its refusal, then counts as a stranger: evicted or dropped */
    int refused = 0;
    for (int i = 0; i < N; i++) {
        uint8_t rep[TCP_REP_SIZE];
        struct timeval tv = {3, 0};
        setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        tcp_rep r;
        if (recv(fds[i], rep, sizeof rep, MSG_WAITALL) == TCP_REP_SIZE) {
            tcp_rep_decode(rep, &r);
            refused += r.status == TERN_ERR_RANGE;
        }
    }
    legit_round(&l);
    double end = now_s() + 12;
    int still = 0;
    for (int i = 0; i < N; i++) {
        int left = (int)(1000 * (end - now_s()));
        still += !closed_within(fds[i], left > 0 ? left : 0);
        close(fds[i]);
    }
    legit_round(&l);
    cr_log_info("refused requests: %d of %d answered TERN_ERR_RANGE, %d still open 12 s later",
                refused, N, still);
    cr_assert_eq(still, 0, "%d connections that only sent refused requests were kept", still);
    legit_close(&l);
    target_stop(&t);
}
