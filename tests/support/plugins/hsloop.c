/* tests/support/plugins/hsloop.c: a same-process transport WITH the handshake
 * capability, so the engine's Connection exchange (active and passive
 * endpoints, refusals, simultaneous open) runs for real in tests.
 *
 * Built several ways (tests/support/CMakeLists.txt):
 *  - HS_NAME names it; HS_NO_HANDSHAKE drops the handshake capability
 *    (ep_describe NULL, ep_connect gets no peer fields);
 *  - against the current header (ABI 1.1) it hands slices back through the
 *    host service complete() and has no poll(); against the copy of the
 *    1.0 header (tests/support/plugins/abi10) it queues them for poll().
 *
 * Endpoints describe themselves by their own address ("hs_ep") and learn
 * the peer endpoint's from the handshake; submit copies with memmove (both
 * engines live in this process) and fails unless the endpoint is connected.
 * Options: open_delay_ms (the active ep_open sleeps, widening the window in
 * which both sides connect at once), refuse (the passive side refuses),
 * devices (how many: hs0, hs1, ...), fail_first + fail_code (the first N
 * slices complete with that error, e.g. -12 CONNECT, -16 DEVICE), gate (the
 * active ep_open waits until query("open_gate") opens the gate, so a test
 * holds a connect in flight for as long as it needs and knows it is there),
 * pgate (the passive ep_open, i.e. a Connection frame received and past the
 * tie-break, waits until query("open_pgate")), cgate (the active ep_connect,
 * i.e. the peer's reply received, waits until query("open_cgate")).
 * query("eps") reports "open=<live endpoints> opened=<ever opened>
 * gated=<active opens that reached the gate> failed_dev=<local device of the
 * last injected failure, -1 none> ok_dev=<local device of the last slice
 * that succeeded, -1 none> connects=<ep_connect calls> submitted=<slices>
 * pgated=<passive opens that reached pgate> cgated=<active connects that
 * reached cgate> refused=<active endpoints closed unconnected: the peer
 * refused their Connection>";
 * query("hold") keeps completions back until query("release"), and a
 * slice submitted while holding moves its bytes only when released (a
 * transport that writes late: a test sees whether anything still touched
 * the memory after a call returned); query("fail=N") makes the next N
 * slices fail with fail_code (failures injected after a success).  Also:
 * unreachable (ep_open says TERN_ERR_UNREACHABLE), connect_fail (a
 * tern_err code ep_connect returns). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tern/transport.h>

#ifndef HS_NAME
#define HS_NAME "hsloop"
#endif
#ifndef HS_OPS /* the operations it declares: HS_OPS=TERN_CAP_READ makes a READ-only one */
#define HS_OPS (TERN_CAP_READ | TERN_CAP_WRITE)
#endif
#if TERN_TRANSPORT_ABI_MINOR >= 1
#define HS_COMPLETE 1 /* hand slices back through host->complete() */
#else
#define HS_COMPLETE 0 /* the 1.0 way: poll() */
#endif

typedef struct hs_ctx {
    const tern_host_services *host;
    int64_t open_delay_ms;
    int refuse;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    tern_slice *head, *tail;
    int live_eps, opened, connects;
    long submitted;
    long reads, writes; /* slices of each operation it was sent */
    int ndev;
    int unreachable, hold;
    int64_t connect_fail;
    tern_slice *held_head, *held_tail; /* completions kept back by "hold" */
    int64_t fail_left, fail_code;
    uint64_t next_key;
    int gate, gate_open, gated;
    int pgate, pgate_open, pgated; /* the passive ep_open's gate */
    int cgate, cgate_open, cgated; /* the active ep_connect's gate */
    int refused;
    pthread_cond_t gate_cond;
    int failed_dev, ok_dev;
} hs_ctx;

typedef struct hs_ep {
    hs_ctx *ctx;
    uint64_t peer;   /* the peer endpoint's address, from the handshake */
    int connected;
    int dev;         /* local device index (ep_open's local_dev) */
    int passive;     /* opened for a Connection frame received */
} hs_ep;

static int hs_err(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int hs_err(char *err, size_t errlen, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

static int hs_init(const tern_host_services *host, void **out, char *err, size_t errlen)
{
    hs_ctx *c = host->alloc(sizeof *c);
    if (!c)
        return hs_err(err, errlen, TERN_ERR_NOMEM, "hsloop: out of memory");
    memset(c, 0, sizeof *c);
    c->host = host;
    c->open_delay_ms = host->config_get_int(host->host, "open_delay_ms", 0);
    const char *r = host->config_get(host->host, "refuse");
    c->refuse = r && (strcmp(r, "true") == 0 || strcmp(r, "1") == 0 || strcmp(r, "yes") == 0);
    c->next_key = 1;
    c->ndev = (int)host->config_get_int(host->host, "devices", 1);
    c->fail_left = host->config_get_int(host->host, "fail_first", 0);
    c->fail_code = host->config_get_int(host->host, "fail_code", TERN_ERR_CONNECT);
    const char *u = host->config_get(host->host, "unreachable");
    c->unreachable = u && strcmp(u, "true") == 0;
    c->connect_fail = host->config_get_int(host->host, "connect_fail", 0);
    const char *g = host->config_get(host->host, "gate");
    c->gate = g && (strcmp(g, "true") == 0 || strcmp(g, "1") == 0 || strcmp(g, "yes") == 0);
    const char *pg = host->config_get(host->host, "pgate");
    c->pgate = pg && (strcmp(pg, "true") == 0 || strcmp(pg, "1") == 0);
    const char *cg = host->config_get(host->host, "cgate");
    c->cgate = cg && (strcmp(cg, "true") == 0 || strcmp(cg, "1") == 0);
    c->failed_dev = c->ok_dev = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    pthread_cond_init(&c->gate_cond, NULL);
    *out = c;
    return 0;
}

static void hs_fini(void *vc)
{
    hs_ctx *c = vc;
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    pthread_cond_destroy(&c->gate_cond);
    c->host->free(c);
}

static int hs_devices(void *vc, tern_device_info *out, int max)
{
    hs_ctx *c = vc;
    int n = c->ndev < max ? c->ndev : max;
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        snprintf(out[i].name, sizeof out[i].name, "hs%d", i);
        out[i].numa_node = -1;
    }
    return n;
}

static int hs_mr_register(void *vc, void *addr, size_t len, tern_mr_keys *keys, void **mr,
                          char *err, size_t errlen)
{
    hs_ctx *c = vc;
    (void)err;
    (void)errlen;
    memset(keys, 0, sizeof *keys);
    keys->ndev = c->ndev;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->ndev; i++)
        keys->lkey[i] = keys->rkey[i] = c->next_key++;
    pthread_mutex_unlock(&c->lock);
    *mr = addr;
    (void)len;
    return 0;
}

static int hs_mr_deregister(void *vc, void *mr)
{
    (void)vc;
    (void)mr;
    return 0;
}

static int hs_segment_describe(void *vc, tern_desc *out)
{
    hs_ctx *c = vc;
    return c->host->desc_set_str(out, "kind", "hsloop");
}

static int hs_ep_open(void *vc, const tern_ep_params *p, void **out, char *err, size_t errlen)
{
    hs_ctx *c = vc;
    pthread_mutex_lock(&c->lock);
    c->opened++;
    pthread_mutex_unlock(&c->lock);
    if (c->unreachable)
        return hs_err(err, errlen, TERN_ERR_UNREACHABLE,
                      HS_NAME ": cannot reach %s from here (configured unreachable)",
                      p->peer_name);
    if (!p->passive && c->open_delay_ms > 0) {
        struct timespec ts = {c->open_delay_ms / 1000, (c->open_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!p->passive && c->gate) {
        pthread_mutex_lock(&c->lock);
        c->gated++;
        while (!c->gate_open)
            pthread_cond_wait(&c->gate_cond, &c->lock);
        pthread_mutex_unlock(&c->lock);
    }
    if (p->passive && c->pgate) {
        pthread_mutex_lock(&c->lock);
        c->pgated++;
        while (!c->pgate_open)
            pthread_cond_wait(&c->gate_cond, &c->lock);
        pthread_mutex_unlock(&c->lock);
    }
    hs_ep *ep = c->host->alloc(sizeof *ep);
    if (!ep)
        return hs_err(err, errlen, TERN_ERR_NOMEM, "hsloop: out of memory");
    memset(ep, 0, sizeof *ep);
    ep->ctx = c;
    ep->dev = p->local_dev;
    ep->passive = p->passive;
    pthread_mutex_lock(&c->lock);
    c->live_eps++;
    pthread_mutex_unlock(&c->lock);
    *out = ep;
    return 0;
}

#ifndef HS_NO_HANDSHAKE
static int hs_ep_describe(void *vep, tern_desc *out)
{
    hs_ep *ep = vep;
    return ep->ctx->host->desc_set_u64(out, "hs_ep", (uint64_t)(uintptr_t)ep);
}
#endif

static int hs_ep_connect(void *vep, const tern_desc *peer, char *err, size_t errlen)
{
    hs_ep *ep = vep;
    pthread_mutex_lock(&ep->ctx->lock);
    ep->ctx->connects++;
    if (!ep->passive && ep->ctx->cgate) {
        ep->ctx->cgated++;
        while (!ep->ctx->cgate_open)
            pthread_cond_wait(&ep->ctx->gate_cond, &ep->ctx->lock);
    }
    pthread_mutex_unlock(&ep->ctx->lock);
    if (ep->ctx->connect_fail)
        return hs_err(err, errlen, (int)ep->ctx->connect_fail,
                      HS_NAME ": connect fails by configuration");
    if (ep->ctx->refuse)
        return hs_err(err, errlen, TERN_ERR_REFUSED, HS_NAME ": refused by configuration");
#ifdef HS_NO_HANDSHAKE
    (void)peer;
    ep->connected = 1;
    return 0;
#endif
    if (!peer || ep->ctx->host->desc_get_u64(peer, "hs_ep", &ep->peer) != 0)
        return hs_err(err, errlen, TERN_ERR_PROTOCOL, "hsloop: peer sent no hs_ep");
    ep->connected = 1;
    return 0;
}

static void hs_ep_close(void *vep)
{
    hs_ep *ep = vep;
    hs_ctx *c = ep->ctx;
    pthread_mutex_lock(&c->lock);
    c->live_eps--;
    if (!ep->passive && !ep->connected)
        c->refused++;
    pthread_mutex_unlock(&c->lock);
    c->host->free(ep);
}

static void hs_move(tern_slice *s)
{
    if (s->opcode == 1)
        memmove((void *)(uintptr_t)s->remote, s->local, s->length);
    else
        memmove(s->local, (void *)(uintptr_t)s->remote, s->length);
}

/* A finished slice goes back: held, or through complete() / the poll queue. */
static void hs_finish(hs_ctx *c, tern_slice *s)
{
    s->plugin[0] = NULL;
    pthread_mutex_lock(&c->lock);
    if (c->hold) {
        if (c->held_tail)
            c->held_tail->plugin[0] = s;
        else
            c->held_head = s;
        c->held_tail = s;
        pthread_mutex_unlock(&c->lock);
        return;
    }
#if HS_COMPLETE
    pthread_mutex_unlock(&c->lock);
    c->host->complete(c->host->host, s);
#else
    if (c->tail)
        c->tail->plugin[0] = s;
    else
        c->head = s;
    c->tail = s;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
#endif
}

static int hs_submit(void *vep, tern_slice *const *s, int n)
{
    hs_ep *ep = vep;
    hs_ctx *c = ep->ctx;
    if (!ep->connected)
        return TERN_ERR_INVAL;
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&c->lock);
        int fail = c->fail_left > 0 ? (c->fail_left--, 1) : 0;
        int late = c->hold; /* the bytes move when released */
        if (fail)
            c->failed_dev = ep->dev;
        else
            c->ok_dev = ep->dev;
        pthread_mutex_unlock(&c->lock);
        s[i]->status = fail ? (int)c->fail_code : 0;
        if (fail)
            snprintf(s[i]->errmsg, sizeof s[i]->errmsg, HS_NAME ": injected failure %d",
                     (int)c->fail_code);
        else if (!late)
            hs_move(s[i]);
        s[i]->plugin[1] = late && !fail ? s[i] : NULL;
        s[i]->transferred = fail ? 0 : s[i]->length;
        pthread_mutex_lock(&c->lock);
        c->submitted++;
        if (s[i]->opcode == 0)
            c->reads++;
        else
            c->writes++;
        pthread_mutex_unlock(&c->lock);
        hs_finish(c, s[i]);
    }
    return n;
}

#if !HS_COMPLETE
static int hs_poll(void *vc, tern_slice **done, int max, int timeout_ms)
{
    hs_ctx *c = vc;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)timeout_ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&c->lock);
    while (!c->head && timeout_ms > 0)
        if (pthread_cond_timedwait(&c->cond, &c->lock, &until) == ETIMEDOUT)
            break;
    int n = 0;
    for (; n < max && c->head; n++) {
        done[n] = c->head;
        c->head = c->head->plugin[0];
        if (!c->head)
            c->tail = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    return n;
}

#endif

static int hs_query(void *vc, const char *what, char *out, size_t outlen)
{
    hs_ctx *c = vc;
    pthread_mutex_lock(&c->lock);
    if (what && strcmp(what, "hold") == 0) {
        c->hold = 1;
    } else if (what && strcmp(what, "release") == 0) {
        c->hold = 0;
        tern_slice *list = c->held_head;
        c->held_head = c->held_tail = NULL;
        pthread_mutex_unlock(&c->lock);
        while (list) {
            tern_slice *next = list->plugin[0];
            if (list->plugin[1]) /* submitted while holding: its bytes move now */
                hs_move(list);
            list->plugin[1] = NULL;
            hs_finish(c, list);
            list = next;
        }
        pthread_mutex_lock(&c->lock);
    }
    if (what && strncmp(what, "fail=", 5) == 0)
        c->fail_left = atoll(what + 5);
    if (what && strcmp(what, "open_gate") == 0)
        c->gate_open = 1;
    if (what && strcmp(what, "open_pgate") == 0)
        c->pgate_open = 1;
    if (what && strcmp(what, "open_cgate") == 0)
        c->cgate_open = 1;
    pthread_cond_broadcast(&c->gate_cond);
    snprintf(out, outlen,
             "open=%d opened=%d gated=%d failed_dev=%d ok_dev=%d connects=%d submitted=%ld "
             "pgated=%d cgated=%d refused=%d reads=%ld writes=%ld",
             c->live_eps, c->opened, c->gated, c->failed_dev, c->ok_dev, c->connects,
             c->submitted, c->pgated, c->cgated, c->refused, c->reads, c->writes);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

static const tern_option hs_options[] = {
    {.key = "open_delay_ms", .type = TERN_OPT_INT, .min = 0, .max = 10000,
     .default_value = "0", .help = "active ep_open sleeps this long"},
    {.key = "refuse", .type = TERN_OPT_BOOL, .default_value = "false",
     .help = "the passive side refuses every connection"},
    {.key = "devices", .type = TERN_OPT_INT, .min = 1, .max = 8, .default_value = "1",
     .help = "devices shown (hs0, hs1, ...)"},
    {.key = "fail_first", .type = TERN_OPT_INT, .min = 0, .max = 1000000,
     .default_value = "0", .help = "the first N slices fail"},
    {.key = "gate", .type = TERN_OPT_BOOL, .default_value = "false",
     .help = "the active ep_open waits until query(\"open_gate\")"},
    {.key = "pgate", .type = TERN_OPT_BOOL, .default_value = "false",
     .help = "the passive ep_open waits until query(\"open_pgate\")"},
    {.key = "cgate", .type = TERN_OPT_BOOL, .default_value = "false",
     .help = "the active ep_connect waits until query(\"open_cgate\")"},
    {.key = "fail_code", .type = TERN_OPT_INT, .min = -100, .max = 0, .default_value = "-12",
     .help = "tern_err code of the injected failures"},
    {.key = "unreachable", .type = TERN_OPT_BOOL, .default_value = "false",
     .help = "ep_open says TERN_ERR_UNREACHABLE for every peer"},
    {.key = "connect_fail", .type = TERN_OPT_INT, .min = -100, .max = 0, .default_value = "0",
     .help = "tern_err code every ep_connect returns (0: none)"},
    {.key = NULL, .type = TERN_OPT_END},
};

TERN_TRANSPORT_EXPORT const tern_transport tern_transport_v1 = {
    .magic = TERN_TRANSPORT_MAGIC,
    .struct_size = sizeof(tern_transport),
    .abi_major = TERN_TRANSPORT_ABI_MAJOR,
    .abi_minor = TERN_TRANSPORT_ABI_MINOR,
    .name = HS_NAME,
    .version = "1.0.0",
#ifdef HS_NO_HANDSHAKE
    .caps = HS_OPS | TERN_CAP_MULTI_DEVICE,
#else
    .caps = HS_OPS | TERN_CAP_HANDSHAKE | TERN_CAP_MULTI_DEVICE,
    .ep_describe = hs_ep_describe,
#endif
    .options = hs_options,
    .init = hs_init,
    .fini = hs_fini,
    .devices = hs_devices,
    .mr_register = hs_mr_register,
    .mr_deregister = hs_mr_deregister,
    .segment_describe = hs_segment_describe,
    .ep_open = hs_ep_open,
    .ep_connect = hs_ep_connect,
    .ep_close = hs_ep_close,
    .submit = hs_submit,
#if !HS_COMPLETE
    .poll = hs_poll,
#endif
    .query = hs_query,
};
