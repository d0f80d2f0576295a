/* plugins/memcpy: an example third-party transport.
 *
 * "memcpy" moves bytes between memory registered in the same process: one
 * device "mem0"; mr_register hands out keys; submit checks that the local
 * range lies in a registration with the slice's lkey and the remote range in
 * the peer's registration with its rkey, copies, and hands the slice back
 * at once through the host service complete() (ABI 1.1: no poll(), no
 * queue of its own).  It is useful for tests (two engines in one process) and as the
 * worked example of docs/plugins.md: it includes only <tern/plugin_kit.h>
 * (which brings <tern/transport.h>), libc and pthread, so
 * `cc $(pkg-config --cflags tern) -shared -fPIC` builds it.
 *
 * The "fabric" of a same-process transport is the process itself: the only
 * state outside a context is the list of live contexts (instances), so that
 * an endpoint can find its peer by the instance id the peer published in its
 * segment descriptor, and so that a peer that went away is detected instead
 * of dereferenced. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tern/plugin_kit.h>

#define MC_VERSION "1.0.0"

/* The YAML keys, written once (tern/plugin_kit.h): each row is a line of
 * the table the core validates and documents, and says where the value
 * lands in mc_opts, filled by tern_kit_options_fill in mc_init. */
typedef struct mc_opts {
    char device[TERN_NAME_MAX];
    int32_t queue_depth; /* slices one submit() call takes, at most */
} mc_opts;

#define MC_OPTIONS(X)                                                                     \
    X(mc_opts, device, "device", TERN_OPT_STRING, 0, 0, NULL, "mem0",                     \
      "name of the one device this transport shows")                                      \
    X(mc_opts, queue_depth, "queue_depth", TERN_OPT_INT, 1, 1 << 20, NULL, "4096",        \
      "slices one submit() call takes at most")

static const tern_option mc_options[] = {MC_OPTIONS(TERN_KIT_OPTION) TERN_KIT_OPTIONS_END};
static const tern_kit_field mc_fields[] = {MC_OPTIONS(TERN_KIT_FIELD) TERN_KIT_FIELDS_END};

typedef struct mc_mr {
    struct mc_mr *next;
    uint64_t key;
    uintptr_t addr;
    size_t len;
} mc_mr;

typedef struct mc_ctx {
    const tern_host_services *host;
    uint64_t instance;         /* published by segment_describe */
    struct mc_ctx *next_live;  /* link in the process-wide instance list */
    mc_opts opt;

    pthread_rwlock_t mr_lock;  /* registrations: readers copy, writers (de)register */
    mc_mr *mrs;
    uint64_t next_key;
} mc_ctx;

typedef struct mc_ep {
    mc_ctx *ctx;
    uint64_t peer_instance;
    int connected;
} mc_ep;

/* The process-wide instance list (see the header comment). */
static pthread_mutex_t mc_live_lock = PTHREAD_MUTEX_INITIALIZER;
static mc_ctx *mc_live;
static uint64_t mc_last_instance;

/* Caller holds mc_live_lock. */
static mc_ctx *mc_live_find(uint64_t instance)
{
    for (mc_ctx *c = mc_live; c; c = c->next_live)
        if (c->instance == instance)
            return c;
    return NULL;
}

static void mc_live_add(mc_ctx *ctx)
{
    pthread_mutex_lock(&mc_live_lock);
    ctx->instance = ++mc_last_instance;
    ctx->next_live = mc_live;
    mc_live = ctx;
    pthread_mutex_unlock(&mc_live_lock);
}

static void mc_live_remove(mc_ctx *ctx)
{
    pthread_mutex_lock(&mc_live_lock);
    for (mc_ctx **pp = &mc_live; *pp; pp = &(*pp)->next_live)
        if (*pp == ctx) {
            *pp = ctx->next_live;
            break;
        }
    pthread_mutex_unlock(&mc_live_lock);
}

/* ---- init / fini / devices ---------------------------------------------- */

static int mc_init(const tern_host_services *host, void **out, char *err, size_t errlen)
{
    /* A name the option table cannot bound: checked here. */
    const char *dev = host->config_get(host->host, "device");
    if (!dev || !dev[0] || strlen(dev) >= TERN_NAME_MAX)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL,
                      "memcpy: device name '%s' is empty or longer than %d characters",
                      dev ? dev : "", TERN_NAME_MAX - 1);
    mc_ctx *ctx = host->alloc(sizeof *ctx);
    if (!ctx)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "memcpy: out of memory for the context");
    memset(ctx, 0, sizeof *ctx);
    ctx->host = host;
    tern_kit_options_fill(host, mc_options, mc_fields, &ctx->opt);
    ctx->next_key = 1;

    pthread_rwlock_init(&ctx->mr_lock, NULL);

    mc_live_add(ctx);
    host->log(host->host, TERN_LOG_DEBUG, "instance %llu, device %s, queue_depth %d",
              (unsigned long long)ctx->instance, ctx->opt.device, ctx->opt.queue_depth);
    *out = ctx;
    return 0;
}

static void mc_fini(void *vctx)
{
    mc_ctx *ctx = vctx;
    /* Unlisted first, so no new submitter can find us; the write lock then
     * waits for copies already running against our memory. */
    mc_live_remove(ctx);
    pthread_rwlock_wrlock(&ctx->mr_lock);
    for (mc_mr *m = ctx->mrs, *next; m; m = next) {
        next = m->next;
        ctx->host->free(m);
    }
    ctx->mrs = NULL;
    pthread_rwlock_unlock(&ctx->mr_lock);
    pthread_rwlock_destroy(&ctx->mr_lock);
    ctx->host->free(ctx);
}

static int mc_devices(void *vctx, tern_device_info *out, int max)
{
    mc_ctx *ctx = vctx;
    if (max < 1)
        return 0;
    memset(&out[0], 0, sizeof out[0]);
    snprintf(out[0].name, sizeof out[0].name, "%s", ctx->opt.device);
    out[0].numa_node = -1; /* memory, not a PCI device: reachable from every node */
    return 1;
}

/* ---- memory registration -------------------------------------------------- */

static int mc_mr_register(void *vctx, void *addr, size_t len, tern_mr_keys *keys, void **out,
                          char *err, size_t errlen)
{
    mc_ctx *ctx = vctx;
    if (!addr || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL,
                      "memcpy: cannot register %p length %zu: empty or wraps around", addr, len);
    mc_mr *m = ctx->host->alloc(sizeof *m);
    if (!m)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "memcpy: out of memory registering %zu bytes",
                      len);
    m->addr = (uintptr_t)addr;
    m->len = len;
    pthread_rwlock_wrlock(&ctx->mr_lock);
    m->key = ctx->next_key++;
    m->next = ctx->mrs;
    ctx->mrs = m;
    pthread_rwlock_unlock(&ctx->mr_lock);
    memset(keys, 0, sizeof *keys);
    keys->ndev = 1;
    keys->lkey[0] = keys->rkey[0] = m->key;
    *out = m;
    return 0;
}

static int mc_mr_deregister(void *vctx, void *mr)
{
    mc_ctx *ctx = vctx;
    int found = 0;
    pthread_rwlock_wrlock(&ctx->mr_lock);
    for (mc_mr **pp = &ctx->mrs; *pp; pp = &(*pp)->next)
        if (*pp == mr) {
            *pp = ((mc_mr *)mr)->next;
            found = 1;
            break;
        }
    pthread_rwlock_unlock(&ctx->mr_lock);
    if (!found)
        return TERN_ERR_NOT_FOUND;
    ctx->host->free(mr);
    return 0;
}

/* Caller holds ctx->mr_lock.  1 when [addr, addr+len) lies in key's region. */
static int mc_covered(const mc_ctx *ctx, uint64_t key, uintptr_t addr, uint64_t len)
{
    if (addr + len < addr)
        return 0;
    for (const mc_mr *m = ctx->mrs; m; m = m->next)
        if (m->key == key && addr >= m->addr && addr + len <= m->addr + m->len)
            return 1;
    return 0;
}

/* ---- descriptors and endpoints ----------------------------------------------- */

static int mc_segment_describe(void *vctx, tern_desc *out)
{
    mc_ctx *ctx = vctx;
    const tern_host_services *h = ctx->host;
    int rc = h->desc_set_u64(out, "instance", ctx->instance);
    return rc < 0 ? rc : h->desc_set_u64(out, "pid", (uint64_t)getpid());
}

static int mc_ep_open(void *vctx, const tern_ep_params *params, void **out, char *err,
                      size_t errlen)
{
    mc_ctx *ctx = vctx;
    const tern_host_services *h = ctx->host;
    uint64_t pid = 0, instance = 0;
    if (params->local_dev != 0 || params->peer_dev != 0)
        return tern_kit_errf(err, errlen, TERN_ERR_INVAL,
                      "memcpy: only device 0 exists (asked local %d, peer %d)",
                      params->local_dev, params->peer_dev);
    if (h->desc_get_u64(params->peer_segment, "pid", &pid) < 0 ||
        h->desc_get_u64(params->peer_segment, "instance", &instance) < 0)
        return tern_kit_errf(err, errlen, TERN_ERR_PROTOCOL,
                      "memcpy: peer %s published no pid/instance for memcpy",
                      params->peer_name ? params->peer_name : "?");
    if (pid != (uint64_t)getpid())
        return tern_kit_errf(err, errlen, TERN_ERR_CONNECT,
                      "memcpy: peer %s is process %llu, this is %ld: the memcpy transport only "
                      "reaches the same process", params->peer_name ? params->peer_name : "?",
                      (unsigned long long)pid, (long)getpid());
    pthread_mutex_lock(&mc_live_lock);
    int live = mc_live_find(instance) != NULL;
    pthread_mutex_unlock(&mc_live_lock);
    if (!live)
        return tern_kit_errf(err, errlen, TERN_ERR_CONNECT,
                      "memcpy: peer %s (instance %llu) is gone from this process",
                      params->peer_name ? params->peer_name : "?", (unsigned long long)instance);
    mc_ep *ep = h->alloc(sizeof *ep);
    if (!ep)
        return tern_kit_errf(err, errlen, TERN_ERR_NOMEM, "memcpy: out of memory for an endpoint");
    *ep = (mc_ep){.ctx = ctx, .peer_instance = instance};
    *out = ep;
    return 0;
}

static int mc_ep_describe(void *vep, tern_desc *out)
{
    mc_ep *ep = vep;
    return ep->ctx->host->desc_set_u64(out, "instance", ep->ctx->instance);
}

/* No handshake capability: peer is NULL and there is nothing to exchange. */
static int mc_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen)
{
    (void)peer;
    (void)err;
    (void)errlen;
    ((mc_ep *)vep)->connected = 1;
    return 0;
}

static void mc_ep_close(void *vep)
{
    mc_ep *ep = vep;
    ep->ctx->host->free(ep);
}

/* ---- data path ------------------------------------------------------------------ */

static int mc_fail(tern_slice *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int mc_fail(tern_slice *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errmsg, sizeof s->errmsg, fmt, ap);
    va_end(ap);
    return code;
}

/* Check both ranges and copy; returns the slice status. */
static int mc_copy(mc_ep *ep, tern_slice *s)
{
    mc_ctx *self = ep->ctx;
    if (s->opcode != TERN_OP_READ && s->opcode != TERN_OP_WRITE)
        return mc_fail(s, TERN_ERR_INVAL, "memcpy: unknown opcode %d", s->opcode);
    pthread_mutex_lock(&mc_live_lock);
    mc_ctx *peer = mc_live_find(ep->peer_instance);
    if (peer && peer != self)
        pthread_rwlock_rdlock(&peer->mr_lock); /* before unlisting can free it */
    pthread_mutex_unlock(&mc_live_lock);
    if (!peer)
        return mc_fail(s, TERN_ERR_CLOSED, "memcpy: peer instance %llu is gone",
                       (unsigned long long)ep->peer_instance);
    pthread_rwlock_rdlock(&self->mr_lock);
    int rc = 0;
    uintptr_t local = (uintptr_t)s->local;
    if (!mc_covered(self, s->lkey, local, s->length))
        rc = mc_fail(s, TERN_ERR_RANGE, "memcpy: local 0x%llx+%llu not registered with lkey %llu",
                     (unsigned long long)local, (unsigned long long)s->length,
                     (unsigned long long)s->lkey);
    else if (s->remote > UINTPTR_MAX || !mc_covered(peer, s->rkey, (uintptr_t)s->remote, s->length))
        rc = mc_fail(s, TERN_ERR_RANGE,
                     "memcpy: remote 0x%llx+%llu not registered with rkey %llu",
                     (unsigned long long)s->remote, (unsigned long long)s->length,
                     (unsigned long long)s->rkey);
    else if (s->opcode == TERN_OP_WRITE)
        memmove((void *)(uintptr_t)s->remote, s->local, s->length);
    else
        memmove(s->local, (const void *)(uintptr_t)s->remote, s->length);
    pthread_rwlock_unlock(&self->mr_lock);
    if (peer != self)
        pthread_rwlock_unlock(&peer->mr_lock);
    return rc;
}

static int mc_submit(void *vep, tern_slice *const *slices, int n)
{
    mc_ep *ep = vep;
    mc_ctx *ctx = ep->ctx;
    if (!ep->connected)
        return TERN_ERR_INVAL;
    int accepted = n < ctx->opt.queue_depth ? n : ctx->opt.queue_depth; /* the core submits the rest */
    for (int i = 0; i < accepted; i++) {
        tern_slice *s = slices[i];
        s->errmsg[0] = '\0';
        s->ep = ep;
        s->status = mc_copy(ep, s);
        s->transferred = s->status == 0 ? s->length : 0;
        ctx->host->complete(ctx->host->host, s); /* s is the core's again */
    }
    return accepted;
}

static int mc_query(void *vctx, const char *what, char *out, size_t outlen)
{
    mc_ctx *ctx = vctx;
    (void)what;
    snprintf(out, outlen, "instance=%llu queue_depth=%d", (unsigned long long)ctx->instance,
             ctx->opt.queue_depth);
    return 0;
}

/* ---- the exported symbol ------------------------------------------------------------ */

TERN_TRANSPORT_EXPORT const tern_transport tern_transport_v1 = {
    TERN_KIT_TRANSPORT_HEAD("memcpy", MC_VERSION),
    .caps = TERN_CAP_READ | TERN_CAP_WRITE,
    .options = mc_options,
    .default_slice_size = 0,
    .init = mc_init,
    .fini = mc_fini,
    .devices = mc_devices,
    .mr_register = mc_mr_register,
    .mr_deregister = mc_mr_deregister,
    .segment_describe = mc_segment_describe,
    .ep_open = mc_ep_open,
    .ep_describe = mc_ep_describe,
    .ep_connect = mc_ep_connect,
    .ep_close = mc_ep_close,
    .submit = mc_submit,
    .poll = NULL, /* completions go through host->complete() */
    .ep_reset = NULL,
    .query = mc_query,
};
