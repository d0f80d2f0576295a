/* core/engine.c: engine lifecycle (create, destroy), logging and the
 * per-engine, per-thread last error.
 *
 * Creation order: config -> transports (plugins) -> a topology, endpoint
 * store and address blob per loaded transport -> metadata backend ->
 * handshake daemon (its real port rewrites server_name when it was 0) ->
 * progress threads -> the first published descriptor.  Any failure tears
 * down what was built, in reverse, and returns NULL with the reason. */
#include "engine.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "topology_load.h"
#include "util.h"

/* ---- logging ------------------------------------------------------------ */

void tern_engine_log(void *arg, int level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    const tern_engine *e = arg;
    int max = e && e->cfg ? e->cfg->log_level : TERN_LOG_INFO;
    if (level > max)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int l = level < 0 ? 0 : level > 3 ? 3 : level;
    fprintf(stderr, "tern[%s] %s\n", names[l], msg);
}

/* ---- last error: one buffer per (engine, thread) ---------------------------- */

static tern_errbuf *errbuf_get(const tern_engine *ce, int create)
{
    tern_engine *e = (tern_engine *)ce;
    tern_errbuf *b = pthread_getspecific(e->errkey);
    if (b || !create)
        return b;
    b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    pthread_mutex_lock(&e->errlock); /* destroy frees every buffer */
    b->next = e->errbufs;
    e->errbufs = b;
    pthread_mutex_unlock(&e->errlock);
    pthread_setspecific(e->errkey, b);
    return b;
}

int tern_engine_fail(const tern_engine *e, int code, const char *fmt, ...)
{
    tern_errbuf *b = e ? errbuf_get(e, 1) : NULL;
    if (!b)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
    return code;
}

void tern_engine_clear_error(const tern_engine *e)
{
    tern_errbuf *b = e ? errbuf_get(e, 0) : NULL;
    if (b)
        b->msg[0] = '\0';
}

TERN_EXPORT const char *tern_engine_last_error(const tern_engine *e)
{
    tern_errbuf *b = e ? errbuf_get(e, 0) : NULL;
    return b ? b->msg : "";
}

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
    if (pthread_key_create(&e->errkey, NULL) != 0) {
        free(e);
        return NULL;
    }
    pthread_mutex_init(&e->errlock, NULL);
    pthread_rwlock_init(&e->memlock, NULL);
    pthread_mutex_init(&e->seglock, NULL);
    pthread_mutex_init(&e->notelock, NULL);
    return e;
}

/* Slice size: the plugin's setting, else the transport's default, else the
 * engine's slice_size. */
static uint64_t xport_slice_size(const tern_engine *e, const tern_plugin *p)
{
    if (p->slice_size)
        return p->slice_size;
    if (p->ops->default_slice_size)
        return p->ops->default_slice_size;
    return e->cfg->slice_size ? e->cfg->slice_size : 65536;
}

static int xport_topology(tern_engine *e, tern_xport *x, char *err, size_t errlen)
{
    return tern_topology_load(e->cfg, x->pl->devices, x->pl->ndevices, &x->topo, err, errlen);
}

static int xport_init(tern_engine *e, tern_xport *x, tern_plugin *p, char *err, size_t errlen)
{
    x->eng = e;
    x->pl = p;
    x->ops = p->ops;
    x->slice_size = xport_slice_size(e, p);
    pthread_mutex_init(&x->conn_lock, NULL);
    pthread_cond_init(&x->conn_cond, NULL);
    int rc = xport_topology(e, x, err, errlen);
    if (rc)
        return rc;
    x->eps = tern_epstore_create(e->cfg->endpoint_cache ? e->cfg->endpoint_cache : 256,
                                 e->cfg->eviction, tern_endpoint_close_cb, x);
    x->blob = tern_desc_new();
    if (!x->eps || !x->blob)
        return tern_errf(err, errlen, TERN_ERR_NOMEM, "out of memory");
    rc = p->ops->segment_describe(p->ctx, x->blob);
    if (rc)
        return tern_errf(err, errlen, rc, "transport %s: segment_describe failed: %s", p->name,
                         tern_strerror(rc));
    return 0;
}

static int engine_load_transports(tern_engine *e, char *err, size_t errlen)
{
    int rc = tern_plugins_load(e->cfg, tern_engine_log, e, &e->plugins, err, errlen);
    if (rc)
        return rc;
    tern_plugins_set_completion(&e->plugins, tern_slice_complete);
    for (size_t i = 0; i < e->plugins.n; i++) {
        tern_plugin *p = &e->plugins.plugins[i];
        if (p->outcome != TERN_LOAD_OK || !p->ops)
            continue;
        if (e->nxports == TERN_DESC_MAX_TRANSPORTS)
            return tern_errf(err, errlen, TERN_ERR_CONFIG, "more than %d transports loaded",
                             TERN_DESC_MAX_TRANSPORTS);
        tern_xport *x = &e->xports[e->nxports++];
        rc = xport_init(e, x, p, err, errlen);
        if (rc)
            return rc;
    }
    if (!e->nxports)
        return tern_errf(err, errlen, TERN_ERR_PLUGIN, "no transport loaded");
    return 0;
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
        .handler = tern_engine_hs_handler, .arg = e, .auth = e->auth, .log = tern_engine_log};
    rc = tern_hs_server_start(&o, &e->hs, err, errlen);
    if (rc)
        return rc;
    port = tern_hs_server_port(e->hs);
    snprintf(e->server_name, sizeof e->server_name, strchr(host, ':') ? "[%s]:%u" : "%s:%u",
             host, (unsigned)port);
    tern_plugins_set_server_name(&e->plugins, e->server_name);
    return 0;
}

static int engine_build(tern_engine *e, char *err, size_t errlen)
{
    tern_strlcpy(e->server_name, e->cfg->server_name, sizeof e->server_name);
    /* The shared secret first: a bad auth_secret_file stops the engine. */
    int rc = e->cfg->auth_secret_file
                 ? tern_auth_load(e->cfg->auth_secret_file, &e->auth, err, errlen) : 0;
    if (!rc)
        rc = engine_load_transports(e, err, errlen);
    if (!rc)
        rc = tern_metadata_open(e->cfg, &e->md, err, errlen);
    if (!rc)
        tern_metadata_set_auth(e->md, e->auth);
    if (!rc)
        rc = engine_start_daemon(e, err, errlen);
    for (size_t i = 0; !rc && i < e->nxports; i++)
        rc = tern_progress_start(&e->xports[i], err, errlen);
    if (!rc) {
        pthread_rwlock_wrlock(&e->memlock);
        rc = tern_engine_publish_locked(e, err, errlen);
        pthread_rwlock_unlock(&e->memlock);
    }
    return rc;
}

static tern_engine *engine_create(tern_config *cfg, int rc, char *err, size_t errlen)
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
    char msg[TERN_ERRMSG_MAX] = "";
    if (engine_build(e, msg, sizeof msg) != 0) {
        tern_errf(err, errlen, -1, "%s", msg[0] ? msg : "engine creation failed");
        tern_engine_destroy(e);
        return NULL;
    }
    tern_engine_log(e, TERN_LOG_INFO, "engine %s up: %zu transport(s), metadata %s",
                    e->server_name, e->nxports, tern_metadata_backend(e->md));
    return e;
}

TERN_EXPORT tern_engine *tern_engine_create(const char *path, char *err, size_t errlen)
{
    tern_config *cfg = NULL;
    int rc = tern_config_load_file(path, &cfg, err, errlen);
    return engine_create(cfg, rc, err, errlen);
}

TERN_EXPORT tern_engine *tern_engine_create_as(const char *path, const char *server_name,
                                               char *err, size_t errlen)
{
    tern_config *cfg = NULL;
    int rc = tern_config_load_file(path, &cfg, err, errlen);
    if (rc == 0 && server_name)
        rc = tern_config_set_server_name(cfg, server_name, err, errlen);
    return engine_create(cfg, rc, err, errlen);
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
    return engine_create(cfg, rc, err, errlen);
}

/* ---- destruction ------------------------------------------------------------ */

static void xport_fini(tern_xport *x)
{
    if (x->eps)
        tern_epstore_destroy(x->eps); /* closes every endpoint */
    if (x->topo)
        tern_topology_free(x->topo);
    tern_desc_free(x->blob);
    pthread_mutex_destroy(&x->conn_lock);
    pthread_cond_destroy(&x->conn_cond);
}

static void engine_unpublish(tern_engine *e)
{
    if (!e->md || !e->local_json)
        return;
    char msg[512];
    if (tern_metadata_unpublish(e->md, e->server_name, msg, sizeof msg) != 0)
        tern_engine_log(e, TERN_LOG_WARN, "unpublish %s: %s", e->server_name, msg);
}

TERN_EXPORT void tern_engine_destroy(tern_engine *e)
{
    if (!e)
        return;
    atomic_store(&e->stopping, 1);
    if (e->hs)
        tern_hs_server_stop(e->hs); /* no handler runs after this */
    for (size_t i = 0; i < e->nxports; i++)
        tern_progress_stop(&e->xports[i]);
    for (size_t i = 0; i < e->nxports; i++)
        xport_fini(&e->xports[i]);
    engine_unpublish(e); /* a clean shutdown removes our key */
    tern_engine_memory_free(e); /* deregisters from every transport */
    if (e->md)
        tern_metadata_close(e->md);
    tern_engine_segments_free(e);
    tern_engine_notes_free(e);
    tern_plugins_unload(&e->plugins);
    tern_config_free(e->cfg);
    tern_auth_free(e->auth);
    pthread_key_delete(e->errkey);
    for (tern_errbuf *b = e->errbufs, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    pthread_mutex_destroy(&e->errlock);
    pthread_rwlock_destroy(&e->memlock);
    pthread_mutex_destroy(&e->seglock);
    pthread_mutex_destroy(&e->notelock);
    free(e);
}
