/* fuzz/tcp_request.c: the TCP transport's target side (request header
 * parse, validation, range check against registered memory, WRITE payload,
 * READ reply, refusals and drains) driven through a real loopback
 * connection to the plugin's data port.  The plugin's sources are linked in
 * and initialised once with host services filled in here.
 *
 * Memory: GUARD | BUF | GUARD mapped at a fixed address (FIXED_BASE) so the
 * seeds can name real addresses; only BUF is registered.  After every input
 * the guards must still hold their canary bytes: nothing outside registered
 * memory may be written.  Each input is the byte stream one initiator sends
 * before it shuts down writing; the harness reads every reply until the
 * target closes (a target that neither answers nor closes is a finding). */
#define _GNU_SOURCE /* MAP_FIXED_NOREPLACE, pthread_rwlock_t */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "desc/desc.h"
#include "tcp_internal.h"
#include "tern/transport.h"

extern const tern_transport tern_transport_v1;

#define FIXED_BASE 0x10000000ul /* guard; BUF at +4096; guard at +8192 */
#define PAGE 4096
#define CANARY 0xA5

static void *ctx;
static uint8_t *map;
static int port;

static const char *h_get(void *host, const char *key)
{
    (void)host;
    return !strcmp(key, "bind") ? "127.0.0.1" : NULL;
}

static int64_t h_get_int(void *host, const char *key, int64_t fallback)
{
    (void)host;
    (void)key;
    return fallback;
}

static void h_log(void *host, int level, const char *fmt, ...)
{
    (void)host;
    (void)level;
    (void)fmt; /* quiet: every malformed header is logged at WARN */
}

/* The target side hands no slice back; the initiator side is not used. */
static void h_complete(void *host, tern_slice *slice)
{
    (void)host;
    (void)slice;
}

static void setup(void)
{
    static tern_host_services hs;
    hs = (tern_host_services){
        .struct_size = sizeof hs, .log = h_log, .config_get = h_get,
        .config_get_int = h_get_int, .alloc = malloc, .free = free,
        .desc_set_str = tern_desc_set_str, .desc_set_u64 = tern_desc_set_u64,
        .desc_set_u32_array = tern_desc_set_u32_array, .desc_get_str = tern_desc_get_str,
        .desc_get_u64 = tern_desc_get_u64, .desc_get_u32_array = tern_desc_get_u32_array,
        .server_name = "127.0.0.1:0", .io_timeout_ms = 1000, .sysfs_root = "/sys",
        .complete = h_complete};
    char err[512];
    if (tern_transport_v1.init(&hs, &ctx, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_tcp_request: init: %s\n", err);
        abort();
    }
    map = mmap((void *)FIXED_BASE, 3 * PAGE, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (map == MAP_FAILED || map != (uint8_t *)FIXED_BASE)
        abort();
    memset(map, CANARY, 3 * PAGE);
    tern_mr_keys keys;
    void *mr;
    if (tern_transport_v1.mr_register(ctx, map + PAGE, PAGE, &keys, &mr, err, sizeof err))
        abort();
    tern_desc *blob = tern_desc_new();
    uint64_t p = 0;
    tern_transport_v1.segment_describe(ctx, blob);
    tern_desc_get_u64(blob, "port", &p);
    tern_desc_free(blob);
    port = (int)p;
}

/* Wait until the target has let go of every connection, so the leak check
 * after each input does not see one halfway through its cleanup (and the
 * guards are checked after all writes). */
static void quiesce(void)
{
    tcp_ctx *c = ctx;
    for (int i = 0; i < 20000; i++) {
        pthread_mutex_lock(&c->srv_mu);
        int busy = c->nsrv != 0;
        pthread_mutex_unlock(&c->srv_mu);
        if (!busy)
            return;
        usleep(100);
    }
    fprintf(stderr, "fuzz_tcp_request: a connection was not let go in 2 s\n");
    abort();
}

static void check_guards(void)
{
    for (size_t i = 0; i < PAGE; i++)
        if (map[i] != CANARY || map[2 * PAGE + i] != CANARY) {
            fprintf(stderr, "fuzz_tcp_request: guard byte %zu overwritten\n", i);
            abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx)
        setup();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS)) {
        perror("fuzz_tcp_request: connect");
        abort();
    }
    /* Close with a reset: no TIME_WAIT, so many inputs do not exhaust ports. */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    size_t off = 0;
    int wr_open = 1;
    char buf[65536];
    /* Send and receive at once: READ replies must not deadlock the input. */
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN | (wr_open ? POLLOUT : 0)};
        int n;
        do /* libFuzzer's -timeout alarm interrupts poll */
            n = poll(&p, 1, 10000);
        while (n < 0 && errno == EINTR);
        if (n != 1) {
            fprintf(stderr, "fuzz_tcp_request: target neither answered nor closed\n");
            abort();
        }
        if (wr_open && (p.revents & POLLOUT)) {
            ssize_t w = off < size ? send(fd, data + off, size - off, MSG_NOSIGNAL) : 0;
            if (w > 0)
                off += (size_t)w;
            if (off >= size || (w < 0 && errno != EAGAIN)) {
                shutdown(fd, SHUT_WR);
                wr_open = 0;
            }
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = recv(fd, buf, sizeof buf, 0);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
                break;
        }
    }
    close(fd);
    quiesce();
    check_guards();
    return 0;
}
