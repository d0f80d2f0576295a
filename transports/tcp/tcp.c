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
 *  - Registered ranges (tcp_mr.c): a sorted array under a rwlock held only
 *    to look up or change it.  A transfer pins its range; deregistration
 *    waits for the transfers on that range only, up to unregister_wait_ms,
 *    then revokes the range so no further byte is moved there.
 *  - tcp_util.c, at the bottom: the log, error names, socket options.
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

/* ---- options --------------------------------------------------------------- */

/* Each key written once (tern/plugin_kit.h): a row of the table the core
 * validates and documents, and (X rows) the tcp_ctx field it fills; R rows
 * are read by the code below (bind) or tcp_nics.c (devices). */
#define TCP_OPTIONS(X, R)                                                                     \
    X(tcp_ctx, opt_port, "port", TERN_OPT_INT, 0, 65535, NULL, "0",                           \
      "data port the target listens on (0 = ephemeral, advertised in the descriptor)")        \
    R("bind", TERN_OPT_STRING, 0, 0, NULL, NULL,                                              \
      "address the data port binds: that one NIC only (default: the host of the engine's "    \
      "server name, and every other NIC when that is not a loopback address)")                \
    R("devices", TERN_OPT_STRING_LIST, 0, 0, NULL, NULL,                                      \
      "interfaces to serve on, one data port each (default: every interface that is up, not " \
      "loopback and has an address of the server name's family)")                             \
    X(tcp_ctx, opt_nconn, "connections", TERN_OPT_INT, 1, 64, NULL, "4",                      \
      "most connections per peer: one is opened first, more while its queue is deep")         \
    X(tcp_ctx, opt_io_threads, "io_threads", TERN_OPT_INT, 0, 256, NULL, "0",                 \
      "I/O threads serving all connections of both sides (0 = one per online CPU)")           \
    X(tcp_ctx, opt_idle_close_ms, "idle_close_ms", TERN_OPT_INT, 0, 86400000, NULL, "10000",  \
      "an extra connection to a peer closes after this long unused (0 = never)")              \
    X(tcp_ctx, opt_slice_size, "slice_size", TERN_OPT_SIZE, 4096, 1ll << 30, NULL, "1M",      \
      "slice size for this transport")                                                        \
    X(tcp_ctx, opt_nodelay, "nodelay", TERN_OPT_BOOL, 0, 0, NULL, "true",                     \
      "set TCP_NODELAY on data connections")                                                  \
    X(tcp_ctx, opt_reply_wait_us, "reply_wait_us", TERN_OPT_INT, 0, 100000, NULL, "200",      \
      "a lone small request waits this long in submit for its reply on the caller's thread "  \
      "(one thread wake less per round trip; 0 = never)")                                     \
    X(tcp_ctx, opt_spin_us, "payload_spin_us", TERN_OPT_INT, 0, 100000, NULL, "200",          \
      "an I/O thread receiving a payload with 128 KiB or more still to come polls its "      \
      "sockets until this long after the last such event instead of sleeping, so the "       \
      "sender need not wake it (0 = sleep at once)")                                        \
    X(tcp_ctx, opt_sndbuf, "sndbuf", TERN_OPT_SIZE, 0, 1ll << 30, NULL, "0",                  \
      "SO_SNDBUF of data connections (0 = kernel autotuning)")                                \
    X(tcp_ctx, opt_rcvbuf, "rcvbuf", TERN_OPT_SIZE, 0, 1ll << 30, NULL, "0",                  \
      "SO_RCVBUF of data connections (0 = kernel autotuning)")                                \
    X(tcp_ctx, opt_zerocopy_min, "zerocopy_min", TERN_OPT_SIZE, 0, 1ll << 30, NULL, "0",      \
      "WRITE payloads of at least this many bytes go out with MSG_ZEROCOPY (0 = never; "     \
      "it pays only on a NIC with scatter-gather DMA, on loopback the kernel copies)")      \
    X(tcp_ctx, opt_mc_port, "mooncake_port", TERN_OPT_INT, -1, 65535, NULL, "-1",             \
      "port serving Mooncake-format initiators (-1 = off, 0 = ephemeral); published as "      \
      "tcp_data_port")                                                                        \
    X(tcp_ctx, opt_max_server_conns, "max_server_connections", TERN_OPT_INT, 1, 1 << 20,      \
      NULL, "4096", "incoming data connections served at once")                               \
    X(tcp_ctx, opt_max_unproven, "max_unproven", TERN_OPT_INT, 1, 1 << 20, NULL, "256",       \
      "incoming connections that proved nothing yet (no request, no authentication)")         \
    X(tcp_ctx, opt_unproven_per_source, "max_unproven_per_source", TERN_OPT_INT, 1, 1 << 20,  \
      NULL, "16", "of those, from one source address (the oldest is dropped for a new one)")  \
    X(tcp_ctx, opt_unproven_idle_ms, "unproven_idle_ms", TERN_OPT_INT, 0, 86400000, NULL,     \
      "5000", "an incoming connection that proved nothing is dropped after this long "        \
      "(0 = never)")                                                                          \
    X(tcp_ctx, opt_progress_min_rate, "progress_min_rate", TERN_OPT_SIZE, 0, 1ll << 40, NULL, \
      "64K", "bytes per second a peer must move while its request is under way (0 = no "     \
      "floor)")                                                                               \
    X(tcp_ctx, opt_progress_window_ms, "progress_window_ms", TERN_OPT_INT, 100, 600000, NULL, \
      "2000", "the window over which progress_min_rate is averaged")                          \
    X(tcp_ctx, opt_unregister_wait_ms, "unregister_wait_ms", TERN_OPT_INT, 0, 600000, NULL,   \
      "1000", "how long deregistering waits for transfers on the range before cutting them")

static const tern_option tcp_options[] = {TCP_OPTIONS(TERN_KIT_OPTION, TERN_KIT_ROW)
                                              TERN_KIT_OPTIONS_END};
static const tern_kit_field tcp_fields[] = {TCP_OPTIONS(TERN_KIT_FIELD, TERN_KIT_NO_FIELD)
                                                TERN_KIT_FIELDS_END};


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
    tern_kit_options_fill(&ctx->host, tcp_options, tcp_fields, ctx);
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
    if (ctx->opt_port < 0 || ctx->opt_port > 65535)
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG,
                             "transports.tcp.port: %d is not a port (0..65535)", ctx->opt_port);
    if (ctx->opt_nconn < 1 || ctx->opt_nconn > 64)
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG,
                             "transports.tcp.connections: %d is out of range 1..64",
                             ctx->opt_nconn);
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

int tcp_init_sys(const tcp_sys *sys, const tern_host_services *host, void **out, char *err,
                 size_t errlen)
{
    if (!sys || !host || !out)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL, "tcp init: host services missing");
    if (!TERN_HAS_MEMBER(host->struct_size, tern_host_services, complete) || !host->complete)
        return tern_kit_errf(err, errlen, TERN_ERR_NOT_SUPPORTED,
                             "tcp init: the host does not offer the complete() service (transport "
                             "ABI 1.1); this transport needs a core of ABI 1.1 or later");
    tcp_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "tcp init: out of memory");
    size_t n = host->struct_size < sizeof ctx->host ? host->struct_size : sizeof ctx->host;
    memcpy(&ctx->host, host, n);
    ctx->sys = *sys;
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

static int tcp_init(const tern_host_services *host, void **out, char *err, size_t errlen)
{
    return tcp_init_sys(&tcp_sys_libc, host, out, err, errlen);
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
    /* "publish.<key>": the descriptor's top-level <key>, for peers that
     * read only the top level (docs/plugins.md, "What a transport
     * publishes").  Mooncake's initiator connects to tcp_data_port: the
     * Mooncake listener when there is one, else this port. */
    if (rc == 0)
        rc = ctx->mc_srv ? tcp_mc_describe(ctx, out)
                         : ctx->host.desc_set_u64(out, "publish.tcp_data_port",
                                                  (uint64_t)ctx->lport);
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
             PRIu64 " slow connections cut, %" PRIu64 " MSG_ZEROCOPY sends (%" PRIu64
             " copied by the kernel)",
             ctx->adv_host, ctx->lport, ctx->nnics, ctx->nworkers, ctx->opt_nconn, ctx->opt_slice_size,
             nmr, nsrv, nun, (uint64_t)ctx->st_req_served, (uint64_t)ctx->st_refused,
             (uint64_t)ctx->st_bytes_in, (uint64_t)ctx->st_bytes_out,
             (uint64_t)ctx->st_connects, (uint64_t)ctx->st_conn_broken,
             (uint64_t)ctx->st_evicted, (uint64_t)ctx->st_slow_cut,
             (uint64_t)atomic_load(&ctx->zc_sends), (uint64_t)atomic_load(&ctx->zc_copied));
    return 0;
}

/* The kit's head: the ABI of the headers tcp is built against (1.2; it
 * declared 1.1 before, which only the load message and tern-info showed:
 * the services of 1.2 it uses it finds by TERN_HAS_MEMBER either way). */
TERN_TRANSPORT_EXPORT const tern_transport tern_transport_v1 = {
    TERN_KIT_TRANSPORT_HEAD("tcp", "0.2.0"),
    .caps = TERN_CAP_READ | TERN_CAP_WRITE | TERN_CAP_GPU_TARGET |
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
