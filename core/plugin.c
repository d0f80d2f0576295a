/* core/plugin.c: finding, opening, checking and initialising transport
 * plugins.  See plugin.h and include/tern/transport.h.
 *
 * The loader never runs plugin code before the exported data symbol passed
 * every check (magic, ABI major, struct size, name, mandatory operations)
 * and the YAML entry fitted the plugin's option table.  Every configured
 * transport ends with one recorded outcome and a message that says what
 * happened and what to check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plugin.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda.h"
#include "control/auth.h"
#include "config/cfg_internal.h"
#include "desc.h"
#include "fileio.h"
#include "util.h"

typedef void (*tern_logfn)(void *, int, const char *, ...);

/* snprintf whose truncation is intended: paths and plugin messages are cut
 * to the buffers of tern_plugin rather than refused. */
static void bounded_fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void bounded_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

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

/* ---- outcome names -------------------------------------------------------- */

static const char *const outcome_names[][2] = {
    [TERN_LOAD_OK] = {"loaded", "loaded"},
    [TERN_LOAD_NOT_FOUND] = {"not found", "not_found"},
    [TERN_LOAD_DLOPEN] = {"dlopen failed", "dlopen_failed"},
    [TERN_LOAD_NO_SYMBOL] = {"missing symbol", "missing_symbol"},
    [TERN_LOAD_BAD_MAGIC] = {"wrong magic", "wrong_magic"},
    [TERN_LOAD_ABI_MISMATCH] = {"ABI mismatch", "abi_mismatch"},
    [TERN_LOAD_TOO_SMALL] = {"struct too small", "struct_too_small"},
    [TERN_LOAD_MISSING_OP] = {"missing operation", "missing_operation"},
    [TERN_LOAD_NAME_MISMATCH] = {"name mismatch", "name_mismatch"},
    [TERN_LOAD_BAD_OPTION] = {"bad option", "bad_option"},
    [TERN_LOAD_INIT_FAILED] = {"init failed", "init_failed"},
    [TERN_LOAD_NO_DEVICE] = {"no device", "no_device"},
    [TERN_LOAD_NOT_TRIED] = {"not tried", "not_tried"},
};

#define N_OUTCOMES (sizeof(outcome_names) / sizeof(outcome_names[0]))

const char *tern_load_outcome_name(tern_load_outcome o)
{
    return (unsigned)o < N_OUTCOMES ? outcome_names[o][0] : "unknown";
}

const char *tern_load_outcome_key(tern_load_outcome o)
{
    return (unsigned)o < N_OUTCOMES ? outcome_names[o][1] : "unknown";
}

/* ---- logging ---------------------------------------------------------------- */

static const char *level_name(int level)
{
    static const char *const n[] = {"error", "warn", "info", "debug"};
    return level >= 0 && level <= TERN_LOG_DEBUG ? n[level] : "log";
}

/* Used when the caller gives no log callback: stderr, filtered by level. */
static void stderr_log(void *arg, int level, const char *fmt, ...)
{
    int max = arg ? *(const int *)arg : TERN_LOG_INFO;
    if (level > max)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tern: %s: %s\n", level_name(level), buf);
}

/* A plugin's message without its own leading "<name>: ", so that the
 * core's prefix shows the name once. */
static const char *own_text(const char *name, const char *msg)
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
    const char *text = own_text(h->name, buf);
    if (h->log)
        h->log(h->log_arg, level, "%s: %s", h->name, text);
    else
        stderr_log(&h->log_level, level, "%s: %s", h->name, text);
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

void tern_plugins_set_completion(tern_plugin_set *set, void (*complete)(tern_slice *slice))
{
    for (size_t i = 0; i < set->n; i++)
        if (set->plugins[i].hostdata)
            set->plugins[i].hostdata->complete = complete;
}

void tern_plugins_set_cuda(tern_plugin_set *set, tern_cuda *cuda)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->plugins[i].hostdata)
            set->plugins[i].hostdata->cuda = cuda;
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

static void host_setup(tern_plugin *p, const tern_config *cfg)
{
    struct tern_plugin_host *h = p->hostdata;
    tern_strlcpy(h->server_name, cfg->server_name ? cfg->server_name : "127.0.0.1:12001",
                 sizeof h->server_name);
    tern_strlcpy(h->sysfs_root, cfg->topology_sysfs_root ? cfg->topology_sysfs_root : "/sys",
                 sizeof h->sysfs_root);
    if (cfg->auth_secret_file && !h->auth &&
        tern_auth_load(cfg->auth_secret_file, &h->auth, NULL, 0) != 0)
        h->auth_failed = 1;
    p->host = (tern_host_services){
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
}

/* ---- where plugins are -------------------------------------------------------- */

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* The file holding this code: libtern.so, or the program when the core is
 * linked statically (tools, tests).  dladdr's name for the main program is
 * argv[0], so that case reads /proc/self/exe instead. */
static int own_image_dir(char *out, size_t outlen)
{
    Dl_info info;
    struct link_map *lm = NULL;
    char path[PATH_MAX];
    if (!dladdr1((void *)own_image_dir, &info, (void **)&lm, RTLD_DL_LINKMAP))
        return -1;
    if (lm && lm->l_name && lm->l_name[0]) {
        if (!realpath(lm->l_name, path))
            return -1;
    } else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0)
            return -1;
        path[n] = '\0';
    }
    char *slash = strrchr(path, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    tern_strlcpy(out, path, outlen);
    return 0;
}

/* <dir of libtern.so>/tern works in build/lib and in <prefix>/lib; a program
 * with the core linked in looks in <its dir>/../lib/tern; then the compiled-in
 * build and install directories. */
static void default_dir_resolve(char *out, size_t outlen)
{
    char self[PATH_MAX], cand[PATH_MAX + 32];
    if (own_image_dir(self, sizeof self) == 0) {
        bounded_fmt(cand, sizeof cand, "%s/tern", self);
        if (is_dir(cand))
            goto found;
        bounded_fmt(cand, sizeof cand, "%s/../lib/tern", self);
        if (is_dir(cand) && realpath(cand, self))
            tern_strlcpy(cand, self, sizeof cand);
        if (is_dir(cand))
            goto found;
    }
    tern_strlcpy(cand, is_dir(TERN_PLUGIN_BUILD_DIR) ? TERN_PLUGIN_BUILD_DIR
                                                     : TERN_PLUGIN_INSTALL_DIR,
                 sizeof cand);
found:
    tern_strlcpy(out, cand, outlen);
}

const char *tern_plugin_default_dir(void)
{
    /* Computed on every call into a thread-local buffer: no shared state,
     * and the answer may change if directories appear. */
    static _Thread_local char dir[PATH_MAX];
    default_dir_resolve(dir, sizeof dir);
    return dir;
}

/* A small list of directories without duplicates. */
typedef struct dirlist {
    char **d;
    size_t n, cap;
} dirlist;

static int dirlist_add(dirlist *l, const char *dir, size_t len)
{
    if (len == 0)
        return 0;
    for (size_t i = 0; i < l->n; i++)
        if (strlen(l->d[i]) == len && strncmp(l->d[i], dir, len) == 0)
            return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        char **nd = realloc(l->d, cap * sizeof *nd);
        if (!nd)
            return TERN_ERR_NOMEM;
        l->d = nd;
        l->cap = cap;
    }
    if (!(l->d[l->n] = strndup(dir, len)))
        return TERN_ERR_NOMEM;
    l->n++;
    return 0;
}

static void dirlist_free(dirlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->d[i]);
    free(l->d);
}

/* $TERN_PLUGIN_PATH, then plugin_path, then the default directory. */
static int search_dirs(const tern_config *cfg, dirlist *l)
{
    const char *env = getenv("TERN_PLUGIN_PATH");
    int rc = 0;
    while (env && *env && rc == 0) {
        const char *colon = strchr(env, ':');
        size_t len = colon ? (size_t)(colon - env) : strlen(env);
        rc = dirlist_add(l, env, len);
        env = colon ? colon + 1 : NULL;
    }
    for (size_t i = 0; rc == 0 && i < cfg->nplugin_path; i++)
        if (cfg->plugin_path[i])
            rc = dirlist_add(l, cfg->plugin_path[i], strlen(cfg->plugin_path[i]));
    const char *def = tern_plugin_default_dir();
    return rc ? rc : dirlist_add(l, def, strlen(def));
}

/* Append ", <s>" (or "<s>" first) to the list of tried paths, bounded. */
static void tried_add(char *buf, size_t len, const char *s)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    bounded_fmt(buf + used, len - used, "%s%s", used ? ", " : "", s);
}

/* An explicit `path` is the only candidate: the user pinned that file, so
 * falling back to another one would hide the mistake.  A relative path is
 * tried next to the configuration file first, then as given.  A directory
 * means <dir>/libtern-<name>.so. */
static int find_explicit(const tern_config *cfg, const tern_transport_cfg *tc, char *found,
                         size_t foundlen, char *tried, size_t triedlen)
{
    char cand[2][PATH_MAX];
    int ncand = 0;
    if (tc->path[0] != '/' && cfg->origin && cfg->origin[0] != '<' && strchr(cfg->origin, '/')) {
        int n = (int)(strrchr(cfg->origin, '/') - cfg->origin);
        bounded_fmt(cand[ncand++], PATH_MAX, "%.*s/%s", n, cfg->origin, tc->path);
    }
    /* dlopen searches the library path for a name without '/': avoid that. */
    bounded_fmt(cand[ncand++], PATH_MAX, "%s%s", strchr(tc->path, '/') ? "" : "./", tc->path);
    for (int i = 0; i < ncand; i++) {
        char file[PATH_MAX + 80];
        if (is_dir(cand[i]))
            bounded_fmt(file, sizeof file, "%s/libtern-%s.so", cand[i], tc->name);
        else
            tern_strlcpy(file, cand[i], sizeof file);
        tried_add(tried, triedlen, file);
        if (is_file(file)) {
            tern_strlcpy(found, file, foundlen);
            return 1;
        }
    }
    return 0;
}

/* " (did you mean 'rdma'? <dir>/libtern-rdma.so is installed)" when a
 * plugin installed in the searched directories has a name within edit
 * distance 2 of `name`; "" otherwise. */
static void did_you_mean(const dirlist *l, const char *name, char *hint, size_t hintlen)
{
    char names[64][TERN_NAME_MAX];
    size_t dirix[64];
    const char *ptrs[64];
    size_t n = 0;
    for (size_t i = 0; i < l->n && n < 64; i++) {
        DIR *d = opendir(l->d[i]);
        struct dirent *de;
        while (d && n < 64 && (de = readdir(d)) != NULL) {
            size_t len = strlen(de->d_name);
            if (len <= 11 || len - 11 >= TERN_NAME_MAX || strncmp(de->d_name, "libtern-", 8) ||
                strcmp(de->d_name + len - 3, ".so"))
                continue;
            bounded_fmt(names[n], TERN_NAME_MAX, "%.*s", (int)(len - 11), de->d_name + 8);
            dirix[n] = i;
            ptrs[n] = names[n];
            n++;
        }
        if (d)
            closedir(d);
    }
    const char *best = cfg_closest(name, ptrs, n);
    for (size_t i = 0; best && i < n; i++)
        if (ptrs[i] == best) {
            bounded_fmt(hint, hintlen, " (did you mean '%s'? %s/libtern-%s.so is installed)",
                        best, l->d[dirix[i]], best);
            return;
        }
}

/* Find the file for transports[idx]; on failure p->message lists every path. */
static int plugin_find(const tern_config *cfg, size_t idx, tern_plugin *p)
{
    const tern_transport_cfg *tc = &cfg->transports[idx];
    char tried[768] = "";
    if (tc->path && tc->path[0]) {
        if (find_explicit(cfg, tc, p->path, sizeof p->path, tried, sizeof tried))
            return 1;
        bounded_fmt(p->message, sizeof p->message,
                 "transport '%s': plugin not found at its configured path; tried: %s "
                 "(check `path` in %s)", tc->name, tried, cfg->origin ? cfg->origin : "the config");
        return 0;
    }
    dirlist l = {0};
    int rc = search_dirs(cfg, &l), hit = 0;
    for (size_t i = 0; rc == 0 && i < l.n && !hit; i++) {
        char file[PATH_MAX + 80];
        bounded_fmt(file, sizeof file, "%s/libtern-%s.so", l.d[i], tc->name);
        tried_add(tried, sizeof tried, file);
        if (is_file(file)) {
            tern_strlcpy(p->path, file, sizeof p->path);
            hit = 1;
        }
    }
    char hint[TERN_NAME_MAX + PATH_MAX + 64] = "";
    if (!hit && rc == 0)
        did_you_mean(&l, tc->name, hint, sizeof hint);
    dirlist_free(&l);
    if (!hit)
        bounded_fmt(p->message, sizeof p->message,
                 "transport '%s': libtern-%s.so not found%s; tried: %s (set `path` in the "
                 "entry, TERN_PLUGIN_PATH or plugin_path)", tc->name, tc->name, hint,
                 rc ? "(out of memory)" : tried);
    return hit;
}

/* ---- checking the exported symbol ----------------------------------------------- */

static const struct {
    const char *name;
    size_t off;
} mandatory_ops[] = {
#define OP(m) {#m, offsetof(tern_transport, m)}
    OP(init), OP(fini), OP(devices), OP(mr_register), OP(mr_deregister),
    OP(segment_describe), OP(ep_open), OP(ep_connect), OP(ep_close), OP(submit),
#undef OP
};

static int op_is_null(const tern_transport *t, size_t off)
{
    void (*fn)(void);
    memcpy(&fn, (const char *)t + off, sizeof fn);
    return fn == NULL;
}

#define FAIL(p, o, ...) (bounded_fmt((p)->message, sizeof (p)->message, __VA_ARGS__), (o))

/* Everything checked here is data: no plugin code has run yet.  symsize is
 * the ELF size of the symbol (0 when unknown). */
static tern_load_outcome check_symbol(tern_plugin *p, const tern_transport *t, size_t symsize)
{
    const char *n = p->name, *f = p->path;
    size_t head = offsetof(tern_transport, name);
    if (symsize && symsize < head)
        return FAIL(p, TERN_LOAD_TOO_SMALL, "transport '%s': %s: symbol %s is only %zu bytes, "
                    "not a tern_transport", n, f, TERN_TRANSPORT_SYMBOL, symsize);
    if (t->magic != TERN_TRANSPORT_MAGIC)
        return FAIL(p, TERN_LOAD_BAD_MAGIC, "transport '%s': %s: symbol %s has wrong magic "
                    "0x%016llx (expected 0x%016llx): not a tern transport, or corrupted", n, f,
                    TERN_TRANSPORT_SYMBOL, (unsigned long long)t->magic,
                    (unsigned long long)TERN_TRANSPORT_MAGIC);
    if (t->abi_major != TERN_TRANSPORT_ABI_MAJOR)
        return FAIL(p, TERN_LOAD_ABI_MISMATCH, "transport '%s': %s: built for transport ABI "
                    "major %u (%u.%u), this tern supports major %d: rebuild the plugin against "
                    "this tern's headers", n, f, t->abi_major, t->abi_major, t->abi_minor,
                    TERN_TRANSPORT_ABI_MAJOR);
    if (t->struct_size < TERN_TRANSPORT_V1_0_SIZE)
        return FAIL(p, TERN_LOAD_TOO_SMALL, "transport '%s': %s: struct_size %u is smaller "
                    "than the v1.0 layout (%zu bytes): the plugin is truncated or miscompiled",
                    n, f, t->struct_size, (size_t)TERN_TRANSPORT_V1_0_SIZE);
    if (symsize && symsize < t->struct_size)
        return FAIL(p, TERN_LOAD_TOO_SMALL, "transport '%s': %s: struct_size says %u bytes but "
                    "the symbol is only %zu bytes", n, f, t->struct_size, symsize);
    if (!t->name || strcmp(t->name, n) != 0)
        return FAIL(p, TERN_LOAD_NAME_MISMATCH, "transport '%s': %s: the plugin calls itself "
                    "'%.64s', not '%s': check the entry's name and path", n, f,
                    t->name ? t->name : "(null)", n);
    for (size_t i = 0; i < sizeof mandatory_ops / sizeof mandatory_ops[0]; i++)
        if (op_is_null(t, mandatory_ops[i].off))
            return FAIL(p, TERN_LOAD_MISSING_OP, "transport '%s': %s: mandatory operation "
                        "'%s' is NULL", n, f, mandatory_ops[i].name);
    /* poll is optional from ABI 1.1 (completions through host->complete);
     * ep_describe only matters to transports that handshake. */
    if (!t->poll && t->abi_minor < 1)
        return FAIL(p, TERN_LOAD_MISSING_OP, "transport '%s': %s: mandatory operation 'poll' "
                    "is NULL (a plugin may leave it out only when built for ABI 1.1 or later, "
                    "handing slices back through the host service complete())", n, f);
    if (!t->ep_describe && (t->caps & TERN_CAP_HANDSHAKE))
        return FAIL(p, TERN_LOAD_MISSING_OP, "transport '%s': %s: operation 'ep_describe' is "
                    "NULL but the plugin sets TERN_CAP_HANDSHAKE, which needs it", n, f);
    return TERN_LOAD_OK;
}

/* dlopen + dlsym + check_symbol.  On success p->dl and p->ops are set. */
static tern_load_outcome plugin_open(tern_plugin *p)
{
    char why[768];
    if (tern_file_check_regular(p->path, why, sizeof why) < 0) /* a FIFO would block dlopen */
        return FAIL(p, TERN_LOAD_DLOPEN, "transport '%s': %s", p->name, why);
    dlerror();
    void *dl = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *e = dlerror();
        return FAIL(p, TERN_LOAD_DLOPEN, "transport '%s': dlopen failed: %s", p->name,
                    e ? e : "(no dlerror text)");
    }
    dlerror();
    const tern_transport *t = dlsym(dl, TERN_TRANSPORT_SYMBOL);
    if (!t) {
        const char *e = dlerror();
        bounded_fmt(p->message, sizeof p->message, "transport '%s': %s does not export the symbol "
                 "%s: not a tern transport plugin (%s)", p->name, p->path, TERN_TRANSPORT_SYMBOL,
                 e ? e : "symbol is NULL");
        dlclose(dl);
        return TERN_LOAD_NO_SYMBOL;
    }
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    size_t symsize = 0;
    if (dladdr1((void *)t, &info, (void **)&sym, RTLD_DL_SYMENT) && sym)
        symsize = sym->st_size;
    tern_load_outcome o = check_symbol(p, t, symsize);
    if (o != TERN_LOAD_OK) {
        dlclose(dl);
        return o;
    }
    p->dl = dl;
    p->ops = t;
    return TERN_LOAD_OK;
}

/* ---- init and devices ------------------------------------------------------------- */

/* numa_node -2 asks the core to read <sysfs_root>/<sysfs_path>/numa_node. */
static int read_numa_node(const char *root, const char *rel)
{
    char path[PATH_MAX + 300];
    if (!rel[0])
        return -1;
    bounded_fmt(path, sizeof path, "%s/%s/numa_node", root, rel);
    char *text = NULL; /* under the configured sysfs root: never block on it */
    int node = -1;
    if (tern_file_read_capped(path, 32, &text, NULL, NULL, 0) == 0) {
        if (sscanf(text, "%d", &node) != 1)
            node = -1;
        free(text);
    }
    return node < -1 ? -1 : node;
}

static tern_load_outcome plugin_devices(tern_plugin *p)
{
    memset(p->devices, 0, sizeof p->devices);
    int n = p->ops->devices(p->ctx, p->devices, TERN_MAX_DEVICES);
    if (n < 0)
        return FAIL(p, TERN_LOAD_INIT_FAILED, "transport '%s': %s: devices() failed (%s)",
                    p->name, p->path, tern_strerror(n));
    if (n == 0)
        return FAIL(p, TERN_LOAD_NO_DEVICE, "transport '%s': %s: no usable device", p->name,
                    p->path);
    p->ndevices = n > TERN_MAX_DEVICES ? TERN_MAX_DEVICES : n;
    for (int i = 0; i < p->ndevices; i++) {
        tern_device_info *d = &p->devices[i];
        /* a plugin bug must not make the core read past these buffers */
        d->name[sizeof d->name - 1] = d->sysfs_path[sizeof d->sysfs_path - 1] = '\0';
        d->gid[sizeof d->gid - 1] = '\0';
        if (d->numa_node == -2)
            d->numa_node = read_numa_node(p->hostdata->sysfs_root, d->sysfs_path);
    }
    return TERN_LOAD_OK;
}

/* Once plugin code runs, the image stays mapped until exit (dlclose then
 * only drops a reference): the libraries a transport pulls in (libibverbs,
 * libfabric and their providers) keep global state and helper threads and
 * are not safe to unload; unmapping them would leak that state and could
 * leave a thread running unmapped code.  Plugins refused before init are
 * unloaded normally. */
static void pin_image(const tern_plugin *p)
{
    void *again = dlopen(p->path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE | RTLD_NOLOAD);
    if (again)
        dlclose(again);
}

/* The entry's own `slice_size` key (when the plugin declares one), else the
 * plugin's default, else the engine's. */
static uint64_t plugin_slice_size(const tern_plugin *p, const tern_config *cfg)
{
    int64_t v = 0;
    const tern_cfg_kv *kv = host_kv(p->hostdata, "slice_size");
    if (kv && kv->value && parse_int(kv->value, &v) == 0 && v > 0)
        return (uint64_t)v;
    return p->ops->default_slice_size ? p->ops->default_slice_size : cfg->slice_size;
}

static tern_load_outcome plugin_init(tern_plugin *p, const tern_config *cfg, size_t idx)
{
    static const tern_option no_options[] = {{.key = NULL, .type = TERN_OPT_END}};
    const tern_transport *t = p->ops;
    const tern_option *opts = t->options ? t->options : no_options;
    char msg[768] = "";
    if (tern_config_check_options(cfg, idx, opts, msg, sizeof msg) < 0)
        return FAIL(p, TERN_LOAD_BAD_OPTION, "transport '%s': bad option: %s", p->name, msg);
    p->hostdata->opts = opts;
    if (host_kv_copy(p->hostdata, &cfg->transports[idx]) < 0)
        return FAIL(p, TERN_LOAD_INIT_FAILED, "transport '%s': out of memory", p->name);
    host_setup(p, cfg);
    pin_image(p);
    int rc = t->init(&p->host, &p->ctx, msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    if (rc < 0) {
        int nodev = rc == TERN_ERR_NOT_FOUND;
        p->ctx = NULL;
        return FAIL(p, nodev ? TERN_LOAD_NO_DEVICE : TERN_LOAD_INIT_FAILED,
                    "transport '%s': %s: %s (%s): %s", p->name, p->path,
                    nodev ? "no usable device" : "init failed", tern_strerror(rc),
                    msg[0] ? own_text(p->name, msg) : "(the plugin gave no message)");
    }
    tern_load_outcome o = plugin_devices(p);
    if (o != TERN_LOAD_OK) {
        t->fini(p->ctx);
        p->ctx = NULL;
        return o;
    }
    p->slice_size = plugin_slice_size(p, cfg);
    bounded_fmt(p->message, sizeof p->message, "loaded %s (version %s, ABI %u.%u, %d device%s)",
             p->path, t->version ? t->version : "?", t->abi_major, t->abi_minor, p->ndevices,
             p->ndevices == 1 ? "" : "s");
    return TERN_LOAD_OK;
}

/* One transport entry, start to finish; the outcome lands in p. */
static void plugin_load_one(const tern_config *cfg, size_t idx, tern_plugin *p)
{
    if (!plugin_find(cfg, idx, p)) {
        p->outcome = TERN_LOAD_NOT_FOUND;
        return;
    }
    p->outcome = plugin_open(p);
    if (p->outcome != TERN_LOAD_OK)
        return;
    p->outcome = plugin_init(p, cfg, idx);
    if (p->outcome != TERN_LOAD_OK) {
        dlclose(p->dl);
        p->dl = NULL;
        p->ops = NULL;
        host_kv_free(p->hostdata);
    }
}

/* ---- the set --------------------------------------------------------------------- */

static int set_alloc(const tern_config *cfg, tern_logfn log, void *log_arg,
                     tern_plugin_set *set)
{
    set->plugins = calloc(cfg->ntransports ? cfg->ntransports : 1, sizeof *set->plugins);
    if (!set->plugins)
        return TERN_ERR_NOMEM;
    set->n = cfg->ntransports;
    for (size_t i = 0; i < set->n; i++) {
        tern_plugin *p = &set->plugins[i];
        const tern_transport_cfg *tc = &cfg->transports[i];
        tern_strlcpy(p->name, tc->name ? tc->name : "", sizeof p->name);
        p->cfg_index = i;
        p->required = tc->required;
        p->optional = tc->optional;
        p->outcome = TERN_LOAD_NOT_TRIED;
        p->hostdata = calloc(1, sizeof *p->hostdata);
        if (!p->hostdata)
            return TERN_ERR_NOMEM;
        tern_strlcpy(p->hostdata->name, p->name, sizeof p->hostdata->name);
        p->hostdata->log = log;
        p->hostdata->log_arg = log_arg;
        p->hostdata->log_level = cfg->log_level;
    }
    return 0;
}

/* "tcp: not found; rdma: init failed" for the nothing-loaded error. */
static void summary(const tern_plugin_set *set, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t i = 0; i < set->n; i++) {
        size_t used = strlen(buf);
        if (used + 1 >= len)
            break;
        bounded_fmt(buf + used, len - used, "%s%s", used ? "\n  " : "  ", set->plugins[i].message);
    }
}

int tern_plugins_load(const tern_config *cfg, void (*log)(void *, int, const char *, ...),
                      void *log_arg, tern_plugin_set *set, char *err, size_t errlen)
{
    if (!cfg || !set)
        return tern_errf(err, errlen, TERN_ERR_INVAL, "tern_plugins_load: no %s",
                         cfg ? "plugin set" : "configuration");
    *set = (tern_plugin_set){0};
    /* the plugins' hosts keep the caller's callback (NULL: their own stderr
     * fallback); the loader's own messages may use &level, local to this call */
    if (set_alloc(cfg, log, log_arg, set) < 0) {
        tern_plugins_unload(set);
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "loading transports: out of memory");
    }
    int level = cfg->log_level;
    if (!log) {
        log = stderr_log;
        log_arg = &level;
    }
    size_t loaded = 0;
    for (size_t i = 0; i < set->n; i++) {
        tern_plugin *p = &set->plugins[i];
        const char *name = cfg->transports[i].name;
        if (!name || !name[0] || strchr(name, '/') || strlen(name) >= TERN_NAME_MAX) {
            /* the configuration loader refuses these; never build paths from them */
            p->outcome = TERN_LOAD_NOT_FOUND;
            bounded_fmt(p->message, sizeof p->message, "transports[%zu]: invalid name '%.64s'", i,
                     name ? name : "");
        } else {
            plugin_load_one(cfg, i, p);
        }
        if (p->outcome == TERN_LOAD_OK) {
            log(log_arg, TERN_LOG_INFO, "transport '%s' %s", p->name, p->message);
            loaded++;
            continue;
        }
        /* A YAML mistake is the user's to fix, required or not: never let it
         * silently drop a transport.  A plugin that does not exist (a
         * misspelled name) is one too, unless the entry says `optional`
         * (docs/configuration.md, Transports). */
        int missing = p->outcome == TERN_LOAD_NOT_FOUND && !p->optional;
        if (p->required || p->outcome == TERN_LOAD_BAD_OPTION || missing) {
            for (size_t j = i + 1; j < set->n; j++)
                bounded_fmt(set->plugins[j].message, sizeof set->plugins[j].message,
                         "transport '%s': not tried: %s transport '%s' failed",
                         set->plugins[j].name, p->required ? "required" : "the earlier",
                         p->name);
            if (p->outcome == TERN_LOAD_BAD_OPTION)
                return tern_errf(err, errlen, TERN_ERR_CONFIG, "%s", p->message);
            if (missing && !p->required)
                return tern_errf(err, errlen, TERN_ERR_PLUGIN,
                                 "%s; a transport whose plugin is not installed is an error "
                                 "unless its entry says `optional: true`", p->message);
            return tern_errf(err, errlen, TERN_ERR_PLUGIN, "required %s", p->message);
        }
        log(log_arg, TERN_LOG_WARN, "%s; skipped (optional)", p->message);
    }
    if (loaded == 0) {
        char sum[2048];
        summary(set, sum, sizeof sum);
        return tern_errf(err, errlen, TERN_ERR_PLUGIN, "no transport could be loaded (%s%s):\n%s",
                         cfg->origin ? "configuration " : "",
                         cfg->origin ? cfg->origin : "", set->n ? sum : "  the list is empty");
    }
    return 0;
}

void tern_plugins_unload(tern_plugin_set *set)
{
    if (!set || !set->plugins)
        return;
    /* reverse order: a later transport never outlives an earlier one */
    for (size_t i = set->n; i-- > 0;) {
        tern_plugin *p = &set->plugins[i];
        if (p->ops && p->ctx)
            p->ops->fini(p->ctx);
        if (p->dl)
            dlclose(p->dl);
        if (p->hostdata) {
            host_kv_free(p->hostdata);
            free(p->hostdata);
        }
    }
    free(set->plugins);
    *set = (tern_plugin_set){0};
}

tern_plugin *tern_plugins_find(tern_plugin_set *set, const char *name)
{
    for (size_t i = 0; set && name && i < set->n; i++)
        if (set->plugins[i].outcome == TERN_LOAD_OK && strcmp(set->plugins[i].name, name) == 0)
            return &set->plugins[i];
    return NULL;
}

void tern_plugins_set_server_name(tern_plugin_set *set, const char *server_name)
{
    for (size_t i = 0; set && server_name && i < set->n; i++)
        if (set->plugins[i].hostdata)
            tern_strlcpy(set->plugins[i].hostdata->server_name, server_name,
                         sizeof set->plugins[i].hostdata->server_name);
}
