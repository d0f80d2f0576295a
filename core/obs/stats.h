/* core/obs/stats.h: the engine's statistics: one counter set for the engine,
 * one per transport and one per peer (segment name), read by
 * tern_engine_stats (include/tern/tern.h) and the Prometheus endpoint
 * (metrics.c).
 *
 * Counting takes no lock of its own: every counter is an atomic updated
 * relaxed from whichever thread sees the event (application, transport or
 * worker thread); a batch's COMPLETED requests are added up under the
 * batch lock the completion holds anyway, then flushed.  Only the peer table has a lock, taken when a segment is opened
 * and when the sets are read.  A peer's set lives until the engine goes,
 * so a set pointer kept by a request or a segment never dangles. */
#ifndef TERN_CORE_STATS_H
#define TERN_CORE_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "tern/tern.h"

/* One set of counters, each written with one relaxed atomic add.  What
 * can be derived when the sets are read is not counted: requests
 * COMPLETED are the sum of the latency buckets, in flight is started
 * minus ended, the engine's set is the sum of the transports' (with a
 * slot for requests that never reached a transport).  A submit costs one
 * add per run of requests to one peer (started); a failed request six or
 * so; COMPLETED ones are added up in their batch first (tern_stat_acc). */
typedef struct tern_stat_set {
    _Atomic uint64_t bytes[2], failures[2];
    _Atomic uint64_t started;   /* went PENDING (peer sets) */
    _Atomic uint64_t unstarted; /* failures that never started (INVALID) */
    _Atomic uint64_t errors[TERN_STATS_ERRORS];
    _Atomic uint64_t retries, refetches, fallbacks, heals;
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
 * on no memory (the peer is then counted in a set of no name, part of the
 * engine's totals only). */
tern_stat_set *tern_stats_peer(tern_stats_obj *s, const char *name);

/* Counting on or off from now (bench/bench_stats.c compares both on one
 * engine pair; the configuration's `stats` sets it at creation). */
void tern_stats_enable(tern_stats_obj *s, int on);
/* tern_now_ns() when counting, else 0 (no clock read for nothing). */
uint64_t tern_stats_now(const tern_stats_obj *s);
/* The data path's events.  peer may be NULL, xport < 0 (not routed). */
/* A request ended: started says tern_stats_started counted it; code 0 is
 * COMPLETED (latency ns recorded), else the failure's code; bytes: what
 * it moved. */
void tern_stats_end(tern_stats_obj *s, tern_stat_set *peer, int xport, int op, int started,
                    int code, uint64_t ns, uint64_t bytes);
void tern_stats_event(tern_stats_obj *s, tern_stat_set *peer, int xport, tern_stat_event ev);

/* A batch's COMPLETED requests added up under its lock (plain integers)
 * and added to the shared counters at once: when the batch has no request
 * left running, or when the next one goes to another peer, transport or
 * direction.  A batch of 16 requests to one peer then costs a handful of
 * atomic adds instead of 16 times six.  Counts show once their batch
 * ended. */
typedef struct tern_stat_acc {
    tern_stat_set *peer;
    int xport, op;
    uint64_t n, bytes, sum_ns;
    uint32_t lat[TERN_STATS_BUCKETS];
} tern_stat_acc;
void tern_stats_acc_add(tern_stats_obj *s, tern_stat_acc *a, tern_stat_set *peer, int xport,
                        int op, uint64_t ns, uint64_t bytes);
void tern_stats_flush(tern_stats_obj *s, tern_stat_acc *a);
/* A request COMPLETED inside its own submit call, on the submitting thread
 * (the memcpy transport; tcp's lone small request): added to pend without
 * reading the clock.  tern_stats_resolve, when the submit returns (or when
 * the next one goes to another peer, transport or direction), reads it
 * once and moves pend into a with the submit's duration since t0 as the
 * latency of each: one clock read per submit instead of per request. */
void tern_stats_defer(tern_stats_obj *s, tern_stat_acc *pend, tern_stat_acc *a,
                      tern_stat_set *peer, int xport, int op, uint64_t bytes, uint64_t t0);
void tern_stats_resolve(tern_stats_obj *s, tern_stat_acc *pend, tern_stat_acc *a, uint64_t t0);
/* n requests of one submit started (one add for them all). */
void tern_stats_started(tern_stats_obj *s, tern_stat_set *peer, uint64_t n);

/* Calls fn for the engine, each transport, then each peer, with a
 * snapshot; stops at fn's first non-zero return and returns it. */
int tern_stats_each(tern_stats_obj *s, const char *engine_name, tern_stats_fn fn,
                    void *arg);

#endif
