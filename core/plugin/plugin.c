/* core/plugin/plugin.c: the configuration's transports, from entry to loaded
 * plugin (see plugin.h).  Finding, opening and checking the file is the
 * shared loader's (plugin_load.c); this file checks the entry's options,
 * runs init() and devices(), and decides what a failure means for the
 * rest: every configured transport ends with one recorded outcome and a
 * message that says what happened and what to check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "plugin/plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/option.h"
#include "config/values.h"
#include "base/fileio.h"
#include "base/util.h"

#define FAIL(p, o, ...) (tern_plugin_fmt((p)->message, sizeof (p)->message, __VA_ARGS__), (o))

/* ---- init and devices ------------------------------------------------------------- */

/* numa_node -2 asks the core to read <sysfs_root>/<sysfs_path>/numa_node. */
static int read_numa_node(const char *root, const char *rel)
{
    char path[PATH_MAX + 300];
    if (!rel[0])
        return -1;
    tern_plugin_fmt(path, sizeof path, "%s/%s/numa_node", root, rel);
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
    /* Several devices are the topology's to choose among only for a
     * transport that says it takes any of them (<tern/transport.h>). */
    if (p->ndevices > 1 && !(p->ops->caps & TERN_CAP_MULTI_DEVICE))
        p->ndevices = 1;
    for (int i = 0; i < p->ndevices; i++) {
        tern_device_info *d = &p->devices[i];
        /* a plugin bug must not make the core read past these buffers */
        d->name[sizeof d->name - 1] = d->sysfs_path[sizeof d->sysfs_path - 1] = '\0';
        d->gid[sizeof d->gid - 1] = '\0';
        if (d->numa_node == -2)
            d->numa_node = read_numa_node(tern_plugin_host_sysfs_root(p->hostdata), d->sysfs_path);
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
    const char *own = tern_plugin_host_entry_value(p->hostdata, "slice_size");
    if (own && tern_config_parse_int(own, &v) == 0 && v > 0)
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
    if (tern_plugin_host_setup(p->hostdata, cfg, idx, opts, &p->host) < 0)
        return FAIL(p, TERN_LOAD_INIT_FAILED, "transport '%s': out of memory", p->name);
    pin_image(p);
    int rc = t->init(&p->host, &p->ctx, msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    if (rc < 0) {
        int nodev = rc == TERN_ERR_NOT_FOUND;
        p->ctx = NULL;
        return FAIL(p, nodev ? TERN_LOAD_NO_DEVICE : TERN_LOAD_INIT_FAILED,
                    "transport '%s': %s: %s (%s): %s", p->name, p->path,
                    nodev ? "no usable device" : "init failed", tern_strerror(rc),
                    msg[0] ? tern_plugin_own_text(p->name, msg) : "(the plugin gave no message)");
    }
    tern_load_outcome o = plugin_devices(p);
    if (o != TERN_LOAD_OK) {
        t->fini(p->ctx);
        p->ctx = NULL;
        return o;
    }
    p->slice_size = plugin_slice_size(p, cfg);
    tern_plugin_fmt(p->message, sizeof p->message, "loaded %s (version %s, ABI %u.%u, %d device%s)",
             p->path, t->version ? t->version : "?", t->abi_major, t->abi_minor, p->ndevices,
             p->ndevices == 1 ? "" : "s");
    return TERN_LOAD_OK;
}

/* Find, open and check the file (the shared loader), then init. */
static tern_load_outcome plugin_open(const tern_config *cfg, size_t idx, tern_plugin *p)
{
    char label[TERN_NAME_MAX + 16];
    tern_plugin_fmt(label, sizeof label, "transport '%s'", p->name);
    tern_plugin_ref ref = {.kind = &tern_transport_kind, .name = p->name, .label = label,
                           .entry_path = cfg->transports[idx].path, .cfg = cfg};
    tern_load_outcome o = tern_plugin_find_file(&ref, p->path, sizeof p->path, p->message,
                                                sizeof p->message);
    const void *exported = NULL;
    if (o == TERN_LOAD_OK)
        o = tern_plugin_open_file(&ref, p->path, &p->table, &p->dl, &exported, p->message,
                                  sizeof p->message);
    if (o != TERN_LOAD_OK)
        return o;
    const tern_transport *own = exported;
    p->polls = TERN_HAS_MEMBER(own->struct_size, tern_transport, poll) && own->poll != NULL;
    p->ops = &p->table;
    return TERN_LOAD_OK;
}

/* One transport entry, start to finish; the outcome lands in p. */
static void plugin_load_one(const tern_config *cfg, size_t idx, tern_plugin *p)
{
    p->outcome = plugin_open(cfg, idx, p);
    if (p->outcome != TERN_LOAD_OK)
        return;
    p->outcome = plugin_init(p, cfg, idx);
    if (p->outcome != TERN_LOAD_OK) {
        dlclose(p->dl);
        p->dl = NULL;
        p->ops = NULL;
        tern_plugin_host_clear(p->hostdata);
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
        p->hostdata = tern_plugin_host_new(p->name, log, log_arg, cfg->log_level);
        if (!p->hostdata)
            return TERN_ERR_NOMEM;
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
        tern_plugin_fmt(buf + used, len - used, "%s%s", used ? "\n  " : "  ", set->plugins[i].message);
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
        log = tern_plugin_stderr_log;
        log_arg = &level;
    }
    size_t loaded = 0;
    for (size_t i = 0; i < set->n; i++) {
        tern_plugin *p = &set->plugins[i];
        const char *name = cfg->transports[i].name;
        if (!name || !name[0] || strchr(name, '/') || strlen(name) >= TERN_NAME_MAX) {
            /* the configuration loader refuses these; never build paths from them */
            p->outcome = TERN_LOAD_NOT_FOUND;
            tern_plugin_fmt(p->message, sizeof p->message, "transports[%zu]: invalid name '%.64s'", i,
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
                tern_plugin_fmt(set->plugins[j].message, sizeof set->plugins[j].message,
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
        tern_plugin_host_free(p->hostdata);
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
            tern_plugin_host_set_server_name(set->plugins[i].hostdata, server_name);
}

void tern_plugins_set_completion(tern_plugin_set *set, void (*complete)(tern_slice *slice))
{
    for (size_t i = 0; set && i < set->n; i++)
        if (set->plugins[i].hostdata)
            tern_plugin_host_set_completion(set->plugins[i].hostdata, complete);
}

void tern_plugins_set_cuda(tern_plugin_set *set, struct tern_cuda *cuda)
{
    for (size_t i = 0; set && i < set->n; i++)
        if (set->plugins[i].hostdata)
            tern_plugin_host_set_cuda(set->plugins[i].hostdata, cuda);
}
