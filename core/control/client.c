/* core/control/client.c: the blocking handshake client (client.h): connect
 * (every address of the name, bounded), prove the secret when given one
 * (auth.h), send one frame and read its reply (frames.h). */
#include "control/client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/auth.h"
#include "control/frames.h"
#include "tern/errors.h"
#include "base/util.h"

int tern_split_host_port(const char *name, char *host, size_t hostlen, uint16_t *port)
{
    if (!name || !*name || !host || !hostlen || !port)
        return TERN_ERR_INVAL;
    const char *h = name, *p = NULL;
    size_t hl;
    if (name[0] == '[') {
        const char *e = strchr(name, ']');
        if (!e || (e[1] && e[1] != ':'))
            return TERN_ERR_INVAL;
        h = name + 1;
        hl = (size_t)(e - h);
        p = e[1] ? e + 2 : NULL;
    } else {
        const char *c = strrchr(name, ':');
        if (c && strchr(name, ':') == c) {
            hl = (size_t)(c - name);
            p = c + 1;
        } else { /* no colon, or a bare IPv6 address */
            hl = strlen(name);
        }
    }
    if (hl == 0 || hl >= hostlen)
        return TERN_ERR_INVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = 0;
    if (p) {
        if (!*p || strlen(p) > 5)
            return TERN_ERR_INVAL;
        unsigned v = 0;
        for (const char *q = p; *q; q++) {
            if (*q < '0' || *q > '9')
                return TERN_ERR_INVAL;
            v = v * 10 + (unsigned)(*q - '0');
        }
        if (v > 65535)
            return TERN_ERR_INVAL;
        *port = (uint16_t)v;
    }
    return 0;
}

/* Non-blocking connect bounded by timeout_ms; returns fd or -errno. */
static int connect_one(const struct addrinfo *a, int timeout_ms)
{
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            int e = errno;
            close(fd);
            return -e;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int r;
        do
            r = poll(&p, 1, timeout_ms);
        while (r < 0 && errno == EINTR);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (r == 0)
            soerr = ETIMEDOUT;
        else if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (soerr) {
            close(fd);
            return -soerr;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int hs_connect(const char *server, int timeout_ms, char *err, size_t errlen)
{
    char host[256];
    uint16_t port;
    if (tern_split_host_port(server, host, sizeof host, &port) != 0)
        return tern_errf(err, errlen, TERN_ERR_INVAL,
                         "handshake: bad server name \"%s\" (expected host:port or [v6]:port)",
                         server);
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port ? port : TERN_HS_DEFAULT_PORT);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV},
                    *res = NULL;
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g)
        return tern_errf(err, errlen, TERN_ERR_CONNECT, "handshake: cannot resolve %s: %s",
                         host, gai_strerror(g));
    int fd = -1, last = 0, tried = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next, tried++) {
        fd = connect_one(a, timeout_ms);
        if (fd < 0)
            last = -fd;
    }
    freeaddrinfo(res);
    if (fd >= 0)
        return fd;
    return tern_errf(err, errlen, last == ETIMEDOUT ? TERN_ERR_TIMEOUT : TERN_ERR_CONNECT,
                     "handshake: cannot connect to %s:%s (%d address%s tried): %s; is the "
                     "peer's engine running and its handshake port reachable?",
                     host, ps, tried, tried == 1 ? "" : "es", strerror(last));
}

/* The addresses in turn until one connects (server's own when there are
 * none); *used: the index that did.  The error is the first one's. */
static int hs_connect_any(const char *server, const char (*addrs)[TERN_HS_ADDR_MAX],
                          size_t naddrs, int timeout_ms, size_t *used, char *err, size_t errlen)
{
    if (!naddrs)
        return hs_connect(server, timeout_ms, err, errlen);
    int fd = hs_connect(addrs[0], timeout_ms, err, errlen);
    for (size_t i = 1; fd < 0 && i < naddrs; i++) {
        char aerr[256];
        int afd = hs_connect(addrs[i], timeout_ms, aerr, sizeof aerr);
        if (afd >= 0) {
            *used = i;
            return afd;
        }
        if (i + 1 == naddrs && err && errlen) {
            size_t o = strlen(err);
            snprintf(err + o, errlen - o, " (and its %zu other address%s: %s)", naddrs - 1,
                     naddrs == 2 ? "" : "es", aerr);
        }
    }
    *used = 0;
    return fd;
}

static int io_err(int rc, const char *what, const char *server, int timeout_ms, char *err,
                  size_t errlen)
{
    if (rc == TERN_ERR_TIMEOUT)
        return tern_errf(err, errlen, rc, "handshake with %s: %s timed out after %d ms", server,
                         what, timeout_ms);
    if (rc == TERN_ERR_CLOSED)
        return tern_errf(err, errlen, rc,
                         "handshake with %s: peer closed the connection while %s", server,
                         what);
    return tern_errf(err, errlen, rc, "handshake with %s: %s failed: %s", server, what,
                     strerror(errno));
}

/* What a peer sent, as one printable line: \r \n \t \" \\ and \xNN escaped,
 * "..." appended when there was more than shown. */
static void hs_printable(const uint8_t *b, size_t n, int more, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < outlen; i++) {
        uint8_t c = b[i];
        const char *esc = c == '\r' ? "\\r" : c == '\n' ? "\\n" : c == '\t' ? "\\t"
                        : c == '"' ? "\\\"" : c == '\\' ? "\\\\" : NULL;
        if (esc)
            o += (size_t)snprintf(out + o, outlen - o, "%s", esc);
        else if (c >= 0x20 && c < 0x7f)
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", c);
        if (i + 1 < n && o + 8 >= outlen)
            more = 1;
    }
    if (more && o + 4 <= outlen)
        o += (size_t)snprintf(out + o, outlen - o, "...");
    out[o < outlen ? o : outlen - 1] = '\0';
}

/* A reply header that no tern daemon writes: a length of 0, or one of 4 GiB
 * or more (its high bytes are not zero: text such as "HTTP/1.1").  A web
 * server or another service on the port answers so; the error says that,
 * and shows the start of what it sent: the 8 header bytes and what else
 * arrives within 50 ms. */
static int not_a_daemon(int fd, const char *server, uint64_t n, char *err, size_t errlen)
{
    uint8_t got[64];
    for (int i = 0; i < 8; i++)
        got[i] = (uint8_t)(n >> (8 * i)); /* the header is little-endian */
    size_t have = 8;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    while (have < sizeof got && poll(&pf, 1, 50) == 1) {
        ssize_t r = recv(fd, got + have, sizeof got - have, MSG_DONTWAIT);
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    char shown[200];
    hs_printable(got, have, have == sizeof got, shown, sizeof shown);
    return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                     "handshake with %s: the peer is not a tern handshake daemon: it answered "
                     "\"%s\" (check that %s is the peer's server_name, its handshake "
                     "address, and not another service's port)",
                     server, shown, server);
}

static int read_reply(int fd, const char *server, int type, uint64_t max_frame, int io_ms,
                      char **reply, size_t *replylen, char *err, size_t errlen)
{
    uint8_t *p = NULL;
    uint64_t n;
    int stage;
    int rc = tern_hs_frame_recv(fd, max_frame, io_ms, &p, &n, &stage);
    if (rc == TERN_ERR_PROTOCOL && (n == 0 || n > UINT32_MAX))
        return not_a_daemon(fd, server, n, err, errlen);
    if (rc == TERN_ERR_PROTOCOL)
        return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                         "handshake with %s: reply length %llu is above the maximum "
                         "frame %llu (handshake_max_frame of this engine)",
                         server, (unsigned long long)n, (unsigned long long)max_frame);
    if (rc == TERN_ERR_TIMEOUT && stage == 0)
        return tern_errf(err, errlen, rc,
                         "handshake with %s: no reply: timed out after %d ms (is a tern "
                         "handshake daemon listening there, or another service that waits "
                         "for more input?)",
                         server, io_ms);
    if (rc == TERN_ERR_NOMEM)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "handshake: out of memory");
    if (rc)
        return io_err(rc, stage ? "reading the reply" : "reading the reply header", server,
                      io_ms, err, errlen);
    size_t off = 0;
    if (p[0] <= TERN_HS_PROBE) {
        if (p[0] != type) {
            int got = p[0];
            free(p);
            return tern_errf(err, errlen, TERN_ERR_PROTOCOL,
                             "handshake with %s: %s request answered with type %d", server,
                             tern_hs_type_name(type), got);
        }
        off = 1;
    }
    memmove(p, p + off, n + 1 - off); /* the terminating NUL too */
    *reply = (char *)p;
    if (replylen)
        *replylen = n - off;
    return 0;
}

int tern_hs_session_open(const tern_auth *auth, const char *server_name,
                         int connect_timeout_ms, int io_timeout_ms, uint64_t max_frame,
                         char *err, size_t errlen)
{
    if (connect_timeout_ms <= 0)
        connect_timeout_ms = 5000;
    if (io_timeout_ms <= 0)
        io_timeout_ms = TERN_HS_DEFAULT_IO_TIMEOUT_MS;
    int fd = hs_connect(server_name, connect_timeout_ms, err, errlen);
    if (fd < 0)
        return fd;
    int rc = auth ? tern_auth_hs_client(auth, fd, server_name, max_frame ? max_frame
                                        : TERN_HS_DEFAULT_MAX_FRAME, io_timeout_ms, err, errlen)
                  : 0;
    if (rc) {
        close(fd);
        return rc;
    }
    return fd; /* TCP_NODELAY already (connect_one) */
}

int tern_hs_session_request(int fd, const char *server_name, int type, const char *json,
                            size_t len, char **reply, size_t *replylen, uint64_t max_frame,
                            int io_timeout_ms, char *err, size_t errlen)
{
    *reply = NULL;
    if (!max_frame)
        max_frame = TERN_HS_DEFAULT_MAX_FRAME;
    if (io_timeout_ms <= 0)
        io_timeout_ms = TERN_HS_DEFAULT_IO_TIMEOUT_MS;
    if (len + 1 > max_frame || len + 1 > tern_hs_request_limit((uint8_t)type))
        return tern_errf(err, errlen, TERN_ERR_INVAL,
                         "handshake: %s request of %zu bytes exceeds its limit of %zu bytes "
                         "(docs/protocol.md, Handshake frames)",
                         tern_hs_type_name(type), len + 1, tern_hs_request_limit((uint8_t)type));
    uint8_t *frame;
    size_t flen;
    if (tern_hs_frame_build(type, json, len, &frame, &flen) != 0)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "handshake: out of memory");
    int rc = tern_io_write_all(fd, frame, flen, io_timeout_ms);
    free(frame);
    if (rc)
        return io_err(rc, "sending the request", server_name, io_timeout_ms, err, errlen);
    rc = read_reply(fd, server_name, type, max_frame, io_timeout_ms, reply, replylen, err,
                    errlen);
    size_t rl = rc == 0 && *reply ? strlen(*reply) : 0;
    if (rc == 0 && (rc = tern_auth_hs_refused(*reply, rl, server_name, err, errlen)) != 0) {
        free(*reply);
        *reply = NULL;
    }
    return rc;
}

int tern_hs_request(const char *server_name, int type, const char *json, size_t len,
                    char **reply, size_t *replylen, uint64_t max_frame,
                    int connect_timeout_ms, int io_timeout_ms, char *err, size_t errlen)
{
    return tern_hs_request_auth(NULL, server_name, type, json, len, reply, replylen, max_frame,
                                connect_timeout_ms, io_timeout_ms, err, errlen);
}

int tern_hs_request_auth(const tern_auth *auth, const char *server_name, int type,
                         const char *json, size_t len, char **reply, size_t *replylen,
                         uint64_t max_frame, int connect_timeout_ms, int io_timeout_ms,
                         char *err, size_t errlen)
{
    return tern_hs_request_via(auth, server_name, NULL, 0, NULL, type, json, len, reply,
                               replylen, max_frame, connect_timeout_ms, io_timeout_ms, err,
                               errlen);
}

int tern_hs_request_via(const tern_auth *auth, const char *server_name,
                        const char (*addrs)[TERN_HS_ADDR_MAX], size_t naddrs, size_t *used,
                        int type, const char *json, size_t len, char **reply, size_t *replylen,
                        uint64_t max_frame, int connect_timeout_ms, int io_timeout_ms,
                        char *err, size_t errlen)
{
    size_t first = 0;
    if (used)
        *used = 0;
    if (!server_name || !reply || type < 0 || type > 3 || (len && !json))
        return tern_errf(err, errlen, TERN_ERR_INVAL, "handshake: bad request arguments");
    *reply = NULL;
    if (!max_frame)
        max_frame = TERN_HS_DEFAULT_MAX_FRAME;
    if (len + 1 > max_frame)
        return tern_errf(err, errlen, TERN_ERR_INVAL,
                         "handshake: request of %zu bytes exceeds the maximum frame %llu", len,
                         (unsigned long long)max_frame);
    if (len + 1 > tern_hs_request_limit((uint8_t)type))
        return tern_errf(err, errlen, TERN_ERR_INVAL,
                         "handshake: %s request of %zu bytes exceeds its limit of %zu bytes "
                         "(docs/protocol.md, Handshake frames)",
                         tern_hs_type_name(type), len + 1, tern_hs_request_limit((uint8_t)type));
    if (connect_timeout_ms <= 0)
        connect_timeout_ms = 5000;
    if (io_timeout_ms <= 0)
        io_timeout_ms = TERN_HS_DEFAULT_IO_TIMEOUT_MS;
    uint8_t *frame;
    size_t flen;
    if (tern_hs_frame_build(type, json, len, &frame, &flen) != 0)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "handshake: out of memory");
    int fd = hs_connect_any(server_name, addrs, naddrs, connect_timeout_ms, &first, err, errlen);
    if (fd < 0) {
        free(frame);
        return fd;
    }
    if (used)
        *used = first;
    int rc = auth ? tern_auth_hs_client(auth, fd, server_name, max_frame, io_timeout_ms, err,
                                        errlen)
                  : 0;
    if (rc) {
        free(frame);
        close(fd);
        return rc;
    }
    rc = tern_io_write_all(fd, frame, flen, io_timeout_ms);
    free(frame);
    if (rc)
        rc = io_err(rc, "sending the request", server_name, io_timeout_ms, err, errlen);
    else
        rc = read_reply(fd, server_name, type, max_frame, io_timeout_ms, reply, replylen, err,
                        errlen);
    close(fd);
    size_t rl = rc == 0 && *reply ? strlen(*reply) : 0;
    if (rc == 0 && (rc = tern_auth_hs_refused(*reply, rl, server_name, err, errlen)) != 0) {
        free(*reply); /* the daemon wants the shared secret (or refused ours) */
        *reply = NULL;
    }
    return rc;
}
