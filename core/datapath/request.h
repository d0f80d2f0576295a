/* core/datapath/request.h: slices, and the request state changes every
 * stage of the data path shares (see docs/architecture.md, Data path).
 *
 * Lock: the batch lock guards its requests' state; a stage that holds a
 * slice (tern_cslice) owns it alone until it hands it to the next stage.
 * A request ends (COMPLETED, FAILED, TIMEOUT) once; a FAILED request is
 * published only when its last live slice is back, so the application
 * never sees a final status while a transport may still touch its memory. */
#ifndef TERN_CORE_DATAPATH_REQUEST_H
#define TERN_CORE_DATAPATH_REQUEST_H

#include "datapath/batch_state.h"

/* A slice and the core's bookkeeping (s.core points back here). */
typedef struct tern_cslice {
    tern_slice s;
    tern_batch *b;
    size_t idx;            /* request index */
    tern_segment *seg;
    uint64_t seg_gen;      /* seg->gen when cut */
    uint64_t desc_gen;     /* the peer descriptor's generation when routed */
    uint64_t offset;       /* within the request */
    int attempt;           /* failed attempts so far; the retry count for path choice */
    int whole;             /* not cut yet: the worker refetches, checks, cuts */
    int refetch;           /* refetch the peer's descriptor before the next route */
    int range;             /* the target refused the range: retry only on a newer
                              descriptor that covers it */
    int unreach;           /* the transport said TERN_ERR_UNREACHABLE */
    int probe;             /* timed out: ask whether the peer is alive before a retry */
    uint64_t epoch;        /* the peer's failure epoch this slice has counted */
    uint64_t failed_ns;    /* when the last attempt failed (a refetch that
                              started later is fresh enough) */
    uint64_t due_ms;       /* queued: not before this */
    tern_xport *x;         /* transport of the last route */
    tern_ep_ref *ref;      /* endpoint held while the transport owns it */
    int local_dev;
    int pair;              /* slot in the segment's spread table (spread.h), -1: none */
    int moves;             /* times sent again because its pair stalled */
    uint64_t sent_ns;      /* when routed to that pair */
    int gpu;               /* GPU ordinal of the local memory, -1 host */
    void *stage;           /* held by the stager (datapath/stage.c), else NULL */
    char peer_nic_path[320];
    struct tern_cslice *next, *prev; /* queue links */
} tern_cslice;

/* Request idx has its final status: count it, advance its notification,
 * wake the waiters (batch lock held). */
void tern_req_publish_locked(tern_batch *b, size_t idx);
/* Fail request idx (batch lock held) unless it already ended. */
void tern_req_fail_locked(tern_batch *b, size_t idx, tern_status st, int code,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Live (neither ended nor ending): its slices may still move data. */
int tern_req_active_locked(const tern_req *q);
/* cs leaves its NIC pair's in-flight count (ok as for tern_spread_done: 1
 * done, 0 the pair failed it, -1 taken back for another reason); no-op
 * when it has none. */
void tern_cslice_unpair(tern_cslice *cs, int ok);
/* Drop one live slice of b: releases its endpoint (never closing it here:
 * returns 1 when a worker must reap it), frees cs (lock held). */
int tern_cslice_free_locked(tern_cslice *cs);
/* Fail cs's request with why and drop cs (takes the batch lock). */
void tern_cslice_fail(tern_cslice *cs, int code, const char *why);
/* Drop cs quietly when its request already ended; returns 1 if dropped. */
int tern_cslice_drop_if_ended(tern_cslice *cs);

#endif
