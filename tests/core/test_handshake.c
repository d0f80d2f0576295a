/* tests/core/test_handshake.c: the control-plane wire protocol on real loopback
 * sockets: byte-exact frames, old-protocol peers, hostile and broken
 * clients (each gets its error while the daemon keeps serving others),
 * IPv6, timeouts, and 500 clients at once. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
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

#include "desc/handshake_desc.h"
#include "peer/mooncake_compat.h"
#include "fd_limit.h"
#include "control/handshake.h"
#include "tern/errors.h"
#include "base/util.h"

static char err[512];
static atomic_int calls;
static atomic_int last_type;
static int handler_sleep_ms;

/* Echo: {"type": t, "len": n} plus the request's JSON as "got" (when an
 * object); a request {"fail": true} makes the handler fail. */
static int echo(void *arg, int type, const char *json, size_t len, char **reply,
                size_t *replylen)
{
    (void)arg;
    atomic_fetch_add(&calls, 1);
    atomic_store(&last_type, type);
    if (handler_sleep_ms)
        usleep((useconds_t)handler_sleep_ms * 1000);
    if (len >= 6 && strncmp(json, "{\"fail", 6) == 0)
        return TERN_ERR_REFUSED;
    char *r = malloc(len + 64);
    int n = snprintf(r, len + 64, "{\"type\":%d,\"len\":%zu,\"got\":%.*s}", type, len,
                     len ? (int)len : 4, len ? json : "null");
    *reply = r;
    *replylen = (size_t)n;
    return 0;
}

static tern_hs_server *start(const char *host, int io_ms)
{
    tern_hs_options o = {.bind_host = host, .port = 0, .io_timeout_ms = io_ms,
                         .handler = echo};
    tern_hs_server *s = NULL;
    cr_assert_eq(tern_hs_server_start(&o, &s, err, sizeof err), 0, "%s", err);
    cr_assert_gt(tern_hs_server_port(s), 0);
    atomic_store(&calls, 0);
    return s;
}

/* "host:port" of a daemon, returned by value: name_of(s, h).s lives until
 * the end of the full expression that uses it (C11 6.2.4p8), so no buffer is
 * shared between calls or threads. */
typedef struct hs_name {
    char s[64];
} hs_name;

static hs_name name_of(tern_hs_server *s, const char *host)
{
    hs_name n;
    snprintf(n.s, sizeof n.s, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
             tern_hs_server_port(s));
    return n;
}

static int raw_connect(tern_hs_server *s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(tern_hs_server_port(s))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s",
                 strerror(errno));
    return fd;
}

/* Read until EOF or timeout; returns bytes read, *eof set when the peer closed. */
static size_t read_until_eof(int fd, uint8_t *buf, size_t cap, int timeout_ms, int *eof)
{
    size_t n = 0;
    *eof = 0;
    uint64_t end = tern_now_ms() + (uint64_t)timeout_ms;
    while (tern_now_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(end - tern_now_ms())) <= 0)
            break;
        ssize_t r = recv(fd, buf + n, cap - n, 0);
        if (r <= 0) {
            *eof = 1;
            break;
        }
        n += (size_t)r;
    }
    return n;
}

/* The daemon still answers a normal request. */
static void still_serving(tern_hs_server *s)
{
    char *reply = NULL;
    size_t rl;
    int rc = tern_hs_request(name_of(s, "127.0.0.1").s, TERN_HS_PROBE, "{}", 2, &reply, &rl, 0,
                             10000, 10000, err, sizeof err);
    cr_assert_eq(rc, 0, "daemon stopped serving: %s", err);
    cr_assert(strstr(reply, "\"type\":3"), "%s", reply);
    free(reply);
}

/* ---- codec ---- */

Test(frame, encode_is_byte_exact_for_each_type)
{
    for (int t = 0; t <= 3; t++) {
        uint8_t *f;
        size_t n;
        cr_assert_eq(tern_hs_frame_encode(t, "{\"a\":1}", 7, &f, &n), 0);
        uint8_t want[16] = {8, 0, 0, 0, 0, 0, 0, 0, (uint8_t)t, '{', '"', 'a', '"', ':', '1', '}'};
        cr_assert_eq(n, 16);
        cr_assert_arr_eq(f, want, 16, "type %d", t);
        free(f);
    }
    uint8_t *f;
    size_t n;
    cr_assert_eq(tern_hs_frame_encode(4, "{}", 2, &f, &n), TERN_ERR_INVAL);
    cr_assert_eq(tern_hs_frame_encode(-1, "{}", 2, &f, &n), TERN_ERR_INVAL);
}

Test(frame, header_limits)
{
    uint8_t h[8] = {0};
    uint64_t len;
    cr_assert_eq(tern_hs_frame_header(h, 1 << 20, &len), TERN_ERR_PROTOCOL, "zero length");
    h[2] = 0x10; /* 1 MiB exactly */
    cr_assert_eq(tern_hs_frame_header(h, 1 << 20, &len), 0);
    cr_assert_eq(len, 1 << 20);
    h[0] = 1; /* 1 MiB + 1 */
    cr_assert_eq(tern_hs_frame_header(h, 1 << 20, &len), TERN_ERR_PROTOCOL);
    uint8_t big[8] = {0, 0, 0, 0, 0, 0, 0, 0x10}; /* 2^60 */
    cr_assert_eq(tern_hs_frame_header(big, 1 << 20, &len), TERN_ERR_PROTOCOL);
    cr_assert_eq(len, 1ull << 60);
}

Test(frame, payload_detects_old_protocol)
{
    int type;
    const char *json;
    size_t jl;
    const uint8_t m[] = {1, '{', '}'};
    cr_assert_eq(tern_hs_frame_payload(m, 3, &type, &json, &jl, err, sizeof err), 0);
    cr_assert_eq(type, TERN_HS_METADATA);
    cr_assert_eq(jl, 2);
    const uint8_t p[] = {3};
    cr_assert_eq(tern_hs_frame_payload(p, 1, &type, &json, &jl, err, sizeof err), 0);
    cr_assert_eq(type, TERN_HS_PROBE);
    cr_assert_eq(jl, 0);
    const char *old = "{\"local_nic_path\":\"a\"}";
    cr_assert_eq(tern_hs_frame_payload((const uint8_t *)old, strlen(old), &type, &json, &jl, err,
                                       sizeof err),
                 0);
    cr_assert_eq(type, TERN_HS_CONNECTION);
    cr_assert_eq(json, old);
    cr_assert_eq(jl, strlen(old));
    cr_assert_eq(tern_hs_frame_payload(m, 0, &type, &json, &jl, err, sizeof err),
                 TERN_ERR_PROTOCOL);
}

Test(frame, split_host_port)
{
    char h[64];
    uint16_t p;
    cr_assert_eq(tern_split_host_port("10.0.0.7:12001", h, sizeof h, &p), 0);
    cr_assert_str_eq(h, "10.0.0.7");
    cr_assert_eq(p, 12001);
    cr_assert_eq(tern_split_host_port("[fe80::1]:99", h, sizeof h, &p), 0);
    cr_assert_str_eq(h, "fe80::1");
    cr_assert_eq(p, 99);
    cr_assert_eq(tern_split_host_port("node7", h, sizeof h, &p), 0);
    cr_assert_eq(p, 0);
    cr_assert_eq(tern_split_host_port("::1", h, sizeof h, &p), 0);
    cr_assert_str_eq(h, "::1");
    cr_assert_eq(tern_split_host_port("h:65536", h, sizeof h, &p), TERN_ERR_INVAL);
    cr_assert_eq(tern_split_host_port("h:12x", h, sizeof h, &p), TERN_ERR_INVAL);
    cr_assert_eq(tern_split_host_port(":5", h, sizeof h, &p), TERN_ERR_INVAL);
    cr_assert_eq(tern_split_host_port("[::1", h, sizeof h, &p), TERN_ERR_INVAL);
}

/* ---- daemon on the wire ---- */

Test(wire, each_type_answered_with_same_frame_type)
{
    tern_hs_server *s = start("127.0.0.1", 2000);
    for (int t = 0; t <= 3; t++) {
        int fd = raw_connect(s);
        uint8_t *f;
        size_t n;
        tern_hs_frame_encode(t, "{\"k\":\"v\"}", 9, &f, &n);
        cr_assert_eq(tern_io_write_all(fd, f, n, 2000), 0);
        free(f);
        uint8_t buf[256];
        int eof;
        size_t got = read_until_eof(fd, buf, sizeof buf, 3000, &eof);
        close(fd);
        cr_assert(eof, "the daemon shuts down and closes after replying");
        char want[128];
        int wl = snprintf(want, sizeof want, "{\"type\":%d,\"len\":9,\"got\":{\"k\":\"v\"}}", t);
        cr_assert_eq(got, 9 + (size_t)wl, "type %d: %zu bytes", t, got);
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--)
            len = len << 8 | buf[i];
        cr_assert_eq(len, (uint64_t)wl + 1, "little-endian length counts the type byte");
        cr_assert_eq(buf[8], t, "reply has the request's type");
        cr_assert_eq(memcmp(buf + 9, want, (size_t)wl), 0);
        cr_assert_eq(atomic_load(&last_type), t);
    }
    tern_hs_server_stop(s);
}

Test(wire, client_round_trip_and_handler_failure)
{
    tern_hs_server *s = start("127.0.0.1", 2000);
    char *reply = NULL;
    size_t rl = 0;
    cr_assert_eq(tern_hs_request(name_of(s, "127.0.0.1").s, TERN_HS_NOTIFY, "{\"m\":1}", 7,
                                 &reply, &rl, 0, 2000, 2000, err, sizeof err),
                 0, "%s", err);
    cr_assert_str_eq(reply, "{\"type\":2,\"len\":7,\"got\":{\"m\":1}}");
    cr_assert_eq(rl, strlen(reply));
    free(reply);
    cr_assert_eq(tern_hs_request(name_of(s, "127.0.0.1").s, TERN_HS_CONNECTION, "{\"fail\":1}",
                                 10, &reply, &rl, 0, 2000, 2000, err, sizeof err),
                 0, "%s", err);
    cr_assert(strstr(reply, "\"reply_msg\":\"Connection request failed: TERN_ERR_REFUSED\""),
              "%s", reply);
    free(reply);
    tern_hs_server_stop(s);
}

Test(wire, old_protocol_is_a_connection_answered_in_kind)
{
    tern_hs_server *s = start("127.0.0.1", 2000);
    const char *j = "{\"local_nic_path\":\"a:1@x\"}";
    uint64_t len = strlen(j);
    uint8_t f[64];
    for (int i = 0; i < 8; i++)
        f[i] = (uint8_t)(len >> (8 * i));
    memcpy(f + 8, j, len);
    int fd = raw_connect(s);
    cr_assert_eq(tern_io_write_all(fd, f, 8 + len, 2000), 0);
    uint8_t buf[256];
    int eof;
    size_t got = read_until_eof(fd, buf, sizeof buf, 3000, &eof);
    close(fd);
    cr_assert_eq(atomic_load(&last_type), TERN_HS_CONNECTION);
    cr_assert_gt(got, 9);
    cr_assert_eq(buf[8], '{', "old-protocol reply has no type byte");
    uint64_t rl = 0;
    for (int i = 7; i >= 0; i--)
        rl = rl << 8 | buf[i];
    cr_assert_eq(rl, got - 8);
    tern_hs_server_stop(s);
}

Test(wire, oversized_length_refused_before_reading_payload)
{
    tern_hs_server *s = start("127.0.0.1", 10000);
    /* 2^60 bytes announced: closed at once (not after io_timeout) and no
     * payload is awaited, so nothing was allocated for it. */
    uint8_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0x10};
    int fd = raw_connect(s);
    cr_assert_eq(tern_io_write_all(fd, h, 8, 2000), 0);
    uint64_t t0 = tern_now_ms();
    uint8_t buf[64];
    int eof;
    size_t got = read_until_eof(fd, buf, sizeof buf, 5000, &eof);
    cr_assert(eof && got == 0, "closed without a reply");
    cr_assert_lt(tern_now_ms() - t0, 5000, "closed immediately, not at the I/O timeout");
    close(fd);
    /* Just above the 1 MiB default, too. */
    uint64_t len = (1u << 20) + 1;
    for (int i = 0; i < 8; i++)
        h[i] = (uint8_t)(len >> (8 * i));
    fd = raw_connect(s);
    tern_io_write_all(fd, h, 8, 2000);
    read_until_eof(fd, buf, sizeof buf, 5000, &eof);
    cr_assert(eof);
    close(fd);
    cr_assert_eq(atomic_load(&calls), 0);
    still_serving(s);
    tern_hs_server_stop(s);
}

Test(wire, truncated_frame_is_dropped)
{
    tern_hs_server *s = start("127.0.0.1", 10000);
    uint8_t f[8 + 10] = {100, 0, 0, 0, 0, 0, 0, 0, 0, '{', '"', 'a', '"', ':', ' ', '1', ','};
    int fd = raw_connect(s);
    tern_io_write_all(fd, f, sizeof f, 2000);
    shutdown(fd, SHUT_WR);
    uint8_t buf[64];
    int eof;
    size_t got = read_until_eof(fd, buf, sizeof buf, 5000, &eof);
    cr_assert(eof && got == 0, "truncated frame: closed, no reply");
    close(fd);
    cr_assert_eq(atomic_load(&calls), 0, "handler never sees a partial frame");
    still_serving(s);
    tern_hs_server_stop(s);
}

Test(wire, invalid_json_gets_reply_msg)
{
    tern_hs_server *s = start("127.0.0.1", 2000);
    for (int t = 0; t <= 2; t++) {
        char *reply = NULL;
        size_t rl;
        cr_assert_eq(tern_hs_request(name_of(s, "127.0.0.1").s, t, "{\"a\":", 5, &reply, &rl, 0,
                                     2000, 2000, err, sizeof err),
                     0, "%s", err);
        cr_assert(strstr(reply, "\"reply_msg\":\"invalid JSON"), "type %d: %s", t, reply);
        free(reply);
        cr_assert_eq(tern_hs_request(name_of(s, "127.0.0.1").s, t, "{} {}", 5, &reply, &rl, 0,
                                     2000, 2000, err, sizeof err),
                     0, "%s", err);
        cr_assert(strstr(reply, "trailing data"), "%s", reply);
        free(reply);
    }
    cr_assert_eq(atomic_load(&calls), 0, "handler not called for invalid JSON");
    still_serving(s);
    tern_hs_server_stop(s);
}

Test(wire, unknown_type_byte_is_old_protocol_and_refused)
{
    tern_hs_server *s = start("127.0.0.1", 2000);
    const int types[] = {4, 7, 0x7a, 255};
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        int t = types[k];
        uint8_t f[11] = {3, 0, 0, 0, 0, 0, 0, 0, (uint8_t)t, '{', '}'};
        int fd = raw_connect(s);
        tern_io_write_all(fd, f, sizeof f, 2000);
        uint8_t buf[256];
        int eof;
        size_t got = read_until_eof(fd, buf, sizeof buf, 3000, &eof);
        close(fd);
        buf[got < sizeof buf ? got : sizeof buf - 1] = '\0';
        cr_assert_gt(got, 9, "type byte %d: an error reply", t);
        cr_assert_eq(buf[8], '{', "answered as old protocol (no type byte)");
        cr_assert(strstr((char *)buf + 8, "invalid JSON"), "type %d: %s", t, buf + 8);
    }
    cr_assert_eq(atomic_load(&calls), 0);
    still_serving(s);
    tern_hs_server_stop(s);
}

Test(wire, slow_client_dropped_and_others_unaffected)
{
    enum { IO_MS = 3000 };
    tern_hs_server *s = start("127.0.0.1", IO_MS);
    int slow = raw_connect(s);
    uint8_t part[3] = {9, 0, 0};
    tern_io_write_all(slow, part, 3, 1000);
    /* Others are served while the slow one still holds its connection: the
     * evidence is the order of events (the slow client is not yet dropped
     * when the others have their replies), not a time limit. */
    uint64_t t0 = tern_now_ms();
    for (int i = 0; i < 5; i++)
        still_serving(s);
    struct pollfd p = {.fd = slow, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, 0), 0, "the slow client is still connected after %llu ms",
                 (unsigned long long)(tern_now_ms() - t0));
    uint8_t buf[16];
    int eof;
    read_until_eof(slow, buf, sizeof buf, 20 * IO_MS, &eof);
    uint64_t held = tern_now_ms() - t0;
    cr_assert(eof, "the slow client is dropped");
    /* Lower bound: not before about io_timeout; upper: a generous "does not
     * hang" bound for a loaded machine. */
    cr_assert_geq(held, IO_MS / 2, "dropped after %llu ms", (unsigned long long)held);
    cr_assert_lt(held, 10 * IO_MS, "dropped after about io_timeout (%llu ms)",
                 (unsigned long long)held);
    close(slow);
    tern_hs_server_stop(s);
}

Test(wire, ipv6_and_hostname_resolution)
{
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    if (probe < 0 || bind(probe, (struct sockaddr *)&a6, sizeof a6) != 0) {
        if (probe >= 0)
            close(probe);
        cr_skip_test("no IPv6 loopback on this machine (::1 cannot be bound)");
    }
    close(probe);
    tern_hs_server *s = start("::1", 2000);
    char *reply = NULL;
    size_t rl;
    cr_assert_eq(tern_hs_request(name_of(s, "::1").s, TERN_HS_PROBE, "{}", 2, &reply, &rl, 0,
                                 2000, 2000, err, sizeof err),
                 0, "%s", err);
    free(reply);
    tern_hs_server_stop(s);
    /* "localhost" may resolve to ::1 first: every address is tried. */
    s = start("127.0.0.1", 2000);
    char name[64];
    snprintf(name, sizeof name, "localhost:%u", tern_hs_server_port(s));
    cr_assert_eq(tern_hs_request(name, TERN_HS_PROBE, "{}", 2, &reply, &rl, 0, 2000, 2000, err,
                                 sizeof err),
                 0, "%s", err);
    free(reply);
    tern_hs_server_stop(s);
}

Test(client, refused_and_unanswered_connections_fail_in_time)
{
    /* A port nobody listens on. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t sl = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &sl);
    char name[64];
    snprintf(name, sizeof name, "127.0.0.1:%u", ntohs(a.sin_port));
    char *reply = NULL;
    size_t rl;
    int rc = tern_hs_request(name, TERN_HS_PROBE, "{}", 2, &reply, &rl, 0, 1000, 1000, err,
                             sizeof err);
    cr_assert_eq(rc, TERN_ERR_CONNECT, "%s", err);
    cr_assert(strstr(err, name) || strstr(err, "127.0.0.1"), "%s", err);
    /* Listening but never answering: the I/O timeout fires. */
    listen(fd, 4);
    uint64_t t0 = tern_now_ms();
    rc = tern_hs_request(name, TERN_HS_PROBE, "{}", 2, &reply, &rl, 0, 1000, 700, err,
                         sizeof err);
    uint64_t took = tern_now_ms() - t0;
    cr_assert_eq(rc, TERN_ERR_TIMEOUT, "%s", err);
    cr_assert(strstr(err, "timed out"), "%s", err);
    /* At least the I/O timeout; at most a generous "does not hang" bound. */
    cr_assert(took >= 600 && took < 10000, "took %llu ms", (unsigned long long)took);
    close(fd);
    cr_assert_eq(tern_hs_request("[::1", TERN_HS_PROBE, "{}", 2, &reply, &rl, 0, 100, 100,
                                 err, sizeof err),
                 TERN_ERR_INVAL);
}

Test(client, reply_over_limit_is_refused)
{
    tern_hs_server *s = start("127.0.0.1", 2000);
    char *reply = NULL;
    size_t rl;
    /* The echo reply is longer than 16 bytes: the client's limit refuses it. */
    int rc = tern_hs_request(name_of(s, "127.0.0.1").s, TERN_HS_PROBE, "{}", 2, &reply, &rl, 16,
                             2000, 2000, err, sizeof err);
    cr_assert_eq(rc, TERN_ERR_PROTOCOL, "%s", err);
    cr_assert(strstr(err, "maximum frame"), "%s", err);
    tern_hs_server_stop(s);
}

/* A web server on the handshake port: it reads what arrives and answers
 * as HTTP servers do, then keeps the connection open until the client
 * closes it (so an error that waited for the end would take the I/O
 * timeout). */
static void *http_400_server(void *arg)
{
    int lfd = *(int *)arg;
    int c = accept(lfd, NULL, NULL);
    if (c < 0)
        return NULL;
    char buf[4096];
    (void)!recv(c, buf, sizeof buf, 0);
    const char *resp = "HTTP/1.1 400 Bad Request\r\nServer: nginx/1.22.1\r\n"
                       "Content-Type: text/html\r\nContent-Length: 157\r\n"
                       "Connection: close\r\n\r\n<html>\r\n<head><title>400 Bad Request"
                       "</title></head>\r\n<body>\r\n</body>\r\n</html>\r\n";
    (void)!send(c, resp, strlen(resp), MSG_NOSIGNAL);
    while (recv(c, buf, sizeof buf, 0) > 0) /* until the client closes */
        ;
    close(c);
    return NULL;
}

Test(client, http_server_named_not_a_tern_daemon_at_once)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t sl = sizeof a;
    cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(lfd, 4), 0);
    getsockname(lfd, (struct sockaddr *)&a, &sl);
    char name[64];
    snprintf(name, sizeof name, "127.0.0.1:%u", ntohs(a.sin_port));
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, http_400_server, &lfd), 0);
    char *reply = NULL, e[1024] = "";
    size_t rl;
    uint64_t t0 = tern_now_ms();
    int rc = tern_hs_request(name, TERN_HS_METADATA, "{}", 2, &reply, &rl, 0, 5000, 20000, e,
                             sizeof e);
    uint64_t took = tern_now_ms() - t0;
    pthread_join(th, NULL);
    close(lfd);
    cr_assert_eq(rc, TERN_ERR_PROTOCOL, "%s", e);
    cr_assert_null(reply);
    cr_assert(strstr(e, "not a tern handshake daemon"), "the error names the cause: %s", e);
    cr_assert(strstr(e, name), "the error names the peer: %s", e);
    /* What it sent, printable: the CR LF escaped, so the error is one line. */
    cr_assert(strstr(e, "\"HTTP/1.1 400 Bad Request\\r\\nServer: nginx"),
              "the error shows what the peer sent: %s", e);
    cr_assert(strstr(e, "...\""), "what was shown is marked truncated: %s", e);
    cr_assert_null(strchr(e, '\n'), "one line: %s", e);
    cr_assert_null(strchr(e, '\r'), "one line: %s", e);
    /* At once: neither the 20 s I/O timeout nor the server's close. */
    cr_assert_lt(took, 10000, "took %llu ms", (unsigned long long)took);
}

/* ---- concurrency ---- */

/* Each client thread owns all it reads and writes: its own copy of the
 * daemon's name, its own identity and its own result. */
typedef struct cl {
    char name[64];
    int id;
    int rc;
    char err[256];
} cl;

static void *client_main(void *arg)
{
    cl *c = arg;
    tern_handshake_desc d = {0};
    tern_mooncake_hs mk = {.nqp = 2, .qp_num = {1, 2}};
    snprintf(d.local_nic_path, sizeof d.local_nic_path, "client:%d@mlx5_0", c->id);
    strcpy(d.peer_nic_path, "server@mlx5_0");
    char *j = tern_mooncake_hs_encode(&d, &mk);
    char *reply = NULL;
    size_t rl;
    c->rc = tern_hs_request(c->name, TERN_HS_CONNECTION, j, strlen(j), &reply, &rl, 0, 10000,
                            20000, c->err, sizeof c->err);
    /* The echo handler returns the request it was given: this client must
     * get back its own local_nic_path, not another client's reply. */
    char own[96];
    snprintf(own, sizeof own, "\"local_nic_path\":\"client:%d@mlx5_0\"", c->id);
    if (!c->rc && !strstr(reply, own)) {
        snprintf(c->err, sizeof c->err, "reply is not this client's: %.200s", reply);
        c->rc = -1000;
    }
    free(j);
    free(reply);
    return NULL;
}

Test(concurrency, five_hundred_clients_at_once, .timeout = 120)
{
    test_need_fds(2048); /* a client and a server socket each */
    handler_sleep_ms = 10; /* handlers block (QP bring-up): the pool overlaps them */
    tern_hs_server *s = start("127.0.0.1", 20000);
    enum { N = 500 };
    static cl c[N];
    static pthread_t th[N];
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 * 1024);
    for (int i = 0; i < N; i++) {
        snprintf(c[i].name, sizeof c[i].name, "%s", name_of(s, "127.0.0.1").s);
        c[i].id = i;
        cr_assert_eq(pthread_create(&th[i], &at, client_main, &c[i]), 0);
    }
    int ok = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        if (c[i].rc == 0)
            ok++;
        else
            cr_log_error("client %d: %d %s", i, c[i].rc, c[i].err);
    }
    cr_assert_eq(ok, N, "%d of %d answered", ok, N);
    cr_assert_eq(atomic_load(&calls), N);
    tern_hs_server_stop(s);
}

Test(concurrency, connection_cap_holds_new_clients_in_the_backlog)
{
    tern_hs_options o = {.bind_host = "127.0.0.1", .io_timeout_ms = 600, .max_connections = 2,
                         .handler = echo};
    tern_hs_server *s = NULL;
    cr_assert_eq(tern_hs_server_start(&o, &s, err, sizeof err), 0, "%s", err);
    atomic_store(&calls, 0);
    /* Two silent clients fill the cap, so a third waits in the backlog until
     * they are dropped, then is served.  No wait is needed in between: the
     * kernel's accept queue is first in, first out, so a and b take the two
     * slots before the third however late the daemon accepts. */
    int a = raw_connect(s), b = raw_connect(s);
    uint64_t t0 = tern_now_ms();
    still_serving(s);
    uint64_t took = tern_now_ms() - t0;
    cr_assert_geq(took, 300, "served after a slot freed (%llu ms)", (unsigned long long)took);
    close(a);
    close(b);
    tern_hs_server_stop(s);
}

Test(wire, random_garbage_never_stops_the_daemon, .timeout = 60)
{
    tern_hs_server *s = start("127.0.0.1", 500);
    unsigned seed = 12345;
    for (int i = 0; i < 200; i++) {
        uint8_t f[64];
        size_t n = 1 + (size_t)(rand_r(&seed) % 63);
        for (size_t k = 0; k < n; k++)
            f[k] = (uint8_t)rand_r(&seed);
        if (i % 2) { /* a plausible small length so the payload is read and judged */
            memset(f, 0, 8);
            f[0] = (uint8_t)(n > 8 ? n - 8 : 1);
            if (n < 9)
                n = 9;
        }
        int fd = raw_connect(s);
        tern_io_write_all(fd, f, n, 1000);
        shutdown(fd, SHUT_WR);
        uint8_t buf[512];
        int eof;
        read_until_eof(fd, buf, sizeof buf, 2000, &eof);
        cr_assert(eof, "case %d: the daemon answered or closed", i);
        close(fd);
    }
    still_serving(s);
    tern_hs_server_stop(s);
}

/* ---- inline_types: answered on the epoll thread ---------------------------------- */

#define GATED_PROBES 70 /* more than the 64 workers */

static atomic_int gate_open, gated_in;

/* Probes block until the gate opens: they hold every worker. */
static int gated(void *arg, int type, const char *json, size_t len, char **reply,
                 size_t *replylen)
{
    if (type == TERN_HS_PROBE) {
        atomic_fetch_add(&gated_in, 1);
        while (!atomic_load(&gate_open))
            usleep(1000);
    }
    return echo(arg, type, json, len, reply, replylen);
}

static void *gated_probe(void *arg)
{
    char *r = NULL, e[256];
    size_t rl;
    tern_hs_request(arg, TERN_HS_PROBE, "{}", 2, &r, &rl, 0, 5000, 30000, e, sizeof e);
    free(r);
    return NULL;
}

/* With every worker blocked in a handler, a Metadata request is answered
 * when inline_types names it, and waits (here: times out) when not. */
static void metadata_with_workers_blocked(unsigned inline_types)
{
    tern_hs_options o = {.bind_host = "127.0.0.1", .handler = gated,
                         .inline_types = inline_types};
    tern_hs_server *s = NULL;
    cr_assert_eq(tern_hs_server_start(&o, &s, err, sizeof err), 0, "%s", err);
    hs_name n = name_of(s, "127.0.0.1");
    atomic_store(&gate_open, 0);
    atomic_store(&gated_in, 0);
    pthread_t th[GATED_PROBES];
    for (int i = 0; i < GATED_PROBES; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, gated_probe, n.s), 0);
    for (uint64_t end = tern_now_ms() + 20000; atomic_load(&gated_in) < 64 && tern_now_ms() < end;)
        usleep(1000);
    cr_assert_eq(atomic_load(&gated_in), 64, "%d of 64 workers blocked", atomic_load(&gated_in));

    char *r = NULL;
    size_t rl = 0;
    int rc = tern_hs_request(n.s, TERN_HS_METADATA, "{}", 2, &r, &rl, 0, 2000, 1500, err,
                             sizeof err);
    if (inline_types) {
        cr_assert_eq(rc, 0, "%s", err);
        cr_assert(strstr(r, "\"type\":1"), "%s", r);
    } else {
        cr_assert_eq(rc, TERN_ERR_TIMEOUT, "rc %d: %s", rc, err);
    }
    free(r);
    atomic_store(&gate_open, 1);
    for (int i = 0; i < GATED_PROBES; i++)
        pthread_join(th[i], NULL);
    tern_hs_server_stop(s);
}

Test(handshake, inline_metadata_is_answered_while_every_worker_is_blocked, .timeout = 90)
{
    metadata_with_workers_blocked(1u << TERN_HS_METADATA);
    metadata_with_workers_blocked(0);
}
