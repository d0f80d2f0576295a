/* tests/system/test_hostile_flood.c: the request flood of
 * test_hostile_control: 200 parallel 400 KB Connection frames while an
 * initiator fetches its target's metadata and moves verified data; both
 * keep at least half their rate and the target's RSS comes back. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "integration_common.h"
#include "control/handshake.h"
#include "hostile_control_harness.h"
#include "base/util.h"

/* ---- request flood ------------------------------------------------------------- */

/* The legitimate peer's work is measured in windows that alternate
 * between no attack and the attack, ROUNDS of each, so that the load other
 * processes put on the machine falls on both sides of the ratio alike.
 * Each window runs one operation for WINDOW_MS: Metadata fetches of the
 * target's descriptor, or 1 MiB WRITE + READ round trips of verified data.
 *
 * The attacker is one thread keeping FLOODERS connections in flight at
 * once (non-blocking sockets, epoll), as an attacking process would: it
 * gets the CPU share of one thread, with the kernel's work for every
 * connection (both ends of loopback TCP) counted in it.  200 blocking
 * threads instead would each get a share as large as the daemon's, which
 * on a machine of two cores measures the scheduler, not the daemon. */
#define FLOODERS 200
#define FLOOD_FRAME (400u << 10)
#define ROUNDS 10
#define WINDOW_MS 300

typedef struct flood {
    uint16_t port;
    const uint8_t *frame; /* header + payload, shared read-only */
    size_t len;
    int pace_ms;          /* 0: back to back; else every connection once per burst */
    atomic_int on;        /* 0: no new connection (an unattacked window) */
    atomic_int busy;      /* connections in flight */
    atomic_int stop;
    atomic_long sent;
    double cpu_ms;        /* the attacking thread's CPU time, kernel work included */
} flood;

typedef struct flood_conn {
    int fd;     /* -1: free */
    size_t off; /* bytes of the frame sent */
} flood_conn;

static void flood_open(flood *f, int ep, flood_conn *c)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(f->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    c->off = 0;
    if (c->fd < 0)
        return;
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
        close(c->fd);
        c->fd = -1;
        return;
    }
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    atomic_fetch_add(&f->busy, 1);
}

static void flood_close(flood *f, flood_conn *c)
{
    close(c->fd); /* also leaves the epoll set */
    c->fd = -1;
    atomic_fetch_add(&f->sent, 1);
    atomic_fetch_sub(&f->busy, 1);
}

/* Send what the socket takes; read and drop what comes back; the frame is
 * done when the daemon closes (it refuses the frame) or errors. */
static void flood_event(flood *f, int ep, flood_conn *c, uint32_t events)
{
    while (c->off < f->len) {
        ssize_t w = send(c->fd, f->frame + c->off, f->len - c->off, MSG_NOSIGNAL);
        if (w > 0) {
            c->off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EAGAIN)
            break;
        flood_close(f, c); /* reset by the daemon */
        return;
    }
    if (c->off == f->len) {
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    }
    char sink[4096];
    ssize_t r;
    while ((r = recv(c->fd, sink, sizeof sink, 0)) > 0) {
    }
    if (r == 0 || (r < 0 && errno != EAGAIN) || (events & (EPOLLERR | EPOLLHUP)))
        flood_close(f, c);
}

static void *flooder(void *arg)
{
    flood *f = arg;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    flood_conn *c = calloc(FLOODERS, sizeof *c);
    cr_assert(ep >= 0 && c);
    for (int k = 0; k < FLOODERS; k++)
        c[k].fd = -1;
    uint64_t next_burst = 0;
    while (!atomic_load(&f->stop)) {
        if (atomic_load(&f->on) && (!f->pace_ms || now_ms() >= next_burst)) {
            for (int k = 0; k < FLOODERS; k++)
                if (c[k].fd < 0)
                    flood_open(f, ep, &c[k]);
            if (f->pace_ms) /* the next burst: on the next multiple of pace_ms */
                next_burst = now_ms() + (uint64_t)f->pace_ms - now_ms() % (uint64_t)f->pace_ms;
        }
        struct epoll_event evs[64];
        int n = epoll_wait(ep, evs, 64, 5);
        for (int e = 0; e < n; e++)
            flood_event(f, ep, evs[e].data.ptr, evs[e].events);
    }
    for (int k = 0; k < FLOODERS; k++)
        if (c[k].fd >= 0)
            flood_close(f, &c[k]);
    free(c);
    close(ep);
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    f->cpu_ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
    return NULL;
}

/* Pause the attack and wait until no flood frame is in flight: the daemon
 * refuses each one as soon as its header arrives, so this is quick unless
 * it reads (or parses) what it should refuse. */
static void flood_pause(flood *f)
{
    atomic_store(&f->on, 0);
    for (uint64_t end = now_ms() + 10000; atomic_load(&f->busy) && now_ms() < end;)
        usleep(1000);
    cr_assert_eq(atomic_load(&f->busy), 0,
                 "the daemon still held %d flood connections 10 s after the attack paused",
                 atomic_load(&f->busy));
}

static long rss_kb(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert(f);
    cr_assert_eq(fscanf(f, "%ld %ld", &pages, &rss), 2);
    fclose(f);
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

typedef struct legit {
    tern_engine *i;
    tern_segment_id seg;
    const char *name;
    uint8_t *src, *dst;
    uint64_t remote;
    long ok, failed;
    char last[512];
} legit;

/* One Metadata fetch of T's descriptor; failures are counted, not fatal. */
static void legit_fetch(legit *l)
{
    char *r = NULL, err[512] = "";
    size_t rl = 0;
    int rc = tern_hs_request(l->name, TERN_HS_METADATA, "{}", 2, &r, &rl, 1 << 20, 5000, 5000,
                             err, sizeof err);
    if (rc == 0 && r && strstr(r, "\"buffers\"")) {
        l->ok++;
    } else {
        l->failed++;
        snprintf(l->last, sizeof l->last, "%s", rc ? err : (r ? r : "(no reply)"));
    }
    free(r);
}

/* One 1 MiB WRITE and READ back, verified (asserts on a failure). */
static void legit_transfer(legit *l)
{
    l->src[0] = (uint8_t)l->ok;
    write_read_back(l->i, l->seg, l->src, l->dst, l->remote, 1 << 20, "a transfer beside the flood");
    l->ok++;
}

/* Operations completed in WINDOW_MS. */
static long legit_window(legit *l, void (*op)(legit *))
{
    long before = l->ok;
    for (uint64_t end = now_ms() + WINDOW_MS; now_ms() < end;)
        op(l);
    return l->ok - before;
}

/* ROUNDS of (unattacked window, attacked window) of one operation; returns
 * attacked / unattacked. */
static double legit_ratio(legit *l, flood *f, void (*op)(legit *), long *base, long *during)
{
    *base = *during = 0;
    for (int r = 0; r < ROUNDS; r++) {
        flood_pause(f);
        *base += legit_window(l, op);
        atomic_store(&f->on, 1);
        *during += legit_window(l, op);
    }
    flood_pause(f);
    return *base ? (double)*during / (double)*base : 0.0;
}

static uint8_t *flood_frame(size_t *len)
{
    /* a Connection whose qp_num array fills 400 KB, valid JSON */
    *len = 8 + FLOOD_FRAME;
    uint8_t *fr = malloc(*len);
    size_t jl = FLOOD_FRAME - 1, at = 9;
    for (int b = 0; b < 8; b++)
        fr[b] = (uint8_t)((uint64_t)FLOOD_FRAME >> (8 * b));
    fr[8] = TERN_HS_CONNECTION;
    at += (size_t)sprintf((char *)fr + at, "{\"qp_num\":[1");
    while (at + 2 <= 8 + jl - 1) {
        memcpy(fr + at, ",1", 2);
        at += 2;
    }
    if (at < 8 + jl - 1)
        fr[at++] = ' ';
    fr[at++] = ']';
    fr[at++] = '}';
    cr_assert_eq(at, *len);
    return fr;
}

static void connection_flood(int pace_ms)
{
    hc_env v = {.transport = "tcp"};
    tern_engine *t = engine_new(&v), *i = engine_new(&v);
    uint8_t *tb = local_buf(t, 1 << 20), *src = local_buf(i, 1 << 20), *dst = local_buf(i, 1 << 20);
    tern_segment_id seg = tern_segment_open(i, tern_engine_server_name(t));
    cr_assert_geq(seg, 0, "%s", tern_engine_last_error(i));
    fill(src, 1 << 20, 3);
    write_read_back(i, seg, src, dst, (uint64_t)(uintptr_t)tb, 1 << 20, "before the flood");

    flood f = {.pace_ms = pace_ms};
    uint8_t *fr = flood_frame(&f.len);
    f.frame = fr;
    char name[64];
    snprintf(name, sizeof name, "%s", tern_engine_server_name(t));
    f.port = (uint16_t)atoi(strrchr(name, ':') + 1);
    legit l = {.i = i, .seg = seg, .name = name, .src = src, .dst = dst,
               .remote = (uint64_t)(uintptr_t)tb};

    long rss0 = rss_kb();
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, flooder, &f), 0);
    long fb, fd, xb, xd;
    double fetch = legit_ratio(&l, &f, legit_fetch, &fb, &fd);
    long fetch_failed = l.failed;
    double xfer = legit_ratio(&l, &f, legit_transfer, &xb, &xd);
    long rss_peak = rss_kb();
    atomic_store(&f.stop, 1);
    pthread_join(th, NULL);
    free(fr);

    /* memory comes back once the daemon is idle (it trims within a second
     * or two of its last connection closing) */
    long rss1 = rss_kb();
    for (uint64_t end = now_ms() + 10000; now_ms() < end && rss1 > rss0 + rss0 / 5;) {
        usleep(100000);
        rss1 = rss_kb();
    }
    double secs = ROUNDS * WINDOW_MS / 1000.0;
    cr_log_info("flood (%s): %ld frames of %u KB, %d in flight at once, attacker CPU %.0f us "
                "a frame; "
                "metadata fetches %.0f/s unattacked, %.0f/s during (%.0f%%), %ld failed; "
                "1 MiB write+read %.1f/s unattacked, %.1f/s during (%.0f%%); RSS %ld KB before, "
                "%ld KB during, %ld KB after",
                pace_ms ? "bursts" : "back to back", atomic_load(&f.sent),
                FLOOD_FRAME >> 10, FLOODERS, 1e3 * f.cpu_ms / (double)atomic_load(&f.sent), fb / secs, fd / secs, 100.0 * fetch, fetch_failed,
                xb / secs, xd / secs, 100.0 * xfer, rss0, rss_peak, rss1);
    cr_assert_eq(fetch_failed, 0, "%ld metadata fetches failed during the flood; last: %s",
                 fetch_failed, l.last);
    cr_assert_gt(fd, 0, "no metadata fetch completed during the flood");
    cr_assert_gt(xd, 0, "no transfer completed during the flood");
    if (pace_ms) { /* the attack in bursts: the peer keeps half its pace at least */
        cr_assert_geq(fetch, 0.5, "metadata fetches during the flood at %.0f%% of their "
                      "unattacked rate (%ld vs %ld in %.1f s)", 100.0 * fetch, fd, fb, secs);
        cr_assert_geq(xfer, 0.5, "transfers during the flood at %.0f%% of their unattacked "
                      "rate (%ld vs %ld in %.1f s)", 100.0 * xfer, xd, xb, secs);
    }
#if defined(__SANITIZE_ADDRESS__)
    /* ASan's allocator keeps freed memory in quarantine: RSS says nothing */
    cr_log_info("built with AddressSanitizer: RSS not checked");
    rss1 = rss_peak = rss0;
#endif
    cr_assert_lt(rss_peak, rss0 + (64l << 10), "RSS grew from %ld KB to %ld KB in the flood",
                 rss0, rss_peak);
    cr_assert_leq(rss1, rss0 + rss0 / 5, "RSS %ld KB after the flood, %ld KB before", rss1, rss0);
    tern_segment_close(i, seg);
    tern_engine_destroy(i);
    tern_engine_destroy(t);
}

/* 200 flooders sending 400 KB frames back to back (each reconnects at
 * once), and in bursts of 200 parallel frames every 100 ms. */
Test(hostile_control, connection_flood_of_large_valid_json) { connection_flood(0); }
Test(hostile_control, connection_flood_in_bursts) { connection_flood(100); }
