/* tests/support/plugin_harness.c: see plugin_harness.h. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/auth.h"
#include "desc/desc.h"
#include "plugin_harness.h"

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

/* host is the test's instance; its first member is its plugin_host. */
static const char *h_get(void *host, const char *key)
{
    const plugin_host *h = host;
    for (int i = 0; i < h->nkv; i++)
        if (!strcmp(h->keys[i], key))
            return h->vals[i];
    return NULL;
}

static int64_t h_get_int(void *host, const char *key, int64_t fallback)
{
    const char *v = h_get(host, key);
    return v ? strtoll(v, NULL, 0) : fallback;
}

const tern_transport *plugin_load(const char *path, void **dl)
{
    *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(*dl, "dlopen %s: %s", path, dlerror());
    const tern_transport *t = dlsym(*dl, TERN_TRANSPORT_SYMBOL);
    cr_assert(t, "no symbol %s", TERN_TRANSPORT_SYMBOL);
    return t;
}

/* HMAC-SHA256 with the instance's secret, as the core's host service. */
static int h_auth_mac(void *host, const void *msg, size_t len, uint8_t out[32])
{
    plugin_host *h = host;
    return tern_auth_mac(h->auth, msg, len, out);
}

void *plugin_host_start(plugin_host *h, const tern_transport *t, int io_timeout_ms,
                        void (*complete)(void *host, tern_slice *s), const char *k0,
                        va_list ap)
{
    for (const char *k = k0; k && h->nkv < 8; k = va_arg(ap, const char *)) {
        h->keys[h->nkv] = k;
        h->vals[h->nkv++] = va_arg(ap, const char *);
    }
    h->hs = (tern_host_services){
        .struct_size = sizeof(tern_host_services), .host = h, .log = h_log,
        .config_get = h_get, .config_get_int = h_get_int, .alloc = malloc, .free = free,
        .desc_set_str = tern_desc_set_str, .desc_set_u64 = tern_desc_set_u64,
        .desc_set_u32_array = tern_desc_set_u32_array, .desc_get_str = tern_desc_get_str,
        .desc_get_u64 = tern_desc_get_u64, .desc_get_u32_array = tern_desc_get_u32_array,
        .server_name = h->server_name ? h->server_name : "127.0.0.1:0",
        .io_timeout_ms = io_timeout_ms, .sysfs_root = "/sys", .complete = complete,
        .auth_mac = h->auth ? h_auth_mac : NULL};
    void *ctx = NULL;
    char err[512] = "";
    int rc = t->init(&h->hs, &ctx, err, sizeof err);
    cr_assert_eq(rc, 0, "init: %d %s", rc, err);
    return ctx;
}

tern_slice *plugin_slice_new(int op, void *local, uint64_t lkey, uint64_t remote, uint64_t rkey,
                             uint64_t len)
{
    tern_slice *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    s->struct_size = sizeof *s;
    s->opcode = op;
    s->local = local;
    s->lkey = lkey;
    s->remote = remote;
    s->rkey = rkey;
    s->length = len;
    s->status = 12345;
    s->core = s;
    return s;
}

void *plugin_ep_to(const tern_transport *t, void *from, void *to)
{
    tern_desc *blob = tern_desc_new();
    cr_assert_eq(t->segment_describe(to, blob), 0);
    tern_ep_params p = {.struct_size = sizeof p, .peer_name = "peer", .peer_segment = blob};
    void *ep = NULL;
    char err[512] = "";
    int rc = t->ep_open(from, &p, &ep, err, sizeof err);
    tern_desc_free(blob);
    cr_assert_eq(rc, 0, "ep_open: %s", err);
    rc = t->ep_connect(ep, NULL, err, sizeof err);
    cr_assert_eq(rc, 0, "ep_connect: %s", err);
    return ep;
}
