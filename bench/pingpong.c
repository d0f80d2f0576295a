/* bench/pingpong.c: the baseline for small-operation latency: a plain C
 * TCP ping-pong on loopback, one message of --size bytes each way, one in
 * flight, blocking sockets, TCP_NODELAY.  The server and the client are two
 * processes (fork), like a tern target and initiator.  Prints
 * "pingpong size=S n=N p50_us=X p99_us=Y" (round trip per message).
 *
 *   tern-bench-pingpong [--size 8] [--duration 3] */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int io_all(int fd, char *buf, size_t n, int out)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = out ? send(fd, buf + done, n - done, MSG_NOSIGNAL) : recv(fd, buf + done, n - done, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t size = 8;
    double dur = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--size"))
            size = (size_t)strtoul(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--duration"))
            dur = atof(argv[i + 1]);
    }
    if (size < 1 || size > (1 << 20) || dur <= 0) {
        fprintf(stderr, "usage: tern-bench-pingpong [--size 1..1M] [--duration SEC]\n");
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&a, &al)) {
        perror("pingpong: listen");
        return 1;
    }
    char *buf = calloc(1, size);
    pid_t pid = fork();
    if (pid == 0) { /* server: echo */
        int fd = accept(lfd, NULL, NULL);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        while (io_all(fd, buf, size, 0) == 0 && io_all(fd, buf, size, 1) == 0)
            ;
        _exit(0);
    }
    close(lfd);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        perror("pingpong: connect");
        return 1;
    }
    size_t cap = 1 << 20, n = 0;
    uint32_t *lat = malloc(cap * sizeof *lat);
    double end = now_s() + dur;
    for (int warm = 0; warm < 1000; warm++)
        if (io_all(fd, buf, size, 1) || io_all(fd, buf, size, 0))
            return 1;
    while (now_s() < end && n < cap) {
        double t0 = now_s();
        if (io_all(fd, buf, size, 1) || io_all(fd, buf, size, 0)) {
            fprintf(stderr, "pingpong: connection lost\n");
            return 1;
        }
        lat[n++] = (uint32_t)((now_s() - t0) * 1e6 + 0.5);
    }
    close(fd);
    waitpid(pid, NULL, 0);
    qsort(lat, n, sizeof *lat, cmp_u32);
    printf("pingpong size=%zu n=%zu p50_us=%u p99_us=%u\n", size, n, lat[n / 2],
           lat[(size_t)((double)n * 0.99)]);
    free(lat);
    free(buf);
    return 0;
}
