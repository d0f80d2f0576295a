/* tests/transports/test_tcp_transport.c: the TCP transport driven directly through its
 * vtable.  The plugin is dlopen()ed from the build's lib/tern directory and
 * given host services filled in here; two plugin instances (a target and an
 * initiator) talk over real loopback sockets between real memory. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/tcp.h>
#include <sys/stat.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "desc.h"
#include "tern/tern.h"
#include "tern/transport.h"

#define PLUGIN_PATH TERN_BUILD_DIR "/lib/tern/libtern-tcp.so"

static void *g_dl;
static const tern_transport *T;

typedef struct inst {
    void *ctx;
    tern_host_services hs;
    const char *keys[8], *vals[8];
    int nkv;
    /* slices handed back through the host service complete() */
    pthread_mutex_t cq_mu;
    pthread_cond_t cq_cv;
    tern_slice *cq[4096];
    int ncq;
} inst;

static void h_complete(void *host, tern_slice *s)
{
    inst *in = host;
    pthread_mutex_lock(&in->cq_mu);
    if (in->ncq < 4096)
        in->cq[in->ncq++] = s;
    pthread_cond_broadcast(&in->cq_cv);
    pthread_mutex_unlock(&in->cq_mu);
}

/* Up to max completed slices, waiting up to tmo_ms for the first. */
static int inst_poll(inst *in, tern_slice **done, int max, int tmo_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += tmo_ms / 1000;
    ts.tv_nsec += (long)(tmo_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&in->cq_mu);
    while (!in->ncq && pthread_cond_timedwait(&in->cq_cv, &in->cq_mu, &ts) == 0)
        ;
    int n = in->ncq < max ? in->ncq : max;
    memcpy(done, in->cq, (size_t)n * sizeof *done);
    memmove(in->cq, in->cq + n, (size_t)(in->ncq - n) * sizeof *in->cq);
    in->ncq -= n;
    pthread_mutex_unlock(&in->cq_mu);
    return n;
}

static void h_log(void *host, int level, const char *fmt, ...)
{
    (void)host;
    if (level > TERN_LOG_WARN && !getenv("TERN_TEST_VERBOSE"))
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[plugin %d] ", level);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const char *h_get(void *host, const char *key)
{
    inst *in = host;
    for (int i = 0; i < in->nkv; i++)
        if (!strcmp(in->keys[i], key))
            return in->vals[i];
    return NULL;
}

static int64_t h_get_int(void *host, const char *key, int64_t fallback)
{
    const char *v = h_get(host, key);
    return v ? strtoll(v, NULL, 0) : fallback;
}

static void load_plugin(void)
{
    g_dl = dlopen(PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    cr_assert(g_dl, "dlopen %s: %s", PLUGIN_PATH, dlerror());
    T = dlsym(g_dl, TERN_TRANSPORT_SYMBOL);
    cr_assert(T, "no symbol %s", TERN_TRANSPORT_SYMBOL);
    cr_assert_eq(T->magic, TERN_TRANSPORT_MAGIC);
    cr_assert_eq(T->abi_major, TERN_TRANSPORT_ABI_MAJOR);
    cr_assert_str_eq(T->name, "tcp");
}

static void unload_plugin(void)
{
    if (g_dl)
        dlclose(g_dl);
    g_dl = NULL;
}

/* A plugin instance with optional key=value options (pairs, NULL-ended). */
static inst *inst_new(const char *k0, ...)
{
    inst *in = calloc(1, sizeof *in);
    va_list ap;
    va_start(ap, k0);
    for (const char *k = k0; k && in->nkv < 8; k = va_arg(ap, const char *)) {
        in->keys[in->nkv] = k;
        in->vals[in->nkv++] = va_arg(ap, const char *);
    }
    va_end(ap);
    in->hs = (tern_host_services){
        .struct_size = sizeof(tern_host_services), .host = in, .log = h_log,
        .config_get = h_get, .config_get_int = h_get_int, .alloc = malloc, .free = free,
        .desc_set_str = tern_desc_set_str, .desc_set_u64 = tern_desc_set_u64,
        .desc_set_u32_array = tern_desc_set_u32_array, .desc_get_str = tern_desc_get_str,
        .desc_get_u64 = tern_desc_get_u64, .desc_get_u32_array = tern_desc_get_u32_array,
        .server_name = "127.0.0.1:0", .io_timeout_ms = 3000, .sysfs_root = "/sys",
        .complete = h_complete};
    pthread_mutex_init(&in->cq_mu, NULL);
    pthread_cond_init(&in->cq_cv, NULL);
    char err[512] = "";
    int rc = T->init(&in->hs, &in->ctx, err, sizeof err);
    cr_assert_eq(rc, 0, "init: %d %s", rc, err);
    return in;
}

static void inst_free(inst *in)
{
    if (!in)
        return;
    T->fini(in->ctx);
    free(in);
}

/* An endpoint from `from` to `to`'s advertised data port, connected. */
static void *ep_to(inst *from, inst *to)
{
    tern_desc *blob = tern_desc_new();
    cr_assert_eq(T->segment_describe(to->ctx, blob), 0);
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "peer", .peer_segment = blob};
    void *ep = NULL;
    char err[512] = "";
    int rc = T->ep_open(from->ctx, &p, &ep, err, sizeof err);
    tern_desc_free(blob);
    cr_assert_eq(rc, 0, "ep_open: %s", err);
    rc = T->ep_connect(ep, NULL, err, sizeof err);
    cr_assert_eq(rc, 0, "ep_connect: %s", err);
    return ep;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Submit n slices and poll until all came back (or fail after tmo_ms). */
static void run_slices(inst *in, void *ep, tern_slice **s, int n, int tmo_ms)
{
    int acc = T->submit(ep, s, n);
    cr_assert_eq(acc, n, "submit accepted %d of %d", acc, n);
    int got = 0;
    uint64_t end = now_ms() + (uint64_t)tmo_ms;
    tern_slice *done[64];
    while (got < n) {
        cr_assert(now_ms() < end, "only %d of %d slices came back within %d ms", got, n, tmo_ms);
        int k = inst_poll(in, done, 64, 100);
        cr_assert_geq(k, 0);
        for (int i = 0; i < k; i++) {
            cr_assert_eq(done[i]->core, (void *)done[i], "slice returned twice or foreign");
            done[i]->core = NULL; /* mark returned */
        }
        got += k;
    }
}

static tern_slice *mk(int op, void *local, uint64_t remote, uint64_t len)
{
    tern_slice *s = calloc(1, sizeof *s);
    s->struct_size = sizeof *s;
    s->opcode = op;
    s->local = local;
    s->remote = remote;
    s->length = len;
    s->status = 12345;
    s->core = s;
    return s;
}

/* One slice, synchronously; returns its status. */
static int xfer1(inst *in, void *ep, int op, void *local, uint64_t remote, uint64_t len,
                 char *msg, size_t msglen)
{
    tern_slice *s = mk(op, local, remote, len);
    run_slices(in, ep, &s, 1, 20000);
    int st = s->status;
    if (st == 0)
        cr_assert_eq(s->transferred, len);
    if (msg)
        snprintf(msg, msglen, "%s", s->errmsg);
    free(s);
    return st;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131 + seed * 7 + (i >> 8));
}

/* The target's memory: a mapping with a registered window in the middle
 * and canary bytes around it. */
typedef struct region {
    uint8_t *map;
    size_t maplen;
    uint8_t *buf;
    size_t len;
    void *mr;
} region;

#define GUARD 8192

static void region_make(inst *in, region *r, size_t len)
{
    r->maplen = len + 2 * GUARD;
    r->map = mmap(NULL, r->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(r->map != MAP_FAILED);
    memset(r->map, 0xA5, r->maplen);
    r->buf = r->map + GUARD;
    r->len = len;
    memset(r->buf, 0, len);
    tern_mr_keys keys;
    char err[256];
    cr_assert_eq(T->mr_register(in->ctx, r->buf, len, &keys, &r->mr, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(keys.ndev, 1);
}

static void region_check_canaries(const region *r)
{
    for (size_t i = 0; i < GUARD; i++) {
        cr_assert_eq(r->map[i], 0xA5, "canary below the buffer changed at -%zu", GUARD - i);
        cr_assert_eq(r->buf[r->len + i], 0xA5, "canary above the buffer changed at +%zu", i);
    }
}

static void region_free(inst *in, region *r)
{
    if (r->mr)
        cr_assert_eq(T->mr_deregister(in->ctx, r->mr), 0);
    munmap(r->map, r->maplen);
}

TestSuite(tcp_transport, .init = load_plugin, .fini = unload_plugin, .timeout = 120);

Test(tcp_transport, identity_and_describe)
{
    cr_assert(T->caps & TERN_CAP_READ && T->caps & TERN_CAP_WRITE);
    cr_assert_not(T->caps & TERN_CAP_HANDSHAKE, "TCP needs no handshake");
    cr_assert_geq(T->struct_size, TERN_TRANSPORT_V1_0_SIZE);
    inst *a = inst_new(NULL);
    tern_desc *blob = tern_desc_new();
    cr_assert_eq(T->segment_describe(a->ctx, blob), 0);
    cr_assert_str_eq(tern_desc_get_str(blob, "host"), "127.0.0.1");
    uint64_t port = 0;
    cr_assert_eq(tern_desc_get_u64(blob, "port", &port), 0);
    cr_assert(port > 0 && port < 65536, "ephemeral data port resolved: %lu", (unsigned long)port);
    tern_device_info dev[2];
    cr_assert_eq(T->devices(a->ctx, dev, 2), 1);
    cr_assert_str_eq(dev[0].name, "lo", "the device is the interface of the bind address");
    tern_desc_free(blob);
    inst_free(a);
}

Test(tcp_transport, write_read_roundtrip_sizes)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    size_t cap = (16u << 20) + 4096;
    region r;
    region_make(tg, &r, cap);
    uint8_t *src = malloc(cap), *dst = malloc(cap);
    void *ep = ep_to(in, tg);
    const size_t sizes[] = {1, 4096, 65536, 65537, (16u << 20) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        fill(src, n, (unsigned)i + 1);
        memset(dst, 0, n);
        uint64_t at = (uint64_t)(uintptr_t)r.buf + (i % 2) * 7; /* odd offsets too */
        char msg[128];
        cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, at, n, msg, sizeof msg), 0, "write %zu: %s",
                     n, msg);
        cr_assert_eq(memcmp(r.buf + (i % 2) * 7, src, n), 0, "target memory after WRITE %zu", n);
        cr_assert_eq(xfer1(in, ep, TERN_READ, dst, at, n, msg, sizeof msg), 0, "read %zu: %s", n,
                     msg);
        cr_assert_eq(memcmp(dst, src, n), 0, "READ back of %zu bytes differs", n);
    }
    region_check_canaries(&r);
    T->ep_close(ep);
    region_free(tg, &r);
    free(src);
    free(dst);
    inst_free(in);
    inst_free(tg);
}

/* Many slices in flight on the pool at once, writes then reads, in a ring
 * bigger than the initial one. */
Test(tcp_transport, pipelined_many_slices)
{
    inst *tg = inst_new(NULL), *in = inst_new("connections", "3", NULL);
    const int n = 600;
    const size_t bs = 65536 + 17;
    region r;
    region_make(tg, &r, (size_t)n * bs);
    uint8_t *src = malloc((size_t)n * bs), *dst = calloc((size_t)n, bs);
    fill(src, (size_t)n * bs, 9);
    void *ep = ep_to(in, tg);
    tern_slice **s = calloc((size_t)n, sizeof *s);
    for (int i = 0; i < n; i++)
        s[i] = mk(TERN_WRITE, src + (size_t)i * bs, (uint64_t)(uintptr_t)(r.buf + (size_t)i * bs),
                  bs);
    run_slices(in, ep, s, n, 30000);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(s[i]->status, 0, "slice %d: %s", i, s[i]->errmsg);
        free(s[i]);
        s[i] = mk(TERN_READ, dst + (size_t)i * bs, (uint64_t)(uintptr_t)(r.buf + (size_t)i * bs),
                  bs);
    }
    run_slices(in, ep, s, n, 30000);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(s[i]->status, 0, "slice %d: %s", i, s[i]->errmsg);
        free(s[i]);
    }
    cr_assert_eq(memcmp(src, dst, (size_t)n * bs), 0);
    region_check_canaries(&r);
    T->ep_close(ep);
    region_free(tg, &r);
    free(s);
    free(src);
    free(dst);
    inst_free(in);
    inst_free(tg);
}

/* Every request outside the registered window is refused and the memory
 * around the window is untouched; the connection stays usable. */
Test(tcp_transport, range_checks_refuse_and_leave_memory_alone)
{
    inst *tg = inst_new(NULL), *in = inst_new("connections", "1", NULL);
    region r;
    region_make(tg, &r, 1 << 20);
    uint8_t *src = malloc(4 << 20), *dst = malloc(4 << 20);
    memset(src, 0x3C, 4 << 20);
    memset(dst, 0x77, 4 << 20);
    void *ep = ep_to(in, tg);
    uint64_t b = (uint64_t)(uintptr_t)r.buf, e = b + r.len;
    struct { uint64_t addr, len; const char *what; } bad[] = {
        {b - 1, 16, "starts one byte below"},
        {b - GUARD, GUARD, "entirely below"},
        {e - 16, 17, "ends one byte past the end"},
        {e, 1, "starts at the end"},
        {b, r.len + 1, "one byte longer than the buffer"},
        {b - 4096, (2 << 20), "covers the whole buffer and more"},
        {UINT64_MAX - 15, 64, "addr + len overflows"},
        {b + 4096, UINT64_MAX - 100, "huge length overflows"},
        {0, 4096, "NULL page"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint64_t len = bad[i].len > (4 << 20) ? 4096 : bad[i].len;
        if (bad[i].len > (4 << 20)) {
            /* A huge length cannot be backed locally: READ only (no payload). */
            char msg[128];
            int st = xfer1(in, ep, TERN_READ, dst, bad[i].addr, bad[i].len, msg, sizeof msg);
            cr_assert_eq(st, TERN_ERR_RANGE, "READ %s: status %d", bad[i].what, st);
            continue;
        }
        char msg[128];
        int st = xfer1(in, ep, TERN_WRITE, src, bad[i].addr, len, msg, sizeof msg);
        cr_assert_eq(st, TERN_ERR_RANGE, "WRITE %s: status %d (%s)", bad[i].what, st, msg);
        cr_assert(strstr(msg, "not inside a buffer registered"), "message: %s", msg);
        st = xfer1(in, ep, TERN_READ, dst, bad[i].addr, len, msg, sizeof msg);
        cr_assert_eq(st, TERN_ERR_RANGE, "READ %s: status %d", bad[i].what, st);
        for (uint64_t k = 0; k < len; k++)
            cr_assert_eq(dst[k], 0x77, "a refused READ wrote local memory");
    }
    region_check_canaries(&r);
    for (size_t i = 0; i < r.len; i++)
        cr_assert_eq(r.buf[i], 0, "a refused WRITE changed registered memory at %zu", i);
    /* Same connection still works after drained refusals. */
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, b, r.len, NULL, 0), 0);
    cr_assert_eq(xfer1(in, ep, TERN_READ, dst, e - 100, 100, NULL, 0), 0);
    cr_assert_eq(memcmp(dst, src, 100), 0);
    region_check_canaries(&r);
    T->ep_close(ep);
    region_free(tg, &r);
    free(src);
    free(dst);
    inst_free(in);
    inst_free(tg);
}

Test(tcp_transport, deregistered_buffer_is_refused)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    region r;
    region_make(tg, &r, 65536);
    uint8_t src[4096];
    memset(src, 1, sizeof src);
    void *ep = ep_to(in, tg);
    uint64_t b = (uint64_t)(uintptr_t)r.buf;
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, b, sizeof src, NULL, 0), 0);
    cr_assert_eq(T->mr_deregister(tg->ctx, r.mr), 0);
    r.mr = NULL;
    memset(r.buf, 0, 4096);
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, b, sizeof src, NULL, 0), TERN_ERR_RANGE);
    cr_assert_eq(xfer1(in, ep, TERN_READ, src, b, sizeof src, NULL, 0), TERN_ERR_RANGE);
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(r.buf[i], 0, "a deregistered buffer was written");
    /* Registered again: accepted again. */
    tern_mr_keys k;
    char err[256];
    cr_assert_eq(T->mr_register(tg->ctx, r.buf, 65536, &k, &r.mr, err, sizeof err), 0);
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, b + 100, sizeof src, NULL, 0), 0);
    T->ep_close(ep);
    region_free(tg, &r);
    inst_free(in);
    inst_free(tg);
}

Test(tcp_transport, registration_table_rules)
{
    inst *a = inst_new(NULL);
    uint8_t *m = malloc(1 << 16);
    void *mr1, *mr2, *mr3, *x;
    tern_mr_keys k;
    char err[256] = "";
    cr_assert_eq(T->mr_register(a->ctx, m + 4096, 4096, &k, &mr1, err, sizeof err), 0);
    cr_assert_eq(T->mr_register(a->ctx, m + 4096 * 3, 4096, &k, &mr2, err, sizeof err), 0);
    cr_assert_eq(T->mr_register(a->ctx, m + 4095, 2, &k, &x, err, sizeof err), TERN_ERR_EXISTS);
    cr_assert(strstr(err, "overlaps"), "%s", err);
    cr_assert_eq(T->mr_register(a->ctx, m + 8191, 1, &k, &x, err, sizeof err), TERN_ERR_EXISTS);
    cr_assert_eq(T->mr_register(a->ctx, m, 1 << 16, &k, &x, err, sizeof err), TERN_ERR_EXISTS);
    cr_assert_eq(T->mr_register(a->ctx, m + 8192, 4096, &k, &mr3, err, sizeof err), 0,
                 "adjacent ranges are fine");
    cr_assert_eq(T->mr_register(a->ctx, m, 0, &k, &x, err, sizeof err), TERN_ERR_INVAL);
    cr_assert_eq(T->mr_register(a->ctx, (void *)(uintptr_t)(UINTPTR_MAX - 10), 100, &k, &x, err,
                                sizeof err), TERN_ERR_INVAL, "wrapping range refused");
    cr_assert_eq(T->mr_deregister(a->ctx, mr2), 0);
    cr_assert_eq(T->mr_deregister(a->ctx, mr1), 0);
    cr_assert_eq(T->mr_deregister(a->ctx, mr3), 0);
    inst_free(a);
    free(m);
}

/* Requests the instance's data server has read (its query's "served N"). */
static unsigned long served(inst *in)
{
    char out[512] = "";
    cr_assert_eq(T->query(in->ctx, "", out, sizeof out), 0);
    const char *p = strstr(out, "served ");
    cr_assert_not_null(p, "no \"served\" count in: %s", out);
    return strtoul(p + 7, NULL, 10);
}

/* The target goes away with slices in flight: they all come back failed
 * (no hang); the same endpoint then fails fast; a new target works. */
Test(tcp_transport, broken_connection_fails_in_flight_then_recovers)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    const size_t bs = 8u << 20;
    const int n = 32;
    region r;
    region_make(tg, &r, bs);
    uint8_t *src = malloc(bs);
    fill(src, bs, 3);
    void *ep = ep_to(in, tg);
    tern_slice *s[32];
    for (int i = 0; i < n; i++)
        s[i] = mk(TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, bs);
    cr_assert_eq(T->submit(ep, s, n), n);
    /* Some in flight: the target has read a first request header (of 32 x
     * 8 MiB); waiting for that event, not for a fixed time. */
    for (uint64_t w0 = now_ms(); served(tg) == 0;) {
        cr_assert_lt(now_ms() - w0, 10000, "the target never saw a request");
        usleep(1000);
    }
    T->fini(tg->ctx); /* the target disappears: its sockets close */
    tg->ctx = NULL;
    uint64_t t0 = now_ms();
    int got = 0, failed = 0;
    tern_slice *done[64];
    while (got < n) {
        cr_assert(now_ms() - t0 < 10000, "slices hang after the target went away (%d/%d)", got, n);
        int k = inst_poll(in, done, 64, 100);
        for (int i = 0; i < k; i++)
            if (done[i]->status != 0) {
                failed++;
                cr_assert(done[i]->errmsg[0], "a failed slice carries a message");
            }
        got += k;
    }
    cr_assert_gt(failed, 0, "the target went away before all 256 MiB were written");
    /* The dead peer: new connections are refused at once. */
    char msg[128];
    int st = xfer1(in, ep, TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, 16, msg, sizeof msg);
    cr_assert(st == TERN_ERR_CONNECT || st == TERN_ERR_CLOSED, "status %d (%s)", st, msg);
    T->ep_close(ep);
    /* Another target works with the same initiator instance. */
    inst *tg2 = inst_new(NULL);
    region r2;
    region_make(tg2, &r2, 1 << 20);
    void *ep2 = ep_to(in, tg2);
    cr_assert_eq(xfer1(in, ep2, TERN_WRITE, src, (uint64_t)(uintptr_t)r2.buf, 1 << 20, NULL, 0),
                 0);
    cr_assert_eq(memcmp(r2.buf, src, 1 << 20), 0);
    T->ep_close(ep2);
    region_free(tg2, &r2);
    inst_free(tg2);
    for (int i = 0; i < n; i++)
        free(s[i]);
    r.mr = NULL; /* its instance is gone */
    region_free(tg, &r);
    free(tg);
    inst_free(in);
    free(src);
}

/* After an idle gap the persistent connections still carry a burst. */
Test(tcp_transport, burst_after_idle)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    region r;
    region_make(tg, &r, 1024 * 4096);
    uint8_t *src = malloc(1024 * 4096);
    fill(src, 1024 * 4096, 5);
    void *ep = ep_to(in, tg);
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, 8, NULL, 0), 0);
    sleep(2);
    tern_slice *s[1024];
    for (int i = 0; i < 1024; i++)
        s[i] = mk(TERN_WRITE, src + i * 4096, (uint64_t)(uintptr_t)(r.buf + i * 4096), 4096);
    run_slices(in, ep, s, 1024, 20000);
    for (int i = 0; i < 1024; i++) {
        cr_assert_eq(s[i]->status, 0, "slice %d after idle: %s", i, s[i]->errmsg);
        free(s[i]);
    }
    cr_assert_eq(memcmp(r.buf, src, 1024 * 4096), 0);
    T->ep_close(ep);
    region_free(tg, &r);
    free(src);
    inst_free(in);
    inst_free(tg);
}

/* ---- raw wire: the target against a hostile or broken peer ---------------- */

static int raw_connect(inst *tg)
{
    tern_desc *blob = tern_desc_new();
    T->segment_describe(tg->ctx, blob);
    uint64_t port = 0;
    tern_desc_get_u64(blob, "port", &port);
    tern_desc_free(blob);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void raw_req(uint8_t *h, uint32_t magic, int ver, int op, uint64_t addr, uint64_t len)
{
    memset(h, 0, 32);
    put_le(h, magic, 4);
    h[4] = (uint8_t)ver;
    h[5] = (uint8_t)op;
    put_le(h + 8, 42, 8);
    put_le(h + 16, addr, 8);
    put_le(h + 24, len, 8);
}

/* Wait for the target to close the connection: recv returns 0 (or reset). */
static int raw_closed(int fd)
{
    uint8_t b[64];
    ssize_t n;
    while ((n = recv(fd, b, sizeof b, 0)) > 0)
        ;
    return n == 0 || errno == ECONNRESET;
}

Test(tcp_transport, malformed_frames_close_only_that_connection)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    region r;
    region_make(tg, &r, 65536);
    uint64_t b = (uint64_t)(uintptr_t)r.buf;
    uint8_t h[32];

    int fd = raw_connect(tg); /* bad magic */
    raw_req(h, 0xdeadbeef, 1, TERN_WRITE, b, 16);
    cr_assert_eq(send(fd, h, 32, 0), 32);
    cr_assert(raw_closed(fd), "bad magic closes the connection");
    close(fd);

    fd = raw_connect(tg); /* wrong version, then bad opcode */
    raw_req(h, 0x51524E54u, 9, TERN_READ, b, 16);
    send(fd, h, 32, 0);
    cr_assert(raw_closed(fd));
    close(fd);
    fd = raw_connect(tg);
    raw_req(h, 0x51524E54u, 1, 7, b, 16);
    send(fd, h, 32, 0);
    cr_assert(raw_closed(fd));
    close(fd);

    fd = raw_connect(tg); /* zero length: an INVAL reply, connection kept */
    raw_req(h, 0x51524E54u, 1, TERN_READ, b, 0);
    send(fd, h, 32, 0);
    uint8_t rep[24];
    cr_assert_eq(recv(fd, rep, 24, MSG_WAITALL), 24);
    int32_t st = (int32_t)(rep[8] | rep[9] << 8 | rep[10] << 16 | (uint32_t)rep[11] << 24);
    cr_assert_eq(st, TERN_ERR_INVAL);
    /* a refused WRITE too big to drain: closed without a reply */
    raw_req(h, 0x51524E54u, 1, TERN_WRITE, b + 65536, 1ull << 40);
    send(fd, h, 32, 0);
    cr_assert(raw_closed(fd));
    close(fd);

    fd = raw_connect(tg); /* a truncated header, then the peer vanishes */
    send(fd, h, 10, 0);
    close(fd);

    /* the target still serves a well-behaved peer and nothing was touched */
    void *ep = ep_to(in, tg);
    uint8_t src[100];
    memset(src, 9, sizeof src);
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, b, sizeof src, NULL, 0), 0);
    for (size_t i = sizeof src; i < r.len; i++)
        cr_assert_eq(r.buf[i], 0);
    region_check_canaries(&r);
    T->ep_close(ep);
    region_free(tg, &r);
    inst_free(in);
    inst_free(tg);
}

Test(tcp_transport, bad_peer_blobs_and_dead_ports)
{
    inst *in = inst_new(NULL);
    void *ep = NULL;
    char err[512] = "";
    tern_desc *blob = tern_desc_new();
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "x", .peer_segment = blob};
    cr_assert_eq(T->ep_open(in->ctx, &p, &ep, err, sizeof err), TERN_ERR_PROTOCOL);
    cr_assert(strstr(err, "port"), "%s", err);
    tern_desc_set_str(blob, "host", "127.0.0.1");
    tern_desc_set_u64(blob, "port", 70000);
    cr_assert_eq(T->ep_open(in->ctx, &p, &ep, err, sizeof err), TERN_ERR_PROTOCOL);
    /* A port nobody listens on: connect fails with a message, no hang. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&sa, sizeof sa);
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    close(fd); /* now free and not listening */
    tern_desc_set_u64(blob, "port", ntohs(sa.sin_port));
    cr_assert_eq(T->ep_open(in->ctx, &p, &ep, err, sizeof err), 0, "%s", err);
    cr_assert_eq(T->ep_connect(ep, NULL, err, sizeof err), TERN_ERR_CONNECT);
    cr_assert(strstr(err, "refused"), "%s", err);
    T->ep_close(ep);
    tern_desc_free(blob);
    inst_free(in);
}

/* fini with endpoints open and slices queued must not hang or crash. */
Test(tcp_transport, fini_with_work_in_flight)
{
    inst *tg = inst_new(NULL), *in = inst_new(NULL);
    region r;
    region_make(tg, &r, 4 << 20);
    uint8_t *src = calloc(1, 4 << 20);
    void *ep = ep_to(in, tg);
    tern_slice *s[16];
    for (int i = 0; i < 16; i++)
        s[i] = mk(TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, 4 << 20);
    cr_assert_eq(T->submit(ep, s, 16), 16);
    inst_free(in); /* closes the endpoint and its threads */
    region_free(tg, &r);
    inst_free(tg);
    for (int i = 0; i < 16; i++)
        free(s[i]);
    free(src);
}

/* A port nobody listens on now: bound to port 0, read back, released (no
 * fixed port that another test on this machine could hold). */
static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t sl = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "bind: %s", strerror(errno));
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static long sysctl_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f && fscanf(f, "%ld", &v) != 1)
        v = -1;
    if (f)
        fclose(f);
    return v;
}

/* What getsockopt reports for a buffer size set with setsockopt: the kernel
 * caps the request at the sysctl maximum and doubles it (socket(7)). */
static int sockbuf_expected(long req, const char *max_sysctl)
{
    long max = sysctl_long(max_sysctl);
    return (int)(2 * (max > 0 && req > max ? max : req));
}

/* The data connections of this process to or from TCP port `port`, as the
 * kernel sees them: every socket fd in /proc/self/fd whose peer (dialled
 * side) or local (accepted side) port is `port`.  Listeners are skipped. */
typedef struct sock_opts {
    int n;
    int sndbuf[16], rcvbuf[16], nodelay[16];
} sock_opts;

static void sockets_of(uint16_t port, sock_opts *dialled, sock_opts *accepted)
{
    memset(dialled, 0, sizeof *dialled);
    memset(accepted, 0, sizeof *accepted);
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        int fd = atoi(e->d_name);
        struct stat st;
        if (e->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) || !S_ISSOCK(st.st_mode))
            continue;
        struct sockaddr_storage l, p;
        socklen_t ll = sizeof l, pl = sizeof p;
        if (getsockname(fd, (struct sockaddr *)&l, &ll) || getpeername(fd, (struct sockaddr *)&p, &pl))
            continue;
        if (l.ss_family != AF_INET && l.ss_family != AF_INET6)
            continue;
        uint16_t lp = ntohs(l.ss_family == AF_INET ? ((struct sockaddr_in *)&l)->sin_port
                                                   : ((struct sockaddr_in6 *)&l)->sin6_port);
        uint16_t pp = ntohs(p.ss_family == AF_INET ? ((struct sockaddr_in *)&p)->sin_port
                                                   : ((struct sockaddr_in6 *)&p)->sin6_port);
        sock_opts *o = pp == port ? dialled : lp == port ? accepted : NULL;
        if (!o || o->n == 16)
            continue;
        socklen_t sz = sizeof(int);
        getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o->sndbuf[o->n], &sz);
        sz = sizeof(int);
        getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o->rcvbuf[o->n], &sz);
        sz = sizeof(int);
        getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &o->nodelay[o->n], &sz);
        o->n++;
    }
    closedir(d);
}

/* Options: a chosen port, a wildcard bind advertised as the server name's
 * host, explicit socket buffers, Nagle on, two connections: each observed on
 * the real sockets (getsockopt), and the transfer still correct.  The buffer
 * sizes differ from the kernel's defaults and autotuning's steps, so only
 * setsockopt can produce them. */
Test(tcp_transport, options_are_honoured)
{
    char fixed[8];
    snprintf(fixed, sizeof fixed, "%u", free_port());
    inst *tg = inst_new("port", fixed, "bind", "0.0.0.0", "sndbuf", "90112", "rcvbuf",
                        "102400", "nodelay", "false", NULL);
    inst *in = inst_new("connections", "2", "sndbuf", "77824", NULL);
    tern_desc *blob = tern_desc_new();
    cr_assert_eq(T->segment_describe(tg->ctx, blob), 0);
    uint64_t port = 0;
    tern_desc_get_u64(blob, "port", &port);
    cr_assert_eq(port, (uint64_t)atoi(fixed));
    cr_assert_str_eq(tern_desc_get_str(blob, "host"), "127.0.0.1",
                     "a wildcard bind advertises the server name's host");
    tern_desc_free(blob);
    char out[512];
    cr_assert_eq(T->query(in->ctx, "", out, sizeof out), 0);
    cr_assert(strstr(out, "2 connections per peer"), "%s", out);
    region r;
    region_make(tg, &r, 4 << 20);
    uint8_t *src = malloc(4 << 20), *dst = calloc(1, 4 << 20);
    fill(src, 4 << 20, 21);
    void *ep = ep_to(in, tg);
    cr_assert_eq(xfer1(in, ep, TERN_WRITE, src, (uint64_t)(uintptr_t)r.buf, 4 << 20, NULL, 0), 0);
    cr_assert_eq(xfer1(in, ep, TERN_READ, dst, (uint64_t)(uintptr_t)r.buf, 4 << 20, NULL, 0), 0);
    cr_assert_eq(memcmp(src, dst, 4 << 20), 0);
    /* Connections open on demand up to `connections`: a deep queue (64
     * slices at once, three rounds) opens the second one, never a third. */
    for (int round = 0; round < 3; round++) {
        tern_slice *deep[64];
        for (int i = 0; i < 64; i++)
            deep[i] = mk(TERN_WRITE, src + i * 65536, (uint64_t)(uintptr_t)(r.buf + i * 65536),
                         65536);
        run_slices(in, ep, deep, 64, 20000);
        for (int i = 0; i < 64; i++) {
            cr_assert_eq(deep[i]->status, 0, "deep slice %d: %s", i, deep[i]->errmsg);
            free(deep[i]);
        }
    }
    sock_opts dialled, accepted;
    sockets_of((uint16_t)port, &dialled, &accepted);
    cr_assert_eq(dialled.n, 2, "%d data connections dialled to port %u, at most 2 configured "
                 "and a deep queue opens them", dialled.n, (unsigned)port);
    cr_assert_eq(accepted.n, 2, "%d data connections accepted on port %u", accepted.n,
                 (unsigned)port);
    int in_snd = sockbuf_expected(77824, "/proc/sys/net/core/wmem_max");
    int tg_snd = sockbuf_expected(90112, "/proc/sys/net/core/wmem_max");
    int tg_rcv = sockbuf_expected(102400, "/proc/sys/net/core/rmem_max");
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(dialled.sndbuf[i], in_snd, "initiator SO_SNDBUF %d, expected %d",
                     dialled.sndbuf[i], in_snd);
        cr_assert_eq(dialled.nodelay[i], 1, "initiator TCP_NODELAY off (default is on)");
        cr_assert_eq(accepted.sndbuf[i], tg_snd, "target SO_SNDBUF %d, expected %d",
                     accepted.sndbuf[i], tg_snd);
        cr_assert_eq(accepted.rcvbuf[i], tg_rcv, "target SO_RCVBUF %d, expected %d",
                     accepted.rcvbuf[i], tg_rcv);
        cr_assert_eq(accepted.nodelay[i], 0, "target TCP_NODELAY on; nodelay: false");
    }
    /* A second instance cannot take the same port: a clear error. */
    tern_host_services hs = tg->hs;
    const char *k[] = {"port"}, *v[] = {fixed};
    inst tmp = {.nkv = 1};
    tmp.keys[0] = k[0];
    tmp.vals[0] = v[0];
    hs.host = &tmp;
    void *ctx2 = NULL;
    char err[512] = "";
    cr_assert_eq(T->init(&hs, &ctx2, err, sizeof err), TERN_ERR_IO);
    cr_assert(strstr(err, fixed) && strstr(err, "in use"), "%s", err);
    T->ep_close(ep);
    region_free(tg, &r);
    free(src);
    free(dst);
    inst_free(in);
    inst_free(tg);
}
