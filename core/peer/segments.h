/* core/peer/segments.h: the peers' segments this engine opened, their
 * descriptors and what healing needs per peer.
 *
 * Locks: `lock` of the table guards the slots; each segment's rwlock
 * guards its descriptor, negotiated transport and generation (the data
 * path reads them shared); `heal_lock` serialises refetches of one peer.
 * Segment structs live until the engine goes: close only drops the
 * descriptor, so a slice racing a close sees "closed", not freed memory.
 *
 * Healing (docs/architecture.md): a refetch attaches the peer's current
 * descriptor; a newer generation (the descriptor's timestamp) drops every
 * endpoint to the peer so the next slice connects to what the new
 * descriptor says.  A transport that reports TERN_ERR_UNREACHABLE for the
 * peer is skipped from then on (until the peer publishes a new
 * generation) and negotiation moves to the next common one.  Failures
 * push the peer's next allowed attempt out (backoff), successes reset it. */
#ifndef TERN_CORE_SEGMENTS_H
#define TERN_CORE_SEGMENTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "config/config.h"
#include "desc/desc.h"
#include "desc/segment_desc.h"
#include "peer/metadata.h"
#include "peer/spread.h"
#include "tern/tern.h"
#include "plugin/xport.h"

struct tern_cslice; /* datapath/request.h */
struct tern_stat_set; /* stats.h */
struct tern_stats_obj;

#define TERN_MAX_SEGMENTS 4096
#define TERN_REFETCH_MIN_MS 100   /* at most one descriptor fetch per peer per this */
#define TERN_BACKOFF_MIN_MS 20    /* first wait after a failed attempt */
#define TERN_BACKOFF_MAX_MS 500   /* the wait doubles up to this */

typedef struct tern_segment {
    int used;
    char name[256];
    uint64_t gen;                 /* bumped on every open: a reused slot is
                                     not the segment a slice was cut for */
    pthread_rwlock_t lock;        /* desc, st, xport, desc_gen, unreachable */
    tern_segment_desc *desc;
    const tern_seg_transport *st;
    int xport;                    /* index into the transports */
    uint64_t desc_gen;            /* generation of desc (its timestamp) */
    uint32_t unreachable;         /* bit i: transport i cannot reach the peer */
    pthread_mutex_t heal_lock;    /* one refetch at a time; last_fetch_ns */
    uint64_t last_fetch_ns;
    pthread_mutex_t park_lock;    /* connecting, parked */
    int connecting;               /* a worker is connecting to the peer */
    struct tern_cslice *parked;   /* slices waiting for that connect's outcome */
    _Atomic int fails;            /* consecutive failed attempts */
    _Atomic uint64_t fail_epoch;  /* failed attempts (one per backoff window): a
                                     slice that waited meanwhile shares them */
    int fail_code;                /* the last one's code and reason (park_lock) */
    char fail_why[256];
    _Atomic uint64_t retry_at_ms; /* no new attempt before (0: now) */
    pthread_mutex_t probe_lock;   /* one liveness probe at a time; the fields below */
    uint64_t probe_ns;            /* when the last probe started (0: never) */
    uint64_t probe_end_ns;        /* and when it ended */
    int probe_rc;                 /* its outcome: 0 alive, else the error */
    char probe_why[256];
    /* this peer's counters (stats.c), set at open; they outlive a reuse
     * of the slot by another peer */
    struct tern_stat_set *_Atomic stats;
    /* load of each NIC pair to this peer (spread.h: atomics, no lock);
     * reset when the slot is opened for a peer */
    tern_spread spread;
} tern_segment;

typedef struct tern_segments {
    pthread_mutex_t lock;
    tern_segment *segs[TERN_MAX_SEGMENTS];
    tern_xport *xports;
    size_t nxports;
    tern_metadata *md;
    const tern_config *cfg;
    const struct tern_logger *log; /* the engine's (log.h) */
    const struct tern_auth *auth; /* the shared secret for probes, or NULL */
    struct tern_stats_obj *stats; /* refetches, heals, fallbacks are counted here */
    /* Called for each transport when a segment is newly opened (the engine
     * sets it: tern_peer_check_opened, which segments.c may not include). */
    void (*opened)(tern_xport *x, const char *peer);
} tern_segments;

void tern_segments_init(tern_segments *t);
void tern_segments_bind(tern_segments *t, tern_xport *xports, size_t nxports,
                        tern_metadata *md, const tern_config *cfg,
                        const struct tern_logger *log);
void tern_segments_fini(tern_segments *t);

tern_segment_id tern_segments_open(tern_segments *t, const char *name, char *err,
                                   size_t errlen);
/* Drops the descriptor and every endpoint to the peer. */
int tern_segments_close(tern_segments *t, tern_segment_id id, char *err, size_t errlen);
tern_segment *tern_segments_get(tern_segments *t, tern_segment_id id);
/* The descriptor as JSON (malloc()ed) or NULL. */
char *tern_segments_json(tern_segment *s);
/* Name of the transport negotiated for s. */
const char *tern_segments_transport(tern_segments *t, tern_segment *s);
/* A copy of the peer's address blob for transport xname (or an empty one)
 * when we have its segment open: what a passive endpoint gets. */
tern_desc *tern_segments_peer_blob(tern_segments *t, const char *peer, const char *xname);

/* Fetch the descriptor again unless a fetch started after since_ns
 * (tern_now_ns; 0: always).  At most one fetch per TERN_REFETCH_MIN_MS per
 * peer: inside that window it fetches nothing and returns
 * TERN_REFETCH_LATER with the time to come back in *later_ms.  Else 1 when
 * a newer generation was attached, 0 when it is unchanged (or fresh
 * enough), or an error with the reason in err. */
#define TERN_REFETCH_LATER 2
int tern_segment_refetch(tern_segments *t, tern_segment *s, uint64_t since_ns,
                         uint64_t *later_ms, char *err, size_t errlen);
/* The same for a fetch the application asked for (tern_segment_buffers,
 * tern_segment_buffer_find): the rate limit, which keeps failing slices
 * from flooding a peer, does not apply; the application's calls are its
 * rate.  Never TERN_REFETCH_LATER. */
int tern_segment_refetch_asked(tern_segments *t, tern_segment *s, uint64_t since_ns, char *err,
                               size_t errlen);
/* Transport xport said TERN_ERR_UNREACHABLE for s: negotiate again without
 * it.  0 when another transport took over (logged once), else
 * TERN_ERR_NO_TRANSPORT with the reason. */
int tern_segment_unreachable(tern_segments *t, tern_segment *s, int xport, char *err,
                             size_t errlen);
/* Backoff: a failed attempt pushes the next one out (once per window) and
 * returns the failure epoch; a success resets the backoff. */
uint64_t tern_segment_failed(tern_segment *s, int code, const char *why);
/* The last failure's code and reason, for slices that shared it. */
int tern_segment_fail_reason(tern_segment *s, char *why, size_t whylen);
void tern_segment_ok(tern_segment *s);

/* Liveness (docs/configuration.md, Stalled peers): a Probe frame to the
 * daemon at `name`, connect and reply each within timeout_ms.  0 when it
 * answered, else TERN_ERR_TIMEOUT (connected, no answer: stalled),
 * TERN_ERR_CONNECT (nothing listens), ... with the reason in err. */
struct tern_auth;
void tern_segments_set_auth(tern_segments *t, const struct tern_auth *auth);
int tern_segments_probe(tern_segments *t, const char *name, int timeout_ms, char *err,
                        size_t errlen);
/* The data path's question after a slice of s timed out at since_ns: is the
 * peer alive?  A probe that started after since_ns answers for every slice
 * that failed before it, and one that went unanswered past since_ns says
 * "silent" for it too; else this call probes (io_timeout_ms; one at a time
 * per peer, the others wait for its verdict). */
int tern_segment_alive(tern_segments *t, tern_segment *s, uint64_t since_ns, char *err,
                       size_t errlen);

#endif
