/* core/obs/metrics.c: the Prometheus endpoint (see metrics.h): one thread,
 * poll() over the listening socket, a stop eventfd and at most
 * MAX_CLIENTS connections.  It sleeps while nobody scrapes.
 *
 * A request is read whole (at most REQ_MAX bytes, within IDLE_MS of the
 * connection or its last byte), answered and the connection closed:
 * GET or HEAD /metrics gets the text; another path 404, another method
 * 405, an oversized request 431.  A response is written within SEND_MS,
 * so a client that stops reading holds the thread that long at most. */
#include "obs/metrics.h"
#include "obs/metrics_text.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/client.h"
#include "base/util.h"

#define MAX_CLIENTS 16
#define REQ_MAX 4096
#define IDLE_MS 5000
#define SEND_MS 5000

typedef struct client {
    int fd;
    size_t len;
    uint64_t deadline_ms;
    char buf[REQ_MAX + 1];
} client;

struct tern_metrics {
    tern_stats_obj *stats;
    const char *engine_name;
    int lfd, efd;
    pthread_t thread;
    char address[300];
    client clients[MAX_CLIENTS];
};

/* ---- one response ---------------------------------------------------------------- */

static void send_all(int fd, const char *p, size_t n)
{
    /* a client that does not take the reply within SEND_MS loses the rest */
    (void)tern_io_write_all(fd, p, n, SEND_MS);
}

static void reply(int fd, const char *status, const char *type, const char *body, size_t len,
                  int head_only)
{
    char h[256];
    int n = snprintf(h, sizeof h,
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n", status, type, len);
    send_all(fd, h, (size_t)n);
    if (!head_only)
        send_all(fd, body, len);
}

static void plain(int fd, const char *status, const char *text)
{
    reply(fd, status, "text/plain; charset=utf-8", text, strlen(text), 0);
}

/* A whole request head is in c->buf: answer it. */
static void answer(tern_metrics *m, client *c)
{
    char method[16] = "", path[256] = "";
    if (sscanf(c->buf, "%15s %255s", method, path) != 2) {
        plain(c->fd, "400 Bad Request", "bad request line\n");
        return;
    }
    char *q = strchr(path, '?');
    if (q)
        *q = 0;
    int head = !strcmp(method, "HEAD");
    if (strcmp(method, "GET") && !head) {
        plain(c->fd, "405 Method Not Allowed", "only GET and HEAD\n");
        return;
    }
    if (strcmp(path, "/metrics")) {
        plain(c->fd, "404 Not Found", "not found: the metrics are at /metrics\n");
        return;
    }
    size_t len = 0;
    char *text = tern_metrics_render(m->stats, m->engine_name, &len);
    if (!text) {
        plain(c->fd, "500 Internal Server Error", "out of memory\n");
        return;
    }
    reply(c->fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", text, len, head);
    free(text);
}

static void client_close(client *c)
{
    close(c->fd);
    c->fd = -1;
}

/* Bytes arrived: answer once the head is complete. */
static void client_read(tern_metrics *m, client *c)
{
    ssize_t r = recv(c->fd, c->buf + c->len, REQ_MAX - c->len, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0) {
        client_close(c);
        return;
    }
    c->len += (size_t)r;
    c->buf[c->len] = 0;
    c->deadline_ms = tern_now_ms() + IDLE_MS;
    if (strstr(c->buf, "\r\n\r\n") || strstr(c->buf, "\n\n"))
        answer(m, c);
    else if (c->len < REQ_MAX)
        return;
    else
        plain(c->fd, "431 Request Header Fields Too Large", "request too large\n");
    client_close(c);
}

static void accept_one(tern_metrics *m)
{
    int fd = accept4(m->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (m->clients[i].fd < 0) {
            m->clients[i].fd = fd;
            m->clients[i].len = 0;
            m->clients[i].deadline_ms = tern_now_ms() + IDLE_MS;
            return;
        }
    plain(fd, "503 Service Unavailable", "too many connections\n");
    close(fd);
}

/* ---- the thread ------------------------------------------------------------------- */

static void *serve(void *arg)
{
    tern_metrics *m = arg;
    for (;;) {
        struct pollfd pf[MAX_CLIENTS + 2] = {{.fd = m->efd, .events = POLLIN},
                                             {.fd = m->lfd, .events = POLLIN}};
        int idx[MAX_CLIENTS], n = 2;
        uint64_t now = tern_now_ms(), next = 0;
        for (int i = 0; i < MAX_CLIENTS; i++) {
            client *c = &m->clients[i];
            if (c->fd < 0)
                continue;
            if (now >= c->deadline_ms) { /* idle too long */
                client_close(c);
                continue;
            }
            if (!next || c->deadline_ms < next)
                next = c->deadline_ms;
            idx[n - 2] = i;
            pf[n++] = (struct pollfd){.fd = c->fd, .events = POLLIN};
        }
        int rc = poll(pf, (nfds_t)n, next ? (int)(next - now) : -1);
        if (rc < 0 && errno != EINTR)
            break;
        if (pf[0].revents)
            break; /* stop */
        for (int k = 2; k < n; k++)
            if (pf[k].revents)
                client_read(m, &m->clients[idx[k - 2]]);
        if (pf[1].revents & POLLIN)
            accept_one(m);
    }
    return NULL;
}

static int listen_on(tern_metrics *m, const char *listen_at, char *err, size_t errlen)
{
    char host[256], port[8];
    uint16_t p = 0;
    if (tern_split_host_port(listen_at, host, sizeof host, &p) != 0)
        return tern_errf(err, errlen, TERN_ERR_CONFIG, "metrics_listen '%s': expected host:port",
                         listen_at);
    snprintf(port, sizeof port, "%u", p);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *res = NULL;
    int g = getaddrinfo(host, port, &hints, &res);
    if (g)
        return tern_errf(err, errlen, TERN_ERR_CONFIG, "metrics_listen '%s': %s", listen_at,
                         gai_strerror(g));
    int last = 0;
    for (struct addrinfo *a = res; a && m->lfd < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        if (fd >= 0)
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (fd >= 0 && bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            getsockname(fd, (struct sockaddr *)&ss, &sl);
            p = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
            snprintf(m->address, sizeof m->address, strchr(host, ':') ? "[%s]:%u" : "%s:%u",
                     host, (unsigned)p);
            m->lfd = fd;
            break;
        }
        last = errno;
        if (fd >= 0)
            close(fd);
    }
    freeaddrinfo(res);
    if (m->lfd < 0)
        return tern_errf(err, errlen, TERN_ERR_IO,
                         "metrics_listen '%s': cannot listen: %s (is the port in use?)",
                         listen_at, strerror(last));
    return 0;
}

int tern_metrics_start(const char *listen_at, tern_stats_obj *s, const char *engine_name,
                       tern_metrics **out, char *err, size_t errlen)
{
    tern_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory for the metrics endpoint");
    m->stats = s;
    m->engine_name = engine_name;
    m->lfd = -1;
    for (int i = 0; i < MAX_CLIENTS; i++)
        m->clients[i].fd = -1;
    m->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int rc = m->efd < 0 ? tern_errf(err, errlen, TERN_ERR_IO, "metrics: eventfd: %s",
                                    strerror(errno))
                        : listen_on(m, listen_at, err, errlen);
    if (!rc && pthread_create(&m->thread, NULL, serve, m) != 0)
        rc = tern_errf(err, errlen, TERN_ERR_IO, "cannot start the metrics thread");
    if (rc) {
        if (m->lfd >= 0)
            close(m->lfd);
        if (m->efd >= 0)
            close(m->efd);
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

const char *tern_metrics_address(const tern_metrics *m)
{
    return m ? m->address : "";
}

void tern_metrics_stop(tern_metrics *m)
{
    if (!m)
        return;
    uint64_t one = 1;
    if (write(m->efd, &one, sizeof one) < 0) {
        /* an eventfd write fails only on overflow: the thread is woken already */
    }
    pthread_join(m->thread, NULL);
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (m->clients[i].fd >= 0)
            close(m->clients[i].fd);
    close(m->lfd);
    close(m->efd);
    free(m);
}
