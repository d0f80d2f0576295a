/* core/stats.h: the engine's statistics: one counter set for the engine,
 * one per transport and one per peer (segment name), read by
 * tern_engine_stats (include/tern/tern.h) and the Prometheus endpoint
 * (metrics.c).
 *
 * Counting takes no lock: every counter is an atomic updated relaxed from
 * whichever thread sees the event (application, transport or worker
 * thread).  Only the peer table has a lock, taken when a segment is opened
 * and when the sets are read.  A peer's set lives until the engine goes,
 * so a set pointer kept by a request or a segment never dangles. */
#ifndef TERN_CORE_STATS_H
#define TERN_CORE_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "tern/tern.h"

typedef struct tern_stat_set {
    _Atomic uint64_t ops[2], bytes[2], failures[2];
    _Atomic uint64_t errors[TERN_STATS_ERRORS];
    _Atomic uint64_t retries, refetches, fallbacks, heals;
    _Atomic int64_t in_flight;
    _Atomic uint64_t lat_sum_ns[2];
    _Atomic uint64_t lat[2][TERN_STATS_BUCKETS];
} tern_stat_set;

typedef enum tern_stat_event {
    TERN_STAT_RETRY,
    TERN_STAT_REFETCH,
    TERN_STAT_FALLBACK,
    TERN_STAT_HEAL,
} tern_stat_event;

typedef struct tern_stats_obj tern_stats_obj;

/* on: 0 (config `stats: false`) makes every count a no-op. */
tern_stats_obj *tern_stats_create(int on);
void tern_stats_free(tern_stats_obj *s);
/* Name transport slot i (the engine's preference order). */
void tern_stats_set_transport(tern_stats_obj *s, int i, const char *name);
/* The set of peer `name`, made on first use; NULL when counting is off or
 * on no memory (the peer is then counted in the engine's set only). */
tern_stat_set *tern_stats_peer(tern_stats_obj *s, const char *name);

/* The data path's events.  peer may be NULL, xport < 0 (not routed yet). */
void tern_stats_start(tern_stats_obj *s, tern_stat_set *peer);
void tern_stats_bytes(tern_stats_obj *s, tern_stat_set *peer, int xport, int op,
                      uint64_t n);
/* A request ended: started says tern_stats_start counted it; code 0 is
 * COMPLETED (latency recorded), else the failure's code. */
void tern_stats_end(tern_stats_obj *s, tern_stat_set *peer, int xport, int op, int started,
                    int code, uint64_t ns);
void tern_stats_event(tern_stats_obj *s, tern_stat_set *peer, int xport, tern_stat_event ev);

/* Calls fn for the engine, each transport, then each peer, with a
 * snapshot; stops at fn's first non-zero return and returns it. */
int tern_stats_each(tern_stats_obj *s, const char *engine_name, tern_stats_fn fn,
                    void *arg);

#endif
