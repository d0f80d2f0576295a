/* tests/transports/test_tcp_transport_wire.c: the TCP transport's suite,
 * continued (same test program as test_tcp_transport.c): the target against
 * a hostile or broken peer on the raw wire, and its socket options. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/tcp.h>
#include <sys/stat.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "desc/desc.h"
#include "tern/tern.h"
#include "tern/transport.h"
#include "tcp_harness.h"

/* ---- raw wire: the target against a hostile or broken peer ---------------- */

static int raw_connect(inst *tg)
{
    tern_desc *blob = tern_desc_new();
    T->segment_describe(tg->ctx, blob);
    uint64_t port = 0;
    tern_desc_get_u64(blob, "port", &port);
    tern_desc_free(blob);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void raw_req(uint8_t *h, uint32_t magic, int ver, int op, uint64_t addr, uint64_t len)
{
    memset(h, 0, 32);
    put_le(h, magic, 4);
    h[4] = (uint8_t)ver;
    h[5] = (uint8_t)op;
    put_le(h + 8, 42, 8);
    put_le(h + 16, addr, 8);
    put_le(h + 24, len, 8);
}

/* Wait for the target to close the connection: recv returns 0 (or reset). */
static int raw_closed(int fd)
{
    uint8_t b[64];
    ssize_t n;
    while ((n = recv(fd, b, sizeof b, 0)) > 0)
        ;
    return n == 0 || errno == ECONNRESET;
}

Test(tcp_transport, malformed_frames_close_only_that_connection)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    region r;
    region_make(tg, &r, 65536);
    uint64_t b = (uint64_t)(uintptr_t)r.buf;
    uint8_t h[32];

    int fd = raw_connect(tg); /* bad magic */
    raw_req(h, 0xdeadbeef, 1, TERN_WRITE, b, 16);
    cr_assert_eq(send(fd, h, 32, 0), 32);
    cr_assert(raw_closed(fd), "bad magic closes the connection");
    close(fd);

    fd = raw_connect(tg); /* wrong version, then bad opcode */
    raw_req(h, 0x51524E54u, 9, TERN_READ, b, 16);
    send(fd, h, 32, 0);
    cr_assert(raw_closed(fd));
    close(fd);
    fd = raw_connect(tg);
    raw_req(h, 0x51524E54u, 1, 7, b, 16);
    send(fd, h, 32, 0);
    cr_assert(raw_closed(fd));
    close(fd);

    fd = raw_connect(tg); /* zero length: an INVAL reply, connection kept */
    raw_req(h, 0x51524E54u, 1, TERN_READ, b, 0);
    send(fd, h, 32, 0);
    uint8_t rep[24];
    cr_assert_eq(recv(fd, rep, 24, MSG_WAITALL), 24);
    int32_t st = (int32_t)(rep[8] | rep[9] << 8 | rep[10] << 16 | (uint32_t)rep[11] << 24);
    cr_assert_eq(st, TERN_ERR_INVAL);
    /* a refused WRITE too big to drain: closed without a reply */
    raw_req(h, 0x51524E54u, 1, TERN_WRITE, b + 65536, 1ull << 40);
    send(fd, h, 32, 0);
    cr_assert(raw_closed(fd));
    close(fd);

    fd = raw_connect(tg); /* a truncated header, then the peer vanishes */
    send(fd, h, 10, 0);
    close(fd);

    /* the target still serves a well-behaved peer and nothing was touched */
    void *ep = ep_to(in, tg);
    uint8_t src[100];
    memset(src, 9, sizeof src);
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, b, sizeof src, NULL, 0), 0);
    for (size_t i = sizeof src; i < r.len; i++)
        cr_assert_eq(r.buf[i], 0);
    region_check_canaries(&r);
    T->ep_close(ep);
    region_free(tg, &r);
    inst_free(in);
    inst_free(tg);
}

/* ---- payload_spin_us: a receiver with a large payload under way polls ----- */

static int list_tids(int *tids, int max)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) && n < max;)
        if (e->d_name[0] != '.')
            tids[n++] = atoi(e->d_name);
    if (d)
        closedir(d);
    return n;
}

/* The voluntary context switches (sleeps) of the threads in tids. */
static long sleeps_of(const int *tids, int n)
{
    long sum = 0;
    for (int i = 0; i < n; i++) {
        char path[64], line[128];
        snprintf(path, sizeof path, "/proc/self/task/%d/status", tids[i]);
        FILE *f = fopen(path, "r");
        cr_assert_not_null(f, "%s", path);
        long v;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
                sum += v;
        fclose(f);
    }
    return sum;
}

/* A target with one I/O thread receives 1 MiB WRITE payloads that this test
 * sends on the raw wire in 16 KiB pieces 200 us apart (a sender slower than
 * the receiver, as a NIC is): how often that thread slept per payload.  The
 * bytes are checked. */
static double target_sleeps_per_payload(const char *spin_us)
{
    enum { LEN = 1 << 20, PIECE = 16 << 10, ROUNDS = 3 };
    int before[256], nb = list_tids(before, 256);
    inst *tg = inst_new("io_threads", "1", "payload_spin_us", spin_us, NULL);
    int after[256], na = list_tids(after, 256), mine[8], nmine = 0;
    for (int i = 0; i < na; i++) {
        int old = 0;
        for (int j = 0; j < nb; j++)
            old |= after[i] == before[j];
        if (!old && nmine < 8)
            mine[nmine++] = after[i];
    }
    cr_assert_geq(nmine, 1, "the target started no thread");
    region r;
    region_make(tg, &r, LEN);
    uint8_t *src = malloc(LEN), h[32], rep[24];
    int fd = raw_connect(tg);
    long slept = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (size_t i = 0; i < LEN; i++)
            src[i] = (uint8_t)(i * 29 + round);
        raw_req(h, 0x51524E54u, 1, TERN_WRITE, (uint64_t)(uintptr_t)r.buf, LEN);
        cr_assert_eq(send(fd, h, 32, 0), 32);
        long s0 = sleeps_of(mine, nmine);
        for (size_t off = 0; off < LEN; off += PIECE) {
            cr_assert_eq(send(fd, src + off, PIECE, 0), PIECE);
            nanosleep(&(struct timespec){0, 200000}, NULL);
        }
        cr_assert_eq(recv(fd, rep, 24, MSG_WAITALL), 24);
        slept += sleeps_of(mine, nmine) - s0;
        int32_t st = (int32_t)(rep[8] | rep[9] << 8 | rep[10] << 16 | (uint32_t)rep[11] << 24);
        cr_assert_eq(st, 0, "the WRITE failed: %d", st);
        cr_assert_eq(memcmp(r.buf, src, LEN), 0, "round %d: the target's bytes differ", round);
    }
    close(fd);
    region_check_canaries(&r);
    region_free(tg, &r);
    inst_free(tg);
    free(src);
    return (double)slept / ROUNDS;
}

/* Asleep, the receiving thread is woken for every 128 KiB of a payload (its
 * SO_RCVLOWAT) and then for each piece of the last 128 KiB; on loopback the
 * sender pays for each wake in its own system call.  With payload_spin_us
 * it polls while bytes are still to come, and sleeps only when the sender
 * pauses for longer than that. */
Test(tcp_transport, a_receiver_of_a_large_payload_polls_instead_of_sleeping)
{
    double off = target_sleeps_per_payload("0"), on = target_sleeps_per_payload("20000");
    cr_log_info("the target's I/O thread slept %.1f times per 1 MiB payload with "
                "payload_spin_us 0, %.1f with 20000", off, on);
    cr_assert_geq(off, 6.0, "asleep between pieces of a payload, the thread is woken for "
                  "them (%.1f times per payload)", off);
    cr_assert_lt(on * 3, off, "polling, it sleeps far less: %.1f vs %.1f per payload", on, off);
}

Test(tcp_transport, bad_peer_blobs_and_dead_ports)
{
    inst *in = inst_new(NULL);
    void *ep = NULL;
    char err[512] = "";
    tern_desc *blob = tern_desc_new();
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "x", .peer_segment = blob};
    cr_assert_eq(T->ep_open(in->ctx, &p, &ep, err, sizeof err), TERN_ERR_PROTOCOL);
    cr_assert(strstr(err, "port"), "%s", err);
    tern_desc_set_str(blob, "host", "127.0.0.1");
    tern_desc_set_u64(blob, "port", 70000);
    cr_assert_eq(T->ep_open(in->ctx, &p, &ep, err, sizeof err), TERN_ERR_PROTOCOL);
    /* A port nobody listens on: connect fails with a message, no hang. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&sa, sizeof sa);
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    close(fd); /* now free and not listening */
    tern_desc_set_u64(blob, "port", ntohs(sa.sin_port));
    cr_assert_eq(T->ep_open(in->ctx, &p, &ep, err, sizeof err), 0, "%s", err);
    cr_assert_eq(T->ep_connect(ep, NULL, err, sizeof err), TERN_ERR_CONNECT);
    cr_assert(strstr(err, "refused"), "%s", err);
    T->ep_close(ep);
    tern_desc_free(blob);
    inst_free(in);
}

/* fini with endpoints open and slices queued must not hang or crash. */
Test(tcp_transport, fini_with_work_in_flight)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    region r;
    region_make(tg, &r, 4 << 20);
    uint8_t *src = calloc(1, 4 << 20);
    void *ep = ep_to(in, tg);
    tern_slice *s[16];
    for (int i = 0; i < 16; i++)
        s[i] = mk(TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, 4 << 20);
    cr_assert_eq(T->submit(ep, s, 16), 16);
    inst_free(in); /* closes the endpoint and its threads */
    region_free(tg, &r);
    inst_free(tg);
    for (int i = 0; i < 16; i++)
        free(s[i]);
    free(src);
}

/* A port nobody listens on now: bound to port 0, read back, released (no
 * fixed port that another test on this machine could hold). */
static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t sl = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "bind: %s", strerror(errno));
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static long sysctl_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f && fscanf(f, "%ld", &v) != 1)
        v = -1;
    if (f)
        fclose(f);
    return v;
}

/* What getsockopt reports for a buffer size set with setsockopt: the kernel
 * caps the request at the sysctl maximum and doubles it (socket(7)). */
static int sockbuf_expected(long req, const char *max_sysctl)
{
    long max = sysctl_long(max_sysctl);
    return (int)(2 * (max > 0 && req > max ? max : req));
}

/* The data connections of this process to or from TCP port `port`, as the
 * kernel sees them: every socket fd in /proc/self/fd whose peer (dialled
 * side) or local (accepted side) port is `port`.  Listeners are skipped. */
typedef struct sock_opts {
    int n;
    int sndbuf[16], rcvbuf[16], nodelay[16];
} sock_opts;

static void sockets_of(uint16_t port, sock_opts *dialled, sock_opts *accepted)
{
    memset(dialled, 0, sizeof *dialled);
    memset(accepted, 0, sizeof *accepted);
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        int fd = atoi(e->d_name);
        struct stat st;
        if (e->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) || !S_ISSOCK(st.st_mode))
            continue;
        struct sockaddr_storage l, p;
        socklen_t ll = sizeof l, pl = sizeof p;
        if (getsockname(fd, (struct sockaddr *)&l, &ll) || getpeername(fd, (struct sockaddr *)&p, &pl))
            continue;
        if (l.ss_family != AF_INET && l.ss_family != AF_INET6)
            continue;
        uint16_t lp = ntohs(l.ss_family == AF_INET ? ((struct sockaddr_in *)&l)->sin_port
                                                   : ((struct sockaddr_in6 *)&l)->sin6_port);
        uint16_t pp = ntohs(p.ss_family == AF_INET ? ((struct sockaddr_in *)&p)->sin_port
                                                   : ((struct sockaddr_in6 *)&p)->sin6_port);
        sock_opts *o = pp == port ? dialled : lp == port ? accepted : NULL;
        if (!o || o->n == 16)
            continue;
        socklen_t sz = sizeof(int);
        getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o->sndbuf[o->n], &sz);
        sz = sizeof(int);
        getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o->rcvbuf[o->n], &sz);
        sz = sizeof(int);
        getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &o->nodelay[o->n], &sz);
        o->n++;
    }
    closedir(d);
}

/* Options: a chosen port, a wildcard bind advertised as the server name's
 * host, explicit socket buffers, Nagle on, two connections: each observed on
 * the real sockets (getsockopt), and the transfer still correct.  The buffer
 * sizes differ from the kernel's defaults and autotuning's steps, so only
 * setsockopt can produce them. */
Test(tcp_transport, options_are_honoured)
{
    char fixed[8];
    snprintf(fixed, sizeof fixed, "%u", free_port());
    inst *tg = inst_new("port", fixed, "bind", "0.0.0.0", "sndbuf", "90112", "rcvbuf",
                        "102400", "nodelay", "false", NULL);
    inst *in = inst_new("connections", "2", "sndbuf", "77824", NULL);
    tern_desc *blob = tern_desc_new();
    cr_assert_eq(T->segment_describe(tg->ctx, blob), 0);
    uint64_t port = 0;
    tern_desc_get_u64(blob, "port", &port);
    cr_assert_eq(port, (uint64_t)atoi(fixed));
    cr_assert_str_eq(tern_desc_get_str(blob, "host"), "127.0.0.1",
                     "a wildcard bind advertises the server name's host");
    tern_desc_free(blob);
    char out[512];
    cr_assert_eq(T->query(in->ctx, "", out, sizeof out), 0);
    cr_assert(strstr(out, "2 connections per peer"), "%s", out);
    region r;
    region_make(tg, &r, 4 << 20);
    uint8_t *src = malloc(4 << 20), *dst = calloc(1, 4 << 20);
    fill(src, 4 << 20, 21);
    void *ep = ep_to(in, tg);
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, 4 << 20, NULL, 0), 0);
    cr_assert_eq(xfer1(in, ep, TERN_READ, dst, (uint64_t)(uintptr_t)r.buf, 4 << 20, NULL, 0), 0);
    cr_assert_eq(memcmp(src, dst, 4 << 20), 0);
    /* Connections open on demand up to `connections`: a deep queue (64
     * slices at once, three rounds) opens the second one, never a third. */
    for (int round = 0; round < 3; round++) {
        tern_slice *deep[64];
        for (int i = 0; i < 64; i++)
            deep[i] = mk(TERN_WRITE, src + i * 65536, (uint64_t)(uintptr_t)(r.buf + i * 65536),
                         65536);
        run_slices(in, ep, deep, 64, 20000);
        for (int i = 0; i < 64; i++) {
            cr_assert_eq(deep[i]->status, 0, "deep slice %d: %s", i, deep[i]->errmsg);
            free(deep[i]);
        }
    }
    sock_opts dialled, accepted;
    sockets_of((uint16_t)port, &dialled, &accepted);
    cr_assert_eq(dialled.n, 2, "%d data connections dialled to port %u, at most 2 configured "
                 "and a deep queue opens them", dialled.n, (unsigned)port);
    cr_assert_eq(accepted.n, 2, "%d data connections accepted on port %u", accepted.n,
                 (unsigned)port);
    int in_snd = sockbuf_expected(77824, "/proc/sys/net/core/wmem_max");
    int tg_snd = sockbuf_expected(90112, "/proc/sys/net/core/wmem_max");
    int tg_rcv = sockbuf_expected(102400, "/proc/sys/net/core/rmem_max");
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(dialled.sndbuf[i], in_snd, "initiator SO_SNDBUF %d, expected %d",
                     dialled.sndbuf[i], in_snd);
        cr_assert_eq(dialled.nodelay[i], 1, "initiator TCP_NODELAY off (default is on)");
        cr_assert_eq(accepted.sndbuf[i], tg_snd, "target SO_SNDBUF %d, expected %d",
                     accepted.sndbuf[i], tg_snd);
        cr_assert_eq(accepted.rcvbuf[i], tg_rcv, "target SO_RCVBUF %d, expected %d",
                     accepted.rcvbuf[i], tg_rcv);
        cr_assert_eq(accepted.nodelay[i], 0, "target TCP_NODELAY on; nodelay: false");
    }
    /* A second instance cannot take the same port: a clear error. */
    tern_host_services hs = tg->ph.hs;
    const char *k[] = {"port"}, *v[] = {fixed};
    inst tmp = {.ph.nkv = 1};
    tmp.ph.keys[0] = k[0];
    tmp.ph.vals[0] = v[0];
    hs.host = &tmp;
    void *ctx2 = NULL;
    char err[512] = "";
    cr_assert_eq(T->init(&hs, &ctx2, err, sizeof err), TERN_ERR_IO);
    cr_assert(strstr(err, fixed) && strstr(err, "in use"), "%s", err);
    T->ep_close(ep);
    region_free(tg, &r);
    free(src);
    free(dst);
    inst_free(in);
    inst_free(tg);
}
