/* core/engine/engine_state.h: what an engine is made of.  Each member is an
 * object that owns its lock and its file (xport.c, memory.c, segments.c,
 * notify.c, datapath/); engine.c builds and tears them down in order.  The
 * struct is here, apart from engine.c, so the files that serve the public
 * API and the daemon (datapath/, engine/endpoint.c, engine_handler.c,
 * notify.c, engine_error.c) can reach the objects without depending on
 * engine.c.  No function is declared here. */
#ifndef TERN_CORE_ENGINE_STATE_H
#define TERN_CORE_ENGINE_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "config/config.h"
#include "host/cuda.h"
#include "base/log.h"
#include "base/gate.h"
#include "control/handshake.h"
#include "memory/memory.h"
#include "peer/metadata.h"
#include "plugin/plugin.h"
#include "peer/segments.h"
#include "tern/tern.h"
#include "plugin/xport.h"

#define TERN_EXPORT __attribute__((visibility("default")))
#define TERN_ERRMSG_MAX 1024

struct tern_notes;   /* notify.c */
struct tern_dp;      /* datapath/dispatch.c */
struct tern_errbuf;  /* engine_error.c */
struct tern_stats_obj; /* stats.c */
struct tern_metrics; /* metrics.c */

struct tern_engine {
    tern_config *cfg;
    char server_name[300];
    tern_logger log;              /* every object logs through it (log.c) */
    tern_plugin_set plugins;
    tern_xport xports[TERN_DESC_MAX_TRANSPORTS]; /* loaded, in preference order */
    size_t nxports;
    tern_metadata *md;
    tern_hs_server *hs;
    struct tern_auth *auth;       /* auth_secret_file's secret, or NULL */
    struct tern_addrbook *book;   /* peers' other handshake addresses (addrbook.c) */
    tern_cuda *cuda;              /* the CUDA driver, loaded on first use */
    struct tern_allocs *allocs;   /* tern_alloc_memory's shared memory (allocs.c) */

    tern_memory mem;              /* registrations and our descriptor */
    tern_segments segs;           /* peers */
    struct tern_notes *notes;     /* notifications received */
    struct tern_dp *dp;           /* the data path's workers */
    struct tern_stats_obj *stats; /* counters (stats.c) */
    struct tern_metrics *metrics; /* the Prometheus endpoint, NULL when off */

    /* last error: per engine and per thread (engine_error.c) */
    pthread_key_t errkey;
    pthread_mutex_t errlock;
    struct tern_errbuf *errbufs;

    tern_gate gate;               /* blocked calls, woken by tern_engine_close */
    atomic_int stopping;
};

#endif
