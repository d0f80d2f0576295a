/* core/plugin/xport.h: one loaded transport and what the core keeps for it: the
 * plugin, its topology (devices, NUMA lists, down flags), its endpoint
 * store, its segment-level address blob and the connects in flight.
 *
 * Lock: conn_lock guards `connecting` (see engine/endpoint.c).  The data
 * path releases endpoints inside complete() without closing them
 * (tern_epstore_release_deferred): they wait for tern_xport_reap(), which
 * the data path's workers call, so ep_close never runs inside complete(). */
#ifndef TERN_CORE_XPORT_H
#define TERN_CORE_XPORT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "config/config.h"
#include "desc/desc.h"
#include "plugin/epstore.h"
#include "plugin/plugin.h"
#include "tern/transport.h"
#include "host/topology.h"

struct tern_engine;

/* An active endpoint connect in flight for one key (serialises misses and
 * drives the simultaneous-open tie-break; see engine/endpoint.c). */
typedef struct tern_connecting {
    char key[400];
    char local_nic_path[320];
    int yielded;      /* a passive endpoint was inserted meanwhile */
    int replace;      /* replaces the endpoint held for the key (peer_check.h, recheck) */
    int sent;         /* sent_digest holds the SHA-256 of our Connection frame */
    uint8_t sent_digest[32]; /* so our daemon can confirm it (peer_check.h) */
    int done, rc;     /* outcome, shared with the threads that waited */
    int waiters;      /* the last one out frees it */
    char err[512];
    struct tern_connecting *next;
} tern_connecting;

#define TERN_GPU_NEAR_MAX 16 /* GPUs per host with a preferred NIC */

/* A bounded set of strings; when full, the oldest is forgotten. */
typedef struct tern_strset {
    char **v;
    size_t n;
} tern_strset;

typedef struct tern_xport {
    struct tern_engine *eng;      /* the endpoint code reads cfg, auth, name */
    const struct tern_logger *log; /* the engine's (log.h): devices down and up */
    int index;                    /* in the engine's preference order */
    tern_plugin *pl;
    const tern_transport *ops;
    tern_topology *topo;
    tern_epstore *eps;
    tern_desc *blob;              /* segment_describe output */
    uint64_t slice_size;
    pthread_mutex_t conn_lock;    /* `connecting` */
    pthread_cond_t conn_cond;
    tern_connecting *connecting;
    /* under conn_lock: the last key whose connect ended UNREACHABLE, for
     * which segment and descriptor (its slot, open generation and
     * descriptor generation), when, and why: a slice that comes for the
     * same in the next second (routed before its segment moved to another
     * transport) gets that outcome instead of asking the transport again;
     * a descriptor fetched since (a restarted peer) is asked afresh
     * (engine/endpoint.c) */
    char unreach_key[400];
    char unreach_err[512];
    const void *unreach_seg;
    uint64_t unreach_gen, unreach_desc_gen;
    uint64_t unreach_ms;
    /* under conn_lock, kept by peer_check.c (handshake_confirm: false):
     * peers ("host:port") whose unconfirmed Connection was logged, and the
     * endpoint keys whose current endpoint a Connection brought up; freed
     * by tern_xport_fini */
    tern_strset unconfirmed;
    tern_strset passive_keys;
    /* keys of passive endpoints made before we opened their peer's
     * segment: replaced by a fresh handshake on first use (peer_check.h);
     * nrecheck (its size) spares the lookup its lock while it is empty */
    tern_strset recheck_keys;
    atomic_int nrecheck;
    /* device health: a device marked down comes back for a trial after its
     * hold time (doubling on each new failure, see tern_xport_device_*) */
    _Atomic uint64_t up_at_ms[TERN_MAX_DEVICES];
    _Atomic uint32_t down_count[TERN_MAX_DEVICES];
    /* The device closest to GPU N ("" none), found when memory of GPU N is
     * first registered (docs/gpu.md, Topology): written with the memory
     * lock held exclusive, read by path choice with it held shared. */
    char gpu_near[TERN_GPU_NEAR_MAX][TERN_NAME_MAX];
    unsigned char gpu_near_known[TERN_GPU_NEAR_MAX];
} tern_xport;

/* Topology, endpoint store and address blob for plugin p. */
int tern_xport_init(tern_xport *x, struct tern_engine *eng, int index, const tern_config *cfg,
                    tern_plugin *p, char *err, size_t errlen);
/* Closes every endpoint; call when no slice is in flight. */
void tern_xport_fini(tern_xport *x);
/* Close endpoints released inside complete() (see the header comment). */
void tern_xport_reap(tern_xport *x);

/* A device failed (TERN_ERR_DEVICE): down for its hold time. */
void tern_xport_device_failed(tern_xport *x, int dev);
/* A slice succeeded on dev: its hold time starts small again. */
void tern_xport_device_ok(tern_xport *x, int dev);
/* Devices whose hold time passed are marked up again (a probe: the next
 * slice on it shows whether it works).  Cheap; called before path choice. */
void tern_xport_device_revive(tern_xport *x, uint64_t now_ms);

/* A plugin's message without a leading "<plugin name>: ", so the core's
 * own prefix does not show the name twice. */
const char *tern_xport_msg(const tern_xport *x, const char *msg);

#endif
