/* core/plugin/plugin.h: the configuration's transports, loaded.  Each entry goes
 * through the one plugin loader (plugin_load.h: search, checks, the core's
 * copy of the table with defaults), then its options are checked, init()
 * and devices() run, and its outcome is recorded for tern-info and for
 * error messages (docs/plugins.md, "How tern loads a plugin"). */
#ifndef TERN_CORE_PLUGIN_H
#define TERN_CORE_PLUGIN_H

#include <stddef.h>

#include "config/config.h"
#include "plugin/plugin_host.h"
#include "plugin/plugin_load.h"
#include "tern/transport.h"

/* One transport the configuration named, loaded or not. */
typedef struct tern_plugin {
    char name[TERN_NAME_MAX];
    size_t cfg_index;             /* index in cfg->transports */
    int required;
    int optional;                 /* a missing plugin is skipped, not an error */
    tern_load_outcome outcome;
    char path[1024];              /* the file that was opened ("" if none) */
    char message[1024];           /* what happened, including every path tried */
    void *dl;                     /* dlopen handle */
    /* The core's copy of the plugin's table: every operation is set (the
     * ones the plugin left out hold the core's defaults, plugin_kinds.c),
     * so callers never test for NULL.  NULL unless loaded. */
    const tern_transport *ops;
    tern_transport table;         /* what ops points at */
    int polls;                    /* slices come back through poll() (ABI 1.0
                                     style): the core runs a poll thread */
    void *ctx;                    /* plugin context from init() */
    tern_host_services host;      /* what we handed to init() */
    tern_plugin_host *hostdata;   /* core-side state behind host.host */
    tern_device_info devices[TERN_MAX_DEVICES];
    int ndevices;
    uint64_t slice_size;          /* per-transport slice size */
} tern_plugin;

typedef struct tern_plugin_set {
    tern_plugin *plugins;         /* in configuration order */
    size_t n;
} tern_plugin_set;

/* Load every transport of cfg.  Fails (TERN_ERR_PLUGIN, reason in err) only
 * when a required transport failed or nothing loaded; the outcome of every
 * entry is in *set either way (free it with tern_plugins_unload). */
int tern_plugins_load(const tern_config *cfg, void (*log)(void *, int, const char *, ...),
                      void *log_arg, tern_plugin_set *set, char *err, size_t errlen);
void tern_plugins_unload(tern_plugin_set *set);

/* The loaded plugin called name, or NULL. */
tern_plugin *tern_plugins_find(tern_plugin_set *set, const char *name);

/* Replace the server name the host services show plugins (e.g. once the
 * engine resolved "127.0.0.1:0" to its port).  Call before the plugins'
 * threads read it: the text is copied in place, not swapped atomically. */
void tern_plugins_set_server_name(tern_plugin_set *set, const char *server_name);

/* Where the host service complete() delivers finished slices.  Set before
 * any slice is submitted; plugins' threads read it without a lock. */
void tern_plugins_set_completion(tern_plugin_set *set, void (*complete)(tern_slice *slice));

/* The engine's CUDA driver behind the host services mem_gpu and mem_copy
 * (docs/gpu.md).  Set before any memory is registered. */
struct tern_cuda;
void tern_plugins_set_cuda(tern_plugin_set *set, struct tern_cuda *cuda);

#endif
