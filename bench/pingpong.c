/* bench/pingpong.c: the baseline for small-operation latency: a plain C
 * TCP ping-pong on loopback, one message of --size bytes each way, one in
 * flight, blocking sockets, TCP_NODELAY.  The server and the client are two
 * processes (fork), like a tern target and initiator.  Prints
 * "pingpong size=S n=N p50_us=X p99_us=Y" (round trip per message).
 *
 *   tern-bench-pingpong [--size 8] [--duration 3] [--shape plain|event]
 *
 * --shape event waits the way the tcp transport does, to show what that
 * shape costs by itself: the server in epoll_wait and reading a
 * non-blocking socket (an I/O thread), the client in ppoll before each
 * read (a submitter waiting for a lone request's reply). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
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

/* --shape event: wait until fd is readable, in epoll_wait (ep >= 0) or in
 * ppoll, then one non-blocking read at a time. */
static int recv_event(int fd, int ep, char *buf, size_t n)
{
    for (size_t done = 0; done < n;) {
        if (ep >= 0) {
            struct epoll_event ev;
            if (epoll_wait(ep, &ev, 1, -1) < 0 && errno != EINTR)
                return -1;
        } else {
            struct pollfd pf = {fd, POLLIN, 0};
            if (ppoll(&pf, 1, NULL, NULL) < 0 && errno != EINTR)
                return -1;
        }
        ssize_t k = recv(fd, buf + done, n - done, MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
            return -1;
        done += k > 0 ? (size_t)k : 0;
    }
    return 0;
}

/* The server's or the client's read of one message. */
static int recv_msg(int fd, int event, int ep, char *buf, size_t n)
{
    return event ? recv_event(fd, ep, buf, n) : io_all(fd, buf, n, 0);
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
    int event = 0, bad = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--size"))
            size = (size_t)strtoul(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--duration"))
            dur = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--shape") && !strcmp(argv[i + 1], "event"))
            event = 1;
        else if (strcmp(argv[i], "--shape") || strcmp(argv[i + 1], "plain"))
            bad = 1;
    }
    if (size < 1 || size > (1 << 20) || dur <= 0 || bad) {
        fprintf(stderr, "usage: tern-bench-pingpong [--size 1..1M] [--duration SEC] "
                        "[--shape plain|event]\n");
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
        int fd = accept(lfd, NULL, NULL), ep = -1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (event) {
            struct epoll_event ev = {.events = EPOLLIN};
            ep = epoll_create1(0);
            if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
                _exit(1);
        }
        while (recv_msg(fd, event, ep, buf, size) == 0 && io_all(fd, buf, size, 1) == 0)
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
        if (io_all(fd, buf, size, 1) || recv_msg(fd, event, -1, buf, size))
            return 1;
    while (now_s() < end && n < cap) {
        double t0 = now_s();
        if (io_all(fd, buf, size, 1) || recv_msg(fd, event, -1, buf, size)) {
            fprintf(stderr, "pingpong: connection lost\n");
            return 1;
        }
        lat[n++] = (uint32_t)((now_s() - t0) * 1e6 + 0.5);
    }
    close(fd);
    waitpid(pid, NULL, 0);
    qsort(lat, n, sizeof *lat, cmp_u32);
    printf("pingpong size=%zu shape=%s n=%zu p50_us=%u p99_us=%u\n", size,
           event ? "event" : "plain", n, lat[n / 2],
           lat[(size_t)((double)n * 0.99)]);
    free(lat);
    free(buf);
    return 0;
}
