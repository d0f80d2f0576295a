/* Test transports for tests/core/test_loader.c.  One source, many MODULE targets
 * (tests/support/CMakeLists.txt): each variant defines one defect, or none.
 *   TP_NAME "x"          the name in the symbol (always)
 *   TP_VERSION "v"       the version string (default "test")
 *   TP_BAD_MAGIC         wrong magic number
 *   TP_ABI_MAJOR n       another ABI major
 *   TP_STRUCT_SIZE e     a struct_size other than sizeof(tern_transport)
 *   TP_NULL_SUBMIT       a mandatory operation left NULL
 *   TP_INIT_FAIL         init fails with its own message
 *   TP_NO_DEVICE         init answers TERN_ERR_NOT_FOUND
 *   TP_ZERO_DEVICES      devices() finds nothing
 *   TP_NO_MULTI          reports two devices without TERN_CAP_MULTI_DEVICE
 *   TP_NO_SYMBOL         exports the table under another name
 *   TP_USE_DEP           calls into libterntestdep.so
 *   TP_CALL_STRERROR     calls tern_strerror() from init: it loads only in a
 *                        process whose libtern.so exports it (every tool)
 * The working variant answers query("get:KEY" / "int:KEY" / "list:KEY:I" /
 * "server" / "timeout" / "sysfs") through the host services, so the test
 * can check what the loader handed over; fini appends "fini <name>" to the
 * file named by $TP_FINI_MARKER. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern/transport.h>

#ifndef TP_VERSION
#define TP_VERSION "test"
#endif
#ifndef TP_ABI_MAJOR
#define TP_ABI_MAJOR TERN_TRANSPORT_ABI_MAJOR
#endif
#ifndef TP_STRUCT_SIZE
#define TP_STRUCT_SIZE sizeof(tern_transport)
#endif

#ifdef TP_USE_DEP
int tern_testdep_value(void);
#endif

typedef struct tp_ctx {
    const tern_host_services *host;
    int mrs;
} tp_ctx;

static int tp_init(const tern_host_services *host, void **ctx, char *err, size_t errlen)
{
#ifdef TP_USE_DEP
    if (tern_testdep_value() != 42)
        return TERN_ERR_INVAL;
#endif
#ifdef TP_CALL_STRERROR
    if (strcmp(tern_strerror(TERN_ERR_INVAL), "TERN_ERR_INVAL") != 0)
        return TERN_ERR_INVAL;
#endif
#ifdef TP_INIT_FAIL
    (void)ctx;
    snprintf(err, errlen, "testplug: cannot open /dev/tern-test-missing: check the device");
    host->log(host->host, TERN_LOG_ERROR, "init is failing on purpose");
    return TERN_ERR_DEVICE;
#elif defined(TP_NO_DEVICE)
    (void)ctx;
    (void)host;
    snprintf(err, errlen, "testplug: no test NIC present");
    return TERN_ERR_NOT_FOUND;
#else
    (void)err;
    (void)errlen;
    tp_ctx *c = host->alloc(sizeof *c);
    if (!c)
        return TERN_ERR_NOMEM;
    c->host = host;
    c->mrs = 0;
    host->log(host->host, TERN_LOG_INFO, "hello from testplug %s", TP_NAME);
    *ctx = c;
    return 0;
#endif
}

static void tp_fini(void *vctx)
{
    tp_ctx *c = vctx;
    const char *marker = getenv("TP_FINI_MARKER");
    if (marker) {
        FILE *f = fopen(marker, "a");
        if (f) {
            fprintf(f, "fini %s\n", TP_NAME);
            fclose(f);
        }
    }
    c->host->free(c);
}

static int tp_devices(void *ctx, tern_device_info *out, int max)
{
    (void)ctx;
#ifdef TP_ZERO_DEVICES
    (void)out;
    (void)max;
    return 0;
#else
    if (max < 2)
        return TERN_ERR_INVAL;
    memset(out, 0, 2 * sizeof *out);
    snprintf(out[0].name, sizeof out[0].name, "tp0");
    snprintf(out[0].sysfs_path, sizeof out[0].sysfs_path, "class/net/tp0/device");
    out[0].numa_node = -2; /* the core reads sysfs */
    snprintf(out[1].name, sizeof out[1].name, "tp1");
    out[1].numa_node = 0;
    out[1].lid = 7;
#ifdef TP_CALL_STRERROR /* runs in a real engine (tern-bench): a GID it accepts */
    snprintf(out[1].gid, sizeof out[1].gid, "fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:07");
#else
    snprintf(out[1].gid, sizeof out[1].gid, "fe80::7");
#endif
    return 2;
#endif
}

static int tp_mr_register(void *vctx, void *addr, size_t len, tern_mr_keys *keys, void **mr,
                          char *err, size_t errlen)
{
    tp_ctx *c = vctx;
    (void)len;
    (void)err;
    (void)errlen;
    keys->ndev = 1;
    keys->lkey[0] = keys->rkey[0] = (uint64_t)++c->mrs;
    *mr = addr;
    return 0;
}

static int tp_mr_deregister(void *ctx, void *mr)
{
    (void)ctx;
    (void)mr;
    return 0;
}

static int tp_segment_describe(void *vctx, tern_desc *out)
{
    tp_ctx *c = vctx;
    return c->host->desc_set_str(out, "testplug", TP_NAME);
}

static int tp_ep_open(void *ctx, const tern_ep_params *params, void **ep, char *err,
                      size_t errlen)
{
    (void)params;
    (void)err;
    (void)errlen;
    *ep = ctx;
    return 0;
}

static int tp_ep_describe(void *ep, tern_desc *out)
{
    (void)ep;
    (void)out;
    return 0;
}

static int tp_ep_connect(void *ep, const tern_desc *peer, char *err, size_t errlen)
{
    (void)ep;
    (void)peer;
    snprintf(err, errlen, "testplug moves no data");
    return TERN_ERR_NOT_SUPPORTED;
}

static void tp_ep_close(void *ep) { (void)ep; }

#ifndef TP_NULL_SUBMIT
static int tp_submit(void *ep, tern_slice *const *slices, int n)
{
    (void)ep;
    (void)slices;
    (void)n;
    return TERN_ERR_NOT_SUPPORTED;
}
#endif

static int tp_poll(void *ctx, tern_slice **done, int max, int timeout_ms)
{
    (void)ctx;
    (void)done;
    (void)max;
    (void)timeout_ms;
    return 0;
}

/* What the host services answer, as text. */
static int tp_query(void *vctx, const char *what, char *out, size_t outlen)
{
    tp_ctx *c = vctx;
    const tern_host_services *h = c->host;
    char key[64];
    size_t idx;
    const char *s;
    if (strncmp(what, "get:", 4) == 0) {
        s = h->config_get(h->host, what + 4);
        snprintf(out, outlen, "%s", s ? s : "(null)");
    } else if (strncmp(what, "int:", 4) == 0) {
        snprintf(out, outlen, "%lld", (long long)h->config_get_int(h->host, what + 4, -999));
    } else if (sscanf(what, "list:%63[^:]:%zu", key, &idx) == 2) {
        s = h->config_get_list(h->host, key, idx);
        snprintf(out, outlen, "%s", s ? s : "(null)");
    } else if (strcmp(what, "server") == 0) {
        snprintf(out, outlen, "%s", h->server_name);
    } else if (strcmp(what, "timeout") == 0) {
        snprintf(out, outlen, "%d", h->io_timeout_ms);
    } else if (strcmp(what, "sysfs") == 0) {
        snprintf(out, outlen, "%s", h->sysfs_root);
    } else {
        return TERN_ERR_INVAL;
    }
    return 0;
}

static const char *const tp_modes[] = {"fast", "slow", NULL};

static const tern_option tp_options[] = {
    {.key = "greeting", .type = TERN_OPT_STRING, .default_value = "hello", .help = "a string"},
    {.key = "count", .type = TERN_OPT_INT, .min = 0, .max = 100, .default_value = "7",
     .help = "an integer"},
    {.key = "size", .type = TERN_OPT_SIZE, .min = 0, .max = 1LL << 40, .default_value = "64K",
     .help = "a size"},
    {.key = "mode", .type = TERN_OPT_CHOICE, .choices = tp_modes, .default_value = "fast",
     .help = "a choice"},
    {.key = "names", .type = TERN_OPT_STRING_LIST, .help = "a list"},
    {.key = NULL, .type = TERN_OPT_END},
};

#ifdef TP_NO_SYMBOL
#define TP_SYMBOL tern_transport_v0
#else
#define TP_SYMBOL tern_transport_v1
#endif

TERN_TRANSPORT_EXPORT const tern_transport TP_SYMBOL = {
#ifdef TP_BAD_MAGIC
    .magic = 0x0123456789abcdefULL,
#else
    .magic = TERN_TRANSPORT_MAGIC,
#endif
    .struct_size = TP_STRUCT_SIZE,
    .abi_major = TP_ABI_MAJOR,
    .abi_minor = TERN_TRANSPORT_ABI_MINOR,
    .name = TP_NAME,
    .version = TP_VERSION,
#ifdef TP_NO_MULTI
    .caps = TERN_CAP_READ | TERN_CAP_WRITE, /* two devices, but not TERN_CAP_MULTI_DEVICE */
#else
    .caps = TERN_CAP_READ | TERN_CAP_WRITE | TERN_CAP_MULTI_DEVICE,
#endif
    .options = tp_options,
    .init = tp_init,
    .fini = tp_fini,
    .devices = tp_devices,
    .mr_register = tp_mr_register,
    .mr_deregister = tp_mr_deregister,
    .segment_describe = tp_segment_describe,
    .ep_open = tp_ep_open,
    .ep_describe = tp_ep_describe,
    .ep_connect = tp_ep_connect,
    .ep_close = tp_ep_close,
#ifdef TP_NULL_SUBMIT
    .submit = NULL,
#else
    .submit = tp_submit,
#endif
    .poll = tp_poll,
    .ep_reset = NULL,
    .query = tp_query,
};
