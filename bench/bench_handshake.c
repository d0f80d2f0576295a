/* bench/bench_handshake.c (tern-bench-handshake): N clients (default 500)
 * do Connection handshakes at once against tern's concurrent daemon on
 * loopback, and, as the baseline in the same run, against a daemon that
 * serves one connection at a time like the reference.  Both run the same
 * handler: decode the peer's descriptor, optionally block for -w ms (what
 * bringing up QPs costs), answer with ours.
 *
 *   tern-bench-handshake [-n clients] [-w handler_ms] [-s (skip baseline)]
 *                        [-r (baseline first, to check for order effects)] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "desc/handshake_desc.h"
#include "control/handshake.h"
#include "peer/mooncake_compat.h"
#include "tern/errors.h"
#include "base/util.h"

static int work_ms;

/* The passive side of a Connection: peer's descriptor in, ours out. */
static int on_connection(void *arg, int type, const char *json, size_t len, char **reply,
                         size_t *replylen)
{
    (void)arg;
    (void)type;
    tern_handshake_desc peer, me = {0};
    tern_mooncake_hs peer_mk, me_mk = {0};
    char err[256];
    if (tern_mooncake_hs_decode(json, len, &peer, &peer_mk, err, sizeof err) != 0)
        snprintf(me.reply_msg, sizeof me.reply_msg, "%s", err);
    else {
        snprintf(me.local_nic_path, sizeof me.local_nic_path, "%s", peer.peer_nic_path);
        snprintf(me.peer_nic_path, sizeof me.peer_nic_path, "%s", peer.local_nic_path);
        me_mk.nqp = peer_mk.nqp;
        for (size_t i = 0; i < peer_mk.nqp; i++)
            me_mk.qp_num[i] = peer_mk.qp_num[i] + 1000;
        tern_handshake_desc_clear(&peer);
    }
    if (work_ms)
        usleep((useconds_t)work_ms * 1000);
    *reply = tern_mooncake_hs_encode(&me, &me_mk);
    *replylen = strlen(*reply);
    return 0;
}

/* ---- the baseline: one connection at a time, blocking I/O ---- */

typedef struct serial {
    int lfd;
    uint16_t port;
    atomic_int stop;
    pthread_t th;
} serial;

static void serial_one(int fd)
{
    uint8_t hdr[8];
    uint64_t n;
    if (tern_io_read_all(fd, hdr, 8, 60000) || tern_hs_frame_header(hdr, 1 << 20, &n))
        return;
    uint8_t *p = malloc(n);
    int type;
    const char *json;
    size_t jl;
    char *reply = NULL;
    size_t rl = 0;
    if (p && tern_io_read_all(fd, p, n, 60000) == 0 &&
        tern_hs_frame_payload(p, n, &type, &json, &jl, NULL, 0) == 0 &&
        on_connection(NULL, type, json, jl, &reply, &rl) == 0) {
        uint8_t *f;
        size_t fl;
        if (tern_hs_frame_encode(type, reply, rl, &f, &fl) == 0) {
            tern_io_write_all(fd, f, fl, 60000);
            free(f);
        }
    }
    free(reply);
    free(p);
    shutdown(fd, SHUT_WR);
}

static void *serial_main(void *arg)
{
    serial *s = arg;
    while (!atomic_load(&s->stop)) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        serial_one(fd);
        close(fd);
    }
    return NULL;
}

static int serial_start(serial *s)
{
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t sl = sizeof a;
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof a) || listen(s->lfd, SOMAXCONN))
        return -1;
    getsockname(s->lfd, (struct sockaddr *)&a, &sl);
    s->port = ntohs(a.sin_port);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000}; /* so stop is noticed */
    setsockopt(s->lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return pthread_create(&s->th, NULL, serial_main, s);
}

static void serial_stop(serial *s)
{
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    close(s->lfd);
}

/* ---- clients ---- */

typedef struct client {
    char server[64];
    pthread_barrier_t *go;
    int idx;
    int rc;
    uint64_t ns;
    char err[256];
} client;

static void *client_main(void *arg)
{
    client *c = arg;
    tern_handshake_desc d = {0};
    tern_mooncake_hs mk = {.nqp = 2};
    snprintf(d.local_nic_path, sizeof d.local_nic_path, "127.0.0.1:%d@mlx5_0", 30000 + c->idx);
    snprintf(d.peer_nic_path, sizeof d.peer_nic_path, "%s@mlx5_0", c->server);
    strcpy(mk.local_gid, "fe:80:00:00:00:00:00:00:02:11:22:ff:fe:33:44:55");
    mk.qp_num[0] = (uint32_t)(2 * c->idx);
    mk.qp_num[1] = (uint32_t)(2 * c->idx + 1);
    char *j = tern_mooncake_hs_encode(&d, &mk);
    char *reply = NULL;
    size_t rl;
    pthread_barrier_wait(c->go);
    uint64_t t0 = tern_now_ns();
    c->rc = tern_hs_request(c->server, TERN_HS_CONNECTION, j, strlen(j), &reply, &rl, 0, 30000,
                            600000, c->err, sizeof c->err);
    c->ns = tern_now_ns() - t0;
    if (!c->rc) {
        tern_handshake_desc peer;
        tern_mooncake_hs peer_mk;
        if (tern_mooncake_hs_decode(reply, rl, &peer, &peer_mk, c->err, sizeof c->err) != 0 ||
            peer.reply_msg[0] || peer_mk.nqp != 2 || peer_mk.qp_num[0] != mk.qp_num[0] + 1000)
            c->rc = TERN_ERR_PROTOCOL;
        tern_handshake_desc_clear(&peer);
    }
    free(reply);
    free(j);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Run n clients against port; returns wall seconds (negative on failures). */
static double run(const char *label, uint16_t port, int n)
{
    client *c = calloc((size_t)n, sizeof *c);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    uint64_t *lat = calloc((size_t)n, sizeof *lat);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)n + 1);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 * 1024);
    for (int i = 0; i < n; i++) {
        snprintf(c[i].server, sizeof c[i].server, "127.0.0.1:%u", port);
        c[i].go = &go;
        c[i].idx = i;
        if (pthread_create(&th[i], &at, client_main, &c[i]) != 0) {
            fprintf(stderr, "cannot start client thread %d\n", i);
            exit(1);
        }
    }
    pthread_barrier_wait(&go);
    uint64_t t0 = tern_now_ns();
    int ok = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        lat[i] = c[i].ns;
        if (c[i].rc == 0)
            ok++;
        else if (ok + 5 > i)
            fprintf(stderr, "  client %d: %s: %s\n", i, tern_strerror(c[i].rc), c[i].err);
    }
    double wall = (double)(tern_now_ns() - t0) / 1e9;
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    printf("%-44s %d/%d answered in %8.3f s = %9.1f handshakes/s  "
           "(latency p50 %.2f ms, p99 %.2f ms, max %.2f ms)\n",
           label, ok, n, wall, ok / wall, (double)lat[n / 2] / 1e6,
           (double)lat[(n * 99) / 100] / 1e6, (double)lat[n - 1] / 1e6);
    pthread_barrier_destroy(&go);
    free(c);
    free(th);
    free(lat);
    return ok == n ? wall : -wall;
}

static double run_tern(int n)
{
    char err[256];
    tern_hs_options o = {.bind_host = "127.0.0.1", .io_timeout_ms = 60000,
                         .max_connections = n > 1024 ? n : 1024, .handler = on_connection};
    tern_hs_server *s;
    if (tern_hs_server_start(&o, &s, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 0;
    }
    double w = run("tern daemon (epoll + worker pool):", tern_hs_server_port(s), n);
    tern_hs_server_stop(s);
    return w;
}

static double run_baseline(int n)
{
    serial b = {0};
    if (serial_start(&b) != 0) {
        perror("baseline daemon");
        return 0;
    }
    double w = run("baseline (one connection at a time):", b.port, n);
    serial_stop(&b);
    return w;
}

int main(int argc, char **argv)
{
    int n = 500, baseline = 1, reverse = 0, opt;
    while ((opt = getopt(argc, argv, "n:w:srh")) != -1) {
        if (opt == 'n')
            n = atoi(optarg);
        else if (opt == 'w')
            work_ms = atoi(optarg);
        else if (opt == 's')
            baseline = 0;
        else if (opt == 'r')
            reverse = 1;
        else {
            fprintf(stderr, "usage: %s [-n clients (500)] [-w handler_ms (0)] [-s] [-r]\n", argv[0]);
            return 2;
        }
    }
    if (n < 1 || n > 20000 || work_ms < 0) {
        fprintf(stderr, "-n must be 1..20000 and -w >= 0\n");
        return 2;
    }
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < (rlim_t)(4 * n + 64)) {
        rl.rlim_cur = rl.rlim_max < (rlim_t)(4 * n + 64) ? rl.rlim_max : (rlim_t)(4 * n + 64);
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    printf("tern-bench-handshake: %d concurrent Connection handshakes on loopback, handler "
           "blocks %d ms\n",
           n, work_ms);
    double tw = 0, bw = 0;
    for (int pass = 0; pass < 2; pass++) {
        if ((pass == 0) != (reverse != 0)) {
            tw = run_tern(n);
            if (tw == 0)
                return 1;
        } else if (baseline) {
            bw = run_baseline(n);
            if (bw == 0)
                return 1;
        }
    }
    if (tw > 0 && bw > 0)
        printf("ratio: tern daemon %.2fx the baseline's handshakes/s\n", bw / tw);
    return tw > 0 && bw >= 0 ? 0 : 1;
}
