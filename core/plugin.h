/* core/plugin.h: finding, opening and checking transport plugins.
 * Search order: the entry's `path`, $TERN_PLUGIN_PATH,
 * `plugin_path`, the build or install plugin directory.  Each candidate's
 * outcome is recorded for tern-info and for error messages. */
#ifndef TERN_CORE_PLUGIN_H
#define TERN_CORE_PLUGIN_H

#include <stddef.h>

#include "config.h"
#include "tern/transport.h"

typedef enum tern_load_outcome {
    TERN_LOAD_OK = 0,
    TERN_LOAD_NOT_FOUND,      /* no file in any searched directory */
    TERN_LOAD_DLOPEN,         /* dlopen failed: dlerror() text */
    TERN_LOAD_NO_SYMBOL,      /* tern_transport_v1 missing */
    TERN_LOAD_BAD_MAGIC,
    TERN_LOAD_ABI_MISMATCH,   /* abi_major differs */
    TERN_LOAD_TOO_SMALL,      /* struct_size below the v1.0 layout */
    TERN_LOAD_MISSING_OP,     /* a mandatory operation is NULL */
    TERN_LOAD_NAME_MISMATCH,  /* the symbol's name differs from the entry's */
    TERN_LOAD_BAD_OPTION,     /* the YAML entry does not fit the option table */
    TERN_LOAD_INIT_FAILED,    /* init() returned an error: plugin's message */
    TERN_LOAD_NO_DEVICE,      /* init() said TERN_ERR_NOT_FOUND / no devices */
    TERN_LOAD_NOT_TRIED,      /* not attempted: an earlier required transport failed */
} tern_load_outcome;

const char *tern_load_outcome_name(tern_load_outcome o); /* "loaded", "not found", ... */

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
    const tern_transport *ops;    /* NULL unless loaded */
    void *ctx;                    /* plugin context from init() */
    tern_host_services host;      /* what we handed to init() */
    struct tern_plugin_host *hostdata; /* core-side state behind host.host */
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

/* The in-tree / installed plugin directory compiled into the library. */
const char *tern_plugin_default_dir(void);


/* ---- appended by the loader -------------------------------------------- */

/* Stable machine key of an outcome for JSON ("loaded", "not_found", ...). */
const char *tern_load_outcome_key(tern_load_outcome o);

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

/* Optional operations: a member the plugin's struct_size does not cover, or
 * NULL, means "not supported" (the core then answers TERN_ERR_NOT_SUPPORTED). */
#define TERN_PLUGIN_HAS_OP(p, member)                                              \
    ((p) != NULL && (p)->ops != NULL &&                                            \
     TERN_HAS_MEMBER((p)->ops->struct_size, tern_transport, member) &&             \
     (p)->ops->member != NULL)

static inline int tern_plugin_has_ep_reset(const tern_plugin *p)
{
    return TERN_PLUGIN_HAS_OP(p, ep_reset);
}

static inline int tern_plugin_has_query(const tern_plugin *p)
{
    return TERN_PLUGIN_HAS_OP(p, query);
}

#endif
