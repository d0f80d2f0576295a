/* core/config/config.h: the engine's YAML configuration (libyaml), validated:
 * its types.  The functions are declared by the header of the file that
 * implements each (config/load.h: loading and freeing; config/option.h: a
 * plugin's keys; config/values.h: value parsers; config/json.h: JSON); the
 * parts are listed in config/cfg_internal.h, the keys are one table in
 * config/schema.c.  Every error names file:line:col,
 * the key path and what was expected, e.g. "tern.yaml:7:5: transports[1].mtu:
 * expected one of 256, 512, 1024, 2048, 4096, got 9000". */
#ifndef TERN_CORE_CONFIG_H
#define TERN_CORE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "tern/transport.h"

/* One key of a transport entry other than name/path/required, kept as text
 * (lists as items) with its position, validated later against the plugin's
 * option table by tern_config_check_options(). */
typedef struct tern_cfg_kv {
    char *key;
    char *value;        /* scalar text; NULL for a list */
    char **items;       /* list items; NULL for a scalar */
    size_t nitems;
    int line, col;      /* 1-based position of the key (errors point there) */
} tern_cfg_kv;

typedef struct tern_transport_cfg {
    char *name;
    char *path;         /* explicit .so path or NULL */
    int required;       /* 0/1 */
    int optional;       /* 0/1: a missing plugin is skipped, not an error */
    int line, col;      /* position of the entry */
    tern_cfg_kv *kv;
    size_t nkv;
} tern_transport_cfg;

enum { TERN_EVICT_SIEVE = 0, TERN_EVICT_FIFO = 1 };
enum { TERN_SELECT_RANDOM = 0, TERN_SELECT_ROUND_ROBIN = 1 };
enum { TERN_HS_ADDRS_AUTO = 0, TERN_HS_ADDRS_ALL = 1, TERN_HS_ADDRS_ONE = 2 }; /* handshake_addresses */

typedef struct tern_config {
    char *origin;                 /* file name or "<embedded>" for messages */
    char *server_name;            /* "127.0.0.1:12001" */
    char *metadata;               /* "p2p", "redis://...", "etcd://..." */
    char *cluster_id;             /* "default" */
    tern_transport_cfg *transports;
    size_t ntransports;
    char **plugin_path;
    size_t nplugin_path;
    char *topology;               /* "auto" or a JSON file */
    char *topology_sysfs_root;    /* "/sys" */
    char **device_allow;          /* allow-list of device names (empty: all) */
    size_t ndevice_allow;
    int select_policy;            /* TERN_SELECT_* */
    uint64_t slice_size;          /* 65536 */
    int retries;                  /* 3 */
    int gpu_staging_buffers;      /* 16 per GPU */
    int huge_pages;               /* TERN_HUGE_* of core/memory/pages.h (0 = off) */
    int log_level;                /* TERN_LOG_* (2 = info) */
    int log_format;               /* TERN_LOG_FORMAT_* of core/base/log.h (0 = text) */
    uint64_t handshake_max_frame; /* 1 MiB */
    int connect_timeout_ms;       /* 5000 */
    int io_timeout_ms;            /* 5000 */
    uint64_t endpoint_cache;      /* 256 endpoints */
    int eviction;                 /* TERN_EVICT_* */
    char *auth_secret_file;       /* NULL: no authentication */
    int handshake_addresses;      /* TERN_HS_ADDRS_*: where the daemon answers */
    int handshake_confirm;        /* 1: a Connection must be confirmed by its sender
                                     (docs/protocol.md, Connection confirmation) */
    int stats;                    /* 1: count statistics (docs/metrics.md) */
    char *metrics_listen;         /* host:port of the Prometheus endpoint; NULL: none */
    size_t nplugin_path_env;      /* plugin_path[0..n) came from $TERN_PLUGIN_PATH
                                     (already merged: the loader needs not read it) */
    unsigned env_overrides;       /* TERN_CFG_ENV_* bits: what the environment decided */
} tern_config;

enum {
    TERN_CFG_ENV_CONFIG = 1u << 0,      /* the file was named by $TERN_CONFIG */
    TERN_CFG_ENV_LOG_LEVEL = 1u << 1,   /* log_level from $TERN_LOG_LEVEL */
    TERN_CFG_ENV_PLUGIN_PATH = 1u << 2, /* plugin_path starts with $TERN_PLUGIN_PATH */
    TERN_CFG_ENV_LOG_FORMAT = 1u << 3,  /* log_format from $TERN_LOG_FORMAT */
};

#endif
