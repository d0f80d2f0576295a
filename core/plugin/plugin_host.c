/* core/plugin/plugin_host.c: the host services handed to transport plugins (see
 * plugin_host.h and include/tern/transport.h, tern_host_services). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plugin/plugin_host.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/auth.h"
#include "config/values.h"
#include "host/cuda.h"
#include "desc/desc.h"
#include "base/log.h"
#include "base/util.h"

/* Core-side state behind tern_host_services.host: private copies of what a
 * plugin may look up, so the configuration can be freed after loading. */
struct tern_plugin_host {
    char name[TERN_NAME_MAX];
    tern_logfn log;
    void *log_arg;
    int log_level;             /* for the stderr fallback when log == NULL */
    const tern_option *opts;   /* lives in the plugin's image */
    tern_cfg_kv *kv;
    size_t nkv;
    char server_name[256];
    char sysfs_root[PATH_MAX];
    struct tern_auth *auth;    /* auth_secret_file's secret */
    int auth_failed;           /* configured but unreadable: every proof fails */
    void (*complete)(tern_slice *slice); /* the core's completion entry point */
    tern_cuda *cuda;           /* the engine's CUDA driver (mem_gpu, mem_copy) */
};

/* ---- logging ---------------------------------------------------------------- */

void tern_plugin_stderr_log(void *arg, int level, const char *fmt, ...)
{
    int max = arg ? *(const int *)arg : TERN_LOG_INFO;
    if (level > max)
        return;
    tern_logger lg; /* no engine: the text format without a name */
    tern_logger_init(&lg, max, TERN_LOG_FORMAT_TEXT, NULL, NULL, NULL);
    va_list ap;
    va_start(ap, fmt);
    tern_logv(&lg, level, fmt, ap);
    va_end(ap);
    tern_logger_fini(&lg);
}

const char *tern_plugin_own_text(const char *name, const char *msg)
{
    size_t n = strlen(name);
    if (n && strncmp(msg, name, n) == 0 && msg[n] == ':')
        for (msg += n + 1; *msg == ' ';)
            msg++;
    return msg;
}

/* ---- host services ------------------------------------------------------------ */

#define HOST(h) ((struct tern_plugin_host *)(h))

static void host_log(void *host, int level, const char *fmt, ...)
{
    struct tern_plugin_host *h = HOST(host);
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const char *text = tern_plugin_own_text(h->name, buf);
    if (h->log)
        h->log(h->log_arg, level, "%s: %s", h->name, text);
    else
        tern_plugin_stderr_log(&h->log_level, level, "%s: %s", h->name, text);
}

static const tern_cfg_kv *host_kv(const struct tern_plugin_host *h, const char *key)
{
    for (size_t i = 0; key && i < h->nkv; i++)
        if (h->kv[i].key && strcmp(h->kv[i].key, key) == 0)
            return &h->kv[i];
    return NULL;
}

static const char *host_default(const struct tern_plugin_host *h, const char *key)
{
    for (const tern_option *o = h->opts; key && o && o->type != TERN_OPT_END; o++)
        if (o->key && strcmp(o->key, key) == 0)
            return o->default_value;
    return NULL;
}

/* A list key asked for as a scalar answers its first item. */
static const char *host_config_get(void *host, const char *key)
{
    const tern_cfg_kv *kv = host_kv(HOST(host), key);
    if (!kv)
        return host_default(HOST(host), key);
    if (kv->value)
        return kv->value;
    return kv->nitems ? kv->items[0] : NULL;
}

/* "4096", "-3", "64K", "true": read as the configuration validator read it. */
static int parse_int(const char *s, int64_t *out)
{
    return tern_config_parse_int(s, out) == 0 ? 0 : -1;
}

static int64_t host_config_get_int(void *host, const char *key, int64_t fallback)
{
    const char *s = host_config_get(host, key);
    int64_t v;
    if (!s)
        return fallback;
    if (parse_int(s, &v) != 0) {
        host_log(host, TERN_LOG_WARN, "option %s: '%s' is not an integer, using %lld", key, s,
                 (long long)fallback);
        return fallback;
    }
    return v;
}

/* A scalar counts as a one-item list, and so does the option's default. */
static const char *host_config_get_list(void *host, const char *key, size_t i)
{
    const tern_cfg_kv *kv = host_kv(HOST(host), key);
    if (!kv)
        return i == 0 ? host_default(HOST(host), key) : NULL;
    if (kv->value)
        return i == 0 ? kv->value : NULL;
    return i < kv->nitems ? kv->items[i] : NULL;
}

/* Never NULL for size 0 (malloc(0) may be). */
static void *host_alloc(size_t size) { return malloc(size ? size : 1); }

/* HMAC-SHA256 with the shared secret; NOT_SUPPORTED when none is set. */
static int host_auth_mac(void *host, const void *msg, size_t len, uint8_t out[32])
{
    struct tern_plugin_host *h = host;
    if (!h || !h->auth)
        return h && h->auth_failed ? TERN_ERR_AUTH : TERN_ERR_NOT_SUPPORTED;
    return tern_auth_mac(h->auth, msg, len, out);
}

static void host_kv_free(struct tern_plugin_host *h)
{
    tern_auth_free(h->auth);
    h->auth = NULL;
    for (size_t i = 0; i < h->nkv; i++) {
        free(h->kv[i].key);
        free(h->kv[i].value);
        for (size_t j = 0; j < h->kv[i].nitems; j++)
            free(h->kv[i].items[j]);
        free(h->kv[i].items);
    }
    free(h->kv);
    h->kv = NULL;
    h->nkv = 0;
}

static int host_kv_copy(struct tern_plugin_host *h, const tern_transport_cfg *tc)
{
    if (!tc->nkv)
        return 0;
    h->kv = calloc(tc->nkv, sizeof *h->kv);
    if (!h->kv)
        return TERN_ERR_NOMEM;
    h->nkv = tc->nkv;
    for (size_t i = 0; i < tc->nkv; i++) {
        const tern_cfg_kv *s = &tc->kv[i];
        tern_cfg_kv *d = &h->kv[i];
        *d = (tern_cfg_kv){.line = s->line, .col = s->col};
        d->key = tern_strdup(s->key);
        d->value = tern_strdup(s->value);
        if ((s->key && !d->key) || (s->value && !d->value))
            return TERN_ERR_NOMEM;
        if (s->nitems) {
            d->items = calloc(s->nitems, sizeof *d->items);
            if (!d->items)
                return TERN_ERR_NOMEM;
            d->nitems = s->nitems;
            for (size_t j = 0; j < s->nitems; j++)
                if (s->items[j] && !(d->items[j] = tern_strdup(s->items[j])))
                    return TERN_ERR_NOMEM;
        }
    }
    return 0;
}

static void host_complete(void *host, tern_slice *slice)
{
    struct tern_plugin_host *h = host;
    h->complete(slice);
}

static int host_mem_gpu(void *host, const void *addr)
{
    struct tern_plugin_host *h = host;
    int dev = -1;
    return h->cuda && tern_cuda_pointer_device(h->cuda, addr, &dev) == 1 ? dev : -1;
}

static int host_mem_copy(void *host, void *dst, const void *src, size_t len, char *err,
                         size_t errlen)
{
    struct tern_plugin_host *h = host;
    return tern_cuda_copy(h->cuda, dst, src, len, err, errlen);
}

static void *host_pinned_alloc(void *host, int gpu, size_t len)
{
    struct tern_plugin_host *h = host;
    void *p = NULL;
    return h->cuda && tern_cuda_host_alloc(h->cuda, gpu, len, &p, NULL, 0) == 0 ? p : NULL;
}

static void host_pinned_free(void *host, void *ptr)
{
    struct tern_plugin_host *h = host;
    tern_cuda_host_free(h->cuda, ptr);
}

/* ---- the state's life ------------------------------------------------------ */

tern_plugin_host *tern_plugin_host_new(const char *name, tern_logfn log, void *log_arg,
                                       int log_level)
{
    tern_plugin_host *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    tern_strlcpy(h->name, name, sizeof h->name);
    h->log = log;
    h->log_arg = log_arg;
    h->log_level = log_level;
    return h;
}

void tern_plugin_host_clear(tern_plugin_host *h)
{
    if (h)
        host_kv_free(h);
}

void tern_plugin_host_free(tern_plugin_host *h)
{
    tern_plugin_host_clear(h);
    free(h);
}

int tern_plugin_host_setup(tern_plugin_host *h, const tern_config *cfg, size_t idx,
                           const tern_option *opts, tern_host_services *out)
{
    h->opts = opts;
    if (host_kv_copy(h, &cfg->transports[idx]) < 0)
        return TERN_ERR_NOMEM;
    tern_strlcpy(h->server_name, cfg->server_name ? cfg->server_name : "127.0.0.1:12001",
                 sizeof h->server_name);
    tern_strlcpy(h->sysfs_root, cfg->topology_sysfs_root ? cfg->topology_sysfs_root : "/sys",
                 sizeof h->sysfs_root);
    if (cfg->auth_secret_file && !h->auth &&
        tern_auth_load(cfg->auth_secret_file, &h->auth, NULL, 0) != 0)
        h->auth_failed = 1;
    *out = (tern_host_services){
        .struct_size = sizeof(tern_host_services),
        .host = h,
        .log = host_log,
        .config_get = host_config_get,
        .config_get_int = host_config_get_int,
        .config_get_list = host_config_get_list,
        .alloc = host_alloc,
        .free = free,
        .desc_set_str = tern_desc_set_str,
        .desc_set_u64 = tern_desc_set_u64,
        .desc_set_u32_array = tern_desc_set_u32_array,
        .desc_get_str = tern_desc_get_str,
        .desc_get_u64 = tern_desc_get_u64,
        .desc_get_u32_array = tern_desc_get_u32_array,
        .server_name = h->server_name,
        .io_timeout_ms = cfg->io_timeout_ms > 0 ? cfg->io_timeout_ms : 5000,
        .sysfs_root = h->sysfs_root,
        .auth_mac = host_auth_mac,
        .complete = host_complete,
        .mem_gpu = host_mem_gpu,
        .mem_copy = host_mem_copy,
        .pinned_alloc = host_pinned_alloc,
        .pinned_free = host_pinned_free,
    };
    return 0;
}

const char *tern_plugin_host_entry_value(const tern_plugin_host *h, const char *key)
{
    const tern_cfg_kv *kv = host_kv(h, key);
    return kv ? kv->value : NULL;
}

const char *tern_plugin_host_sysfs_root(const tern_plugin_host *h) { return h->sysfs_root; }

/* The plugins' threads read these without a lock: the engine sets them
 * before any of those threads can (plugin.h). */
void tern_plugin_host_set_server_name(tern_plugin_host *h, const char *server_name)
{
    tern_strlcpy(h->server_name, server_name, sizeof h->server_name);
}

void tern_plugin_host_set_completion(tern_plugin_host *h, void (*complete)(tern_slice *slice))
{
    h->complete = complete;
}

void tern_plugin_host_set_cuda(tern_plugin_host *h, tern_cuda *cuda) { h->cuda = cuda; }
