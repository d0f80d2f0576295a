/* core/plugin/plugin_host.h: the host services a transport plugin gets from the
 * core (tern_host_services in include/tern/transport.h), and the core-side
 * state behind them: private copies of the transport's YAML keys, the
 * server name, the shared secret, the completion entry point and the CUDA
 * driver, so the configuration can be freed once the plugins are loaded. */
#ifndef TERN_CORE_PLUGIN_HOST_H
#define TERN_CORE_PLUGIN_HOST_H

#include <stddef.h>

#include "config/config.h"
#include "tern/transport.h"

typedef void (*tern_logfn)(void *arg, int level, const char *fmt, ...);

typedef struct tern_plugin_host tern_plugin_host;
struct tern_cuda;

/* The state for the transport called name; log NULL means stderr, filtered
 * by log_level. */
tern_plugin_host *tern_plugin_host_new(const char *name, tern_logfn log, void *log_arg,
                                       int log_level);
void tern_plugin_host_free(tern_plugin_host *h);

/* Copy transports[idx]'s keys (already checked against opts, whose
 * defaults config_get answers) and the engine's settings; fill *out.
 * TERN_ERR_NOMEM on failure. */
int tern_plugin_host_setup(tern_plugin_host *h, const tern_config *cfg, size_t idx,
                           const tern_option *opts, tern_host_services *out);
/* Drop what setup copied (after a failed init). */
void tern_plugin_host_clear(tern_plugin_host *h);

/* The entry's own value of key (no default), NULL when the entry has none. */
const char *tern_plugin_host_entry_value(const tern_plugin_host *h, const char *key);
const char *tern_plugin_host_sysfs_root(const tern_plugin_host *h);

/* What the engine decides after loading (see plugin.h, tern_plugins_set_*). */
void tern_plugin_host_set_server_name(tern_plugin_host *h, const char *server_name);
void tern_plugin_host_set_completion(tern_plugin_host *h, void (*complete)(tern_slice *slice));
void tern_plugin_host_set_cuda(tern_plugin_host *h, struct tern_cuda *cuda);

/* The log used when the caller gives no callback: stderr, with arg
 * pointing at the highest level shown (NULL: info). */
void tern_plugin_stderr_log(void *arg, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A plugin's message without its own leading "<name>: ", so that the
 * core's prefix shows the name once. */
const char *tern_plugin_own_text(const char *name, const char *msg);

#endif
