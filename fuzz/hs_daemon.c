/* fuzz/hs_daemon.c: the handshake daemon's per-connection state machine
 * (header, payload, worker, reply, drain) driven through a real loopback
 * socket: each input is what one client sends before it shuts down writing.
 * One daemon runs for the whole fuzzing session with a small max_frame and
 * a handler that decodes the JSON as a handshake descriptor, like the
 * engine's Connection handler.  After the input the client reads until the
 * daemon closes: a daemon that stops answering or crashes is a finding
 * (a Probe must still be answered after every input). */
#define _GNU_SOURCE /* strdup */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "desc/handshake_desc.h"
#include "peer/mooncake_compat.h"
#include "control/handshake.h"
#include "tern/errors.h"

static tern_hs_server *srv;
static char name[64];

static int handler(void *arg, int type, const char *json, size_t len, char **reply,
                   size_t *replylen)
{
    (void)arg;
    char err[256];
    tern_handshake_desc hd;
    tern_mooncake_hs mk;
    if (type == TERN_HS_CONNECTION &&
        tern_mooncake_hs_decode(json, len, &hd, &mk, err, sizeof err) == 0) {
        *reply = tern_mooncake_hs_encode(&hd, &mk);
        tern_handshake_desc_clear(&hd);
    } else {
        *reply = strdup("{\"ok\":true}");
    }
    *replylen = *reply ? strlen(*reply) : 0;
    return 0;
}

static void start(void)
{
    char err[256];
    tern_hs_options o = {.bind_host = "127.0.0.1", .port = 0, .max_frame = 64 * 1024,
                         .io_timeout_ms = 2000, .max_connections = 64, .handler = handler};
    if (tern_hs_server_start(&o, &srv, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_hs_daemon: %s\n", err);
        abort();
    }
    snprintf(name, sizeof name, "127.0.0.1:%u", tern_hs_server_port(srv));
}

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(tern_hs_server_port(srv)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int rc;
    do /* libFuzzer's -timeout alarm interrupts connect */
        rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&a, sizeof a);
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
        perror("fuzz_hs_daemon: connect");
        abort();
    }
    /* Close with a reset: no TIME_WAIT, so 100k inputs do not exhaust ports. */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv)
        start();
    if (size > 128 * 1024)
        return 0;
    int fd = dial();
    size_t off = 0;
    while (off < size) {
        ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* the daemon closed early (e.g. length over the limit) */
        off += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    /* Read the reply (if any) until the daemon closes; bounded. */
    char buf[4096];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n;
        do /* libFuzzer's -timeout alarm interrupts poll */
            n = poll(&p, 1, 5000);
        while (n < 0 && errno == EINTR);
        if (n != 1)
            abort(); /* the daemon must close within its io timeout */
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0)
            break;
    }
    close(fd);
    /* Still alive and answering?  (every 16 inputs: it costs a connection) */
    static unsigned n;
    if (n++ % 16)
        return 0;
    char *reply = NULL, err[256];
    size_t rlen = 0;
    if (tern_hs_request(name, TERN_HS_PROBE, "", 0, &reply, &rlen, 0, 2000, 2000, err,
                        sizeof err) != 0) {
        fprintf(stderr, "fuzz_hs_daemon: probe after input failed: %s\n", err);
        abort();
    }
    free(reply);
    return 0;
}
