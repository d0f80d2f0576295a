/* transports/tcp/tcp_mooncake_glue.c: Mooncake's TCP data format
 * (tcp_mooncake.c) wired into the transport.
 *
 * Target side: with the option `mooncake_port` (>= 0) the transport runs a
 * second listener that speaks only Mooncake's format, and publishes it as
 * the descriptor's top-level tcp_data_port (with tcp_proto_version), which
 * is where a Mooncake initiator connects.  A separate
 * port, not detection on tern's own port: the first bytes of a Mooncake
 * request are a free 64-bit size and could equal tern's magic.
 * Initiator side: a peer blob with "wire": "mooncake" (the core builds it
 * from a Mooncake descriptor's own top-level fields, docs/protocol.md
 * "Mooncake compatibility") gets a Mooncake endpoint; every other peer gets
 * tern's own.
 * Endpoints of both kinds start with a tcp_ep_head (tcp_internal.h), so
 * the vtable entries below dispatch on its wire. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "tcp_internal.h"
#include "tcp_mooncake.h"

typedef struct tcp_mc_gep {
    tcp_ep_head head; /* TCP_WIRE_MOONCAKE */
    tcp_ctx *ctx;
    tcp_mc_ep *mc;
    struct tcp_mc_gep *next;
} tcp_mc_gep;

/* ---- hooks ------------------------------------------------------------------ */

/* A request pins its range (a deregistration waits for it up to
 * unregister_wait_ms, then revokes it) and brackets each system call on
 * that memory with io_begin/io_end, as tern's own target does. */
static void *hook_pin(void *arg, uint64_t addr, uint64_t len)
{
    tcp_ctx *ctx = arg;
    tcp_mr *m = tcp_mr_pin(ctx, addr, len);
    atomic_fetch_add(m ? &ctx->st_req_served : &ctx->st_refused, 1);
    return m;
}

static void hook_unpin(void *arg, void *pin)
{
    (void)arg;
    tcp_mr_unpin(pin);
}

static int hook_io_begin(void *pin) { return tcp_mr_io_begin(pin); }
static void hook_io_end(void *pin) { tcp_mr_io_end(pin); }

static void hook_complete(void *arg, tern_slice *s) { tcp_complete(arg, s); }

static void hook_log(void *arg, int level, const char *msg) { tcp_log(arg, level, "%s", msg); }

static void hook_tune(void *arg, int fd) { tcp_sock_tune(arg, fd); }

static tcp_mc_hooks hooks_of(tcp_ctx *ctx)
{
    tcp_mc_hooks h = {.arg = ctx, .pin = hook_pin, .unpin = hook_unpin,
                      .io_begin = hook_io_begin, .io_end = hook_io_end,
                      .complete = hook_complete, .log = hook_log, .tune = hook_tune,
                      .io_timeout_ms = ctx->io_timeout_ms,
                      /* a thread each: a few hundred at most */
                      .max_conns = ctx->opt_max_server_conns < 256 ? ctx->opt_max_server_conns
                                                                   : 256,
                      .unproven_idle_ms = ctx->opt_unproven_idle_ms,
                      .min_rate = ctx->opt_progress_min_rate,
                      .window_ms = ctx->opt_progress_window_ms};
    return h;
}

/* ---- target side ---------------------------------------------------------------- */

int tcp_mc_start(tcp_ctx *ctx, char *err, size_t errlen)
{
    if (ctx->opt_mc_port < 0)
        return 0;
    if (ctx->auth) /* the format has no way to prove the secret */
        return tern_kit_errf(err, errlen, TERN_ERR_CONFIG,
                             "transports.tcp.mooncake_port: Mooncake's data format cannot prove "
                             "the shared secret of auth_secret_file; turn one of them off");
    tcp_mc_hooks h = hooks_of(ctx);
    int rc = tcp_mc_server_start(&h, ctx->bind_host, ctx->opt_mc_port, &ctx->mc_srv, err,
                                 errlen);
    if (rc == 0)
        tcp_log(ctx, TERN_LOG_INFO, "Mooncake-format data port %s:%d", ctx->adv_host,
                tcp_mc_server_port(ctx->mc_srv));
    return rc;
}

void tcp_mc_stop(tcp_ctx *ctx)
{
    for (;;) {
        pthread_mutex_lock(&ctx->ep_mu);
        tcp_mc_gep *g = ctx->mc_eps;
        pthread_mutex_unlock(&ctx->ep_mu);
        if (!g)
            break;
        tcp_any_ep_close(g);
    }
    tcp_mc_server_stop(ctx->mc_srv);
    ctx->mc_srv = NULL;
}

/* The Mooncake listener's port and format version, published at the
 * descriptor's top level where a Mooncake initiator reads them. */
int tcp_mc_describe(tcp_ctx *ctx, tern_desc *out)
{
    int rc = ctx->host.desc_set_u64(out, "publish.tcp_data_port",
                                    (uint64_t)tcp_mc_server_port(ctx->mc_srv));
    if (rc == 0)
        rc = ctx->host.desc_set_u64(out, "publish.tcp_proto_version", TCP_MC_PROTO_VERSION);
    return rc;
}

/* ---- initiator side ------------------------------------------------------------ */

/* "host:port" or "[v6]:port" -> host: Mooncake's segment name is its
 * handshake address, and its data port listens on the same host. */
static void mc_host_of(const char *name, char *out, size_t outlen)
{
    const char *start = name, *end;
    if (*name == '[') {
        start = name + 1;
        end = strchr(start, ']');
    } else {
        end = strrchr(name, ':');
    }
    size_t n = end ? (size_t)(end - start) : strlen(start);
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, start, n);
    out[n] = '\0';
}

/* The peer blob of a Mooncake segment holds its descriptor's own top-level
 * fields: name, tcp_data_port and, from v0.3.12, tcp_proto_version. */
static int mc_ep_open(tcp_ctx *ctx, const tern_ep_params *p, void **out, char *err,
                      size_t errlen)
{
    const char *name = ctx->host.desc_get_str(p->peer_segment, "name");
    char host[256] = "";
    uint64_t port = 0, version = 1;
    if (name)
        mc_host_of(name, host, sizeof host);
    if (!host[0] || ctx->host.desc_get_u64(p->peer_segment, "tcp_data_port", &port) != 0 ||
        port == 0 || port > 65535)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL,
                             "tcp ep_open: Mooncake segment %s has no usable address "
                             "(name %s, tcp_data_port %" PRIu64 ")",
                             p->peer_name ? p->peer_name : "?", name ? name : "(none)", port);
    ctx->host.desc_get_u64(p->peer_segment, "tcp_proto_version", &version);
    tcp_mc_gep *g = calloc(1, sizeof *g);
    if (!g)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "tcp ep_open: out of memory");
    g->head.wire = TCP_WIRE_MOONCAKE;
    g->ctx = ctx;
    tcp_mc_hooks h = hooks_of(ctx);
    int rc = tcp_mc_ep_open(&h, host, (uint16_t)port, (int)version, ctx->opt_nconn, &g->mc,
                            err, errlen);
    if (rc) {
        free(g);
        return rc;
    }
    pthread_mutex_lock(&ctx->ep_mu);
    g->next = ctx->mc_eps;
    ctx->mc_eps = g;
    pthread_mutex_unlock(&ctx->ep_mu);
    *out = g;
    return 0;
}

int tcp_any_ep_open(void *vctx, const tern_ep_params *p, void **out, char *err, size_t errlen)
{
    tcp_ctx *ctx = vctx;
    const char *wire = ctx && p && p->peer_segment
                           ? ctx->host.desc_get_str(p->peer_segment, "wire")
                           : NULL;
    if (wire && strcmp(wire, "mooncake") == 0 && ctx->auth)
        /* The format cannot prove the secret: with auth on, a descriptor
         * pointing there is refused, never used without authentication. */
        return tern_kit_errf(err, errlen, TERN_ERR_AUTH,
                             "tcp ep_open: segment %s points at Mooncake's data format "
                             "(\"wire\": \"mooncake\"), which cannot prove the shared secret; "
                             "refused because auth_secret_file is set",
                             p->peer_name ? p->peer_name : "?");
    if (wire && strcmp(wire, "mooncake") == 0)
        return mc_ep_open(ctx, p, out, err, errlen);
    return tcp_ep_open(vctx, p, out, err, errlen);
}

int tcp_any_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen)
{
    if (vep && tcp_ep_wire(vep) == TCP_WIRE_MOONCAKE)
        return 0; /* connections open on first use */
    return tcp_ep_connect(vep, peer, err, errlen);
}

void tcp_any_ep_close(void *vep)
{
    if (!vep || tcp_ep_wire(vep) != TCP_WIRE_MOONCAKE) {
        tcp_ep_close(vep);
        return;
    }
    tcp_mc_gep *g = vep;
    tcp_ctx *ctx = g->ctx;
    pthread_mutex_lock(&ctx->ep_mu);
    for (tcp_mc_gep **pp = &ctx->mc_eps; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    pthread_mutex_unlock(&ctx->ep_mu);
    tcp_mc_ep_close(g->mc);
    free(g);
}

/* Only tern's wire resets: a Mooncake-format endpoint is closed and
 * reopened by the core instead. */
int tcp_any_ep_reset(void *vep)
{
    if (!vep || tcp_ep_wire(vep) != TCP_WIRE_MOONCAKE)
        return tcp_ep_reset(vep);
    return TERN_ERR_NOT_SUPPORTED;
}

int tcp_any_submit(void *vep, tern_slice *const *slices, int n)
{
    if (vep && tcp_ep_wire(vep) == TCP_WIRE_MOONCAKE)
        return tcp_mc_ep_submit(((tcp_mc_gep *)vep)->mc, slices, n);
    return tcp_submit(vep, slices, n);
}
