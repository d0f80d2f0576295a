/* tern-bench-notify: the cost of one notification, sender to receiver's
 * queue, in the same run as its baselines:
 *   kept    tern_notify_send: one Notify frame each way on the peer's kept
 *           control connection;
 *   connect the same frame on a new connection per send (tern_hs_request:
 *           connect, frame, reply, close), what every send cost before;
 *   tcp     a plain loopback TCP ping-pong of the same request size (the
 *           floor: two syscalls and a wake-up each way).
 * Prints the median and p99 in microseconds and the ratios to tcp.
 *   usage: tern-bench-notify [rounds] [msg bytes] */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "control/handshake.h"
#include "tern/tern.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, int n, double floor)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    double p50 = v[n / 2], p99 = v[n * 99 / 100];
    printf("%-8s p50 %8.1f us  p99 %8.1f us", what, p50, p99);
    if (floor > 0)
        printf("  p50 / tcp %.2f", p50 / floor);
    printf("\n");
}

typedef struct echo {
    int lfd;
    size_t len;
} echo;

static void *echo_main(void *arg)
{
    echo *e = arg;
    int fd = accept(e->lfd, NULL, NULL);
    char *buf = malloc(e->len);
    for (;;) {
        size_t got = 0;
        while (got < e->len) {
            ssize_t r = read(fd, buf + got, e->len - got);
            if (r <= 0)
                goto out;
            got += (size_t)r;
        }
        if (write(fd, "k", 1) != 1)
            break;
    }
out:
    free(buf);
    close(fd);
    return NULL;
}

static double tcp_pingpong(int rounds, size_t len, double *v)
{
    echo e = {socket(AF_INET, SOCK_STREAM, 0), len};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(e.lfd, (struct sockaddr *)&a, sizeof a);
    listen(e.lfd, 1);
    getsockname(e.lfd, (struct sockaddr *)&a, &al);
    pthread_t t;
    pthread_create(&t, NULL, echo_main, &e);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        return -1;
    char *buf = calloc(1, len);
    char k;
    for (int i = 0; i < rounds; i++) {
        double t0 = now_us();
        if (write(fd, buf, len) != (ssize_t)len || read(fd, &k, 1) != 1)
            return -1;
        v[i] = now_us() - t0;
    }
    close(fd);
    pthread_join(t, NULL);
    close(e.lfd);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 2000;
    size_t msglen = argc > 2 ? strtoul(argv[2], NULL, 0) : 64;
    if (rounds < 100 || msglen > TERN_NOTIFY_MAX) {
        fprintf(stderr, "usage: tern-bench-notify [rounds >= 100] [msg bytes <= %d]\n",
                TERN_NOTIFY_MAX);
        return 2;
    }
    const char *y = "server_name: 127.0.0.1:0\nmetadata: p2p\ntransports:\n  - name: memcpy\n"
                    "log_level: warn\n";
    char err[1024];
    tern_engine *a = tern_engine_create_from_yaml(y, "a", err, sizeof err);
    tern_engine *b = a ? tern_engine_create_from_yaml(y, "b", err, sizeof err) : NULL;
    if (!a || !b) {
        fprintf(stderr, "tern-bench-notify: engine: %s\n", err);
        return 1;
    }
    tern_segment_id s = tern_segment_open(a, tern_engine_server_name(b));
    char *msg = malloc(msglen + 1), *rmsg = malloc(msglen + 1);
    memset(msg, 'm', msglen);
    msg[msglen] = '\0';
    double *kept = malloc(sizeof(double) * (size_t)rounds);
    double *conn = malloc(sizeof(double) * (size_t)rounds);
    double *tcp = malloc(sizeof(double) * (size_t)rounds);
    for (int i = 0; i < rounds; i++) {
        double t0 = now_us();
        if (tern_notify_send(a, s, "bench", msg) != 0) {
            fprintf(stderr, "tern-bench-notify: send: %s\n", tern_engine_last_error(a));
            return 1;
        }
        kept[i] = now_us() - t0;
        tern_notify_recv(b, NULL, 0, NULL, 0, rmsg, msglen + 1);
    }
    /* the same request on a new connection each time */
    size_t jl = msglen + 512;
    char *json = malloc(jl);
    snprintf(json, jl, "{\"from\":\"%s\",\"name\":\"bench\",\"msg\":\"%s\"}",
             tern_engine_server_name(a), msg);
    for (int i = 0; i < rounds; i++) {
        char *reply = NULL;
        size_t rl = 0;
        double t0 = now_us();
        if (tern_hs_request(tern_engine_server_name(b), TERN_HS_NOTIFY, json, strlen(json), &reply,
                            &rl, 0, 5000, 5000, err, sizeof err) != 0) {
            fprintf(stderr, "tern-bench-notify: connect baseline: %s\n", err);
            return 1;
        }
        conn[i] = now_us() - t0;
        free(reply);
        tern_notify_recv(b, NULL, 0, NULL, 0, rmsg, msglen + 1);
    }
    if (tcp_pingpong(rounds, strlen(json) + 9, tcp) != 0) {
        fprintf(stderr, "tern-bench-notify: tcp baseline failed\n");
        return 1;
    }
    printf("tern-bench-notify: %d rounds, msg %zu bytes (request %zu bytes)\n", rounds, msglen,
           strlen(json) + 9);
    qsort(tcp, (size_t)rounds, sizeof *tcp, cmp);
    double floor = tcp[rounds / 2];
    report("tcp", tcp, rounds, floor);
    report("kept", kept, rounds, floor);
    report("connect", conn, rounds, floor);
    tern_engine_destroy(a);
    tern_engine_destroy(b);
    return 0;
}
