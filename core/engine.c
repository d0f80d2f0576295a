/* core/engine.c: an engine is built from its objects and torn down in
 * reverse; the public calls on memory and segments are forwarded to them
 * here.  This file only composes: each object owns its state, lock and
 * file (see core/engine/engine_state.h and docs/architecture.md).
 *
 * Creation order: config -> transports (plugins) -> a topology, endpoint
 * store and address blob per loaded transport -> metadata backend ->
 * handshake daemon (its real port rewrites server_name when it was 0) ->
 * data path workers -> the first published descriptor -> the metrics
 * endpoint (when configured).  Any failure tears
 * down what was built, in reverse, and returns NULL with the reason. */
#include "engine.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer/addrbook.h"
#include "memory/allocs.h"
#include "control/auth.h"
#include "datapath/complete.h"
#include "datapath/dispatch.h"
#include "engine/engine_error.h"
#include "engine_handler.h"
#include "base/log.h"
#include "obs/metrics.h"
#include "engine/notify.h"
#include "engine/peer_check.h"
#include "base/util.h"
#include "config/load.h"

TERN_EXPORT const char *tern_engine_server_name(const tern_engine *e)
{
    return e ? e->server_name : "";
}

/* ---- construction --------------------------------------------------------- */

static tern_engine *engine_alloc(void)
{
    tern_engine *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    if (tern_engine_error_init(e) != 0) {
        free(e);
        return NULL;
    }
    e->cuda = tern_cuda_create();
    e->allocs = tern_allocs_create();
    if (!e->cuda || !e->allocs) {
        tern_cuda_destroy(e->cuda);
        tern_allocs_destroy(e->allocs);
        tern_engine_error_fini(e);
        free(e);
        return NULL;
    }
    tern_logger_init(&e->log, TERN_LOG_INFO, TERN_LOG_FORMAT_TEXT, NULL, NULL, NULL);
    tern_gate_init(&e->gate);
    tern_memory_init(&e->mem, e->cuda);
    tern_segments_init(&e->segs);
    e->segs.opened = tern_peer_check_opened; /* stale passive endpoints (peer_check.h) */
    e->notes = tern_notes_create(e);
    if (!e->notes) {
        tern_logger_fini(&e->log);
        tern_gate_fini(&e->gate);
        tern_cuda_destroy(e->cuda);
        tern_allocs_destroy(e->allocs);
        tern_engine_error_fini(e);
        free(e);
        return NULL;
    }
    return e;
}

static int engine_load_transports(tern_engine *e, char *err, size_t errlen)
{
    int rc = tern_plugins_load(e->cfg, tern_log_cb, &e->log, &e->plugins, err, errlen);
    if (rc)
        return rc;
    tern_plugins_set_completion(&e->plugins, tern_slice_complete);
    tern_plugins_set_cuda(&e->plugins, e->cuda);
    for (size_t i = 0; i < e->plugins.n; i++) {
        tern_plugin *p = &e->plugins.plugins[i];
        if (p->outcome != TERN_LOAD_OK || !p->ops)
            continue;
        if (e->nxports == TERN_DESC_MAX_TRANSPORTS)
            return tern_errf(err, errlen, TERN_ERR_CONFIG, "more than %d transports loaded",
                             TERN_DESC_MAX_TRANSPORTS);
        tern_xport *x = &e->xports[e->nxports];
        x->log = &e->log;
        tern_stats_set_transport(e->stats, (int)e->nxports, p->name);
        rc = tern_xport_init(x, e, (int)e->nxports, e->cfg, p, err, errlen);
        e->nxports++;
        if (rc)
            return rc;
    }
    if (!e->nxports)
        return tern_errf(err, errlen, TERN_ERR_PLUGIN, "no transport loaded");
    return 0;
}

/* The daemon logs with the engine as its argument. */
static void engine_hs_log(void *arg, int level, const char *fmt, ...)
{
    const tern_engine *e = arg;
    va_list ap;
    va_start(ap, fmt);
    tern_logv(&e->log, level, fmt, ap);
    va_end(ap);
}

/* Start the handshake daemon on server_name's host and port; port 0 is
 * resolved and written back into server_name. */
static int engine_start_daemon(tern_engine *e, char *err, size_t errlen)
{
    char host[256];
    uint16_t port = 0;
    int rc = tern_split_host_port(e->cfg->server_name, host, sizeof host, &port);
    if (rc)
        return tern_errf(err, errlen, TERN_ERR_CONFIG,
                         "server_name '%s': expected host:port", e->cfg->server_name);
    tern_hs_options o = {
        .bind_host = host, .port = port, .max_frame = e->cfg->handshake_max_frame,
        .io_timeout_ms = e->cfg->io_timeout_ms, .max_connections = 1024,
        .handler = tern_engine_hs_handler, .arg = e, .auth = e->auth, .log = engine_hs_log,
        .inline_types = 1u << TERN_HS_METADATA, /* a copy of the descriptor, under a short lock */
        /* reachable while any NIC is: the descriptor lists the others */
        .every_address = e->cfg->handshake_addresses == TERN_HS_ADDRS_ALL ||
                         (e->cfg->handshake_addresses == TERN_HS_ADDRS_AUTO && port == 0)};
    rc = tern_hs_server_start(&o, &e->hs, err, errlen);
    if (rc)
        return rc;
    port = tern_hs_server_port(e->hs);
    snprintf(e->server_name, sizeof e->server_name, strchr(host, ':') ? "[%s]:%u" : "%s:%u",
             host, (unsigned)port);
    tern_plugins_set_server_name(&e->plugins, e->server_name);
    tern_logger_set_name(&e->log, e->server_name);
    return 0;
}

/* metrics_listen: the Prometheus endpoint over the engine's counters. */
static int engine_start_metrics(tern_engine *e, char *err, size_t errlen)
{
    if (!e->cfg->metrics_listen)
        return 0;
    int rc = tern_metrics_start(e->cfg->metrics_listen, e->stats, e->server_name, &e->metrics,
                                err, errlen);
    if (!rc)
        tern_log(&e->log, TERN_LOG_INFO, "metrics at http://%s/metrics",
                 tern_metrics_address(e->metrics));
    return rc;
}

static int engine_build(tern_engine *e, char *err, size_t errlen)
{
    tern_strlcpy(e->server_name, e->cfg->server_name, sizeof e->server_name);
    e->stats = tern_stats_create(e->cfg->stats);
    if (!e->stats)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory for the statistics");
    e->segs.stats = e->stats;
    /* The shared secret first: a bad auth_secret_file stops the engine. */
    int rc = e->cfg->auth_secret_file
                 ? tern_auth_load(e->cfg->auth_secret_file, &e->auth, err, errlen) : 0;
    if (!rc)
        rc = engine_load_transports(e, err, errlen);
    if (!rc)
        rc = tern_metadata_open(e->cfg, &e->md, err, errlen);
    if (!rc)
        tern_metadata_set_auth(e->md, e->auth);
    if (!rc && !(e->book = tern_addrbook_new()))
        rc = tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory for the address book");
    if (!rc)
        tern_metadata_set_addrbook(e->md, e->book);
    if (!rc)
        rc = engine_start_daemon(e, err, errlen);
    if (!rc) {
        tern_memory_bind(&e->mem, e->xports, e->nxports, e->md, e->server_name);
        e->mem.n_hs_addrs = tern_hs_server_addrs(e->hs, e->mem.hs_addrs, TERN_HS_MAX_LISTEN);
        e->mem.sysfs_root = e->cfg->topology_sysfs_root;
        tern_segments_bind(&e->segs, e->xports, e->nxports, e->md, e->cfg, &e->log);
        tern_segments_set_auth(&e->segs, e->auth);
        rc = tern_dp_start(e, err, errlen);
    }
    if (!rc)
        rc = tern_memory_publish(&e->mem, err, errlen);
    if (!rc)
        rc = engine_start_metrics(e, err, errlen);
    return rc;
}

/* The hook is in place before the first line (plugin loading logs). */
static tern_engine *engine_create(tern_config *cfg, int rc, tern_log_hook hook, void *user,
                                  char *err, size_t errlen)
{
    if (rc) {
        tern_config_free(cfg);
        return NULL;
    }
    tern_engine *e = engine_alloc();
    if (!e) {
        tern_config_free(cfg);
        tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    e->cfg = cfg;
    e->log.level = cfg->log_level; /* no other thread yet: plain stores */
    e->log.format = cfg->log_format;
    e->log.hook = hook;
    e->log.user = user;
    tern_logger_set_name(&e->log, cfg->server_name);
    char msg[TERN_ERRMSG_MAX] = "";
    if (engine_build(e, msg, sizeof msg) != 0) {
        tern_errf(err, errlen, -1, "%s", msg[0] ? msg : "engine creation failed");
        tern_engine_destroy(e);
        return NULL;
    }
    tern_log(&e->log, TERN_LOG_INFO, "engine %s up: %zu transport(s), metadata %s",
             e->server_name, e->nxports, tern_metadata_backend(e->md));
    return e;
}

TERN_EXPORT tern_engine *tern_engine_create(const char *path, char *err, size_t errlen)
{
    tern_config *cfg = NULL;
    int rc = tern_config_load_file(path, &cfg, err, errlen);
    return engine_create(cfg, rc, NULL, NULL, err, errlen);
}

TERN_EXPORT tern_engine *tern_engine_create_as(const char *path, const char *server_name,
                                               char *err, size_t errlen)
{
    tern_config *cfg = NULL;
    int rc = tern_config_load_file(path, &cfg, err, errlen);
    if (rc == 0 && server_name)
        rc = tern_config_set_server_name(cfg, server_name, err, errlen);
    return engine_create(cfg, rc, NULL, NULL, err, errlen);
}

TERN_EXPORT tern_engine *tern_engine_create_from_yaml(const char *yaml, const char *origin,
                                                      char *err, size_t errlen)
{
    tern_config *cfg = NULL;
    if (!yaml) {
        tern_errf(err, errlen, TERN_ERR_INVAL, "tern_engine_create_from_yaml: yaml is NULL");
        return NULL;
    }
    int rc = tern_config_load_yaml(yaml, origin ? origin : "<yaml>", &cfg, err, errlen);
    return engine_create(cfg, rc, NULL, NULL, err, errlen);
}

/* Only the fields inside options->size are read: a caller built against an
 * older header passes a smaller struct. */
#define OPT(o, field) \
    ((o)->size >= offsetof(tern_engine_options, field) + sizeof (o)->field ? (o)->field : 0)

TERN_EXPORT tern_engine *tern_engine_create_with(const tern_engine_options *o, char *err,
                                                 size_t errlen)
{
    if (!o || o->size < offsetof(tern_engine_options, config_path) + sizeof o->config_path) {
        tern_errf(err, errlen, TERN_ERR_INVAL, "tern_engine_create_with: %s",
                  o ? "options->size is too small: set it to sizeof(tern_engine_options)"
                    : "options is NULL");
        return NULL;
    }
    const char *yaml = OPT(o, config_yaml), *origin = OPT(o, origin);
    const char *name = OPT(o, server_name);
    tern_config *cfg = NULL;
    int rc = yaml ? tern_config_load_yaml(yaml, origin ? origin : "<yaml>", &cfg, err, errlen)
                  : tern_config_load_file(OPT(o, config_path), &cfg, err, errlen);
    if (rc == 0 && name)
        rc = tern_config_set_server_name(cfg, name, err, errlen);
    return engine_create(cfg, rc, OPT(o, log_hook), OPT(o, log_user), err, errlen);
}

/* ---- destruction ------------------------------------------------------------ */

static void engine_unpublish(tern_engine *e)
{
    if (!e->md || !tern_memory_published(&e->mem))
        return;
    char msg[512];
    if (tern_metadata_unpublish(e->md, e->server_name, msg, sizeof msg) != 0)
        tern_log(&e->log, TERN_LOG_WARN, "unpublish %s: %s", e->server_name, msg);
}

TERN_EXPORT int tern_engine_close(tern_engine *e)
{
    if (!e)
        return TERN_ERR_INVAL;
    tern_gate_close(&e->gate); /* wakes tern_notify_recv_wait, tern_batch_wait... */
    return 0;
}

TERN_EXPORT void tern_engine_destroy(tern_engine *e)
{
    if (!e)
        return;
    tern_gate_close(&e->gate); /* nobody is blocked in the engine from here on */
    atomic_store(&e->stopping, 1);
    tern_metrics_stop(e->metrics); /* no scrape reads the counters after this */
    e->metrics = NULL;
    if (e->hs)
        tern_hs_server_stop(e->hs); /* no handler runs after this */
    tern_dp_stop(e);                /* no worker, no poller */
    for (size_t i = 0; i < e->nxports; i++)
        tern_xport_fini(&e->xports[i]); /* closes endpoints: late completions fail */
    tern_dp_free(e);
    engine_unpublish(e); /* a clean shutdown removes our key */
    tern_memory_fini(&e->mem); /* deregisters from every transport */
    tern_allocs_destroy(e->allocs); /* what the application did not free */
    if (e->md)
        tern_metadata_close(e->md);
    tern_segments_fini(&e->segs);
    tern_notes_free(e->notes);
    tern_plugins_unload(&e->plugins);
    tern_config_free(e->cfg);
    tern_auth_free(e->auth);
    tern_addrbook_free(e->book);
    tern_cuda_destroy(e->cuda);
    tern_engine_error_fini(e);
    tern_logger_fini(&e->log);
    tern_gate_fini(&e->gate);
    tern_stats_free(e->stats);
    free(e);
}

/* ---- statistics: stats.c counts, the engine names the sets ---------------- */

TERN_EXPORT int tern_engine_stats(tern_engine *e, tern_stats_fn fn, void *arg)
{
    if (!e || !fn)
        return TERN_ERR_INVAL;
    return tern_stats_each(e->stats, e->server_name, fn, arg);
}

TERN_EXPORT double tern_stats_bucket_le(int k)
{
    if (k < 0 || k >= TERN_STATS_BUCKETS - 1)
        return INFINITY;
    return (double)(1ull << k) * 1e-6;
}

/* ---- memory and segments: forwarded to their objects ------------------------- */

TERN_EXPORT int tern_register_memory(tern_engine *e, void *addr, size_t len,
                                     const char *location)
{
    if (!e)
        return TERN_ERR_INVAL;
    return tern_register_memory_named(e, addr, len, location, NULL); /* memory_api.c */
}

TERN_EXPORT int tern_unregister_memory(tern_engine *e, void *addr)
{
    if (!e)
        return TERN_ERR_INVAL;
    char msg[TERN_ERRMSG_MAX] = "";
    int rc = tern_memory_unregister(&e->mem, addr, msg, sizeof msg);
    return rc ? tern_engine_fail(e, rc, "%s", msg) : 0;
}

TERN_EXPORT tern_segment_id tern_segment_open(tern_engine *e, const char *name)
{
    if (!e)
        return TERN_ERR_INVAL;
    char msg[TERN_ERRMSG_MAX] = "";
    tern_segment_id id = tern_segments_open(&e->segs, name, msg, sizeof msg);
    if (id < 0)
        return tern_engine_fail(e, id, "%s", msg);
    tern_engine_clear_error(e);
    return id;
}

TERN_EXPORT int tern_segment_close(tern_engine *e, tern_segment_id id)
{
    if (!e)
        return TERN_ERR_INVAL;
    char msg[TERN_ERRMSG_MAX] = "";
    int rc = tern_segments_close(&e->segs, id, msg, sizeof msg);
    return rc ? tern_engine_fail(e, rc, "%s", msg) : 0;
}

TERN_EXPORT int tern_segment_descriptor(tern_engine *e, tern_segment_id id, char **json_out)
{
    if (!e || !json_out)
        return e ? tern_engine_fail(e, TERN_ERR_INVAL, "segment_descriptor: json_out is NULL")
                 : TERN_ERR_INVAL;
    *json_out = NULL;
    if (id == TERN_LOCAL_SEGMENT) {
        *json_out = tern_memory_json(&e->mem);
    } else {
        tern_segment *s = tern_segments_get(&e->segs, id);
        if (!s)
            return tern_engine_fail(e, TERN_ERR_NOT_FOUND,
                                    "segment_descriptor: no open segment %d", (int)id);
        *json_out = tern_segments_json(s);
    }
    return *json_out ? 0 : tern_engine_fail(e, TERN_ERR_NOT_FOUND, "no descriptor");
}

TERN_EXPORT int tern_segment_transport(tern_engine *e, tern_segment_id id, char *name,
                                       size_t namelen)
{
    if (!e || !name || !namelen)
        return e ? tern_engine_fail(e, TERN_ERR_INVAL, "segment_transport: no output buffer")
                 : TERN_ERR_INVAL;
    tern_segment *s = tern_segments_get(&e->segs, id);
    if (!s)
        return tern_engine_fail(e, TERN_ERR_NOT_FOUND, "segment_transport: no open segment %d",
                                (int)id);
    tern_strlcpy(name, tern_segments_transport(&e->segs, s), namelen);
    return 0;
}

TERN_EXPORT int tern_segment_probe(tern_engine *e, const char *name, int timeout_ms)
{
    if (!e || !name || !*name)
        return e ? tern_engine_fail(e, TERN_ERR_INVAL, "segment_probe: name is empty")
                 : TERN_ERR_INVAL;
    char msg[TERN_ERRMSG_MAX] = "";
    int tmo = timeout_ms > 0 ? timeout_ms : e->cfg->io_timeout_ms;
    int rc = tern_segments_probe(&e->segs, name, tmo, msg, sizeof msg);
    if (rc)
        return tern_engine_fail(e, rc, "segment_probe: %s", msg);
    tern_engine_clear_error(e);
    return 0;
}
