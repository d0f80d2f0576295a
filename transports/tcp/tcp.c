/* transports/tcp/tcp.c: the TCP transport ("tcp"), the fallback that works
 * everywhere.  Wire format: docs/protocol.md, "TCP data frames" (fixed
 * 32-byte little-endian request header + WRITE data; 24-byte reply header
 * for every request + READ data; replies in request order).
 *
 * Shape:
 *  - A fixed pool of `io_threads` I/O threads (tcp_loop.c; default: one per
 *    online CPU) serves every socket of the instance, target and initiator
 *    side alike, with epoll and non-blocking sockets.  Threads do not grow
 *    with peers: a peer costs a socket and a few hundred bytes per side.
 *    Chosen over a thread per connection (the previous design) after
 *    measuring both with bench/peers.sh: the copy still spreads over cores
 *    because one peer's connections sit on different threads, and a
 *    stranger that holds a connection open costs a socket, not a thread.
 *  - Target side: one data port per plugin instance (option `port`, 0 =
 *    ephemeral), advertised by segment_describe as {"host", "port"}
 *    (tcp_accept.c); each connection is a small state machine moving data
 *    straight between the socket and registered memory (tcp_server.c),
 *    with budgets for strangers (tcp_budget.c) and a progress deadline.
 *  - Initiator side (tcp_client.c): an endpoint opens one connection and
 *    more (up to `connections`) while its queue is deep; submit() sends
 *    from the caller's thread when the socket is free, the I/O thread reads
 *    the replies and hands each slice to the core with the host service
 *    complete() at once (no queue, no poll).  A lone small request (the
 *    only one on its connection) is waited for inside submit(), up to
 *    reply_wait_us, and its reply read on the caller's thread: a round
 *    trip then wakes one thread on each side, as a plain ping-pong does.
 *  - Registered ranges: a sorted array under a rwlock held only to look up
 *    or change it.  A transfer pins its range; deregistration waits for the
 *    transfers on that range only, up to unregister_wait_ms, then revokes
 *    the range so no further byte is moved there.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tcp_auth.h"
#include "tcp_internal.h"
#include "tcp_wire.h"
#include "tern/tern.h"

/* ---- small helpers -------------------------------------------------------- */

void tcp_log(tcp_ctx *ctx, int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx && ctx->host.log)
        /* the host names the transport itself */
        ctx->host.log(ctx->host.host, level, "%s", strncmp(msg, "tcp: ", 5) ? msg : msg + 5);
    else if (level <= TERN_LOG_WARN)
        fprintf(stderr, "tern tcp: %s\n", msg);
}

int tcp_errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *tcp_errname(int code)
{
    switch (code) {
    case TERN_OK: return "ok";
    case TERN_ERR_INVAL: return "TERN_ERR_INVAL";
    case TERN_ERR_NOMEM: return "TERN_ERR_NOMEM";
    case TERN_ERR_IO: return "TERN_ERR_IO";
    case TERN_ERR_TIMEOUT: return "TERN_ERR_TIMEOUT";
    case TERN_ERR_PROTOCOL: return "TERN_ERR_PROTOCOL";
    case TERN_ERR_CONNECT: return "TERN_ERR_CONNECT";
    case TERN_ERR_RANGE: return "TERN_ERR_RANGE";
    case TERN_ERR_CLOSED: return "TERN_ERR_CLOSED";
    default: return "error";
    }
}

uint64_t tcp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Socket options every data connection gets (both sides). */
void tcp_sock_tune(tcp_ctx *ctx, int fd)
{
    int one = 1;
    if (ctx->opt_nodelay)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (ctx->opt_sndbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &ctx->opt_sndbuf, sizeof ctx->opt_sndbuf);
    if (ctx->opt_rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &ctx->opt_rcvbuf, sizeof ctx->opt_rcvbuf);
}

/* ---- options --------------------------------------------------------------- */

static const tern_option tcp_options[] = {
    {"port", TERN_OPT_INT, 0, 65535, NULL, "0",
     "data port the target listens on (0 = ephemeral, advertised in the descriptor)"},
    {"bind", TERN_OPT_STRING, 0, 0, NULL, NULL,
     "address the data port binds: that one NIC only (default: the host of the engine's "
     "server name, and every other NIC when that is not a loopback address)"},
    {"devices", TERN_OPT_STRING_LIST, 0, 0, NULL, NULL,
     "interfaces to serve on, one data port each (default: every interface that is up, not "
     "loopback and has an address of the server name's family)"},
    {"connections", TERN_OPT_INT, 1, 64, NULL, "4",
     "most connections per peer: one is opened first, more while its queue is deep"},
    {"io_threads", TERN_OPT_INT, 0, 256, NULL, "0",
     "I/O threads serving all connections of both sides (0 = one per online CPU)"},
    {"idle_close_ms", TERN_OPT_INT, 0, 86400000, NULL, "10000",
     "an extra connection to a peer closes after this long unused (0 = never)"},
    {"slice_size", TERN_OPT_SIZE, 4096, 1ll << 30, NULL, "1M",
     "slice size for this transport"},
    {"nodelay", TERN_OPT_BOOL, 0, 0, NULL, "true", "set TCP_NODELAY on data connections"},
    {"reply_wait_us", TERN_OPT_INT, 0, 100000, NULL, "200",
     "a lone small request waits this long in submit for its reply on the caller's thread "
     "(one thread wake less per round trip; 0 = never)"},
    {"sndbuf", TERN_OPT_SIZE, 0, 1ll << 30, NULL, "0",
     "SO_SNDBUF of data connections (0 = kernel autotuning)"},
    {"rcvbuf", TERN_OPT_SIZE, 0, 1ll << 30, NULL, "0",
     "SO_RCVBUF of data connections (0 = kernel autotuning)"},
    {"mooncake_port", TERN_OPT_INT, -1, 65535, NULL, "-1",
     "port serving Mooncake-format initiators (-1 = off, 0 = ephemeral); published as "
     "tcp_data_port"},
    {"max_server_connections", TERN_OPT_INT, 1, 1 << 20, NULL, "4096",
     "incoming data connections served at once"},
    {"max_unproven", TERN_OPT_INT, 1, 1 << 20, NULL, "256",
     "incoming connections that proved nothing yet (no request, no authentication)"},
    {"max_unproven_per_source", TERN_OPT_INT, 1, 1 << 20, NULL, "16",
     "of those, from one source address (the oldest is dropped for a new one)"},
    {"unproven_idle_ms", TERN_OPT_INT, 0, 86400000, NULL, "5000",
     "an incoming connection that proved nothing is dropped after this long (0 = never)"},
    {"progress_min_rate", TERN_OPT_SIZE, 0, 1ll << 40, NULL, "64K",
     "bytes per second a peer must move while its request is under way (0 = no floor)"},
    {"progress_window_ms", TERN_OPT_INT, 100, 600000, NULL, "2000",
     "the window over which progress_min_rate is averaged"},
    {"unregister_wait_ms", TERN_OPT_INT, 0, 600000, NULL, "1000",
     "how long deregistering waits for transfers on the range before cutting them"},
    {NULL, TERN_OPT_END, 0, 0, NULL, NULL, NULL},
};

static int64_t opt_int(tcp_ctx *ctx, const char *key, int64_t fallback)
{
    if (!ctx->host.config_get_int)
        return fallback;
    return ctx->host.config_get_int(ctx->host.host, key, fallback);
}

static int opt_bool(tcp_ctx *ctx, const char *key, int fallback)
{
    const char *v = ctx->host.config_get ? ctx->host.config_get(ctx->host.host, key) : NULL;
    if (!v)
        return fallback;
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "on"))
        return 1;
    return 0;
}

/* "host:port", "[v6]:port" or "host" -> host. */
static void host_of_server_name(const char *name, char *out, size_t outlen)
{
    out[0] = 0;
    if (!name || !*name)
        return;
    if (name[0] == '[') {
        const char *e = strchr(name, ']');
        size_t n = e ? (size_t)(e - name - 1) : strlen(name + 1);
        snprintf(out, outlen, "%.*s", (int)n, name + 1);
        return;
    }
    const char *c = strrchr(name, ':');
    if (c && strchr(name, ':') == c)
        snprintf(out, outlen, "%.*s", (int)(c - name), name);
    else
        snprintf(out, outlen, "%s", name);
}

static int tcp_read_options(tcp_ctx *ctx, char *err, size_t errlen)
{
    ctx->opt_port = (int)opt_int(ctx, "port", 0);
    ctx->opt_mc_port = (int)opt_int(ctx, "mooncake_port", -1);
    ctx->opt_nconn = (int)opt_int(ctx, "connections", 4);
    ctx->opt_slice_size = (uint64_t)opt_int(ctx, "slice_size", 1 << 20);
    ctx->opt_sndbuf = (int)opt_int(ctx, "sndbuf", 0);
    ctx->opt_rcvbuf = (int)opt_int(ctx, "rcvbuf", 0);
    ctx->opt_max_server_conns = (int)opt_int(ctx, "max_server_connections", 4096);
    ctx->opt_io_threads = (int)opt_int(ctx, "io_threads", 0);
    ctx->opt_idle_close_ms = (int)opt_int(ctx, "idle_close_ms", 10000);
    ctx->opt_reply_wait_us = (int)opt_int(ctx, "reply_wait_us", 200);
    ctx->opt_max_unproven = (int)opt_int(ctx, "max_unproven", 256);
    ctx->opt_unproven_per_source = (int)opt_int(ctx, "max_unproven_per_source", 16);
    ctx->opt_unproven_idle_ms = (int)opt_int(ctx, "unproven_idle_ms", 5000);
    ctx->opt_progress_min_rate = (uint64_t)opt_int(ctx, "progress_min_rate", 64 << 10);
    ctx->opt_progress_window_ms = (int)opt_int(ctx, "progress_window_ms", 2000);
    ctx->opt_unregister_wait_ms = (int)opt_int(ctx, "unregister_wait_ms", 1000);
    if (ctx->opt_io_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        ctx->opt_io_threads = n < 1 ? 1 : n > 16 ? 16 : (int)n;
    }
    if (ctx->opt_progress_window_ms < 100)
        ctx->opt_progress_window_ms = 100;
    if (ctx->opt_max_unproven < 1)
        ctx->opt_max_unproven = 1;
    if (ctx->opt_unproven_per_source < 1)
        ctx->opt_unproven_per_source = 1;
    ctx->opt_nodelay = opt_bool(ctx, "nodelay", 1);
    if (ctx->opt_port < 0 || ctx->opt_port > 65535)
        return tcp_errf(err, errlen, TERN_ERR_CONFIG,
                        "transports.tcp.port: %d is not a port (0..65535)", ctx->opt_port);
    if (ctx->opt_nconn < 1 || ctx->opt_nconn > 64)
        return tcp_errf(err, errlen, TERN_ERR_CONFIG,
                        "transports.tcp.connections: %d is out of range 1..64", ctx->opt_nconn);
    if (ctx->opt_max_server_conns < 1)
        ctx->opt_max_server_conns = 4096;
    const char *bind = ctx->host.config_get ? ctx->host.config_get(ctx->host.host, "bind") : NULL;
    const char *sn = TERN_HAS_MEMBER(ctx->host.struct_size, tern_host_services, server_name)
                         ? ctx->host.server_name : NULL;
    char snhost[TCP_HOST_MAX];
    host_of_server_name(sn, snhost, sizeof snhost);
    ctx->bind_given = bind && *bind;
    if (bind && *bind)
        snprintf(ctx->bind_host, sizeof ctx->bind_host, "%s", bind);
    else
        snprintf(ctx->bind_host, sizeof ctx->bind_host, "%s", *snhost ? snhost : "127.0.0.1");
    /* Advertise the bind address unless it is a wildcard. */
    int wild = !strcmp(ctx->bind_host, "0.0.0.0") || !strcmp(ctx->bind_host, "::") ||
               !strcmp(ctx->bind_host, "*");
    snprintf(ctx->adv_host, sizeof ctx->adv_host, "%s",
             wild ? (*snhost && strcmp(snhost, "0.0.0.0") ? snhost : "127.0.0.1") : ctx->bind_host);
    if (!strcmp(ctx->bind_host, "*"))
        snprintf(ctx->bind_host, sizeof ctx->bind_host, "0.0.0.0");
    return 0;
}

/* ---- completions and warnings ------------------------------------------------ */

void tcp_complete(tcp_ctx *ctx, tern_slice *s)
{
    ctx->host.complete(ctx->host.host, s);
}

void tcp_warn_limited(tcp_ctx *ctx, tcp_ratelim *rl, const char *fmt, ...)
{
    uint64_t now = tcp_now_ms(), last = atomic_load(&rl->last_ms);
    if (last && tcp_since(now, last) < 1000) {
        atomic_fetch_add(&rl->skipped, 1);
        return;
    }
    if (!atomic_compare_exchange_strong(&rl->last_ms, &last, now ? now : 1)) {
        atomic_fetch_add(&rl->skipped, 1);
        return;
    }
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint64_t skipped = atomic_exchange(&rl->skipped, 0);
    if (skipped)
        tcp_log(ctx, TERN_LOG_WARN, "%s (%" PRIu64 " more like it in the last %" PRIu64
                " ms not shown)", msg, skipped, last ? tcp_since(now, last) : 0);
    else
        tcp_log(ctx, TERN_LOG_WARN, "%s", msg);
}

/* ---- init / fini ------------------------------------------------------------ */

static void tcp_ctx_free(tcp_ctx *ctx)
{
    pthread_rwlock_destroy(&ctx->mr_lock);
    pthread_mutex_destroy(&ctx->srv_mu);
    pthread_mutex_destroy(&ctx->ep_mu);
    for (size_t i = 0; i < ctx->nmr; i++)
        tcp_mr_unpin(ctx->mrs[i]);
    free(ctx->mrs);
    free(ctx);
}

static int tcp_init(const tern_host_services *host, void **out, char *err, size_t errlen)
{
    if (!host || !out)
        return tcp_errf(err, errlen, TERN_ERR_INVAL, "tcp init: host services missing");
    if (!TERN_HAS_MEMBER(host->struct_size, tern_host_services, complete) || !host->complete)
        return tcp_errf(err, errlen, TERN_ERR_NOT_SUPPORTED,
                        "tcp init: the host does not offer the complete() service (transport "
                        "ABI 1.1); this transport needs a core of ABI 1.1 or later");
    tcp_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return tcp_errf(err, errlen, TERN_ERR_NOMEM, "tcp init: out of memory");
    size_t n = host->struct_size < sizeof ctx->host ? host->struct_size : sizeof ctx->host;
    memcpy(&ctx->host, host, n);
    ctx->host.struct_size = (uint32_t)n;
    ctx->io_timeout_ms = TERN_HAS_MEMBER(n, tern_host_services, io_timeout_ms) &&
                                 host->io_timeout_ms > 0 ? host->io_timeout_ms : 5000;
    pthread_rwlock_init(&ctx->mr_lock, NULL);
    pthread_mutex_init(&ctx->srv_mu, NULL);
    pthread_mutex_init(&ctx->ep_mu, NULL);
    ctx->next_key = 1;
    ctx->auth = tcp_auth_enabled(ctx);
    int rc = tcp_read_options(ctx, err, errlen);
    if (rc == 0)
        rc = tcp_nics_pick(ctx, err, errlen);
    if (rc == 0)
        rc = tcp_workers_start(ctx, err, errlen);
    if (rc == 0) {
        rc = tcp_server_start(ctx, err, errlen);
        if (rc == 0)
            rc = tcp_mc_start(ctx, err, errlen); /* Mooncake's format, tcp_mooncake_glue.c */
        if (rc)
            tcp_workers_stop(ctx);
    }
    if (rc) {
        tcp_ctx_free(ctx);
        return rc;
    }
    for (int i = 0; i < ctx->nnics; i++)
        tcp_log(ctx, TERN_LOG_INFO, "device %s: data port %s:%d (bind %s)", ctx->nics[i].name,
                ctx->nics[i].adv, ctx->nics[i].port, ctx->nics[i].bind);
    tcp_log(ctx, TERN_LOG_INFO, "%d device(s), %d I/O threads, up to %d connections per peer "
            "and device pair", ctx->nnics, ctx->nworkers, ctx->opt_nconn);
    *out = ctx;
    return 0;
}

static void tcp_fini(void *vctx)
{
    tcp_ctx *ctx = vctx;
    if (!ctx)
        return;
    /* Endpoints first (their slices complete with an error), then the
     * I/O threads close the target side and the listener. */
    for (;;) {
        pthread_mutex_lock(&ctx->ep_mu);
        tcp_ep *ep = ctx->eps;
        pthread_mutex_unlock(&ctx->ep_mu);
        if (!ep)
            break;
        tcp_ep_close(ep);
    }
    tcp_mc_stop(ctx);
    tcp_workers_stop(ctx);
    tcp_ctx_free(ctx);
}

static int tcp_devices(void *vctx, tern_device_info *out, int max)
{
    tcp_ctx *ctx = vctx;
    if (!ctx || !out || max < 1)
        return TERN_ERR_INVAL;
    int n = ctx->nnics < max ? ctx->nnics : max;
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        snprintf(out[i].name, sizeof out[i].name, "%s", ctx->nics[i].name);
        snprintf(out[i].sysfs_path, sizeof out[i].sysfs_path, "%s", ctx->nics[i].sysfs);
        out[i].numa_node = ctx->nics[i].sysfs[0] ? -2 : -1;
    }
    return n;
}

/* ---- registered memory --------------------------------------------------- */

/* Index of the first range whose addr > a (binary search). */
static size_t mr_upper(const tcp_ctx *ctx, uint64_t a)
{
    size_t lo = 0, hi = ctx->nmr;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ctx->mrs[mid]->addr <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Caller holds mr_lock.  Overflow-safe. */
static tcp_mr *mr_find_locked(const tcp_ctx *ctx, uint64_t addr, uint64_t len)
{
    if (len == 0 || addr + len < addr)
        return NULL;
    size_t i = mr_upper(ctx, addr);
    if (i == 0)
        return NULL;
    tcp_mr *m = ctx->mrs[i - 1];
    uint64_t off = addr - m->addr;   /* addr >= m->addr here */
    if (off >= m->len || len > m->len - off)
        return NULL;
    return m;
}

tcp_mr *tcp_mr_pin(tcp_ctx *ctx, uint64_t addr, uint64_t len)
{
    pthread_rwlock_rdlock(&ctx->mr_lock);
    tcp_mr *m = mr_find_locked(ctx, addr, len);
    if (m)
        atomic_fetch_add(&m->refs, 1);
    pthread_rwlock_unlock(&ctx->mr_lock);
    return m;
}

void tcp_mr_unpin(tcp_mr *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1)
        free(m);
}

/* With tcp_mr_deregister's store of `revoked` then load of `io`, either
 * the deregistration sees this call in progress and waits for it, or this
 * call sees the range revoked and moves nothing (sequentially consistent
 * atomics on both sides). */
int tcp_mr_io_begin(tcp_mr *m)
{
    atomic_fetch_add(&m->io, 1);
    if (atomic_load(&m->revoked)) {
        atomic_fetch_sub(&m->io, 1);
        return -1;
    }
    return 0;
}

void tcp_mr_io_end(tcp_mr *m)
{
    atomic_fetch_sub(&m->io, 1);
}

static int tcp_mr_register(void *vctx, void *addr, size_t len, tern_mr_keys *keys,
                           void **mr, char *err, size_t errlen)
{
    tcp_ctx *ctx = vctx;
    uint64_t a = (uint64_t)(uintptr_t)addr;
    if (!ctx || !addr || !len || !mr)
        return tcp_errf(err, errlen, TERN_ERR_INVAL,
                        "tcp mr_register: NULL address or zero length (addr %p, len %zu)",
                        addr, len);
    if (a + len < a)
        return tcp_errf(err, errlen, TERN_ERR_INVAL,
                        "tcp mr_register: [%p, +%zu) wraps around the address space", addr, len);
    tcp_mr *m = calloc(1, sizeof *m);
    if (!m)
        return tcp_errf(err, errlen, TERN_ERR_NOMEM, "tcp mr_register: out of memory");
    m->addr = a;
    m->len = len;
    /* Device memory is reached through a bounce buffer (tcp_server.c). */
    m->gpu = TERN_HAS_MEMBER(ctx->host.struct_size, tern_host_services, mem_copy) &&
                     ctx->host.mem_gpu && ctx->host.mem_copy
                 ? ctx->host.mem_gpu(ctx->host.host, addr) : -1;
    atomic_init(&m->refs, 1); /* the table's */
    pthread_rwlock_wrlock(&ctx->mr_lock);
    size_t i = mr_upper(ctx, a);
    int overlap = (i > 0 && ctx->mrs[i - 1]->addr + ctx->mrs[i - 1]->len > a) ||
                  (i < ctx->nmr && ctx->mrs[i]->addr < a + len);
    if (overlap) {
        const tcp_mr *o = (i > 0 && ctx->mrs[i - 1]->addr + ctx->mrs[i - 1]->len > a)
                              ? ctx->mrs[i - 1] : ctx->mrs[i];
        uint64_t oa = o->addr, ol = o->len;
        pthread_rwlock_unlock(&ctx->mr_lock);
        free(m);
        return tcp_errf(err, errlen, TERN_ERR_EXISTS,
                        "tcp mr_register: [0x%" PRIx64 ", +%zu) overlaps registered "
                        "[0x%" PRIx64 ", +%" PRIu64 ")", a, len, oa, ol);
    }
    if (ctx->nmr == ctx->capmr) {
        size_t nc = ctx->capmr ? ctx->capmr * 2 : 16;
        tcp_mr **nm = realloc(ctx->mrs, nc * sizeof *nm);
        if (!nm) {
            pthread_rwlock_unlock(&ctx->mr_lock);
            free(m);
            return tcp_errf(err, errlen, TERN_ERR_NOMEM, "tcp mr_register: out of memory");
        }
        ctx->mrs = nm;
        ctx->capmr = nc;
    }
    memmove(&ctx->mrs[i + 1], &ctx->mrs[i], (ctx->nmr - i) * sizeof *ctx->mrs);
    ctx->mrs[i] = m;
    ctx->nmr++;
    m->key = ctx->next_key++;
    pthread_rwlock_unlock(&ctx->mr_lock);
    if (keys) { /* informative only: TCP has no keys; one per device for the core */
        memset(keys, 0, sizeof *keys);
        keys->ndev = ctx->nnics;
        for (int d = 0; d < ctx->nnics; d++)
            keys->lkey[d] = keys->rkey[d] = m->key;
    }
    *mr = m;
    return 0;
}

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000L};
    nanosleep(&ts, NULL);
}

static int tcp_mr_deregister(void *vctx, void *vmr)
{
    tcp_ctx *ctx = vctx;
    tcp_mr *m = vmr;
    if (!ctx || !m)
        return TERN_ERR_INVAL;
    pthread_rwlock_wrlock(&ctx->mr_lock);
    size_t i;
    for (i = 0; i < ctx->nmr && ctx->mrs[i] != m; i++)
        ;
    if (i == ctx->nmr) {
        pthread_rwlock_unlock(&ctx->mr_lock);
        return TERN_ERR_NOT_FOUND;
    }
    memmove(&ctx->mrs[i], &ctx->mrs[i + 1], (ctx->nmr - i - 1) * sizeof *ctx->mrs);
    ctx->nmr--;
    pthread_rwlock_unlock(&ctx->mr_lock);
    /* No new transfer finds the range now.  Those under way on it finish,
     * up to unregister_wait_ms; then the rest are revoked. */
    uint64_t end = tcp_now_ms() + (uint64_t)ctx->opt_unregister_wait_ms;
    while (atomic_load(&m->refs) > 1 && tcp_now_ms() < end)
        sleep_us(200);
    if (atomic_load(&m->refs) > 1)
        tcp_log(ctx, TERN_LOG_WARN,
                "deregistering [0x%" PRIx64 ", +%" PRIu64 "): %d transfer(s) on it did not "
                "finish within unregister_wait_ms (%d ms); they are cut off",
                m->addr, m->len, atomic_load(&m->refs) - 1, ctx->opt_unregister_wait_ms);
    atomic_store(&m->revoked, 1);
    while (atomic_load(&m->io) > 0) /* one non-blocking system call at most */
        sleep_us(20);
    tcp_mr_unpin(m);
    return 0;
}

/* ---- descriptor -------------------------------------------------------------- */

static int tcp_segment_describe(void *vctx, tern_desc *out)
{
    tcp_ctx *ctx = vctx;
    if (!ctx || !out || !ctx->host.desc_set_str || !ctx->host.desc_set_u64)
        return TERN_ERR_INVAL;
    int rc = ctx->host.desc_set_str(out, "host", ctx->adv_host);
    if (rc == 0)
        rc = ctx->host.desc_set_u64(out, "port", (uint64_t)ctx->lport);
    /* Several NICs: each one's address under "host@<device>", "port@<device>"
     * (a reader that knows only "host" and "port" reaches the first one). */
    for (int i = 0; rc == 0 && ctx->nnics > 1 && i < ctx->nnics; i++) {
        char key[TERN_NAME_MAX + 8];
        snprintf(key, sizeof key, "host@%s", ctx->nics[i].name);
        rc = ctx->host.desc_set_str(out, key, ctx->nics[i].adv);
        snprintf(key, sizeof key, "port@%s", ctx->nics[i].name);
        if (rc == 0)
            rc = ctx->host.desc_set_u64(out, key, (uint64_t)ctx->nics[i].port);
    }
    if (rc == 0)
        rc = tcp_mc_describe(ctx, out);
    return rc;
}

static int tcp_query(void *vctx, const char *what, char *out, size_t outlen)
{
    tcp_ctx *ctx = vctx;
    (void)what;
    if (!ctx || !out || !outlen)
        return TERN_ERR_INVAL;
    pthread_rwlock_rdlock(&ctx->mr_lock);
    size_t nmr = ctx->nmr;
    pthread_rwlock_unlock(&ctx->mr_lock);
    pthread_mutex_lock(&ctx->srv_mu);
    int nsrv = ctx->nsrv, nun = ctx->nunproven;
    pthread_mutex_unlock(&ctx->srv_mu);
    snprintf(out, outlen,
             "data port %s:%d (%d device(s)), %d I/O threads, %d connections per peer, slice %" PRIu64
             ", %zu buffers, %d incoming connections (%d unproven), served %" PRIu64
             " requests (%" PRIu64 " refused), in %" PRIu64 " B, out %" PRIu64 " B, %" PRIu64
             " connects, %" PRIu64 " broken connections, %" PRIu64 " strangers evicted, %"
             PRIu64 " slow connections cut",
             ctx->adv_host, ctx->lport, ctx->nnics, ctx->nworkers, ctx->opt_nconn, ctx->opt_slice_size,
             nmr, nsrv, nun, (uint64_t)ctx->st_req_served, (uint64_t)ctx->st_refused,
             (uint64_t)ctx->st_bytes_in, (uint64_t)ctx->st_bytes_out,
             (uint64_t)ctx->st_connects, (uint64_t)ctx->st_conn_broken,
             (uint64_t)ctx->st_evicted, (uint64_t)ctx->st_slow_cut);
    return 0;
}

TERN_TRANSPORT_EXPORT const tern_transport tern_transport_v1 = {
    .magic = TERN_TRANSPORT_MAGIC,
    .struct_size = sizeof(tern_transport),
    .abi_major = TERN_TRANSPORT_ABI_MAJOR,
    .abi_minor = 1,
    .name = "tcp",
    .version = "0.2.0",
    .caps = TERN_CAP_READ | TERN_CAP_WRITE | TERN_CAP_REMOTE_CHECK | TERN_CAP_GPU_TARGET |
            TERN_CAP_MULTI_DEVICE,
    .options = tcp_options,
    .default_slice_size = 1u << 20,
    .init = tcp_init,
    .fini = tcp_fini,
    .devices = tcp_devices,
    .mr_register = tcp_mr_register,
    .mr_deregister = tcp_mr_deregister,
    .segment_describe = tcp_segment_describe,
    .ep_open = tcp_any_ep_open,
    .ep_describe = NULL, /* no handshake fields: the segment blob says everything */
    .ep_connect = tcp_any_ep_connect,
    .ep_close = tcp_any_ep_close,
    .submit = tcp_any_submit,
    .poll = NULL, /* slices come back through the host service complete() */
    .ep_reset = tcp_any_ep_reset, /* the core resets an endpoint whose NIC pair stalled */
    .query = tcp_query,
};
