/* transports/tcp/tcp.c: the TCP transport ("tcp"), the fallback that works
 * everywhere.  Wire format: see the comment at the top of tcp_wire.h
 * (fixed 32-byte little-endian request header + WRITE data; 24-byte reply
 * header for every request + READ data; replies in request order).
 *
 * Shape:
 *  - Target side (tcp_server.c): one data port per plugin instance
 *    (option `port`, 0 = ephemeral), advertised by segment_describe as
 *    {"host", "port"}.  An accept thread hands each connection to its own
 *    thread that serves requests one after the other with blocking I/O,
 *    straight between the socket and registered memory.  Thread per
 *    connection rather than an epoll loop: each connection's copy runs on
 *    its own core (the copy IS the cost on TCP), the code stays a straight
 *    line, and a slow peer never stalls another.  Replies to WRITEs are
 *    coalesced while more requests are already waiting in the socket.
 *  - Initiator side (tcp_client.c): an endpoint is a pool of `connections`
 *    persistent connections to one peer, opened by ep_connect and re-opened
 *    on the next use after one breaks.  Each connection has one thread with
 *    a non-blocking socket that pipelines: it sends queued requests
 *    (sendmsg of header + data straight from registered memory, many per
 *    call) and reads replies (straight into registered memory for READ) as
 *    the socket allows.  submit() only queues a slice on the least loaded
 *    connection and never blocks on the network.
 *  - Completions go to one queue per plugin instance (mutex + condvar);
 *    poll() drains it.
 *  - Registered ranges: a sorted array under a rwlock.  The target holds
 *    the read lock from the range check to the end of the transfer, so
 *    mr_deregister returns only when no transfer touches the range.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
     "address the data port binds (default: the host of the engine's server name)"},
    {"connections", TERN_OPT_INT, 1, 64, NULL, "4",
     "persistent connections per peer, used in parallel"},
    {"slice_size", TERN_OPT_SIZE, 4096, 1ll << 30, NULL, "1M",
     "slice size for this transport"},
    {"nodelay", TERN_OPT_BOOL, 0, 0, NULL, "true", "set TCP_NODELAY on data connections"},
    {"sndbuf", TERN_OPT_SIZE, 0, 1ll << 30, NULL, "0",
     "SO_SNDBUF of data connections (0 = kernel autotuning)"},
    {"rcvbuf", TERN_OPT_SIZE, 0, 1ll << 30, NULL, "0",
     "SO_RCVBUF of data connections (0 = kernel autotuning)"},
    {"max_server_connections", TERN_OPT_INT, 1, 65536, NULL, "1024",
     "incoming data connections served at once (more are closed)"},
    {"mooncake_port", TERN_OPT_INT, -1, 65535, NULL, "-1",
     "port serving Mooncake-format initiators (-1 = off, 0 = ephemeral); published as "
     "tcp_data_port"},
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
    ctx->opt_nconn = (int)opt_int(ctx, "connections", 4);
    ctx->opt_slice_size = (uint64_t)opt_int(ctx, "slice_size", 1 << 20);
    ctx->opt_sndbuf = (int)opt_int(ctx, "sndbuf", 0);
    ctx->opt_rcvbuf = (int)opt_int(ctx, "rcvbuf", 0);
    ctx->opt_max_server_conns = (int)opt_int(ctx, "max_server_connections", 1024);
    ctx->opt_nodelay = opt_bool(ctx, "nodelay", 1);
    ctx->opt_mc_port = (int)opt_int(ctx, "mooncake_port", -1);
    if (ctx->opt_port < 0 || ctx->opt_port > 65535)
        return tcp_errf(err, errlen, TERN_ERR_CONFIG,
                        "transports.tcp.port: %d is not a port (0..65535)", ctx->opt_port);
    if (ctx->opt_nconn < 1 || ctx->opt_nconn > 64)
        return tcp_errf(err, errlen, TERN_ERR_CONFIG,
                        "transports.tcp.connections: %d is out of range 1..64", ctx->opt_nconn);
    if (ctx->opt_max_server_conns < 1)
        ctx->opt_max_server_conns = 1024;
    const char *bind = ctx->host.config_get ? ctx->host.config_get(ctx->host.host, "bind") : NULL;
    const char *sn = TERN_HAS_MEMBER(ctx->host.struct_size, tern_host_services, server_name)
                         ? ctx->host.server_name : NULL;
    char snhost[TCP_HOST_MAX];
    host_of_server_name(sn, snhost, sizeof snhost);
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

/* The interface holding the bind address names our one device ("lo",
 * "eth0"); a wildcard or unknown address gives "tcp". */
static void tcp_pick_device(tcp_ctx *ctx)
{
    snprintf(ctx->devname, sizeof ctx->devname, "tcp");
    ctx->dev_sysfs[0] = 0;
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0)
        return;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_addr || !i->ifa_name)
            continue;
        char buf[INET6_ADDRSTRLEN] = "";
        int fam = i->ifa_addr->sa_family;
        if (fam == AF_INET)
            inet_ntop(fam, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf, sizeof buf);
        else if (fam == AF_INET6)
            inet_ntop(fam, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, buf, sizeof buf);
        if (*buf && !strcmp(buf, ctx->bind_host)) {
            snprintf(ctx->devname, sizeof ctx->devname, "%s", i->ifa_name);
            break;
        }
    }
    freeifaddrs(ifa);
    char path[512];
    struct stat st;
    const char *root = TERN_HAS_MEMBER(ctx->host.struct_size, tern_host_services, sysfs_root) &&
                               ctx->host.sysfs_root ? ctx->host.sysfs_root : "/sys";
    snprintf(path, sizeof path, "%s/class/net/%s/device", root, ctx->devname);
    if (stat(path, &st) == 0)
        snprintf(ctx->dev_sysfs, sizeof ctx->dev_sysfs, "class/net/%s/device", ctx->devname);
}

/* ---- init / fini ------------------------------------------------------------ */

static void tcp_ctx_free(tcp_ctx *ctx)
{
    pthread_rwlock_destroy(&ctx->mr_lock);
    pthread_mutex_destroy(&ctx->srv_mu);
    pthread_mutex_destroy(&ctx->ep_mu);
    pthread_mutex_destroy(&ctx->cq_mu);
    pthread_cond_destroy(&ctx->cq_cv);
    for (size_t i = 0; i < ctx->nmr; i++)
        free(ctx->mrs[i]);
    free(ctx->mrs);
    free(ctx);
}

static int tcp_init(const tern_host_services *host, void **out, char *err, size_t errlen)
{
    if (!host || !out)
        return tcp_errf(err, errlen, TERN_ERR_INVAL, "tcp init: host services missing");
    tcp_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return tcp_errf(err, errlen, TERN_ERR_NOMEM, "tcp init: out of memory");
    size_t n = host->struct_size < sizeof ctx->host ? host->struct_size : sizeof ctx->host;
    memcpy(&ctx->host, host, n);
    ctx->host.struct_size = (uint32_t)n;
    ctx->io_timeout_ms = TERN_HAS_MEMBER(n, tern_host_services, io_timeout_ms) &&
                                 host->io_timeout_ms > 0 ? host->io_timeout_ms : 5000;
    ctx->lfd = ctx->srv_efd = -1;
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    /* Writer preference: a deregister is not starved by a stream of transfers. */
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&ctx->mr_lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&ctx->srv_mu, NULL);
    pthread_mutex_init(&ctx->ep_mu, NULL);
    pthread_mutex_init(&ctx->cq_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ctx->cq_cv, &ca);
    pthread_condattr_destroy(&ca);
    ctx->next_key = 1;
    int rc = tcp_read_options(ctx, err, errlen);
    if (rc == 0)
        rc = tcp_server_start(ctx, err, errlen);
    if (rc == 0 && (rc = tcp_mc_start(ctx, err, errlen)) != 0)
        tcp_server_stop(ctx);
    if (rc) {
        tcp_ctx_free(ctx);
        return rc;
    }
    tcp_pick_device(ctx);
    tcp_log(ctx, TERN_LOG_INFO, "data port %s:%d (bind %s), %d connections per peer",
            ctx->adv_host, ctx->lport, ctx->bind_host, ctx->opt_nconn);
    *out = ctx;
    return 0;
}

static void tcp_fini(void *vctx)
{
    tcp_ctx *ctx = vctx;
    if (!ctx)
        return;
    /* Endpoints first (their threads push into the queue), then the server. */
    for (;;) {
        pthread_mutex_lock(&ctx->ep_mu);
        tcp_ep *ep = ctx->eps;
        pthread_mutex_unlock(&ctx->ep_mu);
        if (!ep)
            break;
        tcp_ep_close(ep);
    }
    tcp_mc_stop(ctx);
    tcp_server_stop(ctx);
    tcp_ctx_free(ctx);
}

static int tcp_devices(void *vctx, tern_device_info *out, int max)
{
    tcp_ctx *ctx = vctx;
    if (!ctx || !out || max < 1)
        return TERN_ERR_INVAL;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", ctx->devname);
    snprintf(out->sysfs_path, sizeof out->sysfs_path, "%s", ctx->dev_sysfs);
    out->numa_node = ctx->dev_sysfs[0] ? -2 : -1;
    return 1;
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

const tcp_mr *tcp_mr_find(const tcp_ctx *ctx, uint64_t addr, uint64_t len)
{
    if (len == 0 || addr + len < addr)
        return NULL;
    size_t i = mr_upper(ctx, addr);
    if (i == 0)
        return NULL;
    const tcp_mr *m = ctx->mrs[i - 1];
    uint64_t off = addr - m->addr;   /* addr >= m->addr here */
    if (off >= m->len || len > m->len - off)
        return NULL;
    return m;
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
    pthread_rwlock_wrlock(&ctx->mr_lock);
    size_t i = mr_upper(ctx, a);
    int overlap = (i > 0 && ctx->mrs[i - 1]->addr + ctx->mrs[i - 1]->len > a) ||
                  (i < ctx->nmr && ctx->mrs[i]->addr < a + len);
    if (overlap) {
        const tcp_mr *o = (i > 0 && ctx->mrs[i - 1]->addr + ctx->mrs[i - 1]->len > a)
                              ? ctx->mrs[i - 1] : ctx->mrs[i];
        pthread_rwlock_unlock(&ctx->mr_lock);
        free(m);
        return tcp_errf(err, errlen, TERN_ERR_EXISTS,
                        "tcp mr_register: [0x%" PRIx64 ", +%zu) overlaps registered "
                        "[0x%" PRIx64 ", +%" PRIu64 ")", a, len, o->addr, o->len);
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
    if (keys) {
        memset(keys, 0, sizeof *keys);
        keys->ndev = 1;
        keys->lkey[0] = keys->rkey[0] = m->key; /* informative only: TCP has no keys */
    }
    *mr = m;
    return 0;
}

static int tcp_mr_deregister(void *vctx, void *vmr)
{
    tcp_ctx *ctx = vctx;
    if (!ctx || !vmr)
        return TERN_ERR_INVAL;
    /* The write lock waits for every transfer that checked against it. */
    pthread_rwlock_wrlock(&ctx->mr_lock);
    size_t i;
    for (i = 0; i < ctx->nmr && ctx->mrs[i] != vmr; i++)
        ;
    if (i == ctx->nmr) {
        pthread_rwlock_unlock(&ctx->mr_lock);
        return TERN_ERR_NOT_FOUND;
    }
    memmove(&ctx->mrs[i], &ctx->mrs[i + 1], (ctx->nmr - i - 1) * sizeof *ctx->mrs);
    ctx->nmr--;
    pthread_rwlock_unlock(&ctx->mr_lock);
    free(vmr);
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
    if (rc == 0)
        rc = tcp_mc_describe(ctx, out);
    return rc;
}

/* ---- completions ---------------------------------------------------------- */

void tcp_cq_push(tcp_ctx *ctx, tern_slice *head, tern_slice *tail, int n)
{
    if (!head)
        return;
    tail->plugin[0] = NULL;
    pthread_mutex_lock(&ctx->cq_mu);
    if (ctx->cq_tail)
        ctx->cq_tail->plugin[0] = head;
    else
        ctx->cq_head = head;
    ctx->cq_tail = tail;
    if (ctx->cq_waiters) {
        if (n > 1)
            pthread_cond_broadcast(&ctx->cq_cv);
        else
            pthread_cond_signal(&ctx->cq_cv);
    }
    pthread_mutex_unlock(&ctx->cq_mu);
}

static int tcp_poll(void *vctx, tern_slice **done, int max, int timeout_ms)
{
    tcp_ctx *ctx = vctx;
    if (!ctx || !done || max < 1)
        return TERN_ERR_INVAL;
    pthread_mutex_lock(&ctx->cq_mu);
    if (!ctx->cq_head && timeout_ms != 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int t = timeout_ms < 0 ? 1000 : timeout_ms;
        ts.tv_sec += t / 1000;
        ts.tv_nsec += (long)(t % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        ctx->cq_waiters++;
        while (!ctx->cq_head) {
            if (pthread_cond_timedwait(&ctx->cq_cv, &ctx->cq_mu, &ts) == ETIMEDOUT)
                break;
        }
        ctx->cq_waiters--;
    }
    int n = 0;
    while (n < max && ctx->cq_head) {
        tern_slice *s = ctx->cq_head;
        ctx->cq_head = s->plugin[0];
        s->plugin[0] = NULL;
        done[n++] = s;
    }
    if (!ctx->cq_head)
        ctx->cq_tail = NULL;
    pthread_mutex_unlock(&ctx->cq_mu);
    return n;
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
    int nsrv = ctx->nsrv;
    pthread_mutex_unlock(&ctx->srv_mu);
    snprintf(out, outlen,
             "data port %s:%d, %d connections per peer, slice %" PRIu64 ", %zu buffers, "
             "%d incoming connections, served %" PRIu64 " requests (%" PRIu64 " refused), "
             "in %" PRIu64 " B, out %" PRIu64 " B, %" PRIu64 " connects, %" PRIu64
             " broken connections",
             ctx->adv_host, ctx->lport, ctx->opt_nconn, ctx->opt_slice_size, nmr, nsrv,
             (uint64_t)ctx->st_req_served, (uint64_t)ctx->st_refused,
             (uint64_t)ctx->st_bytes_in, (uint64_t)ctx->st_bytes_out,
             (uint64_t)ctx->st_connects, (uint64_t)ctx->st_conn_broken);
    return 0;
}

static int tcp_ep_describe(void *ep, tern_desc *out)
{
    (void)ep;
    (void)out;
    return 0; /* no handshake fields: the segment blob says everything */
}

TERN_TRANSPORT_EXPORT const tern_transport tern_transport_v1 = {
    .magic = TERN_TRANSPORT_MAGIC,
    .struct_size = sizeof(tern_transport),
    .abi_major = TERN_TRANSPORT_ABI_MAJOR,
    .abi_minor = TERN_TRANSPORT_ABI_MINOR,
    .name = "tcp",
    .version = "0.1.0",
    .caps = TERN_CAP_READ | TERN_CAP_WRITE | TERN_CAP_REMOTE_CHECK,
    .options = tcp_options,
    .default_slice_size = 1u << 20,
    .init = tcp_init,
    .fini = tcp_fini,
    .devices = tcp_devices,
    .mr_register = tcp_mr_register,
    .mr_deregister = tcp_mr_deregister,
    .segment_describe = tcp_segment_describe,
    .ep_open = tcp_any_ep_open,
    .ep_describe = tcp_ep_describe,
    .ep_connect = tcp_any_ep_connect,
    .ep_close = tcp_any_ep_close,
    .submit = tcp_any_submit,
    .poll = tcp_poll,
    .ep_reset = NULL,
    .query = tcp_query,
};
