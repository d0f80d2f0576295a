/* core/engine.h: the engine's internal state, shared by the engine files
 * (engine.c lifecycle, engine_memory.c, engine_segment.c, engine_handler.c,
 * engine_endpoint.c, negotiate.c) and the data path (batch.c,
 * batch_progress.c).  Owner: engine. */
#ifndef TERN_CORE_ENGINE_H
#define TERN_CORE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "desc.h"
#include "epstore.h"
#include "handshake.h"
#include "metadata.h"
#include "plugin.h"
#include "tern/tern.h"
#include "tern/transport.h"
#include "topology.h"

#define TERN_EXPORT __attribute__((visibility("default")))
#define TERN_ERRMSG_MAX 1024
#define TERN_MAX_SEGMENTS 4096
#define TERN_NOTIFY_QUEUE 1024
#define TERN_TAIL_SLACK (16u * 1024u) /* a tail up to slice + 16 KiB stays one slice */

struct tern_engine;

/* An active endpoint connect in flight for one key (serialises misses and
 * drives the simultaneous-open tie-break; see engine_endpoint.c). */
typedef struct tern_connecting {
    char key[400];
    char local_nic_path[320];
    int yielded;      /* a passive endpoint was inserted meanwhile */
    int sent;         /* sent_digest holds the SHA-256 of our Connection frame */
    uint8_t sent_digest[32]; /* so our daemon can confirm it (peer_check.h) */
    int done, rc;     /* outcome, shared with the threads that waited */
    int waiters;      /* the last one out frees it */
    char err[512];
    struct tern_connecting *next;
} tern_connecting;

/* One loaded transport, in configuration (preference) order. */
typedef struct tern_xport {
    struct tern_engine *eng;
    tern_plugin *pl;              /* points into eng->plugins */
    const tern_transport *ops;
    tern_topology *topo;
    tern_epstore *eps;
    tern_desc *blob;              /* segment_describe output */
    uint64_t slice_size;
    pthread_t progress;
    int progress_started;
    int progress_polls;           /* a progress thread calls ops->poll */
    atomic_int progress_stop;
    pthread_t retrier;            /* resubmits failed slices (batch_progress.c) */
    pthread_mutex_t retry_lock;   /* slices waiting to be retried */
    pthread_cond_t retry_cond;
    struct tern_cslice *retry_head;
    pthread_mutex_t conn_lock;    /* guards `connecting` */
    pthread_cond_t conn_cond;
    tern_connecting *connecting;
} tern_xport;

/* One registered memory range. */
typedef struct tern_membuf {
    uint64_t addr, len;
    char location[TERN_LOCATION_MAX];
    void *mr[TERN_DESC_MAX_TRANSPORTS];
    tern_mr_keys keys[TERN_DESC_MAX_TRANSPORTS];
} tern_membuf;

/* An opened peer segment. */
typedef struct tern_segment {
    int used;
    char name[256];
    int xport;                    /* index into eng->xports */
    uint64_t gen;                 /* bumped on every open: a reused slot is
                                     not the segment a slice was cut for */
    pthread_rwlock_t lock;        /* guards desc/st (refetch replaces them) */
    tern_segment_desc *desc;
    const tern_seg_transport *st;
} tern_segment;

typedef struct tern_notification {
    char from[256], name[256];
    char *msg;
} tern_notification;

/* Thread-local last-error buffers are tracked so destroy frees them all. */
typedef struct tern_errbuf {
    char msg[TERN_ERRMSG_MAX];
    struct tern_errbuf *next;
} tern_errbuf;

struct tern_engine {
    tern_config *cfg;
    char server_name[300];
    tern_plugin_set plugins;
    tern_xport xports[TERN_DESC_MAX_TRANSPORTS];
    size_t nxports;
    tern_metadata *md;
    tern_hs_server *hs;

    /* last error: per engine and per thread */
    pthread_key_t errkey;
    pthread_mutex_t errlock;
    tern_errbuf *errbufs;

    /* registered memory, sorted by addr, and our published descriptor */
    pthread_rwlock_t memlock;
    tern_membuf *bufs;
    size_t nbufs, capbufs;
    tern_segment_desc *local_desc; /* decoded copy of local_json */
    char *local_json;

    /* opened segments */
    pthread_mutex_t seglock;
    tern_segment *segs[TERN_MAX_SEGMENTS];

    /* received notifications (ring, drop oldest when full) */
    pthread_mutex_t notelock;
    tern_notification notes[TERN_NOTIFY_QUEUE];
    size_t note_head, note_count;
    uint64_t notes_dropped;

    atomic_int stopping;
    atomic_long batches_live;
    struct tern_auth *auth;       /* auth_secret_file's secret, or NULL (hardening) */
};

/* ---- engine.c ---- */
int tern_engine_fail(const tern_engine *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tern_engine_clear_error(const tern_engine *e);
void tern_engine_log(void *arg, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- engine_memory.c ---- */
/* Rebuild, store and publish our descriptor (memlock held for writing). */
int tern_engine_publish_locked(tern_engine *e, char *err, size_t errlen);
/* Registered buffer holding addr (memlock held), or NULL. */
const tern_membuf *tern_engine_find_buf(const tern_engine *e, uint64_t addr);
void tern_engine_memory_free(tern_engine *e);
/* Bytes of [addr, addr+len) covered by adjacent registered buffers from addr
 * (memlock held): equals len when the range is fully registered. */
uint64_t tern_engine_covered(const tern_engine *e, uint64_t addr, uint64_t len);

/* ---- negotiate.c ---- */
/* First of local[] (preference order) that is loaded here and that the
 * peer lists; returns its index in local[], or TERN_ERR_NO_TRANSPORT with
 * both lists named in err. */
int tern_negotiate(const char *const *local, size_t nlocal, const int *loaded,
                   const char *const *peer, size_t npeer, const char *peer_name,
                   char *err, size_t errlen);

/* ---- engine_segment.c ---- */
tern_segment *tern_engine_segment(tern_engine *e, tern_segment_id id);
/* Fetch and decode the descriptor of `name` again (stale target). */
int tern_segment_refetch(tern_engine *e, tern_segment *s, char *err, size_t errlen);
void tern_engine_segments_free(tern_engine *e);

/* ---- engine_handler.c ---- */
int tern_engine_hs_handler(void *arg, int type, const char *json, size_t len,
                           char **reply, size_t *replylen);
void tern_engine_notes_free(tern_engine *e);

/* ---- engine_endpoint.c ---- */
/* Endpoint for (local device, peer NIC path) on transport x: from the
 * store, or created (handshake when the transport needs it).  *ref is held;
 * release with tern_epstore_release(x->eps, *ref). */
int tern_endpoint_get(tern_xport *x, tern_segment *seg, const tern_path *path,
                      void **ep, tern_ep_ref **ref, char *err, size_t errlen);
/* Passive side of a Connection frame: reply JSON (malloc()ed). */
char *tern_endpoint_accept(tern_engine *e, const char *json, size_t len);
void tern_endpoint_close_cb(void *arg, void *ep);
/* Drop the failed endpoint `bad` from the store (unless the key already
 * holds a fresh one) so a retry builds a new one. */
void tern_endpoint_drop(tern_xport *x, int local_dev, const char *peer_nic_path, void *bad);

/* ---- batch_progress.c ---- */
int tern_progress_start(tern_xport *x, char *err, size_t errlen);
/* The host service complete(): finish a slice a transport handed back. */
void tern_slice_complete(tern_slice *s);
void tern_progress_stop(tern_xport *x);

/* ---- batch.c: test hooks ---- */
/* Length of the next slice for `remaining` bytes (the tail rule). */
uint64_t tern_slice_next(uint64_t remaining, uint64_t slice_size);
/* Slices a request was cut into (first attempt), or a negative code. */
int tern_batch_slice_count(tern_batch *b, size_t index);

#endif
